//! A light scanner over template text, run before parsing.
//!
//! It does two things in one pass over the `{{ … }}` actions, skipping string and character
//! literals and comments:
//!
//! * rewrites the "no-dot" namespace form (`{{inputs.x}}`, `{{states.s.Output}}`,
//!   `{{(loop).index1}}`) to the root form (`{{$.inputs.x}}`), so both forms read the same data
//!   and behave the same inside `range`/`with`, where the dot has moved;
//! * records which namespaces (and which states) the text mentions, so the renderer builds
//!   only the data the template can reach.
//!
//! Source: spec/workflow.md §2.3 (namespace accessor functions), decisions.md ("Template
//! namespaces … work both with and without the leading dot").

use std::borrow::Cow;

/// One of the eight template namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Namespace {
    Inputs,
    States,
    Workflow,
    Env,
    Context,
    Loop,
    Error,
    Awf,
}

impl Namespace {
    /// The namespace spelled `word`, if any.
    pub(crate) fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "inputs" => Self::Inputs,
            "states" => Self::States,
            "workflow" => Self::Workflow,
            "env" => Self::Env,
            "context" => Self::Context,
            "loop" => Self::Loop,
            "error" => Self::Error,
            "awf" => Self::Awf,
            _ => return None,
        })
    }
}

/// Which states a template or expression can reach.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum StatesNeed {
    /// `states` is never mentioned.
    #[default]
    None,
    /// Only `states.<name>` paths with these names.
    Named(Vec<String>),
    /// `states` is used as a whole (`range .states`, `index .states "x"`, `len(states)`).
    All,
}

impl StatesNeed {
    fn add(&mut self, name: &str) {
        match self {
            Self::None => *self = Self::Named(vec![name.to_owned()]),
            Self::Named(names) => {
                if !names.iter().any(|n| n == name) {
                    names.push(name.to_owned());
                }
            }
            Self::All => {}
        }
    }

    /// Whether the state called `name` must be built.
    pub(crate) fn wants(&self, name: &str) -> bool {
        match self {
            Self::None => false,
            Self::Named(names) => names.iter().any(|n| n == name),
            Self::All => true,
        }
    }

    /// Whether any state must be built.
    pub(crate) fn wants_any(&self) -> bool {
        !matches!(self, Self::None)
    }
}

/// What a text reaches: namespaces, states, and whether it touches the whole root.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Needs {
    pub(crate) inputs: bool,
    pub(crate) states: StatesNeed,
    pub(crate) workflow: bool,
    pub(crate) env: bool,
    pub(crate) context: bool,
    pub(crate) loop_frame: bool,
    pub(crate) error: bool,
    pub(crate) awf: bool,
    /// The root itself is used (`{{.}}`, `{{$}}`, `index . "inputs"`): build everything.
    pub(crate) root: bool,
    /// The text calls `readFile` or `json`, which need the per-render side data.
    pub(crate) side_data: bool,
}

impl Needs {
    /// Everything: used when the root is referenced as a whole.
    pub(crate) fn everything() -> Self {
        Self {
            inputs: true,
            states: StatesNeed::All,
            workflow: true,
            env: true,
            context: true,
            loop_frame: true,
            error: true,
            awf: true,
            root: true,
            side_data: true,
        }
    }

    fn mark(&mut self, ns: Namespace, rest: &[u8]) {
        match ns {
            Namespace::Inputs => self.inputs = true,
            Namespace::States => match member_after(rest) {
                Some(name) => self.states.add(name),
                None => self.states = StatesNeed::All,
            },
            Namespace::Workflow => self.workflow = true,
            Namespace::Env => self.env = true,
            Namespace::Context => self.context = true,
            Namespace::Loop => self.loop_frame = true,
            Namespace::Error => self.error = true,
            Namespace::Awf => self.awf = true,
        }
    }
}

