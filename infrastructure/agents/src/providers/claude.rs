use awf_domain::error::AwfError;
use awf_domain::ports::agent::AgentRequest;
use awf_domain::ports::agent::MCP_PROXY_NAME;
use awf_domain::ports::agent::McpAttachment;
use awf_domain::ports::agent::McpServer;
use serde_json::Map;
use serde_json::Value;
use serde_json::json;

use crate::cli::CliAgent;
use crate::cli::Invocation;
use crate::cli::resume_id;
use crate::cli::system_prompt;
use crate::mcp;
use crate::mcp::Cleanup;
use crate::options::Opts;
use crate::parse::Parsed;
use crate::parse::claude::State;

/// Claude Code (`claude`).
///
/// argv: `-p <prompt> [--model M] --output-format stream-json --verbose` followed by one flag
/// per option given: `allowed_tools` → `--allowedTools`, `disallowed_tools` →
/// `--disallowedTools`, `tools` → `--tools` (lists, or comma-separated strings, joined by
/// commas), `max_turns` → `--max-turns N`, `permission_mode` → `--permission-mode`
/// (`acceptEdits`, `auto`, `bypassPermissions`, `default`, `dontAsk`, `plan`), `effort` →
/// `--effort` (`low` … `max`), `fallback_model` → `--fallback-model`, `max_budget_usd` →
/// `--max-budget-usd`, `append_system_prompt` → `--append-system-prompt`, `add_dirs` → one
/// `--add-dir D` each, `settings` → `--settings`, `dangerously_skip_permissions` →
/// `--dangerously-skip-permissions`; then `-r <session id>` when resuming, else
/// `--system-prompt S` (a resumed session already has it). Keys may also be written as the CLI
/// spells them (`allowedTools`, `max-turns`). `model` is `sonnet`, `opus`, `haiku` or
/// `claude-…`. Response = the last `result` event when `options.output_format` is
/// `json`/`stream-json`.
///
/// MCP servers ([`AgentRequest::mcp`], the step's `mcp_proxy` and the editor's servers): a
/// wrapper `{"mcpServers": {…}}` (the proxy as `awf-proxy`, then each editor server, which
/// wins a name clash with the CLI's own configuration but never takes an `awf-proxy` name) is
/// written to `$TMPDIR/awf-claude-mcp-*.json` (0600, removed when the call ends, cancelled or
/// not) and passed as `--mcp-config <file>`. The proxy's tools are allowed by name
/// (`--allowedTools mcp__awf-proxy__Read,…`, after the step's own `allowed_tools`): in `-p`
/// mode Claude Code denies an MCP tool nobody allowed. With `intercept_builtins` the CLI's own
/// tools are hidden (`--tools ""`, replacing the step's `tools`) and only the wrapper's
/// servers are used (`--strict-mcp-config`).
///
/// Source: spec/workflow.md §5.2 "claude"; `claude --help` of the pinned 2.1 CLI;
/// shared/spec/mcp.md §3.3; shared/spec/agents-offline.md §1.6.
#[derive(Debug, Default, Clone, Copy)]
pub struct Claude;

/// The options of [`Claude`], in argv order.
const OPTIONS: &[&str] = &[
    "model",
    "allowed_tools",
    "disallowed_tools",
    "tools",
    "max_turns",
    "permission_mode",
    "effort",
    "fallback_model",
    "max_budget_usd",
    "append_system_prompt",
    "add_dirs",
    "settings",
    "dangerously_skip_permissions",
];

const PERMISSION_MODES: &[&str] = &[
    "acceptEdits",
    "auto",
    "bypassPermissions",
    "default",
    "dontAsk",
    "plan",
];

const EFFORTS: &[&str] = &["low", "medium", "high", "xhigh", "max"];

impl CliAgent for Claude {
    type Parser = State;

