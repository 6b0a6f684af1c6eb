use std::collections::BTreeMap;
use std::path::Path;
use std::path::PathBuf;

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
use crate::mcp::Cleanup;
use crate::options::Opts;
use crate::parse::Parsed;
use crate::parse::gemini::State;
use crate::parse::json_object;

/// Gemini CLI (`gemini`).
///
/// argv: `[--approval-mode=yolo] --output-format stream-json [--model M] [--resume <id>]
/// -p <prompt>`; the system prompt is prepended to the prompt unless resuming. Options:
/// `model` (`gemini-…`), `dangerously_skip_permissions` (→ `--approval-mode=yolo`),
/// `approval_mode` (→ `--approval-mode=M`: `default`, `auto_edit`, `yolo`, `plan`; not
/// together with `dangerously_skip_permissions`), `sandbox` (→ `--sandbox`),
/// `include_directories` (→ `--include-directories a,b`), `extensions` (→ `--extensions a,b`),
/// `policy` (→ one `--policy P` each).
/// Response: the whole stdout as a JSON object, only with display format json.
///
/// MCP servers ([`AgentRequest::mcp`]): not `gemini mcp add` (that writes the user's
/// settings). gemini 0.61.0 reads its user settings from `$GEMINI_CLI_HOME/.gemini`
/// (`$HOME` when unset), so each call gets a private overlay home in the temp dir: its
/// `.gemini/settings.json` is the user's (JSON with comments) plus the servers in
/// `mcpServers` (`{command, args, env, trust: true}`; trusted, so headless mode offers their
/// tools, as `mcp_<server>_<tool>`), and every other entry of the user's `.gemini` (sessions
/// in `tmp/`, `history/`, credentials, trusted folders, extensions) and `~/.agents`,
/// `~/.env` are symlinks to the originals, so sessions resume across calls (`tmp/` and
/// `history/` are created in the user's `.gemini` when missing). The system settings paths
/// (`GEMINI_CLI_SYSTEM_SETTINGS_PATH`) are no use: gemini skips such a file unless it and
/// every directory above it are root-owned and not group- or world-writable (never in
/// `/tmp`). The proxy is `awf-proxy-<16 hex>`; a `tools.core` or `mcp.allowed` list of the
/// user's gets the servers added, `mcp.excluded` loses them. With `intercept_builtins`:
/// `tools.core` is exactly `["mcp_<server>_*", …]` (gemini then registers none of its own
/// tools and its policy denies every other: verified, the model is offered only the MCP
/// tools) and `--allowed-mcp-server-names` lists the declared servers (the user's others do
/// not start). The overlay is removed when the call ends.
///
/// Source: spec/workflow.md §5.2 "gemini"; agents-offline.md §3.6, §3.7; mcp.md §3.3.
#[derive(Debug, Default, Clone, Copy)]
pub struct Gemini;

/// Removes `//` and `/* */` comments outside strings (gemini's settings files allow them).
fn strip_json_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            if c == '\\' {
                if let Some(n) = chars.next() {
                    out.push(n);
                }
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut prev = ' ';
                for n in chars.by_ref() {
                    if prev == '*' && n == '/' {
                        break;
                    }
                    prev = n;
                }
                out.push(' ');
            }
            _ => out.push(c),
        }
    }
    out
}

/// The user's `settings.json` as an object (`{}` when there is none).
fn user_settings(path: &Path) -> Result<Map<String, Value>, AwfError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Map::new()),
        Err(e) => {
            return Err(AwfError::new(
                ErrorCode::SystemIoReadFailed,
                format!("gemini: could not read {}: {e}", path.display()),
            )
            .with_detail("provider", "gemini"));
        }
    };
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(&strip_json_comments(&text)) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) | Err(_) => Err(AwfError::new(
            ErrorCode::ExecutionAgentFailed,
            format!(
                "gemini: {} is not a JSON object, so the step's MCP servers cannot be added to it",
                path.display()
            ),
        )
        .with_detail("provider", "gemini")
        .with_hint("Fix the Gemini CLI settings file (gemini itself refuses it too)")),
    }
}

