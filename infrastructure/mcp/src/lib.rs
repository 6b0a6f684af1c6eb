//! awf-mcp: the MCP server of `awf mcp-serve`. It serves any
//! [`awf_domain::ports::ToolProvider`] (in awf: the tool router over the
//! built-in tools) over newline-delimited JSON-RPC on stdio, with rmcp's server and a
//! hand-written [`rmcp::ServerHandler`].
//!
//! Wire behaviour (shared/spec/mcp.md §3.1, §5):
//! - server name `awf-mcp-server`, version as given ([`ServeOptions::version`]: awf's);
//!   protocol versions 2024-11-05 to 2025-11-25; a client asking for another one (newer, or
//!   unknown) is answered with 2025-11-25. Capabilities: tools only.
//! - stdout carries only frames (one JSON-RPC message per line); logs go through `tracing`,
//!   which the binary writes to stderr.
//! - A line over [`ServeOptions::max_frame_bytes`] (10 MiB) is answered with a JSON-RPC error
//!   `-32700` (the request's id when it can be read from the line's first 64 KiB, else `null`)
//!   without echoing the line; the connection lives on.
//! - Every line is checked before rmcp sees it (JSON-RPC 2.0 §5): one that does not parse
//!   (garbage, invalid UTF-8, a lone surrogate, nesting over 128, two messages on one line)
//!   gets `-32700`; one that is not a request (a batch, `jsonrpc` other than "2.0", an id
//!   that is not a string or an integer, no `method`) gets `-32600`; both with the request's
//!   id when it can be read, else `"id": null`. Empty lines are ignored, a UTF-8 BOM and CRLF
//!   line ends are accepted.
//! - An object of the message that repeats a key (at any depth) is refused, as the HTTP API
//!   refuses it (one helper, [`awf_domain::json::parse_unique`]): in a `tools/call`'s
//!   `arguments`, with the call's tool error (`isError: true`,
//!   `[USER.INPUT.VALIDATION_FAILED] the tool call's arguments repeat the key "who" (at /who)…`);
//!   elsewhere in a request with `-32600` naming the key (`"id": null` when it is `id`); a
//!   notification or response that repeats a key is dropped. The call never runs.
//! - A request whose id is that of a request of the client still pending (not answered yet)
//!   is refused with `-32600` and `"id": null` (the message names the id, `data.duplicate_id`
//!   holds it) and never runs; the pending request is answered as usual (JSON-RPC 2.0 §4:
//!   ids are unique among a client's pending requests; rmcp would answer only one of the
//!   two). A `notifications/cancelled` frees its request's id (no answer follows), a
//!   `tools/call`'s once the call stopped.
//! - A request rmcp could not read, or would answer without its id, is answered by the
//!   filter under its id: a known method with parameters of the wrong shape (a `_meta` that
//!   is not an object) `-32602` naming what is wrong; a second `initialize` `-32600`
//!   ("already initialized"); once initialized, an unknown method `-32601` ("Method not
//!   found: <method>").
//! - Before `initialize`, a request other than `initialize` or `ping` gets `-32600` ("the
//!   server is not initialized") and never runs; `ping` is answered; notifications and
//!   responses are dropped (logged).
//! - `tools/call` of an unknown tool is JSON-RPC `-32602`; a tool that fails, and a tool that
//!   panics, answer with an `isError: true` result saying why.
//! - A call whose request carries `_meta.progressToken` gets a [`ProgressSink`]
//!   (`ToolProvider::call_with_progress`):
//!   each report is sent as `notifications/progress` for that token, all before the answer
//!   (dropped once the call is cancelled).
//! - A client's `notifications/cancelled` cancels the call's token; stdin EOF or the
//!   `shutdown` token end the server: every in-flight call's token is cancelled, the calls
//!   are answered (a `cancelled` error result) and awaited (at most [`ServeOptions::shutdown_grace`]) so no child they started
//!   outlives it.

use std::borrow::Cow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Context;
use std::task::Poll;
use std::time::Duration;

use awf_domain::ports::ToolProvider;
use awf_domain::ports::tools::ProgressSink;
use awf_domain::ports::tools::ToolCall;
use awf_domain::ports::tools::ToolCallError;
use awf_domain::ports::tools::ToolOutput;
use awf_domain::ports::tools::ToolProgress;
use rmcp::ErrorData as McpError;
use rmcp::RoleServer;
use rmcp::ServerHandler;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::model::CallToolResponse;
use rmcp::model::CallToolResult;
use rmcp::model::ContentBlock;
use rmcp::model::Implementation;
use rmcp::model::InitializeResult;
use rmcp::model::ListToolsResult;
use rmcp::model::PaginatedRequestParams;
use rmcp::model::ProgressNotificationParam;
use rmcp::model::ProgressToken;
use rmcp::model::ProtocolVersion;
use rmcp::model::ServerCapabilities;
use rmcp::model::Tool;
use rmcp::service::RequestContext;
use rmcp::transport::async_rw::AsyncRwTransport;
use serde_json::Value;
use tokio::io::AsyncBufReadExt;
use tokio::io::AsyncRead;
use tokio::io::AsyncWrite;
use tokio::io::AsyncWriteExt;
use tokio::io::BufReader;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The server name `initialize` answers with.
pub const SERVER_NAME: &str = "awf-mcp-server";

