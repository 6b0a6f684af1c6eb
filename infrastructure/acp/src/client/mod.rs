//! `provider: acp`: awf as an ACP client, driving any ACP agent (claude through
//! `@agentclientprotocol/claude-agent-acp`, `gemini --acp`, `@agentclientprotocol/codex-acp`, or
//! a command) as the provider of agent steps.
//!
//! Lifecycle (shared/spec/acp.md §4): one agent process per run and launch (program, args,
//! env), started lazily in its own process group and closed at the run's end
//! ([`AgentProvider::end_run`]: stdin EOF, 1 s, SIGTERM to the group, 3 s, SIGKILL);
//! `initialize` once (protocol version 1, no client capabilities), then a fresh `session/new`
//! for every agent step (cwd = the step's directory, `mcpServers` = the step's MCP proxy as a
//! stdio entry, nothing else); a turn that continues a session this connection created (a
//! conversation's next turn) prompts it again. `session/update`s stream into the step
//! (message chunks are the output, thoughts and tool calls become the run's events);
//! `stopReason` becomes a typed outcome; permission requests are answered by
//! [`policy::Policy`].

pub mod attach;
pub mod conn;
pub mod options;
pub mod policy;

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::interaction::ApprovalKind;
use awf_domain::interaction::ApprovalOption;
use awf_domain::ports::agent::AgentCallback;
use awf_domain::ports::agent::AgentChunk;
use awf_domain::ports::agent::AgentProvider;
use awf_domain::ports::agent::AgentRequest;
use awf_domain::ports::agent::AgentResponse;
use awf_domain::ports::agent::AgentSession;
use awf_domain::ports::agent::ApprovalQuestion;
use awf_domain::ports::agent::Role;
use awf_domain::ports::agent::Turn;
use awf_domain::ports::repository::Diagnostic;
use awf_domain::run::TokenUsage;
use serde_json::Map;
use serde_json::Value;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use conn::Conn;
use conn::Inbound;
use conn::Launch;
use conn::RpcError;
use options::AcpOptions;
use policy::Policy;

/// How long a cancelled turn may take to answer `cancelled` before its process group is
/// killed (acp.md §4.8).
pub const CANCEL_GRACE: Duration = Duration::from_secs(5);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

type Cell = Arc<tokio::sync::OnceCell<Arc<Conn>>>;

/// The `acp` agent provider. Keeps the agent processes of each running run.
pub struct AcpProvider {
    env: Arc<BTreeMap<String, String>>,
    conns: Mutex<HashMap<(String, Launch), Cell>>,
}

impl std::fmt::Debug for AcpProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcpProvider").finish_non_exhaustive()
    }
}

impl AcpProvider {
    /// A provider; `env` is awf's process environment (PATH lookup of the agent, inherited by
    /// it).
    pub fn new(env: BTreeMap<String, String>) -> Self {
        Self {
            env: Arc::new(env),
            conns: Mutex::new(HashMap::new()),
        }
    }

    /// The launch of `opts` for `request`: program found on PATH (the request's PATH, else
    /// awf's), awf's environment plus the exported inputs plus `env`.
    fn launch(&self, opts: &AcpOptions, request: &AgentRequest) -> Result<Launch, AwfError> {
        let path_var = request
            .env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone())
            .or_else(|| {
                opts.env
                    .iter()
                    .rev()
                    .find(|(k, _)| k == "PATH")
                    .map(|(_, v)| v.clone())
            })
            .or_else(|| self.env.get("PATH").cloned());
        let program = find_program(&opts.program, path_var.as_deref(), request.dir.as_deref())
            .ok_or_else(|| not_found(opts))?;
        let mut env: Vec<(String, String)> = request.env.clone();
        env.extend(opts.env.iter().cloned());
        Ok(Launch {
            program,
            args: opts.args.clone(),
            env,
            dir: request.dir.clone(),
        })
    }

    /// The run's connection for `launch`, started (and initialized) on first use.
    async fn conn(
        &self,
        run: &str,
        launch: &Launch,
        wait: Duration,
    ) -> Result<Arc<Conn>, AwfError> {
        let key = (run.to_owned(), launch.clone());
        let cell = {
            let mut map = lock(&self.conns);
            let stale = map
                .get(&key)
                .and_then(|c| c.get())
                .is_some_and(|c| c.exited.is_cancelled());
            if stale {
                map.remove(&key);
            }
            Arc::clone(map.entry(key).or_default())
        };
        cell.get_or_try_init(|| start(launch, wait)).await.cloned()
    }

    /// Drops (and kills) the run's connection for `launch`.
    async fn discard(&self, run: Option<&str>, launch: &Launch, conn: &Conn) {
        if let Some(r) = run {
            lock(&self.conns).remove(&(r.to_owned(), launch.clone()));
        }
        conn.close().await;
    }
}

