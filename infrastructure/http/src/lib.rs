//! `awf serve`: the HTTP API over the run service (first slice).
//!
//! Routes (shared/spec/http-ops.md §1.2, AWF (Go)'s paths and shapes):
//! - `GET /api/workflows` → 200 `{"body":{"workflows":[{name, scope, workflow, version,
//!   description}]}}`
//! - `POST /api/workflows/{scope}/{name}/run` with `{"inputs":{…}}` → 202
//!   `{"body":{"execution_id":"…","status":"accepted"}}`
//! - `GET /api/executions/{id}` → 200 `{"body":{execution_id, workflow_name, status,
//!   current_step, phase, exit_code, states}}` (status: `running|completed|failed|cancelled`;
//!   `states`: name → `{"status"}` for a run in memory, `null` for one read from the store)
//! - `GET /api/executions` → 200 `{"body":{"executions":[…]}}`: live runs, then those
//!   finished in memory, then recorded ones (the execution body without `states`)
//! - `DELETE /api/executions/{id}` → 204 (cancel, idempotent; 404 for a run never seen)
//! - `GET /api/executions/{id}/events` → `text/event-stream`: one frame per event of the
//!   run's log, `event:` = the event's `type`, `id:` = its log position, `data:` = the event
//!   envelope as JSON; replay after `Last-Event-ID` (or `?after=N`) with no gap and no
//!   duplicate; the stream ends after the run's final event; 404 for an unknown run.
//!
//! Errors are RFC 9457 problem documents (`application/problem+json`) with `title`,
//! `status`, `detail`, `code` (the taxonomy code, domain/src/error.rs) and `hints`.

use std::sync::Arc;
use std::time::Duration;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::facade::RunRequest;
use awf_domain::ports::repository::WorkflowRepository;
use awf_domain::ports::service::RunService;
use awf_domain::ports::service::Subscription;
use awf_domain::ports::service::SubscriptionItem;
use awf_domain::ports::store::StoredStatus;
use awf_domain::run::CancelReason;
use awf_domain::run::RunId;
use axum::Json;
use axum::Router;
use axum::extract::Path;
use axum::extract::Query;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::response::sse::Event;
use axum::response::sse::KeepAlive;
use axum::response::sse::Sse;
use axum::routing::get;
use axum::routing::post;
use serde_json::Map;
use serde_json::Value;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// What the server needs: the run service, the workflow repository, and what every run
/// started over HTTP gets (environment, working directory, configuration inputs).
#[derive(Clone)]
pub struct HttpConfig {
    /// The run service (`crate::wiring::served_run_service` in the binary).
    pub service: Arc<dyn RunService>,
    /// Where workflows are listed and found.
    pub repository: Arc<dyn WorkflowRepository>,
    /// Process environment of the runs.
    pub env: Vec<(String, String)>,
    /// Working directory of the runs.
    pub working_dir: std::path::PathBuf,
    /// Project configuration inputs (lower precedence than the request's).
    pub config_inputs: Map<String, Value>,
    /// The bearer token every `/api` request must carry (`Authorization: Bearer <token>`),
    /// compared in constant time; `None` = no authentication (loopback only). Never logged.
    pub token: Option<String>,
    /// How long, after shutdown was asked, open connections (SSE streams of cancelled
    /// runs) get to finish before the server returns.
    pub drain: Duration,
}

impl std::fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpConfig")
            .field("working_dir", &self.working_dir)
            .field("drain", &self.drain)
            .finish_non_exhaustive()
    }
}

/// An error answered as an RFC 9457 problem document.
#[derive(Debug)]
pub struct Problem {
    status: StatusCode,
    error: AwfError,
}

