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

/// The `initialize` result: protocol version 1 (whatever the client asked: it decides),
/// capabilities true only for what awf does.
pub fn initialize_result(version: &str) -> Value {
    json!({
        "protocolVersion": 1,
        "agentCapabilities": {
            "loadSession": true,
            "promptCapabilities": {"image": false, "audio": false, "embeddedContext": true},
            "mcpCapabilities": {"http": false, "sse": false},
            "sessionCapabilities": {"list": {}, "close": {}}
        },
        "agentInfo": {"name": "awf", "title": "AWF", "version": version},
        "authMethods": []
    })
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
        assert_subset(&want, &back, "");
    }

    /// Every field of `want` is in `got` with the same value (`got` may add the schema's
    /// defaults): a field the schema does not know is lost in the round trip and fails here.
    fn assert_subset(want: &Value, got: &Value, at: &str) {
        match (want, got) {
            (Value::Object(w), Value::Object(g)) => {
                for (k, v) in w {
                    let Some(gv) = g.get(k) else {
                        panic!("field {at}.{k} lost in a round trip (not in the schema)");
                    };
                    assert_subset(v, gv, &format!("{at}.{k}"));
                }
            }
            (Value::Array(w), Value::Array(g)) => {
                assert_eq!(w.len(), g.len(), "{at}");
                for (i, (a, b)) in w.iter().zip(g).enumerate() {
                    assert_subset(a, b, &format!("{at}[{i}]"));
                }
            }
            _ => assert_eq!(want, got, "{at}"),
        }
    }

    #[test]
    #[should_panic(expected = "lost in a round trip")]
    fn an_invented_field_fails_the_check() {
        let mut u = chunk("agent_message_chunk", "hi", None);
        u["requiredInputs"] = json!([]);
        roundtrip::<acp::SessionNotification>(&update("s", u)["params"]);
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
        roundtrip::<acp::InitializeResponse>(&initialize_result("1.0"));
        roundtrip::<acp::LoadSessionResponse>(&json!({"modes": modes("auto")}));
        roundtrip::<acp::ListSessionsResponse>(&json!({"sessions": [
            {"sessionId": "s", "cwd": "/p", "title": "/wf", "updatedAt": "2026-12-01T00:00:00.000Z"}]}));
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

/// `elicitation/create` params: a form of string fields `(name, title, description, enum)`,
/// all required when `required`.
pub fn elicitation_form(
    session_id: &str,
    message: &str,
    fields: &[(String, String, Option<String>, Vec<String>)],
    required: bool,
) -> Value {
    let mut props = serde_json::Map::new();
    for (name, title, description, values) in fields {
        let mut p = json!({"type": "string", "title": title});
        if let Some(m) = p.as_object_mut() {
            if let Some(d) = description {
                m.insert("description".into(), Value::String(d.clone()));
            }
            if !values.is_empty() {
                m.insert("enum".into(), json!(values));
            }
        }
        props.insert(name.clone(), p);
    }
    let mut schema = json!({"type": "object", "properties": props});
    if required && let Some(m) = schema.as_object_mut() {
        let names: Vec<&String> = fields.iter().map(|f| &f.0).collect();
        m.insert("required".into(), json!(names));
    }
    json!({"sessionId": session_id, "mode": "form", "message": message, "requestedSchema": schema})
}

#[cfg(test)]
mod elicitation_tests {
    use super::*;
    use agent_client_protocol::v1::schema as acp;

    #[test]
    fn elicitation_forms_are_schema_requests() {
        for (values, required) in [
            (vec![], true),
            (vec!["a".to_owned(), "b".to_owned()], false),
        ] {
            let v = elicitation_form(
                "s",
                "Workflow needs `who`",
                &[("who".into(), "who".into(), Some("a name".into()), values)],
                required,
            );
            let t: acp::CreateElicitationRequest = serde_json::from_value(v.clone())
                .unwrap_or_else(|e| panic!("not a request: {e}: {v}"));
            assert_eq!(serde_json::to_value(&t).unwrap(), v);
            let acp::ElicitationMode::Form(form) = &t.mode else {
                panic!("not a form: {v}");
            };
            assert!(
                matches!(form.scope, acp::ElicitationScope::Session(_)),
                "{v}"
            );
        }
        let r: acp::CreateElicitationResponse =
            serde_json::from_value(json!({"action": "accept", "content": {"who": "Ada"}})).unwrap();
        assert!(serde_json::to_value(&r).unwrap()["content"]["who"] == "Ada");
    }
}
