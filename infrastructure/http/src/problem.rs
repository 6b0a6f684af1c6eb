//! Errors as RFC 9457 problem documents (`application/problem+json`), and the JSON body
//! extractor whose every failure is one: malformed JSON → 400, a body of the wrong shape →
//! 422, a body over the cap → 413.

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::json::NotUnique;
use awf_domain::json::RepeatedKey;
use awf_domain::json::parse_unique;
use awf_domain::ports::repository::Diagnostic;
use awf_domain::ports::repository::Severity;
use axum::Json;
use axum::body::Bytes;
use axum::extract::FromRequest;
use axum::extract::Request;
use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use utoipa::ToSchema;

/// The most bytes a request body may have (1 MiB, as AWF (Go)'s Huma default); a larger one
/// is answered 413.
pub const BODY_LIMIT: usize = 1 << 20;

/// An RFC 9457 problem document, as every error of the API is answered.
#[derive(Debug, Clone, Serialize, serde::Deserialize, ToSchema)]
pub struct ProblemDoc {
    /// Always `about:blank` (the status says what happened).
    #[serde(rename = "type")]
    pub kind: String,
    /// The HTTP status's reason phrase (`Not Found`).
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What went wrong, for a person.
    pub detail: String,
    /// The taxonomy code (`awf error CODE` explains it), e.g. `USER.FACADE.RUN_NOT_FOUND`.
    pub code: String,
    /// How to fix it.
    pub hints: Vec<String>,
    /// Every message, when there are several (an invalid workflow's validation errors).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// An invalid workflow's findings, one per entry of `errors` (in its order) with where
    /// it is in the workflow file, as `awf validate` says it; absent for other problems.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<Finding>,
}

/// One finding of a workflow's validation, as `awf validate -f json` lists it (its file's
/// path left out: the client need not know where the server keeps it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, ToSchema)]
pub struct Finding {
    /// `error`, `warning` or `note`.
    pub severity: String,
    /// The taxonomy code (`awf error CODE` explains it).
    pub code: String,
    /// Where in the workflow, as a dotted path (`states.build.on_success`); empty when the
    /// finding is about the whole file.
    pub path: String,
    /// What is wrong.
    pub message: String,
    /// How to fix it; absent when there is no hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// The 1-based line in the workflow file; absent when not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// The 1-based column in that line; absent when not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<u32>,
}

impl From<&Diagnostic> for Finding {
    fn from(d: &Diagnostic) -> Self {
        Self {
            severity: match d.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
                Severity::Note => "note",
            }
            .to_owned(),
            code: d.code.as_str().to_owned(),
            path: d.path.clone(),
            message: d.message.clone(),
            hint: d.hint.clone(),
            line: d.line,
            column: d.line.and(d.column),
        }
    }
}

/// An error answered as an RFC 9457 problem document.
#[derive(Debug)]
pub struct Problem {
    pub(crate) status: StatusCode,
    pub(crate) error: Box<AwfError>,
    pub(crate) errors: Vec<String>,
    pub(crate) diagnostics: Vec<Finding>,
    pub(crate) retry_after: Option<u64>,
}

impl Problem {
    /// The problem for an error, its HTTP status chosen from its code: not found → 404,
    /// unauthorized → 401, the run cap → 429 (with `Retry-After: 1`), other `USER.*` and
    /// `WORKFLOW.*` → 422, the rest → 500.
    ///
    /// Hints written for the command line (`--input NAME=VALUE`, `--from`) are said the HTTP
    /// way (`add "NAME" to "inputs": {"inputs": {"NAME": "VALUE"}}`, `from_step`), see
    /// [`http_hint`], and a message's `run `awf validate` to see all` names the validate
    /// route ([`http_message`]).
    pub fn from_error(error: AwfError) -> Self {
        Self::from_error_in(error, "inputs")
    }

