//! The store ports on PostgreSQL: [`StateStore`] (the `snapshot` column of `awf_runs`),
//! [`HistoryStore`] (its history columns) and [`RunLocks`] (session advisory locks), with
//! the embedded store's semantics (infrastructure/store: state.rs, history.rs, locks.rs).
//!
//! Rows of submitted runs that no worker started (queued, cancelled while queued, or failed
//! before their first step: the workflow did not load on the worker) have no start time: the
//! history lists them with their submit time as their start, in their status (`queued`,
//! `cancelled`, `failure` with its message). Those without a snapshot are read as one made
//! from the row ([`unstarted_snapshot`]), so that `awf status` and `GET /api/executions/{id}`
//! show them; they are not in the state list (nothing to resume).
//!
//! Source: spec/workflow.md §3.11 (persistence and resume), §3.13 (`awf history`).

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::error::ErrorBody;
use awf_domain::ports::RunLocks;
use awf_domain::ports::locks::RunLockGuard;
use awf_domain::ports::store::HistoryFilter;
use awf_domain::ports::store::HistoryRecord;
use awf_domain::ports::store::HistoryStats;
use awf_domain::ports::store::HistoryStore;
use awf_domain::ports::store::RunSnapshot;
use awf_domain::ports::store::StateStore;
use awf_domain::ports::store::StoredStatus;
use serde_json::Value;
use std::time::Duration;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;
use tokio_postgres::types::ToSql;

use crate::PgStore;
use crate::column;
use crate::db_text;
use crate::pool_text;
use crate::unavailable;

fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn u64_of(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
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

/// A row's start: its run's, or its submit time for a submitted run no worker started.
const START: &str = "COALESCE(started_at_ms, (extract(epoch from submitted_at) * 1000)::bigint)";

const COLUMNS: &str = "run_id, workflow_id, workflow_name, status, exit_code, \
                       COALESCE(started_at_ms, (extract(epoch from submitted_at) * 1000)::bigint), \
                       completed_at_ms, duration_ms, error_message, parent_run_id, spend";

/// The state of a submitted run that no worker started (it has no snapshot of its own):
/// `status` as the row says, started (and ended, unless `queued`) at `submitted`, `error` its
/// failure.
pub(crate) fn unstarted_snapshot(
    run_id: &str,
    workflow: &str,
    workflow_name: &str,
    status: StoredStatus,
    exit_code: Option<u8>,
    error: Option<ErrorBody>,
    submitted: SystemTime,
) -> RunSnapshot {
    RunSnapshot {
        schema_version: awf_domain::ports::store::STATE_SCHEMA_VERSION,
        run_id: run_id.to_owned(),
        parent_run_id: None,
        workflow: workflow.to_owned(),
        workflow_name: workflow_name.to_owned(),
        workflow_path: None,
        status,
        current_state: String::new(),
        inputs: serde_json::Map::new(),
        states: std::collections::BTreeMap::new(),
        started_at: submitted,
        updated_at: submitted,
        completed_at: (status != StoredStatus::Queued).then_some(submitted),
        exit_code,
        terminal: None,
        error,
        outputs: std::collections::BTreeMap::new(),
        owner_pid: None,
        loop_position: None,
        spend: None,
        waiting_until: None,
        child_runs: std::collections::BTreeMap::new(),
        mocks: Default::default(),
        working_dir: None,
    }
}

/// The snapshot of an unstarted row (`snapshot IS NULL AND NOT run_started`), from its
/// columns `run_id, workflow_id, status, exit_code, error_message, submitted_at (ms),
/// workflow_name, completed_at_ms`. A run cancelled before it started ended at its cancel
/// time (`completed_at_ms`, as `awf history` and GET show it) with the error a cancelled run
/// has (`EXECUTION.RUN.CANCELLED`).
fn unstarted_of(r: &tokio_postgres::Row) -> Result<RunSnapshot, AwfError> {
    let status = parse_status(&column::<String>(r, 2)?);
    let exit: Option<i32> = column(r, 3)?;
    let message: Option<String> = column(r, 4)?;
    let submitted: Option<i64> = column(r, 5)?;
    let completed: Option<i64> = column(r, 7)?;
    let body = |code, message| ErrorBody {
        code,
        message,
        hints: Vec::new(),
        details: std::collections::BTreeMap::new(),
    };
    let error = match status {
        StoredStatus::Failure => message.map(|m| body(ErrorCode::ExecutionCommandFailed, m)),
        StoredStatus::Cancelled => Some(body(
            ErrorCode::ExecutionRunCancelled,
            message.unwrap_or_else(|| crate::queue::CANCELLED_MESSAGE.to_owned()),
        )),
        _ => None,
    };
    let mut snap = unstarted_snapshot(
        &column::<String>(r, 0)?,
        &column::<String>(r, 1)?,
        &column::<String>(r, 6)?,
        status,
        exit.and_then(|e| u8::try_from(e).ok()),
        error,
        UNIX_EPOCH + Duration::from_millis(submitted.map_or(0, u64_of)),
    );
    if let Some(end) = completed.filter(|_| status != StoredStatus::Queued) {
        let end = UNIX_EPOCH + Duration::from_millis(u64_of(end));
        snap.completed_at = Some(end);
        snap.updated_at = end;
    }
    Ok(snap)
}

fn record(r: &tokio_postgres::Row) -> Result<HistoryRecord, AwfError> {
    let status: String = column(r, 3)?;
    let exit: Option<i32> = column(r, 4)?;
    let spend: Option<Value> = column(r, 10)?;
    Ok(HistoryRecord {
        id: column(r, 0)?,
        workflow_id: column(r, 1)?,
        workflow_name: column(r, 2)?,
        status: parse_status(&status),
        exit_code: exit.map(|e| u8::try_from(e).unwrap_or(u8::MAX)),
        started_at_ms: column::<Option<i64>>(r, 5)?.map_or(0, u64_of),
        completed_at_ms: column::<Option<i64>>(r, 6)?.map(u64_of),
        duration_ms: column::<Option<i64>>(r, 7)?.map(u64_of),
        error_message: column(r, 8)?,
        parent_run_id: column(r, 9)?,
        spend: spend.and_then(|v| serde_json::from_value(v).ok()),
    })
}

/// A filter's `WHERE` clause (started runs only) and its parameters.
fn where_clause(filter: &HistoryFilter) -> (String, Vec<Box<dyn ToSql + Sync + Send>>) {
    let mut conds = vec!["(started_at_ms IS NOT NULL OR submitted_at IS NOT NULL)".to_owned()];
    let mut args: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
    if let Some(w) = &filter.workflow {
        // As stored: a NUL in a workflow name is U+FFFD in the store (crate::storable_text).
        args.push(Box::new(crate::storable_text(w)));
        conds.push(format!(
            "(workflow_id = ${0} OR workflow_name = ${0})",
            args.len()
        ));
    }
    if let Some(s) = filter.status {
        args.push(Box::new(s.as_str().to_owned()));
        conds.push(format!("status = ${}", args.len()));
    }
    if let Some(since) = filter.since_ms {
        args.push(Box::new(i64_of(since)));
        conds.push(format!("{START} >= ${}", args.len()));
    }
    (format!(" WHERE {}", conds.join(" AND ")), args)
}

impl PgStore {
    /// The top-level runs cancelled before any worker started them (they have no snapshot,
    /// so [`StateStore::list`] does not give them), as [`StateStore::load`] shows them: `awf
    /// resume` starts such a run from its initial state, so `awf resume --list` lists them.
    ///
    /// # Errors
    /// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
    pub fn cancelled_unstarted(&self) -> Result<Vec<RunSnapshot>, AwfError> {
        let rows = self.query(
            "list runs",
            format!(
                "SELECT run_id, workflow_id, status, exit_code, error_message, \
                 (extract(epoch from submitted_at) * 1000)::bigint, workflow_name, \
                 completed_at_ms FROM awf_runs \
                 WHERE snapshot IS NULL AND NOT run_started AND parent_run_id IS NULL \
                 AND status = 'cancelled' AND queue_state = 'done' AND request IS NOT NULL \
                 AND submitted_at IS NOT NULL AND {START} IS NOT NULL"
            ),
            Vec::new(),
        )?;
        rows.iter().map(unstarted_of).collect()
    }

    /// Runs `sql` with `args` on a pooled connection; its rows.
    fn query(
        &self,
        what: &'static str,
        sql: String,
        args: Vec<Box<dyn ToSql + Sync + Send>>,
    ) -> Result<Vec<tokio_postgres::Row>, AwfError> {
        let pool = self.pool().clone();
        self.block_on(async move {
            let client = pool
                .get()
                .await
                .map_err(|e| unavailable(what, &pool_text(&e)))?;
            let refs: Vec<&(dyn ToSql + Sync)> = args
                .iter()
                .map(|a| a.as_ref() as &(dyn ToSql + Sync))
                .collect();
            client
                .query(sql.as_str(), &refs)
                .await
                .map_err(|e| unavailable(what, &db_text(&e)))
        })?
    }
}

impl StateStore for PgStore {
    fn load(&self, run_id: &str) -> Result<RunSnapshot, AwfError> {
        let rows = self.query(
            "read a run",
            "SELECT snapshot FROM awf_runs WHERE run_id = $1 AND snapshot IS NOT NULL".to_owned(),
            vec![Box::new(crate::storable_text(run_id))],
        )?;
        if rows.is_empty() {
            // A submitted run no worker started: what its row says.
            let unstarted = self.query(
                "read a run",
                format!(
                    "SELECT run_id, workflow_id, status, exit_code, error_message, \
                     (extract(epoch from submitted_at) * 1000)::bigint, workflow_name, \
                     completed_at_ms FROM awf_runs \
                     WHERE run_id = $1 AND snapshot IS NULL AND NOT run_started \
                     AND submitted_at IS NOT NULL AND {START} IS NOT NULL"
                ),
                vec![Box::new(crate::storable_text(run_id))],
            )?;
            if let Some(r) = unstarted.first() {
                return unstarted_of(r);
            }
        }
        let Some(row) = rows.first() else {
            return Err(AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!("workflow execution not found: {run_id}"),
            )
            .with_detail("run_id", run_id)
            .with_hint("awf resume --list"));
        };
        let v: Value = column(row, 0)?;
        serde_json::from_value(v).map_err(|e| {
            AwfError::new(
                ErrorCode::SystemIoReadFailed,
                format!("cannot read the state of run {run_id} from the PostgreSQL store: {e}"),
            )
        })
    }

    fn list(&self) -> Result<Vec<RunSnapshot>, AwfError> {
        let rows = self.query(
            "list runs",
            "SELECT snapshot FROM awf_runs WHERE snapshot IS NOT NULL".to_owned(),
            Vec::new(),
        )?;
        let mut out: Vec<RunSnapshot> = rows
            .iter()
            .filter_map(|r| {
                column::<Value>(r, 0)
                    .ok()
                    .and_then(|v| serde_json::from_value(v).ok())
            })
            .collect();
        out.sort_by(|a, b| {
            b.started_at
                .cmp(&a.started_at)
                .then_with(|| b.run_id.cmp(&a.run_id))
        });
        Ok(out)
    }

    /// Writes the snapshot column (a new row has no history columns: like the embedded
    /// store, saving a state file adds no history row).
    fn save(&self, snapshot: &RunSnapshot) -> Result<(), AwfError> {
        let json = serde_json::to_value(snapshot)
            .map(crate::storable)
            .map_err(|e| {
                AwfError::new(
                    ErrorCode::SystemIoWriteFailed,
                    format!("cannot encode the state of run {}: {e}", snapshot.run_id),
                )
            })?;
        let root = snapshot
            .parent_run_id
            .clone()
            .unwrap_or_else(|| snapshot.run_id.clone());
        self.query(
            "save a run",
            "INSERT INTO awf_runs (run_id, parent_run_id, root_run_id, workflow_id, workflow_name,
                                   status, exit_code, snapshot, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now())
             ON CONFLICT (run_id) DO UPDATE SET
                 status = EXCLUDED.status,
                 exit_code = EXCLUDED.exit_code,
                 snapshot = EXCLUDED.snapshot,
                 updated_at = now()"
                .to_owned(),
            vec![
                Box::new(snapshot.run_id.clone()),
                Box::new(snapshot.parent_run_id.clone()),
                Box::new(root),
                Box::new(snapshot.workflow.clone()),
                Box::new(snapshot.workflow_name.clone()),
                Box::new(snapshot.status.as_str().to_owned()),
                Box::new(snapshot.exit_code.map(i32::from)),
                Box::new(json),
            ],
        )?;
        Ok(())
    }

    /// The `message` column (schema 2): written by the recorder at the run's end; `None`
    /// when the run is unknown, has not ended, ended without one, or cannot be read.
    fn terminal_message(&self, run_id: &str) -> Option<String> {
        let rows = self
            .query(
                "read a run's message",
                "SELECT message FROM awf_runs WHERE run_id = $1".to_owned(),
                vec![Box::new(crate::storable_text(run_id))],
            )
            .ok()?;
        rows.first()
            .and_then(|r| column::<Option<String>>(r, 0).ok().flatten())
    }
}