/// The object at `key` of `m`, taken out (a new one when absent or not an object); put it
/// back with `m.insert(key, Value::Object(..))`.
fn take_object(m: &mut Map<String, Value>, key: &str) -> Map<String, Value> {
    match m.remove(key) {
        Some(Value::Object(o)) => o,
        _ => Map::new(),
    }
}

/// `settings` with the servers declared (see [`Gemini`]).
fn merge_settings(settings: &mut Map<String, Value>, servers: &[McpServer], intercept: bool) {
    let names: Vec<String> = servers.iter().map(|s| s.name.clone()).collect();
    let mut declared = take_object(settings, "mcpServers");
    for s in servers {
        let mut entry = Map::new();
        entry.insert("command".into(), Value::String(s.command.clone()));
        entry.insert("args".into(), json!(s.args));
        if !s.env.is_empty() {
            entry.insert("env".into(), Value::Object(mcp::env_object(&s.env)));
        }
        entry.insert("trust".into(), Value::Bool(true));
        declared.insert(s.name.clone(), Value::Object(entry));
    }
    settings.insert("mcpServers".into(), Value::Object(declared));
    let patterns: Vec<Value> = names
        .iter()
        .map(|n| Value::String(format!("mcp_{n}_*")))
        .collect();
    if intercept {
        let mut tools = take_object(settings, "tools");
        tools.insert("core".into(), Value::Array(patterns));
        settings.insert("tools".into(), Value::Object(tools));
    } else if let Some(Value::Array(core)) =
        settings.get_mut("tools").and_then(|t| t.get_mut("core"))
    {
        core.extend(patterns);
    }
    if let Some(Value::Object(m)) = settings.get_mut("mcp") {
        if let Some(Value::Array(allowed)) = m.get_mut("allowed") {
            allowed.extend(names.iter().cloned().map(Value::String));
        }
        if let Some(Value::Array(excluded)) = m.get_mut("excluded") {
            excluded.retain(|v| v.as_str().is_none_or(|n| !names.iter().any(|x| x == n)));
        }
    }
}

/// Builds the overlay home of one call (see [`Gemini`]); gives its path.
fn overlay_home(
    request: &AgentRequest,
    env: &BTreeMap<String, String>,
    servers: &[McpServer],
    intercept: bool,
    cleanup: &mut Cleanup,
) -> Result<PathBuf, AwfError> {
    let home = mcp::env_var(request, env, "GEMINI_CLI_HOME")
        .filter(|h| !h.is_empty())
        .or_else(|| mcp::env_var(request, env, "HOME").filter(|h| !h.is_empty()))
        .ok_or_else(|| {
            AwfError::new(
                ErrorCode::ExecutionAgentFailed,
                "gemini: neither GEMINI_CLI_HOME nor HOME is set, so the user's settings cannot be found",
            )
            .with_detail("provider", "gemini")
            .with_hint("Set HOME for the agent step (env:)")
        })?;
    let home = PathBuf::from(home);
    let real = home.join(".gemini");
    let mut settings = user_settings(&real.join("settings.json"))?;
    merge_settings(&mut settings, servers, intercept);

    let overlay = mcp::private_dir(
        "gemini",
        &mcp::temp_dir(request, env),
        "awf-gemini-",
        cleanup,
    )?;
    let dot = overlay.join(".gemini");
    std::fs::create_dir(&dot).map_err(|e| mcp::write_error("gemini", &dot, &e))?;
    for d in ["tmp", "history"] {
        if let Err(e) = std::fs::create_dir_all(real.join(d)) {
            tracing::warn!(dir = %real.join(d).display(), error = %e, "gemini: sessions of this call will not be kept");
        }
    }
    let link = |target: &Path, at: &Path| {
        std::os::unix::fs::symlink(target, at).map_err(|e| mcp::write_error("gemini", at, &e))
    };
    if let Ok(entries) = std::fs::read_dir(&real) {
        for e in entries.flatten() {
            let name = e.file_name();
            if name != "settings.json" {
                link(&e.path(), &dot.join(&name))?;
            }
        }
    }
    for name in [".agents", ".env"] {
        let target = home.join(name);
        if std::fs::symlink_metadata(&target).is_ok() {
            link(&target, &overlay.join(name))?;
        }
    }
    let text = serde_json::to_vec_pretty(&Value::Object(settings)).unwrap_or_default();
    mcp::write_private("gemini", &dot.join("settings.json"), &text)?;
    Ok(overlay)
}

