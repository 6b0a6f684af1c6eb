//! `opencode run <prompt> --format json`.
//!
//! Events (each carries `sessionID`): `step_start`, `text` (`part.text`), `tool_use`
//! (`part.tool`, `part.callID`, `part.state.{status,input,output,error}`), `step_finish`
//! (`part.tokens.{input,output,total}`), `error` (`error.data.message`). Output: the text
//! parts joined by newlines; tokens: the `step_finish` tokens summed over steps.
//!
//! Source: spec/workflow.md §5.2 "opencode"; agents-offline.md §4.3, §4.4, §4.6.

use awf_domain::ports::agent::AgentChunk;
use serde::Deserialize;
use serde_json::Value;

use super::LineParser;
use super::Parsed;
use super::Str;
use super::Usage;
use super::event_type;
use super::value_text;

/// Parser state of one opencode stream.
#[derive(Debug, Default)]
pub struct State {
    session_id: Option<String>,
    texts: Vec<String>,
    usage: Option<Usage>,
    error: Option<String>,
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
struct Event<'a> {
    #[serde(rename = "sessionID", borrow, default)]
    session_id: Option<Str<'a>>,
    #[serde(default)]
    part: Option<Part>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Part {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    tool: Option<String>,
    #[serde(rename = "callID", default)]
    call_id: Option<String>,
    #[serde(default)]
    state: Option<ToolState>,
    #[serde(default)]
    tokens: Option<Tokens>,
}

#[derive(Deserialize)]
struct ToolState {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    output: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Tokens {
    #[serde(default)]
    input: u64,
    #[serde(default)]
    output: u64,
    #[serde(default)]
    total: Option<u64>,
}

impl LineParser for State {
    fn parse_line_into(&mut self, line: &str, out: &mut Vec<AgentChunk>) {
        let Some(kind) = event_type(line) else {
            return;
        };
        if !matches!(
            kind.as_ref(),
            "text" | "tool_use" | "step_start" | "step_finish" | "error"
        ) {
            return;
        }
        let Ok(ev) = serde_json::from_str::<Event<'_>>(line) else {
            return;
        };
        if self.session_id.is_none() {
            self.session_id = ev.session_id.map(|s| s.0.into_owned());
        }
        match (kind.as_ref(), ev.part) {
            ("text", Some(part)) => {
                if let Some(t) = part.text.filter(|t| !t.is_empty()) {
                    out.push(AgentChunk::Message(t.clone()));
                    self.texts.push(t);
                }
            }
            ("tool_use", Some(part)) => {
                let id = part.call_id.unwrap_or_default();
                let state = part.state;
                let input = state
                    .as_ref()
                    .and_then(|s| s.input.clone())
                    .unwrap_or(Value::Null);
                out.push(AgentChunk::ToolCall {
                    id: id.clone(),
                    name: part.tool.unwrap_or_default(),
                    input,
                });
                if let Some(s) = state {
                    match s.status.as_deref() {
                        Some("completed") => out.push(AgentChunk::ToolResult {
                            id,
                            output: s.output.as_ref().map(value_text).unwrap_or_default(),
                            is_error: false,
                        }),
                        Some("error") => out.push(AgentChunk::ToolResult {
                            id,
                            output: s.error.as_ref().map(value_text).unwrap_or_default(),
                            is_error: true,
                        }),
                        _ => {}
                    }
                }
            }
            ("step_finish", Some(part)) => {
                if let Some(t) = part.tokens {
                    let acc = self.usage.get_or_insert_with(Usage::default);
                    acc.input = acc.input.saturating_add(t.input);
                    acc.output = acc.output.saturating_add(t.output);
                    acc.total = Some(
                        acc.total
                            .unwrap_or(0)
                            .saturating_add(t.total.unwrap_or(t.input.saturating_add(t.output))),
                    );
                }
            }
            ("error", _) => {
                let msg = ev.error.as_ref().map(|e| {
                    e.pointer("/data/message")
                        .or_else(|| e.get("message"))
                        .map(value_text)
                        .unwrap_or_else(|| value_text(e))
                });
                self.error = msg.or(Some("opencode reported an error".to_owned()));
            }
            _ => {}
        }
    }

    fn finish(self) -> Parsed {
        Parsed {
            output: (!self.texts.is_empty()).then(|| self.texts.join("\n")),
            response: None,
            usage: self.usage,
            session_id: self.session_id,
            error: self.error,
            failed: false,
        }
    }
}
