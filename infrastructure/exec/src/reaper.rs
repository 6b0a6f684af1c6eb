//! Descendants that escape their process group: parent-death signal, child subreaper, tags and
//! sweeps.
//!
//! - Every child gets `PR_SET_PDEATHSIG` = SIGKILL (see [`arm_parent_death`]), so it dies
//!   with awf even when awf itself is SIGKILLed, unless a watchdog process registered with
//!   [`set_watchdog`] runs and stops the children instead (the `awf` binary's
//!   `awf __watchdog`): setting the signal needs a hook between fork and exec, which makes
//!   every spawn a full `fork` instead of a `posix_spawn` (about 0.35 ms of CPU per step).
//!   The signal fires when the *thread* that spawned the child exits: children are spawned
//!   from the runtime's worker threads (or the thread of a current-thread runtime), which
//!   live as long as the run.
//! - [`become_subreaper`] makes this process a child subreaper: a step's descendant whose
//!   parent dies (`setsid cmd &`, a double fork) is re-parented to awf instead of init.
//! - Every child carries [`TAG_VAR`] in its environment (inherited by its descendants), so a
//!   stopped step can find and stop what it left behind ([`sweep_tagged`]). A command of a
//!   run has the root run's id in its tag too (its scope): what a step that exited left
//!   running lives on for the later steps of its run, and at the end of that run
//!   [`sweep_scope`] stops it (the step's process group, kept by `linger`, and the
//!   descendants carrying the scope) and nothing of the other runs of the same process
//!   (`awf serve` runs many); at the end of `awf run` [`sweep_adopted`] also stops every
//!   adopted descendant, tagged or not.
//!
//! Linux only (`/proc`, `prctl`). Source: design/decisions.md "Execution and processes" ("No
//! orphan survives a run, a timeout or a cancel"); issue 7 ("Processes").

use std::collections::BTreeSet;
use std::io;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicI32;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::sys::signal::kill;
use nix::sys::wait::WaitPidFlag;
use nix::sys::wait::WaitStatus;
use nix::sys::wait::waitpid;
use nix::unistd::Pid;

use crate::group::live_groups;

/// Environment variable set on every child: `<awf pid>-<sequence>`, unique per spawned child,
/// followed by `:<root run id>` for a command of a run ([`sweep_scope`]).
pub const TAG_VAR: &str = "AWF_PROCESS_TAG";

/// Rounds of a sweep at most (each kills what it found; their children are adopted next).
const SWEEP_ROUNDS: usize = 64;

/// Time swept processes get between SIGTERM and SIGKILL.
pub(crate) const SWEEP_GRACE: Duration = Duration::from_secs(2);

/// Set by [`kill_all_now`]: later sweeps skip their grace.
static FORCED: AtomicBool = AtomicBool::new(false);

static NEXT_TAG: AtomicU64 = AtomicU64::new(1);

/// Pid of the watchdog process (see [`set_watchdog`]); 0 = none.
static WATCHDOG: AtomicI32 = AtomicI32::new(0);

/// Registers `pid`, a child of this process, as its watchdog: a helper that SIGKILLs this
/// process's step children (their groups and every process carrying its [`TAG_VAR`]) if
/// this process dies, and exits by itself otherwise (the `awf` binary's `awf __watchdog`).
/// While it lives, children get no parent-death signal, so they are spawned with
/// `posix_spawn` (vfork) instead of `fork`; once it has exited (checked before each spawn,
/// one `waitpid`), they get the signal again. The sweeps leave it alone. Ends a start
/// announced with `awf_domain::watchdog_start::announce`.
pub fn set_watchdog(pid: i32) {
    WATCHDOG.store(pid.max(0), Ordering::SeqCst);
    awf_domain::watchdog_start::ended();
}

/// The watchdog's pid while one is registered (it may have exited since).
fn watchdog() -> Option<i32> {
    Some(WATCHDOG.load(Ordering::SeqCst)).filter(|p| *p > 0)
}

/// Whether a child spawned now needs a parent-death signal: when no watchdog runs (none was
/// registered, or it has exited: then it is reaped here and forgotten).
pub(crate) fn parent_death_signal() -> bool {
    awf_domain::watchdog_start::wait_for_start();
    let Some(pid) = watchdog() else {
        return true;
    };
    match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::StillAlive) | Err(Errno::EINTR) => false,
        _ => {
            WATCHDOG.store(0, Ordering::SeqCst);
            true
        }
    }
}

