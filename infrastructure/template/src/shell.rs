//! Shell-aware rendering of command text: a composite loop item (printed as compact JSON)
//! that sits inside a double-quoted shell string has its `\ " $ `` ` escaped, so
//! `echo "Item: {{.loop.Item}}"` prints `Item: {"name":"S1"}` as the user wrote it, instead
//! of the shell eating the JSON's quotes. Nothing else changes: values outside double quotes
//! and all other values are inserted exactly as rendered.
//!
//! Source: shared conformance case C20; recorded in docs/compatibility.md.

/// Name of the template function that escapes a composite loop item for double quotes.
pub(crate) const SHELL_DQ_FUNC: &str = "awfShellDq";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Quote {
    None,
    Single,
    Double,
}

/// Rewrites `{{ <loop item ref> }}` actions that sit inside double quotes (in the shell sense
/// of the surrounding literal text) to `{{ awfShellDq (<ref>) }}`.
pub(crate) fn quote_loop_items(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("{{") || !text.contains('"') {
        return std::borrow::Cow::Borrowed(text);
    }
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 16);
    let mut changed = false;
    let mut quote = Quote::None;
    let mut i = 0usize;
    while i < b.len() {
        if b[i] == b'{' && b.get(i + 1) == Some(&b'{') {
            let end = action_end(b, i + 2);
            let action = &text[i..end];
            if quote == Quote::Double
                && let Some(rewritten) = rewrite_action(action)
            {
                out.push_str(&rewritten);
                changed = true;
            } else {
                out.push_str(action);
            }
            i = end;
            continue;
        }
        let c = b[i];
        match (quote, c) {
            (Quote::None, b'\\') | (Quote::Double, b'\\') => {
                let n = next_char_len(text, i + 1);
                out.push_str(&text[i..(i + 1 + n).min(text.len())]);
                i += 1 + n;
                continue;
            }
            (Quote::None, b'\'') => quote = Quote::Single,
            (Quote::None, b'"') => quote = Quote::Double,
            (Quote::Single, b'\'') | (Quote::Double, b'"') => quote = Quote::None,
            _ => {}
        }
        let n = next_char_len(text, i).max(1);
        out.push_str(&text[i..i + n]);
        i += n;
    }
    if changed {
        std::borrow::Cow::Owned(out)
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

fn next_char_len(text: &str, at: usize) -> usize {
    text.get(at..)
        .and_then(|s| s.chars().next())
        .map_or(0, char::len_utf8)
}

/// Index just past the `}}` closing the action that starts before `from`.
fn action_end(b: &[u8], from: usize) -> usize {
    let mut j = from;
    while j < b.len() {
        match b[j] {
            b'}' if b.get(j + 1) == Some(&b'}') => return j + 2,
            q @ (b'"' | b'\'' | b'`') => {
                j += 1;
                while j < b.len() && b[j] != q {
                    if b[j] == b'\\' && q != b'`' {
                        j += 1;
                    }
                    j += 1;
                }
                j += 1;
            }
            _ => j += 1,
        }
    }
    b.len()
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

/// Where a value lands in the shell text, as the literal text around it says.
#[derive(Clone, PartialEq, Eq, Debug)]
enum Ctx {
    /// A bare word; `subst` when inside `$( … )` (closed by the `)` at `depth` 0).
    Unquoted { subst: bool, depth: u32 },
    /// Inside `'…'`.
    Single,
    /// Inside `"…"`.
    Double,
    /// Inside `` `…` ``.
    Backtick,
    /// A here-document body: `quoted` when its delimiter was quoted (`<<'EOF'`), so nothing
    /// in it expands; `strip` for `<<-` (leading tabs of the closing line are ignored).
    Heredoc {
        quoted: bool,
        strip: bool,
        delim: String,
    },
}

impl Ctx {
    /// The context argument of [`SHELL_Q_FUNC`].
    fn tag(&self) -> String {
        match self {
            Ctx::Unquoted { .. } => "u".to_owned(),
            Ctx::Single => "s".to_owned(),
            Ctx::Double => "d".to_owned(),
            Ctx::Backtick => "b".to_owned(),
            Ctx::Heredoc { quoted: false, .. } => "h".to_owned(),
            Ctx::Heredoc {
                quoted: true,
                delim,
                ..
            } => format!("H{delim}"),
        }
    }
}

/// Rewrites every value action of shell command text to `{{ awfShellQ "<ctx>" (<pipeline>) }}`
/// (`shell_quote: true`), the context being where the action sits in the shell sense of the
/// literal text around it. Control actions (`if`, `else`, `end`, `range`, `with`,
/// `define`, `template`, `block`, `break`, `continue`), comments, variable assignments and
/// pipelines already ending in `shell_quote`/`escape` are left as written.
pub(crate) fn quote_values(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("{{") {
        return std::borrow::Cow::Borrowed(text);
    }
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 32);
    let mut stack: Vec<Ctx> = vec![Ctx::Unquoted {
        subst: false,
        depth: 0,
    }];
    // Here-documents announced on the current line, opened at its end.
    let mut pending: Vec<Ctx> = Vec::new();
    let mut line_start = true;
    let mut i = 0usize;
    while i < b.len() {
        if b[i] == b'{' && b.get(i + 1) == Some(&b'{') {
            let end = action_end(b, i + 2);
            let action = &text[i..end];
            let ctx = stack.last().cloned().unwrap_or(Ctx::Unquoted {
                subst: false,
                depth: 0,
            });
            match quote_action(action, &ctx) {
                Some(rewritten) => out.push_str(&rewritten),
                None => out.push_str(action),
            }
            line_start = false;
            i = end;
            continue;
        }
        let top = stack.last().cloned().unwrap_or(Ctx::Unquoted {
            subst: false,
            depth: 0,
        });
        if let Ctx::Heredoc { strip, delim, .. } = &top
            && line_start
        {
            let mut j = i;
            if *strip {
                while b.get(j) == Some(&b'\t') {
                    j += 1;
                }
            }
            let rest = &text[j..];
            if let Some(after) = rest.strip_prefix(delim.as_str())
                && (after.is_empty() || after.starts_with('\n'))
            {
                let stop = j + delim.len();
                out.push_str(&text[i..stop]);
                i = stop;
                stack.pop();
                if !pending.is_empty() {
                    stack.push(pending.remove(0));
                }
                line_start = false;
                continue;
            }
        }
        let c = b[i];
        let n = next_char_len(text, i).max(1);
        let mut consumed = n;
        match (&top, c) {
            (Ctx::Single, b'\'') => {
                stack.pop();
            }
            (Ctx::Single, _) => {}
            (Ctx::Heredoc { quoted: false, .. }, b'\\')
            | (Ctx::Double, b'\\')
            | (Ctx::Unquoted { .. }, b'\\')
            | (Ctx::Backtick, b'\\') => {
                consumed = 1 + next_char_len(text, i + 1);
            }
            (Ctx::Heredoc { .. }, _) => {}
            (Ctx::Double, b'"') => {
                stack.pop();
            }
            (Ctx::Backtick, b'`') => {
                stack.pop();
            }
            (Ctx::Double | Ctx::Unquoted { .. } | Ctx::Backtick, b'$')
                if b.get(i + 1) == Some(&b'(') =>
            {
                stack.push(Ctx::Unquoted {
                    subst: true,
                    depth: 0,
                });
                consumed = 2;
            }
            (Ctx::Double | Ctx::Unquoted { .. }, b'`') => stack.push(Ctx::Backtick),
            (Ctx::Unquoted { .. } | Ctx::Backtick, b'#')
                if i == 0 || matches!(b[i - 1], b' ' | b'\t' | b'\n' | b';' | b'&' | b'|') =>
            {
                // A comment runs to the end of the line; quotes in it open nothing.
                let end = text[i..].find('\n').map_or(text.len(), |k| i + k);
                let end = text[i..end].find("{{").map_or(end, |k| i + k);
                consumed = end - i;
            }
            (Ctx::Unquoted { .. } | Ctx::Backtick, b'\'') => stack.push(Ctx::Single),
            (Ctx::Unquoted { .. } | Ctx::Backtick, b'"') => stack.push(Ctx::Double),
            (Ctx::Unquoted { subst: true, depth }, b'(') => {
                let depth = depth + 1;
                if let Some(last) = stack.last_mut() {
                    *last = Ctx::Unquoted { subst: true, depth };
                }
            }
            (Ctx::Unquoted { subst: true, depth }, b')') => {
                if *depth == 0 {
                    stack.pop();
                } else {
                    let depth = depth - 1;
                    if let Some(last) = stack.last_mut() {
                        *last = Ctx::Unquoted { subst: true, depth };
                    }
                }
            }
            (Ctx::Unquoted { .. } | Ctx::Backtick, b'<')
                if b.get(i + 1) == Some(&b'<') && b.get(i + 2) != Some(&b'<') =>
            {
                let (heredoc, len) = heredoc_start(text, i + 2);
                if let Some(h) = heredoc {
                    pending.push(h);
                }
                consumed = 2 + len;
            }
            _ => {}
        }
        let stop = (i + consumed).min(text.len());
        let piece = &text[i..stop];
        out.push_str(piece);
        line_start = piece.ends_with('\n');
        if line_start
            && !pending.is_empty()
            && matches!(stack.last(), Some(Ctx::Unquoted { .. } | Ctx::Backtick))
        {
            stack.push(pending.remove(0));
        }
        i = stop;
    }
    std::borrow::Cow::Owned(out)
}

/// Reads the delimiter after `<<` at `from`: the here-document it opens (or `None` when no
/// word follows) and how many bytes the `-`, blanks and word take.
fn heredoc_start(text: &str, from: usize) -> (Option<Ctx>, usize) {
    let b = text.as_bytes();
    let mut j = from;
    let strip = b.get(j) == Some(&b'-');
    if strip {
        j += 1;
    }
    while matches!(b.get(j), Some(b' ' | b'\t')) {
        j += 1;
    }
    let mut delim = String::new();
    let mut quoted = false;
    while j < b.len() {
        match b[j] {
            q @ (b'\'' | b'"') => {
                quoted = true;
                j += 1;
                let start = j;
                while j < b.len() && b[j] != q {
                    j += 1;
                }
                delim.push_str(&text[start..j.min(text.len())]);
                j = (j + 1).min(b.len());
            }
            b'\\' => {
                quoted = true;
                j += 1;
            }
            b' ' | b'\t' | b'\n' | b';' | b'|' | b'&' | b'<' | b'>' | b'(' | b')' => break,
            _ => {
                let n = next_char_len(text, j).max(1);
                delim.push_str(&text[j..j + n]);
                j += n;
            }
        }
    }
    if delim.is_empty() || delim.contains("{{") {
        return (None, j - from);
    }
    (
        Some(Ctx::Heredoc {
            quoted,
            strip,
            delim,
        }),
        j - from,
    )
}

/// `{{ pipeline }}` → `{{ awfShellQ "<ctx>" (pipeline) }}` for a value action; `None` for
/// control actions, comments, assignments and already quoted pipelines.
fn quote_action(action: &str, ctx: &Ctx) -> Option<String> {
    let inner = action.strip_prefix("{{")?.strip_suffix("}}")?;
    let (lead, inner) = match inner.strip_prefix('-') {
        Some(rest) if rest.starts_with([' ', '\t', '\n']) => ("-", rest),
        _ => ("", inner),
    };
    let (inner, trail) = match inner.strip_suffix('-') {
        Some(rest) if rest.ends_with([' ', '\t', '\n']) => (rest, "-"),
        _ => (inner, ""),
    };
    let r = inner.trim();
    if !awf_domain::validate::prints_value(r) {
        return None;
    }
    let tag = ctx.tag().replace('\\', "\\\\").replace('"', "\\\"");
    Some(format!(
        "{{{{{lead} {SHELL_Q_FUNC} \"{tag}\" ({r}) {trail}}}}}"
    ))
}

/// Quotes `value` for the shell context `tag` (see [`Ctx::tag`]).
///
/// # Errors
/// In a quoted here-document, a value holding a line equal to the delimiter (it would end
/// the document early and run the rest as commands).
pub(crate) fn quote_for(tag: &str, value: &str) -> Result<String, String> {
    let single = || crate::functions::single_quote(value);
    Ok(match tag {
        "s" => format!("'{}'", single()),
        "d" => format!("\"{}\"", single()),
        "b" => single().replace('\\', "\\\\").replace('`', "\\`"),
        "h" => {
            let mut out = String::with_capacity(value.len() + 8);
            for c in value.chars() {
                if matches!(c, '\\' | '$' | '`') {
                    out.push('\\');
                }
                out.push(c);
            }
            out
        }
        t if t.starts_with('H') => {
            let delim = &t[1..];
            if value
                .split('\n')
                .any(|l| l == delim || l.trim_start_matches('\t') == delim)
            {
                return Err(format!(
                    "shell_quote: a value holds the line {delim:?}, which would end the here-document"
                ));
            }
            value.to_owned()
        }
        _ => single(),
    })
}

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
