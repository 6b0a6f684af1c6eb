//! `StateStore` and `HistoryStore` through `Store`.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

use awf_domain::ErrorCode;
use awf_domain::ports::store::HistoryFilter;
use awf_domain::ports::store::HistoryStats;
use awf_domain::ports::store::HistoryStore;
use awf_domain::ports::store::RunSnapshot;
use awf_domain::ports::store::StateStore;
use awf_domain::ports::store::StoredStatus;
use awf_store::AuditTarget;
use awf_store::Store;
use awf_store::StorePaths;
use pretty_assertions::assert_eq;
use serde_json::Map;

use super::common::at;
use super::common::open;
use super::common::run_workflow;

fn snapshot(id: &str, started_ms: u64) -> RunSnapshot {
    RunSnapshot {
        schema_version: 1,
        run_id: id.to_owned(),
        parent_run_id: None,
        workflow: "wf.yaml".into(),
        workflow_name: "wf".into(),
        workflow_path: None,
        status: StoredStatus::Failure,
        current_state: "b".into(),
        inputs: Map::new(),
        states: BTreeMap::new(),
        started_at: at(started_ms),
        updated_at: at(started_ms + 5),
        completed_at: Some(at(started_ms + 5)),
        exit_code: Some(3),
        terminal: None,
        error: None,
        outputs: BTreeMap::new(),
        owner_pid: None,
        loop_position: None,
        spend: None,
        waiting_until: None,
        child_runs: Default::default(),
        mocks: Default::default(),
        working_dir: None,
    }
}

#[test]
fn load_of_a_missing_run_is_a_user_error_with_a_hint() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), "u");
    let err = store.load("no-such-run").unwrap_err();
    assert_eq!(err.code(), ErrorCode::UserInputValidationFailed);
    assert_eq!(err.message(), "workflow execution not found: no-such-run");
    assert_eq!(err.hints(), ["awf resume --list"]);
    // Ids that cannot name a file are simply unknown.
    assert_eq!(
        store.load("../etc/passwd").unwrap_err().code(),
        ErrorCode::UserInputValidationFailed
    );
}

#[test]
fn load_of_a_corrupt_file_is_a_read_failure() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), "u");
    std::fs::write(d.path().join("states/bad.json"), "{not json").unwrap();
    assert_eq!(
        store.load("bad").unwrap_err().code(),
        ErrorCode::SystemIoReadFailed
    );
    // `list` skips it.
    assert_eq!(StateStore::list(&store).unwrap(), Vec::<RunSnapshot>::new());
}

#[test]
fn save_load_and_list_newest_first() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), "u");
    for (id, ms) in [("old", 0), ("newest", 2_000), ("middle", 1_000)] {
        store.save(&snapshot(id, ms)).unwrap();
    }
    let path = d.path().join("states/newest.json");
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(store.load("middle").unwrap(), snapshot("middle", 1_000));
    let ids: Vec<String> = StateStore::list(&store)
        .unwrap()
        .into_iter()
        .map(|s| s.run_id)
        .collect();
    assert_eq!(ids, ["newest", "middle", "old"]);
    // Overwrite in place.
    let mut s = snapshot("old", 0);
    s.status = StoredStatus::Success;
    store.save(&s).unwrap();
    assert_eq!(store.load("old").unwrap().status, StoredStatus::Success);
    // Pretty JSON with snake_case keys and RFC 3339 times.
    let text = std::fs::read_to_string(d.path().join("states/old.json")).unwrap();
    assert!(
        text.contains("\n  \"started_at\": \"2025-11-30T01:02:03.000Z\",\n"),
        "{text}"
    );
}

#[test]
fn history_through_the_store() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), "u");
    let rec = store.recorder();
    run_workflow(&rec, "r1", 0, 2);
    run_workflow(&rec, "r2", 1_000, 1);
    rec.flush();
    let rows = HistoryStore::list(
        &store,
        &HistoryFilter {
            workflow: Some("stress".into()),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        rows.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["r2", "r1"]
    );
    assert_eq!(
        store.stats(&HistoryFilter::default()).unwrap(),
        HistoryStats {
            total_executions: 2,
            success_count: 2,
            failed_count: 0,
            cancelled_count: 0,
            running_count: 0,
            waiting_count: 0,
            queued_count: 0,
            process_gone_count: 0,
            avg_duration_ms: Some(6), // mean of completed_at − started_at
        }
    );
    assert_eq!(
        store.get("r1").unwrap().map(|r| r.workflow_id),
        Some("stress.yaml".to_owned())
    );
}

