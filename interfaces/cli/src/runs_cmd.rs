//! Commands over recorded runs: `awf resume`, `awf history`, `awf status`, and `awf config
//! show`. Source: spec/workflow.md §3.11 and §4.2.

use std::io::Write;

use awf_application::Facade;
use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::facade::ResumeFrom;
use awf_domain::ports::facade::ResumeRequest;
use awf_domain::ports::store::HistoryFilter;
use awf_domain::ports::store::HistoryRecord;
use awf_domain::ports::store::RunSnapshot;
use awf_domain::ports::store::StoredStatus;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use awf_domain::run::StateResult;
use awf_domain::timefmt::format_rfc3339;

use crate::cli::ConfigAction;
use crate::cli::ConfigArgs;
use crate::cli::HistoryArgs;
use crate::cli::ResumeArgs;
use crate::cli::StatusArgs;
use crate::ctx::Ctx;
use crate::errors::CliError;
use crate::errors::Outcome;
use crate::run_cmd;
use crate::wiring;

/// `awf resume <id>` / `awf resume --list`.
pub async fn resume(ctx: &Ctx, args: &ResumeArgs) -> Outcome {
    let signals = run_cmd::Signals::install();
    let fail = |e: &AwfError| {
        crate::errors::report(
            &CliError::Awf(e.clone()),
            ctx.json(),
            ctx.hints,
            ctx.err_style,
        )
    };
    let w = match wiring::build(ctx.storage.as_deref()) {
        Ok(w) => w,
        Err(e) => return fail(&e),
    };
    if args.list {
        return match list_resumable(ctx, &w) {
            Ok(()) => Outcome::Success,
            Err(e) => fail(&e),
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
    let inputs = match run_cmd::parse_inputs(&args.inputs) {
        Ok(i) => i,
        Err(e) => return fail(&e),
    };
    let config = match w.config() {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    let from = match args.from.as_str() {
        "current" => ResumeFrom::Current,
        "previous" => ResumeFrom::Previous,
        s => ResumeFrom::Step(s.to_owned()),
    };
    let request = ResumeRequest {
        run_id: run_id.clone(),
        from,
        inputs,
        config_inputs: config.inputs,
        env: w.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        working_dir: w.cwd.clone(),
    };
    run_cmd::warn_unrecorded(&w);
    let _lock = match run_cmd::lock_run(&w.data_root, &run_id) {
        Ok(l) => l,
        Err(e) => return fail(&e),
    };
    let recorder = w.recorder.clone();
    let mut services = w.services.clone();
    if services.state_store.is_none() {
        match w.state_store() {
            Ok(s) => services.state_store = Some(s),
            Err(e) => return fail(&e),
        }
    }
    let facade = Facade::new(services);
    let handle = match facade.resume_run(request).await {
        Ok(h) => h,
        Err(e) => return run_cmd::fail_before_start(ctx, &run_id, &e),
    };
    let outcome = run_cmd::drive(ctx, args.output, &run_id, handle, signals, None).await;
    if let Some(r) = recorder {
        r.flush();
    }
    outcome
}

fn list_resumable(ctx: &Ctx, w: &wiring::Wiring) -> Result<(), AwfError> {
    let states = w.state_store()?;
    let runs: Vec<RunSnapshot> = states
        .list()?
        .into_iter()
        .filter(|s| s.status.resumable() && s.parent_run_id.is_none())
        .collect();
    let mut out = std::io::stdout().lock();
    if ctx.json() {
        let rows: Vec<serde_json::Value> = runs
            .iter()
            .map(|s| {
                serde_json::json!({
                    "run_id": s.run_id, "workflow": s.workflow, "status": s.status,
                    "current_state": s.current_state, "started_at": format_rfc3339(s.started_at),
                    "updated_at": format_rfc3339(s.updated_at),
                })
            })
            .collect();
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        );
        return Ok(());
    }
    if runs.is_empty() {
        let _ = writeln!(out, "No resumable runs.");
        return Ok(());
    }
    let _ = writeln!(
        out,
        "{:<36}  {:<24}  {:<9}  {:<20}  UPDATED",
        "RUN ID", "WORKFLOW", "STATUS", "STATE"
    );
    for s in runs {
        let _ = writeln!(
            out,
            "{:<36}  {:<24}  {:<9}  {:<20}  {}",
            s.run_id,
            clip(&s.workflow, 24),
            s.status.as_str(),
            clip(&s.current_state, 20),
            format_rfc3339(s.updated_at)
        );
    }
    Ok(())
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut c: String = s.chars().take(n - 1).collect();
        c.push('…');
        c
    }
}

/// `awf history`.
///
/// # Errors
/// Bad filter values (`USER.INPUT.INVALID_FORMAT`), store failures.
pub fn history(ctx: &Ctx, args: &HistoryArgs) -> Result<Outcome, CliError> {
    let w = wiring::build(ctx.storage.as_deref()).map_err(CliError::Awf)?;
    let status = match args.status.as_deref() {
        None => None,
        Some(s) => Some(parse_status(s).map_err(CliError::Awf)?),
    };
    let since_ms = match args.since.as_deref() {
        None => None,
        Some(d) => Some(parse_day(d).map_err(CliError::Awf)?),
    };
    let filter = HistoryFilter {
        workflow: args.workflow.clone(),
        status,
        since_ms,
        limit: Some(args.limit),
    };
    let store = w.history_store().map_err(CliError::Awf)?;
    let mut out = std::io::stdout().lock();
    if args.stats {
        let stats = store.stats(&filter).map_err(CliError::Awf)?;
        if ctx.json() {
            let _ = writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&stats).unwrap_or_default()
            );
        } else {
            let _ = writeln!(out, "Total runs:       {}", stats.total_executions);
            let _ = writeln!(out, "Succeeded:        {}", stats.success_count);
            let _ = writeln!(out, "Failed:           {}", stats.failed_count);
            let _ = writeln!(out, "Cancelled:        {}", stats.cancelled_count);
            let _ = writeln!(out, "Running:          {}", stats.running_count);
            let avg = stats.avg_duration_ms.map_or_else(
                || "-".to_owned(),
                |ms| awf_domain::duration::format_go(std::time::Duration::from_millis(ms)),
            );
            let _ = writeln!(out, "Average duration: {avg}");
        }
        return Ok(Outcome::Success);
    }
    let rows = store.list(&filter).map_err(CliError::Awf)?;
    if ctx.json() {
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        );
        return Ok(Outcome::Success);
    }
    if rows.is_empty() {
        let _ = writeln!(out, "No runs recorded.");
        return Ok(Outcome::Success);
    }
    let _ = writeln!(
        out,
        "{:<36}  {:<24}  {:<9}  {:>4}  {:<24}  DURATION",
        "RUN ID", "WORKFLOW", "STATUS", "EXIT", "STARTED"
    );
    for r in rows {
        let _ = writeln!(out, "{}", history_line(&r));
    }
    Ok(Outcome::Success)
}

