//! Bash: one shell command in its own process group, bounded in time and output, leaving
//! no process behind.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use awf_domain::mask::Masker;
use awf_domain::ports::tools::ToolOutput;
use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::sys::wait::WaitPidFlag;
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;
use serde_json::Map;
use serde_json::Value;
use tokio::io::AsyncRead;
use tokio::io::AsyncReadExt as _;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use crate::Inner;
use crate::args::Args;

/// Environment variable set on every Bash command: `<awf pid>-<sequence>`, unique per call
/// and inherited by everything the command starts, so that what it leaves behind (even
/// outside its process group) is found and stopped when the call ends.
pub const TAG_VAR: &str = "AWF_TOOL_TAG";

/// How long the pipes are read after the command ended and its leftovers were stopped.
const DRAIN_WINDOW: Duration = Duration::from_secs(1);

static NEXT_TAG: AtomicU64 = AtomicU64::new(1);

/// `$SHELL` when it names an absolute path to a file of a POSIX-family shell
/// ([`is_posix_shell`](awf_domain::interpreter::is_posix_shell)), else `/bin/sh`: the
/// commands are POSIX shell text (`fish -c` fails on them, `tclsh -c` runs nothing).
pub(crate) fn resolve_shell(shell: Option<&OsStr>) -> PathBuf {
    match shell.map(Path::new) {
        Some(p)
            if p.is_absolute()
                && p.is_file()
                && p.to_str()
                    .is_some_and(awf_domain::interpreter::is_posix_shell) =>
        {
            p.to_path_buf()
        }
        _ => PathBuf::from("/bin/sh"),
    }
}

/// Why a command ended.
enum End {
    Exited(Option<ExitStatus>),
    TimedOut,
    Cancelled,
}

