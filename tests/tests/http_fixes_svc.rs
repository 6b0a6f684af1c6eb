//! `awf serve` findings of the new-user trial, run service and store side, over the built
//! binary with curl: a resumed run's event log goes on losslessly and its `states` cover
//! every attempt (#2, #10), a finished or recorded run's outcome is in GET (#1), runs are
//! named by a unique id prefix (#12), `/api/executions` lists newest first (#13).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use awf_tests::http_serve;
use awf_tests::http_serve::Server;
use awf_tests::http_serve::add_workflows;
use awf_tests::http_serve::execution;
use awf_tests::http_serve::json_of;
use awf_tests::http_serve::start;
use awf_tests::http_serve::wait_status;
use awf_tests::wait_for;
use serde_json::Value;

const HELLO: &str = "name: hello
inputs:
  - name: who
    type: string
    default: world
states:
  initial: greet
  greet:
    type: step
    command: echo hello {{.inputs.who}}
    on_success: done
  done:
    type: terminal
    message: \"greeted {{.inputs.who}}\"
";

const BROKEN: &str = "name: broken
states:
  initial: boom
  boom:
    type: step
    command: echo out; echo bad >&2; exit 3
    on_success: done
  done:
    type: terminal
";

/// Prints 70 000 bytes (over the 64 KiB cap), ending in `END`.
const LOUD: &str = "name: loud
states:
  initial: shout
  shout:
    type: step
    command: \"head -c 70000 /dev/zero | tr '\\\\0' x; echo END\"
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

fn sandbox() -> (Sandbox, std::path::PathBuf) {
    let mut sb = Sandbox::new().unwrap();
    let marker = sb.path().join("marker");
    let flaky = format!(
        "name: flaky\nstates:\n  initial: prep\n  prep:\n    type: step\n    command: echo prep\n    on_success: check\n  check:\n    type: step\n    command: test -f {}\n    on_success: done\n  done:\n    type: terminal\n",
        marker.display()
    );
    add_workflows(
        &mut sb,
        &[
            ("hello", HELLO),
            ("broken", BROKEN),
            ("loud", LOUD),
            ("sleeper", SLEEPER),
            ("flaky", flaky.as_str()),
        ],
    );
    (sb, marker)
}

/// `curl` a request; returns (status, body).
fn curl(args: &[&str]) -> (u16, String) {
    let (code, body, _) = http_serve::curl(args);
    (code, body)
}

fn post(url: &str, body: &str) -> (u16, String) {
    let (code, body, _) = http_serve::post(url, body);
    (code, body)
}

fn start_run(s: &Server, name: &str) -> String {
    http_serve::start_run(s, name, "{}")
}

/// (id, event name) of every frame of a run's stream after `after` (it ends after the
/// run's final event).
fn frames(s: &Server, id: &str, after: u64) -> Vec<(u64, String)> {
    let (code, body) = curl(&[
        "-N",
        &format!("{}/api/executions/{id}/events?after={after}", s.base),
    ]);
    assert_eq!(code, 200, "{body}");
    let mut out = Vec::new();
    for block in body.split("\n\n") {
        let (mut id, mut name) = (None, None);
        for l in block.lines() {
            if let Some(i) = l.strip_prefix("id: ") {
                id = Some(i.trim().parse::<u64>().unwrap());
            } else if let Some(n) = l.strip_prefix("event: ") {
                name = Some(n.trim().to_owned());
            }
        }
        if let (Some(i), Some(n)) = (id, name) {
            out.push((i, n));
        }
    }
    out
}

