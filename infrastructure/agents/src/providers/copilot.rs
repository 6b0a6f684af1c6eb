use std::collections::BTreeMap;

use awf_domain::error::AwfError;
use awf_domain::ports::agent::AgentRequest;
use awf_domain::ports::agent::MCP_PROXY_NAME;
use awf_domain::ports::agent::McpServer;
use serde_json::Map;
use serde_json::Value;
use serde_json::json;

use crate::cli::CliAgent;
use crate::cli::Invocation;
use crate::cli::prompt_with_system;
use crate::cli::resume_id;
use crate::mcp;
use crate::mcp::Cleanup;
use crate::options::Opts;
use crate::parse::copilot::State;

/// GitHub Copilot CLI (`copilot`).
///
/// argv: `[--resume=<id>] -p <prompt> --output-format=json --silent [--model=M]
/// [--mode=interactive|plan|autopilot] [--effort=low|medium|high] [--allow-tool=T]…
/// [--deny-tool=T]… [--allow-all]`; the system prompt is prepended unless resuming. Options:
/// `model`, `mode`, `effort`, `allowed_tools`, `denied_tools` (lists, or comma-separated
/// strings), `allow_all` / `dangerously_skip_permissions` (→ `--allow-all`).
///
/// MCP servers ([`AgentRequest::mcp`]), as AWF (Go) does: a wrapper file
/// `$TMPDIR/awf-copilot-mcp-<pid>-<16 hex>.json` (0600) =
/// `{"mcpServers": {"<name>": {"type": "local", "command", "args", "env", "tools": ["*"]}}}`
/// passed as `--additional-mcp-config @<file>` and removed when the call ends; the proxy
/// (`awf-proxy`) is allowed with `--allow-tool=awf-proxy` unless `--allow-all` is given.
/// With `intercept_builtins`: `--disable-builtin-mcps` and the system prompt prefixed with
/// [`MCP_ONLY_PROMPT`]; copilot has no switch that hides its shell and file tools, so they
/// stay (the engine warns `USER.MCP_PROXY.UNSUPPORTED_PROVIDER`). Not run against a real
/// copilot here (the CLI is not installed in the test environment): argv and files only.
///
/// Source: spec/workflow.md §5.2 "github_copilot"; mcp.md §3.3.
///
/// [`MCP_ONLY_PROMPT`]: awf_domain::ports::agent::MCP_ONLY_PROMPT
#[derive(Debug, Default, Clone, Copy)]
pub struct Copilot;

/// The wrapper file's JSON for `servers`.
fn wrapper(servers: &[McpServer]) -> Value {
    let mut declared = Map::new();
    for s in servers {
        declared.insert(
            s.name.clone(),
            json!({
                "type": "local",
                "command": s.command,
                "args": s.args,
                "env": Value::Object(mcp::env_object(&s.env)),
                "tools": ["*"],
            }),
        );
    }
    json!({ "mcpServers": declared })
}

impl CliAgent for Copilot {
    type Parser = State;

