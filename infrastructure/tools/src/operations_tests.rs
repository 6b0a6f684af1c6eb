#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::BufRead;
use std::io::BufReader;
use std::io::Read;
use std::io::Write;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::Mutex;

use super::*;

/// What the server saw of one request.
#[derive(Debug, Clone, Default)]
struct Seen {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: String,
}

/// A tiny HTTP/1.1 server on 127.0.0.1 (one thread, one request per connection). `/status/N`
/// answers N; `/big/N` answers N bytes of `x`; `/slow` never answers; `/echo` answers the
/// request's headers and body; anything else 200 `hello`.
struct Server {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

fn server() -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                let mut r = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                let mut parts = line.split_whitespace();
                let method = parts.next().unwrap_or_default().to_owned();
                let path = parts.next().unwrap_or_default().to_owned();
                let mut headers = Vec::new();
                let mut len = 0usize;
                loop {
                    let mut h = String::new();
                    r.read_line(&mut h).unwrap();
                    let h = h.trim_end();
                    if h.is_empty() {
                        break;
                    }
                    if let Some((k, v)) = h.split_once(':') {
                        if k.eq_ignore_ascii_case("content-length") {
                            len = v.trim().parse().unwrap();
                        }
                        headers.push((k.to_ascii_lowercase(), v.trim().to_owned()));
                    }
                }
                let mut body = vec![0; len];
                r.read_exact(&mut body).unwrap();
                let body = String::from_utf8_lossy(&body).into_owned();
                log.lock().unwrap().push(Seen {
                    method: method.clone(),
                    path: path.clone(),
                    headers: headers.clone(),
                    body: body.clone(),
                });
                let (status, text) = if let Some(n) = path.strip_prefix("/status/") {
                    (n.parse::<u16>().unwrap(), format!("status {n}"))
                } else if let Some(n) = path.strip_prefix("/big/") {
                    (200, "x".repeat(n.parse().unwrap()))
                } else if path == "/slow" {
                    std::thread::sleep(std::time::Duration::from_secs(60));
                    (200, String::new())
                } else if path == "/echo" {
                    let hs: Vec<String> = headers.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    (200, format!("{method} {}\n{body}", hs.join(";")))
                } else {
                    (200, "hello".to_owned())
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nX-Multi: a\r\nX-Multi: b\r\ncontent-type: text/plain\r\nConnection: close\r\n\r\n{text}",
                    text.len()
                );
            });
        }
    });
    Server { base, seen }
}

fn inputs(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

async fn exec(
    ops: &BuiltinOperations,
    v: Value,
    timeout: Option<Duration>,
) -> Result<OperationResult, AwfError> {
    ops.execute(HTTP_REQUEST, inputs(v), timeout, CancellationToken::new())
        .await
}

#[tokio::test]
async fn get_post_put_delete_reach_the_server_with_headers_and_body() {
    let s = server();
    let ops = BuiltinOperations::new();
    for method in ["get", "POST", "Put", "DELETE"] {
        let r = exec(
            &ops,
            json!({"method": method, "url": format!("{}/echo", s.base),
                   "headers": {"Content-Type": "application/json", "X-Count": 5},
                   "body": if method == "get" { "" } else { "{\"a\":1}" }}),
            None,
        )
        .await
        .unwrap();
        assert!(r.success, "{r:?}");
        let keys: Vec<&str> = r.outputs.keys().map(String::as_str).collect();
        assert_eq!(keys, ["status_code", "body", "headers", "body_truncated"]);
        assert_eq!(r.outputs["status_code"], 200);
        assert_eq!(r.outputs["body_truncated"], false);
        assert_eq!(r.outputs["headers"]["Content-Type"], "text/plain");
        assert_eq!(r.outputs["headers"]["X-Multi"], "a, b");
    }
    let seen = s.seen.lock().unwrap().clone();
    let methods: Vec<&str> = seen.iter().map(|x| x.method.as_str()).collect();
    assert_eq!(methods, ["GET", "POST", "PUT", "DELETE"]);
    assert_eq!(seen[1].body, "{\"a\":1}");
    assert!(
        seen[1].headers.contains(&("x-count".into(), "5".into())),
        "{seen:?}"
    );
    assert!(
        seen[1]
            .headers
            .contains(&("content-type".into(), "application/json".into()))
    );
    assert_eq!(seen[0].path, "/echo");
}

#[tokio::test]
async fn a_500_is_a_success_unless_its_status_is_retryable() {
    let s = server();
    let ops = BuiltinOperations::new();
    let url = format!("{}/status/500", s.base);
    let r = exec(&ops, json!({"method": "GET", "url": url}), None)
        .await
        .unwrap();
    assert!(r.success, "{r:?}");
    assert_eq!(r.outputs["status_code"], 500);
    let r = exec(
        &ops,
        json!({"method": "GET", "url": url, "retryable_status_codes": [502, 500]}),
        None,
    )
    .await
    .unwrap();
    assert!(!r.success);
    assert_eq!(r.outputs["status_code"], 500);
    assert_eq!(
        r.error.as_deref(),
        Some("http.request: retryable status code 500")
    );
}

#[tokio::test]
async fn a_body_over_the_cap_is_cut_and_flagged() {
    let s = server();
    let ops = BuiltinOperations::new().with_max_body_bytes(1000);
    let r = exec(
        &ops,
        json!({"method": "GET", "url": format!("{}/big/5000", s.base)}),
        None,
    )
    .await
    .unwrap();
    assert_eq!(r.outputs["body"].as_str().unwrap().len(), 1000);
    assert_eq!(r.outputs["body_truncated"], true);
    let r = exec(
        &ops,
        json!({"method": "GET", "url": format!("{}/big/1000", s.base)}),
        None,
    )
    .await
    .unwrap();
    assert_eq!(r.outputs["body_truncated"], false);
    // A character cut in two is dropped, not turned into U+FFFD.
    let (t, cut) = body_text("aé".as_bytes().to_vec(), 2);
    assert_eq!((t.as_str(), cut), ("a", true));
}

#[tokio::test]
async fn the_shorter_of_the_input_timeout_and_the_callers_wins() {
    let s = server();
    let ops = BuiltinOperations::new();
    let url = format!("{}/slow", s.base);
    let e = exec(
        &ops,
        json!({"method": "GET", "url": url, "timeout": "300ms"}),
        None,
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ExecutionOperationTimeout);
    assert!(
        e.message().contains("timed out after 300ms"),
        "{}",
        e.message()
    );
    let e = exec(
        &ops,
        json!({"method": "GET", "url": url, "timeout": 30}),
        Some(Duration::from_millis(200)),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ExecutionOperationTimeout);
    assert!(e.message().contains("200ms"), "{}", e.message());
}

#[tokio::test]
async fn cancel_stops_the_request() {
    let s = server();
    let ops = BuiltinOperations::new();
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        c.cancel();
    });
    let e = ops
        .execute(
            HTTP_REQUEST,
            inputs(json!({"method": "GET", "url": format!("{}/slow", s.base)})),
            None,
            cancel,
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ExecutionRunCancelled);
}

