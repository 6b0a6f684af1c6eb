//! Typed interactions over the port fakes: approval gates (allowed, rejected, remembered,
//! timed out, cancelled, routed), wrong-kind answers, missing inputs asked before the run
//! starts, breakpoint decisions.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use awf_domain::ErrorCode;
use awf_domain::event::EventEnvelope;
use awf_domain::event::RunEvent;
use awf_domain::interaction::Answer;
use awf_domain::interaction::ApprovalKind;
use awf_domain::interaction::ApprovalOption;
use awf_domain::interaction::BreakpointDecision;
use awf_domain::interaction::InteractionRequest;
use awf_domain::interaction::RequestKind;
use awf_domain::interaction::Resolution;
use awf_domain::ports::facade::RunRequest;
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

use crate::Facade;
use crate::RunHandle;
use crate::Services;

fn cmd(name: &str, command: &str, on_success: Option<&str>) -> State {
    let mut s = State::new(
        name,
        StateKind::Command(CommandStep {
            source: CommandSource::Inline(command.into()),
            dir: None,
        }),
    );
    s.on_success = on_success.map(Into::into);
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

fn gate(
    options: Vec<ApprovalOption>,
    timeout: Option<Duration>,
    on_timeout: Option<&str>,
) -> Approval {
    Approval {
        message: "Deploy now?".into(),
        options,
        timeout,
        on_timeout: on_timeout.map(Into::into),
    }
}

fn option(id: &str, kind: ApprovalKind) -> ApprovalOption {
    ApprovalOption {
        id: id.into(),
        name: id.into(),
        kind,
    }
}

fn workflow(states: Vec<State>) -> Workflow {
    let initial = states[0].name.clone();
    let mut map = IndexMap::new();
    for s in states {
        map.insert(s.name.clone(), s);
    }
    Workflow {
        name: "w".into(),
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
            identifier: "w".into(),
            path: None,
            dir: PathBuf::from("/"),
        },
    }
}

fn facade(wf: Workflow, exec: Arc<FakeExecutor>, exprs: FakeExpressions) -> Facade {
    Facade::new(Services {
        expressions: Arc::new(exprs),
        ..Services::fakes(FakeRepository::new().with(wf), exec)
    })
}

fn request() -> RunRequest {
    RunRequest {
        identifier: "w".into(),
        working_dir: PathBuf::from("/"),
        ..RunRequest::default()
    }
}

/// Drives a run to its end, answering each request with `answer` (called with the request
/// and the handle, so it can also try wrong answers first).
async fn drive(
    mut h: RunHandle,
    mut answer: impl FnMut(&InteractionRequest, &RunHandle),
) -> (Vec<EventEnvelope>, Option<RunResult>, RunHandle) {
    let mut events = Vec::new();
    let mut result = None;
    while let Some(e) = h.next_event().await {
        match &e.event {
            RunEvent::InteractionRequired { request } => answer(request, &h),
            RunEvent::RunFinished { result: r } if e.parent_run_id.is_none() => {
                result = Some(r.as_ref().clone());
            }
            _ => {}
        }
        events.push(e);
    }
    (events, result, h)
}

fn requests(events: &[EventEnvelope]) -> Vec<InteractionRequest> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            RunEvent::InteractionRequired { request } => Some(request.as_ref().clone()),
            _ => None,
        })
        .collect()
}

fn resolutions(events: &[EventEnvelope]) -> Vec<(String, Resolution)> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            RunEvent::InteractionResolved {
                request_id,
                resolution,
            } => Some((request_id.clone(), resolution.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn an_approved_gate_runs_the_step_and_records_the_choice() {
    let mut deploy = cmd("deploy", "echo deploy", Some("done"));
    deploy.approval = Some(gate(ApprovalOption::defaults(), None, None));
    let wf = workflow(vec![deploy, terminal("done", TerminalStatus::Success)]);
    let exec = Arc::new(FakeExecutor::new().on("echo deploy", [FakeCommand::ok("ok\n")]));
    let f = facade(wf, Arc::clone(&exec), FakeExpressions::new());
    let h = f.start_run(request()).await.expect("starts");
    let run_id = h.run_id().0.clone();
    let (events, result, _) = drive(h, |r, h| {
        h.respond(&r.request_id, Answer::Option("approve".into()))
            .expect("accepted");
    })
    .await;
    let result = result.expect("finished");
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(exec.commands(), vec!["echo deploy"]);
    assert_eq!(result.states["deploy"].approval.as_deref(), Some("approve"));
    let asked = requests(&events);
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].step.as_deref(), Some("deploy"));
    // Ids are unique in the process: they carry the run id.
    assert!(
        asked[0].request_id.starts_with(&format!("{run_id}:")),
        "{}",
        asked[0].request_id
    );
    assert_eq!(
        asked[0].kind,
        RequestKind::Approval {
            message: "Deploy now?".into(),
            options: ApprovalOption::defaults()
        }
    );
    assert_eq!(
        resolutions(&events),
        vec![(
            asked[0].request_id.clone(),
            Resolution::Answered(Answer::Option("approve".into()))
        )]
    );
    // Asked after the step started and before it ran.
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| match &e.event {
            RunEvent::StepStarted { .. } => "started",
            RunEvent::InteractionRequired { .. } => "asked",
            RunEvent::InteractionResolved { .. } => "resolved",
            RunEvent::StepFinished { .. } => "finished",
            _ => "",
        })
        .filter(|k| !k.is_empty())
        .collect();
    assert_eq!(kinds, vec!["started", "asked", "resolved", "finished"]);
}

