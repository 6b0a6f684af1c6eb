//! Fixes from a trial of the typed interactions and approval gates (issue 10 follow-up), over
//! the real binary: the `approval:` key's values, message templates checked by `awf validate`
//! and interpolated by `--dry-run`, multi-line messages, gates refused for want of a terminal,
//! invalid UTF-8 and Ctrl-C at prompts, menus, `--interactive` at end of input.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

/// A one-step workflow whose step `a` carries `approval:<value>`.
fn gated(value: &str) -> String {
    format!(
        "name: x\nstates:\n  initial: a\n  a:\n    type: step\n    command: \"true\"\n    approval:{value}\n    on_success: done\n  done: {{type: terminal}}\n"
    )
}

#[test]
fn a_bare_or_non_string_approval_is_an_invalid_value_with_its_position() {
    let sb = Sandbox::new().unwrap();
    for (value, col, want) in [
        ("", 5, "approval has no value"),
        (
            " 42",
            15,
            "approval must be a message (a string) or a mapping, found an integer",
        ),
        (
            " true",
            15,
            "approval must be a message (a string) or a mapping, found a boolean",
        ),
        (
            " {message: 42}",
            16,
            "approval message must be a string, found an integer",
        ),
    ] {
        sb.write("x.yaml", &gated(value)).unwrap();
        let r = sb.run(&["validate", "x.yaml"]).unwrap();
        let text = format!("{}{}", r.stdout, r.stderr);
        assert_eq!(r.code, 2, "approval:{value}\n{text}");
        assert!(
            text.contains(&format!(
                "x.yaml:7:{col}: error [WORKFLOW.PARSE.INVALID_VALUE]"
            )),
            "approval:{value}\n{text}"
        );
        assert!(text.contains(want), "approval:{value}\n{text}");
        assert!(text.contains("Hint: "), "approval:{value}\n{text}");
        // `awf run` refuses it too instead of running the step ungated.
        let r = sb.run(&["run", "x.yaml", "--yes"]).unwrap();
        assert_eq!(r.code, 2, "approval:{value}\n{}", r.stderr);
    }
    for value in [" \"ok\"", " \"42\"", " {}"] {
        sb.write("x.yaml", &gated(value)).unwrap();
        let r = sb.run(&["validate", "x.yaml"]).unwrap();
        assert_eq!(r.code, 0, "approval:{value}\n{}{}", r.stdout, r.stderr);
    }
}

const TIMEOUT_MS: u64 = 20_000;

/// Writes raw bytes (not necessarily UTF-8) to the pseudo-terminal, as a keyboard would.
fn send_bytes(p: &rexpect::session::PtySession, bytes: &[u8]) {
    use std::io::Write;
    let mut f = p.process().get_file_handle().unwrap();
    f.write_all(bytes).unwrap();
    f.flush().unwrap();
}

/// A menu gate (three options), then a default y/N gate, then a logged step.
const TWO_GATES: &str = r#"name: two-gates
states:
  initial: menu
  menu:
    type: step
    command: echo menu >> log
    approval:
      message: "Pick one"
      options:
        - {id: once, kind: allow_once}
        - {id: all, kind: allow_always}
        - {id: no, kind: reject_once}
    on_success: yn
  yn:
    type: step
    command: echo yn >> log
    approval: "Go on?"
    on_success: done
  done: {type: terminal}
"#;

