//! The JSON shapes awf writes, each one of the ACP v1 schema (agent-client-protocol-schema
//! 1.17.0, the SDK's pin); `tests` round-trips every builder through the schema types, so a
//! field the schema does not have fails there. Custom data only under `_meta.awf`.

use serde_json::Value;
use serde_json::json;

/// JSON-RPC result frame.
pub fn response(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// JSON-RPC error frame.
pub fn error(id: &Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut e = json!({"code": code, "message": message});
    if let (Some(d), Some(m)) = (data, e.as_object_mut()) {
        m.insert("data".into(), d);
    }
    json!({"jsonrpc": "2.0", "id": id, "error": e})
}

/// `error.data` carrying an awf error code (and a hint).
pub fn awf_data(code: &str, hint: Option<&str>) -> Value {
    let mut d = json!({"awfCode": code});
    if let (Some(h), Some(m)) = (hint, d.as_object_mut()) {
        m.insert("hint".into(), Value::String(h.to_owned()));
    }
    d
}

/// JSON-RPC notification frame.
pub fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// JSON-RPC request frame (agent → client).
pub fn request(id: &str, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// `session/update` notification around one update.
pub fn update(session_id: &str, update: Value) -> Value {
    notification(
        "session/update",
        json!({"sessionId": session_id, "update": update}),
    )
}

/// A text content block.
pub fn text(t: &str) -> Value {
    json!({"type": "text", "text": t})
}

/// `agent_message_chunk` / `agent_thought_chunk` / `user_message_chunk`.
pub fn chunk(kind: &str, t: &str, message_id: Option<&str>) -> Value {
    let mut v = json!({"sessionUpdate": kind, "content": text(t)});
    if let (Some(id), Some(m)) = (message_id, v.as_object_mut()) {
        m.insert("messageId".into(), Value::String(id.to_owned()));
    }
    v
}

/// Tool call content: one text block.
pub fn tool_text(t: &str) -> Value {
    json!([{"type": "content", "content": text(t)}])
}

/// A new `tool_call`.
pub fn tool_call(
    id: &str,
    title: &str,
    kind: &str,
    status: &str,
    raw_input: Option<Value>,
) -> Value {
    let mut v = json!({
        "sessionUpdate": "tool_call", "toolCallId": id, "title": title,
        "kind": kind, "status": status,
    });
    if let (Some(r), Some(m)) = (raw_input, v.as_object_mut()) {
        m.insert("rawInput".into(), r);
    }
    v
}

/// A `tool_call_update` with a status, and content / rawOutput when given.
pub fn tool_update(
    id: &str,
    status: &str,
    content: Option<Value>,
    raw_output: Option<Value>,
) -> Value {
    let mut v = json!({"sessionUpdate": "tool_call_update", "toolCallId": id, "status": status});
    if let Some(m) = v.as_object_mut() {
        if let Some(c) = content {
            m.insert("content".into(), c);
        }
        if let Some(r) = raw_output {
            m.insert("rawOutput".into(), r);
        }
    }
    v
}

/// A `plan`: `(content, status)` entries (status `pending`, `in_progress`, `completed`).
pub fn plan(entries: &[(String, &'static str)]) -> Value {
    let entries: Vec<Value> = entries
        .iter()
        .map(|(c, s)| json!({"content": c, "priority": "medium", "status": s}))
        .collect();
    json!({"sessionUpdate": "plan", "entries": entries})
}

/// The session modes awf offers (`ask`, `auto`) with `current` selected.
pub fn modes(current: &str) -> Value {
    json!({
        "currentModeId": current,
        "availableModes": [
            {"id": "ask", "name": "Ask", "description": "Ask before every approval gate"},
            {"id": "auto", "name": "Auto-approve", "description": "Approve every approval gate without asking"}
        ]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema as acp;

    /// `v` parses as `T` and serializes back the same, up to `status: "pending"` (the
    /// schema's default, which it leaves out).
    fn roundtrip<T: serde::de::DeserializeOwned + serde::Serialize>(v: &Value) {
        let t: T = serde_json::from_value(v.clone())
            .unwrap_or_else(|e| panic!("not a {}: {e}: {v}", std::any::type_name::<T>()));
        let back = serde_json::to_value(&t).unwrap();
        let mut want = v.clone();
        if let Some(u) = want.get_mut("update").and_then(Value::as_object_mut)
            && u.get("status") == Some(&json!("pending"))
            && back["update"].get("status").is_none()
        {
            u.remove("status");
        }
        assert_eq!(back, want, "fields lost in a round trip");
    }

    #[test]
    fn every_update_is_a_schema_update() {
        let ups = [
            chunk("agent_message_chunk", "hi", Some("r:s")),
            chunk("agent_thought_chunk", "hm", None),
            chunk("user_message_chunk", "/wf", None),
            tool_call(
                "r:s:1",
                "Step s",
                "execute",
                "pending",
                Some(json!({"command": "ls"})),
            ),
            tool_update(
                "r:s:1",
                "completed",
                Some(tool_text("out")),
                Some(json!({"exitCode": 0})),
            ),
            tool_update("r:s:1", "in_progress", None, None),
            plan(&[
                ("a".into(), "pending"),
                ("b".into(), "in_progress"),
                ("c".into(), "completed"),
            ]),
            json!({"sessionUpdate": "available_commands_update", "availableCommands": [
                {"name": "wf", "description": "d", "input": {"hint": "x=<string>"}, "_meta": {"awf": {"inputs": []}}}]}),
            json!({"sessionUpdate": "current_mode_update", "currentModeId": "auto"}),
        ];
        for u in ups {
            let n = update("sess_1", u);
            roundtrip::<acp::SessionNotification>(&n["params"]);
        }
    }

    #[test]
    fn responses_are_schema_responses() {
        roundtrip::<acp::NewSessionResponse>(&json!({"sessionId": "s", "modes": modes("ask")}));
        roundtrip::<acp::PromptResponse>(&json!({"stopReason": "end_turn"}));
        roundtrip::<acp::PromptResponse>(&json!({"stopReason": "cancelled"}));
        roundtrip::<acp::RequestPermissionRequest>(&json!({
            "sessionId": "s",
            "toolCall": {"toolCallId": "t", "title": "Approve: deploy", "status": "pending"},
            "options": [
                {"optionId": "a", "name": "Approve", "kind": "allow_once"},
                {"optionId": "b", "name": "Always", "kind": "allow_always"},
                {"optionId": "c", "name": "Reject", "kind": "reject_once"},
                {"optionId": "d", "name": "Never", "kind": "reject_always"}
            ]
        }));
    }
}
