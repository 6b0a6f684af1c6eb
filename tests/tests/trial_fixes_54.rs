//! A new user's trial, over the real binary: a `provider: acp` step keeps every message
//! chunk of the agent's reply (with a `messageId` or without; `awf acp-serve` as the agent
//! included), `--verbose` shows one marker per tool call of an `openai_compatible` step with
//! `mcp_proxy`, `awf mcp-serve --workflows` suggests the argument meant and `awf_run_status`
//! shows the terminal's message, and a fallback to the same provider says which one is tried.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_mock_llm::MockLlm;
use awf_tests::Sandbox;
use awf_tests::http_serve;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

/// The scripted ACP agent of tests/acp/scripted_agent.py, as an `agent:` command.
fn scripted() -> String {
    format!(
        "python3 {}",
        awf_tests::workspace_root()
            .join("tests/acp/scripted_agent.py")
            .display()
    )
}

/// A one-step workflow: `ask` prompts the ACP agent `agent` with `prompt`.
fn acp_step(agent: &str, prompt: &str) -> String {
    format!(
        "name: acp-step\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: acp\n    prompt: {prompt:?}\n    options:\n      agent: {agent:?}\n    timeout: 2m\n    on_success: done\n  done:\n    type: terminal\n"
    )
}

/// `awf run <yaml> -f json` in `sb`: exit code, the JSON document, stderr.
fn run_json(sb: &Sandbox, yaml: &str, extra: &[&str]) -> (i32, Value, String) {
    let mut args = vec!["-f", "json"];
    args.extend_from_slice(extra);
    let r = sb.run_workflow("wf.yaml", yaml, &args).unwrap();
    let doc = r
        .json()
        .unwrap_or_else(|e| panic!("{e}\n{}\n{}", r.stdout, r.stderr));
    (r.code, doc, r.stderr)
}

/// Trial: an ACP agent that put a `messageId` on only some of its three chunks got only
/// those into the step's output (id on chunk 0: `part one` alone). Every chunk is the
/// output, in order, wherever the ids are.
#[test]
fn an_acp_step_keeps_every_message_chunk_whichever_carry_a_message_id() {
    let sb = Sandbox::new().unwrap();
    for k in [-1, 0, 1, 2] {
        let (code, doc, stderr) = run_json(&sb, &acp_step(&scripted(), &format!("MIXED:{k}")), &[]);
        assert_eq!(code, 0, "id on chunk {k}: {doc:#}\n{stderr}");
        assert_eq!(
            doc["states"]["ask"]["output"],
            json!("part one. part two. part three."),
            "id on chunk {k}"
        );
    }
}

/// Trial: a step whose agent is `awf acp-serve --workflow chatwf`, prompted `/pipeline` (a
/// workflow that fails after a step that printed), had only `fetched\n` as its output:
/// acp-serve's own line saying the workflow failed (sent without a `messageId`, beside the
/// step's text, which had one) was dropped. Both are the output now, and acp-serve gives
/// its own lines a message id of their own.
#[test]
fn an_acp_step_driving_awf_acp_serve_keeps_its_failure_line() {
    let sb = http_serve::sandbox_with(&[
        (
            "pipeline",
            "name: pipeline\nstates:\n  initial: fetch\n  fetch: {type: step, command: 'echo fetched', on_success: build}\n  build: {type: step, command: 'exit 3', on_success: done}\n  done: {type: terminal}\n",
        ),
        (
            "chatwf",
            "name: chatwf\ninputs:\n  - {name: prompt, type: string}\nstates:\n  initial: a\n  a: {type: step, command: 'echo chat', on_success: done}\n  done: {type: terminal}\n",
        ),
    ]);
    let agent = format!(
        "{} acp-serve --workflow chatwf",
        awf_tests::awf_bin().display()
    );
    let (code, doc, stderr) = run_json(&sb, &acp_step(&agent, "/pipeline"), &[]);
    // acp-serve ends a failed workflow's turn with `end_turn` and says it failed in words.
    assert_eq!(code, 0, "{doc:#}\n{stderr}");
    let output = doc["states"]["ask"]["output"].as_str().unwrap_or_default();
    assert!(
        output.starts_with("fetched\nWorkflow \"pipeline\" failed: [EXECUTION.COMMAND.FAILED] "),
        "{output:?}"
    );
}

