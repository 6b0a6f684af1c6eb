//! The run service: the one place where runs are driven. Every front-end (terminal, ACP, MCP,
//! HTTP) starts, watches, answers and cancels runs through [`RunManager`], behind the domain
//! port [`RunService`]; [`Facade`] stays the validation and launch path underneath.
//!
//! - Runs by id: a registry of the runs of this process (live, then finished until their TTL
//!   passes), merged with the recorded ones of the state store by `get` and `list`; a cap on
//!   live runs (`USER.FACADE.RUN_LIMIT`, nothing queues).
//! - Events: each run's ordered log (`log::EventLog`), replayed to any number of
//!   subscribers from any position, then live.
//! - Interactions: the requests a run makes (`InteractionRequired`) are routed by request id;
//!   `respond` hands the typed answer to the run that asked (which checks it fits the
//!   request), `cancel` resolves them as cancelled; a request's own `timeout_ms` is kept by
//!   the engine.
//!
//! Reference: shared/design/architecture.md ("The run service: the one way in").

mod log;
mod parked;
mod recorded;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::event::EventEnvelope;
use awf_domain::event::RunEvent;
use awf_domain::interaction::Answer;
use awf_domain::ports::facade::ResumeRequest;
use awf_domain::ports::facade::RunRequest;
use awf_domain::ports::service::RunPhase;
use awf_domain::ports::service::RunService;
use awf_domain::ports::service::RunView;
use awf_domain::ports::service::Subscription;
use awf_domain::ports::store::RunSnapshot;
use awf_domain::ports::store::StoredStatus;
use awf_domain::run::CancelReason;
use awf_domain::run::RunId;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use indexmap::IndexMap;
use tokio::sync::watch;

use crate::Facade;
use crate::Services;
use crate::engine::CancelState;
use crate::engine::Interaction;
use crate::engine::lock;
use crate::facade::RunHandle;
use log::EventLog;

/// Tunables of the run service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceConfig {
    /// Most runs live at once in this process; `start`/`resume` beyond it fail with
    /// `USER.FACADE.RUN_LIMIT` (nothing is queued).
    pub max_live_runs: usize,
    /// How long a finished run (its log and result) stays in memory after it ended; after
    /// that `get` reads it from the store and `subscribe`/`wait` no longer know it.
    pub finished_ttl: Duration,
    /// Estimated bytes of events each run's log keeps in memory (the newest ones); a
    /// subscriber further behind gets `SubscriptionItem::Lagged`.
    pub log_budget_bytes: usize,
    /// Keep, whatever the budget, every event a subscription has not read yet (and every
    /// event until a run's first subscription): no subscriber ever lags, and memory grows
    /// with the slowest one's backlog instead. For a front-end that must show everything and
    /// subscribes at once (the terminal); off for servers.
    pub keep_unread: bool,
    /// Record a run that asks for its missing required inputs before it starts (started
    /// with `prompt_missing_inputs`) from the moment it asks: a `running` state record and
    /// history row, ended `cancelled` or `failed` when it never gets them. For the servers,
    /// whose `start` answers while the run asks (it is listed, counted, and kept across a
    /// restart); off for the terminal, where the person asked is at the prompt and a run
    /// left there records nothing.
    pub record_unstarted: bool,
}

impl Default for ServiceConfig {
    /// 64 live runs, 10 minutes of TTL, 64 MiB of log per run, subscribers may lag, runs
    /// that ask for their inputs recorded at once.
    fn default() -> Self {
        Self {
            max_live_runs: 64,
            finished_ttl: Duration::from_secs(600),
            log_budget_bytes: 64 << 20,
            keep_unread: false,
            record_unstarted: true,
        }
    }
}

/// Monotonic time for TTLs (a fixed, settable one in tests).
pub(crate) type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

/// The run service over a [`Facade`]. Cheap to share (`Arc`); needs a tokio runtime for
/// `start` and `resume`.
pub struct RunManager {
    facade: Facade,
    config: ServiceConfig,
    clock: Clock,
    registry: Arc<Mutex<Registry>>,
}

impl std::fmt::Debug for RunManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunManager")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The runs of this process and the requests they wait on.
#[derive(Default)]
struct Registry {
    /// In start order.
    runs: IndexMap<RunId, Arc<Entry>>,
    /// Slots taken by `start`/`resume` calls still loading and validating.
    starting: usize,
    /// Pending requests by id.
    requests: HashMap<String, Route>,
}

impl Registry {
    /// What counts against the cap on live runs: the starts under way and the runs still
    /// running. A run whose result is known and whose record is being flushed counts no
    /// more (breaker: with `--max-runs 5`, runs that had ended 1.5 s before, shown
    /// completed, refused new ones with 429 while their recorders flushed).
    fn live(&self) -> usize {
        self.starting + self.runs.values().filter(|e| e.is_running()).count()
    }
}

