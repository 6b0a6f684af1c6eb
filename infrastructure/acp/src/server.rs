//! The ACP agent: dispatches client frames, keeps sessions, drives one run per prompt through
//! the [`RunService`] and projects its events as `session/update` frames.
//! Source: shared/spec/acp.md §1, §2, §3, §8.

use std::collections::HashMap;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;

use awf_domain::event::RunEvent;
use awf_domain::interaction::Answer;
use awf_domain::interaction::ApprovalKind;
use awf_domain::interaction::InteractionRequest;
use awf_domain::interaction::RequestKind;
use awf_domain::mask::Masker;
use awf_domain::ports::RunService;
use awf_domain::ports::agent::McpServer;
use awf_domain::ports::facade::RunRequest;
use awf_domain::ports::repository::WorkflowRepository;
use awf_domain::ports::service::Subscription;
use awf_domain::ports::service::SubscriptionItem;
use awf_domain::run::CancelReason;
use awf_domain::run::RunId;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use awf_domain::workflow::StateKind;
use serde_json::Map;
use serde_json::Value;
use serde_json::json;
use tokio::io::AsyncBufRead;
use tokio::io::AsyncWrite;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::frames;
use crate::prompt;
use crate::transport;
use crate::transport::Line;
use crate::transport::Outbox;

/// JSON-RPC parse error.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC invalid request.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC method not found.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC invalid params.
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC internal error.
pub const INTERNAL_ERROR: i64 = -32603;
/// ACP resource (session) not found.
pub const NOT_FOUND: i64 = -32002;

/// Longest prompt text, bytes (acp.md §2.4).
pub const MAX_PROMPT_BYTES: usize = 1 << 20;
/// Longest text in one `agent_message_chunk` (some clients cap lines at 64 KiB).
const MAX_CHUNK: usize = 16 * 1024;
/// Longest excerpt of a step's output in its tool call content.
const MAX_EXCERPT: usize = 16 * 1024;

/// What the server needs: the run service and the workflows, and the defaults of its runs.
#[derive(Clone)]
pub struct AcpConfig {
    /// The run service every prompt goes through.
    pub service: Arc<dyn RunService>,
    /// The workflows listed as slash commands (and loaded for plans and step titles).
    pub repository: Arc<dyn WorkflowRepository>,
    /// Workflow for prompts that are not slash commands (their text is its `prompt` input).
    pub default_workflow: Option<String>,
    /// Environment of the runs.
    pub env: Vec<(String, String)>,
    /// Project configuration inputs.
    pub config_inputs: Map<String, Value>,
    /// Secrets masked in every frame (the process environment's), to which each session adds
    /// its editor MCP servers' env values.
    pub masker: Masker,
    /// `agentInfo.version`.
    pub version: String,
    /// Longest input line, bytes (10 MiB).
    pub max_line_bytes: usize,
    /// How long a cancelled prompt waits for its run to end before it answers `cancelled`
    /// anyway (the run's processes get SIGTERM, then SIGKILL after 5 s).
    pub cancel_wait: Duration,
    /// How long shutdown (stdin EOF, SIGTERM) waits for cancelled runs to end.
    pub shutdown_wait: Duration,
    /// Why a workflow is broken, as every list of workflows says it (`awf validate`'s first
    /// error and the number of its others): a workflow it names a reason for is left out of
    /// the slash commands (logged with that reason), and prompting it answers that reason.
    /// `None`: no checks beyond loading.
    pub validate: Option<Validator>,
    /// Where sessions are kept across restarts (one JSON file per session; `awf acp-serve`:
    /// `<data root>/acp/sessions`): after a restart `session/list` lists them and
    /// `session/load` replays their runs from the store. `None`: sessions live as long as
    /// the process.
    pub sessions_dir: Option<PathBuf>,
}

/// A workflow check, given a workflow's identifier (its name, or its file's path): `Some`
/// with why it is broken (`[CODE] line L, column C: <path>: <message> (and N more
/// error(s); …)`), `None` when it is valid.
pub type Validator = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

impl std::fmt::Debug for AcpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcpConfig")
            .field("default_workflow", &self.default_workflow)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// A session's approval mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Ask,
    Auto,
}

impl Mode {
    fn from_id(id: &str) -> Self {
        if id == "auto" { Self::Auto } else { Self::Ask }
    }

    fn id(self) -> &'static str {
        match self {
            Self::Ask => "ask",
            Self::Auto => "auto",
        }
    }
}

/// A run waiting for the next prompt (a question the editor could not be asked otherwise).
struct Parked {
    run_id: RunId,
    workflow: String,
    request_id: String,
    /// The input asked for has a secret name: the answer (the next message) is a secret.
    secret: bool,
    /// The missing input asked for (`None`: a conversation turn).
    input: Option<String>,
    sub: Box<dyn Subscription>,
    projector: Projector,
}

/// One prompt of a session: what `session/load` replays (the prompt, the log of the run it
/// started up to what the session saw, the messages awf wrote itself).
#[derive(Clone)]
struct RunRecord {
    /// Names the turn in the session file, across processes.
    key: String,
    prompt: String,
    /// The run it started, when it started one.
    run_id: Option<RunId>,
    /// That run's workflow identifier (the replay's step titles and raw inputs come from it).
    workflow: Option<String>,
    /// Last log position this session delivered.
    seen: u64,
    /// Messages of the turn that are not run events ("Invalid prompt: …", outcomes).
    notes: Vec<String>,
}

/// A run's workflow and the inputs it was given.
type Given = (String, Vec<(String, String)>);

struct Session {
    id: String,
    cwd: PathBuf,
    mcp_servers: Mutex<Vec<McpServer>>,
    mode: Mutex<Mode>,
    in_flight: AtomicBool,
    /// Set by `session/close` (under `gate`): no update of this session is written after it.
    closed: AtomicBool,
    /// Held while the in-flight flag is taken, and while a turn queues its response and
    /// releases the flag: a client that read the response always finds the flag free.
    gate: Mutex<()>,
    /// Cancels the prompt in flight.
    turn: Mutex<Option<CancellationToken>>,
    parked: tokio::sync::Mutex<Option<Parked>>,
    /// `workflow\0gate-step` pairs the user chose `allow_always` / `reject_always` for.
    always: Mutex<HashMap<String, bool>>,
    runs: Mutex<Vec<RunRecord>>,
    /// Key of the record of the turn in flight (its notes go there).
    current: Mutex<Option<String>>,
    /// The inputs of the run in flight as far as they can be saved (`None` when one is
    /// secret-named): a missing input it asks for is saved with them.
    given: Mutex<Option<Given>>,
    /// A missing input asked for and waiting for the next message, kept in the session file:
    /// after a restart (the run that asked is gone) the answer starts the workflow again.
    pending: Mutex<Option<crate::sessions::SavedPending>>,
    title: Mutex<Option<String>>,
    updated_at: Mutex<Option<String>>,
    /// The editor's file channel, when the client offers both fs methods (fs delegation).
    fs: Mutex<Option<crate::fs_bridge::FsBridge>>,
}

struct Shared {
    cfg: AcpConfig,
    out: Outbox,
    masker: Arc<std::sync::RwLock<Masker>>,
    client_caps: Mutex<Value>,
    initialized: AtomicBool,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// Closed sessions, kept for `session/load`.
    closed: Mutex<HashMap<String, Arc<Session>>>,
    pending: Mutex<HashMap<String, oneshot::Sender<Result<Value, Value>>>>,
    next_id: AtomicU64,
    /// Prompt request id → its session, while the prompt runs (for `$/cancel_request`).
    prompt_ids: Mutex<HashMap<String, String>>,
    turns: Mutex<tokio::task::JoinSet<()>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Serves ACP on `reader`/`writer` until the input ends or `shutdown` fires; then cancels
/// every session's run and waits (at most `shutdown_wait`) for them to end.
///
/// # Errors
/// None today: I/O failures end the connection (logged).
pub async fn serve<R, W>(
    cfg: AcpConfig,
    mut reader: R,
    writer: W,
    shutdown: CancellationToken,
) -> Result<(), awf_domain::AwfError>
where
    R: AsyncBufRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let masker = Arc::new(std::sync::RwLock::new(cfg.masker.clone()));
    let (out, writer_task) = transport::writer(writer, Arc::clone(&masker));
    let cap = cfg.max_line_bytes;
    let shared = Arc::new(Shared {
        cfg,
        out,
        masker,
        client_caps: Mutex::new(Value::Null),
        initialized: AtomicBool::new(false),
        sessions: Mutex::new(HashMap::new()),
        closed: Mutex::new(HashMap::new()),
        pending: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(0),
        prompt_ids: Mutex::new(HashMap::new()),
        turns: Mutex::new(tokio::task::JoinSet::new()),
    });
    restore_sessions(&shared);
    loop {
        let line = tokio::select! {
            l = transport::read_line(&mut reader, cap) => l,
            () = shutdown.cancelled() => break,
        };
        match line {
            Ok(Line::Eof) => break,
            Err(e) => {
                tracing::debug!(target: "awf::acp", error = %e, "stdin failed");
                break;
            }
            Ok(Line::TooLong) => shared.out.send(frames::error(
                &Value::Null,
                PARSE_ERROR,
                &format!("Parse error: line longer than {cap} bytes (dropped)"),
                None,
            )),
            Ok(Line::NotUtf8) => shared.out.send(frames::error(
                &Value::Null,
                PARSE_ERROR,
                "Parse error: line is not UTF-8",
                None,
            )),
            Ok(Line::Text(text)) => match transport::parse_strict(&text) {
                Ok(v) => dispatch(&shared, v).await,
                Err(transport::Strict::Duplicate(key)) => shared.out.send(frames::error(
                    &Value::Null,
                    INVALID_REQUEST,
                    &format!("Invalid request: the key {key} appears more than once in the frame"),
                    None,
                )),
                Err(transport::Strict::Syntax(e)) => shared.out.send(frames::error(
                    &Value::Null,
                    PARSE_ERROR,
                    &format!(
                        "Parse error: invalid JSON at line {} column {}",
                        e.line(),
                        e.column()
                    ),
                    None,
                )),
            },
        }
    }
    // Shutdown: cancel every session's work, wait for the turns to answer.
    let sessions: Vec<Arc<Session>> = lock(&shared.sessions).values().cloned().collect();
    for s in &sessions {
        cancel_session(&shared, s).await;
    }
    let mut turns = std::mem::take(&mut *lock(&shared.turns));
    let _ = tokio::time::timeout(shared.cfg.shutdown_wait, async {
        while turns.join_next().await.is_some() {}
    })
    .await;
    turns.abort_all();
    // The sessions' file channels: sockets closed, their directories removed.
    for s in &sessions {
        drop(lock(&s.fs).take());
    }
    lock(&shared.pending).clear();
    shared.out.close();
    drop(shared);
    let _ = tokio::time::timeout(Duration::from_millis(200), writer_task).await;
    Ok(())
}

fn params_of(v: &Value) -> Value {
    v.get("params").cloned().unwrap_or(Value::Null)
}

