//! `awf run --dry-run` and `--interactive` show what will happen, as AWF (Go) does (issue 8):
//! the loaded and interpolated content of `script_file` / `prompt_file`, `{{.awf.*}}` resolved,
//! the run's 1 MiB file limit, no `file_exists` check on inputs, no internal state names, and
//! the `-f quiet` / `-f json` forms of the plan. Written from AWF (Go)'s
//! `tests/integration/cli/run_script_file_test.go`, `run_prompt_file_test.go` and its
//! dry-run / interactive executors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use awf_tests::Sandbox;

/// A workflow with a script step, an agent step reading a prompt file, and an inline command
/// using `{{.awf.scripts_dir}}`.
fn demo(sb: &Sandbox) -> String {
    sb.write(
        "wf/scripts/s.sh",
        "#!/bin/bash\necho \"dry run test {{.inputs.name}}\"\n",
    )
    .unwrap();
    sb.write(
        "wf/prompts/p.md",
        "Analyze {{.inputs.name}} carefully.\nSecond line.\n",
    )
    .unwrap();
    sb.write(
        "wf/dr.yaml",
        "name: dr\ninputs:\n  - name: name\n    type: string\n    default: world\n\
         states:\n  initial: s1\n  s1:\n    type: step\n    script_file: scripts/s.sh\n    on_success: ag\n\
         \x20 ag:\n    type: agent\n    provider: claude\n    prompt_file: prompts/p.md\n    on_success: c\n\
         \x20 c:\n    type: step\n    command: echo \"{{.awf.scripts_dir}}/x.sh\"\n    on_success: done\n\
         \x20 done:\n    type: terminal\n",
    )
    .unwrap()
    .display()
    .to_string()
}

