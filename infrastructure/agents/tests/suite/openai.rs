//! openai_compatible against a tiny in-test HTTP server.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::io::BufReader;
use std::io::Read;
use std::io::Write;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use awf_agents::registry;
use awf_domain::error::AwfError;
use awf_domain::error::ErrorCode;
use awf_domain::ports::AgentProvider;
use awf_domain::ports::agent::AgentCallback;
use awf_domain::ports::agent::AgentChunk;
use awf_domain::ports::agent::AgentRequest;
use awf_domain::ports::agent::AgentResponse;
use awf_domain::ports::agent::AgentSession;
use awf_domain::ports::agent::Role;
use awf_domain::ports::agent::Turn;
use awf_domain::ports::fakes::FakeExecutor;
use awf_domain::run::TokenUsage;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// One recorded request: header lines (lower-cased names) and the body.
#[derive(Debug, Clone)]
struct Seen {
    head: Vec<String>,
    body: Value,
}

enum Reply {
    Http(String),
    Hang,
}

fn http(status: &str, content_type: &str, extra: &str, body: &str) -> Reply {
    Reply::Http(format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n{body}",
        body.len()
    ))
}

fn serve(replies: Vec<Reply>) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1/", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for reply in replies {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = Vec::new();
            let mut len = 0;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let line = line.trim_end().to_owned();
                if line.is_empty() {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
                head.push(line);
            }
            let mut body = vec![0; len];
            reader.read_exact(&mut body).unwrap();
            log.lock().unwrap().push(Seen {
                head,
                body: serde_json::from_slice(&body).unwrap(),
            });
            let mut stream = stream;
            match reply {
                Reply::Http(text) => {
                    stream.write_all(text.as_bytes()).unwrap();
                    stream.flush().unwrap();
                }
                Reply::Hang => std::thread::sleep(Duration::from_secs(30)),
            }
        }
    });
    (url, seen)
}

fn provider(env: &[(&str, &str)]) -> Arc<dyn AgentProvider> {
    let env: BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect();
    registry(Arc::new(FakeExecutor::new()), env)
        .get("openai_compatible")
        .unwrap()
}

fn req(url: &str, prompt: &str) -> AgentRequest {
    let mut r = AgentRequest {
        prompt: prompt.into(),
        ..AgentRequest::default()
    };
    r.options.insert("base_url".into(), json!(url));
    r.options.insert("model".into(), json!("mock-model"));
    r
}

async fn exec(
    p: &Arc<dyn AgentProvider>,
    r: AgentRequest,
) -> (Result<AgentResponse, AwfError>, Vec<AgentChunk>) {
    let chunks = Arc::new(Mutex::new(Vec::new()));
    let sink = chunks.clone();
    let cb: AgentCallback = Arc::new(move |c| sink.lock().unwrap().push(c));
    let res = p.execute(r, Some(cb), CancellationToken::new()).await;
    let got = chunks.lock().unwrap().clone();
    (res, got)
}

const SSE: &str = "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hello \"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"from mock\"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":7,\"total_tokens\":18}}\n\n\
data: [DONE]\n\n";

#[tokio::test]
async fn streams_sse_and_sends_the_documented_body() {
    let (url, seen) = serve(vec![http("200 OK", "text/event-stream", "", SSE)]);
    let p = provider(&[("OPENAI_API_KEY", "sk-test")]);
    let mut r = req(&url, "say hi");
    r.system_prompt = Some("be brief".into());
    r.options.insert("temperature".into(), json!("0.5"));
    r.options.insert("max_tokens".into(), json!(100));
    r.options.insert("top_p".into(), json!(1));
    let (res, chunks) = exec(&p, r).await;
    let res = res.unwrap();
    assert_eq!(
        chunks,
        [
            AgentChunk::Message("hello ".into()),
            AgentChunk::Message("from mock".into())
        ]
    );
    assert_eq!(res.output, "hello from mock");
    assert_eq!(
        res.tokens,
        TokenUsage {
            input: 11,
            output: 7,
            total: 18,
            estimated: false
        }
    );
    assert_eq!(res.session, None);
    assert_eq!(res.raw, SSE);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen[0].body,
        json!({
            "model": "mock-model",
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "say hi"}],
            "stream": true,
            "stream_options": {"include_usage": true},
            "temperature": 0.5,
            "max_tokens": 100,
            "top_p": 1.0
        })
    );
    assert!(
        seen[0].head[0].starts_with("POST /v1/chat/completions "),
        "{:?}",
        seen[0].head
    );
    assert!(
        seen[0]
            .head
            .iter()
            .any(|h| h.eq_ignore_ascii_case("authorization: Bearer sk-test"))
    );
}

#[tokio::test]
async fn plain_json_body_and_env_fallbacks() {
    let body = r#"{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"{\"a\":1}"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}"#;
    let (url, seen) = serve(vec![http("200 OK", "application/json", "", body)]);
    let p = provider(&[
        ("OPENAI_BASE_URL", url.as_str()),
        ("OPENAI_MODEL", "env-model"),
    ]);
    let mut r = AgentRequest {
        prompt: "json please".into(),
        ..AgentRequest::default()
    };
    r.options.insert("output_format".into(), json!("json"));
    let (res, chunks) = exec(&p, r).await;
    let res = res.unwrap();
    assert_eq!(res.output, "{\"a\":1}");
    assert_eq!(res.response, Some(json!({"a": 1})));
    assert_eq!(chunks, [AgentChunk::Message("{\"a\":1}".into())]);
    assert_eq!(
        res.tokens,
        TokenUsage {
            input: 5,
            output: 3,
            total: 8,
            estimated: false
        }
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen[0].body["model"], "env-model");
    assert!(
        !seen[0]
            .head
            .iter()
            .any(|h| h.to_ascii_lowercase().starts_with("authorization:"))
    );
}