async fn dispatch(shared: &Arc<Shared>, v: Value) {
    let Some(obj) = v.as_object() else {
        shared.out.send(frames::error(
            &Value::Null,
            INVALID_REQUEST,
            "Invalid request: a frame must be a JSON object",
            None,
        ));
        return;
    };
    let id = obj.get("id").cloned();
    // JSON-RPC 2.0 §4 / §5.1: an id is a string, an integer or null; a bad one is not
    // echoed (the answer carries id null).
    if let Some(bad) = id.as_ref().filter(|i| !valid_id(i)) {
        let kind = match bad {
            Value::Number(_) => "a fractional number",
            Value::Object(_) => "an object",
            Value::Array(_) => "an array",
            _ => "a boolean",
        };
        shared.out.send(frames::error(
            &Value::Null,
            INVALID_REQUEST,
            &format!("Invalid request: `id` must be a string, an integer or null, not {kind}"),
            None,
        ));
        return;
    }
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        // A response (no method) with a bad version: its id is ours, not the client's.
        let echo = if obj.contains_key("method") {
            id.clone().unwrap_or(Value::Null)
        } else {
            Value::Null
        };
        shared.out.send(frames::error(
            &echo,
            INVALID_REQUEST,
            "Invalid request: `jsonrpc` must be the string \"2.0\"",
            None,
        ));
        return;
    }
    let Some(method) = obj.get("method").and_then(Value::as_str).map(str::to_owned) else {
        // A response to one of our requests.
        if let Some(id) = &id
            && (obj.contains_key("result") || obj.contains_key("error"))
        {
            let key = id_key(id);
            if let Some(tx) = lock(&shared.pending).remove(&key) {
                let r = match obj.get("error") {
                    Some(e) => Err(e.clone()),
                    None => Ok(obj.get("result").cloned().unwrap_or(Value::Null)),
                };
                let _ = tx.send(r);
            }
            return;
        }
        shared.out.send(frames::error(
            &id.unwrap_or(Value::Null),
            INVALID_REQUEST,
            "Invalid request: no method",
            None,
        ));
        return;
    };
    let params = params_of(&v);
    // ACP params are always by name: an array (or a scalar) is refused, `null` reads as none.
    if !matches!(params, Value::Object(_) | Value::Null) {
        match &id {
            Some(id) => shared.out.send(frames::error(
                id,
                INVALID_PARAMS,
                &format!("Invalid params: `params` of `{method}` must be an object"),
                None,
            )),
            None => {
                tracing::debug!(target: "awf::acp", method, "notification with non-object params ignored");
            }
        }
        return;
    }
    let Some(id) = id else {
        notification(shared, &method, &params).await;
        return;
    };
    if method != "initialize" && !shared.initialized.load(Ordering::SeqCst) {
        shared.out.send(frames::error(
            &id,
            INVALID_REQUEST,
            &format!("ACP initialization must complete before `{method}` can be used"),
            None,
        ));
        return;
    }
    let reply = match method.as_str() {
        "initialize" => initialize(shared, &params),
        "session/new" => new_session(shared, &params),
        "session/prompt" => {
            start_prompt(shared, id, params);
            return;
        }
        "session/load" => {
            start_load(shared, id, params);
            return;
        }
        "session/cancel" => {
            // AWF (Go)'s own tests send it as a request.
            cancel_notification(shared, &params)
                .await
                .map(|()| (json!({}), Vec::new()))
        }
        "session/list" => list_sessions(shared, &params),
        "session/close" => close_session(shared, &params).await,
        "session/set_mode" => set_mode(shared, &params),
        "authenticate" => Err(rpc_err(
            METHOD_NOT_FOUND,
            "authenticate: awf needs no authentication",
            None,
        )),
        _ => Err(rpc_err(
            METHOD_NOT_FOUND,
            &format!("Method not found: {method}"),
            Some(json!({"method": method})),
        )),
    };
    match reply {
        Ok((result, after)) => {
            shared.out.send(frames::response(&id, result));
            for f in after {
                shared.out.send(f);
            }
        }
        Err(e) => shared.out.send(e.frame(&id)),
    }
}

/// A JSON-RPC error to answer with.
#[derive(Debug)]
struct RpcErr {
    code: i64,
    message: String,
    data: Option<Value>,
}

impl RpcErr {
    fn frame(&self, id: &Value) -> Value {
        frames::error(id, self.code, &self.message, self.data.clone())
    }
}

fn rpc_err(code: i64, message: &str, data: Option<Value>) -> RpcErr {
    RpcErr {
        code,
        message: message.to_owned(),
        data,
    }
}

fn invalid(message: &str, awf_code: &str, hint: Option<&str>) -> RpcErr {
    rpc_err(
        INVALID_PARAMS,
        message,
        Some(frames::awf_data(awf_code, hint)),
    )
}

/// A result and the frames to send right after it.
type Reply = Result<(Value, Vec<Value>), RpcErr>;

/// A JSON-RPC id: a string, an integer or null.
fn valid_id(id: &Value) -> bool {
    match id {
        Value::String(_) | Value::Null => true,
        Value::Number(n) => n.is_i64() || n.is_u64(),
        _ => false,
    }
}

fn id_key(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

async fn notification(shared: &Arc<Shared>, method: &str, params: &Value) {
    match method {
        "session/cancel" => {
            if let Err(e) = cancel_notification(shared, params).await {
                tracing::debug!(target: "awf::acp", error = %e.message, "session/cancel ignored");
            }
        }
        "$/cancel_request" => {
            // Cancelling a prompt request cancels its turn (it still answers `cancelled`).
            if let Some(rid) = params.get("requestId").map(id_key) {
                let sid = lock(&shared.prompt_ids).get(&rid).cloned();
                let s = sid.and_then(|sid| lock(&shared.sessions).get(&sid).cloned());
                if let Some(s) = s {
                    cancel_session(shared, &s).await;
                }
            }
        }
        _ => tracing::debug!(target: "awf::acp", method, "unknown notification ignored"),
    }
}

fn initialize(shared: &Arc<Shared>, params: &Value) -> Reply {
    match params.get("protocolVersion") {
        Some(Value::Number(n)) if n.as_u64().is_some_and(|v| v <= u64::from(u16::MAX)) => {}
        _ => {
            return Err(rpc_err(
                INVALID_PARAMS,
                "Invalid params: `protocolVersion` must be an integer from 0 to 65535",
                None,
            ));
        }
    }
    *lock(&shared.client_caps) = params
        .get("clientCapabilities")
        .cloned()
        .unwrap_or(Value::Null);
    shared.initialized.store(true, Ordering::SeqCst);
    Ok((frames::initialize_result(&shared.cfg.version), Vec::new()))
}

fn client_cap(shared: &Shared, path: &[&str]) -> bool {
    let caps = lock(&shared.client_caps);
    let mut v = &*caps;
    for p in path {
        match v.get(p) {
            Some(x) => v = x,
            None => return false,
        }
    }
    match v {
        Value::Bool(b) => *b,
        Value::Null => false,
        _ => true,
    }
}

fn session_id_of(params: &Value) -> Result<String, RpcErr> {
    params
        .get("sessionId")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| {
            rpc_err(
                INVALID_PARAMS,
                "Invalid params: `sessionId` (a string) is required",
                None,
            )
        })
}

fn unknown_session(id: &str) -> RpcErr {
    rpc_err(
        NOT_FOUND,
        &format!("Resource not found: unknown session \"{id}\"; send a session/new request first"),
        Some(json!({"sessionId": id, "awfCode": "USER.ACP.UNKNOWN_SESSION"})),
    )
}

fn find_session(shared: &Shared, params: &Value) -> Result<Arc<Session>, RpcErr> {
    let id = session_id_of(params)?;
    lock(&shared.sessions)
        .get(&id)
        .cloned()
        .ok_or_else(|| unknown_session(&id))
}

fn check_cwd(params: &Value) -> Result<PathBuf, RpcErr> {
    let Some(cwd) = params.get("cwd").and_then(Value::as_str) else {
        return Err(invalid(
            "Invalid params: `cwd` (an absolute path) is required",
            "USER.ACP.INVALID_CWD",
            None,
        ));
    };
    let p = PathBuf::from(cwd);
    if !p.is_absolute() {
        return Err(invalid(
            &format!("Invalid params: cwd {cwd:?} is not an absolute path"),
            "USER.ACP.INVALID_CWD",
            Some("send the project directory as an absolute path"),
        ));
    }
    if !p.is_dir() {
        return Err(invalid(
            &format!("Invalid params: cwd {cwd:?} is not an existing directory"),
            "USER.ACP.INVALID_CWD",
            None,
        ));
    }
    Ok(p)
}

/// Checks `mcpServers` entry by entry (stdio only: awf advertises neither http nor sse).
fn check_mcp_servers(params: &Value) -> Result<Vec<McpServer>, RpcErr> {
    let list = match params.get("mcpServers") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(invalid(
                "Invalid params: `mcpServers` must be an array",
                "USER.ACP.INVALID_MCP_SERVER",
                None,
            ));
        }
    };
    let bad = |i: usize, why: String| {
        invalid(
            &format!("Invalid params: mcpServers[{i}]: {why}"),
            "USER.ACP.INVALID_MCP_SERVER",
            Some(
                "each entry is {name, command (absolute path), args: [string], env: [{name, value}]}",
            ),
        )
    };
    let mut out: Vec<McpServer> = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let Some(o) = e.as_object() else {
            return Err(bad(i, "not an object".into()));
        };
        if let Some(t) = o.get("type").and_then(Value::as_str)
            && t != "stdio"
        {
            return Err(bad(
                i,
                format!("transport {t:?} is not supported (awf advertises stdio MCP servers only)"),
            ));
        }
        let name = match o.get("name").and_then(Value::as_str) {
            Some(n) if !n.trim().is_empty() => n.to_owned(),
            _ => return Err(bad(i, "`name` must be a non-empty string".into())),
        };
        if name.contains('\0') {
            return Err(bad(i, "`name` contains a NUL character".into()));
        }
        if awf_domain::ports::agent::is_reserved_mcp_name(&name) {
            return Err(bad(
                i,
                format!("the name {name:?} is reserved for awf's own MCP proxy; rename the server"),
            ));
        }
        let command = match o.get("command").and_then(Value::as_str) {
            Some(c) if c.contains('\0') => {
                return Err(bad(i, "`command` contains a NUL character".into()));
            }
            Some(c) if std::path::Path::new(c).is_absolute() => c.to_owned(),
            Some(c) => return Err(bad(i, format!("`command` {c:?} is not an absolute path"))),
            None => return Err(bad(i, "`command` (an absolute path) is required".into())),
        };
        let args = match o.get("args") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => {
                let mut args = Vec::new();
                for (j, x) in a.iter().enumerate() {
                    match x.as_str() {
                        Some(s) if s.contains('\0') => {
                            return Err(bad(i, format!("`args[{j}]` contains a NUL character")));
                        }
                        Some(s) => args.push(s.to_owned()),
                        None => return Err(bad(i, "`args` must be strings".into())),
                    }
                }
                args
            }
            Some(_) => return Err(bad(i, "`args` must be an array of strings".into())),
        };
        let env = match o.get("env") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => {
                let mut env = Vec::new();
                for (j, x) in a.iter().enumerate() {
                    match (
                        x.get("name").and_then(Value::as_str),
                        x.get("value").and_then(Value::as_str),
                    ) {
                        (Some(n), Some(v)) => {
                            let why = if n.is_empty() {
                                Some("is empty")
                            } else if n.contains('\0') {
                                Some("contains a NUL character")
                            } else if n.contains('=') {
                                Some("contains '='")
                            } else {
                                None
                            };
                            if let Some(why) = why {
                                return Err(bad(i, format!("`env[{j}].name` {n:?} {why}")));
                            }
                            if v.contains('\0') {
                                return Err(bad(
                                    i,
                                    format!("`env[{j}].value` (of {n:?}) contains a NUL character"),
                                ));
                            }
                            env.push((n.to_owned(), v.to_owned()));
                        }
                        _ => {
                            return Err(bad(
                                i,
                                "`env` entries must be {name, value} strings".into(),
                            ));
                        }
                    }
                }
                env
            }
            Some(_) => return Err(bad(i, "`env` must be an array of {name, value}".into())),
        };
        // A repeated name: the later entry wins.
        out.retain(|s| s.name != name);
        out.push(McpServer {
            name,
            command,
            args,
            env,
        });
    }
    Ok(out)
}

/// Adds the editor MCP servers' env values to the frame masker (any value of 4+ characters:
/// the editor sends credentials there).
fn mask_mcp_env(shared: &Shared, servers: &[McpServer]) {
    if let Ok(mut m) = shared.masker.write() {
        for s in servers {
            for (_, v) in &s.env {
                m.add(v);
            }
        }
    }
}