impl Problem {
    /// The problem for an error, its HTTP status chosen from its code: not found → 404,
    /// the run cap → 429, other `USER.*` and `WORKFLOW.*` → 422, the rest → 500.
    pub fn from_error(error: AwfError) -> Self {
        let code = error.code();
        let status = match code {
            ErrorCode::UserFacadeRunNotFound
            | ErrorCode::UserFacadeWorkflowNotFound
            | ErrorCode::UserInputMissingFile => StatusCode::NOT_FOUND,
            ErrorCode::UserFacadeRunLimit => StatusCode::TOO_MANY_REQUESTS,
            c if c.as_str().starts_with("USER.") || c.as_str().starts_with("WORKFLOW.") => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self { status, error }
    }

    /// A problem with an explicit status.
    pub fn with_status(status: StatusCode, error: AwfError) -> Self {
        Self { status, error }
    }
}

impl From<AwfError> for Problem {
    fn from(e: AwfError) -> Self {
        Self::from_error(e)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = json!({
            "type": "about:blank",
            "title": self.status.canonical_reason().unwrap_or("Error"),
            "status": self.status.as_u16(),
            "detail": self.error.message(),
            "code": self.error.code().as_str(),
            "hints": self.error.hints(),
        });
        let mut r = (self.status, Json(body)).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        r
    }
}

/// The router with every route of this slice.
pub fn router(cfg: HttpConfig) -> Router {
    let cfg = Arc::new(cfg);
    Router::new()
        .route("/api/workflows", get(list_workflows))
        .route("/api/workflows/{scope}/{name}/run", post(run_workflow))
        .route("/api/executions", get(list_executions))
        .route(
            "/api/executions/{id}",
            get(get_execution).delete(cancel_execution),
        )
        .route("/api/executions/{id}/events", get(stream_events))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&cfg),
            require_token,
        ))
        .with_state(cfg)
}

/// Whether `a` and `b` are equal, in time that depends only on their lengths (not on where
/// they differ).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().max(b.len());
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..n {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= x ^ y;
    }
    diff == 0
}

async fn require_token(
    State(cfg): State<Arc<HttpConfig>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Some(token) = &cfg.token {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if !constant_time_eq(given.as_bytes(), token.as_bytes()) {
            let mut r = Problem::with_status(
                StatusCode::UNAUTHORIZED,
                AwfError::new(
                    ErrorCode::UserFacadeUnauthorized,
                    "missing or wrong bearer token",
                )
                .with_hint("send `Authorization: Bearer <token>`"),
            )
            .into_response();
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return r;
        }
    }
    next.run(request).await
}

/// Serves `router(cfg)` on `listener` until `shutdown` is cancelled; then stops accepting,
/// cancels every live run (`CancelReason::Terminate`) and gives open connections
/// `cfg.drain` to end.
///
/// # Errors
/// `SYSTEM.IO.WRITE_FAILED` when the server fails.
pub async fn serve(
    cfg: HttpConfig,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> Result<(), AwfError> {
    let service = Arc::clone(&cfg.service);
    let drain = cfg.drain;
    let app = router(cfg);
    let stop = shutdown.clone();
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        stop.cancelled().await;
        cancel_live(service.as_ref());
    });
    let mut server = std::pin::pin!(server.into_future());
    tokio::select! {
        r = &mut server => r.map_err(io_err)?,
        () = async {
            shutdown.cancelled().await;
            tokio::time::sleep(drain).await;
        } => {}
    }
    Ok(())
}

fn io_err(e: std::io::Error) -> AwfError {
    AwfError::new(
        ErrorCode::SystemIoWriteFailed,
        format!("the HTTP server failed: {e}"),
    )
}

fn cancel_live(service: &dyn RunService) {
    if let Ok(runs) = service.list() {
        for r in runs {
            if r.phase == awf_domain::ports::service::RunPhase::Live {
                let _ = service.cancel(&r.run_id, CancelReason::Terminate);
            }
        }
    }
}

async fn not_found() -> Problem {
    Problem::with_status(
        StatusCode::NOT_FOUND,
        AwfError::new(ErrorCode::UserInputValidationFailed, "no such route")
            .with_hint("routes: /api/workflows, /api/executions/{id}[/events]"),
    )
}

fn envelope(v: Value) -> Json<Value> {
    Json(json!({ "body": v }))
}

async fn list_workflows(State(cfg): State<Arc<HttpConfig>>) -> Result<Json<Value>, Problem> {
    let entries = cfg.repository.list()?;
    let workflows: Vec<Value> = entries
        .into_iter()
        .map(|e| {
            json!({
                "name": e.name,
                "scope": e.source,
                "workflow": e.name,
                "version": e.version.unwrap_or_default(),
                "description": e.description.unwrap_or_default(),
            })
        })
        .collect();
    Ok(envelope(json!({ "workflows": workflows })))
}

/// The identifier a `{scope}/{name}` path names (http-ops.md §1.2 scope grammar): the bare
/// name for `local`, `global` and `env`, else `scope/name` (a workflow pack).
pub fn identifier(scope: &str, name: &str) -> String {
    match scope {
        "local" | "global" | "env" => name.to_owned(),
        _ => format!("{scope}/{name}"),
    }
}

