//! Fixes from stop 34's trial leftovers.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use awf_tests::http_serve::curl;
use awf_tests::http_serve::json_of;
use awf_tests::http_serve::sandbox_with;
use awf_tests::http_serve::start;
use serde_json::Value;
use serde_json::json;

const INLINE: &str = "name: inl\nstates:\n  initial: verify\n  verify:\n    type: step\n    \
                      command: \"false\"\n    on_success: done\n    on_failure: {message: \
                      verify failed, status: 3}\n  done: {type: terminal}\n";

/// A run that ends at an inline `on_failure: {message, status}` names its terminal as the
/// text output does (`verify's on_failure`), in `awf run -f json` and in `awf status -f json`,
/// never the internal `__inline_error_verify` (user: it leaked into both).
#[test]
fn an_inline_failure_terminal_is_named_by_its_step_in_json() {
    let sb = Sandbox::new().unwrap();
    sb.write("inl.yaml", INLINE).unwrap();
    let r = sb.run(&["run", "inl.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(doc["terminal"], json!("verify's on_failure"), "{doc:#}");
    let id = doc["run_id"].as_str().unwrap().to_owned();
    // The resume hint is the text summary's (stop 34's breaker: `-f json` had none).
    assert_eq!(
        doc["error"],
        json!({
            "code": "EXECUTION.WORKFLOW.FAILURE_TERMINAL",
            "message": "verify failed",
            "hints": [format!("continue it with `awf resume {id} --from verify`")]
        })
    );
    assert!(!r.stdout.contains("__inline_error"), "{}", r.stdout);

    let st = sb.run(&["status", &id, "-f", "json"]).unwrap();
    assert_eq!(st.code, 0, "{}", st.stderr);
    let doc = st.json().unwrap();
    assert_eq!(doc["terminal"], json!("verify's on_failure"), "{doc:#}");
    assert!(!st.stdout.contains("__inline_error"), "{}", st.stdout);

    // The text output says the same.
    let st = sb.run(&["status", &id]).unwrap();
    assert!(
        st.stdout.contains("Terminal:  verify's on_failure"),
        "{}",
        st.stdout
    );

    // A named failure terminal keeps its name, and the error its `terminal` detail.
    sb.write(
        "named.yaml",
        "name: n\nstates:\n  initial: a\n  a: {type: step, command: \"false\", on_success: \
         done, on_failure: broken}\n  done: {type: terminal}\n  broken: {type: terminal, \
         status: failure, message: it broke}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "named.yaml", "-f", "json"]).unwrap();
    let doc = r.json().unwrap();
    assert_eq!(doc["terminal"], json!("broken"), "{doc:#}");
    assert_eq!(doc["error"]["details"], json!({"terminal": "broken"}));
}

/// `items:` that starts with `[` but is no JSON array (`[1, 2`, `["a", b]`) fails the loop
/// with `EXECUTION.LOOP.FAILED`, the parser's reason and a hint, instead of being split on
/// commas (user: `["a", b]` ran two iterations, `["a"` and ` b]`); a plain comma list
/// `a, b, c` still splits (spec §1.5.5).
#[test]
fn items_that_look_like_json_but_do_not_parse_are_an_error() {
    let sb = Sandbox::new().unwrap();
    let wf = |items: &str| {
        format!(
            "name: l\ninputs:\n  - {{name: items, type: string}}\nstates:\n  initial: each\n  \
             each:\n    type: for_each\n    items: \"{items}\"\n    body: [show]\n    \
             on_complete: done\n  show: {{type: step, command: \"echo 'item={{{{.loop.Item}}}}'\", \
             on_success: each}}\n  done: {{type: terminal}}\n"
        )
    };
    sb.write("l.yaml", &wf("{{.inputs.items}}")).unwrap();
    for bad in ["[1, 2", "[\"a\", b]"] {
        let arg = format!("items={bad}");
        let r = sb
            .run(&["run", "l.yaml", "--input", &arg, "-f", "json"])
            .unwrap();
        assert_eq!(r.code, 3, "{bad}: {}{}", r.stdout, r.stderr);
        let doc = r.json().unwrap();
        assert_eq!(
            doc["error"]["code"],
            json!("EXECUTION.LOOP.FAILED"),
            "{doc:#}"
        );
        let msg = doc["error"]["message"].as_str().unwrap();
        assert!(
            msg.starts_with(&format!(
                "step each: resolve items: {bad:?} starts with `[` but is not a JSON array: "
            )),
            "{msg}"
        );
        let hints = doc["error"]["hints"].to_string();
        assert!(
            hints.contains("a comma-separated list without brackets"),
            "{hints}"
        );
        assert!(
            !r.stdout.contains("item="),
            "no iteration ran: {}",
            r.stdout
        );
    }
    // A plain comma list and a JSON array still work.
    for (good, want) in [
        ("a, b,c", "item=a\nitem=b\nitem=c\n"),
        ("[1, 2]", "item=1\nitem=2\n"),
        // Only its first item starts with a bracket: a comma list, as in AWF (Go).
        ("[draft] fix, other", "item=[draft] fix\nitem=other\n"),
    ] {
        let arg = format!("items={good}");
        let r = sb
            .run(&["run", "l.yaml", "--input", &arg, "-o", "buffered"])
            .unwrap();
        assert_eq!(r.code, 0, "{good}: {}{}", r.stdout, r.stderr);
        assert_eq!(r.stdout, want, "{good}");
    }
}

/// `-o streaming`: a step's partial stdout line is ended before one of its stderr lines is
/// printed (and the other way round), so on a terminal, where both streams meet, every
/// `[OUT] `/`[ERR] ` line starts on its own line (user: `[OUT] partial[ERR] oops`); the rest
/// of the cut line comes with a prefix of its own, and no byte is lost.
#[test]
fn streaming_lines_of_the_two_streams_do_not_run_into_each_other() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "s.yaml",
        "name: s\nstates:\n  initial: a\n  a:\n    type: step\n    command: \"printf \
         'partial'; sleep 0.3; echo oops >&2; sleep 0.3; printf ' rest\\nnext\\n'; sleep 0.3; \
         printf 'e-part' >&2; sleep 0.3; echo out; sleep 0.3; echo ' e-rest' >&2\"\n    \
         on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    // Both streams into one file, as on a terminal.
    let both = sb.path().join("both.txt");
    let file = std::fs::File::create(&both).unwrap();
    let status = sb
        .cmd(&["run", "s.yaml", "-o", "streaming", "-q"])
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .status()
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(&both).unwrap();
    let streamed: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("[OUT]") || l.contains("[ERR]"))
        .collect();
    assert_eq!(
        streamed,
        [
            "[OUT] partial",
            "[ERR] oops",
            "[OUT]  rest",
            "[OUT] next",
            "[ERR] e-part",
            "[OUT] out",
            "[ERR]  e-rest",
        ],
        "{text}"
    );
}

/// `awf run <workflow> --help` shows each input's `validation` rules in a `RULES` column
/// (user: the allowed values of an enum input were nowhere to be seen); a workflow whose
/// inputs have no rules keeps AWF (Go)'s table.
#[test]
fn run_help_shows_each_inputs_validation_rules() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "h.yaml",
        "name: h\ninputs:\n  - {name: env, type: string, required: true, description: target \
         env, validation: {enum: [dev, prod]}}\n  - {name: count, type: integer, default: 2, \
         validation: {min: 1, max: 10}}\n  - {name: ratio, type: number, validation: {min: \
         0.5}}\n  - {name: tag, type: string, validation: {pattern: \"^v[0-9]+$\"}}\n  - {name: \
         cfg, type: string, validation: {file_exists: true, file_extension: [.yaml, .yml]}}\n  \
         - {name: plain, type: string}\nstates:\n  initial: a\n  a: {type: step, command: echo \
         hi, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "h.yaml", "--help"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.inputs_table(),
        [
            "  NAME   TYPE     REQUIRED  DEFAULT  RULES                                DESCRIPTION",
            "  env    string   yes       -        one of dev|prod                      target env",
            "  count  integer  no        2        1..10                                No description",
            "  ratio  number   no        -        >= 0.5                               No description",
            "  tag    string   no        -        matches ^v[0-9]+$                    No description",
            "  cfg    string   no        -        existing file, extension .yaml|.yml  No description",
            "  plain  string   no        -        -                                    No description",
        ],
        "{}",
        r.stdout
    );

    // Without rules, the table is AWF (Go)'s.
    sb.write(
        "p.yaml",
        "name: p\ninputs:\n  - {name: x, type: string}\nstates:\n  initial: a\n  a: {type: \
         step, command: echo hi, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "p.yaml", "--help"]).unwrap();
    assert!(
        r.stdout
            .contains("  NAME  TYPE    REQUIRED  DEFAULT  DESCRIPTION\n  x     string  no        -        No description\n"),
        "{}",
        r.stdout
    );
}