/// Which run asked.
#[derive(Debug, Clone)]
struct Route {
    run_id: RunId,
}

/// How a run ended, for `wait`.
#[derive(Debug, Clone)]
enum Ending {
    Running,
    Finished(Arc<RunResult>),
    /// The engine stopped without a `RunFinished`: the run never started (a missing input
    /// not given, a cancel while asking), or an internal fault.
    NotStarted(Option<AwfError>),
}

/// One run of this process.
struct Entry {
    run_id: RunId,
    log: Arc<EventLog>,
    /// Positions 1..=this of the run's log are its earlier attempts, read back from the
    /// store (a resumed run this process did not hold); the in-memory log starts after.
    recorded_before: u64,
    cancel: CancelState,
    interaction: Arc<Interaction>,
    info: Mutex<Info>,
    ending: watch::Sender<Ending>,
    /// Set once the run's `RunStarted` was taken in, or it asked for something before it
    /// started (a missing input), or it ended: what `start` and `resume` wait for (see
    /// [`RunManager::until_on_record`]).
    begun: watch::Sender<bool>,
}

/// What a run is shown by until its `RunStarted` says (see [`Info::named`]).
struct Shown {
    workflow: String,
    named: bool,
}

impl Shown {
    /// The name given to show the run by, else `fallback` (replaced by the run's identifier
    /// once it has started).
    fn of(shown_as: Option<String>, fallback: &str) -> Self {
        match shown_as {
            Some(workflow) => Self {
                workflow,
                named: true,
            },
            None => Self {
                workflow: fallback.to_owned(),
                named: false,
            },
        }
    }
}

struct Info {
    workflow: String,
    /// `workflow` is the name the run was started to be shown by
    /// ([`RunRequest::shown_as`]): its `RunStarted` identifier does not replace it.
    named: bool,
    current_state: Option<String>,
    finished_at: Option<Instant>,
    result: Option<Arc<RunResult>>,
    /// Why a run that ended without a result never started (its `Ending::NotStarted`).
    start_error: Option<AwfError>,
}

impl Entry {
    fn is_live(&self) -> bool {
        lock(&self.info).finished_at.is_none()
    }

    /// Live and without its result yet: its engine still runs ([`Registry::live`]).
    fn is_running(&self) -> bool {
        let info = lock(&self.info);
        info.finished_at.is_none() && info.result.is_none()
    }

    fn view(&self) -> RunView {
        let info = lock(&self.info);
        // A run that ended on a usage limit it may wait for is parked (`waiting`), as
        // the store records it.
        let (phase, status, exit_code, waiting_until) = match (&info.finished_at, &info.result) {
            (None, _) => (RunPhase::Live, StoredStatus::Running, None, None),
            (Some(_), Some(r)) => (
                RunPhase::Finished,
                awf_domain::projection::final_status(r),
                Some(r.exit_code),
                awf_domain::projection::parked_until(r),
            ),
            // Never started: cancelled while it asked for its missing inputs, or failed
            // (an input not given, the inputs not resolving).
            (Some(_), None) => {
                let cancelled = info
                    .start_error
                    .as_ref()
                    .is_some_and(|e| e.code() == ErrorCode::ExecutionRunCancelled);
                let status = if cancelled {
                    StoredStatus::Cancelled
                } else {
                    StoredStatus::Failure
                };
                (RunPhase::Finished, status, None, None)
            }
        };
        RunView {
            run_id: self.run_id.clone(),
            parent_run_id: None,
            workflow: info.workflow.clone(),
            phase,
            status,
            current_state: info.current_state.clone(),
            exit_code,
            waiting_until,
        }
    }
}

fn recorded_view(s: &RunSnapshot) -> RunView {
    RunView {
        run_id: RunId(s.run_id.clone()),
        parent_run_id: s.parent_run_id.clone().map(RunId),
        workflow: s.workflow.clone(),
        phase: RunPhase::Recorded,
        status: s.status,
        current_state: Some(s.current_state.clone()).filter(|c| !c.is_empty()),
        exit_code: s.exit_code,
        waiting_until: s.waiting_until,
    }
}

fn not_found(run_id: &RunId) -> AwfError {
    AwfError::new(
        ErrorCode::UserFacadeRunNotFound,
        format!("no run with id {run_id} in this process"),
    )
    .with_hint("`awf history` lists recorded runs; a finished run leaves memory after its TTL")
}

