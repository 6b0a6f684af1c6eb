//! One run service across workers: [`PgRunService`] implements the `RunService` port over
//! this process's run service (the local one, which executes what this worker claimed) and
//! the shared store, so that any worker answers for any run. `awf serve --store` hands it to
//! awf-http, which does not know the difference.
//!
//! | call | what it does |
//! |---|---|
//! | `start` | checks the run as its start would (the [`StartCheck`] given), then submits it to the queue (any worker may run it); the id is made here |
//! | `resume` | a queued resume of a recorded run that ended (else the local resume); one that is queued or running (on a worker or in an awf process) is refused with `USER.FACADE.INPUT_REJECTED`, as the embedded server refuses a run it runs (409) |
//! | `get` | local runs first, else `awf_runs` rows |
//! | `resolve` | an exact id, else a prefix among the `awf_runs` rows (unique across the store), else the local runs |
//! | `list` | `awf_runs` rows in one order on every worker (in progress first, newest first in each group), a run held here as this worker knows it |
//! | `subscribe` | for any run: `awf_events` from the position, then live (LISTEN `awf_events`, re-read from the table on every notice and every second), ending after the root run's `RunFinished` once the run is no longer queued or claimed |
//! | `respond` | local when pending here, else an `awf_answers` row + NOTIFY `awf_control`; waits (up to 10 s) for the run's worker to mark it accepted or rejected; refused at once when that worker is gone (`worker_gone`) |
//! | `cancel` | local when live here, else `cancel_requested` + NOTIFY `awf_control` (a queued run, a parked one and one whose terminal process is gone are cancelled at once) |
//! | `wait` | local, else until the row is done (its `RunFinished` result, else one made from the row) |
//!
//! A queued run's row (`status = 'queued'`) shows as [`StoredStatus::Queued`] in phase
//! [`RunPhase::Recorded`] until a worker starts it.
//!
//! Source: issue 15 ("Events", "one run service across workers").

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::event::EventEnvelope;
use awf_domain::event::RunEvent;
use awf_domain::interaction::Answer;
use awf_domain::ports::IdGenerator;
use awf_domain::ports::facade::ResumeRequest;
use awf_domain::ports::facade::RunRequest;
use awf_domain::ports::service::RunPhase;
use awf_domain::ports::service::RunService;
use awf_domain::ports::service::RunView;
use awf_domain::ports::service::Subscription;
use awf_domain::ports::service::SubscriptionItem;
use awf_domain::ports::store::StoredStatus;
use awf_domain::run::CancelReason;
use awf_domain::run::RunId;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use serde_json::Value;
use tokio::sync::broadcast;

use crate::PgStore;
use crate::column;
use crate::db_text;
use crate::listen::Listener;
use crate::listen::Notice;
use crate::queue;
use crate::queue::CancelOutcome;
use crate::queue::QueuedRequest;
use crate::unavailable;

/// How long `respond` waits for the run's worker to take an answer.
pub const ANSWER_WAIT: Duration = Duration::from_secs(10);

/// What a worker checks of a run before it queues it: the checks the run's start makes (the
/// workflow found and valid, its inputs), returning the request as it is queued (the
/// workflow by its file's absolute path, so that any worker runs the file this one found).
/// The composition root provides it (the checks are the application's), with the workflow's
/// name (shown for the run while it is queued).
pub type StartCheck =
    Arc<dyn Fn(RunRequest) -> Result<(RunRequest, Option<String>), AwfError> + Send + Sync>;

/// The run service of a worker of the shared store.
pub struct PgRunService {
    store: PgStore,
    local: Arc<dyn RunService>,
    ids: Arc<dyn IdGenerator>,
    listener: Listener,
    check: Option<StartCheck>,
}

impl std::fmt::Debug for PgRunService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgRunService")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// One `awf_runs` row as the service reads it.
#[derive(Debug, Clone)]
struct Row {
    run_id: String,
    parent_run_id: Option<String>,
    workflow_id: String,
    status: String,
    exit_code: Option<i32>,
    queue_state: String,
    current_state: Option<String>,
    error_message: Option<String>,
    duration_ms: Option<i64>,
    /// A parked run's reset time (schema 3).
    waiting_until: Option<std::time::SystemTime>,
    /// The workflow's name, as shown (a queued run's too, though queued by its path).
    workflow_name: String,
}

