//! Whether what a command printed on stdout was written: a full disk turns a
//! success into `SYSTEM.IO.WRITE_FAILED` (exit 4), in every output format. A reader that goes
//! away (`awf history | head`, broken pipe) is not a failure, as in ripgrep. A stdout closed
//! before awf starts is not seen: the Rust runtime puts a read-write `/dev/null` there,
//! which cannot be told from the one Python's `subprocess.DEVNULL` gives (README). A stdout
//! open for reading only (`1<file`) is: the runtime takes the writes that fail there with
//! `EBADF` as done, so a command that wrote to it is failed from the descriptor's access mode.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;

static FAILED: AtomicBool = AtomicBool::new(false);

/// Whether anything was written to stdout through [`checked`].
static WROTE: AtomicBool = AtomicBool::new(false);

/// Notes the result of a write to stdout; a failure other than a broken pipe is remembered.
pub fn checked<T>(r: std::io::Result<T>) {
    WROTE.store(true, Ordering::Relaxed);
    if let Err(e) = r
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        FAILED.store(true, Ordering::Relaxed);
    }
}

/// Whether a write to stdout failed, or stdout cannot be flushed now, or something was
/// written to a stdout open for reading only (where every write failed unseen).
pub fn failed() -> bool {
    use std::io::Write;
    checked(std::io::stdout().lock().flush());
    FAILED.load(Ordering::Relaxed) || (WROTE.load(Ordering::Relaxed) && read_only())
}

/// Whether descriptor 1 is open for reading only (`1<file`).
fn read_only() -> bool {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    fcntl(std::io::stdout(), FcntlArg::F_GETFL)
        .is_ok_and(|f| OFlag::from_bits_truncate(f) & OFlag::O_ACCMODE == OFlag::O_RDONLY)
}