#[test]
fn open_creates_the_layout() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("nested/awf");
    let store = Store::open(StorePaths {
        data_root: root.clone(),
        audit: AuditTarget::Path(d.path().join("logs/audit.jsonl")),
        user: Some("u".into()),
    })
    .unwrap();
    assert_eq!(
        std::fs::metadata(root.join("states"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
    assert!(root.join("transcripts").is_dir());
    // The history database waits for its first user (a run's recorder here).
    assert!(!root.join("history.db").exists());
    let rec = store.recorder();
    run_workflow(&rec, "r", 0, 1);
    rec.flush();
    assert!(root.join("history.db").is_file());
    assert_eq!(
        std::fs::read_to_string(d.path().join("logs/audit.jsonl"))
            .unwrap()
            .lines()
            .count(),
        2
    );
    assert_eq!(store.paths().data_root, root);
}

/// The pid of a process that has exited and been reaped (`true`).
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// The temp files killed writers left are removed before the history is first read (in the
/// states directory and its temp directory), and when a run's recorder starts (in the temp
/// directory only); the temp files of live writers and the rest stay.
#[test]
fn temp_files_left_by_killed_writers_only_are_removed() {
    let d = tempfile::tempdir().unwrap();
    drop(open(d.path(), "u"));
    let states = d.path().join("states");
    let dead = format!(".awf-{}-k1ll3d.tmp", dead_pid());
    let live = format!(".awf-{}-writing.tmp", std::process::id());
    for name in [
        dead.as_str(),
        live.as_str(),
        ".legacyold.tmp",
        ".legacynew.tmp",
        "run.json",
    ] {
        std::fs::write(states.join(name), "{").unwrap();
    }
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(states.join(".legacyold.tmp"))
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();
    let names = || {
        let mut left: Vec<String> = std::fs::read_dir(&states)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        left
    };
    let all = names();
    let store = open(d.path(), "u");
    assert_eq!(names(), all, "opening alone touches nothing");
    HistoryStore::list(&store, &HistoryFilter::default()).unwrap();
    let mut want = vec![live, ".legacynew.tmp".to_owned(), "run.json".to_owned()];
    want.sort();
    assert_eq!(names(), want);

    // A run's recorder removes those of the temp directory, where writers put them now,
    // and does not list the states directory (as many entries as runs ever recorded): one
    // left there by an older release waits for the next history read.
    let tmp = states.join(".tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::write(tmp.join(&dead), "{").unwrap();
    std::fs::write(tmp.join(&want[0]), "{").unwrap();
    std::fs::write(states.join(&dead), "{").unwrap();
    let store = open(d.path(), "u");
    let rec = store.recorder();
    rec.flush();
    let in_tmp: Vec<String> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        in_tmp,
        vec![want[0].clone()],
        "the live writer's temp file stays"
    );
    let mut with_legacy = want.clone();
    with_legacy.push(dead);
    with_legacy.push(".tmp".to_owned());
    with_legacy.sort();
    assert_eq!(names(), with_legacy);
    drop(rec);
    HistoryStore::list(&open(d.path(), "u"), &HistoryFilter::default()).unwrap();
    let mut after = want.clone();
    after.push(".tmp".to_owned());
    after.sort();
    assert_eq!(names(), after);
}

#[test]
fn state_temp_files_carry_the_writer_pid() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), "u");
    store.save(&snapshot("r1", 1_000)).unwrap();
    // The rename happened; no temp file is left, and the state reads back.
    assert_eq!(store.load("r1").unwrap().run_id, "r1");
    let names = |dir: &std::path::Path| {
        let mut n: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    };
    let states = d.path().join("states");
    assert_eq!(
        names(&states),
        vec![".tmp".to_owned(), "r1.json".to_owned()]
    );
    assert_eq!(names(&states.join(".tmp")), Vec::<String>::new());
}

/// A history.db that is a directory or not a database does not stop the store (the history
/// is an index: state files are still written, trial 22 issue 2); every history read gives
/// the error, without opening it, with a hint; a missing or empty one is fine.
#[test]
fn a_history_db_that_is_no_database_fails_history_reads_with_a_hint() {
    let paths = |d: &std::path::Path| StorePaths {
        data_root: d.to_path_buf(),
        audit: AuditTarget::Off,
        user: Some("u".into()),
    };
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("history.db")).unwrap();
    let store = Store::open(paths(d.path())).unwrap();
    let e = HistoryStore::list(&store, &HistoryFilter::default()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::SystemIoWriteFailed);
    assert!(
        e.message().contains("not a regular file"),
        "{}",
        e.message()
    );
    assert!(e.hints().iter().any(|h| h.contains("move")), "{e:?}");

    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("history.db"),
        "this is not a database, only text",
    )
    .unwrap();
    let store = Store::open(paths(d.path())).unwrap();
    let e = HistoryStore::list(&store, &HistoryFilter::default()).unwrap_err();
    assert!(e.message().contains("not a database"), "{}", e.message());
    assert!(e.hints().iter().any(|h| h.contains("move")), "{e:?}");
    // The state files are still readable and writable.
    assert_eq!(StateStore::list(&store).unwrap().len(), 0);

    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("history.db"), "").unwrap();
    let store = Store::open(paths(d.path())).unwrap();
    assert_eq!(
        HistoryStore::list(&store, &HistoryFilter::default())
            .unwrap()
            .len(),
        0
    );
}

