//! The watchdog: a helper process (`awf __watchdog`, hidden) that SIGKILLs the process groups
//! of a run's steps when the awf process running them dies without stopping them (SIGKILL,
//! OOM killer).
//!
//! A parent-death signal would reach only a step's direct child: the processes a shell step
//! forked (`make`, `sleep 300; echo done`) are re-parented and would live on. They stay in
//! the step's process group, though, and carry the run's `AWF_PROCESS_TAG` (`<awf pid>-…`).
//! The watchdog holds the read end of a pipe from awf; when it reaches end of file without
//! the `=` line awf writes when it ends normally (awf died), the watchdog SIGKILLs every
//! process tagged by that awf process, and the process group of each that leads one (a
//! step's direct child leads its group, so members that cleared their environment go too);
//! twice, a moment apart, for a child that was being spawned when awf died. The built-in
//! Bash tool's commands (`AWF_TOOL_TAG=<awf pid>-…`) go the same way, so `awf mcp-serve`
//! starts a watchdog too. Nothing is sent per step (no wake-up of the watchdog on the way of
//! a run), except for a step that exits leaving processes in its group (`server &`, kept for
//! the run's later steps): awf writes `+<group>` then, and `-<group>` when that group is gone
//! (see `awf_exec::set_group_observer`), and the watchdog SIGKILLs the groups still listed
//! too, so their members die with awf even when they cleared their environment (no tag).
//!
//! The watchdog is started before the first step and does the parent-death signal's job
//! too (a step's direct child leads its group), so while it runs children get no
//! parent-death signal and are spawned with `posix_spawn` instead of `fork`; when it cannot
//! be started, or has exited (checked before each spawn), children get the signal again.
//!
//! Nearly always the watchdog only waits: it waits as a shell (`/bin/sh -c`, see `WAITER`),
//! which execs `awf __watchdog` only when awf died.
//!
//! The watchdog runs in its own process group (terminal signals do not reach it), without a
//! parent-death signal (it must outlive awf), and is spared by the end-of-run sweep of
//! adopted processes (it exits by itself when awf does). Source: issue 7 ("Processes").

use std::io::BufRead;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::ChildStdin;
use std::process::Stdio;
use std::sync::Mutex;

/// Name of the hidden subcommand that runs the watchdog.
pub const SUBCOMMAND: &str = "__watchdog";

/// Environment variable through which awf tells the watchdog its own pid (the owner whose
/// tagged processes it kills). Read at start it would be racy: awf may die before the
/// watchdog asks for its parent, which is then the subreaper or init.
const OWNER_VAR: &str = "AWF_WATCHDOG_OWNER";

/// Starts the watchdog; while it runs, children get no parent-death signal (the watchdog
/// stops them if awf dies). Best effort: when it cannot be started, runs go on with the
/// parent-death signal (which stops the direct children).
///
/// Ends a start announced with `awf_domain::watchdog_start::announce` either way.
pub fn install() {
    let started = spawn();
    let (pipe, child) = match started {
        Some((p, c)) => (Some(p), Some(c)),
        None => {
            awf_domain::watchdog_start::ended();
            (None, None)
        }
    };
    let running = pipe.is_some();
    *feed() = pipe;
    *lock(&CHILD) = child;
    if running {
        // Told only about the groups kept past their steps (none for most runs).
        awf_exec::set_group_observer(Box::new(|kept, pgid| {
            let line = format!("{}{pgid}\n", if kept { '+' } else { '-' });
            if let Some(p) = feed().as_mut() {
                let _ = p.write_all(line.as_bytes());
            }
        }));
    }
}

/// Tells the watchdog that awf ends normally (nothing to clean up) and closes its pipe: it
/// exits at once, without waiting for awf. Call as soon as the run is over and its
/// processes are gone (the sweep of adopted processes done), so that its exit overlaps
/// what awf still has to do; [`release`] then finds it gone. Nothing may be spawned after
/// it: awf's death would no longer stop it. A second call does nothing.
pub fn stand_down() {
    let mut pipe = feed();
    if let Some(p) = pipe.as_mut() {
        let _ = p.write_all(b"=\n");
    }
    *pipe = None;
}

/// [`stand_down`] if not done yet, then waits (a second at most) for the watchdog to be
/// gone, so that nothing awf started outlives it.
pub fn release() {
    stand_down();
    if let Some(mut child) = lock(&CHILD).take() {
        // It exits within a fraction of a millisecond: woken by its exit (a pidfd), else
        // polled from 50 µs, doubling up to 5 ms (a fixed 1 ms sleep cost every run about a
        // millisecond at its end).
        let limit = std::time::Duration::from_secs(1);
        let t0 = std::time::Instant::now();
        if matches!(child.try_wait(), Ok(None)) && awf_exec::wait_exited(child.id(), limit) {
            let _ = child.try_wait();
            return;
        }
        let mut nap = std::time::Duration::from_micros(50);
        while matches!(child.try_wait(), Ok(None)) && t0.elapsed() < limit {
            std::thread::sleep(nap);
            nap = (nap * 2).min(std::time::Duration::from_millis(5));
        }
    }
}

