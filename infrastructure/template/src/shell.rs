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
                match quote_action(a.text, &a.context, a.inside_backticks, false) {
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
/// `$( )`), `s` single quotes, `d` double quotes, `b` backticks, `h<delimiter>` an unquoted
/// here-document, `H<delimiter>` a quoted one, `c` a `#` comment (`r` there for a value
/// quoted already or rendered without the mode), `p` inside `${ … }`, `x` right after an
/// escaping backslash, `$` right after a `$`, `A` inside `$'…'`, `a` arithmetic, `B` after
/// a template branch that leaves the shell quoting uneven. A context
/// nested in backticks (`` `echo "{{x}}"` ``) has `` ` `` before its letter: the quoted
/// value then has its `\` and `` ` `` escaped once more for the backticks.
fn tag(ctx: &ShellContext, inside_backticks: bool) -> String {
    let base = match ctx {
        ShellContext::Unquoted { .. } => "u".to_owned(),
        ShellContext::SingleQuoted => "s".to_owned(),
        ShellContext::DoubleQuoted => "d".to_owned(),
        ShellContext::Backtick => return "b".to_owned(),
        ShellContext::Heredoc {
            quoted: false,
            delimiter,
            ..
        } => format!("h{delimiter}"),
        ShellContext::Heredoc {
            quoted: true,
            delimiter,
            ..
        } => format!("H{delimiter}"),
        ShellContext::Comment => "c".to_owned(),
        ShellContext::ParameterExpansion => "p".to_owned(),
        ShellContext::AfterBackslash => "x".to_owned(),
        ShellContext::AfterDollar => "$".to_owned(),
        ShellContext::AnsiC => "A".to_owned(),
        ShellContext::Arithmetic => "a".to_owned(),
        ShellContext::UnevenBranch { .. } => "B".to_owned(),
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
/// `shell_quote`/`escape` where they are a bare word. Such a pipeline anywhere else (inside
/// quotes, backticks or a here-document, where its single quotes do not protect the value)
/// is quoted for its context like any other value: its quotes print literally and nothing in
/// the value runs.
pub(crate) fn quote_values(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("{{") {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 32);
    for piece in shell_pieces(text) {
        match piece {
            ShellPiece::Text(t) => out.push_str(t),
            ShellPiece::Action(a) => {
                match quote_action(a.text, &a.context, a.inside_backticks, true) {
                    Some(rewritten) => out.push_str(&rewritten),
                    None => out.push_str(a.text),
                }
            }
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `{{ pipeline }}` → `{{ awfShellQ "<ctx>" (pipeline) "pipeline" }}` for a value action
/// (the last argument names the value in a refusal); `None` for control actions, comments,
/// assignments and already quoted pipelines. `mode`: `shell_quote: true` (else only values in
/// a `#` comment are rewritten, to have their line breaks turned into spaces).
fn quote_action(
    action: &str,
    ctx: &ShellContext,
    inside_backticks: bool,
    mode: bool,
) -> Option<String> {
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
        _ if !prints && (bare || !quoted) => return None,
        _ => tag(ctx, inside_backticks),
    };
    let lit = |t: &str| t.replace('\\', "\\\\").replace('"', "\\\"");
    Some(format!(
        "{{{{{lead} {SHELL_Q_FUNC} \"{}\" ({r}) \"{}\" {trail}}}}}",
        lit(&tag),
        lit(r)
    ))
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
/// # Errors
/// In a here-document, a value holding a line equal to the delimiter (leading tabs ignored,
/// as `<<-` reads it): it would end the document early and run the rest as commands. Inside
/// `${ … }`, `$'…'`, arithmetic, or right after an escaping backslash or a `$`, a value that
/// is not a plain word ([`awf_domain::validate::plain_word`]): no quoting protects it there
/// (breaker: each ran `$( )` from the value).
pub(crate) fn quote_for(tag: &str, value: &str, what: &str) -> Result<String, String> {
    if let Some(inner) = tag.strip_prefix('`') {
        // Backticks unescape `\\`, `\`` and `\$` in their text before reading it.
        return quote_for(inner, value, what).map(|q| q.replace('\\', "\\\\").replace('`', "\\`"));
    }
    let named = if what.is_empty() {
        "a value".to_owned()
    } else {
        format!("the value of {{{{{what}}}}}")
    };
    let single = || crate::functions::single_quote(value);
    // A line of the value ends the document alone, and its first and last lines may
    // complete one with the text around the action (`E{{x}}` with `OF\n…`; breaker).
    let heredoc_end = |delim: &str| {
        let lines: Vec<&str> = value.split('\n').collect();
        let last = lines.len() - 1;
        let ends = lines.iter().enumerate().any(|(n, l)| {
            let l = l.trim_start_matches('\t');
            l == delim
                || (!l.is_empty()
                    && match (n == 0, n == last) {
                        (true, true) => delim.contains(l),
                        (true, false) => delim.ends_with(l),
                        (false, true) => delim.starts_with(l),
                        (false, false) => false,
                    })
        });
        if ends {
            Err(format!(
                "shell_quote: {named} holds the line {delim:?}, which would end the here-document"
            ))
        } else {
            Ok(())
        }
    };
    Ok(match tag {
        "s" => format!("'{}'", single()),
        "d" => format!("\"{}\"", single()),
        "b" => single().replace('\\', "\\\\").replace('`', "\\`"),
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
        t if t.starts_with('h') => {
            heredoc_end(&t[1..])?;
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
            heredoc_end(&t[1..])?;
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
