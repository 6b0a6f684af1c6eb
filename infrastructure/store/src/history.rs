//! The run history: SQLite `<root>/history.db`, table `runs`, one row per run, inserted when
//! the run starts (`running`) and updated in place when it ends (also after `awf resume`).
//!
//! Source: spec/workflow.md §3.11 (history record; upsert instead of AWF's plain insert);
//! http-ops.md §3.3; design/decisions.md ("History is one row per run, updated in place").

use std::path::Path;
use std::thread;
use std::time::Duration;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::store::HistoryFilter;
use awf_domain::ports::store::HistoryRecord;
use awf_domain::ports::store::HistoryStats;
use awf_domain::ports::store::StoredStatus;
use rusqlite::Connection;
use rusqlite::OpenFlags;
use rusqlite::OptionalExtension;
use rusqlite::params;
use rusqlite::types::Value as Sql;

use crate::write_failed;

/// Schema version kept in `PRAGMA user_version`.
const SCHEMA_VERSION: i64 = 3;

/// Pages the WAL may hold before a commit checkpoints it (a run adds about 7).
const WAL_PAGES: u32 = 100;

/// Version 2: the run's spend on agents (budgets), as JSON text.
const MIGRATE_2: &str = "ALTER TABLE runs ADD COLUMN spend TEXT NULL;";

/// Version 3: only the start time is indexed. Every run writes its row twice (started,
/// finished), and each index cost each write, a few more pages of the write-ahead log, and
/// its part of reading the schema at every process's first statement (issue 9: a run's fixed
/// cost); the lists (`awf history`, `GET /api/history`) read newest first by start time,
/// which the index that is left serves, filtering by workflow or status on the way.
const MIGRATE_3: &str = "DROP INDEX IF EXISTS runs_workflow_id;
DROP INDEX IF EXISTS runs_workflow_name;
DROP INDEX IF EXISTS runs_status;
";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    workflow_id TEXT NOT NULL,
    workflow_name TEXT NOT NULL,
    status TEXT NOT NULL,
    exit_code INTEGER NULL,
    started_at_ms INTEGER NOT NULL,
    completed_at_ms INTEGER NULL,
    duration_ms INTEGER NULL,
    error_message TEXT NULL,
    parent_run_id TEXT NULL
);
CREATE INDEX IF NOT EXISTS runs_started_at ON runs(started_at_ms);
";

/// [`open_filling`] with nothing to fill.
#[cfg(test)]
pub(crate) fn open(path: &Path) -> Result<(Connection, bool), AwfError> {
    open_filling(path, &|_| {})
}

/// Opens the database (WAL, busy timeout 10 s, synchronous NORMAL) and creates the schema;
/// `true` when this connection created the tables. `fill` runs on the connection that
/// creates them, inside the transaction that creates them: a concurrent opener waits for it
/// (the write lock) and reads the tables only once they are filled (breaker: a reader
/// opening while another process refilled a new history from 1,500 state files counted 443
/// runs, then 1,086). Retried 5 times with a doubling backoff from 100 ms, since switching
/// to WAL and creating the schema can meet `SQLITE_BUSY` when several processes open a
/// fresh root together; an error no wait can mend (a file that is no database, a disk I/O
/// error, no permission) is returned at once.
///
/// # Errors
/// `SYSTEM.IO.WRITE_FAILED` when the database cannot be opened or initialised.
pub(crate) fn open_filling(
    path: &Path,
    fill: &dyn Fn(&Connection),
) -> Result<(Connection, bool), AwfError> {
    owner_only(path);
    let mut delay = Duration::from_millis(100);
    let mut attempt = 0;
    loop {
        attempt += 1;
        match try_open(path, fill) {
            Ok(opened) => {
                opened_here(path, true);
                return Ok(opened);
            }
            Err(e) if !transient(&e) => {
                return Err(AwfError::new(
                    ErrorCode::SystemIoWriteFailed,
                    format!("cannot open the history database {}: {e}", path.display()),
                )
                .with_detail("path", path.display().to_string())
                .with_hint(unusable_hint(path)));
            }
            Err(e) if attempt >= 5 => return Err(write_failed("the history database", path, e)),
            Err(_) => {
                thread::sleep(delay);
                delay *= 2;
            }
        }
    }
}

/// Whether opening may succeed if tried again: anything but a file SQLite cannot use (no
/// database, damaged, unreadable, read-only, a full disk or an I/O error), which no wait
/// mends. Kept broad: processes opening a fresh root together meet `SQLITE_BUSY`, and the
/// loser of a concurrent schema upgrade an error of the winner's change.
fn transient(e: &rusqlite::Error) -> bool {
    use rusqlite::ErrorCode as C;
    !matches!(
        e,
        rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error {
                code: C::NotADatabase
                    | C::DatabaseCorrupt
                    | C::CannotOpen
                    | C::PermissionDenied
                    | C::ReadOnly
                    | C::DiskFull
                    | C::SystemIoFailure,
                ..
            },
            _
        )
    )
}

