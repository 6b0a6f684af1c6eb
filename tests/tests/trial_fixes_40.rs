//! Fixes of what a new user's trial found in the CLI's presentation: `--interactive` showed
//! only the `transitions:` of a step that also has `on_success`/`on_failure`, counted terminal
//! states in `[Step n/N]` and wrapped a `when` holding quotes in single quotes; `validate -f
//! table` showed an internal `__inline_error_*` name, only the success route, and `-` for
//! "no route"; an `{{.error.Message}}` misuse was quoted without its dot; `--step` of a loop
//! body failed with `undefined variable: loop`; `--mock` of an unknown state had no hint.
//! Over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::Write;
use std::process::Stdio;

use awf_tests::Sandbox;
use pretty_assertions::assert_eq;

const ROUTES: &str = "name: tr\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo hi\n    transitions: [{when: \"states.a.Output == 'nope'\", goto: b}]\n    on_success: done\n    on_failure: bad\n  b: {type: step, command: echo b, on_success: done}\n  done: {type: terminal}\n  bad: {type: terminal, status: failure}\n";

/// `printf 'c\n' | awf run wf --interactive`: its stderr.
fn interactive(sb: &Sandbox, wf: &str, answers: &str) -> (i32, String) {
    let mut child = sb
        .cmd(&["run", wf, "--interactive"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(answers.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The interactive preview lists every route, as `--dry-run` does (same lines, `when` in
/// double quotes), and `[Step n/N]` counts the states that run (not the terminals).
#[test]
fn the_interactive_preview_shows_every_route_as_the_dry_run_does() {
    let sb = Sandbox::new().unwrap();
    let wf = sb.write("tr.yaml", ROUTES).unwrap();
    let wf = wf.to_str().unwrap();
    let (code, stderr) = interactive(&sb, wf, "c\n");
    assert_eq!(code, 0, "{stderr}");
    let routes =
        "→ when \"states.a.Output == 'nope'\": b\n  → on_success: done\n  → on_failure: bad\n";
    let want = format!(
        "  ⏸ [Step 1/2] a\n  Type: command\n  Command: echo hi\n  {routes}\n  [c]ontinue [s]kip [a]bort [i]nspect [e]dit NAME=VALUE > "
    );
    assert!(stderr.contains(&want), "{stderr}");
    let dry = sb.run(&["run", wf, "--dry-run"]).unwrap();
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert!(
        dry.stdout.contains(&format!(
            "[1] a\n    Command: echo hi\n    {}",
            routes.replace("\n  →", "\n    →")
        )),
        "{}",
        dry.stdout
    );
}

/// An inline `on_failure` in the preview reads as the dry run shows it, with its exit code.
#[test]
fn the_interactive_preview_shows_an_inline_failure_with_its_exit_code() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "inl.yaml",
            "name: inl\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo hi\n    on_success: done\n    on_failure: {message: boom, status: 9}\n  done: {type: terminal}\n",
        )
        .unwrap();
    let (code, stderr) = interactive(&sb, wf.to_str().unwrap(), "c\n");
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains(
            "  ⏸ [Step 1/1] a\n  Type: command\n  Command: echo hi\n  → on_success: done\n  → on_failure: fail \"boom\" (exit 9)\n\n"
        ),
        "{stderr}"
    );
}

/// The rows of `awf validate -f table`'s state table: STEP, TYPE, NEXT.
fn state_rows(stdout: &str) -> Vec<Vec<String>> {
    stdout
        .lines()
        .skip_while(|l| !l.contains("| STEP "))
        .skip(2)
        .filter(|l| l.starts_with("| "))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

/// `validate -f table`: the inline `on_failure` terminal is `a's on_failure` (never
/// `__inline_error_*`), NEXT lists every route, and a state with none reads `—`, apart from a
/// state named `none`.
#[test]
fn the_validate_table_lists_every_route_by_the_names_users_see() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "v.yaml",
            "name: v\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo hi\n    transitions:\n      - {when: \"states.a.Output == 'x'\", goto: none}\n      - {goto: p}\n    on_success: done\n    on_failure: {message: boom, status: 9}\n  none: {type: step, command: echo n, on_success: done}\n  p:\n    type: parallel\n    parallel: [p1]\n    on_success: done\n    on_failure: done\n  p1: {type: step, command: echo}\n  done: {type: terminal}\n",
        )
        .unwrap();
    let r = sb
        .run(&["validate", wf.to_str().unwrap(), "-f", "table"])
        .unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(!r.stdout.contains("__inline"), "{}", r.stdout);
    assert_eq!(
        state_rows(&r.stdout),
        [
            [
                "a",
                "command",
                "when: none, default: p, done, on_failure: a's on_failure"
            ],
            ["none", "command", "done"],
            ["p", "parallel", "done, on_failure: done"],
            ["p1", "command", "—"],
            ["done", "terminal", "(terminal)"],
            ["a's on_failure", "terminal", "(terminal)"],
        ]
    );
}

/// `{{.error.Message}}` in a step's command is quoted as written (it read `{{error.Message}}`).
#[test]
fn an_error_reference_outside_error_hooks_is_quoted_as_written() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "m.yaml",
            "name: m\nstates:\n  initial: a\n  a: {type: step, command: \"echo {{.error.Message}}\", on_success: done}\n  done: {type: terminal}\n",
        )
        .unwrap();
    let r = sb.run(&["validate", wf.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains(
            "error [WORKFLOW.VALIDATION.INVALID_REFERENCE] states.a.command: error reference \"{{.error.Message}}\" used outside of error hook context\n  Hint: error.* is only available in workflow_error hooks and terminal messages\n"
        ),
        "{}",
        r.stderr
    );
}

