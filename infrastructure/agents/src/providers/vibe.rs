use std::collections::BTreeMap;
use std::path::Path;
use std::path::PathBuf;

use awf_domain::error::AwfError;
use awf_domain::error::ErrorCode;
use awf_domain::ports::agent::AgentRequest;
use awf_domain::ports::agent::MCP_PROXY_NAME;
use awf_domain::ports::agent::McpServer;
use awf_domain::ports::agent::Role;

use crate::cli::CliAgent;
use crate::cli::Invocation;
use crate::cli::history;
use crate::cli::system_prompt;
use crate::mcp;
use crate::mcp::Cleanup;
use crate::options::Opts;
use crate::parse::vibe::Mode;
use crate::parse::vibe::State;

/// Mistral Vibe (`vibe`).
///
/// argv: `--prompt <text> --agent <profile> [--output text|json|streaming] [--max-turns N]
/// [--max-tokens N] [--max-price X] [--workdir D] [--enabled-tools T]… [--add-dir D]…
/// [--trust]`. Profile: `auto-approve` with `dangerously_skip_permissions`, else
/// `agent_profile`, else `default`. vibe has no session ids: in a session the prompt becomes
/// a transcript of every turn (`System|User|Assistant: …`) ending with `User: <prompt>`;
/// outside one the system prompt is prepended.
///
/// MCP servers ([`AgentRequest::mcp`]), as AWF (Go) does: a private temp `VIBE_HOME`
/// (`$TMPDIR/awf-vibe-<pid>-<16 hex>`, removed when the call ends) holding copies of the user's
/// `config.toml` and `.env` (from `$VIBE_HOME`, else `~/.vibe`) with one `[[mcp_servers]]`
/// table per server appended (`name`, `transport = "stdio"`, `command`, `args`, `env`).
/// vibe names MCP tools `<server>_<tool>`: with `intercept_builtins`, or when the step
/// lists `enabled_tools` itself, `--enabled-tools` also allows `awf-proxy_<Tool>` for each
/// proxy tool and `<server>_*` (vibe takes globs there) for each editor server; the
/// allowlist leaves vibe's own tools out when intercepting. Not run against a real vibe here
/// (the CLI is not installed in the test environment): argv and files only.
///
/// Source: spec/workflow.md §5.2 "mistral_vibe"; mcp.md §3.3.
#[derive(Debug, Default, Clone, Copy)]
pub struct MistralVibe;

/// The `[[mcp_servers]]` tables declaring `servers`.
fn mcp_tables(servers: &[McpServer]) -> String {
    let mut out =
        String::from("\n# MCP servers of one awf step (this copy is removed when it ends)\n");
    for s in servers {
        out.push_str("\n[[mcp_servers]]\n");
        out.push_str(&format!("name = {}\n", mcp::toml_string(&s.name)));
        out.push_str("transport = \"stdio\"\n");
        out.push_str(&format!("command = {}\n", mcp::toml_string(&s.command)));
        out.push_str(&format!("args = {}\n", mcp::toml_array(&s.args)));
        if !s.env.is_empty() {
            out.push_str(&format!("env = {}\n", mcp::toml_table(&s.env)));
        }
    }
    out
}

