//! One ACP agent process and its JSON-RPC connection (awf as the client): spawned in its own
//! process group, newline-delimited frames over its stdin/stdout (the capped line reader and
//! the one-writer outbox of [`crate::transport`]), stderr kept as a bounded tail.
//!
//! Requests from the agent: `session/request_permission` goes to the session's turn (see
//! `Inbound`); everything else (`fs/*`, `terminal/*`, …, which awf does not advertise) is
//! answered `-32601`, so no id is left unanswered. Source: shared/spec/acp.md §4.1, §4.10.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::sys::signal::killpg;
use nix::unistd::Pid;
use serde_json::Value;
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::transport::Line;
use crate::transport::Outbox;

/// Longest frame read from an agent (10 MiB, as acp-serve's transport); a longer line is
/// dropped.
const MAX_LINE: usize = 10 * 1024 * 1024;
/// Bytes of the agent's stderr kept for error messages.
pub(crate) const STDERR_TAIL: usize = 8 * 1024;
/// Shutdown: how long the agent gets after stdin EOF, then after SIGTERM to its group.
/// How long [`Conn::stderr_tail`] waits for stderr's end after the agent's stdout ended.
const STDERR_SETTLE: Duration = Duration::from_millis(500);
const EOF_GRACE: Duration = Duration::from_secs(1);
const TERM_GRACE: Duration = Duration::from_secs(3);

/// The variable awf's watchdog finds its children by (awf-exec's `TAG_VAR`).
const PROCESS_TAG_VAR: &str = "AWF_PROCESS_TAG";
static NEXT_TAG: AtomicU64 = AtomicU64::new(1);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A JSON-RPC error the agent answered with (or one standing in for a connection failure).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RpcError {
    /// JSON-RPC code (`-32000` auth required, `-32601` method not found, …); `0` for "no
    /// answer" (the process ended, the wait timed out).
    pub(crate) code: i64,
    /// Its message.
    pub(crate) message: String,
}

/// What the agent sends to one session while a turn runs.
#[derive(Debug)]
pub(crate) enum Inbound {
    /// A `session/update` notification's params.
    Update(Value),
    /// A `session/request_permission` request: its id and params; the turn answers it.
    Permission { id: Value, params: Value },
}

/// How to start an agent.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Launch {
    /// Absolute path of the program.
    pub(crate) program: PathBuf,
    /// Its arguments.
    pub(crate) args: Vec<String>,
    /// Variables added to awf's environment, in order.
    pub(crate) env: Vec<(String, String)>,
    /// Working directory of the process (the first step's dir; sessions name their own).
    pub(crate) dir: Option<PathBuf>,
}

type Pending = HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>;

/// A running agent.
pub(crate) struct Conn {
    out: Outbox,
    pending: Arc<Mutex<Pending>>,
    sessions: Arc<Mutex<HashMap<String, mpsc::UnboundedSender<Inbound>>>>,
    next_id: AtomicU64,
    child: tokio::sync::Mutex<Option<tokio::process::Child>>,
    /// The process group (= the agent's pid); `None` once it is known to be gone.
    pgid: Mutex<Option<i32>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// Fires when the agent's stderr ends (everything it wrote there is in `stderr`).
    stderr_done: CancellationToken,
    /// Fires when the agent's stdout ends (it exited or closed it).
    pub(crate) exited: CancellationToken,
    /// The agent's `initialize` result (`agentCapabilities`, `authMethods`, …).
    pub(crate) init: Mutex<Value>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("pgid", &*lock(&self.pgid))
            .finish_non_exhaustive()
    }
}

