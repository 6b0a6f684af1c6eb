//! The tools of agent steps (`mcp_proxy:`, editor MCP servers) over port fakes: what reaches
//! the provider's request, what reaches the run's events, and when the proxy goes.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::event::EventEnvelope;
use awf_domain::event::LogLevel;
use awf_domain::event::RunEvent;
use awf_domain::event::ToolFidelity;
use awf_domain::mask::Masker;
use awf_domain::ports::AgentProvider;
use awf_domain::ports::ToolProvider;
use awf_domain::ports::ToolProxies;
use awf_domain::ports::agent::AgentCallback;
use awf_domain::ports::agent::AgentRequest;
use awf_domain::ports::agent::AgentResponse;
use awf_domain::ports::agent::McpServer;
use awf_domain::ports::facade::RunRequest;
use awf_domain::ports::fakes::FakeAgents;
use awf_domain::ports::fakes::FakeExecutor;
use awf_domain::ports::fakes::FakeRepository;
use awf_domain::ports::tools::ProxySpec;
use awf_domain::ports::tools::StdioProxy;
use awf_domain::ports::tools::ToolCall;
use awf_domain::ports::tools::ToolCallError;
use awf_domain::ports::tools::ToolOutput;
use awf_domain::ports::tools::ToolSpec;
use awf_domain::run::RunResult;
use awf_domain::workflow::*;
use indexmap::IndexMap;
use pretty_assertions::assert_eq;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::Facade;
use crate::Services;

const SECRET: &str = "s3cr3t-value-42";

/// A stdio proxy whose server "recorded" one Read call that echoed the run's secret input
/// (which the real server cannot know to mask).
struct FakeStdio {
    dropped: Arc<AtomicBool>,
    events: Mutex<Vec<RunEvent>>,
}

impl StdioProxy for FakeStdio {
    fn server(&self) -> McpServer {
        McpServer {
            name: "awf-proxy".into(),
            command: "/usr/bin/awf".into(),
            args: vec!["mcp-serve".into(), "--config".into(), "/tmp/c.json".into()],
            env: vec![],
        }
    }
    fn tools(&self) -> Vec<String> {
        vec!["Bash".into(), "Read".into()]
    }
    fn take_events(&self) -> Vec<RunEvent> {
        std::mem::take(&mut *self.events.lock().unwrap())
    }
}

impl Drop for FakeStdio {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

struct Echo;

#[async_trait::async_trait]
impl ToolProvider for Echo {
    fn tools(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "Read".into(),
            description: "reads".into(),
            input_schema: json!({"type": "object"}),
        }]
    }
    async fn call(
        &self,
        call: ToolCall,
        _cancel: CancellationToken,
    ) -> Result<ToolOutput, ToolCallError> {
        Ok(ToolOutput::text(format!(
            "read {}: {SECRET}",
            call.arguments["path"].as_str().unwrap_or("")
        )))
    }
}

#[derive(Default)]
struct FakeProxies {
    specs: Mutex<Vec<ProxySpec>>,
    dropped: Arc<AtomicBool>,
}

impl ToolProxies for FakeProxies {
    fn stdio(&self, spec: &ProxySpec) -> Result<Box<dyn StdioProxy>, AwfError> {
        self.specs.lock().unwrap().push(spec.clone());
        // `dropped` follows the latest proxy.
        self.dropped.store(false, Ordering::SeqCst);
        let events = vec![
            RunEvent::ToolCall {
                step: spec.step.clone(),
                id: "7".into(),
                name: "Read".into(),
                input: json!({"path": format!("{SECRET}.txt")}),
                fidelity: ToolFidelity::Router,
            },
            RunEvent::ToolCallResult {
                step: spec.step.clone(),
                id: "7".into(),
                output: format!("text {SECRET}"),
                is_error: false,
                fidelity: ToolFidelity::Router,
            },
        ];
        Ok(Box::new(FakeStdio {
            dropped: Arc::clone(&self.dropped),
            events: Mutex::new(events),
        }))
    }
    fn in_process(
        &self,
        spec: &ProxySpec,
        _secrets: &Masker,
    ) -> Result<Vec<awf_domain::ports::tools::SourcedTools>, AwfError> {
        self.specs.lock().unwrap().push(spec.clone());
        Ok(vec![("builtin".to_owned(), Arc::new(Echo))])
    }
}

