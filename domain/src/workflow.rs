//! The validated workflow model: what a workflow file means once loaded.
//!
//! Built by a [`crate::ports::WorkflowRepository`] (the YAML adapter) from AWF's file format;
//! the engine only reads it. Field semantics follow spec/workflow.md §1; divergences from AWF
//! (Go) are listed in docs/compatibility.md.

use std::path::PathBuf;
use std::time::Duration;

use indexmap::IndexMap;
use serde::Serialize;
use serde_json::Value;

/// A loaded workflow.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Workflow {
    /// Logical name (`name:`), used for display, audit and call-stack checks.
    pub name: String,
    /// Free-text version.
    pub version: Option<String>,
    /// Shown by `awf list`, `--help` and the dry-run plan.
    pub description: Option<String>,
    /// Metadata only.
    pub author: Option<String>,
    /// Metadata only.
    pub tags: Vec<String>,
    /// Declared inputs, in file order.
    pub inputs: Vec<InputDef>,
    /// Environment variables the workflow expects (an unset one is a warning).
    pub env: Vec<String>,
    /// Name of the first state (`states.initial`).
    pub initial: String,
    /// Every state by name, in file order (including synthesized inline error terminals).
    pub states: IndexMap<String, State>,
    /// Workflow-level hooks.
    pub hooks: WorkflowHooks,
    /// Declared outputs (`outputs: [{name, from, description}]`).
    pub outputs: Vec<OutputDef>,
    /// Where the workflow came from.
    pub source: WorkflowSource,
    /// `shell_quote: true` (awf extension): every value interpolated into a shell step's
    /// `command:` (or a hook's) is quoted for the shell, so it reaches the command as one
    /// literal word. Default false: values are inserted as rendered, as in AWF (Go).
    pub shell_quote: bool,
    /// `budget: {tokens, usd}` (awf extension): the run's spending limit across every agent
    /// step; an agent step does not start once the spend so far reaches it.
    pub budget: Option<Budget>,
}

/// A spending limit (`budget: {tokens, usd}`), workflow-wide or per agent step. Either
/// limit may be absent. `tokens` counts input plus output tokens; `usd` is priced with the
/// `prices:` table of `.awf/config.yaml` (per model, US dollars per million tokens).
/// Source: issue 14 ("Budgets").
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Budget {
    /// Token limit (input + output).
    pub tokens: Option<u64>,
    /// Cost limit in US dollars.
    pub usd: Option<f64>,
}

/// Why a provider can be left for the next of `fallback_providers:`.
/// Source: issue 14 ("fallback_providers").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FallbackClass {
    /// The provider reported a usage or rate limit (HTTP 429, claude's rate-limit event).
    UsageLimit,
    /// The account's quota or credit is used up (`insufficient_quota`, billing errors).
    Quota,
    /// The model refused to answer (a refusal stop reason).
    Refusal,
    /// The provider could not be reached or run: CLI missing, connection refused, HTTP 5xx.
    Unavailable,
}

impl FallbackClass {
    /// Every class, the default of `fallback_on:`.
    pub const ALL: [FallbackClass; 4] = [
        FallbackClass::UsageLimit,
        FallbackClass::Quota,
        FallbackClass::Refusal,
        FallbackClass::Unavailable,
    ];

    /// The YAML spelling (`usage_limit`, `quota`, `refusal`, `unavailable`).
    pub const fn as_str(self) -> &'static str {
        match self {
            FallbackClass::UsageLimit => "usage_limit",
            FallbackClass::Quota => "quota",
            FallbackClass::Refusal => "refusal",
            FallbackClass::Unavailable => "unavailable",
        }
    }

    /// Parses the YAML spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s.trim())
    }
}

/// One entry of `fallback_providers:`: a provider and its options (a bare name has none).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct FallbackProvider {
    /// Provider name (template).
    pub provider: String,
    /// Its options, as written (string values are templates).
    pub options: IndexMap<String, Value>,
}

/// How an agent step meets a usage limit with a reset time (`usage_limit: {wait,
/// max_wait}`): a reset within `wait` is waited for inside the step, then the step is
/// retried; one within `max_wait` parks the run (status `waiting`, `awf resume` continues
/// it); a later one fails the step. Source: issue 14 ("Usage limits").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageLimitPolicy {
    /// Longest reset waited for inside the step (default 60 s).
    pub wait: Duration,
    /// Longest reset the run parks for (default 5 h).
    pub max_wait: Duration,
}

/// Default of [`UsageLimitPolicy::wait`]: 60 s.
pub const DEFAULT_USAGE_WAIT: Duration = Duration::from_secs(60);
/// Default of [`UsageLimitPolicy::max_wait`]: 5 h.
pub const DEFAULT_USAGE_MAX_WAIT: Duration = Duration::from_secs(5 * 3600);

impl Default for UsageLimitPolicy {
    fn default() -> Self {
        Self {
            wait: DEFAULT_USAGE_WAIT,
            max_wait: DEFAULT_USAGE_MAX_WAIT,
        }
    }
}

/// The awf extensions of an agent step: its budget, fallback providers and usage-limit
/// handling. All default to off (no budget, no fallback) except the usage-limit waits.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct AgentPolicy {
    /// `budget:` of this step: the step does not start once the run's spend reaches it.
    pub budget: Option<Budget>,
    /// `fallback_providers:`, tried in order on the same prompt.
    pub fallback_providers: Vec<FallbackProvider>,
    /// `fallback_on:`: the failure classes that move to the next provider (empty = all).
    pub fallback_on: Vec<FallbackClass>,
    /// `usage_limit:`.
    pub usage_limit: UsageLimitPolicy,
}

impl AgentPolicy {
    /// Whether a failure of `class` moves on to the next fallback provider.
    pub fn falls_back_on(&self, class: FallbackClass) -> bool {
        self.fallback_on.is_empty() || self.fallback_on.contains(&class)
    }
}

impl Workflow {
    /// Looks a state up by name.
    pub fn state(&self, name: &str) -> Option<&State> {
        self.states.get(name)
    }

