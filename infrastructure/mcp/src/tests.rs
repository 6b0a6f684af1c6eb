//! The server over in-memory pipes, driven with raw JSON-RPC lines (the third-party clients
//! drive the binary in tests/tests/mcp_serve.rs).

use std::sync::Mutex;

use awf_domain::ports::tools::ToolSpec;
use serde_json::json;
use tokio::io::AsyncBufReadExt;
use tokio::io::DuplexStream;
use tokio::io::ReadHalf;
use tokio::io::WriteHalf;

use super::*;

/// Echo (answers its `text`), Fail (an isError result), Boom (panics), Sleep (runs
/// `sleep 30` as a child and stops it when cancelled, recording its pid).
#[derive(Default)]
struct TestTools {
    sleep_pid: Mutex<Option<u32>>,
    sleep_ended: Mutex<Option<&'static str>>,
}

#[async_trait::async_trait]
impl ToolProvider for TestTools {
    fn tools(&self) -> Vec<ToolSpec> {
        ["Echo", "Fail", "Boom", "Sleep"]
            .into_iter()
            .map(|n| ToolSpec {
                name: n.into(),
                description: format!("{n} for tests"),
                input_schema: json!({"type": "object", "properties": {"text": {"type": "string"}}}),
            })
            .collect()
    }

    async fn call(
        &self,
        call: ToolCall,
        cancel: CancellationToken,
    ) -> Result<ToolOutput, ToolCallError> {
        match call.name.as_str() {
            "Echo" => Ok(ToolOutput::text(
                call.arguments
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
            )),
            "Fail" => Ok(ToolOutput::error("it failed")),
            "Boom" => panic!("kaboom"),
            "Sleep" => {
                let mut child = tokio::process::Command::new("sleep")
                    .arg("30")
                    .stdin(std::process::Stdio::null())
                    .kill_on_drop(true)
                    .spawn()
                    .expect("sleep runs");
                *self.sleep_pid.lock().unwrap() = child.id();
                tokio::select! {
                    _ = child.wait() => {
                        *self.sleep_ended.lock().unwrap() = Some("exited");
                        Ok(ToolOutput::text("slept"))
                    }
                    () = cancel.cancelled() => {
                        let _ = child.kill().await;
                        *self.sleep_ended.lock().unwrap() = Some("killed");
                        Ok(ToolOutput::error("cancelled"))
                    }
                }
            }
            other => Err(ToolCallError::UnknownTool(other.to_owned())),
        }
    }
}

struct Conn {
    to_server: WriteHalf<DuplexStream>,
    from_server: BufReader<ReadHalf<DuplexStream>>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<ServeEnd>>,
}

fn start(tools: Arc<TestTools>, options: ServeOptions) -> Conn {
    let (client, server) = tokio::io::duplex(64 * 1024 * 1024);
    let (server_r, server_w) = tokio::io::split(server);
    let (client_r, client_w) = tokio::io::split(client);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(serve(tools, options, server_r, server_w, shutdown.clone()));
    Conn {
        to_server: client_w,
        from_server: BufReader::new(client_r),
        shutdown,
        task,
    }
}

impl Conn {
    async fn send(&mut self, bytes: &[u8]) {
        self.to_server.write_all(bytes).await.unwrap();
        self.to_server.flush().await.unwrap();
    }

    async fn send_json(&mut self, v: Value) {
        let mut line = v.to_string().into_bytes();
        line.push(b'\n');
        self.send(&line).await;
    }

