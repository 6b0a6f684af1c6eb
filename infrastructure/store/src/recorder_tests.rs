use std::collections::BTreeMap;
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

use awf_domain::ErrorCode;
use awf_domain::error::ErrorBody;
use awf_domain::event::OutputStream;
use awf_domain::ports::store::HistoryRecord;
use awf_domain::ports::store::HistoryStore;
use awf_domain::ports::store::RunSnapshot;
use awf_domain::ports::store::StateStore;
use awf_domain::ports::store::StoredStatus;
use awf_domain::run::RunId;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use awf_domain::run::StepState;
use awf_domain::run::StepStatus;
use pretty_assertions::assert_eq;
use serde_json::Map;
use serde_json::Value;

use super::*;
use crate::Store;

fn t(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(1_764_464_523_000 + ms)
}

/// Builds envelopes with per-run seqs and a clock that advances 10 ms per event.
#[derive(Default)]
struct Script {
    seqs: HashMap<String, u64>,
    clock: u64,
}

impl Script {
    fn ev(
        &mut self,
        run: &str,
        parent: Option<&str>,
        path: &str,
        iteration: Option<usize>,
        event: RunEvent,
    ) -> EventEnvelope {
        let seq = self.seqs.entry(run.to_owned()).or_insert(0);
        *seq += 1;
        self.clock += 10;
        EventEnvelope {
            seq: *seq,
            run_id: RunId(run.to_owned()),
            parent_run_id: parent.map(|p| RunId(p.to_owned())),
            at: t(self.clock),
            path: path.to_owned(),
            iteration,
            event,
        }
    }

    fn restart(&mut self, run: &str) {
        self.seqs.remove(run);
    }
}

fn started(
    name: &str,
    ident: &str,
    inputs: Map<String, Value>,
    resumed_from: Option<&str>,
) -> RunEvent {
    RunEvent::RunStarted {
        workflow: name.to_owned(),
        identifier: ident.to_owned(),
        workflow_path: Some(format!("/wf/{ident}.yaml")),
        inputs,
        resumed_from: resumed_from.map(str::to_owned),
        pid: 1,
        mocks: Default::default(),
        working_dir: None,
    }
}

fn step_started(step: &str) -> RunEvent {
    RunEvent::StepStarted {
        step: step.to_owned(),
        kind: "command".to_owned(),
        command: None,
    }
}

fn done_state(step: &str, at: u64, ok: bool) -> StepState {
    let mut s = StepState::running(step, t(at));
    s.status = if ok {
        StepStatus::Completed
    } else {
        StepStatus::Failed
    };
    s.output = format!("{step} out\n").into();
    s.exit_code = Some(if ok { 0 } else { 2 });
    s.attempts = 1;
    s.error = (!ok).then(|| "exit status 2".to_owned());
    s.completed_at = Some(t(at + 5));
    s
}

/// `state` as the record keeps it: the `n`th state the run entered.
fn entered(mut state: StepState, n: u64) -> StepState {
    state.entered = Some(n);
    state
}

fn step_finished(step: &str, at: u64, ok: bool) -> RunEvent {
    RunEvent::StepFinished {
        step: step.to_owned(),
        kind: "command".to_owned(),
        state: Box::new(done_state(step, at, ok)),
    }
}

fn finished(
    run: &str,
    wf: &str,
    status: RunStatus,
    exit: u8,
    terminal: Option<&str>,
    error: Option<&str>,
) -> RunEvent {
    RunEvent::RunFinished {
        result: Box::new(RunResult {
            run_id: Some(RunId(run.to_owned())),
            workflow: wf.to_owned(),
            status,
            exit_code: exit,
            terminal: terminal.map(str::to_owned),
            duration_ms: 1234,
            states: BTreeMap::new(),
            outputs: BTreeMap::new(),
            error: error.map(|m| ErrorBody {
                code: ErrorCode::ExecutionCommandFailed,
                message: m.to_owned(),
                hints: vec![],
                details: BTreeMap::new(),
            }),
            message: None,
            spend: None,
        }),
    }
}

fn inputs(pairs: &[(&str, &str)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Value::from(*v)))
        .collect()
}

fn open(root: &Path, audit: bool) -> Store {
    let mut env = BTreeMap::from([("USER".to_owned(), "tester".to_owned())]);
    if !audit {
        env.insert("AWF_AUDIT_LOG".into(), "off".into());
    }
    Store::open(StorePaths::from_env(root, &env)).unwrap()
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn snapshot_follows_top_level_steps_loops_and_sub_runs() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), false);
    let rec = store.recorder();
    let mut s = Script::default();
    let p = "run-parent";
    let c = "run-child";
    rec.emit(s.ev(
        p,
        None,
        "",
        None,
        started(
            "deploy",
            "deploy-wf",
            inputs(&[("env", "prod"), ("API_TOKEN", "***")]),
            None,
        ),
    ));
    rec.emit(s.ev(p, None, "build", None, step_started("build")));
    rec.emit(s.ev(
        p,
        None,
        "build",
        None,
        RunEvent::OutputChunk {
            step: "build".into(),
            stream: OutputStream::Stdout,
            text: "hi\n".into(),
        },
    ));
    rec.emit(s.ev(p, None, "build", None, step_finished("build", 100, true)));
    rec.emit(s.ev(p, None, "each", None, step_started("each")));
    rec.emit(s.ev(p, None, "loop:0/body", Some(0), step_started("body")));
    rec.flush();
    let mid = store.load(p).unwrap();
    assert_eq!(mid.current_state, "each");
    assert_eq!(mid.states.keys().collect::<Vec<_>>(), ["build"]);
    assert_eq!(mid.status, StoredStatus::Running);

    rec.emit(s.ev(
        p,
        None,
        "loop:0/body",
        Some(0),
        step_finished("body", 200, true),
    ));
    rec.emit(s.ev(p, None, "each", None, step_finished("each", 300, true)));
    rec.emit(s.ev(p, None, "call", None, step_started("call")));
    rec.emit(s.ev(
        p,
        None,
        "call",
        None,
        RunEvent::ChildRunStarted {
            step: "call".into(),
            child_run_id: RunId(c.into()),
            workflow: "child-wf".into(),
        },
    ));
    rec.emit(s.ev(
        c,
        Some(p),
        "",
        None,
        started("child", "child-wf", Map::new(), None),
    ));
    rec.emit(s.ev(c, Some(p), "inner", None, step_started("inner")));
    rec.emit(s.ev(c, Some(p), "inner", None, step_finished("inner", 400, true)));
    rec.emit(s.ev(
        c,
        Some(p),
        "",
        None,
        finished(c, "child-wf", RunStatus::Success, 0, Some("end"), None),
    ));
    rec.emit(s.ev(p, None, "call", None, step_finished("call", 500, true)));
    let mut end = finished(p, "deploy-wf", RunStatus::Success, 0, Some("done"), None);
    if let RunEvent::RunFinished { result } = &mut end {
        result.outputs.insert("report".into(), Value::from("ok"));
    }
    rec.emit(s.ev(p, None, "", None, end));
    rec.flush();

    let parent = store.load(p).unwrap();
    assert_eq!(
        parent,
        RunSnapshot {
            schema_version: 1,
            run_id: p.into(),
            parent_run_id: None,
            workflow: "deploy-wf".into(),
            workflow_name: "deploy".into(),
            workflow_path: Some("/wf/deploy-wf.yaml".into()),
            status: StoredStatus::Success,
            current_state: "call".into(),
            inputs: inputs(&[("env", "prod"), ("API_TOKEN", "***")]),
            states: BTreeMap::from([
                ("body".to_owned(), entered(done_state("body", 200, true), 3)),
                (
                    "build".to_owned(),
                    entered(done_state("build", 100, true), 1)
                ),
                ("call".to_owned(), entered(done_state("call", 500, true), 4)),
                ("each".to_owned(), entered(done_state("each", 300, true), 2)),
            ]),
            started_at: t(10),
            updated_at: t(160),
            completed_at: Some(t(160)),
            exit_code: Some(0),
            terminal: Some("done".into()),
            error: None,
            outputs: BTreeMap::from([("report".to_owned(), Value::from("ok"))]),
            owner_pid: Some(1),
            loop_position: None,
            spend: None,
            waiting_until: None,
            child_runs: BTreeMap::from([("call".to_owned(), c.to_owned())]),
            mocks: Default::default(),
            working_dir: None,
        }
    );
    let child = store.load(c).unwrap();
    assert_eq!(
        child,
        RunSnapshot {
            schema_version: 1,
            run_id: c.into(),
            parent_run_id: Some(p.into()),
            workflow: "child-wf".into(),
            workflow_name: "child".into(),
            workflow_path: Some("/wf/child-wf.yaml".into()),
            status: StoredStatus::Success,
            current_state: "inner".into(),
            inputs: Map::new(),
            states: BTreeMap::from([(
                "inner".to_owned(),
                entered(done_state("inner", 400, true), 1)
            )]),
            started_at: t(110),
            updated_at: t(140),
            completed_at: Some(t(140)),
            exit_code: Some(0),
            terminal: Some("end".into()),
            error: None,
            outputs: BTreeMap::new(),
            owner_pid: Some(1),
            loop_position: None,
            spend: None,
            waiting_until: None,
            child_runs: Default::default(),
            mocks: Default::default(),
            working_dir: None,
        }
    );
    let child_row = HistoryStore::get(&store, c).unwrap().unwrap();
    assert_eq!(
        child_row,
        HistoryRecord {
            id: c.into(),
            workflow_id: "child-wf".into(),
            workflow_name: "child".into(),
            status: StoredStatus::Success,
            exit_code: Some(0),
            started_at_ms: millis(t(110)),
            completed_at_ms: Some(millis(t(140))),
            duration_ms: Some(30), // completed_at − started_at
            error_message: None,
            parent_run_id: Some(p.into()),
            spend: None,
        }
    );
    assert_eq!(rec.take_errors(), Vec::<String>::new());
}

