//! `type: operation` in the engine, over a scripted [`Operations`] fake.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::event::RunEvent;
use awf_domain::ports::Operations;
use awf_domain::ports::facade::RunRequest;
use awf_domain::ports::fakes::FakeCommand;
use awf_domain::ports::fakes::FakeExecutor;
use awf_domain::ports::fakes::FakeRepository;
use awf_domain::ports::operations::OperationResult;
use awf_domain::ports::operations::OperationSpec;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use awf_domain::run::StepState;
use awf_domain::run::StepStatus;
use awf_domain::workflow::*;
use indexmap::IndexMap;
use serde_json::Map;
use serde_json::Value;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::output_lines;
use crate::Facade;
use crate::Services;

type Call = (String, Map<String, Value>, Option<Duration>);

/// Answers with the scripted results in order (the last one again when they run out) and
/// records each call.
#[derive(Default)]
struct ScriptedOps {
    answers: Mutex<VecDeque<Result<OperationResult, AwfError>>>,
    calls: Mutex<Vec<Call>>,
}

impl ScriptedOps {
    fn new(answers: Vec<Result<OperationResult, AwfError>>) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(answers.into()),
            calls: Mutex::default(),
        })
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl Operations for ScriptedOps {
    fn list(&self) -> Vec<OperationSpec> {
        vec![OperationSpec {
            plugin: "http".into(),
            name: "request".into(),
            description: "test".into(),
            input_schema: json!({"type": "object"}),
        }]
    }

    async fn execute(
        &self,
        id: &str,
        inputs: Map<String, Value>,
        timeout: Option<Duration>,
        _cancel: CancellationToken,
    ) -> Result<OperationResult, AwfError> {
        self.calls
            .lock()
            .unwrap()
            .push((id.to_owned(), inputs, timeout));
        let mut a = self.answers.lock().unwrap();
        if a.len() > 1 {
            a.pop_front().unwrap()
        } else {
            a.front().cloned().unwrap()
        }
    }
}

fn ok(outputs: Value) -> Result<OperationResult, AwfError> {
    Ok(OperationResult {
        success: true,
        outputs: outputs.as_object().unwrap().clone(),
        error: None,
    })
}

fn failed(why: &str) -> Result<OperationResult, AwfError> {
    Ok(OperationResult {
        success: false,
        outputs: json!({"status_code": 503}).as_object().unwrap().clone(),
        error: Some(why.to_owned()),
    })
}

fn op_state(inputs: Value, on_success: &str, on_failure: Option<&str>) -> State {
    let mut s = State::new(
        "call",
        StateKind::Operation(OperationStep {
            operation: "http.request".into(),
            inputs: inputs
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }),
    );
    s.on_success = Some(on_success.into());
    s.on_failure = on_failure.map(Into::into);
    s
}

