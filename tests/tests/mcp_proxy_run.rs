//! `mcp_proxy:` under `awf run` for every installed provider besides claude (which
//! tests/tests/mcp_proxy_steps.rs covers): the REAL codex, gemini and opencode CLIs, and the
//! in-process tool loop of `openai_compatible`, each against the scripted LLM on 127.0.0.1.
//! The model asks for the proxy's Read of a workspace file in that provider's naming; the test
//! checks the call ran through awf's tool router (a router-fidelity `tool.call` in the
//! transcript, the step's `tool_calls` in `-f json`), that the file's text reached the model,
//! and that no proxy file and no process of the test is left.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::PathBuf;

use awf_mock_llm::MockLlm;
use awf_tests::Sandbox;
use awf_tests::agent_cli::AgentCli;
use awf_tests::agent_cli::point_at_mock;
use serde_json::Value;
use serde_json::json;

#[derive(Clone, Copy, Debug)]
enum Provider {
    Codex,
    Gemini,
    Opencode,
    OpenAi,
}

fn bin_dir() -> PathBuf {
    let d = awf_tests::workspace_root().join(".cache/npm/node_modules/.bin");
    assert!(
        d.join("codex").exists(),
        "agent CLIs not installed in {}: run scripts/install-agents.sh (scripts/test.sh does)",
        d.display()
    );
    d
}

/// The proxy's Read as the provider names it for the model.
fn read_call(p: Provider) -> Value {
    let args = json!({"path": "notes.txt"});
    match p {
        Provider::Codex => json!({"name": "Read", "namespace": "mcp__awf_proxy", "args": args}),
        Provider::Gemini => json!({"name": "mcp_awf-proxy-*_Read", "args": args}),
        Provider::Opencode => json!({"name": "awf-proxy-*_Read", "args": args}),
        Provider::OpenAi => json!({"name": "Read", "args": args}),
    }
}

/// A sandbox with the provider pointed at `mock` (its own HOME and TMPDIR), the workspace
/// file, and the workflow; gives the workflow's path.
fn setup(p: Provider, mock: &MockLlm) -> (Sandbox, PathBuf) {
    let mut sb = Sandbox::new().unwrap();
    let url = mock.url();
    let home = sb.path().join("home");
    let tmp = sb.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    sb.set_env("PATH", &path);
    sb.set_env("HOME", &home.display().to_string());
    sb.set_env("TMPDIR", &tmp.display().to_string());
    let cli = match p {
        Provider::Codex => Some((AgentCli::Codex, "codex")),
        Provider::Gemini => Some((AgentCli::Gemini, "gemini")),
        Provider::Opencode => Some((AgentCli::Opencode, "opencode")),
        Provider::OpenAi => None,
    };
    let (provider, options) = match cli {
        Some((cli, name)) => {
            let (env, _) = point_at_mock(cli, &url, &home, &sb.path().join("oc"));
            for (k, v) in env {
                sb.set_env(&k, &v);
            }
            (name, String::new())
        }
        None => (
            "openai_compatible",
            format!(
                "    options:\n      base_url: {url}/v1\n      model: mock-model\n      api_key: sk-test\n"
            ),
        ),
    };
    sb.write("notes.txt", "the secret word is PAPAYA\n")
        .unwrap();
    let wf = sb
        .write(
            "wf.yaml",
            &format!(
                "name: proxied\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: {provider}\n    prompt: read the notes\n{options}    mcp_proxy:\n      enable: true\n    timeout: 3m\n    on_success: done\n  done:\n    type: terminal\n"
            ),
        )
        .unwrap();
    (sb, wf)
}

fn leftovers(sb: &Sandbox) -> Vec<String> {
    std::fs::read_dir(sb.path().join("tmp"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("awf-"))
        .collect()
}

fn reads_through_the_proxy_under_awf_run(p: Provider) {
    let mock = MockLlm::start(json!({
        "rules": [
            {"when_has_tool_result": true, "reply": {"text": "done reading"}},
            {"when_has_tools": true, "reply": {"tool": read_call(p)}}
        ],
        "default": {"text": "ok"}
    }));
    let (sb, wf) = setup(p, &mock);
    let run = sb
        .run(&["run", wf.to_str().unwrap(), "-f", "json"])
        .unwrap();
    assert_eq!(run.code, 0, "{p:?}\n{}\n{}", run.stdout, run.stderr);
    let doc = run.json().unwrap();
    let calls = doc["states"]["ask"]["tool_calls"]
        .as_array()
        .unwrap_or_else(|| panic!("{p:?}: no tool_calls in {doc}"));
    assert!(
        calls
            .iter()
            .any(|c| c["name"] == "Read" && c["is_error"] != true),
        "{p:?}: {doc}"
    );
    // What awf's Read returned reached the model.
    assert!(
        mock.model_requests()
            .iter()
            .any(|r| r.to_string().contains("PAPAYA")),
        "{p:?}: the file's text never reached the model"
    );
    // The transcript has the router's record of the call.
    let run_id = doc["run_id"].as_str().unwrap();
    let transcript =
        std::fs::read_to_string(awf_tests::data(&sb).join(format!("transcripts/{run_id}.jsonl")))
            .unwrap();
    assert!(
        transcript.lines().any(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["type"] == "tool.call"
                && v["payload"]["fidelity"] == "router"
                && v["payload"]["name"] == "Read"
        }),
        "{p:?}: {transcript}"
    );
    assert_eq!(leftovers(&sb), Vec::<String>::new(), "{p:?}");
    awf_tests::wait_for("the run's processes to end", || sb.processes().is_empty());
}

#[test]
fn codex_reads_through_the_proxy_under_awf_run() {
    reads_through_the_proxy_under_awf_run(Provider::Codex);
}

#[test]
fn gemini_reads_through_the_proxy_under_awf_run() {
    reads_through_the_proxy_under_awf_run(Provider::Gemini);
}

#[test]
fn opencode_reads_through_the_proxy_under_awf_run() {
    reads_through_the_proxy_under_awf_run(Provider::Opencode);
}

#[test]
fn openai_compatible_reads_through_its_in_process_tools_under_awf_run() {
    reads_through_the_proxy_under_awf_run(Provider::OpenAi);
}
