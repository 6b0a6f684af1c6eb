//! The end, at the cancel, of a run that started once but that nobody runs now (issue 15):
//! one parked on a usage limit (status `waiting`, resumed at its reset by a worker or by
//! `awf resume`) and one recorded `running` whose terminal `awf run --store` / `awf resume
//! --store` process is gone (SIGKILLed: no session holds the run's advisory lock, nobody
//! polls its cancel request). [`crate::queue::request_cancel`] ends either as a run
//! cancelled while running ends: `cancelled`, exit code 130, `EXECUTION.RUN.CANCELLED`, its
//! snapshot saying the same, a `run_finished` event in its log, in the cancel's transaction.

use std::time::Duration;
use std::time::UNIX_EPOCH;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::store::RunSnapshot;
use awf_domain::run::RunId;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use awf_domain::run::StateResult;
use serde_json::Value;

use crate::column;
use crate::queue::CANCELLED_EXIT;
use crate::queue::CANCELLED_MESSAGE;
use crate::unavailable;

fn fail(what: &str) -> impl Fn(tokio_postgres::Error) -> AwfError + '_ {
    move |e| unavailable(what, &crate::db_text(&e))
}

/// Takes the run's advisory lock for the rest of `tx` (`pg_try_advisory_xact_lock`, the key
/// [`RunLocks`](awf_domain::ports::RunLocks) uses): `false` when a session holds it, i.e. an awf process
/// runs or resumes the run, or when its holder lost its session to a server restart and is
/// taking it again ([`crate::run_lock::retaking_sql`]). Held until `tx` ends, so no process can start resuming the run
/// while the cancel ends it.
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub(crate) async fn lock_unheld(
    tx: &deadpool_postgres::Transaction<'_>,
    run_id: &RunId,
) -> Result<bool, AwfError> {
    let row = tx
        .query_one(
            &format!(
                "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0)) AND NOT {}",
                crate::run_lock::retaking_sql(1)
            ),
            &[&crate::ports::lock_key(&run_id.0)],
        )
        .await
        .map_err(fail("take the run's lock"))?;
    column(&row, 0)
}

/// What the cancel reads of the run's row to end it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Recorded {
    /// `workflow_id`: the identifier its result names.
    pub workflow: String,
    /// Its state snapshot, when it has one.
    pub snapshot: Option<Value>,
    /// `started_at_ms`.
    pub started_ms: Option<i64>,
    /// `duration_ms` as recorded (kept when the start is unknown).
    pub duration_ms: Option<i64>,
    /// The cancel time on the database's clock, in ms since the epoch.
    pub now_ms: i64,
}

/// Ends the run `run_id` (its row locked by `tx`) as cancelled at `rec.now_ms`: row status
/// `cancelled`, exit code 130, `cancel_requested` (no worker claims it), `waiting_until`
/// cleared, `completed_at_ms` the cancel time, the `workflow cancelled` error, `duration_ms`
/// cancel time − start (as its snapshot's end − start gives it to `awf status`). Its
/// snapshot gets the same status, end, exit code and error (its states and current state
/// kept, so `awf resume` continues it as any cancelled run), and a `run_finished` event with
/// result `cancelled` is appended ([`crate::queue::append_run_finished`]).
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub(crate) async fn end_cancelled(
    tx: &deadpool_postgres::Transaction<'_>,
    run_id: &RunId,
    rec: Recorded,
) -> Result<(), AwfError> {
    let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(rec.now_ms).unwrap_or(0));
    let duration = match rec.started_ms {
        Some(s) => Some(rec.now_ms.saturating_sub(s).max(0)),
        None => rec.duration_ms,
    };
    let error = AwfError::new(ErrorCode::ExecutionRunCancelled, CANCELLED_MESSAGE).body();
    let exit = u8::try_from(CANCELLED_EXIT).unwrap_or(u8::MAX);
    // An unreadable snapshot is left as it is: the row's columns still say how it ended.
    let snap: Option<RunSnapshot> = rec
        .snapshot
        .and_then(|v| serde_json::from_value::<RunSnapshot>(v).ok())
        .map(|mut s| {
            s.end_cancelled(at);
            s
        });
    let body = snap
        .as_ref()
        .map(|s| serde_json::to_value(s).map(crate::storable))
        .transpose()
        .map_err(|e| unavailable("encode the run's state", &e))?;
    tx.execute(
        "UPDATE awf_runs SET status = 'cancelled', exit_code = $2, cancel_requested = true, \
           waiting_until = NULL, lease_until = NULL, completed_at_ms = $3, duration_ms = $4, \
           error_message = $5, snapshot = COALESCE($6, snapshot), updated_at = now() \
         WHERE run_id = $1",
        &[
            &run_id.0,
            &CANCELLED_EXIT,
            &rec.now_ms,
            &duration,
            &CANCELLED_MESSAGE,
            &body,
        ],
    )
    .await
    .map_err(fail("cancel the run"))?;
    let result = RunResult {
        run_id: Some(run_id.clone()),
        workflow: rec.workflow,
        status: RunStatus::Cancelled,
        exit_code: exit,
        terminal: None,
        duration_ms: duration.and_then(|d| u64::try_from(d).ok()).unwrap_or(0),
        states: snap
            .as_ref()
            .map(|s| {
                s.states
                    .iter()
                    .map(|(k, v)| (k.clone(), StateResult::from(v)))
                    .collect()
            })
            .unwrap_or_default(),
        outputs: snap.as_ref().map(|s| s.outputs.clone()).unwrap_or_default(),
        error: Some(error),
        message: None,
        spend: snap.and_then(|s| s.spend),
    };
    crate::queue::append_run_finished(tx, run_id, at, result).await
}
