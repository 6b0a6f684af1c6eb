//! A breaker (stop 43), over the real binary: a Ctrl-C or SIGTERM that reaches a step's
//! process too (sent to awf's process group as the step was spawned) cancels the run, never
//! fails the step (no `on_failure` route, no retry, no `workflow_error` hook); a run whose
//! start cannot be recorded (a read-only data root, one that cannot be created) runs
//! nothing and exits 4; a NUL byte written in a command (a YAML double-quoted `\0`) is a
//! validation error at its line, and the run-time message says where a NUL came from.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use pretty_assertions::assert_eq;

/// A step that does what a signal sent to awf's whole process group does when it comes as
/// the step is spawned: awf gets the signal, and so does the step's process, which dies of
/// it. `SIG` is the signal's name. Retries, an `on_failure` route and both hooks are there
/// to be taken if the step's death were taken as its failure.
fn group_signal_workflow(sig: &str) -> String {
    format!(
        "name: ctrlc
hooks:
  workflow_error:
    - command: echo error >> log.txt
  workflow_cancel:
    - command: echo cancel >> log.txt
states:
  initial: a
  a:
    type: step
    command: 'echo ran >> ran.txt; kill -{sig} $PPID; kill -{sig} $$'
    retry: {{max_attempts: 3, initial_delay: 10ms}}
    on_success: done
    on_failure: rollback
  rollback:
    type: step
    command: echo rollback >> log.txt
    on_success: failed
  done:
    type: terminal
  failed:
    type: terminal
    status: failure
"
    )
}

/// Finding 1: a run cancelled by a signal that also killed the step's process was recorded
/// as the step's failure ("killed by signal 2") about 1 run in 100: it took its
/// `on_failure` route (the rollback ran) or ended `failed` (exit 3, `workflow_error`).
/// Here the step's process always dies of the signal awf is handling: every run ends
/// cancelled (130 for SIGINT, 143 for SIGTERM), with the cancel hook only, the step run
/// once and recorded `cancelled`.
#[test]
fn a_signal_that_also_kills_the_step_cancels_the_run_and_never_fails_the_step() {
    for (sig, code, rounds) in [("INT", 130, 8), ("TERM", 143, 4)] {
        for round in 0..rounds {
            let sb = Sandbox::new().unwrap();
            sb.write("ctrlc.yaml", &group_signal_workflow(sig)).unwrap();
            let r = sb.run(&["run", "ctrlc.yaml"]).unwrap();
            let what = format!("SIG{sig}, round {round}: {}{}", r.stdout, r.stderr);
            assert_eq!(r.code, code, "{what}");
            assert_eq!(
                std::fs::read_to_string(sb.path().join("log.txt")).unwrap_or_default(),
                "cancel\n",
                "{what}"
            );
            assert_eq!(
                std::fs::read_to_string(sb.path().join("ran.txt")).unwrap_or_default(),
                "ran\n",
                "the step was retried: {what}"
            );
            assert!(!r.stderr.contains("killed by signal"), "{what}");
            let id = awf_tests::run_id_in(&format!("{}{}", r.stdout, r.stderr))
                .expect("a run id in the output");
            let status = sb
                .run(&["status", &id, "-f", "json"])
                .unwrap()
                .json()
                .unwrap();
            assert_eq!(status["status"], "cancelled", "{status}");
            assert_eq!(status["states"]["a"]["status"], "cancelled", "{status}");
        }
    }
}

const SEQ: &str = "name: seq
hooks:
  workflow_start:
    - command: echo start >> ran.txt
states:
  initial: a
  a:
    type: step
    command: echo a >> ran.txt
    on_success: b
  b:
    type: step
    command: echo b >> ran.txt
    on_success: done
  done:
    type: terminal
";

