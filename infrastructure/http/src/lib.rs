//! `awf serve`: the HTTP API over the run service.
//!
//! Routes (shared/spec/http-ops.md §1.2, AWF (Go)'s paths; every JSON success body is
//! `{"body": …}`; the OpenAPI 3.1 document at `/openapi.json` is generated from the
//! handlers below and is the reference for each shape; Swagger UI at `/docs`):
//! - `GET /api/workflows`, `GET /api/workflows/{scope}/{name}`,
//!   `POST /api/workflows/{scope}/{name}/validate`, `POST /api/workflows/{scope}/{name}/run`
//!   ([`workflows`]);
//! - `GET /api/executions`, `GET|DELETE /api/executions/{id}`,
//!   `POST /api/executions/{id}/resume`, `POST /api/executions/{id}/respond`,
//!   `GET /api/executions/{id}/events` (SSE) ([`executions`]);
//! - `GET /api/history`, `GET /api/history/stats` ([`history`]);
//! - `GET /`, `GET /ui/...`: the web page ([`page`]).
//!
//! Every error is an RFC 9457 problem document (`application/problem+json`) with `title`,
//! `status`, `detail`, `code` (the taxonomy code, domain/src/error.rs) and `hints`
//! ([`problem`]): unknown route 404, wrong method 405, malformed JSON 400, a body of the wrong
//! shape 422, a body over 1 MiB 413, headers over 16 KiB 431, a URI over 8 KiB 414, a
//! state-changing request from another origin or a `Host` that does not name the server 403
//! (module `guard`), an HTTP/1.1 request without one `Host` header 400 (RFC 9112 §3.2), a
//! body that is not `application/json` 415, a body whose object repeats a key 400, two
//! `Authorization` headers 400, the run cap 429 with `Retry-After`, shutting down 503.

pub mod auth;
pub mod executions;
pub(crate) mod guard;
pub mod history;
pub mod problem;
pub mod workflows;

pub mod page;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::repository::Diagnostic;
use awf_domain::ports::repository::WorkflowRepository;
use awf_domain::ports::service::RunPhase;
use awf_domain::ports::service::RunService;
use awf_domain::ports::store::HistoryRecord;
use awf_domain::ports::store::HistoryStore;
use awf_domain::ports::store::StateStore;
use awf_domain::run::CancelReason;
use awf_domain::run::RunId;
use axum::Json;
use axum::Router;
use axum::http::HeaderValue;
use axum::http::StatusCode;
use serde::Deserialize;
use serde::Serialize;
use serde_json::Map;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use utoipa::OpenApi;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use auth::constant_time_eq;
pub use executions::frame;
pub use executions::resume_after;
pub use problem::Finding;
pub use problem::Problem;
pub use problem::ProblemDoc;
pub use workflows::identifier;
pub use workflows::inputs_of;

/// Validates a workflow by identifier as `awf validate` does: every finding (errors,
/// warnings, notes), or the error that kept it from loading (not found, YAML syntax).
pub type Validator = Arc<dyn Fn(&str) -> Result<Vec<Diagnostic>, AwfError> + Send + Sync>;

/// Of history rows, the ids of the runs recorded as `running` whose awf process is gone
/// (killed with SIGKILL, crashed): what `awf history` marks `running (process gone)` and
/// `awf history --stats` counts apart (the composition root wraps application's
/// `runs::gone_runs`). Rows of other statuses are never in the answer.
pub type GoneRuns = Arc<dyn Fn(&[HistoryRecord]) -> BTreeSet<String> + Send + Sync>;