impl HistoryStore for PgStore {
    fn list(&self, filter: &HistoryFilter) -> Result<Vec<HistoryRecord>, AwfError> {
        let (clause, mut args) = where_clause(filter);
        let mut sql =
            format!("SELECT {COLUMNS} FROM awf_runs{clause} ORDER BY {START} DESC, row_seq DESC");
        if let Some(limit) = filter.limit {
            args.push(Box::new(i64::try_from(limit).unwrap_or(i64::MAX)));
            sql.push_str(&format!(" LIMIT ${}", args.len()));
        }
        self.query("read the run history", sql, args)?
            .iter()
            .map(record)
            .collect()
    }

    fn stats(&self, filter: &HistoryFilter) -> Result<HistoryStats, AwfError> {
        let (mut clause, args) = where_clause(filter);
        // The runs `HistoryFilter::counts` counts.
        if !filter.counts_sub_runs() {
            clause.push_str(" AND parent_run_id IS NULL");
        }
        let sql = format!(
            "SELECT COUNT(*)::bigint,
                    COUNT(*) FILTER (WHERE status = 'success')::bigint,
                    COUNT(*) FILTER (WHERE status = 'failure')::bigint,
                    COUNT(*) FILTER (WHERE status = 'cancelled')::bigint,
                    COUNT(*) FILTER (WHERE status = 'running')::bigint,
                    COALESCE(SUM(duration_ms) FILTER (WHERE status NOT IN ('running', 'waiting', 'queued') AND duration_ms IS NOT NULL), 0)::bigint,
                    COUNT(*) FILTER (WHERE status NOT IN ('running', 'waiting', 'queued') AND duration_ms IS NOT NULL)::bigint,
                    COUNT(*) FILTER (WHERE status = 'waiting')::bigint,
                    COUNT(*) FILTER (WHERE status = 'queued')::bigint
             FROM awf_runs{clause}"
        );
        let rows = self.query("read the run history", sql, args)?;
        let Some(r) = rows.first() else {
            return Ok(HistoryStats::default());
        };
        let n = |i: usize| column::<i64>(r, i).map(u64_of);
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
    }