/// A fresh tag for one child: `<awf pid>-<sequence>`, followed by `:<scope>` for a command
/// of a run (the root run's id, see [`sweep_scope`]).
pub(crate) fn new_tag(scope: Option<&str>) -> String {
    let seq = NEXT_TAG.fetch_add(1, Ordering::Relaxed);
    let me = own_pid();
    match scope {
        Some(scope) => format!("{me}-{seq}{SCOPE_SEP}{scope}"),
        None => format!("{me}-{seq}"),
    }
}

/// This process's id, asked of the OS once (glibc does not keep it: a `getpid` per step).
/// awf never forks without exec'ing, so it does not change.
pub(crate) fn own_pid() -> u32 {
    static PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *PID.get_or_init(std::process::id)
}

/// Separates a tag's own part from its scope (`<awf pid>-<sequence>:<root run id>`).
const SCOPE_SEP: char = ':';

/// Makes this process a child subreaper (`PR_SET_CHILD_SUBREAPER`): orphaned descendants of
/// its children are re-parented to it, where `sweep_tagged` and [`sweep_adopted`] find
/// them. Process-wide; call once at start (the `awf` binary does).
///
/// # Errors
/// The OS error of `prctl(2)` (not Linux, or refused by a sandbox).
pub fn become_subreaper() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)
}

/// Arms `cmd` so that its child gets SIGKILL when the spawning thread (awf) dies.
///
/// The hook runs in the forked child before exec: it calls `prctl(PR_SET_PDEATHSIG)` and
/// then checks that the parent is still the process that forked it (if awf died in between,
/// the signal would never come: the spawn fails instead).
pub(crate) fn arm_parent_death(cmd: &mut tokio::process::Command) {
    let parent = nix::unistd::getpid();
    #[allow(unsafe_code)]
    // SAFETY: `pre_exec` runs the closure in the child between fork and exec, where only
    // async-signal-safe operations are allowed. The closure only makes two system calls
    // (`prctl` through nix's thin wrapper and `getppid`), captures a plain `Pid` by value,
    // does not allocate (the error is built from a raw errno), takes no lock and touches no
    // shared state. This is the one `unsafe` block of the workspace (issue 7).
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
                .map_err(|e| io::Error::from_raw_os_error(e as i32))?;
            if nix::unistd::getppid() != parent {
                return Err(io::Error::from_raw_os_error(Errno::ESRCH as i32));
            }
            Ok(())
        });
    }
}

/// SIGKILLs every process group this process is running a child in, and makes the stops in
/// progress skip their remaining grace: the second Ctrl-C. Safe to call from any thread.
pub fn kill_all_now() {
    FORCED.store(true, Ordering::SeqCst);
    for pgid in live_groups() {
        let _ = crate::group::signal_group(pgid, Signal::SIGKILL);
    }
    // And the groups kept past their steps for the rest of their runs.
    crate::linger::kill_kept_now();
}

/// Whether [`kill_all_now`] was called.
pub(crate) fn forced() -> bool {
    FORCED.load(Ordering::SeqCst)
}

/// One child of this process, from `/proc/<pid>/stat`.
struct ProcEntry {
    pid: i32,
    zombie: bool,
}

/// The children of this process (its own and adopted ones): the pids listed in
/// `/proc/self/task/<tid>/children` of each of its threads (a child belongs to the thread
/// that forked it, an adopted orphan to the thread chosen as its reaper), each read from
/// `/proc/<pid>/stat`; without those lists (a kernel built without them), every process of
/// the host is read to find the ones whose parent is this process.
fn children() -> Vec<ProcEntry> {
    let me = i32::try_from(own_pid()).unwrap_or(i32::MAX);
    match listed_children() {
        Some(pids) => pids
            .into_iter()
            .filter_map(|pid| proc_entry(pid, me))
            .collect(),
        None => scanned_children(me),
    }
}

/// The pids in the `children` lists of this process's threads; `None` when a list cannot
/// be read (not supported by the kernel).
fn listed_children() -> Option<BTreeSet<i32>> {
    let mut pids = BTreeSet::new();
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        match std::fs::read_to_string(task.path().join("children")) {
            Ok(text) => pids.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            ),
            // The thread exited since the directory was read.
            Err(e) if e.kind() == io::ErrorKind::NotFound && task.path().exists() => return None,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(_) => return None,
        }
    }
    Some(pids)
}

/// Every process of the host whose parent is `me`, from `/proc/<pid>/stat`.
fn scanned_children(me: i32) -> Vec<ProcEntry> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter_map(|pid| proc_entry(pid, me))
        .collect()
}

