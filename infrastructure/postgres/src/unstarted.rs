//! The end of a claimed run that failed before its first step (its workflow file gone or
//! invalid on the worker, its inputs not fitting): recorded as a run that ended so, the same
//! on every surface, in one transaction fenced by the claim.

use std::collections::BTreeMap;
use std::time::Duration;
use std::time::UNIX_EPOCH;

use awf_domain::AwfError;
use awf_domain::error::ErrorBody;
use awf_domain::ports::store::StoredStatus;
use awf_domain::run::RunId;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use deadpool_postgres::Pool;

use crate::column;
use crate::unavailable;

fn fail(what: &str) -> impl Fn(tokio_postgres::Error) -> AwfError + '_ {
    move |e| unavailable(what, &crate::db_text(&e))
}

fn u64_of(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// Records that the claimed run `run_id` failed with `error` before its first step: its row
/// `failure` and `done` with the exit code `awf run` gives for that error, started at its
/// submit time, ended now (`completed_at_ms`, `duration_ms` = now − submit time), its error
/// message, and a snapshot saying the same (error code, message and hints included); a
/// `run_finished` event with that result appended to its log and [`crate::EVENTS_CHANNEL`]
/// notified, so its event stream ends as a failed run's does. `workflow` and `name` are the
/// run's identifier and shown name. Fenced by the claim (`worker_id`, `epoch`); `false` when
/// the claim is no longer this worker's (nothing changed).
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub async fn fail_unstarted(
    pool: &Pool,
    run_id: &RunId,
    worker_id: &str,
    epoch: i64,
    (workflow, name): (&str, &str),
    error: &AwfError,
) -> Result<bool, AwfError> {
    let mut client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    let tx = client
        .transaction()
        .await
        .map_err(fail("start a transaction"))?;
    let row = tx
        .query_opt(
            "SELECT (extract(epoch from submitted_at) * 1000)::bigint, \
               (extract(epoch from now()) * 1000)::bigint \
             FROM awf_runs WHERE run_id = $1 AND worker_id = $2 AND epoch = $3 \
               AND queue_state = 'claimed' FOR UPDATE",
            &[&run_id.0, &worker_id, &epoch],
        )
        .await
        .map_err(fail("read the run's claim"))?;
    let Some(row) = row else {
        return Ok(false);
    };
    let now: i64 = column(&row, 1)?;
    let submitted: i64 = column::<Option<i64>>(&row, 0)?.unwrap_or(now);
    let duration = now.saturating_sub(submitted).max(0);
    let exit_code = error.code().exit_code();
    let body: ErrorBody = error.body();
    let at = |ms: i64| UNIX_EPOCH + Duration::from_millis(u64_of(ms));
    let mut snap = crate::ports::unstarted_snapshot(
        &run_id.0,
        workflow,
        name,
        StoredStatus::Failure,
        Some(exit_code),
        Some(body.clone()),
        at(submitted),
    );
    snap.completed_at = Some(at(now));
    snap.updated_at = at(now);
    let snapshot = serde_json::to_value(&snap)
        .map(crate::storable)
        .map_err(|e| unavailable("encode the run's state", &e))?;
    tx.execute(
        "UPDATE awf_runs SET status = 'failure', exit_code = $2, queue_state = 'done', \
           lease_until = NULL, started_at_ms = $3, completed_at_ms = $4, duration_ms = $5, \
           error_message = $6, snapshot = $7, updated_at = now() \
         WHERE run_id = $1",
        &[
            &run_id.0,
            &i32::from(exit_code),
            &submitted,
            &now,
            &duration,
            &crate::storable_text(error.message()),
            &snapshot,
        ],
    )
    .await
    .map_err(fail("record the run's failure"))?;
    let result = RunResult {
        run_id: Some(run_id.clone()),
        // Shown by its name, as a run that started is (trial: the file's path was shown).
        workflow: name.to_owned(),
        status: RunStatus::Failure,
        exit_code,
        terminal: None,
        duration_ms: u64_of(duration),
        states: BTreeMap::new(),
        outputs: BTreeMap::new(),
        error: Some(body),
        message: None,
        spend: None,
    };
    crate::queue::append_run_finished(&tx, run_id, at(now), result).await?;
    tx.commit()
        .await
        .map_err(fail("commit the run's failure"))?;
    // Ended: no worker needs its secret inputs any more.
    crate::queue::scrub_secrets(&client, run_id).await;
    Ok(true)
}
