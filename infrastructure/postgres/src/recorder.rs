//! [`PgRecorder`]: the event-stream writer of the shared store. The same projection as the
//! embedded recorder ([`awf_domain::projection`]), written as rows.
//!
//! `emit` only queues (no I/O on the caller's thread). One writer task on the store's
//! runtime drains what is queued, applies it to its projections, and writes the batch in ONE
//! transaction:
//! - `awf_runs`: the row of each run whose projection changed (inserted at `RunStarted` with
//!   status `running`; `snapshot` = the [`RunSnapshot`] JSON, `updated_at` = now; the
//!   history columns, `message` (the success terminal's, `RunResult::message`) and
//!   `waiting_until` (a run parked on a usage limit: its reset time) at `RunFinished`, both
//!   null until the run ends, and again while a resumed run runs);
//!   `root_run_id` is the top run of a sub-workflow tree;
//! - `awf_events`: every envelope (`envelope` JSON, `kind` = its event's `type`) keyed by
//!   (`root_run_id`, `position`), positions 1, 2, 3… per root run in emission order,
//!   continuing after the stored largest one (a resumed run, perhaps resumed elsewhere);
//!   `seq` (the row's and the envelope's) is numbered here too, 1, 2, 3… per run,
//!   continuing after the run's stored largest one (the engine restarts its count at a
//!   resume; the embedded transcript continues it the same way), so that a resumed or
//!   taken-over run's seqs have no duplicate and no gap. When a root run is resumed
//!   (`resumed_from`: `awf resume`, or a worker taking over a dead one's claim), every
//!   request its log announced and never resolved (an earlier attempt's) is closed first by
//!   an `InteractionResolved` (`cancelled`) of the same run, written before the new
//!   `RunStarted`: only the live attempt's requests are pending;
//! - `awf_audit`: the `workflow.started` / `workflow.completed` lines, as JSON;
//! - `NOTIFY awf_events, '<root_run_id>'` per root run that got rows (sent at commit).
//!
//! Resilience: a batch that cannot be written is kept and retried with backoff (100 ms
//! doubling to 2 s) on a fresh connection; positions are assigned once, so a retry of a
//! commit whose outcome was lost inserts nothing twice (`ON CONFLICT DO NOTHING`; run rows
//! are upserted). Failures are reported once through [`PgRecorder::on_error`] and kept for
//! [`PgRecorder::take_errors`]; they never stop the run. [`PgRecorder::flush`] waits until
//! everything queued is committed, at most [`FLUSH_BOUND`].
//!
//! The step barrier ([`EventPublisher::settle`]): the engine awaits, after each
//! `StepStarted` and before anything of that step runs, the commit of everything queued so
//! far, so a worker killed at any point leaves the completions of the steps it went past
//! committed and the step in progress named (another worker resuming the run starts there,
//! never at a step that finished before it). It waits at most [`FLUSH_BOUND`]; past it the run goes on
//! without waiting for its record (reported once) until a batch commits again.
//!
//! Fencing (the run queue, issue 15 part 2): [`PgRecorder::fence`] says this process holds a
//! run under a claim epoch; its row's writes then carry `WHERE epoch = <epoch>`, and once such
//! a write matches no row (another worker claimed the run) the run's later writes (its tree's
//! events included) are dropped and the [`PgRecorder::on_fenced`] callback is told its id.
//!
//! Source: issue 15; spec/workflow.md §3.11, §3.14.

use std::collections::BTreeSet;
use std::collections::HashMap;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::time::Duration;
use std::time::SystemTime;

use awf_domain::event::EventEnvelope;
use awf_domain::event::EventPublisher;
use awf_domain::event::RunEvent;
use awf_domain::ports::store::HistoryRecord;
use awf_domain::ports::store::RunSnapshot;
use awf_domain::projection;
use awf_domain::projection::RunProjection;
use deadpool_postgres::Pool;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::db_text;
use crate::pool_text;

/// Called with the text of a write failure (once per kind of failure).
pub use awf_domain::write_failures::ErrorCallback;

/// Called with the id of a fenced run whose claim another worker took.
pub type FencedCallback = Arc<dyn Fn(&str) + Send + Sync>;

/// Longest time [`PgRecorder::flush`] waits for the queued events to be committed.
pub const FLUSH_BOUND: Duration = Duration::from_secs(30);

/// At most this many queued messages are applied before a write.
const MAX_BATCH: usize = 4096;

/// Longest a write may take once the recorder is told to [`abandon`](PgRecorder::abandon).
pub const LAST_TRY: Duration = Duration::from_secs(2);

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

enum Msg {
    Event(Box<EventEnvelope>),
    Flush(Ack),
    Fence(String, i64),
}

/// Told once everything queued before it is committed.
enum Ack {
    /// A blocking [`PgRecorder::flush`].
    Blocking(std::sync::mpsc::SyncSender<()>),
    /// An awaited barrier ([`EventPublisher::settle`]).
    Awaited(tokio::sync::oneshot::Sender<()>),
}

