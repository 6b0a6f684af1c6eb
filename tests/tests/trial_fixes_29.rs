//! `awf serve` (HTTP) defects found by a new user and a breaker on the release build,
//! fixed in stop 39, over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Stdio;

use awf_tests::Sandbox;
use awf_tests::http_serve::Server;
use awf_tests::http_serve::add_workflows;
use awf_tests::http_serve::curl;
use awf_tests::http_serve::execution;
use awf_tests::http_serve::json_of;
use awf_tests::http_serve::start;
use awf_tests::http_serve::start_run;
use awf_tests::http_serve::wait_status;
use serde_json::Value;

const TWO: &str = "name: two\nstates:\n  initial: a\n  a: {type: step, command: 'echo one', on_success: b}\n  b: {type: step, command: 'echo two', on_success: done}\n  done: {type: terminal}\n";

const NAP: &str = "name: nap\nstates:\n  initial: a\n  a: {type: step, command: 'sleep 2', on_success: done}\n  done: {type: terminal}\n";

/// The raw text of `GET /api/executions/{id}/events` with `Last-Event-ID: last` (200).
fn events_after(s: &Server, id: &str, last: &str) -> String {
    let (code, text, ctype) = curl(&[
        "-N",
        "--max-time",
        "30",
        "-H",
        &format!("Last-Event-ID: {last}"),
        &format!("{}/api/executions/{id}/events", s.base),
    ]);
    assert_eq!(code, 200, "{text}");
    assert!(ctype.starts_with("text/event-stream"), "{ctype}");
    text
}

/// The `event:` names of an SSE text, in order.
fn names(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .map(str::to_owned)
        .collect()
}

/// The last `id:` of a whole stream of run `id` (read from its start).
fn last_id(s: &Server, id: &str) -> String {
    let text = events_after(s, id, "0");
    assert_eq!(
        names(&text).last().map(String::as_str),
        Some("run_finished")
    );
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix("id: "))
        .unwrap()
        .to_owned()
}

