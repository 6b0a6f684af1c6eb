//! Fixes from a new user's trial, over the real binary: a resumed run's `duration_ms` is
//! completed_at − started_at (spanning its attempts) on every surface.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

/// `b` fails until the file `ok` exists.
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
    command: test -f ok
    on_success: done
  done:
    type: terminal
"#;

#[test]
fn a_resumed_runs_duration_spans_its_attempts_on_every_surface() {
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
    std::thread::sleep(std::time::Duration::from_millis(1200));
    sb.write("ok", "").unwrap();
    let r = sb.run(&["resume", &id, "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    // The run's result (its run_finished event's).
    let finished = r.json().unwrap()["duration_ms"].as_u64().unwrap();
    let h = sb.run(&["history", "-f", "json"]).unwrap();
    let rows = h.json().unwrap();
    let row = &rows[0];
    let start = row["started_at_ms"].as_u64().unwrap();
    let end = row["completed_at_ms"].as_u64().unwrap();
    let d = row["duration_ms"].as_u64().unwrap();
    assert_eq!(d, end - start, "{row}");
    assert!(d >= 1200, "{row}");
    assert_eq!(finished, d, "{row}");
    // `awf status` shows the same figure (milliseconds), `awf history` its rounding.
    let s = sb.run(&["status", &id]).unwrap();
    let shown = s
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("Duration:"))
        .unwrap()
        .trim()
        .to_owned();
    // Go's duration text: milliseconds, trailing zeros dropped (1230 ms is `1.23s`; the test
    // failed whenever the duration was a multiple of 10 ms).
    let secs = format!("{}.{:03}", d / 1000, d % 1000);
    let secs = format!("{}s", secs.trim_end_matches('0').trim_end_matches('.'));
    assert_eq!(shown, secs, "{}", s.stdout);
    let text = sb.run(&["history"]).unwrap();
    let tenths = format!("{:.1}s", (d as f64) / 1000.0);
    assert!(text.stdout.contains(&tenths), "{} vs {tenths}", text.stdout);
}

/// Greets `who`, then fails until the file `ok` exists; declares no `api_token`.
const BASIC: &str = r#"
name: basic
inputs:
  - name: who
    type: string
    required: true
states:
  initial: greet
  greet:
    type: step
    command: echo "hello {{.inputs.who}}"
    on_success: check
  check:
    type: step
    command: test -f ok
    on_success: done
  done:
    type: terminal
"#;

/// Same, declaring the secret `api_token` it needs.
const NEEDS_TOKEN: &str = r#"
name: needs-token
inputs:
  - name: who
    type: string
    required: true
  - name: api_token
    type: string
    required: true
states:
  initial: greet
  greet:
    type: step
    command: echo "hello {{.inputs.who}}"
    on_success: check
  check:
    type: step
    command: test -f ok && test "{{.inputs.api_token}}" = supersecret1
    on_success: done
  done:
    type: terminal
"#;

fn started_id(stderr: &str, name: &str) -> String {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix(&format!("Workflow started: {name} (")))
        .and_then(|l| l.strip_suffix(')'))
        .unwrap_or_else(|| panic!("no run id in {stderr}"))
        .to_owned()
}

#[test]
fn an_undeclared_secret_named_input_does_not_block_resume() {
    let sb = Sandbox::new().unwrap();
    sb.write("basic.yaml", BASIC).unwrap();
    let r = sb
        .run(&[
            "run",
            "basic.yaml",
            "-i",
            "who=Eve",
            "-i",
            "api_token=supersecret1",
        ])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(!r.stderr.contains("supersecret1"), "{}", r.stderr);
    let id = started_id(&r.stderr, "basic");
    sb.write("ok", "").unwrap();
    let r = sb.run(&["resume", &id, "--from", "greet"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("must be given again"), "{}", r.stderr);
}

#[test]
fn a_declared_secret_input_is_asked_again_with_a_hint_that_keeps_from() {
    let sb = Sandbox::new().unwrap();
    sb.write("needs-token.yaml", NEEDS_TOKEN).unwrap();
    let r = sb
        .run(&[
            "run",
            "needs-token.yaml",
            "-i",
            "who=Eve",
            "-i",
            "api_token=supersecret1",
        ])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let id = started_id(&r.stderr, "needs-token");
    sb.write("ok", "").unwrap();
    let r = sb.run(&["resume", &id, "--from", "greet"]).unwrap();
    assert_ne!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("api_token"), "{}", r.stderr);
    let hint = format!("awf resume {id} --from greet --input api_token=<value>");
    assert!(r.stderr.contains(&hint), "{}", r.stderr);
    let r = sb
        .run(&[
            "resume",
            &id,
            "--from",
            "greet",
            "--input",
            "api_token=supersecret1",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
}
