//! Parsers against the real recorded CLI output in tests/fixtures/<cli>/.

use awf_agents::parse;
use awf_agents::parse::Parsed;
use awf_agents::parse::Usage;
use awf_domain::ports::agent::AgentChunk;
use pretty_assertions::assert_eq;
use serde_json::json;

pub fn fixture(path: &str) -> String {
    let p = format!("{}/tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn usage(input: u64, output: u64, total: Option<u64>) -> Option<Usage> {
    Some(Usage {
        input,
        output,
        total,
    })
}

fn msg(s: &str) -> AgentChunk {
    AgentChunk::Message(s.into())
}

#[test]
fn claude_text() {
    let (chunks, p) = parse::parse_all(
        parse::claude::State::default(),
        &fixture("claude/text.ndjson"),
    );
    assert_eq!(chunks, [msg("hello from mock")]);
    assert_eq!(p.output.as_deref(), Some("hello from mock"));
    assert_eq!(p.usage, usage(11, 7, None));
    assert_eq!(
        p.session_id.as_deref(),
        Some("1ad90155-f2ce-477c-bd3a-b510127d18f0")
    );
    assert!(!p.failed);
    let resp = p.response.unwrap();
    assert_eq!(resp["type"], "result");
    assert_eq!(resp["result"], "hello from mock");
}

/// Issue 7: `claude -p --output-format json --verbose` writes every event as one JSON array
/// (recorded from the real CLI); compact on one line or pretty-printed, it parses like the
/// stream.
#[test]
fn claude_event_array() {
    let compact = fixture("claude/array.json");
    let value: serde_json::Value = serde_json::from_str(&compact).unwrap();
    let pretty = serde_json::to_string_pretty(&value).unwrap();
    for text in [compact, pretty] {
        let (chunks, p) = parse::parse_all(parse::claude::State::default(), &text);
        assert_eq!(chunks, [msg("hello from mock")]);
        assert_eq!(p.output.as_deref(), Some("hello from mock"));
        assert_eq!(p.usage, usage(11, 7, None));
        assert_eq!(
            p.session_id.as_deref(),
            Some("85becc96-77f6-435a-b20e-dda2d21016ce")
        );
        assert!(!p.failed);
    }
    // A broken array is dropped, and the events after it still parse.
    let (_, p) = parse::parse_all(
        parse::claude::State::default(),
        "[{\"type\": oops]\n{\"type\":\"result\",\"result\":\"after\"}\n",
    );
    assert_eq!(p.output.as_deref(), Some("after"));
}

#[test]
fn claude_tool() {
    let (chunks, p) = parse::parse_all(
        parse::claude::State::default(),
        &fixture("claude/tool.ndjson"),
    );
    assert_eq!(
        chunks,
        [
            AgentChunk::ToolCall {
                id: "toolu_mock2".into(),
                name: "Bash".into(),
                input: json!({"command": "echo hi-from-tool", "description": "echo marker"}),
            },
            AgentChunk::ToolResult {
                id: "toolu_mock2".into(),
                output: "hi-from-tool".into(),
                is_error: false
            },
            msg("done after tool"),
        ]
    );
    assert_eq!(p.output.as_deref(), Some("done after tool"));
    assert_eq!(p.usage, usage(22, 14, None));
    assert_eq!(
        p.session_id.as_deref(),
        Some("3d0db55d-5b55-40cd-a68e-596bb89b9ca4")
    );
}

#[test]
fn claude_error_and_resume() {
    let (chunks, p) = parse::parse_all(
        parse::claude::State::default(),
        &fixture("claude/error.ndjson"),
    );
    assert_eq!(chunks, [msg("API Error: 400 mock bad request")]);
    assert!(p.failed);
    assert_eq!(p.error.as_deref(), Some("API Error: 400 mock bad request"));
    let (_, p) = parse::parse_all(
        parse::claude::State::default(),
        &fixture("claude/resume-2.ndjson"),
    );
    assert_eq!(p.output.as_deref(), Some("the word was ZEBRA"));
    assert_eq!(p.usage, usage(23, 5, None));
    assert_eq!(
        p.session_id.as_deref(),
        Some("ddd24755-1f99-4887-b7bf-da1350e37382")
    );
}

#[test]
fn claude_parses_line_by_line_like_in_a_stream() {
    let text = fixture("claude/tool.ndjson");
    let mut st = parse::claude::State::default();
    let per_line: Vec<usize> = text
        .lines()
        .map(|l| parse::claude::parse_line(&mut st, l).len())
        .collect();
    assert_eq!(per_line, [0, 1, 1, 1, 0]);
    assert_eq!(
        parse::claude::finish(st).output.as_deref(),
        Some("done after tool")
    );
}

#[test]
fn claude_thinking_from_the_spec_shape() {
    let line = r#"{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"hmm","signature":"x"},{"type":"text","text":"a \"quoted\" answer"}]}}"#;
    let mut st = parse::claude::State::default();
    assert_eq!(
        parse::claude::parse_line(&mut st, line),
        [
            AgentChunk::Thought("hmm".into()),
            msg("a \"quoted\" answer")
        ]
    );
}

#[test]
fn codex_text_tool_error_resume() {
    let (chunks, p) = parse::parse_all(
        parse::codex::State::default(),
        &fixture("codex/text.ndjson"),
    );
    assert_eq!(chunks, [msg("hello from mock")]);
    assert_eq!(
        p,
        Parsed {
            output: Some("hello from mock".into()),
            response: None,
            usage: usage(11, 7, None),
            session_id: Some("01a229f7-52bf-7731-a017-fb3cadaa0be3".into()),
            error: None,
            failed: false,
        }
    );

    let (chunks, p) = parse::parse_all(
        parse::codex::State::default(),
        &fixture("codex/tool.ndjson"),
    );
    assert_eq!(
        chunks,
        [
            AgentChunk::ToolCall {
                id: "item_1".into(),
                name: "command_execution".into(),
                input: json!({"command": "/bin/bash -lc 'echo hi-from-tool'"}),
            },
            AgentChunk::ToolResult {
                id: "item_1".into(),
                output: "hi-from-tool\n".into(),
                is_error: false
            },
            msg("done after tool"),
        ]
    );
    assert_eq!(p.output.as_deref(), Some("done after tool"));
    assert_eq!(p.usage, usage(22, 14, None));

    let (chunks, p) = parse::parse_all(
        parse::codex::State::default(),
        &fixture("codex/error.ndjson"),
    );
    assert_eq!(chunks, []);
    assert!(p.failed);
    assert_eq!(
        p.error.as_deref(),
        Some(
            r#"{"error":{"message":"mock bad request","type":"invalid_request_error","param":null,"code":null}}"#
        )
    );

    let (_, p) = parse::parse_all(
        parse::codex::State::default(),
        &fixture("codex/resume-2.ndjson"),
    );
    assert_eq!(p.output.as_deref(), Some("the word was ZEBRA"));
    assert_eq!(p.usage, usage(36, 8, None));
    assert_eq!(
        p.session_id.as_deref(),
        Some("01a229f7-5bd4-7823-a55e-6da5bd6d7af0")
    );
}

#[test]
fn codex_response_is_the_output_as_json_object() {
    let line = r#"{"type":"item.completed","item":{"id":"i","type":"agent_message","text":"{\"ok\":true}"}}"#;
    let (_, p) = parse::parse_all(parse::codex::State::default(), line);
    assert_eq!(p.response, Some(json!({"ok": true})));
}

#[test]
fn gemini_text_tool_error_resume() {
    let (chunks, p) = parse::parse_all(
        parse::gemini::State::default(),
        &fixture("gemini/text.ndjson"),
    );
    assert_eq!(chunks, [msg("hello from mock")]);
    assert_eq!(p.output.as_deref(), Some("hello from mock"));
    assert_eq!(p.usage, usage(11, 7, Some(18)));
    assert_eq!(
        p.session_id.as_deref(),
        Some("8ce271d2-f349-4d25-8908-48e4452e3cd8")
    );

    let (chunks, p) = parse::parse_all(
        parse::gemini::State::default(),
        &fixture("gemini/tool.ndjson"),
    );
    let id = "run_shell_command__run_shell_command_1796000344105_0";
    assert_eq!(
        chunks,
        [
            AgentChunk::ToolCall {
                id: id.into(),
                name: "run_shell_command".into(),
                input: json!({"command": "echo hi-from-tool", "description": "echo marker"}),
            },
            AgentChunk::ToolResult {
                id: id.into(),
                output: "hi-from-tool".into(),
                is_error: false
            },
            msg("done after tool"),
        ]
    );
    assert_eq!(p.usage, usage(22, 14, Some(36)));

    let (_, p) = parse::parse_all(
        parse::gemini::State::default(),
        &fixture("gemini/error.ndjson"),
    );
    assert!(p.failed);
    assert_eq!(
        p.error.as_deref(),
        Some(
            r#"[API Error: {"error":{"code":400,"message":"mock bad request","status":"INVALID_ARGUMENT"}}]"#
        )
    );
    assert_eq!(p.output, None);

    let (_, p) = parse::parse_all(
        parse::gemini::State::default(),
        &fixture("gemini/resume-2.ndjson"),
    );
    assert_eq!(p.output.as_deref(), Some("the word was ZEBRA"));
    assert_eq!(p.usage, usage(23, 5, Some(28)));
    assert_eq!(
        p.session_id.as_deref(),
        Some("195f8967-bcdd-444f-aa7b-23c9d0d1fe45")
    );
}

#[test]
fn gemini_joins_deltas_and_separates_messages() {
    let text = [
        r#"{"type":"message","role":"assistant","content":"Let me ","delta":true}"#,
        r#"{"type":"message","role":"assistant","content":"check.","delta":true}"#,
        r#"{"type":"tool_use","tool_name":"ls","tool_id":"t1","parameters":{}}"#,
        r#"{"type":"tool_result","tool_id":"t1","status":"error","error":{"type":"x","message":"nope"}}"#,
        r#"{"type":"message","role":"assistant","content":"Done.","delta":true}"#,
    ]
    .join("\n");
    let (chunks, p) = parse::parse_all(parse::gemini::State::default(), &text);
    assert_eq!(p.output.as_deref(), Some("Let me check.\nDone."));
    assert_eq!(
        chunks[3],
        AgentChunk::ToolResult {
            id: "t1".into(),
            output: "nope".into(),
            is_error: true
        }
    );
}

#[test]
fn opencode_text_tool_error_resume() {
    let (chunks, p) = parse::parse_all(
        parse::opencode::State::default(),
        &fixture("opencode/text.ndjson"),
    );
    assert_eq!(chunks, [msg("hello from mock")]);
    assert_eq!(p.output.as_deref(), Some("hello from mock"));
    assert_eq!(p.usage, usage(11, 7, Some(18)));
    assert_eq!(
        p.session_id.as_deref(),
        Some("ses_dd6096bb4ffeBTM0RRRbbtDrym")
    );

    let (chunks, p) = parse::parse_all(
        parse::opencode::State::default(),
        &fixture("opencode/tool.ndjson"),
    );
    assert_eq!(
        chunks,
        [
            AgentChunk::ToolCall {
                id: "call_mock2".into(),
                name: "bash".into(),
                input: json!({"command": "echo hi-from-tool", "description": "echo marker"}),
            },
            AgentChunk::ToolResult {
                id: "call_mock2".into(),
                output: "hi-from-tool\n".into(),
                is_error: false
            },
            msg("done after tool"),
        ]
    );
    assert_eq!(p.output.as_deref(), Some("done after tool"));
    assert_eq!(p.usage, usage(22, 14, Some(36)));

    let (_, p) = parse::parse_all(
        parse::opencode::State::default(),
        &fixture("opencode/error.ndjson"),
    );
    assert_eq!(p.error.as_deref(), Some("mock bad request"));
    assert_eq!(
        p.session_id.as_deref(),
        Some("ses_dd60940d0ffe6Z6PAhmSztLRDn")
    );

    let (_, p) = parse::parse_all(
        parse::opencode::State::default(),
        &fixture("opencode/resume-2.ndjson"),
    );
    assert_eq!(p.output.as_deref(), Some("the word was ZEBRA"));
    assert_eq!(p.usage, usage(23, 5, Some(28)));
    assert_eq!(
        p.session_id.as_deref(),
        Some("ses_dd6092f39ffertmqw1mtilBxEx")
    );
}

#[test]
fn copilot_spec_events() {
    let text = [
        r#"{"type":"tool.execution_start","data":{"toolName":"shell","toolCallId":"c1","arguments":{"command":"ls"}}}"#,
        r#"{"type":"assistant.message","data":{"content":"first","outputTokens":3}}"#,
        r#"{"type":"assistant.message","data":{"content":"final answer","outputTokens":9}}"#,
        r#"{"type":"result","sessionId":"sess-9"}"#,
    ]
    .join("\n");
    let (chunks, p) = parse::parse_all(parse::copilot::State::default(), &text);
    assert_eq!(
        chunks,
        [
            AgentChunk::ToolCall {
                id: "c1".into(),
                name: "shell".into(),
                input: json!({"command": "ls"})
            },
            msg("first"),
            msg("final answer"),
        ]
    );
    assert_eq!(p.output.as_deref(), Some("final answer"));
    assert_eq!(p.usage, usage(0, 9, None));
    assert_eq!(p.session_id.as_deref(), Some("sess-9"));
}

#[test]
fn vibe_modes() {
    let (chunks, p) = parse::parse_all(
        parse::vibe::State::new(parse::vibe::Mode::Text),
        "  hello\nworld  \n",
    );
    assert_eq!(chunks, [msg("  hello\n"), msg("world  \n")]);
    assert_eq!(p.output.as_deref(), Some("hello\nworld"));
    let json_doc = "[\n{\"role\":\"user\",\"content\":\"q\"},\n{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"{\\\"a\\\":1}\"}]}\n]";
    let (chunks, p) = parse::parse_all(parse::vibe::State::new(parse::vibe::Mode::Json), json_doc);
    assert_eq!(chunks, []);
    assert_eq!(p.output.as_deref(), Some("{\"a\":1}"));
    assert_eq!(p.response, Some(json!({"a": 1})));
    let stream = "{\"message\":{\"role\":\"assistant\",\"content\":\"part\"}}\n{\"role\":\"assistant\",\"delta\":{\"text\":\"last\"}}\n";
    let (chunks, p) = parse::parse_all(
        parse::vibe::State::new(parse::vibe::Mode::Streaming),
        stream,
    );
    assert_eq!(chunks, [msg("part"), msg("last")]);
    assert_eq!(p.output.as_deref(), Some("last"));
    assert_eq!(p.usage, None);
}

/// Not a benchmark (no timing asserted): a large synthetic claude stream parses to the
/// right totals, split into odd-sized chunks.
#[test]
fn claude_large_stream_in_odd_chunks() {
    let base = fixture("claude/tool.ndjson");
    let body: Vec<&str> = base.lines().collect();
    let mut text = String::from(body[0]);
    text.push('\n');
    for _ in 0..500 {
        for l in &body[1..4] {
            text.push_str(l);
            text.push('\n');
        }
    }
    text.push_str(body[4]);
    text.push('\n');
    let mut st = parse::claude::State::default();
    let mut split = parse::LineSplitter::default();
    let mut n = 0;
    for piece in crate::suite::providers::pieces(&text, 977) {
        split.push(piece, |l| n += parse::claude::parse_line(&mut st, l).len());
    }
    split.finish(|l| n += parse::claude::parse_line(&mut st, l).len());
    assert_eq!(n, 1500);
    assert_eq!(
        parse::claude::finish(st).output.as_deref(),
        Some("done after tool")
    );
}

/// Issue 7: codex's older `exec --json` shape (`{"id", "msg": {"type", …}}`, before the
/// `thread.*`/`item.*` events) gives the same answer, tools, tokens and session id.
#[test]
fn codex_legacy_event_shape() {
    let stream = concat!(
        r#"{"model":"o3","provider":"openai","sandbox":"read-only"}"#,
        "\n",
        r#"{"prompt":"run the marker tool"}"#,
        "\n",
        r#"{"id":"0","msg":{"type":"session_configured","session_id":"5973b6c0-94b8-487b-a530-2aeb6098ae0e","model":"o3"}}"#,
        "\n",
        r#"{"id":"0","msg":{"type":"task_started"}}"#,
        "\n",
        r#"{"id":"0","msg":{"type":"agent_reasoning","text":"**Running the tool**"}}"#,
        "\n",
        r#"{"id":"0","msg":{"type":"exec_command_begin","call_id":"call_1","command":["bash","-lc","echo hi-from-tool"],"cwd":"/w"}}"#,
        "\n",
        r#"{"id":"0","msg":{"type":"exec_command_end","call_id":"call_1","stdout":"hi-from-tool\n","stderr":"","exit_code":0}}"#,
        "\n",
        r#"{"id":"0","msg":{"type":"agent_message","message":"done after tool"}}"#,
        "\n",
        r#"{"id":"0","msg":{"type":"token_count","input_tokens":22,"cached_input_tokens":0,"output_tokens":14,"total_tokens":36}}"#,
        "\n",
        r#"{"id":"0","msg":{"type":"task_complete","last_agent_message":"done after tool"}}"#,
        "\n",
    );
    let (chunks, p) = parse::parse_all(parse::codex::State::default(), stream);
    assert_eq!(
        chunks,
        [
            AgentChunk::Thought("**Running the tool**".into()),
            AgentChunk::ToolCall {
                id: "call_1".into(),
                name: "command_execution".into(),
                input: json!({"command": "bash -lc echo hi-from-tool"}),
            },
            AgentChunk::ToolResult {
                id: "call_1".into(),
                output: "hi-from-tool\n".into(),
                is_error: false,
            },
            msg("done after tool"),
        ]
    );
    assert_eq!(p.output.as_deref(), Some("done after tool"));
    assert_eq!(p.usage, usage(22, 14, None));
    assert_eq!(
        p.session_id.as_deref(),
        Some("5973b6c0-94b8-487b-a530-2aeb6098ae0e")
    );
    assert!(!p.failed);

    // Only a task_complete carries the answer: it is the output.
    let (_, p) = parse::parse_all(
        parse::codex::State::default(),
        r#"{"id":"0","msg":{"type":"task_complete","last_agent_message":"only here"}}"#,
    );
    assert_eq!(p.output.as_deref(), Some("only here"));
    // An error event is the failure text.
    let (_, p) = parse::parse_all(
        parse::codex::State::default(),
        r#"{"id":"0","msg":{"type":"error","message":"stream disconnected"}}"#,
    );
    assert_eq!(p.error.as_deref(), Some("stream disconnected"));
}