/// What the server needs: the run service, the workflow repository, and what every run
/// started over HTTP gets (environment, working directory, configuration inputs).
#[derive(Clone)]
pub struct HttpConfig {
    /// The run service (its `max_live_runs` is `--max-runs`, its TTL `--run-ttl`).
    pub service: Arc<dyn RunService>,
    /// Where workflows are listed and found.
    pub repository: Arc<dyn WorkflowRepository>,
    /// `POST …/validate`.
    pub validator: Validator,
    /// The run history (`None`: the history routes answer 503).
    pub history: Option<Arc<dyn HistoryStore>>,
    /// The state store the service records runs in: a run that ended here and was then
    /// resumed by another process (`awf resume`) is answered from it.
    pub states: Option<Arc<dyn StateStore>>,
    /// Whether the service answers for runs other processes execute (a worker of the shared
    /// store, `awf serve --store`): then the pending requests of a recorded run in progress
    /// are read from its log too (any worker takes their answers).
    pub shared_store: bool,
    /// Process environment of the runs (the token's variable is not in it).
    pub env: Vec<(String, String)>,
    /// Working directory of the runs.
    pub working_dir: std::path::PathBuf,
    /// Project configuration inputs (lower precedence than the request's).
    pub config_inputs: Map<String, Value>,
    /// The bearer token every request must carry (`Authorization: Bearer <token>`),
    /// compared in constant time; `None` = no authentication (loopback only). Never logged.
    pub token: Option<String>,
    /// Origins allowed to call the API from a browser (CORS); empty = CORS off (no
    /// `Access-Control-*` header is ever sent). Each is `scheme://host[:port]`.
    pub cors_origins: Vec<HeaderValue>,
    /// After SIGTERM, how long running runs get to finish before they are cancelled.
    pub drain_timeout: Duration,
    /// How long an event stream may stay silent before a heartbeat comment (`:`) is sent
    /// on it (`--keep-alive`, default 15 s; more than zero).
    pub keep_alive: Duration,
    /// How long a connection may take to send a whole request head (request line and
    /// headers) before it is closed (`--header-timeout`, default 30 s; more than zero). The
    /// same clock runs while a kept-alive connection waits idle for its next request, so an
    /// idle connection is closed after it too. Bodies and responses (event streams) are not
    /// bounded by it.
    pub header_timeout: Duration,
    /// Set once shutdown began: new runs and resumes are refused with 503.
    pub draining: Arc<AtomicBool>,
    /// The runs this server started or resumed (the only ones it can hold live): the drain
    /// asks about these alone, without listing the store (which takes seconds with
    /// hundreds of recorded runs). `Default` = none yet.
    pub started: Arc<std::sync::Mutex<Vec<RunId>>>,
    /// Each event's SSE text, rendered once for all its subscribers. `Default` = empty.
    pub frames: Arc<executions::FrameCache>,
    /// Tells the runs recorded as running whose awf process is gone from those really running
    /// (`process_gone` of executions and history rows, `process_gone_count` of the stats, the
    /// stream's closing `process_gone` event); `None`: none is said to be gone (a worker of
    /// the shared store, whose queue hands such runs to another worker).
    pub process_gone: Option<GoneRuns>,
    /// The runs a `POST …/resume` of this server is resuming now (until the service has
    /// registered the new attempt): a second resume of one of them is the 409 a live run
    /// gets, not a clash with the first one's run lock. `Default` = none.
    pub resuming: Arc<executions::Resuming>,
    /// The runs another part of this process holds and drains itself (a worker of the shared
    /// store: the runs it claimed, most of them not started through this API). The drain's
    /// log lines count them with the runs this server started, so that a worker says one
    /// number; `None` = none.
    pub also_held: Option<HeldRuns>,
}

/// The ids of the runs another part of the process holds (see [`HttpConfig::also_held`]).
pub type HeldRuns = Arc<dyn Fn() -> Vec<RunId> + Send + Sync>;

impl std::fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpConfig")
            .field("working_dir", &self.working_dir)
            .field("cors_origins", &self.cors_origins)
            .field("drain_timeout", &self.drain_timeout)
            .field("keep_alive", &self.keep_alive)
            .field("header_timeout", &self.header_timeout)
            .finish_non_exhaustive()
    }
}

impl HttpConfig {
    /// Of `rows`, the ids of the runs recorded as running whose awf process is gone (see
    /// `process_gone`); none without it, or when no row says `running`.
    pub(crate) fn gone(&self, rows: &[HistoryRecord]) -> BTreeSet<String> {
        match &self.process_gone {
            Some(gone)
                if rows
                    .iter()
                    .any(|r| r.status == awf_domain::ports::store::StoredStatus::Running) =>
            {
                gone(rows)
            }
            _ => BTreeSet::new(),
        }
    }

    /// Notes a run this server started or resumed (see `started`).
    pub(crate) fn note_started(&self, id: &RunId) {
        if let Ok(mut v) = self.started.lock()
            && !v.contains(id)
        {
            v.push(id.clone());
        }
    }

    /// A 503 problem once shutdown began.
    ///
    /// # Errors
    /// The problem, while draining.
    pub(crate) fn refuse_if_draining(&self) -> Result<(), Problem> {
        if self.draining.load(Ordering::SeqCst) {
            return Err(Problem::with_status(
                StatusCode::SERVICE_UNAVAILABLE,
                AwfError::new(
                    ErrorCode::SystemResourceExhausted,
                    "the server is shutting down and starts no new run",
                )
                .with_hint("start it on another server, or once this one is back"),
            )
            .retry_after(5));
        }
        Ok(())
    }
}

