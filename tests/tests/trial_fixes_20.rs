//! Fixes from a new user's trial (stop 35), over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Stdio;

use awf_tests::Sandbox;
use awf_tests::http_serve::add_workflows;
use awf_tests::http_serve::curl;
use awf_tests::http_serve::execution;
use awf_tests::http_serve::json_of;
use awf_tests::http_serve::start;

const SLOW: &str = "name: slow\nstates:\n  initial: a\n  a: {type: step, command: 'sleep 3151', on_success: done}\n  done: {type: terminal}\n";

/// `DELETE /api/executions/{id}` of a run a terminal `awf run` runs (live in another
/// process) answered 204 and stopped nothing; now it is a 409 that says where the run runs
/// and how to stop it, the run goes on untouched, and the hint's way stops it.
#[test]
fn deleting_a_run_of_another_awf_process_is_refused_with_409() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("slow", SLOW)]);
    let s = start(&sb, &[]);
    let mut child = sb
        .cmd(&["run", "slow"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    awf_tests::wait_for("`sleep 3151` to start", || {
        sb.processes().iter().any(|p| p.cmdline == "sleep 3151")
    });
    let id = awf_tests::wait_for_state(&sb, "the run to be recorded at a", |v| {
        v["current_state"] == "a" && v["owner_pid"].is_u64()
    });
    let (code, body, ctype) = curl(&["-X", "DELETE", &format!("{}/api/executions/{id}", s.base)]);
    assert_eq!(code, 409, "{body}");
    assert!(ctype.starts_with("application/problem+json"), "{ctype}");
    let p = json_of(&body);
    assert_eq!(p["code"], "USER.FACADE.INPUT_REJECTED", "{p}");
    assert_eq!(
        p["detail"],
        format!(
            "run {id} is still running in another awf process (awf process {pid}); it can only be cancelled there"
        ),
        "{p}"
    );
    let hints = p["hints"].to_string();
    assert!(hints.contains(&format!("kill -INT {pid}")), "{hints}");
    // Nothing was stopped: the run and its command go on.
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(child.try_wait().unwrap().is_none(), "awf run ended");
    assert!(
        sb.processes().iter().any(|p| p.cmdline == "sleep 3151"),
        "the step's command was stopped"
    );
    assert_eq!(execution(&s, &id)["status"], "running");
    // The hint's way stops it, recorded cancelled.
    let killed = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(130));
    assert_eq!(execution(&s, &id)["status"], "cancelled");
    // Cancelling it now is the idempotent 204 of a finished run.
    let (code, body, _) = curl(&["-X", "DELETE", &format!("{}/api/executions/{id}", s.base)]);
    assert_eq!(code, 204, "{body}");
}

