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
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(pub String);

/// How many candidate run ids the error of an ambiguous prefix names.
pub const AMBIGUOUS_SHOWN: usize = 5;

impl RunId {
    /// The error of run id prefix `query` that `total` runs match: `USER.INPUT.VALIDATION_FAILED`,
    /// its hint naming `candidates` (some of the matching ids, sorted, at most
    /// [`AMBIGUOUS_SHOWN`]) and how many more match (trial: 7 runs matched and the hint
    /// named 5, nothing of the other 2).
    pub fn ambiguous_prefix(
        query: &str,
        total: usize,
        candidates: &[&str],
    ) -> crate::error::AwfError {
        let mut shown: Vec<&str> = candidates.to_vec();
        shown.sort_unstable();
        shown.dedup();
        shown.truncate(AMBIGUOUS_SHOWN);
        let total = total.max(shown.len());
        let more = total - shown.len();
        let rest = if more > 0 {
            format!(" and {more} more (`awf history` lists them)")
        } else {
            String::new()
        };
        crate::error::AwfError::new(
            crate::error::ErrorCode::UserInputValidationFailed,
            format!("run id prefix '{query}' is ambiguous: {total} runs match"),
        )
        .with_hint(format!(
            "give more characters; candidates: {}{rest}",
            shown.join(", ")
        ))
    }
}

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

/// What a run has spent on agents so far: tokens in and out (`tokens` is their sum as the
/// providers count it), and US dollars when the models are priced (`prices:` in
/// `.awf/config.yaml`). Shape: `{"tokens_input", "tokens_output", "tokens", "usd"?}`.
/// Source: issue 14 ("Budgets").
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Spend {
    /// Input tokens.
    pub tokens_input: u64,
    /// Output tokens.
    pub tokens_output: u64,
    /// Total tokens (input + output, or the provider's total when larger).
    pub tokens: u64,
    /// Cost in US dollars of the calls whose model is priced; absent when none is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd: Option<f64>,
}

impl Spend {
    /// Adds one call's tokens and (when priced) its cost.
    pub fn add(&mut self, t: &TokenUsage, usd: Option<f64>) {
        self.tokens_input = self.tokens_input.saturating_add(t.input);
        self.tokens_output = self.tokens_output.saturating_add(t.output);
        let total = t.total.max(t.input.saturating_add(t.output));
        self.tokens = self.tokens.saturating_add(total);
        if let Some(c) = usd {
            self.usd = Some(self.usd.unwrap_or(0.0) + c);
        }
    }

    /// Whether nothing was spent.
    pub fn is_zero(&self) -> bool {
        self.tokens == 0 && self.usd.is_none_or(|u| u == 0.0)
    }
}

/// The price of one model, US dollars per million tokens (`prices: {<model>:
/// {input_per_mtok, output_per_mtok}}` in `.awf/config.yaml`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct ModelPrice {
    /// Dollars per million input tokens.
    pub input_per_mtok: f64,
    /// Dollars per million output tokens.
    pub output_per_mtok: f64,
}

impl ModelPrice {
    /// The cost of `t` in US dollars.
    #[allow(clippy::cast_precision_loss)]
    pub fn cost(&self, t: &TokenUsage) -> f64 {
        (t.input as f64 * self.input_per_mtok + t.output as f64 * self.output_per_mtok)
            / 1_000_000.0
    }
}

/// Prices by model name. A call is priced by the first of its names (the `model` option,
/// then the provider name) that has an entry: exact, then the longest key the name starts
/// with (`gpt-4o` prices `gpt-4o-2024-08-06`), then the `"*"` entry.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Prices(pub BTreeMap<String, ModelPrice>);

