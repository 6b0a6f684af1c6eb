//! The real agent CLIs (claude, codex, gemini, opencode from npm, pinned by
//! scripts/install-agents.sh) driven by `awf run` against the scripted LLM server on
//! 127.0.0.1 (`awf-mock-llm`). Each CLI gets a fresh HOME, TMPDIR and working directory.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;
use std::time::Instant;

use awf_mock_llm::MockLlm;
use awf_tests::Sandbox;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

#[derive(Clone, Copy, Debug)]
enum Cli {
    Claude,
    Codex,
    Gemini,
    Opencode,
}

impl Cli {
    fn provider(self) -> &'static str {
        match self {
            Self::Claude => "claude",
            Self::Codex => "codex",
            Self::Gemini => "gemini",
            Self::Opencode => "opencode",
        }
    }

    /// Extra `options:` lines for the agent step.
    fn options(self) -> &'static str {
        match self {
            Self::Gemini => "    options:\n      model: gemini-2.5-flash\n",
            Self::Claude | Self::Codex | Self::Opencode => "",
        }
    }
}

fn bin_dir() -> PathBuf {
    let d = awf_tests::workspace_root().join(".cache/npm/node_modules/.bin");
    assert!(
        d.join("claude").exists(),
        "agent CLIs not installed in {}: run scripts/install-agents.sh (scripts/test.sh does)",
        d.display()
    );
    d
}

struct Harness {
    sb: Sandbox,
    mock: MockLlm,
}

