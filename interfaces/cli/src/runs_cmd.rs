//! Commands over recorded runs: `awf resume`, `awf history`, `awf status`, and `awf config
//! show`. Source: spec/workflow.md §3.11 and §4.2.

use std::io::Write;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::facade::ResumeFrom;
use awf_domain::ports::facade::ResumeRequest;
use awf_domain::ports::store::HistoryRecord;
use awf_domain::ports::store::RunSnapshot;
use awf_domain::ports::store::StoredStatus;
use awf_domain::run::RunId;
use awf_domain::timefmt::format_rfc3339;

use crate::cli::ConfigAction;
use crate::cli::ConfigArgs;
use crate::cli::Format;
use crate::cli::HistoryArgs;
use crate::cli::ResumeArgs;
use crate::cli::StatusArgs;
use crate::ctx::Ctx;
use crate::errors::CliError;
use crate::errors::Outcome;
use crate::json_out;
use crate::run_cmd;
use crate::table::Table;
use crate::wiring;

/// `awf resume <id>` / `awf resume --list`.
pub async fn resume(ctx: &Ctx, args: &ResumeArgs) -> Outcome {
    let mut signals = run_cmd::Signals::install();
    // `--list` is no run: its failures are the error object, as other commands'.
    let fail_list = |e: &AwfError| {
        crate::errors::report(
            &CliError::Awf(e.clone()),
            ctx.json(),
            ctx.hints,
            ctx.err_style,
        )
    };
    // Before the run id is known (no run id given, none matches, the data root cannot be
    // opened): the run-result object `awf run -f json` prints for a failure before start,
    // `run_id` null and `workflow` the id as given.
    let query_text = args.run_id.clone().unwrap_or_default();
    let fail = |e: &AwfError| run_cmd::fail_before_start(ctx, &query_text, e);
    // `--list` only reads: nothing of the data root is created for it.
    let built = if args.list {
        wiring::build_stored(ctx.storage.as_deref(), ctx.store.as_deref())
    } else {
        wiring::build_recording_stored(ctx.storage.as_deref(), ctx.store.as_deref())
    };
    let mut w = match built {
        Ok(w) => w,
        Err(e) => return fail(&e),
    };
    w.name_lock_owner("awf resume");
    if args.list {
        return match list_resumable(ctx, &w) {
            Ok(()) => Outcome::Success,
            Err(e) => fail_list(&e),
        };
    }
    let Some(query) = args.run_id.clone() else {
        return fail(
            &AwfError::new(
                ErrorCode::UserInputValidationFailed,
                "awf resume needs a run id",
            )
            .with_hint("`awf resume --list` shows runs that can be resumed"),
        );
    };
    let run_id = match resolve_run_id(&w, &query) {
        Ok(id) => id,
        Err(e) => return fail(&e),
    };
    // The run's state file, read once for what is decided here before the resume.
    let recorded = w.state_store().ok().map(|store| store.load(&run_id));
    // The run's workflow, as it was started (its id when the state cannot be read).
    let workflow = match &recorded {
        Some(Ok(snap)) => snap.workflow.clone(),
        _ => run_id.clone(),
    };
    // From here on every failure before the resumed run starts is the run-result object
    // naming the run and its workflow (`awf run -f json`'s shape for a failure before start;
    // breaker: "still running in another awf process" and "state file missing" were the
    // error object on stderr, a refused sub-workflow's run the result object on stdout).
    let fail = |e: &AwfError| run_cmd::fail_before_resume(ctx, &run_id, &workflow, e);
    if let Err(e) = w.check_store_writable() {
        return fail(&e);
    }
    // Known to the history only (stopped before its first state file): nothing to resume.
    // (A shared store's queued run has no state file either, and starts from the beginning.)
    if w.pg.get().is_none()
        && let Some(Err(e)) = &recorded
    {
        let history = w.history_store().ok();
        return fail(&awf_application::runs::explain_missing_state(
            e.clone(),
            history.as_deref(),
            &run_id,
        ));
    }
    let inputs = match run_cmd::parse_inputs(&args.inputs) {
        Ok(i) => i,
        Err(e) => return fail(&e),
    };
    let mocks = match run_cmd::parse_mocks(&args.mocks) {
        Ok(m) => m,
        Err(e) => return fail(&e),
    };
    // The project configuration of the directory the run started in (where it goes on), not
    // the resumer's (trial: a broken or other `.awf/config.yaml` here was read first); its
    // `--input` still win over its `inputs:`.
    let run_dir = match &recorded {
        Some(Ok(snap)) => {
            awf_application::run_dir::resume_dir(w.services.host.as_ref(), snap, &w.cwd).ok()
        }
        _ => None,
    };
    let rooted = run_dir
        .filter(|d| *d != w.cwd)
        .and_then(|d| w.services.repository.rooted_at(&d));
    let config = match rooted.map_or_else(|| w.config(), |r| r.config) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    let from = match args.from.as_str() {
        "current" => ResumeFrom::Current,
        "previous" => ResumeFrom::Previous,
        s => ResumeFrom::Step(s.to_owned()),
    };
    run_cmd::warn_unrecorded(&w);
    // A run parked on a usage limit goes on at its reset time, not before.
    if let Some(Ok(snap)) = &recorded
        && snap.status == StoredStatus::Waiting
        && let Some(until) = snap.waiting_until
        && let Ok(left) = until.duration_since(std::time::SystemTime::now())
    {
        let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
        if !ctx.quiet {
            let _ = writeln!(
                std::io::stderr(),
                "waiting for usage limit, resets in {secs}s (at {})",
                format_rfc3339(until)
            );
        }
        // Ctrl-C, SIGTERM, SIGHUP cancel the wait (they were held until the reset, new user):
        // the run is recorded cancelled, as a parked run cancelled through the run service.
        let cancelled = tokio::select! {
            () = tokio::time::sleep(left) => None,
            reason = signals.next() => Some(reason),
        };
        if let Some(reason) = cancelled {
            return cancel_while_waiting(ctx, &w, &run_id, &workflow, reason);
        }
    }
    // Held until the resumed run ends.
    let lock = match awf_application::runs::lock_run(&w.services, &run_id) {
        Ok(l) => l,
        Err(e) => return fail(&e),
    };
    let pg = w.pg.get().cloned();
    // The queue state the run had when this process took it out of the queue.
    let mut taken_from_queue: Option<String> = None;
    if let Some(pg) = &pg {
        // A run that never started (cancelled while queued, or failed before its first step)
        // has no state to resume: it starts from its initial state, as `POST
        // /api/executions/{id}/resume` on a worker does.
        let (pool, id) = (pg.pool().clone(), RunId(run_id.clone()));
        let taken = pg
            .run(async move { awf_postgres::queue::take_unstarted(&pool, &id).await })
            .await
            .and_then(|r| r);
        match taken {
            Ok(Some(queued)) => {
                // The run's start takes the run's lock itself.
                drop(lock);
                let unstarted = Unstarted {
                    pg,
                    run_id: &run_id,
                    queued,
                    inputs,
                    config_inputs: config.inputs,
                    mocks,
                };
                return start_unstarted(ctx, args, &w, unstarted, signals).await;
            }
            Ok(None) => {}
            Err(e) => return fail(&e),
        }
        // A run the queue has (queued, claimed by a worker that died, parked): taken out of
        // it under the lock held here, so that no worker claims it while this process runs
        // it (a worker's claim would wait for the lock and resume it again once this ended).
        let (pool, id) = (pg.pool().clone(), RunId(run_id.clone()));
        match pg
            .run(async move { awf_postgres::queue::take_from_queue(&pool, &id).await })
            .await
            .and_then(|r| r)
        {
            Ok(was) => taken_from_queue = was,
            Err(e) => return fail(&e),
        }
        // An earlier attempt's cancel request: only one asked from now on stops this run.
        let (pool, id) = (pg.pool().clone(), RunId(run_id.clone()));
        let cleared = pg
            .run(async move { awf_postgres::queue::clear_cancel(&pool, &id).await })
            .await
            .and_then(|r| r);
        if let Err(e) = cleared {
            return fail(&e);
        }
    }
    let request = ResumeRequest {
        run_id: run_id.clone(),
        from,
        inputs,
        config_inputs: config.inputs,
        env: w.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        working_dir: w.cwd.clone(),
        lock_held: lock.is_some(),
        auto_approve: args.yes,
        mcp_servers: Vec::new(),
        fs_delegate: None,
        shown_as: None,
        // Warned about, as `awf run` warns.
        refuse_undeclared_inputs: false,
        mocks,
        no_mocks: args.no_mocks,
    };
    let recorder = w.recorder.clone();
    let mut services = w.services.clone();
    if let Some(guard) = w.start_guard() {
        services.recorders.push(guard);
    }
    if services.state_store.is_none() {
        match w.state_store() {
            Ok(s) => services.state_store = Some(s),
            Err(e) => return fail(&e),
        }
    }
    let service = wiring::run_service(services);
    let id = match service.resume(request).await {
        Ok(id) => id,
        Err(e) => {
            // Not resumed after all: the queue has it again, as it had it.
            if let (Some(pg), Some(was)) = (&pg, taken_from_queue) {
                let (pool, back) = (pg.pool().clone(), RunId(run_id.clone()));
                let given = pg
                    .run(async move {
                        awf_postgres::queue::give_back_to_queue(&pool, &back, &was).await
                    })
                    .await
                    .and_then(|r| r);
                if let Err(ge) = given {
                    tracing::warn!("run {run_id}: giving it back to the queue failed: {ge}");
                }
            }
            return fail(&e);
        }
    };
    run_cmd::log_record_location(recorder.as_ref(), &w.data_root, w.store_url.as_deref(), &id);
    let mut signals = signals;
    if let Some(pg) = &pg {
        signals.watch_pg_cancel(pg, &id, recorder.as_ref());
    }
    run_cmd::drive(
        ctx,
        args.output,
        &run_id,
        (service.as_ref(), &id),
        (signals, recorder.as_ref()),
        None,
        w.services.repository.as_ref(),
    )
    .await
}

