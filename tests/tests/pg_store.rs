//! The shared store on PostgreSQL (issue 15, part 1): the store ports and the terminal
//! commands (`awf run`, `resume`, `status`, `history`) with `--store postgres://…`, against
//! a real server (`AWF_TEST_PG_URL`, scripts/pg.sh; one database per test). The test that
//! restarts PostgreSQL runs a private server of its own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

use awf_domain::ErrorCode;
use awf_domain::event::EventEnvelope;
use awf_domain::event::EventPublisher;
use awf_domain::event::RunEvent;
use awf_domain::ports::store::HistoryFilter;
use awf_domain::ports::store::HistoryStore;
use awf_domain::ports::store::RunSnapshot;
use awf_domain::ports::store::STATE_SCHEMA_VERSION;
use awf_domain::ports::store::StateStore;
use awf_domain::ports::store::StoredStatus;
use awf_domain::run::RunId;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use awf_domain::run::StepState;
use awf_domain::run::StepStatus;
use awf_tests::Sandbox;
use awf_tests::pg::PrivateServer;
use awf_tests::pg::TestDb;
use awf_tests::pg::psql;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

fn t(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(1_764_464_523_000 + ms)
}

fn env(run: &str, seq: u64, at: u64, path: &str, event: RunEvent) -> EventEnvelope {
    EventEnvelope {
        seq,
        run_id: RunId(run.to_owned()),
        parent_run_id: None,
        at: t(at),
        path: path.to_owned(),
        iteration: None,
        event,
    }
}

fn state(step: &str, at: u64, ok: bool) -> StepState {
    let mut s = StepState::running(step, t(at));
    s.status = if ok {
        StepStatus::Completed
    } else {
        StepStatus::Failed
    };
    s.output = format!("{step} out\n").into();
    s.exit_code = Some(if ok { 0 } else { 2 });
    s.attempts = 1;
    s.completed_at = Some(t(at + 5));
    s
}

/// Emits one run: started at `at`, one step `s`, finished with `end` (none: still running).
fn emit_run(rec: &dyn EventPublisher, run: &str, wf: &str, at: u64, end: Option<RunStatus>) {
    rec.emit(env(
        run,
        1,
        at,
        "",
        RunEvent::RunStarted {
            workflow: wf.to_owned(),
            identifier: format!("{wf}.yaml"),
            workflow_path: None,
            inputs: serde_json::Map::new(),
            resumed_from: None,
            pid: 1,
            mocks: Default::default(),
            working_dir: None,
        },
    ));
    rec.emit(env(
        run,
        2,
        at + 1,
        "s",
        RunEvent::StepStarted {
            step: "s".into(),
            kind: "command".into(),
            command: None,
        },
    ));
    let ok = end != Some(RunStatus::Failure);
    rec.emit(env(
        run,
        3,
        at + 2,
        "s",
        RunEvent::StepFinished {
            step: "s".into(),
            kind: "command".into(),
            state: Box::new(state("s", at + 1, ok)),
        },
    ));
    if let Some(status) = end {
        rec.emit(env(
            run,
            4,
            at + 10,
            "",
            RunEvent::RunFinished {
                result: Box::new(RunResult {
                    run_id: Some(RunId(run.to_owned())),
                    workflow: format!("{wf}.yaml"),
                    status,
                    exit_code: u8::from(status != RunStatus::Success),
                    terminal: None,
                    duration_ms: 100 * (at / 1000 + 1),
                    states: BTreeMap::new(),
                    outputs: BTreeMap::new(),
                    error: None,
                    message: None,
                    spend: None,
                }),
            },
        ));
    }
}

fn snapshot(run: &str, at: u64) -> RunSnapshot {
    RunSnapshot {
        schema_version: STATE_SCHEMA_VERSION,
        run_id: run.to_owned(),
        parent_run_id: None,
        workflow: "saved.yaml".into(),
        workflow_name: "saved".into(),
        workflow_path: None,
        status: StoredStatus::Failure,
        current_state: "s".into(),
        inputs: serde_json::Map::new(),
        states: BTreeMap::from([("s".to_owned(), state("s", at, false))]),
        started_at: t(at),
        updated_at: t(at + 5),
        completed_at: Some(t(at + 5)),
        exit_code: Some(1),
        terminal: None,
        error: None,
        outputs: BTreeMap::new(),
        owner_pid: Some(7),
        loop_position: None,
        spend: None,
        waiting_until: None,
        child_runs: Default::default(),
        mocks: Default::default(),
        working_dir: None,
    }
}

