//! The directory a resumed run runs in: the one its run started in (recorded in its state as
//! `working_dir`), not the directory `awf resume` (or the server resuming it) is in, so that
//! relative paths in its remaining steps reach the same files as in its first attempt; and the
//! workflows and project configuration it looks up from there ([`rooted_services`]).
//!
//! Source: README "Runs are recorded: resume"; `RunSnapshot::working_dir`.

use std::io::ErrorKind;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::facade::ResumeRequest;
use awf_domain::ports::host::FileKind;
use awf_domain::ports::host::Host;
use awf_domain::ports::store::RunSnapshot;
use serde_json::Map;
use serde_json::Value;

use crate::Services;

/// The working directory of the resume of `snap`: its recorded directory; `resumer` (the
/// resumer's own working directory) for a run recorded without one (before it was kept), as
/// such runs were resumed then.
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` (with a hint) when the recorded directory no longer exists,
/// is not a directory, or cannot be examined: the run is not resumed anywhere else.
pub fn resume_dir(
    host: &dyn Host,
    snap: &RunSnapshot,
    resumer: &Path,
) -> Result<PathBuf, AwfError> {
    let Some(dir) = snap
        .working_dir
        .as_ref()
        .filter(|d| !d.as_os_str().is_empty())
    else {
        return Ok(resumer.to_path_buf());
    };
    let why = match host.metadata(dir) {
        Ok(m) if m.kind == FileKind::Dir => return Ok(dir.clone()),
        Ok(_) => "which is not a directory now".to_owned(),
        Err(e) if e.kind() == ErrorKind::NotFound => "which no longer exists".to_owned(),
        Err(e) => format!("which cannot be used: {e}"),
    };
    Err(AwfError::new(
        ErrorCode::UserInputValidationFailed,
        format!(
            "run {} started in {}, {why} (a resumed run goes on in the directory it started in)",
            snap.run_id,
            dir.display()
        ),
    )
    .with_detail("working_dir", dir.display().to_string())
    .with_hint(format!(
        "recreate {} (with the files the run's steps use) and resume again, or start the workflow afresh",
        dir.display()
    )))
}

/// The adapters and project configuration inputs of the resume of a run that goes on in
/// `dir` (its recorded directory), asked by `req`: when `dir` is not the resumer's own
/// directory, the repository as seen from `dir` ([`WorkflowRepository::rooted_at`]: the run's
/// workflow, its sub-workflows, `.awf/` of its project) with that project's configuration
/// (its `inputs:` instead of the resumer's, its `prices:`); else `services` and
/// `req.config_inputs` as they are.
///
/// # Errors
/// The error of that project's configuration when it cannot be read (as a run started there
/// would fail).
///
/// [`WorkflowRepository::rooted_at`]: awf_domain::ports::WorkflowRepository::rooted_at
pub fn rooted_services(
    services: &Arc<Services>,
    dir: &Path,
    req: &ResumeRequest,
) -> Result<(Arc<Services>, Map<String, Value>), AwfError> {
    let rooted = if dir == req.working_dir {
        None
    } else {
        services.repository.rooted_at(dir)
    };
    let Some(rooted) = rooted else {
        return Ok((Arc::clone(services), req.config_inputs.clone()));
    };
    let config = rooted.config?;
    let mut at = (**services).clone();
    at.repository = rooted.repository;
    at.prices = config.prices;
    Ok((Arc::new(at), config.inputs))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use awf_domain::ports::fakes::FakeHost;
    use pretty_assertions::assert_eq;

    fn snap(dir: Option<&str>) -> RunSnapshot {
        let mut s: RunSnapshot = serde_json::from_value(serde_json::json!({
            "schema_version": 1, "run_id": "r1", "parent_run_id": null, "workflow": "wf",
            "workflow_name": "wf", "workflow_path": null, "status": "failure",
            "current_state": "a", "inputs": {}, "states": {},
            "started_at": "2024-01-01T00:00:00Z", "updated_at": "2024-01-01T00:00:00Z",
            "completed_at": null, "exit_code": 1, "terminal": null, "error": null
        }))
        .unwrap();
        s.working_dir = dir.map(PathBuf::from);
        s
    }

    #[test]
    fn a_run_resumes_in_its_recorded_directory() {
        let host = FakeHost::default().dir("/a");
        assert_eq!(
            resume_dir(&host, &snap(Some("/a")), Path::new("/b")).unwrap(),
            PathBuf::from("/a")
        );
    }

    #[test]
    fn a_run_recorded_without_a_directory_resumes_in_the_resumers() {
        let host = FakeHost::default();
        assert_eq!(
            resume_dir(&host, &snap(None), Path::new("/b")).unwrap(),
            PathBuf::from("/b")
        );
        assert_eq!(
            resume_dir(&host, &snap(Some("")), Path::new("/b")).unwrap(),
            PathBuf::from("/b")
        );
    }

    #[test]
    fn a_vanished_directory_refuses_the_resume() {
        let host = FakeHost::default().dir("/b");
        let e = resume_dir(&host, &snap(Some("/a")), Path::new("/b")).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
        assert_eq!(
            e.message(),
            "run r1 started in /a, which no longer exists (a resumed run goes on in the directory it started in)"
        );
        assert_eq!(
            e.hints(),
            [
                "recreate /a (with the files the run's steps use) and resume again, or start the workflow afresh"
            ]
        );
        assert_eq!(e.details()["working_dir"], "/a");
    }

    #[test]
    fn a_directory_replaced_by_a_file_refuses_the_resume() {
        let host = FakeHost::default().file("/a", "x");
        let e = resume_dir(&host, &snap(Some("/a")), Path::new("/b")).unwrap_err();
        assert_eq!(
            e.message(),
            "run r1 started in /a, which is not a directory now (a resumed run goes on in the directory it started in)"
        );
    }
}