/// `awf run --step S` writes only the step's command output on stdout: the report's
/// `--- [S] stdout ---` / `--- [S] stderr ---` headers, the step's stderr and the `Step 'S'
/// completed…` / `Step 'S' failed` line go to stderr (they were on stdout); `-f json` stays
/// one JSON document.
#[test]
fn a_single_step_writes_only_its_output_on_stdout() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "wf.yaml",
        "name: wf\nstates:\n  initial: greet\n  greet: {type: step, command: 'echo hello; echo note >&2', on_success: x}\n  \
         x: {type: step, command: 'echo partial; exit 5', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "wf.yaml", "--step", "greet"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "hello\n");
    assert!(
        r.stderr.contains(
            // No stdout header when stdout is no terminal (trial_fixes_52).
            "--- [greet] stderr ---\nnote\nStep 'greet' completed successfully in "
        ),
        "{}",
        r.stderr
    );
    let r = sb.run(&["run", "wf.yaml", "--step", "x"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert_eq!(r.stdout, "partial\n");
    assert!(
        r.stderr.contains("Step 'x' failed (exit code: 5)\n"),
        "{}",
        r.stderr
    );
    let r = sb
        .run(&["run", "wf.yaml", "--step", "greet", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(doc["states"]["greet"]["output"], "hello\n", "{doc}");
    assert!(!r.stderr.contains("--- [greet]"), "{}", r.stderr);
}

/// `awf run --step S --mock states.X.output=…` fills `.JSON` of a mocked agent step with
/// `output_format: json` as a full run's `--mock` does (it failed with "undefined variable
/// states.review.JSON.summary"), over the shipped `workflows/code-review.yaml` example; a
/// fenced answer is read as a full run reads it.
#[test]
fn a_single_step_reads_json_of_a_mocked_agent_step() {
    let mut sb = Sandbox::new().unwrap();
    let example =
        std::fs::read_to_string(awf_tests::workspace_root().join("workflows/code-review.yaml"))
            .unwrap();
    add_workflows(&mut sb, &[("code-review", example.as_str())]);
    let mock = r#"states.review.output={"verdict":"approve","summary":"ok"}"#;
    let r = sb
        .run(&["run", "code-review", "--step", "approved", "--mock", mock])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "approved: ok\n");
    // The same mock in a full run, for comparison.
    let full = sb
        .run(&["run", "code-review", "-o", "buffered", "--mock", mock])
        .unwrap();
    assert_eq!(full.code, 0, "{}", full.stderr);
    assert!(full.stdout.ends_with("approved: ok\n"), "{}", full.stdout);
    // A fenced answer.
    let fenced =
        "states.review.output=```json\n{\"verdict\":\"changes\",\"summary\":\"fix it\"}\n```";
    let r = sb
        .run(&[
            "run",
            "code-review",
            "--step",
            "changes_requested",
            "--mock",
            fenced,
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "changes requested: fix it\n");
}

/// The errors of `awf validate -f json` (first error's message, how many).
fn validate_errors(sb: &Sandbox, file: &str) -> (String, usize) {
    let v = sb.run(&["validate", file, "-f", "json"]).unwrap();
    assert_eq!(v.code, 2, "{}{}", v.stdout, v.stderr);
    let doc = v.json().unwrap();
    let errors: Vec<&serde_json::Value> = doc["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["severity"] == "error")
        .collect();
    (
        errors[0]["message"].as_str().unwrap().to_owned(),
        errors.len(),
    )
}

/// `awf run` of an invalid workflow names `awf validate`'s first error and counts the
/// others as validate does: parse-stage errors and later checks together (it said "and 2
/// more" for validate's 5, and nothing more under a `comand:` typo with a second error).
#[test]
fn run_counts_the_other_errors_as_validate_does() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "rv.yaml",
        "name: rv\nstates:\n  initial: a\n  a: {type: step, command: \"false\", timeout: 10x,\n      \
         retry: {max_attempts: 0, initial_delay: fast, backoff: quadratic, multiplier: -1},\n      \
         on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    sb.write(
        "typo.yaml",
        "name: typo\nstates:\n  initial: a\n  a: {type: step, comand: \"false\", on_success: nowhere}\n  \
         done: {type: terminal}\n",
    )
    .unwrap();
    for (file, want) in [("rv.yaml", 5), ("typo.yaml", 2)] {
        let (first, count) = validate_errors(&sb, file);
        assert_eq!(count, want, "{file}");
        let r = sb.run(&["run", file]).unwrap();
        assert_eq!(r.code, 2, "{}", r.stderr);
        let line = r.stderr.lines().next().unwrap();
        assert!(line.contains(&first), "{file}: {line} / {first}");
        assert!(
            line.ends_with(&format!(
                " (and {} more error(s); run `awf validate` to see all)",
                count - 1
            )),
            "{file}: {line}"
        );
    }
}

const BROKEN: &str = "name: br\nstates:\n  initial: announce\n  announce:\n    type: step\n    command: echo hi\n    \
on_failure: {message: \"announce broke\", status: 4}\n    on_success: nowhere\n  done: {type: terminal}\n";

/// `awf diagram` of a workflow `awf validate` rejects still draws it (exit 0) but warns on
/// stderr, naming the first error and `awf validate` (it drew an edge to an undeclared state
/// silently); `--highlight`'s list of states names an inline `on_failure` terminal as users
/// see it (`announce's on_failure`), and that name highlights it.
#[test]
fn diagram_warns_about_an_invalid_workflow_and_hides_inline_names() {
    let sb = Sandbox::new().unwrap();
    sb.write("br.yaml", BROKEN).unwrap();
    let r = sb
        .run(&["diagram", "br.yaml", "--highlight", "zzzzzzzzzz"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("\"announce\" -> \"nowhere\";"),
        "{}",
        r.stdout
    );
    assert!(
        r.stderr.contains(
            "WARN workflow 'br' is invalid: "
        ) && r.stderr.contains(
            "states.announce.on_success: state \"announce\": on_success references unknown state \"nowhere\"; \
             the diagram shows it as written (`awf validate br.yaml` lists the errors)"
        ),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains(
            "--highlight: workflow 'br' has no state 'zzzzzzzzzz' (states: announce, done, announce's on_failure)"
        ),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("__inline_error"), "{}", r.stderr);
    let r = sb
        .run(&[
            "diagram",
            "br.yaml",
            "--highlight",
            "announce's on_failure",
            "-q",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stderr, "");
    assert!(
        r.stdout
            .lines()
            .any(|l| l.contains("label=\"announce broke\"") && l.contains("color=orange")),
        "{}",
        r.stdout
    );
    // A valid workflow draws without a warning.
    sb.write("ok.yaml", &BROKEN.replace("nowhere", "done"))
        .unwrap();
    let r = sb.run(&["diagram", "ok.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stderr, "");
}

/// `awf status` of a run nobody knows is `USER.FACADE.RUN_NOT_FOUND` (exit 1), the code the
/// HTTP API gives an unknown run, not `USER.INPUT.VALIDATION_FAILED`.
#[test]
fn status_of_an_unknown_run_is_run_not_found() {
    let sb = Sandbox::new().unwrap();
    let r = sb.run(&["status", "deadbeef"]).unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .starts_with("[USER.FACADE.RUN_NOT_FOUND] no run with id 'deadbeef'"),
        "{}",
        r.stderr
    );
    let r = sb.run(&["resume", "deadbeef"]).unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("[USER.FACADE.RUN_NOT_FOUND]"),
        "{}",
        r.stderr
    );
}

/// `awf diagram -o g.svg` without Graphviz `dot` on PATH is a SYSTEM error (exit 4) with a
/// hint to install Graphviz, not `EXECUTION.COMMAND.FAILED` (exit 3); nothing is written.
#[test]
fn diagram_to_an_image_without_graphviz_is_a_system_error() {
    let mut sb = Sandbox::new().unwrap();
    sb.write("ok.yaml", &BROKEN.replace("nowhere", "done"))
        .unwrap();
    let empty = sb.path().join("no-tools");
    std::fs::create_dir_all(&empty).unwrap();
    sb.set_env("PATH", &empty.display().to_string());
    let r = sb.run(&["diagram", "ok.yaml", "-o", "g.svg"]).unwrap();
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(
        r.stderr.starts_with(
            "[SYSTEM.IO.WRITE_FAILED] cannot write g.svg: Graphviz `dot` is not installed (not found on PATH)"
        ),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("install Graphviz"), "{}", r.stderr);
    assert!(!sb.path().join("g.svg").exists());
}
