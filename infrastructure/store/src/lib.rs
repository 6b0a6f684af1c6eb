//! awf persistence adapter: run state files, the SQLite run history, the audit trail and the
//! per-run transcripts, all under one data root.
//!
//! Layout (`<root>` = the data root, `$XDG_DATA_HOME/awf` by default):
//!
//! | path | written by | format |
//! |---|---|---|
//! | `<root>/states/<run_id>.json` | [`Recorder`], [`Store::save`] | pretty JSON [`RunSnapshot`], atomic, 0600 (dir 0700) |
//! | `<root>/history.db` | [`Recorder`] | SQLite (WAL), table `runs`, one row per run updated in place |
//! | `<root>/audit.jsonl` or `$AWF_AUDIT_LOG` | [`Recorder`] | JSONL, two lines per run, 0600, append |
//! | `<root>/transcripts/<run_id>.jsonl` | [`Recorder`] | JSONL, one line per event of the run, 0600, append |
//! | `<root>/outputs/<run_id>/<state>-….stdout` / `.stderr` | [`Recorder`], [`Store::save`] | a step's text over 64 KiB, kept once (written as it streams), 0600 (dir 0700); named by the state file's `output_files` and the transcript's `step.completed` |
//!
//! The writers are projections of the engine's event stream: [`Recorder`] implements
//! [`EventPublisher`](awf_domain::event::EventPublisher) and hands every event to one background writer
//! thread. [`Store`] implements the read ports [`StateStore`] and [`HistoryStore`].
//!
//! Depends on `awf-domain` and third-party crates only (rusqlite stays in this crate).
//!
//! Source: spec/workflow.md §3.11, §3.14, §3.15; http-ops.md §3; design/decisions.md ("Storage",
//! "History is one row per run, updated in place").
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod audit;
mod history;
mod inbox;
mod locks;
mod recorder;
mod state;
mod sweep;
mod tool_events;
mod transcript;
mod transcript_reader;

use std::collections::BTreeMap;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::OnceLock;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::store::HistoryFilter;
use awf_domain::ports::store::HistoryRecord;
use awf_domain::ports::store::HistoryStats;
use awf_domain::ports::store::HistoryStore;
use awf_domain::ports::store::RunSnapshot;
use awf_domain::ports::store::StateStore;

pub use locks::RunLockFiles;
pub use recorder::ErrorCallback;
pub use recorder::Recorder;
pub use sweep::SWEEP_MAX;
pub use sweep::Swept;
pub use sweep::sweep_leftovers;
pub use tool_events::ToolEventFile;
pub use tool_events::tool_events_to_run_events;

/// Where the audit trail goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditTarget {
    /// No audit trail (`AWF_AUDIT_LOG=off`).
    Off,
    /// Append JSONL lines to this file.
    Path(PathBuf),
}

/// The data root and the audit destination of a [`Store`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorePaths {
    /// Data root (`--storage`, `AWF_STORAGE_DIR`, else `$XDG_DATA_HOME/awf`).
    pub data_root: PathBuf,
    /// Audit trail destination.
    pub audit: AuditTarget,
    /// The `user` field of audit lines when given (`$USER`); `None`: the OS user name of
    /// the process, looked up (the password database) only where it is needed, off a run's
    /// way (see [`StorePaths::user_name`]).
    pub user: Option<String>,
}

impl StorePaths {
    /// Paths for `data_root` with the audit target and user taken from `env`:
    /// `AWF_AUDIT_LOG=off` (any case) disables the audit trail, any other non-empty value is
    /// the audit file, and by default it is `<data_root>/audit.jsonl`. `user` is `$USER` from
    /// `env` when set (else see [`StorePaths::user_name`]).
    ///
    /// Source: spec/workflow.md §3.14; http-ops.md §3.1.
    pub fn from_env(data_root: &Path, env: &BTreeMap<String, String>) -> Self {
        let audit = match env.get("AWF_AUDIT_LOG").map(|s| s.trim()) {
            Some(v) if v.eq_ignore_ascii_case("off") => AuditTarget::Off,
            Some(v) if !v.is_empty() => AuditTarget::Path(PathBuf::from(v)),
            _ => AuditTarget::Path(data_root.join("audit.jsonl")),
        };
        let user = env.get("USER").filter(|u| !u.is_empty()).cloned();
        Self {
            data_root: data_root.to_path_buf(),
            audit,
            user,
        }
    }

