//! State files: `<root>/states/<run_id>.json`, written atomically (temp file in
//! `<root>/states/.tmp/`, write, fsync, rename; mode 0600), and the journal of a live run,
//! `<root>/states/<run_id>.journal`: one JSON line per recorder batch, appended (and synced
//! to the disk at most 50 ms later, see the recorder),
//! holding what changed since the state file was written whole (the header fields and the
//! states that finished). Readers replay the journal over the state file, so recording a step
//! costs the size of that step, not of the whole run; the recorder writes the state file whole
//! at the start and the end of a run (and then removes the journal).
//!
//! A state's `output` or `stderr` longer than [`INLINE_MAX`] is kept once, in its own file
//! `<root>/outputs/<run_id>/<state>-….stdout` (or `.stderr`, mode 0600, synced before the
//! record that names it): the state file and the journal hold `""` for that text and name
//! the file in a top-level `"output_files": {"<state>": {"stdout": "outputs/…"}}` map (paths
//! relative to the data root). [`load`] reads the files back, so readers see the same
//! values as when the text was inline; [`list`] does not (its snapshots have those texts
//! empty).
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
use awf_domain::ports::store::STATE_SCHEMA_VERSION;
use awf_domain::ports::store::StoredStatus;
use awf_domain::run::SharedText;
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

/// The longest run id the store takes, in bytes. Run ids are UUIDs (36 characters); the
/// cap keeps every file named after one (`<id>.journal`, `<id>.jsonl`, `<id>.lock`) within
/// the 255 bytes a file name may have, so a longer id (a URL of `awf serve`) is simply no
/// run, not a failed read (breaker: a 300-character id was a 500 "File name too long").
pub(crate) const MAX_RUN_ID_LEN: usize = 128;

/// Whether `run_id` can name a file in the states directory: not empty, at most
/// [`MAX_RUN_ID_LEN`] bytes, no path separator or NUL, not starting with a dot.
pub(crate) fn valid_id(run_id: &str) -> bool {
    !run_id.is_empty()
        && run_id.len() <= MAX_RUN_ID_LEN
        && run_id != "."
        && run_id != ".."
        && !run_id.contains(['/', '\\', '\0'])
        && !run_id.starts_with('.')
}

/// Start of the name of every temp file [`write_atomic`] creates: `.awf-<writer pid>-…`.
const TMP_PREFIX: &str = ".awf-";

/// Suffix of those temp files.
const TMP_SUFFIX: &str = ".tmp";

/// Directory of those temp files, beside their targets: `<dir>/.tmp/`. Kept apart from the
/// state files so that finding the ones a killed writer left costs a listing of the few
/// being written, not of every run ever recorded (with 20,000 runs in `states/`, listing it
/// added about 8 ms to every run; issue 9).
pub(crate) const TMP_DIR: &str = ".tmp";

/// Temp files older than this are stale whoever wrote them (a write takes milliseconds).
const TMP_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(600);

/// Whether `e` is a write failing for lack of room (`ENOSPC`, `EDQUOT`), which no other
/// directory of the same file system mends.
fn no_room(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

/// Writes `bytes` to `target` atomically: a temp file in `<target's dir>/.tmp/` (created,
/// mode 0700, when missing; the file mode 0600, named `.awf-<pid>-<random>.tmp`), write,
/// fsync, rename over `target`; with `sync_dir` the target's directory is fsynced too. When
/// `.tmp` is not a directory of its own (a file, a symlink: never followed) or the write
/// through it fails (no permission, another file system mounted there; not a full disk or
/// quota, which fail there too), the temp file is written beside the target instead, as
/// before the temp directory existed.
///
/// With [`Durability::Later`] nothing is fsynced: the renamed file is returned open, for the
/// caller to sync off its own thread (a killed process loses nothing once the rename is
/// done; only a crash of the machine before that sync could).
pub(crate) fn write_atomic(
    target: &Path,
    bytes: &[u8],
    durability: Durability,
) -> std::io::Result<Option<fs::File>> {
    let sync = matches!(durability, Durability::Now { .. });
    let dir = target.parent().unwrap_or_else(|| Path::new("."));
    let tmp_dir = dir.join(TMP_DIR);
    let prefix = format!("{TMP_PREFIX}{}-", std::process::id());
    let write_in = |d: &Path| -> std::io::Result<fs::File> {
        let mut tmp = tempfile::Builder::new()
            .prefix(&prefix)
            .suffix(TMP_SUFFIX)
            .permissions(fs::Permissions::from_mode(0o600))
            .tempfile_in(d)?;
        tmp.write_all(bytes)?;
        if sync {
            tmp.as_file().sync_all()?;
        }
        tmp.persist(target).map_err(|e| e.error)
    };
    let apart = match fs::symlink_metadata(&tmp_dir) {
        Ok(m) => m.is_dir(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            DirBuilder::new().mode(0o700).create(&tmp_dir).is_ok()
                || fs::symlink_metadata(&tmp_dir).is_ok_and(|m| m.is_dir())
        }
        Err(_) => false,
    };
    let file = match apart.then(|| write_in(&tmp_dir)) {
        Some(Ok(f)) => f,
        // A full disk (or quota) fails beside the target too: its error is the one to say
        // (chaos trial: the error named a temp file beside the target, not in `.tmp`).
        Some(Err(e)) if no_room(&e) => return Err(e),
        _ => write_in(dir)?,
    };
    match durability {
        Durability::Now { dir: true } => {
            fs::File::open(dir)?.sync_all()?;
            Ok(None)
        }
        Durability::Now { dir: false } => Ok(None),
        Durability::Later => Ok(Some(file)),
    }
}

/// When [`write_atomic`] makes its write durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Durability {
    /// Before it returns: the file is synced before its rename, with `dir` its directory
    /// after.
    Now {
        /// Sync the directory too (the rename itself).
        dir: bool,
    },
    /// Not at all: the caller syncs the file it returns (and the directory).
    Later,
}

