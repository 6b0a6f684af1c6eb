//! Reading what matters out of a request body, per API dialect.
//!
//! Source: ../shared/spec/agents-offline.md §1.2, §2.2, §3.2, §4.2 (what each CLI sends).

use serde_json::Value;

/// The wire dialect of a request, chosen from its method and path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// Anthropic Messages: `POST */v1/messages` (claude).
    Anthropic,
    /// Anthropic token counting: `POST */v1/messages/count_tokens`.
    AnthropicCountTokens,
    /// OpenAI Responses: `POST */responses` (codex).
    Responses,
    /// OpenAI Chat Completions: `POST */chat/completions` (opencode, awf `openai_compatible`).
    Chat,
    /// Gemini: `POST */models/<model>:generateContent|streamGenerateContent` (gemini).
    Gemini,
}

impl Dialect {
    /// Picks the dialect for a `POST` path (query string already removed). `None` for anything else.
    pub fn from_path(path: &str) -> Option<Self> {
        let p = path.trim_end_matches('/');
        if p.ends_with("/messages/count_tokens") {
            Some(Self::AnthropicCountTokens)
        } else if p.ends_with("/messages") {
            Some(Self::Anthropic)
        } else if p.ends_with("/responses") {
            Some(Self::Responses)
        } else if p.ends_with("/chat/completions") {
            Some(Self::Chat)
        } else if p.contains("/models/")
            && (p.ends_with(":generateContent") || p.ends_with(":streamGenerateContent"))
        {
            Some(Self::Gemini)
        } else {
            None
        }
    }

    /// Short name used in the request log and in `when_dialect`:
    /// `anthropic`, `anthropic_count_tokens`, `responses`, `chat`, `gemini`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Anthropic => "anthropic",
            Self::AnthropicCountTokens => "anthropic_count_tokens",
            Self::Responses => "responses",
            Self::Chat => "chat",
            Self::Gemini => "gemini",
        }
    }
}

/// Facts about one model request that rules match on.
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
    /// Dialect of the request.
    pub dialect: Dialect,
    /// Model name (body `model`, or the `<model>` path segment for Gemini).
    pub model: String,
    /// Whether the client asked for a streamed (SSE) answer.
    pub stream: bool,
    /// Whether the request offers at least one tool.
    pub has_tools: bool,
    /// Text of the last user message that is a prompt (messages holding only tool results are skipped).
    pub last_user: String,
    /// Text of every user message, joined with newlines.
    pub all_user: String,
    /// Text of every system/developer instruction, joined with newlines.
    pub system: String,
    /// Tool results after the last user prompt (drives multi-step tool scripts).
    pub tool_results: usize,
    /// A JSON schema / JSON mime type was requested (title generation, routers).
    pub wants_json: bool,
    /// A side request: JSON schema asked for, or a title-generator prompt.
    pub side: bool,
    /// Whether this request should be answered as SSE.
    pub sse: bool,
}

/// Concatenated text of an Anthropic/OpenAI `content` (string or array of blocks).
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .filter_map(|b| match b {
                Value::String(s) => Some(s.clone()),
                Value::Object(o) => {
                    let ty = o.get("type").and_then(Value::as_str).unwrap_or("text");
                    if matches!(ty, "text" | "input_text" | "output_text") {
                        o.get("text").and_then(Value::as_str).map(str::to_owned)
                    } else {
                        None
                    }
                }
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The tool names a request offers, in order, in any dialect: Anthropic and Responses
/// `tools[].name` (a Responses namespace's tools as `<namespace>.<name>`), Chat Completions
/// `tools[].function.name`, Gemini `tools[].functionDeclarations[].name`.
pub fn offered_tool_names(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for t in body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(decls) = t.get("functionDeclarations").and_then(Value::as_array) {
            out.extend(
                decls
                    .iter()
                    .filter_map(|d| d["name"].as_str())
                    .map(String::from),
            );
        } else if let Some(n) = t.pointer("/function/name").and_then(Value::as_str) {
            out.push(n.to_owned());
        } else if let (Some(ns), Some(tools)) = (
            t.get("name").and_then(Value::as_str),
            t.get("tools").and_then(Value::as_array),
        ) {
            out.extend(
                tools
                    .iter()
                    .filter_map(|d| d["name"].as_str())
                    .map(|n| format!("{ns}.{n}")),
            );
        } else if let Some(n) = t.get("name").and_then(Value::as_str) {
            out.push(n.to_owned());
        }
    }
    out
}

/// Whether `name` matches `pattern`, where `*` stands for any run of characters.
fn glob_match(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let Some((first, rest)) = parts.split_first() else {
        return pattern == name;
    };
    let Some(mut tail) = name.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return tail.is_empty();
    };
    for part in middle {
        match tail.find(part) {
            Some(i) => tail = &tail[i + part.len()..],
            None => return false,
        }
    }
    tail.len() >= last.len() && tail.ends_with(last)
}