/// Turns the request's `inputs` object into `key=value` pairs: strings as they are, other
/// values as their JSON text.
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` when `inputs` is present and not an object.
pub fn inputs_of(body: &Value) -> Result<Vec<(String, String)>, AwfError> {
    match body.get("inputs") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(m)) => Ok(m
            .iter()
            .map(|(k, v)| {
                let s = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), s)
            })
            .collect()),
        Some(_) => Err(AwfError::new(
            ErrorCode::UserInputValidationFailed,
            "`inputs` must be a JSON object",
        )
        .with_hint(r#"send {"inputs": {"name": "value"}}"#)),
    }
}

async fn run_workflow(
    State(cfg): State<Arc<HttpConfig>>,
    Path((scope, name)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Result<Response, Problem> {
    let value: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Object(Map::new())
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            Problem::with_status(
                StatusCode::BAD_REQUEST,
                AwfError::new(
                    ErrorCode::UserInputValidationFailed,
                    format!("the request body is not JSON: {e}"),
                )
                .with_hint(r#"send {"inputs": {"name": "value"}}"#),
            )
        })?
    };
    let inputs = inputs_of(&value)?;
    let request = RunRequest {
        identifier: identifier(&scope, &name),
        inputs,
        config_inputs: cfg.config_inputs.clone(),
        env: cfg.env.clone(),
        working_dir: cfg.working_dir.clone(),
        ..RunRequest::default()
    };
    let id = cfg.service.start(request).await?;
    let r = (
        StatusCode::ACCEPTED,
        envelope(json!({ "execution_id": id.0, "status": "accepted" })),
    );
    Ok(r.into_response())
}

/// AWF (Go)'s status name for a stored status.
pub fn status_name(s: StoredStatus) -> &'static str {
    match s {
        StoredStatus::Running => "running",
        StoredStatus::Success => "completed",
        StoredStatus::Failure => "failed",
        StoredStatus::Cancelled => "cancelled",
        StoredStatus::Waiting => "waiting",
    }
}

fn execution_json(v: awf_domain::ports::service::RunView) -> Value {
    json!({
        "execution_id": v.run_id.0,
        "workflow_name": v.workflow,
        "status": status_name(v.status),
        "current_step": v.current_state.unwrap_or_default(),
        "phase": v.phase,
        "exit_code": v.exit_code,
    })
}

async fn list_executions(State(cfg): State<Arc<HttpConfig>>) -> Result<Json<Value>, Problem> {
    let runs: Vec<Value> = cfg
        .service
        .list()?
        .into_iter()
        .filter(|v| v.parent_run_id.is_none())
        .map(execution_json)
        .collect();
    Ok(envelope(json!({ "executions": runs })))
}

async fn get_execution(
    State(cfg): State<Arc<HttpConfig>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, Problem> {
    let run_id = RunId(id);
    let v = cfg.service.get(&run_id)?;
    let states = match cfg.service.subscribe(&run_id, 1) {
        Ok(sub) => Value::Object(states_so_far(sub, &run_id)),
        Err(_) => Value::Null,
    };
    let mut body = execution_json(v);
    if let Value::Object(m) = &mut body {
        m.insert("states".to_owned(), states);
    }
    Ok(envelope(body))
}

/// The run's top-level states as its log shows them now: state name → `{"status"}`
/// (`running` once started, then the status its `step_finished` carries). Reads only what
/// the log holds already (never waits for the next event).
fn states_so_far(mut sub: Box<dyn Subscription>, run_id: &RunId) -> Map<String, Value> {
    use futures::FutureExt;
    let mut states = Map::new();
    while let Some(Some(item)) = sub.next().now_or_never() {
        let SubscriptionItem::Event { envelope, .. } = item else {
            continue;
        };
        if envelope.run_id != *run_id {
            continue;
        }
        let Ok(v) = serde_json::to_value(&envelope.event) else {
            continue;
        };
        match v.get("type").and_then(Value::as_str) {
            Some("step_started") => {
                if let Some(step) = v.get("step").and_then(Value::as_str) {
                    states.insert(step.to_owned(), json!({ "status": "running" }));
                }
            }
            Some("step_finished") => {
                let st = v.get("state");
                let name = st.and_then(|s| s.get("name")).and_then(Value::as_str);
                let status = st.and_then(|s| s.get("status")).cloned();
                if let (Some(n), Some(status)) = (name, status) {
                    states.insert(n.to_owned(), json!({ "status": status }));
                }
            }
            _ => {}
        }
    }
    states
}

async fn cancel_execution(
    State(cfg): State<Arc<HttpConfig>>,
    Path(id): Path<String>,
) -> Result<StatusCode, Problem> {
    let id = RunId(id);
    match cfg.service.cancel(&id, CancelReason::Requested) {
        Ok(()) => Ok(StatusCode::NO_CONTENT),
        // Not live: finished already (idempotent, 204) or never seen (404).
        Err(e) => match cfg.service.get(&id) {
            Ok(_) => Ok(StatusCode::NO_CONTENT),
            Err(_) => Err(e.into()),
        },
    }
}

/// The position a stream resumes after: `Last-Event-ID` (the last position the client
/// got), else `?after=N`, else 0 (from the start).
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` when either is not a number.
pub fn resume_after(headers: &HeaderMap, after: Option<&str>) -> Result<u64, AwfError> {
    let bad = |what: &str, v: &str| {
        AwfError::new(
            ErrorCode::UserInputValidationFailed,
            format!("{what} {v:?} is not an event position"),
        )
        .with_hint("send the `id:` of the last event received (a number)")
    };
    if let Some(h) = headers.get("last-event-id") {
        let s = h.to_str().map_err(|_| bad("Last-Event-ID", "?"))?.trim();
        return s.parse::<u64>().map_err(|_| bad("Last-Event-ID", s));
    }
    match after {
        Some(a) => a.trim().parse::<u64>().map_err(|_| bad("after", a)),
        None => Ok(0),
    }
}