    async fn recv(&mut self) -> Value {
        let mut line = String::new();
        let n = tokio::time::timeout(
            Duration::from_secs(30),
            self.from_server.read_line(&mut line),
        )
        .await
        .expect("an answer within 30 s")
        .unwrap();
        assert!(n > 0, "server closed its output");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    async fn initialize(&mut self, version: &str) -> Value {
        self.send_json(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        )
        .await;
        let answer = self.recv().await;
        self.send_json(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        answer
    }

    async fn call(&mut self, id: u64, name: &str, args: Value) -> Value {
        self.send_json(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": args}}))
            .await;
        self.recv().await
    }
}

fn opts() -> ServeOptions {
    ServeOptions {
        version: "9.9.9".into(),
        ..ServeOptions::default()
    }
}

#[tokio::test]
async fn versions_up_to_2025_11_25_are_echoed_newer_ones_get_it() {
    for (asked, got) in [
        ("2024-11-05", "2024-11-05"),
        ("2025-03-26", "2025-03-26"),
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2026-07-28", "2025-11-25"),
        ("2099-01-01", "2025-11-25"),
    ] {
        let mut c = start(Arc::default(), opts());
        let init = c.initialize(asked).await;
        assert_eq!(
            init["result"]["protocolVersion"], got,
            "asked {asked}: {init}"
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "awf-mcp-server");
        assert_eq!(init["result"]["serverInfo"]["version"], "9.9.9");
        assert!(
            init["result"]["capabilities"]["tools"].is_object(),
            "{init}"
        );
    }
}

#[tokio::test]
async fn lists_and_calls_tools() {
    let mut c = start(Arc::default(), opts());
    c.initialize("2025-06-18").await;
    c.send_json(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    let list = c.recv().await;
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Echo", "Fail", "Boom", "Sleep"]);
    assert_eq!(list["result"]["tools"][0]["inputSchema"]["type"], "object");
    let echo = c.call(2, "Echo", json!({"text": "héllo"})).await;
    assert_eq!(echo["id"], 2);
    assert_eq!(echo["result"]["content"][0]["text"], "héllo");
    assert_eq!(echo["result"]["isError"], false);
    let fail = c.call(3, "Fail", json!({})).await;
    assert_eq!(fail["result"]["isError"], true);
    assert_eq!(fail["result"]["content"][0]["text"], "it failed");
}

#[tokio::test]
async fn an_unknown_tool_is_invalid_params() {
    let mut c = start(Arc::default(), opts());
    c.initialize("2025-11-25").await;
    let answer = c.call(5, "Nope", json!({})).await;
    assert_eq!(answer["id"], 5);
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Nope"),
        "{answer}"
    );
}

/// Parameters of the wrong shape get -32602 with the request's id (rmcp answered some
/// without any `id`, and a `tools/call` without a tool name as an unknown method), and the
/// session goes on.
#[tokio::test]
async fn malformed_params_are_invalid_params_answered_with_their_id() {
    let mut c = start(Arc::default(), opts());
    c.initialize("2025-11-25").await;
    for (id, method, params, why) in [
        (5, "ping", json!("str"), "`params` must be an object"),
        (6, "tools/list", json!([]), "`params` must be an object"),
        (7, "tools/call", json!("str"), "`params` must be an object"),
        (
            8,
            "tools/call",
            Value::Null,
            "`tools/call` needs `params` with the tool's `name`",
        ),
        (
            9,
            "tools/call",
            json!({"name": 5}),
            "`params.name` must be the tool's name",
        ),
        (
            10,
            "tools/call",
            json!({"name": "Echo", "arguments": "x"}),
            "`params.arguments` must be an object",
        ),
        (
            13,
            "tools/call",
            json!({"name": "Echo", "arguments": {}, "_meta": 5}),
            "Invalid params for `tools/call`: `params._meta` must be an object",
        ),
        (
            14,
            "tools/list",
            json!({"_meta": "x"}),
            "Invalid params for `tools/list`: `params._meta` must be an object",
        ),
    ] {
        let mut req = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if !params.is_null() {
            req["params"] = params;
        }
        c.send_json(req).await;
        let answer = c.recv().await;
        assert_eq!(answer["id"], id, "{answer}");
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        assert!(
            answer["error"]["message"].as_str().unwrap().contains(why),
            "{answer}"
        );
    }
    let echo = c.call(11, "Echo", json!({"text": "still here"})).await;
    assert_eq!(echo["result"]["content"][0]["text"], "still here");
    // No `arguments` at all is a call without arguments, as before.
    c.send_json(
        json!({"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"name": "Fail"}}),
    )
    .await;
    assert_eq!(c.recv().await["result"]["isError"], true);
}

#[tokio::test]
async fn a_panicking_tool_answers_with_an_error_result_and_the_server_lives_on() {
    let mut c = start(Arc::default(), opts());
    c.initialize("2025-11-25").await;
    let boom = c.call(7, "Boom", json!({})).await;
    assert_eq!(boom["id"], 7);
    assert_eq!(boom["result"]["isError"], true, "{boom}");
    let text = boom["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("kaboom"), "{text}");
    let echo = c.call(8, "Echo", json!({"text": "still here"})).await;
    assert_eq!(echo["result"]["content"][0]["text"], "still here");
}

#[tokio::test]
async fn an_oversized_frame_gets_an_error_with_its_id_and_is_not_echoed() {
    let mut c = start(
        Arc::default(),
        ServeOptions {
            max_frame_bytes: 1024,
            ..opts()
        },
    );
    c.initialize("2025-11-25").await;
    let big = "x".repeat(5000);
    c.send_json(json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call",
        "params": {"name": "Echo", "arguments": {"text": big}}}))
        .await;
    let answer = c.recv().await;
    assert_eq!(answer["id"], 41, "{answer}");
    assert_eq!(answer["error"]["code"], -32700, "{answer}");
    assert!(!answer.to_string().contains("xxxxxxxx"), "echoed: {answer}");
    // A frame just under the limit still works, and so does the connection.
    let echo = c.call(42, "Echo", json!({"text": "x".repeat(800)})).await;
    assert_eq!(echo["result"]["content"][0]["text"], "x".repeat(800));
}

#[tokio::test]
async fn an_oversized_frame_without_a_readable_id_gets_a_null_id_error() {
    let mut c = start(
        Arc::default(),
        ServeOptions {
            max_frame_bytes: 1024,
            ..opts()
        },
    );
    c.initialize("2025-11-25").await;
    let mut line = vec![b'['; 3000];
    line.push(b'\n');
    c.send(&line).await;
    let answer = c.recv().await;
    assert!(answer["id"].is_null(), "{answer}");
    assert_eq!(answer["error"]["code"], -32700);
}

#[tokio::test]
async fn garbage_bom_crlf_and_early_notifications_do_not_kill_it() {
    let mut c = start(Arc::default(), opts());
    c.send(b"this is not json\n").await;
    let parse = c.recv().await;
    assert_eq!(parse["error"]["code"], -32700, "{parse}");
    assert!(parse["id"].is_null(), "{parse}");
    c.send(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
        .await;
    c.send(b"{\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{}}\n")
        .await;
    c.send(b"\n").await;
    let init = c.initialize("2025-11-25").await;
    assert_eq!(init["id"], 0, "{init}");
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    c.send(b"more garbage {{{\n").await;
    let parse = c.recv().await;
    assert_eq!(parse["error"]["code"], -32700, "{parse}");
    assert!(parse["id"].is_null(), "{parse}");
    c.send(b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"Echo\",\"arguments\":{\"text\":\"bom\"}}}\n").await;
    let bom = c.recv().await;
    assert_eq!(bom["result"]["content"][0]["text"], "bom", "{bom}");
    c.send(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"Echo\",\"arguments\":{\"text\":\"crlf\"}}}\r\n").await;
    let crlf = c.recv().await;
    assert_eq!(crlf["result"]["content"][0]["text"], "crlf", "{crlf}");
}

#[tokio::test]
async fn a_batch_before_initialize_is_answered() {
    let mut c = start(Arc::default(), opts());
    c.send(b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]\n")
        .await;
    let answer = c.recv().await;
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    let init = c.initialize("2025-11-25").await;
    assert_eq!(init["id"], 0);
}

#[tokio::test]
async fn requests_before_initialize_are_refused_and_never_run_and_the_session_lives_on() {
    let tools = Arc::new(TestTools::default());
    let mut c = start(tools.clone(), opts());
    c.send_json(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "Sleep", "arguments": {}, "_meta": {"progressToken": 5}}}))
        .await;
    let refused = c.recv().await;
    assert_eq!(refused["id"], 1, "{refused}");
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not initialized"),
        "{refused}"
    );
    assert!(tools.sleep_pid.lock().unwrap().is_none(), "the tool ran");
    c.send_json(json!({"jsonrpc": "2.0", "id": "l", "method": "tools/list"}))
        .await;
    let refused = c.recv().await;
    assert_eq!(refused["id"], "l", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not initialized"),
        "{refused}"
    );
    c.send_json(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
        .await;
    assert_eq!(
        c.recv().await,
        json!({"jsonrpc": "2.0", "id": 2, "result": {}})
    );
    let init = c.initialize("2025-11-25").await;
    assert_eq!(init["id"], 0, "{init}");
    let echo = c.call(3, "Echo", json!({"text": "after"})).await;
    assert_eq!(echo["result"]["content"][0]["text"], "after", "{echo}");
    let list = c.call(4, "Echo", json!({"text": "again"})).await;
    assert_eq!(list["result"]["content"][0]["text"], "again", "{list}");
}

#[tokio::test]
async fn lines_the_parser_refuses_get_a_parse_error_with_their_id() {
    let mut c = start(Arc::default(), opts());
    c.initialize("2025-11-25").await;
    let deep = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{{\"name\":\"Echo\",\"arguments\":{{\"text\":{}1{}}}}}}}\n",
        "[".repeat(1000),
        "]".repeat(1000)
    );
    let lines: Vec<Vec<u8>> = vec![
        b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"Echo\",\"arguments\":{\"text\":\"\xff\xfe\"}}}\n".to_vec(),
        b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"Echo\",\"arguments\":{\"text\":\"\\ud800\"}}}\n".to_vec(),
        deep.into_bytes(),
        b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"ping\"}\n".to_vec(),
    ];
    for line in &lines {
        c.send(line).await;
        let answer = c.recv().await;
        assert_eq!(answer["id"], 7, "{answer}");
        assert_eq!(answer["error"]["code"], -32700, "{answer}");
    }
    let echo = c.call(9, "Echo", json!({"text": "alive"})).await;
    assert_eq!(echo["result"]["content"][0]["text"], "alive", "{echo}");
}

#[tokio::test]
async fn invalid_requests_get_a_null_id_when_no_id_is_usable() {
    let mut c = start(Arc::default(), opts());
    c.initialize("2025-11-25").await;
    for (line, id) in [
        (
            json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]),
            Value::Null,
        ),
        (
            json!({"jsonrpc": "1.0", "id": 2, "method": "ping"}),
            json!(2),
        ),
        (json!({"id": 3, "method": "ping"}), json!(3)),
        (json!({"jsonrpc": "1.0", "method": "ping"}), Value::Null),
        (
            json!({"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}),
            Value::Null,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}),
            Value::Null,
        ),
        (
            json!({"jsonrpc": "2.0", "id": null, "method": "ping"}),
            Value::Null,
        ),
        (json!({"jsonrpc": "2.0", "id": 4}), json!(4)),
        (json!(17), Value::Null),
    ] {
        c.send_json(line.clone()).await;
        let answer = c.recv().await;
        assert_eq!(answer["error"]["code"], -32600, "{line}: {answer}");
        assert!(answer.get("id").is_some(), "{line}: no id member: {answer}");
        assert_eq!(answer["id"], id, "{line}: {answer}");
    }
    let echo = c.call(9, "Echo", json!({"text": "alive"})).await;
    assert_eq!(echo["result"]["content"][0]["text"], "alive", "{echo}");
}

fn alive(pid: u32) -> bool {
    // A zombie is not alive; /proc/<pid>/stat says `Z`.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

async fn wait_for_pid(tools: &TestTools) -> u32 {
    for _ in 0..300 {
        if let Some(pid) = *tools.sleep_pid.lock().unwrap() {
            return pid;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the Sleep tool never started its child");
}

#[tokio::test]
async fn client_cancellation_stops_the_call_and_its_child() {
    let tools = Arc::new(TestTools::default());
    let mut c = start(Arc::clone(&tools), opts());
    c.initialize("2025-11-25").await;
    c.send_json(json!({"jsonrpc": "2.0", "id": 11, "method": "tools/call",
        "params": {"name": "Sleep", "arguments": {}}}))
        .await;
    let pid = wait_for_pid(&tools).await;
    assert!(alive(pid));
    c.send_json(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 11, "reason": "test"}}),
    )
    .await;
    for _ in 0..300 {
        if tools.sleep_ended.lock().unwrap().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(*tools.sleep_ended.lock().unwrap(), Some("killed"));
    assert!(!alive(pid), "sleep {pid} survived the cancel");
    // The late answer is dropped; the next request is answered.
    let echo = c.call(12, "Echo", json!({"text": "after"})).await;
    assert_eq!(echo["id"], 12, "{echo}");
}

#[tokio::test]
async fn input_eof_ends_the_server_and_cancels_calls_in_flight() {
    let tools = Arc::new(TestTools::default());
    let mut c = start(Arc::clone(&tools), opts());
    c.initialize("2025-11-25").await;
    c.send_json(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "Sleep", "arguments": {}}}))
        .await;
    let pid = wait_for_pid(&tools).await;
    c.to_server.shutdown().await.unwrap();
    let end = tokio::time::timeout(Duration::from_secs(10), c.task)
        .await
        .expect("serve ends after EOF")
        .unwrap()
        .unwrap();
    assert_eq!(end, ServeEnd::InputClosed);
    assert_eq!(*tools.sleep_ended.lock().unwrap(), Some("killed"));
    assert!(!alive(pid));
}

