//! Grep: a regex over the files of a tree, on ripgrep's walker.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::BufReader;
use std::io::Cursor;
use std::io::Read as _;
use std::path::Path;

use awf_domain::ports::tools::ToolOutput;
use serde_json::Map;
use serde_json::Value;

use crate::Inner;
use crate::args::Args;
use crate::lines;

/// Bytes of one line that are searched (the rest of a longer line is not).
const LINE_SEARCHED: usize = 1024 * 1024;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Content,
    Files,
    Count,
}

pub(crate) fn run(inner: &Inner, map: &Map<String, Value>) -> ToolOutput {
    match grep(inner, map) {
        Ok(t) => ToolOutput::text(t),
        Err(e) => ToolOutput::error(e),
    }
}

/// Output being built, within the entry cap and the byte budget.
struct Out {
    text: String,
    entries: usize,
    max_entries: usize,
    budget: usize,
    full: bool,
}

impl Out {
    /// Adds one entry; false once the output is full.
    fn push(&mut self, entry: &str) -> bool {
        if self.entries >= self.max_entries || self.text.len() + entry.len() + 1 > self.budget {
            self.full = true;
            return false;
        }
        self.text.push_str(entry);
        self.text.push('\n');
        self.entries += 1;
        true
    }
}

fn grep(inner: &Inner, map: &Map<String, Value>) -> Result<String, String> {
    let a = Args::new("Grep", map);
    let pattern = a.str(&["pattern"])?;
    let path = a.opt_str(&["path"])?.unwrap_or(".");
    let glob = a.opt_str(&["glob"])?;
    let ftype = a.opt_str(&["type"])?;
    let mode = match a.opt_str(&["output_mode"])? {
        None | Some("files_with_matches") => Mode::Files,
        Some("content") => Mode::Content,
        Some("count") => Mode::Count,
        Some(other) => {
            return Err(format!(
                "Grep: output_mode must be one of content, files_with_matches, count; got {other:?}"
            ));
        }
    };
    let icase = a.opt_bool(&["case_insensitive", "-i"])?.unwrap_or(false);
    let numbers = a.opt_bool(&["-n"])?.unwrap_or(true);
    // As the schema says (integers, `minimum` 0 for the context lines, 1 for head_limit):
    // a string, a fraction or a number under the minimum is refused saying so.
    let lines = "a number of context lines";
    let around = a
        .opt_int_at_least(&["-C", "context"], 0, lines)?
        .unwrap_or(0);
    let as_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    let ctx = Context {
        before: as_usize(a.opt_int_at_least(&["-B"], 0, lines)?.unwrap_or(around)).min(100),
        after: as_usize(a.opt_int_at_least(&["-A"], 0, lines)?.unwrap_or(around)).min(100),
    };
    let lim = &inner.limits;
    let head_limit = match a.opt_int_at_least(&["head_limit"], 1, "the most entries to return")? {
        None => lim.grep_results,
        Some(n) => as_usize(n).min(lim.grep_results),
    };
    let re = regex::bytes::RegexBuilder::new(pattern)
        .case_insensitive(icase)
        .build()
        .map_err(|e| format!("Grep: invalid regular expression: {e}"))?;
    let target = inner
        .root
        .existing(path)
        .map_err(|e| format!("Grep: {e}"))?;
    let mut out = Out {
        text: String::new(),
        entries: 0,
        max_entries: head_limit,
        budget: lim.list_budget,
        full: false,
    };
    if target.is_file() {
        search(inner, &target, &re, mode, numbers, ctx, &mut out);
    } else {
        let mut walk = ignore::WalkBuilder::new(&target);
        walk.hidden(true)
            .git_ignore(true)
            .git_exclude(true)
            .git_global(false)
            .require_git(false)
            .follow_links(false)
            .sort_by_file_name(std::cmp::Ord::cmp);
        if let Some(g) = glob {
            let mut ob = ignore::overrides::OverrideBuilder::new(&target);
            for part in split_globs(g) {
                ob.add(part)
                    .map_err(|e| format!("Grep: invalid glob {g:?}: {e}"))?;
            }
            let ov = ob
                .build()
                .map_err(|e| format!("Grep: invalid glob {g:?}: {e}"))?;
            walk.overrides(ov);
        }
        if let Some(t) = ftype {
            let mut tb = ignore::types::TypesBuilder::new();
            tb.add_defaults();
            if !tb.definitions().iter().any(|d| d.name() == t) {
                return Err(format!(
                    "Grep: unknown file type {t:?} (ripgrep's names: rust, py, js, ts, go, md, …)"
                ));
            }
            tb.select(t);
            let types = tb.build().map_err(|e| format!("Grep: type {t:?}: {e}"))?;
            walk.types(types);
        }
        for entry in walk.build().flatten() {
            if out.full {
                break;
            }
            if !entry.file_type().is_some_and(|ft| ft.is_file()) {
                continue;
            }
            search(inner, entry.path(), &re, mode, numbers, ctx, &mut out);
        }
    }
    if out.entries == 0 && !out.full {
        return Ok("No matches found".to_owned());
    }
    let mut text = out.text;
    if out.full {
        let _ = writeln!(
            text,
            "[awf: results cut at {} entries; refine the pattern, or use path, glob, type or head_limit]",
            out.entries
        );
    }
    Ok(text)
}