/// The largest frame accepted by default: 10 MiB (AWF (Go)'s cap).
pub const DEFAULT_MAX_FRAME_BYTES: usize = 10 * 1024 * 1024;

/// The newest protocol version served; newer or unknown requests get this one.
pub const NEWEST_PROTOCOL: &str = "2025-11-25";

/// How much of an oversized line is kept to find its request id.
const ID_SCAN_BYTES: usize = 64 * 1024;

/// How the server runs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Version in `serverInfo` (awf's version).
    pub version: String,
    /// Longest accepted line, in bytes, without its line end.
    pub max_frame_bytes: usize,
    /// Longest tool result text sent, in bytes (cut on a UTF-8 boundary, with a note), so an
    /// answer never exceeds what a client reads.
    pub max_output_bytes: usize,
    /// How long, at the end, in-flight calls get to stop after their token is cancelled.
    pub shutdown_grace: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            version: String::from("0.0.0"),
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            max_output_bytes: DEFAULT_MAX_FRAME_BYTES - 64 * 1024,
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// Why [`serve`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServeEnd {
    /// The client closed the input (stdin EOF), before or after `initialize`.
    InputClosed,
    /// The `shutdown` token was cancelled (SIGTERM, SIGINT).
    Shutdown,
}

/// Serves `provider` on this process's stdin and stdout until EOF or `shutdown`.
///
/// # Errors
/// The I/O error that made serving impossible (stdout closed while writing is only logged).
pub async fn serve_stdio(
    provider: Arc<dyn ToolProvider>,
    options: ServeOptions,
    shutdown: CancellationToken,
) -> std::io::Result<ServeEnd> {
    let (input, output) = rmcp::transport::io::stdio_pipes();
    serve(provider, options, input, output, shutdown).await
}

/// Serves `provider` over `input` and `output` (newline-delimited JSON-RPC, MCP's stdio
/// transport) until `input` ends or `shutdown` is cancelled.
///
/// # Errors
/// Never at present (kept for transports that can fail to start).
pub async fn serve<R, W>(
    provider: Arc<dyn ToolProvider>,
    options: ServeOptions,
    input: R,
    output: W,
    shutdown: CancellationToken,
) -> std::io::Result<ServeEnd>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (frames_tx, frames_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let writer = tokio::spawn(write_frames(frames_rx, output));
    let (to_rmcp, from_filter) = tokio::io::duplex(256 * 1024);
    let pending = PendingIds::default();
    // Cancelled when the input ends: calls in flight stop at once (rmcp waits up to 5 s for
    // their answers before it closes the session).
    let input_closed = CancellationToken::new();
    let reader = {
        let frames = frames_tx.clone();
        let max = options.max_frame_bytes;
        let closed = input_closed.clone();
        let pending = pending.clone();
        tokio::spawn(async move {
            filter_input(input, to_rmcp, frames, max, pending).await;
            closed.cancel();
        })
    };
    let transport = AsyncRwTransport::<RoleServer, _, _>::new_server(
        from_filter,
        FrameSink::new(frames_tx, pending.clone()),
    )
    .with_max_line_length(options.max_frame_bytes.saturating_add(16));

    let calls = CancellationToken::new();
    let tracker = TaskTracker::new();
    let handler = Handler {
        pending: pending.clone(),
        tools: Arc::new(provider.tools().into_iter().map(to_rmcp_tool).collect()),
        provider,
        calls: calls.clone(),
        tracker: tracker.clone(),
        version: options.version.clone(),
        max_output_bytes: options.max_output_bytes,
        shutdown_grace: options.shutdown_grace,
    };
    let calls_on_eof = calls.clone();
    let service = async move {
        let session = run_service(handler, transport);
        tokio::pin!(session);
        tokio::select! {
            end = &mut session => end,
            () = input_closed.cancelled() => {
                calls_on_eof.cancel();
                session.await
            }
        }
    };
    tokio::pin!(service);
    let end = tokio::select! {
        biased;
        () = shutdown.cancelled() => {
            // As on EOF: the calls in flight are cancelled and answered (`cancelled`), then
            // the session ends, its input closed by stopping the filter.
            calls.cancel();
            reader.abort();
            let budget = options.shutdown_grace.saturating_add(Duration::from_secs(1));
            let _ = tokio::time::timeout(budget, &mut service).await;
            ServeEnd::Shutdown
        }
        end = &mut service => end,
    };
    tracing::debug!(target: "awf::mcp", ?end, "mcp-serve stopping");
    calls.cancel();
    tracker.close();
    if tokio::time::timeout(options.shutdown_grace, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            target: "awf::mcp",
            grace_ms = u64::try_from(options.shutdown_grace.as_millis()).unwrap_or(u64::MAX),
            "tool calls still running at shutdown"
        );
    }
    reader.abort();
    let _ = reader.await;
    // Every sender is gone now (the transport with the service, the filter with its task):
    // the writer flushes what is queued and ends.
    let _ = tokio::time::timeout(Duration::from_secs(1), writer).await;
    Ok(end)
}

