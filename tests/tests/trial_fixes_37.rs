//! Fixes of what a user trial found: `cd /a && awf run wf.yaml` (a step fails), then `cd /b &&
//! awf resume <id>` ran the remaining steps in /b, so their relative paths reached the wrong
//! files. A run records the directory it started in (`working_dir` of its state) and a resume
//! goes on there, whoever resumes it (`awf resume`, `POST /api/executions/{id}/resume`); a
//! directory that is gone refuses the resume. Over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::path::PathBuf;

use awf_tests::Sandbox;
use awf_tests::fail_then_resume_in;
use awf_tests::http_serve::add_workflows;
use awf_tests::http_serve::json_of;
use awf_tests::http_serve::post;
use awf_tests::http_serve::start;
use awf_tests::http_serve::start_run;
use awf_tests::http_serve::wait_status;
use awf_tests::run_id_in;
use pretty_assertions::assert_eq;

/// Step `a` notes where it runs and fails until `ok` is there (both relative); step `b` reads
/// `notes.txt` and notes the directory its templates and shell say (relative too).
const WHERE: &str = "name: where\nstates:\n  initial: a\n  a: {type: step, command: 'pwd > where.txt && test -f ok', on_success: b}\n  b: {type: step, command: 'cat notes.txt > seen.txt && echo \"ctx={{.context.WorkingDir}} env={{.env.PWD}} sh=$PWD\" >> seen.txt', on_success: done}\n  done: {type: terminal}\n";

/// A fresh directory `name` of the sandbox (absolute, symbolic links resolved, as the run
/// records it), holding `notes.txt` with `notes`.
fn dir_with_notes(sb: &Sandbox, name: &str, notes: &str) -> PathBuf {
    sb.write(&format!("{name}/notes.txt"), notes).unwrap();
    sb.path().join(name).canonicalize().unwrap()
}

/// What step `b` wrote in `dir`: the notes it read, then the directories it was told.
fn seen(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("seen.txt")).unwrap()
}

/// What `b` writes when it runs in `dir` holding `notes`.
fn seen_in(dir: &Path, notes: &str) -> String {
    let d = dir.display();
    format!("{notes}ctx={d} env={d} sh={d}\n")
}

/// `awf status <id> -f json`'s `working_dir`.
fn recorded_dir(sb: &Sandbox, id: &str) -> serde_json::Value {
    let st = sb.run(&["status", id, "-f", "json"]).unwrap();
    assert_eq!(st.code, 0, "{}", st.stderr);
    st.json().unwrap()["working_dir"].clone()
}

/// Runs [`WHERE`] in `a`, where it fails (no `ok` there); returns the run id.
fn fail_in(sb: &Sandbox, a: &Path) -> String {
    let wf = sb.write("where.yaml", WHERE).unwrap();
    let r = sb.run_in(a, &["run", wf.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    run_id_in(&r.stderr).unwrap()
}

/// The trial: started in A, failed, resumed from B; the rest of the run (the failed step
/// again, the next one) ran in A: its relative paths reached A's files, `.context.WorkingDir`,
/// `.env.PWD` and the shell's `$PWD` said A. `awf status` shows the directory.
#[test]
fn a_resumed_run_goes_on_in_the_directory_it_started_in() {
    let sb = Sandbox::new().unwrap();
    let a = dir_with_notes(&sb, "a", "notes of a\n");
    let b = dir_with_notes(&sb, "b", "notes of b\n");
    let wf = sb.write("where.yaml", WHERE).unwrap();
    let (id, r) = fail_then_resume_in(
        &sb,
        (&a, &b),
        wf.to_str().unwrap(),
        &a.join("ok"),
        &["-o", "buffered"],
    )
    .unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        std::fs::read_to_string(a.join("where.txt")).unwrap(),
        format!("{}\n", a.display())
    );
    assert_eq!(seen(&a), seen_in(&a, "notes of a\n"));
    assert!(!b.join("where.txt").exists());
    assert!(!b.join("seen.txt").exists());
    assert_eq!(recorded_dir(&sb, &id), a.display().to_string());
    let st = sb.run(&["status", &id]).unwrap();
    assert!(
        st.stdout
            .lines()
            .any(|l| l == format!("Directory: {}", a.display())),
        "{}",
        st.stdout
    );
}

/// A run whose directory was removed (or replaced by a file) since is not resumed anywhere
/// else: `USER.INPUT.VALIDATION_FAILED` (exit 1) naming the directory, with a hint; nothing
/// runs. Once the directory is back, the run resumes.
#[test]
fn a_run_whose_directory_is_gone_is_not_resumed() {
    let sb = Sandbox::new().unwrap();
    let a = dir_with_notes(&sb, "a", "notes of a\n");
    let b = dir_with_notes(&sb, "b", "notes of b\n");
    let id = fail_in(&sb, &a);
    std::fs::remove_dir_all(&a).unwrap();
    let r = sb.run_in(&b, &["resume", &id]).unwrap();
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        r.stderr,
        format!(
            "[USER.INPUT.VALIDATION_FAILED] run {id} started in {a}, which no longer exists (a resumed run goes on in the directory it started in)\n  Hint: recreate {a} (with the files the run's steps use) and resume again, or start the workflow afresh\n",
            a = a.display()
        )
    );
    assert!(!b.join("where.txt").exists());
    std::fs::write(&a, "a file now").unwrap();
    let r = sb.run_in(&b, &["resume", &id]).unwrap();
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "started in {}, which is not a directory now",
            a.display()
        )),
        "{}",
        r.stderr
    );
    std::fs::remove_file(&a).unwrap();
    let a = dir_with_notes(&sb, "a", "notes again\n");
    std::fs::write(a.join("ok"), "").unwrap();
    let r = sb.run_in(&b, &["resume", &id]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(seen(&a), seen_in(&a, "notes again\n"));
}

