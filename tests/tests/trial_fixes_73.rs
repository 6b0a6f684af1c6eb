//! Fixes of a breaker's trial of `awf run` and the commands around it (trial 73): control
//! characters in `awf validate -f table`, the 10 s limit of `workflow_cancel` hooks, a
//! closed stdout, bad `AWF_*` values, a damaged state file's hint, `call_workflow` through a
//! symlink, clap's usage errors, storage paths in messages. Over the real binary with a
//! private data dir.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use pretty_assertions::assert_eq;

/// `awf validate -f table` writes a workflow's name, an input's name and default, state
/// names in STEP and NEXT, and every ERROR/WARNING line with their control characters as
/// escapes: no raw ESC or BEL reaches the terminal.
#[test]
fn validate_table_escapes_control_characters() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "vt.yaml",
            "name: \"n\\e[2J\"\n\"x\\e]0;pwn\\a\": 1\ninputs:\n  - name: \"i\\e[1m\"\n    default: \"d\\e[3m\"\nstates:\n  initial: \"a\\e[4m\"\n  \"a\\e[4m\": {type: step, command: \"true\", on_success: \"z\\e[5m\"}\n  \"z\\e[5m\": {type: terminal}\n",
        )
        .unwrap();
    let r = sb
        .run(&["validate", wf.to_str().unwrap(), "-f", "table"])
        .unwrap();
    for text in [&r.stdout, &r.stderr] {
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "a raw control character: {text:?}"
        );
    }
    for cell in [
        "Workflow: n\\u{1b}[2J",
        "i\\u{1b}[1m",
        "d\\u{1b}[3m",
        "a\\u{1b}[4m",
        "z\\u{1b}[5m",
        "WARNING: x\\u{1b}]0;pwn\\u{7}",
    ] {
        assert!(r.stdout.contains(cell), "{cell} not in {}", r.stdout);
    }
}

/// The 10 s of `workflow_cancel` hooks count from the cancel: a step that ignores SIGTERM
/// is killed 5 s after it, and the hook gets what is left (breaker: the hook then ran 10
/// more seconds, 15 s after the cancel). The hook still runs, and is stopped with the
/// warning of its limit.
#[test]
fn the_cancel_hooks_limit_counts_from_the_cancel() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "ch.yaml",
        "name: ch\nhooks:\n  workflow_cancel:\n    - command: 'touch hook_ran; sleep 30'\nstates:\n  \
         initial: a\n  a: {type: step, command: \"trap '' TERM INT; touch started; sleep 1010\", \
         on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let child = sb
        .cmd(&["run", "ch.yaml"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    awf_tests::wait_for("the step to start", || sb.path().join("started").exists());
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let cancelled_at = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    let took = cancelled_at.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(sb.path().join("hook_ran").exists(), "{stderr}");
    assert!(
        stderr.contains(
            "workflow_cancel hook stopped: cancel hooks may run for at most 10s after a cancel"
        ),
        "{stderr}"
    );
    // 10 s after the cancel, not 5 s (the step's kill) + 10 s = 15 s: a bound on the deadline
    // itself, with room for a loaded machine.
    assert!(
        took < std::time::Duration::from_secs(14),
        "{took:?} after the cancel: {stderr}"
    );
}

/// The workflow `one`: one step that echoes.
const ONE: &str = "name: one\nstates:\n  initial: a\n  a: {type: step, command: 'echo hi', on_success: done}\n  done: {type: terminal}\n";

/// `AWF_RECORD=false` (a common no word) runs without recording; `maybe` records and says
/// so; `AWF_LOG=garbage` is warned about; `AWF_STORE=garbage` is named as the variable.
#[test]
fn bad_awf_variables_are_read_or_warned_about() {
    let mut sb = Sandbox::new().unwrap();
    let wf = sb.write("one.yaml", ONE).unwrap();
    let wf = wf.to_str().unwrap().to_owned();
    let run_id = |r: &awf_tests::Run| r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    sb.set_env("AWF_RECORD", "false");
    let r = sb.run(&["run", &wf, "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("AWF_RECORD"), "{}", r.stderr);
    let id = run_id(&r);
    assert_ne!(sb.run(&["status", &id]).unwrap().code, 0);
    sb.set_env("AWF_RECORD", "maybe");
    let r = sb.run(&["run", &wf, "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("AWF_RECORD=\"maybe\" is not one of off, 0, false, no"),
        "{}",
        r.stderr
    );
    let id = run_id(&r);
    assert_eq!(sb.run(&["status", &id]).unwrap().code, 0);
    sb.set_env("AWF_RECORD", "on");
    sb.set_env("AWF_LOG", "garbage");
    let r = sb.run(&["list"]).unwrap();
    assert!(
        r.stderr.contains("AWF_LOG: \"garbage\" is not a level"),
        "{}",
        r.stderr
    );
    sb.set_env("AWF_LOG", "");
    sb.set_env("AWF_STORE", "garbage");
    let r = sb.run(&["history"]).unwrap();
    assert_ne!(r.code, 0);
    assert!(
        r.stderr
            .contains("AWF_STORE=\"garbage\" is not a PostgreSQL URL"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("--store \""), "{}", r.stderr);
}

/// A state file replaced by `[[[…` (100 000 levels) is called damaged, with the hint to
/// move it aside, not "whole, with a value nested too deep".
#[test]
fn a_state_file_of_brackets_is_called_damaged() {
    let sb = Sandbox::new().unwrap();
    let r = sb.run_workflow("one.yaml", ONE, &["-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let id = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    let path = awf_tests::data(&sb).join(format!("states/{id}.json"));
    std::fs::write(&path, "[".repeat(100_000)).unwrap();
    let r = sb.run(&["status", &id]).unwrap();
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("Hint: the file is damaged (cut short or edited)"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("the file is whole"), "{}", r.stderr);
}

/// A usage error in text mode says its code and a hint, clap's message and usage kept.
#[test]
fn a_usage_error_in_text_mode_has_a_code_and_a_hint() {
    let sb = Sandbox::new().unwrap();
    let wf = sb.write("one.yaml", ONE).unwrap();
    let r = sb.run(&["run", wf.to_str().unwrap(), "--bogus"]).unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.starts_with(
            "error: [USER.INPUT.INVALID_FORMAT] unexpected argument '--bogus' found\n"
        ),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("Usage: awf run"), "{}", r.stderr);
    assert!(
        r.stderr
            .ends_with("  Hint: run `awf run --help` for the accepted flags\n"),
        "{}",
        r.stderr
    );
}

/// A stdout open for reading only (`1<file`): every write fails with `EBADF`, which the Rust
/// runtime takes as done, so the result was lost and the run exited 0 (breaker). The result
/// could not be written: exit 4, `SYSTEM.IO.WRITE_FAILED`. A stdout on `/dev/null` still
/// exits 0, and so does a run that printed nothing (`-f quiet` prints only the id, so `-q`
/// with text output is used).
#[test]
fn a_result_written_to_a_read_only_stdout_exits_4() {
    let sb = Sandbox::new().unwrap();
    let wf = sb.write("one.yaml", ONE).unwrap();
    let wf = wf.to_str().unwrap().to_owned();
    let ro = sb.write("ro.txt", "").unwrap();
    let out = sb
        .cmd(&["run", &wf, "-f", "json"])
        .stdout(std::fs::File::open(&ro).unwrap())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("SYSTEM.IO.WRITE_FAILED"), "{stderr}");
    let out = sb
        .cmd(&["run", &wf, "-f", "json"])
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
