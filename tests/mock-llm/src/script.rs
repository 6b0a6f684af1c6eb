//! The reply script: rules matched on what a request contains (never on request order).
//!
//! Shape (every key optional):
//! ```json
//! {
//!   "rules": [
//!     {"when_last_user_contains": "ZEBRA", "when_has_tools": true, "times": 1,
//!      "reply": {"text": "…", "tool": {"name": "Bash", "args": {"command": "echo hi"}}}}
//!   ],
//!   "default": {"text": "ok"},
//!   "side": {"text": "Mock title"}
//! }
//! ```
//! Rule conditions (all given ones must hold): `when_last_user_contains`, `when_any_user_contains`,
//! `when_system_contains`, `when_request_contains` (substring of the raw body), `when_has_tools`,
//! `when_has_tool_result`, `when_dialect`, `when_model_contains`, `when_path_contains`,
//! `when_header` (`{"name": "substring"}`), `when_side`. A rule without `when_side` never matches a
//! side request (title generation, router, JSON-schema calls): those get `side` (or a built-in
//! harmless answer). `times: N` limits a rule to its first N matches (counted per script text).

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::inspect::Facts;

/// One tool call the mock asks the client to make.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// Tool name as the client offered it (`Bash`, `exec_command`, `run_shell_command`, `bash`).
    pub name: String,
    /// Arguments object.
    pub args: Value,
    /// Responses-API namespace (codex MCP tools: `mcp__<server>`).
    pub namespace: Option<String>,
    /// Call id; generated when absent.
    pub id: Option<String>,
    /// Arguments sent verbatim as the call's argument string (e.g. bad JSON) instead of
    /// `args` serialized; where a dialect sends arguments as an object, `args` is used.
    pub args_raw: Option<String>,
}

/// Token counts reported in the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Input (prompt) tokens; default 11.
    pub input: u64,
    /// Output (completion) tokens; default 7.
    pub output: u64,
}

/// A parsed `reply` object.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// Assistant text (default `ok`).
    pub text: String,
    /// Text deltas to stream instead of one delta holding `text` (their concatenation is the text).
    pub text_chunks: Vec<String>,
    /// Tool calls, one per round: the i-th is answered when the request carries tools and has
    /// exactly i tool results after the last user prompt. `tool` is shorthand for a one-element list.
    pub tools: Vec<ToolCall>,
    /// Text sent before a tool call in the same answer (chat dialect only), e.g. a model
    /// that explains what it is about to do.
    pub tool_text: Option<String>,
    /// HTTP status; >= 400 answers with an error body.
    pub status: u16,
    /// Message inside the dialect's error JSON.
    pub error_message: Option<String>,
    /// Verbatim error body (string sent as is, anything else as JSON).
    pub error_body: Option<Value>,
    /// `Retry-After` header value (default `1` for 429).
    pub retry_after: Option<String>,
    /// Sleep before answering, in milliseconds.
    pub delay_ms: u64,
    /// Token counts.
    pub usage: Usage,
    /// Verbatim success body (bypasses the dialect renderer), with `content_type`.
    pub raw_body: Option<String>,
    /// Content type for `raw_body` (default `application/json`).
    pub content_type: Option<String>,
    /// Extra response headers.
    pub headers: Vec<(String, String)>,
    /// A refusal: the chat dialect streams it as `delta.refusal` (and no content); the
    /// Anthropic dialect answers with `stop_reason: "refusal"` and this text.
    pub refusal: Option<String>,
}

impl Reply {
    /// Parses a `reply` object; unknown keys are ignored, a missing object gives text `ok`.
    pub fn parse(v: &Value) -> Self {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let parse_tool = |t: &Value| ToolCall {
            name: t
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("Bash")
                .to_owned(),
            args: t.get("args").cloned().unwrap_or_else(|| json!({})),
            namespace: t
                .get("namespace")
                .and_then(Value::as_str)
                .map(str::to_owned),
            id: t.get("id").and_then(Value::as_str).map(str::to_owned),
            args_raw: t.get("args_raw").and_then(Value::as_str).map(str::to_owned),
        };
        let mut tools: Vec<ToolCall> = v
            .get("tools")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(parse_tool).collect())
            .unwrap_or_default();
        if let Some(t) = v.get("tool").filter(|t| t.is_object()) {
            tools.insert(0, parse_tool(t));
        }
        let text_chunks: Vec<String> = v
            .get("text_chunks")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let text = s("text").unwrap_or_else(|| {
            if text_chunks.is_empty() {
                "ok".to_owned()
            } else {
                text_chunks.concat()
            }
        });
        let status = v
            .get("status")
            .and_then(Value::as_u64)
            .and_then(|n| u16::try_from(n).ok())
            .unwrap_or(200);
        let retry_after = match v.get("retry_after") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ if status == 429 => Some("1".to_owned()),
            _ => None,
        };
        let u = |k: &str, d: u64| {
            v.get("usage")
                .and_then(|u| u.get(k))
                .and_then(Value::as_u64)
                .unwrap_or(d)
        };
        let headers = v
            .get("headers")
            .and_then(Value::as_object)
            .map(|o| {
                o.iter()
                    .map(|(k, v)| {
                        let val = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                        (k.clone(), val)
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self {
            text,
            text_chunks,
            tools,
            tool_text: s("tool_text"),
            status,
            error_message: s("error_message"),
            error_body: v.get("error_body").cloned(),
            retry_after,
            delay_ms: v.get("delay_ms").and_then(Value::as_u64).unwrap_or(0),
            usage: Usage {
                input: u("input", 11),
                output: u("output", 7),
            },
            raw_body: s("raw_body"),
            content_type: s("content_type"),
            headers,
            refusal: s("refusal"),
        }
    }

    /// The tool call to answer for these facts, if any.
    pub fn tool_for<'a>(&'a self, f: &Facts) -> Option<&'a ToolCall> {
        if f.has_tools {
            self.tools.get(f.tool_results)
        } else {
            None
        }
    }

    /// The deltas that make up the text answer.
    pub fn deltas(&self) -> Vec<String> {
        if self.text_chunks.is_empty() {
            vec![self.text.clone()]
        } else {
            self.text_chunks.clone()
        }
    }
}