/// `awf resume` of the run `run_id` (of `workflow`) parked on a usage limit, cancelled by
/// `reason` while it waited for the reset: says so (`WARN received SIGINT, cancelling…`),
/// records the run cancelled as a parked run's cancel does (status `cancelled`, the
/// `EXECUTION.RUN.CANCELLED` error, the signal's exit code, no reset time) and reports it as
/// a cancelled run (`Workflow cancelled.` and the resume hint, or the `-f json` result);
/// the outcome is the signal's exit code (130 SIGINT, 143 SIGTERM, 129 SIGHUP).
fn cancel_while_waiting(
    ctx: &Ctx,
    w: &wiring::Wiring,
    run_id: &str,
    workflow: &str,
    reason: awf_domain::run::CancelReason,
) -> Outcome {
    if !ctx.json() && !ctx.quiet {
        let _ = writeln!(
            std::io::stderr(),
            "{} {}, cancelling…",
            ctx.err_style.yellow("WARN"),
            run_cmd::cancel_cause(reason)
        );
    }
    let store = match w.state_store() {
        Ok(s) => s,
        Err(e) => return run_cmd::fail_before_resume(ctx, run_id, workflow, &e),
    };
    let mut services = w.services.clone();
    services.state_store = Some(store.clone());
    let service = wiring::run_service(services);
    let id = RunId(run_id.to_owned());
    if let Err(e) = service.cancel(&id, reason) {
        // Resumed by another process meanwhile (its lock held): nothing of it is this
        // process's to stop; the wait ends with the signal's exit code all the same.
        let _ = std::io::stderr()
            .write_all(crate::errors::render_text(&e, ctx.hints, ctx.err_style).as_bytes());
        return Outcome::Run(reason.exit_code());
    }
    match store.load(run_id) {
        Ok(snap) => {
            let file = snap
                .workflow_path
                .as_ref()
                .map_or_else(|| snap.workflow.clone(), |p| p.display().to_string());
            let secrets = awf_application::inputs::secrets_to_ask_again(
                w.services.repository.as_ref(),
                &file,
                &snap.inputs,
            );
            run_cmd::report_ended(ctx, awf_application::runs::result_of(&snap), &secrets)
        }
        Err(e) => run_cmd::fail_before_resume(ctx, run_id, workflow, &e),
    }
}

/// A run of the shared store that never started (cancelled while queued, or failed before
/// its first step), taken
/// ([`awf_postgres::queue::take_unstarted`]) to be started by `awf resume`.
struct Unstarted<'a> {
    pg: &'a awf_postgres::PgStore,
    run_id: &'a str,
    /// Its queued request (secret inputs masked `***`).
    queued: awf_postgres::queue::QueuedRequest,
    /// `--input` of the resume: they win over the recorded ones.
    inputs: Vec<(String, String)>,
    config_inputs: serde_json::Map<String, serde_json::Value>,
    /// `--mock` of the resume: each replaces the queued request's mocks of its step.
    mocks: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
}

