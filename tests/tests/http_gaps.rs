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
