//! Write and Edit: atomic replacement that keeps the file's mode, BOM and line endings.

use std::fs;
use std::io::Read as _;
use std::io::Write as _;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use rustix::fs::Mode;
use rustix::fs::OFlags;
use rustix::fs::Stat;

use awf_domain::ports::tools::ToolOutput;
use serde_json::Map;
use serde_json::Value;

use crate::Inner;
use crate::args::Args;
use crate::confine::InDir;

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
    if given.ends_with('/') {
        return Err(format!(
            "Write: {given} ends with `/`, so it names a directory, not a file: give a file name"
        ));
    }
    let target = inner
        .root
        .for_write(given)
        .map_err(|e| format!("Write: {e}"))?;
    let place = inner
        .root
        .open_parent(given, &target.path, !target.exists)
        .map_err(|e| format!("Write: {e}"))?;
    let mut bytes = content.as_bytes().to_vec();
    let mut kept = Vec::new();
    let old = open_old(&place, given, Take::Head(WRITE_HEAD)).map_err(|e| format!("Write: {e}"))?;
    if let Some((data, _)) = &old {
        if data.starts_with(BOM) && !bytes.starts_with(BOM) {
            bytes.splice(0..0, BOM.iter().copied());
            kept.push("BOM");
        }
        if uses_crlf(data) && !content.contains('\r') && content.contains('\n') {
            bytes = content_crlf(&bytes);
            kept.push("CRLF line endings");
        }
    }
    let old_stat = old.as_ref().map(|(_, st)| st);
    replace_file(&place, &bytes, old_stat).map_err(|e| format!("Write: {given}: {e}"))?;
    let verb = if old.is_some() {
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
    if let Some(st) = old_stat {
        msg.push_str(&links_note(st));
    }
    Ok(msg)
}

/// The existing file `place` names, read (as `take` says, never more than its cap and one
/// byte) through a fd opened with `O_NOFOLLOW` in its directory fd, and its metadata; `None`
/// when it does not exist.
fn open_old(place: &InDir, given: &str, take: Take) -> Result<Option<(Vec<u8>, Stat)>, String> {
    let fd = match rustix::fs::openat(
        &place.dir,
        &place.name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(rustix::io::Errno::LOOP) => {
            return Err(format!(
                "{given} is (or just became) a symbolic link: refusing to write through it"
            ));
        }
        Err(rustix::io::Errno::NXIO) => {
            // A unix socket: named as what it is, like a FIFO or a device.
            if let Ok(st) = rustix::fs::statat(
                &place.dir,
                &place.name,
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            ) {
                crate::confine::regular_stat(given, &st)?;
            }
            return Err(format!(
                "{given}: {}",
                std::io::Error::from(rustix::io::Errno::NXIO)
            ));
        }
        Err(e) => return Err(format!("{given}: {}", std::io::Error::from(e))),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| format!("{given}: {}", std::io::Error::from(e)))?;
    crate::confine::regular_stat(given, &st)?;
    let size = u64::try_from(st.st_size).unwrap_or(0);
    let cap = match take {
        Take::Head(n) => n,
        Take::AtMost(max) => {
            // The size of the file opened (no race with the name), before any read.
            if size > max {
                return Err(too_big(given, Some(size), max));
            }
            max
        }
    };
    // At most one byte past the cap: a file growing meanwhile cannot make it more.
    let mut data = Vec::with_capacity(usize::try_from(size.min(cap)).unwrap_or(0));
    fs::File::from(fd)
        .take(cap.saturating_add(1))
        .read_to_end(&mut data)
        .map_err(|e| format!("{given}: {e}"))?;
    if let Take::AtMost(max) = take
        && data.len() as u64 > max
    {
        return Err(too_big(given, None, max));
    }
    if let Take::Head(n) = take {
        data.truncate(usize::try_from(n).unwrap_or(usize::MAX));
    }
    Ok(Some((data, st)))
}

/// How much of an existing file [`open_old`] reads.
#[derive(Clone, Copy)]
enum Take {
    /// Its first bytes only (Write looks for a BOM and the first line break).
    Head(u64),
    /// All of it, refused when it is over this many bytes (Edit).
    AtMost(u64),
}

/// Bytes of an existing file Write reads to keep its BOM and CRLF line endings (a first
/// line break further in is not looked for).
const WRITE_HEAD: u64 = 1024 * 1024;

/// The sentence refusing a file over Edit's limit (`size`: as `fstat` gave it; `None`: it
/// was within the limit then, and grew past it while read).
fn too_big(given: &str, size: Option<u64>, max: u64) -> String {
    match size {
        Some(size) => format!(
            "{given} is {size} bytes, over the {max} bytes Edit rewrites; use Bash (sed) or Write"
        ),
        None => format!(
            "{given} grew past the {max} bytes Edit rewrites while it was read; use Bash (sed) or Write"
        ),
    }
}

/// The note added to a result when the replaced file had other hard links: the replacement
/// is a new file, so they keep the old content.
fn links_note(st: &Stat) -> String {
    if st.st_nlink > 1 {
        format!(
            "; note: the file had {} hard links: it was replaced by a new file, so its other links keep the old content",
            st.st_nlink
        )
    } else {
        String::new()
    }
}