/// The store ports' shared suite: ONE set of assertions for any store (its state port, its
/// history port and its recorder).
fn port_suite(states: &dyn StateStore, history: &dyn HistoryStore, rec: &dyn EventPublisher) {
    // The history first (the embedded store fills a history it creates from the state
    // files there are: a lost `history.db` is rebuilt).
    assert_eq!(history.get("saved-a").unwrap(), None);
    // Recorded runs: alpha succeeds, beta fails, alpha again is still running.
    emit_run(rec, "r-1", "alpha", 10_000, Some(RunStatus::Success));
    emit_run(rec, "r-2", "beta", 20_000, Some(RunStatus::Failure));
    emit_run(rec, "r-3", "alpha", 30_000, None);
    rec.flush();
    let ids = |f: &HistoryFilter| -> Vec<String> {
        history.list(f).unwrap().into_iter().map(|r| r.id).collect()
    };
    assert_eq!(ids(&HistoryFilter::default()), ["r-3", "r-2", "r-1"]);
    let alpha = HistoryFilter {
        workflow: Some("alpha".into()),
        ..HistoryFilter::default()
    };
    assert_eq!(ids(&alpha), ["r-3", "r-1"]);
    let by_ident = HistoryFilter {
        workflow: Some("beta.yaml".into()),
        ..HistoryFilter::default()
    };
    assert_eq!(ids(&by_ident), ["r-2"]);
    let failed = HistoryFilter {
        status: Some(StoredStatus::Failure),
        ..HistoryFilter::default()
    };
    assert_eq!(ids(&failed), ["r-2"]);
    let since = HistoryFilter {
        since_ms: Some(awf_domain::projection::millis(t(20_000))),
        ..HistoryFilter::default()
    };
    assert_eq!(ids(&since), ["r-3", "r-2"]);
    let one = HistoryFilter {
        limit: Some(1),
        ..HistoryFilter::default()
    };
    assert_eq!(ids(&one), ["r-3"]);
    let stats = history.stats(&one).unwrap();
    assert_eq!(
        (
            stats.total_executions,
            stats.success_count,
            stats.failed_count,
            stats.cancelled_count,
            stats.running_count,
            stats.avg_duration_ms
        ),
        (3, 1, 1, 0, 1, Some(10)),
        "the limit is ignored; the mean is over finished runs (completed_at − started_at: 10 ms each)"
    );
    let alpha_stats = history.stats(&alpha).unwrap();
    assert_eq!(
        (alpha_stats.total_executions, alpha_stats.running_count),
        (2, 1)
    );
    let r2 = history.get("r-2").unwrap().unwrap();
    assert_eq!(
        (
            r2.workflow_id.as_str(),
            r2.workflow_name.as_str(),
            r2.status,
            r2.exit_code,
            r2.started_at_ms,
            r2.completed_at_ms,
            r2.duration_ms
        ),
        (
            "beta.yaml",
            "beta",
            StoredStatus::Failure,
            Some(1),
            awf_domain::projection::millis(t(20_000)),
            Some(awf_domain::projection::millis(t(20_010))),
            // completed_at − started_at, not the result's own figure.
            Some(10)
        )
    );
    assert_eq!(history.get("nope").unwrap(), None);
    // Snapshots: save, load, list newest first, overwrite. Saved without a run, after the
    // history's assertions: the embedded store's history reads add rows for state files
    // that have none (runs killed before their first row, stop 43); the shared store keeps
    // both in one database.
    let (a, b) = (snapshot("saved-a", 1_000), snapshot("saved-b", 2_000));
    states.save(&a).unwrap();
    states.save(&b).unwrap();
    assert_eq!(states.load("saved-a").unwrap(), a);
    let mut b2 = b;
    b2.current_state = "t".into();
    states.save(&b2).unwrap();
    assert_eq!(states.load("saved-b").unwrap(), b2);
    let unknown = states.load("nope").unwrap_err();
    assert_eq!(unknown.code(), ErrorCode::UserInputValidationFailed);
    assert_eq!(unknown.hints(), ["awf resume --list"]);
    // Saving a snapshot adds no history row.
    assert_eq!(history.get("saved-a").unwrap(), None);

    // The projection: the snapshot of each recorded run.
    let s1 = states.load("r-1").unwrap();
    assert_eq!(s1.status, StoredStatus::Success);
    assert_eq!(s1.states["s"].output.as_str(), "s out\n");
    assert_eq!(s1.completed_at, Some(t(10_010)));
    let s3 = states.load("r-3").unwrap();
    assert_eq!(
        (s3.status, s3.current_state.as_str()),
        (StoredStatus::Running, "s")
    );
    let listed: Vec<String> = states
        .list()
        .unwrap()
        .into_iter()
        .map(|s| s.run_id)
        .collect();
    assert_eq!(listed, ["r-3", "r-2", "r-1", "saved-b", "saved-a"]);
}

#[test]
fn the_store_ports_behave_the_same_on_the_embedded_store_and_on_postgresql() {
    let dir = tempfile::tempdir().unwrap();
    let env = BTreeMap::from([("USER".to_owned(), "tester".to_owned())]);
    let embedded =
        awf_store::Store::open(awf_store::StorePaths::from_env(dir.path(), &env)).unwrap();
    let rec = embedded.recorder();
    port_suite(&embedded, &embedded, &rec);

    let db = TestDb::new();
    let pg = awf_postgres::PgStore::connect(&db.url).unwrap();
    let rec = pg.recorder("tester");
    port_suite(&pg, &pg, &rec);
    // The audit trail: two lines per finished run, one for a running run, as JSON.
    let lines = psql(
        &db.url,
        "SELECT line->>'event' || ' ' || (line->>'execution_id') || ' ' || (line->>'user') \
         FROM awf_audit ORDER BY id",
    );
    assert_eq!(
        lines.lines().collect::<Vec<_>>(),
        [
            "workflow.started r-1 tester",
            "workflow.completed r-1 tester",
            "workflow.started r-2 tester",
            "workflow.completed r-2 tester",
            "workflow.started r-3 tester",
        ]
    );
}

/// Where a sandbox's runs go: the embedded store in a directory, or a PostgreSQL URL.
fn store_args(store: &Store) -> Vec<String> {
    match store {
        Store::Dir(d) => vec!["--storage".into(), d.display().to_string()],
        Store::Url(u) => vec!["--store".into(), u.clone()],
    }
}

enum Store {
    Dir(std::path::PathBuf),
    Url(String),
}

fn awf(sb: &Sandbox, store: &Store, args: &[&str]) -> awf_tests::Run {
    let mut all = store_args(store);
    all.extend(args.iter().map(|s| (*s).to_owned()));
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    sb.run(&refs).unwrap()
}

/// Drops what differs between two runs of the same workflow (ids, times, durations).
fn normalized(mut v: Value) -> Value {
    match &mut v {
        Value::Object(m) => {
            for k in [
                "id",
                "run_id",
                "workflow_id",
                "started_at",
                "completed_at",
                "started_at_ms",
                "completed_at_ms",
                "duration_ms",
                "avg_duration_ms",
                "duration",
                "updated_at",
                "owner_pid",
                "pid",
                "working_dir",
            ] {
                if m.contains_key(k) {
                    m.insert(k.to_owned(), Value::Null);
                }
            }
            for (_, x) in m.iter_mut() {
                *x = normalized(x.take());
            }
        }
        Value::Array(a) => {
            for x in a.iter_mut() {
                *x = normalized(x.take());
            }
        }
        _ => {}
    }
    v
}

const GREET: &str = "name: greet\nstates:\n  initial: a\n  a: {type: step, command: echo hello, on_success: b}\n  b: {type: step, command: echo world, on_success: done}\n  done: {type: terminal}\n";

/// `a` counts its runs in `count`; `b` fails until the file `go` exists.
const FLAKY: &str = "name: flaky\nstates:\n  initial: a\n  a: {type: step, command: echo x >> count, on_success: b}\n  b: {type: step, command: test -f go, on_success: done}\n  done: {type: terminal, message: 'flaky no more {{.states.a.ExitCode}}'}\n";

