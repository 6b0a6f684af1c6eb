//! Engine tests over the scripted port fakes (no processes, no disk, no template engine).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use awf_domain::ErrorCode;
use awf_domain::event::EventEnvelope;
use awf_domain::event::RunEvent;
use awf_domain::interaction::Answer;
use awf_domain::ports::facade::RunRequest;
use awf_domain::ports::fakes::FakeAgent;
use awf_domain::ports::fakes::FakeAgents;
use awf_domain::ports::fakes::FakeCommand;
use awf_domain::ports::fakes::FakeExecutor;
use awf_domain::ports::fakes::FakeExpressions;
use awf_domain::ports::fakes::FakeRepository;
use awf_domain::run::CancelReason;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use awf_domain::run::StepStatus;
use awf_domain::workflow::*;
use indexmap::IndexMap;
use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::Facade;
use crate::Services;

fn state(name: &str, kind: StateKind) -> State {
    State::new(name, kind)
}

fn cmd(name: &str, command: &str, on_success: Option<&str>, on_failure: Option<&str>) -> State {
    let mut s = state(
        name,
        StateKind::Command(CommandStep {
            source: CommandSource::Inline(command.into()),
            dir: None,
        }),
    );
    s.on_success = on_success.map(Into::into);
    s.on_failure = on_failure.map(Into::into);
    s
}

fn terminal(name: &str, status: TerminalStatus) -> State {
    state(
        name,
        StateKind::Terminal(TerminalState {
            status,
            message: None,
            exit_code: None,
        }),
    )
}

fn workflow(id: &str, initial: &str, states: Vec<State>) -> Workflow {
    let mut map = IndexMap::new();
    for s in states {
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
        initial: initial.into(),
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

fn facade(repo: FakeRepository, exec: Arc<FakeExecutor>, exprs: FakeExpressions) -> Facade {
    facade_with_agents(repo, exec, exprs, FakeAgents::default())
}

fn facade_with_agents(
    repo: FakeRepository,
    exec: Arc<FakeExecutor>,
    exprs: FakeExpressions,
    agents: FakeAgents,
) -> Facade {
    Facade::new(Services {
        agents: Arc::new(agents),
        expressions: Arc::new(exprs),
        ..Services::fakes(repo, exec)
    })
}

fn request(id: &str, inputs: &[(&str, &str)]) -> RunRequest {
    RunRequest {
        identifier: id.into(),
        inputs: inputs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect(),
        working_dir: PathBuf::from("/"),
        ..RunRequest::default()
    }
}

/// Every event reads back from its JSON as it was (what a store that keeps events as rows
/// replays to a subscriber).
fn assert_round_trips(events: &[EventEnvelope]) {
    for e in events {
        let text = serde_json::to_string(e).expect("serializes");
        let back: EventEnvelope = serde_json::from_str(&text).expect("deserializes");
        assert_eq!(&back, e, "{text}");
    }
}

async fn run_all(f: &Facade, req: RunRequest) -> (Vec<EventEnvelope>, RunResult) {
    let mut h = f.start_run(req).await.expect("run starts");
    let mut events = Vec::new();
    while let Some(e) = h.next_event().await {
        events.push(e);
    }
    assert_round_trips(&events);
    let result = events
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            RunEvent::RunFinished { result } if e.parent_run_id.is_none() => {
                Some(result.as_ref().clone())
            }
            _ => None,
        })
        .expect("RunFinished");
    (events, result)
}

#[tokio::test]
async fn linear_success_and_event_stream_shape() {
    let wf = workflow(
        "w",
        "a",
        vec![
            cmd("a", "echo a", Some("b"), None),
            cmd("b", "echo b", Some("done"), None),
            terminal("done", TerminalStatus::Success),
        ],
    );
    let exec = Arc::new(
        FakeExecutor::new()
            .on("echo a", [FakeCommand::ok("a\n")])
            .on("echo b", [FakeCommand::ok("b\n")]),
    );
    let f = facade(
        FakeRepository::new().with(wf),
        Arc::clone(&exec),
        FakeExpressions::new(),
    );
    let (events, result) = run_all(&f, request("w", &[])).await;
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(result.exit_code, 0);
    assert_eq!(result.terminal.as_deref(), Some("done"));
    assert_eq!(result.states["b"].output, "b\n");
    assert_eq!(exec.commands(), vec!["echo a", "echo b"]);
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert!(matches!(
        events.first().map(|e| &e.event),
        Some(RunEvent::RunStarted { .. })
    ));
    assert!(matches!(
        events.last().map(|e| &e.event),
        Some(RunEvent::RunFinished { .. })
    ));
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| match &e.event {
            RunEvent::RunStarted { .. } => "run_started",
            RunEvent::StepStarted { .. } => "step_started",
            RunEvent::OutputChunk { .. } => "output",
            RunEvent::StepFinished { .. } => "step_finished",
            RunEvent::RunFinished { .. } => "run_finished",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            "run_started",
            "step_started",
            "output",
            "step_finished",
            "step_started",
            "output",
            "step_finished",
            "run_finished"
        ]
    );
}

#[tokio::test]
async fn unrouted_failure_is_command_failed_with_stderr() {
    let wf = workflow(
        "w",
        "a",
        vec![
            cmd("a", "boom", Some("done"), None),
            terminal("done", TerminalStatus::Success),
        ],
    );
    let exec = Arc::new(FakeExecutor::new().on("boom", [FakeCommand::fail(5, "bad things\n")]));
    let f = facade(FakeRepository::new().with(wf), exec, FakeExpressions::new());
    let (_, result) = run_all(&f, request("w", &[])).await;
    assert_eq!(result.status, RunStatus::Failure);
    assert_eq!(result.exit_code, 3);
    let err = result.error.expect("error");
    assert_eq!(err.code, ErrorCode::ExecutionCommandFailed);
    assert_eq!(err.message, "step a: bad things");
    assert_eq!(result.states["a"].exit_code, Some(5));
}

#[tokio::test]
async fn command_transitions_are_evaluated_on_failure_too() {
    let mut a = cmd("a", "check", None, Some("other"));
    a.transitions = vec![Transition {
        when: Some("states.a.ExitCode == 2".into()),
        goto: "two".into(),
    }];
    let wf = workflow(
        "w",
        "a",
        vec![
            a,
            cmd("two", "echo two", Some("done"), None),
            cmd("other", "echo other", Some("done"), None),
            terminal("done", TerminalStatus::Success),
        ],
    );
    let exec = Arc::new(
        FakeExecutor::new()
            .on("check", [FakeCommand::fail(2, "")])
            .on("echo two", [FakeCommand::ok("")]),
    );
    let exprs = FakeExpressions::new().on("states.a.ExitCode == 2", [true]);
    let f = facade(FakeRepository::new().with(wf), Arc::clone(&exec), exprs);
    let (_, result) = run_all(&f, request("w", &[])).await;
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(exec.commands(), vec!["check", "echo two"]);
}

#[tokio::test]
async fn continue_on_error_routes_to_on_success() {
    let mut a = cmd("a", "fails", Some("b"), Some("failed"));
    a.continue_on_error = true;
    let wf = workflow(
        "w",
        "a",
        vec![
            a,
            cmd("b", "echo b", Some("done"), None),
            terminal("done", TerminalStatus::Success),
            terminal("failed", TerminalStatus::Failure),
        ],
    );
    let exec = Arc::new(
        FakeExecutor::new()
            .on("fails", [FakeCommand::fail(1, "")])
            .on("echo b", [FakeCommand::ok("")]),
    );
    let f = facade(FakeRepository::new().with(wf), exec, FakeExpressions::new());
    let (_, result) = run_all(&f, request("w", &[])).await;
    assert_eq!(result.terminal.as_deref(), Some("done"));
    assert_eq!(result.states["a"].status, StepStatus::Failed);
}