/// The history holds error texts and workflow names: owner-only (0600), like the state files
/// and the audit trail. Done before SQLite opens it: a file it finds read-only gives a
/// read-only connection, and SQLite gives the WAL and shared-memory files it creates the
/// database file's mode. A missing database is created empty (SQLite initialises it). Best
/// effort: SQLite reports what stays wrong.
fn owner_only(path: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::fs::PermissionsExt;
    // Opened (and closed) only when it does not exist yet: see `opened_here`.
    if std::fs::symlink_metadata(path).is_err() {
        // Under an exclusive lock on the directory, so that of two openers only the first,
        // which finds no database, removes the files below; the second finds the database
        // the first created.
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        let guard = std::fs::File::open(dir.unwrap_or(Path::new(".")))
            .ok()
            .and_then(|f| nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).ok());
        if std::fs::symlink_metadata(path).is_err() {
            // The log and shared-memory index of a database that is gone (moved aside or
            // removed while a process had it open, `awf serve`): SQLite reads them as the new
            // database's, and failed with "disk I/O error" (breaker), or would replay another
            // database's pages into it. That process keeps its open copies.
            for s in ["-wal", "-shm"] {
                let _ = std::fs::remove_file(sidecar(path, s));
            }
            let _ = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .mode(0o600)
                .open(path);
        }
        drop(guard);
    }
    for p in [
        path.to_path_buf(),
        sidecar(path, "-wal"),
        sidecar(path, "-shm"),
    ] {
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
            let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600));
        }
    }
}

/// `path` with `suffix` appended (`history.db-wal`).
fn sidecar(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    name.into()
}

/// The hint for a history database that cannot be opened: [`move_aside`] for a file SQLite
/// cannot use, but when the directory holding it cannot be written (a read-only mount, no
/// permission), there may be no file to move (breaker: "move it aside" for a data root
/// mounted read-only without a history.db).
fn unusable_hint(path: &Path) -> String {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let writable = nix::unistd::access(
        dir.unwrap_or(Path::new(".")),
        nix::unistd::AccessFlags::W_OK,
    );
    match writable {
        Err(e) if std::fs::symlink_metadata(path).map_or(true, |m| m.len() == 0) => format!(
            "its directory cannot be written ({}): make the data root writable, or point \
             AWF_STORAGE_DIR (--storage) at one that is; `awf status <run-id>` reads a run's \
             state file without the history",
            e.desc()
        ),
        _ => move_aside(path),
    }
}

/// `SYSTEM.IO.READ_FAILED` for a query of the history database at `path` that failed with
/// `e`; a database SQLite finds damaged (`database disk image is malformed`) or not a
/// database gets the hint to move it aside, as one that cannot be opened does (chaos trial:
/// a malformed one had no hint).
pub(crate) fn query_failed(path: &Path, e: &rusqlite::Error) -> AwfError {
    use rusqlite::ErrorCode as C;
    let err = AwfError::new(
        ErrorCode::SystemIoReadFailed,
        format!("cannot read the run history {}: {e}", path.display()),
    );
    match e.sqlite_error_code() {
        Some(C::DatabaseCorrupt | C::NotADatabase) => err.with_hint(move_aside(path)),
        _ => err,
    }
}

/// The hint for a history database SQLite cannot use (not a regular file, not a database,
/// damaged, unreadable).
fn move_aside(path: &Path) -> String {
    format!(
        "move it aside: awf creates a new {}, and the runs' state files are kept",
        path.display()
    )
}

/// Whether SQLite has opened the database at `path` in this process (`mark`: record that it
/// has). Closing any descriptor of a file drops every POSIX lock this process holds on it,
/// SQLite's included (SQLite works around it only for the descriptors it opens itself): a
/// second store of `awf serve` that opened `history.db` for a check released the first
/// connection's locks, and another client, finding the database unused, removed the WAL
/// that connection still wrote to (a breaker lost runs that way). Once SQLite has it open,
/// awf opens no descriptor of its own on it.
fn opened_here(path: &Path, mark: bool) -> bool {
    static OPENED: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());
    let mut opened = OPENED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let known = opened.iter().any(|p| p == path);
    if mark && !known {
        opened.push(path.to_path_buf());
    }
    known
}

