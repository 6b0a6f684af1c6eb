//! The open parts of `awf serve` (issue 13), over the built binary: slow clients closed by
//! the header read timeout (`--header-timeout`) while event streams and slow bodies are not,
//! interactive (breakpoint) runs over HTTP, and recorded runs read back with every field
//! the store knows.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::Read;
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;
use std::time::Instant;

use awf_tests::http_serve::curl;
use awf_tests::http_serve::follow;
use awf_tests::http_serve::sandbox_with;
use awf_tests::http_serve::start;
use awf_tests::http_serve::start_run;
use serde_json::Value;

const HELLO: &str = "name: hello
states:
  initial: greet
  greet:
    type: step
    command: echo hello
    on_success: done
  done:
    type: terminal
";

/// Sleeps past the header timeout of the tests, so its stream outlives it.
const NAP: &str = "name: nap
states:
  initial: first
  first:
    type: step
    command: echo one
    on_success: rest
  rest:
    type: step
    command: sleep 3 && echo two
    on_success: done
  done:
    type: terminal
";

/// Reads `s` until the server closes it (or `limit` passes); returns what was read and
/// whether the server closed the connection.
fn read_to_close(s: &mut TcpStream, limit: Duration) -> (String, bool) {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let t0 = Instant::now();
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&out).into_owned(), true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            // A reset is a close too.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return (String::from_utf8_lossy(&out).into_owned(), true);
            }
            Err(_) => return (String::from_utf8_lossy(&out).into_owned(), false),
        }
        if t0.elapsed() > limit {
            return (String::from_utf8_lossy(&out).into_owned(), false);
        }
    }
}

#[test]
fn a_client_that_never_finishes_its_request_head_is_disconnected() {
    let sb = sandbox_with(&[("hello", HELLO)]);
    let s = start(&sb, &["--header-timeout", "1s"]);
    let mut slow = TcpStream::connect(s.addr()).unwrap();
    slow.write_all(b"GET /api/workf").unwrap();
    let (got, closed) = read_to_close(&mut slow, Duration::from_secs(40));
    assert!(closed, "the half-sent request is still open after 40 s");
    assert!(!got.contains("200 OK"), "{got}");
    // The server still answers everyone else.
    let (code, body, _) = curl(&[&format!("{}/api/workflows", s.base)]);
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("hello"), "{body}");
}

#[test]
fn a_kept_alive_idle_connection_is_closed_after_the_header_timeout() {
    let sb = sandbox_with(&[("hello", HELLO)]);
    let s = start(&sb, &["--header-timeout", "1s"]);
    let mut c = TcpStream::connect(s.addr()).unwrap();
    let req = format!(
        "GET /api/workflows HTTP/1.1\r\nHost: {}\r\nConnection: keep-alive\r\n\r\n",
        s.addr()
    );
    c.write_all(req.as_bytes()).unwrap();
    // The answer comes, then the idle connection is closed by the server.
    let (got, closed) = read_to_close(&mut c, Duration::from_secs(40));
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(got.contains("hello"), "{got}");
    assert!(
        closed,
        "the idle kept-alive connection is still open after 40 s"
    );
}

#[test]
fn a_slow_body_and_a_long_event_stream_are_not_cut_by_the_header_timeout() {
    let sb = sandbox_with(&[("hello", HELLO), ("nap", NAP)]);
    let s = start(&sb, &["--header-timeout", "1s", "--keep-alive", "300ms"]);
    // A head sent at once, its body two seconds later: the request is answered.
    let mut c = TcpStream::connect(s.addr()).unwrap();
    let body = "{}";
    let head = format!(
        "POST /api/workflows/env/hello/run HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        s.addr(),
        body.len()
    );
    c.write_all(head.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    c.write_all(body.as_bytes()).unwrap();
    let (got, _) = read_to_close(&mut c, Duration::from_secs(40));
    assert!(got.starts_with("HTTP/1.1 202"), "{got}");
    // A stream open three seconds (three header timeouts) gets every event to the end.
    let id = start_run(&s, "nap", "{}");
    let frames = follow(&s, &id, &[]);
    let names: Vec<&str> = frames.iter().map(|f| f.1.as_str()).collect();
    assert_eq!(names.last().copied(), Some("run_finished"), "{names:?}");
    let text = serde_json::to_string(&frames.iter().map(|f| &f.2).collect::<Vec<_>>()).unwrap();
    assert!(text.contains("two"), "{text}");
}

const ABC: &str = "name: abc
states:
  initial: a
  a:
    type: step
    command: echo ay
    on_success: b
  b:
    type: step
    command: echo bee
    on_success: c
  c:
    type: step
    command: echo sea
    on_success: done
  done:
    type: terminal
";

/// Polls the execution until it waits on a request; returns that request.
fn wait_pending(s: &awf_tests::http_serve::Server, id: &str) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    awf_tests::wait_for(&format!("run {id} to wait on a request"), || {
        last = awf_tests::http_serve::execution(s, id);
        last["pending"].as_array().is_some_and(|p| !p.is_empty())
    });
    last["pending"][0].clone()
}

