//! awf-tools: the six built-in tools an agent calls during a step (`Read`, `Write`, `Edit`,
//! `Bash`, `Glob`, `Grep`), confined to the step's workspace root.
//!
//! [`BuiltinTools`] implements the domain port [`ToolProvider`]; `awf mcp-serve` serves it
//! over MCP and the `openai_compatible` provider offers it in-process as `tools[]`. Depends on
//! `awf-domain` only (plus tokio, nix, tempfile, globset, ignore and regex); never on
//! `awf-application`. Source: shared/spec/mcp.md §2 (Go behaviour, Claude Code's tools of the
//! same names, §2.8 the recommendations followed here), §7 (failure modes).
//!
//! # Arguments
//! Each schema declares AWF (Go)'s argument names (`path`, `old`, `new`, `timeout_seconds`,
//! `cwd`, `case_insensitive`); Claude Code's names are accepted as aliases (`file_path`,
//! `old_string`, `new_string`, `timeout` in milliseconds, `-i`, and Glob's `path` for `cwd`).
//! When both are given the canonical name wins. Schemas never set `additionalProperties:false`;
//! unknown keys are ignored. Integers and booleans are taken as the schemas say (aliases as
//! their canonical names): a JSON integer at or above the `minimum` (`3.0` counts), `true` or
//! `false`; a string (`"2"`, `"true"`), a fraction or a number under the minimum is refused.
//! A missing or wrong-typed argument is an `isError` result naming the argument and what was
//! expected.
//!
//! # Secrets
//! The values of secret-named variables of this process's environment (and those given to
//! [`BuiltinTools::with_masker`]) are replaced by `***` in every result, Read's and Grep's
//! included (`awf_domain::mask`).
//!
//! # Confinement
//! The root is canonicalized once ([`BuiltinTools::new`]). Relative paths resolve against it.
//! Every path a tool touches is resolved with `realpath` and must lie inside the root
//! (component-wise: `/w/root2` is not inside `/w/root`): read targets, the existing part of a
//! write target (the file itself, or its deepest existing ancestor when it is created, the
//! rest of the path then holding no `..`), Bash's `cwd`, and Glob's and Grep's base
//! directories. A symbolic link whose target does not exist is never written through. The
//! walkers of Glob and Grep do not follow symbolic links. Refusals are `isError` results that
//! say why. Bash's `cwd` is confined; what the command itself then does is not sandboxed.
//!
//! # Read
//! Output is `cat -n` style, as Claude Code prints it: the line number right-aligned in six
//! columns, a tab, the line (without its line break; a leading UTF-8 BOM is not shown).
//! `offset` is the 1-based number of the first line shown (0 counts as 1), `limit` the number
//! of lines (default [`Limits::read_lines`]). Lines longer than [`Limits::read_line_chars`]
//! characters are cut (on a character boundary) with a `… [line truncated]` mark. The whole
//! output stays within [`Limits::read_budget`] bytes: past it the last whole line is kept
//! and a trailer says which `offset` to continue from. The file is streamed (memory bounded
//! by the budget, whatever the file's size). A NUL byte in the first 8 KiB means a binary
//! file: an error. Bytes that are not UTF-8 are shown as U+FFFD and a trailer says so.
//!
//! # Write and Edit
//! Atomic: a temporary file in the target's directory, fsync, rename over the target, fsync
//! of the directory. An existing file keeps its permission bits; a new one gets `0644` (its
//! missing parent directories are created, inside the root). Write over an existing file
//! keeps its UTF-8 BOM and its CRLF line endings when the new content has neither. Edit is a
//! literal byte replacement (no `$` expansion), works on files that are not UTF-8, fails on
//! zero matches and on several unless `replace_all` (the count is reported), rejects an empty
//! `old` and `old == new`, and retries with CRLF line breaks when `old` has `\n` and the file
//! uses `\r\n`.
//!
//! # fs delegation
//! [`BuiltinTools::with_fs_delegate`]: Read, Write and Edit go through the editor's buffers
//! (ACP `fs/read_text_file` / `fs/write_text_file`, relayed by `awf acp-serve` over a unix
//! socket) after the same confinement check, on the resolved path. Read renders the buffer
//! as it renders a file; Write sends the content as given; Edit reads the buffer and writes
//! it back whole. Bash, Glob and Grep stay on disk. A failing channel is an `isError`
//! result, never a silent fallback to the disk.
//!
//! # Bash
//! `$SHELL -c <command>` (`/bin/sh` when `$SHELL` is unset or not an absolute path to a file)
//! in its own process group, stdin on `/dev/null`, the inherited environment plus a marker
//! ([`TAG_VAR`]) unique to the call. Default timeout [`Limits::bash_default_timeout`],
//! at most [`Limits::bash_max_timeout`]. On timeout or cancel: SIGTERM to the group,
//! [`Limits::bash_grace`], SIGKILL to the group. After the command ends, however it ends,
//! every process still carrying the call's marker (background jobs, `setsid`/`nohup`
//! daemons that left the group) is stopped the same way and reaped when it was adopted, and
//! the pipes are drained for a bounded time. stdout and stderr are each kept head and tail
//! (together at most [`Limits::bash_stream_chars`] characters, the middle replaced by a
//! mark), and values of secret-named variables of the inherited environment are masked
//! (`awf_domain::mask`). The result always holds the exit code and both streams; a non-zero
//! exit, a timeout or a cancel is `isError`. Residual risk: a process that both leaves the
//! group and clears its environment (`env -i setsid …`) is not found by the marker. If this
//! process is itself SIGKILLed mid-call, a helper that outlives it (the `awf` binary's
//! watchdog) stops what its calls started with [`kill_tagged_by`].
//!
//! # Glob
//! `**` patterns (globset, `/` is literal: `*.rs` matches only at the top of the base, use
//! `**/*.rs` for every level). The base is `cwd` (or `path`), else the root; a pattern's
//! leading literal directories (absolute or relative) become part of the base. `.gitignore`,
//! `.ignore` and `.git/info/exclude` files are honoured (those of the base, below it, and
//! between the root and the base; never one above the root), hidden files are listed, `.git`
//! is skipped. Each directory is listed through a descriptor opened beneath its parent's
//! with no link allowed, so every name shown was read from the directory it is shown under.
//! Absolute paths, newest modification time first, at most [`Limits::glob_results`].
//!
//! # Grep
//! The `ignore` walker (`.gitignore`, hidden files and binary files skipped) and the `regex`
//! crate. `output_mode`: `files_with_matches` (default, as Claude Code), `content`
//! (`file:line:text`), `count` (`file:count`). `glob` and `type` filter files as ripgrep's
//! `--glob` and `--type` do; `-A`/`-B`/`-C` add context lines in `content` mode
//! (`file-line-text`, groups separated by `--`, at most 100 each); `head_limit` caps the entries (default and maximum
//! [`Limits::grep_results`]); matched lines longer than [`Limits::grep_line_chars`] are cut
//! (a note `[awf: N line(s) … were cut]` says so). A line of any length is searched whole:
//! up to 1 MiB with the regex, a longer one byte by byte with the lazy DFA of the same
//! pattern (constant memory; only its first MiB is kept, to show); one the DFA cannot decide
//! (a Unicode `\b` on non-ASCII text) is searched in its first MiB and named in a note.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod args;
mod bash;
mod confine;
mod delegate;
mod edit;
mod glob;
mod grep;
mod lines;
pub mod operations;
mod read;
mod specs;

