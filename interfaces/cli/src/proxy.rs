//! The tool proxies of agent steps with `mcp_proxy: {enable: true}` (the [`ToolProxies`]
//! port): for a CLI agent, an `awf mcp-serve` its CLI starts from its MCP configuration; for a
//! provider with its own tool loop (`openai_compatible`), the same built-ins in-process.
//!
//! A stdio proxy is two files in the temp dir (`$TMPDIR`), both created `O_EXCL`, mode 0600:
//! `awf-mcp-proxy-<pid>-<uuid>.json` (`<pid>` this awf's process id, for the start-up sweep of
//! [`crate::tmp_sweep`]), the `mcp-serve` config (keys of [`crate::mcp_cmd`]:
//! `intercept_builtins`, `plugin_tools`, `root_dir`, `run_id`, `step`, `audit_path`,
//! `traceparent`, `fs_delegate`), and `awf-mcp-proxy-<pid>-<uuid>.events.jsonl`, its `audit_path`, which the server
//! appends one line per `tools/call` to and [`StdioProxy::take_events`] reads back from where
//! it stopped (complete lines only). Dropping the proxy removes both. No copy of the server is
//! started by awf itself: the agent CLI starts the one it talks to (shared/spec/mcp.md §3.2).
//!
//! Plugin tools: each `plugin_tools` operation must be one the wired [`Operations`] list
//! (`USER.MCP_PROXY.UNKNOWN_PLUGIN` for a plugin with none, `UNKNOWN_OPERATION` for a
//! missing operation); with no operations wired every plugin is unknown. Listed operations are
//! passed to `mcp-serve` in the config; in-process they are served through
//! [`awf_application::OperationTools`], one source `plugin:<name>` per plugin.
//!
//! Source: shared/spec/mcp.md §3.1, §3.2, §3.5; domain/src/ports/tools.rs.

use std::io::Read;
use std::io::Seek;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::event::RunEvent;
use awf_domain::mask::Masker;
use awf_domain::ports::IdGenerator;
use awf_domain::ports::Operations;
use awf_domain::ports::ToolProvider;
use awf_domain::ports::ToolProxies;
use awf_domain::ports::agent::MCP_PROXY_NAME;
use awf_domain::ports::agent::McpServer;
use awf_domain::ports::tools::ProxySpec;
use awf_domain::ports::tools::StdioProxy;
use serde_json::Value;
use serde_json::json;

use crate::tmp_sweep::PROXY_PREFIX;

/// The [`ToolProxies`] of the `awf` binary.
pub struct Proxies {
    /// `awf` itself, symlinks resolved (the program the agent CLI starts); `None`: this
    /// process's executable, found when the first proxy is made (commands that run no agent
    /// step never look).
    exe: Option<PathBuf>,
    /// Where proxy files go (`$TMPDIR`, else `/tmp`).
    tmp_dir: PathBuf,
    /// The operations plugin tools may name; `None`: none.
    operations: Option<Arc<dyn Operations>>,
}

impl Proxies {
    /// Proxies running `exe mcp-serve` (`None`: this process's executable), writing their
    /// files into `tmp_dir`.
    pub fn new(
        exe: Option<PathBuf>,
        tmp_dir: PathBuf,
        operations: Option<Arc<dyn Operations>>,
    ) -> Self {
        Self {
            exe,
            tmp_dir,
            operations,
        }
    }

    /// Proxies of this process: its own executable (`/proc/self/exe`, symlinks resolved) and
    /// the temp dir of its environment (`TMPDIR` when absolute, else `/tmp`).
    pub fn of_process(
        env: &std::collections::BTreeMap<String, String>,
        operations: Option<Arc<dyn Operations>>,
    ) -> Self {
        let tmp_dir = env
            .get("TMPDIR")
            .filter(|t| t.starts_with('/'))
            .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
        Self::new(None, tmp_dir, operations)
    }

    /// The program the agent CLI starts.
    fn exe(&self) -> Result<PathBuf, AwfError> {
        if let Some(e) = &self.exe {
            return Ok(e.clone());
        }
        std::env::current_exe()
            .and_then(std::fs::canonicalize)
            .map_err(|e| {
                AwfError::new(
                    ErrorCode::SystemIoReadFailed,
                    format!("cannot find awf's own executable for the MCP proxy: {e}"),
                )
            })
    }

