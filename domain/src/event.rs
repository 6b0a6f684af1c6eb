//! The canonical run-event stream. Every front-end (terminal printer, `-f json` result,
//! transcript, audit, spans, ACP frames, SSE) is a projection of these events.
//!
//! Events are emitted in order per run; `seq` is monotonic per run starting at 1.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::Deserialize;
use serde::Serialize;
use serde_json::Map;
use serde_json::Value;

use crate::run::RunId;
use crate::run::RunResult;
use crate::run::StepState;

/// What `--interactive` shows before a step: its place in the run, what it will execute
/// and where it can go next. Source: spec/workflow.md §3.12 (interactive mode).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepPreview {
    /// 1-based visit counter of the run: each visited step takes the next number; a step run
    /// again by `retry` takes its earlier number.
    pub position: usize,
    /// Number of states in the workflow file that can pause (terminal states, which only
    /// end the run, and states that run only as a parallel branch or in a loop's body, which
    /// never pause, are not counted).
    pub total: usize,
    /// The command as it will run (interpolated with the current inputs and states; the
    /// loaded `script_file` content; raw when it cannot be resolved yet); `None` for steps
    /// that run no command.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Step timeout in milliseconds, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Routes out of the step, in evaluation order.
    pub routes: Vec<PreviewRoute>,
}

/// One route of a [`StepPreview`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviewRoute {
    /// `on_success`, `on_failure`, `when` (a conditional transition), `default` (a transition
    /// without `when`) or `on_complete`.
    pub on: String,
    /// The `when` expression of a conditional transition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// Target state; empty for an inline `on_failure: {message, status}`.
    pub target: String,
    /// The message of an inline `on_failure` (the run fails with it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inline_error: Option<String>,
    /// The exit code of an inline `on_failure` (`status:`), when it sets one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// Bytes a command wrote, which need not be UTF-8. Terminals get them exactly
/// ([`OutputBytes::as_bytes`]); text projections (transcript, JSON, SSE) use
/// [`OutputBytes::to_text`], where each invalid sequence becomes U+FFFD (as
/// [`String::from_utf8_lossy`] does). Serializes as that text.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct OutputBytes(pub Vec<u8>);

impl OutputBytes {
    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The bytes as text (invalid UTF-8 sequences replaced by U+FFFD).
    pub fn to_text(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.0)
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for OutputBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.to_text())
    }
}

impl From<&str> for OutputBytes {
    fn from(s: &str) -> Self {
        Self(s.as_bytes().to_vec())
    }
}

impl From<String> for OutputBytes {
    fn from(s: String) -> Self {
        Self(s.into_bytes())
    }
}

impl From<Vec<u8>> for OutputBytes {
    fn from(b: Vec<u8>) -> Self {
        Self(b)
    }
}

/// Reads the text back (bytes that were not UTF-8 stay as their replacement characters).
impl<'de> Deserialize<'de> for OutputBytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Self::from)
    }
}

impl Serialize for OutputBytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_text())
    }
}

/// Severity of a log event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogLevel {
    /// Hook `log:` actions and progress notes.
    Info,
    /// Something the user should look at (failed non-fatal hook, unset `env:` variable).
    Warn,
}

/// Who reported a tool call event (the transcript's `fidelity`, spec/workflow.md §3.15,
/// shared/spec/mcp.md §3.5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToolFidelity {
    /// Parsed from the agent's own output stream (`agent_emitted`): what the agent says it did.
    #[default]
    #[serde(rename = "agent_emitted")]
    Agent,
    /// Recorded by awf's tool router (`router`): the call ran through awf (`mcp-serve`, or
    /// the in-process tools of `openai_compatible`).
    #[serde(rename = "router")]
    Router,
}

impl ToolFidelity {
    /// The wire word: `agent_emitted` or `router`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent_emitted",
            Self::Router => "router",
        }
    }
}

/// Whether a tool call is the agent's own report of a call to awf's proxy
/// (`mcp__awf-proxy__Read` in Claude Code, namespace `mcp__awf_proxy` in Codex,
/// `mcp_awf-proxy-<hex>_Read` in Gemini, `awf-proxy-<hex>_Read` in OpenCode): the proxy
/// reports the same call itself ([`ToolFidelity::Router`]), so a display shows one of the two
/// (the router's) while the transcript keeps both.
pub fn is_proxy_call_report(name: &str, fidelity: ToolFidelity) -> bool {
    fidelity == ToolFidelity::Agent && (name.contains("awf-proxy") || name.contains("awf_proxy"))
}

