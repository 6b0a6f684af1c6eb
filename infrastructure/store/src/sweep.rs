//! The leftovers of killed runs under a data root, removed later by whoever passes by: a
//! lock file that no process holds (`locks/<id>.lock`: a run killed, by SIGKILL, before it
//! could remove it) and a journal beside the state file of a run that has ended
//! (`states/<id>.journal`: killed between its last state file and the journal's removal;
//! readers already ignore it, see [`crate::state`]).
//!
//! Nothing a live run uses is touched: a lock is removed only once this process has taken it
//! (a non-blocking `flock`: a lock some process holds is passed by), and a journal only while
//! this process holds the run's lock (and, for a sub-workflow's run, its parent run's lock),
//! so that no `awf resume` can start writing the run meanwhile, and only when the state file
//! as written whole says the run is not running. Every sweep is bounded by the number of
//! entries it looks at, and stops early when asked to.
//!
//! Called from the background thread of a run's start-up (`awf run`, `awf resume`: only the
//! `locks` directory is listed, which holds the live runs' locks and the few leftovers) and
//! from the commands that read the records (`awf history`, `awf resume --list`, `awf status`),
//! which list the states directory anyway.

use std::path::Path;

use awf_domain::ports::RunLocks;
use awf_domain::ports::store::StoredStatus;

use crate::RunLockFiles;
use crate::StorePaths;
use crate::state;

/// Most entries one sweep looks at: a leftover beyond it goes at a later sweep.
pub const SWEEP_MAX: usize = 64;

/// A lock file changed more recently than this is left alone: a process that has just
/// created it takes its `flock` a moment later, and a sweep taking it first would make that
/// process refuse its own run as "still running in another awf process".
pub const LOCK_MIN_AGE: std::time::Duration = std::time::Duration::from_secs(10);

/// What a sweep removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Lock files no process held.
    pub locks: usize,
    /// Journals beside the state files of ended runs.
    pub journals: usize,
}

/// Removes, under `data_root`, the lock files no process holds (at most [`SWEEP_MAX`] looked
/// at; none changed in the last [`LOCK_MIN_AGE`]) and, for each of them, the journal beside its run's state file when that run has
/// ended. `stop` is asked before each entry: once it says so, the sweep ends there (a
/// process about to exit does not wait for it). Best effort: what cannot be removed is left.
pub fn sweep_leftovers(data_root: &Path, stop: &dyn Fn() -> bool) -> Swept {
    let paths = StorePaths::of_root(data_root);
    let locks = RunLockFiles::new(data_root);
    let mut swept = Swept::default();
    let Ok(entries) = std::fs::read_dir(data_root.join("locks")) else {
        return swept;
    };
    for entry in entries.flatten().take(SWEEP_MAX) {
        if stop() {
            break;
        }
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".lock")) else {
            continue;
        };
        let young = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| !matches!(t.elapsed(), Ok(age) if age >= LOCK_MIN_AGE));
        if young {
            continue;
        }
        // Taken and released at once: released, it removes its file (see `locks`). Not
        // taken: held (the run is live), or not a lock this store names.
        if let Ok(Some(guard)) = locks.try_lock(id) {
            if remove_ended_journal_locked(&paths, &locks, id) {
                swept.journals += 1;
            }
            drop(guard);
            swept.locks += 1;
        }
    }
    swept
}

/// Removes the journals among `journals` (run ids of `states/<id>.journal` files) that lie
/// beside the state file of an ended run (at most [`SWEEP_MAX`]); how many it removed.
pub(crate) fn remove_ended_journals(paths: &StorePaths, journals: &[String]) -> usize {
    let locks = RunLockFiles::new(&paths.data_root);
    journals
        .iter()
        .take(SWEEP_MAX)
        .filter(|id| remove_ended_journal(paths, &locks, id))
        .count()
}

/// Removes the journal of `run_id` when its state file says the run has ended and no
/// process holds its lock; whether it did.
pub(crate) fn remove_ended_journal(paths: &StorePaths, locks: &RunLockFiles, run_id: &str) -> bool {
    if !paths.journal_file(run_id).exists() {
        return false;
    }
    match locks.try_lock(run_id) {
        Ok(Some(_guard)) => remove_ended_journal_locked(paths, locks, run_id),
        Ok(None) | Err(_) => false,
    }
}

