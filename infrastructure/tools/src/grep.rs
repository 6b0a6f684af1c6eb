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

/// Bytes of one line held in memory: a line up to this long is searched with the regex; a
/// longer one is searched whole in a stream ([`Stream`]), only its first bytes kept (for
/// `content` mode, which shows it cut).
const LINE_HELD: usize = 1024 * 1024;

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
    /// Lines shown cut (longer than [`crate::Limits::grep_line_chars`]).
    cut_lines: usize,
    /// Notes for the end: files whose long lines could not be searched whole.
    notes: Vec<String>,
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
        cut_lines: 0,
        notes: Vec::new(),
    };
    let mut matcher = Matcher {
        re: &re,
        pattern,
        icase,
        stream: None,
    };
    if target.is_file() {
        search(inner, &target, &mut matcher, mode, numbers, ctx, &mut out);
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
            search(
                inner,
                entry.path(),
                &mut matcher,
                mode,
                numbers,
                ctx,
                &mut out,
            );
        }
    }
    if out.entries == 0 && !out.full && out.notes.is_empty() {
        return Ok("No matches found".to_owned());
    }
    let mut text = out.text;
    if out.entries == 0 && !out.full {
        text.push_str("No matches found\n");
    }
    if out.full {
        let _ = writeln!(
            text,
            "[awf: results cut at {} entries; refine the pattern, or use path, glob, type or head_limit]",
            out.entries
        );
    }
    if out.cut_lines > 0 {
        let _ = writeln!(
            text,
            "[awf: {} line(s) longer than {} characters were cut]",
            out.cut_lines, lim.grep_line_chars
        );
    }
    for note in &out.notes {
        let _ = writeln!(text, "[awf: {note}]");
    }
    Ok(text)
}

/// The search of one Grep call: the regex for lines held whole, and the lazy DFA of the same
/// pattern (built at the first longer line) that searches a line in a stream, a byte at a
/// time, in constant memory, however long it is.
struct Matcher<'a> {
    re: &'a regex::bytes::Regex,
    pattern: &'a str,
    icase: bool,
    /// The lazy DFA and its cache, or why there is none.
    stream: Option<Result<(hybrid::dfa::DFA, hybrid::dfa::Cache), String>>,
}

use regex_automata::hybrid;

impl Matcher<'_> {
    /// The streaming search of a line, started (it is then fed the line's bytes); `Err`
    /// says why the pattern cannot be searched so.
    fn start(&mut self) -> Result<Stream, String> {
        let (pattern, icase) = (self.pattern, self.icase);
        let built = self.stream.get_or_insert_with(|| {
            let dfa = hybrid::dfa::DFA::builder()
                // As regex::bytes: Unicode on, and a match may cover invalid UTF-8.
                .syntax(
                    regex_automata::util::syntax::Config::new()
                        .case_insensitive(icase)
                        .utf8(false),
                )
                .thompson(regex_automata::nfa::thompson::Config::new().utf8(false))
                // A Unicode `\b` is searched as long as the text is ASCII (the DFA stops
                // at the first other byte, then the line is reported, not searched on).
                .configure(hybrid::dfa::DFA::config().unicode_word_boundary(true))
                .build(pattern)
                .map_err(|e| e.to_string())?;
            let cache = dfa.create_cache();
            Ok((dfa, cache))
        });
        let (dfa, cache) = built.as_mut().map_err(|e| e.clone())?;
        let start = regex_automata::util::start::Config::new()
            .anchored(regex_automata::Anchored::No)
            .look_behind(None);
        let sid = dfa.start_state(cache, &start).map_err(|e| e.to_string())?;
        Ok(Stream::Running(sid))
    }

    /// Why a long line could not be searched whole, for the note.
    fn why_partly(&self) -> String {
        match &self.stream {
            Some(Err(e)) => format!("the pattern cannot be searched in a stream: {e}"),
            _ => "a Unicode word boundary `\\b` met non-ASCII text; `(?-u:\\b)` can be searched so"
                .to_owned(),
        }
    }

    /// Feeds `bytes` of the line to `s`.
    fn feed(&mut self, s: &mut Stream, bytes: &[u8]) {
        let Stream::Running(mut sid) = *s else {
            return;
        };
        let Some(Ok((dfa, cache))) = self.stream.as_mut() else {
            *s = Stream::Failed;
            return;
        };
        for &b in bytes {
            sid = match dfa.next_state(cache, sid, b) {
                Ok(next) => next,
                Err(_) => {
                    *s = Stream::Failed;
                    return;
                }
            };
            if sid.is_tagged() {
                if sid.is_match() {
                    *s = Stream::Matched;
                    return;
                }
                if sid.is_dead() {
                    *s = Stream::Dead;
                    return;
                }
                if sid.is_quit() {
                    *s = Stream::Failed;
                    return;
                }
            }
        }
        *s = Stream::Running(sid);
    }

    /// Whether the line fed to `s` matched: `None` when it could not be searched to its end.
    fn finish(&mut self, s: Stream) -> Option<bool> {
        match s {
            Stream::Matched => Some(true),
            Stream::Dead => Some(false),
            Stream::Failed => None,
            Stream::Running(sid) => {
                let Some(Ok((dfa, cache))) = self.stream.as_mut() else {
                    return None;
                };
                let eoi = dfa.next_eoi_state(cache, sid).ok()?;
                if eoi.is_quit() {
                    return None;
                }
                Some(eoi.is_match())
            }
        }
    }
}

