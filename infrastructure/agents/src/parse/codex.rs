//! `codex exec --json …`.
//!
//! Events: `thread.started` (`thread_id` = session id), `item.started` / `item.completed`
//! (`item.type`, legacy `item.item_type`: `agent_message`/`assistant_message` text,
//! `reasoning` text, `command_execution`, `function_call`, `mcp_tool_call`, … tools, `error`
//! warnings), `turn.completed` (`usage`), `turn.failed` (`error.message`), `error`
//! (`message`). Output is the agent messages joined by newlines; tokens are the
//! `turn.completed` usages summed; Response is the output parsed as a JSON object.
//!
//! Source: spec/workflow.md §5.2 "codex"; agents-offline.md §2.4, §2.5, §2.6.

use std::collections::HashSet;

use awf_domain::ports::agent::AgentChunk;
use serde::Deserialize;
use serde_json::Map;
use serde_json::Value;

use super::LineParser;
use super::Parsed;
use super::Str;
use super::Usage;
use super::content_text;
use super::event_type;
use super::json_object;
use super::value_text;

/// Parser state of one codex stream.
#[derive(Debug, Default)]
pub struct State {
    session_id: Option<String>,
    messages: Vec<String>,
    usage: Option<Usage>,
    failed: Option<String>,
    last_error: Option<String>,
    started: HashSet<String>,
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
struct ThreadStarted<'a> {
    #[serde(borrow, default)]
    thread_id: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct ItemEvent {
    #[serde(default)]
    item: Option<Map<String, Value>>,
}

#[derive(Deserialize)]
struct TurnCompleted {
    #[serde(default)]
    usage: Option<RawUsage>,
}

#[derive(Deserialize)]
struct RawUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
}

#[derive(Deserialize)]
struct ErrorEvent {
    #[serde(default)]
    message: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
}