#[test]
fn state_file_is_0600_and_valid_after_every_step() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), false);
    let rec = store.recorder();
    let mut s = Script::default();
    let states_dir = d.path().join("states");
    assert_eq!(
        std::fs::metadata(&states_dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    rec.emit(s.ev("r", None, "", None, started("wf", "wf", Map::new(), None)));
    rec.flush();
    let file = states_dir.join("r.json");
    let journal = states_dir.join("r.journal");
    assert_eq!(store.load("r").unwrap().states.len(), 0);
    let names = || {
        let mut v: Vec<String> = std::fs::read_dir(&states_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    for i in 0..5 {
        let name = format!("s{i}");
        rec.emit(s.ev("r", None, &name, None, step_started(&name)));
        rec.emit(s.ev("r", None, &name, None, step_finished(&name, i * 10, true)));
        rec.flush();
        // The state file, with its journal replayed, is the run so far.
        let snap = store.load("r").unwrap();
        assert_eq!(snap.states.len() as u64, i + 1);
        assert_eq!(snap.current_state, name);
        for f in [&file, &journal] {
            assert_eq!(
                std::fs::metadata(f).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
        assert_eq!(names(), [".tmp", "r.journal", "r.json"]);
    }
    // At the end the state file is written whole and the journal removed.
    rec.emit(s.ev(
        "r",
        None,
        "",
        None,
        finished("r", "wf", RunStatus::Success, 0, Some("done"), None),
    ));
    rec.flush();
    assert_eq!(names(), [".tmp", "r.json"]);
    // The temp files were written apart, in a directory only the owner can read, and none
    // is left.
    let tmp = states_dir.join(".tmp");
    assert_eq!(
        std::fs::metadata(&tmp).unwrap().permissions().mode() & 0o777,
        0o700
    );
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
    let snap: RunSnapshot = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(snap.states.len(), 5);
    assert_eq!(snap.status, StoredStatus::Success);
}

/// Issue 9: recording a step costs the same whatever number of steps came before it: the
/// state file is not rewritten while the run goes on, and each step adds one journal line of
/// the size of that step.
#[test]
fn recording_a_step_does_not_grow_with_the_steps_before_it() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), false);
    let rec = store.recorder();
    let mut s = Script::default();
    rec.emit(s.ev("r", None, "", None, started("wf", "wf", Map::new(), None)));
    rec.flush();
    let file = d.path().join("states/r.json");
    let journal = d.path().join("states/r.journal");
    let base = std::fs::read(&file).unwrap();
    for i in 0..300u64 {
        let name = format!("s{i:03}");
        rec.emit(s.ev("r", None, &name, None, step_started(&name)));
        rec.emit(s.ev("r", None, &name, None, step_finished(&name, i, true)));
        rec.flush();
    }
    assert_eq!(std::fs::read(&file).unwrap(), base, "state file rewritten");
    // One line per batch; the longest line of the last 50 steps is no longer than the
    // longest of the first 50 (the names are the same length): nothing accumulates.
    let text = std::fs::read_to_string(&journal).unwrap();
    let lines: Vec<usize> = text.lines().map(str::len).collect();
    assert!(lines.len() >= 300, "{} lines", lines.len());
    let first = lines[..50].iter().max().unwrap();
    let last = lines[lines.len() - 50..].iter().max().unwrap();
    assert!(
        last <= &(first + 8),
        "last lines {last} bytes, first {first}"
    );
    assert_eq!(store.load("r").unwrap().states.len(), 300);
}

/// A kill in the middle of a journal append leaves a torn last line: the run reads as it was
/// after the last complete batch, which is what `awf resume` continues from.
#[test]
fn a_torn_journal_line_is_ignored() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), false);
    let rec = store.recorder();
    let mut s = Script::default();
    rec.emit(s.ev("r", None, "", None, started("wf", "wf", Map::new(), None)));
    for name in ["a", "b"] {
        rec.emit(s.ev("r", None, name, None, step_started(name)));
        rec.emit(s.ev("r", None, name, None, step_finished(name, 5, true)));
        rec.flush();
    }
    let journal = d.path().join("states/r.journal");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&journal)
        .unwrap();
    std::io::Write::write_all(
        &mut f,
        b"{\"status\":\"running\",\"current_state\":\"c\",\"upd",
    )
    .unwrap();
    drop(f);
    let snap = store.load("r").unwrap();
    assert_eq!(snap.states.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(snap.current_state, "b");
    assert_eq!(StateStore::list(&store).unwrap()[0].states.len(), 2);
}

#[test]
fn queued_updates_of_one_run_are_written_once() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), false);
    let rec = store.recorder();
    let mut s = Script::default();
    // The writer waits until `release` is dropped, so everything below queues up.
    let release = rec.hold();
    rec.emit(s.ev("r", None, "", None, started("wf", "wf", Map::new(), None)));
    for i in 0..200 {
        let name = format!("s{i:03}");
        rec.emit(s.ev("r", None, &name, None, step_started(&name)));
        rec.emit(s.ev("r", None, &name, None, step_finished(&name, i, true)));
    }
    assert_eq!(rec.state_writes(), 0);
    drop(release);
    rec.flush();
    assert_eq!(rec.state_writes(), 1);
    let snap = store.load("r").unwrap();
    assert_eq!(
        (snap.states.len(), snap.current_state.as_str()),
        (200, "s199")
    );
}

