//! Approval gates (`approval:` on a step) and the typed interactions over the real binary:
//! asked on a pseudo-terminal (rexpect), refused without one unless `--yes`, remembered
//! `allow_always` in a loop, routed rejections, `awf validate` and `--dry-run` of the key,
//! the transcript's lines, and the breakpoint language now parsed by the terminal.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use pretty_assertions::assert_eq;
use serde_json::json;

const TIMEOUT_MS: u64 = 20_000;

/// `deploy` (gated, appends to `log`) → `done`; a rejection routes to `rejected`.
const GATED: &str = r#"name: gated
inputs:
  - name: target
    default: prod
states:
  initial: deploy
  deploy:
    type: step
    command: echo deployed >> log
    approval: "Deploy to {{.inputs.target}}?"
    on_success: done
    on_failure: rejected
  rejected:
    type: step
    command: echo rejected >> log
    on_success: failed
  failed: {type: terminal, status: failure, message: "not approved"}
  done: {type: terminal}
"#;

/// The same without an on_failure route.
const GATED_UNROUTED: &str = r#"name: gated-unrouted
states:
  initial: deploy
  deploy:
    type: step
    command: echo deployed >> log
    approval: {message: "Ship it?"}
    on_success: done
  done: {type: terminal}
"#;

fn log(sb: &Sandbox) -> String {
    std::fs::read_to_string(sb.path().join("log")).unwrap_or_default()
}

#[test]
fn a_gate_is_asked_on_the_terminal_and_yes_runs_the_step() {
    let sb = Sandbox::new().unwrap();
    sb.write("gated.yaml", GATED).unwrap();
    let cmd = sb.tty_cmd(&["--no-color", "run", "gated.yaml"]);
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    p.exp_string("? Deploy to prod? (deploy) [y/N] ").unwrap();
    p.send_line("maybe").unwrap();
    p.exp_string("invalid: answer y or n; try again").unwrap();
    p.exp_string("[y/N] ").unwrap();
    p.send_line("y").unwrap();
    p.exp_string("Workflow completed.").unwrap();
    p.exp_eof().unwrap();
    assert_eq!(log(&sb), "deployed\n");
}

#[test]
fn no_at_the_prompt_rejects_the_step_and_on_failure_routes_it() {
    let sb = Sandbox::new().unwrap();
    sb.write("gated.yaml", GATED).unwrap();
    let cmd = sb.tty_cmd(&["--no-color", "run", "gated.yaml", "-i", "target=staging"]);
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    p.exp_string("? Deploy to staging? (deploy) [y/N] ")
        .unwrap();
    p.send_line("n").unwrap();
    p.exp_string("approval rejected (reject)").unwrap();
    p.exp_string("not approved").unwrap();
    p.exp_eof().unwrap();
    assert_eq!(log(&sb), "rejected\n");
}