impl Conn {
    /// Spawns the agent (own process group, stdin/stdout piped, stderr captured) and starts
    /// the reader.
    ///
    /// # Errors
    /// The spawn error (`NotFound` when the program does not exist).
    pub(crate) fn spawn(launch: &Launch) -> std::io::Result<Arc<Self>> {
        // Not before awf's watchdog runs: it is what stops the agent if awf is killed.
        awf_domain::watchdog_start::wait_for_start();
        let mut cmd = tokio::process::Command::new(&launch.program);
        // awf's watchdog SIGKILLs every process tagged `<awf pid>-…` when awf dies without
        // closing its children (SIGKILL, OOM), the agent and what it started included.
        let tag = format!(
            "{}-acp{}",
            std::process::id(),
            NEXT_TAG.fetch_add(1, Ordering::Relaxed)
        );
        cmd.args(&launch.args)
            .env(PROCESS_TAG_VAR, tag)
            .envs(launch.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if let Some(d) = &launch.dir {
            cmd.current_dir(d);
        }
        let mut child = cmd.spawn()?;
        let pgid = child.id().and_then(|p| i32::try_from(p).ok());
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(std::io::Error::other("the agent's pipes were not set up"));
        };
        let (out, _writer) = crate::transport::writer(stdin, Arc::default());
        let conn = Arc::new(Self {
            out,
            pending: Arc::default(),
            sessions: Arc::default(),
            next_id: AtomicU64::new(0),
            child: tokio::sync::Mutex::new(Some(child)),
            pgid: Mutex::new(pgid),
            stderr: Arc::default(),
            stderr_done: CancellationToken::new(),
            exited: CancellationToken::new(),
            init: Mutex::new(Value::Null),
        });
        let tail = Arc::clone(&conn.stderr);
        let stderr_done = conn.stderr_done.clone();
        tokio::spawn(async move {
            let _done = stderr_done.drop_guard();
            let mut stderr = stderr;
            let mut buf = vec![0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let mut t = lock(&tail);
                t.extend_from_slice(&buf[..n]);
                if t.len() > STDERR_TAIL {
                    let cut = t.len() - STDERR_TAIL;
                    t.drain(..cut);
                }
            }
        });
        let reader = Reader {
            out: conn.out.clone(),
            pending: Arc::clone(&conn.pending),
            sessions: Arc::clone(&conn.sessions),
            exited: conn.exited.clone(),
        };
        tokio::spawn(reader.run(tokio::io::BufReader::with_capacity(64 * 1024, stdout)));
        Ok(conn)
    }

    /// The last [`STDERR_TAIL`] bytes the agent wrote on stderr (lossy UTF-8, trimmed).
    ///
    /// Once the agent's stdout has ended, waits up to [`STDERR_SETTLE`] for its stderr to end
    /// too, so the reason an agent printed just before exiting is in the tail.
    pub(crate) async fn stderr_tail(&self) -> String {
        if self.exited.is_cancelled() {
            let _ = tokio::time::timeout(STDERR_SETTLE, self.stderr_done.cancelled()).await;
        }
        String::from_utf8_lossy(&lock(&self.stderr))
            .trim()
            .to_owned()
    }