#[tokio::test]
async fn a_wrong_kind_of_answer_is_refused_and_the_request_stays_pending() {
    let mut deploy = cmd("deploy", "echo deploy", Some("done"));
    deploy.approval = Some(gate(ApprovalOption::defaults(), None, None));
    let wf = workflow(vec![deploy, terminal("done", TerminalStatus::Success)]);
    let exec = Arc::new(FakeExecutor::new().on("echo deploy", [FakeCommand::ok("")]));
    let f = facade(wf, Arc::clone(&exec), FakeExpressions::new());
    let h = f.start_run(request()).await.expect("starts");
    let (_, result, h) = drive(h, |r, h| {
        let e = h
            .respond(&r.request_id, Answer::Value("y".into()))
            .expect_err("a value is not an approval answer");
        assert_eq!(e.code(), ErrorCode::UserFacadeInputRejected);
        let e = h
            .respond(&r.request_id, Answer::Option("maybe".into()))
            .expect_err("no such option");
        assert_eq!(e.code(), ErrorCode::UserFacadeInputRejected);
        assert!(e.message().contains("no option 'maybe'"), "{}", e.message());
        assert_eq!(h.pending_requests(), vec![r.request_id.clone()]);
        h.respond(&r.request_id, Answer::Option("approve".into()))
            .expect("the right kind is taken");
    })
    .await;
    assert_eq!(result.expect("finished").status, RunStatus::Success);
    assert!(h.pending_requests().is_empty());
    let e = h
        .respond("nope:1", Answer::EndOfInput)
        .expect_err("the run has ended");
    assert_eq!(e.code(), ErrorCode::UserFacadeSessionClosed);
}

#[tokio::test]
async fn a_rejected_gate_fails_the_step_with_its_own_code_and_on_failure_routes_it() {
    // Unrouted: the run fails with EXECUTION.APPROVAL.REJECTED and the step never runs.
    let mut deploy = cmd("deploy", "echo deploy", Some("done"));
    deploy.approval = Some(gate(ApprovalOption::defaults(), None, None));
    let wf = workflow(vec![
        deploy.clone(),
        terminal("done", TerminalStatus::Success),
    ]);
    let exec = Arc::new(FakeExecutor::new());
    let f = facade(wf, Arc::clone(&exec), FakeExpressions::new());
    let h = f.start_run(request()).await.expect("starts");
    let (_, result, _) = drive(h, |r, h| {
        h.respond(&r.request_id, Answer::Option("reject".into()))
            .expect("accepted");
    })
    .await;
    let result = result.expect("finished");
    assert_eq!(result.status, RunStatus::Failure);
    assert_eq!(result.exit_code, 3);
    let error = result.error.expect("error");
    assert_eq!(error.code, ErrorCode::ExecutionApprovalRejected);
    assert_eq!(error.message, "step deploy: approval rejected (reject)");
    assert!(error.hints[0].contains("--yes"), "{:?}", error.hints);
    assert_eq!(result.states["deploy"].status, StepStatus::Failed);
    assert_eq!(result.states["deploy"].approval.as_deref(), Some("reject"));
    assert!(exec.commands().is_empty());

    // Routed: on_failure takes the rejection like any failure.
    deploy.on_failure = Some("notify".into());
    let wf = workflow(vec![
        deploy,
        cmd("notify", "echo rejected", Some("done")),
        terminal("done", TerminalStatus::Success),
    ]);
    let exec = Arc::new(FakeExecutor::new().on("echo rejected", [FakeCommand::ok("")]));
    let f = facade(wf, Arc::clone(&exec), FakeExpressions::new());
    let h = f.start_run(request()).await.expect("starts");
    let (_, result, _) = drive(h, |r, h| {
        h.respond(&r.request_id, Answer::Option("reject".into()))
            .expect("accepted");
    })
    .await;
    let result = result.expect("finished");
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(exec.commands(), vec!["echo rejected"]);
}

