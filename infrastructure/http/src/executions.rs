//! `/api/executions…`: list, get (states and pending requests), cancel, resume, respond, and
//! the SSE stream. Source: shared/spec/http-ops.md §1.2–§1.6.

use std::collections::BTreeMap;
use std::sync::Arc;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::event::RunEvent;
use awf_domain::interaction::Answer;
use awf_domain::interaction::BreakpointDecision;
use awf_domain::interaction::InteractionRequest;
use awf_domain::interaction::RequestKind;
use awf_domain::ports::facade::ResumeFrom;
use awf_domain::ports::facade::ResumeRequest;
use awf_domain::ports::service::RunPhase;
use awf_domain::ports::service::RunView;
use awf_domain::ports::service::Subscription;
use awf_domain::ports::service::SubscriptionItem;
use awf_domain::ports::store::HistoryFilter;
use awf_domain::ports::store::HistoryRecord;
use awf_domain::ports::store::StoredStatus;
use awf_domain::run::CancelReason;
use awf_domain::run::RunId;
use axum::Json;
use axum::extract::Path;
use axum::extract::Query;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::response::sse::Event;
use axum::response::sse::KeepAlive;
use axum::response::sse::Sse;
use serde::Deserialize;
use serde::Serialize;
use serde_json::Map;
use serde_json::Value;
use serde_json::json;
use utoipa::IntoParams;
use utoipa::ToSchema;

use crate::Envelope;
use crate::HttpConfig;
use crate::problem::JsonBody;
use crate::problem::Problem;
use crate::problem::ProblemDoc;
use crate::workflows::RunAccepted;
use crate::workflows::pairs;

/// A run's status, in AWF (Go)'s words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecStatus {
    /// Started, not finished.
    Running,
    /// Ended on a success terminal.
    Completed,
    /// Ended on a failure.
    Failed,
    /// Cancelled (DELETE, SIGTERM).
    Cancelled,
    /// Parked on an agent's usage limit until its reset time (`resume` continues it).
    Waiting,
}

impl From<StoredStatus> for ExecStatus {
    fn from(s: StoredStatus) -> Self {
        match s {
            StoredStatus::Running => Self::Running,
            StoredStatus::Success => Self::Completed,
            StoredStatus::Failure => Self::Failed,
            StoredStatus::Cancelled => Self::Cancelled,
            StoredStatus::Waiting => Self::Waiting,
        }
    }
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

/// Where a run is, as the server knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Driven by this server now.
    Live,
    /// Ended in this server, still in memory (until `--run-ttl`).
    Finished,
    /// Read from the store (another process's run, or evicted).
    Recorded,
}

/// One run (list item).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExecutionSummary {
    /// Run id.
    pub execution_id: String,
    /// Identifier the run was started with.
    pub workflow_name: String,
    /// Status.
    pub status: ExecStatus,
    /// The top-level state being executed (or last executed); empty when none yet.
    pub current_step: String,
    /// Where the run is.
    pub phase: Phase,
    /// Process exit code, once finished.
    pub exit_code: Option<u8>,
    /// Start (RFC 3339, UTC), from the run history; null until recorded.
    pub started_at: Option<String>,
    /// End (RFC 3339, UTC), once finished and recorded.
    pub completed_at: Option<String>,
    /// Wall time in milliseconds, once finished and recorded.
    pub duration_ms: Option<u64>,
}

/// A state's status in a run.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct StateStatus {
    /// `running` once started, then its recorded status (`completed`, `failed`, …).
    pub status: String,
}

/// One choice of an approval.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct OptionInfo {
    /// What `POST …/respond` names as `option`.
    pub id: String,
    /// Label.
    pub name: String,
    /// `allow_once`, `allow_always`, `reject_once`, `reject_always`.
    pub kind: String,
}

/// A request the run waits on (answer it with `POST /api/executions/{id}/respond`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PendingRequest {
    /// What `respond` names.
    pub request_id: String,
    /// `approval`, `missing_input`, `conversation_turn` or `breakpoint`.
    pub kind: String,
    /// The state it belongs to (none for a missing input).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// What to show: the approval's message, the input's description, the turn's prompt.
    pub prompt: String,
    /// An approval's choices (empty for other kinds).
    pub options: Vec<OptionInfo>,
    /// A missing input's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// How long the run waits, in milliseconds (none: no limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// `GET /api/executions/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExecutionDetail {
    /// The run.
    #[serde(flatten)]
    pub summary: ExecutionSummary,
    /// Top-level state name → status, from the run's event log; `null` for a run read from
    /// the store only.
    pub states: Option<BTreeMap<String, StateStatus>>,
    /// The requests the run waits on now (empty when none, and for a finished run).
    pub pending: Vec<PendingRequest>,
}