impl Prices {
    /// The price of the first name that has one (see the type docs).
    pub fn lookup<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str> + Clone,
    ) -> Option<ModelPrice> {
        for n in names.clone() {
            if let Some(p) = self.0.get(n) {
                return Some(*p);
            }
        }
        for n in names {
            if let Some((_, p)) = self
                .0
                .iter()
                .filter(|(k, _)| !k.is_empty() && n.starts_with(k.as_str()))
                .max_by_key(|(k, _)| k.len())
            {
                return Some(*p);
            }
        }
        self.0.get("*").copied()
    }
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
    /// The code of that failure (`USER.INPUT.MISSING_FILE`, `EXECUTION.COMMAND.FAILED`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<crate::ErrorCode>,
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
    /// Cost of this agent step in US dollars, when its model is priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// The provider that answered an agent step with `fallback_providers:`, and why each
    /// provider tried before it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<FallbackRecord>,
    /// When the run entered this state, counted across its attempts (1 for the first state
    /// entered; a state entered again, by a loop or a resume, takes the next number): set
    /// by the run's record ([`crate::projection::RunProjection`]), absent in events and in
    /// records made before it was kept. [`in_entry_order`] sorts by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entered: Option<u64>,
    /// The end of stdout when it was longer than `capture.max_size` (`output` holds its
    /// start): what a failed step's last lines are read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tail: Option<StreamTail>,
    /// The end of stderr when it was longer than `capture.max_size` (as `output_tail`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_tail: Option<StreamTail>,
}

/// The last bytes of a stream cut at `capture.max_size` (masked, starting at a line's start
/// when one is in them), and how many lines the whole stream had: a failed step shows its
/// real last lines, not the last ones of what was kept (trial 82).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamTail {
    /// The last lines of the stream.
    pub text: String,
    /// The newlines of the whole stream.
    pub lines: u64,
}

/// `states` in the order the run entered them (`entered`), attempts kept together: states
/// of a record without that order (made before it was kept) first, by their start; never
/// started ones last, by name.
pub fn in_entry_order<'a>(states: impl IntoIterator<Item = &'a StepState>) -> Vec<&'a StepState> {
    let mut v: Vec<&StepState> = states.into_iter().collect();
    v.sort_by(|a, b| entry_key(a).cmp(&entry_key(b)));
    v
}

/// The sort key of [`in_entry_order`].
fn entry_key(s: &StepState) -> (bool, u64, bool, Option<SystemTime>, &str) {
    (
        s.entered.is_none() && s.started_at.is_none(),
        s.entered.unwrap_or(0),
        s.started_at.is_none(),
        s.started_at,
        &s.name,
    )
}

/// Which provider answered an agent step with `fallback_providers:`, and why the ones tried
/// before it did not. Shape: `{"provider": "claude", "skipped": [{"provider", "class",
/// "code", "message"}]}`. Source: issue 14 ("fallback_providers").
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FallbackRecord {
    /// The provider whose answer is the step's output (`None` when none answered).
    pub provider: Option<String>,
    /// The providers tried before, in order, with why each failed.
    pub skipped: Vec<FallbackSkip>,
}

/// One provider a step left for the next.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FallbackSkip {
    /// Provider name.
    pub provider: String,
    /// The failure class (`usage_limit`, `quota`, `refusal`, `unavailable`).
    pub class: String,
    /// The error code it failed with.
    pub code: String,
    /// The error message.
    pub message: String,
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
            error_code: None,
            started_at: Some(now),
            completed_at: None,
            response: None,
            json: None,
            tokens: TokenUsage::default(),
            outputs: BTreeMap::new(),
            session: None,
            approval: None,
            tool_calls: Vec::new(),
            cost_usd: None,
            fallback: None,
            entered: None,
            output_tail: None,
            stderr_tail: None,
        }
    }

    /// The fields templates and expressions expose as `states.<name>.<Field>`, as
    /// (PascalCase name, snake_case name, value), in one place for every adapter. A missing
    /// exit code reads as 0, a missing response as `{}`, a missing error as `""`; a
    /// [`StepStatus::Skipped`] state (a parallel branch that never started) has no
    /// `ExitCode` at all, so that reading it is what reading a state that has not run is (an
    /// error in a template, `false` in an expression) rather than a 0 that reads as success.
    pub fn fields(&self) -> Vec<(&'static str, &'static str, Value)> {
        let outputs: serde_json::Map<String, Value> = self
            .outputs
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        let all = [
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
        ];
        let mut fields = Vec::from(all);
        if self.status == StepStatus::Skipped {
            fields.retain(|(pascal, _, _)| *pascal != "ExitCode");
        }
        fields
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
/// plus `error` and `error_code` (a failed state's), `duration_ms`, and for call_workflow steps `outputs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// The code of that failure (`USER.INPUT.MISSING_FILE`, …), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<crate::ErrorCode>,
    /// Wall time of the state.
    pub duration_ms: u64,
    /// Mapped sub-workflow outputs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
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
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallEntry>,
    /// Cost in US dollars (agent steps whose model is priced).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Which provider answered and why the others did not (`fallback_providers:`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<FallbackRecord>,
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
            error_code: s.error_code,
            duration_ms: s.duration_ms(),
            outputs: s.outputs.clone(),
            tokens: (s.tokens != TokenUsage::default()).then_some(s.tokens),
            json: s.json.clone(),
            approval: s.approval.clone(),
            tool_calls: s.tool_calls.clone(),
            cost_usd: s.cost_usd,
            fallback: s.fallback.clone(),
        }
    }
}

