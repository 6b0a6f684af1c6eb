//! Test support for awf's end-to-end tests: locating the built `awf` binary and running it
//! hermetically (temp HOME, XDG dirs and working directory; no `AWF_*` variables inherited).

pub mod acp;
pub mod agent_cli;
pub mod http_serve;
pub mod http_test;
pub mod mcp;
pub mod pg;

use std::collections::BTreeMap;
use std::path::Path;
use std::path::PathBuf;
use std::process::Command;
use std::process::Output;
use std::process::Stdio;

/// Path of the `awf` binary under test: `$AWF_BIN` as given, else `target/debug/awf` of this
/// workspace (or of `$CARGO_TARGET_DIR`), made fresh first: when the binary is missing or older
/// than any source file its dep-info (`awf.d`) lists, `cargo build -p awf` runs (once per test
/// process), so a stale binary is never tested.
///
/// # Panics
/// When the build fails or the binary is still stale afterwards (the message says why).
pub fn awf_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("AWF_BIN") {
        return PathBuf::from(p);
    }
    static FRESH: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    match FRESH.get_or_init(fresh_debug_bin) {
        Ok(p) => p.clone(),
        Err(e) => panic!("{e}"),
    }
}

/// The debug binary's path (not checked).
fn debug_bin() -> PathBuf {
    let root = workspace_root();
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    target.join("debug").join("awf")
}

/// Why `bin` is stale (`Some(reason)`), judged by its dep-info file `<bin>.d`; `None` when
/// it is at least as new as every source file listed there.
pub fn staleness(bin: &Path) -> Option<String> {
    let Ok(built) = std::fs::metadata(bin).and_then(|m| m.modified()) else {
        return Some(format!("{} does not exist", bin.display()));
    };
    let dep_info = bin.with_extension("d");
    let Ok(text) = std::fs::read_to_string(&dep_info) else {
        return Some(format!("{} is missing", dep_info.display()));
    };
    for source in dep_info_sources(&text) {
        match std::fs::metadata(&source).and_then(|m| m.modified()) {
            Ok(t) if t > built => {
                return Some(format!("{} changed since the build", source.display()));
            }
            Ok(_) => {}
            Err(_) => return Some(format!("{} is gone", source.display())),
        }
    }
    None
}

