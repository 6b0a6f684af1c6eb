//! What a run leaves on disk (issue 9): no lock file after it, and a state file that holds the
//! whole run once it ended (the journal written while it ran is folded in and removed).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

const WF: &str = "name: three\nstates:\n  initial: a\n  a: {type: step, command: 'true', on_success: b}\n  b: {type: step, command: 'echo hi', on_success: c}\n  c: {type: step, command: 'true', on_success: done}\n  done: {type: terminal}\n";

fn files(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn a_finished_run_leaves_no_lock_file_and_no_journal() {
    for record in [None, Some("off")] {
        let mut sb = Sandbox::new().unwrap();
        if let Some(r) = record {
            sb.set_env("AWF_RECORD", r);
        }
        let wf = sb.write("wf.yaml", WF).unwrap();
        let r = sb
            .run(&["run", wf.to_str().unwrap(), "-f", "json"])
            .unwrap();
        assert_eq!(r.code, 0, "{}", r.stderr);
        let root = sb.path().join("data/awf");
        let locks = files(&root.join("locks"));
        assert!(locks.is_empty(), "{record:?}: {locks:?}");
        if record.is_none() {
            let id = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
            // The state file, and the (empty) directory its temp files were written in.
            assert_eq!(
                files(&root.join("states")),
                [".tmp".to_owned(), format!("{id}.json")]
            );
            assert!(files(&root.join("states/.tmp")).is_empty());
            let text = std::fs::read_to_string(root.join(format!("states/{id}.json"))).unwrap();
            let snap: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(snap["states"].as_object().unwrap().len(), 3, "{snap}");
            // Resuming it again takes and releases the lock the same way.
            let again = sb.run(&["resume", &id]).unwrap();
            assert!(files(&root.join("locks")).is_empty(), "{}", again.stderr);
        }
    }
}

/// Issue 9: commands that need no store do not create one (no SQLite files, no folders).
#[test]
fn commands_without_runs_touch_no_data_root() {
    let sb = Sandbox::new().unwrap();
    let wf = sb.write("wf.yaml", WF).unwrap();
    let wf = wf.to_str().unwrap();
    for args in [
        vec!["validate", wf],
        vec!["list"],
        vec!["diagram", wf],
        vec!["error"],
        vec!["--version"],
        vec!["run", wf, "--dry-run"],
    ] {
        let r = sb.run(&args).unwrap();
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        assert!(
            !sb.path().join("data/awf").exists(),
            "{args:?} created the data root: {:?}",
            files(&sb.path().join("data/awf"))
        );
    }
    // A run does record.
    let r = sb.run(&["run", wf]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(sb.path().join("data/awf/history.db").exists());
}

/// A run stopped after its current step completed and before the next one started (killed
/// there, or failed on that step's transition) goes on from the step's recorded result when
/// resumed: the step does not run again (a breaker saw `echo >> log` run twice after a kill
/// at that point). Here the transition fails at run time; fixed, the resume routes on the
/// recorded output without running the step.
#[test]
fn resume_routes_a_completed_current_step_without_running_it_again() {
    let sb = Sandbox::new().unwrap();
    let wf = "name: twice\nstates:\n  initial: a\n  a: {type: step, command: 'echo ran-a >> runs.log', on_success: z}\n  z:\n    type: step\n    command: 'echo ran-z >> runs.log; echo picked'\n    on_success: other\n    transitions:\n      - when: \"WHEN\"\n        goto: done\n  done: {type: terminal}\n  other: {type: terminal, status: failure}\n";
    let path = sb
        .write("wf.yaml", &wf.replace("WHEN", "int('x') > 0"))
        .unwrap();
    let p = path.to_str().unwrap();
    let r = sb.run(&["run", p, "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let v = r.json().unwrap();
    assert_eq!(v["error"]["code"], "EXECUTION.EXPRESSION.FAILED", "{v}");
    let id = v["run_id"].as_str().unwrap().to_owned();
    let status = sb
        .run(&["status", &id, "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(status["current_state"], "z", "{status}");
    assert_eq!(status["states"]["z"]["status"], "completed", "{status}");
    // Fixed: the transition now reads the recorded output.
    sb.write(
        "wf.yaml",
        &wf.replace("WHEN", "states.z.Output contains 'picked'"),
    )
    .unwrap();
    let r = sb.run(&["resume", &id]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("z completed before the resume; going on to done"),
        "{}",
        r.stderr
    );
    let log = std::fs::read_to_string(sb.path().join("runs.log")).unwrap();
    assert_eq!(log, "ran-a\nran-z\n");
    let status = sb
        .run(&["status", &id, "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(status["status"], "completed", "{status}");
    // The run has ended: resuming it again is refused.
    let r = sb.run(&["resume", &id, "--from", "z"]).unwrap();
    assert_ne!(r.code, 0, "a completed run is not resumed: {}", r.stderr);
}

/// Inside a loop, `awf resume` goes on at the body step the iteration stopped at: a body step
/// that completed in that iteration runs neither again when a later one failed, nor when its
/// own transition failed (a breaker saw `b1` of iteration 1 run twice). `b1` and `b2` log
/// each run; `b2` fails in iteration 1 until the file `ok` exists.
#[test]
fn resume_in_a_loop_goes_on_at_the_body_step_it_stopped_at() {
    let sb = Sandbox::new().unwrap();
    let wf = "name: lp\nstates:\n  initial: l\n  l:\n    type: for_each\n    items: '[\"i0\", \"i1\", \"i2\"]'\n    body: [b1, b2]\n    on_complete: done\n  b1:\n    type: step\n    command: 'echo b1-{{.loop.Item}} >> runs.log'\n    transitions:\n      - when: \"WHEN\"\n        goto: b2\n  b2:\n    type: step\n    command: 'echo b2-{{.loop.Item}} >> runs.log; test {{.loop.Item}} != i1 -o -f ok'\n  done: {type: terminal}\n";
    // 1. A later body step fails: the resume starts at it, not at b1.
    sb.write("wf.yaml", &wf.replace("WHEN", "true")).unwrap();
    let r = sb.run(&["run", "wf.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let id = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    sb.write("ok", "").unwrap();
    let r = sb.run(&["resume", &id]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let log = std::fs::read_to_string(sb.path().join("runs.log")).unwrap();
    assert_eq!(log, "b1-i0\nb2-i0\nb1-i1\nb2-i1\nb2-i1\nb1-i2\nb2-i2\n");
    // 2. A body step's own transition fails after it completed: fixed, the resume routes on
    // its record without running it again.
    std::fs::remove_file(sb.path().join("runs.log")).unwrap();
    sb.write(
        "wf.yaml",
        &wf.replace("WHEN", "loop.Index != 1 || int('x') > 0"),
    )
    .unwrap();
    let r = sb.run(&["run", "wf.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let id = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    sb.write("wf.yaml", &wf.replace("WHEN", "true")).unwrap();
    let r = sb.run(&["resume", &id]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("b1 completed in iteration 1 before the resume; going on from it"),
        "{}",
        r.stderr
    );
    let log = std::fs::read_to_string(sb.path().join("runs.log")).unwrap();
    assert_eq!(log, "b1-i0\nb2-i0\nb1-i1\nb2-i1\nb1-i2\nb2-i2\n");
}

/// A history.db with SQLite's header whose pages are garbage passes the check at open and
/// fails when the recorder opens it: the run's state is recorded, the run ends with exit 4 and
/// a hint to move the file aside, at once (no retries of an error no wait can mend: they took
/// 1.5 s), and with `-f json` the one document on stdout says the same exit code and error
/// (it said exit_code 0 while the process exited 4).
#[test]
fn a_damaged_history_db_found_by_the_recorder_is_said_in_the_exit_code_and_the_json() {
    let sb = Sandbox::new().unwrap();
    let wf = sb.write("wf.yaml", WF).unwrap();
    let db = sb.path().join("data/awf/history.db");
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    let mut garbage = b"SQLite format 3\0".to_vec();
    garbage.resize(4096, 0xff);
    std::fs::write(&db, &garbage).unwrap();

    let t0 = std::time::Instant::now();
    let r = sb.run(&["run", wf.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(
        t0.elapsed() < std::time::Duration::from_millis(1400),
        "{:?}",
        t0.elapsed()
    );
    assert!(r.stderr.contains("Workflow completed."), "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "[SYSTEM.IO.WRITE_FAILED] the run succeeded but its record could not be written"
        ) && r.stderr.contains("file is not a database")
            && r.stderr.contains("move it aside"),
        "{}",
        r.stderr
    );
    // The run's state was written: `awf status` knows how it ended.
    let states = std::fs::read_dir(sb.path().join("data/awf/states"))
        .unwrap()
        .count();
    assert!(states >= 1);

    let j = sb
        .run(&["run", "-f", "json", wf.to_str().unwrap()])
        .unwrap();
    assert_eq!(j.code, 4, "{}", j.stderr);
    let v: serde_json::Value = serde_json::from_str(&j.stdout).unwrap();
    assert_eq!(v["exit_code"], 4, "{v}");
    assert_eq!(v["status"], "success", "{v}");
    assert_eq!(v["error"]["code"], "SYSTEM.IO.WRITE_FAILED", "{v}");
    assert!(
        v["error"]["hints"][0]
            .as_str()
            .unwrap()
            .contains("move it aside"),
        "{v}"
    );
    // `awf history` says what is wrong with the file and what to do, at once.
    let h = sb.run(&["history"]).unwrap();
    assert_eq!(h.code, 4, "{}", h.stderr);
    assert!(
        h.stderr.contains("cannot open the history database") && h.stderr.contains("move it aside"),
        "{}",
        h.stderr
    );
    // The file was left as it was: nothing of the user's is overwritten.
    assert_eq!(std::fs::read(&db).unwrap(), garbage);
    // Chaos trial: the hint said "`awf history` will not list this run", but a new database
    // is filled from the state files: the run is listed once the file is moved aside.
    assert!(
        r.stderr
            .contains("move it aside: awf creates a new one and fills it from the runs' state files, this run's included"),
        "{}",
        r.stderr
    );
    std::fs::rename(&db, sb.path().join("damaged.db")).unwrap();
    let h = sb.run(&["history"]).unwrap();
    assert_eq!(h.code, 0, "{}", h.stderr);
    let id = v["run_id"].as_str().unwrap();
    assert!(h.stdout.contains(id), "{id}: {}", h.stdout);
}

/// A history.db that is no database (a directory here) leaves the run recorded (trial 22,
/// issue 2: the history is an index): its state file is written, the history write fails as
/// for a damaged database (exit 4, the hint to move the file aside); `awf history` fails at
/// once with the same message.
#[test]
fn a_history_db_that_is_no_database_still_leaves_the_state_file() {
    let sb = Sandbox::new().unwrap();
    let wf = sb.write("wf.yaml", WF).unwrap();
    std::fs::create_dir_all(sb.path().join("data/awf/history.db")).unwrap();
    let r = sb.run(&["run", wf.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(
        r.stderr.contains("history.db") && r.stderr.contains("move it aside"),
        "{}",
        r.stderr
    );
    let states = std::fs::read_dir(sb.path().join("data/awf/states"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .count();
    assert_eq!(states, 1);
    let t0 = std::time::Instant::now();
    let h = sb.run(&["history"]).unwrap();
    assert_ne!(h.code, 0);
    assert!(h.stderr.contains("not a regular file"), "{}", h.stderr);
    // No retries of an open that cannot succeed (they take 1.5 s).
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(1),
        "{:?}",
        t0.elapsed()
    );
}
