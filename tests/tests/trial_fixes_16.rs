//! Fixes from stop 32's trials (a new user's and a breaker's), over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

/// A step whose process could not be started (a missing `dir:`, a NUL byte in its command)
/// does not take a catch-all transition to a success terminal: it fails the run (exit 3)
/// with the executor's hint, or goes to its `on_failure` (breaker: `Workflow completed`,
/// exit 0).
#[test]
fn a_step_that_never_started_takes_no_catch_all_transition() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "dir.yaml",
        "name: d\nstates:\n  initial: b\n  b:\n    type: step\n    command: echo hi\n    \
         dir: /nonexistent/awf-dir\n    transitions:\n      - when: \"1 == 1\"\n        \
         goto: done\n    on_success: done\n  done: {type: terminal, message: ok}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "dir.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(doc["status"], "failure", "{doc:#}");
    let text = doc.to_string();
    assert!(text.contains("/nonexistent/awf-dir"), "{doc:#}");
    assert!(
        text.contains("Fix the step's `dir:`"),
        "the hint is kept: {doc:#}"
    );

    // With an `on_failure`, the failure goes there.
    sb.write(
        "nul.yaml",
        "name: n\nstates:\n  initial: a\n  a: {type: step, command: \"printf 'A\\\\000B'\", \
         on_success: b}\n  b:\n    type: step\n    command: 'printf \"%s\" {{shell_quote \
         .states.a.Output}}'\n    transitions:\n      - goto: done\n    on_failure: broken\n  \
         done: {type: terminal}\n  broken: {type: terminal, status: failure, message: never \
         started}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "nul.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(doc["terminal"], "broken", "{doc:#}");

    // A process that ran and failed still takes its transitions (AWF routes on ExitCode).
    sb.write(
        "ran.yaml",
        "name: r\nstates:\n  initial: a\n  a:\n    type: step\n    command: exit 4\n    \
         transitions:\n      - when: \"states.a.ExitCode == 4\"\n        goto: done\n    \
         on_failure: broken\n  done: {type: terminal}\n  broken: {type: terminal, status: \
         failure}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "ran.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
}

/// `validation: {min: 10, max: 1}` can take no value: `awf validate` says so (breaker: it
/// said valid, then refused every value at run time).
#[test]
fn an_input_whose_min_is_over_its_max_is_a_validation_error() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "m.yaml",
        "name: m\ninputs:\n  - {name: m, type: integer, validation: {min: 10, max: 1}}\n\
         states:\n  initial: a\n  a: {type: step, command: echo hi, on_success: done}\n  \
         done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["validate", "m.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("input \"m\": min 10 is greater than max 1: no value can satisfy both"),
        "{}",
        r.stderr
    );
    // A sound range is still valid.
    sb.write(
        "ok.yaml",
        "name: ok\ninputs:\n  - {name: m, type: integer, validation: {min: 1, max: 10}}\n\
         states:\n  initial: a\n  a: {type: step, command: echo hi, on_success: done}\n  \
         done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["validate", "ok.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
}

/// A gate that failed because nobody could be asked (no terminal) gets a resume hint that
/// approves it, and following the hint completes the run (new user: the hint's command
/// failed the same way).
#[test]
fn the_resume_hint_of_an_unasked_gate_approves_it() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "gate.yaml",
        "name: gate\nstates:\n  initial: deploy\n  deploy: {type: step, command: echo \
         deploying, approval: \"Deploy?\", on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "gate.yaml"]).unwrap();
    assert_ne!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let hint = r
        .stderr
        .lines()
        .find_map(|l| l.split("continue it with `").nth(1))
        .and_then(|rest| rest.split('`').next())
        .unwrap_or_else(|| panic!("no resume hint: {}", r.stderr))
        .to_owned();
    assert!(hint.ends_with(" --yes"), "{hint}");
    let args: Vec<&str> = hint.split_whitespace().skip(1).collect();
    let r = sb.run(&args).unwrap();
    assert_eq!(r.code, 0, "{hint}: {}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("approval granted by --yes"),
        "{}",
        r.stderr
    );
}

/// `--from` a parallel block's branch is refused with the block to resume from, and the
/// list of states `--from` takes leaves the branches out (new user: resuming a branch ran it
/// alone and ended with NO_ROUTE).
#[test]
fn resuming_from_a_parallel_branch_points_at_its_block() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "p.yaml",
        "name: p\nstates:\n  initial: par\n  par:\n    type: parallel\n    parallel: [fast_fail, \
         slow_ok]\n    strategy: all_succeed\n    on_success: done\n    on_failure: failed\n  \
         fast_fail: {type: step, command: exit 9}\n  slow_ok: {type: step, command: echo ok}\n  \
         done: {type: terminal}\n  failed: {type: terminal, status: failure}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "p.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let id = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    let r = sb.run(&["resume", &id, "--from", "slow_ok"]).unwrap();
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("cannot resume from slow_ok: it is a branch of the parallel state par"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("resume from the parallel state par instead"),
        "{}",
        r.stderr
    );
    let r = sb.run(&["resume", &id, "--from", "zzzzzzzzzz"]).unwrap();
    assert!(
        r.stderr
            .contains("--from takes `current`, `previous` or one of its states: par\n")
            || r.stderr.contains("one of its states: par"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("slow_ok"), "{}", r.stderr);
}

