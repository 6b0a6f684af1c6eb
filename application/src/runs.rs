//! Use cases over runs that every front-end shares (not rendering): `@prompts/` input
//! references, run locks, the liveness of a recorded run, the run result of a stored
//! snapshot, run-id prefix matching, and the history, status and resumable queries.
//!
//! Source: spec/workflow.md §1.4 (`@prompts/`), §3.11 (persistence and resume), §4.2
//! (`history`, `status`, `resume --list`).

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::path::Component;
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;
use std::time::SystemTime;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::HistoryStore;
use awf_domain::ports::Host;
use awf_domain::ports::StateStore;
use awf_domain::ports::locks::RunLockGuard;
use awf_domain::ports::store::HistoryFilter;
use awf_domain::ports::store::HistoryRecord;
use awf_domain::ports::store::RunSnapshot;
use awf_domain::ports::store::StoredStatus;
use awf_domain::run::RunId;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use awf_domain::run::StateResult;

use crate::Services;

/// Prompt search path for `--input k=@prompts/<file>`: `$AWF_PROMPTS_PATH` (from `env`), then
/// `<cwd>/.awf/prompts/`, then the global `<config_dir>/prompts/`.
pub fn prompt_dirs(env: &BTreeMap<String, String>, cwd: &Path, config_dir: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(p) = env.get("AWF_PROMPTS_PATH").filter(|p| !p.is_empty()) {
        dirs.push(PathBuf::from(p));
    }
    dirs.push(cwd.join(".awf").join("prompts"));
    dirs.push(config_dir.join("prompts"));
    dirs
}

/// Replaces `@prompts/<rel>` input values by the trimmed contents of the first matching file
/// in `dirs` (read through `host`). Source: spec/workflow.md §1.4.
///
/// # Errors
/// `USER.INPUT.INVALID_FORMAT` for absolute paths or `..`; `USER.INPUT.MISSING_FILE` when no
/// directory has the file; `SYSTEM.IO.READ_FAILED` when it cannot be read.
pub fn expand_prompt_refs(
    inputs: Vec<(String, String)>,
    dirs: &[PathBuf],
    host: &dyn Host,
) -> Result<Vec<(String, String)>, AwfError> {
    inputs
        .into_iter()
        .map(|(k, v)| {
            let Some(rel) = v.trim().strip_prefix("@prompts/") else {
                return Ok((k, v));
            };
            let rel_path = Path::new(rel);
            if rel.is_empty()
                || rel_path.is_absolute()
                || rel_path
                    .components()
                    .any(|c| matches!(c, Component::ParentDir))
            {
                return Err(AwfError::new(
                    ErrorCode::UserInputInvalidFormat,
                    format!("input {k}: invalid prompt reference '{v}'"),
                )
                .with_hint("use @prompts/<relative path> without '..'"));
            }
            for d in dirs {
                let p = d.join(rel_path);
                if host.is_file(&p) {
                    let text = host.read_to_string(&p).map_err(|e| {
                        AwfError::new(
                            ErrorCode::SystemIoReadFailed,
                            format!("read {}: {e}", p.display()),
                        )
                    })?;
                    return Ok((k, text.trim().to_owned()));
                }
            }
            let searched: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
            Err(AwfError::new(
                ErrorCode::UserInputMissingFile,
                format!("input {k}: prompt file {rel} not found"),
            )
            .with_hint(format!("searched: {}", searched.join(", "))))
        })
        .collect()
}