#[tokio::test]
async fn always_answers_are_remembered_for_the_gate_in_a_loop() {
    let l = State::new(
        "l",
        StateKind::Loop(LoopStep {
            over: LoopOver::Items("[\"a\",\"b\",\"c\"]".into()),
            body: vec!["body".into()],
            max_iterations: MaxIterations::Static(10),
            break_when: None,
            on_complete: Some("done".into()),
        }),
    );
    let mut body = cmd("body", "step {{.loop.Index}}", None);
    body.approval = Some(gate(
        vec![
            option("once", ApprovalKind::AllowOnce),
            option("always", ApprovalKind::AllowAlways),
            option("no", ApprovalKind::RejectOnce),
        ],
        None,
        None,
    ));
    let wf = workflow(vec![l, body, terminal("done", TerminalStatus::Success)]);
    let exec = Arc::new(
        FakeExecutor::new()
            .on("step 0", [FakeCommand::ok("")])
            .on("step 1", [FakeCommand::ok("")])
            .on("step 2", [FakeCommand::ok("")]),
    );
    let f = facade(wf, Arc::clone(&exec), FakeExpressions::new());
    let h = f.start_run(request()).await.expect("starts");
    let (events, result, _) = drive(h, |r, h| {
        h.respond(&r.request_id, Answer::Option("always".into()))
            .expect("accepted");
    })
    .await;
    assert_eq!(result.expect("finished").status, RunStatus::Success);
    assert_eq!(exec.commands(), vec!["step 0", "step 1", "step 2"]);
    assert_eq!(
        requests(&events).len(),
        1,
        "asked once for three iterations"
    );

    // `once` is asked again at each iteration.
    let l = State::new(
        "l",
        StateKind::Loop(LoopStep {
            over: LoopOver::Items("[\"a\",\"b\"]".into()),
            body: vec!["body".into()],
            max_iterations: MaxIterations::Static(10),
            break_when: None,
            on_complete: Some("done".into()),
        }),
    );
    let mut body = cmd("body", "step {{.loop.Index}}", None);
    body.approval = Some(gate(
        vec![
            option("once", ApprovalKind::AllowOnce),
            option("never", ApprovalKind::RejectAlways),
        ],
        None,
        None,
    ));
    let wf = workflow(vec![l, body, terminal("done", TerminalStatus::Success)]);
    let exec = Arc::new(
        FakeExecutor::new()
            .on("step 0", [FakeCommand::ok("")])
            .on("step 1", [FakeCommand::ok("")]),
    );
    let f = facade(wf, Arc::clone(&exec), FakeExpressions::new());
    let h = f.start_run(request()).await.expect("starts");
    let (events, result, _) = drive(h, |r, h| {
        h.respond(&r.request_id, Answer::Option("once".into()))
            .expect("accepted");
    })
    .await;
    assert_eq!(result.expect("finished").status, RunStatus::Success);
    assert_eq!(requests(&events).len(), 2);
}

#[tokio::test]
async fn reject_always_refuses_the_gate_again_without_asking() {
    // a (gated) fails → on_failure b → back to a: the second visit is refused unasked.
    let mut a = cmd("a", "echo a", Some("done"));
    a.approval = Some(gate(
        vec![
            option("yes", ApprovalKind::AllowOnce),
            option("never", ApprovalKind::RejectAlways),
        ],
        None,
        None,
    ));
    a.on_failure = Some("b".into());
    let mut b = cmd("b", "echo b", None);
    b.transitions = vec![Transition {
        when: Some("states.b.Output == 'again'".into()),
        goto: "a".into(),
    }];
    b.on_success = Some("failed".into());
    let wf = workflow(vec![
        a,
        b,
        terminal("done", TerminalStatus::Success),
        terminal("failed", TerminalStatus::Failure),
    ]);
    let exec = Arc::new(FakeExecutor::new().always("echo b", FakeCommand::ok("again")));
    let exprs = FakeExpressions::new().on("states.b.Output == 'again'", [true, false]);
    let f = facade(wf, Arc::clone(&exec), exprs);
    let h = f.start_run(request()).await.expect("starts");
    let (events, result, _) = drive(h, |r, h| {
        h.respond(&r.request_id, Answer::Option("never".into()))
            .expect("accepted");
    })
    .await;
    let result = result.expect("finished");
    assert_eq!(result.terminal.as_deref(), Some("failed"));
    assert_eq!(exec.commands(), vec!["echo b", "echo b"]);
    assert_eq!(requests(&events).len(), 1, "the second visit is not asked");
}

