//! The run queue (issue 15): submitted runs are `awf_runs` rows that workers claim with
//! `FOR UPDATE SKIP LOCKED`, each claim a lease renewed by the worker's heartbeat.
//!
//! Queue columns of `awf_runs` and what moves them:
//!
//! | `queue_state` | meaning | set by |
//! |---|---|---|
//! | `none` | not a queued run (`awf run` on this store), or one a terminal `awf resume` took out of the queue to run it itself | the recorder (default), [`take_from_queue`] |
//! | `queued` | waiting for a worker (`not_before` delays a retry) | [`submit`], [`release`], [`requeue_resume`] |
//! | `claimed` | a worker (`worker_id`) holds it until `lease_until`, under claim number `epoch` | [`claim`], [`renew`] |
//! | `done` | ended (or cancelled before any worker took it); one parked on a usage limit (`status` `waiting`) is claimed again once its `waiting_until` has come | [`finish`], [`request_cancel`], [`close_ended`], [`close_ended_runs`] |
//!
//! `run_started` says a worker started the run (so a later claim resumes it instead of
//! starting it again); `cancel_requested` asks the holder to cancel it.
//!
//! # One worker at a time per run
//!
//! 1. A claim is one `UPDATE … WHERE run_id IN (SELECT … FOR UPDATE SKIP LOCKED)`: the row
//!    lock makes two workers' claims of one row serialize, and the inner condition (queued,
//!    or claimed with an expired lease) is re-checked on the locked row, so only one of them
//!    takes it; each claim increments `epoch`.
//! 2. Every later write of a worker about the run (renew, mark started, finish, release) is
//!    guarded by `worker_id = me AND epoch = my epoch`: once another worker claimed the row,
//!    they change nothing, and the old holder learns it from the 0-row answer of its next
//!    heartbeat (every lease/3) and cancels its copy at once; part 1's recorder fence (same
//!    epoch) drops its writes.
//! 3. A worker that cannot reach the database cancels its runs locally when their lease
//!    would have expired (measured from its last successful renewal, on its own monotonic
//!    clock, so it stops no later than another worker may claim): leases are only taken over
//!    after they expire on the database's clock.
//! 4. Resuming takes the run's advisory lock (RunLocks): should an old holder somehow still
//!    be alive, the resume is refused and the claim released to be retried later.
//! 5. A terminal `awf resume` of a run the queue has (queued, claimed, or parked) takes it
//!    out of the queue under the run's advisory lock ([`take_from_queue`]: `none`, a new
//!    epoch), so no worker claims it while that process runs it.
//! 6. A run whose record has ended (`success`, or `failure` with no queued resume) is never
//!    claimed: [`close_ended_runs`] marks such queue rows `done` without touching the record,
//!    and a worker that finds the run ended once it holds it does the same ([`close_ended`]).
//!
//! Source: issue 15 ("Queue").

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::facade::Interactive;
use awf_domain::ports::facade::ResumeFrom;
use awf_domain::ports::facade::ResumeRequest;
use awf_domain::ports::facade::RunRequest;
use awf_domain::run::RunId;
use deadpool_postgres::Pool;
use serde::Deserialize;
use serde::Serialize;
use serde_json::Map;
use serde_json::Value;

use crate::cancel_now::Recorded;
use crate::cancel_now::end_cancelled;
use crate::cancel_now::lock_unheld;
use crate::column;
use crate::db_text;
use crate::unavailable;

/// The serializable part of a [`RunRequest`] (or of a [`ResumeRequest`]), kept in
/// `awf_runs.request`: never the submitter's environment (the worker uses its own), nor
/// front-end attachments (MCP servers, fs delegation) that only the submitter could serve.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct QueuedRequest {
    /// Workflow identifier or path (resolved on the worker).
    pub identifier: String,
    /// The workflow's name (its `name:`, as `awf run` records it), shown for the run while it
    /// is queued (`awf_runs.workflow_name`) instead of the path it is queued by; `None`: the
    /// identifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `--input k=v` values, in order.
    #[serde(default)]
    pub inputs: Vec<(String, String)>,
    /// Project configuration inputs of the submitter.
    #[serde(default)]
    pub config_inputs: Map<String, Value>,
    /// Working directory of the run (a path on the worker's machine).
    #[serde(default)]
    pub working_dir: PathBuf,
    /// `--mock` values: step → field → value.
    #[serde(default)]
    pub mocks: BTreeMap<String, BTreeMap<String, String>>,
    /// `--interactive` breakpoints (`Some(vec![])`: before every state).
    #[serde(default)]
    pub interactive: Option<Vec<String>>,
    /// `--yes`.
    #[serde(default)]
    pub auto_approve: bool,
    /// Whether missing inputs are asked for (answered through any worker).
    #[serde(default)]
    pub prompt_missing_inputs: bool,
    /// Whether inputs the workflow does not declare are let through (warned about, as `awf
    /// run` does: they reach no step's environment) rather than refused: set for `awf run
    /// --submit` and `awf resume`, which warn as `awf run` does; a request of a remote
    /// front-end (HTTP) is refused such inputs when posted, and by the worker should one get
    /// through (a run's or a queued resume's inputs).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_undeclared_inputs: bool,
    /// Set for a queued resume: where to restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<QueuedResume>,
}

/// Where a queued resume restarts (`ResumeFrom`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueuedResume {
    /// The state the run stopped in.
    Current,
    /// The state before it.
    Previous,
    /// A named state.
    Step(String),
}

impl QueuedRequest {
    /// This request, shown as the workflow `name` while it is queued.
    pub fn named(mut self, name: Option<String>) -> Self {
        self.name = name.filter(|n| !n.is_empty());
        self
    }

    /// This request with the values of its secret inputs (a name marking a secret,
    /// [`awf_domain::mask::is_secret_name`]: `--input` values and project configuration
    /// inputs) replaced by `***`: what `awf_runs.request` keeps once the run has ended (the
    /// real values are there only while a worker may still need them).
    pub fn without_secrets(&self) -> Self {
        let mut out = self.clone();
        for (k, v) in &mut out.inputs {
            if awf_domain::mask::is_secret_name(k) && !v.is_empty() {
                *v = awf_domain::mask::MASK.to_owned();
            }
        }
        awf_domain::mask::redact_named(&mut out.config_inputs);
        out
    }

    /// The queued form of `req` (its environment and attachments are left out).
    pub fn of_run(req: &RunRequest) -> Self {
        Self {
            identifier: req.identifier.clone(),
            name: None,
            inputs: req.inputs.clone(),
            config_inputs: req.config_inputs.clone(),
            working_dir: req.working_dir.clone(),
            mocks: req.mocks.clone(),
            interactive: req.interactive.as_ref().map(|i| i.breakpoints.clone()),
            auto_approve: req.auto_approve,
            prompt_missing_inputs: req.prompt_missing_inputs,
            allow_undeclared_inputs: !req.refuse_undeclared_inputs,
            resume: None,
        }
    }

    /// The queued form of a resume of `req` (environment and attachments left out).
    pub fn of_resume(identifier: &str, req: &ResumeRequest) -> Self {
        Self {
            identifier: identifier.to_owned(),
            inputs: req.inputs.clone(),
            config_inputs: req.config_inputs.clone(),
            working_dir: req.working_dir.clone(),
            auto_approve: req.auto_approve,
            allow_undeclared_inputs: !req.refuse_undeclared_inputs,
            resume: Some(match &req.from {
                ResumeFrom::Current => QueuedResume::Current,
                ResumeFrom::Previous => QueuedResume::Previous,
                ResumeFrom::Step(s) => QueuedResume::Step(s.clone()),
            }),
            ..Self::default()
        }
    }

