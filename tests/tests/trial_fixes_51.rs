//! Breaker (h6), over the real binary under bash and dash (`SHELL=/bin/bash`,
//! `SHELL=/bin/sh`): under `shell_quote: true` the shell-syntax walker read some command
//! texts differently from the shells, so a value was quoted for the wrong place and ran:
//!
//! 1. `let x=1<<2`, `declare -i y=1<<2`, `test -v HOME <<EOF`: the `<<` was taken for a
//!    shift, where both shells open a here-document (the next line is its body).
//! 2. Here-document delimiters: `<<E\\OF` (the shell's delimiter is `E\OF`), `<<$'EOF'`
//!    (bash: `EOF`, dash: `$EOF`), `<<"E\"OF"` (a confusing template parse error).
//! 3. A here-document announced in backticks or a `$( )` that closes on its line.
//! 4. A `case` pattern that is the word `case`.
//! 5. `awf validate` warned about none of them.
//! 6. `{{(index .states "b").ExitCode}}` of a skipped branch said only `undefined variable`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

const BOTH: [&str; 2] = ["/bin/bash", "/bin/sh"];

/// The breaker's workflow: `shell_quote: true`, the string input `x`, one step running
/// `body`.
fn breaker_workflow(body: &str) -> String {
    let indented: String = body.lines().map(|l| format!("      {l}\n")).collect();
    format!(
        "name: t\nshell_quote: true\ninputs:\n  - name: x\n    type: string\n    default: ''\nstates:\n  initial: s\n  s:\n    type: step\n    command: |\n{indented}    on_success: ok\n  ok: {{ type: terminal, status: success }}\n"
    )
}

/// The breaker's command bodies (`V` stands for `{{.inputs.x}}`).
const BREAKER_BODIES: &[&str] = &[
    "let x=1<<2\necho V\n2\necho done",
    "declare -i y=1<<2\necho V\n2",
    "cat <<E\\\\OF\nE\\OF\necho V",
    "cat <<$'EOF'\nEOF\necho V\n$EOF",
    "cat <<$'EOF'\n$EOF\necho V\nEOF",
    "echo \"$(cat <<EOF)\"\necho V\nEOF",
    "echo `cat <<EOF`\necho V\nEOF",
    "test -v HOME <<EOF\necho V\nEOF",
    "cat <<\"E\\\"OF\"\nE\"OF\necho V",
    "echo \"$(case a in\n  b) echo;;\n  case) echo;;\nesac)\" V",
    "case \"$1\" in\n  case|esac) echo kw;;\n  *) echo other;;\nesac; echo V",
];

/// Hostile values (`{M}` is the marker file's path).
const PAYLOADS: &[&str] = &[
    "$(touch {M})",
    "x; touch {M}",
    "x\ntouch {M}",
    "2\ntouch {M}",
    "EOF\ntouch {M}",
    "x\nE\\OF\n$(touch {M})",
    "`touch {M}`",
];

/// Items 1 to 4: each of the breaker's workflows with each hostile value under both shells:
/// the marker file never appears (the value is quoted for where the shell reads it, or
/// refused).
#[test]
fn the_breakers_workflows_never_run_the_value() {
    for shell in BOTH {
        let mut sb = Sandbox::new().unwrap();
        sb.set_env("SHELL", shell);
        let marker = sb.path().join("PWNED");
        for (k, body) in BREAKER_BODIES.iter().enumerate() {
            let file = format!("b{k}.yaml");
            sb.write(
                &file,
                &breaker_workflow(&body.replace('V', "{{.inputs.x}}")),
            )
            .unwrap();
            for payload in PAYLOADS {
                let value = payload.replace("{M}", &marker.display().to_string());
                let r = sb
                    .run(&["run", &file, "-i", &format!("x={value}")])
                    .unwrap();
                assert!(
                    !marker.exists(),
                    "{shell} {body:?} {payload:?}: ran\n{}{}",
                    r.stdout,
                    r.stderr
                );
            }
        }
    }
}

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

/// The text a command shape prints for a value.
type Prints = fn(&str) -> String;

