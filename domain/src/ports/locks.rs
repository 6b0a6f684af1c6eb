//! RunLocks: the exclusive lock every process that drives a run holds on its run id, so two
//! processes never run or resume the same run at once. The embedded store keeps them beside
//! its state files (`<data root>/locks/<run_id>.lock`).
//!
//! Reference: spec/workflow.md §3.11 (persistence and resume).

use crate::error::AwfError;

/// A held run lock; dropping it releases the lock (and removes what it left on disk).
pub struct RunLockGuard {
    _held: Box<dyn Send + Sync>,
}

impl RunLockGuard {
    /// Wraps whatever an adapter must keep alive to hold the lock.
    pub fn new(inner: impl Send + Sync + 'static) -> Self {
        Self {
            _held: Box::new(inner),
        }
    }
}

impl std::fmt::Debug for RunLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunLockGuard").finish_non_exhaustive()
    }
}

/// Takes run locks.
pub trait RunLocks: Send + Sync {
    /// Takes the lock of `run_id` without waiting. `Ok(None)` when no lock can be made (no
    /// store to protect, an id that cannot name a file): the caller goes on unlocked.
    ///
    /// # Errors
    /// `USER.INPUT.VALIDATION_FAILED` (`run <id> is still running in another awf process`)
    /// when another process holds it.
    fn try_lock(&self, run_id: &str) -> Result<Option<RunLockGuard>, AwfError>;

    /// The kind of process that holds the lock of `run_id` (`awf run`, `awf resume`, `awf
    /// serve`), when the holder recorded it; `None` when unknown (the default).
    fn holder(&self, _run_id: &str) -> Option<String> {
        None
    }

    /// Whether some process holds the lock of `run_id` now, looked at without taking it:
    /// `Some(false)` when nobody does (no lock file, or one nobody holds), `None` when the
    /// adapter cannot tell (the default). The process running a top-level run holds its lock
    /// for the whole run, so a lock nobody holds says that process is gone, even when its
    /// recorded pid now names another program.
    fn is_held(&self, _run_id: &str) -> Option<bool> {
        None
    }
}

/// The error of a lock another process holds (`USER.INPUT.VALIDATION_FAILED`, with a hint),
/// the same for every adapter.
pub fn still_running(run_id: &str) -> AwfError {
    AwfError::new(
        crate::error::ErrorCode::UserInputValidationFailed,
        format!("run {run_id} is still running in another awf process"),
    )
    .with_hint("wait for it to finish, or stop it before resuming")
}