    /// The name users see for the state `name` (or an edge's target `name`): a terminal's
    /// [`terminal_display_name`] (the inline `on_failure` terminal of step `a` reads
    /// `a's on_failure`, as in the run result and the run's events), any other name as it is
    /// (a name no state has included). Unique among the states of a loaded workflow: the loader
    /// refuses a state named like another state's display name.
    pub fn display_name(&self, name: &str) -> String {
        match self.states.get(name).map(|s| &s.kind) {
            Some(StateKind::Terminal(_)) => terminal_display_name(name),
            _ => name.to_owned(),
        }
    }

    /// The state whose [`Workflow::display_name`] is `name`: a state of that name first, else
    /// the terminal shown so (`a's on_failure`).
    pub fn state_by_display_name(&self, name: &str) -> Option<&State> {
        self.states.get(name).or_else(|| {
            self.states.values().find(|s| {
                matches!(s.kind, StateKind::Terminal(_)) && terminal_display_name(&s.name) == name
            })
        })
    }

    /// The state that runs the state `name` as a part of itself, and how: the parallel state
    /// that has it among its branches, or the loop state (`for_each`, `while`) that has it in
    /// its body. `None` for a state that transitions reach (or a name no state has). Such a
    /// part runs only inside its enclosing state, which routes on after it (a loop body
    /// state also needs the loop's `.loop` context).
    pub fn enclosing_state(&self, name: &str) -> Option<(&str, PartOf)> {
        self.states.iter().find_map(|(outer, st)| match &st.kind {
            StateKind::Parallel(p) if p.branches.iter().any(|b| b == name) => {
                Some((outer.as_str(), PartOf::ParallelBranch))
            }
            StateKind::Loop(l) if l.body.iter().any(|b| b == name) => {
                Some((outer.as_str(), PartOf::LoopBody))
            }
            _ => None,
        })
    }

    /// [`Workflow::enclosing_state`] of `name` when `name` runs only as that part: not when
    /// it is also a state of its own, the initial state or the target of a route
    /// (`on_success`, `on_failure`, a transition, a loop's `on_complete`) of a state outside
    /// the one that encloses it (breaker: the state a failed run's resume hint named was
    /// refused as a loop body state, though the run failed in it before the loop).
    pub fn only_part_of(&self, name: &str) -> Option<(&str, PartOf)> {
        let (outer, part) = self.enclosing_state(name)?;
        if self.initial == name {
            return None;
        }
        let routes_to = |st: &State| {
            st.on_success.as_deref() == Some(name)
                || st.on_failure.as_deref() == Some(name)
                || st.transitions.iter().any(|t| t.goto == name)
                || matches!(&st.kind, StateKind::Loop(l) if l.on_complete.as_deref() == Some(name))
        };
        let from_outside = self.states.iter().any(|(n, st)| {
            n != outer && self.enclosing_state(n).map(|(o, _)| o) != Some(outer) && routes_to(st)
        });
        (!from_outside).then_some((outer, part))
    }

    /// The outermost state that runs `name` as a part of itself ([`Workflow::enclosing_state`]
    /// followed up while the enclosing state is itself a part: a loop nested in a loop's body,
    /// a branch of a parallel state in a loop's body): the state a run goes on from to run
    /// `name` again. `None` when no state encloses `name`.
    pub fn outermost_enclosing_state(&self, name: &str) -> Option<&str> {
        let mut top = None;
        let mut at = name;
        // At most one step per state: a (refused) cycle of bodies cannot loop for ever.
        for _ in 0..self.states.len() {
            match self.enclosing_state(at) {
                Some((outer, _)) if top != Some(outer) && outer != name => {
                    top = Some(outer);
                    at = outer;
                }
                _ => break,
            }
        }
        top
    }
}

/// How a state is run as a part of another state ([`Workflow::enclosing_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartOf {
    /// A branch of a `type: parallel` state.
    ParallelBranch,
    /// A body state of a `type: for_each` or `type: while` loop.
    LoopBody,
}

/// Where a workflow was loaded from.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct WorkflowSource {
    /// The identifier the user gave (`valid-simple`, `./wf.yaml`).
    pub identifier: String,
    /// Absolute path of the file, when loaded from disk.
    pub path: Option<PathBuf>,
    /// Directory of the file: relative `script_file`, `prompt_file` and `readFile` paths
    /// resolve against it.
    pub dir: PathBuf,
}

/// Declared type of an input. Source: spec/workflow.md §1.4.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputType {
    /// No `type:` given: any value.
    Untyped,
    /// Any value, printed as text.
    String,
    /// Whole number (`strconv.Atoi` rules).
    Integer,
    /// Decimal number (awf extension; AWF (Go) rejects `number`).
    Number,
    /// `true/yes/1/false/no/0`, any case.
    Boolean,
    /// A JSON array, or a comma-separated list (awf extension).
    Array,
    /// Anything else: rejected by validation (`WORKFLOW.VALIDATION.INVALID_STATE` at the
    /// declaration); should it reach a run, a USER error naming the type.
    Unknown(String),
}

/// Validation rules of one input.
#[derive(Debug, Clone, PartialEq, Default, Serialize, serde::Deserialize)]
pub struct InputValidation {
    /// Regex (unanchored match), string values only.
    pub pattern: Option<String>,
    /// Allowed values, exact match.
    pub enum_values: Vec<String>,
    /// Minimum for integer / number inputs.
    pub min: Option<f64>,
    /// Maximum for integer / number inputs.
    pub max: Option<f64>,
    /// The value must name an existing file.
    pub file_exists: bool,
    /// Allowed extensions (with the dot, e.g. `.go`).
    pub file_extension: Vec<String>,
}

/// One declared input.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct InputDef {
    /// Key under `.inputs`.
    pub name: String,
    /// Declared type.
    #[serde(rename = "type")]
    pub ty: InputType,
    /// Help text.
    pub description: Option<String>,
    /// Must be given (by flag, config or default) and non-empty.
    pub required: bool,
    /// YAML default value.
    pub default: Option<Value>,
    /// Validation rules.
    pub validation: InputValidation,
}

