//! Inputs and the environment of steps (defects of an adversarial trial): only the inputs a
//! workflow declares are exported to its commands (AWF exports every string input); remote
//! front-ends refuse undeclared inputs (422 `USER.INPUT.VALIDATION_FAILED` naming the
//! declared ones), `awf run` warns about them; so `BASH_ENV`, `LD_PRELOAD` or `PATH` cannot
//! be set through an input, and an oversized undeclared input no longer makes every step fail
//! with E2BIG.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::http_serve::curl;
use awf_tests::http_serve::json_of;
use awf_tests::http_serve::post;
use awf_tests::http_serve::sandbox_with;
use awf_tests::http_serve::start;
use awf_tests::http_serve::start_run;
use awf_tests::http_serve::wait_status;

/// Writes what it sees of `DECL` and `EXTRA` in its environment to `seen`.
const SHOW: &str = "name: show
inputs:
  - name: DECL
    type: string
    default: none
states:
  initial: look
  look:
    type: step
    command: 'echo \"decl=${DECL-unset} extra=${EXTRA-unset}\" > seen; echo ok'
    on_success: done
  done:
    type: terminal
";

/// The script a hostile `BASH_ENV` points at: it would create `pwned`.
const EVIL: &str = "touch \"$(dirname \"$0\")/pwned\"\n";

#[test]
fn bash_env_as_an_undeclared_input_over_http_is_refused_and_runs_nothing() {
    let sb = sandbox_with(&[("show", SHOW)]);
    let evil = sb.write("evil.sh", EVIL).unwrap();
    let s = start(&sb, &[]);
    let body = serde_json::json!({"inputs": {"BASH_ENV": evil.display().to_string()}});
    let (code, text, ctype) = post(
        &format!("{}/api/workflows/env/show/run", s.base),
        &body.to_string(),
    );
    assert_eq!(code, 422, "{text}");
    assert_eq!(ctype, "application/problem+json", "{text}");
    let v = json_of(&text);
    assert_eq!(v["code"], "USER.INPUT.VALIDATION_FAILED", "{text}");
    let detail = v["detail"].as_str().unwrap();
    assert!(detail.contains("'BASH_ENV'"), "{text}");
    // The hint names the inputs the workflow declares.
    assert!(text.contains("DECL"), "{text}");
    // No run was started: none listed, nothing ran.
    let (code, list, _) = curl(&[&format!("{}/api/executions", s.base)]);
    assert_eq!(code, 200, "{list}");
    assert!(!list.contains("\"show\""), "{list}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!sb.path().join("pwned").exists());
    assert!(!sb.path().join("seen").exists());

    // A declared input still reaches the environment over HTTP.
    let id = start_run(&s, "show", r#"{"inputs":{"DECL":"given"}}"#);
    wait_status(&s, &id, "completed");
    let seen = std::fs::read_to_string(sb.path().join("seen")).unwrap();
    assert_eq!(seen.trim(), "decl=given extra=unset");
}

#[test]
fn awf_run_warns_about_an_undeclared_input_and_does_not_export_it() {
    let sb = sandbox_with(&[("show", SHOW)]);
    let evil = sb.write("evil.sh", EVIL).unwrap();
    let r = sb
        .run(&[
            "run",
            "show",
            "--input",
            "DECL=given",
            "--input",
            "EXTRA=x",
            "--input",
            &format!("BASH_ENV={}", evil.display()),
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("input 'EXTRA' is not declared by workflow 'show'"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("input 'BASH_ENV' is not declared by workflow 'show'"),
        "{}",
        r.stderr
    );
    let seen = std::fs::read_to_string(sb.path().join("seen")).unwrap();
    assert_eq!(seen.trim(), "decl=given extra=unset");
    assert!(!sb.path().join("pwned").exists());
}

#[test]
fn an_oversized_undeclared_input_no_longer_breaks_the_steps() {
    let sb = sandbox_with(&[("show", SHOW)]);
    // Through the project configuration: a 140 KB command-line argument is already too long
    // for awf's own exec (128 KiB per string).
    let big = "x".repeat(140 * 1024);
    sb.write(".awf/config.yaml", &format!("inputs:\n  EXTRA: {big}\n"))
        .unwrap();
    let r = sb.run(&["run", "show"]).unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(!r.stderr.contains("Argument list too long"), "{}", r.stderr);
    let seen = std::fs::read_to_string(sb.path().join("seen")).unwrap();
    assert_eq!(seen.trim(), "decl=none extra=unset");
}
