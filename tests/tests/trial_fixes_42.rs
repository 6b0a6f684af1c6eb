//! Fixes of what a new user's trial found about inputs: over HTTP a missing input's answer
//! that broke its `pattern` was taken (204) and asked again under a new request id, while the
//! README promised a 422 (only `enum` was checked); the warning for an undeclared `--input`
//! said templates see it, yet a template naming it is refused; project-config inputs showed
//! as required in `awf run <wf> --help`, and `--dry-run` listed config values the workflow
//! does not declare; `awf validate` warned that `{{.error.Message}}` is unquoted in a step's
//! command where it also refused it as an error. The same refused answer is asked again on
//! the terminal and over ACP. Over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use awf_tests::http_serve;
use awf_tests::mcp::RawServer;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

/// A required input with a `pattern` (asked when missing) beside one the project config gives.
const PIPELINE: &str = "name: pipeline\ninputs:\n  - name: cc\n    type: string\n    required: true\n  - name: tag\n    type: string\n    required: true\n    validation:\n      pattern: '^v[0-9]+\\.[0-9]+$'\nstates:\n  initial: build\n  build:\n    type: step\n    command: echo \"cc={{.inputs.cc}} tag={{.inputs.tag}}\"\n    on_success: done\n  done:\n    type: terminal\n";

/// An integer input with `min`/`max` (every rule, not only `pattern`, is refused the same way).
const COUNT: &str = "name: count\ninputs:\n  - name: n\n    type: integer\n    required: true\n    validation: {min: 1, max: 5}\nstates:\n  initial: show\n  show:\n    type: step\n    command: echo \"n={{.inputs.n}}\"\n    on_success: done\n  done:\n    type: terminal\n";

/// `POST …/respond` with `body`; (status, parsed body or null).
fn respond(s: &http_serve::Server, id: &str, body: &str) -> (u16, Value) {
    let (code, text, _) =
        http_serve::post(&format!("{}/api/executions/{id}/respond", s.base), body);
    let v = if text.trim().is_empty() {
        Value::Null
    } else {
        http_serve::json_of(&text)
    };
    (code, v)
}

/// Waits for the run to wait on exactly one request; returns it.
fn one_pending(s: &http_serve::Server, id: &str) -> Value {
    let mut last = Value::Null;
    awf_tests::wait_for("a pending request", || {
        last = http_serve::execution(s, id);
        last["pending"].as_array().is_some_and(|p| p.len() == 1)
    });
    last["pending"][0].clone()
}

