//! Plain-HTTP tests of the mock: every dialect, SSE framing, tool rounds, errors, side requests,
//! script selection and the request log.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

use awf_mock_llm::{MockLlm, Options, ScriptSource};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("JSON body")
    }
    /// `(event name or "", data JSON or raw data)` per SSE event.
    fn sse(&self) -> Vec<(String, String)> {
        self.body
            .split("\n\n")
            .filter(|b| !b.is_empty())
            .map(|block| {
                let mut ev = String::new();
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(e) = line.strip_prefix("event: ") {
                        ev = e.to_owned();
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        data = d.to_owned();
                    } else {
                        panic!("unexpected SSE line {line:?}");
                    }
                }
                (ev, data)
            })
            .collect()
    }
    fn sse_json(&self) -> Vec<Value> {
        self.sse()
            .into_iter()
            .filter(|(_, d)| d != "[DONE]")
            .map(|(_, d)| serde_json::from_str(&d).expect("SSE data is JSON"))
            .collect()
    }
}

fn raw_request(url: &str, head_and_body: &[u8]) -> Reply {
    let addr = url.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(head_and_body).expect("write");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("head end");
    let head = String::from_utf8(raw[..split].to_vec()).expect("utf8 head");
    let rest = &raw[split + 4..];
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.trim().to_owned(), v.trim().to_owned())
        })
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v == "chunked");
    let body = if chunked {
        let mut out = Vec::new();
        let mut r = BufReader::new(rest);
        loop {
            let mut size = String::new();
            r.read_line(&mut size).unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            if n == 0 {
                break;
            }
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).unwrap();
            assert_eq!(&chunk[n..], b"\r\n");
            out.extend_from_slice(&chunk[..n]);
        }
        out
    } else {
        rest.to_vec()
    };
    Reply {
        status,
        headers,
        body: String::from_utf8(body).expect("utf8 body"),
    }
}

fn post(url: &str, path: &str, body: &Value) -> Reply {
    let b = body.to_string();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nx-api-key: sk-test\r\nContent-Length: {}\r\n\r\n{b}",
        b.len()
    );
    raw_request(url, req.as_bytes())
}

fn tools_script() -> Value {
    json!({
        "rules": [
            {"when_last_user_contains": "ZEBRA", "when_has_tools": true,
             "reply": {"text": "done after tool", "tool": {"name": "Bash", "args": {"command": "echo hi"}}}},
            {"when_last_user_contains": "FAIL400", "reply": {"status": 400}},
            {"when_last_user_contains": "FAIL401", "reply": {"status": 401}},
            {"when_last_user_contains": "FAIL429", "reply": {"status": 429, "retry_after": 7}},
            {"when_last_user_contains": "FAIL500", "reply": {"status": 500, "error_body": "upstream exploded"}}
        ],
        "default": {"text": "hello from mock", "usage": {"input": 11, "output": 7}}
    })
}

#[test]
fn anthropic_sse_text_has_the_full_event_sequence() {
    let mock = MockLlm::start(tools_script());
    let r = post(
        &mock.url(),
        "/v1/messages?beta=true",
        &json!({"model": "claude-opus-4-8", "stream": true, "tools": [{"name": "Bash"}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "say hi"}]}]}),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    let events = r.sse();
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let data = r.sse_json();
    for ((name, _), d) in events.iter().zip(&data) {
        assert_eq!(d["type"], json!(name));
    }
    assert_eq!(data[0]["message"]["model"], json!("claude-opus-4-8"));
    assert_eq!(data[0]["message"]["usage"]["input_tokens"], json!(11));
    assert_eq!(
        data[2]["delta"],
        json!({"type": "text_delta", "text": "hello from mock"})
    );
    assert_eq!(
        data[4]["delta"]["stop_reason"],
        json!("end_turn"),
        "message_delta"
    );
    assert_eq!(data[4]["usage"], json!({"output_tokens": 7}));
}