/// Command shapes awf now reads as the shells do (`V` stands for `{{.inputs.v}}`), with
/// what each prints.
const READ_RIGHT: &[(&str, Prints)] = &[
    ("let x=1<<2\nV\n2\nprintf '%s|' V", |v| format!("{v}|")),
    ("declare -i y=1<<2\nV\n2\nprintf '%s|' V", |v| {
        format!("{v}|")
    }),
    ("test -v HOME <<EOF\nV\nEOF\nprintf '%s|' V", |v| {
        format!("{v}|")
    }),
    ("cat <<E\\\\OF\nV\nE\\OF\nprintf '%s|' V", |v| {
        format!("{v}\n{v}|")
    }),
    ("cat <<\"E\\\"OF\"\nV\nE\"OF\nprintf '%s|' V", |v| {
        format!("{v}\n{v}|")
    }),
    ("x=`cat <<EOF`\nprintf '%s|' V", |v| format!("{v}|")),
    (
        "printf '%s|' \"$(case a in\n  b) echo;;\n  case) echo;;\nesac)\" V",
        |v| format!("|{v}|"),
    ),
    (
        "case a in\n  case) :;;\n  (esac) :;;\n  a) printf '%s|' V;;\nesac",
        |v| format!("{v}|"),
    ),
];

