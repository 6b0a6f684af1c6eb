//! Shared pieces of the per-provider MCP injection (shared/spec/mcp.md §3.3, §3.6): which
//! servers a call declares, the per-call names, the "MCP tools only" prompt, private temp
//! files and directories, and the guard that removes them when the call ends (cancelled or
//! not: it is dropped with the call's future).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::path::PathBuf;

use awf_domain::error::AwfError;
use awf_domain::error::ErrorCode;
use awf_domain::ports::agent::AgentRequest;
use awf_domain::ports::agent::MCP_ONLY_PROMPT;
use awf_domain::ports::agent::MCP_PROXY_NAME;
use awf_domain::ports::agent::McpAttachment;
use awf_domain::ports::agent::McpServer;

use crate::cli::resume_id;

/// The request's MCP servers, when it has any to declare.
pub(crate) fn attachment(request: &AgentRequest) -> Option<&McpAttachment> {
    request.mcp.as_ref().filter(|m| !m.is_empty())
}

/// The servers one call declares, in order: the proxy first (under `proxy_name`), then the
/// editor's servers. An editor server with a reserved name is dropped (the proxy is never
/// replaced); of two editor servers with one name the later wins.
pub(crate) fn servers(att: &McpAttachment, proxy_name: &str) -> Vec<McpServer> {
    let mut out: Vec<McpServer> = Vec::new();
    if let Some(p) = &att.proxy {
        out.push(McpServer {
            name: proxy_name.to_owned(),
            ..p.clone()
        });
    }
    for s in &att.extra {
        if awf_domain::ports::agent::is_reserved_mcp_name(&s.name) || s.name == proxy_name {
            tracing::warn!(
                server = %s.name,
                "an editor MCP server may not use awf's reserved proxy name; it is left out"
            );
            continue;
        }
        if let Some(i) = out.iter().position(|o| o.name == s.name) {
            out[i] = s.clone();
        } else {
            out.push(s.clone());
        }
    }
    out
}

/// 16 lower-case hex digits, different on every call (per-process random seed, clock, pid
/// and a counter): the `awf-proxy-<id>` suffix and temp names. Not for secrets.
pub(crate) fn random_hex() -> String {
    use std::hash::BuildHasher;
    use std::hash::Hasher;
    use std::sync::atomic::AtomicU64;
    use std::sync::atomic::Ordering;
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(d.as_nanos());
    }
    format!("{:016x}", h.finish())
}

/// `awf-proxy-<16 hex>`: the proxy's name for CLIs that keep settings across runs (gemini,
/// opencode), so concurrent calls never share an entry (mcp.md §3.4).
pub(crate) fn proxy_name_with_id() -> String {
    format!("{MCP_PROXY_NAME}-{}", random_hex())
}

/// The request with [`MCP_ONLY_PROMPT`] in front of its system prompt (the system prompt is
/// that sentence alone when there was none); when the call resumes a session (the CLI does
/// not get the system prompt again) the prompt itself gets it.
pub(crate) fn mcp_only(request: &AgentRequest) -> AgentRequest {
    let mut r = request.clone();
    if resume_id(request).is_some() {
        r.prompt = format!("{MCP_ONLY_PROMPT}{}", request.prompt);
        return r;
    }
    let sys = crate::cli::system_prompt(request);
    r.system_prompt = Some(match sys {
        Some(s) => format!("{MCP_ONLY_PROMPT}{s}"),
        None => MCP_ONLY_PROMPT.trim_end().to_owned(),
    });
    r
}

/// A variable as the CLI will see it: the request's override (last one wins), else the
/// process environment's.
pub(crate) fn env_var(
    request: &AgentRequest,
    process: &BTreeMap<String, String>,
    key: &str,
) -> Option<String> {
    request
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .or_else(|| process.get(key).cloned())
}

