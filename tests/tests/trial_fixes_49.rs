//! New users' trials over the real binary: a skipped parallel branch's exit code, `awf
//! history` statistics with sub-workflow runs, the exit code in `awf status` of a failed run,
//! a sub-workflow's renamed outputs in the calling state's `Output`, the project config that
//! `awf resume` reads, and `shell_quote` values in a `<<-` here-document.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use pretty_assertions::assert_eq;

/// A parallel block whose first branch fails under `all_succeed` with `max_concurrent: 1`
/// (so the second branch never starts), and a state after it that reads the skipped branch.
fn skipped_branch(read: &str) -> String {
    format!(
        r#"name: skipped
states:
  initial: p
  p:
    type: parallel
    parallel: [a, b]
    strategy: all_succeed
    max_concurrent: 1
    on_success: done
    on_failure: report
  a:
    type: step
    command: 'exit 3'
  b:
    type: step
    command: 'echo b'
  report:
    type: step
    command: '{read}'
    transitions:
      - when: 'states.b.ExitCode == 0'
        goto: zero
      - when: 'states.b.ExitCode != 0'
        goto: nonzero
    on_success: done
  zero: {{type: step, command: 'echo zero', on_success: done}}
  nonzero: {{type: step, command: 'echo nonzero', on_success: done}}
  done:
    type: terminal
"#
    )
}