/// Spawns and initializes an agent.
async fn start(launch: &Launch, wait: Duration) -> Result<Arc<Conn>, AwfError> {
    let conn = Conn::spawn(launch).map_err(|e| {
        AwfError::new(
            ErrorCode::ExecutionAgentFailed,
            format!(
                "cannot start the ACP agent {}: {e}",
                launch.program.display()
            ),
        )
    })?;
    let init = conn
        .request(
            "initialize",
            json!({
                "protocolVersion": 1,
                // `session.notices`: adapters send their own notices (warnings, a model
                // fallback) as `notice` updates, not as message chunks mixed into the answer.
                "clientCapabilities": {"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false, "session": {"notices": {}}},
                "clientInfo": {"name": "awf", "version": env!("CARGO_PKG_VERSION")},
            }),
            wait,
        )
        .await;
    let init = match init {
        Ok(v) => v,
        Err(e) => {
            let tail = conn.stderr_tail().await;
            conn.close().await;
            return Err(rpc_failure("initialize", &e, &tail));
        }
    };
    let version = init.get("protocolVersion").and_then(Value::as_u64);
    if version != Some(1) {
        conn.close().await;
        return Err(AwfError::new(
            ErrorCode::UserAcpProtocolVersionUnsupported,
            format!(
                "the ACP agent {} speaks protocol version {}, awf speaks 1",
                launch.program.display(),
                init.get("protocolVersion").cloned().unwrap_or(Value::Null)
            ),
        )
        .with_hint("use an agent (or adapter version) that speaks ACP v1"));
    }
    *lock(&conn.init) = init;
    Ok(conn)
}

fn not_found(opts: &AcpOptions) -> AwfError {
    let mut e = AwfError::new(
        ErrorCode::ExecutionAgentBinaryNotFound,
        format!("ACP agent program \"{}\" not found on PATH", opts.program),
    );
    e = match opts.preset {
        Some(p) => e.with_hint(format!(
            "install it: npm install -g {} (the ACP adapters need Node 22 first on PATH)",
            p.package
        )),
        None => e.with_hint("give the agent's command with an absolute path, or fix PATH"),
    };
    e
}

/// `program` as an absolute path: itself when it names a path (relative to `dir`), else the
/// first executable `PATH` entry.
fn find_program(program: &str, path: Option<&str>, dir: Option<&Path>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        let p = match (p.is_absolute(), dir) {
            (false, Some(d)) => d.join(p),
            _ => p,
        };
        return runnable(&p).then_some(p);
    }
    std::env::split_paths(path?)
        .map(|d| d.join(program))
        .find(|p| runnable(p))
}

fn rpc_failure(method: &str, e: &RpcError, stderr_tail: &str) -> AwfError {
    let mut msg = format!("ACP {method} failed: {}", e.message);
    if e.code != 0 {
        msg.push_str(&format!(" (code {})", e.code));
    }
    if !stderr_tail.is_empty() {
        msg.push_str(&format!("; stderr: {stderr_tail}"));
    }
    let (code, hint) = if e.code == -32000 {
        (
            ErrorCode::ExecutionAgentAuthFailed,
            "log in to the agent (or give it an API key through `env:`) and run again",
        )
    } else if e.message.contains("root/sudo") {
        // Claude Code refuses to bypass its permission checks as root (containers, CI).
        (
            ErrorCode::ExecutionAgentFailed,
            "Claude Code refuses this as root unless it runs in a sandbox: add `env: {IS_SANDBOX: \"1\"}` to the step's options, or run awf as another user",
        )
    } else {
        (
            ErrorCode::ExecutionAgentFailed,
            "read the agent's message; run the agent's command by hand to check it starts",
        )
    };
    AwfError::new(code, msg).with_hint(hint)
}

