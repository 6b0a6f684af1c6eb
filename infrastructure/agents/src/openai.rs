//! `openai_compatible`: any OpenAI Chat Completions server over HTTP.
//!
//! `POST {base_url}/chat/completions` with `stream: true` and
//! `stream_options.include_usage`; the answer streams as SSE `data:` events (a plain JSON body
//! is accepted too). Options: `base_url` (else `$OPENAI_BASE_URL`) and `model` (else
//! `$OPENAI_MODEL`) required, `api_key` (else `$OPENAI_API_KEY`, sent as a bearer token),
//! `temperature` (0–2), `max_completion_tokens` or `max_tokens` (≥ 0), `top_p` (0–1),
//! `max_tool_iterations` (1–1000, default [`DEFAULT_MAX_TOOL_ITERATIONS`]).
//! Messages: `[system?, …session turns…, user]`.
//!
//! # Tools (the step's `mcp_proxy`, in-process)
//! When [`AgentRequest::tools`] is set, its tools are offered as `tools[]`
//! (`{"type":"function","function":{name, description, parameters}}`) with
//! `tool_choice: "auto"` (both omitted when the list is empty), and the provider runs the tool
//! loop itself: each answer whose `finish_reason` is `tool_calls` (or that carries tool calls
//! and did not stop for `length`) is appended as an assistant message with its `tool_calls`,
//! each call is made through the [`ToolProvider`] in order (its id kept, the step's cancel
//! token passed), each result appended as `{"role":"tool","tool_call_id","content"}`, and the
//! conversation is posted again. Results: the tool's text; `error: <text>` for an `isError`
//! result; `error: invalid tool arguments for <name>` when the arguments are not a JSON
//! object (an empty string counts as `{}`); `error calling tool <name>: <why>` for an unknown
//! tool. These go back to the model; they do not fail the step. The loop ends on `stop` (or
//! no finish reason; any other reason too) with that answer's content, on `length` with the
//! partial content, and after `max_tool_iterations` POSTs that all asked for tools with
//! `USER.MCP_PROXY.INFINITE_LOOP_GUARD` (the calls of that last answer are not made); an
//! answer with finish reason `tool_calls` but no calls is the same error. The error's
//! `partial_output` detail holds the text the model wrote so far. Tokens are summed over the
//! rounds. A cancel stops the HTTP request at once, or the running tool call through its
//! token (waiting at most [`TOOL_CANCEL_GRACE`] for it to clean up). Every call streams an
//! [`AgentChunk::ToolCall`] and an [`AgentChunk::ToolResult`]. Without tools, an answer asking
//! for tool calls is an `EXECUTION.AGENT.FAILED` error.
//!
//! Source: spec/workflow.md §5.2 "openai_compatible"; shared/spec/mcp.md §4 (the loop);
//! errors as in the brief of this crate.

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
use awf_domain::ports::tools::ToolCall;
use awf_domain::ports::tools::ToolProvider;
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

/// POSTs of one tool loop when `max_tool_iterations` is not given (AWF (Go)'s fixed 25).
pub const DEFAULT_MAX_TOOL_ITERATIONS: u64 = 25;

/// Largest `max_tool_iterations` accepted.
pub const MAX_TOOL_ITERATIONS_LIMIT: u64 = 1000;