#[tokio::test]
async fn the_shutdown_token_ends_the_server_and_cancels_calls_in_flight() {
    let tools = Arc::new(TestTools::default());
    let mut c = start(Arc::clone(&tools), opts());
    c.initialize("2025-11-25").await;
    c.send_json(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "Sleep", "arguments": {}}}))
        .await;
    let pid = wait_for_pid(&tools).await;
    c.shutdown.cancel();
    // The call in flight is answered before the output ends.
    let mut answered = None;
    loop {
        let mut line = String::new();
        let n = tokio::time::timeout(Duration::from_secs(30), c.from_server.read_line(&mut line))
            .await
            .expect("output within 30 s")
            .unwrap();
        if n == 0 {
            break;
        }
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["id"] == 3 {
            answered = Some(v);
        }
    }
    let answered = answered.expect("the call in flight got no answer at shutdown");
    assert_eq!(answered["result"]["isError"], true, "{answered}");
    let end = tokio::time::timeout(Duration::from_secs(10), c.task)
        .await
        .expect("serve ends after shutdown")
        .unwrap()
        .unwrap();
    assert_eq!(end, ServeEnd::Shutdown);
    assert!(!alive(pid));
}

#[test]
fn output_is_capped_on_a_char_boundary() {
    let capped = cap_output("ééééé".into(), 5);
    assert!(
        capped.starts_with("éé\n[awf-mcp-server: output truncated at 4 of 10 bytes]"),
        "{capped}"
    );
    assert_eq!(cap_output("short".into(), 5), "short");
}

