//! `mcp_proxy:` in agent steps, end to end: the real `claude` CLI (pinned by
//! scripts/install-agents.sh) under `awf run`, against the scripted LLM on 127.0.0.1. The model
//! asks for `mcp__awf-proxy__Read` and `mcp__awf-proxy__Write`; Claude Code starts `awf
//! mcp-serve` from the wrapper awf wrote, the calls run through awf's tool router, and their
//! events reach the run (transcript, `-f json`, `-o streaming --verbose`). The proxy's files
//! are gone after the run, a cancelled one included, and no process of the test survives.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::Read;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::Mutex;

use awf_mock_llm::MockLlm;
use awf_tests::Sandbox;
use serde_json::Value;
use serde_json::json;

fn bin_dir() -> PathBuf {
    let d = awf_tests::workspace_root().join(".cache/npm/node_modules/.bin");
    assert!(
        d.join("claude").exists(),
        "claude not installed in {}: run scripts/install-agents.sh (scripts/test.sh does)",
        d.display()
    );
    d
}

/// A sandbox pointing claude at `mock`, with its own TMPDIR (where the proxy files go).
fn sandbox(mock: &MockLlm) -> Sandbox {
    let mut sb = Sandbox::new().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    sb.set_env("PATH", &path);
    let tmp = sb.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    sb.set_env("TMPDIR", &tmp.display().to_string());
    sb.set_env("ANTHROPIC_BASE_URL", &mock.url());
    sb.set_env("ANTHROPIC_API_KEY", "sk-test");
    sb.set_env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
    sb.set_env("CLAUDE_CODE_MAX_RETRIES", "0");
    sb
}