/// The SSE frame of one subscription item.
pub fn frame(item: &SubscriptionItem) -> Event {
    match item {
        SubscriptionItem::Event { position, envelope } => {
            let data = serde_json::to_value(envelope.as_ref()).unwrap_or(Value::Null);
            let name = data
                .get("event")
                .and_then(|e| e.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("event")
                .to_owned();
            Event::default()
                .event(name)
                .id(position.to_string())
                .data(data.to_string())
        }
        SubscriptionItem::Lagged { resume_seq } => Event::default()
            .event("lagged")
            .data(json!({ "resume_position": resume_seq }).to_string()),
    }
}

async fn stream_events(
    State(cfg): State<Arc<HttpConfig>>,
    Path(id): Path<String>,
    Query(q): Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let after = resume_after(&headers, q.get("after").map(String::as_str))?;
    let sub = cfg.service.subscribe(&RunId(id), after + 1)?;
    let stream = futures::stream::unfold(sub, |mut sub: Box<dyn Subscription>| async move {
        let item = sub.next().await?;
        Some((Ok::<Event, std::convert::Infallible>(frame(&item)), sub))
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret1"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn scope_grammar() {
        assert_eq!(identifier("local", "hello"), "hello");
        assert_eq!(identifier("env", "hello"), "hello");
        assert_eq!(identifier("pack", "hello"), "pack/hello");
    }

    #[test]
    fn inputs_are_strings_or_json_text() {
        let v = json!({"inputs": {"a": "x", "n": 3, "b": true}});
        let got = inputs_of(&v).unwrap();
        assert_eq!(
            got,
            vec![
                ("a".to_owned(), "x".to_owned()),
                ("n".to_owned(), "3".to_owned()),
                ("b".to_owned(), "true".to_owned()),
            ]
        );
        let e = inputs_of(&json!({"inputs": [1]})).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
    }

    #[test]
    fn resume_position_prefers_last_event_id() {
        let mut h = HeaderMap::new();
        assert_eq!(resume_after(&h, None).unwrap(), 0);
        assert_eq!(resume_after(&h, Some("4")).unwrap(), 4);
        h.insert("last-event-id", HeaderValue::from_static("7"));
        assert_eq!(resume_after(&h, Some("4")).unwrap(), 7);
        h.insert("last-event-id", HeaderValue::from_static("x"));
        assert!(resume_after(&h, None).is_err());
    }

    #[test]
    fn problem_statuses_follow_the_code() {
        let p = Problem::from_error(AwfError::new(ErrorCode::UserFacadeRunNotFound, "x"));
        assert_eq!(p.status, StatusCode::NOT_FOUND);
        let p = Problem::from_error(AwfError::new(ErrorCode::UserInputValidationFailed, "x"));
        assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY);
    }
}
