//! A worker of the shared store (`awf serve --store URL`): claims queued runs up to its
//! `--max-runs`, runs them through its local run service, renews their leases, answers
//! cancel requests and answers given on other workers, and marks them done.
//!
//! Loops (all on the caller's runtime; database calls on the store's, through
//! [`PgStore::run`]):
//! - claim: woken by [`crate::QUEUE_CHANNEL`] notifications, a run of its own ending, and a
//!   poll every [`WorkerConfig::poll`] (for notifications lost while disconnected, and for
//!   runs parked on a usage limit whose reset time has come: a poll claims and resumes them,
//!   see [`queue::claim`]);
//! - heartbeat every lease/3: renews this worker's leases; a claim the database no longer
//!   gives it was taken over: its run is cancelled locally at once. While the database is
//!   unreachable the runs go on until their lease (counted from the last renewal) would have
//!   expired, then they are cancelled locally and left for another worker to resume;
//! - control: on every [`crate::CONTROL_CHANNEL`] notification and every second, cancel
//!   requests and answers for the runs it holds.
//!
//! Why one worker at a time per run: see [`crate::queue`].

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::interaction::Answer;
use awf_domain::ports::StateStore;
use awf_domain::ports::service::RunService;
use awf_domain::ports::store::StoredStatus;
use awf_domain::run::CancelReason;
use awf_domain::run::RunId;
use tokio::sync::Notify;

use crate::PgStore;
use crate::listen::Listener;
use crate::listen::Notice;
use crate::queue;
use crate::queue::Claim;
use crate::queue::Ended;
use crate::recorder::LAST_TRY;

/// A worker's settings.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// `<host>:<pid>:<random>` (see [`worker_id`]).
    pub worker_id: String,
    /// Most runs it holds at once (`--max-runs`).
    pub max_runs: usize,
    /// How long a claim lasts without renewal (`--lease`, default 15 s); renewed every third.
    pub lease: Duration,
    /// How often it looks for queued runs without a notification.
    pub poll: Duration,
    /// The environment its runs get (its own, never the submitter's).
    pub env: Vec<(String, String)>,
    /// Its HTTP address, for `awf_workers.addr`.
    pub addr: Option<String>,
    /// The recorder its runs write through, fenced with each claim's epoch (so a worker that
    /// lost a claim writes nothing more about that run); `None` when it records elsewhere.
    pub recorder: Option<crate::PgRecorder>,
}

/// The default lease of a claim.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(15);

/// A new worker id: `<host>:<pid>:<8 random hex digits>`.
pub fn worker_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned());
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}:{}:{}", std::process::id(), &random[..8])
}

/// One claim this worker holds.
#[derive(Debug, Clone)]
struct Held {
    epoch: i64,
    /// When this worker sent the claim (a renewal asked before it cannot have seen it).
    claimed: Instant,
    /// When the database last confirmed the claim (its lease runs from here, at most).
    renewed: Instant,
    /// Whether the local run was started (then a lost claim cancels it).
    started: bool,
    /// Whether it was cancelled locally because the claim was lost (then it is not
    /// marked done: another worker resumes it).
    lost: bool,
    /// Whether a cancel request was passed on already.
    cancelled: bool,
    /// Whether a cancel request was seen before the local run started: passed on as soon as
    /// it starts ([`Worker::drive`]), so a cancel of a just-claimed run is never dropped.
    cancel_seen: bool,
    /// Whether its run ended here and its end is being recorded (the row may be `done`
    /// already: not a lost claim).
    ending: bool,
    /// Since when its end is being recorded (set with `ending`).
    ending_since: Option<Instant>,
}

impl Held {
    /// Notes a cancel request for this claim; whether to cancel the local run now (it was
    /// started and not cancelled yet). Before the run starts the request is kept
    /// (`cancel_seen`) and passed on once it has started.
    fn take_cancel(&mut self) -> bool {
        if !self.started {
            self.cancel_seen = true;
            return false;
        }
        let first = !self.cancelled;
        self.cancelled = true;
        first
    }
}