const MARK: &str = "name: mark\ninputs:\n  - {name: x, type: string}\nstates:\n  initial: a\n  \
                    a: {type: step, command: \"touch started\", on_success: done}\n  done: \
                    {type: terminal}\n";

/// The problem document of a refused request: its status, `application/problem+json`, the
/// code and a hint.
fn problem(got: &(u16, String, String), status: u16, code: &str) -> Value {
    let (c, body, ctype) = got;
    assert_eq!(*c, status, "{body}");
    assert_eq!(ctype, "application/problem+json", "{body}");
    let v = json_of(body);
    assert_eq!(v["status"], status, "{body}");
    assert_eq!(v["code"], code, "{body}");
    assert!(
        v["hints"][0].as_str().is_some_and(|h| !h.is_empty()),
        "{body}"
    );
    v
}

/// `awf serve`: a body with a `Content-Encoding` (gzip, br, …) is refused with 415 and a
/// problem document, not read as if plain (user: a gzipped body came back as "not JSON", a
/// `Content-Encoding: gzip` over plain JSON started the run); `identity` is plain.
#[test]
fn http_a_content_encoded_body_is_415() {
    let sb = sandbox_with(&[("mark", MARK)]);
    let s = start(&sb, &[]);
    let run = format!("{}/api/workflows/env/mark/run", s.base);
    let gz = sb.path().join("body.gz");
    let status = std::process::Command::new("sh")
        .args([
            "-c",
            &format!("printf '{{}}' | gzip -c > '{}'", gz.display()),
        ])
        .status()
        .unwrap();
    assert!(status.success());
    let at_gz = format!("@{}", gz.display());
    for (encoding, body) in [
        ("Content-Encoding: gzip", at_gz.as_str()),
        ("Content-Encoding: gzip", "{}"),
        ("Content-Encoding: br", "{}"),
        ("Content-Encoding: identity, gzip", "{}"),
    ] {
        let got = curl(&[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-H",
            encoding,
            "--data-binary",
            body,
            &run,
        ]);
        let v = problem(&got, 415, "USER.INPUT.VALIDATION_FAILED");
        let detail = v["detail"].as_str().unwrap();
        assert!(
            detail.starts_with("the request body is content-encoded ("),
            "{encoding}: {detail}"
        );
        assert!(
            v["hints"][0].as_str().unwrap().contains("uncompressed"),
            "{v}"
        );
    }
    assert!(!sb.path().join("started").exists(), "nothing started");
    // `identity` is no encoding.
    let got = curl(&[
        "-X",
        "POST",
        "-H",
        "Content-Type: application/json",
        "-H",
        "Content-Encoding: identity",
        "--data-binary",
        "{}",
        &run,
    ]);
    assert_eq!(got.0, 202, "{}", got.1);
}

