//! Run state: what each state produced, and the run result contract.
//!
//! Source: spec/workflow.md §3.2 and shared/conformance/README.md ("The run result contract").

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use serde::Deserialize;
use serde::Serialize;
use serde_json::Value;

use crate::error::ErrorBody;

/// A run id: UUID v4 text, also the id of state files, history rows and transcripts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct RunId(pub String);

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Status of one state's execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Started, not finished.
    Running,
    /// Finished successfully.
    Completed,
    /// Finished with a failure (non-zero exit, timeout, error).
    Failed,
    /// Not run (a parallel branch that never started because the block ended early).
    Skipped,
    /// Stopped by a run cancel.
    Cancelled,
}

impl StepStatus {
    /// Wire text (`running`, `completed`, …); also what templates and expressions see.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
            Self::Cancelled => "cancelled",
        }
    }
}

/// Token counts reported by an agent provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Input tokens.
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Total tokens.
    pub total: u64,
    /// Whether the counts are estimates.
    pub estimated: bool,
}

/// Immutable text shared by every copy of the state that holds it: cloning a
/// [`StepState`] (for an event, the run result, a snapshot) costs a reference count, not the
/// bytes, so a step's output is held in memory once however many projections see it.
///
/// Reads as a `&str` ([`Deref`](std::ops::Deref)); serializes as a JSON string and
/// deserializes from one. Built from a `String` without copying it.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SharedText(Arc<String>);

impl SharedText {
    /// The text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// The text as an owned `String`: no copy when this is the only holder.
    pub fn into_string(self) -> String {
        Arc::try_unwrap(self.0).unwrap_or_else(|shared| (*shared).clone())
    }
}

impl std::ops::Deref for SharedText {
    type Target = str;
    fn deref(&self) -> &str {
        self.0.as_str()
    }
}

impl AsRef<str> for SharedText {
    fn as_ref(&self) -> &str {
        self.0.as_str()
    }
}

impl std::borrow::Borrow<str> for SharedText {
    fn borrow(&self) -> &str {
        self.0.as_str()
    }
}

impl std::fmt::Debug for SharedText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.0.as_str(), f)
    }
}

impl std::fmt::Display for SharedText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.as_str())
    }
}

impl From<String> for SharedText {
    fn from(s: String) -> Self {
        Self(Arc::new(s))
    }
}

impl From<&str> for SharedText {
    fn from(s: &str) -> Self {
        Self(Arc::new(s.to_owned()))
    }
}

impl From<SharedText> for String {
    fn from(t: SharedText) -> Self {
        t.into_string()
    }
}

impl PartialEq<str> for SharedText {
    fn eq(&self, other: &str) -> bool {
        self.0.as_str() == other
    }
}

impl PartialEq<&str> for SharedText {
    fn eq(&self, other: &&str) -> bool {
        self.0.as_str() == *other
    }
}

impl PartialEq<String> for SharedText {
    fn eq(&self, other: &String) -> bool {
        self.0.as_str() == other.as_str()
    }
}

impl PartialEq<SharedText> for str {
    fn eq(&self, other: &SharedText) -> bool {
        self == other.0.as_str()
    }
}

impl PartialEq<SharedText> for &str {
    fn eq(&self, other: &SharedText) -> bool {
        *self == other.0.as_str()
    }
}

impl PartialEq<SharedText> for String {
    fn eq(&self, other: &SharedText) -> bool {
        self.as_str() == other.0.as_str()
    }
}

impl Serialize for SharedText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.as_str())
    }
}

impl<'de> Deserialize<'de> for SharedText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Self::from)
    }
}

