//! `awf serve`'s whole API over the built binary, with curl as the HTTP client: the
//! OpenAPI document and Swagger UI, workflow detail and validation, answering approvals and
//! conversation turns, resume across the terminal and the server, history, limits (run cap,
//! body and header caps), CORS, the run TTL, the SIGTERM drain, and the token withheld from
//! the runs' steps.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_mock_llm::MockLlm;
use awf_tests::Sandbox;
use awf_tests::http_serve::Server;
use awf_tests::http_serve::curl;
use awf_tests::http_serve::curl_headers;
use awf_tests::http_serve::execution;
use awf_tests::http_serve::json_of;
use awf_tests::http_serve::post;
use awf_tests::http_serve::sandbox_with;
use awf_tests::http_serve::sigterm;
use awf_tests::http_serve::start as start_with;
use awf_tests::http_serve::start_run;
use awf_tests::http_serve::wait_exit;
use awf_tests::http_serve::wait_status;
use awf_tests::wait_for;
use serde_json::Value;
use serde_json::json;

const HELLO: &str = "name: hello
description: says hello
version: \"1.2\"
inputs:
  - name: who
    type: string
    default: world
    description: whom to greet
states:
  initial: greet
  greet:
    type: step
    command: echo hello {{.inputs.who}}
    on_success: done
  done:
    type: terminal
";

/// Every kind of edge: transitions (with and without `when`), parallel branches, on_success,
/// on_failure, a failure terminal.
const GRAPH: &str = "name: graph
states:
  initial: check
  check:
    type: step
    command: echo ok
    transitions:
      - when: \"states.check.Output == 'x'\"
        goto: fan
      - goto: fan
    on_failure: broken
  fan:
    type: parallel
    parallel: [left, right]
    strategy: all_succeed
    on_success: done
  left:
    type: step
    command: echo left
    on_success: done
  right:
    type: step
    command: echo right
    on_success: done
  broken:
    type: terminal
    status: failure
  done:
    type: terminal
";

const INVALID: &str = "name: invalid
states:
  initial: a
  a:
    type: step
    command: echo a
    on_success: nowhere
  done:
    type: terminal
";

const GATED: &str = "name: gated
states:
  initial: deploy
  deploy:
    type: step
    command: echo deployed
    approval: \"Deploy now?\"
    on_success: done
    on_failure: rejected
  rejected:
    type: step
    command: echo rejected-route
    on_success: done
  done:
    type: terminal
";

const SLEEPER: &str = "name: sleeper
states:
  initial: nap
  nap:
    type: step
    command: sleep 300
    on_success: done
  done:
    type: terminal
";

/// A run that takes a few seconds and then succeeds.
const SHORT: &str = "name: short
states:
  initial: nap
  nap:
    type: step
    command: sleep 3
    on_success: done
  done:
    type: terminal
";

fn sandbox() -> Sandbox {
    sandbox_with(&[
        ("hello", HELLO),
        ("graph", GRAPH),
        ("invalid", INVALID),
        ("gated", GATED),
        ("sleeper", SLEEPER),
        ("short", SHORT),
    ])
}

fn start(sb: &Sandbox) -> Server {
    start_with(sb, &[])
}

/// Asserts a problem document with `status` and `code`.
fn assert_problem(got: &(u16, String, String), status: u16, code: &str) -> Value {
    let (c, body, ctype) = got;
    assert_eq!(*c, status, "{body}");
    assert_eq!(ctype, "application/problem+json", "{body}");
    let v = json_of(body);
    assert_eq!(v["status"], status, "{body}");
    assert_eq!(v["code"], code, "{body}");
    assert!(!v["detail"].as_str().unwrap().is_empty(), "{body}");
    assert!(!v["title"].as_str().unwrap().is_empty(), "{body}");
    v
}

