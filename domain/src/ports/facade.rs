//! What a front-end asks the run service for: a new run (`RunRequest`) or the resume of a
//! recorded one (`ResumeRequest`). The driving port itself is `ports::service::RunService`.
//!
//! A run is observed only through its events and answered only through `respond`.

use std::path::PathBuf;

use serde_json::Map;
use serde_json::Value;

/// Where an input value came from; decides precedence (CLI > config > default).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunRequest {
    /// Workflow identifier or file path.
    pub identifier: String,
    /// `--input k=v` values, in order (last repeat wins).
    pub inputs: Vec<(String, String)>,
    /// Values from project configuration (lower precedence than `inputs`).
    pub config_inputs: Map<String, Value>,
    /// Process environment for `.env` and child processes.
    pub env: Vec<(String, String)>,
    /// Working directory of the run (`.context.WorkingDir`, default `dir` of commands).
    pub working_dir: PathBuf,
    /// `--mock states.<step>.<field>=<value>`: step → field (`output`, `stderr`, `status`,
    /// lower-case or PascalCase) → value. A mocked agent step answers from here without
    /// calling its provider.
    pub mocks: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
    /// `--interactive`: stop before states and wait for a decision (a `Breakpoint`
    /// interaction request).
    pub interactive: Option<Interactive>,
    /// `--step S`: run only this state (no routing), with `mocks` as the earlier states.
    pub only_step: Option<String>,
    /// Whether the front-end can answer `MissingInput` requests (the terminal sets it when
    /// stdin and stderr are terminals and the format is not JSON; an editor or a web page
    /// can too). Then each missing required input is asked for before `RunStarted`;
    /// otherwise missing inputs are the `USER.INPUT.VALIDATION_FAILED` error, with examples.
    pub prompt_missing_inputs: bool,
    /// `--yes`: approve every approval gate without asking (the first allowing option).
    pub auto_approve: bool,
    /// MCP servers the front-end adds to every agent step of the run and its sub-workflows
    /// (ACP `session/new.mcpServers`), names already checked (none reserved, see
    /// [`crate::ports::agent::McpAttachment::extra`]). Empty for the terminal.
    pub mcp_servers: Vec<crate::ports::agent::McpServer>,
    /// The editor's file channel (ACP fs delegation): a unix socket the front-end serves,
    /// speaking the protocol of [`crate::ports::tools::ProxySpec::fs_delegate`]. When set,
    /// the built-in Read, Write and Edit of every agent step's MCP proxy (this run and its
    /// sub-workflows) go through it instead of the disk. `None` for the terminal.
    pub fs_delegate: Option<PathBuf>,
    /// The run's id when it was given beforehand (a run submitted to the shared store's
    /// queue keeps the id it was given at submit time, issue 15); `None`: a new one from the
    /// id generator. Starting fails when a run with that id is recorded or locked already.
    pub run_id: Option<crate::run::RunId>,
    /// Refuse inputs the workflow does not declare (`USER.INPUT.VALIDATION_FAILED`, see
    /// [`crate::validate::refuse_undeclared_inputs`]): set by the remote front-ends (HTTP,
    /// ACP, MCP workflows-as-tools, the shared store's queue); `awf run` leaves it unset and
    /// only warns.
    pub refuse_undeclared_inputs: bool,
    /// The name the run is shown by (its result's `workflow`, the run service's view, a
    /// worker's log lines) instead of `identifier`: a run of the shared store's queue is
    /// started by its file's absolute path and shown by its workflow's name, as the queue
    /// shows it. `None`: the identifier. What is recorded as the run's identifier (and its
    /// path) does not change.
    pub shown_as: Option<String>,
    /// When the run counts as started, when not now: a shared store's queued run started by
    /// a worker keeps its submit time as its start, so its `started_at` does not move when it
    /// is claimed and its `duration_ms` spans its time in the queue. `None`: its start.
    pub started_at: Option<std::time::SystemTime>,
}

/// Where an interactive run stops.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Interactive {
    /// Stop only before these states (`-b a,b`); empty = before every state.
    pub breakpoints: Vec<String>,
}

/// Where `awf resume` restarts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ResumeFrom {
    /// The state the run was in when it stopped (default).
    #[default]
    Current,
    /// The state that completed last before the current one.
    Previous,
    /// A state that ran; states completed after it are forgotten and run again.
    Step(String),
}

/// `awf resume <run_id>`: continue an interrupted or failed run with the same run id.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResumeRequest {
    /// The run to continue.
    pub run_id: String,
    /// Where to restart.
    pub from: ResumeFrom,
    /// `--input k=v` overrides (also how masked secrets are given back).
    pub inputs: Vec<(String, String)>,
    /// Project configuration inputs.
    pub config_inputs: Map<String, Value>,
    /// Process environment.
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub working_dir: PathBuf,
    /// Whether the caller holds the run's exclusive lock (every process that drives a run
    /// holds it): then no live process runs it, whatever process now has the recorded
    /// owner's pid (pids are reused), and the liveness check by pid is skipped. When it does
    /// not, resuming takes the lock itself (an error when another process holds it).
    pub lock_held: bool,
    /// `--yes`: approve every approval gate without asking.
    pub auto_approve: bool,
    /// As [`RunRequest::mcp_servers`].
    pub mcp_servers: Vec<crate::ports::agent::McpServer>,
    /// As [`RunRequest::fs_delegate`].
    pub fs_delegate: Option<PathBuf>,
    /// As [`RunRequest::shown_as`] (a shared store's run taken over or resumed by a worker).
    pub shown_as: Option<String>,
    /// As [`RunRequest::refuse_undeclared_inputs`], for the `inputs` given again: set by the
    /// HTTP resume route (and a queued resume it posted); `awf resume` leaves it unset and
    /// warns about them as `awf run` does.
    pub refuse_undeclared_inputs: bool,
    /// `--mock states.<step>.<field>=<value>` given to the resume: step → field → value.
    /// Each replaces the mocks the run stored for that step (all their fields); the other
    /// stored mocks still apply.
    pub mocks: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
    /// `--no-mocks`: the mocks the run stored are dropped (those in `mocks` still apply).
    pub no_mocks: bool,
}