/// The `agent_message_chunk` updates of one `/prompt` turn of `awf acp-serve` in `sb`.
fn acp_serve_chunks(sb: &Sandbox, prompt: &str) -> Vec<Value> {
    let mut raw = awf_tests::mcp::RawServer::spawn(sb.cmd(&["acp-serve"]));
    let mut call = |id: u64, method: &str, params: Value| -> (Vec<Value>, Value) {
        raw.send_json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let mut before = Vec::new();
        loop {
            let f = raw.recv();
            if f.get("method").is_none() && f["id"] == json!(id) {
                return (before, f);
            }
            before.push(f);
        }
    };
    call(
        1,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "e2e", "version": "1"}}),
    );
    let (_, s) = call(
        2,
        "session/new",
        json!({"cwd": sb.path().display().to_string(), "mcpServers": []}),
    );
    let sid = s["result"]["sessionId"].as_str().unwrap().to_owned();
    let (before, _) = call(
        3,
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": prompt}]}),
    );
    let _ = raw.close();
    before
        .into_iter()
        .filter(|f| {
            f["method"] == "session/update"
                && f["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        })
        .map(|f| f["params"]["update"].clone())
        .collect()
}

/// `awf acp-serve` labels every message chunk: a step's text with the step's id, its own
/// lines (the workflow failed, an invalid prompt) with ids of their own.
#[test]
fn awf_acp_serve_gives_every_message_chunk_a_message_id() {
    let sb = http_serve::sandbox_with(&[(
        "pipeline",
        "name: pipeline\nstates:\n  initial: fetch\n  fetch: {type: step, command: 'echo fetched', on_success: build}\n  build: {type: step, command: 'exit 3', on_success: done}\n  done: {type: terminal}\n",
    )]);
    let chunks = acp_serve_chunks(&sb, "/pipeline");
    let texts: Vec<&str> = chunks
        .iter()
        .map(|u| u["content"]["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(texts.len(), 2, "{chunks:#?}");
    assert_eq!(texts[0], "fetched\n");
    assert!(
        texts[1].starts_with("Workflow \"pipeline\" failed: "),
        "{texts:?}"
    );
    let ids: Vec<&str> = chunks
        .iter()
        .map(|u| u["messageId"].as_str().unwrap_or_default())
        .collect();
    assert!(ids[0].ends_with(":fetch"), "{ids:?}");
    assert!(!ids[1].is_empty() && ids[1] != ids[0], "{ids:?}");
    // A turn that runs nothing: its line has an id too.
    let invalid = acp_serve_chunks(&sb, "/pipeline nope=1");
    assert_eq!(invalid.len(), 1, "{invalid:#?}");
    assert!(
        invalid[0]["messageId"]
            .as_str()
            .is_some_and(|i| !i.is_empty()),
        "{invalid:#?}"
    );
}

/// Trial: `--verbose` printed `[tool: Read(src/a.txt)]` twice for one call of an
/// `openai_compatible` step with `mcp_proxy` (the provider's report and the in-process
/// router's record), while `-f json` listed one call. One marker per call.
#[test]
fn verbose_shows_one_marker_per_tool_call_of_an_openai_compatible_step_with_mcp_proxy() {
    let mock = MockLlm::start(json!({
        "rules": [
            {"when_has_tool_result": true, "reply": {"text": "done reading"}},
            {"when_has_tools": true, "reply": {"tool": {"name": "Read", "args": {"path": "src/a.txt"}}}}
        ],
        "default": {"text": "ok"}
    }));
    let sb = Sandbox::new().unwrap();
    sb.write("src/a.txt", "alpha\n").unwrap();
    let wf = format!(
        "name: proxied\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: openai_compatible\n    prompt: read the file\n    options:\n      base_url: {}/v1\n      model: mock-model\n      api_key: sk-test\n    mcp_proxy:\n      enable: true\n    timeout: 2m\n    on_success: done\n  done:\n    type: terminal\n",
        mock.url()
    );
    let r = sb
        .run_workflow("wf.yaml", &wf, &["--verbose", "-o", "streaming"])
        .unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let markers: Vec<&str> = r.stdout.lines().filter(|l| l.contains("[tool")).collect();
    assert_eq!(markers, vec!["[tool: Read(src/a.txt)]"], "{}", r.stdout);
}

/// Trial: over MCP (`awf mcp-serve --workflows`), a misspelt argument (`verison`) got no
/// did-you-mean, where the CLI gives one; and `awf_run_status` of the run, asked of another
/// server (the run read back from its record), left out the terminal's message the call had
/// shown.
#[test]
fn mcp_workflow_tools_suggest_the_argument_meant_and_status_keeps_the_terminal_message() {
    let sb = http_serve::sandbox_with(&[(
        "rel",
        "name: rel\ninputs:\n  - {name: version, type: string, required: true}\nstates:\n  initial: a\n  a: {type: step, command: 'echo {{.inputs.version}}', on_success: done}\n  done: {type: terminal, message: 'released {{.inputs.version}}'}\n",
    )]);
    let mut s = awf_tests::mcp::RawServer::spawn(sb.cmd(&["mcp-serve", "--workflows"]));
    s.initialize("2025-06-18");
    let typo = s.call(1, "rel", &json!({"verison": "1.2"}));
    assert_eq!(typo["result"]["isError"], json!(true), "{typo}");
    assert_eq!(
        typo["result"]["content"][0]["text"],
        json!("unknown argument `verison` (did you mean 'version'?); this tool takes: version")
    );
    let done = s.call(2, "rel", &json!({"version": "1.2"}));
    let text = done["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.starts_with("Workflow rel completed: released 1.2 (run "),
        "{done}"
    );
    let run_id = done["result"]["structuredContent"]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let expected = text.split(" (run ").next().unwrap().to_owned();
    // This server's own run, then the record read by another server.
    let here = s.call(3, "awf_run_status", &json!({"run_id": run_id}));
    let here = here["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        here.starts_with(&format!("{expected} (run {run_id}")),
        "{here}"
    );
    let _ = s.close();
    let mut other = awf_tests::mcp::RawServer::spawn(sb.cmd(&["mcp-serve", "--workflows"]));
    other.initialize("2025-06-18");
    let status = other.call(1, "awf_run_status", &json!({"run_id": run_id}));
    let recorded = status["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        recorded.starts_with(&format!("{expected} (run {run_id}")),
        "{status}"
    );
    assert_eq!(
        status["result"]["structuredContent"]["result"]["message"],
        json!("released 1.2")
    );
    let _ = other.close();
}

/// The stderr line of the fallback warning of step `ask`.
fn fallback_warning(stderr: &str) -> String {
    stderr
        .lines()
        .find(|l| l.contains("step ask: provider "))
        .unwrap_or_else(|| panic!("no fallback warning in {stderr}"))
        .trim()
        .to_owned()
}

/// Trial: a fallback warning said `trying openai_compatible` when the failed provider was
/// `openai_compatible` too. Both are named with what tells them apart: the model (or the
/// endpoint), else their place in the step's order.
#[test]
fn a_fallback_to_the_same_provider_says_which_one_is_tried() {
    let mock = MockLlm::start(json!({
        "rules": [
            {"when_model_contains": "m-a", "reply": {"status": 503, "error_message": "overloaded"}},
            {"when_model_contains": "m-same", "times": 1, "reply": {"status": 503, "error_message": "overloaded"}}
        ],
        "default": {"text": "from the fallback"}
    }));
    let sb = Sandbox::new().unwrap();
    let wf = |primary: &str, fallback: &str| {
        format!(
            "name: fb\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: openai_compatible\n    prompt: hi\n    options: {{base_url: \"{url}/v1\", api_key: sk-1, {primary}}}\n    fallback_providers:\n      - {{provider: openai_compatible, options: {{base_url: \"{url}/v1\", api_key: sk-2, {fallback}}}}}\n    on_success: done\n  done: {{type: terminal}}\n",
            url = mock.url()
        )
    };
    let (code, doc, stderr) = run_json(&sb, &wf("model: m-a", "model: m-b"), &[]);
    assert_eq!(code, 0, "{doc:#}\n{stderr}");
    assert_eq!(doc["states"]["ask"]["output"], json!("from the fallback"));
    let line = fallback_warning(&stderr);
    assert!(
        line.contains("step ask: provider openai_compatible (model m-a) failed (unavailable: ")
            && line.ends_with("; trying openai_compatible (model m-b)"),
        "{line}"
    );
    // The same model and endpoint: their places in the step's order.
    let (code, doc, stderr) = run_json(&sb, &wf("model: m-same", "model: m-same"), &[]);
    assert_eq!(code, 0, "{doc:#}\n{stderr}");
    let line = fallback_warning(&stderr);
    assert!(
        line.contains(
            "step ask: provider openai_compatible (the step's own) failed (unavailable: "
        ) && line.ends_with("; trying openai_compatible (fallback 1)"),
        "{line}"
    );
}