#[test]
fn anthropic_tool_round_then_text() {
    let mock = MockLlm::start(tools_script());
    let url = mock.url();
    let first = json!({"model": "m", "stream": true, "tools": [{"name": "Bash"}],
        "messages": [{"role": "user", "content": "please ZEBRA"}]});
    let r = post(&url, "/v1/messages", &first);
    let data = r.sse_json();
    assert_eq!(
        data[1]["content_block"],
        json!({"type": "tool_use", "id": "toolu_mock1", "name": "Bash", "input": {}})
    );
    assert_eq!(
        data[2]["delta"],
        json!({"type": "input_json_delta", "partial_json": "{\"command\":\"echo hi\"}"})
    );
    assert_eq!(data[4]["delta"]["stop_reason"], json!("tool_use"));

    let follow = json!({"model": "m", "stream": true, "tools": [{"name": "Bash"}],
    "messages": [
        {"role": "user", "content": "please ZEBRA"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_mock1", "name": "Bash", "input": {"command": "echo hi"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_mock1", "content": "hi"}]}
    ]});
    let data = post(&url, "/v1/messages", &follow).sse_json();
    assert_eq!(
        data[2]["delta"],
        json!({"type": "text_delta", "text": "done after tool"})
    );

    // `when_has_tools: true` does not match a request without tools: the default answers.
    let no_tools = json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "please ZEBRA"}]});
    let data = post(&url, "/v1/messages", &no_tools).sse_json();
    assert_eq!(data[2]["delta"]["text"], json!("hello from mock"));

    // A tool rule without `when_has_tools`: a request without tools gets the rule's text.
    mock.set_script(
        json!({"rules": [{"reply": {"text": "text instead", "tool": {"name": "Bash"}}}]}),
    );
    let data = post(&url, "/v1/messages", &no_tools).sse_json();
    assert_eq!(data[2]["delta"]["text"], json!("text instead"));

    let reqs = mock.model_requests();
    assert_eq!(reqs.len(), 4);
    assert_eq!(reqs[0]["matched"], json!("rule:0"));
    assert_eq!(reqs[0]["answer"], json!({"tool": "Bash"}));
    assert_eq!(reqs[1]["answer"], json!({"text": "done after tool"}));
    assert_eq!(reqs[1]["facts"]["tool_results"], json!(1));
    assert_eq!(reqs[0]["headers"]["x-api-key"], json!("sk-test"));
}

#[test]
fn anthropic_plain_json_when_not_streaming() {
    let mock = MockLlm::start(tools_script());
    let r = post(
        &mock.url(),
        "/v1/messages",
        &json!({"model": "claude-x", "messages": [{"role": "user", "content": "hey"}]}),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        r.json(),
        json!({"id": "msg_mock1", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [{"type": "text", "text": "hello from mock"}], "stop_reason": "end_turn",
            "stop_sequence": null, "usage": {"input_tokens": 11, "output_tokens": 7}})
    );
}

#[test]
fn responses_sse_text_and_namespaced_tool() {
    let script = json!({"rules": [{"when_last_user_contains": "call it",
        "reply": {"text": "after", "tool": {"name": "echo", "namespace": "mcp__echosrv", "args": {"text": "ping"}}}}],
        "default": {"text": "hello from mock"}});
    let mock = MockLlm::start(script);
    let input = |text: &str| {
        json!([{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "sys"}]},
               {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}])
    };
    let r = post(
        &mock.url(),
        "/v1/responses",
        &json!({"model": "mock-model", "stream": true, "tools": [{"type": "function", "name": "exec_command"}], "input": input("say hi")}),
    );
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let names: Vec<String> = r.sse().into_iter().map(|(e, _)| e).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.output_item.added",
            "response.output_text.delta",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let data = r.sse_json();
    assert_eq!(
        data[3]["item"],
        json!({"type": "message", "id": "msg_mock1", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": "hello from mock", "annotations": []}]})
    );
    assert_eq!(data[4]["response"]["id"], json!("resp_mock1"));
    assert_eq!(
        data[4]["response"]["usage"],
        json!({"input_tokens": 11, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 7,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 18})
    );

    let r = post(
        &mock.url(),
        "/v1/responses",
        &json!({"model": "mock-model", "stream": true, "tools": [{"type": "namespace", "name": "mcp__echosrv"}], "input": input("call it")}),
    );
    let data = r.sse_json();
    assert_eq!(
        data[2]["item"],
        json!({"type": "function_call", "id": "fc_mock2", "call_id": "call_mock2", "name": "echo",
            "arguments": "{\"text\":\"ping\"}", "status": "completed", "namespace": "mcp__echosrv"})
    );
    assert_eq!(data.len(), 4);
}

#[test]
fn gemini_sse_json_and_array_forms() {
    let mock = MockLlm::start(json!({"rules": [{"when_last_user_contains": "chunks",
        "reply": {"text_chunks": ["hel", "lo"]}}], "default": {"text": "hello from mock"}}));
    let url = mock.url();
    let body = |t: &str| json!({"contents": [{"role": "user", "parts": [{"text": t}]}]});
    let r = post(
        &url,
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        &body("say hi"),
    );
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let events = r.sse();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].0, "", "gemini SSE has data: lines only");
    assert_eq!(
        r.sse_json()[0],
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "hello from mock"}]},
            "index": 0, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 7, "totalTokenCount": 18},
            "modelVersion": "gemini-2.5-flash"})
    );

    let r = post(
        &url,
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        &body("two chunks"),
    );
    let data = r.sse_json();
    assert_eq!(data.len(), 2);
    assert_eq!(
        data[0]["candidates"][0]["content"]["parts"][0]["text"],
        json!("hel")
    );
    assert!(data[0]["candidates"][0].get("finishReason").is_none());
    assert_eq!(data[1]["candidates"][0]["finishReason"], json!("STOP"));

    let r = post(
        &url,
        "/v1beta/models/gemini-2.5-flash:generateContent",
        &body("say hi"),
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        r.json()["candidates"][0]["content"]["parts"][0]["text"],
        json!("hello from mock")
    );

    let r = post(
        &url,
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
        &body("say hi"),
    );
    assert!(r.json().is_array());
}

