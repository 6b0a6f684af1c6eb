//! A new user's trial (README only), over the real binary: `awf validate` of a run certain
//! to fail (an unknown provider, a required sub-workflow input left out, a shell script whose
//! template does not parse) says so in its summary; an unknown template function names the
//! one meant, and no shell-quoting hint is built on it; `awf history -n 0` names the flag as
//! typed; an `any_succeed` block that fails says its first branch's error once; no
//! unquoted-value warning for values that are certainly numbers, warnings pointing at the
//! template in a one-line `command:`, the timeout-with-retry warning only when the waits use
//! the timeout up, top-level `x-` keys accepted silently; `--dry-run` with a required input
//! missing shows the plan with a placeholder.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use pretty_assertions::assert_eq;
use serde_json::json;

/// Finding 1: `provider: claud` is a warning (AWF (Go) validates it; a path the run never
/// takes does not fail), with the provider meant, and the summary says the run will fail
/// there instead of "valid"; a fallback's unknown provider (skipped at run time) keeps the
/// plain summary.
#[test]
fn validate_says_the_run_will_fail_at_an_unknown_provider() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "p.yaml",
        "name: p\nstates:\n  initial: a\n  a:\n    type: agent\n    provider: claud\n    prompt: hi\n    on_success: done\n  done:\n    type: terminal\n",
    )
    .unwrap();
    let v = sb.run(&["validate", "p.yaml"]).unwrap();
    assert_eq!(v.code, 0, "{}", v.stderr);
    assert_eq!(
        v.stdout,
        "Workflow 'p.yaml' has no errors, but its run will fail at states.a.provider (1 warning)\n"
    );
    let file = sb.path().join("p.yaml").display().to_string();
    assert_eq!(
        v.stderr,
        format!(
            "{file}:6:5: warning [USER.AGENT.UNKNOWN_PROVIDER] states.a.provider: unknown provider \"claud\": the step will fail when it runs\n  Hint: did you mean 'claude'? known providers: acp, claude, codex, gemini, github_copilot, mistral_vibe, opencode, openai_compatible\n"
        )
    );
    let j = sb
        .run(&["validate", "p.yaml", "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(j["valid"], json!(true));
    assert_eq!(j["diagnostics"][0]["run_fails"], json!(true));

    sb.write(
        "fb.yaml",
        "name: fb\nstates:\n  initial: a\n  a:\n    type: agent\n    provider: claude\n    prompt: hi\n    fallback_providers: [{provider: claud}]\n    on_success: done\n  done:\n    type: terminal\n",
    )
    .unwrap();
    let v = sb.run(&["validate", "fb.yaml"]).unwrap();
    assert_eq!(v.code, 0, "{}", v.stderr);
    assert_eq!(v.stdout, "Workflow 'fb.yaml' is valid (1 warning)\n");
    let j = sb
        .run(&["validate", "fb.yaml", "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(j["diagnostics"][0].get("run_fails"), None, "{j}");
}

/// Finding 1: a `call_workflow` that leaves out the child's required input: the summary
/// says the run will fail at the call's inputs.
#[test]
fn validate_says_the_run_will_fail_at_a_call_missing_a_required_input() {
    let sb = Sandbox::new().unwrap();
    sb.write("child.yaml", CHILD).unwrap();
    sb.write(
        "parent.yaml",
        "name: parent\nstates:\n  initial: c\n  c:\n    type: call_workflow\n    workflow: child\n    on_success: done\n  done:\n    type: terminal\n",
    )
    .unwrap();
    let v = sb.run(&["validate", "parent.yaml"]).unwrap();
    assert_eq!(v.code, 0, "{}", v.stderr);
    assert_eq!(
        v.stdout,
        "Workflow 'parent.yaml' has no errors, but its run will fail at states.c.inputs (1 warning)\n"
    );
    assert!(
        v.stderr.contains(
            "states.c.inputs: sub-workflow \"child\" requires input \"who\", which this step does not pass"
        ),
        "{}",
        v.stderr
    );
}

/// A child with a required input `who`.
const CHILD: &str = "name: child\ninputs:\n  - name: who\n    type: string\n    required: true\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo {{shell_quote .inputs.who}}\n    on_success: done\n  done:\n    type: terminal\n";

/// Finding 2: `upcase` gets `did you mean 'upper'?`, and the unquoted-value warning whose
/// hint built on it (`{{.inputs.who | upcase | shell_quote}}`) is gone.
#[test]
fn an_unknown_template_function_names_the_one_meant_and_gets_no_quoting_hint() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "up.yaml",
        "name: up\ninputs:\n  - name: who\n    type: string\n    default: x\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo {{.inputs.who | upcase}}\n    on_success: done\n  done:\n    type: terminal\n",
    )
    .unwrap();
    let file = sb.path().join("up.yaml").display().to_string();
    let v = sb.run(&["validate", "up.yaml"]).unwrap();
    assert_eq!(v.code, 2, "{}", v.stderr);
    assert_eq!(
        v.stderr,
        format!(
            "{file}:10:19: error [WORKFLOW.VALIDATION.INVALID_REFERENCE] states.a.command: template does not parse: template parse error at line 1, column 22: function upcase not defined\n  Hint: did you mean 'upper'?\nWorkflow 'up.yaml' is invalid: 1 error\n"
        )
    );
    // `awf run` refuses it with the same error and hint.
    let r = sb.run(&["run", "up.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("function upcase not defined\n  Hint: did you mean 'upper'?\n"),
        "{}",
        r.stderr
    );
}

/// Finding 2, at run time: a shell script's template is rendered when the step runs; its
/// unknown function names the one meant in the step's error, and `awf validate` warns that
/// the step fails (the summary says where), with no quoting hint built on it.
#[test]
fn a_scripts_unknown_function_is_named_at_validate_and_at_run_time() {
    let sb = Sandbox::new().unwrap();
    sb.write("s.sh", "#!/bin/sh\necho {{.inputs.who | upcase}}\n")
        .unwrap();
    sb.write(
        "sf.yaml",
        "name: sf\ninputs:\n  - {name: who, type: string, default: x}\nstates:\n  initial: a\n  a: {type: step, script_file: s.sh, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let file = sb.path().join("sf.yaml").display().to_string();
    let v = sb.run(&["validate", "sf.yaml"]).unwrap();
    assert_eq!(v.code, 0, "{}", v.stderr);
    assert_eq!(
        v.stderr,
        format!(
            "{file}:6:19: warning [WORKFLOW.VALIDATION.INVALID_REFERENCE] states.a.script_file: script s.sh: template does not parse: template parse error at line 2, column 22: function upcase not defined (the step fails when it runs)\n  Hint: did you mean 'upper'?\n"
        )
    );
    assert_eq!(
        v.stdout,
        "Workflow 'sf.yaml' has no errors, but its run will fail at states.a.script_file (1 warning)\n"
    );
    let r = sb.run(&["run", "sf.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let doc = r.json().unwrap();
    let script = sb.path().join("s.sh").display().to_string();
    assert_eq!(
        doc["states"]["a"]["error"],
        json!(format!(
            "step a: interpolate script {script}: template parse error at line 2, column 22: function upcase not defined (did you mean 'upper'?)"
        ))
    );
}

/// Finding 3: `-n 0` is named `-n`, `--limit 0` and `--limit=0` `--limit`.
#[test]
fn a_history_limit_of_zero_names_the_flag_as_typed() {
    let sb = Sandbox::new().unwrap();
    for (args, flag) in [
        (&["history", "-n", "0"][..], "-n"),
        (&["history", "-n0"][..], "-n"),
        (&["history", "--limit", "0"][..], "--limit"),
        (&["history", "--limit=0"][..], "--limit"),
    ] {
        let r = sb.run(args).unwrap();
        assert_eq!(r.code, 1, "{args:?}: {}", r.stderr);
        assert_eq!(
            r.stderr,
            format!(
                "[USER.INPUT.VALIDATION_FAILED] {flag} 0 is not a positive whole number\n  Hint: use {flag} 1 or more (the default is 20)\n"
            ),
            "{args:?}"
        );
    }
}

/// Finding 3: an `any_succeed` block whose branches all fail names the first branch and its
/// error once (it said `first: parallel step p: branch b failed: step b: exit code 3`).
#[test]
fn an_any_succeed_failure_names_its_first_branch_once() {
    let sb = Sandbox::new().unwrap();
    let r = sb
        .run_workflow(
            "par.yaml",
            "name: par\nstates:\n  initial: p\n  p:\n    type: parallel\n    strategy: any_succeed\n    max_concurrent: 1\n    parallel: [b, c]\n    on_success: done\n    on_failure: bad\n  b:\n    type: step\n    command: exit 3\n  c:\n    type: step\n    command: exit 4\n  done:\n    type: terminal\n  bad:\n    type: terminal\n    status: failure\n",
            &["-f", "json"],
        )
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(
        doc["states"]["p"]["error"],
        json!("parallel step p: all branches failed; first: branch b: exit code 3")
    );
    assert_eq!(
        doc["error"]["message"],
        json!(
            "workflow reached failure terminal 'bad' after step p failed: all branches failed; first: branch b: exit code 3"
        )
    );
}

/// Finding 4: values that can only be numbers (or true/false) get no unquoted-value warning;
/// the one warning left points at the template's column in a one-line `command:`, not at the
/// key; a timeout that leaves room for every attempt is not warned about; a top-level
/// `x-defaults:` anchor block is accepted silently.
#[test]
fn numbers_are_not_warned_about_and_warnings_point_at_the_template() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "quiet.yaml",
        "name: quiet\ninputs:\n  - {name: n, type: integer, default: 3}\n  - {name: who, type: string, default: x}\nx-defaults: &defaults\n  type: step\n  timeout: 5s\n  retry: {max_attempts: 2, initial_delay: 10ms}\nstates:\n  initial: get\n  get:\n    type: operation\n    operation: http.request\n    inputs: {url: \"http://127.0.0.1:9/\", method: GET}\n    on_success: big\n  big:\n    <<: *defaults\n    command: echo hi\n    on_success: use\n  use:\n    <<: *defaults\n    command: echo {{.states.get.Response.status_code}} {{len .states.big.Output}} {{.states.big.ExitCode}} {{.inputs.n}} {{eq .inputs.who \"x\"}} {{.inputs.who}}\n    on_success: done\n  done:\n    type: terminal\n",
    )
    .unwrap();
    let file = sb.path().join("quiet.yaml").display().to_string();
    let v = sb.run(&["validate", "quiet.yaml"]).unwrap();
    assert_eq!(v.code, 0, "{}", v.stderr);
    // `    command: echo ` is 18 characters: the value's templates start at column 19, and
    // `{{.inputs.who}}` is the last of them, at column 145.
    assert_eq!(
        v.stderr,
        format!(
            "{file}:22:145: warning [WORKFLOW.VALIDATION.UNQUOTED_SHELL_VALUE] states.use.command: {{{{.inputs.who}}}} puts inputs.who into a shell command unquoted: a value holding ;, $( ) or a quote runs as shell code\n  Hint: write {{{{shell_quote .inputs.who}}}} (it quotes the value as one shell word), or set `shell_quote: true` at the top of the workflow\n"
        )
    );
    assert_eq!(v.stdout, "Workflow 'quiet.yaml' is valid (1 warning)\n");
    // `--strict` makes unknown keys errors; `x-` keys are none.
    let strict = sb.run(&["validate", "quiet.yaml", "--strict"]).unwrap();
    assert_eq!(strict.code, 0, "{}", strict.stderr);
}

/// Finding 4: the timeout-with-retry warning fires when the waits between attempts use the
/// timeout up (attempt 3 can never start), saying so.
#[test]
fn a_timeout_the_retry_waits_use_up_is_warned_about() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "tight.yaml",
        "name: tight\nstates:\n  initial: a\n  a: {type: step, command: 'true', timeout: 1s, retry: {max_attempts: 3, initial_delay: 600ms}, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let file = sb.path().join("tight.yaml").display().to_string();
    let v = sb.run(&["validate", "tight.yaml"]).unwrap();
    assert_eq!(v.code, 0, "{}", v.stderr);
    assert_eq!(
        v.stderr,
        format!(
            "{file}:4:36: warning [WORKFLOW.VALIDATION.INVALID_STATE] states.a.timeout: timeout 1s ends before attempt 3 of retry can start: the waits before it take 1.2s (the timeout bounds every attempt and the waits between them together), so attempt 3 never runs\n  Hint: raise timeout above the waits plus what the attempts take, or shorten retry's delays (initial_delay, max_delay)\n"
        )
    );
}

/// Finding 5: `--dry-run` without a required input shows the plan, the input as
/// `<missing: who>` (read there too) with a note, and exits 0; an input given that breaks its
/// rules is still refused.
#[test]
fn a_dry_run_shows_a_missing_required_input_as_a_placeholder() {
    let sb = Sandbox::new().unwrap();
    sb.write("child.yaml", CHILD).unwrap();
    let r = sb.run(&["run", "child.yaml", "--dry-run"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stderr, "");
    assert_eq!(
        r.stdout,
        "Dry Run: child\n==============\n\nInputs:\n  who: <missing: who> (required, not given)\nNote: the plan shows <missing: who> where the input is read; a run needs it: --input who=<value>\n\nExecution Plan:\n---------------\n[1] a\n    Command: echo '<missing: who>'\n    → on_success: done\n\n[terminal] done (success)\n\nNo commands will be executed (dry-run mode).\n"
    );
    let j = sb
        .run(&["run", "child.yaml", "--dry-run", "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(
        j["inputs"],
        json!([{"name": "who", "value": "<missing: who>", "default": false, "config": false, "missing": true}])
    );
    // A secret-named input not given shows its placeholder, not `***`.
    sb.write(
        "sec.yaml",
        "name: sec\ninputs:\n  - {name: api_token, type: string, required: true}\n  - {name: count, type: integer, required: true}\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo {{.inputs.count}} {{shell_quote .inputs.api_token}}\n    on_success: done\n  done:\n    type: terminal\n",
    )
    .unwrap();
    let j = sb
        .run(&["run", "sec.yaml", "--dry-run", "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(j["inputs"][0]["value"], json!("<missing: api_token>"));
    assert_eq!(
        j["states"][0]["command"],
        json!("echo <missing: count> '<missing: api_token>'")
    );
    // Given, but not an integer: refused as before.
    let bad = sb
        .run(&["run", "sec.yaml", "--dry-run", "-i", "count=many"])
        .unwrap();
    assert_eq!(bad.code, 1, "{}", bad.stdout);
    assert!(bad.stderr.contains("inputs.count"), "{}", bad.stderr);
}
