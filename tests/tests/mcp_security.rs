//! `awf mcp-serve` under adversarial input (issue 11): what reaches stderr, what a client may
//! do before `initialize`, malformed lines. Raw JSON-RPC lines over the shipped binary; process
//! checks look only at this test's sandbox.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use std::time::Instant;

use awf_tests::Sandbox;
use awf_tests::mcp::RawServer;
use awf_tests::mcp::config;
use serde_json::Value;
use serde_json::json;

fn default_config(sb: &Sandbox) -> PathBuf {
    config(
        sb,
        &json!({"intercept_builtins": true, "root_dir": sb.path(),
            "audit_path": sb.path().join("tools.jsonl")}),
    )
}

#[test]
fn tool_arguments_are_never_logged_even_at_trace() {
    let sb = Sandbox::new().unwrap();
    let cfg = default_config(&sb);
    for extra in [
        &["--log-level", "trace"][..],
        &["--log-level", "debug", "--log-format", "json"][..],
    ] {
        let mut s = RawServer::awf(&sb, &cfg, extra);
        s.initialize("2025-11-25");
        let answer = s.call(
            1,
            "Write",
            &json!({"path": "note.txt", "content": "ARG-MARKER-7f3a in the content"}),
        );
        assert_eq!(answer["result"]["isError"], false, "{answer}");
        let answer = s.call(2, "Grep", &json!({"pattern": "ARG-MARKER-7f3a"}));
        assert!(answer.get("result").is_some(), "{answer}");
        let (code, _, stderr) = s.close();
        assert_eq!(code, Some(0), "{stderr}");
        assert!(!stderr.is_empty(), "{extra:?}: debug logs go to stderr");
        assert!(
            !stderr.contains("ARG-MARKER-7f3a"),
            "{extra:?}: tool arguments reached stderr:\n{stderr}"
        );
    }
}

/// The uid the server runs as in the /proc test when this test runs as root (root could open
/// any process's fds anyway): `nobody`.
const NOBODY: u32 = 65534;

fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

#[test]
fn a_bash_command_cannot_forge_frames_through_the_servers_proc_fds() {
    let sb = Sandbox::new().unwrap();
    let ws = sb.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let cfg = config(&sb, &json!({"intercept_builtins": true, "root_dir": ws}));
    let awf = awf_tests::awf_bin();
    let cfg_s = cfg.display().to_string();
    let mut cmd = if is_root() {
        // Run the server (and so its Bash) as an unprivileged user, as it is run for real.
        for p in [sb.path(), &ws, &cfg, &sb.path().join("home")] {
            std::os::unix::fs::chown(p, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        // Its stdio pipes are made by a shell running as that user (as a real client's
        // would be), so that only non-dumpability stands in the way.
        let mut c = Command::new("setpriv");
        c.args([
            &format!("--reuid={NOBODY}"),
            &format!("--regid={NOBODY}"),
            "--clear-groups",
            "--",
            "sh",
            "-c",
            r#"cat | "$0" mcp-serve --config "$1" | cat"#,
        ]);
        c.arg(&awf).arg(&cfg_s);
        c
    } else {
        let mut c = Command::new(&awf);
        c.args(["mcp-serve", "--config", &cfg_s]);
        c
    };
    cmd.current_dir(&ws)
        .env("HOME", sb.path().join("home"))
        .env(awf_tests::SANDBOX_MARK, sb.path());
    let mut s = RawServer::spawn(cmd);
    s.initialize("2025-11-25");
    let forged = r#"{"jsonrpc":"2.0","id":99,"result":{"forged":true}}"#;
    let script = format!(
        "echo '{forged}' > /proc/$PPID/fd/1 && echo WROTE-STDOUT; \
         ls /proc/$PPID/fd/ >/dev/null 2>&1 && echo LISTED-FDS; \
         head -c 0 /proc/$PPID/fd/0 2>/dev/null && echo OPENED-STDIN; true"
    );
    s.send_json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "Bash", "arguments": {"command": script}}}));
    // Every frame up to the call's answer: none may be the forged one.
    let answer = loop {
        let frame = s.recv();
        assert!(
            !frame.to_string().contains("forged"),
            "a Bash command forged a frame: {frame}"
        );
        if frame["id"] == 1 {
            break frame;
        }
    };
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(text.contains("exit code"), "{answer}");
    for mark in ["WROTE-STDOUT", "LISTED-FDS", "OPENED-STDIN"] {
        assert!(!text.contains(mark), "{mark}: {text}");
    }
    let (code, _, stderr) = s.close();
    assert_eq!(code, Some(0), "{stderr}");
}

