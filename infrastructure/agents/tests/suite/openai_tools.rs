//! openai_compatible's tool loop against the scripted LLM (awf-mock-llm), with the real
//! built-in tools (awf-tools) over a temporary directory.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use awf_agents::registry;
use awf_domain::error::AwfError;
use awf_domain::error::ErrorCode;
use awf_domain::ports::AgentProvider;
use awf_domain::ports::agent::AgentCallback;
use awf_domain::ports::agent::AgentChunk;
use awf_domain::ports::agent::AgentRequest;
use awf_domain::ports::agent::AgentResponse;
use awf_domain::ports::agent::AgentSession;
use awf_domain::ports::agent::InProcessTools;
use awf_domain::ports::agent::Role;
use awf_domain::ports::fakes::FakeExecutor;
use awf_mock_llm::MockLlm;
use awf_tools::BuiltinTools;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn provider() -> Arc<dyn AgentProvider> {
    registry(Arc::new(FakeExecutor::new()), BTreeMap::new())
        .get("openai_compatible")
        .unwrap()
}

/// A request to the mock with the built-in tools over `dir`.
fn req(mock: &MockLlm, dir: &std::path::Path, prompt: &str) -> AgentRequest {
    let tools = BuiltinTools::new(dir).unwrap();
    let mut r = AgentRequest {
        prompt: prompt.into(),
        tools: Some(InProcessTools(Arc::new(tools))),
        ..AgentRequest::default()
    };
    r.options
        .insert("base_url".into(), json!(format!("{}/v1", mock.url())));
    r.options.insert("model".into(), json!("mock-model"));
    r
}

async fn exec(
    r: AgentRequest,
    cancel: CancellationToken,
) -> (Result<AgentResponse, AwfError>, Vec<AgentChunk>) {
    let chunks = Arc::new(Mutex::new(Vec::new()));
    let sink = chunks.clone();
    let cb: AgentCallback = Arc::new(move |c| sink.lock().unwrap().push(c));
    let res = provider().execute(r, Some(cb), cancel).await;
    let got = chunks.lock().unwrap().clone();
    (res, got)
}

/// The request bodies the mock received, oldest first.
fn bodies(mock: &MockLlm) -> Vec<Value> {
    mock.model_requests()
        .into_iter()
        .map(|r| r["body"].clone())
        .collect()
}

/// The `tool` messages of a request body: (tool_call_id, content).
fn tool_messages(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn one_tool_then(tool: Value, text: &str) -> Value {
    json!({"rules": [{"when_has_tools": true, "reply": {"tool": tool, "text": text}}],
           "default": {"text": "no tools were offered"}})
}

#[tokio::test]
async fn read_then_final_answer_sends_tools_and_the_tool_message() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "alpha\nbeta\n").unwrap();
    let mock = MockLlm::start(one_tool_then(
        json!({"name": "Read", "args": {"path": "notes.txt"}, "id": "call_read_1"}),
        "the file says alpha",
    ));
    let (res, chunks) = exec(
        req(&mock, dir.path(), "read notes"),
        CancellationToken::new(),
    )
    .await;
    let resp = res.unwrap();
    assert_eq!(resp.output, "the file says alpha");
    // Two rounds of 11 input + 7 output tokens each.
    assert_eq!(
        (resp.tokens.input, resp.tokens.output, resp.tokens.total),
        (22, 14, 36)
    );
    assert!(!resp.tokens.estimated);

    let b = bodies(&mock);
    assert_eq!(b.len(), 2);
    // tools[] carries the six built-ins in the function shape, and tool_choice auto.
    let tools = b[0]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Read", "Write", "Edit", "Bash", "Glob", "Grep"]);
    for t in tools {
        assert_eq!(t["type"], "function");
        assert!(
            t["function"]["description"]
                .as_str()
                .is_some_and(|d| !d.is_empty())
        );
        assert_eq!(t["function"]["parameters"]["type"], "object");
    }
    assert_eq!(b[0]["tool_choice"], "auto");
    assert_eq!(b[0]["messages"].as_array().unwrap().len(), 1);
    // The second request: the prompt, the assistant's tool call, the tool's answer.
    let m = b[1]["messages"].as_array().unwrap();
    assert_eq!(m.len(), 3);
    assert_eq!(m[0], json!({"role": "user", "content": "read notes"}));
    assert_eq!(m[1]["role"], "assistant");
    assert_eq!(
        m[1]["tool_calls"],
        json!([{"id": "call_read_1", "type": "function",
                "function": {"name": "Read", "arguments": "{\"path\":\"notes.txt\"}"}}])
    );
    let tm = tool_messages(&b[1]);
    assert_eq!(tm.len(), 1);
    assert_eq!(tm[0].0, "call_read_1");
    assert!(
        tm[0].1.contains("     1\talpha\n     2\tbeta"),
        "{}",
        tm[0].1
    );

    // The run sees the call and its result as chunks, then the answer.
    let tool_chunks: Vec<&AgentChunk> = chunks
        .iter()
        .filter(|c| !matches!(c, AgentChunk::Message(_)))
        .collect();
    assert_eq!(
        tool_chunks[0],
        &AgentChunk::ToolCall {
            id: "call_read_1".into(),
            name: "Read".into(),
            input: json!({"path": "notes.txt"}),
        }
    );
    match tool_chunks[1] {
        AgentChunk::ToolResult {
            id,
            output,
            is_error,
        } => {
            assert_eq!((id.as_str(), *is_error), ("call_read_1", false));
            assert!(output.contains("1\talpha"));
        }
        other => panic!("expected a tool result, got {other:?}"),
    }
    assert_eq!(tool_chunks.len(), 2);
    assert!(chunks.contains(&AgentChunk::Message("the file says alpha".into())));
}

