//! The editor's file channel of one session (fs delegation, shared/spec/acp.md §1.2): a
//! private unix socket that the session's runs' MCP proxies (`awf mcp-serve`, or the
//! in-process tools) send Read and Write to, relayed to the client as `fs/read_text_file` and
//! `fs/write_text_file` with the session's id.
//!
//! Made only when the client advertised both `fs.readTextFile` and `fs.writeTextFile`. The
//! socket is `fs.sock` in a new directory of the temp dir (`$TMPDIR`; `/tmp` when that fails,
//! e.g. a path too long for `sun_path`), the
//! directory mode 0700 and the socket 0600; both are removed when the [`FsBridge`] is
//! dropped (session close, server exit).
//!
//! Protocol (JSON lines, one reply per request, any number per connection; the shape
//! `awf_domain::ports::tools::ProxySpec::fs_delegate` documents): requests
//! `{"op":"read","path":ABS,"line"?:N,"limit"?:N}` and `{"op":"write","path":ABS,
//! "content":TEXT}`; replies `{"ok":true,"content":TEXT}`, `{"ok":true}` or
//! `{"ok":false,"error":WHY}` (a bad request, the editor's JSON-RPC error message, no answer
//! in time). A line over [`MAX_LINE`] bytes is refused and the connection closed.

use std::future::Future;
use std::path::Path;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Map;
use serde_json::Value;
use serde_json::json;
use tokio::io::AsyncWriteExt as _;
use tokio::net::UnixListener;
use tokio::net::UnixStream;
use tokio_util::sync::CancellationToken;

use crate::transport;
use crate::transport::Line;

/// Longest request line, bytes (64 MiB: a whole file's content in one Write).
pub const MAX_LINE: usize = 64 * 1024 * 1024;

