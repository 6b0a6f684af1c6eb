//! Starting commands side by side: a command started while others run (the branches of a
//! parallel block, the steps of concurrent runs in `awf serve`) is spawned by a helper
//! thread, not by the async worker that runs its step.
//!
//! `posix_spawn` holds the calling thread until the child has exec'd (vfork): about half a
//! millisecond, more when the CPUs are busy with the children started before. A parallel
//! block's branches run as futures of one task, on one worker, so its 64 branches were
//! spawned one after the other, each waiting for the exec of the one before (issue 9: 64
//! `sleep 0.2` branches started over about 40 ms, as make -j64's do). Spawned by
//! [`helpers`] threads, as many side by side as the host has CPUs (2 to 8), the execs
//! overlap. A command started alone (a chain of steps) is spawned inline: a hand-off to
//! another thread would cost each step two context switches.
//!
//! Only the spawn itself moves (`Prepared::launch`: pipes and `posix_spawn`, no runtime
//! needed); the read ends join the runtime on the worker. When no helper thread can be
//! started (a process limit), commands are spawned inline as before.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::OnceLock;
use std::sync::PoisonError;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::sync::mpsc;

/// Commands of this process that are running (spawned, not yet ended).
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Held while a command runs: counts it in [`LIVE`].
pub(crate) struct Live(());

impl Live {
    pub(crate) fn enter() -> Self {
        LIVE.fetch_add(1, Ordering::AcqRel);
        Self(())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether a command started now is started beside others that run.
pub(crate) fn others_running() -> bool {
    LIVE.load(Ordering::Acquire) > 0
}

type Job = Box<dyn FnOnce() + Send>;

/// The helper threads: they take jobs from one queue.
struct Helpers {
    queue: Mutex<mpsc::Sender<Job>>,
}

/// How many helper threads: the host's CPUs, 2 to 8.
fn helper_count() -> usize {
    std::thread::available_parallelism()
        .map_or(2, std::num::NonZeroUsize::get)
        .clamp(2, 8)
}

/// The helper threads, started at the first call; `None` when not even one could be
/// started.
fn helpers() -> Option<&'static Helpers> {
    static HELPERS: OnceLock<Option<Helpers>> = OnceLock::new();
    HELPERS
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Job>();
            let rx = Arc::new(Mutex::new(rx));
            let mut started = 0;
            for _ in 0..helper_count() {
                let rx = Arc::clone(&rx);
                let spawned = std::thread::Builder::new()
                    .name("awf-spawn".into())
                    // Only `posix_spawn` runs here (glibc gives the vfork child a stack of
                    // its own).
                    .stack_size(256 * 1024)
                    .spawn(move || {
                        loop {
                            let job = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                            match job {
                                Ok(job) => job(),
                                Err(_) => return,
                            }
                        }
                    });
                if spawned.is_ok() {
                    started += 1;
                }
            }
            (started > 0).then(|| Helpers {
                queue: Mutex::new(tx),
            })
        })
        .as_ref()
}

/// Runs `f` on a helper thread and gives its result; inline when there is no helper
/// thread. A helper that stopped without an answer (`f` panicked) gives `None`.
pub(crate) async fn run<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let Some(h) = helpers() else {
        return Some(f());
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = tx.send(f());
    });
    let sent = h
        .queue
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .send(job);
    if let Err(mpsc::SendError(job)) = sent {
        // Every helper is gone: the job runs here (it answers `rx`).
        job();
    }
    rx.await.ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn a_job_runs_on_a_helper_thread_and_gives_its_result() {
        let here = std::thread::current().id();
        let (value, there) = run(|| (21 * 2, std::thread::current().id())).await.unwrap();
        assert_eq!(value, 42);
        assert_ne!(there, here);
    }

    #[tokio::test]
    async fn jobs_run_side_by_side() {
        // Two jobs that each wait for the other to have started: they finish only when
        // two helpers run them at once.
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let (b1, b2) = (Arc::clone(&barrier), Arc::clone(&barrier));
        let (a, b) = tokio::join!(
            run(move || b1.wait().is_leader()),
            run(move || b2.wait().is_leader())
        );
        assert_eq!([a, b].iter().filter(|l| **l == Some(true)).count(), 1);
    }
}
