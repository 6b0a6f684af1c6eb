//! The server over a scripted, recording [`RunService`]: what reaches the run request, the
//! order of a turn's frames, cancel, approvals, stop reasons, parked questions.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::SystemTime;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::error::ErrorBody;
use awf_domain::event::EventEnvelope;
use awf_domain::event::RunEvent;
use awf_domain::interaction::Answer;
use awf_domain::interaction::ApprovalKind;
use awf_domain::interaction::ApprovalOption;
use awf_domain::interaction::InteractionRequest;
use awf_domain::interaction::RequestKind;
use awf_domain::mask::Masker;
use awf_domain::ports::RunService;
use awf_domain::ports::facade::ResumeRequest;
use awf_domain::ports::facade::RunRequest;
use awf_domain::ports::repository::LoadedWorkflow;
use awf_domain::ports::repository::WorkflowEntry;
use awf_domain::ports::repository::WorkflowRepository;
use awf_domain::ports::service::RunView;
use awf_domain::ports::service::Subscription;
use awf_domain::ports::service::SubscriptionItem;
use awf_domain::run::CancelReason;
use awf_domain::run::RunId;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use awf_domain::run::StepState;
use awf_domain::run::StepStatus;
use serde_json::Value;
use serde_json::json;
use tokio::io::AsyncBufReadExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::AcpConfig;
use super::serve;

#[derive(Default)]
struct FakeService {
    starts: Mutex<Vec<RunRequest>>,
    feeds: Mutex<Vec<mpsc::UnboundedSender<SubscriptionItem>>>,
    subs: Mutex<std::collections::HashMap<String, mpsc::UnboundedReceiver<SubscriptionItem>>>,
    answers: Mutex<Vec<(String, Answer)>>,
    cancels: Mutex<Vec<RunId>>,
}

struct FakeSub(mpsc::UnboundedReceiver<SubscriptionItem>);

#[async_trait::async_trait]
impl Subscription for FakeSub {
    async fn next(&mut self) -> Option<SubscriptionItem> {
        self.0.recv().await
    }
}

#[async_trait::async_trait]
impl RunService for FakeService {
    async fn start(&self, request: RunRequest) -> Result<RunId, AwfError> {
        let mut starts = self.starts.lock().unwrap();
        starts.push(request);
        let id = format!("r{}", starts.len());
        let (tx, rx) = mpsc::unbounded_channel();
        self.feeds.lock().unwrap().push(tx);
        self.subs.lock().unwrap().insert(id.clone(), rx);
        Ok(RunId(id))
    }
    async fn resume(&self, _: ResumeRequest) -> Result<RunId, AwfError> {
        Err(AwfError::new(ErrorCode::UserInputValidationFailed, "no"))
    }
    fn get(&self, _: &RunId) -> Result<RunView, AwfError> {
        Err(AwfError::new(ErrorCode::UserFacadeRunNotFound, "no"))
    }
    fn list(&self) -> Result<Vec<RunView>, AwfError> {
        Ok(Vec::new())
    }
    fn subscribe(&self, run_id: &RunId, _from: u64) -> Result<Box<dyn Subscription>, AwfError> {
        let rx = self.subs.lock().unwrap().remove(&run_id.0);
        rx.map(|r| Box::new(FakeSub(r)) as Box<dyn Subscription>)
            .ok_or_else(|| AwfError::new(ErrorCode::UserFacadeRunNotFound, "replay not scripted"))
    }
    fn respond(&self, request_id: &str, answer: Answer) -> Result<(), AwfError> {
        self.answers
            .lock()
            .unwrap()
            .push((request_id.to_owned(), answer));
        Ok(())
    }
    fn cancel(&self, run_id: &RunId, _: CancelReason) -> Result<(), AwfError> {
        self.cancels.lock().unwrap().push(run_id.clone());
        Ok(())
    }
    async fn wait(&self, _: &RunId) -> Result<RunResult, AwfError> {
        Err(AwfError::new(ErrorCode::UserFacadeRunNotFound, "no"))
    }
}

struct NoWorkflows;

impl WorkflowRepository for NoWorkflows {
    fn load(&self, id: &str, _: Option<&std::path::Path>) -> Result<LoadedWorkflow, AwfError> {
        Err(AwfError::new(
            ErrorCode::UserFacadeWorkflowNotFound,
            format!("workflow not found: {id}"),
        ))
    }
    fn list(&self) -> Result<Vec<WorkflowEntry>, AwfError> {
        Ok(Vec::new())
    }
}

struct Client {
    svc: Arc<FakeService>,
    to: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    from: tokio::io::BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>,
    seq: u64,
}

impl Client {
    async fn start() -> Self {
        Self::start_with(Masker::default()).await
    }

    async fn start_with(masker: Masker) -> Self {
        Self::start_full(masker, json!({})).await
    }

    /// A client that advertises `caps` (`clientCapabilities`).
    async fn start_caps(caps: Value) -> Self {
        Self::start_full(Masker::default(), caps).await
    }

    async fn start_full(masker: Masker, caps: Value) -> Self {
        let svc = Arc::new(FakeService::default());
        let (client, server) = tokio::io::duplex(1 << 20);
        let (sr, sw) = tokio::io::split(server);
        let (cr, cw) = tokio::io::split(client);
        let cfg = AcpConfig {
            service: Arc::clone(&svc) as Arc<dyn RunService>,
            repository: Arc::new(NoWorkflows),
            default_workflow: None,
            env: Vec::new(),
            config_inputs: serde_json::Map::new(),
            masker,
            version: "test".into(),
            max_line_bytes: 1 << 20,
            cancel_wait: Duration::from_millis(300),
            shutdown_wait: Duration::from_millis(300),
            validate: None,
            sessions_dir: None,
        };
        tokio::spawn(serve(
            cfg,
            tokio::io::BufReader::new(sr),
            sw,
            CancellationToken::new(),
        ));
        let mut c = Self {
            svc,
            to: cw,
            from: tokio::io::BufReader::new(cr),
            seq: 0,
        };
        c.send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": 1, "clientCapabilities": caps}}))
            .await;
        c.recv().await;
        c
    }