fn history_line(r: &HistoryRecord) -> String {
    let started =
        format_rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_millis(r.started_at_ms));
    let dur = r.duration_ms.map_or_else(
        || "-".to_owned(),
        |ms| awf_domain::duration::format_go(std::time::Duration::from_millis(ms)),
    );
    format!(
        "{:<36}  {:<24}  {:<9}  {:>4}  {:<24}  {dur}",
        r.id,
        clip(&r.workflow_name, 24),
        r.status.as_str(),
        r.exit_code
            .map_or_else(|| "-".to_owned(), |c| c.to_string()),
        started
    )
}

fn parse_status(s: &str) -> Result<StoredStatus, AwfError> {
    match s.to_ascii_lowercase().as_str() {
        "running" => Ok(StoredStatus::Running),
        "success" | "completed" => Ok(StoredStatus::Success),
        "failure" | "failed" => Ok(StoredStatus::Failure),
        "cancelled" | "canceled" => Ok(StoredStatus::Cancelled),
        _ => Err(AwfError::new(
            ErrorCode::UserInputInvalidFormat,
            format!("unknown status '{s}'"),
        )
        .with_hint("use running, success, failure or cancelled")),
    }
}

/// `YYYY-MM-DD` (UTC midnight) → milliseconds since the epoch.
fn parse_day(d: &str) -> Result<u64, AwfError> {
    let t = awf_domain::timefmt::parse_rfc3339(&format!("{d}T00:00:00Z")).ok_or_else(|| {
        AwfError::new(
            ErrorCode::UserInputInvalidFormat,
            format!("invalid date '{d}'"),
        )
        .with_hint("use YYYY-MM-DD, e.g. --since 2026-11-01")
    })?;
    Ok(t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)))
}