fn workflow(states: Vec<State>, inputs: &[&str]) -> Workflow {
    let mut map = IndexMap::new();
    for s in states {
        map.insert(s.name.clone(), s);
    }
    for (name, status) in [
        ("done", TerminalStatus::Success),
        ("bad", TerminalStatus::Failure),
    ] {
        map.insert(
            name.into(),
            State::new(
                name,
                StateKind::Terminal(TerminalState {
                    status,
                    message: None,
                    exit_code: None,
                }),
            ),
        );
    }
    Workflow {
        name: "w".into(),
        version: None,
        description: None,
        author: None,
        tags: vec![],
        inputs: inputs
            .iter()
            .map(|n| InputDef {
                name: (*n).into(),
                ty: InputType::String,
                description: None,
                required: false,
                default: None,
                validation: InputValidation::default(),
            })
            .collect(),
        env: vec![],
        initial: "call".into(),
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

/// Runs `wf` with `inputs`; the result and the recorded state of `call`.
async fn run(
    wf: Workflow,
    ops: Option<Arc<ScriptedOps>>,
    exec: Arc<FakeExecutor>,
    inputs: &[(&str, &str)],
) -> (RunResult, Option<StepState>) {
    let f = Facade::new(Services {
        operations: ops.map(|o| o as Arc<dyn Operations>),
        ..Services::fakes(FakeRepository::new().with(wf), exec)
    });
    let mut h = f
        .start_run(RunRequest {
            identifier: "w".into(),
            inputs: inputs
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            working_dir: PathBuf::from("/"),
            ..RunRequest::default()
        })
        .await
        .expect("run starts");
    let mut result = None;
    let mut state = None;
    while let Some(e) = h.next_event().await {
        match e.event {
            RunEvent::StepFinished { step, state: s, .. } if step == "call" => {
                state = Some(*s);
            }
            RunEvent::RunFinished { result: r } if e.parent_run_id.is_none() => {
                result = Some(r.as_ref().clone());
            }
            _ => {}
        }
    }
    (result.expect("RunFinished"), state)
}

#[test]
fn outputs_are_key_value_lines_in_order() {
    let m = json!({"status_code": 200, "body": "hi\nthere", "headers": {"A": "b"}, "body_truncated": false});
    assert_eq!(
        output_lines(m.as_object().unwrap()),
        "status_code=200\nbody=hi\nthere\nheaders={\"A\":\"b\"}\nbody_truncated=false"
    );
}

#[tokio::test]
async fn inputs_are_interpolated_recursively_and_outputs_fill_response_and_output() {
    let ops = ScriptedOps::new(vec![ok(
        json!({"status_code": 201, "body": "made", "headers": {}, "body_truncated": false}),
    )]);
    let mut st = op_state(
        json!({"method": "POST", "url": "http://h/{{inputs.id}}",
               "headers": {"X-Id": "{{inputs.id}}", "X-N": 5},
               "retryable_status_codes": [503, "{{inputs.id}}"]}),
        "done",
        Some("bad"),
    );
    st.timeout = Some(Duration::from_secs(40));
    let (result, state) = run(
        workflow(vec![st], &["id"]),
        Some(Arc::clone(&ops)),
        Arc::new(FakeExecutor::new()),
        &[("id", "42")],
    )
    .await;
    assert_eq!(result.status, RunStatus::Success, "{:?}", result.error);
    assert_eq!(result.terminal.as_deref(), Some("done"));
    let calls = ops.calls();
    assert_eq!(calls.len(), 1);
    let (id, inputs, timeout) = &calls[0];
    assert_eq!(id, "http.request");
    assert_eq!(
        Value::Object(inputs.clone()),
        json!({"method": "POST", "url": "http://h/42",
               "headers": {"X-Id": "42", "X-N": 5},
               "retryable_status_codes": [503, "42"]})
    );
    // What is left of the step's 40 s deadline (the fake clock stands still).
    assert!(
        timeout.is_some_and(|t| t <= Duration::from_secs(40) && t > Duration::from_secs(30)),
        "{timeout:?}"
    );
    let state = state.unwrap();
    assert_eq!(state.status, StepStatus::Completed);
    assert_eq!(
        state.output.to_string(),
        "status_code=201\nbody=made\nheaders={}\nbody_truncated=false"
    );
    assert_eq!(state.response.as_ref().unwrap()["status_code"], 201);
    assert_eq!(state.attempts, 1);
}

#[tokio::test]
async fn a_failed_operation_is_retried_then_routed_by_on_failure() {
    let ops = ScriptedOps::new(vec![failed("http.request: retryable status code 503")]);
    let mut st = op_state(
        json!({"method": "GET", "url": "http://h/"}),
        "done",
        Some("bad"),
    );
    st.retry = Some(RetryPolicy {
        max_attempts: 3,
        initial_delay: Duration::ZERO,
        max_delay: None,
        backoff: Backoff::Constant,
        multiplier: 1.0,
        jitter: 0.0,
        retryable_exit_codes: vec![],
    });
    let (result, state) = run(
        workflow(vec![st], &[]),
        Some(Arc::clone(&ops)),
        Arc::new(FakeExecutor::new()),
        &[],
    )
    .await;
    assert_eq!(ops.calls().len(), 3);
    assert_eq!(result.terminal.as_deref(), Some("bad"));
    let state = state.unwrap();
    assert_eq!(state.status, StepStatus::Failed);
    assert_eq!(state.attempts, 3);
    assert_eq!(
        state.error.as_deref(),
        Some("step call: http.request: retryable status code 503")
    );
    assert_eq!(state.response.as_ref().unwrap()["status_code"], 503);
}

#[tokio::test]
async fn continue_on_error_takes_on_success_and_an_unrouted_failure_keeps_its_code() {
    let mut st = op_state(json!({"method": "GET", "url": "http://h/"}), "done", None);
    st.continue_on_error = true;
    let ops = ScriptedOps::new(vec![failed("nope")]);
    let (result, _) = run(
        workflow(vec![st], &[]),
        Some(ops),
        Arc::new(FakeExecutor::new()),
        &[],
    )
    .await;
    assert_eq!(result.terminal.as_deref(), Some("done"));
    let st = op_state(json!({"method": "GET", "url": "http://h/"}), "done", None);
    let ops = ScriptedOps::new(vec![Err(AwfError::new(
        ErrorCode::ExecutionOperationTimeout,
        "http.request: request timed out after 1s",
    ))]);
    let (result, state) = run(
        workflow(vec![st], &[]),
        Some(ops),
        Arc::new(FakeExecutor::new()),
        &[],
    )
    .await;
    assert_eq!(result.status, RunStatus::Failure);
    assert_eq!(result.exit_code, 3);
    let err = result.error.unwrap();
    assert_eq!(err.code, ErrorCode::ExecutionOperationTimeout);
    assert!(
        err.message
            .contains("step call: http.request: request timed out"),
        "{}",
        err.message
    );
    assert_eq!(state.unwrap().status, StepStatus::Failed);
}

#[tokio::test]
async fn secrets_in_the_outputs_are_masked_and_hooks_run() {
    let ops = ScriptedOps::new(vec![ok(json!({"status_code": 200,
        "body": "echo: Bearer tok-12345", "headers": {"X-Echo": "tok-12345"}, "body_truncated": false}))]);
    let mut st = op_state(
        json!({"method": "GET", "url": "http://h/", "headers": {"Authorization": "Bearer {{inputs.api_token}}"}}),
        "done",
        None,
    );
    st.hooks.pre = vec![HookAction::Command("pre-hook".into())];
    st.hooks.post = vec![HookAction::Command("post-hook".into())];
    let exec = Arc::new(
        FakeExecutor::new()
            .on("pre-hook", [FakeCommand::ok("")])
            .on("post-hook", [FakeCommand::ok("")]),
    );
    let (result, state) = run(
        workflow(vec![st], &["api_token"]),
        Some(Arc::clone(&ops)),
        Arc::clone(&exec),
        &[("api_token", "tok-12345")],
    )
    .await;
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(exec.commands(), vec!["pre-hook", "post-hook"]);
    // The operation got the real value; the state shows it masked.
    assert_eq!(
        ops.calls()[0].1["headers"]["Authorization"],
        "Bearer tok-12345"
    );
    let state = state.unwrap();
    assert!(
        !state.output.to_string().contains("tok-12345"),
        "{}",
        state.output
    );
    let response = state.response.unwrap().to_string();
    assert!(!response.contains("tok-12345"), "{response}");
    assert!(response.contains("***"), "{response}");
}

#[tokio::test]
async fn without_the_operation_the_step_fails_with_not_found() {
    let st = op_state(
        json!({"method": "GET", "url": "http://h/"}),
        "done",
        Some("bad"),
    );
    let (result, state) = run(
        workflow(vec![st], &[]),
        None,
        Arc::new(FakeExecutor::new()),
        &[],
    )
    .await;
    assert_eq!(result.terminal.as_deref(), Some("bad"));
    let state = state.unwrap();
    assert!(
        state
            .error
            .as_deref()
            .unwrap_or("")
            .contains("operation \"http.request\" not found"),
        "{:?}",
        state.error
    );
}

#[tokio::test]
async fn an_interpolation_error_fails_the_step_routably() {
    let st = op_state(
        json!({"method": "GET", "url": "http://h/{{inputs.missing}}"}),
        "done",
        Some("bad"),
    );
    let ops = ScriptedOps::new(vec![ok(json!({}))]);
    let (result, state) = run(
        workflow(vec![st], &[]),
        Some(Arc::clone(&ops)),
        Arc::new(FakeExecutor::new()),
        &[],
    )
    .await;
    assert_eq!(result.terminal.as_deref(), Some("bad"));
    assert!(ops.calls().is_empty());
    assert!(
        state
            .unwrap()
            .error
            .unwrap_or_default()
            .contains("resolve input \"url\"")
    );
}