    /// The name the run is shown by: the workflow's name, else the identifier.
    pub fn shown(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.identifier)
    }

    /// The request a worker starts: this one, with the worker's environment and `run_id`,
    /// shown by the workflow's name (not the path it is queued by).
    pub fn to_run(&self, run_id: &RunId, env: &[(String, String)]) -> RunRequest {
        RunRequest {
            identifier: self.identifier.clone(),
            inputs: self.inputs.clone(),
            config_inputs: self.config_inputs.clone(),
            env: env.to_vec(),
            working_dir: self.working_dir.clone(),
            mocks: self.mocks.clone(),
            interactive: self.interactive.as_ref().map(|b| Interactive {
                breakpoints: b.clone(),
            }),
            prompt_missing_inputs: self.prompt_missing_inputs,
            auto_approve: self.auto_approve,
            run_id: Some(run_id.clone()),
            refuse_undeclared_inputs: !self.allow_undeclared_inputs,
            shown_as: self.name.clone(),
            ..RunRequest::default()
        }
    }

    /// The resume a worker runs for a run it took over or that parked on a usage limit (or a
    /// queued resume): from where the queued resume says, else the state the run stopped in;
    /// the worker's environment. A queued resume gives its inputs; otherwise the run goes on
    /// with its recorded inputs, except its secret-named ones, which its record masks: those
    /// are given from the submitted request (without them the run could not be resumed).
    pub fn to_resume(&self, run_id: &RunId, env: &[(String, String)]) -> ResumeRequest {
        ResumeRequest {
            run_id: run_id.0.clone(),
            from: match &self.resume {
                None | Some(QueuedResume::Current) => ResumeFrom::Current,
                Some(QueuedResume::Previous) => ResumeFrom::Previous,
                Some(QueuedResume::Step(s)) => ResumeFrom::Step(s.clone()),
            },
            // A queued resume gives its own `--input` values; a run taken over gets back
            // its secret inputs, which its snapshot keeps masked (a resume asks for them
            // again): only the request holds their values while the run is not over.
            inputs: if self.resume.is_some() {
                self.inputs.clone()
            } else {
                self.inputs
                    .iter()
                    .filter(|(k, _)| awf_domain::mask::is_secret_name(k))
                    .cloned()
                    .collect()
            },
            config_inputs: self.config_inputs.clone(),
            env: env.to_vec(),
            working_dir: self.working_dir.clone(),
            lock_held: false,
            auto_approve: self.auto_approve,
            shown_as: self.name.clone(),
            // A queued resume's inputs are refused as its front-end asked (HTTP: refused);
            // a takeover gives back only the run's own secret inputs.
            refuse_undeclared_inputs: self.resume.is_some() && !self.allow_undeclared_inputs,
            ..ResumeRequest::default()
        }
    }
}

/// A run this worker claimed.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    /// The run.
    pub run_id: RunId,
    /// The claim's number (fences every later write).
    pub epoch: i64,
    /// What to run.
    pub request: QueuedRequest,
    /// Whether a worker started it before (then it is resumed, not started).
    pub run_started: bool,
    /// Whether someone asked to cancel it.
    pub cancel_requested: bool,
    /// The worker whose claim this one took over (its lease had expired: it died, or lost
    /// the database); `None` for a queued run.
    pub taken_from: Option<String>,
    /// Set when this claim resumes a run parked on a usage limit (status `waiting`) whose
    /// reset time, this, has come; `None` otherwise.
    pub parked_until: Option<std::time::SystemTime>,
    /// When the run was submitted (queued): a worker starting the run passes it as the
    /// run's start (`RunRequest::started_at`; README: a queued run has its submit time as its
    /// start, and keeps it once it runs).
    pub submitted_at: Option<std::time::SystemTime>,
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn fail(what: &str) -> impl Fn(tokio_postgres::Error) -> AwfError + '_ {
    move |e| unavailable(what, &db_text(&e))
}

