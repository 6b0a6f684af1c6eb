//! Trial findings fixed in round 74, over the real binary and a PostgreSQL server of the
//! test's own: the session advisory lock a terminal `awf run --store` holds for its run dies
//! with the server's sessions when PostgreSQL restarts. The process takes it again as soon
//! as the server is back, and until then its run still counts as held, so `awf resume
//! --store` is refused and `awf cancel --store` asks the process to stop it (it records the
//! end itself) instead of ending it as one whose process is gone. Also: the hint of a run a
//! terminal parked on a usage limit on the shared store, and `awf status`'s hint for a run
//! whose process is gone.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use awf_tests::Sandbox;
use awf_tests::pg::PrivateServer;
use awf_tests::pg::TestDb;
use awf_tests::pg::psql;
use serde_json::Value;

/// Three steps of a few seconds each.
const SLOW: &str = "name: slow
states:
  initial: s1
  s1: {type: step, command: sleep 3, on_success: s2}
  s2: {type: step, command: sleep 3, on_success: s3}
  s3: {type: step, command: sleep 3, on_success: done}
  done: {type: terminal}
";

/// How many sessions hold the run lock of `id` (its advisory lock, key `awf-run:<id>`).
fn lock_holders(url: &str, id: &str) -> String {
    psql(
        url,
        &format!(
            "SELECT count(*) FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted \
             AND ((l.classid::bigint << 32) | l.objid::bigint) = hashtextextended('awf-run:{id}', 0)"
        ),
    )
}