/// The event names of a run's whole stream (it ends after the run's final event).
fn event_names(s: &Server, id: &str) -> Vec<String> {
    let (code, body, _) = curl(&["-N", &format!("{}/api/executions/{id}/events", s.base)]);
    assert_eq!(code, 200, "{body}");
    body.lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn openapi_lists_every_route_and_docs_load_only_same_origin_assets() {
    let sb = sandbox();
    let s = start(&sb);
    let (code, body, ctype) = curl(&[&format!("{}/openapi.json", s.base)]);
    assert_eq!(code, 200);
    assert!(ctype.starts_with("application/json"), "{ctype}");
    let doc = json_of(&body);
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        doc["openapi"]
    );
    let want = [
        ("/api/workflows", "get"),
        ("/api/workflows/{scope}/{name}", "get"),
        ("/api/workflows/{scope}/{name}/validate", "post"),
        ("/api/workflows/{scope}/{name}/run", "post"),
        ("/api/executions", "get"),
        ("/api/executions/{id}", "get"),
        ("/api/executions/{id}", "delete"),
        ("/api/executions/{id}/resume", "post"),
        ("/api/executions/{id}/respond", "post"),
        ("/api/executions/{id}/events", "get"),
        ("/api/executions/{id}/workflow", "get"),
        ("/api/history", "get"),
        ("/api/history/stats", "get"),
    ];
    let paths = doc["paths"].as_object().unwrap();
    let mut listed = 0;
    for (path, ops) in paths {
        listed += ops.as_object().unwrap().len();
        for (method, op) in ops.as_object().unwrap() {
            assert!(
                want.contains(&(path.as_str(), method.as_str())),
                "undocumented-in-test route {method} {path}"
            );
            let responses = op["responses"].as_object().unwrap();
            // Every operation documents at least one problem document (401 at least).
            let problems = responses
                .values()
                .filter(|r| r["content"].get("application/problem+json").is_some())
                .count();
            assert!(problems >= 1, "{method} {path}: {op}");
        }
    }
    assert_eq!(listed, want.len(), "{:?}", paths.keys().collect::<Vec<_>>());
    let sse = &doc["paths"]["/api/executions/{id}/events"]["get"]["responses"]["200"]["content"];
    assert!(sse.get("text/event-stream").is_some(), "{sse}");
    let run = &doc["paths"]["/api/workflows/{scope}/{name}/run"]["post"]["responses"];
    for status in ["202", "400", "404", "413", "422", "429", "503"] {
        assert!(run.get(status).is_some(), "run lacks {status}: {run}");
    }
    assert!(doc["components"]["schemas"].get("ProblemDoc").is_some());

    // Swagger UI from the binary: HTML whose every asset is a relative (same-origin) path
    // that the server answers.
    let (code, html, ctype) = curl(&["-L", &format!("{}/docs", s.base)]);
    assert_eq!(code, 200, "{html}");
    assert!(ctype.starts_with("text/html"), "{ctype}");
    assert!(html.contains("swagger-ui"), "{html}");
    let mut assets = Vec::new();
    for attr in ["src=\"", "href=\""] {
        for part in html.split(attr).skip(1) {
            let url = part.split('"').next().unwrap();
            assert!(!url.contains("//"), "an asset from another origin: {url}");
            assets.push(url.trim_start_matches("./").to_owned());
        }
    }
    assert!(assets.iter().any(|a| a.ends_with(".js")), "{assets:?}");
    for a in &assets {
        let (code, text, _) = curl(&[&format!("{}/docs/{a}", s.base)]);
        assert_eq!(code, 200, "{a}");
        if a == "swagger-initializer.js" {
            assert!(text.contains("\"/openapi.json\""), "{text}");
            assert!(!text.contains("https://"), "{text}");
        }
    }
}

#[test]
fn workflow_detail_shows_inputs_and_every_edge_and_validate_lists_errors() {
    let sb = sandbox();
    let s = start(&sb);
    sb.write("wf/broken.yaml", "name: [\n").unwrap();
    let (code, body, _) = curl(&[&format!("{}/api/workflows", s.base)]);
    assert_eq!(code, 200, "{body}");
    let list = json_of(&body)["body"]["workflows"].clone();
    let entry = |n: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|w| w["name"] == n)
            .unwrap_or_else(|| panic!("{n}: {list}"))
            .clone()
    };
    assert!(
        entry("broken")["error"]
            .as_str()
            .unwrap()
            .contains("WORKFLOW.PARSE"),
        "{list}"
    );
    assert_eq!(entry("hello").get("error"), None, "{list}");
    assert_problem(
        &curl(&[&format!("{}/api/workflows/env/broken", s.base)]),
        422,
        "WORKFLOW.PARSE.YAML_SYNTAX",
    );
    assert_eq!(entry("hello")["scope"], "env", "{list}");
    let (code, body, _) = curl(&[&format!("{}/api/workflows/env/hello", s.base)]);
    assert_eq!(code, 200, "{body}");
    assert!(
        !body.contains(&sb.path().display().to_string()),
        "an absolute path leaked: {body}"
    );
    let wf = json_of(&body)["body"].clone();
    assert_eq!(wf["name"], "hello");
    assert_eq!(wf["version"], "1.2");
    assert_eq!(wf["description"], "says hello");
    assert_eq!(wf["initial"], "greet");
    assert_eq!(
        wf["inputs"],
        json!([{"name": "who", "type": "string", "required": false, "default": "world", "description": "whom to greet"}])
    );
    let (code, body, _) = curl(&[&format!("{}/api/workflows/env/graph", s.base)]);
    assert_eq!(code, 200, "{body}");
    let states = json_of(&body)["body"]["states"].clone();
    let state = |n: &str| {
        states
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == n)
            .unwrap()
            .clone()
    };
    assert_eq!(
        state("check")["next"],
        json!([
            {"to": "fan", "kind": "transition", "when": "states.check.Output == 'x'"},
            {"to": "fan", "kind": "transition"},
            {"to": "broken", "kind": "failure"}
        ])
    );
    assert_eq!(
        state("fan")["next"],
        json!([
            {"to": "left", "kind": "branch"},
            {"to": "right", "kind": "branch"},
            {"to": "done", "kind": "success"}
        ])
    );
    assert_eq!(state("fan")["type"], "parallel");
    assert_eq!(state("broken")["terminal"], true);
    assert_eq!(state("broken")["terminal_status"], "failure");
    assert_eq!(state("check")["terminal"], false);
    assert_problem(
        &curl(&[&format!("{}/api/workflows/env/nope", s.base)]),
        404,
        "USER.FACADE.WORKFLOW_NOT_FOUND",
    );
    // Only listed workflows are reachable: never a path, nor a file of the server's
    // directory that has a workflow's name.
    for path in [
        "local/%2Fetc%2Fpasswd",
        "wf/hello.yaml",
        "local/wf%2Fhello.yaml",
        "pack/hello",
    ] {
        assert_problem(
            &curl(&[&format!("{}/api/workflows/{path}", s.base)]),
            404,
            "USER.FACADE.WORKFLOW_NOT_FOUND",
        );
        assert_problem(
            &post(&format!("{}/api/workflows/{path}/run", s.base), "{}"),
            404,
            "USER.FACADE.WORKFLOW_NOT_FOUND",
        );
    }
    sb.write(
        "hello",
        "name: trap\nstates:\n  initial: t\n  t:\n    type: terminal\n",
    )
    .unwrap();
    let (code, body, _) = curl(&[&format!("{}/api/workflows/env/hello", s.base)]);
    assert_eq!(code, 200, "{body}");
    assert_eq!(json_of(&body)["body"]["name"], "hello", "{body}");

    let validate = |name: &str| post(&format!("{}/api/workflows/env/{name}/validate", s.base), "");
    let (code, body, _) = validate("hello");
    assert_eq!(code, 200, "{body}");
    assert_eq!(json_of(&body)["body"]["errors"], json!([]));
    let got = validate("invalid");
    assert_eq!(got.0, 422, "{}", got.1);
    let v = json_of(&got.1);
    assert!(v["code"].as_str().unwrap().starts_with("WORKFLOW."), "{v}");
    let errors = v["errors"].as_array().unwrap();
    assert!(!errors.is_empty(), "{v}");
    assert!(
        errors
            .iter()
            .any(|e| e.as_str().unwrap().contains("nowhere")),
        "{v}"
    );
    assert_problem(&validate("nope"), 404, "USER.FACADE.WORKFLOW_NOT_FOUND");
}

