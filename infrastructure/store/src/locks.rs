//! Run locks beside the state files: `<data root>/locks/<run_id>.lock`, an exclusive `flock`
//! held while a process runs or resumes the run, the file removed when the lock is dropped
//! (so none is left behind).
//!
//! Source: spec/workflow.md §3.11 (persistence and resume).

use std::path::Path;
use std::path::PathBuf;

use awf_domain::AwfError;
use awf_domain::ports::RunLocks;
use awf_domain::ports::locks::RunLockGuard;

/// [`RunLocks`] as lock files under `<data root>/locks/` (created on first use, also when runs
/// are not recorded).
#[derive(Debug, Clone)]
pub struct RunLockFiles {
    dir: PathBuf,
    owner: Option<String>,
}

impl RunLockFiles {
    /// Locks under `<data_root>/locks`.
    pub fn new(data_root: &Path) -> Self {
        Self {
            dir: data_root.join("locks"),
            owner: None,
        }
    }

    /// These locks, each naming the kind of process that holds it (`awf run`, `awf serve`):
    /// written into the lock file, read by [`RunLocks::holder`] in other processes.
    #[must_use]
    pub fn owned_by(mut self, kind: &str) -> Self {
        self.owner = Some(kind.to_owned());
        self
    }
}

/// One held lock: the locked file and its path.
struct HeldLock {
    lock: Option<nix::fcntl::Flock<std::fs::File>>,
    path: PathBuf,
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        // Unlink while still holding the lock: a process that opens the path afterwards
        // creates a new file, and one that opened the old file first sees it unlinked (see
        // `try_lock`) and tries again.
        let _ = std::fs::remove_file(&self.path);
        drop(self.lock.take());
    }
}

/// Whether `file` is still the file at `path` (it was not unlinked by a finishing holder).
fn still_linked(file: &std::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

impl RunLockFiles {
    /// The lock file of `run_id`; `None` for an id that is not a plain file name (the state
    /// files' rule, length included).
    fn lock_path(&self, run_id: &str) -> Option<PathBuf> {
        (crate::state::valid_id(run_id) && !run_id.contains(".."))
            .then(|| self.dir.join(format!("{run_id}.lock")))
    }
}

impl RunLocks for RunLockFiles {
    /// A lock file that cannot be created (no writable data root) gives `Ok(None)`: nothing is
    /// recorded to protect.
    fn try_lock(&self, run_id: &str) -> Result<Option<RunLockGuard>, AwfError> {
        let Some(path) = self.lock_path(run_id) else {
            return Ok(None);
        };
        if crate::state::create_dir(&self.dir, 0o700).is_err() {
            return Ok(None);
        }
        for _ in 0..8 {
            let Ok(file) = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
            else {
                return Ok(None);
            };
            match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
                Ok(l) if still_linked(&l, &path) => {
                    if let Some(owner) = &self.owner {
                        use std::io::Write as _;
                        let mut f: &std::fs::File = &l;
                        // Best effort: a holder that cannot say what it is stays unnamed.
                        let _ = f.set_len(0).and_then(|()| f.write_all(owner.as_bytes()));
                    }
                    return Ok(Some(RunLockGuard::new(HeldLock {
                        lock: Some(l),
                        path,
                    })));
                }
                // The holder finished and removed the file between our open and our lock.
                Ok(_) => {}
                Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                    return Err(awf_domain::ports::locks::still_running(run_id));
                }
                Err(_) => return Ok(None),
            }
        }
        Ok(None)
    }

    /// Probes with a shared, non-blocking `flock` on the file opened read-only (never created):
    /// it fails only while a holder has its exclusive lock. The probe is released at once.
    fn is_held(&self, run_id: &str) -> Option<bool> {
        let path = self.lock_path(run_id)?;
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(false),
            Err(_) => return None,
        };
        match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockSharedNonblock) {
            Ok(probe) => {
                drop(probe);
                Some(false)
            }
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => Some(true),
            Err(_) => None,
        }
    }

    fn holder(&self, run_id: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.lock_path(run_id)?).ok()?;
        let kind = text.trim();
        // Only a kind this crate's callers write: nothing else is shown as one.
        (kind.starts_with("awf ")
            && kind.len() <= 32
            && kind.bytes().all(|b| b.is_ascii_graphic() || b == b' '))
        .then(|| kind.to_owned())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_held_lock_refuses_a_second_holder_and_leaves_no_file() {
        let d = tempfile::tempdir().unwrap();
        let locks = RunLockFiles::new(d.path());
        let first = locks.try_lock("r1").unwrap().unwrap();
        let file = d.path().join("locks/r1.lock");
        assert!(file.exists());
        // A second lock (another open file description, as another process has) is refused.
        let e = RunLockFiles::new(d.path()).try_lock("r1").unwrap_err();
        assert_eq!(e.code(), awf_domain::ErrorCode::UserInputValidationFailed);
        assert_eq!(
            e.message(),
            "run r1 is still running in another awf process"
        );
        // Other runs are not affected.
        assert!(locks.try_lock("r2").unwrap().is_some());
        drop(first);
        assert!(!file.exists());
        assert!(locks.try_lock("r1").unwrap().is_some());
        // Ids that cannot name a file are not locked.
        assert!(locks.try_lock("../x").unwrap().is_none());
    }
}
