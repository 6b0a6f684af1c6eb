//! The engine and the facade reach time, ids, files and the host only through their ports:
//! with the fakes, a run's times, ids and pid are the fakes' and its files are the fake host's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use awf_domain::ErrorCode;
use awf_domain::event::EventEnvelope;
use awf_domain::event::RunEvent;
use awf_domain::ports::facade::ResumeRequest;
use awf_domain::ports::facade::RunRequest;
use awf_domain::ports::fakes::FakeAgents;
use awf_domain::ports::fakes::FakeClock;
use awf_domain::ports::fakes::FakeCommand;
use awf_domain::ports::fakes::FakeExecutor;
use awf_domain::ports::fakes::FakeExpressions;
use awf_domain::ports::fakes::FakeHost;
use awf_domain::ports::fakes::FakeInterpolator;
use awf_domain::ports::fakes::FakeRepository;
use awf_domain::ports::fakes::FakeRunLocks;
use awf_domain::ports::fakes::SeqIds;
use awf_domain::ports::store::RunSnapshot;
use awf_domain::ports::store::StoredStatus;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use awf_domain::workflow::*;
use indexmap::IndexMap;
use pretty_assertions::assert_eq;

use crate::Facade;
use crate::RunHandle;
use crate::Services;

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
            dir: PathBuf::from("/wf"),
        },
    }
}

fn step(name: &str, source: CommandSource, next: &str) -> State {
    let mut s = State::new(name, StateKind::Command(CommandStep { source, dir: None }));
    s.on_success = Some(next.into());
    s.on_failure = Some("failed".into());
    s
}

fn terminals() -> Vec<State> {
    [
        ("done", TerminalStatus::Success),
        ("failed", TerminalStatus::Failure),
    ]
    .into_iter()
    .map(|(n, status)| {
        State::new(
            n,
            StateKind::Terminal(TerminalState {
                status,
                message: None,
                exit_code: None,
            }),
        )
    })
    .collect()
}

#[derive(Default)]
struct MemStore(Mutex<BTreeMap<String, RunSnapshot>>);

