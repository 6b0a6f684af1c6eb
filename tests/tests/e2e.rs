//! End-to-end tests: the built `awf` binary runs the project's own workflows in a hermetic
//! sandbox (temp CWD, HOME and XDG dirs; `AWF_WORKFLOWS_PATH` = tests/fixtures).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::BufRead;
use std::io::BufReader;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

use awf_tests::Sandbox;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

fn sandbox() -> Sandbox {
    Sandbox::new().expect("sandbox")
}

fn state<'a>(doc: &'a Value, name: &str) -> &'a Value {
    &doc["states"][name]
}

// ---- retry ---------------------------------------------------------------------------------

#[test]
fn retry_runs_until_success_and_counts_attempts() {
    let sb = sandbox();
    let counter = sb.path().join("count");
    let r = sb
        .run(&[
            "run",
            "retry-counter",
            "-f",
            "json",
            "-i",
            &format!("counter_file={}", counter.display()),
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(state(&doc, "flaky")["attempts"], json!(3));
    assert_eq!(state(&doc, "flaky")["output"], json!("ok after 3\n"));
    assert_eq!(std::fs::read_to_string(&counter).unwrap().trim(), "3");
}

#[test]
fn retry_gives_up_after_max_attempts_and_routes_failure() {
    let sb = sandbox();
    let counter = sb.path().join("count");
    let r = sb
        .run(&[
            "run",
            "retry-counter",
            "-f",
            "json",
            "-i",
            &format!("counter_file={}", counter.display()),
            "-i",
            "fail_times=10",
        ])
        .unwrap();
    assert_eq!(r.code, 3);
    let doc = r.json().unwrap();
    assert_eq!(state(&doc, "flaky")["attempts"], json!(4));
    assert_eq!(state(&doc, "flaky")["exit_code"], json!(3));
    assert_eq!(doc["terminal"], json!("failed"));
}

// ---- timeouts and routing --------------------------------------------------------------------

#[test]
fn timeout_kills_the_step_and_routes_on_failure() {
    let sb = sandbox();
    let t0 = Instant::now();
    let r = sb.run(&["run", "timeout-route", "-f", "json"]).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(20), "hang guard");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(state(&doc, "slow")["status"], json!("failed"));
    assert_eq!(state(&doc, "slow")["exit_code"], json!(-1));
    assert_eq!(
        state(&doc, "slow")["error"],
        json!("step slow: timed out after 500ms")
    );
    assert_eq!(state(&doc, "handle")["output"], json!("handled -1\n"));
}

#[test]
fn inline_failure_terminal_exits_with_its_status_and_message() {
    let r = sandbox()
        .run(&["run", "inline-failure", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 7);
    let doc = r.json().unwrap();
    assert_eq!(doc["status"], json!("failure"));
    assert_eq!(doc["exit_code"], json!(7));
    assert_eq!(doc["terminal"], json!("check's on_failure"));
    assert_eq!(doc["error"]["message"], json!("check failed: disk full"));
}

#[test]
fn unrouted_failure_is_an_execution_error_with_stderr() {
    let r = sandbox().run(&["run", "unrouted", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3);
    let doc = r.json().unwrap();
    assert_eq!(doc["error"]["code"], json!("EXECUTION.COMMAND.FAILED"));
    assert_eq!(doc["error"]["message"], json!("step boom: bad things"));
    assert_eq!(state(&doc, "boom")["exit_code"], json!(5));
    assert_eq!(doc["terminal"], Value::Null);
}

#[test]
fn continue_on_error_takes_on_success() {
    let r = sandbox()
        .run(&["run", "continue-on-error", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(
        state(&doc, "second")["output"],
        json!("first said 2 failed\n")
    );
}

// ---- parallel --------------------------------------------------------------------------------

#[test]
fn any_succeed_succeeds_with_one_good_branch() {
    let r = sandbox()
        .run(&["run", "parallel-any", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(doc["terminal"], json!("done"));
    assert_eq!(state(&doc, "good")["output"], json!("good\n"));
}

#[test]
fn all_succeed_cancels_siblings_on_first_failure() {
    let sb = sandbox();
    let t0 = Instant::now();
    let r = sb.run(&["run", "parallel-all-fail", "-f", "json"]).unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "sibling was not stopped"
    );
    assert_eq!(r.code, 3);
    let doc = r.json().unwrap();
    assert_eq!(doc["terminal"], json!("failed"));
    assert_eq!(state(&doc, "quick_fail")["exit_code"], json!(4));
    // Stopped while running, or never started when the failure came first.
    let slow = state(&doc, "slow")["status"].clone();
    assert!(
        slow == json!("cancelled") || slow == json!("skipped"),
        "{slow}"
    );
    // A terminal's rendered message loses its trailing line break (trial_fixes_52).
    assert_eq!(doc["error"]["message"], json!("block failed: broken"));
}

#[test]
fn best_effort_never_fails_and_max_concurrent_one_runs_in_order() {
    let r = sandbox()
        .run(&["run", "best-effort", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(state(&doc, "after")["output"], json!("b exit 9\n"));
    assert_eq!(state(&doc, "a")["status"], json!("completed"));
    assert_eq!(state(&doc, "b")["status"], json!("failed"));
    assert_eq!(state(&doc, "c")["status"], json!("completed"));
}

// ---- loops -----------------------------------------------------------------------------------

#[test]
fn while_loop_stops_on_break_when() {
    let r = sandbox()
        .run(&["run", "while-break", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(
        state(&doc, "poll")["output"],
        json!("completed 4 iterations")
    );
    assert_eq!(state(&doc, "tick")["output"], json!("tick 3\n"));
}

// ---- sub-workflows ---------------------------------------------------------------------------

#[test]
fn call_workflow_maps_declared_outputs() {
    let r = sandbox()
        .run(&["run", "call-parent", "-f", "json", "-i", "who=Ada"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(
        state(&doc, "call")["output"],
        json!("{\"greeting\":\"hello Ada\"}")
    );
    assert_eq!(
        state(&doc, "call")["outputs"],
        json!({"message": "hello Ada"})
    );
    assert_eq!(
        state(&doc, "show")["output"],
        json!("parent got hello Ada\n")
    );
    assert_eq!(doc["outputs"], json!({"greeting": "hello Ada"}));
}

// ---- hooks -----------------------------------------------------------------------------------

#[test]
fn workflow_error_hook_sees_the_error() {
    let mut sb = sandbox();
    let out = sb.path().join("hook.txt");
    sb.set_env("HOOK_OUT", &out.display().to_string());
    let r = sb.run(&["run", "error-hook"]).unwrap();
    assert_eq!(r.code, 3);
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "ERR fails execution step fails: exit code 2\n"
    );
}

// ---- signals ---------------------------------------------------------------------------------

fn cancel_with(signal: &str, expected: i32) {
    let mut sb = sandbox();
    let out = sb.path().join("hook.txt");
    sb.set_env("HOOK_OUT", &out.display().to_string());
    let mut child = sb
        .cmd(&["run", "cancel-hooks", "-o", "streaming"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let first = lines.next().unwrap().unwrap();
    assert_eq!(first, "[OUT] started");
    let t0 = Instant::now();
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let code = child.wait().unwrap().code();
    assert!(
        t0.elapsed() < Duration::from_secs(8),
        "cancel took too long"
    );
    assert_eq!(code, Some(expected));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "CANCELLED\n");
}

#[test]
fn sigterm_cancels_the_run_exits_143_and_runs_cancel_hooks() {
    cancel_with("TERM", 143);
}

#[test]
fn sigint_cancels_the_run_exits_130_and_runs_cancel_hooks() {
    cancel_with("INT", 130);
}

// ---- secrets ---------------------------------------------------------------------------------

#[test]
fn secrets_are_masked_in_live_output_results_and_errors() {
    let mut sb = sandbox();
    sb.set_env("MY_API_TOKEN", "supersecretvalue");
    for args in [
        vec!["run", "secret-env", "-o", "streaming"],
        vec!["run", "secret-env", "-o", "buffered"],
        vec!["run", "secret-env", "-f", "json"],
    ] {
        let r = sb.run(&args).unwrap();
        assert_eq!(r.code, 3, "{args:?}");
        for leak in ["supersecretvalue", "hunter2-very-secret"] {
            assert!(
                !r.stdout.contains(leak),
                "{args:?} stdout leaks {leak}: {}",
                r.stdout
            );
            assert!(
                !r.stderr.contains(leak),
                "{args:?} stderr leaks {leak}: {}",
                r.stderr
            );
        }
        assert!(
            r.stdout.contains("token=***") || r.stdout.contains("token=***\\n"),
            "{args:?}: {}",
            r.stdout
        );
    }
}

// ---- scripts and templates -------------------------------------------------------------------

#[test]
fn script_files_run_with_and_without_shebang() {
    let r = sandbox()
        .run(&["run", "script-step", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(
        state(&doc, "py")["output"],
        json!("python says hi to script\n")
    );
    let sh = state(&doc, "sh")["output"].as_str().unwrap().to_owned();
    assert!(sh.starts_with("plain script for script in "), "{sh}");
}

#[test]
fn use_template_is_expanded_before_validation() {
    let sb = sandbox();
    sb.write(
        ".awf/templates/echo-twice.yaml",
        "name: echo-twice\nparameters:\n  - name: word\n    required: true\nstates:\n  echo-twice:\n    type: step\n    command: \"echo {{parameters.word}} {{parameters.word}}\"\n",
    )
    .unwrap();
    let r = sb.run(&["run", "templated", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        state(&r.json().unwrap(), "greet")["output"],
        json!("hey hey\n")
    );
}

// ---- validate, dry run, other commands --------------------------------------------------------

#[test]
fn validate_warns_on_unknown_keys_and_strict_makes_them_errors() {
    let sb = sandbox();
    let r = sb.run(&["validate", "unknown-keys"]).unwrap();
    assert_eq!(r.code, 0);
    assert!(
        r.stderr.contains(
            "unknown-keys.yaml:7:5: warning [WORKFLOW.PARSE.UNKNOWN_FIELD] states.s.on_sucess"
        ),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("did you mean 'on_success'?"),
        "{}",
        r.stderr
    );
    let r = sb.run(&["validate", "unknown-keys", "--strict"]).unwrap();
    assert_eq!(r.code, 2);
}

#[test]
fn a_state_with_no_way_out_is_a_validation_error_in_validate_and_run() {
    let sb = sandbox();
    let r = sb.run(&["validate", "no-exit"]).unwrap();
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("[WORKFLOW.VALIDATION.NO_EXIT] states.s"),
        "{}",
        r.stderr
    );
    let r = sb.run(&["run", "no-exit", "-f", "json"]).unwrap();
    assert_eq!(r.code, 2);
    let doc = r.json().unwrap();
    assert_eq!(doc["error"]["code"], json!("WORKFLOW.VALIDATION.NO_EXIT"));
    assert_eq!(doc["run_id"], Value::Null);
}

#[test]
fn dry_run_executes_nothing() {
    let sb = sandbox();
    let marker = sb.path().join("marker");
    let wf = sb
        .write(
            "touch.yaml",
            &format!(
                "name: touch\nstates:\n  initial: t\n  t:\n    type: step\n    command: touch {}\n    on_success: done\n  done:\n    type: terminal\n",
                marker.display()
            ),
        )
        .unwrap();
    let r = sb.run(&["run", wf.to_str().unwrap(), "--dry-run"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("No commands will be executed (dry-run mode)."),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains(&format!("touch {}", marker.display())),
        "{}",
        r.stdout
    );
    assert!(!marker.exists());
}

#[test]
fn json_result_for_a_workflow_that_does_not_exist() {
    let r = sandbox()
        .run(&["run", "retry-countr", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 1);
    let doc = r.json().unwrap();
    assert_eq!(doc["run_id"], Value::Null);
    assert_eq!(doc["states"], json!({}));
    assert_eq!(
        doc["error"]["code"],
        json!("USER.FACADE.WORKFLOW_NOT_FOUND")
    );
    assert!(
        doc["error"]["hints"].to_string().contains("retry-counter"),
        "{doc}"
    );
}

#[test]
fn error_catalog_lists_and_explains_codes() {
    let sb = sandbox();
    let r = sb.run(&["error"]).unwrap();
    assert_eq!(r.code, 0);
    for code in [
        "USER.INPUT.VALIDATION_FAILED",
        "WORKFLOW.PARSE.YAML_SYNTAX",
        "EXECUTION.COMMAND.TIMEOUT",
        "SYSTEM.IO.READ_FAILED",
    ] {
        assert!(r.stdout.contains(code), "{code}");
    }
    let r = sb.run(&["error", "EXECUTION.COMMAND.TIMEOUT"]).unwrap();
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("Resolution:"), "{}", r.stdout);
    let r = sb.run(&["error", "NOPE.NOPE.NOPE"]).unwrap();
    assert_eq!(r.code, 1);
}

#[test]
fn diagram_is_graphviz_dot() {
    let r = sandbox().run(&["diagram", "parallel-all-fail"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.starts_with("digraph"), "{}", r.stdout);
    assert!(
        r.stdout.contains("\"block\" -> \"quick_fail\""),
        "{}",
        r.stdout
    );
}

#[test]
fn init_creates_a_project_whose_example_runs() {
    let mut sb = sandbox();
    let r = sb.run(&["init"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(sb.path().join(".awf/workflows/example.yaml").exists());
    sb.set_env("AWF_WORKFLOWS_PATH", "");
    let r = sb.run(&["list"]).unwrap();
    assert!(r.stdout.contains("example"), "{}", r.stdout);
    let r = sb.run(&["run", "example", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    // New user: the example is one to copy, so it draws no warning (it put an input into a
    // command unquoted).
    let r = sb.run(&["validate", "example"]).unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        !format!("{}{}", r.stdout, r.stderr).contains("warning"),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
    let r = sb
        .run(&[
            "run",
            "example",
            "--input",
            "name=a\"; echo pwned; \"",
            "-f",
            "json",
        ])
        .unwrap();
    assert_eq!(
        state(&r.json().unwrap(), "greet")["output"],
        json!("Hello, a\"; echo pwned; \"!\n")
    );
    // New user: from a subdirectory of the project, its workflows are found (the nearest
    // parent holding `.awf.yaml`, as git finds its repository).
    let deep = sb.path().join("src/deep");
    std::fs::create_dir_all(&deep).unwrap();
    let in_deep =
        |args: &[&str]| awf_tests::Run::from(sb.cmd(args).current_dir(&deep).output().unwrap());
    let r = in_deep(&["list"]);
    assert!(r.stdout.contains("example"), "{}{}", r.stdout, r.stderr);
    let r = in_deep(&["run", "example", "-f", "json"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let r = in_deep(&["list", "prompts"]);
    assert!(r.stdout.contains("example.md"), "{}{}", r.stdout, r.stderr);
    // A directory with its own `.awf/` is a project of its own, from below it too.
    sb.write(
        "src/.awf/workflows/inner.yaml",
        "name: inner\nstates:\n  initial: a\n  a: {type: step, command: 'true', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = in_deep(&["list"]);
    assert!(
        r.stdout.contains("inner") && !r.stdout.contains("example"),
        "{}",
        r.stdout
    );
    // Issue 8: a second init succeeds (as in AWF (Go)) but must not overwrite without --force.
    let example = sb.path().join(".awf/workflows/example.yaml");
    std::fs::write(&example, "# mine\n").unwrap();
    let r = sb.run(&["init"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        std::fs::read_to_string(&example).unwrap(),
        "# mine\n",
        "init must not overwrite without --force"
    );
}

// ---- regressions found by trying the product as a new user --------------------------------

#[test]
fn sub_workflows_mask_what_their_parent_masks() {
    let r = sandbox()
        .run(&["run", "secret-parent", "-o", "streaming"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("[OUT] child got ***"), "{}", r.stdout);
    assert!(!r.stdout.contains("sk-verysecret-value") && !r.stderr.contains("sk-verysecret-value"));
}

#[test]
fn typed_inputs_reach_templates_and_commands_with_their_type() {
    let sb = sandbox();
    let r = sb.run(&["run", "typed-inputs", "-f", "json"]).unwrap();
    assert_eq!(
        state(&r.json().unwrap(), "show")["output"],
        json!("flag=on count=001 ratio=0.5 items=<x><y> env=true/1\n")
    );
    let r = sb
        .run(&[
            "run",
            "typed-inputs",
            "-f",
            "json",
            "-i",
            "flag=false",
            "-i",
            "count=7",
            "-i",
            "ratio=2",
            "-i",
            "items=[\"a\",\"b\"]",
        ])
        .unwrap();
    assert_eq!(
        state(&r.json().unwrap(), "show")["output"],
        json!("flag=off count=007 ratio=2 items=<a><b> env=false/7\n")
    );
}

#[test]
fn no_matching_transition_is_an_execution_error_and_a_validate_warning() {
    let sb = sandbox();
    let r = sb.run(&["run", "no-route", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3);
    assert_eq!(
        r.json().unwrap()["error"]["code"],
        json!("EXECUTION.WORKFLOW.NO_ROUTE")
    );
    let r = sb.run(&["validate", "no-route"]).unwrap();
    assert_eq!(r.code, 0);
    assert!(
        r.stderr
            .contains("when no `when` matches, this state has nowhere to go"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_template_error_is_not_caught_by_a_default_transition() {
    let r = sandbox()
        .run(&["run", "template-error-catchall", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 3);
    let doc = r.json().unwrap();
    assert_eq!(doc["terminal"], json!("failed"));
    assert_eq!(
        state(&doc, "s")["error"],
        json!(
            "step s: interpolate command: undefined variable: inputs.missing (input \"missing\" was not given and has no default; pass --input missing=<value>)"
        )
    );
}

#[test]
fn run_warns_about_unknown_keys_and_undeclared_inputs() {
    let sb = sandbox();
    let r = sb.run(&["run", "unknown-keys"]).unwrap();
    assert_eq!(r.code, 0);
    assert!(r.stderr.contains("states.s.on_sucess: unknown field \"on_sucess\" in a step state (did you mean 'on_success'?)"), "{}", r.stderr);
    let r = sb.run(&["run", "typed-inputs", "-i", "falg=true"]).unwrap();
    assert_eq!(r.code, 0);
    assert!(
        r.stderr.contains(
            "input 'falg' is not declared by workflow 'typed-inputs' (did you mean 'flag'?)"
        ),
        "{}",
        r.stderr
    );
}

#[test]
fn streamed_output_without_a_final_newline_does_not_run_into_the_next_line() {
    let sb = sandbox();
    let wf = sb
        .write(
            "nonl.yaml",
            "name: nonl\nstates:\n  initial: a\n  a:\n    type: step\n    command: printf one\n    on_success: b\n  b:\n    type: step\n    command: printf two\n    on_success: done\n  done:\n    type: terminal\n",
        )
        .unwrap();
    let r = sb
        .run(&["run", wf.to_str().unwrap(), "-o", "streaming", "-q"])
        .unwrap();
    assert_eq!(r.stdout, "[OUT] one\n[OUT] two\n");
}

/// Breaker: two branches printing 100,000 lines each at once came out with lines cut in two
/// (`[OUT] [b0] 0-` and, thousands of lines later, `[OUT] [b0] 84333`): each branch's lines
/// are now printed whole, every one of them once.
#[test]
fn streamed_lines_of_parallel_branches_are_never_cut() {
    let r = sandbox()
        .run_workflow(
            "par2seq.yaml",
            "name: par2seq\nstates:\n  initial: p\n  p:\n    type: parallel\n    parallel: [b0, b1]\n    on_success: done\n  b0:\n    type: step\n    command: 'seq -f \"0-%g\" 1 100000'\n  b1:\n    type: step\n    command: 'seq -f \"1-%g\" 1 100000'\n  done:\n    type: terminal\n",
            &["-o", "streaming", "-q"],
        )
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mut next = [1u32, 1u32];
    for line in r.stdout.lines() {
        let (branch, n) = match line.strip_prefix("[OUT] [b0] 0-") {
            Some(n) => (0, n),
            None => match line.strip_prefix("[OUT] [b1] 1-") {
                Some(n) => (1, n),
                None => panic!("a line cut or mislabelled: {line:?}"),
            },
        };
        assert_eq!(n.parse::<u32>().ok(), Some(next[branch]), "{line:?}");
        next[branch] += 1;
    }
    assert_eq!(next, [100_001, 100_001]);
}

/// Breaker: a terminal listed in a loop body was taken for a jump to itself, and the loop
/// failed with "body steps keep jumping between each other". It ends the loop there, and
/// the run with its status and message.
#[test]
fn a_terminal_in_a_loop_body_ends_the_run_there() {
    let r = sandbox()
        .run_workflow(
            "termbody.yaml",
            "name: termbody\nstates:\n  initial: l\n  l:\n    type: for_each\n    items: '[\"a\",\"b\"]'\n    body: [s, bad]\n    on_complete: ok\n    on_failure: failed\n  s:\n    type: step\n    command: 'echo \"{{.loop.Item}}\"'\n  bad:\n    type: terminal\n    status: failure\n    message: stopped in the body\n  ok:\n    type: terminal\n  failed:\n    type: terminal\n    status: failure\n",
            &["-f", "json"],
        )
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(doc["status"], json!("failure"), "{doc}");
    assert!(
        doc.to_string().contains("stopped in the body"),
        "the terminal's message: {doc}"
    );
    assert_eq!(
        state(&doc, "s")["output"],
        json!("a\n"),
        "one iteration ran: {doc}"
    );
    assert!(!r.stderr.contains("keep jumping"), "{}", r.stderr);
}

/// New user: a large step output interpolated into the next command failed with the OS's
/// "Argument list too long" and a hint about `$SHELL`; it now says the command is too long,
/// by how much, and to pass the value through a file.
#[test]
fn a_command_too_long_for_the_os_says_so_and_how_to_avoid_it() {
    let r = sandbox()
        .run_workflow(
            "long.yaml",
            "name: long\nstates:\n  initial: a\n  a:\n    type: step\n    command: seq 1 40000\n    on_success: b\n  b:\n    type: step\n    command: 'echo \"{{.states.a.Output}}\" | wc -l'\n    on_success: done\n  done:\n    type: terminal\n",
            &[],
        )
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains("too long for the OS"), "{}", r.stderr);
    assert!(r.stderr.contains("through a file"), "{}", r.stderr);
    assert!(!r.stderr.contains("$SHELL"), "{}", r.stderr);
}

/// New user: a child's declared outputs were reachable only as the JSON text of the call
/// step's `Output` (`.states.call.Outputs` was `map[]`). Without a mapping they are its
/// `Outputs` by name; a mapping naming nothing of the child says so.
#[test]
fn a_sub_workflows_outputs_are_the_call_steps_outputs() {
    let sb = sandbox();
    sb.write(
        ".awf/workflows/child.yaml",
        "name: child\noutputs:\n  - name: tarball\n    from: states.pack.Output\nstates:\n  initial: pack\n  pack:\n    type: step\n    command: printf demo.tar.gz\n    on_success: done\n  done:\n    type: terminal\n",
    )
    .unwrap();
    sb.write(
        ".awf/workflows/parent.yaml",
        "name: parent\nstates:\n  initial: call\n  call:\n    type: call_workflow\n    workflow: child\n    on_success: use\n  use:\n    type: step\n    command: 'echo \"got {{.states.call.Outputs.tarball}}\"'\n    on_success: call2\n  call2:\n    type: call_workflow\n    workflow: child\n    outputs:\n      tgz: tarball\n    on_success: done\n  done:\n    type: terminal\n",
    )
    .unwrap();
    let r = sb.run(&["run", "parent", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(
        state(&doc, "use")["output"],
        json!("got demo.tar.gz\n"),
        "{doc}"
    );
    assert_eq!(
        state(&doc, "call")["outputs"]["tarball"],
        json!("demo.tar.gz"),
        "{doc}"
    );
    let r = sb.run(&["run", "parent"]).unwrap();
    assert!(
        r.stderr
            .contains("outputs: \"tgz\" is no output or state of child (its outputs: tarball)"),
        "{}",
        r.stderr
    );
}

// ---- regressions found by an adversarial trial ----------------------------------------------

#[test]
fn for_each_without_max_iterations_runs_every_item() {
    let r = sandbox()
        .run(&["run", "foreach-150", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(
        state(&doc, "l")["output"],
        json!("completed 150 iterations")
    );
    assert_eq!(state(&doc, "b")["output"], json!("150/150\n"));
}

#[test]
fn extreme_numbers_do_not_panic() {
    let r = sandbox()
        .run(&["run", "extreme-numbers", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(doc["terminal"], json!("handled"));
    assert_eq!(state(&doc, "a")["output"], json!("a\n"));
    // Every attempt ran (breaker: a delay past what a clock can add stopped the retries
    // without a word; an absurd multiplier is now refused by validate).
    assert_eq!(state(&doc, "r")["attempts"], json!(3));
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
}

#[test]
fn a_missing_sub_workflow_is_refused_by_run_as_by_validate() {
    // `awf validate` and `awf run` apply the same checks (issue 7): a literal `workflow:`
    // that cannot be loaded is a WORKFLOW error before the run starts, not a step failure.
    let sb = sandbox();
    let v = sb.run(&["validate", "missing-child"]).unwrap();
    assert_eq!(v.code, 2, "{}", v.stderr);
    let r = sb.run(&["run", "missing-child", "-f", "json"]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(
        doc["error"]["code"],
        json!("WORKFLOW.VALIDATION.INVALID_REFERENCE")
    );
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no-such-child"),
        "{doc}"
    );
    assert_eq!(doc["states"], json!({}), "nothing ran");
}

#[test]
fn a_second_signal_stops_a_hanging_cancel_hook() {
    let sb = sandbox();
    let mut child = sb
        .cmd(&["run", "stubborn-cancel-hook", "-o", "streaming"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "[OUT] started");
    let t0 = Instant::now();
    let kill = |sig: &str| {
        std::process::Command::new("kill")
            .args([sig, &child.id().to_string()])
            .status()
            .unwrap()
    };
    assert!(kill("-INT").success());
    std::thread::sleep(Duration::from_millis(700));
    assert!(kill("-INT").success());
    let code = child.wait().unwrap().code();
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "hook was not stopped"
    );
    assert_eq!(code, Some(130));
    // Only this sandbox's processes (environment marker), never another test's.
    let leftover: Vec<_> = sb
        .processes()
        .into_iter()
        .filter(|p| p.cmdline == "sleep 142" || p.cmdline == "sleep 143")
        .collect();
    assert!(leftover.is_empty(), "left behind: {leftover:?}");
}

#[test]
fn json_format_reports_flag_errors_as_one_json_object() {
    let r = sandbox()
        .run(&["run", "unrouted", "-f", "json", "--bogus"])
        .unwrap();
    assert_eq!(r.code, 1);
    let doc = r.json().unwrap();
    assert_eq!(doc["error"]["code"], json!("USER.INPUT.INVALID_FORMAT"));
    assert_eq!(doc["run_id"], Value::Null);
}

#[test]
fn a_step_killed_by_a_signal_says_which() {
    let r = sandbox().run(&["run", "killed", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3);
    let doc = r.json().unwrap();
    assert_eq!(
        state(&doc, "s")["error"],
        json!("step s: killed by signal 9 (SIGKILL)")
    );
    assert_eq!(state(&doc, "s")["exit_code"], json!(-1));
}

// ---- regressions from the second trial (agents, mocks) --------------------------------------

#[test]
fn mocked_agent_answers_go_through_output_format() {
    let sb = sandbox();
    let r = sb
        .run(&[
            "run",
            "agent-json",
            "-f",
            "json",
            "--mock",
            "states.ask.output=```json\n{\"v\": 2}\n```",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(state(&doc, "ask")["json"], json!({"v": 2}));
    assert_eq!(state(&doc, "use")["output"], json!("v=2\n"));
    let r = sb
        .run(&[
            "run",
            "agent-json",
            "-f",
            "json",
            "--mock",
            "states.ask.output=not json",
        ])
        .unwrap();
    assert_eq!(r.code, 3);
    let doc = r.json().unwrap();
    assert_eq!(doc["terminal"], json!("failed"));
    assert!(
        state(&doc, "ask")["error"]
            .as_str()
            .unwrap()
            .contains("output format processing: invalid JSON"),
        "{doc}"
    );
}

#[test]
fn mocked_conversation_steps_can_be_continued() {
    let sb = sandbox();
    let wf = awf_tests::workspace_root().join("workflows/conversation.yaml");
    let r = sb
        .run(&[
            "run",
            wf.to_str().unwrap(),
            "-f",
            "json",
            "-i",
            "topic=x",
            "--mock",
            "states.chat.output=hi",
            "--mock",
            "states.summary.output=sum",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(state(&r.json().unwrap(), "summary")["output"], json!("sum"));
}

#[test]
fn a_mock_for_a_state_that_does_not_exist_is_refused() {
    let r = sandbox()
        .run(&[
            "run",
            "agent-json",
            "-f",
            "json",
            "--mock",
            "states.aks.output=x",
        ])
        .unwrap();
    assert_eq!(r.code, 1);
    let doc = r.json().unwrap();
    assert_eq!(doc["error"]["code"], json!("USER.INPUT.VALIDATION_FAILED"));
    assert_eq!(doc["error"]["hints"], json!(["did you mean 'ask'?"]));
    let r = sandbox()
        .run(&[
            "run",
            "three-logged",
            "-i",
            "log=/dev/null",
            "-b",
            "tow",
            "-f",
            "json",
        ])
        .unwrap();
    // Issue 8: an unknown breakpoint is not an error (AWF (Go)); it never pauses the run.
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(r.json().unwrap()["error"], json!(null));
}

#[test]
fn validate_warns_about_an_unknown_literal_provider() {
    let sb = sandbox();
    let wf = sb
        .write(
            "p.yaml",
            "name: p\nstates:\n  initial: a\n  a:\n    type: agent\n    provider: claud\n    prompt: hi\n    on_success: d\n  d:\n    type: terminal\n",
        )
        .unwrap();
    let r = sb.run(&["validate", wf.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 0);
    assert!(
        r.stderr.contains(
            "[USER.AGENT.UNKNOWN_PROVIDER] states.a.provider: unknown provider \"claud\""
        ),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("did you mean 'claude'?"), "{}", r.stderr);
}

// ---- regressions from the second adversarial trial -------------------------------------------

#[test]
fn prompt_files_and_audit_logs_that_are_pipes_do_not_block() {
    let mut sb = sandbox();
    let fifo = sb.path().join("fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let wf = sb
        .write(
            "pf.yaml",
            &format!(
                "name: pf\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: claude\n    prompt_file: {}\n    timeout: 5s\n    on_success: done\n    on_failure: failed\n  done:\n    type: terminal\n  failed:\n    type: terminal\n    status: failure\n",
                fifo.display()
            ),
        )
        .unwrap();
    let t0 = Instant::now();
    let r = sb
        .run(&[
            "run",
            wf.to_str().unwrap(),
            "-f",
            "json",
            "--mock",
            "states.ask.output=x",
        ])
        .unwrap();
    assert!(t0.elapsed() < Duration::from_secs(10), "blocked on a FIFO");
    assert_eq!(r.code, 3, "{}", r.stderr);
    let err = state(&r.json().unwrap(), "ask")["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(err.contains("not a regular file"), "{err}");

    sb.set_env("AWF_AUDIT_LOG", &fifo.display().to_string());
    let t0 = Instant::now();
    let r = sb.run(&["run", "continue-on-error"]).unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "blocked on a FIFO audit log"
    );
    assert_eq!(r.code, 0);
    assert!(
        r.stderr
            .contains("WARN run record: cannot write the audit trail"),
        "{}",
        r.stderr
    );
}

#[test]
fn output_format_can_be_a_template() {
    let sb = sandbox();
    let wf = sb
        .write(
            "fmt.yaml",
            "name: fmt\ninputs:\n  - name: fmt\n    default: json\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: claude\n    prompt: hi\n    output_format: \"{{.inputs.fmt}}\"\n    on_success: done\n  done:\n    type: terminal\n",
        )
        .unwrap();
    let r = sb
        .run(&[
            "run",
            wf.to_str().unwrap(),
            "-f",
            "json",
            "--mock",
            "states.ask.output={\"a\": 1}",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(state(&r.json().unwrap(), "ask")["json"], json!({"a": 1}));
    let r = sb
        .run(&[
            "run",
            wf.to_str().unwrap(),
            "-f",
            "json",
            "-i",
            "fmt=json",
            "--mock",
            "states.ask.output=nope",
        ])
        .unwrap();
    assert_eq!(r.code, 3);
}
