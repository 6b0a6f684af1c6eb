//! The store writer's inbox: a queue the run's threads push events into, and a bell that
//! wakes the writer thread only when it has to.
//!
//! A channel wakes its receiver at every message that finds it waiting: the writer woke
//! about 1.25 times per step of a chain of short steps (a step's `step.completed` and the
//! next step's `step.started` often in two batches), and each wake-up is a batch written
//! (a transcript write, a journal line). Here, once the writer has written a batch it waits
//! [`HOLD`] for more events without being woken by the common ones (steps starting and
//! finishing, output, messages): the events of that window are written as one batch. A
//! writer that found nothing in its window waits without a limit, and the next event wakes
//! it at once. Some events always ring (the run's start and end, questions to the user,
//! flushes), and so does a step's start right after a batch that ended with a step's end,
//! so that a step is never recorded as finished without its successor for longer than it
//! takes to write (a run killed then resumes from the step it was in, not from the one
//! before). Every event is written within [`HOLD`] of its arrival, plus the writer's own
//! time, as before within the writer's scheduling delay.

use std::sync::Condvar;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::sync::PoisonError;
use std::time::Duration;
use std::time::Instant;

/// How long a writer that has just written a batch collects events before writing again.
pub(crate) const HOLD: Duration = Duration::from_millis(2);

/// Queued messages that ring the bell whatever they are (bounds the memory held).
const RING_AT: usize = 256;

/// What an event asks of the bell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Urgency {
    /// Wake the writer now (flush, run start and end, questions).
    Now,
    /// A step started: now if the writer's last batch ended with a step's end.
    StepStart,
    /// Within [`HOLD`].
    Soon,
}

#[derive(Debug)]
struct State<T> {
    msgs: Vec<T>,
    /// A queued message asked for the writer now.
    rung: bool,
    /// How the writer is waiting: `None` busy, `Some(true)` for [`HOLD`] after a batch,
    /// `Some(false)` without a limit.
    waiting: Option<bool>,
    /// The writer's last batch ended with a step's end.
    after_step_end: bool,
    /// A step's start is queued.
    step_start_queued: bool,
    closed: bool,
}

/// A queue with a bell (see the module docs).
#[derive(Debug)]
pub(crate) struct Inbox<T> {
    state: Mutex<State<T>>,
    bell: Condvar,
    /// The writer's window after a batch ([`HOLD`]).
    hold: Duration,
}

/// What [`Inbox::take`] returns.
pub(crate) struct Batch<T> {
    /// The messages, oldest first (empty when the wait ended with nothing queued).
    pub(crate) msgs: Vec<T>,
    /// The inbox was closed: no more messages will come after these.
    pub(crate) closed: bool,
}

impl<T> Inbox<T> {
    /// An empty, open inbox.
    pub(crate) fn new() -> Self {
        Self::with_hold(HOLD)
    }