/// What the terminal commands say about the same runs, for one store; asserts the
/// behaviour that does not depend on the store.
fn binary_suite(sb: &Sandbox, store: &Store) -> Vec<Value> {
    let _ = std::fs::remove_file(sb.path().join("count"));
    let _ = std::fs::remove_file(sb.path().join("go"));
    let ok = awf(sb, store, &["run", "greet.yaml", "-f", "json"]);
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    let ok_id = ok.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    let bad = awf(sb, store, &["run", "flaky.yaml", "-f", "json"]);
    assert_eq!(bad.code, 3, "a failed step: {}", bad.stderr);
    let bad_id = bad.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    let history = awf(sb, store, &["history", "-f", "json"]);
    assert_eq!(history.code, 0, "{}", history.stderr);
    let rows = history.json().unwrap();
    let ids: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [bad_id.as_str(), ok_id.as_str()], "newest first");
    let failed = awf(sb, store, &["history", "--status", "failed", "-f", "json"]);
    assert_eq!(failed.json().unwrap().as_array().unwrap().len(), 1);
    let stats = awf(sb, store, &["history", "--stats", "-f", "json"]);
    assert_eq!(stats.code, 0, "{}", stats.stderr);
    let status_bad = awf(sb, store, &["status", &bad_id, "-f", "json"]);
    assert_eq!(status_bad.code, 0, "{}", status_bad.stderr);
    let list = awf(sb, store, &["resume", "--list", "-f", "json"]);
    assert_eq!(list.code, 0, "{}", list.stderr);
    assert!(list.stdout.contains(&bad_id), "{}", list.stdout);
    // Resume after the failure: `a` (completed) is not run again.
    std::fs::write(sb.path().join("go"), "").unwrap();
    let resumed = awf(sb, store, &["resume", &bad_id, "-f", "json"]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert_eq!(
        std::fs::read_to_string(sb.path().join("count")).unwrap(),
        "x\n",
        "the completed state `a` ran once"
    );
    let status_after = awf(sb, store, &["status", &bad_id, "-f", "json"]);
    let after = status_after.json().unwrap();
    assert_eq!(after["status"], json!("completed"), "{after}");
    // The success terminal's message, as the store kept it (none while it had failed).
    assert_eq!(after["message"], json!("flaky no more 0"), "{after}");
    assert_eq!(status_bad.json().unwrap()["message"], json!(null));
    // Both stores keep the directory the run started in (each sandbox has its own).
    let here = sb.path().canonicalize().unwrap().display().to_string();
    assert_eq!(after["working_dir"], json!(here), "{after}");
    let text = awf(sb, store, &["status", &bad_id]);
    assert!(
        text.stdout.contains("Message:   flaky no more 0\n"),
        "{}",
        text.stdout
    );
    vec![
        normalized(rows),
        normalized(stats.json().unwrap()),
        normalized(status_bad.json().unwrap()),
        normalized(after),
        normalized(awf(sb, store, &["history", "-f", "json"]).json().unwrap()),
    ]
}

fn sandbox() -> Sandbox {
    let sb = Sandbox::new().unwrap();
    sb.write("greet.yaml", GREET).unwrap();
    sb.write("flaky.yaml", FLAKY).unwrap();
    sb
}

#[test]
fn the_terminal_commands_say_the_same_with_the_embedded_store_and_with_postgresql() {
    let sb = sandbox();
    let dir = sb.path().join("embedded");
    let embedded = binary_suite(&sb, &Store::Dir(dir.clone()));
    let db = TestDb::new();
    let sb2 = sandbox();
    let shared = binary_suite(&sb2, &Store::Url(db.url.clone()));
    assert_eq!(shared, embedded);
    // With --store, nothing of the runs goes under the data root.
    let root = awf_tests::data(&sb2);
    for name in [
        "states",
        "transcripts",
        "history.db",
        "audit.jsonl",
        "locks",
        "outputs",
    ] {
        assert!(
            !root.join(name).exists(),
            "{name} was written under the data root"
        );
    }
    // The embedded store did record there.
    assert!(dir.join("states").is_dir());
}

