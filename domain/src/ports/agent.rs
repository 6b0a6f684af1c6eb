//! AgentProvider: hands a prompt to an AI agent (a CLI such as `claude`, or an HTTP API) and
//! returns what it answered. The registry finds providers by name.
//!
//! Source: spec/workflow.md §1.5.3, §3.8 and §5; decisions.md ("system_prompt and role reach
//! every provider", "String values in agent options are interpolated").

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde::Serialize;
use serde_json::Map;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::error::AwfError;
use crate::run::TokenUsage;

/// Who said a conversation turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The system prompt.
    System,
    /// The workflow (the prompt).
    User,
    /// The agent.
    Assistant,
}

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    /// Who said it.
    pub role: Role,
    /// What was said.
    pub content: String,
}

/// A provider session: the CLI's own session id (to resume it) and the turns so far (the full
/// history, which HTTP providers resend and transcript-style providers inline).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AgentSession {
    /// The provider's session id (`claude -r`, `codex exec resume`, `gemini --resume`, …).
    pub session_id: Option<String>,
    /// Every turn so far, oldest first.
    pub turns: Vec<Turn>,
}

/// One call to an agent.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgentRequest {
    /// The prompt (interpolated, skills prepended).
    pub prompt: String,
    /// Composed system prompt: role content, blank line, `system_prompt`.
    pub system_prompt: Option<String>,
    /// Provider options with string values interpolated (`model`,
    /// `dangerously_skip_permissions`, `allowed_tools`, `base_url`, `api_key`, …).
    pub options: Map<String, Value>,
    /// Session to continue; `None` = a fresh, untracked call.
    pub session: Option<AgentSession>,
    /// Working directory of the agent (the step's `dir`, else awf's CWD).
    pub dir: Option<PathBuf>,
    /// Wall-clock limit; on expiry the agent process group gets SIGTERM then SIGKILL.
    pub timeout: Option<Duration>,
    /// Extra environment variables for CLI agents.
    pub env: Vec<(String, String)>,
    /// The run's secrets: a provider masks text with them before it cuts it (an error's
    /// stderr tail), so no part of a secret survives the cut.
    pub secrets: crate::mask::Masker,
    /// MCP servers the agent CLI is told to start for this call: the step's `mcp_proxy`
    /// (`awf mcp-serve`) and the editor's servers (ACP `session/new.mcpServers`). Each CLI
    /// provider declares them through its own configuration mechanism and removes what it
    /// wrote when the call ends, cancelled or not (shared/spec/mcp.md §3.3, §3.6). `None`:
    /// the CLI's own configuration is left as it is.
    pub mcp: Option<McpAttachment>,
    /// The step's tools in-process, for a provider that calls them itself
    /// ([`AgentProvider::tools_in_process`], `openai_compatible`: sent as `tools[]`, each call
    /// answered through this provider; shared/spec/mcp.md §4). `None`: no tools.
    pub tools: Option<InProcessTools>,
    /// The run this call belongs to (its run id): a provider that keeps a process per run
    /// (`acp`) keys it by this and closes it at [`AgentProvider::end_run`]. `None`: a call
    /// outside a run (the provider starts and ends what it needs within the call).
    pub run_id: Option<String>,
    /// The root run of the call (its run id), which a provider's processes are marked with
    /// ([`CommandSpec::scope`](crate::ports::exec::CommandSpec::scope)) so what they leave
    /// behind is stopped when that run ends. `None`: a call outside a run.
    pub scope: Option<String>,
    /// Asks the run's front-end (terminal, editor, web page) to approve something the agent
    /// wants to do (`acp` with `permissions: ask`). `None`: nobody can be asked.
    pub approver: Option<Approver>,
}

/// What [`Approver`] asks: the agent's own description of the action and the choices, each
/// with its ACP kind (`allow_once`, `allow_always`, `reject_once`, `reject_always`).
/// Source: shared/spec/acp.md §4.9 (`ask`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalQuestion {
    /// What the agent wants to do (the tool call's title, kind and input), already masked.
    pub message: String,
    /// The choices, in the agent's order.
    pub options: Vec<crate::interaction::ApprovalOption>,
}