    /// Sends a request; the receiver gets its result or error ([`RpcError`] code `0` when the
    /// process ends first).
    pub(crate) fn start_request(
        &self,
        method: &str,
        params: Value,
    ) -> oneshot::Receiver<Result<Value, RpcError>> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if self.exited.is_cancelled() {
            let _ = tx.send(Err(gone()));
            return rx;
        }
        lock(&self.pending).insert(id, tx);
        self.out
            .send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        rx
    }

    /// Sends a request and waits at most `wait` for its answer.
    ///
    /// # Errors
    /// The agent's JSON-RPC error; code `0` when it did not answer in time or exited.
    pub(crate) async fn request(
        &self,
        method: &str,
        params: Value,
        wait: Duration,
    ) -> Result<Value, RpcError> {
        let rx = self.start_request(method, params);
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(gone()),
            Err(_) => Err(RpcError {
                code: 0,
                message: format!("no answer to {method} within {}s", wait.as_secs_f64()),
            }),
        }
    }

    /// Sends a notification.
    pub(crate) fn notify(&self, method: &str, params: Value) {
        self.out
            .send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Answers a request of the agent.
    pub(crate) fn reply(&self, id: Value, result: Value) {
        self.out
            .send(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }

    /// Routes session `id`'s updates and permission requests to the returned receiver (until
    /// the next call for the same session or [`Conn::forget`]).
    pub(crate) fn listen(&self, id: &str) -> mpsc::UnboundedReceiver<Inbound> {
        let (tx, rx) = mpsc::unbounded_channel();
        lock(&self.sessions).insert(id.to_owned(), tx);
        rx
    }

    /// Stops routing session `id` (its updates are dropped, a permission request answered
    /// `cancelled`).
    pub(crate) fn forget(&self, id: &str) {
        lock(&self.sessions).remove(id);
    }

    /// Whether session `id` was created on this connection and is still known.
    pub(crate) fn knows(&self, id: &str) -> bool {
        lock(&self.sessions).contains_key(id)
    }

    /// Ends the agent: stdin EOF, [`EOF_GRACE`], SIGTERM to the group, [`TERM_GRACE`], SIGKILL
    /// to the group (acp.md §4.1). Idempotent.
    pub(crate) async fn close(&self) {
        self.out.close();
        let mut guard = self.child.lock().await;
        let Some(child) = guard.as_mut() else { return };
        let pgid = *lock(&self.pgid);
        let exited_by_itself = tokio::time::timeout(EOF_GRACE, child.wait()).await.is_ok();
        if !exited_by_itself {
            signal(pgid, Signal::SIGTERM);
            if tokio::time::timeout(TERM_GRACE, child.wait())
                .await
                .is_err()
            {
                signal(pgid, Signal::SIGKILL);
                let _ = tokio::time::timeout(TERM_GRACE, child.wait()).await;
            }
        }
        // The leader is gone; children it left in the group go too.
        signal(pgid, Signal::SIGKILL);
        *lock(&self.pgid) = None;
        *guard = None;
    }
}

impl Drop for Conn {
    /// A connection dropped without [`Conn::close`] (a run future dropped half-way) leaves no
    /// process behind: the group gets SIGKILL.
    fn drop(&mut self) {
        let pgid = *lock(&self.pgid);
        signal(pgid, Signal::SIGKILL);
    }
}

fn signal(pgid: Option<i32>, sig: Signal) {
    if let Some(g) = pgid.filter(|g| *g > 1) {
        let _ = killpg(Pid::from_raw(g), sig);
    }
}

fn gone() -> RpcError {
    RpcError {
        code: 0,
        message: "the agent process ended".into(),
    }
}

struct Reader {
    out: Outbox,
    pending: Arc<Mutex<Pending>>,
    sessions: Arc<Mutex<HashMap<String, mpsc::UnboundedSender<Inbound>>>>,
    exited: CancellationToken,
}

impl Reader {
    async fn run<R: tokio::io::AsyncBufRead + Unpin>(self, mut r: R) {
        loop {
            match crate::transport::read_line(&mut r, MAX_LINE).await {
                Ok(Line::Text(t)) => match serde_json::from_str::<Value>(&t) {
                    Ok(v) => self.frame(v),
                    Err(e) => {
                        tracing::debug!(target: "awf::acp::client", error = %e, "agent wrote a line that is not JSON");
                    }
                },
                Ok(Line::TooLong | Line::NotUtf8) => {
                    tracing::warn!(target: "awf::acp::client", "agent frame dropped (too long or not UTF-8)");
                }
                Ok(Line::Eof) | Err(_) => break,
            }
        }
        self.exited.cancel();
        let drained: Vec<_> = lock(&self.pending).drain().collect();
        for (_, tx) in drained {
            let _ = tx.send(Err(gone()));
        }
        lock(&self.sessions).clear();
    }

    fn frame(&self, v: Value) {
        let method = v.get("method").and_then(Value::as_str);
        let id = v.get("id").cloned().filter(|i| !i.is_null());
        let session = |v: &Value| {
            v.get("params")
                .and_then(|p| p.get("sessionId"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        match (method, id) {
            (Some("session/update"), None) => {
                if let Some(s) = session(&v)
                    && let Some(tx) = lock(&self.sessions).get(&s)
                {
                    let _ = tx.send(Inbound::Update(
                        v.get("params").cloned().unwrap_or_default(),
                    ));
                }
            }
            (Some(_), None) => {}
            (Some("session/request_permission"), Some(id)) => {
                let params = v.get("params").cloned().unwrap_or_default();
                let routed = session(&v).and_then(|s| lock(&self.sessions).get(&s).cloned());
                let unanswered = match routed {
                    Some(tx) => tx
                        .send(Inbound::Permission {
                            id: id.clone(),
                            params,
                        })
                        .is_err(),
                    None => true,
                };
                if unanswered {
                    // No turn of that session is running: nobody can decide.
                    self.out.send(json!({"jsonrpc": "2.0", "id": id,
                        "result": {"outcome": {"outcome": "cancelled"}}}));
                }
            }
            (Some(m), Some(id)) => {
                self.out.send(json!({"jsonrpc": "2.0", "id": id, "error": {
                    "code": -32601, "message": format!("method not found: {m} (awf advertises no fs or terminal capability)")}}));
            }
            (None, Some(id)) => {
                let Some(n) = id.as_u64() else { return };
                let Some(tx) = lock(&self.pending).remove(&n) else {
                    return;
                };
                let r = match v.get("error") {
                    Some(e) => Err(RpcError {
                        code: e.get("code").and_then(Value::as_i64).unwrap_or(-32603),
                        message: e
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("error")
                            .to_owned(),
                    }),
                    None => Ok(v.get("result").cloned().unwrap_or_default()),
                };
                let _ = tx.send(r);
            }
            (None, None) => {}
        }
    }
}