/// Whether the history database at `path` can be what SQLite opens, checked without opening
/// it (no WAL read back): missing, empty, or a regular file that starts with SQLite's
/// header. Lets a store refuse a database that is a directory or not a database at once,
/// as opening it did before the history was opened on first use.
///
/// # Errors
/// `SYSTEM.IO.WRITE_FAILED` naming the file, with a hint to move it aside.
pub(crate) fn precheck(path: &Path) -> Result<(), AwfError> {
    use std::io::Read;
    const HEADER: &[u8; 16] = b"SQLite format 3\0";
    // Said as `open` says it: a read (`awf history`) meets it as much as a run.
    let unusable = |why: &dyn std::fmt::Display| {
        AwfError::new(
            ErrorCode::SystemIoWriteFailed,
            format!("cannot open the history database {}: {why}", path.display()),
        )
        .with_detail("path", path.display().to_string())
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(unusable(&e)),
    };
    let refuse = |why: &str| Err(unusable(&why).with_hint(move_aside(path)));
    if !meta.is_file() {
        return refuse("it is not a regular file");
    }
    // SQLite opened it in this process already (it is a database); reading it through a
    // descriptor of our own would drop SQLite's locks when that descriptor closes.
    if meta.len() == 0 || opened_here(path, false) {
        return Ok(());
    }
    let mut head = [0u8; 16];
    let read = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head));
    match read {
        Ok(()) if &head == HEADER => Ok(()),
        Ok(()) => refuse("file is not a database"),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => refuse("file is not a database"),
        Err(e) => Err(unusable(&e)),
    }
}

/// How long a statement waits for another process's write to end before it fails busy.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens (creating when missing) the database at `path`; `true` when this connection created
/// its tables (decided under the write lock, so of two openers of a new file only one says
/// so).
fn try_open(path: &Path, fill: &dyn Fn(&Connection)) -> rusqlite::Result<(Connection, bool)> {
    let c = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    c.busy_timeout(BUSY_TIMEOUT)?;
    let mode: String = c.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(rusqlite::Error::InvalidQuery);
    }
    c.execute_batch("PRAGMA synchronous=NORMAL;")?;
    // The WAL is not checkpointed (and removed) each time a connection closes: that cost two
    // syncs at the end of every run, and two more to create the WAL anew at the next one.
    // It is checkpointed once it passes WAL_PAGES instead of SQLite's 1000: the first
    // connection of every process reads the whole WAL back (4 MB at 1000 pages, about a
    // millisecond), while a checkpoint writes only the few pages the runs touched.
    c.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )?;
    c.execute_batch(&format!("PRAGMA wal_autocheckpoint={WAL_PAGES};"))?;
    let version: i64 = c.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let mut created = false;
    if version < SCHEMA_VERSION {
        // A version-1 table gains the column; a fresh one is created and gains it too. The
        // version is read again under the write lock: another opener may have done it.
        let migrated = c.execute_batch("BEGIN IMMEDIATE;").and_then(|()| {
            let now: i64 = c.query_row("PRAGMA user_version", [], |r| r.get(0))?;
            if now < SCHEMA_VERSION {
                if now < 2 {
                    c.execute_batch(&format!("{SCHEMA}{MIGRATE_2}"))?;
                }
                c.execute_batch(&format!("{MIGRATE_3}PRAGMA user_version={SCHEMA_VERSION};"))?;
                created = now == 0;
                if created {
                    fill(&c);
                }
            }
            c.execute_batch("COMMIT;")
        });
        if let Err(e) = migrated {
            let _ = c.execute_batch("ROLLBACK;");
            return Err(e);
        }
    }
    Ok((c, created))
}

/// Closes a connection to a database that is no longer at `path` (moved aside while a
/// long-lived process held it). While nothing is at the path yet, its write-ahead log is
/// first checkpointed into the moved file and emptied, so that the log left under the old
/// name (`history.db-wal`, which the moved file does not take along) holds nothing a new
/// database at the path would read as its own. Once a new database is there, that log is the
/// new one's (SQLite opens the log by name): it is left alone, or the new database's rows
/// would be checkpointed into the moved file (two connections of one server: the second to
/// notice moved the first one's new rows away).
pub(crate) fn let_go(c: Connection, path: &Path) {
    if crate::file_id(path).is_none() {
        let _ = c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);");
    }
    drop(c);
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Inserts the row of a run that starts (`running`), or resets the row of a resumed run to
/// `running` (its `started_at_ms` is kept).
pub(crate) fn upsert_started(
    c: &Connection,
    id: &str,
    workflow_id: &str,
    workflow_name: &str,
    started_at_ms: u64,
    parent_run_id: Option<&str>,
) -> rusqlite::Result<()> {
    c.execute(
        "INSERT INTO runs (id, workflow_id, workflow_name, status, exit_code, started_at_ms,
                           completed_at_ms, duration_ms, error_message, parent_run_id)
         VALUES (?1, ?2, ?3, 'running', NULL, ?4, NULL, NULL, NULL, ?5)
         ON CONFLICT(id) DO UPDATE SET
             workflow_id = excluded.workflow_id,
             workflow_name = excluded.workflow_name,
             status = 'running',
             exit_code = NULL,
             completed_at_ms = NULL,
             duration_ms = NULL,
             error_message = NULL,
             parent_run_id = excluded.parent_run_id",
        params![
            id,
            workflow_id,
            workflow_name,
            to_i64(started_at_ms),
            parent_run_id
        ],
    )?;
    Ok(())
}