/// Takes the exclusive lock of `run_id` (held while this process runs or resumes it) from the
/// services' [`RunLocks`](awf_domain::ports::RunLocks); `Ok(None)` when runs are not locked.
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` when another process holds it.
pub fn lock_run(services: &Services, run_id: &str) -> Result<Option<RunLockGuard>, AwfError> {
    match &services.run_locks {
        Some(locks) => locks.try_lock(run_id),
        None => Ok(None),
    }
}

/// Whether `s` is recorded as running by another awf process that is alive, as `host` sees
/// it: what `awf resume` refuses when it could not take the run's lock (no lock to take).
pub fn owner_alive_elsewhere(s: &RunSnapshot, host: &dyn Host) -> bool {
    s.status == StoredStatus::Running
        && s.owner_pid
            .is_some_and(|pid| pid != host.pid() && host.process_alive(pid))
}

/// Whether another awf process runs `s` now, by the check `awf resume` refuses it with
/// ([`crate::facade::Facade::resume_run`]): it holds the run's lock, or, when there is no
/// lock to take, the run is recorded running by a live awf process
/// ([`owner_alive_elsewhere`]). The lock is taken and released at once.
pub fn live_elsewhere(services: &Services, s: &RunSnapshot) -> bool {
    match lock_run(services, &s.run_id) {
        Err(_) => true,
        Ok(Some(_)) => false,
        Ok(None) => owner_alive_elsewhere(s, services.host.as_ref()),
    }
}

/// Whether `s` is recorded as running but the awf process that ran it is gone (SIGKILL,
/// crash). A top-level run's process holds the run's lock for the whole run: when `locks`
/// can tell, a lock nobody holds means it is gone, although its recorded pid may name
/// another program by now (reused after a restart; breaker: `awf history` said `running`,
/// and DELETE's hint said to `kill -INT` an unrelated process). Otherwise (a sub-workflow's
/// run, no locks), whether the recorded pid is alive, as `host` sees it.
pub fn process_gone(
    s: &RunSnapshot,
    locks: Option<&dyn awf_domain::ports::locks::RunLocks>,
    host: &dyn Host,
) -> bool {
    if s.status != StoredStatus::Running {
        return false;
    }
    let Some(pid) = s.owner_pid else {
        return false;
    };
    if s.parent_run_id.is_none()
        && pid != host.pid()
        && let Some(held) = locks.and_then(|l| l.is_held(&s.run_id))
    {
        return !held;
    }
    !host.process_alive(pid)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The run result contract of a recorded run (live or finished): a run still `running` is a
/// failure with exit code 0 until it ends; `duration_ms` is end (or last write) − start.
pub fn result_of(s: &RunSnapshot) -> RunResult {
    let end = s.completed_at.unwrap_or(s.updated_at);
    RunResult {
        run_id: Some(RunId(s.run_id.clone())),
        workflow: s.workflow.clone(),
        status: match s.status {
            StoredStatus::Success => RunStatus::Success,
            StoredStatus::Cancelled => RunStatus::Cancelled,
            StoredStatus::Failure
            | StoredStatus::Running
            | StoredStatus::Waiting
            | StoredStatus::Queued => RunStatus::Failure,
        },
        exit_code: s.exit_code.unwrap_or(0),
        // Runs recorded before the engine named it so kept the internal name.
        terminal: s
            .terminal
            .as_deref()
            .map(awf_domain::workflow::terminal_display_name),
        duration_ms: end.duration_since(s.started_at).map_or(0, millis),
        states: s
            .states
            .iter()
            .map(|(k, v)| (k.clone(), StateResult::from(v)))
            .collect(),
        outputs: s.outputs.clone(),
        error: s.error.clone(),
        message: None,
        spend: s.spend,
    }
}

/// The run id that `query` names among `known` ids: the id itself, else the one id that
/// starts with it (as git takes a unique prefix of a hash).
///
/// # Errors
/// `USER.FACADE.RUN_NOT_FOUND` when no run matches (hint: `awf history`);
/// `USER.INPUT.VALIDATION_FAILED` when the prefix is ambiguous (the hint lists the
/// candidates, at most five, and says how many more match).
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
            ErrorCode::UserFacadeRunNotFound,
            format!("no run with id '{q}'"),
        )
        .with_hint("`awf history` lists recorded runs; a unique prefix of a run id is enough")),
        many => Err(awf_domain::run::RunId::ambiguous_prefix(
            q,
            many.len(),
            many,
        )),
    }
}

/// Resolves a run id or a unique prefix of one against the state files and (when it can be
/// read) the history.
///
/// # Errors
/// See [`match_run_id`]; the state store's read errors.
pub fn resolve_run_id(
    states: &dyn StateStore,
    history: Option<&dyn HistoryStore>,
    query: &str,
) -> Result<String, AwfError> {
    // Names only: a state file that cannot be read is a run all the same (`awf status` then
    // says why; `awf resume --list` points there; breaker: it answered "no run with id"),
    // and nothing is read or parsed to match a prefix (breaker: with 30,000 runs `awf
    // status <prefix>` took 2.1 s reading every state file).
    let mut ids = states.ids()?;
    if let Some(rows) = history.and_then(|h| h.ids(&HistoryFilter::default()).ok()) {
        ids.extend(rows);
    }
    match_run_id(query, ids.iter().map(String::as_str))
}

/// `err`, a state store's "not found" for `run_id`, said better when the history has the
/// run: its awf process was stopped between the run's history row and its first state file
/// (`awf history` lists it as `running (process gone)`), or its state file was removed, so
/// there is nothing to show or resume; the hint gives the command that starts it again. Any
/// other error as it is.
pub fn explain_missing_state(
    err: AwfError,
    history: Option<&dyn HistoryStore>,
    run_id: &str,
) -> AwfError {
    let not_found = matches!(
        err.code(),
        ErrorCode::UserInputValidationFailed | ErrorCode::UserFacadeRunNotFound
    ) && err.message().starts_with("workflow execution not found");
    let Some(row) = history
        .filter(|_| not_found)
        .and_then(|h| h.get(run_id).ok().flatten())
    else {
        return err;
    };
    let why = if row.status == StoredStatus::Running {
        "its state file is missing (its awf process was stopped before it wrote it, or the \
         file was removed)"
    } else {
        "its state file is missing"
    };
    let e = AwfError::new(
        err.code(),
        format!(
            "workflow execution not found: {run_id} (the history has this run of '{}', but \
             {why}: there is nothing to show or resume)",
            row.workflow_name
        ),
    );
    // A sub-workflow's run is resumed through its parent's.
    if let Some(parent) = &row.parent_run_id {
        return e.with_hint(format!(
            "it ran as a sub-workflow of run {parent}: `awf status {parent}`, `awf resume {parent}`"
        ));
    }
    let typed = std::path::Path::new(&row.workflow_id);
    let relative_file = typed.is_relative()
        && (row.workflow_id.contains('/')
            || typed.extension().is_some_and(|x| x == "yaml" || x == "yml"));
    e.with_hint(if relative_file {
        format!(
            "start it again: awf run {} (from the directory it was started in)",
            awf_domain::shell::quote_arg(&row.workflow_id)
        )
    } else {
        format!(
            "start it again: awf run {}",
            awf_domain::shell::quote_arg(&row.workflow_id)
        )
    })
}