/// Text of an ACP content block (`text`, or a resource's text); `None` for other blocks.
fn block_text(c: &Value) -> Option<String> {
    match c.get("type").and_then(Value::as_str) {
        Some("text") => c.get("text").and_then(Value::as_str).map(str::to_owned),
        Some("resource") => c
            .get("resource")
            .and_then(|r| r.get("text"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        _ => None,
    }
}

/// The output text of a tool call's `content` (content blocks, diffs, terminals), else its
/// `rawOutput`.
fn tool_output(u: &Value) -> String {
    let mut out = Vec::new();
    if let Some(items) = u.get("content").and_then(Value::as_array) {
        for it in items {
            match it.get("type").and_then(Value::as_str) {
                Some("content") => {
                    if let Some(t) = it.get("content").and_then(block_text) {
                        out.push(t);
                    }
                }
                Some("diff") => out.push(format!(
                    "diff {}",
                    it.get("path").and_then(Value::as_str).unwrap_or("")
                )),
                _ => {}
            }
        }
    }
    if out.is_empty()
        && let Some(raw) = u.get("rawOutput").filter(|v| !v.is_null())
    {
        out.push(match raw {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
    }
    out.join("\n")
}

/// The text of a `notice` update: `title: description`, or the title alone.
fn notice_text(u: &Value) -> Option<String> {
    let title = u.get("title").and_then(Value::as_str).map(str::trim)?;
    let description = u
        .get("description")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|d| !d.is_empty());
    Some(match description {
        Some(d) if !title.is_empty() => format!("{title}: {d}\n"),
        Some(d) => format!("{d}\n"),
        None if title.is_empty() => return None,
        None => format!("{title}\n"),
    })
}

/// What one turn collected.
#[derive(Default)]
struct TurnState {
    /// The turn's output: the text of every `agent_message_chunk`, in order (`messageId`
    /// is optional in ACP and says which message a chunk belongs to, not whether it counts).
    output: String,
    /// The same, as segments: (messageId, text) of each message, one run of chunks not
    /// interrupted by a chunk of another message or a `notice`. A chunk without an id
    /// continues the message before it (or starts one without an id).
    segments: Vec<(Option<String>, String)>,
    /// Whether the last segment is still open (no `notice` came after it).
    segment_open: bool,
    /// The title of the last tool call whose permission awf rejected.
    rejected: Option<String>,
    /// Tool calls seen: id → (kind, title).
    tools: HashMap<String, (Option<String>, String)>,
    finished_tools: std::collections::HashSet<String>,
    /// Tool calls not announced yet (as [`AgentChunk::ToolCall`]) because their input was
    /// still empty: id → (title, rawInput). claude-agent-acp reports a call as soon as the
    /// model starts it, with `rawInput: {}`, and sends the input in a later
    /// `tool_call_update`; the call is announced once it has its input or runs.
    unannounced: HashMap<String, (String, Value)>,
}

/// Whether a tool call's `rawInput` says anything (not absent, null or `{}`).
fn has_input(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Object(m) => !m.is_empty(),
        _ => true,
    }
}

impl TurnState {
    /// The output so far: every message chunk's text, in order.
    fn text(&self) -> String {
        self.output.clone()
    }

    /// The partial output of a turn that ended in `refusal`, and the agent's explanation of
    /// the refusal when it sent one.
    ///
    /// claude-agent-acp (0.101.0) on a refusal: Claude Code continues once after the refused
    /// answer (a second model request), so the refused text streams twice, with a notice
    /// between; then the adapter sends the refusal's explanation as a message chunk of its
    /// own id, right before answering `refusal`. So: a segment repeating the one before is
    /// dropped, and a last segment whose id no earlier segment had, after at least one other,
    /// is the explanation, not output. Without any message id, all of it is output.
    fn refusal_parts(&self) -> (String, Option<String>) {
        if self.segments.iter().all(|s| s.0.is_none()) {
            return (self.text(), None);
        }
        let mut kept: Vec<&(Option<String>, String)> = Vec::new();
        for seg in &self.segments {
            if kept.last().is_some_and(|k| k.1 == seg.1) {
                continue;
            }
            kept.push(seg);
        }
        let mut explanation = None;
        if kept.len() >= 2
            && let Some(last) = kept.last()
            && last.0.is_some()
            && !kept[..kept.len() - 1].iter().any(|k| k.0 == last.0)
        {
            explanation = Some(last.1.trim().to_owned()).filter(|e| !e.is_empty());
            kept.pop();
        }
        let output = kept.iter().map(|k| k.1.as_str()).collect::<String>();
        (output, explanation)
    }

    /// Applies one `session/update`.
    fn update(&mut self, params: &Value, emit: &dyn Fn(AgentChunk)) {
        let Some(u) = params.get("update") else {
            return;
        };
        match u.get("sessionUpdate").and_then(Value::as_str) {
            Some("agent_message_chunk") => {
                if let Some(t) = u.get("content").and_then(block_text) {
                    // Every chunk is output, whether it carries a message id or not (ids
                    // are optional and may be mixed: awf acp-serve labels a step's text
                    // and not its own lines). Adapters' notices come as `notice` updates,
                    // which awf asks for (`session.notices`).
                    let id = u
                        .get("messageId")
                        .filter(|m| !m.is_null())
                        .map(|m| m.as_str().map_or_else(|| m.to_string(), str::to_owned));
                    self.output.push_str(&t);
                    match (self.segments.last_mut(), id) {
                        (Some((last, text)), Some(id))
                            if self.segment_open && last.as_deref() == Some(id.as_str()) =>
                        {
                            text.push_str(&t);
                        }
                        (Some((_, text)), None) if self.segment_open => text.push_str(&t),
                        (_, id) => self.segments.push((id, t.clone())),
                    }
                    self.segment_open = true;
                    emit(AgentChunk::Message(t));
                }
            }
            Some("notice") => {
                // Live information for the user (an adapter's warning, a model fallback),
                // not part of the answer: shown as the agent's reasoning is.
                self.segment_open = false;
                if let Some(t) = notice_text(u) {
                    emit(AgentChunk::Thought(t));
                }
            }
            Some("agent_thought_chunk") => {
                if let Some(t) = u.get("content").and_then(block_text) {
                    emit(AgentChunk::Thought(t));
                }
            }
            Some("tool_call") => {
                let id = u
                    .get("toolCallId")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                let kind = u.get("kind").and_then(Value::as_str).map(str::to_owned);
                let title = u
                    .get("title")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or_else(|| kind.clone())
                    .unwrap_or_else(|| "tool".into());
                if !self.tools.contains_key(&id) {
                    let input = u.get("rawInput").cloned().unwrap_or_else(|| json!({}));
                    if has_input(&input) {
                        emit(AgentChunk::ToolCall {
                            id: id.clone(),
                            name: title.clone(),
                            input,
                        });
                    } else {
                        self.unannounced.insert(id.clone(), (title.clone(), input));
                    }
                }
                self.tools.insert(id.clone(), (kind, title));
                self.announce(&id, u, emit);
                self.tool_status(&id, u, emit);
            }
            Some("tool_call_update") => {
                let id = u
                    .get("toolCallId")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                if let Some(k) = u.get("kind").and_then(Value::as_str)
                    && let Some(t) = self.tools.get_mut(&id)
                {
                    t.0 = Some(k.to_owned());
                }
                if let Some(p) = self.unannounced.get_mut(&id) {
                    if let Some(t) = u.get("title").and_then(Value::as_str) {
                        t.clone_into(&mut p.0);
                    }
                    if let Some(i) = u.get("rawInput") {
                        p.1 = i.clone();
                    }
                }
                self.announce(&id, u, emit);
                self.tool_status(&id, u, emit);
            }
            // plan, usage_update, available_commands_update, current_mode_update,
            // config_option_update, session_info_update, user_message_chunk: not step output.
            _ => {}
        }
    }

    /// Announces tool call `id` when it was held back for its input and `u` gives it, or
    /// the call runs or ended without one.
    fn announce(&mut self, id: &str, u: &Value, emit: &dyn Fn(AgentChunk)) {
        let ready = self.unannounced.get(id).is_some_and(|(_, input)| {
            has_input(input)
                || matches!(
                    u.get("status").and_then(Value::as_str),
                    Some("in_progress" | "completed" | "failed")
                )
        });
        if ready && let Some((name, input)) = self.unannounced.remove(id) {
            emit(AgentChunk::ToolCall {
                id: id.to_owned(),
                name,
                input,
            });
        }
    }

    /// Announces the tool calls still held back for their input (the turn ended).
    fn announce_rest(&mut self, emit: &dyn Fn(AgentChunk)) {
        let mut rest: Vec<(String, (String, Value))> = self.unannounced.drain().collect();
        rest.sort_by(|a, b| a.0.cmp(&b.0));
        for (id, (name, input)) in rest {
            emit(AgentChunk::ToolCall { id, name, input });
        }
    }

    fn tool_status(&mut self, id: &str, u: &Value, emit: &dyn Fn(AgentChunk)) {
        let status = u.get("status").and_then(Value::as_str);
        if matches!(status, Some("completed" | "failed"))
            && self.finished_tools.insert(id.to_owned())
        {
            emit(AgentChunk::ToolResult {
                id: id.to_owned(),
                output: tool_output(u),
                is_error: status == Some("failed"),
            });
        }
    }
}

/// How a turn ended on awf's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Cancelled,
    TimedOut,
}

#[async_trait::async_trait]
impl AgentProvider for AcpProvider {
    fn name(&self) -> &str {
        "acp"
    }

    fn options(&self) -> Option<&'static [&'static str]> {
        Some(options::OPTION_KEYS)
    }

    fn resumes_by_session_id(&self) -> bool {
        true
    }

    fn check_options(&self, options: &Map<String, Value>) -> Vec<Diagnostic> {
        options::check(options)
    }

    async fn end_run(&self, run_id: &str) {
        let closing: Vec<Cell> = {
            let mut map = lock(&self.conns);
            let keys: Vec<(String, Launch)> =
                map.keys().filter(|(r, _)| r == run_id).cloned().collect();
            keys.iter().filter_map(|k| map.remove(k)).collect()
        };
        for c in closing {
            if let Some(conn) = c.get() {
                conn.close().await;
            }
        }
    }

    async fn execute(
        &self,
        request: AgentRequest,
        on_chunk: Option<AgentCallback>,
        cancel: CancellationToken,
    ) -> Result<AgentResponse, AwfError> {
        let opts = AcpOptions::parse(&request.options)?;
        let launch = self.launch(&opts, &request)?;
        let run = request.run_id.clone();
        if cancel.is_cancelled() {
            return Err(cancelled_error());
        }
        // Starting the agent (its `initialize`, up to the step's timeout) gives way to a
        // cancel: a dropped start kills the agent's group (`Conn`'s drop) and leaves a run's
        // connection cell empty.
        let started = async {
            match &run {
                Some(r) => self.conn(r, &launch, opts.timeout).await,
                None => start(&launch, opts.timeout).await,
            }
        };
        let conn = tokio::select! {
            c = started => c?,
            () = cancel.cancelled() => return Err(cancelled_error()),
        };
        let checked = check_auth_method(&lock(&conn.init), &opts);
        let result = match checked {
            Ok(()) => {
                self.turn(&conn, &opts, &launch, &request, on_chunk, &cancel)
                    .await
            }
            Err(e) => Err(e),
        };
        if run.is_none() {
            conn.close().await;
        }
        result
    }
}

