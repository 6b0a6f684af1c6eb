//! `awf mcp-serve --config <file>`: the per-step MCP proxy. Reads the config (AWF (Go)'s JSON
//! shape plus what awf adds), builds the tool router (application) over the tools the config
//! asks for, and serves it over stdio (awf-mcp) until stdin ends or SIGTERM/SIGINT.
//!
//! Config file (JSON object; every key optional; unknown keys refused):
//!
//! | key | type | default | meaning |
//! |---|---|---|---|
//! | `intercept_builtins` | bool | `true` | serve the built-in Read, Write, Edit, Bash, Glob, Grep |
//! | `plugin_tools` | `[{plugin, expose: [op…]}]` | `[]` | plugin operations as `<plugin>_<op>` tools (`http` / `request` → `http_request`) |
//! | `root_dir` | absolute path of a directory | the working directory | the workspace the built-ins are confined to |
//! | `run_id` | string | none | the parent run, stamped on every tool call event |
//! | `step` | string | none | the step (state name), stamped likewise |
//! | `audit_path` | absolute path | none | JSONL file the tool call events are appended to (0600) |
//! | `traceparent` | W3C `traceparent` string | none | the parent span's context, recorded on each `tool.call` span |
//! | `fs_delegate` | absolute path of a unix socket | none | the editor's file channel (ACP fs delegation, served by `awf acp-serve`): the built-in Read, Write and Edit go through it instead of the disk (protocol: `awf_domain::ports::tools::ProxySpec::fs_delegate`); Bash, Glob, Grep stay on disk; a channel that fails is an `isError` result |
//! | `limits` | `{max_frame_bytes, max_output_bytes, shutdown_grace_ms}` | 10 MiB, 10 MiB − 64 KiB, 5000 | server limits |
//!
//! Errors (exit 1): `USER.MCP_PROXY.INVALID_CONFIG` (missing, unreadable, not JSON, a wrong
//! type or value), `USER.MCP_PROXY.UNKNOWN_KEY` (every unknown key listed),
//! `USER.MCP_PROXY.EMPTY_PROXY` (`intercept_builtins: false` and no `plugin_tools`),
//! `USER.MCP_PROXY.NAME_COLLISION` (a plugin listed twice, or one tool name twice),
//! `USER.MCP_PROXY.UNKNOWN_PLUGIN` (a plugin awf does not provide; today there is `http`),
//! `USER.MCP_PROXY.UNKNOWN_OPERATION` (an operation the plugin lacks; `http` has `request`).
//!
//! `plugin_tools: [{"plugin": "http", "expose": ["request"]}]` serves the tool `http_request`
//! (the `http.request` operation of `type: operation`; its outputs as JSON text).
//!
//! `--workflows [DIR]` (alone or with `--config`) adds the workflows as tools
//! ([`awf_application::WorkflowTools`] over the run service of
//! [`crate::wiring::served_run_service`]): those `awf list` finds, or only those in DIR (a
//! DIR that is not a directory is `USER.INPUT.MISSING_FILE`); `--yes` approves their gates.
//! Neither flag: `USER.MCP_PROXY.INVALID_CONFIG`.
//!
//! Reference: shared/spec/mcp.md §3.1 (config), §3.5 (audit), §9 ("config v2").

use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use awf_application::AuditContext;
use awf_application::ToolRouter;
use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::json::NotUnique;
use awf_domain::mask::Masker;
use awf_domain::ports::ToolAuditSink;
use awf_domain::ports::ToolProvider;
use serde_json::Map;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::cli::McpServeArgs;
use crate::ctx::Ctx;
use crate::errors::CliError;
use crate::errors::Outcome;

/// One `plugin_tools` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginTools {
    /// Plugin name.
    pub plugin: String,
    /// Its operations to expose.
    pub expose: Vec<String>,
}

/// The parsed config file.
#[derive(Debug, Clone, PartialEq)]
pub struct McpConfig {
    /// Serve the built-in tools.
    pub intercept_builtins: bool,
    /// Plugin operations to serve.
    pub plugin_tools: Vec<PluginTools>,
    /// Workspace root (absolute), `None`: the working directory.
    pub root_dir: Option<PathBuf>,
    /// Parent run id.
    pub run_id: Option<String>,
    /// Step name.
    pub step: Option<String>,
    /// Where tool call events go.
    pub audit_path: Option<PathBuf>,
    /// W3C traceparent of the parent span.
    pub traceparent: Option<String>,
    /// The editor's file channel (a unix socket), `None`: Read/Write/Edit on disk.
    pub fs_delegate: Option<PathBuf>,
    /// Longest frame, bytes.
    pub max_frame_bytes: usize,
    /// Longest result text, bytes.
    pub max_output_bytes: usize,
    /// Time calls get to stop at shutdown.
    pub shutdown_grace: Duration,
}

const KEYS: &[&str] = &[
    "intercept_builtins",
    "plugin_tools",
    "root_dir",
    "run_id",
    "step",
    "audit_path",
    "traceparent",
    "fs_delegate",
    "limits",
];
const LIMIT_KEYS: &[&str] = &["max_frame_bytes", "max_output_bytes", "shutdown_grace_ms"];

