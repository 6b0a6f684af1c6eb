//! A breaker's trial of `awf serve`, over the real binary: the event stream is lossless for
//! a run whose events outgrow the in-memory log (the dropped range is read back from the
//! transcript, no `lagged` frame); the `--token-env` token is not in the server's initial
//! environment block (`/proc/$PPID/environ` of a step) and is masked in what a run records;
//! the OpenAPI document declares what `/api/history` and the event stream's `Last-Event-ID`
//! accept; an empty `Last-Event-ID` is as if absent.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use awf_tests::http_serve::curl;
use awf_tests::http_serve::execution;
use awf_tests::http_serve::follow;
use awf_tests::http_serve::json_of;
use awf_tests::http_serve::parse_frames;
use awf_tests::http_serve::sandbox_with;
use awf_tests::http_serve::start;
use awf_tests::http_serve::start_run;
use awf_tests::http_serve::wait_status;
use pretty_assertions::assert_eq;
use serde_json::Value;

/// Prints `mb` MiB of random bytes as base64, then 4 KiB more raw.
const BIG: &str = "name: big\ninputs:\n  - name: mb\n    type: integer\n    required: true\nstates:\n  initial: a\n  a: {type: step, command: 'head -c $(({{.inputs.mb}}*1024*1024)) /dev/urandom | base64; head -c 4096 /dev/urandom | base64', on_success: done}\n  done: {type: terminal}\n";

/// Three steps, so the stream has a few events.
const ECHO: &str = "name: echo\nstates:\n  initial: a\n  a: {type: step, command: 'echo one', on_success: b}\n  b: {type: step, command: 'echo two', on_success: c}\n  c: {type: step, command: 'echo three', on_success: done}\n  done: {type: terminal}\n";

