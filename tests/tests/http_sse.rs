//! The SSE stream of `awf serve` (`GET /api/executions/{id}/events`) under load, over the
//! built binary with raw HTTP/1.1 over `TcpStream` (one thread per subscriber, chunked
//! transfer decoding done here): 50 subscribers of one run of many events, one of which
//! drops its connection mid-run and reconnects with `Last-Event-ID`, each get exactly the
//! run's transcript (`<data>/transcripts/<run_id>.jsonl`, written by the store), no gap, no
//! duplicate, and every stream ends after the run's final event; an idle stream carries
//! heartbeat comments.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::BufRead;
use std::io::BufReader;
use std::io::Read;
use std::io::Write;
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::Duration;

use awf_tests::Sandbox;
use awf_tests::http_serve::sandbox_with;
use awf_tests::http_serve::start;
use awf_tests::wait_for;
use serde_json::Value;

/// 30 iterations of an echo and a short sleep: about 95 events over 3 s or more.
const MANY: &str = "name: many
states:
  initial: l
  l:
    type: for_each
    items: '[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30]'
    body: [say]
    on_complete: done
  say:
    type: step
    command: 'echo line {{.loop.Item}}; sleep 0.1'
  done:
    type: terminal
";

/// A run that stays quiet for 2.5 s (no event between the step's start and its end).
const IDLE: &str = "name: idle
states:
  initial: nap
  nap:
    type: step
    command: sleep 2.5
    on_success: done
  done:
    type: terminal
";

/// How many subscribers follow the run at once.
const SUBSCRIBERS: usize = 50;

fn sandbox(files: &[(&str, &str)]) -> Sandbox {
    sandbox_with(files)
}

/// A response read over a raw connection: status, headers (names lower-cased) and a body
/// reader that undoes `Transfer-Encoding: chunked`.
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: BufReader<Body>,
}

/// The body of a response: chunked (decoded here), sized by `Content-Length`, or delimited
/// by the connection's end.
struct Body {
    conn: BufReader<TcpStream>,
    chunked: bool,
    /// `Content-Length` bytes not read yet.
    sized: Option<usize>,
    /// Bytes left in the current chunk.
    left: usize,
    /// The terminal zero-size chunk was read: the server ended the body.
    done: bool,
}

impl Read for Body {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some(rest) = self.sized.as_mut() {
            if *rest == 0 {
                // Not a read of zero bytes: BufReader would wait for more from the socket.
                return Ok(0);
            }
            let n = buf.len().min(*rest);
            let got = self.conn.read(&mut buf[..n])?;
            *rest -= got;
            return Ok(got);
        }
        if !self.chunked {
            return self.conn.read(buf);
        }
        if self.done {
            return Ok(0);
        }
        if self.left == 0 {
            let mut size = String::new();
            if self.conn.read_line(&mut size)? == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "connection closed inside a chunked body",
                ));
            }
            let hex = size.trim().split(';').next().unwrap_or("");
            self.left = usize::from_str_radix(hex, 16).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("bad chunk size {size:?}: {e}"),
                )
            })?;
            if self.left == 0 {
                let mut trailer = String::new();
                self.conn.read_line(&mut trailer)?;
                self.done = true;
                return Ok(0);
            }
        }
        let n = buf.len().min(self.left);
        let got = self.conn.read(&mut buf[..n])?;
        if got == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed inside a chunk",
            ));
        }
        self.left -= got;
        if self.left == 0 {
            let mut crlf = [0u8; 2];
            self.conn.read_exact(&mut crlf)?;
        }
        Ok(got)
    }
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `GET path` over a fresh connection with the given extra header lines; reads the status
/// line and headers. A read that waits over 60 s fails (a stream that never ends).
fn get(addr: &str, path: &str, extra: &[String]) -> Response {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n");
    for h in extra {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    conn.write_all(req.as_bytes()).unwrap();
    let mut conn = BufReader::new(conn);
    let mut status_line = String::new();
    conn.read_line(&mut status_line).unwrap();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut l = String::new();
        conn.read_line(&mut l).unwrap();
        let l = l.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap();
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
    }
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let sized = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok());
    Response {
        status,
        headers,
        body: BufReader::new(Body {
            conn,
            chunked,
            sized,
            left: 0,
            done: false,
        }),
    }
}

