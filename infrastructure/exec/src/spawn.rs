//! Starting a child with `posix_spawn` and an environment block built once, and waiting for
//! it through a pidfd.
//!
//! std's `Command` rebuilds the child's whole environment at every spawn as soon as one
//! variable is set or removed: it copies awf's environment into a map, applies the changes
//! and turns every entry into a fresh C string (about 55 K instructions a step, most of what
//! a spawn costs awf itself). Every child gets a [`TAG_VAR`] of its own, so every spawn paid
//! it. Here the environment a child sees (awf's own, as it was when the first child was
//! started, plus the command's `env`, minus the withheld names) is built once per distinct
//! `env` and kept; a spawn only slots the child's tag into it, at the place std's sorted map
//! would have put it, so the child sees the very same environment, in the same order.
//!
//! Everything else is what std does on this path: `posix_spawn` (vfork + exec), the child in
//! its own process group, SIGPIPE back to its default disposition, the signal mask
//! awf was started with (see [`hold_file_size_signal`]), stdin on `/dev/null`, stdout and stderr on fresh pipes (close-on-exec in awf).
//! The child is waited for through a pidfd registered with the runtime, as tokio does, opened
//! only when it has not exited by the time it is waited for.
//!
//! Only for what this path can do without `unsafe`: no parent-death signal (needs a hook
//! between fork and exec), no working directory (`posix_spawn_file_actions_addchdir_np` has
//! no safe wrapper), a program given by path (no `PATH` lookup). [`ProcessExecutor`]
//! (crate::ProcessExecutor) uses std's `Command` for the rest.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::ffi::CString;
use std::ffi::OsStr;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::OnceLock;
use std::sync::PoisonError;

use nix::spawn::PosixSpawnAttr;
use nix::spawn::PosixSpawnFileActions;
use nix::spawn::PosixSpawnFlags;
use nix::sys::signal::SigSet;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use rustix::process::PidfdFlags;
use rustix::process::WaitIdOptions;
use rustix::process::WaitIdStatus;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe::Receiver;

use crate::reaper::TAG_VAR;
use crate::shell::Invocation;

/// A child's environment without its tag: `NAME=value` entries sorted by name (the order
/// std's `Command` gives them), and where the tag goes.
#[derive(Debug)]
pub(crate) struct EnvBlock {
    entries: Vec<CString>,
    /// Index in `entries` at which the `TAG_VAR=…` entry is inserted.
    tag_at: usize,
}

impl EnvBlock {
    /// The entries with `tag` in its place, as `posix_spawn` takes them.
    fn with_tag<'a>(&'a self, tag: &'a CStr) -> Vec<&'a CStr> {
        let mut v = Vec::with_capacity(self.entries.len() + 1);
        v.extend(self.entries[..self.tag_at].iter().map(CString::as_c_str));
        v.push(tag);
        v.extend(self.entries[self.tag_at..].iter().map(CString::as_c_str));
        v
    }
}

/// What an [`EnvBlock`] was built from: the command's `env` and the withheld names.
type EnvKey = (Vec<(String, String)>, Vec<String>);

/// The last environment built, and what it was built from (a run's steps share theirs).
static LAST_ENV: Mutex<Option<(EnvKey, Arc<EnvBlock>)>> = Mutex::new(None);

/// awf's own environment, read when the first child was started (awf never changes it: that
/// would take `unsafe`).
fn inherited() -> &'static BTreeMap<OsString, OsString> {
    static ENV: OnceLock<BTreeMap<OsString, OsString>> = OnceLock::new();
    ENV.get_or_init(|| std::env::vars_os().collect())
}

/// Each variable of the environment a child whose command adds `env` gets (without
/// `withheld`), with the bytes it takes in that environment (`NAME=value` and its NUL): what
/// a spawn refused with `E2BIG` reports.
pub(crate) fn env_sizes(env: &[(String, String)], withheld: &[String]) -> Vec<(String, usize)> {
    let mut map: BTreeMap<String, usize> = inherited()
        .iter()
        .map(|(k, v)| (k.to_string_lossy().into_owned(), k.len() + v.len() + 2))
        .collect();
    for (k, v) in env {
        map.insert(k.clone(), k.len() + v.len() + 2);
    }
    for name in withheld {
        map.remove(name);
    }
    map.into_iter().collect()
}

