//! Whether this user may start the threads a run needs, checked before the runtime is built.
//!
//! tokio panics when it cannot start a worker thread, and a runtime whose second worker
//! failed to start then hangs while unwinding (its first worker waits for a shutdown that
//! never comes): under a low process limit (`ulimit -u`, which counts every thread of the
//! user) `awf run` crashed or hung. When the limit is low enough to matter, awf first starts
//! [`THREADS`] threads that exist at the same time; if it cannot, the command fails with
//! `SYSTEM.RESOURCE.EXHAUSTED` before anything is started. Under the usual limits (tens of
//! thousands) nothing is probed: one `getrlimit`.

use awf_domain::AwfError;
use awf_domain::ErrorCode;

/// Threads and processes a run has alive at once, besides the main thread: two runtime
/// workers, the store writer and its sync helpers, the watchdog's starter and the watchdog
/// itself, a step's process and its shell, the template parser's lexer, and room for the
/// runtime's blocking threads (standard input, file reads). A run of parallel branches
/// needs more; this is the floor below which nothing works.
pub const THREADS: usize = 12;

/// Process limits (`RLIMIT_NPROC`) at or above this are not probed: no user runs that many
/// threads by accident.
const PROBE_BELOW: u64 = 4096;

/// `Ok` when `THREADS` more threads can run now, or when the process limit is high enough
/// not to ask.
///
/// # Errors
/// `SYSTEM.RESOURCE.EXHAUSTED` naming the limit, when a probe thread could not be started.
pub fn check() -> Result<(), AwfError> {
    let limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NPROC)
        .map(|(soft, _)| soft)
        .unwrap_or(u64::MAX);
    if limit >= PROBE_BELOW {
        return Ok(());
    }
    probe(THREADS).map_err(|e| exhausted(limit, &e))
}

/// Starts `n` threads that all live until the last one started (or one failed to start).
fn probe(n: usize) -> std::io::Result<()> {
    let (hold, wait) = std::sync::mpsc::channel::<()>();
    let wait = std::sync::Arc::new(std::sync::Mutex::new(wait));
    let mut started = Vec::with_capacity(n);
    let mut failed = None;
    for _ in 0..n {
        let wait = std::sync::Arc::clone(&wait);
        match std::thread::Builder::new()
            .name("awf-probe".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                // Returns when `hold` is dropped.
                let _ = wait.lock().map(|w| w.recv());
            }) {
            Ok(h) => started.push(h),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    drop(hold);
    for h in started {
        let _ = h.join();
    }
    failed.map_or(Ok(()), Err)
}

/// The error for a probe that failed under the process limit `limit`.
fn exhausted(limit: u64, e: &std::io::Error) -> AwfError {
    AwfError::new(
        ErrorCode::SystemResourceExhausted,
        format!("cannot start awf's threads under this user's process limit of {limit}: {e}"),
    )
    .with_detail("limit", limit.to_string())
    .with_hint(format!(
        "awf needs {THREADS} or more threads and processes of this user at once (more with \
         parallel steps): raise `ulimit -u` or end other processes of this user"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_of_a_few_threads_succeeds_here() {
        assert!(probe(THREADS).is_ok());
    }

    #[test]
    fn the_error_names_the_limit_and_how_to_raise_it() {
        let e = exhausted(5, &std::io::Error::from_raw_os_error(11));
        assert_eq!(e.code(), ErrorCode::SystemResourceExhausted);
        assert!(e.message().contains("limit of 5:"), "{}", e.message());
        assert!(
            e.hints().iter().any(|h| h.contains("ulimit -u")),
            "{:?}",
            e.hints()
        );
    }
}
