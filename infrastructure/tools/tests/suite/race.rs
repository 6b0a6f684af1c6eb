//! TOCTOU races: a thread swaps a directory or a file for a symbolic link to outside the root
//! (and back) while a tool loops on it; nothing outside may be created, changed or read.

use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;

use serde_json::json;

use crate::common::*;

/// Swaps `at` (a directory or a file) for a symbolic link to `to` and back until stopped.
struct Flipper {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<u64>>,
}

impl Flipper {
    fn start(at: PathBuf, to: PathBuf) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            let aside = at.with_extension("aside");
            let mut flips = 0u64;
            while !s.load(Ordering::Relaxed) {
                std::fs::rename(&at, &aside).unwrap();
                // A Write may recreate a missing directory (inside the root): clear it.
                if std::os::unix::fs::symlink(&to, &at).is_ok() {
                    std::thread::yield_now();
                    flips += 1;
                }
                loop {
                    remove(&at);
                    if std::fs::rename(&aside, &at).is_ok() {
                        break;
                    }
                }
                std::thread::yield_now();
            }
            flips
        });
        Self {
            stop,
            handle: Some(handle),
        }
    }

    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().map_or(0, |h| h.join().unwrap())
    }
}

/// Removes what is at `p` (a link, a file or a directory tree), ignoring races.
fn remove(p: &Path) {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => {
            let _ = std::fs::remove_dir_all(p);
        }
        Ok(_) => {
            let _ = std::fs::remove_file(p);
        }
        Err(_) => {}
    }
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_and_edit_never_create_or_change_files_outside_while_a_dir_flips_to_a_link() {
    let ws = Ws::new();
    let outside = ws.outside().join("target");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("x.txt"), "outside original").unwrap();
    ws.write("race/x.txt", "inside original");
    let flipper = Flipper::start(ws.path("race"), outside.clone());
    let mut ok = 0;
    for i in 0..2500 {
        let out = if i % 2 == 0 {
            ws.call(
                "Write",
                json!({"path": "race/x.txt", "content": format!("w{i}")}),
            )
            .await
        } else {
            ws.call(
                "Edit",
                json!({"path": "race/x.txt", "old": "w", "new": "e"}),
            )
            .await
        };
        if !out.is_error {
            ok += 1;
        }
    }
    let flips = flipper.finish();
    assert!(flips > 0);
    assert!(ok > 0, "no call succeeded at all");
    assert_eq!(
        listing(&outside),
        vec!["x.txt".to_owned()],
        "files created outside"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("x.txt")).unwrap(),
        "outside original"
    );
    let inside = listing(&ws.path("race"));
    assert_eq!(inside, vec!["x.txt".to_owned()], "temporary files left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_and_grep_never_read_outside_while_a_file_flips_to_a_link() {
    let ws = Ws::new();
    let secret = ws.outside().join("secret.txt");
    std::fs::write(&secret, "OUTSIDE-CONTENT\n").unwrap();
    ws.write("f.txt", "inside content\n");
    let flipper = Flipper::start(ws.path("f.txt"), secret.clone());
    for i in 0..3000 {
        let out = if i % 2 == 0 {
            ws.call("Read", json!({"path": "f.txt"})).await
        } else {
            ws.call(
                "Grep",
                json!({"pattern": "CONTENT|content", "output_mode": "content"}),
            )
            .await
        };
        assert!(
            !out.text.contains("OUTSIDE-CONTENT"),
            "call {i} read outside: {}",
            out.text
        );
    }
    assert!(flipper.finish() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn glob_never_lists_names_through_a_directory_swapped_for_a_link() {
    let ws = Ws::new();
    ws.write("d/real.txt", "");
    ws.write("e/swapped.txt", "");
    // The link leads to a directory inside the root: its file exists, but not under `d`
    // (the walk does not follow links), so `d/swapped.txt` must never be listed.
    // Each state held for a moment, so that a walk can list `d` as a directory and then
    // open it as the link.
    let (at, to) = (ws.path("d"), ws.path("e"));
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    let flipper = std::thread::spawn(move || {
        let aside = at.with_extension("aside");
        let mut flips = 0u64;
        while !s.load(Ordering::Relaxed) {
            std::fs::rename(&at, &aside).unwrap();
            std::os::unix::fs::symlink(&to, &at).unwrap();
            flips += 1;
            std::thread::sleep(std::time::Duration::from_micros(300));
            std::fs::remove_file(&at).unwrap();
            std::fs::rename(&aside, &at).unwrap();
            std::thread::sleep(std::time::Duration::from_micros(300));
        }
        flips
    });
    let through = ws.path("d/swapped.txt").display().to_string();
    for i in 0..3000 {
        let out = ws.call("Glob", json!({"pattern": "**/*.txt"})).await;
        assert!(
            !out.text.contains(&through),
            "call {i} listed a name through the link: {}",
            out.text
        );
        assert!(out.text.contains("e/swapped.txt"), "call {i}: {}", out.text);
    }
    stop.store(true, Ordering::Relaxed);
    assert!(flipper.join().unwrap() > 0);
}
