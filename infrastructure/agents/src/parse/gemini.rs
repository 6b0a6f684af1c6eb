//! `gemini --output-format stream-json … -p <prompt>`.
//!
//! Events: `init` (`session_id`), `message` (`role`, `content`, `delta: true` for streamed
//! pieces), `tool_use` (`tool_name`, `tool_id`, `parameters`), `tool_result` (`tool_id`,
//! `status`, `output`, `error`), `result` (`status`, `stats.input_tokens`/`output_tokens`/
//! `total_tokens`, `error.message`). Output: the assistant messages; consecutive `delta`
//! pieces are concatenated, separate messages (e.g. before and after a tool call) are joined
//! by a newline.
//!
//! Source: spec/workflow.md §5.2 "gemini"; agents-offline.md §3.4, §3.5, §3.7.

use awf_domain::ports::agent::AgentChunk;
use serde::Deserialize;
use serde_json::Value;

use super::LineParser;
use super::Parsed;
use super::Str;
use super::Usage;
use super::event_type;
use super::value_text;

/// Parser state of one gemini stream.
#[derive(Debug, Default)]
pub struct State {
    session_id: Option<String>,
    segments: Vec<String>,
    /// The last event was an assistant delta (the next delta continues the same segment).
    in_delta: bool,
    usage: Option<Usage>,
    error: Option<String>,
    failed: bool,
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
struct Init<'a> {
    #[serde(borrow, default)]
    session_id: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct MessageEvent<'a> {
    #[serde(borrow, default)]
    role: Option<Str<'a>>,
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    delta: bool,
}

#[derive(Deserialize)]
struct ToolUse {
    #[serde(default)]
    tool_name: String,
    #[serde(default)]
    tool_id: String,
    #[serde(default)]
    parameters: Option<Value>,
}

#[derive(Deserialize)]
struct ToolResult {
    #[serde(default)]
    tool_id: String,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    output: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ResultEvent {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    stats: Option<Stats>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Stats {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    total_tokens: Option<u64>,
}

fn error_message(e: &Value) -> String {
    e.get("message")
        .map(value_text)
        .unwrap_or_else(|| value_text(e))
}

impl LineParser for State {
    fn parse_line_into(&mut self, line: &str, out: &mut Vec<AgentChunk>) {
        let Some(kind) = event_type(line) else {
            return;
        };
        match kind.as_ref() {
            "message" => {
                let Ok(ev) = serde_json::from_str::<MessageEvent<'_>>(line) else {
                    return;
                };
                if ev.role.as_ref().map(Str::as_str) != Some("assistant") {
                    return;
                }
                let text = ev.content.as_ref().map(value_text).unwrap_or_default();
                if text.is_empty() {
                    return;
                }
                out.push(AgentChunk::Message(text.clone()));
                match self.segments.last_mut() {
                    Some(last) if self.in_delta && ev.delta => last.push_str(&text),
                    _ => self.segments.push(text),
                }
                self.in_delta = ev.delta;
            }
            "tool_use" => {
                self.in_delta = false;
                if let Ok(ev) = serde_json::from_str::<ToolUse>(line) {
                    out.push(AgentChunk::ToolCall {
                        id: ev.tool_id,
                        name: ev.tool_name,
                        input: ev.parameters.unwrap_or(Value::Null),
                    });
                }
            }
            "tool_result" => {
                self.in_delta = false;
                if let Ok(ev) = serde_json::from_str::<ToolResult>(line) {
                    let is_error = ev.status.as_deref() != Some("success");
                    let output = match (&ev.output, &ev.error) {
                        (Some(o), _) if !o.is_null() => value_text(o),
                        (_, Some(e)) if !e.is_null() => error_message(e),
                        _ => String::new(),
                    };
                    out.push(AgentChunk::ToolResult {
                        id: ev.tool_id,
                        output,
                        is_error,
                    });
                }
            }
            "init" if self.session_id.is_none() => {
                if let Ok(ev) = serde_json::from_str::<Init<'_>>(line) {
                    self.session_id = ev.session_id.map(|s| s.0.into_owned());
                }
            }
            "result" => {
                self.in_delta = false;
                let Ok(ev) = serde_json::from_str::<ResultEvent>(line) else {
                    return;
                };
                if self.usage.is_none()
                    && let Some(s) = ev.stats
                {
                    self.usage = Some(Usage {
                        input: s.input_tokens.unwrap_or(0),
                        output: s.output_tokens.unwrap_or(0),
                        total: s.total_tokens,
                    });
                }
                if ev.status.as_deref() == Some("error") {
                    self.failed = true;
                    self.error = Some(
                        ev.error
                            .as_ref()
                            .map(error_message)
                            .unwrap_or_else(|| "gemini reported an error".to_owned()),
                    );
                }
            }
            "error" => {
                if let Ok(v) = serde_json::from_str::<Value>(line) {
                    self.error = Some(
                        v.get("error")
                            .or_else(|| v.get("message"))
                            .map(error_message)
                            .unwrap_or_default(),
                    );
                }
            }
            _ => {}
        }
    }

    fn finish(self) -> Parsed {
        Parsed {
            output: (!self.segments.is_empty()).then(|| self.segments.join("\n")),
            response: None,
            usage: self.usage,
            session_id: self.session_id,
            error: self.error,
            failed: self.failed,
        }
    }
}
