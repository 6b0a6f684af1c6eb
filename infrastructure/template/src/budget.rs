//! What one evaluation (an expression, a template render) may spend: time, a stop request
//! (its run was cancelled), and memory, as the estimated size of the values awf's own code
//! creates during it (the results of expression functions, ranges, the pieces of `split`, the
//! texts of `repeat` and `replace`, and what template functions hand back). What a predicate
//! call creates counts while the call runs; once it returns, only what its caller keeps (a
//! `map`'s items, a `reduce`'s accumulator, a `filter`'s kept items, `groupBy`'s keys) goes
//! on counting, so the count follows the values alive rather than every value ever made.
//!
//! The budget of the evaluation running on a thread sits in a thread-local for its duration
//! ([`enter`]): expr-lang and gtmpl-ng call awf's functions through plain function values, with
//! no room for a context argument. Between two of its checks ([`check`], [`charge`]) an
//! evaluation does work bounded by the size of the values it holds, which the size budget bounds.
//!
//! Source: trial finding h4 (a slow `when:` ran for minutes and could not be cancelled; a
//! `split` of a 5 MB output took 661 MB, nested `repeat`s tried 10 GB).

use std::cell::RefCell;
use std::time::Duration;
use std::time::Instant;

use awf_domain::ports::template::HINT_SEPARATOR;
use awf_domain::ports::template::StopCheck;
use awf_domain::ports::template::TemplateError;

/// How long one expression evaluation or template render may run.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// Estimated bytes of values one evaluation may create (256 MiB).
pub const MAX_VALUE_BYTES: usize = 256 * 1024 * 1024;

/// Deepest nesting of a value an expression function or predicate may hand back (as
/// gtmpl-ng's cap on template values).
pub const MAX_VALUE_DEPTH: usize = 128;

/// The budget of the evaluation in progress on this thread.
struct Budget {
    started: Instant,
    deadline: Duration,
    stop: Option<StopCheck>,
    used: usize,
    limit: usize,
}

thread_local! {
    static CURRENT: RefCell<Option<Budget>> = const { RefCell::new(None) };
}

/// Why an evaluation was ended before its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exceeded {
    /// Its run was cancelled.
    Stopped,
    /// It ran past [`DEADLINE`].
    Deadline(Duration),
    /// It would create more than this many bytes of values.
    Size(usize),
    /// It would make a value nested deeper than this (cloning, comparing and dropping such a
    /// value recurse once per level and would overflow the stack).
    Depth(usize),
}

impl std::fmt::Display for Exceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Stopped => f.write_str("stopped: the run is being cancelled"),
            Self::Deadline(d) => write!(
                f,
                "did not finish within {}s (the evaluation was stopped){HINT_SEPARATOR}an expression or template must do its work in seconds: compute large or slow results in a shell step and read its output",
                d.as_secs()
            ),
            Self::Depth(limit) => write!(
                f,
                "would make a value nested more than {limit} levels deep (the evaluation was stopped){HINT_SEPARATOR}build nested data in a shell step (`jq`) and read its output"
            ),
            Self::Size(limit) => write!(
                f,
                "would create more than {} MiB of values (the evaluation was stopped){HINT_SEPARATOR}split, repeat, map and ranges over large data multiply it in memory: filter or count it in a shell step (`grep -c`, `wc -l`, `jq`) and read that step's output",
                limit / (1024 * 1024)
            ),
        }
    }
}

impl Exceeded {
    /// `self` as a [`TemplateError`], after `what` (`expression "…"`, `template`).
    pub(crate) fn error(self, what: &str) -> TemplateError {
        TemplateError::Failed(format!("{what} {self}"))
    }

    /// Finds the reason a function's error text carries ([`Self::marker`] at its start), so
    /// that the evaluator reports it whole (with its hint) rather than as a function's failure.
    pub(crate) fn in_text(text: &str) -> Option<Self> {
        let at = text.find(MARK)?;
        let rest = &text[at + MARK.len()..];
        let which = rest.split(']').next()?;
        match which {
            "stop" => Some(Self::Stopped),
            "time" => Some(Self::Deadline(DEADLINE)),
            "size" => {
                Some(Self::Size(CURRENT.with(|c| {
                    c.borrow().as_ref().map_or(MAX_VALUE_BYTES, |b| b.limit)
                })))
            }
            "depth" => Some(Self::Depth(MAX_VALUE_DEPTH)),
            _ => None,
        }
    }

    /// The text a function's error carries for this reason (see [`Self::in_text`]).
    pub(crate) fn marker(self) -> String {
        let which = match self {
            Self::Stopped => "stop",
            Self::Deadline(_) => "time",
            Self::Size(_) => "size",
            Self::Depth(_) => "depth",
        };
        format!("{MARK}{which}] {}", self.short())
    }

