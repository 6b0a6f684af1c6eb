use std::collections::BTreeMap;

use awf_domain::error::AwfError;
use awf_domain::error::ErrorCode;
use awf_domain::ports::agent::AgentRequest;
use awf_domain::ports::agent::McpServer;
use serde_json::Map;
use serde_json::Value;
use serde_json::json;

use crate::cli::CliAgent;
use crate::cli::Invocation;
use crate::cli::prompt_with_system;
use crate::cli::resume_id;
use crate::mcp;
use crate::options::Opts;
use crate::parse::Parsed;
use crate::parse::json_object;
use crate::parse::opencode::State;

/// OpenCode (`opencode`).
///
/// argv: `run <prompt> --format json [--model M] [--dangerously-skip-permissions]
/// [--framework F] [--verbose] [--output DIR] [-s <session id>]`; the system prompt is
/// prepended unless resuming. Options: `model`, `dangerously_skip_permissions`, `framework`,
/// `verbose` (bool), `output_dir` (string), `agent` (→ `--agent`), `variant` (→ `--variant`),
/// `files` (→ one `-f F` each). Response: the whole stdout as a JSON object, only
/// with display format json. Unlike AWF, a session without an id starts fresh instead of
/// `-c` (continue the *last* session, which may belong to someone else).
///
/// MCP servers ([`AgentRequest::mcp`]): opencode 1.18.33 merges the JSON of
/// `OPENCODE_CONFIG_CONTENT` over its other configuration (global, `OPENCODE_CONFIG`, the
/// project's `opencode.json`), so the servers go there and no file is written: `mcp.<name>` =
/// `{"type": "local", "command": [command, args…], "enabled": true, "environment": {…}}`
/// (the proxy as `awf-proxy-<16 hex>`; the model sees `<server>_<tool>`). A value the user
/// already set in `OPENCODE_CONFIG_CONTENT` is kept, the servers merged into it. With
/// `intercept_builtins`: `tools` = `{"*": false, <each native tool>: false, "<server>_*":
/// true}` (opencode then offers the model only the MCP tools: verified).
///
/// Source: spec/workflow.md §5.2 "opencode"; agents-offline.md §4.1, §4.5; mcp.md §3.3.
#[derive(Debug, Default, Clone, Copy)]
pub struct OpenCode;

/// opencode's own tools (1.18.33 offers the first ten; the others exist in other versions),
/// each switched off by name when a step intercepts built-ins, in case a project config
/// switches one on by name over the `"*": false` pattern.
const NATIVE_TOOLS: &[&str] = &[
    "bash",
    "edit",
    "glob",
    "grep",
    "read",
    "skill",
    "task",
    "todowrite",
    "webfetch",
    "write",
    "list",
    "patch",
    "multiedit",
    "todoread",
    "websearch",
    "codesearch",
    "lsp",
];