    /// Paths for `data_root` alone: no audit trail, no user (for reading and tidying a
    /// store, where nothing is audited).
    pub fn of_root(data_root: &Path) -> Self {
        Self {
            data_root: data_root.to_path_buf(),
            audit: AuditTarget::Off,
            user: None,
        }
    }

    /// The `user` field of audit lines: `$USER` as given, else the OS user name of the
    /// process, else `unknown`. Without `$USER` (cron, services, containers) the lookup
    /// reads the password database (nsswitch, nscd, `/etc/passwd`): the store's writer does
    /// it on its own thread before the first event (issue 9: a run's fixed cost).
    pub fn user_name(&self) -> String {
        self.user.clone().unwrap_or_else(audit::os_user_name)
    }

    /// Directory of the state files (`<root>/states`).
    pub fn states_dir(&self) -> PathBuf {
        self.data_root.join("states")
    }

    /// Directory of the transcripts (`<root>/transcripts`).
    pub fn transcripts_dir(&self) -> PathBuf {
        self.data_root.join("transcripts")
    }

    /// The history database (`<root>/history.db`).
    pub fn history_db(&self) -> PathBuf {
        self.data_root.join("history.db")
    }

    /// State file of one run (`<root>/states/<run_id>.json`).
    pub fn state_file(&self, run_id: &str) -> PathBuf {
        self.states_dir().join(format!("{run_id}.json"))
    }

    /// Journal of one live run (`<root>/states/<run_id>.journal`): the step results recorded
    /// since its state file was last written whole (see the recorder).
    pub fn journal_file(&self, run_id: &str) -> PathBuf {
        self.states_dir().join(format!("{run_id}.journal"))
    }

    /// Transcript of one run (`<root>/transcripts/<run_id>.jsonl`).
    pub fn transcript_file(&self, run_id: &str) -> PathBuf {
        self.transcripts_dir().join(format!("{run_id}.jsonl"))
    }
}

/// The embedded store: state files, SQLite history, audit trail and transcripts under one data
/// root. Several processes may open the same root at once (SQLite WAL with a busy timeout,
/// atomic state files, single-`write` audit lines, one transcript file per run).
#[derive(Debug)]
pub struct Store {
    paths: StorePaths,
    /// The history database, opened on first use: a run does not wait for it (its recorder
    /// writes through a connection of its own), only the commands that read the history do.
    /// A failed open is kept and given to every later read: opening retries for a second and
    /// a half, which a server must not pay (and hold this lock for) at every request.
    db: Mutex<Option<Result<rusqlite::Connection, AwfError>>>,
    /// The file `db` was opened on (or found broken): [`file_id`] then. A read that finds
    /// another file at the path (moved aside while `awf serve` ran, as the hint of a damaged
    /// one says; a new one put there) opens that one instead of reading the old file on.
    db_file: Mutex<Option<FileId>>,
    recorder: OnceLock<Recorder>,
    /// Opened by [`Store::open_read_only`]: nothing is created for a read; a history that
    /// does not exist reads as empty.
    read_only: bool,
    /// When the history was last reconciled with the state files ([`Store::reconcile`]).
    reconciled: Mutex<Option<std::time::Instant>>,
}

