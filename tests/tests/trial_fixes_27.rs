//! Divergences from AWF (Go) found by a breaker (checked against Go's source), fixed in
//! stop 37, over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

/// A `break_when` that holds after a failed iteration ends the loop normally (it goes to
/// `on_complete`), as in AWF (Go), which checks `break_when` before the iteration's error
/// (breaker: awf failed the loop, `LOOP FAILED`, exit 3).
#[test]
fn break_when_after_a_failed_iteration_completes_the_loop() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "wf.yaml",
        "name: bw\nstates:\n  initial: l\n  l: {type: for_each, items: '[1,2,3]', body: [b1], break_when: \"states.b1.ExitCode != 0\", on_complete: done, on_failure: lf}\n  b1: {type: step, command: 'test {{.loop.Item}} -ne 2', on_success: l}\n  lf: {type: terminal, status: failure, message: \"LOOP FAILED\"}\n  done: {type: terminal, message: DONE}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "wf.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("Workflow completed: DONE") || r.stdout.contains("DONE"),
        "{}{}",
        r.stdout,
        r.stderr
    );
    assert!(!format!("{}{}", r.stdout, r.stderr).contains("LOOP FAILED"));
    // Without break_when holding, the failed iteration still fails the loop.
    sb.write(
        "wf2.yaml",
        "name: bw\nstates:\n  initial: l\n  l: {type: for_each, items: '[1,2,3]', body: [b1], break_when: \"states.b1.ExitCode == 7\", on_complete: done, on_failure: lf}\n  b1: {type: step, command: 'test {{.loop.Item}} -ne 2', on_success: l}\n  lf: {type: terminal, status: failure, message: \"LOOP FAILED\"}\n  done: {type: terminal, message: DONE}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "wf2.yaml"]).unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    assert!(format!("{}{}", r.stdout, r.stderr).contains("LOOP FAILED"));
}

/// `{{.error.message}}` in an inline `on_failure: {message, status}` (AWF's documented
/// form) is valid and reads the step's error; a validation message about it never names
/// the internal `__inline_error_` state (breaker: the workflow was refused).
#[test]
fn an_inline_on_failure_message_reads_the_steps_error() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "wf.yaml",
        "name: inl\nstates:\n  initial: a\n  a: {type: step, command: 'echo boom >&2; exit 2', on_success: done, on_failure: {message: \"call failed: {{.error.message}}\", status: 3}}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let v = sb.run(&["validate", "wf.yaml"]).unwrap();
    assert_eq!(v.code, 0, "{}", v.stderr);
    let r = sb.run(&["run", "wf.yaml"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains("call failed: step a: boom"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("{{"), "{}", r.stderr);
    // A wrong error field is still reported, where it is written.
    sb.write(
        "bad.yaml",
        "name: inl\nstates:\n  initial: a\n  a: {type: step, command: 'exit 2', on_success: done, on_failure: {message: \"{{.error.Nope}}\"}}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let v = sb.run(&["validate", "bad.yaml"]).unwrap();
    assert_eq!(v.code, 2, "{}", v.stderr);
    assert!(
        v.stderr.contains("states.a.on_failure.message"),
        "{}",
        v.stderr
    );
    assert!(!v.stderr.contains("__inline_error_"), "{}", v.stderr);
    // A message that does not parse: the same place, the line it is written on.
    sb.write(
        "bad2.yaml",
        "name: inl\nstates:\n  initial: a\n  a: {type: step, command: 'exit 2', on_success: done, on_failure: {message: \"{{nofunc .error.Message}}\"}}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let v = sb.run(&["validate", "bad2.yaml"]).unwrap();
    assert_eq!(v.code, 2, "{}", v.stderr);
    assert!(
        v.stderr.contains("bad2.yaml:4:")
            && v.stderr
                .contains("states.a.on_failure.message: template does not parse"),
        "{}",
        v.stderr
    );
    assert!(!v.stderr.contains("__inline_error_"), "{}", v.stderr);
}

/// A failed `continue_on_error: true` step without `on_success` has no next state
/// (`EXECUTION.WORKFLOW.NO_ROUTE`, exit 3): its failure takes the success route, as in
/// AWF (Go), never `on_failure` (breaker: it went to `on_failure`, exit 0).
#[test]
fn continue_on_error_without_on_success_is_no_route() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "wf.yaml",
        "name: coe\nstates:\n  initial: a\n  a: {type: step, command: 'exit 1', continue_on_error: true, on_failure: f}\n  f: {type: terminal, message: WENT_TO_FAILURE}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "wf.yaml"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains("EXECUTION.WORKFLOW.NO_ROUTE"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("WENT_TO_FAILURE"), "{}", r.stderr);
}

/// for_each items as AWF (Go)'s `ParseItems`: `null` (written or printed by a step) is no
/// item; a comma list keeps its empty pieces (`a, b ,, c` is four items).
#[test]
fn for_each_items_null_and_empty_pieces_follow_go() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "wf.yaml",
        "name: it\nstates:\n  initial: p\n  p: {type: step, command: 'echo null', on_success: l0}\n  l0: {type: for_each, items: 'null', body: [b0], on_complete: l}\n  b0: {type: step, command: 'echo zero', on_success: l0}\n  l: {type: for_each, items: '{{.states.p.Output}}', body: [b], on_complete: l2}\n  b: {type: step, command: 'echo one', on_success: l}\n  l2: {type: for_each, items: 'a, b ,, c', body: [b2], on_complete: done}\n  b2: {type: step, command: 'echo \"i=[{{.loop.Item}}]\"', on_success: l2}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "wf.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["states"]["l0"]["output"], "completed 0 iterations");
    assert_eq!(v["states"]["l"]["output"], "completed 0 iterations");
    assert_eq!(v["states"]["l2"]["output"], "completed 4 iterations");
    assert_eq!(v["states"]["b2"]["output"], "i=[c]\n");
}

