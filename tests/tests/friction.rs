//! End-to-end tests for the friction a new user hit (issue 7): lookup of `.yml` files, broken
//! workflows in `awf list`, special files given as workflows, compact error output, success
//! terminal messages, taxonomy errors of `awf error` and `awf init`, logging flags, run-id
//! prefixes, `awf diagram -f json`, and subcommand help.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use pretty_assertions::assert_eq;
use serde_json::json;

fn sandbox() -> Sandbox {
    let mut sb = Sandbox::new().expect("sandbox");
    // Only the workflows a test writes itself.
    let own = sb.path().join("wfs");
    std::fs::create_dir_all(&own).unwrap();
    sb.set_env("AWF_WORKFLOWS_PATH", own.to_str().unwrap());
    sb
}

const OK: &str = "name: ok\ndescription: fine\nstates:\n  initial: a\n  a: {type: step, command: echo hi, on_success: done}\n  done: {type: terminal}\n";

/// The id of the newest recorded run of the sandbox.
fn last_run_id(sb: &Sandbox) -> String {
    let rows = sb
        .run(&["history", "-f", "json", "-n", "1"])
        .unwrap()
        .json()
        .unwrap();
    rows[0]["id"].as_str().unwrap().to_owned()
}

// ---- taxonomy errors ----------------------------------------------------------------------

#[test]
fn a_second_init_and_an_unknown_error_code_are_taxonomy_errors_with_hints() {
    let sb = sandbox();
    assert_eq!(sb.run(&["init"]).unwrap().code, 0);
    // Issue 8: a second init succeeds and says so (AWF (Go) behaviour), writing nothing.
    let again = sb.run(&["init"]).unwrap();
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again.stdout.contains("already initialized") && again.stdout.contains("--force"),
        "{}",
        again.stdout
    );
    let nope = sb.run(&["error", "NOPE"]).unwrap();
    assert_eq!(nope.code, 1);
    assert!(
        nope.stderr
            .starts_with("[USER.INPUT.VALIDATION_FAILED] error code not found: NOPE\n"),
        "{}",
        nope.stderr
    );
    assert!(
        nope.stderr.contains("Hint: run `awf error`"),
        "{}",
        nope.stderr
    );
    let json = sb.run(&["error", "NOPE", "-f", "json"]).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&json.stderr).unwrap();
    assert_eq!(doc["error_code"], json!("USER.INPUT.VALIDATION_FAILED"));
    assert_eq!(doc["code"], json!(1));
}

#[test]
fn init_writes_no_settings_that_awf_would_ignore() {
    let sb = sandbox();
    assert_eq!(sb.run(&["init"]).unwrap().code, 0);
    let root = std::fs::read_to_string(sb.path().join(".awf.yaml")).unwrap();
    for key in ["log_level:", "output_format:"] {
        assert!(!root.contains(key), "{root}");
    }
}

// ---- lookup and list ------------------------------------------------------------------------

