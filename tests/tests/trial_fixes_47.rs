//! Fixes of the h6 trial (a full disk at a run's end, the event stream replayed from the
//! record), over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use serde_json::Value;
use serde_json::json;

/// A step printing about 1.2 MB (far over the 64 KiB a state file keeps inline).
const BIG: &str = "name: big
states:
  initial: s
  s:
    type: step
    command: seq 1 200000
    on_success: done
  done: {type: terminal}
";

/// `history -f json`'s (workflow, status) rows, `status -f json`'s status and whether
/// `resume --list` lists the run: what the three commands say of run `id`.
fn views(sb: &Sandbox, id: &str) -> (Vec<(String, String)>, String, bool) {
    let h = sb.run(&["history", "-f", "json"]).unwrap();
    let rows: Value = serde_json::from_str(&h.stdout).unwrap();
    let rows = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["workflow_name"].as_str().unwrap().to_owned(),
                r["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let st = sb.run(&["status", id]).unwrap();
    let status = st
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("Status:"))
        .unwrap_or("")
        .trim()
        .to_owned();
    let list = sb.run(&["resume", "--list"]).unwrap();
    (rows, status, list.stdout.contains(id))
}

/// A step output that cannot go to its own file (the outputs directory is a plain file,
/// as a full disk fails it) is kept in the state file cut to its first 64 KiB, which
/// says so: the state file was 1,489,968 bytes, and on a full disk its write failed too.
/// History, status and resume agree that the run completed.
#[test]
fn an_output_that_cannot_be_written_is_kept_cut_and_the_run_end_recorded() {
    let sb = Sandbox::new().unwrap();
    let data = awf_tests::data(&sb);
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("outputs"), "not a directory").unwrap();
    let r = sb.run_workflow("big.yaml", BIG, &[]).unwrap();
    assert_eq!(r.code, 4, "{}{}", r.stdout, r.stderr);
    let id = awf_tests::run_id_in(&r.stderr).unwrap();
    assert!(
        r.stderr.contains(
            &format!("the run succeeded but its record could not be written (1 failure(s)): cannot write the directory {}: Not a directory (os error 20); the record keeps the first 64 KiB of step s's stdout\n", data.join("outputs").join(&id).display())
        ),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains(&format!(
            "the run's end was recorded (`awf status {id}` shows it)"
        )),
        "{}",
        r.stderr
    );
    let state = data.join("states").join(format!("{id}.json"));
    let size = std::fs::metadata(&state).unwrap().len();
    assert!(size < 80_000, "{size}");
    let v = awf_tests::read_state_file(&state).unwrap();
    let out = v["states"]["s"]["output"].as_str().unwrap();
    let whole: String = (1..=200_000).map(|n| format!("{n}\n")).collect();
    assert_eq!(out.len(), 65_536);
    assert_eq!(out, &whole[..65_536]);
    assert_eq!(
        views(&sb, &id),
        (
            vec![("big".to_owned(), "completed".to_owned())],
            "completed".to_owned(),
            false
        )
    );
}

/// Under `ulimit -f` awf was killed by SIGXFSZ (exit 153, no word, the run left
/// `running`): the failed write is reported, the run's end recorded; a step still gets
/// SIGXFSZ as outside awf (not blocked, killed writing past the limit: 128 + 25).
#[test]
fn a_file_size_limit_fails_writes_without_killing_awf_and_steps_keep_the_signal() {
    let sb = Sandbox::new().unwrap();
    sb.write("big.yaml", BIG).unwrap();
    sb.write(
        "child.yaml",
        "name: child\nstates:\n  initial: s\n  s:\n    type: step\n    command: 'grep SigBlk /proc/self/status > mask; head -c 400000 /dev/zero > big.bin; echo $? > rc'\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    let under_limit = |file: &str| {
        let mut c = sb.cmd(&["run", file]);
        let prog = c.get_program().to_owned();
        let args: Vec<_> = c.get_args().map(ToOwned::to_owned).collect();
        // bash: `ulimit -f` counts 1024-byte blocks (200 KiB).
        let mut sh = std::process::Command::new("bash");
        sh.arg("-c")
            .arg("ulimit -f 200; exec \"$@\"")
            .arg("bash")
            .arg(prog)
            .args(args);
        for (k, v) in c.get_envs() {
            match v {
                Some(v) => sh.env(k, v),
                None => sh.env_remove(k),
            };
        }
        if let Some(d) = c.get_current_dir() {
            sh.current_dir(d);
        }
        let _ = &mut c;
        awf_tests::Run::from(sh.output().unwrap())
    };
    let r = under_limit("big.yaml");
    assert_eq!(r.code, 4, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains(
            "File too large (os error 27); the record keeps the first 64 KiB of step s's stdout"
        ),
        "{}",
        r.stderr
    );
    let id = awf_tests::run_id_in(&r.stderr).unwrap();
    assert_eq!(
        views(&sb, &id),
        (
            vec![("big".to_owned(), "completed".to_owned())],
            "completed".to_owned(),
            false
        )
    );
    let r = under_limit("child.yaml");
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        std::fs::read_to_string(sb.path().join("mask")).unwrap(),
        "SigBlk:\t0000000000000000\n"
    );
    assert_eq!(
        std::fs::read_to_string(sb.path().join("rc")).unwrap(),
        "153\n"
    );
    assert_eq!(
        std::fs::metadata(sb.path().join("big.bin")).unwrap().len(),
        204_800
    );
}