/// A database SQLite cannot open (its header looks right) fails the first history read, and
/// every later read at once with the same error: the open is not retried per read.
#[test]
fn a_history_db_that_cannot_be_opened_is_tried_once() {
    let d = tempfile::tempdir().unwrap();
    let mut bytes = b"SQLite format 3\0".to_vec();
    bytes.extend(std::iter::repeat_n(0xA5u8, 200));
    std::fs::write(d.path().join("history.db"), &bytes).unwrap();
    let store = open(d.path(), "u");
    let first = HistoryStore::list(&store, &HistoryFilter::default()).unwrap_err();
    let t0 = std::time::Instant::now();
    let again = HistoryStore::list(&store, &HistoryFilter::default()).unwrap_err();
    assert_eq!(again.message(), first.message());
    // Retrying the open waits 1.5 s in all.
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(1),
        "{:?}",
        t0.elapsed()
    );
}

/// The database, its WAL and its shared-memory file are owner-only, also when they were
/// created with a wider mode (earlier releases chmod'ed only the database, after opening it).
#[test]
fn the_history_files_are_owner_only() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), "u");
    HistoryStore::list(&store, &HistoryFilter::default()).unwrap();
    let mode = |name: &str| {
        std::fs::metadata(d.path().join(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    for name in ["history.db", "history.db-wal", "history.db-shm"] {
        assert_eq!(mode(name), 0o600, "{name}");
    }
    drop(store);
    for name in ["history.db", "history.db-wal"] {
        std::fs::set_permissions(d.path().join(name), std::fs::Permissions::from_mode(0o644))
            .unwrap();
    }
    let store = open(d.path(), "u");
    HistoryStore::list(&store, &HistoryFilter::default()).unwrap();
    assert_eq!(mode("history.db"), 0o600);
    assert_eq!(mode("history.db-wal"), 0o600);
}

/// A `states/.tmp` that is not a directory of its own is never followed nor written
/// through: a symlink to another directory leaves that directory untouched (its stale-looking
/// files stay, no temp file lands there) and the state files are still written (beside their
/// target); so does a regular file or a dangling link there (a breaker saw every run fail
/// with exit 4, and a symlink lead the sweep to delete files outside the data root).
#[test]
fn a_temp_dir_that_is_not_a_directory_of_its_own_is_neither_followed_nor_fatal() {
    let d = tempfile::tempdir().unwrap();
    let outside = d.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let dead = format!(".awf-{}-k1ll3d.tmp", dead_pid());
    std::fs::write(outside.join(&dead), "keep").unwrap();
    let root = d.path().join("root");
    let store = open(&root, "u");
    let states = root.join("states");
    let tmp = states.join(".tmp");
    std::os::unix::fs::symlink(&outside, &tmp).unwrap();
    // A run's recorder starts (the sweep) and writes its state file.
    let rec = store.recorder();
    super::common::run_workflow(&rec, "r1", 1_000, 2);
    rec.flush();
    assert_eq!(rec.take_errors(), Vec::<String>::new());
    assert_eq!(store.load("r1").unwrap().run_id, "r1");
    drop(rec);
    let outside_names: Vec<String> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(outside_names, vec![dead], "the link was followed");
    // Neither a file nor a dangling link stops a save.
    for make in [
        |p: &std::path::Path| std::fs::write(p, "x").unwrap(),
        |p: &std::path::Path| std::os::unix::fs::symlink("/nonexistent/awf", p).unwrap(),
    ] {
        std::fs::remove_file(&tmp).unwrap();
        make(&tmp);
        store.save(&snapshot("r2", 2_000)).unwrap();
        assert_eq!(store.load("r2").unwrap().run_id, "r2");
    }
    // No temp file is left beside the state files.
    let left: Vec<String> = std::fs::read_dir(&states)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp") && n != ".tmp")
        .collect();
    assert_eq!(left, Vec::<String>::new());
}

/// A history database another connection has just created (its tables still in the
/// write-ahead log, its main file empty) is not filled again from the state files: a second
/// opener (the recorder's writer thread starting late, under load) added rows for snapshots
/// saved since, which no run recorded (CI: `history.get("saved-a")` was `Some`).
#[test]
fn a_database_another_connection_just_created_is_not_filled_again() {
    let d = tempfile::tempdir().unwrap();
    let first = open(d.path(), "u");
    assert_eq!(first.get("saved-a").unwrap(), None);
    first.save(&snapshot("saved-a", 1_000)).unwrap();
    // A second store on the same root opens the database for the first time.
    let second = open(d.path(), "u");
    assert_eq!(second.get("saved-a").unwrap(), None);
    assert_eq!(first.get("saved-a").unwrap(), None);
}
