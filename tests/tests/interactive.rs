//! Interactive use under a real pseudo-terminal (rexpect): breakpoints with continue/skip,
//! and missing required inputs asked for (enum as a menu, bad values re-asked).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use pretty_assertions::assert_eq;

const TIMEOUT_MS: u64 = 20_000;

#[test]
fn interactive_run_stops_before_each_step_and_skips_on_request() {
    let sb = Sandbox::new().unwrap();
    let log = sb.path().join("log");
    let cmd = sb.tty_cmd(&[
        "run",
        "three-logged",
        "--interactive",
        "-i",
        &format!("log={}", log.display()),
    ]);
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    p.exp_string("[Step 1/3] one\r\n").unwrap();
    p.exp_string("Type: command").unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("c").unwrap();
    p.exp_string("[Step 2/3] two\r\n").unwrap();
    p.exp_string("Type: command").unwrap();
    p.exp_string("[r]etry > ").unwrap();
    p.send_line("i").unwrap();
    p.exp_string("one: completed").unwrap();
    p.exp_string("[Step 2/3] two\r\n").unwrap();
    p.exp_string("Type: command").unwrap();
    p.send_line("s").unwrap();
    p.exp_string("[Step 3/3] three\r\n").unwrap();
    p.exp_string("Type: command").unwrap();
    p.send_line("c").unwrap();
    p.exp_string("Workflow completed.").unwrap();
    p.exp_eof().unwrap();
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "one\nthree\n");
}

#[test]
fn breakpoints_stop_only_where_asked_and_abort_cancels() {
    let sb = Sandbox::new().unwrap();
    let log = sb.path().join("log");
    let cmd = sb.tty_cmd(&[
        "run",
        "three-logged",
        "-b",
        "three",
        "-i",
        &format!("log={}", log.display()),
    ]);
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    p.exp_string("[Step 3/3] three\r\n").unwrap();
    p.exp_string("Type: command").unwrap();
    p.send_line("a").unwrap();
    p.exp_string("Workflow cancelled.").unwrap();
    p.exp_eof().unwrap();
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "one\ntwo\n");
}

#[test]
fn missing_required_inputs_are_asked_for_on_a_terminal() {
    let sb = Sandbox::new().unwrap();
    let out = sb.path().join("out");
    let cmd = sb.tty_cmd(&["run", "pick-env", "-i", &format!("out={}", out.display())]);
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    p.exp_string("Input environment: Where to deploy").unwrap();
    p.exp_string("2) staging").unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("qa").unwrap();
    p.exp_string("invalid: value \"qa\" not in allowed values [dev staging prod]; try again")
        .unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("2").unwrap();
    p.exp_string("Workflow completed.").unwrap();
    p.exp_eof().unwrap();
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "deploying to staging\n"
    );
}

#[test]
fn without_a_terminal_missing_inputs_are_a_user_error_with_an_example() {
    let sb = Sandbox::new().unwrap();
    let r = sb.run(&["run", "pick-env"]).unwrap();
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("USER.INPUT.VALIDATION_FAILED"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("--input environment=<value> --input out=<value>"),
        "{}",
        r.stderr
    );
}
