//! ToolProvider: tools an agent can call during a step (the built-in Read, Write, Edit, Bash,
//! Glob and Grep, plugin operations, workflows as tools), whoever serves them: `awf mcp-serve`
//! over MCP, or the `openai_compatible` provider in-process as `tools[]`.
//!
//! Providers compose: the built-ins implement it, and the tool router in application
//! implements it over them (registration, name collisions, the audit seam per call).
//! Reference: shared/spec/mcp.md §2, §9 (MCP 2025-11-25 `tools/list`, `tools/call`).

use serde::Serialize;
use serde_json::Map;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// A tool as `tools/list` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    /// Wire name (`Read`, `Bash`, `<plugin>_<op>`, a workflow name).
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments (`{"type":"object","properties":…,"required":…}`),
    /// hand-written: no `$schema`, no type arrays.
    pub input_schema: Value,
}

/// One call of a tool.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolCall {
    /// Wire name of the tool.
    pub name: String,
    /// Arguments as the client sent them.
    pub arguments: Map<String, Value>,
    /// The client's id of the call, when it has one (MCP request id, OpenAI `tool_call_id`).
    pub call_id: Option<String>,
}

/// What a call gives back. A tool that fails (bad arguments, a path outside the root, a
/// command that exits non-zero) answers with `is_error: true` and a text that says why; it is
/// not a protocol error (MCP 2025-11-25, "Error Handling").
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct ToolOutput {
    /// The text content (masked where it can hold secrets).
    pub text: String,
    /// Whether the call failed.
    pub is_error: bool,
    /// Structured content (MCP `structuredContent`), when the tool has some.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
}

impl ToolOutput {
    /// A successful text result.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Self::default()
        }
    }

    /// A failed call saying why.
    pub fn error(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            is_error: true,
            structured: None,
        }
    }
}

/// How far a long call has got (MCP `notifications/progress`): `progress` increases with
/// every report (a count of steps or events, not a percentage unless `total` says so).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolProgress {
    /// Progress so far; strictly increasing over one call.
    pub progress: f64,
    /// What `progress` counts up to, when known.
    pub total: Option<f64>,
    /// A short, masked description of the last thing that happened (`step build completed`).
    pub message: Option<String>,
}

/// Where a call reports its progress. Called from the call's task; must not block (the MCP
/// server queues each report as a notification for the client's `progressToken`).
pub type ProgressSink = std::sync::Arc<dyn Fn(ToolProgress) + Send + Sync>;

/// Why a call could not be made at all (a protocol error, not a tool result).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolCallError {
    /// No tool has that name (MCP answers JSON-RPC -32602).
    #[error("unknown tool: {0}")]
    UnknownTool(String),
}

/// Serves tools.
#[async_trait::async_trait]
pub trait ToolProvider: Send + Sync {
    /// The tools, in a stable order.
    fn tools(&self) -> Vec<ToolSpec>;

    /// Runs one call. `cancel` fires when the client cancels the request or the step ends:
    /// a running command is stopped (SIGTERM → grace → SIGKILL to its process group) and the
    /// call answers promptly.
    ///
    /// # Errors
    /// [`ToolCallError::UnknownTool`] when no tool has that name.
    async fn call(
        &self,
        call: ToolCall,
        cancel: CancellationToken,
    ) -> Result<ToolOutput, ToolCallError>;

    /// [`ToolProvider::call`] for a client that asked for progress (MCP `_meta.progressToken`):
    /// a long-running tool (a workflow) reports to `progress`; the default ignores it, so
    /// tools that answer at once (the built-ins) need not implement it.
    ///
    /// # Errors
    /// As [`ToolProvider::call`].
    async fn call_with_progress(
        &self,
        call: ToolCall,
        cancel: CancellationToken,
        progress: Option<ProgressSink>,
    ) -> Result<ToolOutput, ToolCallError> {
        let _ = progress;
        self.call(call, cancel).await
    }
}

/// What the tool router records of one `tools/call` (the audit seam): one record per call,
/// after it answered. Text is already masked. `awf mcp-serve` runs in its own process (the
/// agent CLI starts it), so records reach the parent run through a [`ToolAuditSink`] that
/// appends them to a file the parent names in the config (`audit_path`).
///
/// Reference: shared/spec/mcp.md §3.5 (span, log line, `tool.call`/`tool.result` events).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCallRecord {
    /// The run the step belongs to, when the parent passed it.
    pub run_id: Option<String>,
    /// The step (state name) the agent runs in, when the parent passed it.
    pub step: Option<String>,
    /// The parent's span context (W3C `traceparent`), when it passed one, so the parent can
    /// hang the call's span under its step's.
    pub traceparent: Option<String>,
    /// Id of the call: the client's (MCP request id) or a new one.
    pub call_id: String,
    /// Wire name of the tool.
    pub name: String,
    /// Which provider served it (`builtin`, `plugin:<name>`, ...), `""` for an unknown tool.
    pub source: String,
    /// The arguments, masked.
    pub input: Value,
    /// The result text, masked.
    pub output: String,
    /// Whether the call failed (an `isError` result or an unknown tool).
    pub is_error: bool,
    /// When the call started (wall clock).
    #[serde(skip)]
    pub started_at: std::time::SystemTime,
    /// How long the call took, in milliseconds.
    pub duration_ms: u64,
}

