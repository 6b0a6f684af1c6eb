//! A new user's trial (README only), over the real binary: `.error` at a failure terminal
//! reached through a compensation step is the failure routed there (and `awf validate` warns
//! where no failure can lead); a mocked failure's resume hint says it was mocked and how to
//! resume without it (`awf resume --no-mocks`, `--mock`); a sub-workflow call mocked with
//! non-JSON output says why its `Outputs` are missing, and a mock of `outputs.X` names the
//! field as typed; a rejected gate's hint does not ask for the `on_failure` the step has;
//! `awf run bro` suggests `broken`; `mcp-serve`'s config suggests `root_dir` for `root` and
//! its hint lists the keys; a retry line says why the attempt failed; `[Step n/N]` counts only
//! the states that can pause.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::Write;
use std::process::Stdio;

use awf_tests::Sandbox;
use awf_tests::http_serve;
use awf_tests::run_id_in;
use pretty_assertions::assert_eq;
use serde_json::json;

const GATE: &str = r#"name: gate
inputs: [ { name: version, type: string, default: "1.0" } ]
states:
  initial: deploy
  deploy: { type: step, command: "echo boom >&2; exit 3", on_success: done, on_failure: notify }
  notify: { type: step, command: "echo not deployed", on_success: stopped }
  stopped: { type: terminal, status: failure, message: "not deployed: {{.error.Message}} (from {{.error.State}}, exit {{.error.ExitCode}})" }
  done: { type: terminal }
"#;

/// Finding 1: `deploy` fails, `notify` (on_failure) succeeds and goes on to the failure
/// terminal: its message reads `deploy`'s failure, with no warning.
#[test]
fn a_terminal_after_a_compensation_step_reads_the_routed_failure() {
    let sb = Sandbox::new().unwrap();
    sb.write("gate.yaml", GATE).unwrap();
    let r = sb.run(&["run", "gate.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert_eq!(r.stderr, "", "{}", r.stderr);
    let j = r.json().unwrap();
    assert_eq!(
        j["error"]["message"],
        json!("not deployed: step deploy: boom (from deploy, exit 3)")
    );
    // Nothing to warn about in `awf validate`: a failure leads there.
    let v = sb.run(&["validate", "gate.yaml"]).unwrap();
    assert_eq!(v.code, 0, "{}", v.stderr);
    assert_eq!(v.stderr, "");
}

/// Finding 1: the compensation step fails once, and the run is resumed there: the terminal
/// still reads `deploy`'s failure, from the earlier attempt's record.
#[test]
fn a_resumed_compensation_keeps_the_routed_failure() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "gate.yaml",
        &GATE.replace("command: \"echo not deployed\"", "command: \"test -f ok\""),
    )
    .unwrap();
    let r = awf_tests::fail_then_resume(&sb, "gate.yaml", &sb.path().join("ok"), &["-f", "json"])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert_eq!(
        r.json().unwrap()["error"]["message"],
        json!("not deployed: step deploy: boom (from deploy, exit 3)")
    );
}

/// Finding 1: a terminal that reads `.error` but that only successes reach: `awf validate`
/// warns, and the run keeps the message as written with its warning.
#[test]
fn validate_warns_at_a_terminal_no_failure_reaches() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "q.yaml",
        "name: q\nstates:\n  initial: a\n  a: { type: step, command: 'true', on_success: quiet }\n  quiet: { type: terminal, status: failure, message: \"stopped: {{.error.Message}}\" }\n",
    )
    .unwrap();
    let v = sb.run(&["validate", "q.yaml"]).unwrap();
    assert_eq!(v.code, 0, "{}", v.stderr);
    let file = sb.path().join("q.yaml").display().to_string();
    assert_eq!(
        v.stderr,
        format!(
            "{file}:5:45: warning [WORKFLOW.VALIDATION.INVALID_REFERENCE] states.quiet.message: terminal quiet: its message reads .error, but no route to it follows a failure: .error will be undefined there and the message shown as written\n  Hint: `.error` at a terminal is the run's most recent failure routed by on_failure: route a failure here (`on_failure: <this terminal>`, or to a state that leads here), or leave .error out of this message\n"
        )
    );
    let r = sb.run(&["run", "q.yaml"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "WARN terminal quiet: its message is shown as written: undefined variable: error"
        ),
        "{}",
        r.stderr
    );
}

const RELEASE: &str = "name: release\nstates:\n  initial: build\n  build: { type: step, command: 'echo built', on_success: announce }\n  announce: { type: step, command: 'touch announced', on_success: done }\n  done: { type: terminal }\n";