/// What `awf resume --list` finds among the state files ([`resumable_runs`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Resumable {
    /// The runs that can be resumed, newest first.
    pub runs: Vec<RunSnapshot>,
    /// The run ids of the state files read that cannot be (sorted): not listed, said apart.
    pub unreadable: Vec<String>,
}

/// `awf resume --list`: the recorded top-level runs that can be resumed (not succeeded), newest
/// first. Those another awf process runs now are among them: a front-end leaves them out
/// ([`live_elsewhere`], or what its shared store knows of them). The state files of the runs
/// `history` records as succeeded are not read (a success is never resumed, and its state
/// file is written before its row: breaker, 30,000 runs took 2.6 s to list); without a
/// history, every state file is read.
///
/// # Errors
/// The state store's read errors.
pub fn resumable_runs(
    states: &dyn StateStore,
    history: Option<&dyn HistoryStore>,
) -> Result<Resumable, AwfError> {
    let succeeded = HistoryFilter {
        status: Some(StoredStatus::Success),
        ..Default::default()
    };
    let skip: BTreeSet<String> = history
        .and_then(|h| h.ids(&succeeded).ok())
        .unwrap_or_default()
        .into_iter()
        .collect();
    let (mut runs, mut unreadable) = states.scan(&skip)?;
    runs.retain(|s| s.status.resumable() && s.parent_run_id.is_none());
    runs.sort_by(|a, b| {
        b.started_at
            .cmp(&a.started_at)
            .then_with(|| b.run_id.cmp(&a.run_id))
    });
    unreadable.sort();
    Ok(Resumable { runs, unreadable })
}

/// `awf resume --list`'s PROGRESS of `snap`: `done/total`, the states the run completed (in
/// any attempt; a loop body or a parallel branch counts once, as it is one state) out of the
/// states of its workflow that are not terminals, the workflow read from the file the run was
/// started with, as `awf resume` reads it; `done/?` when that file cannot be loaded any more.
pub fn resume_progress(services: &Services, snap: &RunSnapshot) -> String {
    let done = snap
        .states
        .values()
        .filter(|st| st.status == awf_domain::run::StepStatus::Completed)
        .count();
    let identifier = snap
        .workflow_path
        .as_ref()
        .filter(|p| services.host.is_file(p))
        .map_or_else(|| snap.workflow.clone(), |p| p.display().to_string());
    match services.repository.load(&identifier, None) {
        Ok(loaded) => {
            let total = loaded
                .workflow
                .states
                .values()
                .filter(|s| !matches!(s.kind, awf_domain::workflow::StateKind::Terminal(_)))
                .count();
            // A state renamed in the file since still counts as done.
            format!("{done}/{}", total.max(done))
        }
        Err(_) => format!("{done}/?"),
    }
}

/// A `--status` filter word of `awf history`: AWF (Go)'s `completed`/`failed`/`cancelled`
/// (also `canceled`), the stored `running`/`success`/`failure`, `waiting` (a run parked on
/// an agent's usage limit) or `queued` (a run of the shared store's queue not started yet),
/// any case.
///
/// # Errors
/// `USER.INPUT.INVALID_FORMAT` for another word.
pub fn parse_status(s: &str) -> Result<StoredStatus, AwfError> {
    match s.to_ascii_lowercase().as_str() {
        "running" => Ok(StoredStatus::Running),
        "success" | "completed" => Ok(StoredStatus::Success),
        "failure" | "failed" => Ok(StoredStatus::Failure),
        "cancelled" | "canceled" => Ok(StoredStatus::Cancelled),
        "waiting" => Ok(StoredStatus::Waiting),
        "queued" => Ok(StoredStatus::Queued),
        _ => Err(AwfError::new(
            ErrorCode::UserInputInvalidFormat,
            format!("unknown status '{s}'"),
        )
        .with_hint(
            "use running, waiting, queued, completed, failed or cancelled (success and failure work too)",
        )),
    }
}

/// A `--since` day of `awf history`, `YYYY-MM-DD` (UTC midnight), as milliseconds since the
/// epoch.
///
/// # Errors
/// `USER.INPUT.INVALID_FORMAT` for anything else.
pub fn parse_day(d: &str) -> Result<u64, AwfError> {
    let t = awf_domain::timefmt::parse_rfc3339(&format!("{d}T00:00:00Z")).ok_or_else(|| {
        AwfError::new(
            ErrorCode::UserInputInvalidFormat,
            format!("invalid date '{d}'"),
        )
        .with_hint("use YYYY-MM-DD, e.g. --since 2026-11-01")
    })?;
    Ok(t.duration_since(std::time::UNIX_EPOCH).map_or(0, millis))
}