/// Inserts a queued run (`status` and `queue_state` `queued`, `workflow_id` = the identifier
/// it is queued by, `workflow_name` = the request's `name`, else the identifier, `root_run_id`
/// = `run_id`) and notifies
/// [`crate::QUEUE_CHANNEL`], in one transaction.
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` when a run with that id exists; `SYSTEM.STORE.UNAVAILABLE`
/// when the database fails.
pub async fn submit(pool: &Pool, run_id: &RunId, request: &QueuedRequest) -> Result<(), AwfError> {
    let mut client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    let body = serde_json::to_value(request)
        .map(crate::storable)
        .map_err(|e| unavailable("encode the request", &e))?;
    let tx = client
        .transaction()
        .await
        .map_err(fail("start a transaction"))?;
    let n = tx
        .execute(
            "INSERT INTO awf_runs (run_id, root_run_id, workflow_id, workflow_name, status, \
             request, queue_state, submitted_at) \
             VALUES ($1, $1, $2, $4, 'queued', $3, 'queued', now()) ON CONFLICT DO NOTHING",
            &[
                &run_id.0,
                &request.identifier,
                &body,
                &request.name.as_deref().unwrap_or(&request.identifier),
            ],
        )
        .await
        .map_err(fail("queue the run"))?;
    if n == 0 {
        return Err(AwfError::new(
            ErrorCode::UserInputValidationFailed,
            format!("a run with id {run_id} exists already"),
        )
        .with_hint("submit it without a run id: a new one is made"));
    }
    tx.execute(
        "SELECT pg_notify($1, $2)",
        &[&crate::QUEUE_CHANNEL, &run_id.0],
    )
    .await
    .map_err(fail("notify the workers"))?;
    tx.commit().await.map_err(fail("commit the submit"))?;
    Ok(())
}

/// Claims up to `n` runs for `worker_id` for `lease`: queued ones (oldest first, past their
/// `not_before`), claimed ones whose lease expired, except those in `held` that this
/// worker claimed itself (`held`: the run ids it is executing now), and top-level runs a
/// worker parked on a usage limit (`done`, status `waiting`, no cancel asked) whose
/// `waiting_until` has come on the database's clock. A queued or claimed run whose record
/// has ended ([`ENDED`]: it completed, or failed with no resume queued) is never claimed:
/// [`close_ended_runs`] takes it out of the queue. Each claim sets `worker_id`,
/// `lease_until = now() + lease`, `epoch = epoch + 1`, `queue_state = 'claimed'`.
///
/// A parked run is claimed under its row's lock like any other, so exactly one worker
/// resumes it (its claim is fenced by the new epoch); it leaves `done` with the claim, so it
/// is claimed again only if it parks again (a new `waiting_until`). The claim resumes it at
/// the state it stopped in (a queued resume's starting point becomes
/// [`QueuedResume::Current`]), as `awf serve`'s resumer does with the embedded store.
///
/// A worker whose heartbeat came late (a starved process: its lease expired on the database's
/// clock while its run went on) must not take its own run over: the new epoch fenced its
/// running copy, which then cancelled itself while the new claim waited for that copy's lock,
/// and the records of the run disagreed. Its next heartbeat renews the lease instead (renewal
/// is guarded by worker and epoch, not by the lease). Another worker may still take it over.
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub async fn claim(
    pool: &Pool,
    worker_id: &str,
    n: usize,
    lease: Duration,
    held: &[String],
) -> Result<Vec<Claim>, AwfError> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    let limit = i64::try_from(n).unwrap_or(i64::MAX);
    let sql = format!(
        "UPDATE awf_runs r SET worker_id = $1, \
                 lease_until = now() + $3::bigint * interval '1 millisecond', \
                 epoch = r.epoch + 1, queue_state = 'claimed', not_before = NULL, \
                 updated_at = now() \
             FROM ( \
                 SELECT run_id, worker_id AS old_worker, queue_state AS old_state FROM awf_runs \
                 WHERE (queue_state = 'queued' AND (not_before IS NULL OR not_before <= now()) \
                        AND NOT {ENDED}) \
                    OR (queue_state = 'claimed' AND lease_until < now() \
                        AND NOT (worker_id = $1 AND run_id = ANY($4)) AND NOT {ENDED}) \
                    OR (queue_state = 'done' AND status = 'waiting' \
                        AND waiting_until <= now() AND parent_run_id IS NULL \
                        AND run_started AND NOT cancel_requested AND request IS NOT NULL) \
                 ORDER BY submitted_at NULLS LAST \
                 LIMIT $2 FOR UPDATE SKIP LOCKED) old \
             WHERE r.run_id = old.run_id \
             RETURNING r.run_id, r.epoch, r.request, r.run_started, r.cancel_requested, \
                 CASE WHEN old.old_state = 'claimed' THEN old.old_worker END, \
                 CASE WHEN old.old_state = 'done' THEN r.waiting_until END, \
                 (extract(epoch from r.submitted_at) * 1000)::bigint"
    );
    let rows = client
        .query(&sql, &[&worker_id, &limit, &millis(lease), &held])
        .await
        .map_err(fail("claim runs"))?;
    rows.iter()
        .map(|r| {
            let request: Option<Value> = column(r, 2)?;
            let parked_until: Option<std::time::SystemTime> = column(r, 6)?;
            let mut request: QueuedRequest = request
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default();
            if parked_until.is_some() && request.resume.is_some() {
                // It parked where it stopped: go on there, not where the queued resume that
                // led to it started.
                request.resume = Some(QueuedResume::Current);
            }
            Ok(Claim {
                run_id: RunId(column(r, 0)?),
                epoch: column(r, 1)?,
                request,
                run_started: column(r, 3)?,
                cancel_requested: column(r, 4)?,
                taken_from: column(r, 5)?,
                parked_until,
                submitted_at: column::<Option<i64>>(r, 7)?.map(crate::ms_time),
            })
        })
        .collect()
}

/// The SQL condition on an `awf_runs` row saying its record has ended for good, so that no
/// worker may run it again: it completed (`success`, never resumable), or it failed and no
/// resume of it was queued (a queued resume, `request.resume`, continues a failed run). A
/// `cancelled` run is not among them: one stopped by a worker that lost its lease is resumed
/// by the worker taking it over, and one cancelled after its worker died is ended by it.
pub const ENDED: &str = "(status = 'success' \
     OR (status = 'failure' AND (request IS NULL OR request->'resume' IS NULL)))";

/// A queue row [`close_ended_runs`] closed: its run had ended already.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    /// The run.
    pub run_id: RunId,
    /// Its recorded status (`success`, `failure`), left as it was.
    pub status: String,
    /// Its workflow's name, as shown.
    pub workflow: String,
}

/// Marks `done` the queue rows whose run has ended already ([`ENDED`]): queued, or claimed
/// with an expired lease (its worker died after recording the end, or a terminal `awf resume`
/// ended it while a worker's claim of it was released and queued again). Only `queue_state`
/// and the lease change: the run's status, exit code, error and events are left as recorded.
/// Each row is taken under its lock (`FOR UPDATE SKIP LOCKED`, as a claim takes it).
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub async fn close_ended_runs(pool: &Pool) -> Result<Vec<Closed>, AwfError> {
    let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    let rows = client
        .query(
            &format!(
                "UPDATE awf_runs r SET queue_state = 'done', lease_until = NULL, \
                   not_before = NULL, updated_at = now() \
                 FROM (SELECT run_id FROM awf_runs \
                   WHERE (queue_state = 'queued' \
                          OR (queue_state = 'claimed' AND lease_until < now())) \
                     AND {ENDED} \
                   FOR UPDATE SKIP LOCKED) e \
                 WHERE r.run_id = e.run_id \
                 RETURNING r.run_id, r.status, r.workflow_name"
            ),
            &[],
        )
        .await
        .map_err(fail("take ended runs out of the queue"))?;
    let closed = rows
        .iter()
        .map(|r| {
            Ok(Closed {
                run_id: RunId(column(r, 0)?),
                status: column(r, 1)?,
                workflow: column(r, 2)?,
            })
        })
        .collect::<Result<Vec<_>, AwfError>>()?;
    for c in &closed {
        scrub_secrets(&client, &c.run_id).await;
    }
    Ok(closed)
}

/// Marks a claimed run `done` whose record turned out to have ended already (the worker
/// holding it found it completed, or its resume was refused as having nothing to resume):
/// only `queue_state` and the lease change, never the run's status, exit code, error or
/// events. `false` when the claim is no longer this worker's (nothing changed).
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub async fn close_ended(
    pool: &Pool,
    run_id: &RunId,
    worker_id: &str,
    epoch: i64,
) -> Result<bool, AwfError> {
    let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    let n = client
        .execute(
            "UPDATE awf_runs SET queue_state = 'done', lease_until = NULL, updated_at = now() \
             WHERE run_id = $1 AND worker_id = $2 AND epoch = $3 AND queue_state = 'claimed'",
            &[&run_id.0, &worker_id, &epoch],
        )
        .await
        .map_err(fail("mark the ended run done"))?;
    scrub_secrets(&client, run_id).await;
    Ok(n == 1)
}

/// A claim as the database still holds it for this worker (from [`renew`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The run.
    pub run_id: RunId,
    /// Its claim number.
    pub epoch: i64,
    /// Whether someone asked to cancel it.
    pub cancel_requested: bool,
}

/// A row of `awf_workers` whose heartbeat is older than this belongs to a worker that died
/// without unregistering (SIGKILL, machine lost): it is removed when a worker starts and on
/// every heartbeat. (A live worker beats every third of its lease.)
pub const STALE_WORKER: Duration = Duration::from_secs(3600);

/// Removes the `awf_workers` rows whose heartbeat is older than [`STALE_WORKER`].
async fn prune_workers(client: &deadpool_postgres::Client) -> Result<(), AwfError> {
    client
        .execute(
            "DELETE FROM awf_workers \
             WHERE heartbeat_at < now() - $1::bigint * interval '1 millisecond'",
            &[&millis(STALE_WORKER)],
        )
        .await
        .map_err(fail("remove the rows of dead workers"))?;
    Ok(())
}

/// Renews every lease `worker_id` holds to `now() + lease`, refreshes its `awf_workers`
/// heartbeat and removes the rows of workers dead for [`STALE_WORKER`]; the claims it still
/// holds (a claim of this worker missing from them, or with
/// another epoch, was taken over).
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub async fn renew(pool: &Pool, worker_id: &str, lease: Duration) -> Result<Vec<Held>, AwfError> {
    let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    let rows = client
        .query(
            "UPDATE awf_runs SET lease_until = now() + $2::bigint * interval '1 millisecond', \
             updated_at = now() WHERE worker_id = $1 AND queue_state = 'claimed' \
             RETURNING run_id, epoch, cancel_requested",
            &[&worker_id, &millis(lease)],
        )
        .await
        .map_err(fail("renew the leases"))?;
    client
        .execute(
            "UPDATE awf_workers SET heartbeat_at = now() WHERE worker_id = $1",
            &[&worker_id],
        )
        .await
        .map_err(fail("record the heartbeat"))?;
    prune_workers(&client).await?;
    rows.iter()
        .map(|r| {
            Ok(Held {
                run_id: RunId(column(r, 0)?),
                epoch: column(r, 1)?,
                cancel_requested: column(r, 2)?,
            })
        })
        .collect()
}

/// What [`mark_started`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marked {
    /// Marked started: the holder may run it.
    Started,
    /// Still this worker's claim, but someone asked to cancel it (after the claim, before
    /// the mark): it must not run; the holder ends it `cancelled` ([`finish`]).
    CancelRequested,
    /// Cancelled before it started (by [`request_cancel`]: `cancelled` and `done`, its end
    /// recorded): it must not run, and nothing is left to write.
    Cancelled,
    /// The claim is no longer this worker's (another took it over): it must not run.
    Lost,
}

/// Marks a claimed run as started by its holder, unless a cancel was asked for it since the
/// claim (the check and the mark are one statement under the row's lock, so a cancel
/// recorded before it is always seen, and one recorded after it finds the run started and is
/// passed to its worker).
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub async fn mark_started(
    pool: &Pool,
    run_id: &RunId,
    worker_id: &str,
    epoch: i64,
) -> Result<Marked, AwfError> {
    let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    let n = client
        .execute(
            "UPDATE awf_runs SET run_started = true, updated_at = now() \
             WHERE run_id = $1 AND worker_id = $2 AND epoch = $3 AND queue_state = 'claimed' \
               AND NOT cancel_requested",
            &[&run_id.0, &worker_id, &epoch],
        )
        .await
        .map_err(fail("mark the run started"))?;
    if n == 1 {
        return Ok(Marked::Started);
    }
    let row = client
        .query_opt(
            "SELECT queue_state, cancel_requested, status FROM awf_runs \
             WHERE run_id = $1 AND worker_id = $2 AND epoch = $3",
            &[&run_id.0, &worker_id, &epoch],
        )
        .await
        .map_err(fail("read the run's claim"))?;
    Ok(match row {
        Some(r) => {
            let state: String = column(&r, 0)?;
            let cancel: bool = column(&r, 1)?;
            let status: String = column(&r, 2)?;
            match state.as_str() {
                "claimed" if cancel => Marked::CancelRequested,
                "done" if cancel && status == "cancelled" => Marked::Cancelled,
                _ => Marked::Lost,
            }
        }
        None => Marked::Lost,
    })
}

/// How a claimed run ended, for [`finish`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// `success`, `failure` or `cancelled`.
    pub status: String,
    /// The run's exit code, when it has one.
    pub exit_code: Option<i32>,
    /// Why it failed, when it failed before running (or its error message).
    pub error_message: Option<String>,
}

/// Marks the claimed run done with how it ended (`status`, `exit_code`; the recorder writes
/// the rest); `false` when the claim is no longer this worker's (nothing changed). The
/// secret inputs of a run that is done are masked in its request (`scrub_secrets`).
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub async fn finish(
    pool: &Pool,
    run_id: &RunId,
    worker_id: &str,
    epoch: i64,
    ended: &Ended,
) -> Result<bool, AwfError> {
    let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    let n = client
        .execute(
            "UPDATE awf_runs SET queue_state = 'done', lease_until = NULL, status = $4, \
             exit_code = COALESCE($5, exit_code), \
             error_message = COALESCE($6, error_message), updated_at = now() \
             WHERE run_id = $1 AND worker_id = $2 AND epoch = $3 AND queue_state = 'claimed'",
            &[
                &run_id.0,
                &worker_id,
                &epoch,
                &ended.status,
                &ended.exit_code,
                &ended.error_message,
            ],
        )
        .await
        .map_err(fail("mark the run done"))?;
    // Also when this call changed nothing: an earlier try of it may have marked the run
    // done and been cut short (a drain's last try) before masking.
    scrub_secrets(&client, run_id).await;
    Ok(n == 1)
}

/// Masks the secret inputs of an ended run's queued request
/// ([`QueuedRequest::without_secrets`]): no worker needs their values any more, and a user
/// who may read `awf_runs` should not find them there. Only a row still `done` with the
/// request read is changed (a resume queued meanwhile keeps its own), and not one parked on a
/// usage limit (status `waiting`): a worker resumes it at its reset ([`claim`]) and needs
/// them then (its end masks them). A failure is only logged (the run's end is recorded
/// already).
pub(crate) async fn scrub_secrets(client: &deadpool_postgres::Client, run_id: &RunId) {
    let scrub = async {
        let row = client
            .query_opt(
                "SELECT request FROM awf_runs WHERE run_id = $1 AND queue_state = 'done' \
                 AND status <> 'waiting'",
                &[&run_id.0],
            )
            .await
            .map_err(fail("read the ended run's request"))?;
        let Some(row) = row else {
            return Ok(());
        };
        let Some(body) = column::<Option<Value>>(&row, 0)? else {
            return Ok(());
        };
        let Ok(request) = serde_json::from_value::<QueuedRequest>(body.clone()) else {
            return Ok(());
        };
        let masked = serde_json::to_value(request.without_secrets())
            .map(crate::storable)
            .map_err(|e| unavailable("encode the request", &e))?;
        if masked != body {
            client
                .execute(
                    "UPDATE awf_runs SET request = $2 \
                     WHERE run_id = $1 AND queue_state = 'done' AND status <> 'waiting' \
                       AND request = $3",
                    &[&run_id.0, &masked, &body],
                )
                .await
                .map_err(fail("mask the ended run's secret inputs"))?;
        }
        Ok::<_, AwfError>(())
    };
    if let Err(e) = scrub.await {
        tracing::warn!(run_id = %run_id, "run {run_id}: {}", e.message());
    }
}

/// Gives a claimed run back to the queue (`queued`, no worker), to be claimed again no
/// sooner than `delay` from now; `false` when the claim is no longer this worker's.
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub async fn release(
    pool: &Pool,
    run_id: &RunId,
    worker_id: &str,
    epoch: i64,
    delay: Duration,
) -> Result<bool, AwfError> {
    let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    let n = client
        .execute(
            "UPDATE awf_runs SET queue_state = 'queued', worker_id = NULL, lease_until = NULL, \
             not_before = now() + $4::bigint * interval '1 millisecond', updated_at = now() \
             WHERE run_id = $1 AND worker_id = $2 AND epoch = $3 AND queue_state = 'claimed'",
            &[&run_id.0, &worker_id, &epoch, &millis(delay)],
        )
        .await
        .map_err(fail("release the run"))?;
    if n == 1 {
        client
            .execute(
                "SELECT pg_notify($1, $2)",
                &[&crate::QUEUE_CHANNEL, &run_id.0],
            )
            .await
            .map_err(fail("notify the workers"))?;
    }
    Ok(n == 1)
}

/// What [`request_cancel`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// Nobody had taken it yet: it is now `cancelled` and done.
    CancelledQueued,
    /// It was parked on a usage limit (status `waiting`) and nobody was resuming it: it is
    /// now `cancelled` (exit code 130, its reset time cleared, a `run_finished` event), so
    /// no worker resumes it at its reset; `awf resume` still continues it.
    CancelledParked,
    /// It was recorded `running` by a terminal `awf run` / `awf resume` process that is
    /// gone (no session held the run's advisory lock): it is now `cancelled` as
    /// [`Self::CancelledParked`] is.
    CancelledUnheld,
    /// A worker holds it: asked (it cancels on its next control check, within a second).
    Asked,
    /// A terminal `awf run` / `awf resume` process runs it (no worker: its `queue_state` is
    /// `none`): asked; that process polls [`cancel_requested`] and cancels it as Ctrl-C would.
    AskedProcess,
    /// It ended already (nothing to do): its recorded status (`success`, `failure`,
    /// `cancelled`, …).
    Ended(String),
    /// No such run.
    Unknown,
}

/// The message of a run cancelled before it started (the engine's for a cancelled run).
pub use awf_domain::ports::store::CANCELLED_MESSAGE;

/// The exit code of a run cancelled before it started: 130, as a run cancelled while running
/// (`awf cancel`, `DELETE`, Ctrl-C) records, whichever moment the cancel caught it at.
pub const CANCELLED_EXIT: i32 = 130;

/// Asks to cancel a run. One that no worker started (queued, or claimed by a worker that
/// has not marked it started yet) is cancelled at once: `cancelled` and `done`, ended at the
/// cancel time (`completed_at_ms`, `duration_ms` = cancel time − submit time), its error
/// `EXECUTION.RUN.CANCELLED` and a `run_finished` event in its log, all in one transaction;
/// a worker that claimed it finds it cancelled when it marks it started and never runs it
/// ([`mark_started`]). A started one gets `cancel_requested` and a
/// [`crate::CONTROL_CHANNEL`] notification to its worker. One parked on a usage limit, or
/// recorded `running` by a terminal process that is gone, that no session holds the advisory
/// lock of (taken for the transaction, so no resume can start meanwhile) is ended at once
/// as cancelled (`cancel_now::end_cancelled`); one whose lock is held (a terminal
/// `awf run` / `awf resume` runs or resumes it) gets `cancel_requested`, which that process
/// polls.
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub async fn request_cancel(pool: &Pool, run_id: &RunId) -> Result<CancelOutcome, AwfError> {
    let mut client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    let tx = client
        .transaction()
        .await
        .map_err(fail("start a transaction"))?;
    let row = tx
        .query_opt(
            "SELECT queue_state, run_started, status, workflow_id, \
               (extract(epoch from submitted_at) * 1000)::bigint, \
               (extract(epoch from now()) * 1000)::bigint, \
               snapshot, started_at_ms, duration_ms, parent_run_id IS NULL \
             FROM awf_runs WHERE run_id = $1 FOR UPDATE",
            &[&run_id.0],
        )
        .await
        .map_err(fail("ask to cancel the run"))?;
    let Some(row) = row else {
        return Ok(CancelOutcome::Unknown);
    };
    let state: String = column(&row, 0)?;
    let started: bool = column(&row, 1)?;
    let status: String = column(&row, 2)?;
    let workflow: String = column(&row, 3)?;
    let submitted: Option<i64> = column(&row, 4)?;
    let now: i64 = column(&row, 5)?;
    // Only a top-level run holds the lock of its id (a sub-workflow run is its parent's).
    let top: bool = column(&row, 9)?;
    let recorded = |workflow: String| -> Result<Recorded, AwfError> {
        Ok(Recorded {
            workflow,
            snapshot: column(&row, 6)?,
            started_ms: column(&row, 7)?,
            duration_ms: column(&row, 8)?,
            now_ms: now,
        })
    };
    let outcome = match state.as_str() {
        "queued" | "claimed" if !started => {
            let end = submitted.map(|_| now);
            let duration = submitted.map(|s| now.saturating_sub(s).max(0));
            tx.execute(
                "UPDATE awf_runs SET cancel_requested = true, status = 'cancelled', \
                   exit_code = $2, queue_state = 'done', lease_until = NULL, \
                   completed_at_ms = $3, duration_ms = $4, error_message = $5, updated_at = now() \
                 WHERE run_id = $1",
                &[
                    &run_id.0,
                    &CANCELLED_EXIT,
                    &end,
                    &duration,
                    &CANCELLED_MESSAGE,
                ],
            )
            .await
            .map_err(fail("cancel the run"))?;
            record_unstarted_end(&tx, run_id, &workflow, now, duration).await?;
            CancelOutcome::CancelledQueued
        }
        // A queued resume of a run that ran before: cancelled at once, its record kept.
        "queued" => {
            tx.execute(
                "UPDATE awf_runs SET cancel_requested = true, status = 'cancelled', \
                   exit_code = $2, queue_state = 'done', updated_at = now() WHERE run_id = $1",
                &[&run_id.0, &CANCELLED_EXIT],
            )
            .await
            .map_err(fail("cancel the run"))?;
            CancelOutcome::CancelledQueued
        }
        "claimed" => {
            tx.execute(
                "UPDATE awf_runs SET cancel_requested = true, updated_at = now() \
                 WHERE run_id = $1",
                &[&run_id.0],
            )
            .await
            .map_err(fail("ask to cancel the run"))?;
            let payload = serde_json::json!({"kind": "cancel", "run_id": run_id.0}).to_string();
            tx.execute(
                "SELECT pg_notify($1, $2)",
                &[&crate::CONTROL_CHANNEL, &payload],
            )
            .await
            .map_err(fail("notify the run's worker"))?;
            CancelOutcome::Asked
        }
        // Parked on a usage limit (by a worker, or by a terminal `awf run`) and not being
        // resumed (nobody holds its lock): ended now, so no worker resumes it at its reset.
        "none" | "done" if status == "waiting" && top && lock_unheld(&tx, run_id).await? => {
            end_cancelled(&tx, run_id, recorded(workflow)?).await?;
            CancelOutcome::CancelledParked
        }
        // Recorded running by a terminal `awf run` / `awf resume` process that is gone
        // (SIGKILLed: it no longer holds the run's lock, nobody polls the flag): ended now.
        "none" | "done" if status == "running" && top && lock_unheld(&tx, run_id).await? => {
            end_cancelled(&tx, run_id, recorded(workflow)?).await?;
            CancelOutcome::CancelledUnheld
        }
        // Run (or, parked, being resumed) by a terminal `awf run` / `awf resume` process: it
        // polls the flag once the run is running.
        "none" | "done" if status == "running" || status == "waiting" => {
            tx.execute(
                "UPDATE awf_runs SET cancel_requested = true, updated_at = now() \
                 WHERE run_id = $1",
                &[&run_id.0],
            )
            .await
            .map_err(fail("ask to cancel the run"))?;
            CancelOutcome::AskedProcess
        }
        _ => CancelOutcome::Ended(status),
    };
    tx.commit().await.map_err(fail("commit the cancel"))?;
    // A run that ended here keeps no secret input in its queued request.
    if matches!(
        outcome,
        CancelOutcome::CancelledQueued
            | CancelOutcome::CancelledParked
            | CancelOutcome::CancelledUnheld
    ) {
        scrub_secrets(&client, run_id).await;
    }
    Ok(outcome)
}

/// Whether a cancel was requested for a run that a terminal `awf run` / `awf resume`
/// process runs itself (`awf cancel`, `DELETE /api/executions/{id}`): that process polls this
/// and cancels its run as Ctrl-C would.
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub async fn cancel_requested(pool: &Pool, run_id: &RunId) -> Result<bool, AwfError> {
    let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    let row = client
        .query_opt(
            "SELECT cancel_requested FROM awf_runs WHERE run_id = $1 AND status = 'running'",
            &[&run_id.0],
        )
        .await
        .map_err(fail("read the run's cancel request"))?;
    row.map_or(Ok(false), |r| column(&r, 0))
}

/// Forgets an earlier attempt's cancel request of a run this process is about to run itself
/// (`awf resume`): only a cancel asked from now on stops it.
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub async fn clear_cancel(pool: &Pool, run_id: &RunId) -> Result<(), AwfError> {
    let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    client
        .execute(
            "UPDATE awf_runs SET cancel_requested = false \
             WHERE run_id = $1 AND queue_state IN ('none', 'done') AND cancel_requested",
            &[&run_id.0],
        )
        .await
        .map_err(fail("clear the run's cancel request"))?;
    Ok(())
}

/// Takes a top-level run that the queue has out of it, for a terminal `awf resume` that runs
/// it itself: one that ran before (`run_started`) and has not completed, queued (a queued
/// resume, or a claim given back), claimed by a worker (whatever its lease: this process holds
/// the run's advisory lock, which every worker running it holds, so none runs it now), or
/// parked on a usage limit (`done`, status `waiting`). In one transaction, and only while a
/// session holds the run's advisory lock (the caller's): `queue_state` `none`, no worker, no
/// lease, and a new `epoch`, so no worker claims it while this process runs it and a claim
/// taken before is fenced (its writes change nothing). Returns the `queue_state` it had
/// (for [`give_back_to_queue`]), `None` when the queue did not have it so.
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub async fn take_from_queue(pool: &Pool, run_id: &RunId) -> Result<Option<String>, AwfError> {
    let mut client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    let tx = client
        .transaction()
        .await
        .map_err(fail("start a transaction"))?;
    let row = tx
        .query_opt(
            &format!(
                "SELECT queue_state FROM awf_runs \
                 WHERE run_id = $1 AND parent_run_id IS NULL AND run_started \
                   AND ((queue_state IN ('queued', 'claimed') AND NOT {ENDED} \
                         AND status IN ('running', 'failure', 'cancelled', 'waiting')) \
                     OR (queue_state = 'done' AND status = 'waiting')) \
                   AND {held} \
                 FOR UPDATE",
                held = crate::ports::lock_held_sql(2)
            ),
            &[&run_id.0, &crate::ports::lock_key(&run_id.0)],
        )
        .await
        .map_err(fail("read the run's queue state"))?;
    let Some(row) = row else {
        return Ok(None);
    };
    let was: String = column(&row, 0)?;
    tx.execute(
        "UPDATE awf_runs SET queue_state = 'none', worker_id = NULL, lease_until = NULL, \
           not_before = NULL, epoch = epoch + 1, updated_at = now() WHERE run_id = $1",
        &[&run_id.0],
    )
    .await
    .map_err(fail("take the run out of the queue"))?;
    tx.commit()
        .await
        .map_err(fail("commit taking the run out of the queue"))?;
    Ok(Some(was))
}

/// Gives back to the queue a run [`take_from_queue`] took when its resume did not start after
/// all (a bad `--from`, its workflow invalid now): `done` again if it was parked (`was`
/// `done`: claimed at its reset), else `queued` for a worker to resume it. Only while no
/// attempt of this process ran it (`queue_state` still `none`, its status not changed to
/// `success`).
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub async fn give_back_to_queue(pool: &Pool, run_id: &RunId, was: &str) -> Result<(), AwfError> {
    let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    let state = if was == "done" { "done" } else { "queued" };
    let n = client
        .execute(
            "UPDATE awf_runs SET queue_state = $2, updated_at = now() \
             WHERE run_id = $1 AND queue_state = 'none' AND status <> 'success'",
            &[&run_id.0, &state],
        )
        .await
        .map_err(fail("give the run back to the queue"))?;
    if n == 1 && state == "queued" {
        client
            .execute(
                "SELECT pg_notify($1, $2)",
                &[&crate::QUEUE_CHANNEL, &run_id.0],
            )
            .await
            .map_err(fail("notify the workers"))?;
    }
    Ok(())
}

/// Takes a top-level run that never started (cancelled while queued, or failed before its
/// first step: its workflow file gone or invalid then), for a terminal `awf resume` that
/// starts it from its initial state (the failure's record cleared): marks it started and run by no worker
/// (`queue_state` `none`), its cancel request cleared, and gives its queued request (its
/// inputs, secret ones masked `***`). `None` when the run is not such a run (it started
/// once, or it is queued or held by a worker).
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails or the request cannot be read.
pub async fn take_unstarted(
    pool: &Pool,
    run_id: &RunId,
) -> Result<Option<QueuedRequest>, AwfError> {
    let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    let row = client
        .query_opt(
            "UPDATE awf_runs SET queue_state = 'none', run_started = true, \
               cancel_requested = false, snapshot = NULL, updated_at = now() \
             WHERE run_id = $1 AND parent_run_id IS NULL AND queue_state = 'done' \
               AND request IS NOT NULL AND ((NOT run_started AND status = 'cancelled') \
                 OR (status = 'failure' AND snapshot IS NOT NULL \
                     AND coalesce(snapshot->>'current_state', '') = '' \
                     AND coalesce(snapshot->'states', '{}'::jsonb) = '{}'::jsonb)) \
             RETURNING request",
            &[&run_id.0],
        )
        .await
        .map_err(fail("take the unstarted run"))?;
    let Some(row) = row else {
        return Ok(None);
    };
    let body: serde_json::Value = column(&row, 0)?;
    serde_json::from_value(body)
        .map(Some)
        .map_err(|e| unavailable("read the run's queued request", &e))
}

/// Queues again, as a new run with the same id, a top-level run that never started
/// (cancelled while queued, or failed before its first step) (`POST /api/executions/{id}/resume` on a worker; `awf resume` has
/// [`take_unstarted`]): its queued request with `overrides` applied (an override replaces the
/// input of that name, a new name is added), status `queued` again, its cancel cleared, its
/// submit time kept. `Ok(None)` when the run is not such a run (it started once, or it is
/// queued or held); `Ok(Some(Err(names)))`, nothing changed, when secret inputs of the
/// request were masked (`***`) at the cancel and `overrides` does not give them again.
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails or the request cannot be read.
pub async fn requeue_unstarted(
    pool: &Pool,
    run_id: &RunId,
    overrides: &[(String, String)],
) -> Result<Option<Result<(), Vec<String>>>, AwfError> {
    let mut client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    let tx = client
        .transaction()
        .await
        .map_err(fail("start a transaction"))?;
    let row = tx
        .query_opt(
            "SELECT request FROM awf_runs WHERE run_id = $1 AND parent_run_id IS NULL \
               AND queue_state = 'done' AND request IS NOT NULL \
               AND ((NOT run_started AND status = 'cancelled') \
                 OR (status = 'failure' AND snapshot IS NOT NULL \
                     AND coalesce(snapshot->>'current_state', '') = '' \
                     AND coalesce(snapshot->'states', '{}'::jsonb) = '{}'::jsonb)) \
             FOR UPDATE",
            &[&run_id.0],
        )
        .await
        .map_err(fail("read the unstarted run"))?;
    let Some(row) = row else {
        return Ok(None);
    };
    let body: Value = column(&row, 0)?;
    let mut request: QueuedRequest = serde_json::from_value(body)
        .map_err(|e| unavailable("read the run's queued request", &e))?;
    for (k, v) in overrides {
        match request.inputs.iter_mut().find(|(name, _)| name == k) {
            Some(slot) => slot.1.clone_from(v),
            None => request.inputs.push((k.clone(), v.clone())),
        }
    }
    let masked: Vec<String> = request
        .inputs
        .iter()
        .filter(|(k, v)| awf_domain::mask::is_secret_name(k) && v == awf_domain::mask::MASK)
        .map(|(k, _)| k.clone())
        .collect();
    if !masked.is_empty() {
        return Ok(Some(Err(masked)));
    }
    let body = serde_json::to_value(&request)
        .map(crate::storable)
        .map_err(|e| unavailable("encode the request", &e))?;
    tx.execute(
        "UPDATE awf_runs SET queue_state = 'queued', status = 'queued', request = $2, \
           snapshot = NULL, cancel_requested = false, exit_code = NULL, error_message = NULL, \
           completed_at_ms = NULL, duration_ms = NULL, worker_id = NULL, lease_until = NULL, \
           not_before = NULL, updated_at = now() \
         WHERE run_id = $1",
        &[&run_id.0, &body],
    )
    .await
    .map_err(fail("queue the run again"))?;
    tx.execute(
        "SELECT pg_notify($1, $2)",
        &[&crate::QUEUE_CHANNEL, &run_id.0],
    )
    .await
    .map_err(fail("notify the workers"))?;
    tx.commit()
        .await
        .map_err(fail("commit the run's queueing"))?;
    Ok(Some(Ok(())))
}

/// Gives back a run [`take_unstarted`] took when it could not be started after all (its
/// workflow invalid now, an input missing): cancelled before it started, as it was.
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub async fn untake_unstarted(pool: &Pool, run_id: &RunId) -> Result<(), AwfError> {
    let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    client
        .execute(
            "UPDATE awf_runs SET queue_state = 'done', run_started = false, updated_at = now() \
             WHERE run_id = $1 AND queue_state = 'none' AND run_started AND snapshot IS NULL",
            &[&run_id.0],
        )
        .await
        .map_err(fail("give the unstarted run back"))?;
    Ok(())
}

/// Appends the `run_finished` event of a run cancelled before it started (result
/// `cancelled`, its exit code, duration and `EXECUTION.RUN.CANCELLED` error) to its log, at
/// `at_ms`, and notifies [`crate::EVENTS_CHANNEL`]: its event stream ends as a run cancelled
/// while running does.
async fn record_unstarted_end(
    tx: &deadpool_postgres::Transaction<'_>,
    run_id: &RunId,
    workflow: &str,
    at_ms: i64,
    duration: Option<i64>,
) -> Result<(), AwfError> {
    use awf_domain::run::RunResult;
    use awf_domain::run::RunStatus;
    let result = RunResult {
        run_id: Some(run_id.clone()),
        workflow: workflow.to_owned(),
        status: RunStatus::Cancelled,
        exit_code: u8::try_from(CANCELLED_EXIT).unwrap_or(u8::MAX),
        terminal: None,
        duration_ms: duration.and_then(|d| u64::try_from(d).ok()).unwrap_or(0),
        states: BTreeMap::new(),
        outputs: BTreeMap::new(),
        error: Some(AwfError::new(ErrorCode::ExecutionRunCancelled, CANCELLED_MESSAGE).body()),
        message: None,
        spend: None,
    };
    let at = std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(at_ms).unwrap_or(0));
    append_run_finished(tx, run_id, at, result).await
}

/// Appends `result` as the `run_finished` event of a run that ends without an engine (it
/// never started: cancelled while queued, or failed before its first step; or nobody runs
/// it at its cancel: parked on a usage limit, or its terminal process gone) at the next
/// position and seq of its log, at `at`, and notifies [`crate::EVENTS_CHANNEL`], inside `tx`.
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub(crate) async fn append_run_finished(
    tx: &deadpool_postgres::Transaction<'_>,
    run_id: &RunId,
    at: std::time::SystemTime,
    result: awf_domain::run::RunResult,
) -> Result<(), AwfError> {
    use awf_domain::event::EventEnvelope;
    use awf_domain::event::RunEvent;
    let next = tx
        .query_one(
            "SELECT COALESCE(MAX(position), 0) + 1, \
               COALESCE(MAX(seq) FILTER (WHERE run_id = $1), 0) + 1 \
             FROM awf_events WHERE root_run_id = $1",
            &[&run_id.0],
        )
        .await
        .map_err(fail("read the run's log"))?;
    let (position, seq): (i64, i64) = (column(&next, 0)?, column(&next, 1)?);
    let envelope = EventEnvelope {
        seq: u64::try_from(seq).unwrap_or(1),
        run_id: run_id.clone(),
        parent_run_id: None,
        at,
        path: String::new(),
        iteration: None,
        event: RunEvent::RunFinished {
            result: Box::new(result),
        },
    };
    let body = serde_json::to_value(&envelope)
        .map(crate::storable)
        .map_err(|e| unavailable("encode the run's end", &e))?;
    tx.execute(
        "INSERT INTO awf_events (root_run_id, position, run_id, seq, kind, envelope) \
         VALUES ($1, $2, $1, $3, 'run_finished', $4) ON CONFLICT DO NOTHING",
        &[&run_id.0, &position, &seq, &body],
    )
    .await
    .map_err(fail("record the run's end"))?;
    tx.execute(
        "SELECT pg_notify($1, $2)",
        &[&crate::EVENTS_CHANNEL, &run_id.0],
    )
    .await
    .map_err(fail("notify the run's followers"))?;
    Ok(())
}

/// Queues a resume of a recorded run that ended (`failure`, `cancelled`, `waiting`, or a
/// `running` one no worker holds) and that no awf process holds (no session has its advisory
/// lock: a terminal `awf run --store` / `awf resume --store` running it holds it); `false`
/// when the row is missing or not resumable so.
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub async fn requeue_resume(
    pool: &Pool,
    run_id: &RunId,
    request: &QueuedRequest,
) -> Result<bool, AwfError> {
    let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    let body = serde_json::to_value(request)
        .map(crate::storable)
        .map_err(|e| unavailable("encode the request", &e))?;
    let n = client
        .execute(
            &format!(
                "UPDATE awf_runs SET queue_state = 'queued', request = $2, run_started = true, \
                 worker_id = NULL, lease_until = NULL, not_before = NULL, \
                 cancel_requested = false, submitted_at = now(), updated_at = now() \
                 WHERE run_id = $1 AND parent_run_id IS NULL AND queue_state IN ('none', 'done') \
                   AND status IN ('failure', 'cancelled', 'waiting', 'running') \
                   AND NOT {}",
                crate::ports::lock_held_sql(3)
            ),
            &[&run_id.0, &body, &crate::ports::lock_key(&run_id.0)],
        )
        .await
        .map_err(fail("queue the resume"))?;
    if n == 1 {
        client
            .execute(
                "SELECT pg_notify($1, $2)",
                &[&crate::QUEUE_CHANNEL, &run_id.0],
            )
            .await
            .map_err(fail("notify the workers"))?;
    }
    Ok(n == 1)
}

/// The top-level runs that cannot be resumed now because the queue has them: queued (a
/// worker will start or resume them) or held by a worker whose lease is current (it is
/// running them). `awf resume --list` leaves them out; a claim whose lease expired (its
/// worker died) is not among them.
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub async fn busy_runs(pool: &Pool) -> Result<Vec<String>, AwfError> {
    let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    let rows = client
        .query(
            "SELECT run_id FROM awf_runs WHERE parent_run_id IS NULL \
             AND (queue_state = 'queued' OR (queue_state = 'claimed' AND lease_until >= now()))",
            &[],
        )
        .await
        .map_err(fail("read the runs workers hold"))?;
    rows.iter().map(|r| column(r, 0)).collect()
}

/// Registers a worker in `awf_workers` (or refreshes its row), and removes the rows of
/// workers dead for [`STALE_WORKER`].
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub async fn register_worker(
    pool: &Pool,
    worker_id: &str,
    max_runs: usize,
    addr: Option<&str>,
) -> Result<(), AwfError> {
    let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    let max = i32::try_from(max_runs).unwrap_or(i32::MAX);
    client
        .execute(
            "INSERT INTO awf_workers (worker_id, max_runs, addr) VALUES ($1, $2, $3) \
             ON CONFLICT (worker_id) DO UPDATE SET heartbeat_at = now(), max_runs = $2, addr = $3",
            &[&worker_id, &max, &addr],
        )
        .await
        .map_err(fail("register the worker"))?;
    prune_workers(&client).await?;
    Ok(())
}

/// Removes a worker's `awf_workers` row (at its orderly end).
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub async fn unregister_worker(pool: &Pool, worker_id: &str) -> Result<(), AwfError> {
    let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    client
        .execute(
            "DELETE FROM awf_workers WHERE worker_id = $1",
            &[&worker_id],
        )
        .await
        .map_err(fail("unregister the worker"))?;
    Ok(())
}

/// A pending answer given on some worker for a run this worker holds.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingAnswer {
    /// The interaction request it answers.
    pub request_id: String,
    /// The run that asked.
    pub run_id: RunId,
    /// The answer (`Answer` JSON).
    pub answer: Value,
}

/// Cancel requests and pending answers for the runs `worker_id` holds.
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub async fn control_for(
    pool: &Pool,
    worker_id: &str,
) -> Result<(Vec<RunId>, Vec<PendingAnswer>), AwfError> {
    let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    let cancels = client
        .query(
            "SELECT run_id FROM awf_runs WHERE worker_id = $1 AND queue_state = 'claimed' \
             AND cancel_requested",
            &[&worker_id],
        )
        .await
        .map_err(fail("read cancel requests"))?;
    let answers = client
        .query(
            "SELECT a.request_id, a.run_id, a.answer FROM awf_answers a \
             JOIN awf_runs r ON r.run_id = a.run_id \
             WHERE a.state = 'pending' AND r.worker_id = $1 AND r.queue_state = 'claimed'",
            &[&worker_id],
        )
        .await
        .map_err(fail("read pending answers"))?;
    Ok((
        cancels
            .iter()
            .map(|r| column(r, 0).map(RunId))
            .collect::<Result<_, _>>()?,
        answers
            .iter()
            .map(|r| {
                Ok(PendingAnswer {
                    request_id: column(r, 0)?,
                    run_id: RunId(column(r, 1)?),
                    answer: column(r, 2)?,
                })
            })
            .collect::<Result<_, AwfError>>()?,
    ))
}

/// Marks an answer `accepted` (`error` `None`) or `rejected` with the error
/// (`{"code", "message", "hints"}`).
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub async fn mark_answer(
    pool: &Pool,
    request_id: &str,
    error: Option<&AwfError>,
) -> Result<(), AwfError> {
    let client = pool.get().await.map_err(|e| unavailable("connect", &e))?;
    let (state, body) = match error {
        None => ("accepted", None),
        Some(e) => (
            "rejected",
            Some(crate::storable(serde_json::json!({
                "code": e.code().as_str(),
                "message": e.message(),
                "hints": e.hints(),
            }))),
        ),
    };
    client
        .execute(
            "UPDATE awf_answers SET state = $2, error = $3 WHERE request_id = $1",
            &[&request_id, &state, &body],
        )
        .await
        .map_err(fail("mark the answer"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_inputs_are_masked_once_ended_and_given_back_on_a_takeover() {
        let req = QueuedRequest {
            identifier: "w".into(),
            inputs: vec![
                ("api_token".into(), "tok-s3cr3t".into()),
                ("who".into(), "ada".into()),
                ("DB_PASSWORD".into(), String::new()),
            ],
            config_inputs: serde_json::json!({"my_secret": "s3cr3t-cfg", "n": 1})
                .as_object()
                .cloned()
                .unwrap_or_default(),
            allow_undeclared_inputs: true,
            ..QueuedRequest::default()
        };
        let masked = req.without_secrets();
        assert_eq!(
            masked.inputs,
            vec![
                ("api_token".to_owned(), "***".to_owned()),
                ("who".to_owned(), "ada".to_owned()),
                ("DB_PASSWORD".to_owned(), String::new()),
            ]
        );
        assert_eq!(
            Value::Object(masked.config_inputs),
            serde_json::json!({"my_secret": "***", "n": 1})
        );
        assert!(masked.allow_undeclared_inputs);
        // A takeover (no queued resume) resumes with the secret inputs' real values only.
        let resume = req.to_resume(&RunId("r".into()), &[]);
        assert_eq!(
            resume.inputs,
            vec![
                ("api_token".to_owned(), "tok-s3cr3t".to_owned()),
                ("DB_PASSWORD".to_owned(), String::new()),
            ]
        );
        // `awf run --submit` lets undeclared inputs through; an HTTP request does not.
        assert!(!req.to_run(&RunId("r".into()), &[]).refuse_undeclared_inputs);
        let http = RunRequest {
            refuse_undeclared_inputs: true,
            ..RunRequest::default()
        };
        let queued = QueuedRequest::of_run(&http);
        assert!(!queued.allow_undeclared_inputs);
        assert!(
            queued
                .to_run(&RunId("r".into()), &[])
                .refuse_undeclared_inputs
        );
        // An old row (no field) is refused them, as before.
        let old: QueuedRequest =
            serde_json::from_value(serde_json::json!({"identifier": "w"})).unwrap_or_default();
        assert!(!old.allow_undeclared_inputs);
    }

    #[test]
    fn a_queued_request_keeps_what_a_worker_needs_and_never_the_environment() {
        let mut mocks = BTreeMap::new();
        mocks.insert(
            "a".to_owned(),
            BTreeMap::from([("output".to_owned(), "x".to_owned())]),
        );
        let req = RunRequest {
            identifier: "deploy".into(),
            inputs: vec![("k".into(), "v".into())],
            env: vec![("SECRET".into(), "s3cret".into())],
            working_dir: PathBuf::from("/work/p"),
            mocks,
            interactive: Some(Interactive {
                breakpoints: vec!["b".into()],
            }),
            auto_approve: true,
            prompt_missing_inputs: true,
            ..RunRequest::default()
        };
        let q = QueuedRequest::of_run(&req);
        let text = serde_json::to_string(&q).unwrap();
        assert!(
            !text.contains("s3cret") && !text.contains("SECRET"),
            "{text}"
        );
        let back: QueuedRequest = serde_json::from_str(&text).unwrap();
        assert_eq!(back, q);
        let worker_env = vec![("PATH".to_owned(), "/bin".to_owned())];
        let run = back.to_run(&RunId("r1".into()), &worker_env);
        assert_eq!(run.run_id, Some(RunId("r1".into())));
        assert_eq!(run.env, worker_env);
        assert_eq!(
            (
                run.identifier.as_str(),
                run.inputs.clone(),
                run.working_dir.clone()
            ),
            ("deploy", req.inputs.clone(), req.working_dir.clone())
        );
        assert_eq!(run.mocks, req.mocks);
        assert_eq!(run.interactive, req.interactive);
        assert!(run.auto_approve && run.prompt_missing_inputs);
        // A taken-over run resumes where it stopped, with its recorded inputs (none given).
        let resume = back.to_resume(&RunId("r1".into()), &worker_env);
        assert_eq!(resume.from, ResumeFrom::Current);
        assert!(resume.inputs.is_empty() && !resume.lock_held);
        // Except the secret-named ones, which the record masks: given from the request.
        let mut with_secret = back;
        with_secret.inputs.push(("api_token".into(), "tok".into()));
        let resume = with_secret.to_resume(&RunId("r1".into()), &worker_env);
        assert_eq!(
            resume.inputs,
            vec![("api_token".to_owned(), "tok".to_owned())]
        );
        // A queued resume keeps its starting point and inputs.
        let asked = ResumeRequest {
            run_id: "r1".into(),
            from: ResumeFrom::Step("b".into()),
            inputs: vec![("k".into(), "w".into())],
            ..ResumeRequest::default()
        };
        let q = QueuedRequest::of_resume("deploy", &asked);
        let r = q.to_resume(&RunId("r1".into()), &worker_env);
        assert_eq!(r.from, ResumeFrom::Step("b".into()));
        assert_eq!(r.inputs, asked.inputs);
        // `awf resume` lets undeclared inputs through (warned about); an HTTP resume has
        // them refused by the worker too.
        assert!(!r.refuse_undeclared_inputs);
        let http = ResumeRequest {
            refuse_undeclared_inputs: true,
            ..asked
        };
        let q = QueuedRequest::of_resume("deploy", &http);
        assert!(!q.allow_undeclared_inputs);
        assert!(
            q.to_resume(&RunId("r1".into()), &worker_env)
                .refuse_undeclared_inputs
        );
    }

    #[test]
    fn an_old_or_partial_request_reads_with_defaults() {
        let q: QueuedRequest = serde_json::from_str(r#"{"identifier": "w"}"#).unwrap();
        assert_eq!(q.identifier, "w");
        assert!(q.inputs.is_empty() && q.resume.is_none() && !q.auto_approve);
    }
}