/// The future an [`Approver`] returns: the chosen option's id, or `None` when nobody
/// answered (timed out, cancelled, unattended).
pub type ApprovalFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Option<String>> + Send>>;

/// Relays an approval to the run's interaction port (an `Approval` request answered through
/// `respond`), waiting at most the given time. Compared by identity.
#[derive(Clone)]
pub struct Approver(
    pub Arc<dyn Fn(ApprovalQuestion, Option<Duration>) -> ApprovalFuture + Send + Sync>,
);

impl PartialEq for Approver {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Debug for Approver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Approver")
    }
}

/// The name every provider declares awf's own proxy under (`mcp__awf-proxy__Read` in Claude
/// Code). Gemini and OpenCode keep settings across runs, so they append `-<16 hex>` per call
/// to keep concurrent runs apart. Editor servers may not use it (nor any `awf-proxy-` name).
/// Source: shared/spec/mcp.md §3.4.
pub const MCP_PROXY_NAME: &str = "awf-proxy";

/// Whether `name` is reserved for awf's own proxy ([`MCP_PROXY_NAME`] or `awf-proxy-<…>`): an
/// editor's MCP server may not use it, since it would replace the auditing proxy.
/// Source: shared/spec/mcp.md §3.6.
pub fn is_reserved_mcp_name(name: &str) -> bool {
    name == MCP_PROXY_NAME || name.starts_with("awf-proxy-")
}

/// One MCP server to start over stdio: what a CLI's MCP configuration names (`command`,
/// `args`, `env`). Source: MCP 2025-11-25 "stdio" transport; ACP v1 `McpServerStdio`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct McpServer {
    /// Server name (the key in `mcpServers`): [`MCP_PROXY_NAME`] for awf's proxy.
    pub name: String,
    /// Absolute path of the program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment variables, in order.
    pub env: Vec<(String, String)>,
}

/// The MCP servers of one agent call.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct McpAttachment {
    /// awf's proxy (`awf mcp-serve --config <file>`), when the step enables `mcp_proxy`.
    pub proxy: Option<McpServer>,
    /// Wire names of the tools the proxy serves (`Bash`, `Read`, …, `<plugin>_<op>`), sorted:
    /// a provider that must allow tools by name allows these (claude
    /// `--allowedTools mcp__awf-proxy__Read,…`, vibe `--enabled-tools awf-proxy_Read,…`).
    pub proxy_tools: Vec<String>,
    /// `mcp_proxy.intercept_builtins`: hide the CLI's own tools where it can (claude
    /// `--tools "" --strict-mcp-config`); where it cannot, the provider prefixes the system
    /// prompt with [`MCP_ONLY_PROMPT`] (the engine warns `USER.MCP_PROXY.UNSUPPORTED_PROVIDER`).
    pub intercept_builtins: bool,
    /// Servers the editor added (ACP `session/new.mcpServers`), names already checked: none
    /// is [`MCP_PROXY_NAME`] or starts with `awf-proxy-`. On a clash with a server of the CLI's
    /// own configuration the editor's entry wins.
    pub extra: Vec<McpServer>,
}

impl McpAttachment {
    /// Whether there is anything to declare.
    pub fn is_empty(&self) -> bool {
        self.proxy.is_none() && self.extra.is_empty()
    }
}

/// What a provider that cannot hide its own tools prepends to the system prompt when the
/// step intercepts built-ins (AWF (Go)'s wording). Source: shared/spec/mcp.md §3.3.
pub const MCP_ONLY_PROMPT: &str = "Use only MCP tools, never built-in tools. ";

/// A step's tools served in-process (the tool router over the built-ins and plugin tools):
/// compared by identity, so requests stay comparable in tests.
#[derive(Clone)]
pub struct InProcessTools(pub Arc<dyn crate::ports::tools::ToolProvider>);