/// A provider that records its requests; `in_process`: it calls `Read` through the request's
/// tools; it checks the proxy is still there while it runs.
struct Capture {
    name: &'static str,
    in_process: bool,
    hides: bool,
    requests: Mutex<Vec<AgentRequest>>,
    proxy_alive_during_call: Mutex<Vec<bool>>,
    dropped: Arc<AtomicBool>,
    cancel_run: bool,
}

impl Capture {
    fn new(name: &'static str, dropped: &Arc<AtomicBool>) -> Self {
        Self {
            name,
            in_process: false,
            hides: true,
            requests: Mutex::default(),
            proxy_alive_during_call: Mutex::default(),
            dropped: Arc::clone(dropped),
            cancel_run: false,
        }
    }
}

#[async_trait::async_trait]
impl AgentProvider for Capture {
    fn name(&self) -> &str {
        self.name
    }
    fn tools_in_process(&self) -> bool {
        self.in_process
    }
    fn hides_native_tools(&self) -> bool {
        self.hides
    }
    async fn execute(
        &self,
        request: AgentRequest,
        _on_chunk: Option<AgentCallback>,
        cancel: CancellationToken,
    ) -> Result<AgentResponse, AwfError> {
        self.proxy_alive_during_call
            .lock()
            .unwrap()
            .push(!self.dropped.load(Ordering::SeqCst));
        if let Some(tools) = &request.tools {
            let call = ToolCall {
                name: "Read".into(),
                arguments: json!({"path": "a.txt"}).as_object().cloned().unwrap(),
                call_id: Some("c1".into()),
            };
            tools.0.call(call, cancel.clone()).await.unwrap();
        }
        self.requests.lock().unwrap().push(request);
        if self.cancel_run {
            // Stands for a long call the user stops: wait for the cancel.
            cancel.cancelled().await;
            return Err(AwfError::new(ErrorCode::ExecutionRunCancelled, "cancelled"));
        }
        Ok(AgentResponse {
            output: "done".into(),
            ..AgentResponse::default()
        })
    }
}

