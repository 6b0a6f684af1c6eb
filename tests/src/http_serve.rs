//! Support for the end-to-end tests of `awf serve` (tests/tests/http_*.rs): a sandbox of
//! workflows, a server started on a free loopback port and killed on drop, curl as the HTTP
//! client (status, body, content type, headers), the run helpers every such test needs
//! (start a run, read it, wait for a status), SSE frames read from a finished stream, and
//! SIGTERM with the wait for the exit.

#![allow(clippy::unwrap_used)]

use std::io::BufRead;
use std::io::BufReader;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;

use serde_json::Value;

use crate::Sandbox;
use crate::wait_for;

/// A running `awf serve` of a sandbox; killed (and reaped) on drop.
pub struct Server {
    /// The `awf serve` process.
    pub child: Child,
    /// `http://127.0.0.1:PORT`, as the server's first stdout line names it.
    pub base: String,
}

impl Server {
    /// `127.0.0.1:PORT`: the base without its scheme (for raw TCP clients).
    pub fn addr(&self) -> &str {
        self.base.strip_prefix("http://").unwrap_or(&self.base)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes `files` (`(name, yaml)`) as `wf/<name>.yaml` of `sb` and points
/// `AWF_WORKFLOWS_PATH` at that directory.
pub fn add_workflows(sb: &mut Sandbox, files: &[(&str, &str)]) {
    for (name, text) in files {
        sb.write(&format!("wf/{name}.yaml"), text).unwrap();
    }
    let wf = sb.path().join("wf").display().to_string();
    sb.set_env("AWF_WORKFLOWS_PATH", &wf);
}

/// A fresh sandbox holding `files` as its workflows (see [`add_workflows`]).
pub fn sandbox_with(files: &[(&str, &str)]) -> Sandbox {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, files);
    sb
}

/// Starts `awf serve --addr 127.0.0.1:0 <extra…>` in `sb` and waits for its first stdout
/// line (`AWF API server listening on <base>`), which names the port it bound.
///
/// # Panics
/// When the first line is anything else (the server failed to start).
pub fn start(sb: &Sandbox, extra: &[&str]) -> Server {
    start_with_stderr(sb, extra, Stdio::inherit())
}

/// [`start`] with the server's stderr going to `stderr` (a file, to read its log lines).
///
/// # Panics
/// When the first line is anything else (the server failed to start).
pub fn start_with_stderr(sb: &Sandbox, extra: &[&str], stderr: Stdio) -> Server {
    let mut args = vec!["serve", "--addr", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let mut child = sb
        .cmd(&args)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).unwrap();
    let base = line
        .trim()
        .strip_prefix("AWF API server listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    Server { child, base }
}

/// `curl` a request; returns (status, body, content type).
pub fn curl(args: &[&str]) -> (u16, String, String) {
    let (code, body, ctype, _) = curl_headers(args);
    (code, body, ctype)
}

/// `curl` a request (60 s at most); returns (status, body, content type, response headers
/// lower-cased).
pub fn curl_headers(args: &[&str]) -> (u16, String, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let hdr = dir.path().join("h");
    let out = Command::new("curl")
        .args([
            "-s",
            "--max-time",
            "60",
            "-D",
            hdr.to_str().unwrap(),
            "-w",
            "\n%{http_code} %{content_type}",
        ])
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, tail) = text.rsplit_once('\n').unwrap();
    let (code, ctype) = tail.split_once(' ').unwrap_or((tail, ""));
    let headers = std::fs::read_to_string(&hdr)
        .unwrap_or_default()
        .to_ascii_lowercase();
    (
        code.parse().unwrap(),
        body.to_owned(),
        ctype.to_owned(),
        headers,
    )
}

/// `body` parsed as JSON.
///
/// # Panics
/// When it is not JSON (the message shows the body).
pub fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// `POST url` with a JSON `body`; returns (status, body, content type).
pub fn post(url: &str, body: &str) -> (u16, String, String) {
    curl(&[
        "-X",
        "POST",
        "-H",
        "content-type: application/json",
        "-d",
        body,
        url,
    ])
}

/// Starts workflow `name` with the JSON `body`; asserts 202 `accepted` and returns the
/// execution id.
pub fn start_run(s: &Server, name: &str, body: &str) -> String {
    let (code, body, _) = post(&format!("{}/api/workflows/env/{name}/run", s.base), body);
    assert_eq!(code, 202, "{body}");
    let v = json_of(&body);
    assert_eq!(v["body"]["status"], "accepted");
    v["body"]["execution_id"].as_str().unwrap().to_owned()
}

/// `GET /api/executions/{id}`'s `body` (asserts 200).
pub fn execution(s: &Server, id: &str) -> Value {
    let (code, body, _) = curl(&[&format!("{}/api/executions/{id}", s.base)]);
    assert_eq!(code, 200, "{body}");
    json_of(&body)["body"].clone()
}

/// Polls the execution until its `status` is `want`; returns it then.
pub fn wait_status(s: &Server, id: &str, want: &str) -> Value {
    let mut last = Value::Null;
    wait_for(&format!("run {id} to be {want}"), || {
        last = execution(s, id);
        last["status"] == want
    });
    last
}

/// One SSE frame: (id, event name, data).
pub type Frame = (u64, String, Value);

/// The frames of an SSE text: blocks with an `id: `, an `event: ` and a JSON `data: ` line
/// (anything else, such as comments, is skipped).
pub fn parse_frames(text: &str) -> Vec<Frame> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let (mut id, mut ev, mut data) = (None, None, None);
        for l in block.lines() {
            if let Some(v) = l.strip_prefix("id: ") {
                id = Some(v.parse::<u64>().unwrap());
            } else if let Some(v) = l.strip_prefix("event: ") {
                ev = Some(v.to_owned());
            } else if let Some(v) = l.strip_prefix("data: ") {
                data = Some(json_of(v));
            }
        }
        if let (Some(i), Some(e), Some(d)) = (id, ev, data) {
            out.push((i, e, d));
        }
    }
    out
}

/// Follows a run's event stream to its end (curl returns when the server closes it), with
/// `extra` curl arguments; asserts 200 `text/event-stream`.
pub fn follow(s: &Server, id: &str, extra: &[&str]) -> Vec<Frame> {
    let url = format!("{}/api/executions/{id}/events", s.base);
    let mut args: Vec<&str> = vec!["-N"];
    args.extend_from_slice(extra);
    args.push(&url);
    let (code, body, ctype) = curl(&args);
    assert_eq!(code, 200, "{body}");
    assert!(ctype.starts_with("text/event-stream"), "{ctype}");
    parse_frames(&body)
}

/// Sends SIGTERM to the server (`kill -TERM`).
pub fn sigterm(s: &Server) {
    let pid = s.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
}

/// Waits for the server to exit; returns its exit code (`None`: killed by a signal).
pub fn wait_exit(s: &mut Server) -> Option<i32> {
    let mut code = None;
    wait_for("awf serve to exit", || {
        code = s.child.try_wait().unwrap();
        code.is_some()
    });
    code.unwrap().code()
}
