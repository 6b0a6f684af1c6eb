//! `awf run`: starts a run through the run service, projects its events, handles SIGINT/SIGTERM,
//! prints the result. With `--dry-run`, prints the plan instead and executes nothing.
//!
//! Source: spec/workflow.md §3.1, §3.10, §3.12, §4.2; shared/conformance/README.md.

use std::io::IsTerminal;
use std::io::Write;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::event::RunEvent;
use awf_domain::ports::RunService;
use awf_domain::ports::facade::RunRequest;
use awf_domain::ports::service::SubscriptionItem;
use awf_domain::run::CancelReason;
use awf_domain::run::RunId;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use tokio::signal::unix::Signal;
use tokio::signal::unix::SignalKind;
use tokio::signal::unix::signal;

use crate::cli::RunArgs;
use crate::ctx::Ctx;
use crate::dry_run;
use crate::errors;
use crate::errors::Outcome;
use crate::json_out;
use crate::printer::TextPrinter;
use crate::progress::LiveProgress;
use crate::wiring;
use crate::wiring::Wiring;

/// Splits `--input` values at the first `=`.
///
/// # Errors
/// `USER.INPUT.INVALID_FORMAT` for a value without `=` or with an empty name. The message
/// quotes the argument, except one that may hold a value (it has an `=`, or names a secret
/// such as `API_KEY:sk-…`): that is not repeated.
pub fn parse_inputs(raw: &[String]) -> Result<Vec<(String, String)>, AwfError> {
    raw.iter()
        .map(|item| match item.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.to_owned())),
            _ => {
                let shown = if item.contains('=') || awf_domain::mask::is_secret_name(item) {
                    "(not shown: it may hold a secret)".to_owned()
                } else {
                    format!("'{item}'")
                };
                Err(AwfError::new(
                    ErrorCode::UserInputInvalidFormat,
                    format!("invalid input {shown}: expected name=value"),
                )
                .with_hint("Use --input name=value (repeat the flag for several inputs)."))
            }
        })
        .collect()
}

/// The values a mock's `status` may take (in any case, exactly: no spaces around): `failed`
/// fails the step, `completed` (the default) answers it successfully.
const MOCK_STATUSES: [&str; 2] = ["failed", "completed"];

/// Parses `--mock states.<step>.<field>=<value>` flags into step → field → value.
///
/// # Errors
/// `USER.INPUT.INVALID_FORMAT` when a flag is not of that shape, names a field other than
/// `output`, `stderr` or `status`, or gives a status other than `failed` or `completed`.
pub fn parse_mocks(
    raw: &[String],
) -> Result<std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>, AwfError>
{
    let mut out: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>> =
        std::collections::BTreeMap::new();
    for item in raw {
        let bad = || {
            AwfError::new(
                ErrorCode::UserInputInvalidFormat,
                format!("invalid mock '{item}': expected states.<step>.<field>=<value>"),
            )
            .with_hint("for example: --mock states.review.output='looks good'")
        };
        let (key, value) = item.split_once('=').ok_or_else(bad)?;
        let rest = key.trim().strip_prefix("states.").ok_or_else(bad)?;
        let (step, field) = rest.rsplit_once('.').ok_or_else(bad)?;
        let field = field.to_ascii_lowercase();
        if step.is_empty() {
            return Err(bad());
        }
        if !matches!(field.as_str(), "output" | "stderr" | "status") {
            // The field as typed: all after the step's name (`outputs.tgz`, not `tgz`).
            let typed = rest.split_once('.').map_or(rest, |(_, f)| f);
            let hint = match typed.split_once('.') {
                // A sub-workflow call's `Outputs` come from a JSON object `output`.
                Some((outputs, key)) if outputs.eq_ignore_ascii_case("outputs") => {
                    let first = rest.split_once('.').map_or(rest, |(s, _)| s);
                    let json = serde_json::json!({ key: value }).to_string();
                    format!(
                        "a mocked sub-workflow call's Outputs come from its output as a JSON \
                         object: --mock {}",
                        awf_domain::shell::quote_arg(&format!("states.{first}.output={json}"))
                    )
                }
                _ => "--mock states.STEP.output=TEXT, states.STEP.stderr=TEXT or \
                      states.STEP.status=failed (a failed mock exits 1)"
                    .to_owned(),
            };
            return Err(AwfError::new(
                ErrorCode::UserInputInvalidFormat,
                format!("invalid mock '{item}': a mock sets output, stderr or status, not {typed}"),
            )
            .with_hint(hint));
        }
        if field == "status" && !MOCK_STATUSES.iter().any(|s| s.eq_ignore_ascii_case(value)) {
            return Err(AwfError::new(
                ErrorCode::UserInputInvalidFormat,
                format!(
                    "invalid mock '{item}': a mock's status is failed or completed, not {value:?}"
                ),
            )
            .with_hint(
                "--mock states.STEP.status=failed (the step fails, exit code 1) or \
                 states.STEP.status=completed (it succeeds, the default)",
            ));
        }
        out.entry(step.to_owned())
            .or_default()
            .insert(field, value.to_owned());
    }
    Ok(out)
}

/// The fields given more than once among `--mock` flags (`states.<step>.<field>`, each once,
/// in the order first repeated): as with `--input`, the last value is used. Flags
/// [`parse_mocks`] refuses are not looked at.
pub fn repeated_mocks(raw: &[String]) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    let mut warned = std::collections::HashSet::new();
    let mut repeated = Vec::new();
    for item in raw {
        let Some((step, field)) = item
            .split_once('=')
            .and_then(|(key, _)| key.trim().strip_prefix("states."))
            .and_then(|rest| rest.rsplit_once('.'))
        else {
            continue;
        };
        let key = format!("states.{step}.{}", field.to_ascii_lowercase());
        if !seen.insert(key.clone()) && warned.insert(key.clone()) {
            repeated.push(key);
        }
    }
    repeated
}

/// Runs `awf run`. Every failure is reported here (text on stderr, or the run-result object
/// on stdout with `-f json`), so the outcome is final.
pub async fn run(ctx: &Ctx, args: &RunArgs) -> Outcome {
    // Input prompts come first, with the default SIGINT disposition: Ctrl-C at a prompt
    // ends awf at once (exit 130). Signals are ours before anything is started, so a signal
    // never kills awf with children running.
    match prepare(ctx, args) {
        Ok((w, request)) => {
            let signals = Signals::install();
            if args.dry_run {
                return dry_run(ctx, &w, &request);
            }
            if args.submit {
                let request = RunRequest {
                    prompt_missing_inputs: false,
                    ..request
                };
                return crate::submit_cmd::submit(ctx, &w, &request)
                    .unwrap_or_else(|e| fail_before_start(ctx, &args.workflow, &e));
            }
            execute(ctx, args, w, request, signals).await
        }
        Err(e) => fail_before_start(ctx, &args.workflow, &e),
    }
}

/// The names given more than once among `--input` pairs (each once, in the order first
/// repeated): the last value is the one used, which a typo'd or pasted command line would
/// otherwise do silently.
pub fn repeated_inputs(inputs: &[(String, String)]) -> Vec<&str> {
    let mut seen = std::collections::HashSet::new();
    let mut warned = std::collections::HashSet::new();
    let mut repeated: Vec<&str> = Vec::new();
    for (k, _) in inputs {
        if !seen.insert(k.as_str()) && warned.insert(k.as_str()) {
            repeated.push(k);
        }
    }
    repeated
}