/// The environment for a child whose command adds `env`, with `withheld` removed; `None`
/// when a name or value holds a NUL byte (std's `Command` reports that error).
pub(crate) fn env_block(env: &[(String, String)], withheld: &[String]) -> Option<Arc<EnvBlock>> {
    let mut last = LAST_ENV.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(((e, w), block)) = last.as_ref()
        && e.as_slice() == env
        && w.as_slice() == withheld
    {
        return Some(Arc::clone(block));
    }
    let block = Arc::new(build_env(inherited(), env, withheld)?);
    *last = Some(((env.to_vec(), withheld.to_vec()), Arc::clone(&block)));
    Some(block)
}

/// `base` overridden by `env`, without `withheld` and [`TAG_VAR`], as sorted entries.
fn build_env(
    base: &BTreeMap<OsString, OsString>,
    env: &[(String, String)],
    withheld: &[String],
) -> Option<EnvBlock> {
    let mut map: BTreeMap<&OsStr, &OsStr> = base
        .iter()
        .map(|(k, v)| (k.as_os_str(), v.as_os_str()))
        .collect();
    for (k, v) in env {
        map.insert(OsStr::new(k), OsStr::new(v));
    }
    for name in withheld {
        map.remove(OsStr::new(name));
    }
    map.remove(OsStr::new(TAG_VAR));
    let tag_at = map.keys().take_while(|k| **k < OsStr::new(TAG_VAR)).count();
    let mut entries = Vec::with_capacity(map.len());
    for (k, v) in map {
        let mut entry = Vec::with_capacity(k.len() + v.len() + 2);
        entry.extend_from_slice(k.as_bytes());
        entry.push(b'=');
        entry.extend_from_slice(v.as_bytes());
        entries.push(CString::new(entry).ok()?);
    }
    Some(EnvBlock { entries, tag_at })
}

/// Whether this kernel gives pidfds (Linux 5.3 and later, unless a sandbox refuses them).
fn pidfds_work() -> bool {
    static WORKS: OnceLock<bool> = OnceLock::new();
    *WORKS.get_or_init(|| {
        rustix::process::Pid::from_raw(i32::try_from(crate::reaper::own_pid()).unwrap_or(0))
            .is_some_and(|me| rustix::process::pidfd_open(me, PidfdFlags::empty()).is_ok())
    })
}

/// `/dev/null`, opened once (close-on-exec), duplicated onto each child's stdin.
fn dev_null() -> io::Result<&'static File> {
    static NULL: OnceLock<File> = OnceLock::new();
    if let Some(f) = NULL.get() {
        return Ok(f);
    }
    let f = File::open("/dev/null")?;
    Ok(NULL.get_or_init(|| f))
}

/// Whether [`Prepared::spawn`] can start `inv` (else std's `Command` does): a program given by path,
/// no working directory, pidfds available.
pub(crate) fn can_spawn(inv: &Invocation, dir: Option<&std::path::Path>) -> bool {
    dir.is_none() && inv.program.as_bytes().contains(&b'/') && pidfds_work()
}

/// A child started by [`Prepared::spawn`], waited for through its pidfd. Dropped before it was waited
/// for, it is SIGKILLed and reaped later (see [`reap_orphans`]).
#[derive(Debug)]
pub(crate) struct SpawnedChild {
    pid: i32,
    /// Opened by the first [`wait`](Self::wait) that finds the child still running: a child
    /// that has exited by then (a short command, waited for once its pipes closed) is reaped
    /// without one, which saves opening, registering and closing it (issue 9: per step).
    pidfd: Option<AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
}

/// Pidfds of children dropped before they exited, reaped at the next spawn.
static ORPHANS: Mutex<Vec<OwnedFd>> = Mutex::new(Vec::new());

/// Reaps the dropped children that have exited since.
fn reap_orphans() {
    let mut orphans = ORPHANS.lock().unwrap_or_else(PoisonError::into_inner);
    orphans.retain(|fd| matches!(try_wait(fd.as_fd()), Ok(None)));
}

