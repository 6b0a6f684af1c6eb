//! Pure parsers of the agent CLIs' stdout, one module per CLI.
//!
//! Each module has a `State` (start with `State::default()`, or `State::new(..)` where the
//! CLI's output mode matters), a `parse_line(&mut State, line) -> Vec<AgentChunk>` that turns
//! one stdout line into the chunks it carries (assistant text → [`AgentChunk::Message`],
//! thinking → [`AgentChunk::Thought`], tool use → [`AgentChunk::ToolCall`], tool result →
//! [`AgentChunk::ToolResult`]), and a `finish(State) -> Parsed` that gives the final answer,
//! the provider's structured response, token usage and session id.
//!
//! Lines are parsed into small borrowed structs; lines whose top-level `"type"` is not needed
//! are skipped after a prefix check without a JSON parse. [`LineSplitter`] cuts a stream that
//! arrives in arbitrary chunks into lines.
//!
//! Source: spec/workflow.md §5.2; real samples in spec/agents-offline.md §1.4, §1.5, §2.4,
//! §2.5, §3.4, §3.5, §4.3, §4.4.

use std::borrow::Cow;
use std::fmt;

use awf_domain::ports::agent::AgentChunk;
use serde::Deserialize;
use serde::Deserializer;
use serde::de::Visitor;
use serde_json::Value;

pub mod claude;
pub mod codex;
pub mod copilot;
pub mod gemini;
pub mod opencode;
pub mod vibe;

/// Token counts a CLI reported (never estimated).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Input (prompt) tokens, cache reads and writes included.
    pub input: u64,
    /// Output (completion) tokens.
    pub output: u64,
    /// Total as reported by the CLI, when it reports one (else input + output is used).
    pub total: Option<u64>,
}

impl Usage {
    /// `total`, or `input + output` when the CLI gave none.
    pub fn total(&self) -> u64 {
        self.total.unwrap_or(self.input.saturating_add(self.output))
    }
}

/// What a whole stdout stream said, once it ended.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Parsed {
    /// The final answer text, when the stream carried one.
    pub output: Option<String>,
    /// Provider-specific structured response (claude: the last `result` event; codex/vibe:
    /// the answer parsed as a JSON object).
    pub response: Option<Value>,
    /// Reported token usage, if any.
    pub usage: Option<Usage>,
    /// The CLI's session id (to resume), if any.
    pub session_id: Option<String>,
    /// An error the CLI reported in its output (API error, failed turn).
    pub error: Option<String>,
    /// Whether the CLI reported that the whole run failed (claude `is_error`, codex
    /// `turn.failed`, gemini `result.status == "error"`).
    pub failed: bool,
}

/// A parser fed one stdout line at a time.
pub trait LineParser: Send {
    /// Parses one line (without its `\n`) and appends the chunks it carries to `out`.
    fn parse_line_into(&mut self, line: &str, out: &mut Vec<AgentChunk>);
    /// Ends the stream.
    fn finish(self) -> Parsed;
}

/// Parses a whole recorded stream with `parser`: every chunk in order, then the result.
pub fn parse_all<P: LineParser>(mut parser: P, text: &str) -> (Vec<AgentChunk>, Parsed) {
    let mut chunks = Vec::new();
    let mut splitter = LineSplitter::default();
    splitter.push(text, |line| parser.parse_line_into(line, &mut chunks));
    splitter.finish(|line| parser.parse_line_into(line, &mut chunks));
    (chunks, parser.finish())
}

/// Cuts text arriving in arbitrary chunks into lines (`\n`, an optional `\r` before it is
/// dropped). A line split across chunks is buffered until its end arrives.
#[derive(Debug, Default)]
pub struct LineSplitter {
    partial: String,
}

impl LineSplitter {
    /// Feeds a chunk; calls `f` for each line it completes.
    pub fn push(&mut self, chunk: &str, mut f: impl FnMut(&str)) {
        let mut rest = chunk;
        if !self.partial.is_empty() {
            match rest.find('\n') {
                None => {
                    self.partial.push_str(rest);
                    return;
                }
                Some(i) => {
                    self.partial.push_str(&rest[..i]);
                    f(trim_cr(&self.partial));
                    self.partial.clear();
                    rest = &rest[i + 1..];
                }
            }
        }
        while let Some(i) = rest.find('\n') {
            f(trim_cr(&rest[..i]));
            rest = &rest[i + 1..];
        }
        self.partial.push_str(rest);
    }