fn pending_of(s: &Server, id: &str) -> Value {
    let mut p = Value::Null;
    wait_for("a pending request", || {
        p = execution(s, id)["pending"].clone();
        p.as_array().is_some_and(|a| !a.is_empty())
    });
    p
}

#[test]
fn an_approval_is_answered_over_http_once() {
    let sb = sandbox();
    let s = start(&sb);
    let id = start_run(&s, "gated", "{}");
    let pending = pending_of(&s, &id);
    assert_eq!(pending.as_array().unwrap().len(), 1, "{pending}");
    let p = &pending[0];
    assert_eq!(p["kind"], "approval");
    assert_eq!(p["step"], "deploy");
    assert_eq!(p["prompt"], "Deploy now?");
    assert_eq!(p["options"][0]["id"], "approve");
    let rid = p["request_id"].as_str().unwrap().to_owned();
    let url = format!("{}/api/executions/{id}/respond", s.base);
    // Answers that do not fit: 422, and the request stays pending.
    assert_problem(
        &post(
            &url,
            &json!({"request_id": rid, "option": "maybe"}).to_string(),
        ),
        422,
        "USER.FACADE.INPUT_REJECTED",
    );
    assert_problem(
        &post(&url, &json!({"request_id": rid}).to_string()),
        422,
        "USER.FACADE.INPUT_REJECTED",
    );
    assert_problem(
        &post(&url, r#"{"request_id": 5}"#),
        422,
        "USER.INPUT.VALIDATION_FAILED",
    );
    assert_problem(&post(&url, "{nope"), 400, "USER.INPUT.VALIDATION_FAILED");
    assert_problem(
        &post(
            &url,
            &json!({"request_id": "never-asked", "approved": true}).to_string(),
        ),
        404,
        "USER.FACADE.INPUT_REJECTED",
    );
    assert_problem(
        &post(
            &format!("{}/api/executions/no-such-run/respond", s.base),
            r#"{"approved": true}"#,
        ),
        404,
        "USER.FACADE.RUN_NOT_FOUND",
    );
    assert_eq!(execution(&s, &id)["pending"].as_array().unwrap().len(), 1);
    let (code, body, _) = post(
        &url,
        &json!({"request_id": rid, "approved": true}).to_string(),
    );
    assert_eq!(code, 204, "{body}");
    assert_problem(
        &post(
            &url,
            &json!({"request_id": rid, "approved": true}).to_string(),
        ),
        409,
        "USER.FACADE.INPUT_REJECTED",
    );
    let done = wait_status(&s, &id, "completed");
    assert_eq!(done["states"]["deploy"]["status"], "completed", "{done}");
    assert_eq!(done["pending"], json!([]));
    let names = event_names(&s, &id);
    let asked = names
        .iter()
        .position(|n| n == "interaction_required")
        .unwrap();
    let resolved = names
        .iter()
        .position(|n| n == "interaction_resolved")
        .unwrap();
    assert!(asked < resolved, "{names:?}");

    // AWF (Go)'s shape: {"response": {"PromptID", "Value"}}; a rejection takes on_failure.
    let id = start_run(&s, "gated", "{}");
    let rid = pending_of(&s, &id)[0]["request_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let url = format!("{}/api/executions/{id}/respond", s.base);
    let (code, body, _) = post(
        &url,
        &json!({"response": {"PromptID": rid, "Value": "reject"}}).to_string(),
    );
    assert_eq!(code, 204, "{body}");
    let done = wait_status(&s, &id, "completed");
    assert_eq!(done["states"]["rejected"]["status"], "completed", "{done}");
    // The run ended: the request is closed.
    assert_problem(
        &post(&url, r#"{"approved": true}"#),
        409,
        "USER.FACADE.INPUT_REJECTED",
    );
}

#[test]
fn conversation_turns_are_answered_over_http() {
    let mut sb = sandbox();
    sb.set_env("MOCK_KEY", "sk-mock-key-123");
    let mock = MockLlm::start(json!({"rules": [
        {"when_last_user_contains": "tell me more", "reply": {"text": "more about it"}},
        {"when_last_user_contains": "hello", "reply": {"text": "hi there"}}
    ], "default": {"text": "unexpected"}}));
    let url = mock.url();
    sb.write(
        "wf/chat.yaml",
        &format!(
            "name: chat\nstates:\n  initial: chat\n  chat:\n    type: agent\n    provider: openai_compatible\n    mode: conversation\n    prompt: hello\n    options: {{base_url: \"{url}/v1\", model: mock-model, api_key: \"{{{{.env.MOCK_KEY}}}}\"}}\n    conversation: {{}}\n    on_success: done\n  done:\n    type: terminal\n"
        ),
    )
    .unwrap();
    let s = start(&sb);
    let id = start_run(&s, "chat", "{}");
    let respond = format!("{}/api/executions/{id}/respond", s.base);
    let p = pending_of(&s, &id);
    assert_eq!(p[0]["kind"], "conversation_turn", "{p}");
    // An approval's answer does not fit a turn.
    assert_problem(
        &post(&respond, r#"{"approved": true}"#),
        422,
        "USER.FACADE.INPUT_REJECTED",
    );
    // The only pending request may be answered without naming it.
    let (code, body, _) = post(&respond, r#"{"value": "tell me more"}"#);
    assert_eq!(code, 204, "{body}");
    let first = p[0]["request_id"].as_str().unwrap().to_owned();
    let mut next = Value::Null;
    wait_for("the next turn", || {
        next = execution(&s, &id)["pending"].clone();
        next.as_array()
            .is_some_and(|a| a.iter().any(|r| r["request_id"] != first.as_str()))
    });
    let (code, body, _) = post(
        &respond,
        &json!({"request_id": next[0]["request_id"], "end_of_input": true}).to_string(),
    );
    assert_eq!(code, 204, "{body}");
    wait_status(&s, &id, "completed");
    let asked: Vec<String> = mock
        .model_requests()
        .iter()
        .map(|r| {
            r["body"]["messages"].as_array().unwrap().last().unwrap()["content"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(asked, vec!["hello", "tell me more"]);
}

fn flaky(sb: &Sandbox) -> std::path::PathBuf {
    let marker = sb.path().join("marker");
    sb.write(
        "wf/flaky.yaml",
        &format!(
            "name: flaky\nstates:\n  initial: prep\n  prep:\n    type: step\n    command: echo prep\n    on_success: check\n  check:\n    type: step\n    command: test -f {}\n    on_success: done\n  done:\n    type: terminal\n",
            marker.display()
        ),
    )
    .unwrap();
    marker
}

#[test]
fn runs_resume_across_the_server_and_the_terminal() {
    let sb = sandbox();
    let marker = flaky(&sb);
    let s = start(&sb);

    // Started over HTTP, failed, resumed by the same server (AWF (Go) refuses this).
    let id = start_run(&s, "flaky", "{}");
    wait_status(&s, &id, "failed");
    std::fs::write(&marker, "").unwrap();
    let resume =
        |id: &str, body: &str| post(&format!("{}/api/executions/{id}/resume", s.base), body);
    let (code, body, _) = resume(&id, r#"{"from_step": "current"}"#);
    assert_eq!(code, 200, "{body}");
    assert_eq!(json_of(&body)["body"]["execution_id"], id.as_str());
    let done = wait_status(&s, &id, "completed");
    assert_eq!(done["states"]["check"]["status"], "completed", "{done}");
    assert_problem(&resume(&id, ""), 409, "USER.FACADE.INPUT_REJECTED");
    assert_problem(&resume("no-such-run", ""), 404, "USER.FACADE.RUN_NOT_FOUND");
    assert_problem(
        &resume(&id, r#"{"from": 1}"#),
        422,
        "USER.INPUT.VALIDATION_FAILED",
    );

    // Started over HTTP, failed, resumed from the terminal.
    std::fs::remove_file(&marker).unwrap();
    let id = start_run(&s, "flaky", "{}");
    wait_status(&s, &id, "failed");
    std::fs::write(&marker, "").unwrap();
    let r = sb.run(&["resume", &id]).unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    wait_status(&s, &id, "completed");

    // Started from the terminal, failed, resumed over HTTP.
    std::fs::remove_file(&marker).unwrap();
    let r = sb.run(&["run", "flaky", "-f", "json"]).unwrap();
    assert_ne!(r.code, 0, "{}", r.stdout);
    let id = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    assert_eq!(execution(&s, &id)["status"], "failed");
    std::fs::write(&marker, "").unwrap();
    let (code, body, _) = resume(&id, "");
    assert_eq!(code, 200, "{body}");
    let done = wait_status(&s, &id, "completed");
    assert_eq!(done["states"]["check"]["status"], "completed", "{done}");
    let h = sb.run(&["history", "--format", "json"]).unwrap();
    assert!(h.stdout.contains(&id), "{}", h.stdout);
}

#[test]
fn history_filters_and_stats() {
    let sb = sandbox();
    let s = start(&sb);
    let ok = start_run(&s, "hello", "{}");
    wait_status(&s, &ok, "completed");
    let _ = flaky(&sb);
    let bad = start_run(&s, "flaky", "{}");
    wait_status(&s, &bad, "failed");
    let h = |q: &str| {
        let got = curl(&[&format!("{}/api/history{q}", s.base)]);
        assert_eq!(got.0, 200, "{q}: {}", got.1);
        json_of(&got.1)["body"].clone()
    };
    let ids = |v: &Value| -> Vec<String> {
        v["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let mut all = Value::Null;
    wait_for("both runs in the history", || {
        all = h("");
        ids(&all).len() == 2
            && all["entries"][0]["completed_at"].is_string()
            && all["entries"][1]["completed_at"].is_string()
    });
    // Newest first.
    assert_eq!(ids(&all), vec![bad.clone(), ok.clone()]);
    let e = &all["entries"][1];
    assert_eq!(e["status"], "completed");
    assert_eq!(e["workflow_name"], "hello");
    assert!(e["started_at"].as_str().unwrap().ends_with('Z'), "{e}");
    assert!(e["duration_ms"].is_u64(), "{e}");
    assert_eq!(ids(&h("?status=success")), vec![ok.clone()]);
    assert_eq!(ids(&h("?status=completed")), vec![ok.clone()]);
    assert_eq!(ids(&h("?status=failed")), vec![bad.clone()]);
    assert_eq!(ids(&h("?workflow=hello")), vec![ok]);
    assert_eq!(ids(&h("?limit=1")), vec![bad]);
    assert_eq!(ids(&h("?since=2999-01-01")), Vec::<String>::new());
    assert_eq!(ids(&h("?until=2000-01-01")), Vec::<String>::new());
    assert_eq!(
        ids(&h("?since=2000-01-01T00:00:00Z&until=2999-01-01")).len(),
        2
    );
    for q in ["?status=won", "?limit=0", "?since=yesterday"] {
        assert_problem(
            &curl(&[&format!("{}/api/history{q}", s.base)]),
            422,
            "USER.INPUT.VALIDATION_FAILED",
        );
    }
    let (code, body, _) = curl(&[&format!("{}/api/history/stats", s.base)]);
    assert_eq!(code, 200, "{body}");
    let st = json_of(&body)["body"].clone();
    assert_eq!(st["total_executions"], 2, "{st}");
    assert_eq!(st["success_count"], 1, "{st}");
    assert_eq!(st["failed_count"], 1, "{st}");
    assert_eq!(st["cancelled_count"], 0, "{st}");
    assert!(st["avg_duration_ms"].is_u64(), "{st}");
    let (_, body, _) = curl(&[&format!("{}/api/history/stats?status=success", s.base)]);
    assert_eq!(json_of(&body)["body"]["total_executions"], 1);
}

#[test]
fn the_run_cap_answers_429_with_retry_after() {
    let sb = sandbox();
    let s = start_with(&sb, &["--max-runs", "1"]);
    let id = start_run(&s, "sleeper", "{}");
    let (code, body, ctype, headers) = curl_headers(&[
        "-X",
        "POST",
        "-H",
        "content-type: application/json",
        "-d",
        "{}",
        &format!("{}/api/workflows/env/hello/run", s.base),
    ]);
    assert_problem(&(code, body, ctype), 429, "USER.FACADE.RUN_LIMIT");
    assert!(headers.contains("retry-after: "), "{headers}");
    let (code, _, _) = curl(&["-X", "DELETE", &format!("{}/api/executions/{id}", s.base)]);
    assert_eq!(code, 204);
    wait_status(&s, &id, "cancelled");
    // A cancelled run resumes (and takes the one slot again).
    let (code, body, _) = post(&format!("{}/api/executions/{id}/resume", s.base), "");
    assert_eq!(code, 200, "{body}");
    wait_status(&s, &id, "running");
    wait_for("the sleep to start again", || {
        sb.processes().iter().any(|p| p.cmdline == "sleep 300")
    });
    let got = post(&format!("{}/api/workflows/env/hello/run", s.base), "{}");
    assert_problem(&got, 429, "USER.FACADE.RUN_LIMIT");
    let (code, _, _) = curl(&["-X", "DELETE", &format!("{}/api/executions/{id}", s.base)]);
    assert_eq!(code, 204);
    wait_status(&s, &id, "cancelled");
    let id = start_run(&s, "hello", "{}");
    wait_status(&s, &id, "completed");
}

#[test]
fn every_error_is_a_problem_document() {
    let sb = sandbox();
    let s = start(&sb);
    let run = format!("{}/api/workflows/env/hello/run", s.base);
    // Over 1 MiB: 413.
    let big = format!(
        "{{\"inputs\": {{\"who\": \"{}\"}}}}",
        "x".repeat((1 << 20) + 10)
    );
    let file = sb.write("big.json", &big).unwrap();
    let at = format!("@{}", file.display());
    assert_problem(
        &curl(&[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data-binary",
            &at,
            &run,
        ]),
        413,
        "USER.INPUT.VALIDATION_FAILED",
    );
    // Just under it: accepted.
    let id = start_run(&s, "hello", r#"{"inputs": {"who": "ada"}}"#);
    wait_status(&s, &id, "completed");
    assert_problem(&post(&run, "{nope"), 400, "USER.INPUT.VALIDATION_FAILED");
    assert_problem(
        &post(&run, r#"{"inputs": [1]}"#),
        422,
        "USER.INPUT.VALIDATION_FAILED",
    );
    assert_problem(
        &post(&run, r#"{"inptus": {}}"#),
        422,
        "USER.INPUT.VALIDATION_FAILED",
    );
    assert_problem(
        &curl(&[&format!("{}/api/nope", s.base)]),
        404,
        "USER.INPUT.VALIDATION_FAILED",
    );
    let (code, body, ctype, headers) =
        curl_headers(&["-X", "PUT", &format!("{}/api/workflows", s.base)]);
    assert_problem(&(code, body, ctype), 405, "USER.INPUT.VALIDATION_FAILED");
    assert!(headers.contains("allow: "), "{headers}");
    let huge = format!("x-big: {}", "y".repeat(20 << 10));
    assert_problem(
        &curl(&["-H", &huge, &format!("{}/api/workflows", s.base)]),
        431,
        "USER.INPUT.VALIDATION_FAILED",
    );
    assert_problem(
        &curl(&[
            "-H",
            "Last-Event-ID: x",
            &format!("{}/api/executions/{id}/events", s.base),
        ]),
        422,
        "USER.INPUT.VALIDATION_FAILED",
    );
}

fn preflight(s: &Server, origin: &str) -> (u16, String) {
    let (code, _, _, headers) = curl_headers(&[
        "-X",
        "OPTIONS",
        "-H",
        &format!("Origin: {origin}"),
        "-H",
        "Access-Control-Request-Method: POST",
        "-H",
        "Access-Control-Request-Headers: content-type",
        &format!("{}/api/workflows/env/hello/run", s.base),
    ]);
    (code, headers)
}

#[test]
fn cors_is_off_unless_an_origin_is_given() {
    let sb = sandbox();
    let s = start(&sb);
    let (_, headers) = preflight(&s, "http://app.test:3000");
    assert!(
        !headers.contains("access-control-allow-origin"),
        "{headers}"
    );
    let (_, _, _, headers) = curl_headers(&[
        "-H",
        "Origin: http://app.test:3000",
        &format!("{}/api/workflows", s.base),
    ]);
    assert!(
        !headers.contains("access-control-allow-origin"),
        "{headers}"
    );
    drop(s);

    let s = start_with(&sb, &["--cors-origin", "http://app.test:3000"]);
    let (code, headers) = preflight(&s, "http://app.test:3000");
    assert!(code == 200 || code == 204, "{code}: {headers}");
    assert!(
        headers.contains("access-control-allow-origin: http://app.test:3000"),
        "{headers}"
    );
    assert!(
        headers.contains("access-control-allow-methods"),
        "{headers}"
    );
    let (_, headers) = preflight(&s, "http://evil.test");
    assert!(
        !headers.contains("access-control-allow-origin"),
        "{headers}"
    );
    let (code, _, _, headers) = curl_headers(&[
        "-H",
        "Origin: http://app.test:3000",
        &format!("{}/api/workflows", s.base),
    ]);
    assert_eq!(code, 200);
    assert!(
        headers.contains("access-control-allow-origin: http://app.test:3000"),
        "{headers}"
    );
    let r = sb
        .run(&[
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--cors-origin",
            "app.test",
        ])
        .unwrap();
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("--cors-origin"), "{}", r.stderr);
}

#[test]
fn finished_runs_leave_memory_after_the_ttl_and_stay_in_history() {
    let sb = sandbox();
    let s = start_with(&sb, &["--run-ttl", "1s"]);
    let id = start_run(&s, "hello", "{}");
    let v = wait_status(&s, &id, "completed");
    assert_eq!(v["phase"], "finished", "{v}");
    let events = format!("{}/api/executions/{id}/events", s.base);
    let mut v = Value::Null;
    wait_for("the run to leave memory", || {
        v = execution(&s, &id);
        v["phase"] == "recorded"
    });
    assert_eq!(v["status"], "completed", "{v}");
    // Read from the state file (trial finding #1: never null for a recorded run).
    assert_eq!(v["states"]["greet"]["output"], "hello world\n", "{v}");
    assert!(v["started_at"].as_str().unwrap().ends_with('Z'), "{v}");
    assert!(v["completed_at"].as_str().unwrap().ends_with('Z'), "{v}");
    assert!(v["duration_ms"].is_u64(), "{v}");
    let (_, body, _) = curl(&[&format!("{}/api/executions", s.base)]);
    let list = json_of(&body)["body"]["executions"].clone();
    let mine = list
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["execution_id"] == id.as_str())
        .unwrap_or_else(|| panic!("{list}"))
        .clone();
    assert_eq!(mine["started_at"], v["started_at"], "{mine}");
    assert_eq!(mine["duration_ms"], v["duration_ms"], "{mine}");
    // Out of memory, its events are read back from the store (issue 13).
    let (code, body, _) = curl(&["-N", &events]);
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("event: run_finished"), "{body}");
    let (_, body, _) = curl(&[&format!("{}/api/history", s.base)]);
    assert!(body.contains(&id), "{body}");
}

#[test]
fn sigterm_lets_a_running_run_finish_within_the_drain_timeout() {
    let sb = sandbox();
    let mut s = start_with(&sb, &["--drain-timeout", "25s"]);
    let id = start_run(&s, "short", "{}");
    wait_for("the sleep to start", || {
        sb.processes().iter().any(|p| p.cmdline == "sleep 3")
    });
    sigterm(&s);
    // While draining, no new run starts.
    let run = format!("{}/api/workflows/env/hello/run", s.base);
    let mut got = (0, String::new(), String::new());
    wait_for("a 503 while draining", || {
        got = post(&run, "{}");
        got.0 == 503
    });
    assert_problem(&got, 503, "SYSTEM.RESOURCE.EXHAUSTED");
    assert_eq!(wait_exit(&mut s), Some(0));
    let h = sb.run(&["history", "--format", "json"]).unwrap();
    let rows: Value = serde_json::from_str(&h.stdout).unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{}", h.stdout));
    assert_eq!(row["status"], "completed", "{row}");
}

#[test]
fn sigterm_cancels_what_outlives_the_drain_timeout() {
    let sb = sandbox();
    let log = sb.path().join("serve.log");
    let mut s = awf_tests::http_serve::start_with_stderr(
        &sb,
        &["--drain-timeout", "1s"],
        std::fs::File::create(&log).unwrap().into(),
    );
    let id = start_run(&s, "sleeper", "{}");
    wait_for("the sleep to start", || {
        sb.processes().iter().any(|p| p.cmdline == "sleep 300")
    });
    sigterm(&s);
    assert_eq!(wait_exit(&mut s), Some(0));
    // The server says that it drains, and when it gives up waiting (a new user saw a
    // worker go quiet after SIGTERM).
    let text = std::fs::read_to_string(&log).unwrap();
    let draining = text.find("draining: new runs and resumes are refused");
    let cancelling = text.find("drain timeout reached: cancelling the runs still running");
    assert!(
        matches!((draining, cancelling), (Some(a), Some(b)) if a < b),
        "{text}"
    );
    assert!(text.contains("runs=1"), "{text}");
    wait_for("no process left", || sb.processes().is_empty());
    let h = sb.run(&["history", "--format", "json"]).unwrap();
    let rows: Value = serde_json::from_str(&h.stdout).unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{}", h.stdout));
    assert_eq!(row["status"], "cancelled", "{row}");
}

/// Starts workflow `name` with the header `auth`; asserts 202 and returns the execution id.
fn start_run_as(s: &Server, auth: &str, name: &str) -> String {
    let (code, body, _) = curl(&[
        "-X",
        "POST",
        "-H",
        auth,
        "-H",
        "content-type: application/json",
        "-d",
        "{}",
        &format!("{}/api/workflows/env/{name}/run", s.base),
    ]);
    assert_eq!(code, 202, "{body}");
    json_of(&body)["body"]["execution_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// `GET /api/executions/{id}`'s `body`, sent with the header `auth`.
fn execution_as(s: &Server, auth: &str, id: &str) -> Value {
    let (_, body, _) = curl(&["-H", auth, &format!("{}/api/executions/{id}", s.base)]);
    json_of(&body)["body"].clone()
}

#[test]
fn the_token_does_not_reach_the_steps() {
    let mut sb = sandbox();
    sb.set_env("HTTP_API_TOKEN", "tok-value-8c1f");
    let dump = sb.path().join("env.txt");
    sb.write(
        "wf/dump.yaml",
        &format!(
            "name: dump\nstates:\n  initial: dump\n  dump:\n    type: step\n    command: env > {}\n    on_success: done\n  done:\n    type: terminal\n",
            dump.display()
        ),
    )
    .unwrap();
    let s = start_with(&sb, &["--token-env", "HTTP_API_TOKEN"]);
    let auth = "Authorization: Bearer tok-value-8c1f";
    // The document says how to authenticate (and only when a token is required).
    let (code, body, _) = curl(&["-H", auth, &format!("{}/openapi.json", s.base)]);
    assert_eq!(code, 200, "{body}");
    let doc = json_of(&body);
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer",
        "{}",
        doc["components"]
    );
    assert_eq!(doc["security"], json!([{"bearer": []}]));
    let open = start(&sb);
    let (_, body, _) = curl(&[&format!("{}/openapi.json", open.base)]);
    assert_eq!(json_of(&body).get("security"), None);
    drop(open);
    let id = start_run_as(&s, auth, "dump");
    wait_for("the run to end", || {
        execution_as(&s, auth, &id)["status"] == "completed"
    });
    let env = std::fs::read_to_string(&dump).unwrap();
    assert!(
        env.contains("AWF_WORKFLOWS_PATH="),
        "not an env dump: {env}"
    );
    assert!(!env.contains("tok-value-8c1f"), "{env}");
    assert!(!env.contains("HTTP_API_TOKEN"), "{env}");
}

#[test]
fn the_token_does_not_reach_an_agents_in_process_bash_tool() {
    let mock = MockLlm::start(json!({
        "rules": [
            {"when_has_tool_result": true, "reply": {"text": "dumped"}},
            {"when_has_tools": true, "reply": {"tool": {"name": "Bash", "args": {"command": "env > envtool.txt"}}}}
        ],
        "default": {"text": "ok"}
    }));
    let mut sb = sandbox();
    sb.set_env("HTTP_API_TOKEN", "tok-value-77ab");
    let url = mock.url();
    sb.write(
        "wf/agent.yaml",
        &format!(
            "name: agent\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: openai_compatible\n    prompt: dump the environment\n    options:\n      base_url: {url}/v1\n      model: mock-model\n      api_key: sk-test\n    mcp_proxy:\n      enable: true\n    on_success: done\n  done:\n    type: terminal\n"
        ),
    )
    .unwrap();
    let s = start_with(&sb, &["--token-env", "HTTP_API_TOKEN"]);
    let auth = "Authorization: Bearer tok-value-77ab";
    let id = start_run_as(&s, auth, "agent");
    let mut last = Value::Null;
    wait_for("the run to end", || {
        last = execution_as(&s, auth, &id);
        last["status"] != "running"
    });
    assert_eq!(last["status"], "completed", "{last}");
    let env = std::fs::read_to_string(sb.path().join("envtool.txt")).unwrap();
    assert!(
        env.contains("AWF_WORKFLOWS_PATH="),
        "not an env dump: {env}"
    );
    assert!(!env.contains("tok-value-77ab"), "{env}");
    assert!(!env.contains("HTTP_API_TOKEN"), "{env}");
}

#[test]
fn a_missing_input_is_asked_and_answered_over_http() {
    let sb = sandbox();
    let out = sb.path().join("greeting.txt");
    sb.write(
        "wf/ask.yaml",
        &format!(
            "name: ask\ninputs:\n  - name: who\n    type: string\n    required: true\n    description: whom to greet\nstates:\n  initial: greet\n  greet:\n    type: step\n    command: echo hi {{{{.inputs.who}}}} > {}\n    on_success: done\n  done:\n    type: terminal\n",
            out.display()
        ),
    )
    .unwrap();
    let s = start(&sb);
    let run = format!("{}/api/workflows/env/ask/run", s.base);
    // Without asking: refused, as AWF (Go) does.
    let got = post(&run, "{}");
    assert_eq!(got.0, 422, "{}", got.1);
    let id = start_run(&s, "ask", r#"{"ask_missing_inputs": true}"#);
    let p = pending_of(&s, &id);
    assert_eq!(p[0]["kind"], "missing_input", "{p}");
    assert_eq!(p[0]["input"], "who", "{p}");
    assert_eq!(p[0]["prompt"], "whom to greet", "{p}");
    let respond = format!("{}/api/executions/{id}/respond", s.base);
    assert_problem(
        &post(&respond, r#"{"option": "approve"}"#),
        422,
        "USER.FACADE.INPUT_REJECTED",
    );
    let (code, body, _) = post(
        &respond,
        &json!({"request_id": p[0]["request_id"], "value": "Ada"}).to_string(),
    );
    assert_eq!(code, 204, "{body}");
    wait_status(&s, &id, "completed");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "hi Ada\n");
}