#[test]
fn dry_run_shows_the_interpolated_content_of_script_and_prompt_files() {
    let sb = Sandbox::new().unwrap();
    let wf = demo(&sb);
    let r = sb
        .run(&["run", &wf, "--dry-run", "-i", "name=TestData"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    // The script's line, with the input substituted (Go: run_script_file_test.go).
    assert!(
        r.stdout.contains("echo \"dry run test TestData\""),
        "{}",
        r.stdout
    );
    // The prompt file's text, interpolated (Go: run_prompt_file_test.go).
    assert!(
        r.stdout.contains("Prompt: Analyze TestData carefully."),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("Second line."), "{}", r.stdout);
    assert!(!r.stdout.contains("{{"), "{}", r.stdout);
}

#[test]
fn dry_run_resolves_awf_directories() {
    let sb = Sandbox::new().unwrap();
    let wf = demo(&sb);
    let r = sb.run(&["run", &wf, "--dry-run"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let global = sb.path().join("config/awf/scripts/x.sh");
    assert!(
        r.stdout
            .contains(&format!("Command: echo \"{}\"", global.display())),
        "{}",
        r.stdout
    );
    // A project copy next to the workflow wins, as at run time.
    sb.write("scripts/x.sh", "true\n").unwrap();
    let r = sb.run(&["run", &wf, "--dry-run"]).unwrap();
    let local = sb.path().join("wf/../scripts/x.sh");
    let local_norm = sb.path().join("scripts/x.sh");
    assert!(
        r.stdout.contains(&local.display().to_string())
            || r.stdout.contains(&local_norm.display().to_string()),
        "{}",
        r.stdout
    );
}

#[test]
fn dry_run_json_carries_the_loaded_contents() {
    let sb = Sandbox::new().unwrap();
    let wf = demo(&sb);
    let r = sb.run(&["run", &wf, "--dry-run", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = r.json().unwrap();
    // A dry run starts no run: the plan names none.
    assert!(
        v.get("run_id").is_none() && v.get("workflow_id").is_none(),
        "{v}"
    );
    assert_eq!(v["workflow"], "dr");
    let states = v["states"].as_array().unwrap();
    assert_eq!(
        states[0]["script"],
        "#!/bin/bash\necho \"dry run test world\"\n"
    );
    assert!(
        states[0]["script_file"]
            .as_str()
            .unwrap()
            .ends_with("scripts/s.sh")
    );
    assert_eq!(
        states[1]["prompt"],
        "Analyze world carefully.\nSecond line.\n"
    );
    assert!(
        states[1]["prompt_file"]
            .as_str()
            .unwrap()
            .ends_with("prompts/p.md")
    );
}

#[test]
fn dry_run_quiet_prints_the_workflow_name_and_table_prints_the_plan() {
    let sb = Sandbox::new().unwrap();
    let wf = demo(&sb);
    let r = sb.run(&["run", &wf, "--dry-run", "-f", "quiet"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "dr\n");
    let text = sb.run(&["run", &wf, "--dry-run"]).unwrap();
    let table = sb.run(&["run", &wf, "--dry-run", "-f", "table"]).unwrap();
    assert_eq!(table.code, 0, "{}", table.stderr);
    assert_eq!(table.stdout, text.stdout);
    assert!(
        table.stdout.starts_with("Dry Run: dr\n"),
        "{}",
        table.stdout
    );
}

#[test]
fn dry_run_names_the_captured_variables() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "cap.yaml",
            "name: cap\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo hi\n\
             \x20   capture:\n      stdout: out_var\n      stderr: err_var\n      max_size: 1KB\n    on_success: done\n\
             \x20 done:\n    type: terminal\n",
        )
        .unwrap()
        .display()
        .to_string();
    let r = sb.run(&["run", &wf, "--dry-run"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("Capture: stdout -> out_var, stderr -> err_var"),
        "{}",
        r.stdout
    );
    let r = sb.run(&["run", &wf, "--dry-run", "-f", "json"]).unwrap();
    let v = r.json().unwrap();
    assert_eq!(v["states"][0]["capture"]["stdout"], "out_var");
    assert_eq!(v["states"][0]["capture"]["stderr"], "err_var");
    assert_eq!(v["states"][0]["capture_max_size"], 1024);
}

#[test]
fn dry_run_refuses_a_prompt_file_over_one_mebibyte_like_a_run() {
    let sb = Sandbox::new().unwrap();
    let wf = demo(&sb);
    sb.write("wf/prompts/p.md", &"a".repeat(1024 * 1024 + 1))
        .unwrap();
    let r = sb.run(&["run", &wf, "--dry-run"]).unwrap();
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("exceeds"), "{}", r.stderr);
    assert!(
        r.stderr.contains("USER.INPUT.INVALID_FORMAT"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("Hint:"), "{}", r.stderr);
    assert!(!r.stdout.contains("Execution Plan"), "{}", r.stdout);
    // Exactly 1 MiB is allowed.
    sb.write("wf/prompts/p.md", &"a".repeat(1024 * 1024))
        .unwrap();
    let r = sb.run(&["run", &wf, "--dry-run"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn dry_run_does_not_check_file_exists_on_inputs() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "fe.yaml",
            "name: fe\ninputs:\n  - name: file\n    type: string\n    required: true\n    validation:\n      file_exists: true\n\
             states:\n  initial: a\n  a:\n    type: step\n    command: cat {{.inputs.file}}\n    on_success: done\n\
             \x20 done:\n    type: terminal\n",
        )
        .unwrap()
        .display()
        .to_string();
    let r = sb
        .run(&["run", &wf, "--dry-run", "-i", "file=/does/not/exist"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("Command: cat /does/not/exist"),
        "{}",
        r.stdout
    );
    // A missing required input is a placeholder (AWF (Go) refuses the dry run:
    // docs/compatibility.md; trial_fixes_59 has the whole plan).
    let r = sb.run(&["run", &wf, "--dry-run"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("Command: cat <missing: file>"),
        "{}",
        r.stdout
    );
}

#[test]
fn dry_run_shows_an_inline_error_without_its_internal_name() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "ie.yaml",
            "name: ie\nstates:\n  initial: verify\n  verify:\n    type: step\n    command: test -f x\n    on_success: done\n\
             \x20   on_failure: {message: \"verify failed\", status: 4}\n  done:\n    type: terminal\n",
        )
        .unwrap()
        .display()
        .to_string();
    let r = sb.run(&["run", &wf, "--dry-run"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stdout.contains("__inline_error"), "{}", r.stdout);
    assert!(
        r.stdout
            .contains("→ on_failure: fail \"verify failed\" (exit 4)"),
        "{}",
        r.stdout
    );
    let r = sb.run(&["run", &wf, "--dry-run", "-f", "json"]).unwrap();
    assert!(!r.stdout.contains("__inline_error"), "{}", r.stdout);
    let v = r.json().unwrap();
    let routes = v["states"][0]["routes"].as_array().unwrap();
    assert_eq!(routes[1]["inline_error"]["message"], "verify failed");
    assert_eq!(routes[1]["inline_error"]["exit_code"], 4);
    assert_eq!(v["states"].as_array().unwrap().len(), 2);
}

/// Under a real pseudo-terminal (rexpect reads bytes as Latin-1, so only ASCII is matched):
/// before each step, `[Step n/N]`, the resolved command, the timeout and the routes; after it, `Executing`, its output, stderr and exit code (AWF (Go)'s
/// interactive executor).
#[test]
fn interactive_shows_the_resolved_command_routes_and_the_result_of_each_step() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "int.yaml",
            "name: int\ninputs:\n  - name: who\n    default: bob\nstates:\n  initial: a\n\
             \x20 a:\n    type: step\n    command: echo \"hi {{.inputs.who}}\"; echo oops >&2; exit 3\n    timeout: 5s\n\
             \x20   on_success: done\n    on_failure: b\n\
             \x20 b:\n    type: step\n    command: echo \"got {{.states.a.ExitCode}}\"\n    transitions:\n\
             \x20     - when: 'states.a.ExitCode == 3'\n        goto: done\n      - goto: err\n\
             \x20 done:\n    type: terminal\n  err:\n    type: terminal\n    status: failure\n",
        )
        .unwrap()
        .display()
        .to_string();
    let cmd = sb.tty_cmd(&["run", &wf, "--interactive", "-i", "who=ada"]);
    let mut p = rexpect::session::spawn_command(cmd, Some(20_000)).unwrap();
    p.exp_string("[Step 1/2] a\r\n").unwrap();
    p.exp_string("Type: command").unwrap();
    p.exp_string("Command: echo \"hi ada\"; echo oops >&2; exit 3")
        .unwrap();
    p.exp_string("Timeout: 5s").unwrap();
    p.exp_string("on_success: done").unwrap();
    p.exp_string("on_failure: b").unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("c").unwrap();
    p.exp_string("Executing a...").unwrap();
    p.exp_string("Output: hi ada").unwrap();
    p.exp_string("Stderr: oops").unwrap();
    p.exp_string("Exit: 3 | Duration: ").unwrap();
    p.exp_string("Status: ").unwrap();
    p.exp_string(" failed\r\n").unwrap();
    // The next step's command is resolved with the state that just ran.
    p.exp_string("[Step 2/2] b\r\n").unwrap();
    p.exp_string("Type: command").unwrap();
    p.exp_string("Command: echo \"got 3\"").unwrap();
    p.exp_string("when \"states.a.ExitCode == 3\": done")
        .unwrap();
    p.exp_string("default: err").unwrap();
    p.exp_string("[r]etry > ").unwrap();
    p.send_line("c").unwrap();
    p.exp_string("Output: got 3").unwrap();
    p.exp_string("Exit: 0 | Duration: ").unwrap();
    p.exp_string("Status: ").unwrap();
    p.exp_string(" completed\r\n").unwrap();
    p.exp_string("Workflow completed.").unwrap();
    p.exp_eof().unwrap();
}

/// `[Step n/N]` counts visited steps; a step run again by `retry` keeps its number.
#[test]
fn interactive_step_counter_reuses_the_number_on_retry() {
    let sb = Sandbox::new().unwrap();
    let log = sb.path().join("log");
    let cmd = sb.tty_cmd(&[
        "run",
        "three-logged",
        "--interactive",
        "-i",
        &format!("log={}", log.display()),
    ]);
    let mut p = rexpect::session::spawn_command(cmd, Some(20_000)).unwrap();
    p.exp_string("[Step 1/3] one\r\n").unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("c").unwrap();
    p.exp_string("[Step 2/3] two\r\n").unwrap();
    p.exp_string("[r]etry > ").unwrap();
    p.send_line("r").unwrap();
    p.exp_string("[Step 1/3] one\r\n").unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("c").unwrap();
    p.exp_string("[Step 2/3] two\r\n").unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("c").unwrap();
    p.exp_string("[Step 3/3] three\r\n").unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("c").unwrap();
    p.exp_string("Workflow completed.").unwrap();
    p.exp_eof().unwrap();
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "one\none\ntwo\nthree\n"
    );
}

/// `prompt_file: "{{.awf.prompts_dir}}/…"` is found in the global prompts folder, and the
/// project's `.awf/prompts` copy wins when there is one (AWF (Go): run_prompt_file_test.go).
#[test]
fn dry_run_finds_a_prompt_file_named_through_awf_prompts_dir() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "config/awf/prompts/review.md",
        "global review of {{.inputs.x}}\n",
    )
    .unwrap();
    let wf = sb
        .write(
            ".awf/workflows/pf.yaml",
            "name: pf\ninputs:\n  - name: x\n    default: main.rs\nstates:\n  initial: ag\n\
             \x20 ag:\n    type: agent\n    provider: claude\n    prompt_file: \"{{.awf.prompts_dir}}/review.md\"\n    on_success: done\n\
             \x20 done:\n    type: terminal\n",
        )
        .unwrap()
        .display()
        .to_string();
    let r = sb.run(&["run", &wf, "--dry-run"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("Prompt: global review of main.rs"),
        "{}",
        r.stdout
    );
    sb.write(".awf/prompts/review.md", "local review of {{.inputs.x}}\n")
        .unwrap();
    let r = sb.run(&["run", &wf, "--dry-run"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("Prompt: local review of main.rs"),
        "{}",
        r.stdout
    );
}
