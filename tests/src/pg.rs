//! Test support for the shared PostgreSQL store (issue 15): the private server that
//! `scripts/test.sh` starts (`scripts/pg.sh`, named by `AWF_TEST_PG_URL`) and one fresh
//! database per test, dropped at the end.
//!
//! A missing server fails the test with what to run; it never skips.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::process::Command;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

/// URL of the test server's maintenance database (`AWF_TEST_PG_URL`), e.g.
/// `postgresql://postgres@127.0.0.1:55432/postgres`.
///
/// # Panics
/// When `AWF_TEST_PG_URL` is not set (hint: `export AWF_TEST_PG_URL=$(scripts/pg.sh start)`).
pub fn server_url() -> String {
    match std::env::var("AWF_TEST_PG_URL") {
        Ok(u) if !u.trim().is_empty() => u.trim().to_owned(),
        _ => panic!(
            "AWF_TEST_PG_URL is not set: these tests need a PostgreSQL server; \
             run `export AWF_TEST_PG_URL=$(scripts/pg.sh start)` (scripts/test.sh does it)"
        ),
    }
}

/// Runs one SQL command with `psql` against `url`; its stdout (unaligned, tuples only).
///
/// # Panics
/// When psql cannot run or the command fails (its stderr in the message).
pub fn psql(url: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            url,
            "-c",
            sql,
        ])
        .output()
        .expect("psql runs (Debian's postgresql-client)");
    assert!(
        out.status.success(),
        "psql {sql:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A database of its own for one test, created on the test server and dropped (connections
/// included) when this value is dropped.
pub struct TestDb {
    /// `postgresql://…/<name>`: what `--store` / `AWF_STORE` take.
    pub url: String,
    /// Database name (`awf_t_<pid>_<n>`).
    pub name: String,
    server: String,
}

impl TestDb {
    /// Creates a fresh, empty database.
    ///
    /// # Panics
    /// When the server is not there (see [`server_url`]) or refuses.
    pub fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let server = server_url();
        let name = format!(
            "awf_t_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        psql(&server, &format!("CREATE DATABASE {name}"));
        let base = server.rsplit_once('/').map_or(server.as_str(), |(b, _)| b);
        Self {
            url: format!("{base}/{name}"),
            name,
            server,
        }
    }
}

impl Default for TestDb {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .args([
                "-X",
                "-q",
                &self.server,
                "-c",
                &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
            ])
            .output();
    }
}

/// A PostgreSQL server of one test's own (tests that stop and restart the server must not
/// touch the shared one): Debian's `postgresql` binaries, a temp data directory, a free
/// loopback port; run as the `postgres` user when the tests run as root (PostgreSQL
/// refuses root), as `scripts/pg.sh` does. Stopped (immediate) and removed on drop.
pub struct PrivateServer {
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    dir: tempfile::TempDir,
    bin: std::path::PathBuf,
}

impl PrivateServer {
    /// Initialises and starts a new server.
    ///
    /// # Panics
    /// When Debian's postgresql is not installed (hint: `scripts/pg.sh start` installs it)
    /// or the server does not start (its log in the message).
    pub fn start() -> Self {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("Debian's postgresql is installed (scripts/pg.sh start installs it)")
            .flatten()
            .map(|e| e.path().join("bin"))
            .find(|b| b.join("pg_ctl").exists())
            .expect("a /usr/lib/postgresql/*/bin with pg_ctl");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let dir = tempfile::Builder::new()
            .prefix("awf-pg-")
            .tempdir()
            .expect("temp dir");
        let root = nix_is_root();
        if root {
            let ok = Command::new("chown")
                .args(["postgres", &dir.path().display().to_string()])
                .status()
                .expect("chown runs");
            assert!(ok.success(), "chown postgres {}", dir.path().display());
        }
        let s = Self { port, dir, bin };
        let data = s.data();
        let out = s
            .as_pg(&s.bin.join("initdb"))
            .args(["-D", &data, "-A", "trust", "-U", "postgres", "--no-sync"])
            .output()
            .expect("initdb runs");
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        s.start_again();
        s
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn as_pg(&self, program: &std::path::Path) -> Command {
        if nix_is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        }
    }

    /// `postgresql://postgres@127.0.0.1:<port>/<db>`.
    pub fn url(&self, db: &str) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Starts the (stopped) server again on the same port and data.
    ///
    /// # Panics
    /// When it does not start (its log in the message).
    pub fn start_again(&self) {
        let log = self.dir.path().join("server.log");
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let out = self
            .as_pg(&self.bin.join("pg_ctl"))
            .args([
                "-D",
                &self.data(),
                "-l",
                &log.display().to_string(),
                "-w",
                "-t",
                "60",
            ])
            .args(["-o", &opts, "start"])
            .output()
            .expect("pg_ctl runs");
        assert!(
            out.status.success(),
            "pg_ctl start: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// Stops the server (fast shutdown: clients are disconnected).
    pub fn stop(&self) {
        let _ = self
            .as_pg(&self.bin.join("pg_ctl"))
            .args(["-D", &self.data(), "-m", "fast", "-w", "stop"])
            .output();
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let _ = self
            .as_pg(&self.bin.join("pg_ctl"))
            .args(["-D", &self.data(), "-m", "immediate", "-w", "stop"])
            .output();
    }
}

/// Whether this process runs as root.
fn nix_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