fn respond(s: &awf_tests::http_serve::Server, id: &str, body: &str) -> (u16, String) {
    let (code, body, _) =
        awf_tests::http_serve::post(&format!("{}/api/executions/{id}/respond", s.base), body);
    (code, body)
}

#[test]
fn an_interactive_run_stops_at_its_breakpoints_and_takes_decisions() {
    use awf_tests::http_serve::json_of;
    use awf_tests::http_serve::post;
    use awf_tests::http_serve::wait_status;
    let sb = sandbox_with(&[("abc", ABC)]);
    let s = start(&sb, &[]);
    // Breakpoints imply interactive; a state the workflow lacks is a warning, as at a terminal.
    let (code, body, _) = post(
        &format!("{}/api/workflows/env/abc/run", s.base),
        r#"{"breakpoints": ["b", "bb"]}"#,
    );
    assert_eq!(code, 202, "{body}");
    let v = json_of(&body);
    let warnings = v["body"]["warnings"].to_string();
    assert!(
        warnings.contains("'bb'") && warnings.contains("did you mean 'b'"),
        "{v}"
    );
    let id = v["body"]["execution_id"].as_str().unwrap().to_owned();
    let req = wait_pending(&s, &id);
    assert_eq!(req["kind"], "breakpoint", "{req}");
    assert_eq!(req["step"], "b", "{req}");
    assert_eq!(req["previous"], "a", "{req}");
    assert_eq!(req["state_kind"], "command", "{req}");
    assert_eq!(req["preview"]["command"], "echo bee", "{req}");
    assert_eq!(req["preview"]["total"], 3, "{req}");
    assert_eq!(req["preview"]["routes"][0]["on"], "on_success", "{req}");
    assert_eq!(req["preview"]["routes"][0]["target"], "c", "{req}");
    let options: Vec<&str> = req["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        options,
        ["continue", "skip", "abort", "retry", "inspect", "edit"]
    );
    let rid = req["request_id"].as_str().unwrap();
    // A decision that does not exist is 422 and the request stays open.
    let (code, body) = respond(
        &s,
        &id,
        &format!(r#"{{"request_id":"{rid}","decision":"jump"}}"#),
    );
    assert_eq!(code, 422, "{body}");
    let (code, body) = respond(
        &s,
        &id,
        &format!(r#"{{"request_id":"{rid}","decision":"skip"}}"#),
    );
    assert_eq!(code, 204, "{body}");
    let (code, body) = respond(
        &s,
        &id,
        &format!(r#"{{"request_id":"{rid}","decision":"skip"}}"#),
    );
    assert_eq!(code, 409, "answered twice: {body}");
    let done = wait_status(&s, &id, "completed");
    // b was skipped (its command never ran), c ran.
    assert_ne!(done["states"]["b"]["status"], "completed", "{done}");
    assert!(
        !done["states"]["b"]["output"].to_string().contains("bee"),
        "{done}"
    );
    assert_eq!(done["states"]["c"]["output"], "sea\n", "{done}");
    // The stream carried the breakpoint with its preview.
    let frames = follow(&s, &id, &["-H", "Last-Event-ID: 0"]);
    let bp = frames
        .iter()
        .find(|f| f.1 == "interaction_required")
        .expect("an interaction_required frame");
    assert_eq!(bp.2["event"]["request"]["kind"], "breakpoint", "{:?}", bp.2);
    assert_eq!(bp.2["event"]["request"]["preview"]["command"], "echo bee");
}

#[test]
fn an_interactive_run_edits_an_input_refuses_retry_first_and_aborts() {
    use awf_tests::http_serve::json_of;
    use awf_tests::http_serve::post;
    use awf_tests::http_serve::wait_status;
    let wf = "name: greet
inputs:
  - name: who
    type: string
    default: world
states:
  initial: hi
  hi:
    type: step
    command: echo hi {{.inputs.who}}
    on_success: bye
  bye:
    type: step
    command: echo bye
    on_success: done
  done:
    type: terminal
";
    let sb = sandbox_with(&[("greet", wf)]);
    let s = start(&sb, &[]);
    let (code, body, _) = post(
        &format!("{}/api/workflows/env/greet/run", s.base),
        r#"{"interactive": true}"#,
    );
    assert_eq!(code, 202, "{body}");
    let id = json_of(&body)["body"]["execution_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let req = wait_pending(&s, &id);
    assert_eq!(req["step"], "hi", "{req}");
    assert!(!req["options"].to_string().contains("retry"), "{req}");
    let rid = req["request_id"].as_str().unwrap().to_owned();
    // Nothing ran yet: retry is refused.
    let (code, body) = respond(
        &s,
        &id,
        &format!(r#"{{"request_id":"{rid}","decision":"retry"}}"#),
    );
    assert_eq!(code, 422, "{body}");
    // edit sets the input and asks again (a new request, the same state).
    let (code, body) = respond(
        &s,
        &id,
        &format!(r#"{{"request_id":"{rid}","decision":"edit who=moon"}}"#),
    );
    assert_eq!(code, 204, "{body}");
    let mut again = Value::Null;
    awf_tests::wait_for("the breakpoint asked again", || {
        again = wait_pending(&s, &id);
        again["request_id"] != rid.as_str()
    });
    assert_eq!(again["step"], "hi", "{again}");
    assert_eq!(again["preview"]["command"], "echo hi moon", "{again}");
    let rid = again["request_id"].as_str().unwrap().to_owned();
    let (code, body) = respond(
        &s,
        &id,
        &format!(r#"{{"request_id":"{rid}","decision":"c"}}"#),
    );
    assert_eq!(code, 204, "{body}");
    let mut at_bye = Value::Null;
    awf_tests::wait_for("the breakpoint before bye", || {
        at_bye = wait_pending(&s, &id);
        at_bye["step"] == "bye"
    });
    assert!(at_bye["options"].to_string().contains("retry"), "{at_bye}");
    let rid = at_bye["request_id"].as_str().unwrap();
    let (code, body) = respond(
        &s,
        &id,
        &format!(r#"{{"request_id":"{rid}","decision":"abort"}}"#),
    );
    assert_eq!(code, 204, "{body}");
    let done = wait_status(&s, &id, "cancelled");
    assert_eq!(done["states"]["hi"]["output"], "hi moon\n", "{done}");
    assert_ne!(done["states"]["bye"]["status"], "completed", "{done}");
}

const MSG: &str = "name: msg
states:
  initial: a
  a:
    type: step
    command: echo hi
    on_success: done
  done:
    type: terminal
    message: \"all good {{.states.a.Output}}\"
";

const BAD: &str = "name: bad
states:
  initial: a
  a:
    type: step
    command: echo oops >&2; exit 3
    on_success: done
    on_failure: failed
  done:
    type: terminal
  failed:
    type: terminal
    status: failure
    message: it broke
";

/// `GET /api/executions/{id}` once its `phase` is `want` and its history row is written
/// (`completed_at`: the times come from the history, null until the recorder wrote it).
fn at_phase(s: &awf_tests::http_serve::Server, id: &str, want: &str) -> Value {
    let mut last = Value::Null;
    awf_tests::wait_for(&format!("run {id} to be {want}"), || {
        last = awf_tests::http_serve::execution(s, id);
        last["phase"] == want && !last["completed_at"].is_null()
    });
    last
}

#[test]
fn a_run_read_from_the_store_has_every_field_it_had_live() {
    let sb = sandbox_with(&[("msg", MSG), ("bad", BAD)]);
    let s = start(&sb, &["--run-ttl", "1s"]);
    for (name, status) in [("msg", "completed"), ("bad", "failed")] {
        let id = start_run(&s, name, "{}");
        let mut live = at_phase(&s, &id, "finished");
        assert_eq!(live["status"], status, "{live}");
        let mut recorded = at_phase(&s, &id, "recorded");
        // `phase` is the one field that says where the answer came from.
        live.as_object_mut().unwrap().remove("phase");
        recorded.as_object_mut().unwrap().remove("phase");
        assert_eq!(live, recorded, "{name}: live-finished vs recorded");
        if name == "msg" {
            // A terminal's rendered message loses its trailing line break (trial_fixes_52).
            assert_eq!(recorded["message"], "all good hi", "{recorded}");
        } else {
            assert_eq!(recorded["terminal"], "failed", "{recorded}");
            assert!(
                recorded["error"]["message"]
                    .to_string()
                    .contains("it broke"),
                "{recorded}"
            );
        }
    }
    // A run from a terminal, read over HTTP: its message from the store.
    let r = sb.run(&["run", "msg"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (code, body, _) = curl(&[&format!("{}/api/executions", s.base)]);
    assert_eq!(code, 200, "{body}");
    let list: Value = serde_json::from_str(&body).unwrap();
    let ids: Vec<String> = list["body"]["executions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["workflow_name"] == "msg")
        .map(|e| e["execution_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 2, "{list}");
    for id in ids {
        let v = awf_tests::http_serve::execution(&s, &id);
        assert_eq!(v["message"], "all good hi", "{v}");
        assert_eq!(v["terminal"], "done", "{v}");
    }
}