fn prepare(ctx: &Ctx, args: &RunArgs) -> Result<(Wiring, RunRequest), AwfError> {
    let inputs = parse_inputs(&args.inputs)?;
    if !ctx.json() && !ctx.quiet {
        let mut err = std::io::stderr().lock();
        for name in repeated_inputs(&inputs) {
            let _ = writeln!(
                err,
                "{} {}",
                ctx.err_style.yellow("WARN"),
                crate::style::printable(&format!(
                    "--input {} is given more than once; the last value is used",
                    awf_domain::shell::quote_arg(name)
                ))
            );
        }
    }
    // A dry run records nothing, like the commands that run no workflow.
    let mut w = if args.dry_run {
        wiring::build_stored(ctx.storage.as_deref(), ctx.store.as_deref())?
    } else {
        wiring::build_recording_stored(ctx.storage.as_deref(), ctx.store.as_deref())?
    };
    w.name_lock_owner("awf run");
    if !ctx.json() && !ctx.quiet {
        w.warn_workflows_path(ctx.err_style);
    }
    // A user that may only read the shared store is refused before anything starts.
    w.check_store_writable()?;
    let config = w.config()?;
    if !ctx.json() && !ctx.quiet {
        let mut err = std::io::stderr().lock();
        for d in &config.diagnostics {
            let _ = writeln!(
                err,
                "{} {}",
                ctx.err_style.yellow("WARN"),
                crate::runs_cmd::config_warning(d)
            );
        }
    }
    let mut inputs = awf_application::runs::expand_prompt_refs(
        inputs,
        &awf_application::runs::prompt_dirs(&w.env, &awf_yaml::project_root(&w.cwd), &w.config_dir),
        w.services.host.as_ref(),
    )?;
    // On a terminal the run asks for missing required inputs (`MissingInput` requests,
    // answered by `interact`); without one they are a USER error listing each of them.
    let on_terminal =
        !ctx.json() && std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let prompt_missing_inputs = on_terminal && !args.dry_run;
    if on_terminal && args.dry_run {
        // A dry run starts no run to ask through: the same questions, answered here.
        ask_for_dry_run(ctx, &w, &args.workflow, &config.inputs, &mut inputs);
    }
    let mocks = parse_mocks(&args.mocks)?;
    if !ctx.json() && !ctx.quiet {
        let mut err = std::io::stderr().lock();
        for key in repeated_mocks(&args.mocks) {
            let _ = writeln!(
                err,
                "{} {}",
                ctx.err_style.yellow("WARN"),
                crate::style::printable(&format!(
                    "--mock {key} is given more than once; the last value is used"
                ))
            );
        }
    }
    warn_unknown_breakpoints(ctx, &w, args);
    let breakpoints: Vec<String> = args
        .breakpoints
        .iter()
        .map(|b| b.trim().to_owned())
        .filter(|b| !b.is_empty())
        .collect();
    // Only a named breakpoint makes the run stop (`--breakpoint ""` is warned about; it made
    // the run stop at every step, as `--interactive` does).
    let interactive = (args.interactive || !breakpoints.is_empty())
        .then_some(awf_domain::ports::facade::Interactive { breakpoints });
    let request = RunRequest {
        mocks,
        interactive,
        only_step: args.step.clone(),
        identifier: args.workflow.clone(),
        inputs,
        config_inputs: config.inputs,
        env: w.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        working_dir: w.cwd.clone(),
        prompt_missing_inputs,
        auto_approve: args.yes,
        mcp_servers: Vec::new(),
        fs_delegate: None,
        run_id: None,
        // `awf run` warns about undeclared inputs (they are not exported either way); so does
        // `awf run --submit`, and the worker that takes the run lets them through as well.
        refuse_undeclared_inputs: false,
        shown_as: None,
        started_at: None,
    };
    Ok((w, request))
}

/// `--dry-run` on a terminal: asks for the missing required inputs as a run would (the same
/// `MissingInput` requests, answered by `interact`, checked by the input's rules). At end of
/// input it stops asking: the inputs not answered are shown as placeholders, as without a
/// terminal.
fn ask_for_dry_run(
    ctx: &Ctx,
    w: &Wiring,
    identifier: &str,
    config: &serde_json::Map<String, serde_json::Value>,
    inputs: &mut Vec<(String, String)>,
) {
    use awf_domain::interaction::Answer;
    use awf_domain::interaction::InteractionRequest;
    use awf_domain::interaction::RequestKind;
    // A workflow that cannot be loaded is reported by the plan.
    let Ok(loaded) =
        awf_domain::ports::WorkflowRepository::load(w.repository.as_ref(), identifier, None)
    else {
        return;
    };
    let term = crate::interact::Terminal::new(ctx);
    let missing = awf_application::inputs::missing_required(&loaded.workflow, inputs, config);
    for (n, def) in missing.into_iter().enumerate() {
        let mut problem = None;
        loop {
            let request = InteractionRequest {
                request_id: format!("dry-run:{}", n + 1),
                step: None,
                kind: RequestKind::MissingInput {
                    input: Box::new(def.clone()),
                    problem: problem.take(),
                },
                timeout_ms: None,
            };
            match term.answer(&request) {
                Answer::Value(v) => match awf_application::inputs::check_one(
                    &def,
                    &v,
                    &w.cwd,
                    w.services.host.as_ref(),
                ) {
                    Ok(_) => {
                        inputs.push((def.name.clone(), v));
                        break;
                    }
                    Err(why) => problem = Some(why),
                },
                // End of input: no more questions; the plan shows this input and the
                // ones after it as placeholders (`<missing: name>`).
                _ => return,
            }
        }
    }
}

/// One stderr warning per distinct `--breakpoint` naming no state of the workflow (as in AWF (Go), it is
/// not an error: the run simply never pauses there). Silent with `-f json` or `-q`, and when
/// the workflow cannot be loaded (the run reports that).
fn warn_unknown_breakpoints(ctx: &Ctx, w: &Wiring, args: &RunArgs) {
    if args.breakpoints.is_empty() || ctx.json() || ctx.quiet {
        return;
    }
    let Ok(loaded) =
        awf_domain::ports::WorkflowRepository::load(w.repository.as_ref(), &args.workflow, None)
    else {
        return;
    };
    let wf = &loaded.workflow;
    let mut err = std::io::stderr().lock();
    let mut seen = std::collections::BTreeSet::new();
    for b in args.breakpoints.iter().map(|b| b.trim()) {
        // A name given many times is warned about once.
        if wf.state(b).is_some() || !seen.insert(b) {
            continue;
        }
        if b.is_empty() {
            let _ = writeln!(
                err,
                "{} --breakpoint '': an empty name names no state of workflow '{}'; it will never pause there",
                ctx.err_style.yellow("WARN"),
                crate::style::printable(&wf.name)
            );
            continue;
        }
        let guess = awf_domain::validate::closest(b, wf.states.keys().map(String::as_str))
            .map(|c| format!(" (did you mean '{c}'?)"))
            .unwrap_or_default();
        let text = format!(
            "--breakpoint: workflow '{}' has no state '{b}'{guess}; it will never pause there",
            wf.name
        );
        let _ = writeln!(
            err,
            "{} {}",
            ctx.err_style.yellow("WARN"),
            crate::style::printable(&text)
        );
    }
}

pub(crate) fn fail_before_start(ctx: &Ctx, identifier: &str, e: &AwfError) -> Outcome {
    let e = &named_inputs_help(e, identifier);
    fail_with(ctx, json_out::failure_result(identifier, e), e)
}

/// `e` with its hint on where the inputs' rules are naming the workflow that was run
/// (`awf run deploy --help`), not the placeholder `<workflow>`.
fn named_inputs_help(e: &AwfError, identifier: &str) -> AwfError {
    awf_application::inputs::name_inputs_help(
        e.clone(),
        &awf_application::inputs::inputs_help_for(identifier),
    )
}

/// [`fail_before_start`] for `awf resume` of the recorded run `run_id` of `workflow` (the
/// identifier it was started with): the result object names both.
pub(crate) fn fail_before_resume(ctx: &Ctx, run_id: &str, workflow: &str, e: &AwfError) -> Outcome {
    let e = &named_inputs_help(e, workflow);
    let mut result = json_out::failure_result(workflow, e);
    result.run_id = Some(awf_domain::run::RunId(run_id.to_owned()));
    fail_with(ctx, result, e)
}

/// Reports `e`: with `-f json`, `result` on stdout; else the error on stderr.
fn fail_with(ctx: &Ctx, result: awf_domain::run::RunResult, e: &AwfError) -> Outcome {
    if ctx.json() {
        if let Err(w) = json_out::print(&result) {
            // The result object did not get out: say both on stderr.
            let text = errors::render_text(e, ctx.hints, ctx.err_style)
                + &errors::render_text(&w, ctx.hints, ctx.err_style);
            let _ = std::io::stderr().lock().write_all(text.as_bytes());
        }
    } else {
        let text = errors::render_text(e, ctx.hints, ctx.err_style);
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }
    Outcome::Reported(e.code())
}

fn dry_run(ctx: &Ctx, w: &Wiring, req: &RunRequest) -> Outcome {
    let planned = w
        .services
        .repository
        .load(&req.identifier, None)
        .and_then(|loaded| {
            // The plan lists only the declared inputs: an undeclared `--input` is warned
            // about as `awf run` warns about it.
            if !ctx.json() && !ctx.quiet {
                let mut err = std::io::stderr().lock();
                for m in awf_application::validation::undeclared_input_warnings(
                    &loaded.workflow,
                    &req.inputs,
                ) {
                    let _ = writeln!(
                        err,
                        "{} {}",
                        ctx.err_style.yellow("WARN"),
                        crate::style::printable(&m)
                    );
                }
            }
            // Required inputs not given are placeholders in the plan (a dry run needs no
            // value to show what would run).
            awf_application::plan::plan_dry_run(
                &w.services,
                &req.identifier,
                &loaded,
                &req.inputs,
                &req.config_inputs,
                &w.env,
                req.only_step.as_deref(),
            )
        })
        // The mocks and `--step` a run would refuse, a dry run refuses too.
        .and_then(|plan| {
            awf_application::facade::check_named_states_of(&w.services, req).map(|()| plan)
        });
    match planned {
        Ok(plan) => {
            if ctx.json() {
                if let Err(e) = json_out::print(&plan) {
                    return errors::report(
                        &crate::errors::CliError::Awf(e),
                        true,
                        ctx.hints,
                        ctx.err_style,
                    );
                }
            } else {
                let mut out = std::io::stdout().lock();
                crate::stdout_check::checked(
                    out.write_all(dry_run::render_as(&plan, ctx.format).as_bytes()),
                );
                let _ = out.flush();
            }
            Outcome::Success
        }
        Err(e) => fail_before_start(ctx, &req.identifier, &e),
    }
}