/// The run result contract of a recorded run (live or finished).
fn result_of(s: &RunSnapshot) -> RunResult {
    let end = s.completed_at.unwrap_or(s.updated_at);
    RunResult {
        run_id: Some(awf_domain::run::RunId(s.run_id.clone())),
        workflow: s.workflow.clone(),
        status: match s.status {
            StoredStatus::Success => RunStatus::Success,
            StoredStatus::Cancelled => RunStatus::Cancelled,
            StoredStatus::Failure | StoredStatus::Running => RunStatus::Failure,
        },
        exit_code: s.exit_code.unwrap_or(0),
        terminal: s.terminal.clone(),
        duration_ms: end
            .duration_since(s.started_at)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        states: s
            .states
            .iter()
            .map(|(k, v)| (k.clone(), StateResult::from(v)))
            .collect(),
        outputs: s.outputs.clone(),
        error: s.error.clone(),
        message: None,
    }
}

/// The run id that `query` names among `known` ids: the id itself, else the one id that
/// starts with it (as git takes a unique prefix of a hash).
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED`: no run matches (hint: `awf history`), or the prefix is
/// ambiguous (the hint lists the candidates, at most five).
pub fn match_run_id<'a>(
    query: &str,
    known: impl IntoIterator<Item = &'a str>,
) -> Result<String, AwfError> {
    let q = query.trim();
    let mut hits: Vec<&str> = Vec::new();
    for id in known {
        if id == q {
            return Ok(id.to_owned());
        }
        if !q.is_empty() && id.starts_with(q) && !hits.contains(&id) {
            hits.push(id);
        }
    }
    match hits.as_slice() {
        [one] => Ok((*one).to_owned()),
        [] => Err(AwfError::new(
            ErrorCode::UserInputValidationFailed,
            format!("no run with id '{q}'"),
        )
        .with_hint("`awf history` lists recorded runs; a unique prefix of a run id is enough")),
        many => {
            let mut shown: Vec<&str> = many.iter().take(5).copied().collect();
            shown.sort_unstable();
            Err(AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!(
                    "run id prefix '{q}' is ambiguous: {} runs match",
                    many.len()
                ),
            )
            .with_hint(format!(
                "give more characters; candidates: {}",
                shown.join(", ")
            )))
        }
    }
}

/// Resolves a run id or a unique prefix of one against the state files and the history.
///
/// # Errors
/// See [`match_run_id`]; store failures.
pub fn resolve_run_id(w: &wiring::Wiring, query: &str) -> Result<String, AwfError> {
    let mut ids: Vec<String> = w
        .state_store()?
        .list()?
        .into_iter()
        .map(|s| s.run_id)
        .collect();
    if let Ok(history) = w.history_store()
        && let Ok(rows) = history.list(&HistoryFilter::default())
    {
        ids.extend(rows.into_iter().map(|r| r.id));
    }
    match_run_id(query, ids.iter().map(String::as_str))
}

/// Whether `s` is recorded as running but the awf process that ran it is gone (SIGKILL,
/// crash).
fn process_gone(s: &RunSnapshot) -> bool {
    s.status == StoredStatus::Running
        && s.owner_pid
            .is_some_and(|p| !std::path::Path::new("/proc").join(p.to_string()).exists())
}

/// `running`, or `running (its awf process is gone; resume it)` when the process that ran it
/// died (SIGKILL, crash).
fn status_text(s: &RunSnapshot) -> String {
    if process_gone(s) {
        "running (its awf process is gone; `awf resume` continues it)".to_owned()
    } else {
        s.status.as_str().to_owned()
    }
}

/// The duration `awf status` shows, in milliseconds, the same number `awf history` shows:
/// a finished run's recorded duration (the history row's, else end − start); a live run's
/// time since it started (`now`); `None` (unknown) for a run whose process died, since
/// nothing recorded when it stopped.
fn status_duration_ms(
    s: &RunSnapshot,
    history: Option<&HistoryRecord>,
    now: std::time::SystemTime,
) -> Option<u64> {
    let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if s.status == StoredStatus::Running {
        if process_gone(s) {
            return None;
        }
        return Some(now.duration_since(s.started_at).map_or(0, ms));
    }
    if let Some(d) = history.and_then(|h| h.duration_ms) {
        return Some(d);
    }
    let end = s.completed_at.unwrap_or(s.updated_at);
    Some(end.duration_since(s.started_at).map_or(0, ms))
}

/// A terminal's name as shown to users: the inline failure terminal the loader makes for
/// `on_failure: {message, status}` (`__inline_error_<step>`) reads `<step>'s on_failure`.
fn terminal_text(name: &str) -> String {
    match name.strip_prefix("__inline_error_") {
        Some(step) => format!("{step}'s on_failure"),
        None => name.to_owned(),
    }
}

