//! Glob: files matching a `**` pattern, newest first.
//!
//! The walk lists each directory through a descriptor opened beneath the one that listed it
//! (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, from the root's own descriptor),
//! so every name shown was read from the directory it is shown under: a directory swapped
//! for a symbolic link while the walk runs is skipped, never listed through the link (the
//! walk does not follow links), and nothing outside the root is ever listed. `.gitignore`,
//! `.ignore` and `.git/info/exclude` are read the same way, in the walked directories and in
//! those between the root and the base (never above the root).

use std::ffi::OsStr;
use std::io::Read as _;
use std::os::fd::AsFd;
use std::os::fd::BorrowedFd;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Component;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use ignore::Match;
use ignore::gitignore::Gitignore;
use ignore::gitignore::GitignoreBuilder;
use rustix::fs::AtFlags;
use rustix::fs::FileType;
use rustix::fs::Mode;
use rustix::fs::OFlags;
use rustix::fs::ResolveFlags;

use awf_domain::ports::tools::ToolOutput;
use serde_json::Map;
use serde_json::Value;

use crate::Inner;
use crate::args::Args;

/// Matches collected at most before sorting (bounds memory on huge trees).
const COLLECT_MAX: usize = 100_000;

/// Largest ignore file read (bytes); the rest is not read.
const IGNORE_FILE_MAX: u64 = 1024 * 1024;

/// The ignore rules in force in a directory: its own (innermost first), then its parent's.
struct Chain {
    rules: Vec<Gitignore>,
    parent: Option<Arc<Chain>>,
}

impl Chain {
    /// Whether `path` (absolute, under the directories of the chain) is ignored: the
    /// innermost rule that matches decides (`!pattern` re-includes).
    fn ignored(&self, path: &Path, is_dir: bool) -> bool {
        let mut at = Some(self);
        while let Some(c) = at {
            for g in &c.rules {
                match g.matched(path, is_dir) {
                    Match::Ignore(_) => return true,
                    Match::Whitelist(_) => return false,
                    Match::None => {}
                }
            }
            at = c.parent.as_deref();
        }
        false
    }
}

fn strict() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

/// Opens `name`, a directory listed in `dir`, beneath it; `None` when it is no longer a
/// directory there (swapped for a link, removed).
fn open_child_dir(dir: BorrowedFd<'_>, name: &OsStr) -> Option<OwnedFd> {
    rustix::fs::openat2(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        strict(),
    )
    .ok()
}

/// The text of `rel` (a regular file beneath `dir`, no link on the way), at most
/// [`IGNORE_FILE_MAX`] bytes.
fn read_small(dir: BorrowedFd<'_>, rel: &str) -> Option<String> {
    let fd = rustix::fs::openat2(
        dir,
        rel,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK,
        Mode::empty(),
        strict(),
    )
    .ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return None;
    }
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(IGNORE_FILE_MAX)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// The ignore rules a directory holds (`path` its absolute name), innermost first:
/// `.ignore`, `.gitignore`, then `.git/info/exclude` when it holds a repository.
fn rules_of(dir: BorrowedFd<'_>, path: &Path, names: &[&OsStr]) -> Vec<Gitignore> {
    let mut out = Vec::new();
    for file in [".ignore", ".gitignore", ".git"] {
        if !names.iter().any(|n| *n == OsStr::new(file)) {
            continue;
        }
        let rel = if file == ".git" {
            ".git/info/exclude"
        } else {
            file
        };
        let Some(text) = read_small(dir, rel) else {
            continue;
        };
        let mut b = GitignoreBuilder::new(path);
        for line in text.lines() {
            // A line the matcher refuses (a bad glob) is skipped, as git does.
            let _ = b.add_line(None, line);
        }
        if let Ok(g) = b.build()
            && !g.is_empty()
        {
            out.push(g);
        }
    }
    out
}

