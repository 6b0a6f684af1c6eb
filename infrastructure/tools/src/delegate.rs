//! fs delegation (ACP `fs/read_text_file` / `fs/write_text_file`, shared/spec/acp.md §1.2):
//! Read, Write and Edit through the editor's buffers instead of the disk, over the editor's
//! file channel, a unix socket `awf acp-serve` serves for the session (protocol:
//! `awf_domain::ports::tools::ProxySpec::fs_delegate`).
//!
//! Every path is first confined to the root and resolved exactly as the disk tools do (the
//! file, or the deepest existing ancestor of a new one, must lie inside the root); the
//! resolved absolute path is what the editor is asked for. Read renders the buffer as the
//! disk Read renders a file (numbered lines, `offset`/`limit`, budget, trailers). Write sends
//! the content as given (the editor owns the buffer's BOM and line endings). Edit reads the
//! buffer, replaces as the disk Edit does, and writes the whole buffer back. A channel that
//! cannot be reached, or an editor that refuses, is an `isError` result saying why; the disk
//! is never used instead.

use std::io::BufRead as _;
use std::io::BufReader;
use std::io::Read as _;
use std::io::Write as _;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;

use awf_domain::ports::tools::ToolOutput;
use serde_json::Map;
use serde_json::Value;
use serde_json::json;

use crate::Inner;
use crate::args::Args;

/// Longest reply line read from the channel, bytes (64 MiB).
const MAX_REPLY: u64 = 64 * 1024 * 1024;

/// The editor's file channel: the socket path, and how long one answer may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Channel {
    pub(crate) socket: PathBuf,
    pub(crate) timeout: Duration,
}

impl Channel {
    /// Sends one request and reads its reply: the reply object when `ok` is true.
    fn ask(&self, request: &Value) -> Result<Value, String> {
        let gone = |e: &dyn std::fmt::Display| {
            format!(
                "the editor's file channel ({}) failed: {e}; the disk was not used instead",
                self.socket.display()
            )
        };
        let mut stream = UnixStream::connect(&self.socket).map_err(|e| gone(&e))?;
        stream
            .set_read_timeout(Some(self.timeout))
            .and_then(|()| stream.set_write_timeout(Some(self.timeout)))
            .map_err(|e| gone(&e))?;
        let mut line = request.to_string().into_bytes();
        line.push(b'\n');
        stream.write_all(&line).map_err(|e| gone(&e))?;
        let mut reply = Vec::new();
        BufReader::new(stream.take(MAX_REPLY))
            .read_until(b'\n', &mut reply)
            .map_err(|e| gone(&e))?;
        if reply.last() != Some(&b'\n') {
            return Err(gone(&"it closed without a complete reply"));
        }
        let v: Value = serde_json::from_slice(&reply).map_err(|e| gone(&e))?;
        if v.get("ok") == Some(&Value::Bool(true)) {
            return Ok(v);
        }
        let why = v
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("no reason given");
        Err(format!("the editor refused: {why}"))
    }

    /// The buffer's text (the editor's unsaved text, else the file's).
    pub(crate) fn read(&self, path: &Path) -> Result<String, String> {
        let v = self.ask(&json!({"op": "read", "path": utf8(path)?}))?;
        match v.get("content") {
            Some(Value::String(s)) => Ok(s.clone()),
            _ => Err("the editor's file channel answered a read without `content`".to_owned()),
        }
    }

    /// Replaces the buffer's text with `content`.
    pub(crate) fn write(&self, path: &Path, content: &str) -> Result<(), String> {
        self.ask(&json!({"op": "write", "path": utf8(path)?, "content": content}))
            .map(|_| ())
    }
}

fn utf8(p: &Path) -> Result<&str, String> {
    p.to_str().ok_or_else(|| {
        format!(
            "{} is not valid UTF-8, so the editor cannot be asked for it",
            p.display()
        )
    })
}

/// The resolved, confined path of `given` (an existing file, or a new one whose existing
/// ancestor is inside the root).
fn resolve(inner: &Inner, tool: &str, given: &str) -> Result<PathBuf, String> {
    if given.ends_with('/') {
        return Err(format!(
            "{tool}: {given} ends with `/`, so it names a directory, not a file"
        ));
    }
    inner
        .root
        .for_write(given)
        .map(|t| t.path)
        .map_err(|e| format!("{tool}: {e}"))
}

fn out(r: Result<String, String>) -> ToolOutput {
    match r {
        Ok(t) => ToolOutput::text(t),
        Err(e) => ToolOutput::error(e),
    }
}

/// Read through the editor.
pub(crate) fn read(inner: &Inner, ch: &Channel, map: &Map<String, Value>) -> ToolOutput {
    out((|| {
        let (given, offset, limit) = crate::read::args(inner, map)?;
        let path = resolve(inner, "Read", given)?;
        let text = ch.read(&path).map_err(|e| format!("Read: {given}: {e}"))?;
        crate::read::render(inner, given, offset, limit, std::io::Cursor::new(text))
    })())
}

