//! The start of a watchdog process beside this process's own start-up.
//!
//! The `awf` binary's watchdog (`awf __watchdog`) stops the processes awf started when awf
//! itself dies without stopping them (SIGKILL, OOM). Starting it is an exec of awf, about a
//! millisecond that a run no longer waits for before its first step: it is started on a
//! thread of its own (issue 9: start-up). Until that start has ended, nothing that the
//! watchdog is meant to stop may be spawned: every spawner (steps' commands, ACP agents, the
//! Bash tool) calls [`wait_for_start`] first. Process-wide state, set only by the binary.

use std::sync::Condvar;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;

static STARTING: Mutex<bool> = Mutex::new(false);
static ENDED: Condvar = Condvar::new();
/// Fast path of [`wait_for_start`]: no start under way.
static UNDER_WAY: AtomicBool = AtomicBool::new(false);

/// Longest wait of a spawn for the start: past it, the spawner goes on (a step's command then
/// gets the parent-death signal instead).
pub const START_WAIT: Duration = Duration::from_secs(5);

/// Announces that a watchdog is being started (before the thread that starts it runs).
pub fn announce() {
    *STARTING.lock().unwrap_or_else(PoisonError::into_inner) = true;
    UNDER_WAY.store(true, Ordering::SeqCst);
}

/// Ends the start announced by [`announce`], whether a watchdog runs now or not.
pub fn ended() {
    let mut starting = STARTING.lock().unwrap_or_else(PoisonError::into_inner);
    *starting = false;
    UNDER_WAY.store(false, Ordering::SeqCst);
    ENDED.notify_all();
}

/// Blocks while a start announced by [`announce`] is under way, [`START_WAIT`] at most;
/// returns at once otherwise (one atomic load).
pub fn wait_for_start() {
    if !UNDER_WAY.load(Ordering::SeqCst) {
        return;
    }
    let starting = STARTING.lock().unwrap_or_else(PoisonError::into_inner);
    let _ = ENDED
        .wait_timeout_while(starting, START_WAIT, |s| *s)
        .unwrap_or_else(PoisonError::into_inner);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spawner waits while the start is under way and goes on once it has ended.
    #[test]
    fn a_spawner_waits_for_an_announced_start_to_end() {
        wait_for_start();
        announce();
        let t0 = std::time::Instant::now();
        let ender = std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            ended();
        });
        wait_for_start();
        let waited = t0.elapsed();
        assert!(waited >= Duration::from_millis(150), "{waited:?}");
        assert!(waited < START_WAIT, "{waited:?}");
        let _ = ender.join();
        let t1 = std::time::Instant::now();
        wait_for_start();
        assert!(t1.elapsed() < Duration::from_millis(100));
    }
}
