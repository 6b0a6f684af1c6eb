//! Trial findings fixed in round 26, over the real binary: a run started over HTTP with
//! `ask_missing_inputs` (a bad given input is refused up front; a run that never starts
//! says why, on GET and at the end of its event stream; a cancel while it asks is
//! `cancelled`), HTTP-phrased hints of `resume`, the hint of a run stopped by its budget,
//! `awf resume` of a completed sub-workflow run, and agent errors that are never retried.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use awf_tests::http_serve::Server;
use awf_tests::http_serve::add_workflows;
use awf_tests::http_serve::curl;
use awf_tests::http_serve::execution;
use awf_tests::http_serve::json_of;
use awf_tests::http_serve::post;
use awf_tests::http_serve::start;
use awf_tests::http_serve::start_run;
use awf_tests::http_serve::wait_status;
use serde_json::Value;
use serde_json::json;

/// An integer input `i` and a required string `s`.
const ASK: &str = "name: ask
inputs:
  - name: i
    type: integer
  - name: s
    type: string
    required: true
states:
  initial: a
  a:
    type: step
    command: 'echo {{.inputs.s}} {{.inputs.i}}'
    on_success: done
  done:
    type: terminal
";

/// The last frame of run `id`'s event stream (followed to its end), which must have no
/// `id:` (it is not in the log), and its data.
fn closing_frame(s: &Server, id: &str) -> (String, Value) {
    let (code, text, _) = curl(&["-N", &format!("{}/api/executions/{id}/events", s.base)]);
    assert_eq!(code, 200, "{text}");
    let last = text
        .split("\n\n")
        .filter(|b| b.contains("event: "))
        .last()
        .unwrap()
        .to_owned();
    assert!(!last.contains("id: "), "not an event of the log: {last}");
    let name = last
        .lines()
        .find_map(|l| l.strip_prefix("event: "))
        .unwrap()
        .to_owned();
    let data = json_of(last.lines().find_map(|l| l.strip_prefix("data: ")).unwrap());
    (name, data)
}

/// The pending requests of run `id`, once there is one.
fn pending(s: &Server, id: &str) -> Value {
    let mut p = Value::Null;
    awf_tests::wait_for("a pending request", || {
        p = execution(s, id)["pending"].clone();
        p.as_array().is_some_and(|a| !a.is_empty())
    });
    p
}

/// Defect 1a: an invalid given input is the same 422 with `ask_missing_inputs` as without
/// (it was accepted, 202, and failed only once the missing `s` was answered).
#[test]
fn ask_missing_inputs_refuses_an_invalid_given_input_up_front() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("ask", ASK)]);
    let s = start(&sb, &[]);
    let url = format!("{}/api/workflows/env/ask/run", s.base);
    let (code, body, _) = post(&url, r#"{"ask_missing_inputs":true,"inputs":{"i":"x"}}"#);
    assert_eq!(code, 422, "{body}");
    let v = json_of(&body);
    assert_eq!(v["code"], "USER.INPUT.VALIDATION_FAILED", "{body}");
    assert!(body.contains("inputs.i"), "{body}");
    assert!(!body.contains("inputs.s"), "{body}");
    // Without asking: 422 for the same input.
    let (code, body, _) = post(&url, r#"{"inputs":{"i":"x","s":"a"}}"#);
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("inputs.i"), "{body}");
    // A valid given input: only the missing one is asked.
    let id = start_run(
        &s,
        "ask",
        r#"{"ask_missing_inputs":true,"inputs":{"i":"7"}}"#,
    );
    let p = pending(&s, &id);
    assert_eq!(p.as_array().unwrap().len(), 1, "{p}");
    assert_eq!(p[0]["input"], "s", "{p}");
}

/// Defect 1b: a run whose missing input is answered with `end_of_input` never starts: GET
/// says why in `error`, and its event stream ends with a `not_started` frame saying so (it
/// ended after `interaction_resolved` with no closing frame, and `error` was null).
#[test]
fn a_run_that_never_starts_says_why_on_get_and_on_its_stream() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("ask", ASK)]);
    let s = start(&sb, &[]);
    let id = start_run(&s, "ask", r#"{"ask_missing_inputs":true}"#);
    let p = pending(&s, &id);
    let (code, body, _) = post(
        &format!("{}/api/executions/{id}/respond", s.base),
        &json!({"request_id": p[0]["request_id"], "end_of_input": true}).to_string(),
    );
    assert_eq!(code, 204, "{body}");
    let done = wait_status(&s, &id, "failed");
    assert_eq!(
        done["error"]["code"], "USER.INPUT.VALIDATION_FAILED",
        "{done}"
    );
    assert!(
        done["error"]["message"]
            .as_str()
            .unwrap()
            .contains("inputs.s: required but not provided"),
        "{done}"
    );
    let (last, data) = closing_frame(&s, &id);
    assert_eq!(last, "not_started", "{data}");
    assert_eq!(data["run_id"], id.as_str());
    assert_eq!(data["status"], "failed");
    assert_eq!(data["not_started"], true);
    assert_eq!(data["error"]["code"], "USER.INPUT.VALIDATION_FAILED");
    // The documented event name.
    let (code, doc, _) = curl(&[&format!("{}/openapi.json", s.base)]);
    assert_eq!(code, 200);
    assert!(doc.contains("not_started"), "not documented");
}