/// Where the router sends each [`ToolCallRecord`].
pub trait ToolAuditSink: Send + Sync {
    /// Records one call. Called once per call, possibly from several tasks at once.
    ///
    /// # Errors
    /// The sink's I/O error; the router logs it as a warning and the call's answer stands.
    fn record(&self, record: &ToolCallRecord) -> std::io::Result<()>;
}

/// What one agent call's tool proxy serves: the step's `mcp_proxy:` block (already validated)
/// and the run it belongs to. Source: shared/spec/mcp.md §1.1, §3.1.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProxySpec {
    /// The run (stamped on every tool call event).
    pub run_id: String,
    /// The step (state name).
    pub step: String,
    /// The workspace the built-ins are confined to: the step's working directory, absolute.
    pub root_dir: std::path::PathBuf,
    /// Serve the built-in Read, Write, Edit, Bash, Glob and Grep.
    pub intercept_builtins: bool,
    /// Plugin operations to serve as `<plugin>_<op>` tools.
    pub plugin_tools: Vec<crate::workflow::McpPluginTools>,
    /// The step's span context (W3C `traceparent`), when spans are exported.
    pub traceparent: Option<String>,
    /// The editor's file channel (ACP fs delegation, shared/spec/acp.md §1.2), when the run
    /// has one: an absolute path of a unix socket. The built-in Read, Write and Edit then
    /// read and write through it (after the usual confinement check, on the resolved path);
    /// Bash, Glob and Grep stay on disk. A channel that fails is an `isError` result, never a
    /// fallback to the disk.
    ///
    /// Protocol: JSON lines, one request and one reply per line, any number per connection.
    /// Requests `{"op":"read","path":ABS,"line"?:N,"limit"?:N}` (1-based line, line count)
    /// and `{"op":"write","path":ABS,"content":TEXT}`; replies `{"ok":true,"content":TEXT}`
    /// (read), `{"ok":true}` (write) or `{"ok":false,"error":WHY}`.
    pub fs_delegate: Option<std::path::PathBuf>,
}

/// One prepared stdio proxy for one agent call (or one conversation turn): the `awf
/// mcp-serve` the agent CLI starts from its MCP configuration, and the file its tool call
/// events land in. Dropping it removes its files (config and events), also when the call
/// was cancelled.
pub trait StdioProxy: Send + Sync {
    /// The server entry the provider declares (name [`crate::ports::agent::MCP_PROXY_NAME`],
    /// command = awf's own executable, args `mcp-serve --config <file>`).
    fn server(&self) -> crate::ports::agent::McpServer;

    /// Wire names of the tools it serves, sorted (`Bash`, `Edit`, `Glob`, `Grep`, `Read`,
    /// `Write`, then `<plugin>_<op>`).
    fn tools(&self) -> Vec<String>;

    /// The tool call events the server recorded since the last call, in order: for each
    /// call a [`crate::event::RunEvent::ToolCall`] then its
    /// [`crate::event::RunEvent::ToolCallResult`] (masked by the server). A torn last line
    /// (a killed server) is left for the next call or dropped at the end.
    fn take_events(&self) -> Vec<crate::event::RunEvent>;
}

/// Tools with the source label the router records for them (`builtin`, `plugin:<name>`).
pub type SourcedTools = (String, std::sync::Arc<dyn ToolProvider>);

/// Builds the tools of a step with `mcp_proxy: {enable: true}`: as a stdio proxy for CLI
/// agents, or in-process for a provider that runs its own tool loop.
pub trait ToolProxies: Send + Sync {
    /// Prepares a stdio proxy: writes the `mcp-serve` config (mode 0600, in the temp dir).
    ///
    /// # Errors
    /// `USER.MCP_PROXY.UNKNOWN_PLUGIN` / `USER.MCP_PROXY.UNKNOWN_OPERATION` (a plugin tool
    /// that no operation provides), `USER.MCP_PROXY.EMPTY_PROXY` (nothing to serve),
    /// `SYSTEM.IO.*` when the file cannot be written.
    fn stdio(&self, spec: &ProxySpec) -> Result<Box<dyn StdioProxy>, crate::AwfError>;

    /// The same tools in-process, unaudited (the caller registers them in its tool router,
    /// which is the audit seam), each with its source label: `builtin` (the built-ins confined
    /// to `spec.root_dir`, masking `secrets`; only with `intercept_builtins`) and
    /// `plugin:<name>` for each plugin of `plugin_tools`.
    ///
    /// # Errors
    /// As [`ToolProxies::stdio`].
    fn in_process(
        &self,
        spec: &ProxySpec,
        secrets: &crate::mask::Masker,
    ) -> Result<Vec<SourcedTools>, crate::AwfError>;
}