#[tokio::test]
async fn an_unanswered_gate_times_out_to_its_on_timeout_option_or_fails() {
    // on_timeout: approve → the step runs.
    let mut deploy = cmd("deploy", "echo deploy", Some("done"));
    deploy.approval = Some(gate(
        ApprovalOption::defaults(),
        Some(Duration::from_millis(20)),
        Some("approve"),
    ));
    let wf = workflow(vec![
        deploy.clone(),
        terminal("done", TerminalStatus::Success),
    ]);
    let exec = Arc::new(FakeExecutor::new().on("echo deploy", [FakeCommand::ok("")]));
    let f = facade(wf, Arc::clone(&exec), FakeExpressions::new());
    let h = f.start_run(request()).await.expect("starts");
    let (events, result, h) = drive(h, |r, _| assert_eq!(r.timeout_ms, Some(20))).await;
    let result = result.expect("finished");
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(result.states["deploy"].approval.as_deref(), Some("approve"));
    assert_eq!(exec.commands(), vec!["echo deploy"]);
    let resolved = resolutions(&events);
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0].1, Resolution::TimedOut);
    // A late answer finds nothing pending.
    assert!(
        h.respond(&resolved[0].0, Answer::Option("approve".into()))
            .is_err()
    );

    // No on_timeout → EXECUTION.APPROVAL.TIMED_OUT.
    deploy.approval = Some(gate(
        ApprovalOption::defaults(),
        Some(Duration::from_millis(20)),
        None,
    ));
    let wf = workflow(vec![deploy, terminal("done", TerminalStatus::Success)]);
    let exec = Arc::new(FakeExecutor::new());
    let f = facade(wf, Arc::clone(&exec), FakeExpressions::new());
    let h = f.start_run(request()).await.expect("starts");
    let (_, result, _) = drive(h, |_, _| {}).await;
    let result = result.expect("finished");
    assert_eq!(result.status, RunStatus::Failure);
    assert_eq!(
        result.error.expect("error").code,
        ErrorCode::ExecutionApprovalTimedOut
    );
    assert!(exec.commands().is_empty());
}

#[tokio::test]
async fn a_cancel_resolves_the_waiting_request_as_cancelled() {
    let mut deploy = cmd("deploy", "echo deploy", Some("done"));
    deploy.approval = Some(gate(ApprovalOption::defaults(), None, None));
    let wf = workflow(vec![deploy, terminal("done", TerminalStatus::Success)]);
    let exec = Arc::new(FakeExecutor::new());
    let f = facade(wf, Arc::clone(&exec), FakeExpressions::new());
    let h = f.start_run(request()).await.expect("starts");
    let (events, result, h) = drive(h, |_, h| h.cancel(CancelReason::Interrupt)).await;
    let result = result.expect("finished");
    assert_eq!(result.status, RunStatus::Cancelled);
    assert_eq!(result.exit_code, 130);
    assert!(exec.commands().is_empty());
    let resolved = resolutions(&events);
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0].1, Resolution::Cancelled);
    assert!(h.pending_requests().is_empty());
}

#[tokio::test]
async fn auto_approve_runs_every_gate_without_asking() {
    let mut deploy = cmd("deploy", "echo deploy", Some("done"));
    deploy.approval = Some(gate(ApprovalOption::defaults(), None, None));
    let wf = workflow(vec![deploy, terminal("done", TerminalStatus::Success)]);
    let exec = Arc::new(FakeExecutor::new().on("echo deploy", [FakeCommand::ok("")]));
    let f = facade(wf, Arc::clone(&exec), FakeExpressions::new());
    let mut req = request();
    req.auto_approve = true;
    let h = f.start_run(req).await.expect("starts");
    let (events, result, _) = drive(h, |_, _| panic!("nothing is asked")).await;
    let result = result.expect("finished");
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(result.states["deploy"].approval.as_deref(), Some("approve"));
    assert!(requests(&events).is_empty());
}

fn with_input(mut wf: Workflow) -> Workflow {
    wf.inputs = vec![InputDef {
        name: "env".into(),
        ty: InputType::String,
        description: Some("Where".into()),
        required: true,
        default: None,
        validation: InputValidation {
            enum_values: vec!["dev".into(), "prod".into()],
            ..InputValidation::default()
        },
    }];
    wf
}