/// Defect 1c: DELETE while the run asks for its missing input makes it `cancelled` (it was
/// `failed`), with `EXECUTION.RUN.CANCELLED` as its error.
#[test]
fn cancelling_a_run_that_asks_for_an_input_makes_it_cancelled() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("ask", ASK)]);
    let s = start(&sb, &[]);
    let id = start_run(&s, "ask", r#"{"ask_missing_inputs":true}"#);
    pending(&s, &id);
    let (code, body, _) = curl(&["-X", "DELETE", &format!("{}/api/executions/{id}", s.base)]);
    assert_eq!(code, 204, "{body}");
    let done = wait_status(&s, &id, "cancelled");
    assert_eq!(done["error"]["code"], "EXECUTION.RUN.CANCELLED", "{done}");
    let (last, data) = closing_frame(&s, &id);
    assert_eq!(last, "not_started", "{data}");
    assert_eq!(data["status"], "cancelled");
    // Resuming it (it said "workflow execution not found" of a run GET shows; round 71:
    // recorded while it asked, it resumes from its first state once the input it never got
    // is given): without that input, the 422 naming it; with it, the run.
    let url = format!("{}/api/executions/{id}/resume", s.base);
    let (code, body, _) = post(&url, "{}");
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("inputs.s"), "{body}");
    let (code, body, _) = post(&url, r#"{"input_overrides":{"s":"later","i":"4"}}"#);
    assert_eq!(code, 200, "{body}");
    let done = wait_status(&s, &id, "completed");
    assert_eq!(done["exit_code"], 0, "{done}");
}

/// Fails in `go`.
const FAILS: &str = "name: fails
states:
  initial: go
  go:
    type: step
    command: exit 3
    on_success: done
  done:
    type: terminal
";

/// Defect 2: resuming over HTTP a run whose state the workflow no longer has, or whose
/// workflow is gone, gets hints for HTTP (`from_step`, `GET /api/workflows`), not the
/// command line's (`--from <state>`, `awf list`).
#[test]
fn resume_hints_over_http_name_the_body_and_the_routes() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("fails", FAILS)]);
    let s = start(&sb, &[]);
    let id = start_run(&s, "fails", "{}");
    wait_status(&s, &id, "failed");
    // The state the run stopped in is renamed.
    sb.write("wf/fails.yaml", &FAILS.replace("go", "went"))
        .unwrap();
    let resume = format!("{}/api/executions/{id}/resume", s.base);
    let (code, body, _) = post(&resume, "{}");
    assert_eq!(code, 422, "{body}");
    let v = json_of(&body);
    let hints = v["hints"].to_string();
    assert!(hints.contains(r#"{\"from_step\": \"<state>\"}"#), "{body}");
    assert!(!hints.contains("--from"), "{body}");
    // The workflow is gone.
    std::fs::remove_file(sb.path().join("wf/fails.yaml")).unwrap();
    let (code, body, _) = post(&resume, "{}");
    assert_eq!(code, 404, "{body}");
    let v = json_of(&body);
    let hints = v["hints"].to_string();
    assert!(
        hints.contains("GET /api/workflows lists the available workflows"),
        "{body}"
    );
    assert!(!hints.contains("awf list"), "{body}");
}

/// Defect 3: a run stopped by its spent budget is not offered a resume that fails the same
/// way: the hint says to raise the budget first; once it is raised, that resume completes.
#[test]
fn a_run_stopped_by_its_budget_is_told_to_raise_it_before_resuming() {
    let mock = awf_mock_llm::MockLlm::start(json!({"rules": [
        {"when_last_user_contains": "bullet points about", "reply": {"text": "- a\n- b\n- c", "usage": {"input": 1500, "output": 600}}}
    ], "default": {"text": "- short", "usage": {"input": 1, "output": 1}}}));
    let mut sb = Sandbox::new().unwrap();
    sb.set_env("OPENAI_BASE_URL", &format!("{}/v1", mock.url()));
    sb.set_env("OPENAI_MODEL", "mock-model");
    sb.set_env("OPENAI_API_KEY", "sk-mock-key-123");
    let example =
        std::fs::read_to_string(awf_tests::workspace_root().join("workflows/budget.yaml")).unwrap();
    let wf = sb.write("budget.yaml", &example).unwrap();
    let wf = wf.to_str().unwrap();
    let r = sb.run(&["run", wf]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains("raise the workflow's or the step's `budget:` (tokens, usd) in the workflow file first, then continue it with `awf resume "),
        "{}",
        r.stderr
    );
    let id = r
        .stderr
        .split("`awf resume ")
        .nth(1)
        .unwrap()
        .split([' ', '`'])
        .next()
        .unwrap()
        .to_owned();
    // Resumed as it is: the same failure, and the same advice.
    let again = sb.run(&["resume", &id, "--from", "tighten"]).unwrap();
    assert_ne!(again.code, 0, "{}", again.stderr);
    assert!(
        again.stderr.contains("raise the workflow's"),
        "{}",
        again.stderr
    );
    // Raised: the resume the hint names completes.
    sb.write(
        "budget.yaml",
        &example.replace("tokens: 2000", "tokens: 100000"),
    )
    .unwrap();
    let ok = sb.run(&["resume", &id, "--from", "tighten"]).unwrap();
    assert_eq!(ok.code, 0, "{}", ok.stderr);
}

/// Defect 4: `awf resume` of a completed sub-workflow run whose parent completed too says
/// there is nothing to resume (it pointed to `awf resume <parent>`, which then said the
/// parent already completed).
#[test]
fn resuming_a_completed_child_of_a_completed_run_says_nothing_to_resume() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(
        &mut sb,
        &[
            (
                "leaf",
                "name: leaf\nstates:\n  initial: a\n  a: {type: step, command: echo leaf, on_success: done}\n  done: {type: terminal}\n",
            ),
            (
                "top",
                "name: top\nstates:\n  initial: call\n  call: {type: call_workflow, workflow: leaf, on_success: done}\n  done: {type: terminal}\n",
            ),
        ],
    );
    let r = sb.run(&["run", "top", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let top = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    let state = |id: &str| {
        awf_tests::read_state_file(&awf_tests::data(&sb).join(format!("states/{id}.json"))).unwrap()
    };
    let leaf = state(&top)["child_runs"]["call"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = sb.run(&["resume", &leaf]).unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "run {leaf} is a sub-workflow run (a call_workflow step of run {top}), and the run \
             {top} that called it already completed successfully; nothing to resume"
        )),
        "{}",
        r.stderr
    );
    assert!(
        !r.stderr.contains(&format!("awf resume {top}")),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("awf resume --list"), "{}", r.stderr);
}