#[test]
fn http_refuses_a_missing_input_that_breaks_a_rule_with_422_and_keeps_the_request() {
    let sb = http_serve::sandbox_with(&[("pipeline", PIPELINE), ("count", COUNT)]);
    let s = http_serve::start(&sb, &[]);
    let id = http_serve::start_run(
        &s,
        "pipeline",
        r#"{"inputs": {"cc": "gcc"}, "ask_missing_inputs": true}"#,
    );
    let asked = one_pending(&s, &id);
    assert_eq!(asked["input"], "tag");
    let first = asked["request_id"].as_str().unwrap().to_owned();
    assert_eq!(first, format!("{id}:1"));

    let (code, problem) = respond(&s, &id, r#"{"value": "nope"}"#);
    assert_eq!(code, 422, "{problem}");
    assert_eq!(problem["code"], "USER.INPUT.VALIDATION_FAILED");
    assert_eq!(
        problem["detail"],
        "input validation failed: inputs.tag: value \"nope\" does not match pattern \"^v[0-9]+\\.[0-9]+$\""
    );
    assert_eq!(
        problem["hints"][0],
        "the request is still pending: answer it again with a value that fits"
    );
    // The same request, unchanged: no new id, no problem appended to its prompt.
    let still = one_pending(&s, &id);
    assert_eq!(still["request_id"], first.as_str());
    assert_eq!(still["prompt"], "Value for input tag");

    assert_eq!(respond(&s, &id, r#"{"value": "v4.2"}"#).0, 204);
    let done = http_serve::wait_status(&s, &id, "completed");
    assert_eq!(done["states"]["build"]["output"], "cc=gcc tag=v4.2\n");

    // `min`/`max` and the type: each refused with the rule it breaks.
    let id = http_serve::start_run(&s, "count", r#"{"ask_missing_inputs": true}"#);
    let first = one_pending(&s, &id)["request_id"].clone();
    for (value, detail) in [
        (
            "9",
            "input validation failed: inputs.n: value 9 exceeds maximum 5",
        ),
        (
            "0",
            "input validation failed: inputs.n: value 0 is below minimum 1",
        ),
    ] {
        let (code, problem) = respond(&s, &id, &format!(r#"{{"value": "{value}"}}"#));
        assert_eq!(code, 422, "{problem}");
        assert_eq!(problem["detail"], detail);
    }
    let (code, problem) = respond(&s, &id, r#"{"value": "many"}"#);
    assert_eq!(code, 422, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .starts_with("input validation failed: inputs.n: "),
        "{problem}"
    );
    assert_eq!(one_pending(&s, &id)["request_id"], first);
    assert_eq!(respond(&s, &id, r#"{"value": "3"}"#).0, 204);
    let done = http_serve::wait_status(&s, &id, "completed");
    assert_eq!(done["states"]["show"]["output"], "n=3\n");
}

#[test]
fn the_terminal_asks_again_with_the_rule_a_refused_value_broke() {
    let sb = Sandbox::new().unwrap();
    sb.write("pipeline.yaml", PIPELINE).unwrap();
    let cmd = sb.tty_cmd(&["run", "pipeline.yaml", "-i", "cc=gcc", "-o", "streaming"]);
    let mut p = rexpect::session::spawn_command(cmd, Some(20_000)).unwrap();
    p.exp_string("Input tag (string)").unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("nope").unwrap();
    p.exp_string(
        "invalid: value \"nope\" does not match pattern \"^v[0-9]+\\.[0-9]+$\"; try again",
    )
    .unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("v1.0").unwrap();
    p.exp_string("cc=gcc tag=v1.0").unwrap();
    p.exp_string("Workflow completed.").unwrap();
    p.exp_eof().unwrap();
}

/// `awf acp-serve` frames until one matching `pred` (kept in `seen`).
fn until(raw: &mut RawServer, seen: &mut Vec<Value>, pred: impl Fn(&Value) -> bool) -> Value {
    loop {
        let f = raw.recv();
        seen.push(f.clone());
        if pred(&f) {
            return f;
        }
    }
}

/// The agent message text of `frames`.
fn said(frames: &[Value]) -> String {
    frames
        .iter()
        .filter(|f| f["method"] == "session/update")
        .filter(|f| f["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .map(|f| {
            f["params"]["update"]["content"]["text"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect()
}

#[test]
fn acp_asks_again_for_a_refused_value_by_message_and_by_form() {
    let mut sb = Sandbox::new().unwrap();
    sb.write("wf/pipeline.yaml", PIPELINE).unwrap();
    let wf = sb.path().join("wf").display().to_string();
    sb.set_env("AWF_WORKFLOWS_PATH", &wf);
    let cwd = sb.path().display().to_string();
    for caps in [json!({}), json!({"elicitation": {"form": {}}})] {
        let form = caps.get("elicitation").is_some();
        let mut raw = RawServer::spawn(sb.cmd(&["acp-serve"]));
        let mut seen = Vec::new();
        let mut n = 0;
        let mut call = |raw: &mut RawServer, method: &str, params: Value| {
            n += 1;
            let id = n;
            raw.send_json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
            id
        };
        let id = call(
            &mut raw,
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": caps}),
        );
        until(&mut raw, &mut seen, |f| {
            f["id"] == id && f.get("method").is_none()
        });
        let id = call(
            &mut raw,
            "session/new",
            json!({"cwd": cwd, "mcpServers": []}),
        );
        let r = until(&mut raw, &mut seen, |f| {
            f["id"] == id && f.get("method").is_none()
        });
        let sid = r["result"]["sessionId"].as_str().unwrap().to_owned();
        let prompt =
            |text: &str| json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]});
        let turn = call(&mut raw, "session/prompt", prompt("/pipeline cc=gcc"));
        if form {
            let el = until(&mut raw, &mut seen, |f| f["method"] == "elicitation/create");
            raw.send_json(&json!({"jsonrpc": "2.0", "id": el["id"], "result": {"action": "accept", "content": {"tag": "nope"}}}));
            // Asked again, by a new form that says why.
            let again = until(&mut raw, &mut seen, |f| f["method"] == "elicitation/create");
            let message = again["params"]["message"].as_str().unwrap_or("");
            assert!(
                message.contains("value \"nope\" does not match pattern"),
                "{again}"
            );
            raw.send_json(&json!({"jsonrpc": "2.0", "id": again["id"], "result": {"action": "accept", "content": {"tag": "v2.0"}}}));
            let start = seen.len();
            until(&mut raw, &mut seen, |f| {
                f["id"] == turn && f.get("method").is_none()
            });
            assert!(said(&seen[start..]).contains("cc=gcc tag=v2.0"), "{seen:?}");
        } else {
            until(&mut raw, &mut seen, |f| {
                f["id"] == turn && f.get("method").is_none()
            });
            assert!(said(&seen).contains("needs input `tag`"), "{seen:?}");
            // A value that breaks the pattern: not taken, the turn ends asking again.
            let start = seen.len();
            let turn = call(&mut raw, "session/prompt", prompt("nope"));
            let r = until(&mut raw, &mut seen, |f| {
                f["id"] == turn && f.get("method").is_none()
            });
            assert_eq!(r["result"]["stopReason"], "end_turn");
            assert_eq!(
                said(&seen[start..]),
                "Answer not taken: value \"nope\" does not match pattern \"^v[0-9]+\\.[0-9]+$\". Send the value of `tag` as your next message."
            );
            let start = seen.len();
            let turn = call(&mut raw, "session/prompt", prompt("v3.1"));
            until(&mut raw, &mut seen, |f| {
                f["id"] == turn && f.get("method").is_none()
            });
            assert!(said(&seen[start..]).contains("cc=gcc tag=v3.1"), "{seen:?}");
        }
    }
}

#[test]
fn an_undeclared_input_is_said_to_reach_nothing_and_a_template_naming_it_is_refused() {
    let sb = Sandbox::new().unwrap();
    sb.write("pipeline.yaml", PIPELINE).unwrap();
    let r = sb
        .run(&[
            "run",
            "pipeline.yaml",
            "-i",
            "cc=gcc",
            "-i",
            "tag=v1.0",
            "-i",
            "ccc=clang",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "WARN input 'ccc' is not declared by workflow 'pipeline' (did you mean 'cc'?); nothing \
             uses it: templates may read only declared inputs and commands get only those as \
             environment variables"
        ),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("templates see it"), "{}", r.stderr);
    // What the warning says: a template that reads it is refused (as AWF (Go) refuses it).
    let r = sb
        .run_workflow(
            "undecl.yaml",
            "name: undecl\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo {{shell_quote .inputs.x}}\n    on_success: done\n  done:\n    type: terminal\n",
            &["-i", "x=1"],
        )
        .unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("undefined input \"x\" referenced in states.a.command"),
        "{}",
        r.stderr
    );
}

#[test]
fn project_config_inputs_show_as_such_in_help_and_dry_run() {
    let sb = Sandbox::new().unwrap();
    sb.write(".awf/config.yaml", "inputs:\n  version: v4.2\n  cc: gcc\n")
        .unwrap();
    sb.write("wf/pipeline.yaml", PIPELINE).unwrap();
    let r = sb.run(&["run", "wf/pipeline.yaml", "--help"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let table: Vec<&str> = r
        .stdout
        .lines()
        .skip_while(|l| *l != "Input Parameters:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(
        table,
        [
            "  NAME  TYPE    REQUIRED  DEFAULT                      RULES                      DESCRIPTION",
            "  cc    string  no        gcc (from .awf/config.yaml)  -                          No description",
            "  tag   string  yes       -                            matches ^v[0-9]+\\.[0-9]+$  No description",
        ]
    );

    let r = sb
        .run(&[
            "run",
            "wf/pipeline.yaml",
            "--dry-run",
            "-i",
            "tag=v1.0",
            "-i",
            "zz=1",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let inputs: Vec<&str> = r
        .stdout
        .lines()
        .skip_while(|l| *l != "Inputs:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(inputs, ["  cc: gcc (from .awf/config.yaml)", "  tag: v1.0"]);
    assert!(
        r.stderr
            .contains("WARN input 'zz' is not declared by workflow 'pipeline'"),
        "{}",
        r.stderr
    );
    let r = sb
        .run(&[
            "run",
            "wf/pipeline.yaml",
            "--dry-run",
            "-i",
            "tag=v1.0",
            "-f",
            "json",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let plan: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        plan["inputs"],
        json!([
            {"name": "cc", "value": "gcc", "default": false, "config": true},
            {"name": "tag", "value": "v1.0", "default": false, "config": false},
        ])
    );
}

#[test]
fn validate_does_not_also_warn_about_a_reference_it_refuses() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "comp.yaml",
        "name: comp\nhooks:\n  workflow_error:\n    - command: echo {{.error.Message}}\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'false'\n    on_success: done\n    on_failure: undo\n  undo:\n    type: step\n    command: echo {{.error.Message}}\n    on_success: failed\n  done:\n    type: terminal\n  failed:\n    type: terminal\n    status: failure\n",
    )
    .unwrap();
    let r = sb.run(&["validate", "comp.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    let text = format!("{}{}", r.stdout, r.stderr);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("] states.undo.command") || l.contains("] hooks.workflow_error"))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].contains("error [WORKFLOW.VALIDATION.INVALID_REFERENCE] states.undo.command"),
        "{text}"
    );
    // In the `workflow_error` hook it is allowed, and unquoted there: warned.
    assert!(
        lines[1]
            .contains("warning [WORKFLOW.VALIDATION.UNQUOTED_SHELL_VALUE] hooks.workflow_error.0"),
        "{text}"
    );
}
