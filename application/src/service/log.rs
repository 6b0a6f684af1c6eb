//! One run's ordered, replayable event log and its subscriptions.
//!
//! The log numbers every envelope the run's publisher got (the root run's and its
//! sub-workflow runs') 1, 2, 3, … in arrival order: one cursor over the whole run tree (the
//! envelopes' own `seq` stays per run id). It keeps the newest events within a byte budget
//! (estimated by [`approx_size`]); older ones leave memory, and a subscriber that had not
//! read them yet is told so ([`SubscriptionItem::Lagged`]) and goes on from the oldest one
//! kept. Subscribers pull from the log with their own cursor, so appending never waits for
//! anyone: the engine's `emit` takes one short lock and returns.
//!
//! With `keep_unread` (the terminal: it must show everything), the events a subscription has
//! not read yet are kept for it whatever the budget, and everything is kept until the first
//! subscription arrives; such a subscriber never lags, and memory grows with its backlog
//! instead (what an unbounded channel did).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;

use awf_domain::event::EventEnvelope;
use awf_domain::event::RunEvent;
use awf_domain::ports::service::Subscription;
use awf_domain::ports::service::SubscriptionItem;
use tokio::sync::watch;

use crate::engine::lock;

/// Fixed cost counted per kept event: the envelope inline in the log's queue, with its size.
const ENVELOPE_OVERHEAD: usize =
    std::mem::size_of::<EventEnvelope>() + std::mem::size_of::<usize>();

/// Estimated bytes one event holds in memory: [`ENVELOPE_OVERHEAD`], its run ids and path,
/// plus its boxed and text payloads (output chunks, agent text, log lines, the step and run
/// results with their outputs). Allocator overhead is not counted.
pub(crate) fn approx_size(env: &EventEnvelope) -> usize {
    let payload = match &env.event {
        RunEvent::OutputChunk { step, text, .. } => step.len() + text.as_bytes().len(),
        RunEvent::AgentMessageChunk { step, text } | RunEvent::AgentThoughtChunk { step, text } => {
            step.len() + text.len()
        }
        RunEvent::Log { message, .. } => message.len(),
        RunEvent::ToolCall { name, .. } => name.len(),
        RunEvent::ToolCallResult { output, .. } => output.len(),
        RunEvent::InteractionRequired { request } => {
            use awf_domain::interaction::RequestKind;
            std::mem::size_of::<awf_domain::interaction::InteractionRequest>()
                + match &request.kind {
                    RequestKind::ConversationTurn { prompt } => prompt.len(),
                    RequestKind::Approval { message, options } => {
                        message.len() + options.len() * 64
                    }
                    RequestKind::Breakpoint { preview, .. } => {
                        preview.command.as_ref().map_or(0, String::len) + preview.routes.len() * 64
                    }
                    RequestKind::MissingInput { input, .. } => {
                        input.name.len() + input.description.as_ref().map_or(0, String::len)
                    }
                }
        }
        RunEvent::StepFinished { state, .. } => {
            std::mem::size_of::<awf_domain::run::StepState>()
                + state.name.len()
                + state.output.len()
                + state.stderr.len()
        }
        RunEvent::RunFinished { result } => {
            std::mem::size_of::<awf_domain::run::RunResult>()
                + result
                    .states
                    .iter()
                    .map(|(k, s)| {
                        std::mem::size_of::<awf_domain::run::StateResult>()
                            + k.len()
                            + s.output.len()
                            + s.stderr.len()
                    })
                    .sum::<usize>()
        }
        _ => 0,
    };
    let ids = env.run_id.0.len() + env.parent_run_id.as_ref().map_or(0, |p| p.0.len());
    ENVELOPE_OVERHEAD + ids + env.path.len() + payload
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
    /// With `keep_unread`: the next position of each subscription, by subscription number.
    cursors: std::collections::HashMap<u64, u64>,
    /// Number of the next subscription.
    next_sub: u64,
    /// With `keep_unread`, until the first subscription: keep everything.
    hold_all: bool,
}

impl Inner {
    /// Drops the oldest events while over `budget` (never the newest one, nor one a
    /// `keep_unread` subscription has not read).
    fn trim(&mut self, budget: usize, keep_unread: bool) {
        let floor = if !keep_unread {
            u64::MAX
        } else if self.hold_all {
            1
        } else {
            self.cursors.values().copied().min().unwrap_or(u64::MAX)
        };
        while self.bytes > budget && self.events.len() > 1 && self.first < floor {
            if let Some((_, s)) = self.events.pop_front() {
                self.bytes -= s;
                self.first += 1;
            }
        }
    }
}

/// The event log of one run.
pub(crate) struct EventLog {
    inner: Mutex<Inner>,
    /// Bumped on every append and at the end; subscribers wait on it.
    tick: watch::Sender<u64>,
    /// Most estimated bytes kept (the newest event is always kept).
    budget: usize,
    /// Keep what subscriptions have not read (see the module doc).
    keep_unread: bool,
}

impl EventLog {
    /// An empty log keeping at most `budget` estimated bytes (and, with `keep_unread`,
    /// whatever its subscriptions have not read yet).
    pub(crate) fn new(budget: usize, keep_unread: bool) -> Self {
        Self {
            inner: Mutex::new(Inner {
                first: 1,
                events: VecDeque::new(),
                bytes: 0,
                ended: false,
                cursors: std::collections::HashMap::new(),
                next_sub: 0,
                hold_all: keep_unread,
            }),
            tick: watch::Sender::new(0),
            budget,
            keep_unread,
        }
    }