/// One run event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    /// The run started (inputs resolved and validated; values masked).
    RunStarted {
        /// YAML `name`.
        workflow: String,
        /// Identifier the run was started with.
        identifier: String,
        /// Absolute path of the workflow file, when loaded from disk.
        workflow_path: Option<String>,
        /// Effective inputs, secrets masked.
        inputs: Map<String, Value>,
        /// Set when this run continues an earlier run with the same id (`awf resume`): the
        /// state it restarts from. Projections keep what they recorded for the run before.
        resumed_from: Option<String>,
        /// Process id of the awf process running it (so a second `awf resume` can tell the
        /// run is still alive).
        pid: u32,
        /// The run's mocks (`--mock states.<step>.<field>=<value>`): step → field → value,
        /// secrets masked, so that `awf resume` answers the same steps with them. Absent in
        /// JSON when there are none.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        mocks: BTreeMap<String, BTreeMap<String, String>>,
        /// The run's working directory (absolute): where its steps run unless they set `dir`
        /// (relative `dir`s resolve against it), `.context.WorkingDir`. `awf resume` runs the
        /// rest of the run there again. `None` (absent in JSON) in events recorded before it
        /// was kept.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        working_dir: Option<String>,
    },
    /// A state started executing.
    StepStarted {
        /// State name.
        step: String,
        /// Internal kind (`command`, `parallel`, …).
        kind: String,
        /// The command as it will run, for a `command` step: interpolated with the inputs
        /// and states known at the step's start (the loop frame included), `script_file`
        /// content loaded, secrets masked; the raw template when it cannot be rendered yet.
        /// `None` for steps that run no shell command. Absent in JSON when `None`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        command: Option<String>,
    },
    /// A failed attempt will be retried after `delay_ms`.
    StepRetrying {
        /// State name.
        step: String,
        /// The attempt about to start (2 = first retry).
        attempt: u32,
        /// Wait before it, in milliseconds.
        delay_ms: u64,
        /// Why the attempt before it failed, briefly (`exit 1`, `timed out`, or the first
        /// line of its error). Absent in JSON when `None` (events recorded before it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Live output of a running command: the bytes it wrote (masked), exactly, in arbitrary
    /// chunks (a chunk may end inside a line or a UTF-8 character; only a possible start of a
    /// secret is held back until the next chunk).
    OutputChunk {
        /// State name.
        step: String,
        /// Which stream.
        stream: OutputStream,
        /// Masked bytes (serialized as UTF-8 text, invalid bytes as U+FFFD).
        text: OutputBytes,
    },
    /// A log line (hook `log:` action, warning).
    Log {
        /// State the line belongs to, if any.
        step: Option<String>,
        /// Severity.
        level: LogLevel,
        /// Masked text.
        message: String,
    },
    /// A piece of an agent's answer, as it streams (masked).
    AgentMessageChunk {
        /// State name.
        step: String,
        /// Text.
        text: String,
    },
    /// A piece of an agent's reasoning, as it streams (masked).
    AgentThoughtChunk {
        /// State name.
        step: String,
        /// Text.
        text: String,
    },
    /// An agent called a tool.
    ToolCall {
        /// State name.
        step: String,
        /// Provider's id of the call (the MCP request id for [`ToolFidelity::Router`]).
        id: String,
        /// Tool name (as the agent named it for [`ToolFidelity::Agent`], `mcp__awf-proxy__Read`
        /// in Claude Code; as served for [`ToolFidelity::Router`], `Read`).
        name: String,
        /// Arguments (masked).
        input: Value,
        /// Who reported the call.
        fidelity: ToolFidelity,
    },
    /// A tool call of an agent finished.
    ToolCallResult {
        /// State name.
        step: String,
        /// Id of the call.
        id: String,
        /// Result text (masked).
        output: String,
        /// Whether the tool failed.
        is_error: bool,
        /// Who reported the result.
        fidelity: ToolFidelity,
    },
    /// The run asks a front-end something (missing input, conversation turn, breakpoint,
    /// approval) and waits for `respond(request.request_id, answer)`. Every request is
    /// followed, once, by [`RunEvent::InteractionResolved`] with the same id. Text in the
    /// request is masked. Source: shared/design/architecture.md ("The run service").
    InteractionRequired {
        /// What is asked (request id, step, kind, timeout).
        request: Box<crate::interaction::InteractionRequest>,
    },
    /// A request ended: answered, timed out or cancelled. An answered missing input of a
    /// secret name, and secrets in typed text, are masked.
    InteractionResolved {
        /// The request's id.
        request_id: String,
        /// How it ended.
        resolution: crate::interaction::Resolution,
    },
    /// A state finished (completed or failed); `state` is its recorded result.
    StepFinished {
        /// State name.
        step: String,
        /// Internal kind.
        kind: String,
        /// Recorded result (masked).
        state: Box<StepState>,
    },
    /// A `call_workflow` step started a child run; the child's own events follow with
    /// `parent_run_id` set.
    ChildRunStarted {
        /// Calling state.
        step: String,
        /// The child's run id.
        child_run_id: RunId,
        /// Child identifier.
        workflow: String,
    },
    /// The run ended.
    RunFinished {
        /// The run result contract.
        result: Box<RunResult>,
    },
}

