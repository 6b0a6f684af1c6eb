//! `awf serve` findings of a new user and a breaker, fixed in stop 37, over the real binary
//! with curl: runs started by file path are named by their workflow's name and their
//! workflow is served by run (`GET /api/executions/{id}/workflow`); runs without a history
//! row take their times from their state files; a damaged run is found by a unique prefix
//! as by its full id and the list says it left one out; the events of a recorded run without
//! a transcript end with one `no_events` frame instead of a 404.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use awf_tests::http_serve::Server;
use awf_tests::http_serve::curl;
use awf_tests::http_serve::execution;
use awf_tests::http_serve::json_of;
use awf_tests::http_serve::post;
use awf_tests::http_serve::start;
use serde_json::Value;
use serde_json::json;

/// Two command steps, written outside the server's workflow directories.
const GREETER: &str = "name: greeter
version: \"1.0\"
states:
  initial: greet
  greet:
    type: step
    command: echo hello
    on_success: done
  done:
    type: terminal
";

/// A sandbox whose workflow directory is empty, with `elsewhere/greeter.yaml`.
fn sandbox() -> Sandbox {
    let mut sb = Sandbox::new().unwrap();
    std::fs::create_dir_all(sb.path().join("wf")).unwrap();
    let wf = sb.path().join("wf").display().to_string();
    sb.set_env("AWF_WORKFLOWS_PATH", &wf);
    sb.write("elsewhere/greeter.yaml", GREETER).unwrap();
    sb
}

