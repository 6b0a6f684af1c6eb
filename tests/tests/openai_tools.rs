//! End-to-end tests of issue 11's leftovers over the shipped binary: `awf mcp-serve` killed
//! with SIGKILL in the middle of a Bash call leaves none of the command's processes behind.
//! Process checks look only at this test's processes (the sandbox's environment marker).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;
use std::time::Instant;

use awf_tests::Sandbox;
use awf_tests::mcp::RawServer;
use awf_tests::mcp::config;
use awf_tests::mcp::wait_exit;
use serde_json::json;

/// The sandbox's processes whose command line starts with `sleep`.
fn sleeps(sb: &Sandbox) -> Vec<String> {
    sb.processes()
        .into_iter()
        .filter(|p| p.cmdline.starts_with("sleep "))
        .map(|p| format!("{} {}", p.pid, p.cmdline))
        .collect()
}

#[test]
fn sigkilled_mcp_serve_leaves_no_process_of_a_running_bash_call() {
    let sb = Sandbox::new().unwrap();
    let cfg = config(
        &sb,
        &json!({"intercept_builtins": true, "root_dir": sb.path()}),
    );
    let mut s = RawServer::awf(&sb, &cfg, &[]);
    s.initialize("2025-11-25");
    // One sleep in the command's group, one backgrounded by a subshell (its parent gone),
    // one in a session of its own: all carry the call's tag and the sandbox's marker.
    s.send_json(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "Bash", "arguments": {
            "command": "(sleep 301 &); setsid sleep 302 & echo up > started; sleep 300"}}}));
    let t0 = Instant::now();
    while !(sb.path().join("started").exists() && sleeps(&sb).len() >= 3) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the command did not start: {:?}",
            sb.processes()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let ok = Command::new("kill")
        .args(["-KILL", &s.child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    assert_eq!(wait_exit(&mut s.child), None, "killed by a signal");
    // Generous: the watchdog notices the end of its pipe and kills what is tagged.
    let t1 = Instant::now();
    let mut left = sleeps(&sb);
    while !left.is_empty() && t1.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
        left = sleeps(&sb);
    }
    // Nothing of this sandbox may outlive the test, whatever the outcome.
    sb.kill_processes(None);
    assert!(left.is_empty(), "survived the server: {left:?}");
}

/// A host that gives the server socket pairs for stdin and stdout instead of pipes (Node's
/// `child_process` does): tokio's stdin and stdout then hold blocking threads, and the file
/// tools must still run (the proxy's current-thread runtime keeps room for both).
#[test]
fn mcp_serve_answers_file_tools_over_socket_pairs() {
    use std::io::BufRead;
    use std::io::BufReader;
    use std::io::Write;
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    use std::process::Stdio;

    let sb = Sandbox::new().unwrap();
    sb.write("notes.txt", "alpha\nbeta\n").unwrap();
    let cfg = config(
        &sb,
        &json!({"intercept_builtins": true, "root_dir": sb.path()}),
    );
    let (mut to_server, server_in) = UnixStream::pair().unwrap();
    let (from_server, server_out) = UnixStream::pair().unwrap();
    let cfg_s = cfg.display().to_string();
    let mut child = sb
        .cmd(&["mcp-serve", "--config", &cfg_s])
        .stdin(Stdio::from(OwnedFd::from(server_in)))
        .stdout(Stdio::from(OwnedFd::from(server_out)))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    from_server
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut lines = BufReader::new(from_server.try_clone().unwrap());
    let mut send = |v: serde_json::Value| {
        let mut l = v.to_string().into_bytes();
        l.push(b'\n');
        to_server.write_all(&l).unwrap();
    };
    let mut recv = || {
        let mut l = String::new();
        lines.read_line(&mut l).expect("an answer within 60 s");
        serde_json::from_str::<serde_json::Value>(&l).unwrap()
    };
    send(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "awf-e2e", "version": "1"}}}),
    );
    assert_eq!(recv()["id"], 0);
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    // Several file tool calls in flight at once, and one after them.
    for id in 1..=6 {
        let (name, args) = if id % 2 == 0 {
            ("Glob", json!({"pattern": "*.txt"}))
        } else {
            ("Read", json!({"path": "notes.txt"}))
        };
        send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": args}}));
    }
    let mut answered: Vec<i64> = (0..6)
        .map(|_| {
            let a = recv();
            assert_eq!(a["result"]["isError"], false, "{a}");
            a["id"].as_i64().unwrap()
        })
        .collect();
    answered.sort_unstable();
    assert_eq!(answered, [1, 2, 3, 4, 5, 6]);
    send(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "Read", "arguments": {"path": "notes.txt"}}}));
    let a = recv();
    assert!(
        a["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("1\talpha"),
        "{a}"
    );
    drop(to_server);
    assert_eq!(wait_exit(&mut child), Some(0));
}
