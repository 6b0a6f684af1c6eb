//! MCP injection per provider with the REAL codex, gemini and opencode CLIs (pinned by
//! scripts/install-agents.sh) against the scripted LLM (`awf-mock-llm`): each provider is
//! built from `awf_agents` and its `execute` gets an `McpAttachment` whose proxy is the
//! built `awf mcp-serve --config <file>` with an `audit_path`. The mock asks for the proxy's
//! Read in that CLI's naming; the test checks the call reached awf's proxy (a line in the
//! audit file), which tools the model was offered, and that nothing the provider wrote is
//! left (temp files, the user's settings, the working directory), cancelled or not.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use awf_agents::CliAgent;
use awf_agents::CliProvider;
use awf_domain::ErrorCode;
use awf_domain::ports::AgentProvider;
use awf_domain::ports::agent::AgentRequest;
use awf_domain::ports::agent::MCP_PROXY_NAME;
use awf_domain::ports::agent::McpAttachment;
use awf_domain::ports::agent::McpServer;
use awf_mock_llm::MockLlm;
use awf_tests::SANDBOX_MARK;
use awf_tests::Sandbox;
use awf_tests::agent_cli::AgentCli;
use awf_tests::agent_cli::point_at_mock;
use serde_json::Value;
use serde_json::json;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cli {
    Codex,
    Gemini,
    Opencode,
}

fn bin_dir() -> PathBuf {
    let d = awf_tests::workspace_root().join(".cache/npm/node_modules/.bin");
    assert!(
        d.join("codex").exists(),
        "agent CLIs not installed in {}: run scripts/install-agents.sh (scripts/test.sh does)",
        d.display()
    );
    d
}

/// One test's world: a sandbox (HOME, TMPDIR, the workspace), the mock, the proxy config.
struct Rig {
    sb: Sandbox,
    mock: MockLlm,
    cli: Cli,
    ws: PathBuf,
    tmp: PathBuf,
    audit: PathBuf,
    cfg: PathBuf,
    /// The user's configuration files, which must come out of the call unchanged.
    user_files: Vec<PathBuf>,
    env: Vec<(String, String)>,
}

/// The Read tool of awf's proxy as the CLI names it for the model.
fn read_call(cli: Cli, path: &str) -> Value {
    match cli {
        Cli::Codex => {
            json!({"name": "Read", "namespace": "mcp__awf_proxy", "args": {"path": path}})
        }
        Cli::Gemini => json!({"name": "mcp_awf-proxy-*_Read", "args": {"path": path}}),
        Cli::Opencode => json!({"name": "awf-proxy-*_Read", "args": {"path": path}}),
    }
}

fn rig(cli: Cli) -> Rig {
    let sb = Sandbox::new().unwrap();
    let ws = sb.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("notes.txt"), "the secret word is PAPAYA\n").unwrap();
    let ws = std::fs::canonicalize(&ws).unwrap();
    let notes = ws.join("notes.txt").display().to_string();
    let mock = MockLlm::start(json!({
        "rules": [
            {"when_has_tool_result": true, "reply": {"text": "done reading"}},
            {"when_has_tools": true, "reply": {"tool": read_call(cli, &notes)}}
        ],
        "default": {"text": "ok"}
    }));
    let url = mock.url();
    let tmp = sb.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let home = sb.path().join("home");
    let audit = sb.path().join("audit.jsonl");
    let cfg = sb.path().join("proxy.json");
    std::fs::write(
        &cfg,
        json!({"root_dir": ws, "run_id": "run-inject", "step": "ask", "audit_path": audit})
            .to_string(),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), path),
        ("HOME".into(), home.display().to_string()),
        ("TMPDIR".into(), tmp.display().to_string()),
        (SANDBOX_MARK.into(), sb.path().display().to_string()),
    ];
    let which = match cli {
        Cli::Codex => AgentCli::Codex,
        Cli::Gemini => AgentCli::Gemini,
        Cli::Opencode => AgentCli::Opencode,
    };
    let (more, user_files) = point_at_mock(which, &url, &home, &sb.path().join("oc"));
    env.extend(more);
    Rig {
        sb,
        mock,
        cli,
        ws,
        tmp,
        audit,
        cfg,
        user_files,
        env,
    }
}

