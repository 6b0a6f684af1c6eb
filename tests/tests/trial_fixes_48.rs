//! A breaker's findings over the real binary: two in-flight MCP requests with one JSON-RPC
//! id, an HTTP/1.1 request without `Host`, JSON bodies that repeat a key, and a run that
//! `GET /api/history` did not list yet right after the `POST` that started it.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::Read;
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use awf_tests::Sandbox;
use awf_tests::http_serve;
use awf_tests::mcp::RawServer;
use awf_tests::mcp::config;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

const HELLO: &str = "name: hello\ninputs:\n  - {name: who, type: string, default: world}\nstates:\n  initial: greet\n  greet:\n    type: step\n    command: echo hello\n    on_success: done\n  done: {type: terminal}\n";

/// An answer read over a raw socket: status code, header block (lower-cased), body.
struct Raw {
    status: u16,
    headers: String,
    body: String,
}

impl Raw {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.body))
    }
}

/// Sends `request` (the whole text, head and body) on a new connection to `addr` and reads
/// the answer until the server closes the connection (the request asks it to).
fn raw(addr: &str, request: &str) -> Raw {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no answer head in {text:?}"));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    let headers = head.to_ascii_lowercase();
    let body = if headers.contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Raw {
        status,
        headers,
        body,
    }
}

/// The body of a chunked answer.
fn dechunk(mut text: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = text.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        text = &rest[n + 2..];
    }
    out
}

/// An HTTP/1.1 request of `method` on `path` to the server at `addr`, with `Host` and a JSON
/// body when one is given.
fn request(addr: &str, method: &str, path: &str, body: Option<&str>) -> Raw {
    let body_head = body.map_or_else(String::new, |b| {
        format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        )
    });
    raw(
        addr,
        &format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{body_head}\r\n{}",
            body.unwrap_or("")
        ),
    )
}

/// Breaker: two `tools/call` requests in flight with the same JSON-RPC id lost one of their
/// answers. JSON-RPC 2.0 keeps ids unique among a client's pending requests: the second is
/// refused (`-32600`, `"id": null`, the message naming the id) and never runs, the first is
/// answered with its result, and once answered the id may be used again.
#[test]
fn mcp_a_duplicate_id_in_flight_is_refused_and_the_first_call_is_answered() {
    let sb = Sandbox::new().unwrap();
    let cfg = config(
        &sb,
        &json!({"intercept_builtins": true, "root_dir": sb.path()}),
    );
    let go = sb.path().join("go");
    let second_ran = sb.path().join("second-ran");
    let mut s = RawServer::awf(&sb, &cfg, &[]);
    s.initialize("2025-11-25");
    for id in [json!(7), json!("call-a")] {
        // The first call waits for `go`: it is pending while the second is sent.
        s.send_json(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "Bash", "arguments": {"command":
                format!("while [ ! -e {0} ]; do sleep 0.05; done; rm {0}; echo first", go.display())}}}));
        s.send_json(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "Bash", "arguments": {"command":
                format!("touch {}; echo second", second_ran.display())}}}));
        let refused = s.recv();
        assert_eq!(refused["id"], Value::Null, "{refused}");
        assert_eq!(refused["error"]["code"], -32600, "{refused}");
        assert_eq!(refused["error"]["data"]["duplicate_id"], id, "{refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("id {id}")), "{message}");

        std::fs::write(&go, "").unwrap();
        let first = s.recv();
        assert_eq!(first["id"], id, "{first}");
        assert_eq!(first["result"]["isError"], false, "{first}");
        assert_eq!(
            first["result"]["content"][0]["text"], "first\n[awf: exit code 0]\n",
            "{first}"
        );

        // Answered: the id is free again (and nothing else was answered in between).
        s.send_json(&json!({"jsonrpc": "2.0", "id": id, "method": "ping"}));
        let pong = s.recv();
        assert_eq!(pong, json!({"jsonrpc": "2.0", "id": id, "result": {}}));
    }
    assert!(!second_ran.exists(), "the refused call ran");
    let (code, _, stderr) = s.close();
    assert_eq!(code, Some(0), "{stderr}");
}