    /// Ends the stream; calls `f` with the last line if it had no `\n`.
    pub fn finish(&mut self, mut f: impl FnMut(&str)) {
        if !self.partial.is_empty() {
            f(trim_cr(&self.partial));
            self.partial.clear();
        }
    }
}

fn trim_cr(line: &str) -> &str {
    line.strip_suffix('\r').unwrap_or(line)
}

/// The top-level `"type"` of an NDJSON line when the line starts with `{"type":"…"`
/// (how every CLI we parse writes its events); `None` means "parse to find out".
pub(crate) fn sniff_type(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("{\"type\":\"")?;
    let end = rest.find('"')?;
    let kind = &rest[..end];
    if kind.contains('\\') {
        None
    } else {
        Some(kind)
    }
}

/// Only the `"type"` of an event (everything else skipped).
#[derive(Deserialize)]
pub(crate) struct TypeOnly<'a> {
    #[serde(rename = "type", borrow, default)]
    pub kind: Option<Str<'a>>,
}

/// The top-level type of a JSON line: sniffed, else parsed. `None` for non-JSON lines.
pub(crate) fn event_type(line: &str) -> Option<Cow<'_, str>> {
    let line = line.trim_start();
    if !line.starts_with('{') {
        return None;
    }
    if let Some(kind) = sniff_type(line) {
        return Some(Cow::Borrowed(kind));
    }
    serde_json::from_str::<TypeOnly<'_>>(line)
        .ok()?
        .kind
        .map(|s| s.0)
}

/// A string that borrows from the input when it has no escapes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Str<'a>(pub Cow<'a, str>);

impl Str<'_> {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                v: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// Text of a JSON value: a string as is, a number or bool formatted, `null` empty, anything
/// else as compact JSON.
pub(crate) fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Text of a tool result's `content`: a string, or the `text` of every text block joined by
/// newlines, else compact JSON.
pub(crate) fn content_text(v: &Value) -> String {
    match v {
        Value::Array(blocks) => {
            let texts: Vec<&str> = blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect();
            if texts.is_empty() && !blocks.is_empty() {
                v.to_string()
            } else {
                texts.join("\n")
            }
        }
        other => value_text(other),
    }
}

/// `text` parsed as a JSON object when it (trimmed) starts with `{`.
pub(crate) fn json_object(text: &str) -> Option<Value> {
    let t = text.trim();
    if !t.starts_with('{') {
        return None;
    }
    match serde_json::from_str::<Value>(t) {
        Ok(v @ Value::Object(_)) => Some(v),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn usage_totals_saturate_on_absurd_counts() {
        let u = super::Usage {
            input: u64::MAX,
            output: u64::MAX,
            total: None,
        };
        assert_eq!(u.total(), u64::MAX);
    }

    use super::*;

    #[test]
    fn splitter_joins_lines_across_chunks() {
        let mut s = LineSplitter::default();
        let mut lines = Vec::new();
        for chunk in ["{\"a\"", ":1}\n{\"b\":2}\r\n{\"c", "\":3}\n\n{\"d\":4}"] {
            s.push(chunk, |l| lines.push(l.to_owned()));
        }
        s.finish(|l| lines.push(l.to_owned()));
        assert_eq!(
            lines,
            ["{\"a\":1}", "{\"b\":2}", "{\"c\":3}", "", "{\"d\":4}"]
        );
    }

    #[test]
    fn sniff_reads_leading_type_only() {
        assert_eq!(sniff_type(r#"{"type":"result","x":1}"#), Some("result"));
        assert_eq!(sniff_type(r#"{"x":1,"type":"result"}"#), None);
        assert_eq!(
            event_type(r#"{"x":{"type":"inner"},"type":"outer"}"#).as_deref(),
            Some("outer")
        );
        assert_eq!(event_type("plain text"), None);
    }

    #[test]
    fn content_text_joins_text_blocks() {
        let v: Value = serde_json::json!([{"type":"text","text":"a"},{"type":"text","text":"b"}]);
        assert_eq!(content_text(&v), "a\nb");
        assert_eq!(content_text(&Value::from("x")), "x");
    }
}
