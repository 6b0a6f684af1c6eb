//! Leftovers of earlier trials, over the real binary: `awf resume --mock`/`--no-mocks` of a
//! shared store's run that never started (cancelled while queued); a run whose start cannot
//! be recorded says so once (no `WARN run record` line repeating it first); `POST
//! …/validate` gives each finding's line and column in the file, as `awf validate` prints
//! them; a run paused at a breakpoint is at the state it stopped before (`current_step`);
//! `awf status` lists a run's states in the order they were entered; `.error` at a terminal
//! of a workflow run as an MCP tool (`awf mcp-serve --workflows`).

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use awf_tests::Sandbox;
use awf_tests::http_serve;
use awf_tests::mcp::RawServer;
use awf_tests::pg::TestDb;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

/// `awf run --submit WORKFLOW <args…>` with the store of the sandbox: the printed run id.
fn submit(sb: &Sandbox, workflow: &str, args: &[&str]) -> String {
    let mut all = vec!["run", "--submit", workflow];
    all.extend_from_slice(args);
    let r = sb.run(&all).unwrap();
    assert_eq!(r.code, 0, "stdout {} stderr {}", r.stdout, r.stderr);
    r.stdout.trim().to_owned()
}

const TWO: &str = "name: two\nstates:\n  initial: a\n  a: {type: step, command: 'echo real-a', on_success: b}\n  b: {type: step, command: 'echo real-b', on_success: done}\n  done: {type: terminal}\n";

/// Submits `two` with `--mock states.a.output=MOCKED` (no worker: it stays queued), cancels
/// it, then resumes it with `args` (`-f json`): the outputs of `a` and `b`.
fn resumed_outputs(sb: &Sandbox, args: &[&str]) -> (String, String) {
    let id = submit(sb, "two", &["--mock", "states.a.output=MOCKED"]);
    let r = sb.run(&["cancel", &id]).unwrap();
    assert_eq!(r.stdout.trim(), format!("cancelled {id}"), "{}", r.stderr);
    let mut all = vec!["resume", id.as_str(), "-f", "json"];
    all.extend_from_slice(args);
    let r = sb.run(&all).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    let result = r.json().unwrap();
    assert_eq!(result["status"], "success", "{result}");
    let out = |s: &str| {
        result["states"][s]["output"]
            .as_str()
            .unwrap_or_else(|| panic!("no output of {s}: {result}"))
            .trim_end()
            .to_owned()
    };
    (out("a"), out("b"))
}

/// Item 1: `awf resume` of a shared store's run cancelled while queued started it with its
/// queued mocks whatever `--no-mocks` or `--mock` said (they applied to the embedded store's
/// runs only).
#[test]
fn resuming_a_run_cancelled_while_queued_takes_no_mocks_and_mock() {
    let db = TestDb::new();
    let mut sb = http_serve::sandbox_with(&[("two", TWO)]);
    sb.set_env("AWF_STORE", &db.url);
    // Plain: the queued mock applies.
    assert_eq!(
        resumed_outputs(&sb, &[]),
        ("MOCKED".into(), "real-b".into())
    );
    // `--no-mocks`: the step runs.
    assert_eq!(
        resumed_outputs(&sb, &["--no-mocks"]),
        ("real-a".into(), "real-b".into())
    );
    // `--mock` of another step: added to the queued one.
    assert_eq!(
        resumed_outputs(&sb, &["--mock", "states.b.output=MB"]),
        ("MOCKED".into(), "MB".into())
    );
    // `--mock` of the same step: replaces it.
    assert_eq!(
        resumed_outputs(&sb, &["--mock", "states.a.output=OTHER"]),
        ("OTHER".into(), "real-b".into())
    );
    // Both: only the new one.
    assert_eq!(
        resumed_outputs(&sb, &["--no-mocks", "--mock", "states.b.output=MB"]),
        ("real-a".into(), "MB".into())
    );
}