async fn execute(
    ctx: &Ctx,
    args: &RunArgs,
    w: Wiring,
    request: RunRequest,
    signals: Signals,
) -> Outcome {
    let identifier = request.identifier.clone();
    // A run that is to be recorded and cannot be (its data root cannot be created: a
    // read-only or full disk) is refused before anything of it runs, as one whose start
    // could not be written (breaker: it ran unrecorded with a warning, exit 0).
    if args.step.is_none()
        && let Some(e) = &w.store_error
    {
        return fail_before_start(ctx, &identifier, &unrecordable(e));
    }
    warn_unrecorded(&w);
    let guard = if args.step.is_none() {
        w.start_guard()
    } else {
        None
    };
    let mut services = w.services;
    let recorder = if args.step.is_some() {
        // `--step` is a debugging aid: it leaves no run record (it could not be resumed).
        services.recorders.retain(|_| false);
        services
            .recorders
            .push(std::sync::Arc::new(awf_telemetry::span_projection()));
        services
            .recorders
            .push(std::sync::Arc::new(awf_telemetry::log_projection()));
        None
    } else {
        if let Some(guard) = guard {
            services.recorders.push(guard);
        }
        w.recorder.clone()
    };
    let pg = w.pg.get().cloned();
    let repository = std::sync::Arc::clone(&services.repository);
    let service = wiring::run_service(services);
    let run_id = match service.start(request).await {
        Ok(id) => id,
        Err(e) => return fail_before_start(ctx, &identifier, &e),
    };
    log_record_location(
        recorder.as_ref(),
        &w.data_root,
        w.store_url.as_deref(),
        &run_id,
    );
    let mut signals = signals;
    if let Some(pg) = pg {
        signals.watch_pg_cancel(&pg, &run_id, recorder.as_ref());
    }
    drive(
        ctx,
        args.output,
        &identifier,
        (service.as_ref(), &run_id),
        (signals, recorder.as_ref()),
        args.step.as_deref(),
        repository.as_ref(),
    )
    .await
}

/// The `debug` diagnostic (`--verbose`, `--log-level debug`) naming where run `run_id` is
/// recorded: its state file and transcript under the data root, the shared store (its
/// password masked), or nowhere (`AWF_RECORD=off`, `--step`, a store that could not be
/// opened).
pub(crate) fn log_record_location(
    recorder: Option<&wiring::RunRecorder>,
    data_root: &std::path::Path,
    store_url: Option<&str>,
    run_id: &RunId,
) {
    if !tracing::enabled!(target: awf_telemetry::RUN_TARGET, tracing::Level::DEBUG) {
        return;
    }
    let text = match (recorder, store_url) {
        (Some(wiring::RunRecorder::Postgres(_)), Some(url)) => format!(
            "run {run_id} is recorded in the shared store {}",
            awf_postgres::redacted(url)
        ),
        (Some(_), _) => {
            let at = |p: std::path::PathBuf| p.display().to_string();
            format!(
                "run {run_id} is recorded in {} (transcript {}, history {})",
                at(data_root.join("states").join(format!("{run_id}.json"))),
                at(data_root
                    .join("transcripts")
                    .join(format!("{run_id}.jsonl"))),
                at(data_root.join("history.db"))
            )
        }
        (None, _) => format!("run {run_id} is not recorded"),
    };
    tracing::debug!(target: awf_telemetry::RUN_TARGET, "{text}");
}

/// The error of a run refused because its data root could not be opened (`e`): the same as
/// a run whose start could not be written, with `e`'s hints.
pub(crate) fn unrecordable(e: &AwfError) -> AwfError {
    e.hints().iter().fold(
        AwfError::new(
            ErrorCode::SystemIoWriteFailed,
            format!(
                "the run's start could not be recorded, so nothing of it ran: {}",
                e.message()
            ),
        ),
        |err, h| err.with_hint(h.clone()),
    )
}

/// Waits for the run's record to be written and says what a run that succeeded but could not
/// be recorded (full disk, read-only data root, a damaged history database) ends with: a
/// `SYSTEM.IO.WRITE_FAILED` error (exit 4; `SYSTEM.STORE.UNAVAILABLE`, also exit 4, for the
/// shared store), since `awf resume`, `status` or `history` would not know how it ended. `None`
/// without a recorder, when everything was written, or when the run did not succeed (its own
/// exit code stands).
fn record_failure(
    recorder: Option<&wiring::RunRecorder>,
    run_id: &RunId,
    exit_code: u8,
) -> Option<AwfError> {
    let r = recorder?;
    r.flush();
    if exit_code != 0 || !r.run_record_failed() {
        return None;
    }
    let errors = r.take_errors();
    let first = errors.first()?;
    let message = format!(
        "the run succeeded but its record could not be written ({} failure(s)): {}",
        errors.len(),
        distinct_failures(&errors)
    );
    Some(match r {
        // Busy, not damaged (breaker: "move it aside" for a database another process
        // held locked past the wait): the row is settled from the state file later.
        wiring::RunRecorder::Embedded(s) if s.only_history_failed() && first.contains("database is locked") => {
            AwfError::new(ErrorCode::SystemIoWriteFailed, message).with_hint(
                format!(
                    "another process held history.db's write lock past the 10 s wait: the \
                     run's state file was written (`awf status {id}` shows its end), and a \
                     history read settles the run's row from it once the database is free",
                    id = run_id.0
                ),
            )
        }
        wiring::RunRecorder::Embedded(s) if s.only_history_failed() => {
            AwfError::new(ErrorCode::SystemIoWriteFailed, message).with_hint(format!(
                "the run's state file was written (`awf status {id}` shows its end), its \
                 history row was not: if history.db is damaged, move it aside: awf creates a \
                 new one and fills it from the runs' state files, this run's included",
                id = run_id.0
            ))
        }
        wiring::RunRecorder::Embedded(s) if s.only_outputs_failed() => {
            AwfError::new(ErrorCode::SystemIoWriteFailed, message).with_hint(format!(
                "free disk space or fix the data root's permissions; the run's end was \
                 recorded (`awf status {id}` shows it), with the outputs named above cut",
                id = run_id.0
            ))
        }
        // The state file holds the run's end (its last write, whole, succeeded): what failed
        // before it (a journal line, an earlier state file, on a disk full for a while) cost
        // nothing now (breaker: the hint said status and resume would not know the run's end
        // while they showed it completed).
        wiring::RunRecorder::Embedded(s) if !s.writer_failed() && s.end_recorded(&run_id.0) => {
            AwfError::new(ErrorCode::SystemIoWriteFailed, message)
                .with_hint(end_recorded_hint(
                    &run_id.0,
                    s.state_failed(),
                    s.history_failed(),
                    s.outputs_failed(),
                ))
        }
        wiring::RunRecorder::Embedded(_) => AwfError::new(ErrorCode::SystemIoWriteFailed, message)
            .with_hint("free disk space or fix the data root's permissions; `awf status`, `awf resume` and `awf history` may not know how this run ended"),
        wiring::RunRecorder::Postgres(_) => {
            // Refused for lack of privilege (42501): what the user needs, not a
            // server that went away.
            let hint = awf_postgres::hint_for(ErrorCode::SystemStoreUnavailable, first)
                .filter(|_| first.contains("42501: "))
                .unwrap_or_else(|| "the PostgreSQL store stayed unreachable".to_owned());
            AwfError::new(ErrorCode::SystemStoreUnavailable, message).with_hint(format!(
                "{hint}; `awf status` and `awf resume` will not know this run's end"
            ))
        }
    })
}

/// The hint of a successful run whose record had write failures while its state file holds
/// its end: what is affected, and only that (`state`: state file or journal writes failed
/// before the last one; `history`: its history row failed; `outputs`: step outputs are kept
/// cut).
fn end_recorded_hint(id: &str, state: bool, history: bool, outputs: bool) -> String {
    let shown = if history {
        format!("`awf status {id}` shows")
    } else {
        format!("`awf status {id}` and `awf history` show")
    };
    let mut hint = format!(
        "free disk space or fix the data root's permissions; the run's end was recorded whole \
         ({shown} it completed)"
    );
    if outputs {
        hint.push_str(", with the outputs named above cut to their first 64 KiB");
    }
    if history {
        hint.push_str(
            "; its history row was not written: `awf history` writes it from the state file \
             when it next reads the history",
        );
    }
    if state {
        hint.push_str(
            "; the other writes that failed were made while it ran (its journal), which only \
             a run killed before its end would have missed",
        );
    }
    hint
}

/// Most distinct failures [`distinct_failures`] names.
const FAILURES_NAMED: usize = 5;

/// A signal arriving again within this time of the first is the same one delivered twice
/// (`timeout` sends a terminal's SIGINT to awf, then to its process group), not the user's
/// second Ctrl-C, which stops everything at once.
const SAME_SIGNAL: std::time::Duration = std::time::Duration::from_millis(100);

/// The backstop of a second signal: awf exits with the cancel's exit code when the run has
/// not wound down [`forced_exit::GRACE`] after it (something that does not stop when asked),
/// after killing the process groups of its steps again. Source: trial finding h4 (after
/// "second signal, stopping now", awf ran on at full CPU for minutes).
mod forced_exit {
    use std::io::Write;
    use std::sync::atomic::AtomicBool;
    use std::sync::atomic::Ordering;