#[test]
fn without_a_terminal_a_gate_is_refused_unless_yes() {
    let sb = Sandbox::new().unwrap();
    sb.write("gated.yaml", GATED_UNROUTED).unwrap();
    let r = sb.run(&["run", "gated.yaml"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains("✗ deploy (")
            && r.stderr
                .contains("approval not asked: no terminal to ask on; pass --yes to approve gates"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("EXECUTION.APPROVAL.REJECTED"),
        "{}",
        r.stderr
    );
    assert_eq!(log(&sb), "", "the step did not run");

    let r = sb
        .run(&["run", "gated.yaml", "--yes", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(doc["states"]["deploy"]["approval"], json!("approve"));
    assert_eq!(log(&sb), "deployed\n");
}

#[test]
fn a_run_refused_at_its_gate_resumes_with_yes() {
    let sb = Sandbox::new().unwrap();
    sb.write("gated.yaml", GATED_UNROUTED).unwrap();
    let r = sb.run(&["run", "gated.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(doc["error"]["code"], json!("EXECUTION.APPROVAL.REJECTED"));
    // Refused for want of a terminal: no option is recorded (not a human rejection).
    assert_eq!(doc["states"]["deploy"]["approval"], json!(null));
    let id = doc["run_id"].as_str().unwrap().to_owned();
    let r = sb.run(&["resume", &id, "--yes"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(log(&sb), "deployed\n");
}

#[test]
fn allow_always_holds_for_the_rest_of_a_loop_and_the_transcript_records_it() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "loop.yaml",
        r#"name: loop
states:
  initial: each
  each:
    type: for_each
    items: '["a", "b", "c"]'
    body: [item]
    on_complete: done
  item:
    type: step
    command: echo {{.loop.Item}} >> log
    approval:
      message: "Write {{.loop.Item}}?"
      options:
        - {id: once, name: Just this one, kind: allow_once}
        - {id: all, name: All of them, kind: allow_always}
        - {id: stop, name: Stop, kind: reject}
  done: {type: terminal}
"#,
    )
    .unwrap();
    let cmd = sb.tty_cmd(&["--no-color", "run", "loop.yaml"]);
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    p.exp_string("? Write a? (item)").unwrap();
    p.exp_string("2) All of them [allow_always]").unwrap();
    p.exp_string("choose a number or an id > ").unwrap();
    p.send_line("1").unwrap();
    p.exp_string("? Write b? (item)").unwrap();
    p.exp_string("choose a number or an id > ").unwrap();
    p.send_line("2").unwrap();
    p.exp_string("Workflow completed.").unwrap();
    p.exp_eof().unwrap();
    assert_eq!(log(&sb), "a\nb\nc\n");
    // The transcript has the two questions and their answers.
    let dir = awf_tests::data(&sb).join("transcripts");
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let asked: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["type"] == json!("approval.required"))
        .collect();
    assert_eq!(asked.len(), 2);
    assert_eq!(asked[1]["payload"]["message"], json!("Write b?"));
    assert_eq!(
        asked[1]["payload"]["options"][1]["kind"],
        json!("allow_always")
    );
    let answers: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["type"] == json!("interaction.resolved"))
        .map(|l| &l["payload"]["answer"]["value"])
        .collect();
    assert_eq!(answers, vec![&json!("once"), &json!("all")]);
}

#[test]
fn an_unanswered_gate_takes_its_on_timeout_decision() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "timed.yaml",
        r#"name: timed
states:
  initial: deploy
  deploy:
    type: step
    command: echo deployed >> log
    approval: {message: "Deploy?", timeout: 1s, on_timeout: approve}
    on_success: announce
  announce:
    type: step
    command: echo announced >> log
    approval: "Announce?"
    on_success: done
  done: {type: terminal}
"#,
    )
    .unwrap();
    let cmd = sb.tty_cmd(&["--no-color", "run", "timed.yaml"]);
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    p.exp_string("? Deploy? (deploy) [y/N] ").unwrap();
    p.exp_string("(no answer in time)").unwrap();
    // The next line typed answers the next question, not the one that timed out.
    p.exp_string("? Announce? (announce) [y/N] ").unwrap();
    p.send_line("y").unwrap();
    p.exp_string("Workflow completed.").unwrap();
    p.exp_eof().unwrap();
    assert_eq!(log(&sb), "deployed\nannounced\n");
}

#[test]
fn validate_checks_the_approval_key() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "bad.yaml",
        r#"name: bad
states:
  initial: a
  a:
    type: step
    command: "true"
    approval:
      message: go?
      timeout: soon
      on_timeout: later
      colour: red
      options:
        - {id: ok, kind: allow_once}
        - {id: no, kind: maybe}
    on_success: done
  done: {type: terminal}
"#,
    )
    .unwrap();
    let r = sb.run(&["validate", "bad.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stdout);
    let text = format!("{}{}", r.stdout, r.stderr);
    for want in [
        "states.a.approval.timeout",
        "states.a.approval.options.1.kind",
        "kind must be allow_once, allow_always, reject_once or reject_always (or allow / reject), got \"maybe\"",
        "on_timeout \"later\" names no option",
        "unknown field \"colour\" in approval",
        "has no option that rejects the step",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    sb.write("good.yaml", GATED).unwrap();
    let r = sb.run(&["validate", "good.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
}

#[test]
fn dry_run_shows_the_gate() {
    let sb = Sandbox::new().unwrap();
    sb.write("gated.yaml", GATED).unwrap();
    let r = sb.run(&["run", "gated.yaml", "--dry-run"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("Approval: \"Deploy to prod?\" [approve (allow_once), reject (reject_once)]"),
        "{}",
        r.stdout
    );
    let r = sb
        .run(&["run", "gated.yaml", "--dry-run", "-f", "json"])
        .unwrap();
    let doc = r.json().unwrap();
    let deploy = doc["states"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == json!("deploy"))
        .unwrap()
        .clone();
    assert_eq!(deploy["approval"]["options"][0]["id"], json!("approve"));
    assert_eq!(log(&sb), "", "a dry run runs nothing");
}

#[test]
fn unknown_breakpoint_answers_are_explained_by_the_terminal_and_asked_again() {
    let sb = Sandbox::new().unwrap();
    let out = sb.path().join("bp-log");
    let cmd = sb.tty_cmd(&[
        "--no-color",
        "run",
        "three-logged",
        "-b",
        "one",
        "-i",
        &format!("log={}", out.display()),
    ]);
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    p.exp_string("[Step 1/3] one\r\n").unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("zz").unwrap();
    p.exp_string("WARN unknown answer 'zz': use c, s, a, i or e NAME=VALUE")
        .unwrap();
    p.exp_string("[Step 1/3] one\r\n").unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("e log").unwrap();
    p.exp_string("WARN edit needs NAME=VALUE, e.g. `e count=3`")
        .unwrap();
    p.exp_string("[Step 1/3] one\r\n").unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("c").unwrap();
    p.exp_string("Workflow completed.").unwrap();
    p.exp_eof().unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "one\ntwo\nthree\n");
}

#[test]
fn ctrl_c_at_a_missing_input_prompt_ends_awf_with_130_and_records_nothing() {
    let sb = Sandbox::new().unwrap();
    let out = sb.path().join("out");
    let cmd = sb.tty_cmd(&["run", "pick-env", "-i", &format!("out={}", out.display())]);
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    p.exp_string("Input environment: Where to deploy").unwrap();
    p.exp_string("> ").unwrap();
    p.send_control('c').unwrap();
    p.exp_eof().unwrap();
    // nix's `WaitStatus` (not re-exported by rexpect), e.g. `Exited(Pid(12), 130)`.
    let status = format!("{:?}", p.process().wait().unwrap());
    assert!(
        status.starts_with("Exited(") && status.ends_with(", 130)"),
        "{status}"
    );
    assert!(!out.exists());
    for dir in ["states", "transcripts"] {
        let recorded = std::fs::read_dir(awf_tests::data(&sb).join(dir))
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(
            recorded, 0,
            "a run that never started is not recorded ({dir})"
        );
    }
}

#[test]
fn a_dry_run_on_a_terminal_still_asks_for_missing_inputs() {
    let sb = Sandbox::new().unwrap();
    let cmd = sb.tty_cmd(&["run", "pick-env", "--dry-run", "-i", "out=x"]);
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    p.exp_string("Input environment: Where to deploy").unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("qa").unwrap();
    p.exp_string("invalid: value \"qa\" not in allowed values [dev staging prod]; try again")
        .unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("3").unwrap();
    p.exp_string("environment: prod").unwrap();
    p.exp_eof().unwrap();
}

#[test]
fn gates_of_parallel_branches_are_asked_one_after_the_other() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "par.yaml",
        r#"name: par
states:
  initial: both
  both:
    type: parallel
    parallel: [left, right]
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
  done: {type: terminal}
"#,
    )
    .unwrap();
    let cmd = sb.tty_cmd(&["--no-color", "run", "par.yaml"]);
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    // Both branches ask at once; each question gets its own answer.
    let first = p
        .exp_regex(r"\? (Left|Right)\? \((left|right)\) \[y/N\] ")
        .unwrap()
        .1;
    p.send_line("y").unwrap();
    let second = p
        .exp_regex(r"\? (Left|Right)\? \((left|right)\) \[y/N\] ")
        .unwrap()
        .1;
    assert_ne!(first, second);
    p.send_line("n").unwrap();
    p.exp_string("Workflow completed.").unwrap();
    p.exp_eof().unwrap();
    let approved = if first.contains("left") {
        "left\n"
    } else {
        "right\n"
    };
    assert_eq!(log(&sb), approved);
}

#[test]
fn a_missing_input_asked_on_the_terminal_is_in_the_transcript_before_the_run_starts() {
    let sb = Sandbox::new().unwrap();
    let out = sb.path().join("out");
    let cmd = sb.tty_cmd(&["run", "pick-env", "-i", &format!("out={}", out.display())]);
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("dev").unwrap();
    p.exp_string("Workflow completed.").unwrap();
    p.exp_eof().unwrap();
    let dir = awf_tests::data(&sb).join("transcripts");
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let head: Vec<(&str, u64)> = lines
        .iter()
        .take(3)
        .map(|l| (l["type"].as_str().unwrap(), l["seq"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        head,
        vec![
            ("input.required", 1),
            ("interaction.resolved", 2),
            ("run.started", 3)
        ]
    );
    assert_eq!(lines[0]["payload"]["input"], json!("environment"));
    assert_eq!(lines[1]["payload"]["answer"]["value"], json!("dev"));
}

#[test]
fn ctrl_c_at_a_hidden_secret_prompt_cancels_cleanly_with_130() {
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
    // Echo and signals are off while the secret is read: Ctrl-C arrives as a character.
    p.send_control('c').unwrap();
    p.send_line("").unwrap();
    p.exp_eof().unwrap();
    let status = format!("{:?}", p.process().wait().unwrap());
    assert!(
        status.starts_with("Exited(") && status.ends_with(", 130)"),
        "{status}"
    );
    assert_eq!(log(&sb), "");
    // Nothing is left behind: no run record, no lock.
    for dir in ["states", "transcripts", "locks"] {
        let left = std::fs::read_dir(awf_tests::data(&sb).join(dir))
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(left, 0, "{dir}");
    }
}
