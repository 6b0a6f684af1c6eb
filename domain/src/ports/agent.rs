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

    /// Runs one prompt turn.
    ///
    /// # Errors
    /// `EXECUTION.AGENT.BINARY_NOT_FOUND` (hint: the npm package), `USER.AGENT.INVALID_OPTION`
    /// (bad model name, bad option type), `EXECUTION.AGENT.FAILED` (non-zero exit, with the
    /// stderr tail; API error reported by the CLI), `EXECUTION.AGENT.TIMEOUT`,
    /// `EXECUTION.RUN.CANCELLED`, and for HTTP providers `EXECUTION.AGENT.AUTH_FAILED` (401),
    /// `EXECUTION.AGENT.RATE_LIMITED` (429), `EXECUTION.AGENT.SERVER_ERROR` (5xx),
    /// `EXECUTION.AGENT.BAD_REQUEST` (other 4xx).
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
pub trait AgentRegistry: Send + Sync {
    /// The provider called `name`, if registered.
    fn get(&self, name: &str) -> Option<Arc<dyn AgentProvider>>;
    /// Every registered name, sorted.
    fn names(&self) -> Vec<String>;
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
