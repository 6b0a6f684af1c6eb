//! The ACP client against a real agent process: the scripted agent of tests/acp/scripted_agent.py
//! (python3), driven through [`AcpProvider`] as the engine drives it.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use awf_domain::ErrorCode;
use awf_domain::ports::agent::AgentChunk;
use awf_domain::ports::agent::AgentProvider;
use awf_domain::ports::agent::AgentRequest;
use awf_domain::ports::agent::AgentSession;
use awf_domain::ports::agent::Approver;
use awf_domain::ports::agent::McpAttachment;
use awf_domain::ports::agent::McpServer;
use serde_json::Value;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::AcpProvider;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/acp/scripted_agent.py")
}

struct Fixture {
    dir: tempfile::TempDir,
    provider: AcpProvider,
}

impl Fixture {
    fn new() -> Self {
        let env = std::env::vars().collect();
        Self {
            dir: tempfile::tempdir().unwrap(),
            provider: AcpProvider::new(env),
        }
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("agent.jsonl")
    }

    fn request(&self, prompt: &str, extra: Value) -> AgentRequest {
        let mut options = json!({"agent": format!("python3 {}", script().display())});
        if let (Some(o), Some(e)) = (options.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        AgentRequest {
            prompt: prompt.into(),
            options: options.as_object().cloned().unwrap_or_default(),
            dir: Some(self.dir.path().to_path_buf()),
            timeout: Some(Duration::from_secs(60)),
            env: vec![("AGENT_LOG".into(), self.log().display().to_string())],
            run_id: Some("run-1".into()),
            ..AgentRequest::default()
        }
    }

    /// Frames the agent received, with its pid.
    fn frames(&self) -> Vec<(u64, Value)> {
        std::fs::read_to_string(self.log())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|v| (v["pid"].as_u64().unwrap_or(0), v["frame"].clone()))
            .collect()
    }