impl CliAgent for Gemini {
    type Parser = State;

    fn name(&self) -> &'static str {
        "gemini"
    }

    fn binary(&self) -> &'static str {
        "gemini"
    }

    fn install_hint(&self) -> &'static str {
        "Install the Gemini CLI: npm install -g @google/gemini-cli"
    }

    fn options(&self) -> &'static [&'static str] {
        &[
            "model",
            "dangerously_skip_permissions",
            "approval_mode",
            "sandbox",
            "include_directories",
            "extensions",
            "policy",
        ]
    }

    fn argv(&self, request: &AgentRequest) -> Result<Vec<String>, AwfError> {
        let o = Opts::new("gemini", &request.options);
        let model = o.model(
            |m: &str| m.starts_with("gemini-"),
            "a name starting with gemini-",
        )?;
        let mut args = Vec::new();
        let approval = o.one_of("approval_mode", &["default", "auto_edit", "yolo", "plan"])?;
        let skip = o.flag("dangerously_skip_permissions")?;
        match (approval, skip) {
            (Some(m), true) if m != "yolo" => {
                return Err(o.invalid(
                    "approval_mode",
                    format!("{m:?} conflicts with dangerously_skip_permissions (yolo)"),
                ));
            }
            (Some(m), _) => args.push(format!("--approval-mode={m}")),
            (None, true) => args.push("--approval-mode=yolo".to_owned()),
            (None, false) => {}
        }
        args.extend(["--output-format", "stream-json"].map(String::from));
        if let Some(m) = model {
            args.extend(["--model".to_owned(), m]);
        }
        if o.flag("sandbox")? {
            args.push("--sandbox".to_owned());
        }
        for (key, flag) in [
            ("include_directories", "--include-directories"),
            ("extensions", "--extensions"),
        ] {
            let list = o.string_list(key)?;
            if !list.is_empty() {
                args.extend([flag.to_owned(), list.join(",")]);
            }
        }
        for p in o.string_list("policy")? {
            args.extend(["--policy".to_owned(), p]);
        }
        if let Some(id) = resume_id(request) {
            args.extend(["--resume".to_owned(), id.to_owned()]);
        }
        args.extend(["-p".to_owned(), prompt_with_system(request)]);
        Ok(args)
    }

    fn invocation(
        &self,
        request: &AgentRequest,
        env: &BTreeMap<String, String>,
    ) -> Result<Invocation, AwfError> {
        let mut args = self.argv(request)?;
        let Some(att) = mcp::attachment(request) else {
            return Ok(Invocation {
                args,
                ..Invocation::default()
            });
        };
        let intercept = att.intercept_builtins && att.proxy.is_some();
        let servers = mcp::servers(att, &mcp::proxy_name_with_id());
        let mut cleanup = Cleanup::default();
        let overlay = overlay_home(request, env, &servers, intercept, &mut cleanup)?;
        if intercept {
            // Before the trailing `-p <prompt>`.
            let at = args.len().saturating_sub(2);
            let flags = servers
                .iter()
                .flat_map(|s| ["--allowed-mcp-server-names".to_owned(), s.name.clone()]);
            args.splice(at..at, flags);
        }
        Ok(Invocation {
            args,
            env: vec![(
                "GEMINI_CLI_HOME".to_owned(),
                overlay.to_string_lossy().into_owned(),
            )],
            cleanup,
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
    fn argv_single_fresh_and_resume() {
        let r = req(
            "say hi",
            json!({"model": "gemini-2.5-flash", "dangerously_skip_permissions": true}),
        );
        assert_eq!(
            Gemini.argv(&r).unwrap(),
            [
                "--approval-mode=yolo",
                "--output-format",
                "stream-json",
                "--model",
                "gemini-2.5-flash",
                "-p",
                "say hi"
            ]
        );
        let r = with_system(req("say hi", json!({})), "SYS");
        assert_eq!(
            Gemini.argv(&r).unwrap(),
            ["--output-format", "stream-json", "-p", "SYS\n\nsay hi"]
        );
        assert_eq!(
            Gemini.argv(&resuming(r, "babf")).unwrap(),
            [
                "--output-format",
                "stream-json",
                "--resume",
                "babf",
                "-p",
                "say hi"
            ]
        );
    }

    /// A user HOME with gemini settings (comments, an `mcp.allowed` and a `tools.core` list),
    /// credentials and `~/.env`; and a temp dir.
    fn user_home(settings: &str) -> (tempfile::TempDir, BTreeMap<String, String>) {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().join("home");
        std::fs::create_dir_all(home.join(".gemini")).unwrap();
        std::fs::write(home.join(".gemini/settings.json"), settings).unwrap();
        std::fs::write(home.join(".gemini/oauth_creds.json"), "{}").unwrap();
        std::fs::write(home.join(".env"), "K=v\n").unwrap();
        std::fs::create_dir_all(d.path().join("tmp")).unwrap();
        let mut env = BTreeMap::new();
        env.insert("HOME".to_owned(), home.display().to_string());
        env.insert(
            "TMPDIR".to_owned(),
            d.path().join("tmp").display().to_string(),
        );
        (d, env)
    }

    fn mcp_request(intercept: bool) -> AgentRequest {
        use crate::mcp::test_support::*;
        let mut r = req("hi", json!({"model": "gemini-2.5-flash"}));
        r.mcp = Some(proxied(
            intercept,
            vec![server("files", "/bin/fs", &[("T", "1")])],
        ));
        r
    }

    #[test]
    fn servers_go_into_a_private_overlay_home_removed_at_the_end() {
        let user = "// mine\n{\"security\": {\"auth\": {\"selectedType\": \"gemini-api-key\"}}, /* x */ \"mcp\": {\"allowed\": [\"git\"], \"excluded\": [\"files\"]}, \"tools\": {\"core\": [\"read_file\"]}}\n";
        let (d, env) = user_home(user);
        let home = d.path().join("home");
        let inv = Gemini.invocation(&mcp_request(false), &env).unwrap();
        let [(k, overlay)] = &inv.env[..] else {
            panic!("{:?}", inv.env)
        };
        assert_eq!(k, "GEMINI_CLI_HOME");
        let overlay = PathBuf::from(overlay);
        assert!(overlay.starts_with(d.path().join("tmp")), "{overlay:?}");
        assert_eq!(inv.cleanup.paths(), std::slice::from_ref(&overlay));
        let written: Value = serde_json::from_str(
            &std::fs::read_to_string(overlay.join(".gemini/settings.json")).unwrap(),
        )
        .unwrap();
        let servers = written["mcpServers"].as_object().unwrap();
        let names: Vec<&String> = servers.keys().collect();
        assert_eq!(names.len(), 2);
        let proxy = names.iter().find(|n| n.starts_with("awf-proxy-")).unwrap();
        assert_eq!(proxy.len(), "awf-proxy-".len() + 16);
        assert_eq!(
            servers[proxy.as_str()],
            json!({"command": "/opt/awf/bin/awf", "args": ["mcp-serve", "--config", "/tmp/p.json"], "trust": true})
        );
        assert_eq!(
            servers["files"],
            json!({"command": "/bin/fs", "args": ["--stdio"], "env": {"T": "1"}, "trust": true})
        );
        assert_eq!(
            written["security"]["auth"]["selectedType"],
            "gemini-api-key"
        );
        assert_eq!(written["mcp"]["allowed"], json!(["git", proxy, "files"]));
        assert_eq!(written["mcp"]["excluded"], json!([]));
        assert_eq!(
            written["tools"]["core"],
            json!(["read_file", format!("mcp_{proxy}_*"), "mcp_files_*"])
        );
        // Everything else of the user's .gemini is a link to the original.
        assert_eq!(
            std::fs::read_link(overlay.join(".gemini/oauth_creds.json")).unwrap(),
            home.join(".gemini/oauth_creds.json")
        );
        assert_eq!(
            std::fs::read_link(overlay.join(".env")).unwrap(),
            home.join(".env")
        );
        assert!(
            home.join(".gemini/tmp").is_dir(),
            "sessions are kept in the user's .gemini"
        );
        assert!(
            !inv.args.iter().any(|a| a.starts_with("--allowed-mcp")),
            "{:?}",
            inv.args
        );
        drop(inv);
        assert!(!overlay.exists());
        assert_eq!(
            std::fs::read_to_string(home.join(".gemini/settings.json")).unwrap(),
            user
        );
        assert!(home.join(".gemini/oauth_creds.json").exists());
    }

    #[test]
    fn intercepting_allows_only_the_declared_servers_tools() {
        let (_d, env) = user_home("{}");
        let inv = Gemini.invocation(&mcp_request(true), &env).unwrap();
        let overlay = PathBuf::from(&inv.env[0].1);
        let written: Value = serde_json::from_str(
            &std::fs::read_to_string(overlay.join(".gemini/settings.json")).unwrap(),
        )
        .unwrap();
        let proxy = written["mcpServers"]
            .as_object()
            .unwrap()
            .keys()
            .find(|n| n.starts_with("awf-proxy-"))
            .unwrap()
            .clone();
        assert_eq!(
            written["tools"],
            json!({"core": [format!("mcp_{proxy}_*"), "mcp_files_*"]})
        );
        assert_eq!(
            inv.args,
            [
                "--output-format",
                "stream-json",
                "--model",
                "gemini-2.5-flash",
                "--allowed-mcp-server-names",
                &proxy,
                "--allowed-mcp-server-names",
                "files",
                "-p",
                "hi"
            ]
        );
    }

    #[test]
    fn unreadable_settings_fail_before_anything_is_written() {
        let (d, env) = user_home("{not json");
        let e = Gemini.invocation(&mcp_request(true), &env).unwrap_err();
        assert_eq!(e.code(), ErrorCode::ExecutionAgentFailed);
        assert!(
            e.message().contains("settings.json is not a JSON object"),
            "{e}"
        );
        assert_eq!(std::fs::read_dir(d.path().join("tmp")).unwrap().count(), 0);
        let mut no_home = env.clone();
        no_home.remove("HOME");
        let e = Gemini.invocation(&mcp_request(true), &no_home).unwrap_err();
        assert!(
            e.message().contains("neither GEMINI_CLI_HOME nor HOME"),
            "{e}"
        );
        // GEMINI_CLI_HOME, when set, is where the user's settings are.
        let mut moved = env;
        moved.insert(
            "GEMINI_CLI_HOME".into(),
            d.path().join("nowhere").display().to_string(),
        );
        let inv = Gemini.invocation(&mcp_request(false), &moved).unwrap();
        let written =
            std::fs::read_to_string(PathBuf::from(&inv.env[0].1).join(".gemini/settings.json"))
                .unwrap();
        assert!(!written.contains("selectedType"), "{written}");
    }

    #[test]
    fn comments_are_stripped_outside_strings_only() {
        assert_eq!(
            strip_json_comments("{\"a\": \"x//y /* z */\", // c\n\"b\": /* d */ 1}"),
            "{\"a\": \"x//y /* z */\", \n\"b\":   1}"
        );
        assert_eq!(
            strip_json_comments(r#"{"q": "a\"//b"}"#),
            r#"{"q": "a\"//b"}"#
        );
    }

    #[test]
    fn model_is_validated() {
        let e = Gemini
            .argv(&req("x", json!({"model": "flash"})))
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserAgentInvalidOption);
        assert_eq!(
            e.message(),
            "gemini option `model` is invalid: expected a name starting with gemini-, got \"flash\""
        );
    }

    #[test]
    fn every_documented_option_reaches_the_cli() {
        every_option_reaches_argv(
            &Gemini,
            &[
                ("model", json!("gemini-2.5-pro")),
                ("dangerously_skip_permissions", json!(true)),
                ("approval_mode", json!("auto_edit")),
                ("sandbox", json!(true)),
                ("include_directories", json!(["../lib", "../docs"])),
                ("extensions", json!("a,b")),
                ("policy", json!(["p.toml"])),
            ],
        );
        let e = Gemini
            .argv(&req(
                "x",
                json!({"approval_mode": "plan", "dangerously_skip_permissions": true}),
            ))
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserAgentInvalidOption);
    }
}
