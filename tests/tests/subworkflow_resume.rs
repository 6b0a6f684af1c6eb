//! `awf resume` of a run that stopped inside a sub-workflow, over the real binary: the child
//! goes on from its own record, in the same child run, and its completed steps do not run
//! again (after a failure, and after the awf process was killed in the middle of the child).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Stdio;

use awf_tests::Sandbox;
use awf_tests::data;
use awf_tests::read_state_file;
use awf_tests::wait_for_state;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

/// `p2`: pre → call (`c2`) → post; every step appends its name to `slog`.
const PARENT: &str = "name: p2
states:
  initial: pre
  pre: { type: step, command: 'echo pre >> slog', on_success: call }
  call: { type: call_workflow, workflow: c2, on_success: post }
  post: { type: step, command: 'echo post >> slog', on_success: done }
  done: { type: terminal }
";

/// `c2` with the step `y` given.
fn child(y: &str) -> String {
    format!(
        "name: c2
states:
  initial: x
  x: {{ type: step, command: 'echo x >> slog', on_success: y }}
  y: {{ type: step, command: '{y}', on_success: z }}
  z: {{ type: step, command: 'echo z >> slog', on_success: done }}
  done: {{ type: terminal }}
"
    )
}

fn slog(sb: &Sandbox) -> String {
    std::fs::read_to_string(sb.path().join("slog")).unwrap_or_default()
}

/// The state file of `run_id` (its journal replayed).
fn state(sb: &Sandbox, run_id: &str) -> Value {
    read_state_file(&data(sb).join("states").join(format!("{run_id}.json")))
        .unwrap_or_else(|| panic!("no state file for {run_id}"))
}

/// The run ids that have a state file.
fn recorded_runs(sb: &Sandbox) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(data(sb).join("states"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            (p.extension().is_some_and(|x| x == "json"))
                .then(|| p.file_stem().unwrap().to_string_lossy().into_owned())
        })
        .collect();
    ids.sort();
    ids
}

/// The parent's record names its child under the calling step; the child's record has the
/// parent and every state of the child completed. Returns the child's run id.
fn assert_one_child_completed(sb: &Sandbox, parent: &str) -> String {
    let p = state(sb, parent);
    let child_id = p["child_runs"]["call"]
        .as_str()
        .unwrap_or_else(|| panic!("no child run recorded: {p}"))
        .to_owned();
    let c = state(sb, &child_id);
    assert_eq!(c["parent_run_id"], json!(parent));
    assert_eq!(c["status"], json!("success"), "{c}");
    for s in ["x", "y", "z"] {
        assert_eq!(c["states"][s]["status"], json!("completed"), "{s}: {c}");
    }
    let mut want = vec![parent.to_owned(), child_id.clone()];
    want.sort();
    assert_eq!(recorded_runs(sb), want, "one child run, continued");
    child_id
}