/// Template text ready to parse, and what it needs.
#[derive(Debug)]
pub(crate) struct Prepared<'t> {
    /// The text with no-dot namespace references rewritten to `$.ns`.
    pub(crate) text: Cow<'t, str>,
    /// What the text reaches.
    pub(crate) needs: Needs,
    /// Byte offsets in `text` where `$.` was inserted, ascending.
    pub(crate) inserted: Vec<usize>,
    /// Deepest nesting seen: enclosing `if`/`range`/`with`/`block`/`define` blocks plus
    /// parentheses open in the action (string literals and comments skipped).
    pub(crate) max_depth: usize,
    /// A call the parser accepts that can only fail when rendered: a namespace called with
    /// arguments (`{{env "HOME"}}`), or `{{template "x"}}` of a name the text never defines.
    /// The message says what to write instead.
    pub(crate) misuse: Option<String>,
}

impl Prepared<'_> {
    /// `self` holding its own text.
    pub(crate) fn into_owned(self) -> Prepared<'static> {
        Prepared {
            text: Cow::Owned(self.text.into_owned()),
            needs: self.needs,
            inserted: self.inserted,
            max_depth: self.max_depth,
            misuse: self.misuse,
        }
    }

    /// Maps a 1-based column on a 1-based line of the rewritten text back to the column the
    /// user wrote.
    pub(crate) fn original_col(&self, line: usize, col: usize) -> usize {
        let line_start: usize = self
            .text
            .split('\n')
            .take(line.saturating_sub(1))
            .map(|l| l.len() + 1)
            .sum();
        let at = line_start + col.saturating_sub(1);
        let shifted = self
            .inserted
            .iter()
            .filter(|&&p| p >= line_start && p < at)
            .count();
        col.saturating_sub(2 * shifted)
    }
}

/// Words a light template's actions may hold (see [`light_template`]): control words,
/// comparisons, and functions whose work and result are bounded by their arguments' size.
const LIGHT_WORDS: &[&str] = &[
    "if",
    "else",
    "end",
    "with",
    "and",
    "or",
    "not",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "len",
    "index",
    "default",
    "trim",
    "trimSpace",
    "upper",
    "lower",
    "escape",
    "shell_quote",
    "shellQuote",
    "json",
    "toJson",
    "awfShellQ",
    "awfShellDq",
    "nil",
    "true",
    "false",
];

/// Whether rendering `text` is light: every action holds only field chains, variables,
/// literals and [`LIGHT_WORDS`] (no `range`, no `printf`, no `split`, no `readFile`, no
/// template call), so its work is bounded by the size of the values it prints.
pub(crate) fn light_template(text: &str) -> bool {
    let b = text.as_bytes();
    let mut i = 0;
    while let Some(open) = find(b, i, b"{{") {
        let Some(close) = find(b, open + 2, b"}}") else {
            return false;
        };
        let mut j = open + 2;
        while j < close {
            let c = b[j];
            if c == b'"' || c == b'`' || c == b'\'' {
                j = skip_quoted(b, j, c);
                continue;
            }
            if is_ident_start(c) {
                let start = j;
                while j < close && is_ident_char(b[j]) {
                    j += 1;
                }
                let prev = if start > 0 { b[start - 1] } else { b' ' };
                let word = &text[start..j];
                if prev != b'.' && prev != b'$' && !LIGHT_WORDS.contains(&word) {
                    return false;
                }
                continue;
            }
            j += 1;
        }
        i = close + 2;
    }
    true
}

pub(crate) fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c >= 0x80
}

pub(crate) fn is_ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

/// Reads `.name` at the start of `rest`, returning `name`.
pub(crate) fn member_after(rest: &[u8]) -> Option<&str> {
    if rest.first() != Some(&b'.') {
        return None;
    }
    let len = rest[1..].iter().take_while(|&&c| is_ident_char(c)).count();
    if len == 0 || !is_ident_start(rest[1]) {
        return None;
    }
    std::str::from_utf8(&rest[1..=len]).ok()
}