impl PartialEq for InProcessTools {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Debug for InProcessTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.0.tools().into_iter().map(|t| t.name).collect();
        f.debug_tuple("InProcessTools").field(&names).finish()
    }
}

/// Something the agent produced while it runs, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentChunk {
    /// A piece of the agent's answer text.
    Message(String),
    /// A piece of the agent's reasoning.
    Thought(String),
    /// The agent called a tool.
    ToolCall {
        /// Provider's id of the call.
        id: String,
        /// Tool name.
        name: String,
        /// Arguments.
        input: Value,
    },
    /// A tool call finished.
    ToolResult {
        /// Id of the call it answers.
        id: String,
        /// Result text.
        output: String,
        /// Whether the tool failed.
        is_error: bool,
    },
}

/// Receives [`AgentChunk`]s as the agent streams them.
pub type AgentCallback = Arc<dyn Fn(AgentChunk) + Send + Sync>;

/// What the agent answered.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgentResponse {
    /// The final answer text (before `output_format` post-processing).
    pub output: String,
    /// Provider-specific structured response (e.g. claude's result event), if any.
    pub response: Option<Value>,
    /// Token counts (`estimated` when the provider reported none).
    pub tokens: TokenUsage,
    /// The session after this call (id to resume, turns including this one), when the
    /// request carried a session.
    pub session: Option<AgentSession>,
    /// Raw stdout of a CLI provider (NDJSON), or the raw HTTP body.
    pub raw: String,
    /// stderr of a CLI provider.
    pub stderr: String,
    /// The model that answered, when the provider knows it (`openai_compatible`: the
    /// request's model, from `options.model` or `$OPENAI_MODEL`); prices look it up.
    pub model: Option<String>,
}

/// An AI agent.
///
/// Contract: CLI providers run their binary with an argv (no shell) through the process
/// contract of [`crate::ports::CommandExecutor`] (own process group, stdin closed, SIGTERM →
/// 5 s → SIGKILL on timeout or cancel). Chunks are delivered as the output streams.
#[async_trait::async_trait]
pub trait AgentProvider: Send + Sync {
    /// Provider name as written in workflows (`claude`, `openai_compatible`, …).
    fn name(&self) -> &str;