/// Copies the user's vibe configuration into a new private home with `servers` added;
/// gives its path.
fn vibe_home(
    request: &AgentRequest,
    env: &BTreeMap<String, String>,
    servers: &[McpServer],
    cleanup: &mut Cleanup,
) -> Result<PathBuf, AwfError> {
    let user = mcp::env_var(request, env, "VIBE_HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            mcp::env_var(request, env, "HOME")
                .filter(|h| !h.is_empty())
                .map(|h| Path::new(&h).join(".vibe"))
        });
    let read = |name: &str| -> Result<Option<Vec<u8>>, AwfError> {
        let Some(dir) = &user else { return Ok(None) };
        let path = dir.join(name);
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(AwfError::new(
                ErrorCode::SystemIoReadFailed,
                format!("mistral_vibe: could not read {}: {e}", path.display()),
            )
            .with_detail("provider", "mistral_vibe")),
        }
    };
    let mut config = read("config.toml")?.unwrap_or_default();
    let dotenv = read(".env")?;
    if !config.is_empty() && !config.ends_with(b"\n") {
        config.push(b'\n');
    }
    config.extend_from_slice(mcp_tables(servers).as_bytes());
    let home = mcp::private_dir(
        "mistral_vibe",
        &mcp::temp_dir(request, env),
        "awf-vibe-",
        cleanup,
    )?;
    mcp::write_private("mistral_vibe", &home.join("config.toml"), &config)?;
    if let Some(d) = dotenv {
        mcp::write_private("mistral_vibe", &home.join(".env"), &d)?;
    }
    Ok(home)
}

const TRANSCRIPT_HEAD: &str = "Continue the conversation using the transcript below. Answer the final user message.\n\nTranscript:\n";

/// The text passed as `--prompt`.
fn vibe_prompt(request: &AgentRequest) -> String {
    if request.session.is_none() {
        return match system_prompt(request) {
            Some(sys) => format!("{sys}\n\n{}", request.prompt),
            None => request.prompt.clone(),
        };
    }
    let turns = history(request);
    if turns.is_empty() {
        return request.prompt.clone();
    }
    let mut text = TRANSCRIPT_HEAD.to_owned();
    for t in &turns {
        let content = t.content.trim();
        if content.is_empty() {
            continue;
        }
        let label = match t.role {
            Role::System => "System",
            Role::User => "User",
            Role::Assistant => "Assistant",
        };
        text.push_str(label);
        text.push_str(": ");
        text.push_str(content);
        text.push('\n');
    }
    text.push_str("User: ");
    text.push_str(&request.prompt);
    text
}

fn check_path(o: &Opts<'_>, key: &str, p: &str) -> Result<(), AwfError> {
    if p.trim().is_empty() {
        return Err(o.invalid(key, "path cannot be empty"));
    }
    if p.split('/').any(|seg| seg == "..") {
        return Err(o.invalid(key, format!("path must not contain `..`, got {p:?}")));
    }
    Ok(())
}

fn mode(request: &AgentRequest) -> Mode {
    match request
        .options
        .get("output_format")
        .and_then(|v| v.as_str())
    {
        Some("json") => Mode::Json,
        Some("streaming") => Mode::Streaming,
        _ => Mode::Text,
    }
}

impl CliAgent for MistralVibe {
    type Parser = State;