/// `GET /api/executions`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExecutionList {
    /// Live runs, then those finished in memory, then recorded ones (newest first).
    pub executions: Vec<ExecutionSummary>,
}

/// `POST /api/executions/{id}/resume` request (as `awf resume` takes it).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeBody {
    /// Input values replacing the recorded ones (strings as they are, other JSON values as
    /// their JSON text); how masked secrets are given back.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub input_overrides: Option<Map<String, Value>>,
    /// `current` (default: the state the run stopped in), `previous`, or a state that ran.
    #[serde(default)]
    pub from_step: Option<String>,
}

/// AWF (Go)'s respond payload (`{"response": {"PromptID", "Value"}}`).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct GoResponse {
    /// The request id.
    #[serde(rename = "PromptID", alias = "prompt_id", alias = "promptId", default)]
    pub prompt_id: Option<String>,
    /// The answer text (for an approval: an option id, or `approve` / `reject`); any JSON
    /// value (null: none).
    #[serde(rename = "Value", alias = "value", default)]
    pub value: Value,
}

/// `POST /api/executions/{id}/respond` request. Name the request (`request_id`; may be left
/// out when the run waits on exactly one) and give ONE answer:
/// - `value`: the text of a missing input or a conversation turn (other JSON values are
///   taken as their JSON text); for an approval, an option id or `approve`/`reject`;
/// - `option`: an approval's option id;
/// - `approved`: `true` takes the approval's first allowing option, `false` its first
///   rejecting one;
/// - `decision`: a breakpoint's `continue`, `skip`, `abort`, `retry` or `inspect`;
/// - `end_of_input: true`: no answer (a missing input is not given; a conversation ends).
///
/// AWF (Go)'s `{"response": {"PromptID": "…", "Value": "…"}}` is accepted too.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RespondBody {
    /// The pending request's id (`pending[].request_id`).
    #[serde(default)]
    pub request_id: Option<String>,
    /// A text answer: a string, or any JSON value (taken as its JSON text; null: none).
    #[serde(default)]
    pub value: Value,
    /// An approval's option id.
    #[serde(default)]
    pub option: Option<String>,
    /// Approve (`true`) or reject (`false`).
    #[serde(default)]
    pub approved: Option<bool>,
    /// A breakpoint decision.
    #[serde(default)]
    pub decision: Option<String>,
    /// Close the input without answering.
    #[serde(default)]
    pub end_of_input: Option<bool>,
    /// AWF (Go)'s shape.
    #[serde(default)]
    pub response: Option<GoResponse>,
}

/// `GET …/events` query.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Resume after this position (as `Last-Event-ID`, which wins when both are sent).
    pub after: Option<String>,
}

/// RFC 3339 of milliseconds since the epoch.
pub(crate) fn rfc3339_ms(ms: u64) -> String {
    awf_domain::timefmt::format_rfc3339(
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms),
    )
}

fn summary(v: RunView, h: Option<&HistoryRecord>) -> ExecutionSummary {
    // A history row of an earlier attempt (a resumed run now live again) has no end yet
    // that counts.
    let finished = v.phase != RunPhase::Live;
    ExecutionSummary {
        started_at: h.map(|h| rfc3339_ms(h.started_at_ms)),
        completed_at: h
            .and_then(|h| h.completed_at_ms)
            .filter(|_| finished)
            .map(rfc3339_ms),
        duration_ms: h.and_then(|h| h.duration_ms).filter(|_| finished),
        execution_id: v.run_id.0,
        workflow_name: v.workflow,
        status: v.status.into(),
        current_step: v.current_state.unwrap_or_default(),
        phase: match v.phase {
            RunPhase::Live => Phase::Live,
            RunPhase::Finished => Phase::Finished,
            RunPhase::Recorded => Phase::Recorded,
        },
        exit_code: v.exit_code,
    }
}