/// An event with its run identity and position in the stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventEnvelope {
    /// Monotonic per run, from 1.
    pub seq: u64,
    /// The run this event belongs to.
    pub run_id: RunId,
    /// Set on events of a sub-workflow run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<RunId>,
    /// Wall-clock time of the event.
    #[serde(with = "system_time_millis")]
    pub at: SystemTime,
    /// `step`, or `loop:<i>/…/<step>` inside loops.
    pub path: String,
    /// Innermost loop index, inside loops.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iteration: Option<usize>,
    /// The event.
    pub event: RunEvent,
}

/// Receives run events. Implementations must not block for long: the engine calls `emit`
/// inline. Events of one run arrive in `seq` order.
pub trait EventPublisher: Send + Sync {
    /// Delivers one event.
    fn emit(&self, event: EventEnvelope);

    /// Whether `emit` would do anything with `event`: a sink that fans events out to several
    /// publishers (the engine's) hands a copy only to those that would, so a publisher that
    /// is off (no exporter, a log level below its own) costs no copy of each event. `true`
    /// (the default) for a publisher that takes every event; a publisher that answers
    /// `false` must ignore the event if given it anyway.
    fn interested(&self, event: &EventEnvelope) -> bool {
        let _ = event;
        true
    }

    /// Blocks until every event delivered before this call has taken effect (a recorder
    /// that writes on its own thread: its state file written). Nothing for a publisher that
    /// acts inside `emit` (the default).
    fn flush(&self) {}

    /// [`flush`](Self::flush) without blocking a thread: a future that resolves once every
    /// event delivered before this call has taken effect. `None` (the default): this
    /// publisher has no such future; call `flush` (on a thread that may block).
    fn flushed(&self) -> Option<Settle> {
        None
    }

    /// A barrier for the run's record: the returned future resolves once every event
    /// delivered before this call is durable where this publisher records runs, so that a
    /// process killed from then on resumes after those events. The engine awaits it after
    /// each `StepStarted`, before anything of the step runs: the record then names the step
    /// in progress and every step before it as finished ("completed states never run
    /// again", for a store whose writes lag behind the run).
    ///
    /// `None`: nothing to wait for (the default): a publisher that records nothing, or one
    /// whose record is written on the event's path already. A publisher that cannot make
    /// the events durable within its own bound resolves anyway (and reports that the run's
    /// record may be incomplete); the future never fails.
    fn settle(&self) -> Option<Settle> {
        None
    }

    /// Resolves once every event delivered before this call is written where this publisher
    /// records runs, readable by a history or state read that follows (written, not
    /// necessarily synced to the disk). Unlike [`EventPublisher::settle`] it always waits
    /// for what is queued: the run service asks it before it tells a client that a run
    /// started, so that the client finds the run in the history at once.
    ///
    /// `None`: nothing is queued, or nothing to wait for (the default: a publisher that
    /// records nothing, or writes on the event's path). A publisher that cannot write
    /// within its own bound resolves anyway; the future never fails.
    fn written(&self) -> Option<Settle> {
        None
    }

    /// Whether the run's start (its `RunStarted`, delivered before this call) is on record:
    /// the future resolves once it was written, to the error that kept it from being
    /// written (a read-only or full data root). The engine awaits it before the run's
    /// `workflow_start` hooks and first step, and ends the run with that error instead of
    /// running them: a run whose start is not on record could not be resumed, and `awf
    /// status` would not know it ("no step runs before its run's start is written").
    ///
    /// `None` (the default): this publisher does not check it (nothing to wait for).
    fn start_recorded(&self) -> Option<StartRecorded> {
        None
    }

    /// The error that keeps this run's steps from being recorded (a full or read-only data
    /// root: a state file or journal write failed), if one did. The engine asks it when a
    /// step starts, after [`settle`](Self::settle), and ends the run with that error instead
    /// of running the step: a step whose completion cannot be recorded would be run again by
    /// `awf resume` ("a step does not start while the record lags behind the run").
    ///
    /// `None` (the default): nothing failed, or this publisher does not check.
    fn record_failed(&self) -> Option<crate::AwfError> {
        None
    }
}

/// What [`EventPublisher::start_recorded`] returns: resolves once the run's start was
/// written, to the error that kept it from being written.
pub type StartRecorded =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), crate::AwfError>> + Send>>;

/// What [`EventPublisher::settle`] returns: resolves (with nothing) once the events
/// delivered before it was asked for are durable, or the publisher gave up waiting.
pub type Settle = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

mod system_time_millis {
    use std::time::SystemTime;
    use std::time::UNIX_EPOCH;

    pub(super) fn serialize<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        let ms = t
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        s.serialize_u64(ms)
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<SystemTime, D::Error> {
        let ms = <u64 as serde::Deserialize>::deserialize(d)?;
        Ok(UNIX_EPOCH + std::time::Duration::from_millis(ms))
    }
}