    async fn send(&mut self, v: Value) {
        let mut l = v.to_string().into_bytes();
        l.push(b'\n');
        self.to.write_all(&l).await.unwrap();
    }

    async fn send_raw(&mut self, line: &str) {
        self.to.write_all(line.as_bytes()).await.unwrap();
        self.to.write_all(b"\n").await.unwrap();
    }

    async fn recv(&mut self) -> Value {
        let mut l = String::new();
        tokio::time::timeout(Duration::from_secs(30), self.from.read_line(&mut l))
            .await
            .expect("a frame within 30 s")
            .unwrap();
        serde_json::from_str(&l).unwrap()
    }

    /// Frames up to (and with) the first matching `pred`.
    async fn until(&mut self, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut out = Vec::new();
        loop {
            let f = self.recv().await;
            let done = pred(&f);
            out.push(f);
            if done {
                return out;
            }
        }
    }

    async fn session(&mut self, servers: Value) -> String {
        self.send(json!({"jsonrpc": "2.0", "id": 1, "method": "session/new",
            "params": {"cwd": std::env::temp_dir(), "mcpServers": servers}}))
            .await;
        let r = self.until(|f| f["id"] == 1).await;
        let sid = r.last().unwrap()["result"]["sessionId"]
            .as_str()
            .unwrap()
            .to_owned();
        // available_commands_update
        self.recv().await;
        sid
    }

    async fn prompt(&mut self, sid: &str, text: &str, id: u64) {
        self.send(
            json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
            "params": {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}}),
        )
        .await;
    }

    /// Waits for the run of the `n`th start (1-based) and feeds it `event`.
    async fn feed(&mut self, n: usize, path: &str, event: RunEvent) {
        for _ in 0..3000 {
            if self.svc.feeds.lock().unwrap().len() >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.seq += 1;
        let env = EventEnvelope {
            seq: self.seq,
            run_id: RunId(format!("r{n}")),
            parent_run_id: None,
            at: SystemTime::now(),
            path: path.into(),
            iteration: None,
            event,
        };
        self.svc.feeds.lock().unwrap()[n - 1]
            .send(SubscriptionItem::Event {
                position: self.seq,
                envelope: Box::new(env),
            })
            .unwrap();
    }
}

fn finished(status: RunStatus, error: Option<(&str, ErrorCode)>) -> RunEvent {
    RunEvent::RunFinished {
        result: Box::new(RunResult {
            run_id: Some(RunId("r1".into())),
            workflow: "wf".into(),
            status,
            exit_code: 0,
            terminal: None,
            duration_ms: 1,
            states: std::collections::BTreeMap::new(),
            outputs: std::collections::BTreeMap::new(),
            error: error.map(|(m, code)| ErrorBody {
                code,
                message: m.into(),
                hints: Vec::new(),
                details: std::collections::BTreeMap::new(),
            }),
            message: None,
            spend: None,
        }),
    }
}

fn step_done(name: &str, status: StepStatus) -> RunEvent {
    let mut st = StepState::running(name, SystemTime::now());
    st.status = status;
    RunEvent::StepFinished {
        step: name.into(),
        kind: "command".into(),
        state: Box::new(st),
    }
}

fn approval(id: &str) -> RunEvent {
    RunEvent::InteractionRequired {
        request: Box::new(InteractionRequest {
            request_id: id.into(),
            step: Some("ship".into()),
            kind: RequestKind::Approval {
                message: "Ship it?".into(),
                options: vec![
                    ApprovalOption {
                        id: "ok".into(),
                        name: "OK".into(),
                        kind: ApprovalKind::AllowOnce,
                    },
                    ApprovalOption {
                        id: "no".into(),
                        name: "No".into(),
                        kind: ApprovalKind::RejectOnce,
                    },
                ],
            },
            timeout_ms: None,
        }),
    }
}

#[tokio::test]
async fn the_run_request_carries_the_editor_mcp_servers_and_the_cwd() {
    let mut c = Client::start().await;
    let sid = c
        .session(json!([{"name": "fs", "command": "/bin/fs", "args": ["-a"], "env": [{"name": "K", "value": "vvvv"}]},
                        {"name": "fs", "command": "/bin/fs2", "args": [], "env": []}]))
        .await;
    c.prompt(&sid, "/wf a=b c='d e'", 2).await;
    c.feed(
        1,
        "s",
        RunEvent::StepStarted {
            step: "s".into(),
            kind: "command".into(),
            command: None,
        },
    )
    .await;
    c.feed(1, "s", step_done("s", StepStatus::Completed)).await;
    c.feed(1, "", finished(RunStatus::Success, None)).await;
    let frames = c.until(|f| f["id"] == 2).await;
    let start = c.svc.starts.lock().unwrap()[0].clone();
    assert_eq!(start.identifier, "wf");
    assert_eq!(
        start.inputs,
        vec![("a".into(), "b".into()), ("c".into(), "d e".into())]
    );
    assert_eq!(start.working_dir, std::env::temp_dir());
    assert!(start.prompt_missing_inputs && !start.auto_approve);
    assert_eq!(
        start.mcp_servers.len(),
        1,
        "a repeated name: the later wins"
    );
    assert_eq!(start.mcp_servers[0].command, "/bin/fs2");
    // The step's card completes, then the response: nothing after it.
    let last = frames.last().unwrap();
    assert_eq!(last["result"]["stopReason"], "end_turn");
    let statuses: Vec<&str> = frames
        .iter()
        .filter_map(|f| f["params"]["update"]["status"].as_str())
        .collect();
    assert_eq!(statuses, ["pending", "in_progress", "completed"]);
}