    fn methods(&self, m: &str) -> Vec<(u64, Value)> {
        self.frames()
            .into_iter()
            .filter(|(_, f)| f["method"] == m)
            .collect()
    }
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

async fn run(
    f: &Fixture,
    r: AgentRequest,
) -> Result<awf_domain::ports::agent::AgentResponse, awf_domain::AwfError> {
    tokio::time::timeout(
        Duration::from_secs(90),
        f.provider.execute(r, None, CancellationToken::new()),
    )
    .await
    .expect("the turn ends")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_per_run_a_fresh_session_per_step_closed_at_run_end() {
    let f = Fixture::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let cb = {
        let seen = Arc::clone(&seen);
        Arc::new(move |c: AgentChunk| seen.lock().unwrap().push(c))
            as awf_domain::ports::agent::AgentCallback
    };
    let a = f
        .provider
        .execute(
            f.request("first THINK", json!({})),
            Some(Arc::clone(&cb)),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(a.output, "echo: first THINK");
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            AgentChunk::Thought("let me think".into()),
            AgentChunk::Message("echo: ".into()),
            AgentChunk::Message("first THINK".into()),
        ]
    );
    seen.lock().unwrap().clear();
    let n = f
        .provider
        .execute(
            f.request("NOTICE", json!({})),
            Some(Arc::clone(&cb)),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    // The agent was told awf takes `notice` updates; they are shown as reasoning, not
    // output. Every message chunk is output, with a message id or without.
    assert_eq!(n.output, "the answer, and more");
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            AgentChunk::Thought("Heads up: a notice before\n".into()),
            AgentChunk::Message("the answer".into()),
            AgentChunk::Message(", and more".into()),
            AgentChunk::Thought("Warning: an adapter notice\n".into()),
        ]
    );
    let b = run(&f, f.request("second", json!({}))).await.unwrap();
    assert_eq!(b.output, "echo: second");
    let inits = f.methods("initialize");
    let news = f.methods("session/new");
    assert_eq!(inits.len(), 1, "one process, initialized once");
    assert_eq!(news.len(), 3, "a fresh session per step");
    assert_eq!(news[0].0, news[1].0, "the same process");
    assert_eq!(news[0].1["params"]["cwd"], json!(f.dir.path()));
    assert_eq!(news[0].1["params"]["mcpServers"], json!([]));
    assert_eq!(inits[0].1["params"]["protocolVersion"], 1);
    assert_eq!(
        inits[0].1["params"]["clientCapabilities"]["terminal"],
        false
    );
    assert_eq!(
        inits[0].1["params"]["clientCapabilities"]["session"],
        json!({"notices": {}})
    );
    // Each step's session is closed after its turn (the agent advertises session/close).
    // Not waited for by the turn: give the agent a moment to log the last one.
    for _ in 0..100 {
        if f.methods("session/close").len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let closed: Vec<Value> = f
        .methods("session/close")
        .into_iter()
        .map(|(_, fr)| fr["params"]["sessionId"].clone())
        .collect();
    let created: Vec<Value> = news.iter().map(|(_, fr)| fr["params"].clone()).collect();
    assert_eq!(closed.len(), 3, "{closed:?} {created:?}");
    let pid = news[0].0;
    assert!(alive(pid));
    // Another run gets its own process.
    let mut other = f.request("third", json!({}));
    other.run_id = Some("run-2".into());
    run(&f, other).await.unwrap();
    assert_eq!(f.methods("initialize").len(), 2);
    f.provider.end_run("run-1").await;
    assert!(!alive(pid), "the agent of run-1 is gone at its end");
    f.provider.end_run("run-2").await;
    let pid2 = f.methods("initialize")[1].0;
    assert!(!alive(pid2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_keeps_its_session_and_the_proxy_is_a_stdio_entry() {
    let f = Fixture::new();
    let mut first = f.request("hello", json!({"mode": "plan"}));
    first.session = Some(AgentSession::default());
    first.system_prompt = Some("Be terse.".into());
    first.mcp = Some(McpAttachment {
        proxy: Some(McpServer {
            name: "awf-proxy".into(),
            command: "/bin/awf".into(),
            args: vec!["mcp-serve".into(), "--config".into(), "/tmp/c.json".into()],
            env: vec![("K".into(), "V".into())],
        }),
        ..McpAttachment::default()
    });
    let a = run(&f, first.clone()).await.unwrap();
    assert_eq!(a.output, "echo: Be terse.\n\nhello");
    let session = a.session.clone().unwrap();
    assert_eq!(session.turns.len(), 2);
    let mut next = first;
    next.prompt = "again".into();
    next.session = Some(session.clone());
    let b = run(&f, next).await.unwrap();
    assert_eq!(
        b.output, "echo: again",
        "no system prompt on a continued session"
    );
    assert_eq!(b.session.unwrap().session_id, session.session_id);
    let news = f.methods("session/new");
    assert_eq!(news.len(), 1, "the conversation's session is kept");
    assert!(
        f.methods("session/close").is_empty(),
        "a conversation's session stays open"
    );
    assert_eq!(
        news[0].1["params"]["mcpServers"],
        json!([{"name": "awf-proxy", "command": "/bin/awf", "args": ["mcp-serve", "--config", "/tmp/c.json"], "env": [{"name": "K", "value": "V"}]}])
    );
    let modes = f.methods("session/set_mode");
    assert_eq!(modes[0].1["params"]["modeId"], "plan");
    // A mode the agent does not offer is a clear error.
    let e = run(&f, f.request("x", json!({"mode": "yolo"})))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::UserAgentInvalidOption);
    assert!(e.hints()[0].contains("default, plan"), "{:?}", e.hints());
    f.provider.end_run("run-1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_reasons_are_typed_outcomes_with_the_partial_output() {
    let f = Fixture::new();
    let e = run(&f, f.request("please REFUSE", json!({})))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ExecutionAgentRefusal);
    assert_eq!(e.details()["partial_output"], "I started, but ");
    let e = run(&f, f.request("MAXTOK", json!({}))).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::ExecutionAgentMaxTokens);
    assert_eq!(e.details()["partial_output"], "truncated answ");
    let e = run(&f, f.request("TOKERR", json!({}))).await.unwrap_err();
    assert_eq!(
        e.code(),
        ErrorCode::ExecutionAgentMaxTokens,
        "{}",
        e.message()
    );
    assert_eq!(e.details()["partial_output"], "long answ");
    let e = run(&f, f.request("MAXTURNS", json!({}))).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::ExecutionAgentMaxTurns);
    // The process survives typed outcomes.
    assert_eq!(f.methods("initialize").len(), 1);
    let e = run(&f, f.request("EXIT", json!({}))).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::ExecutionAgentFailed);
    assert!(
        e.message().contains("exiting mid-turn as asked"),
        "{}",
        e.message()
    );
    // The next step starts a new process.
    assert_eq!(
        run(&f, f.request("after", json!({}))).await.unwrap().output,
        "echo: after"
    );
    assert_eq!(f.methods("initialize").len(), 2);
    f.provider.end_run("run-1").await;
}