/// Milliseconds since the epoch of `t` (0 before it).
fn epoch_ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Fills a history database created afresh (after a damaged one was moved aside, or
/// removed) with a row for each run whose state file is in `snapshots`: the history is an
/// index of the state files, so the runs recorded meanwhile are listed again. A row that is
/// there already is left alone (another process filled it, or a run started since). Best
/// effort: a row that cannot be written is skipped.
pub(crate) fn backfill(c: &Connection, snapshots: &[awf_domain::ports::store::RunSnapshot]) {
    for s in snapshots {
        let started = epoch_ms(s.started_at);
        let completed = s.completed_at.map(epoch_ms);
        let _ = c.execute(
            "INSERT INTO runs (id, workflow_id, workflow_name, status, exit_code, started_at_ms,
                               completed_at_ms, duration_ms, error_message, parent_run_id, spend)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
             ON CONFLICT(id) DO NOTHING",
            params![
                s.run_id,
                s.workflow,
                s.workflow_name,
                s.status.as_str(),
                s.exit_code,
                to_i64(started),
                completed.map(to_i64),
                completed.map(|c| to_i64(c.saturating_sub(started))),
                s.error.as_ref().map(|e| e.message.clone()),
                s.parent_run_id,
                s.spend.and_then(|sp| serde_json::to_string(&sp).ok()),
            ],
        );
    }
}

/// Writes the outcome of a finished run (inserting the row if its start was never recorded).
pub(crate) fn upsert_finished(c: &Connection, r: &HistoryRecord) -> rusqlite::Result<()> {
    c.execute(
        "INSERT INTO runs (id, workflow_id, workflow_name, status, exit_code, started_at_ms,
                           completed_at_ms, duration_ms, error_message, parent_run_id, spend)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
         ON CONFLICT(id) DO UPDATE SET
             status = excluded.status,
             exit_code = excluded.exit_code,
             completed_at_ms = excluded.completed_at_ms,
             duration_ms = excluded.duration_ms,
             error_message = excluded.error_message,
             spend = excluded.spend",
        params![
            r.id,
            r.workflow_id,
            r.workflow_name,
            r.status.as_str(),
            r.exit_code,
            to_i64(r.started_at_ms),
            r.completed_at_ms.map(to_i64),
            r.duration_ms.map(to_i64),
            r.error_message,
            r.parent_run_id,
            r.spend.and_then(|s| serde_json::to_string(&s).ok()),
        ],
    )?;
    Ok(())
}

fn parse_status(s: &str) -> StoredStatus {
    match s {
        "success" | "completed" => StoredStatus::Success,
        "failure" | "failed" => StoredStatus::Failure,
        "cancelled" => StoredStatus::Cancelled,
        "waiting" => StoredStatus::Waiting,
        "queued" => StoredStatus::Queued,
        _ => StoredStatus::Running,
    }
}

fn from_i64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<HistoryRecord> {
    let status: String = r.get(3)?;
    let exit: Option<i64> = r.get(4)?;
    Ok(HistoryRecord {
        id: r.get(0)?,
        workflow_id: r.get(1)?,
        workflow_name: r.get(2)?,
        status: parse_status(&status),
        exit_code: exit.map(|e| u8::try_from(e).unwrap_or(u8::MAX)),
        started_at_ms: from_i64(r.get(5)?),
        completed_at_ms: r.get::<_, Option<i64>>(6)?.map(from_i64),
        duration_ms: r.get::<_, Option<i64>>(7)?.map(from_i64),
        error_message: r.get(8)?,
        parent_run_id: r.get(9)?,
        spend: r
            .get::<_, Option<String>>(10)?
            .and_then(|t| serde_json::from_str(&t).ok()),
    })
}

const COLUMNS: &str = "id, workflow_id, workflow_name, status, exit_code, started_at_ms, \
                       completed_at_ms, duration_ms, error_message, parent_run_id, spend";

/// `WHERE …` clause and its parameters for `filter` (limit excluded).
fn where_clause(filter: &HistoryFilter) -> (String, Vec<Sql>) {
    let mut conds = Vec::new();
    let mut args = Vec::new();
    if let Some(w) = &filter.workflow {
        args.push(Sql::Text(w.clone()));
        conds.push(format!(
            "(workflow_id = ?{0} OR workflow_name = ?{0})",
            args.len()
        ));
    }
    if let Some(s) = filter.status {
        args.push(Sql::Text(s.as_str().to_owned()));
        conds.push(format!("status = ?{}", args.len()));
    }
    if let Some(since) = filter.since_ms {
        args.push(Sql::Integer(to_i64(since)));
        conds.push(format!("started_at_ms >= ?{}", args.len()));
    }
    if conds.is_empty() {
        (String::new(), args)
    } else {
        (format!(" WHERE {}", conds.join(" AND ")), args)
    }
}

/// Rows matching `filter`, newest start first.
pub(crate) fn list(c: &Connection, filter: &HistoryFilter) -> rusqlite::Result<Vec<HistoryRecord>> {
    let (clause, mut args) = where_clause(filter);
    let mut sql =
        format!("SELECT {COLUMNS} FROM runs{clause} ORDER BY started_at_ms DESC, rowid DESC");
    if let Some(limit) = filter.limit {
        args.push(Sql::Integer(i64::try_from(limit).unwrap_or(i64::MAX)));
        sql.push_str(&format!(" LIMIT ?{}", args.len()));
    }
    let mut stmt = c.prepare(&sql)?;
    let rows = stmt.query_map(rusqlite::params_from_iter(args), row)?;
    rows.collect()
}

