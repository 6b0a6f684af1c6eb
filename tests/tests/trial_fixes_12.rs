//! Fixes from a trial of runs, over the real binary: a process a step detaches (`setsid`)
//! does not outlive its run under `awf serve` (the sweep is scoped to the root run, the
//! server's other runs keep theirs); stored step output shown again (`awf status`, `awf
//! history`, the run's summary) has no terminal escapes left, JSON keeps it exact; `awf
//! resume` marks where the earlier attempts end; `awf resume --list`'s PROGRESS is completed
//! states out of the workflow's; `run -f quiet` names the run at the start on stderr and once
//! on stdout.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;
use std::time::Instant;

use awf_tests::Sandbox;
use awf_tests::http_serve;
use awf_tests::http_serve::Server;
use awf_tests::wait_for;

/// A step that detaches `sleep 300` with `setsid -f` (own session and process group, out of
/// the step's group), waits until it runs, then runs `$END` (`true`: the run completes,
/// `false`: it fails, `sleep 300`: it stays running until cancelled). Every process of the
/// run carries the `RUN_MARK` input in its environment.
const DETACH: &str = r#"
name: detach
inputs:
  - name: RUN_MARK
    type: string
  - name: END
    type: string
states:
  initial: start
  start:
    type: step
    command: "setsid -f sh -c 'touch \"ready-$RUN_MARK\"; exec sleep 300' >/dev/null 2>&1 </dev/null; while [ ! -f \"ready-$RUN_MARK\" ]; do sleep 0.01; done; $END"
    on_success: done
    on_failure: failed
  done:
    type: terminal
  failed:
    type: terminal
    status: failure
"#;

/// Same, detaching with `setsid cmd &` in a sub-workflow: the processes of a child run are
/// the root run's.
const DETACH_IN_CHILD: &str = r#"
name: parent
inputs:
  - name: RUN_MARK
    type: string
states:
  initial: call
  call:
    type: call_workflow
    workflow: detach-bg
    inputs:
      RUN_MARK: "{{.inputs.RUN_MARK}}"
    on_success: done
  done:
    type: terminal
"#;

const DETACH_BG: &str = r#"
name: detach-bg
inputs:
  - name: RUN_MARK
    type: string
states:
  initial: start
  start:
    type: step
    command: "setsid sh -c 'touch \"ready-$RUN_MARK\"; exec sleep 300' >/dev/null 2>&1 </dev/null & while [ ! -f \"ready-$RUN_MARK\" ]; do sleep 0.01; done"
    on_success: done
  done:
    type: terminal
"#;

