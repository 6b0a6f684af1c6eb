//! `awf-mock-llm`: a scripted LLM HTTP server on 127.0.0.1 for awf's offline tests.
//!
//! One server answers the four API dialects the agent CLIs speak:
//! Anthropic Messages (`POST */v1/messages`, claude), OpenAI Responses (`POST */responses`, codex),
//! Gemini (`POST */models/<m>:streamGenerateContent|generateContent`, gemini) and OpenAI Chat
//! Completions (`POST */chat/completions`, opencode and awf's `openai_compatible`), plus `HEAD /`.
//! Replies come from a script of rules matched on the request's content (see [`script`]), and
//! every request is recorded (see [`MockLlm::requests`] and the JSON-lines log).
//!
//! ```no_run
//! use awf_mock_llm::MockLlm;
//! let mock = MockLlm::start(serde_json::json!({"default": {"text": "hello from mock"}}));
//! let base = mock.url(); // e.g. http://127.0.0.1:41234
//! # let _ = base;
//! ```
//!
//! Source: ../shared/spec/agents-offline.md (dialects, minimal responses, SSE framing, side requests).

mod http;
pub mod inspect;
mod render;
pub mod script;

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use crate::http::Response;
use crate::inspect::Dialect;

/// Where the reply script comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum ScriptSource {
    /// A script held in memory (replace it with [`MockLlm::set_script`]).
    Inline(Value),
    /// A JSON file, re-read on every request so a test can rewrite it between calls.
    File(PathBuf),
}

/// Server options for [`MockLlm::try_start_with`].
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// TCP port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// The reply script.
    pub script: ScriptSource,
    /// JSON-lines request log to append to (created if missing).
    pub log: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            port: 0,
            script: ScriptSource::Inline(json!({})),
            log: None,
        }
    }
}

struct Shared {
    script: Mutex<ScriptSource>,
    log: Option<PathBuf>,
    requests: Mutex<Vec<Value>>,
    hits: Mutex<HashMap<String, u64>>,
    seq: AtomicU64,
    stop: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running mock server. It serves on a background thread (one thread per connection) and
/// stops accepting when dropped.
pub struct MockLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for MockLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockLlm").field("addr", &self.addr).finish()
    }
}

impl MockLlm {
    /// Starts a server on a free port of 127.0.0.1 with an in-memory `script`.
    ///
    /// # Panics
    /// When no loopback port can be bound (test helper; use [`MockLlm::try_start_with`] to get the error).
    pub fn start(script: Value) -> Self {
        match Self::try_start_with(Options {
            script: ScriptSource::Inline(script),
            ..Options::default()
        }) {
            Ok(m) => m,
            Err(e) => panic!("awf-mock-llm: cannot bind 127.0.0.1:0: {e}"),
        }
    }

    /// Starts a server with full options.
    ///
    /// # Errors
    /// Binding the listener fails (port in use, no loopback).
    pub fn try_start_with(opts: Options) -> io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", opts.port))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            script: Mutex::new(opts.script),
            log: opts.log,
            requests: Mutex::new(Vec::new()),
            hits: Mutex::new(HashMap::new()),
            seq: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let sh = Arc::clone(&shared);
        let accept = thread::Builder::new()
            .name("awf-mock-llm-accept".into())
            .spawn(move || accept_loop(&listener, &sh))?;
        Ok(Self {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// Base URL without a trailing slash, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Replaces the script (in memory) for the following requests and resets `times` counters.
    pub fn set_script(&self, script: Value) {
        *lock(&self.shared.script) = ScriptSource::Inline(script);
        lock(&self.shared.hits).clear();
    }

    /// Every request received so far, oldest first, as logged (see the crate README for the shape).
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.shared.requests).clone()
    }