#[test]
fn a_terminal_run_keeps_its_lock_across_a_postgresql_restart() {
    let server = PrivateServer::start();
    psql(&server.url("postgres"), "CREATE DATABASE awf");
    let url = server.url("awf");
    // The schema first, so that polling the tables cannot race the run's migration.
    drop(awf_postgres::PgStore::connect(&url).unwrap());
    let sb = Sandbox::new().unwrap();
    sb.write("slow.yaml", SLOW).unwrap();
    let child = sb
        .cmd(&["--store", &url, "run", "slow.yaml", "-q"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut id = String::new();
    awf_tests::wait_for("the run to be recorded and locked", || {
        id = psql(&url, "SELECT run_id FROM awf_runs WHERE status = 'running'");
        !id.is_empty() && lock_holders(&url, &id) == "1"
    });
    server.stop();
    std::thread::sleep(Duration::from_millis(500));
    server.start_again();
    // Right after the restart: refused, whether the process has taken the lock again yet or
    // not.
    let r = sb.run(&["--store", &url, "resume", &id]).unwrap();
    assert_eq!(r.code, 1, "{} {}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains(&format!("run {id} is still running in another awf process")),
        "{}",
        r.stderr
    );
    let r = sb.run(&["--store", &url, "status", &id]).unwrap();
    assert!(
        r.stdout.contains("running") && !r.stdout.contains("gone"),
        "{}",
        r.stdout
    );
    // The process takes its lock again on a new session.
    awf_tests::wait_for("the lock to be taken again", || {
        lock_holders(&url, &id) == "1"
    });
    // A cancel asks the process to stop the run; it ends it (once), not the cancel.
    let r = sb
        .run(&["--store", &url, "cancel", &id, "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let cancel: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(cancel["status"], "cancel_requested", "{}", r.stdout);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        psql(
            &url,
            &format!("SELECT status FROM awf_runs WHERE run_id = '{id}'")
        ),
        "cancelled"
    );
    assert_eq!(
        psql(
            &url,
            &format!(
                "SELECT count(*) FROM awf_events WHERE root_run_id = '{id}' AND kind = 'run_finished'"
            )
        ),
        "1",
        "one end, recorded by the process that ran it"
    );
    // Released at the end: nothing holds it, no holder row is left.
    assert_eq!(lock_holders(&url, &id), "0");
    assert_eq!(psql(&url, "SELECT count(*) FROM awf_run_holders"), "0");
}

#[test]
fn a_holder_taking_its_lock_again_after_a_restart_still_counts_as_holding_it() {
    // The window between the restart and the holder's new session, made long: the holder's
    // row says it renewed under the server's previous start, a moment ago.
    let db = TestDb::new();
    let url = db.url.clone();
    let store = awf_postgres::PgStore::connect(&url).unwrap();
    let sb = Sandbox::new().unwrap();
    sb.write("slow.yaml", SLOW).unwrap();
    sb.write(
        "fails.yaml",
        "name: fails\nstates:\n  initial: s1\n  s1: {type: step, command: exit 1, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb
        .run(&["--store", &url, "run", "fails.yaml", "-f", "json"])
        .unwrap();
    let id = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    psql(
        &url,
        &format!(
            "INSERT INTO awf_run_holders (lock_key, holder, server_start, renewed_at) \
             VALUES ('awf-run:{id}', 'elsewhere', pg_postmaster_start_time() - interval '1 hour', now())"
        ),
    );
    assert_eq!(
        awf_domain::ports::RunLocks::is_held(&store, &id),
        Some(true)
    );
    let r = sb.run(&["--store", &url, "resume", &id]).unwrap();
    assert_eq!(r.code, 1, "{} {}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("is still running in another awf process"),
        "{}",
        r.stderr
    );
    // A holder that renewed under the current server start counts only by its session
    // (none: a SIGKILLed holder is seen gone at once).
    psql(
        &url,
        "UPDATE awf_run_holders SET server_start = pg_postmaster_start_time(), renewed_at = now()",
    );
    assert_eq!(
        awf_domain::ports::RunLocks::is_held(&store, &id),
        Some(false)
    );
    // Past its grace (it did not come back after the restart): gone, and the run can be
    // locked.
    psql(
        &url,
        "UPDATE awf_run_holders SET server_start = pg_postmaster_start_time() - interval '1 hour', \
         renewed_at = now() - interval '1 hour'",
    );
    assert_eq!(
        awf_domain::ports::RunLocks::is_held(&store, &id),
        Some(false)
    );
    assert!(
        awf_domain::ports::RunLocks::try_lock(&store, &id)
            .unwrap()
            .is_some()
    );
}

#[test]
fn a_run_of_a_live_worker_is_not_taken_by_awf_resume_after_a_postgresql_restart() {
    let server = PrivateServer::start();
    psql(&server.url("postgres"), "CREATE DATABASE w");
    let url = server.url("w");
    drop(awf_postgres::PgStore::connect(&url).unwrap());
    let mut sb = awf_tests::http_serve::sandbox_with(&[("slow", SLOW)]);
    sb.set_env("AWF_STORE", &url);
    let worker = awf_tests::http_serve::start(&sb, &["--lease", "30s"]);
    let r = sb.run(&["run", "--submit", "slow"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let id = r.stdout.trim().to_owned();
    awf_tests::wait_for("the worker to run it and lock it", || {
        psql(
            &url,
            &format!("SELECT status FROM awf_runs WHERE run_id = '{id}'"),
        ) == "running"
            && lock_holders(&url, &id) == "1"
    });
    server.stop();
    std::thread::sleep(Duration::from_millis(500));
    server.start_again();
    let r = sb.run(&["resume", &id]).unwrap();
    assert_eq!(r.code, 1, "{} {}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains(&format!("run {id} is still running in another awf process")),
        "{}",
        r.stderr
    );
    awf_tests::wait_for("the worker to take its lock again", || {
        lock_holders(&url, &id) == "1"
    });
    awf_tests::wait_for("the run to finish", || {
        psql(
            &url,
            &format!("SELECT status FROM awf_runs WHERE run_id = '{id}'"),
        ) == "success"
    });
    // Run once, by the worker: one end, every step finished once.
    assert_eq!(
        psql(
            &url,
            &format!(
                "SELECT kind || ':' || count(*) FROM awf_events WHERE root_run_id = '{id}' \
                 AND kind IN ('run_finished', 'step_finished') GROUP BY kind ORDER BY kind"
            )
        ),
        "run_finished:1\nstep_finished:3"
    );
    drop(worker);
}

/// A lock released while the server is down (a worker stops a run whose lease it could not
/// renew) leaves its holder row, renewed before the restart: it must not hold the run once
/// the server is back. The process that released it takes it again at once (the worker
/// re-claiming the run it gave back: pg_workers's lease test was re-claimed over and over),
/// and the row is deleted as soon as the server answers, so another process takes it too.
#[test]
fn a_lock_released_while_postgresql_is_down_does_not_hold_the_run_after_the_restart() {
    use awf_domain::ports::RunLocks;
    let server = PrivateServer::start();
    psql(&server.url("postgres"), "CREATE DATABASE awf");
    let url = server.url("awf");
    let store = awf_postgres::PgStore::connect(&url).unwrap();
    let id = "released-while-away";
    let holders = || psql(&url, "SELECT count(*) FROM awf_run_holders");
    // The same process takes it again.
    let held = store.try_lock(id).unwrap().unwrap();
    assert_eq!(lock_holders(&url, id), "1");
    server.stop();
    drop(held);
    server.start_again();
    match store.try_lock(id) {
        Ok(Some(again)) => drop(again),
        Ok(None) => panic!("not locked"),
        Err(e) => panic!("refused: {e}"),
    }
    assert_eq!(lock_holders(&url, id), "0");
    assert_eq!(holders(), "0");
    // Another process: the row left is deleted once the server is back.
    let held = store.try_lock(id).unwrap().unwrap();
    server.stop();
    drop(held);
    server.start_again();
    awf_tests::wait_for("the row left to be deleted", || holders() == "0");
    let other = awf_postgres::PgStore::connect(&url).unwrap();
    assert_eq!(other.is_held(id), Some(false));
    match other.try_lock(id) {
        Ok(Some(again)) => drop(again),
        Ok(None) => panic!("not locked"),
        Err(e) => panic!("refused: {e}"),
    }
}

/// A holder whose session was lost takes its lock again even when another session holds the
/// advisory lock a moment (a process checking whether the run is held: `awf resume`, `awf
/// status`, `awf cancel`, a claim; the holder's row refuses its take and it lets go): the
/// row still names the holder, so the run was not taken from it. (Its keeper took that
/// moment for the run taken by another process, stopped the run, and never took the lock
/// again: trial_fixes_74's restart test failed so now and then.)
#[test]
fn a_holder_is_not_put_off_its_lock_by_a_session_holding_it_a_moment() {
    use awf_domain::ports::RunLocks;
    let db = TestDb::new();
    let url = db.url.clone();
    let store = awf_postgres::PgStore::connect(&url).unwrap();
    let id = "held-a-moment";
    let held = store.try_lock(id).unwrap().unwrap();
    assert_eq!(lock_holders(&url, id), "1");
    // The holder's session ends, and another session takes the lock at once and holds it
    // while the holder tries to take it again.
    psql(
        &url,
        &format!(
            "SELECT pg_terminate_backend(l.pid) FROM pg_locks l WHERE l.locktype = 'advisory' \
             AND l.granted AND ((l.classid::bigint << 32) | l.objid::bigint) = \
             hashtextextended('awf-run:{id}', 0); \
             SELECT pg_advisory_lock(hashtextextended('awf-run:{id}', 0)); SELECT pg_sleep(3)"
        ),
    );
    awf_tests::wait_for("the lock to be taken again", || {
        lock_holders(&url, id) == "1"
    });
    assert!(!store.lock_lost(id));
    assert_eq!(
        psql(&url, "SELECT holder LIKE '%:%' FROM awf_run_holders"),
        "t"
    );
    drop(held);
    assert_eq!(lock_holders(&url, id), "0");
}

/// Item 5: a run a terminal `awf run --store` parked on a usage limit is not resumed by the
/// workers (README "Workers"): its hint does not say `awf serve` resumes it.
#[test]
fn the_hint_of_a_run_parked_by_a_terminal_on_the_shared_store_does_not_promise_a_worker() {
    let mock = awf_mock_llm::MockLlm::start(
        serde_json::json!({"default": {"status": 429, "retry_after": 90}}),
    );
    let db = TestDb::new();
    let mut sb = Sandbox::new().unwrap();
    sb.set_env("OPENAI_BASE_URL", &format!("{}/v1", mock.url()));
    sb.set_env("OPENAI_MODEL", "mock-model");
    sb.set_env("OPENAI_API_KEY", "sk-mock-key-123");
    sb.write(
        "park.yaml",
        "name: park\nstates:\n  initial: ask\n  ask: {type: agent, provider: openai_compatible, prompt: hi, usage_limit: {wait: 1s}, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb
        .run(&["--store", &db.url, "run", "park.yaml", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 3, "{}\n{}", r.stdout, r.stderr);
    let v: Value = r.json().unwrap();
    let id = v["run_id"].as_str().unwrap();
    let hints: Vec<String> = v["error"]["hints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap().to_owned())
        .collect();
    let park = hints
        .iter()
        .find(|h| h.contains("the run is parked until the reset"))
        .unwrap_or_else(|| panic!("{hints:?}"));
    assert!(
        park.contains(id)
            && park.contains("continues it then")
            && !park.contains("`awf serve` resumes it by itself")
            && park.contains("the workers of the shared store do not resume"),
        "{park}"
    );
}

/// Item 9: `awf status --store` of a run whose process is gone (SIGKILL) names the run in its
/// `awf resume` hint, the store flag with it; the process is seen gone at once (its session
/// ended on a server that did not restart).
#[test]
fn status_of_a_run_whose_process_is_gone_names_the_run_to_resume() {
    let db = TestDb::new();
    let url = db.url.clone();
    drop(awf_postgres::PgStore::connect(&url).unwrap());
    let sb = Sandbox::new().unwrap();
    sb.write("slow.yaml", SLOW).unwrap();
    let mut child = sb
        .cmd(&["--store", &url, "run", "slow.yaml", "-q"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut id = String::new();
    awf_tests::wait_for("the run to be recorded and locked", || {
        id = psql(&url, "SELECT run_id FROM awf_runs WHERE status = 'running'");
        !id.is_empty() && lock_holders(&url, &id) == "1"
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let r = sb.run(&["--store", &url, "status", &id]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r
        .stdout
        .lines()
        .find(|l| l.contains("its awf process is gone"))
        .unwrap_or_else(|| panic!("{}", r.stdout));
    assert!(
        line.contains("`awf resume --store ") && line.contains(&format!(" {id}` continues it")),
        "{line}"
    );
}