/// The step's `tool_call` shows the command as the engine rendered it (`StepStarted.command`,
/// masked), not a template.
#[tokio::test]
async fn tool_call_raw_input_is_the_rendered_command() {
    let mut c = Client::start().await;
    let sid = c.session(json!([])).await;
    c.prompt(&sid, "/wf", 2).await;
    c.feed(
        1,
        "s",
        RunEvent::StepStarted {
            step: "s".into(),
            kind: "command".into(),
            command: Some("deploy prod --token ***".into()),
        },
    )
    .await;
    c.feed(1, "s", step_done("s", StepStatus::Completed)).await;
    c.feed(1, "", finished(RunStatus::Success, None)).await;
    let frames = c.until(|f| f["id"] == 2).await;
    let call = frames
        .iter()
        .map(|f| &f["params"]["update"])
        .find(|u| u["sessionUpdate"] == "tool_call")
        .expect("the step's tool_call");
    assert_eq!(
        call["rawInput"],
        json!({"command": "deploy prod --token ***"})
    );
}

#[tokio::test]
async fn cancel_answers_cancelled_even_when_the_run_does_not_end() {
    let mut c = Client::start().await;
    let sid = c.session(json!([])).await;
    c.prompt(&sid, "/wf", 2).await;
    c.feed(
        1,
        "s",
        RunEvent::StepStarted {
            step: "s".into(),
            kind: "command".into(),
            command: None,
        },
    )
    .await;
    c.until(|f| f["params"]["update"]["status"] == "in_progress")
        .await;
    c.send(json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}))
        .await;
    let frames = c.until(|f| f["id"] == 2).await;
    assert_eq!(frames.last().unwrap()["result"]["stopReason"], "cancelled");
    assert_eq!(*c.svc.cancels.lock().unwrap(), vec![RunId("r1".into())]);
    // The open card is closed as failed before the response.
    assert!(
        frames
            .iter()
            .any(|f| f["params"]["update"]["status"] == "failed")
    );
}

#[tokio::test]
async fn approvals_match_option_ids_and_allow_always_is_remembered_per_gate() {
    let mut c = Client::start().await;
    let sid = c.session(json!([])).await;
    c.prompt(&sid, "/wf", 2).await;
    c.feed(1, "ship", approval("q1")).await;
    let ask = c
        .until(|f| f["method"] == "session/request_permission")
        .await;
    let ask = ask.last().unwrap();
    assert_eq!(
        ask["params"]["toolCall"]["content"][0]["content"]["text"],
        "Ship it?"
    );
    c.send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": {"outcome": "selected", "optionId": "awf:allow_always"}}}))
        .await;
    let closed = c
        .until(|f| f["params"]["update"]["status"] == "completed")
        .await;
    // The gate's card says what was chosen (new user: it said the gate's "Approve").
    assert_eq!(
        closed.last().unwrap()["params"]["update"]["content"][0]["content"]["text"],
        "Always approve 'ship'"
    );
    assert_eq!(
        *c.svc.answers.lock().unwrap(),
        vec![("q1".into(), Answer::Option("ok".into()))]
    );
    c.feed(1, "", finished(RunStatus::Success, None)).await;
    c.until(|f| f["id"] == 2).await;
    // Second run, same gate: answered without asking.
    c.prompt(&sid, "/wf", 3).await;
    c.feed(2, "ship", approval("q2")).await;
    c.feed(2, "", finished(RunStatus::Success, None)).await;
    let frames = c.until(|f| f["id"] == 3).await;
    assert!(
        frames
            .iter()
            .all(|f| f["method"] != "session/request_permission")
    );
    assert_eq!(
        c.svc.answers.lock().unwrap()[1],
        ("q2".into(), Answer::Option("ok".into()))
    );
    // Another workflow's gate is asked; an unknown option id rejects.
    c.prompt(&sid, "/other", 4).await;
    c.feed(3, "ship", approval("q3")).await;
    let ask = c
        .until(|f| f["method"] == "session/request_permission")
        .await;
    let ask = ask.last().unwrap().clone();
    c.send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": {"outcome": "selected", "optionId": "bogus"}}}))
        .await;
    c.until(|f| f["params"]["update"]["status"] == "failed")
        .await;
    assert_eq!(
        c.svc.answers.lock().unwrap()[2],
        ("q3".into(), Answer::Option("no".into()))
    );
}

#[tokio::test]
async fn failures_map_to_end_turn_or_the_providers_stop_reason() {
    let mut c = Client::start().await;
    let sid = c.session(json!([])).await;
    let cases = [
        ("step failed: exit status 1", "end_turn"),
        ("claude: stop_reason: max_tokens", "max_tokens"),
        ("the model refused to answer", "refusal"),
    ];
    for (i, (msg, want)) in cases.iter().enumerate() {
        let id = 10 + i as u64;
        c.prompt(&sid, "/wf", id).await;
        c.feed(
            i + 1,
            "",
            finished(
                RunStatus::Failure,
                Some((msg, ErrorCode::ExecutionCommandFailed)),
            ),
        )
        .await;
        let frames = c.until(|f| f["id"] == id).await;
        assert_eq!(
            frames.last().unwrap()["result"]["stopReason"],
            *want,
            "{msg}"
        );
        let text: String = frames
            .iter()
            .filter_map(|f| f["params"]["update"]["content"]["text"].as_str())
            .collect();
        assert!(text.contains(msg), "{text}");
    }
}

#[tokio::test]
async fn a_conversation_turn_parks_and_the_next_prompt_answers_it() {
    let mut c = Client::start().await;
    let sid = c.session(json!([])).await;
    c.prompt(&sid, "/wf", 2).await;
    c.feed(
        1,
        "chat",
        RunEvent::InteractionRequired {
            request: Box::new(InteractionRequest {
                request_id: "t1".into(),
                step: Some("chat".into()),
                kind: RequestKind::ConversationTurn {
                    prompt: "What next?".into(),
                },
                timeout_ms: None,
            }),
        },
    )
    .await;
    let frames = c.until(|f| f["id"] == 2).await;
    assert_eq!(frames.last().unwrap()["result"]["stopReason"], "end_turn");
    assert!(
        frames
            .iter()
            .any(|f| f["params"]["update"]["content"]["text"] == "What next?")
    );
    // The next prompt, even a slash command, is the answer; the same run goes on.
    c.prompt(&sid, "/not-a-command really", 3).await;
    c.feed(1, "", finished(RunStatus::Success, None)).await;
    let frames = c.until(|f| f["id"] == 3).await;
    assert_eq!(frames.last().unwrap()["result"]["stopReason"], "end_turn");
    assert_eq!(c.svc.starts.lock().unwrap().len(), 1);
    assert_eq!(
        *c.svc.answers.lock().unwrap(),
        vec![("t1".into(), Answer::Value("/not-a-command really".into()))]
    );
}