fn harness(cli: Cli, script: Value) -> Harness {
    let mut sb = Sandbox::new().expect("sandbox");
    let mock = MockLlm::start(script);
    let url = mock.url();
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    sb.set_env("PATH", &path);
    let tmp = sb.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    sb.set_env("TMPDIR", &tmp.display().to_string());
    let home = sb.path().join("home");
    match cli {
        Cli::Claude => {
            sb.set_env("ANTHROPIC_BASE_URL", &url);
            sb.set_env("ANTHROPIC_API_KEY", "sk-test");
            sb.set_env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
            sb.set_env("CLAUDE_CODE_MAX_RETRIES", "0");
        }
        Cli::Codex => {
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
        Cli::Gemini => {
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
        Cli::Opencode => {
            let cfg = sb.path().join("opencode.json");
            std::fs::write(
                &cfg,
                json!({
                    "$schema": "https://opencode.ai/config.json",
                    "model": "mock/mock-model",
                    "small_model": "mock/mock-model",
                    "autoupdate": false,
                    "share": "disabled",
                    "provider": {"mock": {
                        "npm": "@ai-sdk/openai-compatible",
                        "name": "Mock",
                        "options": {"baseURL": format!("{url}/v1"), "apiKey": "sk-test"},
                        "models": {"mock-model": {"name": "Mock Model", "tool_call": true, "limit": {"context": 200000, "output": 8192}}}
                    }}
                })
                .to_string(),
            )
            .unwrap();
            sb.set_env("OPENCODE_CONFIG", &cfg.display().to_string());
            sb.set_env("OPENCODE_DISABLE_MODELS_FETCH", "1");
            sb.set_env("OPENCODE_DISABLE_AUTOUPDATE", "1");
        }
    }
    Harness { sb, mock }
}

impl Harness {
    fn run_workflow(&self, yaml: &str) -> (i32, Value, String) {
        let wf = self.sb.write("wf.yaml", yaml).unwrap();
        let r = self
            .sb
            .run(&["run", wf.to_str().unwrap(), "-f", "json"])
            .unwrap();
        let doc = r.json().unwrap_or_else(|e| panic!("{e}"));
        (r.code, doc, r.stderr)
    }
}

/// Processes whose working directory is inside `dir` (agent CLIs left behind).
fn processes_in(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        if let Ok(cwd) = std::fs::read_link(e.path().join("cwd"))
            && cwd.starts_with(dir)
        {
            let cmd = std::fs::read_to_string(e.path().join("cmdline"))
                .unwrap_or_default()
                .replace('\0', " ");
            found.push(format!("{name}: {cmd}"));
        }
    }
    found
}

fn single_turn(cli: Cli) {
    let h = harness(
        cli,
        json!({"default": {"text": "hello from mock", "usage": {"input": 11, "output": 7}}}),
    );
    let (code, doc, stderr) = h.run_workflow(&format!(
        "name: single\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: {}\n    prompt: say hi\n{}    timeout: 2m\n    on_success: done\n  done:\n    type: terminal\n",
        cli.provider(),
        cli.options()
    ));
    assert_eq!(code, 0, "{doc}\n{stderr}");
    assert_eq!(doc["states"]["ask"]["output"], json!("hello from mock"));
    let tokens = &doc["states"]["ask"]["tokens"];
    assert_eq!(tokens["estimated"], json!(false), "{doc}");
    assert!(tokens["output"].as_u64().unwrap_or(0) >= 7, "{doc}");
    assert!(!h.mock.model_requests().is_empty());
}

fn json_output_routes_by_a_field(cli: Cli) {
    let h = harness(
        cli,
        json!({"rules": [{"when_last_user_contains": "verdict", "reply": {"text": "```json\n{\"verdict\": \"approve\", \"score\": 9}\n```"}}],
               "default": {"text": "unexpected"}}),
    );
    let (code, doc, stderr) = h.run_workflow(&format!(
        "name: routed\nstates:\n  initial: review\n  review:\n    type: agent\n    provider: {}\n    prompt: give a verdict as JSON\n    output_format: json\n{}    transitions:\n      - when: \"states.review.JSON.verdict == 'approve'\"\n        goto: approved\n    on_success: rejected\n  approved:\n    type: terminal\n  rejected:\n    type: terminal\n    status: failure\n",
        cli.provider(),
        cli.options()
    ));
    assert_eq!(code, 0, "{doc}\n{stderr}");
    assert_eq!(doc["terminal"], json!("approved"));
    assert_eq!(
        doc["states"]["review"]["json"],
        json!({"verdict": "approve", "score": 9})
    );
}

fn conversation_carries_the_first_turn(cli: Cli) {
    let h = harness(
        cli,
        json!({"rules": [
            {"when_last_user_contains": "what word", "when_any_user_contains": "ZEBRA", "reply": {"text": "the word was ZEBRA"}},
            {"when_last_user_contains": "what word", "reply": {"text": "no earlier turn was sent"}},
            {"when_last_user_contains": "ZEBRA", "reply": {"text": "first answer ALPHA"}}
        ], "default": {"text": "unexpected"}}),
    );
    let (code, doc, stderr) = h.run_workflow(&format!(
        "name: convo\nstates:\n  initial: first\n  first:\n    type: agent\n    provider: {p}\n    prompt: remember the word ZEBRA\n{o}    conversation: {{}}\n    on_success: second\n  second:\n    type: agent\n    provider: {p}\n    prompt: what word?\n{o}    conversation:\n      continue_from: first\n    on_success: done\n  done:\n    type: terminal\n",
        p = cli.provider(),
        o = cli.options()
    ));
    assert_eq!(code, 0, "{doc}\n{stderr}");
    assert_eq!(
        doc["states"]["first"]["output"],
        json!("first answer ALPHA")
    );
    assert_eq!(
        doc["states"]["second"]["output"],
        json!("the word was ZEBRA")
    );
}

fn api_error_routes_on_failure(cli: Cli) {
    let h = harness(
        cli,
        json!({"rules": [{"when_last_user_contains": "trigger", "reply": {"status": 400, "error_message": "mock bad request"}}],
               "default": {"text": "unexpected"}}),
    );
    let (code, doc, stderr) = h.run_workflow(&format!(
        "name: failing\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: {}\n    prompt: trigger the error\n{}    on_success: done\n    on_failure: failed\n  done:\n    type: terminal\n  failed:\n    type: terminal\n    status: failure\n    message: agent failed\n",
        cli.provider(),
        cli.options()
    ));
    assert_eq!(code, 3, "{doc}\n{stderr}");
    assert_eq!(doc["terminal"], json!("failed"));
    assert_eq!(doc["states"]["ask"]["status"], json!("failed"));
    let err = doc["states"]["ask"]["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        err.contains("400") || err.contains("mock bad request"),
        "{err}"
    );
}

fn timeout_leaves_no_process_behind(cli: Cli) {
    let h = harness(
        cli,
        json!({"default": {"text": "too late", "delay_ms": 60000}}),
    );
    let t0 = Instant::now();
    let (code, doc, stderr) = h.run_workflow(&format!(
        "name: slow\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: {}\n    prompt: take your time\n{}    timeout: 3s\n    on_success: done\n    on_failure: failed\n  done:\n    type: terminal\n  failed:\n    type: terminal\n    status: failure\n",
        cli.provider(),
        cli.options()
    ));
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "timeout not applied"
    );
    assert_eq!(code, 3, "{doc}\n{stderr}");
    assert_eq!(doc["terminal"], json!("failed"));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        processes_in(h.sb.path()),
        Vec::<String>::new(),
        "agent processes left behind"
    );
}

