//! Test support for the MCP end-to-end tests (tests/tests/mcp_*.rs): where the pinned MCP
//! peers are installed, config files, and a raw JSON-RPC driver of an MCP server over stdio.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::BufRead;
use std::io::BufReader;
use std::io::Write;
use std::path::Path;
use std::path::PathBuf;
use std::process::Child;
use std::process::ChildStdin;
use std::process::Command;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;
use std::time::Instant;

use serde_json::Value;
use serde_json::json;

use crate::Sandbox;

/// The Python `mcp` SDK pinned by scripts/install-peers.sh (keep in sync).
pub const PY_MCP: &str = "2.3.0";
/// The MCP Inspector pinned by scripts/install-peers.sh (keep in sync).
pub const INSPECTOR: &str = "2.12.0";

/// The workspace's `.cache`, where the peers are installed.
pub fn cache() -> PathBuf {
    crate::workspace_root().join(".cache")
}

/// The directory the pinned Python SDK is installed in (fails when it is not).
pub fn py_sdk() -> PathBuf {
    let py = cache().join("py");
    let check = Command::new("python3")
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('mcp'))",
        ])
        .env("PYTHONPATH", &py)
        .output()
        .expect("python3 runs");
    let have = String::from_utf8_lossy(&check.stdout).trim().to_owned();
    assert_eq!(
        have,
        PY_MCP,
        "Python `mcp` {PY_MCP} is not installed in {}: run scripts/install-peers.sh \
         (scripts/test.sh does)",
        py.display()
    );
    py
}

/// Writes `cfg` as the sandbox's `mcp.json` and gives its path.
pub fn config(sb: &Sandbox, cfg: &Value) -> PathBuf {
    sb.write("mcp.json", &cfg.to_string()).unwrap()
}

/// A server process driven with raw JSON-RPC lines; stdout lines arrive on a channel.
pub struct RawServer {
    /// The server process.
    pub child: Child,
    /// Its stdin, until closed.
    pub stdin: Option<ChildStdin>,
    /// Its stdout lines, as they arrive.
    pub lines: mpsc::Receiver<String>,
    /// Its whole stderr, once it exits.
    pub stderr: std::thread::JoinHandle<String>,
}

impl RawServer {
    /// Starts `cmd` with piped stdio.
    pub fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("server starts");
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let mut line = String::new();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if tx.send(line).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut s);
            s
        });
        Self {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
        }
    }

    /// The shipped `awf mcp-serve --config <cfg>` in the sandbox (`extra`: global flags first).
    pub fn awf(sb: &Sandbox, cfg: &Path, extra: &[&str]) -> Self {
        let mut args = extra.to_vec();
        let cfg = cfg.display().to_string();
        args.extend(["mcp-serve", "--config", &cfg]);
        Self::spawn(sb.cmd(&args))
    }

    /// Writes raw bytes to its stdin.
    pub fn send(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    /// Writes one JSON-RPC line.
    pub fn send_json(&mut self, v: &Value) {
        let mut line = v.to_string().into_bytes();
        line.push(b'\n');
        self.send(&line);
    }

    /// The next stdout line, parsed (generous timeout: a shared machine).
    pub fn recv(&mut self) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(60))
            .expect("an answer within 60 s");
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"))
    }

    /// `initialize` with `version`, then `notifications/initialized`; gives the answer.
    pub fn initialize(&mut self, version: &str) -> Value {
        self.send_json(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "awf-e2e", "version": "1"}}}),
        );
        let answer = self.recv();
        self.send_json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        answer
    }

    /// `tools/call` of `name` with `args` as request `id`; gives the answer.
    pub fn call(&mut self, id: u64, name: &str, args: &Value) -> Value {
        self.send_json(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": args}}));
        self.recv()
    }

    /// Closes stdin and waits for the exit; returns (exit code, time it took, stderr).
    pub fn close(mut self) -> (Option<i32>, Duration, String) {
        let start = Instant::now();
        drop(self.stdin.take());
        let status = wait_exit(&mut self.child);
        (status, start.elapsed(), self.stderr.join().unwrap())
    }

    /// Sends SIGTERM and waits for the exit; returns (exit code, time it took, stderr).
    pub fn terminate(mut self) -> (Option<i32>, Duration, String) {
        let start = Instant::now();
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
        let status = wait_exit(&mut self.child);
        drop(self.stdin.take());
        (status, start.elapsed(), self.stderr.join().unwrap())
    }
}

/// Waits (30 s at most, then kills it and panics) for `child` to exit; gives its exit code.
pub fn wait_exit(child: &mut Child) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the server did not exit within 30 s");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