/// Who runs a run this process does not hold live, as its state file says.
enum Owner {
    /// Another awf process, alive: its pid, and what it is (`awf run`, `awf serve`, …) when
    /// its run lock says so.
    Elsewhere(u32, Option<String>),
    /// Recorded `running` by an awf process that is gone (SIGKILL, crash, power loss): its
    /// pid, and the top-level run when it is a sub-workflow's run (resumed with that one).
    /// Nothing runs it; `awf resume` continues it.
    Gone(u32, Option<String>),
}

/// The top-level run of `s` (following `parent_run_id` up, 64 levels at most): `None` when
/// `s` is itself a top-level run.
fn root_of(store: &dyn awf_domain::ports::store::StateStore, s: &RunSnapshot) -> Option<String> {
    let mut parent = s.parent_run_id.clone()?;
    for _ in 0..64 {
        match store.load(&parent).ok().and_then(|p| p.parent_run_id) {
            Some(up) => parent = up,
            None => break,
        }
    }
    Some(parent)
}

/// The awf process `run_id`'s state says is running it, when that is not this process.
fn owner_of(services: &crate::Services, run_id: &RunId) -> Option<Owner> {
    let store = services.state_store.as_ref()?;
    let s = store.load(&run_id.0).ok()?;
    let pid = s.owner_pid?;
    if s.status != StoredStatus::Running || pid == services.host.pid() {
        return None;
    }
    Some(
        if !crate::runs::process_gone(&s, services.run_locks.as_deref(), services.host.as_ref()) {
            let holder = services.run_locks.as_ref().and_then(|locks| {
                locks
                    .holder(&run_id.0)
                    .or_else(|| root_of(store.as_ref(), &s).and_then(|root| locks.holder(&root)))
            });
            Owner::Elsewhere(pid, holder)
        } else {
            Owner::Gone(pid, root_of(store.as_ref(), &s))
        },
    )
}

/// The refusal to cancel a run whose awf process is gone without recording an end
/// (`USER.FACADE.INPUT_REJECTED`; `DELETE /api/executions/{id}` answers it with 409): nothing
/// runs it, so there is nothing to stop, and answering "cancelled" would leave it recorded
/// `running`.
fn run_gone(run_id: &RunId, pid: u32, root: Option<&str>) -> AwfError {
    let e = AwfError::new(
        ErrorCode::UserFacadeInputRejected,
        format!(
            "run {run_id} is not running: the awf process that ran it (pid {pid}) is gone without recording an end, so there is nothing to cancel"
        ),
    );
    match root {
        // A sub-workflow's run is resumed with the run that called it (resuming it alone is
        // refused; breaker: the hint named it).
        Some(root) => e.with_hint(format!(
            "it is a sub-workflow's run: `awf resume {root}` (or POST /api/executions/{root}/resume), its top-level run, continues it from its last completed step"
        )),
        None => e.with_hint(format!(
            "`awf resume {run_id}` (or POST /api/executions/{run_id}/resume) continues it from its last completed step; left alone it stays listed as running with `process_gone: true`"
        )),
    }
}

/// The refusal to cancel a run another live awf process runs (`USER.FACADE.INPUT_REJECTED`;
/// `DELETE /api/executions/{id}` answers it with 409). The hint says how to stop it by what
/// `holder` is: an `awf serve` (its DELETE), an `awf run`/`awf resume` (Ctrl-C in its terminal;
/// `awf cancel` reaches only runs of a shared store), or either when unknown.
fn run_elsewhere(run_id: &RunId, pid: u32, holder: Option<&str>) -> AwfError {
    let e = AwfError::new(
        ErrorCode::UserFacadeInputRejected,
        format!(
            "run {run_id} is still running in another awf process (awf process {pid}); it can only be cancelled there"
        ),
    );
    e.with_hint(match holder {
        Some("awf serve") => format!(
            "stop it where it runs: DELETE /api/executions/{run_id} on the `awf serve` running it (awf process {pid})"
        ),
        Some(kind @ ("awf run" | "awf resume")) => format!(
            "stop it where it runs: Ctrl-C in the terminal of its `{kind}` (or `kill -INT {pid}`); the run is recorded `cancelled`"
        ),
        _ => format!(
            "stop it where it runs: Ctrl-C in the terminal of its `awf run` (or `kill -INT {pid}`; the run is recorded `cancelled`), or DELETE /api/executions/{run_id} on the `awf serve` running it"
        ),
    })
}

/// No run with that id anywhere: neither this process nor the store knows it.
fn unknown(run_id: &RunId) -> AwfError {
    AwfError::new(
        ErrorCode::UserFacadeRunNotFound,
        format!("no run with id {run_id}"),
    )
    .with_hint("`awf history` lists recorded runs; a unique prefix of a run id is enough")
}