/// `awf validate` of a workflow whose sub-workflow has errors says so at the call, with the
/// child's first error and its hint (new user: "valid", then the run failed at the call); a
/// call cycle is still checked once.
#[test]
fn validate_says_when_a_called_workflow_is_invalid() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "sub/c2.yaml",
        "name: c2\ninputs:\n  - {name: msg, type: string}\nstates:\n  initial: s\n  s: {type: \
         step, command: 'echo {{.inputs.msg}} {{.inputs.code}}', on_success: done}\n  done: \
         {type: terminal}\n",
    )
    .unwrap();
    sb.write(
        "p2.yaml",
        "name: p2\nstates:\n  initial: call\n  call:\n    type: call_workflow\n    workflow: \
         ./sub/c2.yaml\n    inputs: {msg: hi}\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["validate", "p2.yaml"]).unwrap();
    assert_eq!(r.code, 0, "a warning: {}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains(
            "states.call.workflow: sub-workflow \"./sub/c2.yaml\" is invalid, so the call fails \
             when it runs: undefined input \"code\""
        ),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("declare it under inputs:"),
        "{}",
        r.stderr
    );
    // A valid child gives no such warning.
    sb.write(
        "sub/c2.yaml",
        "name: c2\ninputs:\n  - {name: msg, type: string}\nstates:\n  initial: s\n  s: {type: \
         step, command: 'echo {{.inputs.msg}}', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["validate", "p2.yaml"]).unwrap();
    assert!(!r.stderr.contains("is invalid"), "{}", r.stderr);
}

/// `awf serve` refuses, at submission, an input value no step could be started with (a NUL
/// byte; longer than the OS takes in one environment variable), naming the input (breaker:
/// 202, then every step failed with "nul byte found" or "the command is too long", neither
/// naming the input).
#[test]
fn inputs_no_process_can_take_are_refused_when_the_run_is_submitted() {
    use awf_tests::http_serve::post;
    use awf_tests::http_serve::sandbox_with;
    use awf_tests::http_serve::start;
    let wf = "name: nul\ninputs: [{name: s, type: string, default: x}]\nstates:\n  initial: \
              a\n  a: {type: step, command: 'echo \"got: $s\"', on_success: done}\n  done: \
              {type: terminal}\n";
    let sb = sandbox_with(&[("nul", wf)]);
    let s = start(&sb, &[]);
    let url = format!("{}/api/workflows/env/nul/run", s.base);
    let (code, body, _) = post(&url, r#"{"inputs": {"s": "a\u0000b"}}"#);
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("inputs.s: holds a NUL byte"), "{body}");
    let big = sb
        .write(
            "big.json",
            &format!(r#"{{"inputs": {{"s": "{}"}}}}"#, "b".repeat(200_000)),
        )
        .unwrap();
    let (code, body, _) = post(&url, &format!("@{}", big.display()));
    assert_eq!(code, 422, "{}", &body[..body.len().min(500)]);
    assert!(
        body.contains("inputs.s: is 200000 bytes long"),
        "{}",
        &body[..body.len().min(500)]
    );
    // Just under the limit, the step gets it.
    let ok = sb
        .write(
            "ok.json",
            &format!(r#"{{"inputs": {{"s": "{}"}}}}"#, "b".repeat(120_000)),
        )
        .unwrap();
    let (code, body, _) = post(&url, &format!("@{}", ok.display()));
    assert_eq!(code, 202, "{}", &body[..body.len().min(500)]);
}

/// `awf run` of a state whose route key is misspelt says which key it meant, with the
/// rename as the hint (new user: only "has no way out"; the did-you-mean was a warning of
/// `awf validate`).
#[test]
fn a_misspelt_route_key_is_named_in_the_run_error() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "typo.yaml",
        "name: t\nstates:\n  initial: a\n  a: {type: step, command: echo hi, on_sucess: b}\n  \
         b: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "typo.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("(\"on_sucess\" is not a key: did you mean 'on_success'?)"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("Hint: rename `on_sucess:` to `on_success:`"),
        "{}",
        r.stderr
    );
}

/// A workflow path that is a dangling link gets a hint about its missing target, not about
/// link loops (breaker); a link loop keeps the loop hint.
#[test]
fn a_dangling_link_is_not_called_a_loop() {
    let sb = Sandbox::new().unwrap();
    std::os::unix::fs::symlink(sb.path().join("gone.yaml"), sb.path().join("w.yaml")).unwrap();
    let r = sb.run(&["validate", "w.yaml"]).unwrap();
    assert_ne!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("a symbolic link whose target does not exist"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("point the link at an existing file"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("loop"), "{}", r.stderr);
    std::os::unix::fs::symlink(sb.path().join("l2.yaml"), sb.path().join("l1.yaml")).unwrap();
    std::os::unix::fs::symlink(sb.path().join("l1.yaml"), sb.path().join("l2.yaml")).unwrap();
    let r = sb.run(&["validate", "l1.yaml"]).unwrap();
    assert!(
        r.stderr.contains("a link loop never resolves"),
        "{}",
        r.stderr
    );
}

/// A template function that does not exist gets the nearest name as the hint, as an
/// expression's does (new user: `trimspace` got none).
#[test]
fn a_misspelt_template_function_gets_a_did_you_mean() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "fn.yaml",
        "name: f\ninputs: [{name: x, type: string, default: a}]\nstates:\n  initial: a\n  a: \
         {type: step, command: \"echo {{trimspace .inputs.x}}\", on_success: done}\n  done: \
         {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["validate", "fn.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("function trimspace not defined\n  Hint: did you mean 'trimSpace'?"),
        "{}",
        r.stderr
    );
    // Nothing near: no hint line under it.
    sb.write(
        "fn2.yaml",
        "name: f\nstates:\n  initial: a\n  a: {type: step, command: \"echo {{zzqqxx 1}}\", \
         on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["validate", "fn2.yaml"]).unwrap();
    assert!(
        r.stderr.contains("function zzqqxx not defined"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("did you mean"), "{}", r.stderr);
}
