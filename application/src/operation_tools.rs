//! Plugin tools: operations served to agents as MCP tools named `<plugin>_<op>` (`http_request`),
//! where a step's `mcp_proxy.plugin_tools` (or an `awf mcp-serve` config's `plugin_tools`)
//! lists them. [`OperationTools`] is a [`ToolProvider`] over the [`Operations`] port: each
//! tool's input schema is its operation's, a call runs the operation with the call's
//! arguments, and the answer is the operation's outputs as JSON text (also as structured
//! content); a failed operation, or inputs it refuses, is an `isError` result that says why.
//!
//! Registered in a [`crate::ToolRouter`], the calls get its audit seam (span, log line,
//! record, masking) like the built-ins. Source: shared/spec/mcp.md §1.1, §1.3, §3.4.

use std::collections::BTreeMap;
use std::sync::Arc;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::Operations;
use awf_domain::ports::ToolProvider;
use awf_domain::ports::tools::ToolCall;
use awf_domain::ports::tools::ToolCallError;
use awf_domain::ports::tools::ToolOutput;
use awf_domain::ports::tools::ToolSpec;
use awf_domain::validate::closest;
use awf_domain::workflow::McpPluginTools;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// The plugin tools of one proxy.
pub struct OperationTools {
    ops: Arc<dyn Operations>,
    /// Tool name → (operation id, its spec), sorted by name.
    tools: BTreeMap<String, (String, ToolSpec)>,
}

impl std::fmt::Debug for OperationTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperationTools")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl OperationTools {
    /// The tools `plugin_tools` asks for, over `ops`: for each entry, each operation of
    /// `expose` as tool `<plugin>_<op>`.
    ///
    /// # Errors
    /// `USER.MCP_PROXY.UNKNOWN_PLUGIN` for a plugin none of `ops` belongs to,
    /// `USER.MCP_PROXY.UNKNOWN_OPERATION` for an operation the plugin lacks (both with a
    /// did-you-mean), `USER.MCP_PROXY.NAME_COLLISION` for a plugin listed twice or two
    /// entries giving one tool name.
    // Type-erased on purpose: what a tool proxy registers in its router.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(
        ops: Arc<dyn Operations>,
        plugin_tools: &[McpPluginTools],
    ) -> Result<Arc<dyn ToolProvider>, AwfError> {
        Ok(Arc::new(Self::build(ops, plugin_tools)?))
    }

    /// [`OperationTools::new`] without the type erasure.
    ///
    /// # Errors
    /// As [`OperationTools::new`].
    pub fn build(
        ops: Arc<dyn Operations>,
        plugin_tools: &[McpPluginTools],
    ) -> Result<Self, AwfError> {
        let specs = ops.list();
        let mut plugins: Vec<&str> = specs.iter().map(|s| s.plugin.as_str()).collect();
        plugins.dedup();
        let mut tools: BTreeMap<String, (String, ToolSpec)> = BTreeMap::new();
        let mut seen_plugins: Vec<&str> = Vec::new();
        for entry in plugin_tools {
            let plugin = entry.plugin.as_str();
            if seen_plugins.contains(&plugin) {
                return Err(AwfError::new(
                    ErrorCode::UserMcpProxyNameCollision,
                    format!("plugin \"{plugin}\" is listed twice in plugin_tools"),
                )
                .with_hint("list each plugin once, with all its operations under one expose"));
            }
            seen_plugins.push(plugin);
            if !plugins.contains(&plugin) {
                let list = format!("awf provides the plugins: {}", plugins.join(", "));
                let e = AwfError::new(
                    ErrorCode::UserMcpProxyUnknownPlugin,
                    format!("unknown plugin \"{plugin}\" in plugin_tools"),
                )
                .with_detail("plugin", plugin);
                return Err(match closest(plugin, plugins.iter().copied()) {
                    Some(c) => e.with_hint(format!("did you mean '{c}'? ({list})")),
                    None => e.with_hint(list),
                });
            }
            let own: Vec<&str> = specs
                .iter()
                .filter(|s| s.plugin == plugin)
                .map(|s| s.name.as_str())
                .collect();
            for op in &entry.expose {
                let Some(spec) = specs.iter().find(|s| s.plugin == plugin && s.name == *op) else {
                    let list = format!("operations of {plugin}: {}", own.join(", "));
                    let e = AwfError::new(
                        ErrorCode::UserMcpProxyUnknownOperation,
                        format!("plugin \"{plugin}\" has no operation \"{op}\""),
                    )
                    .with_detail("plugin", plugin)
                    .with_detail("operation", op.clone());
                    return Err(match closest(op, own.iter().copied()) {
                        Some(c) => e.with_hint(format!("did you mean '{c}'? ({list})")),
                        None => e.with_hint(list),
                    });
                };
                let name = spec.tool_name();
                if let Some((first, _)) = tools.get(&name) {
                    return Err(AwfError::new(
                        ErrorCode::UserMcpProxyNameCollision,
                        format!(
                            "{} and {first} are both served as tool \"{name}\"",
                            spec.id()
                        ),
                    )
                    .with_hint("expose each operation once"));
                }
                tools.insert(
                    name.clone(),
                    (
                        spec.id(),
                        ToolSpec {
                            name,
                            description: spec.description.clone(),
                            input_schema: spec.input_schema.clone(),
                        },
                    ),
                );
            }
        }
        Ok(Self { ops, tools })
    }
}