fn input_hint(inputs: &[awf_domain::workflow::InputDef]) -> String {
    inputs
        .iter()
        .map(|d| {
            let value = if d.validation.enum_values.is_empty() {
                match type_name(&d.ty).as_str() {
                    "untyped" => String::from("<value>"),
                    t => format!("<{t}>"),
                }
            } else {
                d.validation.enum_values.join("|")
            };
            if d.required && d.default.is_none() {
                format!("{}={value}", d.name)
            } else {
                format!("[{}={value}]", d.name)
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// One input of a slash command's `_meta.awf.inputs`. A secret input
/// ([`awf_domain::mask::is_secret_name`]) has `"secret": true`, and its non-empty default is
/// `"***"` (as `awf run <workflow> --help` and the HTTP API show it): the value itself never
/// leaves awf; a command that leaves the input out gets the real default.
fn command_input(d: &awf_domain::workflow::InputDef) -> Value {
    let default = match &d.default {
        Some(v) if awf_domain::mask::hides_named(&d.name, v) => json!(awf_domain::mask::MASK),
        other => json!(other),
    };
    let mut v = json!({
        "name": d.name, "type": type_name(&d.ty), "required": d.required,
        "description": d.description, "default": default,
        "enum": d.validation.enum_values,
    });
    if let (true, Some(m)) = (awf_domain::mask::is_secret_name(&d.name), v.as_object_mut()) {
        m.insert("secret".into(), Value::Bool(true));
    }
    v
}

fn type_name(ty: &awf_domain::workflow::InputType) -> String {
    serde_json::to_value(ty)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "string".into())
}

/// The slash commands: every workflow that loads, by name (`pack/wf` as `pack:wf`).
fn available_commands(shared: &Shared) -> Value {
    let mut commands = Vec::new();
    let mut left_out: Vec<String> = Vec::new();
    match shared.cfg.repository.list() {
        Ok(mut entries) => {
            entries.sort_by(|a, b| a.name.cmp(&b.name));
            for e in entries {
                let name = e.name.replacen('/', ":", 1);
                if let Some(why) = prompt::untypable(&e.name) {
                    tracing::warn!(target: "awf::acp", workflow = %e.name, "workflow not offered: its name cannot be typed as a slash command: {why}");
                    continue;
                }
                let why = shared
                    .cfg
                    .validate
                    .as_ref()
                    .and_then(|v| v(&e.path.display().to_string()))
                    .or_else(|| e.error.clone());
                if let Some(why) = why {
                    left_out.push(format!("{} ({why})", e.name));
                    continue;
                }
                let Ok(loaded) = shared.cfg.repository.load(&e.name, None) else {
                    continue;
                };
                let wf = loaded.workflow;
                let description = wf
                    .description
                    .clone()
                    .filter(|d| !d.trim().is_empty())
                    .unwrap_or_else(|| format!("Run the workflow {}", e.name));
                let inputs: Vec<Value> = wf.inputs.iter().map(command_input).collect();
                let mut c = json!({
                    "name": name, "description": description,
                    "_meta": {"awf": {"inputs": inputs}},
                });
                let hint = input_hint(&wf.inputs);
                if let (false, Some(m)) = (hint.is_empty(), c.as_object_mut()) {
                    m.insert("input".into(), json!({"hint": hint}));
                }
                commands.push(c);
            }
        }
        Err(e) => tracing::warn!(target: "awf::acp", error = %e, "workflows not listed"),
    }
    if !left_out.is_empty() {
        tracing::warn!(target: "awf::acp", workflows = %left_out.join("; "), "workflows left out of the slash commands: they do not load or validate");
    }
    json!({"sessionUpdate": "available_commands_update", "availableCommands": commands})
}

/// How long a delegated Read or Write waits for the editor's answer (the tools wait
/// `awf_tools::FS_DELEGATE_TIMEOUT`, 120 s, so this answer reaches them first).
const FS_WAIT: Duration = Duration::from_secs(100);

/// The file channel of session `id` when the client offers both `fs.readTextFile` and
/// `fs.writeTextFile` (acp.md §1.2); `None` otherwise (the runs' tools stay on disk).
fn open_fs_bridge(
    shared: &Arc<Shared>,
    id: &str,
) -> Result<Option<crate::fs_bridge::FsBridge>, RpcErr> {
    if !(client_cap(shared, &["fs", "readTextFile"])
        && client_cap(shared, &["fs", "writeTextFile"]))
    {
        return Ok(None);
    }
    let weak = Arc::downgrade(shared);
    let forward: crate::fs_bridge::Forward = Arc::new(move |method, params| {
        let weak = weak.clone();
        Box::pin(async move {
            let Some(shared) = weak.upgrade() else {
                return Err("the editor's ACP connection is closed".to_owned());
            };
            let never = CancellationToken::new();
            match client_request(&shared, method, params, &never, Some(FS_WAIT)).await {
                Some(Ok(v)) => Ok(v),
                Some(Err(e)) => Err(format!(
                    "{} (JSON-RPC error {} from the editor's {method})",
                    e.get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("no message"),
                    e.get("code")
                        .map_or_else(|| "?".to_owned(), Value::to_string)
                )),
                None => Err(format!(
                    "the editor did not answer {method} within {} s",
                    FS_WAIT.as_secs()
                )),
            }
        })
    });
    // `$TMPDIR`, else /tmp (a socket path must fit in 107 bytes).
    let tmp = std::env::temp_dir();
    let mut dirs = vec![tmp.clone()];
    if tmp != std::path::Path::new("/tmp") {
        dirs.push(PathBuf::from("/tmp"));
    }
    crate::fs_bridge::FsBridge::open_first(&dirs, id, &forward)
        .map(Some)
        .map_err(|e| {
            rpc_err(
                INTERNAL_ERROR,
                &format!(
                    "Internal error: cannot open the session's file channel (fs delegation) in {} or /tmp: {e}",
                    tmp.display()
                ),
                None,
            )
        })
}

fn new_session(shared: &Arc<Shared>, params: &Value) -> Reply {
    let cwd = check_cwd(params)?;
    let servers = check_mcp_servers(params)?;
    mask_mcp_env(shared, &servers);
    let id = format!("sess_{}", uuid::Uuid::new_v4().simple());
    let fs = open_fs_bridge(shared, &id)?;
    let s = Arc::new(Session {
        id: id.clone(),
        cwd,
        mcp_servers: Mutex::new(servers),
        mode: Mutex::new(Mode::Ask),
        in_flight: AtomicBool::new(false),
        closed: AtomicBool::new(false),
        gate: Mutex::new(()),
        turn: Mutex::new(None),
        parked: tokio::sync::Mutex::new(None),
        always: Mutex::new(HashMap::new()),
        runs: Mutex::new(Vec::new()),
        current: Mutex::new(None),
        given: Mutex::new(None),
        pending: Mutex::new(None),
        title: Mutex::new(None),
        updated_at: Mutex::new(None),
        fs: Mutex::new(fs),
    });
    persist(shared, &s);
    lock(&shared.sessions).insert(id.clone(), s);
    let commands = frames::update(&id, available_commands(shared));
    Ok((
        json!({"sessionId": id, "modes": frames::modes("ask")}),
        vec![commands],
    ))
}

fn set_mode(shared: &Arc<Shared>, params: &Value) -> Reply {
    let s = find_session(shared, params)?;
    let mode = match params.get("modeId").and_then(Value::as_str) {
        Some("ask") => Mode::Ask,
        Some("auto") => Mode::Auto,
        other => {
            let what = match other {
                Some(m) => format!("unknown mode \"{m}\""),
                None => String::from("`modeId` (a string) is required"),
            };
            return Err(invalid(
                &format!("Invalid params: {what}"),
                "USER.ACP.UNKNOWN_MODE",
                Some("modes: ask, auto"),
            ));
        }
    };
    *lock(&s.mode) = mode;
    persist(shared, &s);
    Ok((
        json!({}),
        vec![frames::update(
            &s.id,
            json!({"sessionUpdate": "current_mode_update", "currentModeId": mode.id()}),
        )],
    ))
}

fn list_sessions(shared: &Arc<Shared>, params: &Value) -> Reply {
    let filter = params.get("cwd").and_then(Value::as_str).map(PathBuf::from);
    // Closed sessions are kept for `session/load` but not listed (acp.md: close frees them).
    // This process's open sessions, and the store's as it is now (sessions other processes
    // created or went on with since this one started).
    let mut all: Vec<(String, PathBuf, Option<String>, Option<String>)> = lock(&shared.sessions)
        .values()
        .map(|s| {
            (
                s.id.clone(),
                s.cwd.clone(),
                lock(&s.title).clone(),
                lock(&s.updated_at).clone(),
            )
        })
        .collect();
    if let Some(dir) = &shared.cfg.sessions_dir {
        let open: std::collections::HashSet<String> =
            all.iter().map(|(id, ..)| id.clone()).collect();
        for saved in crate::sessions::load_all(dir) {
            if !saved.closed && !open.contains(&saved.id) {
                all.push((saved.id, saved.cwd, saved.title, saved.updated_at));
            }
        }
    }
    all.sort_by(|a, b| a.0.cmp(&b.0));
    let sessions: Vec<Value> = all
        .into_iter()
        .filter(|(_, cwd, ..)| filter.as_ref().is_none_or(|f| f == cwd))
        .map(|(id, cwd, title, updated)| {
            let mut v = json!({"sessionId": id, "cwd": cwd.display().to_string()});
            if let Some(m) = v.as_object_mut() {
                if let Some(t) = title {
                    m.insert("title".into(), Value::String(t));
                }
                if let Some(u) = updated {
                    m.insert("updatedAt".into(), Value::String(u));
                }
            }
            v
        })
        .collect();
    Ok((json!({"sessions": sessions}), Vec::new()))
}

async fn cancel_session(shared: &Arc<Shared>, s: &Arc<Session>) {
    if let Some(t) = lock(&s.turn).clone() {
        t.cancel();
    }
    // A parked run (waiting for the next prompt) has no turn: cancel it directly.
    if let Some(p) = s.parked.lock().await.take() {
        let _ = shared
            .cfg
            .service
            .cancel(&p.run_id, CancelReason::Requested);
    }
}

async fn cancel_notification(shared: &Arc<Shared>, params: &Value) -> Result<(), RpcErr> {
    let s = find_session(shared, params)?;
    cancel_session(shared, &s).await;
    // The question the cancelled run asked is no longer waited for.
    let dropped = lock(&s.pending).take().is_some();
    if dropped {
        persist(shared, &s);
    }
    Ok(())
}

async fn close_session(shared: &Arc<Shared>, params: &Value) -> Reply {
    let s = find_session(shared, params)?;
    lock(&shared.sessions).remove(&s.id);
    {
        // Under the gate: an update queued after this point is dropped, one queued before
        // it precedes the close response.
        let _gate = lock(&s.gate);
        s.closed.store(true, Ordering::SeqCst);
    }
    cancel_session(shared, &s).await;
    drop(lock(&s.fs).take());
    persist(shared, &s);
    lock(&shared.closed).insert(s.id.clone(), s);
    Ok((json!({}), Vec::new()))
}

fn start_load(shared: &Arc<Shared>, id: Value, params: Value) {
    let shared2 = Arc::clone(shared);
    lock(&shared.turns).spawn(async move {
        match load_session(&shared2, &params).await {
            Ok((sid, v)) => {
                shared2.out.send(frames::response(&id, v));
                shared2
                    .out
                    .send(frames::update(&sid, available_commands(&shared2)));
            }
            Err(e) => shared2.out.send(e.frame(&id)),
        }
    });
}

/// `session/load`: a session of this process (open or closed) is replayed (each run's log
/// up to what the session saw) and becomes the open session again.
async fn load_session(shared: &Arc<Shared>, params: &Value) -> Result<(String, Value), RpcErr> {
    let id = session_id_of(params)?;
    let cwd = check_cwd(params)?;
    let servers = check_mcp_servers(params)?;
    // The store is read now: a session another process created (or went on with) since
    // this one started is loaded as it is saved.
    let stored = shared
        .cfg
        .sessions_dir
        .as_deref()
        .and_then(|d| crate::sessions::load_one(d, &id));
    let known = {
        let open = lock(&shared.sessions).get(&id).cloned();
        open.or_else(|| lock(&shared.closed).get(&id).cloned())
    };
    let s = match (known, stored) {
        (Some(s), Some(saved)) => {
            refresh(shared, &s, saved);
            s
        }
        (Some(s), None) => s,
        (None, Some(saved)) => session_of(shared, saved),
        (None, None) => return Err(unknown_session(&id)),
    };
    // Under the gate: a prompt turn queues its response and releases the slot under it, so
    // a client that loads as soon as it has the response never finds the slot still taken
    // (it did, now and then, on a loaded machine).
    let busy = {
        let _gate = lock(&s.gate);
        s.in_flight.load(Ordering::SeqCst)
    };
    if busy {
        return Err(invalid(
            "Invalid params: a prompt is in flight for this session; wait for it or cancel it before loading",
            "USER.ACP.PROMPT_IN_FLIGHT",
            None,
        ));
    }
    if cwd != s.cwd {
        return Err(invalid(
            &format!(
                "Invalid params: session \"{id}\" belongs to cwd {:?}, not {:?}",
                s.cwd.display().to_string(),
                cwd.display().to_string()
            ),
            "USER.ACP.INVALID_CWD",
            Some(
                "load the session with the cwd it was created with, or start a new session for this directory",
            ),
        ));
    }
    mask_mcp_env(shared, &servers);
    *lock(&s.mcp_servers) = servers;
    // A session closed before (its channel removed) gets a new one.
    if lock(&s.fs).is_none() {
        let fs = open_fs_bridge(shared, &s.id)?;
        *lock(&s.fs) = fs;
    }
    let records = lock(&s.runs).clone();
    for (turn, r) in records.into_iter().enumerate() {
        shared.out.send(frames::update(
            &s.id,
            frames::chunk("user_message_chunk", &r.prompt, None),
        ));
        let sub = match &r.run_id {
            Some(run) if r.seen > 0 => shared.cfg.service.subscribe(run, 1).ok(),
            _ => None,
        };
        if let Some(mut sub) = sub {
            // As live: step titles and raw inputs from the workflow (as it is now).
            let wf = r
                .workflow
                .as_deref()
                .and_then(|w| shared.cfg.repository.load(w, None).ok())
                .map(|l| l.workflow);
            replay_run(shared, &s.id, wf, &mut sub, r.seen).await;
        }
        for (i, n) in r.notes.iter().enumerate() {
            let id = note_id(&s.id, turn, i);
            for piece in split_text(n, MAX_CHUNK) {
                shared.out.send(frames::update(
                    &s.id,
                    frames::chunk("agent_message_chunk", piece, Some(&id)),
                ));
            }
        }
    }
    lock(&shared.closed).remove(&s.id);
    s.closed.store(false, Ordering::SeqCst);
    persist(shared, &s);
    lock(&shared.sessions).insert(s.id.clone(), Arc::clone(&s));
    let mode = lock(&s.mode).id();
    Ok((s.id.clone(), json!({"modes": frames::modes(mode)})))
}

/// Projects a run's log from its start up to position `seen`.
async fn replay_run(
    shared: &Shared,
    session: &str,
    workflow: Option<awf_domain::workflow::Workflow>,
    sub: &mut Box<dyn Subscription>,
    seen: u64,
) {
    {
        let masker = shared.masker.read().map(|m| m.clone()).unwrap_or_default();
        let mut projector = Projector::new(session, workflow, masker);
        while let Some(item) = tokio::time::timeout(Duration::from_secs(2), sub.next())
            .await
            .ok()
            .flatten()
        {
            let SubscriptionItem::Event { position, envelope } = item else {
                continue;
            };
            if position > seen {
                break;
            }
            // Replay: no questions asked again.
            if !matches!(envelope.event, RunEvent::InteractionRequired { .. }) {
                for f in projector.project(&envelope) {
                    shared.out.send(f);
                }
            }
            // Up to what the session saw: a live run's next event is not waited for.
            if position >= seen {
                break;
            }
        }
    }
}

fn start_prompt(shared: &Arc<Shared>, id: Value, params: Value) {
    let s = match find_session(shared, &params) {
        Ok(s) => s,
        Err(e) => {
            shared.out.send(e.frame(&id));
            return;
        }
    };
    // A prompt refused for its blocks never takes the slot: its error is the whole turn.
    let text = match prompt_blocks(&params) {
        Ok(t) => t,
        Err(e) => {
            shared.out.send(e.frame(&id));
            return;
        }
    };
    // Taken here, in the dispatch loop, before anything else is read: no second prompt can
    // slip in; released only after the response is queued.
    let taken = {
        let _gate = lock(&s.gate);
        s.in_flight
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    };
    if !taken {
        shared.out.send(
            invalid(
                "Invalid params: a prompt is already in flight for this session; wait for it to complete before sending another",
                "USER.ACP.PROMPT_IN_FLIGHT",
                Some("send session/cancel to stop the running prompt"),
            )
            .frame(&id),
        );
        return;
    }
    // A prompt refused for its text (a bad slash command, free text with no default
    // workflow) is answered here, in the dispatch loop, and the slot released before the
    // next line is read: back-to-back refused prompts never meet PROMPT_IN_FLIGHT.
    if let Some(why) = refusal(shared, &s, &text) {
        add_prompt_secrets(shared, &text, false);
        record_prompt(shared, &s, &text);
        message(shared, &s, &why);
        *lock(&s.updated_at) = Some(now_rfc3339());
        persist(shared, &s);
        let _gate = lock(&s.gate);
        shared
            .out
            .send(frames::response(&id, json!({"stopReason": "end_turn"})));
        s.in_flight.store(false, Ordering::SeqCst);
        return;
    }
    let token = CancellationToken::new();
    *lock(&s.turn) = Some(token.clone());
    let rid = id_key(&id);
    lock(&shared.prompt_ids).insert(rid.clone(), s.id.clone());
    let shared2 = Arc::clone(shared);
    lock(&shared.turns).spawn(async move {
        let frame = match prompt_turn(&shared2, &s, text, &token).await {
            Ok(stop) => frames::response(&id, json!({"stopReason": stop})),
            Err(e) => e.frame(&id),
        };
        *lock(&s.turn) = None;
        lock(&shared2.prompt_ids).remove(&rid);
        *lock(&s.updated_at) = Some(now_rfc3339());
        persist(&shared2, &s);
        let _gate = lock(&s.gate);
        shared2.out.send(frame);
        s.in_flight.store(false, Ordering::SeqCst);
    });
}

/// Saves `s` under [`AcpConfig::sessions_dir`] (a failure is logged: the session goes on
/// in memory).
fn persist(shared: &Shared, s: &Session) {
    let Some(dir) = &shared.cfg.sessions_dir else {
        return;
    };
    // Masked again with every secret known now (one learnt after a note was written).
    let masker = masker_now(shared);
    let hide = |t: &str| masker.mask(t).into_owned();
    let mode = lock(&s.mode).id().to_owned();
    let title = lock(&s.title).as_deref().map(hide);
    let updated_at = lock(&s.updated_at).clone();
    // Held while the file is merged and written: the turns written are the turns kept.
    let mut runs = lock(&s.runs);
    let saved = crate::sessions::SavedSession {
        schema_version: crate::sessions::SCHEMA_VERSION,
        id: s.id.clone(),
        cwd: s.cwd.clone(),
        mode,
        title,
        updated_at,
        closed: s.closed.load(Ordering::SeqCst),
        pending: lock(&s.pending).clone(),
        runs: runs
            .iter()
            .map(|r| crate::sessions::SavedRun {
                key: r.key.clone(),
                prompt: hide(&r.prompt),
                run_id: r.run_id.clone(),
                workflow: r.workflow.clone(),
                seen: r.seen,
                notes: r.notes.iter().map(|n| hide(n)).collect(),
            })
            .collect(),
    };
    match crate::sessions::save(dir, &saved) {
        // Another process's turns (written since) join this one's.
        Ok(merged) => {
            *runs = merged.runs.into_iter().map(record_of).collect();
            drop(runs);
            if let Some(t) = merged.title {
                lock(&s.title).get_or_insert(t);
            }
        }
        Err(e) => {
            tracing::warn!(target: "awf::acp", session = %s.id, error = %e, "cannot save the session; it lives on in memory only");
        }
    }
}

fn record_of(r: crate::sessions::SavedRun) -> RunRecord {
    RunRecord {
        key: r.key,
        prompt: r.prompt,
        run_id: r.run_id,
        workflow: r.workflow,
        seen: r.seen,
        notes: r.notes,
    }
}

/// A session of the store as this process holds it (its editor MCP servers and file channel
/// come with the next `session/load`).
fn session_of(shared: &Shared, mut saved: crate::sessions::SavedSession) -> Arc<Session> {
    hide_saved_secrets(shared, &mut saved);
    Arc::new(Session {
        id: saved.id.clone(),
        cwd: saved.cwd,
        mcp_servers: Mutex::new(Vec::new()),
        mode: Mutex::new(Mode::from_id(&saved.mode)),
        in_flight: AtomicBool::new(false),
        closed: AtomicBool::new(saved.closed),
        gate: Mutex::new(()),
        turn: Mutex::new(None),
        parked: tokio::sync::Mutex::new(None),
        always: Mutex::new(HashMap::new()),
        runs: Mutex::new(saved.runs.into_iter().map(record_of).collect()),
        current: Mutex::new(None),
        given: Mutex::new(None),
        pending: Mutex::new(saved.pending),
        title: Mutex::new(saved.title),
        updated_at: Mutex::new(saved.updated_at),
        fs: Mutex::new(None),
    })
}

/// Takes in the turns other processes saved for `s` since this one read its file.
fn refresh(shared: &Shared, s: &Session, saved: crate::sessions::SavedSession) {
    let mut saved = saved;
    hide_saved_secrets(shared, &mut saved);
    let mut runs = lock(&s.runs);
    let mine: Vec<crate::sessions::SavedRun> = runs
        .iter()
        .map(|r| crate::sessions::SavedRun {
            key: r.key.clone(),
            prompt: r.prompt.clone(),
            run_id: r.run_id.clone(),
            workflow: r.workflow.clone(),
            seen: r.seen,
            notes: r.notes.clone(),
        })
        .collect();
    *runs = crate::sessions::merge_runs(&saved.runs, &mine)
        .into_iter()
        .map(record_of)
        .collect();
    drop(runs);
    if let Some(t) = saved.title {
        lock(&s.title).get_or_insert(t);
    }
    // A question another process asked (and waits for) is this session's now, unless a run
    // of this process waits for an answer itself.
    let parked_here = s.parked.try_lock().map_or(true, |p| p.is_some());
    if !parked_here && let Some(p) = saved.pending {
        lock(&s.pending).get_or_insert(p);
    }
    let mut u = lock(&s.updated_at);
    if saved.updated_at > *u {
        *u = saved.updated_at;
    }
}

/// Takes in the sessions saved by an earlier acp-serve: open ones are listed and can be
/// prompted or loaded, closed ones only loaded. Their editor MCP servers and file channel
/// come with the next `session/load`.
fn restore_sessions(shared: &Shared) {
    let Some(dir) = &shared.cfg.sessions_dir else {
        return;
    };
    for saved in crate::sessions::load_all(dir) {
        let closed = saved.closed;
        let s = session_of(shared, saved);
        let map = if closed {
            &shared.closed
        } else {
            &shared.sessions
        };
        lock(map).insert(s.id.clone(), s);
    }
}

/// A session file written before awf masked them may hold secret-named inputs typed in a
/// slash command: their values join the frame masker (replays mask them) and the session's
/// record holds them masked (its file too, from the next save).
fn hide_saved_secrets(shared: &Shared, saved: &mut crate::sessions::SavedSession) {
    if let Ok(mut m) = shared.masker.write() {
        for r in &saved.runs {
            if let Ok(c) = prompt::parse_command(&r.prompt) {
                for (k, v) in &c.inputs {
                    if awf_domain::mask::is_secret_name(k) {
                        m.add(v);
                    }
                }
            }
        }
    }
    let masker = masker_now(shared);
    let hide = |t: &mut String| {
        if let std::borrow::Cow::Owned(masked) = masker.mask(t) {
            *t = masked;
        }
    };
    if let Some(t) = &mut saved.title {
        hide(t);
    }
    for r in &mut saved.runs {
        hide(&mut r.prompt);
        r.notes.iter_mut().for_each(hide);
    }
}

fn now_rfc3339() -> String {
    awf_domain::timefmt::format_rfc3339(std::time::SystemTime::now())
}

/// The prompt's text with attachments bound: `(text for a slash command, text for a
/// default workflow)`.
struct PromptText {
    /// The text, with each attachment as a placeholder inside it.
    text: String,
    /// Attachment values (a resource link's path or URI, an embedded resource's text).
    attachments: Vec<(String, String)>,
}

const MARK: char = '\u{1}';

/// Appends attachment `n`'s placeholder: glued to a `key=` right before it, else a word of
/// its own.
fn push_attachment(text: &mut String, n: usize) {
    if !text.is_empty() && !text.ends_with('=') && !text.ends_with(char::is_whitespace) {
        text.push(' ');
    }
    text.push(MARK);
    text.push_str(&n.to_string());
    text.push(MARK);
}

fn prompt_blocks(params: &Value) -> Result<PromptText, RpcErr> {
    let Some(blocks) = params.get("prompt").and_then(Value::as_array) else {
        return Err(invalid(
            "Invalid params: `prompt` (an array of content blocks) is required",
            "USER.ACP.INVALID_PROMPT",
            None,
        ));
    };
    let mut text = String::new();
    let mut attachments = Vec::new();
    let mut last_text = false;
    for (i, b) in blocks.iter().enumerate() {
        let ty = b.get("type").and_then(Value::as_str).unwrap_or("");
        match ty {
            "text" => {
                let t = b.get("text").and_then(Value::as_str).unwrap_or("");
                if last_text {
                    text.push('\n');
                }
                text.push_str(t);
                last_text = true;
            }
            "resource_link" => {
                let uri = b.get("uri").and_then(Value::as_str).unwrap_or("");
                let name = b.get("name").and_then(Value::as_str).unwrap_or(uri);
                let value = uri.strip_prefix("file://").unwrap_or(uri).to_owned();
                push_attachment(&mut text, attachments.len());
                attachments.push((name.to_owned(), value));
                last_text = false;
            }
            "resource" => {
                let r = b.get("resource").cloned().unwrap_or(Value::Null);
                let Some(t) = r.get("text").and_then(Value::as_str) else {
                    return Err(invalid(
                        &format!(
                            "Invalid params: prompt[{i}]: a binary (blob) resource is not supported"
                        ),
                        "USER.ACP.UNSUPPORTED_BLOCK",
                        Some("send the file as text, or as a resource_link"),
                    ));
                };
                let name = r.get("uri").and_then(Value::as_str).unwrap_or("resource");
                push_attachment(&mut text, attachments.len());
                attachments.push((name.to_owned(), t.to_owned()));
                last_text = false;
            }
            "image" | "audio" => {
                return Err(invalid(
                    &format!(
                        "Invalid params: prompt[{i}]: {ty} content is not supported by awf's workflows"
                    ),
                    "USER.ACP.UNSUPPORTED_BLOCK",
                    Some("awf advertises promptCapabilities.image and .audio as false; send text"),
                ));
            }
            other => {
                return Err(invalid(
                    &format!("Invalid params: prompt[{i}]: unknown content block type {other:?}"),
                    "USER.ACP.UNSUPPORTED_BLOCK",
                    None,
                ));
            }
        }
    }
    let size: usize = text.len() + attachments.iter().map(|(_, v)| v.len()).sum::<usize>();
    if size > MAX_PROMPT_BYTES {
        return Err(invalid(
            &format!("Invalid params: prompt body exceeds {MAX_PROMPT_BYTES} bytes"),
            "USER.ACP.INVALID_PROMPT",
            None,
        ));
    }
    Ok(PromptText { text, attachments })
}

impl PromptText {
    /// The text as the user sees it (attachments by name), for transcripts.
    fn display(&self) -> String {
        self.substitute(&self.text, |(name, _)| format!("@{name}"))
    }

    fn substitute(&self, t: &str, f: impl Fn(&(String, String)) -> String) -> String {
        let mut out = String::new();
        let mut parts = t.split(MARK);
        if let Some(first) = parts.next() {
            out.push_str(first);
        }
        let mut inside = true;
        for p in parts {
            if inside {
                match p
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| self.attachments.get(i))
                {
                    Some(a) => out.push_str(&f(a)),
                    None => out.push_str(p),
                }
            } else {
                out.push_str(p);
            }
            inside = !inside;
        }
        out
    }

    /// The slash command, attachments bound to the `key=` right before them.
    fn command(&self) -> Result<prompt::Command, String> {
        let mut c = prompt::parse_command(&self.text)?;
        if c.workflow.contains(MARK) {
            return Err("an attachment cannot name the workflow".into());
        }
        let mut bound = 0;
        for (k, v) in &mut c.inputs {
            if k.contains(MARK) {
                return Err("an attachment cannot be an input name".into());
            }
            bound += v.matches(MARK).count() / 2;
            *v = self.substitute(v, |(_, value)| value.clone());
        }
        // An attachment outside every pair would be lost: say so.
        let total = self.text.matches(MARK).count() / 2;
        if bound < total {
            return Err(
                "an attachment is not bound to an input: type `key=` right before it (e.g. file=@main.go)"
                    .into(),
            );
        }
        Ok(c)
    }

    /// Free text for the default workflow: links as their path, resources fenced.
    fn free_text(&self) -> String {
        self.substitute(&self.text, |(name, value)| {
            if value.contains('\n') {
                format!("\n```{name}\n{value}\n```\n")
            } else {
                value.clone()
            }
        })
    }
}

/// The `messageId` of awf's own message `n` of prompt `turn` of session `session` (the
/// same when `session/load` replays it): a message of its own, apart from the steps' text
/// (`<run>:<step>`), so a client that groups chunks by message id keeps both.
/// The record of the turn in flight (the last one when none is marked).
fn current_record<'a>(s: &Session, runs: &'a mut [RunRecord]) -> Option<&'a mut RunRecord> {
    let current = lock(&s.current).clone();
    match current.and_then(|k| runs.iter().position(|r| r.key == k)) {
        Some(i) => runs.get_mut(i),
        None => runs.last_mut(),
    }
}

