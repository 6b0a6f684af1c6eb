//! `openai_compatible`: any OpenAI Chat Completions server over HTTP.
//!
//! `POST {base_url}/chat/completions` with `stream: true` and
//! `stream_options.include_usage`; the answer streams as SSE `data:` events (a plain JSON body
//! is accepted too). Options: `base_url` (else `$OPENAI_BASE_URL`) and `model` (else
//! `$OPENAI_MODEL`) required, `api_key` (else `$OPENAI_API_KEY`, sent as a bearer token),
//! `temperature` (0–2), `max_completion_tokens` or `max_tokens` (≥ 0), `top_p` (0–1).
//! Messages: `[system?, …session turns…, user]`. Tool calls are not supported yet.
//!
//! Source: spec/workflow.md §5.2 "openai_compatible"; errors as in the brief of this crate.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::OnceLock;

use awf_domain::error::AwfError;
use awf_domain::error::ErrorCode;
use awf_domain::ports::AgentProvider;
use awf_domain::ports::agent::AgentCallback;
use awf_domain::ports::agent::AgentChunk;
use awf_domain::ports::agent::AgentRequest;
use awf_domain::ports::agent::AgentResponse;
use awf_domain::ports::agent::Role;
use futures::StreamExt;
use serde_json::Map;
use serde_json::Value;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::cli::history;
use crate::cli::next_session;
use crate::cli::system_prompt;
use crate::cli::tokens;
use crate::options::Opts;
use crate::parse::Usage;
use crate::parse::json_object;

const NAME: &str = "openai_compatible";

/// Largest response body read (bytes); more is an error.
pub const MAX_BODY_BYTES: usize = 10 * 1024 * 1024;

/// The `openai_compatible` provider.
pub struct OpenAiCompatible {
    env: Arc<BTreeMap<String, String>>,
    client: OnceLock<Result<reqwest::Client, String>>,
}

impl OpenAiCompatible {
    /// A provider reading `OPENAI_*` fallbacks from `env` (the process environment).
    pub fn new(env: Arc<BTreeMap<String, String>>) -> Self {
        Self {
            env,
            client: OnceLock::new(),
        }
    }

    fn client(&self) -> Result<&reqwest::Client, AwfError> {
        self.client
            .get_or_init(|| {
                reqwest::Client::builder()
                    .build()
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| fail(format!("cannot create the HTTP client: {e}")))
    }
}

/// What one call sends where.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Call {
    pub url: String,
    pub api_key: Option<String>,
    pub body: Value,
}

fn fail(msg: impl Into<String>) -> AwfError {
    AwfError::new(
        ErrorCode::ExecutionAgentFailed,
        format!("{NAME}: {}", msg.into()),
    )
    .with_detail("provider", NAME)
}

