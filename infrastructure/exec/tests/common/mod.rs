//! Helpers shared by the suite: building specs, running them, watching pids.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use awf_domain::AwfError;
use awf_domain::event::OutputStream;
use awf_domain::ports::exec::CommandExecutor;
use awf_domain::ports::exec::CommandOutput;
use awf_domain::ports::exec::CommandSpec;
use awf_domain::ports::exec::OutputCallback;
use awf_domain::ports::exec::Program;
use awf_exec::ProcessExecutor;
use tokio_util::sync::CancellationToken;

/// Taken for reading by the tests whose adopted processes must live on for a while (kept
/// background processes, daemons), for writing by the test of `sweep_adopted`, which stops
/// every adopted process of the test binary.
pub static ADOPTED: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// A spec running `text` through the shell, no dir, no env, no timeout.
pub fn shell(text: &str) -> CommandSpec {
    CommandSpec {
        program: Program::Shell(text.to_owned()),
        dir: None,
        env: Vec::new(),
        timeout: None,
        capture_limit: None,
        scope: None,
    }
}

/// A spec running `contents` as a script.
pub fn script(contents: &str) -> CommandSpec {
    CommandSpec {
        program: Program::Script(contents.to_owned()),
        ..shell("")
    }
}

/// The executor under test, in the spawn mode of this test binary (see `crate::prepare`).
pub fn executor() -> ProcessExecutor {
    crate::prepare();
    ProcessExecutor::new()
}

/// Runs `spec` without callback or cancel.
pub async fn run(spec: CommandSpec) -> Result<CommandOutput, AwfError> {
    executor().run(spec, None, CancellationToken::new()).await
}

/// Runs `spec` and unwraps the result.
pub async fn run_ok(spec: CommandSpec) -> CommandOutput {
    run(spec).await.expect("command should start")
}

/// Chunks seen by a recording callback, in arrival order.
pub type Chunks = Arc<Mutex<Vec<(OutputStream, Vec<u8>)>>>;

/// A callback recording every chunk.
pub fn recorder() -> (OutputCallback, Chunks) {
    let chunks: Chunks = Arc::default();
    let sink = Arc::clone(&chunks);
    let cb: OutputCallback = Arc::new(move |stream, text| {
        sink.lock().expect("lock").push((stream, text.to_owned()));
    });
    (cb, chunks)
}

/// Concatenation of the recorded chunks of one stream, as bytes.
pub fn joined_bytes(chunks: &Chunks, stream: OutputStream) -> Vec<u8> {
    chunks
        .lock()
        .expect("lock")
        .iter()
        .filter(|(s, _)| *s == stream)
        .flat_map(|(_, t)| t.iter().copied())
        .collect()
}

/// Concatenation of the recorded chunks of one stream, as (lossy) text.
pub fn joined(chunks: &Chunks, stream: OutputStream) -> String {
    String::from_utf8_lossy(&joined_bytes(chunks, stream)).into_owned()
}

/// A callback that cancels `token` once stdout has seen a full line.
pub fn cancel_after_first_line(token: CancellationToken) -> OutputCallback {
    let seen = Arc::new(Mutex::new(String::new()));
    Arc::new(move |stream, text| {
        if stream == OutputStream::Stdout {
            let mut s = seen.lock().expect("lock");
            s.push_str(&String::from_utf8_lossy(text));
            if s.contains('\n') {
                token.cancel();
            }
        }
    })
}

/// Parses a pid printed alone on the first line of `stdout`.
pub fn first_pid(stdout: &str) -> i32 {
    stdout
        .lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid in {stdout:?}"))
}

/// Whether `pid` is a live (non-zombie) process.
pub fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // State is the first field after the parenthesised command name.
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
        .unwrap_or("");
    state != "Z" && state != "X"
}

/// Waits (hang guard of 10 s, not a timing assertion) for `pid` to be gone; returns whether it is.
pub fn gone_soon(pid: i32) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if !alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Canonical form of a path (for comparing with `pwd -P`).
pub fn canonical(p: &std::path::Path) -> PathBuf {
    std::fs::canonicalize(p).expect("canonicalize")
}
