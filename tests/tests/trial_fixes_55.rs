//! Fixes of a new user's trial (stop 55): routing of a failed step with transitions, a body
//! step's `continue_on_error`, object loop items, `usd` budgets without prices, `readFile`
//! and `file_exists` directories, the timeout grace, `workflow_start` on resume, the
//! `terminal:` line of an inline `on_failure`. Over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_mock_llm::MockLlm;
use awf_tests::Sandbox;
use awf_tests::fail_then_resume;
use serde_json::json;

/// A failed command step whose `when` holds takes that transition before `on_failure`, as in
/// AWF (Go) (the run ends at the success terminal, exit 0); `awf validate` notes it when no
/// `when` of the step reads its exit code or status, and not when one does.
#[test]
fn a_failed_step_takes_a_matching_transition_and_validate_notes_it() {
    let sb = Sandbox::new().unwrap();
    let yaml = |when: &str| {
        format!(
            "name: t\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo \"deploy ok\"; exit 1\n    transitions:\n      - when: \"{when}\"\n        goto: good\n    on_failure: bad\n  good: {{type: terminal, message: went to good}}\n  bad: {{type: terminal, status: failure}}\n"
        )
    };
    sb.write("t.yaml", &yaml("states.a.Output contains 'ok'"))
        .unwrap();
    let v = sb.run(&["validate", "t.yaml"]).unwrap();
    assert_eq!(v.code, 0, "{}{}", v.stdout, v.stderr);
    assert!(
        v.stderr.contains(
            "note [WORKFLOW.VALIDATION.INVALID_TRANSITION] states.a.transitions: transitions are evaluated when this step fails too (as in AWF (Go)): a failure whose `when` holds goes to that `goto`, not to on_failure\n  Hint: to route only successes with a `when`, start it with `states.a.ExitCode == 0 and`"
        ),
        "{}",
        v.stderr
    );
    let r = sb.run(&["run", "t.yaml", "-f", "json"]).unwrap();
    let doc = r.json().unwrap();
    assert_eq!(r.code, 0, "{doc:#}");
    assert_eq!(doc["terminal"], json!("good"));
    assert_eq!(doc["states"]["a"]["status"], json!("failed"));

    // A `when` written with the outcome in mind: no note, and the failure goes to on_failure.
    sb.write(
        "t.yaml",
        &yaml("states.a.ExitCode == 0 and states.a.Output contains 'ok'"),
    )
    .unwrap();
    let v = sb.run(&["validate", "t.yaml"]).unwrap();
    assert!(!v.stderr.contains("note ["), "{}", v.stderr);
    let r = sb.run(&["run", "t.yaml", "-f", "json"]).unwrap();
    let doc = r.json().unwrap();
    assert_eq!(r.code, 3, "{doc:#}");
    assert_eq!(doc["terminal"], json!("bad"));
}

/// A `for_each` body step with `continue_on_error: true` goes on with the body after a
/// failure, as in AWF (Go), and `awf validate` no longer says its `continue_on_error` is
/// ignored; without the key the failure fails the loop.
#[test]
fn continue_on_error_in_a_loop_body_is_honoured_and_not_warned_about() {
    let sb = Sandbox::new().unwrap();
    let yaml = |coe: &str| {
        format!(
            "name: l\nstates:\n  initial: l\n  l:\n    type: for_each\n    items: [a, b]\n    body: [s, t]\n    on_complete: done\n    on_failure: broken\n  s:\n    type: step\n    command: \"false\"\n{coe}  t:\n    type: step\n    command: echo {{{{.loop.Index}}}}\n  done: {{type: terminal}}\n  broken: {{type: terminal, status: failure}}\n"
        )
    };
    sb.write("l.yaml", &yaml("    continue_on_error: true\n"))
        .unwrap();
    let v = sb.run(&["validate", "l.yaml"]).unwrap();
    assert_eq!(v.code, 0, "{}", v.stderr);
    assert!(!v.stderr.contains("continue_on_error"), "{}", v.stderr);
    assert!(!v.stderr.contains("warning"), "{}", v.stderr);
    let r = sb.run(&["run", "l.yaml", "-f", "json"]).unwrap();
    let doc = r.json().unwrap();
    assert_eq!(r.code, 0, "{doc:#}");
    assert_eq!(doc["terminal"], json!("done"));
    assert_eq!(doc["states"]["s"]["status"], json!("failed"));
    assert_eq!(doc["states"]["t"]["output"], json!("1\n"));

    sb.write("l.yaml", &yaml("")).unwrap();
    let r = sb.run(&["run", "l.yaml", "-f", "json"]).unwrap();
    let doc = r.json().unwrap();
    assert_eq!(r.code, 3, "{doc:#}");
    assert_eq!(doc["terminal"], json!("broken"));
    assert!(doc["states"].get("t").is_none(), "{doc:#}");
}

