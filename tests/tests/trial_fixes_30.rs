//! CLI and engine defects found by a new user and a breaker on the release build (mocks of
//! shell steps, a sub-workflow's input errors, resume hints, `file_exists` on a directory,
//! the first error `awf list` shows), over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

const MK: &str = "name: mk
states:
  initial: a
  a: { type: step, command: \"echo REAL; touch ./a-ran\", on_success: b }
  b: { type: step, command: \"echo b sees {{shell_quote .states.a.Output}}\", on_success: done, on_failure: bad }
  done: { type: terminal }
  bad: { type: terminal, status: failure, message: ROUTED }
";

/// `--mock` of a shell step answers it without running it (breaker: `--mock
/// states.a.output=FAKE` printed REAL and created the file the step touches).
#[test]
fn a_mocked_shell_step_is_answered_and_not_run() {
    let sb = Sandbox::new().unwrap();
    sb.write("mk.yaml", MK).unwrap();
    let r = sb
        .run(&[
            "run",
            "mk.yaml",
            "--mock",
            "states.a.output=FAKE",
            "-o",
            "streaming",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("b sees FAKE"), "{}", r.stdout);
    assert!(!r.stdout.contains("REAL"), "{}", r.stdout);
    assert!(!sb.path().join("a-ran").exists(), "the mocked step ran");
    // The run result carries the mocked answer.
    let r = sb
        .run(&[
            "run",
            "mk.yaml",
            "--mock",
            "states.a.output=FAKE",
            "-f",
            "json",
        ])
        .unwrap();
    let v = r.json().unwrap();
    assert_eq!(v["states"]["a"]["output"], "FAKE", "{v}");
    assert_eq!(v["states"]["a"]["exit_code"], 0, "{v}");
    assert!(!sb.path().join("a-ran").exists(), "the mocked step ran");
}

/// `status=failed` fails the mocked step (exit code 1) and takes its `on_failure`; without one
/// the run fails (breaker: the run completed).
#[test]
fn a_failed_mock_fails_the_step_and_takes_on_failure() {
    let sb = Sandbox::new().unwrap();
    sb.write("mk.yaml", MK).unwrap();
    let r = sb
        .run(&[
            "run",
            "mk.yaml",
            "--mock",
            "states.b.status=failed",
            "-f",
            "json",
        ])
        .unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let v = r.json().unwrap();
    assert_eq!(v["terminal"], "bad", "{v}");
    assert_eq!(v["states"]["b"]["status"], "failed", "{v}");
    assert_eq!(v["states"]["b"]["exit_code"], 1, "{v}");
    // No on_failure: the run fails at the step, with its code (`a` ran above, unmocked).
    std::fs::remove_file(sb.path().join("a-ran")).unwrap();
    let r = sb
        .run(&["run", "mk.yaml", "--mock", "states.a.status=failed"])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains("✗ a"), "{}", r.stderr);
    assert!(r.stderr.contains("mocked failure"), "{}", r.stderr);
    assert!(!sb.path().join("a-ran").exists(), "the mocked step ran");
}

/// `--step S` with a mock of `S` itself answers `S` from the mock (breaker: `--step b --mock
/// states.b.status=failed` said completed).
#[test]
fn step_with_a_mock_of_the_step_itself_is_answered_by_the_mock() {
    let sb = Sandbox::new().unwrap();
    sb.write("mk.yaml", MK).unwrap();
    let r = sb
        .run(&[
            "run",
            "mk.yaml",
            "--step",
            "b",
            "--mock",
            "states.a.output=X",
            "--mock",
            "states.b.status=failed",
        ])
        .unwrap();
    assert_ne!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("Step 'b' failed (exit code: 1)"),
        "{}",
        r.stderr
    );
    assert!(!r.stdout.contains("b sees"), "{}", r.stdout);
    let r = sb
        .run(&[
            "run",
            "mk.yaml",
            "--step",
            "a",
            "--mock",
            "states.a.output=X",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "X\n");
    assert!(!sb.path().join("a-ran").exists(), "the mocked step ran");
}

/// A mock of a state that runs nothing of its own (terminal, parallel block, loop) is refused,
/// by a run and a dry run alike; so is a mock naming no state.
#[test]
fn a_mock_of_a_state_that_is_not_a_step_is_refused() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "p.yaml",
        "name: p\nstates:\n  initial: par\n  par: {type: parallel, parallel: [x, y], on_success: done}\n  x: {type: step, command: 'touch x-ran'}\n  y: {type: step, command: 'true'}\n  done: {type: terminal}\n",
    )
    .unwrap();
    for (args, want) in [
        (
            &["run", "p.yaml", "--mock", "states.done.output=x"][..],
            "done is a terminal state",
        ),
        (
            &["run", "p.yaml", "--mock", "states.par.output=x"][..],
            "par is a parallel block",
        ),
        (
            &[
                "run",
                "p.yaml",
                "--dry-run",
                "--mock",
                "states.par.output=x",
            ][..],
            "par is a parallel block",
        ),
        (
            &[
                "run",
                "p.yaml",
                "--dry-run",
                "--mock",
                "states.nope.output=x",
            ][..],
            "does not have: nope",
        ),
    ] {
        let r = sb.run(args).unwrap();
        assert_eq!(r.code, 1, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains("USER.INPUT.VALIDATION_FAILED"),
            "{}",
            r.stderr
        );
        assert!(r.stderr.contains(want), "{args:?}: {}", r.stderr);
    }
    assert!(!sb.path().join("x-ran").exists());
    // A branch of the block can be mocked.
    let r = sb
        .run(&["run", "p.yaml", "--mock", "states.x.output=m"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!sb.path().join("x-ran").exists(), "the mocked branch ran");
}

/// The text output lists each of a sub-workflow's input errors (breaker: it printed `3
/// errors:` and nothing after, and the summary pointed `(above)` at it).
#[test]
fn a_sub_workflows_input_errors_are_all_printed() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "ch.yaml",
        "name: ch\ninputs:\n  - {name: n, type: integer}\n  - {name: e, type: string, validation: {enum: [dev, prod]}}\n  - {name: b, type: boolean}\nstates:\n  initial: a\n  a: {type: step, command: 'echo hi', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    sb.write(
        "pa.yaml",
        "name: pa\ninputs:\n  - {name: s, type: string}\nstates:\n  initial: c\n  c:\n    type: call_workflow\n    workflow: ch.yaml\n    inputs: {n: '{{.inputs.s}}', e: '{{.inputs.s}}', b: '{{.inputs.s}}'}\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "pa.yaml", "-i", "s=1;touch x"]).unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    for want in [
        "3 errors:",
        "- inputs.n: cannot convert \"1;touch x\" to integer",
        "- inputs.e: value \"1;touch x\" not in allowed values [dev prod]",
        "- inputs.b: cannot convert \"1;touch x\" to boolean",
    ] {
        assert!(r.stderr.contains(want), "{want}: {}", r.stderr);
    }
    // Each once.
    assert_eq!(r.stderr.matches("- inputs.n:").count(), 1, "{}", r.stderr);
}