    /// Only the model requests (those with a `dialect`), oldest first.
    pub fn model_requests(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r["dialect"].is_string())
            .collect()
    }

    /// Blocks the calling thread until the server is dropped by another thread or the process
    /// ends (used by the binary).
    pub fn serve_forever(mut self) {
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept() so the thread sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = conn else { continue };
        let sh = Arc::clone(shared);
        let _ = thread::Builder::new()
            .name("awf-mock-llm-conn".into())
            .spawn(move || {
                let _ = handle(stream, &sh);
            });
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn load_script(src: &ScriptSource) -> Result<Value, String> {
    match src {
        ScriptSource::Inline(v) => Ok(v.clone()),
        ScriptSource::File(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| format!("cannot read script {}: {e}", p.display()))?;
            serde_json::from_str(&text)
                .map_err(|e| format!("script {} is not valid JSON: {e}", p.display()))
        }
    }
}

fn handle(mut stream: TcpStream, shared: &Shared) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let _ = stream.set_nodelay(true);
    let Some(req) = http::read_request(&mut stream)? else {
        return Ok(());
    };
    if shared.stop.load(Ordering::SeqCst) {
        return Ok(());
    }
    let seq = shared.seq.fetch_add(1, Ordering::SeqCst) + 1;
    let raw = String::from_utf8_lossy(&req.body).into_owned();
    let body: Value = if req.body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&req.body).unwrap_or_else(|_| Value::String(raw.clone()))
    };
    let mut headers = Map::new();
    for (n, v) in &req.headers {
        let merged = match headers.get(n).and_then(Value::as_str) {
            Some(prev) => format!("{prev}, {v}"),
            None => v.clone(),
        };
        headers.insert(n.clone(), Value::String(merged));
    }
    let mut entry = json!({
        "seq": seq, "ts_ms": now_ms(), "method": req.method, "path": req.path,
        "query": req.query, "headers": headers, "body": body,
        "dialect": null, "side": null, "matched": null, "status": null,
    });

    let dialect = if req.method == "POST" {
        Dialect::from_path(&req.path)
    } else {
        None
    };
    let mut delay = 0u64;
    let resp = match dialect {
        None if req.method == "HEAD" || (req.method == "GET" && req.path == "/") => {
            Response::json(200, &json!({"ok": true}))
        }
        None => Response::json(
            404,
            &json!({"error": {"message": format!("awf-mock-llm: no route for {} {}", req.method, req.path)}}),
        ),
        Some(d) => {
            let empty = json!({});
            let facts = inspect::facts(
                d,
                &req.path,
                &req.query,
                if body.is_object() { &body } else { &empty },
            );
            entry["dialect"] = json!(d.name());
            entry["side"] = json!(facts.side);
            entry["facts"] = json!({"model": facts.model, "stream": facts.sse,
                "has_tools": facts.has_tools, "last_user": facts.last_user,
                "tool_results": facts.tool_results});
            let script = load_script(&lock(&shared.script));
            match script {
                Err(msg) => {
                    entry["matched"] = json!("script_error");
                    Response::json(500, &json!({"error": {"message": msg}}))
                }
                Ok(script) => {
                    let seen = script::Seen {
                        path: &req.path,
                        raw_body: &raw,
                        headers: &req.headers,
                    };
                    let (mut reply, label) =
                        script::select(&script, &facts, &seen, &mut lock(&shared.hits));
                    inspect::resolve_tool_globs(&mut reply.tools, &body);
                    entry["matched"] = json!(label);
                    if let Some(t) = reply.tool_for(&facts).filter(|_| reply.status < 400) {
                        entry["answer"] = json!({"tool": t.name});
                    } else if reply.status < 400 {
                        entry["answer"] = json!({"text": reply.text});
                    }
                    delay = reply.delay_ms;
                    render::render(&reply, &facts, &render::Ids { n: seq })
                }
            }
        }
    };
    entry["status"] = json!(resp.status);
    record(shared, entry);
    if delay > 0 {
        thread::sleep(Duration::from_millis(delay));
    }
    http::write_response(&mut stream, &resp, req.method == "HEAD")
}

fn record(shared: &Shared, entry: Value) {
    // Holding the lock keeps log lines whole and in the same order as `requests()`.
    let mut requests = lock(&shared.requests);
    if let Some(path) = &shared.log {
        let line = format!("{entry}\n");
        let written = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            eprintln!("awf-mock-llm: cannot append to {}: {e}", path.display());
        }
    }
    requests.push(entry);
}