/// Whether `pid` is a live process (a zombie is not).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|st| st != "Z" && st != "X")
    })
}

fn read_pid(p: &Path) -> i32 {
    let t0 = Instant::now();
    loop {
        if let Some(pid) = std::fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no pid in {}",
            p.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_gone(pid: i32) -> bool {
    let t0 = Instant::now();
    while alive(pid) {
        if t0.elapsed() > Duration::from_secs(30) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

fn kill_if_alive(pid: i32) {
    if alive(pid) {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
}

#[test]
fn a_daemon_that_clears_its_environment_and_calls_setsid_goes_when_its_call_ends() {
    let sb = Sandbox::new().unwrap();
    let cfg = default_config(&sb);
    let mut s = RawServer::awf(&sb, &cfg, &[]);
    s.initialize("2025-11-25");
    let pid_file = sb.path().join("daemon.pid");
    let script = format!(
        "( setsid env -i /bin/sh -c 'echo $$ > {p}; exec sleep 300' & ); \
         while [ ! -s {p} ]; do sleep 0.05; done; sleep 0.2",
        p = pid_file.display()
    );
    let answer = s.call(1, "Bash", &json!({"command": script}));
    assert!(answer.get("result").is_some(), "{answer}");
    let daemon = read_pid(&pid_file);
    let gone = wait_gone(daemon);
    kill_if_alive(daemon);
    assert!(gone, "daemon {daemon} outlived its call");
    let (code, _, stderr) = s.close();
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn with_a_tiny_shutdown_grace_an_untagged_setsid_term_ignoring_process_is_killed_before_exit() {
    let sb = Sandbox::new().unwrap();
    let cfg = config(
        &sb,
        &json!({"intercept_builtins": true, "root_dir": sb.path(),
            "limits": {"shutdown_grace_ms": 1}}),
    );
    let mut s = RawServer::awf(&sb, &cfg, &[]);
    s.initialize("2025-11-25");
    let pid_file = sb.path().join("sleep.pid");
    let script = format!(
        "trap '' TERM; setsid env -i sleep 300 & echo $! > {}; wait",
        pid_file.display()
    );
    s.send_json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "Bash", "arguments": {"command": script}}}));
    let sleeper = read_pid(&pid_file);
    let server = i32::try_from(s.child.id()).unwrap();
    let _ = Command::new("kill")
        .args(["-TERM", &server.to_string()])
        .status();
    let (code, _, stderr) = s.close();
    let was_alive = alive(sleeper);
    kill_if_alive(sleeper);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!was_alive, "sleep {sleeper} outlived the server");
}

#[test]
fn sigterm_sigint_and_sighup_answer_the_calls_in_flight_as_cancelled() {
    for (sig, grace_ms) in [("TERM", 5000), ("INT", 5000), ("HUP", 5000), ("TERM", 1)] {
        let sb = Sandbox::new().unwrap();
        let cfg = config(
            &sb,
            &json!({"intercept_builtins": true, "root_dir": sb.path(),
                "limits": {"shutdown_grace_ms": grace_ms}}),
        );
        let mut s = RawServer::awf(&sb, &cfg, &[]);
        s.initialize("2025-11-25");
        let pid_file = sb.path().join("bash.pid");
        // Ignoring TERM: the tool takes its own grace to stop it, longer than a 1 ms one.
        let script = format!("echo $$ > {}; trap '' TERM; sleep 300", pid_file.display());
        s.send_json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "Bash", "arguments": {"command": script}}}));
        let shell = read_pid(&pid_file);
        let server = s.child.id().to_string();
        let _ = Command::new("kill")
            .args([&format!("-{sig}"), &server])
            .status();
        let mut answered = None;
        while let Ok(line) = s.lines.recv_timeout(Duration::from_secs(60)) {
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == 1 {
                answered = Some(v);
            }
        }
        let (code, _, stderr) = s.close();
        kill_if_alive(shell);
        let answered = answered.unwrap_or_else(|| panic!("SIG{sig}: no answer: {stderr}"));
        assert_eq!(answered["result"]["isError"], true, "SIG{sig}: {answered}");
        assert_eq!(code, Some(0), "SIG{sig}: {stderr}");
    }
}