/// The request side the rules look at, besides [`Facts`].
pub struct Seen<'a> {
    /// Request path without query.
    pub path: &'a str,
    /// Raw body text.
    pub raw_body: &'a str,
    /// Headers, names lower-cased.
    pub headers: &'a [(String, String)],
}

fn rule_matches(rule: &Value, f: &Facts, seen: &Seen<'_>) -> bool {
    let str_cond = |k: &str, hay: &str| {
        rule.get(k)
            .and_then(Value::as_str)
            .is_none_or(|needle| hay.contains(needle))
    };
    let bool_cond = |k: &str, actual: bool| {
        rule.get(k)
            .and_then(Value::as_bool)
            .is_none_or(|want| want == actual)
    };
    let side_ok = match rule.get("when_side").and_then(Value::as_bool) {
        Some(want) => want == f.side,
        None => !f.side,
    };
    let header_ok = rule
        .get("when_header")
        .and_then(Value::as_object)
        .is_none_or(|want| {
            want.iter().all(|(name, needle)| {
                let name = name.to_ascii_lowercase();
                let needle = needle.as_str().unwrap_or_default();
                seen.headers
                    .iter()
                    .any(|(n, v)| *n == name && v.contains(needle))
            })
        });
    side_ok
        && header_ok
        && str_cond("when_last_user_contains", &f.last_user)
        && str_cond("when_any_user_contains", &f.all_user)
        && str_cond("when_system_contains", &f.system)
        && str_cond("when_request_contains", seen.raw_body)
        && str_cond("when_model_contains", &f.model)
        && str_cond("when_path_contains", seen.path)
        && rule
            .get("when_dialect")
            .and_then(Value::as_str)
            .is_none_or(|d| d == f.dialect.name())
        && bool_cond("when_has_tools", f.has_tools)
        && bool_cond("when_has_tool_result", f.tool_results > 0)
}

/// The harmless built-in answer to a side request: JSON that fits the known schemas
/// (claude/opencode titles, the gemini router) when JSON is asked for, else a short title.
fn side_default(raw_body: &str, f: &Facts) -> Value {
    if f.wants_json {
        let text = if raw_body.contains("complexity_score") {
            json!({"complexity_reasoning": "mock", "complexity_score": 1}).to_string()
        } else if raw_body.contains("title") {
            json!({"title": "Mock title"}).to_string()
        } else {
            "{}".to_owned()
        };
        json!({"text": text})
    } else {
        json!({"text": "Mock title"})
    }
}

/// Picks the reply for a request. Returns the reply and a label for the log:
/// `rule:<index>`, `default`, `side` or `side:builtin`.
pub fn select(
    script: &Value,
    f: &Facts,
    seen: &Seen<'_>,
    hits: &mut HashMap<String, u64>,
) -> (Reply, String) {
    let rules = script
        .get("rules")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (i, rule) in rules.iter().enumerate() {
        if !rule_matches(rule, f, seen) {
            continue;
        }
        if let Some(times) = rule.get("times").and_then(Value::as_u64) {
            let count = hits.entry(format!("{i}:{rule}")).or_insert(0);
            if *count >= times {
                continue;
            }
            *count += 1;
        }
        let reply = rule.get("reply").cloned().unwrap_or(Value::Null);
        return (Reply::parse(&reply), format!("rule:{i}"));
    }
    if f.side {
        match script.get("side") {
            Some(s) if s.is_object() => (Reply::parse(s), "side".to_owned()),
            _ => (
                Reply::parse(&side_default(seen.raw_body, f)),
                "side:builtin".to_owned(),
            ),
        }
    } else {
        let d = script.get("default").cloned().unwrap_or(Value::Null);
        (Reply::parse(&d), "default".to_owned())
    }
}
