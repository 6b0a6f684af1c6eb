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