/// What one state produced (`.states.<name>` in templates). Last execution wins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepState {
    /// State name.
    pub name: String,
    /// Status.
    pub status: StepStatus,
    /// Raw stdout (masked, untrimmed) or agent text, or `completed N iterations` for loops.
    pub output: SharedText,
    /// Raw stderr (masked).
    pub stderr: SharedText,
    /// Process exit code; −1 after a timeout or cancel; `None` for states without a process.
    pub exit_code: Option<i32>,
    /// Attempts made (retry).
    pub attempts: u32,
    /// Failure text, when failed.
    pub error: Option<String>,
    /// Start time.
    #[serde(with = "crate::timefmt::rfc3339_opt", default)]
    pub started_at: Option<SystemTime>,
    /// End time.
    #[serde(with = "crate::timefmt::rfc3339_opt", default)]
    pub completed_at: Option<SystemTime>,
    /// Provider-specific structured response (agents, operations).
    pub response: Option<Value>,
    /// Parsed JSON output (`output_format: json`).
    pub json: Option<Value>,
    /// Agent token counts.
    pub tokens: TokenUsage,
    /// Mapped sub-workflow outputs (`call_workflow`): parent key → value.
    #[serde(default)]
    pub outputs: BTreeMap<String, String>,
    /// Agent session of a session-tracked agent step (`conversation:`), for `continue_from`.
    #[serde(default)]
    pub session: Option<crate::ports::agent::AgentSession>,
    /// The option chosen at the step's approval gate (`approval:`), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    /// The tool calls awf's tool router ran for this agent step (`mcp_proxy:`), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallEntry>,
}

/// One tool call awf's tool router ran during an agent step (`mcp_proxy:`: `awf mcp-serve`,
/// or the in-process tools): what the `-f json` result and the state file list. The output
/// is in the transcript's `tool.result` line, not here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallEntry {
    /// The call's id (the MCP request id, or the provider's tool call id in-process).
    pub id: String,
    /// Tool name as served (`Read`, `<plugin>_<op>`).
    pub name: String,
    /// Arguments, masked.
    pub input: Value,
    /// Whether the call failed.
    pub is_error: bool,
}

impl StepState {
    /// A fresh `running` state.
    pub fn running(name: &str, now: SystemTime) -> Self {
        Self {
            name: name.to_owned(),
            status: StepStatus::Running,
            output: SharedText::default(),
            stderr: SharedText::default(),
            exit_code: None,
            attempts: 0,
            error: None,
            started_at: Some(now),
            completed_at: None,
            response: None,
            json: None,
            tokens: TokenUsage::default(),
            outputs: BTreeMap::new(),
            session: None,
            approval: None,
            tool_calls: Vec::new(),
        }
    }

    /// The fields templates and expressions expose as `states.<name>.<Field>`, as
    /// (PascalCase name, snake_case name, value), in one place for every adapter. A missing
    /// exit code reads as 0, a missing response as `{}`, a missing error as `""`.
    pub fn fields(&self) -> [(&'static str, &'static str, Value); 13] {
        let outputs: serde_json::Map<String, Value> = self
            .outputs
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        [
            ("Output", "output", Value::String(self.output.to_string())),
            ("Stderr", "stderr", Value::String(self.stderr.to_string())),
            (
                "ExitCode",
                "exit_code",
                Value::from(self.exit_code.unwrap_or(0)),
            ),
            (
                "Status",
                "status",
                Value::String(self.status.as_str().to_owned()),
            ),
            (
                "Response",
                "response",
                self.response
                    .clone()
                    .unwrap_or_else(|| Value::Object(serde_json::Map::new())),
            ),
            ("JSON", "json", self.json.clone().unwrap_or(Value::Null)),
            ("TokensUsed", "tokens_used", Value::from(self.tokens.total)),
            (
                "TokensInput",
                "tokens_input",
                Value::from(self.tokens.input),
            ),
            (
                "TokensOutput",
                "tokens_output",
                Value::from(self.tokens.output),
            ),
            (
                "TokensEstimated",
                "tokens_estimated",
                Value::Bool(self.tokens.estimated),
            ),
            (
                "Error",
                "error",
                Value::String(self.error.clone().unwrap_or_default()),
            ),
            ("Attempt", "attempt", Value::from(self.attempts)),
            ("Outputs", "outputs", Value::Object(outputs)),
        ]
    }

    /// Whether the state ended successfully.
    pub fn succeeded(&self) -> bool {
        self.status == StepStatus::Completed
    }