/// The filter of `awf history` from its flags (`--workflow`, `--status`, `--since`,
/// `--limit`), as given on the command line.
///
/// # Errors
/// `USER.INPUT.INVALID_FORMAT` for a bad status word or day ([`parse_status`], [`parse_day`]);
/// `USER.INPUT.VALIDATION_FAILED` for a `--limit` of 0, as `GET /api/history?limit=0` refuses
/// it (AWF (Go) gives 0 no meaning: its query asks for no row, so it printed `No execution
/// history found` whatever the history held), naming the flag as the user typed it
/// (`limit_flag`: `-n` or `--limit`).
pub fn history_filter(
    workflow: Option<&str>,
    status: Option<&str>,
    since: Option<&str>,
    limit: usize,
    limit_flag: &str,
) -> Result<HistoryFilter, AwfError> {
    if limit == 0 {
        return Err(AwfError::new(
            ErrorCode::UserInputValidationFailed,
            format!("{limit_flag} 0 is not a positive whole number"),
        )
        .with_hint(format!("use {limit_flag} 1 or more (the default is 20)")));
    }
    Ok(HistoryFilter {
        workflow: workflow.map(str::to_owned),
        status: status.map(parse_status).transpose()?,
        since_ms: since.map(parse_day).transpose()?,
        limit: Some(limit),
    })
}

/// How long after its start a run recorded as `running` in the history may still have no
/// state file: the recorder writes the file right after the row (milliseconds apart), so a row
/// older than this without one is a run whose awf process was killed in between.
pub const NO_STATE_FILE_GRACE: Duration = Duration::from_secs(60);

/// The ids among `rows` still `running` whose awf process is gone (SIGKILL, crash): their state
/// file names the process; or they have none [`NO_STATE_FILE_GRACE`] after their start
/// (`now`) and nobody holds their run lock (`locks`), killed between their history row and
/// their first state file (a breaker saw such runs listed as running for ever; a live run
/// that cannot write its state file holds its lock). A top-level run whose state file cannot
/// be read, or names a process that is alive (a pid used again since), is gone too once the
/// grace has passed and its lock can be taken: every live run holds its lock from its start
/// (sub-workflow runs, which take none, are left to their state file). Without state files,
/// none.
pub fn gone_runs(
    rows: &[HistoryRecord],
    states: Option<&dyn StateStore>,
    locks: Option<&dyn awf_domain::ports::locks::RunLocks>,
    host: &dyn Host,
    now: SystemTime,
) -> BTreeSet<String> {
    let Some(states) = states else {
        return BTreeSet::new();
    };
    let now_ms = now.duration_since(std::time::UNIX_EPOCH).map_or(0, millis);
    rows.iter()
        .filter(|r| r.status == StoredStatus::Running)
        .filter(|r| {
            let old = now_ms.saturating_sub(r.started_at_ms) > millis(NO_STATE_FILE_GRACE);
            // Taken here (released at once): nobody holds it. A sub-workflow's run takes no
            // lock: it is gone once its parent run has ended or its process is gone (chaos
            // trial: child runs whose state file was damaged, and whose parent's resume
            // started them again, were listed as running for ever).
            let lock_free = |id: &str| locks.is_some_and(|l| matches!(l.try_lock(id), Ok(Some(_))));
            let free = || match r.parent_run_id.as_deref() {
                None => lock_free(&r.id),
                Some(parent) => states.load(parent).is_ok_and(|p| {
                    p.status != StoredStatus::Running
                        || process_gone(&p, locks, host)
                        || (p.parent_run_id.is_none() && lock_free(parent))
                }),
            };
            match states.load(&r.id) {
                Ok(s) if process_gone(&s, locks, host) => true,
                Ok(s) => s.status == StoredStatus::Running && old && free(),
                // Not found (a state file that cannot be read is another matter).
                Err(e)
                    if matches!(
                        e.code(),
                        ErrorCode::UserInputValidationFailed | ErrorCode::UserFacadeRunNotFound
                    ) =>
                {
                    old
                        // Held by another process: the run is alive.
                        && locks.is_none_or(|l| l.try_lock(&r.id).is_ok())
                }
                Err(_) => old && free(),
            }
        })
        .map(|r| r.id.clone())
        .collect()
}

/// Settles the `running` rows among `rows` whose state file says the run has ended: awf
/// writes a run's last state before its history row, and one killed between the two (or
/// whose row could not be written) left a row that said `running` for ever. Each such row
/// takes the state file's status, exit code, end, duration and error. Returns how many
/// rows were settled, by their status before (always `running`) and after, for counts
/// taken from the rows as they were (`awf history --stats`). Without state files, none.
pub fn settle_ended_rows(
    rows: &mut [HistoryRecord],
    states: Option<&dyn StateStore>,
) -> Vec<StoredStatus> {
    let Some(states) = states else {
        return Vec::new();
    };
    let mut settled = Vec::new();
    for r in rows
        .iter_mut()
        .filter(|r| r.status == StoredStatus::Running)
    {
        let Ok(s) = states.load(&r.id) else {
            continue;
        };
        if !matches!(
            s.status,
            StoredStatus::Success | StoredStatus::Failure | StoredStatus::Cancelled
        ) {
            continue;
        }
        let ms = |t: SystemTime| t.duration_since(std::time::UNIX_EPOCH).map_or(0, millis);
        let end = s.completed_at.unwrap_or(s.updated_at);
        r.status = s.status;
        r.exit_code = s.exit_code;
        r.completed_at_ms = Some(ms(end));
        r.duration_ms = Some(end.duration_since(s.started_at).map_or(0, millis));
        r.error_message = s.error.map(|e| e.message);
        settled.push(s.status);
    }
    settled
}