/// `awf resume` of a run that never started: starts it, with the same run id, from
/// its initial state with its recorded inputs (a masked secret one must be given again, with
/// `--input` or on the terminal's prompt), `--input` overriding them, and its queued mocks
/// (`--no-mocks` drops them, `--mock` replaces a step's). Should it not start (its
/// workflow invalid now, an input missing), it stays as it was (cancelled or failed, never
/// started).
async fn start_unstarted(
    ctx: &Ctx,
    args: &ResumeArgs,
    w: &wiring::Wiring,
    u: Unstarted<'_>,
    signals: run_cmd::Signals,
) -> Outcome {
    let id = RunId(u.run_id.to_owned());
    let env: Vec<(String, String)> = w.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let mut request = u.queued.to_run(&id, &env);
    request
        .inputs
        .retain(|(k, v)| !(v == "***" && awf_domain::mask::is_secret_name(k)));
    for (k, v) in u.inputs {
        request.inputs.retain(|(name, _)| *name != k);
        request.inputs.push((k, v));
    }
    request.config_inputs = u.config_inputs;
    // The queued request's mocks apply, unless dropped (`--no-mocks`) or replaced, a step's
    // at a time (`--mock`), as for a resume of a run that started.
    if args.no_mocks {
        request.mocks.clear();
    }
    request.mocks.extend(u.mocks);
    request.auto_approve = request.auto_approve || args.yes;
    request.prompt_missing_inputs = !ctx.json()
        && std::io::IsTerminal::is_terminal(&std::io::stdin())
        && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let recorder = w.recorder.clone();
    let service = wiring::run_service(w.services.clone());
    let started = match service.start(request).await {
        Ok(started) => started,
        Err(e) => {
            let (pool, back) = (u.pg.pool().clone(), id.clone());
            let _ =
                u.pg.run(async move { awf_postgres::queue::untake_unstarted(&pool, &back).await })
                    .await;
            return run_cmd::fail_before_start(ctx, u.run_id, &e);
        }
    };
    let mut signals = signals;
    signals.watch_pg_cancel(u.pg, &started, recorder.as_ref());
    run_cmd::drive(
        ctx,
        args.output,
        u.run_id,
        (service.as_ref(), &started),
        (signals, recorder.as_ref()),
        None,
        w.services.repository.as_ref(),
    )
    .await
}

/// One `awf resume --list -f json` row: AWF (Go)'s `workflow_id` (the run id),
/// `workflow_name`, `status`, `current_step`, `updated_at`, `progress` (`progress`, see
/// [`awf_application::runs::resume_progress`]), plus `run_id` (the same id), `workflow` (the
/// identifier it was started with), `current_state`, `started_at` and `process_gone` (recorded
/// as running, its awf process dead: as in `awf history -f json`).
pub fn resumable_json(s: &RunSnapshot, progress: &str, process_gone: bool) -> serde_json::Value {
    serde_json::json!({
        "workflow_id": s.run_id,
        "workflow_name": s.workflow_name,
        "status": s.status.go_name(),
        "current_step": s.current_state,
        "updated_at": format_rfc3339(s.updated_at),
        "progress": progress,
        "run_id": s.run_id,
        "workflow": s.workflow,
        "current_state": s.current_state,
        "started_at": format_rfc3339(s.started_at),
        "process_gone": process_gone,
    })
}

fn list_resumable(ctx: &Ctx, w: &wiring::Wiring) -> Result<(), AwfError> {
    let states = w.state_store()?;
    let history = w.history_store().ok();
    let found = awf_application::runs::resumable_runs(states.as_ref(), history.as_deref())?;
    let mut runs = found.runs;
    // A state file that cannot be read is not listed, and says so (breaker: a truncated one
    // was left out without a word).
    if !ctx.quiet {
        for id in found.unreadable {
            eprintln!(
                "{} the state file of run {} cannot be read; it is not listed (`{}` says why)",
                ctx.err_style.yellow("WARN"),
                crate::style::printable(&id),
                crate::errors::with_store_flags(&format!(
                    "awf status {}",
                    crate::style::printable(&awf_domain::shell::quote_arg(&id))
                ))
            );
        }
    }
    // On the shared store: not the runs a worker holds now (its lease current) or will
    // start (queued); they cannot be resumed while so.
    if let Some(url) = w.store_url.as_deref() {
        let store = match w.pg.get() {
            Some(pg) => pg.clone(),
            None => wiring::open_shared(url)?,
        };
        let pool = store.pool().clone();
        let busy: std::collections::BTreeSet<String> = store
            .block_on(async move { awf_postgres::queue::busy_runs(&pool).await })??
            .into_iter()
            .collect();
        runs.retain(|s| !busy.contains(&s.run_id));
        // Cancelled before any worker started them: `awf resume` starts them.
        let known: std::collections::BTreeSet<String> =
            runs.iter().map(|s| s.run_id.clone()).collect();
        runs.extend(
            store
                .cancelled_unstarted()?
                .into_iter()
                .filter(|s| !known.contains(&s.run_id)),
        );
        runs.sort_by(|a, b| {
            b.started_at
                .cmp(&a.started_at)
                .then_with(|| b.run_id.cmp(&a.run_id))
        });
    } else {
        // Not the runs another awf process runs now (it holds their lock): `awf resume`
        // refuses them (new user: listed as `running`, then refused).
        runs.retain(|s| !awf_application::runs::live_elsewhere(&w.services, s));
    }
    let progress_of = |s: &RunSnapshot| awf_application::runs::resume_progress(&w.services, s);
    // The word `awf history` shows too: a run recorded as running whose awf process died is
    // `running (process gone)` (it said `running`, as if it still ran).
    let gone = |s: &RunSnapshot| {
        awf_application::runs::process_gone(
            s,
            w.services.run_locks.as_deref(),
            w.services.host.as_ref(),
        )
    };
    let status_of = |s: &RunSnapshot| {
        if gone(s) {
            "running (process gone)"
        } else {
            s.status.go_name()
        }
    };
    let mut out = std::io::stdout().lock();
    let text = match ctx.format {
        Format::Json => {
            let rows: Vec<serde_json::Value> = runs
                .iter()
                .map(|s| resumable_json(s, &progress_of(s), gone(s)))
                .collect();
            return json_out::print(&rows);
        }
        Format::Quiet => runs.iter().map(|s| format!("{}\n", s.run_id)).collect(),
        _ if runs.is_empty() => "No resumable workflows found\n".to_owned(),
        Format::Table => {
            let mut t = Table::new(&[36, 15, 10, 15, 12, 20]);
            t.header(&[
                "ID",
                "WORKFLOW",
                "STATUS",
                "CURRENT STEP",
                "PROGRESS",
                "UPDATED",
            ]);
            for s in &runs {
                t.row(&[
                    s.run_id.clone(),
                    crate::style::printable(&s.workflow_name).into_owned(),
                    status_of(s).to_owned(),
                    crate::style::printable(&s.current_state).into_owned(),
                    progress_of(s),
                    format_rfc3339(s.updated_at),
                ]);
            }
            t.sep();
            t.text().to_owned()
        }
        Format::Text => {
            let mut rows = vec![
                [
                    "RUN ID", "WORKFLOW", "STATUS", "STATE", "PROGRESS", "UPDATED",
                ]
                .map(str::to_owned)
                .to_vec(),
            ];
            rows.extend(runs.iter().map(|s| {
                vec![
                    s.run_id.clone(),
                    crate::style::printable(&s.workflow_name).into_owned(),
                    status_of(s).to_owned(),
                    crate::style::printable(&s.current_state).into_owned(),
                    progress_of(s),
                    format_rfc3339(s.updated_at),
                ]
            }));
            crate::table::aligned(&rows)
        }
    };
    crate::stdout_check::checked(out.write_all(text.as_bytes()));
    Ok(())
}