#[tokio::test]
async fn without_tools_the_body_has_no_tools_key() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(json!({"default": {"text": "plain"}}));
    let mut r = req(&mock, dir.path(), "hi");
    r.tools = None;
    let (res, _) = exec(r, CancellationToken::new()).await;
    assert_eq!(res.unwrap().output, "plain");
    let b = bodies(&mock);
    assert!(
        b[0].get("tools").is_none() && b[0].get("tool_choice").is_none(),
        "{}",
        b[0]
    );
}

#[tokio::test]
async fn a_failing_tool_is_shown_to_the_model_as_error() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(one_tool_then(
        json!({"name": "Bash", "args": {"command": "echo oops; exit 3"}}),
        "it failed",
    ));
    let (res, chunks) = exec(req(&mock, dir.path(), "run it"), CancellationToken::new()).await;
    assert_eq!(res.unwrap().output, "it failed");
    let tm = tool_messages(&bodies(&mock)[1]);
    assert_eq!(tm.len(), 1);
    assert!(tm[0].1.starts_with("error: "), "{}", tm[0].1);
    assert!(
        tm[0].1.contains("oops") && tm[0].1.contains('3'),
        "{}",
        tm[0].1
    );
    assert!(chunks.iter().any(|c| matches!(c,
        AgentChunk::ToolResult { is_error: true, output, .. } if output.starts_with("error: "))));
}

#[tokio::test]
async fn bad_json_arguments_are_answered_without_calling_the_tool() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(one_tool_then(
        json!({"name": "Write", "args_raw": "{\"path\": \"x.txt\", \"content\": "}),
        "sorry",
    ));
    let (res, _) = exec(req(&mock, dir.path(), "write"), CancellationToken::new()).await;
    assert_eq!(res.unwrap().output, "sorry");
    let tm = tool_messages(&bodies(&mock)[1]);
    assert_eq!(tm[0].1, "error: invalid tool arguments for Write");
    assert!(!dir.path().join("x.txt").exists());
}

#[tokio::test]
async fn an_unknown_tool_is_answered_as_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(one_tool_then(
        json!({"name": "Teleport", "args": {"to": "mars"}}),
        "cannot",
    ));
    let (res, _) = exec(req(&mock, dir.path(), "go"), CancellationToken::new()).await;
    assert_eq!(res.unwrap().output, "cannot");
    let tm = tool_messages(&bodies(&mock)[1]);
    assert_eq!(
        tm[0].1,
        "error calling tool Teleport: unknown tool: Teleport"
    );
}

#[tokio::test]
async fn twenty_six_rounds_of_tool_calls_hit_the_loop_guard_after_25_requests() {
    let dir = tempfile::tempdir().unwrap();
    let rounds: Vec<Value> = (0..26)
        .map(|i| json!({"name": "Bash", "args": {"command": format!("echo round {i}")}}))
        .collect();
    let mock = MockLlm::start(json!({"rules": [{"when_has_tools": true,
        "reply": {"tools": rounds, "tool_text": "working", "text": "never reached"}}]}));
    let (res, _) = exec(req(&mock, dir.path(), "loop"), CancellationToken::new()).await;
    let e = res.unwrap_err();
    assert_eq!(e.code(), ErrorCode::UserMcpProxyInfiniteLoopGuard);
    assert_eq!(
        e.message(),
        "openai_compatible: the model still asked for tool calls after 25 requests (max_tool_iterations 25)"
    );
    assert!(!e.hints().is_empty());
    // The text the model wrote so far is kept for the step.
    let partial = e.details()["partial_output"].as_str().unwrap();
    assert_eq!(partial.lines().count(), 25);
    assert!(partial.lines().all(|l| l == "working"), "{partial}");
    let b = bodies(&mock);
    assert_eq!(b.len(), 25);
    // The 25th request carries the 24 results before it.
    assert_eq!(tool_messages(&b[24]).len(), 24);
    assert!(tool_messages(&b[24])[23].1.contains("round 23"));
}