const SEQ: &str = "name: seq\nstates:\n  initial: a\n  a: {type: step, command: 'echo a >> ran.txt', on_success: done}\n  done: {type: terminal}\n";

/// Item 2: a data root whose state files cannot be written (read-only; here its `states`
/// directory is a link into `/proc`, where no one can create a file, root included) showed
/// `WARN run record: <why>` and then the error saying the same: now the error alone, with
/// its hint, exit 4.
#[test]
fn a_run_whose_start_cannot_be_recorded_says_so_once() {
    let sb = Sandbox::new().unwrap();
    sb.write("seq.yaml", SEQ).unwrap();
    // The data root of XDG_DATA_HOME, as a run left it, then made unwritable.
    let root = sb.path().join("data").join("awf");
    std::fs::create_dir_all(&root).unwrap();
    std::os::unix::fs::symlink("/proc", root.join("states")).unwrap();
    for format in ["text", "json"] {
        let r = sb.run(&["run", "seq.yaml", "-f", format]).unwrap();
        let what = format!("-f {format}: {}{}", r.stdout, r.stderr);
        assert_eq!(r.code, 4, "{what}");
        assert!(!r.stderr.contains("WARN"), "{what}");
        assert!(!r.stdout.contains("WARN"), "{what}");
        let said = format!("{}{}", r.stdout, r.stderr);
        assert_eq!(
            said.matches("the run's start could not be recorded, so nothing of it ran")
                .count(),
            1,
            "{what}"
        );
        assert!(said.contains("`AWF_RECORD=off`"), "{what}");
        assert!(!sb.path().join("ran.txt").exists(), "{what}");
    }
}

/// `file:LINE:COL: error|warning …` lines of `awf validate`'s stderr: (severity, line, col).
fn validate_positions(stderr: &str, file: &str) -> Vec<(String, u64, u64)> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{file}:")))
        .map(|rest| {
            let mut parts = rest.splitn(3, ':');
            let line = parts.next().unwrap().parse().unwrap();
            let col = parts.next().unwrap().parse().unwrap();
            let severity = parts
                .next()
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap()
                .to_owned();
            (severity, line, col)
        })
        .collect()
}

/// (severity, line, column) of each entry of an HTTP answer's `diagnostics`.
fn http_positions(diags: &Value) -> Vec<(String, u64, u64)> {
    diags
        .as_array()
        .unwrap_or_else(|| panic!("no diagnostics: {diags}"))
        .iter()
        .map(|d| {
            (
                d["severity"].as_str().unwrap().to_owned(),
                d["line"].as_u64().unwrap_or_else(|| panic!("no line: {d}")),
                d["column"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("no column: {d}")),
            )
        })
        .collect()
}

const INVALID: &str = "name: invalid\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo a\n    on_success: nowhere\n  b:\n    type: step\n    command: echo b\n    on_success: elsewhere\n  done:\n    type: terminal\n";

const WARNED: &str = "name: warned\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo a\n    colour: red\n    on_success: done\n  done:\n    type: terminal\n";