/// The ids of the rows matching `filter` (its limit kept), newest start first.
pub(crate) fn ids(c: &Connection, filter: &HistoryFilter) -> rusqlite::Result<Vec<String>> {
    let (clause, mut args) = where_clause(filter);
    let mut sql = format!("SELECT id FROM runs{clause} ORDER BY started_at_ms DESC, rowid DESC");
    if let Some(limit) = filter.limit {
        args.push(Sql::Integer(i64::try_from(limit).unwrap_or(i64::MAX)));
        sql.push_str(&format!(" LIMIT ?{}", args.len()));
    }
    let mut stmt = c.prepare(&sql)?;
    let rows = stmt.query_map(rusqlite::params_from_iter(args), |r| r.get(0))?;
    rows.collect()
}

/// Every row's id, in no order (one pass over the primary key).
pub(crate) fn all_ids(c: &Connection) -> rusqlite::Result<std::collections::HashSet<String>> {
    let mut stmt = c.prepare("SELECT id FROM runs")?;
    let rows = stmt.query_map([], |r| r.get(0))?;
    rows.collect()
}

/// One row by id.
pub(crate) fn get(c: &Connection, id: &str) -> rusqlite::Result<Option<HistoryRecord>> {
    c.query_row(
        &format!("SELECT {COLUMNS} FROM runs WHERE id = ?1"),
        [id],
        row,
    )
    .optional()
}

