//! One run's ordered, replayable event log and its subscriptions.
//!
//! The log numbers every envelope the run's publisher got (the root run's and its
//! sub-workflow runs') 1, 2, 3, … in arrival order: one cursor over the whole run tree (the
//! envelopes' own `seq` stays per run id). It keeps the newest events within a byte budget
//! (estimated by [`approx_size`]); older ones leave memory, and a subscriber that had not
//! read them yet is told so ([`SubscriptionItem::Lagged`]) and goes on from the oldest one
//! kept. Subscribers pull from the log with their own cursor, so appending never waits for
//! anyone: the engine's `emit` takes one short lock and returns.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;

use awf_domain::event::EventEnvelope;
use awf_domain::event::RunEvent;
use awf_domain::ports::service::Subscription;
use awf_domain::ports::service::SubscriptionItem;
use tokio::sync::watch;

use crate::engine::lock;

/// Fixed cost counted per event (the envelope, its run ids, time and path), in bytes.
const ENVELOPE_OVERHEAD: usize = 160;

/// Estimated bytes one event holds in memory: [`ENVELOPE_OVERHEAD`] plus its text payloads
/// (output chunks, agent text, log lines, the outputs recorded in step and run results).
pub(crate) fn approx_size(env: &EventEnvelope) -> usize {
    let payload = match &env.event {
        RunEvent::OutputChunk { step, text, .. } => step.len() + text.as_bytes().len(),
        RunEvent::AgentMessageChunk { step, text } | RunEvent::AgentThoughtChunk { step, text } => {
            step.len() + text.len()
        }
        RunEvent::Log { message, .. } => message.len(),
        RunEvent::ToolCall { name, .. } => name.len(),
        RunEvent::ToolCallResult { output, .. } => output.len(),
        RunEvent::InputRequired { prompt, .. } => prompt.len(),
        RunEvent::StepFinished { state, .. } => {
            state.name.len() + state.output.len() + state.stderr.len()
        }
        RunEvent::RunFinished { result } => result
            .states
            .iter()
            .map(|(k, s)| k.len() + s.output.len() + s.stderr.len())
            .sum(),
        _ => 0,
    };
    ENVELOPE_OVERHEAD + env.path.len() + payload
}

struct Inner {
    /// Position of `events[0]`.
    first: u64,
    /// Kept events with their estimated size.
    events: VecDeque<(EventEnvelope, usize)>,
    /// Sum of the kept sizes.
    bytes: usize,
    /// No event follows.
    ended: bool,
}

/// The event log of one run.
pub(crate) struct EventLog {
    inner: Mutex<Inner>,
    /// Bumped on every append and at the end; subscribers wait on it.
    tick: watch::Sender<u64>,
    /// Most estimated bytes kept (the newest event is always kept).
    budget: usize,
}

impl EventLog {
    /// An empty log keeping at most `budget` estimated bytes.
    pub(crate) fn new(budget: usize) -> Self {
        Self {
            inner: Mutex::new(Inner {
                first: 1,
                events: VecDeque::new(),
                bytes: 0,
                ended: false,
            }),
            tick: watch::Sender::new(0),
            budget,
        }
    }

    /// Appends one event; gives its position.
    pub(crate) fn append(&self, env: EventEnvelope) -> u64 {
        let size = approx_size(&env);
        let pos = {
            let mut g = lock(&self.inner);
            g.events.push_back((env, size));
            g.bytes += size;
            while g.bytes > self.budget && g.events.len() > 1 {
                if let Some((_, s)) = g.events.pop_front() {
                    g.bytes -= s;
                    g.first += 1;
                }
            }
            g.first + g.events.len() as u64 - 1
        };
        self.tick.send_modify(|t| *t = t.wrapping_add(1));
        pos
    }

    /// Marks the end: subscriptions end once they delivered the last event.
    pub(crate) fn end(&self) {
        lock(&self.inner).ended = true;
        self.tick.send_modify(|t| *t = t.wrapping_add(1));
    }

