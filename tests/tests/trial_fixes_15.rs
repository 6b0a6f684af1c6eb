//! Fixes from stop 31's trials (a new user's and a breaker's), over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

const TWO_STEPS: &str = "name: w\nstates:\n  initial: a\n  a: {type: step, command: echo hello-a, on_success: b}\n  b: {type: step, command: 'echo hello-b; echo warn-b >&2', on_success: done}\n  done: {type: terminal}\n";

/// `awf run --step S` shows the step's output once: in the report's blocks, or live with
/// `-o streaming` (then the blocks are left out); `-o buffered` adds no second copy.
#[test]
fn a_single_step_shows_its_output_once_in_every_output_mode() {
    let sb = Sandbox::new().unwrap();
    sb.write("w.yaml", TWO_STEPS).unwrap();
    for mode in ["silent", "buffered"] {
        let r = sb
            .run(&["run", "w.yaml", "--step", "b", "-o", mode])
            .unwrap();
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert_eq!(
            r.stdout.matches("hello-b").count(),
            1,
            "{mode}: {}",
            r.stdout
        );
        // Only the step's stdout on stdout; the report's lines on stderr (trial_fixes_20).
        assert_eq!(r.stdout, "hello-b\n", "{mode}");
        assert!(
            // No stdout header when stdout is no terminal (trial_fixes_52).
            r.stderr
                .contains("--- [b] stderr ---\nwarn-b\nStep 'b' completed successfully in "),
            "{mode}: {}",
            r.stderr
        );
        assert_eq!(
            r.stderr.matches("warn-b").count(),
            1,
            "{mode}: {}",
            r.stderr
        );
    }
    let r = sb
        .run(&["run", "w.yaml", "--step", "b", "-o", "streaming"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout.matches("hello-b").count(), 1, "{}", r.stdout);
    assert!(!r.stdout.contains("--- [b]"), "{}", r.stdout);
    assert!(
        r.stderr.contains("Step 'b' completed successfully in "),
        "{}",
        r.stderr
    );
    assert!(!r.stdout.contains("hello-a"), "{}", r.stdout);
}

/// What `awf run` could only fail on is an error of `awf validate` (breaker: each validated
/// clean, then the run failed): a condition that is a bare number or string, a
/// `max_iterations` that is no number, template or arithmetic, and a `call_workflow` whose
/// `workflow:` is a template (never interpolated, as in AWF (Go)). `awf run` refuses the file
/// the same way before any step runs.
#[test]
fn conditions_counts_and_call_targets_that_can_only_fail_are_validation_errors() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "v.yaml",
        "name: v\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'touch ran'\n    transitions:\n      - {when: 5, goto: c}\n      - {when: \"'x'\", goto: c}\n    on_success: l\n  l:\n    type: for_each\n    items: '[\"a\"]'\n    max_iterations: abc\n    body: [b]\n    on_complete: c\n  b: {type: step, command: 'true', on_success: l}\n  c: {type: call_workflow, workflow: '{{.inputs.w}}', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["validate", "v.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);
    for want in [
        "states.a.transitions.0.when: expression `5` is a number, not a condition",
        "states.a.transitions.1.when: expression `'x'` is a string, not a condition",
        "states.l.max_iterations: max_iterations \"abc\" is not a whole number",
        "states.c.workflow: `workflow: {{.inputs.w}}` is not a template",
    ] {
        assert!(r.stderr.contains(want), "{want}\n{}", r.stderr);
    }
    let r = sb.run(&["run", "v.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(!sb.path().join("ran").exists());
}

/// A workflow file that starts with a UTF-8 byte order mark (Windows editors write one)
/// loads and runs (breaker: refused with `"\u{feff}name" is not a key`).
#[test]
fn a_workflow_with_a_byte_order_mark_runs() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "bom.yaml",
        "\u{feff}name: bom\nstates:\n  initial: a\n  a: {type: step, command: echo bom-ok, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "bom.yaml", "-o", "streaming"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("bom-ok"), "{}", r.stdout);
    let r = sb.run(&["validate", "bom.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// A reader that goes away early (`awf run -f json | head -c 10`) is not a failure in JSON,
/// as in text: the run's own exit code, no error document (breaker: exit 4 and a JSON
/// error on stderr in JSON, exit 0 in text).
#[test]
fn a_json_reader_that_goes_away_leaves_the_exit_code_alone() {
    use std::io::Read;
    let sb = Sandbox::new().unwrap();
    sb.write(
        "big.yaml",
        "name: big\nstates:\n  initial: a\n  a: {type: step, command: 'head -c 300000 /dev/zero | tr \"\\0\" x', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let mut child = sb
        .cmd(&["run", "big.yaml", "-f", "json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 10];
    out.read_exact(&mut first).unwrap();
    drop(out);
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(!err.contains("cannot write the JSON output"), "{err}");
}

/// A stream longer than what a step keeps (`capture.max_size`, 64 MiB by default) is said,
/// naming the field that holds only its first bytes (breaker: a 70 MB output was cut with no
/// word and later steps read the cut value).
#[test]
fn a_step_whose_output_is_cut_says_so() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "cut.yaml",
        "name: cut\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'head -c 5000 /dev/zero | tr \"\\0\" x; echo short >&2'\n    capture: {max_size: 2KB}\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "cut.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = r.json().unwrap();
    assert_eq!(v["states"]["a"]["output"].as_str().unwrap().len(), 2048);
    let r = sb.run(&["run", "cut.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("step a: stdout was longer than the 2 KiB kept: `.states.a.Output` holds at most its first 2 KiB"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("stderr was longer"), "{}", r.stderr);
}

/// `awf validate` says every agent option a provider would refuse, each once (new user: only
/// the first bad `acp` option was said, and a `model` claude does not take validated clean
/// and failed the run). It exits with the first error's category, as AWF (Go) does: 1 for
/// `USER.AGENT.INVALID_OPTION` (README's exit codes say so).
#[test]
fn every_refused_agent_option_is_a_validation_error() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "a.yaml",
        "name: a\nstates:\n  initial: x\n  x:\n    type: agent\n    provider: acp\n    prompt: hi\n    options: { agent: claud, permissions: read_onyl }\n    on_success: y\n  y:\n    type: agent\n    provider: claude\n    prompt: hi\n    options: { model: gpt-4o-mini, permission_mode: yolo, max_turns: '{{.inputs.n}}' }\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["validate", "a.yaml"]).unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    for want in [
        "states.x.options.agent: acp option agent: unknown ACP agent preset \"claud\"",
        "states.x.options.permissions: acp option permissions: unknown policy \"read_onyl\"",
        "states.y.options.model: claude option `model` is invalid",
        "states.y.options.permission_mode: claude option `permission_mode` is invalid",
        "is invalid: 4 errors",
    ] {
        assert!(r.stderr.contains(want), "{want}\n{}", r.stderr);
    }
    assert!(!r.stderr.contains("max_turns"), "{}", r.stderr);
}

/// A retried step's time is all its attempts and the waits between them (breaker: `✗ a
/// (4ms)` and `duration_ms: 12` after 2.4 s of backoff over 5 attempts).
#[test]
fn a_retried_steps_duration_spans_every_attempt() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "r.yaml",
        "name: r\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'exit 1'\n    retry: {max_attempts: 3, initial_delay: 300ms, backoff: constant}\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "r.yaml", "-f", "json"]).unwrap();
    assert_ne!(r.code, 0, "{}", r.stderr);
    let v = r.json().unwrap();
    assert_eq!(v["states"]["a"]["attempts"], 3, "{v}");
    let ms = v["states"]["a"]["duration_ms"].as_u64().unwrap();
    assert!(ms >= 600, "{ms} ms: {v}");
}

/// A terminal message that reads a state the run never reached is shown as written (as in
/// AWF (Go)) with a warning that says why (breaker: the template text came out as the run's
/// message with no word).
#[test]
fn a_terminal_message_that_cannot_render_is_warned_about() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "m.yaml",
        "name: m\nstates:\n  initial: a\n  a: { type: step, command: 'true', transitions: [{when: \"true\", goto: done}], on_success: b }\n  b: { type: step, command: 'echo B', on_success: done }\n  done: { type: terminal, message: \"msg=[{{.states.b.Output}}] x\" }\n",
    )
    .unwrap();
    let r = sb.run(&["run", "m.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "WARN terminal done: its message is shown as written: undefined variable: states.b"
        ),
        "{}",
        r.stderr
    );
}

/// Second breaker round: a constant condition that is no boolean (`1 + 2`), a quoted
/// `max_iterations` out of range or a broken template there, and a namespace given a piped
/// value are validation errors; a condition reading the run (`inputs.flag`) is not judged
/// on an empty scope; a sub-workflow whose file name holds `}}{{` is found; findings show
/// bidirectional controls escaped.
#[test]
fn second_round_validation_findings() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "x}}{{.yaml",
        "name: odd\nstates:\n  initial: a\n  a: {type: step, command: 'true', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    sb.write(
        "v.yaml",
        "name: v\ninputs:\n  - {name: flag, type: boolean, default: true}\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'echo {{ .inputs.flag | env }}'\n    transitions:\n      - {when: '1 + 2', goto: l}\n      - {when: 'inputs.flag', goto: l}\n    on_success: l\n  l:\n    type: for_each\n    items: '[\"a\"]'\n    max_iterations: '0'\n    body: [b]\n    on_complete: m\n  b: {type: step, command: 'true', on_success: l}\n  m:\n    type: while\n    while: 'false'\n    max_iterations: '{{.inputs.n'\n    body: [c]\n    on_complete: odd\n  c: {type: step, command: 'true', on_success: m}\n  odd: {type: call_workflow, workflow: 'x}}{{', on_success: \"do\u{202e}ne\"}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["validate", "v.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);
    for want in [
        "states.a.transitions.0.when: expression `1 + 2` is a number, not a condition",
        "states.l.max_iterations: max_iterations must be between 1 and 10000, got 0",
        "states.m.max_iterations: template does not parse",
        "states.a.command: template does not parse: `env` is a namespace and takes no arguments",
        "do\\u{202e}ne",
    ] {
        assert!(r.stderr.contains(want), "{want}\n{}", r.stderr);
    }
    assert!(!r.stderr.contains("transitions.1"), "{}", r.stderr);
    assert!(
        !r.stderr.contains("x}}{{` is not a template"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains('\u{202e}'), "{}", r.stderr);
}

/// Breaker (stop 31, kill -9 trials): a run killed after its start was recorded but before
/// its first step was (`current_state` empty) resumes from the initial state; it was refused
/// as "state  no longer exists in workflow".
#[test]
fn a_run_killed_before_its_first_step_was_recorded_resumes_from_the_start() {
    let sb = Sandbox::new().unwrap();
    sb.write("w.yaml", TWO_STEPS).unwrap();
    let r = sb.run(&["run", "w.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let states = awf_tests::data(&sb).join("states");
    let file = std::fs::read_dir(&states)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .unwrap();
    let id = file.file_stem().unwrap().to_str().unwrap().to_owned();
    // The record as a kill right after the run's start leaves it.
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    v["status"] = "running".into();
    v["current_state"] = "".into();
    v["states"] = serde_json::json!({});
    v["owner_pid"] = 999_999_999u64.into();
    std::fs::write(&file, serde_json::to_vec(&v).unwrap()).unwrap();
    let r = sb.run(&["resume", &id]).unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(!r.stderr.contains("no longer exists"), "{}", r.stderr);
    let r = sb.run(&["status", &id, "-f", "json"]).unwrap();
    let s: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(s["status"], "completed", "{}", r.stdout);
    for step in ["a", "b"] {
        assert_eq!(s["states"][step]["status"], "completed", "{}", r.stdout);
    }
}