/// Breaker: an HTTP/1.1 request without `Host` was answered 200; RFC 9112 §3.2: 400. So is
/// one with two `Host` lines. HTTP/1.0 needs none.
#[test]
fn http_an_http11_request_without_host_is_400() {
    let sb = http_serve::sandbox_with(&[("hello", HELLO)]);
    let s = http_serve::start(&sb, &[]);
    let addr = s.addr();

    for path in ["/api/workflows", "/api/history", "/openapi.json"] {
        let r = raw(
            addr,
            &format!("GET {path} HTTP/1.1\r\nConnection: close\r\n\r\n"),
        );
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        assert!(
            r.headers.contains("content-type: application/problem+json"),
            "{}",
            r.headers
        );
        let doc = r.json();
        assert_eq!(doc["status"], 400, "{doc}");
        assert_eq!(doc["code"], "USER.INPUT.VALIDATION_FAILED", "{doc}");
        assert_eq!(
            doc["detail"],
            "an HTTP/1.1 request must have one Host header, and this one has none"
        );
        assert_eq!(
            doc["hints"],
            json!([
                "send a `Host` header naming this server, e.g. `Host: 127.0.0.1:PORT` (HTTP/1.1 clients such as curl send it themselves)"
            ])
        );
    }

    // A POST without Host starts nothing.
    let r = raw(
        addr,
        "POST /api/workflows/env/hello/run HTTP/1.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
    );
    assert_eq!(r.status, 400, "{}", r.body);
    let list = request(addr, "GET", "/api/executions", None);
    assert_eq!(
        list.json()["body"]["executions"],
        json!([]),
        "{}",
        list.body
    );

    // Two Host lines.
    let r = raw(
        addr,
        &format!(
            "GET /api/workflows HTTP/1.1\r\nHost: {addr}\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        ),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json()["detail"],
        "an HTTP/1.1 request must have one Host header, and this one has 2"
    );

    // HTTP/1.0 without Host, and HTTP/1.1 with it, are answered.
    let r = raw(addr, "GET /api/workflows HTTP/1.0\r\n\r\n");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["body"]["workflows"][0]["name"], "hello");
    let r = request(addr, "GET", "/api/workflows", None);
    assert_eq!(r.status, 200, "{}", r.body);

    // The OpenAPI document says so for every operation.
    let doc = request(addr, "GET", "/openapi.json", None).json();
    let mut operations = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            operations += 1;
            let bad = &op["responses"]["400"];
            let text = bad["description"]
                .as_str()
                .unwrap_or_else(|| panic!("{method} {path}: {op}"));
            assert!(
                text.contains("an HTTP/1.1 request without a `Host` header, or with more than one")
                    || text.starts_with("An HTTP/1.1 request without a `Host` header"),
                "{method} {path}: {text}"
            );
            assert_eq!(
                bad["content"]["application/problem+json"]["schema"]["$ref"],
                "#/components/schemas/ProblemDoc",
                "{method} {path}: {bad}"
            );
        }
    }
    assert!(operations >= 12, "{operations}");
}

/// Breaker: a JSON body repeating a key (`{"inputs":{"a":1},"inputs":{"b":2}}`, or a key
/// inside `inputs`) was read last-wins without a word. It is refused with 400, as a body
/// that is not JSON is, naming the key and where it is (a JSON Pointer); nothing starts.
#[test]
fn http_a_body_repeating_a_key_is_400_naming_the_key_and_its_path() {
    let sb = http_serve::sandbox_with(&[("hello", HELLO)]);
    let s = http_serve::start(&sb, &[]);
    let addr = s.addr();
    let run = "/api/workflows/env/hello/run";
    for (body, key, at) in [
        (
            r#"{"inputs":{"who":"a"},"inputs":{"who":"b"}}"#,
            "inputs",
            "/inputs",
        ),
        (r#"{"inputs":{"who":"a","who":"b"}}"#, "who", "/inputs/who"),
        (
            r#"{"inputs":{"who":"a","list":[1,{"x":1,"y":{},"x":2}]}}"#,
            "x",
            "/inputs/list/1/x",
        ),
        (
            r#"{"inputs":{"a/b~c":1,"a/b~c":2}}"#,
            "a/b~c",
            "/inputs/a~1b~0c",
        ),
    ] {
        let r = request(addr, "POST", run, Some(body));
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        let doc = r.json();
        assert_eq!(doc["code"], "USER.INPUT.VALIDATION_FAILED", "{doc}");
        assert_eq!(
            doc["detail"],
            format!(
                "the request body repeats the key {key:?} (at {at}): each key of a JSON object must appear once"
            ),
            "{body}"
        );
        assert_eq!(
            doc["hints"],
            json!([
                "send each key once: {\"inputs\": {\"a\": 1, \"b\": 2}}, not {\"inputs\": {\"a\": 1}, \"inputs\": {\"b\": 2}}"
            ])
        );
    }
    let list = request(addr, "GET", "/api/executions", None);
    assert_eq!(
        list.json()["body"]["executions"],
        json!([]),
        "{}",
        list.body
    );

    // Resume and respond bodies too.
    for path in [
        "/api/executions/nope/resume",
        "/api/executions/nope/respond",
    ] {
        let r = request(
            addr,
            "POST",
            path,
            Some(r#"{"from_step":"a","from_step":"b"}"#),
        );
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        assert_eq!(
            r.json()["detail"],
            "the request body repeats the key \"from_step\" (at /from_step): each key of a JSON object must appear once"
        );
    }

    // The same keys in different objects are fine.
    let r = request(
        addr,
        "POST",
        run,
        Some(r#"{"inputs":{"who":"x","l":[{"a":1},{"a":2}],"o":{"who":1}}}"#),
    );
    assert_eq!(r.status, 422, "undeclared inputs: {}", r.body);
    let r = request(addr, "POST", run, Some(r#"{"inputs":{"who":"x"}}"#));
    assert_eq!(r.status, 202, "{}", r.body);
}

/// Breaker: `GET /api/history` right after the `POST` that started a run could miss it (its
/// history row was written a few milliseconds later). A run the POST answered is on record.
#[test]
fn http_a_started_run_is_in_the_history_at_once() {
    let sb = http_serve::sandbox_with(&[("hello", HELLO)]);
    let s = http_serve::start(&sb, &[]);
    let addr = s.addr();
    let mut ids = Vec::new();
    for i in 0..20 {
        let r = request(
            addr,
            "POST",
            "/api/workflows/env/hello/run",
            Some(r#"{"inputs":{}}"#),
        );
        assert_eq!(r.status, 202, "{}", r.body);
        let id = r.json()["body"]["execution_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let h = request(addr, "GET", "/api/history?limit=1000", None);
        assert_eq!(h.status, 200, "{}", h.body);
        let listed: Vec<String> = h.json()["body"]["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_owned())
            .collect();
        assert!(
            listed.contains(&id),
            "run {i} ({id}) is not in the history right after its POST: {listed:?}"
        );
        ids.push(id);
    }
    assert_eq!(ids.len(), 20);
}
