//! Clock: the time the engine reads (wall time for records, monotonic time for deadlines), so
//! tests can fix it. Sleeping stays with tokio's timers.
//!
//! Reference: shared/design/architecture.md ("Ports (domain)": Clock).

use std::time::Instant;
use std::time::SystemTime;

/// Where the engine reads the time.
pub trait Clock: Send + Sync {
    /// Wall-clock time: step start and end times, event timestamps, run start (recorded and
    /// shown; may jump when the system clock is set).
    fn now(&self) -> SystemTime;

    /// Monotonic time: deadlines of steps, calls and retries (`deadline - instant()` is the
    /// time left). Never goes backwards.
    fn instant(&self) -> Instant;
}