#[test]
fn history_row_is_upserted_and_resume_updates_it_in_place() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), true);
    let rec = store.recorder();
    let mut s = Script::default();
    rec.emit(s.ev(
        "r",
        None,
        "",
        None,
        started("deploy", "deploy-wf", Map::new(), None),
    ));
    rec.flush();
    let row = HistoryStore::get(&store, "r").unwrap().unwrap();
    assert_eq!(
        row,
        HistoryRecord {
            id: "r".into(),
            workflow_id: "deploy-wf".into(),
            workflow_name: "deploy".into(),
            status: StoredStatus::Running,
            exit_code: None,
            started_at_ms: millis(t(10)),
            completed_at_ms: None,
            duration_ms: None,
            error_message: None,
            parent_run_id: None,
            spend: None,
        }
    );
    rec.emit(s.ev("r", None, "a", None, step_started("a")));
    rec.emit(s.ev("r", None, "a", None, step_finished("a", 20, true)));
    rec.emit(s.ev("r", None, "b", None, step_started("b")));
    rec.emit(s.ev("r", None, "b", None, step_finished("b", 40, false)));
    rec.emit(s.ev(
        "r",
        None,
        "",
        None,
        finished(
            "r",
            "deploy-wf",
            RunStatus::Failure,
            3,
            None,
            Some("step b failed"),
        ),
    ));
    rec.flush();
    let row = HistoryStore::get(&store, "r").unwrap().unwrap();
    assert_eq!(
        (
            row.status,
            row.exit_code,
            row.error_message.as_deref(),
            row.completed_at_ms
        ),
        (
            StoredStatus::Failure,
            Some(3),
            Some("step b failed"),
            Some(millis(t(60)))
        )
    );
    let failed = store.load("r").unwrap();
    assert_eq!(
        (
            failed.status,
            failed.current_state.as_str(),
            failed.exit_code
        ),
        (StoredStatus::Failure, "b", Some(3))
    );

    // `awf resume r`: same id, the engine restarts its seqs and reruns from `b`.
    s.restart("r");
    rec.emit(s.ev(
        "r",
        None,
        "",
        None,
        started("deploy", "deploy-wf", Map::new(), Some("b")),
    ));
    rec.flush();
    let resumed = store.load("r").unwrap();
    assert_eq!(
        (
            resumed.status,
            resumed.current_state.as_str(),
            resumed.started_at,
            resumed.states.len(),
            resumed.completed_at
        ),
        (StoredStatus::Running, "b", t(10), 2, None)
    );
    assert_eq!(
        HistoryStore::get(&store, "r").unwrap().unwrap().status,
        StoredStatus::Running
    );
    rec.emit(s.ev("r", None, "b", None, step_started("b")));
    rec.emit(s.ev("r", None, "b", None, step_finished("b", 80, true)));
    rec.emit(s.ev(
        "r",
        None,
        "",
        None,
        finished("r", "deploy-wf", RunStatus::Success, 0, Some("done"), None),
    ));
    rec.flush();
    let rows = HistoryStore::list(&store, &Default::default()).unwrap();
    assert_eq!(
        rows,
        [HistoryRecord {
            id: "r".into(),
            workflow_id: "deploy-wf".into(),
            workflow_name: "deploy".into(),
            status: StoredStatus::Success,
            exit_code: Some(0),
            started_at_ms: millis(t(10)),
            completed_at_ms: Some(millis(t(100))),
            duration_ms: Some(90), // completed_at − started_at
            error_message: None,
            parent_run_id: None,
            spend: None,
        }]
    );
    let snap = store.load("r").unwrap();
    assert_eq!(snap.states["a"], entered(done_state("a", 20, true), 1));
    // `b` entered again by the resume: after the first attempt's `a` and `b`.
    assert_eq!(snap.states["b"], entered(done_state("b", 80, true), 3));
    assert_eq!(
        (snap.status, snap.terminal.as_deref(), snap.error),
        (StoredStatus::Success, Some("done"), None)
    );

    // Transcript: seqs continue after the first attempt's last line.
    let seqs: Vec<u64> = lines(&d.path().join("transcripts/r.jsonl"))
        .iter()
        .map(|l| l["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=10).collect::<Vec<_>>());
    // Audit: a started/completed pair per attempt.
    let events: Vec<(String, Option<String>)> = lines(&d.path().join("audit.jsonl"))
        .iter()
        .map(|l| {
            (
                l["event"].as_str().unwrap().to_owned(),
                l.get("status").and_then(Value::as_str).map(str::to_owned),
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            ("workflow.started".to_owned(), None),
            ("workflow.completed".to_owned(), Some("failure".to_owned())),
            ("workflow.started".to_owned(), None),
            ("workflow.completed".to_owned(), Some("success".to_owned())),
        ]
    );
}

#[test]
fn audit_lines_per_run_including_sub_runs() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), true);
    let rec = store.recorder();
    let mut s = Script::default();
    rec.emit(s.ev(
        "p",
        None,
        "",
        None,
        started("deploy", "deploy-wf", inputs(&[("env", "prod")]), None),
    ));
    rec.emit(s.ev(
        "p",
        None,
        "call",
        None,
        RunEvent::ChildRunStarted {
            step: "call".into(),
            child_run_id: RunId("c".into()),
            workflow: "child-wf".into(),
        },
    ));
    rec.emit(s.ev(
        "c",
        Some("p"),
        "",
        None,
        started("child", "child-wf", Map::new(), None),
    ));
    rec.emit(s.ev(
        "c",
        Some("p"),
        "",
        None,
        finished("c", "child-wf", RunStatus::Cancelled, 130, None, None),
    ));
    rec.emit(s.ev(
        "p",
        None,
        "",
        None,
        finished(
            "p",
            "deploy-wf",
            RunStatus::Failure,
            7,
            Some("bad"),
            Some("step call failed"),
        ),
    ));
    rec.flush();
    let path = d.path().join("audit.jsonl");
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let expected = [
        r#"{"event":"workflow.started","execution_id":"p","timestamp":"2025-11-30T01:02:03.010Z","user":"tester","workflow_name":"deploy","inputs":{"env":"prod"},"schema_version":1}"#,
        r#"{"event":"workflow.started","execution_id":"c","timestamp":"2025-11-30T01:02:03.030Z","user":"tester","workflow_name":"child","schema_version":1}"#,
        r#"{"event":"workflow.completed","execution_id":"c","timestamp":"2025-11-30T01:02:03.040Z","user":"tester","workflow_name":"child","status":"cancelled","exit_code":130,"duration_ms":1234,"error":"workflow cancelled","schema_version":1}"#,
        r#"{"event":"workflow.completed","execution_id":"p","timestamp":"2025-11-30T01:02:03.050Z","user":"tester","workflow_name":"deploy","status":"failure","exit_code":7,"duration_ms":1234,"error":"step call failed","schema_version":1}"#,
    ];
    assert_eq!(text.lines().collect::<Vec<_>>(), expected);
}

#[test]
fn audit_off_writes_no_file() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), false);
    let rec = store.recorder();
    let mut s = Script::default();
    rec.emit(s.ev("r", None, "", None, started("wf", "wf", Map::new(), None)));
    rec.emit(s.ev(
        "r",
        None,
        "",
        None,
        finished("r", "wf", RunStatus::Success, 0, None, None),
    ));
    rec.flush();
    assert!(!d.path().join("audit.jsonl").exists());
    assert!(d.path().join("states/r.json").exists());
}

