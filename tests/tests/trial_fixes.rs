//! Findings of a new-user trial (issues 7 and 8): what scripts capture and what a failed or
//! cancelled run tells the user.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Stdio;

use awf_tests::Sandbox;

/// Starts `awf run <wf>` (stderr piped when `piped`) and waits until the sandbox has a
/// process running `cmdline` (the step's own command).
fn run_until(
    sb: &Sandbox,
    wf: &std::path::Path,
    cmdline: &str,
    piped: bool,
) -> std::process::Child {
    let child = sb
        .cmd(&["run", wf.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(if piped { Stdio::piped() } else { Stdio::null() })
        .spawn()
        .unwrap();
    awf_tests::wait_for(&format!("`{cmdline}` to start"), || {
        sb.processes().iter().any(|p| p.cmdline == cmdline)
    });
    child
}

const OK: &str = "name: ok\nstates:\n  initial: a\n  a: {type: step, command: 'echo hi', on_success: done}\n  done: {type: terminal}\n";
const FAIL: &str = "name: broken-run\nstates:\n  initial: a\n  a: {type: step, command: 'exit 3', on_success: done}\n  done: {type: terminal}\n";

#[test]
fn run_quiet_prints_the_run_id_for_scripts() {
    let sb = Sandbox::new().unwrap();
    let wf = sb.write("ok.yaml", OK).unwrap();
    let r = sb
        .run(&["run", wf.to_str().unwrap(), "-f", "quiet"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let id = r.stdout.trim();
    assert_eq!(id.len(), 36, "{:?}", r.stdout);
    let s = sb.run(&["status", id, "-f", "quiet"]).unwrap();
    assert_eq!(s.stdout.trim(), "completed", "{}", s.stderr);
    // New user: an ended run's state is its last step, said so (not `State: a` beside
    // `Terminal: done`).
    let s = sb.run(&["status", id]).unwrap();
    assert!(s.stdout.contains("\nLast step: a\n"), "{}", s.stdout);
    assert!(!s.stdout.contains("\nState:"), "{}", s.stdout);
    // A failed run has ended too (breaker: it still said `State:`).
    let wf = sb.write("fail.yaml", FAIL).unwrap();
    let id = sb
        .run(&["run", wf.to_str().unwrap(), "-f", "quiet"])
        .unwrap()
        .stdout;
    let s = sb.run(&["status", id.trim()]).unwrap();
    assert!(s.stdout.contains("\nLast step: a\n"), "{}", s.stdout);
}

#[test]
fn status_table_keeps_the_run_id_whole() {
    let sb = Sandbox::new().unwrap();
    let wf = sb.write("ok.yaml", OK).unwrap();
    let id = sb
        .run(&["run", wf.to_str().unwrap(), "-f", "quiet"])
        .unwrap()
        .stdout;
    let id = id.trim();
    let st = sb.run(&["status", id, "-f", "table"]).unwrap();
    assert!(st.stdout.contains(&format!("ID: {id}")), "{}", st.stdout);
}

#[test]
fn a_failed_run_says_how_to_resume_it() {
    let sb = Sandbox::new().unwrap();
    let wf = sb.write("f.yaml", FAIL).unwrap();
    let r = sb.run(&["run", wf.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 3);
    let id = r
        .stderr
        .lines()
        .next()
        .and_then(|l| {
            l.rsplit_once('(')
                .map(|(_, id)| id.trim_end_matches(')').to_owned())
        })
        .unwrap();
    assert!(
        r.stderr
            .contains(&format!("Hint: continue it with `awf resume {id}`")),
        "{}",
        r.stderr
    );
    let quiet = sb
        .run(&["run", wf.to_str().unwrap(), "--no-hints"])
        .unwrap();
    assert!(!quiet.stderr.contains("awf resume"), "{}", quiet.stderr);
}

#[test]
fn a_cancelled_run_says_so_once() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "long.yaml",
            "name: long\nstates:\n  initial: a\n  a: {type: step, command: 'sleep 30', on_success: done}\n  done: {type: terminal}\n",
        )
        .unwrap();
    let child = sb
        .cmd(&["run", wf.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    awf_tests::wait_for("the step to start", || {
        sb.processes().iter().any(|p| p.cmdline == "sleep 30")
    });
    assert!(
        std::process::Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Workflow cancelled."), "{err}");
    assert!(!err.contains("EXECUTION.RUN.CANCELLED"), "{err}");
}

/// A terminal's `message` is checked like every other template: a bad reference is a
/// validation error instead of a message printed as raw template text.
#[test]
fn terminal_message_references_are_validated() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "tm.yaml",
            "name: tm\nstates:\n  initial: a\n  a: {type: step, command: 'echo hi', on_success: done}\n  done: {type: terminal, message: \"x={{.states.nosuch.Output}} i={{.inputs.nope}}\"}\n",
        )
        .unwrap();
    let v = sb.run(&["validate", wf.to_str().unwrap()]).unwrap();
    assert_eq!(v.code, 2, "{}{}", v.stdout, v.stderr);
    let all = format!("{}{}", v.stdout, v.stderr);
    assert!(
        all.contains("reference to unknown state \"nosuch\" in states.done.message"),
        "{all}"
    );
    assert!(all.contains("undefined input \"nope\""), "{all}");
    let r = sb.run(&["run", wf.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);
}

/// An operation state that fails (nothing listens on port 1) fails like any step:
/// `on_failure` routes it.
#[test]
fn an_operation_failure_is_routed_by_on_failure() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "op.yaml",
            "name: op\nstates:\n  initial: o\n  o: {type: operation, operation: http.request, inputs: {method: GET, url: 'http://127.0.0.1:1/'}, on_success: done, on_failure: bad}\n  done: {type: terminal}\n  bad: {type: terminal, status: failure, message: routed}\n",
        )
        .unwrap();
    let r = sb
        .run(&["run", wf.to_str().unwrap(), "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(doc["terminal"], "bad", "{doc}");
    assert_eq!(doc["states"]["o"]["status"], "failed", "{doc}");
}

/// A run whose awf process was SIGKILLed is not shown as simply `running` by `awf history`.
#[test]
fn history_marks_a_run_whose_process_is_gone() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "long.yaml",
            "name: long\nstates:\n  initial: a\n  a: {type: step, command: 'sleep 31', on_success: done}\n  done: {type: terminal}\n",
        )
        .unwrap();
    let mut child = run_until(&sb, &wf, "sleep 31", false);
    // The state file (with the owner's pid) is written by a background writer: wait for it.
    awf_tests::wait_for_state(&sb, "the run to be recorded at a", |v| {
        v["current_state"] == "a"
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = sb.kill_processes(Some("sleep 31"));
    let h = sb.run(&["history"]).unwrap();
    assert!(h.stdout.contains("running (process gone)"), "{}", h.stdout);
    let j = sb.run(&["history", "-f", "json"]).unwrap();
    let doc = j.json().unwrap();
    assert_eq!(doc[0]["status"], "running", "{doc}");
    assert_eq!(doc[0]["process_gone"], true, "{doc}");
    // The statistics do not count it as running either (a breaker found them doing so).
    let st = sb.run(&["history", "--stats"]).unwrap();
    assert!(st.stdout.contains("Running: 0\n"), "{}", st.stdout);
    assert!(
        st.stdout.contains("Running (process gone): 1\n"),
        "{}",
        st.stdout
    );
    let sj = sb
        .run(&["history", "--stats", "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(sj["running_count"], 0, "{sj}");
    assert_eq!(sj["process_gone_count"], 1, "{sj}");
    assert_eq!(sj["total_executions"], 1, "{sj}");
    // New user: `awf resume --list` said `running` where `awf history` said the process was
    // gone.
    let l = sb.run(&["resume", "--list"]).unwrap();
    assert!(l.stdout.contains("running (process gone)"), "{}", l.stdout);
    let lj = sb
        .run(&["resume", "--list", "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(lj[0]["status"], "running", "{lj}");
    assert_eq!(lj[0]["process_gone"], true, "{lj}");
}

/// A `workflow_cancel` hook that hangs does not keep a cancelled run alive: it is stopped
/// after a bounded time (10 s) and awf exits 143.
#[test]
fn a_hanging_cancel_hook_is_stopped_after_a_bounded_time() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "hang.yaml",
            "name: hang\nhooks:\n  workflow_cancel:\n    - command: 'sleep 1020'\nstates:\n  initial: a\n  a: {type: step, command: 'sleep 1022', on_success: done}\n  done: {type: terminal}\n",
        )
        .unwrap();
    let mut child = run_until(&sb, &wf, "sleep 1022", false);
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "awf still running a minute after SIGTERM"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(status.code(), Some(143));
    let _ = sb.kill_processes(None);
}

/// An inline failure `status` outside 1..=255 is a validation error, not an exit code that
/// wraps around (99999999999 exited 1, 256 exited 3).
#[test]
fn an_inline_failure_status_must_be_an_exit_code() {
    let sb = Sandbox::new().unwrap();
    for v in ["99999999999", "256", "-1", "0"] {
        let wf = sb
            .write(
                "st.yaml",
                &format!("name: st\nstates:\n  initial: a\n  a: {{type: step, command: 'false', on_failure: {{message: m, status: {v}}}}}\n"),
            )
            .unwrap();
        let r = sb.run(&["validate", wf.to_str().unwrap()]).unwrap();
        assert_eq!(r.code, 2, "{v}: {}{}", r.stdout, r.stderr);
        assert!(
            format!("{}{}", r.stdout, r.stderr).contains("is out of range (expected 1 to 255)"),
            "{v}"
        );
    }
    let wf = sb
        .write(
            "ok.yaml",
            "name: st\nstates:\n  initial: a\n  a: {type: step, command: 'false', on_failure: {message: m, status: 42}}\n",
        )
        .unwrap();
    assert_eq!(sb.run(&["run", wf.to_str().unwrap()]).unwrap().code, 42);
}

/// `awf validate` reports a `script_file` a run could not read (missing, a FIFO), as it does
/// for `prompt_file`, instead of the run failing after earlier steps ran.
#[test]
fn validate_reports_a_missing_or_special_script_file() {
    let sb = Sandbox::new().unwrap();
    let fifo = sb.path().join("ff");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for (file, problem) in [
        ("nope.sh".to_owned(), "script_file not found: nope.sh"),
        (
            fifo.display().to_string(),
            "script_file is not a regular file",
        ),
    ] {
        let wf = sb
            .write(
                "sf.yaml",
                &format!("name: sf\nstates:\n  initial: a\n  a: {{type: step, script_file: \"{file}\", on_success: d}}\n  d: {{type: terminal}}\n"),
            )
            .unwrap();
        let r = sb.run(&["validate", wf.to_str().unwrap()]).unwrap();
        assert_eq!(r.code, 2, "{file}: a workflow error");
        assert!(
            format!("{}{}", r.stdout, r.stderr).contains(problem),
            "{file}: {}{}",
            r.stdout,
            r.stderr
        );
    }
}

/// A daemonised grandchild (`setsid … &`, its own session and group) does not outlive an
/// awf killed with SIGKILL: the watchdog finds it by the tag in its environment.
#[test]
fn a_daemon_does_not_outlive_a_sigkilled_awf() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "daemon.yaml",
            "name: daemon\nstates:\n  initial: a\n  a: {type: step, command: 'setsid sh -c \"trap \\\"\\\" TERM HUP INT; exec sleep 1000\" & sleep 1003', on_success: done}\n  done: {type: terminal}\n",
        )
        .unwrap();
    let mut child = run_until(&sb, &wf, "sleep 1000", false);
    child.kill().unwrap();
    child.wait().unwrap();
    awf_tests::wait_for("the daemon to die with awf", || {
        !sb.processes().iter().any(|p| p.cmdline == "sleep 1000")
    });
    let _ = sb.kill_processes(None);
}

/// A killed run whose recorded owner pid now belongs to another process (pids are reused)
/// can be resumed: nobody holds its lock, so nobody runs it.
#[test]
fn a_reused_owner_pid_does_not_block_resume() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "long.yaml",
            "name: long\nstates:\n  initial: a\n  a: {type: step, command: 'sleep 1032', on_success: b}\n  b: {type: step, command: 'echo resumed', on_success: done}\n  done: {type: terminal}\n",
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
    let _ = sb.kill_processes(Some("sleep 1032"));
    // Another process now has the recorded owner's pid: ours (the test runner).
    let file = awf_tests::data(&sb).join(format!("states/{id}.json"));
    let mut snap: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    snap["owner_pid"] = serde_json::json!(std::process::id());
    std::fs::write(&file, snap.to_string()).unwrap();
    let r = sb.run(&["resume", &id, "--from", "b"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("still running"), "{}", r.stderr);
}

/// A run whose state cannot be recorded (here its states folder disappears mid-run, as on a
/// full or failing disk) does not end with exit 0: `awf resume` and `status` would not know
/// how it ended.
#[test]
fn a_run_that_cannot_be_recorded_is_a_system_error() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "rec.yaml",
            "name: rec\nstates:\n  initial: a\n  a: {type: step, command: 'sleep 1', on_success: b}\n  b: {type: step, command: 'true', on_success: done}\n  done: {type: terminal}\n",
        )
        .unwrap();
    let child = sb
        .cmd(&["run", wf.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _id = awf_tests::wait_for_state(&sb, "the run to be at a", |v| v["current_state"] == "a");
    let states = awf_tests::data(&sb).join("states");
    std::fs::rename(&states, awf_tests::data(&sb).join("states.moved")).unwrap();
    std::fs::write(&states, "not a directory").unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains(
            "[SYSTEM.IO.WRITE_FAILED] the run succeeded but its record could not be written"
        ),
        "{err}"
    );
}

/// Reading a state that runs on only some routes to the reader is a warning, not an error
/// that cannot be avoided; reading one that can never run first stays an error.
#[test]
fn a_state_that_runs_on_some_routes_may_be_read_with_a_warning() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "skip.yaml",
            "name: skip\ninputs: [{name: go, type: boolean, default: false}]\nstates:\n  initial: a\n  a: {type: step, command: 'true', transitions: [{when: 'inputs.go', goto: b}], on_success: c}\n  b: {type: step, command: 'echo B', on_success: c}\n  c: {type: step, command: 'echo got-{{.states.b.Output}}', on_success: done}\n  done: {type: terminal}\n",
        )
        .unwrap();
    let v = sb.run(&["validate", wf.to_str().unwrap()]).unwrap();
    assert_eq!(v.code, 0, "{}{}", v.stdout, v.stderr);
    assert!(
        format!("{}{}", v.stdout, v.stderr).contains("step \"b\" may not have run on every route"),
        "{}{}",
        v.stdout,
        v.stderr
    );
    let r = sb
        .run(&[
            "run",
            wf.to_str().unwrap(),
            "-i",
            "go=true",
            "-o",
            "streaming",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("got-B"), "{}", r.stdout);
    // `d` runs only after `c`: reading it from `c` can never work.
    let bad = sb
        .write(
            "bad.yaml",
            "name: bad\nstates:\n  initial: c\n  c: {type: step, command: 'echo {{.states.d.Output}}', on_success: d}\n  d: {type: step, command: 'true', on_success: done}\n  done: {type: terminal}\n",
        )
        .unwrap();
    let v = sb.run(&["validate", bad.to_str().unwrap()]).unwrap();
    assert_eq!(v.code, 2, "{}{}", v.stdout, v.stderr);
}

/// Resume after a failure inside a parallel block in a `for_each` body keeps the branch that
/// completed in the failed iteration (its side effects must not happen twice). `q2` fails a
/// second after `q1` has completed (a branch still running when its sibling fails is stopped,
/// not completed, and runs again).
#[test]
fn resume_keeps_a_completed_branch_of_a_failed_block_in_a_loop() {
    let sb = Sandbox::new().unwrap();
    let log = sb.path().join("log");
    let ok = sb.path().join("ok");
    let wf = sb
        .write(
            "lp.yaml",
            &format!(
                "name: lp\nstates:\n  initial: l\n  l: {{type: for_each, items: '[\"A\",\"B\"]', body: [pp], on_complete: d}}\n  pp: {{type: parallel, parallel: [q1, q2], strategy: all_succeed}}\n  q1: {{type: step, command: \"echo q1-{{{{.loop.Item}}}} >> {log}\"}}\n  q2: {{type: step, command: \"echo q2-{{{{.loop.Item}}}} >> {log}; if [ {{{{.loop.Item}}}} = B ] && [ ! -e {ok} ]; then sleep 1; exit 1; fi\"}}\n  d: {{type: terminal}}\n",
                log = log.display(),
                ok = ok.display()
            ),
        )
        .unwrap();
    let r = sb
        .run(&["run", wf.to_str().unwrap(), "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let id = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    std::fs::write(&ok, "").unwrap();
    let again = sb.run(&["resume", &id]).unwrap();
    assert_eq!(again.code, 0, "{}", again.stderr);
    let lines = std::fs::read_to_string(&log).unwrap();
    assert_eq!(lines.matches("q1-B").count(), 1, "{lines}");
    assert_eq!(lines.matches("q2-B").count(), 2, "{lines}");
}

/// Text output that cannot be written (stdout on a full disk) is an error exit in every
/// format, not a silent success.
#[test]
fn text_output_to_a_full_disk_is_an_error_exit() {
    let sb = Sandbox::new().unwrap();
    let wf = sb.write("ok.yaml", OK).unwrap();
    let wf = wf.to_str().unwrap();
    for args in [
        vec!["list"],
        vec!["validate", wf],
        vec!["error"],
        vec!["diagram", wf],
        vec!["run", wf, "--dry-run"],
        vec!["run", wf, "-o", "streaming"],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = sb
            .cmd(&args)
            .stdout(full)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{args:?}: {err}");
        assert!(err.contains("SYSTEM.IO.WRITE_FAILED"), "{args:?}: {err}");
    }
    // To /dev/null all is well.
    let out = sb.cmd(&["list"]).stdout(Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
}

/// `awf status` and `awf resume` of a run the history has but that has no state file say
/// why there is nothing to show, and how to start it again (a breaker got a bare "not
/// found" with a hint to a list that omits the run): a run whose awf was killed before it
/// wrote its first state file (here: killed, then its state file removed, which leaves the
/// same record), and a finished run whose state file was removed.
#[test]
fn a_run_known_only_to_the_history_is_explained_by_status_and_resume() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "long.yaml",
            "name: long\nstates:\n  initial: a\n  a: {type: step, command: 'sleep 33', on_success: done}\n  done: {type: terminal}\n",
        )
        .unwrap();
    let mut child = run_until(&sb, &wf, "sleep 33", false);
    awf_tests::wait_for_state(&sb, "the run to be recorded at a", |v| {
        v["current_state"] == "a"
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = sb.kill_processes(Some("sleep 33"));
    let states = awf_tests::data(&sb).join("states");
    let h = sb.run(&["history", "-f", "json"]).unwrap().json().unwrap();
    let id = h[0]["id"].as_str().unwrap().to_owned();
    std::fs::remove_file(states.join(format!("{id}.json"))).unwrap();
    let _ = std::fs::remove_file(states.join(format!("{id}.journal")));
    assert_eq!(h[0]["status"], "running", "{h}");
    for args in [["status", id.as_str()], ["resume", &id[..8]]] {
        let r = sb.run(&args).unwrap();
        assert_eq!(r.code, 1, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains(&format!(
                "workflow execution not found: {id} (the history has this run of 'long', but its \
                 state file is missing (its awf process was stopped before it wrote it, or the \
                 file was removed)"
            )),
            "{args:?}: {}",
            r.stderr
        );
        let again = format!("Hint: start it again: awf run {}", wf.display());
        assert!(r.stderr.contains(&again), "{}", r.stderr);
    }
    // A finished run whose state file was removed.
    let ok = sb.write("ok.yaml", OK).unwrap();
    let done = sb
        .run(&["run", ok.to_str().unwrap(), "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    let done_id = done["run_id"].as_str().unwrap().to_owned();
    std::fs::remove_file(states.join(format!("{done_id}.json"))).unwrap();
    let r = sb.run(&["status", &done_id]).unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("(the history has this run of 'ok', but its state file is missing:"),
        "{}",
        r.stderr
    );
    // A relative path as typed is only good from where it was typed.
    sb.write(
        "child.yaml",
        "name: child\nstates:\n  initial: a\n  a: {type: step, command: 'true', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let rel = sb
        .run(&["run", "child.yaml", "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    let rel_id = rel["run_id"].as_str().unwrap().to_owned();
    std::fs::remove_file(states.join(format!("{rel_id}.json"))).unwrap();
    let r = sb.run(&["status", &rel_id]).unwrap();
    assert!(
        r.stderr
            .contains("start it again: awf run child.yaml (from the directory it was started in)"),
        "{}",
        r.stderr
    );
    // A sub-workflow's run: its parent's run is the one to look at.
    sb.write(
        "parent.yaml",
        "name: parent\nstates:\n  initial: c\n  c: {type: call_workflow, workflow: child.yaml, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let p = sb.run(&["run", "parent.yaml", "-f", "json"]).unwrap();
    assert_eq!(p.code, 0, "{}", p.stderr);
    let parent_id = p.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    let h = sb.run(&["history", "-f", "json"]).unwrap().json().unwrap();
    let kid = h
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["parent_run_id"] == parent_id.as_str())
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::remove_file(states.join(format!("{kid}.json"))).unwrap();
    let r = sb.run(&["status", &kid]).unwrap();
    assert!(
        r.stderr.contains(&format!(
            "it ran as a sub-workflow of run {parent_id}: `awf status {parent_id}`"
        )),
        "{}",
        r.stderr
    );
}

/// `awf run --step S` of a step that fails before it has an exit code (its command's
/// template fails) says `Step 'S' failed`, not `(exit code: none)`, and the error on stderr;
/// one that exits says its code.
#[test]
fn a_single_step_without_an_exit_code_is_not_reported_with_exit_code_none() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "s.yaml",
        "name: s\ninputs:\n  - name: n\n    default: x\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'echo {{ index .inputs.n 9 }}'\n    on_success: b\n  b:\n    type: step\n    command: 'exit 4'\n    on_success: done\n  done:\n    type: terminal\n",
    )
    .unwrap();
    let r = sb.run(&["run", "s.yaml", "--step", "a"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains("Step 'a' failed\n"), "{}", r.stderr);
    assert!(
        r.stderr.contains("[EXECUTION.TEMPLATE.FAILED]"),
        "{}",
        r.stderr
    );
    let r = sb.run(&["run", "s.yaml", "--step", "b"]).unwrap();
    assert!(
        r.stderr.contains("Step 'b' failed (exit code: 4)\n"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stdout, "");
}

/// A history row left `running` by an awf killed after its state file said the run ended
/// (the state file is written before the row) is written as it ended by the next `awf
/// history`, so `--status` filters and `--stats` agree with what is listed (a breaker saw a
/// row shown `completed` that `--status completed` left out).
#[test]
fn a_row_left_running_after_the_run_ended_is_settled_for_filters_and_totals() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "long.yaml",
            "name: long\nstates:\n  initial: a\n  a: {type: step, command: 'sleep 34', on_success: done}\n  done: {type: terminal}\n",
        )
        .unwrap();
    let mut child = run_until(&sb, &wf, "sleep 34", false);
    awf_tests::wait_for_state(&sb, "the run to be recorded at a", |v| {
        v["current_state"] == "a"
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = sb.kill_processes(Some("sleep 34"));
    let states = awf_tests::data(&sb).join("states");
    let h = sb.run(&["history", "-f", "json"]).unwrap().json().unwrap();
    let id = h[0]["id"].as_str().unwrap().to_owned();
    // As if awf had died between the run's last state file and its history row.
    let path = states.join(format!("{id}.json"));
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    doc["status"] = "success".into();
    doc["exit_code"] = 0.into();
    std::fs::write(&path, doc.to_string()).unwrap();
    let _ = std::fs::remove_file(states.join(format!("{id}.journal")));
    let done = sb
        .run(&["history", "--status", "completed", "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(done[0]["id"], id.as_str(), "{done}");
    assert_eq!(done[0]["status"], "completed", "{done}");
    let running = sb
        .run(&["history", "--status", "running", "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(running, serde_json::json!([]), "{running}");
    let st = sb
        .run(&["history", "--stats", "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(
        (
            st["total_executions"].as_u64(),
            st["success_count"].as_u64(),
            st["running_count"].as_u64()
        ),
        (Some(1), Some(1), Some(0)),
        "{st}"
    );
}

/// `awf resume -f json` that cannot resume its run names the run and its workflow in the
/// result object (a breaker found `run_id: null` and the run id as `workflow`).
#[test]
fn a_resume_that_fails_before_it_starts_names_its_run_in_json() {
    let sb = Sandbox::new().unwrap();
    sb.write("ok.yaml", OK).unwrap();
    let done = sb
        .run(&["run", "ok.yaml", "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    let id = done["run_id"].as_str().unwrap().to_owned();
    let r = sb.run(&["resume", &id, "-f", "json"]).unwrap();
    assert_eq!(r.code, 1, "{}", r.stdout);
    let doc = r.json().unwrap();
    assert_eq!(doc["run_id"], id.as_str(), "{doc}");
    assert_eq!(doc["workflow"], "ok.yaml", "{doc}");
    assert_eq!(
        doc["error"]["code"], "USER.INPUT.VALIDATION_FAILED",
        "{doc}"
    );
}

/// New user: a failing hook command stopped the rest of its hook list without saying so
/// ("pre hook failed: hook command exited with code 1"); the warning now counts the actions
/// that did not run.
#[test]
fn a_failed_hook_action_says_how_many_after_it_did_not_run() {
    let sb = Sandbox::new().unwrap();
    let r = sb
        .run_workflow(
            "hooks.yaml",
            "name: hooks\nstates:\n  initial: s\n  s:\n    type: step\n    command: 'true'\n    hooks:\n      pre:\n        - log: first log\n        - command: exit 1\n        - log: after failing command\n        - command: touch third.marker\n    on_success: done\n  done: {type: terminal}\n",
            &[],
        )
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let all = format!("{}{}", r.stdout, r.stderr);
    assert!(all.contains("first log"), "{all}");
    assert!(
        all.contains("step s: pre hook failed: `exit 1` exited with code 1 (the 2 hook actions after it did not run)"),
        "{all}"
    );
    assert!(!all.contains("after failing command"), "{all}");
    assert!(!sb.path().join("third.marker").exists());
}

/// New user: `when: "int(states.s.Output) > 10"` after `echo 12` failed with the value's
/// newline cutting the message in two and nothing said why.
#[test]
fn an_expression_failing_on_an_outputs_newline_says_to_trim_it() {
    let sb = Sandbox::new().unwrap();
    let r = sb
        .run_workflow(
            "n.yaml",
            "name: n\nstates:\n  initial: s\n  s:\n    type: step\n    command: echo 12\n    transitions:\n      - when: \"int(states.s.Output) > 10\"\n        goto: done\n      - goto: done\n  done: {type: terminal}\n",
            &[],
        )
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains("int(12\\n)"), "{}", r.stderr);
    assert!(
        r.stderr.contains("Hint: a step's Output keeps the command's last newline: write trim(states.<step>.Output)"),
        "{}",
        r.stderr
    );
}

/// Breaker: a `max_iterations` that resolved to `2.7` ran 2 iterations where `abc` was
/// refused: only an integer, or arithmetic (with an operator, as in AWF (Go)), is a count.
#[test]
fn a_fractional_max_iterations_is_refused_and_arithmetic_still_works() {
    let sb = Sandbox::new().unwrap();
    let wf = "name: lim\ninputs:\n  - {name: lim, type: string}\nstates:\n  initial: l\n  l:\n    type: while\n    while: 'true'\n    max_iterations: '{{.inputs.lim}}'\n    body: [b]\n    on_complete: done\n  b: {type: step, command: 'echo x'}\n  done: {type: terminal}\n";
    let r = sb
        .run_workflow("lim.yaml", wf, &["-i", "lim=2.7", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stdout);
    let doc = r.json().unwrap();
    assert_eq!(doc["error"]["code"], "EXECUTION.LOOP.FAILED", "{doc}");
    assert!(
        doc["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("\"2.7\" is not an integer")),
        "{doc}"
    );
    let r = sb
        .run_workflow("lim.yaml", wf, &["-i", "lim=5 / 2", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.json().unwrap()["states"]["l"]["output"],
        "completed 2 iterations"
    );
}
