//! Fixes of what a new user of the release build found: the NEXT of loops in `validate -f
//! table`, an empty secret default, `error_message` in `GET /api/history`, hints said for the
//! front-end that shows them, the 429's count, `awf history -n 0`; over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use awf_tests::http_serve::add_workflows;
use awf_tests::http_serve::curl;
use awf_tests::http_serve::json_of;
use awf_tests::http_serve::post;
use awf_tests::http_serve::start;
use awf_tests::http_serve::start_run;
use awf_tests::http_serve::wait_status;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

const LOOPS: &str = "name: loops\nstates:\n  initial: each\n  each:\n    type: for_each\n    items: '[\"a\", \"b\"]'\n    body: [one]\n    on_complete: again\n  one: {type: step, command: 'echo {{.loop.Item}}', on_success: each}\n  again:\n    type: while\n    while: 'false'\n    body: [two]\n    on_complete: par\n  two: {type: step, command: echo, on_success: again}\n  par:\n    type: parallel\n    parallel: [p1]\n    on_success: done\n  p1: {type: step, command: echo}\n  done: {type: terminal}\n";

/// The NEXT column of `awf validate -f table` shows a loop's `on_complete` (it read `-` for
/// `for_each` and `while` loops), as it shows another state's `on_success`.
#[test]
fn the_table_shows_where_a_loop_goes_next() {
    let sb = Sandbox::new().unwrap();
    let wf = sb.write("loops.yaml", LOOPS).unwrap();
    let r = sb
        .run(&["validate", wf.to_str().unwrap(), "-f", "table"])
        .unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let rows: Vec<Vec<&str>> = r
        .stdout
        .lines()
        .skip_while(|l| !l.contains("| STEP "))
        .skip(2)
        .filter(|l| l.starts_with("| "))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(str::trim)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        rows,
        [
            ["each", "for_each", "again"],
            ["one", "command", "each"],
            ["again", "while", "par"],
            ["two", "command", "again"],
            ["par", "parallel", "done"],
            ["p1", "command", "—"],
            ["done", "terminal", "(terminal)"],
        ]
    );
}

const SECRET_DEFAULTS: &str = "name: secdef\ninputs:\n  - {name: api_token, type: string, default: ''}\n  - {name: db_password, type: string, default: hunter22}\n  - {name: plain, type: string, default: ''}\nstates:\n  initial: a\n  a: {type: step, command: echo, on_success: done}\n  done: {type: terminal}\n";

/// An empty default of a secret-named input has nothing to hide: `awf run <wf> --help` and
/// `awf validate -f table` show it as the empty value (`""`, as the HTTP route's JSON gives
/// it), not `***`; a non-empty one stays masked.
#[test]
fn an_empty_secret_default_is_shown_empty() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("secdef", SECRET_DEFAULTS)]);
    let r = sb.run(&["run", "secdef", "--help"]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let cells: Vec<Vec<&str>> = r
        .inputs_table()
        .iter()
        .map(|l| l.split_whitespace().take(4).collect())
        .collect();
    assert_eq!(
        cells,
        [
            ["NAME", "TYPE", "REQUIRED", "DEFAULT"],
            ["api_token", "string", "no", "\"\""],
            ["db_password", "string", "no", "***"],
            ["plain", "string", "no", "\"\""],
        ]
    );
    let r = sb.run(&["validate", "secdef", "-f", "table"]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .lines()
            .any(|l| l.starts_with("| api_token ") && l.contains("| \"\" ")),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .lines()
            .any(|l| l.starts_with("| db_password ") && l.contains("| *** ")),
        "{}",
        r.stdout
    );
    let s = start(&sb, &[]);
    let (code, body, _) = curl(&[&format!("{}/api/workflows/env/secdef", s.base)]);
    assert_eq!(code, 200, "{body}");
    assert_eq!(json_of(&body)["body"]["inputs"][0]["default"], "");
}

const FAILS: &str = "name: fails\nstates:\n  initial: a\n  a: {type: step, command: 'exit 3', on_success: done}\n  done: {type: terminal}\n";
const OK: &str = "name: ok\nstates:\n  initial: a\n  a: {type: step, command: echo, on_success: done}\n  done: {type: terminal}\n";