#[tokio::test]
async fn agent_text_thoughts_and_tool_calls_are_projected_under_the_step() {
    let mut c = Client::start().await;
    let sid = c.session(json!([])).await;
    c.prompt(&sid, "/wf", 2).await;
    c.feed(
        1,
        "think",
        RunEvent::StepStarted {
            step: "think".into(),
            kind: "agent".into(),
            command: None,
        },
    )
    .await;
    c.feed(
        1,
        "think",
        RunEvent::AgentThoughtChunk {
            step: "think".into(),
            text: "hmm".into(),
        },
    )
    .await;
    c.feed(
        1,
        "think",
        RunEvent::ToolCall {
            step: "think".into(),
            id: "t1".into(),
            name: "mcp__awf-proxy__Read".into(),
            input: json!({"file_path": "a.txt"}),
            fidelity: awf_domain::event::ToolFidelity::Agent,
        },
    )
    .await;
    c.feed(
        1,
        "think",
        RunEvent::ToolCallResult {
            step: "think".into(),
            id: "t1".into(),
            output: "contents".into(),
            is_error: false,
            fidelity: awf_domain::event::ToolFidelity::Agent,
        },
    )
    .await;
    // The proxy's own record of that call (fidelity router): the one card shown for it.
    c.feed(
        1,
        "think",
        RunEvent::ToolCall {
            step: "think".into(),
            id: "1".into(),
            name: "Read".into(),
            input: json!({"path": "a.txt"}),
            fidelity: awf_domain::event::ToolFidelity::Router,
        },
    )
    .await;
    c.feed(
        1,
        "think",
        RunEvent::ToolCallResult {
            step: "think".into(),
            id: "1".into(),
            output: "contents".into(),
            is_error: false,
            fidelity: awf_domain::event::ToolFidelity::Router,
        },
    )
    .await;
    c.feed(
        1,
        "think",
        RunEvent::ToolCall {
            step: "think".into(),
            id: "t2".into(),
            name: "Bash".into(),
            input: json!({"command": "ls"}),
            fidelity: awf_domain::event::ToolFidelity::Agent,
        },
    )
    .await;
    c.feed(
        1,
        "think",
        RunEvent::AgentMessageChunk {
            step: "think".into(),
            text: "done".into(),
        },
    )
    .await;
    c.feed(1, "think", step_done("think", StepStatus::Completed))
        .await;
    c.feed(1, "", finished(RunStatus::Success, None)).await;
    let frames = c.until(|f| f["id"] == 2).await;
    let ups: Vec<&Value> = frames.iter().map(|f| &f["params"]["update"]).collect();
    let step = "r1:think:1";
    assert!(ups.iter().any(|u| u["sessionUpdate"] == "tool_call"
        && u["toolCallId"] == step
        && u["kind"] == "think"));
    assert!(
        ups.iter()
            .any(|u| u["sessionUpdate"] == "agent_thought_chunk" && u["content"]["text"] == "hmm")
    );
    assert!(
        ups.iter()
            .any(|u| u["sessionUpdate"] == "agent_message_chunk" && u["content"]["text"] == "done")
    );
    // The agent's report of its proxied call gets no card (the proxy's record has one).
    assert!(
        !ups.iter().any(|u| u["toolCallId"] == "r1:think:1/t1"),
        "{ups:?}"
    );
    let read = ups
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call" && u["toolCallId"] == "r1:think:1/1")
        .expect("the proxy's Read, nested");
    assert_eq!(read["kind"], "read");
    assert_eq!(read["rawInput"]["path"], "a.txt");
    assert!(ups.iter().any(|u| u["toolCallId"] == "r1:think:1/1"
        && u["status"] == "completed"
        && u["content"][0]["content"]["text"] == "contents"));
    // t2 never got a result: closed when its step ended, before the step's own card.
    let pos = |pred: &dyn Fn(&Value) -> bool| ups.iter().position(|u| pred(u)).unwrap();
    let t2_closed = pos(&|u| u["toolCallId"] == "r1:think:1/t2" && u["status"] == "completed");
    let step_closed = pos(&|u| u["toolCallId"] == step && u["status"] == "completed");
    assert!(t2_closed < step_closed);
    // Agent text was streamed: no "completed." filler.
    assert!(!frames.iter().any(|f| {
        f["params"]["update"]["content"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("completed."))
    }));
}

#[tokio::test]
async fn a_cancel_request_for_the_prompt_cancels_its_turn() {
    let mut c = Client::start().await;
    let sid = c.session(json!([])).await;
    c.prompt(&sid, "/wf", 7).await;
    c.feed(
        1,
        "s",
        RunEvent::StepStarted {
            step: "s".into(),
            kind: "command".into(),
            command: None,
        },
    )
    .await;
    c.until(|f| f["params"]["update"]["status"] == "in_progress")
        .await;
    c.send(json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 7}}))
        .await;
    let frames = c.until(|f| f["id"] == 7).await;
    assert_eq!(frames.last().unwrap()["result"]["stopReason"], "cancelled");
    assert_eq!(c.svc.cancels.lock().unwrap().len(), 1);
}