/// Trial: a branch that never started read `{{.states.b.ExitCode}}` as 0, which looks like
/// success. Its `Status` is `skipped`; its `ExitCode` reads as a state that has not run: an
/// error naming why in a template, `false` in an expression (both `== 0` and `!= 0`).
#[test]
fn a_skipped_branch_has_no_exit_code() {
    let sb = Sandbox::new().unwrap();

    // Status reads "skipped"; neither exit-code transition is taken.
    let r = sb
        .run_workflow(
            "status.yaml",
            &skipped_branch(r#"echo "b is {{.states.b.Status}}""#),
            &["-f", "json"],
        )
        .unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let v = r.json().unwrap();
    assert_eq!(v["states"]["b"]["status"], "skipped");
    assert_eq!(v["states"]["report"]["output"], "b is skipped\n");
    assert_eq!(v["states"].get("zero"), None, "{v}");
    assert_eq!(v["states"].get("nonzero"), None, "{v}");

    // The exit code itself is no value to print.
    let r = sb
        .run_workflow(
            "exit.yaml",
            &skipped_branch(r#"echo "b exited {{.states.b.ExitCode}}""#),
            &["-f", "json"],
        )
        .unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let v = r.json().unwrap();
    assert_eq!(v["states"]["report"]["status"], "failed");
    assert_eq!(
        v["states"]["report"]["error"],
        "step report: interpolate command: undefined variable: states.b.ExitCode (state \"b\" was skipped: its parallel block ended before it started, so it has no exit code; its Status reads \"skipped\")"
    );
}

/// A sub-workflow and a workflow that calls it twice.
const CHILD: &str = "name: kid\nstates:\n  initial: s\n  s: {type: step, command: 'echo kid', on_success: done}\n  done: {type: terminal}\n";
const PARENT: &str = "name: mom\nstates:\n  initial: c1\n  c1: {type: call_workflow, workflow: kid, on_success: c2}\n  c2: {type: call_workflow, workflow: kid, on_success: done}\n  done: {type: terminal}\n";

/// Trial: one run of a workflow that calls two sub-workflows showed `Total Executions: 3` in
/// `awf history --stats`. The statistics count the runs a user started (the children are
/// still listed, with their parent, as AWF (Go) lists them), and a sub-workflow's runs only
/// under `--workflow <child>`; `/api/history/stats` counts the same.
#[test]
fn history_statistics_count_the_runs_a_user_started() {
    let sb = awf_tests::http_serve::sandbox_with(&[("kid", CHILD), ("mom", PARENT)]);
    let r = sb.run(&["run", "mom"]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);

    let stats = |args: &[&str]| {
        let mut all = vec!["history", "--stats", "-f", "json"];
        all.extend_from_slice(args);
        let r = sb.run(&all).unwrap();
        assert_eq!(r.code, 0, "{}", r.stderr);
        let v = r.json().unwrap();
        (v["total_executions"].clone(), v["success_count"].clone())
    };
    assert_eq!(stats(&[]), (1.into(), 1.into()));
    assert_eq!(stats(&["--workflow", "mom"]), (1.into(), 1.into()));
    assert_eq!(stats(&["--workflow", "kid"]), (2.into(), 2.into()));
    let text = sb.run(&["history", "--stats"]).unwrap();
    assert!(
        text.stdout.contains("Total Executions: 1\nSuccess: 1\n"),
        "{}",
        text.stdout
    );

    // Listed all the same: the parent and its two children.
    let list = sb.run(&["history", "-f", "json"]).unwrap();
    let rows = list.json().unwrap();
    let rows = rows.as_array().unwrap();
    let mut names: Vec<&str> = rows
        .iter()
        .map(|r| r["workflow_name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["kid", "kid", "mom"]);
    let parent = rows.iter().find(|r| r["workflow_name"] == "mom").unwrap();
    for kid in rows.iter().filter(|r| r["workflow_name"] == "kid") {
        assert_eq!(kid["parent_run_id"], parent["id"]);
    }

    // Over HTTP.
    let s = awf_tests::http_serve::start(&sb, &[]);
    for (query, want) in [("", 1), ("?workflow=kid", 2)] {
        let (code, body, _) =
            awf_tests::http_serve::curl(&[&format!("{}/api/history/stats{query}", s.base)]);
        assert_eq!(code, 200, "{body}");
        let v = awf_tests::http_serve::json_of(&body);
        assert_eq!(v["body"]["total_executions"], want, "{query}: {v}");
    }
}

/// Trial: `awf status` of a run whose command failed with stderr printed `Error:
/// [EXECUTION.COMMAND.FAILED] step flaky: not yet`, without the exit code `awf run`'s `✗`
/// line gives (`exit code 3: not yet`); one without stderr said it already.
#[test]
fn status_says_the_failed_commands_exit_code() {
    let sb = Sandbox::new().unwrap();
    for (name, command, want) in [
        (
            "flaky",
            "echo not yet >&2; exit 3",
            "Error:     [EXECUTION.COMMAND.FAILED] step flaky: exit code 3: not yet",
        ),
        (
            "quiet",
            "exit 5",
            "Error:     [EXECUTION.COMMAND.FAILED] step quiet: exit code 5",
        ),
    ] {
        let yaml = format!(
            "name: {name}\nstates:\n  initial: {name}\n  {name}: {{type: step, command: '{command}', on_success: done}}\n  done: {{type: terminal}}\n"
        );
        let r = sb
            .run_workflow(&format!("{name}.yaml"), &yaml, &["-f", "json"])
            .unwrap();
        assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
        let id = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
        let st = sb.run(&["status", &id]).unwrap();
        assert_eq!(st.code, 0, "{}", st.stderr);
        let error: Vec<&str> = st
            .stdout
            .lines()
            .filter(|l| l.starts_with("Error:"))
            .collect();
        assert_eq!(error, [want], "{}", st.stdout);
    }
}

/// A sub-workflow declaring two outputs under names of its own (not its states' names).
const RENAMING_CHILD: &str = "name: child\noutputs:\n  - {name: result, from: states.process.Output}\n  - {name: note, from: states.process.Stderr}\nstates:\n  initial: process\n  process: {type: step, command: 'printf hello; printf warn >&2', on_success: done}\n  done: {type: terminal}\n";

/// Trial: what the calling state's `Output` holds when the child's outputs are mapped under
/// other names. AWF (Go) does not read a child's `outputs:` and gives `""` there;
/// decisions.md makes `Output` the child's declared outputs as JSON, which stays the child's
/// view (every declared output, under the child's names), while `Outputs` holds the mapped
/// ones under the parent's names. Checked in the run result and in a template.
#[test]
fn a_call_states_output_is_the_childs_outputs_under_the_childs_names() {
    let sb = awf_tests::http_serve::sandbox_with(&[("child", RENAMING_CHILD)]);
    let parent = "name: parent\nstates:\n  initial: call\n  call:\n    type: call_workflow\n    workflow: child\n    outputs: {result: r}\n    on_success: show\n  show:\n    type: step\n    command: printf '%s|%s' '{{.states.call.Output}}' '{{.states.call.Outputs.r}}'\n    on_success: done\n  done: {type: terminal}\n";
    let r = sb
        .run_workflow("parent.yaml", parent, &["-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let v = r.json().unwrap();
    let child_view = r#"{"note":"warn","result":"hello"}"#;
    assert_eq!(v["states"]["call"]["output"], child_view);
    assert_eq!(
        v["states"]["call"]["outputs"],
        serde_json::json!({"r": "hello"})
    );
    assert_eq!(v["states"]["show"]["output"], format!("{child_view}|hello"));
}

/// An OTLP/HTTP traces receiver on a free loopback port: answers every request 200 and
/// counts the `POST /v1/traces` it got. (A thread of the test: it ends with the test process.)
fn traces_receiver() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::BufRead;
    use std::io::Read;
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = std::sync::Arc::clone(&count);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let seen = std::sync::Arc::clone(&seen);
            std::thread::spawn(move || {
                let mut reader = std::io::BufReader::new(conn.try_clone().unwrap());
                let mut conn = conn;
                // One request after another on the connection (keep-alive).
                loop {
                    let mut first = String::new();
                    if reader.read_line(&mut first).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut length = 0usize;
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let line = line.trim_end();
                        if line.is_empty() {
                            break;
                        }
                        if let Some((k, v)) = line.split_once(':')
                            && k.eq_ignore_ascii_case("content-length")
                        {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0u8; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    if first.starts_with("POST /v1/traces ") {
                        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    let ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    if conn.write_all(ok).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, count)
}

/// `a` fails until `ok` is there; `b` writes the input `who` to `got.txt` (in the run's
/// directory).
const WHO: &str = "name: wf\ninputs:\n  - {name: who, default: dflt}\nstates:\n  initial: a\n  a: {type: step, command: 'test -f ok', on_success: b}\n  b: {type: step, command: 'echo \"who={{.inputs.who}}\" > got.txt', on_success: done}\n  done: {type: terminal}\n";

/// Trial: `awf resume <id>` read the resumer's own `.awf/config.yaml` (a broken one there
/// stopped the resume) and exported the run's spans where the resumer's `telemetry:` said.
/// A run resumes with the project configuration of the directory it started in (its
/// `inputs:`, its `telemetry:`), as the rest of its resume does; `--input` still wins.
#[test]
fn a_resume_reads_the_project_configuration_of_the_runs_directory() {
    let sb = Sandbox::new().unwrap();
    let (right, to_right) = traces_receiver();
    let (wrong, to_wrong) = traces_receiver();
    sb.write("proj/wf.yaml", WHO).unwrap();
    sb.write(
        "proj/.awf/config.yaml",
        &format!("inputs:\n  who: right\ntelemetry:\n  exporter: {right}\n"),
    )
    .unwrap();
    sb.write(
        "other/.awf/config.yaml",
        &format!("inputs:\n  who: wrong\ntelemetry:\n  exporter: {wrong}\n"),
    )
    .unwrap();
    let proj = sb.path().join("proj").canonicalize().unwrap();
    let other = sb.path().join("other").canonicalize().unwrap();
    let fail_in_proj = || {
        let _ = std::fs::remove_file(proj.join("ok"));
        let r = sb.run_in(&proj, &["run", "wf.yaml", "-f", "json"]).unwrap();
        assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
        std::fs::write(proj.join("ok"), "").unwrap();
        r.json().unwrap()["run_id"].as_str().unwrap().to_owned()
    };
    let got = || std::fs::read_to_string(proj.join("got.txt")).unwrap();
    let sent = |to: &std::sync::atomic::AtomicUsize| to.load(std::sync::atomic::Ordering::SeqCst);

    // The run's inputs and its exporter, not the resumer's.
    let id = fail_in_proj();
    let before = sent(&to_right);
    assert!(before > 0, "the run exported nothing to {right}");
    let r = sb.run_in(&other, &["resume", &id]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(got(), "who=right\n");
    assert!(
        sent(&to_right) > before,
        "the resume exported nothing to {right}"
    );
    assert_eq!(sent(&to_wrong), 0);

    // `--input` wins over the run's project configuration.
    let id = fail_in_proj();
    let r = sb
        .run_in(&other, &["resume", &id, "--input", "who=flag"])
        .unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(got(), "who=flag\n");

    // A broken configuration in the resumer's directory is none of the run's business.
    sb.write("other/.awf/config.yaml", "inputs: [unclosed\n")
        .unwrap();
    let id = fail_in_proj();
    let r = sb.run_in(&other, &["resume", &id]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(got(), "who=right\n");
    assert_eq!(sent(&to_wrong), 0);
}

/// A `<<-` here-document (tabs stripped) holding a value, unquoted and quoted; the value's
/// default (`--input` trims its value's leading blanks) has tab-indented lines.
const TABS: &str = "name: tabs\nshell_quote: true\ninputs:\n  - {name: v, default: \"\\tone\\n\\t\\ttwo\\nthree\"}\nstates:\n  initial: a\n  a:\n    type: step\n    command: \"cat <<-EOF\\n\\t{{.inputs.v}}\\n\\tEOF\"\n    on_success: done\n  done: {type: terminal}\n";
const QUOTED_TABS: &str = "name: qtabs\nshell_quote: true\ninputs:\n  - {name: v, default: \"\\tone\\n\\t\\ttwo\\nthree\"}\nstates:\n  initial: a\n  a:\n    type: step\n    command: \"cat <<-'EOF'\\n\\t{{.inputs.v}}\\n\\tEOF\"\n    on_success: done\n  done: {type: terminal}\n";

/// Trial: under `shell_quote: true` a value in a `<<-` here-document lost the leading tabs of
/// its lines (the shell strips them from every body line). They arrive intact, under bash and
/// dash; in a quoted `<<-'EOF'`, where nothing can keep them, such a value is refused.
#[test]
fn a_values_tabs_survive_a_tab_stripping_here_document() {
    let value = "\tone\n\t\ttwo\nthree";
    for shell in ["/bin/bash", "/bin/dash"] {
        let mut sb = Sandbox::new().unwrap();
        sb.set_env("SHELL", shell);
        let r = sb.run_workflow("tabs.yaml", TABS, &["-f", "json"]).unwrap();
        assert_eq!(r.code, 0, "{shell}: {}{}", r.stdout, r.stderr);
        let v = r.json().unwrap();
        assert_eq!(v["states"]["a"]["output"], format!("{value}\n"), "{shell}");

        let r = sb
            .run_workflow("qtabs.yaml", QUOTED_TABS, &["-f", "json"])
            .unwrap();
        assert_eq!(r.code, 3, "{shell}: {}{}", r.stdout, r.stderr);
        let v = r.json().unwrap();
        assert_eq!(v["states"]["a"]["error_code"], "EXECUTION.TEMPLATE.FAILED");
        let error = v["states"]["a"]["error"].as_str().unwrap();
        assert!(
            error.contains("starts a line with a tab, which the quoted <<- here-document (<<-'EOF') would strip")
                && error.contains("write <<-EOF unquoted, or << without the -"),
            "{error}"
        );
        // A value without such a line goes in as before.
        let r = sb
            .run_workflow(
                "qtabs.yaml",
                QUOTED_TABS,
                &["-f", "json", "--input", "v=a\nb"],
            )
            .unwrap();
        assert_eq!(r.code, 0, "{shell}: {}{}", r.stdout, r.stderr);
        assert_eq!(r.json().unwrap()["states"]["a"]["output"], "a\nb\n");
    }
}
