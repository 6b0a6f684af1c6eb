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

/// Points `TMPDIR` of `sb` at a fresh `<sandbox>/tmp`; returns that directory.
fn with_tmpdir(sb: &mut Sandbox) -> std::path::PathBuf {
    let tmp = sb.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    sb.set_env("TMPDIR", &tmp.display().to_string());
    tmp
}

// ---- safe shell interpolation ----------------------------------------------------------------

const HOSTILE: &str = "it's; touch $TMPDIR/pwned #";

fn safe_shell_text() -> String {
    std::fs::read_to_string(workspace_root().join("workflows/safe-shell.yaml")).unwrap()
}

#[test]
fn a_hostile_input_runs_nothing_under_shell_quote() {
    let mut sb = sandbox();
    let tmp = with_tmpdir(&mut sb);
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
    let tmp = with_tmpdir(&mut sb);
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

/// A shell `script_file:` under `shell_quote: true` gets its values quoted as a `command:`'s
/// are, a script for another interpreter is rendered as written, and without the mode
/// `awf validate` warns about the shell script's values (new user: `awf init`'s example ran
/// an input's `$( … )` from its script file, unwarned).
#[test]
fn a_shell_script_file_is_quoted_under_shell_quote_and_warned_about_without_it() {
    let mut sb = sandbox();
    let tmp = with_tmpdir(&mut sb);
    sb.write(
        "s.sh",
        "echo \"value: {{.inputs.v}}\"\necho bare: {{.inputs.v}}\n",
    )
    .unwrap();
    sb.write(
        "p.sh",
        "#!/usr/bin/env -S sh -e\nprintf '%s\\n' {{.inputs.v}}\n",
    )
    .unwrap();
    sb.write(
        "o.awk",
        "#!/usr/bin/awk -f\nBEGIN { print \"{{.inputs.v}}\" }\n",
    )
    .unwrap();
    let text = "name: sq\nshell_quote: true\ninputs: [{name: v, type: string}]\nstates:\n  \
                initial: s\n  s: {type: step, script_file: s.sh, on_success: p}\n  \
                p: {type: step, script_file: p.sh, on_success: o}\n  \
                o: {type: step, script_file: o.awk, on_success: done}\n  \
                done: {type: terminal}\n";
    let wf = sb.write("sq.yaml", text).unwrap();
    let hostile = "$(touch $TMPDIR/pwned); `touch $TMPDIR/pwned2`";
    let r = sb
        .run(&[
            "run",
            &wf.display().to_string(),
            "-f",
            "json",
            "-i",
            &format!("v={hostile}"),
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!tmp.join("pwned").exists(), "the input ran as shell code");
    assert!(!tmp.join("pwned2").exists(), "the input ran as shell code");
    let doc = r.json().unwrap();
    assert_eq!(
        doc["states"]["s"]["output"],
        format!("value: {hostile}\nbare: {hostile}\n")
    );
    assert_eq!(doc["states"]["p"]["output"], format!("{hostile}\n"));
    // awk's script is not shell text: the value lands as written.
    assert_eq!(doc["states"]["o"]["output"], format!("{hostile}\n"));

    let unsafe_wf = sb
        .write("unsafe.yaml", &text.replace("shell_quote: true\n", ""))
        .unwrap();
    let r = sb
        .run(&["validate", &unsafe_wf.display().to_string(), "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let mut warned: Vec<String> = r.json().unwrap()["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["code"] == "WORKFLOW.VALIDATION.UNQUOTED_SHELL_VALUE")
        .map(|d| d["path"].as_str().unwrap().to_owned())
        .collect();
    warned.sort();
    assert_eq!(
        warned,
        [
            "states.p.script_file",
            "states.s.script_file",
            "states.s.script_file"
        ],
        "{}",
        r.stdout
    );
}

/// `awf init`'s example (which sets `shell_quote: true`) runs nothing an input holds, its
/// script file included.
#[test]
fn the_init_example_runs_no_input_as_shell_code() {
    let mut sb = sandbox();
    let tmp = with_tmpdir(&mut sb);
    let r = sb.run(&["init"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = sb
        .run(&[
            "run",
            "example",
            "-f",
            "json",
            "-i",
            "name=$(touch $TMPDIR/pwned)",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        !tmp.join("pwned").exists(),
        "the input ran as shell code: {}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("Script ran for $(touch $TMPDIR/pwned) in"),
        "{}",
        r.stdout
    );
}

/// A workflow echoing `three <target>` with `command` (no `shell_quote: true`).
fn three_text(command: &str) -> String {
    format!(
        "name: three\ninputs:\n  - name: target\n    type: string\nstates:\n  initial: echo\n  echo:\n    type: step\n    command: {}\n    on_success: done\n  done:\n    type: terminal\n    status: success\n",
        serde_json::to_string(command).unwrap()
    )
}

/// `awf validate -f json` of `text`: the shell-value diagnostics as (code, message, hint).
fn shell_diagnostics(sb: &Sandbox, file: &str, text: &str) -> Vec<(String, String, String)> {
    let wf = sb.write(file, text).unwrap();
    let r = sb
        .run(&["validate", &wf.display().to_string(), "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let doc = r.json().unwrap();
    let mut out = Vec::new();
    let mut stack = vec![doc];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(code) = m.get("code").and_then(|c| c.as_str())
                    && code.contains("SHELL")
                {
                    let text = |k: &str| {
                        m.get(k)
                            .map(|v| match v {
                                serde_json::Value::String(s) => s.clone(),
                                other => other.to_string(),
                            })
                            .unwrap_or_default()
                    };
                    out.push((
                        code.to_owned(),
                        text("message"),
                        text("hint") + &text("hints"),
                    ));
                } else {
                    stack.extend(m.into_iter().map(|(_, v)| v));
                }
            }
            serde_json::Value::Array(a) => stack.extend(a),
            _ => {}
        }
    }
    out
}

/// Issue 14: inside a double-quoted string the hint closes the quotes around
/// `shell_quote` instead of telling the user to put `{{shell_quote …}}` there (where its
/// single quotes would be literal); following it, a `$( )` input runs nothing; and the old
/// hint's form is warned about.
#[test]
fn inside_double_quotes_the_hint_closes_the_quotes_and_following_it_runs_nothing() {
    let mut sb = sandbox();
    let tmp = with_tmpdir(&mut sb);
    let hostile = "$(touch $TMPDIR/pwned)";
    // The warning on the double-quoted value gives the closed form.
    let found = shell_diagnostics(
        &sb,
        "dq.yaml",
        &three_text("echo \"three {{.inputs.target}}\""),
    );
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].0, "WORKFLOW.VALIDATION.UNQUOTED_SHELL_VALUE");
    let fixed = "\"three \"{{shell_quote .inputs.target}}";
    assert!(found[0].2.contains(fixed), "{found:#?}");
    // Following the hint: nothing runs, the value comes back literally, validate is silent.
    let text = three_text(&format!("echo {fixed}"));
    assert!(shell_diagnostics(&sb, "fixed.yaml", &text).is_empty());
    let (code, doc, stderr) = run_new(
        &sb,
        "fixed.yaml",
        &text,
        &["-i", &format!("target={hostile}")],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(!tmp.join("pwned").exists(), "the input ran as shell code");
    assert_eq!(
        doc["states"]["echo"]["output"],
        format!("three {hostile}\n")
    );
    // The old hint's form: shell_quote inside the double quotes is warned about, and rightly
    // so: the same input runs.
    let old = three_text("echo \"three {{shell_quote .inputs.target}}\"");
    let found = shell_diagnostics(&sb, "old.yaml", &old);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].0, "WORKFLOW.VALIDATION.INEFFECTIVE_SHELL_QUOTE");
    assert!(found[0].1.contains("literal"), "{found:#?}");
    assert!(found[0].2.contains(fixed), "{found:#?}");
    let _ = run_new(&sb, "old.yaml", &old, &["-i", &format!("target={hostile}")]);
    assert!(
        tmp.join("pwned").exists(),
        "shell_quote inside \"…\" was expected to protect nothing"
    );
    std::fs::remove_file(tmp.join("pwned")).unwrap();
    // Under `shell_quote: true` the old form is safe: its quotes print, nothing runs.
    let moded = old.replace("name: three\n", "name: three\nshell_quote: true\n");
    let (code, doc, stderr) = run_new(
        &sb,
        "moded.yaml",
        &moded,
        &["-i", &format!("target={hostile}")],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(
        !tmp.join("pwned").exists(),
        "the input ran as shell code under the mode"
    );
    assert_eq!(
        doc["states"]["echo"]["output"],
        format!("three '{hostile}'\n")
    );
}

/// Breaker: under `shell_quote: true`, a value right after a backslash, inside `${ … }`
/// (also in the form the old hint gave) or in a `<<-` here-document as its tab-indented
/// delimiter line ran `$( )` or the lines after it, and validate said nothing. Now validate
/// warns at each, the run refuses the value (nothing runs), and a plain word goes in.
#[test]
fn values_that_no_quoting_protects_are_refused_under_the_mode() {
    let mut sb = sandbox();
    let tmp = with_tmpdir(&mut sb);
    let hostile = "$(touch $TMPDIR/pwned)";
    let heredoc_escape = "x\n\tEOF\ntouch $TMPDIR/pwned\ncat <<-EOF";
    for (i, (command, value)) in [
        ("echo X \\{{.inputs.target}}", hostile),
        ("echo L \"${UNSET_Q:-{{.inputs.target}}}\"", hostile),
        (
            "echo \"${UNSET_Q:-\"{{shell_quote .inputs.target}}\"}\"",
            hostile,
        ),
        ("cat <<-EOF\n\tQ3 {{.inputs.target}}\n\tEOF", heredoc_escape),
    ]
    .into_iter()
    .enumerate()
    {
        let text = three_text(command).replace("name: three\n", "name: three\nshell_quote: true\n");
        let file = format!("w{i}.yaml");
        // The mode quotes a here-document's values (refusing one holding the delimiter
        // line): no warning there; elsewhere it can only refuse, which validate says.
        let found = shell_diagnostics(&sb, &file, &text);
        let warned = usize::from(!command.starts_with("cat <<"));
        assert_eq!(found.len(), warned, "{command}: {found:#?}");
        let (code, doc, stderr) = run_new(&sb, &file, &text, &["-i", &format!("target={value}")]);
        assert_eq!(code, 3, "{command}: {doc}\n{stderr}");
        assert!(
            !tmp.join("pwned").exists(),
            "{command}: the input ran as shell code"
        );
        assert_eq!(
            doc["error"]["code"], "EXECUTION.TEMPLATE.FAILED",
            "{command}: {doc}"
        );
        // A plain word cannot carry shell code: it goes in (not through `shell_quote`,
        // whose quotes make it no plain word).
        if command.contains("shell_quote") {
            continue;
        }
        let (code, doc, stderr) = run_new(&sb, &file, &text, &["-i", "target=v1.2"]);
        assert_eq!(code, 0, "{command}: {stderr}");
        assert!(
            doc["states"]["echo"]["output"]
                .as_str()
                .is_some_and(|o| o.contains("v1.2")),
            "{command}: {doc}"
        );
    }
}

/// Issue 14: integer, boolean and plain-word enum inputs cannot carry shell code; validate
/// says nothing about them.
#[test]
fn validate_is_silent_about_inputs_that_cannot_carry_shell_code() {
    let sb = sandbox();
    let text = "name: safe-inputs\ninputs:\n  - name: port\n    type: integer\n  - name: verbose\n    type: boolean\n  - name: env\n    type: string\n    validation:\n      enum: [dev, staging, prod]\n  - name: free\n    type: string\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo {{.inputs.port}} \"{{.inputs.verbose}}\" {{.inputs.env}} {{.inputs.free}}\n    on_success: done\n  done:\n    type: terminal\n    status: success\n";
    let found = shell_diagnostics(&sb, "safe.yaml", text);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].1.contains("inputs.free"), "{found:#?}");
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

/// Writes the workflow `text` as `file` in the sandbox and runs it ([`run_json`]).
fn run_new(sb: &Sandbox, file: &str, text: &str, extra: &[&str]) -> (i32, Value, String) {
    let wf = sb.write(file, text).unwrap();
    run_json(sb, wf.to_str().unwrap(), extra)
}

/// `awf status <run_id> -f json`.
fn status_json(sb: &Sandbox, run_id: &str) -> Value {
    sb.run(&["status", run_id, "-f", "json"])
        .unwrap()
        .json()
        .unwrap()
}

/// The run's state file (`<data>/states/<run_id>.json`).
fn state_file(sb: &Sandbox, run_id: &str) -> Value {
    let path = awf_tests::data(sb)
        .join("states")
        .join(format!("{run_id}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
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
    let state = state_file(&sb, &run_id);
    assert_eq!(state["spend"]["tokens"], json!(2100), "{state:#}");
    let status = sb.run(&["status", &run_id]).unwrap();
    assert!(
        status
            .stdout
            .contains("Spend:     2100 tokens (1500 in, 600 out), $0.033000"),
        "{}",
        status.stdout
    );
    assert_eq!(status_json(&sb, &run_id)["spend"]["tokens"], json!(2100));
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
    let (code, doc, stderr) = run_new(
        &sb,
        "wf.yaml",
        "name: usd\nbudget: {usd: 0.03}\nstates:\n  initial: a\n  a: {type: agent, provider: openai_compatible, prompt: one, on_success: b}\n  b: {type: agent, provider: openai_compatible, prompt: two, on_success: c}\n  c: {type: agent, provider: openai_compatible, prompt: three, on_success: done}\n  done: {type: terminal}\n",
        &[],
    );
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
    let (code, doc, stderr) = run_new(
        &sb,
        "wf.yaml",
        "name: per-step\nstates:\n  initial: each\n  each:\n    type: for_each\n    items: '[\"a\", \"b\", \"c\"]'\n    body: [ask]\n    on_complete: done\n  ask:\n    type: agent\n    provider: openai_compatible\n    prompt: \"item {{.loop.Item}}\"\n    budget: {tokens: 30}\n    on_success: each\n  done: {type: terminal}\n",
        &[],
    );
    assert_ne!(code, 0, "{doc:#}\n{stderr}");
    assert_eq!(mock.model_requests().len(), 2, "{doc:#}");
    assert!(
        doc.to_string().contains("the step's budget of 30 tokens"),
        "{doc:#}"
    );
    assert_eq!(doc["spend"]["tokens"], json!(36));
}

// ---- fallback providers and usage limits ----------------------------------------------------

/// A sandbox where the real `claude` CLI and `openai_compatible` both talk to `mock`.
fn claude_and_openai_sandbox(mock: &MockLlm) -> Sandbox {
    let mut sb = openai_sandbox(mock);
    let bin = workspace_root().join(".cache/npm/node_modules/.bin");
    assert!(
        bin.join("claude").exists(),
        "agent CLIs not installed in {}: run scripts/install-agents.sh (scripts/test.sh does)",
        bin.display()
    );
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    sb.set_env("PATH", &path);
    with_tmpdir(&mut sb);
    sb.set_env("ANTHROPIC_BASE_URL", &mock.url());
    sb.set_env("ANTHROPIC_API_KEY", "sk-test");
    sb.set_env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
    sb.set_env("CLAUDE_CODE_MAX_RETRIES", "0");
    sb
}

/// The example workflow with its second fallback (gemini) left out and `extra` lines added
/// to the step.
fn fallback_example(extra: &str) -> String {
    std::fs::read_to_string(example("fallback.yaml"))
        .unwrap()
        .replace(
            "      - gemini                          # a bare provider name works too\n",
            "",
        )
        .replace(
            "    on_success: done\n",
            &format!("{extra}    on_success: done\n"),
        )
}

#[test]
fn a_refusal_by_claude_falls_back_to_the_next_provider_on_the_same_prompt() {
    let mock = MockLlm::start(json!({"rules": [
        {"when_dialect": "anthropic", "reply": {"refusal": "I cannot help with that."}},
        {"when_dialect": "chat", "when_last_user_contains": "PROMPT-77", "reply": {"text": "answered by the fallback"}}
    ], "default": {"text": "unexpected"}}));
    let sb = claude_and_openai_sandbox(&mock);
    let (code, doc, stderr) = run_new(
        &sb,
        "wf.yaml",
        &fallback_example(""),
        &["-i", "question=PROMPT-77"],
    );
    assert_eq!(code, 0, "{doc:#}\n{stderr}");
    let ask = &doc["states"]["ask"];
    assert_eq!(ask["output"], json!("answered by the fallback"), "{doc:#}");
    assert_eq!(
        ask["fallback"]["provider"],
        json!("openai_compatible"),
        "{doc:#}"
    );
    assert_eq!(ask["fallback"]["skipped"][0]["provider"], json!("claude"));
    assert_eq!(ask["fallback"]["skipped"][0]["class"], json!("refusal"));
    assert!(
        ask["fallback"]["skipped"][0]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("Usage Policy"),
        "{doc:#}"
    );
    assert!(stderr.contains("trying openai_compatible"), "{stderr}");
    // The same prompt went to both.
    let reqs = mock.model_requests();
    assert!(reqs.iter().any(|r| r["dialect"] == json!("anthropic")));
    assert!(
        reqs.iter()
            .any(|r| r["dialect"] == json!("chat") && r["facts"]["last_user"] == json!("PROMPT-77")),
        "{reqs:#?}"
    );
    // The state file records it too.
    let run_id = doc["run_id"].as_str().unwrap();
    let state = state_file(&sb, run_id);
    assert_eq!(
        state["states"]["ask"]["fallback"]["provider"],
        json!("openai_compatible")
    );
}

#[test]
fn a_class_left_out_of_fallback_on_fails_with_its_own_code() {
    let mock = MockLlm::start(json!({"rules": [
        {"when_dialect": "anthropic", "reply": {"refusal": "No."}}
    ], "default": {"text": "must not be asked"}}));
    let sb = claude_and_openai_sandbox(&mock);
    let text = fallback_example("")
        .replace(
            "    fallback_on: [usage_limit, quota, refusal, unavailable]\n",
            "    fallback_on: [quota]\n",
        )
        .replace("    on_failure: failed\n", "");
    let (code, doc, stderr) = run_new(&sb, "wf.yaml", &text, &[]);
    assert_eq!(code, 3, "{doc:#}\n{stderr}");
    assert_eq!(
        doc["error"]["code"],
        json!("EXECUTION.AGENT.REFUSAL"),
        "{doc:#}"
    );
    assert!(
        mock.model_requests()
            .iter()
            .all(|r| r["dialect"] != json!("chat")),
        "refusal is not in fallback_on: no fallback"
    );
}

#[test]
fn an_unreachable_provider_falls_back() {
    let mock = MockLlm::start(json!({"default": {"text": "from the second"}}));
    let sb = openai_sandbox(&mock);
    // A port nothing listens on: bind one, then close it.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (code, doc, stderr) = run_new(
        &sb,
        "wf.yaml",
        &format!(
            "name: fb\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: openai_compatible\n    prompt: hi\n    options: {{base_url: \"http://127.0.0.1:{closed}/v1\"}}\n    fallback_providers:\n      - {{provider: openai_compatible, options: {{base_url: \"{}/v1\"}}}}\n    on_success: done\n  done: {{type: terminal}}\n",
            mock.url()
        ),
        &[],
    );
    assert_eq!(code, 0, "{doc:#}\n{stderr}");
    assert_eq!(doc["states"]["ask"]["output"], json!("from the second"));
    assert_eq!(
        doc["states"]["ask"]["fallback"]["skipped"][0]["class"],
        json!("unavailable"),
        "{doc:#}"
    );
}

#[test]
fn a_429_with_a_short_retry_after_is_waited_out_inside_the_step() {
    let mock = MockLlm::start(json!({"rules": [
        {"times": 1, "reply": {"status": 429, "retry_after": 2, "error_message": "slow down"}}
    ], "default": {"text": "after the wait", "usage": {"input": 3, "output": 4}}}));
    let sb = openai_sandbox(&mock);
    let wf = sb
        .write(
            "wf.yaml",
            "name: wait\nstates:\n  initial: ask\n  ask: {type: agent, provider: openai_compatible, prompt: hi, on_success: done}\n  done: {type: terminal}\n",
        )
        .unwrap();
    let t0 = std::time::Instant::now();
    let r = sb
        .run(&["run", wf.to_str().unwrap(), "-o", "streaming"])
        .unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("waiting for usage limit of openai_compatible, resets in 2s"),
        "{}",
        r.stderr
    );
    assert_eq!(mock.model_requests().len(), 2, "the same step asked again");
    assert!(
        t0.elapsed() >= std::time::Duration::from_millis(1500),
        "it waited"
    );
    assert!(r.stdout.contains("after the wait"), "{}", r.stdout);
}

#[test]
fn claude_s_resets_at_text_is_waited_out_too() {
    let reset = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 2;
    let mock = MockLlm::start(json!({"rules": [
        {"when_dialect": "anthropic", "times": 1, "reply": {"status": 429,
            "error_message": format!("usage limit reached, resets at {reset}")}}
    ], "default": {"text": "claude after the reset"}}));
    let sb = claude_and_openai_sandbox(&mock);
    let (code, doc, stderr) = run_new(
        &sb,
        "wf.yaml",
        "name: wait\nstates:\n  initial: ask\n  ask: {type: agent, provider: claude, prompt: hi, on_success: done}\n  done: {type: terminal}\n",
        &[],
    );
    assert_eq!(code, 0, "{doc:#}\n{stderr}");
    assert_eq!(
        doc["states"]["ask"]["output"],
        json!("claude after the reset")
    );
    assert!(
        stderr.contains("waiting for usage limit of claude"),
        "{stderr}"
    );
}

#[test]
fn a_reset_past_the_wait_fails_with_the_usage_limit_code_and_its_reset_time() {
    let mock = MockLlm::start(json!({"default": {"status": 429, "retry_after": 3600}}));
    let sb = openai_sandbox(&mock);
    let (code, doc, stderr) = run_new(
        &sb,
        "wf.yaml",
        "name: long\nstates:\n  initial: ask\n  ask: {type: agent, provider: openai_compatible, prompt: hi, usage_limit: {wait: 1s}, on_success: done}\n  done: {type: terminal}\n",
        &[],
    );
    assert_eq!(code, 3, "{doc:#}\n{stderr}");
    assert_eq!(
        doc["error"]["code"],
        json!("EXECUTION.AGENT.USAGE_LIMIT"),
        "{doc:#}"
    );
    assert_eq!(
        mock.model_requests().len(),
        1,
        "no wait of an hour inside the step"
    );
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("resets at"),
        "{doc:#}"
    );
    // An hour is within the default max_wait (5h): parked.
    let run_id = doc["run_id"].as_str().unwrap();
    let sj = status_json(&sb, run_id);
    assert_eq!(sj["status"], json!("waiting"), "{sj:#}");
    // Past max_wait the run simply fails.
    let (code, doc, _) = run_new(
        &sb,
        "wf2.yaml",
        "name: long\nstates:\n  initial: ask\n  ask: {type: agent, provider: openai_compatible, prompt: hi, usage_limit: {wait: 1s, max_wait: 10m}, on_success: done}\n  done: {type: terminal}\n",
        &[],
    );
    assert_eq!(code, 3);
    assert_eq!(doc["error"]["code"], json!("EXECUTION.AGENT.USAGE_LIMIT"));
    let run_id = doc["run_id"].as_str().unwrap();
    let sj = status_json(&sb, run_id);
    assert_eq!(sj["status"], json!("failed"), "{sj:#}");
}

#[test]
fn a_long_usage_limit_parks_the_run_and_resume_continues_it_at_the_reset() {
    let mock = MockLlm::start(json!({"rules": [
        {"times": 1, "reply": {"status": 429, "retry_after": 4, "error_message": "come back later"}}
    ], "default": {"text": "answered after the reset"}}));
    let sb = openai_sandbox(&mock);
    let (code, doc, stderr) = run_new(
        &sb,
        "wf.yaml",
        "name: park\nstates:\n  initial: ask\n  ask: {type: agent, provider: openai_compatible, prompt: hi, usage_limit: {wait: 1s, max_wait: 1h}, on_success: done}\n  done: {type: terminal}\n",
        &[],
    );
    assert_eq!(code, 3, "{doc:#}\n{stderr}");
    assert_eq!(doc["error"]["code"], json!("EXECUTION.AGENT.USAGE_LIMIT"));
    let run_id = doc["run_id"].as_str().unwrap().to_owned();
    let status = sb.run(&["status", &run_id]).unwrap();
    assert!(
        status.stdout.contains("waiting (usage limit resets at"),
        "{}",
        status.stdout
    );
    let sj = status_json(&sb, &run_id);
    assert_eq!(sj["status"], json!("waiting"), "{sj:#}");
    assert!(sj["waiting_until"].is_string(), "{sj:#}");
    let rows = sb.run(&["history", "-f", "json"]).unwrap().json().unwrap();
    assert_eq!(rows[0]["status"], json!("waiting"), "{rows:#}");
    // `--status waiting` is a filter word like the others (it was refused as unknown).
    let waiting = sb.run(&["history", "-s", "waiting", "-f", "json"]).unwrap();
    assert_eq!(waiting.code, 0, "{}", waiting.stderr);
    let waiting = waiting.json().unwrap();
    assert_eq!(waiting.as_array().map(Vec::len), Some(1), "{waiting:#}");
    assert_eq!(waiting[0]["id"], rows[0]["id"], "{waiting:#}");
    let done = sb
        .run(&["history", "-s", "completed", "-f", "json"])
        .unwrap();
    assert_eq!(done.json().unwrap(), json!([]));
    // Resume waits for the reset, then asks the same step again.
    let r = sb.run(&["resume", &run_id, "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("waiting for usage limit, resets in"),
        "{}",
        r.stderr
    );
    let doc = r.json().unwrap();
    assert_eq!(
        doc["states"]["ask"]["output"],
        json!("answered after the reset")
    );
    assert_eq!(mock.model_requests().len(), 2);
    let sj = status_json(&sb, &run_id);
    assert_eq!(sj["status"], json!("completed"), "{sj:#}");
    assert!(sj.get("waiting_until").is_none(), "{sj:#}");
}

#[test]
fn the_dry_run_shows_commands_quoted_as_the_run_quotes_them() {
    let sb = sandbox();
    let r = sb
        .run(&[
            "run",
            &example("safe-shell.yaml"),
            "--dry-run",
            "-i",
            "message=it's here",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let all = format!("{}{}", r.stdout, r.stderr);
    // The literal quotes of `echo '{{.inputs.message}}'` close and reopen around the value.
    assert!(all.contains(r#"Command: echo '''it'\''s here'''"#), "{all}");
}

#[test]
fn validate_names_an_unknown_fallback_provider() {
    let sb = sandbox();
    let wf = sb
        .write(
            "wf.yaml",
            "name: fb\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: claude\n    prompt: hi\n    fallback_providers: [openai_compatible, {provider: claudee}]\n    fallback_on: [refusal]\n    on_success: done\n  done: {type: terminal}\n",
        )
        .unwrap();
    let r = sb
        .run(&["validate", wf.to_str().unwrap(), "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let text = r.stdout;
    assert!(text.contains("states.ask.fallback_providers.1"), "{text}");
    assert!(text.contains("did you mean 'claude'?"), "{text}");
    assert!(!text.contains("fallback_providers.0"), "{text}");
    assert!(
        !text.contains("UNKNOWN_FIELD"),
        "the keys are known: {text}"
    );
    // A class that does not exist is an error.
    let bad = sb
        .write(
            "bad.yaml",
            "name: fb\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: claude\n    prompt: hi\n    fallback_on: [teapot]\n    on_success: done\n  done: {type: terminal}\n",
        )
        .unwrap();
    let r = sb.run(&["validate", bad.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("unknown fallback class") || r.stderr.contains("unknown fallback class"),
        "{}{}",
        r.stdout,
        r.stderr
    );
}
