//! A trial of the shared PostgreSQL store, over the real binary (`AWF_TEST_PG_URL`,
//! scripts/pg.sh; one database per test): `awf status`, `awf history` and `awf history
//! --stats` with `--store` tell a live run from one whose awf process is gone by the shared
//! store's run locks, not by the embedded store's lock files.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use awf_tests::Sandbox;
use awf_tests::pg::TestDb;
use awf_tests::pg::psql;
use serde_json::Value;

/// A step that waits for the file `go` (a loop, so that nothing is left running once the
/// file is there, even after its awf process was killed).
const HOLD: &str = "name: hold\nstates:\n  initial: a\n  a: {type: step, command: 'while [ ! -f go ]; do sleep 0.1; done', on_success: done}\n  done: {type: terminal}\n";

/// Writes `go` when dropped (also when an assertion fails), so that the step's loop ends.
struct Go<'a>(&'a Sandbox);

impl Drop for Go<'_> {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.path().join("go"), "");
    }
}

/// What `status`, `history` and `history --stats` say of the run `id` in `db`: the status
/// line, the history entry (JSON) and the stats (JSON).
fn views(sb: &Sandbox, db: &TestDb, id: &str) -> (String, Value, Value) {
    let status = sb.run(&["--store", &db.url, "status", id]).unwrap();
    assert_eq!(status.code, 0, "{}", status.stderr);
    let line = status
        .stdout
        .lines()
        .find(|l| l.starts_with("Status:"))
        .unwrap_or_default()
        .to_owned();
    let history = sb
        .run(&["--store", &db.url, "history", "-n", "1", "-f", "json"])
        .unwrap();
    assert_eq!(history.code, 0, "{}", history.stderr);
    let entry = history.json().unwrap()[0].clone();
    let stats = sb
        .run(&["--store", &db.url, "history", "--stats", "-f", "json"])
        .unwrap();
    assert_eq!(stats.code, 0, "{}", stats.stderr);
    (line, entry, stats.json().unwrap())
}

/// Item 1 (HIGH): a live `awf run --store` was reported `running (its awf process is gone;
/// …)`, `Duration: unknown`, and counted as `Running (process gone)` by the CLI, which asked
/// the embedded store's lock files (which no run of the shared store holds). Now the run's
/// advisory lock in the shared store says it: live while its process runs, gone once that
/// process is killed.
#[test]
fn a_live_run_of_the_shared_store_is_running_in_status_and_history_until_its_process_dies() {
    let sb = Sandbox::new().unwrap();
    sb.write("hold.yaml", HOLD).unwrap();
    let db = TestDb::new();
    let _go = Go(&sb);
    let mut child = sb
        .cmd(&["--store", &db.url, "run", "hold.yaml", "-q"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    awf_tests::wait_for("awf to create the schema", || {
        !psql(
            &db.url,
            "SELECT coalesce(to_regclass('awf_runs')::text, '')",
        )
        .is_empty()
    });
    let mut id = String::new();
    awf_tests::wait_for("the run's step to start", || {
        id = psql(
            &db.url,
            "SELECT coalesce(max(run_id), '') FROM awf_runs WHERE snapshot->>'current_state' = 'a'",
        );
        !id.is_empty()
    });
    let (line, entry, stats) = views(&sb, &db, &id);
    assert_eq!(line, "Status:    running", "live run");
    assert_eq!(entry["id"], id.as_str(), "{entry}");
    assert_eq!(entry["status"], "running", "{entry}");
    assert!(entry.get("process_gone").is_none(), "{entry}");
    assert_eq!(
        (&stats["running_count"], stats.get("process_gone_count")),
        (&Value::from(1), None),
        "{stats}"
    );
    let text = sb.run(&["--store", &db.url, "history", "--stats"]).unwrap();
    assert!(
        text.stdout.contains("Running: 1") && !text.stdout.contains("process gone"),
        "{}",
        text.stdout
    );
    // Its process killed: the lock is released with its connection, and the run is gone.
    child.kill().unwrap();
    child.wait().unwrap();
    let mut seen = None;
    awf_tests::wait_for("the killed run to be told gone", || {
        let v = views(&sb, &db, &id);
        let gone = v.0.contains("its awf process is gone");
        seen = Some(v);
        gone
    });
    let (_, entry, stats) = seen.unwrap();
    assert_eq!(entry["process_gone"], true, "{entry}");
    assert_eq!(
        (&stats["running_count"], stats.get("process_gone_count")),
        (&Value::from(0), Some(&Value::from(1))),
        "{stats}"
    );
}

/// Item 2 (MED): a queued run's `started_at` was overwritten with the time a worker claimed
/// it, dropping its time in the queue (README: a queued run has its submit time as its
/// start). Now the run keeps its submit time as its start once it runs, on every surface,
/// and its `duration_ms` spans its time in the queue. (Its submit time is set an hour back,
/// so that the claim cannot fall within the same millisecond.)
#[test]
fn a_queued_run_keeps_its_submit_time_as_its_start_once_a_worker_runs_it() {
    let db = TestDb::new();
    let mut sb = awf_tests::http_serve::sandbox_with(&[(
        "quick",
        "name: quick\nstates:\n  initial: a\n  a: {type: step, command: echo hi, on_success: done}\n  done: {type: terminal}\n",
    )]);
    sb.set_env("AWF_STORE", &db.url);
    let r = sb.run(&["run", "--submit", "quick"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let id = r.stdout.trim().to_owned();
    psql(
        &db.url,
        &format!(
            "UPDATE awf_runs SET submitted_at = submitted_at - interval '1 hour' \
             WHERE run_id = '{id}'"
        ),
    );
    let status = |sb: &Sandbox| {
        let r = sb.run(&["status", &id, "-f", "json"]).unwrap();
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.json().unwrap()
    };
    let queued = status(&sb);
    assert_eq!(queued["status"], "queued", "{queued}");
    let submitted = queued["started_at"].as_str().unwrap().to_owned();
    let _worker = awf_tests::http_serve::start(&sb, &[]);
    awf_tests::wait_for("the worker to run the run", || {
        psql(
            &db.url,
            &format!("SELECT status FROM awf_runs WHERE run_id = '{id}'"),
        ) == "success"
    });
    let done = status(&sb);
    assert_eq!(done["run_status"], "success", "{done}");
    assert_eq!(done["started_at"], submitted.as_str(), "awf status: {done}");
    let duration = done["duration_ms"].as_u64().unwrap();
    assert!(duration >= 3_600_000, "awf status: {done}");
    let h = sb.run(&["history", "-n", "1", "-f", "json"]).unwrap();
    let row = h.json().unwrap()[0].clone();
    assert_eq!(row["id"], id.as_str(), "{row}");
    assert_eq!(row["started_at"], submitted.as_str(), "awf history: {row}");
    assert_eq!(row["duration_ms"], duration, "awf history: {row}");
    // The run's result (its `run_finished` event) says the same duration.
    let finished = psql(
        &db.url,
        &format!(
            "SELECT envelope->'event'->'result'->>'duration_ms' FROM awf_events \
             WHERE run_id = '{id}' AND kind = 'run_finished'"
        ),
    );
    assert_eq!(finished, duration.to_string(), "run_finished");
}