async fn run_service(
    handler: Handler,
    transport: AsyncRwTransport<RoleServer, tokio::io::DuplexStream, FrameSink>,
) -> ServeEnd {
    match handler.serve(transport).await {
        Ok(running) => {
            match running.waiting().await {
                Ok(reason) => tracing::debug!(target: "awf::mcp", ?reason, "mcp session ended"),
                Err(e) => tracing::warn!(target: "awf::mcp", error = %e, "mcp session failed"),
            }
            ServeEnd::InputClosed
        }
        Err(e) => {
            tracing::debug!(target: "awf::mcp", error = %e, "no mcp session");
            ServeEnd::InputClosed
        }
    }
}

/// The hand-written handler: the tool list is fixed when the server starts.
struct Handler {
    provider: Arc<dyn ToolProvider>,
    tools: Arc<Vec<Tool>>,
    /// Parent of every call's token, cancelled at shutdown.
    calls: CancellationToken,
    tracker: TaskTracker,
    version: String,
    max_output_bytes: usize,
    /// How long a call may take to stop at shutdown before it is answered `cancelled`.
    shutdown_grace: Duration,
    /// The client's pending request ids (a cancelled call's id is freed when it stopped).
    pending: PendingIds,
}

fn to_rmcp_tool(spec: awf_domain::ports::tools::ToolSpec) -> Tool {
    let schema = match spec.input_schema {
        Value::Object(map) => map,
        _ => {
            let mut map = serde_json::Map::new();
            map.insert("type".into(), Value::String("object".into()));
            map
        }
    };
    Tool::new(spec.name, spec.description, Arc::new(schema))
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        String::from("(no message)")
    }
}

/// Cuts `text` to at most `max` bytes on a character boundary, with a note saying so.
fn cap_output(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let total = text.len();
    let mut cut = max;
    while cut > 0 && !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str(&format!(
        "\n[awf-mcp-server: output truncated at {cut} of {total} bytes]"
    ));
    text
}

impl Handler {
    fn result(&self, out: ToolOutput) -> CallToolResult {
        let content = vec![ContentBlock::text(cap_output(
            out.text,
            self.max_output_bytes,
        ))];
        let mut result = if out.is_error {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        };
        result.structured_content = out.structured;
        result
    }
}

impl ServerHandler for Handler {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(SERVER_NAME, self.version.clone()))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // Unknown names go to the provider too (the router audits every call, even to a tool
        // that does not exist), which answers `UnknownTool`: -32602.
        let name = request.name.to_string();
        // Dropped last, when this call returns (or rmcp drops it): its id may be freed.
        let _ended = CallEnded {
            pending: self.pending.clone(),
            key: serde_json::to_string(&context.id).unwrap_or_default(),
        };
        let token = self.calls.child_token();
        // If rmcp drops this future (the session ends), the call is cancelled too.
        let _guard = token.clone().drop_guard();
        let call = ToolCall {
            name: name.clone(),
            arguments: request.arguments.unwrap_or_default(),
            call_id: Some(context.id.to_string()),
        };
        let provider = Arc::clone(&self.provider);
        let call_token = token.clone();
        // A client that sent `_meta.progressToken` gets the call's progress reports as
        // `notifications/progress`, all of them before the answer.
        let (progress, forwarder) = match context.meta.get_progress_token() {
            Some(progress_token) => {
                let (tx, rx) = mpsc::unbounded_channel::<ToolProgress>();
                let peer = context.peer.clone();
                let forwarder = tokio::spawn(forward_progress(rx, peer, progress_token));
                let sink: ProgressSink = Arc::new(move |p: ToolProgress| {
                    let _ = tx.send(p);
                });
                (Some(sink), Some(forwarder))
            }
            None => (None, None),
        };
        let mut task = self.tracker.spawn(async move {
            provider
                .call_with_progress(call, call_token, progress)
                .await
        });
        let joined = tokio::select! {
            joined = &mut task => joined,
            () = context.ct.cancelled() => {
                tracing::debug!(target: "awf::mcp", tool = %name, "call cancelled by the client");
                token.cancel();
                task.await
            }
            () = self.calls.cancelled() => {
                // Shutdown: the call gets its answer within the grace even if the tool is
                // still stopping (its processes are then stopped by the server's exit sweep).
                match tokio::time::timeout(self.shutdown_grace, &mut task).await {
                    Ok(joined) => joined,
                    Err(_) => {
                        return Ok(self
                            .result(ToolOutput::error(format!("tool {name} was cancelled")))
                            .into());
                    }
                }
            }
        };
        if let Some(f) = forwarder {
            if token.is_cancelled() {
                // Cancelled (by the client, or the session is ending): nobody waits for the
                // progress any more, and the session may no longer take frames.
                f.abort();
            } else {
                // The sink went with the call: the forwarder ends once it sent what was
                // queued, so every notification precedes the answer.
                let _ = tokio::time::timeout(Duration::from_secs(5), f).await;
            }
        }
        match joined {
            Ok(Ok(out)) => Ok(self.result(out).into()),
            Ok(Err(ToolCallError::UnknownTool(n))) => {
                Err(McpError::invalid_params(format!("unknown tool: {n}"), None))
            }
            Err(e) if e.is_panic() => {
                let why = panic_text(e.into_panic().as_ref());
                tracing::error!(target: "awf::mcp", tool = %name, panic = %why, "tool panicked");
                Ok(self
                    .result(ToolOutput::error(format!("tool {name} panicked: {why}")))
                    .into())
            }
            Err(_) => Ok(self
                .result(ToolOutput::error(format!("tool {name} was cancelled")))
                .into()),
        }
    }
}