impl Store {
    /// Opens (and creates when missing) the store: `<root>/states/` (0700) and
    /// `<root>/transcripts/` (0700). `<root>/history.db` (WAL, busy timeout 10 s, table `runs`
    /// and its indexes) is opened by the first history read and by the recorder's writer
    /// thread, each of which first clears the states directory of the temp files of killed
    /// writers: neither is on the way to a run's first step (issue 9: start-up).
    ///
    /// A `history.db` that is not a regular file or not a database (checked by its header,
    /// without opening it) does not stop the store: the history is an index of the runs, and
    /// their state files, transcripts and audit lines are still written (the recorder
    /// reports the history it cannot write); every history read gives that error, with the
    /// hint to move the file aside.
    ///
    /// # Errors
    /// `SYSTEM.IO.WRITE_FAILED` when a directory cannot be created; a history read reports a
    /// database that cannot be opened or initialised the same way.
    pub fn open(paths: StorePaths) -> Result<Self, AwfError> {
        state::create_dir(&paths.states_dir(), 0o700)?;
        state::create_dir(&paths.transcripts_dir(), 0o700)?;
        let broken = history::precheck(&paths.history_db()).err();
        let paths_db = paths.history_db();
        Ok(Self {
            paths,
            db: Mutex::new(broken.map(Err)),
            db_file: Mutex::new(file_id(&paths_db)),
            recorder: OnceLock::new(),
            read_only: false,
            reconciled: Mutex::new(None),
        })
    }

    /// Opens the store for the commands that only read it (`awf history`, `awf status`,
    /// `awf resume --list`): no directory or database is created, so a data root that does
    /// not exist (or cannot be written) reads as no runs; a `history.db` that does not exist
    /// reads as an empty history while no run has a state file (else it is created and filled
    /// from them). Writes (a state file saved, a history row settled) still
    /// create what they need.
    pub fn open_read_only(paths: StorePaths) -> Self {
        let broken = if absent(&paths.history_db()) {
            None
        } else {
            history::precheck(&paths.history_db()).err()
        };
        let paths_db = paths.history_db();
        Self {
            paths,
            db: Mutex::new(broken.map(Err)),
            db_file: Mutex::new(file_id(&paths_db)),
            recorder: OnceLock::new(),
            read_only: true,
            reconciled: Mutex::new(None),
        }
    }

    /// Whether a read of the history finds none: a read-only store whose `history.db` does
    /// not exist (and was not opened), and no run has a state file (else the history is
    /// created, filled from them: see [`open_history`]).
    fn no_history(&self) -> bool {
        self.read_only
            && self
                .db
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .is_none()
            && absent(&self.paths.history_db())
            && std::fs::read_dir(self.paths.states_dir()).map_or(true, |mut d| {
                !d.any(|e| {
                    e.is_ok_and(|e| {
                        let n = e.file_name();
                        let n = n.to_string_lossy();
                        !n.starts_with('.') && n.ends_with(".json")
                    })
                })
            })
    }

    /// Brings the history up to the state files before a read of it lists or counts runs,
    /// at most once every [`RECONCILE_EVERY`]: a run killed a few milliseconds after its
    /// start has a state file but no row yet (breaker: `awf status` and `awf resume --list`
    /// knew such runs, `awf history` left them out); each state file without a row gets one
    /// from it, as when the history is rebuilt. Its cost is one listing of the states
    /// directory (names only) and one of the history's ids, plus reading the state files
    /// that have no row (at most [`RECONCILE_MAX`] at a time). The journals beside ended
    /// runs' state files and the lock files no process holds go too ([`sweep`]). Best
    /// effort: a row that cannot be written now (another writer holds the database) is
    /// written by a later read.
    fn reconcile(&self) {
        {
            let mut last = self
                .reconciled
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if last.is_some_and(|t| t.elapsed() < RECONCILE_EVERY) {
                return;
            }
            *last = Some(std::time::Instant::now());
        }
        let Ok(names) = state::listing(&self.paths.states_dir()) else {
            return;
        };
        sweep::remove_ended_journals(&self.paths, &names.journals);
        let _ = sweep::sweep_leftovers(&self.paths.data_root, &|| false);
        if names.states.is_empty() {
            return;
        }
        let Ok(known) = self.with_db(history::all_ids) else {
            return;
        };
        let missing: Vec<awf_domain::ports::store::RunSnapshot> = names
            .states
            .iter()
            .filter(|id| !known.contains(id.as_str()))
            .take(RECONCILE_MAX)
            .filter_map(|id| match state::read_stored(&self.paths, id) {
                Ok(Some((snap, _))) => Some(snap),
                _ => None,
            })
            .collect();
        if missing.is_empty() {
            return;
        }
        // Not waiting for another writer (the busy timeout is 10 s): a later read does it.
        let _ = self.with_db(|c| {
            c.busy_timeout(std::time::Duration::ZERO)?;
            let filled = c.execute_batch("BEGIN IMMEDIATE;").and_then(|()| {
                history::backfill(c, &missing);
                c.execute_batch("COMMIT;")
            });
            if filled.is_err() {
                let _ = c.execute_batch("ROLLBACK;");
            }
            c.busy_timeout(history::BUSY_TIMEOUT)
        });
    }