use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::mask::Masker;
use awf_domain::ports::tools::ToolCall;
use awf_domain::ports::tools::ToolCallError;
use awf_domain::ports::tools::ToolOutput;
use awf_domain::ports::tools::ToolProvider;
use awf_domain::ports::tools::ToolSpec;
use tokio_util::sync::CancellationToken;

pub use bash::TAG_VAR;
pub use bash::kill_tagged_by;
pub use confine::Root;
pub use operations::BuiltinOperations;

/// How long the editor gets to answer one delegated Read or Write (120 s: it may be showing
/// the user a prompt).
pub const FS_DELEGATE_TIMEOUT: Duration = Duration::from_secs(120);

/// The names of the built-in tools, in `tools/list` order.
pub const TOOL_NAMES: [&str; 6] = ["Read", "Write", "Edit", "Bash", "Glob", "Grep"];

/// Limits of the built-in tools. Sizes in bytes unless named `_chars`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Lines Read shows when the call gives no `limit` (2000, as Claude Code).
    pub read_lines: usize,
    /// Characters kept of one line by Read (2000).
    pub read_line_chars: usize,
    /// Bytes of Read's output at most (64 KiB: about 16,000 to 22,000 tokens, below the
    /// 25,000 tokens Claude Code takes from an MCP tool).
    pub read_budget: usize,
    /// Largest file Edit rewrites (10 MiB).
    pub edit_max_file: u64,
    /// Bash's timeout when the call gives none (120 s).
    pub bash_default_timeout: Duration,
    /// Bash's longest timeout; larger ones are lowered to it (600 s).
    pub bash_max_timeout: Duration,
    /// Time between SIGTERM and SIGKILL when Bash stops a command (2 s).
    pub bash_grace: Duration,
    /// Characters kept of each of stdout and stderr, head and tail together (30,000).
    pub bash_stream_chars: usize,
    /// Paths Glob returns at most (1000).
    pub glob_results: usize,
    /// Entries (lines, files or counts) Grep returns at most (1000).
    pub grep_results: usize,
    /// Characters kept of one matched line by Grep (1000).
    pub grep_line_chars: usize,
    /// Bytes of Glob's and Grep's output at most (64 KiB).
    pub list_budget: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            read_lines: 2000,
            read_line_chars: 2000,
            read_budget: 64 * 1024,
            edit_max_file: 10 * 1024 * 1024,
            bash_default_timeout: Duration::from_secs(120),
            bash_max_timeout: Duration::from_secs(600),
            bash_grace: Duration::from_secs(2),
            bash_stream_chars: 30_000,
            glob_results: 1000,
            grep_results: 1000,
            grep_line_chars: 1000,
            list_budget: 64 * 1024,
        }
    }
}

