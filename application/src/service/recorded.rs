//! Subscriptions to what the store recorded of a run: the log of a run this process does not
//! hold (evicted after its TTL, run by another awf process, or from before a restart), read
//! back through [`EventLogReader`] and, while another live process runs it, followed as its
//! record grows; and the earlier attempts of a resumed run, chained before its live log.
//!
//! Positions are the read-back log's, which numbers envelopes as the live log does (see
//! [`awf_domain::ports::store::RecordedLog`]), so a client that read up to position N live
//! can go on from N + 1 after the run left memory.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::event::EventEnvelope;
use awf_domain::ports::EventLogReader;
use awf_domain::ports::Host;
use awf_domain::ports::StateStore;
use awf_domain::ports::service::Subscription;
use awf_domain::ports::service::SubscriptionItem;
use awf_domain::ports::store::RecordedLog;
use awf_domain::ports::store::StoredStatus;
use awf_domain::run::RunId;

use crate::Services;

/// First wait between two reads of a followed record; doubled while nothing new came.
const POLL_MIN: Duration = Duration::from_millis(50);
/// Longest wait between two reads of a followed record.
const POLL_MAX: Duration = Duration::from_millis(500);

/// Who can tell whether a run is still running in another process.
#[derive(Clone)]
pub(crate) struct Liveness {
    store: Arc<dyn StateStore>,
    host: Arc<dyn Host>,
}

impl Liveness {
    /// Whether `run_id`'s state says `running` and its owner, another process, is alive.
    fn alive(&self, run_id: &RunId) -> bool {
        self.store.load(&run_id.0).is_ok_and(|s| {
            s.status == StoredStatus::Running
                && s.owner_pid
                    .is_some_and(|p| p != self.host.pid() && self.host.process_alive(p))
        })
    }
}

/// How to tell whether `run_id` is live in another process: `None` when it is not (no state
/// store, no state file, not running, its owner gone); then its record is final.
///
/// # Errors
/// The state store's error when the run's state file exists but cannot be read
/// (`SYSTEM.IO.READ_FAILED`), as `get` reports it.
pub(crate) fn live_elsewhere(
    services: &Services,
    run_id: &RunId,
) -> Result<Option<Liveness>, AwfError> {
    let Some(store) = services.state_store.as_ref() else {
        return Ok(None);
    };
    match store.load(&run_id.0) {
        Ok(_) => {}
        Err(e) if e.code() == ErrorCode::UserInputValidationFailed => return Ok(None),
        Err(e) => return Err(e),
    }
    let l = Liveness {
        store: Arc::clone(store),
        host: Arc::clone(&services.host),
    };
    Ok(l.alive(run_id).then_some(l))
}

/// A recorded run's log: replayed from a position, then followed while its owner lives.
pub(crate) struct Recorded {
    reader: Arc<dyn EventLogReader>,
    run_id: RunId,
    /// Read, not delivered yet; the first is at `next`.
    buffer: VecDeque<EventEnvelope>,
    next: u64,
    /// The root's `RunFinished` was read.
    complete: bool,
    /// Set while the run is live in another process.
    live: Option<Liveness>,
    wait: Duration,
}

impl Recorded {
    /// A subscription from position `from` over `log` (read from `from`).
    pub(crate) fn new(
        reader: Arc<dyn EventLogReader>,
        run_id: RunId,
        from: u64,
        log: RecordedLog,
        live: Option<Liveness>,
    ) -> Self {
        Self {
            reader,
            run_id,
            buffer: log.envelopes.into(),
            next: from.max(1),
            complete: log.complete,
            live,
            wait: POLL_MIN,
        }
    }

    /// Reads what was recorded from `next` on; whether anything new came.
    async fn read_more(&mut self) -> bool {
        let reader = Arc::clone(&self.reader);
        let run_id = self.run_id.clone();
        let from = self.next;
        let read = tokio::task::spawn_blocking(move || reader.read_log(&run_id, from)).await;
        let Ok(Ok(Some(log))) = read else {
            return false;
        };
        self.complete = log.complete;
        let new = !log.envelopes.is_empty();
        self.buffer = log.envelopes.into();
        new
    }
}

#[async_trait::async_trait]
impl Subscription for Recorded {
    async fn next(&mut self) -> Option<SubscriptionItem> {
        loop {
            if let Some(env) = self.buffer.pop_front() {
                let position = self.next;
                self.next += 1;
                return Some(SubscriptionItem::Event {
                    position,
                    envelope: Box::new(env),
                });
            }
            if self.complete {
                return None;
            }
            let live = self.live.clone()?;
            tokio::time::sleep(self.wait).await;
            // Asked before reading: a run that ended in between has its end read next.
            let still = live.alive(&self.run_id);
            if self.read_more().await {
                self.wait = POLL_MIN;
            } else {
                self.wait = (self.wait * 2).min(POLL_MAX);
            }
            if !still {
                // Its owner is gone: what it recorded is all there is.
                self.live = None;
            }
        }
    }
}

/// The earlier attempts of a resumed run (read back) followed by its live log.
pub(crate) struct Chained<S> {
    recorded: VecDeque<EventEnvelope>,
    next: u64,
    /// The live log's subscription, from the position after the recorded ones.
    live: S,
}