pub(crate) async fn run(
    inner: &Arc<Inner>,
    map: &Map<String, Value>,
    cancel: CancellationToken,
) -> ToolOutput {
    let a = Args::new("Bash", map);
    let parsed = (|| {
        let command = a.str(&["command"])?;
        let cwd = a.opt_str(&["cwd"])?;
        // As the schema says (`"type": "integer", "minimum": 1`; the alias too): 0, 1.5 or
        // "1" is refused saying so, never run with another timeout.
        let secs = a.opt_int_at_least(&["timeout_seconds"], 1, "the timeout in seconds")?;
        let ms = a.opt_int_at_least(&["timeout"], 1, "the timeout in milliseconds")?;
        let background = a.opt_bool(&["run_in_background"])?.unwrap_or(false);
        Ok::<_, String>((command, cwd, secs, ms, background))
    })();
    let (command, cwd, secs, ms, background) = match parsed {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e),
    };
    if background {
        return ToolOutput::error(
            "Bash: run_in_background is not supported: every command ends with its call (run it in the foreground, with a timeout)",
        );
    }
    if command.trim().is_empty() {
        return ToolOutput::error("Bash: `command` is empty");
    }
    let lim = &inner.limits;
    let asked = match (secs, ms) {
        (Some(s), _) => Some(Duration::from_secs(s)),
        (None, Some(m)) => Some(Duration::from_millis(m)),
        (None, None) => None,
    };
    let mut timeout = asked
        .filter(|d| !d.is_zero())
        .unwrap_or(lim.bash_default_timeout);
    let mut notes = String::new();
    if timeout > lim.bash_max_timeout {
        let _ = writeln!(
            notes,
            "[awf: timeout lowered to the maximum of {} s]",
            lim.bash_max_timeout.as_secs()
        );
        timeout = lim.bash_max_timeout;
    }
    let dir = match cwd {
        Some(c) => match inner.root.dir(c) {
            Ok(d) => d,
            Err(e) => return ToolOutput::error(format!("Bash: cwd: {e}")),
        },
        None => inner.root.path().to_path_buf(),
    };
    if cancel.is_cancelled() {
        return ToolOutput::error("Bash: cancelled before the command started");
    }

    let tag = format!(
        "{}-{}",
        std::process::id(),
        NEXT_TAG.fetch_add(1, Ordering::Relaxed)
    );
    // Not before awf's watchdog runs: it is what stops the command if awf is killed.
    awf_domain::watchdog_start::wait_for_start();
    let mut cmd = Command::new(&inner.shell);
    for name in awf_domain::withheld::withheld_env() {
        cmd.env_remove(name);
    }
    cmd.arg("-c")
        .arg(command)
        .current_dir(&dir)
        .env(TAG_VAR, &tag)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return ToolOutput::error(format!(
                "Bash: could not start {}: {e}",
                inner.shell.display()
            ));
        }
    };
    let pgid = child.id().and_then(|id| i32::try_from(id).ok());
    let mut guard = Guard {
        pgid,
        tag: tag.clone(),
        armed: true,
    };
    let margin = inner.masker.longest();
    let half = lim.bash_stream_chars / 2;
    let out_cap = Arc::new(Mutex::new(Capture::new(half, margin)));
    let err_cap = Arc::new(Mutex::new(Capture::new(half, margin)));
    let readers = [
        child
            .stdout
            .take()
            .map(|p| tokio::spawn(pump(p, Arc::clone(&out_cap)))),
        child
            .stderr
            .take()
            .map(|p| tokio::spawn(pump(p, Arc::clone(&err_cap)))),
    ];

    let end = tokio::select! {
        s = child.wait() => End::Exited(s.ok()),
        () = tokio::time::sleep(timeout) => End::TimedOut,
        () = cancel.cancelled() => End::Cancelled,
    };
    let status = match end {
        End::Exited(s) => s,
        _ => stop(&mut child, pgid, lim.bash_grace).await,
    };
    // Whatever the command left behind: its group, then anything carrying its tag.
    if let Some(g) = pgid {
        signal_group(g, Signal::SIGKILL);
    }
    sweep_tagged(&tag, lim.bash_grace).await;
    if let Some(g) = pgid {
        reap_group(g).await;
    }
    guard.armed = false;
    let mut readers: Vec<_> = readers.into_iter().flatten().collect();
    let drain = async {
        for r in &mut readers {
            let _ = r.await;
        }
    };
    let drained = tokio::time::timeout(DRAIN_WINDOW, drain).await.is_ok();
    // A pipe still held open (by a process that shed its marker) is not read any longer.
    for r in &readers {
        r.abort();
    }

    let masker = &inner.masker;
    let stdout = lock(&out_cap).render(masker, "stdout");
    let stderr = lock(&err_cap).render(masker, "stderr");
    let mut text = String::new();
    text.push_str(&stdout);
    if !stderr.is_empty() {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("--- stderr ---\n");
        text.push_str(&stderr);
    }
    if text.is_empty() {
        text.push_str("(no output)");
    }
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&notes);
    if !drained {
        text.push_str(
            "[awf: a leftover process held the output pipes open; output read until then]\n",
        );
    }
    let code = status.and_then(|s| s.code());
    let signal = status.and_then(|s| s.signal());
    let failed = match end {
        End::TimedOut => {
            let _ = writeln!(
                text,
                "[awf: timed out after {}; the command's processes were stopped (SIGTERM, then SIGKILL after {} s)]",
                human(timeout),
                lim.bash_grace.as_secs()
            );
            true
        }
        End::Cancelled => {
            let _ = writeln!(
                text,
                "[awf: cancelled; the command's processes were stopped (SIGTERM, then SIGKILL after {} s)]",
                lim.bash_grace.as_secs()
            );
            true
        }
        End::Exited(_) => match (code, signal) {
            (Some(0), _) => {
                text.push_str("[awf: exit code 0]\n");
                false
            }
            (Some(c), _) => {
                let _ = writeln!(text, "[awf: exit code {c}]");
                true
            }
            (None, Some(s)) => {
                let _ = writeln!(text, "[awf: killed by signal {s}]");
                true
            }
            (None, None) => {
                text.push_str("[awf: exit status unknown]\n");
                true
            }
        },
    };
    drop(guard);
    if failed {
        ToolOutput::error(text)
    } else {
        ToolOutput::text(text)
    }
}

