//! `awf acp-serve` driven over raw JSON-RPC lines: framing and error paths, the order of a
//! turn's frames, cancel (notification and request), approvals, missing inputs, session
//! load/list/close, modes, masking, shutdown. The workflows are real files run by the built
//! binary; process checks look only at this test's processes (the sandbox's marker).
//! Source: shared/spec/acp.md §1, §2.13 (AWF (Go)'s scenarios), §5, §8.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;
use std::time::Instant;

use awf_tests::Sandbox;
use awf_tests::mcp::RawServer;
use serde_json::Value;
use serde_json::json;

const TRIVIAL: &str = "name: trivial\ndescription: trivial\nstates:\n  initial: run\n  run:\n    type: step\n    command: \"true\"\n    on_success: done\n  done:\n    type: terminal\n";
const ECHO: &str = "name: input-echo\ndescription: Echo a message\ninputs:\n  - name: message\n    type: string\n    default: hello\nstates:\n  initial: echo\n  echo:\n    type: step\n    command: echo \"{{.inputs.message}}\"\n    on_success: done\n  done:\n    type: terminal\n";
const LONG: &str = "name: long-running\nstates:\n  initial: wait\n  wait:\n    type: step\n    command: sleep 30\n    on_success: done\n  done:\n    type: terminal\n";
const DEPLOY: &str = "name: deploy\ninputs:\n  - name: env\n    type: string\n    required: true\n    validation:\n      enum: [staging, prod]\nstates:\n  initial: ship\n  ship:\n    type: step\n    command: echo \"shipping {{.inputs.env}}\"\n    approval:\n      message: \"Deploy to {{.inputs.env}}?\"\n    on_success: done\n  done:\n    type: terminal\n";
const ASK: &str = "name: ask\ninputs:\n  - name: who\n    type: string\n    required: true\nstates:\n  initial: greet\n  greet:\n    type: step\n    command: echo \"hello {{.inputs.who}}\"\n    on_success: done\n  done:\n    type: terminal\n";
const FAILS: &str = "name: fails\nstates:\n  initial: boom\n  boom:\n    type: step\n    command: \"echo out; exit 3\"\n    on_success: done\n  done:\n    type: terminal\n";

/// A sandbox whose workflow path holds the test workflows.
fn sandbox() -> Sandbox {
    let mut sb = Sandbox::new().unwrap();
    for (name, text) in [
        ("trivial", TRIVIAL),
        ("input-echo", ECHO),
        ("long-running", LONG),
        ("deploy", DEPLOY),
        ("ask", ASK),
        ("fails", FAILS),
    ] {
        sb.write(&format!("wf/{name}.yaml"), text).unwrap();
    }
    let wf = sb.path().join("wf").display().to_string();
    sb.set_env("AWF_WORKFLOWS_PATH", &wf);
    sb
}

/// `awf acp-serve` with a frame buffer: frames are read in order and kept until asked for.
struct Acp {
    raw: RawServer,
    seen: Vec<Value>,
    next: u64,
}

impl Acp {
    fn start(sb: &Sandbox, args: &[&str]) -> Self {
        let mut a = vec!["acp-serve"];
        a.extend_from_slice(args);
        Self {
            raw: RawServer::spawn(sb.cmd(&a)),
            seen: Vec::new(),
            next: 100,
        }
    }

    fn send(&mut self, v: &Value) {
        self.raw.send_json(v);
    }

    fn request(&mut self, method: &str, params: Value) -> u64 {
        self.next += 1;
        let id = self.next;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// Frames until the answer to `id`; gives (the frames before it, the answer).
    fn until_answer(&mut self, id: &Value) -> (Vec<Value>, Value) {
        let mut before = Vec::new();
        loop {
            let f = self.raw.recv();
            self.seen.push(f.clone());
            if f.get("method").is_none() && f.get("id") == Some(id) {
                return (before, f);
            }
            before.push(f);
        }
    }

    /// Frames until one matching `pred`; gives it.
    fn until(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        loop {
            let f = self.raw.recv();
            self.seen.push(f.clone());
            if pred(&f) {
                return f;
            }
        }
    }

    fn call(&mut self, method: &str, params: Value) -> (Vec<Value>, Value) {
        let id = self.request(method, params);
        self.until_answer(&json!(id))
    }

    fn init(&mut self, caps: Value) -> Value {
        self.call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": caps,
                   "clientInfo": {"name": "awf-e2e", "version": "1"}}),
        )
        .1
    }

    fn new_session(&mut self, cwd: &std::path::Path) -> String {
        let (_, r) = self.call(
            "session/new",
            json!({"cwd": cwd.display().to_string(), "mcpServers": []}),
        );
        r["result"]["sessionId"].as_str().unwrap().to_owned()
    }

    fn prompt(&mut self, sid: &str, text: &str) -> u64 {
        self.request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]}),
        )
    }
}