fn invalid(path: &Path, why: impl std::fmt::Display) -> AwfError {
    AwfError::new(
        ErrorCode::UserMcpProxyInvalidConfig,
        format!("mcp-serve config {}: {why}", path.display()),
    )
    .with_detail("file", path.display().to_string())
    .with_hint(ErrorCode::UserMcpProxyInvalidConfig.resolution())
}

fn unknown_keys(path: &Path, at: &str, m: &Map<String, Value>, known: &[&str]) -> Option<AwfError> {
    let unknown: Vec<&str> = m
        .keys()
        .map(String::as_str)
        .filter(|k| !known.contains(k))
        .collect();
    if unknown.is_empty() {
        return None;
    }
    // A misspelt key: the known one it most likely meant, first in the hint.
    // A short form of a known key (`root` for `root_dir`) is meant too.
    let meant: Vec<String> = unknown
        .iter()
        .filter_map(|k| {
            awf_domain::validate::closest(k, known.iter().copied())
                .or_else(|| {
                    match awf_domain::validate::keys_with_part(k, known.iter().copied())[..] {
                        [one] => Some(one),
                        _ => None,
                    }
                })
                .map(|c| format!("`{k}`: did you mean `{c}`?"))
        })
        .collect();
    let hint = if meant.is_empty() {
        format!("known keys{at}: {}", known.join(", "))
    } else {
        format!("{}; known keys{at}: {}", meant.join("; "), known.join(", "))
    };
    Some(
        AwfError::new(
            ErrorCode::UserMcpProxyUnknownKey,
            format!(
                "mcp-serve config {}: unknown key{} {}{at}",
                path.display(),
                if unknown.len() == 1 { "" } else { "s" },
                unknown
                    .iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
        .with_detail("file", path.display().to_string())
        .with_hint(hint),
    )
}

fn opt_string(path: &Path, m: &Map<String, Value>, key: &str) -> Result<Option<String>, AwfError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(invalid(
            path,
            format!("`{key}` must be a string, not {other}"),
        )),
    }
}

fn opt_abs_path(
    path: &Path,
    m: &Map<String, Value>,
    key: &str,
) -> Result<Option<PathBuf>, AwfError> {
    match opt_string(path, m, key)? {
        None => Ok(None),
        // An empty `audit_path` is "none" (Go shape); an empty `root_dir` is a relative path.
        Some(s) if s.is_empty() && key != "root_dir" => Ok(None),
        Some(s) => {
            let p = PathBuf::from(&s);
            if p.is_absolute() {
                Ok(Some(p))
            } else {
                Err(invalid(
                    path,
                    format!("`{key}` must be an absolute path, not `{s}`"),
                ))
            }
        }
    }
}

fn limit(path: &Path, m: &Map<String, Value>, key: &str, default: u64) -> Result<u64, AwfError> {
    match m.get(key) {
        None => Ok(default),
        Some(v) => v.as_u64().filter(|n| *n > 0).ok_or_else(|| {
            invalid(
                path,
                format!("`limits.{key}` must be a positive integer, not {v}"),
            )
        }),
    }
}