/// One SSE frame: (id, event name, data).
type Frame = (u64, String, Value);

/// What an SSE reader saw so far.
#[derive(Default)]
struct Seen {
    frames: Vec<Frame>,
    /// Comment lines (`:…`): heartbeats; each noted by how many frames came before it.
    comments: Vec<usize>,
}

/// Reads SSE lines from `body` (per the WHATWG event-stream grammar: `field: value`,
/// comments, a blank line dispatches) until `stop` says so after a frame or a comment, or
/// the body ends; returns whether the body ended.
fn read_frames(
    body: &mut BufReader<Body>,
    seen: &mut Seen,
    mut stop: impl FnMut(&Seen) -> bool,
) -> bool {
    let (mut id, mut event, mut data): (Option<u64>, Option<String>, Vec<String>) =
        (None, None, Vec::new());
    loop {
        let mut line = String::new();
        let n = body.read_line(&mut line).unwrap();
        if n == 0 {
            assert!(
                id.is_none() && event.is_none() && data.is_empty(),
                "the stream ended inside a frame"
            );
            return true;
        }
        let line = line.strip_suffix('\n').unwrap_or(&line);
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            if !data.is_empty() {
                let text = data.join("\n");
                let v: Value = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("data is not JSON ({e}): {text}"));
                let id = id
                    .take()
                    .unwrap_or_else(|| panic!("a frame without id: {text}"));
                let ev = event.take().unwrap_or_else(|| "message".to_owned());
                seen.frames.push((id, ev, v));
                data.clear();
                if stop(seen) {
                    return false;
                }
            }
            continue;
        }
        if line.starts_with(':') {
            seen.comments.push(seen.frames.len());
            if stop(seen) {
                return false;
            }
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "id" => id = Some(value.parse().unwrap()),
            "event" => event = Some(value.to_owned()),
            "data" => data.push(value.to_owned()),
            "retry" => {}
            other => panic!("unknown SSE field {other:?}"),
        }
    }
}

fn post_run(addr: &str, name: &str) -> String {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let body = "{}";
    let req = format!(
        "POST /api/workflows/env/{name}/run HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(req.as_bytes()).unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 202"), "{text}");
    // The body may be chunked or sized; the JSON object is what lies between the braces.
    let start = body.find('{').unwrap();
    let end = body.rfind('}').unwrap();
    let v: Value = serde_json::from_str(&body[start..=end]).unwrap();
    v["body"]["execution_id"].as_str().unwrap().to_owned()
}

fn execution_status(addr: &str, id: &str) -> String {
    let mut r = get(addr, &format!("/api/executions/{id}"), &[]);
    assert_eq!(r.status, 200);
    let mut text = String::new();
    r.body.read_to_string(&mut text).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v["body"]["status"].as_str().unwrap().to_owned()
}

/// The transcript's line type for an SSE event name, and the payload fields that carry the
/// same facts as the event's own fields: `(transcript type, [(event field, payload field)])`.
fn transcript_view(event: &str) -> (&'static str, &'static [(&'static str, &'static str)]) {
    match event {
        "run_started" => ("run.started", &[("workflow", "workflow")]),
        "step_started" => ("step.started", &[("step", "name"), ("kind", "kind")]),
        "output_chunk" => (
            "step.output",
            &[("step", "name"), ("stream", "stream"), ("text", "text")],
        ),
        "step_finished" => ("step.completed", &[("step", "name"), ("kind", "kind")]),
        "run_finished" => ("run.completed", &[]),
        "log" => ("log", &[("level", "level"), ("message", "message")]),
        other => panic!("no transcript mapping for SSE event {other:?} in this test"),
    }
}