/// `awf status <id>`.
///
/// # Errors
/// Unknown run (`USER.INPUT.VALIDATION_FAILED`), store failures.
pub fn status(ctx: &Ctx, args: &StatusArgs) -> Result<Outcome, CliError> {
    let w = wiring::build(ctx.storage.as_deref()).map_err(CliError::Awf)?;
    let run_id = resolve_run_id(&w, &args.run_id).map_err(CliError::Awf)?;
    let snap = w
        .state_store()
        .and_then(|s| s.load(&run_id))
        .map_err(CliError::Awf)?;
    let record = w
        .history_store()
        .ok()
        .and_then(|h| h.get(&run_id).ok().flatten());
    let duration = status_duration_ms(&snap, record.as_ref(), std::time::SystemTime::now());
    let mut out = std::io::stdout().lock();
    if ctx.json() {
        let mut v = serde_json::to_value(result_of(&snap)).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert("duration_ms".into(), serde_json::json!(duration));
            o.insert("run_status".into(), serde_json::json!(snap.status));
            o.insert(
                "current_state".into(),
                serde_json::json!(snap.current_state),
            );
            o.insert(
                "started_at".into(),
                serde_json::json!(format_rfc3339(snap.started_at)),
            );
            o.insert(
                "updated_at".into(),
                serde_json::json!(format_rfc3339(snap.updated_at)),
            );
        }
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&v).unwrap_or_default()
        );
        return Ok(Outcome::Success);
    }
    let _ = writeln!(out, "Run:       {}", snap.run_id);
    let _ = writeln!(out, "Workflow:  {} ({})", snap.workflow_name, snap.workflow);
    let _ = writeln!(out, "Status:    {}", status_text(&snap));
    let _ = writeln!(out, "State:     {}", snap.current_state);
    let _ = writeln!(out, "Started:   {}", format_rfc3339(snap.started_at));
    let _ = writeln!(
        out,
        "Duration:  {}",
        duration.map_or_else(
            || "unknown (its awf process stopped without recording when)".to_owned(),
            |ms| awf_domain::duration::format_go(std::time::Duration::from_millis(ms))
        )
    );
    if let Some(t) = &snap.terminal {
        let _ = writeln!(out, "Terminal:  {}", terminal_text(t));
    }
    if let Some(e) = &snap.error {
        let _ = writeln!(out, "Error:     [{}] {}", e.code, e.message);
    }
    let _ = writeln!(out, "States:");
    let mut states: Vec<_> = snap.states.values().collect();
    states.sort_by_key(|s| s.started_at);
    for s in states {
        let code = s
            .exit_code
            .map_or_else(String::new, |c| format!(" exit {c}"));
        let _ = writeln!(
            out,
            "  {:<24} {:<9}{code} ({})",
            s.name,
            s.status.as_str(),
            awf_domain::duration::format_go(std::time::Duration::from_millis(s.duration_ms()))
        );
    }
    Ok(Outcome::Success)
}