/// Whether `s` has the W3C `traceparent` shape: `version-traceid-parentid-flags` in 2, 32, 16
/// and 2 lower-case hex digits (all-zero ids are invalid).
fn is_traceparent(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    let hex = |p: &str, n: usize| {
        p.len() == n
            && p.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    parts.len() == 4
        && hex(parts[0], 2)
        && parts[0] != "ff"
        && hex(parts[1], 32)
        && hex(parts[2], 16)
        && hex(parts[3], 2)
        && parts[1].bytes().any(|b| b != b'0')
        && parts[2].bytes().any(|b| b != b'0')
}

/// Whether `p` is a unix socket, or names nothing (a channel already closed is an `isError`
/// result of each call, not a config error).
fn is_socket_or_missing(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(p) {
        Ok(md) => md.file_type().is_socket(),
        Err(_) => true,
    }
}

/// Parses the config text read from `path`. `with_workflows`: the server also serves
/// workflows (`--workflows`), so `intercept_builtins: false` without `plugin_tools` is no
/// empty proxy, only no built-ins.
///
/// # Errors
/// The `USER.MCP_PROXY.*` error of the first problem found (see the module docs).
pub fn parse_config(path: &Path, text: &str, with_workflows: bool) -> Result<McpConfig, AwfError> {
    // serde_json keeps the last of two equal keys silently: the shared strict parser (as
    // HTTP bodies and ACP frames are read) refuses them.
    let v: Value = awf_domain::json::parse_unique(text.as_bytes()).map_err(|e| match e {
        NotUnique::Repeated(r) => AwfError::new(
            ErrorCode::UserMcpProxyInvalidConfig,
            format!(
                "mcp-serve config {}: the key {:?} is given twice (at {}): each key of a JSON object must appear once",
                path.display(),
                r.key,
                r.pointer()
            ),
        )
        .with_detail("file", path.display().to_string())
        .with_detail("pointer", r.pointer())
        .with_hint(format!(
            "write {:?} once, with the value you mean (JSON readers differ on which one they keep)",
            r.key
        )),
        NotUnique::Json(e) => invalid(path, format!("not valid JSON: {e}")),
    })?;
    let Value::Object(m) = v else {
        return Err(invalid(path, "must be a JSON object"));
    };
    if let Some(e) = unknown_keys(path, "", &m, KEYS) {
        return Err(e);
    }
    let intercept_builtins = match m.get("intercept_builtins") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(invalid(
                path,
                format!("`intercept_builtins` must be true or false, not {other}"),
            ));
        }
    };
    let mut plugin_tools: Vec<PluginTools> = Vec::new();
    match m.get("plugin_tools") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let plugin = item
                    .get("plugin")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty());
                let expose = item.get("expose").and_then(Value::as_array).map(|ops| {
                    ops.iter()
                        .map(|o| o.as_str().map(str::to_owned))
                        .collect::<Option<Vec<_>>>()
                });
                match (plugin, expose) {
                    (Some(plugin), Some(Some(expose))) => {
                        if plugin_tools.iter().any(|p| p.plugin == plugin) {
                            return Err(AwfError::new(
                                ErrorCode::UserMcpProxyNameCollision,
                                format!(
                                    "mcp-serve config {}: plugin `{plugin}` is listed twice in `plugin_tools`",
                                    path.display()
                                ),
                            )
                            .with_detail("file", path.display().to_string())
                            .with_hint("list each plugin once, with all its operations under one `expose`"));
                        }
                        plugin_tools.push(PluginTools {
                            plugin: plugin.to_owned(),
                            expose,
                        });
                    }
                    _ => {
                        return Err(invalid(
                            path,
                            format!(
                                "`plugin_tools[{i}]` must be {{\"plugin\": \"<name>\", \"expose\": [\"<op>\", …]}}"
                            ),
                        ));
                    }
                }
            }
        }
        Some(other) => {
            return Err(invalid(
                path,
                format!("`plugin_tools` must be a list, not {other}"),
            ));
        }
    }
    if !intercept_builtins && plugin_tools.is_empty() && !with_workflows {
        return Err(AwfError::new(
            ErrorCode::UserMcpProxyEmptyProxy,
            format!(
                "mcp-serve config {}: `intercept_builtins` is false and `plugin_tools` is empty: no tool to serve",
                path.display()
            ),
        )
        .with_detail("file", path.display().to_string())
        .with_hint(ErrorCode::UserMcpProxyEmptyProxy.resolution()));
    }
    let limits = match m.get("limits") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(l)) => {
            if let Some(e) = unknown_keys(path, " in `limits`", l, LIMIT_KEYS) {
                return Err(e);
            }
            l.clone()
        }
        Some(other) => {
            return Err(invalid(
                path,
                format!("`limits` must be an object, not {other}"),
            ));
        }
    };
    let defaults = awf_mcp::ServeOptions::default();
    let as_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    Ok(McpConfig {
        intercept_builtins,
        plugin_tools,
        root_dir: opt_abs_path(path, &m, "root_dir")?,
        run_id: opt_string(path, &m, "run_id")?,
        step: opt_string(path, &m, "step")?,
        audit_path: opt_abs_path(path, &m, "audit_path")?,
        traceparent: match opt_string(path, &m, "traceparent")? {
            Some(tp) if !is_traceparent(&tp) => {
                return Err(invalid(
                    path,
                    format!(
                        "`traceparent` `{tp}` is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)"
                    ),
                ));
            }
            other => other,
        },
        fs_delegate: match opt_abs_path(path, &m, "fs_delegate")? {
            Some(sock) if !is_socket_or_missing(&sock) => {
                return Err(invalid(
                    path,
                    format!("`fs_delegate` {} is not a unix socket", sock.display()),
                ));
            }
            other => other,
        },
        max_frame_bytes: as_usize(limit(
            path,
            &limits,
            "max_frame_bytes",
            defaults.max_frame_bytes as u64,
        )?),
        max_output_bytes: as_usize(limit(
            path,
            &limits,
            "max_output_bytes",
            defaults.max_output_bytes as u64,
        )?),
        shutdown_grace: Duration::from_millis(limit(
            path,
            &limits,
            "shutdown_grace_ms",
            u64::try_from(defaults.shutdown_grace.as_millis()).unwrap_or(u64::MAX),
        )?),
    })
}