/// Checks that `frames` (one subscriber's whole stream) is the transcript, line for line.
fn assert_is_transcript(who: &str, frames: &[Frame], transcript: &[Value]) {
    let ids: Vec<u64> = frames.iter().map(|f| f.0).collect();
    assert_eq!(
        ids,
        (1..=transcript.len() as u64).collect::<Vec<_>>(),
        "{who}: ids are not 1..={} without gap or duplicate",
        transcript.len()
    );
    for ((id, ev, data), line) in frames.iter().zip(transcript) {
        let at = format!("{who}, frame {id} ({ev})");
        assert_eq!(data["seq"], line["seq"], "{at}: seq");
        assert_eq!(data["seq"], *id, "{at}: id: is not the event's seq");
        assert_eq!(data["run_id"], line["run_id"], "{at}: run_id");
        assert_eq!(data["path"], line["path"], "{at}: path");
        assert_eq!(data["event"]["type"], ev.as_str(), "{at}: event name");
        let (kind, fields) = transcript_view(ev);
        assert_eq!(line["type"], kind, "{at}: transcript line {line}");
        for (ef, pf) in fields {
            assert_eq!(
                data["event"][ef], line["payload"][pf],
                "{at}: {ef} vs the transcript's {pf}: {line}"
            );
        }
        match ev.as_str() {
            "step_finished" => assert_eq!(
                data["event"]["state"]["status"], line["payload"]["status"],
                "{at}: status"
            ),
            "run_finished" => {
                let r = &data["event"]["result"];
                assert_eq!(r["status"], line["payload"]["status"], "{at}");
                assert_eq!(r["exit_code"], line["payload"]["exit_code"], "{at}");
                assert_eq!(r["terminal"], line["payload"]["terminal"], "{at}");
            }
            _ => {}
        }
    }
}

fn read_transcript(sb: &Sandbox, id: &str) -> Vec<Value> {
    let path = awf_tests::data(sb)
        .join("transcripts")
        .join(format!("{id}.jsonl"));
    let mut lines = Vec::new();
    wait_for("the transcript's final line", || {
        let Ok(text) = std::fs::read_to_string(&path) else {
            return false;
        };
        lines = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .collect();
        lines.last().is_some_and(|l| l["type"] == "run.completed")
    });
    lines
}