fn note_id(session: &str, turn: usize, n: usize) -> String {
    format!("{session}:{turn}:awf:{n}")
}

fn message(shared: &Shared, s: &Session, t: &str) {
    let id = {
        let mut runs = lock(&s.runs);
        let current = lock(&s.current).clone();
        let turn = current
            .and_then(|k| runs.iter().position(|r| r.key == k))
            .unwrap_or_else(|| runs.len().saturating_sub(1));
        match runs.get_mut(turn) {
            Some(r) => {
                r.notes.push(t.to_owned());
                note_id(&s.id, turn, r.notes.len() - 1)
            }
            None => format!("{}:awf", s.id),
        }
    };
    for piece in split_text(t, MAX_CHUNK) {
        emit(
            shared,
            s,
            frames::update(
                &s.id,
                frames::chunk("agent_message_chunk", piece, Some(&id)),
            ),
        );
    }
}

/// Queues an update of session `s` unless the session was closed.
fn emit(shared: &Shared, s: &Session, frame: Value) {
    let _gate = lock(&s.gate);
    if !s.closed.load(Ordering::SeqCst) {
        shared.out.send(frame);
    }
}

/// Splits text into pieces of at most `max` bytes, on character boundaries.
fn split_text(t: &str, max: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = t;
    while rest.len() > max {
        let mut cut = max;
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        out.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    if !rest.is_empty() {
        out.push(rest);
    }
    out
}

async fn prompt_turn(
    shared: &Arc<Shared>,
    s: &Arc<Session>,
    text: PromptText,
    cancel: &CancellationToken,
) -> Result<&'static str, RpcErr> {
    // A run waiting for an answer takes the whole text.
    let parked = s.parked.lock().await.take();
    // A question saved with the session (asked before a restart) too.
    let pending = lock(&s.pending).take();
    // Secrets in the text are known before it is recorded: the record (the session file,
    // `session/list`'s title, `session/load`'s replay) holds them masked.
    let answers_secret = parked
        .as_ref()
        .map_or_else(|| pending.as_ref().is_some_and(|p| p.secret), |p| p.secret);
    add_prompt_secrets(shared, &text, answers_secret);
    record_prompt(shared, s, &text);
    if let Some(p) = parked {
        let answer = text.free_text();
        // The answer joins the run's saved inputs (a question after it is saved with it).
        {
            let mut given = lock(&s.given);
            match (&p.input, given.as_mut()) {
                (Some(name), Some((_, inputs))) if !p.secret => {
                    inputs.push((name.clone(), answer.clone()));
                }
                (Some(_), _) => *given = None,
                (None, _) => {}
            }
        }
        if let Err(e) = shared
            .cfg
            .service
            .respond(&p.request_id, Answer::Value(answer))
        {
            // A missing input's value that breaks a rule: the request is still pending, so
            // the turn ends asking for it again (the next message answers it).
            if let Some(why) = awf_domain::interaction::refused_value(&e) {
                let input = e
                    .details()
                    .get(awf_domain::interaction::REFUSED_INPUT_DETAIL)
                    .and_then(Value::as_str)
                    .unwrap_or("the input");
                message(
                    shared,
                    s,
                    &format!(
                        "Answer not taken: {why}. Send the value of `{input}` as your next message."
                    ),
                );
                let given = lock(&s.given).clone();
                if let Some(name) = &p.input
                    && let Some((wf, mut inputs)) = given
                {
                    inputs.retain(|(k, _)| k != name);
                    *lock(&s.given) = Some((wf.clone(), inputs.clone()));
                    *lock(&s.pending) = Some(crate::sessions::SavedPending {
                        workflow: wf,
                        input: name.clone(),
                        secret: p.secret,
                        inputs,
                    });
                }
                *s.parked.lock().await = Some(p);
                return Ok("end_turn");
            }
            message(shared, s, &format!("Answer not taken: {e}"));
        }
        return Ok(follow(shared, s, p.run_id, p.workflow, p.sub, p.projector, cancel).await);
    }
    let from_command = pending.is_some() || text.text.trim_start().starts_with('/');
    let (workflow, inputs) = if let Some(p) = pending {
        // The run that asked is gone (a restart): the workflow starts again with the inputs
        // it was given and the answer.
        let mut inputs = p.inputs;
        inputs.push((p.input, text.free_text()));
        (p.workflow, inputs)
    } else if from_command {
        match text.command() {
            // Its secret-named inputs are in the masker already (`add_prompt_secrets`).
            Ok(c) => (c.workflow, c.inputs),
            Err(why) => {
                message(shared, s, &format!("Invalid prompt: {why}"));
                return Ok("end_turn");
            }
        }
    } else if let Some(d) = &shared.cfg.default_workflow {
        (d.clone(), vec![("prompt".to_owned(), text.free_text())])
    } else {
        message(shared, s, &not_a_command(shared));
        return Ok("end_turn");
    };
    // A name outside AWF (Go)'s rule is taken only as one of the listed workflows' (never
    // as a path: `my.flow` is not a file name).
    if from_command && !prompt::awf_name(&workflow) && !listed(shared, &workflow) {
        message(
            shared,
            s,
            &format!(
                "Invalid prompt: no workflow named \"{workflow}\" ({})",
                command_list(shared)
            ),
        );
        return Ok("end_turn");
    }
    let loaded = shared.cfg.repository.load(&workflow, None);
    // A workflow that is found but broken (it does not load, or does not validate) is said
    // as every list of workflows says it; one that is not found is the run's refusal below.
    let found = loaded.as_ref().map_or_else(
        |e| e.code().category() == awf_domain::Category::Workflow,
        |_| true,
    );
    if found && let Some(why) = shared.cfg.validate.as_ref().and_then(|v| v(&workflow)) {
        message(
            shared,
            s,
            &format!("Workflow \"{workflow}\" is not valid: {why}"),
        );
        return Ok("end_turn");
    }
    // Free text goes to the default workflow's `prompt` input: one without it is told so
    // (the text is never dropped silently).
    if let Ok(l) = &loaded
        && let Some(why) = unknown_input(&workflow, &l.workflow, &inputs)
    {
        let tail = if from_command {
            String::new()
        } else {
            format!(
                "; free text is the `prompt` input of the default workflow: declare one in \"{workflow}\", or type a slash command"
            )
        };
        message(shared, s, &format!("Invalid prompt: {why}{tail}"));
        return Ok("end_turn");
    }
    *lock(&s.given) = if inputs
        .iter()
        .any(|(k, _)| awf_domain::mask::is_secret_name(k))
    {
        None
    } else {
        Some((workflow.clone(), inputs.clone()))
    };
    let request = RunRequest {
        identifier: workflow.clone(),
        inputs,
        config_inputs: shared.cfg.config_inputs.clone(),
        env: shared.cfg.env.clone(),
        working_dir: s.cwd.clone(),
        prompt_missing_inputs: true,
        auto_approve: false,
        mcp_servers: lock(&s.mcp_servers).clone(),
        fs_delegate: lock(&s.fs).as_ref().map(|b| b.socket().to_path_buf()),
        // `/name k=v` names its inputs, and free text the default workflow's `prompt`
        // (both checked above too).
        refuse_undeclared_inputs: true,
        ..RunRequest::default()
    };
    let run_id = match shared.cfg.service.start(request).await {
        Ok(id) => id,
        Err(e) => {
            message(
                shared,
                s,
                &format!(
                    "Workflow \"{workflow}\" failed to start: [{}] {}",
                    e.code(),
                    e.message()
                ),
            );
            return Ok("end_turn");
        }
    };
    if let Some(r) = current_record(s, &mut lock(&s.runs)) {
        r.run_id = Some(run_id.clone());
        r.workflow = Some(workflow.clone());
    }
    // Kept at once: a restart before the turn ends still knows the run.
    persist(shared, s);
    let sub = match shared.cfg.service.subscribe(&run_id, 1) {
        Ok(sub) => sub,
        Err(e) => {
            return Err(rpc_err(
                INTERNAL_ERROR,
                &format!("Internal error: {e}"),
                None,
            ));
        }
    };
    let masker = shared.masker.read().map(|m| m.clone()).unwrap_or_default();
    let projector = Projector::new(&s.id, loaded.ok().map(|l| l.workflow), masker);
    if let Some(plan) = projector.plan_frame() {
        emit(shared, s, plan);
    }
    Ok(follow(shared, s, run_id, workflow, sub, projector, cancel).await)
}