/// A scripted tool name with a `*` (`mcp_awf-proxy-*_Read`: a server name with a random
/// part) becomes the first tool the request offers that matches it, so a script can call a
/// tool whose exact name it cannot know; without a match it stays as written.
pub fn resolve_tool_globs(tools: &mut [crate::script::ToolCall], body: &Value) {
    if !tools.iter().any(|t| t.name.contains('*')) {
        return;
    }
    let offered = offered_tool_names(body);
    for t in tools.iter_mut().filter(|t| t.name.contains('*')) {
        if let Some(hit) = offered.iter().find(|n| glob_match(&t.name, n)) {
            t.name.clone_from(hit);
        }
    }
}

fn non_empty_array(v: Option<&Value>) -> bool {
    v.and_then(Value::as_array).is_some_and(|a| !a.is_empty())
}

/// Reads the facts of a request to `dialect` with JSON `body`; `path`/`query` for Gemini.
pub fn facts(dialect: Dialect, path: &str, query: &str, body: &Value) -> Facts {
    let mut f = Facts {
        dialect,
        model: body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        has_tools: non_empty_array(body.get("tools")),
        last_user: String::new(),
        all_user: String::new(),
        system: String::new(),
        tool_results: 0,
        wants_json: false,
        side: false,
        sse: false,
    };
    let mut users: Vec<String> = Vec::new();
    let mut systems: Vec<String> = Vec::new();
    match dialect {
        Dialect::Anthropic | Dialect::AnthropicCountTokens => {
            systems.push(content_text(body.get("system").unwrap_or(&Value::Null)));
            for m in body
                .get("messages")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
                let content = m.get("content").unwrap_or(&Value::Null);
                match role {
                    "user" => {
                        let results = content.as_array().map_or(0, |a| {
                            a.iter()
                                .filter(|b| {
                                    b.get("type").and_then(Value::as_str) == Some("tool_result")
                                })
                                .count()
                        });
                        if results > 0 {
                            f.tool_results += results;
                        } else {
                            let t = content_text(content);
                            users.push(t.clone());
                            f.last_user = t;
                            f.tool_results = 0;
                        }
                    }
                    "system" => systems.push(content_text(content)),
                    _ => {}
                }
            }
            f.wants_json = body.pointer("/output_config/format").is_some();
            f.sse = f.stream && dialect == Dialect::Anthropic;
        }
        Dialect::Responses => {
            systems.push(
                body.get("instructions")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            );
            match body.get("input") {
                Some(Value::String(s)) => {
                    users.push(s.clone());
                    f.last_user = s.clone();
                }
                Some(Value::Array(items)) => {
                    for it in items {
                        let ty = it.get("type").and_then(Value::as_str).unwrap_or("message");
                        let role = it.get("role").and_then(Value::as_str).unwrap_or_default();
                        if ty == "message" {
                            let t = content_text(it.get("content").unwrap_or(&Value::Null));
                            match role {
                                "user" => {
                                    users.push(t.clone());
                                    // codex sends an <environment_context> user message; it is not the prompt.
                                    if !t.trim_start().starts_with("<environment_context>") {
                                        f.last_user = t;
                                        f.tool_results = 0;
                                    }
                                }
                                "system" | "developer" => systems.push(t),
                                _ => {}
                            }
                        } else if ty.ends_with("_call_output") {
                            f.tool_results += 1;
                        }
                    }
                }
                _ => {}
            }
            let fmt = body
                .pointer("/text/format/type")
                .and_then(Value::as_str)
                .unwrap_or_default();
            f.wants_json = matches!(fmt, "json_schema" | "json_object");
            f.stream = body.get("stream").and_then(Value::as_bool).unwrap_or(true);
            f.sse = f.stream;
        }
        Dialect::Chat => {
            for m in body
                .get("messages")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
                let t = content_text(m.get("content").unwrap_or(&Value::Null));
                match role {
                    "user" => {
                        users.push(t.clone());
                        f.last_user = t;
                        f.tool_results = 0;
                    }
                    "tool" | "function" => f.tool_results += 1,
                    "system" | "developer" => systems.push(t),
                    _ => {}
                }
            }
            let fmt = body
                .pointer("/response_format/type")
                .and_then(Value::as_str)
                .unwrap_or_default();
            f.wants_json = matches!(fmt, "json_schema" | "json_object");
            f.sse = f.stream;
        }
        Dialect::Gemini => {
            let tail = path.rsplit("/models/").next().unwrap_or_default();
            let (model, method) = tail.split_once(':').unwrap_or((tail, ""));
            f.model = model.to_owned();
            f.stream = method == "streamGenerateContent";
            f.sse = f.stream && query.split('&').any(|kv| kv == "alt=sse");
            f.has_tools = body
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|t| {
                    non_empty_array(t.get("functionDeclarations"))
                        || non_empty_array(t.get("function_declarations"))
                });
            let parts_text = |c: &Value| -> String {
                c.get("parts")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            if let Some(si) = body
                .get("systemInstruction")
                .or_else(|| body.get("system_instruction"))
            {
                systems.push(parts_text(si));
            }
            for c in body
                .get("contents")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let role = c.get("role").and_then(Value::as_str).unwrap_or("user");
                if role != "user" {
                    continue;
                }
                let results = c
                    .get("parts")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|p| p.get("functionResponse").is_some())
                    .count();
                if results > 0 {
                    f.tool_results += results;
                } else {
                    let t = parts_text(c);
                    users.push(t.clone());
                    f.last_user = t;
                    f.tool_results = 0;
                }
            }
            let gc = body
                .get("generationConfig")
                .or_else(|| body.get("generation_config"));
            f.wants_json = gc.is_some_and(|g| {
                g.get("responseJsonSchema").is_some()
                    || g.get("responseSchema").is_some()
                    || g.get("responseMimeType").and_then(Value::as_str) == Some("application/json")
            });
        }
    }
    f.all_user = users.join("\n");
    f.system = systems
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    f.side = f.wants_json
        || f.system.contains("title generator")
        || f.last_user
            .starts_with("Generate a title for this conversation");
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_globs_resolve_to_an_offered_name() {
        let body = json!({"tools": [
            {"functionDeclarations": [{"name": "read_file"}, {"name": "mcp_awf-proxy-00ab_Read"}]},
        ]});
        let mut tools = vec![crate::script::ToolCall {
            name: "mcp_awf-proxy-*_Read".into(),
            args: json!({}),
            namespace: None,
            id: None,
            args_raw: None,
        }];
        resolve_tool_globs(&mut tools, &body);
        assert_eq!(tools[0].name, "mcp_awf-proxy-00ab_Read");
        let chat =
            json!({"tools": [{"type": "function", "function": {"name": "awf-proxy-9_Bash"}}]});
        assert_eq!(offered_tool_names(&chat), ["awf-proxy-9_Bash"]);
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b", "ab_c"));
        assert!(glob_match("*", "anything"));
    }

    #[test]
    fn dialect_from_path() {
        assert_eq!(Dialect::from_path("/v1/messages"), Some(Dialect::Anthropic));
        assert_eq!(
            Dialect::from_path("/v1/messages/count_tokens"),
            Some(Dialect::AnthropicCountTokens)
        );
        assert_eq!(
            Dialect::from_path("/v1/responses"),
            Some(Dialect::Responses)
        );
        assert_eq!(Dialect::from_path("/chat/completions"), Some(Dialect::Chat));
        assert_eq!(
            Dialect::from_path("/v1beta/models/gemini-2.5-flash:streamGenerateContent"),
            Some(Dialect::Gemini)
        );
        assert_eq!(Dialect::from_path("/v1/models"), None);
    }

    #[test]
    fn anthropic_tool_result_counts_after_prompt() {
        let body = json!({"model":"m","stream":true,"tools":[{"name":"Bash"}],"messages":[
            {"role":"user","content":[{"type":"text","text":"<system-reminder>x</system-reminder>"},{"type":"text","text":"do ZEBRA"}]},
            {"role":"system","content":"Available agent types"},
            {"role":"assistant","content":[{"type":"tool_use","id":"t","name":"Bash","input":{}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"hi"}]}
        ]});
        let f = facts(Dialect::Anthropic, "/v1/messages", "beta=true", &body);
        assert_eq!(
            f.last_user,
            "<system-reminder>x</system-reminder>\ndo ZEBRA"
        );
        assert_eq!(f.tool_results, 1);
        assert!(f.has_tools && f.sse && !f.side);
        assert_eq!(f.system, "Available agent types");
    }

    #[test]
    fn responses_skips_environment_context() {
        let body = json!({"model":"mock-model","stream":true,"tools":[{"type":"function","name":"exec_command"}],"input":[
            {"type":"message","role":"developer","content":[{"type":"input_text","text":"sys"}]},
            {"type":"message","role":"user","content":[{"type":"input_text","text":"say hi"}]},
            {"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context><cwd>/x</cwd></environment_context>"}]},
            {"type":"function_call","call_id":"c","name":"exec_command","arguments":"{}"},
            {"type":"function_call_output","call_id":"c","output":"ok"}
        ]});
        let f = facts(Dialect::Responses, "/v1/responses", "", &body);
        assert_eq!(f.last_user, "say hi");
        assert_eq!(f.tool_results, 1);
        assert_eq!(f.system, "sys");
    }

    #[test]
    fn gemini_router_is_a_side_request() {
        let body = json!({"contents":[{"role":"user","parts":[{"text":"hi"}]}],
            "generationConfig":{"responseMimeType":"application/json","responseJsonSchema":{}}});
        let f = facts(
            Dialect::Gemini,
            "/v1beta/models/gemini-3.5-flash-lite:generateContent",
            "",
            &body,
        );
        assert_eq!(f.model, "gemini-3.5-flash-lite");
        assert!(f.side && !f.stream && !f.sse && !f.has_tools);
    }

    #[test]
    fn chat_title_request_is_side() {
        let body = json!({"model":"m","stream":true,"messages":[
            {"role":"system","content":"You are a title generator. You output ONLY a thread title."},
            {"role":"user","content":"Generate a title for this conversation:\n\"say hi\""}]});
        let f = facts(Dialect::Chat, "/v1/chat/completions", "", &body);
        assert!(f.side && f.sse && !f.has_tools);
    }
}