fn provider_of<A: CliAgent>(agent: A, rig: &Rig) -> Arc<dyn AgentProvider> {
    let mut env: BTreeMap<String, String> = std::env::vars().collect();
    env.extend(rig.env.iter().cloned());
    Arc::new(CliProvider::new(
        agent,
        Arc::new(awf_exec::ProcessExecutor::new()),
        Arc::new(env),
    ))
}

impl Rig {
    fn provider(&self) -> Arc<dyn AgentProvider> {
        match self.cli {
            Cli::Codex => provider_of(awf_agents::Codex, self),
            Cli::Gemini => provider_of(awf_agents::Gemini, self),
            Cli::Opencode => provider_of(awf_agents::OpenCode, self),
        }
    }

    fn attachment(&self, intercept: bool) -> McpAttachment {
        McpAttachment {
            proxy: Some(McpServer {
                name: MCP_PROXY_NAME.into(),
                command: awf_tests::awf_bin().display().to_string(),
                args: vec![
                    "mcp-serve".into(),
                    "--config".into(),
                    self.cfg.display().to_string(),
                ],
                env: vec![],
            }),
            proxy_tools: ["Bash", "Edit", "Glob", "Grep", "Read", "Write"]
                .map(String::from)
                .to_vec(),
            intercept_builtins: intercept,
            extra: vec![],
        }
    }

    fn request(&self, mcp: McpAttachment) -> AgentRequest {
        let mut options = serde_json::Map::new();
        if self.cli == Cli::Gemini {
            options.insert("model".into(), json!("gemini-2.5-flash"));
        }
        AgentRequest {
            prompt: "read the notes".into(),
            system_prompt: Some("You are terse.".into()),
            options,
            dir: Some(self.ws.clone()),
            timeout: Some(Duration::from_secs(180)),
            env: self.env.clone(),
            mcp: Some(mcp),
            ..AgentRequest::default()
        }
    }