/// `v`, or the store's newer view of it: a run that ended in this server and was then
/// resumed by another process (`awf resume` in a terminal) is what its state file says.
pub(crate) fn fresh(cfg: &HttpConfig, v: RunView) -> RunView {
    if v.phase != RunPhase::Finished {
        return v;
    }
    let Some(states) = &cfg.states else {
        return v;
    };
    match states.load(&v.run_id.0) {
        Ok(snap) if snap.owner_pid.is_some_and(|p| p != std::process::id()) => RunView {
            run_id: v.run_id,
            parent_run_id: snap.parent_run_id.map(RunId),
            workflow: snap.workflow,
            phase: RunPhase::Recorded,
            status: snap.status,
            current_state: Some(snap.current_state).filter(|c| !c.is_empty()),
            exit_code: snap.exit_code,
        },
        _ => v,
    }
}

/// Lists runs.
#[utoipa::path(
    get,
    path = "/api/executions",
    operation_id = "list-executions",
    tag = "executions",
    responses(
        (status = 200, description = "Live, finished and recorded runs", body = Envelope<ExecutionList>),
        (status = 401, description = "Missing or wrong bearer token", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 500, description = "The store cannot be read", body = ProblemDoc, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn list_executions(
    State(cfg): State<Arc<HttpConfig>>,
) -> Result<Json<Envelope<ExecutionList>>, Problem> {
    let rows: std::collections::HashMap<String, HistoryRecord> = cfg
        .history
        .as_ref()
        .and_then(|h| h.list(&HistoryFilter::default()).ok())
        .unwrap_or_default()
        .into_iter()
        .map(|r| (r.id.clone(), r))
        .collect();
    let executions = cfg
        .service
        .list()?
        .into_iter()
        .filter(|v| v.parent_run_id.is_none())
        .map(|v| {
            let h = rows.get(&v.run_id.0);
            summary(fresh(&cfg, v), h)
        })
        .collect();
    Ok(Envelope::json(ExecutionList { executions }))
}

/// What the log of a run holds now: top-level states' statuses and unresolved requests.
#[derive(Debug, Default)]
pub(crate) struct LogSnapshot {
    pub(crate) states: BTreeMap<String, StateStatus>,
    /// Requests asked and not resolved, in order.
    pub(crate) pending: Vec<InteractionRequest>,
    /// Ids of requests that were resolved.
    pub(crate) resolved: std::collections::BTreeSet<String>,
    /// Whether the run's final event is in the log.
    pub(crate) finished: bool,
}

/// Reads what the log holds already (never waits for the next event).
pub(crate) fn snapshot(mut sub: Box<dyn Subscription>, run_id: &RunId) -> LogSnapshot {
    use futures::FutureExt;
    let mut s = LogSnapshot::default();
    while let Some(Some(item)) = sub.next().now_or_never() {
        let SubscriptionItem::Event { envelope, .. } = item else {
            continue;
        };
        let root = envelope.run_id == *run_id;
        match &envelope.event {
            RunEvent::InteractionRequired { request } => s.pending.push(request.as_ref().clone()),
            RunEvent::InteractionResolved { request_id, .. } => {
                s.pending.retain(|r| r.request_id != *request_id);
                s.resolved.insert(request_id.clone());
            }
            RunEvent::RunFinished { .. } if root => s.finished = true,
            _ if root => {
                let Ok(v) = serde_json::to_value(&envelope.event) else {
                    continue;
                };
                match v.get("type").and_then(Value::as_str) {
                    Some("step_started") => {
                        if let Some(step) = v.get("step").and_then(Value::as_str) {
                            s.states.insert(
                                step.to_owned(),
                                StateStatus {
                                    status: "running".to_owned(),
                                },
                            );
                        }
                    }
                    Some("step_finished") => {
                        let st = v.get("state");
                        let name = st.and_then(|s| s.get("name")).and_then(Value::as_str);
                        let status = st.and_then(|s| s.get("status")).and_then(Value::as_str);
                        if let (Some(n), Some(status)) = (name, status) {
                            s.states.insert(
                                n.to_owned(),
                                StateStatus {
                                    status: status.to_owned(),
                                },
                            );
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    if s.finished {
        s.pending.clear();
    }
    s
}

fn pending_of(r: &InteractionRequest) -> PendingRequest {
    let (prompt, options, input) = match &r.kind {
        RequestKind::MissingInput { input, problem } => {
            let mut p = input
                .description
                .clone()
                .unwrap_or_else(|| format!("Value for input {}", input.name));
            if let Some(why) = problem {
                p = format!("{p} ({why})");
            }
            (p, Vec::new(), Some(input.name.clone()))
        }
        RequestKind::ConversationTurn { prompt } => (prompt.clone(), Vec::new(), None),
        RequestKind::Breakpoint { .. } => (
            format!(
                "Before state {}: continue, skip, abort, retry or inspect?",
                r.step.as_deref().unwrap_or("?")
            ),
            Vec::new(),
            None,
        ),
        RequestKind::Approval { message, options } => (
            message.clone(),
            options
                .iter()
                .map(|o| OptionInfo {
                    id: o.id.clone(),
                    name: o.name.clone(),
                    kind: o.kind.as_str().to_owned(),
                })
                .collect(),
            None,
        ),
    };
    PendingRequest {
        request_id: r.request_id.clone(),
        kind: r.kind.name().to_owned(),
        step: r.step.clone(),
        prompt,
        options,
        input,
        timeout_ms: r.timeout_ms,
    }
}

/// One run, with its states and the requests it waits on.
#[utoipa::path(
    get,
    path = "/api/executions/{id}",
    operation_id = "get-execution",
    tag = "executions",
    params(("id" = String, Path, description = "Run id")),
    responses(
        (status = 200, description = "The run", body = Envelope<ExecutionDetail>),
        (status = 401, description = "Missing or wrong bearer token", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 500, description = "Its state file cannot be read", body = ProblemDoc, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn get_execution(
    State(cfg): State<Arc<HttpConfig>>,
    Path(id): Path<String>,
) -> Result<Json<Envelope<ExecutionDetail>>, Problem> {
    let run_id = RunId(id);
    let v = fresh(&cfg, cfg.service.get(&run_id)?);
    let (states, pending) = match cfg.service.subscribe(&run_id, 1) {
        Ok(_) if v.phase == RunPhase::Recorded => (None, Vec::new()),
        Ok(sub) => {
            let s = snapshot(sub, &run_id);
            (Some(s.states), s.pending.iter().map(pending_of).collect())
        }
        Err(_) => (None, Vec::new()),
    };
    let h = cfg
        .history
        .as_ref()
        .and_then(|h| h.get(&run_id.0).ok().flatten());
    Ok(Envelope::json(ExecutionDetail {
        summary: summary(v, h.as_ref()),
        states,
        pending,
    }))
}

/// Cancels a live run (idempotent).
#[utoipa::path(
    delete,
    path = "/api/executions/{id}",
    operation_id = "cancel-execution",
    tag = "executions",
    params(("id" = String, Path, description = "Run id")),
    responses(
        (status = 204, description = "Cancelled (or finished already)"),
        (status = 401, description = "Missing or wrong bearer token", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 403, description = "A cross-site request: an `Origin` that is neither this server's nor a `--cors-origin`, or a `Host` that does not name the server", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 500, description = "Its state file cannot be read", body = ProblemDoc, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn cancel_execution(
    State(cfg): State<Arc<HttpConfig>>,
    Path(id): Path<String>,
) -> Result<StatusCode, Problem> {
    let id = RunId(id);
    match cfg.service.cancel(&id, CancelReason::Requested) {
        Ok(()) => Ok(StatusCode::NO_CONTENT),
        // Not live: finished already (idempotent, 204), never seen (404), or recorded in a
        // state file that cannot be read (that error, 500: not "no such run").
        Err(e) => match cfg.service.get(&id) {
            Ok(_) => Ok(StatusCode::NO_CONTENT),
            Err(g) if g.code() == ErrorCode::UserFacadeRunNotFound => Err(e.into()),
            Err(g) => Err(g.into()),
        },
    }
}

fn conflict(message: String, hint: &str) -> Problem {
    Problem::with_status(
        StatusCode::CONFLICT,
        AwfError::new(ErrorCode::UserFacadeInputRejected, message).with_hint(hint),
    )
}

fn unfit(message: String) -> Problem {
    Problem::with_status(
        StatusCode::UNPROCESSABLE_ENTITY,
        AwfError::new(ErrorCode::UserFacadeInputRejected, message).with_hint(
            "see the request's `kind` and `options` in GET /api/executions/{id} `pending`",
        ),
    )
}

/// Resumes an interrupted, failed or cancelled run under the same id (as `awf resume`).
#[utoipa::path(
    post,
    path = "/api/executions/{id}/resume",
    operation_id = "resume-execution",
    tag = "executions",
    params(("id" = String, Path, description = "Run id")),
    request_body(content = ResumeBody, description = "Overrides and restart point (the body may be empty)", content_type = "application/json"),
    responses(
        (status = 200, description = "Resumed", body = Envelope<RunAccepted>),
        (status = 400, description = "The body is not JSON", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong bearer token", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 403, description = "A cross-site request: an `Origin` that is neither this server's nor a `--cors-origin`, or a `Host` that does not name the server", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 415, description = "A body whose `Content-Type` is not `application/json`", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 409, description = "Still running, or completed already", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 413, description = "The body is over 1 MiB", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 422, description = "The run cannot be resumed so (bad step, inputs, workflow), or a body of the wrong shape", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 429, description = "`--max-runs` runs are live (see `Retry-After`)", body = ProblemDoc, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "Seconds to wait before trying again"))),
        (status = 500, description = "Its state file cannot be read", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 503, description = "The server is shutting down", body = ProblemDoc, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn resume_execution(
    State(cfg): State<Arc<HttpConfig>>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<ResumeBody>,
) -> Result<Json<Envelope<RunAccepted>>, Problem> {
    cfg.refuse_if_draining()?;
    let run_id = RunId(id);
    let v = fresh(&cfg, cfg.service.get(&run_id)?);
    if v.phase == RunPhase::Live {
        return Err(conflict(
            format!("run {run_id} is still running"),
            "wait for it to end, or cancel it (DELETE) before resuming",
        ));
    }
    if v.status == StoredStatus::Success {
        return Err(conflict(
            format!("run {run_id} completed successfully; nothing to resume"),
            "start a new run instead",
        ));
    }
    let from = match body.from_step.as_deref().map(str::trim) {
        Some("") => {
            return Err(crate::problem::bad_input(
                StatusCode::UNPROCESSABLE_ENTITY,
                "from_step is empty".to_owned(),
                "leave from_step out (or give `current`, `previous` or a state that ran)",
            ));
        }
        None | Some("current") => ResumeFrom::Current,
        Some("previous") => ResumeFrom::Previous,
        Some(s) => ResumeFrom::Step(s.to_owned()),
    };
    let request = ResumeRequest {
        run_id: run_id.0.clone(),
        from,
        inputs: body.input_overrides.as_ref().map(pairs).unwrap_or_default(),
        config_inputs: cfg.config_inputs.clone(),
        env: cfg.env.clone(),
        working_dir: cfg.working_dir.clone(),
        ..ResumeRequest::default()
    };
    let id = cfg.service.resume(request).await?;
    Ok(Envelope::json(RunAccepted {
        execution_id: id.0,
        status: "accepted".to_owned(),
    }))
}

/// The answer a respond body gives to `request`.
///
/// # Errors
/// A 422 problem when the body gives no answer, several, or one of the wrong kind.
pub(crate) fn answer_for(body: &RespondBody, request: &RequestKind) -> Result<Answer, Problem> {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let go_value = body
        .response
        .as_ref()
        .map(|r| &r.value)
        .filter(|v| !v.is_null());
    let value = Some(&body.value).filter(|v| !v.is_null()).or(go_value);
    let given = [
        value.is_some(),
        body.option.is_some(),
        body.approved.is_some(),
        body.decision.is_some(),
        body.end_of_input == Some(true),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if given != 1 {
        return Err(unfit(format!(
            "give exactly one answer (value, option, approved, decision or end_of_input), not {given}"
        )));
    }
    if body.end_of_input == Some(true) {
        return Ok(Answer::EndOfInput);
    }
    match request {
        RequestKind::Approval { options, .. } => {
            let pick_kind = |allow: bool| {
                options
                    .iter()
                    .find(|o| o.kind.allows() == allow)
                    .map(|o| Answer::Option(o.id.clone()))
                    .ok_or_else(|| {
                        unfit(format!(
                            "the approval has no {} option",
                            if allow { "allowing" } else { "rejecting" }
                        ))
                    })
            };
            if let Some(a) = body.approved {
                return pick_kind(a);
            }
            let id = match (&body.option, value) {
                (Some(o), _) => o.clone(),
                (None, Some(v)) => text(v),
                _ => {
                    return Err(unfit(
                        "an approval takes `option`, `approved` or `value`".to_owned(),
                    ));
                }
            };
            if options.iter().any(|o| o.id == id) {
                return Ok(Answer::Option(id));
            }
            match id.trim().to_ascii_lowercase().as_str() {
                "approve" | "approved" | "allow" | "yes" | "y" | "true" => pick_kind(true),
                "reject" | "rejected" | "deny" | "no" | "n" | "false" => pick_kind(false),
                _ => {
                    let ids: Vec<&str> = options.iter().map(|o| o.id.as_str()).collect();
                    Err(unfit(format!(
                        "the approval has no option '{id}' (options: {})",
                        ids.join(", ")
                    )))
                }
            }
        }
        RequestKind::MissingInput { .. } | RequestKind::ConversationTurn { .. } => match value {
            Some(v) => Ok(Answer::Value(text(v))),
            None => Err(unfit(format!(
                "a {} request takes `value` (or `end_of_input`)",
                request.name()
            ))),
        },
        RequestKind::Breakpoint { .. } => {
            let d = body
                .decision
                .clone()
                .or_else(|| value.map(text))
                .unwrap_or_default();
            let decision = match d.trim().to_ascii_lowercase().as_str() {
                "continue" | "c" => BreakpointDecision::Continue,
                "skip" | "s" => BreakpointDecision::Skip,
                "abort" | "a" => BreakpointDecision::Abort,
                "retry" | "r" => BreakpointDecision::Retry,
                "inspect" | "i" => BreakpointDecision::Inspect,
                other => {
                    return Err(unfit(format!(
                        "a breakpoint takes `decision`: continue, skip, abort, retry or inspect, not '{other}'"
                    )));
                }
            };
            Ok(Answer::Decision(decision))
        }
    }
}

/// Answers a request the run waits on (an approval, a missing input, a conversation turn,
/// a breakpoint).
#[utoipa::path(
    post,
    path = "/api/executions/{id}/respond",
    operation_id = "respond-to-input",
    tag = "executions",
    params(("id" = String, Path, description = "Run id")),
    request_body(content = RespondBody, description = "The request and its answer", content_type = "application/json"),
    responses(
        (status = 204, description = "Answered"),
        (status = 400, description = "The body is not JSON", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong bearer token", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 403, description = "A cross-site request: an `Origin` that is neither this server's nor a `--cors-origin`, or a `Host` that does not name the server", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 415, description = "A body whose `Content-Type` is not `application/json`", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 404, description = "No such run, or no such request in it", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 409, description = "Answered already, timed out, or the run ended", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 413, description = "The body is over 1 MiB", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 422, description = "The answer does not fit the request (or several are pending and none is named)", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 500, description = "The run's state file cannot be read", body = ProblemDoc, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn respond(
    State(cfg): State<Arc<HttpConfig>>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<RespondBody>,
) -> Result<StatusCode, Problem> {
    let run_id = RunId(id);
    let sub = match cfg.service.subscribe(&run_id, 1) {
        Ok(s) => s,
        Err(e) => {
            // Known only from the store: it is not running here, nothing can be answered.
            cfg.service.get(&run_id)?;
            return Err(conflict(
                format!(
                    "run {run_id} is not running in this server: {}",
                    e.message()
                ),
                "only a live run's pending requests can be answered",
            ));
        }
    };
    let snap = snapshot(sub, &run_id);
    let wanted = body
        .request_id
        .clone()
        .or_else(|| body.response.as_ref().and_then(|r| r.prompt_id.clone()))
        .filter(|s| !s.is_empty());
    let request = match &wanted {
        Some(rid) => match snap.pending.iter().find(|r| r.request_id == *rid) {
            Some(r) => r.clone(),
            None if snap.resolved.contains(rid) => {
                return Err(conflict(
                    format!("request {rid} was answered already (or timed out, or was cancelled)"),
                    "GET the execution: `pending` lists what it waits on now",
                ));
            }
            None if snap.finished => {
                return Err(conflict(
                    format!("run {run_id} has ended; request {rid} is closed"),
                    "only a live run's pending requests can be answered",
                ));
            }
            None => {
                return Err(Problem::with_status(
                    StatusCode::NOT_FOUND,
                    AwfError::new(
                        ErrorCode::UserFacadeInputRejected,
                        format!("run {run_id} never asked request {rid}"),
                    )
                    .with_hint("GET the execution: `pending` lists what it waits on now"),
                ));
            }
        },
        None => match snap.pending.as_slice() {
            [one] => one.clone(),
            [] => {
                return Err(conflict(
                    format!("run {run_id} waits on no request"),
                    "GET the execution: `pending` lists what it waits on now",
                ));
            }
            _ => {
                return Err(unfit(format!(
                    "run {run_id} waits on {} requests; name one with `request_id`",
                    snap.pending.len()
                )));
            }
        },
    };
    let answer = answer_for(&body, &request.kind)?;
    request.kind.accepts(&answer).map_err(unfit)?;
    cfg.service
        .respond(&request.request_id, answer)
        .map_err(|e| {
            conflict(
                format!(
                    "request {} can no longer be answered: {}",
                    request.request_id,
                    e.message()
                ),
                "GET the execution: `pending` lists what it waits on now",
            )
        })?;
    Ok(StatusCode::NO_CONTENT)
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

/// The SSE frame of one subscription item: `event:` = the event's `type`, `id:` = its
/// position in the run's log, `data:` = the event envelope as JSON. A lag is an `event:
/// lagged` frame without an id, `data: {"resume_position": N}`.
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

/// The SSE `event:` names: every run event's `type` (domain `RunEvent`, snake_case), and
/// `lagged` (a subscriber that fell behind; its data is `{"resume_position": N}`).
pub const SSE_EVENT_NAMES: [&str; 15] = [
    "run_started",
    "step_started",
    "step_retrying",
    "output_chunk",
    "log",
    "agent_message_chunk",
    "agent_thought_chunk",
    "tool_call",
    "tool_call_result",
    "interaction_required",
    "interaction_resolved",
    "step_finished",
    "child_run_started",
    "run_finished",
    "lagged",
];

/// One event of `GET /api/executions/{id}/events` as an SSE client reads it, the schema
/// the document gives each event of the stream (OpenAPI 3.1 has an event stream's `schema`
/// describe one event): `{event, id, data}` with `event` the event's type
/// ([`SSE_EVENT_NAMES`]), `id` its position in the run's log (decimal digits; none on
/// `lagged`) and `data` the event envelope as JSON text (`contentMediaType`
/// `application/json`, `contentSchema`: `{seq, run_id, parent_run_id?, at (ms since the
/// epoch), path, iteration?, event: {type, …}}`, or `lagged`'s `{resume_position}`).
pub struct SseEvent;

impl utoipa::PartialSchema for SseEvent {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::ObjectBuilder;
        use utoipa::openapi::schema::Type;
        let envelope = json!({
            "type": "object",
            "required": ["seq", "run_id", "at", "path", "event"],
            "properties": {
                "seq": {"type": "integer", "minimum": 1},
                "run_id": {"type": "string"},
                "parent_run_id": {"type": "string"},
                "at": {"type": "integer", "minimum": 0, "description": "ms since the epoch"},
                "path": {"type": "string"},
                "iteration": {"type": "integer", "minimum": 0},
                "event": {
                    "type": "object",
                    "required": ["type"],
                    "properties": {"type": {"type": "string", "enum": &SSE_EVENT_NAMES[..14]}}
                }
            }
        });
        let lagged = json!({
            "type": "object",
            "required": ["resume_position"],
            "properties": {"resume_position": {"type": "integer", "minimum": 0}}
        });
        let mut data = ObjectBuilder::new()
            .schema_type(Type::String)
            .content_media_type("application/json")
            .description(Some(
                "The event envelope (or `lagged`'s position) as JSON text",
            ))
            .build();
        // `contentSchema` (JSON Schema 2020-12) has no field in utoipa's `Object`; it goes
        // in beside the other keywords.
        let mut keywords = utoipa::openapi::extensions::Extensions::default();
        keywords.insert(
            "contentSchema".to_owned(),
            json!({ "anyOf": [envelope, lagged] }),
        );
        data.extensions = Some(keywords);
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property(
                "event",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(SSE_EVENT_NAMES)),
            )
            .required("event")
            .property(
                "id",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some("^[0-9]+$")),
            )
            .property("data", data)
            .required("data")
            .into()
    }
}

impl ToSchema for SseEvent {}

/// Follows a run's events (Server-Sent Events).
#[utoipa::path(
    get,
    path = "/api/executions/{id}/events",
    operation_id = "stream-execution-events",
    tag = "executions",
    params(
        ("id" = String, Path, description = "Run id"),
        ("Last-Event-ID" = Option<String>, Header, description = "The `id:` of the last event received: the stream goes on after it"),
        EventsQuery,
    ),
    responses(
        (status = 200, description = "One frame per event of the run's log, then the stream ends after `run_finished`: `id: <position>`, `event: <type>` (`run_started`, `step_started`, `output_chunk`, `step_finished`, `interaction_required`, `interaction_resolved`, `run_finished`, …), `data: <event envelope JSON>`; an `: open` comment first (the headers go out at once), `:` heartbeat comments after `--keep-alive` (15 s) of silence; the schema describes one event", body = SseEvent, content_type = "text/event-stream"),
        (status = 400, description = "The query string does not decode", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong bearer token", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 404, description = "No such run in this server (never started here, or evicted after `--run-ttl`)", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 422, description = "`Last-Event-ID` or `after` is not a number", body = ProblemDoc, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn stream_events(
    State(cfg): State<Arc<HttpConfig>>,
    Path(id): Path<String>,
    Query(q): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let after = resume_after(&headers, q.after.as_deref())?;
    let sub = cfg.service.subscribe(&RunId(id), after.saturating_add(1))?;
    let events = futures::stream::unfold(sub, |mut sub: Box<dyn Subscription>| async move {
        let item = sub.next().await?;
        Some((Ok::<Event, std::convert::Infallible>(frame(&item)), sub))
    });
    // A first comment, so the status and headers go out at once even when nothing is to
    // be replayed yet (hyper sends the head with the first body bytes).
    let opened = futures::stream::once(std::future::ready(Ok(Event::default().comment("open"))));
    let stream = futures::StreamExt::chain(opened, events);
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(cfg.keep_alive))
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use awf_domain::interaction::ApprovalOption;
    use axum::http::HeaderValue;

    #[test]
    fn each_sse_event_is_documented_as_event_id_and_json_data() {
        let v = serde_json::to_value(<SseEvent as utoipa::PartialSchema>::schema()).unwrap();
        assert_eq!(v["type"], "object", "{v}");
        assert_eq!(v["properties"]["event"]["enum"], json!(SSE_EVENT_NAMES));
        assert_eq!(v["properties"]["id"]["pattern"], "^[0-9]+$");
        let data = &v["properties"]["data"];
        assert_eq!(data["type"], "string");
        assert_eq!(data["contentMediaType"], "application/json");
        let envelope = &data["contentSchema"]["anyOf"][0];
        assert_eq!(
            envelope["properties"]["event"]["properties"]["type"]["enum"],
            json!(SSE_EVENT_NAMES[..14])
        );
        // The event names the stream uses are the names the envelope's `type` carries.
        let ev = RunEvent::StepStarted {
            step: "a".to_owned(),
            kind: "command".to_owned(),
        };
        let t = serde_json::to_value(&ev).unwrap()["type"].clone();
        assert!(SSE_EVENT_NAMES.contains(&t.as_str().unwrap()), "{t}");
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

    fn body(v: Value) -> RespondBody {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn answers_fit_the_kind_of_request() {
        let approval = RequestKind::Approval {
            message: "Deploy?".into(),
            options: ApprovalOption::defaults(),
        };
        let a = |v: Value| answer_for(&body(v), &approval);
        assert_eq!(
            a(json!({"approved": true})).unwrap(),
            Answer::Option("approve".into())
        );
        assert_eq!(
            a(json!({"approved": false})).unwrap(),
            Answer::Option("reject".into())
        );
        assert_eq!(
            a(json!({"option": "reject"})).unwrap(),
            Answer::Option("reject".into())
        );
        assert_eq!(
            a(json!({"response": {"PromptID": "x", "Value": "yes"}})).unwrap(),
            Answer::Option("approve".into())
        );
        assert_eq!(
            a(json!({"value": "maybe"})).unwrap_err().status,
            StatusCode::UNPROCESSABLE_ENTITY
        );
        assert!(a(json!({})).is_err());
        assert!(a(json!({"value": "x", "approved": true})).is_err());
        let turn = RequestKind::ConversationTurn {
            prompt: "> ".into(),
        };
        assert_eq!(
            answer_for(&body(json!({"value": 42})), &turn).unwrap(),
            Answer::Value("42".into())
        );
        assert!(answer_for(&body(json!({"approved": true})), &turn).is_err());
        assert!(serde_json::from_value::<RespondBody>(json!({"nope": 1})).is_err());
    }
}