/// Item 3: `POST /api/workflows/{scope}/{name}/validate` listed the errors (`path: message`)
/// without where they are in the file, which `awf validate` prints (`file:line:col:`): its
/// `diagnostics` now has each finding with its line and column, the same as the CLI's.
#[test]
fn http_validate_gives_each_findings_line_and_column_as_awf_validate_does() {
    let sb = http_serve::sandbox_with(&[("invalid", INVALID), ("warned", WARNED)]);
    let s = http_serve::start(&sb, &[]);
    let validate =
        |name: &str| http_serve::post(&format!("{}/api/workflows/env/{name}/validate", s.base), "");
    // Errors: 422, one diagnostic per `errors` entry, at the CLI's positions.
    let file = sb.path().join("wf/invalid.yaml").display().to_string();
    let cli = sb.run(&["validate", &file]).unwrap();
    assert_eq!(cli.code, 2, "{}", cli.stderr);
    let want = validate_positions(&cli.stderr, &file);
    assert_eq!(
        want,
        [("error".to_owned(), 7, 5), ("error".to_owned(), 11, 5)],
        "{}",
        cli.stderr
    );
    let (code, body, _) = validate("invalid");
    assert_eq!(code, 422, "{body}");
    let doc = http_serve::json_of(&body);
    assert_eq!(http_positions(&doc["diagnostics"]), want, "{doc}");
    let errors = doc["errors"].as_array().unwrap();
    let diags = doc["diagnostics"].as_array().unwrap();
    assert_eq!(errors.len(), diags.len(), "{doc}");
    for (e, d) in errors.iter().zip(diags) {
        assert_eq!(
            e.as_str().unwrap(),
            format!(
                "{}: {}",
                d["path"].as_str().unwrap(),
                d["message"].as_str().unwrap()
            ),
            "{doc}"
        );
        assert_eq!(d["code"], doc["code"], "{doc}");
        assert!(
            d.get("file").is_none(),
            "the server's path is not given: {d}"
        );
    }
    // Warnings of a valid workflow: 200, in `diagnostics` too.
    let file = sb.path().join("wf/warned.yaml").display().to_string();
    let cli = sb.run(&["validate", &file]).unwrap();
    assert_eq!(cli.code, 0, "{}", cli.stderr);
    let want = validate_positions(&cli.stderr, &file);
    assert_eq!(want.len(), 1, "{}", cli.stderr);
    assert_eq!(want[0].0, "warning", "{}", cli.stderr);
    let (code, body, _) = validate("warned");
    assert_eq!(code, 200, "{body}");
    let v = http_serve::json_of(&body);
    assert_eq!(http_positions(&v["body"]["diagnostics"]), want, "{v}");
    assert_eq!(v["body"]["warnings"].as_array().unwrap().len(), 1, "{v}");
}