#[test]
fn invalid_utf8_at_a_gate_menu_or_breakpoint_is_asked_again_not_end_of_input() {
    let sb = Sandbox::new().unwrap();
    sb.write("g.yaml", TWO_GATES).unwrap();
    let cmd = sb.tty_cmd(&["--no-color", "run", "g.yaml"]);
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    p.exp_string("choose a number or an id > ").unwrap();
    send_bytes(&p, b"\xff\xfe\n");
    p.exp_string("invalid: the value is not valid UTF-8; try again")
        .unwrap();
    p.exp_string("choose a number or an id > ").unwrap();
    p.send_line("1").unwrap();
    p.exp_string("? Go on? (yn) [y/N] ").unwrap();
    send_bytes(&p, b"\xc3\n");
    p.exp_string("invalid: the value is not valid UTF-8; try again")
        .unwrap();
    p.exp_string("[y/N] ").unwrap();
    p.send_line("y").unwrap();
    p.exp_string("Workflow completed.").unwrap();
    p.exp_eof().unwrap();
    assert_eq!(
        std::fs::read_to_string(sb.path().join("log")).unwrap(),
        "menu\nyn\n"
    );

    // A breakpoint (`--interactive`): asked again, then `c` runs the step.
    sb.write(
        "one.yaml",
        "name: one\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo a >> log2\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    let cmd = sb.tty_cmd(&["--no-color", "run", "one.yaml", "--interactive"]);
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    p.exp_string("Type: command").unwrap();
    p.exp_string("> ").unwrap();
    send_bytes(&p, b"\xff\n");
    p.exp_string("invalid: the value is not valid UTF-8; try again")
        .unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("c").unwrap();
    p.exp_string("Workflow completed.").unwrap();
    p.exp_eof().unwrap();
    assert_eq!(
        std::fs::read_to_string(sb.path().join("log2")).unwrap(),
        "a\n"
    );
}

/// One gated step with no `on_failure`.
const SHIP: &str = r#"name: ship
states:
  initial: deploy
  deploy:
    type: step
    command: echo deployed >> log
    approval: {message: "Ship it?"}
    on_success: done
  done: {type: terminal}
"#;

#[test]
fn a_gate_refused_for_want_of_a_terminal_says_so_and_records_no_choice() {
    let sb = Sandbox::new().unwrap();
    sb.write("ship.yaml", SHIP).unwrap();
    let r = sb.run(&["run", "ship.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(doc["error"]["code"], "EXECUTION.APPROVAL.REJECTED");
    assert_eq!(
        doc["error"]["message"],
        "step deploy: approval not asked: no terminal to ask on; pass --yes to approve gates"
    );
    assert_eq!(doc["states"]["deploy"]["approval"], serde_json::Value::Null);
    assert!(!sb.path().join("log").exists(), "the step did not run");
    // Shown even when only errors are logged.
    let r = sb
        .run(&["--log-level", "error", "run", "ship.yaml"])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("no terminal to ask on; pass --yes to approve gates"),
        "{}",
        r.stderr
    );
}

#[test]
fn with_stderr_redirected_a_gate_is_asked_on_the_controlling_terminal() {
    let sb = Sandbox::new().unwrap();
    sb.write("ship.yaml", SHIP).unwrap();
    let err_log = sb.path().join("err.log");
    let mut cmd = sb.tty_cmd(&["--no-color", "run", "ship.yaml", "-f", "json"]);
    cmd.stderr(std::fs::File::create(&err_log).unwrap());
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    p.exp_string("? Ship it? (deploy) [y/N] ").unwrap();
    p.send_line("y").unwrap();
    p.exp_string("\"status\": \"success\"").unwrap();
    p.exp_eof().unwrap();
    assert_eq!(
        std::fs::read_to_string(sb.path().join("log")).unwrap(),
        "deployed\n"
    );
    let err = std::fs::read_to_string(&err_log).unwrap();
    assert!(
        !err.contains("Ship it?"),
        "the prompt is not in the file: {err}"
    );
}

/// One logged step, for `--interactive`.
const ONE: &str = "name: one\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo a >> log\n    on_success: done\n  done: {type: terminal}\n";

#[test]
fn breakpoint_decisions_come_from_a_pipe_and_its_end_is_not_the_signal_code() {
    let sb = Sandbox::new().unwrap();
    sb.write("one.yaml", ONE).unwrap();
    // Nothing to read: the run ends with its own error, exit 1 (not 130 as for Ctrl-C).
    let r = sb
        .run(&["run", "one.yaml", "--interactive", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(doc["error"]["code"], "USER.FACADE.SESSION_CLOSED");
    assert_eq!(
        doc["error"]["message"],
        "input ended at the breakpoint before 'a': run aborted"
    );
    assert!(!sb.path().join("log").exists(), "the step did not run");
    // Scripted answers, as AWF (Go) takes them: `c` runs the state.
    let mut cmd = sb.cmd(&["run", "one.yaml", "--interactive"]);
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"c\n").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(sb.path().join("log")).unwrap(),
        "a\n"
    );
}

#[test]
fn end_of_input_at_a_breakpoint_aborts_with_its_own_message_and_exit_code() {
    let sb = Sandbox::new().unwrap();
    sb.write("one.yaml", ONE).unwrap();
    let cmd = sb.tty_cmd(&["--no-color", "run", "one.yaml", "--interactive"]);
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    p.exp_string("Type: command").unwrap();
    p.exp_string("> ").unwrap();
    p.send_control('d').unwrap();
    p.exp_string("input ended at the breakpoint before 'a': run aborted")
        .unwrap();
    p.exp_eof().unwrap();
    let status = format!("{:?}", p.process().wait().unwrap());
    assert!(
        status.starts_with("Exited(") && status.ends_with(", 1)"),
        "{status}"
    );
    assert!(!sb.path().join("log").exists(), "the step did not run");
}

#[test]
fn approval_messages_are_checked_like_other_templates_and_dry_run_interpolates_them() {
    let sb = Sandbox::new().unwrap();
    let wf = |approval: &str| {
        format!(
            "name: x\ninputs:\n  - {{name: x, default: staging}}\nstates:\n  initial: a\n  a:\n    type: step\n    command: \"echo hi\"\n    approval: {approval}\n    on_success: done\n  done: {{type: terminal}}\n"
        )
    };
    for (approval, want) in [
        (
            "\"Deploy {{.inputs.nope}}?\"",
            "x.yaml:9:5: error [WORKFLOW.VALIDATION.INVALID_REFERENCE] states.a.approval.message: undefined input \"nope\"",
        ),
        (
            "\"Deploy {{.inputs.x\"",
            "x.yaml:9:5: error [WORKFLOW.VALIDATION.INVALID_REFERENCE] states.a.approval.message: template does not parse",
        ),
        (
            "{message: \"Deploy {{.inputs.nope}}?\"}",
            // At the template in the one-line message (trial 59), not at the key.
            "x.yaml:9:33: error [WORKFLOW.VALIDATION.INVALID_REFERENCE] states.a.approval.message: undefined input \"nope\"",
        ),
    ] {
        sb.write("x.yaml", &wf(approval)).unwrap();
        let r = sb.run(&["validate", "x.yaml"]).unwrap();
        let text = format!("{}{}", r.stdout, r.stderr);
        assert_eq!(r.code, 2, "{approval}\n{text}");
        assert!(
            text.contains(want),
            "{approval}: missing {want:?} in\n{text}"
        );
    }
    sb.write("x.yaml", &wf("\"Deploy {{.inputs.x}}?\""))
        .unwrap();
    let r = sb.run(&["validate", "x.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let r = sb
        .run(&["run", "x.yaml", "--dry-run", "-i", "x=prod"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("Approval: \"Deploy prod?\""),
        "{}",
        r.stdout
    );
}

#[test]
fn a_multi_line_approval_message_shows_its_lines_indented() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "m.yaml",
        "name: m\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo a >> log\n    approval: \"Deploy?\\nThis restarts prod.\\n\\e[2J\\n\"\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    let cmd = sb.tty_cmd(&["--no-color", "run", "m.yaml"]);
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    let before = p.exp_string("[y/N] ").unwrap();
    assert!(
        before.ends_with("? Deploy?\r\n  This restarts prod.\r\n  \\u{1b}[2J (a) "),
        "{before:?}"
    );
    assert!(!before.contains("\\u{a}"), "{before:?}");
    p.send_line("y").unwrap();
    p.exp_string("Workflow completed.").unwrap();
    p.exp_eof().unwrap();
}

#[test]
fn ctrl_c_at_a_hidden_prompt_ends_it_at_once_without_enter() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "secret.yaml",
        "name: secret\ninputs:\n  - name: API_TOKEN\n    required: true\nstates:\n  initial: a\n  a: {type: step, command: echo ran >> log, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let cmd = sb.tty_cmd(&["run", "secret.yaml"]);
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    p.exp_string("Input API_TOKEN").unwrap();
    p.exp_string("> ").unwrap();
    p.send("abc").unwrap();
    // No Enter: Ctrl-C alone ends the read and the run.
    p.send_control('c').unwrap();
    p.exp_eof().unwrap();
    let status = format!("{:?}", p.process().wait().unwrap());
    assert!(
        status.starts_with("Exited(") && status.ends_with(", 130)"),
        "{status}"
    );
    assert!(!sb.path().join("log").exists());
}

#[test]
fn a_hidden_prompt_takes_backspace_and_enter() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "secret.yaml",
        "name: secret\ninputs:\n  - name: API_TOKEN\n    required: true\nstates:\n  initial: a\n  a: {type: step, command: 'printf %s \"$API_TOKEN\" > out', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let cmd = sb.tty_cmd(&["--no-color", "run", "secret.yaml"]);
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    p.exp_string("> ").unwrap();
    p.send("s3crx\x7fet").unwrap();
    p.send_line("").unwrap();
    p.exp_string("Workflow completed.").unwrap();
    p.exp_eof().unwrap();
    assert_eq!(
        std::fs::read_to_string(sb.path().join("out")).unwrap(),
        "s3cret"
    );
}

/// Two gated branches and a slow ungated one that finishes while the prompts are open.
const PAR_GATES: &str = r#"name: par
states:
  initial: all
  all:
    type: parallel
    parallel: [left, right, slow]
    strategy: best_effort
    on_success: done
  left:
    type: step
    command: echo left >> log
    approval: "Left?"
  right:
    type: step
    command: echo right >> log
    approval: "Right?"
  slow:
    type: step
    command: sleep 1; echo slow-done
  done: {type: terminal}
"#;

const GATE_PROMPT: &str = r"\? (Left|Right)\? \((left|right)\) \[y/N\] ";

/// Waits `ms`, then says whether the terminal got anything meanwhile (the wait only gives a
/// broken build the time to show itself; a correct one passes however slow the machine).
fn wrote_meanwhile(p: &mut rexpect::session::PtySession, ms: u64) -> Option<char> {
    std::thread::sleep(std::time::Duration::from_millis(ms));
    p.try_read()
}

#[test]
fn open_gate_prompts_are_not_drawn_over_by_spinners_or_other_branches() {
    let sb = Sandbox::new().unwrap();
    sb.write("par.yaml", PAR_GATES).unwrap();
    let cmd = sb.tty_cmd(&["--no-color", "run", "par.yaml"]);
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    let first = p.exp_regex(GATE_PROMPT).unwrap().1;
    // `slow` finishes meanwhile: its line waits, no spinner is drawn.
    assert_eq!(wrote_meanwhile(&mut p, 1500), None);
    p.send_line("y").unwrap();
    let (between, second) = p.exp_regex(GATE_PROMPT).unwrap();
    assert_ne!(first, second);
    assert!(!between.contains("slow"), "{between:?}");
    // The second prompt is not erased by the spinners coming back.
    assert_eq!(wrote_meanwhile(&mut p, 500), None);
    p.send_line("y").unwrap();
    let rest = p.exp_string("Workflow completed.").unwrap();
    assert!(
        rest.contains("slow"),
        "the held line is written after: {rest:?}"
    );
    p.exp_eof().unwrap();
    let mut log: Vec<String> = std::fs::read_to_string(sb.path().join("log"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    log.sort();
    assert_eq!(log, vec!["left", "right"]);
}

#[test]
fn after_ctrl_c_at_a_gate_no_other_gate_is_asked() {
    let sb = Sandbox::new().unwrap();
    sb.write("par.yaml", PAR_GATES).unwrap();
    let cmd = sb.tty_cmd(&["--no-color", "run", "par.yaml"]);
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    p.exp_regex(GATE_PROMPT).unwrap();
    p.send_control('c').unwrap();
    let rest = p.exp_eof().unwrap();
    // The notice starts on a line of its own, not after the prompt.
    assert!(rest.starts_with("\r\n"), "{rest:?}");
    assert!(rest.contains("received SIGINT, cancelling"), "{rest:?}");
    assert!(
        !rest.contains("[y/N]"),
        "no gate is asked while cancelling: {rest:?}"
    );
    let status = format!("{:?}", p.process().wait().unwrap());
    assert!(
        status.starts_with("Exited(") && status.ends_with(", 130)"),
        "{status}"
    );
    assert!(!sb.path().join("log").exists(), "no gated step ran");
}

/// A run routed to a failure terminal: the hint resumes at the state that failed (resuming
/// where it stopped would only reach the terminal again).
#[test]
fn the_resume_hint_of_a_run_routed_to_a_failure_terminal_names_the_failed_state() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "routed.yaml",
        "name: routed\nstates:\n  initial: a\n  a: {type: step, command: 'true', on_success: b}\n  b: {type: step, command: 'exit 7', on_success: done, on_failure: failed}\n  done: {type: terminal}\n  failed: {type: terminal, status: failure}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "routed.yaml"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains(" --from b`"), "{}", r.stderr);
    // Without a route to a terminal, the plain hint.
    sb.write(
        "plain.yaml",
        "name: plain\nstates:\n  initial: b\n  b: {type: step, command: 'exit 7', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "plain.yaml"]).unwrap();
    assert!(
        r.stderr.contains("continue it with `awf resume "),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("--from"), "{}", r.stderr);
}