#[test]
fn gemini_function_call_then_text() {
    let mock = MockLlm::start(json!({"rules": [{"when_last_user_contains": "run",
        "reply": {"text": "done", "tool": {"name": "run_shell_command", "args": {"command": "echo hi"}}}}]}));
    let url = mock.url();
    let path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse";
    let tools = json!([{"functionDeclarations": [{"name": "run_shell_command"}]}]);
    let r = post(
        &url,
        path,
        &json!({"contents": [{"role": "user", "parts": [{"text": "run"}]}], "tools": tools}),
    );
    assert_eq!(
        r.sse_json()[0]["candidates"][0]["content"]["parts"],
        json!([{"functionCall": {"name": "run_shell_command", "args": {"command": "echo hi"}}}])
    );
    let r = post(
        &url,
        path,
        &json!({"tools": tools, "contents": [
        {"role": "user", "parts": [{"text": "run"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "run_shell_command", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "run_shell_command", "response": {"output": "hi"}}}]}]}),
    );
    assert_eq!(
        r.sse_json()[0]["candidates"][0]["content"]["parts"][0]["text"],
        json!("done")
    );
}

#[test]
fn chat_sse_ends_with_usage_and_done() {
    let mock = MockLlm::start(tools_script());
    let r = post(
        &mock.url(),
        "/v1/chat/completions",
        &json!({"model": "mock-model", "stream": true, "messages": [{"role": "user", "content": "say hi"}]}),
    );
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let events = r.sse();
    assert!(events.iter().all(|(e, _)| e.is_empty()));
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let data = r.sse_json();
    assert_eq!(data.len(), 4);
    assert_eq!(
        data[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert_eq!(
        data[1]["choices"][0]["delta"],
        json!({"content": "hello from mock"})
    );
    assert_eq!(data[2]["choices"][0]["finish_reason"], json!("stop"));
    assert_eq!(
        data[3]["usage"],
        json!({"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18})
    );
    assert_eq!(data[3]["choices"], json!([]));
}

#[test]
fn chat_json_and_tool_calls() {
    let mock = MockLlm::start(tools_script());
    let url = mock.url();
    let tools = json!([{"type": "function", "function": {"name": "Bash"}}]);
    let r = post(
        &url,
        "/chat/completions",
        &json!({"model": "gpt-x", "tools": tools, "messages": [{"role": "system", "content": "be nice"}, {"role": "user", "content": "ZEBRA"}]}),
    );
    assert_eq!(
        r.json(),
        json!({"id": "chatcmpl-mock1", "object": "chat.completion", "created": 0, "model": "gpt-x",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_mock1", "type": "function", "function": {"name": "Bash", "arguments": "{\"command\":\"echo hi\"}"}}]},
                "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}})
    );
    let r = post(
        &url,
        "/chat/completions",
        &json!({"model": "gpt-x", "tools": tools, "messages": [
        {"role": "user", "content": "ZEBRA"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_mock1"}]},
        {"role": "tool", "tool_call_id": "call_mock1", "content": "hi"}]}),
    );
    assert_eq!(
        r.json()["choices"][0],
        json!({"index": 0, "message": {"role": "assistant", "content": "done after tool"}, "finish_reason": "stop"})
    );
}

#[test]
fn error_statuses_per_dialect() {
    let mock = MockLlm::start(tools_script());
    let url = mock.url();
    let r = post(
        &url,
        "/v1/messages",
        &json!({"stream": true, "messages": [{"role": "user", "content": "FAIL400"}]}),
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json(),
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "mock bad request"}})
    );

    let r = post(
        &url,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "FAIL401"}]}),
    );
    assert_eq!(r.status, 401);
    assert_eq!(
        r.json(),
        json!({"error": {"message": "mock unauthorized", "type": "authentication_error", "param": null, "code": null}})
    );

    let r = post(
        &url,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "FAIL429"}]}),
    );
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("7"));

    let r = post(
        &url,
        "/v1beta/models/g:streamGenerateContent?alt=sse",
        &json!({"contents": [{"role": "user", "parts": [{"text": "FAIL500"}]}]}),
    );
    assert_eq!(r.status, 500);
    assert_eq!(r.body, "upstream exploded");

    let r = post(
        &url,
        "/v1beta/models/g:generateContent",
        &json!({"contents": [{"role": "user", "parts": [{"text": "FAIL400"}]}]}),
    );
    assert_eq!(
        r.json(),
        json!({"error": {"code": 400, "message": "mock bad request", "status": "INVALID_ARGUMENT"}})
    );
    let r = post(&url, "/v1/responses", &json!({"input": "FAIL429"}));
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("7"));
}