    /// Checks the spec: something to serve, every plugin operation provided. Returns the
    /// plugin tool names (`<plugin>_<op>`).
    fn check(&self, spec: &ProxySpec) -> Result<Vec<String>, AwfError> {
        if !spec.intercept_builtins && spec.plugin_tools.is_empty() {
            return Err(AwfError::new(
                ErrorCode::UserMcpProxyEmptyProxy,
                "mcp_proxy is enabled with intercept_builtins: false and no plugin_tools, so it serves no tool",
            )
            .with_hint(ErrorCode::UserMcpProxyEmptyProxy.resolution()));
        }
        let listed = self
            .operations
            .as_ref()
            .map(|o| o.list())
            .unwrap_or_default();
        let mut names = Vec::new();
        for p in &spec.plugin_tools {
            if !listed.iter().any(|o| o.plugin == p.plugin) {
                return Err(AwfError::new(
                    ErrorCode::UserMcpProxyUnknownPlugin,
                    format!("unknown plugin \"{}\" in mcp_proxy.plugin_tools", p.plugin),
                )
                .with_hint(ErrorCode::UserMcpProxyUnknownPlugin.resolution()));
            }
            for op in &p.expose {
                if !listed.iter().any(|o| o.plugin == p.plugin && &o.name == op) {
                    return Err(AwfError::new(
                        ErrorCode::UserMcpProxyUnknownOperation,
                        format!(
                            "plugin \"{}\" has no operation \"{op}\" (mcp_proxy.plugin_tools)",
                            p.plugin
                        ),
                    )
                    .with_hint(ErrorCode::UserMcpProxyUnknownOperation.resolution()));
                }
                names.push(format!("{}_{op}", p.plugin));
            }
        }
        Ok(names)
    }

    /// Creates `name` in the temp dir, `O_EXCL`, mode 0600, with `content`.
    fn create(&self, name: &str, content: &[u8]) -> Result<PathBuf, AwfError> {
        let path = self.tmp_dir.join(name);
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| f.write_all(content));
        written.map_err(|e| {
            AwfError::new(
                ErrorCode::SystemIoWriteFailed,
                format!("cannot write the MCP proxy file {}: {e}", path.display()),
            )
            .with_hint("the temp dir ($TMPDIR, else /tmp) must exist and be writable")
        })?;
        Ok(path)
    }
}

/// `p` as text for the config; a path that is not UTF-8 cannot be written into JSON.
fn utf8<'a>(p: &'a Path, what: &str) -> Result<&'a str, AwfError> {
    p.to_str().ok_or_else(|| {
        AwfError::new(
            ErrorCode::UserMcpProxyInvalidConfig,
            format!("the MCP proxy's {what} {} is not valid UTF-8", p.display()),
        )
        .with_hint("run the step in a directory whose path is valid UTF-8")
    })
}

/// The `mcp-serve` config of `spec` (keys of [`crate::mcp_cmd`]).
fn config_json(spec: &ProxySpec, audit_path: &str) -> Result<Value, AwfError> {
    let root = utf8(&spec.root_dir, "root_dir")?;
    let plugins: Vec<Value> = spec
        .plugin_tools
        .iter()
        .map(|p| json!({"plugin": p.plugin, "expose": p.expose}))
        .collect();
    let mut cfg = json!({
        "intercept_builtins": spec.intercept_builtins,
        "plugin_tools": plugins,
        "root_dir": root,
        "run_id": spec.run_id,
        "step": spec.step,
        "audit_path": audit_path,
    });
    if let (Some(tp), Some(m)) = (&spec.traceparent, cfg.as_object_mut()) {
        m.insert("traceparent".into(), tp.clone().into());
    }
    if let Some(sock) = &spec.fs_delegate {
        let sock = utf8(sock, "fs_delegate socket")?;
        if let Some(m) = cfg.as_object_mut() {
            m.insert("fs_delegate".into(), sock.into());
        }
    }
    Ok(cfg)
}

