//! Fixes of a CI engineer's trial of `awf run` and `awf validate` (trial 77): `-o buffered`
//! with a stdout whose reader went away, a failed command's error when its stderr is long,
//! `awf validate -f quiet` of a workflow that cannot be found. Over the real binary with a
//! private data dir.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Stdio;

use awf_tests::Sandbox;
use awf_tests::run_id_in;
use pretty_assertions::assert_eq;
use serde_json::Value;

/// Three steps writing to both streams, the last failing with exit code 2.
const THREE: &str = "name: three\nstates:\n  initial: a\n  a: {type: step, command: \"echo a-out; echo a-err >&2\", on_success: b}\n  b: {type: step, command: \"echo b-out; echo b-err >&2\", on_success: c}\n  c: {type: step, command: \"echo c-out; echo c-err >&2; exit 2\", on_success: done, on_failure: failed}\n  done: {type: terminal}\n  failed: {type: terminal, status: failure}\n";

/// One step running `command`, routed to a failure terminal when it fails.
fn one_step(name: &str, command: &str) -> String {
    format!(
        "name: {name}\nstates:\n  initial: a\n  a: {{type: step, command: {command:?}, on_success: done, on_failure: failed}}\n  done: {{type: terminal}}\n  failed: {{type: terminal, status: failure}}\n"
    )
}

/// `text` with its run id as `<id>` and every step line's duration, `(12ms)`, as `(T)`.
fn normalized(text: &str) -> String {
    let id = run_id_in(text).expect("a run id");
    text.replace(&id, "<id>")
        .lines()
        .map(|l| {
            let Some(open) = l.find(" (") else {
                return l.to_owned();
            };
            let Some(len) = l[open + 2..].find(')') else {
                return l.to_owned();
            };
            let inside = &l[open + 2..open + 2 + len];
            if inside.ends_with('s')
                && inside
                    .chars()
                    .all(|c| c.is_ascii_digit() || "m.sµ".contains(c))
            {
                format!("{} (T){}", &l[..open], &l[open + 3 + len..])
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Finding 1: with `-o buffered`, a stdout whose reader had gone away took every step line
/// and stderr block with it (only the `→` lines were left, and `(above)` pointed at nothing).
/// Stderr is the same whether stdout's reader is there or not; the exit code stays 3.
#[test]
fn buffered_stderr_does_not_depend_on_stdout_s_reader() {
    let sb = Sandbox::new().unwrap();
    let wf = sb.write("three.yaml", THREE).unwrap();
    let wf = wf.to_str().unwrap();

    let read = sb.run(&["run", wf, "-o", "buffered"]).unwrap();
    assert_eq!(read.code, 3, "{}", read.stderr);
    assert_eq!(read.stdout, "a-out\nb-out\nc-out\n");

    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let gone = sb
        .cmd(&["run", wf, "-o", "buffered"])
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let gone_err = String::from_utf8_lossy(&gone.stderr).into_owned();
    assert_eq!(gone.status.code(), Some(3), "{gone_err}");
    assert_eq!(normalized(&gone_err), normalized(&read.stderr));
    assert_eq!(
        normalized(&gone_err),
        "Workflow started: three (<id>)\n  → a\na-err\n  ✓ a (T)\n  → b\nb-err\n  ✓ b (T)\n  → c\nc-err\n  ✗ c (T): exit code 2: c-err\nWorkflow failed: [EXECUTION.WORKFLOW.FAILURE_TERMINAL] workflow reached failure terminal 'failed' after step c failed: c-err\n  terminal: failed\n  Hint: continue it with `awf resume <id> --from c`"
    );
}

/// Finding 4: a failed command's error held the last 2,000 bytes of its stderr, cut
/// mid-line: the `✗` line showed `501`, not stderr's first line as README says, and `-f
/// json`'s `error.message` and `states.a.error` the same cut tail. The error is AWF (Go)'s
/// `step a: <stderr>`, a long stderr keeping its first line and its last whole lines around
/// a `… N bytes cut …` line; `awf status -f json` says the same.
#[test]
fn a_long_stderr_keeps_its_first_line_in_the_error() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "errlong.yaml",
            &one_step("errlong", "echo FIRSTLINE >&2; seq 1 1000 >&2; exit 3"),
        )
        .unwrap();
    let wf = wf.to_str().unwrap();
    let stderr: String = std::iter::once("FIRSTLINE".to_owned())
        .chain((1..=1000).map(|i| i.to_string()))
        .collect::<Vec<_>>()
        .join("\n");

    let text = sb.run(&["run", wf]).unwrap();
    assert_eq!(text.code, 3, "{}", text.stderr);
    let cross: Vec<String> = normalized(&text.stderr)
        .lines()
        .filter(|l| l.contains('✗'))
        .map(str::to_owned)
        .collect();
    assert_eq!(cross, ["  ✗ a (T): exit code 3: FIRSTLINE"]);

    let r = sb.run(&["run", wf, "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(
        doc["states"]["a"]["stderr"],
        Value::from(format!("{stderr}\n"))
    );
    let error = doc["states"]["a"]["error"].as_str().unwrap();
    let (first, rest) = error.split_once('\n').unwrap();
    assert_eq!(first, "step a: FIRSTLINE");
    let (cut_line, end) = rest.split_once('\n').unwrap();
    let n: usize = cut_line
        .strip_prefix("… ")
        .and_then(|l| l.strip_suffix(" bytes cut …"))
        .expect(cut_line)
        .parse()
        .unwrap();
    // The end is stderr's last whole lines, and nothing else was left out.
    assert!(stderr.ends_with(&format!("\n{end}")), "{end:?}");
    assert!(end.ends_with("\n999\n1000") && end.len() < 2000, "{end:?}");
    assert_eq!("FIRSTLINE".len() + n + end.len(), stderr.len());
    assert_eq!(
        doc["error"]["message"],
        Value::from(format!(
            "workflow reached failure terminal 'failed' after step a failed: {}",
            error.strip_prefix("step a: ").unwrap()
        ))
    );

    let id = doc["run_id"].as_str().unwrap();
    let status = sb.run(&["status", id, "-f", "json"]).unwrap();
    let status = status.json().unwrap();
    assert_eq!(status["error"]["message"], doc["error"]["message"]);
    assert_eq!(status["states"]["a"]["error"], Value::from(error));
}

/// Finding 5: `awf validate <missing> -f quiet` printed nothing on stdout, where README says
/// quiet validate prints only `valid` or `invalid`: it prints `invalid` (exit 1, the load
/// error's, and the error on stderr).
#[test]
fn quiet_validate_of_a_missing_workflow_prints_invalid() {
    let sb = Sandbox::new().unwrap();
    let r = sb.run(&["validate", "nosuch", "-f", "quiet"]).unwrap();
    assert_eq!((r.code, r.stdout.as_str()), (1, "invalid\n"));
    assert!(
        r.stderr.contains("[USER.FACADE.WORKFLOW_NOT_FOUND]"),
        "{}",
        r.stderr
    );
}