/// `waitid` on a pidfd without blocking: `Some` once the child has exited (and is reaped).
fn try_wait(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<Option<ExitStatus>> {
    try_wait_id(|| rustix::process::WaitId::PidFd(fd))
}

/// `waitid` on the child `pid` without blocking: `Some` once it has exited (and is reaped).
fn try_wait_pid(pid: i32) -> io::Result<Option<ExitStatus>> {
    let pid = child_pid(pid)?;
    try_wait_id(|| rustix::process::WaitId::Pid(pid))
}

/// `waitid` on what `id` names without blocking, retried on `EINTR`.
fn try_wait_id<'a>(id: impl Fn() -> rustix::process::WaitId<'a>) -> io::Result<Option<ExitStatus>> {
    loop {
        match rustix::process::waitid(id(), WaitIdOptions::EXITED | WaitIdOptions::NOHANG) {
            Ok(s) => return Ok(s.map(|s| exit_status(&s))),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

fn child_pid(pid: i32) -> io::Result<rustix::process::Pid> {
    rustix::process::Pid::from_raw(pid).ok_or_else(|| io::Error::other("no child with pid 0"))
}

/// A pidfd for the child `pid`.
fn pidfd(pid: i32) -> io::Result<OwnedFd> {
    Ok(rustix::process::pidfd_open(
        child_pid(pid)?,
        PidfdFlags::empty(),
    )?)
}

/// A pidfd for the child `pid`, registered with the runtime.
fn open_pidfd(pid: i32) -> io::Result<AsyncFd<OwnedFd>> {
    AsyncFd::with_interest(pidfd(pid)?, tokio::io::Interest::READABLE)
}

/// Blocks until the child `pid` of this process has exited (it is left to be reaped by its
/// owner) or `timeout` has passed; `true` when it has exited. Woken by the child's exit
/// through a pidfd, not by polling; without pidfds (Linux before 5.3, a sandbox), `false` at
/// once.
pub fn wait_exited(pid: u32, timeout: std::time::Duration) -> bool {
    let Some(fd) = i32::try_from(pid).ok().and_then(|p| pidfd(p).ok()) else {
        return false;
    };
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Ok(left) = rustix::event::Timespec::try_from(left) else {
            return false;
        };
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        match rustix::event::poll(&mut fds, Some(&left)) {
            Ok(n) => return n > 0,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return false,
        }
    }
}

/// The wait status std would report for what `waitid` said.
fn exit_status(s: &WaitIdStatus) -> ExitStatus {
    let raw = match (s.exit_status(), s.terminating_signal()) {
        (Some(code), _) => (code & 0xff) << 8,
        (None, Some(sig)) => (sig & 0x7f) | if s.dumped() { 0x80 } else { 0 },
        (None, None) => 0,
    };
    ExitStatus::from_raw(raw)
}

impl SpawnedChild {
    /// The child's pid.
    pub(crate) fn id(&self) -> u32 {
        self.pid.unsigned_abs()
    }

    /// Waits for the child to exit and reaps it; cancel-safe (a dropped wait loses nothing).
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(s) = self.status {
            return Ok(s);
        }
        if self.pidfd.is_none() {
            if let Some(s) = try_wait_pid(self.pid)? {
                self.status = Some(s);
                return Ok(s);
            }
            self.pidfd = Some(open_pidfd(self.pid)?);
        }
        let Some(fd) = &self.pidfd else {
            return Err(io::Error::other("child already reaped"));
        };
        loop {
            let mut ready = fd.readable().await?;
            if let Some(s) = try_wait(fd.get_ref().as_fd())? {
                self.status = Some(s);
                self.pidfd = None;
                return Ok(s);
            }
            ready.clear_ready();
        }
    }
}

impl Drop for SpawnedChild {
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        let _ = nix::sys::signal::kill(Pid::from_raw(self.pid), Signal::SIGKILL);
        let fd = match self.pidfd.take() {
            Some(fd) => fd.into_inner(),
            None => {
                if !matches!(try_wait_pid(self.pid), Ok(None)) {
                    return;
                }
                match pidfd(self.pid) {
                    Ok(fd) => fd,
                    Err(_) => return,
                }
            }
        };
        if matches!(try_wait(fd.as_fd()), Ok(None)) {
            ORPHANS
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(fd);
        }
    }
}