/// The temp directory the CLI uses: its `TMPDIR`, else the system's.
pub(crate) fn temp_dir(request: &AgentRequest, process: &BTreeMap<String, String>) -> PathBuf {
    env_var(request, process, "TMPDIR")
        .filter(|t| !t.is_empty())
        .map_or_else(std::env::temp_dir, PathBuf::from)
}

/// Paths one call created, removed (recursively, never following a symlink out) when the
/// guard is dropped: at the end of the call, on an error, on a cancel, or when the call's
/// future is dropped mid-run.
#[derive(Debug, Default)]
pub struct Cleanup {
    paths: Vec<PathBuf>,
}

impl Cleanup {
    /// Removes `path` (a file or a directory tree) when the guard drops.
    pub(crate) fn add(&mut self, path: PathBuf) {
        self.paths.push(path);
    }

    /// The paths it will remove, in creation order.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in self.paths.iter().rev() {
            let res = match std::fs::symlink_metadata(p) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
                Ok(_) => std::fs::remove_file(p),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = res {
                tracing::warn!(path = %p.display(), error = %e, "could not remove an MCP injection file");
            }
        }
    }
}

/// A `SYSTEM.IO.WRITE_FAILED` error of `provider` about `path`.
pub(crate) fn write_error(provider: &str, path: &Path, e: &std::io::Error) -> AwfError {
    AwfError::new(
        ErrorCode::SystemIoWriteFailed,
        format!(
            "{provider}: could not write the MCP configuration {}: {e}",
            path.display()
        ),
    )
    .with_detail("provider", provider)
    .with_hint("Check that the temp directory (TMPDIR) exists and is writable")
}

/// Prefixes of the per-call temp files and directories the providers create in `$TMPDIR`
/// (claude's and copilot's MCP configs, gemini's overlay home, vibe's home). Each name goes on
/// `<prefix><pid>-<16 hex>[suffix]`, `<pid>` the creating awf's process id, so that a later
/// awf can remove what a killed one left behind (`awf run`'s start-up sweep).
pub const TEMP_PREFIXES: &[&str] = &[
    "awf-claude-mcp-",
    "awf-copilot-mcp-",
    "awf-gemini-",
    "awf-vibe-",
];

/// `<prefix><pid>-<16 hex><suffix>`: a per-call temp name carrying this process's id.
fn temp_name(prefix: &str, suffix: &str) -> String {
    format!("{prefix}{}-{}{suffix}", std::process::id(), random_hex())
}

/// Creates a new private directory (mode 0700) `<base>/<prefix><pid>-<16 hex>` and
/// registers it with `cleanup`.
///
/// # Errors
/// `SYSTEM.IO.WRITE_FAILED`.
pub(crate) fn private_dir(
    provider: &str,
    base: &Path,
    prefix: &str,
    cleanup: &mut Cleanup,
) -> Result<PathBuf, AwfError> {
    use std::os::unix::fs::DirBuilderExt;
    let mut last = None;
    for _ in 0..8 {
        let dir = base.join(temp_name(prefix, ""));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {
                cleanup.add(dir.clone());
                return Ok(dir);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some((dir, e)),
            Err(e) => return Err(write_error(provider, &dir, &e)),
        }
    }
    let (dir, e) = last.unwrap_or_else(|| (base.to_path_buf(), std::io::Error::other("no name")));
    Err(write_error(provider, &dir, &e))
}

/// Writes `bytes` to a new file `path` (mode 0600; an existing file is an error).
///
/// # Errors
/// `SYSTEM.IO.WRITE_FAILED`.
pub(crate) fn write_private(provider: &str, path: &Path, bytes: &[u8]) -> Result<(), AwfError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
        .map_err(|e| write_error(provider, path, &e))
}

