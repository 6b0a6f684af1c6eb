//! [`ProcessExecutor`]: the [`CommandExecutor`] that runs real child processes.

use std::ffi::OsStr;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::event::OutputStream;
use awf_domain::ports::exec::CommandExecutor;
use awf_domain::ports::exec::CommandOutput;
use awf_domain::ports::exec::CommandSpec;
use awf_domain::ports::exec::OutputCallback;
use awf_domain::ports::exec::Program;
use awf_domain::ports::exec::Termination;
use nix::errno::Errno;
use nix::sys::signal::Signal;
use tokio::io::AsyncRead;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe::Receiver;
use tokio::process::Child;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use crate::capture::Capture;
use crate::capture::PipeReader;
use crate::group::GroupGuard;
use crate::reaper::TAG_VAR;
use crate::reaper::arm_parent_death;
use crate::reaper::new_tag;
use crate::reaper::parent_death_signal;
use crate::reaper::reap_group;
use crate::reaper::sweep_tagged;
use crate::shell::Invocation;
use crate::shell::resolve_shell;
use crate::spawn;
use crate::spawn::SpawnedChild;

/// Time a stopped child gets between SIGTERM and SIGKILL to its process group (the domain's
/// [`awf_domain::ports::exec::KILL_GRACE`], which messages name).
///
/// Source: design/decisions.md "Execution and processes".
pub const KILL_GRACE: Duration = awf_domain::ports::exec::KILL_GRACE;

/// How long the pipes are still read after the child exited (or was killed) when something
/// else (a background grandchild) keeps them open. Not waited when both pipes reached EOF.
pub const DRAIN_WINDOW: Duration = Duration::from_millis(200);

/// Bytes of each stream kept in [`CommandOutput`] when [`CommandSpec::capture_limit`] is
/// `None` (64 MiB). Output past it is still read and streamed, but not kept.
pub const DEFAULT_CAPTURE_LIMIT: usize = 64 * 1024 * 1024;

/// Attempts at spawning when exec reports `ETXTBSY` (a freshly written script still open for
/// writing in a child another thread forked at the same moment).
const SPAWN_ATTEMPTS: u32 = 5;

/// Runs commands as child processes of this process.
///
/// Each child: `$SHELL -c <text>` (or a temp shebang script exec'd directly), its own process
/// group, stdin on `/dev/null`, the inherited environment plus `CommandSpec::env`, cwd
/// `CommandSpec::dir`. stdout and stderr are streamed to the callback in full as they arrive,
/// byte for byte (not necessarily UTF-8), and their first `CommandSpec::capture_limit` bytes
/// (default [`DEFAULT_CAPTURE_LIMIT`] per stream) are kept in the result (UTF-8, lossy); past
/// the limit the pipe is still drained, so the child never blocks, and
/// [`CommandOutput::truncated`] is set.
///
/// Stopping (timeout or cancel): SIGTERM to the group, up to [`KILL_GRACE`] for the child to
/// exit, then SIGKILL to the group; the result has `exit_code == -1`. After the child exits the
/// pipes are drained for at most [`DRAIN_WINDOW`] (then closed: a background process still
/// writing to them gets SIGPIPE, or `EPIPE` if it ignores the signal). Background processes
/// the command left in its group then live on when the command belongs to a run
/// ([`CommandSpec::scope`]) and exited on its own: later steps of the run can use them, and
/// [`end_scope`](CommandExecutor::end_scope) stops them when the run ends; their members
/// that exit meanwhile are reaped at the end of the next command. A stopped command's group,
/// and the group of a command outside a run, is SIGKILLed at once.
///
/// A child killed by a signal reports `exit_code == -1` with [`Termination::Exited`] and the
/// signal's number in [`CommandOutput::signal`]; a stopped child reports the signal that
/// ended it (15 or 9).
///
/// Every child also has a parent-death signal (SIGKILL when awf dies; not while a watchdog
/// process registered with [`set_watchdog`](crate::set_watchdog) runs, which stops the
/// children instead) and carries
/// [`TAG_VAR`](crate::TAG_VAR); after a stop (timeout or cancel) the descendants that left the
/// group (`setsid cmd &`) and were adopted by awf (see [`become_subreaper`](crate::become_subreaper))
/// are stopped too, found by that tag.
///
/// Needs a tokio runtime with the I/O and time drivers enabled.
///
/// Source: spec/workflow.md §1.5.2, §1.9, §1.12, §3.3, §3.10.
#[derive(Debug, Default)]
pub struct ProcessExecutor {
    /// The shell picked from this process's own `$SHELL`, resolved once.
    inherited_shell: OnceLock<PathBuf>,
}

impl ProcessExecutor {
    /// A new executor. Cheap; holds no processes.
    pub fn new() -> Self {
        Self::default()
    }

