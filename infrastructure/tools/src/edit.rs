//! Write and Edit: atomic replacement that keeps the file's mode, BOM and line endings.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use awf_domain::ports::tools::ToolOutput;
use serde_json::Map;
use serde_json::Value;

use crate::Inner;
use crate::args::Args;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Mode of a file Write creates.
const NEW_FILE_MODE: u32 = 0o644;

pub(crate) fn write(inner: &Inner, map: &Map<String, Value>) -> ToolOutput {
    match do_write(inner, map) {
        Ok(t) => ToolOutput::text(t),
        Err(e) => ToolOutput::error(e),
    }
}

pub(crate) fn edit(inner: &Inner, map: &Map<String, Value>) -> ToolOutput {
    match do_edit(inner, map) {
        Ok(t) => ToolOutput::text(t),
        Err(e) => ToolOutput::error(e),
    }
}

fn do_write(inner: &Inner, map: &Map<String, Value>) -> Result<String, String> {
    let a = Args::new("Write", map);
    let given = a.str(&["path", "file_path"])?;
    let content = a.str(&["content"])?;
    let target = inner
        .root
        .for_write(given)
        .map_err(|e| format!("Write: {e}"))?;
    let mut bytes = content.as_bytes().to_vec();
    let mut kept = Vec::new();
    let mode = if target.exists {
        let old = fs::read(&target.path).map_err(|e| format!("Write: {given}: {e}"))?;
        if old.starts_with(BOM) && !bytes.starts_with(BOM) {
            bytes.splice(0..0, BOM.iter().copied());
            kept.push("BOM");
        }
        if uses_crlf(&old) && !content.contains('\r') && content.contains('\n') {
            bytes = content_crlf(&bytes);
            kept.push("CRLF line endings");
        }
        Some(mode_of(&target.path).map_err(|e| format!("Write: {given}: {e}"))?)
    } else {
        if let Some(parent) = target.path.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| format!("Write: {given}: creating {}: {e}", parent.display()))?;
        }
        None
    };
    atomic_write(&target.path, &bytes, mode.unwrap_or(NEW_FILE_MODE))
        .map_err(|e| format!("Write: {given}: {e}"))?;
    let verb = if target.exists {
        "overwrote"
    } else {
        "created"
    };
    let mut msg = format!(
        "Write: {verb} {} ({} bytes)",
        target.path.display(),
        bytes.len()
    );
    if !kept.is_empty() {
        msg.push_str(&format!("; kept the file's {}", kept.join(" and ")));
    }
    Ok(msg)
}