#[test]
fn transcript_lines_and_seqs() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), false);
    let rec = store.recorder();
    let mut s = Script::default();
    rec.emit(s.ev(
        "p",
        None,
        "",
        None,
        started("deploy", "deploy-wf", inputs(&[("env", "prod")]), None),
    ));
    rec.emit(s.ev("p", None, "ask", None, step_started("ask")));
    rec.emit(s.ev(
        "p",
        None,
        "ask",
        None,
        RunEvent::AgentThoughtChunk {
            step: "ask".into(),
            text: "hmm".into(),
        },
    ));
    rec.emit(s.ev(
        "p",
        None,
        "ask",
        None,
        RunEvent::AgentMessageChunk {
            step: "ask".into(),
            text: "hello".into(),
        },
    ));
    rec.emit(s.ev(
        "p",
        None,
        "ask",
        None,
        RunEvent::ToolCall {
            step: "ask".into(),
            id: "t1".into(),
            name: "Read".into(),
            input: serde_json::json!({"path": "a"}),
            fidelity: awf_domain::event::ToolFidelity::Agent,
        },
    ));
    rec.emit(s.ev(
        "p",
        None,
        "ask",
        None,
        RunEvent::ToolCallResult {
            step: "ask".into(),
            id: "t1".into(),
            output: "nope".into(),
            is_error: true,
            fidelity: awf_domain::event::ToolFidelity::Agent,
        },
    ));
    rec.emit(s.ev(
        "p",
        None,
        "ask",
        None,
        RunEvent::InteractionRequired {
            request: Box::new(awf_domain::interaction::InteractionRequest {
                request_id: "q1".into(),
                step: Some("ask".into()),
                kind: awf_domain::interaction::RequestKind::ConversationTurn {
                    prompt: "> ".into(),
                },
                timeout_ms: None,
            }),
        },
    ));
    rec.emit(s.ev("p", None, "ask", None, step_finished("ask", 0, true)));
    rec.emit(s.ev(
        "p",
        None,
        "loop:1/body",
        Some(1),
        RunEvent::StepRetrying {
            step: "body".into(),
            attempt: 2,
            delay_ms: 50,
            reason: None,
        },
    ));
    rec.emit(s.ev(
        "p",
        None,
        "loop:1/body",
        Some(1),
        RunEvent::OutputChunk {
            step: "body".into(),
            stream: OutputStream::Stderr,
            text: "warn\n".into(),
        },
    ));
    rec.emit(s.ev(
        "p",
        None,
        "",
        None,
        RunEvent::Log {
            step: None,
            level: awf_domain::event::LogLevel::Warn,
            message: "note".into(),
        },
    ));
    rec.emit(s.ev(
        "p",
        None,
        "call",
        None,
        RunEvent::ChildRunStarted {
            step: "call".into(),
            child_run_id: RunId("c".into()),
            workflow: "child-wf".into(),
        },
    ));
    rec.emit(s.ev(
        "c",
        Some("p"),
        "",
        None,
        started("child", "child-wf", Map::new(), None),
    ));
    rec.emit(s.ev("c", Some("p"), "x", None, step_finished("x", 0, false)));
    rec.emit(s.ev(
        "c",
        Some("p"),
        "",
        None,
        finished(
            "c",
            "child-wf",
            RunStatus::Failure,
            3,
            None,
            Some("x failed"),
        ),
    ));
    rec.emit(s.ev("p", None, "call", None, step_finished("call", 0, false)));
    rec.emit(s.ev(
        "p",
        None,
        "",
        None,
        finished(
            "p",
            "deploy-wf",
            RunStatus::Failure,
            3,
            None,
            Some("call failed"),
        ),
    ));
    rec.flush();
    let ts = |ms: u64| awf_domain::timefmt::format_rfc3339(t(ms));
    let err = |m: &str| serde_json::json!({"code": "EXECUTION.COMMAND.FAILED", "message": m, "hints": []});
    let parent = lines(&d.path().join("transcripts/p.jsonl"));
    let expected = serde_json::json!([
        {"seq": 1, "run_id": "p", "type": "run.started", "path": "", "timestamp": ts(10),
         "payload": {"workflow": "deploy-wf", "workflow_name": "deploy", "pid": 1, "workflow_path": "/wf/deploy-wf.yaml", "inputs": {"env": "prod"}}},
        {"seq": 2, "run_id": "p", "type": "step.started", "path": "ask", "timestamp": ts(20), "payload": {"name": "ask", "kind": "command"}},
        {"seq": 3, "run_id": "p", "type": "message.assistant", "path": "ask", "timestamp": ts(30),
         "payload": {"role": "assistant", "blocks": [{"type": "thinking", "text": "hmm"}]}},
        {"seq": 4, "run_id": "p", "type": "message.assistant", "path": "ask", "timestamp": ts(40),
         "payload": {"role": "assistant", "blocks": [{"type": "text", "text": "hello"}]}},
        {"seq": 5, "run_id": "p", "type": "tool.call", "path": "ask", "timestamp": ts(50),
         "payload": {"name": "Read", "call_id": "t1", "input": {"path": "a"}, "fidelity": "agent_emitted"}},
        {"seq": 6, "run_id": "p", "type": "tool.result", "path": "ask", "timestamp": ts(60),
         "payload": {"call_id": "t1", "output": "nope", "error": true, "fidelity": "agent_emitted"}},
        {"seq": 7, "run_id": "p", "type": "input.required", "path": "ask", "timestamp": ts(70),
         "payload": {"name": "ask", "request_id": "q1", "prompt": "> "}},
        {"seq": 8, "run_id": "p", "type": "step.completed", "path": "ask", "timestamp": ts(80),
         "payload": {"name": "ask", "kind": "command", "status": "completed", "exit_code": 0,
                     "started_at": ts(0), "completed_at": ts(5), "output": "ask out\n"}},
        {"seq": 9, "run_id": "p", "type": "step.retrying", "path": "loop:1/body", "iteration": 1, "timestamp": ts(90),
         "payload": {"name": "body", "attempt": 2, "delay_ms": 50}},
        {"seq": 10, "run_id": "p", "type": "step.output", "path": "loop:1/body", "iteration": 1, "timestamp": ts(100),
         "payload": {"name": "body", "stream": "stderr", "text": "warn\n"}},
        {"seq": 11, "run_id": "p", "type": "log", "path": "", "timestamp": ts(110), "payload": {"level": "warn", "message": "note"}},
        {"seq": 12, "run_id": "p", "child_run_id": "c", "type": "step.call_workflow.started", "path": "call", "timestamp": ts(120),
         "payload": {"name": "call", "workflow": "child-wf"}},
        {"seq": 13, "run_id": "p", "child_run_id": "c", "type": "step.call_workflow.completed", "path": "call", "timestamp": ts(150),
         "payload": {"name": "call", "workflow": "child-wf", "status": "failure", "exit_code": 3}},
        {"seq": 14, "run_id": "p", "type": "step.completed", "path": "call", "timestamp": ts(160),
         "payload": {"name": "call", "kind": "command", "status": "failed", "error": "exit status 2", "exit_code": 2,
                     "started_at": ts(0), "completed_at": ts(5), "output": "call out\n"}},
        {"seq": 15, "run_id": "p", "type": "run.completed", "path": "", "timestamp": ts(170),
         "payload": {"status": "failure", "exit_code": 3, "terminal": null, "duration_ms": 1234, "error": err("call failed")}},
    ]);
    assert_eq!(Value::Array(parent), expected);
    let child = lines(&d.path().join("transcripts/c.jsonl"));
    let expected = serde_json::json!([
        {"seq": 1, "run_id": "c", "parent_run_id": "p", "type": "run.started", "path": "", "timestamp": ts(130),
         "payload": {"workflow": "child-wf", "workflow_name": "child", "pid": 1, "workflow_path": "/wf/child-wf.yaml", "inputs": {}}},
        {"seq": 2, "run_id": "c", "parent_run_id": "p", "type": "step.completed", "path": "x", "timestamp": ts(140),
         "payload": {"name": "x", "kind": "command", "status": "failed", "error": "exit status 2", "exit_code": 2,
                     "started_at": ts(0), "completed_at": ts(5), "output": "x out\n"}},
        {"seq": 3, "run_id": "c", "parent_run_id": "p", "type": "run.completed", "path": "", "timestamp": ts(150),
         "payload": {"status": "failure", "exit_code": 3, "terminal": null, "duration_ms": 1234, "error": err("x failed")}},
    ]);
    assert_eq!(Value::Array(child), expected);
    // Key order of the envelope.
    let first = std::fs::read_to_string(d.path().join("transcripts/c.jsonl")).unwrap();
    assert!(first.starts_with(r#"{"seq":1,"run_id":"c","parent_run_id":"p","type":"run.started","path":"","timestamp":""#), "{first}");
    let mode = std::fs::metadata(d.path().join("transcripts/p.jsonl"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn write_failures_are_reported_once_per_target_and_the_stream_goes_on() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), false);
    // Make state writes impossible: replace the states directory by a file.
    std::fs::remove_dir(d.path().join("states")).unwrap();
    std::fs::write(d.path().join("states"), "not a dir").unwrap();
    let rec = store.recorder();
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = Arc::clone(&seen);
    rec.on_error(Arc::new(move |m| sink.lock().unwrap().push(m)));
    let mut s = Script::default();
    rec.emit(s.ev("r", None, "", None, started("wf", "wf", Map::new(), None)));
    rec.flush();
    // Both events in one batch: one more (coalesced) state write fails.
    let release = rec.hold();
    rec.emit(s.ev("r", None, "a", None, step_finished("a", 0, true)));
    rec.emit(s.ev(
        "r",
        None,
        "",
        None,
        finished("r", "wf", RunStatus::Success, 0, None, None),
    ));
    drop(release);
    rec.flush();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0].starts_with("cannot write the state file "),
        "{}",
        seen[0]
    );
    let errors = rec.take_errors();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!(rec.take_errors(), Vec::<String>::new());
    assert!(rec.run_record_failed());
    // Other projections still work; the history says what the state files do (no end).
    assert_eq!(lines(&d.path().join("transcripts/r.jsonl")).len(), 3);
    assert_eq!(
        HistoryStore::get(&store, "r").unwrap().unwrap().status,
        StoredStatus::Running
    );
}