fn updates(frames: &[Value]) -> Vec<&Value> {
    frames
        .iter()
        .filter(|f| f["method"] == "session/update")
        .map(|f| &f["params"]["update"])
        .collect()
}

fn texts(frames: &[Value], kind: &str) -> String {
    updates(frames)
        .iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .map(|u| u["content"]["text"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn initialize_answers_version_1_with_agent_info_and_what_works() {
    let sb = sandbox();
    let mut acp = Acp::start(&sb, &[]);
    // Before initialize, nothing else.
    let (_, early) = acp.call("session/new", json!({"cwd": "/", "mcpServers": []}));
    assert_eq!(early["error"]["code"], -32600, "{early}");
    let (_, r) = acp.call("initialize", json!({"protocolVersion": 7}));
    let r = &r["result"];
    assert_eq!(r["protocolVersion"], 1, "{r}");
    assert_eq!(r["agentInfo"]["name"], "awf");
    assert_eq!(r["authMethods"], json!([]));
    assert_eq!(r["agentCapabilities"]["loadSession"], true);
    assert_eq!(r["agentCapabilities"]["promptCapabilities"]["image"], false);
    assert_eq!(r["agentCapabilities"]["mcpCapabilities"]["http"], false);
    let (_, bad) = acp.call("initialize", json!({"protocolVersion": "1"}));
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let (_, unknown) = acp.call("session/fork", json!({}));
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    let (code, took, _) = acp.raw.close();
    assert_eq!(code, Some(0));
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn session_new_answers_before_the_slash_commands_and_checks_its_params() {
    let sb = sandbox();
    let mut acp = Acp::start(&sb, &[]);
    acp.init(json!({}));
    let id = acp.request(
        "session/new",
        json!({"cwd": sb.path().display().to_string(), "mcpServers": []}),
    );
    let (before, r) = acp.until_answer(&json!(id));
    assert!(updates(&before).is_empty(), "{before:?}");
    let sid = r["result"]["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(r["result"]["modes"]["currentModeId"], "ask");
    let cmds = acp.until(|f| f["method"] == "session/update");
    let u = &cmds["params"]["update"];
    assert_eq!(cmds["params"]["sessionId"], sid.as_str());
    assert_eq!(u["sessionUpdate"], "available_commands_update");
    let list = u["availableCommands"].as_array().unwrap();
    let names: Vec<&str> = list.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert!(
        names.contains(&"trivial") && names.contains(&"input-echo"),
        "{names:?}"
    );
    let echo = list.iter().find(|c| c["name"] == "input-echo").unwrap();
    assert_eq!(echo["description"], "Echo a message");
    assert_eq!(echo["input"]["hint"], "[message=<string>]");
    assert!(list.iter().all(|c| c["description"].is_string()));

    let (_, rel) = acp.call("session/new", json!({"cwd": "rel/dir", "mcpServers": []}));
    assert_eq!(rel["error"]["code"], -32602, "{rel}");
    assert_eq!(rel["error"]["data"]["awfCode"], "USER.ACP.INVALID_CWD");
    let cwd = sb.path().display().to_string();
    let (_, reserved) = acp.call(
        "session/new",
        json!({"cwd": cwd, "mcpServers": [
            {"name": "fs", "command": "/bin/true", "args": [], "env": []},
            {"name": "awf-proxy", "command": "/bin/true", "args": [], "env": []}]}),
    );
    assert_eq!(reserved["error"]["code"], -32602, "{reserved}");
    let msg = reserved["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("mcpServers[1]") && msg.contains("reserved"),
        "{msg}"
    );
    let (_, http) = acp.call(
        "session/new",
        json!({"cwd": cwd, "mcpServers": [{"type": "http", "name": "h", "url": "http://x", "headers": []}]}),
    );
    assert_eq!(
        http["error"]["data"]["awfCode"], "USER.ACP.INVALID_MCP_SERVER",
        "{http}"
    );
    let (_, ok) = acp.call(
        "session/new",
        json!({"cwd": cwd, "mcpServers": [{"name": "fs", "command": "/bin/true", "args": ["-x"], "env": [{"name": "K", "value": "v"}]}]}),
    );
    assert!(ok["result"]["sessionId"].is_string(), "{ok}");
}

#[test]
fn a_prompt_runs_the_workflow_and_every_update_precedes_the_response() {
    let sb = sandbox();
    let mut acp = Acp::start(&sb, &[]);
    acp.init(json!({}));
    let sid = acp.new_session(sb.path());
    let id = acp.prompt(&sid, "/input-echo message=streamhello");
    let (before, r) = acp.until_answer(&json!(id));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let ups = updates(&before);
    let echo: Vec<&&Value> = ups
        .iter()
        .filter(|u| {
            u["toolCallId"]
                .as_str()
                .is_some_and(|t| t.ends_with(":echo:1"))
        })
        .collect();
    let statuses: Vec<&str> = echo.iter().map(|u| u["status"].as_str().unwrap()).collect();
    assert_eq!(
        statuses,
        ["pending", "in_progress", "completed"],
        "{echo:?}"
    );
    assert_eq!(echo[0]["sessionUpdate"], "tool_call");
    assert_eq!(echo[0]["kind"], "execute");
    // The command as it runs (rendered), not its template.
    assert_eq!(echo[0]["rawInput"]["command"], "echo \"streamhello\"");
    assert_eq!(echo[2]["content"][0]["content"]["text"], "streamhello\n");
    assert!(texts(&before, "agent_message_chunk").contains("streamhello"));
    let plans: Vec<&&Value> = ups
        .iter()
        .filter(|u| u["sessionUpdate"] == "plan")
        .collect();
    assert_eq!(plans.first().unwrap()["entries"][0]["status"], "pending");
    assert_eq!(plans.last().unwrap()["entries"][0]["status"], "completed");

    // The run happened in the session's cwd, recorded like any run.
    let id = acp.prompt(&sid, "/fails");
    let (before, r) = acp.until_answer(&json!(id));
    assert_eq!(r["result"]["stopReason"], "end_turn");
    let failed = updates(&before)
        .into_iter()
        .find(|u| u["status"] == "failed")
        .expect("the failed step's card");
    assert!(failed["toolCallId"].as_str().unwrap().ends_with(":boom:1"));
    assert!(texts(&before, "agent_message_chunk").contains("Workflow \"fails\" failed"));
}

#[test]
fn bad_prompts_are_answered_not_fatal() {
    let sb = sandbox();
    let mut acp = Acp::start(&sb, &[]);
    acp.init(json!({}));
    let sid = acp.new_session(sb.path());
    let id = acp.prompt(&sid, "hello there");
    let (before, r) = acp.until_answer(&json!(id));
    assert_eq!(r["result"]["stopReason"], "end_turn");
    assert!(texts(&before, "agent_message_chunk").starts_with("Invalid prompt:"));
    let id = acp.prompt(&sid, "/no-such-workflow");
    let (before, r) = acp.until_answer(&json!(id));
    assert_eq!(r["result"]["stopReason"], "end_turn");
    assert!(
        texts(&before, "agent_message_chunk").contains("failed to start"),
        "{before:?}"
    );
    let (_, img) = acp.call(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "/trivial"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"}]}),
    );
    assert_eq!(img["error"]["code"], -32602, "{img}");
    assert_eq!(
        img["error"]["data"]["awfCode"],
        "USER.ACP.UNSUPPORTED_BLOCK"
    );
    // A resource link binds to the pair right before it; an embedded text resource too.
    let (before, r) = acp.call(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "/input-echo message="},
            {"type": "resource_link", "uri": "file:///tmp/main.go", "name": "main.go"}]}),
    );
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert!(
        texts(&before, "agent_message_chunk").contains("/tmp/main.go"),
        "{before:?}"
    );
    let (before, _) = acp.call(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "/input-echo message="},
            {"type": "resource", "resource": {"uri": "file:///x.txt", "text": "embedded words"}}]}),
    );
    assert!(texts(&before, "agent_message_chunk").contains("embedded words"));
    let (before, _) = acp.call(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "/input-echo"},
            {"type": "resource_link", "uri": "file:///tmp/a", "name": "a"}]}),
    );
    assert!(texts(&before, "agent_message_chunk").contains("not bound to an input"));
}