const LOOP: &str = "name: l\nstates:\n  initial: lp\n  lp:\n    type: for_each\n    items: '[\"a\",\"b\"]'\n    body: [tag]\n    on_complete: done\n  tag: {type: step, command: \"echo {{.loop.Item}}\"}\n  done: {type: terminal}\n";

/// `--step` of a loop body state is refused before anything runs, naming its loop.
#[test]
fn step_of_a_loop_body_state_is_refused_up_front() {
    let sb = Sandbox::new().unwrap();
    let wf = sb.write("l.yaml", LOOP).unwrap();
    let wf = wf.to_str().unwrap();
    let want = "[USER.INPUT.VALIDATION_FAILED] --step tag: tag is a body state of loop lp; a loop body state cannot run alone\n  Hint: run its loop with --step lp, or the whole workflow without --step\n";
    for args in [
        &["run", wf, "--step", "tag"][..],
        &["run", wf, "--step", "tag", "--dry-run"][..],
    ] {
        let r = sb.run(args).unwrap();
        assert_eq!(r.code, 1, "{args:?}: {}{}", r.stdout, r.stderr);
        assert_eq!(r.stderr, want, "{args:?}");
        assert_eq!(r.stdout, "", "{args:?}");
    }
    // The loop itself runs alone.
    let r = sb.run(&["run", wf, "--step", "lp"]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("Step 'lp' completed successfully"),
        "{}",
        r.stderr
    );
}

/// `--mock` of a state the workflow lacks gets a hint: did-you-mean when a name is near,
/// else the workflow's states.
#[test]
fn a_mock_of_an_unknown_state_gets_a_hint() {
    let sb = Sandbox::new().unwrap();
    let wf = sb.write("tr.yaml", ROUTES).unwrap();
    let wf = wf.to_str().unwrap();
    let r = sb
        .run(&["run", wf, "--mock", "states.nosuch.output=x"])
        .unwrap();
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        r.stderr,
        "[USER.INPUT.VALIDATION_FAILED] --mock names a state that workflow tr does not have: nosuch\n  Hint: the workflow's states: a, b, done, bad\n"
    );
    let r = sb
        .run(&["run", wf, "--mock", "states.bb.output=x"])
        .unwrap();
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        r.stderr,
        "[USER.INPUT.VALIDATION_FAILED] --mock names a state that workflow tr does not have: bb\n  Hint: did you mean 'b'?\n"
    );
}
