//! Breaker (h4), over the real binary under bash and dash (`SHELL=/bin/bash`,
//! `SHELL=/bin/sh`):
//!
//! 1. Under `shell_quote: true`, a value inside `$( … )` or backticks in an unquoted
//!    here-document's body was pasted as here-document text (only `\ $ `` escaped), so
//!    `;`, quotes and line breaks in it ran as shell code (over `awf run` and HTTP alike),
//!    and `awf validate` misread the place the same way.
//! 2. A `script_file:` whose `#!` names an interpreter awf did not recognise (`rbash`,
//!    `bash5`, `fish`) or reaches it through a wrapper (`nice bash`, `nohup bash`,
//!    `setsid bash`, `env -S nice bash`) was filled in unquoted.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Run;
use awf_tests::Sandbox;
use awf_tests::http_serve::sandbox_with;
use awf_tests::http_serve::start;
use awf_tests::http_serve::start_run;
use awf_tests::http_serve::wait_status;

const BOTH: [&str; 2] = ["/bin/bash", "/bin/sh"];

/// The text a command shape prints for a value.
type Prints = fn(&str) -> String;

/// The command shapes of item 1 (`V` stands for `{{.inputs.v}}`), each with the text it
/// prints for a value: every one in a here-document's `$( )` or backticks.
const SHAPES: &[(&str, Prints)] = &[
    (
        "cat <<EOF\nTitle: $(printf '%s.' V | tr a-z A-Z)\nEOF",
        |v| format!("Title: {}.\n", v.to_ascii_uppercase()),
    ),
    ("cat <<EOF\nT: \"$(printf '%s.' V)\"|\nEOF", |v| {
        format!("T: \"{v}.\"|\n")
    }),
    ("cat <<EOF\nT: $(printf '%s.' \"V\")|\nEOF", |v| {
        format!("T: {v}.|\n")
    }),
    ("cat <<EOF\nT: $(printf '%s.' 'V')|\nEOF", |v| {
        format!("T: {v}.|\n")
    }),
    ("cat <<EOF\nT: `printf '%s.' V`|\nEOF", |v| {
        format!("T: {v}.|\n")
    }),
    ("cat <<-EOF\n\tT: `printf '%s.' 'V'`|\n\tEOF", |v| {
        format!("T: {v}.|\n")
    }),
    ("cat <<-EOF\n\tT: `printf '%s.' \"V\"`|\n\tEOF", |v| {
        format!("T: {v}.|\n")
    }),
    (
        "cat <<EOF\nA $(cat <<EOT\n$(printf '%s.' V)\nEOT\n)|\nEOF",
        |v| format!("A {v}.|\n"),
    ),
    (
        "printf '%s\\n' \"$(cat <<EOF\nT: `printf '%s.' \"V\"`|\nEOF\n)\"",
        |v| format!("T: {v}.|\n"),
    ),
    ("f() {\ncat <<EOF\nT: $(printf '%s.' V)|\nEOF\n}\nf", |v| {
        format!("T: {v}.|\n")
    }),
    (
        "if true; then\ncat <<-EOF\n\tT: `printf '%s.' V`|\n\tEOF\nfi",
        |v| format!("T: {v}.|\n"),
    ),
    (
        "case x in\nx) cat <<EOF\nT: $(printf '%s.' V)|\nEOF\n;;\nesac",
        |v| format!("T: {v}.|\n"),
    ),
];

/// Hostile values (`{M}` is the marker file's path).
const PAYLOADS: &[&str] = &[
    "a; touch {M} #",
    "$(touch {M})",
    "`touch {M}`",
    "x'\ny",
    "EOF\ntouch {M}",
    "\"; touch {M}; echo \"",
    "EOT\ntouch {M}\n\tEOF",
    "x\\\ntouch {M}",
    "it's fine",
];

/// A `shell_quote: true` workflow with the string input `v` whose steps run `commands` in
/// turn (each writes its output to `out<k>.txt`; a failure goes on to the next step).
fn steps_workflow(commands: &[String]) -> String {
    let mut y = String::from(
        "name: t\nshell_quote: true\ninputs:\n  - name: v\n    type: string\nstates:\n  initial: s0\n",
    );
    for (k, c) in commands.iter().enumerate() {
        let next = if k + 1 == commands.len() {
            "done".to_owned()
        } else {
            format!("s{}", k + 1)
        };
        let command = serde_json::to_string(&format!("{{\n{c}\n}} > out{k}.txt")).unwrap();
        y.push_str(&format!(
            "  s{k}:\n    type: step\n    command: {command}\n    on_success: {next}\n    on_failure: {next}\n"
        ));
    }
    y.push_str("  done:\n    type: terminal\n");
    y
}