/// Runs `awf run elsewhere/greeter.yaml` in a terminal; returns the run id.
fn run_by_path(sb: &Sandbox) -> String {
    let r = sb
        .run(&["run", "elsewhere/greeter.yaml", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    r.json().unwrap()["run_id"].as_str().unwrap().to_owned()
}

fn state_file(sb: &Sandbox, id: &str) -> std::path::PathBuf {
    awf_tests::data(sb)
        .join("states")
        .join(format!("{id}.json"))
}

fn get(s: &Server, path: &str) -> (u16, Value) {
    let (code, body, _) = curl(&[&format!("{}{path}", s.base)]);
    (code, json_of(&body))
}

/// A run started by file path (`awf run elsewhere/greeter.yaml`) is named by its workflow's
/// name in `GET /api/executions[/{id}]`, as `/api/history` names it (it said
/// `elsewhere/greeter.yaml`), with the path as `workflow`; and its workflow (for the page's
/// graph) is served by run even though no workflow directory of the server holds it (the
/// page said `workflow not found: elsewhere/greeter.yaml`).
#[test]
fn a_run_by_path_is_named_by_its_workflow_and_its_workflow_is_served_by_run() {
    let sb = sandbox();
    let id = run_by_path(&sb);
    let s = start(&sb, &[]);
    let exec = execution(&s, &id);
    assert_eq!(exec["workflow_name"], "greeter", "{exec}");
    assert_eq!(exec["workflow"], "elsewhere/greeter.yaml", "{exec}");
    let (code, list) = get(&s, "/api/executions");
    assert_eq!(code, 200);
    let row = &list["body"]["executions"][0];
    assert_eq!(row["execution_id"], id.as_str());
    assert_eq!(row["workflow_name"], "greeter", "{row}");
    assert_eq!(row["workflow"], "elsewhere/greeter.yaml", "{row}");
    let (_, hist) = get(&s, "/api/history");
    assert_eq!(hist["body"]["entries"][0]["workflow_name"], "greeter");
    // The run's workflow, by a unique prefix of its id.
    let (code, wf) = get(&s, &format!("/api/executions/{}/workflow", &id[..8]));
    assert_eq!(code, 200, "{wf}");
    let wf = &wf["body"];
    assert_eq!(wf["name"], "greeter", "{wf}");
    assert_eq!(wf["initial"], "greet", "{wf}");
    let names: Vec<&str> = wf["states"]
        .as_array()
        .unwrap()
        .iter()
        .map(|st| st["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["greet", "done"], "{wf}");
    // An unknown run: 404.
    let (code, nf) = get(&s, "/api/executions/ffffffff/workflow");
    assert_eq!(code, 404, "{nf}");
}

/// A run with a state file and no history row (history.db replaced by junk, then `awf
/// run`) has the start, end and duration `awf status` shows (they were null).
#[test]
fn a_run_without_a_history_row_has_its_state_files_times() {
    let sb = sandbox();
    let data = awf_tests::data(&sb);
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("history.db"), "junk, not a database").unwrap();
    let r = sb.run(&["run", "elsewhere/greeter.yaml"]).unwrap();
    assert_eq!(r.code, 4, "{}{}", r.stdout, r.stderr);
    let id = std::fs::read_dir(data.join("states"))
        .unwrap()
        .flatten()
        .find_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .map(str::to_owned)
        })
        .unwrap();
    let st = sb.run(&["status", &id, "-f", "json"]).unwrap();
    assert_eq!(st.code, 0, "{}{}", st.stdout, st.stderr);
    let st = st.json().unwrap();
    assert!(st["started_at"].is_string(), "{st}");
    assert!(st["duration_ms"].is_u64(), "{st}");
    let s = start(&sb, &[]);
    let exec = execution(&s, &id);
    assert_eq!(exec["started_at"], st["started_at"], "{exec}");
    assert_eq!(exec["completed_at"], st["completed_at"], "{exec}");
    assert_eq!(exec["duration_ms"], st["duration_ms"], "{exec}");
    assert_eq!(exec["workflow_name"], "greeter", "{exec}");
    let (_, list) = get(&s, "/api/executions");
    let row = &list["body"]["executions"][0];
    assert_eq!(row["execution_id"], id.as_str());
    assert_eq!(row["started_at"], st["started_at"], "{row}");
    assert_eq!(row["duration_ms"], st["duration_ms"], "{row}");
}

/// A run whose state file is damaged is found by a unique prefix of its id as by the full
/// id: every route says what is wrong with it (500, the state file cannot be read), not
/// `no run with id <prefix>`; the list leaves it out and says so in `warnings`.
#[test]
fn a_damaged_run_is_found_by_a_prefix_and_the_list_says_it_left_it_out() {
    let sb = sandbox();
    let id = run_by_path(&sb);
    let good = run_by_path(&sb);
    let path = state_file(&sb, &id);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    v["status"] = json!("bogus");
    std::fs::write(&path, v.to_string()).unwrap();
    let s = start(&sb, &[]);
    let prefix = &id[..8];
    let base = format!("{}/api/executions/{prefix}", s.base);
    let damaged = |code: u16, body: &str, what: &str| {
        assert_eq!(code, 500, "{what}: {body}");
        let p = json_of(body);
        assert!(
            p["detail"]
                .as_str()
                .unwrap()
                .contains("cannot read the state file"),
            "{what}: {p}"
        );
        assert!(p["detail"].as_str().unwrap().contains(&id), "{what}: {p}");
    };
    let (code, body, _) = curl(&[&base]);
    damaged(code, &body, "GET");
    let (code, body, _) = curl(&[&format!("{base}/events")]);
    damaged(code, &body, "events");
    let (code, body, _) = curl(&["-X", "DELETE", &base]);
    damaged(code, &body, "DELETE");
    let (code, body, _) = post(&format!("{base}/resume"), "{}");
    damaged(code, &body, "resume");
    let (code, body, _) = post(&format!("{base}/respond"), r#"{"approved":true}"#);
    damaged(code, &body, "respond");
    let (code, body, _) = curl(&[&format!("{base}/workflow")]);
    damaged(code, &body, "workflow");
    let (code, list) = get(&s, "/api/executions");
    assert_eq!(code, 200);
    let ids: Vec<&str> = list["body"]["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["execution_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [good.as_str()], "{list}");
    assert_eq!(
        list["body"]["warnings"],
        json!([format!(
            "run {id} is not listed: its state file cannot be read (GET /api/executions/{id} says why)"
        )]),
        "{list}"
    );
}

/// The event stream of a recorded run without a transcript is a 200 that ends at once with
/// one `no_events` frame saying the run's status (it was a 404 `no run with id …` while
/// `GET` of the same id answered the run).
#[test]
fn the_events_of_a_recorded_run_without_a_transcript_say_so_in_one_frame() {
    let sb = sandbox();
    let id = run_by_path(&sb);
    let transcript = awf_tests::data(&sb)
        .join("transcripts")
        .join(format!("{id}.jsonl"));
    std::fs::remove_file(&transcript).unwrap();
    let s = start(&sb, &[]);
    assert_eq!(execution(&s, &id)["status"], "completed");
    let (code, body, ctype) = curl(&[
        "-N",
        &format!("{}/api/executions/{}/events", s.base, &id[..8]),
    ]);
    assert_eq!(code, 200, "{body}");
    assert!(ctype.starts_with("text/event-stream"), "{ctype}");
    let frames: Vec<&str> = body
        .split("\n\n")
        .map(str::trim)
        .filter(|b| !b.is_empty() && !b.starts_with(':'))
        .collect();
    assert_eq!(frames.len(), 1, "{body}");
    let mut lines = frames[0].lines();
    assert_eq!(lines.next(), Some("event: no_events"), "{body}");
    let data = json_of(lines.next().unwrap().strip_prefix("data: ").unwrap());
    assert_eq!(lines.next(), None, "no id: {body}");
    assert_eq!(data["run_id"], id.as_str(), "{data}");
    assert_eq!(data["status"], "completed", "{data}");
    assert_eq!(data["events_recorded"], false, "{data}");
    assert!(
        data["message"]
            .as_str()
            .unwrap()
            .contains("has no recorded events (its transcript is missing)"),
        "{data}"
    );
}