/// Sends each progress report of a call as a `notifications/progress` for `token`, in order,
/// until the call drops its sink.
async fn forward_progress(
    mut rx: mpsc::UnboundedReceiver<ToolProgress>,
    peer: rmcp::Peer<RoleServer>,
    token: ProgressToken,
) {
    while let Some(p) = rx.recv().await {
        let mut param = ProgressNotificationParam::new(token.clone(), p.progress);
        param.total = p.total;
        param.message = p.message;
        if let Err(e) = peer.notify_progress(param).await {
            tracing::debug!(target: "awf::mcp", error = %e, "progress notification not sent");
            return;
        }
    }
}

/// The ids of the client's requests passed on to rmcp and not answered yet (each as its JSON
/// text: `7` and `"7"` are two ids), shared by the input filter, which refuses a request
/// reusing one of them, the [`FrameSink`], which frees an id once rmcp writes its answer,
/// and the handler, which frees the id of a cancelled `tools/call` once the call stopped.
#[derive(Clone, Default)]
struct PendingIds(Arc<std::sync::Mutex<HashMap<String, Pending>>>);

/// Where a pending request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    /// Any request but `tools/call`, until its answer (or its cancellation: rmcp then drops
    /// its answer, and such a request ends at once).
    Open,
    /// A `tools/call` whose handler runs.
    Running,
    /// A `tools/call` the client cancelled whose handler still runs: its id stays taken
    /// until the call stopped, since rmcp hands the answer the handler then gives to
    /// whichever request holds the id by then.
    RunningCancelled,
    /// A `tools/call` whose handler returned, until its answer is written (or dropped by rmcp
    /// as cancelled).
    Finished,
}

impl PendingIds {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Notes `id` as pending (`tool_call`: a `tools/call`); `false` (nothing changes) when
    /// it is pending already.
    fn insert(&self, id: &Value, tool_call: bool) -> bool {
        match self.lock().entry(id.to_string()) {
            Entry::Occupied(_) => false,
            Entry::Vacant(v) => {
                v.insert(if tool_call {
                    Pending::Running
                } else {
                    Pending::Open
                });
                true
            }
        }
    }

    /// The client cancelled the request `id`: rmcp drops its answer, so its id is free once
    /// nothing of it can reach the client any more (a `tools/call` still running: when it
    /// stopped, see [`PendingIds::call_ended`]).
    fn cancelled(&self, id: &Value) {
        let mut map = self.lock();
        let key = id.to_string();
        match map.get(&key) {
            Some(Pending::Running) => {
                map.insert(key, Pending::RunningCancelled);
            }
            Some(Pending::Open | Pending::Finished) => {
                map.remove(&key);
            }
            Some(Pending::RunningCancelled) | None => {}
        }
    }

    /// The handler of the `tools/call` whose id is the JSON text `key` returned.
    fn call_ended(&self, key: &str) {
        let mut map = self.lock();
        match map.get(key) {
            Some(Pending::Running) => {
                map.insert(key.to_owned(), Pending::Finished);
            }
            Some(Pending::RunningCancelled) => {
                map.remove(key);
            }
            _ => {}
        }
    }

    /// The answered id of an outgoing frame, freed: only a response (`result` or `error`,
    /// no `method`) with an id frees one. The frame is parsed only while some id is
    /// pending, without building its content.
    fn answered(&self, line: &[u8]) {
        /// Of an outgoing frame, only what tells a response and its id (the rest skipped).
        #[derive(serde::Deserialize)]
        struct Outgoing {
            #[serde(default)]
            id: Option<Value>,
            #[serde(default)]
            method: Option<serde::de::IgnoredAny>,
        }
        if self.lock().is_empty() {
            return;
        }
        if let Ok(Outgoing {
            id: Some(id),
            method: None,
        }) = serde_json::from_slice::<Outgoing>(line)
            && !id.is_null()
        {
            self.lock().remove(&id.to_string());
        }
    }
}