    /// How long the run has to wind down after the second signal.
    pub(super) const GRACE: std::time::Duration = std::time::Duration::from_secs(3);

    static ARMED: AtomicBool = AtomicBool::new(false);
    static DONE: AtomicBool = AtomicBool::new(false);

    /// Starts the countdown (once).
    pub(super) fn arm(code: u8) {
        if ARMED.swap(true, Ordering::SeqCst) {
            return;
        }
        // A thread of its own: it fires even if every runtime thread is busy.
        let _ = std::thread::Builder::new()
            .name("awf-forced-exit".into())
            .spawn(move || {
                std::thread::sleep(GRACE);
                if DONE.load(Ordering::SeqCst) {
                    return;
                }
                awf_exec::kill_all_now();
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "WARN the run did not stop within {}s of the second signal: exiting",
                    GRACE.as_secs()
                );
                std::process::exit(i32::from(code));
            });
    }

    /// The run wound down: the countdown does nothing.
    pub(super) fn disarm() {
        DONE.store(true, Ordering::SeqCst);
    }
}

/// The distinct texts of `errors` (a record's write failures), in order, joined with `; `:
/// at most [`FAILURES_NAMED`], then how many more there were.
fn distinct_failures(errors: &[String]) -> String {
    // Each write once, with how many times it failed when more than once: the count in
    // the message's "(N failure(s))" is then the sum of what it names.
    let mut seen: Vec<(&str, usize)> = Vec::new();
    for e in errors {
        match seen.iter_mut().find(|(s, _)| *s == e.as_str()) {
            Some((_, n)) => *n += 1,
            None => seen.push((e, 1)),
        }
    }
    let rest: Vec<(&str, usize)> = seen.split_off(seen.len().min(FAILURES_NAMED));
    let mut text = seen
        .iter()
        .map(|(e, n)| {
            if *n > 1 {
                format!("{e} ({n} times)")
            } else {
                (*e).to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("; ");
    if !rest.is_empty() {
        let times: usize = rest.iter().map(|(_, n)| n).sum();
        text.push_str(&format!("; and {} more", rest.len()));
        if times > rest.len() {
            text.push_str(&format!(" ({times} failures)"));
        }
    }
    text
}

/// What the hint of a run parked on a usage limit says of `awf serve` with the embedded store.
const SERVE_RESUMES_PARKED: &str = " (`awf serve` resumes it by itself)";

/// The hints of `result` for a run this terminal process ran on the shared store: the workers
/// (`awf serve --store`) do not resume a run a terminal process parked on a usage limit
/// (README "Workers"), so its hint does not say they do.
fn shared_store_park_hints(result: &mut RunResult) {
    if let Some(error) = result.error.as_mut() {
        for h in &mut error.hints {
            if h.contains(SERVE_RESUMES_PARKED) {
                *h = h.replace(
                    SERVE_RESUMES_PARKED,
                    " (the workers of the shared store do not resume a run a terminal `awf run \
                     --store` parked)",
                );
            }
        }
    }
}

/// Shows a started run's events until it ends (its log in the run service, from the start),
/// answers its requests from stdin (through `respond`), cancels on SIGINT/SIGTERM (through
/// `cancel`), waits for `recorder` to write the run's record (see [`record_failure`]), prints
/// the result (`wait`: text summary or the JSON object, whose `exit_code` and `error` then
/// say a record that could not be written) and gives the outcome. Shared by `awf run` and
/// `awf resume`.
pub(crate) async fn drive(
    ctx: &Ctx,
    output: crate::cli::OutputMode,
    identifier: &str,
    (service, run_id): (&dyn RunService, &RunId),
    (mut signals, recorder): (Signals, Option<&wiring::RunRecorder>),
    step: Option<&str>,
    repository: &dyn awf_domain::ports::WorkflowRepository,
) -> Outcome {
    let mut events = match service.subscribe(run_id, 1) {
        Ok(s) => s,
        Err(e) => return fail_before_start(ctx, identifier, &e),
    };
    // `--step` prints the step's output in its report's blocks: not a second time in
    // buffered form; streamed live, the blocks are left out instead (`print_step`).
    let output = match (step, output) {
        (Some(_), crate::cli::OutputMode::Buffered) => crate::cli::OutputMode::Silent,
        (_, o) => o,
    };
    let mut printer = TextPrinter::new(output, ctx.quiet, ctx.err_style)
        .with_verbose(ctx.verbose)
        // `--step` shows the step's output in its report's blocks.
        .with_failure_tail(step.is_none())
        .with_logs(ctx.run_log_level, ctx.log_json)
        // The diagnostics of `--verbose` / `--log-level debug` are written as they come:
        // spinners would be drawn over them.
        .with_live(
            LiveProgress::detect(ctx.quiet, ctx.json(), ctx.no_color, ctx.err_style).filter(
                |_| !tracing::enabled!(target: awf_telemetry::RUN_TARGET, tracing::Level::DEBUG),
            ),
        );
    let mut cancelled = false;
    // Answers the run's requests on the terminal, one at a time.
    let mut answerer = crate::interact::Answerer::new(ctx);
    // The signal that cancelled the run, if one did.
    let mut signalled: Option<CancelReason> = None;
    // When the first signal came: the same signal again within [`SAME_SIGNAL`] is one
    // delivered twice, not a second one (`timeout` forwards a terminal's SIGINT to awf and
    // then to its whole process group, which awf is in).
    let mut first_signal: Option<(CancelReason, std::time::Instant)> = None;
    // What the top-level states did (for the resume hint).
    let mut ran = Ran::default();
    // The run's inputs as recorded (secrets masked) and its workflow file: which secret
    // inputs `awf resume` needs given again.
    let mut started: Option<(serde_json::Map<String, serde_json::Value>, String)> = None;
    loop {
        tokio::select! {
            (id, answer) = answerer.next() => {
                // The one place this front-end answers a request. A missing input's value
                // that breaks a rule is refused and the request stays pending: asked again.
                let refused = service.respond(&id, answer).err();
                match refused.as_ref().and_then(awf_domain::interaction::refused_value) {
                    Some(why) => answerer.ask_again(&id, why),
                    None => printer.prompt_answered(&id),
                }
            }
            item = events.next() => {
                let ev = match item {
                    None => break,
                    Some(SubscriptionItem::Event { envelope, .. }) => *envelope,
                    Some(SubscriptionItem::Lagged { resume_seq }) => {
                        // Only when the terminal falls more than the log's budget behind.
                        if !ctx.json() {
                            printer.stderr_line(&format!(
                                "{} output came faster than it could be shown; events before #{resume_seq} were skipped (the run's transcript has them)",
                                ctx.err_style.yellow("WARN")
                            ));
                        }
                        continue;
                    }
                };
                if let RunEvent::RunStarted { inputs, identifier, workflow_path, mocks, .. } = &ev.event
                    && ev.parent_run_id.is_none()
                {
                    let file = workflow_path.clone().unwrap_or_else(|| identifier.clone());
                    started = Some((inputs.clone(), file));
                    ran.mocks.clone_from(mocks);
                }
                if let RunEvent::StepFinished { step, state, kind } = &ev.event
                    && ev.parent_run_id.is_none()
                    && ev.path == *step
                {
                    ran.finished(step, kind, state.status, ev.iteration.is_some());
                }
                if ev.parent_run_id.is_none() {
                    match &ev.event {
                        RunEvent::StepStarted { step, .. } => ran.started(step),
                        RunEvent::StepFinished { step, state, .. } => ran.ended(step, state.status),
                        _ => {}
                    }
                }
                if ctx.json() {
                    // Only warnings reach stderr in JSON mode; --log-level and --log-format
                    // apply to them as to every log line.
                    if let RunEvent::Log { level: level @ awf_domain::event::LogLevel::Warn, message, step } = &ev.event
                        && awf_telemetry::LogConfig::shows(ctx.run_log_level, *level)
                    {
                        let line = if ctx.log_json {
                            awf_telemetry::LogConfig::run_log_json(std::time::SystemTime::now(), *level, step.as_deref(), message)
                        } else {
                            format!("WARN {message}")
                        };
                        let _ = writeln!(std::io::stderr().lock(), "{line}");
                    }
                } else {
                    crate::stdout_check::checked(printer.handle_stdio(&ev));
                }
                // After the printer showed it: the terminal answers the request.
                answerer.on_event(&ev.event);
                if printer.take_overprinted() {
                    answerer.reprompt();
                }
            }
            reason = signals.next() => {
                if let Some((first, at)) = first_signal
                    && first == reason
                    && reason != CancelReason::Requested
                    && at.elapsed() < SAME_SIGNAL
                {
                    continue;
                }
                first_signal.get_or_insert((reason, std::time::Instant::now()));
                if !cancelled && !ctx.json() && !ctx.quiet {
                    let what = cancel_cause(reason);
                    printer.stderr_line(&format!("{} {what}, cancelling…", ctx.err_style.yellow("WARN")));
                }
                if cancelled {
                    // The second signal: no grace period for anything still running.
                    if !ctx.json() && !ctx.quiet {
                        printer.stderr_line(&format!("{} second signal, stopping now", ctx.err_style.yellow("WARN")));
                    }
                    awf_exec::kill_all_now();
                    // And awf itself ends soon, wound down or not.
                    forced_exit::arm(signalled.unwrap_or(reason).exit_code());
                }
                cancelled = true;
                // Nothing new is asked while the run winds down.
                answerer.cancelling();
                signalled.get_or_insert(reason);
                let _ = service.cancel(run_id, reason);
            }
        }
    }
    // The run wound down: a second signal's forced exit is not needed.
    forced_exit::disarm();
    printer.finish();
    // The run is over: whatever its steps daemonised (adopted by awf, a subreaper) goes too.
    awf_exec::sweep_adopted().await;
    // Nothing is left for the watchdog to stop: it exits while the result is printed.
    crate::watchdog::stand_down();
    let mut result = match service.wait(run_id).await {
        Ok(r) => r,
        Err(e) => {
            // A run that never started (a missing input not given, or a signal while asking).
            if let Some(reason) = signalled.filter(|_| e.code() == ErrorCode::ExecutionRunCancelled)
            {
                return Outcome::Run(reason.exit_code());
            }
            return fail_before_start(ctx, identifier, &e);
        }
    };
    if matches!(recorder, Some(wiring::RunRecorder::Postgres(_))) {
        shared_store_park_hints(&mut result);
    }
    let unrecorded = record_failure(recorder, run_id, result.exit_code);
    // The secret inputs the resume hint asks for again (stored masked, no default).
    let status = result.status;
    let secrets_again = || match (&started, status) {
        (Some((inputs, file)), RunStatus::Failure | RunStatus::Cancelled) => {
            awf_application::inputs::secrets_to_ask_again(repository, file, inputs)
        }
        _ => Vec::new(),
    };
    if ctx.json() {
        // One document on stdout: the result says the record failure itself.
        if let Some(e) = &unrecorded {
            result.exit_code = e.code().exit_code();
            result.error = Some(e.body());
        } else if step.is_none() {
            // The same resume hint as the text summary's (breaker: a script reading `-f
            // json` could not learn which secret inputs to give again).
            return print_json_result(ctx, result, Some((&ran, &secrets_again())));
        }
        return print_json_result(ctx, result, None);
    }
    if let Some(step) = step {
        print_step(
            ctx,
            step,
            &result,
            output == crate::cli::OutputMode::Streaming,
        );
    } else {
        print_summary(ctx, &result, &ran, &secrets_again());
    }
    match unrecorded {
        Some(e) => errors::report(
            &crate::errors::CliError::Awf(e),
            false,
            ctx.hints,
            ctx.err_style,
        ),
        None => Outcome::Run(result.exit_code),
    }
}

/// Says on stderr when runs cannot be recorded (the store did not open, or a write fails
/// later): the run goes on, but `awf resume`/`status`/`history` will not know it.
pub(crate) fn warn_unrecorded(w: &Wiring) {
    if let Some(e) = &w.store_error {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "WARN runs are not recorded: {}", e.message());
        for h in e.hints() {
            let _ = writeln!(err, "  Hint: {h}");
        }
    }
    if let Some(r) = &w.recorder {
        let warnings = std::sync::Arc::clone(&w.record_warnings);
        r.on_error(std::sync::Arc::new(move |msg: String| warnings.warn(msg)));
    }
}

/// `--step S` report: the step's command output on stdout, the rest on stderr (as every
/// step line: stdout carries only command output): its stdout, under a `--- [S] stdout ---`
/// header on stdout too when stdout is a terminal (left out when it is a pipe or a file,
/// which get the output alone); `--- [S] stderr ---` and its stderr on stderr; each block only
/// when the step wrote something there, and none when `streamed` (`-o streaming` showed the
/// output live); then `Step 'S' completed successfully in <d>` or `Step 'S' failed (exit
/// code: N)` (`Step 'S' failed` when it has none) and the error with its hints.
/// Source: spec/workflow.md §3.12 (AWF (Go) prints the report on stdout; see
/// docs/compatibility.md).
fn print_step(ctx: &Ctx, step: &str, result: &RunResult, streamed: bool) {
    let mut err = std::io::stderr().lock();
    if let Some(st) = result.states.get(step) {
        if !streamed {
            let out_is_terminal = std::io::stdout().is_terminal();
            print_step_blocks(
                &mut std::io::stdout().lock(),
                &mut err,
                step,
                st,
                out_is_terminal,
            );
        }
        let d = awf_domain::duration::format_go(std::time::Duration::from_millis(st.duration_ms));
        if result.status == RunStatus::Success {
            let _ = writeln!(err, "Step '{step}' completed successfully in {d}");
        } else {
            // No exit code (a template, a timeout before the start): the error says why,
            // below.
            let code = st
                .exit_code
                .map_or_else(String::new, |c| format!(" (exit code: {c})"));
            let _ = writeln!(err, "Step '{step}' failed{code}");
        }
    }
    if let Some(e) = &result.error {
        let _ = writeln!(
            err,
            "[{}] {}",
            e.code,
            crate::style::printable_text(&e.message)
        );
        if ctx.hints {
            for h in &e.hints {
                let _ = writeln!(
                    err,
                    "  {} {}",
                    ctx.err_style.cyan("Hint:"),
                    crate::style::printable_text(h)
                );
            }
        }
    }
}

/// The `--- [S] stdout ---` and `--- [S] stderr ---` blocks of a `--step` report, each
/// header on the stream its text goes to, each block only when the step wrote there: the
/// step's stdout on `out` (under its header only when `out_is_terminal`: a pipe or a file
/// gets the output alone), the stderr block on `err` (`out` flushed first, so a terminal
/// shows them in order).
fn print_step_blocks(
    out: &mut impl Write,
    err: &mut impl Write,
    step: &str,
    st: &awf_domain::run::StateResult,
    out_is_terminal: bool,
) {
    if !st.output.is_empty() {
        if out_is_terminal {
            crate::stdout_check::checked(writeln!(out, "--- [{step}] stdout ---"));
        }
        crate::stdout_check::checked(out.write_all(st.output.as_bytes()));
        if !st.output.ends_with('\n') {
            crate::stdout_check::checked(writeln!(out));
        }
        crate::stdout_check::checked(out.flush());
    }
    if !st.stderr.is_empty() {
        let _ = writeln!(err, "--- [{step}] stderr ---");
        let _ = err.write_all(st.stderr.as_bytes());
        if !st.stderr.ends_with('\n') {
            let _ = writeln!(err);
        }
    }
}

/// The hint that continues a failed or cancelled run (``continue it with `awf resume <id>
/// --from <state> --input <secret>=<value>` ``), shown under the text summary and added to the
/// `-f json` result's `error.hints`; `None` when the run succeeded, is not recorded, parked
/// (its own hint names `awf resume`), failed on a call cycle or past the call depth limit
/// (fails again anywhere), or hints
/// are off. `secrets` are the secret inputs `awf resume` needs again.
fn resume_hint(ctx: &Ctx, result: &RunResult, ran: &Ran, secrets: &[String]) -> Option<String> {
    let last_failed = ran.last_failed.as_deref();
    let recorded = crate::wiring::recording_on(std::env::var("AWF_RECORD").ok().as_deref());
    // A parked run's own hint names `awf resume` with its id already.
    let parked = awf_domain::projection::parked_until(result).is_some();
    // A call cycle, or a call chain past the depth limit, fails again wherever the run
    // resumes (new user, breaker: the hint sent them to a resume that could not help).
    let circular = result.error.as_ref().is_some_and(|e| {
        matches!(
            e.code,
            ErrorCode::ExecutionCircularCall | ErrorCode::ExecutionMaxDepth
        )
    });
    // A run whose start could not be recorded (nothing of it ran) has nothing to resume.
    let unrecorded = result.states.is_empty()
        && result
            .error
            .as_ref()
            .is_some_and(|e| e.code == ErrorCode::SystemIoWriteFailed);
    if let (Some(id), true, true, false) = (
        &result.run_id,
        recorded,
        ctx.hints,
        result.status == RunStatus::Success || parked || circular || unrecorded,
    ) {
        // A step that refused an input fails again on resume unless the input changes first.
        let refused_input = result
            .error
            .as_ref()
            .is_some_and(|e| e.code == ErrorCode::UserInputValidationFailed);
        // A step stopped by a spent budget fails the same way on resume (the resumed run
        // keeps counting from what it had spent) until that budget is raised.
        let over_budget = result
            .error
            .as_ref()
            .is_some_and(|e| e.code == ErrorCode::ExecutionBudgetExceeded)
            || last_failed
                .and_then(|s| result.states.get(s))
                .is_some_and(|st| st.error_code == Some(ErrorCode::ExecutionBudgetExceeded));
        let first = if refused_input {
            "fix that input first (in the workflow file, or `--input NAME=VALUE` for a run input), then "
        } else if over_budget {
            "the budget is spent and a resumed run keeps counting from what it had spent: raise \
             the workflow's or the step's `budget:` (tokens, usd) in the workflow file first, then "
        } else {
            ""
        };
        let secrets_given = secrets;
        let secrets: String = secrets
            .iter()
            .map(|k| {
                format!(
                    " --input {}",
                    crate::style::printable(&awf_domain::shell::input_arg(k))
                )
            })
            .collect();
        // An approval gate nobody could be asked (no terminal) fails the same way again
        // unless the resume approves it (new user: the hint led to the same failure).
        // The gate's failure may have been routed to a failure terminal (`on_failure`): then
        // the failed state says it (trial: the hint was `--from ship` without `--yes`).
        let failed_state = last_failed.and_then(|s| result.states.get(s));
        let unasked = |code: Option<ErrorCode>, message: Option<&str>| {
            code == Some(ErrorCode::ExecutionApprovalRejected)
                && message.is_some_and(|m| m.contains("approval not asked"))
        };
        let unattended_gate = result
            .error
            .as_ref()
            .is_some_and(|e| unasked(Some(e.code), Some(&e.message)))
            || failed_state.is_some_and(|st| unasked(st.error_code, st.error.as_deref()));
        // Inputs the failure names as not given (no default): the resume needs them, or it
        // fails the same way (trial: `undefined variable: opt` again on resume).
        let missing: String = missing_inputs(result, failed_state)
            .iter()
            .filter(|k| !secrets_given.contains(k))
            .map(|k| {
                format!(
                    " --input {}",
                    crate::style::printable(&awf_domain::shell::input_arg(k))
                )
            })
            .collect();
        let yes = if unattended_gate { " --yes" } else { "" };
        let command = |from: &str| {
            errors::with_store_flags(&format!(
                "awf resume {}{}{secrets}{missing}{yes}",
                id.0,
                // A state name comes from the workflow file: no raw control characters.
                crate::style::printable(from)
            ))
        };
        if let Some(routed) = routed_to_failure(result, ran) {
            return Some(format!("{first}{}", routed.hint(&command)));
        }
        let from = resume_from_hint(result, last_failed);
        // A failure `--mock` made: the resume applies the run's mocks again and fails the
        // same way (new user: the hint led to the same mocked failure forever).
        // It may be a step inside the failed state (a parallel branch, a loop's body step).
        if let Some(step) = ran.last_mocked.as_deref().filter(|_| last_failed.is_some()) {
            let keep = kept_mocks(&ran.mocks, step);
            return Some(format!(
                "{first}the failure of {step} was mocked (`--mock states.{step}.status=failed`), \
                 and a resume applies the run's mocks again: continue it without that mock with `{}`",
                command(&format!("{from} --no-mocks{keep}"))
            ));
        }
        let command = command(&from);
        return Some(format!("{first}continue it with `{command}`"));
    }
    None
}

/// Whether `mocks` (a run's) fail state `step` (`status=failed`).
fn mocked_failure(
    mocks: &std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
    step: &str,
) -> bool {
    mocks.get(step).is_some_and(|fields| {
        fields
            .iter()
            .any(|(f, v)| f.eq_ignore_ascii_case("status") && v.eq_ignore_ascii_case("failed"))
    })
}

/// The ` --mock 'states.S.F=V'` flags that give back the mocks of `mocks` other than
/// `step`'s, for a resume with `--no-mocks` that keeps them.
fn kept_mocks(
    mocks: &std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
    step: &str,
) -> String {
    mocks
        .iter()
        .filter(|(s, _)| s.as_str() != step)
        .flat_map(|(s, fields)| {
            fields.iter().map(move |(f, v)| {
                format!(
                    " --mock {}",
                    awf_domain::shell::quote_arg(&format!("states.{s}.{f}={v}"))
                )
            })
        })
        .collect()
}

/// The inputs a run's failure names as not given and without a default (`the input "opt" was
/// not given and has no default`, see the engine), in the order named, each once: from the
/// run's error and from its failed state's (the run error may be a failure terminal's).
fn missing_inputs(
    result: &RunResult,
    failed_state: Option<&awf_domain::run::StateResult>,
) -> Vec<String> {
    const MARK: &str = awf_domain::ports::template::MISSING_INPUT_MARK;
    let texts = result
        .error
        .iter()
        .map(|e| e.message.as_str())
        .chain(failed_state.and_then(|st| st.error.as_deref()));
    let mut names: Vec<String> = Vec::new();
    for text in texts {
        for part in text.split(MARK).skip(1) {
            if let Some((name, rest)) = part.split_once('"')
                && !name.is_empty()
                && rest.starts_with(&awf_domain::ports::template::MISSING_INPUT_TAIL[1..])
                && !names.iter().any(|n| n == name)
            {
                names.push(name.to_owned());
            }
        }
    }
    names
}

/// What the warning of a cancel says caused it (`received SIGINT`).
pub(crate) fn cancel_cause(reason: CancelReason) -> &'static str {
    match reason {
        CancelReason::Terminate => "received SIGTERM",
        CancelReason::Hangup => "received SIGHUP",
        CancelReason::Interrupt => "received SIGINT",
        CancelReason::Requested => "cancel requested through the store (awf cancel)",
    }
}

/// Reports the result of a run that ended without running here (a parked run cancelled
/// while `awf resume` waited for its reset): the `-f json` result object with its resume
/// hint in `error.hints`, else the text summary and the hint; the outcome is the run's exit
/// code. `secrets` are the secret inputs `awf resume` needs again.
pub(crate) fn report_ended(ctx: &Ctx, result: RunResult, secrets: &[String]) -> Outcome {
    let ran = Ran::default();
    if ctx.json() {
        return print_json_result(ctx, result, Some((&ran, secrets)));
    }
    print_summary(ctx, &result, &ran, secrets);
    Outcome::Run(result.exit_code)
}

/// Prints `result` as the `-f json` result object on stdout, with the resume hint in
/// `error.hints` when `hint_from` gives what the run did and the secret inputs a resume needs
/// again (the hint the text summary shows); the outcome is the run's exit code, or the
/// write failure's when stdout could not take it.
fn print_json_result(
    ctx: &Ctx,
    mut result: RunResult,
    hint_from: Option<(&Ran, &[String])>,
) -> Outcome {
    if let Some((ran, secrets)) = hint_from
        && let Some(hint) = resume_hint(ctx, &result, ran, secrets)
        && let Some(error) = result.error.as_mut()
        && !error.hints.contains(&hint)
    {
        error.hints.push(hint);
    }
    if let Err(e) = json_out::print_result(&result) {
        return errors::report(
            &crate::errors::CliError::Awf(e),
            true,
            ctx.hints,
            ctx.err_style,
        );
    }
    Outcome::Run(result.exit_code)
}

/// Text summary on stderr: `Workflow completed.` (or `Workflow completed: <message>` when the
/// success terminal has a `message`), `Workflow failed: [CODE] <message>` with the error's
/// detail and hint lines (when a step line already showed that message, it is not repeated:
/// `Workflow failed: [CODE] in step 'S' (above)`), or `Workflow cancelled.` and the error.
/// `secrets` are the run's secret inputs that `awf resume` needs again (stored masked,
/// declared without a default): the resume hint asks for them (`--input NAME=<value>`), as
/// `awf resume` would.
fn print_summary(ctx: &Ctx, result: &RunResult, ran: &Ran, secrets: &[String]) {
    let mut text = summary_text(ctx.quiet, ctx.hints, ctx.err_style, result);
    if let Some(hint) = resume_hint(ctx, result, ran, secrets) {
        text.push_str(&format!("  {} {hint}\n", ctx.err_style.cyan("Hint:")));
    }
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
    // `-f quiet`: the run id alone on stdout, for `ID=$(awf run wf -f quiet)` (AWF (Go)).
    if ctx.format == crate::cli::Format::Quiet
        && let Some(id) = &result.run_id
    {
        crate::stdout_check::checked(writeln!(std::io::stdout().lock(), "{}", id.0));
    }
}

/// What the top-level states of a run did, as its events said (replayed earlier attempts
/// included), for the resume hint.
#[derive(Debug, Default)]
struct Ran {
    /// The last top-level state that failed (a loop's body step included).
    last_failed: Option<String>,
    /// The last top-level state that finished (not a loop's body step): the one whose
    /// routes led where the run ended.
    last_finished: Option<String>,
    /// The last top-level `while` / `for_each` loop that finished.
    last_loop: Option<String>,
    /// The run's mocks (step → field → value, secrets masked), which a resume applies again.
    mocks: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
    /// The step whose mocked failure (`status=failed`) made [`Ran::last_failed`] fail: that
    /// state itself, or a step inside it (a parallel branch, a loop's body step).
    last_mocked: Option<String>,
    /// The states of the run (not of its sub-workflows) started and not yet finished: a step
    /// that ends meanwhile ran inside them (a parallel block's branch, a loop's body step).
    open: Vec<String>,
    /// Open state → the last step inside it that failed by its mock.
    inner_mocked: std::collections::BTreeMap<String, String>,
}

impl Ran {
    /// Top-level state `step` of kind `kind` finished with `status` (`in_body`: as a loop's
    /// body step, one iteration of it).
    fn finished(
        &mut self,
        step: &str,
        kind: &str,
        status: awf_domain::run::StepStatus,
        in_body: bool,
    ) {
        if status == awf_domain::run::StepStatus::Failed {
            self.last_failed = Some(step.to_owned());
            // Its own mock, else a mocked failure inside it (a branch, a body step).
            self.last_mocked = if mocked_failure(&self.mocks, step) {
                Some(step.to_owned())
            } else {
                self.inner_mocked.get(step).cloned()
            };
        }
        if in_body {
            return;
        }
        self.last_finished = Some(step.to_owned());
        if matches!(kind, "while" | "for_each") {
            self.last_loop = Some(step.to_owned());
        }
    }

    /// State `step` of the run (at any depth) started.
    fn started(&mut self, step: &str) {
        if !self.open.iter().any(|o| o == step) {
            self.open.push(step.to_owned());
        }
    }

    /// State `step` of the run (at any depth) finished with `status`, after
    /// [`Ran::finished`] when it is a top-level one: a failure its mock made is one of each
    /// state still open (a parallel block, a loop), which fails of it next.
    fn ended(&mut self, step: &str, status: awf_domain::run::StepStatus) {
        self.open.retain(|o| o != step);
        self.inner_mocked.remove(step);
        if status == awf_domain::run::StepStatus::Failed && mocked_failure(&self.mocks, step) {
            for o in &self.open {
                self.inner_mocked.insert(o.clone(), step.to_owned());
            }
        }
    }
}

/// A run that reached a failure terminal by its routes, no step having failed (a `while`
/// loop that gave up at `max_iterations`, then a check that routed to the terminal).
#[derive(Debug, PartialEq, Eq)]
struct RoutedToFailure<'a> {
    /// The terminal's name as shown.
    terminal: &'a str,
    /// The state to run again from: the last loop that ran (what it waited for may have
    /// come since), else the state whose routes led to the terminal; `None` when the run
    /// went there from its start.
    from: Option<&'a str>,
    /// `from` is a loop.
    is_loop: bool,
}