/// Adds the secrets a prompt's text carries to the frame masker: the values of the
/// secret-named inputs of a slash command, or the whole text when it answers a question for
/// a secret-named input (`answers_secret`). Every frame masks them from now on, and so do
/// the session's record and file ([`record_prompt`], [`persist`]).
fn add_prompt_secrets(shared: &Shared, text: &PromptText, answers_secret: bool) {
    let Ok(mut m) = shared.masker.write() else {
        return;
    };
    if answers_secret {
        m.add(&text.free_text());
    } else if text.text.trim_start().starts_with('/')
        && let Ok(c) = text.command()
    {
        for (k, v) in &c.inputs {
            if awf_domain::mask::is_secret_name(k) {
                m.add(v);
            }
        }
    }
}

/// The frame masker as it is now.
fn masker_now(shared: &Shared) -> Masker {
    shared.masker.read().map(|m| m.clone()).unwrap_or_default()
}

/// Starts the session's record of a prompt (its title too, for the first one), secrets
/// masked: what the session keeps never holds them, so neither does its file.
fn record_prompt(shared: &Shared, s: &Session, text: &PromptText) {
    let shown = masker_now(shared).mask(&text.display()).into_owned();
    if lock(&s.title).is_none() {
        let t: String = shown.chars().take(80).collect();
        *lock(&s.title) = Some(t);
    }
    let key = uuid::Uuid::new_v4().simple().to_string();
    *lock(&s.current) = Some(key.clone());
    lock(&s.runs).push(RunRecord {
        key,
        prompt: shown,
        run_id: None,
        workflow: None,
        seen: 0,
        notes: Vec::new(),
    });
}