impl ToolProxies for Proxies {
    fn stdio(&self, spec: &ProxySpec) -> Result<Box<dyn StdioProxy>, AwfError> {
        let plugin_names = self.check(spec)?;
        let exe = self.exe()?;
        let command = utf8(&exe, "program")?.to_owned();
        let id = format!("{}-{}", std::process::id(), awf_host::UuidIds.request_id());
        let events_path = self
            .tmp_dir
            .join(format!("{PROXY_PREFIX}{id}.events.jsonl"));
        let config_arg = utf8(
            &self.tmp_dir.join(format!("{PROXY_PREFIX}{id}.json")),
            "config file",
        )?
        .to_owned();
        let text = config_json(spec, utf8(&events_path, "events file")?)?.to_string();
        let events = self.create(&format!("{PROXY_PREFIX}{id}.events.jsonl"), b"")?;
        let config = match self.create(&format!("{PROXY_PREFIX}{id}.json"), text.as_bytes()) {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_file(&events);
                return Err(e);
            }
        };
        let mut tools: Vec<String> = if spec.intercept_builtins {
            awf_tools::TOOL_NAMES
                .iter()
                .map(|t| (*t).to_owned())
                .collect()
        } else {
            Vec::new()
        };
        tools.sort();
        tools.extend(plugin_names);
        Ok(Box::new(FileProxy {
            server: McpServer {
                name: MCP_PROXY_NAME.to_owned(),
                command,
                args: vec!["mcp-serve".to_owned(), "--config".to_owned(), config_arg],
                env: Vec::new(),
            },
            tools,
            step: spec.step.clone(),
            config,
            events,
            offset: Mutex::new(0),
        }))
    }

    fn in_process(
        &self,
        spec: &ProxySpec,
        secrets: &Masker,
    ) -> Result<Vec<(String, Arc<dyn ToolProvider>)>, AwfError> {
        self.check(spec)?;
        let mut out: Vec<(String, Arc<dyn ToolProvider>)> = Vec::new();
        if spec.intercept_builtins {
            let mut tools =
                awf_tools::BuiltinTools::with_limits(&spec.root_dir, awf_tools::Limits::default())?
                    .with_masker(secrets);
            if let Some(sock) = &spec.fs_delegate {
                tools = tools.with_fs_delegate(sock, awf_tools::FS_DELEGATE_TIMEOUT);
            }
            out.push(("builtin".to_owned(), Arc::new(tools)));
        }
        if let Some(ops) = &self.operations {
            for entry in &spec.plugin_tools {
                let tools = awf_application::OperationTools::new(
                    Arc::clone(ops),
                    std::slice::from_ref(entry),
                )?;
                out.push((format!("plugin:{}", entry.plugin), tools));
            }
        }
        Ok(out)
    }
}

/// One stdio proxy: its config and event files, removed on drop.
struct FileProxy {
    server: McpServer,
    tools: Vec<String>,
    step: String,
    config: PathBuf,
    events: PathBuf,
    /// Bytes of the event file already read (complete lines only).
    offset: Mutex<u64>,
}

impl StdioProxy for FileProxy {
    fn server(&self) -> McpServer {
        self.server.clone()
    }

    fn tools(&self) -> Vec<String> {
        self.tools.clone()
    }

    fn take_events(&self) -> Vec<RunEvent> {
        let mut offset = self
            .offset
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut buf = Vec::new();
        let read = std::fs::File::open(&self.events).and_then(|mut f| {
            f.seek(std::io::SeekFrom::Start(*offset))?;
            f.read_to_end(&mut buf)
        });
        if read.is_err() {
            return Vec::new();
        }
        // A line still being written (or torn by a killed server) waits for the next read.
        let Some(end) = buf.iter().rposition(|b| *b == b'\n') else {
            return Vec::new();
        };
        let whole = &buf[..=end];
        *offset += whole.len() as u64;
        awf_store::tool_events_to_run_events(&String::from_utf8_lossy(whole), &self.step)
    }
}