const ROW_COLUMNS: &str = "run_id, parent_run_id, workflow_id, status, exit_code, queue_state, \
     snapshot->>'current_state', error_message, duration_ms, waiting_until, workflow_name";

fn row_of(r: &tokio_postgres::Row) -> Result<Row, AwfError> {
    Ok(Row {
        run_id: column(r, 0)?,
        parent_run_id: column(r, 1)?,
        workflow_id: column(r, 2)?,
        status: column(r, 3)?,
        exit_code: column(r, 4)?,
        queue_state: column(r, 5)?,
        current_state: column(r, 6)?,
        error_message: column(r, 7)?,
        duration_ms: column(r, 8)?,
        waiting_until: column(r, 9)?,
        workflow_name: column(r, 10)?,
    })
}

fn stored_status(text: &str) -> StoredStatus {
    match text {
        "success" => StoredStatus::Success,
        "failure" => StoredStatus::Failure,
        "cancelled" => StoredStatus::Cancelled,
        "waiting" => StoredStatus::Waiting,
        // Submitted, not started by any worker yet.
        "queued" => StoredStatus::Queued,
        _ => StoredStatus::Running,
    }
}

impl Row {
    fn view(&self) -> RunView {
        RunView {
            run_id: RunId(self.run_id.clone()),
            parent_run_id: self.parent_run_id.clone().map(RunId),
            workflow: self.workflow_name.clone(),
            phase: RunPhase::Recorded,
            status: stored_status(&self.status),
            current_state: self.current_state.clone().filter(|c| !c.is_empty()),
            exit_code: self.exit_code.and_then(|c| u8::try_from(c).ok()),
            waiting_until: self.waiting_until.filter(|_| self.status == "waiting"),
        }
    }

    /// `here`, this process's view of the run, unless that run ended here and its row has
    /// ended differently since (a run this worker parked, cancelled through the store
    /// meanwhile): then the row's view. A live run, or one whose end the row does not show
    /// yet, is as this process sees it.
    fn newer_than(&self, here: RunView) -> RunView {
        if here.phase == RunPhase::Finished
            && self.ended()
            && stored_status(&self.status) != here.status
        {
            self.view()
        } else {
            here
        }
    }

    fn ended(&self) -> bool {
        !matches!(self.queue_state.as_str(), "queued" | "claimed")
            // `waiting`: parked on a usage limit (this attempt ended; a resume is another).
            && matches!(
                self.status.as_str(),
                "success" | "failure" | "cancelled" | "waiting"
            )
    }
}

fn unknown(run_id: &str) -> AwfError {
    AwfError::new(
        ErrorCode::UserFacadeRunNotFound,
        format!("no run with id {run_id}"),
    )
    .with_hint("`awf history` lists recorded runs; a unique prefix of a run id is enough")
}

fn not_found_here(e: &AwfError) -> bool {
    e.code() == ErrorCode::UserFacadeRunNotFound
}

async fn load_row(store: &PgStore, run_id: &str) -> Result<Option<Row>, AwfError> {
    let pool = store.pool().clone();
    // As stored (a NUL, which PostgreSQL text refuses, is U+FFFD there): an id holding one
    // is found nowhere (404), never a store error (500).
    let id = crate::storable_text(run_id);
    store
        .run(async move {
            let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
            let r = client
                .query_opt(
                    &format!("SELECT {ROW_COLUMNS} FROM awf_runs WHERE run_id = $1"),
                    &[&id],
                )
                .await
                .map_err(|e| unavailable("read the run", &db_text(&e)))?;
            r.as_ref().map(row_of).transpose()
        })
        .await?
}

impl PgRunService {
    /// The service over `local` (this worker's run service) and `store`; `ids` makes the ids
    /// of submitted runs; `listener` is the process's.
    pub fn new(
        store: PgStore,
        local: Arc<dyn RunService>,
        ids: Arc<dyn IdGenerator>,
        listener: Listener,
    ) -> Self {
        Self {
            store,
            local,
            ids,
            listener,
            check: None,
        }
    }

