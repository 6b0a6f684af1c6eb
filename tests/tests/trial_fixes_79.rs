//! Fixes of stop 46 made beside the helpers' (what this stop's trials found), over the real
//! binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

/// Chaos trial: `awf status <child id>` of a sub-workflow run whose awf process was killed
/// said "`awf resume` continues it", and `awf resume <child id>` is refused (a child run is
/// continued by resuming its parent). The status names the parent run to resume.
#[test]
fn a_killed_child_runs_status_names_the_parent_to_resume() {
    use std::process::Stdio;
    let sb = Sandbox::new().unwrap();
    sb.write(
        "sub.yaml",
        "name: sub\nstates:\n  initial: w\n  w: {type: step, command: 'sleep 1079', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let wf = sb
        .write(
            "top.yaml",
            "name: top\nstates:\n  initial: call\n  call: {type: call_workflow, workflow: sub.yaml, on_success: done}\n  done: {type: terminal}\n",
        )
        .unwrap();
    let mut child = sb
        .cmd(&["run", wf.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let sub = awf_tests::wait_for_state(&sb, "the sub-workflow run to be at w", |v| {
        v["current_state"] == "w" && v["parent_run_id"].is_string()
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = sb.kill_processes(Some("sleep 1079"));
    let snap = awf_tests::read_state_file(&awf_tests::data(&sb).join(format!("states/{sub}.json")))
        .unwrap();
    let parent = snap["parent_run_id"].as_str().unwrap().to_owned();
    let status = sb.run(&["status", &sub]).unwrap();
    assert_eq!(status.code, 0, "{}", status.stderr);
    assert!(
        status.stdout.contains(&format!(
            "Status:    running (its awf process is gone; `awf resume {parent}`, its parent run, continues it)"
        )),
        "{}",
        status.stdout
    );
    // The parent's own status keeps the plain form.
    let top = sb.run(&["status", &parent]).unwrap();
    assert!(
        top.stdout.contains(&format!(
            "Status:    running (its awf process is gone; `awf resume {parent}` continues it)"
        )),
        "{}",
        top.stdout
    );
}

/// Chaos trial: a transcript cut in the middle of a line (awf killed in a write, a full
/// disk) was appended to as it was: the resume's `run.started` joined the torn line into one
/// invalid JSON line and its seq was lost. The torn tail is cut first: every line parses,
/// and the seqs go on from the last whole line, one by one.
#[test]
fn a_resume_cuts_a_torn_transcript_line_before_it_appends() {
    use std::process::Stdio;
    let sb = Sandbox::new().unwrap();
    sb.write(
        "waits.yaml",
        "name: waits\nstates:\n  initial: a\n  a: {type: step, command: 'echo a', on_success: c}\n  c: {type: step, command: 'while [ ! -f go ]; do sleep 0.05; done; echo c', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let mut child = sb
        .cmd(&["run", "waits.yaml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let id = awf_tests::wait_for_state(&sb, "the run to be in c", |v| {
        v["current_state"] == "c" && v["states"]["a"]["status"] == "completed"
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let transcript = awf_tests::data(&sb).join(format!("transcripts/{id}.jsonl"));
    let text = std::fs::read_to_string(&transcript).unwrap();
    assert!(text.ends_with('\n') && text.lines().count() >= 3, "{text}");
    // The last line loses its end, as a write stopped midway leaves it.
    let torn = &text[..text.len() - 15];
    std::fs::write(&transcript, torn).unwrap();
    std::fs::write(sb.path().join("go"), "").unwrap();
    let r = sb.run(&["resume", &id]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let after = std::fs::read_to_string(&transcript).unwrap();
    let whole = &torn[..=torn.rfind('\n').unwrap()];
    assert!(after.starts_with(whole), "{after}");
    let seqs: Vec<u64> = after
        .lines()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            v["seq"].as_u64().unwrap()
        })
        .collect();
    let expected: Vec<u64> = (1..=seqs.len() as u64).collect();
    assert_eq!(seqs, expected, "{after}");
    assert!(after.contains("\"run.started\""), "{after}");
    assert!(
        after.lines().last().unwrap().contains("\"run.completed\""),
        "{after}"
    );
}