    /// The paths this store was opened with.
    pub fn paths(&self) -> &StorePaths {
        &self.paths
    }

    /// The event-stream writer of this store. Every call returns a handle to the same single
    /// background writer thread (started on the first call). Call [`Recorder::flush`] before
    /// the process exits.
    pub fn recorder(&self) -> Recorder {
        self.recorder
            .get_or_init(|| Recorder::start(self.paths.clone()))
            .clone()
    }

    fn with_db<T>(
        &self,
        f: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<T>,
    ) -> Result<T, AwfError> {
        let mut guard = self
            .db
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        {
            let now = file_id(&self.paths.history_db());
            let mut was = self
                .db_file
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if guard.is_some() && *was != now {
                // Another file at the path (or none): what was opened is not the history
                // any more. A missing one is created and filled from the state files.
                if let Some(Ok(old)) = guard.take() {
                    history::let_go(old, &self.paths.history_db());
                }
                if let Some(broken) = now.and(history::precheck(&self.paths.history_db()).err()) {
                    *guard = Some(Err(broken));
                }
            }
            *was = now;
        }
        let opened = match &mut *guard {
            Some(opened) => opened,
            empty => {
                let o = empty.insert(open_history(&self.paths, true));
                *self
                    .db_file
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) =
                    file_id(&self.paths.history_db());
                o
            }
        };
        let c = opened.as_ref().map_err(Clone::clone)?;
        f(c).map_err(|e| history::query_failed(&self.paths.history_db(), &e))
    }
}

impl StateStore for Store {
    fn load(&self, run_id: &str) -> Result<RunSnapshot, AwfError> {
        state::load(&self.paths, run_id)
    }

    fn list(&self) -> Result<Vec<RunSnapshot>, AwfError> {
        state::list(&self.paths.states_dir())
    }

    fn unreadable(&self) -> Vec<String> {
        state::unreadable(&self.paths.states_dir())
    }

    /// One listing of the states directory, no file read.
    fn ids(&self) -> Result<Vec<String>, AwfError> {
        Ok(state::listing(&self.paths.states_dir())?.states)
    }

    /// The journals it finds beside the state files of ended runs go, and the lock files
    /// no process holds ([`sweep`]).
    fn scan(
        &self,
        skip: &std::collections::BTreeSet<String>,
    ) -> Result<(Vec<RunSnapshot>, Vec<String>), AwfError> {
        let found = state::scan(&self.paths.states_dir(), skip)?;
        sweep::remove_ended_journals(&self.paths, &found.journals);
        let _ = sweep::sweep_leftovers(&self.paths.data_root, &|| false);
        Ok((found.runs, found.unreadable))
    }

    fn save(&self, snapshot: &RunSnapshot) -> Result<(), AwfError> {
        state::save(&self.paths, snapshot, true)
    }