    /// Every file under a directory with its bytes.
    fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut out = BTreeMap::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if e.file_type().unwrap().is_dir() {
                    stack.push(p);
                } else {
                    out.insert(p.clone(), std::fs::read(&p).unwrap_or_default());
                }
            }
        }
        out
    }

    fn user_config(&self) -> Vec<Vec<u8>> {
        self.user_files
            .iter()
            .map(|f| std::fs::read(f).unwrap())
            .collect()
    }

    /// What the provider may have left in the temp dir (its files are named `awf-*`).
    fn awf_temp_entries(&self) -> Vec<String> {
        std::fs::read_dir(&self.tmp)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("awf-"))
            .collect()
    }

    fn audit_lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The tool names the first main request offered the model.
    fn offered(&self) -> Vec<String> {
        let reqs = self.mock.model_requests();
        let first = reqs
            .iter()
            .find(|r| r["facts"]["has_tools"] == true)
            .unwrap_or_else(|| panic!("no request offered tools: {reqs:?}"));
        let mut names = Vec::new();
        for t in first["body"]["tools"].as_array().unwrap() {
            if let Some(d) = t["functionDeclarations"].as_array() {
                names.extend(
                    d.iter()
                        .filter_map(|d| d["name"].as_str())
                        .map(String::from),
                );
            } else if let Some(n) = t["function"]["name"].as_str() {
                names.push(n.to_owned());
            } else if let (Some(ns), Some(inner)) = (t["name"].as_str(), t["tools"].as_array()) {
                names.extend(
                    inner
                        .iter()
                        .filter_map(|d| d["name"].as_str())
                        .map(|n| format!("{ns}.{n}")),
                );
            } else if let Some(n) = t["name"].as_str().or(t["type"].as_str()) {
                names.push(n.to_owned());
            }
        }
        names
    }

    /// Waits until no process of this sandbox is left (the CLI and its `mcp-serve`).
    fn no_process_left(&self) {
        awf_tests::wait_for("the CLI and its mcp-serve to exit", || {
            self.sb.processes().is_empty()
        });
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The proxy's Read reached awf, the model got its answer, and nothing is left behind.
fn reads_through_the_proxy(cli: Cli, intercept: bool) {
    let rig = rig(cli);
    let ws_before = Rig::snapshot(&rig.ws);
    let config_before = rig.user_config();
    let provider = rig.provider();
    let resp = runtime()
        .block_on(provider.execute(
            rig.request(rig.attachment(intercept)),
            None,
            CancellationToken::new(),
        ))
        .unwrap_or_else(|e| panic!("{cli:?}: {e}"));
    assert_eq!(resp.output.trim(), "done reading", "{}", resp.raw);
    let audit = rig.audit_lines();
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0]["run_id"], "run-inject");
    assert_eq!(audit[0]["step"], "ask");
    assert_eq!(audit[0]["payload"]["name"], "Read");
    assert!(
        audit[0]["payload"]["output"]
            .as_str()
            .unwrap()
            .contains("PAPAYA"),
        "{audit:?}"
    );
    // What awf's Read returned reached the model.
    let last = rig.mock.model_requests().last().unwrap().to_string();
    assert!(last.contains("PAPAYA"), "{last}");
    let offered = rig.offered();
    let proxy_tools: Vec<&String> = offered
        .iter()
        .filter(|n| n.contains("awf-proxy") || n.contains("awf_proxy"))
        .collect();
    assert_eq!(proxy_tools.len(), 6, "{offered:?}");
    let natives: &[&str] = match cli {
        Cli::Codex => &["exec_command", "view_image", "web_search"],
        Cli::Gemini => &["read_file", "list_directory", "glob", "grep_search"],
        Cli::Opencode => &["bash", "read", "write", "edit", "glob", "grep"],
    };
    for n in natives {
        assert_eq!(
            offered.iter().any(|o| o == n),
            !intercept,
            "native `{n}` offered: {offered:?}"
        );
    }
    if intercept && cli != Cli::Codex {
        assert_eq!(proxy_tools.len(), offered.len(), "{offered:?}");
    }
    if intercept && cli == Cli::Codex {
        let sys = rig.mock.model_requests()[0]["body"].to_string();
        assert!(
            sys.contains("Use only MCP tools, never built-in tools. You are terse."),
            "{sys}"
        );
    }
    // Nothing the provider wrote is left.
    assert_eq!(rig.awf_temp_entries(), Vec::<String>::new());
    assert_eq!(
        rig.user_config(),
        config_before,
        "user configuration edited"
    );
    assert_eq!(
        Rig::snapshot(&rig.ws),
        ws_before,
        "working directory changed"
    );
    rig.no_process_left();
}

/// A call cancelled while the CLI waits for the model leaves nothing behind either.
fn cancel_cleans_up(cli: Cli) {
    let rig = rig(cli);
    rig.mock
        .set_script(json!({"default": {"text": "late", "delay_ms": 60000}}));
    let config_before = rig.user_config();
    let ws_before = Rig::snapshot(&rig.ws);
    let provider = rig.provider();
    let cancel = CancellationToken::new();
    let rt = runtime();
    let call = rt.spawn({
        let cancel = cancel.clone();
        let req = rig.request(rig.attachment(true));
        async move { provider.execute(req, None, cancel).await }
    });
    awf_tests::wait_for("the CLI to ask the model", || {
        !rig.mock.model_requests().is_empty()
    });
    if cli == Cli::Gemini {
        assert_eq!(rig.awf_temp_entries().len(), 1, "the overlay home exists");
    }
    cancel.cancel();
    let err = rt.block_on(call).unwrap().unwrap_err();
    assert_eq!(err.code(), ErrorCode::ExecutionRunCancelled, "{err}");
    assert_eq!(rig.awf_temp_entries(), Vec::<String>::new());
    assert_eq!(
        rig.user_config(),
        config_before,
        "user configuration edited"
    );
    assert_eq!(
        Rig::snapshot(&rig.ws),
        ws_before,
        "working directory changed"
    );
    rig.no_process_left();
}