/// A worker. Build with [`Worker::new`], then [`Worker::spawn`]; [`Worker::drain`] at the end.
pub struct Worker {
    store: PgStore,
    local: Arc<dyn RunService>,
    states: Option<Arc<dyn StateStore>>,
    listener: Listener,
    config: WorkerConfig,
    held: Mutex<HashMap<RunId, Held>>,
    wake: Notify,
    stopping: AtomicBool,
    /// Set once a drain's grace is over: recording a run's end is tried once more (at most
    /// [`LAST_TRY`]), never retried.
    abandon: tokio::sync::watch::Sender<bool>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Worker {
    /// A worker over `local` (the run service that executes its runs), with `states` (where
    /// a taken-over run's recorded state is read, to know whether it ended) and the
    /// process's `listener`.
    pub fn new(
        store: PgStore,
        local: Arc<dyn RunService>,
        states: Option<Arc<dyn StateStore>>,
        listener: Listener,
        config: WorkerConfig,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            local,
            states,
            listener,
            config,
            held: Mutex::new(HashMap::new()),
            wake: Notify::new(),
            stopping: AtomicBool::new(false),
            abandon: tokio::sync::watch::channel(false).0,
        })
    }

    /// This worker's id.
    pub fn id(&self) -> &str {
        &self.config.worker_id
    }

    /// Registers the worker and starts its loops on the current runtime. When registering
    /// fails (its row may have been written before the failure: removing the rows of dead
    /// workers comes after it), its row is removed if it can be (within [`LAST_TRY`]).
    ///
    /// # Errors
    /// `SYSTEM.STORE.UNAVAILABLE` when it cannot be registered.
    pub async fn spawn(self: &Arc<Self>) -> Result<(), AwfError> {
        let pool = self.store.pool().clone();
        let id = self.config.worker_id.clone();
        let max = self.config.max_runs;
        let addr = self.config.addr.clone();
        let registered = self
            .store
            .run(async move { queue::register_worker(&pool, &id, max, addr.as_deref()).await })
            .await
            .and_then(|r| r);
        if let Err(e) = registered {
            let pool = self.store.pool().clone();
            let id = self.config.worker_id.clone();
            let unregister = self
                .store
                .run(async move { queue::unregister_worker(&pool, &id).await });
            match tokio::time::timeout(LAST_TRY, unregister).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(ue)) | Err(ue)) => tracing::warn!(
                    worker = %self.config.worker_id,
                    "could not remove this worker's row after failing to register: {ue}"
                ),
                Err(_) => tracing::warn!(
                    worker = %self.config.worker_id,
                    "could not remove this worker's row after failing to register in time"
                ),
            }
            return Err(e);
        }
        tokio::spawn(Arc::clone(self).claim_loop());
        tokio::spawn(Arc::clone(self).heartbeat_loop());
        tokio::spawn(Arc::clone(self).control_loop());
        Ok(())
    }

    /// Stops claiming (SIGTERM): runs it holds go on.
    pub fn stop_claiming(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.wake.notify_waiters();
    }

    /// The number of runs this worker holds now.
    pub fn held(&self) -> usize {
        guard(&self.held).len()
    }

    /// The ids of the runs this worker holds now (claimed and not yet marked done).
    pub fn held_runs(&self) -> Vec<RunId> {
        guard(&self.held).keys().cloned().collect()
    }

    /// This worker's settings (its id, `--max-runs`, `--lease`).
    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// At the end: stops claiming, waits up to `deadline` for the runs it holds to end,
    /// cancels the rest (`Terminate`) and waits up to `grace` more for them to end (each is
    /// marked done as it ends), then unregisters the worker. Past the grace (or once every
    /// run it holds has ended and waited [`LAST_TRY`] for its record) the store gets no
    /// more retries: the recorder is told to [`abandon`](crate::PgRecorder::abandon) failing
    /// writes (each run whose events are dropped is named in a warning), a run whose end
    /// cannot be recorded within [`LAST_TRY`] is left claimed (another worker resumes it when
    /// its lease expires), and the worker is unregistered within [`LAST_TRY`]: a store that
    /// refuses or blocks writes delays the exit by a few seconds at most.
    pub async fn drain(self: &Arc<Self>, deadline: Duration, grace: Duration) {
        self.stop_claiming();
        tracing::info!(
            worker = %self.config.worker_id,
            runs = self.held(),
            "draining: no more claims; the runs this worker holds get the drain timeout to finish"
        );
        let t0 = Instant::now();
        while self.held() > 0 && t0.elapsed() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let ids: Vec<RunId> = guard(&self.held).keys().cloned().collect();
        if !ids.is_empty() {
            tracing::info!(
                worker = %self.config.worker_id,
                runs = ids.len(),
                "drain timeout reached: cancelling the runs this worker still holds"
            );
        }
        for id in ids {
            let _ = self.local.cancel(&id, CancelReason::Terminate);
        }
        let t1 = Instant::now();
        while self.held() > 0 && t1.elapsed() < grace && !self.only_recording_for(LAST_TRY) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The grace is over: what the store has not taken by now is given up.
        self.abandon.send_replace(true);
        if let Some(r) = &self.config.recorder {
            r.abandon();
        }
        let t2 = Instant::now();
        while self.held() > 0 && t2.elapsed() < LAST_TRY * 3 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for (run_id, _) in guard(&self.held).iter() {
            tracing::warn!(
                run_id = %run_id,
                worker = %self.config.worker_id,
                "run {run_id}: exiting before its end was recorded; another worker resumes it \
                 once its lease expires"
            );
        }
        let pool = self.store.pool().clone();
        let id = self.config.worker_id.clone();
        let store = self.store.clone();
        let unregister = store.run(async move { queue::unregister_worker(&pool, &id).await });
        if tokio::time::timeout(LAST_TRY, unregister).await.is_err() {
            tracing::warn!(
                worker = %self.config.worker_id,
                "the PostgreSQL store did not unregister this worker within {} s; its row is \
                 removed an hour after its last heartbeat",
                LAST_TRY.as_secs()
            );
        }
    }

    /// Whether every run it holds has ended here and has been recording its end for at least
    /// `d` (the store is slow or refuses: waiting longer for it only delays the exit).
    fn only_recording_for(&self, d: Duration) -> bool {
        let held = guard(&self.held);
        !held.is_empty()
            && held
                .values()
                .all(|h| h.ending_since.is_some_and(|t| t.elapsed() >= d))
    }

    async fn claim_loop(self: Arc<Self>) {
        let mut notices = self.listener.subscribe();
        loop {
            if self.stopping.load(Ordering::SeqCst) {
                return;
            }
            let free = self.config.max_runs.saturating_sub(self.held());
            if free > 0 {
                self.close_ended_runs().await;
                let pool = self.store.pool().clone();
                let id = self.config.worker_id.clone();
                let lease = self.config.lease;
                let asked = Instant::now();
                let claimer = id.clone();
                let mine: Vec<String> = guard(&self.held).keys().map(|r| r.0.clone()).collect();
                match self
                    .store
                    .run(async move { queue::claim(&pool, &claimer, free, lease, &mine).await })
                    .await
                {
                    Ok(Ok(claims)) => {
                        let full = claims.len() == free;
                        for c in claims {
                            let workflow = c.request.shown();
                            match &c.taken_from {
                                None if c.parked_until.is_some() => tracing::info!(
                                    run_id = %c.run_id,
                                    workflow,
                                    worker = %id,
                                    "resuming run {} parked on a usage limit (reset at {})",
                                    c.run_id,
                                    c.parked_until
                                        .map(awf_domain::timefmt::format_rfc3339)
                                        .unwrap_or_default()
                                ),
                                Some(old) => tracing::info!(
                                    run_id = %c.run_id,
                                    workflow,
                                    worker = %id,
                                    "took over run {} from worker {old} (its lease expired)",
                                    c.run_id
                                ),
                                None => tracing::info!(
                                    run_id = %c.run_id,
                                    workflow,
                                    worker = %id,
                                    "claimed run {}",
                                    c.run_id
                                ),
                            }
                            guard(&self.held).insert(
                                c.run_id.clone(),
                                Held {
                                    epoch: c.epoch,
                                    claimed: asked,
                                    renewed: asked,
                                    started: false,
                                    lost: false,
                                    cancelled: false,
                                    cancel_seen: false,
                                    ending: false,
                                    ending_since: None,
                                },
                            );
                            tokio::spawn(Arc::clone(&self).execute(c));
                        }
                        if full {
                            // There may be more: look again at once for the slots left.
                            continue;
                        }
                    }
                    Ok(Err(e)) | Err(e) => tracing::debug!("claiming failed: {e}"),
                }
            }
            let wait = tokio::time::sleep(self.config.poll);
            tokio::select! {
                () = wait => {}
                () = self.wake.notified() => {}
                n = notices.recv() => {
                    if let Ok(Notice::Notify { channel, .. }) = &n
                        && channel != crate::QUEUE_CHANNEL
                    {
                        continue;
                    }
                }
            }
        }
    }

    async fn heartbeat_loop(self: Arc<Self>) {
        let every = (self.config.lease / 3).max(Duration::from_millis(50));
        loop {
            tokio::time::sleep(every).await;
            let pool = self.store.pool().clone();
            let id = self.config.worker_id.clone();
            let lease = self.config.lease;
            let asked = Instant::now();
            let renewed = self
                .store
                .run(async move { queue::renew(&pool, &id, lease).await })
                .await;
            match renewed {
                Ok(Ok(rows)) => {
                    let mut lost = Vec::new();
                    let mut cancel = Vec::new();
                    {
                        let mut held = guard(&self.held);
                        for (run_id, h) in held.iter_mut() {
                            match rows.iter().find(|r| &r.run_id == run_id) {
                                Some(r) if r.epoch == h.epoch => {
                                    // Renewed as of when it was asked (the lease runs from
                                    // the database's now, a little later).
                                    h.renewed = asked;
                                    if r.cancel_requested && h.take_cancel() {
                                        cancel.push(run_id.clone());
                                    }
                                }
                                // Claimed after the renewal was asked: not in its answer. Not
                                // started here yet: its start finds out whether it is still
                                // this worker's (or was cancelled before it started).
                                _ if h.lost || h.ending || h.claimed >= asked || !h.started => {}
                                _ => {
                                    h.lost = true;
                                    lost.push(run_id.clone());
                                }
                            }
                        }
                    }
                    for id in lost {
                        tracing::warn!(
                            "run {id}: another worker or awf process took it over; cancelling here"
                        );
                        let _ = self.local.cancel(&id, CancelReason::Terminate);
                    }
                    for id in cancel {
                        let _ = self.local.cancel(&id, CancelReason::Requested);
                    }
                }
                Ok(Err(e)) | Err(e) => {
                    tracing::warn!("renewing the leases failed: {e}");
                    let expired: Vec<RunId> = {
                        let mut held = guard(&self.held);
                        held.iter_mut()
                            .filter(|(_, h)| !h.lost && !h.ending && h.renewed.elapsed() >= lease)
                            .map(|(id, h)| {
                                h.lost = true;
                                id.clone()
                            })
                            .collect()
                    };
                    for id in expired {
                        tracing::warn!(
                            "run {id}: its lease expired while the store was unreachable; cancelling here"
                        );
                        let _ = self.local.cancel(&id, CancelReason::Terminate);
                    }
                }
            }
        }
    }

    async fn control_loop(self: Arc<Self>) {
        let mut notices = self.listener.subscribe();
        loop {
            let tick = tokio::time::sleep(Duration::from_secs(1));
            tokio::select! {
                () = tick => {}
                n = notices.recv() => {
                    if let Ok(Notice::Notify { channel, .. }) = &n
                        && channel != crate::CONTROL_CHANNEL
                    {
                        continue;
                    }
                }
            }
            if self.held() == 0 {
                continue;
            }
            let pool = self.store.pool().clone();
            let id = self.config.worker_id.clone();
            let Ok(Ok((cancels, answers))) = self
                .store
                .run(async move { queue::control_for(&pool, &id).await })
                .await
            else {
                continue;
            };
            for run_id in cancels {
                let first = guard(&self.held)
                    .get_mut(&run_id)
                    .is_some_and(Held::take_cancel);
                if first {
                    let _ = self.local.cancel(&run_id, CancelReason::Requested);
                }
            }
            for a in answers {
                let outcome = match serde_json::from_value::<Answer>(a.answer.clone()) {
                    Ok(answer) => self.local.respond(&a.request_id, answer),
                    Err(e) => Err(AwfError::new(
                        ErrorCode::UserFacadeInputRejected,
                        format!("the answer to {} is not an answer: {e}", a.request_id),
                    )),
                };
                let pool = self.store.pool().clone();
                let request_id = a.request_id.clone();
                let _ = self
                    .store
                    .run(async move {
                        queue::mark_answer(&pool, &request_id, outcome.err().as_ref()).await
                    })
                    .await;
            }
        }
    }

    /// Runs one claim to its end and marks it done (or releases it).
    async fn execute(self: Arc<Self>, claim: Claim) {
        let run_id = claim.run_id.clone();
        let outcome = self.drive(&claim).await;
        let lost = guard(&self.held).get_mut(&run_id).is_none_or(|h| {
            h.ending = true;
            h.ending_since = Some(Instant::now());
            h.lost
        });
        // Taken for lost (another worker's claim, or a lease that expired while the store
        // was unreachable): give it back in case it is still this claim (the release is
        // fenced by the epoch: it changes nothing once another worker holds it), so that it
        // is resumed rather than left to this worker's renewals.
        let outcome = match outcome {
            Outcome::Done(ended) => {
                log_end(
                    &run_id,
                    claim.request.shown(),
                    &self.config.worker_id,
                    &Outcome::Done(ended),
                );
                self.forget(&run_id, claim.epoch);
                return;
            }
            _ if lost => Outcome::Release(Duration::ZERO),
            outcome => outcome,
        };
        // `done` says everything of the run is recorded: its events reach the store first
        // (the recorder retries through a restart of the server; bounded by its flush).
        if let (Some(r), Outcome::Ended(_)) = (&self.config.recorder, &outcome) {
            let r = r.clone();
            let _ = tokio::task::spawn_blocking(move || r.flush()).await;
        }
        {
            let store = self.store.clone();
            let worker = self.config.worker_id.clone();
            let epoch = claim.epoch;
            let id = run_id.clone();
            // Until the database takes it (it may be restarting): the run ended here. Once
            // a drain's grace is over ([`Worker::drain`]), one last try of at most
            // [`LAST_TRY`].
            let mut abandon = self.abandon.subscribe();
            for attempt in 0u32.. {
                let pool = store.pool().clone();
                let (w, i, o) = (worker.clone(), id.clone(), outcome.clone());
                let write = store.run(async move {
                    match o {
                        Outcome::Ended(ended) => queue::finish(&pool, &i, &w, epoch, &ended).await,
                        Outcome::Release(delay) => {
                            queue::release(&pool, &i, &w, epoch, delay).await
                        }
                        Outcome::AlreadyEnded(_) => queue::close_ended(&pool, &i, &w, epoch).await,
                        Outcome::Done(_) => Ok(true),
                    }
                });
                let last = *abandon.borrow_and_update();
                let r = if last {
                    match tokio::time::timeout(LAST_TRY, write).await {
                        Ok(r) => r,
                        Err(_) => Err(crate::unavailable("answer in time", &"no answer")),
                    }
                } else {
                    tokio::select! {
                        r = write => r,
                        _ = abandon.wait_for(|a| *a) => {
                            Err(crate::unavailable("answer before the drain's grace ended", &"no answer"))
                        }
                    }
                };
                match r {
                    Ok(Ok(_)) => {
                        log_end(&id, claim.request.shown(), &worker, &outcome);
                        break;
                    }
                    Ok(Err(e)) | Err(e) => {
                        if last {
                            tracing::warn!(
                                run_id = %id,
                                worker = %worker,
                                "run {id}: its end was not recorded before exiting ({e}); \
                                 another worker resumes it once its lease expires"
                            );
                            break;
                        }
                        if attempt % 20 == 0 {
                            tracing::warn!("run {id}: recording its end failed: {e}");
                        }
                        tokio::select! {
                            () = tokio::time::sleep(Duration::from_millis(500)) => {}
                            _ = abandon.wait_for(|a| *a) => {}
                        }
                    }
                }
            }
        }
        self.forget(&run_id, claim.epoch);
    }

    /// Drops this claim's entry (only this claim's: once released, the run may be claimed
    /// again already) and wakes the claim loop.
    fn forget(&self, run_id: &RunId, epoch: i64) {
        {
            let mut held = guard(&self.held);
            if held.get(run_id).is_some_and(|h| h.epoch == epoch) {
                held.remove(run_id);
            }
        }
        self.wake.notify_waiters();
    }

    /// Takes out of the queue the runs whose record has ended already (no worker may run
    /// them again: [`queue::close_ended_runs`]), logging each; their record is left as it is.
    async fn close_ended_runs(&self) {
        let pool = self.store.pool().clone();
        match self
            .store
            .run(async move { queue::close_ended_runs(&pool).await })
            .await
        {
            Ok(Ok(closed)) => {
                for c in closed {
                    tracing::info!(
                        run_id = %c.run_id,
                        workflow = %c.workflow,
                        worker = %self.config.worker_id,
                        "run {} had ended already ({}): taken out of the queue, its record left \
                         as it is",
                        c.run_id,
                        c.status
                    );
                }
            }
            Ok(Err(e)) | Err(e) => tracing::debug!("closing ended runs failed: {e}"),
        }
    }

    /// Whether the recorded run has ended for good (completed, or failed with no resume of
    /// it queued): a claim of it must not run it again.
    fn recorded_end(&self, claim: &Claim) -> Option<String> {
        let snap = self.states.as_ref()?.load(&claim.run_id.0).ok()?;
        ended_for_good(snap.status, claim)
    }

    async fn drive(&self, claim: &Claim) -> Outcome {
        let run_id = &claim.run_id;
        // Asked to cancel before this claim and never started: nothing of it ran, so it ends
        // here. (One that started, whose worker died since, is resumed and cancelled at once
        // below: its engine's cancel path records its end, as a run cancelled while running.)
        if claim.cancel_requested && !claim.run_started {
            return Outcome::Ended(Ended {
                status: "cancelled".to_owned(),
                exit_code: Some(i32::from(CancelReason::Requested.exit_code())),
                error_message: None,
            });
        }
        if self.stopping.load(Ordering::SeqCst) {
            return Outcome::Release(Duration::ZERO);
        }
        // A run started before: ended already (its worker died before marking it), or to be
        // resumed from its recorded state.
        let mut resume = claim.run_started;
        if resume && let Some(states) = &self.states {
            match states.load(&run_id.0) {
                // Ended (its worker died before marking it, or another process ended it):
                // marked done, its record left as it is. (A `cancelled` one without a cancel
                // request was stopped by a worker that lost its lease: it is resumed.)
                Ok(snap) => {
                    if let Some(status) = ended_for_good(snap.status, claim) {
                        return Outcome::AlreadyEnded(status);
                    }
                }
                // Never recorded: it died before its first event; start it.
                Err(e) if e.code() == ErrorCode::UserInputValidationFailed => resume = false,
                Err(_) => {}
            }
        }
        let pool = self.store.pool().clone();
        let (id, worker, epoch) = (run_id.clone(), self.config.worker_id.clone(), claim.epoch);
        match self
            .store
            .run(async move { queue::mark_started(&pool, &id, &worker, epoch).await })
            .await
        {
            Ok(Ok(queue::Marked::Started)) => {}
            // Started before (by a worker that died) and asked to cancel: resumed and cancelled
            // at once, so that its record ends as a cancelled run's does.
            Ok(Ok(queue::Marked::CancelRequested)) if claim.run_started => {
                if let Some(h) = guard(&self.held).get_mut(run_id) {
                    h.cancel_seen = true;
                }
            }
            // Cancelled between the claim and now: never run a step of it.
            Ok(Ok(queue::Marked::CancelRequested)) => {
                return Outcome::Ended(Ended {
                    status: "cancelled".to_owned(),
                    exit_code: Some(i32::from(CancelReason::Requested.exit_code())),
                    error_message: Some(queue::CANCELLED_MESSAGE.to_owned()),
                });
            }
            Ok(Ok(queue::Marked::Cancelled)) => {
                return Outcome::Done(Ended {
                    status: "cancelled".to_owned(),
                    exit_code: Some(queue::CANCELLED_EXIT),
                    error_message: Some(queue::CANCELLED_MESSAGE.to_owned()),
                });
            }
            Ok(Ok(queue::Marked::Lost)) => {
                if let Some(h) = guard(&self.held).get_mut(run_id) {
                    h.lost = true;
                }
                return Outcome::Release(Duration::ZERO);
            }
            Ok(Err(_)) | Err(_) => return Outcome::Release(Duration::from_secs(1)),
        }
        if let Some(r) = &self.config.recorder {
            r.fence(&run_id.0, claim.epoch);
        }
        let started = if resume {
            self.local
                .resume(claim.request.to_resume(run_id, &self.config.env))
                .await
        } else {
            // Its submit time stays its start: `started_at` does not move to the claim, and
            // its duration spans its time in the queue.
            self.local
                .start(awf_domain::ports::facade::RunRequest {
                    started_at: claim.submitted_at,
                    ..claim.request.to_run(run_id, &self.config.env)
                })
                .await
        };
        // Ended meanwhile (an `awf resume` in a terminal completed it while this claim
        // waited): nothing to resume, and nothing of its record to change.
        if resume
            && started.is_err()
            && let Some(status) = self.recorded_end(claim)
        {
            return Outcome::AlreadyEnded(status);
        }
        match started {
            Ok(_) => {}
            Err(e) if resume && refused_as_live(&e) => {
                tracing::warn!("run {run_id}: its old holder still holds it; retrying later");
                return Outcome::Release(Duration::from_secs(1));
            }
            Err(e) if e.code() == ErrorCode::UserFacadeRunLimit => {
                return Outcome::Release(Duration::from_millis(200));
            }
            Err(e) => {
                // Failed before its first step (the workflow does not load here, its inputs
                // do not fit): recorded as a failed run with its error (code and hints
                // included), the exit code `awf run` gives for it, ended now, and a
                // `run_finished` event, which every surface shows alike.
                let ended = Ended {
                    status: "failure".to_owned(),
                    exit_code: Some(i32::from(e.code().exit_code())),
                    error_message: Some(e.message().to_owned()),
                };
                if resume {
                    return Outcome::Ended(ended);
                }
                let pool = self.store.pool().clone();
                let (id, worker, epoch) =
                    (run_id.clone(), self.config.worker_id.clone(), claim.epoch);
                let workflow = claim.request.identifier.clone();
                let name = claim
                    .request
                    .name
                    .clone()
                    .unwrap_or_else(|| workflow.clone());
                let error = e.clone();
                return match self
                    .store
                    .run(async move {
                        crate::unstarted::fail_unstarted(
                            &pool,
                            &id,
                            &worker,
                            epoch,
                            (&workflow, &name),
                            &error,
                        )
                        .await
                    })
                    .await
                {
                    Ok(Ok(true)) => Outcome::Done(ended),
                    // No longer this worker's claim: whoever holds it now records it.
                    Ok(Ok(false)) => Outcome::Release(Duration::ZERO),
                    Ok(Err(se)) | Err(se) => {
                        tracing::warn!("run {run_id}: recording its failure failed: {se}");
                        Outcome::Ended(ended)
                    }
                };
            }
        }
        let cancel_now = {
            let mut held = guard(&self.held);
            match held.get_mut(run_id) {
                Some(h) => {
                    h.started = true;
                    // A cancel asked before it started here (seen by the control loop or a
                    // heartbeat while it was starting) is passed on now.
                    let cancel = (claim.cancel_requested || h.cancel_seen) && h.take_cancel();
                    h.lost || cancel
                }
                None => false,
            }
        };
        if cancel_now {
            let _ = self.local.cancel(run_id, CancelReason::Requested);
        }
        match self.local.wait(run_id).await {
            // A run parked on a usage limit is `waiting` (as the recorder writes it), not
            // `failure`.
            Ok(result) => Outcome::Ended(Ended {
                status: awf_domain::projection::final_status(&result)
                    .as_str()
                    .to_owned(),
                exit_code: Some(i32::from(result.exit_code)),
                error_message: result.error.map(|e| e.message),
            }),
            Err(e) => Outcome::Ended(Ended {
                status: "failure".to_owned(),
                exit_code: Some(1),
                error_message: Some(e.message().to_owned()),
            }),
        }
    }
}

