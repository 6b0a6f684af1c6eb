//! Fixes of a newcomer's trial of `awf` from README.md alone (helper `fixnew`), over the real
//! binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

/// `awf validate` output, stdout and stderr together.
fn validate(sb: &Sandbox, file: &str, yaml: &str) -> (i32, String) {
    sb.write(file, yaml).unwrap();
    let v = sb.run(&["validate", file]).unwrap();
    (v.code, format!("{}{}", v.stdout, v.stderr))
}

/// Finding 1: a reference that is already an error (a state field that does not exist, a
/// namespace spelled `States`) got an `UNQUOTED_SHELL_VALUE` warning on top, whose hint
/// repeated the typo. It gets the error alone; a good reference still gets the warning.
#[test]
fn a_reference_that_is_an_error_gets_no_unquoted_value_warning() {
    let sb = Sandbox::new().unwrap();
    for (file, reference, error) in [
        (
            "typo.yaml",
            "{{.states.build.Outptu}}",
            "invalid state property \"Outptu\"",
        ),
        (
            "upper.yaml",
            "{{.States.build.Output}}",
            "unknown reference type \"States\"",
        ),
    ] {
        let yaml = format!(
            "name: t\nstates:\n  initial: build\n  build: {{type: step, command: echo hi, on_success: show}}\n  \
             show:\n    type: step\n    command: echo \"got {reference}\"\n    on_success: done\n  \
             done: {{type: terminal}}\n"
        );
        let (code, text) = validate(&sb, file, &yaml);
        assert_eq!(code, 2, "{text}");
        assert!(text.contains(error), "{text}");
        assert!(!text.contains("UNQUOTED_SHELL_VALUE"), "{text}");
    }
    // The same command with a good reference keeps its warning.
    let (code, text) = validate(
        &sb,
        "good.yaml",
        "name: t\nstates:\n  initial: build\n  build: {type: step, command: echo hi, on_success: show}\n  \
         show:\n    type: step\n    command: echo \"got {{.states.build.Output}}\"\n    on_success: done\n  \
         done: {type: terminal}\n",
    );
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("[WORKFLOW.VALIDATION.UNQUOTED_SHELL_VALUE]"),
        "{text}"
    );
}

/// Finding 2: a workflow written without the `states:` wrapper got `states: required field
/// missing` and three unknown-field warnings, none with a hint. The error's hint says the
/// states and `initial:` go under `states:`, and each warning says so of its key.
#[test]
fn states_written_without_the_states_wrapper_get_a_hint() {
    let sb = Sandbox::new().unwrap();
    let (code, text) = validate(
        &sb,
        "b4.yaml",
        "name: b4\ninitial: a\na: {type: step, command: echo, on_success: done}\ndone: {type: terminal}\n",
    );
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains(
            "1:1: error [WORKFLOW.PARSE.MISSING_FIELD] states: required field missing\n  Hint: `initial:` and the states go under `states:`: add a line `states:` and indent `initial:`, `a:`, `done:` under it\n"
        ),
        "{text}"
    );
    for key in ["initial", "a", "done"] {
        assert!(
            text.contains(&format!(
                "unknown field \"{key}\" in the workflow\n  Hint: `{key}:` goes under `states:` (indented one level)\n"
            )),
            "{key}: {text}"
        );
    }
}

/// Finding 2: `initial:` naming no state had no hint (a route to one gets a did-you-mean);
/// a terminal `status: failed` had none either.
#[test]
fn an_unknown_initial_state_and_a_bad_terminal_status_get_hints() {
    let sb = Sandbox::new().unwrap();
    let (code, text) = validate(
        &sb,
        "far.yaml",
        "name: b5\nstates:\n  initial: start\n  a: {type: step, command: echo, on_success: done}\n  done: {type: terminal, status: failed}\n",
    );
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains(
            "initial state \"start\" does not exist\n  Hint: the workflow's states: a, done\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "invalid terminal status \"failed\" (expected success or failure)\n  Hint: did you mean 'failure'? (`status: failure`)\n"
        ),
        "{text}"
    );
    let (code, text) = validate(
        &sb,
        "near.yaml",
        "name: b6\nstates:\n  initial: buidl\n  build: {type: step, command: echo, on_success: done}\n  done: {type: terminal}\n",
    );
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("initial state \"buidl\" does not exist\n  Hint: did you mean 'build'?\n"),
        "{text}"
    );
}

/// Finding 2 (sweep): a parallel `strategy:` and a retry `backoff:` spelled wrong, and a
/// step with neither `command:` nor `script_file:`, had no hint.
#[test]
fn a_bad_strategy_backoff_or_missing_command_gets_a_hint() {
    let sb = Sandbox::new().unwrap();
    let (code, text) = validate(
        &sb,
        "sweep.yaml",
        "name: s\nstates:\n  initial: p\n  p: {type: parallel, parallel: [a], strategy: all_succeeds, on_success: b}\n  \
         a: {type: step, command: echo, retry: {max_attempts: 2, backoff: exponentail}}\n  \
         b: {type: step, on_success: done}\n  done: {type: terminal}\n",
    );
    assert_eq!(code, 2, "{text}");
    for want in [
        "invalid parallel strategy \"all_succeeds\" (expected all_succeed, any_succeed or best_effort)\n  Hint: did you mean 'all_succeed'?\n",
        "invalid backoff \"exponentail\" (expected constant, linear or exponential)\n  Hint: did you mean 'exponential'?\n",
        "a command step needs command or script_file\n  Hint: add `command: <shell command>` or `script_file: <path of a script>`\n",
    ] {
        assert!(text.contains(want), "{want} not in {text}");
    }
}