/// Reconnecting with `Last-Event-ID` at or past the end of a finished run's log ends the
/// stream at once, as a stream read to `run_finished` ends: nothing follows, and no false
/// `no_events` frame says the transcript is cut (breaker: an `EventSource` reconnecting
/// after the end got "the recorded events … stop before its end"). For a run in memory, a
/// recorded one (after a restart) and one `awf run` made; a live run's stream resumed past
/// its end ends once it finishes. A transcript really cut still gets the frame.
#[test]
fn reconnecting_at_or_past_the_end_of_a_finished_run_just_ends() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("two", TWO), ("nap", NAP)]);
    let clean = |s: &Server, id: &str, last: &str| {
        let text = events_after(s, id, last);
        assert_eq!(names(&text), Vec::<String>::new(), "after {last}: {text}");
        assert!(text.starts_with(": open"), "{text}");
    };
    let s = start(&sb, &[]);
    let id = start_run(&s, "two", "{}");
    wait_status(&s, &id, "completed");
    let last = last_id(&s, &id);
    clean(&s, &id, &last);
    clean(&s, &id, "1000");
    // One before the end: the end again, and nothing more.
    let before = (last.parse::<u64>().unwrap() - 1).to_string();
    assert_eq!(names(&events_after(&s, &id, &before)), ["run_finished"]);

    // A live run, resumed past its end: the stream waits, then ends without a frame.
    let live = start_run(&s, "nap", "{}");
    wait_status(&s, &live, "running");
    clean(&s, &live, "1000");
    assert_eq!(execution(&s, &live)["status"], "completed");
    drop(s);

    // Recorded runs: the server's, after a restart, and one `awf run` made.
    let r = sb.run(&["run", "two"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = start(&sb, &[]);
    clean(&s, &id, &last);
    clean(&s, &id, "1000");
    let (_, body, _) = curl(&[&format!("{}/api/executions", s.base)]);
    let list = json_of(&body);
    let cli = list["body"]["executions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["execution_id"].as_str())
        .find(|e| *e != id && *e != live)
        .unwrap()
        .to_owned();
    let last = last_id(&s, &cli);
    clean(&s, &cli, &last);
    clean(&s, &cli, "1000");

    // A cut transcript still says so, wherever the client resumes.
    let file = awf_tests::data(&sb)
        .join("transcripts")
        .join(format!("{cli}.jsonl"));
    let text = std::fs::read_to_string(&file).unwrap();
    let kept: String = text.lines().take(2).map(|l| format!("{l}\n")).collect();
    std::fs::write(&file, kept).unwrap();
    for at in ["1", "2", "1000"] {
        let text = events_after(&s, &cli, at);
        assert_eq!(names(&text).last().unwrap(), "no_events", "{text}");
        assert!(text.contains("stop before its end"), "{text}");
    }
}

const K9: &str = "name: k9\nstates:\n  initial: a\n  a: {type: step, command: 'echo a-done', on_success: b}\n  b: {type: step, command: 'sleep 3147', on_success: c}\n  c: {type: step, command: 'echo c', on_success: done}\n  done: {type: terminal}\n";

/// `(state, status)` of an execution's `states`.
fn statuses(v: &Value) -> Vec<(String, String)> {
    v["states"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, s)| (k.clone(), s["status"].as_str().unwrap_or("").to_owned()))
        .collect()
}

/// A run whose `awf run` was killed (SIGKILL) in `b`, resumed over HTTP from `c`: once it
/// completed, `GET /api/executions/{id}` shows no state `running` and agrees with `awf
/// status` (a and c; b never finished, and the state file does not hold it) (breaker: b
/// was `running` in a completed run until the server restarted).
#[test]
fn a_killed_runs_unfinished_state_is_not_running_after_a_resume() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("k9", K9)]);
    let s = start(&sb, &[]);
    let mut child = sb
        .cmd(&["run", "k9"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    awf_tests::wait_for("`sleep 3147` to start", || {
        sb.processes().iter().any(|p| p.cmdline == "sleep 3147")
    });
    let id = awf_tests::wait_for_state(&sb, "the run to be recorded", |v| {
        v["workflow"] == "k9" && v["owner_pid"].is_u64()
    });
    child.kill().unwrap();
    child.wait().unwrap();
    sb.kill_processes(Some("sleep 3147"));

    let (code, body, _) = curl(&[
        "-X",
        "POST",
        "-H",
        "Content-Type: application/json",
        "-d",
        r#"{"from_step":"c"}"#,
        &format!("{}/api/executions/{id}/resume", s.base),
    ]);
    assert_eq!(code, 200, "{body}");
    let done = wait_status(&s, &id, "completed");
    let want = |v: &[(&str, &str)]| {
        v.iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect::<Vec<_>>()
    };
    let expected = want(&[("a", "completed"), ("c", "completed")]);
    assert_eq!(statuses(&done), expected, "{done}");
    let cli = sb.run(&["status", &id, "-f", "json"]).unwrap();
    assert_eq!(cli.code, 0, "{}", cli.stderr);
    assert_eq!(statuses(&cli.json().unwrap()), expected);
    // The run read back from its files says the same.
    drop(s);
    let s = start(&sb, &[]);
    assert_eq!(statuses(&execution(&s, &id)), expected);
}

const STEPP: &str = "name: stepp\nstates:\n  initial: a\n  a: {type: step, command: echo, on_success: c}\n  c: {type: stepp, command: echo}\n";

/// A state whose `type:` is misspelt is shown as written: `GET /api/workflows/{scope}/{name}`
/// gives it type `stepp`, not a terminal, with the error in `errors`; `awf diagram` draws
/// the workflow (the state a plain node) after a `WARN` naming the error, as for other
/// validation errors (breaker: the API presented it as a success terminal, and `diagram`
/// exited 2 with no DOT).
#[test]
fn a_misspelt_step_type_is_shown_and_drawn_as_written() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("stepp", STEPP)]);
    let s = start(&sb, &[]);
    let (code, body, _) = curl(&[&format!("{}/api/workflows/env/stepp", s.base)]);
    assert_eq!(code, 200, "{body}");
    let v = json_of(&body)["body"].clone();
    let c = v["states"]
        .as_array()
        .unwrap()
        .iter()
        .find(|st| st["name"] == "c")
        .unwrap()
        .clone();
    assert_eq!(c["type"], "stepp", "{v}");
    assert_eq!(c["terminal"], false, "{v}");
    assert!(c.get("terminal_status").is_none(), "{v}");
    assert_eq!(
        v["errors"],
        serde_json::json!(["states.c.type: unknown step type: stepp"]),
        "{v}"
    );

    let r = sb.run(&["diagram", "wf/stepp.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.starts_with("digraph \"stepp\" {"), "{}", r.stdout);
    assert!(
        r.stdout.contains("  \"c\" [label=\"c\"];\n"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("  \"a\" -> \"c\";\n"), "{}", r.stdout);
    assert!(
        r.stderr.starts_with("WARN workflow 'stepp' is invalid: ")
            && r.stderr.contains("unknown step type: stepp"),
        "{}",
        r.stderr
    );
    let j = sb
        .run(&["diagram", "wf/stepp.yaml", "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(
        j["nodes"][1],
        serde_json::json!({"name": "c", "label": "c", "type": "stepp"})
    );
    // A file that is not YAML still cannot be drawn.
    sb.write("wf/syntax.yaml", "name: x\nstates: [\n").unwrap();
    let r = sb.run(&["diagram", "wf/syntax.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
}

const RULES: &str = "name: rules\ninputs:\n  - {name: n, type: integer, validation: {min: 1, max: 10}}\n  - {name: r, type: number, validation: {min: 0.5}}\n  - {name: v, type: string, default: '1', validation: {pattern: '^[0-9]+$', enum: ['1', '2']}}\n  - {name: f, type: string, default: a.txt, validation: {file_exists: true, file_extension: [.txt]}}\nstates:\n  initial: a\n  a: {type: step, command: echo, on_success: done}\n  done: {type: terminal}\n";

/// `GET /api/workflows/{scope}/{name}` lists each input's rules (`pattern`, `min`, `max`,
/// `file_exists`, `file_extension`, as the YAML's `validation:` keys), and the 422 of a value
/// that breaks one says that route, not `awf run <workflow> --help` (breaker: the hint sent
/// HTTP clients to a route that did not list the rules).
#[test]
fn the_workflow_route_lists_input_rules_and_the_422_names_it() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("rules", RULES)]);
    sb.write("a.txt", "x").unwrap();
    let s = start(&sb, &[]);
    let (code, body, _) = curl(&[&format!("{}/api/workflows/env/rules", s.base)]);
    assert_eq!(code, 200, "{body}");
    let inputs = json_of(&body)["body"]["inputs"].clone();
    assert_eq!(
        inputs,
        serde_json::json!([
            {"name": "n", "type": "integer", "required": false, "min": 1, "max": 10},
            {"name": "r", "type": "number", "required": false, "min": 0.5},
            {"name": "v", "type": "string", "required": false, "default": "1",
             "enum_values": ["1", "2"], "pattern": "^[0-9]+$"},
            {"name": "f", "type": "string", "required": false, "default": "a.txt",
             "file_exists": true, "file_extension": [".txt"]},
        ])
    );
    let (code, body, _) = awf_tests::http_serve::post(
        &format!("{}/api/workflows/env/rules/run", s.base),
        r#"{"inputs": {"n": 100}}"#,
    );
    assert_eq!(code, 422, "{body}");
    let p = json_of(&body);
    let hints = p["hints"].as_array().unwrap();
    assert!(
        hints
            .iter()
            .any(|h| h.as_str().unwrap().starts_with(
                "GET /api/workflows/env/rules lists each input with its type and rules"
            )),
        "{p}"
    );
    assert!(!body.contains("awf run"), "{body}");
}

