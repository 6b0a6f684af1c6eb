//! Run service tests over the scripted port fakes (no processes, no disk).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;
use std::time::SystemTime;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::event::RunEvent;
use awf_domain::interaction::Answer;
use awf_domain::interaction::BreakpointDecision;
use awf_domain::ports::StateStore;
use awf_domain::ports::facade::Interactive;
use awf_domain::ports::facade::RunRequest;
use awf_domain::ports::fakes::FakeCommand;
use awf_domain::ports::fakes::FakeExecutor;
use awf_domain::ports::fakes::FakeRepository;
use awf_domain::ports::service::RunPhase;
use awf_domain::ports::service::RunService;
use awf_domain::ports::service::Subscription;
use awf_domain::ports::service::SubscriptionItem;
use awf_domain::ports::store::RunSnapshot;
use awf_domain::ports::store::StoredStatus;
use awf_domain::run::CancelReason;
use awf_domain::run::RunId;
use awf_domain::run::RunStatus;
use awf_domain::workflow::*;
use indexmap::IndexMap;
use pretty_assertions::assert_eq;

use super::RunManager;
use super::ServiceConfig;
use crate::Services;

fn cmd(name: &str, command: &str, next: &str) -> State {
    let mut s = State::new(
        name,
        StateKind::Command(CommandStep {
            source: CommandSource::Inline(command.into()),
            dir: None,
        }),
    );
    s.on_success = Some(next.into());
    s.on_failure = Some("failed".into());
    s
}

fn call(name: &str, child: &str, next: &str) -> State {
    let mut s = State::new(
        name,
        StateKind::CallWorkflow(CallWorkflowStep {
            workflow: child.into(),
            inputs: IndexMap::new(),
            outputs: IndexMap::new(),
        }),
    );
    s.on_success = Some(next.into());
    s.on_failure = Some("failed".into());
    s
}

fn terminal(name: &str, status: TerminalStatus) -> State {
    State::new(
        name,
        StateKind::Terminal(TerminalState {
            status,
            message: None,
            exit_code: None,
        }),
    )
}