/// The answer to free text when there is no default workflow: the commands that can be typed.
fn not_a_command(shared: &Shared) -> String {
    format!(
        "Invalid prompt: prompt must begin with a /<workflow> slash command ({})",
        command_list(shared)
    )
}

/// `the available commands: /a, /b` (or that there is none).
fn command_list(shared: &Shared) -> String {
    let names = command_names(shared);
    if names.is_empty() {
        String::from("no workflow is available in this project")
    } else {
        format!("the available commands: {}", names.join(", "))
    }
}

/// Whether `name` is the name of a workflow the repository lists.
fn listed(shared: &Shared, name: &str) -> bool {
    shared
        .cfg
        .repository
        .list()
        .is_ok_and(|l| l.iter().any(|e| e.name == name))
}

/// Why a prompt's text is refused before any run, when no parked run would take it as an
/// answer (`None`: the turn decides).
fn refusal(shared: &Shared, s: &Session, text: &PromptText) -> Option<String> {
    match s.parked.try_lock() {
        Ok(p) if p.is_none() => {}
        _ => return None,
    }
    if lock(&s.pending).is_some() {
        return None;
    }
    if text.text.trim_start().starts_with('/') {
        match text.command() {
            Err(why) => Some(format!("Invalid prompt: {why}")),
            Ok(c) if !prompt::awf_name(&c.workflow) && !listed(shared, &c.workflow) => {
                Some(format!(
                    "Invalid prompt: no workflow named \"{}\" ({})",
                    c.workflow,
                    command_list(shared)
                ))
            }
            Ok(_) => None,
        }
    } else if shared.cfg.default_workflow.is_none() {
        Some(not_a_command(shared))
    } else {
        None
    }
}

/// The slash command names offered (`/` + name), in menu order.
fn command_names(shared: &Shared) -> Vec<String> {
    available_commands(shared)["availableCommands"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| c["name"].as_str().map(|n| format!("/{n}")))
                .collect()
        })
        .unwrap_or_default()
}

/// The first `key=value` of a slash command whose key the workflow does not declare, said
/// with the closest declared name and the list (AWF (Go) drops such pairs silently).
fn unknown_input(
    identifier: &str,
    wf: &awf_domain::workflow::Workflow,
    inputs: &[(String, String)],
) -> Option<String> {
    let names: Vec<&str> = wf.inputs.iter().map(|d| d.name.as_str()).collect();
    let (k, _) = inputs.iter().find(|(k, _)| !names.contains(&k.as_str()))?;
    let list = if names.is_empty() {
        String::from("it takes no inputs")
    } else {
        format!("its inputs: {}", names.join(", "))
    };
    Some(
        match awf_domain::validate::closest(k, names.iter().copied()) {
            Some(c) => format!(
                "workflow \"{identifier}\" has no input `{k}`; did you mean `{c}`? ({list})"
            ),
            None => format!("workflow \"{identifier}\" has no input `{k}` ({list})"),
        },
    )
}

fn note_seen(s: &Session, run_id: &RunId, position: u64) {
    if let Some(r) = lock(&s.runs)
        .iter_mut()
        .rev()
        .find(|r| r.run_id.as_ref() == Some(run_id))
    {
        r.seen = r.seen.max(position);
    }
}

/// How an interaction was handled.
enum Asked {
    /// Answered (or left to the run's own timeout / cancel).
    Done,
    /// Nobody can be asked now: the turn ends with the question.
    Park(String),
    /// The client cancelled the whole turn (a `cancelled` outcome).
    Cancelled,
}

#[allow(clippy::too_many_lines)]
async fn follow(
    shared: &Arc<Shared>,
    s: &Arc<Session>,
    run_id: RunId,
    workflow: String,
    mut sub: Box<dyn Subscription>,
    mut projector: Projector,
    cancel: &CancellationToken,
) -> &'static str {
    let mut cancelled = false;
    let mut deadline: Option<tokio::time::Instant> = None;
    let mut result: Option<RunResult> = None;
    loop {
        let item = tokio::select! {
            item = sub.next() => item,
            () = cancel.cancelled(), if !cancelled => {
                cancelled = true;
                deadline = Some(tokio::time::Instant::now() + shared.cfg.cancel_wait);
                let _ = shared.cfg.service.cancel(&run_id, CancelReason::Requested);
                continue;
            }
            () = sleep_until(deadline), if deadline.is_some() => break,
        };
        let Some(item) = item else { break };
        let SubscriptionItem::Event { position, envelope } = item else {
            continue;
        };
        note_seen(s, &run_id, position);
        if let RunEvent::InteractionRequired { request } = &envelope.event {
            for f in projector.project(&envelope) {
                emit(shared, s, f);
            }
            if cancelled {
                continue;
            }
            match ask(
                shared,
                s,
                &workflow,
                &projector,
                request,
                &envelope.run_id,
                cancel,
            )
            .await
            {
                Asked::Done => {}
                Asked::Cancelled => {
                    cancel.cancel();
                }
                Asked::Park(question) => {
                    message(shared, s, &question);
                    // Kept with the session: a restart before the answer still takes it.
                    *lock(&s.pending) = match (&request.kind, lock(&s.given).clone()) {
                        (RequestKind::MissingInput { input, .. }, Some((wf, inputs)))
                            if envelope.parent_run_id.is_none() && wf == workflow =>
                        {
                            Some(crate::sessions::SavedPending {
                                workflow: wf,
                                input: input.name.clone(),
                                secret: awf_domain::mask::is_secret_name(&input.name),
                                // A value refused before is asked again, not given.
                                inputs: inputs
                                    .into_iter()
                                    .filter(|(k, _)| *k != input.name)
                                    .collect(),
                            })
                        }
                        _ => None,
                    };
                    *s.parked.lock().await = Some(Parked {
                        run_id,
                        workflow,
                        request_id: request.request_id.clone(),
                        secret: matches!(
                            &request.kind,
                            RequestKind::MissingInput { input, .. }
                                if awf_domain::mask::is_secret_name(&input.name)
                        ),
                        input: match &request.kind {
                            RequestKind::MissingInput { input, .. } => Some(input.name.clone()),
                            _ => None,
                        },
                        sub,
                        projector,
                    });
                    return "end_turn";
                }
            }
            continue;
        }
        for f in projector.project(&envelope) {
            emit(shared, s, f);
        }
        if let RunEvent::RunFinished { result: r } = &envelope.event
            && envelope.parent_run_id.is_none()
            && envelope.run_id == run_id
        {
            result = Some((**r).clone());
            break;
        }
    }
    for f in projector.close_open() {
        emit(shared, s, f);
    }
    if cancelled {
        message(shared, s, &format!("Workflow \"{workflow}\" cancelled."));
        return "cancelled";
    }
    let Some(r) = result else {
        message(
            shared,
            s,
            &format!("Workflow \"{workflow}\" ended without a result."),
        );
        return "end_turn";
    };
    match r.status {
        RunStatus::Cancelled => {
            message(shared, s, &format!("Workflow \"{workflow}\" cancelled."));
            "end_turn"
        }
        RunStatus::Failure => {
            let (code, msg) = r
                .error
                .as_ref()
                .map_or((String::new(), String::from("failed")), |e| {
                    (e.code.as_str().to_owned(), e.message.clone())
                });
            message(
                shared,
                s,
                &format!("Workflow \"{workflow}\" failed: [{code}] {msg}"),
            );
            let detail = r
                .error
                .as_ref()
                .and_then(|e| e.details.get("stop_reason"))
                .and_then(Value::as_str)
                .unwrap_or("");
            stop_for_failure(&code, &msg, detail)
        }
        RunStatus::Success => {
            if let Some(m) = r.message.as_deref().filter(|m| !m.trim().is_empty()) {
                message(shared, s, m);
            } else if !projector.streamed {
                message(shared, s, &format!("Workflow \"{workflow}\" completed."));
            }
            "end_turn"
        }
    }
}

/// `refusal` / `max_tokens` where the failure says a provider stopped for that reason: its
/// `stop_reason` detail, a code naming it, or the provider's own words in the message
/// (`stop_reason: refusal`, `max_tokens`); `end_turn` otherwise (acp.md §1.6).
fn stop_for_failure(code: &str, message: &str, detail: &str) -> &'static str {
    let m = message.to_ascii_lowercase();
    if detail == "refusal" {
        return "refusal";
    }
    if detail == "max_tokens" {
        return "max_tokens";
    }
    if code.contains("REFUS")
        || m.contains("stop_reason: refusal")
        || m.contains("refused to answer")
    {
        "refusal"
    } else if code.contains("MAX_TOKENS") || m.contains("max_tokens") {
        "max_tokens"
    } else {
        "end_turn"
    }
}

