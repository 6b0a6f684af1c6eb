//! WorkflowFacade and RunSession: the driving port every front-end (CLI, ACP, HTTP) uses.
//!
//! A run is observed only through its events and answered only through `respond`.

use std::path::PathBuf;

use serde_json::Map;
use serde_json::Value;

use crate::error::AwfError;
use crate::event::EventEnvelope;
use crate::run::CancelReason;
use crate::run::RunId;

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
}

/// An answer to a request the run made (missing input, approval, conversation turn,
/// breakpoint).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionResponse {
    /// The request being answered (`InteractionRequest::request_id`).
    pub request_id: String,
    /// The typed answer; it must fit the request's kind.
    pub answer: crate::interaction::Answer,
}

/// A running workflow.
#[async_trait::async_trait]
pub trait RunSession: Send {
    /// The run id.
    fn run_id(&self) -> &RunId;

    /// Next event, in order; `None` once the run has finished and every event was delivered
    /// (the last one is `RunFinished`).
    async fn next_event(&mut self) -> Option<EventEnvelope>;

    /// Asks the run to stop: running processes get SIGTERM (then SIGKILL after 5 s), the run
    /// ends `cancelled` and `workflow_cancel` hooks run. Idempotent.
    fn cancel(&self, reason: CancelReason);

    /// Answers a pending request.
    ///
    /// # Errors
    /// `USER.FACADE.INPUT_REJECTED` when nothing with that id is pending or the answer does
    /// not fit the request's kind (the request stays pending); `USER.FACADE.SESSION_CLOSED`
    /// after the run ended.
    async fn respond(&self, response: SessionResponse) -> Result<(), AwfError>;

    /// Why the run never started, once its events ended without `RunStarted` (a missing
    /// input not given when asked, or a cancel while asking); `None` otherwise.
    fn start_error(&self) -> Option<AwfError> {
        None
    }
}

/// Starts runs.
#[async_trait::async_trait]
pub trait WorkflowFacade: Send + Sync {
    /// Loads and validates the workflow, resolves and validates inputs, then starts the run.
    ///
    /// # Errors
    /// Anything that stops the run before it starts: `USER.FACADE.WORKFLOW_NOT_FOUND`,
    /// `WORKFLOW.*` load/validation errors, `USER.INPUT.VALIDATION_FAILED`.
    async fn start(&self, request: RunRequest) -> Result<Box<dyn RunSession>, AwfError>;

    /// Continues an interrupted or failed run (same run id; agent sessions restored).
    ///
    /// # Errors
    /// `USER.INPUT.VALIDATION_FAILED` for an unknown run, a run that already succeeded, a bad
    /// `--from` step, or secret inputs that must be given again; the errors of `start`.
    async fn resume(&self, request: ResumeRequest) -> Result<Box<dyn RunSession>, AwfError>;
}
