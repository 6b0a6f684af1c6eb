//! `awf serve`'s resumer of parked runs (issue 14, usage limits): a background task that
//! finds recorded runs in status `waiting` (parked on an agent's usage limit) whose
//! `waiting_until` has passed, and resumes each through the run service at its current
//! state, as `POST /api/executions/{id}/resume` would (the server's environment, working
//! directory and configuration inputs; no input overrides).
//!
//! Each parked run (run id and reset time) is resumed once by this process. Before resuming,
//! its record is read again: a run no longer `waiting` (resumed elsewhere meanwhile, and
//! maybe finished) is skipped; a run another process is resuming holds the run's lock, so
//! the service's resume fails and the run is skipped too (the lock decides). The task
//! scans the state store every [`SCAN_EVERY`], and sooner when a known reset comes first;
//! it stops with the server (`shutdown`).

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use std::time::SystemTime;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::facade::ResumeFrom;
use awf_domain::ports::facade::ResumeRequest;
use awf_domain::ports::service::RunService;
use awf_domain::ports::store::StateStore;
use awf_domain::ports::store::StoredStatus;
use awf_domain::run::RunId;
use awf_domain::timefmt::format_rfc3339;
use serde_json::Map;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// The longest time between two scans of the state store.
pub const SCAN_EVERY: Duration = Duration::from_secs(5);

/// What every resume is given (the server's own context).
#[derive(Debug, Clone, Default)]
pub struct ResumeContext {
    /// Project configuration inputs.
    pub config_inputs: Map<String, Value>,
    /// The runs' environment (the server's, its token withheld).
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub working_dir: PathBuf,
}

/// The parked runs of `store` due at `now`, with their reset times, and the earliest reset
/// still ahead (when to look again).
fn due(store: &dyn StateStore, now: SystemTime) -> (Vec<(String, SystemTime)>, Option<SystemTime>) {
    let Ok(all) = store.list() else {
        return (Vec::new(), None);
    };
    let mut ready = Vec::new();
    let mut next: Option<SystemTime> = None;
    for s in all {
        if s.status != StoredStatus::Waiting {
            continue;
        }
        let Some(until) = s.waiting_until else {
            continue;
        };
        if until <= now {
            ready.push((s.run_id, until));
        } else {
            next = Some(next.map_or(until, |n| n.min(until)));
        }
    }
    ready.sort_by_key(|(_, t)| *t);
    (ready, next)
}

fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "awf serve: {line}");
}

/// Whether a resume attempt is final: everything but the server's run cap
/// (`USER.FACADE.RUN_LIMIT`, retried at the next scan, when a run may have ended).
fn settled(result: &Result<RunId, AwfError>) -> bool {
    !matches!(result, Err(e) if e.code() == ErrorCode::UserFacadeRunLimit)
}

/// Resumes the run `run_id` parked until `until`, unless its record changed meanwhile;
/// whether that was final (see [`settled`]).
async fn resume_one(
    service: &dyn RunService,
    store: &dyn StateStore,
    ctx: &ResumeContext,
    run_id: &str,
    until: SystemTime,
) -> bool {
    // Read again: resumed elsewhere since the scan, it is no longer waiting (or waits for
    // another reset, which a later scan handles).
    match store.load(run_id) {
        Ok(s) if s.status == StoredStatus::Waiting && s.waiting_until == Some(until) => {}
        _ => return true,
    }
    let request = ResumeRequest {
        run_id: run_id.to_owned(),
        from: ResumeFrom::Current,
        config_inputs: ctx.config_inputs.clone(),
        env: ctx.env.clone(),
        working_dir: ctx.working_dir.clone(),
        ..ResumeRequest::default()
    };
    let result = service.resume(request).await;
    match &result {
        Ok(id) => say(&format!(
            "resumed run {} parked on a usage limit (reset at {})",
            id.0,
            format_rfc3339(until)
        )),
        Err(e) if !settled(&result) => say(&format!(
            "parked run {run_id} waits for a free run slot: {}",
            e.message()
        )),
        Err(e) => say(&format!(
            "parked run {run_id} not resumed: {} ({})",
            e.message(),
            e.code()
        )),
    }
    settled(&result)
}

/// Starts the resumer; it ends when `shutdown` is cancelled. Without a state store
/// (persistence off) nothing is started.
pub fn spawn(
    service: Arc<dyn RunService>,
    store: Option<Arc<dyn StateStore>>,
    ctx: ResumeContext,
    shutdown: CancellationToken,
) -> Option<tokio::task::JoinHandle<()>> {
    let store = store?;
    Some(tokio::spawn(async move {
        // (run id, reset time) pairs this process resumed or tried to.
        let mut tried: HashSet<(String, SystemTime)> = HashSet::new();
        loop {
            let scan = {
                let store = Arc::clone(&store);
                tokio::task::spawn_blocking(move || due(store.as_ref(), SystemTime::now())).await
            };
            let (ready, next) = scan.unwrap_or_default();
            for (run_id, until) in ready {
                if shutdown.is_cancelled() {
                    return;
                }
                let key = (run_id.clone(), until);
                if !tried.contains(&key)
                    && resume_one(service.as_ref(), store.as_ref(), &ctx, &run_id, until).await
                {
                    tried.insert(key);
                }
            }
            let pause = next
                .and_then(|n| n.duration_since(SystemTime::now()).ok())
                .map_or(SCAN_EVERY, |d| d.min(SCAN_EVERY));
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(pause.max(Duration::from_millis(100))) => {}
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use awf_domain::ports::store::RunSnapshot;

    fn snap(id: &str, status: StoredStatus, until: Option<SystemTime>) -> RunSnapshot {
        let mut s: RunSnapshot = serde_json::from_value(serde_json::json!({
            "schema_version": 1, "run_id": id, "parent_run_id": null, "workflow": "w",
            "workflow_name": "w", "workflow_path": null, "status": "failure",
            "current_state": "a", "inputs": {}, "states": {},
            "started_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
            "exit_code": null, "terminal": null, "error": null
        }))
        .unwrap();
        s.status = status;
        s.waiting_until = until;
        s
    }

    #[test]
    fn only_waiting_runs_past_their_reset_are_due_and_the_next_reset_is_known() {
        let now = SystemTime::now();
        let past = now - Duration::from_secs(5);
        let soon = now + Duration::from_secs(30);
        let later = now + Duration::from_secs(90);
        let store = awf_domain::ports::fakes::FakeStateStore::with(vec![
            snap("due", StoredStatus::Waiting, Some(past)),
            snap("ahead", StoredStatus::Waiting, Some(later)),
            snap("sooner", StoredStatus::Waiting, Some(soon)),
            snap("failed", StoredStatus::Failure, Some(past)),
            snap("no-time", StoredStatus::Waiting, None),
        ]);
        let (ready, next) = due(&store, now);
        assert_eq!(ready, vec![("due".to_owned(), past)]);
        assert_eq!(next, Some(soon));
    }

    #[test]
    fn only_the_run_cap_is_retried() {
        assert!(settled(&Ok(RunId("r".into()))));
        let locked = awf_domain::ports::locks::still_running("r");
        assert!(settled(&Err(locked)));
        let cap = AwfError::new(ErrorCode::UserFacadeRunLimit, "64 runs are live");
        assert!(!settled(&Err(cap)));
    }
}