#[test]
fn free_text_goes_to_the_default_workflow() {
    let mut sb = sandbox();
    sb.write(
        "wf/chat.yaml",
        "name: chat\ninputs:\n  - name: prompt\n    type: string\nstates:\n  initial: say\n  say:\n    type: step\n    command: echo \"got {{.inputs.prompt}}\"\n    on_success: done\n  done:\n    type: terminal\n",
    )
    .unwrap();
    sb.set_env("UNUSED", "1");
    let mut acp = Acp::start(&sb, &["--workflow", "chat"]);
    acp.init(json!({}));
    let sid = acp.new_session(sb.path());
    let id = acp.prompt(&sid, "what is up");
    let (before, r) = acp.until_answer(&json!(id));
    assert_eq!(r["result"]["stopReason"], "end_turn");
    assert!(
        texts(&before, "agent_message_chunk").contains("got what is up"),
        "{before:?}"
    );
}

#[test]
fn cancel_answers_cancelled_within_6_s_and_leaves_no_process() {
    let sb = sandbox();
    let mut acp = Acp::start(&sb, &[]);
    acp.init(json!({}));
    let sid = acp.new_session(sb.path());
    for as_request in [false, true] {
        let id = acp.prompt(&sid, "/long-running");
        acp.until(|f| f["params"]["update"]["status"] == "in_progress");
        awf_tests::wait_for("sleep started", || {
            sb.processes().iter().any(|p| p.cmdline == "sleep 30")
        });
        // A second prompt while one runs.
        let (_, busy) = acp.call(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": "/trivial"}]}),
        );
        assert_eq!(busy["error"]["code"], -32602, "{busy}");
        assert_eq!(
            busy["error"]["data"]["awfCode"],
            "USER.ACP.PROMPT_IN_FLIGHT"
        );
        let t = Instant::now();
        if as_request {
            let cid = acp.request("session/cancel", json!({"sessionId": sid}));
            let _ = cid;
        } else {
            acp.send(&json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}));
        }
        let (before, r) = acp.until_answer(&json!(id));
        assert!(t.elapsed() < Duration::from_secs(6), "{:?}", t.elapsed());
        assert_eq!(r["result"]["stopReason"], "cancelled", "{r}");
        let last = updates(&before)
            .into_iter()
            .rev()
            .find(|u| {
                u["toolCallId"]
                    .as_str()
                    .is_some_and(|t| t.ends_with(":wait:1"))
            })
            .unwrap();
        assert_eq!(last["status"], "failed", "{last}");
        awf_tests::wait_for("sleep reaped", || {
            !sb.processes().iter().any(|p| p.cmdline == "sleep 30")
        });
        // Nothing of the sandbox but the server itself and its watchdog (which kills the
        // steps' process groups should the server be SIGKILLed).
        let me = acp.raw.child.id();
        awf_tests::wait_for("only the server and its watchdog left", || {
            sb.processes()
                .iter()
                .all(|p| p.pid == me || p.cmdline.ends_with(" __watchdog"))
        });
    }
    // The session lives on.
    let id = acp.prompt(&sid, "/trivial");
    let (_, r) = acp.until_answer(&json!(id));
    assert_eq!(r["result"]["stopReason"], "end_turn");
}