/// Removes the temp files that killed writers left in `states` (the states directory): in
/// its `.tmp/` directory, and with `legacy` in `states` itself too (where releases before
/// the `.tmp/` directory wrote them: listing it reads every state file's name, so only the
/// commands that read the history do it, never a run's start). Stale: named
/// `.awf-<pid>-….tmp` by a process that is gone, or any `.*.tmp` older than 10 minutes
/// (earlier releases named them `.<random>.tmp`). Temp files of live writers (another awf
/// process on the same data root) are left alone. Best effort: errors are ignored. Returns
/// how many files were removed.
pub(crate) fn remove_stale_temps(states: &Path, legacy: bool) -> usize {
    // Only a directory of its own: a symlink there is not followed (it could lead anywhere).
    let mut removed = remove_stale_temps_in(&states.join(TMP_DIR), true);
    if legacy {
        removed += remove_stale_temps_in(states, false);
    }
    removed
}

/// [`remove_stale_temps`] for the one directory `dir` (with `own_only`, not through a
/// symlink). The directory is opened once and every entry is looked at and removed through
/// that handle: a directory swapped for a symlink in the meantime cannot redirect a removal
/// elsewhere (a breaker swapping `.tmp` with a link 2,000 times a second deleted files
/// outside the data root when the removals went by path).
fn remove_stale_temps_in(dir: &Path, own_only: bool) -> usize {
    use rustix::fs::AtFlags;
    use rustix::fs::FileType;
    use rustix::fs::Mode;
    use rustix::fs::OFlags;
    let mut flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    if own_only {
        flags |= OFlags::NOFOLLOW;
    }
    let Ok(fd) = rustix::fs::open(dir, flags, Mode::empty()) else {
        return 0;
    };
    let Ok(entries) = rustix::fs::Dir::read_from(&fd) else {
        return 0;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut removed = 0;
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().to_str() else {
            continue;
        };
        if !name.starts_with('.') || !name.ends_with(TMP_SUFFIX) {
            continue;
        }
        let Ok(st) = rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            continue;
        }
        let writer_gone = name
            .strip_prefix(TMP_PREFIX)
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
            .is_some_and(|pid| {
                pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists()
            });
        let modified = u64::try_from(st.st_mtime).unwrap_or(0);
        let old = now.saturating_sub(modified) > TMP_MAX_AGE.as_secs();
        if (writer_gone || old) && rustix::fs::unlinkat(&fd, name, AtFlags::empty()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Longest `output` / `stderr` text kept inside the state file and the journal (64 KiB);
/// longer ones go to their own file (see the module docs).
pub(crate) const INLINE_MAX: usize = 64 * 1024;

/// The files holding one state's texts, as paths relative to the data root
/// (`outputs/<run_id>/…`); `None` = the text is inline.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OutputFiles {
    /// File of `output`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// File of `stderr`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
}

impl OutputFiles {
    /// Whether no text of the state is in a file.
    pub(crate) fn is_empty(&self) -> bool {
        self.stdout.is_none() && self.stderr.is_none()
    }

    /// The files named, relative to the data root.
    pub(crate) fn paths(&self) -> impl Iterator<Item = &str> {
        self.stdout
            .iter()
            .chain(self.stderr.iter())
            .map(String::as_str)
    }
}

/// Output files by state name.
pub(crate) type FileRefs = std::collections::BTreeMap<String, OutputFiles>;

/// Directory of one run's output files (`<root>/outputs/<run_id>`).
fn outputs_dir(paths: &StorePaths, run_id: &str) -> std::path::PathBuf {
    paths.data_root.join("outputs").join(run_id)
}

/// A file name made of the state name: ASCII letters, digits, `-` and `_` kept, anything
/// else `_`, at most 64 characters.
fn file_stem(state: &str) -> String {
    let stem: String = state
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if stem.is_empty() {
        "state".to_owned()
    } else {
        stem
    }
}

/// Creates a new, empty output file for one stream of state `state` in the run's outputs
/// directory (created 0700; the file 0600, a name no earlier file used). Returns the open
/// file and its path relative to the data root.
///
/// # Errors
/// `SYSTEM.IO.WRITE_FAILED`.
pub(crate) fn create_output(
    paths: &StorePaths,
    run_id: &str,
    state: &str,
    stream: &str,
) -> Result<(fs::File, String), AwfError> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = outputs_dir(paths, run_id);
    if !valid_id(run_id) {
        return Err(write_failed("the step output", &dir, "invalid run id"));
    }
    create_dir(&dir, 0o700)?;
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let stem = file_stem(state);
    let pid = std::process::id();
    for n in 0u32..1000 {
        let name = format!("{stem}-{millis}-{pid}-{n}.{stream}");
        let path = dir.join(&name);
        let opened = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path);
        match opened {
            Ok(f) => return Ok((f, format!("outputs/{run_id}/{name}"))),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(write_failed("the step output", &path, e)),
        }
    }
    Err(write_failed("the step output", &dir, "no free file name"))
}

