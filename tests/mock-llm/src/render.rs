//! Turning a [`Reply`] into the wire answer of each dialect.
//!
//! Source: ../shared/spec/agents-offline.md §1.3 (Anthropic SSE), §2.3 (Responses SSE),
//! §3.3 (Gemini), §4.2 (Chat Completions SSE), and §0 rule 6 (SSE framing).

use serde_json::{Value, json};

use crate::http::{Body, Response};
use crate::inspect::{Dialect, Facts};
use crate::script::{Reply, ToolCall};

/// Per-request ids (`n` is unique within one server).
pub(crate) struct Ids {
    pub(crate) n: u64,
}

impl Ids {
    fn msg(&self) -> String {
        format!("msg_mock{}", self.n)
    }
    fn call(&self, t: &ToolCall, prefix: &str) -> String {
        t.id.clone()
            .unwrap_or_else(|| format!("{prefix}{}", self.n))
    }
}

/// `event: <type>\ndata: <json>\n\n`.
fn named_event(data: &Value) -> String {
    let ty = data
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    format!("event: {ty}\ndata: {data}\n\n")
}

/// `data: <json>\n\n`.
fn data_event(data: &Value) -> String {
    format!("data: {data}\n\n")
}

fn args_string(t: &ToolCall) -> String {
    t.args_raw.clone().unwrap_or_else(|| t.args.to_string())
}

/// Builds the success or error response for `reply`.
pub(crate) fn render(reply: &Reply, f: &Facts, ids: &Ids) -> Response {
    let mut resp = if reply.status >= 400 {
        error(reply, f)
    } else if let Some(raw) = &reply.raw_body {
        Response {
            status: reply.status,
            headers: vec![(
                "Content-Type".into(),
                reply
                    .content_type
                    .clone()
                    .unwrap_or_else(|| "application/json".into()),
            )],
            body: Body::Full(raw.clone().into_bytes()),
        }
    } else {
        let tool = reply.tool_for(f);
        let mut r = match f.dialect {
            Dialect::Anthropic => anthropic(reply, tool, f, ids),
            Dialect::AnthropicCountTokens => {
                Response::json(200, &json!({"input_tokens": reply.usage.input}))
            }
            Dialect::Responses => responses(reply, tool, f, ids),
            Dialect::Chat => chat(reply, tool, f, ids),
            Dialect::Gemini => gemini(reply, tool, f, ids),
        };
        r.status = reply.status;
        r
    };
    resp.headers.extend(reply.headers.iter().cloned());
    resp
}

fn error(reply: &Reply, f: &Facts) -> Response {
    let status = reply.status;
    let mut headers = vec![("Content-Type".to_owned(), "application/json".to_owned())];
    if let Some(ra) = &reply.retry_after {
        headers.push(("Retry-After".into(), ra.clone()));
    }
    let body = match &reply.error_body {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => {
            let msg = reply.error_message.clone().unwrap_or_else(|| {
                match status {
                    400 => "mock bad request",
                    401 => "mock unauthorized",
                    403 => "mock forbidden",
                    404 => "mock not found",
                    429 => "mock rate limited",
                    _ => "mock server error",
                }
                .to_owned()
            });
            let v = match f.dialect {
                Dialect::Anthropic | Dialect::AnthropicCountTokens => {
                    let ty = match status {
                        400 => "invalid_request_error",
                        401 => "authentication_error",
                        403 => "permission_error",
                        404 => "not_found_error",
                        413 => "request_too_large",
                        429 => "rate_limit_error",
                        529 => "overloaded_error",
                        _ => "api_error",
                    };
                    json!({"type": "error", "error": {"type": ty, "message": msg}})
                }
                Dialect::Responses | Dialect::Chat => {
                    let ty = match status {
                        401 => "authentication_error",
                        429 => "rate_limit_exceeded",
                        s if s >= 500 => "server_error",
                        _ => "invalid_request_error",
                    };
                    json!({"error": {"message": msg, "type": ty, "param": null, "code": null}})
                }
                Dialect::Gemini => {
                    let st = match status {
                        400 => "INVALID_ARGUMENT",
                        401 => "UNAUTHENTICATED",
                        403 => "PERMISSION_DENIED",
                        404 => "NOT_FOUND",
                        429 => "RESOURCE_EXHAUSTED",
                        503 => "UNAVAILABLE",
                        _ => "INTERNAL",
                    };
                    json!({"error": {"code": status, "message": msg, "status": st}})
                }
            };
            v.to_string()
        }
    };
    Response {
        status,
        headers,
        body: Body::Full(body.into_bytes()),
    }
}

