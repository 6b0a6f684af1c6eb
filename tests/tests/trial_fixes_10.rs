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