/// Edit's arguments, checked.
pub(crate) struct EditArgs<'a> {
    /// The path as given.
    pub(crate) given: &'a str,
    old: &'a str,
    new: &'a str,
    replace_all: bool,
}

/// Parses and checks Edit's arguments (`old` not empty, `old != new`).
pub(crate) fn edit_args(map: &Map<String, Value>) -> Result<EditArgs<'_>, String> {
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
    Ok(EditArgs {
        given,
        old,
        new,
        replace_all,
    })
}

/// The edited text of `data`: the new bytes, how many occurrences were replaced, and whether
/// they matched with the file's CRLF line endings.
///
/// # Errors
/// `old` not found, or found several times without `replace_all`.
pub(crate) fn apply_edit(data: &[u8], e: &EditArgs<'_>) -> Result<(Vec<u8>, usize, bool), String> {
    let given = e.given;
    let mut old_b = e.old.as_bytes().to_vec();
    let mut new_b = e.new.as_bytes().to_vec();
    let mut count = count_matches(data, &old_b);
    let mut crlf = false;
    if count == 0 && e.old.contains('\n') && uses_crlf(data) {
        let o = content_crlf(e.old.as_bytes());
        let c = count_matches(data, &o);
        if c > 0 {
            old_b = o;
            new_b = content_crlf(e.new.as_bytes());
            count = c;
            crlf = true;
        }
    }
    if count == 0 {
        return Err(format!(
            "Edit: `old` was not found in {given}; it must match the file exactly (whitespace and indentation included): Read the file and copy the text"
        ));
    }
    if count > 1 && !e.replace_all {
        return Err(format!(
            "Edit: `old` matches {count} places in {given}; give more surrounding text so that it matches once, or set replace_all to replace all {count}"
        ));
    }
    let out = replace(
        data,
        &old_b,
        &new_b,
        if e.replace_all { usize::MAX } else { 1 },
    );
    Ok((out, count, crlf))
}

fn do_edit(inner: &Inner, map: &Map<String, Value>) -> Result<String, String> {
    let e = edit_args(map)?;
    let given = e.given;
    let path = inner
        .root
        .existing(given)
        .map_err(|e| format!("Edit: {e}"))?;
    if path.is_dir() {
        return Err(format!("Edit: {given} is a directory, not a file"));
    }
    let place = inner
        .root
        .open_parent(given, &path, false)
        .map_err(|e| format!("Edit: {e}"))?;
    let Some((data, st)) = open_old(&place, given, Take::AtMost(inner.limits.edit_max_file))
        .map_err(|e| format!("Edit: {e}"))?
    else {
        return Err(format!("Edit: {given} does not exist"));
    };
    let (out, count, crlf) = apply_edit(&data, &e)?;
    replace_file(&place, &out, Some(&st)).map_err(|e| format!("Edit: {given}: {e}"))?;
    let mut msg = format!(
        "Edit: replaced {count} occurrence{} in {}",
        if count == 1 { "" } else { "s" },
        path.display()
    );
    if crlf {
        msg.push_str(" (matched with the file's CRLF line endings)");
    }
    msg.push_str(&links_note(&st));
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

/// Replaces the file `place` names atomically, all within its directory fd: a temporary file
/// created there with `O_CREAT|O_EXCL|O_NOFOLLOW`, given the old file's mode (and owner, when
/// the process may: root keeps a file's uid/gid) or [`NEW_FILE_MODE`], fsync, `renameat`
/// over the name, fsync of the directory. The temporary file is removed on failure.
fn replace_file(place: &InDir, bytes: &[u8], old: Option<&Stat>) -> std::io::Result<()> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let mode = old.map_or(NEW_FILE_MODE, |st| st.st_mode & 0o7777);
    let mut attempt = 0;
    let (tmp_name, fd) = loop {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!(
            ".awf-write-{}-{}-{nanos:x}.tmp",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        match rustix::fs::openat(
            &place.dir,
            name.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        ) {
            Ok(fd) => break (name, fd),
            Err(rustix::io::Errno::EXIST) if attempt < 16 => attempt += 1,
            Err(e) => return Err(e.into()),
        }
    };
    let result = (|| -> std::io::Result<()> {
        let mut file = fs::File::from(fd);
        file.write_all(bytes)?;
        if let Some(st) = old {
            let (uid, gid) = (st.st_uid, st.st_gid);
            // Only a privileged process (or one in the file's group) may; else the new file
            // is the caller's, as any editor's replacement would be.
            let _ = rustix::fs::fchown(
                &file,
                Some(rustix::fs::Uid::from_raw(uid)),
                Some(rustix::fs::Gid::from_raw(gid)),
            );
        }
        rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))?;
        file.sync_all()?;
        rustix::fs::renameat(&place.dir, tmp_name.as_str(), &place.dir, &place.name)?;
        Ok(())
    })();
    if let Err(e) = result {
        let _ = rustix::fs::unlinkat(&place.dir, tmp_name.as_str(), rustix::fs::AtFlags::empty());
        return Err(e);
    }
    let _ = rustix::fs::fsync(&place.dir);
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
