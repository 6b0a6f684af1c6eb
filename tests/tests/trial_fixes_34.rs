//! Fixes of stop 38: what was left from the trials of stop 37 and what this stop's new-user
//! and breaker trials found, over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use awf_tests::fail_then_resume;
use awf_tests::run_id_in;

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
    let id = run_id_in(&all).unwrap();
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

/// Breaker: history.db held locked by another process past the 10 s wait at a run's end
/// gave "if history.db is damaged, move it aside … `awf history` will not list this run",
/// although nothing was damaged and a history read lists the run from its state file. The
/// hint says what happened; the run is listed as it ended.
#[test]
fn a_history_held_locked_at_the_end_is_named_busy_not_damaged() {
    let sb = Sandbox::new().unwrap();
    // The run's step waits for the lock to be held (a fixed sleep lost the race on a loaded
    // machine: the holder took the lock after the run had ended).
    sb.write(
        "s.yaml",
        "name: s\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'while [ ! -f locked ]; do sleep 0.05; done'\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    sb.write(
        "first.yaml",
        "name: first\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'true'\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    // A first run creates the database.
    assert_eq!(sb.run(&["run", "first.yaml"]).unwrap().code, 0);
    let db = awf_tests::data(&sb).join("history.db");
    assert!(db.exists(), "{}", db.display());
    let child = sb
        .cmd(&["run", "s.yaml"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let flag = sb.path().join("locked");
    let holder = std::process::Command::new("python3")
        .args([
            "-c",
            "import sqlite3,sys,time,pathlib\nc=sqlite3.connect(sys.argv[1],isolation_level=None)\nc.execute('BEGIN IMMEDIATE')\npathlib.Path(sys.argv[2]).write_text('1')\ntime.sleep(12)\nc.execute('COMMIT')\n",
            db.to_str().unwrap(),
            flag.to_str().unwrap(),
        ])
        .spawn()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let mut holder = holder;
    let _ = holder.wait();
    assert!(flag.exists(), "the lock was not taken");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("write lock past the 10 s wait"), "{err}");
    assert!(err.contains("`awf status "), "{err}");
    assert!(!err.contains("move it aside"), "{err}");
    let h = sb.run(&["history", "-f", "json"]).unwrap();
    let rows: serde_json::Value = serde_json::from_str(&h.stdout).unwrap();
    let done = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] == "completed")
        .count();
    assert_eq!(done, 2, "{}", h.stdout);
}

/// Breaker: `awf resume --from previous` took the last completed state even when it was a
/// parallel branch, which then ran alone and ended the run without its parallel state's
/// routes. `previous` is the last completed state that runs on its own.
#[test]
fn resume_from_previous_skips_a_parallel_branch() {
    let sb = Sandbox::new().unwrap();
    let ok = sb.path().join("ok");
    sb.write(
        "p.yaml",
        &format!(
            "name: p\nstates:\n  initial: pre\n  pre:\n    type: step\n    command: 'true'\n    on_success: par\n  par:\n    type: parallel\n    parallel: [b1, b2]\n    strategy: all_succeed\n    on_success: done\n    on_failure: bad\n  b1:\n    type: step\n    command: 'true'\n  b2:\n    type: step\n    command: 'test -f {}'\n  done: {{type: terminal}}\n  bad: {{type: terminal, status: failure}}\n",
            ok.display()
        ),
    )
    .unwrap();
    let again = fail_then_resume(&sb, "p.yaml", &ok, &["--from", "previous"]).unwrap();
    assert_eq!(again.code, 0, "{}{}", again.stdout, again.stderr);
    let all = format!("{}{}", again.stdout, again.stderr);
    assert!(all.contains("from step pre"), "{all}");
    assert!(all.contains("Workflow completed"), "{all}");
}

/// Breaker: a state that a loop runs in its body and that is also a state of its own (the
/// initial state, or a route's target from outside the loop) was refused by `--from`,
/// though the failed run's resume hint named it.
#[test]
fn a_body_state_that_is_also_a_state_of_its_own_can_be_resumed_from() {
    let sb = Sandbox::new().unwrap();
    let ok = sb.path().join("ok");
    sb.write(
        "d.yaml",
        &format!(
            "name: d\nstates:\n  initial: shared\n  shared:\n    type: step\n    command: 'test -f {}'\n    on_success: loop\n    on_failure: failed\n  loop:\n    type: for_each\n    items: '[\"a\"]'\n    body: [shared]\n    on_complete: done\n  done: {{type: terminal}}\n  failed: {{type: terminal, status: failure}}\n",
            ok.display()
        ),
    )
    .unwrap();
    let again = fail_then_resume(&sb, "d.yaml", &ok, &["--from", "shared"]).unwrap();
    let all = format!("{}{}", again.stdout, again.stderr);
    assert_eq!(again.code, 0, "{all}");
    assert!(all.contains("Workflow completed"), "{all}");
}