/// A declared workflow output: `from` is a path such as `states.process.Output`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutputDef {
    /// Output name.
    pub name: String,
    /// Path read when the workflow ends (`states.<state>.<Field>`), or a template.
    pub from: String,
    /// Help text.
    pub description: Option<String>,
}

/// A hook action. When a YAML action sets both `log` and `command`, only `log` runs (AWF).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HookAction {
    /// Interpolated and emitted as a log line.
    Log(String),
    /// Interpolated and run with the shell; output discarded; non-zero exit is a failure.
    Command(String),
}

/// Workflow-level hooks. Source: spec/workflow.md §1.10.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct WorkflowHooks {
    /// Before the first state; a failure stops the run.
    pub workflow_start: Vec<HookAction>,
    /// After a successful terminal; failures warn.
    pub workflow_end: Vec<HookAction>,
    /// After a failed run (`.error` is available); failures warn.
    pub workflow_error: Vec<HookAction>,
    /// After cancellation; failures warn.
    pub workflow_cancel: Vec<HookAction>,
}

/// Step-level hooks.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct StepHooks {
    /// Before the step body (after the timeout starts).
    pub pre: Vec<HookAction>,
    /// After the step's result is recorded (success or failure).
    pub post: Vec<HookAction>,
}

/// A conditional route: first `when` that is true (or first without `when`) wins.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transition {
    /// expr-lang condition; `None` = default route.
    pub when: Option<String>,
    /// Target state.
    pub goto: String,
}

/// Backoff shape between retry attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backoff {
    /// `initial_delay` every time.
    Constant,
    /// `initial_delay × n`.
    Linear,
    /// `initial_delay × multiplier^(n−1)`.
    Exponential,
}

/// Retry policy. Source: spec/workflow.md §1.8; applies to every step type (decisions.md).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetryPolicy {
    /// Total attempts, ≥ 1.
    pub max_attempts: u32,
    /// Base delay.
    pub initial_delay: Duration,
    /// Cap applied after backoff, before jitter; when not set (or zero),
    /// [`DEFAULT_MAX_RETRY_DELAY`] (or `initial_delay`, when longer).
    pub max_delay: Option<Duration>,
    /// Backoff shape.
    pub backoff: Backoff,
    /// Exponential multiplier (default 2.0).
    pub multiplier: f64,
    /// 0.0–1.0: delay × (1 + jitter × U(−1, 1)).
    pub jitter: f64,
    /// Only these exit codes retry; empty = any failure.
    pub retryable_exit_codes: Vec<i32>,
}

/// The cap on a retry delay of a policy without `max_delay` (AWF (Go) has none): one hour,
/// or the policy's `initial_delay` when that is longer. An exponential backoff otherwise
/// grows past any wait anyone means (breaker: `multiplier: 1e30` announced a retry in
/// 5124095576030 hours).
pub const DEFAULT_MAX_RETRY_DELAY: Duration = Duration::from_secs(3600);

/// No retry delay is longer (about 31 years), jitter included, so adding one to a clock
/// reading cannot overflow.
pub const RETRY_DELAY_CEILING: Duration = Duration::from_secs(1_000_000_000);

/// The largest `multiplier` `awf validate` takes: past it, the second retry's delay alone is
/// over a quarter of an hour for a 1 s `initial_delay`, and every later one is the cap.
pub const MAX_RETRY_MULTIPLIER: f64 = 1000.0;

impl RetryPolicy {
    /// The cap of every delay: `max_delay` when set (non-zero), else
    /// [`DEFAULT_MAX_RETRY_DELAY`] or `initial_delay`, whichever is longer; never over
    /// [`RETRY_DELAY_CEILING`].
    pub fn delay_cap(&self) -> Duration {
        let cap = match self.max_delay {
            Some(max) if max > Duration::ZERO => max,
            _ => DEFAULT_MAX_RETRY_DELAY.max(self.initial_delay),
        };
        cap.min(RETRY_DELAY_CEILING)
    }

    /// Delay before the attempt that follows failed attempt `n` (1-based), before jitter:
    /// the backoff's figure, at most [`RetryPolicy::delay_cap`], in whole milliseconds (what
    /// the terminal, the log and the events all show).
    pub fn base_delay(&self, n: u32) -> Duration {
        let d0 = self.initial_delay.as_secs_f64();
        let n = n.max(1);
        let raw = match self.backoff {
            Backoff::Constant => d0,
            Backoff::Linear => d0 * f64::from(n),
            Backoff::Exponential => {
                d0 * self
                    .multiplier
                    .powi(i32::try_from(n - 1).unwrap_or(i32::MAX))
            }
        };
        // NaN (`0 × inf`) is no delay; anything too large is the cap.
        let raw = if raw.is_nan() { 0.0 } else { raw.max(0.0) };
        let cap = self.delay_cap();
        let capped = Duration::try_from_secs_f64(raw.min(cap.as_secs_f64())).unwrap_or(cap);
        whole_millis(capped)
    }

    /// Applies jitter given a uniform sample `u` in [−1, 1], in whole milliseconds, never
    /// over [`RETRY_DELAY_CEILING`].
    pub fn jittered(&self, base: Duration, u: f64) -> Duration {
        if self.jitter <= 0.0 {
            return base;
        }
        let f = (1.0 + self.jitter * u.clamp(-1.0, 1.0)).max(0.0);
        let d = Duration::try_from_secs_f64(base.as_secs_f64() * f).unwrap_or(base);
        whole_millis(d.min(RETRY_DELAY_CEILING))
    }

    /// Whether a failure with this exit code (None = could not run) may be retried.
    pub fn retries_exit_code(&self, code: Option<i32>) -> bool {
        self.retryable_exit_codes.is_empty()
            || self.retryable_exit_codes.contains(&code.unwrap_or(1))
    }
}

