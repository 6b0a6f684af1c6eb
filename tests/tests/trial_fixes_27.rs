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