/// An editor's server (here a second `awf mcp-serve` with its own audit file) reaches the
/// CLI beside the proxy, and the model can call it.
fn editor_servers_reach_the_cli(cli: Cli) {
    let rig = rig(cli);
    let notes = rig.ws.join("notes.txt").display().to_string();
    let editor_audit = rig.sb.path().join("editor-audit.jsonl");
    let editor_cfg = rig.sb.path().join("editor.json");
    std::fs::write(
        &editor_cfg,
        json!({"root_dir": rig.ws, "run_id": "editor", "audit_path": editor_audit}).to_string(),
    )
    .unwrap();
    let call = match cli {
        Cli::Codex => {
            json!({"name": "Read", "namespace": "mcp__editor_files", "args": {"path": notes}})
        }
        Cli::Gemini => json!({"name": "mcp_editor-files_Read", "args": {"path": notes}}),
        Cli::Opencode => json!({"name": "editor-files_Read", "args": {"path": notes}}),
    };
    rig.mock.set_script(json!({
        "rules": [
            {"when_has_tool_result": true, "reply": {"text": "done reading"}},
            {"when_has_tools": true, "reply": {"tool": call}}
        ],
        "default": {"text": "ok"}
    }));
    let mut att = rig.attachment(true);
    att.extra.push(McpServer {
        name: "editor-files".into(),
        command: awf_tests::awf_bin().display().to_string(),
        args: vec![
            "mcp-serve".into(),
            "--config".into(),
            editor_cfg.display().to_string(),
        ],
        env: vec![("EDITOR_MARK".into(), "it's \"quoted\"".into())],
    });
    let resp = runtime()
        .block_on(
            rig.provider()
                .execute(rig.request(att), None, CancellationToken::new()),
        )
        .unwrap_or_else(|e| panic!("{cli:?}: {e}"));
    assert_eq!(resp.output.trim(), "done reading", "{}", resp.raw);
    let lines = std::fs::read_to_string(&editor_audit).unwrap_or_default();
    assert_eq!(
        lines.lines().count(),
        1,
        "the editor's server ran the call: {lines}"
    );
    assert!(lines.contains("\"run_id\":\"editor\""), "{lines}");
    assert!(rig.audit_lines().is_empty(), "not the proxy");
    assert_eq!(rig.awf_temp_entries(), Vec::<String>::new());
    rig.no_process_left();
}

/// A conversation's second turn resumes the first one's session with the proxy attached
/// again (intercepting: codex's extra flags go before `resume`; gemini's sessions live in the
/// user's `.gemini/tmp`, reached through each call's own overlay home).
fn resumes_a_session_with_the_proxy(cli: Cli) {
    let rig = rig(cli);
    rig.mock
        .set_script(json!({"default": {"text": "first answer ALPHA"}}));
    let provider = rig.provider();
    let rt = runtime();
    let mut first = rig.request(rig.attachment(true));
    first.prompt = "remember the word ZEBRA".into();
    first.session = Some(awf_domain::ports::agent::AgentSession::default());
    let resp = rt
        .block_on(provider.execute(first, None, CancellationToken::new()))
        .unwrap_or_else(|e| panic!("{cli:?}: {e}"));
    let session = resp.session.expect("a session");
    assert!(session.session_id.is_some(), "{session:?}");
    assert_eq!(rig.awf_temp_entries(), Vec::<String>::new());
    let mut second = rig.request(rig.attachment(true));
    second.prompt = "what word?".into();
    second.session = Some(session.clone());
    let resp = rt
        .block_on(provider.execute(second, None, CancellationToken::new()))
        .unwrap_or_else(|e| panic!("{cli:?}: {e}"));
    assert_eq!(resp.session.unwrap().session_id, session.session_id);
    let last = rig.mock.model_requests().last().unwrap()["body"].to_string();
    assert!(
        last.contains("ZEBRA") && last.contains("what word?"),
        "{last}"
    );
    assert_eq!(rig.awf_temp_entries(), Vec::<String>::new());
    rig.no_process_left();
}

