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
//! | `follow_redirects` | boolean (or `"true"`/`"false"`) | true | follow 301, 302, 303, 307 and 308 (at most 10); false answers with the 3xx itself |
//!
//! The names and methods are [`awf_domain::ports::operations::HTTP_REQUEST_INPUTS`] and
//! [`awf_domain::ports::operations::HTTP_REQUEST_METHODS`] (what `awf validate` checks too);
//! any other input name is `USER.INPUT.VALIDATION_FAILED` with a did-you-mean.
//!
//! A URL with userinfo (`http://user:pw@host/`) is sent without it: the user and password
//! become `Authorization: Basic <base64(user:pw)>`, unless the `headers` input sets
//! `Authorization` itself, which then wins (the userinfo is dropped).
//!
//! Redirects are followed by awf itself, as Go's client does: 301, 302 and 303 continue as a
//! `GET` without a body (a `GET` stays a `GET`), 307 and 308 repeat the method and body. No
//! `Referer` is ever sent. When a redirect leaves the origin (scheme, host or port differ),
//! every credential header is dropped for the rest of the chain: `Authorization`,
//! `Proxy-Authorization`, `Cookie` and every header whose name marks a secret (the masking
//! rule below). Userinfo in a `Location` is ignored.
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
//! `X-Auth-Token`; for `Bearer <token>` and `Basic <b64>` the credential alone too, the
//! header made from a URL's userinfo included) and the password of the URL (as written and
//! percent-decoded) are replaced by `***` in every output and error (a server that echoes them back leaks
//! nothing). The caller masks its own secrets (the run's inputs and environment) on top.
//!
//! Source: shared/spec/workflow.md §1.5.7, §3.9; AWF (Go) `internal/infrastructure/http`.

