//! State files: `<root>/states/<run_id>.json`, written atomically (temp file in the same
//! directory, write, fsync, rename; mode 0600), and the journal of a live run,
//! `<root>/states/<run_id>.journal`: one JSON line per recorder batch, appended and fsynced,
//! holding what changed since the state file was written whole (the header fields and the
//! states that finished). Readers replay the journal over the state file, so recording a step
//! costs the size of that step, not of the whole run; the recorder writes the state file whole
//! at the start and the end of a run (and then removes the journal).
//!
//! Source: spec/workflow.md §3.11; http-ops.md §3.2.

use std::fs;
use std::fs::DirBuilder;
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::store::LoopPosition;
use awf_domain::ports::store::RunSnapshot;
use awf_domain::ports::store::StoredStatus;
use awf_domain::run::StepState;
use serde::Deserialize;
use serde::Serialize;

use crate::StorePaths;
use crate::read_failed;
use crate::write_failed;

/// Creates `dir` (and its parents) with `mode` when missing.
pub(crate) fn create_dir(dir: &Path, mode: u32) -> Result<(), AwfError> {
    DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
        .map_err(|e| write_failed("the directory", dir, e))
}

/// Whether `run_id` can name a file in the states directory.
fn valid_id(run_id: &str) -> bool {
    !run_id.is_empty()
        && run_id != "."
        && run_id != ".."
        && !run_id.contains(['/', '\\', '\0'])
        && !run_id.starts_with('.')
}

/// Start of the name of every temp file [`write_atomic`] creates: `.awf-<writer pid>-…`.
const TMP_PREFIX: &str = ".awf-";

/// Suffix of those temp files.
const TMP_SUFFIX: &str = ".tmp";

/// Temp files older than this are stale whoever wrote them (a write takes milliseconds).
const TMP_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(600);

/// Writes `bytes` to `target` atomically: a temp file in the same directory (mode 0600,
/// named `.awf-<pid>-<random>.tmp`), write, fsync, rename over `target`; with `sync_dir` the
/// directory is fsynced too.
pub(crate) fn write_atomic(target: &Path, bytes: &[u8], sync_dir: bool) -> std::io::Result<()> {
    let dir = target.parent().unwrap_or_else(|| Path::new("."));
    let prefix = format!("{TMP_PREFIX}{}-", std::process::id());
    let mut tmp = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(TMP_SUFFIX)
        .permissions(fs::Permissions::from_mode(0o600))
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(target).map_err(|e| e.error)?;
    if sync_dir {
        fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Removes the temp files of `dir` that a killed writer left behind: those named
/// `.awf-<pid>-….tmp` whose process is gone, and any `.*.tmp` older than 10 minutes (earlier
/// releases named them `.<random>.tmp`). Temp files of live writers (another awf process on
/// the same data root) are left alone. Best effort: errors are ignored. Returns how many
/// files were removed.
pub(crate) fn remove_stale_temps(dir: &Path) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if !name.starts_with('.') || !name.ends_with(TMP_SUFFIX) {
            continue;
        }
        let writer_gone = name
            .strip_prefix(TMP_PREFIX)
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
            .is_some_and(|pid| {
                pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists()
            });
        let old = entry
            .metadata()
            .ok()
            .filter(fs::Metadata::is_file)
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > TMP_MAX_AGE);
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        if is_file && (writer_gone || old) && fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Serialises and writes one snapshot to `<root>/states/<run_id>.json`.
pub(crate) fn save(paths: &StorePaths, snap: &RunSnapshot, sync_dir: bool) -> Result<(), AwfError> {
    let target = paths.state_file(&snap.run_id);
    if !valid_id(&snap.run_id) {
        return Err(write_failed("the state file", &target, "invalid run id"));
    }
    let mut bytes =
        serde_json::to_vec_pretty(snap).map_err(|e| write_failed("the state file", &target, e))?;
    bytes.push(b'\n');
    write_atomic(&target, &bytes, sync_dir).map_err(|e| write_failed("the state file", &target, e))
}

/// One journal line: the snapshot's changing header fields as they were at the end of a
/// recorder batch, and the states recorded in that batch.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct JournalEntry<'a> {
    /// Status.
    pub status: StoredStatus,
    /// Top-level state being executed.
    pub current_state: std::borrow::Cow<'a, str>,
    /// Last write.
    #[serde(with = "awf_domain::timefmt::rfc3339")]
    pub updated_at: std::time::SystemTime,
    /// The loop in progress (`null` = none).
    pub loop_position: Option<LoopPosition>,
    /// States recorded since the previous line, by name.
    pub states: std::collections::BTreeMap<String, std::borrow::Cow<'a, StepState>>,
}

