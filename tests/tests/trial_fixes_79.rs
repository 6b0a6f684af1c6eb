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