/// Index just past a quoted literal starting at `start` (which holds the quote), honouring
/// backslash escapes; the end of `b` when unterminated.
fn skip_quoted(b: &[u8], start: usize, quote: u8) -> usize {
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

fn find(b: &[u8], from: usize, pat: &[u8]) -> Option<usize> {
    b.get(from..)?
        .windows(pat.len())
        .position(|w| w == pat)
        .map(|p| p + from)
}

/// Scans `text` (which contains `{{`), rewriting no-dot namespace references and recording
/// what it needs. Malformed text is left for the parser to report.
pub(crate) fn prepare(text: &str) -> Prepared<'_> {
    let b = text.as_bytes();
    let mut needs = Needs::default();
    let mut out: Option<String> = None;
    let mut inserted = Vec::new();
    let mut copied = 0usize;
    let mut i = 0usize;
    let mut max_depth = 0usize;
    let mut blocks = 0usize;
    let mut misuse = None;
    // Names given to `{{template}}` and those `define`/`block` create.
    let mut called: Vec<&str> = Vec::new();
    let mut defined: Vec<&str> = Vec::new();
    while let Some(open) = find(b, i, b"{{") {
        let mut j = open + 2;
        // Where the action's first word starts (after a `-` trim marker and spaces).
        let mut first = j;
        if b.get(first) == Some(&b'-') {
            first += 1;
        }
        while b.get(first).is_some_and(u8::is_ascii_whitespace) {
            first += 1;
        }
        let mut parens = 0usize;
        while j < b.len() {
            let c = b[j];
            match c {
                b'}' if b.get(j + 1) == Some(&b'}') => {
                    j += 2;
                    break;
                }
                b'(' => {
                    parens = parens.saturating_add(1);
                    max_depth = max_depth.max(blocks.saturating_add(parens));
                    j += 1;
                }
                b')' => {
                    parens = parens.saturating_sub(1);
                    j += 1;
                }
                b'"' => j = skip_quoted(b, j, b'"'),
                b'\'' => j = skip_quoted(b, j, b'\''),
                b'`' => j = find(b, j + 1, b"`").map_or(b.len(), |e| e + 1),
                b'/' if b.get(j + 1) == Some(&b'*') => {
                    j = find(b, j + 2, b"*/").map_or(b.len(), |e| e + 2);
                }
                c if c.is_ascii_digit() => {
                    j += 1;
                    while j < b.len() {
                        let d = b[j];
                        let after_exp = matches!(b[j - 1], b'e' | b'E' | b'p' | b'P');
                        if d.is_ascii_alphanumeric()
                            || d == b'_'
                            || d == b'.'
                            || (after_exp && (d == b'+' || d == b'-'))
                        {
                            j += 1;
                        } else {
                            break;
                        }
                    }
                }
                c if is_ident_start(c) => {
                    let start = j;
                    while j < b.len() && is_ident_char(b[j]) {
                        j += 1;
                    }
                    let word = &text[start..j];
                    if start == first {
                        match word {
                            "if" | "range" | "with" | "block" | "define" => {
                                blocks = blocks.saturating_add(1);
                                max_depth = max_depth.max(blocks);
                            }
                            "end" => blocks = blocks.saturating_sub(1),
                            _ => {}
                        }
                        match word {
                            "template" => called.extend(quoted_name(text, j)),
                            "block" | "define" => defined.extend(quoted_name(text, j)),
                            _ => {}
                        }
                    }
                    let prev = if start > 0 { b[start - 1] } else { 0 };
                    if misuse.is_none()
                        && prev != b'.'
                        && prev != b'$'
                        && Namespace::parse(word).is_some()
                        && at_command_head(b, start, first)
                        && (takes_argument(b, j) || after_pipe(b, start))
                    {
                        misuse = Some(format!(
                            "`{word}` is a namespace and takes no arguments: write \
                             `{{{{.{word}.NAME}}}}` or `{{{{index .{word} \"NAME\"}}}}`"
                        ));
                    }
                    match prev {
                        b'$' => {}
                        b'.' => {
                            if let Some(ns) = Namespace::parse(word) {
                                needs.mark(ns, &b[j..]);
                            }
                        }
                        _ => {
                            if let Some(ns) = Namespace::parse(word) {
                                needs.mark(ns, &b[j..]);
                                let buf = out
                                    .get_or_insert_with(|| String::with_capacity(text.len() + 16));
                                buf.push_str(&text[copied..start]);
                                inserted.push(buf.len());
                                buf.push_str("$.");
                                copied = start;
                            } else if word == "readFile"
                                || word == "index"
                                || word == "json"
                                || word == "toJson"
                                || word == crate::shell::SHELL_DQ_FUNC
                            {
                                needs.side_data = true;
                            }
                        }
                    }
                }
                b'.' => {
                    let prev = if j > 0 { b[j - 1] } else { 0 };
                    let next = b.get(j + 1).copied().unwrap_or(0);
                    if !is_ident_start(next) && !is_ident_char(prev) && prev != b')' {
                        needs.root = true;
                    }
                    j += 1;
                }
                b'$' => {
                    let next = b.get(j + 1).copied().unwrap_or(0);
                    if !is_ident_char(next) && next != b'.' {
                        needs.root = true;
                    }
                    j += 1;
                }
                _ => j += 1,
            }
        }
        i = j;
    }
    if needs.root {
        needs = Needs::everything();
    }
    if misuse.is_none()
        && let Some(name) = called.iter().find(|n| !defined.contains(n))
    {
        misuse = Some(format!(
            "{{{{template \"{name}\"}}}} names a template this text does not define: \
             add {{{{define \"{name}\"}}}}...{{{{end}}}} or remove the call"
        ));
    }
    let text = match out {
        Some(mut buf) => {
            buf.push_str(&text[copied..]);
            Cow::Owned(buf)
        }
        None => Cow::Borrowed(text),
    };
    Prepared {
        text,
        needs,
        inserted,
        max_depth,
        misuse,
    }
}

