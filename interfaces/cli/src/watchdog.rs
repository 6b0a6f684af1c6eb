//! The watchdog: a helper process (`awf __watchdog`, hidden) that SIGKILLs the process groups
//! of a run's steps when the awf process running them dies without stopping them (SIGKILL,
//! OOM killer).
//!
//! Every child has a parent-death signal, but that reaches only the child itself: the
//! processes a shell step forked (`make`, `sleep 300; echo done`) are re-parented to init and
//! would live on. They stay in the step's process group, though. The `awf` process feeds
//! the watchdog one line per group over a pipe (`+<pgid>` when a step's child starts,
//! `-<pgid>` when its group is gone); when the pipe reaches end of file (awf exited or died)
//! the watchdog SIGKILLs every group still listed and exits. After a normal exit nothing is
//! listed and it just exits.
//!
//! The watchdog runs in its own process group (terminal signals do not reach it) and without
//! a parent-death signal (it must outlive awf). Source: issue 7 ("Processes").

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

/// Feeds every child process group of this process to a watchdog from now on. The watchdog
/// is started with the first group (runs that start no process pay nothing). Best effort:
/// when it cannot be started, runs go on without it (the parent-death signal still stops
/// the direct children).
pub fn install() {
    let feed: Mutex<Feed> = Mutex::new(Feed {
        pipe: None,
        tried: false,
    });
    awf_exec::set_group_observer(Box::new(move |started, pgid| {
        let mut feed = feed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !feed.tried {
            feed.tried = true;
            feed.pipe = spawn();
        }
        let line = format!("{}{pgid}\n", if started { '+' } else { '-' });
        if let Some(pipe) = feed.pipe.as_mut() {
            // A watchdog that died cannot be helped; the run goes on.
            let _ = pipe.write_all(line.as_bytes());
        }
    }));
}

/// The pipe to the watchdog, once started.
struct Feed {
    pipe: Option<ChildStdin>,
    tried: bool,
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
    // Not waited for: it exits when this process does (end of file on its stdin), or is
    // reaped by the end-of-run sweep.
    child.stdin.take()
}

/// Runs the watchdog: reads `+<pgid>` / `-<pgid>` lines from stdin until end of file, then
/// SIGKILLs every group still listed and every process tagged as a descendant of a step of
/// the awf process that started it (daemonised ones included). Malformed lines are ignored. Always succeeds.
pub fn serve() {
    // The awf process that started us: its steps' processes carry its pid in their tag.
    let owner = std::os::unix::process::parent_id();
    let mut groups = BTreeSet::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
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
    for pgid in groups {
        let _ = awf_exec::signal_group(pgid, Signal::SIGKILL);
    }
    // Daemonised descendants (`setsid cmd &`) left those groups but kept the tag.
    if owner > 1 {
        awf_exec::kill_tagged_by(owner);
    }
}