/// How `awf history`'s limit was given on the command line `args` (the last one counts, as
/// for the value): `--limit` (`--limit 5`, `--limit=5`) or `-n` (`-n 5`, `-n5`, `-n=5`);
/// `--limit` when neither is there (the default). Arguments after `--` are not flags.
pub fn limit_flag(args: &[String]) -> &'static str {
    let mut flag = "--limit";
    for a in args.iter().skip(1) {
        if a == "--" {
            break;
        }
        if a == "--limit" || a.starts_with("--limit=") {
            flag = "--limit";
        } else if a.starts_with("-n") {
            flag = "-n";
        }
    }
    flag
}

/// `awf history`.
///
/// # Errors
/// Bad filter values (`USER.INPUT.INVALID_FORMAT`), store failures.
pub fn history(ctx: &Ctx, args: &HistoryArgs) -> Result<Outcome, CliError> {
    let w = wiring::build_stored(ctx.storage.as_deref(), ctx.store.as_deref())
        .map_err(CliError::Awf)?;
    let typed: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let filter = awf_application::runs::history_filter(
        args.workflow.as_deref(),
        args.status.as_deref(),
        args.since.as_deref(),
        args.limit,
        limit_flag(&typed),
    )
    .map_err(CliError::Awf)?;
    let store = w.history_store().map_err(CliError::Awf)?;
    let states = w.state_store().ok();
    // Rows a killed awf left `running` after the run ended are written as it ended first
    // (those that cannot be written are shown as it ended all the same, below).
    awf_application::runs::settle_history(
        store.as_ref(),
        states.as_deref(),
        w.services.run_locks.as_deref(),
    );
    // The rows still `running` whose awf process is gone (see `gone_runs`).
    let gone_of = |rows: &[awf_domain::ports::store::HistoryRecord]| {
        awf_application::runs::gone_runs(
            rows,
            states.as_deref(),
            w.services.run_locks.as_deref(),
            w.services.host.as_ref(),
            std::time::SystemTime::now(),
        )
    };
    let mut out = std::io::stdout().lock();
    if args.stats {
        let counts_sub_runs = filter.counts_sub_runs();
        let mut stats = store.stats(&filter).map_err(CliError::Awf)?;
        // Runs whose process is gone are not running: counted apart, as `awf history` marks
        // them.
        if stats.running_count > 0 {
            let running = awf_domain::ports::store::HistoryFilter {
                status: Some(awf_domain::ports::store::StoredStatus::Running),
                limit: None,
                ..filter
            };
            let mut rows = store.list(&running).map_err(CliError::Awf)?;
            rows.retain(|r| running.counts(r.parent_run_id.as_deref()));
            // Those the database could not be told of are not running either.
            for ended in awf_application::runs::settle_ended_rows(&mut rows, states.as_deref()) {
                stats.running_count = stats.running_count.saturating_sub(1);
                match ended {
                    awf_domain::ports::store::StoredStatus::Success => stats.success_count += 1,
                    awf_domain::ports::store::StoredStatus::Cancelled => {
                        stats.cancelled_count += 1;
                    }
                    _ => stats.failed_count += 1,
                }
            }
            let gone = gone_of(&rows).len() as u64;
            stats.process_gone_count = gone.min(stats.running_count);
            stats.running_count -= stats.process_gone_count;
        }
        if ctx.json() {
            json_out::print(&stats)?;
        } else {
            crate::stdout_check::checked(writeln!(out, "Execution Statistics"));
            crate::stdout_check::checked(writeln!(out, "===================="));
            crate::stdout_check::checked(writeln!(
                out,
                "Total Executions: {}",
                stats.total_executions
            ));
            crate::stdout_check::checked(writeln!(out, "Success: {}", stats.success_count));
            crate::stdout_check::checked(writeln!(out, "Failed: {}", stats.failed_count));
            crate::stdout_check::checked(writeln!(out, "Cancelled: {}", stats.cancelled_count));
            crate::stdout_check::checked(writeln!(out, "Running: {}", stats.running_count));
            if stats.process_gone_count > 0 {
                crate::stdout_check::checked(writeln!(
                    out,
                    "Running (process gone): {}",
                    stats.process_gone_count
                ));
            }
            // Only a store that has such runs says so (a shared store's queue, a run parked
            // on a usage limit): the totals add up, as /api/history/stats's counts do.
            if stats.waiting_count > 0 {
                crate::stdout_check::checked(writeln!(out, "Waiting: {}", stats.waiting_count));
            }
            if stats.queued_count > 0 {
                crate::stdout_check::checked(writeln!(out, "Queued: {}", stats.queued_count));
            }
            if let Some(ms) = stats.avg_duration_ms {
                crate::stdout_check::checked(writeln!(
                    out,
                    "Average Duration: {}",
                    go_duration(ms)
                ));
            }
            // The list shows more rows than these count (new user: 19 counted, 21 listed).
            if !counts_sub_runs {
                crate::stdout_check::checked(writeln!(
                    out,
                    "(Counts the runs a user started: a sub-workflow's run is part of the run \
                     that called it; `awf history` lists it marked ↳, `--workflow <name>` counts \
                     every run of that workflow.)"
                ));
            }
        }
        return Ok(Outcome::Success);
    }
    let mut rows = store.list(&filter).map_err(CliError::Awf)?;
    // A row a killed awf left `running` while its state file says the run ended shows how
    // it ended.
    if !awf_application::runs::settle_ended_rows(&mut rows, states.as_deref()).is_empty()
        && let Some(wanted) = filter.status
    {
        rows.retain(|r| r.status == wanted);
    }
    // A row still `running` whose awf process is gone (SIGKILL, crash) says so, as `status`
    // does: its state file names the process.
    let gone = gone_of(&rows);
    if ctx.json() {
        let rows: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                let mut v = history_json(r);
                if gone.contains(&r.id) {
                    v["process_gone"] = serde_json::Value::Bool(true);
                }
                v
            })
            .collect();
        json_out::print(&rows)?;
        return Ok(Outcome::Success);
    }
    if rows.is_empty() {
        crate::stdout_check::checked(writeln!(out, "No execution history found"));
        return Ok(Outcome::Success);
    }
    // `-f table` and `-f quiet` print the same as text, as in AWF (Go) (its integration tests
    // check the three alike: whole ids and names under the same header).
    let text = history_text_marking(&rows, &gone);
    crate::stdout_check::checked(out.write_all(text.as_bytes()));
    Ok(Outcome::Success)
}

