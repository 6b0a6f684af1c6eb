//! `awf resume` of a run that stopped inside a sub-workflow: the call continues its earlier
//! child run from the child's record instead of running the child's completed states again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

use awf_domain::event::EventEnvelope;
use awf_domain::event::RunEvent;
use awf_domain::ports::facade::ResumeFrom;
use awf_domain::ports::facade::ResumeRequest;
use awf_domain::ports::fakes::FakeCommand;
use awf_domain::ports::fakes::FakeExecutor;
use awf_domain::ports::fakes::FakeRepository;
use awf_domain::ports::store::RunSnapshot;
use awf_domain::ports::store::StoredStatus;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use awf_domain::run::StepState;
use awf_domain::run::StepStatus;
use awf_domain::workflow::*;
use indexmap::IndexMap;
use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::Facade;
use crate::Services;

fn cmd(name: &str, command: &str, on_success: &str) -> State {
    let mut s = State::new(
        name,
        StateKind::Command(CommandStep {
            source: CommandSource::Inline(command.into()),
            dir: None,
        }),
    );
    s.on_success = Some(on_success.into());
    s
}

fn call(name: &str, workflow: &str, on_success: &str) -> State {
    let mut s = State::new(
        name,
        StateKind::CallWorkflow(CallWorkflowStep {
            workflow: workflow.into(),
            inputs: IndexMap::new(),
            outputs: IndexMap::new(),
        }),
    );
    s.on_success = Some(on_success.into());
    s
}

fn done() -> State {
    State::new(
        "done",
        StateKind::Terminal(TerminalState {
            status: TerminalStatus::Success,
            message: None,
            exit_code: None,
        }),
    )
}

fn workflow(id: &str, initial: &str, states: Vec<State>) -> Workflow {
    Workflow {
        name: id.into(),
        version: None,
        description: None,
        author: None,
        tags: vec![],
        inputs: vec![],
        env: vec![],
        initial: initial.into(),
        states: states.into_iter().map(|s| (s.name.clone(), s)).collect(),
        hooks: WorkflowHooks::default(),
        outputs: vec![],
        shell_quote: false,
        budget: None,
        source: WorkflowSource {
            identifier: id.into(),
            path: None,
            dir: PathBuf::from("/"),
        },
    }
}

/// `p`: pre → call (child `c`) → post; `c`: x → y → z.
fn repository() -> FakeRepository {
    FakeRepository::new()
        .with(workflow(
            "p",
            "pre",
            vec![
                cmd("pre", "step pre", "call"),
                call("call", "c", "post"),
                cmd("post", "step post", "done"),
                done(),
            ],
        ))
        .with(workflow(
            "c",
            "x",
            vec![
                cmd("x", "step x", "y"),
                cmd("y", "step y", "z"),
                cmd("z", "step z", "done"),
                done(),
            ],
        ))
}

fn t(s: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_000 + s)
}

fn recorded(name: &str, status: StepStatus, started: u64, ended: u64) -> (String, StepState) {
    let mut s = StepState::running(name, t(started));
    s.status = status;
    s.completed_at = Some(t(ended));
    s.output = format!("{name} before\n").into();
    (name.to_owned(), s)
}

fn snapshot(
    run_id: &str,
    parent: Option<&str>,
    workflow: &str,
    status: StoredStatus,
    current: &str,
    states: Vec<(String, StepState)>,
    started: u64,
) -> RunSnapshot {
    RunSnapshot {
        schema_version: 1,
        run_id: run_id.into(),
        parent_run_id: parent.map(str::to_owned),
        workflow: workflow.into(),
        workflow_name: workflow.into(),
        workflow_path: None,
        status,
        current_state: current.into(),
        inputs: serde_json::Map::new(),
        states: states.into_iter().collect(),
        started_at: t(started),
        updated_at: t(started),
        completed_at: None,
        exit_code: None,
        terminal: None,
        error: None,
        outputs: BTreeMap::new(),
        owner_pid: None,
        loop_position: None,
        spend: None,
        waiting_until: None,
        child_runs: BTreeMap::new(),
        mocks: Default::default(),
        working_dir: None,
    }
}

#[derive(Default)]
struct MemStore(std::sync::Mutex<BTreeMap<String, RunSnapshot>>);

impl MemStore {
    fn with(self, snap: RunSnapshot) -> Self {
        self.0.lock().unwrap().insert(snap.run_id.clone(), snap);
        self
    }
}