/// Writes `bytes` to a new private file `<base>/<prefix><pid>-<16 hex><suffix>` (mode 0600),
/// registered with `cleanup`; gives its path.
///
/// # Errors
/// `SYSTEM.IO.WRITE_FAILED`.
pub(crate) fn private_file(
    provider: &str,
    base: &Path,
    name: (&str, &str),
    bytes: &[u8],
    cleanup: &mut Cleanup,
) -> Result<PathBuf, AwfError> {
    let path = base.join(temp_name(name.0, name.1));
    write_private(provider, &path, bytes)?;
    cleanup.add(path.clone());
    Ok(path)
}

/// `env` as a JSON object (`{"K": "v"}`; a repeated name keeps its last value).
pub(crate) fn env_object(env: &[(String, String)]) -> serde_json::Map<String, serde_json::Value> {
    env.iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect()
}

/// `s` as a TOML basic string (`"…"`): `"` and `\\` escaped, control characters as
/// `\\uXXXX` (TOML 1.0 §String), so any path or value survives (a `'` included).
pub(crate) fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A TOML array of basic strings (`["a", "b"]`).
pub(crate) fn toml_array(items: &[String]) -> String {
    let inner: Vec<String> = items.iter().map(|s| toml_string(s)).collect();
    format!("[{}]", inner.join(", "))
}