/// `GET /api/history`'s entries carry `error_message` as `awf history -f json` does: `null`
/// for a run without one (it was left out), the text for a failed one.
#[test]
fn history_entries_say_error_message_as_the_cli_does() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("ok", OK), ("fails", FAILS)]);
    assert_eq!(sb.run(&["run", "ok"]).unwrap().code, 0);
    assert_eq!(sb.run(&["run", "fails"]).unwrap().code, 3);
    let cli = sb.run(&["history", "-f", "json"]).unwrap();
    assert_eq!(cli.code, 0, "{}", cli.stderr);
    let cli = cli.json().unwrap();
    let s = start(&sb, &[]);
    let (code, body, _) = curl(&[&format!("{}/api/history", s.base)]);
    assert_eq!(code, 200, "{body}");
    let http = json_of(&body)["body"]["entries"].clone();
    let by_name = |rows: &Value, name: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["workflow_name"] == name)
            .cloned()
            .unwrap()
    };
    let ok = by_name(&http, "ok");
    assert_eq!(ok.get("error_message"), Some(&Value::Null), "{ok}");
    assert_eq!(by_name(&cli, "ok").get("error_message"), Some(&Value::Null));
    let failed = by_name(&http, "fails");
    assert!(failed["error_message"].is_string(), "{failed}");
    assert_eq!(
        failed["error_message"],
        by_name(&cli, "fails")["error_message"]
    );
}

const INPUTS: &str = "name: inputs\ninputs:\n  - {name: env, type: string, required: true}\n  - {name: n, type: integer}\nstates:\n  initial: a\n  a: {type: step, command: echo, on_success: done}\n  done: {type: terminal}\n";
const BROKEN: &str = "name: broken\nstates:\n  initial: a\n  a: {type: step, command: echo, on_success: nowhere}\n  done: {type: terminal}\n";

/// A hint names the interface it is shown on: the command line's input error names
/// `awf run inputs --help` (the workflow run, trial_fixes_41) and no HTTP route; validate's 422 says where its errors are in
/// the answer and the first one's line, not `awf validate NAME`.
#[test]
fn hints_are_said_for_the_front_end_that_shows_them() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("inputs", INPUTS), ("broken", BROKEN)]);
    let r = sb
        .run(&["run", "inputs", "-i", "env=dev", "-i", "n=abc"])
        .unwrap();
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .trim_end()
            .ends_with("Hint: `awf run inputs --help` lists each input with its type and rules"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("HTTP"), "{}", r.stderr);
    assert!(!r.stderr.contains("/api/"), "{}", r.stderr);
    let s = start(&sb, &[]);
    let (code, body, _) = post(&format!("{}/api/workflows/env/broken/validate", s.base), "");
    assert_eq!(code, 422, "{body}");
    let p = json_of(&body);
    assert_eq!(
        p["hints"],
        json!([
            "`errors` lists each error by its path in the workflow (the first at line 4, column 34 of the file)"
        ]),
        "{p}"
    );
    assert!(!body.contains("awf validate"), "{body}");
}

const SLEEPER: &str = "name: sleeper\nstates:\n  initial: a\n  a: {type: step, command: sleep 300, on_success: done}\n  done: {type: terminal}\n";

/// The 429 of a full server counts its runs in good English: `1 run is live` (it said
/// `1 runs are live`).
#[test]
fn the_run_cap_says_one_run_is_live() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("sleeper", SLEEPER), ("ok", OK)]);
    let s = start(&sb, &["--max-runs", "1"]);
    let id = start_run(&s, "sleeper", "{}");
    let (code, body, _) = post(&format!("{}/api/workflows/env/ok/run", s.base), "{}");
    assert_eq!(code, 429, "{body}");
    assert_eq!(
        json_of(&body)["detail"],
        "1 run is live, the most this process runs at once (1); the run was not started"
    );
    let (code, _, _) = curl(&["-X", "DELETE", &format!("{}/api/executions/{id}", s.base)]);
    assert_eq!(code, 204);
    wait_status(&s, &id, "cancelled");
}

/// `awf history -n 0` is refused as `GET /api/history?limit=0` is (422
/// `USER.INPUT.VALIDATION_FAILED`), with a hint, not `No execution history found` while runs
/// are recorded; AWF (Go) gives 0 no meaning.
#[test]
fn history_refuses_a_limit_of_zero() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("ok", OK)]);
    assert_eq!(sb.run(&["run", "ok"]).unwrap().code, 0);
    let r = sb.run(&["history", "-n", "0"]).unwrap();
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.stdout, "");
    assert_eq!(
        r.stderr,
        "[USER.INPUT.VALIDATION_FAILED] -n 0 is not a positive whole number\n  Hint: use -n 1 or more (the default is 20)\n"
    );
    let r = sb.run(&["history", "-n", "0", "-f", "json"]).unwrap();
    assert_eq!(r.code, 1);
    let e: Value = serde_json::from_str(&r.stderr).unwrap();
    assert_eq!(e["error_code"], "USER.INPUT.VALIDATION_FAILED", "{e}");
    assert_eq!(sb.run(&["history", "-n", "1"]).unwrap().code, 0);
    let s = start(&sb, &[]);
    let (code, body, _) = curl(&[&format!("{}/api/history?limit=0", s.base)]);
    assert_eq!(code, 422, "{body}");
    assert_eq!(json_of(&body)["code"], "USER.INPUT.VALIDATION_FAILED");
}
