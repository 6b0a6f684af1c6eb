//! Fixes: the inline `on_failure` terminal under its user-facing name in `awf diagram` and the
//! HTTP workflow detail. Over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use awf_tests::http_serve::add_workflows;
use awf_tests::http_serve::curl;
use awf_tests::http_serve::follow;
use awf_tests::http_serve::json_of;
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