/// The `OPENCODE_CONFIG_CONTENT` of one call: `current` (the user's, if any) with the
/// servers merged in (see [`OpenCode`]).
fn config_content(
    current: Option<&str>,
    servers: &[McpServer],
    intercept: bool,
) -> Result<String, AwfError> {
    let mut cfg = match current.map(str::trim).filter(|c| !c.is_empty()) {
        None => Map::new(),
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => m,
            Ok(_) | Err(_) => {
                return Err(AwfError::new(
                    ErrorCode::ExecutionAgentFailed,
                    "opencode: OPENCODE_CONFIG_CONTENT is not a JSON object, so the step's MCP servers cannot be added to it",
                )
                .with_detail("provider", "opencode")
                .with_hint("Fix OPENCODE_CONFIG_CONTENT (opencode itself refuses it too)"));
            }
        },
    };
    let mut declared = match cfg.remove("mcp") {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    for s in servers {
        let mut command = vec![Value::String(s.command.clone())];
        command.extend(s.args.iter().cloned().map(Value::String));
        let mut entry = Map::new();
        entry.insert("type".into(), json!("local"));
        entry.insert("command".into(), Value::Array(command));
        entry.insert("enabled".into(), Value::Bool(true));
        if !s.env.is_empty() {
            entry.insert("environment".into(), Value::Object(mcp::env_object(&s.env)));
        }
        declared.insert(s.name.clone(), Value::Object(entry));
    }
    cfg.insert("mcp".into(), Value::Object(declared));
    if intercept {
        let mut tools = match cfg.remove("tools") {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        tools.insert("*".into(), Value::Bool(false));
        for t in NATIVE_TOOLS {
            tools.insert((*t).to_owned(), Value::Bool(false));
        }
        for s in servers {
            tools.insert(format!("{}_*", s.name), Value::Bool(true));
        }
        cfg.insert("tools".into(), Value::Object(tools));
    }
    Ok(Value::Object(cfg).to_string())
}

impl CliAgent for OpenCode {
    type Parser = State;

    fn name(&self) -> &'static str {
        "opencode"
    }

    fn binary(&self) -> &'static str {
        "opencode"
    }

    fn install_hint(&self) -> &'static str {
        "Install OpenCode: npm install -g opencode-ai"
    }

    fn options(&self) -> &'static [&'static str] {
        &[
            "model",
            "dangerously_skip_permissions",
            "framework",
            "verbose",
            "output_dir",
            "agent",
            "variant",
            "files",
        ]
    }

    fn argv(&self, request: &AgentRequest) -> Result<Vec<String>, AwfError> {
        let o = Opts::new("opencode", &request.options);
        let model = o.string("model")?;
        let skip = o.flag("dangerously_skip_permissions")?;
        let framework = o.string("framework")?;
        let verbose = o.flag("verbose")?;
        let output_dir = match request.options.get("output_dir") {
            Some(v) if !v.is_string() && !v.is_null() => {
                return Err(o.invalid("output_dir", "expected a string"));
            }
            _ => o.string("output_dir")?,
        };

        let mut args = vec![
            "run".to_owned(),
            prompt_with_system(request),
            "--format".to_owned(),
            "json".to_owned(),
        ];
        if let Some(m) = model {
            args.extend(["--model".to_owned(), m]);
        }
        if skip {
            args.push("--dangerously-skip-permissions".to_owned());
        }
        if let Some(f) = framework {
            args.extend(["--framework".to_owned(), f]);
        }
        if verbose {
            args.push("--verbose".to_owned());
        }
        if let Some(d) = output_dir {
            args.extend(["--output".to_owned(), d]);
        }
        if let Some(a) = o.string("agent")? {
            args.extend(["--agent".to_owned(), a]);
        }
        if let Some(v) = o.string("variant")? {
            args.extend(["--variant".to_owned(), v]);
        }
        for f in o.string_list("files")? {
            args.extend(["-f".to_owned(), f]);
        }
        if let Some(id) = resume_id(request) {
            args.extend(["-s".to_owned(), id.to_owned()]);
        }
        Ok(args)
    }

    fn invocation(
        &self,
        request: &AgentRequest,
        env: &BTreeMap<String, String>,
    ) -> Result<Invocation, AwfError> {
        let args = self.argv(request)?;
        let Some(att) = mcp::attachment(request) else {
            return Ok(Invocation {
                args,
                ..Invocation::default()
            });
        };
        let intercept = att.intercept_builtins && att.proxy.is_some();
        let servers = mcp::servers(att, &mcp::proxy_name_with_id());
        let current = mcp::env_var(request, env, "OPENCODE_CONFIG_CONTENT");
        let content = config_content(current.as_deref(), &servers, intercept)?;
        Ok(Invocation {
            args,
            env: vec![("OPENCODE_CONFIG_CONTENT".to_owned(), content)],
            ..Invocation::default()
        })
    }

    fn hides_native_tools(&self) -> bool {
        true
    }

    fn parser(&self, _request: &AgentRequest) -> State {
        State::default()
    }

    fn adjust(&self, mut parsed: Parsed, request: &AgentRequest, stdout: &str) -> Parsed {
        parsed.response = if super::display_json(request) {
            json_object(stdout)
        } else {
            None
        };
        parsed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::test_support::*;
    use awf_domain::error::ErrorCode;
    use serde_json::json;

    #[test]
    fn argv_single_and_resume() {
        let r = req(
            "say hi",
            json!({"model": "mock/mock-model", "dangerously_skip_permissions": true, "verbose": true, "output_dir": "out"}),
        );
        assert_eq!(
            OpenCode.argv(&r).unwrap(),
            [
                "run",
                "say hi",
                "--format",
                "json",
                "--model",
                "mock/mock-model",
                "--dangerously-skip-permissions",
                "--verbose",
                "--output",
                "out"
            ]
        );
        let r = with_system(req("say hi", json!({})), "SYS");
        assert_eq!(
            OpenCode.argv(&r).unwrap(),
            ["run", "SYS\n\nsay hi", "--format", "json"]
        );
        assert_eq!(
            OpenCode.argv(&resuming(r, "ses_1")).unwrap(),
            ["run", "say hi", "--format", "json", "-s", "ses_1"]
        );
    }

    fn mcp_request(intercept: bool, env: &[(&str, &str)]) -> AgentRequest {
        use crate::mcp::test_support::*;
        let mut r = req("hi", json!({}));
        r.mcp = Some(proxied(
            intercept,
            vec![server("files", "/bin/fs", &[("T", "1")])],
        ));
        r.env = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        r
    }

    fn content(inv: &Invocation) -> Value {
        let [(k, v)] = &inv.env[..] else {
            panic!("{:?}", inv.env)
        };
        assert_eq!(k, "OPENCODE_CONFIG_CONTENT");
        serde_json::from_str(v).unwrap()
    }

    fn proxy_name(cfg: &Value) -> String {
        cfg["mcp"]
            .as_object()
            .unwrap()
            .keys()
            .find(|n| n.starts_with("awf-proxy-"))
            .unwrap()
            .clone()
    }

    #[test]
    fn servers_go_into_the_inline_config_and_nothing_is_written() {
        let inv = OpenCode
            .invocation(&mcp_request(false, &[]), &BTreeMap::new())
            .unwrap();
        assert!(inv.cleanup.paths().is_empty());
        assert_eq!(inv.args, ["run", "hi", "--format", "json"]);
        let cfg = content(&inv);
        let proxy = proxy_name(&cfg);
        assert_eq!(proxy.len(), "awf-proxy-".len() + 16);
        assert_eq!(
            cfg,
            json!({"mcp": {
                &proxy: {"type": "local", "command": ["/opt/awf/bin/awf", "mcp-serve", "--config", "/tmp/p.json"], "enabled": true},
                "files": {"type": "local", "command": ["/bin/fs", "--stdio"], "enabled": true, "environment": {"T": "1"}}
            }})
        );
    }

    #[test]
    fn intercepting_switches_the_native_tools_off() {
        let inv = OpenCode
            .invocation(&mcp_request(true, &[]), &BTreeMap::new())
            .unwrap();
        let cfg = content(&inv);
        let proxy = proxy_name(&cfg);
        let tools = cfg["tools"].as_object().unwrap();
        assert_eq!(tools["*"], false);
        for t in [
            "bash", "read", "write", "edit", "glob", "grep", "webfetch", "task",
        ] {
            assert_eq!(tools[t], false, "{t}");
        }
        assert_eq!(tools[&format!("{proxy}_*")], true);
        assert_eq!(tools["files_*"], true);
    }

    #[test]
    fn the_users_inline_config_is_kept() {
        let mut process = BTreeMap::new();
        process.insert(
            "OPENCODE_CONFIG_CONTENT".to_owned(),
            r#"{"model": "m/x", "mcp": {"git": {"type": "local", "command": ["git-mcp"]}}, "tools": {"bash": true}}"#.to_owned(),
        );
        let inv = OpenCode
            .invocation(&mcp_request(true, &[]), &process)
            .unwrap();
        let cfg = content(&inv);
        assert_eq!(cfg["model"], "m/x");
        assert_eq!(cfg["mcp"]["git"]["command"], json!(["git-mcp"]));
        assert_eq!(cfg["mcp"].as_object().unwrap().len(), 3);
        assert_eq!(cfg["tools"]["bash"], false, "intercepting wins");
        // The request's own value wins over the process's, and a broken one is an error.
        let inv = OpenCode
            .invocation(
                &mcp_request(
                    false,
                    &[("OPENCODE_CONFIG_CONTENT", r#"{"share": "disabled"}"#)],
                ),
                &process,
            )
            .unwrap();
        let cfg = content(&inv);
        assert_eq!(cfg["share"], "disabled");
        assert!(cfg.get("model").is_none());
        let e = OpenCode
            .invocation(
                &mcp_request(false, &[("OPENCODE_CONFIG_CONTENT", "[1]")]),
                &process,
            )
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::ExecutionAgentFailed);
        assert!(e.message().contains("not a JSON object"), "{e}");
    }

    #[test]
    fn options_are_validated() {
        let e = OpenCode.argv(&req("x", json!({"verbose": 1}))).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserAgentInvalidOption);
        let e = OpenCode
            .argv(&req("x", json!({"output_dir": 3})))
            .unwrap_err();
        assert_eq!(
            e.message(),
            "opencode option `output_dir` is invalid: expected a string"
        );
    }

    #[test]
    fn every_documented_option_reaches_the_cli() {
        every_option_reaches_argv(
            &OpenCode,
            &[
                ("model", json!("anthropic/claude-sonnet-4")),
                ("dangerously_skip_permissions", json!(true)),
                ("framework", json!("react")),
                ("verbose", json!(true)),
                ("output_dir", json!("out")),
                ("agent", json!("build")),
                ("variant", json!("high")),
                ("files", json!(["a.txt"])),
            ],
        );
    }
}