/// A failed body step with `continue_on_error` whose transition matches its failure goes
/// there, as in AWF (Go) (here: skipping the body step between), instead of failing the loop.
#[test]
fn continue_on_error_in_a_loop_body_follows_a_transition_its_failure_matched() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "l.yaml",
        "name: l\nstates:\n  initial: l\n  l:\n    type: for_each\n    items: [a, b]\n    body: [s, t, u]\n    on_complete: done\n  s:\n    type: step\n    command: \"test {{.loop.Index}} = 1\"\n    continue_on_error: true\n    transitions:\n      - when: \"states.s.ExitCode != 0\"\n        goto: u\n  t:\n    type: step\n    command: echo t {{.loop.Index}} >> t.log\n  u:\n    type: step\n    command: echo u {{.loop.Index}} >> u.log\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "l.yaml", "-f", "json"]).unwrap();
    let doc = r.json().unwrap();
    assert_eq!(r.code, 0, "{doc:#}");
    assert_eq!(
        std::fs::read_to_string(sb.path().join("t.log")).unwrap(),
        "t 1\n"
    );
    assert_eq!(
        std::fs::read_to_string(sb.path().join("u.log")).unwrap(),
        "u 0\nu 1\n"
    );
}

/// With `continue_on_error`, the on_failure of a body step that leaves the loop is the one
/// key not taken: the warning says so, and why.
#[test]
fn a_body_step_s_on_failure_beside_continue_on_error_is_warned_about() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "l.yaml",
        "name: l\nstates:\n  initial: l\n  l:\n    type: for_each\n    items: [a]\n    body: [s]\n    on_complete: done\n  s:\n    type: step\n    command: \"false\"\n    continue_on_error: true\n    on_failure: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    let v = sb.run(&["validate", "l.yaml"]).unwrap();
    assert!(
        v.stderr.contains(
            "states.s.on_failure: \"s\" is in the body of loop \"l\": its on_failure is ignored there (continue_on_error takes the success route on a failure, and the body goes on)"
        ),
        "{}",
        v.stderr
    );
}

const OBJECT_ITEMS: &str = "name: o\nstates:\n  initial: l\n  l:\n    type: for_each\n    items: [{name: api, port: 8080}, {name: web, port: 80}]\n    body: [s, t]\n    on_complete: done\n  s:\n    type: step\n    command: echo {{shell_quote .loop.Item}} | jq -r .name\n  t:\n    type: step\n    command: echo {{shell_quote .loop.Item}}\n    transitions:\n      - when: \"loop.Item.name == 'web'\"\n        goto: done\n      - goto: l\n  done: {type: terminal}\n";

/// Object items are their JSON text in a template, as in AWF (Go): `{{.loop.Item.name}}` is
/// refused by `awf validate` with how to read a field, and `index .loop.Item "name"` fails
/// the run with the same hint; the item's JSON and `loop.Item.name` in an expression work.
#[test]
fn object_loop_items_are_json_text_and_a_field_read_says_how() {
    let sb = Sandbox::new().unwrap();
    let hint = "read a field of an object item from its JSON, e.g. in a command `echo {{shell_quote .loop.Item}} | jq -r .name`; in a `when:`/`while:`/`break_when:` expression `loop.Item.name` works as written";
    sb.write("o.yaml", OBJECT_ITEMS).unwrap();
    let r = sb.run(&["run", "o.yaml", "-f", "json"]).unwrap();
    let doc = r.json().unwrap();
    assert_eq!(r.code, 0, "{doc:#}");
    // The second item's `when` held: the loop ended there.
    assert_eq!(
        doc["states"]["t"]["output"],
        json!("{\"name\":\"web\",\"port\":80}\n")
    );

    sb.write(
        "f.yaml",
        &OBJECT_ITEMS.replace("jq -r .name", "cat; echo {{.loop.Item.name}}"),
    )
    .unwrap();
    let v = sb.run(&["validate", "f.yaml"]).unwrap();
    assert_eq!(v.code, 2, "{}", v.stderr);
    assert!(
        v.stderr.contains(&format!(
            "error [WORKFLOW.VALIDATION.INVALID_REFERENCE] states.s.command: loop reference \"{{{{.loop.Item.name}}}}\" in states.s.command: `.loop.Item` is the item as text in a template (an object item is its JSON text, as in AWF (Go)), so it has no field \"name\"\n  Hint: {hint}"
        )),
        "{}",
        v.stderr
    );
    // No unquoted-value warning on top of the error.
    assert!(!v.stderr.contains("UNQUOTED_SHELL_VALUE"), "{}", v.stderr);

    sb.write(
        "i.yaml",
        &OBJECT_ITEMS.replace("jq -r .name", "cat; echo {{index .loop.Item \"name\"}}"),
    )
    .unwrap();
    let r = sb.run(&["run", "i.yaml", "-f", "json"]).unwrap();
    let doc = r.json().unwrap();
    assert_eq!(r.code, 3, "{doc:#}");
    assert_eq!(
        doc["states"]["s"]["error"],
        json!(
            "step s: interpolate command: template error at line 1, column 47: index: no entry for key name (`.loop.Item` is the item as text: an object item is its JSON text)"
        )
    );
    assert_eq!(doc["error"]["hints"][0], json!(hint), "{doc:#}");
}