/// A chain of calls deeper than the limit gets a hint at the limit, not `awf resume` (which
/// fails the same way), and `awf validate` warns about a literal chain that deep.
#[test]
fn a_call_chain_past_the_depth_limit_is_not_offered_a_resume() {
    let sb = Sandbox::new().unwrap();
    for i in 0..12 {
        sb.write(
            &format!("d{i}.yaml"),
            &format!(
                "name: d{i}\nstates:\n  initial: c\n  c: {{type: call_workflow, workflow: d{}.yaml, on_success: done}}\n  done: {{type: terminal}}\n",
                i + 1
            ),
        )
        .unwrap();
    }
    sb.write(
        "d12.yaml",
        "name: d12\nstates:\n  initial: a\n  a: {type: step, command: 'true', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "d0.yaml"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains("EXECUTION.WORKFLOW.MAX_DEPTH"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("awf resume"), "{}", r.stderr);
    assert!(
        r.stderr.contains("may nest at most 10 workflows deep"),
        "{}",
        r.stderr
    );
    let v = sb.run(&["validate", "d0.yaml"]).unwrap();
    assert_eq!(v.code, 0, "{}", v.stderr);
    assert!(
        v.stderr
            .contains("warning [EXECUTION.WORKFLOW.MAX_DEPTH] states.c.workflow"),
        "{}",
        v.stderr
    );
    // A chain within the limit (d3 .. d12: 10 workflows) gets no warning.
    let v = sb.run(&["validate", "d3.yaml"]).unwrap();
    assert!(!v.stderr.contains("MAX_DEPTH"), "{}", v.stderr);
}

/// A state name in a printed resume hint is shell-quoted (breaker: pasting the hint for a
/// state named `my step;touch x` ran `touch x`).
#[test]
fn resume_hints_quote_state_names() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "q.yaml",
        "name: q\nstates:\n  initial: \"my step;touch x\"\n  \"my step;touch x\": {type: step, command: 'exit 3', on_success: done, on_failure: bad}\n  done: {type: terminal}\n  bad: {type: terminal, status: failure}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "q.yaml"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains("--from 'my step;touch x'`"),
        "{}",
        r.stderr
    );
}

/// `file_exists` refuses a directory (breaker: `mkdir d.yaml` passed it).
#[test]
fn file_exists_refuses_a_directory() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "fe.yaml",
        "name: fe\ninputs:\n  - {name: cfg, type: string, validation: {file_exists: true, file_extension: ['.yaml']}}\nstates:\n  initial: a\n  a: {type: step, command: 'touch ran', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    std::fs::create_dir(sb.path().join("d.yaml")).unwrap();
    let r = sb.run(&["run", "fe.yaml", "-i", "cfg=d.yaml"]).unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("d.yaml is a directory"), "{}", r.stderr);
    assert!(!sb.path().join("ran").exists());
    // A file is taken.
    let r = sb.run(&["run", "fe.yaml", "-i", "cfg=fe.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
}

const TWO_ERRORS: &str = "name: br
inputs:
  - name: x
    type: strin
states:
  initial: a
  a:
    type: step
    command: echo hi
    on_success: b
  b:
    type: stepp
    command: echo b
    on_success: done
  done:
    type: terminal
";

/// `awf list` and `GET /api/workflows` show the first error `awf validate` and `awf run`
/// name (breaker: the list showed the line-12 parse error, validate and run the line-4 one).
#[test]
fn list_shows_the_first_error_validate_and_run_show() {
    let sb = awf_tests::http_serve::sandbox_with(&[("br", TWO_ERRORS)]);
    let first = "[WORKFLOW.VALIDATION.INVALID_STATE] line 4, column 5: inputs.0.type: input \"x\" has unknown type \"strin\"";
    let v = sb.run(&["validate", "br"]).unwrap();
    assert_eq!(v.code, 2, "{}", v.stderr);
    let first_of_validate = v.stderr.lines().next().unwrap_or("");
    assert!(
        first_of_validate.contains("4:5: error [WORKFLOW.VALIDATION.INVALID_STATE]"),
        "{}",
        v.stderr
    );
    let r = sb.run(&["run", "br"]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("line 4, column 5: inputs.0.type"),
        "{}",
        r.stderr
    );
    let l = sb.run(&["list"]).unwrap();
    assert_eq!(l.code, 0, "{}", l.stderr);
    assert!(
        l.stdout.contains(&format!("BROKEN: {first}")),
        "{}",
        l.stdout
    );
    let s = awf_tests::http_serve::start(&sb, &[]);
    let (code, body, _) = awf_tests::http_serve::curl(&[&format!("{}/api/workflows", s.base)]);
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("[WORKFLOW.VALIDATION.INVALID_STATE] line 4, column 5: inputs.0.type"),
        "{body}"
    );
    assert!(!body.contains("UNKNOWN_STEP_TYPE"), "{body}");
}
