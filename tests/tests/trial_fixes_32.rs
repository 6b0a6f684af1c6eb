//! Shell-injection holes in `shell_quote: true` found by a second breaker round: `case` as a
//! word in `"$( … )"`, here-documents with an empty delimiter, comments right after a
//! backtick, `$'…'` in `"$( … )"`, `env` options in a `script_file:`'s `#!`, bash arithmetic
//! places, and quotes in a template branch not taken, over the real binary under bash and
//! dash (`SHELL=/bin/bash`, `SHELL=/bin/sh`).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Run;
use awf_tests::Sandbox;

/// A `shell_quote: true` workflow with one string input `x` and one step running `command`
/// (as the breaker wrote it: the step's failure also leads to the terminal).
fn workflow(command: &str) -> String {
    format!(
        "name: t\nshell_quote: true\ninputs:\n  - name: x\n    type: string\nstates:\n  initial: s\n  s:\n    type: step\n    command: |\n      {}\n    on_success: done\n    on_failure: done\n  done:\n    type: terminal\n",
        command.replace('\n', "\n      ")
    )
}

/// Runs `command` with `x` set to `value` (`{M}` in it is the marker file's path) under
/// `shell`: the run and whether the marker file was created.
fn attempt(shell: &str, command: &str, value: &str) -> (Run, bool) {
    let mut sb = Sandbox::new().unwrap();
    sb.set_env("SHELL", shell);
    let marker = sb.path().join("PWNED");
    let value = value.replace("{M}", &marker.display().to_string());
    sb.write("wf.yaml", &workflow(command)).unwrap();
    let r = sb
        .run(&[
            "run",
            "wf.yaml",
            "-o",
            "buffered",
            "-i",
            &format!("x={value}"),
        ])
        .unwrap();
    (r, marker.exists())
}

/// Runs `command` with `value` under `shell` and asserts the value was refused (it did not
/// run; the error says no quoting protects it); `what` labels the failures.
fn assert_refused(shell: &str, command: &str, value: &str, what: &str) {
    let (r, pwned) = attempt(shell, command, value);
    assert!(!pwned, "{what}: ran\n{}{}", r.stdout, r.stderr);
    assert!(
        format!("{}{}", r.stdout, r.stderr).contains("where no quoting protects it"),
        "{what}: {}{}",
        r.stdout,
        r.stderr
    );
}

/// `awf validate`'s stderr for a workflow running `command`.
fn validate_stderr(command: &str) -> String {
    let sb = Sandbox::new().unwrap();
    sb.write("wf.yaml", &workflow(command)).unwrap();
    sb.run(&["validate", "wf.yaml"]).unwrap().stderr
}

const P: &str = "$(touch {M})";
const BOTH: [&str; 2] = ["/bin/bash", "/bin/sh"];

/// Item 1: the word `case` anywhere in `"$( … )"` kept the walker inside the `$( )`, so the
/// value was single-quoted inside `"…"` and ran.
#[test]
fn the_word_case_in_a_substitution_no_longer_lets_a_value_run() {
    for shell in BOTH {
        for command in [
            "echo \"$(echo case) {{.inputs.x}}\"",
            "echo \"$(cat case.txt 2>/dev/null) and {{.inputs.x}}\"",
        ] {
            let (r, pwned) = attempt(shell, command, P);
            assert!(!pwned, "{shell} {command}: ran\n{}{}", r.stdout, r.stderr);
            assert!(
                r.stdout.contains("$(touch "),
                "{shell} {command}: {}",
                r.stdout
            );
        }
        // A real `case` still works.
        let (r, pwned) = attempt(
            shell,
            "echo \"$(case a in a) echo in;; esac) {{.inputs.x}}\"",
            P,
        );
        assert!(
            !pwned && r.stdout.contains("in $(touch "),
            "{shell}: {}",
            r.stdout
        );
    }
}

/// Item 2: `<<''` (the body ends at the first empty line) was not read as a here-document,
/// so `it's` in its body opened a phantom string.
#[test]
fn a_here_document_with_an_empty_delimiter_is_read_as_one() {
    for shell in BOTH {
        for command in [
            "cat <<''\nit's\n\necho \"{{.inputs.x}}\"",
            "cat <<\"\"\nit's\n\necho \"{{.inputs.x}}\"",
        ] {
            let (r, pwned) = attempt(shell, command, P);
            assert!(!pwned, "{shell} {command}: ran\n{}{}", r.stdout, r.stderr);
            assert!(r.stdout.contains("it's"), "{shell}: {}", r.stdout);
            assert!(r.stdout.contains("$(touch "), "{shell}: {}", r.stdout);
        }
    }
}

/// Item 3: a `#` right after a backtick starts a comment; the value's line break ended it.
#[test]
fn a_value_in_a_comment_right_after_a_backtick_stays_in_it() {
    for shell in BOTH {
        let (r, pwned) = attempt(shell, "echo start `#{{.inputs.x}}` end", "a\ntouch {M} #");
        assert!(!pwned, "{shell}: ran\n{}{}", r.stdout, r.stderr);
        assert!(r.stdout.contains("start end"), "{shell}: {}", r.stdout);
    }
}