/// A TOML inline table of strings (`{"K" = "v"}`; keys quoted, so any name works).
pub(crate) fn toml_table(env: &[(String, String)]) -> String {
    let inner: Vec<String> = env
        .iter()
        .map(|(k, v)| format!("{} = {}", toml_string(k), toml_string(v)))
        .collect();
    format!("{{{}}}", inner.join(", "))
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    /// An attachment with a proxy (`awf mcp-serve --config <cfg>`) and `extra` servers.
    pub fn proxied(intercept: bool, extra: Vec<McpServer>) -> McpAttachment {
        McpAttachment {
            proxy: Some(McpServer {
                name: MCP_PROXY_NAME.into(),
                command: "/opt/awf/bin/awf".into(),
                args: vec!["mcp-serve".into(), "--config".into(), "/tmp/p.json".into()],
                env: vec![],
            }),
            proxy_tools: ["Bash", "Edit", "Glob", "Grep", "Read", "Write"]
                .map(String::from)
                .to_vec(),
            intercept_builtins: intercept,
            extra,
        }
    }

    /// A stdio server `name` running `command`.
    pub fn server(name: &str, command: &str, env: &[(&str, &str)]) -> McpServer {
        McpServer {
            name: name.into(),
            command: command.into(),
            args: vec!["--stdio".into()],
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;

    #[test]
    fn editor_servers_follow_the_proxy_and_never_replace_it() {
        let att = proxied(
            true,
            vec![
                server("awf-proxy", "/evil", &[]),
                server("awf-proxy-0123", "/evil", &[]),
                server("files", "/a", &[]),
                server("files", "/b", &[]),
                server("git", "/g", &[]),
            ],
        );
        let s = servers(&att, "awf-proxy-x");
        let names: Vec<&str> = s.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["awf-proxy-x", "files", "git"]);
        assert_eq!(s[0].command, "/opt/awf/bin/awf");
        assert_eq!(s[1].command, "/b", "the later editor entry wins");
        let no_proxy = McpAttachment {
            extra: vec![server("git", "/g", &[])],
            ..McpAttachment::default()
        };
        assert_eq!(servers(&no_proxy, "awf-proxy").len(), 1);
    }

    #[test]
    fn toml_strings_escape_what_toml_requires() {
        assert_eq!(toml_string("/it's/awf"), r#""/it's/awf""#);
        assert_eq!(toml_string("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(
            toml_string("l1\nl2\t\u{7f}\u{1}"),
            r#""l1\nl2\t\u007F\u0001""#
        );
        assert_eq!(
            toml_array(&["mcp-serve".into(), "x y".into()]),
            r#"["mcp-serve", "x y"]"#
        );
        assert_eq!(
            toml_table(&[("A.B".into(), "v".into())]),
            r#"{"A.B" = "v"}"#
        );
    }

    #[test]
    fn per_call_names_differ() {
        let a = proxy_name_with_id();
        let b = proxy_name_with_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), "awf-proxy-".len() + 16);
        assert!(
            a["awf-proxy-".len()..]
                .bytes()
                .all(|c| c.is_ascii_hexdigit())
        );
    }

    #[test]
    fn the_mcp_only_sentence_goes_first() {
        let r = AgentRequest {
            prompt: "P".into(),
            system_prompt: Some("S".into()),
            ..AgentRequest::default()
        };
        assert_eq!(
            mcp_only(&r).system_prompt.as_deref(),
            Some("Use only MCP tools, never built-in tools. S")
        );
        assert_eq!(mcp_only(&r).prompt, "P");
        let bare = AgentRequest {
            prompt: "P".into(),
            ..AgentRequest::default()
        };
        assert_eq!(
            mcp_only(&bare).system_prompt.as_deref(),
            Some("Use only MCP tools, never built-in tools.")
        );
        let resumed = AgentRequest {
            session: Some(awf_domain::ports::agent::AgentSession {
                session_id: Some("id".into()),
                turns: vec![],
            }),
            ..r
        };
        assert_eq!(
            mcp_only(&resumed).prompt,
            "Use only MCP tools, never built-in tools. P"
        );
    }

    #[test]
    fn cleanup_removes_trees_but_not_what_links_point_to() {
        let base = tempfile::tempdir().unwrap();
        let outside = base.path().join("outside.txt");
        std::fs::write(&outside, "keep").unwrap();
        let mut c = Cleanup::default();
        let dir = private_dir("t", base.path(), "awf-t-", &mut c).unwrap();
        // The name carries the creating process's id (for the start-up sweep).
        let name = dir.file_name().unwrap().to_str().unwrap().to_owned();
        assert!(
            name.starts_with(&format!("awf-t-{}-", std::process::id())),
            "{name}"
        );
        let file = private_file("t", base.path(), ("awf-f-", ".json"), b"{}", &mut c).unwrap();
        let fname = file.file_name().unwrap().to_str().unwrap().to_owned();
        assert!(
            fname.starts_with(&format!("awf-f-{}-", std::process::id()))
                && fname.ends_with(".json"),
            "{fname}"
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        std::os::unix::fs::symlink(&outside, dir.join("link")).unwrap();
        let f = dir.join("f.json");
        write_private("t", &f, b"{}").unwrap();
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(write_private("t", &f, b"{}").is_err(), "never overwrites");
        drop(c);
        assert!(!dir.exists());
        assert!(!file.exists());
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep");
    }

    /// An executor that reports the spec it got, then waits for the cancel.
    struct Blocking(tokio::sync::mpsc::UnboundedSender<awf_domain::ports::exec::CommandSpec>);

    #[async_trait::async_trait]
    impl awf_domain::ports::CommandExecutor for Blocking {
        async fn run(
            &self,
            spec: awf_domain::ports::exec::CommandSpec,
            _on_output: Option<awf_domain::ports::exec::OutputCallback>,
            cancel: tokio_util::sync::CancellationToken,
        ) -> Result<awf_domain::ports::exec::CommandOutput, AwfError> {
            let _ = self.0.send(spec);
            cancel.cancelled().await;
            Ok(awf_domain::ports::exec::CommandOutput {
                exit_code: -1,
                stdout: String::new(),
                stderr: String::new(),
                termination: awf_domain::ports::exec::Termination::Cancelled,
                truncated: false,
                signal: Some(15),
            })
        }
    }

    /// A provider for `agent` over [`Blocking`], with a fake binary on PATH and HOME/TMPDIR
    /// in `d`; gives it, the request to send and the receiver of specs.
    fn blocking<A: crate::cli::CliAgent>(
        agent: A,
        binary: &str,
        d: &Path,
    ) -> (
        crate::cli::CliProvider<A>,
        AgentRequest,
        tokio::sync::mpsc::UnboundedReceiver<awf_domain::ports::exec::CommandSpec>,
    ) {
        use std::os::unix::fs::PermissionsExt;
        for sub in ["bin", "tmp", "home/.gemini"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        let bin = d.join("bin").join(binary);
        std::fs::write(&bin, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut env = BTreeMap::new();
        env.insert("PATH".to_owned(), d.join("bin").display().to_string());
        env.insert("HOME".to_owned(), d.join("home").display().to_string());
        env.insert("TMPDIR".to_owned(), d.join("tmp").display().to_string());
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let provider = crate::cli::CliProvider::new(
            agent,
            std::sync::Arc::new(Blocking(tx)),
            std::sync::Arc::new(env),
        );
        let request = AgentRequest {
            prompt: "hi".into(),
            mcp: Some(proxied(true, vec![])),
            ..AgentRequest::default()
        };
        (provider, request, rx)
    }

    fn temp_entries(d: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(d.join("tmp"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect()
    }

    #[tokio::test]
    async fn a_cancelled_call_removes_what_it_wrote() {
        use awf_domain::ports::AgentProvider;
        let d = tempfile::tempdir().unwrap();
        let (provider, request, mut specs) = blocking(crate::Gemini, "gemini", d.path());
        let cancel = tokio_util::sync::CancellationToken::new();
        let call = tokio::spawn({
            let cancel = cancel.clone();
            async move { provider.execute(request, None, cancel).await }
        });
        let spec = specs.recv().await.unwrap();
        let (_, overlay) = spec
            .env
            .iter()
            .find(|(k, _)| k == "GEMINI_CLI_HOME")
            .unwrap();
        assert!(Path::new(overlay).join(".gemini/settings.json").is_file());
        assert_eq!(temp_entries(d.path()).len(), 1);
        cancel.cancel();
        let err = call.await.unwrap().unwrap_err();
        assert_eq!(err.code(), ErrorCode::ExecutionRunCancelled);
        assert_eq!(temp_entries(d.path()), Vec::<PathBuf>::new());
    }

    #[tokio::test]
    async fn an_abandoned_call_removes_what_it_wrote() {
        use awf_domain::ports::AgentProvider;
        let d = tempfile::tempdir().unwrap();
        let (provider, request, mut specs) = blocking(crate::Copilot, "copilot", d.path());
        let call = tokio::spawn(async move {
            provider
                .execute(request, None, tokio_util::sync::CancellationToken::new())
                .await
        });
        let spec = specs.recv().await.unwrap();
        assert!(
            spec_args(&spec)
                .iter()
                .any(|a| a == "--additional-mcp-config"),
            "{spec:?}"
        );
        assert_eq!(temp_entries(d.path()).len(), 1, "the wrapper file exists");
        // The run is dropped (its task aborted) while the CLI runs: the guard still cleans up.
        call.abort();
        assert!(call.await.unwrap_err().is_cancelled());
        assert_eq!(temp_entries(d.path()), Vec::<PathBuf>::new());
    }

    fn spec_args(spec: &awf_domain::ports::exec::CommandSpec) -> Vec<String> {
        match &spec.program {
            awf_domain::ports::exec::Program::Exec { args, .. } => args.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn env_and_temp_dir_prefer_the_request() {
        let mut process = BTreeMap::new();
        process.insert("TMPDIR".to_owned(), "/proc-tmp".to_owned());
        let mut r = AgentRequest::default();
        assert_eq!(temp_dir(&r, &process), PathBuf::from("/proc-tmp"));
        r.env = vec![
            ("TMPDIR".into(), "/a".into()),
            ("TMPDIR".into(), "/b".into()),
        ];
        assert_eq!(temp_dir(&r, &process), PathBuf::from("/b"));
        assert_eq!(env_var(&r, &process, "NOPE"), None);
    }
}