/// Reads and checks the config at `path`, and resolves its root.
fn load(path: &Path, with_workflows: bool) -> Result<(McpConfig, PathBuf), AwfError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| invalid(path, format!("cannot read it: {e}")))?;
    let cfg = parse_config(path, &text, with_workflows)?;
    if let Some(a) = &cfg.audit_path
        && std::fs::symlink_metadata(a).is_ok_and(|m| m.file_type().is_symlink())
    {
        // The records (Write's contents among them) would go wherever the link points.
        return Err(AwfError::new(
            ErrorCode::UserMcpProxyInvalidConfig,
            format!(
                "mcp-serve config {}: `audit_path` {} is a symbolic link; the audit file is never written through one",
                path.display(),
                a.display()
            ),
        )
        .with_detail("file", path.display().to_string())
        .with_hint("give the path of a regular file (or of one to create), not of a symbolic link"));
    }
    if let Some(a) = &cfg.audit_path
        && a.is_dir()
    {
        return Err(invalid(
            path,
            format!(
                "`audit_path` {} is a directory; give the path of a file",
                a.display()
            ),
        ));
    }
    if !cfg.plugin_tools.is_empty() {
        plugin_tools(&cfg).map_err(|e| {
            e.map_message(|m| format!("mcp-serve config {}: {m}", path.display()))
                .with_detail("file", path.display().to_string())
        })?;
    }
    let root = match &cfg.root_dir {
        Some(r) => r.clone(),
        None => std::env::current_dir().map_err(|e| {
            AwfError::new(
                ErrorCode::SystemIoReadFailed,
                format!("cannot read the working directory: {e}"),
            )
        })?,
    };
    let root = std::fs::canonicalize(&root)
        .ok()
        .filter(|r| r.is_dir())
        .ok_or_else(|| {
            invalid(
                path,
                format!("`root_dir` {} is not an existing directory", root.display()),
            )
        })?;
    if let Some(a) = &cfg.audit_path
        && !a.parent().is_some_and(Path::is_dir)
    {
        return Err(invalid(
            path,
            format!(
                "the directory of `audit_path` {} does not exist",
                a.display()
            ),
        ));
    }
    Ok((cfg, root))
}

/// A tool provider and its router source name.
type SourcedTools = (String, Arc<dyn ToolProvider>);

/// The plugin tools of `cfg` (`<plugin>_<op>`, awf-tools' built-in operations), one provider
/// per plugin with its router source `plugin:<name>`.
///
/// # Errors
/// `USER.MCP_PROXY.UNKNOWN_PLUGIN`, `UNKNOWN_OPERATION` or `NAME_COLLISION`
/// ([`awf_application::OperationTools::new`]).
fn plugin_tools(cfg: &McpConfig) -> Result<Vec<SourcedTools>, AwfError> {
    let ops: Arc<dyn awf_domain::ports::Operations> = Arc::new(awf_tools::BuiltinOperations::new());
    let entries: Vec<awf_domain::workflow::McpPluginTools> = cfg
        .plugin_tools
        .iter()
        .map(|p| awf_domain::workflow::McpPluginTools {
            plugin: p.plugin.clone(),
            expose: p.expose.clone(),
        })
        .collect();
    // All entries at once first: collisions between them are found there.
    awf_application::OperationTools::new(Arc::clone(&ops), &entries)?;
    entries
        .iter()
        .map(|e| {
            Ok((
                format!("plugin:{}", e.plugin),
                awf_application::OperationTools::new(Arc::clone(&ops), std::slice::from_ref(e))?,
            ))
        })
        .collect()
}

/// The built-in Read, Write, Edit, Bash, Glob and Grep over `root` (awf-tools), Bash masking
/// the secrets of `masker` too.
fn builtin_tools(
    root: &Path,
    masker: &Masker,
    fs_delegate: Option<&Path>,
) -> Result<Arc<dyn ToolProvider>, AwfError> {
    let mut tools = awf_tools::BuiltinTools::with_limits(root, awf_tools::Limits::default())?
        .with_masker(masker);
    if let Some(sock) = fs_delegate {
        tools = tools.with_fs_delegate(sock, awf_tools::FS_DELEGATE_TIMEOUT);
    }
    Ok(Arc::new(tools))
}

/// The repository `--workflows DIR` lists and loads from: DIR only (the environment, local
/// and global directories all replaced by it), sub-workflows resolving there too.
fn repository_in(
    w: &crate::wiring::Wiring,
    dir: &Path,
) -> Result<awf_yaml::YamlRepository, AwfError> {
    let abs = w.cwd.join(dir);
    if !abs.is_dir() {
        return Err(AwfError::new(
            ErrorCode::UserInputMissingFile,
            format!("--workflows {}: not a directory", dir.display()),
        )
        .with_detail("path", abs.display().to_string())
        .with_hint("give a directory of workflow files (*.yaml), or --workflows alone for those `awf list` shows"));
    }
    let mut paths = awf_yaml::RepoPaths::from_env(&w.cwd, &w.env, &w.data_root);
    paths.env_dirs = vec![abs.clone()];
    paths.local_dir.clone_from(&abs);
    paths.global_dir = abs;
    Ok(awf_yaml::YamlRepository::new(paths))
}

/// Every tool of the server (built-ins and workflows), with every process this server adopted
/// (it is a subreaper) stopped and reaped whenever no call is in flight: a daemon a Bash
/// command or a workflow step detached (`setsid cmd &`, a double fork that cleared its
/// environment so no tag finds it) goes when its call ends. One gate for all calls: a sweep
/// while any call runs could stop that call's own processes.
struct SweptRuns {
    inner: Arc<dyn ToolProvider>,
    /// Held (shared) by every call in flight; the sweep takes it exclusively, so calls that
    /// come during a sweep start after it.
    gate: tokio::sync::RwLock<()>,
    /// A call that can start processes (Bash, a workflow) began since the last sweep. The
    /// sweep reads every process of the host, so calls that start none (Read, Write, Edit,
    /// Glob, Grep) do not pay for it unless such a call left something to sweep.
    dirty: std::sync::atomic::AtomicBool,
    /// The names of the built-ins served that start no process ([`SPAWNS_NOTHING`], when the
    /// built-ins are served; a workflow may take such a name otherwise).
    quiet: &'static [&'static str],
}