#[test]
fn yml_workflows_are_found_by_name_and_listed() {
    let sb = sandbox();
    sb.write("wfs/short.yml", &OK.replace("name: ok", "name: short"))
        .unwrap();
    let r = sb.run(&["run", "short"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let list = sb.run(&["list", "-f", "json"]).unwrap();
    let doc = list.json().unwrap();
    assert_eq!(doc[0]["name"], json!("short"), "{doc}");
    assert!(
        doc[0]["path"].as_str().unwrap().ends_with("short.yml"),
        "{doc}"
    );
}

#[test]
fn list_marks_workflows_that_do_not_parse_or_validate() {
    let sb = sandbox();
    sb.write("wfs/good.yaml", OK).unwrap();
    sb.write("wfs/syntax.yaml", "name: [\n").unwrap();
    sb.write(
        "wfs/invalid.yaml",
        "name: invalid\nstates:\n  initial: a\n  a: {type: step, command: echo, on_success: nowhere}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let text = sb.run(&["list"]).unwrap();
    assert_eq!(text.code, 0, "{}", text.stderr);
    let line = |n: &str| {
        text.stdout
            .lines()
            .find(|l| l.starts_with(n))
            .unwrap_or_else(|| panic!("{n} missing: {}", text.stdout))
            .to_owned()
    };
    assert!(
        line("syntax").contains("BROKEN: [WORKFLOW.PARSE.YAML_SYNTAX]"),
        "{}",
        text.stdout
    );
    assert!(
        line("invalid").contains("BROKEN: [WORKFLOW.VALIDATION."),
        "{}",
        text.stdout
    );
    assert!(!line("good").contains("BROKEN"), "{}", text.stdout);
    let doc = sb.run(&["list", "-f", "json"]).unwrap().json().unwrap();
    let by_name = |n: &str| {
        doc.as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == json!(n))
            .unwrap()
            .clone()
    };
    assert!(by_name("syntax")["error"].is_string(), "{doc}");
    assert!(by_name("invalid")["error"].is_string(), "{doc}");
    assert!(by_name("good").get("error").is_none(), "{doc}");

    // A FIFO in a workflow directory is listed as broken, not read (which would block).
    assert!(
        std::process::Command::new("mkfifo")
            .arg(sb.path().join("wfs/pipe.yaml"))
            .status()
            .unwrap()
            .success()
    );
    let text = sb.run(&["list"]).unwrap();
    assert!(
        text.stdout
            .lines()
            .any(|l| l.starts_with("pipe") && l.contains("BROKEN: [USER.INPUT.INVALID_FORMAT]")),
        "{}",
        text.stdout
    );
}

// ---- special files --------------------------------------------------------------------------

#[test]
fn a_fifo_or_directory_given_as_a_workflow_says_what_it_is() {
    let sb = sandbox();
    let fifo = sb.path().join("pipe.yaml");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for cmd in ["run", "validate", "diagram"] {
        let r = sb.run(&[cmd, "pipe.yaml"]).unwrap();
        assert_ne!(r.code, 0);
        assert!(
            r.stderr
                .contains("workflow path is a named pipe (FIFO), not a regular file: pipe.yaml"),
            "{cmd}: {}",
            r.stderr
        );
        assert!(!r.stderr.contains("not found"), "{cmd}: {}", r.stderr);
        assert!(!r.stderr.contains("did you mean"), "{cmd}: {}", r.stderr);
    }
    std::fs::create_dir_all(sb.path().join("dir.yaml")).unwrap();
    let r = sb.run(&["run", "dir.yaml"]).unwrap();
    assert!(
        r.stderr
            .contains("workflow path is a directory, not a file: dir.yaml"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_script_file_symlink_loop_is_named_as_a_link_not_a_missing_file() {
    let sb = sandbox();
    std::os::unix::fs::symlink(sb.path().join("b.sh"), sb.path().join("a.sh")).unwrap();
    std::os::unix::fs::symlink(sb.path().join("a.sh"), sb.path().join("b.sh")).unwrap();
    sb.write(
        "loop.yaml",
        "name: loop\nstates:\n  initial: s\n  s: {type: step, script_file: a.sh, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    // Refused before the run starts (a workflow error), naming the link.
    let r = sb.run(&["run", "loop.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("script_file is a symbolic link that cannot be followed: a.sh"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("not found"), "{}", r.stderr);
}

// ---- messages -------------------------------------------------------------------------------

#[test]
fn a_success_terminal_message_is_printed_and_in_json() {
    let sb = sandbox();
    sb.write(
        "msg.yaml",
        "name: msg\ninputs:\n  - {name: v, default: \"1.2.3\"}\nstates:\n  initial: a\n  a: {type: step, command: echo hi, on_success: done}\n  done: {type: terminal, message: \"released {{.inputs.v}}\"}\n",
    )
    .unwrap();
    let text = sb.run(&["run", "msg.yaml"]).unwrap();
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(
        text.stderr.contains("Workflow completed: released 1.2.3\n"),
        "{}",
        text.stderr
    );
    let doc = sb
        .run(&["run", "msg.yaml", "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(doc["message"], json!("released 1.2.3"), "{doc}");
    assert_eq!(doc["status"], json!("success"));
}

#[test]
fn errors_print_compactly_once_and_without_internal_names() {
    let sb = sandbox();
    sb.write(
        "syn.yaml",
        "name: x\nstates:\n  initial: a\n  a: {type: step, command: [1\n",
    )
    .unwrap();
    let r = sb.run(&["run", "syn.yaml"]).unwrap();
    assert_eq!(r.code, 2);
    assert!(!r.stderr.contains("Details:"), "{}", r.stderr);
    assert_eq!(r.stderr.matches("syn.yaml").count(), 1, "{}", r.stderr);
    let v = sb.run(&["validate", "syn.yaml"]).unwrap();
    assert!(!v.stderr.contains("Details:"), "{}", v.stderr);

    sb.write(
        "fail.yaml",
        "name: f\nstates:\n  initial: verify\n  verify:\n    type: step\n    command: \"echo boom >&2; exit 3\"\n    on_failure: {message: \"verification went wrong\", status: 5}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "fail.yaml"]).unwrap();
    assert_eq!(r.code, 5);
    assert_eq!(
        r.stderr.matches("verification went wrong").count(),
        1,
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("__inline_error"), "{}", r.stderr);
    assert!(!r.stderr.contains("Details:"), "{}", r.stderr);
    let status = sb.run(&["status", &last_run_id(&sb)]).unwrap();
    assert!(
        status.stdout.contains("Terminal:  verify's on_failure"),
        "{}",
        status.stdout
    );
    assert!(
        !status.stdout.contains("__inline_error"),
        "{}",
        status.stdout
    );

    sb.write(
        "plain.yaml",
        "name: p\nstates:\n  initial: s\n  s: {type: step, command: \"echo kaputt >&2; exit 4\", on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "plain.yaml"]).unwrap();
    assert_eq!(r.code, 3);
    assert_eq!(r.stderr.matches("kaputt").count(), 1, "{}", r.stderr);

    // A block whose error wraps its branch's or body step's error prints it once too.
    sb.write(
        "blocks.yaml",
        "name: b
states:
  initial: each
  each:
    type: for_each
    items: '[\"a\"]'
    body: [w]
    on_complete: both
  w: {type: step, command: \"echo bodyerr >&2; exit 2\"}
  both: {type: parallel, parallel: [l], on_success: done}
  l: {type: step, command: echo}
  done: {type: terminal}
",
    )
    .unwrap();
    let rb = sb.run(&["run", "blocks.yaml"]).unwrap();
    assert_eq!(rb.code, 3, "{}", rb.stderr);
    assert_eq!(rb.stderr.matches("bodyerr").count(), 1, "{}", rb.stderr);
    assert!(
        r.stderr
            .contains("Workflow failed: [EXECUTION.COMMAND.FAILED]"),
        "{}",
        r.stderr
    );
}

// ---- logging --------------------------------------------------------------------------------

const HOOKED: &str = "name: hooked\nhooks:\n  workflow_start:\n    - log: \"hello from the hook\"\nstates:\n  initial: a\n  a: {type: step, command: echo hi, on_success: done}\n  done: {type: terminal}\n";

#[test]
fn hook_log_lines_follow_log_level_and_log_format() {
    let sb = sandbox();
    sb.write("hooked.yaml", HOOKED).unwrap();
    let default = sb.run(&["run", "hooked.yaml"]).unwrap();
    assert!(
        default.stderr.contains("INFO hello from the hook"),
        "{}",
        default.stderr
    );
    for level in ["error", "off", "warn"] {
        let r = sb
            .run(&["--log-level", level, "run", "hooked.yaml"])
            .unwrap();
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert!(
            !r.stderr.contains("hello from the hook"),
            "{level}: {}",
            r.stderr
        );
    }
    let info = sb
        .run(&["--log-level", "info", "run", "hooked.yaml"])
        .unwrap();
    assert!(
        info.stderr.contains("INFO hello from the hook"),
        "{}",
        info.stderr
    );
    let json = sb
        .run(&["--log-format", "json", "run", "hooked.yaml"])
        .unwrap();
    let line = json
        .stderr
        .lines()
        .find(|l| l.contains("hello from the hook"))
        .unwrap_or_else(|| panic!("no hook line: {}", json.stderr));
    let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(v["level"], json!("INFO"));
    assert_eq!(v["message"], json!("hello from the hook"));
    assert!(v["timestamp"].is_string(), "{v}");

    // With -f json only warnings reach stderr, and the logging flags apply to them too.
    sb.write(
        "warned.yaml",
        &HOOKED.replace("states:", "inputs:\n  - {name: a, default: x}\nstates:"),
    )
    .unwrap();
    let warn = "input 'zz' is not declared";
    let plain = sb
        .run(&["run", "warned.yaml", "-i", "zz=1", "-f", "json"])
        .unwrap();
    assert!(
        plain.stderr.contains(&format!("WARN {warn}")),
        "{}",
        plain.stderr
    );
    let off = sb
        .run(&[
            "--log-level",
            "error",
            "run",
            "warned.yaml",
            "-i",
            "zz=1",
            "-f",
            "json",
        ])
        .unwrap();
    assert!(!off.stderr.contains(warn), "{}", off.stderr);
    let js = sb
        .run(&[
            "--log-format",
            "json",
            "run",
            "warned.yaml",
            "-i",
            "zz=1",
            "-f",
            "json",
        ])
        .unwrap();
    let line = js.stderr.lines().find(|l| l.contains(warn)).unwrap();
    let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(v["level"], json!("WARN"));
}

// ---- runs: prefixes, durations --------------------------------------------------------------

fn run_id_of(sb: &Sandbox, args: &[&str]) -> String {
    let r = sb.run(args).unwrap();
    r.json().unwrap()["run_id"].as_str().unwrap().to_owned()
}

#[test]
fn a_unique_run_id_prefix_works_for_status_and_resume() {
    let sb = sandbox();
    sb.write(
        "flaky.yaml",
        "name: flaky\nstates:\n  initial: s\n  s: {type: step, command: test -f go, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let id = run_id_of(&sb, &["run", "flaky.yaml", "-f", "json"]);
    let prefix = &id[..8];
    let st = sb.run(&["status", prefix, "-f", "json"]).unwrap();
    assert_eq!(st.code, 0, "{}", st.stderr);
    assert_eq!(st.json().unwrap()["run_id"], json!(id));
    let unknown = sb.run(&["status", "zzzz"]).unwrap();
    assert_eq!(unknown.code, 1);
    assert!(
        unknown
            .stderr
            .starts_with("[USER.FACADE.RUN_NOT_FOUND] no run with id 'zzzz'"),
        "{}",
        unknown.stderr
    );
    std::fs::write(sb.path().join("go"), "").unwrap();
    let resumed = sb.run(&["resume", prefix, "-f", "json"]).unwrap();
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    let doc = resumed.json().unwrap();
    assert_eq!(doc["run_id"], json!(id));
    assert_eq!(doc["status"], json!("success"));
    // After the resume, status and history give the same duration.
    let status = sb
        .run(&["status", prefix, "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    let history = sb.run(&["history", "-f", "json"]).unwrap().json().unwrap();
    let row = history
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == json!(id))
        .unwrap()
        .clone();
    assert_eq!(status["duration_ms"], row["duration_ms"], "{status}\n{row}");
}

#[test]
fn status_of_a_killed_run_does_not_claim_a_few_milliseconds() {
    let sb = sandbox();
    sb.write(
        "long.yaml",
        "name: long\nstates:\n  initial: s\n  s: {type: step, command: sleep 41, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let mut child = sb
        .cmd(&["run", "long.yaml"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait (generously) until the step's own `sleep 41` runs: it carries the sandbox marker.
    let t0 = std::time::Instant::now();
    while !sb.processes().iter().any(|p| p.cmdline == "sleep 41") {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "sleep never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // A second later the run has lasted at least that long.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    child.kill().unwrap();
    child.wait().unwrap();
    // The step's process dies with awf (parent-death signal, watchdog); stop it if it has not yet.
    let _ = sb.kill_processes(Some("sleep 41"));
    let states = sb.path().join("data/awf/states");
    let file = std::fs::read_dir(&states)
        .unwrap()
        .flatten()
        .find(|e| e.path().extension().is_some_and(|x| x == "json"))
        .unwrap();
    let id = file
        .path()
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let text = sb.run(&["status", &id]).unwrap();
    assert_eq!(text.code, 0, "{}", text.stderr);
    let line = text
        .stdout
        .lines()
        .find(|l| l.starts_with("Duration:"))
        .unwrap()
        .to_owned();
    assert!(line.contains("unknown"), "{}", text.stdout);
    assert!(!line.ends_with("ms"), "{line}");
    let doc = sb
        .run(&["status", &id, "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(doc["duration_ms"], serde_json::Value::Null, "{doc}");
}

// ---- diagram, help --------------------------------------------------------------------------

#[test]
fn diagram_json_is_a_json_graph() {
    let sb = sandbox();
    sb.write("wfs/ok.yaml", OK).unwrap();
    let r = sb.run(&["diagram", "ok", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(doc["initial"], json!("a"));
    assert_eq!(
        doc["nodes"],
        json!([
            {"name": "a", "label": "a", "type": "command"},
            {"name": "done", "label": "done", "type": "terminal", "terminal_status": "success"}
        ])
    );
    assert_eq!(
        doc["edges"],
        json!([{"from": "a", "to": "done", "kind": "success"}])
    );
    assert!(doc["dot"].as_str().unwrap().starts_with("digraph"), "{doc}");
    // Text stays DOT.
    let dot = sb.run(&["diagram", "ok"]).unwrap();
    assert!(dot.stdout.starts_with("digraph"), "{}", dot.stdout);
    // An inline failure terminal shows its message, not its internal name.
    sb.write(
        "inl.yaml",
        "name: f\nstates:\n  initial: verify\n  verify: {type: step, command: exit 3, on_failure: {message: verify failed, status: 5}}\n",
    )
    .unwrap();
    let dot = sb.run(&["diagram", "inl.yaml"]).unwrap();
    assert!(
        dot.stdout.contains("label=\"verify failed\""),
        "{}",
        dot.stdout
    );
    assert!(
        !dot.stdout.contains("label=\"__inline_error"),
        "{}",
        dot.stdout
    );
}

#[test]
fn subcommand_help_does_not_repeat_the_global_options() {
    let sb = sandbox();
    let top = sb.run(&["--help"]).unwrap();
    assert!(top.stdout.contains("--log-format"), "{}", top.stdout);
    for sub in ["run", "list", "status", "init", "diagram"] {
        let h = sb.run(&[sub, "--help"]).unwrap();
        assert_eq!(h.code, 0, "{}", h.stderr);
        for global in [
            "--log-format",
            "--otel-exporter",
            "--otel-service-name",
            "--storage <DIR>",
        ] {
            assert!(
                !h.stdout.contains(global),
                "{sub} --help shows {global}:\n{}",
                h.stdout
            );
        }
        assert!(h.stdout.contains("see `awf --help`"), "{}", h.stdout);
    }
    // They still work after the subcommand.
    sb.write("wfs/ok.yaml", OK).unwrap();
    let r = sb
        .run(&["run", "ok", "-f", "json", "--log-level", "off"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json().unwrap()["status"], json!("success"));
}

// ---- live progress and Ctrl-C ---------------------------------------------------------------

/// rexpect hands back each byte as one char: rebuild the UTF-8 text the terminal got.
fn utf8(latin1: &str) -> String {
    let bytes: Vec<u8> = latin1
        .chars()
        .map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?'))
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[test]
fn ctrl_c_under_the_spinner_leaves_no_echoed_caret_c_to_wrap_the_line() {
    let sb = sandbox();
    sb.write(
        "slow.yaml",
        "name: slow\nstates:\n  initial: s\n  s: {type: step, command: sleep 47, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    // rexpect turns the terminal's echo off; a user's terminal echoes (with ECHOCTL, `^C`).
    let awf = sb.tty_cmd(&[]);
    let mut cmd = std::process::Command::new("sh");
    cmd.args([
        "-c",
        "stty echo echoctl cols 100 rows 30 && exec \"$0\" \"$@\"",
    ])
    .arg(awf_tests::awf_bin())
    .args(["run", "slow.yaml"])
    .current_dir(sb.path());
    for (k, v) in awf.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.env_remove("NO_COLOR").env("TERM", "xterm");
    let mut p = rexpect::session::spawn_command(cmd, Some(20_000)).unwrap();
    // The spinner is up once its line shows (its elapsed time follows, coloured).
    p.exp_string(" s  ").unwrap();
    p.send_control('c').unwrap();
    let shown = awf_tests::strip_ansi(&utf8(&p.exp_string("Workflow cancelled.").unwrap()));
    p.exp_eof().unwrap();
    // The spinner line fills the terminal's width: an echoed `^C` would wrap to a new line
    // and leave the last frame frozen above when the spinner is cleared.
    assert!(!shown.contains("^C"), "{shown:?}");
    assert!(shown.contains("⊘ s: cancelled"), "{shown:?}");
}

// ---- awf.* directories ----------------------------------------------------------------------

#[test]
fn awf_scripts_dir_means_the_project_folder_first_in_command_and_dir() {
    let sb = sandbox();
    sb.write(".awf/scripts/hello.sh", "echo local-script\n")
        .unwrap();
    sb.write(
        ".awf/workflows/dirs.yaml",
        "name: dirs\nstates:\n  initial: cmd\n  cmd: {type: step, command: \"sh {{.awf.scripts_dir}}/hello.sh\", on_success: where}\n  where: {type: step, dir: \"{{.awf.scripts_dir}}\", command: pwd, on_success: file}\n  file: {type: step, script_file: \"{{.awf.scripts_dir}}/hello.sh\", on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "dirs", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(
        doc["states"]["cmd"]["output"],
        json!("local-script\n"),
        "{doc}"
    );
    let local = sb.path().join(".awf/scripts").canonicalize().unwrap();
    assert_eq!(
        doc["states"]["where"]["output"],
        json!(format!("{}\n", local.display())),
        "{doc}"
    );
    assert_eq!(
        doc["states"]["file"]["output"],
        json!("local-script\n"),
        "{doc}"
    );
}

#[test]
fn every_command_error_uses_the_taxonomy_never_a_plain_error_line() {
    let sb = sandbox();
    sb.write("wfs/ok.yaml", OK).unwrap();
    // Issue 8: an unknown --highlight state is a warning (AWF (Go) draws the graph anyway).
    let r = sb.run(&["diagram", "ok", "--highlight", "dnoe"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.starts_with("digraph"), "{}", r.stdout);
    assert!(
        r.stderr
            .contains("has no state 'dnoe' (did you mean 'done'?)"),
        "{}",
        r.stderr
    );
    for args in [
        &["error", "NOPE"][..],
        &["status", "nope"],
        &["resume", "nope"],
    ] {
        let r = sb.run(args).unwrap();
        assert_ne!(r.code, 0, "{args:?}");
        assert!(r.stderr.starts_with('['), "{args:?}: {}", r.stderr);
        assert!(!r.stderr.contains("Error: "), "{args:?}: {}", r.stderr);
    }
}