    /// The shell for a command whose extra environment is `env`: `SHELL` from `env` when set
    /// there, else from the inherited environment; `/bin/sh` when unusable.
    fn shell_for(&self, env: &[(String, String)]) -> PathBuf {
        match env.iter().rev().find(|(k, _)| k == "SHELL") {
            Some((_, v)) => resolve_shell(Some(OsStr::new(v))),
            None => self
                .inherited_shell
                .get_or_init(|| resolve_shell(std::env::var_os("SHELL").as_deref()))
                .clone(),
        }
    }
}

#[async_trait]
impl CommandExecutor for ProcessExecutor {
    async fn run(
        &self,
        spec: CommandSpec,
        on_output: Option<OutputCallback>,
        cancel: CancellationToken,
    ) -> Result<CommandOutput, AwfError> {
        if cancel.is_cancelled() {
            return Ok(stopped_before_start());
        }
        let CommandSpec {
            program,
            dir,
            env,
            timeout,
            capture_limit,
            scope,
        } = spec;
        let limit = capture_limit.unwrap_or(DEFAULT_CAPTURE_LIMIT);
        let dir = own_dir(dir, awf_dirs());
        // The shell text of a command exec'd directly: run through the shell after all when
        // the exec fails (a file without `#!`, a `#!` interpreter that is missing, a broken
        // executable), so its status and message are the shell's own (127, 126, or the
        // script's output: `sh` runs a file without `#!` as a script).
        let mut shell_text = None;
        let mut env = env;
        // A child given a directory gets `PWD` spelled as that directory is (a path through a
        // symbolic link kept), as a shell's `cd` would set it: the one it inherits names the
        // directory awf runs in (a shell would take the physical path instead).
        if let Some(d) = &dir
            && !env.iter().any(|(k, _)| k == "PWD")
            && let Ok(abs) = std::path::absolute(d)
        {
            let pwd = logical(&abs);
            env.push(("PWD".to_owned(), pwd.to_string_lossy().into_owned()));
        }
        let invocation = match program {
            Program::Shell(text) => {
                let in_env = |k: &str| {
                    env.iter().any(|(name, _)| name == k) || std::env::var_os(k).is_some()
                };
                match crate::direct::plan(&text, crate::direct::path_for(&env).as_deref(), in_env) {
                    Some((name, program, args)) => {
                        shell_text = Some(text);
                        Invocation::program(name, program, args)
                    }
                    None => Invocation::shell(self.shell_for(&env), text),
                }
            }
            Program::Script(contents) if contents.starts_with("#!") => {
                Invocation::script(&contents)?
            }
            Program::Script(contents) => Invocation::shell(self.shell_for(&env), contents),
            Program::Exec { program, args } => Invocation::direct(program, args),
        };

        let tag = new_tag(scope.as_deref());
        let withheld = awf_domain::withheld::withheld_env();
        let (invocation, started) =
            match start(&invocation, dir.as_deref(), &env, &withheld, &tag).await {
                Err(e) if shell_text.is_some() && !exhausted(&e) => {
                    let text = shell_text.take().unwrap_or_default();
                    let shell = Invocation::shell(self.shell_for(&env), text);
                    let started = start(&shell, dir.as_deref(), &env, &withheld, &tag).await;
                    (shell, started)
                }
                started => (invocation, started),
            };
        let (child, out, err) = started.map_err(|e| {
            let env_of = || spawn::env_sizes(&env, &withheld);
            spawn_error(&e, &invocation, dir.as_deref(), env_of)
        })?;

        // Counted while it runs: a command started meanwhile is spawned beside it.
        let _live = crate::side_by_side::Live::enter();
        let guard = GroupGuard::new(child.id().and_then(|id| i32::try_from(id).ok()));
        let pipes = Pipes {
            out,
            err,
            out_cap: Capture::new(OutputStream::Stdout, limit),
            err_cap: Capture::new(OutputStream::Stderr, limit),
            cb: on_output,
        };
        let output = supervise(
            child,
            guard,
            pipes,
            timeout,
            &cancel,
            &tag,
            scope.as_deref(),
        )
        .await;
        // The temp script (if any) is removed only now, after the group is gone.
        drop(invocation);
        Ok(output)
    }

    async fn end_scope(&self, scope: &str) -> usize {
        crate::reaper::sweep_scope(scope).await
    }
}

/// The directory a child is given: `dir`, unless it is `cwd`, the directory this process
/// runs in, which a child inherits. A step without a `dir` of its own is given its run's
/// directory, nearly always this one; a child given a directory cannot take the
/// `posix_spawn` path (see [`start`]: about 60 more system calls a step, issue 9), and one
/// that inherits it keeps the `PWD` awf was started with (a path through a symlink), as
/// before runs recorded their directory.
///
/// `cwd` holds the spellings of that directory ([`awf_dirs`]).
fn own_dir(dir: Option<PathBuf>, cwd: &[PathBuf]) -> Option<PathBuf> {
    dir.filter(|d| !cwd.iter().any(|c| c == d))
}