impl RoutedToFailure<'_> {
    /// The hint: a plain resume would reach the terminal again (it goes on from the recorded
    /// routes), so it names the `--from` that runs something again (new user: `continue it
    /// with awf resume <id>` led to the same terminal and the same hint). `command` makes
    /// the `awf resume` command line of ` --from <state>` (or of nothing).
    fn hint(&self, command: &dyn Fn(&str) -> String) -> String {
        let t = self.terminal;
        match self.from {
            Some(from) => format!(
                "no step failed: its routes led to failure terminal '{t}', where a resume \
                 would end again; run again from {} `{from}` with `{}`",
                if self.is_loop { "the loop" } else { "state" },
                command(&format!(" --from {}", awf_domain::shell::quote_arg(from)))
            ),
            None => format!(
                "no step failed: the run went to failure terminal '{t}' from its start, and a \
                 resume would end the same way"
            ),
        }
    }
}

/// [`RoutedToFailure`] when `result` ended so (a failure terminal, no top-level state
/// failed).
fn routed_to_failure<'a>(result: &'a RunResult, ran: &'a Ran) -> Option<RoutedToFailure<'a>> {
    let terminal = result.terminal.as_deref()?;
    let at_terminal = result.status == RunStatus::Failure
        && result
            .error
            .as_ref()
            .is_some_and(|e| e.code == ErrorCode::ExecutionTerminalFailure);
    if !at_terminal || ran.last_failed.is_some() {
        return None;
    }
    let (from, is_loop) = match (&ran.last_loop, &ran.last_finished) {
        (Some(l), _) => (Some(l.as_str()), true),
        (None, f) => (f.as_deref(), false),
    };
    Some(RoutedToFailure {
        terminal,
        from,
        is_loop,
    })
}