/// Writes `text` (one stream of state `state`) to a new output file (see
/// [`create_output`]) and syncs it. Returns its path relative to the data root.
///
/// # Errors
/// `SYSTEM.IO.WRITE_FAILED` (the file is removed).
pub(crate) fn write_output(
    paths: &StorePaths,
    run_id: &str,
    state: &str,
    stream: &str,
    text: &str,
) -> Result<String, AwfError> {
    let (mut f, rel) = create_output(paths, run_id, state, stream)?;
    let path = paths.data_root.join(&rel);
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_data())
        .map_err(|e| {
            let _ = fs::remove_file(&path);
            write_failed("the step output", &path, e)
        })?;
    Ok(rel)
}

/// Makes a file that received a stream as it was read (a spool) the stored copy of `text`,
/// when `text` is its first `text.len()` bytes: cuts it there and syncs it. Whether it did;
/// when not, the caller removes it.
pub(crate) fn adopt_spool(file: &fs::File, spooled: u64, text: &str) -> bool {
    use std::io::Read;
    use std::io::Seek;
    let mut reader = file;
    let want = text.as_bytes();
    let Ok(len) = u64::try_from(want.len()) else {
        return false;
    };
    if spooled < len || reader.seek(std::io::SeekFrom::Start(0)).is_err() {
        return false;
    }
    let mut buf = vec![0u8; 1024 * 1024];
    let mut at = 0usize;
    while at < want.len() {
        let n = buf.len().min(want.len() - at);
        if reader.read_exact(&mut buf[..n]).is_err() || buf[..n] != want[at..at + n] {
            return false;
        }
        at += n;
    }
    (spooled == len || file.set_len(len).is_ok()) && file.sync_data().is_ok()
}

/// Writes the texts of `st` that are longer than [`INLINE_MAX`] to their own files; returns
/// the files written (empty when every text stays inline). `spools` are the files that
/// received the step's (stdout, stderr) as they were streamed, with their sizes: one that
/// holds the text is kept instead of writing it again; the others are removed.
///
/// # Errors
/// `SYSTEM.IO.WRITE_FAILED` (files written before the failure are removed).
pub(crate) fn spill(
    paths: &StorePaths,
    run_id: &str,
    st: &StepState,
    spools: [Option<(fs::File, String, u64)>; 2],
) -> Result<OutputFiles, AwfError> {
    let mut files = OutputFiles::default();
    let [out_spool, err_spool] = spools;
    for ((stream, text), spool) in [("stdout", &st.output), ("stderr", &st.stderr)]
        .into_iter()
        .zip([out_spool, err_spool])
    {
        let adopted = match spool {
            Some((f, rel, n)) if text.len() > INLINE_MAX && adopt_spool(&f, n, text) => Some(rel),
            Some((_, rel, _)) => {
                remove_outputs(paths, std::iter::once(rel.as_str()));
                None
            }
            None => None,
        };
        if text.len() <= INLINE_MAX {
            continue;
        }
        let written = match adopted {
            Some(rel) => Ok(rel),
            None => write_output(paths, run_id, &st.name, stream, text),
        };
        match written {
            Ok(rel) if stream == "stdout" => files.stdout = Some(rel),
            Ok(rel) => files.stderr = Some(rel),
            Err(e) => {
                remove_outputs(paths, files.paths());
                return Err(e);
            }
        }
    }
    Ok(files)
}

/// The streams of `st` longer than [`INLINE_MAX`] ("stdout", "stderr"), which [`capped`]
/// cuts.
pub(crate) fn cut_inline(st: &StepState) -> Vec<&'static str> {
    [("stdout", &st.output), ("stderr", &st.stderr)]
        .into_iter()
        .filter(|(_, t)| t.len() > INLINE_MAX)
        .map(|(stream, _)| stream)
        .collect()
}