#[test]
fn input_hints_name_required_and_optional_inputs() {
    use awf_domain::workflow::InputDef;
    use awf_domain::workflow::InputType;
    use awf_domain::workflow::InputValidation;
    let def = |name: &str, ty: InputType, required: bool, values: &[&str]| InputDef {
        name: name.into(),
        ty,
        description: None,
        required,
        default: None,
        validation: InputValidation {
            enum_values: values.iter().map(|v| (*v).to_owned()).collect(),
            ..InputValidation::default()
        },
    };
    let hint = super::input_hint(&[
        def("file", InputType::String, true, &[]),
        def("kind", InputType::Untyped, false, &["a", "b"]),
        def("note", InputType::Untyped, true, &[]),
        def("n", InputType::Integer, false, &[]),
    ]);
    assert_eq!(hint, "file=<string> [kind=a|b] note=<value> [n=<integer>]");
}

/// A slash command's inputs never carry a secret input's default: `***` and `secret: true`
/// instead (an empty one stays `""`); other inputs are as declared.
#[test]
fn command_inputs_mask_a_secret_default() {
    use awf_domain::workflow::InputDef;
    use awf_domain::workflow::InputType;
    let def = |name: &str, default: Option<Value>| InputDef {
        name: name.into(),
        ty: InputType::String,
        description: None,
        required: false,
        default,
        validation: awf_domain::workflow::InputValidation::default(),
    };
    let token = super::command_input(&def("api_token", Some(json!("s3cr3t"))));
    assert_eq!(token["default"], "***", "{token}");
    assert_eq!(token["secret"], true, "{token}");
    assert!(!token.to_string().contains("s3cr3t"), "{token}");
    let empty = super::command_input(&def("api_token", Some(json!(""))));
    assert_eq!(empty["default"], "", "{empty}");
    assert_eq!(empty["secret"], true, "{empty}");
    let region = super::command_input(&def("region", Some(json!("eu"))));
    assert_eq!(region["default"], "eu", "{region}");
    assert!(region.get("secret").is_none(), "{region}");
}

#[tokio::test]
async fn a_permission_request_is_bounded_by_the_gates_timeout() {
    let mut c = Client::start().await;
    let sid = c.session(json!([])).await;
    c.prompt(&sid, "/wf", 2).await;
    let RunEvent::InteractionRequired { mut request } = approval("q1") else {
        unreachable!()
    };
    request.timeout_ms = Some(50);
    c.feed(1, "ship", RunEvent::InteractionRequired { request })
        .await;
    let asked = c
        .until(|f| f["method"] == "session/request_permission")
        .await;
    let rid = asked.last().unwrap()["id"].clone();
    // Nobody answers: the request is withdrawn when the gate's time is up.
    let withdrawn = c.until(|f| f["method"] == "$/cancel_request").await;
    assert_eq!(withdrawn.last().unwrap()["params"]["requestId"], rid);
    assert!(
        c.svc.answers.lock().unwrap().is_empty(),
        "the run resolves its own timeout"
    );
    c.feed(
        1,
        "ship",
        RunEvent::InteractionResolved {
            request_id: "q1".into(),
            resolution: awf_domain::interaction::Resolution::TimedOut,
        },
    )
    .await;
    let closed = c
        .until(|f| {
            let u = &f["params"]["update"];
            u["sessionUpdate"] == "tool_call_update" && u["toolCallId"] == "r1:ship:approval"
        })
        .await;
    assert_eq!(
        closed.last().unwrap()["params"]["update"]["status"],
        "completed"
    );
    c.feed(
        1,
        "",
        finished(
            RunStatus::Failure,
            Some(("approval timed out", ErrorCode::ExecutionCommandFailed)),
        ),
    )
    .await;
    let frames = c.until(|f| f["id"] == 2).await;
    assert_eq!(frames.last().unwrap()["result"]["stopReason"], "end_turn");
}

#[tokio::test]
async fn a_cancelled_permission_outcome_cancels_the_turn() {
    let mut c = Client::start().await;
    let sid = c.session(json!([])).await;
    c.prompt(&sid, "/wf", 2).await;
    c.feed(1, "ship", approval("q1")).await;
    let asked = c
        .until(|f| f["method"] == "session/request_permission")
        .await;
    let rid = asked.last().unwrap()["id"].clone();
    c.send(json!({"jsonrpc": "2.0", "id": rid, "result": {"outcome": {"outcome": "cancelled"}}}))
        .await;
    let frames = c.until(|f| f["id"] == 2).await;
    assert_eq!(frames.last().unwrap()["result"]["stopReason"], "cancelled");
    assert_eq!(*c.svc.cancels.lock().unwrap(), vec![RunId("r1".into())]);
}

