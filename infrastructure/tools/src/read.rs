//! Read: a file's lines, numbered `cat -n` style, within a byte budget.
//!
//! Paging: a read that stops before the end of a file leaves a [`Mark`] (the file's identity,
//! the next line's number and byte offset), so the next page of the same unchanged file
//! (`offset` at or after the mark) starts there instead of counting lines from the start.

use std::fmt::Write as _;
use std::io::BufReader;
use std::io::Cursor;
use std::io::Read as _;
use std::io::Seek as _;
use std::os::unix::fs::MetadataExt as _;

use awf_domain::ports::tools::ToolOutput;
use serde_json::Map;
use serde_json::Value;

use crate::Inner;
use crate::args::Args;
use crate::lines;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// How many marks are kept (the files paged through most recently).
const MARKS: usize = 8;

/// A file's identity as `stat` gives it: a write (Write and Edit replace the file: a new
/// inode), a truncation, a touch or an in-place rewrite (its change time) makes a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileKey {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
    /// Changed by every write and by `utime` itself: a file rewritten in place with its
    /// size and modification time put back is still a new file here.
    ctime: i64,
    ctime_nsec: i64,
}

impl FileKey {
    fn of(m: &std::fs::Metadata) -> Self {
        Self {
            dev: m.dev(),
            ino: m.ino(),
            size: m.len(),
            mtime: m.mtime(),
            mtime_nsec: m.mtime_nsec(),
            ctime: m.ctime(),
            ctime_nsec: m.ctime_nsec(),
        }
    }
}

/// Where a read of a file stopped: `line` lines lie wholly before byte `byte`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mark {
    key: FileKey,
    line: u64,
    byte: u64,
}

/// The marks of the files read most recently, newest last.
pub(crate) type Marks = std::sync::Arc<std::sync::Mutex<Vec<Mark>>>;

pub(crate) fn run(inner: &Inner, map: &Map<String, Value>) -> ToolOutput {
    match read(inner, map) {
        Ok(text) => ToolOutput::text(text),
        Err(e) => ToolOutput::error(e),
    }
}

/// Read's arguments: the path as given, the 1-based first line, the line count.
pub(crate) fn args<'a>(
    inner: &Inner,
    map: &'a Map<String, Value>,
) -> Result<(&'a str, u64, u64), String> {
    let a = Args::new("Read", map);
    let given = a.str(&["path", "file_path"])?;
    // As the schema says (`"type": "integer", "minimum": 1` both): 0, -1 or "2" is refused
    // saying so, never read as something else.
    let offset = a
        .opt_int_at_least(&["offset"], 1, "the 1-based number of the first line")?
        .unwrap_or(1);
    let limit = a
        .opt_int_at_least(&["limit"], 1, "the number of lines to show")?
        .unwrap_or(inner.limits.read_lines as u64);
    Ok((given, offset, limit))
}

