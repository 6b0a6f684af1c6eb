//! `awf serve` findings of testers, over the built binary with curl: a run whose `awf run`
//! was killed (SIGKILL) is said to have lost its process (`process_gone` on executions and
//! history rows, `process_gone_count` apart from `running_count`, a closing `process_gone`
//! event on its stream, a 409 to cancelling it) as `awf history` says it; parallel resumes of one run are refused
//! with one 409; hints name the HTTP field (`from_step`) and route (`…/validate`), not the
//! command line's.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Stdio;

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

/// Sleeps in `a` (a command line no other test runs).
const LONG: &str = "name: long
states:
  initial: a
  a:
    type: step
    command: sleep 3141
    on_success: done
  done:
    type: terminal
";

/// Sleeps as long, started by the server.
const NAP: &str = "name: nap
states:
  initial: a
  a:
    type: step
    command: sleep 3142
    on_success: done
  done:
    type: terminal
";

/// Three errors: transitions to states that do not exist.
const INVALID: &str = "name: invalid
states:
  initial: a
  a:
    type: step
    command: echo a
    on_success: nowhere_one
  b:
    type: step
    command: echo b
    on_success: nowhere_two
  c:
    type: step
    command: echo c
    on_success: nowhere_three
  done:
    type: terminal
";

/// Fails on its first run (and creates `marker`); sleeps once resumed.
fn flaky(marker: &std::path::Path) -> String {
    format!(
        "name: flaky
states:
  initial: go
  go:
    type: step
    command: \"if [ -f {m} ]; then sleep 3143; else touch {m}; exit 3; fi\"
    on_success: done
  done:
    type: terminal
",
        m = marker.display()
    )
}

fn get(s: &Server, path: &str) -> Value {
    let (code, body, _) = curl(&[&format!("{}{path}", s.base)]);
    assert_eq!(code, 200, "{path}: {body}");
    json_of(&body)["body"].clone()
}

/// `awf run long` in the background, SIGKILLed once its state file names it at `a`; its
/// sleep is stopped too. Returns the run id.
fn killed_run(sb: &Sandbox) -> String {
    let mut child = sb
        .cmd(&["run", "long"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    awf_tests::wait_for("`sleep 3141` to start", || {
        sb.processes().iter().any(|p| p.cmdline == "sleep 3141")
    });
    let id = awf_tests::wait_for_state(sb, "the run to be recorded at a", |v| {
        v["current_state"] == "a" && v["owner_pid"].is_u64()
    });
    child.kill().unwrap();
    child.wait().unwrap();
    sb.kill_processes(Some("sleep 3141"));
    id
}

/// Finding 1: a run whose `awf run` was killed is not shown as simply running: GET, the
/// list and the history say `process_gone: true` (as `awf history -f json`), the stats count
/// it apart from the runs really running, and its event stream ends with a `process_gone`
/// event (it replayed the events and closed without saying why).
#[test]
fn a_run_whose_awf_process_was_killed_is_said_to_be_gone() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("long", LONG), ("nap", NAP)]);
    let gone = killed_run(&sb);
    // The CLI's word, which the API must match.
    let cli = sb.run(&["history", "-f", "json"]).unwrap().json().unwrap();
    assert_eq!(cli[0]["process_gone"], true, "{cli}");

    let s = start(&sb, &[]);
    let live = start_run(&s, "nap", "{}");
    wait_status(&s, &live, "running");

    let one = execution(&s, &gone);
    assert_eq!(one["status"], "running", "{one}");
    assert_eq!(one["process_gone"], true, "{one}");
    // A run really running says nothing of the kind.
    let here = execution(&s, &live);
    assert!(here.get("process_gone").is_none(), "{here}");

    let list = get(&s, "/api/executions");
    let row = |id: &str| {
        list["executions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["execution_id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} not listed: {list}"))
    };
    assert_eq!(row(&gone)["process_gone"], true, "{list}");
    assert!(row(&live).get("process_gone").is_none(), "{list}");
    // The live one first: the dead one runs no more.
    assert_eq!(
        list["executions"][0]["execution_id"],
        live.as_str(),
        "{list}"
    );

    let history = get(&s, "/api/history");
    let entry = history["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == gone.as_str())
        .cloned()
        .unwrap();
    assert_eq!(entry["status"], "running", "{history}");
    assert_eq!(entry["process_gone"], true, "{history}");

    let stats = get(&s, "/api/history/stats");
    assert_eq!(stats["running_count"], 1, "{stats}");
    assert_eq!(stats["process_gone_count"], 1, "{stats}");
    assert_eq!(stats["total_executions"], 2, "{stats}");

    // The stream replays the run's events, then says why it ends.
    let (code, text, ctype) = curl(&[
        "-N",
        &format!("{}/api/executions/{}/events", s.base, &gone[..8]),
    ]);
    assert_eq!(code, 200, "{text}");
    assert!(ctype.starts_with("text/event-stream"), "{ctype}");
    let frames: Vec<&str> = text
        .split("\n\n")
        .map(str::trim)
        .filter(|f| f.contains("event: "))
        .collect();
    assert!(
        frames
            .first()
            .is_some_and(|f| f.contains("event: run_started")),
        "{text}"
    );
    assert!(!text.contains("event: run_finished"), "{text}");
    let last = frames.last().unwrap();
    assert!(last.contains("event: process_gone"), "{text}");
    assert!(!last.contains("id: "), "not an event of the log: {last}");
    let data = json_of(last.lines().find_map(|l| l.strip_prefix("data: ")).unwrap());
    assert_eq!(data["run_id"], gone.as_str(), "{data}");
    assert_eq!(data["status"], "running", "{data}");
    assert_eq!(data["process_gone"], true, "{data}");
    assert_eq!(data["current_step"], "a", "{data}");
    assert_eq!(
        text.matches("event: process_gone").count(),
        1,
        "said once: {text}"
    );

    // Cancelling it: nothing runs it, so a 409 that says so and how to go on (it answered
    // 204, "cancelled", and the run stayed recorded `running`); nothing changes.
    let (code, body, _) = curl(&["-X", "DELETE", &format!("{}/api/executions/{gone}", s.base)]);
    assert_eq!(code, 409, "{body}");
    let problem = json_of(&body);
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("is not running") && detail.contains("gone without recording an end"),
        "{problem}"
    );
    assert!(
        problem.to_string().contains(&format!("awf resume {gone}")),
        "{problem}"
    );
    let after = execution(&s, &gone);
    assert_eq!(after["status"], "running", "{after}");
    assert_eq!(after["process_gone"], true, "{after}");

    let (code, _, _) = curl(&["-X", "DELETE", &format!("{}/api/executions/{live}", s.base)]);
    assert_eq!(code, 204);
}