/// The names in a directory, with their types as the listing gave them.
fn list(fd: OwnedFd) -> Vec<(std::ffi::OsString, FileType)> {
    let Ok(dir) = rustix::fs::Dir::new(fd) else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." {
                return None;
            }
            Some((OsStr::from_bytes(name).to_owned(), e.file_type()))
        })
        .collect()
}

/// The ignore rules of the directories from the root down to `base`'s parent.
fn parents_chain(inner: &Inner, base: &Path) -> Option<Arc<Chain>> {
    let root = inner.root.path();
    let rel = base.strip_prefix(root).ok()?;
    let mut chain: Option<Arc<Chain>> = None;
    let mut path = root.to_path_buf();
    let mut fd = inner.root.open_dir("", root).ok()?;
    for c in rel.components() {
        let Component::Normal(part) = c else {
            continue;
        };
        let entries = list(rustix::io::dup(&fd).ok()?);
        let names: Vec<&OsStr> = entries.iter().map(|(n, _)| n.as_os_str()).collect();
        let rules = rules_of(fd.as_fd(), &path, &names);
        if !rules.is_empty() {
            chain = Some(Arc::new(Chain {
                rules,
                parent: chain,
            }));
        }
        fd = open_child_dir(fd.as_fd(), part)?;
        path.push(part);
    }
    chain
}

/// Walks the tree under `top` (the directory `base`), collecting the files whose path
/// relative to `base` matches; returns whether [`COLLECT_MAX`] cut the walk short.
fn walk(
    inner: &Inner,
    top: OwnedFd,
    base: &Path,
    chain: Option<Arc<Chain>>,
    matcher: &globset::GlobMatcher,
    found: &mut Vec<(SystemTime, PathBuf)>,
) -> bool {
    let mut stack: Vec<(OwnedFd, PathBuf, Option<Arc<Chain>>)> =
        vec![(top, base.to_path_buf(), chain)];
    while let Some((fd, path, parent)) = stack.pop() {
        let Ok(listing_fd) = rustix::io::dup(&fd) else {
            continue;
        };
        let entries = list(listing_fd);
        let names: Vec<&OsStr> = entries.iter().map(|(n, _)| n.as_os_str()).collect();
        let rules = rules_of(fd.as_fd(), &path, &names);
        let chain = if rules.is_empty() {
            parent
        } else {
            Some(Arc::new(Chain { rules, parent }))
        };
        for (name, listed) in &entries {
            if name == ".git" {
                continue;
            }
            let mut ft = *listed;
            if ft == FileType::Unknown {
                match rustix::fs::statat(&fd, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => ft = FileType::from_raw_mode(st.st_mode),
                    Err(_) => continue,
                }
            }
            let child = path.join(name);
            let is_dir = ft == FileType::Directory;
            if chain.as_ref().is_some_and(|c| c.ignored(&child, is_dir)) {
                continue;
            }
            if is_dir {
                if let Some(cfd) = open_child_dir(fd.as_fd(), name) {
                    stack.push((cfd, child, chain.clone()));
                }
                continue;
            }
            let Ok(rel) = child.strip_prefix(base) else {
                continue;
            };
            if !matcher.is_match(rel) {
                continue;
            }
            let mtime = match ft {
                // Stat'ed in the directory it was listed in, not followed.
                FileType::RegularFile => mtime_at(fd.as_fd(), name),
                // A link leading to a file inside the root, checked by the kernel at open
                // time (a link leading outside is skipped, its target never stat'ed).
                FileType::Symlink => inner.root.mtime_beneath(&child),
                _ => None,
            };
            let Some(mtime) = mtime else { continue };
            found.push((mtime, child));
            if found.len() >= COLLECT_MAX {
                return true;
            }
        }
    }
    false
}

/// The modification time of `name` in `dir` when it is (still) a regular file there.
fn mtime_at(dir: BorrowedFd<'_>, name: &OsStr) -> Option<SystemTime> {
    let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return None;
    }
    let secs = u64::try_from(st.st_mtime).unwrap_or(0);
    let nanos = u32::try_from(st.st_mtime_nsec).unwrap_or(0);
    Some(std::time::UNIX_EPOCH + std::time::Duration::new(secs, nanos))
}