/// A state file written before the directory was recorded (no `working_dir`) resumes in the
/// resumer's directory, as such runs always did; the resumed attempt records it.
#[test]
fn a_run_recorded_without_its_directory_resumes_in_the_resumers() {
    let sb = Sandbox::new().unwrap();
    let a = dir_with_notes(&sb, "a", "notes of a\n");
    let b = dir_with_notes(&sb, "b", "notes of b\n");
    let id = fail_in(&sb, &a);
    let file = awf_tests::data(&sb)
        .join("states")
        .join(format!("{id}.json"));
    let mut state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(state["working_dir"], a.display().to_string());
    state.as_object_mut().unwrap().remove("working_dir");
    std::fs::write(&file, serde_json::to_vec_pretty(&state).unwrap()).unwrap();
    assert_eq!(recorded_dir(&sb, &id), serde_json::Value::Null);
    std::fs::write(b.join("ok"), "").unwrap();
    let r = sb.run_in(&b, &["resume", &id]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(seen(&b), seen_in(&b, "notes of b\n"));
    assert!(!a.join("seen.txt").exists());
    assert_eq!(recorded_dir(&sb, &id), b.display().to_string());
}

/// `POST /api/executions/{id}/resume` of a run started in another directory than the
/// server's goes on there too, and is refused (422, with the hint) once that directory is
/// gone.
#[test]
fn a_resume_over_http_goes_on_where_the_run_started() {
    let mut sb = Sandbox::new().unwrap();
    // The server's own `PWD`, which the resumed run's `.env.PWD` does not say.
    let server_dir = sb.path().display().to_string();
    sb.set_env("PWD", &server_dir);
    let a = dir_with_notes(&sb, "a", "notes of a\n");
    let id = fail_in(&sb, &a);
    let gone = dir_with_notes(&sb, "gone", "");
    let gone_id = fail_in(&sb, &gone);
    std::fs::remove_dir_all(&gone).unwrap();
    std::fs::write(a.join("ok"), "").unwrap();
    let s = start(&sb, &[]);
    let (code, body, _) = post(&format!("{}/api/executions/{id}/resume", s.base), "");
    assert_eq!(code, 200, "{body}");
    wait_status(&s, &id, "completed");
    assert_eq!(seen(&a), seen_in(&a, "notes of a\n"));
    assert!(!sb.path().join("where.txt").exists());
    let (code, body, _) = post(&format!("{}/api/executions/{gone_id}/resume", s.base), "");
    assert_eq!(code, 422, "{body}");
    let p = json_of(&body);
    assert_eq!(p["code"], "USER.INPUT.VALIDATION_FAILED", "{p}");
    assert_eq!(
        p["detail"],
        format!(
            "run {gone_id} started in {}, which no longer exists (a resumed run goes on in the directory it started in)",
            gone.display()
        )
    );
    assert_eq!(
        p["hints"][0],
        format!(
            "recreate {} (with the files the run's steps use) and resume again, or start the workflow afresh",
            gone.display()
        )
    );
}

/// A run started over HTTP runs in the server's directory and records it: `awf resume` from
/// elsewhere goes on there.
#[test]
fn a_run_started_over_http_records_the_servers_directory() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("where", WHERE)]);
    sb.write("notes.txt", "notes of the server\n").unwrap();
    let here = sb.path().canonicalize().unwrap();
    let b = dir_with_notes(&sb, "b", "notes of b\n");
    let s = start(&sb, &[]);
    let id = start_run(&s, "where", "{}");
    wait_status(&s, &id, "failed");
    drop(s);
    assert_eq!(
        std::fs::read_to_string(here.join("where.txt")).unwrap(),
        format!("{}\n", here.display())
    );
    assert_eq!(recorded_dir(&sb, &id), here.display().to_string());
    std::fs::write(here.join("ok"), "").unwrap();
    let r = sb.run_in(&b, &["resume", &id]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(seen(&here), seen_in(&here, "notes of the server\n"));
    assert!(!b.join("seen.txt").exists());
}
