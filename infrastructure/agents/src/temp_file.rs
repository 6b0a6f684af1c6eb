//! Private temporary files an agent CLI reads during one call (Claude Code's `--mcp-config`
//! wrapper): created `O_EXCL` with mode 0600 in the temp dir, removed when the guard drops, so
//! a cancelled call (its future dropped) cleans up too.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use awf_domain::error::AwfError;
use awf_domain::error::ErrorCode;

/// A file removed on drop.
#[derive(Debug)]
pub struct TempFile {
    path: PathBuf,
}

impl TempFile {
    /// Creates `<dir>/<prefix><unique>.json` (mode 0600, never an existing file or link) with
    /// `content`.
    ///
    /// # Errors
    /// `SYSTEM.IO.WRITE_FAILED` when it cannot be created or written.
    pub fn create(dir: &Path, prefix: &str, content: &[u8]) -> Result<Self, AwfError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let mut last = None;
        for _ in 0..16 {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!(
                "{prefix}{}-{n}-{nanos:08x}.json",
                std::process::id()
            ));
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
            {
                Ok(mut f) => {
                    let file = Self { path };
                    f.write_all(content).map_err(|e| failed(&file.path, &e))?;
                    return Ok(file);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(failed(&path, &e)),
            }
        }
        let e = last.unwrap_or_else(|| std::io::Error::other("no free name"));
        Err(failed(&dir.join(prefix), &e))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn failed(path: &Path, e: &std::io::Error) -> AwfError {
    AwfError::new(
        ErrorCode::SystemIoWriteFailed,
        format!("cannot write {}: {e}", path.display()),
    )
    .with_hint("the temp dir ($TMPDIR, else /tmp) must exist and be writable")
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn private_unique_and_gone_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let a = TempFile::create(dir.path(), "awf-x-", b"{}").unwrap();
        let b = TempFile::create(dir.path(), "awf-x-", b"[]").unwrap();
        assert_ne!(a.path(), b.path());
        assert_eq!(std::fs::read_to_string(a.path()).unwrap(), "{}");
        let mode = std::fs::metadata(a.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let p = a.path().to_path_buf();
        drop(a);
        assert!(!p.exists());
        assert!(b.path().exists());
    }
}