/// `awf config show`.
///
/// # Errors
/// Invalid configuration YAML.
pub fn config(ctx: &Ctx, args: &ConfigArgs) -> Result<Outcome, CliError> {
    let ConfigAction::Show = args.action;
    let w = wiring::build(ctx.storage.as_deref()).map_err(CliError::Awf)?;
    let cfg = w.config().map_err(CliError::Awf)?;
    let masker = awf_domain::mask::Masker::from_named(
        cfg.inputs
            .iter()
            .filter_map(|(k, v)| v.as_str().map(|s| (k.as_str(), s))),
    );
    let mut inputs = serde_json::Value::Object(cfg.inputs.clone());
    masker.mask_json(&mut inputs);
    let mut out = std::io::stdout().lock();
    if ctx.json() {
        let v = serde_json::json!({
            "path": cfg.path.as_ref().map(|p| p.display().to_string()),
            "inputs": inputs,
            "settings": cfg.other,
        });
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&v).unwrap_or_default()
        );
        return Ok(Outcome::Success);
    }
    match &cfg.path {
        Some(p) => {
            let _ = writeln!(out, "Config: {}", p.display());
        }
        None => {
            let _ = writeln!(
                out,
                "Config: none (create .awf/config.yaml, or set AWF_CONFIG_PATH)\n\
                 Run 'awf init' to create .awf/config.yaml"
            );
        }
    }
    let _ = writeln!(out, "Inputs:");
    if let Some(m) = inputs.as_object() {
        if m.is_empty() {
            let _ = writeln!(out, "  (none)");
        }
        for (k, v) in m {
            let shown = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
            let _ = writeln!(out, "  {k}: {shown}");
        }
    }
    if !cfg.other.is_empty() {
        let _ = writeln!(out, "Settings:");
        for (k, v) in &cfg.other {
            let _ = writeln!(out, "  {k}: {v}");
        }
    }
    for d in &cfg.diagnostics {
        let _ = writeln!(std::io::stderr().lock(), "WARN {}: {}", d.path, d.message);
    }
    Ok(Outcome::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDS: [&str; 3] = [
        "3f2a9c1e-0000-4000-8000-000000000001",
        "3f2b0000-0000-4000-8000-000000000002",
        "9d00aa11-0000-4000-8000-000000000003",
    ];

    #[test]
    fn inline_failure_terminals_are_shown_by_their_step() {
        assert_eq!(
            terminal_text("__inline_error_verify"),
            "verify's on_failure"
        );
        assert_eq!(terminal_text("done"), "done");
    }

    #[test]
    fn a_unique_prefix_names_a_run() {
        assert_eq!(match_run_id("3f2a", IDS).unwrap(), IDS[0]);
        assert_eq!(match_run_id("9", IDS).unwrap(), IDS[2]);
        assert_eq!(match_run_id(IDS[1], IDS).unwrap(), IDS[1]);
        // The same id from two sources (state file and history) is one run.
        assert_eq!(match_run_id("9d", [IDS[2], IDS[2]]).unwrap(), IDS[2]);
    }

    #[test]
    fn an_ambiguous_or_unknown_prefix_is_a_user_error() {
        let e = match_run_id("3f2", IDS).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
        assert_eq!(
            e.message(),
            "run id prefix '3f2' is ambiguous: 2 runs match"
        );
        assert!(e.hints()[0].contains(IDS[0]) && e.hints()[0].contains(IDS[1]));
        let e = match_run_id("zz", IDS).unwrap_err();
        assert_eq!(e.message(), "no run with id 'zz'");
        assert!(match_run_id("", IDS).is_err());
    }
}