use std::sync::OnceLock;
use std::time::Duration;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::mask::Masker;
use awf_domain::ports::Operations;
use awf_domain::ports::operations::HTTP_REQUEST_INPUTS;
use awf_domain::ports::operations::HTTP_REQUEST_METHODS;
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
/// Redirects followed at most before the request fails: 10, as Go's client.
pub const MAX_REDIRECTS: usize = 10;

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
                // Redirects are followed in `send` (credential headers dropped across
                // origins); reqwest neither follows them nor sends a Referer.
                reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .referer(false)
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
            "retryable_status_codes": {"type": "array", "items": {"type": "integer"}, "description": "Response statuses that fail the request as retryable, e.g. [429, 502, 503]"},
            "follow_redirects": {"type": "boolean", "description": "Follow redirects (default true); false answers with the 3xx response itself"}
        },
        "additionalProperties": false,
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
        let client = self.client()?;
        let first = req.request(client)?;
        let masker = req.masker(&first);
        let fut = send(client, first, req.follow_redirects, self.max_body_bytes);
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
                .with_detail("url", masker.mask(req.url.as_str()).into_owned())
                .with_hint("raise the `timeout` input (seconds) or the step's timeout:"));
            }
            Ok(Err(e)) => {
                return Err(AwfError::new(
                    ErrorCode::ExecutionOperationFailed,
                    masker.mask(&format!("{HTTP_REQUEST}: {e}")).into_owned(),
                )
                .with_detail("url", masker.mask(req.url.as_str()).into_owned())
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
    /// The URL without its userinfo.
    url: reqwest::Url,
    /// The URL's user and password, percent-decoded.
    userinfo: Option<(String, Option<String>)>,
    /// The URL's password as written (percent-encoded), to mask.
    raw_password: Option<String>,
    headers: Vec<(String, String)>,
    body: Option<String>,
    timeout: Duration,
    retryable: Vec<u16>,
    follow_redirects: bool,
}

/// Whether header `name` carries a credential: `Authorization`, `Proxy-Authorization`,
/// `Cookie`, or a name that marks a secret ([`awf_domain::mask::is_secret_name`], plus
/// `apikey` and `auth` anywhere in it). The one rule for masking a header's value and for
/// dropping it on a cross-origin redirect.
pub fn is_credential_header(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    matches!(
        lower.as_str(),
        "authorization" | "proxy-authorization" | "cookie"
    ) || awf_domain::mask::is_secret_name(&lower)
        || lower.contains("apikey")
        || lower.contains("auth")
}

/// `s` percent-decoded (as UTF-8, invalid sequences as U+FFFD).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// `url` without its user and password.
fn without_userinfo(mut url: reqwest::Url) -> reqwest::Url {
    // Only URLs that cannot carry userinfo (no host) refuse; http(s) URLs always have one.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url
}

fn bad_input(name: &str, why: impl std::fmt::Display) -> AwfError {
    AwfError::new(
        ErrorCode::UserInputValidationFailed,
        format!("{HTTP_REQUEST}: input `{name}` {why}"),
    )
    .with_detail("input", name)
    .with_hint(format!(
        "inputs of http.request: {}",
        HTTP_REQUEST_INPUTS.join(", ")
    ))
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
        if let Some(unknown) = inputs
            .keys()
            .find(|k| !HTTP_REQUEST_INPUTS.contains(&k.as_str()))
        {
            let mut e = bad_input(unknown, "is not an input of http.request");
            if let Some(c) =
                awf_domain::validate::closest(unknown, HTTP_REQUEST_INPUTS.iter().copied())
            {
                e = e.with_hint(format!("did you mean `{c}`?"));
            }
            return Err(e);
        }
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
        let Ok(parsed) = reqwest::Url::parse(&url) else {
            return Err(bad_input("url", "is not a valid URL"));
        };
        let raw_password = parsed.password().map(str::to_owned);
        let userinfo = (!parsed.username().is_empty() || raw_password.is_some()).then(|| {
            (
                percent_decode(parsed.username()),
                raw_password.as_deref().map(percent_decode),
            )
        });
        let url = without_userinfo(parsed);
        let methods = HTTP_REQUEST_METHODS.join(", ");
        let method_text = text("method")?
            .filter(|m| !m.trim().is_empty())
            .ok_or_else(|| bad_input("method", format!("is required ({methods})")))?;
        let upper = method_text.trim().to_ascii_uppercase();
        let method = match reqwest::Method::from_bytes(upper.as_bytes()) {
            Ok(m) if HTTP_REQUEST_METHODS.contains(&upper.as_str()) => m,
            _ => {
                return Err(AwfError::new(
                    ErrorCode::UserInputValidationFailed,
                    format!(
                        "{HTTP_REQUEST}: input `method` must be one of {methods}, not `{method_text}`"
                    ),
                )
                .with_detail("input", "method")
                .with_hint(format!(
                    "send one of {methods} (any case); `awf validate` checks a method written as is"
                )));
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
        let follow_redirects = match inputs.get("follow_redirects") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("true") => true,
            Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("false") => false,
            Some(other) => {
                return Err(bad_input(
                    "follow_redirects",
                    format!("must be true or false, not {other}"),
                ));
            }
        };
        Ok(Self {
            method,
            url,
            userinfo,
            raw_password,
            headers,
            body,
            timeout,
            retryable,
            follow_redirects,
        })
    }

    /// The first request: the URL without userinfo, the headers, Basic auth from the
    /// userinfo unless `headers` sets `Authorization`, the body.
    fn request(&self, client: &reqwest::Client) -> Result<reqwest::Request, AwfError> {
        let mut b = client.request(self.method.clone(), self.url.clone());
        for (k, v) in &self.headers {
            b = b.header(k.as_str(), v.as_str());
        }
        let explicit = self
            .headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("authorization"));
        if let (Some((user, pw)), false) = (&self.userinfo, explicit) {
            b = b.basic_auth(user, pw.as_ref());
        }
        if let Some(body) = &self.body {
            b = b.body(body.clone());
        }
        b.build().map_err(|e| {
            AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!(
                    "{HTTP_REQUEST}: cannot build the request: {}",
                    error_chain(&e)
                ),
            )
            .with_hint("check the url and headers inputs")
        })
    }

    /// Masks the credentials `first` carries (credential headers, the one made from the
    /// URL's userinfo included) and the URL's password, as written and decoded.
    fn masker(&self, first: &reqwest::Request) -> Masker {
        let mut m = Masker::default();
        for (k, v) in first.headers() {
            if !is_credential_header(k.as_str()) {
                continue;
            }
            let v = String::from_utf8_lossy(v.as_bytes());
            m.add(&v);
            // `Bearer <token>`, `Basic <b64>`: the credential alone too.
            if let Some((_, cred)) = v.trim().split_once(' ') {
                m.add(cred.trim());
            }
        }
        if let Some(p) = &self.raw_password {
            m.add(p);
        }
        if let Some((_, Some(p))) = &self.userinfo {
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

/// Whether `a` and `b` have one origin (scheme, host and port, the default port counted).
fn same_origin(a: &reqwest::Url, b: &reqwest::Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

/// The request after redirect `status` of `prev` to `location`, or `None` when `status` is
/// not a redirect awf follows (the 3xx is then the answer).
fn redirected(
    prev: reqwest::Request,
    status: u16,
    location: &str,
) -> Option<Result<reqwest::Request, String>> {
    if !matches!(status, 301 | 302 | 303 | 307 | 308) {
        return None;
    }
    let target = match prev.url().join(location) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => without_userinfo(u),
        Ok(u) => {
            return Some(Err(format!(
                "redirect to a URL that is not http:// or https:// ({})",
                u.scheme()
            )));
        }
        Err(e) => return Some(Err(format!("redirect to a bad Location ({e})"))),
    };
    let cross = !same_origin(prev.url(), &target);
    let mut next = prev;
    *next.url_mut() = target;
    if matches!(status, 301..=303) {
        if *next.method() != reqwest::Method::GET {
            *next.method_mut() = reqwest::Method::GET;
        }
        *next.body_mut() = None;
        for h in [
            reqwest::header::CONTENT_TYPE,
            reqwest::header::CONTENT_LENGTH,
            reqwest::header::CONTENT_ENCODING,
            reqwest::header::TRANSFER_ENCODING,
        ] {
            next.headers_mut().remove(h);
        }
    }
    if cross {
        let names: Vec<reqwest::header::HeaderName> = next
            .headers()
            .keys()
            .filter(|k| is_credential_header(k.as_str()) || *k == reqwest::header::REFERER)
            .cloned()
            .collect();
        for n in names {
            next.headers_mut().remove(n);
        }
    }
    Some(Ok(next))
}

async fn send(
    client: &reqwest::Client,
    first: reqwest::Request,
    follow: bool,
    cap: usize,
) -> Result<Answer, String> {
    let mut req = first;
    let mut hops = 0;
    let mut resp = loop {
        // The body is a string, so the request can always be cloned for the next hop.
        let again = if follow { req.try_clone() } else { None };
        let resp = client.execute(req).await.map_err(|e| error_chain(&e))?;
        let location = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let (Some(prev), Some(location)) = (again, location) else {
            break resp;
        };
        match redirected(prev, resp.status().as_u16(), &location) {
            None => break resp,
            Some(Err(e)) => return Err(e),
            Some(Ok(next)) => {
                hops += 1;
                if hops > MAX_REDIRECTS {
                    return Err(format!("stopped after {MAX_REDIRECTS} redirects"));
                }
                req = next;
            }
        }
    };
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
