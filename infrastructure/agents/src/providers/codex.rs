use std::collections::BTreeMap;

use awf_domain::error::AwfError;
use awf_domain::ports::agent::AgentRequest;
use awf_domain::ports::agent::MCP_PROXY_NAME;

use crate::cli::CliAgent;
use crate::cli::Invocation;
use crate::cli::prompt_with_system;
use crate::cli::resume_id;
use crate::mcp;
use crate::options::Opts;
use crate::parse::codex::State;

/// OpenAI Codex CLI (`codex`).
///
/// argv: fresh `exec --json <system\n\nprompt> [--model M]
/// [--dangerously-bypass-approvals-and-sandbox]`; resume `exec --json [--model M]
/// [--dangerously-bypass-approvals-and-sandbox] resume <thread id> <prompt>` (exec-level flags
/// go before `resume`, which rejects them after it). Options: `model` (`gpt-…`, `codex-…` or
/// `o<digit>…`), `dangerously_skip_permissions`, `sandbox` → `-s` (`read-only`,
/// `workspace-write`, `danger-full-access`), `profile` → `-p`, `config` (list of `key=value`)
/// → one `-c` each, `add_dirs` → one `--add-dir` each, `output_schema` → `--output-schema`.
///
/// MCP servers ([`AgentRequest::mcp`]): each is declared with `-c` overrides, nothing is
/// written anywhere: `mcp_servers.<name>.command`, `.args`, `.env` (TOML values), and
/// `.default_tools_approval_mode="approve"` (exec's approval policy `never` refuses MCP calls
/// otherwise); the proxy (`awf-proxy`, which codex shows the model as namespace
/// `mcp__awf_proxy`) also gets `.tool_timeout_sec=660`, past Bash's 600 s maximum (codex's
/// default is 60 s). codex 0.171.0 starts an MCP server with only a few variables of its
/// own environment (`HOME`, `PATH`, `TMPDIR`, …: verified), so `.env_vars` forwards awf's
/// process tag (`AWF_PROCESS_TAG`, by which awf finds and stops what a run started) and
/// every variable of the step's environment ([`AgentRequest::env`]), as the other CLIs pass
/// them. `-c` splits its key on dots and takes no quoted keys, so a name outside
/// `[A-Za-z0-9_-]` is declared with `_` in place of the rest. With `intercept_builtins`:
/// `--disable shell_tool --disable unified_exec --disable view_image -c web_search="disabled"`
/// (codex 0.171.0 then offers the model no shell, file or web tool of its own: verified),
/// `-s read-only` as AWF (Go) does unless the step chose a sandbox (it does not confine the
/// MCP server: verified), and the system prompt prefixed with [`MCP_ONLY_PROMPT`].
///
/// Source: spec/workflow.md §5.2 "codex"; agents-offline.md §2.6, §2.7; mcp.md §3.3.
///
/// [`MCP_ONLY_PROMPT`]: awf_domain::ports::agent::MCP_ONLY_PROMPT
#[derive(Debug, Default, Clone, Copy)]
pub struct Codex;

/// How long codex waits for one call of awf's proxy: Bash's maximum timeout (600 s) plus a
/// margin, in seconds.
pub(crate) const PROXY_TOOL_TIMEOUT_SEC: u64 = 660;

/// `name` as a bare TOML key (`[A-Za-z0-9_-]`, else `_`), unique among `taken`.
fn key_name(name: &str, taken: &[String]) -> String {
    let base: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let base = if base.is_empty() {
        "mcp".to_owned()
    } else {
        base
    };
    let mut name = base.clone();
    let mut n = 2;
    while taken.contains(&name) {
        name = format!("{base}_{n}");
        n += 1;
    }
    name
}

/// The variable awf's process executor tags every child with (awf-exec's `TAG_VAR`).
const PROCESS_TAG_VAR: &str = "AWF_PROCESS_TAG";