/// The run result contract printed by `awf run -f json`.
///
/// Shape (shared/conformance/README.md):
/// `{"run_id", "workflow", "status", "exit_code", "terminal", "duration_ms", "states", "outputs",
/// "error"}`. A failure before the run starts has `run_id: null`, empty `states` and `error` set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// What the run spent on agents (absent when no agent step spent anything and the
    /// workflow has no budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<Spend>,
}

#[cfg(test)]
mod spend_tests {
    use super::*;

    fn price(i: f64, o: f64) -> ModelPrice {
        ModelPrice {
            input_per_mtok: i,
            output_per_mtok: o,
        }
    }

    #[test]
    fn prices_match_exactly_then_by_longest_prefix_then_star() {
        let mut p = Prices::default();
        p.0.insert("gpt-4o".into(), price(1.0, 2.0));
        p.0.insert("gpt-4o-mini".into(), price(3.0, 4.0));
        p.0.insert("claude".into(), price(5.0, 6.0));
        assert_eq!(p.lookup(["gpt-4o"]), Some(price(1.0, 2.0)));
        assert_eq!(p.lookup(["gpt-4o-mini-2024"]), Some(price(3.0, 4.0)));
        assert_eq!(p.lookup(["gpt-4o-2024-08-06"]), Some(price(1.0, 2.0)));
        // The model first, then the provider name.
        assert_eq!(p.lookup(["sonnet", "claude"]), Some(price(5.0, 6.0)));
        assert_eq!(p.lookup(["llama"]), None);
        p.0.insert("*".into(), price(7.0, 8.0));
        assert_eq!(p.lookup(["llama"]), Some(price(7.0, 8.0)));
    }

    #[test]
    fn spend_adds_tokens_and_only_priced_dollars() {
        let mut s = Spend::default();
        assert!(s.is_zero());
        let t = TokenUsage {
            input: 1_000_000,
            output: 500_000,
            total: 0,
            estimated: false,
        };
        s.add(&t, None);
        assert_eq!(
            (s.tokens_input, s.tokens_output, s.tokens),
            (1_000_000, 500_000, 1_500_000)
        );
        assert_eq!(s.usd, None);
        s.add(&t, Some(price(2.0, 4.0).cost(&t)));
        assert_eq!(s.usd, Some(4.0));
        assert_eq!(s.tokens, 3_000_000);
        assert!(!s.is_zero());
    }
}

#[cfg(test)]
mod ambiguous_tests {
    use super::RunId;

    /// The hint names the first five ids (sorted) and how many more match; with few, all.
    #[test]
    fn an_ambiguous_prefix_says_how_many_more_match() {
        let ids = ["0g", "0f", "0e", "0d", "0c", "0b", "0a"];
        let e = RunId::ambiguous_prefix("0", ids.len(), &ids);
        assert_eq!(e.message(), "run id prefix '0' is ambiguous: 7 runs match");
        assert_eq!(
            e.hints(),
            [
                "give more characters; candidates: 0a, 0b, 0c, 0d, 0e and 2 more (`awf history` lists them)"
            ]
        );
        let e = RunId::ambiguous_prefix("0", 2, &ids[..2]);
        assert_eq!(e.hints(), ["give more characters; candidates: 0f, 0g"]);
    }
}
