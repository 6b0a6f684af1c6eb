//! The built-in operations (`type: operation` states, and `<plugin>_<op>` tools of the MCP
//! proxy): [`BuiltinOperations`] implements the domain port [`Operations`] with the ids of
//! [`awf_domain::ports::operations::BUILTIN_OPERATIONS`]. Today that is one: `http.request`.
//!
//! # `http.request` (plugin `http`, operation `request`)
//! Inputs, as AWF (Go) names them:
//!
//! | input | type | default | meaning |
//! |---|---|---|---|
//! | `method` | string, required | | `GET`, `POST`, `PUT` or `DELETE`, any case |
//! | `url` | string, required | | `http://` or `https://` URL |
//! | `headers` | map of strings | none | request headers (numbers and booleans are written as text) |
//! | `body` | string | none | request body, sent as is (a map or list is sent as compact JSON) |
//! | `timeout` | integer seconds, or a duration string (`1500ms`) | 30 s | for the whole request, the body included; the step's own `timeout:` also bounds it |
//! | `retryable_status_codes` | list of integers | none | statuses that fail the operation (so `retry:` and `on_failure` see them) |
//!
//! Outputs, in this order: `status_code` (integer), `body` (text, at most
//! [`BuiltinOperations::max_body_bytes`] bytes, 1 MiB by default, cut on a UTF-8 boundary;
//! bytes that are not UTF-8 become U+FFFD), `headers` (response header names in canonical
//! form, `Content-Type`, sorted, values of a repeated header joined with `, `),
//! `body_truncated` (whether the body was cut).
//!
//! Any answer is a success, a 404 or a 500 included (its `status_code` tells), unless its
//! status is listed in `retryable_status_codes`: then the result is `success: false` with
//! the outputs filled (as AWF (Go)). A request that gets no answer is an error:
//! `EXECUTION.OPERATION.TIMEOUT` past the timeout, `EXECUTION.OPERATION.FAILED` when it
//! cannot connect or the answer breaks off; `EXECUTION.RUN.CANCELLED` when the caller
//! cancels. Inputs that do not fit are `USER.INPUT.VALIDATION_FAILED` naming the input.
//!
//! Secrets: the values of credential headers (`Authorization`, `Proxy-Authorization`,
//! `Cookie`, and any header whose name marks a secret, such as `X-Api-Key` or
//! `X-Auth-Token`; for `Bearer <token>` the token alone too) and the password of the URL are
//! replaced by `***` in every output and error (a server that echoes them back leaks
//! nothing). The caller masks its own secrets (the run's inputs and environment) on top.
//!
//! Source: shared/spec/workflow.md §1.5.7, §3.9; AWF (Go) `internal/infrastructure/http`.

use std::sync::OnceLock;
use std::time::Duration;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::mask::Masker;
use awf_domain::ports::Operations;
use awf_domain::ports::operations::OperationResult;
use awf_domain::ports::operations::OperationSpec;
use serde_json::Map;
use serde_json::Value;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Body kept by default: 1 MiB, as AWF (Go).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
/// Request timeout when the `timeout` input is absent: 30 s, as AWF (Go).
pub const DEFAULT_HTTP_TIMEOUT: Duration = Duration::from_secs(30);

const HTTP_REQUEST: &str = "http.request";

/// The built-in operations.
pub struct BuiltinOperations {
    max_body_bytes: usize,
    client: OnceLock<Result<reqwest::Client, String>>,
}

impl Default for BuiltinOperations {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for BuiltinOperations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltinOperations")
            .field("max_body_bytes", &self.max_body_bytes)
            .finish_non_exhaustive()
    }
}

impl BuiltinOperations {
    /// The operations with the default body cap ([`DEFAULT_MAX_BODY_BYTES`]). The HTTP
    /// client is made on first use.
    pub fn new() -> Self {
        Self {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            client: OnceLock::new(),
        }
    }

    /// The same with another body cap, in bytes (the `body` output keeps at most that many).
    #[must_use]
    pub fn with_max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// The body cap, in bytes.
    pub fn max_body_bytes(&self) -> usize {
        self.max_body_bytes
    }

