//! Fixes of stop 38: what was left from the trials of stop 37 and what this stop's new-user
//! and breaker trials found, over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

/// `(index .states "x").Output` before any state ran printed `<no value>`; Go's typed map
/// gives the zero state, whose output is empty (as it was once another state had run).
#[test]
fn index_of_a_state_before_any_ran_is_the_zero_state() {
    let sb = Sandbox::new().unwrap();
    let yaml = "name: z\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'echo \"[{{(index .states \"b\").Output}}] {{(index .states \"b\").ExitCode}}\"'\n    on_success: b\n  b:\n    type: step\n    command: 'echo \"[{{(index .states \"a\").Output | trim}}]\"'\n    on_success: done\n  done: {type: terminal}\n";
    let r = sb
        .run_workflow("z.yaml", yaml, &["-o", "buffered"])
        .unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("[] 0"), "{}", r.stdout);
    assert!(!r.stdout.contains("no value"), "{}", r.stdout);
    assert!(r.stdout.contains("[[] 0]"), "{}", r.stdout);
}

/// New-user trial: a run cancelled (SIGINT) while a step waited for its next attempt showed
/// the step as failed (`✗ a: exit code 1`, `failed` in `awf status`) in a cancelled run; the
/// step is cancelled.
#[test]
fn a_cancel_during_a_retry_wait_cancels_the_step() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "rk.yaml",
        "name: rk\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'exit 1'\n    retry: {max_attempts: 3, initial_delay: 30s}\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    let out = std::fs::File::create(sb.path().join("out.txt")).unwrap();
    let err = std::fs::File::create(sb.path().join("err.txt")).unwrap();
    let mut child = sb
        .cmd(&["run", "rk.yaml"])
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap();
    let text = || {
        std::fs::read_to_string(sb.path().join("out.txt")).unwrap_or_default()
            + &std::fs::read_to_string(sb.path().join("err.txt")).unwrap_or_default()
    };
    awf_tests::wait_for("the retry wait", || text().contains("retrying"));
    let sent = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let status = child.wait().unwrap();
    let all = text();
    assert_eq!(status.code(), Some(130), "{all}");
    assert!(!all.contains("exit code 1"), "{all}");
    let id = all
        .split_whitespace()
        .find(|w| w.len() == 38 && w.starts_with('('))
        .map(|w| w.trim_matches(|c| c == '(' || c == ')').to_owned())
        .unwrap();
    let st = sb.run(&["status", &id]).unwrap();
    let line = st
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("a "))
        .unwrap_or_default()
        .to_owned();
    assert!(line.contains("cancelled"), "{}", st.stdout);
    assert!(!line.contains("failed"), "{}", st.stdout);
}

/// New-user trial: `--step S` with a mocked sub-workflow call before it left the call's
/// `.Outputs` empty (`undefined variable: states.call.Outputs.doubled`); a full run with the
/// same mock had them.
#[test]
fn step_reads_the_outputs_of_a_mocked_sub_workflow_call() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "child.yaml",
        "name: child\ninputs:\n  - {name: n, type: integer}\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'echo {\"doubled\": \"{{.inputs.n}}{{.inputs.n}}\"}'\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    sb.write(
        "parent.yaml",
        "name: parent\nstates:\n  initial: call\n  call:\n    type: call_workflow\n    workflow: child.yaml\n    inputs: {n: 1}\n    on_success: show\n  show:\n    type: step\n    command: 'echo got {{.states.call.Outputs.doubled}}'\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    let mock = "states.call.output={\"doubled\":\"7\"}";
    for args in [
        &["run", "parent.yaml", "-o", "buffered", "--mock", mock][..],
        &[
            "run",
            "parent.yaml",
            "-o",
            "buffered",
            "--step",
            "show",
            "--mock",
            mock,
        ][..],
    ] {
        let r = sb.run(args).unwrap();
        assert_eq!(r.code, 0, "{args:?}: {}{}", r.stdout, r.stderr);
        assert!(r.stdout.contains("got 7"), "{args:?}: {}", r.stdout);
    }
}
