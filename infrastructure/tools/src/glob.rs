//! Glob: files matching a `**` pattern, newest first.

use std::path::Component;
use std::path::Path;
use std::path::PathBuf;
use std::time::SystemTime;

use awf_domain::ports::tools::ToolOutput;
use serde_json::Map;
use serde_json::Value;

use crate::Inner;
use crate::args::Args;

/// Matches collected at most before sorting (bounds memory on huge trees).
const COLLECT_MAX: usize = 100_000;

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
    let mut walk = ignore::WalkBuilder::new(&base);
    walk.hidden(false)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|e| e.file_name() != ".git");
    let mut found: Vec<(SystemTime, PathBuf)> = Vec::new();
    let mut capped = false;
    for entry in walk.build().flatten() {
        let Some(ft) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        let Ok(rel) = path.strip_prefix(&base) else {
            continue;
        };
        if rel.as_os_str().is_empty() || !matcher.is_match(rel) {
            continue;
        }
        // A file, or a link leading to a file inside the root, checked by the kernel at
        // open time (a link swapped to lead outside is skipped, its target never stat'ed).
        let mtime = if ft.is_file() || ft.is_symlink() {
            inner.root.mtime_beneath(path)
        } else {
            None
        };
        let Some(mtime) = mtime else { continue };
        found.push((mtime, path.to_path_buf()));
        if found.len() >= COLLECT_MAX {
            capped = true;
            break;
        }
    }
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