/// The pipe to the watchdog, while it runs.
static FEED: Mutex<Option<ChildStdin>> = Mutex::new(None);

/// The watchdog process, to wait for at [`release`].
static CHILD: Mutex<Option<std::process::Child>> = Mutex::new(None);

fn lock<T>(m: &'static Mutex<T>) -> std::sync::MutexGuard<'static, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn feed() -> std::sync::MutexGuard<'static, Option<ChildStdin>> {
    lock(&FEED)
}

/// The shell that waits in the watchdog's place (see [`WAITER`]).
const WAITER_SHELL: &str = "/bin/sh";

/// What the watchdog's shell runs (`$0`: the awf binary's path; `$1`: `__watchdog`; its
/// stdout: the awf binary, opened read-only): it reads the one line awf writes when it ends
/// normally (`=`) and exits; at end of file without it (awf died), it execs
/// `awf __watchdog`, whose stdin (the same pipe) is at end of file: it stops the processes
/// at once. Any other line (`+<group>`: a group kept past its step) also execs
/// `awf __watchdog`, which gets that line in [`FIRST_VAR`] and reads on. The binary is exec'd through the descriptor it holds (`/proc/self/fd/3`), so that
/// a binary deleted or renamed during the run (an upgrade, a cleaned build directory) still
/// starts (breaker: 6 of 6 runs left their steps' processes alive); by its path when that
/// descriptor is not there.
///
/// A shell costs a run about half a millisecond of CPU less than awf's own binary mapped,
/// linked and started for a process that, nearly always, only waits (issue 9: per-run cost;
/// a one-step run is CPU-bound on two cores). `$1` is [`SUBCOMMAND`], so that the waiting
/// shell's command line ends as the watchdog's (`… __watchdog`): what tools and tests that
/// tell the watchdog from a step's processes look at.
const WAITER: &str = r#"read -r line; [ "$line" = "=" ] && exit 0; export AWF_WATCHDOG_FIRST="$line"; exec 3<&1 >/dev/null; [ -x /proc/self/fd/3 ] && exec /proc/self/fd/3 "$1"; exec "$0" "$1""#;

/// The line the waiting shell read before it exec'd `awf __watchdog` (see [`WAITER`]).
const FIRST_VAR: &str = "AWF_WATCHDOG_FIRST";

/// Starts the watchdog in its own process group; its stdin is the returned pipe. The
/// waiting shell ([`WAITER`]) when `/bin/sh` is there, else `awf __watchdog` itself.
fn spawn() -> Option<(ChildStdin, std::process::Child)> {
    let exe = std::env::current_exe().ok()?;
    let mut command = if std::path::Path::new(WAITER_SHELL).is_file() {
        let mut c = std::process::Command::new(WAITER_SHELL);
        c.arg("-c").arg(WAITER).arg(&exe).arg(SUBCOMMAND);
        // The binary itself, for the exec when awf died (see `WAITER`).
        c.stdout(std::fs::File::open(&exe).map_or_else(|_| Stdio::null(), Stdio::from));
        c
    } else {
        let mut c = std::process::Command::new(&exe);
        c.arg(SUBCOMMAND).stdout(Stdio::null());
        c
    };
    // Without the tag this awf process may carry as some step's child (an `awf run` inside a
    // step): the outer watchdog must not kill this one before it has done its work.
    let mut child = command
        .env_remove(awf_exec::TAG_VAR)
        .env(OWNER_VAR, std::process::id().to_string())
        .stdin(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .ok()?;
    // Not stopped by the end-of-run sweep, and waited for only by `release`: it exits when
    // this process does (end of file on its stdin). Registered, it makes the parent-death
    // signal unneeded.
    if let Ok(pid) = i32::try_from(child.id()) {
        awf_exec::set_watchdog(pid);
    }
    let pipe = child.stdin.take()?;
    Some((pipe, child))
}

/// Runs the watchdog: reads stdin until end of file, keeping the groups listed by `+<group>`
/// lines and not yet withdrawn by `-<group>` ones (the first line may come through
/// [`FIRST_VAR`]); unless a `=` line came first (awf ends normally and has stopped its
/// processes itself), SIGKILLs every process tagged as a descendant of a step of the awf
/// process that started it (daemonised ones included), the process group of each that
/// leads one, and the groups kept; twice, a moment apart, for a child that was being
/// spawned (not yet exec'd with its tag) when awf died. Always succeeds.
pub fn serve() {
    // The awf process that started us: its steps' processes carry its pid in their tag.
    // Named by awf itself; the parent only as a fallback (an older awf), since a parent
    // that died before this line ran is no longer our parent.
    let owner = std::env::var(OWNER_VAR)
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or_else(std::os::unix::process::parent_id);
    let mut groups = std::collections::BTreeSet::new();
    if let Ok(first) = std::env::var(FIRST_VAR) {
        if first.trim_end() == "=" {
            return;
        }
        note_group(&mut groups, &first);
    }
    let mut stdin = std::io::stdin().lock();
    let mut line = String::new();
    loop {
        line.clear();
        match stdin.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line.trim_end() == "=" => return,
            Ok(_) => note_group(&mut groups, &line),
        }
    }
    let kill_groups = || {
        for &g in &groups {
            let _ = awf_exec::signal_group(g, nix::sys::signal::Signal::SIGKILL);
        }
    };
    kill_groups();
    if owner > 1 {
        // The steps' processes, and those of the built-in Bash tool (`awf mcp-serve`, the
        // in-process tools of `openai_compatible`), which carry their own tag.
        awf_exec::kill_tagged_by(owner);
        awf_tools::kill_tagged_by(owner);
        std::thread::sleep(std::time::Duration::from_millis(50));
        kill_groups();
        awf_exec::kill_tagged_by(owner);
        awf_tools::kill_tagged_by(owner);
    }
}