/// The source files of a Makefile-style dep-info text (`target: a b\ c`), first rule only.
pub fn dep_info_sources(text: &str) -> Vec<PathBuf> {
    let first = text.lines().next().unwrap_or("");
    let Some((_, deps)) = first.split_once(": ") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = deps.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            ' ' => {
                if !cur.is_empty() {
                    out.push(PathBuf::from(std::mem::take(&mut cur)));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(PathBuf::from(cur));
    }
    out
}

fn fresh_debug_bin() -> Result<PathBuf, String> {
    let bin = debug_bin();
    let Some(why) = staleness(&bin) else {
        return Ok(bin);
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(&cargo)
        .args(["build", "--quiet", "-p", "awf"])
        .current_dir(workspace_root())
        .stdin(Stdio::null())
        .status()
        .map_err(|e| {
            format!("awf binary is stale ({why}) and `cargo build -p awf` could not start: {e}")
        })?;
    if !status.success() {
        return Err(format!(
            "awf binary is stale ({why}) and `cargo build -p awf` failed: {status}"
        ));
    }
    match staleness(&bin) {
        None => Ok(bin),
        Some(still) => Err(format!(
            "awf binary is still stale after `cargo build -p awf`: {still}"
        )),
    }
}

/// `text` without its colour and cursor codes (CSI sequences: ESC `[`, parameters, a final
/// byte from `@` to `~`), for comparing what a terminal got.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for f in chars.by_ref() {
                if ('@'..='~').contains(&f) {
                    break;
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// The workspace root (parent of this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The shared folder next to the workspace (`../shared`), holding the conformance suite.
pub fn shared_dir() -> PathBuf {
    workspace_root().join("..").join("shared")
}

/// Folder of this crate's own workflow fixtures.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Environment variable set (to the sandbox directory) for every command a [`Sandbox`] runs;
/// children inherit it, so a test finds its own processes and only those.
pub const SANDBOX_MARK: &str = "E2E_SANDBOX_MARK";

/// A process found by [`Sandbox::processes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxProcess {
    /// Process id.
    pub pid: u32,
    /// Command line, arguments joined by single spaces.
    pub cmdline: String,
}

/// A hermetic sandbox: temp dir used as CWD, HOME and XDG dirs inside it.
pub struct Sandbox {
    dir: tempfile::TempDir,
    env: BTreeMap<String, String>,
}

impl Sandbox {
    /// New sandbox with `AWF_WORKFLOWS_PATH` pointing at this crate's fixtures.
    pub fn new() -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("awf-e2e-").tempdir()?;
        let mut env = BTreeMap::new();
        for sub in ["home", "data", "config", "cache", "state"] {
            std::fs::create_dir_all(dir.path().join(sub))?;
        }
        let p = |s: &str| dir.path().join(s).display().to_string();
        env.insert("HOME".into(), p("home"));
        env.insert("XDG_DATA_HOME".into(), p("data"));
        env.insert("XDG_CONFIG_HOME".into(), p("config"));
        env.insert("XDG_CACHE_HOME".into(), p("cache"));
        env.insert("XDG_STATE_HOME".into(), p("state"));
        env.insert(
            "AWF_WORKFLOWS_PATH".into(),
            fixtures().display().to_string(),
        );
        env.insert("NO_COLOR".into(), "1".into());
        env.insert(SANDBOX_MARK.into(), dir.path().display().to_string());
        Ok(Self { dir, env })
    }

    /// Live processes started from this sandbox: every process whose environment carries this
    /// sandbox's [`SANDBOX_MARK`] (awf and everything it spawned, orphans of a killed awf
    /// included), never another test's. Zombies have no environment and are not listed.
    pub fn processes(&self) -> Vec<SandboxProcess> {
        let marker = format!("{SANDBOX_MARK}={}", self.dir.path().display());
        let Ok(rd) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for entry in rd.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
                continue;
            };
            if environ.split(|b| *b == 0).any(|kv| kv == marker.as_bytes()) {
                let cmdline = std::fs::read(entry.path().join("cmdline"))
                    .map(|c| {
                        c.split(|b| *b == 0)
                            .filter(|p| !p.is_empty())
                            .map(|p| String::from_utf8_lossy(p).into_owned())
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .unwrap_or_default();
                out.push(SandboxProcess { pid, cmdline });
            }
        }
        out
    }

    /// Sends SIGKILL to every process of [`Sandbox::processes`] whose command line is exactly
    /// `cmdline` (all of them when `None`); returns how many were signalled.
    pub fn kill_processes(&self, cmdline: Option<&str>) -> usize {
        let mut n = 0;
        for p in self.processes() {
            if cmdline.is_none_or(|c| p.cmdline == c)
                && Command::new("kill")
                    .args(["-KILL", &p.pid.to_string()])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            {
                n += 1;
            }
        }
        n
    }

    /// The sandbox directory (the CWD of commands).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Sets an environment variable for later commands.
    pub fn set_env(&mut self, k: &str, v: &str) {
        self.env.insert(k.to_owned(), v.to_owned());
    }

    /// Writes a file relative to the sandbox.
    pub fn write(&self, rel: &str, content: &str) -> anyhow::Result<PathBuf> {
        let p = self.dir.path().join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&p, content)?;
        Ok(p)
    }

    /// A `Command` for `awf <args>` with the sandbox env, CWD and stdin closed.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(awf_bin());
        c.args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null());
        for (k, _) in std::env::vars() {
            if k.starts_with("AWF_") {
                c.env_remove(k);
            }
        }
        c.envs(&self.env);
        c
    }

    /// A `Command` for `awf <args>` with the sandbox env and CWD, stdio left as is (for a
    /// pseudo-terminal session): the terminal is given a size first (100 columns, 30 rows,
    /// with `stty`, as a terminal emulator would; a new pseudo-terminal reports 0x0), then
    /// awf is exec'd (same process).
    pub fn tty_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", "stty cols 100 rows 30 && exec \"$0\" \"$@\""])
            .arg(awf_bin());
        self.tty_env(c, args)
    }

    /// [`Sandbox::tty_cmd`] on a pseudo-terminal left without a size (0x0).
    pub fn tty_cmd_unsized(&self, args: &[&str]) -> Command {
        self.tty_env(Command::new(awf_bin()), args)
    }

    fn tty_env(&self, mut c: Command, args: &[&str]) -> Command {
        c.args(args).current_dir(self.dir.path());
        for (k, _) in std::env::vars() {
            if k.starts_with("AWF_") {
                c.env_remove(k);
            }
        }
        c.envs(&self.env);
        c
    }

    /// Runs `awf <args>` to completion.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<Run> {
        let out = self.cmd(args).output()?;
        Ok(Run::from(out))
    }

    /// Runs `awf <args>` to completion in `dir` instead of the sandbox directory (its `PWD`
    /// says so too, as a shell's would).
    pub fn run_in(&self, dir: &Path, args: &[&str]) -> anyhow::Result<Run> {
        let out = self.cmd(args).current_dir(dir).env("PWD", dir).output()?;
        Ok(Run::from(out))
    }

    /// Writes the workflow `yaml` to `file` in the sandbox and runs `awf run <file> <args>`.
    pub fn run_workflow(&self, file: &str, yaml: &str, args: &[&str]) -> anyhow::Result<Run> {
        let path = self.write(file, yaml)?;
        let path = path.to_string_lossy().into_owned();
        let mut all = vec!["run", path.as_str()];
        all.extend_from_slice(args);
        self.run(&all)
    }
}