#[tokio::test]
async fn a_secret_split_across_two_chunks_never_reaches_a_frame() {
    let mut m = Masker::default();
    m.add("hunter2-SECRET-9876");
    let mut c = Client::start_with(m).await;
    let sid = c.session(json!([])).await;
    c.prompt(&sid, "/wf", 2).await;
    c.feed(
        1,
        "s",
        RunEvent::StepStarted {
            step: "s".into(),
            kind: "command".into(),
            command: None,
        },
    )
    .await;
    for piece in ["out: hunter2-SEC", "RET-9876 and é", "\n"] {
        c.feed(
            1,
            "s",
            RunEvent::OutputChunk {
                step: "s".into(),
                stream: awf_domain::event::OutputStream::Stdout,
                text: piece.into(),
            },
        )
        .await;
    }
    c.feed(
        1,
        "s",
        RunEvent::AgentMessageChunk {
            step: "s".into(),
            text: "agent says hunter2-".into(),
        },
    )
    .await;
    c.feed(
        1,
        "s",
        RunEvent::AgentMessageChunk {
            step: "s".into(),
            text: "SECRET-9876".into(),
        },
    )
    .await;
    c.feed(1, "s", step_done("s", StepStatus::Completed)).await;
    c.feed(1, "", finished(RunStatus::Success, None)).await;
    let frames = c.until(|f| f["id"] == 2).await;
    let all: String = frames.iter().map(ToString::to_string).collect();
    for part in ["hunter2-SEC", "RET-9876", "hunter2-", "SECRET-9876"] {
        assert!(!all.contains(part), "{part} leaked: {all}");
    }
    let text: String = frames
        .iter()
        .filter(|f| f["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|f| f["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert!(text.contains("out: *** and é\n"), "{text}");
    assert!(text.contains("agent says ***"), "{text}");
}

/// The socket path the `n`th run request (1-based) carries, once it started.
async fn fs_delegate_of(c: &Client, n: usize) -> Option<std::path::PathBuf> {
    for _ in 0..3000 {
        if let Some(r) = c.svc.starts.lock().unwrap().get(n - 1) {
            return r.fs_delegate.clone();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("run {n} never started")
}

#[tokio::test]
async fn a_client_offering_read_and_write_gets_the_sessions_file_channel() {
    use tokio::io::AsyncBufReadExt as _;
    let mut c = Client::start_caps(
        json!({"fs": {"readTextFile": true, "writeTextFile": true}, "terminal": false}),
    )
    .await;
    let sid = c.session(json!([])).await;
    c.prompt(&sid, "/wf", 2).await;
    let sock = fs_delegate_of(&c, 1).await.expect("a file channel");
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777
    };
    assert_eq!(mode, 0o600);
    // A proxy's Read and Write, relayed to the client with the session id.
    let exchange = tokio::spawn({
        let sock = sock.clone();
        async move {
            let stream = tokio::net::UnixStream::connect(&sock).await.unwrap();
            let (r, mut w) = stream.into_split();
            let mut r = tokio::io::BufReader::new(r);
            let mut replies = Vec::new();
            for req in [
                json!({"op": "read", "path": "/w/a.txt"}),
                json!({"op": "write", "path": "/w/b.txt", "content": "new"}),
            ] {
                w.write_all(format!("{req}\n").as_bytes()).await.unwrap();
                let mut l = String::new();
                r.read_line(&mut l).await.unwrap();
                replies.push(serde_json::from_str::<Value>(&l).unwrap());
            }
            replies
        }
    });
    let asked = c.until(|f| f["method"] == "fs/read_text_file").await;
    let read = asked.last().unwrap().clone();
    assert_eq!(
        read["params"],
        json!({"sessionId": sid, "path": "/w/a.txt"})
    );
    c.send(json!({"jsonrpc": "2.0", "id": read["id"], "result": {"content": "unsaved"}}))
        .await;
    let asked = c.until(|f| f["method"] == "fs/write_text_file").await;
    let write = asked.last().unwrap().clone();
    assert_eq!(
        write["params"],
        json!({"sessionId": sid, "path": "/w/b.txt", "content": "new"})
    );
    c.send(json!({"jsonrpc": "2.0", "id": write["id"],
        "error": {"code": -32603, "message": "read-only buffer"}}))
        .await;
    let replies = exchange.await.unwrap();
    assert_eq!(replies[0], json!({"ok": true, "content": "unsaved"}));
    assert_eq!(replies[1]["ok"], json!(false));
    assert!(
        replies[1]["error"]
            .as_str()
            .unwrap()
            .contains("read-only buffer"),
        "{}",
        replies[1]
    );
    c.feed(1, "", finished(RunStatus::Success, None)).await;
    c.until(|f| f["id"] == 2).await;
    // Closing the session removes the channel.
    c.send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "session/close", "params": {"sessionId": sid}}),
    )
    .await;
    let r = c.until(|f| f["id"] == 3).await;
    assert!(r.last().unwrap().get("error").is_none(), "{r:?}");
    assert!(!sock.exists());
    assert!(!sock.parent().unwrap().exists());
}

#[tokio::test]
async fn a_client_offering_only_read_or_nothing_gets_no_file_channel() {
    for caps in [
        json!({"fs": {"readTextFile": true}}),
        json!({"fs": {"readTextFile": true, "writeTextFile": false}}),
        json!({}),
    ] {
        let mut c = Client::start_caps(caps.clone()).await;
        let sid = c.session(json!([])).await;
        c.prompt(&sid, "/wf", 2).await;
        assert_eq!(fs_delegate_of(&c, 1).await, None, "{caps}");
    }
}

