//! `awf serve` (first slice) over the built binary, with curl as the HTTP client: the
//! workflows list, starting a run, its status, its SSE stream (two subscribers, one
//! reconnecting with `Last-Event-ID`), problem documents, cancel, SIGTERM, history.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::BufRead;
use std::io::BufReader;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;

use awf_tests::Sandbox;
use awf_tests::wait_for;
use serde_json::Value;

const HELLO: &str = "name: hello
description: says hello
inputs:
  - name: who
    type: string
    default: world
states:
  initial: greet
  greet:
    type: step
    command: echo hello {{.inputs.who}}
    on_success: done
  done:
    type: terminal
";

/// Three steps with pauses between them: subscribers can connect and reconnect mid-run.
const SLOW: &str = "name: slow
states:
  initial: a
  a:
    type: step
    command: echo one; sleep 0.4
    on_success: b
  b:
    type: step
    command: echo two; sleep 0.4
    on_success: c
  c:
    type: step
    command: echo three; sleep 0.4
    on_success: done
  done:
    type: terminal
";

const SLEEPER: &str = "name: sleeper
states:
  initial: nap
  nap:
    type: step
    command: sleep 300
    on_success: done
  done:
    type: terminal
";

/// A running `awf serve` of a sandbox; killed on drop.
struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sandbox() -> Sandbox {
    let mut sb = Sandbox::new().unwrap();
    sb.write("wf/hello.yaml", HELLO).unwrap();
    sb.write("wf/slow.yaml", SLOW).unwrap();
    sb.write("wf/sleeper.yaml", SLEEPER).unwrap();
    let wf = sb.path().join("wf").display().to_string();
    sb.set_env("AWF_WORKFLOWS_PATH", &wf);
    sb
}

fn start(sb: &Sandbox) -> Server {
    start_with(sb, &[])
}

