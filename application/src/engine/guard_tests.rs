//! The engine's depth guard, driven directly (validation bypassed): a parallel block or loop
//! that contains itself must end the run cleanly instead of recursing until the stack
//! overflows.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;

use awf_domain::ErrorCode;
use awf_domain::event::EventEnvelope;
use awf_domain::event::EventPublisher;
use awf_domain::event::RunEvent;
use awf_domain::mask::Masker;
use awf_domain::ports::fakes::FakeCommand;
use awf_domain::ports::fakes::FakeExecutor;
use awf_domain::ports::fakes::FakeRepository;
use awf_domain::run::RunId;
use awf_domain::run::RunStatus;
use awf_domain::scope::RuntimeInfo;
use awf_domain::workflow::*;
use indexmap::IndexMap;

use super::CancelState;
use super::Interaction;
use super::Run;
use super::RunSpec;
use crate::Services;

#[derive(Default)]
struct Collect(Mutex<Vec<EventEnvelope>>);

impl EventPublisher for Collect {
    fn emit(&self, event: EventEnvelope) {
        if let Ok(mut v) = self.0.lock() {
            v.push(event);
        }
    }
}

fn state(name: &str, kind: StateKind) -> State {
    State::new(name, kind)
}

fn parallel(name: &str, branches: &[&str], next: Option<&str>) -> State {
    let mut s = state(
        name,
        StateKind::Parallel(ParallelStep {
            branches: branches.iter().map(|b| (*b).to_owned()).collect(),
            strategy: ParallelStrategy::AllSucceed,
            max_concurrent: 0,
        }),
    );
    s.on_success = next.map(str::to_owned);
    s
}

fn workflow(initial: &str, states: Vec<State>) -> Workflow {
    let mut map = IndexMap::new();
    for s in states {
        map.insert(s.name.clone(), s);
    }
    Workflow {
        name: "cyclic".into(),
        version: None,
        description: None,
        author: None,
        tags: vec![],
        inputs: vec![],
        env: vec![],
        initial: initial.into(),
        states: map,
        hooks: WorkflowHooks::default(),
        outputs: vec![],
        shell_quote: false,
        budget: None,
        source: WorkflowSource {
            identifier: "cyclic".into(),
            path: None,
            dir: PathBuf::from("/"),
        },
    }
}