fn workflow(proxy: Option<McpProxyConfig>) -> Workflow {
    let mut agent = State::new(
        "ask",
        StateKind::Agent(AgentStep {
            provider: "cap".into(),
            prompt: Some("go".into()),
            prompt_file: None,
            mode: "single".into(),
            system_prompt: None,
            role: None,
            skills: vec![],
            options: IndexMap::new(),
            output_format: None,
            conversation: None,
            mcp_proxy: proxy,
            policy: Default::default(),
        }),
    );
    agent.on_success = Some("done".into());
    let done = State::new(
        "done",
        StateKind::Terminal(TerminalState {
            status: TerminalStatus::Success,
            message: None,
            exit_code: None,
        }),
    );
    let mut states = IndexMap::new();
    states.insert("ask".to_owned(), agent);
    states.insert("done".to_owned(), done);
    Workflow {
        name: "w".into(),
        version: None,
        description: None,
        author: None,
        tags: vec![],
        inputs: vec![InputDef {
            name: "API_TOKEN".into(),
            ty: InputType::String,
            description: None,
            required: true,
            default: None,
            validation: InputValidation::default(),
        }],
        env: vec![],
        initial: "ask".into(),
        states,
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

fn enabled() -> Option<McpProxyConfig> {
    Some(McpProxyConfig {
        enable: true,
        enable_written: true,
        intercept_builtins: true,
        plugin_tools: vec![],
    })
}

fn editor_server() -> McpServer {
    McpServer {
        name: "editor-fs".into(),
        command: "/usr/bin/editor-mcp".into(),
        args: vec!["--stdio".into()],
        env: vec![("EDITOR_PORT".into(), "4000".into())],
    }
}

fn request(servers: Vec<McpServer>) -> RunRequest {
    RunRequest {
        identifier: "w".into(),
        inputs: vec![("API_TOKEN".into(), SECRET.into())],
        working_dir: PathBuf::from("/"),
        mcp_servers: servers,
        ..RunRequest::default()
    }
}

fn facade(wf: Workflow, agent: Arc<Capture>, proxies: Option<Arc<FakeProxies>>) -> Facade {
    Facade::new(Services {
        agents: Arc::new(FakeAgents::default().with(agent)),
        tool_proxies: proxies.map(|p| p as Arc<dyn ToolProxies>),
        ..Services::fakes(
            FakeRepository::new().with(wf),
            Arc::new(FakeExecutor::new()),
        )
    })
}

async fn run_all(f: &Facade, req: RunRequest) -> (Vec<EventEnvelope>, RunResult) {
    let mut h = f.start_run(req).await.expect("run starts");
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
        .expect("RunFinished");
    (events, result)
}

fn tool_events(events: &[EventEnvelope]) -> Vec<RunEvent> {
    events
        .iter()
        .filter(|e| {
            matches!(
                e.event,
                RunEvent::ToolCall { .. } | RunEvent::ToolCallResult { .. }
            )
        })
        .map(|e| e.event.clone())
        .collect()
}

#[tokio::test]
async fn a_cli_agent_gets_the_stdio_proxy_and_the_editor_servers_and_its_calls_become_events() {
    let proxies = Arc::new(FakeProxies::default());
    let agent = Arc::new(Capture::new("cap", &proxies.dropped));
    let f = facade(
        workflow(enabled()),
        Arc::clone(&agent),
        Some(Arc::clone(&proxies)),
    );
    let (events, result) = run_all(&f, request(vec![editor_server()])).await;
    assert_eq!(
        result.terminal.as_deref(),
        Some("done"),
        "{:?}",
        result.error
    );
    let spec = proxies.specs.lock().unwrap()[0].clone();
    assert_eq!(spec.step, "ask");
    assert_eq!(spec.root_dir, PathBuf::from("/"));
    assert!(spec.intercept_builtins);
    assert!(!spec.run_id.is_empty());
    assert_eq!(spec.fs_delegate, None, "no editor file channel asked for");
    let req = agent.requests.lock().unwrap()[0].clone();
    let mcp = req.mcp.expect("mcp attachment");
    assert_eq!(mcp.proxy.expect("proxy").name, "awf-proxy");
    assert_eq!(mcp.proxy_tools, ["Bash", "Read"]);
    assert!(mcp.intercept_builtins);
    assert_eq!(mcp.extra, [editor_server()]);
    assert!(req.tools.is_none());
    // The proxy lived through the call and went when it ended.
    assert_eq!(*agent.proxy_alive_during_call.lock().unwrap(), [true]);
    assert!(proxies.dropped.load(Ordering::SeqCst));
    // Its recorded call is in the run's stream, router fidelity, masked with the run's
    // secrets (the server does not know the secret input).
    assert_eq!(
        tool_events(&events),
        [
            RunEvent::ToolCall {
                step: "ask".into(),
                id: "7".into(),
                name: "Read".into(),
                input: json!({"path": "***.txt"}),
                fidelity: ToolFidelity::Router,
            },
            RunEvent::ToolCallResult {
                step: "ask".into(),
                id: "7".into(),
                output: "text ***".into(),
                is_error: false,
                fidelity: ToolFidelity::Router,
            },
        ]
    );
    // And in the step's result (`-f json`).
    assert_eq!(
        result.states["ask"].tool_calls,
        [awf_domain::run::ToolCallEntry {
            id: "7".into(),
            name: "Read".into(),
            input: json!({"path": "***.txt"}),
            is_error: false,
        }]
    );
    // A provider that hides its tools gets no warning.
    assert!(!events.iter().any(|e| matches!(&e.event, RunEvent::Log { message, .. } if message.contains("UNSUPPORTED_PROVIDER"))));
}

#[tokio::test]
async fn a_provider_that_cannot_hide_its_tools_is_warned_about_once() {
    let proxies = Arc::new(FakeProxies::default());
    let mut cap = Capture::new("cap", &proxies.dropped);
    cap.hides = false;
    let agent = Arc::new(cap);
    let f = facade(workflow(enabled()), Arc::clone(&agent), Some(proxies));
    let (events, _) = run_all(&f, request(vec![])).await;
    let warns: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.event {
            RunEvent::Log {
                level: LogLevel::Warn,
                message,
                ..
            } if message.contains("MCP_PROXY") => Some(message.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        warns,
        [
            "[USER.MCP_PROXY.UNSUPPORTED_PROVIDER] step ask: provider cap cannot hide its own tools: the proxy's tools are offered beside them, not instead"
        ]
    );
}

#[tokio::test]
async fn editor_servers_reach_steps_without_mcp_proxy() {
    let proxies = Arc::new(FakeProxies::default());
    let agent = Arc::new(Capture::new("cap", &proxies.dropped));
    let f = facade(
        workflow(None),
        Arc::clone(&agent),
        Some(Arc::clone(&proxies)),
    );
    let (_, result) = run_all(&f, request(vec![editor_server()])).await;
    assert!(result.error.is_none(), "{:?}", result.error);
    let mcp = agent.requests.lock().unwrap()[0].mcp.clone().expect("mcp");
    assert!(mcp.proxy.is_none() && mcp.proxy_tools.is_empty());
    assert_eq!(mcp.extra, [editor_server()]);
    assert!(
        proxies.specs.lock().unwrap().is_empty(),
        "no proxy was made"
    );
    // And no servers at all: nothing is declared.
    let agent = Arc::new(Capture::new("cap", &proxies.dropped));
    let f = facade(workflow(None), Arc::clone(&agent), Some(proxies));
    run_all(&f, request(vec![])).await;
    assert!(agent.requests.lock().unwrap()[0].mcp.is_none());
}

#[tokio::test]
async fn an_in_process_provider_gets_audited_tools_whose_calls_become_events() {
    let proxies = Arc::new(FakeProxies::default());
    let mut cap = Capture::new("cap", &proxies.dropped);
    cap.in_process = true;
    cap.hides = false;
    let agent = Arc::new(cap);
    let f = facade(
        workflow(enabled()),
        Arc::clone(&agent),
        Some(Arc::clone(&proxies)),
    );
    let mut req = request(vec![editor_server()]);
    req.fs_delegate = Some(PathBuf::from("/run/editor-fs.sock"));
    let (events, result) = run_all(&f, req).await;
    assert!(result.error.is_none(), "{:?}", result.error);
    assert_eq!(
        proxies.specs.lock().unwrap()[0].fs_delegate,
        Some(PathBuf::from("/run/editor-fs.sock")),
        "the in-process tools get the editor's file channel"
    );
    let req = agent.requests.lock().unwrap()[0].clone();
    assert!(
        req.mcp.is_none(),
        "no MCP servers for an in-process provider"
    );
    let names: Vec<String> = req
        .tools
        .expect("tools")
        .0
        .tools()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["Read"]);
    assert_eq!(
        tool_events(&events),
        [
            RunEvent::ToolCall {
                step: "ask".into(),
                id: "c1".into(),
                name: "Read".into(),
                input: json!({"path": "a.txt"}),
                fidelity: ToolFidelity::Router,
            },
            RunEvent::ToolCallResult {
                step: "ask".into(),
                id: "c1".into(),
                output: "read a.txt: ***".into(),
                is_error: false,
                fidelity: ToolFidelity::Router,
            },
        ]
    );
    // The in-process loop hides native tools by construction: no warning.
    assert!(!events.iter().any(
        |e| matches!(&e.event, RunEvent::Log { message, .. } if message.contains("MCP_PROXY"))
    ));
}

#[tokio::test]
async fn without_tool_proxies_an_mcp_proxy_step_fails_clearly() {
    let dropped = Arc::new(AtomicBool::new(false));
    let agent = Arc::new(Capture::new("cap", &dropped));
    let f = facade(workflow(enabled()), Arc::clone(&agent), None);
    let (_, result) = run_all(&f, request(vec![])).await;
    let err = result.error.expect("error");
    assert_eq!(err.code, ErrorCode::UserMcpProxyInvalidConfig);
    assert!(
        err.message.contains("step ask: mcp_proxy is enabled"),
        "{}",
        err.message
    );
    assert!(
        agent.requests.lock().unwrap().is_empty(),
        "the agent never ran"
    );
}

#[tokio::test]
async fn a_cancelled_call_drops_its_proxy() {
    let proxies = Arc::new(FakeProxies::default());
    let mut cap = Capture::new("cap", &proxies.dropped);
    cap.cancel_run = true;
    let agent = Arc::new(cap);
    let f = facade(
        workflow(enabled()),
        Arc::clone(&agent),
        Some(Arc::clone(&proxies)),
    );
    let mut h = f.start_run(request(vec![])).await.expect("run starts");
    // Cancel once the agent is running.
    loop {
        if !agent.requests.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(!proxies.dropped.load(Ordering::SeqCst));
    h.cancel(awf_domain::run::CancelReason::Interrupt);
    while h.next_event().await.is_some() {}
    assert!(proxies.dropped.load(Ordering::SeqCst));
}

#[tokio::test]
async fn editor_servers_and_the_proxy_reach_a_sub_workflows_agent_steps() {
    let proxies = Arc::new(FakeProxies::default());
    let agent = Arc::new(Capture::new("cap", &proxies.dropped));
    let mut child = workflow(enabled());
    child.name = "child".into();
    child.source.identifier = "child".into();
    child.inputs.clear();
    let mut parent = workflow(None);
    let mut call = State::new(
        "call",
        StateKind::CallWorkflow(CallWorkflowStep {
            workflow: "child".into(),
            inputs: IndexMap::new(),
            outputs: IndexMap::new(),
        }),
    );
    call.on_success = Some("done".into());
    parent.states.shift_remove("ask");
    parent.states.insert("call".into(), call);
    parent.initial = "call".into();
    let f = Facade::new(Services {
        agents: Arc::new(FakeAgents::default().with(Arc::clone(&agent) as Arc<dyn AgentProvider>)),
        tool_proxies: Some(Arc::clone(&proxies) as Arc<dyn ToolProxies>),
        ..Services::fakes(
            FakeRepository::new().with(parent).with(child),
            Arc::new(FakeExecutor::new()),
        )
    });
    let mut req = request(vec![editor_server()]);
    req.fs_delegate = Some(PathBuf::from("/run/editor-fs.sock"));
    let (events, result) = run_all(&f, req).await;
    assert_eq!(
        result.terminal.as_deref(),
        Some("done"),
        "{:?}",
        result.error
    );
    let mcp = agent.requests.lock().unwrap()[0].mcp.clone().expect("mcp");
    assert_eq!(mcp.extra, [editor_server()]);
    assert!(mcp.proxy.is_some());
    // The child's proxy calls are in the stream, with the child's step.
    assert!(
        events.iter().any(|e| e.parent_run_id.is_some()
            && matches!(&e.event, RunEvent::ToolCall { step, fidelity: ToolFidelity::Router, .. } if step == "ask")),
        "{events:?}"
    );
    // The proxy is made for the child's run, not the parent's.
    let spec = proxies.specs.lock().unwrap()[0].clone();
    assert_ne!(
        Some(spec.run_id.as_str()),
        result.run_id.as_ref().map(|r| r.0.as_str())
    );
    // The editor's file channel reaches the child's proxy too.
    assert_eq!(spec.fs_delegate, Some(PathBuf::from("/run/editor-fs.sock")));
}

#[tokio::test]
async fn each_conversation_turn_gets_its_own_proxy_and_the_step_keeps_every_call() {
    let proxies = Arc::new(FakeProxies::default());
    let mut cap = Capture::new("cap", &proxies.dropped);
    cap.hides = false;
    let agent = Arc::new(cap);
    let mut wf = workflow(enabled());
    if let Some(StateKind::Agent(a)) = wf.states.get_mut("ask").map(|s| &mut s.kind) {
        a.mode = "conversation".into();
    }
    let f = facade(wf, Arc::clone(&agent), Some(Arc::clone(&proxies)));
    let mut h = f.start_run(request(vec![])).await.expect("starts");
    let mut answers = vec![Some(String::new()), Some("again".to_owned())];
    let mut result = None;
    let mut warnings = 0;
    while let Some(e) = h.next_event().await {
        match e.event {
            RunEvent::InteractionRequired { request } => {
                // The turn's proxy is gone once the turn answered.
                assert!(proxies.dropped.load(Ordering::SeqCst));
                let answer = match answers.pop().flatten() {
                    Some(v) => awf_domain::interaction::Answer::Value(v),
                    None => awf_domain::interaction::Answer::EndOfInput,
                };
                h.respond(&request.request_id, answer)
                    .expect("answer accepted");
            }
            RunEvent::Log { message, .. } if message.contains("UNSUPPORTED_PROVIDER") => {
                warnings += 1;
            }
            RunEvent::RunFinished { result: r } => result = Some(*r),
            _ => {}
        }
    }
    let result = result.expect("finished");
    assert!(result.error.is_none(), "{:?}", result.error);
    assert_eq!(proxies.specs.lock().unwrap().len(), 2, "one proxy per turn");
    assert_eq!(*agent.proxy_alive_during_call.lock().unwrap(), [true, true]);
    assert_eq!(result.states["ask"].tool_calls.len(), 2);
    assert_eq!(warnings, 1, "warned once per step, not per turn");
}

/// Asks its approver (as `provider: acp` with `permissions: ask` does) and answers with the
/// chosen option id; records the run id of the request and whether the run ended for it.
struct Asking {
    run_ids: Mutex<Vec<Option<String>>>,
    ended: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl AgentProvider for Asking {
    fn name(&self) -> &str {
        "asking"
    }
    async fn end_run(&self, run_id: &str) {
        self.ended.lock().unwrap().push(run_id.to_owned());
    }
    async fn execute(
        &self,
        request: AgentRequest,
        _on_chunk: Option<AgentCallback>,
        _cancel: CancellationToken,
    ) -> Result<AgentResponse, AwfError> {
        use awf_domain::interaction::ApprovalKind;
        use awf_domain::interaction::ApprovalOption;
        self.run_ids.lock().unwrap().push(request.run_id.clone());
        let approver = request.approver.clone().expect("an approver");
        let options = vec![
            ApprovalOption {
                id: "always".into(),
                name: "Always".into(),
                kind: ApprovalKind::AllowAlways,
            },
            ApprovalOption {
                id: "no".into(),
                name: "No".into(),
                kind: ApprovalKind::RejectOnce,
            },
            ApprovalOption {
                id: "yes".into(),
                name: "Yes".into(),
                kind: ApprovalKind::AllowOnce,
            },
        ];
        let q = awf_domain::ports::agent::ApprovalQuestion {
            message: "the agent asks to run Touch (edit)".into(),
            options,
        };
        let chosen = (approver.0)(q, Some(std::time::Duration::from_secs(60))).await;
        Ok(AgentResponse {
            output: chosen.unwrap_or_else(|| "none".into()),
            ..AgentResponse::default()
        })
    }
}

#[tokio::test]
async fn an_agents_permission_question_is_an_approval_request_of_its_step_and_the_run_end_reaches_the_provider()
 {
    let agent = Arc::new(Asking {
        run_ids: Mutex::default(),
        ended: Mutex::default(),
    });
    let mut wf = workflow(None);
    if let Some(StateKind::Agent(a)) = wf.states.get_mut("ask").map(|s| &mut s.kind) {
        a.provider = "asking".into();
    }
    let f = Facade::new(Services {
        agents: Arc::new(FakeAgents::default().with(Arc::clone(&agent) as Arc<dyn AgentProvider>)),
        ..Services::fakes(
            FakeRepository::new().with(wf),
            Arc::new(FakeExecutor::new()),
        )
    });
    let mut h = f.start_run(request(vec![])).await.expect("run starts");
    let run_id = h.run_id().0.clone();
    let mut asked = Vec::new();
    let mut result = None;
    while let Some(e) = h.next_event().await {
        match &e.event {
            RunEvent::InteractionRequired { request } => {
                asked.push(request.as_ref().clone());
                h.respond(
                    &request.request_id,
                    awf_domain::interaction::Answer::Option("no".into()),
                )
                .expect("accepted");
            }
            RunEvent::RunFinished { result: r } => result = Some(r.as_ref().clone()),
            _ => {}
        }
    }
    let result = result.expect("finished");
    assert_eq!(
        result.states["ask"].output.as_ref() as &str,
        "no",
        "the answer reaches the agent"
    );
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].step.as_deref(), Some("ask"));
    match &asked[0].kind {
        awf_domain::interaction::RequestKind::Approval { message, options } => {
            assert_eq!(message, "the agent asks to run Touch (edit)");
            let ids: Vec<&str> = options.iter().map(|o| o.id.as_str()).collect();
            assert_eq!(ids, ["always", "no", "yes"]);
        }
        other => panic!("not an approval: {other:?}"),
    }
    assert_eq!(*agent.run_ids.lock().unwrap(), vec![Some(run_id.clone())]);
    assert_eq!(*agent.ended.lock().unwrap(), vec![run_id]);

    // --yes answers by kind (allow_once), without asking.
    let mut wf = workflow(None);
    if let Some(StateKind::Agent(a)) = wf.states.get_mut("ask").map(|s| &mut s.kind) {
        a.provider = "asking".into();
    }
    let f = Facade::new(Services {
        agents: Arc::new(FakeAgents::default().with(Arc::clone(&agent) as Arc<dyn AgentProvider>)),
        ..Services::fakes(
            FakeRepository::new().with(wf),
            Arc::new(FakeExecutor::new()),
        )
    });
    let mut req = request(vec![]);
    req.auto_approve = true;
    let mut h = f.start_run(req).await.expect("run starts");
    let mut result = None;
    while let Some(e) = h.next_event().await {
        assert!(
            !matches!(e.event, RunEvent::InteractionRequired { .. }),
            "--yes asks nothing"
        );
        if let RunEvent::RunFinished { result: r } = &e.event {
            result = Some(r.as_ref().clone());
        }
    }
    assert_eq!(
        result.expect("finished").states["ask"].output.as_ref() as &str,
        "yes"
    );
}