/// Writes as they ended the rows of `history` still `running` whose state file says the run
/// ended ([`settle_ended_rows`]) and whose run lock nobody holds (a live run writes its own
/// row when it ends), so that filters and totals read from the database agree with what is
/// shown. Best effort: a row that cannot be written now (a read-only database, another
/// writer) is settled by a later read, and shown as it ended meanwhile.
pub fn settle_history(
    history: &dyn HistoryStore,
    states: Option<&dyn StateStore>,
    locks: Option<&dyn awf_domain::ports::locks::RunLocks>,
) {
    let running = HistoryFilter {
        status: Some(StoredStatus::Running),
        ..Default::default()
    };
    let Ok(mut rows) = history.list(&running) else {
        return;
    };
    if settle_ended_rows(&mut rows, states).is_empty() {
        return;
    }
    for r in rows.iter().filter(|r| r.status != StoredStatus::Running) {
        if locks.is_some_and(|l| l.try_lock(&r.id).is_err()) {
            continue;
        }
        let _ = history.settle(r);
    }
}

/// The duration `awf status` shows, in milliseconds, the same number `awf history` shows: a
/// finished run's recorded duration (the history row's, else end − start); a live run's time
/// since it started (`now`); `None` for a queued run (it has not run: `awf history` shows `-`
/// for it) and for a run whose process died (unknown, since nothing recorded when it
/// stopped).
pub fn status_duration_ms(
    s: &RunSnapshot,
    history: Option<&HistoryRecord>,
    now: SystemTime,
    gone: bool,
) -> Option<u64> {
    if s.status == StoredStatus::Queued {
        // Not started: it has no duration (as `awf history` and HTTP show it).
        return None;
    }
    if s.status == StoredStatus::Running {
        if gone {
            return None;
        }
        return Some(now.duration_since(s.started_at).map_or(0, millis));
    }
    if let Some(d) = history.and_then(|h| h.duration_ms) {
        return Some(d);
    }
    let end = s.completed_at.unwrap_or(s.updated_at);
    Some(end.duration_since(s.started_at).map_or(0, millis))
}

/// What `awf status` shows of one recorded run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunStatusView {
    /// The state file.
    pub snapshot: RunSnapshot,
    /// See [`status_duration_ms`].
    pub duration_ms: Option<u64>,
    /// Recorded as running, its process gone ([`process_gone`]).
    pub process_gone: bool,
    /// The interpolated message of the success terminal it ended on, as the store kept it
    /// ([`StateStore::terminal_message`]).
    pub message: Option<String>,
}