#[test]
fn unknown_sessions_are_32002_naming_them() {
    let sb = sandbox();
    let mut acp = Acp::start(&sb, &[]);
    acp.init(json!({}));
    let (_, r) = acp.call(
        "session/prompt",
        json!({"sessionId": "sess_nope", "prompt": [{"type": "text", "text": "/trivial"}]}),
    );
    assert_eq!(r["error"]["code"], -32002, "{r}");
    assert_eq!(r["error"]["data"]["sessionId"], "sess_nope");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("sess_nope")
    );
    let (_, r) = acp.call("session/cancel", json!({"sessionId": "sess_nope"}));
    assert_eq!(r["error"]["code"], -32002, "{r}");
}

#[test]
fn bad_lines_get_32700_without_echo_and_the_connection_lives_on() {
    let sb = sandbox();
    let mut acp = Acp::start(&sb, &[]);
    acp.raw.send(b"{bad json SECRETWORD\n");
    let e = acp.raw.recv();
    assert_eq!(e["error"]["code"], -32700, "{e}");
    assert_eq!(e["id"], Value::Null);
    assert!(!e.to_string().contains("SECRETWORD"), "{e}");
    // Over 10 MiB.
    let mut big =
        b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"initialize\",\"params\":{\"x\":\"".to_vec();
    big.extend(std::iter::repeat_n(b'a', 10 * 1024 * 1024 + 10));
    big.extend(b"\"}}\n");
    acp.raw.send(&big);
    let e = acp.raw.recv();
    assert_eq!(e["error"]["code"], -32700, "{e}");
    assert!(e.to_string().len() < 500);
    let r = acp.init(json!({}));
    assert_eq!(r["result"]["protocolVersion"], 1, "{r}");
}