    /// (first kept position, events kept, estimated bytes kept).
    pub(crate) fn stats(&self) -> (u64, usize, usize) {
        let g = lock(&self.inner);
        (g.first, g.events.len(), g.bytes)
    }

    /// A subscription from position `from` (0 is taken as 1).
    pub(crate) fn subscribe(self: &Arc<Self>, from: u64) -> LogSubscription {
        LogSubscription {
            log: Arc::clone(self),
            next: from.max(1),
            tick: self.tick.subscribe(),
        }
    }
}

/// A cursor into an [`EventLog`].
pub(crate) struct LogSubscription {
    log: Arc<EventLog>,
    next: u64,
    tick: watch::Receiver<u64>,
}

impl LogSubscription {
    /// What is available now: an item, the end (`Some(None)`), or nothing yet (`None`).
    fn poll_now(&mut self) -> Option<Option<SubscriptionItem>> {
        let g = lock(&self.log.inner);
        if self.next < g.first {
            self.next = g.first;
            return Some(Some(SubscriptionItem::Lagged {
                resume_seq: g.first,
            }));
        }
        let idx = usize::try_from(self.next - g.first).unwrap_or(usize::MAX);
        if let Some((env, _)) = g.events.get(idx) {
            let position = self.next;
            self.next += 1;
            return Some(Some(SubscriptionItem::Event {
                position,
                envelope: Box::new(env.clone()),
            }));
        }
        g.ended.then_some(None)
    }
}

#[async_trait::async_trait]
impl Subscription for LogSubscription {
    async fn next(&mut self) -> Option<SubscriptionItem> {
        loop {
            // Seen before looking, so an append after the look wakes the wait below.
            let _ = *self.tick.borrow_and_update();
            if let Some(item) = self.poll_now() {
                return item;
            }
            if self.tick.changed().await.is_err() {
                // The log is gone (cannot happen while this holds it): nothing more comes.
                return self.poll_now().flatten();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use awf_domain::event::OutputStream;
    use awf_domain::run::RunId;

    fn chunk(seq: u64, bytes: usize) -> EventEnvelope {
        EventEnvelope {
            seq,
            run_id: RunId("r".into()),
            parent_run_id: None,
            at: std::time::SystemTime::UNIX_EPOCH,
            path: "s".into(),
            iteration: None,
            event: RunEvent::OutputChunk {
                step: "s".into(),
                stream: OutputStream::Stdout,
                text: vec![b'x'; bytes].into(),
            },
        }
    }

    fn position(item: Option<SubscriptionItem>) -> u64 {
        match item {
            Some(SubscriptionItem::Event { position, .. }) => position,
            other => panic!("expected an event, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_subscriber_behind_the_kept_window_is_told_and_goes_on_from_the_oldest_kept() {
        let one = approx_size(&chunk(1, 100));
        let log = Arc::new(EventLog::new(one * 3));
        assert_eq!(log.append(chunk(1, 100)), 1);
        let mut early = log.subscribe(1);
        assert_eq!(position(early.next().await), 1);
        for seq in 2..=6 {
            assert_eq!(log.append(chunk(seq, 100)), seq);
        }
        assert_eq!(log.stats().0, 4);
        assert_eq!(log.stats().1, 3, "only three events fit the budget");
        assert_eq!(
            early.next().await,
            Some(SubscriptionItem::Lagged { resume_seq: 4 })
        );
        assert_eq!(position(early.next().await), 4);
        assert_eq!(position(early.next().await), 5);
        assert_eq!(position(early.next().await), 6);
        log.end();
        assert_eq!(early.next().await, None);
        // The newest event is kept even when it alone is over the budget.
        let tiny = Arc::new(EventLog::new(1));
        tiny.append(chunk(1, 1000));
        assert_eq!(tiny.stats().1, 1);
    }
}