/// A run's error message with the failed command's exit code said as `awf run`'s `✗` line
/// says it (`step flaky: exit code 3: not yet`; new user: `awf status` gave `step flaky: not
/// yet`): the exit code and the step are the error's `details`.
fn error_with_exit_code(e: &awf_domain::error::ErrorBody) -> std::borrow::Cow<'_, str> {
    let exit = e
        .details
        .get("exit_code")
        .and_then(serde_json::Value::as_i64)
        .and_then(|c| i32::try_from(c).ok());
    let prefix = e
        .details
        .get("state")
        .and_then(serde_json::Value::as_str)
        .map(|s| format!("step {s}: "))
        .filter(|p| e.message.starts_with(p.as_str()))
        .unwrap_or_default();
    let rest = &e.message[prefix.len()..];
    match crate::printer::with_exit_code(rest, Some(e.code), exit) {
        std::borrow::Cow::Owned(said) => std::borrow::Cow::Owned(format!("{prefix}{said}")),
        std::borrow::Cow::Borrowed(_) => std::borrow::Cow::Borrowed(&e.message),
    }
}

/// A time in milliseconds since the epoch as RFC 3339 (UTC, milliseconds).
fn ms_time(ms: u64) -> String {
    format_rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
}

/// One `awf history -f json` row: AWF (Go)'s `id`, `workflow_id` (the run id, as in Go),
/// `workflow_name`, `status` (Go's words), `exit_code`, `started_at` / `completed_at` (RFC 3339
/// strings; `completed_at` null while running), `duration_ms`, `error_message`; plus `run_id`
/// (the same id), `workflow` (the identifier it was started with), `started_at_ms` /
/// `completed_at_ms` (epoch milliseconds) and `parent_run_id`.
pub fn history_json(r: &HistoryRecord) -> serde_json::Value {
    serde_json::json!({
        "id": r.id,
        "workflow_id": r.id,
        "workflow_name": r.workflow_name,
        "status": r.status.go_name(),
        "exit_code": r.exit_code,
        "started_at": ms_time(r.started_at_ms),
        "completed_at": r.completed_at_ms.map(ms_time),
        "duration_ms": r.duration_ms,
        "error_message": r.error_message,
        "run_id": r.id,
        "workflow": r.workflow_id,
        "started_at_ms": r.started_at_ms,
        "completed_at_ms": r.completed_at_ms,
        "parent_run_id": r.parent_run_id,
        "spend": r.spend,
    })
}

/// A run's spend as one line: `1234 tokens (1000 in, 234 out), $0.012300` (the dollars only
/// when priced).
pub fn spend_text(s: &awf_domain::run::Spend) -> String {
    let mut t = format!(
        "{} tokens ({} in, {} out)",
        s.tokens, s.tokens_input, s.tokens_output
    );
    if let Some(u) = s.usd {
        t.push_str(&format!(", ${u:.6}"));
    }
    t
}

/// AWF (Go)'s history duration: `<1000` ms → `Nms`, `<60000` → `N.Ns`, else `N.Nm`.
pub fn go_duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        format!("{:.1}m", ms as f64 / 60_000.0)
    }
}

/// `awf history` text (also `-f table` / `-f quiet`, as in AWF (Go)): columns `ID  WORKFLOW
/// STATUS  DURATION  COMPLETED`, a dash line under each header, then one row per run with the
/// full run id and the full workflow name (nothing is cut); COMPLETED is `YYYY-MM-DD HH:MM`
/// (UTC), `-` while running.
///
/// Rows in `gone` (running, their awf process dead) are marked, and so is a sub-workflow's
/// run (one another run started): `↳ <workflow> (in <the calling run's id, first 8>)`.
fn history_text_marking(
    rows: &[HistoryRecord],
    gone: &std::collections::BTreeSet<String>,
) -> String {
    let header = ["ID", "WORKFLOW", "STATUS", "DURATION", "COMPLETED"];
    let mut table = vec![
        header.map(str::to_owned).to_vec(),
        header.map(|h| "-".repeat(h.len())).to_vec(),
    ];
    table.extend(rows.iter().map(|r| history_cells(r, gone.contains(&r.id))));
    // A SPEND column only when some run spent on agents (the rest is AWF (Go)'s table).
    if rows.iter().any(|r| r.spend.is_some()) {
        table[0].push("SPEND".to_owned());
        table[1].push("-----".to_owned());
        for (row, r) in table.iter_mut().skip(2).zip(rows) {
            row.push(r.spend.as_ref().map_or_else(|| "-".to_owned(), spend_text));
        }
    }
    crate::table::aligned(&table)
}

/// One history row's cells: id, workflow name (a sub-workflow's run marked, see
/// [`history_text_marking`]), status word (`running (process gone)` for a
/// run whose awf process died), duration, completion minute.
fn history_cells(r: &HistoryRecord, gone: bool) -> Vec<String> {
    let name = crate::style::printable(&r.workflow_name);
    vec![
        r.id.clone(),
        match &r.parent_run_id {
            Some(parent) => {
                format!("↳ {name} (in {})", parent.get(..8).unwrap_or(parent))
            }
            None => name.into_owned(),
        },
        if gone {
            "running (process gone)".to_owned()
        } else {
            r.status.go_name().to_owned()
        },
        r.duration_ms.map_or_else(|| "-".to_owned(), go_duration),
        r.completed_at_ms.map_or_else(
            || "-".to_owned(),
            |ms| {
                let t = ms_time(ms);
                t.get(..16).unwrap_or(&t).replacen('T', " ", 1)
            },
        ),
    ]
}

/// Resolves a run id or a unique prefix of one against the state files and the history.
///
/// # Errors
/// See [`awf_application::runs::match_run_id`]; store failures.
pub fn resolve_run_id(w: &wiring::Wiring, query: &str) -> Result<String, AwfError> {
    let states = w.state_store()?;
    let history = w.history_store().ok();
    awf_application::runs::resolve_run_id(states.as_ref(), history.as_deref(), query)
}

/// The status word ([`StoredStatus::go_name`]), or `running (its awf process is gone; …)` when the
/// process that ran it died (SIGKILL, crash): a sub-workflow run is continued by resuming its
/// parent, which the text names.
fn status_text(s: &RunSnapshot, gone: bool) -> String {
    if gone {
        crate::errors::with_store_flags(&match &s.parent_run_id {
            Some(parent) => format!(
                "running (its awf process is gone; `awf resume {parent}`, its parent run, continues it)"
            ),
            None => format!(
                "running (its awf process is gone; `awf resume {}` continues it)",
                s.run_id
            ),
        })
    } else if let (StoredStatus::Waiting, Some(t)) = (s.status, s.waiting_until) {
        crate::errors::with_store_flags(&format!(
            "waiting (usage limit resets at {}; `awf resume {}` continues it)",
            format_rfc3339(t),
            s.run_id
        ))
    } else {
        s.status.go_name().to_owned()
    }
}