async fn sleep_until(d: Option<tokio::time::Instant>) {
    match d {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Sends a request to the client and waits for its answer, `cancel` or `timeout`
/// (`None` when cut short; the request is then withdrawn with `$/cancel_request`).
async fn client_request(
    shared: &Arc<Shared>,
    method: &str,
    params: Value,
    cancel: &CancellationToken,
    timeout: Option<Duration>,
) -> Option<Result<Value, Value>> {
    let n = shared.next_id.fetch_add(1, Ordering::SeqCst);
    let id = format!("awf-{n}");
    let (tx, rx) = oneshot::channel();
    lock(&shared.pending).insert(id.clone(), tx);
    shared.out.send(frames::request(&id, method, params));
    let r = tokio::select! {
        r = rx => r.ok(),
        () = cancel.cancelled() => None,
        () = sleep_until(timeout.map(|t| tokio::time::Instant::now() + t)), if timeout.is_some() => None,
    };
    if r.is_none() && lock(&shared.pending).remove(&id).is_some() {
        shared.out.send(frames::notification(
            "$/cancel_request",
            json!({"requestId": id}),
        ));
    }
    r
}

#[allow(clippy::too_many_arguments)]
async fn ask(
    shared: &Arc<Shared>,
    s: &Arc<Session>,
    workflow: &str,
    projector: &Projector,
    request: &InteractionRequest,
    run: &RunId,
    cancel: &CancellationToken,
) -> Asked {
    let service = &shared.cfg.service;
    let timeout = request.timeout_ms.map(Duration::from_millis);
    let step = request.step.clone().unwrap_or_default();
    let respond = |a: Answer| {
        if let Err(e) = service.respond(&request.request_id, a) {
            tracing::debug!(target: "awf::acp", error = %e, "answer not taken");
        }
    };
    match &request.kind {
        RequestKind::Approval {
            message: text,
            options,
        } => {
            let allow = options.iter().find(|o| o.kind.allows());
            let reject = options.iter().find(|o| !o.kind.allows());
            let key = format!("{workflow}\0{step}");
            let remembered = lock(&s.always).get(&key).copied();
            let auto = *lock(&s.mode) == Mode::Auto;
            let tool_id = projector.approval_id(run, &step);
            let done = |allowed: bool, how: &str| {
                projector.approval_closed(&request.request_id);
                emit(
                    shared,
                    s,
                    frames::update(
                        &s.id,
                        frames::tool_update(
                            &tool_id,
                            if allowed { "completed" } else { "failed" },
                            Some(frames::tool_text(how)),
                            None,
                        ),
                    ),
                );
            };
            if let (true, Some(a)) = (auto || remembered == Some(true), allow) {
                respond(Answer::Option(a.id.clone()));
                done(
                    true,
                    if auto {
                        "approved (auto mode)"
                    } else {
                        "approved (always)"
                    },
                );
                return Asked::Done;
            }
            if let (Some(false), Some(r)) = (remembered, reject) {
                respond(Answer::Option(r.id.clone()));
                done(false, "rejected (always)");
                return Asked::Done;
            }
            // The gate's options, plus allow_always / reject_always when it has none.
            let mut opts: Vec<Value> = options
                .iter()
                .map(|o| json!({"optionId": o.id, "name": o.name, "kind": o.kind.as_str()}))
                .collect();
            if allow.is_some() && !options.iter().any(|o| o.kind == ApprovalKind::AllowAlways) {
                opts.push(json!({"optionId": "awf:allow_always", "name": format!("Always approve '{step}'"), "kind": "allow_always"}));
            }
            if reject.is_some() && !options.iter().any(|o| o.kind == ApprovalKind::RejectAlways) {
                opts.push(json!({"optionId": "awf:reject_always", "name": format!("Always reject '{step}'"), "kind": "reject_always"}));
            }
            let params = json!({
                "sessionId": s.id,
                "toolCall": {"toolCallId": tool_id, "title": format!("Approve: {step}"), "status": "pending",
                             "content": frames::tool_text(text)},
                "options": opts,
            });
            let answer = client_request(
                shared,
                "session/request_permission",
                params,
                cancel,
                timeout,
            )
            .await;
            let Some(answer) = answer else {
                // Cancelled or timed out: the run resolves the request itself.
                return Asked::Done;
            };
            let outcome = answer
                .ok()
                .and_then(|v| v.get("outcome").cloned())
                .unwrap_or(Value::Null);
            match outcome.get("outcome").and_then(Value::as_str) {
                Some("selected") => {
                    let chosen = outcome
                        .get("optionId")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    // What the card says: the name of the option the user chose (awf's own
                    // always-options answer the gate with one of its options).
                    let mut chosen_name: Option<String> = None;
                    let pick = match chosen {
                        "awf:allow_always" => {
                            lock(&s.always).insert(key, true);
                            chosen_name = Some(format!("Always approve '{step}'"));
                            allow
                        }
                        "awf:reject_always" => {
                            lock(&s.always).insert(key, false);
                            chosen_name = Some(format!("Always reject '{step}'"));
                            reject
                        }
                        id => match options.iter().find(|o| o.id == id) {
                            Some(o) => {
                                if o.kind.remembered() {
                                    lock(&s.always).insert(key, o.kind.allows());
                                }
                                Some(o)
                            }
                            // Not an offered option: this gate is rejected (fail safe),
                            // and the user is told why.
                            None => {
                                message(
                                    shared,
                                    s,
                                    &format!(
                                        "The answer {id:?} to the approval of '{step}' is not one of the offered options; the gate is treated as rejected."
                                    ),
                                );
                                reject
                            }
                        },
                    };
                    match pick {
                        Some(o) => {
                            respond(Answer::Option(o.id.clone()));
                            done(o.kind.allows(), chosen_name.as_deref().unwrap_or(&o.name));
                        }
                        None => respond(Answer::Unattended("no option to answer with".into())),
                    }
                    Asked::Done
                }
                Some("cancelled") => Asked::Cancelled,
                _ => {
                    if let Some(r) = reject {
                        respond(Answer::Option(r.id.clone()));
                        done(false, "rejected (no valid answer)");
                    }
                    Asked::Done
                }
            }
        }
        RequestKind::MissingInput { input, problem } => {
            // A value that breaks one of the input's rules is refused by the run (the
            // request stays pending): asked again, with the rule it broke.
            let mut problem = problem.clone();
            loop {
                let mut question = format!(
                    "Workflow \"{workflow}\" needs input `{}`{}",
                    input.name,
                    input
                        .description
                        .as_deref()
                        .map(|d| format!(" ({d})"))
                        .unwrap_or_default()
                );
                if let Some(p) = &problem {
                    question.push_str(&format!(": {p}"));
                }
                let enums = &input.validation.enum_values;
                if elicitation_form(shared) {
                    let params = frames::elicitation_form(
                        &s.id,
                        &question,
                        &[(
                            input.name.clone(),
                            input.name.clone(),
                            input.description.clone(),
                            enums.clone(),
                        )],
                        true,
                    );
                    match elicit(shared, request, params, &input.name, cancel, timeout).await {
                        Ok(asked) => return asked,
                        Err(why) => {
                            problem = Some(why);
                            continue;
                        }
                    }
                }
                if enums.is_empty() {
                    return Asked::Park(format!("{question}. Send it as your next message."));
                }
                let mut opts: Vec<Value> = enums
                    .iter()
                    .enumerate()
                    .map(|(i, v)| json!({"optionId": format!("value:{i}"), "name": v, "kind": "allow_once"}))
                    .collect();
                opts.push(
                    json!({"optionId": "awf:none", "name": "Do not run", "kind": "reject_once"}),
                );
                let params = json!({
                    "sessionId": s.id,
                    "toolCall": {"toolCallId": format!("{}:input:{}", run.0, input.name), "title": question, "status": "pending"},
                    "options": opts,
                });
                let Some(answer) = client_request(
                    shared,
                    "session/request_permission",
                    params,
                    cancel,
                    timeout,
                )
                .await
                else {
                    return Asked::Done;
                };
                let outcome = answer
                    .ok()
                    .and_then(|v| v.get("outcome").cloned())
                    .unwrap_or(Value::Null);
                if outcome.get("outcome").and_then(Value::as_str) == Some("cancelled") {
                    return Asked::Cancelled;
                }
                let chosen = outcome
                    .get("optionId")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                match chosen
                    .strip_prefix("value:")
                    .and_then(|i| i.parse::<usize>().ok())
                    .and_then(|i| enums.get(i))
                {
                    Some(v) => match service.respond(&request.request_id, Answer::Value(v.clone()))
                    {
                        // An allowed value another rule refuses (`pattern` beside `enum`).
                        Err(e) if awf_domain::interaction::refused_value(&e).is_some() => {
                            problem = awf_domain::interaction::refused_value(&e).map(str::to_owned);
                            continue;
                        }
                        Err(e) => {
                            tracing::debug!(target: "awf::acp", error = %e, "answer not taken");
                        }
                        Ok(()) => {}
                    },
                    None => {
                        if chosen != "awf:none" {
                            message(
                                shared,
                                s,
                                &format!(
                                    "The answer {chosen:?} is not one of the offered values of `{}`; the input was not given and the workflow does not run.",
                                    input.name
                                ),
                            );
                        }
                        respond(Answer::EndOfInput);
                    }
                }
                return Asked::Done;
            }
        }
        RequestKind::ConversationTurn { prompt } => {
            if elicitation_form(shared) {
                let message = if prompt.trim().is_empty() {
                    "Your reply (empty ends the conversation)"
                } else {
                    prompt.as_str()
                };
                let params = frames::elicitation_form(
                    &s.id,
                    message,
                    &[("reply".into(), "Reply".into(), None, Vec::new())],
                    false,
                );
                // A conversation turn takes any text: nothing is refused.
                return elicit(shared, request, params, "reply", cancel, timeout)
                    .await
                    .unwrap_or(Asked::Done);
            }
            let q = if prompt.trim().is_empty() || prompt.trim() == ">" {
                String::from(
                    "Your turn: reply with your next message (an empty message or `exit` ends the conversation).",
                )
            } else {
                prompt.clone()
            };
            Asked::Park(q)
        }
        RequestKind::Breakpoint { .. } => {
            respond(Answer::Unattended(
                "breakpoints are not available over ACP".into(),
            ));
            Asked::Done
        }
    }
}

fn elicitation_form(shared: &Shared) -> bool {
    client_cap(shared, &["elicitation", "form"])
}

/// Asks the client through `elicitation/create` and answers `request` with what it gives.
/// `Err` is the rule a missing input's value broke (the run refused it; the request is
/// still pending and is to be asked again).
async fn elicit(
    shared: &Arc<Shared>,
    request: &InteractionRequest,
    params: Value,
    field: &str,
    cancel: &CancellationToken,
    timeout: Option<Duration>,
) -> Result<Asked, String> {
    let Some(answer) = client_request(shared, "elicitation/create", params, cancel, timeout).await
    else {
        return Ok(Asked::Done);
    };
    let a = match answer {
        Ok(v) if v.get("action").and_then(Value::as_str) == Some("accept") => {
            match v.get("content").and_then(|c| c.get(field)) {
                Some(Value::String(s)) => Answer::Value(s.clone()),
                Some(Value::Null) | None => Answer::Value(String::new()),
                Some(other) => Answer::Value(other.to_string()),
            }
        }
        Ok(v) if v.get("action").and_then(Value::as_str) == Some("cancel") => {
            return Ok(Asked::Cancelled);
        }
        _ => Answer::EndOfInput,
    };
    if let Err(e) = shared.cfg.service.respond(&request.request_id, a) {
        if let Some(why) = awf_domain::interaction::refused_value(&e) {
            return Err(why.to_owned());
        }
        tracing::debug!(target: "awf::acp", error = %e, "answer not taken");
    }
    Ok(Asked::Done)
}

/// Turns run events into `session/update` frames for one session.
struct Projector {
    session: String,
    workflow: Option<awf_domain::workflow::Workflow>,
    /// Tool call id per (run, path), and its attempt.
    open: HashMap<(String, String), (String, u32)>,
    attempts: HashMap<(String, String), u32>,
    /// Nested tool calls of agents still open, per step tool call id.
    nested: HashMap<String, HashSet<String>>,
    /// Plan entries: (state, status).
    plan: Vec<(String, &'static str)>,
    /// Whether anything was streamed as agent text.
    streamed: bool,
    /// Output excerpt per open step tool call.
    excerpt: HashMap<String, String>,
    /// The secrets the frames mask (the process's, the editor MCP servers' env values, the
    /// prompt's secret inputs), applied to streamed text with a carry-over per stream so a
    /// secret split across two chunks is masked too.
    masker: Masker,
    /// One masking stream per `<run>:<path>:<kind>` text stream, with its UTF-8 carry.
    streams: HashMap<String, (awf_domain::mask::StreamMasker, Vec<u8>)>,
    /// Approval cards still pending: request id → card id (closed by the answer, else by
    /// the request's resolution, else at the end of the turn).
    approvals: Mutex<HashMap<String, String>>,
}

impl Projector {
    fn new(
        session: &str,
        workflow: Option<awf_domain::workflow::Workflow>,
        masker: Masker,
    ) -> Self {
        let plan = workflow
            .as_ref()
            .map(|w| {
                w.states
                    .values()
                    .filter(|st| !matches!(st.kind, StateKind::Terminal(_)))
                    .map(|st| (st.name.clone(), "pending"))
                    .collect()
            })
            .unwrap_or_default();
        Self {
            session: session.to_owned(),
            workflow,
            open: HashMap::new(),
            attempts: HashMap::new(),
            nested: HashMap::new(),
            plan,
            streamed: false,
            excerpt: HashMap::new(),
            masker,
            streams: HashMap::new(),
            approvals: Mutex::new(HashMap::new()),
        }
    }

    /// Marks the approval card of `request_id` closed (its answer was shown).
    fn approval_closed(&self, request_id: &str) {
        lock(&self.approvals).remove(request_id);
    }

    /// The part of `bytes` (next in stream `key`) that is safe to show now: masked, a
    /// possible start of a secret and an incomplete UTF-8 character held back.
    fn stream(&mut self, key: &str, bytes: &[u8]) -> String {
        let masker = &self.masker;
        let (sm, carry) = self.streams.entry(key.to_owned()).or_insert_with(|| {
            (
                awf_domain::mask::StreamMasker::new(masker.clone()),
                Vec::new(),
            )
        });
        carry.extend(sm.push(bytes));
        take_utf8(carry)
    }

    /// Releases what the streams under `prefix` hold (their step ended), as frames.
    fn flush(&mut self, prefix: &str) -> Vec<Value> {
        let mut keys: Vec<String> = self
            .streams
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect();
        keys.sort();
        let mut out = Vec::new();
        for k in keys {
            let Some((mut sm, mut carry)) = self.streams.remove(&k) else {
                continue;
            };
            carry.extend(sm.finish());
            let text = String::from_utf8_lossy(&carry).into_owned();
            if text.is_empty() {
                continue;
            }
            let (kind, id) = match k.strip_suffix(":thought") {
                Some(base) => ("agent_thought_chunk", format!("{base}:thought")),
                None => (
                    "agent_message_chunk",
                    k.rsplit_once(':').map_or(k.clone(), |(b, _)| b.to_owned()),
                ),
            };
            for piece in split_text(&text, MAX_CHUNK) {
                out.push(self.up(frames::chunk(kind, piece, Some(&id))));
            }
        }
        out
    }

    fn up(&self, u: Value) -> Value {
        frames::update(&self.session, u)
    }

    fn plan_frame(&self) -> Option<Value> {
        if self.plan.is_empty() {
            return None;
        }
        let entries: Vec<(String, &'static str)> = self
            .plan
            .iter()
            .map(|(name, st)| {
                let d = self
                    .workflow
                    .as_ref()
                    .and_then(|w| w.state(name))
                    .and_then(|s| s.description.clone())
                    .filter(|d| !d.trim().is_empty());
                (
                    d.map_or_else(|| name.clone(), |d| format!("{name}: {d}")),
                    *st,
                )
            })
            .collect();
        Some(self.up(frames::plan(&entries)))
    }

    fn set_plan(&mut self, step: &str, status: &'static str) -> Option<Value> {
        let e = self.plan.iter_mut().find(|(n, _)| n == step)?;
        if e.1 == status {
            return None;
        }
        e.1 = status;
        self.plan_frame()
    }

    fn approval_id(&self, run: &RunId, step: &str) -> String {
        format!("{}:{step}:approval", run.0)
    }

    fn step_id(run: &RunId, path: &str, attempt: u32) -> String {
        format!("{}:{path}:{attempt}", run.0)
    }

    /// The `rawInput` of a step's `tool_call`: the command as it will run when the engine
    /// rendered it (`command`, masked, of any run of the tree), else what the workflow says
    /// of the root run's state (a script file, a sub-workflow call, an agent's prompt).
    fn raw_input(&self, step: &str, is_root: bool, command: Option<&str>) -> Option<Value> {
        if let Some(c) = command {
            return Some(json!({"command": c}));
        }
        let w = self.workflow.as_ref().filter(|_| is_root)?;
        match &w.state(step)?.kind {
            StateKind::Command(c) => match &c.source {
                awf_domain::workflow::CommandSource::Inline(cmd) => Some(json!({"command": cmd})),
                awf_domain::workflow::CommandSource::ScriptFile(f) => {
                    Some(json!({"script_file": f}))
                }
            },
            StateKind::CallWorkflow(c) => serde_json::to_value(c)
                .ok()
                .map(|v| json!({"call_workflow": v})),
            StateKind::Agent(a) => serde_json::to_value(a).ok().map(|v| {
                let mut m = Map::new();
                for k in ["provider", "prompt", "model"] {
                    if let Some(x) = v.get(k) {
                        m.insert(k.into(), x.clone());
                    }
                }
                Value::Object(m)
            }),
            _ => None,
        }
    }

    fn title(&self, step: &str, is_root: bool) -> String {
        self.workflow
            .as_ref()
            .filter(|_| is_root)
            .and_then(|w| w.state(step))
            .and_then(|s| s.description.clone())
            .filter(|d| !d.trim().is_empty())
            .map_or_else(|| format!("Step {step}"), |d| format!("Step {step}: {d}"))
    }

    #[allow(clippy::too_many_lines)]
    fn project(&mut self, env: &awf_domain::event::EventEnvelope) -> Vec<Value> {
        let mut out = Vec::new();
        let run = &env.run_id;
        let is_root = env.parent_run_id.is_none();
        let key = (run.0.clone(), env.path.clone());
        match &env.event {
            RunEvent::StepStarted {
                step,
                kind,
                command,
            } => {
                let attempt = *self.attempts.entry(key.clone()).or_insert(1);
                let id = Self::step_id(run, &env.path, attempt);
                self.open.insert(key, (id.clone(), attempt));
                let title = self.title(step, is_root);
                out.push(self.up(frames::tool_call(
                    &id,
                    &title,
                    tool_kind(kind),
                    "pending",
                    self.raw_input(step, is_root, command.as_deref()),
                )));
                out.push(self.up(frames::tool_update(&id, "in_progress", None, None)));
                if is_root
                    && env.path == *step
                    && let Some(p) = self.set_plan(step, "in_progress")
                {
                    out.push(p);
                }
            }
            RunEvent::StepRetrying { attempt, .. } => {
                self.attempts.insert(key.clone(), *attempt);
                if let Some((id, _)) = self.open.get(&key) {
                    out.push(self.up(frames::tool_update(
                        id,
                        "in_progress",
                        Some(frames::tool_text(&format!("retrying (attempt {attempt})"))),
                        None,
                    )));
                }
            }
            RunEvent::OutputChunk { text, .. } => {
                let base = format!("{}:{}", run.0, env.path);
                let t = self.stream(&format!("{base}:out"), text.as_bytes());
                if let Some((id, _)) = self.open.get(&key) {
                    let e = self.excerpt.entry(id.clone()).or_default();
                    if e.len() < MAX_EXCERPT {
                        e.push_str(&t);
                    }
                }
                for piece in split_text(&t, MAX_CHUNK) {
                    self.streamed = true;
                    out.push(self.up(frames::chunk("agent_message_chunk", piece, Some(&base))));
                }
            }
            RunEvent::AgentMessageChunk { text, .. } => {
                let base = format!("{}:{}", run.0, env.path);
                let t = self.stream(&format!("{base}:msg"), text.as_bytes());
                for piece in split_text(&t, MAX_CHUNK) {
                    self.streamed = true;
                    out.push(self.up(frames::chunk("agent_message_chunk", piece, Some(&base))));
                }
            }
            RunEvent::AgentThoughtChunk { text, .. } => {
                let base = format!("{}:{}", run.0, env.path);
                let t = self.stream(&format!("{base}:thought"), text.as_bytes());
                for piece in split_text(&t, MAX_CHUNK) {
                    out.push(self.up(frames::chunk(
                        "agent_thought_chunk",
                        piece,
                        Some(&format!("{base}:thought")),
                    )));
                }
            }
            // The proxy reports the same call itself (fidelity router): one card, not two.
            RunEvent::ToolCall { name, fidelity, .. }
                if awf_domain::event::is_proxy_call_report(name, *fidelity) => {}
            RunEvent::ToolCall {
                id, name, input, ..
            } => {
                let parent = self
                    .open
                    .get(&key)
                    .map_or_else(|| Self::step_id(run, &env.path, 1), |(p, _)| p.clone());
                let tid = format!("{parent}/{id}");
                self.nested.entry(parent).or_default().insert(tid.clone());
                out.push(self.up(frames::tool_call(
                    &tid,
                    name,
                    agent_tool_kind(name),
                    "in_progress",
                    Some(input.clone()),
                )));
            }
            RunEvent::ToolCallResult {
                id,
                output,
                is_error,
                ..
            } => {
                let parent = self
                    .open
                    .get(&key)
                    .map_or_else(|| Self::step_id(run, &env.path, 1), |(p, _)| p.clone());
                let tid = format!("{parent}/{id}");
                // A result of a call that got no card (a proxied call's agent report) or
                // whose card was closed already gets none either.
                let open = self.nested.get_mut(&parent).is_some_and(|n| n.remove(&tid));
                if open {
                    let excerpt = truncate(output, MAX_EXCERPT);
                    out.push(self.up(frames::tool_update(
                        &tid,
                        if *is_error { "failed" } else { "completed" },
                        Some(frames::tool_text(&excerpt)),
                        None,
                    )));
                }
            }
            RunEvent::InteractionRequired { request } => {
                if let RequestKind::Approval { .. } = &request.kind {
                    let step = request.step.clone().unwrap_or_default();
                    lock(&self.approvals)
                        .insert(request.request_id.clone(), self.approval_id(run, &step));
                    out.push(self.up(frames::tool_call(
                        &self.approval_id(run, &step),
                        &format!("Approve: {step}"),
                        "other",
                        "pending",
                        None,
                    )));
                }
            }
            RunEvent::InteractionResolved {
                request_id,
                resolution,
            } => {
                let card = lock(&self.approvals).remove(request_id);
                if let Some(card) = card {
                    let (status, text) = match resolution {
                        awf_domain::interaction::Resolution::TimedOut => {
                            ("completed", "timed out: the gate's on_timeout applies")
                        }
                        awf_domain::interaction::Resolution::Cancelled => ("failed", "cancelled"),
                        awf_domain::interaction::Resolution::Answered(_) => {
                            ("completed", "answered")
                        }
                    };
                    out.push(self.up(frames::tool_update(
                        &card,
                        status,
                        Some(frames::tool_text(text)),
                        None,
                    )));
                }
            }
            RunEvent::StepFinished { step, state, .. } => {
                out.extend(self.flush(&format!("{}:{}:", run.0, env.path)));
                if let Some((id, _)) = self.open.remove(&key) {
                    out.extend(self.close_nested(&id));
                    let cancelled = matches!(state.status, awf_domain::run::StepStatus::Cancelled);
                    let failed =
                        cancelled || matches!(state.status, awf_domain::run::StepStatus::Failed);
                    let mut text = self.excerpt.remove(&id).unwrap_or_default();
                    if text.is_empty() {
                        text = state.output.to_string();
                    }
                    if cancelled {
                        if !text.is_empty() && !text.ends_with('\n') {
                            text.push('\n');
                        }
                        text.push_str("cancelled by user");
                    }
                    if let Some(e) = state.error.as_deref().filter(|_| failed) {
                        if !text.is_empty() && !text.ends_with('\n') {
                            text.push('\n');
                        }
                        text.push_str(e);
                    }
                    let text = truncate(&text, MAX_EXCERPT);
                    let duration = match (state.started_at, state.completed_at) {
                        (Some(a), Some(b)) => b
                            .duration_since(a)
                            .ok()
                            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                        _ => None,
                    };
                    out.push(self.up(frames::tool_update(
                        &id,
                        if failed { "failed" } else { "completed" },
                        (!text.is_empty()).then(|| frames::tool_text(&text)),
                        Some(json!({"exitCode": state.exit_code, "durationMs": duration, "attempts": state.attempts})),
                    )));
                }
                if is_root
                    && env.path == *step
                    && let Some(p) = self.set_plan(step, "completed")
                {
                    out.push(p);
                }
            }
            _ => {}
        }
        out
    }

    fn close_nested(&mut self, parent: &str) -> Vec<Value> {
        let Some(open) = self.nested.remove(parent) else {
            return Vec::new();
        };
        let mut ids: Vec<String> = open.into_iter().collect();
        ids.sort();
        ids.into_iter()
            .map(|id| self.up(frames::tool_update(&id, "completed", None, None)))
            .collect()
    }

    /// Failed updates for every tool call still open (a cancelled or cut-short run).
    fn close_open(&mut self) -> Vec<Value> {
        let mut out = self.flush("");
        let mut pending: Vec<String> = lock(&self.approvals).drain().map(|(_, c)| c).collect();
        pending.sort();
        for card in pending {
            out.push(self.up(frames::tool_update(
                &card,
                "failed",
                Some(frames::tool_text("cancelled")),
                None,
            )));
        }
        let open: Vec<String> = self.open.drain().map(|(_, (id, _))| id).collect();
        for id in open {
            out.extend(self.close_nested(&id));
            out.push(self.up(frames::tool_update(
                &id,
                "failed",
                Some(frames::tool_text("cancelled")),
                None,
            )));
        }
        out
    }
}

/// Takes the longest complete UTF-8 prefix out of `buf` (an incomplete character at its end
/// stays for the next chunk; invalid bytes become U+FFFD).
fn take_utf8(buf: &mut Vec<u8>) -> String {
    let keep = match std::str::from_utf8(buf) {
        Ok(_) => 0,
        Err(e) if e.error_len().is_none() => buf.len() - e.valid_up_to(),
        Err(_) => 0,
    };
    let rest = buf.split_off(buf.len() - keep);
    let text = String::from_utf8_lossy(buf).into_owned();
    *buf = rest;
    text
}

fn truncate(t: &str, max: usize) -> String {
    if t.len() <= max {
        return t.to_owned();
    }
    let mut cut = max;
    while !t.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}\n… ({} more bytes)", &t[..cut], t.len() - cut)
}

/// ACP `ToolKind` of a state kind.
fn tool_kind(kind: &str) -> &'static str {
    match kind {
        "command" => "execute",
        "agent" => "think",
        "operation" => "fetch",
        _ => "other",
    }
}

/// ACP `ToolKind` of an agent's tool, by its name.
fn agent_tool_kind(name: &str) -> &'static str {
    let n = name
        .rsplit("__")
        .next()
        .unwrap_or(name)
        .to_ascii_lowercase();
    match n.as_str() {
        "read" | "read_file" | "view" => "read",
        "write" | "edit" | "multiedit" | "write_file" | "replace" => "edit",
        "bash" | "shell" | "run_shell_command" | "exec" => "execute",
        "glob" | "grep" | "search" | "ls" => "search",
        "webfetch" | "fetch" | "web_fetch" => "fetch",
        _ => "other",
    }
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