#[test]
fn approval_gates_ask_the_editor_and_allow_always_is_remembered() {
    let sb = sandbox();
    let mut acp = Acp::start(&sb, &[]);
    acp.init(json!({}));
    let sid = acp.new_session(sb.path());
    // Rejected: the step does not run.
    let id = acp.prompt(&sid, "/deploy env=staging");
    let ask = acp.until(|f| f["method"] == "session/request_permission");
    let kinds: Vec<&str> = ask["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["allow_once", "reject_once", "allow_always", "reject_always"]
    );
    assert_eq!(ask["params"]["sessionId"], sid.as_str());
    let reject = ask["params"]["options"][1]["optionId"].clone();
    acp.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": {"outcome": "selected", "optionId": reject}}}));
    let (before, r) = acp.until_answer(&json!(id));
    assert_eq!(r["result"]["stopReason"], "end_turn");
    assert!(!texts(&before, "agent_message_chunk").contains("shipping"));
    // Always: asked once, then remembered for this session and gate.
    let id = acp.prompt(&sid, "/deploy env=staging");
    let ask = acp.until(|f| f["method"] == "session/request_permission");
    acp.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": {"outcome": "selected", "optionId": "awf:allow_always"}}}));
    let (before, _) = acp.until_answer(&json!(id));
    assert!(texts(&before, "agent_message_chunk").contains("shipping staging"));
    let id = acp.prompt(&sid, "/deploy env=prod");
    let (before, _) = acp.until_answer(&json!(id));
    assert!(
        before
            .iter()
            .all(|f| f["method"] != "session/request_permission")
    );
    assert!(texts(&before, "agent_message_chunk").contains("shipping prod"));
    // Another session asks again; in auto mode it does not.
    let other = acp.new_session(sb.path());
    let (_, m) = acp.call(
        "session/set_mode",
        json!({"sessionId": other, "modeId": "auto"}),
    );
    assert_eq!(m["result"], json!({}), "{m}");
    let mode = acp.until(|f| f["params"]["update"]["sessionUpdate"] == "current_mode_update");
    assert_eq!(mode["params"]["update"]["currentModeId"], "auto");
    let id = acp.prompt(&other, "/deploy env=prod");
    let (before, _) = acp.until_answer(&json!(id));
    assert!(
        before
            .iter()
            .all(|f| f["method"] != "session/request_permission")
    );
    assert!(texts(&before, "agent_message_chunk").contains("shipping prod"));
    let (_, bad) = acp.call(
        "session/set_mode",
        json!({"sessionId": other, "modeId": "yolo"}),
    );
    assert_eq!(bad["error"]["code"], -32602);
}

#[test]
fn cancel_resolves_a_pending_permission_request() {
    let sb = sandbox();
    let mut acp = Acp::start(&sb, &[]);
    acp.init(json!({}));
    let sid = acp.new_session(sb.path());
    let id = acp.prompt(&sid, "/deploy env=staging");
    let ask = acp.until(|f| f["method"] == "session/request_permission");
    let t = Instant::now();
    acp.send(&json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}));
    let withdrawn = acp.until(|f| f["method"] == "$/cancel_request");
    assert_eq!(withdrawn["params"]["requestId"], ask["id"]);
    let (before, r) = acp.until_answer(&json!(id));
    assert_eq!(r["result"]["stopReason"], "cancelled", "{r}");
    assert!(t.elapsed() < Duration::from_secs(6));
    // Every card of the turn ends completed or failed, the approval's included.
    let mut last: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
    for f in acp.seen.iter().chain(before.iter()) {
        let u = &f["params"]["update"];
        if let (Some(id), Some(st)) = (u["toolCallId"].as_str(), u["status"].as_str()) {
            last.insert(id.to_owned(), st.to_owned());
        }
    }
    assert!(
        last.keys().any(|k| k.ends_with(":ship:approval")),
        "{last:?}"
    );
    assert!(
        last.values().all(|s| s == "completed" || s == "failed"),
        "{last:?}"
    );
}