/// `1 run is live`, `2 runs are live`: how many runs hold a slot, in words.
fn live_runs(live: usize) -> String {
    if live == 1 {
        "1 run is live".to_owned()
    } else {
        format!("{live} runs are live")
    }
}

fn rejected(message: String) -> AwfError {
    AwfError::new(ErrorCode::UserFacadeInputRejected, message)
        .with_hint("answer only a request the run announced and still waits for")
}

/// Frees a slot taken by `start`/`resume` when the call ends, however it ends.
struct Slot<'a>(&'a Mutex<Registry>);

impl Slot<'_> {
    /// Gives the slot up to the run just put into `r` (under the same lock: the run is never
    /// counted twice, as a start and as a run, by a `reserve` in between).
    fn hand_over(self, r: &mut Registry) {
        r.starting = r.starting.saturating_sub(1);
        std::mem::forget(self);
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut r = lock(self.0);
        r.starting = r.starting.saturating_sub(1);
    }
}

impl RunManager {
    /// A service over `services` with the given tunables.
    pub fn new(services: Services, config: ServiceConfig) -> Self {
        let clock = Arc::clone(&services.clock);
        Self::with_clock(services, config, Arc::new(move || clock.instant()))
    }

    /// As [`RunManager::new`], with the time source of the TTL.
    pub(crate) fn with_clock(services: Services, config: ServiceConfig, clock: Clock) -> Self {
        Self {
            facade: Facade::new(services).recording_unstarted(config.record_unstarted),
            config,
            clock,
            registry: Arc::new(Mutex::new(Registry::default())),
        }
    }

    /// Drops finished runs whose TTL passed.
    fn evict(&self) {
        let now = (self.clock)();
        let ttl = self.config.finished_ttl;
        lock(&self.registry).runs.retain(|_, e| {
            lock(&e.info)
                .finished_at
                .is_none_or(|t| now.saturating_duration_since(t) < ttl)
        });
    }

