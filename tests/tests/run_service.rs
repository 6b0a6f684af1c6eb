//! `awf run` over the run service (issue 10): the terminal is one subscriber of the run's
//! event log, so everything the run emits reaches it, whole and in order.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

#[test]
fn a_burst_of_output_reaches_stdout_whole_and_in_order() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "burst.yaml",
            "name: burst\nstates:\n  initial: a\n  a:\n    type: step\n    command: seq 1 200000\n    on_success: b\n  b:\n    type: step\n    command: echo after\n    on_success: done\n  done:\n    type: terminal\n",
        )
        .unwrap();
    let r = sb
        .run(&["run", wf.to_str().unwrap(), "-o", "streaming", "-q"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 200_001, "every line, then the next step's");
    for (i, line) in lines.iter().take(200_000).enumerate() {
        assert_eq!(*line, format!("[OUT] {}", i + 1));
    }
    assert_eq!(lines.last(), Some(&"[OUT] after"));
    assert!(!r.stderr.contains("skipped"), "{}", r.stderr);
}

#[test]
fn a_sub_workflow_streams_in_the_parent_run_in_order() {
    let sb = Sandbox::new().unwrap();
    let r = sb
        .run(&["run", "call-parent", "-o", "streaming", "-q"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stdout,
        "[OUT] hello world\n[OUT] parent got hello world\n"
    );
    // The JSON result is the root run's (what `wait` gives), not the child's.
    let r = sb.run(&["run", "call-parent", "-f", "json"]).unwrap();
    let doc = r.json().unwrap();
    assert_eq!(doc["status"], "success", "{doc}");
    assert_eq!(doc["outputs"]["greeting"], "hello world", "{doc}");
}
