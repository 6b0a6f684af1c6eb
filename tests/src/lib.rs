//! Test support for awf's end-to-end tests: locating the built `awf` binary and running it
//! hermetically (temp HOME, XDG dirs and working directory; no `AWF_*` variables inherited).

use std::collections::BTreeMap;
use std::path::Path;
use std::path::PathBuf;
use std::process::Command;
use std::process::Output;
use std::process::Stdio;

/// Path of the `awf` binary under test: `$AWF_BIN`, else `target/debug/awf` of this workspace
/// (the `cargo t` alias and `scripts/test.sh` build it first).
pub fn awf_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("AWF_BIN") {
        return PathBuf::from(p);
    }
    let root = workspace_root();
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    target.join("debug").join("awf")
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
        Ok(Self { dir, env })
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
    /// pseudo-terminal session).
    pub fn tty_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(awf_bin());
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