/// Finding 2: with a data root whose run records cannot be written (a read-only mount, or
/// `chmod -R a-w` for a user; here its `states` directory is a link into `/proc`, where
/// no one can create a file, root included), the run ran every step, then exited 4. Now
/// nothing of it runs (no `workflow_start` hook, no step): exit 4, `SYSTEM.IO.WRITE_FAILED`,
/// and the ways out in the hint. `AWF_RECORD=off` runs it.
#[test]
fn a_run_whose_start_cannot_be_recorded_runs_nothing() {
    let sb = Sandbox::new().unwrap();
    sb.write("seq.yaml", SEQ).unwrap();
    let root = sb.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::os::unix::fs::symlink("/proc", root.join("states")).unwrap();
    let root_arg = root.display().to_string();
    let r = sb
        .run(&["--storage", &root_arg, "run", "seq.yaml"])
        .unwrap();
    assert_eq!(r.code, 4, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains(
            "[SYSTEM.IO.WRITE_FAILED] the run's start could not be recorded, so nothing of it ran: "
        ),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains(&format!(
            "Hint: free disk space or make the data root {root_arg} writable, or choose another one with `--storage DIR` or `AWF_STORAGE_DIR`; `AWF_RECORD=off` runs without recording (a run that is not recorded cannot be resumed)"
        )),
        "{}",
        r.stderr
    );
    // Nothing was recorded: nothing to resume.
    assert!(!r.stderr.contains("awf resume"), "{}", r.stderr);
    assert!(
        !sb.path().join("ran.txt").exists(),
        "something ran: {}",
        std::fs::read_to_string(sb.path().join("ran.txt")).unwrap_or_default()
    );
    // The same with -f json: one result document, the error in it.
    let j = sb
        .run(&["--storage", &root_arg, "run", "seq.yaml", "-f", "json"])
        .unwrap();
    assert_eq!(j.code, 4, "{}", j.stderr);
    let doc = j.json().unwrap();
    assert_eq!(doc["status"], "failure", "{doc}");
    assert_eq!(doc["error"]["code"], "SYSTEM.IO.WRITE_FAILED", "{doc}");
    assert!(!sb.path().join("ran.txt").exists());
    // The hint's way out works.
    let off = sb
        .cmd(&["--storage", &root_arg, "run", "seq.yaml"])
        .env("AWF_RECORD", "off")
        .output()
        .unwrap();
    assert_eq!(off.status.code(), Some(0), "{off:?}");
    assert_eq!(
        std::fs::read_to_string(sb.path().join("ran.txt")).unwrap(),
        "start\na\nb\n"
    );
}

/// Finding 2: a data root that cannot be created at all (a missing directory on a read-only
/// mount; here under a regular file, which stops root too) only warned, and the run went on
/// unrecorded (exit 0): now it is refused as one whose start could not be written, before
/// anything of it runs.
#[test]
fn a_run_whose_data_root_cannot_be_created_runs_nothing() {
    let sb = Sandbox::new().unwrap();
    sb.write("seq.yaml", SEQ).unwrap();
    sb.write("blocker", "a file, not a directory\n").unwrap();
    let root = sb.path().join("blocker/data");
    let r = sb
        .run(&["--storage", &root.display().to_string(), "run", "seq.yaml"])
        .unwrap();
    assert_eq!(r.code, 4, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "[SYSTEM.IO.WRITE_FAILED] the run's start could not be recorded, so nothing of it ran: cannot write the directory {}/states: ",
            root.display()
        )),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("`AWF_RECORD=off`"), "{}", r.stderr);
    assert!(!r.stderr.contains("runs are not recorded"), "{}", r.stderr);
    assert!(!sb.path().join("ran.txt").exists());
}