fn human(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

fn lock(m: &Mutex<Capture>) -> std::sync::MutexGuard<'_, Capture> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// SIGTERM to the group, up to `grace` for the child to exit, SIGKILL to the group.
async fn stop(
    child: &mut tokio::process::Child,
    pgid: Option<i32>,
    grace: Duration,
) -> Option<ExitStatus> {
    let Some(g) = pgid else {
        return child.wait().await.ok();
    };
    signal_group(g, Signal::SIGTERM);
    if let Ok(s) = tokio::time::timeout(grace, child.wait()).await {
        signal_group(g, Signal::SIGKILL);
        return s.ok();
    }
    signal_group(g, Signal::SIGKILL);
    tokio::time::timeout(grace, child.wait())
        .await
        .ok()
        .and_then(Result::ok)
}

/// Sends `sig` to process group `pgid` (> 1); a group that is gone is fine.
fn signal_group(pgid: i32, sig: Signal) {
    if pgid > 1 {
        let _ = nix::sys::signal::killpg(Pid::from_raw(pgid), sig);
    }
}

/// Reaps exited members of group `pgid` that this process adopted (it is a subreaper), for
/// at most a second.
async fn reap_group(pgid: i32) {
    let t0 = Instant::now();
    loop {
        match nix::sys::wait::waitpid(Pid::from_raw(-pgid), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => {
                if t0.elapsed() >= Duration::from_secs(1) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => return,
        }
    }
}

/// The pids of the processes whose environment holds `TAG_VAR=tag` (from `/proc`).
pub(crate) fn tagged(tag: &str) -> BTreeSet<i32> {
    let needle = format!("{TAG_VAR}={tag}");
    let me = i32::try_from(std::process::id()).unwrap_or(0);
    let mut out = BTreeSet::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let hit = std::fs::read(e.path().join("environ"))
            .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes()));
        if hit && !is_zombie(pid) {
            out.insert(pid);
        }
    }
    out
}

/// SIGKILLs every process whose environment holds a [`TAG_VAR`] set by the process `owner`
/// (`<owner>-…`: what its Bash calls started), and the process group of each that leads one
/// (a command's shell leads its group, so members that cleared their environment go too).
/// For a helper that outlives `owner` (the `awf` binary's watchdog, when `owner` was
/// SIGKILLed mid-call); it does not wait. Returns how many processes were signalled.
pub fn kill_tagged_by(owner: u32) -> usize {
    let needle = format!("{TAG_VAR}={owner}-");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let me = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    let mut killed = 0;
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let hit = std::fs::read(e.path().join("environ")).is_ok_and(|env| {
            env.split(|b| *b == 0)
                .any(|v| v.starts_with(needle.as_bytes()))
        });
        if !hit {
            continue;
        }
        if group_of(pid) == Some(pid) {
            signal_group(pid, Signal::SIGKILL);
        }
        if nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
            killed += 1;
        }
    }
    killed
}

/// The process group of `pid` (`/proc/<pid>/stat`: `pid (comm) state ppid pgrp …`).
fn group_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(2)?.parse().ok()
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|st| st == "Z" || st == "X")
    })
}

/// Stops every process carrying `tag`: SIGTERM, up to `grace`, SIGKILL; reaps the ones this
/// process adopted. A few rounds, for processes started while the first were stopping.
async fn sweep_tagged(tag: &str, grace: Duration) {
    for _ in 0..8 {
        let pids = tagged(tag);
        if pids.is_empty() {
            return;
        }
        for &p in &pids {
            let _ = nix::sys::signal::kill(Pid::from_raw(p), Signal::SIGTERM);
        }
        let t0 = Instant::now();
        let mut left = pids;
        while !left.is_empty() && t0.elapsed() < grace {
            tokio::time::sleep(Duration::from_millis(10)).await;
            reap(&left);
            left.retain(|p| !gone(*p));
        }
        for &p in &left {
            let _ = nix::sys::signal::kill(Pid::from_raw(p), Signal::SIGKILL);
        }
        let t1 = Instant::now();
        while !left.is_empty() && t1.elapsed() < grace {
            tokio::time::sleep(Duration::from_millis(10)).await;
            reap(&left);
            left.retain(|p| !gone(*p));
        }
    }
}