/// A `usd` budget with no `prices:` configured: `awf validate` warns at the workflow's and
/// the step's `budget.usd`, and `awf run` once before its first state (the run itself goes
/// on: nothing is priced). With prices for the model, no warning.
#[test]
fn a_usd_budget_without_prices_is_warned_about_once() {
    let mock =
        MockLlm::start(json!({"default": {"text": "fine", "usage": {"input": 10, "output": 10}}}));
    let mut sb = Sandbox::new().unwrap();
    sb.set_env("OPENAI_BASE_URL", &format!("{}/v1", mock.url()));
    sb.set_env("OPENAI_MODEL", "mock-model");
    sb.set_env("OPENAI_API_KEY", "sk-mock-key-123");
    sb.write(
        "b.yaml",
        "name: b\nbudget: {usd: 0.000001}\nstates:\n  initial: a\n  a: {type: agent, provider: openai_compatible, prompt: one, budget: {usd: 0.000001}, on_success: b}\n  b: {type: agent, provider: openai_compatible, options: {model: mock-model}, prompt: two, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let workflow_warning = "[WORKFLOW.VALIDATION.INVALID_STATE] budget.usd: the workflow's usd budget cannot be enforced: no `prices:` are configured (.awf/config.yaml), so agent steps \"a\", \"b\" count no dollars";
    let step_warning = "[WORKFLOW.VALIDATION.INVALID_STATE] states.a.budget.usd: this usd budget cannot be enforced: no `prices:` are configured (.awf/config.yaml), so the calls of \"a\" count no dollars";
    let v = sb.run(&["validate", "b.yaml"]).unwrap();
    assert_eq!(v.code, 0, "{}", v.stderr);
    assert!(v.stderr.contains(workflow_warning), "{}", v.stderr);
    assert!(v.stderr.contains(step_warning), "{}", v.stderr);
    assert!(
        v.stderr.contains("Hint: add `prices:` to .awf/config.yaml"),
        "{}",
        v.stderr
    );

    let r = sb.run(&["run", "b.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stderr.matches(workflow_warning).count(),
        1,
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.matches(step_warning).count(), 1, "{}", r.stderr);
    assert_eq!(mock.model_requests().len(), 2);

    // A price for the model (the `model` option, and the one the provider reports).
    sb.write(
        ".awf/config.yaml",
        "prices:\n  mock-model: {input_per_mtok: 1, output_per_mtok: 1}\n",
    )
    .unwrap();
    let v = sb.run(&["validate", "b.yaml"]).unwrap();
    assert!(!v.stderr.contains("budget"), "{}", v.stderr);

    // Prices, but none for a model written out: that step is named.
    sb.write(
        ".awf/config.yaml",
        "prices:\n  other: {input_per_mtok: 1, output_per_mtok: 1}\n",
    )
    .unwrap();
    let v = sb.run(&["validate", "b.yaml"]).unwrap();
    assert!(
        v.stderr.contains(
            "budget.usd: the workflow's usd budget cannot be fully enforced: `prices:` (.awf/config.yaml) has no price for the calls of agent step \"b\" (model mock-model of provider openai_compatible), which count no dollars"
        ),
        "{}",
        v.stderr
    );
    // "a" has no `model` option: the model the provider reports may be priced.
    assert!(!v.stderr.contains("states.a.budget.usd"), "{}", v.stderr);
}

/// An input checked with `file_exists` from the working directory, read with `readFile`
/// from the workflow's directory: the failure's hint names both directories and how to read
/// from the working directory; that way works.
#[test]
fn a_relative_read_file_that_finds_nothing_says_where_it_looked() {
    let sb = Sandbox::new().unwrap();
    sb.write("a.txt", "hello\n").unwrap();
    let yaml = |read: &str| {
        format!(
            "name: rf\ninputs:\n  - name: file\n    type: string\n    required: true\n    validation: {{file_exists: true}}\nstates:\n  initial: s\n  s:\n    type: step\n    command: echo {{{{shell_quote ({read})}}}}\n    on_success: done\n  done: {{type: terminal}}\n"
        )
    };
    sb.write(".awf/workflows/rf.yaml", &yaml("readFile .inputs.file"))
        .unwrap();
    let r = sb
        .run(&["run", "rf", "--input", "file=a.txt", "-f", "json"])
        .unwrap();
    let doc = r.json().unwrap();
    assert_eq!(r.code, 3, "{doc:#}");
    let here = sb.path().canonicalize().unwrap();
    let wf_dir = here.join(".awf/workflows");
    assert_eq!(
        doc["error"]["message"],
        json!(format!(
            "step s: interpolate command: template error at line 1, column 20: readFile: {}/a.txt: No such file or directory (os error 2)",
            wf_dir.display()
        ))
    );
    assert_eq!(
        doc["error"]["hints"][0],
        json!(format!(
            "a relative readFile path is read from the workflow file's directory ({}), not from the working directory (a.txt is in the working directory, {}); to read it from the working directory, join them: `{{{{readFile (printf \"%s/%s\" .context.WorkingDir .inputs.file)}}}}`, or pass an absolute path",
            wf_dir.display(),
            here.display()
        ))
    );
    assert_eq!(doc["states"]["s"]["error"], doc["error"]["message"]);

    sb.write(
        ".awf/workflows/rf.yaml",
        &yaml("readFile (printf \"%s/%s\" .context.WorkingDir .inputs.file)"),
    )
    .unwrap();
    let r = sb
        .run(&["run", "rf", "--input", "file=a.txt", "-f", "json"])
        .unwrap();
    let doc = r.json().unwrap();
    assert_eq!(r.code, 0, "{doc:#}");
    // The file's line, then echo's.
    assert_eq!(doc["states"]["s"]["output"], json!("hello\n\n"));
}

/// A step that ignores SIGTERM is stopped with SIGKILL after the grace, and its timeout
/// message says so; one that ends on SIGTERM keeps the short message.
#[test]
fn a_timeout_that_needed_sigkill_says_so() {
    let sb = Sandbox::new().unwrap();
    let yaml = |cmd: &str| {
        format!(
            "name: t\nstates:\n  initial: s\n  s:\n    type: step\n    command: {cmd}\n    timeout: 1s\n    on_success: done\n  done: {{type: terminal}}\n"
        )
    };
    let r = sb
        .run_workflow("t.yaml", &yaml("trap '' TERM; sleep 20"), &["-f", "json"])
        .unwrap();
    let doc = r.json().unwrap();
    assert_eq!(r.code, 3, "{doc:#}");
    assert_eq!(
        doc["states"]["s"]["error"],
        json!("step s: timed out after 1s (stopped with SIGKILL 5s later: it ignored SIGTERM)")
    );
    let r = sb
        .run_workflow("t.yaml", &yaml("sleep 20"), &["-f", "json"])
        .unwrap();
    let doc = r.json().unwrap();
    assert_eq!(r.code, 3, "{doc:#}");
    assert_eq!(
        doc["states"]["s"]["error"],
        json!("step s: timed out after 1s")
    );
}

/// `workflow_start` hooks run again on `awf resume`, as in AWF (Go) (README says so).
#[test]
fn workflow_start_runs_again_on_resume() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "h.yaml",
        "name: h\nhooks:\n  workflow_start:\n    - command: echo started >> starts.log\nstates:\n  initial: s\n  s:\n    type: step\n    command: test -f ok.flag\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = fail_then_resume(&sb, "h.yaml", &sb.path().join("ok.flag"), &[]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        std::fs::read_to_string(sb.path().join("starts.log")).unwrap(),
        "started\nstarted\n"
    );
}

/// After an inline `on_failure: {message, status}` the text summary has its `terminal:` line,
/// as after a named failure terminal and as `-f json` names it.
#[test]
fn an_inline_failure_terminal_has_its_terminal_line() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "c.yaml",
        "name: c\nstates:\n  initial: check\n  check:\n    type: step\n    command: \"false\"\n    on_success: done\n    on_failure: {message: \"check failed\", status: 7}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "c.yaml"]).unwrap();
    assert_eq!(r.code, 7, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "Workflow failed: [EXECUTION.WORKFLOW.FAILURE_TERMINAL] check failed\n  terminal: check's on_failure\n"
        ),
        "{}",
        r.stderr
    );
    let r = sb.run(&["run", "c.yaml", "-f", "json"]).unwrap();
    let doc = r.json().unwrap();
    assert_eq!(doc["terminal"], json!("check's on_failure"));
}
