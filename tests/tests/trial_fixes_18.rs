//! Fixes from stop 34's trial leftovers, second batch.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use awf_tests::data;
use awf_tests::read_state_file;
use serde_json::json;

/// The run id `awf run -f json` printed.
fn run_id_of(r: &awf_tests::Run) -> String {
    r.json().unwrap()["run_id"].as_str().unwrap().to_owned()
}

/// `awf resume <child run id>` (a `call_workflow` child, named in the parent's `child_runs`)
/// is refused with `USER.INPUT.VALIDATION_FAILED` and a hint naming the run to resume (the
/// top-level one), instead of running the child detached from its parent (user: it ran the
/// child on its own, the parent left failed).
#[test]
fn resuming_a_sub_workflow_run_is_refused_with_its_parent_named() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "leaf.yaml",
        "name: leaf\nstates:\n  initial: c\n  c: {type: step, command: 'test -f ok', \
         on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    sb.write(
        "mid.yaml",
        "name: mid\nstates:\n  initial: call\n  call: {type: call_workflow, workflow: \
         leaf.yaml, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    sb.write(
        "top.yaml",
        "name: top\nstates:\n  initial: call\n  call: {type: call_workflow, workflow: \
         mid.yaml, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "top.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let top = run_id_of(&r);
    let state = |id: &str| read_state_file(&data(&sb).join(format!("states/{id}.json"))).unwrap();
    let mid = state(&top)["child_runs"]["call"]
        .as_str()
        .unwrap()
        .to_owned();
    let leaf = state(&mid)["child_runs"]["call"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = state(&leaf);

    for child in [&mid, &leaf] {
        let again = sb.run(&["resume", child]).unwrap();
        assert_eq!(again.code, 1, "{}", again.stderr);
        assert_eq!(
            again.stderr,
            format!(
                "[USER.INPUT.VALIDATION_FAILED] run {child} is a sub-workflow run (a \
                 call_workflow step of run {}): it is resumed with the run that called it\n  \
                 Hint: awf resume {top}\n",
                if *child == mid { &top } else { &mid }
            )
        );
        // Nothing ran.
        assert!(
            !again.stderr.contains("Workflow resumed"),
            "{}",
            again.stderr
        );
    }
    assert_eq!(state(&leaf)["updated_at"], before["updated_at"]);
    assert_eq!(state(&leaf)["status"], json!("failure"));

    // `-f json`: the same error, as the result object.
    let again = sb.run(&["resume", &leaf, "-f", "json"]).unwrap();
    assert_eq!(again.code, 1, "{}", again.stderr);
    let doc = again.json().unwrap();
    assert_eq!(doc["error"]["code"], json!("USER.INPUT.VALIDATION_FAILED"));
    assert_eq!(doc["error"]["hints"], json!([format!("awf resume {top}")]));

    // The parent resumes, and with it the children.
    sb.write("ok", "").unwrap();
    let done = sb.run(&["resume", &top]).unwrap();
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_eq!(state(&leaf)["status"], json!("success"));
}
