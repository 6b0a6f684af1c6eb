//! Fixes of a breaker's findings on run records, over the real binary with a private data
//! dir: the lock files and journals of runs SIGKILLed at their end (or before their state
//! file) are swept later, never a live run's; a run killed right after its start (a state
//! file, no history row) is listed by `awf history`; the write-failure hint of a run whose
//! journal could not be written says what is affected; `awf status <prefix>` and `awf resume
//! --list` do not read the state files they do not need.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::path::PathBuf;

use awf_tests::Sandbox;
use awf_tests::run_id_in;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

const QUICK: &str = "name: quick
states:
  initial: s
  s:
    type: step
    command: echo ok
    on_success: done
  done: {type: terminal}
";

/// Runs `awf run <file>` (its yaml written first) and gives the run id; the run must succeed.
fn run_ok(sb: &Sandbox, file: &str, yaml: &str) -> String {
    let r = sb.run_workflow(file, yaml, &[]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    run_id_in(&r.stderr).unwrap()
}

/// Sets the modification time of `path` a minute back (a sweep leaves younger lock files
/// alone: their process may be about to take them).
fn age(path: &Path) {
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(60))
        .unwrap();
}

/// Writes an empty lock file a minute old: what a run SIGKILLed holding it left.
fn leave_lock(data: &Path, id: &str) {
    let p = data.join("locks").join(format!("{id}.lock"));
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, "").unwrap();
    age(&p);
}

/// Writes a journal line beside the state file of `id`.
fn leave_journal(data: &Path, id: &str) {
    std::fs::write(
        data.join("states").join(format!("{id}.journal")),
        "{\"status\":\"running\",\"current_state\":\"s\",\"updated_at\":\"2025-01-01T00:00:00Z\",\"states\":{}}\n",
    )
    .unwrap();
}