/// Item 1: every shape under both shells with every hostile value: nothing runs and each
/// step prints the value as it is.
#[test]
fn values_in_a_here_documents_substitutions_never_run_and_arrive_intact() {
    let commands: Vec<String> = SHAPES
        .iter()
        .map(|(s, _)| s.replace('V', "{{.inputs.v}}"))
        .collect();
    let yaml = steps_workflow(&commands);
    for shell in BOTH {
        for payload in PAYLOADS {
            let mut sb = Sandbox::new().unwrap();
            sb.set_env("SHELL", shell);
            let marker = sb.path().join("PWNED");
            let value = payload.replace("{M}", &marker.display().to_string());
            sb.write("wf.yaml", &yaml).unwrap();
            let r = sb
                .run(&["run", "wf.yaml", "-i", &format!("v={value}")])
                .unwrap();
            assert!(
                !marker.exists(),
                "{shell} {payload:?}: ran\n{}{}",
                r.stdout,
                r.stderr
            );
            assert_eq!(r.code, 0, "{shell} {payload:?}: {}{}", r.stdout, r.stderr);
            for (k, (shape, want)) in SHAPES.iter().enumerate() {
                let out = std::fs::read_to_string(sb.path().join(format!("out{k}.txt")))
                    .unwrap_or_default();
                assert_eq!(
                    out,
                    want(&value),
                    "{shell} {payload:?} in {shape:?}\n{}",
                    r.stderr
                );
            }
        }
    }
}

/// The breaker's workflow as written, under both shells: the value is one word in
/// `$(echo … | tr a-z A-Z)`, `--dry-run` shows it single-quoted.
#[test]
fn the_breakers_here_document_workflow_quotes_the_title() {
    let yaml = "name: hd\nshell_quote: true\ninputs: [{name: title, type: string, default: \"\"}]\nstates:\n  initial: s\n  s:\n    type: step\n    command: |\n      cat <<EOF\n      Title: $(echo {{.inputs.title}} | tr a-z A-Z)\n      EOF\n    on_success: done\n  done: {type: terminal}\n";
    for shell in BOTH {
        let mut sb = Sandbox::new().unwrap();
        sb.set_env("SHELL", shell);
        sb.write("hd.yaml", yaml).unwrap();
        let marker = sb.path().join("PWNED");
        let attack = format!("title=x; touch {}; echo y", marker.display());
        let r = sb
            .run(&["run", "hd.yaml", "-o", "buffered", "-i", &attack])
            .unwrap();
        assert!(!marker.exists(), "{shell}: ran\n{}{}", r.stdout, r.stderr);
        assert!(
            r.stdout.contains(&format!(
                "Title: X; TOUCH {}; ECHO Y\n",
                marker.display().to_string().to_ascii_uppercase()
            )),
            "{shell}: {}",
            r.stdout
        );
        let r = sb
            .run(&["run", "hd.yaml", "-o", "buffered", "-i", "title=it's fine"])
            .unwrap();
        assert_eq!(r.code, 0, "{shell}: {}{}", r.stdout, r.stderr);
        assert!(
            r.stdout.contains("Title: IT'S FINE\n"),
            "{shell}: {}",
            r.stdout
        );
        let r = sb
            .run(&["run", "hd.yaml", "--dry-run", "-i", &attack])
            .unwrap();
        assert!(
            r.stdout.contains(&format!(
                "Title: $(echo 'x; touch {}; echo y' | tr a-z A-Z)",
                marker.display()
            )),
            "{}",
            r.stdout
        );
    }
}

