//! A new user's trial (README only), over the real binary: a broken workflow reported alike
//! by every front-end, `--step` hints and streams, failure terminal messages, validation
//! messages (unclosed actions, missing keys, a top-level `initial:`, findings inside a
//! `command: |` block, `delay` for `initial_delay`), a file whose `name:` is not its file
//! name, and display fixes (`awf status` of a cancelled step, `--dry-run` order, quiet and
//! table formats, sub-workflow runs in `awf history`, `--interactive` skip), the HTTP hint of
//! a refused answer and an agent CLI that is not installed.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Stdio;

use awf_tests::Sandbox;
use awf_tests::http_serve;
use awf_tests::mcp::RawServer;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

/// Three errors: an unknown input type (line 4), a bad duration (a parse-stage error, line
/// 10) and a route to a state that does not exist (line 11).
const BROKEN: &str = "name: broken\ninputs:\n  - name: count\n    type: integr\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo hi\n    timeout: abc\n    on_success: nowhere\n  done:\n    type: terminal\n";

/// `awf validate`'s first error and count, as every list of workflows shows it.
const BROKEN_SUMMARY: &str = "[WORKFLOW.VALIDATION.INVALID_STATE] line 4, column 5: inputs.0.type: input \"count\" has unknown type \"integr\" (and 2 more error(s); run `awf validate` to see all)";

const OK: &str = "name: ok\nstates:\n  initial: a\n  a: {type: step, command: 'echo ok', on_success: done}\n  done: {type: terminal}\n";

/// Trial: for a file with several errors `awf mcp-serve --workflows` logged another first
/// error (the load's `WORKFLOW.PARSE.INVALID_VALUE`) and count than `awf validate`, `awf
/// list` and `awf run`. Every front-end now names `awf validate`'s first error and count:
/// `awf list`, `awf run`, `awf mcp-serve --workflows`, `awf acp-serve` and `awf serve`'s
/// workflow list.
#[test]
fn a_broken_workflow_is_reported_alike_by_every_front_end() {
    let sb = http_serve::sandbox_with(&[("broken", BROKEN), ("ok", OK)]);
    let file = sb.path().join("wf/broken.yaml").display().to_string();

    let v = sb.run(&["validate", "broken"]).unwrap();
    assert_eq!(v.code, 2, "{}", v.stderr);
    assert_eq!(
        v.stderr.lines().last(),
        Some("Workflow 'broken' is invalid: 3 errors")
    );
    assert!(
        v.stderr.starts_with(&format!(
            "{file}:4:5: error [WORKFLOW.VALIDATION.INVALID_STATE] inputs.0.type: input \"count\" has unknown type \"integr\"\n"
        )),
        "{}",
        v.stderr
    );

    let list = sb.run(&["list"]).unwrap();
    assert_eq!(
        list.stdout.lines().nth(1),
        Some(format!("broken  env              BROKEN: {BROKEN_SUMMARY}").as_str()),
        "{}",
        list.stdout
    );
    let json = sb.run(&["list", "-f", "json"]).unwrap().json().unwrap();
    assert_eq!(json[0]["error"], BROKEN_SUMMARY, "{json}");

    let run = sb.run(&["run", "broken"]).unwrap();
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert_eq!(
        run.stderr.lines().next(),
        Some(
            format!(
                "[WORKFLOW.VALIDATION.INVALID_STATE] {file}: line 4, column 5: inputs.0.type: input \"count\" has unknown type \"integr\" (and 2 more error(s); run `awf validate` to see all)"
            )
            .as_str()
        ),
        "{}",
        run.stderr
    );

    // mcp-serve --workflows: the workflow left out, with the same reason.
    let mut mcp = RawServer::spawn(sb.cmd(&["mcp-serve", "--workflows"]));
    mcp.initialize("2025-03-26");
    let (_, _, stderr) = mcp.close();
    let logged: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("workflow not served"))
        .collect();
    assert_eq!(logged.len(), 1, "{stderr}");
    assert!(
        logged[0].ends_with(&format!(
            "workflow not served: it does not load or validate workflow=broken error={BROKEN_SUMMARY}"
        )),
        "{stderr}"
    );

    // acp-serve: left out of the slash commands, with the same reason; prompting it says it.
    let mut acp = RawServer::spawn(sb.cmd(&["acp-serve"]));
    acp.send_json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}));
    acp.recv();
    acp.send_json(&json!({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": sb.path().display().to_string(), "mcpServers": []}}));
    let answer = acp.recv();
    let sid = answer["result"]["sessionId"].as_str().unwrap().to_owned();
    let commands = acp.recv();
    let names: Vec<&str> = commands["params"]["update"]["availableCommands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ok"], "{commands}");
    acp.send_json(&json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "/broken"}]}}));
    let mut said = String::new();
    loop {
        let f = acp.recv();
        if f["id"] == 3 {
            break;
        }
        if let Some(t) = f["params"]["update"]["content"]["text"].as_str() {
            said.push_str(t);
        }
    }
    assert_eq!(
        said,
        format!("Workflow \"broken\" is not valid: {BROKEN_SUMMARY}")
    );
    let (_, _, stderr) = acp.close();
    assert!(
        stderr.contains(&format!(
            "workflows left out of the slash commands: they do not load or validate workflows=broken ({BROKEN_SUMMARY})"
        )),
        "{stderr}"
    );

    // serve: the list's entry, its `… more error(s)` naming the workflow's validate route.
    let s = http_serve::start(&sb, &[]);
    let (code, body, _) = http_serve::curl(&[&format!("{}/api/workflows", s.base)]);
    assert_eq!(code, 200, "{body}");
    let v = http_serve::json_of(&body);
    let entry = v["body"]["workflows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == "broken")
        .cloned()
        .unwrap();
    assert_eq!(
        entry["error"],
        BROKEN_SUMMARY.replace(
            "run `awf validate` to see all",
            "`POST /api/workflows/env/broken/validate` lists them all"
        ),
        "{entry}"
    );
}