    fn client(&self) -> Result<&reqwest::Client, AwfError> {
        self.client
            .get_or_init(|| {
                reqwest::Client::builder()
                    .build()
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| {
                AwfError::new(
                    ErrorCode::ExecutionOperationFailed,
                    format!("{HTTP_REQUEST}: cannot create the HTTP client: {e}"),
                )
            })
    }
}

/// The input schema of `http.request` (hand-written JSON Schema, no `$schema`).
pub fn http_request_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "method": {"type": "string", "description": "HTTP method: GET, POST, PUT or DELETE (any case)"},
            "url": {"type": "string", "format": "uri", "description": "Target URL (http:// or https://)"},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Request headers (name: value)"},
            "body": {"type": "string", "description": "Request body, sent as is"},
            "timeout": {"type": "integer", "minimum": 1, "description": "Request timeout in seconds (default 30)"},
            "retryable_status_codes": {"type": "array", "items": {"type": "integer"}, "description": "Response statuses that fail the request as retryable, e.g. [429, 502, 503]"}
        },
        "required": ["method", "url"]
    })
}

#[async_trait::async_trait]
impl Operations for BuiltinOperations {
    fn list(&self) -> Vec<OperationSpec> {
        vec![OperationSpec {
            plugin: "http".into(),
            name: "request".into(),
            description: "Perform an HTTP request (GET, POST, PUT, DELETE) and return status_code, body, headers and body_truncated".into(),
            input_schema: http_request_schema(),
        }]
    }

    async fn execute(
        &self,
        id: &str,
        inputs: Map<String, Value>,
        timeout: Option<Duration>,
        cancel: CancellationToken,
    ) -> Result<OperationResult, AwfError> {
        if id != HTTP_REQUEST {
            return Err(AwfError::new(
                ErrorCode::ExecutionOperationNotFound,
                format!("operation \"{id}\" not found"),
            )
            .with_detail("operation", id)
            .with_hint(format!(
                "awf provides: {}",
                awf_domain::ports::operations::BUILTIN_OPERATIONS.join(", ")
            )));
        }
        let req = HttpInputs::parse(&inputs)?;
        let limit = match timeout {
            Some(t) => req.timeout.min(t),
            None => req.timeout,
        };
        let masker = req.masker();
        let client = self.client()?;
        let fut = send(client, &req, self.max_body_bytes);
        let answer = tokio::select! {
            r = tokio::time::timeout(limit, fut) => r,
            () = cancel.cancelled() => {
                return Err(AwfError::new(
                    ErrorCode::ExecutionRunCancelled,
                    format!("{HTTP_REQUEST}: request cancelled"),
                ));
            }
        };
        let resp = match answer {
            Err(_) => {
                return Err(AwfError::new(
                    ErrorCode::ExecutionOperationTimeout,
                    format!(
                        "{HTTP_REQUEST}: request timed out after {}",
                        awf_domain::duration::format_go(limit)
                    ),
                )
                .with_detail("url", masker.mask(&req.url).into_owned())
                .with_hint("raise the `timeout` input (seconds) or the step's timeout:"));
            }
            Ok(Err(e)) => {
                return Err(AwfError::new(
                    ErrorCode::ExecutionOperationFailed,
                    masker.mask(&format!("{HTTP_REQUEST}: {e}")).into_owned(),
                )
                .with_detail("url", masker.mask(&req.url).into_owned())
                .with_hint("check the URL and that the server is up"));
            }
            Ok(Ok(r)) => r,
        };
        let mut outputs = Map::new();
        outputs.insert("status_code".into(), Value::from(resp.status));
        outputs.insert(
            "body".into(),
            Value::String(masker.mask(&resp.body).into_owned()),
        );
        let mut headers = Map::new();
        for (k, v) in resp.headers {
            headers.insert(k, Value::String(masker.mask(&v).into_owned()));
        }
        outputs.insert("headers".into(), Value::Object(headers));
        outputs.insert("body_truncated".into(), Value::Bool(resp.truncated));
        if req.retryable.contains(&resp.status) {
            return Ok(OperationResult {
                success: false,
                outputs,
                error: Some(format!(
                    "{HTTP_REQUEST}: retryable status code {}",
                    resp.status
                )),
            });
        }
        Ok(OperationResult {
            success: true,
            outputs,
            error: None,
        })
    }
}