/// Tells [`PendingIds`] that a `tools/call`'s handler returned (or was dropped), when dropped.
struct CallEnded {
    pending: PendingIds,
    key: String,
}

impl Drop for CallEnded {
    fn drop(&mut self) {
        self.pending.call_ended(&self.key);
    }
}

/// What rmcp writes: whole lines are queued for the writer task, so frames from rmcp and
/// from the input filter never interleave within a line. Each answer frees its request's id
/// ([`PendingIds`]) as it is queued.
struct FrameSink {
    buf: Vec<u8>,
    tx: mpsc::UnboundedSender<Vec<u8>>,
    pending: PendingIds,
}

impl FrameSink {
    fn new(tx: mpsc::UnboundedSender<Vec<u8>>, pending: PendingIds) -> Self {
        Self {
            buf: Vec::new(),
            tx,
            pending,
        }
    }
}

impl AsyncWrite for FrameSink {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        // Only the new bytes are searched (the buffer holds no line break).
        let mut from = this.buf.len();
        this.buf.extend_from_slice(data);
        while let Some(i) = memchr::memchr(b'\n', &this.buf[from..]) {
            let rest = this.buf.split_off(from + i + 1);
            let line = std::mem::replace(&mut this.buf, rest);
            this.pending.answered(&line);
            if this.tx.send(line).is_err() {
                return Poll::Ready(Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe)));
            }
            from = 0;
        }
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if !this.buf.is_empty() {
            let mut line = std::mem::take(&mut this.buf);
            line.push(b'\n');
            let _ = this.tx.send(line);
        }
        Poll::Ready(Ok(()))
    }
}

async fn write_frames<W: AsyncWrite + Unpin>(mut rx: mpsc::UnboundedReceiver<Vec<u8>>, mut out: W) {
    while let Some(line) = rx.recv().await {
        if let Err(e) = out.write_all(&line).await {
            tracing::warn!(target: "awf::mcp", error = %e, "cannot write to stdout");
            return;
        }
        // Flush when nothing else is queued (one syscall per burst).
        if rx.is_empty()
            && let Err(e) = out.flush().await
        {
            tracing::warn!(target: "awf::mcp", error = %e, "cannot flush stdout");
            return;
        }
    }
    let _ = out.flush().await;
}

fn error_frame(id: &Value, code: i64, message: &str) -> Vec<u8> {
    let frame = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code, "message": message},
    });
    let mut bytes = frame.to_string().into_bytes();
    bytes.push(b'\n');
    bytes
}

/// The `"id"` of a JSON-RPC request whose line is cut: the first `"id":` key followed by a
/// number or a string, in `prefix`.
fn scan_id(prefix: &[u8]) -> Value {
    let text = String::from_utf8_lossy(prefix);
    let mut rest: &str = &text;
    while let Some(at) = rest.find("\"id\"") {
        let after = rest[at + 4..].trim_start();
        if let Some(v) = after.strip_prefix(':') {
            let v = v.trim_start();
            if let Some(s) = v.strip_prefix('"') {
                if let Some(end) = s.find('"') {
                    return Value::String(s[..end].to_owned());
                }
            } else {
                let num: String = v
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '-')
                    .collect();
                if let Ok(n) = num.parse::<i64>() {
                    return Value::from(n);
                }
            }
        }
        rest = &rest[at + 4..];
    }
    Value::Null
}

/// What the filter does with one line.
enum Verdict {
    /// Passed on to rmcp; `initialize` when it is the `initialize` request.
    Forward {
        initialize: bool,
        /// The id of a request rmcp answers under that id (one it reads as a request), and
        /// whether it is a `tools/call`: pending until the answer, refused in another
        /// request meanwhile.
        request_id: Option<(Value, bool)>,
        /// The id of the request a `notifications/cancelled` cancels (rmcp then drops its
        /// answer): no longer pending.
        cancels: Option<Value>,
    },
    /// Dropped (logged with the reason).
    Drop(&'static str),
    /// Answered by the filter with this frame; rmcp never sees the line.
    Answer(Vec<u8>),
}

/// A JSON-RPC id that can be echoed: a string or an integer.
fn usable_id(id: Option<&Value>) -> Option<&Value> {
    id.filter(|v| v.is_string() || v.is_i64() || v.is_u64())
}

fn result_frame(id: &Value, result: &Value) -> Vec<u8> {
    let mut bytes = serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result})
        .to_string()
        .into_bytes();
    bytes.push(b'\n');
    bytes
}