#[tokio::test]
async fn missing_inputs_are_asked_before_the_run_starts_and_refused_values_again() {
    let wf = with_input(workflow(vec![
        cmd("a", "echo a", Some("done")),
        terminal("done", TerminalStatus::Success),
    ]));
    let exec = Arc::new(FakeExecutor::new().on("echo a", [FakeCommand::ok("")]));
    let f = facade(wf, Arc::clone(&exec), FakeExpressions::new());
    let mut req = request();
    req.prompt_missing_inputs = true;
    let h = f.start_run(req).await.expect("starts");
    let mut refusals = Vec::new();
    let (events, result, _) = drive(h, |r, h| {
        // A value that breaks the rule is refused by `respond`, naming it; the request stays
        // pending and takes the next answer.
        let e = h
            .respond(&r.request_id, Answer::Value("qa".into()))
            .expect_err("refused");
        refusals.push((
            e.code(),
            e.message().to_owned(),
            awf_domain::interaction::refused_value(&e).map(str::to_owned),
        ));
        h.respond(&r.request_id, Answer::Value("dev".into()))
            .expect("accepted");
    })
    .await;
    let result = result.expect("finished");
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(
        refusals,
        vec![(
            ErrorCode::UserInputValidationFailed,
            "input validation failed: inputs.env: value \"qa\" not in allowed values [dev prod]"
                .to_owned(),
            Some("value \"qa\" not in allowed values [dev prod]".to_owned()),
        )]
    );
    // Asked once: the refused answer asked nothing new.
    let asked = requests(&events);
    assert_eq!(asked.len(), 1);
    match &asked[0].kind {
        RequestKind::MissingInput { input, problem } => {
            assert_eq!(input.name, "env");
            assert_eq!(problem, &None);
        }
        other => panic!("unexpected {other:?}"),
    }
    // Both asked before RunStarted, which has the answer.
    let started = events
        .iter()
        .position(|e| matches!(e.event, RunEvent::RunStarted { .. }))
        .expect("started");
    let last_ask = events
        .iter()
        .rposition(|e| matches!(e.event, RunEvent::InteractionResolved { .. }))
        .expect("resolved");
    assert!(last_ask < started);
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    match &events[started].event {
        RunEvent::RunStarted { inputs, .. } => assert_eq!(inputs["env"], "dev"),
        _ => unreachable!(),
    }
}

#[tokio::test]
async fn end_of_input_at_a_missing_input_is_the_usual_user_error_and_nothing_starts() {
    let wf = with_input(workflow(vec![
        cmd("a", "echo a", Some("done")),
        terminal("done", TerminalStatus::Success),
    ]));
    let exec = Arc::new(FakeExecutor::new());
    let f = facade(wf.clone(), Arc::clone(&exec), FakeExpressions::new());
    let mut req = request();
    req.prompt_missing_inputs = true;
    let h = f.start_run(req).await.expect("starts");
    let (events, result, h) = drive(h, |r, h| {
        h.respond(&r.request_id, Answer::EndOfInput)
            .expect("accepted");
    })
    .await;
    assert!(result.is_none());
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.event, RunEvent::RunStarted { .. }))
    );
    let e = h.start_error().expect("why it did not start");
    assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
    assert_eq!(
        e.message(),
        "input validation failed: inputs.env: required but not provided"
    );
    assert!(exec.commands().is_empty());

    // A front-end that cannot answer gets the error at once, as before.
    let f = facade(wf, Arc::new(FakeExecutor::new()), FakeExpressions::new());
    let e = f.start_run(request()).await.expect_err("missing input");
    assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
}

#[tokio::test]
async fn a_secret_missing_input_is_masked_in_the_resolved_event() {
    let mut wf = workflow(vec![
        cmd("a", "echo a", Some("done")),
        terminal("done", TerminalStatus::Success),
    ]);
    wf.inputs = vec![InputDef {
        name: "API_TOKEN".into(),
        ty: InputType::String,
        description: None,
        required: true,
        default: None,
        validation: InputValidation::default(),
    }];
    let exec = Arc::new(FakeExecutor::new().on("echo a", [FakeCommand::ok("")]));
    let f = facade(wf, Arc::clone(&exec), FakeExpressions::new());
    let mut req = request();
    req.prompt_missing_inputs = true;
    let h = f.start_run(req).await.expect("starts");
    let (events, result, _) = drive(h, |r, h| {
        h.respond(&r.request_id, Answer::Value("s3cr3t-value".into()))
            .expect("accepted");
    })
    .await;
    assert_eq!(result.expect("finished").status, RunStatus::Success);
    assert_eq!(
        resolutions(&events)[0].1,
        Resolution::Answered(Answer::Value("***".into()))
    );
    let text = format!("{events:?}");
    assert!(!text.contains("s3cr3t-value"), "{text}");
}

