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
    /// Submitted to the shared store's queue (`awf serve --store`), not yet started by a
    /// worker.
    Queued,
}

impl From<StoredStatus> for ExecStatus {
    fn from(s: StoredStatus) -> Self {
        match s {
            StoredStatus::Running => Self::Running,
            StoredStatus::Success => Self::Completed,
            StoredStatus::Failure => Self::Failed,
            StoredStatus::Cancelled => Self::Cancelled,
            StoredStatus::Waiting => Self::Waiting,
            StoredStatus::Queued => Self::Queued,
        }
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
    /// The workflow's name (its `name:`), as `GET /api/history` names it; the identifier
    /// when no record names it.
    pub workflow_name: String,
    /// The identifier the run was started with: a workflow's name, or the path of its file
    /// (`awf run wf/code-review.yaml`), as `GET /api/history`'s `workflow`.
    pub workflow: String,
    /// Status.
    pub status: ExecStatus,
    /// The top-level state being executed (or last executed); empty when none yet.
    pub current_step: String,
    /// Where the run is.
    pub phase: Phase,
    /// Process exit code, once finished.
    pub exit_code: Option<u8>,
    /// Start (RFC 3339, UTC), from the run history, else from the run's state file; null
    /// until recorded.
    pub started_at: Option<String>,
    /// End (RFC 3339, UTC), once finished and recorded (history, else state file).
    pub completed_at: Option<String>,
    /// Wall time in milliseconds, once finished and recorded: `completed_at − started_at`
    /// (a resumed run's spans all its attempts and the time between them; a wait for an
    /// input the run asked for counts).
    pub duration_ms: Option<u64>,
    /// A `waiting` run's reset time (RFC 3339, UTC): it was parked on an agent's usage limit
    /// and continues then (`POST …/resume`, or this server by itself); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_until: Option<String>,
    /// `true` on a run recorded as `running` whose awf process is gone (killed with
    /// SIGKILL, crashed): it runs no more, and `POST …/resume` continues it (`awf history`
    /// says `running (process gone)`); absent otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub process_gone: bool,
}

/// Most bytes of a state's output `GET /api/executions/{id}` gives: the last 64 KiB (the
/// whole output is in the run's transcript and state file).
pub const OUTPUT_CAP: usize = 64 << 10;

/// The `status` of a state started and not finished.
const RUNNING: &str = "running";

/// A state's outcome in a run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct StateStatus {
    /// `running` once started, then its recorded status (`completed`, `failed`, …).
    pub status: String,
    /// Process exit code (−1 after a timeout or cancel); null for states without a process
    /// and while running.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// The failure text of a failed state.
    #[serde(default)]
    pub error: Option<String>,
    /// The code of that failure (`USER.INPUT.MISSING_FILE`, `EXECUTION.COMMAND.FAILED`, …);
    /// absent when the state did not fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// Its stdout or agent text (secrets masked), at most the last [`OUTPUT_CAP`] bytes
    /// (64 KiB); null while running.
    #[serde(default)]
    pub output: Option<String>,
    /// Whether `output` was cut to its last 64 KiB.
    #[serde(default)]
    pub truncated: bool,
}

impl StateStatus {
    fn running() -> Self {
        Self {
            status: RUNNING.to_owned(),
            ..Self::default()
        }
    }

    /// Started and not finished (in the log read so far).
    fn is_running(&self) -> bool {
        self.status == RUNNING
    }

    fn of(
        status: &awf_domain::run::StepStatus,
        exit_code: Option<i32>,
        error: Option<&String>,
        error_code: Option<ErrorCode>,
        output: &str,
    ) -> Self {
        let status = serde_json::to_value(status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let (output, truncated) = capped(output);
        Self {
            status,
            exit_code,
            error: error.cloned(),
            error_code: error_code.map(|c| c.as_str().to_owned()),
            output: Some(output),
            truncated,
        }
    }
}

/// The last [`OUTPUT_CAP`] bytes of `text` (cut at a character boundary), and whether it
/// was cut.
fn capped(text: &str) -> (String, bool) {
    if text.len() <= OUTPUT_CAP {
        return (text.to_owned(), false);
    }
    let mut at = text.len() - OUTPUT_CAP;
    while !text.is_char_boundary(at) {
        at += 1;
    }
    (text[at..].to_owned(), true)
}

/// A run's failure.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunError {
    /// The dotted error code (`EXECUTION.COMMAND.FAILED`, …).
    pub code: String,
    /// The message (secrets masked).
    pub message: String,
}

impl From<&awf_domain::error::ErrorBody> for RunError {
    fn from(e: &awf_domain::error::ErrorBody) -> Self {
        Self {
            code: e.code.as_str().to_owned(),
            message: e.message.clone(),
        }
    }
}

/// One choice of an approval, or one allowed value of a `missing_input` whose input has
/// `validation.enum`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct OptionInfo {
    /// What `POST …/respond` names as `option` (an approval), or the value to send as
    /// `value` (an enum input).
    pub id: String,
    /// Label.
    pub name: String,
    /// An approval's: `allow_once`, `allow_always`, `reject_once`, `reject_always`; an enum
    /// input's: `value`.
    pub kind: String,
}

/// One route out of a state, in a breakpoint's preview.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PreviewRouteInfo {
    /// `on_success`, `on_failure`, `when` (a conditional transition), `default` (a
    /// transition without `when`) or `on_complete`.
    pub on: String,
    /// The `when` expression of a conditional transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// Target state; empty for an inline `on_failure: {message, status}`.
    pub target: String,
    /// The message of an inline `on_failure` (the run fails with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline_error: Option<String>,
    /// The exit code of an inline `on_failure` that sets one (`status: 3`), as
    /// `awf run --interactive` prints it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

/// What a breakpoint shows about the state about to run (what `awf run --interactive`
/// prints; spec/workflow.md §3.12).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PreviewInfo {
    /// 1-based visit counter of the run (a state run again by `retry` keeps its number).
    pub position: usize,
    /// Number of states that can pause (not terminals, nor states that run only as a
    /// parallel branch or in a loop's body).
    pub total: usize,
    /// The command as it will run (interpolated; secrets masked); absent for states that
    /// run no command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The state's timeout in milliseconds, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Routes out of the state, in evaluation order.
    pub routes: Vec<PreviewRouteInfo>,
}

impl PreviewInfo {
    fn of(p: &awf_domain::event::StepPreview) -> Self {
        Self {
            position: p.position,
            total: p.total,
            command: p.command.clone(),
            timeout_ms: p.timeout_ms,
            routes: p
                .routes
                .iter()
                .map(|r| PreviewRouteInfo {
                    on: r.on.clone(),
                    when: r.when.clone(),
                    target: r.target.clone(),
                    inline_error: r.inline_error.clone(),
                    exit_code: r.exit_code,
                })
                .collect(),
        }
    }
}

/// The decisions a breakpoint offers, as a terminal does (`interact.rs`): continue, skip,
/// abort, retry (only when a state ran before), inspect, and edit, which takes a value:
/// `decision: "edit NAME=VALUE"` (its name says so; new users missed it when unlisted).
fn breakpoint_options(has_previous: bool) -> Vec<OptionInfo> {
    let mut out = Vec::new();
    for (id, name) in [
        ("continue", "Continue"),
        ("skip", "Skip"),
        ("abort", "Abort"),
        ("retry", "Retry the previous state"),
        ("inspect", "Inspect"),
        ("edit", "Edit a value: decision \"edit NAME=VALUE\""),
    ] {
        if id == "retry" && !has_previous {
            continue;
        }
        out.push(OptionInfo {
            id: id.to_owned(),
            name: name.to_owned(),
            kind: "decision".to_owned(),
        });
    }
    out
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
    /// An approval's choices, the allowed values of a missing input with
    /// `validation.enum` (kind `value`), or a breakpoint's decisions (kind `decision`: what
    /// `respond` takes as `decision`); empty for other requests.
    pub options: Vec<OptionInfo>,
    /// A breakpoint's view of the state about to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<PreviewInfo>,
    /// A breakpoint's: the state that ran before (what `retry` runs again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
    /// A breakpoint's: the internal kind of the state about to run (a command step is `command`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_kind: Option<String>,
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
    /// State name → outcome, every state the run ran (in all its attempts, when resumed):
    /// from its state file, with what its event log says on top (fresher while it runs).
    /// `null` only when neither is there (a store without state files, a run not started).
    pub states: Option<BTreeMap<String, StateStatus>>,
    /// The terminal state the run ended on, once finished.
    #[serde(default)]
    pub terminal: Option<String>,
    /// The interpolated `message` of the success terminal it ended on (secrets masked): from
    /// the run's events while it is in this server's memory, else as the store recorded it
    /// at the run's end (a failure terminal's is in `error`).
    #[serde(default)]
    pub message: Option<String>,
    /// Why the run failed, once finished (null on success).
    #[serde(default)]
    pub error: Option<RunError>,
    /// The requests the run waits on now (empty when none, and for a finished run).
    pub pending: Vec<PendingRequest>,
}

