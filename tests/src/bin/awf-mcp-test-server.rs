//! A test-only MCP server: awf-mcp's server and application's tool router over a small tool
//! provider of this file, so the third-party MCP clients of tests/tests/mcp_serve.rs can
//! exercise the protocol (cancellation of a running child, a panicking tool, …) whatever
//! tools the shipped `awf mcp-serve` has. Never shipped: it lives in the test crate.
//!
//! Tools: `Echo {text}` (answers text), `Fail` (an isError result), `Boom` (panics),
//! `Sleep {seconds}` (runs `sleep` as a child, stopped when the call is cancelled).
//! Env: `AWF_MCP_TEST_AUDIT` = a file for the tool call events (run `test-run`, step
//! `test-step`); `AWF_MCP_TEST_PIDS` = a file each Sleep child's pid is appended to.

use std::io::Write;
use std::sync::Arc;

use awf_application::AuditContext;
use awf_application::ToolRouter;
use awf_domain::ports::ToolAuditSink;
use awf_domain::ports::ToolProvider;
use awf_domain::ports::tools::ToolCall;
use awf_domain::ports::tools::ToolCallError;
use awf_domain::ports::tools::ToolOutput;
use awf_domain::ports::tools::ToolSpec;
use serde_json::Value;
use serde_json::json;
use tokio_util::sync::CancellationToken;

struct TestTools;

fn spec(name: &str, description: &str, schema: Value) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: description.into(),
        input_schema: schema,
    }
}

#[async_trait::async_trait]
impl ToolProvider for TestTools {
    fn tools(&self) -> Vec<ToolSpec> {
        vec![
            spec(
                "Echo",
                "Answers with its text.",
                json!({"type": "object", "properties": {"text": {"type": "string", "description": "What to answer"}}, "required": ["text"]}),
            ),
            spec(
                "Fail",
                "Always fails.",
                json!({"type": "object", "properties": {}}),
            ),
            spec(
                "Boom",
                "Panics.",
                json!({"type": "object", "properties": {}}),
            ),
            spec(
                "Sleep",
                "Runs `sleep` for the given seconds.",
                json!({"type": "object", "properties": {"seconds": {"type": "integer", "description": "How long"}}, "required": ["seconds"]}),
            ),
        ]
    }

    async fn call(
        &self,
        call: ToolCall,
        cancel: CancellationToken,
    ) -> Result<ToolOutput, ToolCallError> {
        match call.name.as_str() {
            "Echo" => match call.arguments.get("text") {
                Some(Value::String(t)) => Ok(ToolOutput::text(t.clone())),
                _ => Ok(ToolOutput::error("Echo: `text` must be a string")),
            },
            "Fail" => Ok(ToolOutput::error("Fail: failed as asked")),
            "Boom" => panic!("Boom: exploded as asked"),
            "Sleep" => {
                let Some(secs) = call.arguments.get("seconds").and_then(Value::as_u64) else {
                    return Ok(ToolOutput::error("Sleep: `seconds` must be an integer"));
                };
                let mut child = match tokio::process::Command::new("sleep")
                    .arg(secs.to_string())
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .kill_on_drop(true)
                    .spawn()
                {
                    Ok(c) => c,
                    Err(e) => return Ok(ToolOutput::error(format!("Sleep: {e}"))),
                };
                if let (Some(pid), Some(path)) = (child.id(), std::env::var_os("AWF_MCP_TEST_PIDS"))
                    && let Ok(mut f) = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)
                {
                    let _ = writeln!(f, "{pid}");
                }
                tokio::select! {
                    _ = child.wait() => Ok(ToolOutput::text(format!("slept {secs} s"))),
                    () = cancel.cancelled() => {
                        let _ = child.kill().await;
                        Ok(ToolOutput::error("Sleep: cancelled"))
                    }
                }
            }
            other => Err(ToolCallError::UnknownTool(other.to_owned())),
        }
    }
}

fn main() {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            std::process::exit(4);
        }
    };
    runtime.block_on(async {
        let sink = std::env::var_os("AWF_MCP_TEST_AUDIT").map(|p| {
            Arc::new(awf_store::ToolEventFile::new(std::path::PathBuf::from(p)))
                as Arc<dyn ToolAuditSink>
        });
        let mut router = ToolRouter::new(AuditContext {
            run_id: Some("test-run".into()),
            step: Some("test-step".into()),
            traceparent: None,
            masker: awf_domain::mask::Masker::default(),
            clock: Arc::new(awf_host::SystemClock),
            ids: Arc::new(awf_host::UuidIds),
            sink,
        });
        if let Err(e) = router.register("test", Arc::new(TestTools)) {
            eprintln!("{e}");
            std::process::exit(1);
        }
        let shutdown = CancellationToken::new();
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            let s = shutdown.clone();
            tokio::spawn(async move {
                term.recv().await;
                s.cancel();
            });
        }
        let options = awf_mcp::ServeOptions {
            version: "0.0.0-test".into(),
            ..awf_mcp::ServeOptions::default()
        };
        if let Err(e) = awf_mcp::serve_stdio(Arc::new(router), options, shutdown).await {
            eprintln!("mcp test server: {e}");
        }
    });
    runtime.shutdown_background();
}
