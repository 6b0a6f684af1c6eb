//! fs delegation end to end over the shipped binary: `awf mcp-serve` with an `fs_delegate`
//! socket (what `awf acp-serve` writes into the proxy config of a session whose client offers
//! `fs.readTextFile` and `fs.writeTextFile`). The test plays the editor's file channel on a
//! real unix socket; the SDK-driven ACP scenario is `acp_sdk::fs_delegation_*`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::BufRead as _;
use std::io::BufReader;
use std::io::Write as _;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;

use awf_tests::Sandbox;
use awf_tests::mcp::RawServer;
use awf_tests::mcp::config;
use serde_json::Value;
use serde_json::json;

/// The editor's side of the channel: buffers by path, every request recorded.
#[derive(Clone, Default)]
struct Channel {
    buffers: Arc<Mutex<HashMap<String, String>>>,
    asked: Arc<Mutex<Vec<Value>>>,
}

impl Channel {
    fn serve(&self, socket: &Path) {
        let listener = UnixListener::bind(socket).unwrap();
        let me = self.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let me = me.clone();
                std::thread::spawn(move || {
                    let mut w = conn.try_clone().unwrap();
                    for line in BufReader::new(conn).lines() {
                        let Ok(line) = line else { return };
                        let req: Value = serde_json::from_str(&line).unwrap();
                        me.asked.lock().unwrap().push(req.clone());
                        let path = req["path"].as_str().unwrap_or_default().to_owned();
                        let reply = match req["op"].as_str() {
                            Some("read") => match me.buffers.lock().unwrap().get(&path) {
                                Some(t) => json!({"ok": true, "content": t}),
                                None => {
                                    json!({"ok": false, "error": format!("Resource not found: {path}")})
                                }
                            },
                            Some("write") => {
                                me.buffers
                                    .lock()
                                    .unwrap()
                                    .insert(path, req["content"].as_str().unwrap().to_owned());
                                json!({"ok": true})
                            }
                            _ => json!({"ok": false, "error": "unknown op"}),
                        };
                        if w.write_all(format!("{reply}\n").as_bytes()).is_err() {
                            return;
                        }
                    }
                });
            }
        });
    }
}

fn text(answer: &Value) -> String {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn is_error(answer: &Value) -> bool {
    answer["result"]["isError"] == json!(true)
}

#[test]
fn mcp_serve_reads_and_writes_through_the_editors_channel_and_leaves_the_disk_alone() {
    let mut sb = Sandbox::new().unwrap();
    sb.set_env("API_TOKEN", "tok-5ecret-991");
    let root = sb.path().canonicalize().unwrap();
    sb.write("a.txt", "text on disk\n").unwrap();
    sb.write("e.txt", "needle on disk\n").unwrap();
    let sock_dir = tempfile::tempdir().unwrap();
    let sock = sock_dir.path().join("fs.sock");
    let editor = Channel::default();
    editor.serve(&sock);
    let key = |n: &str| root.join(n).display().to_string();
    editor.buffers.lock().unwrap().insert(
        key("a.txt"),
        "unsaved line one\nunsaved token tok-5ecret-991\n".into(),
    );
    let cfg = config(
        &sb,
        &json!({"root_dir": root, "fs_delegate": sock, "run_id": "r1", "step": "s"}),
    );
    let mut srv = RawServer::awf(&sb, &cfg, &[]);
    srv.initialize("2025-06-18");

    // Read: the editor's buffer, numbered as a file would be, secrets masked.
    let r = srv.call(1, "Read", &json!({"file_path": "a.txt"}));
    assert!(!is_error(&r), "{r}");
    let t = text(&r);
    assert!(t.contains("     1\tunsaved line one"), "{t}");
    assert!(t.contains("unsaved token ***"), "{t}");
    assert!(
        !t.contains("text on disk") && !t.contains("tok-5ecret-991"),
        "{t}"
    );

    // Write and Edit land in the editor; the disk is untouched.
    let r = srv.call(
        2,
        "Write",
        &json!({"file_path": "b.txt", "content": "alpha beta"}),
    );
    assert!(!is_error(&r), "{r}");
    let r = srv.call(
        3,
        "Edit",
        &json!({"file_path": "b.txt", "old_string": "beta", "new_string": "gamma"}),
    );
    assert!(!is_error(&r), "{r}");
    assert_eq!(
        editor.buffers.lock().unwrap().get(&key("b.txt")),
        Some(&"alpha gamma".to_owned())
    );
    assert!(!root.join("b.txt").exists());

    // The editor's refusal is the call's isError, with its reason; the disk is not read.
    let r = srv.call(4, "Read", &json!({"file_path": "e.txt"}));
    assert!(is_error(&r), "{r}");
    assert!(text(&r).contains("Resource not found"), "{r}");
    assert!(!text(&r).contains("needle on disk"), "{r}");

    // Outside the root: refused before the editor is asked.
    let before = editor.asked.lock().unwrap().len();
    let r = srv.call(5, "Read", &json!({"file_path": "/etc/passwd"}));
    assert!(is_error(&r), "{r}");
    assert_eq!(editor.asked.lock().unwrap().len(), before);

    // Grep and Glob stay on disk.
    let r = srv.call(
        6,
        "Grep",
        &json!({"pattern": "needle", "output_mode": "content"}),
    );
    assert!(text(&r).contains("needle on disk"), "{r}");
    let (code, _, stderr) = srv.close();
    assert_eq!(code, Some(0), "{stderr}");
    // Every request named the resolved absolute path.
    for a in editor.asked.lock().unwrap().iter() {
        assert!(
            a["path"]
                .as_str()
                .unwrap()
                .starts_with(&*root.display().to_string()),
            "{a}"
        );
    }
}

#[test]
fn a_closed_channel_is_an_error_result_never_the_disk() {
    let sb = Sandbox::new().unwrap();
    let root = sb.path().canonicalize().unwrap();
    sb.write("a.txt", "text on disk\n").unwrap();
    let sock_dir = tempfile::tempdir().unwrap();
    let gone = sock_dir.path().join("fs.sock");
    let cfg = config(&sb, &json!({"root_dir": root, "fs_delegate": gone}));
    let mut srv = RawServer::awf(&sb, &cfg, &[]);
    srv.initialize("2025-06-18");
    let r = srv.call(1, "Read", &json!({"file_path": "a.txt"}));
    assert!(is_error(&r), "{r}");
    assert!(text(&r).contains("the disk was not used instead"), "{r}");
    let r = srv.call(2, "Write", &json!({"file_path": "a.txt", "content": "x"}));
    assert!(is_error(&r), "{r}");
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "text on disk\n"
    );
    let (code, _, stderr) = srv.close();
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn a_config_whose_fs_delegate_is_not_a_socket_is_refused() {
    let sb = Sandbox::new().unwrap();
    let plain = sb.write("plain.txt", "").unwrap();
    let cfg = config(&sb, &json!({"fs_delegate": plain}));
    let run = sb
        .run(&["mcp-serve", "--config", &cfg.display().to_string()])
        .unwrap();
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("USER.MCP_PROXY.INVALID_CONFIG"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("not a unix socket"), "{}", run.stderr);
}
