//! Fixes of a new user's trial of workflows (trial 69): `awf resume` waiting for a parked
//! run's usage-limit reset ignored Ctrl-C and SIGTERM; the usage-limit waits of a retried
//! step; hook warnings and `log:` lines; `awf validate` of a `call_workflow`'s literal inputs
//! against the child's rules. Over the real binary with a private data dir.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Child;

use awf_mock_llm::MockLlm;
use awf_tests::Sandbox;
use awf_tests::wait_for;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

/// A sandbox whose `openai_compatible` steps talk to `mock`.
fn openai_sandbox(mock: &MockLlm) -> Sandbox {
    let mut sb = Sandbox::new().unwrap();
    sb.set_env("OPENAI_BASE_URL", &format!("{}/v1", mock.url()));
    sb.set_env("OPENAI_MODEL", "mock-model");
    sb.set_env("OPENAI_API_KEY", "sk-mock-key-123");
    sb
}

/// `awf status <run_id> -f json`.
fn status_json(sb: &Sandbox, run_id: &str) -> Value {
    sb.run(&["status", run_id, "-f", "json"])
        .unwrap()
        .json()
        .unwrap()
}

fn signal(child: &Child, sig: &str) {
    let sent = std::process::Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// Waits (polled) for `child` to exit; its exit code.
fn exit_code(child: &mut Child) -> Option<i32> {
    let mut code = None;
    wait_for("awf to exit", || match child.try_wait().unwrap() {
        Some(status) => {
            code = Some(status.code());
            true
        }
        None => false,
    });
    code.flatten()
}

/// A workflow of one agent step whose provider answers 429 with a reset 90 s away: parked.
const PARKS: &str = "name: park\nstates:\n  initial: ask\n  ask: {type: agent, provider: openai_compatible, prompt: hi, usage_limit: {wait: 1s}, on_success: done}\n  done: {type: terminal}\n";

/// Parks a run on a 90 s usage limit, then `awf resume`s it in the background and sends
/// `sig` once it says it waits for the reset: the resume's exit code, its stderr, the run's
/// status JSON and how many requests the provider got.
fn cancel_the_wait(sig: &str) -> (Option<i32>, String, Value, usize) {
    let mock = MockLlm::start(json!({"default": {"status": 429, "retry_after": 90}}));
    let sb = openai_sandbox(&mock);
    let wf = sb.write("wf.yaml", PARKS).unwrap();
    let r = sb
        .run(&["run", wf.to_str().unwrap(), "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 3, "{}\n{}", r.stdout, r.stderr);
    let run_id = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    assert_eq!(status_json(&sb, &run_id)["status"], json!("waiting"));
    let err_path = sb.path().join("err.txt");
    let mut child = sb
        .cmd(&["resume", &run_id])
        .stdout(std::fs::File::create(sb.path().join("out.txt")).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let stderr = || std::fs::read_to_string(&err_path).unwrap_or_default();
    wait_for("the resume's wait", || {
        stderr().contains("waiting for usage limit, resets in")
    });
    signal(&child, sig);
    let code = exit_code(&mut child);
    (
        code,
        stderr(),
        status_json(&sb, &run_id),
        mock.model_requests().len(),
    )
}

/// Item 1 (HIGH): Ctrl-C during `awf resume`'s wait for a parked run's reset was held until
/// the reset (90 s later), then cancelled the replayed run. It cancels the wait: exit 130,
/// the warning after the wait's line, the run recorded cancelled (no reset time, the cancel's
/// code), the step not asked again.
#[test]
fn sigint_cancels_the_resume_s_wait_for_a_usage_limit_reset() {
    let (code, stderr, status, asked) = cancel_the_wait("-INT");
    assert_eq!(code, Some(130), "{stderr}");
    let wait = stderr.find("waiting for usage limit, resets in").unwrap();
    let warn = stderr
        .find("received SIGINT, cancelling")
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(wait < warn, "{stderr}");
    let summary = stderr
        .find("Workflow cancelled")
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(warn < summary, "{stderr}");
    assert!(stderr.contains("awf resume "), "the resume hint: {stderr}");
    assert!(!stderr.contains("Workflow resumed"), "{stderr}");
    assert_eq!(status["status"], json!("cancelled"), "{status:#}");
    assert_eq!(status["exit_code"], json!(130), "{status:#}");
    assert_eq!(
        status["error"]["code"],
        json!("EXECUTION.RUN.CANCELLED"),
        "{status:#}"
    );
    assert!(status.get("waiting_until").is_none(), "{status:#}");
    assert_eq!(asked, 1, "the step was not asked again");
}

/// The same for SIGTERM: exit 143, recorded with that code.
#[test]
fn sigterm_cancels_the_resume_s_wait_with_143() {
    let (code, stderr, status, asked) = cancel_the_wait("-TERM");
    assert_eq!(code, Some(143), "{stderr}");
    assert!(stderr.contains("received SIGTERM, cancelling"), "{stderr}");
    assert_eq!(status["status"], json!("cancelled"), "{status:#}");
    assert_eq!(status["exit_code"], json!(143), "{status:#}");
    assert_eq!(asked, 1);
}

/// Item 2: README says "at most 3 waits a step", but a step with `retry: {max_attempts: 2}`
/// waited 3 times an attempt (6), then failed with a code the Usage limits section did not
/// name. The waits are counted over the step's attempts: 3 in all (4 requests in the first
/// attempt, 1 in the second), then `EXECUTION.AGENT.RATE_LIMITED` with a hint that the
/// waits ran out.
#[test]
fn a_retried_step_waits_for_usage_limits_three_times_in_all() {
    let mock = MockLlm::start(json!({"default": {"status": 429, "retry_after": 1}}));
    let sb = openai_sandbox(&mock);
    let wf = sb
        .write(
            "wf.yaml",
            "name: w\nstates:\n  initial: ask\n  ask: {type: agent, provider: openai_compatible, prompt: hi, retry: {max_attempts: 2, initial_delay: 10ms}, on_success: done}\n  done: {type: terminal}\n",
        )
        .unwrap();
    let r = sb
        .run(&["run", wf.to_str().unwrap(), "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 3, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(
        r.stderr.matches("waiting for usage limit").count(),
        3,
        "{}",
        r.stderr
    );
    assert_eq!(mock.model_requests().len(), 5, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(doc["states"]["ask"]["attempts"], json!(2), "{doc:#}");
    assert_eq!(
        doc["error"]["code"],
        json!("EXECUTION.AGENT.RATE_LIMITED"),
        "{doc:#}"
    );
    assert!(
        doc["error"]["hints"].as_array().unwrap().iter().any(|h| h
            .as_str()
            .unwrap()
            .contains("waited for usage limits 3 times")),
        "{doc:#}"
    );
}

/// Item 3: a failing hook's warning quoted the template's source (`{{if .inputs.gate}}true…`)
/// instead of the command that ran. It quotes the rendered command.
#[test]
fn a_failing_hook_is_named_by_the_command_that_ran() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "wf.yaml",
            "name: h\ninputs:\n  - {name: gate, type: boolean, default: false}\nhooks:\n  workflow_start:\n    - command: '{{if .inputs.gate}}true{{else}}echo \"gate closed\" >&2; exit 3{{end}}'\nstates:\n  initial: a\n  a: {type: step, command: echo hi, on_success: done}\n  done: {type: terminal}\n",
        )
        .unwrap();
    let r = sb.run(&["run", wf.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 3, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains(
            "workflow_start hook failed: `echo \"gate closed\" >&2; exit 3` exited with code 3: gate closed"
        ),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("{{if"), "{}", r.stderr);
}

/// Item 4: a `log:` hook ending with a step's Output (which keeps its last newline) printed a
/// blank line after it. The line's trailing line breaks are trimmed.
#[test]
fn a_log_hook_ending_with_an_output_prints_no_blank_line() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "wf.yaml",
            "name: l\nstates:\n  initial: build\n  build: {type: step, command: echo v1.2, on_success: deploy}\n  deploy:\n    type: step\n    command: 'true'\n    hooks:\n      pre: [{log: \"deploying {{.states.build.Output}}\"}]\n    on_success: done\n  done: {type: terminal}\n",
        )
        .unwrap();
    let r = sb.run(&["run", wf.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let at = r
        .stderr
        .find("deploying v1.2")
        .unwrap_or_else(|| panic!("{}", r.stderr));
    let rest = &r.stderr[at..];
    let line_end = rest.find('\n').unwrap();
    assert_eq!(&rest[..line_end], "deploying v1.2", "{}", r.stderr);
    // The next line is not blank.
    let next = rest[line_end + 1..].lines().next().unwrap_or_default();
    assert!(
        !next.trim().is_empty(),
        "a blank line follows: {}",
        r.stderr
    );
    // The JSON log line says it without the newline too.
    let r = sb
        .run(&["run", wf.to_str().unwrap(), "--log-format", "json"])
        .unwrap();
    assert!(r.stderr.contains("\"deploying v1.2\""), "{}", r.stderr);
}

/// Item 5: `awf validate` did not check a `call_workflow`'s literal inputs against the
/// child's rules (`compress: zip` for `enum: [gz, xz, none]` validated clean; the run then
/// failed). Each literal value that breaks the child input's enum, pattern, type, min or max
/// is warned about at `states.<step>.inputs.<key>`; a templated value is left to the run.
#[test]
fn validate_checks_a_call_s_literal_inputs_against_the_child_s_rules() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "child.yaml",
        "name: child\ninputs:\n  - {name: compress, type: string, validation: {enum: [gz, xz, none]}}\n  - {name: level, type: integer, validation: {min: 1, max: 9}}\n  - {name: tag, type: string, validation: {pattern: '^v[0-9]+$'}}\n  - {name: count, type: integer}\n  - {name: ok, type: string, validation: {enum: [a, b]}}\nstates:\n  initial: a\n  a: {type: step, command: 'true', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let parent = sb
        .write(
            "parent.yaml",
            "name: parent\ninputs:\n  - {name: c, default: zip}\nstates:\n  initial: call\n  call:\n    type: call_workflow\n    workflow: child.yaml\n    inputs: {compress: zip, level: '12', tag: latest, count: many, ok: '{{.inputs.c}}'}\n    on_success: done\n  done: {type: terminal}\n",
        )
        .unwrap();
    let r = sb
        .run(&["validate", parent.to_str().unwrap(), "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "warnings only: {}\n{}", r.stdout, r.stderr);
    let doc = r.json().unwrap();
    let found: Vec<(String, String)> = doc["diagnostics"]
        .as_array()
        .unwrap_or_else(|| panic!("{doc:#}"))
        .iter()
        .filter(|w| {
            w["code"] == json!("WORKFLOW.VALIDATION.INVALID_STATE")
                && w["severity"] == json!("warning")
                && w["run_fails"] == json!(true)
        })
        .map(|w| {
            (
                w["path"].as_str().unwrap_or_default().to_owned(),
                w["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let paths: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        vec![
            "states.call.inputs.compress",
            "states.call.inputs.level",
            "states.call.inputs.tag",
            "states.call.inputs.count",
        ],
        "{doc:#}"
    );
    assert!(
        found[0]
            .1
            .contains("value \"zip\" not in allowed values [gz xz none]"),
        "{found:#?}"
    );
    assert!(found[1].1.contains("exceeds maximum 9"), "{found:#?}");
    assert!(found[2].1.contains("does not match pattern"), "{found:#?}");
}
