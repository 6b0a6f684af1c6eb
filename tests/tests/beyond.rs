//! End-to-end tests of issue 14's "beyond every peer" features over the built binary: safe
//! shell interpolation (`shell_quote`), budgets, `fallback_providers:` and usage limits,
//! the agent cases against the scripted LLM (tests/mock-llm).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use awf_tests::workspace_root;
use pretty_assertions::assert_eq;

fn sandbox() -> Sandbox {
    Sandbox::new().expect("sandbox")
}

// ---- safe shell interpolation ----------------------------------------------------------------

const HOSTILE: &str = "it's; touch $TMPDIR/pwned #";

fn safe_shell_text() -> String {
    std::fs::read_to_string(workspace_root().join("workflows/safe-shell.yaml")).unwrap()
}

#[test]
fn a_hostile_input_runs_nothing_under_shell_quote() {
    let mut sb = sandbox();
    let tmp = sb.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    sb.set_env("TMPDIR", &tmp.display().to_string());
    let wf = workspace_root().join("workflows/safe-shell.yaml");
    let r = sb
        .run(&[
            "run",
            &wf.display().to_string(),
            "-f",
            "json",
            "-i",
            &format!("message={HOSTILE}"),
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!tmp.join("pwned").exists(), "the input ran as shell code");
    let doc = r.json().unwrap();
    assert_eq!(doc["states"]["echo"]["output"], format!("{HOSTILE}\n"));
    assert_eq!(
        doc["states"]["count"]["output"],
        HOSTILE.chars().count().to_string()
    );
}

#[test]
fn the_same_input_runs_as_shell_code_without_shell_quote() {
    // Proves the test above can fail: the same workflow without the mode is injectable.
    let mut sb = sandbox();
    let tmp = sb.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    sb.set_env("TMPDIR", &tmp.display().to_string());
    let text = safe_shell_text().replace("shell_quote: true", "shell_quote: false");
    let wf = sb.write("unsafe.yaml", &text).unwrap();
    let _ = sb
        .run(&[
            "run",
            &wf.display().to_string(),
            "-i",
            &format!("message={HOSTILE}"),
        ])
        .unwrap();
    assert!(tmp.join("pwned").exists(), "the unquoted input did not run");
}

#[test]
fn validate_warns_about_unquoted_values_with_the_fix_in_the_hint() {
    let sb = sandbox();
    let text = safe_shell_text().replace("shell_quote: true\n", "");
    let wf = sb.write("unsafe.yaml", &text).unwrap();
    let r = sb
        .run(&["validate", &wf.display().to_string(), "-f", "json"])
        .unwrap();
    assert_eq!(
        r.code, 0,
        "a warning is not an error: {}{}",
        r.stdout, r.stderr
    );
    let doc = r.json().unwrap();
    let text = doc.to_string();
    assert!(
        text.contains("WORKFLOW.VALIDATION.UNQUOTED_SHELL_VALUE"),
        "{doc:#}"
    );
    assert!(text.contains("{{shell_quote .inputs.message}}"), "{doc:#}");
    let quoted = sb.write("safe.yaml", &safe_shell_text()).unwrap();
    let r = sb
        .run(&["validate", &quoted.display().to_string(), "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        !r.stdout.contains("UNQUOTED_SHELL_VALUE"),
        "shell_quote: true leaves nothing to warn about: {}",
        r.stdout
    );
}

// ---- budgets ---------------------------------------------------------------------------------

use awf_mock_llm::MockLlm;
use serde_json::Value;
use serde_json::json;

/// A sandbox whose `openai_compatible` steps talk to `mock` (model `mock-model`).
fn openai_sandbox(mock: &MockLlm) -> Sandbox {
    let mut sb = sandbox();
    sb.set_env("OPENAI_BASE_URL", &format!("{}/v1", mock.url()));
    sb.set_env("OPENAI_MODEL", "mock-model");
    sb.set_env("OPENAI_API_KEY", "sk-mock-key-123");
    sb
}

fn run_json(sb: &Sandbox, wf: &str, extra: &[&str]) -> (i32, Value, String) {
    let mut args = vec!["run", wf, "-f", "json"];
    args.extend_from_slice(extra);
    let r = sb.run(&args).unwrap();
    let doc = r.json().unwrap_or_else(|e| panic!("{e}"));
    (r.code, doc, r.stderr)
}

fn example(name: &str) -> String {
    workspace_root()
        .join("workflows")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn the_step_that_would_start_past_the_budget_does_not_start_and_the_spend_is_recorded() {
    // The draft costs 2100 tokens: the workflow's budget of 2000 is spent before `tighten`.
    let mock = MockLlm::start(json!({"rules": [
        {"when_last_user_contains": "bullet points about", "reply": {"text": "- a\n- b\n- c", "usage": {"input": 1500, "output": 600}}}
    ], "default": {"text": "should not be asked", "usage": {"input": 1, "output": 1}}}));
    let sb = openai_sandbox(&mock);
    sb.write(
        ".awf/config.yaml",
        "prices:\n  mock-model: {input_per_mtok: 10, output_per_mtok: 30}\n",
    )
    .unwrap();
    let (code, doc, stderr) = run_json(&sb, &example("budget.yaml"), &[]);
    assert_eq!(code, 3, "{doc:#}\n{stderr}");
    assert_eq!(doc["terminal"], json!("over_budget"), "{doc:#}");
    assert_eq!(
        mock.model_requests().len(),
        1,
        "tighten must not call the model"
    );
    let err = doc["states"]["tighten"]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        err.contains("not started") && err.contains("2000 tokens"),
        "{err}"
    );
    assert_eq!(doc["spend"]["tokens"], json!(2100), "{doc:#}");
    assert_eq!(doc["spend"]["tokens_input"], json!(1500));
    assert_eq!(doc["spend"]["tokens_output"], json!(600));
    // 1500 × $10/M + 600 × $30/M = $0.033
    let usd = doc["spend"]["usd"].as_f64().unwrap();
    assert!((usd - 0.033).abs() < 1e-9, "{usd}");
    assert!(
        (doc["states"]["draft"]["cost_usd"].as_f64().unwrap() - 0.033).abs() < 1e-9,
        "{doc:#}"
    );
    let run_id = doc["run_id"].as_str().unwrap().to_owned();

    // The state file, `awf status` and `awf history` show the spend too.
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(
            awf_tests::data(&sb)
                .join("states")
                .join(format!("{run_id}.json")),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(state["spend"]["tokens"], json!(2100), "{state:#}");
    let status = sb.run(&["status", &run_id]).unwrap();
    assert!(
        status
            .stdout
            .contains("Spend:     2100 tokens (1500 in, 600 out), $0.033000"),
        "{}",
        status.stdout
    );
    let status = sb.run(&["status", &run_id, "-f", "json"]).unwrap();
    assert_eq!(status.json().unwrap()["spend"]["tokens"], json!(2100));
    let history = sb.run(&["history", "-f", "json"]).unwrap();
    let rows = history.json().unwrap();
    assert_eq!(rows[0]["spend"]["tokens"], json!(2100), "{rows:#}");
    let history = sb.run(&["history"]).unwrap();
    assert!(
        history.stdout.contains("SPEND") && history.stdout.contains("2100 tokens"),
        "{}",
        history.stdout
    );
}

#[test]
fn a_dollar_budget_stops_the_run_with_its_own_code() {
    let mock = MockLlm::start(
        json!({"default": {"text": "fine", "usage": {"input": 100, "output": 100}}}),
    );
    let sb = openai_sandbox(&mock);
    sb.write(
        ".awf/config.yaml",
        "prices:\n  mock: {input_per_mtok: 100, output_per_mtok: 100}\n",
    )
    .unwrap();
    // $0.02 a call (priced by the longest key `mock-model` starts with); the budget is $0.03.
    let wf = sb
        .write(
            "wf.yaml",
            "name: usd\nbudget: {usd: 0.03}\nstates:\n  initial: a\n  a: {type: agent, provider: openai_compatible, prompt: one, on_success: b}\n  b: {type: agent, provider: openai_compatible, prompt: two, on_success: c}\n  c: {type: agent, provider: openai_compatible, prompt: three, on_success: done}\n  done: {type: terminal}\n",
        )
        .unwrap();
    let (code, doc, stderr) = run_json(&sb, wf.to_str().unwrap(), &[]);
    assert_eq!(code, 3, "{doc:#}\n{stderr}");
    assert_eq!(
        doc["error"]["code"],
        json!("EXECUTION.BUDGET.EXCEEDED"),
        "{doc:#}"
    );
    assert_eq!(mock.model_requests().len(), 2);
    assert_eq!(doc["states"]["c"]["status"], json!("failed"));
    assert!((doc["spend"]["usd"].as_f64().unwrap() - 0.04).abs() < 1e-9);
    let hint = doc["error"]["hints"].to_string();
    assert!(hint.contains("budget"), "{doc:#}");
}

#[test]
fn a_step_budget_counts_that_step_s_own_calls() {
    // 18 tokens a call; the step may spend 30: the third iteration does not start.
    let mock =
        MockLlm::start(json!({"default": {"text": "ok", "usage": {"input": 11, "output": 7}}}));
    let sb = openai_sandbox(&mock);
    let wf = sb
        .write(
            "wf.yaml",
            "name: per-step\nstates:\n  initial: each\n  each:\n    type: for_each\n    items: '[\"a\", \"b\", \"c\"]'\n    body: [ask]\n    on_complete: done\n  ask:\n    type: agent\n    provider: openai_compatible\n    prompt: \"item {{.loop.Item}}\"\n    budget: {tokens: 30}\n    on_success: each\n  done: {type: terminal}\n",
        )
        .unwrap();
    let (code, doc, stderr) = run_json(&sb, wf.to_str().unwrap(), &[]);
    assert_ne!(code, 0, "{doc:#}\n{stderr}");
    assert_eq!(mock.model_requests().len(), 2, "{doc:#}");
    assert!(
        doc.to_string().contains("the step's budget of 30 tokens"),
        "{doc:#}"
    );
    assert_eq!(doc["spend"]["tokens"], json!(36));
}