/// Process `pid` from `/proc/<pid>/stat`, when its parent is `parent`.
fn proc_entry(pid: i32, parent: i32) -> Option<ProcEntry> {
    let stat =
        std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat")).ok()?;
    // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next().unwrap_or("");
    let ppid = fields.next()?.parse::<i32>().ok()?;
    (ppid == parent).then_some(ProcEntry {
        pid,
        zombie: state == "Z" || state == "X",
    })
}

/// Which adopted processes a sweep stops.
#[derive(Clone, Copy)]
enum Target<'a> {
    /// Every one, tagged or not (and adopted zombies are reaped).
    All,
    /// The ones carrying exactly this tag (a stopped step's).
    Tag(&'a str),
    /// The ones whose tag has this scope (a root run's commands, see [`new_tag`]).
    Scope(&'a str),
}

impl Target<'_> {
    /// Whether process `pid` is one of them (from its `/proc/<pid>/environ`).
    fn matches(self, pid: i32) -> bool {
        let (needle, whole) = match self {
            Self::All => return true,
            Self::Tag(tag) => (format!("{TAG_VAR}={tag}"), true),
            Self::Scope(scope) => (format!("{SCOPE_SEP}{scope}"), false),
        };
        let prefix = format!("{TAG_VAR}={}-", own_pid());
        std::fs::read(Path::new("/proc").join(pid.to_string()).join("environ")).is_ok_and(|env| {
            env.split(|b| *b == 0).any(|v| {
                if whole {
                    v == needle.as_bytes()
                } else {
                    v.starts_with(prefix.as_bytes()) && v.ends_with(needle.as_bytes())
                }
            })
        })
    }
}

/// SIGKILLs every process whose environment carries a tag of the awf process `owner`
/// (`AWF_PROCESS_TAG=<owner>-…`): the descendants of its steps, daemonised ones included
/// (they left the step's process group and session, not its environment). A tagged process
/// that leads its process group (a step's direct child, a `setsid` daemon) has its whole
/// group SIGKILLed too, so members that cleared their environment go with it. For the
/// watchdog, once `owner` has died. Returns how many tagged processes were signalled.
pub fn kill_tagged_by(owner: u32) -> usize {
    let needle = format!("{TAG_VAR}={owner}-");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let me = i32::try_from(own_pid()).unwrap_or(i32::MAX);
    let mut killed = 0;
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let tagged = std::fs::read(e.path().join("environ")).is_ok_and(|env| {
            env.split(|b| *b == 0)
                .any(|v| v.starts_with(needle.as_bytes()))
        });
        if !tagged {
            continue;
        }
        if group_of(pid) == Some(pid) {
            let _ = crate::group::signal_group(pid, Signal::SIGKILL);
        }
        if nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
            killed += 1;
        }
    }
    killed
}

/// The process group of `pid`, from `/proc/<pid>/stat` (`pid (comm) state ppid pgrp …`).
fn group_of(pid: i32) -> Option<i32> {
    let stat =
        std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(2)?.parse().ok()
}

/// Stops every adopted descendant carrying `tag` (the tag of a step's child that was just
/// stopped): SIGTERM, a short grace, SIGKILL, and reaps them. Their own children, adopted in
/// turn, are found by the next round. Returns how many processes were stopped.
pub(crate) async fn sweep_tagged(tag: &str) -> usize {
    sweep(Target::Tag(tag)).await
}

/// Stops what the commands of `scope` (a root run's id: every command of that run tree was
/// spawned with it, see [`CommandSpec::scope`](awf_domain::ports::exec::CommandSpec::scope))
/// left running: first the process groups of its steps that exited leaving background
/// processes (kept until the run ends, see `linger`), then every adopted descendant whose tag
/// carries the scope (`setsid cmd &`); SIGTERM, a short grace, SIGKILL, reaped, round after
/// round as their own children are adopted. Processes of other scopes (the other runs of an
/// `awf serve`) are left alone, and so are the groups of steps still running. Call when that
/// run has ended. Needs [`become_subreaper`] for the adopted ones. Returns how many groups
/// and processes were stopped.
pub async fn sweep_scope(scope: &str) -> usize {
    if scope.is_empty() {
        return 0;
    }
    crate::linger::stop_kept(Some(scope)).await + sweep(Target::Scope(scope)).await
}

/// Stops every process group kept past its step (of any run) and every descendant this
/// process adopted (any tag, or none), and reaps the adopted zombies: call when the runs
/// have ended and no step is running, so that nothing a run started outlives it, background
/// and daemonised processes included. Needs [`become_subreaper`] to see processes whose
/// parent died. Returns how many groups and processes were stopped.
pub async fn sweep_adopted() -> usize {
    crate::linger::stop_kept(None).await + sweep(Target::All).await
}