#[tokio::test]
async fn frames_that_break_json_rpc_are_refused_not_guessed() {
    let mut c = Client::start().await;
    // A wrong version: -32600 with the request's id.
    c.send_raw(r#"{"jsonrpc":"1.0","id":5,"method":"session/list","params":{}}"#)
        .await;
    let f = c.recv().await;
    assert_eq!(
        (f["id"].clone(), f["error"]["code"].clone()),
        (json!(5), json!(-32600)),
        "{f}"
    );
    c.send_raw(r#"{"id":6,"method":"session/list","params":{}}"#)
        .await;
    assert_eq!(c.recv().await["error"]["code"], -32600);
    // An id that is an object or a fraction: -32600 with id null.
    for id in [r#"{"a":1}"#, "0.5", "true", "[1]"] {
        c.send_raw(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"session/list","params":{{}}}}"#
        ))
        .await;
        let f = c.recv().await;
        assert_eq!(f["error"]["code"], -32600, "{id}: {f}");
        assert!(f["id"].is_null(), "{id}: {f}");
    }
    // params by position: -32602.
    c.send_raw(r#"{"jsonrpc":"2.0","id":9,"method":"session/list","params":[]}"#)
        .await;
    let f = c.recv().await;
    assert_eq!(
        (f["id"].clone(), f["error"]["code"].clone()),
        (json!(9), json!(-32602)),
        "{f}"
    );
    // Two ids: refused, never the last one silently.
    c.send_raw(r#"{"jsonrpc":"2.0","id":10,"id":11,"method":"session/list","params":{}}"#)
        .await;
    let f = c.recv().await;
    assert_eq!(f["error"]["code"], -32600, "{f}");
    assert!(f["id"].is_null(), "{f}");
    assert!(
        f["error"]["message"].as_str().unwrap().contains("\"id\""),
        "{f}"
    );
    // The connection lives on; integer and string ids are fine.
    c.send_raw(r#"{"jsonrpc":"2.0","id":"s-1","method":"session/list","params":{}}"#)
        .await;
    assert_eq!(c.recv().await["result"]["sessions"], json!([]));
    c.send_raw(r#"{"jsonrpc":"2.0","id":-3,"method":"session/list"}"#)
        .await;
    assert_eq!(c.recv().await["id"], -3);
}

#[tokio::test]
async fn mcp_server_entries_with_nul_or_bad_env_names_are_refused_by_index_and_field() {
    let mut c = Client::start().await;
    let ok = json!({"name": "a", "command": "/bin/a", "args": [], "env": []});
    let cases = [
        (
            json!({"name": "b\0c", "command": "/bin/b", "args": [], "env": []}),
            "`name`",
        ),
        (
            json!({"name": "b", "command": "/bin/b", "args": ["x", "y\0"], "env": []}),
            "`args[1]`",
        ),
        (
            json!({"name": "b", "command": "/bin/b", "args": [], "env": [{"name": "A=B", "value": "v"}]}),
            "`env[0].name`",
        ),
        (
            json!({"name": "b", "command": "/bin/b", "args": [], "env": [{"name": "K", "value": "v"}, {"name": "", "value": "v"}]}),
            "`env[1].name`",
        ),
        (
            json!({"name": "b", "command": "/bin/b", "args": [], "env": [{"name": "K\0", "value": "v"}]}),
            "`env[0].name`",
        ),
    ];
    for (n, (entry, field)) in cases.into_iter().enumerate() {
        let id = 50 + n as u64;
        c.send(json!({"jsonrpc": "2.0", "id": id, "method": "session/new",
            "params": {"cwd": std::env::temp_dir(), "mcpServers": [ok.clone(), entry]}}))
            .await;
        let f = c.recv().await;
        assert_eq!(f["id"], id);
        assert_eq!(f["error"]["code"], -32602, "{f}");
        let m = f["error"]["message"].as_str().unwrap();
        assert!(
            m.contains("mcpServers[1]") && m.contains(field),
            "{field}: {m}"
        );
        assert_eq!(f["error"]["data"]["awfCode"], "USER.ACP.INVALID_MCP_SERVER");
    }
}

#[tokio::test]
async fn an_unknown_mode_is_named_without_debug_formatting() {
    let mut c = Client::start().await;
    let sid = c.session(json!([])).await;
    c.send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "session/set_mode",
        "params": {"sessionId": sid, "modeId": "root"}}),
    )
    .await;
    let m = c.recv().await["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(m, "Invalid params: unknown mode \"root\"");
    c.send(
        json!({"jsonrpc": "2.0", "id": 4, "method": "session/set_mode",
        "params": {"sessionId": sid}}),
    )
    .await;
    let m = c.recv().await["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!m.contains("None") && m.contains("`modeId`"), "{m}");
}

#[tokio::test]
async fn an_answer_that_is_not_an_offered_option_is_said_and_rejects_that_gate() {
    let mut c = Client::start().await;
    let sid = c.session(json!([])).await;
    c.prompt(&sid, "/wf", 2).await;
    c.feed(1, "ship", approval("q1")).await;
    let ask = c
        .until(|f| f["method"] == "session/request_permission")
        .await;
    let rid = ask.last().unwrap()["id"].clone();
    c.send(json!({"jsonrpc": "2.0", "id": rid, "result": {"outcome": {"outcome": "selected", "optionId": "bogus"}}}))
        .await;
    let frames = c
        .until(|f| f["params"]["update"]["status"] == "failed")
        .await;
    let said: String = frames
        .iter()
        .filter(|f| f["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .map(|f| {
            f["params"]["update"]["content"]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(
        said.contains("\"bogus\"") && said.contains("not one of the offered options"),
        "{said}"
    );
    assert_eq!(
        *c.svc.answers.lock().unwrap(),
        vec![("q1".into(), Answer::Option("no".into()))]
    );
    // The run goes on: the next gate is asked again (only this gate was rejected).
    c.feed(1, "ship", approval("q2")).await;
    c.until(|f| f["method"] == "session/request_permission")
        .await;
}

#[tokio::test]
async fn a_missing_input_choice_answered_with_an_unknown_id_says_so() {
    let mut c = Client::start().await;
    let sid = c.session(json!([])).await;
    c.prompt(&sid, "/wf", 2).await;
    let input = awf_domain::workflow::InputDef {
        name: "env".into(),
        ty: awf_domain::workflow::InputType::String,
        description: None,
        required: true,
        default: None,
        validation: awf_domain::workflow::InputValidation {
            enum_values: vec!["staging".into(), "prod".into()],
            ..awf_domain::workflow::InputValidation::default()
        },
    };
    c.feed(
        1,
        "",
        RunEvent::InteractionRequired {
            request: Box::new(InteractionRequest {
                request_id: "i1".into(),
                step: None,
                kind: RequestKind::MissingInput {
                    input: Box::new(input),
                    problem: None,
                },
                timeout_ms: None,
            }),
        },
    )
    .await;
    let ask = c
        .until(|f| f["method"] == "session/request_permission")
        .await;
    let rid = ask.last().unwrap()["id"].clone();
    c.send(json!({"jsonrpc": "2.0", "id": rid, "result": {"outcome": {"outcome": "selected", "optionId": "value:9"}}}))
        .await;
    let frames = c
        .until(|f| f["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .await;
    let t = frames.last().unwrap()["params"]["update"]["content"]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(t.contains("\"value:9\"") && t.contains("`env`"), "{t}");
    assert_eq!(
        *c.svc.answers.lock().unwrap(),
        vec![("i1".into(), Answer::EndOfInput)]
    );
}

#[tokio::test]
async fn a_prompt_right_after_a_refused_or_cancelled_one_is_accepted() {
    let mut c = Client::start().await;
    let sid = c.session(json!([])).await;
    let bad = [
        json!([{"type": "image", "data": "AAAA", "mimeType": "image/png"}]),
        json!([{"type": "text", "text": "/Bad_Name"}]),
        json!([{"type": "text", "text": ""}]),
        json!("not an array"),
    ];
    for round in 0..40u64 {
        let id = 1000 + round;
        let p = bad[(round % 4) as usize].clone();
        c.send(
            json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
            "params": {"sessionId": sid, "prompt": p}}),
        )
        .await;
        let f = c.until(|f| f["id"] == id).await;
        let r = f.last().unwrap();
        assert_ne!(
            r["error"]["data"]["awfCode"], "USER.ACP.PROMPT_IN_FLIGHT",
            "round {round}: {r}"
        );
    }
    // A cancelled prompt: the next one, sent once its answer is in, is taken.
    c.prompt(&sid, "/wf", 2).await;
    c.feed(
        1,
        "s",
        RunEvent::StepStarted {
            step: "s".into(),
            kind: "command".into(),
            command: None,
        },
    )
    .await;
    c.until(|f| f["params"]["update"]["status"] == "in_progress")
        .await;
    c.send(json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}))
        .await;
    let r = c.until(|f| f["id"] == 2).await;
    assert_eq!(r.last().unwrap()["result"]["stopReason"], "cancelled");
    c.prompt(&sid, "/wf", 3).await;
    c.feed(2, "", finished(RunStatus::Success, None)).await;
    let r = c.until(|f| f["id"] == 3).await;
    assert_eq!(
        r.last().unwrap()["result"]["stopReason"],
        "end_turn",
        "{r:?}"
    );
}

#[tokio::test]
async fn a_closed_session_leaves_the_list_gets_no_update_and_its_run_is_cancelled() {
    let mut c = Client::start().await;
    let sid = c.session(json!([])).await;
    let other = c.session(json!([])).await;
    c.prompt(&sid, "/wf", 2).await;
    c.feed(
        1,
        "s",
        RunEvent::StepStarted {
            step: "s".into(),
            kind: "command".into(),
            command: None,
        },
    )
    .await;
    c.until(|f| f["params"]["update"]["status"] == "in_progress")
        .await;
    c.send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "session/close", "params": {"sessionId": sid}}),
    )
    .await;
    c.until(|f| f["id"] == 3).await;
    // The run keeps talking after the close: none of it reaches the client.
    c.feed(
        1,
        "s",
        RunEvent::OutputChunk {
            step: "s".into(),
            stream: awf_domain::event::OutputStream::Stdout,
            text: "late\n".into(),
        },
    )
    .await;
    c.feed(1, "s", step_done("s", StepStatus::Cancelled)).await;
    c.feed(1, "", finished(RunStatus::Cancelled, None)).await;
    c.send(json!({"jsonrpc": "2.0", "id": 4, "method": "session/list", "params": {}}))
        .await;
    let after = c.until(|f| f["id"] == 4).await;
    for f in &after {
        assert_ne!(
            f["params"]["sessionId"],
            json!(sid),
            "an update after close: {f}"
        );
    }
    let list = &after.last().unwrap()["result"]["sessions"];
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list[0]["sessionId"], json!(other));
    assert_eq!(*c.svc.cancels.lock().unwrap(), vec![RunId("r1".into())]);
}