/// How long a cancelled tool call is given to stop what it started (a Bash command gets
/// SIGTERM, a grace, SIGKILL) before it is dropped.
pub const TOOL_CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

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
    /// POSTs of the tool loop at most (`max_tool_iterations`).
    pub max_rounds: u64,
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
    let max_rounds = match o.uint("max_tool_iterations")? {
        None => DEFAULT_MAX_TOOL_ITERATIONS,
        Some(n) if (1..=MAX_TOOL_ITERATIONS_LIMIT).contains(&n) => n,
        Some(n) => {
            return Err(o
                .invalid(
                    "max_tool_iterations",
                    format!("expected an integer from 1 to {MAX_TOOL_ITERATIONS_LIMIT}, got {n}"),
                )
                .with_hint("It bounds the requests of one tool loop; the default is 25."));
        }
    };

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
    let specs = request
        .tools
        .as_ref()
        .map(|t| t.0.tools())
        .unwrap_or_default();
    if !specs.is_empty() {
        let tools: Vec<Value> = specs
            .into_iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.input_schema}})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        body.insert("tool_choice".into(), json!("auto"));
    }
    Ok(Call {
        url: format!("{}/chat/completions", base_url.trim_end_matches('/')),
        api_key,
        body: Value::Object(body),
        max_rounds,
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
    let mut e = AwfError::new(code, format!("{NAME}: {what} (HTTP {status}){suffix}"))
        .with_detail("provider", NAME)
        .with_detail("status", status);
    // `Retry-After: <seconds>` or an HTTP date: when the limit lifts (usage limits).
    if let Some(r) = retry_after.map(str::trim) {
        if let Ok(secs) = r.parse::<f64>()
            && secs.is_finite()
            && secs >= 0.0
        {
            e = e.with_detail("retry_after_secs", secs);
        } else if let Some(at) = awf_domain::timefmt::parse_http_date(r) {
            e = e.with_detail("reset_at", at);
        }
    }
    e
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

/// One tool call of an answer, assembled from its deltas (`index`-keyed; `id` and
/// `function.name` in the first, `function.arguments` in pieces).
#[derive(Debug, Default, Clone, PartialEq)]
struct PendingCall {
    index: u64,
    id: String,
    name: String,
    arguments: String,
}

/// What the answer stream said.
#[derive(Debug, Default)]
struct Answer {
    content: String,
    /// The model's refusal text (`delta.refusal` / `message.refusal`), when it refused.
    refusal: String,
    usage: Option<Usage>,
    saw_choice: bool,
    finish_reason: Option<String>,
    tool_calls: Vec<PendingCall>,
}

impl Answer {
    /// Merges a `tool_calls` array (stream deltas or a whole message) into the calls so far.
    fn add_tool_calls(&mut self, calls: &[Value]) {
        for (pos, c) in calls.iter().enumerate() {
            let index = c.get("index").and_then(Value::as_u64).unwrap_or(pos as u64);
            let at = match self.tool_calls.iter().position(|p| p.index == index) {
                Some(i) => i,
                None => {
                    self.tool_calls.push(PendingCall {
                        index,
                        ..PendingCall::default()
                    });
                    self.tool_calls.len() - 1
                }
            };
            let Some(p) = self.tool_calls.get_mut(at) else {
                continue;
            };
            if let Some(id) = c
                .get("id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
            {
                id.clone_into(&mut p.id);
            }
            if let Some(f) = c.get("function") {
                if let Some(n) = f.get("name").and_then(Value::as_str) {
                    p.name.push_str(n);
                }
                match f.get("arguments") {
                    Some(Value::String(a)) => p.arguments.push_str(a),
                    Some(v @ Value::Object(_)) => p.arguments.push_str(&v.to_string()),
                    _ => {}
                }
            }
        }
    }

    /// Whether this answer asks for tool calls (then the loop makes them).
    fn wants_tools(&self) -> bool {
        match self.finish_reason.as_deref() {
            Some("tool_calls" | "function_call") => true,
            Some("length") => false,
            _ => !self.tool_calls.is_empty(),
        }
    }
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
    fail("the model asked for tool calls, but the step offers no tools").with_hint(
        "Enable `mcp_proxy` on the step to offer awf's tools, or remove `tools` from the server's defaults.",
    )
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
            if let Some(calls) = d.get("tool_calls").and_then(Value::as_array) {
                self.add_tool_calls(calls);
            }
            for key in ["reasoning_content", "reasoning"] {
                if let Some(t) = d.get(key).and_then(Value::as_str).filter(|t| !t.is_empty())
                    && let Some(cb) = on_chunk
                {
                    cb(AgentChunk::Thought(t.to_owned()));
                }
            }
            if let Some(t) = d
                .get("refusal")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                self.refusal.push_str(t);
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
        if let Some(r) = choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
        {
            self.finish_reason = Some(r.to_owned());
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
        serde_json::from_str::<Value>(&raw)
            .map_err(|e| fail(format!("response is neither SSE nor JSON: {e}")))?;
        answer.on_event(&raw, on_chunk)?;
    }
    if !answer.saw_choice {
        return Err(fail("the response has no choices"));
    }
    Ok((answer, raw))
}

fn cancelled() -> AwfError {
    AwfError::new(
        ErrorCode::ExecutionRunCancelled,
        format!("{NAME}: agent cancelled"),
    )
}

/// The loop's result: the last answer's content, the usage summed over rounds, the last body.
struct Done {
    content: String,
    usage: Option<Usage>,
    raw: String,
}

fn add_usage(sum: &mut Option<Usage>, u: Option<Usage>) {
    let Some(u) = u else { return };
    *sum = Some(match sum.take() {
        None => u,
        Some(s) => Usage {
            input: s.input.saturating_add(u.input),
            output: s.output.saturating_add(u.output),
            total: match (s.total, u.total) {
                (None, None) => None,
                (a, b) => Some(
                    a.unwrap_or(s.input.saturating_add(s.output))
                        .saturating_add(b.unwrap_or(u.input.saturating_add(u.output))),
                ),
            },
        },
    });
}

fn loop_guard(what: String, partial: &str) -> AwfError {
    AwfError::new(
        ErrorCode::UserMcpProxyInfiniteLoopGuard,
        format!("{NAME}: {what}"),
    )
    .with_detail("provider", NAME)
    .with_detail("partial_output", partial)
    .with_hint("Make the prompt say when to stop, or raise the agent option `max_tool_iterations`.")
}

/// Makes one tool call of the model; returns the `tool` message content and whether it failed.
async fn run_tool(
    tools: &dyn ToolProvider,
    call: &PendingCall,
    id: &str,
    on_chunk: Option<&AgentCallback>,
    cancel: &CancellationToken,
) -> Result<(String, bool), AwfError> {
    let parsed = if call.arguments.trim().is_empty() {
        Some(Map::new())
    } else {
        match serde_json::from_str::<Value>(&call.arguments) {
            Ok(Value::Object(m)) => Some(m),
            _ => None,
        }
    };
    if let Some(cb) = on_chunk {
        cb(AgentChunk::ToolCall {
            id: id.to_owned(),
            name: call.name.clone(),
            input: parsed
                .clone()
                .map_or_else(|| Value::String(call.arguments.clone()), Value::Object),
        });
    }
    let (content, is_error) = match parsed {
        None => (
            format!("error: invalid tool arguments for {}", call.name),
            true,
        ),
        Some(arguments) => {
            let fut = tools.call(
                ToolCall {
                    name: call.name.clone(),
                    arguments,
                    call_id: Some(id.to_owned()),
                },
                cancel.child_token(),
            );
            tokio::pin!(fut);
            let res = tokio::select! {
                r = &mut fut => r,
                () = cancel.cancelled() => {
                    // The call saw the token: let it stop what it started, within bounds.
                    let _ = tokio::time::timeout(TOOL_CANCEL_GRACE, &mut fut).await;
                    return Err(cancelled());
                }
            };
            match res {
                Ok(out) if out.is_error => (format!("error: {}", out.text), true),
                Ok(out) => (out.text, false),
                Err(e) => (format!("error calling tool {}: {e}", call.name), true),
            }
        }
    };
    if let Some(cb) = on_chunk {
        cb(AgentChunk::ToolResult {
            id: id.to_owned(),
            output: content.clone(),
            is_error,
        });
    }
    Ok((content, is_error))
}

/// POSTs the conversation until the model stops asking for tools (see the module docs).
async fn tool_loop(
    client: &reqwest::Client,
    mut c: Call,
    request: &AgentRequest,
    on_chunk: Option<&AgentCallback>,
    cancel: &CancellationToken,
) -> Result<Done, AwfError> {
    let mut usage = None;
    let mut partial = String::new();
    let mut round: u64 = 0;
    loop {
        round += 1;
        let (answer, raw) = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(cancelled()),
            r = call(client, &c, on_chunk) => r?,
        };
        add_usage(&mut usage, answer.usage);
        if !answer.content.is_empty() {
            if !partial.is_empty() {
                partial.push('\n');
            }
            partial.push_str(&answer.content);
        }
        // A refusal (or a content filter stop) is its own outcome, never an answer.
        if !answer.refusal.is_empty() || answer.finish_reason.as_deref() == Some("content_filter") {
            let why = if answer.refusal.is_empty() {
                "the answer was stopped by the content filter".to_owned()
            } else {
                format!("the model refused: {}", answer.refusal)
            };
            return Err(
                AwfError::new(ErrorCode::ExecutionAgentRefusal, format!("{NAME}: {why}"))
                    .with_detail("provider", NAME)
                    .with_detail("partial_output", partial)
                    .with_detail("limit_class", "refusal"),
            );
        }
        if !answer.wants_tools() {
            return Ok(Done {
                content: answer.content,
                usage,
                raw,
            });
        }
        let Some(tools) = &request.tools else {
            return Err(tool_calls_error());
        };
        if answer.tool_calls.is_empty() {
            return Err(loop_guard(
                "the model finished with `tool_calls` but named no tool call".to_owned(),
                &partial,
            ));
        }
        if round >= c.max_rounds {
            return Err(loop_guard(
                format!(
                    "the model still asked for tool calls after {round} requests (max_tool_iterations {})",
                    c.max_rounds
                ),
                &partial,
            ));
        }
        let ids: Vec<String> = answer
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, p)| {
                if p.id.is_empty() {
                    format!("call_awf_{round}_{i}")
                } else {
                    p.id.clone()
                }
            })
            .collect();
        let calls: Vec<Value> = answer
            .tool_calls
            .iter()
            .zip(&ids)
            .map(|(p, id)| {
                json!({"id": id, "type": "function",
                    "function": {"name": p.name, "arguments": p.arguments}})
            })
            .collect();
        let mut added =
            vec![json!({"role": "assistant", "content": answer.content, "tool_calls": calls})];
        for (p, id) in answer.tool_calls.iter().zip(&ids) {
            let (content, _) = run_tool(tools.0.as_ref(), p, id, on_chunk, cancel).await?;
            added.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
        }
        if let Some(Value::Array(messages)) = c.body.get_mut("messages") {
            messages.extend(added);
        }
    }
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
            "max_tool_iterations",
        ])
    }

    fn tools_in_process(&self) -> bool {
        true
    }

    fn hides_native_tools(&self) -> bool {
        true
    }

    async fn execute(
        &self,
        request: AgentRequest,
        on_chunk: Option<AgentCallback>,
        cancel: CancellationToken,
    ) -> Result<AgentResponse, AwfError> {
        let c = build_call(&request, &self.env)?;
        let model = c
            .body
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let client = self.client()?;
        let work = tool_loop(client, c.clone(), &request, on_chunk.as_ref(), &cancel);
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
        // The loop watches `cancel` itself, so that a running tool call can stop cleanly.
        let done = bounded.await?;
        let output = done.content;
        let response = match request.options.get("output_format").and_then(Value::as_str) {
            Some("json") => json_object(&output),
            _ => None,
        };
        let tokens = tokens(done.usage, &request, &output);
        let session = next_session(&request, &output, None);
        Ok(AgentResponse {
            output,
            response,
            tokens,
            session,
            raw: done.raw,
            stderr: String::new(),
            model,
        })
    }
}
