//! Operations: built-in actions a workflow runs without a shell or an agent (`type:
//! operation`, e.g. `http.request`), also served to agents as `<plugin>_<op>` MCP tools when a
//! step lists them in `mcp_proxy.plugin_tools`.
//!
//! An operation id is `<plugin>.<op>` (`http.request`: plugin `http`, operation `request`).
//! Source: shared/spec/workflow.md §1.5.7, §3.9; shared/spec/mcp.md §1.1, §3.4.

use std::time::Duration;

use serde_json::Map;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::error::AwfError;

/// Ids of the operations this build provides (`<plugin>.<op>`), sorted: what the pure
/// validator checks `operation:` and `mcp_proxy.plugin_tools` against (like
/// [`crate::workflow::AGENT_PROVIDERS`]). The [`Operations`] adapter the binary wires lists
/// exactly these.
pub const BUILTIN_OPERATIONS: &[&str] = &["http.request"];

/// Input names of `http.request`, in the order the docs list them: what `awf validate`
/// checks an operation state's `inputs:` against (an unknown name is an error with a
/// did-you-mean) and what the adapter accepts at run time. Source: shared/spec/workflow.md
/// §1.5.7; `follow_redirects` is awf's own (docs/compatibility.md).
pub const HTTP_REQUEST_INPUTS: &[&str] = &[
    "method",
    "url",
    "headers",
    "body",
    "timeout",
    "retryable_status_codes",
    "follow_redirects",
];

/// The methods `http.request` sends, upper case (the `method` input takes any case).
pub const HTTP_REQUEST_METHODS: &[&str] = &["GET", "POST", "PUT", "DELETE"];

/// The input names of built-in operation `id` (one of [`BUILTIN_OPERATIONS`]), `None` for an
/// id awf does not provide.
pub fn builtin_inputs_of(id: &str) -> Option<&'static [&'static str]> {
    match id {
        "http.request" => Some(HTTP_REQUEST_INPUTS),
        _ => None,
    }
}

/// Whether plugin `plugin` provides at least one of [`BUILTIN_OPERATIONS`].
pub fn is_builtin_plugin(plugin: &str) -> bool {
    BUILTIN_OPERATIONS
        .iter()
        .any(|id| id.split_once('.').is_some_and(|(p, _)| p == plugin))
}

/// The plugins of [`BUILTIN_OPERATIONS`], sorted, each once (`["http"]`).
pub fn builtin_plugins() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = BUILTIN_OPERATIONS
        .iter()
        .filter_map(|id| id.split_once('.').map(|(p, _)| p))
        .collect();
    out.dedup();
    out
}

/// The operation names plugin `plugin` provides (`["request"]` for `http`).
pub fn builtin_ops_of(plugin: &str) -> Vec<&'static str> {
    BUILTIN_OPERATIONS
        .iter()
        .filter_map(|id| id.split_once('.'))
        .filter(|(p, _)| *p == plugin)
        .map(|(_, op)| op)
        .collect()
}

/// One operation as the registry lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct OperationSpec {
    /// Plugin name (`http`).
    pub plugin: String,
    /// Operation name within the plugin (`request`).
    pub name: String,
    /// What it does, for `awf validate` messages and the tool's description.
    pub description: String,
    /// JSON Schema of its inputs (`{"type":"object","properties":…,"required":…}`).
    pub input_schema: Value,
}

impl OperationSpec {
    /// The id a workflow writes in `operation:` (`http.request`).
    pub fn id(&self) -> String {
        format!("{}.{}", self.plugin, self.name)
    }

    /// The MCP tool name (`http_request`; single underscore, no dots).
    pub fn tool_name(&self) -> String {
        format!("{}_{}", self.plugin, self.name)
    }
}

/// What an operation gave back. `outputs` become the step's `Response` (and `Output` as
/// `k=v` lines, keys in order); `success: false` fails the step (routable by `on_failure`)
/// with `error` as its message.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OperationResult {
    /// Whether it succeeded.
    pub success: bool,
    /// Named outputs (`status_code`, `body`, `headers`, `body_truncated` for `http.request`).
    pub outputs: Map<String, Value>,
    /// Why it failed, masked.
    pub error: Option<String>,
}

/// The operations this build provides.
#[async_trait::async_trait]
pub trait Operations: Send + Sync {
    /// Every operation, sorted by id.
    fn list(&self) -> Vec<OperationSpec>;

    /// Runs operation `id` with already-interpolated `inputs`.
    ///
    /// # Errors
    /// `USER.INPUT.VALIDATION_FAILED`-family errors for inputs that do not fit the schema,
    /// `EXECUTION.*` for an operation that could not run at all (not found: the caller checks
    /// [`Operations::list`] first), `EXECUTION.RUN.CANCELLED` when `cancel` fired. A request
    /// that ran and failed (no answer, a timeout, a status listed in
    /// `retryable_status_codes`) is an `Ok` result with `success: false`; any other answer,
    /// a 404 or a 500 included, is a success whose `status_code` says what came back (as
    /// AWF (Go)).
    async fn execute(
        &self,
        id: &str,
        inputs: Map<String, Value>,
        timeout: Option<Duration>,
        cancel: CancellationToken,
    ) -> Result<OperationResult, AwfError>;
}
