//! End-to-end tests of issue 14's "beyond every peer" features over the built binary: safe
//! shell interpolation (`shell_quote`), budgets, `fallback_providers:` and usage limits,
//! the agent cases against the scripted LLM (tests/mock-llm).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use awf_tests::workspace_root;
use pretty_assertions::assert_eq;

fn sandbox() -> Sandbox {
    Sandbox::new().expect("sandbox")
}

// ---- safe shell interpolation ----------------------------------------------------------------

const HOSTILE: &str = "it's; touch $TMPDIR/pwned #";

fn safe_shell_text() -> String {
    std::fs::read_to_string(workspace_root().join("workflows/safe-shell.yaml")).unwrap()
}

#[test]
fn a_hostile_input_runs_nothing_under_shell_quote() {
    let mut sb = sandbox();
    let tmp = sb.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    sb.set_env("TMPDIR", &tmp.display().to_string());
    let wf = workspace_root().join("workflows/safe-shell.yaml");
    let r = sb
        .run(&[
            "run",
            &wf.display().to_string(),
            "-f",
            "json",
            "-i",
            &format!("message={HOSTILE}"),
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!tmp.join("pwned").exists(), "the input ran as shell code");
    let doc = r.json().unwrap();
    assert_eq!(doc["states"]["echo"]["output"], format!("{HOSTILE}\n"));
    assert_eq!(
        doc["states"]["count"]["output"],
        HOSTILE.chars().count().to_string()
    );
}

#[test]
fn the_same_input_runs_as_shell_code_without_shell_quote() {
    // Proves the test above can fail: the same workflow without the mode is injectable.
    let mut sb = sandbox();
    let tmp = sb.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    sb.set_env("TMPDIR", &tmp.display().to_string());
    let text = safe_shell_text().replace("shell_quote: true", "shell_quote: false");
    let wf = sb.write("unsafe.yaml", &text).unwrap();
    let _ = sb
        .run(&[
            "run",
            &wf.display().to_string(),
            "-i",
            &format!("message={HOSTILE}"),
        ])
        .unwrap();
    assert!(tmp.join("pwned").exists(), "the unquoted input did not run");
}

#[test]
fn validate_warns_about_unquoted_values_with_the_fix_in_the_hint() {
    let sb = sandbox();
    let text = safe_shell_text().replace("shell_quote: true\n", "");
    let wf = sb.write("unsafe.yaml", &text).unwrap();
    let r = sb
        .run(&["validate", &wf.display().to_string(), "-f", "json"])
        .unwrap();
    assert_eq!(
        r.code, 0,
        "a warning is not an error: {}{}",
        r.stdout, r.stderr
    );
    let doc = r.json().unwrap();
    let text = doc.to_string();
    assert!(
        text.contains("WORKFLOW.VALIDATION.UNQUOTED_SHELL_VALUE"),
        "{doc:#}"
    );
    assert!(text.contains("{{shell_quote .inputs.message}}"), "{doc:#}");
    let quoted = sb.write("safe.yaml", &safe_shell_text()).unwrap();
    let r = sb
        .run(&["validate", &quoted.display().to_string(), "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        !r.stdout.contains("UNQUOTED_SHELL_VALUE"),
        "shell_quote: true leaves nothing to warn about: {}",
        r.stdout
    );
}