/// [`remove_ended_journal`] with the run's own lock held by the caller.
fn remove_ended_journal_locked(paths: &StorePaths, locks: &RunLockFiles, run_id: &str) -> bool {
    let journal = paths.journal_file(run_id);
    if !journal.exists() {
        return false;
    }
    // As written whole: a journal is replayed over a `running` state file only.
    let Some((status, parent)) = state::written_status(paths, run_id) else {
        return false;
    };
    if status == StoredStatus::Running {
        return false;
    }
    // A sub-workflow's run is written by its parent's process, which holds the parent's
    // lock, not this one.
    let _parent = match parent.as_deref().map(|p| locks.try_lock(p)) {
        None => None,
        Some(Ok(Some(g))) => Some(g),
        Some(Ok(None) | Err(_)) => return false,
    };
    std::fs::remove_file(&journal).is_ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use awf_domain::ports::store::RunSnapshot;

    fn snapshot(id: &str, status: StoredStatus, parent: Option<&str>) -> RunSnapshot {
        let mut s: RunSnapshot = serde_json::from_value(serde_json::json!({
            "schema_version": 1,
            "run_id": id,
            "workflow": "wf",
            "workflow_name": "wf",
            "status": "running",
            "current_state": "a",
            "inputs": {},
            "states": {},
            "started_at": "2025-01-01T00:00:00Z",
            "updated_at": "2025-01-01T00:00:01Z",
        }))
        .unwrap();
        s.status = status;
        s.parent_run_id = parent.map(str::to_owned);
        s
    }

    /// Breaker (finding 1): runs SIGKILLed at their end left `locks/<id>.lock` and
    /// `states/<id>.journal` for ever, and runs killed before their state file an orphan
    /// lock. A sweep removes the locks nobody holds and the journals of ended runs; a held
    /// lock, the journal of a running run and a journal whose run's lock is held stay.
    #[test]
    fn free_locks_and_ended_runs_journals_go_held_and_running_ones_stay() {
        let d = tempfile::tempdir().unwrap();
        let p = StorePaths::of_root(d.path());
        crate::state::create_dir(&p.states_dir(), 0o700).unwrap();
        let locks_dir = d.path().join("locks");
        std::fs::create_dir_all(&locks_dir).unwrap();
        // A lock file left a minute ago.
        let old_lock = |name: &str| {
            let f = std::fs::File::create(locks_dir.join(name)).unwrap();
            f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(60))
                .unwrap();
        };
        let put_state = |id: &str, status: StoredStatus, parent: Option<&str>| {
            crate::state::save(&p, &snapshot(id, status, parent), false).unwrap();
            std::fs::write(p.journal_file(id), "{}\n").unwrap();
        };
        // Ended, killed at the end: a lock file and a journal.
        put_state("ended", StoredStatus::Success, None);
        old_lock("ended.lock");
        // Killed before its state file: only a lock file.
        old_lock("early.lock");
        // Just created by a process about to take it: left alone.
        std::fs::write(locks_dir.join("new.lock"), "").unwrap();
        // Running (its process killed): the journal is its record; the free lock goes.
        put_state("killed", StoredStatus::Running, None);
        old_lock("killed.lock");
        // Live: its lock is held (by another open file, as another process holds it).
        put_state("live", StoredStatus::Failure, None);
        let held = RunLockFiles::new(d.path())
            .try_lock("live")
            .unwrap()
            .unwrap();
        std::fs::File::options()
            .write(true)
            .open(locks_dir.join("live.lock"))
            .unwrap()
            .set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(60))
            .unwrap();

        let swept = sweep_leftovers(d.path(), &|| false);
        assert_eq!(
            swept,
            Swept {
                locks: 3,
                journals: 1
            }
        );
        let mut left: Vec<String> = std::fs::read_dir(&locks_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["live.lock", "new.lock"]);
        assert!(!p.journal_file("ended").exists());
        assert!(p.journal_file("killed").exists());
        assert!(p.journal_file("live").exists());

        // From a listing of the states directory: the live run's journal stays while its
        // lock is held, and goes once it is not.
        let journals = ["killed".to_owned(), "live".to_owned()];
        assert_eq!(remove_ended_journals(&p, &journals), 0);
        drop(held);
        assert_eq!(remove_ended_journals(&p, &journals), 1);
        assert!(!p.journal_file("live").exists());
        assert!(p.journal_file("killed").exists());

        // A sub-workflow's run: not while its parent's lock is held.
        put_state("child", StoredStatus::Success, Some("parent"));
        let parent = RunLockFiles::new(d.path())
            .try_lock("parent")
            .unwrap()
            .unwrap();
        assert_eq!(remove_ended_journals(&p, &["child".to_owned()]), 0);
        drop(parent);
        assert_eq!(remove_ended_journals(&p, &["child".to_owned()]), 1);

        // Asked to stop: nothing is looked at.
        old_lock("late.lock");
        assert_eq!(sweep_leftovers(d.path(), &|| true), Swept::default());
        assert!(locks_dir.join("late.lock").exists());
    }
}
