//! `vibe --prompt … --output text|json|streaming`.
//!
//! `text`: stdout is the answer (each line is delivered as a message piece). `streaming`:
//! NDJSON envelopes; an envelope is assistant text when it (or its `message`) has
//! `role: "assistant"`, the text being `content` (a string or `text` blocks), `text` or
//! `delta.text`. `json`: one JSON document (object or array of such envelopes). Output is the
//! last assistant text found, else the plain stdout; trimmed. Response is the output parsed as
//! a JSON object. vibe reports no tokens and no session id.
//!
//! Source: spec/workflow.md §5.2 "mistral_vibe".

use awf_domain::ports::agent::AgentChunk;
use serde_json::Map;
use serde_json::Value;

use super::LineParser;
use super::Parsed;
use super::json_object;

/// The `--output` mode vibe was run with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Plain text.
    #[default]
    Text,
    /// One JSON document at the end.
    Json,
    /// NDJSON envelopes.
    Streaming,
}

/// Parser state of one vibe stream.
#[derive(Debug, Default)]
pub struct State {
    mode: Mode,
    raw: String,
    last_streamed: Option<String>,
}

impl State {
    /// A parser for `mode`.
    pub fn new(mode: Mode) -> Self {
        Self {
            mode,
            ..Self::default()
        }
    }
}

/// Parses one line; see the module docs.
pub fn parse_line(state: &mut State, line: &str) -> Vec<AgentChunk> {
    let mut out = Vec::new();
    state.parse_line_into(line, &mut out);
    out
}

/// Ends the stream.
pub fn finish(state: State) -> Parsed {
    state.finish()
}

fn text_of(content: Option<&Value>) -> Option<String> {
    match content? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Array(blocks) => {
            let t: String = blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect();
            (!t.is_empty()).then_some(t)
        }
        _ => None,
    }
}

fn is_assistant(o: Option<&Map<String, Value>>) -> bool {
    o.and_then(|o| o.get("role")).and_then(Value::as_str) == Some("assistant")
}

/// The assistant text of one envelope, or of the last envelope of an array that has one.
pub(crate) fn assistant_text(v: &Value) -> Option<String> {
    match v {
        Value::Array(items) => items.iter().filter_map(assistant_text).next_back(),
        Value::Object(o) => {
            let message = o.get("message").and_then(Value::as_object);
            if !is_assistant(Some(o)) && !is_assistant(message) {
                return None;
            }
            text_of(o.get("content"))
                .or_else(|| text_of(o.get("text")))
                .or_else(|| text_of(message.and_then(|m| m.get("content"))))
                .or_else(|| text_of(message.and_then(|m| m.get("text"))))
                .or_else(|| text_of(o.get("delta").and_then(|d| d.get("text"))))
                .or_else(|| {
                    text_of(
                        message
                            .and_then(|m| m.get("delta"))
                            .and_then(|d| d.get("text")),
                    )
                })
        }
        _ => None,
    }
}

impl LineParser for State {
    fn parse_line_into(&mut self, line: &str, out: &mut Vec<AgentChunk>) {
        self.raw.push_str(line);
        self.raw.push('\n');
        match self.mode {
            Mode::Text => out.push(AgentChunk::Message(format!("{line}\n"))),
            Mode::Streaming => {
                let t = line.trim();
                if !t.starts_with('{') {
                    return;
                }
                if let Some(text) = serde_json::from_str::<Value>(t)
                    .ok()
                    .as_ref()
                    .and_then(assistant_text)
                {
                    out.push(AgentChunk::Message(text.clone()));
                    self.last_streamed = Some(text);
                }
            }
            Mode::Json => {}
        }
    }

    fn finish(self) -> Parsed {
        let trimmed = self.raw.trim();
        let found = self.last_streamed.or_else(|| {
            if (trimmed.starts_with('{') || trimmed.starts_with('['))
                && let Ok(v) = serde_json::from_str::<Value>(trimmed)
            {
                return assistant_text(&v);
            }
            trimmed
                .lines()
                .filter(|l| l.trim_start().starts_with('{'))
                .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
                .filter_map(|v| assistant_text(&v))
                .next_back()
        });
        let output = found.map_or_else(|| trimmed.to_owned(), |t| t.trim().to_owned());
        let response = json_object(&output);
        Parsed {
            output: (!output.is_empty()).then_some(output),
            response,
            usage: None,
            session_id: None,
            error: None,
            failed: false,
        }
    }
}