/// The success envelope of every JSON answer (AWF (Go)'s, for `jq .body.execution_id`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Envelope<T> {
    /// The answer.
    pub body: T,
}

impl<T> Envelope<T> {
    /// `Json({"body": body})`.
    pub fn json(body: T) -> Json<Self> {
        Json(Self { body })
    }
}

/// Checks an origin given to `--cors-origin`: `scheme://host[:port]`, no path.
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` with the expected form.
pub fn parse_origin(text: &str) -> Result<HeaderValue, AwfError> {
    let t = text.trim().trim_end_matches('/');
    let bad = || {
        AwfError::new(
            ErrorCode::UserInputValidationFailed,
            format!("--cors-origin {text:?} is not an origin"),
        )
        .with_hint("give scheme://host[:port], e.g. --cors-origin http://localhost:3000")
    };
    let rest = t
        .strip_prefix("http://")
        .or_else(|| t.strip_prefix("https://"))
        .ok_or_else(bad)?;
    if rest.is_empty() || rest.contains('/') || rest.contains(char::is_whitespace) {
        return Err(bad());
    }
    HeaderValue::from_str(t).map_err(|_| bad())
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "awf API",
        description = "awf serve: AWF (Go)'s HTTP API over awf's run service. Every JSON success body is `{\"body\": …}`; every error an RFC 9457 problem document with the awf error `code`.",
    ),
    tags(
        (name = "workflows", description = "Workflow files: list, read, validate, run"),
        (name = "executions", description = "Runs: status, cancel, resume, answer, follow (SSE)"),
        (name = "history", description = "Recorded runs"),
    ),
    components(schemas(ProblemDoc))
)]
struct ApiDoc;

fn api_router(cfg: Arc<HttpConfig>) -> (Router, utoipa::openapi::OpenApi) {
    let mut doc = ApiDoc::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").to_owned();
    if cfg.token.is_some() {
        use utoipa::openapi::security::HttpAuthScheme;
        use utoipa::openapi::security::HttpBuilder;
        use utoipa::openapi::security::SecurityRequirement;
        use utoipa::openapi::security::SecurityScheme;
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The value of the variable `awf serve --token-env` names",
                    ))
                    .build(),
            ),
        );
        doc.security = Some(vec![SecurityRequirement::new(
            "bearer",
            Vec::<String>::new(),
        )]);
    }
    let router = OpenApiRouter::with_openapi(doc)
        .routes(routes!(workflows::list_workflows))
        .routes(routes!(workflows::get_workflow))
        .routes(routes!(workflows::validate_workflow))
        .routes(routes!(workflows::run_workflow))
        .routes(routes!(executions::list_executions))
        .routes(routes!(
            executions::get_execution,
            executions::cancel_execution
        ))
        .routes(routes!(executions::resume_execution))
        .routes(routes!(executions::respond))
        .routes(routes!(executions::stream_events))
        .routes(routes!(executions::get_execution_workflow))
        .routes(routes!(history::list_history))
        .routes(routes!(history::history_stats))
        .with_state(cfg);
    let (router, mut doc) = router.split_for_parts();
    document_host_rule(&mut doc);
    (router, doc)
}

/// What the 400 every route answers to an HTTP/1.1 request without one `Host` header (module
/// `guard`) is described as.
const NO_HOST: &str = "an HTTP/1.1 request without a `Host` header, or with more than one";