/// `GET /api/executions`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExecutionList {
    /// Live runs, then those finished in memory, then recorded ones; newest first in each
    /// group.
    pub executions: Vec<ExecutionSummary>,
    /// Runs left out of `executions` because their state file cannot be read (damaged,
    /// hand-edited): one line each naming the run (`GET /api/executions/{id}` says why);
    /// absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
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
/// - `decision`: a breakpoint's `continue`, `skip`, `abort`, `retry` (when a state ran
///   before), `inspect` (the run's context goes to the event stream as a `log` event, then
///   the breakpoint is asked again) or `edit NAME=VALUE` (sets an input, then asked again):
///   the choices of `awf run --interactive`, also by their letters (`c`, `s`, `a`, `r`, `i`,
///   `e NAME=VALUE`);
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
    #[param(pattern = r"^\s*[0-9]+\s*$")]
    pub after: Option<String>,
}

/// `GET …/events` headers, for the OpenAPI document only (read by [`resume_after`]).
#[derive(Debug, Clone, Default, IntoParams)]
#[into_params(parameter_in = Header)]
pub struct EventsHeaders {
    /// The `id:` of the last event received: the stream goes on after it (wins over
    /// `after`; empty is as if absent: from the start).
    #[param(
        rename = "Last-Event-ID",
        nullable = false,
        pattern = r"^\s*[0-9]*\s*$"
    )]
    pub last_event_id: Option<String>,
}

/// RFC 3339 of milliseconds since the epoch.
pub(crate) fn rfc3339_ms(ms: u64) -> String {
    awf_domain::timefmt::format_rfc3339(
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms),
    )
}

/// The history row `gone` is asked about for run `v` (recorded as running): its own row `h`
/// when there is one, else one made from its state file (the start of the run, which only
/// the grace for a run without a state file uses; a run not started yet when not known).
fn row_of(cfg: &HttpConfig, v: &RunView, h: Option<&HistoryRecord>) -> HistoryRecord {
    if let Some(h) = h {
        // Its view (the state file) says running, whatever an older row says.
        return HistoryRecord {
            status: StoredStatus::Running,
            ..h.clone()
        };
    }
    let ms = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .ok()
            .and_then(|d| u64::try_from(d.as_millis()).ok())
    };
    let started_at_ms = cfg
        .states
        .as_ref()
        .and_then(|st| st.load(&v.run_id.0).ok())
        .and_then(|s| ms(s.started_at))
        .or_else(|| ms(std::time::SystemTime::now()))
        .unwrap_or(u64::MAX);
    HistoryRecord {
        id: v.run_id.0.clone(),
        workflow_id: v.workflow.clone(),
        workflow_name: String::new(),
        status: StoredStatus::Running,
        exit_code: None,
        started_at_ms,
        completed_at_ms: None,
        duration_ms: None,
        error_message: None,
        parent_run_id: v.parent_run_id.as_ref().map(|p| p.0.clone()),
        spend: None,
    }
}

/// A history row made from the state file of run `id`, for a run the history has no row
/// of (a `history.db` replaced or lost, a state file placed by hand): its name, status, and
/// the times `awf status` shows. `None` without a readable state file.
pub(crate) fn row_from_state(cfg: &HttpConfig, id: &str) -> Option<HistoryRecord> {
    let snap = cfg.states.as_ref()?.load(id).ok()?;
    let ms = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .ok()
            .and_then(|d| u64::try_from(d.as_millis()).ok())
    };
    let started_at_ms = ms(snap.started_at)?;
    let completed_at_ms = snap.completed_at.and_then(ms);
    Some(HistoryRecord {
        id: snap.run_id,
        workflow_id: snap.workflow,
        workflow_name: snap.workflow_name,
        status: snap.status,
        exit_code: snap.exit_code,
        started_at_ms,
        completed_at_ms,
        duration_ms: completed_at_ms.map(|end| end.saturating_sub(started_at_ms)),
        error_message: snap.error.map(|e| e.message),
        parent_run_id: snap.parent_run_id,
        spend: None,
    })
}

/// The ids of the runs among `views` (each with its history row, when known) that are
/// recorded as running while their awf process is gone ([`HttpConfig::process_gone`]); runs
/// live or finished in this server never are.
pub(crate) fn gone_of<'a>(
    cfg: &HttpConfig,
    views: impl IntoIterator<Item = (&'a RunView, Option<&'a HistoryRecord>)>,
) -> std::collections::BTreeSet<String> {
    if cfg.process_gone.is_none() {
        return std::collections::BTreeSet::new();
    }
    let rows: Vec<HistoryRecord> = views
        .into_iter()
        .filter(|(v, _)| v.phase == RunPhase::Recorded && v.status == StoredStatus::Running)
        .map(|(v, h)| row_of(cfg, v, h))
        .collect();
    cfg.gone(&rows)
}

fn summary(v: RunView, h: Option<&HistoryRecord>, process_gone: bool) -> ExecutionSummary {
    // A history row of an earlier attempt (a resumed run now live again) has no end yet
    // that counts.
    let finished = v.phase != RunPhase::Live;
    ExecutionSummary {
        started_at: h.map(|h| rfc3339_ms(h.started_at_ms)),
        completed_at: h
            .and_then(|h| h.completed_at_ms)
            .filter(|_| finished)
            .map(rfc3339_ms),
        // completed_at − started_at when both are known (a resumed run's spans its attempts
        // and the time between them), else the history's own figure.
        duration_ms: h
            .and_then(|h| match h.completed_at_ms {
                Some(end) => Some(end.saturating_sub(h.started_at_ms)),
                None => h.duration_ms,
            })
            .filter(|_| finished),
        waiting_until: v
            .waiting_until
            .filter(|_| v.status == StoredStatus::Waiting)
            .map(awf_domain::timefmt::format_rfc3339),
        execution_id: v.run_id.0,
        workflow_name: h
            .map(|h| h.workflow_name.clone())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| v.workflow.clone()),
        workflow: v.workflow,
        status: v.status.into(),
        current_step: v.current_state.unwrap_or_default(),
        phase: match v.phase {
            RunPhase::Live => Phase::Live,
            RunPhase::Finished => Phase::Finished,
            RunPhase::Recorded => Phase::Recorded,
        },
        exit_code: v.exit_code,
        process_gone,
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
            waiting_until: snap.waiting_until,
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
    let mut rows = rows;
    let views: Vec<RunView> = cfg
        .service
        .list()?
        .into_iter()
        .filter(|v| v.parent_run_id.is_none())
        .map(|v| fresh(&cfg, v))
        .collect();
    // Runs the history has no row of: their state files say when they ran and their name.
    for v in &views {
        if !rows.contains_key(&v.run_id.0)
            && let Some(r) = row_from_state(&cfg, &v.run_id.0)
        {
            rows.insert(v.run_id.0.clone(), r);
        }
    }
    let gone = gone_of(&cfg, views.iter().map(|v| (v, rows.get(&v.run_id.0))));
    let mut executions: Vec<ExecutionSummary> = views
        .into_iter()
        .map(|v| {
            let h = rows.get(&v.run_id.0);
            let process_gone = gone.contains(&v.run_id.0);
            summary(v, h, process_gone)
        })
        .collect();
    order_executions(&mut executions);
    // Runs whose state files cannot be read are not listed: said, not left out silently.
    let warnings: Vec<String> = cfg
        .states
        .as_ref()
        .map(|st| st.unreadable())
        .unwrap_or_default()
        .into_iter()
        .map(|id| {
            format!(
                "run {id} is not listed: its state file cannot be read (GET /api/executions/{id} says why)"
            )
        })
        .collect();
    if !warnings.is_empty() {
        tracing::warn!(
            count = warnings.len(),
            "GET /api/executions: {} run(s) left out, their state files cannot be read: {}",
            warnings.len(),
            warnings.join("; ")
        );
    }
    Ok(Envelope::json(ExecutionList {
        executions,
        warnings,
    }))
}

/// Live runs first (driven here, running in another process, or queued for a worker), then
/// the others; newest first in each group (by `started_at`, RFC 3339 UTC, which sorts as
/// text; runs not yet recorded first). Stable: runs that tie keep the service's order (new user: a run started
/// by `awf run` beside the server was listed after the server's finished runs).
fn order_executions(executions: &mut [ExecutionSummary]) {
    executions.sort_by(|a, b| {
        // A run whose awf process is gone runs no more; one queued for a worker is in
        // progress (the shared store's own order, issue 15).
        let live = |e: &ExecutionSummary| {
            matches!(e.phase, Phase::Live)
                || matches!(e.status, ExecStatus::Queued)
                || (matches!(e.status, ExecStatus::Running) && !e.process_gone)
        };
        live(b)
            .cmp(&live(a))
            .then_with(|| match (&a.started_at, &b.started_at) {
                (Some(x), Some(y)) => y.cmp(x),
                (None, Some(_)) => std::cmp::Ordering::Less,
                (Some(_), None) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            })
    });
}

