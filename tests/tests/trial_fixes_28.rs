//! Shell-injection holes in `shell_quote` found by a breaker on the release build: values in
//! `#` comments, comment prose read as live text, ANSI-C strings `$'…'`, values nested in
//! backticks, and the dry-run plan of a shell `script_file:`, over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

/// A workflow with one string input `s` (and `a`, defaulted) and one step running `command`.
fn workflow(mode: bool, command: &str) -> String {
    let mode = if mode { "shell_quote: true\n" } else { "" };
    format!(
        "name: sq\n{mode}inputs:\n  - {{name: a, type: string, default: x}}\n  - {{name: s, type: string}}\nstates:\n  initial: p\n  p:\n    type: step\n    command: |\n      {}\n    on_success: done\n  done: {{type: terminal}}\n",
        command.replace('\n', "\n      ")
    )
}

/// Breaker: a value inside a `#` comment ended the comment at its line break and ran the
/// rest (with `{{shell_quote .inputs.s}}`, and under `shell_quote: true` with plain
/// `{{.inputs.s}}`). Its line breaks now become spaces; validate notes the value.
#[test]
fn a_value_in_a_comment_never_runs_its_second_line() {
    let sb = Sandbox::new().unwrap();
    let marker = sb.path().join("pwned");
    let value = format!("s=x\ntouch {} #", marker.display());
    for (name, mode, command) in [
        (
            "fn.yaml",
            false,
            "echo start # note: {{shell_quote .inputs.s}}",
        ),
        ("mode.yaml", true, "echo start # note: {{.inputs.s}}"),
        ("plain.yaml", false, "echo start # note: {{.inputs.s}}"),
        (
            "cr.yaml",
            true,
            "echo `echo start # note: {{.inputs.s}}` end",
        ),
    ] {
        sb.write(name, &workflow(mode, command)).unwrap();
        let r = sb
            .run(&["run", name, "-o", "buffered", "-i", &value])
            .unwrap();
        assert_eq!(r.code, 0, "{name}: {}{}", r.stdout, r.stderr);
        assert!(r.stdout.contains("start"), "{name}: {}", r.stdout);
        assert!(!marker.exists(), "{name}: the value's second line ran");
        let v = sb.run(&["validate", name]).unwrap();
        assert_eq!(v.code, 0, "{name}: {}", v.stderr);
        assert!(
            v.stderr
                .contains("note [WORKFLOW.VALIDATION.UNQUOTED_SHELL_VALUE]")
                && v.stderr.contains("into a shell comment"),
            "{name}: {}",
            v.stderr
        );
        // The plan shows the value on the comment's line.
        let d = sb.run(&["run", name, "-i", &value, "--dry-run"]).unwrap();
        assert!(
            d.stdout.contains("note: ") && d.stdout.contains("x touch "),
            "{name}: {}",
            d.stdout
        );
    }
}

/// Breaker: after a value in a comment the rest of the comment line was read as live text,
/// so `don't` opened a phantom string and the next line's value was "quoted" for inside
/// it (`''$(touch …)''`), which ran it; validate said it sat in a single-quoted string.
#[test]
fn a_quote_in_comment_prose_after_a_value_opens_nothing() {
    let sb = Sandbox::new().unwrap();
    let marker = sb.path().join("pwned_c3");
    let command = "# greet {{.inputs.a}} (don't worry)\necho hello {{.inputs.b}}";
    let yaml = |mode: bool| {
        workflow(mode, command).replace("name: s, type: string", "name: b, type: string")
    };
    sb.write("t.yaml", &yaml(true)).unwrap();
    let value = format!("b=$(touch {})", marker.display());
    let r = sb
        .run(&["run", "t.yaml", "-o", "buffered", "-i", &value])
        .unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(!marker.exists(), "the value ran");
    assert!(r.stdout.contains("hello $(touch"), "{}", r.stdout);
    sb.write("u.yaml", &yaml(false)).unwrap();
    let v = sb.run(&["validate", "u.yaml"]).unwrap();
    assert!(
        v.stderr
            .contains("{{.inputs.b}} puts inputs.b into a shell command unquoted"),
        "{}",
        v.stderr
    );
    assert!(!v.stderr.contains("single-quoted"), "{}", v.stderr);
}