/// The spellings of the directory this process runs in: the physical path (`getcwd`) and
/// `$PWD` when it names the same directory through a symbolic link (a run's directory is
/// spelled as the shell's `$PWD`), read once (awf never changes its directory); empty when
/// the directory cannot be read.
fn awf_dirs() -> &'static [PathBuf] {
    static DIRS: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();
    DIRS.get_or_init(|| {
        let Ok(physical) = std::env::current_dir() else {
            return Vec::new();
        };
        let mut dirs = vec![physical];
        if let Some(pwd) = std::env::var_os("PWD").map(PathBuf::from)
            && pwd.is_absolute()
            && pwd != dirs[0]
            && same_dir(&pwd, &dirs[0])
        {
            dirs.push(pwd);
        }
        dirs
    })
}

/// Whether `a` and `b` name one directory (same device and inode).
fn same_dir(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// `path` (absolute) with `.` and `..` resolved by its text, as a shell's `cd` sets `PWD`
/// (`/a/b/../c/` is `/a/c`).
fn logical(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Pipes of a started child: its stdout and stderr.
type Started = (Running, Option<PipeReader>, Option<PipeReader>);

/// Starts `invocation` in its own process group with `env` (minus `withheld`) and the
/// tag: with a watchdog (no parent-death signal to set), a program given by path and no
/// working directory, by posix_spawn and an environment built once (see `spawn`); else
/// through std's `Command`. Retries on `ETXTBSY`.
///
/// # Errors
/// The spawn's OS error.
async fn start(
    invocation: &Invocation,
    dir: Option<&Path>,
    env: &[(String, String)],
    withheld: &[String],
    tag: &str,
) -> io::Result<Started> {
    let block = if !parent_death_signal() && spawn::can_spawn(invocation, dir) {
        spawn::env_block(env, withheld)
    } else {
        None
    };
    if let Some(block) = block {
        let prepared = spawn::Prepared::new(invocation, block, tag)?;
        let (child, out, err) = if crate::side_by_side::others_running() {
            spawn_beside(prepared).await?
        } else {
            retry_busy(|| std::future::ready(prepared.spawn())).await?
        };
        return Ok((
            Running::Spawned(child),
            Some(PipeReader::Pipe(out)),
            Some(PipeReader::Pipe(err)),
        ));
    }
    let mut cmd = Command::new(&invocation.program);
    if let Some(a) = &invocation.arg0 {
        cmd.arg0(a);
    }
    cmd.args(&invocation.args)
        .envs(env.iter().map(|(k, v)| (k, v)));
    for name in withheld {
        cmd.env_remove(name);
    }
    cmd.env(TAG_VAR, tag)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(d) = dir {
        cmd.current_dir(d);
    }
    if parent_death_signal() {
        arm_parent_death(&mut cmd);
    }
    let mut child = retry_busy(|| std::future::ready(cmd.spawn())).await?;
    let out = child.stdout.take().map(PipeReader::Stdout);
    let err = child.stderr.take().map(PipeReader::Stderr);
    Ok((Running::Tokio(child), out, err))
}

/// Whether a spawn failed for lack of a resource (descriptors, processes, memory): the
/// shell would fail to start the same way.
fn exhausted(e: &io::Error) -> bool {
    matches!(
        Errno::from_raw(e.raw_os_error().unwrap_or(0)),
        Errno::EMFILE | Errno::ENFILE | Errno::EAGAIN | Errno::ENOMEM
    )
}

/// The result for a run cancelled before its process was started.
fn stopped_before_start() -> CommandOutput {
    CommandOutput {
        exit_code: -1,
        stdout: String::new(),
        stderr: String::new(),
        termination: Termination::Cancelled,
        truncated: false,
        signal: None,
    }
}

/// [`spawn::Prepared::spawn`] for a command started while others run: the `posix_spawn`
/// on a helper thread, so that the spawns of a parallel block's branches overlap (see
/// [`crate::side_by_side`]); retried as every spawn is ([`retry_busy`]).
async fn spawn_beside(prepared: spawn::Prepared) -> io::Result<(SpawnedChild, Receiver, Receiver)> {
    let prepared = Arc::new(prepared);
    retry_busy(|| {
        let p = Arc::clone(&prepared);
        async move {
            crate::side_by_side::run(move || p.launch())
                .await
                .unwrap_or_else(|| {
                    Err(io::Error::other("the thread spawning the command stopped"))
                })?
                .adopt()
        }
    })
    .await
}

/// Runs `spawn` (a spawn made when called, `std::future::ready`, or one to await), retrying a
/// few times on `ETXTBSY`.
async fn retry_busy<T, F: Future<Output = io::Result<T>>>(
    mut spawn: impl FnMut() -> F,
) -> io::Result<T> {
    let mut attempt = 0;
    loop {
        match spawn().await {
            Err(e)
                if e.raw_os_error() == Some(Errno::ETXTBSY as i32)
                    && attempt + 1 < SPAWN_ATTEMPTS =>
            {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(5u64 << attempt.min(10))).await;
            }
            other => return other,
        }
    }
}

/// A running child: started by std's `Command` (through tokio) or by [`spawn::Prepared::spawn`].
enum Running {
    Tokio(Child),
    Spawned(SpawnedChild),
}

impl Running {
    /// The child's pid (`None` once tokio has reaped it).
    fn id(&self) -> Option<u32> {
        match self {
            Self::Tokio(c) => c.id(),
            Self::Spawned(c) => Some(c.id()),
        }
    }

    /// Waits for the child to exit; cancel-safe.
    async fn wait(&mut self) -> io::Result<ExitStatus> {
        match self {
            Self::Tokio(c) => c.wait().await,
            Self::Spawned(c) => c.wait().await,
        }
    }
}

/// Maps a spawn failure to `EXECUTION.COMMAND.FAILED`, naming the likely culprit; `env_of`
/// gives the child's environment as `(name, bytes)` when the failure is about its size.
fn spawn_error(
    e: &io::Error,
    inv: &Invocation,
    dir: Option<&Path>,
    env_of: impl FnOnce() -> Vec<(String, usize)>,
) -> AwfError {
    if let Some(d) = dir
        && !d.is_dir()
    {
        return AwfError::new(
            ErrorCode::ExecutionCommandFailed,
            format!(
                "working directory {} does not exist or is not a directory",
                d.display()
            ),
        )
        .with_detail("dir", d.display().to_string())
        .with_hint("Fix the step's `dir:` or create the directory before the step runs.");
    }
    let program = Path::new(&inv.program).display().to_string();
    // A NUL byte cannot be passed to a program (breaker: `readFile "/proc/self/environ"` in
    // a command was "cannot start shell /bin/bash: nul byte found", with a $SHELL hint).
    if let Some(at) = std::iter::once(&inv.program)
        .chain(&inv.args)
        .find_map(|a| a.as_encoded_bytes().iter().position(|b| *b == 0))
    {
        // Where the byte came from (a template's value, the workflow's own text) is for
        // the caller to say: it is set in the `nul_byte` detail (the byte's position).
        return AwfError::new(
            ErrorCode::ExecutionCommandFailed,
            format!(
                "cannot start {program}: the command contains a NUL byte (at byte {}), which \
                 no command line can carry",
                at + 1
            ),
        )
        .with_detail("program", program)
        .with_detail(awf_domain::ports::exec::NUL_BYTE_DETAIL, at + 1);
    }
    if exhausted(e) {
        return AwfError::new(
            ErrorCode::SystemResourceExhausted,
            format!("cannot start {program}: {e}"),
        )
        .with_detail("program", program)
        .with_hint("raise the limit (`ulimit -n`, `ulimit -u`) or lower `max_concurrent`");
    }
    if e.raw_os_error() == Some(Errno::E2BIG as i32) {
        return too_big(program, e, &inv.args, &env_of());
    }
    if inv.arg0.is_some() {
        return AwfError::new(
            ErrorCode::ExecutionCommandFailed,
            format!("cannot start {program}: {e}"),
        )
        .with_detail("program", program);
    }
    if inv.script.is_some() {
        AwfError::new(
            ErrorCode::ExecutionCommandFailed,
            format!("cannot execute script {program}: {e}"),
        )
        .with_detail("program", program)
        .with_hint(
            "Check that the #! line names an installed interpreter by absolute path and that the \
             temp directory is not mounted noexec.",
        )
    } else {
        AwfError::new(
            ErrorCode::ExecutionCommandFailed,
            format!("cannot start shell {program}: {e}"),
        )
        .with_detail("program", program)
        .with_hint("Check that $SHELL (or /bin/sh) is an executable file.")
    }
}

/// Linux's `MAX_ARG_STRLEN`: the most bytes one argument or one `NAME=value` may take.
const ONE_STRING_MAX: usize = 128 * 1024;

/// How many of the largest environment variables an `E2BIG` error names.
const LARGEST_SHOWN: usize = 3;

/// The error of a spawn refused with `E2BIG`: the arguments and the environment (`env`,
/// each variable with its bytes) are over the OS's limit together, or one string is over
/// [`ONE_STRING_MAX`]. Says the size of both and which is the large part: the command line
/// (a large step output interpolated into a command; new user: `seq 1 40000`'s output), or
/// the environment, with its largest variables (breaker: a `call_workflow` passing 20
/// inputs of 120 KB each was reported as a command "too long" at 11 bytes of arguments).
fn too_big(
    program: String,
    e: &io::Error,
    args: &[std::ffi::OsString],
    env: &[(String, usize)],
) -> AwfError {
    let arg_bytes: usize = args.iter().map(|a| a.len() + 1).sum();
    let env_bytes: usize = env.iter().map(|(_, n)| n).sum();
    let sizes = format!("{arg_bytes} bytes of arguments, {env_bytes} bytes of environment; {e}");
    let long_arg = args.iter().any(|a| a.len() + 1 > ONE_STRING_MAX);
    let long_var = env.iter().find(|(_, n)| *n > ONE_STRING_MAX);
    if long_arg || (long_var.is_none() && arg_bytes >= env_bytes) {
        return AwfError::new(
            ErrorCode::ExecutionCommandFailed,
            format!(
                "cannot start {program}: the command is too long for the OS ({sizes}): pass \
                 large values through a file, not the command line"
            ),
        )
        .with_detail("program", program)
        .with_detail("bytes", arg_bytes)
        .with_detail("environment_bytes", env_bytes)
        .with_hint(
            "Linux takes at most 128 KiB in one argument (a shell step's whole script): pass large \
             values through a file (write it in the earlier step, read it in this one) instead of \
             interpolating them into the command.",
        );
    }
    let mut largest: Vec<&(String, usize)> = env.iter().collect();
    largest.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let culprit = match long_var {
        Some((name, n)) => format!(
            "the variable {name} takes {n} bytes, over the {ONE_STRING_MAX} one variable may take"
        ),
        None => {
            let named: Vec<String> = largest
                .iter()
                .take(LARGEST_SHOWN)
                .map(|(name, n)| format!("{name} ({n} bytes)"))
                .collect();
            format!("its largest variables are {}", named.join(", "))
        }
    };
    AwfError::new(
        ErrorCode::ExecutionCommandFailed,
        format!(
            "cannot start {program}: the environment is too large for the OS ({sizes}): {culprit}"
        ),
    )
    .with_detail("program", program)
    .with_detail("bytes", arg_bytes)
    .with_detail("environment_bytes", env_bytes)
    .with_hint(
        "Every input the workflow declares reaches each command step as an environment variable \
         (and a call_workflow's inputs its child's steps): pass large values through a file (an \
         earlier step writes it, the input gives its path) instead of as inputs.",
    )
}

/// How long after its start a child's exit is watched even while its pipes are open (see
/// `supervise`): the most a command that exits leaving its output pipes to a descendant
/// waits beyond its exit.
const EXIT_WATCH_AFTER: Duration = Duration::from_millis(2);

/// How the first phase of supervision ended.
enum End {
    /// The child exited on its own (or was killed by someone else).
    Exited(Option<ExitStatus>),
    /// Timeout or cancel: the group has to be stopped.
    Stop(Termination),
}

/// Waits for the child while pumping its output; stops the group on timeout or cancel; drains
/// the pipes; then kills what is left of the group, unless the child exited on its own and
/// the command belongs to a run (`scope`): then what it left running in the background is
/// kept until that run ends (see `linger`).
async fn supervise(
    mut child: Running,
    mut guard: GroupGuard,
    mut pipes: Pipes,
    timeout: Option<Duration>,
    cancel: &CancellationToken,
    tag: &str,
    scope: Option<&str>,
) -> CommandOutput {
    let deadline = async move {
        match timeout {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending::<()>().await,
        }
    };
    tokio::pin!(deadline);
    let cancelled = cancel.cancelled();
    tokio::pin!(cancelled);
    // The child's exit is watched once both pipes are closed (a short command has then
    // usually exited: it is reaped at once, without a pidfd to open and register) or from
    // EXIT_WATCH_AFTER on (a command still running, or one that left its pipes open).
    let watch_after = tokio::time::sleep(EXIT_WATCH_AFTER);
    tokio::pin!(watch_after);
    let mut watching = false;

    let end = loop {
        tokio::select! {
            () = pipes.read_any(), if pipes.any_open() => {}
            () = &mut watch_after, if !watching => watching = true,
            status = child.wait(), if watching || !pipes.any_open() => {
                break End::Exited(status.ok());
            }
            () = &mut deadline => break End::Stop(Termination::TimedOut),
            () = &mut cancelled => break End::Stop(Termination::Cancelled),
        }
    };

    let stopped = matches!(end, End::Stop(_));
    let (exit_code, signal, termination) = match end {
        End::Exited(status) => (
            status.and_then(|s| s.code()).unwrap_or(-1),
            status.and_then(|s| s.signal()),
            Termination::Exited,
        ),
        End::Stop(termination) => {
            let status = stop(&mut child, &guard, &mut pipes).await;
            (-1, status.and_then(|s| s.signal()), termination)
        }
    };

    if pipes.any_open() {
        let window = tokio::time::sleep(DRAIN_WINDOW);
        tokio::pin!(window);
        while pipes.any_open() {
            tokio::select! {
                biased;
                () = pipes.read_any() => {}
                () = &mut window => {
                    // The window bounds the wait for what descendants holding the pipes may
                    // still write, never what is already in them: a task that ran late (a
                    // loaded machine, many branches) found the window over with the child's
                    // last 64 KB unread, and the output was cut without a word.
                    pipes.drain_ready();
                    break;
                }
            }
        }
    }
    // Members of kept groups (earlier steps' background processes) that have exited since
    // are reaped; nothing while none is kept.
    crate::linger::reap_kept();
    match scope {
        // A step of a run that exited on its own: what it left in the background (same
        // group) serves the run's later steps (a server, then a test against it) and is
        // stopped when the run ends. One system call, as the kill below, when the group is
        // empty.
        Some(scope) if !stopped => {
            if let Some(g) = guard.release() {
                crate::linger::keep(g, scope);
            }
        }
        // Stopped (timeout, cancel), or a command outside a run: its whole group goes now.
        _ => {
            if let Some(g) = guard.kill_and_disarm() {
                // Members whose parent died were adopted (awf is a subreaper): reap them. (A
                // group the OS found empty has nothing to reap: one system call less a step.)
                reap_group(g).await;
            }
        }
    }
    if stopped {
        // A stopped step's daemonised descendants (`setsid cmd &`) left the group: stop them
        // too, found by the tag they inherited.
        sweep_tagged(tag).await;
    }
    let (stdout, stderr, truncated) = pipes.finish();
    CommandOutput {
        exit_code,
        stdout,
        stderr,
        termination,
        truncated,
        signal,
    }
}

/// SIGTERM to the group, up to [`KILL_GRACE`] for the child (output still pumped), then
/// SIGKILL to the group and reap the child. Returns how the child ended, when known.
async fn stop(child: &mut Running, guard: &GroupGuard, pipes: &mut Pipes) -> Option<ExitStatus> {
    // No id: the child was already reaped; nothing left to signal but the pipes.
    guard.pgid()?;
    guard.signal(Signal::SIGTERM);
    let grace = tokio::time::sleep(KILL_GRACE);
    tokio::pin!(grace);
    let mut status = None;
    loop {
        tokio::select! {
            () = pipes.read_any(), if pipes.any_open() => {}
            s = child.wait() => {
                status = s.ok();
                break;
            }
            () = &mut grace => break,
        }
    }
    guard.signal(Signal::SIGKILL);
    if status.is_some() {
        return status;
    }
    // SIGKILL cannot be ignored; the bound only guards against a child stuck in the kernel.
    tokio::time::timeout(KILL_GRACE, child.wait())
        .await
        .ok()
        .and_then(Result::ok)
}

/// The child's two output pipes and what has been read from them.
struct Pipes {
    out: Option<PipeReader>,
    err: Option<PipeReader>,
    out_cap: Capture,
    err_cap: Capture,
    cb: Option<OutputCallback>,
}

impl Pipes {
    fn any_open(&self) -> bool {
        self.out.is_some() || self.err.is_some()
    }

    /// Reads once from whichever open pipe is ready first; a pipe at EOF (or failing) is closed.
    async fn read_any(&mut self) {
        let Self {
            out,
            err,
            out_cap,
            err_cap,
            cb,
        } = self;
        tokio::select! {
            r = read_some(out, out_cap), if out.is_some() => after_read(r, out, out_cap, cb.as_ref()),
            r = read_some(err, err_cap), if err.is_some() => after_read(r, err, err_cap, cb.as_ref()),
            else => {}
        }
    }

    /// Reads what the open pipes hold now, without waiting for more, and closes them: up to
    /// [`DRAIN_READY_MAX`] bytes a pipe (a descendant writing without pause cannot keep the
    /// step going).
    fn drain_ready(&mut self) {
        if let Some(p) = self.out.take() {
            drain_fd(p.into_owned_fd(), &mut self.out_cap, self.cb.as_ref());
        }
        if let Some(p) = self.err.take() {
            drain_fd(p.into_owned_fd(), &mut self.err_cap, self.cb.as_ref());
        }
    }

    /// Closes the pipes and returns (stdout, stderr, whether either was cut at the capture
    /// limit).
    fn finish(self) -> (String, String, bool) {
        let truncated = self.out_cap.truncated() || self.err_cap.truncated();
        (
            self.out_cap.into_string(),
            self.err_cap.into_string(),
            truncated,
        )
    }
}

/// The most [`Pipes::drain_ready`] reads from one pipe.
const DRAIN_READY_MAX: usize = 16 << 20;

/// Reads the non-blocking pipe `fd` (taken from the runtime) into `cap` until it is empty,
/// at EOF, failing, or [`DRAIN_READY_MAX`] bytes were read; then closes it.
fn drain_fd(fd: io::Result<std::os::fd::OwnedFd>, cap: &mut Capture, cb: Option<&OutputCallback>) {
    use std::io::Read;
    let Ok(fd) = fd else {
        return;
    };
    // Never a blocking read: a descendant may hold the pipe open and write nothing.
    if rustix::io::ioctl_fionbio(&fd, true).is_err() {
        return;
    }
    let mut pipe = std::fs::File::from(fd);
    let mut total = 0;
    while total < DRAIN_READY_MAX {
        let buf = cap.read_target();
        buf.resize(buf.capacity(), 0);
        let n = match pipe.read(buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => 0,
        };
        buf.truncate(n);
        cap.accept(cb);
        if n == 0 {
            break;
        }
        total += n;
    }
}

async fn read_some<R: AsyncRead + Unpin>(
    pipe: &mut Option<R>,
    cap: &mut Capture,
) -> io::Result<usize> {
    match pipe {
        Some(p) => p.read_buf(cap.read_target()).await,
        None => std::future::pending().await,
    }
}

fn after_read<R>(
    result: io::Result<usize>,
    pipe: &mut Option<R>,
    cap: &mut Capture,
    cb: Option<&OutputCallback>,
) {
    let eof = match result {
        Ok(n) => n == 0,
        Err(e) if e.kind() == io::ErrorKind::Interrupted => return,
        // A failing pipe is treated like EOF: keep what was read, stop reading.
        Err(_) => true,
    };
    if eof {
        *pipe = None;
    }
    cap.accept(cb);
}

#[cfg(test)]
mod spawn_error_tests {
    use super::*;

    /// Running out of descriptors or processes is the system's fault, not the command's
    /// (adversarial trial: a 3000-branch parallel under `ulimit -n 64`).
    #[test]
    fn exhausted_resources_are_system_errors_naming_the_program() {
        let inv = Invocation::program("true".into(), PathBuf::from("/usr/bin/true"), vec![]);
        for errno in [Errno::EMFILE, Errno::ENFILE, Errno::EAGAIN, Errno::ENOMEM] {
            let e = spawn_error(
                &io::Error::from_raw_os_error(errno as i32),
                &inv,
                None,
                Vec::new,
            );
            assert_eq!(e.code(), ErrorCode::SystemResourceExhausted, "{errno}");
            assert!(
                e.message().starts_with("cannot start /usr/bin/true: "),
                "{}",
                e.message()
            );
        }
        let e = spawn_error(
            &io::Error::from_raw_os_error(Errno::EACCES as i32),
            &inv,
            None,
            Vec::new,
        );
        assert_eq!(e.code(), ErrorCode::ExecutionCommandFailed);
        assert!(!e.message().contains("shell"), "{}", e.message());
    }

    /// Breaker: a NUL byte from `readFile "/proc/self/environ"` in a command was "cannot
    /// start shell /bin/bash: nul byte found" with a hint about $SHELL.
    #[test]
    fn a_nul_byte_in_the_command_is_named_as_such() {
        let inv = Invocation::shell(PathBuf::from("/bin/sh"), "echo a\0b".into());
        let e = spawn_error(
            &io::Error::new(
                io::ErrorKind::InvalidInput,
                "nul byte found in provided data",
            ),
            &inv,
            None,
            Vec::new,
        );
        assert_eq!(e.code(), ErrorCode::ExecutionCommandFailed);
        assert_eq!(
            e.message(),
            "cannot start /bin/sh: the command contains a NUL byte (at byte 7), which no command \
             line can carry"
        );
        assert_eq!(
            e.details()
                .get(awf_domain::ports::exec::NUL_BYTE_DETAIL)
                .map(ToString::to_string)
                .as_deref(),
            Some("7")
        );
        assert!(
            e.hints().iter().all(|h| !h.contains("SHELL")),
            "{:?}",
            e.hints()
        );
    }

    /// Breaker: 20 inputs of 120 KB each (a large environment) were reported as a command
    /// "too long" at 11 bytes of arguments. Both sizes are given, and the large part named.
    #[test]
    fn e2big_names_the_large_part_arguments_or_environment() {
        let e2big = io::Error::from_raw_os_error(Errno::E2BIG as i32);
        let shell = Invocation::program(
            "bash".into(),
            PathBuf::from("/bin/bash"),
            vec!["-c".into(), "echo hi".into()],
        );
        let env: Vec<(String, usize)> = vec![
            ("HOME".into(), 12),
            ("in01".into(), 120_006),
            ("in02".into(), 120_006),
            ("in03".into(), 120_007),
            ("in04".into(), 120_005),
        ];
        let e = spawn_error(&e2big, &shell, None, || env.clone());
        assert_eq!(
            e.message(),
            format!(
                "cannot start /bin/bash: the environment is too large for the OS (11 bytes of \
                 arguments, 480036 bytes of environment; {e2big}): its largest variables are \
                 in03 (120007 bytes), in01 (120006 bytes), in02 (120006 bytes)"
            )
        );
        assert_eq!(e.details()["environment_bytes"], 480_036);
        assert!(e.hints()[0].starts_with("Every input the workflow declares"));
        // One variable over the OS's limit for one string is named alone.
        let e = spawn_error(&e2big, &shell, None, || {
            vec![("A".into(), 10), ("BIG".into(), 200_000)]
        });
        assert!(
            e.message().ends_with(
                "bytes of environment; Argument list too long (os error 7)): the variable BIG takes 200000 bytes, over the 131072 one variable may take"
            ),
            "{}",
            e.message()
        );
        // A long command line is the arguments' fault, with both sizes.
        let long = Invocation::program(
            "bash".into(),
            PathBuf::from("/bin/bash"),
            vec!["-c".into(), "x".repeat(200_000)],
        );
        let e = spawn_error(&e2big, &long, None, || vec![("HOME".into(), 12)]);
        assert_eq!(
            e.message(),
            format!(
                "cannot start /bin/bash: the command is too long for the OS (200004 bytes of \
                 arguments, 12 bytes of environment; {e2big}): pass large values through a \
                 file, not the command line"
            )
        );
    }
}

#[cfg(test)]
mod own_dir_tests {
    use super::*;

    /// The directory awf runs in is inherited, not given (the `posix_spawn` path); any other
    /// is given, and so is every directory when awf's own cannot be read.
    #[test]
    fn only_a_directory_other_than_awfs_own_is_given() {
        let cwd = [PathBuf::from("/work/a"), PathBuf::from("/link/a")];
        assert_eq!(own_dir(Some(PathBuf::from("/work/a")), &cwd), None);
        assert_eq!(own_dir(Some(PathBuf::from("/work/a/")), &cwd), None);
        // The same directory spelled through a symbolic link (`$PWD`).
        assert_eq!(own_dir(Some(PathBuf::from("/link/a")), &cwd), None);
        assert_eq!(
            own_dir(Some(PathBuf::from("/work/b")), &cwd),
            Some(PathBuf::from("/work/b"))
        );
        assert_eq!(
            own_dir(Some(PathBuf::from("/work/a")), &[]),
            Some(PathBuf::from("/work/a"))
        );
        assert_eq!(own_dir(None, &cwd), None);
    }
}

#[cfg(test)]
mod drain_tests {
    use super::*;

    fn pipes_of(child: &mut tokio::process::Child) -> Pipes {
        Pipes {
            out: child.stdout.take().map(PipeReader::Stdout),
            err: child.stderr.take().map(PipeReader::Stderr),
            out_cap: Capture::new(OutputStream::Stdout, 1 << 20),
            err_cap: Capture::new(OutputStream::Stderr, 1 << 20),
            cb: None,
        }
    }

    /// What an exited child left in its pipes is read whole when the drain window is over
    /// (a breaker saw a branch's last 34 KB dropped on a loaded machine).
    #[tokio::test]
    async fn draining_after_the_window_keeps_what_the_pipes_hold() {
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", "head -c 60000 /dev/zero | tr '\\0' x; printf e >&2"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut pipes = pipes_of(&mut child);
        assert!(child.wait().await.unwrap().success());
        pipes.drain_ready();
        assert!(!pipes.any_open());
        let (out, err, truncated) = pipes.finish();
        assert_eq!(out.len(), 60000);
        assert!(out.bytes().all(|b| b == b'x'));
        assert_eq!(err, "e");
        assert!(!truncated);
    }

    /// A descendant that holds the pipe open and writes nothing does not block the drain.
    #[tokio::test]
    async fn draining_does_not_wait_for_a_silent_holder() {
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", "printf ab; sleep 30 & exit 0"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = child.id().unwrap();
        let mut pipes = pipes_of(&mut child);
        assert!(child.wait().await.unwrap().success());
        let t0 = std::time::Instant::now();
        pipes.drain_ready();
        let waited = t0.elapsed();
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pgid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        assert!(waited < Duration::from_secs(10), "{waited:?}");
        assert_eq!(pipes.finish().0, "ab");
    }
}
