//! Secrets that are not plain strings (found by an adversarial trial): secret-named inputs of
//! any type (numbers, lists, maps, config values), secret defaults in `validate -f table`, and
//! a literal `api_key` option that a server echoes back in an error.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::BufRead;
use std::io::Write;

use awf_tests::Sandbox;

/// Every file under the sandbox's data root that holds `needle`.
fn files_with(sb: &Sandbox, needle: &str) -> Vec<String> {
    fn walk(dir: &std::path::Path, needle: &str, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, needle, out);
            } else if std::fs::read(&p)
                .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
            {
                out.push(p.display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(&awf_tests::data(sb), needle, &mut out);
    out
}

const TYPED: &str = "name: typed\ninputs:\n  - {name: list_token, type: array}\n  - {name: pin_password, type: integer}\n  - {name: api_token, default: defaulttokenvalue123}\nstates:\n  initial: x\n  x: {type: for_each, items: \"{{.inputs.list_token}}\", body: [e], on_complete: d}\n  e: {type: step, command: \"echo item={{.loop.Item}} pin={{.inputs.pin_password}} tok={{.inputs.api_token}}\"}\n  d: {type: terminal}\n";

#[test]
fn secret_inputs_of_any_type_are_masked_everywhere() {
    let sb = Sandbox::new().unwrap();
    let wf = sb.write("typed.yaml", TYPED).unwrap();
    let wf = wf.to_str().unwrap();
    let args = [
        "run",
        wf,
        "-i",
        "list_token=[\"cliarrsecret1\",\"cliarrsecret2\"]",
        "-i",
        "pin_password=987654",
        "-o",
        "streaming",
    ];
    let r = sb.run(&args).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = sb.run(&[&args[..], &["-f", "json"]].concat()).unwrap();
    let d = sb.run(&[&args[..6], &["--dry-run"]].concat()).unwrap();
    for needle in ["cliarrsecret", "987654", "defaulttokenvalue123"] {
        for (what, text) in [
            ("live", &r.stdout),
            ("stderr", &r.stderr),
            ("json", &j.stdout),
            ("dry run", &d.stdout),
        ] {
            assert!(!text.contains(needle), "{needle} in {what}: {text}");
        }
        assert_eq!(files_with(&sb, needle), Vec::<String>::new(), "{needle}");
    }
    assert!(
        r.stdout.contains("item=*** pin=*** tok=***"),
        "{}",
        r.stdout
    );
    let t = sb.run(&["validate", wf, "-f", "table"]).unwrap();
    assert!(!t.stdout.contains("defaulttokenvalue123"), "{}", t.stdout);
}

#[test]
fn secret_config_values_of_any_type_are_masked_by_config_show() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        ".awf/config.yaml",
        "inputs: {list_token: [listsecret1111], nested_SECRET: {a: nestedsecretval}, plain: {my_password: deepsecretval}}\n",
    )
    .unwrap();
    for f in ["text", "json", "table"] {
        let r = sb.run(&["config", "show", "-f", f]).unwrap();
        assert_eq!(r.code, 0, "{}", r.stderr);
        for needle in ["listsecret1111", "nestedsecretval", "deepsecretval"] {
            assert!(!r.stdout.contains(needle), "{f}: {}", r.stdout);
        }
    }
}

/// A server that answers 401 with the request's Authorization header in its body.
fn echo_auth_server() -> (u16, std::thread::JoinHandle<()>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let h = std::thread::spawn(move || {
        if let Ok((mut s, _)) = l.accept() {
            let mut reader = std::io::BufReader::new(s.try_clone().unwrap());
            let mut auth = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if line.to_ascii_lowercase().starts_with("authorization:") {
                    auth = line.trim().to_owned();
                }
            }
            let body = format!("{{\"error\": {{\"message\": \"bad auth: {auth}\"}}}}");
            let _ = write!(
                s,
                "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, h)
}

#[test]
fn a_literal_api_key_option_is_masked_when_an_error_echoes_it() {
    let sb = Sandbox::new().unwrap();
    let (port, server) = echo_auth_server();
    let wf = sb
        .write(
            "ag.yaml",
            &format!(
                "name: ag\nstates:\n  initial: a\n  a:\n    type: agent\n    provider: openai_compatible\n    prompt: hi\n    options: {{base_url: \"http://127.0.0.1:{port}/v1\", model: m, api_key: sk-literal-YAMLKEY999}}\n    on_success: d\n  d: {{type: terminal}}\n"
            ),
        )
        .unwrap();
    let r = sb
        .run(&["run", wf.to_str().unwrap(), "-f", "json"])
        .unwrap();
    server.join().unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("401"), "{}", r.stdout);
    assert!(!r.stdout.contains("YAMLKEY999"), "{}", r.stdout);
    assert!(!r.stderr.contains("YAMLKEY999"), "{}", r.stderr);
    assert_eq!(files_with(&sb, "YAMLKEY999"), Vec::<String>::new());
}