#[test]
fn missing_inputs_use_options_then_the_next_prompt_then_elicitation() {
    let sb = sandbox();
    let mut acp = Acp::start(&sb, &[]);
    acp.init(json!({}));
    let sid = acp.new_session(sb.path());
    // An enum input: a permission request with its values.
    let id = acp.prompt(&sid, "/deploy");
    let ask = acp.until(|f| f["method"] == "session/request_permission");
    let names: Vec<&str> = ask["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(names[..2], ["staging", "prod"]);
    let prod = ask["params"]["options"][1]["optionId"].clone();
    acp.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": {"outcome": "selected", "optionId": prod}}}));
    let gate = acp.until(|f| f["method"] == "session/request_permission");
    acp.send(&json!({"jsonrpc": "2.0", "id": gate["id"], "result": {"outcome": {"outcome": "selected", "optionId": "approve"}}}));
    let (before, _) = acp.until_answer(&json!(id));
    assert!(texts(&before, "agent_message_chunk").contains("shipping prod"));
    // A free input: the turn ends with the question; the next prompt answers it.
    let id = acp.prompt(&sid, "/ask");
    let (before, r) = acp.until_answer(&json!(id));
    assert_eq!(r["result"]["stopReason"], "end_turn");
    assert!(texts(&before, "agent_message_chunk").contains("needs input `who`"));
    let id = acp.prompt(&sid, "Ada Lovelace");
    let (before, _) = acp.until_answer(&json!(id));
    assert!(
        texts(&before, "agent_message_chunk").contains("hello Ada Lovelace"),
        "{before:?}"
    );
    drop(acp);

    // A client with elicitation forms is asked through one.
    let mut acp = Acp::start(&sb, &[]);
    acp.init(json!({"elicitation": {"form": {}}}));
    let sid = acp.new_session(sb.path());
    let id = acp.prompt(&sid, "/ask");
    let el = acp.until(|f| f["method"] == "elicitation/create");
    assert_eq!(el["params"]["mode"], "form");
    assert_eq!(el["params"]["requestedSchema"]["required"], json!(["who"]));
    acp.send(&json!({"jsonrpc": "2.0", "id": el["id"], "result": {"action": "accept", "content": {"who": "Grace"}}}));
    let (before, _) = acp.until_answer(&json!(id));
    assert!(texts(&before, "agent_message_chunk").contains("hello Grace"));
}

#[test]
fn sessions_list_close_and_load_with_replay() {
    let sb = sandbox();
    let mut acp = Acp::start(&sb, &[]);
    acp.init(json!({}));
    let sid = acp.new_session(sb.path());
    let id = acp.prompt(&sid, "/input-echo message=replayme");
    acp.until_answer(&json!(id));
    // A prompt that starts no run is part of the session too.
    let id = acp.prompt(&sid, "/no-such-flow");
    acp.until_answer(&json!(id));
    let (_, l) = acp.call("session/list", json!({}));
    let sessions = l["result"]["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{l}");
    assert_eq!(sessions[0]["sessionId"], sid.as_str());
    assert_eq!(sessions[0]["cwd"], sb.path().display().to_string());
    let (_, c) = acp.call("session/close", json!({"sessionId": sid}));
    assert_eq!(c["result"], json!({}));
    let (_, r) = acp.call(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "/trivial"}]}),
    );
    assert_eq!(r["error"]["code"], -32002);
    let (before, r) = acp.call(
        "session/load",
        json!({"sessionId": sid, "cwd": sb.path().display().to_string(), "mcpServers": []}),
    );
    assert!(r["result"].is_object(), "{r}");
    let ups = updates(&before);
    assert_eq!(ups[0]["sessionUpdate"], "user_message_chunk");
    assert_eq!(ups[0]["content"]["text"], "/input-echo message=replayme");
    assert!(texts(&before, "agent_message_chunk").contains("replayme"));
    assert!(ups.iter().any(|u| u["status"] == "completed"));
    let second = ups
        .iter()
        .position(|u| {
            u["sessionUpdate"] == "user_message_chunk" && u["content"]["text"] == "/no-such-flow"
        })
        .expect("the second prompt replayed");
    assert!(
        ups[second..].iter().any(|u| u["content"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("failed to start"))),
        "{ups:?}"
    );
    // Loaded: usable again.
    let id = acp.prompt(&sid, "/trivial");
    let (_, r) = acp.until_answer(&json!(id));
    assert_eq!(r["result"]["stopReason"], "end_turn");
}

