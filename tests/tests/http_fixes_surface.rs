//! Fixes of a new-user trial of `awf serve`, over the built binary with curl as the client:
//! history rows that mean what `awf history -f json` means, broken workflows marked as such,
//! undeclared inputs warned about, `{scope}` honoured, answers that do not fit an enum
//! refused, enum choices in `pending`, hints that speak HTTP, `--addr localhost:0`, an
//! address in use, a prompt SIGTERM, and the Swagger UI address printed.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::BufRead;
use std::io::BufReader;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;

use awf_tests::Sandbox;
use awf_tests::wait_for;
use serde_json::Value;

const HELLO: &str = "name: hello
inputs:
  - name: who
    type: string
    default: world
states:
  initial: greet
  greet:
    type: step
    command: echo hello {{.inputs.who}}
    on_success: done
  done:
    type: terminal
";

const INVALID: &str = "name: invalid
states:
  initial: a
  a:
    type: step
    command: echo a
    on_success: nowhere
  done:
    type: terminal
";

const PICK: &str = "name: pick
inputs:
  - name: env
    type: string
    required: true
    validation:
      enum: [dev, prod]
states:
  initial: show
  show:
    type: step
    command: echo env={{.inputs.env}}
    on_success: done
  done:
    type: terminal
";

const ASK: &str = "name: ask
inputs:
  - name: who
    type: string
    required: true
states:
  initial: greet
  greet:
    type: step
    command: echo hi {{.inputs.who}}
    on_success: done
  done:
    type: terminal
";

const GATED: &str = "name: gated
states:
  initial: deploy
  deploy:
    type: step
    command: echo deployed
    approval: \"Deploy now?\"
    on_success: done
    on_failure: rejected
  rejected:
    type: step
    command: echo rejected-route
    on_success: done
  done:
    type: terminal
";

/// Fails until the file `marker` exists in the server's directory.
const FLAKY: &str = "name: flaky
inputs:
  - name: mode
    type: string
    default: x
states:
  initial: one
  one:
    type: step
    command: test -f marker
    on_success: done
  done:
    type: terminal
";

/// Only in `.awf/workflows` (scope `local`).
const CHAIN: &str = "name: chain
states:
  initial: a
  a:
    type: step
    command: echo chain
    on_success: done
  done:
    type: terminal
";

/// A running `awf serve`; killed on drop.
struct Server {
    child: Child,
    base: String,
    second_line: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sandbox() -> Sandbox {
    let mut sb = Sandbox::new().unwrap();
    for (name, text) in [
        ("hello", HELLO),
        ("invalid", INVALID),
        ("pick", PICK),
        ("ask", ASK),
        ("gated", GATED),
        ("flaky", FLAKY),
    ] {
        sb.write(&format!("wf/{name}.yaml"), text).unwrap();
    }
    sb.write(".awf/workflows/chain.yaml", CHAIN).unwrap();
    let wf = sb.path().join("wf").display().to_string();
    sb.set_env("AWF_WORKFLOWS_PATH", &wf);
    sb
}

fn start_at(sb: &Sandbox, addr: &str) -> Server {
    let mut child = sb
        .cmd(&["serve", "--addr", addr])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let mut second_line = String::new();
    out.read_line(&mut second_line).unwrap();
    let base = line
        .trim()
        .strip_prefix("AWF API server listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    Server {
        child,
        base,
        second_line,
    }
}

fn start(sb: &Sandbox) -> Server {
    start_at(sb, "127.0.0.1:0")
}

/// `curl` a request; returns (status, body).
fn curl(args: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "60", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.trim().parse().unwrap(), body.to_owned())
}

fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

fn get(url: &str) -> (u16, Value) {
    let (c, b) = curl(&[url]);
    (c, json_of(&b))
}