fn anthropic(reply: &Reply, tool: Option<&ToolCall>, f: &Facts, ids: &Ids) -> Response {
    let model = if f.model.is_empty() {
        "claude-mock"
    } else {
        f.model.as_str()
    };
    let u = reply.usage;
    let stop = if tool.is_some() {
        "tool_use"
    } else if reply.refusal.is_some() {
        "refusal"
    } else {
        "end_turn"
    };
    if !f.sse {
        let content = match tool {
            Some(t) => {
                json!([{"type": "tool_use", "id": ids.call(t, "toolu_mock"), "name": t.name, "input": t.args}])
            }
            None => json!([{"type": "text", "text": reply.text}]),
        };
        return Response::json(
            200,
            &json!({"id": ids.msg(), "type": "message", "role": "assistant", "model": model,
                "content": content, "stop_reason": stop, "stop_sequence": null,
                "usage": {"input_tokens": u.input, "output_tokens": u.output}}),
        );
    }
    let mut ev = vec![named_event(&json!({"type": "message_start", "message": {
        "id": ids.msg(), "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": u.input, "output_tokens": 1}}}))];
    match tool {
        Some(t) => {
            ev.push(named_event(&json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "tool_use", "id": ids.call(t, "toolu_mock"), "name": t.name, "input": {}}})));
            ev.push(named_event(
                &json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": args_string(t)}}),
            ));
        }
        None => {
            ev.push(named_event(
                &json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
            ));
            let deltas = match &reply.refusal {
                Some(r) => vec![r.clone()],
                None => reply.deltas(),
            };
            for d in deltas {
                ev.push(named_event(
                    &json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": d}}),
                ));
            }
        }
    }
    ev.push(named_event(
        &json!({"type": "content_block_stop", "index": 0}),
    ));
    ev.push(named_event(&json!({"type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": null},
        "usage": {"output_tokens": u.output}})));
    ev.push(named_event(&json!({"type": "message_stop"})));
    Response::sse(ev)
}

fn responses_usage(reply: &Reply) -> Value {
    let u = reply.usage;
    json!({"input_tokens": u.input, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": u.output, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.input + u.output})
}

fn responses(reply: &Reply, tool: Option<&ToolCall>, f: &Facts, ids: &Ids) -> Response {
    let model = if f.model.is_empty() {
        "mock-model"
    } else {
        f.model.as_str()
    };
    let resp_id = format!("resp_mock{}", ids.n);
    let item_id = match tool {
        Some(_) => format!("fc_mock{}", ids.n),
        None => ids.msg(),
    };
    let done_item = match tool {
        Some(t) => {
            let mut item = json!({"type": "function_call", "id": item_id, "call_id": ids.call(t, "call_mock"),
                "name": t.name, "arguments": args_string(t), "status": "completed"});
            if let (Some(ns), Some(o)) = (&t.namespace, item.as_object_mut()) {
                o.insert("namespace".into(), json!(ns));
            }
            item
        }
        None => {
            json!({"type": "message", "id": item_id, "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": reply.text, "annotations": []}]})
        }
    };
    if !f.sse {
        return Response::json(
            200,
            &json!({"id": resp_id, "object": "response", "status": "completed", "model": model,
                "output": [done_item], "usage": responses_usage(reply)}),
        );
    }
    let mut ev = vec![named_event(
        &json!({"type": "response.created", "response": {
        "id": resp_id, "object": "response", "status": "in_progress", "model": model, "output": []}}),
    )];
    match tool {
        Some(t) => {
            let mut added = json!({"type": "function_call", "id": item_id, "call_id": ids.call(t, "call_mock"),
                "name": t.name, "arguments": "", "status": "in_progress"});
            if let (Some(ns), Some(o)) = (&t.namespace, added.as_object_mut()) {
                o.insert("namespace".into(), json!(ns));
            }
            ev.push(named_event(
                &json!({"type": "response.output_item.added", "output_index": 0, "item": added}),
            ));
        }
        None => {
            ev.push(named_event(&json!({"type": "response.output_item.added", "output_index": 0,
                "item": {"type": "message", "id": item_id, "role": "assistant", "status": "in_progress", "content": []}})));
            for d in reply.deltas() {
                ev.push(named_event(
                    &json!({"type": "response.output_text.delta", "item_id": item_id,
                    "output_index": 0, "content_index": 0, "delta": d}),
                ));
            }
        }
    }
    ev.push(named_event(
        &json!({"type": "response.output_item.done", "output_index": 0, "item": done_item}),
    ));
    ev.push(named_event(
        &json!({"type": "response.completed", "response": {
        "id": resp_id, "object": "response", "status": "completed", "model": model,
        "usage": responses_usage(reply)}}),
    ));
    Response::sse(ev)
}