/// Item 4: a run paused at a breakpoint said it was at the state before (the last that
/// started): `current_step` is the state it stopped before, in the execution and the list.
#[test]
fn a_run_at_a_breakpoint_reports_the_state_it_stopped_before() {
    let wf = "name: bp\nstates:\n  initial: a\n  a: {type: step, command: 'echo a', on_success: b}\n  b: {type: step, command: 'echo b', on_success: c}\n  c: {type: step, command: 'echo c', on_success: done}\n  done: {type: terminal}\n";
    let sb = http_serve::sandbox_with(&[("bp", wf)]);
    let s = http_serve::start(&sb, &[]);
    let id = http_serve::start_run(&s, "bp", r#"{"breakpoints": ["b", "c"]}"#);
    let pending = |run: &Value| {
        run["pending"]
            .as_array()
            .and_then(|p| p.first())
            .map(|p| p["request_id"].as_str().unwrap().to_owned())
    };
    for at in ["b", "c"] {
        let mut run = Value::Null;
        awf_tests::wait_for(&format!("the breakpoint before {at}"), || {
            run = http_serve::execution(&s, &id);
            pending(&run).is_some_and(|_| run["pending"][0]["step"] == at)
        });
        assert_eq!(run["current_step"], at, "{run}");
        let (code, body, _) = http_serve::curl(&[&format!("{}/api/executions", s.base)]);
        assert_eq!(code, 200, "{body}");
        let list = http_serve::json_of(&body);
        let row = list["body"]["executions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["execution_id"] == id.as_str())
            .unwrap_or_else(|| panic!("{id} not listed: {list}"))
            .clone();
        assert_eq!(row["current_step"], at, "{row}");
        let (code, body, _) = http_serve::post(
            &format!("{}/api/executions/{id}/respond", s.base),
            &json!({"request_id": pending(&run).unwrap(), "decision": "continue"}).to_string(),
        );
        assert_eq!(code, 204, "{body}");
    }
    http_serve::wait_status(&s, &id, "completed");
}

/// Item 5: `awf status` listed a run's states by their start to the millisecond: states
/// entered in the same millisecond (here mocked ones) came by name, out of the order they ran
/// in. They are listed in the order the run entered them, across its attempts (text and
/// JSON `steps`).
#[test]
fn status_lists_a_resumed_runs_states_in_the_order_they_were_entered() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "t.yaml",
        "name: t\nstates:\n  initial: zeta\n  zeta: {type: step, command: 'true', on_success: yank}\n  yank: {type: step, command: 'true', on_success: xray}\n  xray: {type: step, command: 'true', on_success: whey}\n  whey: {type: step, command: 'true', on_success: alpha}\n  alpha: {type: step, command: 'test -f ok', on_success: mid}\n  mid: {type: step, command: 'true', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let mocks = ["zeta", "yank", "xray", "whey"].map(|s| format!("states.{s}.output={s}"));
    let mut args = vec!["run", "t.yaml"];
    for m in &mocks {
        args.extend(["--mock", m.as_str()]);
    }
    let r = sb.run(&args).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let id = awf_tests::run_id_in(&r.stderr).unwrap();
    std::fs::write(sb.path().join("ok"), "").unwrap();
    let r = sb.run(&["resume", &id]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let want = ["zeta", "yank", "xray", "whey", "alpha", "mid"];
    let text = sb.run(&["status", &id]).unwrap();
    assert_eq!(text.code, 0, "{}", text.stderr);
    let listed: Vec<&str> = text
        .stdout
        .lines()
        .skip_while(|l| *l != "States:")
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(listed, want, "{}", text.stdout);
    let json = sb
        .run(&["status", &id, "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    let steps: Vec<&str> = json["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(steps, want, "{json}");
}

/// Item 6 (a test, no fix was needed): `.error` at a terminal reads the routed failure when
/// the workflow runs as a tool of `awf mcp-serve --workflows`, as in `awf run`.
#[test]
fn error_at_a_terminal_works_in_a_workflow_run_as_an_mcp_tool() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "wf/gate.yaml",
        r#"name: gate
states:
  initial: deploy
  deploy: { type: step, command: "echo boom >&2; exit 3", on_success: done, on_failure: notify }
  notify: { type: step, command: "echo notified", on_success: stopped }
  stopped: { type: terminal, status: failure, message: "not deployed: {{.error.Message}} (from {{.error.State}}, exit {{.error.ExitCode}})" }
  done: { type: terminal }
"#,
    )
    .unwrap();
    sb.write(
        "wf/recover.yaml",
        r#"name: recover
states:
  initial: deploy
  deploy: { type: step, command: "echo boom >&2; exit 3", on_success: done, on_failure: recovered }
  recovered: { type: terminal, message: "recovered from {{.error.State}}: {{.error.Message}}" }
  done: { type: terminal }
"#,
    )
    .unwrap();
    let mut server = RawServer::spawn(sb.cmd(&["mcp-serve", "--workflows", "wf"]));
    let init = server.initialize("2025-06-18");
    assert!(init.get("result").is_some(), "{init}");
    let want = "not deployed: step deploy: boom (from deploy, exit 3)";
    let gate = server.call(1, "gate", &json!({}));
    let result = &gate["result"];
    assert_eq!(result["isError"], true, "{gate}");
    let s = &result["structuredContent"];
    assert_eq!(s["status"], "failure", "{gate}");
    assert_eq!(s["exit_code"], 3, "{gate}");
    assert_eq!(s["terminal"], "stopped", "{gate}");
    assert_eq!(s["error"]["message"], want, "{gate}");
    assert_eq!(s["states"]["notify"]["output"], "notified\n", "{gate}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains(want), "{text}");
    let recover = server.call(2, "recover", &json!({}));
    let result = &recover["result"];
    assert_eq!(result["isError"], false, "{recover}");
    let s = &result["structuredContent"];
    assert_eq!(s["status"], "success", "{recover}");
    assert_eq!(
        s["message"], "recovered from deploy: step deploy: boom",
        "{recover}"
    );
    let (code, _, stderr) = server.close();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("WARN"), "{stderr}");
}
