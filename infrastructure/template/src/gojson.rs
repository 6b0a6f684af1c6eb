//! JSON text the way Go's `encoding/json` writes it: compact, object keys sorted, `<`, `>`
//! and `&` escaped as `\u003c`, `\u003e`, `\u0026`, integral floats without a fraction.
//!
//! Used for composite loop items (§2.6) and the `json` template function (§2.4). Keys are
//! sorted here because serde_json may keep insertion order (`preserve_order`).

use std::fmt::Write as _;

use gtmpl_value_ng::NumberKind;
use gtmpl_value_ng::Value as TValue;
use serde_json::Value as JValue;

/// Appends `s` as a Go-escaped JSON string literal.
pub(crate) fn write_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Appends a float as Go's JSON encoder does (`3`, `2.5`, `1e+21`, `1e-7`).
pub(crate) fn write_float(out: &mut String, f: f64) {
    if !f.is_finite() {
        // Go refuses these; JSON has no spelling for them.
        out.push_str("null");
        return;
    }
    let abs = f.abs();
    if abs == 0.0 || (1e-6..1e21).contains(&abs) {
        let _ = write!(out, "{f}");
    } else {
        let text = format!("{f:e}");
        match text.split_once('e') {
            Some((mantissa, exp)) if !exp.starts_with('-') => {
                let _ = write!(out, "{mantissa}e+{exp}");
            }
            _ => out.push_str(&text),
        }
    }
}

/// Appends `v` as Go-style compact JSON with sorted keys.
pub(crate) fn write_json(out: &mut String, v: &JValue) {
    match v {
        JValue::Null => out.push_str("null"),
        JValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        JValue::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => write_float(out, f),
            _ => {
                let _ = write!(out, "{n}");
            }
        },
        JValue::String(s) => write_str(out, s),
        JValue::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(out, item);
            }
            out.push(']');
        }
        JValue::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_str(out, key);
                out.push(':');
                if let Some(item) = map.get(key) {
                    write_json(out, item);
                }
            }
            out.push('}');
        }
    }
}

/// `v` as Go-style compact JSON with sorted keys.
pub(crate) fn to_json(v: &JValue) -> String {
    let mut out = String::new();
    write_json(&mut out, v);
    out
}

/// Appends a template value as Go-style JSON.
///
/// # Errors
/// A message when the value holds a function, which JSON cannot carry.
pub(crate) fn write_template_value(out: &mut String, v: &TValue) -> Result<(), String> {
    match v {
        TValue::NoValue | TValue::Nil => out.push_str("null"),
        TValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        TValue::String(s) => write_str(out, s),
        TValue::Number(n) => match n.kind() {
            NumberKind::Unsigned(u) => {
                let _ = write!(out, "{u}");
            }
            NumberKind::Signed(i) => {
                let _ = write!(out, "{i}");
            }
            NumberKind::Float(f) => write_float(out, f),
        },
        TValue::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_template_value(out, item)?;
            }
            out.push(']');
        }
        TValue::Object(map) | TValue::Map(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_str(out, key);
                out.push(':');
                if let Some(item) = map.get(key) {
                    write_template_value(out, item)?;
                }
            }
            out.push('}');
        }
        TValue::Function(_) => return Err("json: a function cannot be encoded".to_owned()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn objects_are_compact_with_sorted_keys_and_html_escapes() {
        let v = json!({"name": "S1", "a": [1, 2.5, true, null], "h": "<a&b>"});
        assert_eq!(
            to_json(&v),
            r#"{"a":[1,2.5,true,null],"h":"\u003ca\u0026b\u003e","name":"S1"}"#
        );
    }

    #[test]
    fn floats_follow_go() {
        let mut s = String::new();
        for f in [3.0, 2.5, 1e21, 1e-7, 0.0, -4.0] {
            write_float(&mut s, f);
            s.push(' ');
        }
        assert_eq!(s, "3 2.5 1e+21 1e-7 0 -4 ");
    }

    #[test]
    fn control_characters_are_escaped() {
        let mut s = String::new();
        write_str(&mut s, "a\"b\\c\nd\u{1}");
        assert_eq!(s, r#""a\"b\\c\nd\u0001""#);
    }
}
