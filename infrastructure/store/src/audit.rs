//! The audit trail: two JSONL lines per run (`workflow.started`, `workflow.completed`), each
//! appended with one `write` on an `O_APPEND` file (mode 0600), so lines of concurrent
//! processes never interleave. A line is at most [`MAX_LINE`] bytes.
//!
//! Line shapes (keys in this order):
//! ```json
//! {"event":"workflow.started","execution_id":"<run id>","timestamp":"2026-11-30T01:02:03.456Z",
//!  "user":"alice","workflow_name":"deploy","inputs":{"env":"prod"},"schema_version":1}
//! {"event":"workflow.completed","execution_id":"<run id>","timestamp":"…","user":"alice",
//!  "workflow_name":"deploy","status":"failure","exit_code":3,"duration_ms":1520,
//!  "error":"step build failed","schema_version":1}
//! ```
//! `inputs` is omitted when the run has none; `inputs_truncated: true` follows it when values
//! had to be shortened; `error` is present only when the run did not succeed. `status` is
//! `success`, `failure` or `cancelled`; `exit_code` is the process exit code.
//!
//! Source: spec/workflow.md §3.14; http-ops.md §3.4 (we report `cancelled` apart and the
//! process exit code; divergences listed in docs/compatibility.md).

use std::fs::File;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::path::PathBuf;

use crate::state::create_dir;

/// The user name of this process from the OS account database, else `unknown`.
pub(crate) fn os_user_name() -> String {
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.name)
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// Appends lines to the audit file, opening it on first use (`O_APPEND|O_CREAT`, 0600; a
/// missing parent directory is created 0700).
#[derive(Debug)]
pub(crate) struct AuditFile {
    path: PathBuf,
    file: Option<File>,
    /// Lines were appended since the last [`AuditFile::sync`].
    unsynced: bool,
}

impl AuditFile {
    pub(crate) fn new(path: PathBuf) -> Self {
        Self {
            path,
            file: None,
            unsynced: false,
        }
    }