#[test]
fn flush_waits_for_queued_events_and_dropping_drains_the_queue() {
    let d = tempfile::tempdir().unwrap();
    let mut s = Script::default();
    {
        let store = open(d.path(), true);
        let rec = store.recorder();
        let again = store.recorder();
        rec.emit(s.ev("a", None, "", None, started("wf", "wf", Map::new(), None)));
        again.emit(s.ev(
            "a",
            None,
            "",
            None,
            finished("a", "wf", RunStatus::Success, 0, None, None),
        ));
        again.flush();
        assert_eq!(store.load("a").unwrap().status, StoredStatus::Success);
        assert_eq!(rec.state_writes(), again.state_writes());
        // Queued but not flushed: dropping the store and every handle still writes it.
        rec.emit(s.ev("b", None, "", None, started("wf", "wf", Map::new(), None)));
        drop(again);
        drop(rec);
    }
    let store = open(d.path(), true);
    assert_eq!(store.load("b").unwrap().status, StoredStatus::Running);
    assert_eq!(lines(&d.path().join("audit.jsonl")).len(), 3);
    // A flush with nothing queued returns.
    store.recorder().flush();
}

#[test]
fn branches_of_a_top_level_parallel_block_do_not_become_current() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), false);
    let rec = store.recorder();
    let mut s = Script::default();
    let par = |step: &str| RunEvent::StepStarted {
        step: step.into(),
        kind: "parallel".into(),
        command: None,
    };
    rec.emit(s.ev("r", None, "", None, started("wf", "wf", Map::new(), None)));
    rec.emit(s.ev("r", None, "fan", None, par("fan")));
    rec.emit(s.ev("r", None, "left", None, step_started("left")));
    rec.emit(s.ev("r", None, "right", None, step_started("right")));
    rec.emit(s.ev("r", None, "left", None, step_finished("left", 0, true)));
    rec.flush();
    assert_eq!(store.load("r").unwrap().current_state, "fan");
    rec.emit(s.ev("r", None, "right", None, step_finished("right", 0, true)));
    rec.emit(s.ev("r", None, "fan", None, step_finished("fan", 0, true)));
    rec.emit(s.ev("r", None, "after", None, step_started("after")));
    rec.flush();
    let snap = store.load("r").unwrap();
    assert_eq!(snap.current_state, "after");
    assert_eq!(
        snap.states.keys().collect::<Vec<_>>(),
        ["fan", "left", "right"]
    );
}

#[test]
fn questions_asked_before_a_run_starts_are_written_with_it_or_not_at_all() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), false);
    let rec = store.recorder();
    let mut s = Script::default();
    let ask = |id: &str| RunEvent::InteractionRequired {
        request: Box::new(awf_domain::interaction::InteractionRequest {
            request_id: id.into(),
            step: None,
            kind: awf_domain::interaction::RequestKind::ConversationTurn {
                prompt: "> ".into(),
            },
            timeout_ms: None,
        }),
    };
    let resolved = |id: &str| RunEvent::InteractionResolved {
        request_id: id.into(),
        resolution: awf_domain::interaction::Resolution::Answered(
            awf_domain::interaction::Answer::EndOfInput,
        ),
    };
    // A run that asked and never started: nothing on disk.
    rec.emit(s.ev("gone", None, "", None, ask("gone:1")));
    rec.emit(s.ev("gone", None, "", None, resolved("gone:1")));
    // A run that asked, then started: the questions first, seqs in order.
    rec.emit(s.ev("p", None, "", None, ask("p:1")));
    rec.emit(s.ev("p", None, "", None, resolved("p:1")));
    rec.emit(s.ev("p", None, "", None, started("w", "w", inputs(&[]), None)));
    rec.flush();
    assert!(!d.path().join("transcripts/gone.jsonl").exists());
    let got: Vec<(String, u64)> = lines(&d.path().join("transcripts/p.jsonl"))
        .iter()
        .map(|l| {
            (
                l["type"].as_str().unwrap().to_owned(),
                l["seq"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("input.required".to_owned(), 1),
            ("interaction.resolved".to_owned(), 2),
            ("run.started".to_owned(), 3)
        ]
    );
}

/// A recorded state whose text is `out` (stdout) and `err` (stderr).
fn state_with(step: &str, at: u64, out: &str, err: &str) -> RunEvent {
    let mut st = done_state(step, at, true);
    st.output = out.into();
    st.stderr = err.into();
    RunEvent::StepFinished {
        step: step.to_owned(),
        kind: "command".to_owned(),
        state: Box::new(st),
    }
}

/// Every file under `dir`, with its size.
fn files_under(dir: &Path) -> Vec<(std::path::PathBuf, u64)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let m = e.metadata().unwrap();
        if m.is_dir() {
            out.extend(files_under(&e.path()));
        } else {
            out.push((e.path(), m.len()));
        }
    }
    out
}

/// Issue 9: a long output is stored once, in its own file, which the journal, the state
/// file and the transcript name; reading the run gives the same text back.
#[test]
fn a_long_output_is_stored_once_in_its_own_file() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), false);
    let rec = store.recorder();
    let mut s = Script::default();
    // 300 KiB of stdout with multi-byte characters, 100 KiB of stderr, and a short step.
    let big: String = "héllo wörld €\n".repeat(300 * 1024 / 18);
    let err = "e".repeat(100 * 1024);
    rec.emit(s.ev("r", None, "", None, started("wf", "wf", Map::new(), None)));
    rec.flush();
    rec.emit(s.ev("r", None, "a", None, step_started("a")));
    for piece in big.as_bytes().chunks(64 * 1024) {
        rec.emit(s.ev(
            "r",
            None,
            "a",
            None,
            RunEvent::OutputChunk {
                step: "a".into(),
                stream: OutputStream::Stdout,
                text: piece.to_vec().into(),
            },
        ));
    }
    rec.emit(s.ev("r", None, "a", None, state_with("a", 1, &big, &err)));
    rec.emit(s.ev("r", None, "b", None, step_started("b")));
    rec.emit(s.ev("r", None, "b", None, step_finished("b", 2, true)));
    rec.flush();
    // Mid-run: the journal names the files and holds neither text.
    let journal = std::fs::read_to_string(d.path().join("states/r.journal")).unwrap();
    assert!(journal.len() < 4096, "journal is {} bytes", journal.len());
    assert!(journal.contains("\"output_files\""), "{journal}");
    let snap = store.load("r").unwrap();
    assert_eq!(snap.states["a"].output, big);
    assert_eq!(snap.states["a"].stderr, err);
    assert_eq!(snap.states["b"].output, "b out\n");
    // The list does not read the files.
    assert_eq!(StateStore::list(&store).unwrap()[0].states["a"].output, "");

    rec.emit(s.ev(
        "r",
        None,
        "",
        None,
        finished("r", "wf", RunStatus::Success, 0, Some("done"), None),
    ));
    rec.flush();
    let state_text = std::fs::read_to_string(d.path().join("states/r.json")).unwrap();
    assert!(
        state_text.len() < 8192,
        "state file is {} bytes",
        state_text.len()
    );
    let outputs = files_under(&d.path().join("outputs/r"));
    assert_eq!(outputs.len(), 2, "{outputs:?}");
    let mut sizes: Vec<u64> = outputs.iter().map(|(_, n)| *n).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, [err.len() as u64, big.len() as u64]);
    for (p, _) in &outputs {
        let mode = std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", p.display());
    }
    assert_eq!(store.load("r").unwrap().states["a"].output, big);
    // Transcript: the first 64 KiB inline, then sizes only; step.completed names the files.
    let tr = lines(&d.path().join("transcripts/r.jsonl"));
    let chunks: Vec<&Value> = tr.iter().filter(|l| l["type"] == "step.output").collect();
    assert_eq!(chunks.len(), big.len().div_ceil(64 * 1024));
    assert!(chunks[0]["payload"]["text"].is_string());
    assert_eq!(chunks[1]["payload"].get("text"), None);
    assert_eq!(chunks[1]["payload"]["bytes"], 64 * 1024);
    let done = tr
        .iter()
        .find(|l| l["type"] == "step.completed" && l["payload"]["name"] == "a")
        .unwrap();
    let named = done["payload"]["output_file"].as_str().unwrap();
    assert_eq!(std::fs::read_to_string(d.path().join(named)).unwrap(), big);
    assert!(done["payload"]["stderr_file"].is_string());
    let b_done = tr
        .iter()
        .find(|l| l["type"] == "step.completed" && l["payload"]["name"] == "b")
        .unwrap();
    assert_eq!(b_done["payload"].get("output_file"), None);
    // Every byte of the data root: one copy of each text, plus small records.
    let total: u64 = files_under(d.path()).iter().map(|(_, n)| *n).sum();
    let texts = (big.len() + err.len()) as u64;
    assert!(
        total < texts + 64 * 1024 + 128 * 1024,
        "data root holds {total} bytes for {texts} bytes of output"
    );
}

