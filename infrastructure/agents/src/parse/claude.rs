//! `claude -p … --output-format stream-json --verbose`.
//!
//! Events: `system` (init, carries `session_id`), `assistant` (`message.content` blocks
//! `text`, `thinking`, `tool_use`), `user` (`tool_result` blocks), `result` (final text in
//! `result`, `usage`, `session_id`, `is_error`). Output is the `result` of the **last**
//! `result` event; tokens come from its `usage` (input = `input_tokens` +
//! `cache_creation_input_tokens` + `cache_read_input_tokens`).
//!
//! Source: spec/workflow.md §5.2 "claude"; agents-offline.md §1.4, §1.5, §1.7.

use std::fmt;

use awf_domain::ports::agent::AgentChunk;
use serde::Deserialize;
use serde::Deserializer;
use serde::de::SeqAccess;
use serde::de::Visitor;
use serde_json::Value;

use super::LineParser;
use super::Parsed;
use super::Str;
use super::Usage;
use super::content_text;
use super::event_type;
use super::value_text;

/// Parser state of one claude stream.
#[derive(Debug, Default)]
pub struct State {
    session_id: Option<String>,
    last_result: Option<Value>,
    /// An event array (`--output-format json --verbose`) still being read, line by line.
    array: Option<String>,
}

/// At most this much of an event array is buffered while it spans several lines (bytes).
const MAX_ARRAY_BYTES: usize = 64 * 1024 * 1024;

impl State {
    /// A line of (or the start of) a JSON array of events: each event is parsed as if it
    /// had come on its own line. A pretty-printed array is gathered until it is complete.
    fn array_line(&mut self, line: &str, out: &mut Vec<AgentChunk>) {
        let buf = self.array.get_or_insert_with(String::new);
        buf.push_str(line);
        buf.push('\n');
        match serde_json::from_str::<Vec<Value>>(buf) {
            Ok(events) => {
                self.array = None;
                for ev in events {
                    if ev.is_object() {
                        self.parse_line_into(&ev.to_string(), out);
                    }
                }
            }
            Err(e) if e.is_eof() && buf.len() < MAX_ARRAY_BYTES => {}
            Err(_) => self.array = None,
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

#[derive(Deserialize)]
struct MessageEvent<'a> {
    #[serde(borrow, default)]
    message: Option<Message<'a>>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    content: Blocks<'a>,
}

/// `message.content`: an array of blocks (a plain string is ignored).
#[derive(Default)]
struct Blocks<'a>(Vec<Block<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for Blocks<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Blocks<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("content blocks or a string")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut blocks = Vec::new();
                while let Some(b) = seq.next_element::<Block<'de>>()? {
                    blocks.push(b);
                }
                Ok(Blocks(blocks))
            }
            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Blocks(Vec::new()))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(Blocks(Vec::new()))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Str<'a>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    tool_use_id: Option<String>,
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    is_error: Option<bool>,
}

#[derive(Deserialize)]
struct SessionOnly<'a> {
    #[serde(borrow, default)]
    session_id: Option<Str<'a>>,
}

impl LineParser for State {
    fn parse_line_into(&mut self, line: &str, out: &mut Vec<AgentChunk>) {
        if self.array.is_some() || line.trim_start().starts_with('[') {
            self.array_line(line, out);
            return;
        }
        let Some(kind) = event_type(line) else {
            return;
        };
        match kind.as_ref() {
            "assistant" | "user" => {
                let Ok(ev) = serde_json::from_str::<MessageEvent<'_>>(line) else {
                    return;
                };
                let Some(msg) = ev.message else { return };
                for b in msg.content.0 {
                    match b.kind.as_str() {
                        "text" => {
                            if let Some(t) = b.text.filter(|t| !t.is_empty()) {
                                out.push(AgentChunk::Message(t));
                            }
                        }
                        "thinking" => {
                            if let Some(t) = b.thinking.filter(|t| !t.is_empty()) {
                                out.push(AgentChunk::Thought(t));
                            }
                        }
                        "tool_use" | "server_tool_use" => out.push(AgentChunk::ToolCall {
                            id: b.id.unwrap_or_default(),
                            name: b.name.unwrap_or_default(),
                            input: b.input.unwrap_or(Value::Null),
                        }),
                        "tool_result" => out.push(AgentChunk::ToolResult {
                            id: b.tool_use_id.unwrap_or_default(),
                            output: b.content.as_ref().map(content_text).unwrap_or_default(),
                            is_error: b.is_error.unwrap_or(false),
                        }),
                        _ => {}
                    }
                }
            }
            "system" if self.session_id.is_none() => {
                if let Ok(ev) = serde_json::from_str::<SessionOnly<'_>>(line) {
                    self.session_id = ev.session_id.map(|s| s.0.into_owned());
                }
            }
            "result" => {
                if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(line) {
                    self.last_result = Some(v);
                }
            }
            _ => {}
        }
    }

    fn finish(self) -> Parsed {
        let mut parsed = Parsed {
            session_id: self.session_id,
            ..Parsed::default()
        };
        let Some(result) = self.last_result else {
            return parsed;
        };
        if let Some(id) = result.get("session_id").and_then(Value::as_str) {
            parsed.session_id = Some(id.to_owned());
        }
        let text = result.get("result").map(value_text);
        let is_error = result
            .get("is_error")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if let Some(u) = result.get("usage") {
            let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
            parsed.usage = Some(Usage {
                input: n("input_tokens")
                    .saturating_add(n("cache_creation_input_tokens"))
                    .saturating_add(n("cache_read_input_tokens")),
                output: n("output_tokens"),
                total: None,
            });
        }
        if is_error {
            parsed.failed = true;
            let errors: Vec<String> = result
                .get("errors")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(value_text).collect())
                .unwrap_or_default();
            parsed.error = match (&text, errors.is_empty()) {
                (Some(t), _) if !t.is_empty() => Some(t.clone()),
                (_, false) => Some(errors.join("; ")),
                _ => result
                    .get("subtype")
                    .and_then(Value::as_str)
                    .map(|s| format!("claude reported {s}")),
            };
        }
        parsed.output = text;
        parsed.response = Some(result);
        parsed
    }
}
