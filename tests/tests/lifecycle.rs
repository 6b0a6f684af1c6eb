//! Run lifecycle through the binary: state files, `awf resume`, history, status, audit trail,
//! transcripts, and many runs at once on one data root.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Stdio;

use awf_tests::Sandbox;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

use awf_tests::data;
use awf_tests::wait_for_state;

#[test]
fn sigkill_mid_run_then_resume_finishes_without_rerunning_earlier_steps() {
    let sb = Sandbox::new().unwrap();
    let dir = sb.path().display().to_string();
    let mut child = sb
        .cmd(&["run", "killable", "-i", &format!("dir={dir}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the run is recorded as being in state `two`.
    let run_id = wait_for_state(&sb, "state file at `two`", |v| {
        v["current_state"] == json!("two")
    });
    child.kill().unwrap();
    child.wait().unwrap();
    // The `sleep 37` of the killed run is an orphan now; stop it.
    // Only this sandbox's own processes (environment marker), never another test's.
    sb.kill_processes(Some("sleep 37"));
    std::fs::write(sb.path().join("go"), "").unwrap();

    let list = sb.run(&["resume", "--list", "-f", "json"]).unwrap();
    assert!(list.stdout.contains(&run_id), "{}", list.stdout);
    let r = sb.run(&["resume", &run_id, "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(doc["run_id"], json!(run_id));
    assert_eq!(doc["status"], json!("success"));
    assert_eq!(
        std::fs::read_to_string(sb.path().join("log")).unwrap(),
        "one\nthree\n"
    );

    let h = sb.run(&["history", "-f", "json"]).unwrap();
    let rows: Value = serde_json::from_str(&h.stdout).unwrap();
    assert_eq!(
        rows.as_array().map(Vec::len),
        Some(1),
        "one row per run: {rows}"
    );
    assert_eq!(rows[0]["status"], json!("completed"));
    let again = sb.run(&["resume", &run_id]).unwrap();
    assert_eq!(
        again.code, 1,
        "a finished run is not resumable: {}",
        again.stderr
    );
}

#[test]
fn history_filters_stats_and_status() {
    let sb = Sandbox::new().unwrap();
    assert_eq!(sb.run(&["run", "continue-on-error"]).unwrap().code, 0);
    assert_eq!(sb.run(&["run", "unrouted"]).unwrap().code, 3);
    let r = sb.run(&["run", "inline-failure", "-f", "json"]).unwrap();
    let failed_id = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();

    let all: Value =
        serde_json::from_str(&sb.run(&["history", "-f", "json"]).unwrap().stdout).unwrap();
    assert_eq!(all.as_array().map(Vec::len), Some(3));
    assert_eq!(all[0]["id"], json!(failed_id), "newest first");
    let failures: Value = serde_json::from_str(
        &sb.run(&["history", "-f", "json", "--status", "failure"])
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert_eq!(failures.as_array().map(Vec::len), Some(2));
    let one: Value = serde_json::from_str(
        &sb.run(&["history", "-f", "json", "-w", "unrouted"])
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert_eq!(one.as_array().map(Vec::len), Some(1));
    assert_eq!(one[0]["exit_code"], json!(3));
    let stats: Value = serde_json::from_str(
        &sb.run(&["history", "--stats", "-f", "json"])
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert_eq!(stats["total_executions"], json!(3));
    assert_eq!(stats["success_count"], json!(1));
    assert_eq!(stats["failed_count"], json!(2));
    let bad = sb.run(&["history", "--since", "yesterday"]).unwrap();
    assert_eq!(bad.code, 1);

    let st = sb.run(&["status", &failed_id, "-f", "json"]).unwrap();
    assert_eq!(st.code, 0, "{}", st.stderr);
    let doc: Value = serde_json::from_str(&st.stdout).unwrap();
    assert_eq!(doc["exit_code"], json!(7));
    assert_eq!(doc["terminal"], json!("check's on_failure"));
    assert_eq!(doc["states"]["check"]["exit_code"], json!(1));
    assert_eq!(sb.run(&["status", "no-such-run"]).unwrap().code, 1);
}

#[test]
fn audit_trail_pairs_and_transcript_per_run() {
    let sb = Sandbox::new().unwrap();
    let r = sb
        .run(&["run", "call-parent", "-f", "json", "-i", "who=Ada"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let run_id = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    let audit = std::fs::read_to_string(data(&sb).join("audit.jsonl")).unwrap();
    let lines: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines.len(),
        4,
        "a start/end pair for the parent and for the child: {audit}"
    );
    let events: Vec<&str> = lines.iter().map(|l| l["event"].as_str().unwrap()).collect();
    assert_eq!(
        events.iter().filter(|e| **e == "workflow.started").count(),
        2
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| **e == "workflow.completed")
            .count(),
        2
    );
    let transcript = std::fs::read_to_string(
        data(&sb)
            .join("transcripts")
            .join(format!("{run_id}.jsonl")),
    )
    .unwrap();
    let t: Vec<Value> = transcript
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(t.first().unwrap()["type"], json!("run.started"));
    assert_eq!(t.last().unwrap()["type"], json!("run.completed"));
    let seqs: Vec<u64> = t.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert!(
        t.iter()
            .any(|l| l["type"] == json!("step.call_workflow.started")
                && l["child_run_id"].is_string())
    );
    let meta = std::fs::metadata(data(&sb).join("states").join(format!("{run_id}.json"))).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);

    let mut sb2 = Sandbox::new().unwrap();
    sb2.set_env("AWF_AUDIT_LOG", "off");
    assert_eq!(sb2.run(&["run", "continue-on-error"]).unwrap().code, 0);
    assert!(!data(&sb2).join("audit.jsonl").exists());
}

#[test]
fn secrets_never_reach_state_files_audit_or_transcripts() {
    let mut sb = Sandbox::new().unwrap();
    sb.set_env("MY_API_TOKEN", "supersecretvalue");
    assert_eq!(sb.run(&["run", "secret-env"]).unwrap().code, 3);
    for sub in ["states", "transcripts"] {
        // Every file, including any temp file left in `states/.tmp/`.
        for path in files_under(&data(&sb).join(sub)) {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                !text.contains("supersecretvalue") && !text.contains("hunter2-very-secret"),
                "{sub}: {text}"
            );
        }
    }
    let audit = std::fs::read_to_string(data(&sb).join("audit.jsonl")).unwrap();
    assert!(!audit.contains("hunter2-very-secret"), "{audit}");
}

#[test]
fn twenty_runs_at_once_on_one_data_root_lose_nothing() {
    let sb = Sandbox::new().unwrap();
    let children: Vec<_> = (0..20)
        .map(|_| {
            sb.cmd(&["run", "best-effort"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert_eq!(c.wait().unwrap().code(), Some(0));
    }
    let rows: Value = serde_json::from_str(
        &sb.run(&["history", "-f", "json", "-n", "100"])
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert_eq!(rows.as_array().map(Vec::len), Some(20));
    assert!(
        rows.as_array()
            .unwrap()
            .iter()
            .all(|r| r["status"] == json!("completed"))
    );
    let states: Vec<_> = std::fs::read_dir(data(&sb).join("states"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .collect();
    assert_eq!(states.len(), 20);
    for s in states {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(s.path()).unwrap()).unwrap();
        assert_eq!(v["status"], json!("success"));
    }
    let audit = std::fs::read_to_string(data(&sb).join("audit.jsonl")).unwrap();
    assert_eq!(audit.lines().count(), 40);
    assert!(
        audit
            .lines()
            .all(|l| serde_json::from_str::<Value>(l).is_ok())
    );
}

#[test]
fn config_show_prints_project_inputs_masked() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        ".awf/config.yaml",
        "inputs:\n  model: gpt-x\n  api_key: sk-123456789\n",
    )
    .unwrap();
    let r = sb.run(&["config", "show", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["inputs"], json!({"model": "gpt-x", "api_key": "***"}));
}

#[test]
fn a_run_that_is_still_running_cannot_be_resumed() {
    let sb = Sandbox::new().unwrap();
    let dir = sb.path().display().to_string();
    let mut child = sb
        .cmd(&["run", "killable", "-i", &format!("dir={dir}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let run_id = wait_for_state(&sb, "a running state file", |v| {
        v["current_state"] == json!("two")
    });
    let r = sb.run(&["resume", &run_id]).unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("is still running"), "{}", r.stderr);
    std::fs::write(sb.path().join("go"), "").unwrap();
    let _ = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    assert_eq!(child.wait().unwrap().code(), Some(130));
    // Cancelled now: resuming from a state that never ran is allowed.
    let r = sb
        .run(&["resume", &run_id, "--from", "three", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        std::fs::read_to_string(sb.path().join("log")).unwrap(),
        "one\nthree\n"
    );
}

#[test]
fn resume_continues_a_loop_at_the_iteration_it_stopped_in() {
    let sb = Sandbox::new().unwrap();
    let dir = sb.path().display().to_string();
    let mut child = sb
        .cmd(&["run", "loop-killable", "-i", &format!("dir={dir}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let run_id = wait_for_state(&sb, "the loop at iteration 2", |v| {
        awf_tests::loop_levels(&v["loop_position"]) == json!({"state": "each", "iteration": 2})
    });
    child.kill().unwrap();
    child.wait().unwrap();
    // Only this sandbox's own processes (environment marker), never another test's.
    sb.kill_processes(Some("sleep 38"));
    std::fs::write(sb.path().join("go"), "").unwrap();
    let r = sb.run(&["resume", &run_id, "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.json().unwrap()["states"]["each"]["output"],
        json!("completed 4 iterations")
    );
    assert_eq!(
        std::fs::read_to_string(sb.path().join("log")).unwrap(),
        "a\nb\nc\nd\n"
    );
}

/// The paths of the files under `dir`, subdirectories included.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() {
            out.extend(files_under(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}