impl<S> Chained<S> {
    /// `recorded` read from position `from`; the ones past `last_recorded` are dropped (the
    /// live log has them).
    pub(crate) fn new(
        mut recorded: Vec<EventEnvelope>,
        from: u64,
        last_recorded: u64,
        live: S,
    ) -> Self {
        let keep = usize::try_from(last_recorded.saturating_sub(from) + 1).unwrap_or(usize::MAX);
        recorded.truncate(keep);
        Self {
            recorded: recorded.into(),
            next: from.max(1),
            live,
        }
    }
}

#[async_trait::async_trait]
impl<S: Subscription> Subscription for Chained<S> {
    async fn next(&mut self) -> Option<SubscriptionItem> {
        if let Some(env) = self.recorded.pop_front() {
            let position = self.next;
            self.next += 1;
            return Some(SubscriptionItem::Event {
                position,
                envelope: Box::new(env),
            });
        }
        self.live.next().await
    }
}

/// Most estimated bytes of a gap read back at once (see [`Filled`]); the rest of the gap is
/// read again after those were delivered.
const FILL_BATCH_BYTES: usize = 8 << 20;
/// How long [`Filled`] waits for the store to hold a gap's events (its recorders write
/// behind the in-memory log) before it gives up and passes the lag on.
const FILL_PATIENCE: Duration = Duration::from_secs(30);

/// An in-memory log's subscription whose gaps are filled from the store: where the log
/// had dropped events before the subscriber read them ([`SubscriptionItem::Lagged`]), the
/// events are read back from the run's record (its transcript) and delivered at their
/// positions, so the subscriber gets every event with no gap. Memory stays bounded: a gap is
/// read back [`FILL_BATCH_BYTES`] at a time. Only when the store does not hold them (nothing
/// recorded, `AWF_RECORD=off`, or not written within [`FILL_PATIENCE`]) is the lag passed on.
pub(crate) struct Filled<S> {
    inner: S,
    reader: Option<Arc<dyn EventLogReader>>,
    run_id: RunId,
    /// The next position the subscriber expects.
    next: u64,
    /// Read back, not delivered yet; the first is at `next`.
    buffer: VecDeque<EventEnvelope>,
    /// The inner subscription goes on from here: positions `next..resume` are a gap to fill.
    resume: Option<u64>,
}

impl<S> Filled<S> {
    /// `inner` subscribed from position `from`.
    pub(crate) fn new(
        inner: S,
        reader: Option<Arc<dyn EventLogReader>>,
        run_id: RunId,
        from: u64,
    ) -> Self {
        Self {
            inner,
            reader,
            run_id,
            next: from.max(1),
            buffer: VecDeque::new(),
            resume: None,
        }
    }

    /// Reads back the next part of the gap `next..resume` (at most [`FILL_BATCH_BYTES`]),
    /// waiting while the store does not hold its first event yet; whether anything came.
    async fn fill(&mut self, resume: u64) -> bool {
        let Some(reader) = self.reader.clone() else {
            return false;
        };
        // Patience counted in the time slept (no clock read: the application layer reads
        // time through the Clock port only).
        let mut waited = Duration::ZERO;
        let mut wait = POLL_MIN;
        loop {
            let run_id = self.run_id.clone();
            let from = self.next;
            let r = Arc::clone(&reader);
            let read = tokio::task::spawn_blocking(move || r.read_log(&run_id, from)).await;
            if let Ok(Ok(Some(log))) = read {
                let want = usize::try_from(resume.saturating_sub(self.next)).unwrap_or(usize::MAX);
                let mut bytes = 0;
                for env in log.envelopes.into_iter().take(want) {
                    bytes += super::log::approx_size(&env);
                    self.buffer.push_back(env);
                    if bytes >= FILL_BATCH_BYTES {
                        break;
                    }
                }
                if !self.buffer.is_empty() {
                    return true;
                }
                // Recorded, but not that far yet: the recorders write behind the log.
            } else {
                // Nothing recorded (recording off) or unreadable: passed on as a lag.
                return false;
            }
            if waited >= FILL_PATIENCE {
                return false;
            }
            tokio::time::sleep(wait).await;
            waited += wait;
            wait = (wait * 2).min(POLL_MAX);
        }
    }
}

#[async_trait::async_trait]
impl<S: Subscription> Subscription for Filled<S> {
    async fn next(&mut self) -> Option<SubscriptionItem> {
        loop {
            if let Some(env) = self.buffer.pop_front() {
                let position = self.next;
                self.next += 1;
                return Some(SubscriptionItem::Event {
                    position,
                    envelope: Box::new(env),
                });
            }
            if let Some(resume) = self.resume {
                if self.next < resume && self.fill(resume).await {
                    continue;
                }
                self.resume = None;
                if self.next < resume {
                    // Not in the store: the gap stays, said as such.
                    self.next = resume;
                    return Some(SubscriptionItem::Lagged { resume_seq: resume });
                }
            }
            match self.inner.next().await? {
                SubscriptionItem::Event { position, envelope } => {
                    self.next = position + 1;
                    return Some(SubscriptionItem::Event { position, envelope });
                }
                SubscriptionItem::Lagged { resume_seq } => {
                    self.resume = Some(resume_seq);
                }
            }
        }
    }
}