/// What the log of a run holds now: top-level states' statuses and unresolved requests.
#[derive(Debug, Default)]
pub(crate) struct LogSnapshot {
    pub(crate) states: BTreeMap<String, StateStatus>,
    /// Requests asked and not resolved, in order.
    pub(crate) pending: Vec<InteractionRequest>,
    /// Ids of requests that were resolved, or closed with the attempt that asked them.
    pub(crate) resolved: std::collections::BTreeSet<String>,
    /// Whether the run's final event is in the log.
    pub(crate) finished: bool,
    /// The terminal of the last `RunFinished` (after the run's latest start).
    pub(crate) terminal: Option<String>,
    /// Its success message.
    pub(crate) message: Option<String>,
    /// Its error.
    pub(crate) error: Option<RunError>,
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
            // A resumed run's log holds its earlier attempts: a start after an end opens the
            // next one. Nothing an earlier attempt asked is pending in it, ended or not (a
            // worker that died mid-question: another one resumed the run).
            RunEvent::RunStarted { .. } if root => {
                // Closed with the attempt that asked them: answering one is a 409.
                for r in s.pending.drain(..) {
                    s.resolved.insert(r.request_id);
                }
                // A state an earlier attempt started and never finished (its awf process
                // was killed) runs no more: the state file, what `awf status` shows, does
                // not hold it either.
                s.states.retain(|_, st| !st.is_running());
                s.finished = false;
                s.terminal = None;
                s.message = None;
                s.error = None;
            }
            RunEvent::RunFinished { result } if root => {
                // Nothing an ended attempt asked is pending in the next one.
                s.finished = true;
                for r in s.pending.drain(..) {
                    s.resolved.insert(r.request_id);
                }
                // Nothing runs in an ended run.
                s.states.retain(|_, st| !st.is_running());
                s.terminal.clone_from(&result.terminal);
                s.message.clone_from(&result.message);
                s.error = result.error.as_ref().map(RunError::from);
                for (name, st) in &result.states {
                    s.states.entry(name.clone()).or_insert_with(|| {
                        StateStatus::of(
                            &st.status,
                            st.exit_code,
                            st.error.as_ref(),
                            st.error_code,
                            &st.output,
                        )
                    });
                }
            }
            RunEvent::StepStarted { step, .. } if root => {
                s.states.insert(step.clone(), StateStatus::running());
            }
            RunEvent::StepFinished { state, .. } if root => {
                s.states.insert(
                    state.name.clone(),
                    StateStatus::of(
                        &state.status,
                        state.exit_code,
                        state.error.as_ref(),
                        state.error_code,
                        &state.output,
                    ),
                );
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
            let choices = input
                .validation
                .enum_values
                .iter()
                .map(|v| OptionInfo {
                    id: v.clone(),
                    name: v.clone(),
                    kind: "value".to_owned(),
                })
                .collect();
            (p, choices, Some(input.name.clone()))
        }
        RequestKind::ConversationTurn { prompt } => (prompt.clone(), Vec::new(), None),
        RequestKind::Breakpoint { previous, .. } => (
            format!(
                "Before state {}: {}?",
                r.step.as_deref().unwrap_or("?"),
                if previous.is_some() {
                    "continue, skip, abort, retry or inspect"
                } else {
                    "continue, skip, abort or inspect"
                }
            ),
            breakpoint_options(previous.is_some()),
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
    let (preview, previous, state_kind) = match &r.kind {
        RequestKind::Breakpoint {
            state_kind,
            previous,
            preview,
        } => (
            Some(PreviewInfo::of(preview)),
            previous.clone(),
            Some(state_kind.clone()),
        ),
        _ => (None, None, None),
    };
    PendingRequest {
        request_id: r.request_id.clone(),
        kind: r.kind.name().to_owned(),
        step: r.step.clone(),
        prompt,
        options,
        preview,
        previous,
        state_kind,
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
    params(("id" = String, Path, description = "Run id, or a unique prefix of one")),
    responses(
        (status = 200, description = "The run", body = Envelope<ExecutionDetail>),
        (status = 401, description = "Missing or wrong bearer token", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 422, description = "An ambiguous run id prefix (the hints list candidates)", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 500, description = "Its state file cannot be read", body = ProblemDoc, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn get_execution(
    State(cfg): State<Arc<HttpConfig>>,
    Path(id): Path<String>,
) -> Result<Json<Envelope<ExecutionDetail>>, Problem> {
    let run_id = cfg.service.resolve(&id)?;
    let v = fresh(&cfg, cfg.service.get(&run_id)?);
    // The state file: every state of every attempt, and how the last one ended.
    let file = cfg.states.as_ref().and_then(|st| st.load(&run_id.0).ok());
    let mut states: Option<BTreeMap<String, StateStatus>> = file.as_ref().map(|f| {
        f.states
            .iter()
            .map(|(name, st)| {
                let out = StateStatus::of(
                    &st.status,
                    st.exit_code,
                    st.error.as_ref(),
                    st.error_code,
                    &st.output,
                );
                (name.clone(), out)
            })
            .collect()
    });
    let (mut terminal, mut message, mut error) = match (&file, &cfg.states) {
        (Some(f), Some(st)) if v.phase != RunPhase::Live => (
            f.terminal
                .as_deref()
                .map(awf_domain::workflow::terminal_display_name),
            st.terminal_message(&run_id.0),
            f.error.as_ref().map(RunError::from),
        ),
        _ => (None, None, None),
    };
    let mut pending = Vec::new();
    // A run another worker of the shared store executes is recorded here, and its log (the
    // store's) says what it waits on.
    let elsewhere = cfg.shared_store
        && v.phase == RunPhase::Recorded
        && matches!(v.status, StoredStatus::Running);
    if (v.phase != RunPhase::Recorded || elsewhere)
        && let Ok(sub) = cfg.service.subscribe_kept(&run_id, 1)
    {
        // The log on top: fresher while the run is live, and the only record of its message.
        let s = snapshot(sub, &run_id);
        states.get_or_insert_with(BTreeMap::new).extend(s.states);
        pending = s.pending.iter().map(pending_of).collect();
        if s.finished {
            terminal = s.terminal;
            message = s.message;
            error = s.error;
        }
    }
    // A run that never started (a missing input not given, a cancel while asking) has no
    // end in its log: the service says why.
    if error.is_none() && v.phase == RunPhase::Finished && v.exit_code.is_none() {
        error = not_started_error(&cfg, &run_id).await;
    }
    let h = cfg
        .history
        .as_ref()
        .and_then(|h| h.get(&run_id.0).ok().flatten())
        .or_else(|| row_from_state(&cfg, &run_id.0));
    let process_gone = !gone_of(&cfg, [(&v, h.as_ref())]).is_empty();
    Ok(Envelope::json(ExecutionDetail {
        summary: summary(v, h.as_ref(), process_gone),
        states,
        terminal,
        message,
        error,
        pending,
    }))
}

/// The workflow a run ran: the file its state file records (`workflow_path`), also one
/// outside this server's workflow directories (`awf run path/to/file.yaml` in a terminal),
/// else the workflow its identifier names; in `GET /api/workflows/{scope}/{name}`'s shape
/// (what the page draws the run's graph from).
#[utoipa::path(
    get,
    path = "/api/executions/{id}/workflow",
    operation_id = "get-execution-workflow",
    tag = "executions",
    params(("id" = String, Path, description = "Run id, or a unique prefix of one")),
    responses(
        (status = 200, description = "The run's workflow, as its file is now", body = Envelope<crate::workflows::WorkflowDetail>),
        (status = 401, description = "Missing or wrong bearer token", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 404, description = "No such run, or its workflow file is gone", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 422, description = "An ambiguous run id prefix (the hints list candidates), or the workflow file does not parse any more", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 500, description = "The run's state file or workflow file cannot be read", body = ProblemDoc, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn get_execution_workflow(
    State(cfg): State<Arc<HttpConfig>>,
    Path(id): Path<String>,
) -> Result<Json<Envelope<crate::workflows::WorkflowDetail>>, Problem> {
    let run_id = cfg.service.resolve(&id)?;
    let v = cfg.service.get(&run_id)?;
    let recorded = cfg
        .states
        .as_ref()
        .and_then(|st| st.load(&run_id.0).ok())
        .and_then(|snap| snap.workflow_path)
        .filter(|p| p.is_file());
    let loaded = match recorded {
        Some(path) => cfg
            .repository
            .load_for_validation(&path.display().to_string(), None)?,
        None => cfg.repository.load_for_validation(&v.workflow, None)?,
    };
    Ok(Envelope::json(crate::workflows::detail(
        &loaded.workflow,
        &v.workflow,
    )))
}

/// Cancels a live run (idempotent).
#[utoipa::path(
    delete,
    path = "/api/executions/{id}",
    operation_id = "cancel-execution",
    tag = "executions",
    params(("id" = String, Path, description = "Run id, or a unique prefix of one")),
    responses(
        (status = 204, description = "Cancelled (or finished already)"),
        (status = 409, description = "Still running in another awf process (a terminal `awf run`), which alone can stop it, or recorded running by an awf process that is gone (`process_gone`: nothing to stop; resume continues it): the hints say how", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong bearer token", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 403, description = "A cross-site request: an `Origin` that is neither this server's nor a `--cors-origin`, or a `Host` that does not name the server", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 422, description = "An ambiguous run id prefix (the hints list candidates)", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 500, description = "Its state file cannot be read", body = ProblemDoc, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn cancel_execution(
    State(cfg): State<Arc<HttpConfig>>,
    Path(id): Path<String>,
) -> Result<StatusCode, Problem> {
    // A unique prefix is enough, as for GET (422 for an ambiguous one, 404 for none).
    let id = cfg.service.resolve(&id)?;
    match cfg.service.cancel(&id, CancelReason::Requested) {
        Ok(()) => Ok(StatusCode::NO_CONTENT),
        // Live in another awf process (a terminal `awf run`): not this server's to stop; a
        // 409 as a resume of it gets, with the service's message and hints (where it runs,
        // how to stop it there). Recorded running by a process that is gone: a 409 too (a
        // 204 would claim it cancelled while it stays recorded `running`).
        Err(e) if e.code() == ErrorCode::UserFacadeInputRejected => {
            Err(Problem::with_status(StatusCode::CONFLICT, e))
        }
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

/// The 409 of a resume refused because the run is still running: the same message whoever
/// found it (this server's check, a resume of the run in flight, the run service).
fn still_running(run_id: &RunId) -> Problem {
    conflict(
        format!("run {run_id} is still running"),
        "wait for it to end, or cancel it (DELETE) before resuming",
    )
}

/// Whether the run service refused to resume `run_id` because it is still running (here,
/// or in another awf process: its owner is alive, or it holds the run's lock).
fn refused_as_running(e: &AwfError, run_id: &RunId) -> bool {
    e.code() == ErrorCode::UserInputValidationFailed
        && e.message()
            .starts_with(&format!("run {run_id} is still running"))
}

/// The runs a `POST …/resume` of this server is resuming now ([`HttpConfig::resuming`]).
#[derive(Debug, Default)]
pub struct Resuming(std::sync::Mutex<std::collections::BTreeSet<String>>);

impl Resuming {
    fn ids(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<String>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks `run` as being resumed until the guard is dropped; `None` when it is already.
    fn begin(self: &Arc<Self>, run: &RunId) -> Option<ResumingGuard> {
        self.ids().insert(run.0.clone()).then(|| ResumingGuard {
            set: Arc::clone(self),
            run: run.0.clone(),
        })
    }
}

/// A run marked as being resumed (see [`Resuming::begin`]); dropping it clears the mark.
struct ResumingGuard {
    set: Arc<Resuming>,
    run: String,
}

impl Drop for ResumingGuard {
    fn drop(&mut self) {
        self.set.ids().remove(&self.run);
    }
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
    params(("id" = String, Path, description = "Run id, or a unique prefix of one")),
    request_body(content = ResumeBody, description = "Overrides and restart point (the body may be empty)", content_type = "application/json"),
    responses(
        (status = 200, description = "Resumed", body = Envelope<RunAccepted>),
        (status = 400, description = "The body is not JSON, or an object in it repeats a key (`detail` names the key and its JSON Pointer)", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong bearer token", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 403, description = "A cross-site request: an `Origin` that is neither this server's nor a `--cors-origin`, or a `Host` that does not name the server", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 415, description = "A body whose `Content-Type` is not `application/json`, or that has a `Content-Encoding` (gzip, br, …)", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 409, description = "Still running (here, in another awf process, or being resumed by another request: always `run <id> is still running`), or completed already", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 413, description = "The body is over 1 MiB", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 422, description = "The run cannot be resumed so (bad step, inputs, workflow; a sub-workflow's run, resumed only with its top-level run), or a body of the wrong shape", body = ProblemDoc, content_type = "application/problem+json"),
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
    let run_id = cfg.service.resolve(&id)?;
    // One resume of a run at a time: another request resuming it now is as good as live
    // (ten at once got 200, 409s and a 422 from the first one's run lock).
    let Some(_resuming) = cfg.resuming.begin(&run_id) else {
        return Err(still_running(&run_id));
    };
    let v = fresh(&cfg, cfg.service.get(&run_id)?);
    // A sub-workflow's run (a `call_workflow` child) is resumed only with the run that called
    // it: the run service refuses it, as `awf resume <child id>` is refused (422
    // `USER.INPUT.VALIDATION_FAILED`, its hint the top-level run's resume route with the
    // secret inputs it needs), whatever the child's own state (running or succeeded too) and
    // before its body is checked against the child's workflow.
    let child = v.parent_run_id.is_some();
    if !child && v.phase == RunPhase::Live {
        return Err(still_running(&run_id));
    }
    if !child && v.status == StoredStatus::Success {
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
    let inputs = body.input_overrides.as_ref().map(pairs).unwrap_or_default();
    let warnings = if inputs.is_empty() || child {
        Vec::new()
    } else {
        match cfg.repository.load(&v.workflow, None) {
            Ok(loaded) => {
                awf_domain::validate::refuse_undeclared_inputs(&loaded.workflow, &inputs)?;
                if let Some(given) = &body.input_overrides {
                    awf_domain::validate::refuse_structured_text_inputs(
                        &loaded.workflow.inputs,
                        given,
                    )?;
                }
                Vec::new()
            }
            Err(_) => Vec::new(),
        }
    };
    let request = ResumeRequest {
        run_id: run_id.0.clone(),
        from,
        inputs,
        config_inputs: cfg.config_inputs.clone(),
        env: cfg.env.clone(),
        working_dir: cfg.working_dir.clone(),
        // Refused by the run service too, which loads the workflow the run was recorded
        // with: the check above finds none for a run started from a terminal elsewhere (its
        // identifier a path relative to that terminal's directory).
        refuse_undeclared_inputs: true,
        ..ResumeRequest::default()
    };
    let id = cfg.service.resume(request).await.map_err(|e| {
        if refused_as_running(&e, &run_id) {
            // Still running in this process or another awf process (which holds the run's
            // lock): the 409 a live run gets above, with the same message; the service's
            // hints say where it runs.
            if e.message().ends_with("in this process") {
                return still_running(&run_id);
            }
            let mut why = AwfError::new(
                ErrorCode::UserFacadeInputRejected,
                format!("run {run_id} is still running"),
            )
            .with_hint(e.message().to_owned());
            for h in e.hints() {
                why = why.with_hint(h.clone());
            }
            Problem::with_status(StatusCode::CONFLICT, why)
        } else if e.code() == ErrorCode::UserFacadeInputRejected {
            // Refused as still running by a worker of a shared store (queued, or running on
            // a worker or in an awf process): a 409 too.
            Problem::with_status(StatusCode::CONFLICT, e)
        } else {
            Problem::from_error_in(
                crate::problem::for_run(e, &run_id.0, "input_overrides"),
                "input_overrides",
            )
        }
    })?;
    cfg.note_started(&id);
    Ok(Envelope::json(RunAccepted {
        execution_id: id.0,
        status: "accepted".to_owned(),
        warnings,
    }))
}

/// The answer a respond body gives to `request`.
///
/// # Errors
/// A 422 problem when the body gives no answer, several, or one of the wrong kind.
pub(crate) fn answer_for(body: &RespondBody, request: &RequestKind) -> Result<Answer, Problem> {
    let text = awf_domain::workflow::json_input_text;
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
            // End of input rejects, as Ctrl-D does at a terminal's approval prompt.
            if body.end_of_input == Some(true) {
                return pick_kind(false);
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
        _ if body.end_of_input == Some(true) => Ok(Answer::EndOfInput),
        // A missing input's value is checked against every rule of the input by the run
        // (`respond` refuses it, 422 below), the same check the terminal and ACP get.
        RequestKind::MissingInput { input, .. } if !input.validation.enum_values.is_empty() => {
            match value {
                Some(v) => Ok(Answer::Value(text(v))),
                None => Err(unfit(format!(
                    "a missing_input request takes `value` (one of: {}) or `end_of_input`",
                    input.validation.enum_values.join(", ")
                ))),
            }
        }
        RequestKind::MissingInput { .. } | RequestKind::ConversationTurn { .. } => match value {
            Some(v) => Ok(Answer::Value(text(v))),
            None => Err(unfit(format!(
                "a {} request takes `value` (or `end_of_input`)",
                request.name()
            ))),
        },
        RequestKind::Breakpoint { previous, .. } => {
            let d = body
                .decision
                .clone()
                .or_else(|| value.map(text))
                .unwrap_or_default();
            decision_of(&d, previous.is_some())
                .map(Answer::Decision)
                .map_err(unfit)
        }
    }
}

/// A breakpoint decision as `respond` takes it: `continue`, `skip`, `abort`, `retry` (only
/// when `has_previous`), `inspect`, `edit NAME=VALUE`, or their letters (`c`, `s`, `a`,
/// `r`, `i`, `e NAME=VALUE`), in any case; the terminal's language (`interact.rs`).
///
/// # Errors
/// The message of a 422: what was given and what is accepted.
pub fn decision_of(text: &str, has_previous: bool) -> Result<BreakpointDecision, String> {
    let t = text.trim();
    let (word, rest) = t.split_once(char::is_whitespace).unwrap_or((t, ""));
    let word = word.to_ascii_lowercase();
    let choices = if has_previous {
        "continue, skip, abort, retry, inspect or edit NAME=VALUE"
    } else {
        "continue, skip, abort, inspect or edit NAME=VALUE"
    };
    if !rest.trim().is_empty() && word != "edit" && word != "e" {
        return Err(format!(
            "a breakpoint takes `decision`: {choices}, not '{t}'"
        ));
    }
    match word.as_str() {
        "continue" | "c" => Ok(BreakpointDecision::Continue),
        "skip" | "s" => Ok(BreakpointDecision::Skip),
        "abort" | "a" => Ok(BreakpointDecision::Abort),
        "retry" | "r" if has_previous => Ok(BreakpointDecision::Retry),
        "retry" | "r" => Err(
            "nothing ran before this breakpoint: `retry` is offered after a state ran".to_owned(),
        ),
        "inspect" | "i" => Ok(BreakpointDecision::Inspect),
        "edit" | "e" => match rest.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok(BreakpointDecision::Edit {
                name: k.trim().to_owned(),
                value: v.trim().to_owned(),
            }),
            _ => Err("`edit` takes NAME=VALUE, e.g. `edit count=3`".to_owned()),
        },
        _ => Err(format!(
            "a breakpoint takes `decision`: {choices}, not '{t}'"
        )),
    }
}

/// Answers a request the run waits on (an approval, a missing input, a conversation turn,
/// a breakpoint).
#[utoipa::path(
    post,
    path = "/api/executions/{id}/respond",
    operation_id = "respond-to-input",
    tag = "executions",
    params(("id" = String, Path, description = "Run id, or a unique prefix of one")),
    request_body(content = RespondBody, description = "The request and its answer", content_type = "application/json"),
    responses(
        (status = 204, description = "Answered"),
        (status = 400, description = "The body is not JSON, or an object in it repeats a key (`detail` names the key and its JSON Pointer)", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong bearer token", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 403, description = "A cross-site request: an `Origin` that is neither this server's nor a `--cors-origin`, or a `Host` that does not name the server", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 415, description = "A body whose `Content-Type` is not `application/json`, or that has a `Content-Encoding` (gzip, br, …)", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 404, description = "No such run, or no such request in it", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 409, description = "Answered already, timed out, asked by an earlier attempt of the run, the run ended, or its worker is gone", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 413, description = "The body is over 1 MiB", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 422, description = "The answer does not fit the request (or several are pending and none is named); a missing input's value that breaks one of the input's rules (`enum`, `pattern`, `min`, `max`, its type, `file_exists`, `file_extension`, or empty when required), `USER.INPUT.VALIDATION_FAILED` whose `detail` names the rule, the request staying pending; or an ambiguous run id prefix (the hints list candidates)", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 500, description = "The run's state file cannot be read", body = ProblemDoc, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn respond(
    State(cfg): State<Arc<HttpConfig>>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<RespondBody>,
) -> Result<StatusCode, Problem> {
    // A unique prefix is enough, as for GET (422 for an ambiguous one, 404 for none).
    let run_id = cfg.service.resolve(&id)?;
    let sub = match cfg.service.subscribe_kept(&run_id, 1) {
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
            // A missing input's value that breaks one of the input's rules: 422 naming the
            // rule, and the request stays pending (answer it again).
            if awf_domain::interaction::refused_value(&e).is_some() {
                return Problem::from_error(crate::problem::for_run(e, &run_id.0, "inputs"));
            }
            // The service's own hints first (a worker of a shared store says what became of
            // the run's worker), then the general one.
            let mut refused = AwfError::new(
                ErrorCode::UserFacadeInputRejected,
                format!(
                    "request {} can no longer be answered: {}",
                    request.request_id,
                    e.message()
                ),
            );
            for h in e.hints() {
                refused = refused.with_hint(h.clone());
            }
            Problem::with_status(
                StatusCode::CONFLICT,
                refused.with_hint("GET the execution: `pending` lists what it waits on now"),
            )
        })?;
    Ok(StatusCode::NO_CONTENT)
}

/// The position a stream resumes after: `Last-Event-ID` (the last position the client
/// got; the header wins over `?after=` when both are given; an empty one counts as absent),
/// else `?after=N`, else 0 (from the start).
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
        // An empty header is no position (an `EventSource` that got no `id:` yet): absent.
        if !s.is_empty() {
            return s.parse::<u64>().map_err(|_| bad("Last-Event-ID", s));
        }
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
            let (name, data) = render(envelope);
            Event::default()
                .event(name)
                .id(position.to_string())
                .data(data)
        }
        SubscriptionItem::Lagged { resume_seq } => Event::default()
            .event("lagged")
            .data(json!({ "resume_position": resume_seq }).to_string()),
    }
}

/// The `event:` name (the event's `type`) and `data:` (the envelope as JSON) of an event.
fn render(envelope: &awf_domain::event::EventEnvelope) -> (String, String) {
    let data = serde_json::to_value(envelope).unwrap_or(Value::Null);
    let name = data
        .get("event")
        .and_then(|e| e.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("event")
        .to_owned();
    (name, data.to_string())
}

/// Most rendered events [`FrameCache`] keeps; past it, it starts afresh.
const FRAME_CACHE_CAP: usize = 8192;

/// One cached rendering: the event it was made from (`seq`, `at`, the envelope's run), then
/// the `event:` name and the `data:` text.
type Rendered = (u64, std::time::SystemTime, RunId, String, String);

/// The rendered `event:` and `data:` of recent events, by (run, position in its log): an
/// event followed by many subscribers is serialised once, not once per subscriber. A hit is
/// used only when the event is the one it was made from (same `seq`, `at` and run: a log
/// started afresh, after `--run-ttl` and a resume, renders again). Bounded: at
/// `FRAME_CACHE_CAP` entries it is emptied.
#[derive(Debug, Default)]
pub struct FrameCache {
    map: std::sync::Mutex<std::collections::HashMap<(String, u64), Arc<Rendered>>>,
}

impl FrameCache {
    /// [`frame`] of `item` of the log of `run`, rendering each event once.
    pub fn frame(&self, run: &RunId, item: &SubscriptionItem) -> Event {
        let SubscriptionItem::Event { position, envelope } = item else {
            return frame(item);
        };
        let key = (run.0.clone(), *position);
        let hit = self
            .map
            .lock()
            .ok()
            .and_then(|m| m.get(&key).cloned())
            .filter(|r| r.0 == envelope.seq && r.1 == envelope.at && r.2 == envelope.run_id);
        let texts = hit.unwrap_or_else(|| {
            let (name, data) = render(envelope);
            let t = Arc::new((
                envelope.seq,
                envelope.at,
                envelope.run_id.clone(),
                name,
                data,
            ));
            if let Ok(mut m) = self.map.lock() {
                if m.len() >= FRAME_CACHE_CAP {
                    m.clear();
                }
                m.insert(key, Arc::clone(&t));
            }
            t
        });
        Event::default()
            .event(texts.3.as_str())
            .id(position.to_string())
            .data(texts.4.as_str())
    }
}

/// The SSE `event:` names: every run event's `type` (domain `RunEvent`, snake_case),
/// `lagged` (a subscriber that fell behind; its data is `{"resume_position": N}`) and
/// `process_gone` (the last frame of a run whose awf process is gone, see
/// [`PROCESS_GONE_EVENT`]), `no_events` (the only frame of a recorded run whose events
/// were not recorded, see [`NO_EVENTS_EVENT`]) and `not_started` (the last frame of a run
/// that never started, see [`NOT_STARTED_EVENT`]).
pub const SSE_EVENT_NAMES: [&str; 18] = [
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
    PROCESS_GONE_EVENT,
    NO_EVENTS_EVENT,
    NOT_STARTED_EVENT,
];

/// One event of `GET /api/executions/{id}/events` as an SSE client reads it, the schema
/// the document gives each event of the stream (OpenAPI 3.1 has an event stream's `schema`
/// describe one event): `{event, id, data}` with `event` the event's type
/// ([`SSE_EVENT_NAMES`]), `id` its position in the run's log (decimal digits; none on
/// `lagged`, `process_gone`, `no_events` and `not_started`) and `data` the event envelope as
/// JSON text (`contentMediaType` `application/json`, `contentSchema`: `{seq, run_id,
/// parent_run_id?, at (ms since the epoch), path, iteration?, event: {type, …}}`, `lagged`'s
/// `{resume_position}`, `process_gone`'s `{run_id, status, process_gone, current_step,
/// message}`, `no_events`' `{run_id, status, events_recorded, message}`, or `not_started`'s
/// `{run_id, status, not_started, error, message}`).
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
        let gone = json!({
            "type": "object",
            "required": ["run_id", "status", "process_gone", "current_step", "message"],
            "properties": {
                "run_id": {"type": "string"},
                "status": {"type": "string", "enum": ["running"]},
                "process_gone": {"type": "boolean", "enum": [true]},
                "current_step": {"type": "string"},
                "message": {"type": "string"}
            }
        });
        let none = json!({
            "type": "object",
            "required": ["run_id", "status", "events_recorded", "message"],
            "properties": {
                "run_id": {"type": "string"},
                "status": {"type": "string"},
                "events_recorded": {"type": "boolean", "enum": [false]},
                "message": {"type": "string"}
            }
        });
        let not_started = json!({
            "type": "object",
            "required": ["run_id", "status", "not_started", "error", "message"],
            "properties": {
                "run_id": {"type": "string"},
                "status": {"type": "string", "enum": ["failed", "cancelled"]},
                "not_started": {"type": "boolean", "enum": [true]},
                "error": {
                    "type": "object",
                    "required": ["code", "message"],
                    "properties": {"code": {"type": "string"}, "message": {"type": "string"}}
                },
                "message": {"type": "string"}
            }
        });
        let mut data = ObjectBuilder::new()
            .schema_type(Type::String)
            .content_media_type("application/json")
            .description(Some(
                "The event envelope (or `lagged`'s position, or `process_gone`'s or `not_started`'s run) as JSON text",
            ))
            .build();
        // `contentSchema` (JSON Schema 2020-12) has no field in utoipa's `Object`; it goes
        // in beside the other keywords.
        let mut keywords = utoipa::openapi::extensions::Extensions::default();
        keywords.insert(
            "contentSchema".to_owned(),
            json!({ "anyOf": [envelope, lagged, gone, none, not_started] }),
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

/// One event stream: the subscription, and whether the run's end was in it.
struct Follow {
    sub: Box<dyn Subscription>,
    cfg: Arc<HttpConfig>,
    run: RunId,
    /// The position the stream goes on after (`Last-Event-ID`, `after`; 0 from the start).
    after: u64,
    /// Whether the last start or end of the run (not of its sub-workflows) sent was its
    /// end; `None` while none was sent (a stream resumed past them knows nothing yet).
    finished: Option<bool>,
    /// The closing `process_gone` (or `not_started`) event was sent.
    closed: bool,
}

impl Follow {
    /// Notes a start or end of the run itself (a resumed run's log holds several).
    fn note(&mut self, item: &SubscriptionItem) {
        if let Some(end) = start_or_end(&self.run, item) {
            self.finished = Some(end);
        }
    }

    /// Whether the stream ended on the run's end: its last start or end sent, or, for a
    /// stream resumed past all of them (a client reconnecting after `run_finished`, or
    /// past the log's end), the last one at or before the resume position.
    /// (A future that holds no borrow of `self`: the subscription in it is not `Sync`.)
    fn ended(&self) -> impl Future<Output = bool> + Send + use<> {
        let (finished, after) = (self.finished, self.after);
        let (cfg, run) = (Arc::clone(&self.cfg), self.run.clone());
        async move {
            match finished {
                Some(end) => end,
                None if after > 0 => ended_within(&cfg, &run, after).await,
                None => false,
            }
        }
    }
}

/// `Some(true)` when `item` is the end of `run` itself (`run_finished`, not a
/// sub-workflow's), `Some(false)` when it is its start, `None` for any other item.
fn start_or_end(run: &RunId, item: &SubscriptionItem) -> Option<bool> {
    match item {
        SubscriptionItem::Event { envelope, .. } if envelope.run_id == *run => {
            match envelope.event {
                RunEvent::RunFinished { .. } => Some(true),
                RunEvent::RunStarted { .. } => Some(false),
                _ => None,
            }
        }
        SubscriptionItem::Event { .. } | SubscriptionItem::Lagged { .. } => None,
    }
}

/// Whether the log of `run`, an ended log, holds the run's end as its last start or end at
/// or before position `upto`: nothing follows `upto` then, and a stream resumed there just
/// ends, as a stream read to `run_finished` does (no `no_events` frame: the transcript is
/// whole). The usual reconnect names the `run_finished` itself, looked at first; any other
/// position reads the log from its start.
async fn ended_within(cfg: &HttpConfig, run: &RunId, upto: u64) -> bool {
    if let Ok(mut sub) = cfg.service.subscribe(run, upto)
        && let Some(item) = sub.next().await
        && matches!(item, SubscriptionItem::Event { position, .. } if position == upto)
        && start_or_end(run, &item) == Some(true)
    {
        return true;
    }
    let Ok(mut sub) = cfg.service.subscribe(run, 1) else {
        return false;
    };
    let mut ended = false;
    while let Some(item) = sub.next().await {
        if matches!(item, SubscriptionItem::Event { position, .. } if position > upto) {
            break;
        }
        if let Some(end) = start_or_end(run, &item) {
            ended = end;
        }
    }
    ended
}

/// The `event:` name of the frame that ends the stream of a run whose awf process is gone.
pub const PROCESS_GONE_EVENT: &str = "process_gone";

/// The frame that closes the stream of `run` when it is recorded as running and its awf
/// process is gone ([`HttpConfig::process_gone`]): `event: process_gone`, no `id:` (it is
/// not in the run's log, like `lagged`), `data: {"run_id", "status": "running",
/// "process_gone": true, "current_step", "message"}`, what `GET /api/executions/{id}` says
/// of the run. `None` for any other run.
fn gone_event(cfg: &HttpConfig, run: &RunId) -> Option<Event> {
    let v = cfg.service.get(run).ok()?;
    let h = cfg
        .history
        .as_ref()
        .and_then(|h| h.get(&run.0).ok().flatten());
    if gone_of(cfg, [(&v, h.as_ref())]).is_empty() {
        return None;
    }
    // A sub-workflow's run is resumed with its top-level run (resuming it alone is a 422).
    let mut resumed = v.parent_run_id.as_ref().map(|p| p.0.clone());
    if let (Some(states), Some(mut up)) = (cfg.states.as_ref(), resumed.clone()) {
        for _ in 0..64 {
            match states.load(&up).ok().and_then(|s| s.parent_run_id) {
                Some(next) => up = next,
                None => break,
            }
        }
        resumed = Some(up);
    }
    let how = match &resumed {
        Some(root) => format!(
            "it is a sub-workflow's run: POST /api/executions/{root}/resume (its top-level run) continues it"
        ),
        None => format!("POST /api/executions/{run}/resume continues it"),
    };
    let data = json!({
        "run_id": run.0,
        "status": ExecStatus::Running,
        "process_gone": true,
        "current_step": v.current_state.unwrap_or_default(),
        "message": format!(
            "the awf process that ran run {run} is gone (killed or crashed): the run stopped \
             without finishing; {how}"
        ),
    });
    Some(
        Event::default()
            .event(PROCESS_GONE_EVENT)
            .data(data.to_string()),
    )
}

/// The `event:` name of the frame that says a recorded run's events are not all there: the
/// only frame of a run whose events were not recorded (no transcript: a store without one, a
/// transcript removed), or the last of one whose transcript stops before the run's end
/// (damaged, cut).
pub const NO_EVENTS_EVENT: &str = "no_events";

/// The `no_events` frame of `run` (no `id:`: it is not in a log), `data: {"run_id",
/// "status", "events_recorded": false, "message"}`; `cut`: some events were replayed before
/// it. `None` when the run is not known, or is live or still running (its events may come).
fn no_events_event(cfg: &HttpConfig, run: &RunId, cut: bool) -> Option<Event> {
    let v = cfg.service.get(run).ok()?;
    if cut
        && (v.phase == RunPhase::Live
            || matches!(
                v.status,
                StoredStatus::Running | StoredStatus::Waiting | StoredStatus::Queued
            ))
    {
        return None;
    }
    let status = ExecStatus::from(v.status);
    let message = if cut {
        format!(
            "the recorded events of run {run} stop before its end (its transcript is damaged or cut): GET /api/executions/{run} gives how it ended, from its state file"
        )
    } else {
        format!(
            "run {run} has no recorded events (its transcript is missing): GET /api/executions/{run} gives what its state file says"
        )
    };
    let data = json!({
        "run_id": run.0,
        "status": status,
        "events_recorded": false,
        "message": message,
    });
    Some(
        Event::default()
            .event(NO_EVENTS_EVENT)
            .data(data.to_string()),
    )
}

/// The stream of run `run`, known to the store but without a recorded event log: `: open`,
/// then one `event: no_events` frame ([`no_events_event`]), then the end. `None` when the
/// run is not known at all (the caller's 404 stands).
fn no_events_stream(cfg: &HttpConfig, run: &RunId) -> Option<Response> {
    let frames = [
        Event::default().comment("open"),
        no_events_event(cfg, run, false)?,
    ]
    .map(Ok::<Event, std::convert::Infallible>);
    Some(Sse::new(futures::stream::iter(frames)).into_response())
}

/// Why the run `run`, ended in this server without a result, never started (the error its
/// start ended on, as [`RunService::wait`] returns it); `None` for any other run.
async fn not_started_error(cfg: &HttpConfig, run: &RunId) -> Option<RunError> {
    let v = cfg.service.get(run).ok()?;
    if v.phase != RunPhase::Finished || v.exit_code.is_some() {
        return None;
    }
    match cfg.service.wait(run).await {
        Ok(_) => None,
        Err(e) => Some(RunError {
            code: e.code().as_str().to_owned(),
            message: e.message().to_owned(),
        }),
    }
}

/// The `event:` name of the frame that ends the stream of a run that never started.
pub const NOT_STARTED_EVENT: &str = "not_started";

/// The frame that closes the stream of `run` when it ended in this server without starting
/// (a missing input answered with `end_of_input`, a cancel while it asked, its inputs not
/// resolving): `event: not_started`, no `id:` (it is not in the run's log), `data:
/// {"run_id", "status": "failed"|"cancelled", "not_started": true, "error": {code,
/// message}, "message"}`, what `GET /api/executions/{id}` says of the run. `None` for any
/// other run.
async fn not_started_event(cfg: &HttpConfig, run: &RunId) -> Option<Event> {
    let error = not_started_error(cfg, run).await?;
    let status = cfg
        .service
        .get(run)
        .map_or(ExecStatus::Failed, |v| ExecStatus::from(v.status));
    let data = json!({
        "run_id": run.0,
        "status": status,
        "not_started": true,
        "message": format!("run {run} never started: {}", error.message),
        "error": error,
    });
    Some(
        Event::default()
            .event(NOT_STARTED_EVENT)
            .data(data.to_string()),
    )
}

/// Follows a run's events (Server-Sent Events).
#[utoipa::path(
    get,
    path = "/api/executions/{id}/events",
    operation_id = "stream-execution-events",
    tag = "executions",
    params(
        ("id" = String, Path, description = "Run id, or a unique prefix of one (the events carry the full id)"),
        EventsHeaders,
        EventsQuery,
    ),
    responses(
        (status = 200, description = "One frame per event of the run's log, then the stream ends after `run_finished`: `id: <position>`, `event: <type>` (`run_started`, `step_started`, `output_chunk`, `step_finished`, `interaction_required`, `interaction_resolved`, `run_finished`, …), `data: <event envelope JSON>`; an `: open` comment first (the headers go out at once), `:` heartbeat comments after `--keep-alive` (15 s) of silence. A run recorded as running whose awf process is gone (killed, crashed) has no `run_finished`: its stream ends with one `event: process_gone` frame without `id:`, `data: {\"run_id\", \"status\": \"running\", \"process_gone\": true, \"current_step\", \"message\"}` (`POST …/resume` continues the run). A recorded run whose events were not recorded (no transcript) gets one `event: no_events` frame without `id:`, `data: {\"run_id\", \"status\", \"events_recorded\": false, \"message\"}`, and the stream ends; a finished run whose recorded events stop before its end (a damaged or cut transcript) gets the same frame after them. A run that never started (a missing input answered with `end_of_input`, a cancel while it asked for one) has neither: its stream ends with one `event: not_started` frame without `id:`, `data: {\"run_id\", \"status\": \"failed\"|\"cancelled\", \"not_started\": true, \"error\": {\"code\", \"message\"}, \"message\"}`. The schema describes one event", body = SseEvent, content_type = "text/event-stream"),
        (status = 400, description = "The query string does not decode", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong bearer token", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 404, description = "No such run (neither this server nor its store knows it)", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 422, description = "`Last-Event-ID` or `after` is not a number, or an ambiguous run id prefix (the hints list candidates)", body = ProblemDoc, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn stream_events(
    State(cfg): State<Arc<HttpConfig>>,
    Path(id): Path<String>,
    Query(q): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let after = resume_after(&headers, q.after.as_deref())?;
    // A unique prefix is enough, as for GET (422 for an ambiguous one, 404 for none); the
    // log is the full id's, so its events (and the frame cache) carry the full id.
    let run = cfg.service.resolve(&id)?;
    let sub = match cfg.service.subscribe(&run, after.saturating_add(1)) {
        Ok(sub) => sub,
        // Known (GET answers it) but with no log to replay: said in one closing frame.
        Err(e) if e.code() == ErrorCode::UserFacadeRunNotFound => {
            return no_events_stream(&cfg, &run).ok_or_else(|| Problem::from(e));
        }
        Err(e) => return Err(e.into()),
    };
    let follow = Follow {
        sub,
        cfg: Arc::clone(&cfg),
        run,
        after,
        finished: None,
        closed: false,
    };
    let events = futures::stream::unfold(follow, |mut f: Follow| async move {
        let ev = match f.sub.next().await {
            Some(item) => {
                f.note(&item);
                f.cfg.frames.frame(&f.run, &item)
            }
            // The log ended without the run's end: its awf process is gone (the record
            // stops growing once its owner died). Said once, then the stream ends.
            // Or it never started (no `run_started` either): said why, once.
            None if !f.closed && !f.ended().await => {
                f.closed = true;
                // Or its recorded events stop before its end (a damaged transcript): said so,
                // with how it ended.
                match gone_event(&f.cfg, &f.run) {
                    Some(ev) => ev,
                    None => match not_started_event(&f.cfg, &f.run).await {
                        Some(ev) => ev,
                        None => no_events_event(&f.cfg, &f.run, true)?,
                    },
                }
            }
            None => return None,
        };
        Some((Ok::<Event, std::convert::Infallible>(ev), f))
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

    /// Live runs (here or in another process) come first, then the others, newest first in
    /// each group (new user: a live `awf run` was listed after the server's finished runs).
    #[test]
    fn executions_are_listed_live_first_then_newest_first() {
        let run = |id: &str, status: ExecStatus, phase: Phase, at: Option<&str>| ExecutionSummary {
            execution_id: id.into(),
            workflow_name: "w".into(),
            workflow: "w".into(),
            status,
            current_step: String::new(),
            phase,
            exit_code: None,
            started_at: at.map(str::to_owned),
            completed_at: None,
            duration_ms: None,
            waiting_until: None,
            process_gone: false,
        };
        let mut list = vec![
            run(
                "old-done",
                ExecStatus::Failed,
                Phase::Finished,
                Some("2026-12-03T12:16:00Z"),
            ),
            run(
                "new-done",
                ExecStatus::Completed,
                Phase::Finished,
                Some("2026-12-03T12:16:45Z"),
            ),
            run(
                "here",
                ExecStatus::Running,
                Phase::Live,
                Some("2026-12-03T12:10:00Z"),
            ),
            run(
                "elsewhere",
                ExecStatus::Running,
                Phase::Recorded,
                Some("2026-12-03T12:17:39Z"),
            ),
            run(
                "older-rec",
                ExecStatus::Completed,
                Phase::Recorded,
                Some("2026-12-03T11:00:00Z"),
            ),
        ];
        order_executions(&mut list);
        let ids: Vec<&str> = list.iter().map(|e| e.execution_id.as_str()).collect();
        assert_eq!(
            ids,
            ["elsewhere", "here", "new-done", "old-done", "older-rec"]
        );
    }

    #[test]
    fn a_cached_frame_is_the_frame_and_a_changed_event_renders_again() {
        use awf_domain::event::EventEnvelope;
        let env = |seq: u64, text: &str| EventEnvelope {
            seq,
            run_id: RunId("r".into()),
            parent_run_id: None,
            at: std::time::UNIX_EPOCH + std::time::Duration::from_millis(seq),
            path: "s".into(),
            iteration: None,
            event: RunEvent::Log {
                step: Some("s".into()),
                level: awf_domain::event::LogLevel::Info,
                message: text.into(),
            },
        };
        let item = |seq, text| SubscriptionItem::Event {
            position: 1,
            envelope: Box::new(env(seq, text)),
        };
        let text = |e: Event| format!("{e:?}");
        let cache = FrameCache::default();
        let run = RunId("r".into());
        let a = item(1, "first");
        assert_eq!(text(cache.frame(&run, &a)), text(frame(&a)));
        assert_eq!(text(cache.frame(&run, &a)), text(frame(&a)));
        // Position 1 of a log started afresh holds another event: not the cached text.
        let b = item(7, "second");
        let got = text(cache.frame(&run, &b));
        assert_eq!(got, text(frame(&b)));
        assert!(got.contains("second") && !got.contains("first"), "{got}");
    }

    #[test]
    fn breakpoint_decisions_are_the_terminals_choices() {
        use BreakpointDecision as D;
        assert_eq!(decision_of("continue", false), Ok(D::Continue));
        assert_eq!(decision_of(" C ", false), Ok(D::Continue));
        assert_eq!(decision_of("Skip", false), Ok(D::Skip));
        assert_eq!(decision_of("a", false), Ok(D::Abort));
        assert_eq!(decision_of("i", true), Ok(D::Inspect));
        assert_eq!(decision_of("retry", true), Ok(D::Retry));
        let e = decision_of("retry", false).unwrap_err();
        assert!(e.contains("nothing ran"), "{e}");
        assert_eq!(
            decision_of("edit count = 3", false),
            Ok(D::Edit {
                name: "count".into(),
                value: "3".into()
            })
        );
        assert!(decision_of("edit count", false).is_err());
        assert!(decision_of("continue now", false).is_err());
        let e = decision_of("go", false).unwrap_err();
        assert!(e.contains("continue, skip, abort, inspect"), "{e}");
        let ids: Vec<String> = breakpoint_options(false)
            .into_iter()
            .map(|o| o.id)
            .collect();
        assert_eq!(ids, ["continue", "skip", "abort", "inspect", "edit"]);
        assert!(breakpoint_options(true).iter().any(|o| o.id == "retry"));
    }
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
            command: None,
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
        // Empty (or blank): as if absent.
        h.insert("last-event-id", HeaderValue::from_static(""));
        assert_eq!(resume_after(&h, None).unwrap(), 0);
        assert_eq!(resume_after(&h, Some("4")).unwrap(), 4);
        h.insert("last-event-id", HeaderValue::from_static(" "));
        assert_eq!(resume_after(&h, None).unwrap(), 0);
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

    #[test]
    fn end_of_input_rejects_an_approval_as_ctrl_d_does() {
        let approval = RequestKind::Approval {
            message: "Deploy?".into(),
            options: ApprovalOption::defaults(),
        };
        assert_eq!(
            answer_for(&body(json!({"end_of_input": true})), &approval).unwrap(),
            Answer::Option("reject".into())
        );
    }

    fn enum_input() -> RequestKind {
        RequestKind::MissingInput {
            input: Box::new(awf_domain::workflow::InputDef {
                name: "env".into(),
                ty: awf_domain::workflow::InputType::String,
                description: None,
                required: true,
                default: None,
                validation: awf_domain::workflow::InputValidation {
                    enum_values: vec!["dev".into(), "prod".into()],
                    ..Default::default()
                },
            }),
            problem: None,
        }
    }

    #[test]
    fn an_enum_input_takes_a_value_and_lists_its_values() {
        let req = enum_input();
        assert_eq!(
            answer_for(&body(json!({"value": "prod"})), &req).unwrap(),
            Answer::Value("prod".into())
        );
        // The run checks the value against every rule (its `respond` refuses `staging`:
        // tests/tests/trial_fixes_42.rs), as it does for the terminal and ACP.
        assert_eq!(
            answer_for(&body(json!({"value": "staging"})), &req).unwrap(),
            Answer::Value("staging".into())
        );
        let e = answer_for(&body(json!({"option": "prod"})), &req).unwrap_err();
        assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(
            e.error.message().contains("one of: dev, prod"),
            "{}",
            e.error.message()
        );
        assert_eq!(
            answer_for(&body(json!({"end_of_input": true})), &req).unwrap(),
            Answer::EndOfInput
        );
        let r = InteractionRequest {
            request_id: "r1".into(),
            step: None,
            kind: req,
            timeout_ms: None,
        };
        let p = pending_of(&r);
        let ids: Vec<&str> = p.options.iter().map(|o| o.id.as_str()).collect();
        assert_eq!(ids, ["dev", "prod"]);
        assert!(p.options.iter().all(|o| o.kind == "value"));
    }
}

#[cfg(test)]
mod resumed_log_tests {
    use super::*;
    use awf_domain::event::EventEnvelope;
    use awf_domain::run::RunResult;
    use awf_domain::run::RunStatus;
    use awf_domain::run::StepState;

    /// A subscription over fixed events.
    struct Fixed(std::collections::VecDeque<SubscriptionItem>);

    impl Subscription for Fixed {
        fn next<'life0, 'async_trait>(
            &'life0 mut self,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Option<SubscriptionItem>> + Send + 'async_trait>,
        >
        where
            'life0: 'async_trait,
            Self: 'async_trait,
        {
            let item = self.0.pop_front();
            Box::pin(async move { item })
        }
    }

    fn env(event: RunEvent) -> EventEnvelope {
        EventEnvelope {
            seq: 0,
            run_id: RunId("r".into()),
            parent_run_id: None,
            at: std::time::SystemTime::UNIX_EPOCH,
            path: String::new(),
            iteration: None,
            event,
        }
    }

    fn started() -> RunEvent {
        RunEvent::RunStarted {
            workflow: "w".into(),
            identifier: "w".into(),
            workflow_path: None,
            inputs: Map::new(),
            resumed_from: None,
            pid: 1,
            mocks: Default::default(),
            working_dir: None,
        }
    }

    fn step_state(name: &str, status: &str, output: &str) -> StepState {
        serde_json::from_value(json!({
            "name": name, "status": status, "output": output, "stderr": "",
            "exit_code": 1, "attempts": 1, "error": "boom", "response": null, "json": null,
            "tokens": {"input": 0, "output": 0, "total": 0, "estimated": false}
        }))
        .unwrap()
    }

    #[test]
    fn a_resumed_runs_log_shows_both_attempts_states_and_only_the_latest_end() {
        let failed = RunResult {
            run_id: Some(RunId("r".into())),
            workflow: "w".into(),
            status: RunStatus::Failure,
            exit_code: 1,
            terminal: None,
            duration_ms: 1,
            states: BTreeMap::new(),
            outputs: BTreeMap::new(),
            error: Some(awf_domain::error::ErrorBody {
                code: ErrorCode::ExecutionCommandFailed,
                message: "boom".into(),
                hints: vec![],
                details: BTreeMap::new(),
            }),
            message: None,
            spend: None,
        };
        let events = vec![
            started(),
            RunEvent::StepStarted {
                step: "one".into(),
                kind: "command".into(),
                command: None,
            },
            RunEvent::StepFinished {
                step: "one".into(),
                kind: "command".into(),
                state: Box::new(step_state("one", "failed", "partial")),
            },
            RunEvent::RunFinished {
                result: Box::new(failed),
            },
            started(),
            RunEvent::StepStarted {
                step: "two".into(),
                kind: "command".into(),
                command: None,
            },
        ];
        let items = events
            .into_iter()
            .enumerate()
            .map(|(i, e)| SubscriptionItem::Event {
                position: i as u64 + 1,
                envelope: Box::new(env(e)),
            })
            .collect();
        let s = snapshot(Box::new(Fixed(items)), &RunId("r".into()));
        assert!(!s.finished, "the second attempt runs");
        assert!(s.error.is_none() && s.terminal.is_none());
        assert_eq!(s.states["one"].status, "failed");
        assert_eq!(s.states["one"].exit_code, Some(1));
        assert_eq!(s.states["one"].output.as_deref(), Some("partial"));
        assert_eq!(s.states["two"].status, "running");
        assert_eq!(s.states["two"].output, None);
    }

    /// A killed attempt (no `run_finished`) left `b` started; the resumed attempt ran `c`
    /// and ended: `b` is not shown `running` (breaker: kill -9, resume `from_step` over
    /// HTTP, and the completed run listed `b` as running; `awf status` left it out).
    #[test]
    fn a_state_a_killed_attempt_left_started_is_not_running_after_a_resume() {
        let step = |name: &str| RunEvent::StepStarted {
            step: name.into(),
            kind: "command".into(),
            command: None,
        };
        let done = |name: &str| RunEvent::StepFinished {
            step: name.into(),
            kind: "command".into(),
            state: Box::new(step_state(name, "completed", "ok")),
        };
        let ended = RunResult {
            run_id: Some(RunId("r".into())),
            workflow: "w".into(),
            status: RunStatus::Success,
            exit_code: 0,
            terminal: Some("done".into()),
            duration_ms: 1,
            states: BTreeMap::new(),
            outputs: BTreeMap::new(),
            error: None,
            message: None,
            spend: None,
        };
        let log = |events: Vec<RunEvent>| {
            let items = events
                .into_iter()
                .enumerate()
                .map(|(i, e)| SubscriptionItem::Event {
                    position: i as u64 + 1,
                    envelope: Box::new(env(e)),
                })
                .collect();
            snapshot(Box::new(Fixed(items)), &RunId("r".into()))
        };
        let attempts = vec![started(), step("a"), done("a"), step("b"), started()];
        let s = log(attempts.clone());
        assert_eq!(s.states.keys().collect::<Vec<_>>(), ["a"], "{:?}", s.states);
        let mut all = attempts;
        all.extend([
            step("c"),
            done("c"),
            RunEvent::RunFinished {
                result: Box::new(ended),
            },
        ]);
        let s = log(all);
        assert!(s.finished);
        assert_eq!(
            s.states
                .iter()
                .map(|(k, v)| (k.as_str(), v.status.as_str()))
                .collect::<Vec<_>>(),
            [("a", "completed"), ("c", "completed")]
        );
    }

    #[test]
    fn output_keeps_its_last_64_kib_at_a_character_boundary() {
        let text = format!("{}{}", "é".repeat(40_000), "END");
        let (out, cut) = capped(&text);
        assert!(cut);
        assert!(out.len() <= OUTPUT_CAP && out.len() > OUTPUT_CAP - 4);
        assert!(out.ends_with("END"));
        assert_eq!(capped("short"), ("short".to_owned(), false));
    }
}

#[cfg(test)]
#[path = "executions_gone_tests.rs"]
mod gone_tests;