/// Checks one line (BOM and CRLF allowed) before rmcp sees it, so every request gets an
/// answer (JSON-RPC 2.0 §5: `-32700` for what does not parse, `-32600` for what is not a
/// request, with `"id": null` when no id can be read) and nothing but `initialize` and `ping`
/// is served before `initialize`.
fn classify(line: &[u8], initialized: bool) -> Verdict {
    let body = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    let body = body.strip_suffix(b"\n").unwrap_or(body);
    let body = body.strip_suffix(b"\r").unwrap_or(body);
    if body.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Drop("empty line");
    }
    // serde_json refuses invalid UTF-8, lone surrogates, nesting over 128 and trailing data
    // (two messages on one line), all of which rmcp would drop without an answer. An object
    // that repeats a key is refused too (rmcp would take its last value, the HTTP API
    // answers 400): see [`repeated_key`].
    let parsed = match awf_domain::json::parse_unique(body) {
        Ok(v) => Ok(v),
        Err(awf_domain::json::NotUnique::Json(e)) => Err(e),
        // Read whole as rmcp would read it (the last value of each key wins), for its id and
        // method; a text that is not JSON after all is refused as such.
        Err(awf_domain::json::NotUnique::Repeated(r)) => match serde_json::from_slice(body) {
            Ok(Value::Object(m)) => return repeated_key(&m, &r),
            other => other,
        },
    };
    let m = match parsed {
        Ok(Value::Object(m)) => m,
        Ok(Value::Array(_)) => {
            return Verdict::Answer(error_frame(
                &Value::Null,
                -32600,
                "Invalid request: batches are not supported",
            ));
        }
        Ok(_) => {
            return Verdict::Answer(error_frame(
                &Value::Null,
                -32600,
                "Invalid request: a JSON-RPC message is an object",
            ));
        }
        Err(e) => {
            let id = scan_id(&body[..body.len().min(ID_SCAN_BYTES)]);
            return Verdict::Answer(error_frame(&id, -32700, &format!("Parse error: {e}")));
        }
    };
    let id = m.get("id");
    let reply_id = usable_id(id).cloned().unwrap_or(Value::Null);
    let invalid = |why: &str| {
        Verdict::Answer(error_frame(
            &reply_id,
            -32600,
            &format!("Invalid request: {why}"),
        ))
    };
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid("`jsonrpc` must be \"2.0\"");
    }
    if id.is_some() && usable_id(id).is_none() {
        return invalid("`id` must be a string or an integer");
    }
    match m.get("method") {
        Some(Value::String(method)) => {
            // Parameters rmcp would refuse without echoing the id (`Invalid request`, no
            // `id`) or answer as an unknown method (`-32601` for a `tools/call` without a
            // tool name): answered here, with the request's id (JSON-RPC 2.0 §5.1: -32602).
            if id.is_some()
                && let Some(why) = bad_params(method, m.get("params"))
            {
                return Verdict::Answer(error_frame(
                    &reply_id,
                    -32602,
                    &format!("Invalid params for `{}`: {why}", printable(method)),
                ));
            }
            if id.is_none() {
                if !initialized {
                    return Verdict::Drop("notification before initialize");
                }
                let cancels = (method == "notifications/cancelled")
                    .then(|| usable_id(m.get("params").and_then(|p| p.get("requestId"))).cloned())
                    .flatten();
                return Verdict::Forward {
                    initialize: false,
                    request_id: None,
                    cancels,
                };
            }
            let method = method.clone();
            // A request, read once as rmcp reads it.
            let read =
                serde_json::from_value::<rmcp::model::ClientJsonRpcMessage>(Value::Object(m));
            let is_call = match refused_request(&method, &reply_id, read, initialized) {
                Err(answer) => return Verdict::Answer(answer),
                Ok(is_call) => is_call,
            };
            if initialized {
                return Verdict::Forward {
                    initialize: false,
                    request_id: Some((reply_id, is_call)),
                    cancels: None,
                };
            }
            match method.as_str() {
                "initialize" => Verdict::Forward {
                    initialize: true,
                    request_id: Some((reply_id, is_call)),
                    cancels: None,
                },
                "ping" => Verdict::Answer(result_frame(&reply_id, &serde_json::json!({}))),
                _ => invalid("the server is not initialized: send `initialize` first"),
            }
        }
        Some(_) => invalid("`method` must be a string"),
        None if id.is_some() && (m.contains_key("result") || m.contains_key("error")) => {
            if initialized {
                Verdict::Forward {
                    initialize: false,
                    request_id: None,
                    cancels: None,
                }
            } else {
                Verdict::Drop("a response before initialize")
            }
        }
        None => invalid("no `method`"),
    }
}