/// A spawn made ready on the runtime's side: what `posix_spawn` takes, owned (`Send`), so
/// that the spawn itself can run on a blocking thread (see [`Prepared::spawn`]).
#[derive(Debug)]
pub(crate) struct Prepared {
    program: CString,
    argv: Vec<CString>,
    tag: CString,
    env: Arc<EnvBlock>,
}

impl Prepared {
    /// `inv` with `env` plus `TAG_VAR=tag` as its whole environment.
    ///
    /// # Errors
    /// `InvalidInput` when the program, an argument or the tag holds a NUL byte (as std's
    /// `Command` reports it).
    pub(crate) fn new(inv: &Invocation, env: Arc<EnvBlock>, tag: &str) -> io::Result<Self> {
        let invalid = || {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "nul byte found in provided data",
            )
        };
        let program = CString::new(inv.program.as_bytes()).map_err(|_| invalid())?;
        let mut argv = Vec::with_capacity(inv.args.len() + 1);
        argv.push(match &inv.arg0 {
            Some(a) => CString::new(a.as_bytes()).map_err(|_| invalid())?,
            None => program.clone(),
        });
        for a in &inv.args {
            argv.push(CString::new(a.as_bytes()).map_err(|_| invalid())?);
        }
        let tag = CString::new(format!("{TAG_VAR}={tag}")).map_err(|_| invalid())?;
        Ok(Self {
            program,
            argv,
            tag,
            env,
        })
    }

    /// Starts the child in a process group of its own, stdin on `/dev/null`, stdout and
    /// stderr on pipes; returns it with the read ends of its stdout and stderr (non-blocking,
    /// close-on-exec, registered with the runtime). Needs a tokio runtime with the I/O
    /// driver (panics without one, as tokio's types do). Blocks until the child has exec'd
    /// (vfork).
    ///
    /// # Errors
    /// The error of `posix_spawn` (glibc reports the exec's: `ENOENT`, `EACCES`,
    /// `ETXTBSY`…) or of creating the pipes.
    pub(crate) fn spawn(&self) -> io::Result<(SpawnedChild, Receiver, Receiver)> {
        let launched = self.launch()?;
        launched.adopt()
    }

    /// What [`spawn`](Self::spawn) does up to the child's exec, on any thread (no runtime
    /// needed): the pipes and the `posix_spawn`. [`Launched::adopt`] does the rest, on a
    /// thread of the runtime.
    ///
    /// # Errors
    /// As [`spawn`](Self::spawn).
    pub(crate) fn launch(&self) -> io::Result<Launched> {
        reap_orphans();
        let envp = self.env.with_tag(&self.tag);
        let (out_r, out_w) = io::pipe()?;
        let (err_r, err_w) = io::pipe()?;
        let fds = [
            dev_null()?.as_raw_fd(),
            out_w.as_raw_fd(),
            err_w.as_raw_fd(),
        ];
        let pid = SPAWN_SETUP.with(|cell| -> io::Result<Pid> {
            let mut setup = cell.borrow_mut();
            // The pipes usually get the numbers the last step's had: the actions are kept.
            let fresh = match setup.take() {
                Some(s) if s.fds == fds => s,
                _ => SpawnSetup::new(fds)?,
            };
            let spawned = nix::spawn::posix_spawn(
                self.program.as_c_str(),
                &fresh.actions,
                &fresh.attr,
                &self.argv,
                &envp,
            );
            *setup = Some(fresh);
            Ok(spawned?)
        })?;
        drop((out_w, err_w));
        // The child is ours from here: dropped before it was waited for, it is killed and
        // reaped.
        let child = SpawnedChild {
            pid: pid.as_raw(),
            pidfd: None,
            status: None,
        };
        Ok(Launched {
            child,
            out: OwnedFd::from(out_r),
            err: OwnedFd::from(err_r),
        })
    }
}

/// A child started by [`Prepared::launch`], with the read ends of its stdout and stderr not
/// yet registered with the runtime.
pub(crate) struct Launched {
    child: SpawnedChild,
    out: OwnedFd,
    err: OwnedFd,
}