    /// The `options:` keys this provider understands besides [`COMMON_AGENT_OPTIONS`], in
    /// snake_case (see [`option_key`] for the spellings accepted), or `None` when it takes
    /// any key. `awf validate` and `awf run`
    /// warn about a key outside this list, since the provider would ignore it.
    fn options(&self) -> Option<&'static [&'static str]> {
        None
    }

    /// Whether a later turn resumes the session through the id this provider returns (the
    /// CLIs' resume flags); `false` when the provider resends the history itself (HTTP APIs,
    /// transcript-in-prompt CLIs). When it does and a session-tracked turn came back without
    /// an id, the engine warns that the next turn starts a fresh session.
    fn resumes_by_session_id(&self) -> bool {
        false
    }

    /// Whether this provider calls a step's tools itself ([`AgentRequest::tools`], the
    /// `openai_compatible` tool loop) instead of declaring an MCP server to a CLI
    /// ([`AgentRequest::mcp`]). The engine fills the one this says.
    fn tools_in_process(&self) -> bool {
        false
    }

    /// Whether this CLI can hide its own tools when a step intercepts built-ins (claude,
    /// codex, gemini, opencode, vibe, the in-process loop; not copilot). `false`: the proxy's tools are only
    /// added beside the CLI's, and the engine warns `USER.MCP_PROXY.UNSUPPORTED_PROVIDER`.
    fn hides_native_tools(&self) -> bool {
        false
    }

    /// Problems with a step's literal `options:` that `awf validate` reports as errors
    /// (an unknown `acp` agent preset, a bad `permissions:` value), each with its `path` set
    /// to the option key (`agent`); the caller prefixes `states.<name>.options.`. Values that
    /// are templates are not checked. Default: none.
    fn check_options(
        &self,
        options: &Map<String, Value>,
    ) -> Vec<crate::ports::repository::Diagnostic> {
        let _ = options;
        Vec::new()
    }

    /// The run `run_id` ended: close what the provider keeps for it (the `acp` agent
    /// processes: stdin EOF, grace, SIGTERM, SIGKILL to the group). Default: nothing.
    async fn end_run(&self, run_id: &str) {
        let _ = run_id;
    }

    /// Runs one prompt turn.
    ///
    /// # Errors
    /// `EXECUTION.AGENT.BINARY_NOT_FOUND` (hint: the npm package), `USER.AGENT.INVALID_OPTION`
    /// (bad model name, bad option type), `EXECUTION.AGENT.FAILED` (non-zero exit, with the
    /// stderr tail; API error reported by the CLI), `EXECUTION.AGENT.TIMEOUT`,
    /// `EXECUTION.RUN.CANCELLED`, and for HTTP providers `EXECUTION.AGENT.AUTH_FAILED` (401),
    /// `EXECUTION.AGENT.RATE_LIMITED` (429), `EXECUTION.AGENT.SERVER_ERROR` (5xx),
    /// `EXECUTION.AGENT.BAD_REQUEST` (other 4xx); for `acp` also `EXECUTION.AGENT.REFUSAL`,
    /// `EXECUTION.AGENT.MAX_TOKENS`, `EXECUTION.AGENT.MAX_TURN_REQUESTS`,
    /// `EXECUTION.AGENT.PERMISSION_DENIED` (each with `partial_output` in its details) and
    /// `USER.ACP.PROTOCOL_VERSION_UNSUPPORTED`.
    async fn execute(
        &self,
        request: AgentRequest,
        on_chunk: Option<AgentCallback>,
        cancel: CancellationToken,
    ) -> Result<AgentResponse, AwfError>;
}

/// Option keys every provider understands: `output_format` (the display format the engine
/// fills in) and `system_prompt` (prepended or passed as the CLI's flag).
pub const COMMON_AGENT_OPTIONS: &[&str] = &["output_format", "system_prompt"];

/// The canonical (snake_case) spelling of an `options:` key: `allowedTools` and
/// `allowed-tools` are both `allowed_tools`, so a key may be written as the agent CLI spells
/// its flag. Keys already in snake_case are returned unchanged.
pub fn option_key(key: &str) -> std::borrow::Cow<'_, str> {
    if !key.bytes().any(|b| b.is_ascii_uppercase() || b == b'-') {
        return std::borrow::Cow::Borrowed(key);
    }
    let mut out = String::with_capacity(key.len() + 4);
    for (i, c) in key.chars().enumerate() {
        if c == '-' {
            out.push('_');
        } else if c.is_ascii_uppercase() {
            if i > 0 && !out.ends_with('_') {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Finds providers by name.
#[async_trait::async_trait]
pub trait AgentRegistry: Send + Sync {
    /// The provider called `name`, if registered.
    fn get(&self, name: &str) -> Option<Arc<dyn AgentProvider>>;
    /// Every registered name, sorted.
    fn names(&self) -> Vec<String>;
    /// Tells every registered provider that run `run_id` ended ([`AgentProvider::end_run`]).
    async fn end_run(&self, run_id: &str) {
        for name in self.names() {
            if let Some(p) = self.get(&name) {
                p.end_run(run_id).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::option_key;

    #[test]
    fn option_keys_accept_the_cli_spellings() {
        assert_eq!(option_key("allowed_tools"), "allowed_tools");
        assert_eq!(option_key("allowedTools"), "allowed_tools");
        assert_eq!(option_key("allowed-tools"), "allowed_tools");
        assert_eq!(option_key("maxTurns"), "max_turns");
        assert_eq!(option_key("permissionMode"), "permission_mode");
        assert_eq!(option_key("max-budget-usd"), "max_budget_usd");
    }
}
