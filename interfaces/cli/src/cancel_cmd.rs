//! `awf cancel RUN_ID --store URL`: cancels a run of the shared store (issue 15), wherever it
//! is: a queued one is cancelled at once (no worker will start it), a running one is stopped
//! by its worker within a second, as `DELETE /api/executions/{id}` on any worker does; one
//! run by a terminal `awf run --store` / `awf resume --store` process is stopped by that
//! process within a second (it polls the run's cancel request), as Ctrl-C would.
//!
//! A run parked on a usage limit is cancelled at once (no worker resumes it at its reset),
//! and so is one recorded `running` whose terminal process is gone (SIGKILLed: it no longer
//! holds the run's lock).
//!
//! Without a shared store it answers for a run of the local store: ended (`run RUN_ID has
//! ended already (STATUS)`), parked (cancelled), or run by another live awf process (refused
//! naming it and its pid: `kill -INT PID` stops it there, as Ctrl-C in its terminal).
//!
//! Text output: `cancelled RUN_ID` (it was queued or parked), `cancelled RUN_ID (no awf
//! process was running it)`, `cancel requested for RUN_ID (its worker
//! stops it)`, `cancel requested for RUN_ID (the awf process running it stops it)` or `run RUN_ID has ended already (STATUS)` (also for a run cancelled
//! before); `-f json`: `{"run_id", "status":
//! "cancelled" | "cancel_requested" | "ended"}`. Exit 0 in each case (cancelling is
//! idempotent).

use std::io::Write;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::store::StoredStatus;
use awf_domain::run::CancelReason;
use awf_domain::run::RunId;
use awf_postgres::queue::CancelOutcome;

use crate::cli::CancelArgs;
use crate::ctx::Ctx;
use crate::errors::CliError;
use crate::errors::Outcome;
use crate::json_out;
use crate::wiring;

