//! A new user's trial and a breaker (stop 42), over the real binary: one Ctrl-C delivered
//! twice (as `timeout` does) is one signal; `awf mcp-serve` answers every request it cannot
//! serve under the request's id, with the JSON-RPC code that says why.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::BufRead;
use std::io::BufReader;
use std::process::Stdio;

use awf_tests::Sandbox;
use awf_tests::mcp::RawServer;
use awf_tests::mcp::config;
use pretty_assertions::assert_eq;
use serde_json::json;

/// Trial: under `timeout 60 awf run …` one Ctrl-C reached awf twice within microseconds
/// (`timeout` forwards it to awf, then to its process group), and awf took the second as
/// the user's second Ctrl-C: "second signal, stopping now", and the cancel hook was killed
/// before it ran. The same signal again within 100 ms is one signal: the run is cancelled
/// once and its cancel hook runs to its end.
#[test]
fn one_signal_delivered_twice_at_once_cancels_once_and_runs_the_cancel_hook() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "wf.yaml",
        "name: wf\nhooks:\n  workflow_cancel:\n    - command: sleep 0.3; echo hook-ran > hook.txt\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo started; sleep 30\n    on_success: d\n  d:\n    type: terminal\n",
    )
    .unwrap();
    let mut child = sb
        .cmd(&["run", "wf.yaml", "-o", "streaming"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "[OUT] started");
    // Both signals from one shell: microseconds apart, as `timeout` sends them.
    let pid = child.id().to_string();
    let sent = std::process::Command::new("sh")
        .args(["-c", "kill -INT \"$1\"; kill -INT \"$1\"", "sh", &pid])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert_eq!(
        stderr.matches("received SIGINT, cancelling").count(),
        1,
        "{stderr}"
    );
    assert!(!stderr.contains("second signal"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(sb.path().join("hook.txt")).unwrap_or_default(),
        "hook-ran\n",
        "the cancel hook did not run to its end: {stderr}"
    );
}

/// Breaker: requests rmcp could not read were answered `{"code":-32600,"message":"Invalid
/// request"}` with no `id` at all (a client waiting on its id hangs): a `_meta` that is not
/// an object in `tools/call` or `ping`; a second `initialize` got that frame and a result;
/// `initialize` with a bad `protocolVersion` after initialization was `-32601` with the
/// message `initialize`; an unknown method's message was the bare method name. Each is now
/// answered under its id: `-32602` naming the parameter, `-32600` "already initialized",
/// `-32601` "Method not found: …"; the connection lives on.
#[test]
fn mcp_requests_that_cannot_be_served_are_answered_under_their_id() {
    let sb = Sandbox::new().unwrap();
    let cfg = config(&sb, &json!({"root_dir": sb.path()}));
    let mut s = RawServer::awf(&sb, &cfg, &[]);
    s.initialize("2025-11-25");
    let ask = |s: &mut RawServer, frame: serde_json::Value| {
        s.send_json(&frame);
        s.recv()
    };
    let a = ask(
        &mut s,
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": "Read", "arguments": {"path": "in.txt"}, "_meta": "x"}}),
    );
    assert_eq!(a["id"], json!(5), "{a}");
    assert_eq!(a["error"]["code"], json!(-32602), "{a}");
    assert!(
        a["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Invalid params for `tools/call`: "),
        "{a}"
    );
    let a = ask(
        &mut s,
        json!({"jsonrpc": "2.0", "id": 8, "method": "ping", "params": {"_meta": 5}}),
    );
    assert_eq!(a["id"], json!(8), "{a}");
    assert_eq!(a["error"]["code"], json!(-32602), "{a}");
    let a = ask(
        &mut s,
        json!({"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {
            "protocolVersion": 42, "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}}),
    );
    assert_eq!(
        a,
        json!({"jsonrpc": "2.0", "id": 9, "error": {"code": -32600,
            "message": "Invalid request: the server is already initialized (send `initialize` once per connection)"}})
    );
    let a = ask(
        &mut s,
        json!({"jsonrpc": "2.0", "id": "n", "method": "no/such", "params": {}}),
    );
    assert_eq!(
        a,
        json!({"jsonrpc": "2.0", "id": "n", "error": {"code": -32601,
            "message": "Method not found: no/such"}})
    );
    // Nothing else was sent (no frame without an id), and the server still serves.
    let a = ask(
        &mut s,
        json!({"jsonrpc": "2.0", "id": 10, "method": "ping"}),
    );
    assert_eq!(a, json!({"jsonrpc": "2.0", "id": 10, "result": {}}));
    let (code, _, stderr) = s.close();
    assert_eq!(code, Some(0), "{stderr}");
}

/// Trial: on a terminal that reports no size (a pseudo-terminal left at 0x0) the live
/// spinners assumed 80 columns and padded every line to that width instead of ending it
/// (the capture held one newline); on a wider terminal the lines ran together. Such a
/// terminal gets the plain lines, each ended by a newline.
#[test]
fn a_terminal_without_a_size_gets_plain_lines() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "fan.yaml",
        "name: fan\nstates:\n  initial: p\n  p:\n    type: parallel\n    parallel: [docs, checks]\n    strategy: all_succeed\n    on_success: done\n  docs:\n    type: step\n    command: sleep 0.3\n  checks:\n    type: step\n    command: sleep 0.3\n  done:\n    type: terminal\n    message: all passed\n",
    )
    .unwrap();
    let mut cmd = sb.tty_cmd_unsized(&["run", "fan.yaml"]);
    cmd.env_remove("NO_COLOR").env("TERM", "xterm");
    let mut p = rexpect::session::spawn_command(cmd, Some(20_000)).unwrap();
    let text = p.exp_eof().unwrap();
    assert!(!text.contains("\u{1b}[2K"), "spinners drawn: {text:?}");
    assert!(
        ["docs", "checks", "p"]
            .iter()
            .all(|step| text.contains(&format!("{step} \u{1b}[2m("))),
        "{text:?}"
    );
    assert!(text.contains("all passed"), "{text:?}");
    // One line per finished step, the start and the end: no line padded to a width.
    assert!(text.matches('\n').count() >= 5, "{text:?}");
    assert!(!text.contains("     \r"), "{text:?}");
}
