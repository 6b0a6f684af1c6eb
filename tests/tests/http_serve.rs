//! `awf serve` (first slice) over the built binary, with curl as the HTTP client: the
//! workflows list, starting a run, its status, its SSE stream (two subscribers, one
//! reconnecting with `Last-Event-ID`), problem documents, cancel, SIGTERM, history.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::BufRead;
use std::io::BufReader;
use std::process::Command;
use std::process::Stdio;

use awf_tests::Sandbox;
use awf_tests::http_serve::Frame;
use awf_tests::http_serve::Server;
use awf_tests::http_serve::curl;
use awf_tests::http_serve::execution as status;
use awf_tests::http_serve::follow;
use awf_tests::http_serve::json_of as json;
use awf_tests::http_serve::parse_frames;
use awf_tests::http_serve::sandbox_with;
use awf_tests::http_serve::sigterm;
use awf_tests::http_serve::start as start_with;
use awf_tests::http_serve::start_run;
use awf_tests::http_serve::wait_exit;
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

fn sandbox() -> Sandbox {
    sandbox_with(&[("hello", HELLO), ("slow", SLOW), ("sleeper", SLEEPER)])
}

fn start(sb: &Sandbox) -> Server {
    start_with(sb, &[])
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
                format!("{}/api/workflows/env/no-such-flow/run", s.base),
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
    let url = format!("{}/api/workflows/env/hello/run", s.base);
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
    sigterm(&s);
    assert_eq!(wait_exit(&mut s), Some(0));
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