/// Adds the 400 of [`NO_HOST`] to every operation of `doc` (to its description where the
/// operation has a 400 already), with the problem document as body.
fn document_host_rule(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::RefOr;
    for item in doc.paths.paths.values_mut() {
        for op in [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        {
            let responses = &mut op.responses.responses;
            if let Some(RefOr::T(r)) = responses.get_mut("400") {
                r.description = format!("{}; or {NO_HOST}", r.description);
                continue;
            }
            // Any problem response of the operation, for its body.
            let problem = responses.values().find_map(|r| match r {
                RefOr::T(r) if r.content.contains_key("application/problem+json") => {
                    Some(r.clone())
                }
                _ => None,
            });
            if let Some(mut r) = problem {
                let mut text = NO_HOST.to_owned();
                if let Some(first) = text.get_mut(0..1) {
                    first.make_ascii_uppercase();
                }
                r.description = text;
                r.headers.clear();
                responses.insert("400".to_owned(), RefOr::T(r));
            }
        }
    }
}

/// The OpenAPI 3.1 document of the API (what `/openapi.json` serves).
pub fn openapi(cfg: HttpConfig) -> utoipa::openapi::OpenApi {
    api_router(Arc::new(cfg)).1
}

/// The router with every route: the API, `/openapi.json`, Swagger UI at `/docs`, for a
/// server on a loopback address (`Host` must be `127.0.0.1`, `localhost` or `[::1]`).
pub fn router(cfg: HttpConfig) -> Router {
    router_at(cfg, None)
}

/// [`router`] for a server bound to `local` (`None`: a loopback address, port unknown):
/// the `Host` and `Origin` checks (module `guard`) use it.
pub fn router_at(cfg: HttpConfig, local: Option<std::net::SocketAddr>) -> Router {
    let cfg = Arc::new(cfg);
    let guard = Arc::new(guard::Guard {
        local,
        cors_origins: cfg.cors_origins.clone(),
    });
    let (api, doc) = api_router(Arc::clone(&cfg));
    let swagger = utoipa_swagger_ui::SwaggerUi::new("/docs")
        .url("/openapi.json", doc)
        .config(utoipa_swagger_ui::Config::default().validator_url("none"));
    let mut app = api
        .merge(swagger)
        .merge(page::router())
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&cfg),
            auth::require_token,
        ))
        .layer(axum::middleware::from_fn_with_state(guard, guard::check))
        .layer(axum::extract::DefaultBodyLimit::max(problem::BODY_LIMIT))
        .layer(axum::middleware::from_fn(auth::limit_headers))
        .layer(axum::middleware::from_fn(problem::problems_only));
    if !cfg.cors_origins.is_empty() {
        use axum::http::Method;
        use axum::http::header;
        use tower_http::cors::AllowOrigin;
        use tower_http::cors::CorsLayer;
        app = app.layer(
            CorsLayer::new()
                .allow_origin(AllowOrigin::list(cfg.cors_origins.clone()))
                .allow_methods([Method::GET, Method::POST, Method::DELETE])
                .allow_headers([
                    header::AUTHORIZATION,
                    header::CONTENT_TYPE,
                    header::HeaderName::from_static("last-event-id"),
                ])
                .expose_headers([header::RETRY_AFTER])
                .max_age(Duration::from_secs(600)),
        );
    }
    app
}