#[tokio::test]
async fn loading_a_session_with_another_cwd_is_refused_and_keeps_it_loadable() {
    let mut c = Client::start().await;
    let sid = c.session(json!([])).await;
    c.send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "session/close", "params": {"sessionId": sid}}),
    )
    .await;
    c.until(|f| f["id"] == 3).await;
    let elsewhere = std::env::temp_dir().join(format!("awf-acp-cwd-{}", std::process::id()));
    std::fs::create_dir_all(&elsewhere).unwrap();
    c.send(json!({"jsonrpc": "2.0", "id": 4, "method": "session/load",
        "params": {"sessionId": sid, "cwd": elsewhere, "mcpServers": []}}))
        .await;
    let f = c.until(|f| f["id"] == 4).await;
    let e = &f.last().unwrap()["error"];
    assert_eq!(e["code"], -32602, "{e}");
    assert_eq!(e["data"]["awfCode"], "USER.ACP.INVALID_CWD");
    c.send(json!({"jsonrpc": "2.0", "id": 5, "method": "session/load",
        "params": {"sessionId": sid, "cwd": std::env::temp_dir(), "mcpServers": []}}))
        .await;
    let f = c.until(|f| f["id"] == 5).await;
    assert!(f.last().unwrap()["result"].is_object(), "{f:?}");
    let _ = std::fs::remove_dir(&elsewhere);
}

#[tokio::test]
async fn refused_prompts_sent_back_to_back_without_waiting_never_meet_the_in_flight_slot() {
    let mut c = Client::start().await;
    let sid = c.session(json!([])).await;
    let bad = [
        json!([{"type": "image", "data": "AAAA", "mimeType": "image/png"}]),
        json!([{"type": "text", "text": "/Bad_Name"}]),
        json!([{"type": "text", "text": ""}]),
        json!([{"type": "text", "text": "free text, no default workflow"}]),
    ];
    // All written before any answer is read (an editor queueing them).
    for round in 0..40u64 {
        let p = bad[(round % 4) as usize].clone();
        c.send(
            json!({"jsonrpc": "2.0", "id": 2000 + round, "method": "session/prompt",
            "params": {"sessionId": sid, "prompt": p}}),
        )
        .await;
    }
    let mut answered = 0;
    while answered < 40 {
        let f = c.recv().await;
        if f.get("method").is_some() {
            continue;
        }
        answered += 1;
        assert_ne!(
            f["error"]["data"]["awfCode"], "USER.ACP.PROMPT_IN_FLIGHT",
            "{f}"
        );
        let round = f["id"].as_u64().unwrap() - 2000;
        if round % 4 == 0 {
            assert_eq!(
                f["error"]["data"]["awfCode"], "USER.ACP.UNSUPPORTED_BLOCK",
                "{f}"
            );
        } else {
            assert_eq!(f["result"]["stopReason"], "end_turn", "{f}");
        }
    }
    assert!(c.svc.starts.lock().unwrap().is_empty(), "nothing ran");
}