/// A run whose end cannot be written to its state file (here a directory took its place
/// during the run) is not `completed` in the history: history wrote its end although the
/// state file (and so `awf status` and `awf resume`) did not have it. It says `running`,
/// with no `workflow.completed` audit line.
#[test]
fn no_history_end_when_the_state_file_end_is_not_written() {
    let sb = Sandbox::new().unwrap();
    let r = sb
        .run_workflow(
            "blk.yaml",
            "name: blk\nstates:\n  initial: s\n  s:\n    type: step\n    command: 'for f in \"$XDG_DATA_HOME\"/awf/states/*.json; do rm \"$f\"; mkdir -p \"$f/x\"; done'\n    on_success: done\n  done: {type: terminal}\n",
            &[],
        )
        .unwrap();
    assert_eq!(r.code, 4, "{}{}", r.stdout, r.stderr);
    let id = awf_tests::run_id_in(&r.stderr).unwrap();
    assert!(
        r.stderr.contains(&format!(
            "(1 failure(s)): cannot write the state file {}: Is a directory (os error 21)\n",
            awf_tests::data(&sb)
                .join("states")
                .join(format!("{id}.json"))
                .display()
        )),
        "{}",
        r.stderr
    );
    let h = sb.run(&["history", "-f", "json"]).unwrap();
    let rows: Value = serde_json::from_str(&h.stdout).unwrap();
    assert_eq!(rows[0]["id"], id.as_str(), "{rows}");
    assert_eq!(rows[0]["status"], "running", "{rows}");
    let audit = std::fs::read_to_string(awf_tests::data(&sb).join("audit.jsonl")).unwrap();
    assert!(audit.contains("workflow.started"), "{audit}");
    assert!(!audit.contains("workflow.completed"), "{audit}");
}

/// A failing step (its failure routed on), then an approval-gated one.
const FAIL_THEN_GATE: &str = "name: fg
states:
  initial: bad
  bad:
    type: step
    command: echo oops; exit 3
    on_success: gate
    on_failure: gate
  gate:
    type: step
    command: echo shipped
    approval: {message: Ship it?}
    on_success: done
  done: {type: terminal}
";

/// The frames of a stream, with the `id` of each.
fn frames_json(frames: &[awf_tests::http_serve::Frame]) -> Vec<Value> {
    frames
        .iter()
        .map(|(id, ev, data)| json!({"id": id, "event": ev, "data": data}))
        .collect()
}

/// `awf serve --run-ttl 1s`: a run's event stream read live, then read again once the run
/// left memory (replayed from its record), is the same stream: every frame, every field.
/// The replay lacked a `step_finished`'s `error_code` and `approval`, gave a gated step's
/// `started_at` as before its approval, lacked `run_finished`'s `states.*.error_code`, and
/// gave `run_started.pid` 0.
#[test]
fn the_replayed_event_stream_is_the_live_one() {
    use awf_tests::http_serve::*;
    let sb = sandbox_with(&[("fg", FAIL_THEN_GATE)]);
    let s = start(&sb, &["--run-ttl", "1s"]);
    let server_pid = s.child.id();
    let id = start_run(&s, "fg", "{}");
    // The stream is read live from the start, while the run waits at the gate.
    let url = format!("{}/api/executions/{id}/events", s.base);
    let live_out = sb.path().join("live.sse");
    let mut reader = std::process::Command::new("curl")
        .args(["-s", "-N", "--max-time", "120", "-o"])
        .arg(&live_out)
        .arg(&url)
        .spawn()
        .unwrap();
    let mut pending = Value::Null;
    awf_tests::wait_for("the approval request", || {
        pending = execution(&s, &id)["pending"].clone();
        pending.as_array().is_some_and(|a| !a.is_empty())
    });
    awf_tests::wait_for("the live stream to have the request", || {
        std::fs::read_to_string(&live_out).is_ok_and(|t| t.contains("interaction_required"))
    });
    let rid = pending[0]["request_id"].as_str().unwrap().to_owned();
    let (code, body, _) = post(
        &format!("{}/api/executions/{id}/respond", s.base),
        &json!({"request_id": rid, "option": "approve"}).to_string(),
    );
    assert_eq!(code, 204, "{body}");
    let status = reader.wait().unwrap();
    assert!(status.success(), "{status}");
    let live = parse_frames(&std::fs::read_to_string(&live_out).unwrap());
    // Once the run left memory, its stream is replayed from the record.
    awf_tests::wait_for("the run to be read from the record", || {
        execution(&s, &id)["phase"] == "recorded"
    });
    let cached = follow(&s, &id, &[]);
    // A server that never held the run replays it from the record alone (the one above
    // may render the frames it sent live again).
    drop(s);
    let s = start(&sb, &[]);
    let replayed = follow(&s, &id, &[]);
    assert_eq!(
        frames_json(&cached),
        frames_json(&replayed),
        "cached vs replayed"
    );
    let names: Vec<&str> = live.iter().map(|f| f.1.as_str()).collect();
    assert_eq!(
        names,
        [
            "run_started",
            "step_started",
            "output_chunk",
            "step_finished",
            "step_started",
            "interaction_required",
            "interaction_resolved",
            "output_chunk",
            "step_finished",
            "run_finished"
        ],
        "{live:?}"
    );
    let finished = &live[3].2["event"]["state"];
    assert_eq!(
        finished["error_code"], "EXECUTION.COMMAND.FAILED",
        "{finished}"
    );
    let gated = &live[8].2["event"]["state"];
    assert_eq!(gated["approval"], "approve", "{gated}");
    let pid = live[0].2["event"]["pid"].as_u64().unwrap();
    assert_eq!(pid, u64::from(server_pid), "{}", live[0].2);
    let (live, replayed) = (frames_json(&live), frames_json(&replayed));
    assert_eq!(live.len(), replayed.len(), "{live:#?}\n{replayed:#?}");
    for (l, r) in live.iter().zip(&replayed) {
        assert_eq!(l, r, "live vs replayed");
    }
}