/// Serves `router(cfg)` on `listener` until `shutdown` is cancelled; then drains: new runs
/// and resumes are answered 503 while running runs get `cfg.drain_timeout` to finish; those
/// still live then are cancelled (`CancelReason::Terminate`, recorded `cancelled`) and
/// waited for; then the listener closes and open connections get a few seconds to end.
///
/// `also_drain` is other work the drain waits for while the server still answers (new runs
/// 503, events and GETs as before), polled only once `shutdown` is cancelled: a
/// shared-store worker's claimed runs, which were not started through this server. Pass
/// `std::future::ready(())` for none.
///
/// # Errors
/// `SYSTEM.IO.WRITE_FAILED` when the server fails.
pub async fn serve(
    cfg: HttpConfig,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
    also_drain: impl std::future::Future<Output = ()>,
) -> Result<(), AwfError> {
    let service = Arc::clone(&cfg.service);
    let started = Arc::clone(&cfg.started);
    let draining = Arc::clone(&cfg.draining);
    let drain_timeout = cfg.drain_timeout;
    let header_timeout = cfg.header_timeout;
    let also_held = cfg.also_held.clone();
    let app = router_at(cfg, listener.local_addr().ok());
    let stop_http = CancellationToken::new();
    let server = accept_loop(listener, app, header_timeout, stop_http.clone());
    let mut server = std::pin::pin!(server);
    let drainer = async {
        shutdown.cancelled().await;
        draining.store(true, Ordering::SeqCst);
        // One count: the runs started here and those the worker holds (a run started
        // through this API and claimed by this process's worker counts once).
        let running = || {
            let mut ids = live_runs(service.as_ref(), &started);
            if let Some(held) = &also_held {
                for id in held() {
                    if !ids.contains(&id) {
                        ids.push(id);
                    }
                }
            }
            ids.len()
        };
        tracing::info!(
            target: "awf::serve",
            runs = running(),
            drain_timeout_ms = u64::try_from(drain_timeout.as_millis()).unwrap_or(u64::MAX),
            "draining: new runs and resumes are refused (503); running runs get the drain timeout to finish"
        );
        let own = async {
            let t0 = tokio::time::Instant::now();
            while running() > 0 && t0.elapsed() < drain_timeout {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let left = running();
            if left > 0 {
                tracing::info!(
                    target: "awf::serve",
                    runs = left,
                    "drain timeout reached: cancelling the runs still running"
                );
            }
            cancel_live(service.as_ref(), &started);
            // SIGTERM → 5 s → SIGKILL to each run's processes, then the run ends.
            wait_idle(service.as_ref(), &started, Duration::from_secs(8)).await;
        };
        tokio::join!(own, also_drain);
        stop_http.cancel();
    };
    tokio::select! {
        r = &mut server => return r.map_err(io_err),
        () = drainer => {}
    }
    // Open connections (SSE streams of the ended runs) get up to this long to close; with
    // none open the server ends at once.
    if let Ok(r) = tokio::time::timeout(Duration::from_millis(5500), &mut server).await {
        r.map_err(io_err)?;
    }
    Ok(())
}

/// Accepts connections on `listener` and serves `app` on each (HTTP/1.1 with keep-alive,
/// `TCP_NODELAY`), each connection closed when it has not sent a whole request head within
/// `header_timeout` (hyper's header read timeout, which also runs while a kept-alive
/// connection waits for its next request). Once `stop` is cancelled: the listener closes,
/// every connection is asked to end gracefully (the request in flight finishes, an event
/// stream ends when its run's final event was sent) and the loop returns when all ended
/// (what `axum::serve(..).with_graceful_shutdown(..)` does, which cannot set the timeout).
///
/// # Errors
/// None today (accept errors are retried, as axum does); the `Result` keeps `serve`'s shape.
async fn accept_loop(
    listener: tokio::net::TcpListener,
    app: Router,
    header_timeout: Duration,
    stop: CancellationToken,
) -> Result<(), std::io::Error> {
    // Each connection task holds a receiver; `closed()` resolves once all were dropped.
    let (close_tx, close_rx) = tokio::sync::watch::channel(());
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            () = stop.cancelled() => break,
        };
        let stream = match accepted {
            Ok((stream, _peer)) => stream,
            Err(e) => {
                // Per-connection errors (reset before accept) are skipped; others (too many
                // open files) get a pause before the next try.
                if !matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionRefused
                        | std::io::ErrorKind::ConnectionAborted
                        | std::io::ErrorKind::ConnectionReset
                ) {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let stop = stop.clone();
        let close_rx = close_rx.clone();
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout)
                .keep_alive(true);
            let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::trace!("connection ended: {e}");
                    }
                }
                () = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    if let Err(e) = conn.await {
                        tracing::trace!("connection ended: {e}");
                    }
                }
            }
            drop(close_rx);
        });
    }
    drop(listener);
    drop(close_rx);
    close_tx.closed().await;
    Ok(())
}

/// The runs of `started` still live (those that ended are dropped from it).
fn live_runs(service: &dyn RunService, started: &std::sync::Mutex<Vec<RunId>>) -> Vec<RunId> {
    let Ok(mut ids) = started.lock() else {
        return Vec::new();
    };
    ids.retain(|id| service.get(id).is_ok_and(|v| v.phase == RunPhase::Live));
    ids.clone()
}

async fn wait_idle(
    service: &dyn RunService,
    started: &std::sync::Mutex<Vec<RunId>>,
    limit: Duration,
) {
    let t0 = tokio::time::Instant::now();
    while !live_runs(service, started).is_empty() && t0.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn io_err(e: std::io::Error) -> AwfError {
    AwfError::new(
        ErrorCode::SystemIoWriteFailed,
        format!("the HTTP server failed: {e}"),
    )
}

fn cancel_live(service: &dyn RunService, started: &std::sync::Mutex<Vec<RunId>>) {
    for id in live_runs(service, started) {
        let _ = service.cancel(&id, CancelReason::Terminate);
    }
}

async fn not_found() -> Problem {
    Problem::with_status(
        StatusCode::NOT_FOUND,
        AwfError::new(ErrorCode::UserInputValidationFailed, "no such route")
            .with_hint("see /openapi.json (or /docs) for the routes"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_scheme_host_port() {
        assert_eq!(
            parse_origin("http://localhost:3000/").unwrap(),
            "http://localhost:3000"
        );
        assert!(parse_origin("https://example.com").is_ok());
        assert!(parse_origin("localhost:3000").is_err());
        assert!(parse_origin("http://a/b").is_err());
        assert!(parse_origin("http://").is_err());
    }
}