    /// Takes a live-run slot.
    fn reserve(&self) -> Result<Slot<'_>, AwfError> {
        let mut r = lock(&self.registry);
        let live = r.live();
        if live >= self.config.max_live_runs {
            return Err(AwfError::new(
                ErrorCode::UserFacadeRunLimit,
                format!(
                    "{}, the most this process runs at once ({}); the run was not started",
                    live_runs(live),
                    self.config.max_live_runs
                ),
            )
            .with_hint("wait for a run to finish or cancel one, then start it again"));
        }
        r.starting += 1;
        Ok(Slot(&self.registry))
    }

    /// [`RunService::subscribe`]; with `fill`, what the in-memory log dropped before the
    /// subscriber read it is read back from the store (see [`recorded::Filled`]).
    fn subscribe_from(
        &self,
        run_id: &RunId,
        from_seq: u64,
        fill: bool,
    ) -> Result<Box<dyn Subscription>, AwfError> {
        self.evict();
        let from = from_seq.max(1);
        let services = self.facade.services();
        let Some(e) = self.entry(run_id) else {
            // Not held here: its recorded log, followed while another process runs it.
            let reader = services
                .event_log
                .as_ref()
                .ok_or_else(|| not_found(run_id))?;
            // A state file that cannot be read is reported as `get` reports it.
            let live_elsewhere = recorded::live_elsewhere(services, run_id)?;
            let log = reader
                .read_log(run_id, from)?
                .ok_or_else(|| unknown(run_id))?;
            return Ok(Box::new(recorded::Recorded::new(
                Arc::clone(reader),
                run_id.clone(),
                from,
                log,
                live_elsewhere,
            )));
        };
        // What the in-memory log dropped before the subscriber read it is read back from
        // the store (issue 1 of the seventieth trial: the stream is lossless).
        let reader = services.event_log.clone().filter(|_| fill);
        let filled =
            |inner, from| recorded::Filled::new(inner, reader.clone(), run_id.clone(), from);
        match &services.event_log {
            // The earlier attempts of a resumed run are in the store, the rest in memory.
            Some(reader) if from <= e.recorded_before => {
                let log = reader.read_log(run_id, from)?.unwrap_or_default();
                let live = e.recorded_before + 1;
                Ok(Box::new(recorded::Chained::new(
                    log.envelopes,
                    from,
                    e.recorded_before,
                    filled(e.log.subscribe(live), live),
                )))
            }
            _ => {
                let from = from.max(e.recorded_before + 1);
                Ok(Box::new(filled(e.log.subscribe(from), from)))
            }
        }
    }

    fn entry(&self, run_id: &RunId) -> Option<Arc<Entry>> {
        lock(&self.registry).runs.get(run_id).cloned()
    }

    /// Registers a launched run and starts pumping its events into its log.
    ///
    /// A resumed run this process still holds keeps its log: the new attempt's events follow
    /// the earlier attempt's, at the next positions (nothing is renumbered or dropped).
    ///
    /// A resumed run this process does not hold continues after `recorded` positions: the
    /// length of its recorded log (read before the new attempt started), which
    /// subscriptions from an earlier position replay from the store.
    fn register(&self, slot: Slot<'_>, handle: RunHandle, workflow: Shown, recorded: u64) -> RunId {
        let parts = handle.into_parts();
        let mut recorded_before = 0;
        let log = match self.entry(&parts.run_id) {
            Some(old) => {
                let (first, prior) = old.log.kept();
                recorded_before = old.recorded_before;
                EventLog::continuing(
                    self.config.log_budget_bytes,
                    self.config.keep_unread,
                    first,
                    prior,
                )
            }
            None if recorded > 0 => {
                recorded_before = recorded;
                EventLog::continuing(
                    self.config.log_budget_bytes,
                    self.config.keep_unread,
                    recorded + 1,
                    Vec::new(),
                )
            }
            None => EventLog::new(self.config.log_budget_bytes, self.config.keep_unread),
        };
        let entry = Arc::new(Entry {
            run_id: parts.run_id.clone(),
            log: Arc::new(log),
            recorded_before,
            cancel: parts.cancel,
            interaction: parts.interaction,
            info: Mutex::new(Info {
                named: workflow.named,
                workflow: workflow.workflow,
                current_state: None,
                finished_at: None,
                result: None,
                start_error: None,
            }),
            ending: watch::Sender::new(Ending::Running),
            begun: watch::Sender::new(false),
        });
        {
            let mut r = lock(&self.registry);
            // A run resumed again after it finished here replaces its old entry.
            r.runs.shift_remove(&parts.run_id);
            r.runs.insert(parts.run_id.clone(), Arc::clone(&entry));
            slot.hand_over(&mut r);
        }
        let pump = Pump {
            entry,
            registry: Arc::clone(&self.registry),
            clock: Arc::clone(&self.clock),
            start_error: parts.start_error,
            recorders: self.facade.services().recorders.clone(),
            _lock: parts.lock,
        };
        tokio::spawn(pump.run(parts.events));
        parts.run_id
    }

    /// Waits until the run's start is on record, so that whoever `start` or `resume` answered
    /// finds the run in the history and the state store at once (breaker: `GET
    /// /api/history` right after the `POST` that started a run did not list it): its
    /// `RunStarted` was taken in and every recorder wrote what it was given
    /// ([`EventPublisher::written`](awf_domain::event::EventPublisher::written): a write,
    /// not a sync), or it asks for a missing input before it starts (nothing of it is recorded
    /// until it is given), or it ended. At most [`ON_RECORD_WAIT`].
    async fn until_on_record(&self, run_id: &RunId) {
        let recorders = self.facade.services().recorders.clone();
        if recorders.is_empty() {
            return;
        }
        let Some(entry) = self.entry(run_id) else {
            return;
        };
        let mut begun = entry.begun.subscribe();
        let on_record = async move {
            // An error: the entry is gone (the run ended and was evicted); nothing to wait for.
            if begun.wait_for(|b| *b).await.is_err() {
                return;
            }
            for r in &recorders {
                if let Some(written) = r.written() {
                    written.await;
                }
            }
        };
        if tokio::time::timeout(ON_RECORD_WAIT, on_record)
            .await
            .is_err()
        {
            tracing::warn!(run_id = %run_id, "the run's start is not on record yet; answering all the same");
        }
    }

    /// The estimated bytes and number of events a run's log keeps in memory now.
    ///
    /// # Errors
    /// `USER.FACADE.RUN_NOT_FOUND` for a run this process does not hold.
    pub fn log_footprint(&self, run_id: &RunId) -> Result<(usize, usize), AwfError> {
        let e = self.entry(run_id).ok_or_else(|| not_found(run_id))?;
        let (_, n, bytes) = e.log.stats();
        Ok((bytes, n))
    }
}

/// Moves a run's events into its log, routes its requests, records its end.
struct Pump {
    entry: Arc<Entry>,
    registry: Arc<Mutex<Registry>>,
    clock: Clock,
    /// Why the run never started, when its events end without `RunFinished`.
    start_error: Arc<Mutex<Option<AwfError>>>,
    /// The recorders the run's events also went to: flushed before the run's end is shown,
    /// so whoever sees `RunFinished` finds the run ended in the store too.
    recorders: Vec<Arc<dyn awf_domain::event::EventPublisher>>,
    /// The run's lock: held until the run's last event (its end) was taken in.
    _lock: Option<awf_domain::ports::locks::RunLockGuard>,
}