    fn name(&self) -> &'static str {
        "claude"
    }

    fn binary(&self) -> &'static str {
        "claude"
    }

    fn install_hint(&self) -> &'static str {
        "Install Claude Code: npm install -g @anthropic-ai/claude-code"
    }

    fn options(&self) -> &'static [&'static str] {
        OPTIONS
    }

    fn argv(&self, request: &AgentRequest) -> Result<Vec<String>, AwfError> {
        let o = Opts::new("claude", &request.options);
        let model = o.model(
            |m: &str| matches!(m, "sonnet" | "opus" | "haiku") || m.starts_with("claude-"),
            "sonnet, opus, haiku or a name starting with claude-",
        )?;
        let mut args = vec!["-p".to_owned(), request.prompt.clone()];
        if let Some(m) = model {
            args.extend(["--model".to_owned(), m]);
        }
        args.extend(["--output-format", "stream-json", "--verbose"].map(String::from));
        let mcp = request.mcp.as_ref().filter(|m| !m.is_empty());
        let proxy_tools = mcp.map(proxy_tool_names).unwrap_or_default();
        let hide_native = mcp.is_some_and(|m| m.proxy.is_some() && m.intercept_builtins);
        for (key, flag) in [
            ("allowed_tools", "--allowedTools"),
            ("disallowed_tools", "--disallowedTools"),
            ("tools", "--tools"),
        ] {
            if key == "tools" && hide_native {
                // The step intercepts built-ins: none of Claude Code's own tools.
                o.string_list(key)?;
                args.extend([flag.to_owned(), String::new()]);
                continue;
            }
            let mut list = if o.has(key) {
                o.string_list(key)?
            } else {
                Vec::new()
            };
            if key == "allowed_tools" {
                list.extend(proxy_tools.iter().cloned());
            }
            if o.has(key) || !list.is_empty() {
                args.extend([flag.to_owned(), list.join(",")]);
            }
        }
        if let Some(n) = o.uint("max_turns")? {
            args.extend(["--max-turns".to_owned(), n.to_string()]);
        }
        if let Some(m) = o.one_of("permission_mode", PERMISSION_MODES)? {
            args.extend(["--permission-mode".to_owned(), m]);
        }
        if let Some(e) = o.one_of("effort", EFFORTS)? {
            args.extend(["--effort".to_owned(), e]);
        }
        if let Some(m) = o.string("fallback_model")? {
            args.extend(["--fallback-model".to_owned(), m]);
        }
        if let Some(usd) = o.number_in("max_budget_usd", 0.0, f64::MAX)? {
            args.extend(["--max-budget-usd".to_owned(), usd.to_string()]);
        }
        if let Some(s) = o.string("append_system_prompt")? {
            args.extend(["--append-system-prompt".to_owned(), s]);
        }
        for d in o.string_list("add_dirs")? {
            args.extend(["--add-dir".to_owned(), d]);
        }
        if let Some(s) = o.string("settings")? {
            args.extend(["--settings".to_owned(), s]);
        }
        if o.flag("dangerously_skip_permissions")? {
            args.push("--dangerously-skip-permissions".to_owned());
        }
        if let Some(id) = resume_id(request) {
            args.extend(["-r".to_owned(), id.to_owned()]);
        } else if let Some(sys) = system_prompt(request) {
            args.extend(["--system-prompt".to_owned(), sys]);
        }
        Ok(args)
    }

    fn hides_native_tools(&self) -> bool {
        true
    }

    /// With MCP servers to declare: a private `--mcp-config` wrapper in the CLI's temp dir
    /// (removed when the call ends), `--strict-mcp-config` when the proxy intercepts
    /// built-ins (the user's other servers do not start; `--tools ""` from [`Claude::argv`]
    /// hides the native tools), and the proxy's tools allowed by name.
    fn invocation(
        &self,
        request: &AgentRequest,
        env: &std::collections::BTreeMap<String, String>,
    ) -> Result<Invocation, AwfError> {
        let mut args = self.argv(request)?;
        let Some(att) = mcp::attachment(request) else {
            return Ok(Invocation {
                args,
                ..Invocation::default()
            });
        };
        let servers = mcp::servers(att, MCP_PROXY_NAME);
        let mut cleanup = Cleanup::default();
        let file = mcp::private_file(
            "claude",
            &mcp::temp_dir(request, env),
            ("awf-claude-mcp-", ".json"),
            mcp_wrapper(&servers).to_string().as_bytes(),
            &mut cleanup,
        )?;
        if att.proxy.is_some() && att.intercept_builtins {
            args.push("--strict-mcp-config".to_owned());
        }
        args.extend(["--mcp-config".to_owned(), file.display().to_string()]);
        Ok(Invocation {
            args,
            cleanup,
            ..Invocation::default()
        })
    }

    fn parser(&self, _request: &AgentRequest) -> State {
        State::default()
    }

    fn adjust(&self, mut parsed: Parsed, request: &AgentRequest, _stdout: &str) -> Parsed {
        if !super::display_json(request) {
            parsed.response = None;
        }
        parsed
    }
}

/// `mcp__awf-proxy__<Tool>` for each tool of the proxy (none without one).
fn proxy_tool_names(mcp: &McpAttachment) -> Vec<String> {
    if mcp.proxy.is_none() {
        return Vec::new();
    }
    mcp.proxy_tools
        .iter()
        .map(|t| format!("mcp__{MCP_PROXY_NAME}__{t}"))
        .collect()
}

