//! Conversation turns (`mode: conversation`) answered through the typed interactions, over
//! the real binary against the scripted LLM server (stdin a pipe: each line is a turn).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::Write;
use std::process::Stdio;

use awf_mock_llm::MockLlm;
use awf_tests::Sandbox;
use pretty_assertions::assert_eq;
use serde_json::json;

#[test]
fn conversation_turns_are_read_from_stdin_until_an_empty_line() {
    let mut sb = Sandbox::new().unwrap();
    sb.set_env("MOCK_KEY", "sk-mock-key-123");
    let mock = MockLlm::start(json!({"rules": [
        {"when_last_user_contains": "tell me more", "reply": {"text": "more about it"}},
        {"when_last_user_contains": "hello", "reply": {"text": "hi there"}}
    ], "default": {"text": "unexpected"}}));
    let url = mock.url();
    sb.write(
        "chat.yaml",
        &format!(
            "name: chat\nstates:\n  initial: chat\n  chat:\n    type: agent\n    provider: openai_compatible\n    mode: conversation\n    prompt: hello\n    options: {{base_url: \"{url}/v1\", model: mock-model, api_key: \"{{{{.env.MOCK_KEY}}}}\"}}\n    conversation: {{}}\n    on_success: done\n  done:\n    type: terminal\n"
        ),
    )
    .unwrap();
    let mut child = sb
        .cmd(&["run", "chat.yaml", "-f", "json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"tell me more\n\nnot read\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["states"]["chat"]["output"], json!("more about it"));
    let asked: Vec<String> = mock
        .model_requests()
        .iter()
        .map(|r| {
            r["body"]["messages"].as_array().unwrap().last().unwrap()["content"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(asked, vec!["hello", "tell me more"]);
}
