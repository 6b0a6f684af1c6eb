//! WorkflowTools over port fakes: a scripted run service and an in-memory repository.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::path::Path;
use std::sync::Mutex;
use std::time::SystemTime;

use awf_domain::event::EventEnvelope;
use awf_domain::interaction::ApprovalKind;
use awf_domain::interaction::ApprovalOption;
use awf_domain::interaction::InteractionRequest;
use awf_domain::ports::repository::LoadedWorkflow;
use awf_domain::ports::repository::SourceMap;
use awf_domain::ports::repository::WorkflowEntry;
use awf_domain::ports::service::RunView;
use awf_domain::ports::service::Subscription;
use awf_domain::ports::store::StoredStatus;
use awf_domain::run::StepState;
use awf_domain::run::StepStatus;
use awf_domain::workflow::InputValidation;
use awf_domain::workflow::Workflow;
use awf_domain::workflow::WorkflowHooks;
use awf_domain::workflow::WorkflowSource;
use indexmap::IndexMap;
use pretty_assertions::assert_eq;

use super::*;

fn input(name: &str, ty: InputType, required: bool, default: Option<Value>) -> InputDef {
    InputDef {
        name: name.into(),
        ty,
        description: None,
        required,
        default,
        validation: InputValidation::default(),
    }
}

fn workflow(id: &str, description: Option<&str>, inputs: Vec<InputDef>) -> Workflow {
    Workflow {
        name: id.into(),
        version: None,
        description: description.map(str::to_owned),
        author: None,
        tags: vec![],
        inputs,
        env: vec![],
        initial: "start".into(),
        states: IndexMap::new(),
        hooks: WorkflowHooks::default(),
        outputs: vec![],
        shell_quote: false,
        budget: None,
        source: WorkflowSource {
            identifier: id.into(),
            path: None,
            dir: "/".into(),
        },
    }
}

/// Lists and loads workflows from memory; an entry with an error is listed as broken.
#[derive(Default)]
struct Repo {
    workflows: BTreeMap<String, Workflow>,
    broken: Vec<String>,
}

impl Repo {
    fn with(mut self, wf: Workflow) -> Self {
        self.workflows.insert(wf.source.identifier.clone(), wf);
        self
    }
}

impl WorkflowRepository for Repo {
    fn load(&self, identifier: &str, _base: Option<&Path>) -> Result<LoadedWorkflow, AwfError> {
        self.workflows
            .get(identifier)
            .cloned()
            .map(|workflow| LoadedWorkflow {
                workflow,
                source_map: SourceMap::default(),
                diagnostics: vec![],
                unknown_types: std::collections::BTreeMap::new(),
            })
            .ok_or_else(|| AwfError::new(ErrorCode::UserFacadeWorkflowNotFound, identifier))
    }

    fn list(&self) -> Result<Vec<WorkflowEntry>, AwfError> {
        let entry = |name: &str, error: Option<String>| WorkflowEntry {
            name: name.into(),
            source: "env".into(),
            path: format!("/wf/{name}.yaml").into(),
            version: None,
            description: None,
            error,
        };
        let mut v: Vec<WorkflowEntry> = self.workflows.keys().map(|n| entry(n, None)).collect();
        // Listed in reverse, to show the tools are named in identifier order regardless.
        v.reverse();
        v.extend(
            self.broken
                .iter()
                .map(|n| entry(n, Some("[WORKFLOW.PARSE.YAML_SYNTAX] bad".into()))),
        );
        Ok(v)
    }
}

/// A run service that plays back `events` for every run it starts, then ends the
/// subscription (or, with `hang`, waits for `cancel` first), and records what it was asked.
#[derive(Default)]
struct Service {
    events: Vec<RunEvent>,
    hang: bool,
    result: Option<RunResult>,
    /// What `start` answers instead of a run id.
    start_error: Option<AwfError>,
    views: Vec<RunView>,
    starts: Mutex<Vec<RunRequest>>,
    resumes: Mutex<Vec<ResumeRequest>>,
    responses: Mutex<Vec<(String, Answer)>>,
    cancels: Mutex<Vec<RunId>>,
    cancelled: CancellationToken,
}