/// One `mcpServers` entry of Claude Code's configuration.
fn server_entry(s: &McpServer) -> Value {
    let env: Map<String, Value> = s
        .env
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    json!({"type": "stdio", "command": s.command, "args": s.args, "env": env})
}

/// The `--mcp-config` file: `{"mcpServers": {"awf-proxy": …, <editor servers>…}}`, from
/// [`mcp::servers`] (an editor server named like the proxy is already left out).
fn mcp_wrapper(servers: &[McpServer]) -> Value {
    let servers: Map<String, Value> = servers
        .iter()
        .map(|s| (s.name.clone(), server_entry(s)))
        .collect();
    json!({"mcpServers": servers})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::test_support::*;
    use awf_domain::error::ErrorCode;
    use serde_json::json;

    #[test]
    fn single_argv() {
        let r = req(
            "say hi",
            json!({"model": "sonnet", "allowed_tools": ["Bash", "Read"], "dangerously_skip_permissions": true}),
        );
        assert_eq!(
            Claude.argv(&r).unwrap(),
            [
                "-p",
                "say hi",
                "--model",
                "sonnet",
                "--output-format",
                "stream-json",
                "--verbose",
                "--allowedTools",
                "Bash,Read",
                "--dangerously-skip-permissions"
            ]
        );
        assert_eq!(
            Claude.argv(&req("x", json!({}))).unwrap(),
            ["-p", "x", "--output-format", "stream-json", "--verbose"]
        );
    }

    #[test]
    fn system_prompt_is_passed_unless_resuming() {
        let r = with_system(
            req("x", json!({"allowed_tools": "Bash(git:*)"})),
            "be brief",
        );
        assert_eq!(
            Claude.argv(&r).unwrap(),
            [
                "-p",
                "x",
                "--output-format",
                "stream-json",
                "--verbose",
                "--allowedTools",
                "Bash(git:*)",
                "--system-prompt",
                "be brief"
            ]
        );
        assert_eq!(
            Claude
                .argv(&fresh_session(r.clone()))
                .unwrap()
                .last()
                .unwrap(),
            "be brief"
        );
        // Issue 8: a resumed turn does not send the system prompt again.
        assert_eq!(
            Claude.argv(&resuming(r, "abc")).unwrap(),
            [
                "-p",
                "x",
                "--output-format",
                "stream-json",
                "--verbose",
                "--allowedTools",
                "Bash(git:*)",
                "-r",
                "abc"
            ]
        );
    }

    #[test]
    fn every_documented_option_reaches_the_cli() {
        every_option_reaches_argv(
            &Claude,
            &[
                ("model", json!("opus")),
                ("allowed_tools", json!(["Read", "Grep"])),
                ("disallowed_tools", json!("Bash")),
                ("tools", json!(["Read"])),
                ("max_turns", json!(3)),
                ("permission_mode", json!("plan")),
                ("effort", json!("high")),
                ("fallback_model", json!("haiku")),
                ("max_budget_usd", json!("0.5")),
                ("append_system_prompt", json!("be terse")),
                ("add_dirs", json!(["/tmp/a", "/tmp/b"])),
                ("settings", json!("{}")),
                ("dangerously_skip_permissions", json!(true)),
            ],
        );
        let r = req(
            "x",
            json!({"disallowedTools": ["Bash", "Write"], "maxTurns": "2", "permission_mode": "acceptEdits", "add_dirs": "/a, /b"}),
        );
        assert_eq!(
            Claude.argv(&r).unwrap()[5..],
            [
                "--disallowedTools",
                "Bash,Write",
                "--max-turns",
                "2",
                "--permission-mode",
                "acceptEdits",
                "--add-dir",
                "/a",
                "--add-dir",
                "/b"
            ]
        );
        let e = Claude
            .argv(&req("x", json!({"permission_mode": "yolo"})))
            .unwrap_err();
        assert_eq!(
            e.message(),
            "claude option `permission_mode` is invalid: expected one of acceptEdits, auto, bypassPermissions, default, dontAsk, plan, got \"yolo\""
        );
    }

    fn server(name: &str, command: &str) -> McpServer {
        McpServer {
            name: name.into(),
            command: command.into(),
            args: vec!["mcp-serve".into(), "--config".into(), "/tmp/p.json".into()],
            env: vec![("K".into(), "v".into())],
        }
    }

    fn with_proxy(mut r: AgentRequest, intercept: bool, extra: Vec<McpServer>) -> AgentRequest {
        r.mcp = Some(McpAttachment {
            proxy: Some(server(MCP_PROXY_NAME, "/usr/bin/awf")),
            proxy_tools: vec!["Bash".into(), "Read".into()],
            intercept_builtins: intercept,
            extra,
        });
        r
    }

    #[test]
    fn an_intercepting_proxy_hides_the_native_tools_and_allows_its_own() {
        let r = with_proxy(
            req(
                "x",
                json!({"allowed_tools": "Bash(git:*)", "tools": ["Read"]}),
            ),
            true,
            vec![],
        );
        assert_eq!(
            Claude.argv(&r).unwrap(),
            [
                "-p",
                "x",
                "--output-format",
                "stream-json",
                "--verbose",
                "--allowedTools",
                "Bash(git:*),mcp__awf-proxy__Bash,mcp__awf-proxy__Read",
                "--tools",
                ""
            ]
        );
        // Without intercepting, the CLI keeps its tools (and the step's `tools`), and the
        // proxy's are allowed beside them.
        let r = with_proxy(req("x", json!({"tools": ["Read"]})), false, vec![]);
        assert_eq!(
            Claude.argv(&r).unwrap()[5..],
            [
                "--allowedTools",
                "mcp__awf-proxy__Bash,mcp__awf-proxy__Read",
                "--tools",
                "Read"
            ]
        );
        // Editor servers alone change nothing in the argv besides --mcp-config.
        let mut r = req("x", json!({}));
        r.mcp = Some(McpAttachment {
            extra: vec![server("editor", "/bin/ed")],
            ..McpAttachment::default()
        });
        assert_eq!(
            Claude.argv(&r).unwrap(),
            ["-p", "x", "--output-format", "stream-json", "--verbose"]
        );
        assert!(Claude.hides_native_tools());
    }

    #[test]
    fn the_mcp_config_wrapper_is_private_holds_proxy_and_editor_servers_and_goes_on_drop() {
        // The step's own TMPDIR (not the machine's /tmp, which other awf runs sweep).
        let tmp = tempfile::tempdir().unwrap();
        let mut r = with_proxy(
            req("x", json!({})),
            true,
            vec![
                server("editor", "/bin/ed"),
                server("awf-proxy", "/bin/evil"),
                server("awf-proxy-0123456789abcdef", "/bin/evil"),
            ],
        );
        r.env = vec![("TMPDIR".into(), tmp.path().display().to_string())];
        let setup = Claude.invocation(&r, &Default::default()).unwrap();
        let n = setup.args.len();
        assert_eq!(
            setup.args[n - 3..n - 1],
            ["--strict-mcp-config", "--mcp-config"]
        );
        let file = std::path::PathBuf::from(&setup.args[n - 1]);
        assert_eq!(file.parent(), Some(tmp.path()));
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&file).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(
            v,
            json!({"mcpServers": {
                "awf-proxy": {"type": "stdio", "command": "/usr/bin/awf",
                    "args": ["mcp-serve", "--config", "/tmp/p.json"], "env": {"K": "v"}},
                "editor": {"type": "stdio", "command": "/bin/ed",
                    "args": ["mcp-serve", "--config", "/tmp/p.json"], "env": {"K": "v"}}
            }})
        );
        drop(setup);
        assert!(!file.exists());
        // Not intercepting: the user's other MCP servers stay (no --strict-mcp-config).
        let r = with_proxy(req("x", json!({})), false, vec![]);
        let setup = Claude.invocation(&r, &Default::default()).unwrap();
        let n = setup.args.len();
        assert_eq!(setup.args[n - 2], "--mcp-config");
        assert!(!setup.args.iter().any(|a| a == "--strict-mcp-config"));
        // Nothing to declare: the argv alone and no file at all.
        let r = req("x", json!({}));
        let setup = Claude.invocation(&r, &Default::default()).unwrap();
        assert_eq!(setup.args, Claude.argv(&r).unwrap());
        assert!(setup.cleanup.paths().is_empty());
    }

    #[test]
    fn model_is_validated() {
        for ok in ["opus", "haiku", "claude-sonnet-4-5"] {
            assert!(Claude.argv(&req("x", json!({"model": ok}))).is_ok(), "{ok}");
        }
        let e = Claude
            .argv(&req("x", json!({"model": "gpt-4o"})))
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserAgentInvalidOption);
        assert_eq!(
            e.message(),
            "claude option `model` is invalid: expected sonnet, opus, haiku or a name starting with claude-, got \"gpt-4o\""
        );
        let e = Claude
            .argv(&req("x", json!({"dangerously_skip_permissions": "yes"})))
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserAgentInvalidOption);
    }
}