pub(crate) fn run(inner: &Inner, map: &Map<String, Value>) -> ToolOutput {
    match glob(inner, map) {
        Ok(t) => ToolOutput::text(t),
        Err(e) => ToolOutput::error(e),
    }
}

fn has_meta(s: &str) -> bool {
    s.contains(['*', '?', '[', '{', '\\'])
}

/// Splits `pattern` into its leading literal directories and the glob after them.
fn split(pattern: &str) -> (PathBuf, String) {
    let p = Path::new(pattern);
    let mut prefix = PathBuf::new();
    let mut rest: Vec<String> = Vec::new();
    let mut literal = true;
    let comps: Vec<Component<'_>> = p.components().collect();
    for (i, c) in comps.iter().enumerate() {
        let s = c.as_os_str().to_string_lossy();
        let last = i + 1 == comps.len();
        if literal && !last && !has_meta(&s) {
            prefix.push(c.as_os_str());
        } else {
            literal = false;
            rest.push(s.into_owned());
        }
    }
    (prefix, rest.join("/"))
}

fn glob(inner: &Inner, map: &Map<String, Value>) -> Result<String, String> {
    let a = Args::new("Glob", map);
    let pattern = a.str(&["pattern"])?;
    if pattern.is_empty() {
        return Err("Glob: `pattern` is empty".to_owned());
    }
    let base_arg = a.opt_str(&["cwd", "path"])?.unwrap_or(".");
    let base = inner.root.dir(base_arg).map_err(|e| format!("Glob: {e}"))?;
    let (prefix, rest) = split(pattern);
    let start = base.join(&prefix);
    let start_s = start.to_string_lossy();
    let base = match inner.root.dir(&start_s) {
        Ok(b) => b,
        Err(e) if !start.exists() && !e.contains("outside") => {
            return Ok(format!("No files found (no directory {})", start.display()));
        }
        Err(e) => return Err(format!("Glob: {e}")),
    };
    let matcher = globset::GlobBuilder::new(&rest)
        .literal_separator(true)
        .build()
        .map_err(|e| format!("Glob: invalid pattern {pattern:?}: {e}"))?
        .compile_matcher();
    let top = inner
        .root
        .open_dir(&start_s, &base)
        .map_err(|e| format!("Glob: {e}"))?;
    let chain = parents_chain(inner, &base);
    let mut found: Vec<(SystemTime, PathBuf)> = Vec::new();
    let capped = walk(inner, top, &base, chain, &matcher, &mut found);
    if found.is_empty() {
        return Ok("No files found".to_owned());
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let lim = &inner.limits;
    let mut out = String::new();
    let mut shown = 0usize;
    for (_, p) in &found {
        let line = p.to_string_lossy();
        if shown >= lim.glob_results || out.len() + line.len() + 1 > lim.list_budget {
            break;
        }
        out.push_str(&line);
        out.push('\n');
        shown += 1;
    }
    if shown < found.len() || capped {
        let total = if capped {
            format!("over {}", found.len())
        } else {
            found.len().to_string()
        };
        out.push_str(&format!(
            "[awf: {shown} of {total} files shown (newest first); narrow the pattern or the directory]\n"
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_prefix_is_split_off() {
        assert_eq!(
            split("src/**/*.rs"),
            (PathBuf::from("src"), "**/*.rs".to_owned())
        );
        assert_eq!(split("*.rs"), (PathBuf::new(), "*.rs".to_owned()));
        assert_eq!(
            split("/a/b/c.txt"),
            (PathBuf::from("/a/b"), "c.txt".to_owned())
        );
        assert_eq!(split("a/*/b"), (PathBuf::from("a"), "*/b".to_owned()));
    }
}