    /// [`Problem::from_error`] for a route whose body names its inputs `key` (`inputs` for a
    /// run, `input_overrides` for a resume).
    pub fn from_error_in(error: AwfError, key: &str) -> Self {
        let error = for_http(error, key, VALIDATE_ROUTE);
        let code = error.code();
        let status = match code {
            ErrorCode::UserFacadeRunNotFound
            | ErrorCode::UserFacadeWorkflowNotFound
            | ErrorCode::UserInputMissingFile => StatusCode::NOT_FOUND,
            ErrorCode::UserFacadeUnauthorized => StatusCode::UNAUTHORIZED,
            ErrorCode::UserFacadeRunLimit => StatusCode::TOO_MANY_REQUESTS,
            c if c.as_str().starts_with("USER.") || c.as_str().starts_with("WORKFLOW.") => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let mut p = Self::with_status(status, error);
        if status == StatusCode::TOO_MANY_REQUESTS {
            p.retry_after = Some(1);
        }
        p
    }

    /// A problem with an explicit status.
    pub fn with_status(status: StatusCode, error: AwfError) -> Self {
        Self {
            status,
            error: Box::new(error),
            errors: Vec::new(),
            diagnostics: Vec::new(),
            retry_after: None,
        }
    }

    /// Adds the list of messages (`errors`).
    #[must_use]
    pub fn with_errors(mut self, errors: Vec<String>) -> Self {
        self.errors = errors;
        self
    }

    /// Adds the findings of an invalid workflow (`diagnostics`).
    #[must_use]
    pub fn with_diagnostics(mut self, diagnostics: Vec<Finding>) -> Self {
        self.diagnostics = diagnostics;
        self
    }

    /// Adds a `Retry-After` header (seconds).
    #[must_use]
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The document this problem answers with.
    pub fn doc(&self) -> ProblemDoc {
        ProblemDoc {
            kind: "about:blank".to_owned(),
            title: self.status.canonical_reason().unwrap_or("Error").to_owned(),
            status: self.status.as_u16(),
            detail: self.error.message().to_owned(),
            code: self.error.code().as_str().to_owned(),
            hints: self.error.hints().to_vec(),
            errors: self.errors.clone(),
            diagnostics: self.diagnostics.clone(),
        }
    }
}

/// The validate route in its general form, for a message whose workflow's route is not known.
pub const VALIDATE_ROUTE: &str = "POST /api/workflows/{scope}/{name}/validate";

/// `error` said for HTTP: its hints through [`http_hint`] (inputs object `key`), its message
/// through [`http_message`] (`validate`: the validate route to name). The same error when
/// nothing changes.
pub fn for_http(error: AwfError, key: &str, validate: &str) -> AwfError {
    let message = http_message(error.message(), validate);
    let hints: Vec<String> = error
        .hints()
        .iter()
        .map(|h| inputs_help_hint(h, validate).unwrap_or_else(|| http_hint(h, key)))
        .collect();
    if message == error.message() && hints.as_slice() == error.hints() {
        return error;
    }
    let mut e = AwfError::new(error.code(), message);
    for (k, v) in error.details() {
        e = e.with_detail(k.clone(), v.clone());
    }
    for h in hints {
        e = e.with_hint(h);
    }
    e
}

/// The start of the hint of a refused input value that says where each input's rules are
/// listed (application's, written for the command line).
const INPUTS_HELP: &str = "`awf run <workflow> --help` lists each input with its type and rules";

/// The hint [`INPUTS_HELP`] said for HTTP: the route that lists each input with its rules,
/// the workflow's own when `validate` names its validate route (`POST
/// /api/workflows/env/x/validate` → `GET /api/workflows/env/x`), and the fields that hold
/// them; `None` for any other hint.
fn inputs_help_hint(hint: &str, validate: &str) -> Option<String> {
    let route = validate
        .strip_prefix("POST ")
        .and_then(|r| r.strip_suffix("/validate"))
        .unwrap_or("/api/workflows/{scope}/{name}");
    inputs_route_hint(hint, route)
}

/// The hint [`INPUTS_HELP`] naming `route` (a `GET` route whose answer lists the inputs);
/// `None` for any other hint.
fn inputs_route_hint(hint: &str, route: &str) -> Option<String> {
    if !hint.starts_with(INPUTS_HELP) {
        return None;
    }
    Some(format!(
        "GET {route} lists each input with its type and rules (`inputs[]`: `type`, `required`, \
         `enum_values`, `pattern`, `min`, `max`, `file_exists`, `file_extension`)"
    ))
}

/// `error` of a request about run `run_id` (an answer to its missing-input request, a
/// resume's `input_overrides`: the inputs object `key`): its [`INPUTS_HELP`] hint names the
/// run's own workflow route (`GET /api/executions/<id>/workflow`), not the general
/// `{scope}/{name}` form (new user: literal placeholders); other hints as [`for_http`] says
/// them.
pub fn for_run(error: AwfError, run_id: &str, key: &str) -> AwfError {
    let route = format!("/api/executions/{run_id}/workflow");
    let mut e = AwfError::new(error.code(), error.message());
    for (k, v) in error.details() {
        e = e.with_detail(k.clone(), v.clone());
    }
    for h in error.hints() {
        e = e.with_hint(inputs_route_hint(h, &route).unwrap_or_else(|| h.clone()));
    }
    for_http(e, key, VALIDATE_ROUTE)
}

/// A message said for HTTP: the `run `awf validate` to see all` that ends the message of an
/// invalid workflow with more than one error becomes `` `POST …/validate` lists them all``
/// (`validate`: the route, e.g. `POST /api/workflows/local/x/validate`, whose problem
/// document's `errors` lists every error).
pub fn http_message(message: &str, validate: &str) -> String {
    message.replace(
        "run `awf validate` to see all",
        &format!("`{validate}` lists them all"),
    )
}

/// A command-line hint said for an HTTP body whose inputs object is `key`: each
/// `--input NAME=VALUE` becomes `"NAME": "VALUE"`, gathered in one example object
/// (`pass the missing inputs: --input who=<value>` → `add "who" to "inputs": {"inputs":
/// {"who": "<value>"}}`); `--from` is the resume body's `from_step` (`--from takes …` →
/// `` `from_step` takes …``); the command `awf resume ID [--from s] [--input k=<value>]…` is
/// the route to call, with its body (`POST /api/executions/ID/resume with {"from_step": "s",
/// "input_overrides": {"k": "<value>"}}`: the run it names may be another than the one asked
/// for, e.g. the top-level run of a sub-workflow's run); `awf list` is `GET /api/workflows`;
/// a hint without any of these is returned as it is.
pub fn http_hint(hint: &str, key: &str) -> String {
    if let Some(rest) = hint.strip_prefix("--from takes ") {
        return format!("`from_step` takes {rest}");
    }
    if let Some(route) = resume_route(hint) {
        return route;
    }
    if hint.starts_with("resume where the run stopped (`awf resume ") {
        return "resume where the run stopped (leave `from_step` out) or from a state that runs \
                ({\"from_step\": \"<state>\"})"
            .to_owned();
    }
    if let Some(rest) = hint.strip_prefix("`awf history` lists recorded runs") {
        // Breaker: an unknown run id's 404 pointed at the command line.
        return format!("GET /api/history lists recorded runs{rest}");
    }
    if let Some(rest) = hint.strip_prefix("run `awf list` to see the available workflows") {
        return format!("GET /api/workflows lists the available workflows{rest}");
    }
    // A resume whose state the workflow no longer has (`--from <state>`, `--from previous`).
    if hint.contains("`--from <state>` (or `--from previous`)") {
        return hint.replace(
            "`--from <state>` (or `--from previous`)",
            "{\"from_step\": \"<state>\"} (or {\"from_step\": \"previous\"})",
        );
    }
    if hint == "`awf resume --list` shows runs that can be resumed" {
        return "GET /api/executions lists the runs: a `failed` or `cancelled` one can be resumed"
            .to_owned();
    }
    let mut names = Vec::new();
    let mut pairs = Vec::new();
    let mut from = None;
    let mut rest = String::new();
    let mut text = hint.trim_start();
    while let Some((w, after)) = text
        .split_once(char::is_whitespace)
        .map_or_else(|| (!text.is_empty()).then_some((text, "")), Some)
    {
        text = after.trim_start();
        // The word after `--input` or `--from` is a shell word (quoted when the name is not
        // a plain word: `--input 'in put=<value>'`).
        if w == "--input"
            && let Some((kv, after)) = awf_domain::shell::read_arg(text)
        {
            text = after.trim_start();
            let (k, v) = kv.split_once('=').unwrap_or((&kv, "<value>"));
            names.push(format!("{k:?}"));
            pairs.push(format!("{k:?}: {v:?}"));
            continue;
        }
        if w == "--from"
            && let Some((step, after)) = awf_domain::shell::read_arg(text)
        {
            text = after.trim_start();
            from = Some(step);
            continue;
        }
        if !rest.is_empty() {
            rest.push(' ');
        }
        rest.push_str(w);
    }
    if pairs.is_empty() {
        return hint.to_owned();
    }
    let from = from
        .map(|f| format!("\"from_step\": {f:?}, "))
        .unwrap_or_default();
    let example = format!("{{{from}{key:?}: {{{}}}}}", pairs.join(", "));
    let lead = rest.trim_end_matches([':', ' ']);
    if lead.is_empty() || lead.starts_with("pass the missing inputs") {
        format!("add {} to {key:?}: {example}", names.join(", "))
    } else if lead.starts_with("awf ") {
        // A command line (`awf resume ID --input …`): the body to send instead.
        format!("send {example}")
    } else {
        format!("{lead}: {example}")
    }
}

/// The hint `awf resume ID [--from STATE] [--input NAME=VALUE]…` (the whole hint) said as the
/// route to call: `POST /api/executions/ID/resume`, then ` with {"from_step": "STATE",
/// "input_overrides": {"NAME": "VALUE"}}` when it has flags; `None` for any other hint.
fn resume_route(hint: &str) -> Option<String> {
    // Shell words: a name that is not a plain word is quoted (`--from 'my step'`).
    let mut text = hint.strip_prefix("awf resume ")?;
    let mut word = || {
        let (w, after) = awf_domain::shell::read_arg(text)?;
        text = after;
        Some(w)
    };
    let id = word().filter(|w| !w.starts_with('-'))?;
    let mut from = None;
    let mut pairs = Vec::new();
    while let Some(w) = word() {
        match (w.as_str(), word()) {
            ("--from", Some(state)) => from = Some(state),
            ("--input", Some(kv)) => {
                let (k, v) = kv.split_once('=').unwrap_or((&kv, "<value>"));
                pairs.push(format!("{k:?}: {v:?}"));
            }
            // Anything else is not a command to translate.
            _ => return None,
        }
    }
    let route = format!("POST /api/executions/{id}/resume");
    let mut body = Vec::new();
    if let Some(f) = from {
        body.push(format!("\"from_step\": {f:?}"));
    }
    if !pairs.is_empty() {
        body.push(format!("\"input_overrides\": {{{}}}", pairs.join(", ")));
    }
    Some(if body.is_empty() {
        route
    } else {
        format!("{route} with {{{}}}", body.join(", "))
    })
}

impl From<AwfError> for Problem {
    fn from(e: AwfError) -> Self {
        Self::from_error(e)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let mut r = (self.status, Json(self.doc())).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(s) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&s.to_string())
        {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        r
    }
}

/// A 4xx problem with `USER.INPUT.VALIDATION_FAILED`.
pub(crate) fn bad_input(status: StatusCode, message: String, hint: &str) -> Problem {
    Problem::with_status(
        status,
        AwfError::new(ErrorCode::UserInputValidationFailed, message).with_hint(hint),
    )
}

/// The UTF-8 encoding of U+FEFF, the byte-order mark.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// The encoding of a body that is UTF-16 or UTF-32 text, and how that shows: its byte-order
/// mark, or without one the NUL bytes around its first characters, which are ASCII in any
/// JSON text (RFC 4627 §3: `00 00 00 xx` UTF-32BE, `00 xx 00 xx` UTF-16BE, `xx 00 00 00`
/// UTF-32LE, `xx 00 xx 00` UTF-16LE; a body of 2 or 3 bytes is read on its first two).
/// `None` for anything else (UTF-8 text has no NUL there).
fn utf16_or_32(b: &[u8]) -> Option<(&'static str, &'static str)> {
    const BOM: &str = "it starts with a byte-order mark";
    const NULS: &str = "no byte-order mark, NUL bytes between its first characters";
    let nul = |i: usize| b.get(i).map(|&c| c == 0);
    Some(match b {
        [0x00, 0x00, 0xFE, 0xFF, ..] => ("UTF-32BE", BOM),
        [0xFF, 0xFE, 0x00, 0x00, ..] => ("UTF-32LE", BOM),
        [0xFE, 0xFF, ..] => ("UTF-16BE", BOM),
        [0xFF, 0xFE, ..] => ("UTF-16LE", BOM),
        _ => match (nul(0)?, nul(1)?, nul(2), nul(3)) {
            (true, true, Some(true), Some(false)) => ("UTF-32BE", NULS),
            (true, false, None | Some(true), None | Some(false)) => ("UTF-16BE", NULS),
            (false, true, Some(true), Some(true)) => ("UTF-32LE", NULS),
            (false, true, None | Some(false), None | Some(true)) => ("UTF-16LE", NULS),
            _ => return None,
        },
    })
}

/// A JSON request body of type `T`. An empty body is taken as `{}`; a leading UTF-8
/// byte-order mark is skipped (RFC 8259 §8.1); UTF-16 or UTF-32 text, with or without a
/// byte-order mark, is a 400 naming the encoding (`utf16_or_32`). Rejections are problem
/// documents: 413 over [`BODY_LIMIT`], 400 for text that is not JSON and for an object that
/// repeats a key at any depth (serde_json would keep the last value silently; the problem
/// names the key and its JSON Pointer), 422 for JSON that is not an object (`[]`, `1`,
/// `"x"`) or does not have `T`'s shape (unknown fields included).
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|r| {
            let status = r.status();
            if status == StatusCode::PAYLOAD_TOO_LARGE {
                bad_input(
                    status,
                    format!("the request body is larger than {BODY_LIMIT} bytes"),
                    "send a smaller body (at most 1 MiB)",
                )
            } else {
                bad_input(
                    StatusCode::BAD_REQUEST,
                    format!("the request body could not be read: {r}"),
                    "send a JSON body",
                )
            }
        })?;
        // A UTF-8 byte-order mark before the JSON text is skipped: RFC 8259 §8.1 lets a
        // parser ignore it (senders must not add one, yet Windows tools do), as the MCP
        // server and the workflow loader skip it. A UTF-16 one says the body is not UTF-8.
        let bytes = bytes.strip_prefix(UTF8_BOM).unwrap_or(&bytes);
        if let Some((encoding, how)) = utf16_or_32(bytes) {
            return Err(bad_input(
                StatusCode::BAD_REQUEST,
                format!("the request body is {encoding} text ({how}): JSON over HTTP is UTF-8"),
                "send the body encoded as UTF-8",
            ));
        }
        let value: Value = if bytes.iter().all(u8::is_ascii_whitespace) {
            Value::Object(serde_json::Map::new())
        } else {
            parse_unique(bytes).map_err(|e| {
                let e = match e {
                    NotUnique::Repeated(r) => return repeated_key_problem(&r),
                    NotUnique::Json(e) => e,
                };
                // serde_json says "unexpected end of hex escape" for `"\ud800"`: name it.
                match lone_surrogate(bytes).filter(|l| (l.line, l.column) <= (e.line(), e.column()))
                {
                    Some(l) => bad_input(
                        StatusCode::BAD_REQUEST,
                        format!(
                            "the request body's string escape {} at line {}, column {} is a lone \
                             UTF-16 surrogate: it stands for no character",
                            l.escape, l.line, l.column
                        ),
                        "write a character outside the Basic Multilingual Plane as a surrogate \
                         pair (\\ud83d\\ude00) or as UTF-8 text",
                    ),
                    None => bad_input(
                        StatusCode::BAD_REQUEST,
                        format!("the request body is not JSON: {e}"),
                        "send a JSON object, e.g. {\"inputs\": {\"name\": \"value\"}}",
                    ),
                }
            })?
        };
        if !value.is_object() {
            return Err(bad_input(
                StatusCode::UNPROCESSABLE_ENTITY,
                "the request body is JSON but not an object".to_owned(),
                "send a JSON object, e.g. {} or {\"inputs\": {\"name\": \"value\"}}",
            ));
        }
        let t = serde_json::from_value(value).map_err(|e| {
            bad_input(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("the request body does not have the expected shape: {e}"),
                "see /openapi.json for the request's schema",
            )
        })?;
        Ok(Self(t))
    }
}