async fn permission(f: &Fixture, policy: &str, kind: &str, approver: Option<Approver>) -> String {
    let mut r = f.request(
        &format!("PERMIT:{kind} now"),
        json!({"permissions": policy}),
    );
    r.approver = approver;
    run(f, r).await.unwrap().output
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permissions_are_answered_by_policy_and_option_kind() {
    let f = Fixture::new();
    assert_eq!(permission(&f, "deny", "read", None).await, "permission: no");
    assert_eq!(
        permission(&f, "read_only", "read", None).await,
        "permission: yes"
    );
    assert_eq!(
        permission(&f, "read_only", "search", None).await,
        "permission: yes"
    );
    assert_eq!(
        permission(&f, "read_only", "edit", None).await,
        "permission: no"
    );
    assert_eq!(
        permission(&f, "allow_all", "execute", None).await,
        "permission: yes"
    );
    assert_eq!(
        permission(&f, "ask", "edit", None).await,
        "permission: no",
        "nobody to ask: deny"
    );
    let asked = Arc::new(Mutex::new(Vec::new()));
    let approver = {
        let asked = Arc::clone(&asked);
        Approver(Arc::new(move |q, _| {
            asked.lock().unwrap().push(q);
            Box::pin(async { Some("yes-ever".to_owned()) })
        }))
    };
    assert_eq!(
        permission(&f, "ask", "edit", Some(approver)).await,
        "permission: yes-ever"
    );
    let q = asked.lock().unwrap()[0].clone();
    assert!(q.message.contains("Touch marker (edit)"), "{}", q.message);
    let kinds: Vec<&str> = q.options.iter().map(|o| o.kind.as_str()).collect();
    assert_eq!(
        kinds,
        ["reject_always", "allow_always", "reject_once", "allow_once"]
    );
    // An agent that ends its turn on a rejection (codex-acp) gives a typed outcome.
    let e = run(&f, f.request("PERMIT:edit ABORT", json!({})))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ExecutionAgentPermissionDenied);
    assert!(
        e.message().contains("Touch marker (permissions: deny)"),
        "{}",
        e.message()
    );
    // fs/* requests awf does not advertise get -32601.
    assert_eq!(
        run(&f, f.request("FS", json!({}))).await.unwrap().output,
        "fs: -32601"
    );
    f.provider.end_run("run-1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_mid_turn_sends_session_cancel_and_a_stuck_agent_is_killed() {
    let f = Fixture::new();
    let cancel = CancellationToken::new();
    let seen = Arc::new(tokio::sync::Notify::new());
    let cb = {
        let seen = Arc::clone(&seen);
        Arc::new(move |_c: AgentChunk| seen.notify_one()) as awf_domain::ports::agent::AgentCallback
    };
    let turn = f
        .provider
        .execute(f.request("HANG", json!({})), Some(cb), cancel.clone());
    let stopper = async {
        seen.notified().await;
        cancel.cancel();
    };
    let (r, ()) = tokio::time::timeout(Duration::from_secs(60), async {
        tokio::join!(turn, stopper)
    })
    .await
    .unwrap();
    assert_eq!(r.unwrap_err().code(), ErrorCode::ExecutionRunCancelled);
    assert_eq!(f.methods("session/cancel").len(), 1);
    let pid = f.methods("initialize")[0].0;
    assert!(alive(pid), "an agent that answered `cancelled` is kept");
    f.provider.end_run("run-1").await;
    assert!(!alive(pid));

    // An agent that ignores session/cancel is killed after the grace. Cancelled once its
    // prompt turn is under way (a fixed 500 ms lost the race with the agent's start in CI).
    let mut r = f.request("HANG", json!({}));
    r.env.push(("AGENT_IGNORE_CANCEL".into(), "1".into()));
    let cancel = CancellationToken::new();
    let stopper = async {
        while f.methods("session/prompt").len() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        cancel.cancel();
    };
    let (e, ()) = tokio::time::timeout(Duration::from_secs(60), async {
        tokio::join!(f.provider.execute(r, None, cancel.clone()), stopper)
    })
    .await
    .unwrap();
    let e = e.unwrap_err();
    assert_eq!(e.code(), ErrorCode::ExecutionRunCancelled);
    let pid = f.methods("initialize")[1].0;
    assert!(!alive(pid), "the stuck agent's group was killed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_protocol_version_and_a_missing_program_are_clear_errors() {
    let f = Fixture::new();
    let mut r = f.request("x", json!({}));
    r.env.push(("AGENT_PROTO".into(), "2".into()));
    let e = run(&f, r).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::UserAcpProtocolVersionUnsupported);
    let e = run(
        &f,
        f.request(
            "x",
            json!({"agent": "codex", "env": {"PATH": "/nonexistent"}}),
        ),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ExecutionAgentBinaryNotFound);
    assert!(
        e.hints()[0].contains("@agentclientprotocol/codex-acp"),
        "{:?}",
        e.hints()
    );
}

#[test]
fn a_root_refusal_of_claude_gets_the_sandbox_hint() {
    let e = super::rpc_failure(
        "session/new",
        &super::conn::RpcError {
            code: -32603,
            message: "Internal error: --dangerously-skip-permissions cannot be used with root/sudo privileges".into(),
        },
        "",
    );
    assert_eq!(e.code(), ErrorCode::ExecutionAgentFailed);
    assert!(e.hints()[0].contains("IS_SANDBOX"), "{:?}", e.hints());
}

/// The chunks a [`super::TurnState`] emits for `updates` (each a `session/update`'s `update`).
fn turn(updates: &[Value]) -> (super::TurnState, Vec<AgentChunk>) {
    let seen = Mutex::new(Vec::new());
    let mut state = super::TurnState::default();
    {
        let emit = |c: AgentChunk| seen.lock().unwrap().push(c);
        for u in updates {
            state.update(&json!({"sessionId": "s", "update": u}), &emit);
        }
        state.announce_rest(&emit);
    }
    let chunks = seen.into_inner().unwrap();
    (state, chunks)
}

fn notice(title: &str) -> Value {
    json!({"sessionUpdate": "notice", "severity": "info", "title": title})
}

fn say(id: Option<&str>, text: &str) -> Value {
    let mut u =
        json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}});
    if let Some(id) = id {
        u["messageId"] = json!(id);
    }
    u
}