#[tokio::test]
async fn max_tool_iterations_lowers_the_guard_and_is_validated() {
    let dir = tempfile::tempdir().unwrap();
    let rounds: Vec<Value> = (0..5)
        .map(|_| json!({"name": "Glob", "args": {"pattern": "*"}}))
        .collect();
    let mock = MockLlm::start(json!({"rules": [{"when_has_tools": true,
        "reply": {"tools": rounds, "text": "done"}}]}));
    let mut r = req(&mock, dir.path(), "loop");
    r.options.insert("max_tool_iterations".into(), json!(3));
    let (res, _) = exec(r, CancellationToken::new()).await;
    assert_eq!(
        res.unwrap_err().code(),
        ErrorCode::UserMcpProxyInfiniteLoopGuard
    );
    assert_eq!(bodies(&mock).len(), 3);

    // Six rounds allowed: five tool rounds then the answer.
    let mut r = req(&mock, dir.path(), "loop");
    r.options.insert("max_tool_iterations".into(), json!("6"));
    let (res, _) = exec(r, CancellationToken::new()).await;
    assert_eq!(res.unwrap().output, "done");

    for bad in [json!(0), json!(1001), json!(-1), json!("many")] {
        let mut r = req(&mock, dir.path(), "loop");
        r.options.insert("max_tool_iterations".into(), bad.clone());
        let (res, _) = exec(r, CancellationToken::new()).await;
        let e = res.unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserAgentInvalidOption, "{bad}");
        assert!(
            e.message().contains("max_tool_iterations"),
            "{}",
            e.message()
        );
    }
}

#[tokio::test]
async fn finish_reason_tool_calls_without_calls_is_the_loop_guard() {
    let dir = tempfile::tempdir().unwrap();
    let body = json!({"id": "x", "object": "chat.completion", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": "let me think", "tool_calls": []},
        "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}});
    let mock = MockLlm::start(json!({"default": {"raw_body": body.to_string()}}));
    let (res, _) = exec(req(&mock, dir.path(), "x"), CancellationToken::new()).await;
    let e = res.unwrap_err();
    assert_eq!(e.code(), ErrorCode::UserMcpProxyInfiniteLoopGuard);
    assert_eq!(e.details()["partial_output"], "let me think");
    assert_eq!(bodies(&mock).len(), 1);
}

#[tokio::test]
async fn parallel_calls_run_in_order_and_keep_their_ids() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "AAA\n").unwrap();
    std::fs::write(dir.path().join("b.txt"), "BBB\n").unwrap();
    let body = json!({"id": "x", "object": "chat.completion", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "id_b", "type": "function", "function": {"name": "Read", "arguments": "{\"path\":\"b.txt\"}"}},
            {"id": "id_a", "type": "function", "function": {"name": "Read", "arguments": "{\"path\":\"a.txt\"}"}}]},
        "finish_reason": "tool_calls"}]});
    let mock = MockLlm::start(json!({"rules": [
        {"when_has_tool_result": false, "reply": {"raw_body": body.to_string()}},
        {"when_has_tool_result": true, "reply": {"text": "both read"}}]}));
    let (res, _) = exec(
        req(&mock, dir.path(), "read both"),
        CancellationToken::new(),
    )
    .await;
    let resp = res.unwrap();
    assert_eq!(resp.output, "both read");
    let tm = tool_messages(&bodies(&mock)[1]);
    assert_eq!(tm.len(), 2);
    assert_eq!(tm[0].0, "id_b");
    assert!(tm[0].1.contains("BBB"));
    assert_eq!(tm[1].0, "id_a");
    assert!(tm[1].1.contains("AAA"));
}

#[tokio::test]
async fn conversation_turns_share_the_loop_and_keep_the_final_answer() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("n.txt"), "gamma\n").unwrap();
    let mock = MockLlm::start(one_tool_then(
        json!({"name": "Read", "args": {"path": "n.txt"}}),
        "gamma it is",
    ));
    let mut r = req(&mock, dir.path(), "what is in n.txt");
    r.session = Some(AgentSession::default());
    let (res, _) = exec(r, CancellationToken::new()).await;
    let session = res.unwrap().session.unwrap();
    let turns: Vec<(Role, &str)> = session
        .turns
        .iter()
        .map(|t| (t.role, t.content.as_str()))
        .collect();
    assert_eq!(
        turns,
        [
            (Role::User, "what is in n.txt"),
            (Role::Assistant, "gamma it is")
        ]
    );
    assert!(tool_messages(&bodies(&mock)[1])[0].1.contains("gamma"));
}

#[tokio::test]
async fn cancel_mid_loop_stops_the_running_tool_and_the_loop() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(one_tool_then(
        json!({"name": "Bash", "args": {"command": "echo $$ > pid.txt; exec sleep 300"}}),
        "never",
    ));
    let cancel = CancellationToken::new();
    let pid_file = dir.path().join("pid.txt");
    let run = tokio::spawn(exec(req(&mock, dir.path(), "sleep"), cancel.clone()));
    let waited = Instant::now();
    let pid: i32 = loop {
        if let Some(p) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            break p;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "the command never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    cancel.cancel();
    let (res, chunks) = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("execute returns after cancel")
        .unwrap();
    assert_eq!(res.unwrap_err().code(), ErrorCode::ExecutionRunCancelled);
    // No second request, and the sleep is gone (reaped, not a zombie).
    assert_eq!(bodies(&mock).len(), 1);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "sleep {pid} survived"
    );
    assert!(
        chunks
            .iter()
            .any(|c| matches!(c, AgentChunk::ToolCall { name, .. } if name == "Bash"))
    );
}
