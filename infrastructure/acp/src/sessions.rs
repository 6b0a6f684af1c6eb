//! acp-serve sessions kept across restarts: one JSON file per session,
//! `<dir>/<session id>.json` (the directory `0700`, files `0600`, written atomically:
//! a temporary file renamed over the old one), holding what `session/list` shows and what
//! `session/load` replays: the id, the cwd, the approval mode, the title and last update,
//! whether it was closed, and its prompts with the run each one started (the run's events
//! themselves are the store's, read back through the run service).
//!
//! Shape: `{"schema_version": 1, "id", "cwd", "mode": "ask"|"auto", "title"?, "updated_at"?,
//! "closed", "runs": [{"key", "prompt", "run_id"?, "workflow"?, "seen", "notes"}]}`, where `seen`
//! is the last log position of the run the session delivered and `key` names the turn (a file
//! written before keys existed gets `legacy-<index>`); `"pending"?: {"workflow", "input",
//! "secret", "inputs": [[name, value]…]}` is a missing input the session asked for and waits
//! for as the next message (the run that asked does not outlive its process: after a restart
//! the answer starts the workflow again with the inputs given before and the answer).
//!
//! Several `awf acp-serve` processes may hold one session (an editor restarted, two editors on
//! one project): each save takes an exclusive lock on `<dir>/.<id>.lock`, reads the file again
//! and merges it with what the process holds (turns matched by `key`; a turn only one side has
//! is kept, the file's order first), so no process's turn is lost. Not kept: the editor's MCP
//! servers (each `session/load` sends them again), the `allow_always` choices, a question
//! whose run was given a secret-named input (its value is never written) and a conversation
//! turn's question (after a restart the next prompt starts afresh).
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
    /// Names the turn across processes (a uuid; `legacy-<index>` for an older file).
    #[serde(default)]
    pub(crate) key: String,
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
    /// A missing input asked for, waiting for the next message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pending: Option<SavedPending>,
}

/// A missing input a session asked for: the next message is its value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SavedPending {
    /// The workflow whose run asked.
    pub(crate) workflow: String,
    /// The input asked for.
    pub(crate) input: String,
    /// The input has a secret name (the answer is masked like one).
    #[serde(default)]
    pub(crate) secret: bool,
    /// The inputs the run was given (none secret-named).
    #[serde(default)]
    pub(crate) inputs: Vec<(String, String)>,
}

/// Whether `id` can name a file of `dir` (the ids this server makes: `sess_<hex>`).
fn safe_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Gives every turn without a key (a file written before keys existed) `legacy-<index>`:
/// every process reading that file names its turns alike.
fn legacy_keys(s: &mut SavedSession) {
    for (i, r) in s.runs.iter_mut().enumerate() {
        if r.key.is_empty() {
            r.key = format!("legacy-{i}");
        }
    }
}

/// Merges `mine` (a process's turns) into `disk` (the file's): a turn both have keeps this
/// process's prompt (masked), the furthest log position, the longer list of notes and any run; a turn only one has is kept,
/// the file's order first, then this process's new turns in its order.
pub(crate) fn merge_runs(disk: &[SavedRun], mine: &[SavedRun]) -> Vec<SavedRun> {
    let mut out = disk.to_vec();
    for m in mine {
        match out.iter_mut().find(|d| d.key == m.key) {
            Some(d) => {
                // This process's copy: masked with every secret it knows (an older file
                // may hold one in plain text).
                d.prompt.clone_from(&m.prompt);
                d.seen = d.seen.max(m.seen);
                if m.notes.len() >= d.notes.len() {
                    d.notes.clone_from(&m.notes);
                }
                if d.run_id.is_none() {
                    d.run_id.clone_from(&m.run_id);
                }
                if d.workflow.is_none() {
                    d.workflow.clone_from(&m.workflow);
                }
            }
            None => out.push(m.clone()),
        }
    }
    out
}

/// Reads the session `id` saved in `dir`: `None` when there is none (or it cannot be used:
/// unreadable, not a session, written by a newer awf; logged).
pub(crate) fn load_one(dir: &Path, id: &str) -> Option<SavedSession> {
    if !safe_id(id) {
        return None;
    }
    let path = dir.join(format!("{id}.json"));
    if !path.is_file() {
        return None;
    }
    read_file(&path).filter(|s| s.id == id)
}