/// The 400 for a body whose object repeats a key.
fn repeated_key_problem(r: &RepeatedKey) -> Problem {
    bad_input(
        StatusCode::BAD_REQUEST,
        format!(
            "the request body repeats the key {:?} (at {}): each key of a JSON object must \
             appear once",
            r.key,
            r.pointer()
        ),
        "send each key once: {\"inputs\": {\"a\": 1, \"b\": 2}}, not {\"inputs\": {\"a\": 1}, \
         \"inputs\": {\"b\": 2}}",
    )
}

/// A `\uXXXX` escape in a JSON string that is half of a UTF-16 surrogate pair without its
/// other half (`"\ud800"`, `"\udc00"`, `"\ud800\u0041"`).
#[derive(Debug, PartialEq, Eq)]
struct LoneSurrogate {
    /// The escape as written (`\ud800`).
    escape: String,
    /// 1-based line of its backslash.
    line: usize,
    /// 1-based column (in bytes, as serde_json counts) of its backslash.
    column: usize,
}

/// The first lone surrogate escape inside a string of the JSON text `bytes`, if any (the text
/// need not parse: it is read only as far as strings and escapes go).
fn lone_surrogate(bytes: &[u8]) -> Option<LoneSurrogate> {
    let unit = |at: usize| -> Option<u16> {
        let hex = bytes.get(at..at + 6)?;
        if hex[0] != b'\\' || hex[1] != b'u' {
            return None;
        }
        u16::from_str_radix(std::str::from_utf8(&hex[2..]).ok()?, 16).ok()
    };
    let (mut i, mut in_string) = (0, false);
    while let Some(&b) = bytes.get(i) {
        match b {
            b'"' => in_string = !in_string,
            b'\\' if in_string => {
                let Some(u) = unit(i) else {
                    i += 2;
                    continue;
                };
                let lone = match u {
                    0xD800..=0xDBFF => match unit(i + 6) {
                        Some(0xDC00..=0xDFFF) => {
                            i += 12;
                            continue;
                        }
                        _ => true,
                    },
                    0xDC00..=0xDFFF => true,
                    _ => false,
                };
                if lone {
                    let before = &bytes[..i];
                    let line_start = before
                        .iter()
                        .rposition(|&c| c == b'\n')
                        .map_or(0, |n| n + 1);
                    return Some(LoneSurrogate {
                        escape: String::from_utf8_lossy(&bytes[i..i + 6]).into_owned(),
                        line: before.iter().filter(|&&c| c == b'\n').count() + 1,
                        column: i - line_start + 1,
                    });
                }
                i += 6;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Middleware: any error response that is not a problem document yet (axum's own 405, a
/// path that does not decode, …) becomes one, keeping its status and headers (`Allow`).
pub(crate) async fn problems_only(request: Request, next: axum::middleware::Next) -> Response {
    let r = next.run(request).await;
    let status = r.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return r;
    }
    let is_problem = r
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/problem+json"));
    if is_problem {
        return r;
    }
    let (parts, body) = r.into_parts();
    let text = axum::body::to_bytes(body, 64 << 10)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let (code, detail, hint) = match status {
        StatusCode::METHOD_NOT_ALLOWED => (
            ErrorCode::UserInputValidationFailed,
            "this route does not take that method".to_owned(),
            "see /openapi.json for each route's methods (the Allow header lists them)",
        ),
        StatusCode::NOT_FOUND => (
            ErrorCode::UserInputValidationFailed,
            "no such route".to_owned(),
            "see /openapi.json (or /docs) for the routes",
        ),
        s if s.is_server_error() => (
            ErrorCode::SystemInternal,
            if text.is_empty() {
                "internal error".to_owned()
            } else {
                text
            },
            "this is a bug in awf serve; the server's log may say more",
        ),
        _ => (
            ErrorCode::UserInputValidationFailed,
            if text.is_empty() {
                "the request was refused".to_owned()
            } else {
                text
            },
            "see /openapi.json for the request's shape",
        ),
    };
    let mut out =
        Problem::with_status(status, AwfError::new(code, detail).with_hint(hint)).into_response();
    for (k, v) in &parts.headers {
        if k != header::CONTENT_TYPE && k != header::CONTENT_LENGTH {
            out.headers_mut().insert(k.clone(), v.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lone_surrogate_escapes_are_found_and_pairs_are_not() {
        let at = |t: &str| lone_surrogate(t.as_bytes()).map(|l| (l.escape, l.line, l.column));
        assert_eq!(at(r#"{"x":"\ud800"}"#), Some((r"\ud800".into(), 1, 7)));
        assert_eq!(
            at("{\n \"x\":\"a\\uDC00\"}"),
            Some((r"\uDC00".into(), 2, 8))
        );
        assert_eq!(
            at(r#"{"x":"\ud800\u0041"}"#),
            Some((r"\ud800".into(), 1, 7))
        );
        assert_eq!(at(r#"{"x":"\ud800"#), Some((r"\ud800".into(), 1, 7)));
        assert_eq!(at(r#"{"x":"\ud83d\ude00 \u0041 \\ud800 \""}"#), None);
        assert_eq!(at(r#"{"\ud800": 1, "#), Some((r"\ud800".into(), 1, 3)));
        assert_eq!(at(r"\ud800 outside a string"), None);
        assert_eq!(at(r#"{"x":"\u12"}"#), None);
    }

    #[test]
    fn statuses_follow_the_code() {
        let p = Problem::from_error(AwfError::new(ErrorCode::UserFacadeRunNotFound, "x"));
        assert_eq!(p.status, StatusCode::NOT_FOUND);
        let p = Problem::from_error(AwfError::new(ErrorCode::UserInputValidationFailed, "x"));
        assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY);
        let p = Problem::from_error(AwfError::new(ErrorCode::UserFacadeRunLimit, "x"));
        assert_eq!(p.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(p.retry_after, Some(1));
        let p = Problem::from_error(AwfError::new(ErrorCode::SystemIoReadFailed, "x"));
        assert_eq!(p.status, StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[test]
    fn the_document_carries_code_hints_and_errors() {
        let p = Problem::from_error(
            AwfError::new(ErrorCode::WorkflowValidationCycleDetected, "bad").with_hint("fix"),
        )
        .with_errors(vec!["a".into(), "b".into()]);
        let d = serde_json::to_value(p.doc()).unwrap();
        assert_eq!(d["status"], 422);
        assert_eq!(d["code"], "WORKFLOW.VALIDATION.CYCLE_DETECTED");
        assert_eq!(d["hints"][0], "fix");
        assert_eq!(d["errors"][1], "b");
        assert_eq!(d["type"], "about:blank");
    }

    /// The hint naming `awf run <workflow> --help` names the workflow's route over HTTP
    /// (the general one when the route is not known), never the command.
    #[test]
    fn the_inputs_help_hint_names_the_workflows_route() {
        let e = AwfError::new(ErrorCode::UserInputValidationFailed, "bad")
            .with_hint("`awf run <workflow> --help` lists each input with its type and rules");
        let d = Problem::from_error(for_http(
            e.clone(),
            "inputs",
            "POST /api/workflows/env/x/validate",
        ))
        .doc();
        assert_eq!(
            d.hints,
            [
                "GET /api/workflows/env/x lists each input with its type and rules (`inputs[]`: \
              `type`, `required`, `enum_values`, `pattern`, `min`, `max`, `file_exists`, \
              `file_extension`)"
            ]
        );
        let d = Problem::from_error_in(e, "input_overrides").doc();
        assert!(
            d.hints[0].starts_with("GET /api/workflows/{scope}/{name} lists each input"),
            "{:?}",
            d.hints
        );
    }

    #[test]
    fn command_line_hints_are_said_for_http() {
        let e = AwfError::new(ErrorCode::UserInputValidationFailed, "missing")
            .with_hint("pass the missing inputs: --input who=<value> --input n=<value>")
            .with_hint("allowed values for env: dev, prod");
        let d = Problem::from_error(e).doc();
        assert_eq!(
            d.hints[0],
            r#"add "who", "n" to "inputs": {"inputs": {"who": "<value>", "n": "<value>"}}"#
        );
        assert_eq!(d.hints[1], "allowed values for env: dev, prod");
        assert!(
            d.hints.iter().all(|h| !h.contains("--input")),
            "{:?}",
            d.hints
        );
        let e = AwfError::new(ErrorCode::UserInputValidationFailed, "secret")
            .with_hint("give them again: --input token=<value>");
        let d = Problem::from_error_in(e, "input_overrides").doc();
        assert_eq!(
            d.hints[0],
            r#"give them again: {"input_overrides": {"token": "<value>"}}"#
        );
    }

    /// A name that is not a plain word is quoted in the command-line hint (`--input 'in
    /// put=<value>'`, `--from 'my step'`); said for HTTP, it is the name itself, unquoted.
    #[test]
    fn quoted_names_in_command_line_hints_are_read_as_the_shell_reads_them() {
        let e = AwfError::new(ErrorCode::UserInputValidationFailed, "missing")
            .with_hint("pass the missing inputs: --input 'in put=<value>' --input n=<value>");
        assert_eq!(
            Problem::from_error(e).doc().hints[0],
            r#"add "in put", "n" to "inputs": {"inputs": {"in put": "<value>", "n": "<value>"}}"#
        );
        let e = AwfError::new(ErrorCode::UserInputValidationFailed, "secret")
            .with_hint("awf resume r1 --from 'my step' --input 'it'\\''s=<value>'");
        assert_eq!(
            Problem::from_error_in(e, "input_overrides").doc().hints[0],
            r#"POST /api/executions/r1/resume with {"from_step": "my step", "input_overrides": {"it's": "<value>"}}"#
        );
    }

    /// UTF-16 and UTF-32 are told apart with or without a byte-order mark (RFC 4627 §3);
    /// UTF-8 JSON, with or without its mark, is none of them.
    #[test]
    fn utf16_and_utf32_are_found_with_or_without_a_mark() {
        let enc = |b: &[u8]| super::utf16_or_32(b).map(|(e, _)| e);
        assert_eq!(enc(&[0, 0, 0, b'{']), Some("UTF-32BE"));
        assert_eq!(enc(&[b'{', 0, 0, 0]), Some("UTF-32LE"));
        assert_eq!(enc(&[0, b'{', 0, b'}']), Some("UTF-16BE"));
        assert_eq!(enc(&[b'{', 0, b'}', 0]), Some("UTF-16LE"));
        assert_eq!(enc(&[b'{', 0]), Some("UTF-16LE"));
        assert_eq!(enc(&[0, b'{']), Some("UTF-16BE"));
        assert_eq!(enc(&[0, 0, 0xFE, 0xFF, 0, 0, 0, b'{']), Some("UTF-32BE"));
        assert_eq!(enc(&[0xFF, 0xFE, 0, 0, b'{', 0, 0, 0]), Some("UTF-32LE"));
        assert_eq!(enc(&[0xFE, 0xFF, 0, b'{']), Some("UTF-16BE"));
        assert_eq!(enc(&[0xFF, 0xFE, b'{', 0]), Some("UTF-16LE"));
        for utf8 in [&b"{}"[..], b"{\"a\": 1}", b"", b"{", b"[1]", b"\x00"] {
            assert_eq!(enc(utf8), None, "{utf8:?}");
        }
    }

    /// An unknown run's hint names the HTTP route, not `awf history` (breaker).
    #[test]
    fn the_unknown_run_hint_names_the_history_route() {
        let e = AwfError::new(ErrorCode::UserInputValidationFailed, "no run")
            .with_hint("`awf history` lists recorded runs; a unique prefix of a run id is enough");
        assert_eq!(
            Problem::from_error(e).doc().hints[0],
            "GET /api/history lists recorded runs; a unique prefix of a run id is enough"
        );
    }

    /// A resume's hints name the body's `from_step`, not `--from` (a tester got "`--from`
    /// takes `current`, …" from `POST …/resume`).
    #[test]
    fn resume_hints_name_from_step() {
        let e = AwfError::new(ErrorCode::UserInputValidationFailed, "state not found")
            .with_hint("--from takes `current`, `previous` or one of its states: a, b");
        let d = Problem::from_error_in(e, "input_overrides").doc();
        assert_eq!(
            d.hints,
            ["`from_step` takes `current`, `previous` or one of its states: a, b"]
        );
        let e = AwfError::new(ErrorCode::UserInputValidationFailed, "terminal")
            .with_hint(
                "resume where the run stopped (`awf resume r1`) or from a state that runs (`--from <state>`)",
            )
            .with_hint("`awf resume --list` shows runs that can be resumed")
            .with_hint("awf resume r1 --from b --input token=<value>");
        let d = Problem::from_error_in(e, "input_overrides").doc();
        assert!(
            d.hints
                .iter()
                .all(|h| !h.contains("--") && !h.contains("awf ")),
            "{:?}",
            d.hints
        );
        assert!(
            d.hints[0].contains(r#"{"from_step": "<state>"}"#),
            "{:?}",
            d.hints
        );
        assert_eq!(
            d.hints[2],
            r#"POST /api/executions/r1/resume with {"from_step": "b", "input_overrides": {"token": "<value>"}}"#
        );
    }

    /// A resume from a state the workflow lost names `from_step`, and `awf list` is its
    /// route (both were said the command line's way).
    #[test]
    fn lost_state_and_workflow_hints_are_said_for_http() {
        assert_eq!(
            http_hint(
                "the workflow changed since the run stopped: resume from a state it still has \
                 with `--from <state>` (or `--from previous`), or start a new run",
                "input_overrides"
            ),
            "the workflow changed since the run stopped: resume from a state it still has with \
             {\"from_step\": \"<state>\"} (or {\"from_step\": \"previous\"}), or start a new run"
        );
        assert_eq!(
            http_hint("run `awf list` to see the available workflows", "inputs"),
            "GET /api/workflows lists the available workflows"
        );
    }

    /// `awf resume ID …` is the route of the run it names (the top-level run of a
    /// sub-workflow's run is another run than the one asked for), with the resume body's
    /// keys whatever the route answering (`input_overrides`, not the run body's `inputs`).
    #[test]
    fn a_resume_command_is_its_route() {
        assert_eq!(
            http_hint("awf resume top1", "inputs"),
            "POST /api/executions/top1/resume"
        );
        assert_eq!(
            http_hint("awf resume top1 --input api_token=<value>", "inputs"),
            r#"POST /api/executions/top1/resume with {"input_overrides": {"api_token": "<value>"}}"#
        );
        assert_eq!(
            http_hint("awf resume top1 --from previous", "input_overrides"),
            r#"POST /api/executions/top1/resume with {"from_step": "previous"}"#
        );
        // Not a whole command: left to the other rules.
        assert_eq!(
            http_hint("awf resume --list", "inputs"),
            "awf resume --list"
        );
        assert_eq!(
            http_hint("awf resume top1 --yes", "inputs"),
            "awf resume top1 --yes"
        );
    }

    /// An invalid workflow's message names the validate route (whose `errors` lists every
    /// error), not `awf validate`.
    #[test]
    fn more_errors_name_the_validate_route() {
        let e = AwfError::new(
            ErrorCode::WorkflowValidationMissingState,
            "states.a.on_success: no state x (and 4 more error(s); run `awf validate` to see all)",
        );
        let d = Problem::from_error(for_http(
            e.clone(),
            "inputs",
            "POST /api/workflows/local/w/validate",
        ))
        .doc();
        assert_eq!(
            d.detail,
            "states.a.on_success: no state x (and 4 more error(s); \
             `POST /api/workflows/local/w/validate` lists them all)"
        );
        let d = Problem::from_error(e).doc();
        assert!(
            d.detail
                .ends_with("`POST /api/workflows/{scope}/{name}/validate` lists them all)"),
            "{}",
            d.detail
        );
    }
}