#[test]
fn ids_are_found_in_a_cut_line() {
    assert_eq!(scan_id(br#"{"jsonrpc":"2.0","id":17,"method":"#), json!(17));
    assert_eq!(
        scan_id(br#"{"jsonrpc":"2.0", "id" : "ab-1","#),
        json!("ab-1")
    );
    assert_eq!(scan_id(br#"{"params":{"x":"#), Value::Null);
}

/// JSON-RPC 2.0: ids are unique among a client's pending requests. A request reusing the id
/// of one still pending is refused (`-32600`, `"id": null`, the id named) and never runs;
/// the pending one keeps its answer; `7` and `"7"` are two ids; an answered id, and a
/// cancelled call's id once the call stopped, may be used again.
#[tokio::test]
async fn a_request_reusing_a_pending_id_is_refused_and_the_pending_one_answered() {
    let tools = Arc::new(TestTools::default());
    let mut c = start(Arc::clone(&tools), opts());
    c.initialize("2025-11-25").await;
    c.send_json(json!({"jsonrpc": "2.0", "id": 21, "method": "tools/call",
        "params": {"name": "Sleep", "arguments": {}}}))
        .await;
    let pid = wait_for_pid(&tools).await;
    for dup in [
        json!({"jsonrpc": "2.0", "id": 21, "method": "tools/call",
            "params": {"name": "Echo", "arguments": {"text": "second"}}}),
        json!({"jsonrpc": "2.0", "id": 21, "method": "tools/list"}),
    ] {
        c.send_json(dup).await;
        let refused = c.recv().await;
        assert_eq!(
            refused,
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
                "message": "Invalid request: id 21 is the id of a request still pending; ids \
                    must be unique among a client's pending requests (this one was not run)",
                "data": {"duplicate_id": 21}}})
        );
    }
    // Another id, and the string "21", are answered meanwhile.
    let echo = c.call(22, "Echo", json!({"text": "other"})).await;
    assert_eq!(echo["result"]["content"][0]["text"], "other", "{echo}");
    c.send_json(json!({"jsonrpc": "2.0", "id": "21", "method": "ping"}))
        .await;
    assert_eq!(
        c.recv().await,
        json!({"jsonrpc": "2.0", "id": "21", "result": {}})
    );
    // Cancelled: once the call stopped, its id is free (its late answer is dropped).
    c.send_json(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 21, "reason": "test"}}),
    )
    .await;
    for _ in 0..300 {
        if !alive(pid) && tools.sleep_ended.lock().unwrap().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut again = None;
    for _ in 0..300 {
        c.send_json(json!({"jsonrpc": "2.0", "id": 21, "method": "tools/call",
            "params": {"name": "Echo", "arguments": {"text": "again"}}}))
            .await;
        let answer = c.recv().await;
        if answer["id"] == 21 {
            again = Some(answer);
            break;
        }
        // Refused while the cancelled call was still stopping.
        assert_eq!(answer["error"]["data"]["duplicate_id"], 21, "{answer}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let again = again.expect("the id is free once the cancelled call stopped");
    assert_eq!(again["result"]["content"][0]["text"], "again", "{again}");
    // Answered: free again.
    let echo = c.call(21, "Echo", json!({"text": "third"})).await;
    assert_eq!(echo["result"]["content"][0]["text"], "third", "{echo}");
    c.to_server.shutdown().await.unwrap();
    let end = tokio::time::timeout(Duration::from_secs(10), c.task)
        .await
        .expect("serve ends after EOF")
        .unwrap()
        .unwrap();
    assert_eq!(end, ServeEnd::InputClosed);
}

#[test]
fn pending_ids_follow_answers_cancels_and_call_ends() {
    let p = PendingIds::default();
    assert!(p.insert(&json!(1), false));
    assert!(!p.insert(&json!(1), true));
    assert!(p.insert(&json!("1"), true));
    // A response frees its id; a request or notification from the server does not.
    p.answered(br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#);
    p.answered(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    assert!(!p.insert(&json!(1), false));
    p.answered(br#"{"jsonrpc":"2.0","id":1,"result":{"big":[1,2,3]}}"#);
    assert!(p.insert(&json!(1), false));
    // Cancelled: an ordinary request at once; a running call when it ended.
    p.cancelled(&json!(1));
    assert!(p.insert(&json!(1), false));
    p.cancelled(&json!("1"));
    assert!(!p.insert(&json!("1"), true));
    p.call_ended("\"1\"");
    assert!(p.insert(&json!("1"), true));
    // A call that ended and was cancelled before its answer was written: free at once.
    p.call_ended("\"1\"");
    p.cancelled(&json!("1"));
    assert!(p.insert(&json!("1"), true));
}