    /// Where lines go.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one line with a single `write`.
    pub(crate) fn append(&mut self, line: &str) -> std::io::Result<()> {
        if self.file.is_none() {
            if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
                create_dir(dir, 0o700).map_err(|e| std::io::Error::other(e.to_string()))?;
            }
            // O_NONBLOCK: a FIFO named as the audit log must not block the writer (and with
            // it the run's final flush); only regular files are accepted.
            let f = OpenOptions::new()
                .append(true)
                .create(true)
                .mode(0o600)
                .custom_flags(nix::libc::O_NONBLOCK)
                .open(&self.path)?;
            if !f.metadata()?.is_file() {
                return Err(std::io::Error::other(format!(
                    "{} is not a regular file",
                    self.path.display()
                )));
            }
            self.file = Some(f);
        }
        let Some(f) = self.file.as_mut() else {
            return Ok(());
        };
        let n = f.write(line.as_bytes())?;
        self.unsynced |= n > 0;
        if n != line.len() {
            return Err(std::io::Error::other(format!(
                "short write: {n} of {} bytes",
                line.len()
            )));
        }
        Ok(())
    }

    /// The file to sync when lines were appended since the last sync (a handle of its own,
    /// so it can be synced on another thread), marking them synced; `None` when clean (a
    /// sync of a clean file still costs a disk flush on some file systems).
    ///
    /// # Errors
    /// The OS error of duplicating the descriptor.
    pub(crate) fn pending_sync(&mut self) -> std::io::Result<Option<File>> {
        match &self.file {
            Some(f) if self.unsynced => {
                let dup = f.try_clone()?;
                self.unsynced = false;
                Ok(Some(dup))
            }
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // The lines are built by the shared projection (awf-domain); their shape is checked here.
    use awf_domain::projection::Completion;
    use awf_domain::projection::MAX_AUDIT_LINE as MAX_LINE;
    use awf_domain::projection::completed_line;
    use awf_domain::projection::started_line;
    use pretty_assertions::assert_eq;
    use serde_json::Map;
    use serde_json::Value;
    use std::time::Duration;
    use std::time::SystemTime;
    use std::time::UNIX_EPOCH;

    fn at() -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(1_764_464_523_456)
    }

    #[test]
    fn started_line_shape_and_order() {
        let mut inputs = Map::new();
        inputs.insert("env".into(), "prod".into());
        inputs.insert("API_TOKEN".into(), "***".into());
        assert_eq!(
            started_line("r1", at(), "alice", "deploy", &inputs),
            "{\"event\":\"workflow.started\",\"execution_id\":\"r1\",\"timestamp\":\"2025-11-30T01:02:03.456Z\",\
             \"user\":\"alice\",\"workflow_name\":\"deploy\",\"inputs\":{\"env\":\"prod\",\"API_TOKEN\":\"***\"},\
             \"schema_version\":1}\n"
        );
        assert_eq!(
            started_line("r1", at(), "alice", "deploy", &Map::new()),
            "{\"event\":\"workflow.started\",\"execution_id\":\"r1\",\"timestamp\":\"2025-11-30T01:02:03.456Z\",\
             \"user\":\"alice\",\"workflow_name\":\"deploy\",\"schema_version\":1}\n"
        );
    }

    #[test]
    fn completed_line_shape_and_order() {
        let c = Completion {
            status: "failure",
            exit_code: 3,
            duration_ms: 0,
            error: Some("step build failed"),
        };
        assert_eq!(
            completed_line("r1", at(), "alice", "deploy", &c),
            "{\"event\":\"workflow.completed\",\"execution_id\":\"r1\",\"timestamp\":\"2025-11-30T01:02:03.456Z\",\
             \"user\":\"alice\",\"workflow_name\":\"deploy\",\"status\":\"failure\",\"exit_code\":3,\
             \"duration_ms\":1,\"error\":\"step build failed\",\"schema_version\":1}\n"
        );
        let ok = Completion {
            status: "success",
            exit_code: 0,
            duration_ms: 42,
            error: None,
        };
        assert_eq!(
            completed_line("r1", at(), "alice", "deploy", &ok),
            "{\"event\":\"workflow.completed\",\"execution_id\":\"r1\",\"timestamp\":\"2025-11-30T01:02:03.456Z\",\
             \"user\":\"alice\",\"workflow_name\":\"deploy\",\"status\":\"success\",\"exit_code\":0,\
             \"duration_ms\":42,\"schema_version\":1}\n"
        );
    }

    #[test]
    fn oversized_inputs_are_replaced_longest_first() {
        let mut inputs = Map::new();
        inputs.insert("small".into(), "keep me".into());
        inputs.insert("big".into(), "x".repeat(3000).into());
        inputs.insert("bigger".into(), "y".repeat(3500).into());
        inputs.insert("mid".into(), "z".repeat(1000).into());
        let line = started_line("r1", at(), "alice", "deploy", &inputs);
        assert!(line.len() <= MAX_LINE, "{}", line.len());
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            v["inputs"],
            serde_json::json!({"small": "keep me", "big": "…", "bigger": "…", "mid": "z".repeat(1000)})
        );
        assert_eq!(v["inputs_truncated"], Value::Bool(true));
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "event",
                "execution_id",
                "timestamp",
                "user",
                "workflow_name",
                "inputs",
                "inputs_truncated",
                "schema_version"
            ]
        );
    }

    /// Breaker: 5,000 undeclared inputs took more than 20 s before the run started (the line
    /// was built again after each replacement). 20,000 small ones: every value is replaced,
    /// as before, in one pass.
    #[test]
    fn many_small_inputs_are_replaced_in_one_pass() {
        let inputs: Map<String, Value> = (0..20_000)
            .map(|i| (format!("k{i}"), Value::from("v")))
            .collect();
        let line = started_line("r1", at(), "alice", "deploy", &inputs);
        let v: Value = serde_json::from_str(&line).unwrap();
        let got = v["inputs"].as_object().unwrap();
        assert_eq!(got.len(), 20_000);
        assert!(got.values().all(|v| v == "…"));
        assert_eq!(v["inputs_truncated"], Value::Bool(true));
    }

    #[test]
    fn oversized_error_is_cut() {
        let err = "é".repeat(5000);
        let c = Completion {
            status: "failure",
            exit_code: 3,
            duration_ms: 5,
            error: Some(&err),
        };
        let line = completed_line("r1", at(), "alice", "deploy", &c);
        assert!(line.len() <= MAX_LINE, "{}", line.len());
        let v: Value = serde_json::from_str(&line).unwrap();
        assert!(v["error"].as_str().unwrap().ends_with("é…"));
    }

    #[test]
    fn append_creates_file_0600_and_adds_lines() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("sub").join("audit.jsonl");
        let mut a = AuditFile::new(path.clone());
        a.append("one\n").unwrap();
        a.append("two\n").unwrap();
        // Lines appended: one sync is due, then none until the next line.
        a.pending_sync().unwrap().unwrap().sync_data().unwrap();
        assert!(a.pending_sync().unwrap().is_none());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\ntwo\n");
        a.append("three\n").unwrap();
        assert!(a.pending_sync().unwrap().is_some());
        assert!(a.pending_sync().unwrap().is_none());
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(a.path(), path.as_path());
    }
}