/// `st` with its `output` and `stderr` cut to their first [`INLINE_MAX`] bytes (at a
/// character boundary): what the record keeps inline of a text whose own file could not be
/// written.
pub(crate) fn capped(st: &StepState) -> StepState {
    let cut = |t: &SharedText| -> SharedText {
        if t.len() <= INLINE_MAX {
            return t.clone();
        }
        let mut end = INLINE_MAX;
        while !t.is_char_boundary(end) {
            end -= 1;
        }
        t[..end].to_owned().into()
    };
    let mut out = st.clone();
    out.output = cut(&st.output);
    out.stderr = cut(&st.stderr);
    out
}

/// Removes output files named relative to the data root (best effort).
pub(crate) fn remove_outputs<'a>(paths: &StorePaths, files: impl Iterator<Item = &'a str>) {
    for rel in files {
        if rel.starts_with("outputs/") && !rel.contains("..") {
            let _ = fs::remove_file(paths.data_root.join(rel));
        }
    }
}

/// Removes the files of the run's outputs directory that neither `refs` nor the run's
/// transcript names (left by a writer killed between writing a file and recording it), and
/// the directory when nothing is left. A file an earlier attempt or iteration of a step
/// replaced in the record stays: the transcript's `step.completed` or `step.retrying` line
/// names it for that attempt's chunks. Best effort.
pub(crate) fn prune_outputs(paths: &StorePaths, run_id: &str, refs: &FileRefs) {
    if !valid_id(run_id) {
        return;
    }
    let dir = outputs_dir(paths, run_id);
    let Ok(entries) = fs::read_dir(&dir) else {
        return;
    };
    let named = transcript_files(paths, run_id);
    let keep: std::collections::BTreeSet<&str> = refs
        .values()
        .flat_map(OutputFiles::paths)
        .chain(named.iter().map(String::as_str))
        .filter_map(|p| p.rsplit('/').next())
        .collect();
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_str().is_some_and(|n| keep.contains(n)) {
            let _ = fs::remove_file(entry.path());
        }
    }
    let _ = fs::remove_dir(&dir);
}

/// The output files the run's transcript names (`output_file`, `stderr_file` of its lines),
/// as paths relative to the data root; none when it cannot be read.
fn transcript_files(paths: &StorePaths, run_id: &str) -> Vec<String> {
    use std::io::BufRead;
    let Ok(f) = fs::File::open(paths.transcript_file(run_id)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in std::io::BufReader::new(f).lines().map_while(Result::ok) {
        if !line.contains("_file\":") {
            continue;
        }
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        for key in ["output_file", "stderr_file"] {
            if let Some(p) = v["payload"][key].as_str() {
                out.push(p.to_owned());
            }
        }
    }
    out
}

/// `st` as stored: the texts kept in files (named in `files`) left empty. No copy of the
/// texts (they are shared).
pub(crate) fn stored_form(st: &StepState, files: &OutputFiles) -> StepState {
    let mut out = st.clone();
    if files.stdout.is_some() {
        out.output = SharedText::default();
    }
    if files.stderr.is_some() {
        out.stderr = SharedText::default();
    }
    out
}

/// A state file as written: the snapshot (texts kept in files left empty) and the map of
/// those files.
#[derive(Serialize)]
struct StoredSnapshot<'a> {
    #[serde(flatten)]
    snap: &'a RunSnapshot,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    output_files: &'a FileRefs,
    /// The success terminal's message of a finished run (`RunResult::message`), kept by the
    /// recorder beside the snapshot: key `message`, absent when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
}

/// The `message` of a state file (the rest of the file is skipped).
#[derive(Deserialize)]
struct StoredMessage {
    #[serde(default)]
    message: Option<String>,
}

/// The `message` key of the state file of `run_id` (see [`StoredSnapshot`]); `None` when
/// there is none, or no readable state file.
pub(crate) fn message(paths: &StorePaths, run_id: &str) -> Option<String> {
    if !valid_id(run_id) {
        return None;
    }
    let bytes = fs::read(paths.state_file(run_id)).ok()?;
    serde_json::from_slice::<StoredMessage>(&bytes)
        .ok()
        .and_then(|m| m.message)
}

/// The `output_files` map of a state file (the rest of the file is skipped).
#[derive(Deserialize)]
struct StoredRefs {
    #[serde(default)]
    output_files: FileRefs,
}

/// Serialises and writes one snapshot to `<root>/states/<run_id>.json`; the texts of the
/// states named in `refs` are in those files and are left out of the state file.
pub(crate) fn save_with(
    paths: &StorePaths,
    snap: &RunSnapshot,
    refs: &FileRefs,
    message: Option<&str>,
    durability: Durability,
) -> Result<Option<fs::File>, AwfError> {
    let target = paths.state_file(&snap.run_id);
    if !valid_id(&snap.run_id) {
        return Err(write_failed("the state file", &target, "invalid run id"));
    }
    let blanked;
    let shown = if refs.is_empty() {
        snap
    } else {
        let mut s = snap.clone();
        for (name, files) in refs {
            if let Some(st) = s.states.get_mut(name) {
                *st = stored_form(st, files);
            }
        }
        blanked = s;
        &blanked
    };
    let mut bytes = serde_json::to_vec_pretty(&StoredSnapshot {
        snap: shown,
        output_files: refs,
        message,
    })
    .map_err(|e| write_failed("the state file", &target, e))?;
    bytes.push(b'\n');
    write_atomic(&target, &bytes, durability)
        .map_err(|e| write_failed("the state file", &target, e))
}