/// The checked inputs of one `http.request`.
#[derive(Debug)]
struct HttpInputs {
    method: reqwest::Method,
    url: String,
    headers: Vec<(String, String)>,
    body: Option<String>,
    timeout: Duration,
    retryable: Vec<u16>,
}

fn bad_input(name: &str, why: impl std::fmt::Display) -> AwfError {
    AwfError::new(
        ErrorCode::UserInputValidationFailed,
        format!("{HTTP_REQUEST}: input `{name}` {why}"),
    )
    .with_detail("input", name)
    .with_hint(
        "inputs of http.request: method, url, headers, body, timeout, retryable_status_codes",
    )
}

/// A JSON scalar as header text (`5`, `true`), `None` for maps and lists.
fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

impl HttpInputs {
    fn parse(inputs: &Map<String, Value>) -> Result<Self, AwfError> {
        let text = |name: &str| -> Result<Option<String>, AwfError> {
            match inputs.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(bad_input(name, format!("must be a string, not {other}"))),
            }
        };
        let url = text("url")?
            .filter(|u| !u.trim().is_empty())
            .ok_or_else(|| bad_input("url", "is required (an http:// or https:// URL)"))?;
        let url = url.trim().to_owned();
        let lower = url.to_ascii_lowercase();
        if !(lower.starts_with("http://") || lower.starts_with("https://")) {
            return Err(bad_input(
                "url",
                format!("must start with http:// or https://, not `{url}`"),
            ));
        }
        if reqwest::Url::parse(&url).is_err() {
            return Err(bad_input("url", format!("is not a valid URL: `{url}`")));
        }
        let method_text = text("method")?
            .filter(|m| !m.trim().is_empty())
            .ok_or_else(|| bad_input("method", "is required (GET, POST, PUT or DELETE)"))?;
        let method = match method_text.trim().to_ascii_uppercase().as_str() {
            "GET" => reqwest::Method::GET,
            "POST" => reqwest::Method::POST,
            "PUT" => reqwest::Method::PUT,
            "DELETE" => reqwest::Method::DELETE,
            _ => {
                return Err(bad_input(
                    "method",
                    format!("must be GET, POST, PUT or DELETE, not `{method_text}`"),
                ));
            }
        };
        let mut headers = Vec::new();
        match inputs.get("headers") {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    let value = scalar_text(v).ok_or_else(|| {
                        bad_input("headers", format!("value of `{k}` must be text, not {v}"))
                    })?;
                    if reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_err() {
                        return Err(bad_input("headers", format!("`{k}` is not a header name")));
                    }
                    if reqwest::header::HeaderValue::from_str(&value).is_err() {
                        return Err(bad_input(
                            "headers",
                            format!("value of `{k}` has characters a header cannot carry"),
                        ));
                    }
                    headers.push((k.clone(), value));
                }
            }
            Some(other) => {
                return Err(bad_input(
                    "headers",
                    format!("must be a map of names to values, not {other}"),
                ));
            }
        }
        let body = match inputs.get("body") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(v @ (Value::Object(_) | Value::Array(_))) => Some(v.to_string()),
            Some(v) => scalar_text(v),
        };
        let timeout = match inputs.get("timeout") {
            None | Some(Value::Null) => DEFAULT_HTTP_TIMEOUT,
            Some(Value::Number(n)) => match n.as_f64() {
                Some(s) if s > 0.0 => Duration::try_from_secs_f64(s)
                    .map_err(|_| bad_input("timeout", "is too large"))?,
                _ => return Err(bad_input("timeout", "must be a positive number of seconds")),
            },
            Some(Value::String(s)) if s.trim().is_empty() => DEFAULT_HTTP_TIMEOUT,
            Some(Value::String(s)) => match awf_domain::duration::parse_duration(s) {
                Ok(d) if !d.is_zero() => d,
                Ok(_) => return Err(bad_input("timeout", "must be more than zero")),
                Err(e) => return Err(bad_input("timeout", e)),
            },
            Some(other) => {
                return Err(bad_input(
                    "timeout",
                    format!("must be a number of seconds, not {other}"),
                ));
            }
        };
        let mut retryable = Vec::new();
        match inputs.get("retryable_status_codes") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for item in items {
                    let code = match item {
                        Value::Number(n) => n.as_u64(),
                        Value::String(s) => s.trim().parse::<u64>().ok(),
                        _ => None,
                    }
                    .and_then(|c| u16::try_from(c).ok())
                    .filter(|c| (100..=599).contains(c))
                    .ok_or_else(|| {
                        bad_input(
                            "retryable_status_codes",
                            format!("holds {item}, not an HTTP status (100 to 599)"),
                        )
                    })?;
                    retryable.push(code);
                }
            }
            Some(other) => {
                return Err(bad_input(
                    "retryable_status_codes",
                    format!("must be a list of statuses, not {other}"),
                ));
            }
        }
        Ok(Self {
            method,
            url,
            headers,
            body,
            timeout,
            retryable,
        })
    }

    /// Masks the credentials this request carries: credential headers and the URL's
    /// password.
    fn masker(&self) -> Masker {
        let mut m = Masker::default();
        for (k, v) in &self.headers {
            let lower = k.to_ascii_lowercase();
            let credential = matches!(
                lower.as_str(),
                "authorization" | "proxy-authorization" | "cookie"
            ) || awf_domain::mask::is_secret_name(&lower)
                || lower.contains("apikey")
                || lower.contains("auth");
            if !credential {
                continue;
            }
            m.add(v);
            // `Bearer <token>`, `Basic <b64>`: the credential alone too.
            if let Some((_, cred)) = v.trim().split_once(' ') {
                m.add(cred.trim());
            }
        }
        if let Ok(u) = reqwest::Url::parse(&self.url)
            && let Some(p) = u.password()
        {
            m.add(p);
        }
        m
    }
}

