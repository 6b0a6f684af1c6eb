//! `awf run --submit WORKFLOW [--input k=v]… --store URL`: queues a run in the shared store
//! for a worker (`awf serve --store`) and prints its id, without running it (issue 15).
//!
//! Text output: the run id alone on stdout; `-f json`: `{"run_id": …, "status": "queued"}`.
//! Exit 0 once the row is queued. The worker that claims it runs it with its own
//! environment; the request keeps the identifier, inputs, project configuration inputs,
//! working directory, mocks, breakpoints and `--yes`.

use std::io::Write;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::facade::RunRequest;

use crate::ctx::Ctx;
use crate::errors::Outcome;
use crate::json_out;
use crate::wiring::Wiring;

/// Queues `request` in the shared store named by `--store`/`AWF_STORE`.
///
/// The workflow is found, validated and its inputs checked first (as `awf run` does before
/// starting), and queued by its file's absolute path.
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` without a store URL (hint: how to give one); what `awf run`
/// refuses before starting (`USER.FACADE.WORKFLOW_NOT_FOUND`, `WORKFLOW.*`, invalid or
/// missing inputs); `SYSTEM.STORE.*` when the store cannot be reached or refuses.
pub fn submit(ctx: &Ctx, w: &Wiring, request: &RunRequest) -> Result<Outcome, AwfError> {
    let Some(url) = crate::wiring::store_url(ctx.store.as_deref(), &w.env) else {
        return Err(AwfError::new(
            ErrorCode::UserInputValidationFailed,
            "--submit queues the run in the shared store, and none is named",
        )
        .with_hint("add --store postgresql://USER@HOST:PORT/DB, or export AWF_STORE=…"));
    };
    if !awf_postgres::is_postgres_url(&url) {
        return Err(AwfError::new(
            ErrorCode::UserInputValidationFailed,
            format!(
                "{}{:?} is not a PostgreSQL URL",
                crate::wiring::store_source(&url, &w.env),
                awf_postgres::redacted(&url)
            ),
        )
        .with_hint("use postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE"));
    }
    // Checked here as `awf run` would check it before starting (the workflow found, loaded
    // and valid, the inputs given and valid), so a bad request is refused now, not by the
    // worker that takes it; and queued by its file's absolute path, so any worker finds the
    // workflow the submitter meant, whatever its own working directory and search path.
    let loaded = w.services.repository.load(&request.identifier, None)?;
    awf_application::plan::plan_loaded(
        &w.services,
        &request.identifier,
        &loaded,
        &request.inputs,
        &request.config_inputs,
        &w.env,
        None,
    )?;
    // The warnings `awf run` shows before the first state (undeclared `--input` names among
    // them), on stderr the same way; the run is queued all the same, as `awf run` runs it.
    for message in awf_application::validation::run_warnings(&w.services, &loaded, &request.inputs)
    {
        warn(ctx, &message);
    }
    let mut request = request.clone();
    if let Some(file) = &loaded.source_map.file {
        request.identifier = w.cwd.join(file).display().to_string();
    }
    let store = awf_postgres::PgStore::connect(&url)?;
    let run_id = w.services.ids.run_id();
    // Shown by its name (as `awf run` records it), queued by its path.
    let queued =
        awf_postgres::queue::QueuedRequest::of_run(&request).named(Some(loaded.workflow.name));
    let pool = store.pool().clone();
    let id = run_id.clone();
    store.block_on(async move { awf_postgres::queue::submit(&pool, &id, &queued).await })??;
    if ctx.json() {
        json_out::print(&serde_json::json!({"run_id": run_id.0, "status": "queued"}))?;
    } else {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", run_id.0);
        let _ = out.flush();
    }
    Ok(Outcome::Success)
}

/// A run warning on stderr as `awf run` writes it: `WARN <message>` (control characters
/// escaped), one JSON object with `--log-format json`, nothing under `--log-level error`.
fn warn(ctx: &Ctx, message: &str) {
    let level = awf_domain::event::LogLevel::Warn;
    if !awf_telemetry::LogConfig::shows(ctx.run_log_level, level) {
        return;
    }
    let line = if ctx.log_json {
        awf_telemetry::LogConfig::run_log_json(std::time::SystemTime::now(), level, None, message)
    } else {
        format!(
            "{} {}",
            ctx.err_style.yellow("WARN"),
            crate::style::printable_text(message)
        )
    };
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}
