//! CommandExecutor: runs one shell command or script as a child process.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::error::AwfError;
use crate::event::OutputStream;

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// Text run as `$SHELL -c <text>` (`/bin/sh` when `$SHELL` is unset, relative or missing).
    Shell(String),
    /// A program run directly with an argv, no shell (agent CLIs). `program` is looked up
    /// on `PATH` when it has no `/`.
    Exec {
        /// Program name or path.
        program: String,
        /// Arguments (not including the program).
        args: Vec<String>,
    },
    /// Script contents (already interpolated). With a `#!` line the contents are written to a
    /// temporary executable file (mode 0700) and executed directly, else run like `Shell`.
    Script(String),
}

/// A command to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    /// What to run.
    pub program: Program,
    /// Working directory; `None` = the process CWD.
    pub dir: Option<PathBuf>,
    /// Variables added to (and overriding) the inherited environment.
    pub env: Vec<(String, String)>,
    /// Wall-clock limit; on expiry the process group gets SIGTERM, then SIGKILL after 5 s.
    pub timeout: Option<Duration>,
    /// Most bytes of each stream (stdout, stderr) kept in [`CommandOutput`]; `None` = the
    /// executor's default (64 MiB per stream for the process executor). Output past the limit
    /// is still read (the child never blocks) and still streamed to the callback, but not
    /// kept; [`CommandOutput::truncated`] tells.
    pub capture_limit: Option<usize>,
}

/// How the process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    /// Exited on its own (any exit code).
    Exited,
    /// Stopped because `timeout` expired.
    TimedOut,
    /// Stopped because the cancellation token fired.
    Cancelled,
}

/// The captured result of a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutput {
    /// Exit status; −1 when killed by a signal (see `signal`), a timeout or a cancel.
    pub exit_code: i32,
    /// All of stdout (UTF-8, lossy).
    pub stdout: String,
    /// All of stderr (UTF-8, lossy).
    pub stderr: String,
    /// How it ended.
    pub termination: Termination,
    /// Whether `stdout` or `stderr` was cut at the capture limit (nothing is appended to the
    /// text; it holds the first bytes of the stream).
    pub truncated: bool,
    /// The number of the signal that terminated the process (e.g. 9 for SIGKILL), when it
    /// was killed by one: by someone else, or by the executor on timeout or cancel.
    pub signal: Option<i32>,
}

/// Receives live output as it arrives: raw, unmasked, in arbitrary chunk sizes (the caller
/// masks before showing it).
pub type OutputCallback = Arc<dyn Fn(OutputStream, &str) + Send + Sync>;

/// Runs child processes.
///
/// Contract: every child runs in its own process group with stdin closed (`/dev/null`).
/// Timeout or cancel sends SIGTERM to the group, waits up to 5 s for the child, then sends
/// SIGKILL to the group (grandchildren included). Output pipes are drained with a bounded
/// window after exit, so a grandchild holding them cannot hang the call. When `run` returns,
/// no process of the group is left running.
#[async_trait::async_trait]
pub trait CommandExecutor: Send + Sync {
    /// Runs `spec` to completion, streaming output to `on_output` as it arrives.
    ///
    /// # Errors
    /// `EXECUTION.COMMAND.FAILED` when the process cannot be started (missing `dir`, shell not
    /// executable, temp script not writable). A non-zero exit is *not* an error: it is
    /// reported in [`CommandOutput::exit_code`].
    async fn run(
        &self,
        spec: CommandSpec,
        on_output: Option<OutputCallback>,
        cancel: CancellationToken,
    ) -> Result<CommandOutput, AwfError>;
}