/// Write through the editor.
pub(crate) fn write(inner: &Inner, ch: &Channel, map: &Map<String, Value>) -> ToolOutput {
    out((|| {
        let a = Args::new("Write", map);
        let given = a.str(&["path", "file_path"])?;
        let content = a.str(&["content"])?;
        let path = resolve(inner, "Write", given)?;
        ch.write(&path, content)
            .map_err(|e| format!("Write: {given}: {e}"))?;
        Ok(format!(
            "Write: wrote {} ({} bytes) into the editor's buffer",
            path.display(),
            content.len()
        ))
    })())
}

/// Edit through the editor: its buffer read, replaced, written back whole.
pub(crate) fn edit(inner: &Inner, ch: &Channel, map: &Map<String, Value>) -> ToolOutput {
    out((|| {
        let e = crate::edit::edit_args(map)?;
        let given = e.given;
        let path = resolve(inner, "Edit", given)?;
        let text = ch.read(&path).map_err(|e| format!("Edit: {given}: {e}"))?;
        let size = text.len() as u64;
        if size > inner.limits.edit_max_file {
            return Err(format!(
                "Edit: {given} is {size} bytes, over the {} bytes Edit rewrites; use Write",
                inner.limits.edit_max_file
            ));
        }
        let (bytes, count, crlf) = crate::edit::apply_edit(text.as_bytes(), &e)?;
        // A UTF-8 needle matches UTF-8 text only on character boundaries: still UTF-8.
        let new_text = String::from_utf8_lossy(&bytes);
        ch.write(&path, &new_text)
            .map_err(|e| format!("Edit: {given}: {e}"))?;
        let mut msg = format!(
            "Edit: replaced {count} occurrence{} in {} (the editor's buffer)",
            if count == 1 { "" } else { "s" },
            path.display()
        );
        if crlf {
            msg.push_str(" (matched with the buffer's CRLF line endings)");
        }
        Ok(msg)
    })())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::HashMap;
    use std::os::unix::net::UnixListener;
    use std::sync::Arc;
    use std::sync::Mutex;

    use awf_domain::mask::Masker;
    use awf_domain::ports::tools::ToolCall;
    use awf_domain::ports::tools::ToolProvider;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::BuiltinTools;

    /// A fake editor on a unix socket: buffers by path, every request recorded.
    #[derive(Clone, Default)]
    struct Editor {
        buffers: Arc<Mutex<HashMap<String, String>>>,
        asked: Arc<Mutex<Vec<Value>>>,
    }

    impl Editor {
        fn serve(&self, socket: &Path) {
            let listener = UnixListener::bind(socket).unwrap();
            let me = self.clone();
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    let Ok(conn) = conn else { return };
                    let mut w = conn.try_clone().unwrap();
                    for line in BufReader::new(conn).lines() {
                        let Ok(line) = line else { break };
                        let req: Value = serde_json::from_str(&line).unwrap();
                        me.asked.lock().unwrap().push(req.clone());
                        let path = req["path"].as_str().unwrap_or_default().to_owned();
                        let reply = match req["op"].as_str() {
                            Some("read") => match me.buffers.lock().unwrap().get(&path) {
                                Some(t) => json!({"ok": true, "content": t}),
                                None => json!({"ok": false, "error": format!("no buffer {path}")}),
                            },
                            Some("write") => {
                                let c = req["content"].as_str().unwrap_or_default().to_owned();
                                me.buffers.lock().unwrap().insert(path, c);
                                json!({"ok": true})
                            }
                            _ => json!({"ok": false, "error": "unknown op"}),
                        };
                        let mut bytes = reply.to_string().into_bytes();
                        bytes.push(b'\n');
                        if w.write_all(&bytes).is_err() {
                            break;
                        }
                    }
                }
            });
        }
    }

    struct Fixture {
        _dir: tempfile::TempDir,
        root: PathBuf,
        socket: PathBuf,
        editor: Editor,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        let root = dir.path().join("ws").canonicalize().unwrap();
        let socket = dir.path().join("fs.sock");
        let editor = Editor::default();
        editor.serve(&socket);
        Fixture {
            _dir: dir,
            root,
            socket,
            editor,
        }
    }

    fn tools(f: &Fixture) -> BuiltinTools {
        BuiltinTools::new(&f.root)
            .unwrap()
            .with_fs_delegate(&f.socket, Duration::from_secs(30))
    }

    async fn call(t: &BuiltinTools, name: &str, args: Value) -> ToolOutput {
        let Value::Object(arguments) = args else {
            panic!("args must be an object")
        };
        t.call(
            ToolCall {
                name: name.into(),
                arguments,
                call_id: None,
            },
            CancellationToken::new(),
        )
        .await
        .unwrap()
    }

    fn key(f: &Fixture, name: &str) -> String {
        f.root.join(name).display().to_string()
    }

    #[tokio::test]
    async fn read_shows_the_editors_buffer_numbered_and_masked() {
        let f = fixture();
        std::fs::write(f.root.join("a.txt"), "disk text\n").unwrap();
        f.editor.buffers.lock().unwrap().insert(
            key(&f, "a.txt"),
            "one\nunsaved two sk-secret-777\nthree\n".into(),
        );
        let mut m = Masker::default();
        m.add("sk-secret-777");
        let t = tools(&f).with_masker(&m);
        let out = call(
            &t,
            "Read",
            json!({"path": "a.txt", "offset": 2, "limit": 1}),
        )
        .await;
        assert!(!out.is_error, "{}", out.text);
        assert!(
            out.text.starts_with("     2\tunsaved two ***\n"),
            "{}",
            out.text
        );
        assert!(!out.text.contains("disk text"), "{}", out.text);
        assert!(out.text.contains("read on with offset=3"), "{}", out.text);
        let asked = f.editor.asked.lock().unwrap().clone();
        assert_eq!(asked, [json!({"op": "read", "path": key(&f, "a.txt")})]);
    }

    #[tokio::test]
    async fn write_lands_in_the_editor_and_not_on_disk() {
        let f = fixture();
        let t = tools(&f);
        let out = call(
            &t,
            "Write",
            json!({"file_path": "new/b.txt", "content": "hello"}),
        )
        .await;
        assert!(!out.is_error, "{}", out.text);
        assert!(
            out.text.contains("into the editor's buffer"),
            "{}",
            out.text
        );
        assert_eq!(
            f.editor.buffers.lock().unwrap().get(&key(&f, "new/b.txt")),
            Some(&"hello".to_owned())
        );
        assert!(!f.root.join("new").exists(), "the disk is not written");
    }

    #[tokio::test]
    async fn edit_reads_the_buffer_and_writes_it_back_whole() {
        let f = fixture();
        std::fs::write(f.root.join("c.txt"), "alpha on disk").unwrap();
        f.editor
            .buffers
            .lock()
            .unwrap()
            .insert(key(&f, "c.txt"), "alpha beta alpha".into());
        let t = tools(&f);
        let out = call(
            &t,
            "Edit",
            json!({"path": "c.txt", "old": "alpha", "new": "gamma"}),
        )
        .await;
        assert!(
            out.is_error,
            "two matches without replace_all: {}",
            out.text
        );
        let out = call(
            &t,
            "Edit",
            json!({"path": "c.txt", "old": "alpha", "new": "gamma", "replace_all": true}),
        )
        .await;
        assert!(!out.is_error, "{}", out.text);
        assert_eq!(
            f.editor.buffers.lock().unwrap().get(&key(&f, "c.txt")),
            Some(&"gamma beta gamma".to_owned())
        );
        assert_eq!(
            std::fs::read_to_string(f.root.join("c.txt")).unwrap(),
            "alpha on disk"
        );
    }

    #[tokio::test]
    async fn paths_outside_the_root_are_refused_before_the_editor_is_asked() {
        let f = fixture();
        let t = tools(&f);
        for (name, args) in [
            ("Read", json!({"path": "/etc/passwd"})),
            ("Write", json!({"path": "../escape.txt", "content": "x"})),
            (
                "Edit",
                json!({"path": "/etc/hosts", "old": "a", "new": "b"}),
            ),
        ] {
            let out = call(&t, name, args).await;
            assert!(out.is_error, "{name}: {}", out.text);
            assert!(out.text.contains("outside"), "{name}: {}", out.text);
        }
        assert!(f.editor.asked.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn an_editor_refusal_and_a_dead_channel_are_errors_never_the_disk() {
        let f = fixture();
        std::fs::write(f.root.join("d.txt"), "disk only").unwrap();
        let t = tools(&f);
        let out = call(&t, "Read", json!({"path": "d.txt"})).await;
        assert!(out.is_error);
        assert!(
            out.text.contains("the editor refused: no buffer"),
            "{}",
            out.text
        );
        assert!(!out.text.contains("disk only"));
        // A channel nobody serves.
        let dead = BuiltinTools::new(&f.root)
            .unwrap()
            .with_fs_delegate(f.root.join("gone.sock"), Duration::from_secs(5));
        let out = call(&dead, "Read", json!({"path": "d.txt"})).await;
        assert!(out.is_error);
        assert!(
            out.text.contains("the disk was not used instead"),
            "{}",
            out.text
        );
        let out = call(&dead, "Write", json!({"path": "d.txt", "content": "x"})).await;
        assert!(out.is_error, "{}", out.text);
        assert_eq!(
            std::fs::read_to_string(f.root.join("d.txt")).unwrap(),
            "disk only"
        );
    }

    #[tokio::test]
    async fn glob_grep_and_bash_stay_on_disk() {
        let f = fixture();
        std::fs::write(f.root.join("e.txt"), "needle on disk\n").unwrap();
        let t = tools(&f);
        let out = call(
            &t,
            "Grep",
            json!({"pattern": "needle", "output_mode": "content"}),
        )
        .await;
        assert!(out.text.contains("needle on disk"), "{}", out.text);
        let out = call(&t, "Glob", json!({"pattern": "*.txt"})).await;
        assert!(out.text.contains("e.txt"), "{}", out.text);
        let out = call(&t, "Bash", json!({"command": "cat e.txt", "cwd": "."})).await;
        assert!(out.text.contains("needle on disk"), "{}", out.text);
        assert!(f.editor.asked.lock().unwrap().is_empty());
    }
}