/// Breaker: in `$'…'` the walker took `\'` for the end of the string, so a value after it
/// was quoted as a bare word inside the string and its `$( )` ran. A value there is refused
/// (no quoting holds in bash and dash alike) unless it is a plain word, and validate warns.
#[test]
fn a_value_inside_an_ansi_c_string_is_refused_unless_plain() {
    let mut sb = Sandbox::new().unwrap();
    // `$'…'` is bash's (dash, a common `/bin/sh`, has none): run the steps with bash
    // whatever shell the test runner has.
    sb.set_env("SHELL", "/bin/bash");
    let marker = sb.path().join("pwned_ansi");
    sb.write(
        "an.yaml",
        &workflow(true, "printf '%s\\n' $'it\\'s {{.inputs.s}}'"),
    )
    .unwrap();
    let value = format!("s=$(touch {})", marker.display());
    let r = sb.run(&["run", "an.yaml", "-i", &value]).unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    assert!(!marker.exists(), "the value ran");
    assert!(
        r.stderr.contains("EXECUTION.TEMPLATE.FAILED")
            && r.stderr.contains("{{.inputs.s}} sits inside $'…'"),
        "{}",
        r.stderr
    );
    let ok = sb
        .run(&["run", "an.yaml", "-o", "buffered", "-i", "s=plain"])
        .unwrap();
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    assert!(ok.stdout.contains("it's plain"), "{}", ok.stdout);
    let v = sb.run(&["validate", "an.yaml"]).unwrap();
    assert!(
        v.stderr
            .contains("warning [WORKFLOW.VALIDATION.UNQUOTED_SHELL_VALUE]")
            && v.stderr.contains("inside $'…'"),
        "{}",
        v.stderr
    );
}

/// Sibling holes: a value in `"…"` or `$( )` nested in backticks had its backticks left as
/// they were, so one in the value ended the substitution and ran the rest; a here-document
/// line joined to the one before by `\` was taken for its end.
#[test]
fn values_nested_in_backticks_and_joined_heredoc_lines_stay_quoted() {
    let sb = Sandbox::new().unwrap();
    let marker = sb.path().join("pwned_bt");
    let value = format!("s=`;touch {};`", marker.display());
    for (name, command) in [
        ("dq.yaml", "echo `echo \"{{.inputs.s}}\"`"),
        ("sub.yaml", "echo `echo $(echo {{.inputs.s}})`"),
    ] {
        sb.write(name, &workflow(true, command)).unwrap();
        let r = sb
            .run(&["run", name, "-o", "buffered", "-i", &value])
            .unwrap();
        assert_eq!(r.code, 0, "{name}: {}{}", r.stdout, r.stderr);
        assert!(!marker.exists(), "{name}: the value ran");
        assert!(r.stdout.contains(";touch "), "{name}: {}", r.stdout);
    }
    let value = format!("s=$(touch {})", marker.display());
    sb.write(
        "hd.yaml",
        &workflow(
            true,
            "cat <<EOF\nx \\\nEOF\n{{.inputs.a}}\nEOF\necho {{.inputs.s}}",
        ),
    )
    .unwrap();
    let r = sb
        .run(&["run", "hd.yaml", "-o", "buffered", "-i", &value])
        .unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(!marker.exists(), "the value ran");
}

/// Breaker: `awf run --dry-run` showed a shell `script_file:` filled in without the quoting
/// `shell_quote: true` applies when it runs; a script for another interpreter is shown as
/// written, as it runs.
#[test]
fn the_dry_run_shows_a_shell_script_quoted_as_it_will_run() {
    let sb = Sandbox::new().unwrap();
    sb.write("s.sh", "#!/bin/sh\necho \"in script: {{.inputs.v}}\"\n")
        .unwrap();
    sb.write("p.py", "#!/usr/bin/env python3\nprint(\"{{.inputs.v}}\")\n")
        .unwrap();
    let wf = |script: &str| {
        format!(
            "name: sq\nshell_quote: true\ninputs:\n  - {{name: v, type: string}}\nstates:\n  initial: p\n  p: {{type: step, script_file: {script}, on_success: done}}\n  done: {{type: terminal}}\n"
        )
    };
    sb.write("sq.yaml", &wf("s.sh")).unwrap();
    sb.write("py.yaml", &wf("p.py")).unwrap();
    let d = sb
        .run(&["run", "sq.yaml", "-i", "v=$(echo INJECTED)", "--dry-run"])
        .unwrap();
    assert_eq!(d.code, 0, "{}", d.stderr);
    assert!(
        d.stdout
            .contains("echo \"in script: \"'$(echo INJECTED)'\"\""),
        "{}",
        d.stdout
    );
    let r = sb
        .run(&[
            "run",
            "sq.yaml",
            "-o",
            "buffered",
            "-i",
            "v=$(echo INJECTED)",
        ])
        .unwrap();
    assert!(
        r.stdout.contains("in script: $(echo INJECTED)"),
        "{}",
        r.stdout
    );
    let d = sb
        .run(&["run", "py.yaml", "-i", "v=$(echo INJECTED)", "--dry-run"])
        .unwrap();
    assert!(
        d.stdout.contains("print(\"$(echo INJECTED)\")"),
        "{}",
        d.stdout
    );
}