fn ms_of(rfc3339: &Value) -> u64 {
    let t = awf_domain::timefmt::parse_rfc3339(rfc3339.as_str().unwrap()).unwrap();
    u64::try_from(t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

#[test]
fn a_resumed_runs_event_log_goes_on_after_the_first_attempt_and_states_cover_both() {
    let (sb, marker) = sandbox();
    let s = start(&sb, &[]);
    let id = start_run(&s, "flaky");
    wait_status(&s, &id, "failed");
    let first = frames(&s, &id, 0);
    let last = first.last().unwrap().0;
    assert_eq!(first.last().unwrap().1, "run_finished", "{first:?}");
    std::fs::write(&marker, "").unwrap();
    let (code, body) = post(
        &format!("{}/api/executions/{id}/resume", s.base),
        r#"{"from_step": "current"}"#,
    );
    assert_eq!(code, 200, "{body}");
    wait_status(&s, &id, "completed");
    // The history row (started_at, completed_at) is written a moment after the end.
    let mut done = Value::Null;
    wait_for("the resumed run's history row", || {
        done = execution(&s, &id);
        done["completed_at"].is_string()
    });
    // Reconnecting after the first attempt's last id gives the resumed attempt, numbered on.
    let next = frames(&s, &id, last);
    assert_eq!(
        next.first().unwrap(),
        &(last + 1, "run_started".to_owned()),
        "{next:?}"
    );
    assert_eq!(next.last().unwrap().1, "run_finished", "{next:?}");
    // The first attempt is still replayable, unchanged.
    let all = frames(&s, &id, 0);
    assert_eq!(&all[..first.len()], &first[..]);
    assert_eq!(all.len(), first.len() + next.len());
    // `states` covers the state only the first attempt ran.
    assert_eq!(done["states"]["prep"]["status"], "completed", "{done}");
    assert_eq!(done["states"]["check"]["status"], "completed", "{done}");
    // duration_ms is completed_at − started_at.
    let span = ms_of(&done["completed_at"]) - ms_of(&done["started_at"]);
    assert_eq!(done["duration_ms"].as_u64().unwrap(), span, "{done}");
}

#[test]
fn a_finished_or_recorded_runs_outcome_is_in_get() {
    let (sb, _) = sandbox();
    let s = start(&sb, &[]);
    let ok = start_run(&s, "hello");
    let v = wait_status(&s, &ok, "completed");
    assert_eq!(v["states"]["greet"]["status"], "completed", "{v}");
    assert_eq!(v["states"]["greet"]["exit_code"], 0, "{v}");
    assert_eq!(v["states"]["greet"]["output"], "hello world\n", "{v}");
    assert_eq!(v["states"]["greet"]["truncated"], false, "{v}");
    assert_eq!(v["terminal"], "done", "{v}");
    assert_eq!(v["message"], "greeted world", "{v}");
    assert!(v["error"].is_null(), "{v}");

    let bad = start_run(&s, "broken");
    let v = wait_status(&s, &bad, "failed");
    assert_eq!(v["states"]["boom"]["status"], "failed", "{v}");
    assert_eq!(v["states"]["boom"]["exit_code"], 3, "{v}");
    assert_eq!(v["states"]["boom"]["output"], "out\n", "{v}");
    assert!(v["states"]["boom"]["error"].is_string(), "{v}");
    assert!(
        v["error"]["code"]
            .as_str()
            .unwrap()
            .starts_with("EXECUTION."),
        "{v}"
    );
    assert!(!v["error"]["message"].as_str().unwrap().is_empty(), "{v}");

    let loud = start_run(&s, "loud");
    let v = wait_status(&s, &loud, "completed");
    let out = v["states"]["shout"]["output"].as_str().unwrap();
    assert_eq!(out.len(), 64 << 10, "the last 64 KiB");
    assert!(out.ends_with("xEND\n"), "{}", &out[out.len() - 10..]);
    assert_eq!(v["states"]["shout"]["truncated"], true);

    // A run this server never held (from the terminal): read from its state file.
    let r = sb.run(&["run", "broken", "-f", "json"]).unwrap();
    let rec = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    let v = execution(&s, &rec);
    assert_eq!(v["phase"], "recorded", "{v}");
    assert_eq!(v["states"]["boom"]["status"], "failed", "{v}");
    assert_eq!(v["states"]["boom"]["exit_code"], 3, "{v}");
    assert_eq!(v["states"]["boom"]["output"], "out\n", "{v}");
    assert!(
        v["error"]["code"]
            .as_str()
            .unwrap()
            .starts_with("EXECUTION."),
        "{v}"
    );
}

#[test]
fn get_and_resume_take_a_unique_id_prefix_and_an_unknown_id_is_not_blamed_on_the_process() {
    let (sb, marker) = sandbox();
    let s = start(&sb, &[]);
    let id = start_run(&s, "flaky");
    wait_status(&s, &id, "failed");
    let v = execution(&s, &id[..8]);
    assert_eq!(v["execution_id"], id.as_str(), "{v}");
    std::fs::write(&marker, "").unwrap();
    let (code, body) = post(
        &format!("{}/api/executions/{}/resume", s.base, &id[..8]),
        "",
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(json_of(&body)["body"]["execution_id"], id.as_str());
    wait_status(&s, &id, "completed");

    // Two runs whose ids share a first character: that prefix is ambiguous (422, listing both).
    let mut ids = vec![id];
    let (a, b) = loop {
        let n = start_run(&s, "hello");
        wait_status(&s, &n, "completed");
        if let Some(o) = ids.iter().find(|o| o[..1] == n[..1]) {
            break (o.clone(), n);
        }
        assert!(ids.len() < 40, "no two of {ids:?} share a first character");
        ids.push(n);
    };
    let common = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
    let (code, body) = curl(&[&format!("{}/api/executions/{}", s.base, &a[..common])]);
    assert_eq!(code, 422, "{body}");
    let p = json_of(&body);
    assert_eq!(p["code"], "USER.INPUT.VALIDATION_FAILED", "{body}");
    assert!(body.contains(&a) && body.contains(&b), "{body}");
    // The event stream and respond answer an ambiguous prefix as GET does: the same 422.
    let ambiguous = format!("{}/api/executions/{}", s.base, &a[..common]);
    let (code, events) = curl(&[&format!("{ambiguous}/events")]);
    assert_eq!(code, 422, "{events}");
    assert_eq!(json_of(&events)["detail"], p["detail"], "{events}");
    assert_eq!(json_of(&events)["hints"], p["hints"], "{events}");
    let (code, answer) = post(&format!("{ambiguous}/respond"), r#"{"approved": true}"#);
    assert_eq!(code, 422, "{answer}");
    assert_eq!(json_of(&answer)["detail"], p["detail"], "{answer}");

    for url in [
        format!("{}/api/executions/zz-none", s.base),
        format!("{}/api/executions/zz-none/events", s.base),
    ] {
        let (code, body) = curl(&[&url]);
        assert_eq!(code, 404, "{url}: {body}");
        assert_eq!(
            json_of(&body)["code"],
            "USER.FACADE.RUN_NOT_FOUND",
            "{body}"
        );
        assert!(!body.contains("in this process"), "{url}: {body}");
    }
    let (code, body) = post(
        &format!("{}/api/executions/zz-none/respond", s.base),
        r#"{"approved": true}"#,
    );
    assert_eq!(code, 404, "{body}");
    assert_eq!(json_of(&body)["code"], "USER.FACADE.RUN_NOT_FOUND");
    assert!(!body.contains("in this process"), "{body}");
}

const GATED: &str = "name: gated
states:
  initial: deploy
  deploy:
    type: step
    command: echo deployed
    approval: \"Deploy now?\"
    on_success: done
  done:
    type: terminal
";

/// The SSE frames of `GET <base>/api/executions/<id>/events` followed to the stream's end:
/// (position, event name, data as JSON).
fn stream(s: &Server, id: &str) -> Vec<(u64, String, Value)> {
    http_serve::follow(s, id, &[])
}

/// `GET …/events` and `POST …/respond` took only a full id: a prefix (enough for GET and
/// DELETE) was 404 "no run with id c4d89e23 in this process", with a hint about a TTL.
/// Now every `/api/executions/{id}…` route takes a unique prefix, live or recorded (after a
/// restart), and the stream's events carry the full run id.
#[test]
fn events_and_respond_take_a_unique_id_prefix_and_the_events_carry_the_full_id() {
    let (mut sb, _) = sandbox();
    add_workflows(&mut sb, &[("gated", GATED)]);
    let s = start(&sb, &[]);
    let id = start_run(&s, "gated");
    let prefix = id[..8].to_owned();
    wait_for("the approval to be pending", || {
        execution(&s, &id)["pending"]
            .as_array()
            .is_some_and(|p| p.len() == 1)
    });
    // Followed by its prefix while it waits: the stream ends with the run.
    let live = {
        let base = s.base.clone();
        let prefix = prefix.clone();
        std::thread::spawn(move || {
            let (code, body) = curl(&["-N", &format!("{base}/api/executions/{prefix}/events")]);
            (code, body)
        })
    };
    let (code, body) = post(
        &format!("{}/api/executions/{prefix}/respond", s.base),
        r#"{"approved": true}"#,
    );
    assert_eq!(code, 204, "{body}");
    wait_status(&s, &id, "completed");
    let (code, body) = live.join().unwrap();
    assert_eq!(code, 200, "{body}");
    let live_frames = http_serve::parse_frames(&body);
    let full = stream(&s, &id);
    assert_eq!(live_frames, full, "the prefix's stream is the full id's");
    let names: Vec<&str> = full.iter().map(|f| f.1.as_str()).collect();
    assert_eq!(names.first(), Some(&"run_started"), "{names:?}");
    assert_eq!(names.last(), Some(&"run_finished"), "{names:?}");
    assert!(names.contains(&"interaction_required"), "{names:?}");
    assert!(names.contains(&"interaction_resolved"), "{names:?}");
    for (pos, name, data) in &full {
        assert_eq!(data["run_id"], id.as_str(), "{pos} {name}: {data}");
    }
    // A later answer through the prefix reaches the run: it has ended (409, not 404).
    let (code, body) = post(
        &format!("{}/api/executions/{prefix}/respond", s.base),
        r#"{"approved": true}"#,
    );
    assert_eq!(code, 409, "{body}");
    assert!(body.contains(&id), "{body}");
    drop(s);

    // After a restart the run is known only from the store: the prefix still works.
    let s = start(&sb, &[]);
    let recorded = stream(&s, &prefix);
    assert_eq!(recorded.len(), full.len(), "{recorded:?}");
    for ((_, name, data), (_, want_name, want)) in recorded.iter().zip(&full) {
        assert_eq!(name, want_name);
        assert_eq!(data["run_id"], id.as_str(), "{data}");
        assert_eq!(data["seq"], want["seq"], "{data}");
    }
    let (code, body) = post(
        &format!("{}/api/executions/{prefix}/respond", s.base),
        r#"{"approved": true}"#,
    );
    assert_eq!(code, 409, "{body}");
    assert!(!body.contains("no run with id"), "{body}");
}

#[test]
fn executions_are_listed_live_first_then_newest_first() {
    let (sb, _) = sandbox();
    let s = start(&sb, &[]);
    let one = start_run(&s, "hello");
    wait_status(&s, &one, "completed");
    let two = start_run(&s, "hello");
    wait_status(&s, &two, "completed");
    let live = start_run(&s, "sleeper");
    wait_status(&s, &live, "running");
    let (code, body) = curl(&[&format!("{}/api/executions", s.base)]);
    assert_eq!(code, 200, "{body}");
    let got: Vec<String> = json_of(&body)["body"]["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["execution_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(got, vec![live.clone(), two, one]);
    let (code, _) = curl(&["-X", "DELETE", &format!("{}/api/executions/{live}", s.base)]);
    assert_eq!(code, 204);
}

/// `awf serve` keeps its lock on history.db when a request opens the history again: a
/// second store used to read the file's header through a descriptor of its own, whose close
/// dropped every POSIX lock of the process on it, SQLite's included; another client then
/// found the database unused and removed the WAL the server still wrote to (a breaker lost
/// runs that way).
#[test]
fn serving_a_history_request_keeps_the_servers_lock_on_the_database() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("hello", HELLO)]);
    let s = start(&sb, &[]);
    let id = http_serve::start_run(&s, "hello", "{}");
    wait_status(&s, &id, "completed");
    let db = awf_tests::data(&sb).join("history.db");
    let locks_of_server = || {
        use std::os::unix::fs::MetadataExt;
        let inode = std::fs::metadata(&db).unwrap().ino();
        let pid = s.child.id();
        std::fs::read_to_string("/proc/locks")
            .unwrap()
            .lines()
            .filter(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                // `1: POSIX ADVISORY READ 1234 08:01:5678 …`: pid, then dev:inode.
                f.len() > 5
                    && f[4] == pid.to_string()
                    && f[5].rsplit(':').next() == Some(inode.to_string().as_str())
            })
            .count()
    };
    let before = locks_of_server();
    assert!(before > 0, "the server holds no lock on {}", db.display());
    let (code, _) = curl(&[&format!("{}/api/executions", s.base)]);
    assert_eq!(code, 200);
    let (code, _) = curl(&[&format!("{}/api/history", s.base)]);
    assert_eq!(code, 200);
    assert_eq!(locks_of_server(), before);
}
