//! Fixes of what a new user's trial found, over the real binary: `AWF_WORKFLOWS_PATH` as a
//! colon-separated list (and a warning for an entry that is not a directory); resume hints
//! that can work (an input the failure names as not given, `--yes` for a gate refused for
//! lack of a terminal behind a failure terminal); the 409 of a DELETE of another `awf run`'s
//! run says how to stop it there.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Stdio;

use awf_tests::Sandbox;
use awf_tests::http_serve::add_workflows;
use awf_tests::http_serve::curl;
use awf_tests::http_serve::json_of;
use awf_tests::http_serve::start;
use awf_tests::run_id_in;
use pretty_assertions::assert_eq;

const ECHO: &str = "name: NAME\nstates:\n  initial: a\n  a: {type: step, command: 'echo from NAME', on_success: done}\n  done: {type: terminal}\n";

/// `AWF_WORKFLOWS_PATH=/a:/missing:/b`: each directory is searched in order (the first
/// match wins), and `awf list` / `awf run` warn once about the one that does not exist.
#[test]
fn a_colon_separated_workflows_path_is_searched_in_order_with_a_warning() {
    let mut sb = Sandbox::new().unwrap();
    sb.write("a/both.yaml", &ECHO.replace("NAME", "both-a"))
        .unwrap();
    sb.write("b/both.yaml", &ECHO.replace("NAME", "both-b"))
        .unwrap();
    sb.write("b/only-b.yaml", &ECHO.replace("NAME", "only-b"))
        .unwrap();
    let root = sb.path().to_path_buf();
    let missing = root.join("missing");
    sb.set_env(
        "AWF_WORKFLOWS_PATH",
        &format!(
            "{}:{}:{}",
            root.join("a").display(),
            missing.display(),
            root.join("b").display()
        ),
    );
    let warn = format!(
        "WARN AWF_WORKFLOWS_PATH: {} does not exist; it is skipped\n",
        missing.display()
    );
    let l = sb.run(&["list"]).unwrap();
    assert_eq!(l.code, 0, "{}", l.stderr);
    assert_eq!(l.stderr, warn);
    assert_eq!(
        l.stdout,
        "NAME    SOURCE  VERSION  DESCRIPTION\nboth    env\nonly-b  env\n"
    );
    let r = sb.run(&["run", "only-b", "-o", "buffered"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "from only-b\n");
    assert_eq!(r.stderr.matches("WARN").count(), 1, "{}", r.stderr);
    assert!(r.stderr.starts_with(&warn), "{}", r.stderr);
    let r = sb.run(&["run", "both", "-o", "buffered"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "from both-a\n");
}

/// A single directory that does not exist was silent: `awf list` said only "No workflows
/// found".
#[test]
fn a_workflows_path_that_does_not_exist_is_warned_about() {
    let mut sb = Sandbox::new().unwrap();
    let missing = sb.path().join("nope");
    sb.set_env("AWF_WORKFLOWS_PATH", missing.to_str().unwrap());
    let l = sb.run(&["list"]).unwrap();
    assert_eq!(l.code, 0, "{}", l.stderr);
    assert_eq!(
        l.stderr,
        format!(
            "WARN AWF_WORKFLOWS_PATH: {} does not exist; it is skipped\n",
            missing.display()
        )
    );
}

const OPT: &str = "name: opt\ninputs:\n  - name: opt\n    type: string\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo {{.inputs.opt | default \"none\"}}\n    on_success: done\n  done: {type: terminal}\n";

/// An optional input without default that was not given: the message says so (still an
/// error, as in AWF (Go)), and the resume hint asks for it; following the hint works.
#[test]
fn an_input_not_given_is_named_and_the_resume_hint_asks_for_it() {
    let sb = Sandbox::new().unwrap();
    let wf = sb.write("opt.yaml", OPT).unwrap();
    let r = sb.run(&["run", wf.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let id = run_id_in(&r.stderr).unwrap();
    assert!(
        r.stderr.contains(
            "interpolate command: undefined variable: inputs.opt (input \"opt\" was not given and has no default; pass --input opt=<value>)\n"
        ),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.ends_with(&format!(
            "  Hint: continue it with `awf resume {id} --input opt=<value>`\n"
        )),
        "{}",
        r.stderr
    );
    let again = sb
        .run(&["resume", &id, "--input", "opt=given", "-o", "buffered"])
        .unwrap();
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(again.stdout, "given\n");
}

const GATE: &str = "name: gate\nstates:\n  initial: ship\n  ship:\n    type: step\n    command: echo shipping\n    approval:\n      message: ship it?\n    on_success: done\n    on_failure: failed\n  done: {type: terminal}\n  failed: {type: terminal, status: failure}\n";

/// A gate refused for lack of a terminal and routed to a failure terminal: the hint was
/// `--from ship` alone, which fails the same way; it carries `--yes` now, and works.
#[test]
fn a_gate_refused_without_a_terminal_behind_a_failure_terminal_hints_yes() {
    let sb = Sandbox::new().unwrap();
    let wf = sb.write("gate.yaml", GATE).unwrap();
    let r = sb.run(&["run", wf.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let id = run_id_in(&r.stderr).unwrap();
    assert!(
        r.stderr.ends_with(&format!(
            "  Hint: continue it with `awf resume {id} --from ship --yes`\n"
        )),
        "{}",
        r.stderr
    );
    let again = sb
        .run(&["resume", &id, "--from", "ship", "--yes", "-o", "buffered"])
        .unwrap();
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(again.stdout, "shipping\n");
}

const SLOW: &str = "name: slow\nstates:\n  initial: a\n  a: {type: step, command: 'sleep 3152', on_success: done}\n  done: {type: terminal}\n";

/// `DELETE /api/executions/{id}` of a run a plain `awf run` runs: the 409's hint said
/// "or DELETE … on the `awf serve` running it" though no server runs it; it says to stop it
/// in its terminal now.
#[test]
fn deleting_a_run_of_another_awf_run_hints_its_terminal_only() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("slow", SLOW)]);
    let s = start(&sb, &[]);
    let mut child = sb
        .cmd(&["run", "slow"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    awf_tests::wait_for("`sleep 3152` to start", || {
        sb.processes().iter().any(|p| p.cmdline == "sleep 3152")
    });
    let id = awf_tests::wait_for_state(&sb, "the run to be recorded at a", |v| {
        v["current_state"] == "a" && v["owner_pid"].is_u64()
    });
    let (code, body, _) = curl(&["-X", "DELETE", &format!("{}/api/executions/{id}", s.base)]);
    assert_eq!(code, 409, "{body}");
    let p = json_of(&body);
    assert_eq!(
        p["hints"],
        serde_json::json!([format!(
            "stop it where it runs: Ctrl-C in the terminal of its `awf run` (or `kill -INT {pid}`); the run is recorded `cancelled`"
        )]),
        "{p}"
    );
    let killed = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert_eq!(child.wait().unwrap().code(), Some(130));
}