/// The line (tracing, `info`) saying how a claim ended here.
fn log_end(run_id: &RunId, workflow: &str, worker: &str, outcome: &Outcome) {
    match outcome {
        Outcome::Ended(e) | Outcome::Done(e) if e.status == "failure" => tracing::info!(
            run_id = %run_id,
            workflow,
            worker,
            "run {run_id} failed (exit {}): {}",
            e.exit_code.unwrap_or(1),
            e.error_message.as_deref().unwrap_or("no error message")
        ),
        Outcome::Ended(e) | Outcome::Done(e) => tracing::info!(
            run_id = %run_id,
            workflow,
            worker,
            "run {run_id} finished: {}",
            e.status
        ),
        Outcome::Release(_) => tracing::info!(
            run_id = %run_id,
            workflow,
            worker,
            "gave run {run_id} back to the queue"
        ),
        Outcome::AlreadyEnded(status) => tracing::info!(
            run_id = %run_id,
            workflow,
            worker,
            "run {run_id} had ended already ({status}): marked done, its record left as it is"
        ),
    }
}

/// What to do with a claim once its run is over here.
#[derive(Debug, Clone)]
enum Outcome {
    /// Mark it done with how it ended.
    Ended(Ended),
    /// Give it back to the queue after the delay.
    Release(Duration),
    /// Nothing to write: its end is recorded already (cancelled before it started).
    Done(Ended),
    /// Its record had ended already (this recorded status) when this claim came to run it:
    /// marked done in the queue only ([`queue::close_ended`]), its record left as it is.
    AlreadyEnded(String),
}

/// The status of a recorded run that has ended for good, which a claim must not run again:
/// completed, or failed with no resume of it queued (`None` otherwise: a queued resume of a
/// failed run continues it; a `cancelled` one is resumed or ended by the claim).
fn ended_for_good(status: StoredStatus, claim: &Claim) -> Option<String> {
    match status {
        StoredStatus::Success => Some(status.as_str().to_owned()),
        StoredStatus::Failure if claim.request.resume.is_none() => Some(status.as_str().to_owned()),
        _ => None,
    }
}

/// Whether a resume was refused because another process still holds or runs the run.
fn refused_as_live(e: &AwfError) -> bool {
    let m = e.message();
    m.contains("still running") || m.contains("lock") || m.contains("in use")
}

/// The environment of a worker's runs: this process's, as pairs.
pub fn env_pairs(env: &std::collections::BTreeMap<String, String>) -> Vec<(String, String)> {
    env.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}