/// Writes one snapshot whose texts are all in memory (the [`StateStore::save`] port): long
/// texts go to their own files first.
///
/// [`StateStore::save`]: awf_domain::ports::store::StateStore::save
pub(crate) fn save(paths: &StorePaths, snap: &RunSnapshot, sync_dir: bool) -> Result<(), AwfError> {
    let mut refs = FileRefs::new();
    for (name, st) in &snap.states {
        let files = spill(paths, &snap.run_id, st, [None, None])?;
        if !files.is_empty() {
            refs.insert(name.clone(), files);
        }
    }
    save_with(paths, snap, &refs, None, Durability::Now { dir: sync_dir })?;
    prune_outputs(paths, &snap.run_id, &refs);
    Ok(())
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
    /// States recorded since the previous line, by name (texts kept in files empty).
    pub states: std::collections::BTreeMap<String, std::borrow::Cow<'a, StepState>>,
    /// The files of those states' long texts (a state of `states` not named here has its
    /// texts inline).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub output_files: FileRefs,
    /// The run's spend on agents so far (budgets), when any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<awf_domain::run::Spend>,
    /// The sub-workflow runs started so far, by calling path (all of them; none: left out).
    #[serde(default, skip_serializing_if = "no_child_runs")]
    pub child_runs: std::borrow::Cow<'a, std::collections::BTreeMap<String, String>>,
}

/// Whether a journal line has no child runs to write.
fn no_child_runs(m: &std::collections::BTreeMap<String, String>) -> bool {
    m.is_empty()
}

impl JournalEntry<'_> {
    fn apply(self, snap: &mut RunSnapshot, refs: &mut FileRefs) {
        snap.status = self.status;
        snap.current_state = self.current_state.into_owned();
        snap.updated_at = self.updated_at;
        snap.loop_position = self.loop_position;
        if self.spend.is_some() {
            snap.spend = self.spend;
        }
        if !self.child_runs.is_empty() {
            snap.child_runs = self.child_runs.into_owned();
        }
        let mut files = self.output_files;
        for (name, st) in self.states {
            match files.remove(&name) {
                Some(f) => refs.insert(name.clone(), f),
                None => refs.remove(&name),
            };
            snap.states.insert(name, st.into_owned());
        }
    }
}

/// Opens the run's journal for appending (created 0600).
///
/// # Errors
/// `SYSTEM.IO.WRITE_FAILED`.
pub(crate) fn open_journal(paths: &StorePaths, run_id: &str) -> Result<fs::File, AwfError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = paths.journal_file(run_id);
    if !valid_id(run_id) {
        return Err(write_failed("the state journal", &path, "invalid run id"));
    }
    fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| write_failed("the state journal", &path, e))
}

/// Appends one entry to an open journal in one `write` (once it returns, a kill of this
/// process loses nothing; syncing to the disk is the caller's, see the recorder).
///
/// # Errors
/// `SYSTEM.IO.WRITE_FAILED`.
pub(crate) fn append_journal(
    paths: &StorePaths,
    run_id: &str,
    file: &mut fs::File,
    entry: &JournalEntry<'_>,
) -> Result<(), AwfError> {
    // The path only for an error's message: building it costs more than the line (issue 9:
    // one a step).
    let failed = |e: &dyn std::fmt::Display| {
        write_failed("the state journal", &paths.journal_file(run_id), e)
    };
    let mut line = serde_json::to_vec(entry).map_err(|e| failed(&e))?;
    line.push(b'\n');
    let before = file.metadata().map_err(|e| failed(&e))?.len();
    file.write_all(&line).map_err(|e| {
        // A line cut short (a full disk) must not stay before the lines written after it,
        // where readers take it for damage: the journal is cut back to its whole lines.
        let _ = file.set_len(before);
        failed(&e)
    })
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
///
/// Only a state file of a running run has a journal that belongs to it: a run's state file
/// is written whole when it starts and when it ends, and the journal is removed after the
/// last whole write is synced; a journal beside an ended run's state file is the one of the
/// lines that state file already holds (the process was killed before removing it) and is
/// ignored.
///
/// # Errors
/// `SYSTEM.IO.READ_FAILED` for a line that does not parse with a line after it: not a
/// write cut short (a line cut short by a full disk is cut off by the writer), but damage;
/// the lines after it would be lost without a word.
fn replay(path: &Path, snap: &mut RunSnapshot, refs: &mut FileRefs) -> Result<(), AwfError> {
    if snap.status != StoredStatus::Running {
        return Ok(());
    }
    let Ok(bytes) = fs::read(path) else {
        return Ok(());
    };
    let lines: Vec<&[u8]> = bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.trim_ascii().is_empty())
        .collect();
    for (i, line) in lines.iter().enumerate() {
        match serde_json::from_slice::<JournalEntry<'_>>(line) {
            Ok(entry) => entry.apply(snap, refs),
            Err(_) if i + 1 == lines.len() => break,
            Err(e) => {
                let shown = path.to_string_lossy();
                return Err(read_failed(
                    "the state journal",
                    path,
                    format!("line {} of {} is damaged: {e}", i + 1, lines.len()),
                )
                .with_hint(format!(
                    "the journal is damaged (edited, or corrupted on the disk) before its \
                     last line: this run cannot be shown or resumed as recorded; move it \
                     aside (`mv {} {}`) to read the run as its state file has it (the steps \
                     the journal recorded then run again on resume)",
                    awf_domain::shell::quote_arg(&shown),
                    awf_domain::shell::quote_arg(&format!("{shown}.broken"))
                )));
            }
        }
    }
    Ok(())
}

