//! Fixes of stop 40 made beside the helpers' (what stop 38's trials left), over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

/// Stop 38: another process holding history.db's write lock when a run started held the
/// run's first step back for the whole 10 s lock wait, and the run then ended with exit 4
/// ("its record could not be written") although its end was written once the lock was
/// free. The `running` row waits for a later write; the step runs at once.
#[test]
fn a_history_locked_at_the_start_does_not_hold_the_first_step_back() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "first.yaml",
        "name: first\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'true'\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    // A first run creates the database.
    assert_eq!(sb.run(&["run", "first.yaml"]).unwrap().code, 0);
    let db = awf_tests::data(&sb).join("history.db");
    assert!(db.exists(), "{}", db.display());
    sb.write(
        "s.yaml",
        "name: s\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'touch stepped'\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    // The holder takes the write lock, then keeps it until the step has run (at most 60 s)
    // and says whether the step ran while it held the lock.
    let locked = sb.path().join("locked");
    let stepped = sb.path().join("stepped");
    let seen = sb.path().join("seen");
    let mut holder = std::process::Command::new("python3")
        .args([
            "-c",
            "import sqlite3,sys,time,pathlib\n\
             c=sqlite3.connect(sys.argv[1],isolation_level=None)\n\
             c.execute('BEGIN IMMEDIATE')\n\
             pathlib.Path(sys.argv[2]).write_text('1')\n\
             t=time.time()\n\
             while not pathlib.Path(sys.argv[3]).exists() and time.time()-t<60: time.sleep(0.02)\n\
             pathlib.Path(sys.argv[4]).write_text('yes' if pathlib.Path(sys.argv[3]).exists() else 'no')\n\
             c.execute('COMMIT')\n",
            db.to_str().unwrap(),
            locked.to_str().unwrap(),
            stepped.to_str().unwrap(),
            seen.to_str().unwrap(),
        ])
        .spawn()
        .unwrap();
    awf_tests::wait_for("the lock to be held", || locked.exists());
    let r = sb.run(&["run", "s.yaml"]).unwrap();
    let _ = holder.wait();
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), "yes");
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(!r.stderr.contains("WARN"), "{}", r.stderr);
    let h = sb.run(&["history", "-f", "json"]).unwrap();
    let rows: serde_json::Value = serde_json::from_str(&h.stdout).unwrap();
    let names: Vec<(&str, &str)> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["workflow_name"].as_str().unwrap(),
                r["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(names, [("s", "completed"), ("first", "completed")]);
}

/// The HTTP breakpoint preview gave an inline `on_failure`'s message but not the exit code
/// it sets, which `awf run --interactive` prints.
#[test]
fn the_http_preview_gives_an_inline_failures_exit_code() {
    use awf_tests::http_serve::execution;
    let sb = awf_tests::http_serve::sandbox_with(&[(
        "inl",
        "name: inl\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'true'\n    on_success: done\n    on_failure: {message: a broke, status: 3}\n  done: {type: terminal}\n",
    )]);
    let s = awf_tests::http_serve::start(&sb, &[]);
    let id = awf_tests::http_serve::start_run(&s, "inl", r#"{"breakpoints": ["a"]}"#);
    let mut run = serde_json::Value::Null;
    awf_tests::wait_for("the breakpoint", || {
        run = execution(&s, &id);
        run["pending"].as_array().is_some_and(|p| !p.is_empty())
    });
    let routes = &run["pending"][0]["preview"]["routes"];
    assert_eq!(
        routes,
        &serde_json::json!([
            {"on": "on_success", "target": "done"},
            {"on": "on_failure", "target": "", "inline_error": "a broke", "exit_code": 3}
        ]),
        "{run}"
    );
}

/// Breaker: a killed run whose recorded pid was reused by another program (common after a
/// container restart) was shown `running` by `awf status` and `awf history`, with a growing
/// duration, and DELETE's hint said to `kill -INT` the unrelated process. Nobody holds the
/// run's lock: its process is gone.
#[test]
fn a_killed_run_whose_pid_was_reused_is_shown_gone() {
    use std::process::Stdio;
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "long.yaml",
            "name: long\nstates:\n  initial: a\n  a: {type: step, command: 'sleep 1044', on_success: done}\n  done: {type: terminal}\n",
        )
        .unwrap();
    let mut child = sb
        .cmd(&["run", wf.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let id = awf_tests::wait_for_state(&sb, "the run to be at a", |v| v["current_state"] == "a");
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = sb.kill_processes(Some("sleep 1044"));
    // Another process now has the recorded owner's pid: ours (the test runner).
    let file = awf_tests::data(&sb).join(format!("states/{id}.json"));
    let mut snap: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    snap["owner_pid"] = serde_json::json!(std::process::id());
    std::fs::write(&file, snap.to_string()).unwrap();
    let status = sb.run(&["status", &id]).unwrap();
    assert_eq!(status.code, 0, "{}", status.stderr);
    assert!(
        status.stdout.contains(&format!(
            "Status:    running (its awf process is gone; `awf resume {id}` continues it)"
        )),
        "{}",
        status.stdout
    );
    let history = sb.run(&["history"]).unwrap();
    assert!(
        history.stdout.contains("running (process gone)"),
        "{}",
        history.stdout
    );
}