/// A `POST …/run` body that starts with a UTF-8 byte-order mark is read (RFC 8259 §8.1 lets
/// a parser ignore it; the workflow loader and `mcp-serve` skip it too); a UTF-16 body is a
/// 400 that says so (breaker: `expected value at line 1 column 1`, the mark not named).
#[test]
fn a_json_body_after_a_byte_order_mark_is_read() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("two", TWO), ("rules", RULES)]);
    sb.write("a.txt", "x").unwrap();
    sb.write("bom.json", "\u{feff}{\"inputs\": {\"n\": 3}}")
        .unwrap();
    let mut utf16 = vec![0xFF, 0xFE];
    for u in "{}".encode_utf16() {
        utf16.extend(u.to_le_bytes());
    }
    std::fs::write(sb.path().join("utf16.json"), utf16).unwrap();
    let s = start(&sb, &[]);
    let send = |file: &str, name: &str| {
        let data = format!("@{}", sb.path().join(file).display());
        curl(&[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data-binary",
            &data,
            &format!("{}/api/workflows/env/{name}/run", s.base),
        ])
    };
    let (code, body, _) = send("bom.json", "rules");
    assert_eq!(code, 202, "{body}");
    let id = json_of(&body)["body"]["execution_id"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_status(&s, &id, "completed");
    // The inputs after the mark were read: a value that breaks a rule is still refused.
    sb.write("bom.json", "\u{feff}{\"inputs\": {\"n\": 30}}")
        .unwrap();
    let (code, body, _) = send("bom.json", "rules");
    assert_eq!(code, 422, "{body}");
    let (code, body, _) = send("utf16.json", "two");
    assert_eq!(code, 400, "{body}");
    let p = json_of(&body);
    assert!(p["detail"].as_str().unwrap().contains("UTF-16"), "{p}");
    assert_eq!(p["hints"][0], "send the body encoded as UTF-8", "{p}");
}