fn envelope(seq: u64, event: RunEvent) -> EventEnvelope {
    EventEnvelope {
        seq,
        run_id: RunId("run-1".into()),
        parent_run_id: None,
        at: SystemTime::UNIX_EPOCH,
        path: match &event {
            RunEvent::StepStarted { step, .. } | RunEvent::StepFinished { step, .. } => {
                step.clone()
            }
            _ => String::new(),
        },
        iteration: None,
        event,
    }
}

struct Playback {
    items: VecDeque<SubscriptionItem>,
    hang: Option<CancellationToken>,
}

#[async_trait::async_trait]
impl Subscription for Playback {
    async fn next(&mut self) -> Option<SubscriptionItem> {
        if let Some(i) = self.items.pop_front() {
            return Some(i);
        }
        if let Some(t) = self.hang.take() {
            t.cancelled().await;
        }
        None
    }
}

fn result(status: RunStatus) -> RunResult {
    RunResult {
        run_id: Some(RunId("run-1".into())),
        workflow: "greet".into(),
        status,
        exit_code: if status == RunStatus::Success { 0 } else { 3 },
        terminal: Some("done".into()),
        duration_ms: 7,
        states: BTreeMap::new(),
        outputs: BTreeMap::new(),
        error: (status != RunStatus::Success)
            .then(|| AwfError::new(ErrorCode::ExecutionCommandFailed, "step boom: oops").body()),
        message: (status == RunStatus::Success).then(|| "greeted Ada".to_owned()),
        spend: None,
    }
}

#[async_trait::async_trait]
impl RunService for Service {
    async fn start(&self, request: RunRequest) -> Result<RunId, AwfError> {
        self.starts.lock().unwrap().push(request);
        match &self.start_error {
            Some(e) => Err(e.clone()),
            None => Ok(RunId("run-1".into())),
        }
    }
    async fn resume(&self, request: ResumeRequest) -> Result<RunId, AwfError> {
        let id = RunId(request.run_id.clone());
        self.resumes.lock().unwrap().push(request);
        Ok(id)
    }
    fn get(&self, run_id: &RunId) -> Result<RunView, AwfError> {
        self.views
            .iter()
            .find(|v| v.run_id == *run_id)
            .cloned()
            .ok_or_else(|| AwfError::new(ErrorCode::UserFacadeRunNotFound, "no such run"))
    }
    fn list(&self) -> Result<Vec<RunView>, AwfError> {
        Ok(self.views.clone())
    }
    fn subscribe(&self, _run_id: &RunId, _from: u64) -> Result<Box<dyn Subscription>, AwfError> {
        Ok(Box::new(Playback {
            items: self
                .events
                .iter()
                .enumerate()
                .map(|(i, e)| SubscriptionItem::Event {
                    position: i as u64 + 1,
                    envelope: Box::new(envelope(i as u64 + 1, e.clone())),
                })
                .collect(),
            hang: self.hang.then(|| self.cancelled.clone()),
        }))
    }
    fn respond(&self, request_id: &str, answer: Answer) -> Result<(), AwfError> {
        self.responses
            .lock()
            .unwrap()
            .push((request_id.to_owned(), answer));
        Ok(())
    }
    fn cancel(&self, run_id: &RunId, _reason: CancelReason) -> Result<(), AwfError> {
        self.cancels.lock().unwrap().push(run_id.clone());
        self.cancelled.cancel();
        Ok(())
    }
    async fn wait(&self, _run_id: &RunId) -> Result<RunResult, AwfError> {
        if self.cancels.lock().unwrap().is_empty() {
            Ok(self
                .result
                .clone()
                .unwrap_or_else(|| result(RunStatus::Success)))
        } else {
            Ok(result(RunStatus::Cancelled))
        }
    }
}