/// Where no quoting helps (the value as the here-document's own text, or an inner
/// here-document's, holding its delimiter line), the step is refused and nothing runs.
#[test]
fn a_value_that_would_end_a_here_document_is_refused() {
    for (command, payload) in [
        ("cat <<EOF\nT: {{.inputs.v}}\nEOF", "x\nEOF\ntouch {M}"),
        ("cat <<EOF\nE{{.inputs.v}}F\n$(id)\nEOF", "O"),
        (
            "cat <<EOF\nA $(cat <<EOT\n{{.inputs.v}}\nEOT\n)\nEOF",
            "EOT\ntouch {M}",
        ),
        (
            "cat <<EOF\nA $(cat <<EOT\n{{.inputs.v}}\nEOT\n)\nEOF",
            "x\nEOF\ntouch {M}",
        ),
    ] {
        for shell in BOTH {
            let mut sb = Sandbox::new().unwrap();
            sb.set_env("SHELL", shell);
            let marker = sb.path().join("PWNED");
            let value = payload.replace("{M}", &marker.display().to_string());
            sb.write("wf.yaml", &steps_workflow(&[command.to_owned()]))
                .unwrap();
            let r = sb
                .run(&["run", "wf.yaml", "-i", &format!("v={value}")])
                .unwrap();
            assert!(!marker.exists(), "{shell} {command:?}: ran");
            let text = format!("{}{}", r.stdout, r.stderr);
            assert!(
                text.contains("✗ s0 (")
                    && text.contains("): interpolate command: template error")
                    && text.contains("which would end the here-document"),
                "{shell} {command:?}: {text}"
            );
            // The step's command never ran (its redirection made no file).
            assert!(!sb.path().join("out0.txt").exists());
        }
    }
}

/// Over HTTP, a value with line breaks, quotes and the delimiter line: the run completes,
/// nothing in the value runs, and it arrives intact.
#[test]
fn over_http_a_newline_value_in_a_here_documents_substitution_stays_a_value() {
    let yaml = "name: hd\nshell_quote: true\ninputs: [{name: title, type: string}]\nstates:\n  initial: s\n  s:\n    type: step\n    command: |\n      cat > out.txt <<EOF\n      Title: $(printf '%s.' {{.inputs.title}} | tr a-z A-Z)\n      EOF\n    on_success: done\n  done: {type: terminal}\n";
    let sb = sandbox_with(&[("hd", yaml)]);
    let s = start(&sb, &[]);
    let marker = sb.path().join("pwned");
    let title = format!("x'\nEOF\ntouch {}\n'", marker.display());
    let body = serde_json::json!({"inputs": {"title": title}}).to_string();
    let id = start_run(&s, "hd", &body);
    wait_status(&s, &id, "completed");
    assert!(!marker.exists());
    // The steps run in the server's directory, the sandbox's.
    let out = std::fs::read_to_string(sb.path().join("out.txt")).unwrap();
    assert_eq!(out, format!("Title: {}.\n", title.to_ascii_uppercase()));
}

/// `awf validate` reads the place as command text: without the mode it warns with a fix that
/// holds (a variable assigned before the here-document); under the mode it says nothing.
#[test]
fn validate_reads_a_here_documents_substitution_as_command_text() {
    let sb = Sandbox::new().unwrap();
    let yaml = |mode: bool| {
        format!(
            "name: hd\nshell_quote: {mode}\ninputs: [{{name: title, type: string}}]\nstates:\n  initial: s\n  s:\n    type: step\n    command: |\n      cat <<EOF\n      Title: $(echo {{{{.inputs.title}}}} | tr a-z A-Z)\n      EOF\n    on_success: done\n  done: {{type: terminal}}\n"
        )
    };
    sb.write("off.yaml", &yaml(false)).unwrap();
    sb.write("on.yaml", &yaml(true)).unwrap();
    let r = sb.run(&["validate", "off.yaml"]).unwrap();
    assert!(
        r.stderr.contains("warning [WORKFLOW.VALIDATION.UNQUOTED_SHELL_VALUE]")
            && r.stderr.contains(
                "inside $( ) or backticks within a here-document (<<EOF): the shell reads it there as command text"
            )
            && r.stderr.contains(
                "Hint: assign it before the here-document (v={{shell_quote .inputs.title}}) and write \"$v\" in its place"
            ),
        "{}",
        r.stderr
    );
    let r = sb.run(&["validate", "on.yaml"]).unwrap();
    assert!(!r.stderr.contains("warning"), "{}", r.stderr);
}

/// A `shell_quote: true` workflow running `greet.sh` with the string input `x`.
const SCRIPT_WF: &str = "name: sf\nshell_quote: true\ninputs: [{name: x, type: string}]\nstates:\n  initial: s\n  s:\n    type: step\n    script_file: greet.sh\n    on_success: done\n  done: {type: terminal}\n";