impl awf_domain::ports::StateStore for MemStore {
    fn load(&self, run_id: &str) -> Result<RunSnapshot, awf_domain::AwfError> {
        self.0.lock().unwrap().get(run_id).cloned().ok_or_else(|| {
            awf_domain::AwfError::new(ErrorCode::UserInputValidationFailed, "no such run")
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

struct Setup {
    repo: FakeRepository,
    exec: Arc<FakeExecutor>,
    clock: Arc<FakeClock>,
    host: Arc<FakeHost>,
    locks: Option<FakeRunLocks>,
    store: Option<Arc<MemStore>>,
}

impl Setup {
    fn new(repo: FakeRepository, exec: FakeExecutor) -> Self {
        Self {
            repo,
            exec: Arc::new(exec),
            clock: Arc::new(FakeClock::default()),
            host: Arc::new(FakeHost::default()),
            locks: None,
            store: None,
        }
    }

    fn facade(self) -> Facade {
        Facade::new(Services {
            repository: Arc::new(self.repo),
            interpolator: Arc::new(FakeInterpolator),
            expressions: Arc::new(FakeExpressions::new()),
            executor: self.exec,
            agents: Arc::new(FakeAgents::default()),
            state_store: self
                .store
                .map(|s| s as Arc<dyn awf_domain::ports::StateStore>),
            recorders: vec![],
            awf_dirs: BTreeMap::new(),
            clock: self.clock,
            ids: Arc::new(SeqIds::default()),
            host: self.host,
            run_locks: self
                .locks
                .map(|l| Arc::new(l) as Arc<dyn awf_domain::ports::RunLocks>),
            tool_proxies: None,
            operations: None,
            prices: Default::default(),
            event_log: None,
        })
    }
}

fn request(id: &str) -> RunRequest {
    RunRequest {
        identifier: id.into(),
        working_dir: PathBuf::from("/work"),
        ..RunRequest::default()
    }
}

async fn drain(mut h: RunHandle) -> (Vec<EventEnvelope>, RunResult) {
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

#[tokio::test]
async fn a_run_takes_its_times_ids_and_pid_from_the_ports() {
    let mut call = State::new(
        "call",
        StateKind::CallWorkflow(CallWorkflowStep {
            workflow: "child".into(),
            inputs: IndexMap::new(),
            outputs: IndexMap::new(),
        }),
    );
    call.on_success = Some("done".into());
    call.on_failure = Some("failed".into());
    let mut states = vec![
        step("a", CommandSource::Inline("echo a".into()), "call"),
        call,
    ];
    states.extend(terminals());
    let parent = workflow("parent", "a", states);
    let mut child_states = vec![step("c", CommandSource::Inline("echo c".into()), "done")];
    child_states.extend(terminals());
    let child = workflow("child", "c", child_states);
    let exec = FakeExecutor::new()
        .on("echo a", [FakeCommand::ok("a\n")])
        .on("echo c", [FakeCommand::ok("c\n"), FakeCommand::ok("c\n")]);
    let setup = Setup::new(FakeRepository::new().with(parent).with(child), exec);
    let clock = Arc::clone(&setup.clock);
    let t0 = std::time::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
    let f = setup.facade();
    let (events, result) = drain(f.start_run(request("parent")).await.unwrap()).await;
    assert_eq!(result.status, RunStatus::Success, "{:?}", result.error);
    assert_eq!(result.run_id.map(|r| r.0).as_deref(), Some("run-1"));
    // The clock stood still: every event is stamped with its time, every step took 0 ms.
    assert!(events.iter().all(|e| e.at == t0), "{events:?}");
    assert_eq!(result.duration_ms, 0);
    assert_eq!(result.states["a"].duration_ms, 0);
    assert!(matches!(
        &events[0].event,
        RunEvent::RunStarted { pid: 4242, .. }
    ));
    let child_ids: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.event {
            RunEvent::ChildRunStarted { child_run_id, .. } => Some(child_run_id.0.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(child_ids, ["run-1.1"]);
    assert!(events.iter().any(
        |e| e.run_id.0 == "run-1.1" && e.parent_run_id.as_ref().is_some_and(|p| p.0 == "run-1")
    ));
    // A later run: the next id, at the clock's new time.
    clock.advance(Duration::from_secs(60));
    let (events, result) = drain(f.start_run(request("child")).await.unwrap()).await;
    assert_eq!(result.run_id.map(|r| r.0).as_deref(), Some("run-2"));
    assert_eq!(events[0].at, t0 + Duration::from_secs(60));
}

#[tokio::test]
async fn script_files_are_read_through_the_host_with_the_same_messages() {
    let mut states = vec![step(
        "s",
        CommandSource::ScriptFile("build.sh".into()),
        "done",
    )];
    states.extend(terminals());
    let wf = workflow("w", "s", states);
    let run = |host: FakeHost, exec: FakeExecutor| {
        let mut setup = Setup::new(FakeRepository::new().with(wf.clone()), exec);
        setup.host = Arc::new(host);
        async move {
            let f = setup.facade();
            drain(f.start_run(request("w")).await.unwrap()).await.1
        }
    };
    let r = run(
        FakeHost::default().file("/wf/build.sh", "echo from the script"),
        FakeExecutor::new().on("echo from the script", [FakeCommand::ok("ok\n")]),
    )
    .await;
    assert_eq!(r.status, RunStatus::Success, "{:?}", r.error);
    assert_eq!(r.states["s"].output, "ok\n");
    // A script the run could not read is refused before the run starts (a workflow error).
    for (host, message) in [
        (
            FakeHost::default(),
            "states.s.script_file: script_file not found: build.sh (/wf/build.sh)",
        ),
        (
            FakeHost::default().dir("/wf/build.sh"),
            "states.s.script_file: script_file is a directory, not a file: build.sh (/wf/build.sh)",
        ),
        (
            FakeHost::default().dangling_link("/wf/build.sh"),
            "states.s.script_file: script_file is a symbolic link that cannot be followed: build.sh (/wf/build.sh)",
        ),
    ] {
        let mut setup = Setup::new(FakeRepository::new().with(wf.clone()), FakeExecutor::new());
        setup.host = Arc::new(host);
        let Err(e) = setup.facade().start_run(request("w")).await else {
            panic!("{message}: the run started");
        };
        assert_eq!(
            (e.code(), e.message()),
            (ErrorCode::WorkflowValidationInvalidReference, message)
        );
    }
}

fn running_snapshot(pid: u32) -> RunSnapshot {
    let t0 = std::time::UNIX_EPOCH + Duration::from_secs(1_000);
    RunSnapshot {
        schema_version: 1,
        run_id: "run-7".into(),
        parent_run_id: None,
        workflow: "w".into(),
        workflow_name: "w".into(),
        workflow_path: None,
        status: StoredStatus::Running,
        current_state: "s".into(),
        inputs: serde_json::Map::new(),
        states: BTreeMap::new(),
        started_at: t0,
        updated_at: t0,
        completed_at: None,
        exit_code: None,
        terminal: None,
        error: None,
        outputs: BTreeMap::new(),
        owner_pid: Some(pid),
        loop_position: None,
        spend: None,
        waiting_until: None,
        child_runs: Default::default(),
        mocks: Default::default(),
        working_dir: None,
    }
}

#[tokio::test]
async fn resume_asks_the_lock_and_the_host_whether_the_run_is_still_running() {
    let mut states = vec![step("s", CommandSource::Inline("echo s".into()), "done")];
    states.extend(terminals());
    let wf = workflow("w", "s", states);
    let store = Arc::new(MemStore::default());
    store
        .0
        .lock()
        .unwrap()
        .insert("run-7".into(), running_snapshot(77));
    let resume = || ResumeRequest {
        run_id: "run-7".into(),
        working_dir: PathBuf::from("/work"),
        ..ResumeRequest::default()
    };
    // Unlocked (no lock port) and its recorded process alive on the host: refused.
    let mut setup = Setup::new(FakeRepository::new().with(wf.clone()), FakeExecutor::new());
    setup.store = Some(Arc::clone(&store));
    setup.host.process(77, true);
    let e = setup.facade().resume_run(resume()).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
    assert_eq!(e.message(), "run run-7 is still running (awf process 77)");
    // Another holder of the lock: refused, whatever the pid.
    let locks = FakeRunLocks::default();
    let held = awf_domain::ports::RunLocks::try_lock(&locks, "run-7").unwrap();
    let mut setup = Setup::new(FakeRepository::new().with(wf.clone()), FakeExecutor::new());
    setup.store = Some(Arc::clone(&store));
    setup.locks = Some(locks.clone());
    let e = setup.facade().resume_run(resume()).await.unwrap_err();
    assert_eq!(
        e.message(),
        "run run-7 is still running in another awf process"
    );
    drop(held);
    // The lock taken by the resume itself: the pid (alive, reused) no longer matters, and the
    // lock is held as long as the handle.
    let mut setup = Setup::new(
        FakeRepository::new().with(wf),
        FakeExecutor::new().on("echo s", [FakeCommand::ok("s\n")]),
    );
    setup.store = Some(store);
    setup.locks = Some(locks.clone());
    setup.host.process(77, true);
    let h = setup.facade().resume_run(resume()).await.unwrap();
    assert_eq!(locks.held(), ["run-7"]);
    let (_, result) = drain(h).await;
    assert_eq!(result.status, RunStatus::Success, "{:?}", result.error);
    assert_eq!(locks.held(), Vec::<String>::new());
}

#[tokio::test]
async fn a_started_run_holds_its_lock_as_long_as_its_handle() {
    let mut states = vec![step("s", CommandSource::Inline("echo s".into()), "done")];
    states.extend(terminals());
    let mut setup = Setup::new(
        FakeRepository::new().with(workflow("w", "s", states)),
        FakeExecutor::new().on("echo s", [FakeCommand::ok("s\n")]),
    );
    let locks = FakeRunLocks::default();
    setup.locks = Some(locks.clone());
    let h = setup.facade().start_run(request("w")).await.unwrap();
    assert_eq!(locks.held(), ["run-1"]);
    let (_, result) = drain(h).await;
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(
        locks.held(),
        Vec::<String>::new(),
        "released with the handle"
    );
}

#[test]
fn validation_checks_files_on_the_host() {
    let mut states = vec![step(
        "s",
        CommandSource::ScriptFile("build.sh".into()),
        "done",
    )];
    states.extend(terminals());
    let wf = workflow("w", "s", states);
    let check = |host: FakeHost| -> Vec<String> {
        crate::validation::file_references(
            &wf,
            &BTreeMap::new(),
            &BTreeMap::new(),
            std::path::Path::new("/work"),
            &host,
            &FakeInterpolator,
        )
        .into_iter()
        .map(|d| d.message)
        .collect()
    };
    assert_eq!(
        check(FakeHost::default()),
        ["script_file not found: build.sh (/wf/build.sh)"]
    );
    assert_eq!(
        check(FakeHost::default().dir("/wf/build.sh")),
        ["script_file is a directory, not a file: build.sh (/wf/build.sh)"]
    );
    assert_eq!(
        check(FakeHost::default().file("/wf/build.sh", "echo")),
        Vec::<String>::new()
    );
}