/// The `-c`/`--disable`/`-s` flags declaring the request's MCP servers (see [`Codex`]).
fn mcp_flags(request: &AgentRequest) -> Result<Vec<String>, AwfError> {
    let Some(att) = mcp::attachment(request) else {
        return Ok(Vec::new());
    };
    let mut flags = Vec::new();
    let mut taken: Vec<String> = Vec::new();
    let mut forwarded = vec![PROCESS_TAG_VAR.to_owned()];
    for (k, _) in &request.env {
        if !forwarded.contains(k) {
            forwarded.push(k.clone());
        }
    }
    let forwarded = mcp::toml_array(&forwarded);
    for s in mcp::servers(att, MCP_PROXY_NAME) {
        let is_proxy = att.proxy.is_some() && s.name == MCP_PROXY_NAME;
        let key = key_name(&s.name, &taken);
        if key != s.name {
            tracing::warn!(server = %s.name, declared = %key, "codex: MCP server renamed to a TOML bare key");
        }
        let mut set = |field: &str, value: String| {
            flags.extend([
                "-c".to_owned(),
                format!("mcp_servers.{key}.{field}={value}"),
            ]);
        };
        set("command", mcp::toml_string(&s.command));
        set("args", mcp::toml_array(&s.args));
        if !s.env.is_empty() {
            set("env", mcp::toml_table(&s.env));
        }
        set("env_vars", forwarded.clone());
        set("default_tools_approval_mode", mcp::toml_string("approve"));
        if is_proxy {
            set("tool_timeout_sec", PROXY_TOOL_TIMEOUT_SEC.to_string());
        }
        taken.push(key);
    }
    if att.intercept_builtins && att.proxy.is_some() {
        for feature in ["shell_tool", "unified_exec", "view_image"] {
            flags.extend(["--disable".to_owned(), feature.to_owned()]);
        }
        flags.extend(["-c".to_owned(), "web_search=\"disabled\"".to_owned()]);
        let o = Opts::new("codex", &request.options);
        if o.string("sandbox")?.is_none() && !o.flag("dangerously_skip_permissions")? {
            flags.extend(["-s".to_owned(), "read-only".to_owned()]);
        }
    }
    Ok(flags)
}

fn valid_model(m: &str) -> bool {
    m.starts_with("gpt-")
        || m.starts_with("codex-")
        || (m.starts_with('o') && m[1..].starts_with(|c: char| c.is_ascii_digit()))
}

impl CliAgent for Codex {
    type Parser = State;