/// Where a streaming search of a line stands.
#[derive(Clone, Copy)]
enum Stream {
    /// Searching, in this state.
    Running(hybrid::LazyStateID),
    /// A match was found (the rest of the line is not looked at).
    Matched,
    /// No match can follow.
    Dead,
    /// The search stopped: a byte the DFA cannot decide on (non-ASCII text for a Unicode
    /// `\b`), or a DFA error.
    Failed,
}

/// One line as Grep read it: at most [`LINE_HELD`] bytes of it kept.
struct Scanned<'a> {
    bytes: &'a [u8],
    /// The line was longer than the bytes kept.
    cut: bool,
    /// It matched (searched whole).
    matched: bool,
    /// It is longer than [`LINE_HELD`] and could not be searched past them (`matched` says
    /// whether those matched).
    partly: bool,
}

/// Reads lines as [`lines::LineReader`] does (a `\r` before the `\n` dropped), deciding
/// whether each matches: a line held whole by the regex, a longer one by the streaming
/// search over all its bytes, of which only the first [`LINE_HELD`] are kept.
struct Scanner<R> {
    r: R,
    buf: Vec<u8>,
}

impl<R: std::io::BufRead> Scanner<R> {
    fn next(&mut self, m: &mut Matcher<'_>) -> std::io::Result<Option<Scanned<'_>>> {
        self.buf.clear();
        let mut any = false;
        // The streaming search, once the line is longer than the bytes held.
        let mut stream: Option<Result<Stream, String>> = None;
        // A `\r` that ended the bytes fed so far: dropped if the line ends right after it.
        let mut held_cr = false;
        loop {
            let avail = match self.r.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if avail.is_empty() {
                if !any {
                    return Ok(None);
                }
                break;
            }
            any = true;
            let (take, done) = match memchr::memchr(b'\n', avail) {
                Some(i) => (i, true),
                None => (avail.len(), false),
            };
            let mut rest = &avail[..take];
            if stream.is_none() {
                let room = LINE_HELD - self.buf.len();
                self.buf.extend_from_slice(&rest[..take.min(room)]);
                if take > room {
                    rest = &rest[room..];
                    let mut started = m.start();
                    if let Ok(s) = started.as_mut() {
                        m.feed(s, &self.buf);
                    }
                    stream = Some(started);
                } else {
                    rest = &[];
                }
            }
            if let Some(Ok(s)) = stream.as_mut()
                && !rest.is_empty()
            {
                if held_cr {
                    m.feed(s, b"\r");
                }
                held_cr = rest.last() == Some(&b'\r');
                let fed = if held_cr {
                    &rest[..rest.len() - 1]
                } else {
                    rest
                };
                m.feed(s, fed);
            }
            let used = if done { take + 1 } else { take };
            self.r.consume(used);
            if done {
                break;
            }
        }
        Ok(Some(match stream {
            None => {
                if self.buf.last() == Some(&b'\r') {
                    self.buf.pop();
                }
                Scanned {
                    matched: m.re.is_match(&self.buf),
                    bytes: &self.buf,
                    cut: false,
                    partly: false,
                }
            }
            Some(started) => {
                let whole = started.ok().and_then(|s| m.finish(s));
                Scanned {
                    matched: whole.unwrap_or_else(|| m.re.is_match(&self.buf)),
                    bytes: &self.buf,
                    cut: true,
                    partly: whole.is_none(),
                }
            }
        }))
    }
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
    m: &mut Matcher<'_>,
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
    let mut scanner = Scanner {
        r: reader,
        buf: Vec::new(),
    };
    let entry = |no: u64, sep: char, t: &str| {
        if numbers {
            format!("{shown}{sep}{no}{sep}{t}")
        } else {
            format!("{shown}{sep}{t}")
        }
    };
    // The line as shown, and whether it was cut.
    let render = |bytes: &[u8], cut_in: bool| {
        let (t, cut, _) = lines::text(bytes, line_chars, cut_in, &inner.masker);
        if cut {
            (format!("{t}… [line truncated]"), true)
        } else {
            (t, false)
        }
    };
    // Pushes one line's entry, counting it when shown cut; false once the output is full.
    let push = |out: &mut Out, no: u64, sep: char, (t, cut): (String, bool)| {
        let pushed = out.push(&entry(no, sep, &t));
        if pushed && cut {
            out.cut_lines += 1;
        }
        pushed
    };
    let mut ring: VecDeque<(u64, (String, bool))> = VecDeque::new();
    let mut after_left = 0usize;
    let mut last_printed = 0u64;
    let mut line_no = 0u64;
    let mut count = 0u64;
    // Lines longer than LINE_HELD that could not be searched whole.
    let mut partly = 0u64;
    while let Ok(Some(line)) = scanner.next(m) {
        line_no += 1;
        let matched = line.matched;
        partly += u64::from(line.partly);
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
            for (n, shown_line) in ring.drain(..) {
                if !push(out, n, '-', shown_line) {
                    return;
                }
            }
            if !push(out, line_no, ':', render(line.bytes, line.cut)) {
                return;
            }
            last_printed = line_no;
            after_left = ctx.after;
        } else if after_left > 0 {
            if !push(out, line_no, '-', render(line.bytes, line.cut)) {
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
    // Never silent: a line that could not be searched whole is said so (a file listed for a
    // match needs no note).
    if partly > 0 && !(mode == Mode::Files && count > 0) {
        out.notes.push(format!(
            "{shown}: {partly} line(s) longer than {LINE_HELD} bytes could be searched in their first {LINE_HELD} bytes only ({}); search the file with Bash (grep)",
            m.why_partly()
        ));
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
