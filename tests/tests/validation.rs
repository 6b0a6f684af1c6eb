//! End-to-end tests of `awf validate` and the checks `awf run` applies before it starts
//! (issue 7, "Structure that validate must reject"): containment cycles, reachability,
//! expression references, input declarations, one set of checks for validate and run, every
//! problem in one pass, ignored branch routes; and the template fixes `toJson` and
//! `{{.parameters.NAME}}`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;

use awf_tests::Run;
use awf_tests::Sandbox;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

fn sandbox() -> Sandbox {
    Sandbox::new().expect("sandbox")
}

/// `awf validate -f json <file>`: exit code and the diagnostics.
fn validate(sb: &Sandbox, file: &Path) -> (i32, Vec<Value>) {
    let r = sb
        .run(&["validate", "-f", "json", &file.display().to_string()])
        .unwrap();
    let doc = r.json().unwrap();
    assert_eq!(
        doc["valid"],
        json!(r.code == 0),
        "valid flag and exit code agree: {doc}"
    );
    let diags = doc["diagnostics"].as_array().cloned().unwrap_or_default();
    (r.code, diags)
}

fn find<'a>(diags: &'a [Value], severity: &str, code: &str, path: &str) -> &'a Value {
    diags
        .iter()
        .find(|d| d["severity"] == severity && d["code"] == code && d["path"] == path)
        .unwrap_or_else(|| panic!("no {severity} {code} at {path} in {diags:#?}"))
}

