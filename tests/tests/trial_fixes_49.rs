//! New users' trials over the real binary: a skipped parallel branch's exit code, `awf
//! history` statistics with sub-workflow runs, the exit code in `awf status` of a failed run,
//! a sub-workflow's renamed outputs in the calling state's `Output`, the project config that
//! `awf resume` reads, and `shell_quote` values in a `<<-` here-document.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use pretty_assertions::assert_eq;

/// A parallel block whose first branch fails under `all_succeed` with `max_concurrent: 1`
/// (so the second branch never starts), and a state after it that reads the skipped branch.
fn skipped_branch(read: &str) -> String {
    format!(
        r#"name: skipped
states:
  initial: p
  p:
    type: parallel
    parallel: [a, b]
    strategy: all_succeed
    max_concurrent: 1
    on_success: done
    on_failure: report
  a:
    type: step
    command: 'exit 3'
  b:
    type: step
    command: 'echo b'
  report:
    type: step
    command: '{read}'
    transitions:
      - when: 'states.b.ExitCode == 0'
        goto: zero
      - when: 'states.b.ExitCode != 0'
        goto: nonzero
    on_success: done
  zero: {{type: step, command: 'echo zero', on_success: done}}
  nonzero: {{type: step, command: 'echo nonzero', on_success: done}}
  done:
    type: terminal
"#
    )
}

/// Trial: a branch that never started read `{{.states.b.ExitCode}}` as 0, which looks like
/// success. Its `Status` is `skipped`; its `ExitCode` reads as a state that has not run: an
/// error naming why in a template, `false` in an expression (both `== 0` and `!= 0`).
#[test]
fn a_skipped_branch_has_no_exit_code() {
    let sb = Sandbox::new().unwrap();

    // Status reads "skipped"; neither exit-code transition is taken.
    let r = sb
        .run_workflow(
            "status.yaml",
            &skipped_branch(r#"echo "b is {{.states.b.Status}}""#),
            &["-f", "json"],
        )
        .unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let v = r.json().unwrap();
    assert_eq!(v["states"]["b"]["status"], "skipped");
    assert_eq!(v["states"]["report"]["output"], "b is skipped\n");
    assert_eq!(v["states"].get("zero"), None, "{v}");
    assert_eq!(v["states"].get("nonzero"), None, "{v}");

    // The exit code itself is no value to print.
    let r = sb
        .run_workflow(
            "exit.yaml",
            &skipped_branch(r#"echo "b exited {{.states.b.ExitCode}}""#),
            &["-f", "json"],
        )
        .unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let v = r.json().unwrap();
    assert_eq!(v["states"]["report"]["status"], "failed");
    assert_eq!(
        v["states"]["report"]["error"],
        "step report: interpolate command: undefined variable: states.b.ExitCode (state \"b\" was skipped: its parallel block ended before it started, so it has no exit code; its Status reads \"skipped\")"
    );
}