    fn terminal_message(&self, run_id: &str) -> Option<String> {
        state::message(&self.paths, run_id)
    }
}

impl HistoryStore for Store {
    fn list(&self, filter: &HistoryFilter) -> Result<Vec<HistoryRecord>, AwfError> {
        if self.no_history() {
            return Ok(Vec::new());
        }
        self.reconcile();
        self.with_db(|c| history::list(c, filter))
    }

    fn stats(&self, filter: &HistoryFilter) -> Result<HistoryStats, AwfError> {
        if self.no_history() {
            return Ok(HistoryStats::default());
        }
        self.reconcile();
        self.with_db(|c| history::stats(c, filter))
    }

    fn ids(&self, filter: &HistoryFilter) -> Result<Vec<String>, AwfError> {
        if self.no_history() {
            return Ok(Vec::new());
        }
        self.with_db(|c| history::ids(c, filter))
    }

    fn get(&self, run_id: &str) -> Result<Option<HistoryRecord>, AwfError> {
        if self.no_history() {
            return Ok(None);
        }
        self.with_db(|c| history::get(c, run_id))
    }

    fn settle(&self, record: &HistoryRecord) -> Result<(), AwfError> {
        if self.no_history() {
            return Ok(());
        }
        // A read command does not wait for another writer (the busy timeout is 10 s): the row
        // is settled by a later read.
        self.with_db(|c| {
            c.busy_timeout(std::time::Duration::ZERO)?;
            let written = history::upsert_finished(c, record);
            c.busy_timeout(history::BUSY_TIMEOUT)?;
            written
        })
    }
}

/// Least time between two reconciliations of the history with the state files by one
/// [`Store`] (a long-lived `awf serve` reads the history often).
const RECONCILE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Most state files without a history row one reconciliation reads (the rest at later ones).
const RECONCILE_MAX: usize = 1000;

/// Removes the journal beside the state file of run `run_id` under `data_root` when the
/// run has ended and no process holds its lock (see [`sweep`]); whether it did. For
/// `awf status`, which reads that one run.
pub fn remove_ended_journal(data_root: &Path, run_id: &str) -> bool {
    let paths = StorePaths::of_root(data_root);
    sweep::remove_ended_journal(&paths, &RunLockFiles::new(data_root), run_id)
}

/// Whether nothing is at `path`, or cannot be: a missing file, or a parent that is not a
/// directory (a data root under a regular file).
fn absent(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_err_and(|e| {
        matches!(
            e.kind(),
            std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
        )
    })
}

/// `SYSTEM.IO.WRITE_FAILED` for `path`, with the hint saying how to record elsewhere.
fn write_failed(what: &str, path: &Path, e: impl std::fmt::Display) -> AwfError {
    AwfError::new(
        ErrorCode::SystemIoWriteFailed,
        format!("cannot write {what} {}: {e}", path.display()),
    )
    .with_detail("path", path.display().to_string())
    .with_hint(WRITE_HINT)
}

/// The hint of a write to the data root that failed.
pub const WRITE_HINT: &str = "make the data root writable, or choose another one with \
     `--storage DIR` or `AWF_STORAGE_DIR` (default `$XDG_DATA_HOME/awf`); `AWF_RECORD=off` \
     runs without recording";

