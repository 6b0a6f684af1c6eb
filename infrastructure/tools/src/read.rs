//! Read: a file's lines, numbered `cat -n` style, within a byte budget.

use std::fmt::Write as _;
use std::io::BufReader;
use std::io::Cursor;
use std::io::Read as _;

use awf_domain::ports::tools::ToolOutput;
use serde_json::Map;
use serde_json::Value;

use crate::Inner;
use crate::args::Args;
use crate::lines;

const BOM: &[u8] = b"\xEF\xBB\xBF";

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
    let offset = a.opt_uint(&["offset"])?.unwrap_or(1).max(1);
    let limit = match a.opt_uint(&["limit"])? {
        None | Some(0) => inner.limits.read_lines as u64,
        Some(n) => n,
    };
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
    let file = inner
        .root
        .open_read(given, &path)
        .map_err(|e| format!("Read: {e}"))?;
    render(inner, given, offset, limit, file)
}

/// Read's output for the text `file` yields (a file on disk, or an editor's buffer): lines
/// `offset..offset+limit` numbered `cat -n` style, within the byte budget, with its trailers.
pub(crate) fn render(
    inner: &Inner,
    given: &str,
    offset: u64,
    limit: u64,
    mut file: impl std::io::Read,
) -> Result<String, String> {
    let lim = &inner.limits;
    let mut head = lines::sniff(&mut file).map_err(|e| format!("Read: {given}: {e}"))?;
    if lines::is_binary(&head) {
        return Err(format!(
            "Read: {given} is a binary file (it has a NUL byte in its first 8 KiB); it is not shown as text"
        ));
    }
    if head.starts_with(BOM) {
        head.drain(..BOM.len());
    }
    let reader = BufReader::with_capacity(64 * 1024, Cursor::new(head).chain(file));
    // Enough bytes for `read_line_chars` characters of up to 4 bytes each.
    // Room past the cut for the longest secret, so that one straddling it is masked whole.
    let mut lr = lines::LineReader::new(
        reader,
        lim.read_line_chars
            .saturating_mul(4)
            .saturating_add(inner.masker.longest()),
    );

    // The lines before `offset` are counted, never copied.
    let mut line_no: u64 = lr
        .skip_lines(offset - 1)
        .map_err(|e| format!("Read: {given}: {e}"))?;
    // Room for the budget and the trailers, allocated once.
    let mut out = String::with_capacity(lim.read_budget.saturating_add(256).min(1 << 20));
    let mut shown: u64 = 0;
    let mut cut_lines = 0usize;
    let mut invalid = false;
    let mut more = false;
    let mut budget_hit = false;
    while let Some(line) = lr.next_line().map_err(|e| format!("Read: {given}: {e}"))? {
        line_no += 1;
        if shown == limit {
            more = true;
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
    Ok(out)
}