fn role_name(r: Role) -> &'static str {
    match r {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

/// Validates the options and builds the request.
pub(crate) fn build_call(
    request: &AgentRequest,
    env: &BTreeMap<String, String>,
) -> Result<Call, AwfError> {
    let o = Opts::new(NAME, &request.options);
    let from_env = |k: &str| env.get(k).filter(|v| !v.trim().is_empty()).cloned();
    let base_url = o
        .string("base_url")?
        .or_else(|| from_env("OPENAI_BASE_URL"))
        .ok_or_else(|| {
            o.invalid("base_url", "missing").with_hint(
                "Set options.base_url (e.g. https://api.openai.com/v1) or OPENAI_BASE_URL.",
            )
        })?;
    if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
        return Err(o.invalid(
            "base_url",
            format!("expected an http:// or https:// URL, got {base_url:?}"),
        ));
    }
    let model = o
        .string("model")?
        .or_else(|| from_env("OPENAI_MODEL"))
        .ok_or_else(|| {
            o.invalid("model", "missing")
                .with_hint("Set options.model or OPENAI_MODEL.")
        })?;
    let api_key = o.string("api_key")?.or_else(|| from_env("OPENAI_API_KEY"));
    let temperature = o.number_in("temperature", 0.0, 2.0)?;
    let top_p = o.number_in("top_p", 0.0, 1.0)?;
    let max_completion = o.uint("max_completion_tokens")?;
    let max_tokens = o.uint("max_tokens")?;

    let mut messages = Vec::new();
    let turns = history(request);
    if !turns.iter().any(|t| t.role == Role::System)
        && let Some(sys) = system_prompt(request)
    {
        messages.push(json!({"role": "system", "content": sys}));
    }
    for t in &turns {
        messages.push(json!({"role": role_name(t.role), "content": t.content}));
    }
    messages.push(json!({"role": "user", "content": request.prompt}));

    let mut body = Map::new();
    body.insert("model".into(), Value::String(model));
    body.insert("messages".into(), Value::Array(messages));
    body.insert("stream".into(), Value::Bool(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    if let Some(t) = temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(n) = max_completion {
        body.insert("max_completion_tokens".into(), json!(n));
    } else if let Some(n) = max_tokens {
        body.insert("max_tokens".into(), json!(n));
    }
    if let Some(p) = top_p {
        body.insert("top_p".into(), json!(p));
    }
    Ok(Call {
        url: format!("{}/chat/completions", base_url.trim_end_matches('/')),
        api_key,
        body: Value::Object(body),
    })
}

/// The message of an error body: `error.message` of a JSON body, else its start.
fn error_text(body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        if let Some(m) = v.pointer("/error/message").and_then(Value::as_str) {
            return m.to_owned();
        }
        if let Some(m) = v.get("error").and_then(Value::as_str) {
            return m.to_owned();
        }
    }
    let t = body.trim();
    match t.char_indices().nth(500) {
        Some((i, _)) => format!("{}…", &t[..i]),
        None => t.to_owned(),
    }
}

/// The error for a non-success HTTP status.
pub(crate) fn status_error(status: u16, retry_after: Option<&str>, body: &str) -> AwfError {
    let detail = error_text(body);
    let suffix = if detail.is_empty() {
        String::new()
    } else {
        format!(": {detail}")
    };
    let (code, what) = match status {
        401 => (
            ErrorCode::ExecutionAgentAuthFailed,
            "authentication failed".to_owned(),
        ),
        429 => (
            ErrorCode::ExecutionAgentRateLimited,
            match retry_after {
                Some(r) => format!("rate limited, retry after {r}"),
                None => "rate limited".to_owned(),
            },
        ),
        s if s >= 500 => (
            ErrorCode::ExecutionAgentServerError,
            "server error".to_owned(),
        ),
        s if s >= 400 => (
            ErrorCode::ExecutionAgentBadRequest,
            "bad request".to_owned(),
        ),
        _ => (
            ErrorCode::ExecutionAgentFailed,
            "unexpected response".to_owned(),
        ),
    };
    AwfError::new(code, format!("{NAME}: {what} (HTTP {status}){suffix}"))
        .with_detail("provider", NAME)
        .with_detail("status", status)
}

fn send_error(e: &reqwest::Error, url: &str) -> AwfError {
    let mut chain = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        chain.push_str(": ");
        chain.push_str(&s.to_string());
        src = s.source();
    }
    if e.is_timeout() {
        return AwfError::new(
            ErrorCode::ExecutionAgentTimeout,
            format!("{NAME}: request to {url} timed out"),
        );
    }
    let what = if e.is_connect() {
        "cannot connect to"
    } else {
        "request failed for"
    };
    fail(format!("{what} {url}: {chain}")).with_detail("url", url)
}

/// What the answer stream said.
#[derive(Debug, Default)]
struct Answer {
    content: String,
    usage: Option<Usage>,
    saw_choice: bool,
}