impl Drop for FileProxy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.config);
        let _ = std::fs::remove_file(&self.events);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use awf_domain::event::ToolFidelity;
    use awf_domain::workflow::McpPluginTools;

    use super::*;

    fn spec(root: &Path) -> ProxySpec {
        ProxySpec {
            run_id: "run-1".into(),
            step: "ask".into(),
            root_dir: root.to_path_buf(),
            intercept_builtins: true,
            plugin_tools: Vec::new(),
            traceparent: None,
            fs_delegate: None,
        }
    }

    #[tokio::test]
    async fn the_editors_file_channel_reaches_mcp_serve_and_the_in_process_tools() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::write(root.join("a.txt"), "on disk\n").unwrap();
        let sock = root.join("editor.sock");
        let mut s = spec(&root);
        s.fs_delegate = Some(sock.clone());
        let p = proxies(&root).stdio(&s).unwrap();
        let config = PathBuf::from(&p.server().args[2]);
        let text = std::fs::read_to_string(&config).unwrap();
        let cfg: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(cfg["fs_delegate"], json!(sock));
        let parsed = crate::mcp_cmd::parse_config(&config, &text, false).unwrap();
        assert_eq!(parsed.fs_delegate.as_deref(), Some(sock.as_path()));
        drop(p);
        // In-process: Read asks the (here absent) editor, never the disk.
        let sourced = proxies(&root).in_process(&s, &Masker::default()).unwrap();
        let read = awf_domain::ports::tools::ToolCall {
            name: "Read".into(),
            arguments: json!({"path": "a.txt"}).as_object().cloned().unwrap(),
            call_id: None,
        };
        let out = sourced[0]
            .1
            .call(read, tokio_util::sync::CancellationToken::new())
            .await
            .unwrap();
        assert!(out.is_error, "{}", out.text);
        assert!(out.text.contains("editor's file channel"), "{}", out.text);
        assert!(!out.text.contains("on disk"), "{}", out.text);
    }

    fn proxies(tmp: &Path) -> Proxies {
        Proxies::new(
            Some(PathBuf::from("/opt/awf/bin/awf")),
            tmp.to_path_buf(),
            None,
        )
    }

    #[test]
    fn a_stdio_proxy_is_a_private_config_for_mcp_serve_and_goes_when_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let p = proxies(tmp.path()).stdio(&spec(tmp.path())).unwrap();
        let server = p.server();
        assert_eq!(server.name, "awf-proxy");
        assert_eq!(server.command, "/opt/awf/bin/awf");
        assert_eq!(server.args[..2], ["mcp-serve", "--config"]);
        let config = PathBuf::from(&server.args[2]);
        assert_eq!(config.parent(), Some(tmp.path()));
        // Both names carry this awf's pid, which the start-up sweep reads.
        let name = config.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with(&format!("awf-mcp-proxy-{}-", std::process::id())),
            "{name}"
        );
        assert_eq!(crate::tmp_sweep::owner_pid(name), Some(std::process::id()));
        let mode = std::fs::metadata(&config).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let cfg: Value = serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
        let audit = PathBuf::from(cfg["audit_path"].as_str().unwrap());
        assert_eq!(
            cfg,
            json!({"intercept_builtins": true, "plugin_tools": [], "root_dir": tmp.path(),
                "run_id": "run-1", "step": "ask", "audit_path": audit})
        );
        // mcp-serve itself accepts it.
        crate::mcp_cmd::parse_config(&config, &cfg.to_string(), false).unwrap();
        let mode = std::fs::metadata(&audit).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(p.tools(), ["Bash", "Edit", "Glob", "Grep", "Read", "Write"]);
        drop(p);
        assert!(!config.exists() && !audit.exists());
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }

    #[test]
    fn events_are_read_once_and_a_line_in_progress_waits() {
        let tmp = tempfile::tempdir().unwrap();
        let p = proxies(tmp.path()).stdio(&spec(tmp.path())).unwrap();
        let cfg: Value =
            serde_json::from_str(&std::fs::read_to_string(&p.server().args[2]).unwrap()).unwrap();
        let audit = PathBuf::from(cfg["audit_path"].as_str().unwrap());
        assert!(p.take_events().is_empty());
        let line = |id: &str| {
            format!(
                "{{\"run_id\":\"run-1\",\"step\":\"ask\",\"type\":\"tool.call\",\"timestamp\":\"t\",\"payload\":{{\"name\":\"Read\",\"call_id\":\"{id}\",\"source\":\"builtin\",\"input\":{{\"path\":\"a\"}},\"output\":\"x\",\"duration_ms\":1,\"fidelity\":\"router\"}}}}\n"
            )
        };
        let first = line("1");
        let second = line("2");
        let (head, tail) = second.split_at(20);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&audit)
            .unwrap();
        f.write_all(format!("{first}{head}").as_bytes()).unwrap();
        let events = p.take_events();
        assert_eq!(events.len(), 2, "{events:?}");
        assert!(
            matches!(&events[0], RunEvent::ToolCall { id, name, fidelity: ToolFidelity::Router, .. } if id == "1" && name == "Read")
        );
        assert!(p.take_events().is_empty(), "the half line is not read yet");
        f.write_all(tail.as_bytes()).unwrap();
        let events = p.take_events();
        assert!(
            matches!(&events[1], RunEvent::ToolCallResult { id, .. } if id == "2"),
            "{events:?}"
        );
        assert!(p.take_events().is_empty());
    }

    #[test]
    fn plugin_tools_need_a_wired_operation_and_an_empty_proxy_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = spec(tmp.path());
        s.plugin_tools = vec![McpPluginTools {
            plugin: "http".into(),
            expose: vec!["request".into()],
        }];
        let e = proxies(tmp.path()).stdio(&s).err().unwrap();
        assert_eq!(e.code(), ErrorCode::UserMcpProxyUnknownPlugin);
        assert!(e.message().contains("\"http\""), "{}", e.message());
        let e = proxies(tmp.path())
            .in_process(&s, &Masker::default())
            .err()
            .unwrap();
        assert_eq!(e.code(), ErrorCode::UserMcpProxyUnknownPlugin);
        let mut s = spec(tmp.path());
        s.intercept_builtins = false;
        let e = proxies(tmp.path()).stdio(&s).err().unwrap();
        assert_eq!(e.code(), ErrorCode::UserMcpProxyEmptyProxy);
        // Nothing was left behind by the refusals.
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_root_that_is_not_utf8_is_an_error_not_a_panic() {
        use std::os::unix::ffi::OsStrExt;
        let tmp = tempfile::tempdir().unwrap();
        let mut s = spec(tmp.path());
        s.root_dir = PathBuf::from(std::ffi::OsStr::from_bytes(b"/tmp/\xff"));
        let e = proxies(tmp.path()).stdio(&s).err().unwrap();
        assert_eq!(e.code(), ErrorCode::UserMcpProxyInvalidConfig);
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn in_process_tools_are_the_builtins_confined_to_the_root() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("a.txt"), "TOKEN=abcdefgh\n").unwrap();
        std::fs::write(tmp.path().join("outside.txt"), "no\n").unwrap();
        let root = std::fs::canonicalize(root).unwrap();
        let masker = Masker::from_named([("API_TOKEN", "abcdefgh")]);
        let sourced = proxies(tmp.path())
            .in_process(&spec(&root), &masker)
            .unwrap();
        assert_eq!(sourced.len(), 1);
        assert_eq!(sourced[0].0, "builtin");
        let tools = &sourced[0].1;
        let mut names: Vec<String> = tools.tools().into_iter().map(|t| t.name).collect();
        names.sort();
        assert_eq!(names, ["Bash", "Edit", "Glob", "Grep", "Read", "Write"]);
        let call = |path: &str| awf_domain::ports::tools::ToolCall {
            name: "Bash".into(),
            arguments: json!({"command": format!("cat {path}")})
                .as_object()
                .cloned()
                .unwrap(),
            call_id: None,
        };
        let out = tools
            .call(call("a.txt"), tokio_util::sync::CancellationToken::new())
            .await
            .unwrap();
        assert!(out.text.contains("TOKEN=***"), "{}", out.text);
        let read = awf_domain::ports::tools::ToolCall {
            name: "Read".into(),
            arguments: json!({"path": "../outside.txt"})
                .as_object()
                .cloned()
                .unwrap(),
            call_id: None,
        };
        let out = tools
            .call(read, tokio_util::sync::CancellationToken::new())
            .await
            .unwrap();
        assert!(out.is_error, "{}", out.text);
    }

    #[test]
    fn in_process_plugin_tools_come_one_source_per_plugin_and_builtins_only_when_intercepting() {
        let tmp = tempfile::tempdir().unwrap();
        let ops: Arc<dyn Operations> = Arc::new(awf_tools::BuiltinOperations::new());
        let p = Proxies::new(None, tmp.path().to_path_buf(), Some(ops));
        let mut s = spec(tmp.path());
        s.intercept_builtins = false;
        s.plugin_tools = vec![McpPluginTools {
            plugin: "http".into(),
            expose: vec!["request".into()],
        }];
        let sourced = p.in_process(&s, &Masker::default()).unwrap();
        let got: Vec<(String, Vec<String>)> = sourced
            .iter()
            .map(|(src, t)| (src.clone(), t.tools().into_iter().map(|t| t.name).collect()))
            .collect();
        assert_eq!(
            got,
            [("plugin:http".to_owned(), vec!["http_request".to_owned()])]
        );
        s.intercept_builtins = true;
        let sources: Vec<String> = p
            .in_process(&s, &Masker::default())
            .unwrap()
            .into_iter()
            .map(|(src, _)| src)
            .collect();
        assert_eq!(sources, ["builtin", "plugin:http"]);
    }
}