async fn sweep(target: Target<'_>) -> usize {
    let mut stopped = 0;
    for _ in 0..SWEEP_ROUNDS {
        let live: BTreeSet<i32> = live_groups().into_iter().collect();
        let spared = watchdog();
        let mut targets = Vec::new();
        for c in children() {
            if live.contains(&c.pid) || spared == Some(c.pid) {
                continue; // a child of a step that is still running, or a helper
            }
            if c.zombie {
                if matches!(target, Target::All) {
                    let _ = waitpid(Pid::from_raw(c.pid), Some(WaitPidFlag::WNOHANG));
                }
                continue;
            }
            if target.matches(c.pid) {
                targets.push(c.pid);
            }
        }
        if targets.is_empty() {
            break;
        }
        stopped += targets.len();
        stop_all(&targets).await;
    }
    stopped
}

/// SIGTERM to each, up to [`SWEEP_GRACE`] for them to exit (none after [`kill_all_now`]),
/// SIGKILL to the rest; every one is reaped.
async fn stop_all(pids: &[i32]) {
    let first = if forced() {
        Signal::SIGKILL
    } else {
        Signal::SIGTERM
    };
    for &pid in pids {
        let _ = kill(Pid::from_raw(pid), first);
    }
    let mut left: Vec<i32> = pids.to_vec();
    let t0 = Instant::now();
    let mut killed = first == Signal::SIGKILL;
    while !left.is_empty() {
        left.retain(|&pid| !reaped(pid));
        if left.is_empty() {
            break;
        }
        if !killed && (t0.elapsed() >= SWEEP_GRACE || forced()) {
            for &pid in &left {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            killed = true;
        }
        if t0.elapsed() >= SWEEP_GRACE * 3 {
            break; // stuck in the kernel; nothing more to do
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Reaps `pid` if it has exited; true when it is gone (reaped now, or not our child).
fn reaped(pid: i32) -> bool {
    match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::StillAlive) => false,
        Ok(_) | Err(Errno::ECHILD) => true,
        Err(_) => false,
    }
}

/// Reaps the exited members of process group `pgid` that were adopted by this process (the
/// background processes of a step whose shell is gone), waiting up to [`SWEEP_GRACE`] for
/// members that were just SIGKILLed. One system call when the group left nothing behind.
pub(crate) async fn reap_group(pgid: i32) {
    if pgid <= 1 {
        return;
    }
    let t0 = Instant::now();
    loop {
        match waitpid(Pid::from_raw(-pgid), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => {
                if t0.elapsed() >= SWEEP_GRACE {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok(_) => {}
            Err(Errno::EINTR) => {}
            Err(_) => return, // ECHILD: none left
        }
    }
}

#[cfg(test)]
mod children_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The children lists of the threads name the same children as a scan of every process
    /// (one spawned from this thread, one from another), zombies included.
    #[test]
    fn thread_lists_and_the_full_scan_agree() {
        let me = i32::try_from(std::process::id()).unwrap();
        let mut here = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut there = std::thread::spawn(|| {
            std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .unwrap()
        })
        .join()
        .unwrap();
        let mut done = std::process::Command::new("true").spawn().unwrap();
        let done_pid = i32::try_from(done.id()).unwrap();
        // `true` exits; until it is waited for it is a zombie child.
        let t0 = Instant::now();
        while !scanned_children(me)
            .iter()
            .any(|c| c.pid == done_pid && c.zombie)
        {
            assert!(t0.elapsed() < Duration::from_secs(30), "true never exited");
            std::thread::sleep(Duration::from_millis(10));
        }
        let listed = listed_children().expect("/proc/self/task/*/children is readable here");
        let pids = |v: Vec<ProcEntry>| -> Vec<(i32, bool)> {
            let mut v: Vec<_> = v.into_iter().map(|c| (c.pid, c.zombie)).collect();
            v.sort_unstable();
            v
        };
        let ours: BTreeSet<i32> = [here.id(), there.id(), done.id()]
            .into_iter()
            .map(|p| i32::try_from(p).unwrap())
            .collect();
        assert!(ours.is_subset(&listed), "{listed:?}");
        let from_lists = pids(children());
        assert_eq!(from_lists, pids(scanned_children(me)));
        assert!(from_lists.contains(&(done_pid, true)), "{from_lists:?}");
        for c in [&mut here, &mut there] {
            c.kill().unwrap();
            c.wait().unwrap();
        }
        done.wait().unwrap();
    }
}