/// Finding 2: ten resumes of one failed run at once: one is taken, every other one is the
/// same 409 (one of them was a 422 from the first one's run lock, "still running in
/// another awf process", with a single process involved).
#[test]
fn parallel_resumes_of_one_run_are_one_200_and_the_same_409() {
    let mut sb = Sandbox::new().unwrap();
    let marker = sb.path().join("flaky.mark");
    let text = flaky(&marker);
    add_workflows(&mut sb, &[("flaky", text.as_str())]);
    let s = start(&sb, &[]);
    let id = start_run(&s, "flaky", "{}");
    wait_status(&s, &id, "failed");
    let url = format!("{}/api/executions/{id}/resume", s.base);
    let answers: Vec<(u16, String)> = std::thread::scope(|scope| {
        let calls: Vec<_> = (0..10)
            .map(|_| {
                scope.spawn(|| {
                    let (code, body, _) = post(&url, "{}");
                    (code, body)
                })
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let ok = answers.iter().filter(|(c, _)| *c == 200).count();
    assert_eq!(ok, 1, "{answers:?}");
    for (code, body) in answers.iter().filter(|(c, _)| *c != 200) {
        assert_eq!(*code, 409, "{body}");
        let p = json_of(body);
        assert_eq!(p["detail"], format!("run {id} is still running"), "{p}");
        assert_eq!(p["code"], "USER.FACADE.INPUT_REJECTED", "{p}");
    }
    wait_status(&s, &id, "running");
    let (code, _, _) = curl(&["-X", "DELETE", &format!("{}/api/executions/{id}", s.base)]);
    assert_eq!(code, 204);
}

/// Finding 3: an unknown `from_step` is hinted with the body's field, not `--from`; a run
/// of a workflow with several errors names the validate route, not `awf validate`.
#[test]
fn hints_name_the_http_field_and_route() {
    let mut sb = Sandbox::new().unwrap();
    let marker = sb.path().join("flaky.mark");
    let text = flaky(&marker);
    add_workflows(&mut sb, &[("flaky", text.as_str()), ("invalid", INVALID)]);
    let s = start(&sb, &[]);
    let id = start_run(&s, "flaky", "{}");
    wait_status(&s, &id, "failed");
    let (code, body, _) = post(
        &format!("{}/api/executions/{id}/resume", s.base),
        r#"{"from_step":"nonexistent"}"#,
    );
    assert_eq!(code, 422, "{body}");
    let p = json_of(&body);
    let hints = p["hints"].to_string();
    assert!(!hints.contains("--from"), "{p}");
    assert!(
        hints.contains("`from_step` takes `current`, `previous`"),
        "{p}"
    );
    assert!(hints.contains("go"), "names the states: {p}");

    let (code, body, _) = post(&format!("{}/api/workflows/env/invalid/run", s.base), "{}");
    assert_eq!(code, 422, "{body}");
    let p = json_of(&body);
    let detail = p["detail"].as_str().unwrap();
    assert!(!detail.contains("awf validate"), "{p}");
    assert!(
        detail
            .contains("more error(s); `POST /api/workflows/env/invalid/validate` lists them all)"),
        "{p}"
    );
    // The route it names does list them all.
    let (code, body, _) = post(
        &format!("{}/api/workflows/env/invalid/validate", s.base),
        "{}",
    );
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        json_of(&body)["errors"].as_array().unwrap().len(),
        3,
        "{body}"
    );
}
