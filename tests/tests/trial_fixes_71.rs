//! Trial findings fixed in round 71, over the real binary: a run of `awf serve` started
//! with `ask_missing_inputs` that waits for a missing required input is recorded from the
//! moment the `POST` answered (a history row counted by the stats, a state record with the
//! inputs given so far, secrets masked); cancelled while it asks (a `DELETE`, or the drain
//! of a SIGTERM) it is recorded `cancelled`, and a restarted server, `awf status` and
//! `awf resume` find it; answered, it runs and its record goes on as any run's.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use awf_tests::http_serve::Server;
use awf_tests::http_serve::add_workflows;
use awf_tests::http_serve::curl;
use awf_tests::http_serve::execution;
use awf_tests::http_serve::json_of;
use awf_tests::http_serve::post;
use awf_tests::http_serve::sigterm;
use awf_tests::http_serve::start;
use awf_tests::http_serve::start_run;
use awf_tests::http_serve::wait_exit;
use awf_tests::http_serve::wait_status;
use serde_json::Value;
use serde_json::json;

/// The breaker's workflow: a required input `who`, and an optional secret-named one.
const GATE: &str = "name: gate
inputs:
  - name: who
    type: string
    required: true
  - name: api_token
    type: string
states:
  initial: hello
  hello:
    type: step
    command: 'echo hello $who; sleep 2'
    on_success: done
  done:
    type: terminal
";

/// A secret given with the run: never written in clear.
const SECRET: &str = "tok-8d1f0c2e77a9";

/// Starts `gate` asking for `who`, the secret given; waits until it asks.
fn start_gate(s: &Server) -> (String, Value) {
    let id = start_run(
        s,
        "gate",
        &json!({"ask_missing_inputs": true, "inputs": {"api_token": SECRET}}).to_string(),
    );
    let mut p = Value::Null;
    awf_tests::wait_for("a pending request", || {
        p = execution(s, &id)["pending"].clone();
        p.as_array().is_some_and(|a| !a.is_empty())
    });
    (id, p)
}

/// `GET path` of the server (asserts 200), as JSON.
fn get(s: &Server, path: &str) -> Value {
    let (code, body, _) = curl(&[&format!("{}{path}", s.base)]);
    assert_eq!(code, 200, "{body}");
    json_of(&body)
}

/// The history entry of run `id` (asserts there is one).
fn history_entry(s: &Server, id: &str) -> Value {
    let h = get(s, "/api/history");
    let h = h.get("body").unwrap_or(&h);
    h["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == id)
        .unwrap_or_else(|| panic!("run {id} is not in the history: {h}"))
        .clone()
}

/// `/api/history/stats`.
fn stats(s: &Server) -> Value {
    let v = get(s, "/api/history/stats");
    v.get("body").cloned().unwrap_or(v)
}

/// The state file of run `id`, as text and as JSON.
fn state_file(sb: &Sandbox, id: &str) -> (String, Value) {
    let path = awf_tests::data(sb).join(format!("states/{id}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("no state file {}: {e}", path.display()));
    let v = json_of(&text);
    (text, v)
}

/// Every file of the data root holding `needle`.
fn files_holding(sb: &Sandbox, needle: &str) -> Vec<String> {
    fn walk(dir: &std::path::Path, needle: &[u8], out: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, needle, out);
            } else if std::fs::read(&p).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle))
            {
                out.push(p.display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(&awf_tests::data(sb), needle.as_bytes(), &mut out);
    out
}

/// While it asks, the run is in the history (`running`) and counted by the stats, and its
/// state record holds the inputs given so far with the secret masked; answered, it runs to
/// its end and its record says so, with the answer.
#[test]
fn a_run_that_asks_for_an_input_is_recorded_while_it_waits_and_then_goes_on() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("gate", GATE)]);
    let s = start(&sb, &[]);
    let (id, p) = start_gate(&s);
    assert_eq!(p[0]["input"], "who", "{p}");

    let row = history_entry(&s, &id);
    assert_eq!(row["status"], "running", "{row}");
    assert_eq!(row["workflow_name"], "gate", "{row}");
    assert_eq!(row["completed_at"], Value::Null, "{row}");
    let st = stats(&s);
    assert_eq!(st["total_executions"], 1, "{st}");
    assert_eq!(st["running_count"], 1, "{st}");
    assert_eq!(st["waiting_count"], 0, "{st}");
    let (text, state) = state_file(&sb, &id);
    assert_eq!(state["status"], "running", "{state}");
    assert_eq!(state["inputs"]["api_token"], "***", "{state}");
    assert!(state["inputs"].get("who").is_none(), "{state}");
    assert!(!text.contains(SECRET), "{text}");

    let (code, body, _) = post(
        &format!("{}/api/executions/{id}/respond", s.base),
        &json!({"request_id": p[0]["request_id"], "value": "world"}).to_string(),
    );
    assert_eq!(code, 204, "{body}");
    let done = wait_status(&s, &id, "completed");
    assert_eq!(done["exit_code"], 0, "{done}");
    let row = history_entry(&s, &id);
    assert_eq!(row["status"], "completed", "{row}");
    assert_eq!(row["exit_code"], 0, "{row}");
    let st = stats(&s);
    assert_eq!(st["total_executions"], 1, "{st}");
    assert_eq!(st["success_count"], 1, "{st}");
    assert_eq!(st["running_count"], 0, "{st}");
    let (_, state) = state_file(&sb, &id);
    assert_eq!(state["status"], "success", "{state}");
    assert_eq!(state["inputs"]["who"], "world", "{state}");
    assert_eq!(state["inputs"]["api_token"], "***", "{state}");
    assert_eq!(state["states"]["hello"]["status"], "completed", "{state}");
    assert_eq!(
        state["states"]["hello"]["output"].as_str().unwrap().trim(),
        "hello world",
        "{state}"
    );
    assert_eq!(
        files_holding(&sb, SECRET),
        Vec::<String>::new(),
        "the secret written in clear"
    );
}