    /// One line, without the hint.
    fn short(self) -> String {
        let full = self.to_string();
        full.split(HINT_SEPARATOR)
            .next()
            .unwrap_or(&full)
            .to_owned()
    }
}

/// Starts the marker of a budget error inside a function's error text.
const MARK: &str = "[awf budget: ";

/// Restores the previous budget (usually none) when dropped.
pub(crate) struct Entered {
    previous: Option<Budget>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// Gives the evaluation about to run on this thread a fresh budget: [`DEADLINE`] from now,
/// [`MAX_VALUE_BYTES`], and `stop`.
pub(crate) fn enter(stop: Option<StopCheck>) -> Entered {
    enter_with(stop, DEADLINE, MAX_VALUE_BYTES)
}

/// [`enter`] with other bounds (tests).
pub(crate) fn enter_with(stop: Option<StopCheck>, deadline: Duration, limit: usize) -> Entered {
    let budget = Budget {
        started: Instant::now(),
        deadline,
        stop,
        used: 0,
        limit,
    };
    let previous = CURRENT.with(|c| c.borrow_mut().replace(budget));
    Entered { previous }
}

/// Whether the evaluation may go on: not stopped, within its deadline. Always when no
/// budget is entered.
pub(crate) fn check() -> Result<(), Exceeded> {
    CURRENT.with(|c| {
        let c = c.borrow();
        let Some(b) = c.as_ref() else {
            return Ok(());
        };
        if b.stop.as_ref().is_some_and(|s| s()) {
            return Err(Exceeded::Stopped);
        }
        if b.started.elapsed() > b.deadline {
            return Err(Exceeded::Deadline(b.deadline));
        }
        Ok(())
    })
}

/// Counts `bytes` more of created values against the budget, then [`check`]s.
pub(crate) fn charge(bytes: usize) -> Result<(), Exceeded> {
    CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        let Some(b) = c.as_mut() else {
            return Ok(());
        };
        b.used = b.used.saturating_add(bytes);
        if b.used > b.limit {
            return Err(Exceeded::Size(b.limit));
        }
        Ok(())
    })?;
    check()
}

/// The bytes counted so far (see [`release_to`]).
pub(crate) fn used() -> usize {
    CURRENT.with(|c| c.borrow().as_ref().map_or(0, |b| b.used))
}

/// Takes the count back to `mark` (an earlier [`used`]): the values counted since are gone
/// (a predicate's temporaries, dropped when its call returned; an accumulator replaced).
pub(crate) fn release_to(mark: usize) {
    CURRENT.with(|c| {
        if let Some(b) = c.borrow_mut().as_mut() {
            b.used = b.used.min(mark);
        }
    });
}

/// Whether `bytes` more would still be within the size budget (nothing is counted): a
/// function asks before it allocates.
pub(crate) fn affords(bytes: usize) -> Result<(), Exceeded> {
    CURRENT.with(|c| {
        let c = c.borrow();
        match c.as_ref() {
            Some(b) if b.used.saturating_add(bytes) > b.limit => Err(Exceeded::Size(b.limit)),
            _ => Ok(()),
        }
    })
}

/// Estimated heap bytes of a string of `len` bytes (the allocator rounds small blocks up).
pub(crate) fn string_bytes(len: usize) -> usize {
    if len == 0 { 0 } else { len.max(16) + 16 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use std::sync::atomic::Ordering;

    #[test]
    fn a_budget_counts_and_stops() {
        let flag = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&flag);
        let stop: StopCheck = Arc::new(move || seen.load(Ordering::Relaxed));
        {
            let _b = enter_with(Some(stop), Duration::from_secs(60), 100);
            assert_eq!(charge(60), Ok(()));
            assert_eq!(affords(40), Ok(()));
            assert_eq!(affords(41), Err(Exceeded::Size(100)));
            assert_eq!(charge(41), Err(Exceeded::Size(100)));
        }
        {
            let _b = enter_with(None, Duration::from_secs(60), 100);
            assert_eq!(charge(60), Ok(()), "a new budget starts from zero");
        }
        let _b = enter_with(
            Some(Arc::new(move || flag.load(Ordering::Relaxed))),
            Duration::ZERO,
            100,
        );
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(check(), Err(Exceeded::Deadline(Duration::ZERO)));
    }

    #[test]
    fn no_budget_means_no_limit() {
        assert_eq!(charge(usize::MAX), Ok(()));
        assert_eq!(check(), Ok(()));
    }

    #[test]
    fn a_marker_round_trips() {
        for e in [
            Exceeded::Stopped,
            Exceeded::Deadline(DEADLINE),
            Exceeded::Size(MAX_VALUE_BYTES),
            Exceeded::Depth(MAX_VALUE_DEPTH),
        ] {
            let text = format!("map(): {}", e.marker());
            assert_eq!(Exceeded::in_text(&text), Some(e), "{text}");
        }
        assert_eq!(Exceeded::in_text("map(): something else"), None);
    }
}