/// Opens the history database of `paths` for its first user in this process (a history
/// read, a run's recorder), after removing the temp files that writers killed while writing
/// a state file left in the states directory. A database whose tables this open creates
/// (none, or an empty file, was there; of two openers only the one that created them) gets
/// a row for each run that has a state file already: the history is their index, rebuilt
/// once a damaged database was moved aside.
///
/// # Errors
/// `SYSTEM.IO.WRITE_FAILED` when the database cannot be opened or initialised.
pub(crate) fn open_history(
    paths: &StorePaths,
    legacy_temps: bool,
) -> Result<rusqlite::Connection, AwfError> {
    state::remove_stale_temps(&paths.states_dir(), legacy_temps);
    let db = paths.history_db();
    // Whether this open created the tables, not whether the file looked new before it: a
    // second opener (the recorder's writer thread starting late, under load) found the file
    // another connection had just created still empty, and filled it again from the state
    // files, with rows for snapshots saved since that no run recorded (CI). Filled inside
    // the transaction that creates the tables: other openers wait for the rows rather than
    // read a part of them.
    let states = paths.states_dir();
    let (c, _) = history::open_filling(&db, &|c| {
        if let Ok(snapshots) = state::list(&states) {
            history::backfill(c, &snapshots);
        }
    })?;
    Ok(c)
}

/// The identity of a file: (device, inode).
pub(crate) type FileId = (u64, u64);

/// The [`FileId`] of the file at `path`, `None` when there is none (or it cannot be read).
/// What the history's users compare to notice a database replaced under them.
pub(crate) fn file_id(path: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// `SYSTEM.IO.READ_FAILED` for `path`.
fn read_failed(what: &str, path: &Path, e: impl std::fmt::Display) -> AwfError {
    AwfError::new(
        ErrorCode::SystemIoReadFailed,
        format!("cannot read {what} {}: {e}", path.display()),
    )
    .with_detail("path", path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// Breaker: `GET /api/executions/<300 a's>` read `states/<300 a's>.json` and answered
    /// 500 "File name too long". An id longer than a file name can hold is no run: every
    /// read of it is "not found", none is an I/O error.
    #[test]
    fn a_run_id_too_long_for_a_file_name_is_no_run() {
        use awf_domain::ports::store::EventLogReader;
        use awf_domain::ports::store::StateStore;
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(StorePaths::from_env(d.path(), &env(&[]))).unwrap();
        for len in [state::MAX_RUN_ID_LEN + 1, 251, 300] {
            let id = "a".repeat(len);
            let e = store.load(&id).unwrap_err();
            assert_eq!(e.code(), ErrorCode::UserInputValidationFailed, "{len}");
            assert_eq!(e.message(), format!("workflow execution not found: {id}"));
            assert_eq!(store.terminal_message(&id), None);
            assert!(
                store
                    .read_log(&awf_domain::run::RunId(id.clone()), 1)
                    .unwrap()
                    .is_none()
            );
        }
        // The longest taken is a plain miss too.
        let id = "a".repeat(state::MAX_RUN_ID_LEN);
        assert_eq!(
            store.load(&id).unwrap_err().code(),
            ErrorCode::UserInputValidationFailed
        );
    }

    #[test]
    fn paths_from_env() {
        let root = Path::new("/data/awf");
        let p = StorePaths::from_env(root, &env(&[("USER", "alice")]));
        assert_eq!(
            p,
            StorePaths {
                data_root: PathBuf::from("/data/awf"),
                audit: AuditTarget::Path(PathBuf::from("/data/awf/audit.jsonl")),
                user: Some("alice".to_owned()),
            }
        );
        let off = StorePaths::from_env(root, &env(&[("AWF_AUDIT_LOG", "OFF"), ("USER", "bob")]));
        assert_eq!(off.audit, AuditTarget::Off);
        let custom = StorePaths::from_env(root, &env(&[("AWF_AUDIT_LOG", "/var/log/a.jsonl")]));
        assert_eq!(
            custom.audit,
            AuditTarget::Path(PathBuf::from("/var/log/a.jsonl"))
        );
        assert_eq!(custom.user, None);
        assert!(!custom.user_name().is_empty());
        assert_eq!(
            p.state_file("r1"),
            PathBuf::from("/data/awf/states/r1.json")
        );
        assert_eq!(
            p.transcript_file("r1"),
            PathBuf::from("/data/awf/transcripts/r1.jsonl")
        );
        assert_eq!(p.history_db(), PathBuf::from("/data/awf/history.db"));
    }
}