impl Launched {
    /// Registers the read ends with the runtime (needs one, as tokio's types do); the child
    /// and its stdout and stderr.
    ///
    /// # Errors
    /// The `ioctl` or the registration failed (the child is then killed and reaped, as any
    /// [`SpawnedChild`] dropped before it was waited for).
    pub(crate) fn adopt(self) -> io::Result<(SpawnedChild, Receiver, Receiver)> {
        let Self { child, out, err } = self;
        // The read ends join the runtime after the spawn, while the child runs (on the other
        // CPU, as a rule): what is done before it delays every step (issue 9; moved before
        // the spawn, the 400-step chain took 1.02x the time). One `ioctl` each makes them
        // non-blocking (std's way, through tokio, is an `fcntl` pair).
        let out_r = reader(out)?;
        let err_r = reader(err)?;
        Ok((child, out_r, err_r))
    }
}

/// The read end `fd` of a child's output pipe, made non-blocking and registered with the
/// runtime.
///
/// # Errors
/// The `ioctl` or the registration failed.
fn reader(fd: OwnedFd) -> io::Result<Receiver> {
    rustix::io::ioctl_fionbio(&fd, true)?;
    Receiver::from_owned_fd_unchecked(fd)
}

/// What `posix_spawn` is given besides the program, its arguments and environment: the
/// file actions (stdin on `/dev/null`, stdout and stderr on the pipes' write ends) and the
/// attributes (a process group of its own, the signals of [`sig_default`] at their default).
///
/// Built for the descriptor numbers in `fds` and kept per thread (the types hold pointers:
/// not `Send`): glibc checks each descriptor of a file action against the descriptor limit,
/// two `getrlimit` calls each, six per spawn, which a kept setup does not repeat (issue 9).
struct SpawnSetup {
    /// The descriptors dup'd onto the child's 0, 1 and 2.
    fds: [std::os::fd::RawFd; 3],
    actions: PosixSpawnFileActions,
    attr: PosixSpawnAttr,
}

impl SpawnSetup {
    fn new(fds: [std::os::fd::RawFd; 3]) -> io::Result<Self> {
        let mut actions = PosixSpawnFileActions::init()?;
        for (fd, target) in fds.iter().zip(0..) {
            actions.add_dup2(*fd, target)?;
        }
        let mut attr = PosixSpawnAttr::init()?;
        attr.set_pgroup(Pid::from_raw(0))?;
        attr.set_sigdefault(sig_default())?;
        let mut flags =
            PosixSpawnFlags::POSIX_SPAWN_SETPGROUP | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF;
        // The mask awf was started with, without the SIGXFSZ awf blocks for itself.
        if let Some(mask) = START_MASK.get() {
            attr.set_sigmask(mask)?;
            flags |= PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK;
        }
        attr.set_flags(flags)?;
        Ok(Self { fds, actions, attr })
    }
}

thread_local! {
    /// The last [`SpawnSetup`] this thread used.
    static SPAWN_SETUP: std::cell::RefCell<Option<SpawnSetup>> =
        const { std::cell::RefCell::new(None) };
}

/// The signals a child starts with at their default disposition: every signal but those
/// awf ignores when it first spawns (those it was started ignoring, `nohup` or `trap ''
/// QUIT` before `exec awf`, and does not handle itself: the child inherits the ignore, as
/// from std's `Command`), and SIGPIPE always (std resets it; awf ignores it). Without the
/// list of ignored signals (no `/proc`), SIGPIPE alone. (glibc's own signals, 32 and 33,
/// are not in any set and come out ignored, as they always did.)
///
/// glibc's `posix_spawn` gives the child default dispositions one signal at a time, between
/// vfork and exec while awf waits: a signal in this set costs one `sigaction`, any other
/// two (a read, then the reset); 64 fewer system calls per spawn (issue 9).
fn sig_default() -> &'static SigSet {
    static SET: OnceLock<SigSet> = OnceLock::new();
    SET.get_or_init(|| {
        let mut set = match ignored_signals() {
            Some(ignored) => {
                let mut all = SigSet::all();
                for sig in Signal::iterator() {
                    if ignored & (1u64 << (sig as i32 - 1)) != 0 {
                        all.remove(sig);
                    }
                }
                // Real-time signals are not in nix's `Signal`: one ignored (never seen)
                // leaves the set as it was, SIGPIPE alone. Not glibc's own 32 and 33, which
                // are in no set (an awf started by a step of another awf finds them ignored).
                if ignored >> 33 != 0 {
                    SigSet::empty()
                } else {
                    all
                }
            }
            None => SigSet::empty(),
        };
        set.add(Signal::SIGPIPE);
        set
    })
}