/// Items 1 to 4: where awf now reads the text as the shells do, each value arrives intact
/// under both shells and nothing in it runs.
#[test]
fn values_arrive_intact_where_the_shells_read_them() {
    let commands: Vec<String> = READ_RIGHT
        .iter()
        .map(|(s, _)| s.replace('V', "{{.inputs.v}}"))
        .collect();
    let yaml = steps_workflow(&commands);
    for shell in BOTH {
        for payload in [
            "$(touch {M})",
            "a; touch {M} #",
            "x'\ny",
            "\"; touch {M}; echo \"",
            "it's fine",
        ] {
            let mut sb = Sandbox::new().unwrap();
            sb.set_env("SHELL", shell);
            let marker = sb.path().join("PWNED");
            let value = payload.replace("{M}", &marker.display().to_string());
            sb.write("wf.yaml", &yaml).unwrap();
            let r = sb
                .run(&["run", "wf.yaml", "-i", &format!("v={value}")])
                .unwrap();
            assert!(!marker.exists(), "{shell} {payload:?}: ran");
            for (k, (shape, want)) in READ_RIGHT.iter().enumerate() {
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

/// Items 2, 3 and 5: where bash and dash read the text differently (a delimiter `$'EOF'`, a
/// here-document announced in a `$( )` that closes on its line, `<<` in `(( ))`), a value
/// after it is refused at run time (unless a plain word) and `awf validate` warns.
#[test]
fn values_after_text_the_shells_read_differently_are_refused_and_warned_about() {
    for (body, place) in [
        (
            "cat <<$'EOF'\nEOF\necho V\n$EOF",
            "after a here-document delimiter written $'…' or $\"…\" (bash reads $'EOF' as EOF, dash as $EOF)",
        ),
        (
            "echo \"$(cat <<EOF)\"\necho V\nEOF",
            "after a here-document announced in a $( ) that closes on its line (bash reads its body from the next lines, dash does not)",
        ),
        (
            "((z=1<<2))\necho V\n2",
            "after << inside (( )), $[ ], a[…]= or a=( ) (a shift to bash, a here-document to dash)",
        ),
    ] {
        let yaml = breaker_workflow(&body.replace('V', "{{.inputs.x}}"));
        for shell in BOTH {
            let mut sb = Sandbox::new().unwrap();
            sb.set_env("SHELL", shell);
            sb.write("wf.yaml", &yaml).unwrap();
            let marker = sb.path().join("PWNED");
            let r = sb
                .run(&[
                    "run",
                    "wf.yaml",
                    "-i",
                    &format!("x=$(touch {})", marker.display()),
                ])
                .unwrap();
            assert!(!marker.exists(), "{shell} {body:?}: ran");
            assert_eq!(r.code, 3, "{shell} {body:?}: {}{}", r.stdout, r.stderr);
            let text = format!("{}{}", r.stdout, r.stderr);
            assert!(
                text.contains("[EXECUTION.TEMPLATE.FAILED]")
                    && text.contains(&format!("shell_quote: the value of {{{{.inputs.x}}}} sits {place}, where no quoting protects it: write that text so that every shell reads it alike")),
                "{shell} {body:?}: {text}"
            );
            let r = sb.run(&["run", "wf.yaml", "-i", "x=plain"]).unwrap();
            assert!(
                !r.stderr.contains("TEMPLATE.FAILED") && !r.stdout.contains("TEMPLATE.FAILED"),
                "{shell} {body:?}: {}{}",
                r.stdout,
                r.stderr
            );
        }
        let sb = Sandbox::new().unwrap();
        sb.write("wf.yaml", &yaml).unwrap();
        let r = sb.run(&["validate", "wf.yaml"]).unwrap();
        assert!(
            r.stderr
                .contains("warning [WORKFLOW.VALIDATION.UNQUOTED_SHELL_VALUE]")
                && r.stderr.contains(&format!(
                    "{{{{.inputs.x}}}} puts inputs.x into a shell command {place}, where no quoting protects it: bash and dash read that text differently"
                )),
            "{body:?}: {}",
            r.stderr
        );
    }
    // Read right now: nothing to warn about under the mode.
    let sb = Sandbox::new().unwrap();
    sb.write(
        "wf.yaml",
        &breaker_workflow("let x=1<<2\necho {{.inputs.x}}\n2"),
    )
    .unwrap();
    let r = sb.run(&["validate", "wf.yaml"]).unwrap();
    assert!(!r.stderr.contains("warning"), "{}", r.stderr);
}

/// Hardening (h6): a value given as a variable name to `read`, `printf -v`, `unset` or
/// `declare` (bash evaluates a subscript there: `read 'a[$(cmd)]'` runs `cmd`) is refused
/// unless it is a plain word, also after a comment line (fuzzing: the command after one was
/// not recognised); validate warns.
#[test]
fn a_value_as_a_variable_name_is_refused() {
    for body in [
        "printf -v V %s x",
        "# set it\nprintf -v V %s x",
        "declare V=1",
        "read -r V < /dev/null || true",
        "declare -i n\nn=V",
    ] {
        let yaml = breaker_workflow(&body.replace('V', "{{.inputs.x}}"));
        let mut sb = Sandbox::new().unwrap();
        sb.set_env("SHELL", "/bin/bash");
        sb.write("wf.yaml", &yaml).unwrap();
        let marker = sb.path().join("PWNED");
        let r = sb
            .run(&[
                "run",
                "wf.yaml",
                "-i",
                &format!("x=a[$(touch {})]", marker.display()),
            ])
            .unwrap();
        assert!(!marker.exists(), "{body:?}: ran");
        let text = format!("{}{}", r.stdout, r.stderr);
        assert!(
            text.contains("[EXECUTION.TEMPLATE.FAILED]")
                && text.contains("sits in shell arithmetic or a variable name")
                && text.contains("where no quoting protects it: pass only numbers there"),
            "{body:?}: {text}"
        );
        let r = sb.run(&["run", "wf.yaml", "-i", "x=v"]).unwrap();
        assert_eq!(r.code, 0, "{body:?}: {}{}", r.stdout, r.stderr);
        let r = sb.run(&["validate", "wf.yaml"]).unwrap();
        assert!(
            r.stderr.contains("in shell arithmetic or a variable name"),
            "{body:?}: {}",
            r.stderr
        );
    }
}

/// Item 6: a skipped parallel branch read through `index` gets the same explanation as
/// `.states.b.ExitCode`.
#[test]
fn a_skipped_branchs_exit_code_read_through_index_is_explained() {
    let yaml = r#"name: skipped
states:
  initial: p
  p:
    type: parallel
    parallel: [a, b]
    strategy: all_succeed
    max_concurrent: 1
    on_success: done
    on_failure: report
  a:
    type: step
    command: 'exit 3'
  b:
    type: step
    command: 'echo b'
  report:
    type: step
    command: 'echo "b exited {{(index .states "b").ExitCode}}"'
    on_success: done
  done:
    type: terminal
"#;
    let sb = Sandbox::new().unwrap();
    let r = sb.run_workflow("s.yaml", yaml, &["-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let v = r.json().unwrap();
    assert_eq!(
        v["states"]["report"]["error"],
        "step report: interpolate command: undefined variable: ExitCode (state \"b\" was skipped: its parallel block ended before it started, so it has no exit code; its Status reads \"skipped\")"
    );
}