    fn name(&self) -> &'static str {
        "codex"
    }

    fn binary(&self) -> &'static str {
        "codex"
    }

    fn install_hint(&self) -> &'static str {
        "Install the Codex CLI: npm install -g @openai/codex"
    }

    fn options(&self) -> &'static [&'static str] {
        &[
            "model",
            "dangerously_skip_permissions",
            "sandbox",
            "profile",
            "config",
            "add_dirs",
            "output_schema",
        ]
    }

    fn argv(&self, request: &AgentRequest) -> Result<Vec<String>, AwfError> {
        let o = Opts::new("codex", &request.options);
        let model = o.model(valid_model, "a name starting with gpt-, codex- or o<digit>")?;
        let skip = o.flag("dangerously_skip_permissions")?;
        let mut flags = Vec::new();
        if let Some(m) = model {
            flags.extend(["--model".to_owned(), m]);
        }
        if skip {
            flags.push("--dangerously-bypass-approvals-and-sandbox".to_owned());
        }
        if let Some(m) = o.one_of(
            "sandbox",
            &["read-only", "workspace-write", "danger-full-access"],
        )? {
            flags.extend(["-s".to_owned(), m]);
        }
        if let Some(p) = o.string("profile")? {
            flags.extend(["-p".to_owned(), p]);
        }
        for kv in o.string_list("config")? {
            if !kv.contains('=') {
                return Err(o.invalid("config", format!("expected key=value, got {kv:?}")));
            }
            flags.extend(["-c".to_owned(), kv]);
        }
        for d in o.string_list("add_dirs")? {
            flags.extend(["--add-dir".to_owned(), d]);
        }
        if let Some(f) = o.string("output_schema")? {
            flags.extend(["--output-schema".to_owned(), f]);
        }
        // Workflows run in any directory, git repository or not.
        let mut args = vec![
            "exec".to_owned(),
            "--json".to_owned(),
            "--skip-git-repo-check".to_owned(),
        ];
        match resume_id(request) {
            Some(id) => {
                args.extend(flags);
                args.extend(["resume".to_owned(), id.to_owned(), request.prompt.clone()]);
            }
            None => {
                args.push(prompt_with_system(request));
                args.extend(flags);
            }
        }
        Ok(args)
    }

    fn invocation(
        &self,
        request: &AgentRequest,
        _env: &BTreeMap<String, String>,
    ) -> Result<Invocation, AwfError> {
        let intercept =
            mcp::attachment(request).is_some_and(|a| a.intercept_builtins && a.proxy.is_some());
        let mut args = if intercept {
            self.argv(&mcp::mcp_only(request))?
        } else {
            self.argv(request)?
        };
        // After `exec --json --skip-git-repo-check`: before the prompt and before `resume`,
        // which takes no exec-level flag after it.
        let at = args.len().min(3);
        args.splice(at..at, mcp_flags(request)?);
        Ok(Invocation {
            args,
            ..Invocation::default()
        })
    }

    fn hides_native_tools(&self) -> bool {
        true
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
    use serde_json::json;

    #[test]
    fn argv_single_fresh_and_resume() {
        let r = req(
            "say hi",
            json!({"model": "gpt-5", "dangerously_skip_permissions": true}),
        );
        assert_eq!(
            Codex.argv(&r).unwrap(),
            [
                "exec",
                "--json",
                "--skip-git-repo-check",
                "say hi",
                "--model",
                "gpt-5",
                "--dangerously-bypass-approvals-and-sandbox"
            ]
        );
        let r = with_system(req("say hi", json!({})), "SYS");
        assert_eq!(
            Codex.argv(&r).unwrap(),
            ["exec", "--json", "--skip-git-repo-check", "SYS\n\nsay hi"]
        );
        assert_eq!(
            Codex.argv(&fresh_session(r)).unwrap(),
            ["exec", "--json", "--skip-git-repo-check", "SYS\n\nsay hi"]
        );
        let r = resuming(
            with_system(req("again", json!({"model": "o3"})), "SYS"),
            "01a2",
        );
        assert_eq!(
            Codex.argv(&r).unwrap(),
            [
                "exec",
                "--json",
                "--skip-git-repo-check",
                "--model",
                "o3",
                "resume",
                "01a2",
                "again"
            ]
        );
    }

    fn with_mcp(mut r: AgentRequest, att: awf_domain::ports::agent::McpAttachment) -> AgentRequest {
        r.mcp = Some(att);
        r
    }

    fn args(r: &AgentRequest) -> Vec<String> {
        Codex.invocation(r, &BTreeMap::new()).unwrap().args
    }

    #[test]
    fn mcp_servers_are_declared_with_c_overrides() {
        use crate::mcp::test_support::*;
        let att = proxied(
            false,
            vec![
                server("files", "/it's/fs", &[("TOKEN", "a\"b")]),
                server("my.srv", "/bin/x", &[]),
            ],
        );
        let mut r = with_mcp(with_system(req("hi", json!({})), "SYS"), att);
        r.env = vec![
            ("STEP_VAR".into(), "1".into()),
            ("STEP_VAR".into(), "2".into()),
        ];
        let inv = Codex.invocation(&r, &BTreeMap::new()).unwrap();
        assert!(
            inv.env.is_empty() && inv.cleanup.paths().is_empty(),
            "nothing written"
        );
        assert_eq!(
            inv.args,
            [
                "exec",
                "--json",
                "--skip-git-repo-check",
                "-c",
                r#"mcp_servers.awf-proxy.command="/opt/awf/bin/awf""#,
                "-c",
                r#"mcp_servers.awf-proxy.args=["mcp-serve", "--config", "/tmp/p.json"]"#,
                "-c",
                r#"mcp_servers.awf-proxy.env_vars=["AWF_PROCESS_TAG", "STEP_VAR"]"#,
                "-c",
                r#"mcp_servers.awf-proxy.default_tools_approval_mode="approve""#,
                "-c",
                "mcp_servers.awf-proxy.tool_timeout_sec=660",
                "-c",
                r#"mcp_servers.files.command="/it's/fs""#,
                "-c",
                r#"mcp_servers.files.args=["--stdio"]"#,
                "-c",
                r#"mcp_servers.files.env={"TOKEN" = "a\"b"}"#,
                "-c",
                r#"mcp_servers.files.env_vars=["AWF_PROCESS_TAG", "STEP_VAR"]"#,
                "-c",
                r#"mcp_servers.files.default_tools_approval_mode="approve""#,
                "-c",
                r#"mcp_servers.my_srv.command="/bin/x""#,
                "-c",
                r#"mcp_servers.my_srv.args=["--stdio"]"#,
                "-c",
                r#"mcp_servers.my_srv.env_vars=["AWF_PROCESS_TAG", "STEP_VAR"]"#,
                "-c",
                r#"mcp_servers.my_srv.default_tools_approval_mode="approve""#,
                "SYS\n\nhi",
            ]
        );
    }

    #[test]
    fn intercepting_disables_the_native_tools_and_says_so() {
        use crate::mcp::test_support::*;
        let r = with_mcp(
            with_system(req("hi", json!({})), "SYS"),
            proxied(true, vec![]),
        );
        let a = args(&r);
        let tail: Vec<&str> = a[13..].iter().map(String::as_str).collect();
        assert_eq!(
            tail,
            [
                "--disable",
                "shell_tool",
                "--disable",
                "unified_exec",
                "--disable",
                "view_image",
                "-c",
                r#"web_search="disabled""#,
                "-s",
                "read-only",
                "Use only MCP tools, never built-in tools. SYS\n\nhi",
            ]
        );
        // The step's own sandbox choice stands (codex refuses `-s` twice).
        for opts in [
            json!({"sandbox": "workspace-write"}),
            json!({"dangerously_skip_permissions": true}),
        ] {
            let a = args(&with_mcp(req("hi", opts), proxied(true, vec![])));
            assert_eq!(
                a.iter().filter(|x| *x == "-s").count(),
                usize::from(a.contains(&"workspace-write".to_owned())),
                "{a:?}"
            );
            assert!(!a.contains(&"read-only".to_owned()), "{a:?}");
        }
        // Resuming: the flags stay before `resume`, the prompt carries the sentence.
        let a = args(&with_mcp(
            resuming(req("again", json!({})), "t1"),
            proxied(true, vec![]),
        ));
        let at = a.iter().position(|x| x == "resume").unwrap();
        assert!(a[..at].contains(&"--disable".to_owned()));
        assert_eq!(
            a[at..],
            [
                "resume",
                "t1",
                "Use only MCP tools, never built-in tools. again"
            ]
        );
        // No attachment, or an empty one: the plain argv.
        let plain = req("hi", json!({}));
        assert_eq!(args(&plain), Codex.argv(&plain).unwrap());
        let empty = with_mcp(req("hi", json!({})), Default::default());
        assert_eq!(args(&empty), Codex.argv(&plain).unwrap());
    }

    #[test]
    fn model_is_validated() {
        for ok in ["gpt-4.1", "codex-mini-latest", "o3", "o4-mini"] {
            assert!(Codex.argv(&req("x", json!({"model": ok}))).is_ok(), "{ok}");
        }
        for bad in ["sonnet", "omega", "o"] {
            let e = Codex.argv(&req("x", json!({"model": bad}))).unwrap_err();
            assert_eq!(e.code(), ErrorCode::UserAgentInvalidOption, "{bad}");
        }
    }

    #[test]
    fn every_documented_option_reaches_the_cli() {
        every_option_reaches_argv(
            &Codex,
            &[
                ("model", json!("gpt-5")),
                ("dangerously_skip_permissions", json!(true)),
                ("sandbox", json!("read-only")),
                ("profile", json!("ci")),
                ("config", json!(["model_reasoning_effort=high"])),
                ("add_dirs", json!(["/tmp/x"])),
                ("output_schema", json!("schema.json")),
            ],
        );
        let e = Codex
            .argv(&req("x", json!({"config": ["nokey"]})))
            .unwrap_err();
        assert_eq!(
            e.message(),
            "codex option `config` is invalid: expected key=value, got \"nokey\""
        );
    }
}