fn post(url: &str, body: &str) -> (u16, Value) {
    let (c, b) = curl(&[
        "-X",
        "POST",
        "-H",
        "content-type: application/json",
        "-d",
        body,
        url,
    ]);
    let v = if b.is_empty() {
        Value::Null
    } else {
        json_of(&b)
    };
    (c, v)
}

fn run(s: &Server, name: &str, body: &str) -> (String, Value) {
    let (code, v) = post(&format!("{}/api/workflows/env/{name}/run", s.base), body);
    assert_eq!(code, 202, "{v}");
    (v["body"]["execution_id"].as_str().unwrap().to_owned(), v)
}

fn execution(s: &Server, id: &str) -> Value {
    let (code, v) = get(&format!("{}/api/executions/{id}", s.base));
    assert_eq!(code, 200, "{v}");
    v["body"].clone()
}

fn wait_status(s: &Server, id: &str, want: &str) -> Value {
    let mut last = Value::Null;
    wait_for(&format!("run {id} to be {want}"), || {
        last = execution(s, id);
        last["status"] == want
    });
    last
}

fn wait_pending(s: &Server, id: &str) -> Value {
    let mut last = Value::Null;
    wait_for(&format!("run {id} to wait on a request"), || {
        last = execution(s, id);
        last["pending"].as_array().is_some_and(|p| !p.is_empty())
    });
    last["pending"][0].clone()
}

#[test]
fn history_rows_mean_what_the_cli_rows_mean() {
    let sb = sandbox();
    let s = start(&sb);
    let (id, _) = run(&s, "hello", "{}");
    wait_status(&s, &id, "completed");
    let mut row = Value::Null;
    wait_for("the run in /api/history", || {
        let (_, v) = get(&format!("{}/api/history", s.base));
        row = v["body"]["entries"]
            .as_array()
            .and_then(|e| e.iter().find(|r| r["id"] == id.as_str()).cloned())
            .unwrap_or(Value::Null);
        !row.is_null()
    });
    let cli = sb.run(&["history", "-f", "json"]).unwrap();
    let cli = cli.json().unwrap();
    let cli_row = cli
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id.as_str())
        .cloned()
        .unwrap();
    // AWF (Go)'s `workflow_id` is the run id in both; the identifier is `workflow`.
    assert_eq!(row["workflow_id"], id.as_str(), "{row}");
    assert_eq!(
        row["workflow_id"], cli_row["workflow_id"],
        "{row} {cli_row}"
    );
    assert_eq!(row["workflow"], cli_row["workflow"], "{row} {cli_row}");
    assert_eq!(row["workflow"], "hello", "{row}");
    assert_eq!(row["workflow_name"], "hello", "{row}");
}

#[test]
fn a_broken_workflow_is_marked_in_the_list_and_the_detail() {
    let sb = sandbox();
    let s = start(&sb);
    let (code, v) = get(&format!("{}/api/workflows", s.base));
    assert_eq!(code, 200);
    let list = v["body"]["workflows"].as_array().unwrap();
    let broken = list.iter().find(|w| w["name"] == "invalid").unwrap();
    let err = broken["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{broken}"));
    assert!(err.contains("nowhere"), "{err}");
    assert!(err.starts_with("[WORKFLOW."), "{err}");
    let ok = list.iter().find(|w| w["name"] == "hello").unwrap();
    assert!(ok.get("error").is_none(), "{ok}");

    let (code, v) = get(&format!("{}/api/workflows/env/invalid", s.base));
    assert_eq!(code, 200, "{v}");
    let errors = v["body"]["errors"].as_array().unwrap();
    assert!(
        errors
            .iter()
            .any(|e| e.as_str().unwrap().contains("nowhere")),
        "{v}"
    );
    let a = v["body"]["states"]
        .as_array()
        .unwrap()
        .iter()
        .find(|st| st["name"] == "a")
        .unwrap();
    assert_eq!(a["next"][0]["to"], "nowhere");
    assert_eq!(a["next"][0]["missing"], true, "{a}");
    let (_, v) = get(&format!("{}/api/workflows/env/hello", s.base));
    assert_eq!(v["body"]["errors"], serde_json::json!([]), "{v}");
    assert!(v["body"]["states"][0]["next"][0].get("missing").is_none());
}