fn greet() -> Workflow {
    let mut who = input("who", InputType::String, true, None);
    who.description = Some("Who to greet".into());
    let mut mood = input("mood", InputType::String, false, Some(json!("happy")));
    mood.validation.enum_values = vec!["happy".into(), "sad".into()];
    let mut times = input("times", InputType::Integer, false, Some(json!(1)));
    times.validation.min = Some(1.0);
    times.validation.max = Some(10.0);
    workflow(
        "greet",
        Some("Greets someone"),
        vec![
            who,
            times,
            mood,
            input("tags", InputType::Array, false, None),
            input("loud", InputType::Boolean, false, Some(json!("yes"))),
        ],
    )
}

fn tools(service: Arc<Service>, repo: &Repo, auto_approve: bool) -> WorkflowTools {
    WorkflowTools::new(
        service,
        repo,
        None,
        WorkflowToolsConfig {
            auto_approve,
            working_dir: "/work".into(),
            ..WorkflowToolsConfig::default()
        },
        &["Read".to_owned()],
    )
    .unwrap()
}

fn call(name: &str, args: Value) -> ToolCall {
    ToolCall {
        name: name.into(),
        arguments: args.as_object().cloned().unwrap_or_default(),
        call_id: Some("1".into()),
    }
}

#[test]
fn names_are_sanitised_and_collisions_get_numbered_suffixes_in_identifier_order() {
    assert_eq!(sanitise("my.flow v2"), "my_flow_v2");
    assert_eq!(sanitise("déploie"), "d_ploie");
    assert_eq!(sanitise(""), "workflow");
    assert_eq!(sanitise(&"x".repeat(100)).len(), MAX_TOOL_NAME);
    let repo = Repo {
        broken: vec!["broken".into()],
        ..Repo::default()
    }
    .with(workflow("a_b", None, vec![]))
    .with(workflow("a.b", None, vec![]))
    .with(workflow("Read", None, vec![]))
    .with(workflow("awf_run_status", None, vec![]))
    .with(workflow(&"y".repeat(70), None, vec![]))
    .with(workflow(&format!("{}.", "y".repeat(70)), None, vec![]));
    let t = tools(Arc::new(Service::default()), &repo, false);
    let names: Vec<String> = t.tools().into_iter().map(|s| s.name).collect();
    let y64 = "y".repeat(64);
    let y62 = "y".repeat(62);
    assert_eq!(
        names,
        vec![
            "Read_2".to_owned(),
            "a_b".into(),
            "a_b_2".into(),
            "awf_run_status_2".into(),
            y64,
            format!("{y62}_2"),
            RUN_STATUS_TOOL.into(),
            RESUME_TOOL.into(),
        ]
    );
    assert_eq!(
        t.skipped(),
        &[(
            "broken".to_owned(),
            "[WORKFLOW.PARSE.YAML_SYNTAX] bad".to_owned()
        )]
    );
}

#[test]
fn the_schema_comes_from_the_declared_inputs() {
    let repo = Repo::default()
        .with(greet())
        .with(workflow("bare", None, vec![]));
    let t = tools(Arc::new(Service::default()), &repo, false);
    let specs = t.tools();
    let bare = specs.iter().find(|s| s.name == "bare").unwrap();
    assert_eq!(bare.description, "Run the workflow bare");
    assert_eq!(
        bare.input_schema,
        json!({"type": "object", "properties": {}})
    );
    let g = specs.iter().find(|s| s.name == "greet").unwrap();
    assert_eq!(g.description, "Greets someone");
    assert_eq!(
        g.input_schema,
        json!({
            "type": "object",
            "properties": {
                "who": {"type": "string", "description": "Who to greet"},
                "times": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1},
                "mood": {"type": "string", "enum": ["happy", "sad"], "default": "happy"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "loud": {"type": "boolean", "default": true}
            },
            "required": ["who"]
        })
    );
}

