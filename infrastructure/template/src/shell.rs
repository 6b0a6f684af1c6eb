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