/// The answer to a message (`m`, each key's last value) an object of which repeats a key
/// (`r`): in a
/// `tools/call`'s `arguments`, the call's tool error (an `isError: true` result,
/// `[USER.INPUT.VALIDATION_FAILED]` naming the key and where it is in the arguments, as the
/// tools answer other bad arguments); elsewhere in a request, `-32600` naming it (with
/// `"id": null` when the repeated key is the `id` itself, which is then ambiguous). A
/// notification or a response that repeats a key is dropped (nothing answers them).
fn repeated_key(m: &serde_json::Map<String, Value>, r: &awf_domain::json::RepeatedKey) -> Verdict {
    use awf_domain::json::PathStep;
    let outer: Vec<&PathStep> = r.path.iter().rev().collect();
    let id_repeated = outer.is_empty() && r.key == "id";
    let reply_id = match usable_id(m.get("id")) {
        Some(id) if !id_repeated => id.clone(),
        _ if id_repeated => Value::Null,
        _ => return Verdict::Drop("a notification or response that repeats a key"),
    };
    if m.get("method").and_then(Value::as_str).is_none() {
        return Verdict::Drop("a response that repeats a key");
    }
    let in_arguments = m.get("method").and_then(Value::as_str) == Some("tools/call")
        && matches!(
            outer.as_slice(),
            [PathStep::Key(p), PathStep::Key(a), ..] if p == "params" && a == "arguments"
        );
    if in_arguments {
        // Where in the arguments (`/who`, `/list/0/k`), as the HTTP API's pointer.
        let pointer = r.pointer();
        let at = pointer
            .strip_prefix("/params/arguments")
            .unwrap_or(&pointer);
        let text = format!(
            "[{}] the tool call's arguments repeat the key \"{}\" (at {}): each key of a \
             JSON object must appear once\nHint: send each key once: {{\"a\": 1, \"b\": 2}}, \
             not {{\"a\": 1, \"a\": 2}}",
            awf_domain::ErrorCode::UserInputValidationFailed,
            printable(&r.key),
            printable(at)
        );
        let result = serde_json::json!({
            "content": [{"type": "text", "text": text}],
            "isError": true,
        });
        return Verdict::Answer(result_frame(&reply_id, &result));
    }
    Verdict::Answer(error_frame(
        &reply_id,
        -32600,
        &format!(
            "Invalid request: the message repeats the key \"{}\" (at {}): each key of a JSON \
             object must appear once",
            printable(&r.key),
            printable(&r.pointer())
        ),
    ))
}

/// Whether rmcp serves the request `read` (with the usable id `id`; `Ok`: whether it is a
/// `tools/call`), or the answer the filter gives in its place (`Err`), for what rmcp would
/// answer without the request's id, with a misleading error, or not as a request: a second
/// `initialize` (`-32600`, "already initialized"; rmcp answered it and also sent an error
/// without an id); a known method whose parameters do not have its shape (`-32602` naming
/// what is wrong; rmcp answered `Invalid request` without an id, e.g. for a `_meta` that
/// is not an object); an unknown method once initialized (`-32601`, `Method not found:
/// <method>`; rmcp's message was the bare method name). JSON-RPC 2.0 §5.1; MCP lifecycle.
fn refused_request(
    method: &str,
    id: &Value,
    read: Result<rmcp::model::ClientJsonRpcMessage, serde_json::Error>,
    initialized: bool,
) -> Result<bool, Vec<u8>> {
    if initialized && method == "initialize" {
        return Err(error_frame(
            id,
            -32600,
            "Invalid request: the server is already initialized (send `initialize` once per connection)",
        ));
    }
    let why = match read {
        Ok(rmcp::model::JsonRpcMessage::Request(r)) => {
            return match r.request {
                rmcp::model::ClientRequest::CustomRequest(_) if initialized => Err(error_frame(
                    id,
                    -32601,
                    &format!("Method not found: {}", printable(method)),
                )),
                rmcp::model::ClientRequest::CallToolRequest(_) => Ok(true),
                _ => Ok(false),
            };
        }
        // A method and an id, yet not a request to rmcp: unknown methods read as custom
        // requests, so the method is known and its parameters do not fit it.
        Ok(_) => "they do not have the method's shape".to_owned(),
        Err(e) => printable(&e.to_string()),
    };
    Err(error_frame(
        id,
        -32602,
        &format!("Invalid params for `{}`: {why}", printable(method)),
    ))
}

/// `text` cut to 200 characters, control characters escaped: what an error frame quotes of
/// the client's own text.
fn printable(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(200)
        .flat_map(char::escape_debug)
        .collect();
    if text.chars().nth(200).is_some() {
        out.push('…');
    }
    out
}

/// The answer to a request whose id is that of a pending request: `-32600` with `"id":
/// null` (the client's pending request keeps its id: the answer that comes under it is that
/// request's), the id named in the message and given as `data.duplicate_id`.
fn duplicate_id_frame(id: &Value) -> Vec<u8> {
    let frame = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": -32600,
            "message": format!(
                "Invalid request: id {id} is the id of a request still pending; ids must be \
                 unique among a client's pending requests (this one was not run)"
            ),
            "data": {"duplicate_id": id},
        },
    });
    let mut bytes = frame.to_string().into_bytes();
    bytes.push(b'\n');
    bytes
}