/// The name in `"name"` after `at` (spaces skipped), as written between the quotes.
fn quoted_name(text: &str, at: usize) -> Option<&str> {
    let b = text.as_bytes();
    let mut k = at;
    while b.get(k).is_some_and(u8::is_ascii_whitespace) {
        k += 1;
    }
    let quote = *b.get(k)?;
    if quote != b'"' && quote != b'`' {
        return None;
    }
    let end = skip_quoted(b, k, quote);
    text.get(k + 1..end.checked_sub(1)?)
}

/// Whether the word at `start` is the command of its pipeline stage: the action's first word,
/// or the first after `(` or `|`.
fn at_command_head(b: &[u8], start: usize, first: usize) -> bool {
    if start == first {
        return true;
    }
    let mut k = start;
    while k > 0 && b[k - 1].is_ascii_whitespace() {
        k -= 1;
    }
    k > 0 && matches!(b[k - 1], b'(' | b'|')
}

/// Whether the word at `start` follows a `|`: the pipeline's value is its last argument.
fn after_pipe(b: &[u8], start: usize) -> bool {
    let mut k = start;
    while k > 0 && b[k - 1].is_ascii_whitespace() {
        k -= 1;
    }
    k > 0 && b[k - 1] == b'|'
}

/// Whether an argument follows the word ending at `end`: spaces, then something other than
/// the end of the action, a `)`, a `|` or a `.field` chain.
fn takes_argument(b: &[u8], end: usize) -> bool {
    let mut k = end;
    while b.get(k).is_some_and(u8::is_ascii_whitespace) {
        k += 1;
    }
    if k == end {
        return false;
    }
    match b.get(k) {
        None | Some(b')' | b'|') => false,
        Some(b'}') => b.get(k + 1) != Some(&b'}'),
        Some(b'-') => !(b.get(k + 1) == Some(&b'}') && b.get(k + 2) == Some(&b'}')),
        Some(_) => true,
    }
}

/// Deepest bracket nesting accepted in an expression; deeper text is refused before parsing,
/// as the parser recurses once per level.
pub(crate) const MAX_EXPRESSION_NESTING: usize = 128;

/// Deepest nesting of blocks plus parentheses accepted in a template. A level costs the
/// recursive-descent parser about 16-20 KiB of stack in a debug build, so 64 levels hold on a
/// 2 MiB thread (gtmpl-ng caps blocks alone at 64 for the same reason).
pub(crate) const MAX_TEMPLATE_NESTING: usize = 64;

/// The error for text nested deeper than `limit`.
pub(crate) fn too_deep(limit: usize) -> awf_domain::ports::template::TemplateError {
    awf_domain::ports::template::TemplateError::Failed(format!(
        "expression nested too deeply (more than {limit} levels)"
    ))
}

