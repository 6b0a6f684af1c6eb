//! Shell-aware rendering of command text: a composite loop item (printed as compact JSON)
//! that sits inside a double-quoted shell string has its `\ " $ `` ` escaped, so
//! `echo "Item: {{.loop.Item}}"` prints `Item: {"name":"S1"}` as the user wrote it, instead
//! of the shell eating the JSON's quotes. Nothing else changes: values outside double quotes
//! and all other values are inserted exactly as rendered.
//!
//! The `shell_quote: true` rewrite ([`quote_values`]) quotes every value for its shell
//! context. Both read the text with the one shell-context walker of the domain,
//! [`awf_domain::shell::shell_pieces`], which `awf validate` uses too.
//!
//! Source: shared conformance case C20; issue 14 ("Safe shell interpolation"); recorded in
//! docs/compatibility.md.

/// Name of the template function that escapes a composite loop item for double quotes.
pub(crate) const SHELL_DQ_FUNC: &str = "awfShellDq";

use awf_domain::shell::Dependence;
use awf_domain::shell::ShellAction;
use awf_domain::shell::ShellContext;
use awf_domain::shell::ShellPiece;
use awf_domain::shell::shell_pieces;

/// The rewrite of shell command text rendered without `shell_quote: true`:
///
/// - `{{ <loop item ref> }}` actions that sit inside double quotes (in the shell sense of the
///   surrounding literal text, as [`awf_domain::shell::shell_pieces`] reads it; also through
///   a `$( … )` or backticks nested in the double quotes) become
///   `{{ awfShellDq (<ref>) }}`;
/// - every value action inside a `#` comment becomes `{{ awfShellQ "r" (<pipeline>) }}`:
///   its line breaks turn into spaces, so the value cannot end the comment and run the rest
///   (quotes do nothing in a comment; breaker: `# note: {{shell_quote .inputs.s}}` ran the
///   value's second line).
pub(crate) fn quote_loop_items(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("{{") || !(text.contains('"') || text.contains('#')) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut changed = false;
    for piece in shell_pieces(text) {
        match piece {
            ShellPiece::Text(t) => out.push_str(t),
            ShellPiece::Action(a) if a.context == ShellContext::Comment => {
                match quote_action(&a, false) {
                    Some(rewritten) => {
                        out.push_str(&rewritten);
                        changed = true;
                    }
                    None => out.push_str(a.text),
                }
            }
            ShellPiece::Action(a) => match rewrite_action(a.text) {
                Some(rewritten) if a.inside_double_quotes => {
                    out.push_str(&rewritten);
                    changed = true;
                }
                _ => out.push_str(a.text),
            },
        }
    }
    if changed {
        std::borrow::Cow::Owned(out)
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// `{{- .loop.Item -}}` → `{{- awfShellDq (.loop.Item) -}}` when the action is exactly a loop
/// item reference (any loop depth, either casing, with or without the leading dot or `$`).
fn rewrite_action(action: &str) -> Option<String> {
    let inner = action.strip_prefix("{{")?.strip_suffix("}}")?;
    let (lead, inner) = match inner.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", inner),
    };
    let (inner, trail) = match inner.strip_suffix('-') {
        Some(rest) => (rest, "-"),
        None => (inner, ""),
    };
    let r = inner.trim();
    let path = r.strip_prefix('$').unwrap_or(r);
    let path = path.strip_prefix('.').unwrap_or(path);
    let mut parts = path.split('.');
    if parts.next().is_none_or(|p| p != "loop") {
        return None;
    }
    let rest: Vec<&str> = parts.collect();
    let (last, parents) = rest.split_last()?;
    if !matches!(*last, "Item" | "item")
        || !parents.iter().all(|p| matches!(*p, "Parent" | "parent"))
    {
        return None;
    }
    Some(format!("{{{{{lead} {SHELL_DQ_FUNC} ({r}) {trail}}}}}"))
}

/// Name of the template function that quotes a value for its shell context
/// (`shell_quote: true` mode): `awfShellQ "<context>" <value>`.
pub(crate) const SHELL_Q_FUNC: &str = "awfShellQ";

/// The context argument of [`SHELL_Q_FUNC`] for a shell context: `u` bare (also inside
/// `$( )`), `s` single quotes, `d` double quotes, `b` backticks, `h<edges><delimiter>` an
/// unquoted here-document, `H<edges><delimiter>` a quoted one, `t…` and `T…` the same of a
/// `<<-` one (leading tabs stripped) (`<edges>`: `<first>:<last>:`,
/// how the text around the action on its line completes the delimiter, see [`edges`]),
/// `c` a `#` comment (`r` there for a value
/// quoted already or rendered without the mode), `p` inside `${ … }`, `x` right after an
/// escaping backslash, `$` right after a `$`, `A` inside `$'…'`, `a` arithmetic, `B` after
/// a template branch that leaves the shell quoting uneven, `D<code>` after text bash and dash
/// read differently (the [`Dependence::code`] of why). A context
/// nested in backticks (`` `echo "{{x}}"` ``) has `` ` `` before its letter: the quoted
/// value then has its `\` and `` ` `` escaped once more for the backticks. `q` is a value
/// already quoted by `shell_quote`/`escape` where that quoting is right (a bare word) but
/// something around it needs more: backticks, or a here-document enclosing it.
///
/// Each unquoted here-document whose body encloses the action through `$( … )` or
/// backticks ([`awf_domain::shell::ShellAction::heredocs`]) adds `<<edges><delimiter> ` (a
/// space ends it: an unquoted delimiter holds none) before all that, outermost first
/// (`<0:0:EOF u`, `<-:-:EOF `b`).
fn tag(ctx: &ShellContext, inside_backticks: bool, edges: &dyn Fn(&str) -> String) -> String {
    let base = match ctx {
        ShellContext::Unquoted { .. } => "u".to_owned(),
        ShellContext::SingleQuoted => "s".to_owned(),
        ShellContext::DoubleQuoted => "d".to_owned(),
        ShellContext::Backtick => return "b".to_owned(),
        ShellContext::Heredoc {
            quoted: false,
            strip,
            delimiter,
        } => format!(
            "{}{}{delimiter}",
            if *strip { 't' } else { 'h' },
            edges(delimiter)
        ),
        ShellContext::Heredoc {
            quoted: true,
            strip,
            delimiter,
        } => format!(
            "{}{}{delimiter}",
            if *strip { 'T' } else { 'H' },
            edges(delimiter)
        ),
        ShellContext::Comment => "c".to_owned(),
        ShellContext::ParameterExpansion => "p".to_owned(),
        ShellContext::AfterBackslash => "x".to_owned(),
        ShellContext::AfterDollar => "$".to_owned(),
        ShellContext::AnsiC => "A".to_owned(),
        ShellContext::Arithmetic => "a".to_owned(),
        ShellContext::UnevenBranch { .. } => "B".to_owned(),
        ShellContext::ShellDependent { cause } => format!("D{}", cause.code()),
    };
    if inside_backticks {
        format!("`{base}")
    } else {
        base
    }
}

/// Rewrites every value action of shell command text to `{{ awfShellQ "<ctx>" (<pipeline>) }}`
/// (`shell_quote: true`), the context being where the action sits in the shell sense of the
/// literal text around it ([`awf_domain::shell::shell_pieces`]). Control actions (`if`,
/// `else`, `end`, `range`, `with`, `define`, `template`, `block`, `break`, `continue`),
/// comments and variable assignments are left as written; so are pipelines already ending in
/// `shell_quote`/`escape` where they are a bare word (inside backticks, or in a `$( )` in a
/// here-document's body, they keep their text but get the backticks' escaping and the
/// here-document's line checks). Such a pipeline anywhere else (inside quotes, backticks or
/// a here-document, where its single quotes do not protect the value) is quoted for its
/// context like any other value: its quotes print literally and nothing in the value runs.
pub(crate) fn quote_values(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("{{") {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 32);
    for piece in shell_pieces(text) {
        match piece {
            ShellPiece::Text(t) => out.push_str(t),
            ShellPiece::Action(a) => match quote_action(&a, true) {
                Some(rewritten) => out.push_str(&rewritten),
                None => out.push_str(a.text),
            },
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `{{ pipeline }}` → `{{ awfShellQ "<ctx>" (pipeline) "pipeline" }}` for a value action
/// (the last argument names the value in a refusal); `None` for control actions, comments,
/// assignments and already quoted pipelines. `mode`: `shell_quote: true` (else only values in
/// a `#` comment are rewritten, to have their line breaks turned into spaces).
fn quote_action(a: &ShellAction<'_>, mode: bool) -> Option<String> {
    let ctx = &a.context;
    let inside_backticks = a.inside_backticks;
    let heredocs = &a.heredocs;
    let inner = a.text.strip_prefix("{{")?.strip_suffix("}}")?;
    let (lead, inner) = match inner.strip_prefix('-') {
        Some(rest) if rest.starts_with([' ', '\t', '\n']) => ("-", rest),
        _ => ("", inner),
    };
    let (inner, trail) = match inner.strip_suffix('-') {
        Some(rest) if rest.ends_with([' ', '\t', '\n']) => (rest, "-"),
        _ => (inner, ""),
    };
    let r = inner.trim();
    let prints = awf_domain::validate::prints_value(r);
    let quoted = awf_domain::validate::ends_in_shell_quoting(r);
    let bare = matches!(ctx, ShellContext::Unquoted { .. });
    let tag = match ctx {
        // In a comment, a value quoted already (or any value without the mode) keeps its
        // text; only its line breaks go.
        ShellContext::Comment if !prints && !quoted => return None,
        ShellContext::Comment if quoted || !mode => {
            if inside_backticks {
                "`r".to_owned()
            } else {
                "r".to_owned()
            }
        }
        _ if !mode => return None,
        _ if !prints && !quoted => return None,
        // A bare value quoted already is right as written, unless backticks unescape its
        // `\` and `` ` `` (breaker: `` `echo $(echo {{shell_quote .x}})` `` with a backtick in
        // the value ended the backticks) or an enclosing here-document's line ends early.
        _ if quoted && bare => {
            if !inside_backticks && heredocs.is_empty() {
                return None;
            }
            if inside_backticks {
                "`q".to_owned()
            } else {
                "q".to_owned()
            }
        }
        _ => tag(ctx, inside_backticks, &edges(a)),
    };
    // Without the mode a value keeps its text (only a comment's line breaks go): the
    // here-document checks are the mode's.
    let enclosing: &[String] = if mode { heredocs } else { &[] };
    let tag: String = enclosing
        .iter()
        .map(|d| format!("<{}{d} ", edges(a)(d)))
        .chain(std::iter::once(tag))
        .collect();
    let lit = |t: &str| t.replace('\\', "\\\\").replace('"', "\\\"");
    Some(format!(
        "{{{{{lead} {SHELL_Q_FUNC} \"{}\" ({r}) \"{}\" {trail}}}}}",
        lit(&tag),
        lit(r)
    ))
}

/// For an action, the `<first>:<last>:` part of a here-document's tag (see [`tag`]) for a
/// delimiter: how the text around the action on its line can complete the delimiter with the
/// value's first and last lines. `<first>`: the length of the text before the action (leading
/// tabs dropped) when the delimiter starts with it, `-` when it does not (no first line of
/// the value completes it), `?` when that text is unknown
/// ([`ShellAction::line_before`]); `<last>` likewise for the text after it and the
/// delimiter's end.
fn edges<'a>(a: &'a ShellAction<'_>) -> impl Fn(&str) -> String + 'a {
    move |delim: &str| {
        let first = match a.line_before.as_deref() {
            None => "?".to_owned(),
            Some(p) => {
                let p = p.trim_start_matches('\t');
                if delim.starts_with(p) {
                    p.len().to_string()
                } else {
                    "-".to_owned()
                }
            }
        };
        let last = match a.line_after.as_deref() {
            None => "?".to_owned(),
            Some(s) if delim.ends_with(s) => s.len().to_string(),
            Some(_) => "-".to_owned(),
        };
        format!("{first}:{last}:")
    }
}

/// The context of an unprotected `tag` (see [`tag`]) as [`ShellContext::unprotected`] says it.
fn unprotected(tag: &str) -> Option<awf_domain::shell::Unprotected> {
    match tag {
        "p" => ShellContext::ParameterExpansion,
        "x" => ShellContext::AfterBackslash,
        "$" => ShellContext::AfterDollar,
        "A" => ShellContext::AnsiC,
        "a" => ShellContext::Arithmetic,
        "B" => ShellContext::UnevenBranch {
            branch: String::new(),
        },
        t if let Some(code) = t.strip_prefix('D') => ShellContext::ShellDependent {
            cause: code
                .chars()
                .next()
                .and_then(Dependence::from_code)
                .unwrap_or(Dependence::UnreadableDelimiter),
        },
        _ => return None,
    }
    .unprotected()
}

/// `value` with its line breaks and carriage returns turned into spaces (a value in a `#`
/// comment: a line break would end the comment).
fn one_line(value: &str) -> String {
    value.replace(['\n', '\r'], " ")
}

/// Quotes `value` for the shell context `tag` (see [`tag`]); `what` names the value (its
/// pipeline as written, `.inputs.s`) in a refusal.
///
/// Inside an unquoted here-document's `$( … )` or backticks (a `<delimiter> ` prefix), a
/// value quoted with single quotes has every line break written `''\n''` (an empty quoted
/// string on each side, which changes nothing in the word): no line of it can then be the
/// delimiter, a `\` cannot end a line (bash reads the body line by line first, ends it at a
/// line equal to the delimiter and joins a line ending in `\` to the next), and `<<-`
/// strips no tab the value starts a line with. Any other quoting is refused when a line of it
/// could still do either.
///
/// # Errors
/// In a here-document, a value holding a line equal to the delimiter (leading tabs ignored,
/// as `<<-` reads it): it would end the document early and run the rest as commands. Inside
/// `${ … }`, `$'…'`, arithmetic, or right after an escaping backslash or a `$`, a value that
/// is not a plain word ([`awf_domain::validate::plain_word`]): no quoting protects it there
/// (breaker: each ran `$( )` from the value).
pub(crate) fn quote_for(tag: &str, value: &str, what: &str) -> Result<String, String> {
    let mut rest = tag;
    let mut enclosing: Vec<(Edge, Edge, &str)> = Vec::new();
    while let Some(r) = rest.strip_prefix('<') {
        let (heredoc, r) = r.split_once(' ').unwrap_or((r, ""));
        enclosing.push(edged(heredoc));
        rest = r;
    }
    if enclosing.is_empty() {
        return quote_in(rest, value, what);
    }
    let mut out = quote_in(rest, value, what)?;
    if matches!(
        rest.trim_start_matches('`'),
        "u" | "s" | "d" | "b" | "q" | "c"
    ) {
        // Every line break of these sits inside single quotes.
        out = out.replace('\n', "''\n''");
    }
    let named = named(what);
    for (first, last, delim) in &enclosing {
        if ends_heredoc(&out, delim, *first, *last) {
            return Err(format!(
                "shell_quote: {named} would make a line {delim:?} (alone or with the text around it), which would end the here-document around its $( ) or backticks"
            ));
        }
    }
    if joins_lines(&out) {
        return Err(format!(
            "shell_quote: {named} ends a line with a backslash, which would join it to the next line of the here-document around its $( ) or backticks (bash reads that here-document's lines first)"
        ));
    }
    Ok(out)
}

/// `the value of {{what}}` (or `a value`), for a refusal.
fn named(what: &str) -> String {
    if what.is_empty() {
        "a value".to_owned()
    } else {
        format!("the value of {{{{{what}}}}}")
    }
}

/// How the text around an action on its line can complete a here-document's delimiter
/// with the value's first or last line (see [`edges`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Edge {
    /// The text is unknown (another action shares the line).
    Unknown,
    /// The delimiter does not start (end) with the text: no line of the value completes it.
    Never,
    /// The delimiter starts (ends) with the text, this many bytes long.
    Known(usize),
}

/// `<first>:<last>:<delimiter>` (see [`edges`]) read back; an unreadable edge is unknown.
fn edged(tag: &str) -> (Edge, Edge, &str) {
    let edge = |e: &str| match e {
        "-" => Edge::Never,
        n => n.parse().map_or(Edge::Unknown, Edge::Known),
    };
    let mut parts = tag.splitn(3, ':');
    let first = edge(parts.next().unwrap_or("?"));
    let last = edge(parts.next().unwrap_or("?"));
    (first, last, parts.next().unwrap_or(""))
}

/// Whether `text`, put into a here-document body in place of an action, makes a line equal
/// to the delimiter `delim` (leading tabs ignored, as `<<-` reads them): a line of its own,
/// or its first or last line with the text around the action (`first`, `last`: see
/// [`Edge`]). Where that text is unknown, any first (last) line that could complete the
/// delimiter with some text before (after) it counts, an empty one too (breaker: `E{{x}}`
/// with `OF\n…`; fuzzing: `{{x}}EOF` with a value ending in a line break).
fn ends_heredoc(text: &str, delim: &str, first: Edge, last: Edge) -> bool {
    let lines: Vec<&str> = text.split('\n').collect();
    let n = lines.len() - 1;
    let trim = |l: &str| l.trim_start_matches('\t').to_owned();
    // The line as it starts the shell's line: tabs dropped unless text precedes it.
    let lead = |l: &str, before: usize| {
        if before == 0 { trim(l) } else { l.to_owned() }
    };
    if n == 0 {
        let l = lines[0];
        return match (first, last) {
            (Edge::Never, _) | (_, Edge::Never) => false,
            (Edge::Known(a), Edge::Known(z)) => delim
                .len()
                .checked_sub(z)
                .and_then(|end| delim.get(a..end))
                .is_some_and(|mid| lead(l, a) == mid),
            _ => {
                let l = trim(l);
                !l.is_empty() && delim.contains(l.as_str())
            }
        };
    }
    let first_ends = match first {
        Edge::Never => false,
        Edge::Known(a) => delim.get(a..).is_some_and(|rest| lead(lines[0], a) == rest),
        Edge::Unknown => {
            let l = trim(lines[0]);
            l.is_empty() || delim.ends_with(l.as_str())
        }
    };
    let last_ends = match last {
        Edge::Never => false,
        Edge::Known(z) => delim
            .len()
            .checked_sub(z)
            .and_then(|end| delim.get(..end))
            .is_some_and(|head| trim(lines[n]) == head),
        Edge::Unknown => {
            let l = trim(lines[n]);
            l.is_empty() || delim.starts_with(l.as_str())
        }
    };
    first_ends || last_ends || lines[1..n].iter().any(|l| trim(l) == delim)
}

/// Whether a line break of `text`, or its end (the text after the action may start with
/// one), follows an odd number of backslashes: a line continuation where bash reads an
/// unquoted here-document's lines.
fn joins_lines(text: &str) -> bool {
    let b = text.as_bytes();
    let odd = |end: usize| b[..end].iter().rev().take_while(|c| **c == b'\\').count() % 2 == 1;
    odd(b.len()) || b.iter().enumerate().any(|(i, c)| *c == b'\n' && odd(i))
}

/// Whether a line of `value`, put into a `<<-` here-document's body, starts with a tab the
/// shell strips: one after a line break, or its first character when the action starts its
/// line (`first` is `Known(0)`: only tabs before it; unknown counts as such).
fn strips_a_tab(value: &str, first: Edge) -> bool {
    let first_at_start = matches!(first, Edge::Known(0) | Edge::Unknown);
    (first_at_start && value.starts_with('\t')) || value.contains("\n\t")
}

/// An unquoted `<<-` here-document strips the leading tabs of every body line, the value's
/// own included (trial: a value's indentation was lost). `text` (the value as written there)
/// with `${-+}` (an empty expansion: `$-` is always set) before each of its lines that starts
/// with a tab (see [`strips_a_tab`]): the line then starts with no tab when the shell strips,
/// and the value arrives intact.
fn keep_leading_tabs(text: &str, first: Edge) -> String {
    const EMPTY: &str = "${-+}";
    let mut out = text.replace("\n\t", &format!("\n{EMPTY}\t"));
    if matches!(first, Edge::Known(0) | Edge::Unknown) && out.starts_with('\t') {
        out.insert_str(0, EMPTY);
    }
    out
}

/// [`quote_for`] without enclosing here-documents.
fn quote_in(tag: &str, value: &str, what: &str) -> Result<String, String> {
    if let Some(inner) = tag.strip_prefix('`') {
        // Backticks unescape `\\`, `\`` and `\$` in their text before reading it.
        return quote_in(inner, value, what).map(|q| q.replace('\\', "\\\\").replace('`', "\\`"));
    }
    let named = named(what);
    let single = || crate::functions::single_quote(value);
    let heredoc_end = |tag: &str| {
        let (first, last, delim) = edged(tag);
        if ends_heredoc(value, delim, first, last) {
            Err(format!(
                "shell_quote: {named} would make a line {delim:?} (alone or with the text around it), which would end the here-document"
            ))
        } else {
            Ok(())
        }
    };
    Ok(match tag {
        "s" => format!("'{}'", single()),
        "d" => format!("\"{}\"", single()),
        "b" => single().replace('\\', "\\\\").replace('`', "\\`"),
        "q" => value.to_owned(),
        "c" => crate::functions::single_quote(&one_line(value)),
        "r" => one_line(value),
        t if let Some(u) = unprotected(t) => {
            if awf_domain::validate::plain_word(value) {
                value.to_owned()
            } else {
                // The fix before the why: a long message is clipped at its end.
                return Err(format!(
                    "shell_quote: {named} sits {}, where no quoting protects it: {} ({})",
                    u.place, u.fix, u.why
                ));
            }
        }
        t if t.starts_with(['h', 't']) => {
            heredoc_end(&t[1..])?;
            let mut out = String::with_capacity(value.len() + 8);
            for c in value.chars() {
                if matches!(c, '\\' | '$' | '`') {
                    out.push('\\');
                }
                out.push(c);
            }
            match t.strip_prefix('t') {
                Some(edges) => keep_leading_tabs(&out, edged(edges).0),
                None => out,
            }
        }
        t if t.starts_with(['H', 'T']) => {
            heredoc_end(&t[1..])?;
            if t.starts_with('T') && strips_a_tab(value, edged(&t[1..]).0) {
                let (_, _, delim) = edged(&t[1..]);
                return Err(format!(
                    "shell_quote: {named} starts a line with a tab, which the quoted <<- here-document (<<-'{delim}') would strip; nothing expands there to keep it (write <<-{delim} unquoted, or << without the -, to keep the value's tabs)"
                ));
            }
            value.to_owned()
        }
        _ => single(),
    })
}

#[cfg(test)]
#[path = "shell_heredoc_tests.rs"]
mod heredoc_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loop_items_inside_double_quotes_are_rewritten() {
        assert_eq!(
            quote_loop_items(r#"echo "Item: {{.loop.Item}}""#),
            r#"echo "Item: {{ awfShellDq (.loop.Item) }}""#
        );
        assert_eq!(
            quote_loop_items("echo '{{.loop.Item}}' | jq"),
            "echo '{{.loop.Item}}' | jq"
        );
        assert_eq!(
            quote_loop_items(r#"echo {{.loop.Item}} "x""#),
            r#"echo {{.loop.Item}} "x""#
        );
        assert_eq!(
            quote_loop_items(r#"echo "{{.inputs.x}}""#),
            r#"echo "{{.inputs.x}}""#
        );
        assert_eq!(
            quote_loop_items(r#"echo "{{- loop.Parent.item -}}""#),
            r#"echo "{{- awfShellDq (loop.Parent.item) -}}""#
        );
        assert_eq!(
            quote_loop_items(r#"echo \"{{.loop.Item}}"#),
            r#"echo \"{{.loop.Item}}"#
        );
        // Through a `$( )` or backticks nested in double quotes, as before the shared walker.
        assert_eq!(
            quote_loop_items(r#"echo "$(echo {{.loop.Item}})" $(echo {{.loop.Item}})"#),
            r#"echo "$(echo {{ awfShellDq (.loop.Item) }})" $(echo {{.loop.Item}})"#
        );
        assert_eq!(
            quote_loop_items(r#"a="{{ if .loop.First }}x{{ end }}" b="{{.loop.Item}}""#),
            r#"a="{{ if .loop.First }}x{{ end }}" b="{{ awfShellDq (.loop.Item) }}""#
        );
    }
}

#[cfg(test)]
mod quote_tests {
    use awf_domain::ports::template::Interpolator;

    use crate::GoTemplates;
    use crate::test_support::Data;

    const NASTY: &str = "it's; touch $TMPDIR/pwned # \"x\" $(id) `id` \\ \t end";

    fn data() -> Data {
        let mut d = Data::new();
        d.inputs.insert("v".into(), serde_json::json!(NASTY));
        d.inputs
            .insert("items".into(), serde_json::json!(["a'b", "c d"]));
        d.inputs.insert("w".into(), serde_json::json!("src/a-1.rs"));
        d
    }

    /// Renders `t` in quoted mode and runs it with `sh -c`, giving stdout.
    fn run(t: &str) -> String {
        let d = data();
        let text = match GoTemplates::new().render_shell_quoted(t, &d.scope()) {
            Ok(s) => s,
            Err(e) => panic!("{t}: {e}"),
        };
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&text)
            .env("TMPDIR", "/nonexistent-awf-dir")
            .output()
            .unwrap_or_else(|e| panic!("sh: {e}"));
        assert!(out.status.success(), "{text}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn every_shell_context_gets_the_value_back_as_one_literal_word() {
        let v = NASTY;
        let cases: Vec<(&str, String)> = vec![
            ("printf '%s|' {{.inputs.v}}", format!("{v}|")),
            ("printf '%s|' {{ .inputs.v -}}", format!("{v}|")),
            (
                "printf '%s|' \"pre {{.inputs.v}} post\"",
                format!("pre {v} post|"),
            ),
            (
                "printf '%s|' 'pre {{.inputs.v}} post'",
                format!("pre {v} post|"),
            ),
            (
                "printf '%s|' \"$(printf '%s' {{.inputs.v}})\"",
                format!("{v}|"),
            ),
            (
                "printf '%s|' \"$(printf '%s' \"{{.inputs.v}}\")\"",
                format!("{v}|"),
            ),
            (
                "printf '%s|' \"`printf '%s' {{.inputs.v}}`\"",
                format!("{v}|"),
            ),
            ("cat <<EOF\n{{.inputs.v}}\nEOF", format!("{v}\n")),
            ("cat <<'EOF'\n{{.inputs.v}}\nEOF", format!("{v}\n")),
            ("cat <<-EOF\n\t{{.inputs.v}}\n\tEOF", format!("{v}\n")),
            (
                "echo it's a comment # 'x\nprintf '%s|' {{.inputs.v}}",
                String::new(),
            ),
            ("# it's\nprintf '%s|' {{.inputs.v}}", format!("{v}|")),
            (
                "{{if .inputs.v}}printf '%s|' {{.inputs.v}}{{end}}",
                format!("{v}|"),
            ),
            (
                "{{range .inputs.items}}printf '[%s]' {{.}};{{end}}",
                "[a'b][c d]".into(),
            ),
            ("{{$x := .inputs.v}}printf '%s|' {{$x}}", format!("{v}|")),
            ("printf '%s|' {{shell_quote .inputs.v}}", format!("{v}|")),
            ("printf '%s|' {{.inputs.v | shell_quote}}", format!("{v}|")),
            (
                "printf '%s|' {{printf \"%s!\" .inputs.v}}",
                format!("{v}!|"),
            ),
        ];
        for (t, want) in cases {
            if want.is_empty() {
                // `it's` opens a real quote: the shell text itself is broken, not our concern.
                continue;
            }
            assert_eq!(run(t), want, "template: {t}");
        }
    }

    /// Issue 14: an explicit `shell_quote`/`escape` inside quotes, backticks or a
    /// here-document does not protect the value there; under the mode it is quoted again for
    /// its context, so its quotes print and nothing in the value runs.
    #[test]
    fn an_explicit_shell_quote_where_it_does_not_protect_is_quoted_again_in_the_mode() {
        let q = |v: &str| crate::functions::single_quote(v);
        let v = NASTY;
        let cases: Vec<(&str, String)> = vec![
            (
                "printf '%s|' \"three {{shell_quote .inputs.v}}\"",
                format!("three {}|", q(v)),
            ),
            (
                "printf '%s|' \"three {{.inputs.v | escape}}\"",
                format!("three {}|", q(v)),
            ),
            (
                "printf '%s|' 'three {{shell_quote .inputs.v}}'",
                format!("three {}|", q(v)),
            ),
            (
                "printf '%s|' \"`printf '%s' {{shell_quote .inputs.v}}`\"",
                format!("{}|", q(v)),
            ),
            (
                "cat <<EOF\n{{shell_quote .inputs.v}}\nEOF",
                format!("{}\n", q(v)),
            ),
            (
                "cat <<'EOF'\n{{shell_quote .inputs.v}}\nEOF",
                format!("{}\n", q(v)),
            ),
            // Bare and inside `$( )` it is right as written: left alone.
            (
                "printf '%s|' \"$(printf '%s' {{shell_quote .inputs.v}})\"",
                format!("{v}|"),
            ),
        ];
        for (t, want) in cases {
            assert_eq!(run(t), want, "template: {t}");
        }
        let d = data();
        let text = GoTemplates::new()
            .render_shell_quoted("echo {{shell_quote .inputs.v}}", &d.scope())
            .unwrap_or_default();
        assert_eq!(text, format!("echo {}", q(v)));
    }

    #[test]
    fn shell_quote_always_single_quotes() {
        let d = data();
        let r = |t: &str| GoTemplates::new().render(t, &d.scope());
        assert_eq!(r("{{shell_quote \"plain\"}}"), Ok("'plain'".into()));
        assert_eq!(r("{{shell_quote \"\"}}"), Ok("''".into()));
        assert_eq!(r("{{shellQuote \"it's\"}}"), Ok("'it'\\''s'".into()));
    }

    #[test]
    fn a_value_that_would_close_a_quoted_heredoc_is_refused() {
        let mut d = data();
        d.inputs
            .insert("v".into(), serde_json::json!("x\nEOF\ntouch /tmp/x"));
        let r =
            GoTemplates::new().render_shell_quoted("cat <<'EOF'\n{{.inputs.v}}\nEOF", &d.scope());
        assert!(
            matches!(&r, Err(e) if e.to_string().contains("here-document")),
            "{r:?}"
        );
    }

    /// Breaker: under `shell_quote: true` a `<<-` here-document's tab-indented delimiter
    /// line in the value ended the (unquoted) document, and a value inside `${ … }` or right
    /// after a backslash ran `$( )`. Such values are refused; a plain word goes in as is.
    #[test]
    fn values_no_quoting_protects_are_refused_and_plain_words_pass() {
        let mut d = data();
        d.inputs.insert(
            "t".into(),
            serde_json::json!("x\n\tEOF\ntouch /tmp/awf-x\ncat <<-EOF"),
        );
        let render = |t: &str| GoTemplates::new().render_shell_quoted(t, &d.scope());
        for (t, why) in [
            ("cat <<-EOF\n\t{{.inputs.t}}\n\tEOF", "here-document"),
            ("cat <<EOF\n{{.inputs.t}}\nEOF", "here-document"),
            ("echo \"${X:-{{.inputs.v}}}\"", "inside ${…}"),
            ("echo ${X:-\"{{.inputs.v}}\"}", "inside ${…}"),
            (
                "echo \"${X:-\"{{shell_quote .inputs.v}}\"}\"",
                "inside ${…}",
            ),
            ("echo X \\{{.inputs.v}}", "after a backslash"),
            ("echo \"X \\{{.inputs.v}}\"", "after a backslash"),
        ] {
            let r = render(t);
            assert!(
                matches!(&r, Err(e) if e.to_string().contains(why)),
                "{t}: {r:?}"
            );
        }
        // Breaker, second round: each ran `$( )` or a line of the value.
        for (t, why) in [
            ("echo ${{.inputs.v}}", "after a $"),
            ("echo $ {{- .inputs.v}}", "after a $"),
            ("echo \\ {{- .inputs.v}}", "after a backslash"),
            ("echo $(({{.inputs.v}}))", "arithmetic"),
            ("[[ {{.inputs.v}} -eq 1 ]]", "arithmetic"),
            ("echo \"`echo \\\"{{.inputs.v}}\\\"`\"", "after a backslash"),
        ] {
            let r = render(t);
            assert!(
                matches!(&r, Err(e) if e.to_string().contains(why)),
                "{t}: {r:?}"
            );
        }
        let mut glued = data();
        glued.inputs.insert(
            "t".into(),
            serde_json::json!("OF\ntouch /tmp/awf-x\ncat <<EOF"),
        );
        let r = GoTemplates::new()
            .render_shell_quoted("cat <<EOF\nE{{.inputs.t}}\nEOF", &glued.scope());
        assert!(
            matches!(&r, Err(e) if e.to_string().contains("here-document")),
            "{r:?}"
        );
        // Where the shell reads them as ordinary words, values go in quoted as before.
        assert_eq!(
            run("echo $((1<<2)) >/dev/null\nprintf '%s|' {{.inputs.v}}"),
            format!("{NASTY}|")
        );
        assert_eq!(
            run("printf '%s|' \"$(case a in a) printf '%s' {{.inputs.v}};; esac)\""),
            format!("{NASTY}|")
        );
        assert_eq!(run("printf '%s|' \"${X:-{{.inputs.w}}}\""), "src/a-1.rs|");
        assert_eq!(run("printf '%s|' \\{{.inputs.w}}"), "src/a-1.rs|");
        // `\\` is an escaped backslash: the action after it is a bare word again.
        assert_eq!(run("printf '%s|' \\\\{{.inputs.v}}"), format!("\\{NASTY}|"));
    }

    #[test]
    fn without_the_mode_the_value_is_inserted_raw() {
        // Proves the tests above can fail: the plain render lets the value break out.
        let d = data();
        let text = GoTemplates::new()
            .render_shell("printf '%s|' {{.inputs.v}}", &d.scope())
            .unwrap_or_default();
        assert!(text.contains("; touch $TMPDIR/pwned"), "{text}");
    }
}

// The fuzzer run by hand reports its progress and findings on stderr.
#[cfg(test)]
#[allow(clippy::print_stderr)]
#[path = "shell_fuzz_tests.rs"]
mod fuzz_tests;
