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