/// Totals over the rows matching `filter` (limit ignored) that it counts
/// ([`HistoryFilter::counts`]). `avg_duration_ms` is the mean duration of finished runs,
/// rounded to the nearest millisecond.
pub(crate) fn stats(c: &Connection, filter: &HistoryFilter) -> rusqlite::Result<HistoryStats> {
    let (mut clause, args) = where_clause(filter);
    // The runs `HistoryFilter::counts` counts.
    if !filter.counts_sub_runs() {
        clause.push_str(if clause.is_empty() {
            " WHERE parent_run_id IS NULL"
        } else {
            " AND parent_run_id IS NULL"
        });
    }
    let sql = format!(
        "SELECT COUNT(*),
                COALESCE(SUM(status = 'success'), 0),
                COALESCE(SUM(status = 'failure'), 0),
                COALESCE(SUM(status = 'cancelled'), 0),
                COALESCE(SUM(status = 'running'), 0),
                COALESCE(SUM(CASE WHEN status != 'running' AND duration_ms IS NOT NULL THEN duration_ms END), 0),
                COALESCE(SUM(status != 'running' AND duration_ms IS NOT NULL), 0),
                COALESCE(SUM(status = 'waiting'), 0),
                COALESCE(SUM(status = 'queued'), 0)
         FROM runs{clause}"
    );
    c.query_row(&sql, rusqlite::params_from_iter(args), |r| {
        let n = |i: usize| r.get::<_, i64>(i).map(from_i64);
        let (sum, finished) = (n(5)?, n(6)?);
        Ok(HistoryStats {
            total_executions: n(0)?,
            success_count: n(1)?,
            failed_count: n(2)?,
            cancelled_count: n(3)?,
            running_count: n(4)?,
            waiting_count: n(7)?,
            queued_count: n(8)?,
            process_gone_count: 0,
            avg_duration_ms: (finished > 0).then(|| (sum + finished / 2) / finished),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// Breaker: a data root that cannot be written and holds no history.db was told to move
    /// the database aside; the hint names the directory instead. A file SQLite cannot use
    /// in a writable directory is still to be moved aside.
    #[test]
    fn a_damaged_database_met_by_a_query_gets_the_hint_to_move_it_aside() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.db");
        {
            let c = rusqlite::Connection::open(&path).unwrap();
            c.execute_batch(
                "CREATE TABLE t(x TEXT); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000) INSERT INTO t SELECT printf('%0200d', i) FROM n;",
            )
            .unwrap();
        }
        // Damage every page after the schema's: the table's pages are garbage.
        let mut bytes = std::fs::read(&path).unwrap();
        for b in bytes.iter_mut().skip(4096 * 2) {
            *b = 0x5a;
        }
        std::fs::write(&path, bytes).unwrap();
        let c = rusqlite::Connection::open(&path).unwrap();
        let e = c
            .query_row("SELECT count(*) FROM t WHERE x LIKE '%9%'", [], |r| {
                r.get::<_, i64>(0)
            })
            .unwrap_err();
        let err = query_failed(&path, &e);
        assert_eq!(err.code(), ErrorCode::SystemIoReadFailed);
        assert!(err.message().contains("malformed"), "{}", err.message());
        assert_eq!(err.hints(), [move_aside(&path)]);
        // Another failure keeps no hint.
        let other = query_failed(&path, &rusqlite::Error::InvalidQuery);
        assert!(other.hints().is_empty());
    }

    #[test]
    fn the_hint_names_a_directory_that_cannot_be_written() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("no-such-dir").join("history.db");
        let hint = unusable_hint(&gone);
        assert!(
            hint.starts_with("its directory cannot be written"),
            "{hint}"
        );
        assert!(!hint.contains("move it aside"), "{hint}");
        let here = dir.path().join("history.db");
        std::fs::write(&here, "not a database").unwrap();
        assert_eq!(unusable_hint(&here), move_aside(&here));
    }

    /// Only the opener that creates the tables says so: a missing or empty file is created
    /// once; the next opener, while the first still holds its connection (its tables in the
    /// write-ahead log), is not told to fill the history again (CI: a late writer thread
    /// added rows for snapshots saved in between).
    #[test]
    fn only_the_opener_that_creates_the_tables_says_so() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("history.db");
        let (first, created) = try_open(&path, &|_| {}).unwrap();
        assert!(created);
        let (second, again) = try_open(&path, &|_| {}).unwrap();
        assert!(!again);
        drop((first, second));
        let empty = d.path().join("empty.db");
        std::fs::write(&empty, b"").unwrap();
        assert!(try_open(&empty, &|_| {}).unwrap().1);
    }

    /// Another opener, coming while the creator fills the new tables, reads them only once
    /// they are whole: the fill is part of the transaction that creates them.
    #[test]
    fn an_opener_meanwhile_waits_for_the_whole_fill() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("history.db");
        let (filling_tx, filling_rx) = std::sync::mpsc::channel::<()>();
        let filling_tx = std::sync::Mutex::new(filling_tx);
        let reader = {
            let path = path.clone();
            thread::spawn(move || {
                filling_rx.recv().unwrap();
                let (c, created) = open(&path).unwrap();
                let n: i64 = c
                    .query_row("SELECT COUNT(*) FROM runs", [], |r| r.get(0))
                    .unwrap();
                (n, created)
            })
        };
        let (_c, created) = open_filling(&path, &|c| {
            filling_tx.lock().unwrap().send(()).unwrap();
            for i in 0..50 {
                upsert_started(c, &format!("run-{i}"), "wf", "wf", 1, None).unwrap();
                // The reader has time to look at a part of them, were it able to.
                thread::sleep(Duration::from_millis(4));
            }
        })
        .unwrap();
        assert!(created);
        assert_eq!(reader.join().unwrap(), (50, false));
    }

    fn rec(
        id: &str,
        wf: &str,
        name: &str,
        status: StoredStatus,
        started: u64,
        dur: Option<u64>,
    ) -> HistoryRecord {
        HistoryRecord {
            id: id.to_owned(),
            workflow_id: wf.to_owned(),
            workflow_name: name.to_owned(),
            status,
            exit_code: dur.map(|_| {
                if status == StoredStatus::Success {
                    0
                } else {
                    3
                }
            }),
            started_at_ms: started,
            completed_at_ms: dur.map(|d| started + d),
            duration_ms: dur,
            error_message: (status == StoredStatus::Failure).then(|| "boom".to_owned()),
            parent_run_id: None,
            spend: None,
        }
    }

    /// Runs recorded one after the other, each by a process of its own (a connection that
    /// closes without checkpointing): the WAL the next process reads back stays within
    /// WAL_PAGES and one run's pages, instead of SQLite's 1000 pages (4 MB).
    #[test]
    fn the_wal_stays_small_across_many_runs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.db");
        let mut biggest = 0;
        for i in 0..120 {
            let c = open(&path).unwrap().0;
            let id = format!("run-{i}");
            upsert_started(&c, &id, "w.yaml", "w", 1_000 + i, None).unwrap();
            let r = rec(
                &id,
                "w.yaml",
                "w",
                StoredStatus::Success,
                1_000 + i,
                Some(5),
            );
            upsert_finished(&c, &r).unwrap();
            drop(c);
            let wal = std::fs::metadata(dir.path().join("history.db-wal")).map_or(0, |m| m.len());
            biggest = biggest.max(wal);
        }
        let frame = 4096 + 24;
        assert!(
            biggest <= 32 + (u64::from(WAL_PAGES) + 20) * frame,
            "the WAL grew to {biggest} bytes"
        );
        assert!(biggest > 0, "the WAL is kept between processes");
        let c = open(&path).unwrap().0;
        assert_eq!(list(&c, &HistoryFilter::default()).unwrap().len(), 120);
    }

    fn seeded() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let c = open(&dir.path().join("history.db")).unwrap().0;
        upsert_finished(
            &c,
            &rec(
                "a",
                "deploy.yaml",
                "deploy",
                StoredStatus::Success,
                1_000,
                Some(100),
            ),
        )
        .unwrap();
        upsert_finished(
            &c,
            &rec(
                "b",
                "deploy",
                "deploy",
                StoredStatus::Failure,
                2_000,
                Some(201),
            ),
        )
        .unwrap();
        upsert_finished(
            &c,
            &rec(
                "c",
                "build",
                "build-it",
                StoredStatus::Cancelled,
                3_000,
                Some(50),
            ),
        )
        .unwrap();
        upsert_started(&c, "d", "build", "build-it", 4_000, None).unwrap();
        upsert_finished(
            &c,
            &rec(
                "e",
                "deploy",
                "deploy",
                StoredStatus::Success,
                5_000,
                Some(10),
            ),
        )
        .unwrap();
        (dir, c)
    }

    fn ids(rows: &[HistoryRecord]) -> Vec<&str> {
        rows.iter().map(|r| r.id.as_str()).collect()
    }

    /// Closing a connection leaves the WAL in place (no checkpoint, no delete): the next run
    /// neither syncs a checkpoint at its end nor creates (and syncs) a new WAL. Another
    /// connection reads what the closed one wrote.
    #[test]
    fn closing_keeps_the_wal_and_the_rows() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("history.db");
        let c = open(&db).unwrap().0;
        let r = rec("a", "w.yaml", "w", StoredStatus::Success, 1_000, Some(5));
        upsert_finished(&c, &r).unwrap();
        drop(c);
        assert!(dir.path().join("history.db-wal").exists());
        let again = open(&db).unwrap().0;
        assert_eq!(get(&again, "a").unwrap(), Some(r));
    }

    #[test]
    fn list_filters_and_orders_newest_first() {
        let (_d, c) = seeded();
        assert_eq!(
            ids(&list(&c, &HistoryFilter::default()).unwrap()),
            ["e", "d", "c", "b", "a"]
        );
        let by_name = HistoryFilter {
            workflow: Some("deploy".into()),
            ..Default::default()
        };
        assert_eq!(ids(&list(&c, &by_name).unwrap()), ["e", "b", "a"]);
        let by_id = HistoryFilter {
            workflow: Some("deploy.yaml".into()),
            ..Default::default()
        };
        assert_eq!(ids(&list(&c, &by_id).unwrap()), ["a"]);
        let by_name2 = HistoryFilter {
            workflow: Some("build-it".into()),
            ..Default::default()
        };
        assert_eq!(ids(&list(&c, &by_name2).unwrap()), ["d", "c"]);
        let ok = HistoryFilter {
            status: Some(StoredStatus::Success),
            ..Default::default()
        };
        assert_eq!(ids(&list(&c, &ok).unwrap()), ["e", "a"]);
        let since = HistoryFilter {
            since_ms: Some(3_000),
            ..Default::default()
        };
        assert_eq!(ids(&list(&c, &since).unwrap()), ["e", "d", "c"]);
        let limited = HistoryFilter {
            limit: Some(2),
            ..Default::default()
        };
        assert_eq!(ids(&list(&c, &limited).unwrap()), ["e", "d"]);
        let all = HistoryFilter {
            workflow: Some("deploy".into()),
            status: Some(StoredStatus::Success),
            since_ms: Some(1_500),
            limit: Some(10),
        };
        assert_eq!(ids(&list(&c, &all).unwrap()), ["e"]);
    }

    #[test]
    fn rows_round_trip_with_nulls() {
        let (_d, c) = seeded();
        assert_eq!(
            get(&c, "d").unwrap(),
            Some(HistoryRecord {
                id: "d".into(),
                workflow_id: "build".into(),
                workflow_name: "build-it".into(),
                status: StoredStatus::Running,
                exit_code: None,
                started_at_ms: 4_000,
                completed_at_ms: None,
                duration_ms: None,
                error_message: None,
                parent_run_id: None,
                spend: None,
            })
        );
        assert_eq!(
            get(&c, "b").unwrap(),
            Some(rec(
                "b",
                "deploy",
                "deploy",
                StoredStatus::Failure,
                2_000,
                Some(201)
            ))
        );
        assert_eq!(get(&c, "zzz").unwrap(), None);
    }

    #[test]
    fn stats_count_statuses_and_average_finished_durations() {
        let (_d, c) = seeded();
        assert_eq!(
            stats(&c, &HistoryFilter::default()).unwrap(),
            HistoryStats {
                total_executions: 5,
                success_count: 2,
                failed_count: 1,
                cancelled_count: 1,
                running_count: 1,
                waiting_count: 0,
                queued_count: 0,
                process_gone_count: 0,
                // (100 + 201 + 50 + 10) / 4 = 90.25
                avg_duration_ms: Some(90),
            }
        );
        let deploy = HistoryFilter {
            workflow: Some("deploy".into()),
            limit: Some(1),
            ..Default::default()
        };
        assert_eq!(
            stats(&c, &deploy).unwrap(),
            HistoryStats {
                total_executions: 3,
                success_count: 2,
                failed_count: 1,
                cancelled_count: 0,
                running_count: 0,
                waiting_count: 0,
                queued_count: 0,
                process_gone_count: 0,
                // (100 + 201 + 10) / 3 = 103.67
                avg_duration_ms: Some(104),
            }
        );
        let none = HistoryFilter {
            workflow: Some("nope".into()),
            ..Default::default()
        };
        assert_eq!(stats(&c, &none).unwrap(), HistoryStats::default());
    }

    /// A sub-workflow's run is part of its parent's: the totals leave it out, unless the
    /// filter names its workflow (trial: one run calling a child counted as 2).
    #[test]
    fn stats_leave_out_sub_workflow_runs_unless_their_workflow_is_named() {
        let (_d, c) = seeded();
        let mut child = rec("k", "kid", "kid", StoredStatus::Failure, 6_000, Some(7));
        child.parent_run_id = Some("e".to_owned());
        upsert_finished(&c, &child).unwrap();
        let all = stats(&c, &HistoryFilter::default()).unwrap();
        assert_eq!((all.total_executions, all.failed_count), (5, 1));
        let kid = HistoryFilter {
            workflow: Some("kid".into()),
            ..Default::default()
        };
        let kid = stats(&c, &kid).unwrap();
        assert_eq!((kid.total_executions, kid.failed_count), (1, 1));
        assert_eq!(list(&c, &HistoryFilter::default()).unwrap().len(), 6);
    }

    #[test]
    fn upsert_resets_and_completes_in_place() {
        let (_d, c) = seeded();
        // `b` failed; resuming it resets the row to running and keeps its start time.
        upsert_started(&c, "b", "deploy", "deploy", 9_000, None).unwrap();
        let row = get(&c, "b").unwrap().unwrap();
        assert_eq!(
            (
                row.status,
                row.started_at_ms,
                row.exit_code,
                row.error_message
            ),
            (StoredStatus::Running, 2_000, None, None)
        );
        upsert_finished(
            &c,
            &rec(
                "b",
                "deploy",
                "deploy",
                StoredStatus::Success,
                9_000,
                Some(7),
            ),
        )
        .unwrap();
        let row = get(&c, "b").unwrap().unwrap();
        assert_eq!(
            (
                row.status,
                row.started_at_ms,
                row.completed_at_ms,
                row.duration_ms,
                row.exit_code
            ),
            (StoredStatus::Success, 2_000, Some(9_007), Some(7), Some(0))
        );
        let n: i64 = c
            .query_row("SELECT COUNT(*) FROM runs WHERE id = 'b'", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 1);
    }

    #[test]
    fn reopening_keeps_rows_and_wal_mode() {
        let (d, c) = seeded();
        drop(c);
        let c = open(&d.path().join("history.db")).unwrap().0;
        let mode: String = c
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let v: i64 = c
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
        assert_eq!(list(&c, &HistoryFilter::default()).unwrap().len(), 5);
    }

    /// A version-2 database (four indexes, the spend column) keeps its rows and loses the
    /// indexes the lists do not need; a new one is made with the start time's index alone.
    #[test]
    fn a_version_2_database_keeps_its_rows_and_only_the_start_time_index() {
        let indexes = |c: &Connection| -> Vec<String> {
            let mut q = c
                .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL ORDER BY name")
                .unwrap();
            q.query_map([], |r| r.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("history.db");
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(&format!(
                "{SCHEMA}{MIGRATE_2}
                 CREATE INDEX runs_workflow_id ON runs(workflow_id);
                 CREATE INDEX runs_workflow_name ON runs(workflow_name);
                 CREATE INDEX runs_status ON runs(status);
                 PRAGMA user_version=2;"
            ))
            .unwrap();
            assert_eq!(indexes(&c).len(), 4);
            upsert_started(&c, "old", "wf", "wf", 1_000, None).unwrap();
        }
        let c = open(&path).unwrap().0;
        assert_eq!(indexes(&c), ["runs_started_at"]);
        let v: i64 = c
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, 3);
        assert_eq!(get(&c, "old").unwrap().unwrap().workflow_name, "wf");
        let fresh = d.path().join("new.db");
        assert_eq!(indexes(&open(&fresh).unwrap().0), ["runs_started_at"]);
    }

    #[test]
    fn a_version_1_database_gains_the_spend_column_and_keeps_its_rows() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("history.db");
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(&format!("{SCHEMA}PRAGMA user_version=1;"))
                .unwrap();
            upsert_started(&c, "old", "wf", "wf", 1_000, None).unwrap();
        }
        let c = open(&path).unwrap().0;
        let old = get(&c, "old").unwrap().unwrap();
        assert_eq!(old.spend, None);
        let spend = awf_domain::run::Spend {
            tokens_input: 3,
            tokens_output: 4,
            tokens: 7,
            usd: Some(0.5),
        };
        upsert_finished(
            &c,
            &HistoryRecord {
                status: StoredStatus::Failure,
                spend: Some(spend),
                ..old
            },
        )
        .unwrap();
        assert_eq!(get(&c, "old").unwrap().unwrap().spend, Some(spend));
    }
}