fn start_with(sb: &Sandbox, extra: &[&str]) -> Server {
    let mut args = vec!["serve", "--addr", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let mut child = sb
        .cmd(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
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
fn curl(args: &[&str]) -> (u16, String, String) {
    let out = Command::new("curl")
        .args([
            "-s",
            "--max-time",
            "60",
            "-w",
            "\n%{http_code} %{content_type}",
        ])
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, tail) = text.rsplit_once('\n').unwrap();
    let (code, ctype) = tail.split_once(' ').unwrap_or((tail, ""));
    (code.parse().unwrap(), body.to_owned(), ctype.to_owned())
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

fn start_run(s: &Server, name: &str, body: &str) -> String {
    let (code, body, _) = curl(&[
        "-X",
        "POST",
        "-H",
        "content-type: application/json",
        "-d",
        body,
        &format!("{}/api/workflows/local/{name}/run", s.base),
    ]);
    assert_eq!(code, 202, "{body}");
    let v = json(&body);
    assert_eq!(v["body"]["status"], "accepted");
    v["body"]["execution_id"].as_str().unwrap().to_owned()
}

fn status(s: &Server, id: &str) -> Value {
    let (code, body, _) = curl(&[&format!("{}/api/executions/{id}", s.base)]);
    assert_eq!(code, 200, "{body}");
    json(&body)["body"].clone()
}

/// One SSE frame: (id, event name, data).
type Frame = (u64, String, Value);

fn parse_frames(text: &str) -> Vec<Frame> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let (mut id, mut ev, mut data) = (None, None, None);
        for l in block.lines() {
            if let Some(v) = l.strip_prefix("id: ") {
                id = Some(v.parse::<u64>().unwrap());
            } else if let Some(v) = l.strip_prefix("event: ") {
                ev = Some(v.to_owned());
            } else if let Some(v) = l.strip_prefix("data: ") {
                data = Some(json(v));
            }
        }
        if let (Some(i), Some(e), Some(d)) = (id, ev, data) {
            out.push((i, e, d));
        }
    }
    out
}

/// Follows a stream to its end (curl returns when the server closes it).
fn follow(s: &Server, id: &str, extra: &[&str]) -> Vec<Frame> {
    let url = format!("{}/api/executions/{id}/events", s.base);
    let mut args: Vec<&str> = vec!["-N"];
    args.extend_from_slice(extra);
    args.push(&url);
    let (code, body, ctype) = curl(&args);
    assert_eq!(code, 200, "{body}");
    assert!(ctype.starts_with("text/event-stream"), "{ctype}");
    parse_frames(&body)
}

fn names(frames: &[Frame]) -> Vec<String> {
    frames.iter().map(|f| f.1.clone()).collect()
}

#[test]
fn serve_lists_starts_reports_and_streams_a_run() {
    let sb = sandbox();
    let s = start(&sb);
    let (code, body, ctype) = curl(&[&format!("{}/api/workflows", s.base)]);
    assert_eq!(code, 200);
    assert!(ctype.starts_with("application/json"), "{ctype}");
    let v = json(&body);
    let list = v["body"]["workflows"].as_array().unwrap();
    let hello = list.iter().find(|w| w["name"] == "hello").unwrap();
    assert_eq!(hello["description"], "says hello");
    assert!(list.iter().any(|w| w["name"] == "sleeper"));

    let id = start_run(&s, "hello", r#"{"inputs":{"who":"http"}}"#);
    wait_for("the run to complete", || {
        status(&s, &id)["status"] == "completed"
    });
    let st = status(&s, &id);
    assert_eq!(st["execution_id"], id.as_str());
    assert_eq!(st["workflow_name"], "hello");
    assert_eq!(st["exit_code"], 0);
    assert_eq!(st["states"]["greet"]["status"], "completed", "{st}");

    // The whole log, replayed after the run ended; then from a position (both ways).
    let all = follow(&s, &id, &[]);
    let ids: Vec<u64> = all.iter().map(|f| f.0).collect();
    assert_eq!(ids, (1..=all.len() as u64).collect::<Vec<_>>());
    assert_eq!(all.first().unwrap().1, "run_started");
    assert_eq!(all.last().unwrap().1, "run_finished");
    let out: String = all
        .iter()
        .filter(|f| f.1 == "output_chunk")
        .map(|f| f.2["event"]["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(out, "hello http\n");
    let tail = follow(&s, &id, &["-H", "Last-Event-ID: 2"]);
    assert_eq!(tail, all[2..].to_vec());
    let tail = follow(&s, &id, &["--get", "--data", "after=3"]);
    assert_eq!(tail, all[3..].to_vec());

    let (code, body, _) = curl(&[&format!("{}/api/executions", s.base)]);
    assert_eq!(code, 200, "{body}");
    let runs = json(&body)["body"]["executions"].clone();
    let mine: Vec<&Value> = runs
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["execution_id"] == id.as_str())
        .collect();
    assert_eq!(mine.len(), 1, "{runs}");
    assert_eq!(mine[0]["status"], "completed");

    // Recorded like any run started from the terminal.
    let h = sb.run(&["history", "--format", "json"]).unwrap();
    assert!(h.stdout.contains(&id), "{}\n{}", h.stdout, h.stderr);
}

#[test]
fn two_subscribers_one_reconnecting_mid_run_get_the_same_events() {
    let sb = sandbox();
    let s = start(&sb);
    let id = start_run(&s, "slow", "{}");
    let url = format!("{}/api/executions/{id}/events", s.base);
    // Subscriber A follows the whole run in the background.
    let a = Command::new("curl")
        .args(["-s", "-N", "--max-time", "60", &url])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Subscriber B reads until it has two events, drops the connection, reconnects.
    let mut b = Command::new("curl")
        .args(["-s", "-N", "--max-time", "60", &url])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    {
        let mut r = BufReader::new(b.stdout.take().unwrap());
        let mut line = String::new();
        while parse_frames(&first).len() < 2 {
            line.clear();
            assert!(r.read_line(&mut line).unwrap() > 0, "stream ended early");
            first.push_str(&line);
        }
    }
    let _ = b.kill();
    let _ = b.wait();
    let got = parse_frames(&first);
    let last = got.last().unwrap().0.to_string();
    assert_ne!(
        status(&s, &id)["status"],
        "completed",
        "the reconnect must happen mid-run"
    );
    let rest = follow(&s, &id, &["-H", &format!("Last-Event-ID: {last}")]);
    let a = a.wait_with_output().unwrap();
    let a = parse_frames(&String::from_utf8_lossy(&a.stdout));
    let mut b_all = got;
    b_all.extend(rest);
    assert_eq!(a.last().unwrap().1, "run_finished", "{:?}", names(&a));
    assert_eq!(b_all, a, "no gap and no duplicate after the reconnect");
    let ids: Vec<u64> = a.iter().map(|f| f.0).collect();
    assert_eq!(ids, (1..=a.len() as u64).collect::<Vec<_>>());
    assert_eq!(
        names(&a)
            .iter()
            .filter(|n| n.as_str() == "step_started")
            .count(),
        3
    );
}

#[test]
fn unknown_things_are_404_problem_documents() {
    let sb = sandbox();
    let s = start(&sb);
    for (args, want) in [
        (
            vec![format!("{}/api/executions/nope", s.base)],
            "USER.FACADE.RUN_NOT_FOUND",
        ),
        (
            vec![format!("{}/api/executions/nope/events", s.base)],
            "USER.FACADE.RUN_NOT_FOUND",
        ),
        (
            vec![
                "-X".into(),
                "DELETE".into(),
                format!("{}/api/executions/nope", s.base),
            ],
            "USER.FACADE.RUN_NOT_FOUND",
        ),
        (
            vec![
                "-X".into(),
                "POST".into(),
                "-H".into(),
                "content-type: application/json".into(),
                "-d".into(),
                "{}".into(),
                format!("{}/api/workflows/local/no-such-flow/run", s.base),
            ],
            "USER.FACADE.WORKFLOW_NOT_FOUND",
        ),
    ] {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, body, ctype) = curl(&a);
        assert_eq!(code, 404, "{args:?}: {body}");
        assert_eq!(ctype, "application/problem+json", "{args:?}");
        let v = json(&body);
        assert_eq!(v["status"], 404);
        assert_eq!(v["code"], want, "{body}");
        assert!(!v["detail"].as_str().unwrap().is_empty());
    }
    // Bad input: 400 for a body that is not JSON, 422 for inputs that are not an object.
    let url = format!("{}/api/workflows/local/hello/run", s.base);
    let (code, body, _) = curl(&[
        "-X",
        "POST",
        "-H",
        "content-type: application/json",
        "-d",
        "{nope",
        &url,
    ]);
    assert_eq!(code, 400, "{body}");
    assert_eq!(json(&body)["code"], "USER.INPUT.VALIDATION_FAILED");
    let (code, body, _) = curl(&[
        "-X",
        "POST",
        "-H",
        "content-type: application/json",
        "-d",
        r#"{"inputs":[1]}"#,
        &url,
    ]);
    assert_eq!(code, 422, "{body}");
}

fn sleeps(sb: &Sandbox) -> usize {
    sb.processes()
        .iter()
        .filter(|p| p.cmdline.contains("sleep 300"))
        .count()
}

#[test]
fn cancel_stops_a_sleeping_run_and_leaves_no_process() {
    let sb = sandbox();
    let s = start(&sb);
    let id = start_run(&s, "sleeper", "{}");
    wait_for("the sleep to start", || sleeps(&sb) > 0);
    let st = status(&s, &id);
    assert_eq!(st["status"], "running", "{st}");
    assert_eq!(st["states"]["nap"]["status"], "running", "{st}");
    let url = format!("{}/api/executions/{id}", s.base);
    let (code, body, _) = curl(&["-X", "DELETE", &url]);
    assert_eq!(code, 204, "{body}");
    wait_for("the run to be cancelled", || {
        status(&s, &id)["status"] == "cancelled"
    });
    wait_for("the sleep to go", || sleeps(&sb) == 0);
    let st = status(&s, &id);
    assert_eq!(st["states"]["nap"]["status"], "cancelled", "{st}");
    assert_eq!(st["exit_code"], 130, "{st}");
    // Idempotent once finished; the stream ends with the final event.
    let (code, _, _) = curl(&["-X", "DELETE", &url]);
    assert_eq!(code, 204);
    let frames = follow(&s, &id, &[]);
    assert_eq!(frames.last().unwrap().1, "run_finished");
    assert_eq!(
        frames.last().unwrap().2["event"]["result"]["status"],
        "cancelled"
    );
}

#[test]
fn sigterm_cancels_live_runs_and_exits() {
    let sb = sandbox();
    let mut s = start(&sb);
    let id = start_run(&s, "sleeper", "{}");
    wait_for("the sleep to start", || sleeps(&sb) > 0);
    // A subscriber following the run when the server is told to stop: connected (its first
    // frame read) before the SIGTERM.
    let mut sub = Command::new("curl")
        .args(["-s", "-N", "--max-time", "60"])
        .arg(format!("{}/api/executions/{id}/events", s.base))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(sub.stdout.take().unwrap());
    let mut seen = String::new();
    while parse_frames(&seen).is_empty() {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "stream ended early"
        );
        seen.push_str(&line);
    }
    let pid = s.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let mut code = None;
    wait_for("awf serve to exit", || {
        code = s.child.try_wait().unwrap();
        code.is_some()
    });
    assert_eq!(code.unwrap().code(), Some(0));
    std::io::Read::read_to_string(&mut reader, &mut seen).unwrap();
    let _ = sub.wait();
    let frames = parse_frames(&seen);
    assert_eq!(frames.first().unwrap().1, "run_started");
    let last = frames.last().unwrap();
    assert_eq!(last.1, "run_finished", "{:?}", names(&frames));
    assert_eq!(last.2["event"]["result"]["status"], "cancelled");
    wait_for("no process left", || sb.processes().is_empty());
    let h = sb.run(&["history", "--format", "json"]).unwrap();
    assert!(h.stdout.contains(&id), "{}", h.stdout);
    assert!(h.stdout.contains("cancelled"), "{}", h.stdout);
}

#[test]
fn a_non_loopback_address_is_refused() {
    let sb = sandbox();
    let r = sb.run(&["serve", "--addr", "0.0.0.0:0"]).unwrap();
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("USER.INPUT.VALIDATION_FAILED"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("loopback"), "{}", r.stderr);
}

#[test]
fn a_token_guards_every_route() {
    let mut sb = sandbox();
    sb.set_env("HTTP_TEST_TOKEN", "t0k3n-value");
    let s = start_with(&sb, &["--token-env", "HTTP_TEST_TOKEN"]);
    let url = format!("{}/api/workflows", s.base);
    for extra in [
        vec![],
        vec!["-H", "Authorization: Bearer wrong"],
        vec!["-H", "Authorization: Bearer t0k3n-valu"],
        vec!["-H", "Authorization: t0k3n-value"],
    ] {
        let mut a = extra.clone();
        a.push(&url);
        let (code, body, ctype) = curl(&a);
        assert_eq!(code, 401, "{extra:?}: {body}");
        assert_eq!(ctype, "application/problem+json");
        assert_eq!(json(&body)["code"], "USER.FACADE.UNAUTHORIZED");
        assert!(!body.contains("t0k3n"), "{body}");
    }
    let auth = "Authorization: Bearer t0k3n-value";
    let (code, body, _) = curl(&["-H", auth, &url]);
    assert_eq!(code, 200, "{body}");
    let (code, body, _) = curl(&[
        "-H",
        auth,
        &format!("{}/api/executions/nope/events", s.base),
    ]);
    assert_eq!(code, 404, "{body}");
}

#[test]
fn a_non_loopback_address_needs_a_set_token_variable() {
    let sb = sandbox();
    let r = sb
        .run(&[
            "serve",
            "--addr",
            "0.0.0.0:0",
            "--token-env",
            "HTTP_UNSET_TOKEN",
        ])
        .unwrap();
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("HTTP_UNSET_TOKEN"), "{}", r.stderr);
    assert!(
        r.stderr.contains("USER.INPUT.VALIDATION_FAILED"),
        "{}",
        r.stderr
    );
}