impl Ack {
    fn send(self) {
        match self {
            Self::Blocking(tx) => {
                let _ = tx.send(());
            }
            Self::Awaited(tx) => {
                let _ = tx.send(());
            }
        }
    }
}

struct Shared {
    failures: awf_domain::write_failures::WriteFailures,
    /// Set by [`PgRecorder::abandon`] (a draining worker's grace is over): a write that
    /// fails or hangs is given up instead of retried.
    abandon: tokio::sync::watch::Sender<bool>,
    fenced: Mutex<Option<FencedCallback>>,
    /// A flush returned before everything was committed.
    unrecorded: std::sync::atomic::AtomicBool,
    /// A step barrier gave up waiting and no batch has committed since: barriers return at
    /// once (the store is away; runs go on as before the barrier existed).
    lagging: std::sync::atomic::AtomicBool,
}

impl Default for Shared {
    fn default() -> Self {
        Self {
            failures: awf_domain::write_failures::WriteFailures::default(),
            abandon: tokio::sync::watch::channel(false).0,
            fenced: Mutex::default(),
            unrecorded: std::sync::atomic::AtomicBool::default(),
            lagging: std::sync::atomic::AtomicBool::default(),
        }
    }
}

impl Shared {
    fn report(&self, target: &'static str, message: String) {
        self.failures.report(target, message);
    }

    fn fenced(&self, run_id: &str) {
        let cb = self
            .fenced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(cb) = cb {
            cb(run_id);
        }
    }
}

/// The event-stream writer of a [`PgStore`](crate::PgStore): an [`EventPublisher`] whose
/// `emit` only queues. Clones share one writer task; it stops once every clone is dropped
/// and what was queued is written (or the store's runtime ends). See the module docs for
/// what is written.
#[derive(Clone)]
pub struct PgRecorder {
    tx: mpsc::UnboundedSender<Msg>,
    shared: Arc<Shared>,
    url: String,
    /// Keeps the store's runtime alive as long as a handle is.
    _store: crate::PgStore,
}

impl std::fmt::Debug for PgRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgRecorder")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl PgRecorder {
    /// Starts the writer task of `store`; audit lines name `user` (none written without
    /// `audit`).
    pub(crate) fn start(store: &crate::PgStore, user: &str, audit: bool) -> Self {
        let shared = Arc::new(Shared::default());
        let (tx, rx) = mpsc::unbounded_channel();
        let writer = Writer {
            pool: store.pool().clone(),
            shared: Arc::clone(&shared),
            url: store.url().to_owned(),
            user: user.to_owned(),
            audit,
            runs: HashMap::new(),
            root_of: HashMap::new(),
            next_pos: HashMap::new(),
            next_seq: HashMap::new(),
            fences: HashMap::new(),
            dropped: HashSet::new(),
            pre_start: HashMap::new(),
            pending: Pending::default(),
            waiting: Vec::new(),
        };
        store.runtime().spawn(writer.run(rx));
        Self {
            tx,
            shared,
            url: store.url().to_owned(),
            _store: store.clone(),
        }
    }

    /// Blocks until every event queued before this call is committed, at most
    /// [`FLUSH_BOUND`]; past it, reports that events are not recorded yet and returns (the
    /// writer goes on retrying while the process lives). Must not be called from the
    /// store's own runtime.
    pub fn flush(&self) {
        self.flush_within(FLUSH_BOUND);
    }

    /// [`flush`](Self::flush) waiting at most `bound`; whether everything queued before the
    /// call is committed. When it is not, the failure is reported (once) and
    /// [`run_record_failed`](Self::run_record_failed) turns true.
    pub fn flush_within(&self, bound: Duration) -> bool {
        let (ack_tx, ack_rx) = std::sync::mpsc::sync_channel(1);
        if self.tx.send(Msg::Flush(Ack::Blocking(ack_tx))).is_err() {
            return false;
        }
        match ack_rx.recv_timeout(bound) {
            Ok(()) => true,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => false,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                self.shared
                    .unrecorded
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                self.shared.report(
                    "unrecorded",
                    format!(
                        "the PostgreSQL store {} did not take the run's record within {} s; \
                         what is not written yet is lost when awf exits",
                        self.url,
                        bound.as_secs()
                    ),
                );
                false
            }
        }
    }

    /// From now on, a write that fails is not retried and one that hangs is given up after
    /// [`LAST_TRY`]: what it held is dropped, with a warning (tracing, `warn`) naming each
    /// run and how many of its events were not written, and
    /// [`run_record_failed`](Self::run_record_failed) turns true. A draining worker calls it
    /// once its grace is over, so that a store that refuses or blocks its writes cannot hold
    /// its exit.
    /// Writes that succeed go on as before.
    pub fn abandon(&self) {
        self.shared.abandon.send_replace(true);
    }

    /// Sets the function told about write failures (once per kind of failure).
    pub fn on_error(&self, callback: ErrorCallback) {
        self.shared.failures.on_error(callback);
    }

    /// Takes the texts of the write failures so far (at most 100 are kept).
    pub fn take_errors(&self) -> Vec<String> {
        self.shared.failures.take()
    }

    /// Whether a [`flush`](Self::flush) returned before the record was committed (the run's
    /// state, history or events may be incomplete). Failures that a retry repaired do not
    /// count.
    pub fn run_record_failed(&self) -> bool {
        self.shared
            .unrecorded
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Registers that this process holds `run_id` under claim `epoch`: its row's writes
    /// carry `WHERE epoch = epoch` from now on (events queued before this call included).
    pub fn fence(&self, run_id: &str, epoch: i64) {
        let _ = self.tx.send(Msg::Fence(run_id.to_owned(), epoch));
    }

    /// Sets the function told the id of a fenced run whose claim another worker took (its
    /// later writes are dropped).
    pub fn on_fenced(&self, callback: FencedCallback) {
        *self
            .shared
            .fenced
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(callback);
    }
}