/// A state recorded again (a loop body) names its new file in the record; the file it
/// replaced stays, named by the transcript's earlier `step.completed` (a replay reads that
/// visit's chunks from it); a resumed run keeps the files of the states it did not run again.
#[test]
fn long_outputs_are_replaced_by_newer_records_and_kept_across_resume() {
    let d = tempfile::tempdir().unwrap();
    let one = "1".repeat(70 * 1024);
    let two = "2".repeat(80 * 1024);
    let three = "3".repeat(90 * 1024);
    let mut s = Script::default();
    {
        let store = open(d.path(), false);
        let rec = store.recorder();
        rec.emit(s.ev("r", None, "", None, started("wf", "wf", Map::new(), None)));
        rec.emit(s.ev("r", None, "a", None, step_started("a")));
        rec.emit(s.ev("r", None, "a", None, state_with("a", 1, &one, "")));
        rec.flush();
        rec.emit(s.ev("r", None, "a", None, state_with("a", 2, &two, "")));
        rec.flush();
        assert_eq!(files_under(&d.path().join("outputs/r")).len(), 2);
        rec.emit(s.ev(
            "r",
            None,
            "",
            None,
            finished("r", "wf", RunStatus::Failure, 3, None, Some("boom")),
        ));
        rec.flush();
    }
    let mut sizes: Vec<u64> = files_under(&d.path().join("outputs/r"))
        .iter()
        .map(|(_, n)| *n)
        .collect();
    sizes.sort_unstable();
    assert_eq!(sizes, [one.len() as u64, two.len() as u64]);
    // Resume in a new writer: `a` keeps its file, `c` adds one, short `a2` stays inline.
    s.restart("r");
    let store = open(d.path(), false);
    let rec = store.recorder();
    rec.emit(s.ev(
        "r",
        None,
        "",
        None,
        started("wf", "wf", Map::new(), Some("c")),
    ));
    rec.emit(s.ev("r", None, "c", None, step_started("c")));
    rec.emit(s.ev("r", None, "c", None, state_with("c", 4, &three, "")));
    rec.flush();
    assert_eq!(store.load("r").unwrap().states["a"].output, two);
    rec.emit(s.ev(
        "r",
        None,
        "",
        None,
        finished("r", "wf", RunStatus::Success, 0, Some("done"), None),
    ));
    rec.flush();
    let snap = store.load("r").unwrap();
    assert_eq!(snap.states["a"].output, two);
    assert_eq!(snap.states["c"].output, three);
    let mut sizes: Vec<u64> = files_under(&d.path().join("outputs/r"))
        .iter()
        .map(|(_, n)| *n)
        .collect();
    sizes.sort_unstable();
    assert_eq!(
        sizes,
        [one.len() as u64, two.len() as u64, three.len() as u64]
    );
}

/// Short texts stay inline: no outputs directory at all.
#[test]
fn short_outputs_make_no_files() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), false);
    let rec = store.recorder();
    let mut s = Script::default();
    let edge = "x".repeat(crate::state::INLINE_MAX);
    rec.emit(s.ev("r", None, "", None, started("wf", "wf", Map::new(), None)));
    rec.emit(s.ev("r", None, "a", None, state_with("a", 1, &edge, "")));
    rec.emit(s.ev(
        "r",
        None,
        "",
        None,
        finished("r", "wf", RunStatus::Success, 0, Some("done"), None),
    ));
    rec.flush();
    assert!(!d.path().join("outputs").exists());
    assert_eq!(store.load("r").unwrap().states["a"].output, edge);
}

fn chunk(step: &str, stream: OutputStream, bytes: &[u8]) -> RunEvent {
    RunEvent::OutputChunk {
        step: step.into(),
        stream,
        text: bytes.to_vec().into(),
    }
}

/// The file that received a stream as it was read becomes the stored copy when the kept text
/// is its beginning (cut at a cap, last attempt only); otherwise the text is written anew.
#[test]
fn a_streamed_spool_is_kept_only_when_it_holds_the_text() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), false);
    let rec = store.recorder();
    let mut s = Script::default();
    let first = "1".repeat(200 * 1024);
    let second = "2".repeat(300 * 1024);
    let kept = &second[..150 * 1024];
    rec.emit(s.ev("r", None, "", None, started("wf", "wf", Map::new(), None)));
    rec.emit(s.ev("r", None, "a", None, step_started("a")));
    for piece in first.as_bytes().chunks(50_000) {
        rec.emit(s.ev(
            "r",
            None,
            "a",
            None,
            chunk("a", OutputStream::Stdout, piece),
        ));
    }
    rec.emit(s.ev(
        "r",
        None,
        "a",
        None,
        RunEvent::StepRetrying {
            step: "a".into(),
            attempt: 2,
            delay_ms: 0,
            reason: None,
        },
    ));
    for piece in second.as_bytes().chunks(50_000) {
        rec.emit(s.ev(
            "r",
            None,
            "a",
            None,
            chunk("a", OutputStream::Stdout, piece),
        ));
    }
    rec.flush();
    // Each attempt's spool, written as it streamed: the failed one's stays, named by the
    // `step.retrying` line for its chunks.
    let mut spooled = files_under(&d.path().join("outputs/r"));
    spooled.sort_by_key(|(_, n)| *n);
    assert_eq!(
        spooled.iter().map(|(_, n)| *n).collect::<Vec<_>>(),
        [first.len() as u64, second.len() as u64],
        "{spooled:?}"
    );
    let first_file = spooled.remove(0);
    rec.emit(s.ev("r", None, "a", None, state_with("a", 1, kept, "")));
    rec.flush();
    // The last attempt's file is the stored copy, cut to what the step kept.
    let mut now = files_under(&d.path().join("outputs/r"));
    now.sort_by_key(|(_, n)| *n);
    assert_eq!(now, [(spooled[0].0.clone(), kept.len() as u64), first_file]);
    // `b` streamed one text but keeps another (as a second masking pass would make it).
    let streamed = "x".repeat(100 * 1024);
    let other = "y".repeat(100 * 1024);
    rec.emit(s.ev("r", None, "b", None, step_started("b")));
    rec.emit(s.ev(
        "r",
        None,
        "b",
        None,
        chunk("b", OutputStream::Stderr, streamed.as_bytes()),
    ));
    rec.emit(s.ev("r", None, "b", None, state_with("b", 2, "", &other)));
    rec.flush();
    let snap = store.load("r").unwrap();
    assert_eq!(snap.states["a"].output, kept);
    assert_eq!(snap.states["b"].stderr, other);
    let mut sizes: Vec<u64> = files_under(&d.path().join("outputs/r"))
        .iter()
        .map(|(_, n)| *n)
        .collect();
    sizes.sort_unstable();
    assert_eq!(
        sizes,
        [other.len() as u64, kept.len() as u64, first.len() as u64]
    );
    rec.emit(s.ev(
        "r",
        None,
        "",
        None,
        finished("r", "wf", RunStatus::Success, 0, Some("done"), None),
    ));
    rec.flush();
    assert_eq!(files_under(&d.path().join("outputs/r")).len(), 3);
    assert_eq!(store.load("r").unwrap().states["a"].output, kept);
}