impl awf_domain::ports::StateStore for MemStore {
    fn load(&self, run_id: &str) -> Result<RunSnapshot, awf_domain::AwfError> {
        self.0.lock().unwrap().get(run_id).cloned().ok_or_else(|| {
            awf_domain::AwfError::new(
                awf_domain::ErrorCode::UserInputValidationFailed,
                "no such run",
            )
        })
    }
    fn list(&self) -> Result<Vec<RunSnapshot>, awf_domain::AwfError> {
        Ok(self.0.lock().unwrap().values().cloned().collect())
    }
    fn save(&self, s: &RunSnapshot) -> Result<(), awf_domain::AwfError> {
        self.0.lock().unwrap().insert(s.run_id.clone(), s.clone());
        Ok(())
    }
}

/// The parent `run-1` stopped at `call`, whose earlier child is `run-1.old`.
fn parent_at_call(call_state: Option<(String, StepState)>) -> RunSnapshot {
    let mut states = vec![recorded("pre", StepStatus::Completed, 0, 1)];
    states.extend(call_state);
    let mut snap = snapshot("run-1", None, "p", StoredStatus::Failure, "call", states, 0);
    snap.child_runs = BTreeMap::from([("call".to_owned(), "run-1.old".to_owned())]);
    snap
}

async fn resume(
    store: MemStore,
    exec: &Arc<FakeExecutor>,
    from: ResumeFrom,
) -> (Vec<EventEnvelope>, RunResult) {
    let f = Facade::new(Services {
        state_store: Some(Arc::new(store)),
        ..Services::fakes(repository(), Arc::clone(exec) as _)
    });
    let mut h = f
        .resume_run(ResumeRequest {
            run_id: "run-1".into(),
            from,
            working_dir: PathBuf::from("/"),
            ..Default::default()
        })
        .await
        .expect("resumes");
    let mut events = Vec::new();
    while let Some(e) = h.next_event().await {
        events.push(e);
    }
    let result = events
        .iter()
        .find_map(|e| match &e.event {
            RunEvent::RunFinished { result } if e.parent_run_id.is_none() => {
                Some(result.as_ref().clone())
            }
            _ => None,
        })
        .expect("finished");
    (events, result)
}

/// The child runs started in `events`: (run id, `resumed_from`).
fn child_starts(events: &[EventEnvelope]) -> Vec<(String, Option<String>)> {
    events
        .iter()
        .filter(|e| e.parent_run_id.is_some())
        .filter_map(|e| match &e.event {
            RunEvent::RunStarted { resumed_from, .. } => {
                Some((e.run_id.0.clone(), resumed_from.clone()))
            }
            _ => None,
        })
        .collect()
}

fn child_result(events: &[EventEnvelope]) -> RunResult {
    events
        .iter()
        .find_map(|e| match &e.event {
            RunEvent::RunFinished { result } if e.parent_run_id.is_some() => {
                Some(result.as_ref().clone())
            }
            _ => None,
        })
        .expect("the child finished")
}

#[tokio::test]
async fn a_failed_child_goes_on_from_its_failed_state_in_the_same_run() {
    let exec = Arc::new(
        FakeExecutor::new()
            .on("step y", [FakeCommand::ok("y\n")])
            .on("step z", [FakeCommand::ok("z\n")])
            .on("step post", [FakeCommand::ok("post\n")]),
    );
    let store = MemStore::default()
        .with(parent_at_call(Some(recorded(
            "call",
            StepStatus::Failed,
            2,
            5,
        ))))
        .with(snapshot(
            "run-1.old",
            Some("run-1"),
            "c",
            StoredStatus::Failure,
            "y",
            vec![
                recorded("x", StepStatus::Completed, 2, 3),
                recorded("y", StepStatus::Failed, 3, 4),
            ],
            2,
        ));
    let (events, result) = resume(store, &exec, ResumeFrom::Current).await;
    assert_eq!(exec.commands(), ["step y", "step z", "step post"]);
    assert_eq!(result.status, RunStatus::Success, "{:?}", result.error);
    assert_eq!(
        child_starts(&events),
        [("run-1.old".to_owned(), Some("y".to_owned()))]
    );
    assert!(events.iter().any(|e| matches!(&e.event,
        RunEvent::ChildRunStarted { child_run_id, .. } if child_run_id.0 == "run-1.old")));
    let child = child_result(&events);
    assert_eq!(child.states["x"].output.as_str(), "x before\n");
    assert_eq!(child.states["y"].output.as_str(), "y\n");
    assert_eq!(child.run_id.map(|r| r.0).as_deref(), Some("run-1.old"));
}