#[tokio::test]
async fn session_sends_full_history_and_appends_turns() {
    let (url, seen) = serve(vec![http("200 OK", "text/event-stream", "", SSE)]);
    let p = provider(&[]);
    let mut r = req(&url, "what word?");
    r.system_prompt = Some("SYS".into());
    r.session = Some(AgentSession {
        session_id: None,
        turns: vec![
            Turn {
                role: Role::System,
                content: "SYS".into(),
            },
            Turn {
                role: Role::User,
                content: "remember ZEBRA".into(),
            },
            Turn {
                role: Role::Assistant,
                content: "ok".into(),
            },
        ],
    });
    let (res, _) = exec(&p, r).await;
    let s = res.unwrap().session.unwrap();
    assert_eq!(s.session_id, None);
    assert_eq!(s.turns.len(), 5);
    assert_eq!(
        s.turns[4],
        Turn {
            role: Role::Assistant,
            content: "hello from mock".into()
        }
    );
    assert_eq!(
        seen.lock().unwrap()[0].body["messages"],
        json!([
            {"role": "system", "content": "SYS"},
            {"role": "user", "content": "remember ZEBRA"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "what word?"}
        ])
    );
}

#[tokio::test]
async fn http_errors_map_to_codes() {
    let err = r#"{"error":{"message":"nope","type":"x"}}"#;
    let cases = [
        (
            http("401 Unauthorized", "application/json", "", err),
            ErrorCode::ExecutionAgentAuthFailed,
            "openai_compatible: authentication failed (HTTP 401): nope",
        ),
        (
            http(
                "429 Too Many Requests",
                "application/json",
                "Retry-After: 7\r\n",
                err,
            ),
            ErrorCode::ExecutionAgentRateLimited,
            "openai_compatible: rate limited, retry after 7 (HTTP 429): nope",
        ),
        (
            http("503 Service Unavailable", "text/plain", "", "overloaded"),
            ErrorCode::ExecutionAgentServerError,
            "openai_compatible: server error (HTTP 503): overloaded",
        ),
        (
            http("404 Not Found", "application/json", "", err),
            ErrorCode::ExecutionAgentBadRequest,
            "openai_compatible: bad request (HTTP 404): nope",
        ),
    ];
    for (reply, code, msg) in cases {
        let (url, _) = serve(vec![reply]);
        let (res, _) = exec(&provider(&[]), req(&url, "x")).await;
        let e = res.unwrap_err();
        assert_eq!((e.code(), e.message()), (code, msg));
    }
}

#[tokio::test]
async fn tool_calls_are_refused() {
    let sse = "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"bash\",\"arguments\":\"{}\"}}]},\"finish_reason\":null}]}\n\n";
    let (url, _) = serve(vec![http("200 OK", "text/event-stream", "", sse)]);
    let (res, _) = exec(&provider(&[]), req(&url, "x")).await;
    let e = res.unwrap_err();
    assert_eq!(e.code(), ErrorCode::ExecutionAgentFailed);
    assert_eq!(
        e.message(),
        "openai_compatible: the model asked for tool calls, but the step offers no tools"
    );
}

#[tokio::test]
async fn connection_refused_names_the_url() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/v1");
    let (res, _) = exec(&provider(&[]), req(&url, "x")).await;
    let e = res.unwrap_err();
    assert_eq!(e.code(), ErrorCode::ExecutionAgentFailed);
    assert!(
        e.message().starts_with(&format!(
            "openai_compatible: cannot connect to http://127.0.0.1:{port}/v1/chat/completions: "
        )),
        "{}",
        e.message()
    );
}

#[tokio::test]
async fn timeout_and_cancel() {
    let (url, _) = serve(vec![Reply::Hang]);
    let mut r = req(&url, "x");
    r.timeout = Some(Duration::from_millis(300));
    let (res, _) = exec(&provider(&[]), r).await;
    assert_eq!(res.unwrap_err().code(), ErrorCode::ExecutionAgentTimeout);

    let (url, _) = serve(vec![Reply::Hang]);
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        c2.cancel();
    });
    let e = provider(&[])
        .execute(req(&url, "x"), None, cancel)
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ExecutionRunCancelled);
}

#[tokio::test]
async fn options_are_validated() {
    let p = provider(&[]);
    let r = AgentRequest {
        prompt: "x".into(),
        ..AgentRequest::default()
    };
    let e = p
        .execute(r, None, CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::UserAgentInvalidOption);
    assert_eq!(
        e.message(),
        "openai_compatible option `base_url` is invalid: missing"
    );
    for (k, v, msg) in [
        (
            "temperature",
            json!(3),
            "openai_compatible option `temperature` is invalid: expected a number from 0 to 2, got 3",
        ),
        (
            "top_p",
            json!("x"),
            "openai_compatible option `top_p` is invalid: expected a number, got \"x\"",
        ),
        (
            "max_completion_tokens",
            json!(-5),
            "openai_compatible option `max_completion_tokens` is invalid: expected a non-negative integer, got -5",
        ),
    ] {
        let mut r = req("http://127.0.0.1:9/v1", "x");
        r.options.insert(k.into(), v);
        let e = p
            .execute(r, None, CancellationToken::new())
            .await
            .unwrap_err();
        assert_eq!(
            (e.code(), e.message()),
            (ErrorCode::UserAgentInvalidOption, msg)
        );
    }
}