#[tokio::test]
async fn breakpoint_decisions_are_typed() {
    let wf = with_input(workflow(vec![
        cmd("a", "echo {{.inputs.env}}", Some("b")),
        cmd("b", "echo b", Some("done")),
        terminal("done", TerminalStatus::Success),
    ]));
    let exec = Arc::new(FakeExecutor::new().on("echo prod", [FakeCommand::ok("")]));
    let f = facade(wf, Arc::clone(&exec), FakeExpressions::new());
    let mut req = request();
    req.inputs = vec![("env".into(), "dev".into())];
    req.interactive = Some(awf_domain::ports::facade::Interactive::default());
    let h = f.start_run(req).await.expect("starts");
    // At a: edit env, then continue; at b: skip.
    let mut decisions = vec![
        BreakpointDecision::Skip,
        BreakpointDecision::Continue,
        BreakpointDecision::Edit {
            name: "env".into(),
            value: "prod".into(),
        },
    ];
    let (events, result, _) = drive(h, |r, h| {
        assert!(matches!(r.kind, RequestKind::Breakpoint { .. }));
        let e = h
            .respond(&r.request_id, Answer::Value("c".into()))
            .expect_err("text is not a decision");
        assert_eq!(e.code(), ErrorCode::UserFacadeInputRejected);
        let d = decisions.pop().expect("asked three times");
        h.respond(&r.request_id, Answer::Decision(d))
            .expect("accepted");
    })
    .await;
    let result = result.expect("finished");
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(exec.commands(), vec!["echo prod"]);
    let steps: Vec<Option<String>> = requests(&events).into_iter().map(|r| r.step).collect();
    assert_eq!(
        steps,
        vec![Some("a".into()), Some("a".into()), Some("b".into())]
    );
}

fn items_loop(items: &str, body: &str) -> State {
    State::new(
        "l",
        StateKind::Loop(LoopStep {
            over: LoopOver::Items(items.into()),
            body: vec![body.into()],
            max_iterations: MaxIterations::Static(10),
            break_when: None,
            on_complete: Some("done".into()),
        }),
    )
}

#[tokio::test]
async fn a_timeout_takes_the_once_option_of_its_side_and_is_never_remembered() {
    // `allow_always` comes first, but `on_timeout: approve` takes `allow_once`: every
    // iteration is asked again.
    let mut body = cmd("body", "step {{.loop.Index}}", None);
    body.approval = Some(gate(
        vec![
            option("always", ApprovalKind::AllowAlways),
            option("once", ApprovalKind::AllowOnce),
            option("no", ApprovalKind::RejectOnce),
        ],
        Some(Duration::from_millis(10)),
        Some("approve"),
    ));
    let wf = workflow(vec![
        items_loop("[\"a\",\"b\"]", "body"),
        body,
        terminal("done", TerminalStatus::Success),
    ]);
    let exec = Arc::new(
        FakeExecutor::new()
            .always("step 0", FakeCommand::ok(""))
            .always("step 1", FakeCommand::ok("")),
    );
    let f = facade(wf, Arc::clone(&exec), FakeExpressions::new());
    let h = f.start_run(request()).await.expect("starts");
    let (events, result, _) = drive(h, |_, _| {}).await;
    let result = result.expect("finished");
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(result.states["body"].approval.as_deref(), Some("once"));
    assert_eq!(requests(&events).len(), 2, "each iteration asks again");

    // Only an `allow_always` on the allowing side (even named by id): applied once, not
    // remembered.
    for on_timeout in ["approve", "always"] {
        let mut body = cmd("body", "step {{.loop.Index}}", None);
        body.approval = Some(gate(
            vec![
                option("always", ApprovalKind::AllowAlways),
                option("no", ApprovalKind::RejectOnce),
            ],
            Some(Duration::from_millis(10)),
            Some(on_timeout),
        ));
        let wf = workflow(vec![
            items_loop("[\"a\",\"b\"]", "body"),
            body,
            terminal("done", TerminalStatus::Success),
        ]);
        let exec = Arc::new(
            FakeExecutor::new()
                .always("step 0", FakeCommand::ok(""))
                .always("step 1", FakeCommand::ok("")),
        );
        let f = facade(wf, Arc::clone(&exec), FakeExpressions::new());
        let h = f.start_run(request()).await.expect("starts");
        let (events, result, _) = drive(h, |_, _| {}).await;
        let result = result.expect("finished");
        assert_eq!(result.status, RunStatus::Success, "{on_timeout}");
        assert_eq!(result.states["body"].approval.as_deref(), Some("always"));
        assert_eq!(requests(&events).len(), 2, "{on_timeout}: asked again");
    }
}