    fn name(&self) -> &'static str {
        "github_copilot"
    }

    fn binary(&self) -> &'static str {
        "copilot"
    }

    fn install_hint(&self) -> &'static str {
        "Install the GitHub Copilot CLI: npm install -g @github/copilot"
    }

    fn options(&self) -> &'static [&'static str] {
        &[
            "model",
            "mode",
            "effort",
            "allowed_tools",
            "denied_tools",
            "allow_all",
            "dangerously_skip_permissions",
        ]
    }

    fn argv(&self, request: &AgentRequest) -> Result<Vec<String>, AwfError> {
        let o = Opts::new("github_copilot", &request.options);
        let model = o.string("model")?;
        let mode = o.one_of("mode", &["interactive", "plan", "autopilot"])?;
        let effort = o.one_of("effort", &["low", "medium", "high"])?;
        let allowed = o.string_list("allowed_tools")?;
        let denied = o.string_list("denied_tools")?;
        let allow_all = o.flag("allow_all")? || o.flag("dangerously_skip_permissions")?;

        let mut args = Vec::new();
        if let Some(id) = resume_id(request) {
            args.push(format!("--resume={id}"));
        }
        args.extend([
            "-p".to_owned(),
            prompt_with_system(request),
            "--output-format=json".to_owned(),
            "--silent".to_owned(),
        ]);
        if let Some(m) = model {
            args.push(format!("--model={m}"));
        }
        if let Some(m) = mode {
            args.push(format!("--mode={m}"));
        }
        if let Some(e) = effort {
            args.push(format!("--effort={e}"));
        }
        args.extend(allowed.iter().map(|t| format!("--allow-tool={t}")));
        args.extend(denied.iter().map(|t| format!("--deny-tool={t}")));
        if allow_all {
            args.push("--allow-all".to_owned());
        }
        Ok(args)
    }

    fn invocation(
        &self,
        request: &AgentRequest,
        env: &BTreeMap<String, String>,
    ) -> Result<Invocation, AwfError> {
        let Some(att) = mcp::attachment(request) else {
            return Ok(Invocation {
                args: self.argv(request)?,
                ..Invocation::default()
            });
        };
        let intercept = att.intercept_builtins && att.proxy.is_some();
        let mut args = if intercept {
            self.argv(&mcp::mcp_only(request))?
        } else {
            self.argv(request)?
        };
        let servers = mcp::servers(att, MCP_PROXY_NAME);
        let mut cleanup = Cleanup::default();
        let file = mcp::private_file(
            "github_copilot",
            &mcp::temp_dir(request, env),
            ("awf-copilot-mcp-", ".json"),
            wrapper(&servers).to_string().as_bytes(),
            &mut cleanup,
        )?;
        args.extend([
            "--additional-mcp-config".to_owned(),
            format!("@{}", file.display()),
        ]);
        if att.proxy.is_some() && !args.iter().any(|a| a == "--allow-all") {
            args.push(format!("--allow-tool={MCP_PROXY_NAME}"));
        }
        if intercept {
            args.push("--disable-builtin-mcps".to_owned());
        }
        Ok(Invocation {
            args,
            cleanup,
            ..Invocation::default()
        })
    }

    fn parser(&self, _request: &AgentRequest) -> State {
        State::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::test_support::*;
    use awf_domain::error::ErrorCode;
    use serde_json::Value;
    use serde_json::json;

    #[test]
    fn argv_single_and_resume() {
        let r = req(
            "fix it",
            json!({"model": "gpt-5", "mode": "plan", "effort": "high", "allowed_tools": ["shell(git)", "write"], "denied_tools": "shell(rm)", "dangerously_skip_permissions": true}),
        );
        assert_eq!(
            Copilot.argv(&r).unwrap(),
            [
                "-p",
                "fix it",
                "--output-format=json",
                "--silent",
                "--model=gpt-5",
                "--mode=plan",
                "--effort=high",
                "--allow-tool=shell(git)",
                "--allow-tool=write",
                "--deny-tool=shell(rm)",
                "--allow-all"
            ]
        );
        let r = with_system(req("fix it", json!({})), "SYS");
        assert_eq!(
            Copilot.argv(&r).unwrap(),
            ["-p", "SYS\n\nfix it", "--output-format=json", "--silent"]
        );
        assert_eq!(
            Copilot.argv(&resuming(r, "s1")).unwrap(),
            [
                "--resume=s1",
                "-p",
                "fix it",
                "--output-format=json",
                "--silent"
            ]
        );
    }

    fn mcp_request(intercept: bool, options: Value, tmp: &std::path::Path) -> AgentRequest {
        use crate::mcp::test_support::*;
        let mut r = with_system(req("fix it", options), "SYS");
        r.mcp = Some(proxied(
            intercept,
            vec![server("files", "/bin/fs", &[("T", "1")])],
        ));
        r.env = vec![("TMPDIR".into(), tmp.display().to_string())];
        r
    }

    #[test]
    fn servers_go_into_a_wrapper_file_removed_at_the_end() {
        let tmp = tempfile::tempdir().unwrap();
        let inv = Copilot
            .invocation(&mcp_request(false, json!({}), tmp.path()), &BTreeMap::new())
            .unwrap();
        let [file] = inv.cleanup.paths() else {
            panic!("{:?}", inv.cleanup.paths())
        };
        assert!(file.starts_with(tmp.path()));
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("awf-copilot-mcp-") && name.ends_with(".json"),
            "{name}"
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(file).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let written: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
        assert_eq!(
            written,
            json!({"mcpServers": {
                "awf-proxy": {"type": "local", "command": "/opt/awf/bin/awf", "args": ["mcp-serve", "--config", "/tmp/p.json"], "env": {}, "tools": ["*"]},
                "files": {"type": "local", "command": "/bin/fs", "args": ["--stdio"], "env": {"T": "1"}, "tools": ["*"]}
            }})
        );
        assert_eq!(
            inv.args,
            [
                "-p",
                "SYS\n\nfix it",
                "--output-format=json",
                "--silent",
                "--additional-mcp-config",
                &format!("@{}", file.display()),
                "--allow-tool=awf-proxy"
            ]
        );
        let file = file.clone();
        drop(inv);
        assert!(!file.exists());
    }

    #[test]
    fn intercepting_disables_the_builtin_mcps_and_says_so() {
        let tmp = tempfile::tempdir().unwrap();
        let inv = Copilot
            .invocation(
                &mcp_request(true, json!({"allow_all": true}), tmp.path()),
                &BTreeMap::new(),
            )
            .unwrap();
        assert_eq!(
            inv.args[1],
            "Use only MCP tools, never built-in tools. SYS\n\nfix it"
        );
        assert!(
            inv.args.contains(&"--disable-builtin-mcps".to_owned()),
            "{:?}",
            inv.args
        );
        assert!(inv.args.contains(&"--allow-all".to_owned()));
        assert!(
            !inv.args.iter().any(|a| a.starts_with("--allow-tool")),
            "--allow-all covers it"
        );
        // A bad option fails before anything is written.
        let e = Copilot
            .invocation(
                &mcp_request(true, json!({"mode": "yolo"}), tmp.path()),
                &BTreeMap::new(),
            )
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserAgentInvalidOption);
        drop(inv);
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }

    #[test]
    fn enums_are_validated() {
        let e = Copilot
            .argv(&req("x", json!({"mode": "yolo"})))
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserAgentInvalidOption);
        assert_eq!(
            e.message(),
            "github_copilot option `mode` is invalid: expected one of interactive, plan, autopilot, got \"yolo\""
        );
        assert!(Copilot.argv(&req("x", json!({"effort": "max"}))).is_err());
    }

    #[test]
    fn every_documented_option_reaches_the_cli() {
        every_option_reaches_argv(
            &Copilot,
            &[
                ("model", json!("gpt-5")),
                ("mode", json!("plan")),
                ("effort", json!("low")),
                ("allowed_tools", json!(["shell"])),
                ("denied_tools", json!("write")),
                ("allow_all", json!(true)),
                ("dangerously_skip_permissions", json!(true)),
            ],
        );
    }
}