#[test]
fn a_tool_call_reported_before_its_input_is_announced_with_the_input() {
    let (_, chunks) = turn(&[
        json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Terminal", "kind": "execute", "status": "pending", "rawInput": {}}),
        json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "title": "`ls -la`", "rawInput": {"command": "ls -la"}}),
        json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"}),
        // Announced at once when its input comes with it; at the turn's end when it never does.
        json!({"sessionUpdate": "tool_call", "toolCallId": "t2", "title": "Read", "rawInput": {"file_path": "a"}}),
        json!({"sessionUpdate": "tool_call", "toolCallId": "t3", "title": "Think", "rawInput": {}}),
    ]);
    let calls: Vec<(String, String, Value)> = chunks
        .iter()
        .filter_map(|c| match c {
            AgentChunk::ToolCall { id, name, input } => {
                Some((id.clone(), name.clone(), input.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        calls,
        vec![
            (
                "t1".to_owned(),
                "`ls -la`".to_owned(),
                json!({"command": "ls -la"})
            ),
            (
                "t2".to_owned(),
                "Read".to_owned(),
                json!({"file_path": "a"})
            ),
            ("t3".to_owned(), "Think".to_owned(), json!({})),
        ]
    );
    // The call comes before its result.
    let first_result = chunks
        .iter()
        .position(|c| matches!(c, AgentChunk::ToolResult { .. }))
        .unwrap();
    let first_call = chunks
        .iter()
        .position(|c| matches!(c, AgentChunk::ToolCall { .. }))
        .unwrap();
    assert!(first_call < first_result);
}

#[test]
fn a_refusal_keeps_the_refused_text_once_and_the_explanation_apart() {
    // claude-agent-acp: the refused answer, Claude Code's notice, the same answer again (its
    // one continuation), then the explanation under the result's own id.
    let (state, _) = turn(&[
        say(Some("msg_1"), "I will "),
        say(Some("msg_1"), "not"),
        notice("Safeguards stopped the response above · continuing once"),
        say(Some("msg_2"), "I will not"),
        say(Some("uuid-r"), "API Error: flagged.\n\nTry rephrasing."),
    ]);
    assert_eq!(
        state.refusal_parts(),
        (
            "I will not".to_owned(),
            Some("API Error: flagged.\n\nTry rephrasing.".to_owned())
        )
    );
    // The same message id sent again after a notice: one copy too.
    let (state, _) = turn(&[
        say(Some("m"), "I will not"),
        notice("notice"),
        say(Some("m"), "I will not"),
        say(Some("r"), "why"),
    ]);
    assert_eq!(
        state.refusal_parts(),
        ("I will not".to_owned(), Some("why".to_owned()))
    );
    // One message, or chunks without ids: all of it is the output.
    let (state, _) = turn(&[say(Some("m"), "half an "), say(Some("m"), "answer")]);
    assert_eq!(state.refusal_parts(), ("half an answer".to_owned(), None));
    let (state, _) = turn(&[say(None, "I started, but ")]);
    assert_eq!(state.refusal_parts(), ("I started, but ".to_owned(), None));
    // Chunks without an id beside ones with: part of the message before them.
    let (state, _) = turn(&[
        say(None, "a "),
        say(Some("m"), "b "),
        say(None, "c"),
        say(Some("r"), "why"),
    ]);
    assert_eq!(
        state.refusal_parts(),
        ("a b c".to_owned(), Some("why".to_owned()))
    );
}

/// Every message chunk is the turn's output, in order, whichever of them carry a
/// `messageId` (a trial: only the labelled ones were kept).
#[test]
fn every_message_chunk_is_output_whatever_its_message_id() {
    let parts = ["part one. ", "part two. ", "part three."];
    for labelled in [None, Some(0), Some(1), Some(2)] {
        let updates: Vec<Value> = parts
            .iter()
            .enumerate()
            .map(|(i, t)| say((Some(i) == labelled).then_some("m1"), t))
            .collect();
        let (state, chunks) = turn(&updates);
        assert_eq!(
            state.text(),
            "part one. part two. part three.",
            "id on chunk {labelled:?}"
        );
        assert_eq!(
            chunks,
            parts
                .iter()
                .map(|t| AgentChunk::Message((*t).to_owned()))
                .collect::<Vec<_>>()
        );
    }
    // A notice is not output.
    let (state, chunks) = turn(&[
        say(Some("m"), "answer"),
        json!({"sessionUpdate": "notice", "severity": "warning", "title": "Model fallback", "description": "using another model"}),
    ]);
    assert_eq!(state.text(), "answer");
    assert_eq!(
        chunks.last(),
        Some(&AgentChunk::Thought(
            "Model fallback: using another model\n".into()
        ))
    );
}

/// A cancel while the agent has not answered `initialize` (a stuck agent) ends the step at
/// once, not at the step's timeout, and the agent's process group is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_before_the_agent_answers_initialize_ends_the_step_at_once() {
    let f = Fixture::new();
    let pidfile = f.dir.path().join("agent.pid");
    let stuck = f.dir.path().join("stuck.sh");
    std::fs::write(
        &stuck,
        format!("echo $$ > {}\nexec sleep 300\n", pidfile.display()),
    )
    .unwrap();
    let mut r = f.request("hi", json!({}));
    r.options
        .insert("agent".into(), json!(format!("sh {}", stuck.display())));
    let cancel = CancellationToken::new();
    let stopper = {
        let cancel = cancel.clone();
        let pidfile = pidfile.clone();
        async move {
            while !pidfile.exists() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            cancel.cancel();
        }
    };
    let t0 = std::time::Instant::now();
    let (r, ()) = tokio::join!(f.provider.execute(r, None, cancel.clone()), stopper);
    assert_eq!(r.unwrap_err().code(), ErrorCode::ExecutionRunCancelled);
    // The request's timeout is 60 s: the cancel, not the timeout, ended it.
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    let pid: u64 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let gone = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        !alive(pid)
    });
    assert!(gone, "the stuck agent {pid} was left running");
    f.provider.end_run("run-1").await;
}