#[test]
fn side_requests_get_harmless_answers_and_skip_plain_rules() {
    // A rule on "ZEBRA" must not answer the title request that quotes the prompt.
    let mock = MockLlm::start(
        json!({"rules": [{"when_any_user_contains": "ZEBRA", "reply": {"status": 500}}]}),
    );
    let url = mock.url();
    let title = post(
        &url,
        "/v1/chat/completions",
        &json!({"stream": true, "messages": [
        {"role": "system", "content": "You are a title generator. You output ONLY a thread title."},
        {"role": "user", "content": "Generate a title for this conversation:\n\"ZEBRA\""}]}),
    );
    assert_eq!(title.status, 200);
    assert_eq!(
        title.sse_json()[1]["choices"][0]["delta"]["content"],
        json!("Mock title")
    );

    let router = post(
        &url,
        "/v1beta/models/gemini-3.5-flash-lite:generateContent",
        &json!({"contents": [{"role": "user", "parts": [{"text": "ZEBRA"}]}],
            "generationConfig": {"responseMimeType": "application/json",
                "responseJsonSchema": {"properties": {"complexity_reasoning": {}, "complexity_score": {}}}}}),
    );
    let text = router.json()["candidates"][0]["content"]["parts"][0]["text"].clone();
    assert_eq!(
        serde_json::from_str::<Value>(text.as_str().unwrap()).unwrap(),
        json!({"complexity_reasoning": "mock", "complexity_score": 1})
    );

    let claude_title = post(
        &url,
        "/v1/messages",
        &json!({"messages": [{"role": "user", "content": "<session>ZEBRA</session>\n\nWrite the title"}],
            "output_config": {"format": {"type": "json_schema", "schema": {"properties": {"title": {}}}}}}),
    );
    assert_eq!(
        claude_title.json()["content"][0]["text"],
        json!("{\"title\":\"Mock title\"}")
    );
    let main = post(
        &url,
        "/v1/messages",
        &json!({"messages": [{"role": "user", "content": "ZEBRA"}]}),
    );
    assert_eq!(main.status, 500);
    let matched: Vec<Value> = mock
        .requests()
        .iter()
        .map(|r| r["matched"].clone())
        .collect();
    assert_eq!(
        matched,
        [
            json!("side:builtin"),
            json!("side:builtin"),
            json!("side:builtin"),
            json!("rule:0")
        ]
    );
}

