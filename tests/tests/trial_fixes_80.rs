//! Fixes of a newcomer's trial of `awf` from README.md alone (helper `fixnew`), over the real
//! binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

/// `awf validate` output, stdout and stderr together.
fn validate(sb: &Sandbox, file: &str, yaml: &str) -> (i32, String) {
    sb.write(file, yaml).unwrap();
    let v = sb.run(&["validate", file]).unwrap();
    (v.code, format!("{}{}", v.stdout, v.stderr))
}

/// Finding 1: a reference that is already an error (a state field that does not exist, a
/// namespace spelled `States`) got an `UNQUOTED_SHELL_VALUE` warning on top, whose hint
/// repeated the typo. It gets the error alone; a good reference still gets the warning.
#[test]
fn a_reference_that_is_an_error_gets_no_unquoted_value_warning() {
    let sb = Sandbox::new().unwrap();
    for (file, reference, error) in [
        (
            "typo.yaml",
            "{{.states.build.Outptu}}",
            "invalid state property \"Outptu\"",
        ),
        (
            "upper.yaml",
            "{{.States.build.Output}}",
            "unknown reference type \"States\"",
        ),
    ] {
        let yaml = format!(
            "name: t\nstates:\n  initial: build\n  build: {{type: step, command: echo hi, on_success: show}}\n  \
             show:\n    type: step\n    command: echo \"got {reference}\"\n    on_success: done\n  \
             done: {{type: terminal}}\n"
        );
        let (code, text) = validate(&sb, file, &yaml);
        assert_eq!(code, 2, "{text}");
        assert!(text.contains(error), "{text}");
        assert!(!text.contains("UNQUOTED_SHELL_VALUE"), "{text}");
    }
    // The same command with a good reference keeps its warning.
    let (code, text) = validate(
        &sb,
        "good.yaml",
        "name: t\nstates:\n  initial: build\n  build: {type: step, command: echo hi, on_success: show}\n  \
         show:\n    type: step\n    command: echo \"got {{.states.build.Output}}\"\n    on_success: done\n  \
         done: {type: terminal}\n",
    );
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("[WORKFLOW.VALIDATION.UNQUOTED_SHELL_VALUE]"),
        "{text}"
    );
}
