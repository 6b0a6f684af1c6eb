//! acp-serve sessions kept across restarts: one JSON file per session,
//! `<dir>/<session id>.json` (the directory `0700`, files `0600`, written atomically:
//! a temporary file renamed over the old one), holding what `session/list` shows and what
//! `session/load` replays: the id, the cwd, the approval mode, the title and last update,
//! whether it was closed, and its prompts with the run each one started (the run's events
//! themselves are the store's, read back through the run service).
//!
//! Shape: `{"schema_version": 1, "id", "cwd", "mode": "ask"|"auto", "title"?, "updated_at"?,
//! "closed", "runs": [{"prompt", "run_id"?, "workflow"?, "seen", "notes"}]}`, where `seen` is
//! the last log position of the run the session delivered. Not kept: the editor's MCP
//! servers (each `session/load` sends them again), the `allow_always` choices, and a run
//! parked on a question (after a restart the next prompt starts afresh).
//!
//! Source: shared/spec/acp.md §3 (session/load, session/list).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::path::PathBuf;

use awf_domain::run::RunId;
use serde::Deserialize;
use serde::Serialize;

/// The version of the file shape this build writes (and the newest it reads).
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// One prompt of a saved session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SavedRun {
    /// The prompt as the session shows it.
    pub(crate) prompt: String,
    /// The run it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) run_id: Option<RunId>,
    /// That run's workflow identifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) workflow: Option<String>,
    /// Last log position the session delivered.
    #[serde(default)]
    pub(crate) seen: u64,
    /// The turn's messages that are no run events.
    #[serde(default)]
    pub(crate) notes: Vec<String>,
}

/// One saved session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SavedSession {
    pub(crate) schema_version: u32,
    pub(crate) id: String,
    pub(crate) cwd: PathBuf,
    /// `ask` or `auto`.
    pub(crate) mode: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) updated_at: Option<String>,
    /// Closed by `session/close`: loadable, not listed.
    #[serde(default)]
    pub(crate) closed: bool,
    #[serde(default)]
    pub(crate) runs: Vec<SavedRun>,
}

/// Whether `id` can name a file of `dir` (the ids this server makes: `sess_<hex>`).
fn safe_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Writes `s` to `<dir>/<id>.json` atomically, creating `dir` (0700) when missing.
///
/// # Errors
/// The I/O error, or `InvalidInput` for an id that cannot be a file name.
pub(crate) fn save(dir: &Path, s: &SavedSession) -> std::io::Result<()> {
    if !safe_id(&s.id) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("session id {:?} cannot name a file", s.id),
        ));
    }
    if !dir.is_dir() {
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    let text = serde_json::to_vec_pretty(s).map_err(std::io::Error::other)?;
    let tmp = dir.join(format!(".{}.{}.tmp", s.id, std::process::id()));
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&text)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, dir.join(format!("{}.json", s.id)))
}

/// Every session saved in `dir` (none when it does not exist). A file that cannot be read,
/// is not a session, or was written by a newer awf is skipped with a warning on the log.
pub(crate) fn load_all(dir: &Path) -> Vec<SavedSession> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let parsed = std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<SavedSession>(&b).map_err(|e| e.to_string()));
        match parsed {
            Ok(s) if s.schema_version > SCHEMA_VERSION => tracing::warn!(
                target: "awf::acp",
                path = %path.display(),
                "session file written by a newer awf (schema {}); skipped",
                s.schema_version
            ),
            Ok(s) if safe_id(&s.id) => out.push(s),
            Ok(_) => {
                tracing::warn!(target: "awf::acp", path = %path.display(), "session file with an unusable id; skipped")
            }
            Err(why) => tracing::warn!(
                target: "awf::acp",
                path = %path.display(),
                "unreadable session file skipped: {why}"
            ),
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn session(id: &str) -> SavedSession {
        SavedSession {
            schema_version: SCHEMA_VERSION,
            id: id.into(),
            cwd: "/tmp".into(),
            mode: "auto".into(),
            title: Some("/hello".into()),
            updated_at: None,
            closed: false,
            runs: vec![SavedRun {
                prompt: "/hello".into(),
                run_id: Some(RunId("r1".into())),
                workflow: Some("hello".into()),
                seen: 7,
                notes: vec!["done".into()],
            }],
        }
    }

    #[test]
    fn sessions_round_trip_and_bad_files_are_skipped() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("sessions");
        save(&dir, &session("sess_b")).unwrap();
        save(&dir, &session("sess_a")).unwrap();
        let mut newer = session("sess_c");
        newer.schema_version = SCHEMA_VERSION + 1;
        save(&dir, &newer).unwrap();
        std::fs::write(dir.join("junk.json"), "{not json").unwrap();
        let mode = std::fs::metadata(dir.join("sess_a.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let all = load_all(&dir);
        assert_eq!(all, vec![session("sess_a"), session("sess_b")]);
        assert!(save(&dir, &session("../x")).is_err());
        assert!(load_all(&d.path().join("missing")).is_empty());
    }
}