    /// An empty, open inbox whose writer collects events for `hold` after a batch.
    fn with_hold(hold: Duration) -> Self {
        Self {
            hold,
            state: Mutex::new(State {
                msgs: Vec::new(),
                rung: false,
                waiting: None,
                after_step_end: false,
                step_start_queued: false,
                closed: false,
            }),
            bell: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `msg`; wakes the writer if `urgency` (or the writer's state) asks for it.
    /// Returns `false` (and drops `msg`) once the inbox is closed.
    pub(crate) fn push(&self, msg: T, urgency: Urgency) -> bool {
        let mut s = self.lock();
        if s.closed {
            return false;
        }
        s.msgs.push(msg);
        let now = match urgency {
            Urgency::Now => true,
            Urgency::StepStart => {
                s.step_start_queued = true;
                s.after_step_end
            }
            Urgency::Soon => false,
        };
        if now || s.msgs.len() >= RING_AT {
            s.rung = true;
        }
        // A writer waiting without a limit is woken by anything; one in its window only by
        // what rang.
        let wake = match s.waiting {
            Some(false) => true,
            Some(true) => s.rung,
            None => false,
        };
        if wake {
            s.waiting = None;
        }
        drop(s);
        if wake {
            self.bell.notify_one();
        }
        true
    }

    /// Whether a queued message asked for the writer now (the next [`Inbox::take`] returns
    /// at once): a run waiting for its record (a `Written` ack), a run's start or end, a
    /// flush. The writer puts off work no one waits for (history rows) while this holds.
    pub(crate) fn rung(&self) -> bool {
        let s = self.lock();
        s.rung || s.closed
    }

    /// Closes the inbox: the writer takes what is queued and stops.
    pub(crate) fn close(&self) {
        let mut s = self.lock();
        s.closed = true;
        s.waiting = None;
        drop(s);
        self.bell.notify_one();
    }

    /// The writer's side: waits for the next batch. `held` says the writer has just written
    /// a batch (it collects events for [`HOLD`] first), `after_step_end` that the batch ended
    /// with a step's end, `until` a time to return by in any case (a journal to sync).
    pub(crate) fn take(
        &self,
        held: bool,
        after_step_end: bool,
        until: Option<Instant>,
    ) -> Batch<T> {
        let mut s = self.lock();
        s.after_step_end = after_step_end;
        if after_step_end && s.step_start_queued {
            s.rung = true;
        }
        let window = held.then(|| Instant::now() + self.hold);
        let deadline = match (window, until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        loop {
            if s.closed || s.rung {
                break;
            }
            if !held && !s.msgs.is_empty() {
                break;
            }
            let timed = window.is_some();
            s.waiting = Some(timed);
            match deadline {
                None => s = self.bell.wait(s).unwrap_or_else(PoisonError::into_inner),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    s = self
                        .bell
                        .wait_timeout(s, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
        }
        s.waiting = None;
        s.rung = false;
        s.after_step_end = false;
        s.step_start_queued = false;
        Batch {
            msgs: std::mem::take(&mut s.msgs),
            closed: s.closed,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use super::*;

    /// Spins until `inbox`'s writer waits as `how` (hang guard of 30 s).
    fn until_waiting(inbox: &Inbox<i32>, how: bool) {
        let t0 = Instant::now();
        while inbox.lock().waiting != Some(how) {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the writer never waited as {how}"
            );
            std::thread::yield_now();
        }
    }

    #[test]
    fn an_idle_writer_is_woken_by_anything_and_a_holding_one_collects() {
        // A window no loaded machine outlasts: with the real one (milliseconds) a test
        // thread that was not scheduled in time found the writer past its window and spun
        // for ever (a CI run hung on it).
        let inbox = Arc::new(Inbox::with_hold(Duration::from_secs(3600)));
        let writer = {
            let inbox = Arc::clone(&inbox);
            std::thread::spawn(move || {
                let mut batches = Vec::new();
                let mut held = false;
                loop {
                    let b = inbox.take(held, false, None);
                    held = !b.msgs.is_empty();
                    if !b.msgs.is_empty() {
                        batches.push(b.msgs);
                    }
                    if b.closed {
                        return batches;
                    }
                }
            })
        };
        // Wait until the writer waits without a limit.
        until_waiting(&inbox, false);
        assert!(inbox.push(1, Urgency::Soon));
        // The idle writer took it at once and now holds for more: these three come together.
        until_waiting(&inbox, true);
        for i in 2..5 {
            assert!(inbox.push(i, Urgency::Soon));
        }
        inbox.close();
        assert!(!inbox.push(9, Urgency::Now));
        let batches = writer.join().unwrap();
        assert_eq!(batches, vec![vec![1], vec![2, 3, 4]]);
    }

    /// Waits (hang guard of 30 s) for `h` to finish and returns its result.
    fn join<T>(h: std::thread::JoinHandle<T>) -> T {
        let t0 = Instant::now();
        while !h.is_finished() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the writer was never woken"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        h.join().unwrap()
    }

    /// With an endless window, only a ring ends the writer's wait: a step's start rings
    /// after a batch that ended with a step's end (queued before or during the wait), and
    /// an urgent message always does; common ones wait.
    #[test]
    fn a_step_start_rings_after_a_step_end_and_urgent_messages_always_ring() {
        let inbox: Arc<Inbox<u32>> = Arc::new(Inbox::with_hold(Duration::from_secs(3600)));
        let take = |after_step_end: bool| {
            let inbox = Arc::clone(&inbox);
            std::thread::spawn(move || inbox.take(true, after_step_end, None).msgs)
        };
        let wait_holding = || {
            while inbox.lock().waiting != Some(true) {
                std::thread::yield_now();
            }
        };
        // Queued before the wait.
        inbox.push(1, Urgency::Soon);
        inbox.push(2, Urgency::StepStart);
        assert_eq!(join(take(true)), vec![1, 2]);
        // Arriving during it.
        let w = take(true);
        wait_holding();
        inbox.push(3, Urgency::Soon);
        inbox.push(4, Urgency::StepStart);
        assert_eq!(join(w), vec![3, 4]);
        // Without a step's end before, a step's start waits; an urgent message rings.
        let w = take(false);
        wait_holding();
        inbox.push(5, Urgency::StepStart);
        inbox.push(6, Urgency::Soon);
        assert!(!w.is_finished());
        inbox.push(7, Urgency::Now);
        assert_eq!(join(w), vec![5, 6, 7]);
    }
}