impl EventPublisher for PgRecorder {
    fn emit(&self, event: EventEnvelope) {
        if self.tx.send(Msg::Event(Box::new(event))).is_err() {
            self.shared.report(
                "recorder",
                "the PostgreSQL store writer is not running; an event was not recorded".to_owned(),
            );
        }
    }

    fn flush(&self) {
        Self::flush(self);
    }

    /// What [`EventPublisher::settle`] does: every event queued before is committed then.
    fn written(&self) -> Option<awf_domain::event::Settle> {
        self.settle()
    }

    /// Resolves once everything queued before the call is committed, at most
    /// [`FLUSH_BOUND`] (then reported once, and later barriers return at once until a batch
    /// commits again); `None` while the store is known to be away that way, or when the
    /// writer is not running.
    fn settle(&self) -> Option<awf_domain::event::Settle> {
        use std::sync::atomic::Ordering;
        if self.shared.lagging.load(Ordering::Relaxed) {
            return None;
        }
        let (ack_tx, ack_rx) = tokio::sync::oneshot::channel();
        if self.tx.send(Msg::Flush(Ack::Awaited(ack_tx))).is_err() {
            return None;
        }
        let shared = Arc::clone(&self.shared);
        let url = self.url.clone();
        Some(Box::pin(async move {
            if tokio::time::timeout(FLUSH_BOUND, ack_rx).await.is_err() {
                shared.lagging.store(true, Ordering::Relaxed);
                shared.report(
                    "settle",
                    format!(
                        "the PostgreSQL store {url} did not take a step's record within {} s; \
                         the run goes on without waiting for its record (killed now, it would \
                         run completed steps again when resumed)",
                        FLUSH_BOUND.as_secs()
                    ),
                );
            }
        }))
    }
}

/// One run's projection.
struct RunProj {
    proj: Option<RunProjection>,
    /// The history record, once finished.
    record: Option<HistoryRecord>,
    /// The success terminal's message, once finished (`RunResult::message`).
    message: Option<String>,
    /// A run that ended parked on a usage limit (status `waiting`): its reset time.
    waiting_until: Option<std::time::SystemTime>,
    root: String,
    dirty: bool,
    finished: bool,
}

/// An event row waiting for its transaction.
struct EventRow {
    root: String,
    /// Assigned once (at the first attempt), kept across retries.
    position: Option<i64>,
    run_id: String,
    /// The run's next recorded seq, assigned with the position (continuing after the
    /// run's stored largest one: a resumed or taken-over run goes on counting).
    seq: Option<i64>,
    kind: String,
    envelope: Value,
}

/// What the next transaction writes.
#[derive(Default)]
struct Pending {
    events: Vec<EventRow>,
    audit: Vec<(String, Value)>,
    /// Runs whose row must be written.
    runs: BTreeSet<String>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.events.is_empty() && self.audit.is_empty() && self.runs.is_empty()
    }
}

struct Writer {
    pool: Pool,
    shared: Arc<Shared>,
    url: String,
    user: String,
    /// Whether audit rows are written (`AWF_AUDIT_LOG=off`: not).
    audit: bool,
    runs: HashMap<String, RunProj>,
    /// Root run of every run seen.
    root_of: HashMap<String, String>,
    /// Next position of each root run's log, once read.
    next_pos: HashMap<String, i64>,
    /// Next seq of each run of those logs (read with the positions; a run not in it starts
    /// at 1).
    next_seq: HashMap<String, i64>,
    /// Claim epochs of fenced runs.
    fences: HashMap<String, i64>,
    /// Fenced runs whose claim was lost: nothing more is written for them (nor their tree).
    dropped: HashSet<String>,
    /// Questions a run asked before it started (missing inputs), held until its
    /// `RunStarted`: a run that never starts leaves no events.
    pre_start: HashMap<String, Vec<EventEnvelope>>,
    pending: Pending,
    /// Flushes and step barriers waiting for the pending writes.
    waiting: Vec<Ack>,
}

fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The audit line text as JSON (it is built as one JSON object per line).
fn audit_json(line: &str) -> Value {
    crate::storable(
        serde_json::from_str(line.trim_end()).unwrap_or_else(|_| Value::String(line.to_owned())),
    )
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>) {
        let mut backoff = BACKOFF_MIN;
        let mut open = true;
        loop {
            if self.pending.is_empty() {
                for ack in self.waiting.drain(..) {
                    ack.send();
                }
                if !open {
                    return;
                }
                match rx.recv().await {
                    Some(m) => self.take(m).await,
                    None => {
                        open = false;
                        continue;
                    }
                }
            }
            let mut n = 0;
            while n < MAX_BATCH {
                match rx.try_recv() {
                    Ok(m) => self.take(m).await,
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        open = false;
                        break;
                    }
                }
                n += 1;
            }
            if self.pending.is_empty() {
                continue;
            }
            let mut abandon = self.shared.abandon.subscribe();
            let abandoned = *abandon.borrow_and_update();
            let written = if abandoned {
                match tokio::time::timeout(LAST_TRY, self.commit()).await {
                    Ok(r) => r,
                    Err(_) => Err(format!("no answer within {} s", LAST_TRY.as_secs())),
                }
            } else {
                tokio::select! {
                    r = self.commit() => r,
                    _ = abandon.wait_for(|a| *a) => Err("given up (awf is exiting)".to_owned()),
                }
            };
            match written {
                Ok(()) => {
                    backoff = BACKOFF_MIN;
                    self.shared
                        .lagging
                        .store(false, std::sync::atomic::Ordering::Relaxed);
                }
                Err(e) if abandoned || *abandon.borrow() => self.give_up(&e),
                // The server answered and refused for lack of privilege: a retry would be
                // refused again, so the step would only wait for it (30 s each).
                Err(e) if e.contains("42501: ") => self.refused(&e),
                Err(e) => {
                    self.shared.report(
                        "store",
                        format!(
                            "cannot write to the PostgreSQL store {}: {e}; retrying",
                            self.url
                        ),
                    );
                    tokio::select! {
                        () = tokio::time::sleep(backoff) => {}
                        _ = abandon.wait_for(|a| *a) => {}
                    }
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
    }

    /// Drops the pending batch after a failed write once told to abandon: a warning per run
    /// with the number of its events not written; the run's record is incomplete.
    fn give_up(&mut self, error: &str) {
        let mut lost: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
        for e in &self.pending.events {
            *lost.entry(e.root.as_str()).or_default() += 1;
        }
        for run in &self.pending.runs {
            let root = self.runs.get(run).map_or(run.as_str(), |p| p.root.as_str());
            lost.entry(root).or_default();
        }
        for (run, n) in &lost {
            tracing::warn!(
                run_id = %run,
                events = n,
                "run {run}: {n} events (and its latest state) were not written to the \
                 PostgreSQL store {} before exiting: {error}",
                self.url
            );
        }
        self.shared
            .unrecorded
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.shared.report(
            "abandoned",
            format!(
                "the PostgreSQL store {} did not take the record of {} run(s) before awf \
                 exited: {error}",
                self.url,
                lost.len()
            ),
        );
        // The dropped rows' positions and seqs are read again from the store at the next
        // write (whatever a timed-out commit did or did not write).
        let roots: Vec<String> = lost.keys().map(|r| (*r).to_owned()).collect();
        self.pending = Pending::default();
        for root in roots {
            self.forget_log(&root);
        }
    }

    /// Drops the pending batch after the server refused it for lack of privilege (SQLSTATE
    /// 42501: a privilege revoked while the run goes on; a user without it is refused before
    /// it starts, [`crate::PgStore::check_writable`]): reported (`refused`, once), not
    /// retried; the run's record is incomplete.
    fn refused(&mut self, error: &str) {
        self.shared
            .unrecorded
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.shared.report(
            "refused",
            format!(
                "the PostgreSQL store {} refused a write for lack of privilege: {error}; \
                 not retried, the run goes on without its record",
                self.url
            ),
        );
        let roots: BTreeSet<String> = self
            .pending
            .events
            .iter()
            .map(|e| e.root.clone())
            .chain(self.pending.runs.iter().map(|r| {
                self.runs
                    .get(r)
                    .map_or_else(|| r.clone(), |p| p.root.clone())
            }))
            .collect();
        self.pending = Pending::default();
        for root in roots {
            self.forget_log(&root);
        }
    }

    async fn take(&mut self, msg: Msg) {
        match msg {
            Msg::Event(e) => self.apply(*e).await,
            Msg::Flush(ack) => self.waiting.push(ack),
            Msg::Fence(run, epoch) => {
                // A new claim (perhaps of a run this process lost before): its writes count
                // again, and its log's positions and seqs are read afresh (another worker
                // may have written since).
                self.dropped.remove(&run);
                self.forget_log(&run);
                self.fences.insert(run, epoch);
            }
        }
    }

    /// Forgets the cached positions and seqs of `root`'s log (read again at its next write).
    fn forget_log(&mut self, root: &str) {
        self.next_pos.remove(root);
        let root_of = &self.root_of;
        self.next_seq
            .retain(|run, _| run != root && root_of.get(run).is_none_or(|r| r != root));
    }

    /// The root run of an event's run.
    fn root(&mut self, env: &EventEnvelope) -> String {
        let id = &env.run_id.0;
        if let Some(r) = self.root_of.get(id) {
            return r.clone();
        }
        let root = match &env.parent_run_id {
            Some(p) => self
                .root_of
                .get(&p.0)
                .cloned()
                .unwrap_or_else(|| p.0.clone()),
            None => id.clone(),
        };
        self.root_of.insert(id.clone(), root.clone());
        root
    }

    fn push_event(&mut self, root: &str, env: &EventEnvelope) {
        let envelope = match serde_json::to_value(env) {
            Ok(v) => crate::storable(v),
            Err(e) => {
                self.shared
                    .report("events", format!("cannot encode an event: {e}"));
                return;
            }
        };
        let kind = envelope
            .get("event")
            .and_then(|e| e.get("type"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        self.pending.events.push(EventRow {
            root: root.to_owned(),
            position: None,
            run_id: env.run_id.0.clone(),
            seq: None,
            kind,
            envelope,
        });
    }

    /// The stored snapshot of `run_id` (a resumed run), read with retries while the
    /// database is away (the events wait in the queue meanwhile).
    async fn stored_snapshot(&self, run_id: &str) -> Option<RunSnapshot> {
        self.read_retrying(&format!("run {run_id}"), || {
            read_snapshot(&self.pool, run_id)
        })
        .await
    }

    /// The submit time of `run_id` when it is a queued run that has not started yet (its row
    /// has no snapshot); read with retries while the database is away.
    async fn stored_submit_time(&self, run_id: &str) -> Option<SystemTime> {
        self.read_retrying(&format!("run {run_id}"), || {
            read_submit_time(&self.pool, run_id)
        })
        .await
    }

    /// The `InteractionRequired` envelopes of `root`'s stored log that no
    /// `InteractionResolved` answers (an earlier attempt's open requests), in log order;
    /// read with retries while the database is away.
    async fn stored_unresolved(&self, root: &str) -> Vec<EventEnvelope> {
        self.read_retrying(&format!("the requests of run {root}"), || {
            read_unresolved(&self.pool, root)
        })
        .await
    }

    /// `read` until it succeeds, reporting each failure (`cannot read <what> from the
    /// PostgreSQL store …; retrying`) and backing off from `BACKOFF_MIN` to `BACKOFF_MAX`.
    async fn read_retrying<T, F, Fut>(&self, what: &str, read: F) -> T
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, String>>,
    {
        let mut backoff = BACKOFF_MIN;
        loop {
            match read().await {
                Ok(v) => return v,
                Err(e) => {
                    self.shared.report(
                        "store",
                        format!(
                            "cannot read {what} from the PostgreSQL store {}: {e}; retrying",
                            self.url
                        ),
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
    }

    async fn apply(&mut self, env: EventEnvelope) {
        let run_id = env.run_id.0.clone();
        let asking = matches!(
            env.event,
            RunEvent::InteractionRequired { .. } | RunEvent::InteractionResolved { .. }
        );
        if asking && env.parent_run_id.is_none() && !self.runs.contains_key(&run_id) {
            self.pre_start.entry(run_id).or_default().push(env);
            return;
        }
        let root = self.root(&env);
        if self.dropped.contains(&root) || self.dropped.contains(&run_id) {
            return;
        }
        // A resumed root run (`awf resume`, or another worker taking over a dead one's
        // claim): what an earlier attempt asked and never resolved is closed first, so that
        // only the new attempt's requests are pending in the log.
        if let RunEvent::RunStarted {
            resumed_from: Some(_),
            ..
        } = &env.event
            && env.parent_run_id.is_none()
        {
            for asked in self.stored_unresolved(&root).await {
                let closed = closing(&asked, env.at);
                self.push_event(&root, &closed);
            }
        }
        if matches!(env.event, RunEvent::RunStarted { .. })
            && let Some(held) = self.pre_start.remove(&run_id)
        {
            for e in &held {
                self.push_event(&root, e);
            }
        }
        self.push_event(&root, &env);
        match &env.event {
            RunEvent::RunStarted {
                workflow,
                inputs,
                resumed_from,
                ..
            } => {
                let earlier = match resumed_from {
                    Some(_) => match self.runs.remove(&run_id) {
                        Some(p) => p.proj.map(|p| p.snap),
                        None => self.stored_snapshot(&run_id).await,
                    },
                    None => None,
                };
                let mut proj = RunProjection::start(&env, earlier);
                // A queued run a worker starts keeps its submit time as its start (the engine
                // counts its duration from there too: `RunRequest::started_at`).
                if resumed_from.is_none()
                    && env.parent_run_id.is_none()
                    && let Some(p) = proj.as_mut()
                    && let Some(submitted) = self.stored_submit_time(&run_id).await
                    && submitted < p.snap.started_at
                {
                    p.snap.started_at = submitted;
                }
                self.runs.insert(
                    run_id.clone(),
                    RunProj {
                        proj,
                        record: None,
                        message: None,
                        waiting_until: None,
                        root: root.clone(),
                        dirty: true,
                        finished: false,
                    },
                );
                self.pending.runs.insert(run_id.clone());
                if self.audit {
                    let line =
                        projection::started_line(&run_id, env.at, &self.user, workflow, inputs);
                    self.pending.audit.push((run_id, audit_json(&line)));
                }
            }
            RunEvent::StepStarted { step, kind, .. } => {
                if let Some(p) = self.runs.get_mut(&run_id)
                    && let Some(proj) = p.proj.as_mut()
                    && proj.step_started(&env, step, kind)
                {
                    p.dirty = true;
                    self.pending.runs.insert(run_id);
                }
            }
            RunEvent::StepFinished { step, state, .. } => {
                if let Some(p) = self.runs.get_mut(&run_id)
                    && let Some(proj) = p.proj.as_mut()
                {
                    proj.step_finished(&env, step, state);
                    p.dirty = true;
                    self.pending.runs.insert(run_id);
                }
            }
            RunEvent::ChildRunStarted { child_run_id, .. } => {
                if let Some(p) = self.runs.get_mut(&run_id)
                    && let Some(proj) = p.proj.as_mut()
                    && proj.child_started(&env, &child_run_id.0)
                {
                    p.dirty = true;
                    self.pending.runs.insert(run_id.clone());
                }
                self.root_of.insert(child_run_id.0.clone(), root);
            }
            RunEvent::RunFinished { result } => {
                let p = self.runs.entry(run_id.clone()).or_insert_with(|| RunProj {
                    proj: None,
                    record: None,
                    message: None,
                    waiting_until: None,
                    root: root.clone(),
                    dirty: true,
                    finished: false,
                });
                let record = match p.proj.as_mut() {
                    Some(proj) => proj.finish(&env, result),
                    None => projection::finished_record(&env, result),
                };
                let line = projection::completed_line_of(
                    &run_id,
                    env.at,
                    &self.user,
                    &record.workflow_name,
                    result,
                );
                p.record = Some(record);
                p.message.clone_from(&result.message);
                p.waiting_until = projection::parked_until(result);
                p.dirty = true;
                p.finished = true;
                self.pending.runs.insert(run_id.clone());
                if self.audit {
                    self.pending.audit.push((run_id, audit_json(&line)));
                }
            }
            _ => {}
        }
    }

    /// Writes the pending batch in one transaction; on success it is cleared and finished
    /// runs are forgotten.
    async fn commit(&mut self) -> Result<(), String> {
        let mut client = self.pool.get().await.map_err(|e| pool_text(&e))?;
        let tx = client.transaction().await.map_err(|e| db_text(&e))?;
        // Positions: read the largest stored one of each root run not seen yet.
        let roots: BTreeSet<String> = self
            .pending
            .events
            .iter()
            .filter(|e| e.position.is_none() && !self.next_pos.contains_key(&e.root))
            .map(|e| e.root.clone())
            .collect();
        // Statements are prepared once per connection (a round trip less each, on the path
        // of every step: the engine waits for the commit before the next step runs).
        for root in roots {
            let max_position = tx
                .prepare_cached(
                    "SELECT COALESCE(MAX(position), 0) FROM awf_events WHERE root_run_id = $1",
                )
                .await
                .map_err(|e| db_text(&e))?;
            let row = tx
                .query_one(&max_position, &[&root])
                .await
                .map_err(|e| db_text(&e))?;
            let max: i64 = col(&row, 0)?;
            let max_seqs = tx
                .prepare_cached(
                    "SELECT run_id, MAX(seq) FROM awf_events WHERE root_run_id = $1 \
                     GROUP BY run_id",
                )
                .await
                .map_err(|e| db_text(&e))?;
            for r in tx
                .query(&max_seqs, &[&root])
                .await
                .map_err(|e| db_text(&e))?
            {
                let run: String = col(&r, 0)?;
                let seq: i64 = col(&r, 1)?;
                self.next_seq.insert(run, seq + 1);
            }
            self.next_pos.insert(root, max + 1);
        }
        for e in self
            .pending
            .events
            .iter_mut()
            .filter(|e| e.position.is_none())
        {
            let next = self.next_pos.entry(e.root.clone()).or_insert(1);
            e.position = Some(*next);
            *next += 1;
            let next = self.next_seq.entry(e.run_id.clone()).or_insert(1);
            e.seq = Some(*next);
            if let Some(obj) = e.envelope.as_object_mut() {
                obj.insert("seq".to_owned(), Value::from(*next));
            }
            *next += 1;
        }
        // Run rows first: a fenced run whose claim is gone drops its events.
        let mut lost: Vec<String> = Vec::new();
        for id in &self.pending.runs {
            let Some(p) = self.runs.get(id) else {
                continue;
            };
            let fence = self.fences.get(id).copied();
            let n = write_run(&tx, id, p, fence)
                .await
                .map_err(|e| db_text(&e))?;
            if n == 0 && fence.is_some() {
                lost.push(id.clone());
            }
        }
        // Every event row of the batch in one statement (arrays of columns).
        let mut notify: BTreeSet<&str> = BTreeSet::new();
        let kept: Vec<&EventRow> = self
            .pending
            .events
            .iter()
            .filter(|e| !lost.contains(&e.root) && !lost.contains(&e.run_id))
            .collect();
        if !kept.is_empty() {
            let roots: Vec<&str> = kept.iter().map(|e| e.root.as_str()).collect();
            let positions: Vec<i64> = kept
                .iter()
                .map(|e| e.position.unwrap_or_default())
                .collect();
            let runs: Vec<&str> = kept.iter().map(|e| e.run_id.as_str()).collect();
            let seqs: Vec<i64> = kept.iter().map(|e| e.seq.unwrap_or_default()).collect();
            let kinds: Vec<&str> = kept.iter().map(|e| e.kind.as_str()).collect();
            let envelopes: Vec<&Value> = kept.iter().map(|e| &e.envelope).collect();
            let insert = tx
                .prepare_cached(
                    "INSERT INTO awf_events (root_run_id, position, run_id, seq, kind, envelope)
                     SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[],
                                          $5::text[], $6::jsonb[])
                     ON CONFLICT DO NOTHING",
                )
                .await
                .map_err(|e| db_text(&e))?;
            tx.execute(
                &insert,
                &[&roots, &positions, &runs, &seqs, &kinds, &envelopes],
            )
            .await
            .map_err(|e| db_text(&e))?;
            notify.extend(roots);
        }
        for (run_id, line) in &self.pending.audit {
            if lost.contains(run_id) {
                continue;
            }
            tx.execute(
                "INSERT INTO awf_audit (run_id, line) VALUES ($1, $2)",
                &[run_id, line],
            )
            .await
            .map_err(|e| db_text(&e))?;
        }
        if !notify.is_empty() {
            let notify_stmt = tx
                .prepare_cached("SELECT pg_notify($1, $2)")
                .await
                .map_err(|e| db_text(&e))?;
            for root in notify {
                tx.execute(&notify_stmt, &[&crate::EVENTS_CHANNEL, &root])
                    .await
                    .map_err(|e| db_text(&e))?;
            }
        }
        tx.commit().await.map_err(|e| db_text(&e))?;
        self.pending = Pending::default();
        for p in self.runs.values_mut() {
            p.dirty = false;
        }
        // A finished root run's tree is done: forget its ids and positions (a later resume
        // reads the stored positions again).
        let done: Vec<String> = self
            .runs
            .iter()
            .filter(|(id, p)| p.finished && p.root == **id)
            .map(|(id, _)| id.clone())
            .collect();
        for root in &done {
            self.forget_log(root);
            self.root_of.retain(|_, r| r != root);
        }
        self.runs.retain(|_, p| !p.finished);
        for id in lost {
            self.dropped.insert(id.clone());
            self.runs.remove(&id);
            self.shared.fenced(&id);
        }
        Ok(())
    }
}

/// Upserts the row of one run; the number of rows written (0: a fence did not match).
async fn write_run(
    tx: &deadpool_postgres::Transaction<'_>,
    id: &str,
    p: &RunProj,
    fence: Option<i64>,
) -> Result<u64, tokio_postgres::Error> {
    let snap = p.proj.as_ref().map(|p| &p.snap);
    let rec = p.record.as_ref();
    let workflow_id = snap
        .map(|s| s.workflow.clone())
        .or_else(|| rec.map(|r| r.workflow_id.clone()))
        .unwrap_or_default();
    let workflow_name = snap
        .map(|s| s.workflow_name.clone())
        .or_else(|| rec.map(|r| r.workflow_name.clone()))
        .unwrap_or_default();
    let parent = snap
        .and_then(|s| s.parent_run_id.clone())
        .or_else(|| rec.and_then(|r| r.parent_run_id.clone()));
    let status = rec
        .map(|r| r.status)
        .or_else(|| snap.map(|s| s.status))
        .map(|s| s.as_str().to_owned())
        .unwrap_or_default();
    let started = rec
        .map(|r| r.started_at_ms)
        .or_else(|| snap.map(|s| projection::millis(s.started_at)))
        .map(i64_of);
    let exit_code = rec.and_then(|r| r.exit_code).map(i32::from);
    let completed = rec.and_then(|r| r.completed_at_ms).map(i64_of);
    let duration = rec.and_then(|r| r.duration_ms).map(i64_of);
    let error = rec.and_then(|r| r.error_message.as_deref().map(crate::storable_text));
    let spend = rec
        .and_then(|r| r.spend)
        .or_else(|| snap.and_then(|s| s.spend))
        .and_then(|s| serde_json::to_value(s).ok())
        .map(crate::storable);
    let snapshot = snap
        .and_then(|s| serde_json::to_value(s).ok())
        .map(crate::storable);
    let guard = if fence.is_some() {
        " WHERE awf_runs.epoch = $16"
    } else {
        ""
    };
    let sql = format!(
        "INSERT INTO awf_runs (run_id, parent_run_id, root_run_id, workflow_id, workflow_name,
                               status, exit_code, started_at_ms, completed_at_ms, duration_ms,
                               error_message, spend, snapshot, message, waiting_until,
                               updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, now())
         ON CONFLICT (run_id) DO UPDATE SET
             parent_run_id = EXCLUDED.parent_run_id,
             root_run_id = EXCLUDED.root_run_id,
             workflow_id = EXCLUDED.workflow_id,
             workflow_name = EXCLUDED.workflow_name,
             status = EXCLUDED.status,
             exit_code = EXCLUDED.exit_code,
             started_at_ms = COALESCE(awf_runs.started_at_ms, EXCLUDED.started_at_ms),
             completed_at_ms = EXCLUDED.completed_at_ms,
             duration_ms = EXCLUDED.duration_ms,
             error_message = EXCLUDED.error_message,
             spend = EXCLUDED.spend,
             snapshot = COALESCE(EXCLUDED.snapshot, awf_runs.snapshot),
             message = EXCLUDED.message,
             waiting_until = EXCLUDED.waiting_until,
             updated_at = now(){guard}"
    );
    let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![
        &id,
        &parent,
        &p.root,
        &workflow_id,
        &workflow_name,
        &status,
        &exit_code,
        &started,
        &completed,
        &duration,
        &error,
        &spend,
        &snapshot,
        &p.message,
        &p.waiting_until,
    ];
    if let Some(f) = &fence {
        params.push(f);
    }
    let stmt = tx.prepare_cached(&sql).await?;
    tx.execute(&stmt, &params).await
}

/// The `InteractionResolved` (cancelled) that closes the request `asked` announced, at `at`:
/// the same run, path and iteration (its `seq` is assigned when written).
fn closing(asked: &EventEnvelope, at: std::time::SystemTime) -> EventEnvelope {
    let request_id = match &asked.event {
        RunEvent::InteractionRequired { request } => request.request_id.clone(),
        _ => String::new(),
    };
    EventEnvelope {
        seq: asked.seq,
        run_id: asked.run_id.clone(),
        parent_run_id: asked.parent_run_id.clone(),
        at,
        path: asked.path.clone(),
        iteration: asked.iteration,
        event: RunEvent::InteractionResolved {
            request_id,
            resolution: awf_domain::interaction::Resolution::Cancelled,
        },
    }
}

/// The unresolved `InteractionRequired` envelopes of `root`'s stored log, in log order: no
/// `InteractionResolved` of its id comes after it (request ids are `<root run id>:<n>`
/// counted per attempt, so a later attempt may ask under an id an earlier one used).
async fn read_unresolved(pool: &Pool, root: &str) -> Result<Vec<EventEnvelope>, String> {
    let client = pool.get().await.map_err(|e| pool_text(&e))?;
    let rows = client
        .query(
            "SELECT e.envelope FROM awf_events e \
             WHERE e.root_run_id = $1 AND e.kind = 'interaction_required' \
               AND NOT EXISTS (SELECT 1 FROM awf_events x \
                   WHERE x.root_run_id = $1 AND x.position > e.position \
                     AND x.kind = 'interaction_resolved' \
                     AND x.envelope->'event'->>'request_id' \
                         = e.envelope->'event'->'request'->>'request_id') \
             ORDER BY e.position",
            &[&root],
        )
        .await
        .map_err(|e| db_text(&e))?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            col::<Value>(r, 0)
                .ok()
                .and_then(|v| serde_json::from_value::<EventEnvelope>(v).ok())
        })
        .collect())
}

/// The stored snapshot of `run_id`, if any.
pub(crate) async fn read_snapshot(
    pool: &Pool,
    run_id: &str,
) -> Result<Option<RunSnapshot>, String> {
    let client = pool.get().await.map_err(|e| pool_text(&e))?;
    let row = client
        .query_opt(
            "SELECT snapshot FROM awf_runs WHERE run_id = $1",
            &[&run_id],
        )
        .await
        .map_err(|e| db_text(&e))?;
    let Some(row) = row else {
        return Ok(None);
    };
    let v: Option<Value> = col(&row, 0)?;
    Ok(v.and_then(|v| serde_json::from_value(v).ok()))
}

/// The submit time of the queued run `run_id` that no worker started yet (`submitted_at` of
/// its row without a snapshot); `None` for any other run (a terminal run has no row yet).
pub(crate) async fn read_submit_time(
    pool: &Pool,
    run_id: &str,
) -> Result<Option<SystemTime>, String> {
    let client = pool.get().await.map_err(|e| pool_text(&e))?;
    let row = client
        .query_opt(
            "SELECT (extract(epoch from submitted_at) * 1000)::bigint FROM awf_runs \
             WHERE run_id = $1 AND snapshot IS NULL AND submitted_at IS NOT NULL",
            &[&run_id],
        )
        .await
        .map_err(|e| db_text(&e))?;
    Ok(row
        .map(|r| col::<Option<i64>>(&r, 0))
        .transpose()?
        .flatten()
        .map(crate::ms_time))
}

/// [`crate::column`] with the error's text, as this module reports errors.
fn col<'a, T>(row: &'a tokio_postgres::Row, idx: usize) -> Result<T, String>
where
    T: tokio_postgres::types::FromSql<'a>,
{
    crate::column(row, idx).map_err(|e| e.message().to_owned())
}
