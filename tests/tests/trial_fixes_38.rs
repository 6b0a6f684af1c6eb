//! A loop in another loop's body (breaker: with its own `on_complete`, or only an
//! `on_success`, the run ended during the outer loop's first iteration and `awf validate` said
//! nothing); over the real binary with a private data dir.
//!
//! As in AWF (Go), the outer loop routes the inner loop's next state as any body step's: its
//! name or none goes on with the outer body, a state of the outer body is jumped to, a state
//! outside ends the outer loop there (`awf validate` and `awf run` warn about that); a nested
//! loop's `on_success` is not taken there.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use pretty_assertions::assert_eq;

/// The outer loop and the inner loop in its body, with the inner loop's routes `routes`
/// (YAML flow-map entries, e.g. `on_complete: post`). Steps only `echo` (no shell syntax).
fn nested(routes: &str) -> String {
    format!(
        "name: nested
states:
  initial: outer
  outer:
    type: for_each
    items: '[\"a\", \"b\"]'
    body: [pre, inner, post]
    on_complete: done
  pre: {{type: step, command: 'echo pre {{{{.loop.Item}}}} {{{{.loop.Index}}}}', on_success: outer}}
  inner:
    type: for_each
    items: '[\"1\", \"2\"]'
    body: [show]
    {routes}
  show: {{type: step, command: 'echo show {{{{.loop.Parent.Item}}}}-{{{{.loop.Item}}}} {{{{.loop.Parent.Index}}}}.{{{{.loop.Index}}}} {{{{.loop.Index1}}}}/{{{{.loop.Length}}}}', on_success: inner}}
  post: {{type: step, command: 'echo post {{{{.loop.Item}}}} {{{{.loop.Index}}}} last={{{{.loop.Last}}}}', on_success: outer}}
  fin: {{type: step, command: echo fin, on_success: done}}
  done: {{type: terminal}}
"
    )
}

/// Every outer item runs the whole inner loop, and the outer `.loop` is the outer loop's again
/// after it (`.loop.Parent` inside it).
const FULL: &str = "pre a 0
show a-1 0.0 1/2
show a-2 0.1 2/2
post a 0 last=false
pre b 1
show b-1 1.0 1/2
show b-2 1.1 2/2
post b 1 last=true
";

/// `awf run -o buffered` of `yaml`: exit code, stdout (the steps' output in order), stderr.
fn run(yaml: &str) -> (i32, String, String) {
    let sb = Sandbox::new().unwrap();
    let r = sb
        .run_workflow("nested.yaml", yaml, &["-o", "buffered"])
        .unwrap();
    (r.code, r.stdout, r.stderr)
}

/// `awf validate` of `yaml`: exit code and stderr.
fn validate(yaml: &str) -> (i32, String) {
    let sb = Sandbox::new().unwrap();
    let wf = sb.write("nested.yaml", yaml).unwrap();
    let r = sb.run(&["validate", wf.to_str().unwrap()]).unwrap();
    (r.code, r.stderr)
}

/// The inner loop's completion routes that go on with the outer loop: the outer loop's
/// name (AWF's own fixture `loop-nested.yaml`), the next state of the outer body, none at all.
/// All run every outer item through the inner loop, and `awf validate` has nothing to say
/// about them.
#[test]
fn an_inner_loop_runs_in_full_for_every_outer_item() {
    for routes in ["on_complete: outer", "on_complete: post", ""] {
        let yaml = nested(routes);
        let (code, stdout, stderr) = run(&yaml);
        assert_eq!(code, 0, "{routes}: {stdout}{stderr}");
        assert_eq!(stdout, FULL, "{routes}");
        // (`fin` is left unused here: only that is warned about.)
        assert!(!stderr.contains("states.inner"), "{routes}: {stderr}");
        let (code, stderr) = validate(&yaml);
        assert_eq!(code, 0, "{routes}: {stderr}");
        assert!(!stderr.contains("states.inner"), "{routes}: {stderr}");
    }
}

/// A nested loop with `on_success` and no `on_complete` goes on with the outer body, as in
/// AWF (Go), which takes no loop's `on_success` (awf left the outer loop for it, in its first
/// iteration); `awf validate` and `awf run` say it is not taken there.
#[test]
fn a_nested_loops_on_success_is_not_taken_and_is_warned_about() {
    let yaml = nested("on_success: fin");
    let (code, stdout, stderr) = run(&yaml);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(stdout, FULL);
    assert!(
        stderr.contains("/nested.yaml:14:5: [WORKFLOW.VALIDATION.INVALID_TRANSITION] states.inner.on_success: \"inner\" is a loop in the body of loop \"outer\": its on_success is ignored there"),
        "{stderr}"
    );
    let (code, stderr) = validate(&yaml);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("/nested.yaml:14:5: warning [WORKFLOW.VALIDATION.INVALID_TRANSITION] states.inner.on_success:"),
        "{stderr}"
    );
}

/// A nested loop's `on_complete` outside the outer body leaves the outer loop there in its
/// first iteration, as in AWF (Go), but no longer silently: `awf validate` warns (exit 0: the
/// file runs unchanged) with the route that goes on with the outer loop, and `awf run` shows
/// the warning before the first state.
#[test]
fn a_nested_loops_on_complete_outside_the_outer_body_is_warned_about() {
    for (target, tail) in [("fin", "fin\n"), ("done", "")] {
        let yaml = nested(&format!("on_complete: {target}"));
        let (code, stdout, stderr) = run(&yaml);
        assert_eq!(code, 0, "{target}: {stdout}{stderr}");
        assert_eq!(
            stdout,
            format!("pre a 0\nshow a-1 0.0 1/2\nshow a-2 0.1 2/2\n{tail}"),
            "{target}"
        );
        let warning = format!(
            "[WORKFLOW.VALIDATION.INVALID_TRANSITION] states.inner.on_complete: loop \"inner\" is in the body of loop \"outer\" but its on_complete \"{target}\" is not: each time \"inner\" completes, \"outer\" ends there without its remaining iterations, and the run goes on at \"{target}\""
        );
        assert!(
            stderr.contains(&format!("/nested.yaml:14:5: {warning}")),
            "{target}: {stderr}"
        );
        let (code, stderr) = validate(&yaml);
        assert_eq!(code, 0, "{target}: {stderr}");
        assert!(
            stderr.contains(&format!("/nested.yaml:14:5: warning {warning}\n  Hint: to go on with \"outer\" (its next body step, then its next iteration), set `on_complete: outer` or remove on_complete")),
            "{target}: {stderr}"
        );
    }
}