const STEPS: &str = "name: steps\nstates:\n  initial: build\n  build:\n    type: step\n    command: echo built\n    on_success: publish\n  publish:\n    type: step\n    command: echo \"publishing {{.states.build.Output}}\"\n    on_success: done\n  done:\n    type: terminal\n";

/// Trial: `awf run wf --step publish` failed on `states.build` (not run in a `--step` run)
/// without saying how to give it a result; its hint names the `--mock`. The `--- [S]
/// stdout ---` header went to stderr and the output to stdout: a pipe got the output alone
/// and the terminal an empty header. The header now goes with the output, and only to a
/// terminal; an empty block is left out.
#[test]
fn a_single_step_hints_the_mock_it_needs_and_keeps_its_header_with_its_output() {
    let sb = Sandbox::new().unwrap();
    sb.write("steps.yaml", STEPS).unwrap();
    let r = sb.run(&["run", "steps.yaml", "--step", "publish"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let hint = "--step runs this step alone, so state build has no result: give it one with --mock 'states.build.output=…'";
    assert!(
        r.stderr.ends_with(&format!(
            "Step 'publish' failed\n[EXECUTION.TEMPLATE.FAILED] step publish: interpolate command: undefined variable: states.build (state \"build\" has not run in this run, so it has no result to read)\n  Hint: {hint}\n"
        )),
        "{}",
        r.stderr
    );
    let j = sb
        .run(&["run", "steps.yaml", "--step", "publish", "-f", "json"])
        .unwrap();
    assert_eq!(j.json().unwrap()["error"]["hints"], json!([hint]));
    // The hint works.
    let m = sb
        .run(&[
            "run",
            "steps.yaml",
            "--step",
            "publish",
            "--mock",
            "states.build.output=v1",
        ])
        .unwrap();
    assert_eq!(
        (m.code, m.stdout.as_str()),
        (0, "publishing v1\n"),
        "{}",
        m.stderr
    );

    // A pipe gets the output alone; no header without output under it.
    let r = sb.run(&["run", "steps.yaml", "--step", "build"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "built\n");
    assert!(!r.stderr.contains("--- [build]"), "{}", r.stderr);

    // A terminal gets the header above the output.
    let cmd = sb.tty_cmd(&["run", "steps.yaml", "--step", "build", "--no-color"]);
    let mut p = rexpect::session::spawn_command(cmd, Some(20_000)).unwrap();
    p.exp_string("--- [build] stdout ---\r\nbuilt\r\nStep 'build' completed successfully in ")
        .unwrap();
    p.exp_eof().unwrap();
}

/// Trial: a failure terminal's `message: "{{.states.upload.Stderr}}"` printed an empty
/// line before the hint and kept the line break in the run's error (API, history); one
/// that rendered empty printed `[EXECUTION.WORKFLOW.FAILURE_TERMINAL] ` and nothing after
/// it, and a run that reached a failure terminal without a message lacked the `terminal:`
/// line the others print.
#[test]
fn failure_terminal_messages_are_trimmed_and_an_empty_one_is_no_message() {
    let sb = Sandbox::new().unwrap();
    let wf = |message: &str, command: &str| {
        format!(
            "name: t\nstates:\n  initial: upload\n  upload:\n    type: step\n    command: {command}\n    on_success: done\n    on_failure: failed\n  done:\n    type: terminal\n  failed:\n    type: terminal\n    status: failure\n{message}"
        )
    };
    sb.write(
        "stderr.yaml",
        &wf(
            "    message: \"{{.states.upload.Stderr}}\"\n",
            "'echo upload broke >&2; exit 1'",
        ),
    )
    .unwrap();
    sb.write(
        "empty.yaml",
        &wf("    message: \"{{.states.upload.Stderr}}\"\n", "'exit 1'"),
    )
    .unwrap();
    sb.write("none.yaml", &wf("", "'exit 1'")).unwrap();
    let summary = |file: &str| {
        let r = sb.run(&["run", file]).unwrap();
        assert_eq!(r.code, 3, "{}", r.stderr);
        let lines: Vec<String> = r
            .stderr
            .lines()
            .skip_while(|l| !l.starts_with("Workflow failed:"))
            .take(2)
            .map(str::to_owned)
            .collect();
        let id = awf_tests::run_id_in(&r.stderr).unwrap();
        (lines, id)
    };
    let (lines, id) = summary("stderr.yaml");
    assert_eq!(
        lines,
        [
            "Workflow failed: [EXECUTION.WORKFLOW.FAILURE_TERMINAL] upload broke",
            "  terminal: failed"
        ]
    );
    let h = sb.run(&["history", "-f", "json"]).unwrap().json().unwrap();
    let row = h
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id.as_str())
        .cloned()
        .unwrap();
    assert_eq!(row["error_message"], "upload broke");
    let fallback = "Workflow failed: [EXECUTION.WORKFLOW.FAILURE_TERMINAL] workflow reached failure terminal 'failed' after step upload failed: exit code 1";
    for file in ["empty.yaml", "none.yaml"] {
        assert_eq!(summary(file).0, [fallback, "  terminal: failed"], "{file}");
    }
}

/// Trial: validation messages. An unclosed `{{` got the parser's `bad character "` alone;
/// a missing `name:` was `WORKFLOW.PARSE.YAML_SYNTAX` though the YAML is valid; a
/// top-level `initial:` gave an error and a separate unknown-field warning; a finding about
/// a template in a `command: |` block pointed at `command:` and one value written twice
/// was reported twice; `retry: {delay: 5s}` had no suggestion.
#[test]
fn validation_messages_name_the_mistake_and_where_it_is() {
    let sb = Sandbox::new().unwrap();
    let validate = |name: &str, text: &str| {
        let f = sb.write(name, text).unwrap();
        let r = sb.run(&["validate", name]).unwrap();
        let prefix = format!("{}:", f.display());
        r.stderr.replace(&prefix, "")
    };

    let out = validate(
        "unclosed.yaml",
        "name: u\ninputs:\n  - {name: x, default: a}\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo \"unclosed {{.inputs.x\"\n    on_success: done\n  done:\n    type: terminal\n",
    );
    assert_eq!(
        out,
        "8:29: error [WORKFLOW.VALIDATION.INVALID_REFERENCE] states.a.command: template does not parse: template parse error at line 1, column 25: bad character \"\n  Hint: a `{{` without its closing `}}` (line 1, column 16): close the action, or write a literal `{{` as {{\"{{\"}}\nWorkflow 'unclosed.yaml' is invalid: 1 error\n"
    );

    let out = validate(
        "noname.yaml",
        "states:\n  initial: a\n  a: {type: step, command: 'echo a', on_success: done}\n  done: {type: terminal}\n",
    );
    assert_eq!(
        out,
        "1:1: error [WORKFLOW.PARSE.MISSING_FIELD] name: required field missing\n  Hint: add a top-level `name:`\nWorkflow 'noname.yaml' is invalid: 1 error\n"
    );
    let catalog = sb.run(&["error", "WORKFLOW.PARSE.MISSING_FIELD"]).unwrap();
    assert_eq!(catalog.code, 0, "{}", catalog.stderr);

    let out = validate(
        "initial.yaml",
        "name: i\ninitial: a\nstates:\n  a: {type: step, command: 'echo a', on_success: done}\n  done: {type: terminal}\n",
    );
    assert_eq!(
        out,
        "2:1: error [WORKFLOW.PARSE.MISSING_FIELD] states.initial: required field missing (`initial:` is at the top level)\n  Hint: move `initial:` under `states:` (indent it as a state's name)\nWorkflow 'initial.yaml' is invalid: 1 error\n"
    );

    let out = validate(
        "block.yaml",
        "name: b\ninputs:\n  - {name: x, default: a}\n  - {name: y, default: b}\nstates:\n  initial: a\n  a:\n    type: step\n    command: |\n      echo start\n      echo {{.inputs.x}}\n      echo {{.inputs.y}}\n      echo {{.inputs.x}}\n      echo \"{{.states.nope.Output}}\"\n      echo \"{{.states.nope.Output}}\"\n    on_success: done\n  done:\n    type: terminal\n",
    );
    let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with("  Hint")).collect();
    assert_eq!(
        lines,
        [
            "14:13: error [WORKFLOW.VALIDATION.INVALID_REFERENCE] states.a.command: reference to unknown state \"nope\" in states.a.command",
            "11:12: warning [WORKFLOW.VALIDATION.UNQUOTED_SHELL_VALUE] states.a.command: {{.inputs.x}} puts inputs.x into a shell command unquoted: a value holding ;, $( ) or a quote runs as shell code",
            "12:12: warning [WORKFLOW.VALIDATION.UNQUOTED_SHELL_VALUE] states.a.command: {{.inputs.y}} puts inputs.y into a shell command unquoted: a value holding ;, $( ) or a quote runs as shell code",
            "Workflow 'block.yaml' is invalid: 1 error",
        ]
    );

    let out = validate(
        "retry.yaml",
        "name: r\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo a\n    retry: {delay: 5s, max_attempts: 2}\n    on_success: done\n  done:\n    type: terminal\n",
    );
    assert_eq!(
        out,
        "7:13: warning [WORKFLOW.PARSE.UNKNOWN_FIELD] states.a.retry.delay: unknown field \"delay\" in retry\n  Hint: did you mean 'initial_delay' or 'max_delay'?\n"
    );
}

/// Trial: `foo.yaml` holding `name: bar` is `foo` to `awf list` and `bar` in runs and
/// history, and `awf run bar` said only `workflow not found: bar`. As in AWF (Go) a workflow
/// is run by its file's name; `awf run bar` names the file, `awf validate` warns.
#[test]
fn a_workflow_whose_name_is_not_its_file_name_is_pointed_at() {
    let sb = http_serve::sandbox_with(&[("foo", &OK.replace("name: ok", "name: bar"))]);
    let r = sb.run(&["run", "bar"]).unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(
        r.stderr,
        "[USER.FACADE.WORKFLOW_NOT_FOUND] workflow not found: bar\n  Hint: did you mean foo (its name: is bar)? A workflow is run by its file's name: `awf run foo`\n"
    );
    let v = sb.run(&["validate", "foo"]).unwrap();
    assert_eq!(v.code, 0, "{}", v.stderr);
    let file = sb.path().join("wf/foo.yaml").display().to_string();
    assert_eq!(
        v.stderr,
        format!(
            "{file}:1:1: warning [WORKFLOW.VALIDATION.INVALID_REFERENCE] name: \"bar\" is not the file's name (foo): `awf list` and `awf run` know the workflow as foo, its runs and history show bar\n  Hint: rename the file to bar.yaml, or set `name: foo`\n"
        )
    );
    // A file outside the workflow directories is run by its path: no warning.
    sb.write("elsewhere.yaml", &OK.replace("name: ok", "name: other"))
        .unwrap();
    let v = sb.run(&["validate", "elsewhere.yaml"]).unwrap();
    assert_eq!(v.stderr, "", "{}", v.stderr);
}

const SLOW: &str = "name: slow\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'touch started; sleep 60'\n    on_success: done\n  done:\n    type: terminal\n";

/// Trial: a cancelled step read `cancelled exit -1` in `awf status` (the -1 is how a
/// signalled process is recorded, as AWF (Go) records it): the text says `cancelled`
/// alone; the JSON keeps `exit_code: -1`.
#[test]
fn a_cancelled_step_shows_no_exit_code_in_status() {
    let sb = Sandbox::new().unwrap();
    sb.write("slow.yaml", SLOW).unwrap();
    let mut child = sb
        .cmd(&["run", "slow.yaml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = sb.path().join("started");
    awf_tests::wait_for("step a to start", || started.exists());
    assert!(
        std::process::Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let id = sb.run(&["history", "-f", "quiet"]).unwrap().stdout;
    let id = id
        .lines()
        .nth(2)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let st = sb.run(&["status", &id]).unwrap();
    let line = st
        .stdout
        .lines()
        .find(|l| l.starts_with("  a "))
        .unwrap_or_else(|| panic!("{}", st.stdout));
    let cut = line.split(" (").next().unwrap();
    assert_eq!(cut, format!("  {:<24} {:<9}", "a", "cancelled"));
    let j = sb
        .run(&["status", &id, "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(j["states"]["a"]["exit_code"], -1, "{j}");
}

const FAN: &str = "name: fan\nstates:\n  initial: start\n  start:\n    type: step\n    command: echo hi\n    on_success: fan\n    on_failure: error\n  error:\n    type: terminal\n    status: failure\n  fan:\n    type: parallel\n    parallel: [b1, b2]\n    on_success: done\n  b1:\n    type: step\n    command: echo 1\n  b2:\n    type: step\n    command: echo 2\n  done:\n    type: terminal\n";

/// Trial: `--dry-run` listed terminals before a parallel block's branches (and the `error`
/// terminal before `done` in `awf init`'s example): states are listed as a run meets them,
/// branches right after their block, terminals last (success ones first).
#[test]
fn the_dry_run_lists_states_in_execution_order_terminals_last() {
    let sb = Sandbox::new().unwrap();
    sb.write("fan.yaml", FAN).unwrap();
    let r = sb.run(&["run", "fan.yaml", "--dry-run"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let heads: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(
        heads,
        [
            "[1] start",
            "[parallel] fan",
            "[2] b1",
            "[3] b2",
            "[terminal] done (success)",
            "[terminal] error (failure)"
        ]
    );
    let init = sb.run(&["init"]).unwrap();
    assert_eq!(init.code, 0, "{}", init.stderr);
    let r = sb.run(&["run", "example", "--dry-run"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let heads: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(
        heads,
        [
            "[1] greet",
            "[2] script",
            "[terminal] done (success)",
            "[terminal] error (failure)"
        ]
    );
}

/// Trial: `validate -f quiet` printed `invalid` and every finding on stderr; `list -f
/// quiet` listed broken workflows as if they ran; `list -f table` cut a broken entry's code
/// (`BROKEN: [WORKFLOW.VALIDATION.INVALID_...`).
#[test]
fn quiet_means_the_verdict_and_the_table_keeps_a_broken_entrys_code() {
    let sb = http_serve::sandbox_with(&[("broken", BROKEN), ("ok", OK)]);
    let q = sb.run(&["validate", "broken", "-f", "quiet"]).unwrap();
    assert_eq!(
        (q.code, q.stdout.as_str(), q.stderr.as_str()),
        (2, "invalid\n", "")
    );
    let q = sb.run(&["list", "-f", "quiet"]).unwrap();
    assert_eq!(q.stdout, "ok\n");
    let t = sb.run(&["list", "-f", "table"]).unwrap();
    let row = t
        .stdout
        .lines()
        .find(|l| l.starts_with("| broken"))
        .unwrap_or_else(|| panic!("{}", t.stdout));
    assert_eq!(
        row,
        "| broken               | env        |            | BROKEN: [WORKFLOW.VALIDATION.INVALID_STATE] line 4, column 5:... |"
    );
}

const KID: &str = "name: kid\nstates:\n  initial: s\n  s: {type: step, command: 'echo kid', on_success: done}\n  done: {type: terminal}\n";
const MOM: &str = "name: mom\nstates:\n  initial: c\n  c: {type: call_workflow, workflow: kid, on_success: done}\n  done: {type: terminal}\n";

/// Trial: `awf history` did not mark a sub-workflow's runs, and `--stats` counted fewer
/// runs than the list showed without saying why.
#[test]
fn history_marks_sub_workflow_runs_and_stats_say_what_they_count() {
    let sb = http_serve::sandbox_with(&[("kid", KID), ("mom", MOM)]);
    let r = sb.run(&["run", "mom"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let parent = awf_tests::run_id_in(&r.stderr).unwrap();
    let h = sb.run(&["history"]).unwrap();
    let names: Vec<String> = h
        .stdout
        .lines()
        .skip(2)
        .map(|l| {
            l.split("  ")
                .filter(|c| !c.is_empty())
                .nth(1)
                .unwrap()
                .trim()
                .to_owned()
        })
        .collect();
    assert_eq!(
        names,
        [format!("↳ kid (in {})", &parent[..8]), "mom".to_owned()],
        "{}",
        h.stdout
    );
    let s = sb.run(&["history", "--stats"]).unwrap();
    assert!(
        s.stdout.ends_with(
            "(Counts the runs a user started: a sub-workflow's run is part of the run that called it; `awf history` lists it marked ↳, `--workflow <name>` counts every run of that workflow.)\n"
        ),
        "{}",
        s.stdout
    );
    assert!(s.stdout.contains("Total Executions: 1\n"), "{}", s.stdout);
    let s = sb
        .run(&["history", "--stats", "--workflow", "kid"])
        .unwrap();
    assert!(!s.stdout.contains("(Counts"), "{}", s.stdout);
}

/// Trial: answering `s` at an `--interactive` breakpoint printed nothing.
#[test]
fn an_interactive_skip_is_confirmed() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "two.yaml",
        "name: two\nstates:\n  initial: a\n  a: {type: step, command: 'echo A', on_success: b}\n  b: {type: step, command: 'echo B', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let mut child = sb
        .cmd(&["run", "two.yaml", "--interactive"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"s\nc\n").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("INFO skipped a (next: b)\n"), "{stderr}");
    assert!(
        stderr.contains("Output: B") && !stderr.contains("Output: A"),
        "{stderr}"
    );
}

const PICK: &str = "name: pick\ninputs:\n  - name: env\n    type: string\n    required: true\n    validation:\n      enum: [dev, prod]\nstates:\n  initial: a\n  a: {type: step, command: 'echo {{.inputs.env}}', on_success: done}\n  done: {type: terminal}\n";

/// Trial: a refused answer to a missing input over HTTP hinted `GET
/// /api/workflows/{scope}/{name} lists each input…` with the placeholders as written: it
/// names the run's own workflow route.
#[test]
fn a_refused_answer_hints_the_runs_own_workflow_route() {
    let sb = http_serve::sandbox_with(&[("pick", PICK)]);
    let s = http_serve::start(&sb, &[]);
    let id = http_serve::start_run(&s, "pick", r#"{"ask_missing_inputs": true}"#);
    let mut rid = String::new();
    awf_tests::wait_for("a pending request", || {
        let v = http_serve::execution(&s, &id);
        match v["pending"][0]["request_id"].as_str() {
            Some(r) => {
                rid = r.to_owned();
                true
            }
            None => false,
        }
    });
    let (code, body, _) = http_serve::post(
        &format!("{}/api/executions/{id}/respond", s.base),
        &format!(r#"{{"request_id":"{rid}","value":"staging"}}"#),
    );
    assert_eq!(code, 422, "{body}");
    let v: Value = http_serve::json_of(&body);
    assert_eq!(
        v["hints"],
        json!([
            "the request is still pending: answer it again with a value that fits",
            "allowed values for env: dev, prod",
            format!(
                "GET /api/executions/{id}/workflow lists each input with its type and rules (`inputs[]`: `type`, `required`, `enum_values`, `pattern`, `min`, `max`, `file_exists`, `file_extension`)"
            )
        ]),
        "{v}"
    );
    // The route it names answers with the inputs.
    let (code, body, _) = http_serve::curl(&[&format!("{}/api/executions/{id}/workflow", s.base)]);
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        http_serve::json_of(&body)["body"]["inputs"][0]["name"],
        "env"
    );
}

const FAILS: &str = "name: fails\ninputs:\n  - {name: n, type: integer, default: 1}\nstates:\n  initial: a\n  a: {type: step, command: 'exit 1', on_success: done}\n  done: {type: terminal}\n";

/// The same for a resume's refused `input_overrides`: the hint names the run's workflow
/// route.
#[test]
fn a_refused_resume_input_hints_the_runs_own_workflow_route() {
    let sb = http_serve::sandbox_with(&[("fails", FAILS)]);
    let s = http_serve::start(&sb, &[]);
    let id = http_serve::start_run(&s, "fails", "{}");
    http_serve::wait_status(&s, &id, "failed");
    let (code, body, _) = http_serve::post(
        &format!("{}/api/executions/{id}/resume", s.base),
        r#"{"input_overrides": {"n": "abc"}}"#,
    );
    assert_eq!(code, 422, "{body}");
    let v: Value = http_serve::json_of(&body);
    let route = format!("GET /api/executions/{id}/workflow lists each input");
    assert!(
        v["hints"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h.as_str().unwrap().starts_with(&route)),
        "{v}"
    );
}

const AGENT: &str = "name: agent\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: claude\n    prompt: hello\n    on_success: done\n    on_failure: failed\n  done:\n    type: terminal\n  failed:\n    type: terminal\n    status: failure\n";

/// Trial: an agent CLI that is not installed put `(hint: Install Claude Code: npm install -g
/// …)` in the error's message, repeated in the failure terminal's message and history. It
/// is a hint now, given by the failure terminal the failure routes to too.
#[test]
fn a_missing_agent_cli_is_a_hint_not_part_of_the_message() {
    let mut sb = Sandbox::new().unwrap();
    sb.set_env("PATH", "/usr/bin:/bin");
    sb.write("agent.yaml", AGENT).unwrap();
    let r = sb.run(&["run", "agent.yaml"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let tail: Vec<&str> = r
        .stderr
        .lines()
        .skip_while(|l| !l.contains("✗ ask"))
        .take(4)
        .collect();
    assert_eq!(
        tail[0].split_once("): ").unwrap().1,
        "claude: the `claude` CLI was not found on PATH"
    );
    assert_eq!(
        &tail[1..],
        [
            "Workflow failed: [EXECUTION.WORKFLOW.FAILURE_TERMINAL] workflow reached failure terminal 'failed' after step ask failed: claude: the `claude` CLI was not found on PATH",
            "  terminal: failed",
            "  Hint: Install Claude Code: npm install -g @anthropic-ai/claude-code",
        ]
    );
    let j = sb
        .run(&["run", "agent.yaml", "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(
        j["states"]["ask"]["error"],
        "step ask: claude: the `claude` CLI was not found on PATH"
    );
    assert_eq!(
        j["error"]["hints"][0],
        "Install Claude Code: npm install -g @anthropic-ai/claude-code"
    );
}