/// `awf serve`: a JSON body with a lone UTF-16 surrogate escape (`"\ud800"`) is a 400
/// `USER.INPUT.VALIDATION_FAILED` that says so, with a hint (user: "lone leading surrogate in
/// hex escape" under "the request body is not JSON").
#[test]
fn http_a_lone_surrogate_escape_is_a_clear_400() {
    let sb = sandbox_with(&[("mark", MARK)]);
    let s = start(&sb, &[]);
    let run = format!("{}/api/workflows/env/mark/run", s.base);
    for (body, escape, column) in [
        (r#"{"inputs":{"x":"\ud800"}}"#, r"\ud800", 17),
        (r#"{"inputs":{"x":"a\udc00b"}}"#, r"\udc00", 18),
        (r#"{"inputs":{"x":"\ud800\u0041"}}"#, r"\ud800", 17),
    ] {
        let got = curl(&[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            body,
            &run,
        ]);
        let v = problem(&got, 400, "USER.INPUT.VALIDATION_FAILED");
        assert_eq!(
            v["detail"],
            json!(format!(
                "the request body's string escape {escape} at line 1, column {column} is a lone \
                 UTF-16 surrogate: it stands for no character"
            )),
            "{body}"
        );
        assert_eq!(
            v["hints"],
            json!([
                "write a character outside the Basic Multilingual Plane as a surrogate pair \
                 (\\ud83d\\ude00) or as UTF-8 text"
            ]),
            "{body}"
        );
    }
    assert!(!sb.path().join("started").exists(), "nothing started");
    // A surrogate pair is a character.
    let got = curl(&[
        "-X",
        "POST",
        "-H",
        "Content-Type: application/json",
        "--data-binary",
        r#"{"inputs":{"x":"\ud83d\ude00"}}"#,
        &run,
    ]);
    assert_eq!(got.0, 202, "{}", got.1);
}