#[tokio::test]
async fn retry_until_success_emits_retrying_events() {
    let mut a = cmd("a", "flaky", Some("done"), None);
    a.retry = Some(RetryPolicy {
        max_attempts: 5,
        initial_delay: Duration::from_millis(1),
        max_delay: None,
        backoff: Backoff::Exponential,
        multiplier: 2.0,
        jitter: 0.0,
        retryable_exit_codes: vec![],
    });
    let wf = workflow("w", "a", vec![a, terminal("done", TerminalStatus::Success)]);
    let exec = Arc::new(FakeExecutor::new().on(
        "flaky",
        [
            FakeCommand::fail(1, "x"),
            FakeCommand::fail(1, "y"),
            FakeCommand::ok("ok\n"),
        ],
    ));
    let f = facade(
        FakeRepository::new().with(wf),
        Arc::clone(&exec),
        FakeExpressions::new(),
    );
    let (events, result) = run_all(&f, request("w", &[])).await;
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(result.states["a"].attempts, 3);
    let retries: Vec<(u32, u64)> = events
        .iter()
        .filter_map(|e| match &e.event {
            RunEvent::StepRetrying {
                attempt, delay_ms, ..
            } => Some((*attempt, *delay_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(retries, vec![(2, 1), (3, 2)]);
}

/// The step's timeout covers all its attempts: an attempt that would start after it is not
/// announced as a retry, and the log says why the step stops (a new user saw `retrying
/// (attempt 3)` for an attempt that never came).
#[tokio::test]
async fn no_retry_is_announced_past_the_steps_timeout() {
    let mut a = cmd("a", "flaky", Some("done"), Some("failed"));
    a.timeout = Some(Duration::from_millis(100));
    a.retry = Some(RetryPolicy {
        max_attempts: 5,
        initial_delay: Duration::from_millis(200),
        max_delay: None,
        backoff: Backoff::Constant,
        multiplier: 2.0,
        jitter: 0.0,
        retryable_exit_codes: vec![],
    });
    let wf = workflow(
        "w",
        "a",
        vec![
            a,
            terminal("done", TerminalStatus::Success),
            terminal("failed", TerminalStatus::Failure),
        ],
    );
    let exec = Arc::new(FakeExecutor::new().on("flaky", [FakeCommand::fail(1, "")]));
    let f = facade(FakeRepository::new().with(wf), exec, FakeExpressions::new());
    let (events, result) = run_all(&f, request("w", &[])).await;
    assert_eq!(result.states["a"].attempts, 1);
    assert_eq!(result.terminal.as_deref(), Some("failed"));
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.event, RunEvent::StepRetrying { .. }))
    );
    assert!(events.iter().any(|e| matches!(&e.event, RunEvent::Log { message, .. }
        if message == "a: not retried: attempt 2 would start after the step's timeout (100ms) of all its attempts")));
}

#[tokio::test]
async fn retry_stops_on_a_non_retryable_exit_code() {
    let mut a = cmd("a", "flaky", Some("done"), Some("failed"));
    a.retry = Some(RetryPolicy {
        max_attempts: 5,
        initial_delay: Duration::ZERO,
        max_delay: None,
        backoff: Backoff::Constant,
        multiplier: 2.0,
        jitter: 0.0,
        retryable_exit_codes: vec![75],
    });
    let wf = workflow(
        "w",
        "a",
        vec![
            a,
            terminal("done", TerminalStatus::Success),
            terminal("failed", TerminalStatus::Failure),
        ],
    );
    let exec = Arc::new(FakeExecutor::new().on(
        "flaky",
        [FakeCommand::fail(75, ""), FakeCommand::fail(1, "")],
    ));
    let f = facade(FakeRepository::new().with(wf), exec, FakeExpressions::new());
    let (_, result) = run_all(&f, request("w", &[])).await;
    assert_eq!(result.states["a"].attempts, 2);
    assert_eq!(result.terminal.as_deref(), Some("failed"));
}

#[tokio::test]
async fn secrets_are_masked_in_chunks_states_and_errors() {
    let mut wf = workflow(
        "w",
        "a",
        vec![
            cmd("a", "leak {{.inputs.SECRET_TOKEN}}", Some("done"), None),
            terminal("done", TerminalStatus::Success),
        ],
    );
    wf.inputs = vec![InputDef {
        name: "SECRET_TOKEN".into(),
        ty: InputType::String,
        description: None,
        required: true,
        default: None,
        validation: InputValidation::default(),
    }];
    let exec = Arc::new(FakeExecutor::new().on(
        "leak abcdef123",
        [FakeCommand::fail(1, "auth abcdef123 rejected\n")],
    ));
    let f = facade(FakeRepository::new().with(wf), exec, FakeExpressions::new());
    let (events, result) = run_all(&f, request("w", &[("SECRET_TOKEN", "abcdef123")])).await;
    let all = serde_json::to_string(&events).expect("json");
    assert!(!all.contains("abcdef123"), "{all}");
    assert_eq!(result.states["a"].stderr, "auth *** rejected\n");
    assert_eq!(
        result.error.expect("error").message,
        "step a: auth *** rejected"
    );
}

/// A command step's `StepStarted` carries the command as it will run: interpolated, with
/// secrets masked (what an ACP `tool_call` shows as `rawInput`); other kinds carry none.
#[tokio::test]
async fn step_started_carries_the_rendered_masked_command() {
    let mut wf = workflow(
        "w",
        "a",
        vec![
            cmd(
                "a",
                "deploy {{.inputs.env}} --token {{.inputs.SECRET_TOKEN}}",
                Some("done"),
                None,
            ),
            terminal("done", TerminalStatus::Success),
        ],
    );
    let input = |name: &str| InputDef {
        name: name.into(),
        ty: InputType::String,
        description: None,
        required: true,
        default: None,
        validation: InputValidation::default(),
    };
    wf.inputs = vec![input("env"), input("SECRET_TOKEN")];
    let exec = Arc::new(
        FakeExecutor::new().on("deploy prod --token abcdef123", [FakeCommand::ok("ok\n")]),
    );
    let f = facade(FakeRepository::new().with(wf), exec, FakeExpressions::new());
    let (events, result) = run_all(
        &f,
        request("w", &[("env", "prod"), ("SECRET_TOKEN", "abcdef123")]),
    )
    .await;
    assert_eq!(result.status, RunStatus::Success);
    let commands: Vec<Option<String>> = events
        .iter()
        .filter_map(|e| match &e.event {
            RunEvent::StepStarted { command, .. } => Some(command.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(commands, vec![Some("deploy prod --token ***".to_owned())]);
}

/// Only declared inputs reach a command's environment: an undeclared one (`BASH_ENV` here)
/// is never exported (AWF exports every string input).
#[tokio::test]
async fn only_declared_inputs_are_exported_to_commands() {
    let mut wf = workflow(
        "w",
        "a",
        vec![
            cmd("a", "echo hi", Some("done"), None),
            terminal("done", TerminalStatus::Success),
        ],
    );
    wf.inputs = vec![InputDef {
        name: "env".into(),
        ty: InputType::String,
        description: None,
        required: true,
        default: None,
        validation: InputValidation::default(),
    }];
    let exec = Arc::new(FakeExecutor::new().on("echo hi", [FakeCommand::ok("hi\n")]));
    let f = facade(
        FakeRepository::new().with(wf),
        Arc::clone(&exec),
        FakeExpressions::new(),
    );
    let (_, result) = run_all(
        &f,
        request("w", &[("env", "prod"), ("BASH_ENV", "/tmp/evil.sh")]),
    )
    .await;
    assert_eq!(result.status, RunStatus::Success);
    let calls = exec.calls();
    assert_eq!(calls.len(), 1);
    assert!(
        calls[0]
            .env
            .contains(&("env".to_owned(), "prod".to_owned()))
    );
    assert!(
        !calls[0].env.iter().any(|(k, _)| k == "BASH_ENV"),
        "{:?}",
        calls[0].env
    );
}

#[tokio::test]
async fn all_succeed_cancels_running_branches_on_first_failure() {
    let p = state(
        "p",
        StateKind::Parallel(ParallelStep {
            branches: vec!["slow".into(), "bad".into()],
            strategy: ParallelStrategy::AllSucceed,
            max_concurrent: 0,
        }),
    );
    let mut p = p;
    p.on_success = Some("done".into());
    p.on_failure = Some("failed".into());
    let wf = workflow(
        "w",
        "p",
        vec![
            p,
            cmd("slow", "hang", None, None),
            cmd("bad", "bad", None, None),
            terminal("done", TerminalStatus::Success),
            terminal("failed", TerminalStatus::Failure),
        ],
    );
    let exec = Arc::new(
        FakeExecutor::new()
            .on("hang", [FakeCommand::Hang])
            .on("bad", [FakeCommand::fail(1, "nope")]),
    );
    let f = facade(FakeRepository::new().with(wf), exec, FakeExpressions::new());
    let (_, result) = run_all(&f, request("w", &[])).await;
    assert_eq!(result.terminal.as_deref(), Some("failed"));
    assert_eq!(result.states["slow"].status, StepStatus::Cancelled);
    assert_eq!(result.states["bad"].status, StepStatus::Failed);
    assert_eq!(result.states["p"].status, StepStatus::Failed);
}

#[tokio::test]
async fn for_each_runs_body_per_item_and_exits_early_to_an_outside_state() {
    let mut l = state(
        "l",
        StateKind::Loop(LoopStep {
            over: LoopOver::Items("[\"a\",\"b\",\"c\"]".into()),
            body: vec!["body".into()],
            max_iterations: MaxIterations::Static(10),
            break_when: None,
            on_complete: Some("done".into()),
        }),
    );
    l.on_failure = Some("failed".into());
    let mut body = cmd("body", "step {{.loop.Index}}", None, None);
    body.transitions = vec![Transition {
        when: Some("loop.Index == 1".into()),
        goto: "escape".into(),
    }];
    let wf = workflow(
        "w",
        "l",
        vec![
            l,
            body,
            cmd("escape", "echo out", Some("done"), None),
            terminal("done", TerminalStatus::Success),
            terminal("failed", TerminalStatus::Failure),
        ],
    );
    let exec = Arc::new(
        FakeExecutor::new()
            .on("step 0", [FakeCommand::ok("")])
            .on("step 1", [FakeCommand::ok("")])
            .on("echo out", [FakeCommand::ok("")]),
    );
    let exprs = FakeExpressions::new().on("loop.Index == 1", [false, true]);
    let f = facade(FakeRepository::new().with(wf), Arc::clone(&exec), exprs);
    let (_, result) = run_all(&f, request("w", &[])).await;
    assert_eq!(exec.commands(), vec!["step 0", "step 1", "echo out"]);
    assert_eq!(result.states["l"].output, "completed 2 iterations");
    assert_eq!(result.terminal.as_deref(), Some("done"));
}

#[tokio::test]
async fn circular_sub_workflow_call_is_a_hard_error() {
    let mut call = state(
        "call",
        StateKind::CallWorkflow(CallWorkflowStep {
            workflow: "w".into(),
            inputs: IndexMap::new(),
            outputs: IndexMap::new(),
        }),
    );
    call.on_success = Some("done".into());
    call.on_failure = Some("failed".into());
    let wf = workflow(
        "w",
        "call",
        vec![
            call,
            terminal("done", TerminalStatus::Success),
            terminal("failed", TerminalStatus::Failure),
        ],
    );
    let f = facade(
        FakeRepository::new().with(wf),
        Arc::new(FakeExecutor::new()),
        FakeExpressions::new(),
    );
    let (_, result) = run_all(&f, request("w", &[])).await;
    assert_eq!(
        result.terminal, None,
        "on_failure must not route a circular call"
    );
    assert_eq!(result.exit_code, 3);
    let err = result.error.expect("error");
    assert_eq!(err.code, ErrorCode::ExecutionCircularCall);
    assert!(
        err.message.contains("circular workflow call detected"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn cancel_ends_the_run_cancelled_and_runs_cancel_hooks() {
    let mut wf = workflow(
        "w",
        "a",
        vec![
            cmd("a", "hang", Some("done"), None),
            terminal("done", TerminalStatus::Success),
        ],
    );
    wf.hooks.workflow_cancel = vec![HookAction::Command("cleanup".into())];
    let exec = Arc::new(
        FakeExecutor::new()
            .on("hang", [FakeCommand::Hang])
            .on("cleanup", [FakeCommand::ok("")]),
    );
    let f = facade(
        FakeRepository::new().with(wf),
        Arc::clone(&exec),
        FakeExpressions::new(),
    );
    let mut h = f.start_run(request("w", &[])).await.expect("starts");
    let canceller = h.canceller();
    let mut result = None;
    while let Some(e) = h.next_event().await {
        match e.event {
            RunEvent::StepStarted { .. } => canceller.cancel(CancelReason::Terminate),
            RunEvent::RunFinished { result: r } => result = Some(*r),
            _ => {}
        }
    }
    let result = result.expect("finished");
    assert_eq!(result.status, RunStatus::Cancelled);
    assert_eq!(result.exit_code, 143);
    assert_eq!(exec.commands(), vec!["hang", "cleanup"]);
}

/// A cancel that lands as a step starts, before its body runs (here while its pre hook
/// runs; on a worker of the shared store, while the step's start is being recorded), records
/// the step cancelled with its `StepFinished`, as a cancel while the step runs does. It used
/// to leave the step's `StepStarted` without a `StepFinished` and `states` empty.
#[tokio::test]
async fn a_cancel_before_the_steps_body_runs_records_the_step_cancelled() {
    let mut a = cmd("a", "body", Some("done"), None);
    a.hooks.pre = vec![HookAction::Command("hold".into())];
    let wf = workflow("w", "a", vec![a, terminal("done", TerminalStatus::Success)]);
    let exec = Arc::new(
        // The body is never asked for (the fake panics on an unused answer).
        FakeExecutor::new().on("hold", [FakeCommand::Hang]),
    );
    let f = facade(
        FakeRepository::new().with(wf),
        Arc::clone(&exec),
        FakeExpressions::new(),
    );
    let mut h = f.start_run(request("w", &[])).await.expect("starts");
    let canceller = h.canceller();
    let mut kinds = Vec::new();
    let mut finished = None;
    let mut result = None;
    while let Some(e) = h.next_event().await {
        match e.event {
            RunEvent::StepStarted { .. } => {
                kinds.push("step_started");
                canceller.cancel(CancelReason::Requested);
            }
            RunEvent::StepFinished { state, .. } => {
                kinds.push("step_finished");
                finished = Some(*state);
            }
            RunEvent::RunFinished { result: r } => {
                kinds.push("run_finished");
                result = Some(*r);
            }
            _ => {}
        }
    }
    assert_eq!(kinds, vec!["step_started", "step_finished", "run_finished"]);
    let finished = finished.expect("step finished");
    assert_eq!(finished.status, StepStatus::Cancelled);
    assert_eq!(finished.error_code, Some(ErrorCode::ExecutionRunCancelled));
    let result = result.expect("finished");
    assert_eq!(result.status, RunStatus::Cancelled);
    assert_eq!(result.states["a"].status, StepStatus::Cancelled);
    assert_eq!(exec.commands(), vec!["hold"]);
}

#[tokio::test]
async fn bad_inputs_fail_before_the_run_starts() {
    let mut wf = workflow(
        "w",
        "a",
        vec![
            cmd("a", "x", Some("done"), None),
            terminal("done", TerminalStatus::Success),
        ],
    );
    wf.inputs = vec![InputDef {
        name: "n".into(),
        ty: InputType::Integer,
        description: None,
        required: true,
        default: None,
        validation: InputValidation::default(),
    }];
    let f = facade(
        FakeRepository::new().with(wf),
        Arc::new(FakeExecutor::new()),
        FakeExpressions::new(),
    );
    let e = f
        .start_run(request("w", &[("n", "seven")]))
        .await
        .expect_err("must fail");
    assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
    assert_eq!(
        e.message(),
        "input validation failed: inputs.n: cannot convert \"seven\" to integer (a whole number in decimal, e.g. 42 or -7)"
    );
    let e = f
        .start_run(request("missing", &[]))
        .await
        .expect_err("must fail");
    assert_eq!(e.code(), ErrorCode::UserFacadeWorkflowNotFound);
}

// ---- agent steps ---------------------------------------------------------------------------

fn agent(
    name: &str,
    provider: &str,
    prompt: &str,
    on_success: Option<&str>,
    on_failure: Option<&str>,
) -> State {
    let mut s = state(
        name,
        StateKind::Agent(AgentStep {
            provider: provider.into(),
            prompt: Some(prompt.into()),
            prompt_file: None,
            mode: "single".into(),
            system_prompt: None,
            role: None,
            skills: vec![],
            options: IndexMap::new(),
            output_format: None,
            conversation: None,
            mcp_proxy: None,
            policy: Default::default(),
        }),
    );
    s.on_success = on_success.map(Into::into);
    s.on_failure = on_failure.map(Into::into);
    s
}

fn agent_step(s: &mut State) -> &mut AgentStep {
    match &mut s.kind {
        StateKind::Agent(a) => a,
        _ => panic!("not an agent"),
    }
}

#[tokio::test]
async fn agent_step_streams_chunks_and_records_output_tokens_and_json() {
    let mut a = agent(
        "review",
        "claude",
        "review {{.inputs.file}}",
        Some("done"),
        Some("failed"),
    );
    {
        let s = agent_step(&mut a);
        s.output_format = Some("json".into());
        s.system_prompt = Some("be terse".into());
        s.options
            .insert("model".into(), Value::String("{{.inputs.model}}".into()));
    }
    let wf = workflow(
        "w",
        "review",
        vec![
            a,
            terminal("done", TerminalStatus::Success),
            terminal("failed", TerminalStatus::Failure),
        ],
    );
    let claude = Arc::new(FakeAgent::new("claude").answer("```json\n{\"verdict\":\"ok\"}\n```"));
    let agents = FakeAgents::default().with(claude.clone());
    let f = facade_with_agents(
        FakeRepository::new().with(wf),
        Arc::new(FakeExecutor::new()),
        FakeExpressions::new(),
        agents,
    );
    let (events, result) = run_all(&f, request("w", &[("file", "a.rs"), ("model", "haiku")])).await;
    assert_eq!(
        result.terminal.as_deref(),
        Some("done"),
        "{:?}",
        result.error
    );
    assert_eq!(result.states["review"].output, "{\"verdict\":\"ok\"}");
    assert_eq!(
        result.states["review"].json,
        Some(serde_json::json!({"verdict": "ok"}))
    );
    assert_eq!(result.states["review"].tokens.map(|t| t.total), Some(15));
    let call = &claude.calls()[0];
    assert_eq!(call.prompt, "review a.rs");
    assert_eq!(call.system_prompt.as_deref(), Some("be terse"));
    assert_eq!(call.options["model"], Value::String("haiku".into()));
    assert_eq!(call.options["output_format"], Value::String("json".into()));
    assert!(
        events.iter().any(
            |e| matches!(&e.event, RunEvent::AgentMessageChunk { step, .. } if step == "review")
        )
    );
}

#[tokio::test]
async fn invalid_json_output_fails_the_step_and_routes_on_failure() {
    let mut a = agent("review", "claude", "x", Some("done"), Some("failed"));
    agent_step(&mut a).output_format = Some("json".into());
    let wf = workflow(
        "w",
        "review",
        vec![
            a,
            terminal("done", TerminalStatus::Success),
            terminal("failed", TerminalStatus::Failure),
        ],
    );
    let agents =
        FakeAgents::default().with(Arc::new(FakeAgent::new("claude").answer("sorry, no json")));
    let f = facade_with_agents(
        FakeRepository::new().with(wf),
        Arc::new(FakeExecutor::new()),
        FakeExpressions::new(),
        agents,
    );
    let (_, result) = run_all(&f, request("w", &[])).await;
    assert_eq!(result.terminal.as_deref(), Some("failed"));
    let err = result.states["review"].error.clone().unwrap_or_default();
    assert!(
        err.starts_with("step review: output format processing: invalid JSON"),
        "{err}"
    );
}

#[tokio::test]
async fn a_failed_agent_keeps_its_partial_output_for_the_failure_route() {
    let a = agent("loop", "claude", "x", Some("done"), Some("failed"));
    let wf = workflow(
        "w",
        "loop",
        vec![
            a,
            terminal("done", TerminalStatus::Success),
            terminal("failed", TerminalStatus::Failure),
        ],
    );
    let guard =
        awf_domain::AwfError::new(ErrorCode::UserMcpProxyInfiniteLoopGuard, "too many rounds")
            .with_detail("partial_output", "half an answer");
    let agents = FakeAgents::default().with(Arc::new(FakeAgent::new("claude").fail(guard)));
    let f = facade_with_agents(
        FakeRepository::new().with(wf),
        Arc::new(FakeExecutor::new()),
        FakeExpressions::new(),
        agents,
    );
    let (_, result) = run_all(&f, request("w", &[])).await;
    assert_eq!(result.terminal.as_deref(), Some("failed"));
    let st = &result.states["loop"];
    assert_eq!(st.status, StepStatus::Failed);
    assert_eq!(st.output.to_string(), "half an answer");
}

#[tokio::test]
async fn continue_from_resumes_the_earlier_session() {
    let mut first = agent("first", "claude", "remember ZEBRA", Some("second"), None);
    agent_step(&mut first).conversation = Some(ConversationConfig::default());
    let mut second = agent("second", "claude", "what word?", Some("done"), None);
    agent_step(&mut second).conversation = Some(ConversationConfig {
        continue_from: Some("first".into()),
        inject_context: None,
    });
    let wf = workflow(
        "w",
        "first",
        vec![first, second, terminal("done", TerminalStatus::Success)],
    );
    let claude = Arc::new(FakeAgent::new("claude").answer("ok").answer("ZEBRA"));
    let f = facade_with_agents(
        FakeRepository::new().with(wf),
        Arc::new(FakeExecutor::new()),
        FakeExpressions::new(),
        FakeAgents::default().with(claude.clone()),
    );
    let (_, result) = run_all(&f, request("w", &[])).await;
    assert_eq!(result.status, RunStatus::Success, "{:?}", result.error);
    let calls = claude.calls();
    assert_eq!(
        calls[0].session,
        Some(awf_domain::ports::agent::AgentSession::default())
    );
    let resumed = calls[1].session.clone().expect("session");
    assert_eq!(resumed.session_id.as_deref(), Some("fake-session-1"));
    assert_eq!(resumed.turns.len(), 2);
    assert_eq!(resumed.turns[0].content, "remember ZEBRA");
}

#[tokio::test]
async fn retry_applies_to_agent_steps() {
    let mut a = agent("ask", "claude", "x", Some("done"), None);
    a.retry = Some(RetryPolicy {
        max_attempts: 3,
        initial_delay: Duration::ZERO,
        max_delay: None,
        backoff: Backoff::Constant,
        multiplier: 2.0,
        jitter: 0.0,
        retryable_exit_codes: vec![],
    });
    let wf = workflow(
        "w",
        "ask",
        vec![a, terminal("done", TerminalStatus::Success)],
    );
    let claude = Arc::new(
        FakeAgent::new("claude")
            .fail(awf_domain::AwfError::new(
                ErrorCode::ExecutionAgentServerError,
                "server error (HTTP 500)",
            ))
            .answer("fine"),
    );
    let f = facade_with_agents(
        FakeRepository::new().with(wf),
        Arc::new(FakeExecutor::new()),
        FakeExpressions::new(),
        FakeAgents::default().with(claude.clone()),
    );
    let (_, result) = run_all(&f, request("w", &[])).await;
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(result.states["ask"].attempts, 2);
}

#[tokio::test]
async fn unknown_provider_is_a_user_error_with_a_hint() {
    let wf = workflow(
        "w",
        "ask",
        vec![
            agent("ask", "claud", "x", Some("done"), None),
            terminal("done", TerminalStatus::Success),
        ],
    );
    let f = facade(
        FakeRepository::new().with(wf),
        Arc::new(FakeExecutor::new()),
        FakeExpressions::new(),
    );
    let (_, result) = run_all(&f, request("w", &[])).await;
    let err = result.error.expect("error");
    assert_eq!(err.code, ErrorCode::UserAgentUnknownProvider);
    assert_eq!(err.message, "step ask: provider \"claud\" not found");
    assert_eq!(
        err.hints,
        vec![
            "did you mean 'claude'?".to_owned(),
            format!(
                "known providers: {}",
                awf_domain::workflow::AGENT_PROVIDERS.join(", ")
            ),
        ]
    );
    assert_eq!(result.exit_code, 1);
}

#[tokio::test]
async fn conversation_mode_takes_turns_until_an_empty_line() {
    let mut chat = agent("chat", "claude", "hello", Some("done"), None);
    agent_step(&mut chat).mode = "conversation".into();
    let wf = workflow(
        "w",
        "chat",
        vec![chat, terminal("done", TerminalStatus::Success)],
    );
    let claude = Arc::new(FakeAgent::new("claude").answer("hi 1").answer("hi 2"));
    let f = facade_with_agents(
        FakeRepository::new().with(wf),
        Arc::new(FakeExecutor::new()),
        FakeExpressions::new(),
        FakeAgents::default().with(claude.clone()),
    );
    let mut h = f.start_run(request("w", &[])).await.expect("starts");
    let mut answers = vec![Some(String::new()), Some("tell me more".to_owned())];
    let mut result = None;
    while let Some(e) = h.next_event().await {
        match e.event {
            RunEvent::InteractionRequired { request } => {
                let answer = match answers.pop().flatten() {
                    Some(v) => Answer::Value(v),
                    None => Answer::EndOfInput,
                };
                h.respond(&request.request_id, answer)
                    .expect("answer accepted");
            }
            RunEvent::RunFinished { result: r } => result = Some(*r),
            _ => {}
        }
    }
    let result = result.expect("finished");
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(result.states["chat"].output, "hi 2");
    let prompts: Vec<String> = claude.calls().into_iter().map(|c| c.prompt).collect();
    assert_eq!(prompts, vec!["hello", "tell me more"]);
    assert!(h.respond("input-99", Answer::EndOfInput).is_err());
}

#[tokio::test]
async fn mocked_agent_step_does_not_call_the_provider() {
    let wf = workflow(
        "w",
        "ask",
        vec![
            agent("ask", "claude", "x", Some("done"), None),
            terminal("done", TerminalStatus::Success),
        ],
    );
    // No answer scripted: a call would panic the fake.
    let claude = Arc::new(FakeAgent::new("claude"));
    let f = facade_with_agents(
        FakeRepository::new().with(wf),
        Arc::new(FakeExecutor::new()),
        FakeExpressions::new(),
        FakeAgents::default().with(claude.clone()),
    );
    let mut req = request("w", &[]);
    req.mocks.insert(
        "ask".into(),
        [("output".to_owned(), "mocked".to_owned())]
            .into_iter()
            .collect(),
    );
    let (_, result) = run_all(&f, req).await;
    assert_eq!(result.states["ask"].output, "mocked");
    assert!(claude.calls().is_empty());
}

// ---- the fakes fail loudly ------------------------------------------------------------------

fn spec(command: &str) -> awf_domain::ports::exec::CommandSpec {
    awf_domain::ports::exec::CommandSpec {
        program: awf_domain::ports::exec::Program::Shell(command.to_owned()),
        dir: None,
        env: Vec::new(),
        timeout: None,
        capture_limit: None,
        scope: None,
    }
}

#[tokio::test]
#[should_panic(expected = "FakeExecutor: \"echo a\" called more often than scripted")]
async fn a_fake_command_called_more_often_than_scripted_panics() {
    use awf_domain::ports::CommandExecutor;
    let exec = FakeExecutor::new().on("echo a", [FakeCommand::ok("a\n")]);
    let token = tokio_util::sync::CancellationToken::new();
    let first = exec.run(spec("echo a"), None, token.clone()).await.unwrap();
    assert_eq!(first.stdout, "a\n");
    let _ = exec.run(spec("echo a"), None, token).await;
}

#[test]
#[should_panic(expected = "FakeExecutor: scripted answers never asked for")]
fn an_unused_fake_command_answer_panics_when_the_fake_is_dropped() {
    drop(FakeExecutor::new().on("echo a", [FakeCommand::ok(""), FakeCommand::ok("")]));
}

#[test]
#[should_panic(expected = "FakeExpressions: \"x\" evaluated more often than scripted")]
fn a_fake_expression_evaluated_more_often_than_scripted_panics() {
    use awf_domain::ports::ExpressionEvaluator;
    let exprs = FakeExpressions::new().on("x", [true]);
    let inputs = serde_json::Map::new();
    let states = std::collections::BTreeMap::new();
    let info = awf_domain::scope::WorkflowInfo {
        id: "r".into(),
        name: "w".into(),
        current_state: "s".into(),
        started_at: std::time::UNIX_EPOCH,
        duration: std::time::Duration::ZERO,
    };
    let env = std::collections::BTreeMap::new();
    let runtime = awf_domain::scope::RuntimeInfo::default();
    let awf = std::collections::BTreeMap::new();
    let scope = awf_domain::scope::Scope {
        inputs: &inputs,
        states: &states,
        workflow: &info,
        env: &env,
        context: &runtime,
        awf: &awf,
        loop_frame: None,
        error: None,
        workflow_dir: std::path::Path::new("/"),
    };
    assert!(exprs.eval_bool("x", &scope).unwrap());
    let _ = exprs.eval_bool("x", &scope);
}

#[test]
#[should_panic(expected = "FakeAgent claude: 1 scripted answer(s) never asked for")]
fn an_unused_fake_agent_answer_panics_when_the_fake_is_dropped() {
    drop(FakeAgent::new("claude").answer("never"));
}

#[tokio::test]
async fn an_engine_that_runs_a_step_twice_fails_against_a_once_scripted_fake() {
    // A workflow that runs `echo a` twice, scripted for one call: the run must not pass
    // silently with a repeated answer.
    let wf = workflow(
        "w",
        "a",
        vec![
            cmd("a", "echo a", Some("again"), None),
            cmd("again", "echo a", Some("done"), None),
            terminal("done", TerminalStatus::Success),
        ],
    );
    let exec = Arc::new(FakeExecutor::new().on("echo a", [FakeCommand::ok("a\n")]));
    let f = facade(
        FakeRepository::new().with(wf),
        Arc::clone(&exec),
        FakeExpressions::new(),
    );
    let mut h = f.start_run(request("w", &[])).await.expect("run starts");
    let mut finished = None;
    while let Some(e) = h.next_event().await {
        if let RunEvent::RunFinished { result } = e.event {
            finished = Some(result);
        }
    }
    // The fake panicked on the second call: the run never finished (it used to succeed with
    // the first answer repeated).
    assert_eq!(finished, None);
    assert_eq!(exec.commands(), ["echo a", "echo a"]);
}

// ---- resume ---------------------------------------------------------------------------------

#[derive(Default)]
struct MemStore(std::sync::Mutex<BTreeMap<String, awf_domain::ports::store::RunSnapshot>>);

impl awf_domain::ports::StateStore for MemStore {
    fn load(
        &self,
        run_id: &str,
    ) -> Result<awf_domain::ports::store::RunSnapshot, awf_domain::AwfError> {
        self.0.lock().unwrap().get(run_id).cloned().ok_or_else(|| {
            awf_domain::AwfError::new(ErrorCode::UserInputValidationFailed, "no such run")
        })
    }
    fn list(&self) -> Result<Vec<awf_domain::ports::store::RunSnapshot>, awf_domain::AwfError> {
        Ok(self.0.lock().unwrap().values().cloned().collect())
    }
    fn save(&self, s: &awf_domain::ports::store::RunSnapshot) -> Result<(), awf_domain::AwfError> {
        self.0.lock().unwrap().insert(s.run_id.clone(), s.clone());
        Ok(())
    }
}

fn snapshot(
    states: &[(&str, StepStatus, u64)],
    current: &str,
    inputs: serde_json::Map<String, Value>,
) -> awf_domain::ports::store::RunSnapshot {
    let t0 = std::time::UNIX_EPOCH + Duration::from_secs(1_000);
    awf_domain::ports::store::RunSnapshot {
        schema_version: 1,
        run_id: "run-1".into(),
        parent_run_id: None,
        workflow: "w".into(),
        workflow_name: "w".into(),
        workflow_path: None,
        status: awf_domain::ports::store::StoredStatus::Failure,
        current_state: current.into(),
        inputs,
        states: states
            .iter()
            .map(|(n, st, at)| {
                let mut s = awf_domain::run::StepState::running(n, t0);
                s.status = *st;
                s.completed_at = Some(t0 + Duration::from_secs(*at));
                s.output = format!("{n} before\n").into();
                ((*n).to_owned(), s)
            })
            .collect(),
        started_at: t0,
        updated_at: t0,
        completed_at: None,
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

fn resume_facade(exec: Arc<FakeExecutor>, store: Arc<MemStore>, wf: Workflow) -> Facade {
    Facade::new(Services {
        state_store: Some(store),
        ..Services::fakes(FakeRepository::new().with(wf), exec)
    })
}

fn resume_request(
    from: awf_domain::ports::facade::ResumeFrom,
    inputs: &[(&str, &str)],
) -> awf_domain::ports::facade::ResumeRequest {
    awf_domain::ports::facade::ResumeRequest {
        run_id: "run-1".into(),
        from,
        inputs: inputs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect(),
        working_dir: PathBuf::from("/"),
        ..Default::default()
    }
}

async fn drain(mut h: crate::RunHandle) -> (Vec<EventEnvelope>, RunResult) {
    let mut events = Vec::new();
    while let Some(e) = h.next_event().await {
        events.push(e);
    }
    assert_round_trips(&events);
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

fn three_steps() -> Workflow {
    workflow(
        "w",
        "a",
        vec![
            cmd("a", "step a", Some("b"), None),
            cmd("b", "step b", Some("c"), None),
            cmd("c", "step c", Some("done"), None),
            terminal("done", TerminalStatus::Success),
        ],
    )
}

#[tokio::test]
async fn resume_restarts_at_the_failed_state_without_rerunning_earlier_ones() {
    let exec = Arc::new(
        FakeExecutor::new()
            .on("step b", [FakeCommand::ok("b\n")])
            .on("step c", [FakeCommand::ok("c\n")]),
    );
    let store = Arc::new(MemStore::default());
    store.0.lock().unwrap().insert(
        "run-1".into(),
        snapshot(
            &[
                ("a", StepStatus::Completed, 1),
                ("b", StepStatus::Failed, 2),
            ],
            "b",
            serde_json::Map::new(),
        ),
    );
    let f = resume_facade(Arc::clone(&exec), store, three_steps());
    let h = f
        .resume_run(resume_request(
            awf_domain::ports::facade::ResumeFrom::Current,
            &[],
        ))
        .await
        .expect("resumes");
    let (events, result) = drain(h).await;
    assert_eq!(exec.commands(), vec!["step b", "step c"]);
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(result.run_id.map(|r| r.0), Some("run-1".to_owned()));
    assert_eq!(result.states["a"].output, "a before\n");
    assert!(
        matches!(&events[0].event, RunEvent::RunStarted { resumed_from: Some(s), .. } if s == "b")
    );
}

#[tokio::test]
async fn resume_goes_on_after_the_current_state_when_it_had_completed() {
    // Killed after b finished and before c started: b is the current state, recorded as
    // completed. It must not run again (found by a breaker: `echo >> log` ran twice).
    let exec = Arc::new(FakeExecutor::new().on("step c", [FakeCommand::ok("c\n")]));
    let store = Arc::new(MemStore::default());
    let mut snap = snapshot(
        &[
            ("a", StepStatus::Completed, 1),
            ("b", StepStatus::Completed, 2),
        ],
        "b",
        serde_json::Map::new(),
    );
    snap.status = awf_domain::ports::store::StoredStatus::Running;
    store.0.lock().unwrap().insert("run-1".into(), snap);
    let f = resume_facade(Arc::clone(&exec), Arc::clone(&store), three_steps());
    let h = f
        .resume_run(resume_request(
            awf_domain::ports::facade::ResumeFrom::Current,
            &[],
        ))
        .await
        .expect("resumes");
    let (events, result) = drain(h).await;
    assert_eq!(exec.commands(), vec!["step c"]);
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(result.states["b"].output, "b before\n");
    assert!(events.iter().any(|e| matches!(&e.event,
        RunEvent::Log { message, .. } if message == "b completed before the resume; going on to c")));
    // `--from b` asks for b again.
    let exec = Arc::new(
        FakeExecutor::new()
            .on("step b", [FakeCommand::ok("b\n")])
            .on("step c", [FakeCommand::ok("c\n")]),
    );
    let mut snap = snapshot(
        &[
            ("a", StepStatus::Completed, 1),
            ("b", StepStatus::Completed, 2),
        ],
        "b",
        serde_json::Map::new(),
    );
    snap.status = awf_domain::ports::store::StoredStatus::Running;
    store.0.lock().unwrap().insert("run-1".into(), snap);
    let f = resume_facade(Arc::clone(&exec), store, three_steps());
    let h = f
        .resume_run(resume_request(
            awf_domain::ports::facade::ResumeFrom::Step("b".into()),
            &[],
        ))
        .await
        .expect("resumes");
    let (_, result) = drain(h).await;
    assert_eq!(exec.commands(), vec!["step b", "step c"]);
    assert_eq!(result.status, RunStatus::Success);
}

#[tokio::test]
async fn resume_routes_a_completed_current_state_by_its_recorded_result() {
    let mut a = cmd("a", "check", Some("other"), None);
    a.transitions = vec![Transition {
        when: Some("states.a.Output == 'a before\\n'".into()),
        goto: "two".into(),
    }];
    let wf = workflow(
        "w",
        "a",
        vec![
            a,
            cmd("two", "echo two", Some("done"), None),
            cmd("other", "echo other", Some("done"), None),
            terminal("done", TerminalStatus::Success),
        ],
    );
    let exec = Arc::new(FakeExecutor::new().on("echo two", [FakeCommand::ok("two\n")]));
    let store = Arc::new(MemStore::default());
    store.0.lock().unwrap().insert(
        "run-1".into(),
        snapshot(
            &[("a", StepStatus::Completed, 1)],
            "a",
            serde_json::Map::new(),
        ),
    );
    // The transition is evaluated (it goes to `two`, not on_success's `other`); the CLI test
    // `resume_after_a_kill_between_steps_runs_no_completed_step_again` checks real values.
    let f = Facade::new(Services {
        state_store: Some(store),
        expressions: Arc::new(
            FakeExpressions::new().on("states.a.Output == 'a before\\n'", [true]),
        ),
        ..Services::fakes(FakeRepository::new().with(wf), exec.clone())
    });
    let h = f
        .resume_run(resume_request(
            awf_domain::ports::facade::ResumeFrom::Current,
            &[],
        ))
        .await
        .expect("resumes");
    let (_, result) = drain(h).await;
    assert_eq!(exec.commands(), vec!["echo two"]);
    assert_eq!(result.status, RunStatus::Success);
}

#[tokio::test]
async fn resume_from_a_step_forgets_what_completed_after_it() {
    let exec = Arc::new(
        FakeExecutor::new()
            .on("step a", [FakeCommand::ok("a\n")])
            .on("step b", [FakeCommand::ok("b\n")])
            .on("step c", [FakeCommand::ok("c\n")]),
    );
    let store = Arc::new(MemStore::default());
    store.0.lock().unwrap().insert(
        "run-1".into(),
        snapshot(
            &[
                ("a", StepStatus::Completed, 1),
                ("b", StepStatus::Completed, 2),
                ("c", StepStatus::Failed, 3),
            ],
            "c",
            serde_json::Map::new(),
        ),
    );
    let f = resume_facade(Arc::clone(&exec), Arc::clone(&store), three_steps());
    let h = f
        .resume_run(resume_request(
            awf_domain::ports::facade::ResumeFrom::Step("a".into()),
            &[],
        ))
        .await
        .expect("resumes");
    let (_, result) = drain(h).await;
    assert_eq!(exec.commands(), vec!["step a", "step b", "step c"]);
    assert_eq!(result.status, RunStatus::Success);
    let e = f
        .resume_run(resume_request(
            awf_domain::ports::facade::ResumeFrom::Step("nope".into()),
            &[],
        ))
        .await
        .expect_err("unknown step");
    assert_eq!(e.message(), "state not found in workflow w: nope");
    // No near name: the hint lists what `--from` takes (a new user got no hint at all).
    let e = f
        .resume_run(resume_request(
            awf_domain::ports::facade::ResumeFrom::Step("zzzzzzzz".into()),
            &[],
        ))
        .await
        .expect_err("unknown step");
    assert_eq!(
        e.hints(),
        ["--from takes `current`, `previous` or one of its states: a, b, c"]
    );
    // A terminal runs nothing: resuming there would mark the failed run as done.
    let e = f
        .resume_run(resume_request(
            awf_domain::ports::facade::ResumeFrom::Step("done".into()),
            &[],
        ))
        .await
        .expect_err("a terminal is refused");
    assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
    assert_eq!(
        e.message(),
        "cannot resume from done: it is a terminal state of workflow w, which runs nothing"
    );
}

#[tokio::test]
async fn resume_asks_for_masked_secrets_again() {
    let mut wf = three_steps();
    wf.inputs = vec![InputDef {
        name: "API_TOKEN".into(),
        ty: InputType::String,
        description: None,
        required: true,
        default: None,
        validation: InputValidation::default(),
    }];
    let store = Arc::new(MemStore::default());
    let mut inputs = serde_json::Map::new();
    inputs.insert("API_TOKEN".into(), Value::String("***".into()));
    store.0.lock().unwrap().insert(
        "run-1".into(),
        snapshot(&[("a", StepStatus::Failed, 1)], "a", inputs),
    );
    let exec = Arc::new(
        FakeExecutor::new()
            .on("step a", [FakeCommand::ok("")])
            .on("step b", [FakeCommand::ok("")])
            .on("step c", [FakeCommand::ok("")]),
    );
    let f = resume_facade(Arc::clone(&exec), store, wf);
    let e = f
        .resume_run(resume_request(
            awf_domain::ports::facade::ResumeFrom::Current,
            &[],
        ))
        .await
        .expect_err("secret missing");
    assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
    assert_eq!(
        e.message(),
        "secret inputs were not stored with the run and must be given again: API_TOKEN"
    );
    let h = f
        .resume_run(resume_request(
            awf_domain::ports::facade::ResumeFrom::Current,
            &[("API_TOKEN", "tok-12345")],
        ))
        .await
        .expect("resumes with the secret");
    let (_, result) = drain(h).await;
    assert_eq!(result.status, RunStatus::Success);
    let env = &exec.calls()[0].env;
    assert!(
        env.contains(&("API_TOKEN".to_owned(), "tok-12345".to_owned())),
        "{env:?}"
    );
}

#[tokio::test]
async fn agent_text_is_masked_across_chunk_boundaries_and_at_its_end() {
    let wf = workflow(
        "w",
        "ask",
        vec![
            agent("ask", "claude", "x", Some("done"), None),
            terminal("done", TerminalStatus::Success),
        ],
    );
    let secret = "sk-abcdefgh12345";
    for (answer, chunk) in [
        (format!("key: {secret} done"), 3),
        (format!("key: {secret} done"), 7),
        // The answer stops half-way through the secret.
        ("key: sk-abcdefg".to_owned(), 4),
    ] {
        let agents = FakeAgents::default().with(Arc::new(
            FakeAgent::new("claude").answer(&answer).chunked(chunk),
        ));
        let f = facade_with_agents(
            FakeRepository::new().with(wf.clone()),
            Arc::new(FakeExecutor::new()),
            FakeExpressions::new(),
            agents,
        );
        let mut req = request("w", &[]);
        req.env = vec![("OPENAI_API_KEY".into(), secret.into())];
        let (events, _) = run_all(&f, req).await;
        let streamed: String = events
            .iter()
            .filter_map(|e| match &e.event {
                RunEvent::AgentMessageChunk { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert!(!streamed.contains("sk-a"), "{chunk}: {streamed}");
        assert!(streamed.starts_with("key: ***"), "{chunk}: {streamed}");
    }
}

/// AWF (Go) checks `break_when` before the iteration's error: a failed iteration after
/// which it holds ends the loop normally (breaker: awf failed the loop).
#[tokio::test]
async fn break_when_holding_after_a_failed_iteration_completes_the_loop() {
    let mut l = state(
        "l",
        StateKind::Loop(LoopStep {
            over: LoopOver::Items("[1,2,3]".into()),
            body: vec!["b1".into()],
            max_iterations: MaxIterations::Static(0),
            break_when: Some("states.b1.ExitCode != 0".into()),
            on_complete: Some("done".into()),
        }),
    );
    l.on_failure = Some("failed".into());
    let wf = workflow(
        "w",
        "l",
        vec![
            l,
            cmd("b1", "item {{.loop.Index}}", Some("l"), None),
            terminal("done", TerminalStatus::Success),
            terminal("failed", TerminalStatus::Failure),
        ],
    );
    let exec = Arc::new(
        FakeExecutor::new()
            .on("item 0", [FakeCommand::ok("")])
            .on("item 1", [FakeCommand::fail(1, "")]),
    );
    let exprs = FakeExpressions::new().on("states.b1.ExitCode != 0", [false, true]);
    let f = facade(FakeRepository::new().with(wf), Arc::clone(&exec), exprs);
    let (_, result) = run_all(&f, request("w", &[])).await;
    assert_eq!(exec.commands(), vec!["item 0", "item 1"]);
    assert_eq!(result.terminal.as_deref(), Some("done"));
    assert_eq!(result.states["l"].status, StepStatus::Completed);
    assert_eq!(result.states["l"].output, "completed 2 iterations");
}

/// `continue_on_error` treats a failure as a success: without `on_success` there is no next
/// state (`EXECUTION.WORKFLOW.NO_ROUTE`), and `on_failure` is not taken, as in AWF (Go)
/// (breaker: awf went to `on_failure`).
#[tokio::test]
async fn continue_on_error_without_on_success_is_no_route() {
    let mut a = cmd("a", "fails", None, Some("failed"));
    a.continue_on_error = true;
    let wf = workflow(
        "w",
        "a",
        vec![
            a,
            terminal("done", TerminalStatus::Success),
            terminal("failed", TerminalStatus::Success),
        ],
    );
    let exec = Arc::new(FakeExecutor::new().on("fails", [FakeCommand::fail(1, "")]));
    let f = facade(FakeRepository::new().with(wf), exec, FakeExpressions::new());
    let (_, result) = run_all(&f, request("w", &[])).await;
    assert_eq!(result.terminal, None);
    assert_eq!(result.exit_code, 3);
    assert_eq!(
        result.error.as_ref().map(|e| e.code),
        Some(ErrorCode::ExecutionNoRoute)
    );
}

/// A loop's body state `--from` is refused, naming the loop to resume from, as a parallel
/// branch is (new user: it ran outside its loop, `undefined variable: loop`); the states
/// `--from` takes leave the body out. Nothing runs.
#[tokio::test]
async fn resume_from_a_loop_body_state_is_refused_with_its_loop() {
    let wf = workflow(
        "w",
        "a",
        vec![
            cmd("a", "step a", Some("l"), None),
            state(
                "l",
                StateKind::Loop(LoopStep {
                    over: LoopOver::Items("[1,2]".into()),
                    body: vec!["work".into()],
                    max_iterations: MaxIterations::Static(0),
                    break_when: None,
                    on_complete: Some("done".into()),
                }),
            ),
            cmd("work", "item {{.loop.Index}}", None, None),
            terminal("done", TerminalStatus::Success),
        ],
    );
    let exec = Arc::new(FakeExecutor::new());
    let store = Arc::new(MemStore::default());
    store.0.lock().unwrap().insert(
        "run-1".into(),
        snapshot(
            &[
                ("a", StepStatus::Completed, 1),
                ("l", StepStatus::Failed, 2),
            ],
            "l",
            serde_json::Map::new(),
        ),
    );
    let f = resume_facade(Arc::clone(&exec), store, wf);
    let from = |s: &str| awf_domain::ports::facade::ResumeFrom::Step(s.into());
    let e = f
        .resume_run(resume_request(from("work"), &[]))
        .await
        .expect_err("a body state is refused");
    assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
    assert_eq!(
        e.message(),
        "cannot resume from work: it is in the body of the loop state l, which runs it and routes on"
    );
    assert_eq!(e.hints(), ["resume from the loop state l instead"]);
    let e = f
        .resume_run(resume_request(from("zzzzzzzz"), &[]))
        .await
        .expect_err("unknown step");
    assert_eq!(
        e.hints(),
        ["--from takes `current`, `previous` or one of its states: a, l"]
    );
    assert!(exec.commands().is_empty());
}

/// An input given again that the workflow does not declare is warned about when the run
/// resumes, as `awf run` warns (it said nothing); a remote front-end's resume is refused it
/// (`USER.INPUT.VALIDATION_FAILED`) before anything runs.
#[tokio::test]
async fn resume_warns_of_or_refuses_an_undeclared_input() {
    let exec = Arc::new(
        FakeExecutor::new()
            .on("step b", [FakeCommand::ok("b\n")])
            .on("step c", [FakeCommand::ok("c\n")]),
    );
    let store = Arc::new(MemStore::default());
    store.0.lock().unwrap().insert(
        "run-1".into(),
        snapshot(
            &[
                ("a", StepStatus::Completed, 1),
                ("b", StepStatus::Failed, 2),
            ],
            "b",
            serde_json::Map::new(),
        ),
    );
    let f = resume_facade(Arc::clone(&exec), store, three_steps());
    let mut refused = resume_request(
        awf_domain::ports::facade::ResumeFrom::Current,
        &[("zz", "1")],
    );
    refused.refuse_undeclared_inputs = true;
    let e = f.resume_run(refused).await.expect_err("refused");
    assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
    assert_eq!(e.message(), "input 'zz' is not declared by workflow 'w'");
    assert!(exec.commands().is_empty());
    let h = f
        .resume_run(resume_request(
            awf_domain::ports::facade::ResumeFrom::Current,
            &[("zz", "1")],
        ))
        .await
        .expect("resumes");
    let (events, result) = drain(h).await;
    assert_eq!(result.status, RunStatus::Success);
    let warns: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.event {
            RunEvent::Log {
                level: awf_domain::event::LogLevel::Warn,
                message,
                ..
            } => Some(message.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        warns,
        [
            "input 'zz' is not declared by workflow 'w'; nothing uses it: templates may read only declared inputs and commands get only those as environment variables"
        ]
    );
}

/// Runs `wf` (named `w`, no inputs) with every command of `commands` succeeding with no
/// output; gives the executor (the commands it ran) and the result.
async fn run_ok(
    wf: Workflow,
    commands: &[&str],
    exprs: FakeExpressions,
) -> (Arc<FakeExecutor>, RunResult) {
    let mut exec = FakeExecutor::new();
    for c in commands {
        exec = exec.on(c, [FakeCommand::ok("")]);
    }
    let exec = Arc::new(exec);
    let f = facade(FakeRepository::new().with(wf), Arc::clone(&exec), exprs);
    let (_, result) = run_all(&f, request("w", &[])).await;
    (exec, result)
}

fn for_each(name: &str, items: &str, body: &[&str], on_complete: Option<&str>) -> State {
    state(
        name,
        StateKind::Loop(LoopStep {
            over: LoopOver::Items(items.into()),
            body: body.iter().map(|b| (*b).into()).collect(),
            max_iterations: MaxIterations::Static(0),
            break_when: None,
            on_complete: on_complete.map(Into::into),
        }),
    )
}

/// A loop in another loop's body runs all its iterations for each outer item; its
/// on_complete naming a later state of the outer body goes on there, and the outer loop's
/// `.loop` is its own again after the inner loop (`.loop.Parent` inside it).
#[tokio::test]
async fn a_nested_loop_runs_per_outer_item_and_its_on_complete_goes_on_in_the_outer_body() {
    let wf = workflow(
        "w",
        "outer",
        vec![
            for_each(
                "outer",
                "[\"a\",\"b\"]",
                &["pre", "inner", "post"],
                Some("done"),
            ),
            cmd("pre", "pre {{.loop.Item}}", Some("outer"), None),
            for_each("inner", "[\"1\",\"2\"]", &["show"], Some("post")),
            cmd(
                "show",
                "show {{.loop.Parent.Item}}-{{.loop.Item}} {{.loop.Parent.Index}}.{{.loop.Index}}",
                Some("inner"),
                None,
            ),
            cmd(
                "post",
                "post {{.loop.Item}} {{.loop.Index}}",
                Some("outer"),
                None,
            ),
            terminal("done", TerminalStatus::Success),
        ],
    );
    let (exec, result) = run_ok(
        wf,
        &[
            "pre a",
            "show a-1 0.0",
            "show a-2 0.1",
            "post a 0",
            "pre b",
            "show b-1 1.0",
            "show b-2 1.1",
            "post b 1",
        ],
        FakeExpressions::new(),
    )
    .await;
    assert_eq!(
        exec.commands(),
        vec![
            "pre a",
            "show a-1 0.0",
            "show a-2 0.1",
            "post a 0",
            "pre b",
            "show b-1 1.0",
            "show b-2 1.1",
            "post b 1",
        ]
    );
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(result.terminal.as_deref(), Some("done"));
    assert_eq!(result.states["outer"].output, "completed 2 iterations");
    assert_eq!(result.states["inner"].output, "completed 2 iterations");
}

/// A loop in another loop's body without on_complete goes on with that body when it
/// completes, as in AWF (Go): its on_success, awf's way out for a loop without
/// on_complete elsewhere, is not taken there (breaker: it left the outer loop in its first
/// iteration).
#[tokio::test]
async fn a_nested_while_loop_without_on_complete_goes_on_with_the_outer_body() {
    let mut inner = state(
        "inner",
        StateKind::Loop(LoopStep {
            over: LoopOver::While("loop.Index < 2".into()),
            body: vec!["show".into()],
            max_iterations: MaxIterations::Static(0),
            break_when: None,
            on_complete: None,
        }),
    );
    inner.on_success = Some("fin".into());
    let wf = workflow(
        "w",
        "outer",
        vec![
            for_each("outer", "[\"a\",\"b\"]", &["inner"], Some("done")),
            inner,
            cmd(
                "show",
                "show {{.loop.Parent.Item}} {{.loop.Index}}",
                Some("inner"),
                None,
            ),
            cmd("fin", "fin", Some("done"), None),
            terminal("done", TerminalStatus::Success),
        ],
    );
    let exprs = FakeExpressions::new().on("loop.Index < 2", [true, true, false, true, true, false]);
    let (exec, result) = run_ok(wf, &["show a 0", "show a 1", "show b 0", "show b 1"], exprs).await;
    assert_eq!(
        exec.commands(),
        vec!["show a 0", "show a 1", "show b 0", "show b 1"]
    );
    assert_eq!(result.terminal.as_deref(), Some("done"));
    assert_eq!(result.states["outer"].output, "completed 2 iterations");
    assert!(!result.states.contains_key("fin"));
}

/// A nested loop's on_complete naming a state outside the outer loop's body leaves the
/// outer loop there, in its first iteration, as any body step's route out of the body does
/// in AWF (Go) (`awf validate` warns about it: `validate::nested_loop_routes`).
#[tokio::test]
async fn a_nested_loops_on_complete_outside_the_outer_body_ends_the_outer_loop_there() {
    let wf = workflow(
        "w",
        "outer",
        vec![
            for_each("outer", "[\"a\",\"b\"]", &["inner"], Some("done")),
            for_each("inner", "[\"1\",\"2\"]", &["show"], Some("fin")),
            cmd(
                "show",
                "show {{.loop.Parent.Item}}-{{.loop.Item}}",
                Some("inner"),
                None,
            ),
            cmd("fin", "fin", Some("done"), None),
            terminal("done", TerminalStatus::Success),
        ],
    );
    let (exec, result) = run_ok(wf, &["show a-1", "show a-2", "fin"], FakeExpressions::new()).await;
    assert_eq!(exec.commands(), vec!["show a-1", "show a-2", "fin"]);
    assert_eq!(result.terminal.as_deref(), Some("done"));
    assert_eq!(result.states["outer"].output, "completed 1 iterations");
}

#[path = "run_dir_tests.rs"]
mod run_dir;
