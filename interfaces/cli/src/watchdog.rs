//! The watchdog: a helper process (`awf __watchdog`, hidden) that SIGKILLs the process groups
//! of a run's steps when the awf process running them dies without stopping them (SIGKILL,
//! OOM killer).
//!
//! A parent-death signal would reach only a step's direct child: the processes a shell step
//! forked (`make`, `sleep 300; echo done`) are re-parented and would live on. They stay in
//! the step's process group, though, and carry the run's `AWF_PROCESS_TAG`. The `awf`
//! process feeds the watchdog one line per group over a pipe (`+<pgid>` when a step's child
//! starts, `-<pgid>` when its group is gone); when the pipe reaches end of file (awf exited
//! or died) the watchdog SIGKILLs every group still listed and every process tagged by that
//! awf process (twice, a moment apart, for a child that was being spawned when awf died),
//! and exits. After a normal exit nothing is left to kill.
//!
//! The watchdog is started before the first step and does the parent-death signal's job
//! too (a step's direct child leads its group), so while it runs children get no
//! parent-death signal and are spawned with `posix_spawn` instead of `fork`; when it cannot
//! be started, or its pipe breaks, children get the signal again.
//!
//! The watchdog runs in its own process group (terminal signals do not reach it), without a
//! parent-death signal (it must outlive awf), and is spared by the end-of-run sweep of
//! adopted processes (it exits by itself when awf does). Source: issue 7 ("Processes").

use std::collections::BTreeSet;
use std::io::BufRead;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::ChildStdin;
use std::process::Stdio;
use std::sync::Mutex;

use nix::sys::signal::Signal;

/// Name of the hidden subcommand that runs the watchdog.
pub const SUBCOMMAND: &str = "__watchdog";

/// Starts the watchdog and feeds it every child process group of this process from now on;
/// while it runs, children get no parent-death signal (the watchdog stops them if awf dies).
/// Best effort: when it cannot be started, or later stops reading, runs go on with the
/// parent-death signal (which stops the direct children).
pub fn install() {
    let pipe = spawn();
    if pipe.is_some() {
        awf_exec::set_parent_death_signal(false);
    }
    *feed() = pipe;
    awf_exec::set_group_observer(Box::new(move |started, pgid| {
        send(&format!("{}{pgid}\n", if started { '+' } else { '-' }));
    }));
}

/// Tells the watchdog that awf ends normally (nothing to clean up) and closes its pipe: it
/// exits at once. Call when the run is over and its processes are gone.
pub fn release() {
    send("=\n");
    *feed() = None;
}

/// The pipe to the watchdog, while it runs.
static FEED: Mutex<Option<ChildStdin>> = Mutex::new(None);

fn feed() -> std::sync::MutexGuard<'static, Option<ChildStdin>> {
    FEED.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Writes one line to the watchdog; when it is gone, later children die with awf by
/// themselves again (parent-death signal).
fn send(line: &str) {
    let mut feed = feed();
    if let Some(pipe) = feed.as_mut()
        && pipe.write_all(line.as_bytes()).is_err()
    {
        *feed = None;
        awf_exec::set_parent_death_signal(true);
    }
}

/// Starts `awf __watchdog` in its own process group; its stdin is the returned pipe.
fn spawn() -> Option<ChildStdin> {
    let exe = std::env::current_exe().ok()?;
    let mut child = std::process::Command::new(exe)
        .arg(SUBCOMMAND)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .ok()?;
    // Not waited for, nor stopped by the end-of-run sweep: it exits when this process does
    // (end of file on its stdin).
    if let Ok(pid) = i32::try_from(child.id()) {
        awf_exec::spare_from_sweeps(pid);
    }
    child.stdin.take()
}

/// Runs the watchdog: reads `+<pgid>` / `-<pgid>` lines from stdin until end of file, then
/// SIGKILLs every group still listed and every process tagged as a descendant of a step of
/// the awf process that started it (daemonised ones included). A `=` line (awf ends
/// normally) ends the reading at once and skips the tagged processes. Malformed lines are
/// ignored. Always succeeds.
pub fn serve() {
    // The awf process that started us: its steps' processes carry its pid in their tag.
    let owner = std::os::unix::process::parent_id();
    let mut groups = BTreeSet::new();
    let mut normal_end = false;
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line == "=" {
            normal_end = true;
            break;
        }
        let (sign, rest) = line.split_at(line.len().min(1));
        let Ok(pgid) = rest.trim().parse::<i32>() else {
            continue;
        };
        match sign {
            "+" => {
                groups.insert(pgid);
            }
            "-" => {
                groups.remove(&pgid);
            }
            _ => {}
        }
    }
    for pgid in &groups {
        let _ = awf_exec::signal_group(*pgid, Signal::SIGKILL);
    }
    // Daemonised descendants (`setsid cmd &`) left those groups but kept the tag; a child
    // being spawned when awf died shows its tag once it has exec'd: look twice. After a
    // normal end the run has stopped its processes itself.
    if owner > 1 && !normal_end {
        awf_exec::kill_tagged_by(owner);
        std::thread::sleep(std::time::Duration::from_millis(50));
        awf_exec::kill_tagged_by(owner);
    }
}