/// The `✗` line of step `step` in `text` and the lines under it that start with `│` (the
/// failure's tail).
fn failure_block(text: &str, step: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with(&format!("  ✗ {step} (")))
        .unwrap_or_else(|| panic!("no failure line of {step} in {text}"));
    let mut block = vec![lines[at].to_owned()];
    block.extend(
        lines[at + 1..]
            .iter()
            .take_while(|l| l.starts_with("    │ "))
            .map(|l| (*l).to_owned()),
    );
    block
}

/// Finding 3: `awf resume` replayed the earlier attempt's failed step without its first
/// stderr line and without the `│` gutter the live run printed. It prints the same lines.
#[test]
fn a_resume_replays_a_failed_step_as_the_live_run_printed_it() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "mk.yaml",
        "name: mk\nstates:\n  initial: test\n  test:\n    type: step\n    command: 'echo \"test fails: no ok file\" >&2; echo \"make: *** [Makefile:6: test] Error 1\" >&2; [ -f ok ] || exit 2'\n    \
         on_success: done\n    on_failure: failed\n  done: {type: terminal}\n  failed: {type: terminal, status: failure}\n",
    )
    .unwrap();
    let live = sb.run(&["run", "mk.yaml"]).unwrap();
    assert_eq!(live.code, 3, "{}", live.stderr);
    let id = awf_tests::run_id_in(&live.stderr).unwrap();
    let shown = failure_block(&live.stderr, "test");
    assert_eq!(
        shown[1..],
        [
            "    │ test fails: no ok file".to_owned(),
            "    │ make: *** [Makefile:6: test] Error 1".to_owned()
        ],
        "{}",
        live.stderr
    );
    sb.write("ok", "").unwrap();
    let resumed = sb.run(&["resume", &id]).unwrap();
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert_eq!(
        failure_block(&resumed.stderr, "test"),
        shown,
        "{}",
        resumed.stderr
    );
}

/// Finding 4: README's Getting Started said `awf resume` after a failure (it needs a run id)
/// and never said what `.awf/prompts/example.md` from `awf init` is for. It says both, and the
/// command it gives for the prompt works.
#[test]
fn the_readme_gives_resume_its_run_id_and_explains_the_example_prompt() {
    let readme = std::fs::read_to_string(awf_tests::workspace_root().join("README.md")).unwrap();
    let flat = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    let start = flat.find("## Getting started").unwrap();
    let end = flat.find("## From a checkout").unwrap();
    let getting_started = &flat[start..end];
    assert!(
        getting_started.contains(
            "after a failure or a Ctrl-C `awf resume <run-id>` (the id is in the run's first line"
        ),
        "{getting_started}"
    );
    assert!(
        getting_started.contains(
            "`awf run example --input name=@prompts/example.md` gives its text as the input `name`"
        ),
        "{getting_started}"
    );
    let sb = Sandbox::new().unwrap();
    let init = sb.run(&["init"]).unwrap();
    assert_eq!(init.code, 0, "{}", init.stderr);
    let prompt = std::fs::read_to_string(sb.path().join(".awf/prompts/example.md")).unwrap();
    let first = prompt.lines().next().unwrap();
    let r = sb
        .run(&["run", "example", "--input", "name=@prompts/example.md"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .contains(&format!("Workflow completed: Greeted {first}")),
        "{}",
        r.stderr
    );
}

/// Finding 5: a template that does not parse inside `command:` was reported at the
/// `command:` key (with a place inside the command text in the message); a reference error in
/// the same command points at its template. Both point at their own template.
#[test]
fn a_template_parse_error_points_at_its_template() {
    let sb = Sandbox::new().unwrap();
    let (code, text) = validate(
        &sb,
        "up.yaml",
        "name: p\ninputs:\n  - name: who\n    default: x\nstates:\n  initial: a\n  a:\n    type: step\n    \
         command: echo {{upcase .inputs.who}}\n    on_success: done\n  done: {type: terminal}\n",
    );
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("up.yaml:9:19: error [WORKFLOW.VALIDATION.INVALID_REFERENCE] states.a.command: template does not parse: template parse error at line 1, column 8: function upcase not defined"),
        "{text}"
    );
    // In a block scalar, on its second line, beside a reference error.
    let (code, text) = validate(
        &sb,
        "block.yaml",
        "name: p\ninputs:\n  - name: who\n    default: x\nstates:\n  initial: a\n  a:\n    type: step\n    \
         command: |\n      echo hi\n      echo {{upcase .inputs.who}} {{.inputs.nope}}\n    on_success: done\n  \
         done: {type: terminal}\n",
    );
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("block.yaml:11:12: error [WORKFLOW.VALIDATION.INVALID_REFERENCE] states.a.command: template does not parse"),
        "{text}"
    );
    assert!(
        text.contains("block.yaml:11:35: error [WORKFLOW.VALIDATION.INVALID_REFERENCE] states.a.command: undefined input \"nope\""),
        "{text}"
    );
    // An unclosed action: at its `{{`.
    let (code, text) = validate(
        &sb,
        "open.yaml",
        "name: p\nstates:\n  initial: a\n  a:\n    type: step\n    command: \"echo {{.inputs.x\"\n    \
         on_success: done\n  done: {type: terminal}\n",
    );
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("open.yaml:6:20: error [WORKFLOW.VALIDATION.INVALID_REFERENCE] states.a.command: template does not parse"),
        "{text}"
    );
}