/// `d` without its part under a millisecond.
fn whole_millis(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One state of the machine.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct State {
    /// The state's key under `states:`.
    pub name: String,
    /// Display only.
    pub description: Option<String>,
    /// What the state does.
    pub kind: StateKind,
    /// Next state on success.
    pub on_success: Option<String>,
    /// Next state on failure (inline `{message, status}` becomes a synthesized terminal
    /// named `__inline_error_<step>`).
    pub on_failure: Option<String>,
    /// Conditional routes, in order.
    pub transitions: Vec<Transition>,
    /// Treat failure as success for routing.
    pub continue_on_error: bool,
    /// Deadline for the whole state (all retry attempts included). `None` = none.
    pub timeout: Option<Duration>,
    /// Retry policy.
    pub retry: Option<RetryPolicy>,
    /// Step hooks.
    pub hooks: StepHooks,
    /// `capture.max_size`: cap on the stored output, in bytes.
    pub capture_max_size: Option<u64>,
    /// `capture.stdout` / `capture.stderr`: the variable names the step's output is captured
    /// into. Shown by `--dry-run`; nothing reads them at run time (as in AWF (Go)).
    #[serde(default, skip_serializing_if = "CaptureNames::is_empty")]
    pub capture_names: CaptureNames,
    /// `approval:`: a gate asked before the step runs (awf addition; AWF (Go) documents
    /// approval dialogs but never wired them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
}

/// An approval gate: `approval: "message"` or `approval: {message, options?, timeout?,
/// on_timeout?}` on a step. Asked before the step runs; a rejection fails the step with
/// `EXECUTION.APPROVAL.REJECTED`, a timeout without an allowing `on_timeout` with
/// `EXECUTION.APPROVAL.TIMED_OUT` (both routable by `on_failure`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Approval {
    /// What to ask (a template, interpolated when asked).
    pub message: String,
    /// The choices, in order; [`crate::interaction::ApprovalOption::defaults`] when the file
    /// declares none.
    pub options: Vec<crate::interaction::ApprovalOption>,
    /// How long to wait for an answer; `None`: no limit.
    pub timeout: Option<Duration>,
    /// The option taken when the timeout passes: an option id, or `approve` / `reject` (the
    /// first allowing / rejecting option). `None`: a timeout fails the step.
    pub on_timeout: Option<String>,
}

impl Approval {
    /// The option `on_timeout` names: an option id (exact match) first, else `approve`/`allow`
    /// for the first `allow_once` option (the first `allow_always` one when the gate has no
    /// `allow_once`), and `reject`/`deny` likewise for the rejecting side; `None` when it names
    /// none. Whatever it picks is applied once: a timeout is never remembered as an "always"
    /// decision (the engine does not remember it).
    pub fn timeout_option(&self) -> Option<&crate::interaction::ApprovalOption> {
        use crate::interaction::ApprovalKind;
        let name = self.on_timeout.as_deref()?.trim();
        if let Some(o) = self.options.iter().find(|o| o.id == name) {
            return Some(o);
        }
        let side = |once: ApprovalKind, always: ApprovalKind| {
            self.options
                .iter()
                .find(|o| o.kind == once)
                .or_else(|| self.options.iter().find(|o| o.kind == always))
        };
        match name.to_ascii_lowercase().as_str() {
            "approve" | "allow" => side(ApprovalKind::AllowOnce, ApprovalKind::AllowAlways),
            "reject" | "deny" => side(ApprovalKind::RejectOnce, ApprovalKind::RejectAlways),
            _ => None,
        }
    }
}

/// The variable names of a step's `capture:` block. Source: spec/workflow.md §1.6 (`capture`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CaptureNames {
    /// `capture.stdout`.
    pub stdout: Option<String>,
    /// `capture.stderr`.
    pub stderr: Option<String>,
}

impl CaptureNames {
    /// Neither name is set.
    pub fn is_empty(&self) -> bool {
        self.stdout.is_none() && self.stderr.is_none()
    }
}

impl State {
    /// A state named `name` doing `kind`, with no routes, no description, no timeout, no
    /// retry, no hooks and no capture cap (fields set afterwards as decoded).
    pub fn new(name: impl Into<String>, kind: StateKind) -> Self {
        Self {
            name: name.into(),
            description: None,
            kind,
            on_success: None,
            on_failure: None,
            transitions: Vec::new(),
            continue_on_error: false,
            timeout: None,
            retry: None,
            hooks: StepHooks::default(),
            capture_max_size: None,
            capture_names: Default::default(),
            approval: None,
        }
    }

    /// A success terminal named `name`.
    pub fn success_terminal(name: impl Into<String>) -> Self {
        Self::new(
            name,
            StateKind::Terminal(TerminalState {
                status: TerminalStatus::Success,
                message: None,
                exit_code: None,
            }),
        )
    }
}

/// The state types. Source: spec/workflow.md §1.5.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StateKind {
    /// `type: step` / `command`: a shell command or script file.
    Command(CommandStep),
    /// `type: agent`.
    Agent(AgentStep),
    /// `type: parallel`.
    Parallel(ParallelStep),
    /// `type: for_each` or `type: while`.
    Loop(LoopStep),
    /// `type: operation`.
    Operation(OperationStep),
    /// `type: call_workflow`.
    CallWorkflow(CallWorkflowStep),
    /// `type: terminal`.
    Terminal(TerminalState),
}

impl StateKind {
    /// Internal kind name, as used in transcripts and diagrams
    /// (`command agent parallel for_each while operation call_workflow terminal`).
    pub fn kind_name(&self) -> &'static str {
        match self {
            Self::Command(_) => "command",
            Self::Agent(_) => "agent",
            Self::Parallel(_) => "parallel",
            Self::Loop(l) => match l.over {
                LoopOver::Items(_) => "for_each",
                LoopOver::While(_) => "while",
            },
            Self::Operation(_) => "operation",
            Self::CallWorkflow(_) => "call_workflow",
            Self::Terminal(_) => "terminal",
        }
    }
}

/// What a command step runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandSource {
    /// `command:` text run as `$SHELL -c` (template).
    Inline(String),
    /// `script_file:` path (template); contents are interpolated, a shebang is honoured.
    ScriptFile(String),
}