/// The agent's `authMethods` (from `initialize`): (id, name) pairs.
fn auth_methods(init: &Value) -> Vec<(String, String)> {
    init.get("authMethods")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|m| {
                    let id = m.get("id").and_then(Value::as_str)?.to_owned();
                    let name = m
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or(&id)
                        .to_owned();
                    Some((id, name))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `id (name)` of each method, comma-separated; `none` for an empty list.
fn methods_list(methods: &[(String, String)]) -> String {
    if methods.is_empty() {
        return "none".into();
    }
    methods
        .iter()
        .map(|(id, name)| {
            if id == name {
                id.clone()
            } else {
                format!("{id} ({name})")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// How to log in to a preset's agent by hand (the hint of an auth failure).
fn login_hint(opts: &AcpOptions) -> &'static str {
    match opts.preset.map(|p| p.name) {
        Some("claude") => {
            "log in once with `claude /login` (or give ANTHROPIC_API_KEY through `env:`)"
        }
        Some("gemini") => {
            "log in once by running `gemini` and choosing /auth (or give GEMINI_API_KEY through `env:`)"
        }
        Some("codex") => "log in once with `codex login` (or give OPENAI_API_KEY through `env:`)",
        _ => "log in with the agent's own command (or give it an API key through `env:`)",
    }
}

/// Checks the step's `auth_method` against the `authMethods` the agent advertised in its
/// `initialize` answer: right after `initialize`, before any file is read or session asked
/// for, whether or not the agent will ask for authentication.
///
/// # Errors
/// `USER.AGENT.INVALID_OPTION` when `auth_method` is none of them: the message names the
/// agent's methods, the hint the closest one (did-you-mean).
fn check_auth_method(init: &Value, opts: &AcpOptions) -> Result<(), AwfError> {
    let Some(m) = &opts.auth_method else {
        return Ok(());
    };
    let methods = auth_methods(init);
    if methods.iter().any(|(id, _)| id == m) {
        return Ok(());
    }
    let ids: Vec<&str> = methods.iter().map(|(id, _)| id.as_str()).collect();
    let hint = match awf_domain::validate::closest(m, ids.iter().copied()) {
        Some(c) => format!("did you mean '{c}'? set `auth_method:` to one of the agent's methods"),
        None if ids.is_empty() => {
            "remove `auth_method:`: this agent advertises no authentication method".to_owned()
        }
        None => format!("set `auth_method:` to one of: {}", ids.join(", ")),
    };
    Err(AwfError::new(
        ErrorCode::UserAgentInvalidOption,
        format!(
            "acp option auth_method: the agent offers no authentication method \"{m}\"; its methods (from initialize): {}",
            methods_list(&methods)
        ),
    )
    .with_hint(hint)
    .with_detail("option", "auth_method")
    .with_detail("auth_methods", ids))
}

/// `session/new` with `params`; when the agent answers `-32000` (authentication required,
/// acp.md §4 step 3) and the step names `auth_method` (checked by [`check_auth_method`]),
/// `authenticate {methodId}` and one retry.
///
/// # Errors
/// `EXECUTION.AGENT.AUTH_FAILED` when authentication is required and no
/// method is named, or `authenticate` or the retry fails (the agent's methods and how to log
/// in in the hint); `EXECUTION.AGENT.FAILED` for other failures.
async fn new_session(conn: &Conn, params: Value, opts: &AcpOptions) -> Result<Value, AwfError> {
    let wait = opts.timeout;
    let methods = auth_methods(&lock(&conn.init));
    let first = match conn.request("session/new", params.clone(), wait).await {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    if first.code != -32000 {
        return Err(rpc_failure(
            "session/new",
            &first,
            &conn.stderr_tail().await,
        ));
    }
    let Some(method) = &opts.auth_method else {
        let suggestion = methods.first().map_or_else(String::new, |(id, _)| {
            format!(
                "set `auth_method: {id}` in the step's options to let awf call authenticate, or "
            )
        });
        return Err(AwfError::new(
            ErrorCode::ExecutionAgentAuthFailed,
            format!(
                "the ACP agent requires authentication (session/new: {}, code -32000); its authentication methods: {}",
                first.message,
                methods_list(&methods)
            ),
        )
        .with_hint(format!("{suggestion}{}", login_hint(opts)))
        .with_detail("auth_methods", methods.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>()));
    };
    let auth_failed = |what: &str, e: &RpcError| {
        AwfError::new(
            ErrorCode::ExecutionAgentAuthFailed,
            format!(
                "ACP {what} failed with auth_method \"{method}\": {} (code {})",
                e.message, e.code
            ),
        )
        .with_hint(format!(
            "check the credentials that method uses (the agent's methods: {}), or {}",
            methods_list(&methods),
            login_hint(opts)
        ))
    };
    conn.request("authenticate", json!({"methodId": method}), wait)
        .await
        .map_err(|e| auth_failed("authenticate", &e))?;
    tracing::info!(target: "awf::acp::client", method = %method, "authenticated; retrying session/new");
    conn.request("session/new", params, wait)
        .await
        .map_err(|e| {
            if e.code == -32000 {
                auth_failed("session/new after authenticate", &e)
            } else {
                rpc_failure("session/new", &e, "")
            }
        })
}

fn cancelled_error() -> AwfError {
    AwfError::new(ErrorCode::ExecutionRunCancelled, "ACP turn cancelled")
}

impl AcpProvider {
    #[allow(clippy::too_many_lines)]
    async fn turn(
        &self,
        conn: &Arc<Conn>,
        opts: &AcpOptions,
        launch: &Launch,
        request: &AgentRequest,
        on_chunk: Option<AgentCallback>,
        cancel: &CancellationToken,
    ) -> Result<AgentResponse, AwfError> {
        let run = request.run_id.as_deref();
        let emit = |c: AgentChunk| {
            if let Some(cb) = &on_chunk {
                cb(c);
            }
        };
        // The attached files, read before a session exists (a missing one opens none).
        let attached = if opts.attach.is_empty() {
            Vec::new()
        } else {
            let dir = request
                .dir
                .clone()
                .or_else(|| std::env::current_dir().ok())
                .unwrap_or_else(|| PathBuf::from("/"));
            let caps = attach::PromptCaps::of_init(&lock(&conn.init));
            attach::blocks(&opts.attach, &dir, caps)?
        };
        // A session this connection created (a conversation's earlier turn) is prompted
        // again; anything else gets a fresh session (the isolation rule).
        let resumed = request
            .session
            .as_ref()
            .and_then(|s| s.session_id.clone())
            .filter(|id| conn.knows(id));
        let (session_id, mut inbound) = match resumed {
            Some(id) => {
                let rx = conn.listen(&id);
                (id, rx)
            }
            None => {
                let cwd = request
                    .dir
                    .clone()
                    .or_else(|| std::env::current_dir().ok())
                    .unwrap_or_else(|| PathBuf::from("/"));
                let mut servers = Vec::new();
                if let Some(p) = request.mcp.as_ref().and_then(|m| m.proxy.as_ref()) {
                    servers.push(json!({
                        "name": p.name,
                        "command": p.command,
                        "args": p.args,
                        "env": p.env.iter().map(|(k, v)| json!({"name": k, "value": v})).collect::<Vec<_>>(),
                    }));
                }
                let created =
                    new_session(conn, json!({"cwd": cwd, "mcpServers": servers}), opts).await?;
                let Some(id) = created
                    .get("sessionId")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                else {
                    return Err(AwfError::new(
                        ErrorCode::ExecutionAgentFailed,
                        "ACP session/new answered without a sessionId",
                    ));
                };
                let rx = conn.listen(&id);
                self.configure(conn, &id, &created, opts).await?;
                (id, rx)
            }
        };
        let fresh = request
            .session
            .as_ref()
            .and_then(|s| s.session_id.as_deref())
            != Some(session_id.as_str());
        let mut text = String::new();
        if fresh {
            if request
                .mcp
                .as_ref()
                .is_some_and(|m| m.intercept_builtins && m.proxy.is_some())
            {
                text.push_str(awf_domain::ports::agent::MCP_ONLY_PROMPT);
            }
            if let Some(sys) = request
                .system_prompt
                .as_deref()
                .filter(|s| !s.trim().is_empty())
            {
                text.push_str(sys);
                text.push_str("\n\n");
            }
        }
        text.push_str(&request.prompt);
        let mut prompt = vec![json!({"type": "text", "text": text})];
        if fresh {
            // A conversation's later turns of the same session have the files already.
            prompt.extend(attached);
        }
        let mut answer = conn.start_request(
            "session/prompt",
            json!({"sessionId": session_id, "prompt": prompt}),
        );
        let mut state = TurnState::default();
        let deadline = request.timeout.map(|t| tokio::time::Instant::now() + t);
        let mut stopping: Option<(Stop, tokio::time::Instant)> = None;
        let far = || tokio::time::Instant::now() + Duration::from_secs(365 * 24 * 3600);
        let result = loop {
            let grace_end = stopping.map_or_else(far, |(_, g)| g);
            let turn_end = if stopping.is_some() {
                far()
            } else {
                deadline.unwrap_or_else(far)
            };
            tokio::select! {
                biased;
                r = &mut answer => break r.unwrap_or_else(|_| Err(RpcError { code: 0, message: "the agent process ended".into() })),
                m = inbound.recv() => match m {
                    Some(Inbound::Update(p)) => state.update(&p, &emit),
                    Some(Inbound::Permission { id, params }) => {
                        let choice = if stopping.is_some() {
                            None
                        } else {
                            self.permission(opts, request, &state, &params, cancel).await
                        };
                        let opts_of = policy::options(&params);
                        let allowed = choice.as_deref().is_some_and(|c| {
                            opts_of.iter().any(|(id, kind)| id == c && kind.starts_with("allow"))
                        });
                        if !allowed {
                            let call = params.get("toolCall");
                            let id = call.and_then(|c| c.get("toolCallId")).and_then(Value::as_str).unwrap_or("");
                            state.rejected = Some(
                                call.and_then(|c| c.get("title")).and_then(Value::as_str).map(str::to_owned)
                                    .or_else(|| state.tools.get(id).map(|t| t.1.clone()))
                                    .unwrap_or_else(|| "a tool".into()),
                            );
                        }
                        conn.reply(id, policy::outcome(choice.as_deref()));
                    }
                    None => {}
                },
                () = cancel.cancelled(), if stopping.is_none() => {
                    conn.notify("session/cancel", json!({"sessionId": session_id}));
                    stopping = Some((Stop::Cancelled, tokio::time::Instant::now() + CANCEL_GRACE));
                }
                () = tokio::time::sleep_until(turn_end), if stopping.is_none() && deadline.is_some() => {
                    conn.notify("session/cancel", json!({"sessionId": session_id}));
                    stopping = Some((Stop::TimedOut, tokio::time::Instant::now() + CANCEL_GRACE));
                }
                () = tokio::time::sleep_until(grace_end), if stopping.is_some() => {
                    // No `cancelled` within the grace: the agent is stuck; its group goes.
                    self.discard(run, launch, conn).await;
                    break Err(RpcError { code: 0, message: "the agent did not stop after session/cancel".into() });
                }
            }
        };
        // Updates sent before the answer are queued already.
        while let Ok(m) = inbound.try_recv() {
            match m {
                Inbound::Update(p) => state.update(&p, &emit),
                Inbound::Permission { id, .. } => conn.reply(id, policy::outcome(None)),
            }
        }
        state.announce_rest(&emit);
        let stderr = conn.stderr_tail().await;
        if request.session.is_none() {
            // Not a conversation: nothing continues this session. An agent that can close
            // sessions frees it now (claude-agent-acp keeps a Claude Code process per
            // session); the answer is not waited for.
            conn.forget(&session_id);
            let closes = lock(&conn.init)
                .pointer("/agentCapabilities/sessionCapabilities/close")
                .is_some_and(|v| !v.is_null());
            if closes && !conn.exited.is_cancelled() {
                drop(conn.start_request("session/close", json!({"sessionId": session_id})));
            }
        }
        let partial = |e: AwfError, output: &str| {
            if output.is_empty() {
                e
            } else {
                e.with_detail("partial_output", output.to_owned())
            }
        };
        if let Some((why, _)) = stopping {
            return Err(match why {
                Stop::Cancelled => cancelled_error(),
                Stop::TimedOut => partial(
                    AwfError::new(
                        ErrorCode::ExecutionAgentTimeout,
                        format!(
                            "ACP agent turn exceeded its timeout of {}s",
                            request.timeout.map_or(0, |t| t.as_secs())
                        ),
                    )
                    .with_hint("raise `timeout:` on the agent step"),
                    &state.text(),
                ),
            });
        }
        let resp = match result {
            Ok(v) => v,
            Err(e) => {
                if conn.exited.is_cancelled() {
                    self.discard(run, launch, conn).await;
                }
                // Some adapters throw -32603 for token exhaustion instead of the stop
                // reason (claude-agent-acp after claude's own retries): still a typed
                // max_tokens outcome (acp.md §4.7).
                if is_token_exhaustion(&e.message) {
                    return Err(partial(
                        AwfError::new(
                            ErrorCode::ExecutionAgentMaxTokens,
                            format!("the agent stopped at its token limit: {}", e.message),
                        )
                        .with_hint("ask for a shorter answer or raise the model's limit; on_failure can route it")
                        .with_detail("stop_reason", "max_tokens"),
                        &state.text(),
                    ));
                }
                return Err(partial(
                    rpc_failure("session/prompt", &e, &stderr),
                    &state.text(),
                ));
            }
        };
        let stop = resp.get("stopReason").and_then(Value::as_str).unwrap_or("");
        let failure = |code: ErrorCode, msg: &str, hint: &str| {
            Err(partial(
                AwfError::new(code, msg.to_owned())
                    .with_hint(hint.to_owned())
                    .with_detail("stop_reason", stop.to_owned()),
                &state.text(),
            ))
        };
        match stop {
            "end_turn" => {}
            "refusal" => {
                // The partial answer once, and the agent's explanation in the error.
                let (output, explanation) = state.refusal_parts();
                let mut e = AwfError::new(
                    ErrorCode::ExecutionAgentRefusal,
                    match explanation.as_deref().and_then(|x| x.lines().next()) {
                        Some(why) => {
                            format!("the agent refused the prompt (stopReason refusal): {why}")
                        }
                        None => "the agent refused the prompt (stopReason refusal)".to_owned(),
                    },
                )
                .with_hint("rephrase the prompt, or route the refusal with on_failure")
                .with_detail("stop_reason", stop.to_owned());
                if let Some(x) = explanation {
                    e = e.with_detail("refusal_explanation", x);
                }
                return Err(partial(e, &output));
            }
            "max_tokens" => {
                return failure(
                    ErrorCode::ExecutionAgentMaxTokens,
                    "the agent stopped at its token limit (stopReason max_tokens)",
                    "ask for a shorter answer or raise the model's limit; on_failure can route it",
                );
            }
            "max_turn_requests" => {
                return failure(
                    ErrorCode::ExecutionAgentMaxTurns,
                    "the agent stopped at its limit of model requests (stopReason max_turn_requests)",
                    "split the task into smaller steps",
                );
            }
            "cancelled" if state.rejected.is_some() => {
                let what = state.rejected.clone().unwrap_or_default();
                return failure(
                    ErrorCode::ExecutionAgentPermissionDenied,
                    &format!(
                        "the agent ended the turn after awf rejected its request to run {what} (permissions: {})",
                        opts.permissions.name()
                    ),
                    "allow it with `permissions: read_only`, `allow_all` or `ask`, or route the failure with on_failure",
                );
            }
            "cancelled" => {
                return failure(
                    ErrorCode::ExecutionAgentFailed,
                    "the agent cancelled the turn itself (stopReason cancelled)",
                    "read the agent's stderr; awf did not cancel this turn",
                );
            }
            other => {
                return failure(
                    ErrorCode::ExecutionAgentFailed,
                    &format!("the agent ended the turn with an unknown stopReason {other:?}"),
                    "check the agent speaks ACP v1",
                );
            }
        }
        let tokens = usage(&resp).unwrap_or_else(|| {
            let out = (state.text().len() as u64).div_ceil(4);
            let input = (text.len() as u64).div_ceil(4);
            TokenUsage {
                input,
                output: out,
                total: input + out,
                estimated: true,
            }
        });
        let session = request.session.as_ref().map(|s| {
            let mut turns = s.turns.clone();
            turns.push(Turn {
                role: Role::User,
                content: request.prompt.clone(),
            });
            turns.push(Turn {
                role: Role::Assistant,
                content: state.text(),
            });
            AgentSession {
                session_id: Some(session_id.clone()),
                turns,
            }
        });
        Ok(AgentResponse {
            output: state.text(),
            response: Some(
                json!({"sessionId": session_id, "stopReason": stop, "usage": resp.get("usage").cloned().unwrap_or(Value::Null)}),
            ),
            tokens,
            session,
            raw: String::new(),
            stderr,
            // The model asked for (options.model), so prices can look it up.
            model: opts.model.clone(),
        })
    }

    /// `mode` and `model`: through `session/set_mode` (or the session's config option of
    /// category `mode`) and the config option of category `model` (or `session/set_model`).
    async fn configure(
        &self,
        conn: &Conn,
        session: &str,
        created: &Value,
        opts: &AcpOptions,
    ) -> Result<(), AwfError> {
        let config_option = |category: &str| {
            created
                .get("configOptions")
                .and_then(Value::as_array)
                .and_then(|a| {
                    a.iter()
                        .find(|o| o.get("category").and_then(Value::as_str) == Some(category))
                })
                .and_then(|o| o.get("id").and_then(Value::as_str))
                .map(str::to_owned)
        };
        let set = |method: &'static str, params: Value| async move {
            conn.request(method, params, opts.timeout)
                .await
                .map(|_| ())
                .map_err(|e| {
                    AwfError::new(
                        ErrorCode::UserAgentInvalidOption,
                        format!("ACP {method} failed: {} (code {})", e.message, e.code),
                    )
                })
        };
        if let Some(mode) = &opts.mode {
            let modes: Vec<String> = created
                .pointer("/modes/availableModes")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|m| m.get("id").and_then(Value::as_str).map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            if modes.iter().any(|m| m == mode) {
                set(
                    "session/set_mode",
                    json!({"sessionId": session, "modeId": mode}),
                )
                .await?;
            } else if let Some(id) = config_option("mode") {
                set(
                    "session/set_config_option",
                    json!({"sessionId": session, "configId": id, "value": mode}),
                )
                .await?;
            } else {
                return Err(AwfError::new(
                    ErrorCode::UserAgentInvalidOption,
                    format!("acp option mode: the agent offers no mode \"{mode}\""),
                )
                .with_hint(if modes.is_empty() {
                    "this agent has no session modes: remove `mode:`".to_owned()
                } else {
                    format!("modes it offers: {}", modes.join(", "))
                }));
            }
        }
        if let Some(model) = &opts.model {
            if let Some(id) = config_option("model") {
                set(
                    "session/set_config_option",
                    json!({"sessionId": session, "configId": id, "value": model}),
                )
                .await?;
            } else if created.get("models").is_some() {
                set(
                    "session/set_model",
                    json!({"sessionId": session, "modelId": model}),
                )
                .await?;
            } else {
                tracing::warn!(target: "awf::acp::client", model = %model, "the ACP agent offers no model selection; `model` is ignored");
            }
        }
        Ok(())
    }

    /// Answers one permission request by the step's policy (`ask`: through the run's
    /// approver, the policy `deny` when nobody answers).
    async fn permission(
        &self,
        opts: &AcpOptions,
        request: &AgentRequest,
        state: &TurnState,
        params: &Value,
        cancel: &CancellationToken,
    ) -> Option<String> {
        let options = policy::options(params);
        let call = params.get("toolCall").cloned().unwrap_or_default();
        let id = call.get("toolCallId").and_then(Value::as_str).unwrap_or("");
        let known = state.tools.get(id);
        let kind = call
            .get("kind")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| known.and_then(|k| k.0.clone()));
        let decided = match (opts.permissions, &request.approver) {
            (Policy::Ask, Some(approver)) => {
                let title = call
                    .get("title")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or_else(|| known.map(|k| k.1.clone()))
                    .unwrap_or_else(|| "a tool".into());
                let mut message = format!("the agent asks to run {title}");
                if let Some(k) = &kind {
                    message.push_str(&format!(" ({k})"));
                }
                if let Some(input) = call.get("rawInput").filter(|v| !v.is_null()) {
                    message.push_str(&format!(": {input}"));
                }
                let choices: Vec<ApprovalOption> = params
                    .get("options")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|o| {
                                Some(ApprovalOption {
                                    id: o.get("optionId")?.as_str()?.to_owned(),
                                    name: o
                                        .get("name")
                                        .and_then(Value::as_str)
                                        .unwrap_or("")
                                        .to_owned(),
                                    kind: ApprovalKind::parse(o.get("kind")?.as_str()?)?,
                                })
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let asked = (approver.0)(
                    ApprovalQuestion {
                        message,
                        options: choices.clone(),
                    },
                    Some(opts.timeout),
                );
                let answered = tokio::select! {
                    a = asked => a,
                    () = cancel.cancelled() => None,
                };
                answered.filter(|a| choices.iter().any(|c| &c.id == a))
            }
            _ => None,
        };
        if matches!(opts.permissions, Policy::Ask) && decided.is_none() {
            // Nobody could answer (no terminal, no editor or page, a timeout): say so, since
            // the agent goes on as if refused.
            tracing::warn!(target: "awf::acp::client", tool = %id, kind = ?kind, "permissions: ask: nobody answered the agent's permission request, so it was rejected");
        }
        let choice =
            decided.or_else(|| policy::decide(opts.permissions, &options, kind.as_deref()));
        tracing::info!(target: "awf::acp::client", tool = %id, kind = ?kind, policy = ?opts.permissions, choice = ?choice, "permission answered");
        choice
    }
}

/// Whether a JSON-RPC error message on `session/prompt` reports token exhaustion (claude:
/// "response exceeded the 128000 output token maximum").
fn is_token_exhaustion(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("output token maximum")
        || m.contains("max_tokens")
        || m.contains("maximum output tokens")
}

/// Token counts of a `session/prompt` result's `usage` (ACP `Usage`: `inputTokens`,
/// `outputTokens`, `totalTokens`), when the agent reports them.
fn usage(resp: &Value) -> Option<TokenUsage> {
    let u = resp.get("usage")?;
    let n = |k: &str| u.get(k).and_then(Value::as_u64);
    let input = n("inputTokens")?;
    let output = n("outputTokens").unwrap_or(0);
    Some(TokenUsage {
        input,
        output,
        total: n("totalTokens").unwrap_or(input + output),
        estimated: false,
    })
}

#[cfg(test)]
mod tests;