/// Deepest nesting of `(`, `[` and `{` in an expression, outside string literals (`'…'`,
/// `"…"` with backslash escapes, `` `…` `` raw). One pass, no allocation.
pub(crate) fn expression_depth(expr: &str) -> usize {
    let b = expr.as_bytes();
    let mut depth = 0usize;
    let mut max = 0usize;
    let mut i = 0usize;
    while i < b.len() {
        match b[i] {
            b'(' | b'[' | b'{' => {
                depth = depth.saturating_add(1);
                max = max.max(depth);
                i += 1;
            }
            b')' | b']' | b'}' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            q @ (b'"' | b'\'') => i = skip_quoted(b, i, q),
            b'`' => i = find(b, i + 1, b"`").map_or(b.len(), |e| e + 1),
            _ => i += 1,
        }
    }
    max
}

/// Names of states reached by `states.<name>` in an expression; `All` when `states` is used
/// otherwise (`states[x]`, `len(states)`) or `$env` is used.
pub(crate) fn states_in_expression(expr: &str) -> StatesNeed {
    let b = expr.as_bytes();
    if expr.contains("$env") {
        return StatesNeed::All;
    }
    let mut need = StatesNeed::None;
    for (start, word, end) in words(expr) {
        let prev = if start > 0 { b[start - 1] } else { 0 };
        if word == "states" && prev != b'.' {
            match member_after(&b[end..]) {
                Some(name) => need.add(name),
                None => return StatesNeed::All,
            }
        }
    }
    need
}

/// Top-level `ns.name` references in an expression, as (`ns`, `name`) pairs, outside string
/// literals.
pub(crate) fn rooted_members(expr: &str) -> Vec<(Namespace, &str)> {
    rooted_member_fields(expr)
        .into_iter()
        .map(|(ns, name, _)| (ns, name))
        .collect()
}

/// [`rooted_members`] with the member that follows each name, when one does:
/// `states.b.ExitCode` is (`States`, `b`, `Some("ExitCode")`).
pub(crate) fn rooted_member_fields(expr: &str) -> Vec<(Namespace, &str, Option<&str>)> {
    let b = expr.as_bytes();
    let mut found = Vec::new();
    for (start, word, end) in words(expr) {
        if start > 0 && b[start - 1] == b'.' {
            continue;
        }
        if let (Some(ns), Some(name)) = (Namespace::parse(word), member_after(&b[end..])) {
            let field = member_after(&b[end + 1 + name.len()..]);
            found.push((ns, name, field));
        }
    }
    found
}

/// Whether `word` is used as an identifier somewhere in `expr` (outside string literals).
pub(crate) fn mentions(expr: &str, word: &str) -> bool {
    words(expr).any(|(_, w, _)| w == word)
}

/// Identifier words of an expression outside string literals: (start, word, end).
fn words(expr: &str) -> impl Iterator<Item = (usize, &str, usize)> {
    let b = expr.as_bytes();
    let mut i = 0usize;
    std::iter::from_fn(move || {
        while i < b.len() {
            let c = b[i];
            match c {
                b'"' | b'\'' => i = skip_quoted(b, i, c),
                b'`' => i = find(b, i + 1, b"`").map_or(b.len(), |e| e + 1),
                c if c.is_ascii_digit() => {
                    // A number, up to a range's `..` (`1..inputs.n`: `inputs` is a word).
                    while i < b.len()
                        && (is_ident_char(b[i]) || (b[i] == b'.' && b.get(i + 1) != Some(&b'.')))
                    {
                        i += 1;
                    }
                }
                c if is_ident_start(c) => {
                    let start = i;
                    while i < b.len() && is_ident_char(b[i]) {
                        i += 1;
                    }
                    return Some((start, &expr[start..i], i));
                }
                _ => i += 1,
            }
        }
        None
    })
}

impl Needs {
    /// Whether nothing at all is needed (plain actions such as `{{"x"}}` or `{{printf …}}`).
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        !(self.inputs
            || self.workflow
            || self.env
            || self.context
            || self.loop_frame
            || self.error
            || self.awf
            || self.root)
            && !self.states.wants_any()
    }
}

#[cfg(test)]
#[path = "scan_tests.rs"]
mod tests;