/// ` --from <state>` when the run ended at a failure terminal after a top-level state failed
/// and was routed there: resuming where it stopped would only reach the terminal again.
fn resume_from_hint(result: &RunResult, last_failed: Option<&str>) -> String {
    match (result.status, result.terminal.as_deref(), last_failed) {
        (RunStatus::Failure, Some(t), Some(s)) if t != s => {
            format!(" --from {}", awf_domain::shell::quote_arg(s))
        }
        _ => String::new(),
    }
}

/// The text of [`print_summary`].
pub(crate) fn summary_text(
    quiet: bool,
    hints: bool,
    s: crate::style::Style,
    result: &RunResult,
) -> String {
    let error = result.error.as_ref().map(|b| {
        let mut e = AwfError::new(b.code, b.message.clone());
        for (k, v) in &b.details {
            e = e.with_detail(k.clone(), v.clone());
        }
        // An inline `on_failure`'s terminal has no `terminal` detail (the result's `terminal`
        // names it): the summary's `terminal:` line comes from the result, as for a named
        // terminal (a new user found no such line after `on_failure: {message, status}`).
        if b.code == ErrorCode::ExecutionTerminalFailure
            && !b.details.contains_key("terminal")
            && let Some(t) = &result.terminal
        {
            e = e.with_detail("terminal", t.clone());
        }
        for h in &b.hints {
            e = e.with_hint(h.clone());
        }
        e
    });
    // Parked on a usage limit: not a failure to fix, a wait (the hint says how it goes on).
    if let (RunStatus::Failure, Some(until), Some(e)) = (
        result.status,
        awf_domain::projection::parked_until(result),
        &error,
    ) {
        let head = format!(
            "Workflow parked: waiting for a usage limit until {}. [{}]",
            awf_domain::timefmt::format_rfc3339(until),
            e.code()
        );
        let p = crate::style::printable_text;
        let mut out = format!("{} {}\n", s.yellow(&head), p(e.message()));
        for line in errors::detail_lines(e.message(), e.details()) {
            out.push_str(&format!("  {}\n", p(&line)));
        }
        if hints {
            for h in e.hints() {
                out.push_str(&format!(
                    "  {} {}\n",
                    s.cyan("Hint:"),
                    p(&errors::with_store_flags(h))
                ));
            }
        }
        return out;
    }
    match result.status {
        RunStatus::Success => {
            if quiet {
                return String::new();
            }
            match result.message.as_deref() {
                // The message may hold a step's output: shown without its control characters.
                Some(m) => format!(
                    "{} {}\n",
                    s.green("Workflow completed:"),
                    crate::style::printable_text(m)
                ),
                None => format!("{}\n", s.green("Workflow completed.")),
            }
        }
        RunStatus::Failure => match error {
            Some(e) => {
                let shown_by = result
                    .states
                    .iter()
                    .find(|(_, st)| st.error.as_deref() == Some(e.message()))
                    .map(|(name, _)| name.clone());
                let head = format!("Workflow failed: [{}]", e.code());
                match shown_by {
                    Some(step) => {
                        let short = AwfError::new(e.code(), format!("in step '{step}' (above)"));
                        let mut out = errors::render_text_with(&short, &head, false, s);
                        let p = crate::style::printable_text;
                        for line in errors::detail_lines(e.message(), e.details()) {
                            out.push_str(&format!("  {}\n", p(&line)));
                        }
                        if hints {
                            for h in e.hints() {
                                out.push_str(&format!(
                                    "  {} {}\n",
                                    s.cyan("Hint:"),
                                    p(&errors::with_store_flags(h))
                                ));
                            }
                        }
                        out
                    }
                    None => errors::render_text_with(&e, &head, hints, s),
                }
            }
            None => format!(
                "{} terminal '{}'\n",
                s.red_bold("Workflow failed:"),
                result.terminal.as_deref().unwrap_or("?")
            ),
        },
        RunStatus::Cancelled => {
            let mut out = format!("{}\n", s.yellow("Workflow cancelled."));
            // The cancel itself is said above; only another cause is worth a second line.
            if let Some(e) = error.filter(|e| e.code() != ErrorCode::ExecutionRunCancelled) {
                out.push_str(&errors::render_text(&e, hints, s));
            }
            out
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP streams, when they could be installed. SIGHUP (terminal closed,
/// SSH dropped) cancels like SIGTERM, so the run's processes are stopped and it is recorded as
/// `cancelled` (exit 129) instead of awf dying at once; unless awf was started with SIGHUP
/// ignored (`nohup awf run …`): then it stays ignored, for awf and its steps, and the run
/// outlives the terminal. (SIGINT and SIGTERM are always handled: a harness that starts awf
/// in the background, where the shell ignores SIGINT, still stops it with them.)
pub(crate) struct Signals {
    int: Option<Signal>,
    term: Option<Signal>,
    hup: Option<Signal>,
    /// Fires when a cancel was requested through the shared store (`awf cancel`, `DELETE
    /// /api/executions/{id}` on a worker) for the run this process runs.
    remote: Option<tokio::sync::oneshot::Receiver<()>>,
}

impl Signals {
    pub(crate) fn install() -> Self {
        let hup = SignalKind::hangup();
        let hup_ignored = awf_exec::ignored_signals()
            .is_some_and(|mask| mask & (1u64 << (hup.as_raw_value() - 1)) != 0);
        Self {
            int: signal(SignalKind::interrupt()).ok(),
            term: signal(SignalKind::terminate()).ok(),
            hup: if hup_ignored { None } else { signal(hup).ok() },
            remote: None,
        }
    }

    /// On the shared store `store`, watches the run's cancel request (polled every 500 ms on
    /// the store's runtime until this process drops its `Signals`): `awf cancel` of a run this
    /// terminal process runs cancels it as Ctrl-C would ([`CancelReason::Requested`]).
    /// Also watches the run's lock: should another awf process have taken it while the store
    /// was away ([`awf_postgres::PgStore::lock_lost`]), the run is another's now; it is
    /// cancelled here and `recorder` records nothing more of it (fenced), so its end is not
    /// recorded by this process.
    pub(crate) fn watch_pg_cancel(
        &mut self,
        store: &awf_postgres::PgStore,
        run_id: &RunId,
        recorder: Option<&crate::wiring::RunRecorder>,
    ) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let pool = store.pool().clone();
        let id = run_id.clone();
        let held = store.clone();
        let fenced = match recorder {
            Some(crate::wiring::RunRecorder::Postgres(r)) => Some(r.clone()),
            _ => None,
        };
        store.runtime().spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                if tx.is_closed() {
                    return;
                }
                if held.lock_lost(&id.0) {
                    // No claim epoch matches -1: the run's later writes are dropped.
                    if let Some(r) = &fenced {
                        r.fence(&id.0, -1);
                    }
                    let _ = tx.send(());
                    return;
                }
                // A store away for a while: asked again on the next tick.
                if let Ok(true) = awf_postgres::queue::cancel_requested(&pool, &id).await {
                    let _ = tx.send(());
                    return;
                }
            }
        });
        self.remote = Some(rx);
    }

    /// The next signal's cancel reason; pends forever when none can arrive.
    pub(crate) async fn next(&mut self) -> CancelReason {
        async fn recv(s: &mut Option<Signal>) -> Option<()> {
            match s {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        }
        loop {
            tokio::select! {
                r = recv(&mut self.int) => match r {
                    Some(()) => return CancelReason::Interrupt,
                    None => self.int = None,
                },
                r = recv(&mut self.term) => match r {
                    Some(()) => return CancelReason::Terminate,
                    None => self.term = None,
                },
                r = recv(&mut self.hup) => match r {
                    Some(()) => return CancelReason::Hangup,
                    None => self.hup = None,
                },
                r = async {
                    match &mut self.remote {
                        Some(rx) => rx.await.is_ok(),
                        None => std::future::pending().await,
                    }
                } => {
                    self.remote = None;
                    if r {
                        return CancelReason::Requested;
                    }
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mocked failure is told from a real one by its step's `status=failed` mock; the
    /// other steps' mocks are given back as flags (quoted when they need it).
    #[test]
    fn a_mocked_failure_and_the_mocks_to_keep() {
        let mocks = parse_mocks(&[
            "states.announce.status=FAILED".to_owned(),
            "states.build.output=two words".to_owned(),
            "states.check.status=completed".to_owned(),
        ])
        .unwrap();
        assert!(mocked_failure(&mocks, "announce"));
        assert!(!mocked_failure(&mocks, "check"));
        assert!(!mocked_failure(&mocks, "build"));
        assert_eq!(
            kept_mocks(&mocks, "announce"),
            " --mock 'states.build.output=two words' --mock states.check.status=completed"
        );
    }

    /// Every distinct failure is named once, in order (the message named only the first
    /// of a step output's and a state file's failures); past five, how many more.
    #[test]
    fn a_record_failure_names_every_distinct_failure() {
        let errors: Vec<String> = ["out", "state", "out", "state"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        assert_eq!(distinct_failures(&errors), "out (2 times); state (2 times)");
        let many: Vec<String> = (0..8).map(|i| format!("e{i}")).collect();
        assert_eq!(distinct_failures(&many), "e0; e1; e2; e3; e4; and 3 more");
        let mut again = many;
        again.extend(["e7".to_owned(), "e0".to_owned()]);
        assert_eq!(
            distinct_failures(&again),
            "e0 (2 times); e1; e2; e3; e4; and 3 more (4 failures)"
        );
    }

    /// Breaker (finding 3): the hint of a run whose end was written says what failed, and
    /// only that: the journal, the history row, step outputs, in any combination.
    #[test]
    fn the_hint_of_a_run_whose_end_was_recorded_names_what_failed() {
        let base = "free disk space or fix the data root's permissions; the run's end was \
                    recorded whole (`awf status r1`";
        let journal = "; the other writes that failed were made while it ran (its journal), \
                       which only a run killed before its end would have missed";
        assert_eq!(
            end_recorded_hint("r1", true, false, false),
            format!("{base} and `awf history` show it completed){journal}")
        );
        assert_eq!(
            end_recorded_hint("r1", true, false, true),
            format!(
                "{base} and `awf history` show it completed), with the outputs named above \
                 cut to their first 64 KiB{journal}"
            )
        );
        assert_eq!(
            end_recorded_hint("r1", false, true, true),
            format!(
                "{base} shows it completed), with the outputs named above cut to their first \
                 64 KiB; its history row was not written: `awf history` writes it from the \
                 state file when it next reads the history"
            )
        );
    }

    fn finished(status: RunStatus, error: Option<awf_domain::error::ErrorBody>) -> RunResult {
        RunResult {
            run_id: None,
            workflow: "wf".into(),
            status,
            exit_code: 0,
            terminal: None,
            duration_ms: 1,
            states: std::collections::BTreeMap::new(),
            outputs: std::collections::BTreeMap::new(),
            error,
            message: None,
            spend: None,
        }
    }

    #[test]
    fn a_parked_run_is_summarised_as_a_wait_until_its_reset_not_a_failure() {
        let plain = crate::style::Style::plain();
        let at = "2030-01-01T00:00:00.000Z";
        let body = awf_domain::error::ErrorBody {
            code: ErrorCode::ExecutionAgentUsageLimit,
            message: format!("come back later (usage limit; resets at {at}, in 60s)"),
            hints: vec![format!(
                "the run is parked until the reset ({at}): `awf resume r-1` continues it then"
            )],
            details: [
                ("reset_at".to_owned(), serde_json::json!(at)),
                (
                    awf_domain::ports::store::PARK_UNTIL.to_owned(),
                    serde_json::json!(at),
                ),
            ]
            .into(),
        };
        let parked = finished(RunStatus::Failure, Some(body));
        assert_eq!(
            summary_text(false, true, plain, &parked),
            format!(
                "Workflow parked: waiting for a usage limit until {at}. [EXECUTION.AGENT.USAGE_LIMIT] come back later (usage limit; resets at {at}, in 60s)\n  Hint: the run is parked until the reset ({at}): `awf resume r-1` continues it then\n"
            )
        );
    }

    #[test]
    fn summary_prints_a_success_message_and_each_failure_message_once() {
        let plain = crate::style::Style::plain();
        let mut ok = finished(RunStatus::Success, None);
        assert_eq!(
            summary_text(false, true, plain, &ok),
            "Workflow completed.\n"
        );
        ok.message = Some("deployed 1.2.3".into());
        assert_eq!(
            summary_text(false, true, plain, &ok),
            "Workflow completed: deployed 1.2.3\n"
        );
        let body = |msg: &str| awf_domain::error::ErrorBody {
            code: ErrorCode::ExecutionTerminalFailure,
            message: msg.into(),
            hints: vec!["look".into()],
            details: [(
                "terminal".to_owned(),
                serde_json::json!("__inline_error_verify"),
            )]
            .into(),
        };
        let failed = finished(RunStatus::Failure, Some(body("verify failed")));
        let text = summary_text(false, true, plain, &failed);
        assert_eq!(
            text,
            "Workflow failed: [EXECUTION.WORKFLOW.FAILURE_TERMINAL] verify failed\n  Hint: look\n"
        );
        assert_eq!(text.matches("verify failed").count(), 1);
        // The failing step's line already showed the message: it is not printed again.
        let mut step_failed = finished(RunStatus::Failure, Some(body("step s: boom")));
        let mut st = awf_domain::run::StepState::running("s", std::time::SystemTime::now());
        st.error = Some("step s: boom".into());
        step_failed
            .states
            .insert("s".into(), awf_domain::run::StateResult::from(&st));
        assert_eq!(
            summary_text(false, false, plain, &step_failed),
            "Workflow failed: [EXECUTION.WORKFLOW.FAILURE_TERMINAL] in step 's' (above)\n"
        );
    }

    #[test]
    fn inputs_split_at_the_first_equals() {
        let got = parse_inputs(&["a=1".into(), "b=x=y".into(), "c=".into()]).unwrap();
        assert_eq!(
            got,
            vec![
                ("a".to_owned(), "1".to_owned()),
                ("b".to_owned(), "x=y".to_owned()),
                ("c".to_owned(), String::new())
            ]
        );
    }

    #[test]
    fn input_without_equals_is_a_user_error() {
        let e = parse_inputs(&["oops".into()]).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserInputInvalidFormat);
        assert_eq!(e.message(), "invalid input 'oops': expected name=value");
        for bad in ["API_KEY:sk-live-123456", "=sk-live-123456", " =x"] {
            let e = parse_inputs(&[bad.into()]).unwrap_err();
            assert_eq!(e.code(), ErrorCode::UserInputInvalidFormat);
            assert!(!e.message().contains("sk-live"), "{}", e.message());
            assert!(
                e.message().contains("expected name=value"),
                "{}",
                e.message()
            );
        }
    }
}