#[tokio::test]
async fn allow_always_holds_across_calls_of_a_sub_workflow_from_a_loop() {
    let mut deploy = cmd("deploy", "echo deploy", Some("done"));
    deploy.approval = Some(gate(
        vec![
            option("once", ApprovalKind::AllowOnce),
            option("always", ApprovalKind::AllowAlways),
            option("no", ApprovalKind::RejectOnce),
        ],
        None,
        None,
    ));
    let mut child = workflow(vec![deploy, terminal("done", TerminalStatus::Success)]);
    child.name = "child".into();
    child.source.identifier = "child".into();
    let call = State::new(
        "call",
        StateKind::CallWorkflow(CallWorkflowStep {
            workflow: "child".into(),
            inputs: IndexMap::new(),
            outputs: IndexMap::new(),
        }),
    );
    let parent = workflow(vec![
        items_loop("[\"a\",\"b\",\"c\"]", "call"),
        call,
        terminal("done", TerminalStatus::Success),
    ]);
    let exec = Arc::new(FakeExecutor::new().always("echo deploy", FakeCommand::ok("")));
    let f = Facade::new(Services {
        ..Services::fakes(
            FakeRepository::new().with(parent).with(child),
            Arc::clone(&exec) as _,
        )
    });
    let h = f.start_run(request()).await.expect("starts");
    let (events, result, _) = drive(h, |r, h| {
        h.respond(&r.request_id, Answer::Option("always".into()))
            .expect("accepted");
    })
    .await;
    assert_eq!(result.expect("finished").status, RunStatus::Success);
    assert_eq!(exec.commands(), vec!["echo deploy"; 3]);
    assert_eq!(requests(&events).len(), 1, "asked once for three calls");
}

#[tokio::test]
async fn nobody_to_ask_is_not_a_rejection_and_end_of_input_at_a_breakpoint_is_not_a_cancel() {
    // A gate answered "unattended": the step fails with the reason, no option recorded.
    let mut deploy = cmd("deploy", "echo deploy", Some("done"));
    deploy.approval = Some(gate(ApprovalOption::defaults(), None, None));
    let wf = workflow(vec![deploy, terminal("done", TerminalStatus::Success)]);
    let exec = Arc::new(FakeExecutor::new());
    let f = facade(wf, Arc::clone(&exec), FakeExpressions::new());
    let h = f.start_run(request()).await.expect("starts");
    let (_, result, _) = drive(h, |r, h| {
        h.respond(&r.request_id, Answer::Unattended("nobody here".into()))
            .expect("accepted");
    })
    .await;
    let result = result.expect("finished");
    let error = result.error.expect("error");
    assert_eq!(error.code, ErrorCode::ExecutionApprovalRejected);
    assert_eq!(
        error.message,
        "step deploy: approval not asked: nobody here"
    );
    assert_eq!(result.states["deploy"].approval, None);
    assert!(exec.commands().is_empty());

    // End of input and "unattended" at a breakpoint: USER.FACADE.SESSION_CLOSED (exit 1).
    for (answer, message) in [
        (
            Answer::EndOfInput,
            "input ended at the breakpoint before 'a': run aborted",
        ),
        (
            Answer::Unattended("nobody here".into()),
            "breakpoint before 'a' not asked: nobody here",
        ),
    ] {
        let wf = workflow(vec![
            cmd("a", "echo a", Some("done")),
            terminal("done", TerminalStatus::Success),
        ]);
        let exec = Arc::new(FakeExecutor::new());
        let f = facade(wf, Arc::clone(&exec), FakeExpressions::new());
        let mut req = request();
        req.interactive = Some(awf_domain::ports::facade::Interactive::default());
        let h = f.start_run(req).await.expect("starts");
        let (_, result, _) = drive(h, |r, h| {
            h.respond(&r.request_id, answer.clone()).expect("accepted");
        })
        .await;
        let result = result.expect("finished");
        assert_eq!(result.exit_code, 1, "{message}");
        let error = result.error.expect("error");
        assert_eq!(error.code, ErrorCode::UserFacadeSessionClosed);
        assert_eq!(error.message, message);
        assert!(exec.commands().is_empty());
    }
}