/// Applies one line of awf's feed to the kept groups: `+<group>` adds it, `-<group>` removes
/// it; anything else (a group id that is not one, `<= 1`) is ignored.
fn note_group(groups: &mut std::collections::BTreeSet<i32>, line: &str) {
    let line = line.trim();
    let (add, id) = match line.split_at_checked(1) {
        Some(("+", id)) => (true, id),
        Some(("-", id)) => (false, id),
        _ => return,
    };
    let Some(g) = id.parse::<i32>().ok().filter(|g| *g > 1) else {
        return;
    };
    if add {
        groups.insert(g);
    } else {
        groups.remove(&g);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Runs [`WAITER`] as the watchdog does, `$0` a script that records its arguments and
    /// its stdin in place of awf (its stdout that script, opened), with `input` on its stdin
    /// then end of file, the script deleted first when `deleted`; what the script recorded
    /// (`None`: not run) and the shell's exit code.
    fn wait_with(input: &[u8], deleted: bool) -> (Option<String>, Option<i32>) {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("ran");
        let fake = dir.path().join("fake awf");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\nprintf '%s|' \"$@\" \"${{AWF_WATCHDOG_FIRST-unset}}\" > '{}'\ncat >> '{}'\n",
                log.display(),
                log.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut child = std::process::Command::new(WAITER_SHELL)
            .arg("-c")
            .arg(WAITER)
            .arg(&fake)
            .arg(SUBCOMMAND)
            .stdin(Stdio::piped())
            .stdout(std::fs::File::open(&fake).unwrap())
            .spawn()
            .unwrap();
        if deleted {
            std::fs::remove_file(&fake).unwrap();
        }
        child.stdin.take().unwrap().write_all(input).unwrap();
        let status = child.wait().unwrap();
        (std::fs::read_to_string(&log).ok(), status.code())
    }

    #[test]
    fn the_waiting_shell_exits_on_the_end_line_and_hands_over_to_awf_otherwise() {
        // awf ended normally: nothing else runs.
        assert_eq!(wait_with(b"=\n", false), (None, Some(0)));
        // awf died (end of file): `awf __watchdog` runs, its stdin at end of file too.
        let ran = (Some("__watchdog||".to_owned()), Some(0));
        assert_eq!(wait_with(b"", false), ran);
        // The binary deleted since the start: the descriptor the shell holds still runs it.
        assert_eq!(wait_with(b"", true), ran);
        // Anything else first (a kept group): awf __watchdog gets that line and reads on.
        assert_eq!(
            wait_with(b"+4242\n=\n", false),
            (Some("__watchdog|+4242|=\n".to_owned()), Some(0))
        );
    }

    #[test]
    fn the_feed_lists_the_groups_added_and_not_withdrawn() {
        let mut groups = std::collections::BTreeSet::new();
        for line in [
            "+300\n", "+301\n", "-300\n", "+1\n", "+0", "-x", "+-5", "garbage", "+302",
        ] {
            note_group(&mut groups, line);
        }
        assert_eq!(groups.into_iter().collect::<Vec<_>>(), [301, 302]);
    }
}