#[tokio::test]
async fn a_call_runs_the_workflow_with_its_arguments_and_answers_the_result_with_progress() {
    let service = Arc::new(Service {
        events: vec![
            RunEvent::StepStarted {
                step: "hello".into(),
                kind: "command".into(),
                command: None,
            },
            RunEvent::StepFinished {
                step: "hello".into(),
                kind: "command".into(),
                state: Box::new(StepState {
                    status: StepStatus::Completed,
                    ..StepState::running("hello", SystemTime::UNIX_EPOCH)
                }),
            },
        ],
        ..Service::default()
    });
    let t = tools(Arc::clone(&service), &Repo::default().with(greet()), false);
    let reports: Arc<Mutex<Vec<ToolProgress>>> = Arc::default();
    let sink: ProgressSink = {
        let reports = Arc::clone(&reports);
        Arc::new(move |p| reports.lock().unwrap().push(p))
    };
    let out = t
        .call_with_progress(
            call(
                "greet",
                json!({"who": "Ada", "times": 2, "tags": ["a", "b"], "loud": false, "mood": null}),
            ),
            CancellationToken::new(),
            Some(sink),
        )
        .await
        .unwrap();
    assert!(!out.is_error, "{}", out.text);
    assert_eq!(
        out.text,
        "Workflow greet completed: greeted Ada (run run-1, exit code 0, 7 ms)"
    );
    assert_eq!(
        out.structured,
        Some(serde_json::to_value(result(RunStatus::Success)).unwrap())
    );
    let starts = service.starts.lock().unwrap();
    assert_eq!(starts.len(), 1);
    let mut inputs = starts[0].inputs.clone();
    inputs.sort();
    assert_eq!(
        inputs,
        vec![
            ("loud".to_owned(), "false".to_owned()),
            ("tags".into(), r#"["a","b"]"#.into()),
            ("times".into(), "2".into()),
            ("who".into(), "Ada".into()),
        ]
    );
    assert_eq!(starts[0].identifier, "greet");
    assert!(!starts[0].prompt_missing_inputs && !starts[0].auto_approve);
    assert_eq!(starts[0].working_dir, Path::new("/work"));
    let reports = reports.lock().unwrap();
    assert_eq!(
        reports
            .iter()
            .map(|p| (p.progress, p.message.clone().unwrap()))
            .collect::<Vec<_>>(),
        vec![
            (1.0, "hello started".to_owned()),
            (2.0, "hello completed".to_owned())
        ]
    );
}

#[tokio::test]
async fn missing_inputs_and_unknown_arguments_are_errors_and_start_nothing() {
    let service = Arc::new(Service::default());
    let t = tools(Arc::clone(&service), &Repo::default().with(greet()), false);
    let out = t
        .call(call("greet", json!({"times": 2})), CancellationToken::new())
        .await
        .unwrap();
    assert!(out.is_error);
    assert!(
        out.text
            .starts_with("[USER.INPUT.VALIDATION_FAILED] missing required input: who"),
        "{}",
        out.text
    );
    assert!(out.text.contains("Hint: "), "{}", out.text);
    let out = t
        .call(
            call("greet", json!({"who": "Ada", "colour": "red"})),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(out.is_error);
    assert!(out.text.contains("`colour`"), "{}", out.text);
    // A typo of a declared input is told which one it meant (as the CLI says it).
    let out = t
        .call(
            call("greet", json!({"whoo": "Ada"})),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(out.is_error);
    assert_eq!(
        out.text,
        "unknown argument `whoo` (did you mean 'who'?); this tool takes: who, times, mood, tags, loud"
    );
    let out = t
        .call(
            call("awf_run_status", json!({"run_idd": "x", "colour": 1})),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        out.text,
        "unknown arguments `run_idd` (did you mean 'run_id'?), `colour`; this tool takes: run_id, wait"
    );
    assert!(service.starts.lock().unwrap().is_empty());
    let unknown = t
        .call(call("nope", json!({})), CancellationToken::new())
        .await;
    assert_eq!(unknown, Err(ToolCallError::UnknownTool("nope".into())));
}

fn approval(id: &str) -> RunEvent {
    RunEvent::InteractionRequired {
        request: Box::new(InteractionRequest {
            request_id: id.into(),
            step: Some("deploy".into()),
            kind: RequestKind::Approval {
                message: "Deploy?".into(),
                options: vec![ApprovalOption {
                    id: "approve".into(),
                    name: "Approve".into(),
                    kind: ApprovalKind::AllowOnce,
                }],
            },
            timeout_ms: None,
        }),
    }
}

#[tokio::test]
async fn approvals_are_answered_unattended_and_a_failed_run_is_an_error_result() {
    let service = Arc::new(Service {
        events: vec![
            approval("run-1:1"),
            RunEvent::InteractionRequired {
                request: Box::new(InteractionRequest {
                    request_id: "run-1:2".into(),
                    step: Some("chat".into()),
                    kind: RequestKind::ConversationTurn {
                        prompt: "> ".into(),
                    },
                    timeout_ms: None,
                }),
            },
        ],
        result: Some(result(RunStatus::Failure)),
        ..Service::default()
    });
    let repo = Repo::default().with(workflow("gate", None, vec![]));
    let t = tools(Arc::clone(&service), &repo, false);
    let out = t
        .call(call("gate", json!({})), CancellationToken::new())
        .await
        .unwrap();
    assert!(out.is_error);
    assert_eq!(
        out.text,
        "Workflow greet failed: [EXECUTION.COMMAND.FAILED] step boom: oops (run run-1, exit code 3, 7 ms)"
    );
    assert_eq!(
        *service.responses.lock().unwrap(),
        vec![
            (
                "run-1:1".to_owned(),
                Answer::Unattended(UNATTENDED_APPROVAL.into())
            ),
            ("run-1:2".to_owned(), Answer::EndOfInput),
        ]
    );
    // With --yes the run approves gates itself.
    let t = tools(Arc::clone(&service), &repo, true);
    t.call(call("gate", json!({})), CancellationToken::new())
        .await
        .unwrap();
    assert!(service.starts.lock().unwrap()[1].auto_approve);
}

#[tokio::test]
async fn cancelling_the_call_cancels_the_run_and_waits_for_its_end() {
    let service = Arc::new(Service {
        hang: true,
        ..Service::default()
    });
    let repo = Repo::default().with(workflow("long", None, vec![]));
    let t = tools(Arc::clone(&service), &repo, false);
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let out = tokio::spawn(async move { t.call(call("long", json!({})), c).await });
    tokio::task::yield_now().await;
    assert!(service.cancels.lock().unwrap().is_empty());
    cancel.cancel();
    let out = out.await.unwrap().unwrap();
    assert!(out.is_error);
    assert!(
        out.text.starts_with("Workflow greet cancelled"),
        "{}",
        out.text
    );
    assert_eq!(
        *service.cancels.lock().unwrap(),
        vec![RunId("run-1".into())]
    );
}

fn view(id: &str, phase: RunPhase, status: StoredStatus) -> RunView {
    RunView {
        run_id: RunId(id.into()),
        parent_run_id: None,
        workflow: "long".into(),
        phase,
        status,
        current_state: Some("b".into()),
        exit_code: None,
        waiting_until: None,
    }
}

#[tokio::test]
async fn run_status_takes_a_prefix_and_resume_resumes_the_run_it_names() {
    let service = Arc::new(Service {
        views: vec![
            view("run-1", RunPhase::Live, StoredStatus::Running),
            view("abc-2", RunPhase::Finished, StoredStatus::Success),
        ],
        ..Service::default()
    });
    let t = tools(Arc::clone(&service), &Repo::default(), false);
    let live = t
        .call(
            call(RUN_STATUS_TOOL, json!({"run_id": "run"})),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(!live.is_error);
    assert_eq!(live.text, "Run run-1 of long: running, at state b");
    let s = live.structured.unwrap();
    assert_eq!(s["phase"], "live");
    assert_eq!(s["result"], Value::Null);
    let done = t
        .call(
            call(RUN_STATUS_TOOL, json!({"run_id": "abc"})),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        done.structured.unwrap()["result"],
        serde_json::to_value(result(RunStatus::Success)).unwrap()
    );
    let unknown = t
        .call(
            call(RUN_STATUS_TOOL, json!({"run_id": "zzz"})),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(unknown.is_error);
    assert!(
        unknown.text.contains("no run with id 'zzz'"),
        "{}",
        unknown.text
    );
    let resumed = t
        .call(
            call(
                RESUME_TOOL,
                json!({"run_id": "abc", "from": "previous", "inputs": {"n": 3}}),
            ),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(!resumed.is_error, "{}", resumed.text);
    let resumes = service.resumes.lock().unwrap();
    assert_eq!(resumes.len(), 1);
    assert_eq!(resumes[0].run_id, "abc-2");
    assert_eq!(resumes[0].from, ResumeFrom::Previous);
    assert_eq!(resumes[0].inputs, vec![("n".to_owned(), "3".to_owned())]);
    assert!(!resumes[0].lock_held);
}

/// One recorded snapshot, read as the state file holds it.
struct OneSnapshot(awf_domain::ports::store::RunSnapshot);

impl StateStore for OneSnapshot {
    fn load(&self, run_id: &str) -> Result<awf_domain::ports::store::RunSnapshot, AwfError> {
        if run_id == self.0.run_id {
            Ok(self.0.clone())
        } else {
            Err(AwfError::new(ErrorCode::UserFacadeRunNotFound, run_id))
        }
    }
    fn list(&self) -> Result<Vec<awf_domain::ports::store::RunSnapshot>, AwfError> {
        Ok(vec![self.0.clone()])
    }
    fn save(&self, _s: &awf_domain::ports::store::RunSnapshot) -> Result<(), AwfError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_recorded_run_still_running_elsewhere_is_shown_running_not_failed() {
    let snapshot = serde_json::from_value(json!({
        "schema_version": 1, "run_id": "rec-1", "parent_run_id": null, "workflow": "long",
        "workflow_name": "long", "workflow_path": null, "status": "running",
        "current_state": "b", "inputs": {}, "states": {},
        "started_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:05Z",
        "completed_at": null, "exit_code": null, "terminal": null, "error": null
    }))
    .unwrap();
    let service = Arc::new(Service {
        views: vec![view("rec-1", RunPhase::Recorded, StoredStatus::Running)],
        ..Service::default()
    });
    let t = WorkflowTools::new(
        service,
        &Repo::default(),
        Some(Arc::new(OneSnapshot(snapshot))),
        WorkflowToolsConfig::default(),
        &[],
    )
    .unwrap();
    let out = t
        .call(
            call(RUN_STATUS_TOOL, json!({"run_id": "rec"})),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(!out.is_error);
    assert_eq!(out.text, "Run rec-1 of long: running, at state b");
    let s = out.structured.unwrap();
    assert_eq!(s["phase"], "recorded");
    assert_eq!(s["result"], Value::Null);
}

#[test]
fn a_secret_default_is_not_in_the_schema() {
    let repo = Repo::default().with(workflow(
        "deploy",
        None,
        vec![
            input(
                "api_token",
                InputType::String,
                false,
                Some(json!("supersecret-123")),
            ),
            input("region", InputType::String, false, Some(json!("eu"))),
        ],
    ));
    let t = tools(Arc::new(Service::default()), &repo, false);
    let spec = t.tools().into_iter().find(|s| s.name == "deploy").unwrap();
    assert_eq!(
        spec.input_schema,
        json!({
            "type": "object",
            "properties": {
                "api_token": {"type": "string"},
                "region": {"type": "string", "default": "eu"}
            }
        })
    );
    assert!(!spec.input_schema.to_string().contains("supersecret"));
}

#[test]
fn a_workflow_the_check_refuses_is_left_out_and_said_why() {
    let repo = Repo::default()
        .with(greet())
        .with(workflow("bare", None, vec![]));
    let t = WorkflowTools::new_checked(
        Arc::new(Service::default()),
        &repo,
        None,
        WorkflowToolsConfig::default(),
        &[],
        &|e| {
            (e.name == "bare").then(|| {
                "[WORKFLOW.VALIDATION.MISSING_STATE] initial state nowhere does not exist"
                    .to_owned()
            })
        },
    )
    .unwrap();
    let names: Vec<String> = t.tools().into_iter().map(|s| s.name).collect();
    assert!(names.contains(&"greet".to_owned()), "{names:?}");
    assert!(!names.contains(&"bare".to_owned()), "{names:?}");
    assert_eq!(
        t.skipped(),
        [(
            "bare".to_owned(),
            "[WORKFLOW.VALIDATION.MISSING_STATE] initial state nowhere does not exist".to_owned()
        )]
    );
}

/// New user: a refused input value's hint named the literal `awf run <workflow> --help`; over
/// MCP it names the tool that was called (refused at the start, or in the run's result).
#[tokio::test]
async fn a_refused_inputs_hint_names_the_tool_called() {
    let refused = AwfError::new(
        ErrorCode::UserInputValidationFailed,
        "input validation failed: inputs.times: value 90 exceeds maximum 10",
    )
    .with_hint(crate::inputs::INPUTS_HELP_HINT);
    let said = "the `greet` tool's inputSchema (tools/list) lists each input of workflow greet \
                with its type and rules";
    let service = Arc::new(Service {
        start_error: Some(refused.clone()),
        ..Service::default()
    });
    let t = tools(Arc::clone(&service), &Repo::default().with(greet()), false);
    let out = t
        .call(
            call("greet", json!({"who": "Ada", "times": 90})),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(out.is_error);
    assert_eq!(
        out.text,
        format!(
            "[USER.INPUT.VALIDATION_FAILED] input validation failed: inputs.times: value 90 \
             exceeds maximum 10\nHint: {said}"
        )
    );
    let mut failed = result(RunStatus::Failure);
    failed.error = Some(refused.body());
    let service = Arc::new(Service {
        result: Some(failed),
        ..Service::default()
    });
    let t = tools(Arc::clone(&service), &Repo::default().with(greet()), false);
    let out = t
        .call(
            call("greet", json!({"who": "Ada"})),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    let hints = out.structured.as_ref().map(|v| v["error"]["hints"].clone());
    assert_eq!(hints, Some(json!([said])));
}

/// New user: `tags: "notarray"` for `{"type": "array", "items": {"type": "string"}}` ran with
/// tags=[notarray], and `times: "3"` for `{"type": "integer"}` ran too. Arguments that break
/// the published `inputSchema` are refused as a range violation is, and nothing runs.
#[tokio::test]
async fn arguments_that_break_the_published_schema_are_refused() {
    let service = Arc::new(Service::default());
    let t = tools(Arc::clone(&service), &Repo::default().with(greet()), false);
    let out = t
        .call(
            call(
                "greet",
                json!({"who": "Ada", "tags": "notarray", "times": "3", "loud": "yes"}),
            ),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(out.is_error);
    assert_eq!(
        out.text,
        "[USER.INPUT.VALIDATION_FAILED] input validation failed: inputs.times: expected an \
         integer, not the string \"3\"; inputs.tags: expected an array of strings, not the \
         string \"notarray\"; inputs.loud: expected a boolean, not the string \"yes\"\nHint: \
         the `greet` tool's inputSchema (tools/list) lists each input of workflow greet with \
         its type and rules"
    );
    let out = t
        .call(
            call("greet", json!({"who": 7, "tags": ["a", 1], "times": 2.5})),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(
        out.text.contains(
            "inputs.who: expected a string, not an integer (7); inputs.times: expected an integer, \
         not a number (2.5); inputs.tags: expected an array of strings, not an array holding a \
         non-string"
        ),
        "{}",
        out.text
    );
    assert!(service.starts.lock().unwrap().is_empty(), "nothing ran");
    // Fitting values (an integer written 3.0 too) run.
    let out = t
        .call(
            call(
                "greet",
                json!({"who": "Ada", "tags": ["a"], "times": 3.0, "loud": true}),
            ),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(
        !out.text.contains("input validation failed"),
        "{}",
        out.text
    );
}