    /// Duration from start to completion, in milliseconds (0 when unknown).
    pub fn duration_ms(&self) -> u64 {
        match (self.started_at, self.completed_at) {
            (Some(a), Some(b)) => b
                .duration_since(a)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(0),
            _ => 0,
        }
    }
}

/// Final status of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Reached a success terminal.
    Success,
    /// Reached a failure terminal or an unrouted failure.
    Failure,
    /// Cancelled by a signal or a front-end.
    Cancelled,
}

/// Why a run was cancelled; decides exit code 130 (interrupt), 143 (terminate) or 129 (hangup).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelReason {
    /// SIGINT / Ctrl-C.
    Interrupt,
    /// SIGTERM.
    Terminate,
    /// SIGHUP (the terminal closed, the SSH connection dropped): cancels like SIGTERM.
    Hangup,
    /// A front-end asked (ACP `session/cancel`, HTTP).
    Requested,
}

impl CancelReason {
    /// Exit code of a run cancelled for this reason.
    pub const fn exit_code(self) -> u8 {
        match self {
            Self::Interrupt => 130,
            Self::Terminate => 143,
            Self::Hangup => 129,
            Self::Requested => 130,
        }
    }
}

/// One state's entry in the run result (`states.<name>`).
///
/// Shape: `{"status": "completed", "output": "…", "stderr": "", "exit_code": 0, "attempts": 1}`
/// plus `error`, `duration_ms`, and for call_workflow steps `outputs`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StateResult {
    /// completed | failed | skipped | cancelled (| running while live).
    pub status: StepStatus,
    /// stdout or agent text, masked, untrimmed.
    pub output: SharedText,
    /// stderr, masked.
    pub stderr: SharedText,
    /// Exit code, `null` for states without a process.
    pub exit_code: Option<i32>,
    /// Attempts made.
    pub attempts: u32,
    /// Failure text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Wall time of the state.
    pub duration_ms: u64,
    /// Mapped sub-workflow outputs.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub outputs: BTreeMap<String, String>,
    /// Agent token counts (agent steps only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<TokenUsage>,
    /// Parsed JSON answer (`output_format: json`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub json: Option<Value>,
    /// The option chosen at the step's approval gate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    /// Tool calls run through awf's tool router (agent steps with `mcp_proxy:`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallEntry>,
}

impl From<&StepState> for StateResult {
    fn from(s: &StepState) -> Self {
        Self {
            status: s.status,
            output: s.output.clone(),
            stderr: s.stderr.clone(),
            exit_code: s.exit_code,
            attempts: s.attempts,
            error: s.error.clone(),
            duration_ms: s.duration_ms(),
            outputs: s.outputs.clone(),
            tokens: (s.tokens != TokenUsage::default()).then_some(s.tokens),
            json: s.json.clone(),
            approval: s.approval.clone(),
            tool_calls: s.tool_calls.clone(),
        }
    }
}

/// The run result contract printed by `awf run -f json`.
///
/// Shape (shared/conformance/README.md):
/// `{"run_id", "workflow", "status", "exit_code", "terminal", "duration_ms", "states", "outputs",
/// "error"}`. A failure before the run starts has `run_id: null`, empty `states` and `error` set.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunResult {
    /// Run id, `null` when the run never started.
    pub run_id: Option<RunId>,
    /// Identifier the run was started with.
    pub workflow: String,
    /// success | failure | cancelled.
    pub status: RunStatus,
    /// What the process exits with.
    pub exit_code: u8,
    /// Terminal state reached, or `null`.
    pub terminal: Option<String>,
    /// Wall time of the run.
    pub duration_ms: u64,
    /// Every state that ran, by name.
    pub states: BTreeMap<String, StateResult>,
    /// The workflow's declared outputs.
    pub outputs: BTreeMap<String, Value>,
    /// The failure, or `null`.
    pub error: Option<ErrorBody>,
    /// The interpolated `message` of the success terminal that ended the run (secrets
    /// masked); absent from JSON when the terminal has none (failure terminals put theirs in
    /// `error.message`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