/// `states` then the terminals `done` and `failed`.
fn workflow(id: &str, states: Vec<State>) -> Workflow {
    let initial = states.first().map(|s| s.name.clone()).unwrap_or_default();
    let mut map = IndexMap::new();
    for s in states.into_iter().chain([
        terminal("done", TerminalStatus::Success),
        terminal("failed", TerminalStatus::Failure),
    ]) {
        map.insert(s.name.clone(), s);
    }
    Workflow {
        name: id.into(),
        version: None,
        description: None,
        author: None,
        tags: vec![],
        inputs: vec![],
        env: vec![],
        initial,
        states: map,
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

/// A linear workflow of `n` command steps `s0 … s<n-1>`, each running `step` once.
fn steps(id: &str, n: usize) -> Workflow {
    let states = (0..n)
        .map(|i| {
            let next = if i + 1 == n {
                "done".to_owned()
            } else {
                format!("s{}", i + 1)
            };
            cmd(&format!("s{i}"), "step", &next)
        })
        .collect();
    workflow(id, states)
}

fn services(repo: FakeRepository, exec: FakeExecutor, store: Option<Arc<MemStore>>) -> Services {
    Services {
        state_store: store.map(|s| s as Arc<dyn StateStore>),
        ..Services::fakes(repo, Arc::new(exec))
    }
}

fn request(id: &str) -> RunRequest {
    RunRequest {
        identifier: id.into(),
        working_dir: PathBuf::from("/"),
        ..RunRequest::default()
    }
}

/// Stops before `at`.
fn interactive(id: &str, at: &str) -> RunRequest {
    RunRequest {
        interactive: Some(Interactive {
            breakpoints: vec![at.into()],
        }),
        ..request(id)
    }
}

/// Every item until the end, with the positions of the events.
async fn drain(sub: &mut Box<dyn Subscription>) -> Vec<SubscriptionItem> {
    let mut out = Vec::new();
    while let Some(item) = sub.next().await {
        out.push(item);
    }
    out
}

fn positions(items: &[SubscriptionItem]) -> Vec<u64> {
    items
        .iter()
        .map(|i| match i {
            SubscriptionItem::Event { position, .. } => *position,
            SubscriptionItem::Lagged { .. } => 0,
        })
        .collect()
}

/// Reads until a breakpoint (or any other interaction request); gives the items read and
/// its request id.
async fn until_breakpoint(sub: &mut Box<dyn Subscription>) -> (Vec<SubscriptionItem>, String) {
    let mut seen = Vec::new();
    loop {
        let item = sub.next().await.expect("the run stops at a request");
        let id = match &item {
            SubscriptionItem::Event { envelope, .. } => match &envelope.event {
                RunEvent::InteractionRequired { request } => Some(request.request_id.clone()),
                _ => None,
            },
            SubscriptionItem::Lagged { .. } => None,
        };
        seen.push(item);
        if let Some(id) = id {
            return (seen, id);
        }
    }
}

fn code<T>(r: Result<T, AwfError>) -> ErrorCode {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.code(),
    }
}

/// A settable clock.
fn clock() -> (Arc<Mutex<Instant>>, super::Clock) {
    let now = Arc::new(Mutex::new(Instant::now()));
    let read = Arc::clone(&now);
    (now, Arc::new(move || *crate::engine::lock(&read)))
}

/// State files in memory.
type MemStore = awf_domain::ports::fakes::FakeStateStore;

fn snapshot(run_id: &str, status: StoredStatus) -> RunSnapshot {
    RunSnapshot {
        schema_version: 1,
        run_id: run_id.into(),
        parent_run_id: None,
        workflow: "w".into(),
        workflow_name: "w".into(),
        workflow_path: None,
        status,
        current_state: "done".into(),
        inputs: serde_json::Map::new(),
        states: BTreeMap::new(),
        started_at: SystemTime::UNIX_EPOCH,
        updated_at: SystemTime::UNIX_EPOCH,
        completed_at: None,
        exit_code: Some(0),
        terminal: Some("done".into()),
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

#[tokio::test]
async fn subscribers_from_the_start_mid_run_and_after_the_end_see_one_sequence() {
    // A parent calling a child: the log holds both runs' events in one numbering.
    let parent = workflow(
        "parent",
        vec![
            cmd("a", "echo a", "b"),
            call("b", "child", "c"),
            cmd("c", "echo c", "done"),
        ],
    );
    let child = workflow("child", vec![cmd("x", "echo x", "done")]);
    let exec = FakeExecutor::new()
        .on("echo a", [FakeCommand::ok("a\n")])
        .on("echo x", [FakeCommand::ok("x\n")])
        .on("echo c", [FakeCommand::ok("c\n")]);
    let svc = RunManager::new(
        services(FakeRepository::new().with(parent).with(child), exec, None),
        ServiceConfig::default(),
    );
    let id = svc.start(interactive("parent", "c")).await.unwrap();
    let mut first = svc.subscribe(&id, 1).unwrap();
    let (mut seen, request) = until_breakpoint(&mut first).await;
    assert!(
        seen.iter().any(|i| matches!(i, SubscriptionItem::Event { envelope, .. } if envelope.parent_run_id.is_some())),
        "the child's events are in the parent's log"
    );
    // Joins mid-run, while the run waits at the breakpoint.
    let mut second = svc.subscribe(&id, 3).unwrap();
    svc.respond(&request, Answer::Decision(BreakpointDecision::Continue))
        .unwrap();
    seen.extend(drain(&mut first).await);
    let joined = drain(&mut second).await;
    assert_eq!(
        positions(&seen),
        (1..=seen.len() as u64).collect::<Vec<_>>(),
        "no gap, no duplicate"
    );
    assert_eq!(joined, seen[2..].to_vec());
    let Some(SubscriptionItem::Event { envelope, .. }) = seen.last() else {
        panic!("ends with an event");
    };
    assert!(matches!(envelope.event, RunEvent::RunFinished { .. }));
    assert_eq!(envelope.parent_run_id, None);
    let result = svc.wait(&id).await.unwrap();
    assert_eq!(result.status, RunStatus::Success);
    // After the end: the whole log, then the end.
    let mut late = svc.subscribe(&id, 1).unwrap();
    assert_eq!(drain(&mut late).await, seen);
    let mut past_end = svc.subscribe(&id, seen.len() as u64 + 5).unwrap();
    assert_eq!(past_end.next().await, None);
}

#[tokio::test]
#[allow(clippy::print_stderr)]
async fn a_never_read_subscriber_does_not_hold_up_a_thousand_step_run() {
    let exec = FakeExecutor::new().always("step", FakeCommand::ok("out\n"));
    let svc = RunManager::new(
        services(FakeRepository::new().with(steps("w", 1000)), exec, None),
        ServiceConfig::default(),
    );
    // For the record only (no timing is asserted): the same run without a subscriber.
    let started = Instant::now();
    let alone = svc.start(request("w")).await.unwrap();
    svc.wait(&alone).await.unwrap();
    let without = started.elapsed();
    let started = Instant::now();
    let id = svc.start(request("w")).await.unwrap();
    // Subscribed at once, read only after the run ended: the engine never waited for it.
    let mut blocked = svc.subscribe(&id, 1).unwrap();
    let result = svc.wait(&id).await.unwrap();
    eprintln!(
        "1,000 steps: {without:?} alone, {:?} with a subscriber that reads nothing",
        started.elapsed()
    );
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(result.states.len(), 1000);
    assert_eq!(svc.get(&id).unwrap().phase, RunPhase::Finished);
    let items = drain(&mut blocked).await;
    // RunStarted, 3 events per step (started, output, finished), RunFinished; nothing dropped.
    assert_eq!(items.len(), 1000 * 3 + 2);
    assert_eq!(
        positions(&items),
        (1..=items.len() as u64).collect::<Vec<_>>()
    );
}

#[tokio::test]
#[allow(clippy::print_stderr)]
async fn a_ten_thousand_step_run_log_stays_within_its_budget() {
    let exec = FakeExecutor::new().always("step", FakeCommand::ok("one line of output\n"));
    let svc = RunManager::new(
        services(FakeRepository::new().with(steps("w", 10_000)), exec, None),
        ServiceConfig::default(),
    );
    let id = svc.start(request("w")).await.unwrap();
    let result = svc.wait(&id).await.unwrap();
    assert_eq!(result.status, RunStatus::Success);
    let (bytes, events) = svc.log_footprint(&id).unwrap();
    eprintln!("10,000-step run: {events} events, about {bytes} bytes kept in its log");
    assert_eq!(events, 30_002, "all kept: far under the default budget");
    assert!(bytes < ServiceConfig::default().log_budget_bytes);
    // A small budget keeps only the newest events; a late subscriber is told.
    let exec = FakeExecutor::new().always("step", FakeCommand::ok("one line of output\n"));
    let small = RunManager::new(
        services(FakeRepository::new().with(steps("w", 1000)), exec, None),
        ServiceConfig {
            log_budget_bytes: 1 << 20,
            ..ServiceConfig::default()
        },
    );
    let id = small.start(request("w")).await.unwrap();
    small.wait(&id).await.unwrap();
    let (bytes, events) = small.log_footprint(&id).unwrap();
    assert!(
        bytes <= 1 << 20 && events < 3002,
        "{bytes} bytes, {events} events"
    );
    let mut late = small.subscribe(&id, 1).unwrap();
    let items = drain(&mut late).await;
    assert_eq!(
        items.first(),
        Some(&SubscriptionItem::Lagged {
            resume_seq: 3002 - events as u64 + 1
        })
    );
    assert_eq!(items.len(), events + 1);
}

#[tokio::test]
async fn the_cap_on_live_runs_refuses_with_a_clear_error_and_frees_at_the_end() {
    let exec = FakeExecutor::new()
        .always("hang", FakeCommand::Hang)
        .on("step", [FakeCommand::ok(""), FakeCommand::ok("")]);
    let svc = RunManager::new(
        services(
            FakeRepository::new()
                .with(workflow("hangs", vec![cmd("h", "hang", "done")]))
                .with(steps("w", 1)),
            exec,
            None,
        ),
        ServiceConfig {
            max_live_runs: 1,
            ..ServiceConfig::default()
        },
    );
    let live = svc.start(request("hangs")).await.unwrap();
    let e = svc.start(request("w")).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::UserFacadeRunLimit);
    assert_eq!(
        e.message(),
        "1 run is live, the most this process runs at once (1); the run was not started"
    );
    assert!(!e.hints().is_empty());
    // A failed start gives its slot back.
    assert_eq!(
        code(svc.start(request("nope")).await),
        ErrorCode::UserFacadeRunLimit
    );
    svc.cancel(&live, CancelReason::Requested).unwrap();
    assert_eq!(svc.wait(&live).await.unwrap().status, RunStatus::Cancelled);
    // Cancelling an ended run is a no-op.
    svc.cancel(&live, CancelReason::Requested).unwrap();
    let next = svc.start(request("w")).await.unwrap();
    assert_eq!(svc.wait(&next).await.unwrap().status, RunStatus::Success);
    // An unknown workflow fails the start and frees the slot again.
    assert_eq!(
        code(svc.start(request("nope")).await),
        ErrorCode::UserFacadeWorkflowNotFound
    );
    let again = svc.start(request("w")).await.unwrap();
    assert_eq!(svc.wait(&again).await.unwrap().status, RunStatus::Success);
}

#[tokio::test]
async fn a_finished_run_leaves_memory_after_its_ttl_and_stays_readable_from_the_store() {
    let store = Arc::new(MemStore::default());
    let exec = FakeExecutor::new().always("step", FakeCommand::ok(""));
    let (now, clock) = clock();
    let svc = RunManager::with_clock(
        services(
            FakeRepository::new().with(steps("w", 2)),
            exec,
            Some(Arc::clone(&store)),
        ),
        ServiceConfig {
            finished_ttl: Duration::from_secs(60),
            ..ServiceConfig::default()
        },
        clock,
    );
    store.save(&snapshot("old", StoredStatus::Failure)).unwrap();
    let id = svc.start(request("w")).await.unwrap();
    svc.wait(&id).await.unwrap();
    // The recorder would have written this state file.
    store.save(&snapshot(&id.0, StoredStatus::Success)).unwrap();
    let view = svc.get(&id).unwrap();
    assert_eq!(view.phase, RunPhase::Finished);
    assert_eq!(view.status, StoredStatus::Success);
    assert_eq!(view.workflow, "w");
    let listed: Vec<(String, RunPhase)> = svc
        .list()
        .unwrap()
        .into_iter()
        .map(|v| (v.run_id.0, v.phase))
        .collect();
    assert_eq!(
        listed,
        vec![
            (id.0.clone(), RunPhase::Finished),
            ("old".to_owned(), RunPhase::Recorded)
        ]
    );
    *crate::engine::lock(&now) += Duration::from_secs(59);
    assert!(svc.subscribe(&id, 1).is_ok(), "still in memory");
    *crate::engine::lock(&now) += Duration::from_secs(1);
    assert_eq!(
        code(svc.subscribe(&id, 1)),
        ErrorCode::UserFacadeRunNotFound
    );
    assert_eq!(code(svc.wait(&id).await), ErrorCode::UserFacadeRunNotFound);
    let view = svc.get(&id).unwrap();
    assert_eq!(view.phase, RunPhase::Recorded);
    assert_eq!(view.status, StoredStatus::Success);
    assert_eq!(
        code(svc.get(&RunId("unknown".into()))),
        ErrorCode::UserFacadeRunNotFound
    );
    assert_eq!(
        code(svc.cancel(&RunId("unknown".into()), CancelReason::Requested)),
        ErrorCode::UserFacadeRunNotFound
    );
}

#[tokio::test]
async fn a_request_is_answered_once_by_the_run_that_asked() {
    let exec = FakeExecutor::new().always("step", FakeCommand::ok(""));
    let svc = RunManager::new(
        services(FakeRepository::new().with(steps("w", 2)), exec, None),
        ServiceConfig::default(),
    );
    // Two live runs, each stopped at its own request.
    let one = svc.start(interactive("w", "s1")).await.unwrap();
    let two = svc.start(interactive("w", "s1")).await.unwrap();
    let (_, req_one) = until_breakpoint(&mut svc.subscribe(&one, 1).unwrap()).await;
    let (_, req_two) = until_breakpoint(&mut svc.subscribe(&two, 1).unwrap()).await;
    assert_ne!(req_one, req_two, "request ids are unique in the process");
    assert_eq!(
        code(svc.respond(&req_one, Answer::Option("allow".into()))),
        ErrorCode::UserFacadeInputRejected,
        "an approval answer does not fit a breakpoint"
    );
    svc.respond(&req_two, Answer::Decision(BreakpointDecision::Skip))
        .unwrap();
    svc.respond(&req_one, Answer::Decision(BreakpointDecision::Continue))
        .unwrap();
    assert_eq!(
        code(svc.respond(&req_one, Answer::Decision(BreakpointDecision::Continue))),
        ErrorCode::UserFacadeInputRejected,
        "answered already"
    );
    let r1 = svc.wait(&one).await.unwrap();
    let r2 = svc.wait(&two).await.unwrap();
    assert_eq!(r1.status, RunStatus::Success);
    assert!(r1.states.contains_key("s1"), "continued: s1 ran");
    assert_eq!(r2.status, RunStatus::Success);
    assert!(!r2.states.contains_key("s1"), "skipped: s1 did not run");
    assert_eq!(
        code(svc.respond("input-0", Answer::EndOfInput)),
        ErrorCode::UserFacadeInputRejected
    );
}

#[tokio::test]
async fn an_unanswered_request_times_out_and_a_cancel_resolves_one() {
    let exec = FakeExecutor::new().always("step", FakeCommand::ok(""));
    // An approval gate that waits 50 ms, with no decision on timeout.
    let mut wf = steps("w", 2);
    if let Some(s1) = wf.states.get_mut("s1") {
        s1.approval = Some(Approval {
            message: "go on?".into(),
            options: awf_domain::interaction::ApprovalOption::defaults(),
            timeout: Some(Duration::from_millis(50)),
            on_timeout: None,
        });
    }
    let svc = RunManager::new(
        services(FakeRepository::new().with(wf), exec, None),
        ServiceConfig::default(),
    );
    let id = svc.start(request("w")).await.unwrap();
    let (_, request) = until_breakpoint(&mut svc.subscribe(&id, 1).unwrap()).await;
    // Nobody answers: the gate times out, the step fails with its own code and is routed.
    let result = svc.wait(&id).await.unwrap();
    assert_eq!(result.status, RunStatus::Failure);
    assert_eq!(result.terminal.as_deref(), Some("failed"));
    assert!(
        result
            .states
            .get("s1")
            .and_then(|s| s.error.as_deref())
            .is_some_and(|e| e.contains("approval")),
        "{:?}",
        result.states.get("s1")
    );
    assert_eq!(
        code(svc.respond(&request, Answer::Decision(BreakpointDecision::Continue))),
        ErrorCode::UserFacadeInputRejected,
        "timed out already"
    );

    let exec = FakeExecutor::new().always("step", FakeCommand::ok(""));
    let svc = RunManager::new(
        services(FakeRepository::new().with(steps("w", 2)), exec, None),
        ServiceConfig::default(),
    );
    let id = svc.start(interactive("w", "s1")).await.unwrap();
    let (_, request) = until_breakpoint(&mut svc.subscribe(&id, 1).unwrap()).await;
    svc.cancel(&id, CancelReason::Interrupt).unwrap();
    let result = svc.wait(&id).await.unwrap();
    assert_eq!(result.status, RunStatus::Cancelled);
    assert_eq!(result.exit_code, 130);
    assert_eq!(
        code(svc.respond(&request, Answer::Decision(BreakpointDecision::Continue))),
        ErrorCode::UserFacadeInputRejected,
        "resolved by the cancel"
    );
}

#[tokio::test]
async fn a_run_live_in_this_process_cannot_be_resumed_beside_itself() {
    let exec = FakeExecutor::new().always("hang", FakeCommand::Hang);
    let svc = RunManager::new(
        services(
            FakeRepository::new().with(workflow("hangs", vec![cmd("h", "hang", "done")])),
            exec,
            Some(Arc::new(MemStore::default())),
        ),
        ServiceConfig::default(),
    );
    let id = svc.start(request("hangs")).await.unwrap();
    let mut sub = svc.subscribe(&id, 1).unwrap();
    while let Some(item) = sub.next().await {
        if matches!(&item, SubscriptionItem::Event { envelope, .. }
            if matches!(&envelope.event, RunEvent::StepStarted { step, .. } if step == "h"))
        {
            break;
        }
    }
    let e = svc
        .resume(awf_domain::ports::facade::ResumeRequest {
            run_id: id.0.clone(),
            working_dir: PathBuf::from("/"),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
    assert!(e.message().contains("still running"), "{}", e.message());
    let view = svc.get(&id).unwrap();
    assert_eq!(view.phase, RunPhase::Live);
    assert_eq!(view.status, StoredStatus::Running);
    assert_eq!(view.current_state.as_deref(), Some("h"));
    svc.cancel(&id, CancelReason::Terminate).unwrap();
    let result = svc.wait(&id).await.unwrap();
    assert_eq!(result.status, RunStatus::Cancelled);
    assert_eq!(result.exit_code, 143);
    assert_eq!(svc.get(&id).unwrap().exit_code, Some(143));
}

#[tokio::test]
async fn a_terminal_style_log_loses_nothing_and_keeps_only_what_is_unread() {
    let exec = FakeExecutor::new().always("step", FakeCommand::ok("one line of output\n"));
    let svc = RunManager::new(
        services(FakeRepository::new().with(steps("w", 1000)), exec, None),
        ServiceConfig {
            log_budget_bytes: 0,
            keep_unread: true,
            ..ServiceConfig::default()
        },
    );
    let id = svc.start(request("w")).await.unwrap();
    // Whatever ran before this subscription is kept for it.
    let mut sub = svc.subscribe(&id, 1).unwrap();
    svc.wait(&id).await.unwrap();
    assert_eq!(svc.log_footprint(&id).unwrap().1, 3002, "nothing read yet");
    let items = drain(&mut sub).await;
    assert_eq!(positions(&items), (1..=3002).collect::<Vec<_>>());
    assert_eq!(
        svc.log_footprint(&id).unwrap().1,
        1,
        "only the newest is left"
    );
}

#[tokio::test]
async fn the_service_holds_a_run_lock_until_the_run_ended() {
    let locks = awf_domain::ports::fakes::FakeRunLocks::default();
    let mut svcs = services(
        FakeRepository::new().with(steps("w", 3)),
        FakeExecutor::new().always("step", FakeCommand::ok("")),
        None,
    );
    svcs.run_locks = Some(Arc::new(locks.clone()));
    let svc = RunManager::new(svcs, ServiceConfig::default());
    let id = svc.start(request("w")).await.unwrap();
    assert_eq!(
        locks.held(),
        vec![id.0.clone()],
        "taken when the run starts"
    );
    assert_eq!(svc.wait(&id).await.unwrap().status, RunStatus::Success);
    // Released once the run's last event was taken in (the pump ends just after the end).
    for _ in 0..500 {
        if locks.held().is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the lock is still held: {:?}", locks.held());
}

#[tokio::test]
async fn a_run_that_succeeded_here_is_not_resumed_while_its_record_still_says_running() {
    let store = Arc::new(MemStore::default());
    let svc = RunManager::new(
        services(
            FakeRepository::new().with(steps("w", 2)),
            FakeExecutor::new().always("step", FakeCommand::ok("")),
            Some(Arc::clone(&store)),
        ),
        ServiceConfig::default(),
    );
    let id = svc.start(request("w")).await.unwrap();
    assert_eq!(svc.wait(&id).await.unwrap().status, RunStatus::Success);
    // The recorder has not written the end yet: the store still has the run as running.
    let mut stale = snapshot(&id.0, StoredStatus::Running);
    stale.current_state = "s1".into();
    store.save(&stale).unwrap();
    let e = svc
        .resume(awf_domain::ports::facade::ResumeRequest {
            run_id: id.0.clone(),
            working_dir: PathBuf::from("/"),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
    assert_eq!(
        e.message(),
        format!("run {id} already completed successfully; nothing to resume")
    );
}

/// A recorder that writes a run's end to the store only when flushed (as the store's writer
/// thread does, later than the engine's last event).
struct LateRecorder {
    store: Arc<MemStore>,
    queued: Mutex<Option<RunSnapshot>>,
}

impl awf_domain::event::EventPublisher for LateRecorder {
    fn emit(&self, event: awf_domain::event::EventEnvelope) {
        if let RunEvent::RunFinished { result } = &event.event
            && event.parent_run_id.is_none()
        {
            let mut s = snapshot(&event.run_id.0, stored_status_of(result.status));
            s.current_state = "s1".into();
            *crate::engine::lock(&self.queued) = Some(s);
        }
    }

    fn flush(&self) {
        if let Some(s) = crate::engine::lock(&self.queued).take() {
            self.store.save(&s).unwrap();
        }
    }
}

fn stored_status_of(s: RunStatus) -> StoredStatus {
    match s {
        RunStatus::Success => StoredStatus::Success,
        RunStatus::Failure => StoredStatus::Failure,
        RunStatus::Cancelled => StoredStatus::Cancelled,
    }
}

#[tokio::test]
async fn a_run_resumed_right_after_it_failed_here_waits_for_its_record_and_its_log_goes_on() {
    let store = Arc::new(MemStore::default());
    let mut svcs = services(
        FakeRepository::new().with(steps("w", 2)),
        FakeExecutor::new().on(
            "step",
            [
                FakeCommand::ok(""),
                FakeCommand::fail(1, "no"),
                FakeCommand::ok(""),
            ],
        ),
        Some(Arc::clone(&store)),
    );
    svcs.recorders = vec![Arc::new(LateRecorder {
        store: Arc::clone(&store),
        queued: Mutex::new(None),
    })];
    let svc = RunManager::new(svcs, ServiceConfig::default());
    let id = svc.start(request("w")).await.unwrap();
    assert_eq!(svc.wait(&id).await.unwrap().status, RunStatus::Failure);
    let first = drain(&mut svc.subscribe(&id, 1).unwrap()).await;
    let last = positions(&first).last().copied().unwrap();
    // The recorder writes only when flushed, and the service flushed it before it showed
    // the run's end: the record is there for the resume to read.
    assert!(store.load(&id.0).is_ok());
    svc.resume(awf_domain::ports::facade::ResumeRequest {
        run_id: id.0.clone(),
        working_dir: PathBuf::from("/"),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(svc.wait(&id).await.unwrap().status, RunStatus::Success);
    // The first attempt's events are still there, and the resumed attempt's follow them.
    let all = drain(&mut svc.subscribe(&id, 1).unwrap()).await;
    assert_eq!(&all[..first.len()], &first[..]);
    let next = drain(&mut svc.subscribe(&id, last + 1).unwrap()).await;
    assert_eq!(positions(&next)[0], last + 1);
    assert_eq!(all.len(), first.len() + next.len());
    match &next[0] {
        SubscriptionItem::Event { envelope, .. } => {
            assert!(
                matches!(envelope.event, RunEvent::RunStarted { .. }),
                "{envelope:?}"
            );
        }
        other => panic!("expected the resumed run's start, got {other:?}"),
    }
}

#[tokio::test]
async fn runs_resolve_by_a_unique_prefix_and_list_newest_first() {
    let svc = RunManager::new(
        services(
            FakeRepository::new().with(steps("w", 1)),
            FakeExecutor::new().always("step", FakeCommand::ok("")),
            None,
        ),
        ServiceConfig::default(),
    );
    let a = svc.start(request("w")).await.unwrap();
    svc.wait(&a).await.unwrap();
    let b = svc.start(request("w")).await.unwrap();
    svc.wait(&b).await.unwrap();
    let listed: Vec<RunId> = svc.list().unwrap().into_iter().map(|v| v.run_id).collect();
    assert_eq!(listed, vec![b.clone(), a.clone()]);
    assert_eq!(svc.resolve(&a.0).unwrap(), a);
    let common =
        a.0.chars()
            .zip(b.0.chars())
            .take_while(|(x, y)| x == y)
            .count();
    assert_eq!(svc.resolve(&a.0[..=common]).unwrap(), a);
    let e = svc.resolve(&a.0[..common]).unwrap_err();
    assert_eq!(e.code(), ErrorCode::UserInputValidationFailed, "{e}");
    assert!(
        e.hints()
            .iter()
            .any(|h| h.contains(&a.0) && h.contains(&b.0)),
        "{e:?}"
    );
    assert_eq!(
        code(svc.resolve("zzz-none")),
        ErrorCode::UserFacadeRunNotFound
    );
}

#[tokio::test]
async fn a_preassigned_run_id_is_kept_checked_and_never_reused() {
    let store = Arc::new(MemStore::default());
    store
        .0
        .lock()
        .unwrap()
        .push(snapshot("q-old", StoredStatus::Failure));
    let exec = FakeExecutor::new().always("step", FakeCommand::ok(""));
    let svc = RunManager::new(
        services(FakeRepository::new().with(steps("w", 1)), exec, Some(store)),
        ServiceConfig::default(),
    );
    let given = RunRequest {
        run_id: Some(RunId("q-1".into())),
        ..request("w")
    };
    let id = svc.start(given).await.unwrap();
    assert_eq!(id.0, "q-1");
    let result = svc.wait(&id).await.unwrap();
    assert_eq!(result.run_id, Some(RunId("q-1".into())));
    for bad in ["", "../x", ".hidden", "a b"] {
        let req = RunRequest {
            run_id: Some(RunId(bad.into())),
            ..request("w")
        };
        assert_eq!(
            code(svc.start(req).await),
            ErrorCode::UserInputValidationFailed,
            "{bad:?}"
        );
    }
    // A recorded run's id is refused: resume continues it, start never runs it again.
    let again = RunRequest {
        run_id: Some(RunId("q-old".into())),
        ..request("w")
    };
    let e = svc.start(again).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
    assert!(e.message().contains("recorded already"), "{}", e.message());
}

/// A step barrier the test opens: what a recorder whose writes lag behind the run (the
/// shared store) gives the engine.
struct Gate {
    /// A barrier is handed out and not released yet.
    held: Mutex<bool>,
    asked: tokio::sync::Notify,
    release: tokio::sync::Semaphore,
    /// Events emitted while a barrier held (their `type`).
    early: Mutex<Vec<String>>,
    settles: std::sync::atomic::AtomicUsize,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            held: Mutex::new(false),
            asked: tokio::sync::Notify::new(),
            release: tokio::sync::Semaphore::new(0),
            early: Mutex::new(Vec::new()),
            settles: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

struct GatedRecorder(Arc<Gate>);

impl awf_domain::event::EventPublisher for GatedRecorder {
    fn emit(&self, event: awf_domain::event::EventEnvelope) {
        if *crate::engine::lock(&self.0.held) {
            let kind = serde_json::to_value(&event.event).unwrap()["type"].to_string();
            crate::engine::lock(&self.0.early).push(kind);
        }
    }

    fn settle(&self) -> Option<awf_domain::event::Settle> {
        *crate::engine::lock(&self.0.held) = true;
        self.0
            .settles
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.0.asked.notify_one();
        let gate = Arc::clone(&self.0);
        Some(Box::pin(async move {
            gate.release.acquire().await.unwrap().forget();
            *crate::engine::lock(&gate.held) = false;
        }))
    }
}

/// A recorder whose `written` barrier holds until the gate is released (a store writer far
/// behind): `start` waits on it for the run's start to be on record.
struct WrittenGate(Arc<Gate>);

impl awf_domain::event::EventPublisher for WrittenGate {
    fn emit(&self, _event: awf_domain::event::EventEnvelope) {}

    fn written(&self) -> Option<awf_domain::event::Settle> {
        self.0.asked.notify_one();
        let gate = Arc::clone(&self.0);
        Some(Box::pin(async move {
            gate.release.acquire().await.unwrap().forget();
        }))
    }
}

/// A run whose start waits for its record holds one live slot, not two (its reserved slot
/// and its registered entry): with the cap at 2, a second run starts meanwhile (a worker's
/// next claim was refused with the cap not reached, given back and claimed again: CI,
/// `three_workers_execute_sixty_submitted_runs_exactly_once`, epoch 2).
#[tokio::test]
async fn a_start_waiting_for_its_record_counts_once_against_the_cap() {
    let gate = Arc::new(Gate::default());
    let mut svcs = services(
        FakeRepository::new().with(workflow("hangs", vec![cmd("h", "hang", "done")])),
        FakeExecutor::new().always("hang", FakeCommand::Hang),
        None,
    );
    svcs.recorders = vec![Arc::new(WrittenGate(Arc::clone(&gate)))];
    let svc = Arc::new(RunManager::new(
        svcs,
        ServiceConfig {
            max_live_runs: 2,
            ..ServiceConfig::default()
        },
    ));
    let first = {
        let svc = Arc::clone(&svc);
        tokio::spawn(async move { svc.start(request("hangs")).await })
    };
    tokio::time::timeout(Duration::from_secs(30), gate.asked.notified())
        .await
        .expect("the first start waits for its record");
    let second = {
        let svc = Arc::clone(&svc);
        tokio::spawn(async move { svc.start(request("hangs")).await })
    };
    let asked = tokio::time::timeout(Duration::from_secs(30), gate.asked.notified()).await;
    gate.release.add_permits(1000);
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    assert!(asked.is_ok(), "the second start was refused: {second:?}");
    let (first, second) = (first.unwrap(), second.unwrap());
    // Two live: the cap holds.
    assert_eq!(
        code(svc.start(request("hangs")).await),
        ErrorCode::UserFacadeRunLimit
    );
    for id in [first, second] {
        svc.cancel(&id, CancelReason::Requested).unwrap();
        assert_eq!(svc.wait(&id).await.unwrap().status, RunStatus::Cancelled);
    }
}

/// A recorder whose flush (a run's end) holds until released.
struct HeldFlush {
    asked: std::sync::mpsc::SyncSender<()>,
    release: Mutex<std::sync::mpsc::Receiver<()>>,
}

impl awf_domain::event::EventPublisher for HeldFlush {
    fn emit(&self, _event: awf_domain::event::EventEnvelope) {}

    fn flush(&self) {
        let _ = self.asked.try_send(());
        let _ = crate::engine::lock(&self.release).recv_timeout(Duration::from_secs(30));
    }
}

/// A run whose result is known counts no more against the cap while its record is
/// flushed (breaker: `awf serve --max-runs 5` answered 429 for 1 to 2 s after runs ended).
#[tokio::test]
async fn a_run_flushing_its_record_after_its_end_does_not_hold_a_live_slot() {
    let (asked_tx, asked) = std::sync::mpsc::sync_channel(8);
    let (release, release_rx) = std::sync::mpsc::channel();
    let mut svcs = services(
        FakeRepository::new().with(steps("w", 1)),
        FakeExecutor::new().always("step", FakeCommand::ok("")),
        None,
    );
    svcs.recorders = vec![Arc::new(HeldFlush {
        asked: asked_tx,
        release: Mutex::new(release_rx),
    })];
    let svc = RunManager::new(
        svcs,
        ServiceConfig {
            max_live_runs: 1,
            ..ServiceConfig::default()
        },
    );
    let first = svc.start(request("w")).await.unwrap();
    // Its end is being flushed: the flush holds.
    let waited = tokio::task::spawn_blocking(move || asked.recv_timeout(Duration::from_secs(30)));
    assert!(waited.await.unwrap().is_ok(), "the run's end is flushed");
    let second = svc.start(request("w")).await;
    for _ in 0..8 {
        let _ = release.send(());
    }
    let second = second.expect("the ended run's slot is free while its record is flushed");
    for id in [first, second] {
        assert_eq!(svc.wait(&id).await.unwrap().status, RunStatus::Success);
    }
}

/// Issue 15: with a store whose writes lag behind the run, nothing of a step runs before its
/// start (and so every earlier step's completion) is durable: a worker killed meanwhile
/// leaves the steps it went past recorded, and the run resumed elsewhere does not run them
/// again.
#[tokio::test]
async fn a_step_runs_only_once_its_start_and_the_steps_before_it_are_durable() {
    let gate = Arc::new(Gate::default());
    let mut svcs = services(
        FakeRepository::new().with(steps("w", 2)),
        FakeExecutor::new().always("step", FakeCommand::ok("")),
        None,
    );
    svcs.recorders = vec![Arc::new(GatedRecorder(Arc::clone(&gate)))];
    let svc = RunManager::new(svcs, ServiceConfig::default());
    let id = svc.start(request("w")).await.unwrap();
    for _ in 0..2 {
        tokio::time::timeout(Duration::from_secs(30), gate.asked.notified())
            .await
            .expect("the engine waits for the record before the step runs");
        // Whatever the engine would do without waiting, it does now.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        gate.release.add_permits(1);
    }
    assert_eq!(svc.wait(&id).await.unwrap().status, RunStatus::Success);
    assert_eq!(*crate::engine::lock(&gate.early), Vec::<String>::new());
    assert_eq!(
        gate.settles.load(std::sync::atomic::Ordering::Relaxed),
        2,
        "one barrier per step"
    );
}

/// A recorder that writes on its own thread, a while after each event (what the local
/// store's writer does under load): `written` holds the `type` of each event written.
struct LaggingRecorder {
    queue: Mutex<Option<std::sync::mpsc::Sender<String>>>,
    written: Arc<Mutex<Vec<String>>>,
    idle: Arc<(Mutex<usize>, std::sync::Condvar)>,
}

impl LaggingRecorder {
    fn new() -> Self {
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let written = Arc::new(Mutex::new(Vec::new()));
        let idle = Arc::new((Mutex::new(0usize), std::sync::Condvar::new()));
        let (w, i) = (Arc::clone(&written), Arc::clone(&idle));
        std::thread::spawn(move || {
            for kind in rx {
                std::thread::sleep(Duration::from_millis(20));
                crate::engine::lock(&w).push(kind);
                *crate::engine::lock(&i.0) -= 1;
                i.1.notify_all();
            }
        });
        Self {
            queue: Mutex::new(Some(tx)),
            written,
            idle,
        }
    }
}

impl awf_domain::event::EventPublisher for LaggingRecorder {
    fn emit(&self, event: awf_domain::event::EventEnvelope) {
        let kind = serde_json::to_value(&event.event).unwrap()["type"]
            .as_str()
            .unwrap()
            .to_owned();
        *crate::engine::lock(&self.idle.0) += 1;
        if let Some(q) = crate::engine::lock(&self.queue).as_ref() {
            q.send(kind).unwrap();
        }
    }

    fn flush(&self) {
        let mut pending = crate::engine::lock(&self.idle.0);
        while *pending > 0 {
            pending = self.idle.1.wait(pending).unwrap();
        }
    }

    fn written(&self) -> Option<awf_domain::event::Settle> {
        if *crate::engine::lock(&self.idle.0) == 0 {
            return None;
        }
        let idle = Arc::clone(&self.idle);
        Some(Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let mut pending = crate::engine::lock(&idle.0);
                while *pending > 0 {
                    pending = idle.1.wait(pending).unwrap();
                }
            })
            .await
            .unwrap();
        }))
    }
}

/// Breaker: `GET /api/history` right after the `POST` that started a run did not list it
/// (its record was written a few milliseconds later). `start` answers once the run's start
/// is written by every recorder.
#[tokio::test]
async fn start_answers_once_the_runs_start_is_written() {
    let recorder = Arc::new(LaggingRecorder::new());
    let written = Arc::clone(&recorder.written);
    let mut svcs = services(
        FakeRepository::new().with(steps("w", 1)),
        FakeExecutor::new().always("step", FakeCommand::ok("out\n")),
        None,
    );
    svcs.recorders = vec![recorder];
    let svc = RunManager::new(svcs, ServiceConfig::default());
    let id = svc.start(request("w")).await.unwrap();
    let recorded = crate::engine::lock(&written).clone();
    assert_eq!(
        recorded.first().map(String::as_str),
        Some("run_started"),
        "{recorded:?}"
    );
    assert_eq!(svc.wait(&id).await.unwrap().status, RunStatus::Success);
}

/// A subscriber that saw a run end finds the end in the store too: the service shows
/// `RunFinished` only after the recorders wrote it, so a server killed right after a client
/// saw the end does not leave the run half-recorded (CI: a replay after such a kill ended
/// at the last step's start).
#[tokio::test]
async fn a_run_is_shown_ended_only_once_its_recorders_wrote_the_end() {
    let recorder = Arc::new(LaggingRecorder::new());
    let written = Arc::clone(&recorder.written);
    let mut svcs = services(
        FakeRepository::new().with(steps("w", 3)),
        FakeExecutor::new().always("step", FakeCommand::ok("out\n")),
        None,
    );
    svcs.recorders = vec![recorder];
    let svc = RunManager::new(svcs, ServiceConfig::default());
    let id = svc.start(request("w")).await.unwrap();
    let mut sub = svc.subscribe(&id, 1).unwrap();
    let items = drain(&mut sub).await;
    let Some(SubscriptionItem::Event { envelope, .. }) = items.last() else {
        panic!("ends with an event: {items:?}");
    };
    assert!(matches!(envelope.event, RunEvent::RunFinished { .. }));
    let recorded = crate::engine::lock(&written).clone();
    assert_eq!(recorded.last().map(String::as_str), Some("run_finished"));
    assert_eq!(recorded.len(), items.len(), "{recorded:?}");
}

/// The 429's count reads right for one run and for more (it said "1 runs are live").
#[test]
fn the_live_run_count_is_pluralised() {
    assert_eq!(super::live_runs(1), "1 run is live");
    assert_eq!(super::live_runs(2), "2 runs are live");
    assert_eq!(super::live_runs(64), "64 runs are live");
}

/// A run stopped at a breakpoint is at the state it stopped before: its view's
/// `current_state` (what `GET /api/executions/{id}` says as `current_step`) named the state
/// that ran before it, the last that started.
#[tokio::test]
async fn a_run_at_a_breakpoint_is_at_the_state_it_stopped_before() {
    let exec = FakeExecutor::new().always("step", FakeCommand::ok(""));
    let svc = RunManager::new(
        services(FakeRepository::new().with(steps("w", 3)), exec, None),
        ServiceConfig::default(),
    );
    let id = svc.start(interactive("w", "s1")).await.unwrap();
    let (_, request) = until_breakpoint(&mut svc.subscribe(&id, 1).unwrap()).await;
    assert_eq!(svc.get(&id).unwrap().current_state.as_deref(), Some("s1"));
    svc.respond(&request, Answer::Decision(BreakpointDecision::Continue))
        .unwrap();
    let result = svc.wait(&id).await.unwrap();
    assert_eq!(result.status, RunStatus::Success);
}