/// `type: step`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommandStep {
    /// Command text or script file.
    pub source: CommandSource,
    /// Working directory (template; relative to the run's working directory); `None` = the
    /// run's working directory (where a resumed run started, see `RunSnapshot::working_dir`).
    pub dir: Option<String>,
}

/// Agent providers awf knows (`provider:` of an agent step). Source: spec/workflow.md §5.1.
pub const AGENT_PROVIDERS: &[&str] = &[
    "acp",
    "claude",
    "codex",
    "gemini",
    "github_copilot",
    "mistral_vibe",
    "opencode",
    "openai_compatible",
];

/// The known provider an unknown `provider:` name most likely means: the closest by edits
/// (`claud` → `claude`), else one that a name only abbreviates or spells with other
/// separators (`openai`, `openai-compatible` → `openai_compatible`; `copilot` →
/// `github_copilot`; `claude-code` → `claude`). `None` when none is near.
pub fn closest_provider(name: &str) -> Option<&'static str> {
    if let Some(c) = crate::validate::closest(name, AGENT_PROVIDERS.iter().copied()) {
        return Some(c);
    }
    let plain = |s: &str| {
        s.chars()
            .filter(char::is_ascii_alphanumeric)
            .collect::<String>()
            .to_ascii_lowercase()
    };
    let given = plain(name);
    if given.len() < 3 {
        return None;
    }
    AGENT_PROVIDERS.iter().copied().find(|p| {
        let known = plain(p);
        known == given
            || known.starts_with(&given)
            || known.ends_with(&given)
            || given.starts_with(&known)
    })
}

/// `type: agent`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentStep {
    /// Provider name (template).
    pub provider: String,
    /// Inline prompt (template).
    pub prompt: Option<String>,
    /// Prompt file path (template).
    pub prompt_file: Option<String>,
    /// `single` or `conversation`.
    pub mode: String,
    /// System prompt.
    pub system_prompt: Option<String>,
    /// Role name or path.
    pub role: Option<String>,
    /// Skill names or paths.
    pub skills: Vec<String>,
    /// Provider options, as written.
    pub options: IndexMap<String, Value>,
    /// `json`, `text` or empty.
    pub output_format: Option<String>,
    /// `conversation:` block, presence = session tracking.
    pub conversation: Option<ConversationConfig>,
    /// `mcp_proxy:` block (the per-step MCP proxy), when written.
    pub mcp_proxy: Option<McpProxyConfig>,
    /// awf's `budget:`, `fallback_providers:`, `fallback_on:` and `usage_limit:`.
    pub policy: Box<AgentPolicy>,
}

/// `mcp_proxy:` on an agent step: serve awf's tools to the agent over MCP (`awf mcp-serve`).
/// Source: shared/spec/mcp.md §1.1.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct McpProxyConfig {
    /// Turn the proxy on for this step (default false).
    pub enable: bool,
    /// Whether `enable:` was written in the block (an explicit `enable: false` is a deliberate
    /// switch-off; without it, other keys alone are warned about as having no effect). Not
    /// serialized: it is about how the block was written, not what it does.
    #[serde(skip)]
    pub enable_written: bool,
    /// Serve the built-in tools and hide the provider's own where it can. Absent in YAML:
    /// true when `enable` is true, else false.
    pub intercept_builtins: bool,
    /// Plugin operations to serve as `<plugin>_<op>` tools.
    pub plugin_tools: Vec<McpPluginTools>,
}

/// One `mcp_proxy.plugin_tools` entry.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct McpPluginTools {
    /// Plugin name.
    pub plugin: String,
    /// Its operations to serve.
    pub expose: Vec<String>,
}

/// Providers whose CLI cannot hide its own tools: a proxy there only adds tools beside them
/// (`USER.MCP_PROXY.UNSUPPORTED_PROVIDER`, a warning). AWF (Go) lists codex and opencode too;
/// awf hides their native tools per call (codex `--disable` feature flags, opencode's `tools`
/// config), so only copilot is left. Source: shared/spec/mcp.md §1.3, §3.3;
/// docs/compatibility.md ("MCP proxy per provider").
pub const MCP_COEXISTENCE_PROVIDERS: &[&str] = &["github_copilot"];

/// `conversation:` on an agent step.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct ConversationConfig {
    /// Resume the session of this step.
    pub continue_from: Option<String>,
    /// Extra context injected into the conversation.
    pub inject_context: Option<String>,
}

/// How a parallel block decides success. Source: spec/workflow.md §3.4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ParallelStrategy {
    /// Every branch must succeed; the first failure cancels the rest.
    AllSucceed,
    /// One success is enough; the first success cancels the rest.
    AnySucceed,
    /// Wait for all; never fails.
    BestEffort,
}

/// `type: parallel`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParallelStep {
    /// Branch state names.
    pub branches: Vec<String>,
    /// Strategy.
    pub strategy: ParallelStrategy,
    /// Concurrency cap; 0 = unlimited.
    pub max_concurrent: usize,
}

/// What a loop iterates over.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopOver {
    /// `for_each`: items template or JSON text (a YAML list is JSON-encoded at load).
    Items(String),
    /// `while`: expr-lang condition checked before each iteration.
    While(String),
}