#[test]
fn a_failed_sub_workflow_resumes_without_rerunning_its_completed_steps() {
    let sb = Sandbox::new().unwrap();
    sb.write("p2.yaml", PARENT).unwrap();
    sb.write("c2.yaml", &child("echo y >> slog; test -f ok"))
        .unwrap();
    let r = sb.run(&["run", "p2.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}\n{}", r.stdout, r.stderr);
    let parent = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    assert_eq!(slog(&sb), "pre\nx\ny\n");
    let first_child = state(&sb, &parent)["child_runs"]["call"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(state(&sb, &first_child)["status"], json!("failure"));

    sb.write("ok", "").unwrap();
    let r = sb.run(&["resume", &parent, "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(doc["status"], json!("success"), "{doc}");
    assert_eq!(doc["run_id"], json!(parent));
    // x ran once: the child went on at y.
    assert_eq!(slog(&sb), "pre\nx\ny\ny\nz\npost\n");
    let child_id = assert_one_child_completed(&sb, &parent);
    assert_eq!(child_id, first_child, "the same child run goes on");

    // Resumed once more, a finished run is refused as before.
    let again = sb.run(&["resume", &parent]).unwrap();
    assert_eq!(again.code, 1, "{}", again.stderr);
}

#[test]
fn a_sub_workflow_killed_mid_step_resumes_at_that_step() {
    let sb = Sandbox::new().unwrap();
    sb.write("p2.yaml", PARENT).unwrap();
    // y waits for `go`: the shell of a killed attempt can never write `y` after the kill.
    sb.write(
        "c2.yaml",
        &child("echo y-start >> slog; while [ ! -f go ]; do sleep 0.05; done; echo y >> slog"),
    )
    .unwrap();
    let mut awf = sb
        .cmd(&["run", "p2.yaml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The child is recorded at `y` (x completed), and y has started.
    let child_id = wait_for_state(&sb, "the child at y", |v| {
        v["parent_run_id"].is_string() && v["current_state"] == json!("y")
    });
    awf_tests::wait_for("y started", || slog(&sb).contains("y-start"));
    awf.kill().unwrap();
    awf.wait().unwrap();
    // What the killed awf left running (the shell of y), and only this sandbox's.
    sb.kill_processes(None);
    let parent = state(&sb, &child_id)["parent_run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(state(&sb, &parent)["child_runs"]["call"], json!(child_id));
    assert_eq!(slog(&sb), "pre\nx\ny-start\n");

    sb.write("go", "").unwrap();
    let r = sb.run(&["resume", &parent, "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(r.json().unwrap()["status"], json!("success"));
    assert_eq!(slog(&sb), "pre\nx\ny-start\ny-start\ny\nz\npost\n");
    assert_eq!(assert_one_child_completed(&sb, &parent), child_id);

    // The child's record ends as the child did.
    let st = sb.run(&["status", &child_id, "-f", "json"]).unwrap();
    assert_eq!(st.code, 0, "{}", st.stderr);
    assert_eq!(st.json().unwrap()["status"], json!("completed"));
}

#[test]
fn the_text_of_a_resume_says_where_the_sub_workflow_goes_on() {
    let sb = Sandbox::new().unwrap();
    sb.write("p2.yaml", PARENT).unwrap();
    sb.write("c2.yaml", &child("echo y >> slog; test -f ok"))
        .unwrap();
    let r = sb.run(&["run", "p2.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let parent = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    sb.write("ok", "").unwrap();
    let r = sb.run(&["resume", &parent, "-o", "streaming"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("goes on in its earlier run"),
        "{}",
        r.stderr
    );
    // The earlier attempt's lines are replayed first (the child's included), then this
    // attempt's: the child's x is not among them.
    let (before, now) = r
        .stderr
        .split_once("Workflow resumed:")
        .unwrap_or_else(|| panic!("{}", r.stderr));
    for step in ["→ x", "✓ x", "→ y"] {
        assert!(before.contains(step), "{step}: {}", r.stderr);
    }
    assert!(!now.contains("→ x"), "{}", r.stderr);
    for step in ["→ y", "✓ y", "✓ z", "✓ post"] {
        assert!(now.contains(step), "{step}: {}", r.stderr);
    }
    assert_eq!(slog(&sb), "pre\nx\ny\ny\nz\npost\n");
}

/// A call routed to a failure terminal by its `on_failure`: the failure's hint names `awf
/// resume <id> --from <the call>`, and following it continues the child where it failed
/// (breaker: `--from` started a new child and its completed steps ran again).
#[test]
fn resuming_from_the_call_the_run_failed_in_continues_its_child() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "p3.yaml",
        "name: p3
states:
  initial: call
  call: { type: call_workflow, workflow: c2, on_success: done, on_failure: bad }
  done: { type: terminal }
  bad: { type: terminal, status: failure }
",
    )
    .unwrap();
    sb.write(
        "c2.yaml",
        &child("echo y >> slog; test -e fixed || exit 9; echo y-ok >> slog"),
    )
    .unwrap();
    let r = sb.run(&["run", "p3.yaml"]).unwrap();
    assert_ne!(r.code, 0, "{}", r.stderr);
    let id = r
        .stderr
        .split("awf resume ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .trim_end_matches('`')
        .to_owned();
    assert!(
        r.stderr.contains(&format!("awf resume {id} --from call")),
        "{}",
        r.stderr
    );
    assert_eq!(slog(&sb), "x\ny\n");
    std::fs::write(sb.path().join("fixed"), "").unwrap();
    let r = sb.run(&["resume", &id, "--from", "call"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(slog(&sb), "x\ny\ny\ny-ok\nz\n");
}

/// Breaker (stop 31, kill -9 trials): a loop's next child run can start in the millisecond
/// its previous visit of the call completed (records keep milliseconds); resuming then took
/// the call's recorded success for that child's and started the child anew, running its
/// completed steps again. It goes on in its earlier run.
#[test]
fn a_loops_child_started_in_the_millisecond_its_previous_call_completed_goes_on() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "child.yaml",
        "name: child\ninputs:\n  - name: tag\nstates:\n  initial: c1\n  c1:\n    type: step\n    command: echo \"c1-{{.inputs.tag}}\" >> slog\n    on_success: c2\n  c2:\n    type: step\n    command: test \"{{.inputs.tag}}\" = x || test -f go\n    on_success: done\n  done:\n    type: terminal\n",
    )
    .unwrap();
    sb.write(
        "parent.yaml",
        "name: parent\nstates:\n  initial: each\n  each:\n    type: for_each\n    items: '[\"x\",\"y\"]'\n    body: [ecall]\n    on_complete: done\n  ecall:\n    type: call_workflow\n    call_workflow:\n      workflow: child.yaml\n      inputs: { tag: \"{{.loop.Item}}\" }\n  done:\n    type: terminal\n",
    )
    .unwrap();
    let r = sb.run(&["run", "parent.yaml"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let runs = recorded_runs(&sb);
    let parent = runs
        .iter()
        .find(|id| state(&sb, id)["parent_run_id"].is_null())
        .unwrap()
        .clone();
    // As a kill leaves it: the call's record is its first visit's success.
    let parent_file = awf_tests::data(&sb).join(format!("states/{parent}.json"));
    let mut p: Value =
        serde_json::from_str(&std::fs::read_to_string(&parent_file).unwrap()).unwrap();
    p["states"]["ecall"]["status"] = "completed".into();
    p["states"]["ecall"]["error"] = Value::Null;
    p["states"]["ecall"]["exit_code"] = 0.into();
    std::fs::write(&parent_file, serde_json::to_vec(&p).unwrap()).unwrap();
    let completed = p["states"]["ecall"]["completed_at"].clone();
    assert!(completed.is_string(), "{completed}");
    let second = runs
        .iter()
        .find(|id| state(&sb, id)["inputs"]["tag"] == "y")
        .unwrap()
        .clone();
    // The second child started in the millisecond the first visit of the call completed.
    let file = awf_tests::data(&sb).join(format!("states/{second}.json"));
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    v["started_at"] = completed;
    std::fs::write(&file, serde_json::to_vec(&v).unwrap()).unwrap();
    sb.write("go", "").unwrap();
    let r = sb.run(&["resume", &parent]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .contains(&format!("goes on in its earlier run {second}")),
        "{}",
        r.stderr
    );
    assert_eq!(slog(&sb), "c1-x\nc1-y\n");
    assert_eq!(recorded_runs(&sb).len(), 3);
}