/// What came back.
struct Answer {
    status: u16,
    body: String,
    headers: Vec<(String, String)>,
    truncated: bool,
}

/// `content-type` → `Content-Type` (Go's canonical header form).
fn canonical(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut c = part.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + &c.as_str().to_ascii_lowercase(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// `bytes` as text, at most `cap` bytes of it, cut on a UTF-8 boundary when it is UTF-8.
fn body_text(mut bytes: Vec<u8>, cap: usize) -> (String, bool) {
    let truncated = bytes.len() > cap;
    if truncated {
        bytes.truncate(cap);
        // Drop a character cut in two (at most 3 bytes of it).
        if let Err(e) = std::str::from_utf8(&bytes)
            && e.error_len().is_none()
        {
            bytes.truncate(e.valid_up_to());
        }
    }
    let text = match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    };
    (text, truncated)
}

async fn send(client: &reqwest::Client, req: &HttpInputs, cap: usize) -> Result<Answer, String> {
    let mut b = client.request(req.method.clone(), &req.url);
    for (k, v) in &req.headers {
        b = b.header(k.as_str(), v.as_str());
    }
    if let Some(body) = &req.body {
        b = b.body(body.clone());
    }
    let mut resp = b.send().await.map_err(|e| error_chain(&e))?;
    let status = resp.status().as_u16();
    let mut grouped: std::collections::BTreeMap<String, Vec<String>> =
        std::collections::BTreeMap::new();
    for (k, v) in resp.headers() {
        grouped
            .entry(canonical(k.as_str()))
            .or_default()
            .push(String::from_utf8_lossy(v.as_bytes()).into_owned());
    }
    let headers = grouped
        .into_iter()
        .map(|(k, vs)| (k, vs.join(", ")))
        .collect();
    // Read one byte past the cap to know whether it was cut; the rest is never read.
    let mut bytes: Vec<u8> = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| error_chain(&e))? {
        let room = cap.saturating_add(1).saturating_sub(bytes.len());
        bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if bytes.len() > cap {
            break;
        }
    }
    let (body, truncated) = body_text(bytes, cap);
    Ok(Answer {
        status,
        body,
        headers,
        truncated,
    })
}

/// The error and its causes, one line (`error sending request: connection refused`).
fn error_chain(e: &reqwest::Error) -> String {
    let mut chain = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        let t = s.to_string();
        if !chain.contains(&t) {
            chain.push_str(": ");
            chain.push_str(&t);
        }
        src = s.source();
    }
    chain
}

#[cfg(test)]
#[path = "operations_tests.rs"]
mod tests;