/// Item 4: `$'…'` inside `"$( … )"` is an ANSI-C string in bash (`\'` does not end it).
#[test]
fn an_ansi_c_string_inside_a_substitution_in_double_quotes_is_read_as_bash_reads_it() {
    let (r, pwned) = attempt("/bin/bash", "echo \"$(echo $'\\'') {{.inputs.x}}\"", P);
    assert!(!pwned, "ran\n{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("' $(touch "), "{}", r.stdout);
}

/// Item 5: `env` options before the program in a `script_file:`'s `#!` hid the shell, so
/// the values went in raw.
#[test]
fn a_script_run_by_a_shell_through_env_options_has_its_values_quoted() {
    for shebang in [
        "#!/usr/bin/env -S -u X bash",
        "#!/usr/bin/env -S -C /tmp bash",
        "#!/usr/bin/env -Sbash",
    ] {
        let sb = Sandbox::new().unwrap();
        let marker = sb.path().join("PWNED");
        let s = sb
            .write(
                "s.sh",
                &format!("{shebang}\necho \"got {{{{.inputs.x}}}}\"\n"),
            )
            .unwrap();
        let mut perms = std::fs::metadata(&s).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&s, perms).unwrap();
        sb.write(
            "wf.yaml",
            "name: t\nshell_quote: true\ninputs:\n  - {name: x, type: string}\nstates:\n  initial: s\n  s: {type: step, script_file: s.sh, on_success: done, on_failure: done}\n  done: {type: terminal}\n",
        )
        .unwrap();
        let value = format!("x=$(touch {})", marker.display());
        let r = sb
            .run(&["run", "wf.yaml", "-o", "buffered", "-i", &value])
            .unwrap();
        assert!(!marker.exists(), "{shebang}: ran\n{}{}", r.stdout, r.stderr);
        assert!(
            r.stdout.contains("got $(touch "),
            "{shebang}: {}{}",
            r.stdout,
            r.stderr
        );
    }
}

/// Item 6: bash arithmetic places the walker missed ran an array subscript's `$( )`. A
/// value there is refused unless a plain word; validate warns.
#[test]
fn values_in_every_arithmetic_place_are_refused_unless_plain() {
    let evil = "a[$(touch {M})]";
    for command in [
        "{{if true}}[[ {{.inputs.x}} -eq 1 ]]{{end}}",
        "[[ \"]]\" == x || {{.inputs.x}} -eq 1 ]]",
        "echo $[{{.inputs.x}}]",
        "let {{.inputs.x}}",
        "[[ -v {{.inputs.x}} ]]",
        "a[{{.inputs.x}}]=1",
        "declare -i n={{.inputs.x}}",
        "test -v {{.inputs.x}}",
    ] {
        assert_refused("/bin/bash", command, evil, command);
        let v = validate_stderr(command);
        assert!(
            v.contains("UNQUOTED_SHELL_VALUE") && v.contains("arithmetic"),
            "{command}: {v}"
        );
    }
    // A plain number passes.
    let (r, _) = attempt("/bin/bash", "let n={{.inputs.x}}+1; echo n=$n", "41");
    assert!(r.stdout.contains("n=42"), "{}{}", r.stdout, r.stderr);
    // `$[1<<EOF]` is arithmetic to bash but a here-document to dash (h6: dash ran the value
    // quoted as a word after it), so a value after it is refused unless a plain word.
    for shell in BOTH {
        let command = "echo $[1<<EOF]\necho {{.inputs.x}}";
        assert_refused(shell, command, P, command);
        let (r, _) = attempt("/bin/bash", command, "plain-word");
        assert!(r.stdout.contains("plain-word"), "{}{}", r.stdout, r.stderr);
    }
}

/// Item 7: a quote in a template branch not taken counted as open, so the value after it
/// was quoted for the wrong place and ran. After branches that leave the shell quoting
/// uneven, a value is refused unless a plain word; validate names the branch.
#[test]
fn a_value_after_an_uneven_template_branch_is_refused_unless_plain() {
    let command = "echo {{if false}}\"{{end}} {{.inputs.x}}";
    for shell in BOTH {
        assert_refused(shell, command, P, shell);
        let (r, _) = attempt(shell, command, "plain-word");
        assert!(
            r.stdout.contains("plain-word"),
            "{shell}: {}{}",
            r.stdout,
            r.stderr
        );
    }
    let v = validate_stderr(command);
    assert!(
        v.contains("UNQUOTED_SHELL_VALUE") && v.contains("{{if false}}"),
        "{v}"
    );
    // Balanced branches read as before: the value is quoted and printed.
    for shell in BOTH {
        let (r, pwned) = attempt(
            shell,
            "echo {{if false}}\"a\"{{else}}'b'{{end}} {{.inputs.x}}",
            P,
        );
        assert!(
            !pwned && r.stdout.contains("b $(touch "),
            "{shell}: {}{}",
            r.stdout,
            r.stderr
        );
    }
}