impl Drop for Sandbox {
    /// Stops whatever this sandbox's commands left running (orphans of a killed awf), so no
    /// test leaves processes behind for the next.
    fn drop(&mut self) {
        self.kill_processes(None);
    }
}

/// The outcome of one `awf` invocation.
#[derive(Debug)]
pub struct Run {
    /// Exit code (−1 when killed by a signal).
    pub code: i32,
    /// stdout.
    pub stdout: String,
    /// stderr.
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Self {
        Self {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Run {
    /// The rows of the `Input Parameters:` table of `awf run <workflow> --help` on stdout
    /// (header first), up to the blank line after it.
    pub fn inputs_table(&self) -> Vec<&str> {
        self.stdout
            .lines()
            .skip_while(|l| *l != "Input Parameters:")
            .skip(1)
            .take_while(|l| !l.is_empty())
            .collect()
    }

    /// stdout parsed as one JSON value.
    pub fn json(&self) -> anyhow::Result<serde_json::Value> {
        serde_json::from_str(&self.stdout).map_err(|e| {
            anyhow::anyhow!(
                "stdout is not JSON ({e}): {}\nstderr: {}",
                self.stdout,
                self.stderr
            )
        })
    }
}

/// The run id in `awf run`'s `Workflow started: NAME (ID)` line of `text`; `None` without one.
pub fn run_id_in(text: &str) -> Option<String> {
    text.split_whitespace()
        .find(|w| w.len() == 38 && w.starts_with('('))
        .map(|w| w.trim_matches(|c| c == '(' || c == ')').to_owned())
}

/// Runs `file` (a workflow that fails until `ok` exists) in the sandbox directory, creates
/// `ok`, then `awf resume`s the run with `args`: [`fail_then_resume_in`] without moving.
///
/// # Errors
/// As [`fail_then_resume_in`].
pub fn fail_then_resume(sb: &Sandbox, file: &str, ok: &Path, args: &[&str]) -> anyhow::Result<Run> {
    let here = sb.path();
    fail_then_resume_in(sb, (here, here), file, ok, args).map(|(_, r)| r)
}

/// Runs `awf run file` in `dirs.0` (the workflow fails until `ok` exists), creates `ok`, then
/// `awf resume`s the run with `args` from `dirs.1`; returns the run id and the resume.
///
/// # Errors
/// When `awf` cannot be started, the run does not fail, its output names no run id, or `ok`
/// cannot be written.
pub fn fail_then_resume_in(
    sb: &Sandbox,
    dirs: (&Path, &Path),
    file: &str,
    ok: &Path,
    args: &[&str],
) -> anyhow::Result<(String, Run)> {
    let r = sb.run_in(dirs.0, &["run", file])?;
    anyhow::ensure!(
        r.code != 0,
        "the run did not fail: {}{}",
        r.stdout,
        r.stderr
    );
    let id = run_id_in(&format!("{}{}", r.stdout, r.stderr))
        .ok_or_else(|| anyhow::anyhow!("no run id in: {}{}", r.stdout, r.stderr))?;
    std::fs::write(ok, "")?;
    let mut all = vec!["resume", id.as_str()];
    all.extend_from_slice(args);
    let resumed = sb.run_in(dirs.1, &all)?;
    Ok((id, resumed))
}

/// The data root of a sandbox (`<sandbox>/data/awf`, from its `XDG_DATA_HOME`).
pub fn data(sb: &Sandbox) -> PathBuf {
    sb.path().join("data").join("awf")
}

/// Polls `f` every 50 ms until it holds; panics naming `what` after 30 s.
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = std::time::Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Waits until a committed state file of the sandbox (its journal replayed) satisfies
/// `pred`; returns its run id. A `.tmp` file being written is never read: it may never be
/// renamed into place if the run is killed now.
pub fn wait_for_state(
    sb: &Sandbox,
    what: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> String {
    let states = data(sb).join("states");
    let mut run_id = String::new();
    wait_for(what, || {
        let Ok(entries) = std::fs::read_dir(&states) else {
            return false;
        };
        for e in entries.flatten() {
            if e.path().extension().is_some_and(|x| x == "json")
                && let Some(v) = read_state_file(&e.path())
                && pred(&v)
            {
                run_id = v["run_id"].as_str().unwrap_or_default().to_owned();
                return true;
            }
        }
        false
    });
    run_id
}

/// A state file's JSON with its live run's journal (`<run_id>.journal` beside it: one JSON
/// line per recorder batch, header fields plus the `states` recorded in that batch) replayed
/// over it, as the store reads it; `None` when the file is missing or not JSON.
pub fn read_state_file(path: &Path) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let Ok(journal) = std::fs::read_to_string(path.with_extension("journal")) else {
        return Some(v);
    };
    for line in journal.lines() {
        let Ok(serde_json::Value::Object(entry)) = serde_json::from_str(line) else {
            break;
        };
        for (k, val) in entry {
            match (k.as_str(), val) {
                ("states", serde_json::Value::Object(states)) => {
                    for (name, st) in states {
                        v["states"][name] = st;
                    }
                }
                (_, val) => v[k] = val,
            }
        }
    }
    Some(v)
}

/// A state file's `loop_position` with only its loops and iterations (`state`, `iteration`,
/// `inner`): what tests wait for, whatever body step is in progress (`step`,
/// `step_completed`, `branches_completed`).
pub fn loop_levels(pos: &serde_json::Value) -> serde_json::Value {
    let Some(o) = pos.as_object() else {
        return pos.clone();
    };
    let mut out = serde_json::Map::new();
    for (k, v) in o {
        match k.as_str() {
            "step" | "step_completed" | "branches_completed" => {}
            "inner" => {
                out.insert(k.clone(), loop_levels(v));
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    serde_json::Value::Object(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn dep_info_lists_sources_with_escaped_spaces() {
        assert_eq!(
            dep_info_sources("/t/awf: /w/a.rs /w/my\\ dir/b.rs\n\n/w/a.rs:\n"),
            vec![PathBuf::from("/w/a.rs"), PathBuf::from("/w/my dir/b.rs")]
        );
        assert!(dep_info_sources("").is_empty());
    }

    #[test]
    fn a_binary_older_than_a_source_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("main.rs");
        let bin = dir.path().join("awf");
        std::fs::write(&src, "fn main() {}").unwrap();
        std::fs::write(&bin, "binary").unwrap();
        std::fs::write(
            dir.path().join("awf.d"),
            format!("{}: {}\n", bin.display(), src.display()),
        )
        .unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&src)
            .unwrap()
            .set_modified(old)
            .unwrap();
        assert_eq!(staleness(&bin), None);
        // The source changes after the build.
        std::fs::File::options()
            .write(true)
            .open(&bin)
            .unwrap()
            .set_modified(old - std::time::Duration::from_secs(60))
            .unwrap();
        let why = staleness(&bin).unwrap();
        assert!(why.contains("main.rs changed since the build"), "{why}");
        std::fs::remove_file(&src).unwrap();
        assert!(staleness(&bin).unwrap().contains("is gone"));
        assert!(
            staleness(&dir.path().join("nope"))
                .unwrap()
                .contains("does not exist")
        );
    }
}