/// `a,b` and `{a,b}` lists are left to the glob syntax; only top-level whitespace separates.
fn split_globs(g: &str) -> impl Iterator<Item = &str> {
    g.split_whitespace()
}

/// Context lines around each match in `content` mode (ripgrep's `-B`/`-A`).
#[derive(Clone, Copy)]
struct Context {
    before: usize,
    after: usize,
}

/// Searches one file; binary files (a NUL in the first 8 KiB) and unreadable ones are
/// skipped.
fn search(
    inner: &Inner,
    path: &Path,
    re: &regex::bytes::Regex,
    mode: Mode,
    numbers: bool,
    ctx: Context,
    out: &mut Out,
) {
    let line_chars = inner.limits.grep_line_chars;
    let root = &inner.root;
    // Opened beneath the root fd: a file swapped for a link to outside is skipped, not read.
    let Ok(mut file) = root.open_read(&path.to_string_lossy(), path) else {
        return;
    };
    let Ok(head) = lines::sniff(&mut file) else {
        return;
    };
    if lines::is_binary(&head) {
        return;
    }
    let shown = path.to_string_lossy();
    let reader = BufReader::with_capacity(64 * 1024, Cursor::new(head).chain(file));
    let mut lr = lines::LineReader::new(reader, LINE_SEARCHED);
    let entry = |no: u64, sep: char, t: &str| {
        if numbers {
            format!("{shown}{sep}{no}{sep}{t}")
        } else {
            format!("{shown}{sep}{t}")
        }
    };
    let render = |bytes: &[u8], cut_in: bool| {
        let (t, cut, _) = lines::text(bytes, line_chars, cut_in, &inner.masker);
        if cut {
            format!("{t}… [line truncated]")
        } else {
            t
        }
    };
    let mut ring: VecDeque<(u64, String)> = VecDeque::new();
    let mut after_left = 0usize;
    let mut last_printed = 0u64;
    let mut line_no = 0u64;
    let mut count = 0u64;
    while let Ok(Some(line)) = lr.next_line() {
        line_no += 1;
        let matched = re.is_match(line.bytes);
        if matched {
            count += 1;
        }
        match mode {
            Mode::Files if matched => break,
            Mode::Files | Mode::Count => continue,
            Mode::Content => {}
        }
        if matched {
            let first = ring.front().map_or(line_no, |(n, _)| *n);
            let with_ctx = ctx.before > 0 || ctx.after > 0;
            if with_ctx && last_printed > 0 && first > last_printed + 1 && !out.push("--") {
                return;
            }
            for (n, t) in ring.drain(..) {
                if !out.push(&entry(n, '-', &t)) {
                    return;
                }
            }
            if !out.push(&entry(line_no, ':', &render(line.bytes, line.cut))) {
                return;
            }
            last_printed = line_no;
            after_left = ctx.after;
        } else if after_left > 0 {
            if !out.push(&entry(line_no, '-', &render(line.bytes, line.cut))) {
                return;
            }
            last_printed = line_no;
            after_left -= 1;
        } else if ctx.before > 0 {
            ring.push_back((line_no, render(line.bytes, line.cut)));
            if ring.len() > ctx.before {
                ring.pop_front();
            }
        }
    }
    if count == 0 {
        return;
    }
    match mode {
        Mode::Files => {
            out.push(&shown);
        }
        Mode::Count => {
            out.push(&format!("{shown}:{count}"));
        }
        Mode::Content => {}
    }
}