/// Finding 2: a failure made by `--mock`: the hint says so and gives the resume without
/// it (`--no-mocks`), which then runs the step for real; a plain resume fails the same way.
#[test]
fn a_mocked_failure_hints_a_resume_without_the_mock() {
    let sb = Sandbox::new().unwrap();
    sb.write("release.yaml", RELEASE).unwrap();
    let r = sb
        .run(&[
            "run",
            "release.yaml",
            "--mock",
            "states.announce.status=failed",
            "--mock",
            "states.build.output=built",
        ])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let id = run_id_in(&r.stderr).unwrap();
    let hint = format!(
        "  Hint: the failure of announce was mocked (`--mock states.announce.status=failed`), and a resume applies the run's mocks again: continue it without that mock with `awf resume {id} --no-mocks --mock states.build.output=built`\n"
    );
    assert!(r.stderr.ends_with(&hint), "{}", r.stderr);
    // As stored: the plain resume fails the same way.
    let again = sb.run(&["resume", &id]).unwrap();
    assert_eq!(again.code, 3, "{}", again.stderr);
    assert!(!sb.path().join("announced").exists());
    let resumed = sb.run(&["resume", &id, "--no-mocks"]).unwrap();
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert!(sb.path().join("announced").exists());
}

/// Finding 2: `awf resume --mock` replaces the stored mock of that state (the step is
/// answered by the new mock, not run); a mock of a state the workflow lacks is refused.
#[test]
fn a_resume_mock_replaces_the_stored_one() {
    let sb = Sandbox::new().unwrap();
    sb.write("release.yaml", RELEASE).unwrap();
    let r = sb
        .run(&[
            "run",
            "release.yaml",
            "--mock",
            "states.announce.status=failed",
        ])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let id = run_id_in(&r.stderr).unwrap();
    assert!(
        r.stderr.ends_with(&format!(
            "continue it without that mock with `awf resume {id} --no-mocks`\n"
        )),
        "{}",
        r.stderr
    );
    let bad = sb
        .run(&["resume", &id, "--mock", "states.anounce.output=x"])
        .unwrap();
    assert_eq!(bad.code, 1, "{}", bad.stderr);
    assert_eq!(
        bad.stderr,
        "[USER.INPUT.VALIDATION_FAILED] --mock names a state that workflow release does not have: anounce\n  Hint: did you mean 'announce'?\n"
    );
    let resumed = sb
        .run(&[
            "resume",
            &id,
            "--mock",
            "states.announce.output=said",
            "-f",
            "json",
        ])
        .unwrap();
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    let j = resumed.json().unwrap();
    assert_eq!(j["states"]["announce"]["output"], json!("said"));
    assert!(!sb.path().join("announced").exists());
}

const CHILD: &str = "name: pack\nstates:\n  initial: a\n  a: { type: step, command: 'echo x', on_success: done }\n  done: { type: terminal }\n";

const CI: &str = "name: ci\nstates:\n  initial: check\n  check: { type: step, command: 'echo ok', on_success: package }\n  package: { type: call_workflow, workflow: pack.yaml, on_success: report }\n  report: { type: step, command: 'echo {{.states.package.Outputs.tgz}}', on_success: done }\n  done: { type: terminal }\n";

/// Finding 3: `Outputs` read from a call mocked with text: the hint gives the JSON form;
/// with it the step runs. A mock of `outputs.tgz` is refused naming the field as typed.
#[test]
fn a_call_mocked_with_text_hints_the_json_output_form() {
    let sb = Sandbox::new().unwrap();
    sb.write("pack.yaml", CHILD).unwrap();
    sb.write("ci.yaml", CI).unwrap();
    let r = sb
        .run(&[
            "run",
            "ci.yaml",
            "--step",
            "report",
            "--mock",
            "states.check.output=x",
            "--mock",
            "states.package.output=x",
        ])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "  Hint: package's result is mocked with an output that is not a JSON object, so it has no Outputs: give them as one, --mock 'states.package.output={\"tgz\":\"…\"}'\n"
        ),
        "{}",
        r.stderr
    );
    let ok = sb
        .run(&[
            "run",
            "ci.yaml",
            "--step",
            "report",
            "--mock",
            "states.package.output={\"tgz\":\"x.tgz\"}",
        ])
        .unwrap();
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    assert_eq!(ok.stdout, "x.tgz\n");
    let typed = sb
        .run(&["run", "ci.yaml", "--mock", "states.package.outputs.tgz=1"])
        .unwrap();
    assert_eq!(typed.code, 1, "{}", typed.stderr);
    assert_eq!(
        typed.stderr,
        "[USER.INPUT.INVALID_FORMAT] invalid mock 'states.package.outputs.tgz=1': a mock sets output, stderr or status, not outputs.tgz\n  Hint: a mocked sub-workflow call's Outputs come from its output as a JSON object: --mock 'states.package.output={\"tgz\":\"1\"}'\n"
    );
}