#[test]
fn secrets_never_reach_a_frame_and_stdout_is_only_frames() {
    let mut sb = sandbox();
    sb.set_env("MY_API_KEY", "s3cr3t-token-value");
    let mut acp = Acp::start(&sb, &[]);
    acp.init(json!({}));
    let cwd = sb.path().display().to_string();
    let (_, r) = acp.call(
        "session/new",
        json!({"cwd": cwd, "mcpServers": [{"name": "x", "command": "/bin/true", "args": [], "env": [{"name": "TOK", "value": "editor-cred-42"}]}]}),
    );
    let sid = r["result"]["sessionId"].as_str().unwrap().to_owned();
    let id = acp.prompt(
        &sid,
        "/input-echo message=\"a s3cr3t-token-value and editor-cred-42\"",
    );
    acp.until_answer(&json!(id));
    let all: String = acp.seen.iter().map(ToString::to_string).collect();
    assert!(all.contains("***"), "{all}");
    assert!(
        !all.contains("s3cr3t-token-value") && !all.contains("editor-cred-42"),
        "{all}"
    );
    let (code, took, stderr) = acp.raw.close();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(took < Duration::from_secs(5));
}

#[test]
fn stdin_eof_and_sigterm_cancel_runs_and_exit_within_1_s() {
    let sb = sandbox();
    for eof in [true, false] {
        let mut acp = Acp::start(&sb, &[]);
        acp.init(json!({}));
        let sid = acp.new_session(sb.path());
        acp.prompt(&sid, "/long-running");
        acp.until(|f| f["params"]["update"]["status"] == "in_progress");
        awf_tests::wait_for("sleep started", || {
            sb.processes().iter().any(|p| p.cmdline == "sleep 30")
        });
        let (code, took, stderr) = if eof {
            acp.raw.close()
        } else {
            acp.raw.terminate()
        };
        assert_eq!(code, Some(0), "{stderr}");
        assert!(took < Duration::from_millis(1500), "{took:?}");
        awf_tests::wait_for("no process left", || sb.processes().is_empty());
    }
}

#[test]
fn a_bad_config_file_exits_1_with_its_code() {
    let sb = sandbox();
    let cfg = sb.write("acp.yaml", "nope: 1\n").unwrap();
    let r = sb
        .run(&["acp-serve", "--config", &cfg.display().to_string()])
        .unwrap();
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("USER.ACP.INVALID_CONFIG"), "{}", r.stderr);
    assert!(r.stdout.is_empty());
    let r = sb
        .run(&["acp-serve", "--config", "/no/such/file.yaml"])
        .unwrap();
    assert_eq!(r.code, 1);
    let cfg = sb.write("acp2.yaml", "workflows_dir: ./nodir\n").unwrap();
    let r = sb
        .run(&["acp-serve", "--config", &cfg.display().to_string()])
        .unwrap();
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("workflows_dir"), "{}", r.stderr);
}

#[test]
fn a_secret_input_typed_in_a_prompt_is_masked_in_the_replay_too() {
    let sb = sandbox();
    let mut acp = Acp::start(&sb, &[]);
    acp.init(json!({}));
    let sid = acp.new_session(sb.path());
    let id = acp.prompt(
        &sid,
        "/input-echo message=tok-9f8e7d6c api_token=tok-9f8e7d6c",
    );
    acp.until_answer(&json!(id));
    acp.call("session/close", json!({"sessionId": sid}));
    let (before, _) = acp.call(
        "session/load",
        json!({"sessionId": sid, "cwd": sb.path().display().to_string(), "mcpServers": []}),
    );
    let replayed = updates(&before);
    assert_eq!(replayed[0]["sessionUpdate"], "user_message_chunk");
    assert!(
        replayed[0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("api_token=***")
    );
    let all: String = acp.seen.iter().map(ToString::to_string).collect();
    assert!(!all.contains("tok-9f8e7d6c"), "{all}");
}

#[test]
fn concurrent_sessions_run_side_by_side() {
    let sb = sandbox();
    let mut acp = Acp::start(&sb, &[]);
    acp.init(json!({}));
    let a = acp.new_session(sb.path());
    let b = acp.new_session(sb.path());
    assert_ne!(a, b);
    let long = acp.prompt(&a, "/long-running");
    acp.until(|f| f["params"]["update"]["status"] == "in_progress");
    // B runs to its end while A's run is still going.
    let quick = acp.prompt(&b, "/input-echo message=from-b");
    let (before, r) = acp.until_answer(&json!(quick));
    assert_eq!(r["result"]["stopReason"], "end_turn");
    let b_text: String = updates(&before)
        .iter()
        .zip(before.iter().filter(|f| f["method"] == "session/update"))
        .filter(|(u, f)| {
            f["params"]["sessionId"] == b.as_str() && u["sessionUpdate"] == "agent_message_chunk"
        })
        .map(|(u, _)| u["content"]["text"].as_str().unwrap().to_owned())
        .collect();
    assert!(b_text.contains("from-b"), "{before:?}");
    assert!(
        before
            .iter()
            .filter(|f| f["method"] == "session/update")
            .all(|f| f["params"]["sessionId"] == a.as_str()
                || f["params"]["sessionId"] == b.as_str())
    );
    acp.send(&json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": a}}));
    let (_, r) = acp.until_answer(&json!(long));
    assert_eq!(r["result"]["stopReason"], "cancelled");
}

const STUBBORN: &str = "name: stubborn\nstates:\n  initial: wait\n  wait:\n    type: step\n    command: \"trap '' TERM; sleep 30; echo never\"\n    on_success: done\n  done:\n    type: terminal\n";

#[test]
fn a_child_that_ignores_sigterm_is_killed_on_cancel_and_at_exit() {
    let sb = sandbox();
    sb.write("wf/stubborn.yaml", STUBBORN).unwrap();
    // Cancel: SIGTERM, the grace, SIGKILL; the prompt still answers within 6 s.
    let mut acp = Acp::start(&sb, &[]);
    acp.init(json!({}));
    let sid = acp.new_session(sb.path());
    let id = acp.prompt(&sid, "/stubborn");
    acp.until(|f| f["params"]["update"]["status"] == "in_progress");
    awf_tests::wait_for("sleep started", || {
        sb.processes().iter().any(|p| p.cmdline == "sleep 30")
    });
    let t = Instant::now();
    acp.send(&json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}));
    let (_, r) = acp.until_answer(&json!(id));
    assert!(t.elapsed() < Duration::from_secs(6), "{:?}", t.elapsed());
    assert_eq!(r["result"]["stopReason"], "cancelled");
    awf_tests::wait_for("sleep killed", || {
        !sb.processes().iter().any(|p| p.cmdline == "sleep 30")
    });
    // EOF with it running: exit within a second, nothing left.
    acp.prompt(&sid, "/stubborn");
    awf_tests::wait_for("sleep started again", || {
        sb.processes().iter().any(|p| p.cmdline == "sleep 30")
    });
    let (code, took, stderr) = acp.raw.close();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(took < Duration::from_millis(1500), "{took:?}");
    awf_tests::wait_for("no process left", || sb.processes().is_empty());
}