fn errors(diags: &[Value]) -> Vec<(String, String)> {
    diags
        .iter()
        .filter(|d| d["severity"] == "error")
        .map(|d| {
            (
                d["code"].as_str().unwrap_or_default().to_owned(),
                d["path"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn run(sb: &Sandbox, file: &Path) -> Run {
    sb.run(&["run", &file.display().to_string()]).unwrap()
}

// ---- containment cycles --------------------------------------------------------------------

const SELF_PARALLEL: &str = "name: selfpar
states:
  initial: p
  p:
    type: parallel
    parallel: [slow, p]
    on_success: done
  slow:
    type: step
    command: touch started-MARK
  done:
    type: terminal
";

const MUTUAL_PARALLELS: &str = "name: mutual
states:
  initial: p1
  p1:
    type: parallel
    parallel: [p2]
    on_success: done
  p2:
    type: parallel
    parallel: [p1, slow]
  slow:
    type: step
    command: touch started-MARK
  done:
    type: terminal
";

const LOOP_PARALLEL_LOOP: &str = "name: looppar
states:
  initial: l
  l:
    type: for_each
    items: '[\"a\", \"b\"]'
    body: [p]
    on_complete: done
  p:
    type: parallel
    parallel: [slow, l]
  slow:
    type: step
    command: touch started-MARK
  done:
    type: terminal
";

#[test]
fn containment_cycles_are_validation_errors_naming_the_cycle() {
    let sb = sandbox();
    for (name, text, cycle) in [
        ("self", SELF_PARALLEL, "p -> p"),
        ("mutual", MUTUAL_PARALLELS, "p1 -> p2 -> p1"),
        ("looppar", LOOP_PARALLEL_LOOP, "l -> p -> l"),
    ] {
        let f = sb.write(&format!("{name}.yaml"), text).unwrap();
        let (code, diags) = validate(&sb, &f);
        assert_eq!(code, 2, "{name}: {diags:#?}");
        let cyc: Vec<&Value> = diags
            .iter()
            .filter(|d| d["code"] == "WORKFLOW.VALIDATION.CYCLE_DETECTED")
            .collect();
        assert_eq!(cyc.len(), 1, "{name}: one finding per cycle: {diags:#?}");
        assert_eq!(cyc[0]["severity"], "error");
        let msg = cyc[0]["message"].as_str().unwrap();
        assert!(msg.contains(cycle), "{name}: {msg}");
        assert!(cyc[0]["line"].as_u64().is_some(), "{name}: positioned");
    }
}

#[test]
fn run_refuses_a_containment_cycle_before_any_step_starts() {
    let sb = sandbox();
    for (name, text) in [
        ("self", SELF_PARALLEL),
        ("mutual", MUTUAL_PARALLELS),
        ("looppar", LOOP_PARALLEL_LOOP),
    ] {
        let marker = format!("started-{name}");
        let f = sb
            .write(
                &format!("{name}.yaml"),
                &text.replace("started-MARK", &marker),
            )
            .unwrap();
        let r = run(&sb, &f);
        assert_eq!(r.code, 2, "{name}: a WORKFLOW error, not a crash: {r:?}");
        assert!(
            r.stderr.contains("WORKFLOW.VALIDATION.CYCLE_DETECTED"),
            "{name}: {}",
            r.stderr
        );
        assert!(
            !sb.path().join(&marker).exists(),
            "{name}: no step ran before the refusal"
        );
    }
}

/// `awf <args>` in the sandbox, killed after `secs` seconds: a hang fails the test (with what
/// the command printed so far) instead of blocking the suite.
fn run_with_deadline(sb: &Sandbox, args: &[&str], secs: u64) -> Run {
    let out_path = sb
        .path()
        .join(format!("deadline-{}.out", args.join("-").replace('/', "_")));
    let err_path = out_path.with_extension("err");
    let mut child = sb
        .cmd(args)
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "`awf {}` did not end within {secs} s (stderr: {})",
                args.join(" "),
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    Run {
        code: status.code().unwrap_or(-1),
        stdout: std::fs::read_to_string(&out_path).unwrap(),
        stderr: std::fs::read_to_string(&err_path).unwrap(),
    }
}

/// The user's report: a loop whose body lists the loop itself made `awf validate`, `run` and
/// `list` spin at 100% CPU with memory growing without bound. Now each refuses it at once
/// with `CYCLE_DETECTED`, as for `parallel: [p]`.
#[test]
fn regression_a_loop_in_its_own_body_is_a_cycle_for_validate_run_and_list() {
    let sb = sandbox();
    for (name, text) in [
        (
            "c6",
            "name: c6\nstates: {initial: a, a: {type: while, while: \"true\", body: [a], on_complete: done}, done: {type: terminal}}\n",
        ),
        (
            "c7",
            "name: c7\nstates: {initial: a, a: {type: for_each, items: '[\"x\"]', body: [a], on_complete: done}, done: {type: terminal}}\n",
        ),
        (
            "c8",
            "name: c8\nstates: {initial: l1, l1: {type: while, while: \"true\", body: [l2], on_complete: done}, l2: {type: for_each, items: '[1]', body: [l1]}, done: {type: terminal}}\n",
        ),
    ] {
        let f = sb
            .write(&format!(".awf/workflows/{name}.yaml"), text)
            .unwrap();
        let file = f.display().to_string();
        let r = run_with_deadline(&sb, &["validate", "-f", "json", &file], 30);
        assert_eq!(r.code, 2, "{name}: {r:?}");
        let doc = r.json().unwrap();
        let cycles: Vec<(String, String, String)> = doc["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["severity"] == "error")
            .map(|d| {
                (
                    d["code"].as_str().unwrap().to_owned(),
                    d["path"].as_str().unwrap().to_owned(),
                    d["message"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let first = if name == "c8" { "l1" } else { "a" };
        let shown = if name == "c8" {
            "l1 -> l2 -> l1"
        } else {
            "a -> a"
        };
        assert_eq!(
            cycles,
            vec![(
                "WORKFLOW.VALIDATION.CYCLE_DETECTED".to_owned(),
                format!("states.{first}"),
                format!(
                    "state \"{first}\" contains itself: {shown} (a parallel block or loop cannot run inside itself)"
                ),
            )],
            "{name}"
        );
        let r = run_with_deadline(&sb, &["run", &file], 30);
        assert_eq!(r.code, 2, "{name}: {r:?}");
        assert!(
            r.stderr.contains("WORKFLOW.VALIDATION.CYCLE_DETECTED"),
            "{name}: {}",
            r.stderr
        );
    }
    let r = run_with_deadline(&sb, &["list", "-f", "json"], 30);
    assert_eq!(r.code, 0, "{r:?}");
    let listed = r.json().unwrap();
    for name in ["c6", "c7", "c8"] {
        let entry = listed
            .as_array()
            .and_then(|a| a.iter().find(|w| w["name"] == name))
            .unwrap_or_else(|| panic!("{name} listed: {listed:#}"));
        assert!(
            entry["error"]
                .as_str()
                .is_some_and(|e| e.contains("CYCLE_DETECTED")),
            "{name}: {entry:#}"
        );
    }
}

/// The user's report: `c: {type: call_workflow, workflow: rec}` in rec.yaml passed `awf
/// validate`, then `awf run` failed with EXECUTION.WORKFLOW.CIRCULAR_CALL. Now validate says
/// CYCLE_DETECTED (exit 2), for A -> B -> A too; run keeps AWF's exit 3 (conformance C23).
#[test]
fn regression_a_sub_workflow_call_cycle_is_found_by_validate() {
    let sb = sandbox();
    let call = |name: &str, target: &str| {
        format!(
            "name: {name}\nstates:\n  initial: start\n  start: {{type: step, command: touch started-{name}, on_success: c}}\n  c: {{type: call_workflow, workflow: {target}, on_success: done}}\n  done: {{type: terminal}}\n"
        )
    };
    sb.write(".awf/workflows/rec.yaml", &call("rec", "rec"))
        .unwrap();
    sb.write(".awf/workflows/a.yaml", &call("a", "b")).unwrap();
    sb.write(".awf/workflows/b.yaml", &call("b", "a")).unwrap();
    for (name, message) in [
        ("rec", "workflow \"rec\" calls itself: rec -> rec"),
        ("a", "sub-workflow calls form a cycle: a -> b -> a"),
    ] {
        let r = run_with_deadline(&sb, &["validate", "-f", "json", name], 30);
        assert_eq!(r.code, 2, "{name}: {r:?}");
        let doc = r.json().unwrap();
        let diags = doc["diagnostics"].as_array().unwrap();
        assert_eq!(
            errors(diags),
            vec![(
                "WORKFLOW.VALIDATION.CYCLE_DETECTED".to_owned(),
                "states.c.workflow".to_owned()
            )],
            "{name}"
        );
        let d = find(
            diags,
            "error",
            "WORKFLOW.VALIDATION.CYCLE_DETECTED",
            "states.c.workflow",
        );
        assert_eq!(
            d["message"],
            format!("{message} (the run would fail with EXECUTION.WORKFLOW.CIRCULAR_CALL)"),
            "{name}"
        );
        let r = run_with_deadline(&sb, &["run", name], 30);
        assert_eq!(r.code, 3, "{name}: {r:?}");
        assert!(
            r.stderr.contains("EXECUTION.WORKFLOW.CIRCULAR_CALL"),
            "{name}: {}",
            r.stderr
        );
        // New user, breaker: no resume hint (a resume fails the same way).
        assert!(!r.stderr.contains("awf resume"), "{name}: {}", r.stderr);
    }
}

/// The user's report: `when: "nosuchfn(1) == 2"` and `when: "startsWith(states.x.Output,
/// '/tmp')"` passed `awf validate`, then the run failed with EXECUTION.EXPRESSION.FAILED
/// "Unknown function". Now both are validation errors with a hint, and run refuses them.
#[test]
fn regression_unknown_functions_in_when_are_validation_errors_with_a_hint() {
    let sb = sandbox();
    let f = sb
        .write(
            "fns.yaml",
            "name: fns
states:
  initial: x
  x:
    type: step
    command: touch started-fns
    transitions:
      - when: \"nosuchfn(1) == 2\"
        goto: done
      - when: \"startsWith(states.x.Output, '/tmp')\"
        goto: done
      - when: \"states.x.Output startsWith '/tmp'\"
        goto: done
      - goto: done
  done:
    type: terminal
",
        )
        .unwrap();
    let (code, diags) = validate(&sb, &f);
    assert_eq!(code, 2, "{diags:#?}");
    let err = |i: usize| {
        let d = find(
            &diags,
            "error",
            "WORKFLOW.VALIDATION.INVALID_TRANSITION",
            &format!("states.x.transitions.{i}.when"),
        );
        (d["message"].clone(), d["hint"].clone())
    };
    assert_eq!(
        err(0),
        (
            json!(
                "expression `nosuchfn(1) == 2` does not compile: invalid expression \"nosuchfn(1) == 2\": unknown function nosuchfn() (the run would fail with 'Unknown function')"
            ),
            Value::Null
        )
    );
    assert_eq!(
        err(1),
        (
            json!(
                "expression `startsWith(states.x.Output, '/tmp')` does not compile: invalid expression \"startsWith(states.x.Output, '/tmp')\": unknown function startsWith() (the run would fail with 'Unknown function')"
            ),
            json!("startsWith is an operator, not a function; use the operator: x startsWith 'y'")
        )
    );
    assert_eq!(
        errors(&diags).len(),
        2,
        "the operator form is valid: {diags:#?}"
    );
    let r = run(&sb, &f);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("unknown function nosuchfn()"),
        "{}",
        r.stderr
    );
    assert!(!sb.path().join("started-fns").exists(), "no step ran");
}

/// New user: a `while:` that does not compile was coded INVALID_TRANSITION, though a loop's
/// condition is no transition: it is the loop state that is invalid.
#[test]
fn a_loop_condition_that_does_not_compile_is_an_invalid_state() {
    let sb = sandbox();
    let f = sb
        .write(
            "w.yaml",
            "name: w
states:
  initial: again
  again:
    type: while
    while: \"trimSpace(states.b.Output) != 'ok'\"
    break_when: \"states.b.Output ==\"
    body: [b]
    on_complete: done
  b: {type: step, command: echo ok}
  done: {type: terminal}
",
        )
        .unwrap();
    let (code, diags) = validate(&sb, &f);
    assert_eq!(code, 2, "{diags:#?}");
    for path in ["states.again.while", "states.again.break_when"] {
        let d = find(&diags, "error", "WORKFLOW.VALIDATION.INVALID_STATE", path);
        assert!(
            d["message"]
                .as_str()
                .is_some_and(|m| m.contains("does not compile")),
            "{d}"
        );
    }
    assert_eq!(errors(&diags).len(), 2, "{diags:#?}");
}

/// The user's report: a missing `script_file` made `awf validate` exit 1
/// (USER.INPUT.MISSING_FILE) where other invalid workflows exit 2, and `awf run` started,
/// ran the steps before it, failed at the step and left a failed run with a resume hint.
/// Now it is a workflow error (exit 2) for validate, and run refuses before starting.
#[test]
fn regression_a_missing_script_file_is_exit_2_and_run_refuses_before_starting() {
    let sb = sandbox();
    let f = sb
        .write(
            "sf.yaml",
            "name: sf
states:
  initial: first
  first: {type: step, command: touch started-sf, on_success: s}
  s: {type: step, script_file: scripts/nope.sh, on_success: done}
  done: {type: terminal}
",
        )
        .unwrap();
    let (code, diags) = validate(&sb, &f);
    assert_eq!(code, 2, "{diags:#?}");
    assert_eq!(
        errors(&diags),
        vec![(
            "WORKFLOW.VALIDATION.INVALID_REFERENCE".to_owned(),
            "states.s.script_file".to_owned()
        )]
    );
    let d = find(
        &diags,
        "error",
        "WORKFLOW.VALIDATION.INVALID_REFERENCE",
        "states.s.script_file",
    );
    assert_eq!(
        d["message"],
        json!(format!(
            "script_file not found: scripts/nope.sh ({})",
            sb.path().join("scripts/nope.sh").display()
        ))
    );
    let r = run(&sb, &f);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("[WORKFLOW.VALIDATION.INVALID_REFERENCE]")
            && r.stderr.contains("script_file not found: scripts/nope.sh"),
        "{}",
        r.stderr
    );
    assert!(
        !r.stderr.contains("resume"),
        "no run to resume: {}",
        r.stderr
    );
    assert!(!sb.path().join("started-sf").exists(), "no step ran");
    let history = sb.run(&["history", "-f", "json"]).unwrap();
    assert!(
        !history.stdout.contains("\"sf\""),
        "no run recorded: {}",
        history.stdout
    );
}

/// A chain of `n` nested blocks (parallel, for_each, parallel, …) around one step.
fn nested(n: usize) -> String {
    let mut s = format!("name: deep{n}\nstates:\n  initial: p0\n");
    for i in 0..n {
        let next = if i + 1 < n {
            format!("p{}", i + 1)
        } else {
            "leaf".to_owned()
        };
        if i % 2 == 0 {
            s.push_str(&format!(
                "  p{i}:\n    type: parallel\n    parallel: [{next}]\n"
            ));
        } else {
            s.push_str(&format!(
                "  p{i}:\n    type: for_each\n    items: '[1]'\n    body: [{next}]\n"
            ));
        }
        if i == 0 {
            s.push_str("    on_success: done\n");
        }
    }
    s.push_str("  leaf:\n    type: step\n    command: echo leaf\n  done:\n    type: terminal\n");
    s
}

#[test]
fn nesting_is_capped_below_what_overflows_the_stack() {
    let sb = sandbox();
    // 16 levels run (a debug build overflowed at 28 before the cap).
    let ok = sb.write("deep16.yaml", &nested(16)).unwrap();
    let r = run(&sb, &ok);
    assert_eq!(r.code, 0, "{r:?}");
    // 28 levels are refused cleanly instead of aborting with a stack overflow.
    let deep = sb.write("deep28.yaml", &nested(28)).unwrap();
    let (code, diags) = validate(&sb, &deep);
    assert_eq!(code, 2);
    let d = find(
        &diags,
        "error",
        "WORKFLOW.VALIDATION.INVALID_STATE",
        "states.p0",
    );
    assert!(
        d["message"].as_str().unwrap().contains("levels deep"),
        "{d}"
    );
    let r = run(&sb, &deep);
    assert_eq!(r.code, 2, "{r:?}");
}

// ---- reachability --------------------------------------------------------------------------

#[test]
fn no_reachable_terminal_is_an_error_and_an_unreachable_state_a_warning() {
    let sb = sandbox();
    let trap = sb
        .write(
            "trap.yaml",
            "name: trap
states:
  initial: a
  a:
    type: step
    command: echo a
    on_success: b
  b:
    type: step
    command: echo b
    transitions:
      - when: states.a.ExitCode == 0
        goto: a
      - goto: a
  done:
    type: terminal
",
        )
        .unwrap();
    let (code, diags) = validate(&sb, &trap);
    assert_eq!(code, 2);
    let d = find(&diags, "error", "WORKFLOW.VALIDATION.NO_EXIT", "states.a");
    assert!(d["message"].as_str().unwrap().contains("a, b"), "{d}");
    find(
        &diags,
        "warning",
        "WORKFLOW.VALIDATION.INVALID_TRANSITION",
        "states.done",
    );
    assert_eq!(run(&sb, &trap).code, 2, "run refuses it too");

    let orphan = sb
        .write(
            "orphan.yaml",
            "name: orphan
states:
  initial: a
  a:
    type: step
    command: echo a
    on_success: done
  lonely:
    type: step
    command: echo never
    on_success: done
  done:
    type: terminal
",
        )
        .unwrap();
    let (code, diags) = validate(&sb, &orphan);
    assert_eq!(code, 0, "{diags:#?}");
    let w = find(
        &diags,
        "warning",
        "WORKFLOW.VALIDATION.INVALID_TRANSITION",
        "states.lonely",
    );
    assert!(
        w["message"].as_str().unwrap().contains("never reached"),
        "{w}"
    );
    // The same warning in `awf run`, which still runs.
    let r = run(&sb, &orphan);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains("\"lonely\" is never reached"),
        "{}",
        r.stderr
    );
}

// ---- expressions ---------------------------------------------------------------------------

#[test]
fn expression_typos_in_when_while_and_break_when_are_reported_with_hints() {
    let sb = sandbox();
    let f = sb
        .write(
            "expr.yaml",
            "name: expr
inputs:
  - name: mode
    default: fast
states:
  initial: check
  check:
    type: step
    command: echo ok
    transitions:
      - when: states.check.ExitCod == 0
        goto: l
      - when: states.chekc.Output != ''
        goto: l
      - goto: l
  l:
    type: while
    while: inputs.mdoe == 'fast'
    break_when: states.body.Outptu == 'stop'
    max_iterations: 2
    body: [body]
    on_complete: done
  body:
    type: step
    command: echo stop
  done:
    type: terminal
",
        )
        .unwrap();
    let (code, diags) = validate(&sb, &f);
    assert_eq!(code, 2);
    let hint = |path: &str| {
        find(
            &diags,
            "error",
            "WORKFLOW.VALIDATION.INVALID_REFERENCE",
            path,
        )["hint"]
            .clone()
    };
    assert_eq!(
        hint("states.check.transitions.0.when"),
        json!("did you mean 'ExitCode'?")
    );
    assert_eq!(
        hint("states.check.transitions.1.when"),
        json!("did you mean 'check'?")
    );
    assert_eq!(hint("states.l.while"), json!("did you mean 'mode'?"));
    assert_eq!(hint("states.l.break_when"), json!("did you mean 'Output'?"));
    // Today these were silently false at run time; now the run refuses to start.
    let r = run(&sb, &f);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("INVALID_REFERENCE"), "{}", r.stderr);
}

// ---- input declarations --------------------------------------------------------------------

#[test]
fn unknown_input_types_and_bad_defaults_are_positioned_validation_errors() {
    let sb = sandbox();
    let f = sb
        .write(
            "inputs.yaml",
            "name: inputs
inputs:
  - name: count
    type: integr
  - name: n
    type: integer
    default: abc
  - name: env
    default: qa
    validation:
      enum: [dev, prod]
  - name: port
    type: integer
    default: 80
    validation:
      min: 1024
  - name: ok
    type: integer
    default: 3
    validation:
      min: 1
  - name: tag
    validation:
      pattern: '([a-z'
states:
  initial: a
  a:
    type: step
    command: echo hi
    on_success: done
  done:
    type: terminal
",
        )
        .unwrap();
    let (code, diags) = validate(&sb, &f);
    assert_eq!(code, 2);
    assert_eq!(
        errors(&diags),
        vec![
            (
                "WORKFLOW.VALIDATION.INVALID_STATE".to_owned(),
                "inputs.0.type".to_owned()
            ),
            (
                "WORKFLOW.VALIDATION.INVALID_STATE".to_owned(),
                "inputs.1.default".to_owned()
            ),
            (
                "WORKFLOW.VALIDATION.INVALID_STATE".to_owned(),
                "inputs.2.default".to_owned()
            ),
            (
                "WORKFLOW.VALIDATION.INVALID_STATE".to_owned(),
                "inputs.3.default".to_owned()
            ),
            (
                "WORKFLOW.VALIDATION.INVALID_STATE".to_owned(),
                "inputs.5.validation.pattern".to_owned()
            ),
        ]
    );
    let t = find(
        &diags,
        "error",
        "WORKFLOW.VALIDATION.INVALID_STATE",
        "inputs.0.type",
    );
    assert_eq!(t["line"], json!(4));
    assert_eq!(t["hint"], json!("did you mean 'integer'?"));
    let d = find(
        &diags,
        "error",
        "WORKFLOW.VALIDATION.INVALID_STATE",
        "inputs.3.default",
    );
    assert_eq!(d["line"], json!(14));
    assert!(
        d["message"]
            .as_str()
            .unwrap()
            .contains("below minimum 1024"),
        "{d}"
    );
    // `awf run` stops on the same WORKFLOW error (not a USER error at input resolution).
    let r = sb
        .run(&["run", &f.display().to_string(), "-i", "count=1"])
        .unwrap();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("inputs.0.type"), "{}", r.stderr);
}

// ---- validate and run agree; one pass ------------------------------------------------------

#[test]
fn a_template_error_stops_validate_and_run_alike() {
    let sb = sandbox();
    let f = sb
        .write(
            "tpl.yaml",
            "name: tpl
states:
  initial: first
  first:
    type: step
    command: touch ran-first
    on_success: second
  second:
    type: step
    command: echo {{.states.first.Outptu}}
    on_success: done
  done:
    type: terminal
",
        )
        .unwrap();
    let (code, diags) = validate(&sb, &f);
    assert_eq!(code, 2);
    find(
        &diags,
        "error",
        "WORKFLOW.VALIDATION.INVALID_REFERENCE",
        "states.second.command",
    );
    let r = run(&sb, &f);
    assert_eq!(r.code, 2, "same severity in run: {r:?}");
    assert!(r.stderr.contains("Outptu"), "{}", r.stderr);
    assert!(
        !sb.path().join("ran-first").exists(),
        "the run stops before its first step"
    );
}

#[test]
fn one_pass_reports_the_mistyped_key_the_parse_error_and_later_errors() {
    let sb = sandbox();
    let f = sb
        .write(
            "typo.yaml",
            "name: typo
states:
  initial: build
  build:
    type: step
    comand: make
    on_success: tset
  test:
    type: step
    command: make test
    on_success: done
  done:
    type: terminal
",
        )
        .unwrap();
    let (code, diags) = validate(&sb, &f);
    assert_eq!(code, 2);
    let unknown = find(
        &diags,
        "warning",
        "WORKFLOW.PARSE.UNKNOWN_FIELD",
        "states.build.comand",
    );
    assert_eq!(unknown["hint"], json!("did you mean 'command'?"));
    let needs = find(
        &diags,
        "error",
        "WORKFLOW.VALIDATION.INVALID_STATE",
        "states.build.command",
    );
    assert!(
        needs["message"].as_str().unwrap().contains("\"comand\""),
        "the error names the mistyped key: {needs}"
    );
    let missing = find(
        &diags,
        "error",
        "WORKFLOW.VALIDATION.MISSING_STATE",
        "states.build.on_success",
    );
    assert_eq!(missing["hint"], json!("did you mean 'test'?"));
    // An `inputs:` block that cannot be decoded does not make every reference "undeclared".
    let broken = sb
        .write(
            "broken-inputs.yaml",
            "name: broken
inputs:
  mode: fast
states:
  initial: a
  a:
    type: step
    command: echo {{.inputs.mode}}
    on_success: done
  done:
    type: terminal
",
        )
        .unwrap();
    let (code, bd) = validate(&sb, &broken);
    assert_eq!(code, 2);
    assert_eq!(
        errors(&bd),
        vec![("WORKFLOW.PARSE.YAML_SYNTAX".to_owned(), "inputs".to_owned())]
    );
    // Text output: all of them, and the count.
    let r = sb.run(&["validate", &f.display().to_string()]).unwrap();
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("states.build.comand"), "{}", r.stderr);
    assert!(r.stderr.contains("is invalid: 2 errors"), "{}", r.stderr);
}

// ---- parallel branch routes ----------------------------------------------------------------

#[test]
fn routes_on_parallel_branches_are_warned_as_ignored() {
    let sb = sandbox();
    let f = sb
        .write(
            "branches.yaml",
            "name: branches
states:
  initial: p
  p:
    type: parallel
    parallel: [a, b]
    on_success: done
  a:
    type: step
    command: echo a
    on_success: done
    on_failure: done
  b:
    type: step
    command: echo b
  done:
    type: terminal
",
        )
        .unwrap();
    let (code, diags) = validate(&sb, &f);
    assert_eq!(code, 0, "{diags:#?}");
    let w = find(
        &diags,
        "warning",
        "WORKFLOW.VALIDATION.INVALID_TRANSITION",
        "states.a.on_success",
    );
    assert!(w["message"].as_str().unwrap().contains("ignored"), "{w}");
    assert!(
        !diags.iter().any(|d| d["path"]
            .as_str()
            .is_some_and(|p| p.starts_with("states.b."))),
        "b declares no route: {diags:#?}"
    );
}

// ---- templates -----------------------------------------------------------------------------

#[test]
fn to_json_is_an_alias_of_json() {
    let sb = sandbox();
    let f = sb
        .write(
            "tojson.yaml",
            "name: tojson
inputs:
  - name: who
states:
  initial: a
  a:
    type: step
    command: 'echo {{toJson .inputs.who}} {{json .inputs.who}}'
    on_success: done
  done:
    type: terminal
",
        )
        .unwrap();
    let r = sb
        .run(&[
            "run",
            &f.display().to_string(),
            "-f",
            "json",
            "-i",
            "who=Ada",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{r:?}");
    let doc = r.json().unwrap();
    assert_eq!(doc["states"]["a"]["output"], json!("Ada Ada\n"));
}

#[test]
fn use_template_parameters_resolve_with_and_without_the_dot() {
    let sb = sandbox();
    sb.write(
        ".awf/templates/greet.yaml",
        "name: greet
parameters:
  - name: who
    default: world
states:
  greet:
    type: step
    command: 'echo dot={{.parameters.who}} bare={{parameters.who}} spaced={{ .parameters.who }}'
",
    )
    .unwrap();
    let f = sb
        .write(
            "uses.yaml",
            "name: uses
states:
  initial: hello
  hello:
    use_template: greet
    parameters: {who: Ada}
    on_success: done
  done:
    type: terminal
",
        )
        .unwrap();
    let r = sb
        .run(&["run", &f.display().to_string(), "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{r:?}");
    let doc = r.json().unwrap();
    assert_eq!(
        doc["states"]["hello"]["output"],
        json!("dot=Ada bare=Ada spaced=Ada\n")
    );
    // A parameter the template does not declare is named, with a did-you-mean.
    sb.write(
        ".awf/templates/greet.yaml",
        "name: greet
parameters:
  - name: who
states:
  greet:
    type: step
    command: 'echo {{.parameters.whom}}'
",
    )
    .unwrap();
    let (code, diags) = validate(&sb, &f);
    assert_eq!(code, 2);
    let d = find(
        &diags,
        "error",
        "WORKFLOW.VALIDATION.INVALID_REFERENCE",
        "states.hello.use_template",
    );
    assert_eq!(d["hint"], json!("did you mean 'who'?"));
}

#[test]
fn every_required_key_error_names_the_mistyped_key() {
    let sb = sandbox();
    let f = sb
        .write(
            "typos.yaml",
            "name: typos
states:
  initial: a
  a:
    typ: step
    command: echo
  b:
    type: agent
    provder: claude
    promt: hi
    on_success: c
  c:
    type: for_each
    itmes: [1]
    body: [x]
    on_complete: d
  x:
    type: step
    command: echo
  d:
    type: step
    command: echo
    transitions:
      - got: done
  done:
    type: terminal
",
        )
        .unwrap();
    let (code, diags) = validate(&sb, &f);
    assert_eq!(code, 2);
    for (path, typo) in [
        ("states.a.type", "typ"),
        ("states.b.provider", "provder"),
        ("states.b.prompt", "promt"),
        ("states.c.items", "itmes"),
        ("states.d.transitions.0.goto", "got"),
    ] {
        let d = diags
            .iter()
            .find(|d| d["severity"] == "error" && d["path"] == path)
            .unwrap_or_else(|| panic!("no error at {path}: {diags:#?}"));
        let msg = d["message"].as_str().unwrap();
        assert!(
            msg.contains(&format!("\"{typo}\" is not a key: did you mean")),
            "{path}: {msg}"
        );
    }
    // No second-hand errors: d's transitions failed to decode, it is not "without a way out";
    // b's provider is missing, not "unknown".
    assert!(
        !diags
            .iter()
            .any(|d| d["code"] == "WORKFLOW.VALIDATION.NO_EXIT"
                || d["code"] == "USER.AGENT.UNKNOWN_PROVIDER"),
        "{diags:#?}"
    );
    // `awf run` prints errors only: the one it stops on names the key too.
    let agent_only = sb
        .write(
            "agent.yaml",
            "name: agent
states:
  initial: b
  b:
    type: agent
    provider: claude
    promt: hi
    on_success: done
  done:
    type: terminal
",
        )
        .unwrap();
    let r = run(&sb, &agent_only);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr
            .contains("\"promt\" is not a key: did you mean 'prompt'?"),
        "{}",
        r.stderr
    );
}

/// Writes `count` workflows `w0` … into the sandbox, each `levels` blocks deep around a call
/// of the next one (the last runs `echo deepest`), and points `AWF_WORKFLOWS_PATH` at them.
fn call_chain(sb: &mut Sandbox, count: usize, levels: usize) {
    for w in 0..count {
        let mut s = nested(levels).replace(&format!("name: deep{levels}"), &format!("name: w{w}"));
        if w + 1 < count {
            s = s.replace(
                "  leaf:\n    type: step\n    command: echo leaf\n",
                &format!(
                    "  leaf:\n    type: call_workflow\n    workflow: w{}\n",
                    w + 1
                ),
            );
        } else {
            s = s.replace("command: echo leaf", "command: echo deepest");
        }
        sb.write(&format!("chain/w{w}.yaml"), &s).unwrap();
    }
    let dir = sb.path().join("chain").display().to_string();
    sb.set_env("AWF_WORKFLOWS_PATH", &dir);
}

#[test]
fn a_deep_chain_of_sub_workflows_runs_without_overflowing_the_stack() {
    // 9 workflows, each 2 blocks deep around the call of the next: 27 nested levels, which
    // overflowed a default 2 MiB worker stack.
    let mut sb = sandbox();
    call_chain(&mut sb, 9, 2);
    let r = sb.run(&["run", "w0", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json().unwrap()["status"], json!("success"));
}

#[test]
fn nesting_past_the_engine_limit_across_sub_workflows_fails_cleanly() {
    // Each workflow is valid on its own (16 levels), but 5 of them chained nest 85 levels.
    let mut sb = sandbox();
    call_chain(&mut sb, 5, 16);
    let (code, _) = validate(&sb, &sb.path().join("chain/w0.yaml"));
    assert_eq!(code, 0, "each workflow is valid on its own");
    let r = sb.run(&["run", "w0", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "an EXECUTION failure, not a crash: {r:?}");
    let doc = r.json().unwrap();
    assert_eq!(doc["status"], json!("failure"));
    let msg = doc["error"]["message"].as_str().unwrap();
    assert!(msg.contains("nest more than 64 levels deep"), "{msg}");
}

#[test]
fn a_duplicate_key_does_not_hide_later_findings() {
    let sb = sandbox();
    let f = sb
        .write(
            "dup.yaml",
            "name: dup
states:
  initial: a
  a:
    type: step
    command: echo a
    on_success: b
    on_success: done
    on_sucess: done
  b:
    type: step
    command: echo b
    on_success: nowhere
  done:
    type: terminal
",
        )
        .unwrap();
    let (code, diags) = validate(&sb, &f);
    assert_eq!(code, 2);
    let dup = diags
        .iter()
        .find(|d| d["code"] == "WORKFLOW.PARSE.YAML_SYNTAX")
        .unwrap_or_else(|| panic!("{diags:#?}"));
    assert_eq!(dup["line"], json!(8));
    assert!(
        dup["message"]
            .as_str()
            .unwrap()
            .contains("\"on_success\" already defined at line 7"),
        "{dup}"
    );
    find(
        &diags,
        "error",
        "WORKFLOW.VALIDATION.MISSING_STATE",
        "states.b.on_success",
    );
    find(
        &diags,
        "warning",
        "WORKFLOW.PARSE.UNKNOWN_FIELD",
        "states.a.on_sucess",
    );
    // `awf run` still refuses the file on the duplicate key.
    let r = run(&sb, &f);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("already defined at line 7"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_sub_workflow_gets_the_checks_a_run_applies() {
    let mut sb = sandbox();
    sb.write(
        "wfs/child.yaml",
        "name: child
states:
  initial: a
  a:
    type: step
    command: touch child-ran
    transitions:
      - when: states.a.ExitCod == 0
        goto: done
      - goto: done
  done:
    type: terminal
",
    )
    .unwrap();
    sb.write(
        "wfs/parent.yaml",
        "name: parent
states:
  initial: call
  call:
    type: call_workflow
    workflow: child
    on_success: done
    on_failure: handled
  done:
    type: terminal
  handled:
    type: terminal
    status: failure
    message: child refused
",
    )
    .unwrap();
    let dir = sb.path().join("wfs").display().to_string();
    sb.set_env("AWF_WORKFLOWS_PATH", &dir);
    // Run directly, the child is refused ...
    let r = sb.run(&["run", "child"]).unwrap();
    assert_eq!(r.code, 2, "{r:?}");
    // ... and called, it fails the call step the same way (routable), before its first step.
    let r = sb.run(&["run", "parent", "-f", "json"]).unwrap();
    let doc = r.json().unwrap();
    assert_eq!(doc["terminal"], json!("handled"), "{doc}");
    let err = doc["states"]["call"]["error"].as_str().unwrap();
    assert!(err.contains("ExitCod"), "{err}");
    assert!(!sb.path().join("child-ran").exists());
}

#[test]
fn dry_run_refuses_what_run_refuses() {
    let sb = sandbox();
    let f = sb
        .write(
            "dry.yaml",
            "name: dry
states:
  initial: a
  a:
    type: step
    command: echo {{.inputs.mdoe}}
    on_success: done
  done:
    type: terminal
",
        )
        .unwrap();
    let r = sb
        .run(&["run", &f.display().to_string(), "--dry-run"])
        .unwrap();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("undefined input \"mdoe\""),
        "{}",
        r.stderr
    );
}

/// The first YAML block of README's section `heading` (a `## ` line), as a user copies it.
fn readme_yaml(heading: &str) -> String {
    let readme = std::fs::read_to_string(awf_tests::workspace_root().join("README.md")).unwrap();
    let section = readme
        .split(heading)
        .nth(1)
        .expect("README has the section");
    section
        .split("```yaml\n")
        .nth(1)
        .and_then(|s| s.split("\n```").next())
        .expect("the section's first yaml block")
        .to_owned()
}

/// Puts an executable `bin/<name>` with `script` in the sandbox, first on its `PATH`.
fn stub_on_path(sb: &mut Sandbox, name: &str, script: &str) {
    let bin = sb.write(&format!("bin/{name}"), script).unwrap();
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        sb.path().join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    sb.set_env("PATH", &path);
}

/// README's "A short tour of the language" workflow, as a user copies it: it validates with
/// no warning (a new user found it gave three: unquoted input values in commands and a
/// transition list with no default route), and it runs to `done` with `cargo` stubbed.
#[test]
fn the_readme_tour_workflow_validates_cleanly_and_runs() {
    let yaml = readme_yaml("## A short tour of the language");
    let mut sb = sandbox();
    let wf = sb.write("release.yaml", &yaml).unwrap();
    let (code, diags) = validate(&sb, &wf);
    assert_eq!((code, diags), (0, Vec::<Value>::new()));
    // `cargo clippy` / `cargo test` stand-ins.
    stub_on_path(&mut sb, "cargo", "#!/bin/sh\necho cargo \"$@\"\n");
    let r = sb
        .run(&["run", "-f", "json", "release.yaml", "-i", "version=1.2.3"])
        .unwrap();
    let doc = r.json().unwrap();
    assert_eq!(
        (r.code, &doc["status"], &doc["terminal"]),
        (0, &json!("success"), &json!("done")),
        "{doc}\n{}",
        r.stderr
    );
    assert!(
        r.stderr.is_empty() || !r.stderr.contains("WARN"),
        "{}",
        r.stderr
    );
}

/// README's "Getting started" workflow, as a new user copies it: no diagnostic (a first draft
/// had `retry.delay`, an unknown field, and a timeout spanning retries), `release` builds and
/// tests with `make` stubbed, an input outside the enum is refused, and a failing `make test`
/// (retried once) ends in the failure terminal with its message.
#[test]
fn the_readme_getting_started_workflow_validates_cleanly_and_runs() {
    let yaml = readme_yaml("## Getting started");
    let mut sb = sandbox();
    let wf = sb.write("build.yaml", &yaml).unwrap();
    let (code, diags) = validate(&sb, &wf);
    assert_eq!((code, diags), (0, Vec::<Value>::new()));
    // `make` stand-in: `make test` fails when FAIL_TEST is set.
    stub_on_path(
        &mut sb,
        "make",
        "#!/bin/sh\n[ \"$1\" = test ] && [ -n \"$FAIL_TEST\" ] && exit 2\necho make \"$@\"\n",
    );
    let r = sb
        .run(&["run", "-f", "json", "build.yaml", "-i", "target=release"])
        .unwrap();
    let doc = r.json().unwrap();
    assert_eq!(
        (r.code, &doc["status"], &doc["terminal"]),
        (0, &json!("success"), &json!("done")),
        "{doc}\n{}",
        r.stderr
    );
    let r = sb
        .run(&["run", "-f", "json", "build.yaml", "-i", "target=nope"])
        .unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    sb.set_env("FAIL_TEST", "1");
    let r = sb.run(&["run", "-f", "json", "build.yaml"]).unwrap();
    let doc = r.json().unwrap();
    assert_eq!(
        (
            r.code,
            &doc["status"],
            &doc["terminal"],
            &doc["states"]["test"]["attempts"]
        ),
        (3, &json!("failure"), &json!("failed"), &json!(2)),
        "{doc}\n{}",
        r.stderr
    );
    assert!(
        doc["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("build of debug failed")),
        "{doc}"
    );
}

// ---- each error with its own hint ----------------------------------------------------------

/// Two errors: no terminal state (no hint of its own) and an `on_success` naming an unknown
/// state (hint: the available states).
const TWO_ERRORS: &str = "name: broken
states:
  initial: a
  a:
    type: step
    command: echo hi
    on_success: nowhere
";

#[test]
fn run_prints_the_first_error_with_its_own_hint_never_another_errors() {
    let sb = sandbox();
    let f = sb.write("broken.yaml", TWO_ERRORS).unwrap();
    let (code, diags) = validate(&sb, &f);
    assert_eq!(code, 2, "{diags:#?}");
    let errs: Vec<&Value> = diags.iter().filter(|d| d["severity"] == "error").collect();
    assert_eq!(errs.len(), 2, "two errors: {diags:#?}");
    let unknown = errs
        .iter()
        .find(|d| d["message"].as_str().unwrap().contains("nowhere"))
        .expect("the unknown state's error");
    assert!(
        unknown["hint"]
            .as_str()
            .unwrap_or_default()
            .contains("available states"),
        "the unknown state's error has its hint: {unknown}"
    );
    let first = errs[0];
    let first_msg = first["message"].as_str().unwrap().to_owned();
    let first_hint = first["hint"].as_str().map(str::to_owned);

    let r = run(&sb, &f);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains(&first_msg),
        "the first error is printed: {}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("(and 1 more error(s); run `awf validate` to see all)"),
        "{}",
        r.stderr
    );
    let hints: Vec<&str> = r
        .stderr
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Hint:"))
        .map(str::trim)
        .collect();
    assert_eq!(
        hints,
        first_hint.iter().map(String::as_str).collect::<Vec<_>>(),
        "only the printed error's own hint: {}",
        r.stderr
    );

    // `awf validate` (text): each error followed by its own hint.
    let v = sb.run(&["validate", &f.display().to_string()]).unwrap();
    assert_eq!(v.code, 2, "{v:?}");
    let lines: Vec<&str> = v.stderr.lines().collect();
    for d in &errs {
        let msg = d["message"].as_str().unwrap();
        let at = lines
            .iter()
            .position(|l| l.contains(msg))
            .unwrap_or_else(|| panic!("{msg} printed: {}", v.stderr));
        let next = lines.get(at + 1).map(|l| l.trim()).unwrap_or_default();
        match d["hint"].as_str() {
            Some(h) => assert_eq!(next, format!("Hint: {h}"), "{}", v.stderr),
            None => assert!(!next.starts_with("Hint:"), "{}", v.stderr),
        }
    }
}

/// `{{.loop.Item}}` in a loop's body step is not reported as outside a loop when the loop's
/// `body:` itself could not be read (a string, not a list): the one error is the body's (a
/// breaker saw the cascade).
#[test]
fn a_loop_body_that_does_not_parse_adds_no_loop_reference_error() {
    let sb = sandbox();
    let f = sb
        .write(
            "lb.yaml",
            "name: lb\nstates:\n  initial: l\n  l: {type: for_each, items: '[1]', body: s1, on_complete: done}\n  s1: {type: step, command: 'echo {{.loop.Item}}', on_success: l}\n  done: {type: terminal}\n",
        )
        .unwrap();
    let (code, diags) = validate(&sb, &f);
    assert_eq!(code, 2);
    find(
        &diags,
        "error",
        "WORKFLOW.PARSE.YAML_SYNTAX",
        "states.l.body",
    );
    assert!(
        !diags.iter().any(|d| d["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("loop reference")),
        "{diags:#?}"
    );
}

/// New user: a misspelt `type:` (a decoding error) also drew "never reached" warnings for
/// every state after it (the broken state has no routes): noise that hid the one error.
#[test]
fn a_state_that_does_not_decode_draws_no_never_reached_warnings() {
    let sb = sandbox();
    let f = sb
        .write(
            "t.yaml",
            "name: t\nstates:\n  initial: a\n  a: {type: stpe, command: 'true', on_success: b}\n  b: {type: step, command: 'true', on_success: done}\n  done: {type: terminal}\n  lost: {type: terminal}\n",
        )
        .unwrap();
    let (code, diags) = validate(&sb, &f);
    assert_eq!(code, 2, "{diags:#?}");
    let codes: Vec<&str> = diags.iter().filter_map(|d| d["code"].as_str()).collect();
    assert_eq!(codes, ["WORKFLOW.PARSE.UNKNOWN_STEP_TYPE"], "{diags:#?}");
    // New user: `./t.yaml` was shown as `<dir>/./t.yaml`.
    let r = sb.run(&["validate", "./t.yaml"]).unwrap();
    let all = format!("{}{}", r.stdout, r.stderr);
    assert!(all.contains("/t.yaml:4:7: error"), "{all}");
    assert!(!all.contains("/./"), "{all}");
}

/// New user: a `call_workflow` step passing `comp` to a child that requires `component`
/// validated clean, then the run failed inside the child.
#[test]
fn call_workflow_inputs_are_checked_against_the_childs_declarations() {
    let sb = sandbox();
    sb.write(
        "child.yaml",
        "name: child\ninputs:\n  - {name: component, type: string, required: true}\n  - {name: level, type: string, default: info}\nstates:\n  initial: s\n  s: {type: step, command: 'echo {{.inputs.component}}', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let f = sb
        .write(
            "parent.yaml",
            "name: parent\nstates:\n  initial: c\n  c: {type: call_workflow, workflow: child.yaml, inputs: {comp: x, level: debug}, on_success: done}\n  done: {type: terminal}\n",
        )
        .unwrap();
    let (code, diags) = validate(&sb, &f);
    assert_eq!(code, 0, "{diags:#?}");
    let warnings: Vec<(String, String)> = diags
        .iter()
        .filter(|d| d["path"] == "states.c.inputs")
        .map(|d| {
            assert_eq!(d["code"], "WORKFLOW.VALIDATION.INVALID_REFERENCE", "{d}");
            (
                d["message"].as_str().unwrap_or("").to_owned(),
                d["hint"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert_eq!(warnings.len(), 2, "{diags:#?}");
    assert!(
        warnings[0].0.contains("declares no input \"comp\""),
        "{warnings:?}"
    );
    assert!(
        warnings[0].1.contains("did you mean \"component\""),
        "{warnings:?}"
    );
    assert!(
        warnings[1].0.contains("requires input \"component\""),
        "{warnings:?}"
    );
    // Passing what the child declares: nothing to say.
    let ok = sb
        .write(
            "ok.yaml",
            "name: ok\nstates:\n  initial: c\n  c: {type: call_workflow, workflow: child.yaml, inputs: {component: x}, on_success: done}\n  done: {type: terminal}\n",
        )
        .unwrap();
    let (code, diags) = validate(&sb, &ok);
    assert_eq!(code, 0, "{diags:#?}");
    assert!(
        diags.iter().all(|d| d["path"] != "states.c.inputs"),
        "{diags:#?}"
    );
}