/// What relays one ACP client request: `(method, params)` to the client's `result`, or a
/// sentence saying why there is none.
pub type Forward = Arc<
    dyn Fn(&'static str, Value) -> Pin<Box<dyn Future<Output = Result<Value, String>> + Send>>
        + Send
        + Sync,
>;

/// One session's file channel; dropping it stops serving and removes the socket.
pub struct FsBridge {
    socket: PathBuf,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for FsBridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsBridge")
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

impl FsBridge {
    /// Opens the channel of session `session_id` in `tmp_dir` and serves it on the current
    /// runtime, relaying through `forward`.
    ///
    /// # Errors
    /// The I/O error of creating the directory or binding the socket.
    pub fn open(tmp_dir: &Path, session_id: &str, forward: Forward) -> std::io::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("awf-acp-")
            .tempdir_in(tmp_dir)?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
        let socket = dir.path().join("fs.sock");
        let listener = UnixListener::bind(&socket)?;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))?;
        let stop = CancellationToken::new();
        let token = stop.clone();
        let session = session_id.to_owned();
        tokio::spawn(async move {
            loop {
                let conn = tokio::select! {
                    () = token.cancelled() => break,
                    c = listener.accept() => c,
                };
                match conn {
                    Ok((stream, _)) => {
                        let (token, session, forward) =
                            (token.clone(), session.clone(), Arc::clone(&forward));
                        tokio::spawn(async move {
                            tokio::select! {
                                () = token.cancelled() => {}
                                () = connection(stream, &session, &forward) => {}
                            }
                        });
                    }
                    Err(e) => {
                        tracing::warn!(target: "awf::acp", error = %e, "fs channel accept failed");
                        break;
                    }
                }
            }
        });
        Ok(Self {
            socket,
            stop,
            _dir: dir,
        })
    }

    /// [`FsBridge::open`] in the first of `dirs` where it works (a socket path longer than
    /// the 107 bytes of `sun_path`, an unwritable directory: the next one is tried).
    ///
    /// # Errors
    /// The error of the last directory tried (`InvalidInput` when `dirs` is empty).
    pub fn open_first(
        dirs: &[PathBuf],
        session_id: &str,
        forward: &Forward,
    ) -> std::io::Result<Self> {
        let mut last = std::io::Error::new(std::io::ErrorKind::InvalidInput, "no directory to try");
        for d in dirs {
            match Self::open(d, session_id, Arc::clone(forward)) {
                Ok(b) => return Ok(b),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The socket's path (for `RunRequest::fs_delegate`).
    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for FsBridge {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Serves one connection until it closes.
async fn connection(stream: UnixStream, session: &str, forward: &Forward) {
    let (r, mut w) = stream.into_split();
    let mut r = tokio::io::BufReader::new(r);
    loop {
        let reply = match transport::read_line(&mut r, MAX_LINE).await {
            Ok(Line::Text(t)) => answer(&t, session, forward).await,
            Ok(Line::TooLong) => {
                let _ = write(
                    &mut w,
                    &refuse(&format!("request longer than {MAX_LINE} bytes")),
                )
                .await;
                return;
            }
            Ok(Line::NotUtf8) => refuse("request is not UTF-8"),
            Ok(Line::Eof) | Err(_) => return,
        };
        if write(&mut w, &reply).await.is_err() {
            return;
        }
    }
}

async fn write(w: &mut tokio::net::unix::OwnedWriteHalf, v: &Value) -> std::io::Result<()> {
    let mut line = v.to_string().into_bytes();
    line.push(b'\n');
    w.write_all(&line).await
}

fn refuse(why: &str) -> Value {
    json!({"ok": false, "error": why})
}

/// The reply to one request line.
async fn answer(text: &str, session: &str, forward: &Forward) -> Value {
    let req: Map<String, Value> = match serde_json::from_str(text) {
        Ok(Value::Object(m)) => m,
        _ => return refuse("a request must be a JSON object"),
    };
    let Some(path) = req
        .get("path")
        .and_then(Value::as_str)
        .filter(|p| p.starts_with('/'))
    else {
        return refuse("`path` must be an absolute path");
    };
    match req.get("op").and_then(Value::as_str) {
        Some("read") => {
            let mut params = json!({"sessionId": session, "path": path});
            for key in ["line", "limit"] {
                match req.get(key) {
                    None | Some(Value::Null) => {}
                    Some(v) if v.as_u64().is_some_and(|n| n > 0) => {
                        if let Some(m) = params.as_object_mut() {
                            m.insert(key.to_owned(), v.clone());
                        }
                    }
                    Some(_) => return refuse(&format!("`{key}` must be a positive integer")),
                }
            }
            match forward("fs/read_text_file", params).await {
                Ok(r) => match r.get("content") {
                    Some(Value::String(c)) => json!({"ok": true, "content": c}),
                    _ => refuse("the editor's answer to fs/read_text_file has no `content`"),
                },
                Err(why) => refuse(&why),
            }
        }
        Some("write") => {
            let Some(content) = req.get("content").and_then(Value::as_str) else {
                return refuse("`content` must be a string");
            };
            let params = json!({"sessionId": session, "path": path, "content": content});
            match forward("fs/write_text_file", params).await {
                Ok(_) => json!({"ok": true}),
                Err(why) => refuse(&why),
            }
        }
        _ => refuse("`op` must be \"read\" or \"write\""),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Mutex;

    use tokio::io::AsyncBufReadExt as _;

    use super::*;

    /// A forwarder answering reads of `/w/a.txt` and every write, recording each request.
    fn fake(log: &Arc<Mutex<Vec<(String, Value)>>>) -> Forward {
        let log = Arc::clone(log);
        Arc::new(move |method, params| {
            log.lock()
                .unwrap()
                .push((method.to_owned(), params.clone()));
            Box::pin(async move {
                match (method, params["path"].as_str()) {
                    ("fs/read_text_file", Some("/w/a.txt")) => {
                        Ok(json!({"content": "buffer text"}))
                    }
                    ("fs/read_text_file", _) => Err("Resource not found: no buffer".to_owned()),
                    _ => Ok(json!({})),
                }
            })
        })
    }

    async fn exchange(socket: &Path, lines: &[&str]) -> Vec<Value> {
        let stream = UnixStream::connect(socket).await.unwrap();
        let (r, mut w) = stream.into_split();
        let mut r = tokio::io::BufReader::new(r);
        let mut out = Vec::new();
        for l in lines {
            w.write_all(format!("{l}\n").as_bytes()).await.unwrap();
            let mut reply = String::new();
            r.read_line(&mut reply).await.unwrap();
            out.push(serde_json::from_str(&reply).unwrap());
        }
        out
    }

    #[tokio::test]
    async fn requests_become_client_requests_with_the_session_id() {
        let tmp = tempfile::tempdir().unwrap();
        let log = Arc::default();
        let b = FsBridge::open(tmp.path(), "sess_1", fake(&log)).unwrap();
        let replies = exchange(
            b.socket(),
            &[
                r#"{"op":"read","path":"/w/a.txt","line":2,"limit":3}"#,
                r#"{"op":"write","path":"/w/b.txt","content":"new text"}"#,
                r#"{"op":"read","path":"/w/missing.txt"}"#,
            ],
        )
        .await;
        assert_eq!(
            replies,
            [
                json!({"ok": true, "content": "buffer text"}),
                json!({"ok": true}),
                json!({"ok": false, "error": "Resource not found: no buffer"}),
            ]
        );
        assert_eq!(
            log.lock().unwrap().clone(),
            [
                (
                    "fs/read_text_file".to_owned(),
                    json!({"sessionId": "sess_1", "path": "/w/a.txt", "line": 2, "limit": 3})
                ),
                (
                    "fs/write_text_file".to_owned(),
                    json!({"sessionId": "sess_1", "path": "/w/b.txt", "content": "new text"})
                ),
                (
                    "fs/read_text_file".to_owned(),
                    json!({"sessionId": "sess_1", "path": "/w/missing.txt"})
                ),
            ]
        );
    }

    #[tokio::test]
    async fn bad_requests_are_refused_without_asking_the_editor() {
        let tmp = tempfile::tempdir().unwrap();
        let log = Arc::default();
        let b = FsBridge::open(tmp.path(), "sess_1", fake(&log)).unwrap();
        let replies = exchange(
            b.socket(),
            &[
                "not json",
                r#"{"op":"read","path":"relative.txt"}"#,
                r#"{"op":"write","path":"/w/b.txt"}"#,
                r#"{"op":"delete","path":"/w/b.txt"}"#,
                r#"{"op":"read","path":"/w/a.txt","line":0}"#,
            ],
        )
        .await;
        for r in &replies {
            assert_eq!(r["ok"], json!(false), "{r}");
            assert!(r["error"].as_str().is_some_and(|e| !e.is_empty()), "{r}");
        }
        assert!(log.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_directory_too_deep_for_a_socket_path_falls_back_to_the_next() {
        let tmp = tempfile::tempdir().unwrap();
        let deep = tmp.path().join("d".repeat(120));
        std::fs::create_dir(&deep).unwrap();
        let log = Arc::default();
        assert!(FsBridge::open(&deep, "sess_1", fake(&log)).is_err());
        let b = FsBridge::open_first(
            &[deep.clone(), tmp.path().to_path_buf()],
            "sess_1",
            &fake(&log),
        )
        .unwrap();
        assert_eq!(b.socket().parent().unwrap().parent(), Some(tmp.path()));
        let replies = exchange(b.socket(), &[r#"{"op":"read","path":"/w/a.txt"}"#]).await;
        assert_eq!(replies[0]["ok"], json!(true));
        // Nothing is left behind in the directory that failed.
        assert_eq!(std::fs::read_dir(&deep).unwrap().count(), 0);
        assert!(FsBridge::open_first(&[], "sess_1", &fake(&log)).is_err());
    }

    #[tokio::test]
    async fn the_socket_is_private_and_removed_when_dropped() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let log = Arc::default();
        let b = FsBridge::open(tmp.path(), "sess_1", fake(&log)).unwrap();
        let sock = b.socket().to_path_buf();
        let dir = sock.parent().unwrap().to_path_buf();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&sock), 0o600);
        drop(b);
        assert!(!dir.exists(), "the directory and its socket are removed");
        assert!(UnixStream::connect(&sock).await.is_err());
    }
}