    /// The same service checking each run it is asked to start with `check` before queueing
    /// it (and queueing what `check` returns).
    #[must_use]
    pub fn with_start_check(mut self, check: StartCheck) -> Self {
        self.check = Some(check);
        self
    }

    /// Runs `f` on the store's runtime from a synchronous port method (never blocking a
    /// runtime worker thread without telling tokio).
    fn blocking<F, T>(&self, work: F) -> Result<T, AwfError>
    where
        F: std::future::Future<Output = Result<T, AwfError>> + Send + 'static,
        T: Send + 'static,
    {
        let store = self.store.clone();
        let call = move || store.block_on(work);
        let r = if tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
        {
            tokio::task::block_in_place(call)
        } else {
            call()
        };
        r?
    }

    fn row(&self, run_id: &str) -> Result<Option<Row>, AwfError> {
        let store = self.store.clone();
        let id = run_id.to_owned();
        self.blocking(async move { load_row(&store, &id).await })
    }
}

#[async_trait::async_trait]
impl RunService for PgRunService {
    async fn start(&self, request: RunRequest) -> Result<RunId, AwfError> {
        let (request, name) = match &self.check {
            Some(check) => check(request)?,
            None => (request, None),
        };
        let id = request.run_id.clone().unwrap_or_else(|| self.ids.run_id());
        let queued = QueuedRequest::of_run(&request).named(name);
        let pool = self.store.pool().clone();
        let sid = id.clone();
        self.store
            .run(async move { queue::submit(&pool, &sid, &queued).await })
            .await??;
        Ok(id)
    }