/// YAML 1.1 boolean words in typed boolean fields, as yaml.v3 reads them (breaker:
/// "expected a boolean (true or false), found a string").
#[test]
fn yaml_1_1_booleans_are_accepted_in_boolean_fields() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "wf.yaml",
        "name: yb\ninputs:\n  - {name: who, required: yes, default: x}\nstates:\n  initial: a\n  a: {type: step, command: 'exit 1', continue_on_error: yes, on_success: b}\n  b: {type: step, command: 'exit 1', continue_on_error: off, on_success: done, on_failure: f}\n  f: {type: terminal, message: B_FAILED}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "wf.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("B_FAILED"), "{}", r.stderr);
}

/// `states.X == nil` compiles and is true before `X` ran, as in AWF (Go) (breaker:
/// `reference "states.later" needs a field`).
#[test]
fn a_whole_state_compared_with_nil() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "wf.yaml",
        "name: nl\nstates:\n  initial: a\n  a: {type: step, command: 'true', transitions: [{when: \"states.later == nil\", goto: yes_}], on_success: later}\n  later: {type: step, command: 'true', on_success: done}\n  yes_: {type: terminal, message: NIL}\n  done: {type: terminal, message: NOTNIL}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "wf.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("Workflow completed: NIL") || r.stdout.contains("NIL"),
        "{}{}",
        r.stdout,
        r.stderr
    );
}

/// `name: ""` is refused as a missing name (AWF (Go): `name: required field missing`).
#[test]
fn an_empty_workflow_name_is_refused() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "wf.yaml",
        "name: \"\"\nstates:\n  initial: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    for cmd in ["run", "validate"] {
        let r = sb.run(&[cmd, "wf.yaml"]).unwrap();
        assert_eq!(r.code, 2, "{cmd}: {}", r.stderr);
        assert!(
            r.stderr.contains("name: required field missing"),
            "{}",
            r.stderr
        );
        assert!(r.stderr.contains("`name:` is empty"), "{}", r.stderr);
    }
}

/// Both `call_workflow` layouts at once: the flat keys win (AWF (Go) reads only those) and
/// `awf validate` names the ignored nested ones (breaker: the nested one silently won).
#[test]
fn both_call_workflow_layouts_flat_wins_with_a_warning() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "child.yaml",
        "name: child\ninputs: [{name: x}]\nstates:\n  initial: s\n  s: {type: step, command: 'echo child-{{.inputs.x}}', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    sb.write(
        "other.yaml",
        "name: other\ninputs: [{name: x}]\nstates:\n  initial: s\n  s: {type: step, command: 'echo other-{{.inputs.x}}', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    sb.write(
        "wf.yaml",
        "name: both\nstates:\n  initial: c\n  c:\n    type: call_workflow\n    workflow: child\n    inputs: {x: flat}\n    call_workflow: {workflow: other, inputs: {x: nested}}\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    let v = sb.run(&["validate", "wf.yaml"]).unwrap();
    assert_eq!(v.code, 0, "{}", v.stderr);
    let all = format!("{}{}", v.stdout, v.stderr);
    assert!(all.contains("states.c.call_workflow.workflow"), "{all}");
    assert!(all.contains("`call_workflow.workflow` is ignored"), "{all}");
    assert!(all.contains("states.c.call_workflow.inputs"), "{all}");
    let r = sb.run(&["run", "wf.yaml", "-o", "buffered"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("child-flat"), "{}{}", r.stdout, r.stderr);
    assert!(!r.stdout.contains("other-"), "{}", r.stdout);
}
