//! Process-group signalling: a safe `killpg` wrapper and a guard that kills a group on drop.

use std::collections::BTreeSet;
use std::io;
use std::sync::Mutex;
use std::sync::OnceLock;

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::sys::signal::killpg;
use nix::unistd::Pid;

/// Sends `sig` to every process of the process group `pgid`.
///
/// A group that no longer exists (`ESRCH`) counts as success: the goal, a group that is gone,
/// is met. `pgid` must be greater than 1; `0` would mean the caller's own group and `1` the
/// init process, so both are refused.
///
/// # Errors
/// `InvalidInput` for `pgid <= 1`; otherwise the OS error of `killpg(2)` (e.g. `EPERM`).
pub fn signal_group(pgid: i32, sig: Signal) -> io::Result<()> {
    if pgid <= 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to signal process group {pgid}"),
        ));
    }
    match killpg(Pid::from_raw(pgid), sig) {
        Ok(()) | Err(Errno::ESRCH) => Ok(()),
        Err(e) => Err(io::Error::from(e)),
    }
}

/// Process groups (= pids of the group leaders, our direct children) of the children this
/// process is running now.
static LIVE: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn live() -> std::sync::MutexGuard<'static, BTreeSet<i32>> {
    LIVE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The process groups of the children running now.
pub(crate) fn live_groups() -> Vec<i32> {
    live().iter().copied().collect()
}

/// Told about every process group that outlives its step (`true`: a command of a run exited
/// and left processes running in its group, kept until the run ends) and when such a group is
/// gone (`false`: stopped at the run's end, or found empty).
pub type GroupObserver = Box<dyn Fn(bool, i32) + Send + Sync>;

static OBSERVER: OnceLock<GroupObserver> = OnceLock::new();

/// Installs the one observer of the process groups that outlive their step (the `awf`
/// binary's watchdog feed: the watchdog SIGKILLs the groups still listed when awf dies, so
/// their members die with awf even when they cleared their environment, and with it their
/// [`TAG_VAR`](crate::TAG_VAR)). Called with `true` and the group id when a step that exited
/// left processes in its group, with `false` once that group is gone. Nothing is said about
/// a step that leaves nothing behind (nothing per step). The observer must be quick and must
/// not block. A second call is ignored (returns `false`).
pub fn set_group_observer(observer: GroupObserver) -> bool {
    OBSERVER.set(observer).is_ok()
}

/// Tells the observer, if any, that group `pgid` outlives its step (`true`) or is gone.
pub(crate) fn observe(kept: bool, pgid: i32) {
    if let Some(o) = OBSERVER.get() {
        o(kept, pgid);
    }
}

/// SIGKILLs a process group when dropped, unless disarmed first.
///
/// Held for the whole life of a child so that a run future dropped half-way (instead of being
/// cancelled through its token) still leaves no process of the group behind.
#[derive(Debug)]
pub(crate) struct GroupGuard {
    pgid: Option<i32>,
}

impl GroupGuard {
    /// Guards group `pgid` (`None` when the child id was not available: nothing to guard).
    pub(crate) fn new(pgid: Option<i32>) -> Self {
        if let Some(g) = pgid {
            live().insert(g);
        }
        Self { pgid }
    }

    /// The guarded group id, if any.
    pub(crate) fn pgid(&self) -> Option<i32> {
        self.pgid
    }

    /// Sends `sig` to the group; errors are ignored (the group may be gone or out of reach).
    pub(crate) fn signal(&self, sig: Signal) {
        if let Some(pgid) = self.pgid {
            let _ = signal_group(pgid, sig);
        }
    }

    /// SIGKILLs the group now and disarms the guard. The group when it may still hold a
    /// process, a zombie included (`None` when there was none to guard or the OS found it
    /// empty: `ESRCH`), so the caller knows whether there is anything to reap.
    pub(crate) fn kill_and_disarm(&mut self) -> Option<i32> {
        let g = self.pgid.take()?;
        // A zombie member still counts for kill(2) until it is reaped.
        let members = g > 1 && killpg(Pid::from_raw(g), Signal::SIGKILL) != Err(Errno::ESRCH);
        live().remove(&g);
        members.then_some(g)
    }

    /// Disarms the guard without signalling the group: what the command left running in it
    /// lives on (see `linger`). The group when it may still hold a process, a zombie
    /// included (signal 0 found one; `None` when there was none to guard or the OS found it
    /// empty). One system call, as [`kill_and_disarm`](Self::kill_and_disarm).
    pub(crate) fn release(&mut self) -> Option<i32> {
        let g = self.pgid.take()?;
        let members = g > 1 && killpg(Pid::from_raw(g), None) != Err(Errno::ESRCH);
        live().remove(&g);
        members.then_some(g)
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        let _ = self.kill_and_disarm();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_own_group_and_init() {
        assert_eq!(
            signal_group(0, Signal::SIGTERM).map_err(|e| e.kind()),
            Err(io::ErrorKind::InvalidInput)
        );
        assert_eq!(
            signal_group(1, Signal::SIGTERM).map_err(|e| e.kind()),
            Err(io::ErrorKind::InvalidInput)
        );
        assert_eq!(
            signal_group(-5, Signal::SIGTERM).map_err(|e| e.kind()),
            Err(io::ErrorKind::InvalidInput)
        );
    }

    #[test]
    fn missing_group_is_ok() {
        // pid_max is at most 2^22 on Linux, so this group cannot exist.
        assert_eq!(signal_group(i32::MAX - 7, Signal::SIGKILL).ok(), Some(()));
    }
}