    fn name(&self) -> &'static str {
        "mistral_vibe"
    }

    fn binary(&self) -> &'static str {
        "vibe"
    }

    fn install_hint(&self) -> &'static str {
        "Install Mistral Vibe: uv tool install mistral-vibe (or pip install mistral-vibe)"
    }

    fn resumes_by_session_id(&self) -> bool {
        false
    }

    fn options(&self) -> &'static [&'static str] {
        &[
            "dangerously_skip_permissions",
            "agent_profile",
            "max_turns",
            "max_tokens",
            "max_price",
            "workdir",
            "enabled_tools",
            "add_dirs",
            "trust",
        ]
    }

    fn argv(&self, request: &AgentRequest) -> Result<Vec<String>, AwfError> {
        let o = Opts::new("mistral_vibe", &request.options);
        let skip = o.flag("dangerously_skip_permissions")?;
        let profile = o.string("agent_profile")?;
        let profile = match (skip, profile) {
            (true, Some(p)) if p != "auto-approve" => {
                return Err(o.invalid(
                    "agent_profile",
                    format!("conflicts with dangerously_skip_permissions: expected auto-approve, got {p:?}"),
                ));
            }
            (true, _) => "auto-approve".to_owned(),
            (false, Some(p)) => p,
            (false, None) => "default".to_owned(),
        };
        let output = o.one_of("output_format", &["text", "json", "streaming"])?;
        let positive = |key: &str| -> Result<Option<u64>, AwfError> {
            match o.uint(key)? {
                Some(0) => Err(o.invalid(key, "expected a positive integer, got 0")),
                other => Ok(other),
            }
        };
        let max_turns = positive("max_turns")?;
        let max_tokens = positive("max_tokens")?;
        let max_price = match o.number("max_price")? {
            Some(p) if p < 0.0 => {
                return Err(o.invalid(
                    "max_price",
                    format!("expected a non-negative number, got {p}"),
                ));
            }
            other => other,
        };
        let workdir = o.string("workdir")?;
        if let Some(w) = &workdir {
            check_path(&o, "workdir", w)?;
        }
        let tools = o.string_list("enabled_tools")?;
        let dirs = o.string_list("add_dirs")?;
        for d in &dirs {
            check_path(&o, "add_dirs", d)?;
        }
        let trust = match request.options.get("trust") {
            None | Some(serde_json::Value::Null) => false,
            Some(serde_json::Value::Bool(b)) => *b,
            Some(_) => return Err(o.invalid("trust", "expected a boolean")),
        };

        let mut args = vec![
            "--prompt".to_owned(),
            vibe_prompt(request),
            "--agent".to_owned(),
            profile,
        ];
        if let Some(out) = output {
            args.extend(["--output".to_owned(), out]);
        }
        if let Some(n) = max_turns {
            args.extend(["--max-turns".to_owned(), n.to_string()]);
        }
        if let Some(n) = max_tokens {
            args.extend(["--max-tokens".to_owned(), n.to_string()]);
        }
        if let Some(p) = max_price {
            args.extend(["--max-price".to_owned(), p.to_string()]);
        }
        if let Some(w) = workdir {
            args.extend(["--workdir".to_owned(), w]);
        }
        for t in tools {
            args.extend(["--enabled-tools".to_owned(), t]);
        }
        for d in dirs {
            args.extend(["--add-dir".to_owned(), d]);
        }
        if trust {
            args.push("--trust".to_owned());
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
        let servers = mcp::servers(att, MCP_PROXY_NAME);
        let o = Opts::new("mistral_vibe", &request.options);
        let mut tools = o.string_list("enabled_tools")?;
        let mut call = request.clone();
        if intercept || !tools.is_empty() {
            for s in &servers {
                if att.proxy.is_some() && s.name == MCP_PROXY_NAME {
                    tools.extend(
                        att.proxy_tools
                            .iter()
                            .map(|t| format!("{MCP_PROXY_NAME}_{t}")),
                    );
                } else {
                    tools.push(format!("{}_*", s.name));
                }
            }
            call.options
                .insert("enabled_tools".into(), serde_json::json!(tools));
        }
        let args = self.argv(&call)?;
        let mut cleanup = Cleanup::default();
        let home = vibe_home(request, env, &servers, &mut cleanup)?;
        Ok(Invocation {
            args,
            env: vec![("VIBE_HOME".to_owned(), home.to_string_lossy().into_owned())],
            cleanup,
        })
    }

    fn hides_native_tools(&self) -> bool {
        true
    }

    fn parser(&self, request: &AgentRequest) -> State {
        State::new(mode(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::test_support::*;
    use awf_domain::error::ErrorCode;
    use awf_domain::ports::agent::AgentSession;
    use awf_domain::ports::agent::Turn;
    use serde_json::json;

    #[test]
    fn argv_with_every_option() {
        let r = req(
            "do it",
            json!({"output_format": "text", "max_turns": 3, "max_tokens": "100", "max_price": 0.5, "workdir": "src", "enabled_tools": ["bash"], "add_dirs": ["a", "b"], "trust": true, "agent_profile": "plan"}),
        );
        assert_eq!(
            MistralVibe.argv(&r).unwrap(),
            [
                "--prompt",
                "do it",
                "--agent",
                "plan",
                "--output",
                "text",
                "--max-turns",
                "3",
                "--max-tokens",
                "100",
                "--max-price",
                "0.5",
                "--workdir",
                "src",
                "--enabled-tools",
                "bash",
                "--add-dir",
                "a",
                "--add-dir",
                "b",
                "--trust"
            ]
        );
        let r = with_system(
            req("do it", json!({"dangerously_skip_permissions": true})),
            "SYS",
        );
        assert_eq!(
            MistralVibe.argv(&r).unwrap(),
            ["--prompt", "SYS\n\ndo it", "--agent", "auto-approve"]
        );
    }

    #[test]
    fn session_inlines_the_transcript() {
        let mut r = with_system(req("next?", json!({})), "SYS");
        r.session = Some(AgentSession::default());
        assert_eq!(
            MistralVibe.argv(&r).unwrap()[1],
            format!("{TRANSCRIPT_HEAD}System: SYS\nUser: next?")
        );
        r.session = Some(AgentSession {
            session_id: None,
            turns: vec![
                Turn {
                    role: Role::System,
                    content: "SYS".into(),
                },
                Turn {
                    role: Role::User,
                    content: "remember ZEBRA".into(),
                },
                Turn {
                    role: Role::Assistant,
                    content: " ok \n".into(),
                },
            ],
        });
        assert_eq!(
            MistralVibe.argv(&r).unwrap()[1],
            format!(
                "{TRANSCRIPT_HEAD}System: SYS\nUser: remember ZEBRA\nAssistant: ok\nUser: next?"
            )
        );
    }

    fn mcp_request(intercept: bool, options: serde_json::Value, d: &Path) -> AgentRequest {
        use crate::mcp::test_support::*;
        let mut r = req("do it", options);
        r.mcp = Some(proxied(
            intercept,
            vec![server("files", "/bin/fs", &[("T", "it's")])],
        ));
        r.env = vec![
            ("TMPDIR".into(), d.join("tmp").display().to_string()),
            ("HOME".into(), d.join("home").display().to_string()),
        ];
        r
    }

    fn vibe_dirs(config: Option<&str>) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("tmp")).unwrap();
        std::fs::create_dir_all(d.path().join("home/.vibe")).unwrap();
        if let Some(c) = config {
            std::fs::write(d.path().join("home/.vibe/config.toml"), c).unwrap();
            std::fs::write(d.path().join("home/.vibe/.env"), "MISTRAL_API_KEY=k\n").unwrap();
        }
        d
    }

    #[test]
    fn servers_go_into_a_copy_of_the_users_vibe_home() {
        let d = vibe_dirs(Some("active_model = \"devstral\""));
        let inv = MistralVibe
            .invocation(&mcp_request(false, json!({}), d.path()), &BTreeMap::new())
            .unwrap();
        let [(k, home)] = &inv.env[..] else {
            panic!("{:?}", inv.env)
        };
        assert_eq!(k, "VIBE_HOME");
        let home = PathBuf::from(home);
        assert!(home.starts_with(d.path().join("tmp")));
        assert_eq!(inv.cleanup.paths(), std::slice::from_ref(&home));
        assert_eq!(
            std::fs::read_to_string(home.join("config.toml")).unwrap(),
            "active_model = \"devstral\"\n\n# MCP servers of one awf step (this copy is removed when it ends)\n\n[[mcp_servers]]\nname = \"awf-proxy\"\ntransport = \"stdio\"\ncommand = \"/opt/awf/bin/awf\"\nargs = [\"mcp-serve\", \"--config\", \"/tmp/p.json\"]\n\n[[mcp_servers]]\nname = \"files\"\ntransport = \"stdio\"\ncommand = \"/bin/fs\"\nargs = [\"--stdio\"]\nenv = {\"T\" = \"it's\"}\n"
        );
        assert_eq!(
            std::fs::read_to_string(home.join(".env")).unwrap(),
            "MISTRAL_API_KEY=k\n"
        );
        assert!(
            !inv.args.contains(&"--enabled-tools".to_owned()),
            "all tools stay"
        );
        drop(inv);
        assert!(!home.exists());
        assert_eq!(
            std::fs::read_to_string(d.path().join("home/.vibe/config.toml")).unwrap(),
            "active_model = \"devstral\""
        );
    }

    #[test]
    fn intercepting_enables_only_the_proxy_tools() {
        let d = vibe_dirs(None);
        let inv = MistralVibe
            .invocation(&mcp_request(true, json!({}), d.path()), &BTreeMap::new())
            .unwrap();
        let enabled: Vec<&str> = inv
            .args
            .windows(2)
            .filter(|w| w[0] == "--enabled-tools")
            .map(|w| w[1].as_str())
            .collect();
        assert_eq!(
            enabled,
            [
                "awf-proxy_Bash",
                "awf-proxy_Edit",
                "awf-proxy_Glob",
                "awf-proxy_Grep",
                "awf-proxy_Read",
                "awf-proxy_Write",
                "files_*"
            ]
        );
        // The step's own list keeps its tools and gains the proxy's.
        let inv = MistralVibe
            .invocation(
                &mcp_request(false, json!({"enabled_tools": ["bash"]}), d.path()),
                &BTreeMap::new(),
            )
            .unwrap();
        let n = inv.args.iter().filter(|a| *a == "--enabled-tools").count();
        assert_eq!(n, 8, "{:?}", inv.args);
        assert_eq!(
            inv.args[inv
                .args
                .iter()
                .position(|a| a == "--enabled-tools")
                .unwrap()
                + 1],
            "bash"
        );
        let home = PathBuf::from(&inv.env[0].1);
        assert!(
            std::fs::read_to_string(home.join("config.toml"))
                .unwrap()
                .starts_with("\n# MCP servers")
        );
        assert!(!home.join(".env").exists());
    }

    #[test]
    fn options_are_validated() {
        for (opts, msg) in [
            (
                json!({"dangerously_skip_permissions": true, "agent_profile": "plan"}),
                "mistral_vibe option `agent_profile` is invalid: conflicts with dangerously_skip_permissions: expected auto-approve, got \"plan\"",
            ),
            (
                json!({"output_format": "yaml"}),
                "mistral_vibe option `output_format` is invalid: expected one of text, json, streaming, got \"yaml\"",
            ),
            (
                json!({"max_turns": 0}),
                "mistral_vibe option `max_turns` is invalid: expected a positive integer, got 0",
            ),
            (
                json!({"max_price": -1}),
                "mistral_vibe option `max_price` is invalid: expected a non-negative number, got -1",
            ),
            (
                json!({"workdir": "../x"}),
                "mistral_vibe option `workdir` is invalid: path must not contain `..`, got \"../x\"",
            ),
            (
                json!({"enabled_tools": [1]}),
                "mistral_vibe option `enabled_tools` is invalid: expected a string at index 0, got a number",
            ),
            (
                json!({"trust": "yes"}),
                "mistral_vibe option `trust` is invalid: expected a boolean",
            ),
        ] {
            let e = MistralVibe.argv(&req("x", opts)).unwrap_err();
            assert_eq!(e.code(), ErrorCode::UserAgentInvalidOption);
            assert_eq!(e.message(), msg);
        }
    }

    #[test]
    fn every_documented_option_reaches_the_cli() {
        every_option_reaches_argv(
            &MistralVibe,
            &[
                ("dangerously_skip_permissions", json!(true)),
                ("agent_profile", json!("plan")),
                ("max_turns", json!(2)),
                ("max_tokens", json!(10)),
                ("max_price", json!(1)),
                ("workdir", json!("src")),
                ("enabled_tools", json!(["bash"])),
                ("add_dirs", json!(["a"])),
                ("trust", json!(true)),
            ],
        );
    }
}