macro_rules! cli_tests {
    ($($module:ident => $cli:expr),* $(,)?) => {$(
        mod $module {
            use super::*;
            #[test] fn single_turn() { super::single_turn($cli) }
            #[test] fn json_output_routes_by_a_field() { super::json_output_routes_by_a_field($cli) }
            #[test] fn conversation_carries_the_first_turn() { super::conversation_carries_the_first_turn($cli) }
            #[test] fn api_error_routes_on_failure() { super::api_error_routes_on_failure($cli) }
            #[test] fn timeout_leaves_no_process_behind() { super::timeout_leaves_no_process_behind($cli) }
        }
    )*};
}

cli_tests! {
    claude => Cli::Claude,
    codex => Cli::Codex,
    gemini => Cli::Gemini,
    opencode => Cli::Opencode,
}

// ---- openai_compatible over HTTP, against the same scripted server ---------------------------

fn openai_workflow(url: &str, prompt: &str, extra: &str) -> String {
    format!(
        "name: oa\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: openai_compatible\n    prompt: \"{prompt}\"\n    options:\n      base_url: \"{url}/v1\"\n      model: mock-model\n      api_key: \"{{{{.env.MOCK_KEY}}}}\"\n{extra}    on_success: done\n    on_failure: failed\n  done:\n    type: terminal\n  failed:\n    type: terminal\n    status: failure\n"
    )
}

fn openai_harness(script: Value) -> Harness {
    let mut sb = Sandbox::new().expect("sandbox");
    sb.set_env("MOCK_KEY", "sk-mock-key-123");
    Harness {
        sb,
        mock: MockLlm::start(script),
    }
}