/// Runs `greet.sh` (`#!` line `shebang`, then `echo "hello {{.inputs.x}}"`) with a hostile
/// `x`; the run and whether the marker file appeared.
fn run_script(shebang: &str, args: &[&str]) -> (Run, bool, String) {
    let sb = Sandbox::new().unwrap();
    let marker = sb.path().join("PWNED_SF");
    let value = format!("\"; touch {}; echo \"", marker.display());
    sb.write("sf.yaml", SCRIPT_WF).unwrap();
    let script = sb
        .write(
            "greet.sh",
            &format!("{shebang}\necho \"hello {{{{.inputs.x}}}}\"\n"),
        )
        .unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&script)
        .status()
        .unwrap();
    let mut all = vec!["run", "sf.yaml", "-o", "buffered"];
    all.extend_from_slice(args);
    let input = format!("x={value}");
    all.extend_from_slice(&["-i", &input]);
    let r = sb.run(&all).unwrap();
    (r, marker.exists(), value)
}

/// Item 2: wrappers are looked through to the shell, an unknown shell counts as shell.
#[test]
fn scripts_run_through_wrappers_or_unknown_shells_have_their_values_quoted() {
    for shebang in [
        "#!/bin/rbash",
        "#!/usr/bin/nice bash",
        "#!/usr/bin/nohup bash",
        "#!/usr/bin/setsid bash",
        "#!/usr/bin/env -S nice bash",
        "#!/usr/bin/env -S timeout 60 bash",
    ] {
        let (r, pwned, value) = run_script(shebang, &[]);
        assert!(!pwned, "{shebang}: ran\n{}{}", r.stdout, r.stderr);
        assert_eq!(r.code, 0, "{shebang}: {}{}", r.stdout, r.stderr);
        assert!(
            r.stdout.contains(&format!("hello {value}\n")),
            "{shebang}: {}",
            r.stdout
        );
    }
    // Interpreters not installed here: the plan shows the value quoted as for a shell.
    for shebang in ["#!/bin/bash5", "#!/usr/local/bin/frobsh -e"] {
        let (r, _, value) = run_script(shebang, &["--dry-run"]);
        assert!(
            r.stdout.contains(&format!("echo \"hello \"'{value}'\"\"")),
            "{shebang}: {}",
            r.stdout
        );
    }
}

/// Item 2: a fish script (not POSIX quoting) that prints a value is refused under the mode,
/// with a hint; the plan shows it unfilled; validate says so ahead.
#[test]
fn a_fish_script_printing_a_value_is_refused_under_shell_quote() {
    let (r, pwned, _) = run_script("#!/usr/bin/fish", &[]);
    assert!(!pwned);
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let text = format!("{}{}", r.stdout, r.stderr);
    assert!(
        text.contains("[EXECUTION.TEMPLATE.FAILED]")
            && text.contains("shell_quote: true cannot quote template values for fish")
            && text.contains("Hint: read the value from its environment variable in the script"),
        "{text}"
    );
    let (r, _, _) = run_script("#!/usr/bin/fish", &["--dry-run"]);
    assert!(
        r.stdout.contains("echo \"hello {{.inputs.x}}\""),
        "{}",
        r.stdout
    );
    let sb = Sandbox::new().unwrap();
    sb.write("sf.yaml", SCRIPT_WF).unwrap();
    sb.write(
        "greet.sh",
        "#!/usr/bin/fish\necho \"hello {{.inputs.x}}\"\n",
    )
    .unwrap();
    let r = sb.run(&["validate", "sf.yaml"]).unwrap();
    assert!(
        r.stderr
            .contains("warning [WORKFLOW.VALIDATION.UNQUOTED_SHELL_VALUE]")
            && r.stderr
                .contains("the script runs with fish: shell_quote: true cannot quote"),
        "{}",
        r.stderr
    );
    sb.write(
        "greet.sh",
        "#!/usr/bin/frob\necho \"hello {{.inputs.x}}\"\n",
    )
    .unwrap();
    let r = sb.run(&["validate", "sf.yaml"]).unwrap();
    assert!(
        r.stderr.contains(
            "awf cannot tell which interpreter runs the script from its #! line (the program \"frob\")"
        ),
        "{}",
        r.stderr
    );
}
