//! Whether what a command printed on stdout was written: a full disk or a closed stdout turns a
//! success into `SYSTEM.IO.WRITE_FAILED` (exit 4), in every output format. A reader that goes
//! away (`awf history | head`, broken pipe) is not a failure, as in ripgrep.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;

static FAILED: AtomicBool = AtomicBool::new(false);

/// Notes the result of a write to stdout; a failure other than a broken pipe is remembered.
pub fn checked<T>(r: std::io::Result<T>) {
    if let Err(e) = r
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        FAILED.store(true, Ordering::Relaxed);
    }
}

/// Whether a write to stdout failed, or stdout cannot be flushed now.
pub fn failed() -> bool {
    use std::io::Write;
    checked(std::io::stdout().lock().flush());
    FAILED.load(Ordering::Relaxed)
}