/// Why `params` cannot be those of a request for `method`: MCP's parameters are an object
/// (or absent) whose `_meta` is an object, if given; a `tools/call` names its tool (`name`,
/// a string) and gives its `arguments` as an object, if at all.
fn bad_params(method: &str, params: Option<&Value>) -> Option<&'static str> {
    if let Some(Value::Object(p)) = params
        && !matches!(p.get("_meta"), None | Some(Value::Null | Value::Object(_)))
    {
        return Some("`params._meta` must be an object");
    }
    match params {
        None | Some(Value::Null) => {
            (method == "tools/call").then_some("`tools/call` needs `params` with the tool's `name`")
        }
        Some(Value::Object(p)) if method == "tools/call" => {
            if !p.get("name").is_some_and(Value::is_string) {
                Some("`params.name` must be the tool's name, a string")
            } else if !matches!(
                p.get("arguments"),
                None | Some(Value::Null | Value::Object(_))
            ) {
                Some("`params.arguments` must be an object")
            } else {
                None
            }
        }
        Some(Value::Object(_)) => None,
        Some(_) => Some("`params` must be an object"),
    }
}

/// Reads lines from `input` and passes them on to rmcp, except: a line over `max` bytes is
/// answered with an error frame (never passed on, never echoed); before `initialize`, what
/// would end rmcp's handshake (a notification, a response) is dropped.
async fn filter_input<R, W>(
    input: R,
    mut to_rmcp: W,
    frames: mpsc::UnboundedSender<Vec<u8>>,
    max: usize,
    pending: PendingIds,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut input = BufReader::with_capacity(64 * 1024, input);
    let mut line: Vec<u8> = Vec::new();
    let mut initialized = false;
    loop {
        line.clear();
        // Bytes of the line seen (with its line end), and whether `line` holds only its head.
        let mut total: usize = 0;
        let mut cut = false;
        let mut ends_crlf = false;
        let mut newline = false;
        let mut prev_last: Option<u8> = None;
        let mut eof = false;
        // One line, never holding more than `max` bytes (+ its line end) in memory.
        loop {
            let buf = match input.fill_buf().await {
                Ok(b) => b,
                Err(e) => {
                    tracing::debug!(target: "awf::mcp", error = %e, "stdin read failed");
                    return;
                }
            };
            if buf.is_empty() {
                eof = true;
                break;
            }
            let (chunk, done) = match buf.iter().position(|b| *b == b'\n') {
                Some(p) => (&buf[..=p], true),
                None => (buf, false),
            };
            let n = chunk.len();
            if done {
                newline = true;
                ends_crlf = if n >= 2 {
                    chunk[n - 2] == b'\r'
                } else {
                    prev_last == Some(b'\r')
                };
            }
            prev_last = chunk.last().copied();
            total += n;
            if !cut && line.len() + n <= max + 2 {
                line.extend_from_slice(chunk);
            } else {
                cut = true;
                let keep = ID_SCAN_BYTES.saturating_sub(line.len()).min(n);
                line.extend_from_slice(&chunk[..keep]);
            }
            input.consume(n);
            if done {
                break;
            }
        }
        let ending = usize::from(newline) + usize::from(ends_crlf);
        let content_len = total.saturating_sub(ending);
        if content_len > max {
            let id = scan_id(&line[..line.len().min(ID_SCAN_BYTES)]);
            tracing::warn!(
                target: "awf::mcp",
                bytes = content_len,
                limit = max,
                "frame over the size limit answered with an error"
            );
            let msg =
                format!("Parse error: frame of {content_len} bytes is over the {max}-byte limit");
            if frames.send(error_frame(&id, -32700, &msg)).is_err() || eof {
                return;
            }
            continue;
        }
        if line.is_empty() && eof {
            return;
        }
        if !line.ends_with(b"\n") {
            line.push(b'\n');
        }
        match classify(&line, initialized) {
            Verdict::Forward {
                initialize,
                request_id,
                cancels,
            } => {
                if let Some(id) = cancels {
                    pending.cancelled(&id);
                }
                if let Some((id, tool_call)) = request_id
                    && !pending.insert(&id, tool_call)
                {
                    tracing::warn!(target: "awf::mcp", %id, "request refused: its id is pending");
                    if frames.send(duplicate_id_frame(&id)).is_err() || eof {
                        return;
                    }
                    continue;
                }
                initialized |= initialize;
            }
            Verdict::Drop(why) => {
                tracing::warn!(target: "awf::mcp", why, "line ignored");
                if eof {
                    return;
                }
                continue;
            }
            Verdict::Answer(frame) => {
                if frames.send(frame).is_err() || eof {
                    return;
                }
                continue;
            }
        }
        if to_rmcp.write_all(&line).await.is_err() {
            return;
        }
        if eof {
            return;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