/// Finding 4: a gate rejected (no terminal to ask) on a step that has `on_failure`: the
/// hint does not ask for an `on_failure`; without one it still does.
#[test]
fn a_rejected_gate_with_on_failure_is_not_told_to_add_one() {
    let sb = Sandbox::new().unwrap();
    let wf = |routed: &str| {
        format!(
            "name: ship\nstates:\n  initial: ship\n  ship: {{ type: step, command: 'echo shipped', approval: 'Ship?', on_success: done{routed} }}\n  done: {{ type: terminal }}\n  stopped: {{ type: terminal, status: failure }}\n"
        )
    };
    sb.write("routed.yaml", &wf(", on_failure: stopped"))
        .unwrap();
    let r = sb.run(&["run", "routed.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let hints = r.json().unwrap()["error"]["hints"].clone();
    assert_eq!(
        hints[0],
        json!("approve the gate, or pass --yes to approve every gate"),
        "{hints}"
    );
    sb.write("bare.yaml", &wf("")).unwrap();
    let r = sb.run(&["run", "bare.yaml", "-f", "json"]).unwrap();
    let hints = r.json().unwrap()["error"]["hints"].clone();
    assert_eq!(
        hints[0],
        json!(
            "approve the gate, pass --yes to approve every gate, or route the rejection with on_failure"
        ),
        "{hints}"
    );
}

const OK: &str = "name: ok\nstates:\n  initial: a\n  a: { type: step, command: 'true', on_success: done }\n  done: { type: terminal }\n";

/// Finding 5: `awf run bro` with `broken` and `build`: did you mean `broken`.
#[test]
fn a_workflow_name_cut_short_is_suggested() {
    let sb = http_serve::sandbox_with(&[
        ("broken", &OK.replace("name: ok", "name: broken")),
        ("build", &OK.replace("name: ok", "name: build")),
    ]);
    let r = sb.run(&["run", "bro"]).unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(
        r.stderr,
        "[USER.FACADE.WORKFLOW_NOT_FOUND] workflow not found: bro\n  Hint: did you mean 'broken'? (`awf list` shows every workflow)\n"
    );
    let r = sb.run(&["run", "zz"]).unwrap();
    assert_eq!(
        r.stderr,
        "[USER.FACADE.WORKFLOW_NOT_FOUND] workflow not found: zz\n  Hint: run `awf list` to see the available workflows\n"
    );
}

/// Finding 6: `{"root": …}` is meant as `root_dir`; a bad value's hint lists the keys and
/// where they are documented.
#[test]
fn mcp_serve_config_suggests_root_dir_and_lists_its_keys() {
    let sb = Sandbox::new().unwrap();
    sb.write("bad.json", r#"{"root":"/tmp"}"#).unwrap();
    let r = sb.run(&["mcp-serve", "--config", "bad.json"]).unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "  Hint: `root`: did you mean `root_dir`?; known keys: intercept_builtins, plugin_tools, root_dir, run_id, step, audit_path, traceparent, fs_delegate, limits\n"
        ),
        "{}",
        r.stderr
    );
    sb.write("val.json", r#"{"root_dir": 5}"#).unwrap();
    let r = sb.run(&["mcp-serve", "--config", "val.json"]).unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.ends_with(
            "  Hint: Pass `--config <file>` with a JSON object such as {\"intercept_builtins\": true, \"root_dir\": \"/abs/dir\"}; its keys, all optional: intercept_builtins, plugin_tools, root_dir, run_id, step, audit_path, traceparent, fs_delegate, limits (README, \"awf mcp-serve: awf's tools over MCP\", says what each takes).\n"
        ),
        "{}",
        r.stderr
    );
}

/// Finding 7: the retry line says why the attempt failed.
#[test]
fn a_retry_line_says_why_the_attempt_failed() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "r.yaml",
        "name: r\nstates:\n  initial: test\n  test:\n    type: step\n    command: 'exit 4'\n    retry: { max_attempts: 2, initial_delay: 10ms }\n    on_success: done\n  done: { type: terminal }\n",
    )
    .unwrap();
    let r = sb.run(&["run", "r.yaml"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("  ↻ test: exit 4, retrying (attempt 2) in 10ms\n"),
        "{}",
        r.stderr
    );
}

/// Finding 9: `[Step n/N]` counts the states that can pause: not a parallel block's
/// branches nor a loop's body.
#[test]
fn the_step_total_counts_only_states_that_can_pause() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "p.yaml",
            "name: p\nstates:\n  initial: a\n  a: { type: step, command: 'true', on_success: par }\n  par: { type: parallel, parallel: [b1, b2], on_success: each }\n  b1: { type: step, command: 'true' }\n  b2: { type: step, command: 'true' }\n  each: { type: for_each, items: '[\"x\"]', body: [item], on_complete: last }\n  item: { type: step, command: 'true' }\n  last: { type: step, command: 'true', on_success: done }\n  done: { type: terminal }\n",
        )
        .unwrap();
    let mut child = sb
        .cmd(&["run", wf.to_str().unwrap(), "--interactive"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"c\nc\nc\nc\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let steps: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("⏸ "))
        .collect();
    assert_eq!(
        steps,
        [
            "[Step 1/4] a",
            "[Step 2/4] par",
            "[Step 3/4] each",
            "[Step 4/4] last"
        ]
    );
}