#[tokio::test]
async fn a_child_killed_after_a_state_completed_goes_on_after_it() {
    // Killed between x's end and y's start: x is the child's current state, completed.
    let exec = Arc::new(
        FakeExecutor::new()
            .on("step y", [FakeCommand::ok("y\n")])
            .on("step z", [FakeCommand::ok("z\n")])
            .on("step post", [FakeCommand::ok("post\n")]),
    );
    let mut parent = parent_at_call(None);
    parent.status = StoredStatus::Running;
    let store = MemStore::default().with(parent).with(snapshot(
        "run-1.old",
        Some("run-1"),
        "c",
        StoredStatus::Running,
        "x",
        vec![recorded("x", StepStatus::Completed, 2, 3)],
        2,
    ));
    let (events, result) = resume(store, &exec, ResumeFrom::Current).await;
    assert_eq!(exec.commands(), ["step y", "step z", "step post"]);
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(
        child_starts(&events),
        [("run-1.old".to_owned(), Some("x".to_owned()))]
    );
}

#[tokio::test]
async fn a_child_that_had_succeeded_is_not_run_again_and_its_outputs_stand() {
    let exec = Arc::new(FakeExecutor::new().on("step post", [FakeCommand::ok("post\n")]));
    let mut child = snapshot(
        "run-1.old",
        Some("run-1"),
        "c",
        StoredStatus::Success,
        "z",
        vec![
            recorded("x", StepStatus::Completed, 2, 3),
            recorded("y", StepStatus::Completed, 3, 4),
            recorded("z", StepStatus::Completed, 4, 5),
        ],
        2,
    );
    child.outputs = BTreeMap::from([("report".to_owned(), Value::from("ok"))]);
    child.completed_at = Some(t(5));
    let mut parent = parent_at_call(None);
    parent.status = StoredStatus::Running;
    let store = MemStore::default().with(parent).with(child);
    let (events, result) = resume(store, &exec, ResumeFrom::Current).await;
    assert_eq!(exec.commands(), ["step post"]);
    assert_eq!(result.status, RunStatus::Success);
    assert!(child_starts(&events).is_empty());
    assert_eq!(
        result.states["call"].outputs,
        BTreeMap::from([("report".to_owned(), "ok".to_owned())])
    );
    assert_eq!(result.states["call"].output.as_str(), r#"{"report":"ok"}"#);
}

#[tokio::test]
async fn from_a_state_before_the_call_the_child_runs_again_in_a_new_run() {
    let exec = Arc::new(
        FakeExecutor::new()
            .on("step pre", [FakeCommand::ok("pre\n")])
            .on("step x", [FakeCommand::ok("x\n")])
            .on("step y", [FakeCommand::ok("y\n")])
            .on("step z", [FakeCommand::ok("z\n")])
            .on("step post", [FakeCommand::ok("post\n")]),
    );
    let store = MemStore::default()
        .with(parent_at_call(Some(recorded(
            "call",
            StepStatus::Failed,
            2,
            5,
        ))))
        .with(snapshot(
            "run-1.old",
            Some("run-1"),
            "c",
            StoredStatus::Failure,
            "y",
            vec![recorded("x", StepStatus::Completed, 2, 3)],
            2,
        ));
    let (events, result) = resume(store, &exec, ResumeFrom::Step("pre".into())).await;
    assert_eq!(
        exec.commands(),
        ["step pre", "step x", "step y", "step z", "step post"]
    );
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(child_starts(&events), [("run-1.1".to_owned(), None)]);
}

#[tokio::test]
async fn a_child_whose_success_the_call_recorded_is_not_taken_for_a_later_visit() {
    // `loop`: call → check, and check's failure goes back to call. The earlier attempt
    // recorded `call` completed (its child succeeded) and stopped in `check`: the resumed
    // run's visit of `call` after `check` fails again starts a child of its own.
    let mut check = cmd("check", "step check", "done");
    check.on_failure = Some("call".into());
    let mut repo = repository();
    repo = repo.with(workflow(
        "loop",
        "call",
        vec![call("call", "c", "check"), check, done()],
    ));
    let exec = Arc::new(
        FakeExecutor::new()
            .on(
                "step check",
                [FakeCommand::fail(1, "no\n"), FakeCommand::ok("yes\n")],
            )
            .on("step x", [FakeCommand::ok("x\n")])
            .on("step y", [FakeCommand::ok("y\n")])
            .on("step z", [FakeCommand::ok("z\n")]),
    );
    let mut child = snapshot(
        "run-1.old",
        Some("run-1"),
        "c",
        StoredStatus::Success,
        "z",
        vec![recorded("z", StepStatus::Completed, 4, 5)],
        2,
    );
    child.completed_at = Some(t(5));
    let mut parent = snapshot(
        "run-1",
        None,
        "loop",
        StoredStatus::Running,
        "check",
        vec![recorded("call", StepStatus::Completed, 2, 6)],
        0,
    );
    parent.child_runs = BTreeMap::from([("call".to_owned(), "run-1.old".to_owned())]);
    let store = MemStore::default().with(parent).with(child);
    let f = Facade::new(Services {
        state_store: Some(Arc::new(store)),
        ..Services::fakes(repo, Arc::clone(&exec) as _)
    });
    let mut h = f
        .resume_run(ResumeRequest {
            run_id: "run-1".into(),
            working_dir: PathBuf::from("/"),
            ..Default::default()
        })
        .await
        .expect("resumes");
    let mut events = Vec::new();
    while let Some(e) = h.next_event().await {
        events.push(e);
    }
    assert_eq!(
        exec.commands(),
        ["step check", "step x", "step y", "step z", "step check"]
    );
    assert_eq!(child_starts(&events), [("run-1.1".to_owned(), None)]);
}

#[tokio::test]
async fn a_grandchild_goes_on_from_its_own_record_too() {
    // `p` calls `c` at `call`; here `c` is `mid`: m1 → deep (calls `g`: g1 → g2). The run
    // stopped in g2: g1 and m1 do not run again.
    let repo = FakeRepository::new()
        .with(workflow(
            "p",
            "pre",
            vec![
                cmd("pre", "step pre", "call"),
                call("call", "mid", "post"),
                cmd("post", "step post", "done"),
                done(),
            ],
        ))
        .with(workflow(
            "mid",
            "m1",
            vec![
                cmd("m1", "step m1", "deep"),
                call("deep", "g", "done"),
                done(),
            ],
        ))
        .with(workflow(
            "g",
            "g1",
            vec![
                cmd("g1", "step g1", "g2"),
                cmd("g2", "step g2", "done"),
                done(),
            ],
        ));
    let exec = Arc::new(
        FakeExecutor::new()
            .on("step g2", [FakeCommand::ok("g2\n")])
            .on("step post", [FakeCommand::ok("post\n")]),
    );
    let mut mid = snapshot(
        "run-1.old",
        Some("run-1"),
        "mid",
        StoredStatus::Running,
        "deep",
        vec![recorded("m1", StepStatus::Completed, 2, 3)],
        2,
    );
    mid.child_runs = BTreeMap::from([("deep".to_owned(), "run-1.old.g".to_owned())]);
    let mut parent = parent_at_call(None);
    parent.status = StoredStatus::Running;
    let store = MemStore::default().with(parent).with(mid).with(snapshot(
        "run-1.old.g",
        Some("run-1.old"),
        "g",
        StoredStatus::Running,
        "g2",
        vec![recorded("g1", StepStatus::Completed, 3, 4)],
        3,
    ));
    let f = Facade::new(Services {
        state_store: Some(Arc::new(store)),
        ..Services::fakes(repo, Arc::clone(&exec) as _)
    });
    let mut h = f
        .resume_run(ResumeRequest {
            run_id: "run-1".into(),
            working_dir: PathBuf::from("/"),
            ..Default::default()
        })
        .await
        .expect("resumes");
    let mut events = Vec::new();
    while let Some(e) = h.next_event().await {
        events.push(e);
    }
    assert_eq!(exec.commands(), ["step g2", "step post"]);
    assert_eq!(
        child_starts(&events),
        [
            ("run-1.old".to_owned(), Some("deep".to_owned())),
            ("run-1.old.g".to_owned(), Some("g2".to_owned())),
        ]
    );
    let root = events
        .iter()
        .find_map(|e| match &e.event {
            RunEvent::RunFinished { result } if e.parent_run_id.is_none() => Some(result.clone()),
            _ => None,
        })
        .expect("finished");
    assert_eq!(root.status, RunStatus::Success, "{:?}", root.error);
}