/// Issue 9: each batch's journal line is written at once (a killed awf loses nothing), but
/// synced to the disk at most every 50 ms (a sync per batch was most of recording's cost).
#[test]
fn journal_lines_are_written_at_once_and_synced_at_most_every_50_ms() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), false);
    let rec = store.recorder();
    let mut s = Script::default();
    rec.emit(s.ev("r", None, "", None, started("wf", "wf", Map::new(), None)));
    rec.flush();
    let journal = d.path().join("states/r.journal");
    let t0 = std::time::Instant::now();
    let before = rec.journal_syncs();
    for i in 0..100u64 {
        let name = format!("s{i:03}");
        rec.emit(s.ev("r", None, &name, None, step_finished(&name, i, true)));
        // Without a flush, the line reaches the file (one batch per step).
        let mut waited = 0;
        while !std::fs::read_to_string(&journal)
            .unwrap_or_default()
            .contains(&format!("\"{name}\""))
        {
            std::thread::sleep(Duration::from_millis(1));
            waited += 1;
            assert!(waited < 60_000, "{name} never reached the journal");
        }
    }
    let syncs = rec.journal_syncs() - before;
    let allowed = u64::try_from(t0.elapsed().as_millis() / 50).unwrap() + 2;
    assert!(syncs <= allowed, "{syncs} syncs in {:?}", t0.elapsed());
    // Once quiet, what was written is synced within the interval, without a flush.
    let base = rec.journal_syncs();
    rec.emit(s.ev("r", None, "last", None, step_finished("last", 200, true)));
    let mut waited = 0;
    while rec.journal_syncs() == base {
        std::thread::sleep(Duration::from_millis(5));
        waited += 1;
        assert!(waited < 12_000, "the last lines were never synced");
    }
    assert_eq!(store.load("r").unwrap().states.len(), 101);
}

/// Waits (up to a minute) until `cond` holds, without a flush.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = std::time::Instant::now();
    while !cond() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{what} never happened"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Issue 9 (breaker, stop 31): the writer never waits for the disk. With the syncer parked
/// (as on a slow disk, where each sync of a sub-workflow's state file took milliseconds and
/// the parent's events queued in memory meanwhile, where a kill lost them), a child run
/// starts, records a step and ends, and the parent records its step: all of it reaches the
/// files at once, and what a killed process would leave (read by another store) is the
/// finished child, not its stale journal, and the parent's step. Once synced, the child's
/// journal is gone.
#[test]
fn the_writer_goes_on_while_the_disk_syncs_and_an_ended_runs_stale_journal_is_ignored() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), false);
    let rec = store.recorder();
    let mut s = Script::default();
    rec.emit(s.ev(
        "p",
        None,
        "",
        None,
        started("parent", "parent", Map::new(), None),
    ));
    rec.emit(s.ev("p", None, "call", None, step_started("call")));
    rec.flush();
    let syncs = rec.journal_syncs();
    let release = rec.hold_syncer();
    rec.emit(s.ev(
        "p",
        None,
        "call",
        None,
        RunEvent::ChildRunStarted {
            step: "call".into(),
            child_run_id: RunId("c".into()),
            workflow: "child".into(),
        },
    ));
    rec.emit(s.ev(
        "c",
        Some("p"),
        "",
        None,
        started("child", "child", Map::new(), None),
    ));
    let child_state = d.path().join("states/c.json");
    let child_journal = d.path().join("states/c.journal");
    eventually("the child's state file", || child_state.exists());
    rec.emit(s.ev("c", Some("p"), "x", None, step_finished("x", 100, true)));
    eventually("the child's journal line", || {
        std::fs::read_to_string(&child_journal).is_ok_and(|j| j.contains("\"x\""))
    });
    rec.emit(s.ev(
        "c",
        Some("p"),
        "",
        None,
        finished("c", "child", RunStatus::Success, 0, Some("done"), None),
    ));
    rec.emit(s.ev("p", None, "call", None, step_finished("call", 200, true)));
    // The parent's journal names `call` from its start on: wait for the step's result.
    eventually("the parent's journal line", || {
        open(d.path(), false).load("p").is_ok_and(|p| {
            p.states
                .get("call")
                .is_some_and(|c| c.status == StepStatus::Completed)
        })
    });
    eventually("the child's final state file", || {
        std::fs::read_to_string(&child_state).is_ok_and(|t| t.contains("\"success\""))
    });
    // Nothing was synced meanwhile, and the child's journal is still there.
    assert_eq!(rec.journal_syncs(), syncs);
    assert!(child_journal.exists());
    // What another process reads now (as after a kill).
    let other = open(d.path(), false);
    let child = other.load("c").unwrap();
    assert_eq!(child.status, StoredStatus::Success);
    assert_eq!(child.states["x"].status, StepStatus::Completed);
    let parent = other.load("p").unwrap();
    assert_eq!(parent.states["call"].status, StepStatus::Completed);
    assert_eq!(parent.child_runs.values().collect::<Vec<_>>(), ["c"]);
    drop(release);
    rec.flush();
    assert!(!child_journal.exists());
    assert!(rec.journal_syncs() > syncs);
    assert_eq!(store.load("c").unwrap().status, StoredStatus::Success);
}

/// A journal beside the state file of an ended run is never replayed over it (a kill between
/// the final write and the journal's removal left it): the ended record stands.
#[test]
fn a_journal_beside_an_ended_runs_state_file_is_not_replayed() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), false);
    let rec = store.recorder();
    let mut s = Script::default();
    rec.emit(s.ev("r", None, "", None, started("wf", "wf", Map::new(), None)));
    rec.flush();
    rec.emit(s.ev("r", None, "a", None, step_finished("a", 10, true)));
    rec.flush();
    let journal = d.path().join("states/r.journal");
    let stale = std::fs::read(&journal).unwrap();
    assert!(!stale.is_empty());
    rec.emit(s.ev(
        "r",
        None,
        "",
        None,
        finished("r", "wf", RunStatus::Failure, 1, None, Some("boom")),
    ));
    rec.flush();
    assert!(!journal.exists());
    std::fs::write(&journal, &stale).unwrap();
    let snap = store.load("r").unwrap();
    assert_eq!(snap.status, StoredStatus::Failure);
    let listed = StateStore::list(&store).unwrap();
    assert_eq!(listed[0].status, StoredStatus::Failure);
    // A running run's journal is replayed, as before.
    rec.emit(s.ev("q", None, "", None, started("wf", "wf", Map::new(), None)));
    rec.flush();
    rec.emit(s.ev("q", None, "a", None, step_finished("a", 10, true)));
    rec.flush();
    assert_eq!(
        store.load("q").unwrap().states["a"].status,
        StepStatus::Completed
    );
}

fn block_on(f: awf_domain::event::Settle) {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f);
}

/// Breaker (stop 31, kill -9 trials): steps ran before their run's state file existed, and
/// under load a starved writer fell tens of milliseconds behind, so a kill lost completed
/// steps. The run waits for its record (`settle`, awaited before each step) only then: a
/// run's start not yet written, or a step's events left unwritten longer than
/// [`LAG_BOUND`]; a writer that keeps up is never waited for.
#[test]
fn a_step_waits_for_its_runs_start_and_for_a_writer_left_behind_only() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), false);
    let rec = store.recorder();
    let mut s = Script::default();
    // Nothing emitted: nothing to wait for.
    assert!(rec.settle().is_none());
    // A run's start not yet written: its first step waits for it.
    let release = rec.hold();
    rec.emit(s.ev("r", None, "", None, started("wf", "wf", Map::new(), None)));
    let wait = rec.settle().expect("the run's start is not written yet");
    let state = d.path().join("states/r.json");
    assert!(!state.exists());
    drop(release);
    block_on(wait);
    assert!(
        state.exists(),
        "settled before the run's state file was written"
    );
    // Written: the next step does not wait.
    rec.emit(s.ev("r", None, "a", None, step_started("a")));
    assert!(rec.settle().is_none());
    rec.flush();
    // A writer held (as one starved of CPU): within the bound the run goes on...
    let release = rec.hold();
    rec.emit(s.ev("r", None, "a", None, step_finished("a", 10, true)));
    rec.emit(s.ev("r", None, "b", None, step_started("b")));
    assert!(rec.settle().is_none());
    // ...past it, the next step waits until what came before is written.
    std::thread::sleep(LAG_BOUND + Duration::from_millis(2));
    rec.emit(s.ev("r", None, "b", None, step_finished("b", 20, true)));
    rec.emit(s.ev("r", None, "c", None, step_started("c")));
    let wait = rec
        .settle()
        .expect("the writer is behind by more than the bound");
    let journal = d.path().join("states/r.journal");
    drop(release);
    block_on(wait);
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(text.contains("\"b\"") && text.contains("\"c\""), "{text}");
    // Caught up: no wait again.
    assert!(rec.settle().is_none());
}