fn usage_of(v: &Value) -> Option<Usage> {
    let u = v.get("usage").filter(|u| u.is_object())?;
    let n = |k: &str| u.get(k).and_then(Value::as_u64);
    Some(Usage {
        input: n("prompt_tokens").unwrap_or(0),
        output: n("completion_tokens").unwrap_or(0),
        total: n("total_tokens"),
    })
}

fn tool_calls_error() -> AwfError {
    fail("the model asked for tool calls, which this provider does not support yet")
        .with_hint("Remove `tools` from the server's defaults or use a CLI provider for tool use.")
}

impl Answer {
    /// Handles one SSE `data:` payload; `Ok(true)` at `[DONE]`.
    fn on_event(&mut self, data: &str, on_chunk: Option<&AgentCallback>) -> Result<bool, AwfError> {
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let v: Value =
            serde_json::from_str(data).map_err(|e| fail(format!("bad stream event: {e}")))?;
        if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            let msg = err
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| err.to_string(), str::to_owned);
            return Err(fail(format!("the server reported an error: {msg}")));
        }
        if let Some(u) = usage_of(&v) {
            self.usage = Some(u);
        }
        let Some(choice) = v
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            return Ok(false);
        };
        self.saw_choice = true;
        let delta = choice.get("delta").or_else(|| choice.get("message"));
        if let Some(d) = delta {
            if d.get("tool_calls")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty())
            {
                return Err(tool_calls_error());
            }
            for key in ["reasoning_content", "reasoning"] {
                if let Some(t) = d.get(key).and_then(Value::as_str).filter(|t| !t.is_empty())
                    && let Some(cb) = on_chunk
                {
                    cb(AgentChunk::Thought(t.to_owned()));
                }
            }
            if let Some(t) = d
                .get("content")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                self.content.push_str(t);
                if let Some(cb) = on_chunk {
                    cb(AgentChunk::Message(t.to_owned()));
                }
            }
        }
        if choice.get("finish_reason").and_then(Value::as_str) == Some("tool_calls") {
            return Err(tool_calls_error());
        }
        Ok(false)
    }
}

/// Feeds SSE bytes; dispatches each event's joined `data:` lines.
#[derive(Default)]
struct Sse {
    buf: Vec<u8>,
    data: String,
    has_data: bool,
    done: bool,
}

impl Sse {
    fn push(
        &mut self,
        bytes: &[u8],
        answer: &mut Answer,
        cb: Option<&AgentCallback>,
    ) -> Result<(), AwfError> {
        self.buf.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(pos) = self.buf[start..].iter().position(|&b| b == b'\n') {
            let end = start + pos;
            let line = String::from_utf8_lossy(&self.buf[start..end]).into_owned();
            start = end + 1;
            self.line(line.trim_end_matches('\r'), answer, cb)?;
            if self.done {
                break;
            }
        }
        self.buf.drain(..start);
        Ok(())
    }

    fn line(
        &mut self,
        line: &str,
        answer: &mut Answer,
        cb: Option<&AgentCallback>,
    ) -> Result<(), AwfError> {
        if line.is_empty() {
            return self.dispatch(answer, cb);
        }
        if let Some(rest) = line.strip_prefix("data:") {
            if self.has_data {
                self.data.push('\n');
            }
            self.data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
            self.has_data = true;
        }
        Ok(())
    }

    fn dispatch(
        &mut self,
        answer: &mut Answer,
        cb: Option<&AgentCallback>,
    ) -> Result<(), AwfError> {
        if self.has_data {
            let data = std::mem::take(&mut self.data);
            self.has_data = false;
            if answer.on_event(&data, cb)? {
                self.done = true;
            }
        }
        Ok(())
    }

    fn finish(&mut self, answer: &mut Answer, cb: Option<&AgentCallback>) -> Result<(), AwfError> {
        if !self.buf.is_empty() && !self.done {
            let line = String::from_utf8_lossy(&self.buf).into_owned();
            self.buf.clear();
            self.line(line.trim_end_matches('\r'), answer, cb)?;
        }
        if !self.done {
            self.dispatch(answer, cb)?;
        }
        Ok(())
    }
}

