//! Fixes from a new user's trial (stop 24), over the real binary: hints that send the user to
//! the right place, `-q` resumes that show this attempt only, and flags that cannot work
//! together refused up front.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

/// A sub-workflow's missing input is the call's `inputs:` to fix, not an `--input` of the run
/// (following that hint failed the same way).
#[test]
fn a_sub_workflows_missing_input_hint_names_the_calls_inputs() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "child.yaml",
        "name: child\ninputs:\n  - name: n\n    type: string\n    required: true\nstates:\n  initial: s\n  s: {type: step, command: 'echo {{.inputs.n}}', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    sb.write(
        "parent.yaml",
        "name: parent\nstates:\n  initial: call\n  call: {type: call_workflow, workflow: child, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "parent.yaml", "-f", "json"]).unwrap();
    assert_ne!(r.code, 0, "{}", r.stderr);
    let v = r.json().unwrap();
    let hints = v["error"]["hints"].as_array().unwrap();
    assert!(
        hints.iter().any(|h| h
            .as_str()
            .unwrap()
            .starts_with("give them in the `inputs:` of step call")),
        "{v}"
    );
    assert!(
        !hints
            .iter()
            .any(|h| h.as_str().unwrap().contains("--input n=")),
        "{v}"
    );
}

/// The resume hint of a failed run with a secret input asks for it again: running the hint
/// as shown must work (it failed with "secret inputs … must be given again").
#[test]
fn the_resume_hint_asks_for_secret_inputs_again() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "sec.yaml",
        "name: sec\ninputs:\n  - name: api_token\n    type: string\n    required: true\nstates:\n  initial: a\n  a: {type: step, command: 'test -f ok', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb
        .run(&["run", "sec.yaml", "--input", "api_token=hunter22"])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let hint = r
        .stderr
        .lines()
        .find(|l| l.contains("continue it with"))
        .unwrap()
        .to_owned();
    assert!(
        hint.ends_with(" --input api_token=<value>`"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("hunter22"), "{}", r.stderr);
    // The hint as shown, with the value filled in, goes on.
    let id = hint
        .split("awf resume ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .to_owned();
    sb.write("ok", "").unwrap();
    let r = sb
        .run(&["resume", &id, "--input", "api_token=hunter22"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// `awf resume -q` of a run that then succeeds prints nothing of the earlier failure (it
/// printed only the replayed `✗` lines, so the resume looked failed).
#[test]
fn a_quiet_resume_shows_this_attempt_only() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "r.yaml",
        "name: r\nstates:\n  initial: a\n  a: {type: step, command: 'test -f ok', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "r.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let id = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    sb.write("ok", "").unwrap();
    let r = sb.run(&["resume", &id, "-q"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains('✗'), "{}", r.stderr);
}

/// Flags that cannot work are refused before anything runs: a mock of an unknown field says
/// which fields exist; `--submit --interactive` (a worker has no terminal).
#[test]
fn unusable_flags_are_refused_with_what_works() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "m.yaml",
        "name: m\nstates:\n  initial: b\n  b: {type: step, command: 'true', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb
        .run(&["run", "m.yaml", "--mock", "states.b.exit_code=3"])
        .unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("a mock sets output, stderr or status, not exit_code"),
        "{}",
        r.stderr
    );
    let r = sb
        .run(&["run", "m.yaml", "--submit", "--interactive"])
        .unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("--interactive"), "{}", r.stderr);
}

/// A bad input value from the project config names where it comes from (the message alone
/// sent a new user looking for an `--input` they never gave); one given with `--input` does
/// not.
#[test]
fn a_bad_input_from_the_project_config_says_so() {
    let sb = Sandbox::new().unwrap();
    sb.write(".awf/config.yaml", "inputs:\n  target: [1, 2]\n")
        .unwrap();
    sb.write(
        "deploy.yaml",
        "name: deploy\ninputs:\n  - name: target\n    type: string\nstates:\n  initial: a\n  a: {type: step, command: 'true', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "deploy.yaml"]).unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "inputs.target comes from the project config (`inputs:` of .awf/config.yaml)"
        ),
        "{}",
        r.stderr
    );
    let r = sb
        .run(&["run", "deploy.yaml", "--input", "target=prod"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
}