/// The six built-in tools over one workspace root.
///
/// Cheap to clone (the state is shared). Needs a tokio runtime with the I/O and time drivers
/// (Bash) and blocking threads (file tools).
#[derive(Debug, Clone)]
pub struct BuiltinTools {
    inner: Arc<Inner>,
}

#[derive(Debug, Clone)]
struct Inner {
    root: Root,
    limits: Limits,
    masker: Masker,
    shell: PathBuf,
    /// The editor's file channel (fs delegation): Read, Write and Edit go through it.
    fs: Option<delegate::Channel>,
    /// Where the last reads of files stopped (Read's paging).
    marks: read::Marks,
}

impl BuiltinTools {
    /// Tools confined to `root` (canonicalized now), with default limits; Bash masks the
    /// values of secret-named variables of this process's environment.
    ///
    /// # Errors
    /// `USER.INPUT.MISSING_FILE` when `root` does not exist or is not a directory.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, AwfError> {
        Self::with_limits(root, Limits::default())
    }

    /// Like [`BuiltinTools::new`] with the given limits.
    ///
    /// # Errors
    /// `USER.INPUT.MISSING_FILE` when `root` does not exist or is not a directory.
    pub fn with_limits(root: impl AsRef<Path>, limits: Limits) -> Result<Self, AwfError> {
        let root = Root::new(root.as_ref()).map_err(|why| {
            AwfError::new(ErrorCode::UserInputMissingFile, why)
                .with_hint("root_dir must name an existing directory")
        })?;
        let vars: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        let masker = Masker::from_named(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        Ok(Self {
            inner: Arc::new(Inner {
                root,
                limits,
                masker,
                shell: bash::resolve_shell(std::env::var_os("SHELL").as_deref()),
                fs: None,
                marks: read::Marks::default(),
            }),
        })
    }

    /// Adds the secrets of `masker` to those Bash masks (the values of the secret-named
    /// variables of this process's environment), e.g. the secret inputs of the run.
    #[must_use]
    pub fn with_masker(mut self, masker: &Masker) -> Self {
        let mut inner = (*self.inner).clone();
        inner.masker.extend(masker);
        self.inner = Arc::new(inner);
        self
    }

    /// Sends Read, Write and Edit through the editor's file channel at `socket` (ACP fs
    /// delegation; protocol: `awf_domain::ports::tools::ProxySpec::fs_delegate`), each
    /// answer awaited at most `timeout`. Paths are confined to the root first, as on disk;
    /// Bash, Glob and Grep stay on disk. A channel that fails is an `isError` result.
    #[must_use]
    pub fn with_fs_delegate(mut self, socket: impl Into<PathBuf>, timeout: Duration) -> Self {
        let mut inner = (*self.inner).clone();
        inner.fs = Some(delegate::Channel {
            socket: socket.into(),
            timeout,
        });
        self.inner = Arc::new(inner);
        self
    }

    /// The canonical root every path is confined to.
    pub fn root(&self) -> &Path {
        self.inner.root.path()
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }
}

/// Runs a blocking file tool on tokio's blocking pool.
async fn blocking(
    inner: Arc<Inner>,
    f: impl FnOnce(&Inner) -> ToolOutput + Send + 'static,
) -> ToolOutput {
    match tokio::task::spawn_blocking(move || f(&inner)).await {
        Ok(out) => out,
        Err(e) => ToolOutput::error(format!("internal error: the tool failed: {e}")),
    }
}

#[async_trait::async_trait]
impl ToolProvider for BuiltinTools {
    fn tools(&self) -> Vec<ToolSpec> {
        specs::all()
    }

    async fn call(
        &self,
        call: ToolCall,
        cancel: CancellationToken,
    ) -> Result<ToolOutput, ToolCallError> {
        let inner = Arc::clone(&self.inner);
        let args = call.arguments;
        let shared = Arc::clone(&self.inner);
        let mut out = match (call.name.as_str(), inner.fs.clone()) {
            ("Read", Some(ch)) => blocking(inner, move |i| delegate::read(i, &ch, &args)).await,
            ("Write", Some(ch)) => blocking(inner, move |i| delegate::write(i, &ch, &args)).await,
            ("Edit", Some(ch)) => blocking(inner, move |i| delegate::edit(i, &ch, &args)).await,
            ("Read", None) => blocking(inner, move |i| read::run(i, &args)).await,
            ("Write", None) => blocking(inner, move |i| edit::write(i, &args)).await,
            ("Edit", None) => blocking(inner, move |i| edit::edit(i, &args)).await,
            ("Glob", _) => blocking(inner, move |i| glob::run(i, &args)).await,
            ("Grep", _) => blocking(inner, move |i| grep::run(i, &args)).await,
            ("Bash", _) => bash::run(&inner, &args, cancel).await,
            _ => return Err(ToolCallError::UnknownTool(call.name)),
        };
        // Secrets never leave in a result, whichever tool read them (a file's text included).
        if let std::borrow::Cow::Owned(masked) = shared.masker.mask(&out.text) {
            out.text = masked;
        }
        Ok(out)
    }
}