/// Writes `s` to `<dir>/<id>.json` atomically (a temporary file renamed over the old one),
/// creating `dir` (0700) when missing, merged with the file as it is now under an exclusive
/// lock of `<dir>/.<id>.lock` (another process's turns survive); answers the session as
/// written.
///
/// # Errors
/// The I/O error, or `InvalidInput` for an id that cannot be a file name.
pub(crate) fn save(dir: &Path, s: &SavedSession) -> std::io::Result<SavedSession> {
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
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(dir.join(format!(".{}.lock", s.id)))?;
    // Released when `_held` is dropped (or the process dies).
    let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| std::io::Error::from(e))?;
    let mut merged = s.clone();
    let path = dir.join(format!("{}.json", s.id));
    if path.is_file()
        && let Some(disk) = read_file(&path)
    {
        merged.runs = merge_runs(&disk.runs, &s.runs);
        if merged.title.is_none() {
            merged.title = disk.title;
        }
        if disk.updated_at > merged.updated_at {
            merged.updated_at = disk.updated_at;
        }
    }
    let text = serde_json::to_vec_pretty(&merged).map_err(std::io::Error::other)?;
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
    std::fs::rename(&tmp, &path)?;
    Ok(merged)
}

/// Reads one session file: `None` (logged) when it is unreadable, not a session, written by
/// a newer awf or has an id that cannot name a file.
fn read_file(path: &Path) -> Option<SavedSession> {
    let parsed = std::fs::read(path)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice::<SavedSession>(&b).map_err(|e| e.to_string()));
    match parsed {
        Ok(s) if s.schema_version > SCHEMA_VERSION => {
            tracing::warn!(
                target: "awf::acp",
                path = %path.display(),
                "session file written by a newer awf (schema {}); skipped",
                s.schema_version
            );
            None
        }
        Ok(mut s) if safe_id(&s.id) => {
            legacy_keys(&mut s);
            Some(s)
        }
        Ok(_) => {
            tracing::warn!(target: "awf::acp", path = %path.display(), "session file with an unusable id; skipped");
            None
        }
        Err(why) => {
            tracing::warn!(
                target: "awf::acp",
                path = %path.display(),
                "unreadable session file skipped: {why}"
            );
            None
        }
    }
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
        out.extend(read_file(&path));
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
            pending: None,
            runs: vec![SavedRun {
                key: "k1".into(),
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

    fn turn(key: &str, seen: u64, notes: &[&str]) -> SavedRun {
        SavedRun {
            key: key.into(),
            prompt: format!("/hello name={key}"),
            run_id: None,
            workflow: None,
            seen,
            notes: notes.iter().map(|n| (*n).to_owned()).collect(),
        }
    }

    #[test]
    fn a_save_keeps_the_turns_another_process_saved_since() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("sessions");
        let mut a = session("sess_m");
        a.runs = vec![turn("a1", 3, &[])];
        save(&dir, &a).unwrap();
        // B read the file (a1), then A and B each add a turn.
        let mut b = a.clone();
        a.runs.push(turn("a2", 5, &[]));
        assert_eq!(save(&dir, &a).unwrap().runs.len(), 2);
        b.runs.push(turn("b1", 2, &["done"]));
        let merged = save(&dir, &b).unwrap();
        let keys: Vec<&str> = merged.runs.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(keys, ["a1", "a2", "b1"]);
        // A's later progress on its own turn wins over B's stale copy of it.
        a.runs[1] = turn("a2", 9, &["ok"]);
        let merged = save(&dir, &a).unwrap();
        assert_eq!(merged.runs[1], turn("a2", 9, &["ok"]));
        assert_eq!(load_one(&dir, "sess_m").unwrap().runs, merged.runs);
        // An older file without keys gets `legacy-<index>`.
        let mut old = session("sess_o");
        old.runs[0].key = String::new();
        save(&dir, &old).unwrap();
        assert_eq!(load_one(&dir, "sess_o").unwrap().runs[0].key, "legacy-0");
    }
}
