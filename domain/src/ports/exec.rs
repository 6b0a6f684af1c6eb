//! CommandExecutor: runs one shell command or script as a child process.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::error::AwfError;
use crate::event::OutputStream;

/// Time a stopped child (timeout, cancel) gets between SIGTERM and SIGKILL to its process
/// group; a [`CommandExecutor`] that stops processes keeps to it.
///
/// Source: design/decisions.md "Execution and processes".
pub const KILL_GRACE: Duration = Duration::from_secs(5);

/// The detail a [`CommandExecutor`] sets on the error of a command it could not start because
/// the command holds a NUL byte: the byte's position (1-based). Where the byte came from (a
/// template's value, the workflow's own text, a script file) is for the caller to say.
pub const NUL_BYTE_DETAIL: &str = "nul_byte";

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
    /// The root run the command belongs to (its run id): the executor marks the process with
    /// it (inherited by its descendants). What a command of a run that exits on its own
    /// leaves running in the background (its process group's other members, daemonised
    /// descendants) lives on for the run's later steps, and [`CommandExecutor::end_scope`]
    /// stops it once that run ends. `None`: a command outside a run, whose background
    /// processes are stopped when it ends.
    pub scope: Option<String>,
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

/// Receives live output as it arrives: the raw bytes exactly as read (not necessarily UTF-8,
/// unmasked), in arbitrary chunk sizes that may split a UTF-8 character (the caller masks
/// before showing it; [`Utf8Chunks`] turns the bytes into text where text is needed).
pub type OutputCallback = Arc<dyn Fn(OutputStream, &[u8]) + Send + Sync>;

/// Turns a byte stream delivered in arbitrary chunks into text chunks that never split a
/// character: an incomplete sequence at the end of a chunk is held until the next one (or
/// [`Utf8Chunks::finish`]); invalid bytes become U+FFFD exactly as
/// [`String::from_utf8_lossy`] does, so the text chunks concatenate to the lossy text of
/// the whole stream.
#[derive(Debug, Default, Clone)]
pub struct Utf8Chunks {
    pending: Vec<u8>,
}

impl Utf8Chunks {
    /// Feeds bytes; calls `out` with each piece of text ready now.
    pub fn push(&mut self, bytes: &[u8], out: impl FnMut(&str)) {
        self.pending.extend_from_slice(bytes);
        self.emit(false, out);
    }

    /// Ends the stream: a held incomplete sequence becomes U+FFFD.
    pub fn finish(&mut self, out: impl FnMut(&str)) {
        self.emit(true, out);
    }

    fn emit(&mut self, eof: bool, mut out: impl FnMut(&str)) {
        let mut done = 0usize;
        while done < self.pending.len() {
            let rest = &self.pending[done..];
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out(s);
                    done = self.pending.len();
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    if let Ok(s) = std::str::from_utf8(&rest[..valid])
                        && !s.is_empty()
                    {
                        out(s);
                    }
                    match e.error_len() {
                        Some(bad) => {
                            out("\u{FFFD}");
                            done += valid + bad;
                        }
                        None if eof => {
                            out("\u{FFFD}");
                            done = self.pending.len();
                        }
                        None => {
                            done += valid;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..done);
    }
}

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

    /// Stops every process still running that a command of `scope` (a root run id, see
    /// [`CommandSpec::scope`]) started and left behind (`server &`, `setsid cmd &`, double
    /// forks), and leaves every other process alone (the other runs of the same process). Called once
    /// the run has ended (completed, failed or cancelled) and none of its commands runs.
    /// Returns how many processes were stopped. The default stops nothing.
    async fn end_scope(&self, scope: &str) -> usize {
        let _ = scope;
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8], step: usize) -> Vec<String> {
        let mut d = Utf8Chunks::default();
        let mut out = Vec::new();
        for piece in bytes.chunks(step) {
            d.push(piece, |s| out.push(s.to_owned()));
        }
        d.finish(|s| out.push(s.to_owned()));
        out
    }

    #[test]
    fn text_chunks_never_split_characters_and_match_lossy_decoding() {
        let cases: &[&[u8]] = &[
            "héllo wörld € 𝄞 ✓".as_bytes(),
            b"\xffabc",
            b"abc\xff",
            b"ab\xe2\x82",
            b"ab\xe2\x82x\xe2\x82\xac",
            b"\xf0\x9d\x84",
            b"\xc0\x80\xed\xa0\x80z",
            b"",
        ];
        for bytes in cases {
            let want = String::from_utf8_lossy(bytes);
            for step in 1..=5 {
                let chunks = decode(bytes, step);
                assert_eq!(chunks.concat(), want, "{bytes:?} step {step}");
                if std::str::from_utf8(bytes).is_ok() {
                    assert!(chunks.iter().all(|c| !c.contains('\u{FFFD}')));
                }
            }
        }
        assert_eq!(decode("a€b".as_bytes(), 1), vec!["a", "€", "b"]);
    }
}