#[async_trait::async_trait]
impl ToolProvider for OperationTools {
    fn tools(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|(_, s)| s.clone()).collect()
    }

    async fn call(
        &self,
        call: ToolCall,
        cancel: CancellationToken,
    ) -> Result<ToolOutput, ToolCallError> {
        let Some((id, _)) = self.tools.get(&call.name) else {
            return Err(ToolCallError::UnknownTool(call.name));
        };
        match self.ops.execute(id, call.arguments, None, cancel).await {
            Ok(r) => {
                let outputs = Value::Object(r.outputs);
                let json = outputs.to_string();
                if r.success {
                    Ok(ToolOutput {
                        text: json,
                        is_error: false,
                        structured: Some(outputs),
                    })
                } else {
                    let why = r.error.unwrap_or_else(|| format!("{id} failed"));
                    Ok(ToolOutput {
                        text: format!("{why}\n{json}"),
                        is_error: true,
                        structured: Some(outputs),
                    })
                }
            }
            Err(e) => {
                let mut text = format!("[{}] {}", e.code(), e.message());
                for h in e.hints() {
                    text.push_str("\nHint: ");
                    text.push_str(h);
                }
                Ok(ToolOutput::error(text))
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use awf_domain::ports::operations::OperationResult;
    use awf_domain::ports::operations::OperationSpec;
    use serde_json::Map;
    use serde_json::json;

    use super::*;

    /// `http.request` answering `{"status_code": 200, "echo": <arguments>}`, failing when
    /// the arguments hold `"fail": true`, refusing them when they hold `"bad": true`.
    struct EchoOps;

    #[async_trait::async_trait]
    impl Operations for EchoOps {
        fn list(&self) -> Vec<OperationSpec> {
            vec![OperationSpec {
                plugin: "http".into(),
                name: "request".into(),
                description: "HTTP".into(),
                input_schema: json!({"type": "object", "required": ["url"]}),
            }]
        }

        async fn execute(
            &self,
            id: &str,
            inputs: Map<String, Value>,
            timeout: Option<Duration>,
            _cancel: CancellationToken,
        ) -> Result<OperationResult, AwfError> {
            assert_eq!((id, timeout), ("http.request", None));
            if inputs.get("bad").is_some() {
                return Err(AwfError::new(
                    ErrorCode::UserInputValidationFailed,
                    "http.request: input `url` is required",
                )
                .with_hint("give url"));
            }
            let mut outputs = Map::new();
            outputs.insert("status_code".into(), json!(200));
            outputs.insert("echo".into(), Value::Object(inputs.clone()));
            Ok(OperationResult {
                success: inputs.get("fail").is_none(),
                outputs,
                error: inputs
                    .get("fail")
                    .map(|_| "http.request: retryable status code 503".to_owned()),
            })
        }
    }

    fn entry(plugin: &str, ops: &[&str]) -> McpPluginTools {
        McpPluginTools {
            plugin: plugin.into(),
            expose: ops.iter().map(|o| (*o).to_owned()).collect(),
        }
    }

    fn call(name: &str, args: Value) -> ToolCall {
        ToolCall {
            name: name.into(),
            arguments: args.as_object().unwrap().clone(),
            call_id: None,
        }
    }

    #[tokio::test]
    async fn http_request_is_served_with_its_schema_and_answers_json() {
        let tools = OperationTools::new(Arc::new(EchoOps), &[entry("http", &["request"])]).unwrap();
        let list = tools.tools();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].name, "http_request");
        assert_eq!(list[0].input_schema["required"], json!(["url"]));
        let out = tools
            .call(
                call("http_request", json!({"url": "http://x/"})),
                CancellationToken::new(),
            )
            .await
            .unwrap();
        assert!(!out.is_error, "{out:?}");
        let v: Value = serde_json::from_str(&out.text).unwrap();
        assert_eq!(v, json!({"status_code": 200, "echo": {"url": "http://x/"}}));
        assert_eq!(out.structured, Some(v));
        let out = tools
            .call(
                call("http_request", json!({"fail": true})),
                CancellationToken::new(),
            )
            .await
            .unwrap();
        assert!(out.is_error);
        assert!(
            out.text
                .starts_with("http.request: retryable status code 503\n"),
            "{}",
            out.text
        );
        let out = tools
            .call(
                call("http_request", json!({"bad": true})),
                CancellationToken::new(),
            )
            .await
            .unwrap();
        assert!(out.is_error);
        assert!(
            out.text.contains("USER.INPUT.VALIDATION_FAILED")
                && out.text.contains("Hint: give url"),
            "{}",
            out.text
        );
        assert_eq!(
            tools
                .call(call("Read", json!({})), CancellationToken::new())
                .await,
            Err(ToolCallError::UnknownTool("Read".into()))
        );
    }

    #[test]
    fn unknown_plugins_operations_and_collisions_are_refused_with_their_codes() {
        let err = |p: &[McpPluginTools]| OperationTools::build(Arc::new(EchoOps), p).unwrap_err();
        let e = err(&[entry("htp", &["request"])]);
        assert_eq!(e.code(), ErrorCode::UserMcpProxyUnknownPlugin);
        assert!(
            e.hints()[0].contains("did you mean 'http'"),
            "{:?}",
            e.hints()
        );
        let e = err(&[entry("http", &["reqest"])]);
        assert_eq!(e.code(), ErrorCode::UserMcpProxyUnknownOperation);
        assert!(
            e.hints()[0].contains("did you mean 'request'"),
            "{:?}",
            e.hints()
        );
        let e = err(&[entry("http", &["request"]), entry("http", &["request"])]);
        assert_eq!(e.code(), ErrorCode::UserMcpProxyNameCollision);
        let e = err(&[entry("http", &["request", "request"])]);
        assert_eq!(e.code(), ErrorCode::UserMcpProxyNameCollision);
        assert!(e.message().contains("http_request"), "{}", e.message());
    }
}