    async fn resume(&self, request: ResumeRequest) -> Result<RunId, AwfError> {
        let id = RunId(request.run_id.clone());
        let Some(row) = load_row(&self.store, &id.0).await? else {
            return self.local.resume(request).await;
        };
        if row.parent_run_id.is_some() {
            // A sub-workflow's run is never queued on its own (the queue takes top-level runs
            // only): the local service refuses it, naming the top-level run to resume, as
            // `awf resume <child id>` does.
            return self.local.resume(request).await;
        }
        if row.status == "success" {
            return Err(AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!("run {id} already completed successfully; nothing to resume"),
            )
            .with_hint("`awf resume --list` shows runs that can be resumed"));
        }
        // Cancelled before any worker started it: queued again as the run it was (its
        // submitted inputs, the overrides on top), as `awf resume` starts it; a resume of a
        // run that never ran would find no state to go on from.
        let pool = self.store.pool().clone();
        let (sid, overrides) = (id.clone(), request.inputs.clone());
        let unstarted = self
            .store
            .run(async move { queue::requeue_unstarted(&pool, &sid, &overrides).await })
            .await??;
        match unstarted {
            Some(Ok(())) => return Ok(id),
            Some(Err(masked)) => {
                return Err(AwfError::new(
                    ErrorCode::UserInputValidationFailed,
                    format!(
                        "run {id} never started, and its secret inputs ({}) \
                         were not kept",
                        masked.join(", ")
                    ),
                )
                .with_hint(format!(
                    "give them again: {{\"input_overrides\": {{{}}}}}",
                    masked
                        .iter()
                        .map(|k| format!("\"{k}\": \"…\""))
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            None => {}
        }
        let mut queued = QueuedRequest::of_resume(&row.workflow_id, &request);
        // Shown by its name by the worker that resumes it, as every worker shows it.
        queued.name = Some(row.workflow_name.clone());
        let pool = self.store.pool().clone();
        let sid = id.clone();
        let ok = self
            .store
            .run(async move { queue::requeue_resume(&pool, &sid, &queued).await })
            .await??;
        if ok {
            Ok(id)
        } else {
            // What the embedded server answers for a run it is running (409 over HTTP).
            Err(AwfError::new(
                ErrorCode::UserFacadeInputRejected,
                format!(
                    "run {id} is still running: queued, or running on a worker or in an awf \
                     process; it cannot be resumed now"
                ),
            )
            .with_hint("wait for it to end, or cancel it (`awf cancel`, DELETE) before resuming"))
        }
    }

    fn get(&self, run_id: &RunId) -> Result<RunView, AwfError> {
        let here = match self.local.get(run_id) {
            Ok(v) if v.phase == RunPhase::Live => return Ok(v),
            Ok(v) if v.phase == RunPhase::Finished => Some(v),
            Ok(_) => None,
            Err(e) if not_found_here(&e) => None,
            Err(e) => return Err(e),
        };
        match (self.row(&run_id.0)?, here) {
            (Some(r), Some(v)) => Ok(r.newer_than(v)),
            (Some(r), None) => Ok(r.view()),
            (None, Some(v)) => Ok(v),
            (None, None) => self.local.get(run_id),
        }
    }

    fn resolve(&self, query: &str) -> Result<RunId, AwfError> {
        let q = query.trim().to_owned();
        if let Some(r) = self.row(&q)? {
            return Ok(RunId(r.run_id));
        }
        // A prefix among every run of the store (the runs this worker holds are rows too):
        // one that is unique here but shared with another worker's run is ambiguous, on
        // every worker alike.
        let pool = self.store.pool().clone();
        let prefix = crate::storable_text(&q);
        // The first few matching ids and how many match in all (the hint says how many
        // more there are than it names).
        let shown = i64::try_from(awf_domain::run::AMBIGUOUS_SHOWN).unwrap_or(5);
        let (ids, total): (Vec<String>, i64) = self.blocking(async move {
            let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
            let rows = client
                .query(
                    "SELECT run_id, count(*) OVER () FROM awf_runs WHERE starts_with(run_id, $1) \
                     ORDER BY run_id LIMIT $2",
                    &[&prefix, &shown],
                )
                .await
                .map_err(|e| unavailable("list runs", &db_text(&e)))?;
            let total = rows.first().map(|r| column::<i64>(r, 1)).transpose()?;
            let ids: Result<Vec<String>, AwfError> =
                rows.iter().map(|r| column::<String>(r, 0)).collect();
            Ok((ids?, total.unwrap_or(0)))
        })?;
        match ids.as_slice() {
            [] => self.local.resolve(&q),
            [one] => Ok(RunId(one.clone())),
            many => {
                let many: Vec<&str> = many.iter().map(String::as_str).collect();
                Err(RunId::ambiguous_prefix(
                    &q,
                    usize::try_from(total).unwrap_or(usize::MAX),
                    &many,
                ))
            }
        }
    }

    /// Every worker lists the runs in one order, the embedded server's: the runs in progress
    /// (queued, or claimed by a worker) first, then the others; newest first in each group
    /// (by start, or submit time for a run not started yet). A run this worker holds is shown
    /// as it knows it (fresher than its row), in its row's place.
    fn list(&self) -> Result<Vec<RunView>, AwfError> {
        let mut local: std::collections::HashMap<RunId, RunView> = self
            .local
            .list()?
            .into_iter()
            .filter(|v| v.phase != RunPhase::Recorded)
            .map(|v| (v.run_id.clone(), v))
            .collect();
        let pool = self.store.pool().clone();
        let rows: Vec<(Row, bool)> = self.blocking(async move {
            let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
            let rows = client
                .query(
                    &format!(
                        "SELECT {ROW_COLUMNS}, queue_state IN ('queued', 'claimed') AS live \
                         FROM awf_runs \
                         ORDER BY live DESC, COALESCE(started_at_ms, \
                           (extract(epoch from submitted_at) * 1000)::bigint) DESC NULLS LAST, \
                           row_seq DESC \
                         LIMIT 1000"
                    ),
                    &[],
                )
                .await
                .map_err(|e| unavailable("list runs", &db_text(&e)))?;
            rows.iter()
                .map(|r| {
                    // By name: the column after ROW_COLUMNS, wherever that list ends.
                    let live = r
                        .try_get::<_, bool>("live")
                        .map_err(|e| unavailable("list runs", &db_text(&e)))?;
                    Ok((row_of(r)?, live))
                })
                .collect()
        })?;
        let mut live = Vec::new();
        let mut others = Vec::new();
        for (row, in_progress) in &rows {
            let view = match local.remove(&RunId(row.run_id.clone())) {
                Some(v) => row.newer_than(v),
                None => row.view(),
            };
            if *in_progress {
                live.push(view);
            } else {
                others.push(view);
            }
        }
        // Held here and not (yet) among the rows read: with their group, first.
        let mut rest: Vec<RunView> = local.into_values().collect();
        rest.sort_by(|a, b| b.run_id.0.cmp(&a.run_id.0));
        let (rest_live, rest_others): (Vec<RunView>, Vec<RunView>) =
            rest.into_iter().partition(|v| v.phase == RunPhase::Live);
        let mut views = rest_live;
        views.extend(live);
        views.extend(rest_others);
        views.extend(others);
        Ok(views)
    }

    fn subscribe(&self, run_id: &RunId, from_seq: u64) -> Result<Box<dyn Subscription>, AwfError> {
        let Some(row) = self.row(&run_id.0)? else {
            return self.local.subscribe(run_id, from_seq);
        };
        let mut sub = PgSubscription {
            store: self.store.clone(),
            root: row.run_id,
            next: from_seq.max(1),
            buffer: VecDeque::new(),
            notices: self.listener.subscribe(),
            done: false,
        };
        // What is recorded now is in the subscription before it is handed out: the first
        // items are ready at once (a reader that takes only what is ready, as awf-http's
        // snapshot of pending requests does, sees the whole recorded log).
        loop {
            let store = self.store.clone();
            let (root, from) = (sub.root.clone(), sub.next);
            let rows = self.blocking(async move { read_events(&store, &root, from).await })?;
            let more = rows.len() == 512;
            sub.take(rows);
            if !more {
                break;
            }
        }
        Ok(Box::new(sub))
    }

    fn respond(&self, request_id: &str, answer: Answer) -> Result<(), AwfError> {
        match self.local.respond(request_id, answer.clone()) {
            Ok(()) => return Ok(()),
            Err(e) if e.code() != ErrorCode::UserFacadeInputRejected => return Err(e),
            Err(e) if !e.message().starts_with("no pending request") => return Err(e),
            Err(_) => {}
        }
        let pool = self.store.pool().clone();
        let rid = crate::storable_text(request_id);
        let body = serde_json::to_value(&answer)
            .map(crate::storable)
            .map_err(|e| unavailable("encode the answer", &e))?;
        self.blocking(async move { answer_remote(&pool, &rid, body).await })
    }

    fn cancel(&self, run_id: &RunId, reason: CancelReason) -> Result<(), AwfError> {
        // Only a run live here is this process's to cancel: any other (one it parked on a
        // usage limit included) is the store's, below.
        if matches!(self.local.get(run_id), Ok(v) if v.phase == RunPhase::Live) {
            match self.local.cancel(run_id, reason) {
                Ok(()) => {
                    // Recorded too: should this worker die before the run ends, the run is
                    // not resumed elsewhere.
                    let pool = self.store.pool().clone();
                    let id = run_id.clone();
                    let _ = self.blocking(async move { queue::request_cancel(&pool, &id).await });
                    return Ok(());
                }
                Err(e) if !not_found_here(&e) => return Err(e),
                Err(_) => {}
            }
        }
        let pool = self.store.pool().clone();
        let id = RunId(crate::storable_text(&run_id.0));
        let outcome = self.blocking(async move { queue::request_cancel(&pool, &id).await })?;
        match outcome {
            CancelOutcome::Unknown => Err(AwfError::new(
                ErrorCode::UserFacadeRunNotFound,
                format!("no live run with id {run_id}"),
            )
            .with_hint("`awf history` lists recorded runs")),
            // Ended already: not live (the HTTP layer answers 204 for a known run).
            CancelOutcome::Ended(_) => Err(AwfError::new(
                ErrorCode::UserFacadeRunNotFound,
                format!("run {run_id} is not live"),
            )),
            CancelOutcome::Asked
            | CancelOutcome::AskedProcess
            | CancelOutcome::CancelledQueued
            | CancelOutcome::CancelledParked
            | CancelOutcome::CancelledUnheld => Ok(()),
        }
    }

    async fn wait(&self, run_id: &RunId) -> Result<RunResult, AwfError> {
        match self.local.get(run_id) {
            Ok(v) if v.phase != RunPhase::Recorded => return self.local.wait(run_id).await,
            _ => {}
        }
        loop {
            let Some(row) = load_row(&self.store, &run_id.0).await? else {
                return Err(unknown(&run_id.0));
            };
            if row.ended() {
                if let Some(r) = finished_result(&self.store, &run_id.0).await? {
                    return Ok(r);
                }
                return Ok(result_of_row(&row));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The result of a finished run read from its root `RunFinished` event, if recorded.
async fn finished_result(store: &PgStore, run_id: &str) -> Result<Option<RunResult>, AwfError> {
    let pool = store.pool().clone();
    // As stored (a NUL, which PostgreSQL text refuses, is U+FFFD there): an id holding one
    // is found nowhere (404), never a store error (500).
    let id = crate::storable_text(run_id);
    store
        .run(async move {
            let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
            let r = client
                .query_opt(
                    "SELECT envelope FROM awf_events WHERE root_run_id = $1 AND run_id = $1 \
                     AND envelope->'event'->>'type' = 'run_finished' \
                     ORDER BY position DESC LIMIT 1",
                    &[&id],
                )
                .await
                .map_err(|e| unavailable("read the run's end", &db_text(&e)))?;
            Ok(r.and_then(|r| column::<Value>(&r, 0).ok())
                .and_then(|v| serde_json::from_value::<EventEnvelope>(v).ok())
                .and_then(|env| match env.event {
                    RunEvent::RunFinished { result } => Some(*result),
                    _ => None,
                }))
        })
        .await?
}

fn result_of_row(row: &Row) -> RunResult {
    let status = match row.status.as_str() {
        "success" => RunStatus::Success,
        "cancelled" => RunStatus::Cancelled,
        _ => RunStatus::Failure,
    };
    RunResult {
        run_id: Some(RunId(row.run_id.clone())),
        workflow: row.workflow_id.clone(),
        status,
        exit_code: row
            .exit_code
            .and_then(|c| u8::try_from(c).ok())
            .unwrap_or(u8::from(status != RunStatus::Success)),
        terminal: None,
        duration_ms: row
            .duration_ms
            .and_then(|d| u64::try_from(d).ok())
            .unwrap_or(0),
        states: std::collections::BTreeMap::new(),
        outputs: std::collections::BTreeMap::new(),
        error: row
            .error_message
            .as_ref()
            .map(|m| awf_domain::error::ErrorBody {
                code: ErrorCode::ExecutionCommandFailed,
                message: m.clone(),
                hints: Vec::new(),
                details: std::collections::BTreeMap::new(),
            }),
        message: None,
        spend: None,
    }
}

fn rejected(message: String) -> AwfError {
    AwfError::new(ErrorCode::UserFacadeInputRejected, message)
        .with_hint("answer only a request the run announced and still waits for")
}

/// Hands an answer to the worker of the run that asked, and waits for its verdict.
async fn answer_remote(
    pool: &deadpool_postgres::Pool,
    request_id: &str,
    answer: Value,
) -> Result<(), AwfError> {
    let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    // Which run asked: the one whose log announced the request and has not resolved it
    // since (a later attempt of a run may ask again under an id an earlier one used).
    let asked = client
        .query_opt(
            "SELECT e.root_run_id FROM awf_events e JOIN awf_runs r ON r.run_id = e.root_run_id \
             WHERE e.envelope->'event'->>'type' = 'interaction_required' \
               AND e.envelope->'event'->'request'->>'request_id' = $1 \
               AND r.queue_state = 'claimed' \
               AND NOT EXISTS (SELECT 1 FROM awf_events x WHERE x.root_run_id = e.root_run_id \
                   AND x.position > e.position \
                   AND x.envelope->'event'->>'type' = 'interaction_resolved' \
                   AND x.envelope->'event'->>'request_id' = $1) \
             ORDER BY e.position DESC LIMIT 1",
            &[&request_id],
        )
        .await
        .map_err(|e| unavailable("find the request", &db_text(&e)))?;
    let Some(asked) = asked else {
        return Err(rejected(format!(
            "no pending request with id {request_id} (answered, timed out, cancelled, or never asked)"
        )));
    };
    let run_id: String = column(&asked, 0)?;
    // Its worker died (or lost the store): nobody takes the answer; say so at once rather
    // than after ANSWER_WAIT, and leave nothing for the worker that resumes the run.
    if worker_gone(&client, &run_id).await? {
        return Err(gone(&run_id));
    }
    let n = client
        .execute(
            "INSERT INTO awf_answers (request_id, run_id, answer) VALUES ($1, $2, $3) \
             ON CONFLICT (request_id) DO UPDATE SET answer = $3, state = 'pending', error = NULL, \
               created_at = now() WHERE awf_answers.state = 'rejected'",
            &[&request_id, &run_id, &answer],
        )
        .await
        .map_err(|e| unavailable("record the answer", &db_text(&e)))?;
    if n == 0 {
        return Err(rejected(format!(
            "request {request_id} was answered already"
        )));
    }
    let payload = serde_json::json!({"kind": "answer", "run_id": run_id, "request_id": request_id})
        .to_string();
    client
        .execute(
            "SELECT pg_notify($1, $2)",
            &[&crate::CONTROL_CHANNEL, &payload],
        )
        .await
        .map_err(|e| unavailable("notify the run's worker", &db_text(&e)))?;
    let t0 = Instant::now();
    let mut checked = Instant::now();
    while t0.elapsed() < ANSWER_WAIT {
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The worker may die while the answer waits for it: withdraw it then.
        if checked.elapsed() >= Duration::from_millis(500) {
            checked = Instant::now();
            if worker_gone(&client, &run_id).await? {
                let n = client
                    .execute(
                        "DELETE FROM awf_answers WHERE request_id = $1 AND state = 'pending'",
                        &[&request_id],
                    )
                    .await
                    .map_err(|e| unavailable("withdraw the answer", &db_text(&e)))?;
                if n == 1 {
                    return Err(gone(&run_id));
                }
            }
        }
        let r = client
            .query_one(
                "SELECT state, error FROM awf_answers WHERE request_id = $1",
                &[&request_id],
            )
            .await
            .map_err(|e| unavailable("read the answer's state", &db_text(&e)))?;
        let state: String = column(&r, 0)?;
        match state.as_str() {
            "accepted" => return Ok(()),
            "rejected" => {
                let err: Option<Value> = column(&r, 1)?;
                let err = err.unwrap_or(Value::Null);
                let code = err
                    .get("code")
                    .and_then(Value::as_str)
                    .and_then(ErrorCode::parse)
                    .unwrap_or(ErrorCode::UserFacadeInputRejected);
                let message = err
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("the run's worker rejected the answer")
                    .to_owned();
                let mut e = AwfError::new(code, message);
                for h in err
                    .get("hints")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                {
                    e = e.with_hint(h.to_owned());
                }
                return Err(e);
            }
            _ => {}
        }
    }
    // Not taken in time: withdraw it, so a late worker does not take it after this answer
    // was reported as failed.
    let _ = client
        .execute(
            "DELETE FROM awf_answers WHERE request_id = $1 AND state = 'pending'",
            &[&request_id],
        )
        .await;
    Err(AwfError::new(
        ErrorCode::SystemStoreUnavailable,
        format!(
            "the worker running the run of request {request_id} did not take the answer within {} s",
            ANSWER_WAIT.as_secs()
        ),
    )
    .with_hint("try again; `GET /api/executions/{id}` shows whether it is still pending"))
}

/// Whether the worker holding `run_id` is gone: the run is no longer claimed, its lease has
/// expired, or no session holds the run's advisory lock. The process running a run holds
/// that lock (`RunLocks`) on a connection of its own for as long as the run runs, and
/// PostgreSQL releases it as soon as the connection closes, so a SIGKILLed worker is seen
/// at once, long before its lease expires. (Between a takeover's claim and its resume taking
/// the lock, the run's new worker has asked nothing yet: a request still pending then is
/// the dead worker's.)
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
async fn worker_gone(client: &deadpool_postgres::Client, run_id: &str) -> Result<bool, AwfError> {
    let key = crate::ports::lock_key(run_id);
    let row = client
        .query_opt(
            &format!(
                "SELECT queue_state <> 'claimed' OR lease_until IS NULL OR lease_until < now() \
                   OR NOT {} \
                 FROM awf_runs WHERE run_id = $1",
                crate::ports::lock_held_sql(2)
            ),
            &[&run_id, &key],
        )
        .await
        .map_err(|e| unavailable("check the run's worker", &db_text(&e)))?;
    match row {
        Some(r) => column::<bool>(&r, 0),
        None => Ok(true),
    }
}

/// The refusal of an answer whose run's worker is gone (`worker_gone`).
fn gone(run_id: &str) -> AwfError {
    AwfError::new(
        ErrorCode::UserFacadeInputRejected,
        format!(
            "the worker running run {run_id} is gone (its process ended or lost the store): \
             another worker resumes the run once its lease expires and asks again, under a new \
             request id"
        ),
    )
    .with_hint(format!(
        "answer the new request: GET /api/executions/{run_id} lists it in `pending` once \
         another worker has resumed the run"
    ))
}

/// A subscription to a run's log as `awf_events` holds it (the same positions on every
/// worker).
struct PgSubscription {
    store: PgStore,
    root: String,
    next: u64,
    buffer: VecDeque<(u64, EventEnvelope)>,
    notices: broadcast::Receiver<Notice>,
    done: bool,
}

/// The events of `root`'s log from position `from`, at most 512.
async fn read_events(
    store: &PgStore,
    root: &str,
    from: u64,
) -> Result<Vec<(u64, EventEnvelope)>, AwfError> {
    let pool = store.pool().clone();
    let root = root.to_owned();
    let from = i64::try_from(from).unwrap_or(i64::MAX);
    let rows: Vec<(i64, Value)> = store
        .run(async move {
            let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
            let rows = client
                .query(
                    "SELECT position, envelope FROM awf_events WHERE root_run_id = $1 \
                     AND position >= $2 ORDER BY position LIMIT 512",
                    &[&root, &from],
                )
                .await
                .map_err(|e| unavailable("read events", &db_text(&e)))?;
            rows.iter()
                .map(|r| Ok::<_, AwfError>((column(r, 0)?, column(r, 1)?)))
                .collect::<Result<Vec<_>, _>>()
        })
        .await??;
    Ok(rows
        .into_iter()
        .filter_map(|(position, envelope)| {
            let env = serde_json::from_value::<EventEnvelope>(envelope).ok()?;
            Some((u64::try_from(position).ok()?, env))
        })
        .collect())
}

impl PgSubscription {
    fn take(&mut self, rows: Vec<(u64, EventEnvelope)>) {
        for (p, env) in rows {
            self.next = p + 1;
            self.buffer.push_back((p, env));
        }
    }

    async fn fetch(&mut self) -> Result<(), AwfError> {
        let rows = read_events(&self.store, &self.root, self.next).await?;
        self.take(rows);
        Ok(())
    }
}

#[async_trait::async_trait]
impl Subscription for PgSubscription {
    async fn next(&mut self) -> Option<SubscriptionItem> {
        loop {
            if let Some((position, envelope)) = self.buffer.pop_front() {
                return Some(SubscriptionItem::Event {
                    position,
                    envelope: Box::new(envelope),
                });
            }
            if self.done {
                return None;
            }
            // Drop the notices that arrived so far: the read below covers them.
            while self.notices.try_recv().is_ok() {}
            if self.fetch().await.is_err() {
                // The store is unreachable (restarting?): try again shortly.
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            if !self.buffer.is_empty() {
                continue;
            }
            // Nothing (more) to deliver: done when the run has ended (its events are
            // written in the same transaction as its end), whether its `RunFinished` was
            // delivered here or before `after` (a reconnect), or it never started
            // (cancelled while queued, failed before starting).
            match load_row(&self.store, &self.root).await {
                Ok(Some(r)) if r.ended() => {
                    // Its last events may have been committed between the read above and
                    // this one (a worker marks the run done once they are): read them.
                    if self.fetch().await.is_err() {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                    self.done = true;
                    continue;
                }
                Ok(None) => {
                    self.done = true;
                    continue;
                }
                _ => {}
            }
            let tick = tokio::time::sleep(Duration::from_secs(1));
            tokio::select! {
                () = tick => {}
                _ = self.notices.recv() => {}
            }
        }
    }
}