/// Built-in tools that never start a process.
const SPAWNS_NOTHING: &[&str] = &["Read", "Write", "Edit", "Glob", "Grep"];

#[async_trait::async_trait]
impl ToolProvider for SweptRuns {
    fn tools(&self) -> Vec<awf_domain::ports::tools::ToolSpec> {
        self.inner.tools()
    }

    async fn call(
        &self,
        call: awf_domain::ports::tools::ToolCall,
        cancel: CancellationToken,
    ) -> Result<awf_domain::ports::tools::ToolOutput, awf_domain::ports::tools::ToolCallError> {
        self.call_with_progress(call, cancel, None).await
    }

    async fn call_with_progress(
        &self,
        call: awf_domain::ports::tools::ToolCall,
        cancel: CancellationToken,
        progress: Option<awf_domain::ports::tools::ProgressSink>,
    ) -> Result<awf_domain::ports::tools::ToolOutput, awf_domain::ports::tools::ToolCallError> {
        use std::sync::atomic::Ordering;
        if !self.quiet.contains(&call.name.as_str()) {
            self.dirty.store(true, Ordering::SeqCst);
        }
        let out = {
            let _running = self.gate.read().await;
            self.inner.call_with_progress(call, cancel, progress).await
        };
        if self.dirty.load(Ordering::SeqCst)
            && let Ok(_sweeping) = self.gate.try_write()
        {
            // Cleared before the sweep: a call that starts meanwhile waits for the gate and
            // marks it again.
            self.dirty.store(false, Ordering::SeqCst);
            let n = awf_exec::sweep_adopted().await;
            if n > 0 {
                tracing::debug!(target: "awf::mcp", stopped = n, "daemonised step processes stopped");
            }
        }
        out
    }
}

/// What `--workflows` adds to the server: the workflow tools, and the recorder to flush at
/// the end.
struct Served {
    tools: Arc<dyn ToolProvider>,
    recorder: Option<crate::wiring::RunRecorder>,
}

/// Builds the workflow tools of `--workflows [DIR]` (`reserved`: the names served beside
/// them), warning on stderr about workflows left out.
fn workflow_tools(
    ctx: &Ctx,
    dir: &Path,
    yes: bool,
    reserved: &[String],
) -> Result<Served, AwfError> {
    let w = crate::wiring::build_recording(ctx.storage.as_deref())?;
    crate::run_cmd::warn_unrecorded(&w);
    let config = w.config()?;
    let mut services = w.services.clone();
    // No DIR: the discovery of `awf list`.
    if !dir.as_os_str().is_empty() {
        services.repository = Arc::new(repository_in(&w, dir)?);
    }
    if services.state_store.is_none() {
        // Unrecorded runs (AWF_RECORD=off) still let awf_run_status read recorded ones.
        services.state_store = w.state_store().ok();
    }
    let states = services.state_store.clone();
    let repository = Arc::clone(&services.repository);
    let checks = services.clone();
    let service = crate::wiring::served_run_service(services);
    let env = w.env.clone();
    let tools = awf_application::WorkflowTools::new_checked(
        service,
        repository.as_ref(),
        states,
        awf_application::WorkflowToolsConfig {
            config_inputs: config.inputs,
            env: w.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            working_dir: w.cwd.clone(),
            auto_approve: yes,
        },
        reserved,
        // As `awf list` and `awf validate` report a broken workflow.
        &|entry| {
            let path = entry.path.display().to_string();
            awf_application::validation::broken_summary(&checks, &path, &env)
        },
    )?;
    for (name, why) in tools.skipped() {
        tracing::warn!(target: "awf::mcp", workflow = %name, error = %why, "workflow not served: it does not load or validate");
    }
    Ok(Served {
        tools: Arc::new(tools),
        recorder: w.recorder.clone(),
    })
}