impl JournalEntry<'_> {
    fn apply(self, snap: &mut RunSnapshot) {
        snap.status = self.status;
        snap.current_state = self.current_state.into_owned();
        snap.updated_at = self.updated_at;
        snap.loop_position = self.loop_position;
        for (name, st) in self.states {
            snap.states.insert(name, st.into_owned());
        }
    }
}

/// Appends one entry to the run's journal (created 0600) and syncs it.
pub(crate) fn append_journal(
    paths: &StorePaths,
    run_id: &str,
    entry: &JournalEntry<'_>,
) -> Result<(), AwfError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = paths.journal_file(run_id);
    if !valid_id(run_id) {
        return Err(write_failed("the state journal", &path, "invalid run id"));
    }
    let mut line =
        serde_json::to_vec(entry).map_err(|e| write_failed("the state journal", &path, e))?;
    line.push(b'\n');
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| write_failed("the state journal", &path, e))?;
    f.write_all(&line)
        .and_then(|()| f.sync_data())
        .map_err(|e| write_failed("the state journal", &path, e))
}

/// Removes the run's journal once its state file holds everything (missing is fine).
pub(crate) fn remove_journal(paths: &StorePaths, run_id: &str) -> Result<(), AwfError> {
    let path = paths.journal_file(run_id);
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(write_failed("the state journal", &path, e)),
    }
}

/// Replays the journal next to a state file over its snapshot. A line that does not parse
/// (the torn end of a write cut short by a kill) ends the replay: what came before it was
/// synced, so the snapshot is the one of the last complete batch.
fn replay(path: &Path, snap: &mut RunSnapshot) {
    let Ok(bytes) = fs::read(path) else {
        return;
    };
    for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        match serde_json::from_slice::<JournalEntry<'_>>(line) {
            Ok(entry) => entry.apply(snap),
            Err(_) => break,
        }
    }
}

/// Reads one state file, with its journal replayed; `Ok(None)` when it does not exist.
pub(crate) fn read(paths: &StorePaths, run_id: &str) -> Result<Option<RunSnapshot>, AwfError> {
    if !valid_id(run_id) {
        return Ok(None);
    }
    let path = paths.state_file(run_id);
    match fs::read(&path) {
        Ok(bytes) => {
            let mut snap: RunSnapshot = serde_json::from_slice(&bytes)
                .map_err(|e| read_failed("the state file", &path, e))?;
            replay(&paths.journal_file(run_id), &mut snap);
            Ok(Some(snap))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(read_failed("the state file", &path, e)),
    }
}

/// Loads one state file.
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` (hint `awf resume --list`) when there is none;
/// `SYSTEM.IO.READ_FAILED` when it cannot be read or parsed.
pub(crate) fn load(paths: &StorePaths, run_id: &str) -> Result<RunSnapshot, AwfError> {
    read(paths, run_id)?.ok_or_else(|| {
        AwfError::new(
            ErrorCode::UserInputValidationFailed,
            format!("workflow execution not found: {run_id}"),
        )
        .with_detail("run_id", run_id)
        .with_hint("awf resume --list")
    })
}

/// Every parsable `*.json` state file of `dir`, newest first (by `started_at`, then run id).
/// Files that do not parse (foreign files) are skipped.
pub(crate) fn list(dir: &Path) -> Result<Vec<RunSnapshot>, AwfError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(read_failed("the states directory", dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| read_failed("the states directory", dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || !name.ends_with(".json") {
            continue;
        }
        let Ok(bytes) = fs::read(entry.path()) else {
            continue;
        };
        if let Ok(mut snap) = serde_json::from_slice::<RunSnapshot>(&bytes) {
            replay(&entry.path().with_extension("journal"), &mut snap);
            out.push(snap);
        }
    }
    out.sort_by(|a, b| {
        b.started_at
            .cmp(&a.started_at)
            .then_with(|| b.run_id.cmp(&a.run_id))
    });
    Ok(out)
}