#[test]
fn times_and_set_script() {
    let mock = MockLlm::start(
        json!({"rules": [{"times": 1, "reply": {"status": 500}}], "default": {"text": "second"}}),
    );
    let url = mock.url();
    let body = json!({"messages": [{"role": "user", "content": "x"}]});
    assert_eq!(post(&url, "/v1/chat/completions", &body).status, 500);
    let r = post(&url, "/v1/chat/completions", &body);
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        json!("second")
    );
    mock.set_script(json!({"default": {"text": "third"}}));
    let r = post(&url, "/v1/chat/completions", &body);
    assert_eq!(r.json()["choices"][0]["message"]["content"], json!("third"));
}

#[test]
fn head_root_unknown_paths_and_chunked_request_bodies() {
    let mock = MockLlm::start(json!({"default": {"text": "chunked ok"}}));
    let url = mock.url();
    let r = raw_request(&url, b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, "");
    let r = raw_request(&url, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.status, 404);

    let body = json!({"messages": [{"role": "user", "content": "hi"}]}).to_string();
    let (a, b) = body.split_at(10);
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
        a.len(),
        b.len()
    );
    let r = raw_request(&url, req.as_bytes());
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        json!("chunked ok")
    );
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(reqs[0]["method"], json!("HEAD"));
    assert_eq!(reqs[1]["status"], json!(404));
    assert_eq!(reqs[2]["body"]["messages"][0]["content"], json!("hi"));
}

#[test]
fn file_script_is_reread_and_log_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    let log = dir.path().join("log.jsonl");
    std::fs::write(&script, r#"{"default":{"text":"one"}}"#).unwrap();
    let mock = MockLlm::try_start_with(Options {
        port: 0,
        script: ScriptSource::File(script.clone()),
        log: Some(log.clone()),
    })
    .unwrap();
    let body = json!({"messages": [{"role": "user", "content": "x"}]});
    let r = post(&mock.url(), "/v1/chat/completions", &body);
    assert_eq!(r.json()["choices"][0]["message"]["content"], json!("one"));
    std::fs::write(&script, r#"{"default":{"text":"two"}}"#).unwrap();
    let r = post(&mock.url(), "/v1/chat/completions", &body);
    assert_eq!(r.json()["choices"][0]["message"]["content"], json!("two"));
    std::fs::write(&script, "not json").unwrap();
    let r = post(&mock.url(), "/v1/chat/completions", &body);
    assert_eq!(r.status, 500);
    assert!(r.body.contains("is not valid JSON"), "{}", r.body);

    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["path"], json!("/v1/chat/completions"));
    assert_eq!(lines[0]["dialect"], json!("chat"));
    assert_eq!(lines[0]["matched"], json!("default"));
    assert_eq!(lines[2]["matched"], json!("script_error"));
    assert_eq!(lines, mock.requests());
}

#[test]
fn binary_prints_its_url_first() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("s.json");
    std::fs::write(&script, r#"{"default":{"text":"from the binary"}}"#).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_awf-mock-llm"))
        .arg("--script")
        .arg(&script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let r = post(
        &url,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "x"}]}),
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        json!("from the binary")
    );
}

#[test]
fn binary_rejects_unknown_flags() {
    let out = Command::new(env!("CARGO_BIN_EXE_awf-mock-llm"))
        .arg("--bogus")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown argument '--bogus'"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn binary_help_describes_the_script_format() {
    let out = Command::new(env!("CARGO_BIN_EXE_awf-mock-llm"))
        .arg("--help")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    // Every rule condition and reply key the script parser reads is described.
    for word in [
        "--script",
        "--log",
        "\"rules\"",
        "\"default\"",
        "\"side\"",
        "when_last_user_contains",
        "when_any_user_contains",
        "when_system_contains",
        "when_request_contains",
        "when_has_tools",
        "when_has_tool_result",
        "when_dialect",
        "when_model_contains",
        "when_path_contains",
        "when_header",
        "when_side",
        "times",
        "text_chunks",
        "tool_text",
        "retry_after",
        "error_message",
        "error_body",
        "delay_ms",
        "usage",
        "raw_body",
        "content_type",
        "headers",
        "refusal",
        "listening on http://127.0.0.1:PORT",
    ] {
        assert!(
            text.contains(word),
            "--help does not mention {word}:\n{text}"
        );
    }
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