#[test]
fn undeclared_inputs_are_refused_over_http_and_warned_about_by_the_cli() {
    let sb = sandbox();
    let s = start(&sb);
    // Over HTTP an undeclared input is refused (it could set BASH_ENV, LD_PRELOAD, …): 422
    // naming it and the declared inputs; the CLI only warns.
    let (code, v) = post(
        &format!("{}/api/workflows/env/hello/run", s.base),
        r#"{"inputs":{"who":"Ada","extra":1}}"#,
    );
    assert_eq!(code, 422, "{v}");
    assert_eq!(v["code"], "USER.INPUT.VALIDATION_FAILED", "{v}");
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("input 'extra' is not declared by workflow 'hello'"),
        "{v}"
    );
    assert!(v["hints"].to_string().contains("who"), "{v}");
    let want = "input 'extra' is not declared by workflow 'hello'";
    let cli = sb
        .run(&["run", "hello", "--input", "who=Ada", "--input", "extra=1"])
        .unwrap();
    assert!(cli.stderr.contains(want), "{}", cli.stderr);
    let (_, v) = run(&s, "hello", r#"{"inputs":{"who":"Ada"}}"#);
    assert!(v["body"].get("warnings").is_none(), "{v}");

    // Resume's input_overrides too.
    let (id, _) = run(&s, "flaky", "{}");
    wait_status(&s, &id, "failed");
    sb.write("marker", "").unwrap();
    let (code, v) = post(
        &format!("{}/api/executions/{id}/resume", s.base),
        r#"{"input_overrides":{"zzz":1}}"#,
    );
    assert_eq!(code, 422, "{v}");
    assert_eq!(v["code"], "USER.INPUT.VALIDATION_FAILED", "{v}");
    let mut answer = (0, Value::Null);
    wait_for("the resume to be accepted", || {
        answer = post(&format!("{}/api/executions/{id}/resume", s.base), "{}");
        answer.0 == 200
    });
    wait_status(&s, &id, "completed");
}

#[test]
fn a_scope_answers_only_the_workflows_it_holds() {
    let sb = sandbox();
    let s = start(&sb);
    let (_, v) = get(&format!("{}/api/workflows", s.base));
    let list = v["body"]["workflows"].as_array().unwrap();
    let chain = list.iter().find(|w| w["name"] == "chain").unwrap();
    assert_eq!(chain["scope"], "local");
    let (code, _) = get(&format!("{}/api/workflows/local/chain", s.base));
    assert_eq!(code, 200);
    for scope in ["global", "env"] {
        let (code, v) = get(&format!("{}/api/workflows/{scope}/chain", s.base));
        assert_eq!(code, 404, "{scope}: {v}");
        assert_eq!(v["code"], "USER.FACADE.WORKFLOW_NOT_FOUND");
        assert!(
            v["hints"][0]
                .as_str()
                .unwrap()
                .contains("/api/workflows/local/chain"),
            "{v}"
        );
        let (code, _) = post(&format!("{}/api/workflows/{scope}/chain/run", s.base), "{}");
        assert_eq!(code, 404, "{scope}");
    }
    let (code, _) = get(&format!("{}/api/workflows/local/hello", s.base));
    assert_eq!(code, 404, "hello is in scope env");
    let (code, _) = get(&format!("{}/api/workflows/env/hello", s.base));
    assert_eq!(code, 200);
}

