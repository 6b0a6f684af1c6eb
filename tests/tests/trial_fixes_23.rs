//! Fixes: the inline `on_failure` terminal under its user-facing name in `awf diagram` and the
//! HTTP workflow detail; `POST /api/executions/{child id}/resume` refused as `awf resume` is.
//! Over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use awf_tests::http_serve::add_workflows;
use awf_tests::http_serve::curl;
use awf_tests::http_serve::follow;
use awf_tests::http_serve::json_of;
use awf_tests::http_serve::post;
use awf_tests::http_serve::start;
use awf_tests::http_serve::start_run;
use awf_tests::http_serve::wait_status;
use serde_json::Value;
use serde_json::json;

/// Step `a` ends at its inline `on_failure` terminal (exit 4).
const INLINE: &str = "name: inline\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'exit 3'\n    on_success: done\n    on_failure: {message: \"a broke\", status: 4}\n  done: {type: terminal}\n";

/// `awf diagram` named the inline `on_failure` terminal `__inline_error_a` (DOT node id,
/// `-f json` node `name` and edge `to`); it is `a's on_failure` everywhere, as in the run
/// result, quoted in DOT (the `'` and the spaces stay one id).
#[test]
fn diagram_names_the_inline_failure_terminal_as_users_see_it() {
    let sb = Sandbox::new().unwrap();
    sb.write("inline.yaml", INLINE).unwrap();
    let r = sb.run(&["diagram", "inline.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stdout,
        r##"digraph "inline" {
  rankdir=TB;
  node [fontname="Helvetica"];
  edge [fontname="Helvetica", fontsize=10];
  __start__ [shape=point];
  "a" [label="a", shape=box];
  "done" [label="done", shape=oval, style=filled, fillcolor="#ccffcc"];
  "a's on_failure" [label="a broke", shape=oval, peripheries=2, style=filled, fillcolor="#ffcccc"];
  __start__ -> "a";
  "a" -> "done";
  "a" -> "a's on_failure" [style=dashed, color=red];
}
"##
    );
    let r = sb
        .run(&[
            "diagram",
            "inline.yaml",
            "-f",
            "json",
            "--highlight",
            "a's on_failure",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert!(!doc.to_string().contains("__inline_error"), "{doc}");
    assert_eq!(doc["highlight"], json!("a's on_failure"));
    assert_eq!(
        doc["nodes"],
        json!([
            {"name": "a", "label": "a", "type": "command"},
            {"name": "done", "label": "done", "type": "terminal", "terminal_status": "success"},
            {"name": "a's on_failure", "label": "a broke", "type": "terminal", "terminal_status": "failure"},
        ])
    );
    assert_eq!(
        doc["edges"],
        json!([
            {"from": "a", "to": "done", "kind": "success"},
            {"from": "a", "to": "a's on_failure", "kind": "failure"},
        ])
    );
    assert!(
        doc["dot"].as_str().unwrap().contains(
            "\"a's on_failure\" [label=\"a broke\", shape=oval, peripheries=2, style=filled, \
             fillcolor=\"#ffcccc\", penwidth=3, color=orange];"
        ),
        "{doc}"
    );
    // The name the run result gives the terminal is the node's.
    let run = sb.run(&["run", "inline.yaml", "-f", "json"]).unwrap();
    assert_eq!(run.code, 4, "{}", run.stderr);
    assert_eq!(run.json().unwrap()["terminal"], json!("a's on_failure"));
}

/// A state named as users see an inline `on_failure` terminal (`a's on_failure`; state names
/// are free text) would be two states under one name in the run result, `awf diagram` and
/// the HTTP API: the workflow is refused, as a state named `__inline_error_a` is.
#[test]
fn a_state_named_like_an_inline_failure_terminal_is_refused() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "clash.yaml",
        &INLINE.replace(
            "  done: {type: terminal}\n",
            "  \"a's on_failure\": {type: step, command: 'echo mine', on_success: done}\n  done: {type: terminal}\n",
        ),
    )
    .unwrap();
    let r = sb.run(&["validate", "clash.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    let all = format!("{}{}", r.stdout, r.stderr);
    assert!(
        all.contains(
            "error [WORKFLOW.VALIDATION.INVALID_STATE] states.a's on_failure: state \"a's on_failure\" \
             has the name awf shows for the terminal of step \"a\"'s inline on_failure (in run \
             results, `awf diagram` and the HTTP API): the two would read as one"
        ),
        "{all}"
    );
    assert!(
        all.contains("Workflow 'clash.yaml' is invalid: 1 error"),
        "{all}"
    );
    assert!(!all.contains("__inline_error"), "{all}");
}

/// `GET /api/workflows/{scope}/{name}` named the inline `on_failure` terminal
/// `__inline_error_a` (its state and the edge to it), while the run's events and result say
/// `a's on_failure`, so the page could not colour the node a run ended at: the detail's names
/// are the events' now.
#[test]
fn http_workflow_detail_names_the_inline_failure_terminal_as_its_runs_do() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("inline", INLINE)]);
    let s = start(&sb, &[]);
    let (code, body, _) = curl(&[&format!("{}/api/workflows/env/inline", s.base)]);
    assert_eq!(code, 200, "{body}");
    let detail = json_of(&body)["body"].clone();
    assert!(!detail.to_string().contains("__inline_error"), "{detail}");
    assert_eq!(detail["initial"], json!("a"));
    assert_eq!(
        detail["states"],
        json!([
            {"name": "a", "type": "command", "terminal": false, "approval": false,
             "next": [{"to": "done", "kind": "success"}, {"to": "a's on_failure", "kind": "failure"}]},
            {"name": "done", "type": "terminal", "terminal": true, "terminal_status": "success",
             "approval": false, "next": []},
            {"name": "a's on_failure", "type": "terminal", "terminal": true,
             "terminal_status": "failure", "approval": false, "next": []},
        ])
    );
    // A run over HTTP ends there: its result names a state of the detail.
    let id = start_run(&s, "inline", "{}");
    let exec = wait_status(&s, &id, "failed");
    assert_eq!(exec["terminal"], json!("a's on_failure"), "{exec}");
    let frames = follow(&s, &id, &[]);
    let (_, _, finished) = frames
        .iter()
        .find(|(_, name, _)| name == "run_finished")
        .unwrap();
    let terminal = finished["event"]["result"]["terminal"].clone();
    assert_eq!(terminal, json!("a's on_failure"), "{finished}");
    let names: Vec<&Value> = detail["states"]
        .as_array()
        .unwrap()
        .iter()
        .map(|st| &st["name"])
        .collect();
    assert!(names.contains(&&terminal), "{names:?}");
}