/// Runs `awf mcp-serve`.
pub async fn run(ctx: &Ctx, args: &McpServeArgs) -> Result<Outcome, CliError> {
    if args.config.is_none() && args.workflows.is_none() {
        return Err(CliError::Awf(
            AwfError::new(
                ErrorCode::UserMcpProxyInvalidConfig,
                "awf mcp-serve needs its config file (--config <file>), --workflows [DIR], or both",
            )
            .with_hint(ErrorCode::UserMcpProxyInvalidConfig.resolution())
            .with_hint(
                "`awf mcp-serve --workflows` serves the workflows `awf list` shows as tools",
            ),
        ));
    }
    let loaded = match &args.config {
        Some(config) => Some(load(config, args.workflows.is_some())?),
        None => None,
    };
    // Not dumpable: a same-user process (a Bash command) cannot open /proc/<server>/fd/* to
    // forge frames on its stdout or read its stdin. Root (CAP_SYS_PTRACE) still can: README.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!(target: "awf::mcp", error = %e, "cannot make the server non-dumpable");
    }
    let env = crate::wiring::process_env();
    let masker = Masker::from_named(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let cfg = loaded.as_ref().map(|(c, _)| c);
    let sink: Option<Arc<dyn ToolAuditSink>> = cfg
        .and_then(|c| c.audit_path.as_ref())
        .map(|p| Arc::new(awf_store::ToolEventFile::new(p)) as Arc<dyn ToolAuditSink>);
    let run_id = cfg.and_then(|c| c.run_id.clone());
    let step = cfg.and_then(|c| c.step.clone());
    let traceparent = cfg.and_then(|c| c.traceparent.clone());
    let mut router = ToolRouter::new(AuditContext {
        run_id: run_id.clone(),
        step: step.clone(),
        traceparent: traceparent.clone(),
        masker: masker.clone(),
        clock: Arc::new(awf_host::SystemClock),
        ids: Arc::new(awf_host::UuidIds),
        sink,
    });
    let mut builtins_served = false;
    if let Some((cfg, root)) = &loaded
        && cfg.intercept_builtins
    {
        router.register(
            "builtin",
            builtin_tools(root, &masker, cfg.fs_delegate.as_deref())?,
        )?;
        builtins_served = true;
    }
    if let Some((cfg, _)) = &loaded {
        for (source, tools) in plugin_tools(cfg)? {
            router.register(&source, tools)?;
        }
    }
    let mut recorder = None;
    if let Some(dir) = &args.workflows {
        let reserved: Vec<String> = router.tools().into_iter().map(|t| t.name).collect();
        let served = workflow_tools(ctx, Path::new(dir), args.yes, &reserved)?;
        // A workflow tool refuses an argument it does not declare: the value of one (a
        // misspelt secret input) is recorded masked.
        router.register_declared_only("workflows", served.tools)?;
        recorder = served.recorder;
    }
    // Processes a Bash command or a workflow step detaches (`setsid cmd &`) come back to this
    // process, which stops and reaps them when the call ends. Refused (not Linux, a sandbox):
    // the call's environment marker still finds them.
    let _ = awf_exec::become_subreaper();
    let root = loaded.as_ref().map(|(_, r)| r.display().to_string());
    let span = tracing::info_span!(
        "mcp.serve",
        awf.run_id = run_id.as_deref().unwrap_or(""),
        awf.step = step.as_deref().unwrap_or(""),
        traceparent = traceparent.as_deref().unwrap_or(""),
        root = root.as_deref().unwrap_or(""),
    );
    let shutdown = CancellationToken::new();
    spawn_signal_watch(shutdown.clone());
    let defaults = awf_mcp::ServeOptions::default();
    let options = awf_mcp::ServeOptions {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        max_frame_bytes: cfg.map_or(defaults.max_frame_bytes, |c| c.max_frame_bytes),
        max_output_bytes: cfg.map_or(defaults.max_output_bytes, |c| c.max_output_bytes),
        // A cancelled workflow run gets its processes' SIGTERM → 5 s → SIGKILL and its
        // cancel hooks: more than the built-ins' default grace.
        shutdown_grace: cfg.map_or(Duration::from_secs(10), |c| c.shutdown_grace),
    };
    let tools = SweptRuns {
        inner: Arc::new(router),
        gate: tokio::sync::RwLock::new(()),
        dirty: std::sync::atomic::AtomicBool::new(false),
        quiet: if builtins_served { SPAWNS_NOTHING } else { &[] },
    };
    let served = tracing::Instrument::instrument(
        awf_mcp::serve_stdio(Arc::new(tools), options, shutdown),
        span,
    )
    .await;
    // Whatever the calls left (their TERM → grace → KILL cut short by `shutdown_grace_ms`,
    // daemons they adopted out): stopped and reaped before exit, never left to init.
    awf_exec::sweep_adopted().await;
    if let Some(r) = &recorder {
        r.flush();
    }
    match served {
        Ok(end) => {
            tracing::debug!(target: "awf::mcp", ?end, "mcp-serve ended");
            Ok(Outcome::Success)
        }
        Err(e) => Err(CliError::Awf(AwfError::new(
            ErrorCode::SystemIoWriteFailed,
            format!("mcp-serve stopped: {e}"),
        ))),
    }
}