#[test]
fn openai_compatible_streams_tokens_and_sends_history() {
    let h = openai_harness(json!({"rules": [
        {"when_last_user_contains": "what word", "when_any_user_contains": "ZEBRA", "reply": {"text": "the word was ZEBRA", "usage": {"input": 20, "output": 5}}},
        {"when_last_user_contains": "ZEBRA", "reply": {"text": "first answer ALPHA", "text_chunks": ["first ", "answer ", "ALPHA"], "usage": {"input": 11, "output": 7}}}
    ], "default": {"text": "unexpected"}}));
    let url = h.mock.url();
    let yaml = format!(
        "name: oa\nstates:\n  initial: first\n  first:\n    type: agent\n    provider: openai_compatible\n    prompt: remember the word ZEBRA\n    system_prompt: be brief\n    options: {{base_url: \"{url}/v1\", model: mock-model, api_key: \"{{{{.env.MOCK_KEY}}}}\"}}\n    conversation: {{}}\n    on_success: second\n  second:\n    type: agent\n    provider: openai_compatible\n    prompt: what word?\n    options: {{base_url: \"{url}/v1\", model: mock-model, api_key: \"{{{{.env.MOCK_KEY}}}}\"}}\n    conversation:\n      continue_from: first\n    on_success: done\n  done:\n    type: terminal\n"
    );
    let (code, doc, stderr) = h.run_workflow(&yaml);
    assert_eq!(code, 0, "{doc}\n{stderr}");
    assert_eq!(
        doc["states"]["first"]["output"],
        json!("first answer ALPHA")
    );
    assert_eq!(doc["states"]["first"]["tokens"]["total"], json!(18));
    assert_eq!(
        doc["states"]["second"]["output"],
        json!("the word was ZEBRA")
    );
    let reqs = h.mock.model_requests();
    let last = reqs.last().expect("requests");
    assert_eq!(
        last["headers"]["authorization"],
        json!("Bearer sk-mock-key-123"),
        "{last}"
    );
    let roles: Vec<String> = last["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(roles, vec!["system", "user", "assistant", "user"]);
    assert_eq!(last["body"]["stream"], json!(true));
}

#[test]
fn openai_compatible_error_classes_route_on_failure() {
    for (status, code) in [
        (401, "EXECUTION.AGENT.AUTH_FAILED"),
        (429, "EXECUTION.AGENT.RATE_LIMITED"),
        (500, "EXECUTION.AGENT.SERVER_ERROR"),
        (400, "EXECUTION.AGENT.BAD_REQUEST"),
    ] {
        let h =
            openai_harness(json!({"default": {"status": status, "error_message": "mock says no"}}));
        let (exit, doc, stderr) = h.run_workflow(&openai_workflow(&h.mock.url(), "hello", ""));
        assert_eq!(exit, 3, "{status}: {doc}\n{stderr}");
        assert_eq!(doc["terminal"], json!("failed"), "{status}");
        let err = doc["states"]["ask"]["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(err.contains("mock says no"), "{status}: {err}");
        // Without on_failure the step's error becomes the run's error, with its code.
        let unrouted =
            openai_workflow(&h.mock.url(), "hello", "").replace("    on_failure: failed\n", "");
        let (exit, doc, _) = h.run_workflow(&unrouted);
        assert_eq!(exit, 3);
        assert_eq!(doc["error"]["code"], json!(code), "{status}: {doc}");
    }
}

#[test]
fn conversation_sessions_are_masked_in_state_files() {
    let h = openai_harness(json!({"default": {"text": "echo sk-supersecret-123 back"}}));
    let url = h.mock.url();
    let yaml = format!(
        "name: s\ninputs:\n  - name: db_password\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: openai_compatible\n    prompt: \"pw {{{{.inputs.db_password}}}}\"\n    options: {{base_url: \"{url}/v1\", model: m, api_key: \"{{{{.env.MOCK_KEY}}}}\"}}\n    conversation: {{}}\n    on_success: done\n  done:\n    type: terminal\n"
    );
    let wf = h.sb.write("wf.yaml", &yaml).unwrap();
    let mut sb_env = h.sb.cmd(&[
        "run",
        wf.to_str().unwrap(),
        "-i",
        "db_password=hunter2hunter2",
    ]);
    sb_env.env("MY_API_TOKEN", "sk-supersecret-123");
    let out = sb_env.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let states = h.sb.path().join("data/awf/states");
    let files: Vec<_> = std::fs::read_dir(states)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().unwrap().is_file())
        .collect();
    assert!(!files.is_empty());
    for e in files {
        let text = std::fs::read_to_string(e.path()).unwrap();
        assert!(text.contains("\"turns\""), "{text}");
        assert!(
            !text.contains("hunter2hunter2") && !text.contains("sk-supersecret-123"),
            "{text}"
        );
    }
}

/// Names of the tools the CLI offered the model in its last model request.
fn offered_tools(mock: &MockLlm) -> Vec<String> {
    let reqs = mock.model_requests();
    let last = reqs.last().expect("a model request");
    last["body"]["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Issue 7: every option claude documents reaches the CLI. The tool options change which tools
/// the real CLI offers the model, whatever the spelling (`tools`, `disallowedTools`); the
/// others are flags the real CLI must accept (it exits non-zero on an unknown one).
#[test]
fn claude_tool_options_reach_the_cli() {
    let run = |options: &str| {
        let h = harness(Cli::Claude, json!({"default": {"text": "fine"}}));
        let (code, doc, stderr) = h.run_workflow(&format!(
            "name: opts\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: claude\n    prompt: say hi\n    options:\n{options}    timeout: 2m\n    on_success: done\n  done:\n    type: terminal\n"
        ));
        assert_eq!(code, 0, "{doc}\n{stderr}");
        assert_eq!(doc["states"]["ask"]["output"], json!("fine"));
        assert!(
            !stderr.contains("has no option"),
            "documented options warned about: {stderr}"
        );
        offered_tools(&h.mock)
    };
    let all = run("      model: sonnet\n");
    assert!(all.iter().any(|t| t == "Bash"), "{all:?}");
    assert!(all.iter().any(|t| t == "Read"), "{all:?}");

    let only = run("      tools: [Read, Grep]\n");
    let mut only_sorted = only.clone();
    only_sorted.sort();
    assert_eq!(only_sorted, ["Grep", "Read"], "{only:?}");

    let without = run(
        "      disallowedTools: [Bash]\n      max_turns: 2\n      permission_mode: default\n      effort: low\n      append_system_prompt: be brief\n      add_dirs: [/tmp]\n      allowed_tools: [Read]\n",
    );
    assert!(!without.iter().any(|t| t == "Bash"), "{without:?}");
    assert!(without.iter().any(|t| t == "Read"), "{without:?}");
}