/// The signal mask awf was started with, recorded by [`hold_file_size_signal`]: the one
/// its children start with.
static START_MASK: OnceLock<SigSet> = OnceLock::new();

/// Blocks SIGXFSZ in the calling thread (call it first thing in `main`, before any thread
/// starts: threads inherit the mask). A write past the file size limit (`ulimit -f`) then
/// fails with `EFBIG`, which awf reports as any other failed write, instead of the signal
/// killing awf with no word and the run's end unwritten. Children start with the mask awf
/// was started with (std's `Command` gives them an empty one), so a step that writes past
/// the limit is stopped by SIGXFSZ as it would be outside awf. Best effort: nothing
/// happens when the mask cannot be read or set.
pub fn hold_file_size_signal() {
    use nix::sys::signal::SigmaskHow;
    let Ok(mask) = SigSet::thread_get_mask() else {
        return;
    };
    if START_MASK.set(mask).is_err() {
        return;
    }
    let mut xfsz = SigSet::empty();
    xfsz.add(Signal::SIGXFSZ);
    // Not blocked: awf is as before, and its children's mask is the inherited one anyway.
    let _ = nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&xfsz), None);
}

/// The signals this process ignores now, as the `SigIgn` mask of `/proc/self/status` (bit
/// `n - 1` for signal `n`); `None` without `/proc`.
pub fn ignored_signals() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status.lines().find_map(|l| l.strip_prefix("SigIgn:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn prepared(script: &str) -> Prepared {
        let inv = Invocation::shell(std::path::PathBuf::from("/bin/sh"), script.to_owned());
        Prepared::new(&inv, env_block(&[], &[]).unwrap(), "0-test").unwrap()
    }

    fn alive(pid: i32) -> bool {
        // A zombie still answers signal 0: read its state instead.
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    }

    /// A child that has exited by the time it is waited for is reaped without a pidfd; one
    /// still running is waited for through one. Both give their exit status.
    #[tokio::test]
    async fn a_child_is_waited_for_through_a_pidfd_only_while_it_runs() {
        use tokio::io::AsyncReadExt;
        let (mut quick, mut out, _err) = prepared("echo hi; exit 3").spawn().unwrap();
        let mut text = String::new();
        out.read_to_string(&mut text).await.unwrap();
        assert_eq!(text, "hi\n");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert_eq!(quick.wait().await.unwrap().code(), Some(3));
        assert!(quick.pidfd.is_none(), "an exited child needs no pidfd");
        assert_eq!(
            quick.wait().await.unwrap().code(),
            Some(3),
            "the status is kept"
        );
        assert!(!alive(quick.pid), "reaped");

        let t0 = std::time::Instant::now();
        let (mut slow, _out, _err) = prepared("sleep 0.3; kill -TERM $$").spawn().unwrap();
        let status = slow.wait().await.unwrap();
        assert!(
            t0.elapsed() >= std::time::Duration::from_millis(250),
            "waited for its exit"
        );
        assert_eq!(status.signal(), Some(Signal::SIGTERM as i32));
        assert!(!alive(slow.pid), "reaped");
    }

    /// The file actions are kept for the pipes' descriptor numbers: a spawn whose pipes got
    /// other numbers (descriptors opened in between) builds them again, and every child
    /// writes to its own pipes, never to an earlier child's.
    #[tokio::test]
    async fn each_child_writes_to_its_own_pipes_whatever_their_numbers() {
        use tokio::io::AsyncReadExt;
        async fn run(script: &str) -> (String, String) {
            let (mut child, mut out, mut err) = prepared(script).spawn().unwrap();
            let (mut o, mut e) = (String::new(), String::new());
            out.read_to_string(&mut o).await.unwrap();
            err.read_to_string(&mut e).await.unwrap();
            child.wait().await.unwrap();
            (o, e)
        }
        let script = |n: u32| format!("read x; echo out{n} \"$x\"; echo err{n} >&2");
        assert_eq!(run(&script(1)).await, ("out1 \n".into(), "err1\n".into()));
        // Same numbers as the spawn before (kept actions), then shifted ones (new actions),
        // then the first numbers again.
        assert_eq!(run(&script(2)).await, ("out2 \n".into(), "err2\n".into()));
        let held: Vec<File> = (0..3).map(|_| File::open("/dev/null").unwrap()).collect();
        assert_eq!(run(&script(3)).await, ("out3 \n".into(), "err3\n".into()));
        drop(held);
        assert_eq!(run(&script(4)).await, ("out4 \n".into(), "err4\n".into()));
    }

    /// The child's stdout and stderr are blocking, as a program expects (awf's read ends are
    /// created non-blocking; a write end left so would make a child's large write fail with
    /// `EAGAIN`), and a child writing more than a pipe holds has all of it read.
    #[tokio::test]
    async fn the_childs_ends_of_its_pipes_are_blocking() {
        use tokio::io::AsyncReadExt;
        let (mut child, mut out, mut err) =
            prepared("grep -h '^flags' /proc/self/fdinfo/1 /proc/self/fdinfo/2 >&2; head -c 300000 /dev/zero")
                .spawn()
                .unwrap();
        let (mut o, mut e) = (Vec::new(), String::new());
        let (ro, re) = tokio::join!(out.read_to_end(&mut o), err.read_to_string(&mut e));
        ro.unwrap();
        re.unwrap();
        assert!(child.wait().await.unwrap().success());
        assert_eq!(o.len(), 300_000);
        let flags: Vec<u32> = e
            .lines()
            .map(|l| u32::from_str_radix(l.trim_start_matches("flags:").trim(), 8).unwrap())
            .collect();
        assert_eq!(flags.len(), 2, "{e}");
        for f in flags {
            assert_eq!(f & 0o4000, 0, "O_NONBLOCK set on a child's output: {f:o}");
        }
    }

    /// A child dropped before it was waited for is killed and reaped, pidfd or not.
    #[tokio::test]
    async fn a_child_dropped_unwaited_is_killed_and_reaped() {
        let (child, _out, _err) = prepared("sleep 30").spawn().unwrap();
        let pid = child.pid;
        assert!(alive(pid));
        drop(child);
        // Reaped at once, or by the next spawn's sweep of the dropped children.
        let t0 = std::time::Instant::now();
        while std::path::Path::new(&format!("/proc/{pid}")).exists()
            && t0.elapsed() < std::time::Duration::from_secs(5)
        {
            reap_orphans();
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "child {pid} left behind"
        );
    }

    fn names(b: &EnvBlock, tag: &str) -> Vec<String> {
        let tag = CString::new(tag).unwrap();
        b.with_tag(&tag)
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect()
    }

    /// The block is std's sorted map: overrides win, withheld names and an inherited tag are
    /// gone, the child's tag sits in its sorted place.
    #[test]
    fn env_block_is_sorted_like_std_with_the_tag_in_place() {
        let base: BTreeMap<OsString, OsString> = [
            ("PATH", "/bin"),
            ("AWF_PROCESS_TAG", "1-1"),
            ("ZED", "z"),
            ("SECRET_TOKEN", "s"),
            ("A", "a"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
        let env = vec![
            ("B".to_owned(), "b".to_owned()),
            ("PATH".to_owned(), "/usr/bin".to_owned()),
        ];
        let block = build_env(&base, &env, &["SECRET_TOKEN".to_owned()]).unwrap();
        assert_eq!(
            names(&block, "AWF_PROCESS_TAG=9-9"),
            [
                "A=a",
                "AWF_PROCESS_TAG=9-9",
                "B=b",
                "PATH=/usr/bin",
                "ZED=z"
            ]
        );
        let nul = vec![("X".to_owned(), "a\0b".to_owned())];
        assert!(build_env(&base, &nul, &[]).is_none());
    }
}
