//! Whether what a command printed on stdout was written: a full disk turns a
//! success into `SYSTEM.IO.WRITE_FAILED` (exit 4), in every output format. A reader that goes
//! away (`awf history | head`, broken pipe) is not a failure, as in ripgrep. A stdout closed
//! before awf starts is not seen: the Rust runtime puts a read-write `/dev/null` there,
//! which cannot be told from the one Python's `subprocess.DEVNULL` gives, and it takes a write
//! failing with `EBADF` (a stdout open for reading only) as done (README).

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