fn reap(pids: &BTreeSet<i32>) {
    for &p in pids {
        let _ = nix::sys::wait::waitpid(Pid::from_raw(p), Some(WaitPidFlag::WNOHANG));
    }
}

fn gone(pid: i32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists() || is_zombie(pid)
}

/// Kills the command's group and tagged processes at once if the call is dropped midway.
struct Guard {
    pgid: Option<i32>,
    tag: String,
    armed: bool,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some(g) = self.pgid {
            signal_group(g, Signal::SIGKILL);
        }
        for p in tagged(&self.tag) {
            let _ = nix::sys::signal::kill(Pid::from_raw(p), Signal::SIGKILL);
        }
    }
}

async fn pump(mut pipe: impl AsyncRead + Unpin, cap: Arc<Mutex<Capture>>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => lock(&cap).push(&buf[..n]),
        }
    }
}

/// The head and tail of one stream, in bytes, with room for masking across the cuts.
struct Capture {
    /// Characters shown of the head, and of the tail.
    half: usize,
    /// Bytes kept of the head and of the tail (`half` characters of up to 4 bytes, plus the
    /// longest secret so that one straddling a cut is still masked whole).
    keep: usize,
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    total: u64,
}

impl Capture {
    fn new(half: usize, margin: usize) -> Self {
        Self {
            half,
            keep: half.saturating_mul(4).saturating_add(margin),
            head: Vec::new(),
            tail: std::collections::VecDeque::new(),
            total: 0,
        }
    }

    fn push(&mut self, mut chunk: &[u8]) {
        self.total += chunk.len() as u64;
        let room = self.keep.saturating_sub(self.head.len());
        let n = room.min(chunk.len());
        self.head.extend_from_slice(&chunk[..n]);
        chunk = &chunk[n..];
        if chunk.len() >= self.keep {
            chunk = &chunk[chunk.len() - self.keep..];
            self.tail.clear();
        }
        self.tail.extend(chunk.iter().copied());
        while self.tail.len() > self.keep {
            self.tail.pop_front();
        }
    }

    /// The stream as text: masked, lossy UTF-8, at most `2 * half` characters, the middle
    /// replaced by a mark when cut.
    fn render(&self, masker: &Masker, name: &str) -> String {
        let head = String::from_utf8_lossy(&self.head);
        let head = masker.mask(&head);
        if self.tail.is_empty() && head.chars().count() <= self.half * 2 {
            return head.into_owned();
        }
        let first: String = head.chars().take(self.half).collect();
        let tail_bytes: Vec<u8> = self.tail.iter().copied().collect();
        let joined;
        let tail_src: &[u8] = if self.tail.is_empty() {
            // Everything is in the head: its end is the tail.
            joined = head.as_bytes().to_vec();
            &joined
        } else {
            &tail_bytes
        };
        let tail = String::from_utf8_lossy(tail_src);
        let tail = masker.mask(&tail);
        let n = tail.chars().count();
        let last: String = tail.chars().skip(n.saturating_sub(self.half)).collect();
        let shown = (first.len() + last.len()) as u64;
        format!(
            "{first}\n[awf: {name} cut: {} bytes in all, about {} in the middle omitted]\n{last}",
            self.total,
            self.total.saturating_sub(shown)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_falls_back_to_bin_sh() {
        assert_eq!(resolve_shell(None), PathBuf::from("/bin/sh"));
        assert_eq!(
            resolve_shell(Some(OsStr::new("bash"))),
            PathBuf::from("/bin/sh")
        );
        assert_eq!(
            resolve_shell(Some(OsStr::new("/no/such/shell"))),
            PathBuf::from("/bin/sh")
        );
        assert_eq!(
            resolve_shell(Some(OsStr::new("/bin/sh"))),
            PathBuf::from("/bin/sh")
        );
        // A file that exists but is no POSIX shell.
        let not_a_shell = std::env::current_exe().unwrap_or_default();
        assert_eq!(
            resolve_shell(Some(not_a_shell.as_os_str())),
            PathBuf::from("/bin/sh")
        );
        if Path::new("/bin/bash").is_file() {
            assert_eq!(
                resolve_shell(Some(OsStr::new("/bin/bash"))),
                PathBuf::from("/bin/bash")
            );
        }
    }
}