/// SIGTERM, SIGINT and SIGHUP end the server (exit 0, as AWF (Go)). The handlers are
/// installed before this returns, so no signal after it is missed.
fn spawn_signal_watch(shutdown: CancellationToken) {
    use tokio::signal::unix::Signal;
    use tokio::signal::unix::SignalKind;
    use tokio::signal::unix::signal;
    async fn recv(s: &mut Option<Signal>) {
        match s {
            Some(s) => {
                let _ = s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    let mut term = signal(SignalKind::terminate()).ok();
    let mut int = signal(SignalKind::interrupt()).ok();
    let mut hup = signal(SignalKind::hangup()).ok();
    tokio::spawn(async move {
        tokio::select! {
            () = recv(&mut term) => {}
            () = recv(&mut int) => {}
            () = recv(&mut hup) => {}
        }
        shutdown.cancel();
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<McpConfig, AwfError> {
        parse_config(Path::new("/tmp/c.json"), text, false)
    }

    #[test]
    fn fs_delegate_must_be_an_absolute_socket_path() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("fs.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let cfg = parse(&format!(r#"{{"fs_delegate": "{}"}}"#, sock.display())).unwrap();
        assert_eq!(cfg.fs_delegate.as_deref(), Some(sock.as_path()));
        // A socket already gone is each call's isError, not a config error.
        let gone = dir.path().join("gone.sock");
        let cfg = parse(&format!(r#"{{"fs_delegate": "{}"}}"#, gone.display())).unwrap();
        assert_eq!(cfg.fs_delegate.as_deref(), Some(gone.as_path()));
        assert_eq!(parse("{}").unwrap().fs_delegate, None);
        let rel = parse(r#"{"fs_delegate": "fs.sock"}"#).unwrap_err();
        assert_eq!(rel.code(), ErrorCode::UserMcpProxyInvalidConfig);
        assert!(rel.message().contains("absolute"), "{}", rel.message());
        let file = dir.path().join("plain");
        std::fs::write(&file, "").unwrap();
        let e = parse(&format!(r#"{{"fs_delegate": "{}"}}"#, file.display())).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserMcpProxyInvalidConfig);
        assert!(e.message().contains("not a unix socket"), "{}", e.message());
        let e = parse(r#"{"fs_delegate": 3}"#).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserMcpProxyInvalidConfig);
    }

    #[test]
    fn a_misspelt_key_is_refused_with_the_key_it_most_likely_meant() {
        let e = parse(r#"{"intercept_builtin": true, "bogus": 1}"#).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserMcpProxyUnknownKey);
        assert!(
            e.message()
                .contains("unknown keys `intercept_builtin`, `bogus`"),
            "{}",
            e.message()
        );
        assert_eq!(
            e.hints().first().map(String::as_str),
            Some(
                "`intercept_builtin`: did you mean `intercept_builtins`?; known keys: \
                 intercept_builtins, plugin_tools, root_dir, run_id, step, audit_path, \
                 traceparent, fs_delegate, limits"
            )
        );
        let e = parse(r#"{"limits": {"max_frame_byte": 1}}"#).unwrap_err();
        assert!(
            e.hints()[0].starts_with("`max_frame_byte`: did you mean `max_frame_bytes`?"),
            "{:?}",
            e.hints()
        );
    }

    #[test]
    fn go_shape_and_awf_keys_parse() {
        let cfg = parse(
            r#"{"intercept_builtins": true, "plugin_tools": [], "root_dir": "/srv/ws",
                "run_id": "r1", "step": "review", "audit_path": "/tmp/t.jsonl",
                "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                "limits": {"max_frame_bytes": 2048, "shutdown_grace_ms": 100}}"#,
        )
        .unwrap();
        assert!(cfg.intercept_builtins);
        assert_eq!(cfg.root_dir.as_deref(), Some(Path::new("/srv/ws")));
        assert_eq!(cfg.run_id.as_deref(), Some("r1"));
        assert_eq!(cfg.step.as_deref(), Some("review"));
        assert_eq!(cfg.max_frame_bytes, 2048);
        assert_eq!(cfg.shutdown_grace, Duration::from_millis(100));
        let empty = parse("{}").unwrap();
        assert!(
            empty.intercept_builtins,
            "intercept_builtins defaults to true"
        );
        assert_eq!(empty.max_frame_bytes, 10 * 1024 * 1024);
    }

    #[test]
    fn every_unknown_key_is_named() {
        let e = parse(r#"{"enable": true, "intercept_builtins": true, "bogus": 1}"#).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserMcpProxyUnknownKey);
        assert!(
            e.message().contains("`enable`") && e.message().contains("`bogus`"),
            "{}",
            e.message()
        );
        assert!(!e.hints().is_empty());
        let e = parse(r#"{"limits": {"max_frames": 1}}"#).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserMcpProxyUnknownKey);
        assert!(e.message().contains("`limits`"), "{}", e.message());
    }

    #[test]
    fn bad_shapes_are_invalid_config() {
        for text in [
            "not json",
            "[1, 2]",
            r#"{"intercept_builtins": "yes"}"#,
            r#"{"plugin_tools": {"a": 1}}"#,
            r#"{"plugin_tools": [{"plugin": "k"}]}"#,
            r#"{"root_dir": "relative/dir"}"#,
            r#"{"root_dir": ""}"#,
            r#"{"run_id": "a", "run_id": "b"}"#,
            r#"{"limits": {"max_frame_bytes": 10, "max_frame_bytes": 20}}"#,
            r#"{"run_id": 7}"#,
            r#"{"traceparent": "not-a-trace"}"#,
            r#"{"traceparent": "00-00000000000000000000000000000000-b7ad6b7169203331-01"}"#,
            r#"{"limits": {"max_frame_bytes": -1}}"#,
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(
                e.code(),
                ErrorCode::UserMcpProxyInvalidConfig,
                "{text}: {e}"
            );
            assert!(!e.hints().is_empty(), "{text}");
        }
    }

    #[test]
    fn a_key_given_twice_is_named_with_where_it_is_at_any_depth() {
        let refused = |text: &str| {
            let e = parse(text).unwrap_err();
            assert_eq!(e.code(), ErrorCode::UserMcpProxyInvalidConfig, "{text}");
            (e.message().to_owned(), e.hints().to_vec())
        };
        assert_eq!(
            refused(r#"{"run_id": "a", "run_id": "b"}"#),
            (
                "mcp-serve config /tmp/c.json: the key \"run_id\" is given twice (at /run_id): \
                 each key of a JSON object must appear once"
                    .to_owned(),
                vec![
                    "write \"run_id\" once, with the value you mean (JSON readers differ on \
                     which one they keep)"
                        .to_owned()
                ]
            )
        );
        assert_eq!(
            refused(r#"{"limits": {"max_frame_bytes": 10, "max_frame_bytes": 20}}"#).0,
            "mcp-serve config /tmp/c.json: the key \"max_frame_bytes\" is given twice (at \
             /limits/max_frame_bytes): each key of a JSON object must appear once"
        );
        assert_eq!(
            refused(r#"{"plugin_tools": [{"plugin": "http", "expose": [], "expose": []}]}"#).0,
            "mcp-serve config /tmp/c.json: the key \"expose\" is given twice (at \
             /plugin_tools/0/expose): each key of a JSON object must appear once"
        );
        // The repeated key is named even when the text goes wrong after it; bad JSON alone
        // is said as such.
        assert!(
            refused(r#"{"step": "a", "step": "b", "#)
                .0
                .contains("the key \"step\" is given twice (at /step)")
        );
        let (m, hints) = refused(r#"{"step": "a""#);
        assert!(
            m.starts_with("mcp-serve config /tmp/c.json: not valid JSON: EOF while parsing"),
            "{m}"
        );
        assert_eq!(
            hints,
            vec![ErrorCode::UserMcpProxyInvalidConfig.resolution().to_owned()]
        );
        // Equal keys in different objects are no repetition.
        let cfg = parse(
            r#"{"plugin_tools": [{"plugin": "http", "expose": ["request"]}], "limits": {"max_frame_bytes": 4096}}"#,
        )
        .unwrap();
        assert_eq!(cfg.max_frame_bytes, 4096);
    }

    #[test]
    fn an_empty_proxy_and_a_plugin_listed_twice_are_refused() {
        let e = parse(r#"{"intercept_builtins": false}"#).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserMcpProxyEmptyProxy);
        // With --workflows the server is not empty: only the built-ins are left out.
        let cfg = parse_config(
            Path::new("/tmp/c.json"),
            r#"{"intercept_builtins": false, "audit_path": "/tmp/t.jsonl"}"#,
            true,
        )
        .unwrap();
        assert!(!cfg.intercept_builtins);
        let e = parse(
            r#"{"plugin_tools": [{"plugin": "k", "expose": ["a"]}, {"plugin": "k", "expose": ["b"]}]}"#,
        )
        .unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserMcpProxyNameCollision);
    }

    #[test]
    fn a_missing_file_or_root_is_invalid_config_and_a_plugin_is_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let e = load(&dir.path().join("absent.json"), false).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserMcpProxyInvalidConfig);
        let cfg = dir.path().join("c.json");
        std::fs::write(&cfg, r#"{"root_dir": "/definitely/not/here"}"#).unwrap();
        assert_eq!(
            load(&cfg, false).unwrap_err().code(),
            ErrorCode::UserMcpProxyInvalidConfig
        );
        std::fs::write(
            &cfg,
            r#"{"plugin_tools": [{"plugin": "k8s", "expose": ["apply"]}]}"#,
        )
        .unwrap();
        assert_eq!(
            load(&cfg, false).unwrap_err().code(),
            ErrorCode::UserMcpProxyUnknownPlugin
        );
        std::fs::write(
            &cfg,
            r#"{"plugin_tools": [{"plugin": "http", "expose": ["reqest"]}]}"#,
        )
        .unwrap();
        let e = load(&cfg, false).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserMcpProxyUnknownOperation);
        assert!(
            e.hints()
                .iter()
                .any(|h| h.contains("did you mean 'request'")),
            "{:?}",
            e.hints()
        );
        std::fs::write(
            &cfg,
            format!(
                r#"{{"root_dir": "{}", "intercept_builtins": false, "plugin_tools": [{{"plugin": "http", "expose": ["request"]}}]}}"#,
                dir.path().display()
            ),
        )
        .unwrap();
        let (loaded, _) = load(&cfg, false).unwrap();
        let names: Vec<String> = plugin_tools(&loaded)
            .unwrap()
            .iter()
            .flat_map(|(source, t)| {
                t.tools()
                    .into_iter()
                    .map(move |s| format!("{source} {}", s.name))
            })
            .collect();
        assert_eq!(names, ["plugin:http http_request"]);
        std::fs::write(
            &cfg,
            format!(r#"{{"root_dir": "{}"}}"#, dir.path().display()),
        )
        .unwrap();
        let (_, root) = load(&cfg, false).unwrap();
        assert_eq!(root, std::fs::canonicalize(dir.path()).unwrap());
        std::fs::write(
            &cfg,
            format!(r#"{{"audit_path": "{}"}}"#, dir.path().display()),
        )
        .unwrap();
        let e = load(&cfg, false).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserMcpProxyInvalidConfig);
        assert!(e.message().contains("is a directory"), "{}", e.message());
    }
}