/// Runs `wf` without any validation and returns the run's status, error code and the
/// commands the executor was asked to run.
async fn run_unvalidated(wf: Workflow) -> (RunStatus, Option<ErrorCode>, Vec<String>) {
    let exec = Arc::new(FakeExecutor::new().always("work", FakeCommand::ok("done")));
    let services = Arc::new(Services {
        ..Services::fakes(FakeRepository::new(), Arc::clone(&exec) as _)
    });
    let sink = Arc::new(Collect::default());
    let call_stack = vec![super::call::identity(
        &wf,
        &awf_domain::ports::fakes::FakeHost::default(),
    )];
    let run = Run::new(RunSpec {
        services,
        workflow: Arc::new(wf),
        run_id: RunId("guard".into()),
        parent_run_id: None,
        scope: None,
        inputs: serde_json::Map::new(),
        env: Arc::new(BTreeMap::new()),
        runtime: Arc::new(RuntimeInfo::default()),
        working_dir: PathBuf::from("/"),
        sink: Arc::clone(&sink) as _,
        cancel: CancelState::default(),
        call_stack,
        inherited_secrets: Masker::default(),
        warnings: vec![],
        mocks: Arc::new(BTreeMap::new()),
        interaction: Arc::new(Interaction::new("guard")),
        resume: None,
        first_started_at: None,
        resume_loop: Vec::new(),
        interactive: None,
        only_step: None,
        ask_inputs: None,
        auto_approve: false,
        mcp_servers: Arc::default(),
        fs_delegate: None,
        spend: Arc::default(),
        outer_budgets: Vec::new(),
        shown_as: None,
        shell_checked: Arc::default(),
    });
    let result = run.execute().await;
    let finished = sink
        .0
        .lock()
        .map(|v| {
            v.iter()
                .filter(|e| matches!(e.event, RunEvent::RunFinished { .. }))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(finished, 1, "the run ends with exactly one RunFinished");
    (
        result.status,
        result.error.as_ref().map(|e| e.code),
        exec.commands(),
    )
}

#[tokio::test]
async fn a_parallel_listing_itself_fails_cleanly_without_running_anything() {
    let wf = workflow(
        "p",
        vec![
            parallel("p", &["slow", "p"], Some("done")),
            state(
                "slow",
                StateKind::Command(CommandStep {
                    source: CommandSource::Inline("work".into()),
                    dir: None,
                }),
            ),
            state(
                "done",
                StateKind::Terminal(TerminalState {
                    status: TerminalStatus::Success,
                    message: None,
                    exit_code: None,
                }),
            ),
        ],
    );
    let (status, code, commands) = run_unvalidated(wf).await;
    assert_eq!(status, RunStatus::Failure);
    assert_eq!(code, Some(ErrorCode::WorkflowValidationCycleDetected));
    assert!(commands.is_empty(), "nothing ran: {commands:?}");
}

#[tokio::test]
async fn mutually_containing_blocks_and_loops_fail_cleanly() {
    let body_loop = state(
        "l",
        StateKind::Loop(LoopStep {
            over: LoopOver::Items("[1]".into()),
            body: vec!["p2".into()],
            max_iterations: MaxIterations::Static(0),
            break_when: None,
            on_complete: None,
        }),
    );
    let wf = workflow(
        "p1",
        vec![
            parallel("p1", &["p2"], Some("done")),
            parallel("p2", &["l"], None),
            body_loop,
            state(
                "done",
                StateKind::Terminal(TerminalState {
                    status: TerminalStatus::Success,
                    message: None,
                    exit_code: None,
                }),
            ),
        ],
    );
    let (status, code, _) = run_unvalidated(wf).await;
    assert_eq!(status, RunStatus::Failure);
    assert_eq!(code, Some(ErrorCode::WorkflowValidationCycleDetected));
}

/// The time `workflow_cancel` hooks get counts from the cancel (breaker: a step that took
/// 6 s to stop left the hooks their full 10 s, 16 s after the cancel): what is left of
/// the 10 s, at least 1 s; the whole 10 s without a recorded cancel.
#[test]
fn cancel_hooks_get_what_is_left_of_the_limit_since_the_cancel() {
    use std::time::Duration;
    let clock = Arc::new(awf_domain::ports::fakes::FakeClock::default());
    let state = CancelState {
        clock: Some(Arc::clone(&clock) as Arc<dyn awf_domain::ports::Clock>),
        ..CancelState::default()
    };
    assert_eq!(state.hooks_budget(), super::CANCEL_HOOKS_TIMEOUT);
    state.cancel(awf_domain::run::CancelReason::Requested);
    assert_eq!(state.hooks_budget(), Duration::from_secs(10));
    clock.advance(Duration::from_secs(7));
    assert_eq!(state.hooks_budget(), Duration::from_secs(3));
    clock.advance(Duration::from_secs(2));
    assert_eq!(state.hooks_budget(), Duration::from_secs(1));
    clock.advance(Duration::from_secs(51));
    assert_eq!(state.hooks_budget(), Duration::from_secs(1));
    // A second cancel keeps the first one's time.
    state.cancel(awf_domain::run::CancelReason::Requested);
    assert_eq!(state.hooks_budget(), Duration::from_secs(1));
    // Without a clock (a state made without services), the hooks get the whole limit.
    let bare = CancelState::default();
    bare.cancel(awf_domain::run::CancelReason::Requested);
    assert_eq!(bare.hooks_budget(), super::CANCEL_HOOKS_TIMEOUT);
}