/// Finding 3: `"printf '\033]0;x\007'"` in YAML double quotes holds a NUL byte (`\0`):
/// `awf validate` said valid and every run failed, blaming a template. Now validate (and the
/// run's load) reports it at the command's line, with how to write it.
#[test]
fn a_nul_byte_written_in_a_command_is_a_validation_error_at_its_line() {
    let sb = Sandbox::new().unwrap();
    let wf = "name: esc\nstates:\n  initial: a\n  a:\n    type: step\n    command: \"printf '\\033]0;x\\007'\"\n    on_success: done\n  done:\n    type: terminal\n";
    let path = sb.write("esc.yaml", wf).unwrap();
    let file = path.display().to_string();
    let hint = "  Hint: in a YAML double-quoted string `\\0` is a NUL byte (so `\"\\033\"` is NUL then `33`): write `\\e` or `\\x1b` for ESC, `\\\\033` to pass `\\033` on to the command (printf), or use single quotes or a block scalar (`|`), where a backslash is itself\n";
    let v = sb.run(&["validate", "esc.yaml"]).unwrap();
    assert_eq!(v.code, 2, "{}{}", v.stdout, v.stderr);
    assert_eq!(
        v.stderr,
        format!(
            "{file}:6:5: error [WORKFLOW.VALIDATION.INVALID_STATE] states.a.command: the command holds a NUL byte (at byte 9), which no command line can carry: the run would fail here\n{hint}Workflow 'esc.yaml' is invalid: 1 error\n"
        )
    );
    let r = sb.run(&["run", "esc.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("states.a.command: the command holds a NUL byte (at byte 9)"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("template"), "{}", r.stderr);
    // The same in a hook.
    let hooked = "name: h\nhooks:\n  workflow_end:\n    - command: \"echo \\0\"\nstates:\n  initial: done\n  done:\n    type: terminal\n";
    sb.write("h.yaml", hooked).unwrap();
    let v = sb.run(&["validate", "h.yaml"]).unwrap();
    assert_eq!(v.code, 2, "{}{}", v.stdout, v.stderr);
    assert!(
        v.stderr.contains(
            "hooks.workflow_end.0: the command holds a NUL byte (at byte 6), which no command line can carry"
        ),
        "{}",
        v.stderr
    );
    // Written the ways the hint gives, it is valid.
    let fixed = "name: esc\nstates:\n  initial: a\n  a:\n    type: step\n    command: \"printf '\\\\033]0;x\\\\007'\"\n    on_success: done\n  done:\n    type: terminal\n";
    sb.write("fixed.yaml", fixed).unwrap();
    let v = sb.run(&["validate", "fixed.yaml"]).unwrap();
    assert_eq!(v.code, 0, "{}{}", v.stdout, v.stderr);
}

/// Finding 3: at run time, a NUL byte is blamed on a template alone only when the command
/// as written has none; one in a script file points at the script file.
#[test]
fn a_nul_byte_at_run_time_names_where_it_came_from() {
    let sb = Sandbox::new().unwrap();
    sb.write("bin.dat", "a\0b").unwrap();
    let wf = "name: nul\nstates:\n  initial: s\n  s:\n    type: step\n    command: 'printf %s {{shell_quote (readFile \"bin.dat\")}}'\n    on_success: done\n  done:\n    type: terminal\n";
    let r = sb.run_workflow("nul.yaml", wf, &[]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "the command contains a NUL byte (at byte 13), which no command line can carry; it came from a template's value (e.g. `readFile` of a binary file)"
        ),
        "{}",
        r.stderr
    );
    sb.write("s.sh", "echo a\0b\n").unwrap();
    let wf = "name: script\nstates:\n  initial: s\n  s:\n    type: step\n    script_file: s.sh\n    on_success: done\n  done:\n    type: terminal\n";
    let r = sb.run_workflow("script.yaml", wf, &[]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "which no command line can carry; it is in the script file, or came from a template's value in it\n"
        ),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("Hint: Remove the NUL bytes from the script file"),
        "{}",
        r.stderr
    );
}

/// Finding 4: `awf run wf -f json | true` (the reader gone before the result is written)
/// exited 0 with the result lost without a word. A reader that stops reading is still no
/// failure (docs/compatibility.md: the run's exit code stands, as in text output), but the
/// lost result is said on stderr, once. The text format, whose stdout carries the steps'
/// output, goes on to the run's own exit code too.
#[test]
fn a_json_result_whose_reader_went_away_is_said_on_stderr() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "wf.yaml",
        "name: wf\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo hi\n    on_success: done\n  done:\n    type: terminal\n",
    )
    .unwrap();
    for (format, said) in [("json", 1), ("text", 0)] {
        let mut child = sb
            .cmd(&["run", "wf.yaml", "-f", format])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The read end closed before anything is written: every write gets EPIPE.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{format}: {stderr}");
        assert_eq!(
            stderr
                .matches("WARN the run's JSON result was not written in full: its reader closed stdout (broken pipe)\n")
                .count(),
            said,
            "{format}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{format}: {stderr}");
    }
}
