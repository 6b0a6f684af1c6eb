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
//! Text output: `cancelled RUN_ID` (it was queued or parked), `cancelled RUN_ID (no awf
//! process was running it)`, `cancel requested for RUN_ID (its worker
//! stops it)`, `cancel requested for RUN_ID (the awf process running it stops it)` or `run RUN_ID has ended already (STATUS)` (also for a run cancelled
//! before); `-f json`: `{"run_id", "status":
//! "cancelled" | "cancel_requested" | "ended"}`. Exit 0 in each case (cancelling is
//! idempotent).

use std::io::Write;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
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
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` without a shared store (hint: how to stop other runs) or for
/// an ambiguous or unknown id; `SYSTEM.STORE.*` when the store cannot be reached.
pub fn run(ctx: &Ctx, args: &CancelArgs) -> Result<Outcome, CliError> {
    let w = wiring::build_stored(ctx.storage.as_deref(), ctx.store.as_deref())
        .map_err(CliError::Awf)?;
    let Some(url) = w.store_url.clone() else {
        return Err(CliError::Awf(
            AwfError::new(
                ErrorCode::UserInputValidationFailed,
                "awf cancel cancels runs of the shared store, and none is named",
            )
            .with_hint(
                "add --store postgresql://USER@HOST:PORT/DB (or export AWF_STORE=…); a run of \
                 `awf run` stops with Ctrl-C, one of `awf serve` with DELETE /api/executions/{id}",
            ),
        ));
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
    if ctx.json() {
        json_out::print(&serde_json::json!({"run_id": run_id, "status": status}))?;
    } else {
        let mut out = std::io::stdout().lock();
        crate::stdout_check::checked(writeln!(out, "{text}"));
    }
    Ok(Outcome::Success)
}