/// Cancelled while it asks (`DELETE`): recorded `cancelled` (history, stats, state file);
/// after a restart of the server GET still shows it `cancelled`, `awf status` finds it, and
/// `awf resume` continues it from its first state once the missing input is given.
#[test]
fn a_run_cancelled_while_it_asks_is_recorded_cancelled_and_survives_a_restart() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("gate", GATE)]);
    let mut s = start(&sb, &[]);
    let (id, _) = start_gate(&s);
    let (code, body, _) = curl(&["-X", "DELETE", &format!("{}/api/executions/{id}", s.base)]);
    assert_eq!(code, 204, "{body}");
    wait_status(&s, &id, "cancelled");
    let row = history_entry(&s, &id);
    assert_eq!(row["status"], "cancelled", "{row}");
    assert_eq!(row["exit_code"], 130, "{row}");
    let st = stats(&s);
    assert_eq!(st["cancelled_count"], 1, "{st}");
    assert_eq!(st["running_count"], 0, "{st}");
    let (text, state) = state_file(&sb, &id);
    assert_eq!(state["status"], "cancelled", "{state}");
    assert_eq!(state["error"]["code"], "EXECUTION.RUN.CANCELLED", "{state}");
    assert!(!text.contains(SECRET), "{text}");

    sigterm(&s);
    wait_exit(&mut s);
    drop(s);
    let s = start(&sb, &[]);
    let after = execution(&s, &id);
    assert_eq!(after["status"], "cancelled", "{after}");
    assert_eq!(history_entry(&s, &id)["status"], "cancelled");
    drop(s);

    let out = sb.run(&["status", &id, "-f", "json"]).unwrap();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let v = out.json().unwrap();
    assert_eq!(v["status"], "cancelled", "{v}");

    // Resumed as any recorded run: its secret (masked in the record) must be given again,
    // then the input it never got; with both, it runs from its first state.
    let out = sb.run(&["resume", &id]).unwrap();
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("must be given again: api_token"),
        "{}",
        out.stderr
    );
    let out = sb
        .run(&["resume", &id, "--input", "api_token=x1234567"])
        .unwrap();
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("inputs.who: required but not provided"),
        "{}",
        out.stderr
    );
    let out = sb
        .run(&[
            "resume",
            &id,
            "--input",
            "who=again",
            "--input",
            "api_token=x1234567",
        ])
        .unwrap();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let (_, state) = state_file(&sb, &id);
    assert_eq!(state["status"], "success", "{state}");
    assert_eq!(
        state["states"]["hello"]["output"].as_str().unwrap().trim(),
        "hello again",
        "{state}"
    );
}

/// The breaker's case: a SIGTERM drains the server while the run asks; restarted on the
/// same data root, the server (and `awf status`) know the run, `cancelled` with SIGTERM's
/// exit code (it was 404 `USER.FACADE.RUN_NOT_FOUND`, and "no run with that id").
#[test]
fn a_run_asking_when_the_server_drains_is_found_cancelled_after_a_restart() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("gate", GATE)]);
    let mut s = start(&sb, &[]);
    let (id, _) = start_gate(&s);
    sigterm(&s);
    wait_exit(&mut s);
    drop(s);
    let s = start(&sb, &[]);
    let after = execution(&s, &id);
    assert_eq!(after["status"], "cancelled", "{after}");
    let row = history_entry(&s, &id);
    assert_eq!(row["status"], "cancelled", "{row}");
    assert_eq!(row["exit_code"], 143, "{row}");
    drop(s);
    let out = sb.run(&["status", &id]).unwrap();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("cancelled"), "{}", out.stdout);
    assert_eq!(
        files_holding(&sb, SECRET),
        Vec::<String>::new(),
        "the secret written in clear"
    );
}