impl Pump {
    async fn run(self, mut events: tokio::sync::mpsc::UnboundedReceiver<EventEnvelope>) {
        // What arrived since the last wake-up is taken in at once: one lock and one wake-up
        // of the subscribers per batch, not per event (issue 9: per-step costs).
        // Each event is routed before it is logged: whoever sees a request can answer it.
        let mut batch = Vec::new();
        let mut logged = Vec::new();
        'batches: while events.recv_many(&mut batch, 1024).await > 0 {
            for env in batch.drain(..) {
                let ended = self.route(&env);
                logged.push(env);
                if ended {
                    // Shown only once recorded: a subscriber that saw the run end and a
                    // process killed right after agree with the store (the end is not
                    // lost with the recorders' queue).
                    self.flush_recorders().await;
                    self.entry.log.append_all(logged.drain(..));
                    break 'batches;
                }
            }
            self.entry.log.append_all(logged.drain(..));
        }
        self.finish();
        // Whatever the engine still emits after its end (nothing, normally) is dropped.
        drop(events);
    }

    /// Waits until the recorders wrote every event they were given (their own bound
    /// applies: a recorder that cannot write reports it and returns).
    async fn flush_recorders(&self) {
        if self.recorders.is_empty() {
            return;
        }
        // Awaited where the recorder can answer a task (the embedded store): a blocking
        // thread started for the flush at every run's end was part of its fixed cost
        // (issue 9); the others block one.
        let mut blocking = Vec::new();
        for r in &self.recorders {
            match r.flushed() {
                Some(done) => done.await,
                None => blocking.push(Arc::clone(r)),
            }
        }
        if blocking.is_empty() {
            return;
        }
        if let Err(e) = tokio::task::spawn_blocking(move || {
            for r in &blocking {
                r.flush();
            }
        })
        .await
        {
            tracing::warn!(run_id = %self.entry.run_id, "flushing the run's record failed: {e}");
        }
    }

    /// Takes in what `env` says about the run (its workflow, current state, requests,
    /// result); whether the run has now ended.
    fn route(&self, env: &EventEnvelope) -> bool {
        let root = env.parent_run_id.is_none();
        match &env.event {
            RunEvent::RunStarted { identifier, .. } if root => {
                {
                    let mut info = lock(&self.entry.info);
                    if !info.named {
                        info.workflow.clone_from(identifier);
                    }
                }
                self.entry.begun.send_if_modified(begin);
            }
            RunEvent::StepStarted { step, .. } if root => {
                lock(&self.entry.info).current_state = Some(step.clone());
            }
            RunEvent::InteractionRequired { request } => {
                // A breakpoint stops the run before its state starts: that state is where
                // the run is (not the one before it, the last that started).
                if root
                    && matches!(
                        request.kind,
                        awf_domain::interaction::RequestKind::Breakpoint { .. }
                    )
                    && let Some(step) = &request.step
                {
                    lock(&self.entry.info).current_state = Some(step.clone());
                }
                // A missing input asked before the run starts: whoever started it answers.
                self.entry.begun.send_if_modified(begin);
                lock(&self.registry).requests.insert(
                    request.request_id.clone(),
                    Route {
                        run_id: self.entry.run_id.clone(),
                    },
                );
            }
            RunEvent::InteractionResolved { request_id, .. } => {
                lock(&self.registry).requests.remove(request_id);
            }
            RunEvent::RunFinished { result } if root => {
                lock(&self.entry.info).result = Some(Arc::new(result.as_ref().clone()));
            }
            _ => {}
        }
        lock(&self.entry.info).result.is_some()
    }

    fn finish(&self) {
        let start_error = lock(&self.start_error).clone();
        let result = {
            let mut info = lock(&self.entry.info);
            info.finished_at = Some((self.clock)());
            if info.result.is_none() {
                info.start_error.clone_from(&start_error);
            }
            info.result.clone()
        };
        lock(&self.registry)
            .requests
            .retain(|_, r| r.run_id != self.entry.run_id);
        self.entry.log.end();
        let ending = match result {
            Some(r) => Ending::Finished(r),
            None => Ending::NotStarted(start_error),
        };
        self.entry.ending.send_replace(ending);
        self.entry.begun.send_if_modified(begin);
    }
}

/// Sets a `begun` flag; whether it changed.
fn begin(flag: &mut bool) -> bool {
    !std::mem::replace(flag, true)
}

/// The longest `start` and `resume` wait for a run's start to be on record (a recorder far
/// behind, a history database locked by another process): then they answer all the same.
const ON_RECORD_WAIT: Duration = Duration::from_secs(5);