async fn call(
    client: &reqwest::Client,
    c: &Call,
    on_chunk: Option<&AgentCallback>,
) -> Result<(Answer, String), AwfError> {
    let mut rb = client.post(&c.url).json(&c.body);
    if let Some(k) = &c.api_key {
        rb = rb.bearer_auth(k);
    }
    let resp = rb.send().await.map_err(|e| send_error(&e, &c.url))?;
    let status = resp.status();
    let retry_after = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let is_sse = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.contains("text/event-stream"));

    let mut raw: Vec<u8> = Vec::new();
    let mut answer = Answer::default();
    let mut sse = Sse::default();
    let mut stream = resp.bytes_stream();
    while let Some(piece) = stream.next().await {
        let piece = piece.map_err(|e| send_error(&e, &c.url))?;
        if raw.len() + piece.len() > MAX_BODY_BYTES {
            return Err(fail(format!(
                "response body is larger than {MAX_BODY_BYTES} bytes"
            )));
        }
        raw.extend_from_slice(&piece);
        if status.is_success() && is_sse {
            sse.push(&piece, &mut answer, on_chunk)?;
            if sse.done {
                break;
            }
        }
    }
    let raw = String::from_utf8_lossy(&raw).into_owned();
    if !status.is_success() {
        return Err(status_error(status.as_u16(), retry_after.as_deref(), &raw));
    }
    if is_sse {
        sse.finish(&mut answer, on_chunk)?;
    } else {
        let v: Value = serde_json::from_str(&raw)
            .map_err(|e| fail(format!("response is neither SSE nor JSON: {e}")))?;
        if let Some(msg) = v.pointer("/choices/0/message")
            && msg
                .get("tool_calls")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty())
        {
            return Err(tool_calls_error());
        }
        answer.on_event(&raw, on_chunk)?;
    }
    if !answer.saw_choice {
        return Err(fail("the response has no choices"));
    }
    Ok((answer, raw))
}

#[async_trait::async_trait]
impl AgentProvider for OpenAiCompatible {
    fn name(&self) -> &str {
        NAME
    }

    fn options(&self) -> Option<&'static [&'static str]> {
        Some(&[
            "base_url",
            "model",
            "api_key",
            "temperature",
            "top_p",
            "max_completion_tokens",
            "max_tokens",
        ])
    }

    async fn execute(
        &self,
        request: AgentRequest,
        on_chunk: Option<AgentCallback>,
        cancel: CancellationToken,
    ) -> Result<AgentResponse, AwfError> {
        let c = build_call(&request, &self.env)?;
        let client = self.client()?;
        let work = call(client, &c, on_chunk.as_ref());
        let bounded = async {
            match request.timeout {
                Some(t) => tokio::time::timeout(t, work).await.map_err(|_| {
                    AwfError::new(
                        ErrorCode::ExecutionAgentTimeout,
                        format!("{NAME}: no complete answer from {} within {t:?}", c.url),
                    )
                    .with_detail("provider", NAME)
                })?,
                None => work.await,
            }
        };
        let (answer, raw) = tokio::select! {
            biased;
            () = cancel.cancelled() => {
                return Err(AwfError::new(ErrorCode::ExecutionRunCancelled, format!("{NAME}: agent cancelled")));
            }
            r = bounded => r?,
        };
        let output = answer.content;
        let response = match request.options.get("output_format").and_then(Value::as_str) {
            Some("json") => json_object(&output),
            _ => None,
        };
        let tokens = tokens(answer.usage, &request, &output);
        let session = next_session(&request, &output, None);
        Ok(AgentResponse {
            output,
            response,
            tokens,
            session,
            raw,
            stderr: String::new(),
        })
    }
}
