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

// ---- taxonomy errors ----------------------------------------------------------------------

#[test]
fn a_second_init_and_an_unknown_error_code_are_taxonomy_errors_with_hints() {
    let sb = sandbox();
    assert_eq!(sb.run(&["init"]).unwrap().code, 0);
    let again = sb.run(&["init"]).unwrap();
    assert_eq!(again.code, 1, "{}", again.stderr);
    assert!(
        again
            .stderr
            .starts_with("[USER.INPUT.VALIDATION_FAILED] already initialized (existing: .awf.yaml"),
        "{}",
        again.stderr
    );
    assert!(
        again
            .stderr
            .contains("Hint: use `awf init --force` to overwrite these files"),
        "{}",
        again.stderr
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
    let r = sb.run(&["run", "loop.yaml"]).unwrap();
    assert_ne!(r.code, 0);
    assert!(
        r.stderr
            .contains("script file is a symbolic link that cannot be followed"),
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

    sb.write(
        "plain.yaml",
        "name: p\nstates:\n  initial: s\n  s: {type: step, command: \"echo kaputt >&2; exit 4\", on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "plain.yaml"]).unwrap();
    assert_eq!(r.code, 3);
    assert_eq!(r.stderr.matches("kaputt").count(), 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("Workflow failed: [EXECUTION.COMMAND.FAILED]"),
        "{}",
        r.stderr
    );
}