fn do_edit(inner: &Inner, map: &Map<String, Value>) -> Result<String, String> {
    let a = Args::new("Edit", map);
    let given = a.str(&["path", "file_path"])?;
    let old = a.str(&["old", "old_string"])?;
    let new = a.str(&["new", "new_string"])?;
    let replace_all = a.opt_bool(&["replace_all"])?.unwrap_or(false);
    if old.is_empty() {
        return Err(
            "Edit: `old` is empty; give the exact text to replace (use Write to create or overwrite a whole file)"
                .to_owned(),
        );
    }
    if old == new {
        return Err("Edit: `old` and `new` are the same; nothing would change".to_owned());
    }
    let path = inner
        .root
        .existing(given)
        .map_err(|e| format!("Edit: {e}"))?;
    crate::confine::regular(given, &path).map_err(|e| format!("Edit: {e}"))?;
    let meta = fs::metadata(&path).map_err(|e| format!("Edit: {given}: {e}"))?;
    if meta.is_dir() {
        return Err(format!("Edit: {given} is a directory, not a file"));
    }
    if meta.len() > inner.limits.edit_max_file {
        return Err(format!(
            "Edit: {given} is {} bytes, over the {} bytes Edit rewrites; use Bash (sed) or Write",
            meta.len(),
            inner.limits.edit_max_file
        ));
    }
    let data = fs::read(&path).map_err(|e| format!("Edit: {given}: {e}"))?;
    let mut old_b = old.as_bytes().to_vec();
    let mut new_b = new.as_bytes().to_vec();
    let mut count = count_matches(&data, &old_b);
    let mut crlf = false;
    if count == 0 && old.contains('\n') && uses_crlf(&data) {
        let o = content_crlf(old.as_bytes());
        let c = count_matches(&data, &o);
        if c > 0 {
            old_b = o;
            new_b = content_crlf(new.as_bytes());
            count = c;
            crlf = true;
        }
    }
    if count == 0 {
        return Err(format!(
            "Edit: `old` was not found in {given}; it must match the file exactly (whitespace and indentation included): Read the file and copy the text"
        ));
    }
    if count > 1 && !replace_all {
        return Err(format!(
            "Edit: `old` matches {count} places in {given}; give more surrounding text so that it matches once, or set replace_all to replace all {count}"
        ));
    }
    let out = replace(
        &data,
        &old_b,
        &new_b,
        if replace_all { usize::MAX } else { 1 },
    );
    atomic_write(&path, &out, meta.permissions().mode() & 0o7777)
        .map_err(|e| format!("Edit: {given}: {e}"))?;
    let mut msg = format!(
        "Edit: replaced {count} occurrence{} in {}",
        if count == 1 { "" } else { "s" },
        path.display()
    );
    if crlf {
        msg.push_str(" (matched with the file's CRLF line endings)");
    }
    Ok(msg)
}

/// Whether the file's line breaks are CRLF (its first line break is).
fn uses_crlf(data: &[u8]) -> bool {
    data.iter()
        .position(|b| *b == b'\n')
        .is_some_and(|i| i > 0 && data[i - 1] == b'\r')
}

/// `\n` made `\r\n` (an existing `\r\n` is kept).
fn content_crlf(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() + s.len() / 16);
    for (i, b) in s.iter().enumerate() {
        if *b == b'\n' && (i == 0 || s[i - 1] != b'\r') {
            out.push(b'\r');
        }
        out.push(*b);
    }
    out
}

/// Non-overlapping occurrences of `needle` (not empty) in `hay`.
fn count_matches(hay: &[u8], needle: &[u8]) -> usize {
    if needle.is_empty() {
        return 0;
    }
    memchr::memmem::find_iter(hay, needle)
        .fold((0, 0), |(n, next), i| {
            if i >= next {
                (n + 1, i + needle.len())
            } else {
                (n, next)
            }
        })
        .0
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    memchr::memmem::find(hay, needle)
}

/// Literal replacement of the first `max` occurrences.
fn replace(hay: &[u8], old: &[u8], new: &[u8], max: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len());
    let mut at = 0;
    let mut done = 0;
    while done < max {
        let Some(i) = find(&hay[at..], old) else {
            break;
        };
        out.extend_from_slice(&hay[at..at + i]);
        out.extend_from_slice(new);
        at += i + old.len();
        done += 1;
    }
    out.extend_from_slice(&hay[at..]);
    out
}

fn mode_of(path: &Path) -> std::io::Result<u32> {
    Ok(fs::metadata(path)?.permissions().mode() & 0o7777)
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory with `mode`,
/// fsync, rename over `path`, fsync of the directory.
fn atomic_write(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("the path has no parent directory"))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".awf-write-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file()
        .set_permissions(fs::Permissions::from_mode(mode))?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_replacement_and_counts() {
        assert_eq!(count_matches(b"aaaa", b"aa"), 2);
        assert_eq!(replace(b"x$1x", b"x", b"$&$$", 1), b"$&$$$1x".to_vec());
        assert_eq!(replace(b"abab", b"b", b"c", usize::MAX), b"acac".to_vec());
        assert_eq!(content_crlf(b"a\nb\r\nc"), b"a\r\nb\r\nc".to_vec());
        assert!(uses_crlf(b"a\r\nb\n"));
        assert!(!uses_crlf(b"a\nb\r\n"));
    }
}