#[test]
fn an_enum_input_lists_its_values_and_refuses_others() {
    let sb = sandbox();
    let s = start(&sb);
    let (id, _) = run(&s, "pick", r#"{"ask_missing_inputs":true}"#);
    let req = wait_pending(&s, &id);
    assert_eq!(req["kind"], "missing_input", "{req}");
    let values: Vec<&str> = req["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap())
        .collect();
    assert_eq!(values, ["dev", "prod"], "{req}");
    let rid = req["request_id"].as_str().unwrap().to_owned();
    let url = format!("{}/api/executions/{id}/respond", s.base);
    let (code, v) = post(
        &url,
        &format!(r#"{{"request_id":"{rid}","value":"staging"}}"#),
    );
    assert_eq!(code, 422, "{v}");
    // The run's own check, the one every rule gets (tests/tests/trial_fixes_42.rs).
    assert_eq!(
        v["detail"],
        "input validation failed: inputs.env: value \"staging\" not in allowed values [dev prod]",
        "{v}"
    );
    assert_eq!(v["hints"][1], "allowed values for env: dev, prod", "{v}");
    // The same request still waits (not asked again under another id).
    let now = execution(&s, &id);
    assert_eq!(now["pending"][0]["request_id"], rid.as_str(), "{now}");
    let (code, v) = post(&url, &format!(r#"{{"request_id":"{rid}","value":"prod"}}"#));
    assert_eq!(code, 204, "{v}");
    wait_status(&s, &id, "completed");
}

#[test]
fn end_of_input_rejects_an_approval() {
    let sb = sandbox();
    let s = start(&sb);
    let (id, _) = run(&s, "gated", "{}");
    let req = wait_pending(&s, &id);
    assert_eq!(req["kind"], "approval");
    let (code, v) = post(
        &format!("{}/api/executions/{id}/respond", s.base),
        r#"{"end_of_input":true}"#,
    );
    assert_eq!(code, 204, "{v}");
    let done = wait_status(&s, &id, "completed");
    assert!(done["states"].get("rejected").is_some(), "{done}");
}

#[test]
fn problems_hint_the_http_way() {
    let sb = sandbox();
    let s = start(&sb);
    let (code, v) = post(&format!("{}/api/workflows/env/ask/run", s.base), "{}");
    assert_eq!(code, 422, "{v}");
    let hints: Vec<&str> = v["hints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap())
        .collect();
    assert!(hints.iter().all(|h| !h.contains("--input")), "{hints:?}");
    assert!(
        hints.iter().any(|h| h.contains(r#"add "who" to "inputs""#)),
        "{hints:?}"
    );
}

#[test]
fn addr_takes_a_host_name_and_an_address_in_use_has_its_code() {
    let sb = sandbox();
    let s = start_at(&sb, "localhost:0");
    assert!(s.base.starts_with("http://127.0.0.1:"), "{}", s.base);
    let (code, _) = get(&format!("{}/api/workflows", s.base));
    assert_eq!(code, 200);
    let port = s.base.rsplit(':').next().unwrap().to_owned();
    let r = sb
        .run(&["serve", "--addr", &format!("127.0.0.1:{port}")])
        .unwrap();
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("SYSTEM.NET.ADDRESS_IN_USE"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("PERMISSION_DENIED"), "{}", r.stderr);
}

#[test]
fn sigterm_without_runs_exits_promptly_and_docs_need_no_redirect() {
    let sb = sandbox();
    // A store with runs in it (listing it was slow).
    for _ in 0..3 {
        assert_eq!(sb.run(&["run", "hello"]).unwrap().code, 0);
    }
    let mut s = start(&sb);
    let docs = s
        .second_line
        .trim()
        .strip_prefix("Swagger UI: ")
        .unwrap()
        .to_owned();
    assert!(docs.ends_with("/docs/"), "{docs}");
    let (code, html) = curl(&[&docs]);
    assert_eq!(code, 200);
    assert!(html.contains("swagger"), "{html}");
    let t0 = std::time::Instant::now();
    let pid = s.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = s.child.wait().unwrap();
    let took = t0.elapsed();
    assert!(status.success(), "{status:?}");
    // Generous (a shared machine); it took over 5 s before.
    assert!(took.as_secs_f64() < 2.5, "took {took:?}");
}