    /// A log that goes on from an earlier one: `first` is the position of `prior[0]`, and
    /// the next event appended gets the position after the last of `prior` (a resumed run's
    /// log continues its first attempt's, so a client that read up to position N reconnects
    /// with N and gets the resumed attempt's events; issue #2 of the `awf serve` trial).
    pub(crate) fn continuing(
        budget: usize,
        keep_unread: bool,
        first: u64,
        prior: Vec<EventEnvelope>,
    ) -> Self {
        let log = Self::new(budget, keep_unread);
        {
            let mut g = lock(&log.inner);
            g.first = first.max(1);
            for env in prior {
                let size = approx_size(&env);
                g.events.push_back((env, size));
                g.bytes += size;
            }
            g.trim(budget, keep_unread);
        }
        log
    }

    /// The position of the oldest kept event and the kept events, in order.
    pub(crate) fn kept(&self) -> (u64, Vec<EventEnvelope>) {
        let g = lock(&self.inner);
        (g.first, g.events.iter().map(|(e, _)| e.clone()).collect())
    }

    /// Appends one event; gives its position.
    #[cfg(test)]
    pub(crate) fn append(&self, env: EventEnvelope) -> u64 {
        self.append_all([env]);
        let g = lock(&self.inner);
        g.first + g.events.len() as u64 - 1
    }

    /// Appends events in order under one lock, waking the subscriptions once (a subscriber
    /// woken for a batch reads all of it before it waits again). Nothing to append wakes
    /// no one.
    pub(crate) fn append_all(&self, envs: impl IntoIterator<Item = EventEnvelope>) {
        let mut any = false;
        {
            let mut g = lock(&self.inner);
            for env in envs {
                let size = approx_size(&env);
                g.events.push_back((env, size));
                g.bytes += size;
                g.trim(self.budget, self.keep_unread);
                any = true;
            }
        }
        if any {
            self.tick.send_modify(|t| *t = t.wrapping_add(1));
        }
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
        let next = from.max(1);
        let id = {
            let mut g = lock(&self.inner);
            let id = g.next_sub;
            g.next_sub += 1;
            if self.keep_unread {
                g.cursors.insert(id, next);
                g.hold_all = false;
                g.trim(self.budget, true);
            }
            id
        };
        LogSubscription {
            log: Arc::clone(self),
            id,
            next,
            tick: self.tick.subscribe(),
        }
    }
}

/// A cursor into an [`EventLog`].
pub(crate) struct LogSubscription {
    log: Arc<EventLog>,
    /// Its number in the log's cursors.
    id: u64,
    next: u64,
    tick: watch::Receiver<u64>,
}

impl Drop for LogSubscription {
    fn drop(&mut self) {
        if self.log.keep_unread {
            let mut g = lock(&self.log.inner);
            g.cursors.remove(&self.id);
            g.trim(self.log.budget, true);
        }
    }
}

impl LogSubscription {
    /// What is available now: an item, the end (`Some(None)`), or nothing yet (`None`).
    fn poll_now(&mut self) -> Option<Option<SubscriptionItem>> {
        let mut g = lock(&self.log.inner);
        if self.log.keep_unread {
            // What was delivered before may go now.
            g.cursors.insert(self.id, self.next);
            g.trim(self.log.budget, true);
        }
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
    async fn a_batch_wakes_its_subscribers_once_and_all_of_it_is_read() {
        let log = Arc::new(EventLog::new(0, true));
        let mut sub = log.subscribe(1);
        let mut tick = log.tick.subscribe();
        let before = *tick.borrow_and_update();
        log.append_all((1..=5).map(|seq| chunk(seq, 10)));
        assert_eq!(
            *tick.borrow_and_update(),
            before.wrapping_add(1),
            "one wake-up"
        );
        log.append_all(std::iter::empty());
        assert!(!tick.has_changed().unwrap(), "nothing appended, no wake-up");
        for want in 1..=5 {
            assert_eq!(position(sub.next().await), want);
        }
    }

    #[tokio::test]
    async fn a_subscriber_behind_the_kept_window_is_told_and_goes_on_from_the_oldest_kept() {
        let one = approx_size(&chunk(1, 100));
        let log = Arc::new(EventLog::new(one * 3, false));
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
        let tiny = Arc::new(EventLog::new(1, false));
        tiny.append(chunk(1, 1000));
        assert_eq!(tiny.stats().1, 1);
    }

    #[tokio::test]
    async fn with_keep_unread_a_slow_subscriber_loses_nothing_and_read_events_go() {
        let one = approx_size(&chunk(1, 100));
        let log = Arc::new(EventLog::new(one * 2, true));
        // Before anyone subscribes, everything is kept.
        for seq in 1..=5 {
            log.append(chunk(seq, 100));
        }
        assert_eq!(log.stats(), (1, 5, one * 5));
        let mut slow = log.subscribe(1);
        for seq in 6..=10 {
            log.append(chunk(seq, 100));
        }
        assert_eq!(log.stats().1, 10, "all unread events are kept");
        for want in 1..=8 {
            assert_eq!(position(slow.next().await), want);
        }
        // Read ones leave, down to the budget.
        assert_eq!(log.stats().0, 8);
        assert_eq!(log.stats().1, 3);
        drop(slow);
        assert_eq!(log.stats().1, 2, "back to the budget once nobody reads");
    }
}