/// Cancels the run `args.run_id` names (a unique prefix is enough) in the shared store.
///
/// Without a shared store, a run of the local store: see [`cancel_local`].
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` for an ambiguous or unknown id (or, without a shared store,
/// a run the local store cannot say more of; hint: how to stop other runs);
/// `USER.FACADE.INPUT_REJECTED` without a shared store for a run another live awf process
/// runs (hint: its pid, `kill -INT PID`) or one whose process is gone; `SYSTEM.STORE.*` when
/// the store cannot be reached.
pub fn run(ctx: &Ctx, args: &CancelArgs) -> Result<Outcome, CliError> {
    let w = wiring::build_stored(ctx.storage.as_deref(), ctx.store.as_deref())
        .map_err(CliError::Awf)?;
    let Some(url) = w.store_url.clone() else {
        return cancel_local(ctx, &w, args.run_id.trim());
    };
    let run_id = crate::runs_cmd::resolve_run_id(&w, args.run_id.trim()).map_err(CliError::Awf)?;
    let store = match w.pg.get() {
        Some(pg) => pg.clone(),
        None => wiring::open_shared(&url).map_err(CliError::Awf)?,
    };
    let pool = store.pool().clone();
    let id = RunId(run_id.clone());
    let outcome = store
        .block_on(async move { awf_postgres::queue::request_cancel(&pool, &id).await })
        .map_err(CliError::Awf)?
        .map_err(CliError::Awf)?;
    let (status, text) = match outcome {
        CancelOutcome::CancelledQueued | CancelOutcome::CancelledParked => {
            ("cancelled", format!("cancelled {run_id}"))
        }
        CancelOutcome::CancelledUnheld => (
            "cancelled",
            format!("cancelled {run_id} (no awf process was running it)"),
        ),
        CancelOutcome::Asked => (
            "cancel_requested",
            format!("cancel requested for {run_id} (its worker stops it)"),
        ),
        CancelOutcome::AskedProcess => (
            "cancel_requested",
            format!("cancel requested for {run_id} (the awf process running it stops it)"),
        ),
        CancelOutcome::Ended(status) => {
            let how = w
                .state_store()
                .and_then(|s| s.load(&run_id))
                .map(|s| s.status.go_name().to_owned())
                .unwrap_or(status);
            ("ended", format!("run {run_id} has ended already ({how})"))
        }
        CancelOutcome::Unknown => {
            return Err(CliError::Awf(
                AwfError::new(
                    ErrorCode::UserFacadeRunNotFound,
                    format!("no run with id {run_id}"),
                )
                .with_hint("`awf history` lists the runs of the store"),
            ));
        }
    };
    print_outcome(ctx, &run_id, status, &text)
}

/// Prints what a cancel did: `{"run_id", "status"}` with `-f json`, else `text`.
fn print_outcome(ctx: &Ctx, run_id: &str, status: &str, text: &str) -> Result<Outcome, CliError> {
    if ctx.json() {
        json_out::print(&serde_json::json!({"run_id": run_id, "status": status}))?;
    } else {
        let mut out = std::io::stdout().lock();
        crate::stdout_check::checked(writeln!(out, "{text}"));
    }
    Ok(Outcome::Success)
}

/// The refusal of `awf cancel` without a shared store for a run the local store does not
/// know (or cannot say more of).
fn no_shared_store() -> AwfError {
    AwfError::new(
        ErrorCode::UserInputValidationFailed,
        "awf cancel cancels runs of the shared store, and none is named",
    )
    .with_hint(
        "add --store postgresql://USER@HOST:PORT/DB (or export AWF_STORE=…); a run of \
         `awf run` stops with Ctrl-C, one of `awf serve` with DELETE /api/executions/{id}",
    )
}

/// `awf cancel RUN_ID` without a shared store, for a run of the local store (new user: it
/// refused with no way forward): one that ended says so (`run RUN_ID has ended already
/// (STATUS)`, exit 0, as with a store); one parked on a usage limit is cancelled (`cancelled
/// RUN_ID`); one a live `awf run` / `awf resume` / `awf serve` process runs is refused naming
/// that process, its pid and how to stop it there (`kill -INT PID`), as `DELETE
/// /api/executions/{id}` answers it; one whose process is gone is refused saying so (`awf
/// resume` continues it).
fn cancel_local(ctx: &Ctx, w: &wiring::Wiring, query: &str) -> Result<Outcome, CliError> {
    let run_id = crate::runs_cmd::resolve_run_id(w, query).map_err(|e| {
        // Not a run of this machine: maybe one of a shared store.
        CliError::Awf(e.with_hint(
            "a run of a shared store is cancelled with --store postgresql://USER@HOST:PORT/DB \
             (or AWF_STORE)",
        ))
    })?;
    let store = w.state_store().map_err(CliError::Awf)?;
    let snap = store.load(&run_id).map_err(CliError::Awf)?;
    match snap.status {
        StoredStatus::Success | StoredStatus::Failure | StoredStatus::Cancelled => {
            let text = format!("run {run_id} has ended already ({})", snap.status.go_name());
            print_outcome(ctx, &run_id, "ended", &text)
        }
        StoredStatus::Running | StoredStatus::Waiting => {
            // The run service of this process holds no run: it says who does (or that nobody
            // does any more), and cancels a parked one.
            let mut services = w.services.clone();
            services.state_store = Some(store);
            let service = wiring::run_service(services);
            match service.cancel(&RunId(run_id.clone()), CancelReason::Requested) {
                Ok(()) => print_outcome(ctx, &run_id, "cancelled", &format!("cancelled {run_id}")),
                Err(e) if e.code() == ErrorCode::UserFacadeRunNotFound => {
                    Err(CliError::Awf(no_shared_store()))
                }
                Err(e) => Err(CliError::Awf(e)),
            }
        }
        StoredStatus::Queued => Err(CliError::Awf(no_shared_store())),
    }
}