/// An agent step of `provider` retried up to 3 times, 2 s apart.
fn retried_agent(provider: &str) -> String {
    format!(
        "name: review
states:
  initial: review
  review:
    type: agent
    provider: {provider}
    prompt: hi
    retry: {{max_attempts: 3, initial_delay: 2s}}
    on_success: done
  done:
    type: terminal
"
    )
}

/// Defect 5: an agent step whose provider does not exist, or whose CLI is not installed,
/// is not retried (it was, per its `retry`, though it can never succeed); a misspelt
/// provider gets the closest known one and the list of valid providers.
#[test]
fn an_unknown_provider_or_a_missing_cli_is_not_retried() {
    let mut sb = Sandbox::new().unwrap();
    sb.write("review.yaml", &retried_agent("claud")).unwrap();
    sb.write("cli.yaml", &retried_agent("claude")).unwrap();
    std::fs::create_dir_all(sb.path().join("nobin")).unwrap();
    let nobin = sb.path().join("nobin").display().to_string();
    sb.set_env("PATH", &nobin);
    for (file, code, words) in [
        (
            "review.yaml",
            "USER.AGENT.UNKNOWN_PROVIDER",
            "provider \"claud\" not found",
        ),
        (
            "cli.yaml",
            "EXECUTION.AGENT.BINARY_NOT_FOUND",
            "the `claude` CLI was not found on PATH",
        ),
    ] {
        let wf = sb.path().join(file).display().to_string();
        let started = std::time::Instant::now();
        let r = sb.run(&["run", &wf, "-f", "json"]).unwrap();
        assert_ne!(r.code, 0, "{file}: {}", r.stderr);
        let doc = r.json().unwrap();
        assert_eq!(doc["error"]["code"], code, "{file}: {doc:#}");
        assert!(
            doc["error"]["message"].as_str().unwrap().contains(words),
            "{file}: {doc:#}"
        );
        assert_eq!(doc["states"]["review"]["attempts"], 1, "{file}: {doc:#}");
        assert!(!r.stderr.contains("retrying"), "{file}: {}", r.stderr);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "{file}: waited for a retry"
        );
        if file == "review.yaml" {
            let hints = doc["error"]["hints"].as_array().unwrap();
            assert_eq!(hints[0], "did you mean 'claude'?", "{doc:#}");
            let list = hints[1].as_str().unwrap();
            assert!(
                list.starts_with("known providers: acp, claude, codex, gemini"),
                "{doc:#}"
            );
        }
    }
}
