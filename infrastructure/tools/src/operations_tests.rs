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
/// request's headers and body; `/redirect/N?<target>` answers N with `Location: <target>`;
/// `/loop` redirects to itself; anything else 200 `hello`.
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
                let mut extra = String::new();
                let (status, text) = if let Some(rest) = path.strip_prefix("/redirect/") {
                    let (n, target) = rest.split_once('?').unwrap();
                    extra = format!("Location: {target}\r\n");
                    (n.parse::<u16>().unwrap(), String::new())
                } else if path == "/loop" {
                    extra = "Location: /loop\r\n".to_owned();
                    (302, String::new())
                } else if let Some(n) = path.strip_prefix("/status/") {
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
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\n{extra}X-Multi: a\r\nX-Multi: b\r\ncontent-type: text/plain\r\nConnection: close\r\n\r\n{text}",
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
        (
            json!({"method": "GET", "url": "http://127.0.0.1:1/", "follow_redirects": "sometimes"}),
            "follow_redirects",
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

/// The values of header `name` (lower case) the server saw in request `i`.
fn seen_header(s: &Server, i: usize, name: &str) -> Vec<String> {
    s.seen.lock().unwrap()[i]
        .headers
        .iter()
        .filter(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .collect()
}

#[tokio::test]
async fn userinfo_is_sent_as_basic_auth_and_masked_in_every_form() {
    let s = server();
    let ops = BuiltinOperations::new();
    let url = s.base.replace("http://", "http://alice:p%40ss-w0rd@") + "/echo";
    let r = exec(&ops, json!({"method": "GET", "url": url}), None)
        .await
        .unwrap();
    // base64("alice:p@ss-w0rd")
    let b64 = "YWxpY2U6cEBzcy13MHJk";
    assert_eq!(
        seen_header(&s, 0, "authorization"),
        [format!("Basic {b64}")]
    );
    let body = r.outputs["body"].as_str().unwrap();
    assert!(body.contains("authorization=***"), "{body}");
    for leak in [b64, "p@ss-w0rd", "p%40ss-w0rd"] {
        assert!(!body.contains(leak), "{leak} in {body}");
    }
    // Errors too: nothing listens on port 1.
    let e = exec(
        &ops,
        json!({"method": "GET", "url": "http://bob:hunter22@127.0.0.1:1/x"}),
        None,
    )
    .await
    .unwrap_err();
    assert!(!format!("{e:?}").contains("hunter22"), "{e:?}");
}

#[tokio::test]
async fn an_explicit_authorization_header_wins_over_userinfo() {
    let s = server();
    let ops = BuiltinOperations::new();
    let url = s.base.replace("http://", "http://alice:s3cret-pw@") + "/echo";
    let r = exec(
        &ops,
        json!({"method": "GET", "url": url, "headers": {"authorization": "Bearer t0ken-abc"}}),
        None,
    )
    .await
    .unwrap();
    assert_eq!(seen_header(&s, 0, "authorization"), ["Bearer t0ken-abc"]);
    let body = r.outputs["body"].as_str().unwrap();
    assert!(
        !body.contains("t0ken-abc") && !body.contains("s3cret-pw"),
        "{body}"
    );
}

#[tokio::test]
async fn a_cross_origin_redirect_drops_every_credential_header_and_no_referer_is_sent() {
    let a = server();
    let b = server();
    let ops = BuiltinOperations::new();
    let r = exec(
        &ops,
        json!({"method": "GET", "url": format!("{}/redirect/302?{}/echo", a.base, b.base),
               "headers": {"Authorization": "Bearer t0ken-abc", "X-Api-Key": "k3y-value",
                           "Cookie": "sid=c00kie", "X-Custom-Token": "cust0m-tok",
                           "X-Session-Secret": "s3ss10n", "Accept": "text/plain"}}),
        None,
    )
    .await
    .unwrap();
    assert_eq!(r.outputs["status_code"], 200);
    // The first server got them all.
    assert_eq!(seen_header(&a, 0, "x-api-key"), ["k3y-value"]);
    let seen = b.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let names: Vec<&str> = seen[0].headers.iter().map(|(k, _)| k.as_str()).collect();
    for gone in [
        "authorization",
        "x-api-key",
        "cookie",
        "x-custom-token",
        "x-session-secret",
        "referer",
    ] {
        assert!(!names.contains(&gone), "{gone} reached {names:?}");
    }
    assert!(names.contains(&"accept"), "{names:?}");
    // A Basic header made from userinfo goes too.
    let url = a.base.replace("http://", "http://alice:s3cret-pw@")
        + &format!("/redirect/307?{}/echo", b.base);
    exec(&ops, json!({"method": "GET", "url": url}), None)
        .await
        .unwrap();
    assert!(seen_header(&b, 1, "authorization").is_empty());
}

#[tokio::test]
async fn a_same_origin_redirect_keeps_credentials_and_the_method_rules_are_gos() {
    let s = server();
    let ops = BuiltinOperations::new();
    // 307 repeats the method and body, credentials kept (same origin, relative Location).
    exec(
        &ops,
        json!({"method": "POST", "url": format!("{}/redirect/307?/echo", s.base),
               "headers": {"Authorization": "Bearer t0ken-abc"}, "body": "payload"}),
        None,
    )
    .await
    .unwrap();
    // 303 turns a POST into a GET without a body.
    exec(
        &ops,
        json!({"method": "PUT", "url": format!("{}/redirect/303?/echo", s.base),
               "headers": {"Content-Type": "application/json"}, "body": "{}"}),
        None,
    )
    .await
    .unwrap();
    let seen = s.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert_eq!(
        (seen[1].method.as_str(), seen[1].path.as_str()),
        ("POST", "/echo")
    );
    assert_eq!(seen[1].body, "payload");
    assert!(
        seen[1]
            .headers
            .contains(&("authorization".into(), "Bearer t0ken-abc".into()))
    );
    assert!(
        seen[1].headers.iter().all(|(k, _)| k != "referer"),
        "{seen:?}"
    );
    assert_eq!(
        (seen[3].method.as_str(), seen[3].body.as_str()),
        ("GET", "")
    );
    assert!(
        seen[3].headers.iter().all(|(k, _)| k != "content-type"),
        "{seen:?}"
    );
}

#[tokio::test]
async fn follow_redirects_false_answers_with_the_3xx_and_a_loop_stops_after_ten() {
    let s = server();
    let ops = BuiltinOperations::new();
    let r = exec(
        &ops,
        json!({"method": "GET", "url": format!("{}/redirect/301?/echo", s.base),
               "follow_redirects": false}),
        None,
    )
    .await
    .unwrap();
    assert!(r.success);
    assert_eq!(r.outputs["status_code"], 301);
    assert_eq!(r.outputs["headers"]["Location"], "/echo");
    assert_eq!(s.seen.lock().unwrap().len(), 1);
    // A template gives text: "false" works too.
    let r = exec(
        &ops,
        json!({"method": "GET", "url": format!("{}/loop", s.base), "follow_redirects": "false"}),
        None,
    )
    .await
    .unwrap();
    assert_eq!(r.outputs["status_code"], 302);
    let e = exec(
        &ops,
        json!({"method": "GET", "url": format!("{}/loop", s.base)}),
        None,
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ExecutionOperationFailed);
    assert!(e.message().contains("stopped after 10 redirects"), "{e}");
    assert_eq!(s.seen.lock().unwrap().len(), 2 + 11);
}

#[tokio::test]
async fn an_unknown_input_is_refused_with_a_did_you_mean() {
    let ops = BuiltinOperations::new();
    let e = exec(
        &ops,
        json!({"method": "GET", "url": "http://127.0.0.1:1/", "header": {"A": "b"}}),
        None,
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
    assert!(e.message().contains("`header`"), "{e}");
    assert!(
        e.hints()
            .iter()
            .any(|h| h.contains("did you mean `headers`")),
        "{:?}",
        e.hints()
    );
}

#[test]
fn the_schema_lists_exactly_the_domain_inputs() {
    let schema = http_request_schema();
    let props: Vec<&str> = schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(props, HTTP_REQUEST_INPUTS);
}