fn read(inner: &Inner, map: &Map<String, Value>) -> Result<String, String> {
    let (given, offset, limit) = args(inner, map)?;
    let path = inner
        .root
        .existing(given)
        .map_err(|e| format!("Read: {e}"))?;
    if path.is_dir() {
        return Err(format!(
            "Read: {given} is a directory, not a file (list it with Glob, or Bash `ls`)"
        ));
    }
    // Opened beneath the root fd by the kernel: a swap for a symbolic link to outside after
    // the check above is refused, never followed.
    let mut file = inner
        .root
        .open_read(given, &path)
        .map_err(|e| format!("Read: {e}"))?;
    let key = file.metadata().ok().map(|m| FileKey::of(&m));
    let lock = || {
        inner
            .marks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    // The latest mark of this very file at or before the first line asked for.
    let at = key.and_then(|k| {
        lock()
            .iter()
            .rev()
            .find(|m| m.key == k && m.line < offset)
            .copied()
    });
    let at = at.filter(|m| file.seek(std::io::SeekFrom::Start(m.byte)).is_ok());
    let (out, next) = render_at(
        inner,
        given,
        offset,
        limit,
        file,
        at.map(|m| (m.line, m.byte)),
    )?;
    if let (Some(key), Some((line, byte))) = (key, next) {
        let mut marks = lock();
        marks.retain(|m| m.key != key || m.line != line);
        if marks.len() >= MARKS {
            marks.remove(0);
        }
        marks.push(Mark { key, line, byte });
    }
    Ok(out)
}

/// Read's output for the text `file` yields (a file on disk, or an editor's buffer): lines
/// `offset..offset+limit` numbered `cat -n` style, within the byte budget, with its trailers.
pub(crate) fn render(
    inner: &Inner,
    given: &str,
    offset: u64,
    limit: u64,
    file: impl std::io::Read,
) -> Result<String, String> {
    render_at(inner, given, offset, limit, file, None).map(|(out, _)| out)
}

/// [`render`] of `file`, which starts at the beginning of the file (`at: None`: it is sniffed
/// for binary content and a BOM) or at byte `at.1`, where `at.0` lines lie before (a mark of
/// an earlier read, which already sniffed it). Gives also where the shown lines ended, when
/// lines are left after them: (lines before, byte offset) of the next one.
fn render_at(
    inner: &Inner,
    given: &str,
    offset: u64,
    limit: u64,
    mut file: impl std::io::Read,
    at: Option<(u64, u64)>,
) -> Result<(String, Option<(u64, u64)>), String> {
    let lim = &inner.limits;
    let (reader, first_line, base): (Box<dyn std::io::Read + '_>, u64, u64) = match at {
        Some((line, byte)) => (Box::new(file), line, byte),
        None => {
            let mut head = lines::sniff(&mut file).map_err(|e| format!("Read: {given}: {e}"))?;
            if lines::is_binary(&head) {
                return Err(format!(
                    "Read: {given} is a binary file (it has a NUL byte in its first 8 KiB); it is not shown as text"
                ));
            }
            let mut base = 0;
            if head.starts_with(BOM) {
                head.drain(..BOM.len());
                base = BOM.len() as u64;
            }
            (Box::new(Cursor::new(head).chain(file)), 0, base)
        }
    };
    let reader = BufReader::with_capacity(64 * 1024, reader);
    // Enough bytes for `read_line_chars` characters of up to 4 bytes each.
    // Room past the cut for the longest secret, so that one straddling it is masked whole.
    let mut lr = lines::LineReader::new(
        reader,
        lim.read_line_chars
            .saturating_mul(4)
            .saturating_add(inner.masker.longest()),
    );

    // The lines before `offset` are counted, never copied.
    let mut line_no: u64 = first_line
        + lr.skip_lines(offset - 1 - first_line)
            .map_err(|e| format!("Read: {given}: {e}"))?;
    let mut next = None;
    // Room for the budget and the trailers, allocated once.
    let mut out = String::with_capacity(lim.read_budget.saturating_add(256).min(1 << 20));
    let mut shown: u64 = 0;
    let mut cut_lines = 0usize;
    let mut invalid = false;
    let mut more = false;
    let mut budget_hit = false;
    loop {
        let before = base + lr.position();
        let Some(line) = lr.next_line().map_err(|e| format!("Read: {given}: {e}"))? else {
            break;
        };
        line_no += 1;
        if shown == limit {
            more = true;
            next = Some((line_no - 1, before));
            break;
        }
        // Each entry is written in place and taken back if it does not fit the budget.
        let start = out.len();
        lines::push_line_no(&mut out, line_no);
        out.push('\t');
        let (cut, bad) = lines::push_text(
            &mut out,
            line.bytes,
            lim.read_line_chars,
            line.cut,
            &inner.masker,
        );
        if cut {
            out.push_str("… [line truncated]");
        }
        out.push('\n');
        if out.len() > lim.read_budget {
            out.truncate(start);
            budget_hit = true;
            next = Some((line_no - 1, before));
            break;
        }
        invalid |= bad;
        if cut {
            cut_lines += 1;
        }
        shown += 1;
    }

    let last = offset + shown.saturating_sub(1);
    if line_no == 0 {
        out.push_str("[awf: the file is empty]\n");
    } else if shown == 0 && !budget_hit {
        let _ = writeln!(
            out,
            "[awf: the file has {line_no} lines; offset {offset} is past its end]"
        );
    }
    if budget_hit {
        let _ = writeln!(
            out,
            "[awf: output cut at {} bytes after line {last}; read on with offset={}]",
            lim.read_budget,
            last + 1
        );
    } else if more {
        let _ = writeln!(
            out,
            "[awf: showed lines {offset}-{last}; the file has more lines: read on with offset={}]",
            last + 1
        );
    }
    if cut_lines > 0 {
        let _ = writeln!(
            out,
            "[awf: {cut_lines} line(s) longer than {} characters were cut]",
            lim.read_line_chars
        );
    }
    if invalid {
        out.push_str("[awf: the file is not valid UTF-8; invalid bytes are shown as U+FFFD]\n");
    }
    Ok((out, next))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_page_that_stops_early_leaves_a_mark_at_the_next_line_and_the_next_page_uses_it() {
        let tmp = tempfile::tempdir().unwrap();
        let text: String = (1..=50).map(|i| format!("l{i}\n")).collect();
        std::fs::write(tmp.path().join("f.txt"), format!("\u{feff}{text}")).unwrap();
        let tools = crate::BuiltinTools::new(tmp.path()).unwrap();
        let inner = &tools.inner;
        let read = |args: serde_json::Value| super::read(inner, args.as_object().unwrap()).unwrap();
        read(json!({"path": "f.txt", "limit": 10}));
        let marks = inner.marks.lock().unwrap().clone();
        // 10 lines lie before line 11, which starts after the BOM and "l1\n".."l9\n", "l10\n".
        let byte = 3
            + (1..=10)
                .map(|i| format!("l{i}\n").len() as u64)
                .sum::<u64>();
        assert_eq!(
            marks.iter().map(|m| (m.line, m.byte)).collect::<Vec<_>>(),
            [(10, byte)]
        );
        // The next page starts at the mark (and leaves its own); reading the whole file
        // again from the start leaves none (nothing is left after it).
        let out = read(json!({"path": "f.txt", "offset": 11, "limit": 5}));
        assert!(out.starts_with("    11\tl11\n"), "{out}");
        let marks = inner.marks.lock().unwrap().clone();
        assert_eq!(marks.last().map(|m| m.line), Some(15));
        let before = marks.len();
        read(json!({"path": "f.txt"}));
        assert_eq!(inner.marks.lock().unwrap().len(), before);
    }

    /// A file rewritten in place, same size, its modification time put back (`utime`), is
    /// read afresh: the next page does not start at the old mark (a breaker's stale page).
    #[test]
    fn a_file_rewritten_in_place_with_its_mtime_restored_is_not_read_from_an_old_mark() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f.txt");
        let lines = |from: usize, n: usize| -> String {
            (from..from + n).map(|i| format!("line {i:04}\n")).collect()
        };
        std::fs::write(&path, lines(0, 40)).unwrap();
        let tools = crate::BuiltinTools::new(tmp.path()).unwrap();
        let inner = &tools.inner;
        let read = |args: serde_json::Value| super::read(inner, args.as_object().unwrap()).unwrap();
        read(json!({"path": "f.txt", "limit": 10}));
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        // Same size (400 bytes), five short lines first, written in place (same inode),
        // mtime restored: the old mark's byte 100 is now the start of line 15.
        let new = format!("{}{}", "a\n".repeat(5), lines(1, 39));
        assert_eq!(new.len(), 400);
        {
            use std::io::Write as _;
            let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.write_all(new.as_bytes()).unwrap();
            f.set_modified(mtime).unwrap();
        }
        let out = read(json!({"path": "f.txt", "offset": 11, "limit": 1}));
        assert!(out.starts_with("    11\tline 0006\n"), "{out}");
    }
}