/// `awf status <id or prefix>`: resolves the id, loads its state file and history row, and
/// works out its duration at the services' clock and liveness on its host.
///
/// # Errors
/// [`resolve_run_id`]'s errors; the state store's load errors.
pub fn run_status(
    services: &Services,
    states: &dyn StateStore,
    history: Option<&dyn HistoryStore>,
    query: &str,
) -> Result<RunStatusView, AwfError> {
    let run_id = resolve_run_id(states, history, query)?;
    let snapshot = states
        .load(&run_id)
        .map_err(|e| explain_missing_state(e, history, &run_id))?;
    let record = history.and_then(|h| h.get(&run_id).ok().flatten());
    let gone = process_gone(
        &snapshot,
        services.run_locks.as_deref(),
        services.host.as_ref(),
    );
    let duration_ms = status_duration_ms(&snapshot, record.as_ref(), services.clock.now(), gone);
    Ok(RunStatusView {
        process_gone: gone,
        message: states.terminal_message(&run_id),
        snapshot,
        duration_ms,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use awf_domain::ports::fakes::FakeHost;
    use std::sync::Arc;

    const IDS: [&str; 3] = [
        "3f2a9c1e-0000-4000-8000-000000000001",
        "3f2b0000-0000-4000-8000-000000000002",
        "9d00aa11-0000-4000-8000-000000000003",
    ];

    #[test]
    fn every_stored_status_is_a_history_filter_word() {
        assert_eq!(parse_status("waiting").unwrap(), StoredStatus::Waiting);
        assert_eq!(parse_status("Completed").unwrap(), StoredStatus::Success);
        assert_eq!(parse_status("canceled").unwrap(), StoredStatus::Cancelled);
        let e = parse_status("parked").unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserInputInvalidFormat);
        assert!(e.hints()[0].contains("waiting"), "{:?}", e.hints());
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
        assert_eq!(e.code(), ErrorCode::UserFacadeRunNotFound);
        assert_eq!(e.message(), "no run with id 'zz'");
        assert!(match_run_id("", IDS).is_err());
    }

    #[test]
    fn prompt_references_read_the_first_matching_file() {
        let host = FakeHost::default()
            .file("/b/p.md", "  from b\n")
            .file("/a/sub/q.md", "from a")
            .file("/a/p.md", "from a too");
        let dirs = vec![
            PathBuf::from("/x"),
            PathBuf::from("/b"),
            PathBuf::from("/a"),
        ];
        let got = expand_prompt_refs(
            vec![
                ("x".into(), "@prompts/p.md".into()),
                ("y".into(), "@prompts/sub/q.md".into()),
                ("z".into(), "plain".into()),
            ],
            &dirs,
            &host,
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                ("x".into(), "from b".into()),
                ("y".into(), "from a".into()),
                ("z".into(), "plain".into())
            ]
        );
        let e = expand_prompt_refs(
            vec![("x".into(), "@prompts/../etc/passwd".into())],
            &dirs,
            &host,
        )
        .unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserInputInvalidFormat);
        let e = expand_prompt_refs(vec![("x".into(), "@prompts/none.md".into())], &dirs, &host)
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserInputMissingFile);
        assert_eq!(e.hints(), ["searched: /x, /b, /a"]);
        let env = BTreeMap::from([("AWF_PROMPTS_PATH".to_owned(), "/env".to_owned())]);
        assert_eq!(
            prompt_dirs(&env, Path::new("/w"), Path::new("/c")),
            [
                PathBuf::from("/env"),
                PathBuf::from("/w/.awf/prompts"),
                PathBuf::from("/c/prompts")
            ]
        );
    }

    /// A history row of workflow `wf` still `running`, started at `started_ms`.
    fn running_row(id: &str, started_ms: u64, parent: Option<&str>) -> HistoryRecord {
        HistoryRecord {
            id: id.into(),
            workflow_id: "wf".into(),
            workflow_name: "wf".into(),
            status: StoredStatus::Running,
            exit_code: None,
            started_at_ms: started_ms,
            completed_at_ms: None,
            duration_ms: None,
            error_message: None,
            parent_run_id: parent.map(str::to_owned),
            spend: None,
        }
    }

    fn snapshot(status: StoredStatus, pid: Option<u32>) -> RunSnapshot {
        let t0 = std::time::UNIX_EPOCH + Duration::from_secs(1_000);
        RunSnapshot {
            schema_version: 1,
            run_id: "r".into(),
            parent_run_id: None,
            workflow: "wf".into(),
            workflow_name: "wf".into(),
            workflow_path: None,
            status,
            current_state: "a".into(),
            inputs: serde_json::Map::new(),
            states: BTreeMap::new(),
            started_at: t0,
            updated_at: t0 + Duration::from_millis(1_500),
            completed_at: None,
            exit_code: None,
            terminal: None,
            error: None,
            outputs: BTreeMap::new(),
            owner_pid: pid,
            loop_position: None,
            spend: None,
            waiting_until: None,
            child_runs: Default::default(),
            mocks: Default::default(),
            working_dir: None,
        }
    }

    /// A run another awf process runs now is the one `awf resume` refuses: its lock held
    /// elsewhere; with no lock to take, recorded running by a live process other than this
    /// one. A run whose process is gone, or that has ended, is not.
    #[test]
    fn a_run_is_live_elsewhere_when_its_lock_is_held_or_its_owner_lives() {
        let host = FakeHost::default();
        host.process(77, true);
        host.process(78, false);
        let exec = Arc::new(awf_domain::ports::fakes::FakeExecutor::new());
        let repo = awf_domain::ports::fakes::FakeRepository::new;
        let locks = awf_domain::ports::fakes::FakeRunLocks::default();
        let locked = Services {
            run_locks: Some(Arc::new(locks.clone())),
            ..Services::fakes(repo(), Arc::clone(&exec) as _)
        };
        let unlocked = Services {
            host: Arc::new(host),
            ..Services::fakes(repo(), exec)
        };
        let snap = |status, pid| {
            let mut s = snapshot(status, Some(pid));
            s.run_id = "r".into();
            s
        };
        let running = snap(StoredStatus::Running, 77);
        // With locks: the lock decides, whatever the recorded process.
        assert!(!live_elsewhere(&locked, &running));
        assert!(locks.held().is_empty(), "taken and released at once");
        let held = awf_domain::ports::locks::RunLocks::try_lock(&locks, "r").unwrap();
        assert!(live_elsewhere(&locked, &snap(StoredStatus::Failure, 78)));
        drop(held);
        // Without: a live owner other than this process.
        assert!(live_elsewhere(&unlocked, &running));
        assert!(!live_elsewhere(&unlocked, &snap(StoredStatus::Running, 78)));
        assert!(!live_elsewhere(
            &unlocked,
            &snap(StoredStatus::Running, 4242)
        ));
        assert!(!live_elsewhere(&unlocked, &snap(StoredStatus::Failure, 77)));
    }

    /// A `running` history row is gone when its state file names a dead process, or when it
    /// has no state file a minute after its start (awf killed between the row and the file);
    /// a younger one without a file is a run starting.
    #[test]
    fn a_running_row_without_a_state_file_after_a_minute_is_gone() {
        let host = FakeHost::default();
        host.process(77, false);
        let row = |id: &str, started_s: u64| running_row(id, started_s * 1_000, None);
        let mut dead = snapshot(StoredStatus::Running, Some(77));
        dead.run_id = "dead".into();
        let states = awf_domain::ports::fakes::FakeStateStore::with(vec![dead]);
        let rows = [
            row("dead", 1_000),
            row("fileless-old", 1_000),
            row("fileless-new", 1_095),
        ];
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_100);
        let gone = gone_runs(&rows, Some(&states), None, &host, now);
        assert_eq!(
            gone.into_iter().collect::<Vec<_>>(),
            vec!["dead".to_owned(), "fileless-old".to_owned()]
        );
        // One whose run lock another process holds is alive (it could not write its state
        // file, a breaker's unwritable states directory, and goes on).
        let locks = awf_domain::ports::fakes::FakeRunLocks::default();
        let _held = awf_domain::ports::locks::RunLocks::try_lock(&locks, "fileless-old").unwrap();
        let gone = gone_runs(&rows, Some(&states), Some(&locks), &host, now);
        assert_eq!(
            gone.into_iter().collect::<Vec<_>>(),
            vec!["dead".to_owned()]
        );
    }

    /// A top-level run whose state file names a live process (its pid used again since) is
    /// gone once its lock is free a minute after its start; held, it is alive; a
    /// sub-workflow's run (which takes no lock) goes with its parent.
    #[test]
    fn a_running_row_whose_pid_lives_on_is_gone_when_its_lock_is_free() {
        let host = FakeHost::default();
        host.process(1, true);
        let row = |id: &str, parent: Option<&str>| running_row(id, 1_000_000, parent);
        let snap = |id: &str| {
            let mut s = snapshot(StoredStatus::Running, Some(1));
            s.run_id = id.into();
            s
        };
        let states =
            awf_domain::ports::fakes::FakeStateStore::with(vec![snap("reused"), snap("child")]);
        let rows = [row("reused", None), row("child", Some("reused"))];
        let locks = awf_domain::ports::fakes::FakeRunLocks::default();
        let later = std::time::UNIX_EPOCH + Duration::from_secs(1_100);
        let gone = gone_runs(&rows, Some(&states), Some(&locks), &host, later);
        assert_eq!(
            gone.into_iter().collect::<Vec<_>>(),
            vec!["child".to_owned(), "reused".to_owned()]
        );
        // Within the grace, or with its lock held, it is alive.
        let soon = std::time::UNIX_EPOCH + Duration::from_secs(1_010);
        assert!(gone_runs(&rows, Some(&states), Some(&locks), &host, soon).is_empty());
        let _held = awf_domain::ports::locks::RunLocks::try_lock(&locks, "reused").unwrap();
        assert!(gone_runs(&rows, Some(&states), Some(&locks), &host, later).is_empty());
    }

    /// A sub-workflow's run recorded running whose state file cannot be read, or names a
    /// live process, is gone a minute after its start once its parent run has ended (its
    /// resume started the child again) or the parent's process is gone; while the parent
    /// runs, it is alive.
    #[test]
    fn a_child_run_goes_with_its_parent() {
        let host = FakeHost::default();
        host.process(1, true);
        let row = |id: &str, parent: &str| running_row(id, 1_000_000, Some(parent));
        let snap = |id: &str, status| {
            let mut s = snapshot(status, Some(1));
            s.run_id = id.into();
            s
        };
        /// A store whose `damaged*` state files cannot be read.
        struct Damaged(awf_domain::ports::fakes::FakeStateStore);
        impl StateStore for Damaged {
            fn load(&self, run_id: &str) -> Result<RunSnapshot, awf_domain::AwfError> {
                if run_id.starts_with("damaged") {
                    return Err(awf_domain::AwfError::new(
                        ErrorCode::SystemIoReadFailed,
                        "EOF while parsing",
                    ));
                }
                self.0.load(run_id)
            }
            fn list(&self) -> Result<Vec<RunSnapshot>, awf_domain::AwfError> {
                self.0.list()
            }
            fn save(&self, snapshot: &RunSnapshot) -> Result<(), awf_domain::AwfError> {
                self.0.save(snapshot)
            }
        }
        let states = Damaged(awf_domain::ports::fakes::FakeStateStore::with(vec![
            snap("ended", StoredStatus::Success),
            snap("live", StoredStatus::Running),
            snap("child-of-live", StoredStatus::Running),
            snap("child-of-ended", StoredStatus::Running),
        ]));
        let rows = [
            row("child-of-ended", "ended"),
            row("child-of-live", "live"),
            row("damaged", "ended"),
            row("damaged-of-live", "live"),
        ];
        let locks = awf_domain::ports::fakes::FakeRunLocks::default();
        let _held = awf_domain::ports::locks::RunLocks::try_lock(&locks, "live").unwrap();
        let later = std::time::UNIX_EPOCH + Duration::from_secs(1_100);
        let gone = gone_runs(&rows, Some(&states), Some(&locks), &host, later);
        assert_eq!(
            gone.into_iter().collect::<Vec<_>>(),
            vec!["child-of-ended".to_owned(), "damaged".to_owned()]
        );
        let soon = std::time::UNIX_EPOCH + Duration::from_secs(1_010);
        assert!(gone_runs(&rows, Some(&states), Some(&locks), &host, soon).is_empty());
    }

    /// A row left `running` by an awf killed between its last state file and its history
    /// row takes the state file's end (a breaker found it listed as running for ever); a
    /// row of a run that is still running, or has no state file, is left as it is.
    #[test]
    fn a_running_row_whose_state_file_says_ended_is_settled() {
        let row = |id: &str| running_row(id, 1_000_000, None);
        let mut ended = snapshot(StoredStatus::Failure, Some(77));
        ended.run_id = "ended".into();
        ended.exit_code = Some(3);
        ended.completed_at = Some(std::time::UNIX_EPOCH + Duration::from_millis(1_002_500));
        ended.error =
            Some(awf_domain::AwfError::new(ErrorCode::ExecutionCommandFailed, "boom").body());
        let mut live = snapshot(StoredStatus::Running, Some(77));
        live.run_id = "live".into();
        let states = awf_domain::ports::fakes::FakeStateStore::with(vec![ended, live]);
        let mut rows = [row("ended"), row("live"), row("fileless")];
        let settled = settle_ended_rows(&mut rows, Some(&states));
        assert_eq!(settled, vec![StoredStatus::Failure]);
        assert_eq!(
            (
                rows[0].status,
                rows[0].exit_code,
                rows[0].completed_at_ms,
                rows[0].duration_ms,
                rows[0].error_message.as_deref()
            ),
            (
                StoredStatus::Failure,
                Some(3),
                Some(1_002_500),
                Some(2_500),
                Some("boom")
            )
        );
        assert_eq!(rows[1].status, StoredStatus::Running);
        assert_eq!(rows[2].status, StoredStatus::Running);
        assert!(settle_ended_rows(&mut rows, None).is_empty());
    }

    #[test]
    fn a_running_run_whose_process_died_is_gone_and_has_no_duration() {
        let host = FakeHost::default();
        host.process(77, true);
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_010);
        let live = snapshot(StoredStatus::Running, Some(77));
        assert!(!process_gone(&live, None, &host));
        assert_eq!(status_duration_ms(&live, None, now, false), Some(10_000));
        host.process(77, false);
        assert!(process_gone(&live, None, &host));
        assert_eq!(status_duration_ms(&live, None, now, true), None);
        // A finished run is never gone; its duration is the recorded one.
        let done = snapshot(StoredStatus::Failure, Some(77));
        assert!(!process_gone(&done, None, &host));
        assert_eq!(status_duration_ms(&done, None, now, true), Some(1_500));
        let r = result_of(&done);
        assert_eq!(
            (r.status, r.duration_ms, r.exit_code),
            (RunStatus::Failure, 1_500, 0)
        );
    }

    /// Locks that say whether a run's lock is held, without taking it.
    struct Probe(Option<bool>);

    impl awf_domain::ports::locks::RunLocks for Probe {
        fn try_lock(
            &self,
            _run_id: &str,
        ) -> Result<Option<awf_domain::ports::locks::RunLockGuard>, awf_domain::AwfError> {
            Ok(None)
        }

        fn is_held(&self, _run_id: &str) -> Option<bool> {
            self.0
        }
    }

    /// Breaker: a pid reused by another program (after a restart) made a dead run look live
    /// everywhere. A top-level run's lock says whether its process is there; a sub-workflow's
    /// run (its parent's process holds the parent's lock) and locks that cannot tell fall
    /// back on the pid.
    #[test]
    fn a_top_level_run_whose_lock_nobody_holds_is_gone_whatever_its_pid() {
        let host = FakeHost::default();
        host.process(77, true);
        let live = snapshot(StoredStatus::Running, Some(77));
        assert!(process_gone(&live, Some(&Probe(Some(false))), &host));
        assert!(!process_gone(&live, Some(&Probe(Some(true))), &host));
        assert!(!process_gone(&live, Some(&Probe(None)), &host));
        let mut child = live.clone();
        child.parent_run_id = Some("parent".into());
        assert!(!process_gone(&child, Some(&Probe(Some(false))), &host));
        host.process(77, false);
        assert!(process_gone(&live, Some(&Probe(None)), &host));
        // A lock held (by a process that took the run over) wins over a dead pid.
        assert!(!process_gone(&live, Some(&Probe(Some(true))), &host));
        // Ended runs are never gone.
        let done = snapshot(StoredStatus::Success, Some(77));
        assert!(!process_gone(&done, Some(&Probe(Some(false))), &host));
    }

    #[test]
    fn history_filters_take_go_s_words_and_days() {
        let f = history_filter(Some("wf"), Some("Completed"), Some("1970-01-02"), 5, "-n").unwrap();
        assert_eq!(f.status, Some(StoredStatus::Success));
        assert_eq!(f.since_ms, Some(86_400_000));
        assert_eq!(f.limit, Some(5));
        let e = history_filter(None, Some("done"), None, 1, "-n").unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserInputInvalidFormat);
        let e = history_filter(None, None, Some("yesterday"), 1, "-n").unwrap_err();
        assert_eq!(e.message(), "invalid date 'yesterday'");
    }

    /// `-n 0` is refused as `?limit=0` is over HTTP, not an empty history, naming the flag
    /// as typed.
    #[test]
    fn a_history_limit_of_zero_is_refused() {
        let e = history_filter(None, None, None, 0, "-n").unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
        assert_eq!(e.message(), "-n 0 is not a positive whole number");
        assert_eq!(e.hints(), ["use -n 1 or more (the default is 20)"]);
        let e = history_filter(None, None, None, 0, "--limit").unwrap_err();
        assert_eq!(e.message(), "--limit 0 is not a positive whole number");
        assert_eq!(e.hints(), ["use --limit 1 or more (the default is 20)"]);
        assert_eq!(
            history_filter(None, None, None, 1, "-n").unwrap().limit,
            Some(1)
        );
    }
}
