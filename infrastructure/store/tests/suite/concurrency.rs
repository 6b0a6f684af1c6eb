//! Many writers on one data root: 20 threads with their own `Store`, and 20 processes.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use awf_domain::ports::store::HistoryFilter;
use awf_domain::ports::store::HistoryStore;
use awf_domain::ports::store::StateStore;
use awf_domain::ports::store::StoredStatus;
use pretty_assertions::assert_eq;
use serde_json::Value;

use super::common::open;
use super::common::run_workflow;

const WRITERS: usize = 20;
const STEPS: usize = 10;
const ROOT_VAR: &str = "AWF_STORE_TEST_WORKER_ROOT";
const ID_VAR: &str = "AWF_STORE_TEST_WORKER_ID";

/// Checks that every one of `ids` left one history row, one state file, two audit lines and a
/// complete transcript, and that nothing else is there.
fn verify(root: &Path, ids: &BTreeSet<String>) {
    let store = open(root, "checker");
    let rows = HistoryStore::list(&store, &HistoryFilter::default()).unwrap();
    assert_eq!(
        rows.iter().map(|r| r.id.clone()).collect::<BTreeSet<_>>(),
        *ids
    );
    assert_eq!(rows.len(), ids.len());
    assert!(
        rows.iter()
            .all(|r| r.status == StoredStatus::Success && r.exit_code == Some(0))
    );
    let stats = store.stats(&HistoryFilter::default()).unwrap();
    assert_eq!(
        (stats.total_executions, stats.success_count),
        (WRITERS as u64, WRITERS as u64)
    );

    let snaps = StateStore::list(&store).unwrap();
    assert_eq!(
        snaps
            .iter()
            .map(|s| s.run_id.clone())
            .collect::<BTreeSet<_>>(),
        *ids
    );
    for s in &snaps {
        assert_eq!(
            (s.status, s.states.len(), s.current_state.as_str()),
            (StoredStatus::Success, STEPS, "s9")
        );
        assert_eq!(s.states["s3"].output, format!("{} 3\n", s.run_id));
    }
    let leftovers: Vec<String> = std::fs::read_dir(root.join("states"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".json") && n != ".tmp")
        .collect();
    assert_eq!(leftovers, Vec::<String>::new());
    let temps = std::fs::read_dir(root.join("states").join(".tmp"))
        .unwrap()
        .count();
    assert_eq!(temps, 0, "temp files left behind");

    let audit = std::fs::read_to_string(root.join("audit.jsonl")).unwrap();
    let lines: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2 * WRITERS);
    let mut per_run: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for l in &lines {
        per_run
            .entry(l["execution_id"].as_str().unwrap().to_owned())
            .or_default()
            .push(l["event"].as_str().unwrap().to_owned());
    }
    assert_eq!(per_run.keys().cloned().collect::<BTreeSet<_>>(), *ids);
    assert!(
        per_run
            .values()
            .all(|v| v == &["workflow.started", "workflow.completed"])
    );

    for id in ids {
        let text =
            std::fs::read_to_string(root.join("transcripts").join(format!("{id}.jsonl"))).unwrap();
        let seqs: Vec<u64> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["seq"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(seqs, (1..=(2 + 3 * STEPS as u64)).collect::<Vec<_>>());
    }
}

#[test]
fn twenty_threads_with_their_own_store_on_one_root() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().to_path_buf();
    let handles: Vec<_> = (0..WRITERS)
        .map(|i| {
            let root = root.clone();
            std::thread::spawn(move || {
                let store = open(&root, "worker");
                let rec = store.recorder();
                run_workflow(&rec, &format!("thread-{i:02}"), i as u64 * 1000, STEPS);
                rec.flush();
                rec.take_errors()
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), Vec::<String>::new());
    }
    let ids = (0..WRITERS).map(|i| format!("thread-{i:02}")).collect();
    verify(&root, &ids);
}

/// Entry point of the worker processes spawned by `twenty_processes_on_one_root`; does
/// nothing when run as a normal test.
#[test]
fn worker_process_entry() {
    let (Ok(root), Ok(id)) = (std::env::var(ROOT_VAR), std::env::var(ID_VAR)) else {
        return;
    };
    let store = open(Path::new(&root), "worker");
    let rec = store.recorder();
    let n: u64 = id.parse().unwrap();
    run_workflow(&rec, &format!("proc-{n:02}"), n * 1000, STEPS);
    rec.flush();
    assert_eq!(rec.take_errors(), Vec::<String>::new());
}

#[test]
fn twenty_processes_on_one_root() {
    let d = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..WRITERS)
        .map(|i| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "suite::concurrency::worker_process_entry",
                    "--test-threads=1",
                    "--quiet",
                ])
                .env(ROOT_VAR, d.path())
                .env(ID_VAR, i.to_string())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let ids = (0..WRITERS).map(|i| format!("proc-{i:02}")).collect();
    verify(d.path(), &ids);
}
