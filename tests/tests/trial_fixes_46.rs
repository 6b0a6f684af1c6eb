//! A breaker's findings over the real binary: null configuration inputs, over-long run ids
//! over HTTP, absurd retry multipliers, unusable `--token-env` tokens, unbalanced quotes in
//! ACP prompts, `E2BIG` from a large environment, input names that are no environment
//! variable names, and empty breakpoint names.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::BufRead;
use std::io::BufReader;
use std::io::Read;
use std::process::Stdio;

use awf_tests::Sandbox;
use awf_tests::http_serve;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

/// Inputs with defaults and rules, and a step that prints them as the shell and a template
/// see them.
const DEFAULTS: &str = "name: defaults\ninputs:\n  - {name: dir, type: string, default: build, validation: {pattern: '^[a-z]+$'}}\n  - {name: n, type: integer, default: 3, validation: {min: 1, max: 5}}\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'echo \"out $dir (n=[$n], template=[{{.inputs.n}}])\"'\n    on_success: done\n  done: {type: terminal}\n";

/// Breaker: `inputs: {dir: null, n: ~}` in `.awf/config.yaml` replaced the workflow's
/// defaults with no value and skipped their validation (`out  (n=[], template=[<no
/// value>])`), in `awf run` and in runs POSTed to `awf serve`. A null is "not set".
#[test]
fn a_null_config_input_is_not_set() {
    let sb = http_serve::sandbox_with(&[("defaults", DEFAULTS)]);
    sb.write(".awf/config.yaml", "inputs: {dir: null, n: ~}\n")
        .unwrap();
    let r = sb.run(&["run", "defaults", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let v = r.json().unwrap();
    assert_eq!(
        v["states"]["a"]["output"],
        "out build (n=[3], template=[3])\n"
    );

    // `awf config show` says they are not set; JSON gives them as null.
    let show = sb.run(&["config", "show"]).unwrap();
    assert_eq!(show.code, 0, "{}", show.stderr);
    let lines: Vec<&str> = show.stdout.lines().skip(1).collect();
    assert_eq!(
        lines,
        [
            "Inputs:",
            "  dir: (not set: the workflow's default applies)",
            "  n: (not set: the workflow's default applies)"
        ]
    );
    let show = sb.run(&["config", "show", "-f", "json"]).unwrap();
    let v: Value = serde_json::from_str(&show.stdout).unwrap();
    assert_eq!(v["inputs"], json!({"dir": null, "n": null}));

    // The same over HTTP.
    let s = http_serve::start(&sb, &[]);
    let id = http_serve::start_run(&s, "defaults", "{}");
    let run = http_serve::wait_status(&s, &id, "completed");
    assert_eq!(
        run["states"]["a"]["output"], "out build (n=[3], template=[3])\n",
        "{run}"
    );
}

/// Breaker: every route under `/api/executions/{id}` answered an id of 251+ characters
/// with 500 `SYSTEM.IO.READ_FAILED` "File name too long"; such an id names no run: 404
/// `USER.FACADE.RUN_NOT_FOUND`, as `awf status` says.
#[test]
fn an_overlong_execution_id_is_no_run() {
    let sb = http_serve::sandbox_with(&[("defaults", DEFAULTS)]);
    let s = http_serve::start(&sb, &[]);
    for len in [251, 300] {
        let id = "a".repeat(len);
        let url = format!("{}/api/executions/{id}", s.base);
        let answers = [
            http_serve::curl(&[&url]),
            http_serve::curl(&[&format!("{url}/events")]),
            http_serve::curl(&[&format!("{url}/workflow")]),
            http_serve::curl(&["-X", "DELETE", &url]),
            http_serve::post(&format!("{url}/resume"), "{}"),
            http_serve::post(
                &format!("{url}/respond"),
                r#"{"request_id": "r1", "value": "x"}"#,
            ),
        ];
        for (i, (code, body, _)) in answers.iter().enumerate() {
            assert_eq!(*code, 404, "route {i}, {len}: {body}");
            assert_eq!(
                http_serve::json_of(body)["code"],
                "USER.FACADE.RUN_NOT_FOUND",
                "route {i}, {len}: {body}"
            );
        }
    }
    let st = sb.run(&["status", &"a".repeat(300)]).unwrap();
    assert_eq!(st.code, 1, "{}", st.stderr);
}

/// Breaker: `multiplier: 1e30` validated, then the third attempt was announced "in
/// 5124095576030h25m51.615s" (the log gave another figure) and never came. An absurd
/// multiplier is refused by `awf validate` (and the run); without `max_delay` a delay
/// stops growing at one hour, and the terminal and the log give the same figure.
#[test]
fn an_absurd_retry_multiplier_is_refused_and_delays_stop_at_an_hour() {
    let sb = Sandbox::new().unwrap();
    let retry = |multiplier: &str, initial: &str| {
        format!(
            "name: r\nstates:\n  initial: s\n  s:\n    type: step\n    command: 'false'\n    retry: {{max_attempts: 4, initial_delay: {initial}, backoff: exponential, multiplier: {multiplier}}}\n    on_success: done\n    on_failure: bad\n  done: {{type: terminal}}\n  bad: {{type: terminal, status: failure}}\n"
        )
    };
    sb.write("huge.yaml", &retry("1e30", "1s")).unwrap();
    let v = sb.run(&["validate", "huge.yaml"]).unwrap();
    assert_eq!(v.code, 2, "{}{}", v.stdout, v.stderr);
    assert!(
        v.stderr.contains(
            "states.s.retry.multiplier: multiplier 1e30 is too large: at most 1000\n  Hint: each delay is the previous one times the multiplier: 2 doubles it; set `max_delay` to cap the delays (without it they stop growing at 1h)"
        ),
        "{}",
        v.stderr
    );
    let r = sb.run(&["run", "huge.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);

    // 4s, then 4000s: capped at one hour.
    sb.write("big.yaml", &retry("1000", "4s")).unwrap();
    let mut child = sb
        .cmd(&["run", "big.yaml", "--log-level", "debug"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let last = line.contains("retrying (attempt 3)");
        if line.contains("retrying") {
            seen.push(
                line.split_once("Z ")
                    .map_or(line.clone(), |(_, l)| l.to_owned()),
            );
        }
        if last {
            break;
        }
    }
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let _ = child.wait();
    assert_eq!(
        seen,
        [
            "DEBUG awf::run: step s: attempt 1 failed (exit code 1): retrying in 4s (attempt 2 of 4)",
            "  ↻ s: exit 1, retrying (attempt 2) in 4s",
            "DEBUG awf::run: step s: attempt 2 failed (exit code 1): retrying in 1h0m0s (attempt 3 of 4)",
            "  ↻ s: exit 1, retrying (attempt 3) in 1h0m0s",
        ]
    );
}

/// Breaker: `awf serve --token-env MYTOK` with a blank token, or one holding a line break,
/// started a server every request of which was 401. Refused as an empty one is.
#[test]
fn a_token_no_client_can_send_is_refused() {
    let sb = Sandbox::new().unwrap();
    for (token, why) in [
        (" ", "the variable holds only white space"),
        (
            "abc\ndef",
            "the token holds a line break at character 4: a client cannot send it in an `Authorization: Bearer` header",
        ),
        (
            "abc\u{7}def",
            "the token holds a control character (U+0007) at character 4: a client cannot send it in an `Authorization: Bearer` header",
        ),
    ] {
        // Killed on drop: a server that starts after all fails the wait, not the suite.
        let mut server = Reaped(
            sb.cmd(&["serve", "--addr", "127.0.0.1:0", "--token-env", "MYTOK"])
                .env("MYTOK", token)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let mut status = None;
        awf_tests::wait_for("awf serve to refuse the token", || {
            status = server.0.try_wait().unwrap();
            status.is_some()
        });
        let (mut stdout, mut stderr) = (String::new(), String::new());
        server
            .0
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .unwrap();
        server
            .0
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert_eq!(status.unwrap().code(), Some(1), "{token:?}: {stderr}");
        assert_eq!(
            stderr,
            format!(
                "[USER.INPUT.VALIDATION_FAILED] --token-env MYTOK: {why}\n  Hint: set a long random token of letters, digits and -._~+/=: `export MYTOK=$(openssl rand -hex 32)`\n"
            )
        );
        assert_eq!(stdout, "", "{token:?}");
    }
}

/// A child killed (when still running) and reaped on drop.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `awf acp-serve` over raw lines: initialize, a session, a prompt; the agent messages of
/// the prompt's turn and its stop reason.
fn acp_turn(sb: &Sandbox, prompt: &str) -> (String, Value) {
    let mut raw = awf_tests::mcp::RawServer::spawn(sb.cmd(&["acp-serve"]));
    let mut call = |id: u64, method: &str, params: Value| -> (Vec<Value>, Value) {
        raw.send_json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let mut before = Vec::new();
        loop {
            let f = raw.recv();
            if f.get("method").is_none() && f["id"] == json!(id) {
                return (before, f);
            }
            before.push(f);
        }
    };
    call(
        1,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "e2e", "version": "1"}}),
    );
    let (_, s) = call(
        2,
        "session/new",
        json!({"cwd": sb.path().display().to_string(), "mcpServers": []}),
    );
    let sid = s["result"]["sessionId"].as_str().unwrap().to_owned();
    let (before, answer) = call(
        3,
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": prompt}]}),
    );
    let text: String = before
        .iter()
        .filter(|f| {
            f["method"] == "session/update"
                && f["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        })
        .map(|f| {
            f["params"]["update"]["content"]["text"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    let ran = before.iter().any(|f| {
        f["method"] == "session/update" && f["params"]["update"]["sessionUpdate"] == "tool_call"
    });
    assert!(!ran, "{prompt}: a step ran: {before:?}");
    let _ = raw.close();
    (text, answer["result"].clone())
}

/// Breaker: `/ask who='a b env=dev` ran with who="a b env=dev", `/sleep secs='1` with
/// secs=1, and a last `--input` with no value was dropped. Each is an invalid prompt,
/// answered with what is wrong; nothing runs.
#[test]
fn acp_prompts_with_an_unbalanced_quote_or_a_bare_input_flag_are_invalid() {
    let sb = http_serve::sandbox_with(&[(
        "ask",
        "name: ask\ninputs:\n  - {name: who, type: string, required: true}\n  - {name: env, type: string, default: x}\nstates:\n  initial: greet\n  greet: {type: step, command: 'echo \"hello {{.inputs.who}}\"', on_success: done}\n  done: {type: terminal}\n",
    )]);
    for (prompt, why) in [
        (
            "/ask who='a b env=dev",
            r#"unbalanced quote: the ' at character 10 is never closed; close it (key='a b'), or quote a value that holds a ' with " (key="it's")"#,
        ),
        (
            "/ask who=x --input",
            "--input at the end of the prompt has no value: write --input key=value",
        ),
    ] {
        let (text, result) = acp_turn(&sb, prompt);
        assert_eq!(result, json!({"stopReason": "end_turn"}), "{prompt}");
        assert_eq!(text, format!("Invalid prompt: {why}"), "{prompt}");
    }
}

/// Breaker: a `call_workflow` passing 20 inputs of 120 KB each failed with "the command is
/// too long for the OS (11 bytes of arguments …): pass large values through a file, not
/// the command line": the environment was the large part. Both sizes are given, the
/// environment is named, with its largest variables (the inputs).
#[test]
fn e2big_from_a_large_environment_names_the_environment_and_its_largest_inputs() {
    let sb = Sandbox::new().unwrap();
    let names: Vec<String> = (1..=20).map(|i| format!("in{i:02}")).collect();
    let mut child = String::from("name: child\ninputs:\n");
    for n in &names {
        child.push_str(&format!("  - {{name: {n}, type: string}}\n"));
    }
    child.push_str("states:\n  initial: a\n  a: {type: step, command: 'echo \"$in01\" | wc -c', on_success: done}\n  done: {type: terminal}\n");
    sb.write("wf/child.yaml", &child).unwrap();
    let mut parent = format!(
        "name: parent\ninputs:\n  - {{name: big, type: string, default: {}}}\nstates:\n  initial: c\n  c:\n    type: call_workflow\n    workflow: child\n    inputs:\n",
        "x".repeat(120_000)
    );
    for n in &names {
        parent.push_str(&format!("      {n}: '{{{{.inputs.big}}}}'\n"));
    }
    parent.push_str("    on_success: done\n  done: {type: terminal}\n");
    sb.write("wf/parent.yaml", &parent).unwrap();
    let r = sb
        .cmd(&["run", "parent", "-f", "json"])
        .env("AWF_WORKFLOWS_PATH", sb.path().join("wf"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert_eq!(r.status.code(), Some(3), "{stdout}");
    // The child step's error, wherever the result reports it.
    let result = serde_json::from_str::<Value>(&stdout).unwrap().to_string();
    assert!(
        result.contains("the environment is too large for the OS (24 bytes of arguments, ")
            && result.contains(
                "its largest variables are in01 (120006 bytes), in02 (120006 bytes), in03 (120006 bytes)"
            )
            && !result.contains("the command is too long"),
        "{stdout}"
    );
}

/// Breaker: an input named `HOME=` passed `awf validate` and a step saw
/// `HOME==/tmp/elsewhere`; one named `PATH` replaced the real variable without a word. A
/// name that is no identifier is an error (validate and run, exit 2); one that shadows a
/// variable steps depend on is a warning.
#[test]
fn input_names_must_be_identifiers_and_shadowing_is_warned() {
    let sb = Sandbox::new().unwrap();
    let wf = |name: &str| {
        format!(
            "name: n\ninputs:\n  - {{name: \"{name}\", type: string, default: /tmp/elsewhere}}\nstates:\n  initial: a\n  a: {{type: step, command: 'true', on_success: done}}\n  done: {{type: terminal}}\n"
        )
    };
    sb.write("bad.yaml", &wf("HOME=")).unwrap();
    let v = sb.run(&["validate", "bad.yaml"]).unwrap();
    assert_eq!(v.code, 2, "{}", v.stderr);
    assert!(
        v.stderr.contains(
            "error [WORKFLOW.VALIDATION.INVALID_STATE] inputs.0.name: input name \"HOME=\" is not a valid name: a command step gets each input as an environment variable of that name\n  Hint: use letters, digits, `_` and `-`, starting with a letter or `_` (e.g. `target_dir`)"
        ),
        "{}",
        v.stderr
    );
    let r = sb.run(&["run", "bad.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);

    sb.write("shadow.yaml", &wf("HOME")).unwrap();
    let v = sb.run(&["validate", "shadow.yaml"]).unwrap();
    assert_eq!(v.code, 0, "{}", v.stderr);
    assert!(
        v.stderr.contains(
            "warning [WORKFLOW.VALIDATION.INVALID_STATE] inputs.0.name: input \"HOME\" replaces the environment variable HOME (the user's home directory) in every command step with the value the run is given\n  Hint: rename the input (e.g. `home_value`) unless replacing HOME is the point"
        ),
        "{}",
        v.stderr
    );
    let r = sb.run(&["run", "shadow.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("inputs.0.name: input \"HOME\" replaces the environment variable HOME"),
        "{}",
        r.stderr
    );
}

/// Breaker: `"breakpoints": [""]` in a POST run body was dropped without a word (unknown
/// names are warned about); an empty name is warned about too, and `awf run --breakpoint
/// ""` warns instead of stopping at every step.
#[test]
fn an_empty_breakpoint_name_is_warned_about() {
    let sb = http_serve::sandbox_with(&[("defaults", DEFAULTS)]);
    let s = http_serve::start(&sb, &[]);
    let (code, body, _) = http_serve::post(
        &format!("{}/api/workflows/env/defaults/run", s.base),
        r#"{"breakpoints": ["", "  ", "a"]}"#,
    );
    assert_eq!(code, 202, "{body}");
    let v = http_serve::json_of(&body);
    assert_eq!(
        v["body"]["warnings"],
        json!([
            "breakpoint '': an empty name names no state of workflow 'defaults'; the run never stops there"
        ]),
        "{v}"
    );
    let id = v["body"]["execution_id"].as_str().unwrap().to_owned();
    // The named breakpoint still stops the run.
    awf_tests::wait_for("the breakpoint", || {
        http_serve::execution(&s, &id)["pending"]
            .as_array()
            .is_some_and(|p| !p.is_empty())
    });

    let r = sb.run(&["run", "defaults", "--breakpoint", ""]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "WARN --breakpoint '': an empty name names no state of workflow 'defaults'; it will never pause there"
        ),
        "{}",
        r.stderr
    );
}