const LEAF: &str = "name: leaf\nstates:\n  initial: c\n  c: {type: step, command: 'test -f LEAF_OK', on_success: done}\n  done: {type: terminal}\n";
const TOP: &str = "name: top\ninputs:\n  - {name: api_token, type: string, required: true}\nstates:\n  initial: call\n  call: {type: call_workflow, workflow: leaf, on_success: after}\n  after: {type: step, command: 'test -f TOP_OK', on_success: done}\n  done: {type: terminal}\n";

/// `POST /api/executions/{id}/resume` of a sub-workflow's run is refused as `awf resume
/// <child id>` is: 422 `USER.INPUT.VALIDATION_FAILED`, the CLI's message, and a hint that
/// names the top-level run's resume route with the secret input it needs again (it said
/// `send {"input_overrides": …}`, which resumed the child's id, and a child that had
/// succeeded got 409 "completed successfully"). Following the hint resumes the run.
#[test]
fn http_resume_of_a_sub_workflow_run_is_refused_naming_the_top_level_run() {
    let mut sb = Sandbox::new().unwrap();
    let leaf_ok = sb.path().join("leaf-ok").display().to_string();
    let top_ok = sb.path().join("top-ok").display().to_string();
    add_workflows(
        &mut sb,
        &[
            ("leaf", &LEAF.replace("LEAF_OK", &leaf_ok)),
            ("top", &TOP.replace("TOP_OK", &top_ok)),
        ],
    );
    let s = start(&sb, &[]);
    let top = start_run(&s, "top", r#"{"inputs": {"api_token": "sekrit123"}}"#);
    wait_status(&s, &top, "failed");
    let state = |id: &str| {
        awf_tests::read_state_file(&awf_tests::data(&sb).join(format!("states/{id}.json"))).unwrap()
    };
    let leaf = state(&top)["child_runs"]["call"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(state(&leaf)["parent_run_id"], json!(top));
    let want_hint = format!(
        r#"POST /api/executions/{top}/resume with {{"input_overrides": {{"api_token": "<value>"}}}}"#
    );
    let refused = |what: &str| {
        let before = state(&leaf)["updated_at"].clone();
        let (code, body, ctype) = post(&format!("{}/api/executions/{leaf}/resume", s.base), "{}");
        assert_eq!(code, 422, "{what}: {body}");
        assert!(ctype.starts_with("application/problem+json"), "{ctype}");
        let p = json_of(&body);
        assert_eq!(
            p["code"],
            json!("USER.INPUT.VALIDATION_FAILED"),
            "{what}: {p}"
        );
        assert_eq!(
            p["detail"],
            json!(format!(
                "run {leaf} is a sub-workflow run (a call_workflow step of run {top}): it is \
                 resumed with the run that called it"
            )),
            "{what}: {p}"
        );
        assert_eq!(p["hints"], json!([want_hint]), "{what}: {p}");
        // Nothing ran.
        assert_eq!(state(&leaf)["updated_at"], before, "{what}");
    };
    // The child failed.
    refused("a failed child");
    // A prefix of the child's id too.
    let (code, body, _) = post(
        &format!(
            "{}/api/executions/{}/resume",
            s.base,
            &leaf[..leaf.len() - 2]
        ),
        "{}",
    );
    assert_eq!(code, 422, "{body}");
    assert_eq!(json_of(&body)["hints"], json!([want_hint]));

    // The hint, followed: the child goes on and succeeds, `after` fails.
    std::fs::write(&leaf_ok, "").unwrap();
    let (code, body, _) = post(
        &format!("{}/api/executions/{top}/resume", s.base),
        r#"{"input_overrides": {"api_token": "sekrit123"}}"#,
    );
    assert_eq!(code, 200, "{body}");
    awf_tests::wait_for(
        "the child to succeed and the run to fail at `after`",
        || state(&leaf)["status"] == json!("success") && state(&top)["status"] == json!("failure"),
    );
    wait_status(&s, &top, "failed");
    // A child that succeeded is refused the same way (not "completed successfully").
    refused("a succeeded child");
    // `awf resume` says the same run to resume.
    let cli = sb.run(&["resume", &leaf]).unwrap();
    assert_eq!(cli.code, 1, "{}", cli.stderr);
    assert!(
        cli.stderr.ends_with(&format!(
            "Hint: awf resume {top} --input api_token=<value>\n"
        )),
        "{}",
        cli.stderr
    );
}