/// awf's proxy files left in the sandbox's TMPDIR.
fn proxy_files(sb: &Sandbox) -> Vec<String> {
    std::fs::read_dir(sb.path().join("tmp"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("awf-mcp-proxy-") || n.starts_with("awf-claude-mcp-"))
        .collect()
}

const WORKFLOW: &str = "name: proxied
states:
  initial: ask
  ask:
    type: agent
    provider: claude
    prompt: read the notes and write the answer
    mcp_proxy:
      enable: true
    timeout: 2m
    on_success: done
  done:
    type: terminal
";

fn script() -> Value {
    json!({
        "rules": [
            {"when_has_tools": true, "reply": {
                "tools": [
                    {"name": "mcp__awf-proxy__Read", "args": {"file_path": "notes.txt"}},
                    {"name": "mcp__awf-proxy__Write", "args": {"file_path": "answer.txt", "content": "PAPAYA, via the proxy\n"}}
                ],
                "text": "all done"
            }}
        ],
        "default": {"text": "ok"}
    })
}

/// The tool names the model was offered in its first request.
fn offered(mock: &MockLlm) -> Vec<String> {
    let reqs = mock.model_requests();
    let first = reqs.first().expect("a model request");
    first["body"]["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn claude_uses_awfs_tools_through_the_step_proxy_and_the_run_shows_each_call() {
    let mock = MockLlm::start(script());
    let sb = sandbox(&mock);
    sb.write("notes.txt", "the secret word is PAPAYA\n")
        .unwrap();
    let wf = sb.write("wf.yaml", WORKFLOW).unwrap();
    let run = sb
        .run(&["run", wf.to_str().unwrap(), "-f", "json"])
        .unwrap();
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let doc = run.json().unwrap();
    assert_eq!(doc["states"]["ask"]["output"], "all done", "{doc}");
    // The Write ran through awf's tool, in the workspace.
    assert_eq!(
        std::fs::read_to_string(sb.path().join("answer.txt")).unwrap(),
        "PAPAYA, via the proxy\n"
    );
    // Intercepting: the model saw only the proxy's tools, none of Claude Code's own.
    let tools = offered(&mock);
    assert!(
        tools.contains(&"mcp__awf-proxy__Read".to_owned()),
        "{tools:?}"
    );
    assert!(
        tools.iter().all(|t| t.starts_with("mcp__awf-proxy__")),
        "{tools:?}"
    );
    // What awf's Read returned reached the model.
    let last = mock.model_requests().last().unwrap().to_string();
    assert!(last.contains("PAPAYA"), "{last}");
    // -f json: the step's tool calls, as the router ran them.
    let calls = doc["states"]["ask"]["tool_calls"]
        .as_array()
        .expect("tool_calls");
    let names: Vec<&str> = calls.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["Read", "Write"], "{doc}");
    assert_eq!(calls[0]["input"]["file_path"], "notes.txt");
    // The transcript: router-fidelity tool.call / tool.result lines from mcp-serve.
    let run_id = doc["run_id"].as_str().unwrap();
    let transcript =
        std::fs::read_to_string(awf_tests::data(&sb).join(format!("transcripts/{run_id}.jsonl")))
            .unwrap();
    let lines: Vec<Value> = transcript
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let routed: Vec<&Value> = lines
        .iter()
        .filter(|l| l["payload"]["fidelity"] == "router")
        .collect();
    let kinds: Vec<(&str, &str)> = routed
        .iter()
        .map(|l| {
            (
                l["type"].as_str().unwrap(),
                l["payload"]["name"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("tool.call", "Read"),
            ("tool.result", ""),
            ("tool.call", "Write"),
            ("tool.result", "")
        ],
        "{transcript}"
    );
    assert!(
        routed[1]["payload"]["output"]
            .as_str()
            .unwrap()
            .contains("PAPAYA"),
        "{transcript}"
    );
    assert!(routed.iter().all(|l| l["path"] == "ask"));
    // The agent's own report of the calls is there too, told apart.
    assert!(
        lines.iter().any(|l| l["type"] == "tool.call"
            && l["payload"]["fidelity"] == "agent_emitted"
            && l["payload"]["name"] == "mcp__awf-proxy__Read"),
        "{transcript}"
    );
    // Nothing left behind: files and processes.
    assert_eq!(proxy_files(&sb), Vec::<String>::new());
    awf_tests::wait_for("the run's processes to end", || sb.processes().is_empty());

    // -o streaming --verbose shows the router's calls too.
    std::fs::remove_file(sb.path().join("answer.txt")).unwrap();
    let run = sb
        .run(&["run", wf.to_str().unwrap(), "-o", "streaming", "--verbose"])
        .unwrap();
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("[tool: Read(notes.txt)]"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("[tool: Write(answer.txt)]"),
        "{}",
        run.stdout
    );
    // Each call shown once: the agent's own report of it (`mcp__awf-proxy__Read`) is not.
    assert!(
        !run.stdout.contains("[tool: mcp__awf-proxy__"),
        "{}",
        run.stdout
    );
    assert_eq!(
        run.stdout.matches("[tool: Read(").count(),
        1,
        "{}",
        run.stdout
    );
    assert_eq!(proxy_files(&sb), Vec::<String>::new());
    awf_tests::wait_for("the run's processes to end", || sb.processes().is_empty());
}

#[test]
fn a_run_cancelled_mid_step_leaves_no_proxy_file_and_no_mcp_serve() {
    let mock = MockLlm::start(json!({
        "rules": [
            // After the Read, the model "thinks" for a minute: the run is cancelled meanwhile.
            {"when_has_tool_result": true, "reply": {"text": "too late", "delay_ms": 60000}},
            {"when_has_tools": true, "reply": {"tool": {"name": "mcp__awf-proxy__Read", "args": {"file_path": "notes.txt"}}}}
        ],
        "default": {"text": "ok"}
    }));
    let sb = sandbox(&mock);
    sb.write("notes.txt", "the secret word is PAPAYA\n")
        .unwrap();
    let wf = sb.write("wf.yaml", WORKFLOW).unwrap();
    let mut child = sb
        .cmd(&["run", wf.to_str().unwrap(), "-o", "streaming", "--verbose"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let seen = Arc::new(Mutex::new(String::new()));
    let mut stdout = child.stdout.take().unwrap();
    let reader = {
        let seen = Arc::clone(&seen);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    // The Read went through the proxy, so mcp-serve runs and its files exist.
    awf_tests::wait_for("the model to get the Read's result", || {
        mock.model_requests()
            .iter()
            .any(|r| r["facts"]["tool_results"].as_u64().unwrap_or(0) >= 1)
    });
    // The router's call is shown while the step still runs (-o streaming --verbose).
    awf_tests::wait_for("the proxy's Read on the live output", || {
        seen.lock().unwrap().contains("[tool: Read(notes.txt)]")
    });
    assert!(
        sb.processes()
            .iter()
            .any(|p| p.cmdline.contains("mcp-serve")),
        "{:?}",
        sb.processes()
    );
    assert_eq!(proxy_files(&sb).len(), 3, "{:?}", proxy_files(&sb));
    let pid = child.id().to_string();
    let status = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    reader.join().unwrap();
    let run = awf_tests::Run::from(out);
    assert_eq!(run.code, 130, "{}\n{}", seen.lock().unwrap(), run.stderr);
    assert_eq!(proxy_files(&sb), Vec::<String>::new());
    awf_tests::wait_for("claude and mcp-serve to end", || sb.processes().is_empty());
}

#[test]
fn a_dry_run_shows_the_proxy_the_step_would_get() {
    let sb = Sandbox::new().unwrap();
    let wf = sb.write("wf.yaml", WORKFLOW).unwrap();
    let run = sb.run(&["run", wf.to_str().unwrap(), "--dry-run"]).unwrap();
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let all = format!("{}{}", run.stdout, run.stderr);
    assert!(
        all.contains("MCP proxy: awf-proxy (built-ins Read, Write, Edit, Bash, Glob, Grep)"),
        "{all}"
    );
    let run = sb
        .run(&["run", wf.to_str().unwrap(), "--dry-run", "-f", "json"])
        .unwrap();
    let doc = run.json().unwrap();
    assert_eq!(
        doc["states"][0]["mcp_proxy"],
        json!({"server": "awf-proxy", "intercept_builtins": true}),
        "{doc}"
    );
    // A step without mcp_proxy shows none.
    let plain = WORKFLOW.replace("    mcp_proxy:\n      enable: true\n", "");
    let wf = sb.write("plain.yaml", &plain).unwrap();
    let run = sb.run(&["run", wf.to_str().unwrap(), "--dry-run"]).unwrap();
    assert!(!run.stdout.contains("MCP proxy") && !run.stderr.contains("MCP proxy"));
}