/// Breaker: `GET /api/history` right after the `POST` that started a run did not list it.
/// `written` (what the run service awaits before it answers) resolves once the run's start
/// is written, history row included; with nothing queued there is nothing to wait for.
#[test]
fn written_resolves_once_the_queued_events_and_the_history_row_are_written() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), false);
    let rec = store.recorder();
    let mut s = Script::default();
    assert!(rec.written().is_none());
    let release = rec.hold();
    rec.emit(s.ev("r", None, "", None, started("wf", "wf", Map::new(), None)));
    let wait = rec.written().expect("the run's start is queued");
    assert_eq!(HistoryStore::get(&store, "r").unwrap(), None);
    drop(release);
    block_on(wait);
    let row = HistoryStore::get(&store, "r")
        .unwrap()
        .expect("the history row is written");
    assert_eq!(row.status, awf_domain::ports::store::StoredStatus::Running);
    assert!(rec.written().is_none());
}

/// Breaker: a run's end was written to the history (and the audit trail) before its state
/// file, so a process killed in between left the history saying "completed" while the state
/// file (and `awf resume`) had the run at its last step, which then ran again. The state
/// file is written first: here the history is held by another writer while the end is
/// recorded, and the state file says the run ended before the row does.
#[test]
fn a_runs_end_reaches_its_state_file_before_its_history_row() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), true);
    let rec = store.recorder();
    let mut s = Script::default();
    rec.emit(s.ev("r", None, "", None, started("wf", "wf", Map::new(), None)));
    rec.flush();
    let other = Connection::open(d.path().join("history.db")).unwrap();
    other.execute_batch("BEGIN IMMEDIATE;").unwrap();
    rec.emit(s.ev(
        "r",
        None,
        "",
        None,
        finished("r", "wf", RunStatus::Success, 0, Some("done"), None),
    ));
    let state = d.path().join("states/r.json");
    let ended = || {
        std::fs::read_to_string(&state)
            .unwrap_or_default()
            .contains("\"success\"")
    };
    let t0 = std::time::Instant::now();
    while !ended() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(ended(), "the state file waited for the history row");
    let row: String = other
        .query_row("SELECT status FROM runs WHERE id = 'r'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(row, "running");
    let audit = std::fs::read_to_string(d.path().join("audit.jsonl")).unwrap_or_default();
    assert!(!audit.contains("workflow.completed"), "{audit}");
    other.execute_batch("COMMIT;").unwrap();
    rec.flush();
    let row = HistoryStore::get(&store, "r").unwrap().unwrap();
    assert_eq!(row.status, StoredStatus::Success);
    let audit = std::fs::read_to_string(d.path().join("audit.jsonl")).unwrap();
    assert!(audit.contains("workflow.completed"), "{audit}");
    assert!(rec.take_errors().is_empty());
}

/// Issue 9 (a run's fixed cost): a run's first step waits for its start to be written
/// (`settle`), and that answer came after the history rows of the batch before, so the step
/// waited for history.db (opened, written; here locked by another process). The rows are put
/// off while a run waits for its record: the second run's start is answered while the first
/// run's end row still waits for the lock, and both rows are written once it is free.
#[test]
fn a_waiting_run_is_answered_before_the_history_rows_of_the_batch_before() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), false);
    let rec = store.recorder();
    let mut s = Script::default();
    rec.emit(s.ev("r1", None, "", None, started("wf", "wf", Map::new(), None)));
    rec.flush();
    let other = Connection::open(d.path().join("history.db")).unwrap();
    other.execute_batch("BEGIN IMMEDIATE;").unwrap();
    // The writer takes r1's end in one batch and stops inside it (after writing its state
    // file); r2 starts and waits for its record meanwhile.
    let release = rec.hold();
    rec.emit(s.ev(
        "r1",
        None,
        "",
        None,
        finished("r1", "wf", RunStatus::Success, 0, Some("done"), None),
    ));
    let (release2_tx, release2_rx) = mpsc::channel();
    let (ack2_tx, ack2_rx) = mpsc::sync_channel(1);
    let q = rec.inner.tx.as_ref().unwrap();
    assert!(q.push(Msg::Hold(ack2_tx, release2_rx), Urgency::Now));
    drop(release);
    ack2_rx.recv().unwrap();
    rec.emit(s.ev("r2", None, "", None, started("wf", "wf", Map::new(), None)));
    let wait = rec.settle().expect("r2's start is not written yet");
    drop(release2_tx);
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        block_on(wait);
        let _ = done_tx.send(());
    });
    // history.db stays locked (the writer would wait `BUSY_TIMEOUT`, 10 s, for r1's row).
    assert!(
        done_rx.recv_timeout(Duration::from_secs(5)).is_ok(),
        "r2's first step waited for r1's history row"
    );
    assert!(d.path().join("states/r2.json").exists());
    other.execute_batch("COMMIT;").unwrap();
    rec.flush();
    let r1 = HistoryStore::get(&store, "r1").unwrap().unwrap();
    assert_eq!(r1.status, StoredStatus::Success);
    let r2 = HistoryStore::get(&store, "r2").unwrap().unwrap();
    assert_eq!(r2.status, StoredStatus::Running);
    assert!(rec.take_errors().is_empty());
}

/// Breaker: a parent SIGKILLed 1 to 5 ms after a call ended left the called run `running`
/// for ever (its state file at its start) under a completed parent whose record named it:
/// the parent's line of the batch was written before the child's end. Runs are written the
/// most deeply called first: a grandchild before its caller, every child before the root.
#[test]
fn called_runs_are_written_before_the_runs_that_called_them() {
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), false);
    let rec = store.recorder();
    let mut s = Script::default();
    let p = "root";
    let children: Vec<String> = (0..10).map(|i| format!("child{i}")).collect();
    let grandchild = "grandchild";
    rec.emit(s.ev(p, None, "", None, started("wf", "wf", Map::new(), None)));
    rec.emit(s.ev(p, None, "par", None, step_started("par")));
    for c in &children {
        rec.emit(s.ev(
            c,
            Some(p),
            "",
            None,
            started("child", "child", Map::new(), None),
        ));
        rec.emit(s.ev(c, Some(p), "inner", None, step_started("inner")));
    }
    rec.emit(s.ev(
        grandchild,
        Some(&children[0]),
        "",
        None,
        started("gc", "gc", Map::new(), None),
    ));
    rec.flush();
    // Every run ends in one batch: the grandchild, the children, then the root.
    let release = rec.hold();
    rec.emit(s.ev(
        grandchild,
        Some(&children[0]),
        "",
        None,
        finished(grandchild, "gc", RunStatus::Success, 0, Some("end"), None),
    ));
    for c in &children {
        rec.emit(s.ev(c, Some(p), "inner", None, step_finished("inner", 400, true)));
        rec.emit(s.ev(
            c,
            Some(p),
            "",
            None,
            finished(c, "child", RunStatus::Success, 0, Some("end"), None),
        ));
    }
    rec.emit(s.ev(p, None, "par", None, step_finished("par", 500, true)));
    rec.emit(s.ev(
        p,
        None,
        "",
        None,
        finished(p, "wf", RunStatus::Success, 0, Some("done"), None),
    ));
    let before = rec.inner.shared.state_order.lock().unwrap().len();
    drop(release);
    rec.flush();
    let order: Vec<String> = rec.inner.shared.state_order.lock().unwrap()[before..].to_vec();
    assert_eq!(order.len(), 12, "{order:?}");
    assert_eq!(order[0], grandchild, "{order:?}");
    assert_eq!(order[11], p, "{order:?}");
    let mut middle = order[1..11].to_vec();
    middle.sort();
    let mut expected = children.clone();
    expected.sort();
    assert_eq!(middle, expected);
    for c in &children {
        assert_eq!(store.load(c).unwrap().status, StoredStatus::Success);
    }
    assert!(rec.take_errors().is_empty());
}