#[async_trait::async_trait]
impl RunService for RunManager {
    async fn start(&self, request: RunRequest) -> Result<RunId, AwfError> {
        self.evict();
        let slot = self.reserve()?;
        let workflow = Shown::of(request.shown_as.clone(), &request.identifier);
        let handle = self.facade.start_run(request).await?;
        // Registered, the run holds a live slot of its own: the reserved one goes with it,
        // not after the wait for its record (a run counted twice meanwhile refused a
        // worker's next claim with the cap not reached: a claim given back and taken again).
        let id = self.register(slot, handle, workflow, 0);
        self.until_on_record(&id).await;
        Ok(id)
    }

    async fn resume(&self, request: ResumeRequest) -> Result<RunId, AwfError> {
        self.evict();
        let id = RunId(request.run_id.clone());
        if self.entry(&id).is_some_and(|e| e.is_live()) {
            return Err(AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!("run {id} is still running in this process"),
            )
            .with_hint("wait for it to finish, or cancel it before resuming"));
        }
        // Ended here a moment ago: its record may not be on disk yet, so the store could
        // still say `running`; this process knows how it ended.
        if let Some(e) = self.entry(&id)
            && lock(&e.info)
                .result
                .as_ref()
                .is_some_and(|r| r.status == RunStatus::Success)
        {
            return Err(AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!("run {id} already completed successfully; nothing to resume"),
            )
            .with_hint("`awf resume --list` shows runs that can be resumed"));
        }
        // Ended here before it started (its missing inputs refused, or cancelled while it
        // asked) with nothing of it recorded (no store, or a service that records such
        // runs only once they start): nothing resumes (breaker: "workflow execution not
        // found" for a run GET shows). One recorded while it asked resumes as any recorded
        // run: from its first state, with the inputs it was given.
        let records_unstarted = self.config.record_unstarted
            && !self.facade.services().recorders.is_empty()
            && self.facade.services().state_store.is_some();
        if !records_unstarted
            && let Some(e) = self.entry(&id)
            && let Ending::NotStarted(why) = &*e.ending.borrow()
        {
            let why = why
                .as_ref()
                .map(|w| format!(" ({})", w.message()))
                .unwrap_or_default();
            return Err(AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!("run {id} never started{why}: nothing of it was recorded, so there is nothing to resume"),
            )
            .with_hint("start the workflow again (POST /api/workflows/{scope}/{name}/run, or `awf run`)"));
        }
        if self.entry(&id).is_some() {
            // Ended here a moment ago: the recorders may still be writing its state file,
            // which `resume_run` reads; wait until what they were given is written.
            let recorders = self.facade.services().recorders.clone();
            let flushed = tokio::task::spawn_blocking(move || {
                for r in &recorders {
                    r.flush();
                }
            })
            .await;
            if let Err(e) = flushed {
                return Err(AwfError::new(
                    ErrorCode::SystemInternal,
                    format!("waiting for the run's record to be written failed: {e}"),
                ));
            }
        }
        let slot = self.reserve()?;
        // Not held here: the new attempt's positions follow the recorded log's, read before
        // the attempt writes its first line.
        let recorded = match (&self.facade.services().event_log, self.entry(&id)) {
            (Some(reader), None) => {
                let reader = Arc::clone(reader);
                let rid = id.clone();
                tokio::task::spawn_blocking(move || reader.read_log(&rid, u64::MAX))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .flatten()
                    .map_or(0, |l| l.last_position)
            }
            _ => 0,
        };
        let workflow = Shown::of(request.shown_as.clone(), &id.0);
        let handle = self.facade.resume_run(request).await?;
        let id = self.register(slot, handle, workflow, recorded);
        self.until_on_record(&id).await;
        Ok(id)
    }

    fn get(&self, run_id: &RunId) -> Result<RunView, AwfError> {
        self.evict();
        if let Some(e) = self.entry(run_id) {
            return Ok(e.view());
        }
        let Some(store) = &self.facade.services().state_store else {
            return Err(not_found(run_id));
        };
        match store.load(&run_id.0) {
            Ok(s) => Ok(recorded_view(&s)),
            Err(e) if e.code() == ErrorCode::UserInputValidationFailed => Err(unknown(run_id)),
            Err(e) => Err(e),
        }
    }

    fn resolve(&self, query: &str) -> Result<RunId, AwfError> {
        self.evict();
        let q = query.trim();
        let mut ids: Vec<String> = lock(&self.registry)
            .runs
            .keys()
            .map(|k| k.0.clone())
            .collect();
        if ids.iter().any(|i| i == q) {
            return Ok(RunId(q.to_owned()));
        }
        if let Some(store) = &self.facade.services().state_store {
            // A recorded full id (even one whose state file cannot be read: `get` then
            // reports that) is taken as it is.
            match store.load(q) {
                Err(e) if e.code() == ErrorCode::UserInputValidationFailed => {}
                _ => return Ok(RunId(q.to_owned())),
            }
            ids.extend(store.list()?.into_iter().map(|s| s.run_id));
            // A state file that cannot be read is a run all the same, found by a prefix as
            // by its full id (`get` then says why it cannot be read), as `awf status` does
            // (breaker: a prefix answered "no run with id").
            ids.extend(store.unreadable());
        }
        crate::runs::match_run_id(q, ids.iter().map(String::as_str))
            .map(RunId)
            .map_err(|e| {
                if e.code() == ErrorCode::UserFacadeRunNotFound {
                    unknown(&RunId(q.to_owned()))
                } else {
                    e
                }
            })
    }

    fn list(&self) -> Result<Vec<RunView>, AwfError> {
        self.evict();
        let entries: Vec<Arc<Entry>> = lock(&self.registry).runs.values().cloned().collect();
        // Newest first (the registry is in start order), then live first (a stable sort).
        let mut views: Vec<RunView> = entries.iter().rev().map(|e| e.view()).collect();
        views.sort_by_key(|v| v.phase != RunPhase::Live);
        if let Some(store) = &self.facade.services().state_store {
            let known: std::collections::HashSet<RunId> =
                views.iter().map(|v| v.run_id.clone()).collect();
            views.extend(
                store
                    .list()?
                    .iter()
                    .map(recorded_view)
                    .filter(|v| !known.contains(&v.run_id)),
            );
        }
        Ok(views)
    }

    fn subscribe(&self, run_id: &RunId, from_seq: u64) -> Result<Box<dyn Subscription>, AwfError> {
        self.subscribe_from(run_id, from_seq, true)
    }

    fn subscribe_kept(
        &self,
        run_id: &RunId,
        from_seq: u64,
    ) -> Result<Box<dyn Subscription>, AwfError> {
        self.subscribe_from(run_id, from_seq, false)
    }

    fn respond(&self, request_id: &str, answer: Answer) -> Result<(), AwfError> {
        let route = lock(&self.registry)
            .requests
            .get(request_id)
            .cloned()
            .ok_or_else(|| {
                rejected(format!(
                    "no pending request with id {request_id} (answered, timed out, cancelled, or never asked)"
                ))
            })?;
        let e = self
            .entry(&route.run_id)
            .ok_or_else(|| not_found(&route.run_id))?;
        // The engine checks the answer fits the request; a refused one leaves it pending.
        e.interaction.respond(request_id, answer)?;
        lock(&self.registry).requests.remove(request_id);
        Ok(())
    }

    fn cancel(&self, run_id: &RunId, reason: CancelReason) -> Result<(), AwfError> {
        let found = self.entry(run_id);
        let e = match found {
            Some(e) if e.is_live() => e,
            // Not live here: one parked on a usage limit is ended cancelled for good (the
            // parked-run resumer would resume it at its reset).
            _ => {
                if self.cancel_parked(run_id, reason)? {
                    return Ok(());
                }
                // Recorded `running` by another awf process that is still alive (a terminal
                // `awf run`, another server): not this process's to stop, and awf has no way
                // to ask it; refused rather than answered as if it were cancelled.
                match owner_of(self.facade.services(), run_id) {
                    Some(Owner::Elsewhere(pid, holder)) => {
                        return Err(run_elsewhere(run_id, pid, holder.as_deref()));
                    }
                    Some(Owner::Gone(pid, root)) => {
                        return Err(run_gone(run_id, pid, root.as_deref()));
                    }
                    None => {}
                }
                return match found {
                    None => Err(not_found(run_id)),
                    Some(_) => Ok(()),
                };
            }
        };
        // The engine stops waiting on its requests (each wait also watches the cancel); they
        // can no longer be answered.
        lock(&self.registry)
            .requests
            .retain(|_, r| &r.run_id != run_id);
        e.cancel.cancel(reason);
        Ok(())
    }

    async fn wait(&self, run_id: &RunId) -> Result<RunResult, AwfError> {
        let e = self.entry(run_id).ok_or_else(|| not_found(run_id))?;
        let mut rx = e.ending.subscribe();
        drop(e);
        loop {
            let ending = rx.borrow_and_update().clone();
            match ending {
                Ending::Finished(r) => return Ok(r.as_ref().clone()),
                Ending::NotStarted(why) => {
                    return Err(why.unwrap_or_else(|| {
                        AwfError::new(ErrorCode::SystemInternal, "the run ended without a result")
                    }));
                }
                Ending::Running => {
                    if rx.changed().await.is_err() {
                        return Err(not_found(run_id));
                    }
                }
            }
        }
    }
}