/// The text of an input given as a JSON value (the HTTP API's and the MCP tools' `inputs`),
/// as `--input name=<text>` would give it: a string as it is, a number written whole
/// (`-0`, `1e3`, `2.0`: serde reads them as floats, whose text is `-0.0`, `1000.0`, `2.0`)
/// as the integer it is when it fits i64 (`0`, `1000`, `2`), any other value as its JSON text.
/// An integer input given `-0` was refused ("cannot convert \"-0.0\" to integer").
pub fn json_input_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) if !n.is_i64() && !n.is_u64() => match n.as_f64() {
            Some(f)
                if f.fract() == 0.0
                    && (-9.223_372_036_854_775e18..9.223_372_036_854_775e18).contains(&f) =>
            {
                format!("{}", f as i64)
            }
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// The hint of an error about a `for_each` loop's items that are not a JSON array.
pub const LOOP_ITEMS_HINT: &str = "items takes a JSON array (`[\"a\", \"b\"]`, strings quoted) or a \
     comma-separated list without brackets (`a, b`)";

/// A `for_each` loop's items from their rendered text (spec/workflow.md §1.5.5), as AWF
/// (Go)'s `ParseItems`: JSON `null` gives no item; text shaped like a JSON array (`[…]`), or
/// a JSON array cut short (`[1, 2`), is parsed as one; anything else, including a list whose
/// first item only starts with a bracket (`[draft] fix, other`), is split on commas, each
/// item trimmed and empty ones kept (`a, b ,, c` is four items, the third empty). Empty or
/// white-space-only text gives no item, where Go's gives one empty item (a step that found
/// nothing would run the loop's body once on `""`; docs/compatibility.md). A leading
/// byte-order mark is ignored.
///
/// # Errors
/// The JSON error of text that starts with `[` and is shaped like a JSON array but is not
/// one (`["a", b]`, `[1, 2`); the caller names the state and gives the hint.
pub fn loop_items(text: &str) -> Result<Vec<Value>, serde_json::Error> {
    loop_items_at_most(text, usize::MAX).map(|(items, _)| items)
}

/// [`loop_items`] keeping only the first `max` items (a loop runs no more), with the number
/// of items the text holds: the items past `max` are counted, never built (trial h4: a 5 MB
/// JSON array of small items took 210 MB as values, for a loop that runs 10 000 at most).
///
/// # Errors
/// As [`loop_items`].
pub fn loop_items_at_most(
    text: &str,
    max: usize,
) -> Result<(Vec<Value>, usize), serde_json::Error> {
    // A byte-order mark (a file written by some editors, read by a step) is no item's
    // text: `\u{feff}[1,2]` is the JSON array, not `\u{feff}[1` and `2]` (breaker).
    let t = text.trim().trim_start_matches('\u{feff}').trim_start();
    // JSON null decodes into Go's `[]any` as an empty list (a step printing `null`); no
    // text is no item (awf's choice, see above).
    if t.is_empty() || t == "null" {
        return Ok((Vec::new(), 0));
    }
    if t.starts_with('[') {
        // Split on commas, `["a", b]` would give `["a"` and ` b]` (AWF (Go) splits it;
        // docs/compatibility.md).
        match first_items(t, max) {
            Err(e) if !t.ends_with(']') && !e.is_eof() => {}
            parsed => return parsed,
        }
    }
    let total = t.split(',').count();
    Ok((
        t.split(',')
            .take(max)
            .map(|s| Value::String(s.trim().to_owned()))
            .collect(),
        total,
    ))
}

/// The first `max` items of the JSON array `text`, and how many it holds.
fn first_items(text: &str, max: usize) -> Result<(Vec<Value>, usize), serde_json::Error> {
    use serde::de::DeserializeSeed;
    use serde::de::IgnoredAny;
    use serde::de::SeqAccess;
    use serde::de::Visitor;

    struct First(usize);

    impl<'de> Visitor<'de> for First {
        type Value = (Vec<Value>, usize);

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON array")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut kept = Vec::new();
            let mut n = 0usize;
            loop {
                let more = if n < self.0 {
                    seq.next_element::<Value>()?.map(|v| kept.push(v)).is_some()
                } else {
                    seq.next_element::<IgnoredAny>()?.is_some()
                };
                if !more {
                    return Ok((kept, n));
                }
                n += 1;
            }
        }
    }

    impl<'de> DeserializeSeed<'de> for First {
        type Value = (Vec<Value>, usize);

        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_seq(self)
        }
    }

    let mut de = serde_json::Deserializer::from_str(text);
    let items = First(max).deserialize(&mut de)?;
    de.end()?;
    Ok(items)
}

/// Iteration cap of a loop.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxIterations {
    /// A literal (1..=10000); 0 = not given: a for_each runs every item (up to 10000), a
    /// while loop stops after [`DEFAULT_MAX_ITERATIONS`].
    Static(u32),
    /// A template, interpolated at loop start, then an integer or arithmetic.
    Dynamic(String),
}

/// Default iteration cap (spec §1.5.5).
pub const DEFAULT_MAX_ITERATIONS: u32 = 100;
/// Largest allowed iteration cap.
pub const MAX_ITERATIONS_LIMIT: u32 = 10_000;

/// `type: for_each` / `type: while`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoopStep {
    /// Items or condition.
    pub over: LoopOver,
    /// Body states, run in order each iteration.
    pub body: Vec<String>,
    /// Iteration cap.
    pub max_iterations: MaxIterations,
    /// Checked after each iteration; true stops the loop.
    pub break_when: Option<String>,
    /// Next state when the loop finishes.
    pub on_complete: Option<String>,
}

/// `type: operation` (executed by a later issue; parsed fully now).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OperationStep {
    /// Operation id, e.g. `http.request`.
    pub operation: String,
    /// Operation inputs (string values are templates).
    pub inputs: IndexMap<String, Value>,
}

/// `type: call_workflow`, flat or nested layout.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallWorkflowStep {
    /// Child identifier (not interpolated).
    pub workflow: String,
    /// Child input → template in the parent context.
    pub inputs: IndexMap<String, String>,
    /// Child output (or child state) → parent key under `.states.<step>.Outputs`.
    pub outputs: IndexMap<String, String>,
}

/// Terminal status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TerminalStatus {
    /// The run succeeds.
    Success,
    /// The run fails.
    Failure,
}

/// `type: terminal`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TerminalState {
    /// Success or failure.
    pub status: TerminalStatus,
    /// Message (template); on failure terminals it becomes the run's error text.
    pub message: Option<String>,
    /// Process exit code for failure terminals (inline `status: N`); `None` = 3.
    pub exit_code: Option<i32>,
}

/// The name prefix of the failure terminal the loader synthesizes for an inline
/// `on_failure: {message, status}` (`__inline_error_<step>`, spec §1.6).
pub const INLINE_ERROR_PREFIX: &str = "__inline_error_";