/// The names in `dir`, sorted (none when it does not exist).
fn names(dir: &Path) -> Vec<String> {
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

/// The journals of the states directory, sorted.
fn journals(data: &Path) -> Vec<String> {
    names(&data.join("states"))
        .into_iter()
        .filter(|n| n.ends_with(".journal"))
        .collect()
}

/// The pid of a process that has exited (reaped).
fn dead_pid() -> u32 {
    let mut c = std::process::Command::new("true").spawn().unwrap();
    c.wait().unwrap();
    c.id()
}

/// Writes the state file of a run `id` that has no history row, made from the state file of
/// run `from` with `changes` applied: what a run killed between them leaves.
fn state_without_row(data: &Path, from: &str, id: &str, changes: &Value) -> PathBuf {
    let states = data.join("states");
    let mut v: Value = serde_json::from_str(
        &std::fs::read_to_string(states.join(format!("{from}.json"))).unwrap(),
    )
    .unwrap();
    v["run_id"] = json!(id);
    for (k, val) in changes.as_object().unwrap() {
        v[k] = val.clone();
    }
    let p = states.join(format!("{id}.json"));
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    p
}

const KILLED_EARLY: &str = "0b0b0b0b-0000-4000-8000-00000000000b";
const KILLED_RUNNING: &str = "0c0c0c0c-0000-4000-8000-00000000000c";
const NO_ROW_RUNNING: &str = "0d0d0d0d-0000-4000-8000-00000000000d";
const NO_ROW_ENDED: &str = "0e0e0e0e-0000-4000-8000-00000000000e";

/// Finding 1: runs SIGKILLed at their end left `states/<id>.journal` beside a state file
/// saying success, and `locks/<id>.lock`, for ever; runs killed before their state file an
/// orphan lock. The start-up sweep of the next run removes the locks no process holds and
/// the journal of the ended run (not the one of a run killed while running: it is that run's
/// record); so do `awf history`, `awf resume --list` and `awf status <id>`. A live run's lock
/// stays.
#[test]
fn leftover_locks_and_journals_of_killed_runs_are_swept_later() {
    let sb = Sandbox::new().unwrap();
    let data = awf_tests::data(&sb);
    let ended = run_ok(&sb, "quick.yaml", QUICK);
    state_without_row(
        &data,
        &ended,
        KILLED_RUNNING,
        &json!({"status": "running", "completed_at": null, "exit_code": null, "owner_pid": dead_pid()}),
    );
    let leave = || {
        leave_journal(&data, &ended);
        leave_lock(&data, &ended);
        leave_lock(&data, KILLED_EARLY);
        leave_journal(&data, KILLED_RUNNING);
        leave_lock(&data, KILLED_RUNNING);
    };
    leave();
    assert_eq!(names(&data.join("locks")).len(), 3);

    // The start-up sweep of a run, while the run goes on: its step waits for it.
    let gone = |id: &str| format!("[ ! -e \"$XDG_DATA_HOME/awf/locks/{id}.lock\" ]");
    let wait = format!(
        "name: wait\nstates:\n  initial: w\n  w:\n    type: step\n    command: 'for i in $(seq 600); do if {} && {} && {} && [ ! -e \"$XDG_DATA_HOME/awf/states/{ended}.journal\" ]; then exit 0; fi; sleep 0.05; done; exit 1'\n    on_success: done\n  done: {{type: terminal}}\n",
        gone(&ended),
        gone(KILLED_EARLY),
        gone(KILLED_RUNNING)
    );
    run_ok(&sb, "wait.yaml", &wait);
    assert_eq!(names(&data.join("locks")), Vec::<String>::new());
    assert_eq!(journals(&data), [format!("{KILLED_RUNNING}.journal")]);

    // The commands that read the records, with a run live meanwhile: its lock stays.
    sb.write(
        "live.yaml",
        "name: live\nstates:\n  initial: w\n  w:\n    type: step\n    command: 'while [ ! -e go ]; do sleep 0.05; done'\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    let mut live = sb
        .cmd(&["run", "live.yaml"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let live_id = awf_tests::wait_for_state(&sb, "the live run's step", |v| {
        v["workflow_name"] == "live" && v["current_state"] == "w"
    });
    let live_lock = data.join("locks").join(format!("{live_id}.lock"));
    awf_tests::wait_for("the live run's lock", || live_lock.exists());
    age(&live_lock);
    for args in [&["history"][..], &["resume", "--list"]] {
        leave();
        let r = sb.run(args).unwrap();
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        assert_eq!(
            names(&data.join("locks")),
            [format!("{live_id}.lock")],
            "{args:?}"
        );
        let mut want = vec![format!("{KILLED_RUNNING}.journal")];
        // The live run's own journal, if it has one yet, stays.
        if data
            .join("states")
            .join(format!("{live_id}.journal"))
            .exists()
        {
            want.push(format!("{live_id}.journal"));
            want.sort();
        }
        assert_eq!(journals(&data), want, "{args:?}");
    }
    std::fs::write(sb.path().join("go"), "").unwrap();
    assert!(live.wait().unwrap().success());
    assert_eq!(names(&data.join("locks")), Vec::<String>::new());

    // `awf status <id>` of the ended run: its journal goes.
    leave_journal(&data, &ended);
    let r = sb.run(&["status", &ended]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("Status:    completed\n"), "{}", r.stdout);
    assert_eq!(journals(&data), [format!("{KILLED_RUNNING}.journal")]);
}

/// Finding 2: a run killed a few milliseconds after its start has a state file but no history
/// row: `awf status` and `awf resume --list` knew it, `awf history` and `--stats` left it out.
/// A history read writes the row from the state file (here also for a run whose state file
/// says it succeeded).
#[test]
fn a_state_file_without_a_history_row_is_listed_by_history() {
    let sb = Sandbox::new().unwrap();
    let data = awf_tests::data(&sb);
    let first = run_ok(&sb, "quick.yaml", QUICK);
    state_without_row(
        &data,
        &first,
        NO_ROW_RUNNING,
        &json!({
            "status": "running", "completed_at": null, "exit_code": null,
            "owner_pid": dead_pid(), "started_at": "2024-01-02T00:00:00Z",
            "updated_at": "2024-01-02T00:00:00Z", "terminal": null
        }),
    );
    state_without_row(
        &data,
        &first,
        NO_ROW_ENDED,
        &json!({
            "started_at": "2024-01-01T00:00:00Z", "updated_at": "2024-01-01T00:00:01Z",
            "completed_at": "2024-01-01T00:00:01Z"
        }),
    );
    let rows = |sb: &Sandbox| -> Vec<(String, String, Value, Value)> {
        let h = sb.run(&["history", "-f", "json"]).unwrap();
        assert_eq!(h.code, 0, "{}", h.stderr);
        h.json()
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["id"].as_str().unwrap().to_owned(),
                    r["status"].as_str().unwrap().to_owned(),
                    r["duration_ms"].clone(),
                    r.get("process_gone").cloned().unwrap_or(Value::Null),
                )
            })
            .map(|(id, st, d, g)| (id, st, if d.is_null() { d } else { json!("set") }, g))
            .collect()
    };
    let want = vec![
        (first, "completed".to_owned(), json!("set"), Value::Null),
        (
            NO_ROW_RUNNING.to_owned(),
            "running".to_owned(),
            Value::Null,
            json!(true),
        ),
        (
            NO_ROW_ENDED.to_owned(),
            "completed".to_owned(),
            json!("set"),
            Value::Null,
        ),
    ];
    assert_eq!(rows(&sb), want);
    // Written: the next read lists them the same.
    assert_eq!(rows(&sb), want);
    let s = sb
        .run(&["history", "--stats", "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(
        (
            &s["total_executions"],
            &s["success_count"],
            &s["failed_count"],
            &s["running_count"],
            &s["process_gone_count"]
        ),
        (&json!(3), &json!(2), &json!(0), &json!(0), &json!(1)),
        "{s}"
    );
}

/// Finding 3: the journal could not be written (here a file size limit the journal outgrew:
/// a loop records its body at every iteration): the hint said `awf status`/`resume` "will
/// not know this run's end". Since stop 46 the run stops before its next step (its steps'
/// ends could not be recorded) with the hint to free space and resume.
#[test]
fn a_journal_write_failure_stops_the_run_before_its_next_step() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "grow.yaml",
            "name: grow\nstates:\n  initial: l\n  l:\n    type: for_each\n    items: '[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30]'\n    body: [b]\n    on_complete: done\n  b:\n    type: step\n    command: head -c 20000 /dev/zero | tr '\\0' x\n  done: {type: terminal}\n",
        )
        .unwrap();
    let c = sb.cmd(&["run", wf.to_str().unwrap()]);
    // bash: `ulimit -f` counts 1024-byte blocks (200 KiB); awf exec'd under it.
    let mut sh = std::process::Command::new("bash");
    sh.arg("-c")
        .arg("ulimit -f 200; exec \"$@\"")
        .arg("bash")
        .arg(c.get_program())
        .args(c.get_args())
        .current_dir(sb.path())
        .stdin(std::process::Stdio::null());
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    let r = awf_tests::Run::from(sh.output().unwrap());
    assert_eq!(r.code, 4, "{}{}", r.stdout, r.stderr);
    let id = run_id_in(&r.stderr).unwrap();
    let data = awf_tests::data(&sb);
    let journal_error = format!(
        "cannot write the state journal {}: File too large (os error 27)",
        data.join("states").join(format!("{id}.journal")).display()
    );
    assert!(r.stderr.contains(&journal_error), "{}", r.stderr);
    // Stop 46 (chaos trial): a run whose steps can no longer be recorded stops before its
    // next step (it went on, and `awf resume` after a kill would have run them all again).
    assert!(
        r.stderr.contains(&format!(
            "the run's record could not be written, so it stopped before its next step: {journal_error}"
        )) && r.stderr.contains("Workflow failed: [SYSTEM.IO.WRITE_FAILED]")
            && r.stderr.contains(&format!(
                "Hint: free disk space or make the data root {} writable, then resume the run",
                data.display()
            ))
            && r.stderr.contains(&format!("`awf resume {id}`")),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("Workflow completed"), "{}", r.stderr);
    assert!(!r.stderr.contains("b[29]"), "{}", r.stderr);
    assert!(!r.stderr.contains("will not know"), "{}", r.stderr);
}