fn chat(reply: &Reply, tool: Option<&ToolCall>, f: &Facts, ids: &Ids) -> Response {
    let model = if f.model.is_empty() {
        "mock-model"
    } else {
        f.model.as_str()
    };
    let id = format!("chatcmpl-mock{}", ids.n);
    let u = reply.usage;
    let usage = json!({"prompt_tokens": u.input, "completion_tokens": u.output, "total_tokens": u.input + u.output});
    let finish = if tool.is_some() { "tool_calls" } else { "stop" };
    if let Some(refusal) = &reply.refusal {
        if !f.sse {
            return Response::json(
                200,
                &json!({"id": id, "object": "chat.completion", "created": 0, "model": model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "refusal": refusal},
                    "finish_reason": "stop"}], "usage": usage}),
            );
        }
        let chunk = |choices: Value| {
            data_event(
                &json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model, "choices": choices}),
            )
        };
        let ev = vec![
            chunk(
                json!([{"index": 0, "delta": {"role": "assistant", "content": null, "refusal": ""}, "finish_reason": null}]),
            ),
            chunk(json!([{"index": 0, "delta": {"refusal": refusal}, "finish_reason": null}])),
            chunk(json!([{"index": 0, "delta": {}, "finish_reason": "stop"}])),
            data_event(
                &json!({"id": id, "object": "chat.completion.chunk", "created": 0,
                "model": model, "choices": [], "usage": usage}),
            ),
            "data: [DONE]\n\n".to_owned(),
        ];
        return Response::sse(ev);
    }
    if !f.sse {
        let message = match tool {
            Some(t) => {
                json!({"role": "assistant", "content": reply.tool_text, "tool_calls": [{"id": ids.call(t, "call_mock"),
                "type": "function", "function": {"name": t.name, "arguments": args_string(t)}}]})
            }
            None => json!({"role": "assistant", "content": reply.text}),
        };
        return Response::json(
            200,
            &json!({"id": id, "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}),
        );
    }
    let chunk = |choices: Value| {
        data_event(
            &json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model, "choices": choices}),
        )
    };
    let mut ev = vec![chunk(
        json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]),
    )];
    if let (Some(_), Some(text)) = (tool, &reply.tool_text) {
        ev.push(chunk(
            json!([{"index": 0, "delta": {"content": text}, "finish_reason": null}]),
        ));
    }
    match tool {
        Some(t) => ev.push(chunk(
            json!([{"index": 0, "delta": {"tool_calls": [{"index": 0,
            "id": ids.call(t, "call_mock"), "type": "function",
            "function": {"name": t.name, "arguments": args_string(t)}}]}, "finish_reason": null}]),
        )),
        None => {
            for d in reply.deltas() {
                ev.push(chunk(
                    json!([{"index": 0, "delta": {"content": d}, "finish_reason": null}]),
                ));
            }
        }
    }
    ev.push(chunk(
        json!([{"index": 0, "delta": {}, "finish_reason": finish}]),
    ));
    ev.push(data_event(
        &json!({"id": id, "object": "chat.completion.chunk", "created": 0,
        "model": model, "choices": [], "usage": usage}),
    ));
    ev.push("data: [DONE]\n\n".to_owned());
    Response::sse(ev)
}

fn gemini(reply: &Reply, tool: Option<&ToolCall>, f: &Facts, _ids: &Ids) -> Response {
    let u = reply.usage;
    let usage = json!({"promptTokenCount": u.input, "candidatesTokenCount": u.output, "totalTokenCount": u.input + u.output});
    let cand = |parts: Value, last: bool| {
        let mut c = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        if let (true, Some(o)) = (last, c.as_object_mut()) {
            o.insert("finishReason".into(), json!("STOP"));
        }
        c
    };
    let mut chunks: Vec<Value> = match tool {
        Some(t) => {
            let mut call = json!({"name": t.name, "args": t.args});
            if let (Some(id), Some(o)) = (&t.id, call.as_object_mut()) {
                o.insert("id".into(), json!(id));
            }
            vec![json!({"candidates": [cand(json!([{"functionCall": call}]), true)]})]
        }
        None => {
            let deltas = if f.stream {
                reply.deltas()
            } else {
                vec![reply.text.clone()]
            };
            let n = deltas.len();
            deltas
                .into_iter()
                .enumerate()
                .map(|(i, d)| json!({"candidates": [cand(json!([{"text": d}]), i + 1 == n)]}))
                .collect()
        }
    };
    if let Some(o) = chunks.last_mut().and_then(Value::as_object_mut) {
        o.insert("usageMetadata".into(), usage);
        o.insert("modelVersion".into(), json!(f.model));
    }
    if f.sse {
        Response::sse(chunks.iter().map(data_event).collect())
    } else if f.stream {
        Response::json(200, &Value::Array(chunks))
    } else {
        let one = chunks.pop().unwrap_or(Value::Null);
        Response::json(200, &one)
    }
}