/// The step whose inline `on_failure: {message, status}` made the terminal `name`, when it is
/// one (`__inline_error_verify` → `verify`).
pub fn inline_error_step(name: &str) -> Option<&str> {
    name.strip_prefix(INLINE_ERROR_PREFIX)
}

/// Where state `name` is written in the file, as a diagnostic path: `states.<name>`, and
/// for the inline failure terminal of step `s`, `states.s.on_failure` (its message is at
/// `states.s.on_failure.message`), never the internal `__inline_error_<step>`.
pub fn state_path(name: &str) -> String {
    match inline_error_step(name) {
        Some(step) => format!("states.{step}.on_failure"),
        None => format!("states.{name}"),
    }
}

/// A terminal's name as users see it: the inline failure terminal of step `s` reads
/// `s's on_failure`, any other terminal its own name. The internal `__inline_error_<step>`
/// never reaches an output (the run result, `awf status`, the HTTP API, the transcript).
pub fn terminal_display_name(name: &str) -> String {
    match inline_error_step(name) {
        Some(step) => format!("{step}'s on_failure"),
        None => name.to_owned(),
    }
}

#[cfg(test)]
mod inline_error_tests {
    use super::*;

    #[test]
    fn a_whole_json_number_gives_the_text_of_its_integer() {
        let text = |t: &str| json_input_text(&serde_json::from_str::<Value>(t).unwrap());
        assert_eq!(text("-0"), "0");
        assert_eq!(text("1e3"), "1000");
        assert_eq!(text("2.0"), "2");
        assert_eq!(text("-7"), "-7");
        assert_eq!(text("18446744073709551615"), "18446744073709551615");
        assert_eq!(text("2.5"), "2.5");
        assert_eq!(text("1e20"), "1e20");
        assert_eq!(text("\"x\""), "x");
        assert_eq!(text("[1,2]"), "[1,2]");
        assert_eq!(text("true"), "true");
    }

    #[test]
    fn an_inline_failure_terminal_is_shown_by_its_step() {
        assert_eq!(
            terminal_display_name("__inline_error_verify"),
            "verify's on_failure"
        );
        assert_eq!(terminal_display_name("done"), "done");
        assert_eq!(inline_error_step("__inline_error_a"), Some("a"));
        assert_eq!(state_path("__inline_error_a"), "states.a.on_failure");
        assert_eq!(state_path("a"), "states.a");
        for (given, want) in [
            ("claud", Some("claude")),
            ("openai", Some("openai_compatible")),
            ("openai-compatible", Some("openai_compatible")),
            ("copilot", Some("github_copilot")),
            ("claude-code", Some("claude")),
            ("xyz", None),
            ("ai", None),
        ] {
            assert_eq!(closest_provider(given), want, "{given}");
        }
        assert_eq!(inline_error_step("a"), None);
    }

    #[test]
    fn a_workflow_shows_its_inline_failure_terminal_by_its_step() {
        let terminal = |name: &str| {
            State::new(
                name,
                StateKind::Terminal(TerminalState {
                    status: TerminalStatus::Failure,
                    message: Some("a broke".to_owned()),
                    exit_code: Some(4),
                }),
            )
        };
        let step = State::new(
            "__inline_error_b",
            StateKind::Command(CommandStep {
                source: CommandSource::Inline("true".to_owned()),
                dir: None,
            }),
        );
        let wf = Workflow {
            name: "w".to_owned(),
            version: None,
            description: None,
            author: None,
            tags: Vec::new(),
            inputs: Vec::new(),
            env: Vec::new(),
            initial: "a".to_owned(),
            states: [terminal("__inline_error_a"), terminal("done"), step]
                .into_iter()
                .map(|s| (s.name.clone(), s))
                .collect(),
            hooks: WorkflowHooks::default(),
            outputs: Vec::new(),
            shell_quote: false,
            budget: None,
            source: WorkflowSource::default(),
        };
        assert_eq!(wf.display_name("__inline_error_a"), "a's on_failure");
        assert_eq!(wf.display_name("done"), "done");
        // Only a terminal is renamed; a name no state has is kept.
        assert_eq!(wf.display_name("__inline_error_b"), "__inline_error_b");
        assert_eq!(wf.display_name("nowhere"), "nowhere");
        assert_eq!(
            wf.state_by_display_name("a's on_failure")
                .map(|s| s.name.as_str()),
            Some("__inline_error_a")
        );
        assert_eq!(
            wf.state_by_display_name("__inline_error_a")
                .map(|s| s.name.as_str()),
            Some("__inline_error_a")
        );
        assert_eq!(
            wf.state_by_display_name("b's on_failure")
                .map(|s| s.name.as_str()),
            None
        );
    }

    /// A loop body state and a parallel branch are parts of the state that runs them; the
    /// outermost one is followed through nested loops and a parallel state in a loop's body.
    #[test]
    fn a_part_names_the_states_that_enclose_it() {
        let lp = |name: &str, body: &[&str]| {
            State::new(
                name,
                StateKind::Loop(LoopStep {
                    over: LoopOver::Items("[1]".to_owned()),
                    body: body.iter().map(|b| (*b).to_owned()).collect(),
                    max_iterations: MaxIterations::Static(0),
                    break_when: None,
                    on_complete: None,
                }),
            )
        };
        let step = |name: &str| {
            State::new(
                name,
                StateKind::Command(CommandStep {
                    source: CommandSource::Inline("true".to_owned()),
                    dir: None,
                }),
            )
        };
        let par = State::new(
            "par",
            StateKind::Parallel(ParallelStep {
                branches: vec!["b1".to_owned()],
                strategy: ParallelStrategy::AllSucceed,
                max_concurrent: 0,
            }),
        );
        let wf = Workflow {
            name: "w".to_owned(),
            version: None,
            description: None,
            author: None,
            tags: Vec::new(),
            inputs: Vec::new(),
            env: Vec::new(),
            initial: "outer".to_owned(),
            states: [
                lp("outer", &["inner", "par"]),
                lp("inner", &["work"]),
                step("work"),
                par,
                step("b1"),
                step("free"),
                lp("self", &["self"]),
            ]
            .into_iter()
            .map(|s| (s.name.clone(), s))
            .collect(),
            hooks: WorkflowHooks::default(),
            outputs: Vec::new(),
            shell_quote: false,
            budget: None,
            source: WorkflowSource::default(),
        };
        assert_eq!(
            wf.enclosing_state("work"),
            Some(("inner", PartOf::LoopBody))
        );
        assert_eq!(
            wf.enclosing_state("b1"),
            Some(("par", PartOf::ParallelBranch))
        );
        assert_eq!(wf.enclosing_state("outer"), None);
        assert_eq!(wf.enclosing_state("free"), None);
        assert_eq!(wf.outermost_enclosing_state("work"), Some("outer"));
        assert_eq!(wf.outermost_enclosing_state("inner"), Some("outer"));
        assert_eq!(wf.outermost_enclosing_state("b1"), Some("outer"));
        assert_eq!(wf.outermost_enclosing_state("free"), None);
        // A body that holds its own loop (refused by validation) ends the walk.
        assert_eq!(wf.outermost_enclosing_state("self"), None);
    }