fn item_kind(item: &Map<String, Value>) -> &str {
    item.get("item_type")
        .or_else(|| item.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn str_field(item: &Map<String, Value>, key: &str) -> String {
    item.get(key)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

/// The name and input a tool item is shown with.
fn tool_call(kind: &str, item: &Map<String, Value>) -> (String, Value) {
    match kind {
        "command_execution" => (
            "command_execution".to_owned(),
            serde_json::json!({ "command": item.get("command").cloned().unwrap_or(Value::Null) }),
        ),
        "function_call" => {
            let args = item.get("arguments").cloned().unwrap_or(Value::Null);
            let input = match &args {
                Value::String(s) => serde_json::from_str(s).unwrap_or(args),
                _ => args,
            };
            (str_field(item, "name"), input)
        }
        "mcp_tool_call" => (
            format!(
                "mcp__{}__{}",
                str_field(item, "server"),
                str_field(item, "tool")
            ),
            item.get("arguments").cloned().unwrap_or(Value::Null),
        ),
        other => {
            let mut input = item.clone();
            input.remove("id");
            input.remove("type");
            input.remove("item_type");
            input.remove("status");
            (other.to_owned(), Value::Object(input))
        }
    }
}

/// The output text and error flag of a finished tool item.
fn tool_result(item: &Map<String, Value>) -> (String, bool) {
    let failed_status = item.get("status").and_then(Value::as_str) == Some("failed");
    let bad_exit = item
        .get("exit_code")
        .and_then(Value::as_i64)
        .is_some_and(|c| c != 0);
    let error = item.get("error").filter(|e| !e.is_null()).map(|e| {
        e.get("message")
            .map(value_text)
            .unwrap_or_else(|| value_text(e))
    });
    let output = if let Some(o) = item.get("aggregated_output").and_then(Value::as_str) {
        o.to_owned()
    } else if let Some(r) = item.get("result").filter(|r| !r.is_null()) {
        r.get("content")
            .map(content_text)
            .unwrap_or_else(|| value_text(r))
    } else if let Some(o) = item.get("output") {
        value_text(o)
    } else {
        error.clone().unwrap_or_default()
    };
    (output, failed_status || bad_exit || error.is_some())
}

const NOT_TOOLS: [&str; 5] = [
    "agent_message",
    "assistant_message",
    "reasoning",
    "error",
    "todo_list",
];

/// An event of codex's older `exec --json` shape: `{"id": "0", "msg": {"type": …}}`.
#[derive(Deserialize)]
struct LegacyEvent {
    msg: Map<String, Value>,
}

fn command_text(v: Option<&Value>) -> Value {
    match v {
        Some(Value::Array(parts)) => {
            Value::String(parts.iter().map(value_text).collect::<Vec<_>>().join(" "))
        }
        Some(other) => other.clone(),
        None => Value::Null,
    }
}

impl State {
    /// One event of the older shape (codex before the `thread.*`/`item.*` events):
    /// `session_configured` (session id), `agent_message` (`message`), `agent_reasoning`
    /// (`text`), `token_count` (cumulative usage, flat or under `info.total_token_usage`),
    /// `exec_command_begin`/`_end` and `mcp_tool_call_begin`/`_end` (tools, by `call_id`),
    /// `error`/`stream_error` (`message`), `task_complete` (`last_agent_message`).
    fn legacy(&mut self, msg: &Map<String, Value>, out: &mut Vec<AgentChunk>) {
        let kind = msg.get("type").and_then(Value::as_str).unwrap_or("");
        let text = |k: &str| msg.get(k).map(value_text).unwrap_or_default();
        match kind {
            "session_configured" if self.session_id.is_none() => {
                self.session_id = Some(text("session_id")).filter(|s| !s.is_empty());
            }
            "agent_message" => {
                let t = text("message");
                if !t.is_empty() {
                    out.push(AgentChunk::Message(t.clone()));
                }
                self.messages.push(t);
            }
            "agent_reasoning" => {
                let t = text("text");
                if !t.is_empty() {
                    out.push(AgentChunk::Thought(t));
                }
            }
            "token_count" => {
                let usage = msg
                    .get("info")
                    .and_then(|i| i.get("total_token_usage"))
                    .unwrap_or(&Value::Null);
                let n = |k: &str| {
                    usage
                        .get(k)
                        .or_else(|| msg.get(k))
                        .and_then(Value::as_u64)
                        .unwrap_or(0)
                };
                self.usage = Some(Usage {
                    input: n("input_tokens"),
                    output: n("output_tokens"),
                    total: None,
                });
            }
            "exec_command_begin" => out.push(AgentChunk::ToolCall {
                id: text("call_id"),
                name: "command_execution".to_owned(),
                input: serde_json::json!({ "command": command_text(msg.get("command")) }),
            }),
            "mcp_tool_call_begin" => {
                let inv = msg.get("invocation").unwrap_or(&Value::Null);
                let part = |k: &str| inv.get(k).map(value_text).unwrap_or_default();
                out.push(AgentChunk::ToolCall {
                    id: text("call_id"),
                    name: format!("mcp__{}__{}", part("server"), part("tool")),
                    input: inv.get("arguments").cloned().unwrap_or(Value::Null),
                });
            }
            "exec_command_end" | "mcp_tool_call_end" => {
                let (output, is_error) = tool_result(msg);
                let output = if output.is_empty() {
                    text("stdout")
                } else {
                    output
                };
                out.push(AgentChunk::ToolResult {
                    id: text("call_id"),
                    output,
                    is_error,
                });
            }
            "error" | "stream_error" => self.last_error = Some(text("message")),
            "task_complete" if self.messages.is_empty() => {
                let t = text("last_agent_message");
                if !t.is_empty() {
                    out.push(AgentChunk::Message(t.clone()));
                    self.messages.push(t);
                }
            }
            _ => {}
        }
    }
}

impl LineParser for State {
    fn parse_line_into(&mut self, line: &str, out: &mut Vec<AgentChunk>) {
        let Some(kind) = event_type(line) else {
            if line.contains("\"msg\"")
                && let Ok(ev) = serde_json::from_str::<LegacyEvent>(line)
            {
                self.legacy(&ev.msg, out);
            }
            return;
        };
        match kind.as_ref() {
            "item.started" | "item.completed" => {
                let completed = kind.as_ref() == "item.completed";
                let Ok(ItemEvent { item: Some(item) }) = serde_json::from_str::<ItemEvent>(line)
                else {
                    return;
                };
                let ik = item_kind(&item);
                match ik {
                    "agent_message" | "assistant_message" if completed => {
                        let text = str_field(&item, "text");
                        if !text.is_empty() {
                            out.push(AgentChunk::Message(text.clone()));
                        }
                        self.messages.push(text);
                    }
                    "reasoning" if completed => {
                        let text = str_field(&item, "text");
                        if !text.is_empty() {
                            out.push(AgentChunk::Thought(text));
                        }
                    }
                    k if NOT_TOOLS.contains(&k) => {}
                    k => {
                        let id = str_field(&item, "id");
                        if !self.started.contains(&id) {
                            let (name, input) = tool_call(k, &item);
                            out.push(AgentChunk::ToolCall {
                                id: id.clone(),
                                name,
                                input,
                            });
                            self.started.insert(id.clone());
                        }
                        if completed {
                            let (output, is_error) = tool_result(&item);
                            out.push(AgentChunk::ToolResult {
                                id,
                                output,
                                is_error,
                            });
                        }
                    }
                }
            }
            "thread.started" if self.session_id.is_none() => {
                if let Ok(ev) = serde_json::from_str::<ThreadStarted<'_>>(line) {
                    self.session_id = ev.thread_id.map(|s| s.0.into_owned());
                }
            }
            "turn.completed" => {
                if let Ok(TurnCompleted { usage: Some(u) }) = serde_json::from_str(line) {
                    let acc = self.usage.get_or_insert_with(Usage::default);
                    acc.input = acc.input.saturating_add(u.input_tokens);
                    acc.output = acc.output.saturating_add(u.output_tokens);
                }
            }
            "turn.failed" | "error" => {
                if let Ok(ev) = serde_json::from_str::<ErrorEvent>(line) {
                    let msg = ev
                        .error
                        .as_ref()
                        .map(|e| {
                            e.get("message")
                                .map(value_text)
                                .unwrap_or_else(|| value_text(e))
                        })
                        .or_else(|| ev.message.as_ref().map(value_text))
                        .unwrap_or_default();
                    if kind.as_ref() == "turn.failed" {
                        self.failed = Some(msg);
                    } else {
                        self.last_error = Some(msg);
                    }
                }
            }
            _ => {}
        }
    }

    fn finish(self) -> Parsed {
        let output = (!self.messages.is_empty()).then(|| self.messages.join("\n"));
        let response = output.as_deref().and_then(json_object);
        let failed = self.failed.is_some();
        Parsed {
            output,
            response,
            usage: self.usage,
            session_id: self.session_id,
            error: self.failed.or(self.last_error),
            failed,
        }
    }
}
