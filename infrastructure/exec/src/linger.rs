//! Process groups that outlive their step: what a command of a run left running in the
//! background (`server &`) when it exited on its own.
//!
//! Such a group is kept, under the run's scope, until that run ends: a later step of the run
//! can use what an earlier one started (a server, then a test against it), as in GitHub
//! Actions or make. [`stop_kept`] stops the groups of a scope (from
//! [`sweep_scope`](crate::sweep_scope), at the end of the root run) or all of them (from
//! [`sweep_adopted`](crate::sweep_adopted)): SIGTERM, [`SWEEP_GRACE`], SIGKILL, reaped. A
//! step stopped by its timeout or a cancel still has its whole group stopped at once (see
//! `supervise`), and a command outside a run (no scope) too when it ends.
//!
//! The members of a kept group whose parent (the step's shell) is gone were adopted by awf
//! (a subreaper): when they exit, [`reap_kept`] reaps them at the end of the next step, so no
//! zombies pile up over a long run, and forgets a group once it is empty. Nothing of this
//! runs while no group is kept (one atomic load a step). The group observer (the watchdog's
//! feed, see [`set_group_observer`](crate::set_group_observer)) is told about each kept
//! group and when it is gone, so a killed awf's watchdog stops them too.
//!
//! Source: design/decisions.md "Execution and processes" (no orphan survives a run, a
//! timeout or a cancel); trial finding ("start a server in one step, test against it in
//! the next").

use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::sys::signal::killpg;
use nix::sys::wait::WaitPidFlag;
use nix::sys::wait::WaitStatus;
use nix::sys::wait::waitpid;
use nix::unistd::Pid;

use crate::group::observe;
use crate::group::signal_group;
use crate::reaper::SWEEP_GRACE;
use crate::reaper::forced;

/// A process group kept past its step, and the scope (root run id) it belongs to.
struct Kept {
    pgid: i32,
    scope: String,
}

/// The kept groups.
static KEPT: Mutex<Vec<Kept>> = Mutex::new(Vec::new());

/// Whether [`KEPT`] may hold a group: read at every step's end without the lock.
static ANY: AtomicBool = AtomicBool::new(false);

fn kept() -> std::sync::MutexGuard<'static, Vec<Kept>> {
    KEPT.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Keeps group `pgid` (a step of `scope` exited and the group may still hold processes)
/// until its run ends, after reaping the members that have already exited; a group found
/// empty then is not kept.
pub(crate) fn keep(pgid: i32, scope: &str) {
    if pgid <= 1 || reap_exited(pgid) {
        return;
    }
    kept().push(Kept {
        pgid,
        scope: scope.to_owned(),
    });
    ANY.store(true, Ordering::SeqCst);
    observe(true, pgid);
}

/// Reaps the exited members of the kept groups and forgets the groups found empty. Nothing
/// (one atomic load) while no group is kept.
pub(crate) fn reap_kept() {
    if !ANY.load(Ordering::SeqCst) {
        return;
    }
    let mut gone = Vec::new();
    {
        let mut list = kept();
        list.retain(|k| {
            let empty = reap_exited(k.pgid);
            if empty {
                gone.push(k.pgid);
            }
            !empty
        });
        ANY.store(!list.is_empty(), Ordering::SeqCst);
    }
    for g in gone {
        observe(false, g);
    }
}

/// Stops the groups kept for `scope` (every kept group for `None`): SIGTERM to each group,
/// up to [`SWEEP_GRACE`] for them to be gone (none after
/// [`kill_all_now`](crate::kill_all_now)), SIGKILL to what is left; their members adopted
/// by awf are reaped. Returns how many groups were stopped.
pub(crate) async fn stop_kept(scope: Option<&str>) -> usize {
    if !ANY.load(Ordering::SeqCst) {
        return 0;
    }
    let groups: Vec<i32> = {
        let mut list = kept();
        let (taken, rest): (Vec<Kept>, Vec<Kept>) = std::mem::take(&mut *list)
            .into_iter()
            .partition(|k| scope.is_none_or(|s| k.scope == s));
        *list = rest;
        ANY.store(!list.is_empty(), Ordering::SeqCst);
        taken.into_iter().map(|k| k.pgid).collect()
    };
    if groups.is_empty() {
        return 0;
    }
    let first = if forced() {
        Signal::SIGKILL
    } else {
        Signal::SIGTERM
    };
    for &g in &groups {
        let _ = signal_group(g, first);
    }
    let mut left = groups.clone();
    let t0 = Instant::now();
    let mut killed = first == Signal::SIGKILL;
    loop {
        left.retain(|&g| !reap_exited(g));
        if left.is_empty() {
            break;
        }
        if !killed && (t0.elapsed() >= SWEEP_GRACE || forced()) {
            for &g in &left {
                let _ = signal_group(g, Signal::SIGKILL);
            }
            killed = true;
        }
        if t0.elapsed() >= SWEEP_GRACE * 3 {
            break; // stuck in the kernel, or out of reach (EPERM): nothing more to do
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for &g in &groups {
        observe(false, g);
    }
    groups.len()
}

/// SIGKILLs every kept group now (the second Ctrl-C); they are reaped and forgotten by
/// [`stop_kept`].
pub(crate) fn kill_kept_now() {
    if !ANY.load(Ordering::SeqCst) {
        return;
    }
    for k in kept().iter() {
        let _ = signal_group(k.pgid, Signal::SIGKILL);
    }
}

/// Reaps the members of group `pgid` that are children of this process and have exited;
/// `true` when the group is empty (no child of this process left in it, and no process of
/// it answers signal 0).
fn reap_exited(pgid: i32) -> bool {
    loop {
        match waitpid(Pid::from_raw(-pgid), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return false,
            Ok(_) | Err(Errno::EINTR) => {}
            // ECHILD: none of its members is our child (any more): are there others?
            Err(_) => return killpg(Pid::from_raw(pgid), None) == Err(Errno::ESRCH),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::os::unix::process::CommandExt;

    /// A group whose leader was reaped and whose one member exited is empty once the member
    /// is reaped; one with a live member is not.
    #[test]
    fn a_group_is_empty_once_its_exited_members_are_reaped() {
        // The leader forks a member (same group) and exits; the member is its child, so
        // here (no subreaper) it goes to init: not ours, but still in the group.
        let mut leader = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & echo $!"])
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = i32::try_from(leader.id()).unwrap();
        let out = {
            use std::io::Read;
            let mut s = String::new();
            let mut pipe = leader.stdout.take().unwrap();
            // The member keeps the pipe open: read the line only.
            let mut b = [0u8; 1];
            while pipe.read(&mut b).unwrap() == 1 && b[0] != b'\n' {
                s.push(char::from(b[0]));
            }
            s
        };
        leader.wait().unwrap();
        let member: i32 = out.trim().parse().unwrap();
        assert!(!reap_exited(pgid), "member {member} still runs");
        nix::sys::signal::kill(Pid::from_raw(member), Signal::SIGKILL).unwrap();
        let t0 = Instant::now();
        while !reap_exited(pgid) {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "group never emptied"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