/// The nesting serde_json reads at most (its recursion limit).
const SERDE_JSON_DEPTH: usize = 128;

/// Whether a state file that did not parse (`e`) is a whole record (a JSON object) holding
/// a value nested deeper than serde_json reads back, rather than a damaged file.
fn too_deep_record(bytes: &[u8], e: &serde_json::Error) -> bool {
    let object = bytes
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{');
    object
        && e.to_string().starts_with("recursion limit exceeded")
        && awf_domain::json::text_depth(bytes) >= SERDE_JSON_DEPTH
}

/// Parses a state file: the snapshot (texts kept in files empty) and its `output_files`.
fn parse_state(bytes: &[u8], path: &Path) -> Result<(RunSnapshot, FileRefs), AwfError> {
    let snap: RunSnapshot = serde_json::from_slice(bytes).map_err(|e| {
        // Not damaged: a value nested deeper than serde_json reads back (128 levels), taken
        // in by an awf that did not limit nesting. Moving it aside would lose a whole file.
        // Only for a record (an object) that serde_json gave up on for its depth: a file of
        // another shape is damaged however deep it nests (breaker: `[[[…` was called whole).
        let hint = if too_deep_record(bytes, &e) {
            let depth = awf_domain::json::text_depth(bytes);
            format!(
                "the file is whole, but a value in it (an input or an agent's JSON answer) \
                 nests {depth} levels deep, and awf reads back fewer than {SERDE_JSON_DEPTH}: \
                 this run cannot be shown or resumed, keep the file if you need what it \
                 records; awf now refuses values nested more than {} levels when a run starts",
                awf_domain::json::MAX_DEPTH
            )
        } else {
            format!(
                "the file is damaged (cut short or edited): this run cannot be shown or resumed; \
                 move it aside (`mv {} {}`) so that awf no longer lists it",
                awf_domain::shell::quote_arg(&path.to_string_lossy()),
                awf_domain::shell::quote_arg(&format!("{}.broken", path.to_string_lossy()))
            )
        };
        read_failed("the state file", path, e).with_hint(hint)
    })?;
    let refs = serde_json::from_slice::<StoredRefs>(bytes)
        .map(|r| r.output_files)
        .unwrap_or_default();
    Ok((snap, refs))
}

/// Refuses a state file awf cannot take as the record of `run_id`: one whose `run_id` names
/// another run (edited or copied: resuming it would record a run under the other id while
/// this one stays as it was), or one of a newer format than this awf reads.
///
/// # Errors
/// `SYSTEM.IO.READ_FAILED` naming the file, with a hint.
fn check_identity(snap: &RunSnapshot, run_id: &str, path: &Path) -> Result<(), AwfError> {
    if snap.run_id != run_id {
        return Err(read_failed(
            "the state file",
            path,
            format!(
                "it records run \"{}\", not \"{run_id}\" (its file name)",
                snap.run_id
            ),
        )
        .with_hint(format!(
            "set its \"run_id\" back to \"{run_id}\", or move the file aside; awf does not \
             resume or show a run under another run's id"
        )));
    }
    if snap.schema_version > STATE_SCHEMA_VERSION {
        return Err(read_failed(
            "the state file",
            path,
            format!(
                "its schema_version is {}, newer than the {STATE_SCHEMA_VERSION} this awf reads",
                snap.schema_version
            ),
        )
        .with_hint("use the newer awf that wrote it, or move the file aside"));
    }
    Ok(())
}

/// Reads one state file with its journal replayed, leaving the texts kept in files empty
/// and naming those files; `Ok(None)` when it does not exist.
pub(crate) fn read_stored(
    paths: &StorePaths,
    run_id: &str,
) -> Result<Option<(RunSnapshot, FileRefs)>, AwfError> {
    if !valid_id(run_id) {
        return Ok(None);
    }
    let path = paths.state_file(run_id);
    match fs::read(&path) {
        Ok(bytes) => {
            let (mut snap, mut refs) = parse_state(&bytes, &path)?;
            check_identity(&snap, run_id, &path)?;
            replay(&paths.journal_file(run_id), &mut snap, &mut refs)?;
            refs.retain(|name, _| snap.states.contains_key(name));
            Ok(Some((snap, refs)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(read_failed("the state file", &path, e)),
    }
}

/// Reads one output file named relative to the data root (UTF-8, as written).
fn read_output(paths: &StorePaths, rel: &str, state: &str) -> Result<SharedText, AwfError> {
    let path = paths.data_root.join(rel);
    if !rel.starts_with("outputs/") || rel.contains("..") {
        return Err(read_failed(
            "the output of state",
            &path,
            format!("{state}: not an output file"),
        ));
    }
    let bytes = fs::read(&path).map_err(|e| {
        read_failed("the output of state", &path, format!("{state}: {e}")).with_hint(
            "the file holding this step's output is gone; resume from an earlier state \
             (`awf resume <id> --from <state>`) to run the step again",
        )
    })?;
    Ok(match String::from_utf8(bytes) {
        Ok(s) => s.into(),
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned().into(),
    })
}

/// Reads one state file, with its journal replayed and the texts kept in files read back;
/// `Ok(None)` when it does not exist.
pub(crate) fn read(paths: &StorePaths, run_id: &str) -> Result<Option<RunSnapshot>, AwfError> {
    let Some((mut snap, refs)) = read_stored(paths, run_id)? else {
        return Ok(None);
    };
    for (name, files) in &refs {
        let Some(st) = snap.states.get_mut(name) else {
            continue;
        };
        if let Some(rel) = &files.stdout {
            st.output = read_output(paths, rel, name)?;
        }
        if let Some(rel) = &files.stderr {
            st.stderr = read_output(paths, rel, name)?;
        }
    }
    Ok(Some(snap))
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

/// The run ids of the state files in `dir` that [`list`] leaves out: unreadable, not a
/// state, another run's id, or a newer format (sorted; none when `dir` cannot be read).
pub(crate) fn unreadable(dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<String> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let id = name
                .strip_suffix(".json")
                .filter(|_| !name.starts_with('.'))?;
            let ok = fs::read(entry.path()).ok().is_some_and(|bytes| {
                serde_json::from_slice::<RunSnapshot>(&bytes).is_ok_and(|snap| {
                    snap.run_id == id && snap.schema_version <= STATE_SCHEMA_VERSION
                })
            });
            (!ok).then(|| id.to_owned())
        })
        .collect();
    out.sort();
    out
}

/// Every parsable `*.json` state file of `dir`, newest first (by `started_at`, then run id).
/// Files that do not parse (foreign files) are skipped. Texts kept in their own files are
/// not read (they are empty here; [`load`] reads them).
pub(crate) fn list(dir: &Path) -> Result<Vec<RunSnapshot>, AwfError> {
    let Some(entries) = read_states_dir(dir)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| read_failed("the states directory", dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || !name.ends_with(".json") {
            continue;
        }
        if let Some(snap) = read_listed(&entry.path(), name.strip_suffix(".json")) {
            out.push(snap);
        }
    }
    sort_newest_first(&mut out);
    Ok(out)
}

/// Newest first, by `started_at`, then run id.
fn sort_newest_first(runs: &mut [RunSnapshot]) {
    runs.sort_by(|a, b| {
        b.started_at
            .cmp(&a.started_at)
            .then_with(|| b.run_id.cmp(&a.run_id))
    });
}

/// The state file at `path`, named `<id>.json`, as [`list`] gives it (its journal replayed,
/// texts kept in files left empty); `None` when it cannot be read or is not the state of
/// run `id` in a format this awf reads (what [`unreadable`] names).
fn read_listed(path: &Path, id: Option<&str>) -> Option<RunSnapshot> {
    let bytes = fs::read(path).ok()?;
    // A file `load` refuses (another run's id, a newer format) is not listed either.
    let mut snap = serde_json::from_slice::<RunSnapshot>(&bytes).ok()?;
    if id != Some(snap.run_id.as_str()) || snap.schema_version > STATE_SCHEMA_VERSION {
        return None;
    }
    // A journal damaged before its last line: as a damaged state file, not listed.
    replay(
        &path.with_extension("journal"),
        &mut snap,
        &mut FileRefs::new(),
    )
    .ok()?;
    Some(snap)
}

/// The entries of the states directory `dir`; `None` when there is none (or none can be:
/// the data root under a regular file).
///
/// # Errors
/// `SYSTEM.IO.READ_FAILED` when it cannot be read (a `states` that is itself a file is
/// damage to say, not an empty list).
fn read_states_dir(dir: &Path) -> Result<Option<fs::ReadDir>, AwfError> {
    match fs::read_dir(dir) {
        Ok(e) => Ok(Some(e)),
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || (e.kind() == std::io::ErrorKind::NotADirectory
                    && fs::symlink_metadata(dir).is_err()) =>
        {
            Ok(None)
        }
        Err(e) => Err(read_failed("the states directory", dir, e)),
    }
}

/// The names in a states directory, nothing read: the run ids of its state files
/// (`<id>.json`) and of its journals (`<id>.journal`), each in directory order.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// Run ids of the state files.
    pub states: Vec<String>,
    /// Run ids of the journals.
    pub journals: Vec<String>,
}

/// Lists the states directory `dir` by name only (one `readdir`, no file opened).
///
/// # Errors
/// As [`list`].
pub(crate) fn listing(dir: &Path) -> Result<Listing, AwfError> {
    let mut out = Listing::default();
    let Some(entries) = read_states_dir(dir)? else {
        return Ok(out);
    };
    for entry in entries {
        let entry = entry.map_err(|e| read_failed("the states directory", dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if let Some(id) = name.strip_suffix(".json").filter(|id| valid_id(id)) {
            out.states.push(id.to_owned());
        } else if let Some(id) = name.strip_suffix(".journal").filter(|id| valid_id(id)) {
            out.journals.push(id.to_owned());
        }
    }
    Ok(out)
}

/// What [`scan`] found.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// As [`list`] gives them.
    pub runs: Vec<RunSnapshot>,
    /// As [`unreadable`] names them.
    pub unreadable: Vec<String>,
    /// Run ids of the journals (for [`crate::sweep`]).
    pub journals: Vec<String>,
}

/// [`list`] and [`unreadable`] in one pass over `dir`, the state files of the runs in
/// `skip` not read; with the run ids of the journals found.
///
/// # Errors
/// As [`list`].
pub(crate) fn scan(
    dir: &Path,
    skip: &std::collections::BTreeSet<String>,
) -> Result<Scan, AwfError> {
    let names = listing(dir)?;
    let mut runs = Vec::new();
    let mut unreadable = Vec::new();
    for id in names.states {
        if skip.contains(&id) {
            continue;
        }
        match read_listed(&dir.join(format!("{id}.json")), Some(&id)) {
            Some(snap) => runs.push(snap),
            None => unreadable.push(id),
        }
    }
    sort_newest_first(&mut runs);
    unreadable.sort();
    Ok(Scan {
        runs,
        unreadable,
        journals: names.journals,
    })
}

/// The stored status of the state file of `run_id` as written whole (its journal not
/// replayed: only a `running` state file's journal is read, see [`replay`]) and its parent
/// run; `None` when it cannot be read or is not that run's state.
pub(crate) fn written_status(
    paths: &StorePaths,
    run_id: &str,
) -> Option<(StoredStatus, Option<String>)> {
    if !valid_id(run_id) {
        return None;
    }
    let bytes = fs::read(paths.state_file(run_id)).ok()?;
    let snap = serde_json::from_slice::<RunSnapshot>(&bytes).ok()?;
    (snap.run_id == run_id && snap.schema_version <= STATE_SCHEMA_VERSION)
        .then_some((snap.status, snap.parent_run_id))
}

#[cfg(test)]
mod shape_tests {
    #![allow(clippy::unwrap_used)]

    use std::path::Path;

    /// A full disk and a spent quota are no room (written nowhere else on the file
    /// system); a permission or a missing directory is another matter (the fallback beside
    /// the target may work).
    #[test]
    fn only_a_full_disk_or_quota_is_no_room() {
        let os = std::io::Error::from_raw_os_error;
        assert!(super::no_room(&os(28))); // ENOSPC
        assert!(super::no_room(&os(122))); // EDQUOT
        assert!(!super::no_room(&os(13))); // EACCES
        assert!(!super::no_room(&os(2))); // ENOENT
        assert!(!super::no_room(&os(27))); // EFBIG
    }

    /// A state file replaced by `[[[…` is damaged, not "whole with a deep value" (breaker);
    /// a record (an object) holding a value nested past serde_json's limit is whole.
    #[test]
    fn only_a_record_with_a_deep_value_is_called_whole() {
        let hint = |bytes: &[u8]| {
            let e = super::parse_state(bytes, Path::new("/d/states/r.json")).unwrap_err();
            e.hints().first().cloned().unwrap_or_default()
        };
        let brackets = "[".repeat(100_000);
        assert!(
            hint(brackets.as_bytes()).starts_with("the file is damaged (cut short or edited)"),
            "{}",
            hint(brackets.as_bytes())
        );
        let deep = format!(
            "{{\"run_id\": \"r\", \"inputs\": {{\"x\": {}1{}}}}}",
            "[".repeat(200),
            "]".repeat(200)
        );
        assert!(
            hint(deep.as_bytes()).starts_with("the file is whole, but a value in it"),
            "{}",
            hint(deep.as_bytes())
        );
    }
}