/// Runs `awf <args>`, failing the test (instead of hanging it) when it has not ended within a
/// minute: a command that opens a FIFO waits for a writer for ever.
fn run_or_fail(sb: &Sandbox, args: &[&str]) -> awf_tests::Run {
    let mut cmd = sb.cmd(args);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(cmd.output());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(out) => awf_tests::Run::from(out.unwrap()),
        Err(_) => {
            sb.kill_processes(None);
            panic!("awf {args:?} did not end: it opened a state file it did not need");
        }
    }
}

/// Finding 4: with 30,000 state files `awf status <prefix>` took 2.1 s and `awf resume
/// --list` 2.6 s, reading every state file. A prefix is matched against the names of the
/// state files and the history's ids, and `resume --list` does not read the state files of
/// runs the history records as succeeded: here one of them is a FIFO, which would block any
/// reader.
#[test]
fn a_prefix_and_the_resumable_list_read_no_state_file_they_do_not_need() {
    let sb = Sandbox::new().unwrap();
    let data = awf_tests::data(&sb);
    let ok = run_ok(&sb, "quick.yaml", QUICK);
    let r = sb
        .run_workflow(
            "fail.yaml",
            "name: fail\nstates:\n  initial: s\n  s:\n    type: step\n    command: exit 3\n    on_success: done\n  done: {type: terminal}\n",
            &[],
        )
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let failed = run_id_in(&r.stderr).unwrap();
    let state = data.join("states").join(format!("{ok}.json"));
    std::fs::remove_file(&state).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&state)
        .status()
        .unwrap();
    assert!(made.success());

    let st = run_or_fail(&sb, &["status", &failed[..8]]);
    assert_eq!(st.code, 0, "{}", st.stderr);
    assert!(
        st.stdout.starts_with(&format!("Run:       {failed}\n")),
        "{}",
        st.stdout
    );
    let list = run_or_fail(&sb, &["resume", "--list", "-f", "quiet"]);
    assert_eq!(
        (list.code, list.stdout.as_str(), list.stderr.as_str()),
        (0, format!("{failed}\n").as_str(), "")
    );
    let h = run_or_fail(&sb, &["history", "-f", "json"]);
    assert_eq!(h.code, 0, "{}", h.stderr);
    assert_eq!(h.json().unwrap().as_array().unwrap().len(), 2);
}