/// Polls the execution (up to 10 minutes: the run prints tens of MiB) until it is `want`.
fn wait_long(s: &awf_tests::http_serve::Server, id: &str, want: &str) {
    let t0 = std::time::Instant::now();
    loop {
        if execution(s, id)["status"] == want {
            return;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(600),
            "run {id} never became {want}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Item 1 (HIGH): a run whose events outgrow the in-memory log (64 MiB estimated) was
/// streamed with an `event: lagged` frame and a permanent gap (ids 68 → 398), every time
/// it was read while in memory. Now the range that left memory is read back from the run's
/// transcript: the stream holds every position 1..=N in order, no `lagged` frame, from the
/// start and after a `Last-Event-ID`.
#[test]
fn a_run_whose_events_outgrow_memory_streams_every_event_without_a_gap() {
    let sb = sandbox_with(&[("big", BIG)]);
    let s = start(&sb, &[]);
    let id = start_run(&s, "big", r#"{"inputs":{"mb":24}}"#);
    wait_long(&s, &id, "completed");
    let url = format!("{}/api/executions/{id}/events", s.base);
    let (code, body, _) = curl(&["-N", "--max-time", "600", &url]);
    assert_eq!(code, 200);
    assert!(
        !body.contains("event: lagged"),
        "a lagged frame in the stream"
    );
    let frames = parse_frames(&body);
    let ids: Vec<u64> = frames.iter().map(|f| f.0).collect();
    let n = ids.len() as u64;
    assert!(n > 100, "only {n} events");
    assert_eq!(ids, (1..=n).collect::<Vec<u64>>());
    assert_eq!(frames[0].1, "run_started");
    assert_eq!(frames.last().unwrap().1, "run_finished");
    // Resumed after position 68 (which had left memory): 69..=N.
    let (code, body, _) = curl(&["-N", "--max-time", "600", "-H", "Last-Event-ID: 68", &url]);
    assert_eq!(code, 200);
    assert!(!body.contains("event: lagged"));
    let ids: Vec<u64> = parse_frames(&body).iter().map(|f| f.0).collect();
    assert_eq!(ids, (69..=n).collect::<Vec<u64>>());
}

/// Item 2 (HIGH, security): the token of `--token-env` was in the server's initial
/// environment block, which a step reads in `/proc/$PPID/environ` (its parent is the
/// server); the run then recorded and served it in clear. Now the server starts itself
/// again without the variable (the token handed over on a pipe): the step finds neither the
/// name nor the value there or in its own environment, and a step that prints the value
/// (read from a file here) shows `***` in the execution, its state file and its transcript.
#[test]
fn the_token_is_not_in_the_servers_environ_and_is_masked_in_what_a_run_records() {
    const TOKEN: &str = "tok-abcdefghij-0123456789-345";
    let peek = "name: peek\nstates:\n  initial: a\n  a: {type: step, command: 'tr \"\\0\" \"\\n\" < /proc/$PPID/environ | grep -c MYTOK || true; env | grep -c MYTOK || true; cat tok', on_success: done}\n  done: {type: terminal}\n";
    let mut sb = sandbox_with(&[("peek", peek)]);
    sb.set_env("MYTOK", TOKEN);
    sb.write("tok", TOKEN).unwrap();
    let s = start(&sb, &["--token-env", "MYTOK"]);
    let auth = format!("Authorization: Bearer {TOKEN}");
    let (code, body, _) = curl(&[
        "-X",
        "POST",
        "-H",
        &auth,
        "-H",
        "content-type: application/json",
        "-d",
        "{\"inputs\":{}}",
        &format!("{}/api/workflows/env/peek/run", s.base),
    ]);
    assert_eq!(code, 202, "{body}");
    let id = json_of(&body)["body"]["execution_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut got = Value::Null;
    awf_tests::wait_for("the run to complete", || {
        let (_, body, _) = curl(&["-H", &auth, &format!("{}/api/executions/{id}", s.base)]);
        got = json_of(&body)["body"].clone();
        got["status"] == "completed"
    });
    let out = got["states"]["a"]["output"].as_str().unwrap();
    assert_eq!(out.lines().collect::<Vec<_>>(), ["0", "0", "***"], "{got}");
    let data = awf_tests::data(&sb);
    let state = std::fs::read_to_string(data.join("states").join(format!("{id}.json"))).unwrap();
    assert!(!state.contains(TOKEN), "the state file holds the token");
    let transcript =
        std::fs::read_to_string(data.join("transcripts").join(format!("{id}.jsonl"))).unwrap();
    assert!(
        !transcript.contains(TOKEN),
        "the transcript holds the token"
    );
    assert!(transcript.contains("***"));
}

/// Items 4 and 5 (LOW): `/api/history`'s `status`, `limit`, `since` and `until` were plain
/// strings in the OpenAPI document, and `Last-Event-ID` was `["string", "null"]`, looser
/// than the server (422 for `status=accepted` or `Last-Event-ID: null`). Now they declare
/// what is accepted; an empty `Last-Event-ID` is as if absent (from the start), and the
/// header wins over `?after=`.
#[test]
fn openapi_declares_what_history_and_the_stream_accept_and_an_empty_last_event_id_is_absent() {
    let sb = sandbox_with(&[("echo", ECHO)]);
    let s = start(&sb, &[]);
    let (code, body, _) = curl(&[&format!("{}/openapi.json", s.base)]);
    assert_eq!(code, 200);
    let doc = json_of(&body);
    let params = |path: &str| -> Vec<Value> {
        doc["paths"][path]["get"]["parameters"]
            .as_array()
            .unwrap()
            .clone()
    };
    let named = |ps: &[Value], n: &str| -> Value {
        ps.iter().find(|p| p["name"] == n).unwrap()["schema"].clone()
    };
    let history = params("/api/history");
    let status = named(&history, "status");
    let values: Vec<&str> = status["enum"]
        .as_array()
        .unwrap_or_else(|| panic!("no enum: {status}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for v in [
        "running",
        "completed",
        "success",
        "failed",
        "cancelled",
        "waiting",
        "queued",
    ] {
        assert!(values.contains(&v), "{v} missing from {status}");
    }
    assert!(!values.contains(&"accepted"));
    let limit = named(&history, "limit");
    assert_eq!(limit["type"], "integer", "{limit}");
    assert_eq!(limit["minimum"], 1, "{limit}");
    for t in ["since", "until"] {
        assert!(named(&history, t)["pattern"].is_string(), "{t}");
    }
    let stats = params("/api/history/stats");
    assert!(named(&stats, "status")["enum"].is_array());
    let events = params("/api/executions/{id}/events");
    let last = named(&events, "Last-Event-ID");
    assert_eq!(last["type"], "string", "{last}");
    assert!(last["pattern"].is_string(), "{last}");
    // The server agrees with what the document declares.
    let (code, _, _) = curl(&[&format!("{}/api/history?status=accepted", s.base)]);
    assert_eq!(code, 422);
    let (code, body, _) = curl(&[&format!("{}/api/history?status=completed&limit=1", s.base)]);
    assert_eq!(code, 200, "{body}");

    let id = start_run(&s, "echo", r#"{"inputs":{}}"#);
    wait_status(&s, &id, "completed");
    let all = follow(&s, &id, &[]);
    let n = all.len() as u64;
    assert!(n >= 8, "{all:?}");
    // curl sends an empty header given as `Name;` (`Name:` would leave it out).
    let empty = follow(&s, &id, &["-H", "Last-Event-ID;"]);
    let ids: Vec<u64> = empty.iter().map(|f| f.0).collect();
    assert_eq!(ids, (1..=n).collect::<Vec<u64>>());
    let url = format!("{}/api/executions/{id}/events?after=1", s.base);
    let (code, body, _) = curl(&["-N", "-H", "Last-Event-ID: 3", &url]);
    assert_eq!(code, 200);
    assert_eq!(parse_frames(&body).first().map(|f| f.0), Some(4));
}