/// Every event a recorder is handed.
#[derive(Default)]
struct Recorded(std::sync::Mutex<Vec<EventEnvelope>>);

impl awf_domain::event::EventPublisher for Recorded {
    fn emit(&self, event: EventEnvelope) {
        if let Ok(mut v) = self.0.lock() {
            v.push(event);
        }
    }
}

/// Round 71: with `recording_unstarted`, a run that asks for its missing input is recorded
/// from then on (a `RunStarted` to the recorders only, the given inputs with the secret
/// masked), and ended `failure` in its record when the input is not given; the front-end
/// sees no `RunStarted`. Answered, the run's own `RunStarted` records it again, whole.
#[tokio::test]
async fn a_run_asking_for_an_input_is_recorded_from_then_on_when_asked_to() {
    let mut wf = with_input(workflow(vec![
        cmd("a", "echo a", Some("done")),
        terminal("done", TerminalStatus::Success),
    ]));
    wf.inputs.push(InputDef {
        name: "API_TOKEN".into(),
        ty: InputType::String,
        description: None,
        required: false,
        default: None,
        validation: InputValidation::default(),
    });
    let with_recorder = |rec: &Arc<Recorded>| {
        Facade::new(Services {
            recorders: vec![Arc::clone(rec) as Arc<dyn awf_domain::event::EventPublisher>],
            ..Services::fakes(
                FakeRepository::new().with(wf.clone()),
                Arc::new(FakeExecutor::new().on("echo a", [FakeCommand::ok("")])),
            )
        })
        .recording_unstarted(true)
    };
    let mut req = request();
    req.prompt_missing_inputs = true;
    req.inputs = vec![("API_TOKEN".into(), "sekrit-token-9".into())];

    // Not given: recorded started, then failed; nothing started for the front-end.
    let rec = Arc::new(Recorded::default());
    let h = with_recorder(&rec)
        .start_run(req.clone())
        .await
        .expect("starts");
    let (events, result, _) = drive(h, |r, h| {
        h.respond(&r.request_id, Answer::EndOfInput)
            .expect("accepted");
    })
    .await;
    assert!(result.is_none());
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.event, RunEvent::RunStarted { .. }))
    );
    let recorded = rec.0.lock().unwrap().clone();
    let kinds: Vec<&str> = recorded
        .iter()
        .filter_map(|e| match &e.event {
            RunEvent::RunStarted { .. } => Some("started"),
            RunEvent::RunFinished { .. } => Some("finished"),
            _ => None,
        })
        .collect();
    assert_eq!(kinds, vec!["started", "finished"]);
    match &recorded[0].event {
        RunEvent::RunStarted { inputs, .. } => {
            assert_eq!(inputs.get("API_TOKEN"), Some(&serde_json::json!("***")));
            assert_eq!(inputs.get("env"), None);
        }
        other => panic!("unexpected {other:?}"),
    }
    match &recorded.last().expect("an end").event {
        RunEvent::RunFinished { result } => {
            assert_eq!(result.status, RunStatus::Failure);
            assert_eq!(result.exit_code, 1);
            assert_eq!(
                result.error.as_ref().map(|e| e.code.as_str()),
                Some("USER.INPUT.VALIDATION_FAILED")
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(!format!("{recorded:?}").contains("sekrit-token-9"));

    // Given: recorded started while it asked, then started again with the answer, and ended
    // as any run.
    let rec = Arc::new(Recorded::default());
    let h = with_recorder(&rec).start_run(req).await.expect("starts");
    let (_, result, _) = drive(h, |r, h| {
        h.respond(&r.request_id, Answer::Value("dev".into()))
            .expect("accepted");
    })
    .await;
    assert_eq!(result.expect("finished").status, RunStatus::Success);
    let recorded = rec.0.lock().unwrap().clone();
    let started: Vec<Option<serde_json::Value>> = recorded
        .iter()
        .filter_map(|e| match &e.event {
            RunEvent::RunStarted { inputs, .. } => Some(inputs.get("env").cloned()),
            _ => None,
        })
        .collect();
    assert_eq!(started, vec![None, Some(serde_json::json!("dev"))]);
    assert!(
        matches!(&recorded.last().expect("an end").event, RunEvent::RunFinished { result } if result.status == RunStatus::Success)
    );
    assert!(!format!("{recorded:?}").contains("sekrit-token-9"));
}