/// A terminal's name as shown to users ([`awf_domain::workflow::terminal_display_name`]: runs recorded before the
/// engine named it so kept the internal `__inline_error_<step>`).
fn terminal_text(name: &str) -> String {
    awf_domain::workflow::terminal_display_name(name)
}

/// The steps of a run in the order it entered them, attempts kept together (never-started
/// ones last, by name): [`awf_domain::run::in_entry_order`].
fn ordered_steps(snap: &RunSnapshot) -> Vec<&awf_domain::run::StepState> {
    awf_domain::run::in_entry_order(snap.states.values())
}

/// `awf status -f json`: the run-result object (`run_id`, `workflow`, `status`, `exit_code`,
/// `terminal`, `duration_ms`, `states`, `outputs`, `error`) with `status` in AWF (Go)'s words
/// (`running`/`completed`/`failed`/`cancelled`), plus AWF (Go)'s `workflow_id` (the run id),
/// `workflow_name`, `current_step` (while not completed), `started_at`, `completed_at` (when
/// finished) and `steps` (`[{name, status, output, stderr, exit_code, started_at,
/// completed_at, error, error_code}]` in the order the run entered them), plus ours: `run_status` (the stored word),
/// `current_state`, `updated_at`, `working_dir` (where the run's steps run; absent for a run
/// recorded before it was kept). `duration_ms` is null when unknown (a killed process);
/// `message` is the success terminal's message the store kept (null without one). A queued
/// run (no worker started it) has `exit_code` and `duration_ms` null; a running one (or one
/// whose process died) has `exit_code` null.
pub fn status_json(
    snap: &RunSnapshot,
    duration: Option<u64>,
    message: Option<&str>,
) -> serde_json::Value {
    let mut result = awf_application::runs::result_of(snap);
    result.message = message.map(str::to_owned);
    let mut v = serde_json::to_value(result).unwrap_or_default();
    let steps: Vec<serde_json::Value> = ordered_steps(snap)
        .into_iter()
        .map(|st| {
            let mut o = serde_json::json!({
                "name": st.name,
                "status": st.status.as_str(),
                "output": st.output,
                "stderr": st.stderr,
                "exit_code": st.exit_code,
                "started_at": st.started_at.map(format_rfc3339),
                "completed_at": st.completed_at.map(format_rfc3339),
                "error": st.error,
                "error_code": st.error_code,
            });
            if let Some(m) = o.as_object_mut() {
                m.retain(|_, v| !v.is_null());
            }
            o
        })
        .collect();
    if let Some(o) = v.as_object_mut() {
        o.insert("status".into(), serde_json::json!(snap.status.go_name()));
        o.insert("duration_ms".into(), serde_json::json!(duration));
        // A queued run has not run and a running one has not ended: no exit code (null, as
        // GET /api/executions/{id} gives; a 0 read as success for a run whose process died).
        if matches!(snap.status, StoredStatus::Queued | StoredStatus::Running) {
            o.insert("exit_code".into(), serde_json::Value::Null);
        }
        o.insert("workflow_id".into(), serde_json::json!(snap.run_id));
        o.insert(
            "workflow_name".into(),
            serde_json::json!(snap.workflow_name),
        );
        if snap.status != StoredStatus::Success {
            o.insert("current_step".into(), serde_json::json!(snap.current_state));
        }
        o.insert(
            "started_at".into(),
            serde_json::json!(format_rfc3339(snap.started_at)),
        );
        if let Some(c) = snap.completed_at {
            o.insert("completed_at".into(), serde_json::json!(format_rfc3339(c)));
        }
        o.insert("steps".into(), serde_json::Value::Array(steps));
        if let Some(t) = snap.waiting_until {
            o.insert("waiting_until".into(), serde_json::json!(format_rfc3339(t)));
        }
        o.insert("run_status".into(), serde_json::json!(snap.status));
        o.insert(
            "current_state".into(),
            serde_json::json!(snap.current_state),
        );
        o.insert(
            "updated_at".into(),
            serde_json::json!(format_rfc3339(snap.updated_at)),
        );
        if let Some(d) = &snap.working_dir {
            o.insert(
                "working_dir".into(),
                serde_json::json!(d.display().to_string()),
            );
        }
    }
    v
}

/// `awf status -f table` (AWF (Go)'s box): a full-width header with the workflow name, the
/// whole run id (Go cuts it to 12 characters; a cut id cannot be copied), the status and the
/// duration, then STEP(12) STATUS(10)
/// DURATION(10) ERROR(30) rows (`-` for an empty cell).
pub fn status_table(snap: &RunSnapshot, duration: Option<u64>) -> String {
    let mut t = Table::new(&[20, 10, 10, 30]);
    t.full_sep();
    let pt = crate::style::printable_text;
    t.full_row(&format!("Workflow: {}", pt(&snap.workflow_name)));
    t.full_row(&format!("ID: {}", snap.run_id));
    t.full_row(&format!(
        "Status: {:<22} Duration: {}",
        snap.status.go_name(),
        match duration {
            Some(ms) => format!("{ms}ms"),
            None if snap.status == StoredStatus::Queued => "-".to_owned(),
            None => "unknown".to_owned(),
        }
    ));
    let steps = ordered_steps(snap);
    if !steps.is_empty() {
        t.header(&["STEP", "STATUS", "DURATION", "ERROR"]);
        for st in steps {
            let dur = match (st.started_at, st.completed_at) {
                (Some(_), Some(_)) => format!("{}ms", st.duration_ms()),
                _ => "-".to_owned(),
            };
            let mut err = st
                .error
                .as_deref()
                .filter(|e| !e.is_empty())
                .unwrap_or("-")
                .lines()
                .next()
                .unwrap_or("-")
                .to_owned();
            if let Some(code) = st.error_code.filter(|_| st.error.is_some()) {
                err = format!("[{code}] {err}");
            }
            t.row(&[
                pt(&st.name).into_owned(),
                st.status.as_str().to_owned(),
                dur,
                pt(&err).into_owned(),
            ]);
        }
    }
    t.sep();
    t.text().to_owned()
}