#[test]
fn loading_a_session_whose_run_waits_for_an_answer_does_not_wait_for_the_run() {
    let sb = sandbox();
    let mut acp = Acp::start(&sb, &[]);
    acp.init(json!({}));
    let sid = acp.new_session(sb.path());
    let id = acp.prompt(&sid, "/ask");
    acp.until_answer(&json!(id));
    // The run waits for `who`; the load replays what was seen and answers (the replay used
    // to wait 2 s for a next event of the live run).
    let t = Instant::now();
    let (before, r) = acp.call(
        "session/load",
        json!({"sessionId": sid, "cwd": sb.path().display().to_string(), "mcpServers": []}),
    );
    assert!(
        t.elapsed() < Duration::from_millis(1900),
        "{:?}",
        t.elapsed()
    );
    assert!(r["result"].is_object(), "{r}");
    assert_eq!(updates(&before)[0]["content"]["text"], "/ask");
    // And the parked question is still answered by the next prompt.
    let id = acp.prompt(&sid, "Ada");
    let (before, _) = acp.until_answer(&json!(id));
    assert!(texts(&before, "agent_message_chunk").contains("hello Ada"));
}

/// A SIGKILLed `acp-serve` leaves no step process behind: its watchdog kills the process
/// groups of the runs' steps (adversarial trial: `sleep 300` and a `setsid` child survived).
#[test]
fn a_sigkilled_server_leaves_no_step_process() {
    let sb = sandbox();
    sb.write(
        "wf/slow.yaml",
        "name: slow\nstates:\n  initial: nap\n  nap:\n    type: step\n    command: 'echo start; setsid sh -c \"sleep 301\" & sleep 302'\n    on_success: done\n  done:\n    type: terminal\n",
    )
    .unwrap();
    let mut acp = Acp::start(&sb, &[]);
    acp.init(json!({}));
    let sid = acp.new_session(sb.path());
    let _ = acp.prompt(&sid, "/slow");
    awf_tests::wait_for("both sleeps started", || {
        let p = sb.processes();
        p.iter().any(|p| p.cmdline == "sleep 301") && p.iter().any(|p| p.cmdline == "sleep 302")
    });
    acp.raw.child.kill().unwrap();
    let _ = acp.raw.child.wait();
    awf_tests::wait_for("no step process left", || {
        !sb.processes()
            .iter()
            .any(|p| p.cmdline == "sleep 301" || p.cmdline == "sleep 302")
    });
}
