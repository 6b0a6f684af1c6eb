//! The start-up sweep of temp files a killed awf left behind.
//!
//! An agent step with `mcp_proxy:` writes per-call files into the temp dir (`$TMPDIR`, else
//! `/tmp`): the proxy's `awf-mcp-proxy-<pid>-<uuid>.json` and `.events.jsonl`
//! ([`crate::proxy`]) and the providers' `awf-claude-mcp-<pid>-<hex>.json`,
//! `awf-copilot-mcp-<pid>-<hex>.json`, gemini's `awf-gemini-<pid>-<hex>/` and vibe's
//! `awf-vibe-<pid>-<hex>/` ([`awf_agents::TEMP_PREFIXES`]). They are removed when the call
//! ends, but not when awf is SIGKILLed. `<pid>` is the creating awf's process id: at the start
//! of `awf run`, `awf resume` and `awf acp-serve` the entries whose pid is not a live awf
//! process (gone, a zombie, or reused by another program) are removed. One `readdir` of the
//! temp dir; only names of the form `<prefix><digits>-…` with those prefixes are looked at,
//! nothing else is touched; a symlink is removed itself, never followed.

use std::path::Path;
use std::path::PathBuf;

use awf_domain::ports::Host;

/// Prefix of the MCP proxy's config and events files ([`crate::proxy`]).
pub const PROXY_PREFIX: &str = "awf-mcp-proxy-";

/// The creating pid in a sweepable temp name: `<prefix><digits>-…` for one of the prefixes;
/// `None` for any other name.
pub fn owner_pid(name: &str) -> Option<u32> {
    let rest = std::iter::once(PROXY_PREFIX)
        .chain(awf_agents::TEMP_PREFIXES.iter().copied())
        .find_map(|p| name.strip_prefix(p))?;
    let (digits, after) = rest.split_once('-')?;
    if digits.is_empty() || after.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether `pid` is a live awf process: it exists and runs a program named as this one
/// (or `awf`).
fn is_live_awf(host: &dyn Host, pid: u32, own_name: Option<&std::ffi::OsStr>) -> bool {
    if pid == host.pid() {
        return true;
    }
    if !host.process_alive(pid) {
        return false;
    }
    let Some(program) = host.process_program(pid) else {
        return false;
    };
    program
        .file_name()
        .is_some_and(|n| n == "awf" || Some(n) == own_name)
}

/// The data root of the command (`--storage`, else as [`crate::wiring::data_root`] finds it
/// from the environment), absolute; `None` when the working directory cannot be read. Only
/// the three variables that name it are read (UTF-8 ones, as the command reads them).
pub fn data_root(storage: Option<&Path>) -> Option<PathBuf> {
    let env: std::collections::BTreeMap<String, String> =
        ["AWF_STORAGE_DIR", "XDG_DATA_HOME", "HOME"]
            .into_iter()
            .filter_map(|k| Some((k.to_owned(), std::env::var(k).ok()?)))
            .collect();
    let cwd = std::env::current_dir().ok()?;
    Some(cwd.join(crate::wiring::data_root(storage, &env)))
}

/// Removes from `dir` the sweepable entries ([`owner_pid`]) whose pid is not a live awf
/// process; gives the removed paths. Failures (another user's file, a race with its owner)
/// are skipped silently: the sweep never fails a command.
pub fn sweep(host: &dyn Host, dir: &Path) -> Vec<PathBuf> {
    // Straight from the directory, not `Host::read_dir`: a shared temp dir holds hundreds of
    // other programs' entries, and only a name is needed to pass them by (a path built and
    // a type asked for each was most of the sweep's cost: issue 9, per-run cost).
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut own: Option<Option<PathBuf>> = None;
    let mut removed = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(owner_pid) else {
            continue;
        };
        let own_name = own
            .get_or_insert_with(|| host.process_program(host.pid()))
            .as_deref()
            .and_then(Path::file_name);
        if is_live_awf(host, pid, own_name) {
            continue;
        }
        let path = e.path();
        // The entry itself: a symlink is removed, never followed.
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        let gone = if is_dir {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match gone {
            Ok(()) => removed.push(path),
            Err(err) => {
                tracing::debug!(path = %path.display(), error = %err, "could not remove a stale awf temp file");
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_prefixed_names_with_a_pid_are_sweepable() {
        assert_eq!(owner_pid("awf-mcp-proxy-123-abc.json"), Some(123));
        assert_eq!(owner_pid("awf-mcp-proxy-123-abc.events.jsonl"), Some(123));
        assert_eq!(owner_pid("awf-claude-mcp-7-0123abcd.json"), Some(7));
        assert_eq!(owner_pid("awf-copilot-mcp-7-0123abcd.json"), Some(7));
        assert_eq!(owner_pid("awf-gemini-42-ffee"), Some(42));
        assert_eq!(owner_pid("awf-vibe-42-ffee"), Some(42));
        for other in [
            "awf-claude-mcp-0123456789abcdef.json",
            "awf-mcp-proxy-.json",
            "awf-mcp-proxy-12",
            "awf-mcp-proxy-12-",
            "awf-mcp-proxy-1a-b.json",
            "awf-e2e-123-x",
            "notes-awf-vibe-1-x",
            "awf-vibe-99999999999999-x",
        ] {
            assert_eq!(owner_pid(other), None, "{other}");
        }
    }

    #[test]
    fn dead_and_foreign_pids_are_swept_live_awf_and_other_files_kept() {
        let h = awf_host::OsHost;
        let tmp = tempfile::tempdir().unwrap();
        // A process that has exited (reaped: its pid is free).
        let mut dead = std::process::Command::new("true").spawn().unwrap();
        dead.wait().unwrap();
        // A live process that is not awf.
        let mut sleeper = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let me = std::process::id();
        let put = |name: &str| {
            let p = tmp.path().join(name);
            std::fs::write(&p, "{}").unwrap();
            p
        };
        let stale = put(&format!("awf-mcp-proxy-{}-u.json", dead.id()));
        let stale_events = put(&format!("awf-mcp-proxy-{}-u.events.jsonl", dead.id()));
        let foreign = put(&format!("awf-claude-mcp-{}-h.json", sleeper.id()));
        let stale_dir = tmp.path().join(format!("awf-gemini-{}-h", dead.id()));
        std::fs::create_dir(&stale_dir).unwrap();
        std::fs::write(stale_dir.join("settings.json"), "{}").unwrap();
        // A symlink is removed, what it points to is not.
        let target = put("target.txt");
        let link = tmp.path().join(format!("awf-vibe-{}-h", dead.id()));
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let mine = put(&format!("awf-mcp-proxy-{me}-u.json"));
        let unrelated = put(&format!("other-{}-u.json", dead.id()));
        let old_style = put("awf-claude-mcp-0123456789abcdef.json");

        let mut removed = sweep(&h, tmp.path());
        removed.sort();
        let mut want = vec![stale, stale_events, foreign, stale_dir, link];
        want.sort();
        assert_eq!(removed, want);
        for p in &want {
            assert!(std::fs::symlink_metadata(p).is_err(), "{}", p.display());
        }
        for p in [&mine, &unrelated, &old_style, &target] {
            assert!(p.exists(), "{} kept", p.display());
        }
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
    }
}