    /// AWF (Go)'s `ParseItems`: JSON `null` is no item; a comma list keeps its empty pieces
    /// (breaker: `null` was one item `"null"`, and empty pieces were dropped); empty text is
    /// no item (not Go's one empty item).
    #[test]
    fn loop_items_follow_go_parse_items() {
        let strings = |v: Vec<Value>| {
            v.into_iter()
                .map(|x| x.as_str().map(str::to_owned).unwrap_or_default())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            loop_items_at_most("[1, [2], {\"a\": 3}, 4]", 2).ok(),
            Some((vec![serde_json::json!(1), serde_json::json!([2])], 4))
        );
        assert_eq!(
            loop_items_at_most("a, b, c", 1).ok(),
            Some((vec![Value::String("a".into())], 3))
        );
        assert!(
            loop_items_at_most("[1, 2", 1).is_err(),
            "a cut array is still an error"
        );
        assert_eq!(loop_items("null").ok(), Some(vec![]));
        assert_eq!(loop_items("null\n").ok(), Some(vec![]));
        assert_eq!(loop_items("[]").ok(), Some(vec![]));
        assert_eq!(
            loop_items("a, b ,, c").ok().map(strings),
            Some(vec!["a".into(), "b".into(), String::new(), "c".into()])
        );
        // Not Go's one empty item: nothing to loop over is no iteration.
        assert_eq!(loop_items("").ok(), Some(vec![]));
        assert_eq!(loop_items("  \n").ok(), Some(vec![]));
        assert_eq!(loop_items("\u{feff}").ok(), Some(vec![]));
        assert_eq!(
            loop_items("a,").ok().map(strings),
            Some(vec!["a".into(), String::new()])
        );
        assert_eq!(loop_items("[1,2]").ok().map(|v| v.len()), Some(2));
    }
}

#[cfg(test)]
mod retry_delay_tests {
    use super::*;

    fn policy(backoff: Backoff, multiplier: f64, max_delay: Option<Duration>) -> RetryPolicy {
        RetryPolicy {
            max_attempts: 4,
            initial_delay: Duration::from_secs(1),
            max_delay,
            backoff,
            multiplier,
            jitter: 0.0,
            retryable_exit_codes: vec![],
        }
    }

    /// Breaker: `multiplier: 1e30` made the third attempt's delay `Duration::MAX`, shown as
    /// 5124095576030 hours, and the run then stopped retrying without a word. Without
    /// `max_delay` a delay stops growing at one hour.
    #[test]
    fn a_delay_without_max_delay_stops_at_an_hour() {
        let p = policy(Backoff::Exponential, 1e30, None);
        assert_eq!(p.base_delay(1), Duration::from_secs(1));
        assert_eq!(p.base_delay(2), Duration::from_secs(3600));
        assert_eq!(p.base_delay(3), Duration::from_secs(3600));
        let p = policy(Backoff::Exponential, f64::INFINITY, None);
        assert_eq!(p.base_delay(2), Duration::from_secs(3600));
        let p = policy(Backoff::Exponential, 2.0, None);
        assert_eq!(p.base_delay(4), Duration::from_secs(8));
        assert_eq!(p.base_delay(40), Duration::from_secs(3600));
        // A set `max_delay` is the cap, longer or shorter.
        let p = policy(Backoff::Exponential, 2.0, Some(Duration::from_secs(5)));
        assert_eq!(p.base_delay(4), Duration::from_secs(5));
        let p = policy(Backoff::Exponential, 1e30, Some(Duration::from_secs(7200)));
        assert_eq!(p.base_delay(2), Duration::from_secs(7200));
        // A constant delay longer than an hour is kept.
        let mut p = policy(Backoff::Constant, 2.0, None);
        p.initial_delay = Duration::from_secs(5400);
        assert_eq!(p.base_delay(3), Duration::from_secs(5400));
        // 0 × inf is no delay, not a panic.
        let mut p = policy(Backoff::Exponential, f64::INFINITY, None);
        p.initial_delay = Duration::ZERO;
        assert_eq!(p.base_delay(3), Duration::ZERO);
    }

    /// What is waited is what is shown: whole milliseconds, jitter included, never past the
    /// ceiling.
    #[test]
    fn delays_are_whole_milliseconds_and_bounded() {
        let mut p = policy(Backoff::Exponential, 1.5, None);
        p.initial_delay = Duration::from_micros(1_000_700);
        assert_eq!(p.base_delay(2), Duration::from_millis(1_501));
        p.jitter = 0.5;
        assert_eq!(
            p.jittered(Duration::from_millis(1000), 0.3333),
            Duration::from_millis(1166)
        );
        let mut p = policy(Backoff::Constant, 2.0, Some(Duration::MAX));
        p.jitter = 1.0;
        p.initial_delay = Duration::from_secs(u64::MAX / 2);
        assert_eq!(p.base_delay(1), RETRY_DELAY_CEILING);
        assert_eq!(p.jittered(p.base_delay(1), 1.0), RETRY_DELAY_CEILING);
    }
}