#[test]
fn awf_store_in_the_environment_chooses_the_shared_store_and_the_flag_wins() {
    let mut sb = sandbox();
    let db = TestDb::new();
    sb.set_env("AWF_STORE", &db.url);
    let r = sb.run(&["run", "greet.yaml", "-q"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(psql(&db.url, "SELECT count(*) FROM awf_runs"), "1");
    assert_eq!(psql(&db.url, "SELECT count(*) FROM awf_audit"), "2");
    // AWF_AUDIT_LOG=off: no audit rows either.
    sb.set_env("AWF_AUDIT_LOG", "off");
    let r = sb.run(&["run", "greet.yaml", "-q"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(psql(&db.url, "SELECT count(*) FROM awf_runs"), "2");
    assert_eq!(psql(&db.url, "SELECT count(*) FROM awf_audit"), "2");
    // An empty --store means the embedded store, AWF_STORE notwithstanding.
    let r = sb.run(&["--store", "", "run", "greet.yaml", "-q"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(psql(&db.url, "SELECT count(*) FROM awf_runs"), "2");
    assert!(awf_tests::data(&sb).join("states").is_dir());
}

#[test]
fn migrations_create_the_schema_once_and_a_newer_schema_is_refused_untouched() {
    let db = TestDb::new();
    let _first = awf_postgres::PgStore::connect(&db.url).unwrap();
    assert_eq!(psql(&db.url, "SELECT version FROM awf_schema"), "4");
    let tables = psql(
        &db.url,
        "SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables WHERE tablename LIKE 'awf_%'",
    );
    assert_eq!(
        tables,
        "awf_answers,awf_audit,awf_events,awf_run_holders,awf_runs,awf_schema,awf_workers"
    );
    // A second connect is a no-op.
    let _second = awf_postgres::PgStore::connect(&db.url).unwrap();
    assert_eq!(
        psql(
            &db.url,
            "SELECT count(*) || ':' || max(version) FROM awf_schema"
        ),
        "1:4"
    );
    let has_column = |name: &str| {
        psql(
            &db.url,
            &format!(
                "SELECT count(*) FROM information_schema.columns \
                 WHERE table_name = 'awf_runs' AND column_name = '{name}'"
            ),
        ) == "1"
    };
    // A database of schema 1 (before `awf_runs.message`) is migrated to 4.
    psql(
        &db.url,
        "ALTER TABLE awf_runs DROP COLUMN message, DROP COLUMN waiting_until; \
         DROP TABLE awf_run_holders; UPDATE awf_schema SET version = 1",
    );
    let _third = awf_postgres::PgStore::connect(&db.url).unwrap();
    assert_eq!(psql(&db.url, "SELECT version FROM awf_schema"), "4");
    assert!(has_column("message") && has_column("waiting_until"));
    // One of schema 2 (before `awf_runs.waiting_until`) is migrated to 4, its rows kept.
    psql(
        &db.url,
        "ALTER TABLE awf_runs DROP COLUMN waiting_until; DROP TABLE awf_run_holders; \
         UPDATE awf_schema SET version = 2; \
         INSERT INTO awf_runs (run_id, root_run_id, workflow_id, workflow_name, status) \
         VALUES ('old', 'old', 'w', 'w', 'success')",
    );
    let _fourth = awf_postgres::PgStore::connect(&db.url).unwrap();
    assert_eq!(psql(&db.url, "SELECT version FROM awf_schema"), "4");
    assert!(has_column("waiting_until"));
    assert_eq!(
        psql(&db.url, "SELECT status FROM awf_runs WHERE run_id = 'old'"),
        "success"
    );
    psql(&db.url, "DELETE FROM awf_runs");
    // A database migrated by a newer awf.
    psql(&db.url, "UPDATE awf_schema SET version = 99");
    let sb = sandbox();
    for args in [
        vec!["--store", db.url.as_str(), "run", "greet.yaml"],
        vec!["--store", db.url.as_str(), "history"],
    ] {
        let r = sb.run(&args).unwrap();
        assert_eq!(r.code, 4, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr.starts_with("[SYSTEM.STORE.SCHEMA_NEWER]") && r.stderr.contains("99"),
            "{}",
            r.stderr
        );
    }
    assert_eq!(psql(&db.url, "SELECT count(*) FROM awf_runs"), "0");
    assert_eq!(psql(&db.url, "SELECT version FROM awf_schema"), "99");
}

/// The decoded event rows of `root`: (position, envelope), in position order.
fn event_rows(url: &str, root: &str) -> Vec<(i64, EventEnvelope)> {
    let text = psql(
        url,
        &format!(
            "SELECT position || ' ' || seq || ' ' || kind || ' ' || envelope::text FROM awf_events \
             WHERE root_run_id = '{root}' ORDER BY position"
        ),
    );
    text.lines()
        .map(|l| {
            let mut parts = l.splitn(4, ' ');
            let pos: i64 = parts.next().unwrap().parse().unwrap();
            let seq: u64 = parts.next().unwrap().parse().unwrap();
            let kind = parts.next().unwrap().to_owned();
            let env: EventEnvelope = serde_json::from_str(parts.next().unwrap()).unwrap();
            assert_eq!(env.seq, seq);
            let v = serde_json::to_value(&env).unwrap();
            assert_eq!(v["event"]["type"], json!(kind));
            (pos, env)
        })
        .collect()
}

/// (kind, step name) of the run/step events, in order.
fn step_sequence(events: &[EventEnvelope]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            RunEvent::RunStarted { .. } => Some(("run.started".into(), String::new())),
            RunEvent::StepStarted { step, .. } => Some(("step.started".into(), step.clone())),
            RunEvent::StepFinished { step, .. } => Some(("step.completed".into(), step.clone())),
            RunEvent::RunFinished { .. } => Some(("run.completed".into(), String::new())),
            _ => None,
        })
        .collect()
}

/// The same from an embedded transcript.
fn transcript_sequence(path: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let kind = v["type"].as_str().unwrap().to_owned();
            match kind.as_str() {
                "run.started" | "run.completed" => Some((kind, String::new())),
                "step.started" | "step.completed" => {
                    Some((kind, v["payload"]["name"].as_str().unwrap().to_owned()))
                }
                _ => None,
            }
        })
        .collect()
}

#[test]
fn event_rows_are_the_envelopes_in_order_and_a_resumed_run_continues_their_positions_and_seqs() {
    let sb = sandbox();
    let db = TestDb::new();
    let r = sb
        .run(&["--store", &db.url, "run", "flaky.yaml", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 3, "a failed step: {}", r.stderr);
    let id = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    let rows = event_rows(&db.url, &id);
    let positions: Vec<i64> = rows.iter().map(|(p, _)| *p).collect();
    assert_eq!(positions, (1..=rows.len() as i64).collect::<Vec<_>>());
    let seqs: Vec<u64> = rows.iter().map(|(_, e)| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=rows.len() as u64).collect::<Vec<_>>(),
        "emission order"
    );
    let envs: Vec<EventEnvelope> = rows.into_iter().map(|(_, e)| e).collect();
    // The same run recorded by the embedded store: the same step sequence.
    let dir = sb.path().join("embedded");
    let e = sb
        .run(&[
            "--storage",
            &dir.display().to_string(),
            "run",
            "flaky.yaml",
            "-f",
            "json",
        ])
        .unwrap();
    let eid = e.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    let transcript = dir.join("transcripts").join(format!("{eid}.jsonl"));
    assert_eq!(step_sequence(&envs), transcript_sequence(&transcript));
    assert_eq!(
        step_sequence(&envs),
        [
            ("run.started".to_owned(), String::new()),
            ("step.started".to_owned(), "a".to_owned()),
            ("step.completed".to_owned(), "a".to_owned()),
            ("step.started".to_owned(), "b".to_owned()),
            ("step.completed".to_owned(), "b".to_owned()),
            ("run.completed".to_owned(), String::new()),
        ]
    );
    let n = envs.len() as i64;
    // Resumed: positions and seqs go on after n (the embedded transcript's seqs continue
    // the same way): a client that dedups or resumes by either sees no repeat and no gap.
    std::fs::write(sb.path().join("go"), "").unwrap();
    let r = sb.run(&["--store", &db.url, "resume", &id, "-q"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let rows = event_rows(&db.url, &id);
    let positions: Vec<i64> = rows.iter().map(|(p, _)| *p).collect();
    assert_eq!(positions, (1..=rows.len() as i64).collect::<Vec<_>>());
    let (pos, second) = &rows[usize::try_from(n).unwrap()];
    assert_eq!(*pos, n + 1);
    assert!(
        matches!(&second.event, RunEvent::RunStarted { resumed_from: Some(s), .. } if s == "b"),
        "{second:?}"
    );
    assert_eq!(second.seq, u64::try_from(n + 1).unwrap());
    let seqs: Vec<u64> = rows.iter().map(|(_, e)| e.seq).collect();
    assert_eq!(seqs, (1..=rows.len() as u64).collect::<Vec<_>>());
    // The embedded store does the same: its resumed run's transcript seqs continue.
    let r = sb
        .run(&[
            "--storage",
            &dir.display().to_string(),
            "resume",
            &eid,
            "-q",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let seqs: Vec<u64> = std::fs::read_to_string(&transcript)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert!(matches!(
        rows.last().unwrap().1.event,
        RunEvent::RunFinished { .. }
    ));
}

#[test]
fn a_run_held_by_a_live_process_cannot_be_resumed_until_the_holder_dies() {
    let sb = sandbox();
    let db = TestDb::new();
    sb.write(
        "hold.yaml",
        "name: hold\nstates:\n  initial: a\n  a: {type: step, command: test -f go || sleep 120, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let mut child = sb
        .cmd(&["--store", &db.url, "run", "hold.yaml", "-q"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut id = String::new();
    // The schema is awf's to create: poll the runs only once it exists.
    awf_tests::wait_for("awf to create the schema", || {
        !psql(
            &db.url,
            "SELECT coalesce(to_regclass('awf_runs')::text, '')",
        )
        .is_empty()
    });
    awf_tests::wait_for("the run's step to start", || {
        id = psql(
            &db.url,
            "SELECT coalesce(max(run_id), '') FROM awf_runs WHERE snapshot->>'current_state' = 'a'",
        );
        !id.is_empty()
    });
    let refused = sb.run(&["--store", &db.url, "resume", &id]).unwrap();
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains("is still running in another awf process"),
        "{}",
        refused.stderr
    );
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::write(sb.path().join("go"), "").unwrap();
    let mut resumed = None;
    awf_tests::wait_for("the lock to be released", || {
        let r = sb
            .run(&["--store", &db.url, "resume", &id, "-f", "json"])
            .unwrap();
        let done = r.code == 0;
        resumed = Some(r);
        done
    });
    let r = resumed.unwrap();
    assert_eq!(
        r.json().unwrap()["status"],
        json!("success"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_run_goes_on_while_postgresql_restarts_and_everything_is_recorded_once() {
    let server = PrivateServer::start();
    psql(&server.url("postgres"), "CREATE DATABASE awf");
    let url = server.url("awf");
    // The schema first, so that polling the tables cannot race the run's migration.
    drop(awf_postgres::PgStore::connect(&url).unwrap());
    let sb = sandbox();
    sb.write(
        "slow.yaml",
        "name: slow\nstates:\n  initial: s1\n  s1: {type: step, command: sleep 1, on_success: s2}\n  s2: {type: step, command: sleep 1, on_success: s3}\n  s3: {type: step, command: sleep 1, on_success: s4}\n  s4: {type: step, command: sleep 1, on_success: s5}\n  s5: {type: step, command: echo last, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let child = sb
        .cmd(&["--store", &url, "run", "slow.yaml", "-q"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    awf_tests::wait_for("s1 to be recorded", || {
        psql(
            &url,
            "SELECT count(*) FROM awf_events WHERE kind = 'step_finished'",
        ) != "0"
    });
    server.stop();
    std::thread::sleep(Duration::from_millis(2500));
    server.start_again();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("WARN run record") && stderr.matches("WARN").count() == 1,
        "one warning: {stderr}"
    );
    let id = psql(&url, "SELECT run_id FROM awf_runs");
    assert_eq!(psql(&url, "SELECT status FROM awf_runs"), "success");
    let rows = event_rows(&url, &id);
    let positions: Vec<i64> = rows.iter().map(|(p, _)| *p).collect();
    assert_eq!(positions, (1..=rows.len() as i64).collect::<Vec<_>>());
    let seqs: Vec<u64> = rows.iter().map(|(_, e)| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=rows.len() as u64).collect::<Vec<_>>(),
        "none lost, none twice"
    );
    let envs: Vec<EventEnvelope> = rows.into_iter().map(|(_, e)| e).collect();
    let finished: Vec<String> = step_sequence(&envs)
        .into_iter()
        .filter(|(k, _)| k == "step.completed")
        .map(|(_, s)| s)
        .collect();
    assert_eq!(finished, ["s1", "s2", "s3", "s4", "s5"]);
    let snap: RunSnapshot =
        serde_json::from_str(&psql(&url, "SELECT snapshot::text FROM awf_runs")).unwrap();
    assert_eq!(snap.states.len(), 5);
    assert_eq!(snap.status, StoredStatus::Success);
    assert_eq!(psql(&url, "SELECT count(*) FROM awf_audit"), "2");
}

#[test]
fn bad_store_urls_and_unreachable_servers_are_clear_errors() {
    let sb = sandbox();
    let r = sb
        .run(&["--store", "mysql://u@h/db", "run", "greet.yaml"])
        .unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.starts_with("[USER.INPUT.VALIDATION_FAILED]")
            && r.stderr.contains("Hint: use postgresql://"),
        "{}",
        r.stderr
    );
    let r = sb
        .run(&["--store", "postgresql://u@h:notaport/db", "history"])
        .unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.starts_with("[USER.INPUT.VALIDATION_FAILED]"),
        "{}",
        r.stderr
    );
    // A closed port: refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let closed = format!("postgresql://postgres:s3cret@127.0.0.1:{port}/x");
    for args in [
        vec!["run", "greet.yaml"],
        vec!["history"],
        vec!["status", "abc"],
    ] {
        let mut all = vec!["--store", closed.as_str()];
        all.extend(args);
        let r = sb.run(&all).unwrap();
        assert_eq!(r.code, 4, "{all:?}: {}", r.stderr);
        assert!(
            r.stderr.starts_with("[SYSTEM.STORE.UNAVAILABLE]")
                && r.stderr
                    .contains(&format!("postgresql://postgres:***@127.0.0.1:{port}/x"))
                && r.stderr.contains("refused")
                && !r.stderr.contains("s3cret"),
            "{}",
            r.stderr
        );
    }
    // A database that does not exist.
    let server = awf_tests::pg::server_url();
    let base = server.rsplit_once('/').unwrap().0;
    let missing = format!("{base}/awf_no_such_db");
    let r = sb.run(&["--store", &missing, "history"]).unwrap();
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(
        r.stderr.starts_with("[SYSTEM.STORE.UNAVAILABLE]")
            && r.stderr.contains("\"awf_no_such_db\" does not exist"),
        "{}",
        r.stderr
    );
    // Nothing was recorded anywhere for the refused runs.
    assert!(!awf_tests::data(&sb).join("states").exists());
}

/// `url` with its user replaced by `user` (no password: the test server trusts loopback).
fn as_user(url: &str, user: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    format!("{scheme}://{user}@{host}")
}

/// The `Hint:` lines of an error on stderr.
fn hints(stderr: &str) -> String {
    stderr
        .lines()
        .filter(|l| l.trim_start().starts_with("Hint:"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A read-only role (SELECT on the awf_* tables, nothing else) reads runs with `awf
/// history` and `awf status` once the schema is current (the schema check used to write,
/// and was refused). Connection and schema errors hint at their own cause, not always at a
/// server that is not running.
#[test]
fn a_read_only_user_reads_runs_and_store_errors_hint_at_their_cause() {
    let sb = sandbox();
    let db = TestDb::new();
    let r = sb
        .run(&["--store", &db.url, "run", "greet.yaml", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let id = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    let role = format!("{}_ro", db.name);
    let server = awf_tests::pg::server_url();
    psql(&server, &format!("CREATE ROLE {role} LOGIN"));
    psql(
        &db.url,
        &format!("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}"),
    );
    let ro = as_user(&db.url, &role);
    let before = psql(&db.url, "SELECT count(*) FROM awf_runs");
    let r = sb.run(&["--store", &ro, "history", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains(&id), "{}", r.stdout);
    let r = sb
        .run(&["--store", &ro, "status", &id, "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json().unwrap()["status"], "completed", "{}", r.stdout);
    assert_eq!(psql(&db.url, "SELECT count(*) FROM awf_runs"), before);
    // The same user on a database without the schema: it may not create it.
    let empty = TestDb::new();
    let r = sb
        .run(&["--store", &as_user(&empty.url, &role), "history"])
        .unwrap();
    assert_eq!(r.code, 4, "{}", r.stderr);
    let h = hints(&r.stderr);
    assert!(
        r.stderr.starts_with("[SYSTEM.STORE.UNAVAILABLE]")
            && h.contains("permission denied")
            && !h.contains("running"),
        "{}",
        r.stderr
    );
    // A database that does not exist.
    let base = server.rsplit_once('/').unwrap().0;
    let r = sb
        .run(&["--store", &format!("{base}/awf_no_such_db"), "history"])
        .unwrap();
    assert_eq!(r.code, 4, "{}", r.stderr);
    let h = hints(&r.stderr);
    assert!(
        h.contains("database does not exist") && !h.contains("running"),
        "{}",
        r.stderr
    );
    // Nobody listening: the server is not running (or not there).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let r = sb
        .run(&[
            "--store",
            &format!("postgresql://postgres@127.0.0.1:{port}/x"),
            "history",
        ])
        .unwrap();
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(hints(&r.stderr).contains("is running"), "{}", r.stderr);
    // A schema newer than this awf's, for the read-only user too: refused, untouched.
    psql(&db.url, "UPDATE awf_schema SET version = 99");
    let r = sb.run(&["--store", &ro, "history"]).unwrap();
    assert_eq!(r.code, 4, "{}", r.stderr);
    let h = hints(&r.stderr);
    assert!(
        r.stderr.starts_with("[SYSTEM.STORE.SCHEMA_NEWER]")
            && h.contains("newer awf")
            && !h.contains("running"),
        "{}",
        r.stderr
    );
    assert_eq!(psql(&db.url, "SELECT version FROM awf_schema"), "99");
    drop((db, empty));
    psql(&server, &format!("DROP ROLE {role}"));
}

#[test]
fn run_locks_are_session_advisory_locks_released_with_their_guard() {
    use awf_domain::ports::RunLocks;
    let db = TestDb::new();
    let a = awf_postgres::PgStore::connect(&db.url).unwrap();
    let b = awf_postgres::PgStore::connect(&db.url).unwrap();
    let held = a.try_lock("run-1").unwrap().expect("a lock");
    let refused = b.try_lock("run-1").unwrap_err();
    assert_eq!(refused.code(), ErrorCode::UserInputValidationFailed);
    assert_eq!(
        refused.message(),
        "run run-1 is still running in another awf process"
    );
    // Another run is not blocked.
    let other = b.try_lock("run-2").unwrap().expect("another run's lock");
    drop(other);
    drop(held);
    let mut again = None;
    awf_tests::wait_for("the lock's session to end", || {
        again = b.try_lock("run-1").ok().flatten();
        again.is_some()
    });
}

#[test]
fn a_fenced_run_whose_claim_was_taken_stops_writing_and_says_so() {
    let db = TestDb::new();
    let pg = awf_postgres::PgStore::connect(&db.url).unwrap();
    let rec = pg.recorder("tester");
    let fenced = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = std::sync::Arc::clone(&fenced);
    rec.on_fenced(std::sync::Arc::new(move |id: &str| {
        seen.lock().unwrap().push(id.to_owned());
    }));
    // Claimed under epoch 0 (the column's default): writes go through.
    rec.fence("f-1", 0);
    emit_run(&rec, "f-1", "alpha", 1_000, None);
    rec.flush();
    assert_eq!(
        psql(
            &db.url,
            "SELECT count(*) FROM awf_events WHERE root_run_id = 'f-1'"
        ),
        "3"
    );
    assert!(fenced.lock().unwrap().is_empty());
    // Another worker claims it (epoch 1): this process's next writes match no row.
    psql(
        &db.url,
        "UPDATE awf_runs SET epoch = 1 WHERE run_id = 'f-1'",
    );
    rec.emit(env(
        "f-1",
        4,
        2_000,
        "t",
        RunEvent::StepStarted {
            step: "t".into(),
            kind: "command".into(),
            command: None,
        },
    ));
    rec.flush();
    assert_eq!(*fenced.lock().unwrap(), ["f-1"]);
    assert_eq!(
        psql(
            &db.url,
            "SELECT count(*) FROM awf_events WHERE root_run_id = 'f-1'"
        ),
        "3",
        "the fenced batch wrote no event"
    );
    assert_eq!(
        psql(
            &db.url,
            "SELECT snapshot->>'current_state' FROM awf_runs WHERE run_id = 'f-1'"
        ),
        "s"
    );
    // Later events of the run are dropped; an unfenced run still writes.
    emit_run(&rec, "f-1", "alpha", 3_000, Some(RunStatus::Success));
    emit_run(&rec, "u-1", "beta", 3_000, Some(RunStatus::Success));
    rec.flush();
    assert_eq!(
        psql(
            &db.url,
            "SELECT count(*) FROM awf_events WHERE root_run_id = 'f-1'"
        ),
        "3"
    );
    assert_eq!(
        psql(&db.url, "SELECT status FROM awf_runs WHERE run_id = 'u-1'"),
        "success"
    );
    assert_eq!(*fenced.lock().unwrap(), ["f-1"], "told once");
}

#[test]
fn a_sub_workflow_run_is_recorded_under_its_root_run() {
    let sb = sandbox();
    let db = TestDb::new();
    let r = sb
        .run(&["--store", &db.url, "run", "call-parent", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let root = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    let child = psql(
        &db.url,
        &format!("SELECT run_id FROM awf_runs WHERE parent_run_id = '{root}'"),
    );
    assert!(!child.is_empty(), "the child run has its row");
    assert_eq!(
        psql(
            &db.url,
            "SELECT string_agg(DISTINCT root_run_id, ',') FROM awf_runs"
        ),
        root,
        "both rows name the root run"
    );
    let rows = event_rows(&db.url, &root);
    let positions: Vec<i64> = rows.iter().map(|(p, _)| *p).collect();
    assert_eq!(positions, (1..=rows.len() as i64).collect::<Vec<_>>());
    let of = |id: &str| {
        rows.iter()
            .filter(|(_, e)| e.run_id.0 == id)
            .map(|(_, e)| e.seq)
            .collect::<Vec<_>>()
    };
    let (root_seqs, child_seqs) = (of(&root), of(&child));
    assert_eq!(root_seqs, (1..=root_seqs.len() as u64).collect::<Vec<_>>());
    assert_eq!(
        child_seqs,
        (1..=child_seqs.len() as u64).collect::<Vec<_>>()
    );
    assert!(
        child_seqs.len() >= 2,
        "the child's events are in the root's log"
    );
    // The child's own history row and snapshot, as the embedded store keeps them.
    let h = sb
        .run(&["--store", &db.url, "history", "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    let parents: Vec<Value> = h
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["parent_run_id"].clone())
        .collect();
    assert!(parents.contains(&json!(root)), "{h}");
    let st = sb
        .run(&["--store", &db.url, "status", &child, "-f", "json"])
        .unwrap();
    assert_eq!(st.code, 0, "{}", st.stderr);
    assert_eq!(st.json().unwrap()["status"], json!("completed"));
}

#[test]
fn the_recorder_keeps_what_it_could_not_write_and_writes_it_once_the_server_is_back() {
    let server = PrivateServer::start();
    psql(&server.url("postgres"), "CREATE DATABASE awf");
    let url = server.url("awf");
    let pg = awf_postgres::PgStore::connect(&url).unwrap();
    let rec = pg.recorder("tester");
    let warnings = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = std::sync::Arc::clone(&warnings);
    rec.on_error(std::sync::Arc::new(move |m: String| {
        seen.lock().unwrap().push(m)
    }));
    emit_run(&rec, "k-1", "alpha", 1_000, None);
    assert!(rec.flush_within(Duration::from_secs(30)));
    server.stop();
    // The rest of the run while the server is away: queued, not lost.
    rec.emit(env(
        "k-1",
        4,
        2_000,
        "",
        RunEvent::RunFinished {
            result: Box::new(RunResult {
                run_id: Some(RunId("k-1".into())),
                workflow: "alpha.yaml".into(),
                status: RunStatus::Success,
                exit_code: 0,
                terminal: Some("done".into()),
                duration_ms: 1000,
                states: BTreeMap::new(),
                outputs: BTreeMap::new(),
                error: None,
                message: None,
                spend: None,
            }),
        },
    ));
    assert!(
        !rec.flush_within(Duration::from_secs(1)),
        "the server is down"
    );
    assert!(rec.run_record_failed());
    server.start_again();
    assert!(
        rec.flush_within(Duration::from_secs(60)),
        "written once the server is back"
    );
    let w = warnings.lock().unwrap().clone();
    assert!(
        w.iter()
            .any(|m| m.starts_with("cannot write to the PostgreSQL store")),
        "{w:?}"
    );
    assert_eq!(
        psql(
            &url,
            "SELECT string_agg(position || ':' || kind, ',' ORDER BY position) FROM awf_events"
        ),
        "1:run_started,2:step_started,3:step_finished,4:run_finished"
    );
    assert_eq!(psql(&url, "SELECT status FROM awf_runs"), "success");
    assert_eq!(psql(&url, "SELECT count(*) FROM awf_audit"), "2");
}

/// The server goes away for good: the run still ends (its next step waits the flush bound,
/// 30 s, for the record of the steps before it, then goes on without waiting), awf waits the
/// bound again for its record at the end, then says the store was unreachable (exit 4)
/// instead of claiming success.
#[test]
fn a_run_whose_store_stays_away_ends_and_says_its_record_is_incomplete() {
    let server = PrivateServer::start();
    psql(&server.url("postgres"), "CREATE DATABASE awf");
    let url = server.url("awf");
    // The schema first, so that polling the tables cannot race the run's migration.
    drop(awf_postgres::PgStore::connect(&url).unwrap());
    let sb = sandbox();
    sb.write(
        "two.yaml",
        "name: two\nstates:\n  initial: a\n  a: {type: step, command: 'while [ ! -f go ]; do sleep 0.1; done', on_success: b}\n  b: {type: step, command: echo b, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let child = sb
        .cmd(&["--store", &url, "run", "two.yaml", "-q"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    awf_tests::wait_for("step a to start", || {
        psql(
            &url,
            "SELECT count(*) FROM awf_events WHERE kind = 'step_started'",
        ) != "0"
    });
    server.stop();
    std::fs::write(sb.path().join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains(
            "[SYSTEM.STORE.UNAVAILABLE] the run succeeded but its record could not be written"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("WARN run record"), "{stderr}");
}

/// A step that prints a NUL, then a second step.
const NUL: &str = "name: nul\nstates:\n  initial: a\n  a: {type: step, command: 'printf \"before\\0after\\n\"; echo line2', on_success: b}\n  b: {type: step, command: echo world, on_success: done}\n  done: {type: terminal}\n";

#[test]
fn a_nul_in_a_step_output_is_recorded_as_the_replacement_character() {
    let sb = sandbox();
    sb.write("nul.yaml", NUL).unwrap();
    let db = TestDb::new();
    let r = sb
        .run(&["--store", &db.url, "run", "nul.yaml", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let id = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    let envs: Vec<EventEnvelope> = event_rows(&db.url, &id)
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    assert_eq!(
        step_sequence(&envs),
        [
            ("run.started".to_owned(), String::new()),
            ("step.started".to_owned(), "a".to_owned()),
            ("step.completed".to_owned(), "a".to_owned()),
            ("step.started".to_owned(), "b".to_owned()),
            ("step.completed".to_owned(), "b".to_owned()),
            ("run.completed".to_owned(), String::new()),
        ]
    );
    let s = sb
        .run(&["--store", &db.url, "status", &id, "-f", "json"])
        .unwrap();
    assert_eq!(s.code, 0, "{}", s.stderr);
    let v = s.json().unwrap();
    assert_eq!(v["status"], json!("completed"), "{v}");
    let out = v["states"]["a"]["output"].as_str().unwrap_or_default();
    assert!(
        out.contains("before\u{fffd}after") && out.contains("line2"),
        "{v}"
    );
}

#[test]
fn a_password_in_the_query_or_in_the_keyword_form_is_masked_in_errors() {
    let sb = sandbox();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for store in [
        format!("postgresql://postgres@127.0.0.1:{port}/x?password=s3cret"),
        format!("host=127.0.0.1 port={port} password=s3cret dbname=x"),
        format!("host=127.0.0.1 port={port} password='s3cret' dbname=x"),
    ] {
        let r = sb.run(&["--store", &store, "history"]).unwrap();
        assert_ne!(r.code, 0, "{store}: {}", r.stderr);
        assert!(
            !r.stderr.contains("s3cret") && r.stderr.contains("***"),
            "{store}: {}",
            r.stderr
        );
    }
}

#[test]
fn the_store_url_is_withheld_from_the_steps() {
    let mut sb = sandbox();
    sb.write(
        "env.yaml",
        "name: env\nstates:\n  initial: a\n  a: {type: step, command: 'env; echo end', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let db = TestDb::new();
    sb.set_env("AWF_STORE", &db.url);
    let r = sb.run(&["run", "env.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let id = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    let s = sb.run(&["status", &id, "-f", "json"]).unwrap();
    let v = s.json().unwrap();
    let out = v["states"]["a"]["output"].as_str().unwrap_or_default();
    assert!(out.contains("end"), "{v}");
    assert!(!out.contains("AWF_STORE"), "{out}");
}

/// A read-only role (SELECT on the awf_* tables) that runs a workflow is refused at once,
/// before any step runs: `SYSTEM.STORE.UNAVAILABLE` (exit 4) naming the privileges it lacks,
/// with the permission hint. Its writes used to be retried as if the server were away
/// (`…42501: permission denied for table awf_runs; retrying`), the run waiting 30 s for
/// each record, and nothing was recorded.
#[test]
fn a_read_only_user_that_runs_a_workflow_is_refused_at_once_with_the_permission_hint() {
    let sb = sandbox();
    let db = TestDb::new();
    // The schema exists (created by the owner); the role may only read it.
    let r = sb.run(&["--store", &db.url, "history"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let role = format!("{}_ro", db.name);
    let server = awf_tests::pg::server_url();
    psql(&server, &format!("CREATE ROLE {role} LOGIN"));
    psql(
        &db.url,
        &format!("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}"),
    );
    let ro = as_user(&db.url, &role);
    for args in [
        vec!["--store", &ro, "run", "greet.yaml"],
        vec!["--store", &ro, "run", "greet.yaml", "-f", "json"],
        vec!["--store", &ro, "run", "--submit", "greet.yaml"],
    ] {
        let t0 = std::time::Instant::now();
        let r = sb.run(&args).unwrap();
        let took = t0.elapsed();
        assert_eq!(r.code, 4, "{args:?}: {} {}", r.stdout, r.stderr);
        assert!(took < Duration::from_secs(10), "{args:?}: took {took:?}");
        let text = format!("{}{}", r.stdout, r.stderr);
        assert!(
            text.contains("SYSTEM.STORE.UNAVAILABLE")
                && text.contains("42501")
                && text.contains("INSERT on awf_runs")
                && text.contains("the user of the URL needs SELECT")
                && !text.contains("retrying")
                && !text.contains("is running"),
            "{args:?}: {text}"
        );
        assert!(!text.contains("Workflow started"), "{args:?}: {text}");
    }
    assert_eq!(psql(&db.url, "SELECT count(*) FROM awf_runs"), "0");
    // The same role still reads: history and status need SELECT only.
    let r = sb.run(&["--store", &ro, "history"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    drop(db);
    psql(&server, &format!("DROP ROLE {role}"));
}

/// A column of another type than this awf reads (a schema changed by hand) is a
/// `SYSTEM.STORE.UNAVAILABLE` error naming the column, not a panic of the store's runtime
/// (`Row::get` panicked: "thread 'awf-postgres' panicked … error retrieving column").
#[test]
fn a_column_of_an_unexpected_type_is_a_store_error_not_a_panic() {
    let sb = sandbox();
    let db = TestDb::new();
    let store = Store::Url(db.url.clone());
    let r = awf(&sb, &store, &["run", "greet.yaml", "-f", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    psql(
        &db.url,
        "ALTER TABLE awf_runs ALTER COLUMN exit_code TYPE bigint",
    );
    for args in [vec!["history", "-f", "json"], vec!["history"]] {
        let r = awf(&sb, &store, &args);
        assert_eq!(r.code, 4, "{args:?}: {} {}", r.stdout, r.stderr);
        let text = format!("{}{}", r.stdout, r.stderr);
        assert!(
            text.contains("SYSTEM.STORE.UNAVAILABLE")
                && text.contains("exit_code")
                && !text.contains("panicked"),
            "{args:?}: {text}"
        );
    }
}

/// A privilege revoked while a run goes on: the write the server refuses (42501) is not
/// retried as if the server were away (each step waited 30 s for its record, the end 30 s
/// more); the run goes on and ends with `SYSTEM.STORE.UNAVAILABLE` (exit 4) and the
/// permission hint, not "the PostgreSQL store stayed unreachable".
#[test]
fn a_privilege_revoked_mid_run_is_not_retried_and_the_run_ends_with_the_permission_hint() {
    let sb = Sandbox::new().unwrap();
    let db = TestDb::new();
    let r = sb.run(&["--store", &db.url, "history"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let role = format!("{}_rw", db.name);
    let server = awf_tests::pg::server_url();
    psql(&server, &format!("CREATE ROLE {role} LOGIN"));
    psql(
        &db.url,
        &format!(
            "GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA public TO {role}; \
             GRANT DELETE ON awf_run_holders TO {role}; \
             GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}"
        ),
    );
    // Step a revokes the role's writes (as the tables' owner); b's record is refused.
    sb.write(
        "revoke.yaml",
        &format!(
            "name: revoke\nstates:\n  initial: a\n  a:\n    type: step\n    command: \"psql -X -q '{}' -c 'REVOKE INSERT, UPDATE ON ALL TABLES IN SCHEMA public FROM {role}'\"\n    on_success: b\n  b: {{type: step, command: echo after, on_success: done}}\n  done: {{type: terminal}}\n",
            db.url
        ),
    )
    .unwrap();
    let t0 = std::time::Instant::now();
    let r = sb
        .run(&["--store", &as_user(&db.url, &role), "run", "revoke.yaml"])
        .unwrap();
    let took = t0.elapsed();
    assert_eq!(r.code, 4, "{} {}", r.stdout, r.stderr);
    assert!(
        took < Duration::from_secs(20),
        "took {took:?}: {}",
        r.stderr
    );
    assert!(
        r.stderr.contains("SYSTEM.STORE.UNAVAILABLE")
            && r.stderr.contains("42501")
            && hints(&r.stderr).contains("permission denied")
            && !r.stderr.contains("stayed unreachable")
            && !r.stderr.contains("retrying"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("✓ b"), "the run went on: {}", r.stderr);
    drop(db);
    psql(&server, &format!("DROP ROLE {role}"));
}