#[tokio::test]
async fn credentials_echoed_back_are_masked() {
    let s = server();
    let ops = BuiltinOperations::new();
    let r = exec(
        &ops,
        json!({"method": "POST", "url": format!("{}/echo", s.base),
               "headers": {"Authorization": "Bearer s3cr3t-t0ken", "X-Api-Key": "k3y-value"},
               "body": "token s3cr3t-t0ken and k3y-value"}),
        None,
    )
    .await
    .unwrap();
    let body = r.outputs["body"].as_str().unwrap();
    assert!(
        !body.contains("s3cr3t-t0ken") && !body.contains("k3y-value"),
        "{body}"
    );
    assert!(body.contains("***"), "{body}");
    // The server did get them.
    let seen = s.seen.lock().unwrap().clone();
    assert!(
        seen[0]
            .headers
            .contains(&("authorization".into(), "Bearer s3cr3t-t0ken".into()))
    );
}

#[tokio::test]
async fn bad_inputs_and_unknown_ids_are_clear_errors() {
    let ops = BuiltinOperations::new();
    for (v, input) in [
        (json!({"method": "GET"}), "url"),
        (json!({"method": "GET", "url": "ftp://x"}), "url"),
        (json!({"url": "http://127.0.0.1:1/"}), "method"),
        (
            json!({"method": "PATCHY", "url": "http://127.0.0.1:1/"}),
            "method",
        ),
        (
            json!({"method": "GET", "url": "http://127.0.0.1:1/", "headers": ["a"]}),
            "headers",
        ),
        (
            json!({"method": "GET", "url": "http://127.0.0.1:1/", "timeout": -1}),
            "timeout",
        ),
        (
            json!({"method": "GET", "url": "http://127.0.0.1:1/", "retryable_status_codes": [42]}),
            "retryable_status_codes",
        ),
    ] {
        let e = exec(&ops, v.clone(), None).await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserInputValidationFailed, "{v}");
        assert!(
            e.message().contains(&format!("`{input}`")),
            "{v}: {}",
            e.message()
        );
        assert!(!e.hints().is_empty());
    }
    let e = ops
        .execute("http.reqest", Map::new(), None, CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ExecutionOperationNotFound);
    // Nothing listens on port 1: a failure that says so.
    let e = exec(
        &ops,
        json!({"method": "GET", "url": "http://127.0.0.1:1/"}),
        None,
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ExecutionOperationFailed, "{e}");
}

#[test]
fn the_list_matches_the_domain_ids_and_headers_are_canonical() {
    let ids: Vec<String> = BuiltinOperations::new()
        .list()
        .iter()
        .map(OperationSpec::id)
        .collect();
    assert_eq!(ids, awf_domain::ports::operations::BUILTIN_OPERATIONS);
    assert_eq!(canonical("content-type"), "Content-Type");
    assert_eq!(canonical("x-request-id"), "X-Request-Id");
}