#[test]
fn fifty_subscribers_and_a_reconnect_each_get_the_transcript() {
    let sb = sandbox(&[("many", MANY)]);
    let s = start(&sb, &[]);
    let id = post_run(s.addr(), "many");
    let path = format!("/api/executions/{id}/events");

    // Each subscriber reports its first frame (so the test knows all follow the live run),
    // then its whole stream and whether the body ended after the final event.
    let (first_tx, first_rx) = mpsc::channel::<usize>();
    let (mid_tx, mid_rx) = mpsc::channel::<Seen>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let mut go_rx = Some(go_rx);
    let mut handles = Vec::new();
    for n in 0..SUBSCRIBERS {
        let addr = s.addr().to_owned();
        let path = path.clone();
        let first_tx = first_tx.clone();
        let mid_tx = mid_tx.clone();
        let go_rx = if n == 0 { go_rx.take() } else { None };
        handles.push(std::thread::spawn(move || {
            let mut r = get(&addr, &path, &[]);
            assert_eq!(r.status, 200, "subscriber {n}");
            let ctype = r.header("content-type").unwrap_or("").to_owned();
            assert!(ctype.starts_with("text/event-stream"), "{ctype}");
            let mut seen = Seen::default();
            let mut told = false;
            if let Some(go) = go_rx {
                // Subscriber 0: ten frames, then the connection is dropped mid-run.
                read_frames(&mut r.body, &mut seen, |s| s.frames.len() >= 10);
                first_tx.send(n).unwrap();
                drop(r);
                let last = seen.frames.last().unwrap().0;
                mid_tx.send(std::mem::take(&mut seen)).unwrap();
                go.recv().unwrap();
                let mut r = get(&addr, &path, &[format!("Last-Event-ID: {last}")]);
                assert_eq!(r.status, 200);
                let ended = read_frames(&mut r.body, &mut seen, |_| false);
                return (n, seen, ended);
            }
            let ended = read_frames(&mut r.body, &mut seen, |s| {
                if !told && !s.frames.is_empty() {
                    told = true;
                    first_tx.send(n).unwrap();
                }
                false
            });
            (n, seen, ended)
        }));
    }
    drop(first_tx);
    for _ in 0..SUBSCRIBERS {
        first_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("every subscriber gets a first frame");
    }
    // Every subscriber is connected and reading, and the run still goes: the streams are
    // live, not a replay of a finished log.
    assert_eq!(
        execution_status(s.addr(), &id),
        "running",
        "the run ended before all {SUBSCRIBERS} subscribers were connected; make MANY longer"
    );
    let before = mid_rx.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(
        execution_status(s.addr(), &id),
        "running",
        "the reconnect must happen mid-run"
    );
    go_tx.send(()).unwrap();

    let mut results: Vec<(usize, Seen, bool)> =
        handles.into_iter().map(|h| h.join().unwrap()).collect();
    results.sort_by_key(|r| r.0);
    let transcript = read_transcript(&sb, &id);
    assert!(
        transcript.len() > 90,
        "{} transcript lines: expected 30 iterations' worth",
        transcript.len()
    );
    let outputs = transcript
        .iter()
        .filter(|l| l["type"] == "step.output")
        .count();
    assert_eq!(outputs, 30, "one output line per iteration");
    let mut reconnect = before.frames;
    reconnect.extend(std::mem::take(&mut results[0].1.frames));
    assert_is_transcript("the reconnecting subscriber", &reconnect, &transcript);
    assert!(
        results[0].2,
        "the reconnected stream ended after the final event"
    );
    for (n, seen, ended) in &results[1..] {
        assert_is_transcript(&format!("subscriber {n}"), &seen.frames, &transcript);
        assert!(ended, "subscriber {n}: the stream did not end");
        assert_eq!(
            seen.frames, reconnect,
            "subscriber {n} and the reconnecting one saw different data"
        );
    }
    let last = &reconnect.last().unwrap();
    assert_eq!(last.1, "run_finished");
    assert_eq!(last.2["event"]["result"]["status"], "success");
}

#[test]
fn an_idle_stream_carries_heartbeat_comments_and_ends_after_the_run() {
    let sb = sandbox(&[("idle", IDLE)]);
    let s = start(&sb, &["--keep-alive", "300ms"]);
    let id = post_run(s.addr(), "idle");
    let mut r = get(s.addr(), &format!("/api/executions/{id}/events"), &[]);
    assert_eq!(r.status, 200);
    let mut seen = Seen::default();
    let ended = read_frames(&mut r.body, &mut seen, |_| false);
    assert!(ended, "the stream did not end after the run");
    let names: Vec<&str> = seen.frames.iter().map(|f| f.1.as_str()).collect();
    assert_eq!(
        names,
        [
            "run_started",
            "step_started",
            "step_finished",
            "run_finished"
        ],
        "{names:?}"
    );
    // Comments while the step sleeps: after `step_started` (2 frames), before its end.
    let idle = seen.comments.iter().filter(|&&n| n == 2).count();
    assert!(
        idle >= 3,
        "{idle} heartbeat comments in a 2.5 s silence at a 300 ms interval: {:?}",
        seen.comments
    );
    assert_is_transcript(
        "the idle subscriber",
        &seen.frames,
        &read_transcript(&sb, &id),
    );
}

#[test]
fn the_keep_alive_interval_must_be_a_duration() {
    let sb = sandbox(&[("idle", IDLE)]);
    let r = sb
        .run(&["serve", "--addr", "127.0.0.1:0", "--keep-alive", "soon"])
        .unwrap();
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("--keep-alive"), "{}", r.stderr);
}