    fn get(&self, run_id: &str) -> Result<Option<HistoryRecord>, AwfError> {
        let rows = self.query(
            "read the run history",
            format!(
                "SELECT {COLUMNS} FROM awf_runs WHERE run_id = $1 \
                 AND (started_at_ms IS NOT NULL OR submitted_at IS NOT NULL)"
            ),
            vec![Box::new(crate::storable_text(run_id))],
        )?;
        rows.first().map(record).transpose()
    }
}

/// The text whose `hashtextextended(…, 0)` is the advisory lock key of `run_id`.
pub(crate) fn lock_key(run_id: &str) -> String {
    format!("awf-run:{run_id}")
}

/// The SQL condition "some process holds the lock whose key text ([`lock_key`]) is the
/// query parameter `$param`", read without taking the lock: some session holds its advisory
/// lock (`pg_locks`), or its holder's session died with a server restart and it is taking
/// the lock again ([`crate::run_lock::retaking_sql`]: it renewed its row before the restart,
/// less than the grace ago).
pub(crate) fn lock_held_sql(param: usize) -> String {
    format!(
        "(EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' \
           AND l.granted AND l.objsubid = 1 \
           AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
           AND ((l.classid::bigint << 32) | l.objid::bigint) = hashtextextended(${param}, 0)) \
         OR {})",
        crate::run_lock::retaking_sql(param)
    )
}

impl RunLocks for PgStore {
    /// `pg_try_advisory_lock` of the run id's 64-bit hash on a connection of its own, held by
    /// the guard, whose keeper takes it again after a server restart
    /// (`run_lock`).
    fn try_lock(&self, run_id: &str) -> Result<Option<RunLockGuard>, AwfError> {
        match crate::run_lock::lock(self, run_id)? {
            Some(held) => Ok(Some(RunLockGuard::new(held))),
            None => Err(awf_domain::ports::locks::still_running(run_id)),
        }
    }

    /// Whether some session, of any awf process on any host, holds the run's advisory lock
    /// (`pg_locks`): the process running a top-level run holds it for the whole run, and
    /// PostgreSQL releases it as soon as that process's connection closes (SIGKILL, crash).
    /// A holder whose session died with a server restart still counts while it takes the
    /// lock again (`lock_held_sql`). `None` when the database cannot be asked.
    fn is_held(&self, run_id: &str) -> Option<bool> {
        let rows = self
            .query(
                "check the run's lock",
                format!("SELECT {}", lock_held_sql(1)),
                vec![Box::new(lock_key(run_id))],
            )
            .ok()?;
        rows.first().and_then(|r| column::<bool>(r, 0).ok())
    }
}