/// The live processes (zombies have no environment) whose environment holds
/// `RUN_MARK=<mark>`: only this test's, whatever they were re-parented to.
fn marked(mark: &str) -> Vec<u32> {
    let needle = format!("RUN_MARK={mark}");
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(environ) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if environ.split(|b| *b == 0).any(|v| v == needle.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

/// Waits (15 s at most) until no process of `mark` is left; on failure SIGKILLs them (the
/// test leaves nothing behind) and panics.
fn wait_gone(mark: &str, what: &str) {
    let t0 = Instant::now();
    loop {
        let left = marked(mark);
        if left.is_empty() {
            return;
        }
        if t0.elapsed() > Duration::from_secs(15) {
            kill_all(&left);
            panic!("{what}: processes left behind: {left:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn kill_all(pids: &[u32]) {
    for pid in pids {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
}

/// SIGKILLs every process of the marks when dropped (a failing test leaves nothing behind).
struct Cleanup(Vec<String>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for m in &self.0 {
            kill_all(&marked(m));
        }
    }
}

fn start_detach(s: &Server, mark: &str, end: &str) -> String {
    http_serve::start_run(
        s,
        "detach",
        &format!(r#"{{"inputs": {{"RUN_MARK": "{mark}", "END": "{end}"}}}}"#),
    )
}

fn unique(sb: &Sandbox) -> String {
    sb.path()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[test]
fn a_detached_process_does_not_outlive_its_run_under_serve_and_other_runs_keep_theirs() {
    let sb = http_serve::sandbox_with(&[
        ("detach", DETACH),
        ("parent", DETACH_IN_CHILD),
        ("detach-bg", DETACH_BG),
    ]);
    let u = unique(&sb);
    let (keep, ok, fail, child) = (
        format!("{u}-keep"),
        format!("{u}-ok"),
        format!("{u}-fail"),
        format!("{u}-child"),
    );
    let _cleanup = Cleanup(vec![keep.clone(), ok.clone(), fail.clone(), child.clone()]);
    let s = http_serve::start(&sb, &[]);

    // A run that stays running with its own detached process.
    let kept = start_detach(&s, &keep, "sleep 300");
    wait_for("the kept run's detached process", || {
        sb.path().join(format!("ready-{keep}")).exists()
    });

    // A run that completes: its detached process is stopped, the other run's is not.
    let id = start_detach(&s, &ok, "true");
    http_serve::wait_status(&s, &id, "completed");
    assert!(sb.path().join(format!("ready-{ok}")).exists());
    wait_gone(&ok, "after the run completed");

    // A run that fails: the same.
    let id = start_detach(&s, &fail, "false");
    http_serve::wait_status(&s, &id, "failed");
    assert!(sb.path().join(format!("ready-{fail}")).exists());
    wait_gone(&fail, "after the run failed");

    // A sub-workflow's detached process (`setsid cmd &`) goes with its root run.
    let id = http_serve::start_run(
        &s,
        "parent",
        &format!(r#"{{"inputs": {{"RUN_MARK": "{child}"}}}}"#),
    );
    http_serve::wait_status(&s, &id, "completed");
    assert!(sb.path().join(format!("ready-{child}")).exists());
    wait_gone(&child, "after the run with a sub-workflow completed");

    // The kept run's processes (its step and its detached sleep) all still run.
    assert_eq!(http_serve::execution(&s, &kept)["status"], "running");
    let alive = marked(&keep);
    assert!(
        alive.len() >= 2,
        "the other run's processes were stopped: {alive:?}"
    );

    // Cancelled: its detached process goes too.
    let (code, body, _) =
        http_serve::curl(&["-X", "DELETE", &format!("{}/api/executions/{kept}", s.base)]);
    assert_eq!(code, 204, "{body}");
    http_serve::wait_status(&s, &kept, "cancelled");
    wait_gone(&keep, "after the run was cancelled");
}

/// A step printing terminal escapes (retitle, clear screen, a bell, a lone CR) on stdout and
/// stderr; the run ends at a terminal whose message is that output: completed with
/// `--input fail=no`, failed (the message is the error) with `fail=yes`.
const ESCAPES: &str = r#"
name: escapes
inputs:
  - name: fail
    type: string
states:
  initial: s
  s:
    type: step
    command: |
      printf 'title\033]0;pwned\007\033[2Jclear\rback\n'; printf 'err\033[31mred\n' >&2; [ {{.inputs.fail}} = no ]
    on_success: done
    on_failure: failed
  done:
    type: terminal
    message: "got {{.states.s.Output}}"
  failed:
    type: terminal
    status: failure
    message: "got {{.states.s.Output}}"
"#;

/// The raw bytes a step printed, as they must not reach a terminal replayed.
const RAW: &str = "title\u{1b}]0;pwned\u{7}\u{1b}[2Jclear\rback";
/// The same, escaped.
const ESCAPED: &str = "title\\u{1b}]0;pwned\\u{7}\\u{1b}[2Jclear\\u{d}back";

/// Whether `text` holds a control character other than newline and tab.
fn has_controls(text: &str) -> bool {
    text.chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
}

fn run_id_of(text: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix("Workflow started: escapes ("))
        .and_then(|l| l.strip_suffix(')'))
        .unwrap_or_else(|| panic!("no run id in {text}"))
        .to_owned()
}

#[test]
fn stored_step_output_is_shown_without_control_characters_and_json_keeps_it_exact() {
    let sb = Sandbox::new().unwrap();
    sb.write("escapes.yaml", ESCAPES).unwrap();
    for (fail, code, status) in [("no", 0, "completed"), ("yes", 3, "failed")] {
        let input = format!("fail={fail}");
        // The run's own summary (the message, the error, the failed step's line).
        let r = sb.run(&["run", "escapes.yaml", "--input", &input]).unwrap();
        assert_eq!(r.code, code, "{}", r.stderr);
        assert!(!has_controls(&r.stderr), "{:?}", r.stderr);
        assert!(r.stderr.contains(ESCAPED), "{}", r.stderr);
        let id = run_id_of(&r.stderr);

        // `awf status` (text and table), `awf history`: no control character either.
        for args in [
            vec!["status", id.as_str()],
            vec!["status", id.as_str(), "-f", "table"],
            vec!["history"],
        ] {
            let r = sb.run(&args).unwrap();
            assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
            assert!(!has_controls(&r.stdout), "{args:?}: {:?}", r.stdout);
            assert!(!has_controls(&r.stderr), "{args:?}: {:?}", r.stderr);
        }
        let r = sb.run(&["status", &id]).unwrap();
        assert!(r.stdout.contains(ESCAPED), "{}", r.stdout);

        // JSON keeps every byte.
        let v = sb
            .run(&["status", &id, "-f", "json"])
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(v["status"], status, "{v}");
        let steps = v["steps"].as_array().unwrap();
        assert_eq!(steps[0]["output"], format!("{RAW}\n"), "{v}");
        assert_eq!(steps[0]["stderr"], "err\u{1b}[31mred\n", "{v}");
    }
    // A live step's own output, streamed as it comes, is what the step wrote (as run by hand),
    // its `[OUT] ` prefix written again after a carriage return (stop 42: a line rewritten
    // with `\r` kept its prefix).
    let r = sb
        .run(&[
            "run",
            "escapes.yaml",
            "--input",
            "fail=no",
            "-o",
            "streaming",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains(&format!("[OUT] {}\n", RAW.replace('\r', "\r[OUT] "))),
        "{:?}",
        r.stdout
    );
}

/// `a`, `b`, then `c`, which fails until the file `ok` exists.
const RESUMABLE: &str = r#"
name: resumable
states:
  initial: a
  a:
    type: step
    command: echo a
    on_success: b
  b:
    type: step
    command: echo b
    on_success: c
  c:
    type: step
    command: "[ -f ok ]"
    on_success: done
  done:
    type: terminal
"#;

/// The index of the first line of `lines` that starts with `prefix` (after trimming).
fn line_at(lines: &[&str], prefix: &str) -> usize {
    lines
        .iter()
        .position(|l| l.trim_start().starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in {lines:#?}"))
}

#[test]
fn resume_marks_where_the_earlier_attempts_end_and_the_resumed_one_starts() {
    let sb = Sandbox::new().unwrap();
    sb.write("resumable.yaml", RESUMABLE).unwrap();
    let r = sb.run(&["run", "resumable.yaml"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let id = r
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("Workflow started: resumable ("))
        .and_then(|l| l.strip_suffix(')'))
        .unwrap()
        .to_owned();
    sb.write("ok", "").unwrap();
    let r = sb.run(&["resume", &id]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines: Vec<&str> = r.stderr.lines().collect();
    let marker =
        format!("Workflow resumed: resumable ({id}) from step c (the steps above ran before)");
    let at = line_at(&lines, &marker);
    // The earlier attempt's lines come first, under its own start line; the resumed
    // attempt's after the marker.
    assert!(line_at(&lines, "Workflow started: resumable (") < line_at(&lines, "✓ a"));
    assert!(line_at(&lines, "✗ c") < at, "{}", r.stderr);
    assert!(at < line_at(&lines, "✓ c"), "{}", r.stderr);
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("Workflow started:"))
            .count(),
        1,
        "{}",
        r.stderr
    );
}

/// Four steps and a terminal; `b` fails, so the run stops after completing `a`.
const STOPS_EARLY: &str = r#"
name: stops-early
states:
  initial: a
  a:
    type: step
    command: echo a
    on_success: b
  b:
    type: step
    command: exit 1
    on_success: c
  c:
    type: step
    command: echo c
    on_success: d
  d:
    type: step
    command: echo d
    on_success: done
  done:
    type: terminal
"#;

#[test]
fn resume_list_progress_counts_completed_states_out_of_the_workflows_states() {
    let sb = Sandbox::new().unwrap();
    sb.write("stops-early.yaml", STOPS_EARLY).unwrap();
    let r = sb.run(&["run", "stops-early.yaml"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let row = |stdout: &str| -> Vec<String> {
        stdout
            .lines()
            .find(|l| l.contains("stops-early"))
            .unwrap_or_else(|| panic!("no row in {stdout}"))
            .split(|c: char| c.is_whitespace() || c == '|')
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .collect()
    };
    // 1 of its 4 steps completed (the terminal is not a step to do).
    let r = sb.run(&["resume", "--list"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(row(&r.stdout)[4], "1/4", "{}", r.stdout);
    let r = sb.run(&["resume", "--list", "-f", "table"]).unwrap();
    assert!(row(&r.stdout).contains(&"1/4".to_owned()), "{}", r.stdout);
    let v = sb
        .run(&["resume", "--list", "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(v[0]["progress"], "1/4", "{v}");
    // Without its workflow file the total is unknown.
    std::fs::remove_file(sb.path().join("stops-early.yaml")).unwrap();
    let r = sb.run(&["resume", "--list"]).unwrap();
    assert_eq!(row(&r.stdout)[4], "1/?", "{}", r.stdout);
}

/// `-f quiet` keeps AWF (Go)'s stdout (the run id alone, once the run has ended: AWF (Go)
/// prints nothing at the start in that format); the id is on stderr from the start, in the
/// `Workflow started` line every text format prints.
#[test]
fn run_quiet_names_the_run_at_the_start_on_stderr_and_only_once_on_stdout() {
    let sb = Sandbox::new().unwrap();
    sb.write("resumable.yaml", RESUMABLE).unwrap();
    sb.write("ok", "").unwrap();
    let r = sb.run(&["run", "resumable.yaml", "-f", "quiet"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let id = r.stdout.trim_end_matches('\n');
    assert_eq!(r.stdout, format!("{id}\n"));
    assert_eq!(id.len(), 36, "{:?}", r.stdout);
    assert_eq!(
        r.stderr.lines().next(),
        Some(format!("Workflow started: resumable ({id})").as_str()),
        "{}",
        r.stderr
    );
}

#[test]
fn the_resume_hint_shows_a_state_name_without_control_characters() {
    // The hint's `--from <state>` printed a real ESC where every other line escaped it.
    let sb = Sandbox::new().unwrap();
    sb.write(
        "esc.yaml",
        "name: esc\nstates:\n  initial: \"s\\e[31mX\"\n  \"s\\e[31mX\":\n    type: step\n    command: \"false\"\n    on_failure: failed\n  failed:\n    type: terminal\n    status: failure\n",
    )
    .unwrap();
    let r = sb.run(&["run", "esc.yaml"]).unwrap();
    assert_ne!(r.code, 0, "{}", r.stderr);
    // Shell-quoted too (trial_fixes_30: a state name is never shell code when pasted), in
    // ANSI-C quotes that bash, zsh and ksh read back as the name (stop 42's breaker).
    assert!(r.stderr.contains("--from $'s\\e[31mX'"), "{}", r.stderr);
    assert!(!has_controls(&r.stderr), "{:?}", r.stderr);
}