/// `awf status <id>`.
///
/// # Errors
/// Unknown run (`USER.INPUT.VALIDATION_FAILED`), store failures.
pub fn status(ctx: &Ctx, args: &StatusArgs) -> Result<Outcome, CliError> {
    let w = wiring::build_stored(ctx.storage.as_deref(), ctx.store.as_deref())
        .map_err(CliError::Awf)?;
    let states = w.state_store().map_err(CliError::Awf)?;
    let history = w.history_store().ok();
    let view = awf_application::runs::run_status(
        &w.services,
        states.as_ref(),
        history.as_deref(),
        &args.run_id,
    )
    .map_err(CliError::Awf)?;
    // The journal a run killed at its end left beside its state file goes (readers ignore
    // it; breaker: such journals stayed for ever).
    if w.store_url.is_none() {
        awf_store::remove_ended_journal(&w.data_root, &view.snapshot.run_id);
    }
    let (snap, duration) = (&view.snapshot, view.duration_ms);
    let mut out = std::io::stdout().lock();
    match ctx.format {
        Format::Json => {
            json_out::print(&status_json(snap, duration, view.message.as_deref()))?;
            return Ok(Outcome::Success);
        }
        Format::Quiet => {
            crate::stdout_check::checked(writeln!(out, "{}", snap.status.go_name()));
            return Ok(Outcome::Success);
        }
        Format::Table => {
            crate::stdout_check::checked(out.write_all(status_table(snap, duration).as_bytes()));
            return Ok(Outcome::Success);
        }
        Format::Text => {}
    }
    crate::stdout_check::checked(writeln!(out, "Run:       {}", snap.run_id));
    // Names, messages and errors may hold what a step printed (a message interpolating its
    // output, an error quoting its stderr): shown without their control characters.
    let pt = crate::style::printable_text;
    crate::stdout_check::checked(writeln!(
        out,
        "Workflow:  {} ({})",
        pt(&snap.workflow_name),
        pt(&snap.workflow)
    ));
    // Where its steps run (and `awf resume` goes on); runs recorded before it was kept have
    // no line.
    if let Some(d) = &snap.working_dir {
        crate::stdout_check::checked(writeln!(out, "Directory: {}", pt(&d.display().to_string())));
    }
    crate::stdout_check::checked(writeln!(
        out,
        "Status:    {}",
        status_text(snap, view.process_gone)
    ));
    // A run with no state yet (queued: no worker started it) has no State line; an ended one
    // says its state was the last step run (new user: `State: flaky` beside `Terminal: done`
    // read as if the run were still there).
    if !snap.current_state.is_empty() {
        let ended = matches!(
            snap.status,
            StoredStatus::Success | StoredStatus::Failure | StoredStatus::Cancelled
        );
        let label = if ended { "Last step:" } else { "State:    " };
        crate::stdout_check::checked(writeln!(out, "{label} {}", pt(&snap.current_state)));
    }
    crate::stdout_check::checked(writeln!(
        out,
        "Started:   {}",
        format_rfc3339(snap.started_at)
    ));
    let _ = writeln!(
        out,
        "Duration:  {}",
        match duration {
            Some(ms) => awf_domain::duration::format_go(std::time::Duration::from_millis(ms)),
            // Not run yet: `-`, as `awf history` shows it.
            None if snap.status == StoredStatus::Queued => "-".to_owned(),
            None => "unknown (its awf process stopped without recording when)".to_owned(),
        }
    );
    if let Some(t) = &snap.terminal {
        crate::stdout_check::checked(writeln!(out, "Terminal:  {}", pt(&terminal_text(t))));
    }
    if let Some(m) = &view.message {
        crate::stdout_check::checked(writeln!(out, "Message:   {}", pt(m.trim_end())));
    }
    if let Some(e) = &snap.error {
        crate::stdout_check::checked(writeln!(
            out,
            "Error:     [{}] {}",
            e.code,
            pt(&error_with_exit_code(e))
        ));
    }
    if let Some(s) = &snap.spend {
        crate::stdout_check::checked(writeln!(out, "Spend:     {}", spend_text(s)));
    }
    crate::stdout_check::checked(writeln!(out, "States:"));
    for s in ordered_steps(snap) {
        // A cancelled step was stopped by a signal: its recorded exit code (-1, as AWF (Go)
        // records it) is no exit status, and `cancelled` says it all.
        let code = s
            .exit_code
            .filter(|_| s.status != awf_domain::run::StepStatus::Cancelled)
            .map_or_else(String::new, |c| format!(" exit {c}"));
        let _ = writeln!(
            out,
            "  {:<24} {:<9}{code} ({})",
            pt(&s.name),
            s.status.as_str(),
            awf_domain::duration::format_go(std::time::Duration::from_millis(s.duration_ms()))
        );
        // A failed step's last lines of output, as `awf run` shows them under its line (new
        // user: `a  failed  exit 4` and nothing of what it printed).
        if s.status == awf_domain::run::StepStatus::Failed {
            let tail = crate::output_tail::OutputTail::of_state(s);
            let reason = s
                .error
                .as_deref()
                .and_then(|e| e.lines().next())
                .unwrap_or("");
            let shown = crate::output_tail::render(tail, reason, "    ");
            crate::stdout_check::checked(out.write_all(shown.as_bytes()));
        }
    }
    // The step under way has no record until it ends (new user: a run in its first step
    // showed an empty list).
    if snap.status == StoredStatus::Running
        && !view.process_gone
        && !snap.current_state.is_empty()
        && !snap.states.contains_key(&snap.current_state)
    {
        let _ = writeln!(out, "  {:<24} running", pt(&snap.current_state));
    }
    Ok(Outcome::Success)
}

/// `awf config show -f json`: AWF (Go)'s `path` (`$AWF_CONFIG_PATH` or `.awf/config.yaml`, as
/// given), `exists` (the file is there) and `inputs` (omitted when there are none; secret
/// values masked), plus ours: `file` (the absolute path read, null when none) and `settings`
/// (the other top-level keys).
pub fn config_json(
    go_path: &str,
    file: Option<&std::path::Path>,
    inputs: &serde_json::Value,
    settings: &serde_json::Map<String, serde_json::Value>,
) -> serde_json::Value {
    let mut v = serde_json::json!({
        "path": go_path,
        "exists": file.is_some(),
    });
    if let Some(o) = v.as_object_mut() {
        if inputs.as_object().is_some_and(|m| !m.is_empty()) {
            o.insert("inputs".into(), inputs.clone());
        }
        o.insert(
            "file".into(),
            serde_json::json!(file.map(|p| p.display().to_string())),
        );
        o.insert(
            "settings".into(),
            serde_json::Value::Object(settings.clone()),
        );
    }
    v
}

/// How `awf config show` gives a configuration input written without a value (`dir: null`).
const UNSET_INPUT: &str = "(not set: the workflow's default applies)";