/// Two gemini calls at once (parallel branches): each has its own overlay home and proxy
/// name, both reach the proxy, and neither leaves anything behind.
#[test]
fn concurrent_gemini_calls_keep_apart() {
    let rig = rig(Cli::Gemini);
    let provider = rig.provider();
    let rt = runtime();
    let calls: Vec<_> = (0..2)
        .map(|_| {
            let p = Arc::clone(&provider);
            let req = rig.request(rig.attachment(true));
            rt.spawn(async move { p.execute(req, None, CancellationToken::new()).await })
        })
        .collect();
    for c in calls {
        let resp = rt.block_on(c).unwrap().unwrap();
        assert_eq!(resp.output.trim(), "done reading", "{}", resp.raw);
    }
    assert_eq!(rig.audit_lines().len(), 2);
    let names: std::collections::BTreeSet<String> = rig
        .mock
        .model_requests()
        .iter()
        .filter_map(|r| {
            r["body"]["tools"][0]["functionDeclarations"][0]["name"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert_eq!(names.len(), 2, "one proxy name per call: {names:?}");
    assert_eq!(rig.awf_temp_entries(), Vec::<String>::new());
    rig.no_process_left();
}

/// Intercepting puts codex in `-s read-only`, as AWF (Go) does: that sandbox confines codex's
/// own tools, not the MCP server it starts, so the proxy's Write still writes.
#[test]
fn codex_read_only_sandbox_leaves_the_proxy_writing() {
    let rig = rig(Cli::Codex);
    let out = rig.ws.join("out.txt").display().to_string();
    rig.mock.set_script(json!({
        "rules": [
            {"when_has_tool_result": true, "reply": {"text": "written"}},
            {"when_has_tools": true, "reply": {"tool": {"name": "Write", "namespace": "mcp__awf_proxy",
                "args": {"path": out, "content": "via the proxy\n"}}}}
        ],
        "default": {"text": "ok"}
    }));
    let req = rig.request(rig.attachment(true));
    let resp = runtime()
        .block_on(rig.provider().execute(req, None, CancellationToken::new()))
        .unwrap();
    assert_eq!(resp.output.trim(), "written", "{}", resp.raw);
    assert_eq!(
        std::fs::read_to_string(rig.ws.join("out.txt")).unwrap(),
        "via the proxy\n"
    );
    assert_eq!(rig.audit_lines()[0]["payload"]["name"], "Write");
    rig.no_process_left();
}

/// The proxy's Bash sees the step's environment and awf's process tag (by which awf finds
/// and stops what a run started), whatever the CLI passes its MCP servers by default.
fn step_env_reaches_the_proxy(cli: Cli) {
    let rig = rig(cli);
    let bash = match cli {
        Cli::Codex => json!({"name": "Bash", "namespace": "mcp__awf_proxy"}),
        Cli::Gemini => json!({"name": "mcp_awf-proxy-*_Bash"}),
        Cli::Opencode => json!({"name": "awf-proxy-*_Bash"}),
    };
    let mut tool = bash;
    tool["args"] =
        json!({"command": format!("echo \"mark=${SANDBOX_MARK} tag=${{AWF_PROCESS_TAG:+set}}\"")});
    rig.mock.set_script(json!({
        "rules": [
            {"when_has_tool_result": true, "reply": {"text": "ran"}},
            {"when_has_tools": true, "reply": {"tool": tool}}
        ],
        "default": {"text": "ok"}
    }));
    let req = rig.request(rig.attachment(true));
    let resp = runtime()
        .block_on(rig.provider().execute(req, None, CancellationToken::new()))
        .unwrap_or_else(|e| panic!("{cli:?}: {e}"));
    assert_eq!(resp.output.trim(), "ran", "{}", resp.raw);
    let audit = rig.audit_lines();
    let out = audit[0]["payload"]["output"].as_str().unwrap();
    assert!(
        out.contains(&format!("mark={} tag=set", rig.sb.path().display())),
        "{out}"
    );
    rig.no_process_left();
}

macro_rules! cli_tests {
    ($($m:ident => $cli:expr),* $(,)?) => {$(
        mod $m {
            #[test] fn reads_through_the_proxy_intercepting() { super::reads_through_the_proxy($cli, true) }
            #[test] fn reads_through_the_proxy_beside_native_tools() { super::reads_through_the_proxy($cli, false) }
            #[test] fn cancel_cleans_up() { super::cancel_cleans_up($cli) }
            #[test] fn editor_servers_reach_the_cli() { super::editor_servers_reach_the_cli($cli) }
            #[test] fn step_env_reaches_the_proxy() { super::step_env_reaches_the_proxy($cli) }
            #[test] fn resumes_a_session_with_the_proxy() { super::resumes_a_session_with_the_proxy($cli) }
        }
    )*};
}

cli_tests! {
    codex => super::Cli::Codex,
    gemini => super::Cli::Gemini,
    opencode => super::Cli::Opencode,
}
