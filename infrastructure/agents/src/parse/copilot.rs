//! `copilot -p <prompt> --output-format=json --silent`.
//!
//! Events: `assistant.message` (`data.content`, `data.outputTokens`), `tool.execution_start`
//! (`data.toolName`, and `data.toolCallId` / `data.arguments` when present), `result`
//! (`sessionId`). Output: the content of the **last** `assistant.message`; tokens: its
//! `outputTokens` (output only; 0 means "not reported").
//!
//! Source: spec/workflow.md §5.2 "github_copilot".

use awf_domain::ports::agent::AgentChunk;
use serde::Deserialize;
use serde_json::Value;

use super::LineParser;
use super::Parsed;
use super::Usage;
use super::event_type;

/// Parser state of one copilot stream.
#[derive(Debug, Default)]
pub struct State {
    session_id: Option<String>,
    last_message: Option<String>,
    output_tokens: u64,
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
struct DataEvent {
    #[serde(default)]
    data: Option<Data>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(default)]
    content: Option<String>,
    #[serde(rename = "outputTokens", default)]
    output_tokens: Option<u64>,
    #[serde(rename = "toolName", default)]
    tool_name: Option<String>,
    #[serde(rename = "toolCallId", default)]
    tool_call_id: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Deserialize)]
struct ResultEvent {
    #[serde(rename = "sessionId", default)]
    session_id: Option<String>,
}

impl LineParser for State {
    fn parse_line_into(&mut self, line: &str, out: &mut Vec<AgentChunk>) {
        let Some(kind) = event_type(line) else {
            return;
        };
        match kind.as_ref() {
            "assistant.message" => {
                let Ok(DataEvent { data: Some(d) }) = serde_json::from_str(line) else {
                    return;
                };
                if let Some(t) = d.content.filter(|t| !t.is_empty()) {
                    out.push(AgentChunk::Message(t.clone()));
                    self.last_message = Some(t);
                }
                self.output_tokens = d.output_tokens.unwrap_or(0);
            }
            "tool.execution_start" => {
                let Ok(DataEvent { data: Some(d) }) = serde_json::from_str(line) else {
                    return;
                };
                out.push(AgentChunk::ToolCall {
                    id: d.tool_call_id.unwrap_or_default(),
                    name: d.tool_name.unwrap_or_default(),
                    input: d.arguments.unwrap_or(Value::Null),
                });
            }
            "result" if self.session_id.is_none() => {
                if let Ok(ev) = serde_json::from_str::<ResultEvent>(line) {
                    self.session_id = ev.session_id.filter(|s| !s.is_empty());
                }
            }
            _ => {}
        }
    }

    fn finish(self) -> Parsed {
        Parsed {
            output: self.last_message,
            response: None,
            usage: (self.output_tokens > 0).then_some(Usage {
                input: 0,
                output: self.output_tokens,
                total: None,
            }),
            session_id: self.session_id,
            error: None,
            failed: false,
        }
    }
}