/// `awf config show`.
///
/// # Errors
/// Invalid configuration YAML.
pub fn config(ctx: &Ctx, args: &ConfigArgs) -> Result<Outcome, CliError> {
    let ConfigAction::Show = args.action;
    let w = wiring::build(ctx.storage.as_deref()).map_err(CliError::Awf)?;
    let cfg = w.config().map_err(CliError::Awf)?;
    let masker = awf_domain::mask::Masker::from_named_values(&cfg.inputs);
    let mut shown = cfg.inputs.clone();
    awf_domain::mask::redact_named(&mut shown);
    // An input written without a value is not set: JSON gives it as null, text says so.
    for k in &cfg.unset_inputs {
        shown.insert(k.clone(), serde_json::Value::Null);
    }
    let mut inputs = serde_json::Value::Object(shown);
    masker.mask_json(&mut inputs);
    let mut out = std::io::stdout().lock();
    // AWF (Go)'s `path`: $AWF_CONFIG_PATH, else the relative `.awf/config.yaml`.
    let go_path = w
        .env
        .get("AWF_CONFIG_PATH")
        .filter(|p| !p.is_empty())
        .cloned()
        .unwrap_or_else(|| ".awf/config.yaml".to_owned());
    let mut keys: Vec<(&String, &serde_json::Value)> = inputs
        .as_object()
        .map(|m| m.iter().collect())
        .unwrap_or_default();
    keys.sort_by(|a, b| a.0.cmp(b.0));
    let shown = |v: &serde_json::Value| match v {
        serde_json::Value::Null => UNSET_INPUT.to_owned(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match ctx.format {
        Format::Json => {
            json_out::print(&config_json(
                &go_path,
                cfg.path.as_deref(),
                &inputs,
                &cfg.other,
            ))?;
            return Ok(Outcome::Success);
        }
        Format::Quiet => {
            for (k, _) in &keys {
                crate::stdout_check::checked(writeln!(out, "{k}"));
            }
            return Ok(Outcome::Success);
        }
        Format::Table => {
            if cfg.path.is_none() {
                let _ = writeln!(
                    out,
                    "No project configuration found\n\nRun 'awf init' to create .awf/config.yaml"
                );
                return Ok(Outcome::Success);
            }
            crate::stdout_check::checked(writeln!(out, "Config: {go_path}\n"));
            if keys.is_empty() {
                crate::stdout_check::checked(writeln!(out, "No inputs configured"));
                return Ok(Outcome::Success);
            }
            let mut t = Table::new(&[20, 28]);
            t.header(&["KEY", "VALUE"]);
            for (k, v) in &keys {
                let value = if v.is_null() {
                    "(not set)".to_owned()
                } else {
                    shown(v)
                };
                t.row(&[(*k).clone(), value]);
            }
            t.sep();
            crate::stdout_check::checked(out.write_all(t.text().as_bytes()));
            return Ok(Outcome::Success);
        }
        Format::Text => {}
    }
    match &cfg.path {
        Some(p) => {
            crate::stdout_check::checked(writeln!(out, "Config: {}", p.display()));
        }
        None => {
            let _ = writeln!(
                out,
                "Config: none (create .awf/config.yaml, or set AWF_CONFIG_PATH)\n\
                 Run 'awf init' to create .awf/config.yaml"
            );
        }
    }
    crate::stdout_check::checked(writeln!(out, "Inputs:"));
    if let Some(m) = inputs.as_object() {
        if m.is_empty() {
            crate::stdout_check::checked(writeln!(out, "  (none)"));
        }
        for (k, v) in m {
            crate::stdout_check::checked(writeln!(out, "  {k}: {}", shown(v)));
        }
    }
    if !cfg.other.is_empty() {
        crate::stdout_check::checked(writeln!(out, "Settings:"));
        for (k, v) in &cfg.other {
            crate::stdout_check::checked(writeln!(out, "  {k}: {v}"));
        }
    }
    for d in &cfg.diagnostics {
        let _ = writeln!(std::io::stderr().lock(), "WARN {}", config_warning(d));
    }
    Ok(Outcome::Success)
}

/// A warning about the project configuration as its `WARN` line says it: `path: message`,
/// then its hint in parentheses, as a workflow's warnings are said in a run (new user: an
/// unknown key `input` was not told `did you mean 'inputs'?`).
pub(crate) fn config_warning(d: &awf_domain::ports::repository::Diagnostic) -> String {
    let text = match &d.hint {
        Some(h) => format!("{}: {} ({h})", d.path, d.message),
        None => format!("{}: {}", d.path, d.message),
    };
    // A key is the user's text: no raw control characters.
    crate::style::printable_text(&text).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `awf history -n 0` named `--limit`, a flag the user did not type.
    #[test]
    fn the_limit_flag_is_named_as_typed() {
        let typed = |args: &[&str]| {
            let v: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
            limit_flag(&v)
        };
        assert_eq!(typed(&["awf", "history", "-n", "0"]), "-n");
        assert_eq!(typed(&["awf", "history", "-n0"]), "-n");
        assert_eq!(typed(&["awf", "history", "--limit", "0"]), "--limit");
        assert_eq!(typed(&["awf", "history", "--limit=0"]), "--limit");
        // The last one given is the value used.
        assert_eq!(typed(&["awf", "history", "--limit", "3", "-n", "0"]), "-n");
        assert_eq!(
            typed(&["awf", "history", "--no-color", "--limit=0"]),
            "--limit"
        );
        assert_eq!(typed(&["awf", "history"]), "--limit");
        assert_eq!(typed(&["awf", "history", "--", "-n"]), "--limit");
    }

    const IDS: [&str; 3] = [
        "3f2a9c1e-0000-4000-8000-000000000001",
        "3f2b0000-0000-4000-8000-000000000002",
        "9d00aa11-0000-4000-8000-000000000003",
    ];

    #[test]
    fn history_durations_use_go_s_units() {
        assert_eq!(go_duration(999), "999ms");
        assert_eq!(go_duration(1_250), "1.2s");
        assert_eq!(go_duration(59_999), "60.0s");
        assert_eq!(go_duration(90_000), "1.5m");
    }

    #[test]
    fn history_text_cuts_nothing_and_marks_running_rows() {
        let row = HistoryRecord {
            id: IDS[0].to_owned(),
            workflow_id: "wf/x.yaml".to_owned(),
            workflow_name: "a-very-long-workflow-name-that-goes-on-and-on".to_owned(),
            status: StoredStatus::Running,
            exit_code: None,
            started_at_ms: 0,
            completed_at_ms: None,
            duration_ms: None,
            error_message: None,
            parent_run_id: None,
            spend: None,
        };
        let text = history_text_marking(
            std::slice::from_ref(&row),
            &std::collections::BTreeSet::new(),
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[2],
            format!("{}  {}  running  -         -", IDS[0], row.workflow_name)
        );
        let v = history_json(&row);
        assert_eq!(v["workflow_id"], serde_json::json!(IDS[0]));
        assert_eq!(v["workflow"], serde_json::json!("wf/x.yaml"));
        assert_eq!(v["completed_at"], serde_json::Value::Null);
        assert_eq!(
            v["started_at"],
            serde_json::json!("1970-01-01T00:00:00.000Z")
        );
    }

    #[test]
    fn inline_failure_terminals_are_shown_by_their_step() {
        assert_eq!(
            terminal_text("__inline_error_verify"),
            "verify's on_failure"
        );
        assert_eq!(terminal_text("done"), "done");
    }
}
