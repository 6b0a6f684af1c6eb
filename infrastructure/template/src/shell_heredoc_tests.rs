//! Breaker (h4): under `shell_quote: true`, a value inside `$( … )` or backticks in an
//! unquoted here-document's body was quoted as here-document text (only `\ $ `` escaped), so
//! `;`, quotes and line breaks in it ran. Each shape below is rendered with hostile values
//! and run with a real `bash -c` and `sh -c` (dash) in a temporary directory: no marker file
//! may appear, and the value must come out intact wherever it is not refused.

use awf_domain::ports::template::Interpolator;

use crate::GoTemplates;
use crate::test_support::Data;

/// One command shape: `V` stands for `{{.inputs.v}}`, `Q` for `{{shell_quote .inputs.v}}`.
struct Shape {
    text: &'static str,
    /// The output for a value, when the shape prints it in a way both shells agree on.
    want: Option<fn(&str) -> String>,
    /// The delimiters a line of the value may not be (a value holding one is refused):
    /// those of the here-documents whose body holds the value as text (not inside a `$( )`
    /// or backticks, where the mode quotes it so that no line of it is one). Its first and
    /// last lines count only when `V` stands alone on its line (the text around it
    /// otherwise makes them other lines).
    refuse_lines: &'static [&'static str],
    /// The value lands in a quoted here-document nested in an unquoted one's `$( )`, as
    /// written: a backslash ending a line of it or the value (which bash would join to the
    /// next line) is refused.
    raw: bool,
}

fn dot(v: &str) -> String {
    format!("T: {v}.|\n")
}

fn dquoted(v: &str) -> String {
    format!("T: \"{v}.\"|\n")
}

fn plain(v: &str) -> String {
    format!("T: {v}|\n")
}

fn nested(v: &str) -> String {
    format!("A {v}|\n")
}

fn line_start(v: &str) -> String {
    format!("{v}|\n")
}

fn bare(v: &str) -> String {
    format!("{v}.|\n")
}

const SHAPES: &[Shape] = &[
    // The breaker's shape, as written (echo differs between shells on backslashes).
    Shape {
        text: "cat <<EOF\nTitle: $(echo V | tr a-z A-Z)\nEOF",
        want: None,
        refuse_lines: &[],
        raw: false,
    },
    Shape {
        text: "cat <<EOF\nT: $(printf '%s.' V)|\nEOF",
        want: Some(dot),
        refuse_lines: &[],
        raw: false,
    },
    Shape {
        text: "cat <<EOF\nT: \"$(printf '%s.' V)\"|\nEOF",
        want: Some(dquoted),
        refuse_lines: &[],
        raw: false,
    },
    Shape {
        text: "cat <<EOF\nT: $(printf '%s.' \"V\")|\nEOF",
        want: Some(dot),
        refuse_lines: &[],
        raw: false,
    },
    Shape {
        text: "cat <<EOF\nT: $(printf '%s.' 'V')|\nEOF",
        want: Some(dot),
        refuse_lines: &[],
        raw: false,
    },
    Shape {
        text: "cat <<EOF\nT: `printf '%s.' V`|\nEOF",
        want: Some(dot),
        refuse_lines: &[],
        raw: false,
    },
    Shape {
        text: "cat <<EOF\nT: `printf '%s.' \"V\"`|\nEOF",
        want: Some(dot),
        refuse_lines: &[],
        raw: false,
    },
    Shape {
        text: "cat <<EOF\nT: `printf '%s.' 'V'`|\nEOF",
        want: Some(dot),
        refuse_lines: &[],
        raw: false,
    },
    Shape {
        text: "cat <<EOF\nT: \"`printf '%s.' V`\"|\nEOF",
        want: Some(dquoted),
        refuse_lines: &[],
        raw: false,
    },
    Shape {
        text: "cat <<-EOF\n\tT: `printf '%s.' V`|\n\tEOF",
        want: Some(dot),
        refuse_lines: &[],
        raw: false,
    },
    Shape {
        text: "cat <<-EOF\n\tT: `printf '%s.' \"V\"`|\n\tEOF",
        want: Some(dot),
        refuse_lines: &[],
        raw: false,
    },
    Shape {
        text: "cat <<-EOF\n\tT: `printf '%s.' 'V'`|\n\tEOF",
        want: Some(dot),
        refuse_lines: &[],
        raw: false,
    },
    Shape {
        text: "cat <<-EOF\n\tT: $(printf '%s.' V)|\n\tEOF",
        want: Some(dot),
        refuse_lines: &[],
        raw: false,
    },
    // A here-document nested in `$( )` inside a here-document: the value is the inner
    // body's text, and bash reads the outer body's lines first.
    Shape {
        text: "cat <<EOF\nA $(cat <<EOT\nV\nEOT\n)|\nEOF",
        want: Some(nested),
        refuse_lines: &["EOT", "EOF"],
        raw: false,
    },
    Shape {
        text: "cat <<EOF\nA $(cat <<'EOT'\nV\nEOT\n)|\nEOF",
        want: Some(nested),
        refuse_lines: &["EOT", "EOF"],
        raw: true,
    },
    Shape {
        text: "cat <<EOF\nA $(cat <<EOT\n$(printf '%s.' V)\nEOT\n)|\nEOF",
        want: Some(|v| format!("A {v}.|\n")),
        refuse_lines: &[],
        raw: false,
    },
    Shape {
        text: "f() {\ncat <<EOF\nT: $(printf '%s.' V)|\nEOF\n}\nf",
        want: Some(dot),
        refuse_lines: &[],
        raw: false,
    },
    Shape {
        text: "if true; then\ncat <<EOF\nT: `printf '%s.' V`|\nEOF\nfi",
        want: Some(dot),
        refuse_lines: &[],
        raw: false,
    },
    Shape {
        text: "case x in\nx) cat <<EOF\nT: $(printf '%s.' \"V\")|\nEOF\n;;\nesac",
        want: Some(dot),
        refuse_lines: &[],
        raw: false,
    },
    Shape {
        text: "printf '%s\\n' \"$(cat <<EOF\nT: $(printf '%s.' V)|\nEOF\n)\"",
        want: Some(dot),
        refuse_lines: &[],
        raw: false,
    },
    // An explicit shell_quote, right as a bare word, still needs the here-document's care.
    Shape {
        text: "cat <<EOF\nT: $(printf '%s.' Q)|\nEOF",
        want: Some(dot),
        refuse_lines: &[],
        raw: false,
    },
    // ... and the backticks' (a backtick in the value ended them).
    Shape {
        text: "x=`printf '%s.' \"$(printf '%s' Q)\"`; printf '%s|\\n' \"$x\"",
        want: Some(bare),
        refuse_lines: &[],
        raw: false,
    },
    // The value as the here-document's own text.
    Shape {
        text: "cat <<EOF\nT: V|\nEOF",
        want: Some(plain),
        refuse_lines: &["EOF"],
        raw: false,
    },
    // `<<-` strips the leading tabs of every body line: the value's own tabs are kept
    // (trial: its indentation was lost), after text on its line and at a line's start.
    Shape {
        text: "cat <<-EOF\n\tT: V|\n\tEOF",
        want: Some(plain),
        refuse_lines: &["EOF"],
        raw: false,
    },
    Shape {
        text: "cat <<-EOF\n\t\tV|\n\tEOF",
        want: Some(line_start),
        refuse_lines: &["EOF"],
        raw: false,
    },
    Shape {
        text: "cat <<-EOF\nV|\nEOF",
        want: Some(line_start),
        refuse_lines: &["EOF"],
        raw: false,
    },
];

const PAYLOADS: &[&str] = &[
    "a; touch PWNED #",
    "$(touch PWNED)",
    "`touch PWNED`",
    "x'\ny",
    "EOF\ntouch PWNED",
    "EOT\ntouch PWNED",
    "\"; touch PWNED; echo \"",
    "'; touch PWNED; '",
    "a\nb",
    "a\n\tEOF\ntouch PWNED",
    "x\\\ntouch PWNED",
    "x\\\\\ntouch PWNED\\",
    "it's",
    "a\\",
    ")\ntouch PWNED\n(",
    "x\n)\ntouch PWNED\n#",
    "\\`touch PWNED\\`",
    "$HOME ${HOME} \\$HOME $((1+1))",
    "\t\tindented\n\tEOF",
    "'\nEOF\ntouch PWNED\n'",
    "\tlead\n\t\tdeeper\n\n\tafter an empty line",
    "x\n\t$HOME \\\t`q`",
    "EOF\n)\ntouch PWNED\ncat <<EOF",
];

/// Whether a line of `v` ends in an odd number of backslashes.
fn joins(v: &str) -> bool {
    v.split('\n')
        .any(|l| (l.len() - l.trim_end_matches('\\').len()) % 2 == 1)
}

/// Runs `text` with `shell -c` in a new empty directory: stdout, success, and whether the
/// marker file `PWNED` appeared there.
fn run_in_temp_dir(shell: &str, text: &str) -> (String, bool, bool) {
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => panic!("tempdir: {e}"),
    };
    let out = std::process::Command::new(shell)
        .arg("-c")
        .arg(text)
        .current_dir(dir.path())
        .env("HOME", "/home-of-awf-test")
        .output()
        .unwrap_or_else(|e| panic!("{shell}: {e}"));
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.success(),
        dir.path().join("PWNED").exists(),
    )
}

#[test]
fn values_in_substitutions_inside_here_documents_never_run_and_arrive_intact() {
    let mut checked = 0usize;
    let mut refused = 0usize;
    for shape in SHAPES {
        let template = shape
            .text
            .replace('V', "{{.inputs.v}}")
            .replace('Q', "{{shell_quote .inputs.v}}");
        for payload in PAYLOADS {
            let mut d = Data::new();
            d.inputs.insert("v".into(), serde_json::json!(payload));
            let rendered = GoTemplates::new().render_shell_quoted(&template, &d.scope());
            let lines: Vec<&str> = payload.split('\n').collect();
            // The value's first line is a line of its own when only tabs precede `V` on its
            // line, its last when a line break follows it.
            let before = shape.text.split('V').next().unwrap_or("");
            let at_start = before
                .rsplit('\n')
                .next()
                .is_some_and(|l| l.chars().all(|c| c == '\t'))
                && before.contains('\n');
            let at_end = shape.text.contains("V\n");
            let must_refuse = lines.iter().enumerate().any(|(n, l)| {
                (n > 0 || at_start)
                    && (n + 1 < lines.len() || at_end)
                    && shape.refuse_lines.contains(&l.trim_start_matches('\t'))
            }) || (shape.raw && joins(payload));
            let text = match rendered {
                Ok(t) => {
                    assert!(
                        !must_refuse,
                        "{template:?} with {payload:?}: not refused: {t}"
                    );
                    t
                }
                Err(e) => {
                    assert!(
                        must_refuse && e.to_string().contains("here-document"),
                        "{template:?} with {payload:?}: refused: {e}"
                    );
                    refused += 1;
                    continue;
                }
            };
            for shell in ["bash", "sh"] {
                let (stdout, ok, pwned) = run_in_temp_dir(shell, &text);
                assert!(!pwned, "{shell}: {payload:?} ran in\n{text}");
                assert!(ok, "{shell}: failed: {payload:?} in\n{text}\n{stdout}");
                if let Some(want) = shape.want {
                    assert_eq!(stdout, want(payload), "{shell}: {payload:?} in\n{text}");
                }
                checked += 1;
            }
        }
    }
    // Every shape ran with every payload but the refused ones, under both shells.
    assert_eq!(checked + 2 * refused, SHAPES.len() * PAYLOADS.len() * 2);
    assert!(refused > 0 && checked > 0);
}

/// Without the mode, the same shapes let the value run (proves the test above can fail).
#[test]
fn without_the_mode_a_value_in_a_here_documents_substitution_runs() {
    let mut d = Data::new();
    d.inputs
        .insert("v".into(), serde_json::json!("a; touch PWNED; echo b"));
    let text = GoTemplates::new()
        .render_shell(
            "cat <<EOF\nT: $(printf '%s.' {{.inputs.v}})|\nEOF",
            &d.scope(),
        )
        .unwrap_or_default();
    let (_, _, pwned) = run_in_temp_dir("bash", &text);
    assert!(pwned, "{text}");
}

/// The rendered text of the breaker's shapes, exactly: single quotes inside the
/// substitution, a line break of the value written `''\n''`.
#[test]
fn a_value_in_a_here_documents_substitution_is_single_quoted_with_guarded_line_breaks() {
    let mut d = Data::new();
    d.inputs.insert("v".into(), serde_json::json!("x; y\nEOF"));
    let r = |t: &str| GoTemplates::new().render_shell_quoted(t, &d.scope());
    assert_eq!(
        r("cat <<EOF\n$(echo {{.inputs.v}})\nEOF"),
        Ok("cat <<EOF\n$(echo 'x; y''\n''EOF')\nEOF".to_owned())
    );
    assert_eq!(
        r("cat <<EOF\n`echo {{.inputs.v}}`\nEOF"),
        Ok("cat <<EOF\n`echo 'x; y''\n''EOF'`\nEOF".to_owned())
    );
    assert_eq!(
        r("cat <<EOF\n$(echo \"{{.inputs.v}}\")\nEOF"),
        Ok("cat <<EOF\n$(echo \"\"'x; y''\n''EOF'\"\")\nEOF".to_owned())
    );
    // In the body itself a line equal to the delimiter cannot be quoted: refused.
    assert!(matches!(
        r("cat <<EOF\n{{.inputs.v}}\nEOF"),
        Err(e) if e.to_string().contains("would end the here-document")
    ));
}

/// Fuzzing (h4): a value ending in a line break right before text that completes the
/// delimiter (`{{x}}EOF`) made the delimiter's line of the template's text and ended the
/// document; a value exactly completing the line around it too. Where the text around the
/// action cannot complete it, such a value goes in.
#[test]
fn a_value_completing_the_delimiter_with_the_text_around_it_is_refused() {
    let render = |t: &str, v: &str| {
        let mut d = Data::new();
        d.inputs.insert("v".into(), serde_json::json!(v));
        GoTemplates::new().render_shell_quoted(t, &d.scope())
    };
    for (t, v) in [
        ("cat <<'EOF'\n{{.inputs.v}}EOF\n$(id)\nEOF", "x\n"),
        ("cat <<EOF\n{{.inputs.v}}EOF\nEOF", "x\n"),
        ("cat <<EOF\nEOF{{.inputs.v}}\nEOF", "\nx"),
        ("cat <<EOF\nE{{.inputs.v}}F\nEOF", "O"),
        ("cat <<EOF\nEOF{{.inputs.v}}\nEOF", ""),
        ("cat <<-EOF\n\t{{.inputs.v}}\n\tEOF", "\t\tEOF"),
        ("cat <<EOF\n{{.inputs.v}}{{.inputs.v}}\nEOF", "x\n"),
    ] {
        assert!(
            matches!(render(t, v), Err(e) if e.to_string().contains("would end the here-document")),
            "{t:?} with {v:?}"
        );
    }
    for (t, v, want) in [
        (
            "cat <<EOF\nT: {{.inputs.v}}|\nEOF",
            "EOF\nE",
            "cat <<EOF\nT: EOF\nE|\nEOF",
        ),
        (
            "cat <<EOF\nE{{.inputs.v}}F\nEOF",
            "x",
            "cat <<EOF\nExF\nEOF",
        ),
        (
            "cat <<EOF\n{{.inputs.v}}\nEOF",
            "x\n",
            "cat <<EOF\nx\n\nEOF",
        ),
    ] {
        assert_eq!(render(t, v), Ok(want.to_owned()), "{t:?} with {v:?}");
    }
}

/// Trial: `<<-` strips the leading tabs of every body line, so a value's own indentation was
/// lost. In an unquoted `<<-` document each of the value's lines that starts with a tab gets
/// an empty `${-+}` before it (exactly this text), and both shells print the value intact; a
/// quoted `<<-'EOF'` expands nothing, so such a value is refused with what to write instead.
#[test]
fn a_values_leading_tabs_survive_a_tab_stripping_here_document() {
    let render = |t: &str, v: &str| {
        let mut d = Data::new();
        d.inputs.insert("v".into(), serde_json::json!(v));
        GoTemplates::new().render_shell_quoted(t, &d.scope())
    };
    let v = "\tone\n\t\ttwo\nthree";
    let text = render("cat <<-EOF\n\t{{.inputs.v}}\n\tEOF", v).unwrap();
    assert_eq!(text, "cat <<-EOF\n\t${-+}\tone\n${-+}\t\ttwo\nthree\n\tEOF");
    for shell in ["bash", "sh"] {
        let (stdout, ok, _) = run_in_temp_dir(shell, &text);
        assert!(ok, "{shell}: {text}");
        assert_eq!(stdout, format!("{v}\n"), "{shell}");
    }
    // After text on its line the first tab is the value's, not the line's.
    assert_eq!(
        render("cat <<-EOF\n\tT: {{.inputs.v}}\n\tEOF", "\tx").as_deref(),
        Ok("cat <<-EOF\n\tT: \tx\n\tEOF")
    );
    // Nothing to keep: the text is as before.
    assert_eq!(
        render("cat <<-EOF\n\t{{.inputs.v}}\n\tEOF", "a\nb").as_deref(),
        Ok("cat <<-EOF\n\ta\nb\n\tEOF")
    );

    for (t, v) in [
        ("cat <<-'EOF'\n\t{{.inputs.v}}\n\tEOF", "a\n\tb"),
        ("cat <<-'EOF'\n\t{{.inputs.v}}\n\tEOF", "\ta"),
    ] {
        let e = render(t, v).unwrap_err().to_string();
        assert!(
            e.contains("starts a line with a tab, which the quoted <<- here-document (<<-'EOF') would strip")
                && e.contains("write <<-EOF unquoted, or << without the -"),
            "{t:?} with {v:?}: {e}"
        );
    }
    assert_eq!(
        render("cat <<-'EOF'\n\tT: {{.inputs.v}}\n\tEOF", "\ta\nb").as_deref(),
        Ok("cat <<-'EOF'\n\tT: \ta\nb\n\tEOF")
    );
}

/// One command shape of breaker h6 (`V` stands for `{{.inputs.v}}`): what it prints for a
/// value, and which values the mode must refuse (a line of the value that would end the
/// here-document holding it).
struct ReadAsTheShell {
    text: &'static str,
    want: fn(&str) -> String,
    refuse: fn(&str) -> bool,
}

/// The lines of `v` that are lines of their own in a body where the text around `V` is on
/// its line (all but its first and last).
fn inner_lines(v: &str) -> Vec<&str> {
    let lines: Vec<&str> = v.split('\n').collect();
    if lines.len() < 3 {
        return Vec::new();
    }
    lines[1..lines.len() - 1].to_vec()
}

/// `V` alone on its line: every line of the value is one of the body.
fn alone(v: &str, delim: &str) -> bool {
    v.split('\n').any(|l| l == delim)
}

const READ_AS_THE_SHELL: &[ReadAsTheShell] = &[
    // Item 1: `<<` after `let`, `declare -i`, `test -v`, `[ -v` opens a here-document.
    ReadAsTheShell {
        text: "let x=1<<2\nV\n2\nprintf '%s|' V",
        want: |v| format!("{v}|"),
        refuse: |v| alone(v, "2"),
    },
    ReadAsTheShell {
        text: "declare -i y=1<<2\nV\n2\nprintf '%s|' V",
        want: |v| format!("{v}|"),
        refuse: |v| alone(v, "2"),
    },
    ReadAsTheShell {
        text: "test -v HOME <<EOF\nV\nEOF\nprintf '%s|' V",
        want: |v| format!("{v}|"),
        refuse: |v| alone(v, "EOF"),
    },
    ReadAsTheShell {
        text: "[ -v HOME ] <<EOF\nV\nEOF\nprintf '%s|' V",
        want: |v| format!("{v}|"),
        refuse: |v| alone(v, "EOF"),
    },
    // Item 2: delimiters are quote-removed as the shells do it.
    ReadAsTheShell {
        text: "cat <<E\\\\OF\nV\nE\\OF\nprintf '%s|' V",
        want: |v| format!("{v}\n{v}|"),
        refuse: |v| alone(v, "E\\OF"),
    },
    ReadAsTheShell {
        text: "cat <<\"E\\\"OF\"\nV\nE\"OF\nprintf '%s|' V",
        want: |v| format!("{v}\n{v}|"),
        refuse: |v| alone(v, "E\"OF"),
    },
    ReadAsTheShell {
        text: "cat <<E'\\'OF\nT: V|\nE\\OF\nprintf '%s|' V",
        want: |v| format!("T: {v}|\n{v}|"),
        refuse: |v| inner_lines(v).contains(&"E\\OF"),
    },
    // Item 3: a here-document announced in backticks ends at their closing backtick; a line
    // break inside a `$( )` opened after the `<<` starts no body.
    ReadAsTheShell {
        text: "x=`cat <<EOF`\nprintf '%s|' V",
        want: |v| format!("{v}|"),
        refuse: |_| false,
    },
    ReadAsTheShell {
        text: "cat <<EOF; printf '%s|' \"$(printf '%s' a\nprintf '%s' V)\"\nT: V|\nEOF",
        want: |v| format!("T: {v}|\na{v}|"),
        refuse: |v| inner_lines(v).contains(&"EOF"),
    },
    // Item 4: words in a `case` pattern are no reserved words.
    ReadAsTheShell {
        text: "printf '%s|' \"$(case a in\n  b) echo;;\n  case) echo;;\nesac)\" V",
        want: |v| format!("|{v}|"),
        refuse: |_| false,
    },
    ReadAsTheShell {
        text: "case a in\n  case) :;;\n  (esac) :;;\n  a) printf '%s|' V;;\nesac",
        want: |v| format!("{v}|"),
        refuse: |_| false,
    },
];

const H6_PAYLOADS: &[&str] = &[
    "$(touch PWNED)",
    "`touch PWNED`",
    "a; touch PWNED #",
    "x'\ny",
    "\"; touch PWNED; echo \"",
    "2\ntouch PWNED",
    "x\n2\ntouch PWNED",
    "EOF\ntouch PWNED",
    "x\nEOF\ntouch PWNED",
    "x\nE\\OF\n$(touch PWNED)",
    "x\nE\"OF\n$(touch PWNED)",
    "x\\\ntouch PWNED",
    ")\ntouch PWNED\n(",
    "esac\ntouch PWNED\ncase a in",
    ";; esac; touch PWNED; case a in a)",
    "it's",
];

/// Breaker (h6): texts the walker read differently from bash and dash (`<<` after `let`,
/// `declare -i`, `test -v`; delimiters with backslashes and quotes; a here-document in
/// backticks; a pattern `case)`), each with hostile values under a real bash and dash: no
/// marker file, the value printed intact wherever it is not refused.
#[test]
fn values_go_where_bash_and_dash_read_them() {
    let mut checked = 0usize;
    for shape in READ_AS_THE_SHELL {
        let template = shape.text.replace('V', "{{.inputs.v}}");
        for payload in H6_PAYLOADS {
            let mut d = Data::new();
            d.inputs.insert("v".into(), serde_json::json!(payload));
            let rendered = GoTemplates::new().render_shell_quoted(&template, &d.scope());
            let must_refuse = (shape.refuse)(payload);
            let text = match rendered {
                Ok(t) => {
                    assert!(
                        !must_refuse,
                        "{template:?} with {payload:?}: not refused: {t}"
                    );
                    t
                }
                Err(e) => {
                    assert!(
                        must_refuse && e.to_string().contains("here-document"),
                        "{template:?} with {payload:?}: refused: {e}"
                    );
                    continue;
                }
            };
            for shell in ["bash", "sh"] {
                let (stdout, _, pwned) = run_in_temp_dir(shell, &text);
                assert!(!pwned, "{shell}: {payload:?} ran in\n{text}");
                assert_eq!(
                    stdout,
                    (shape.want)(payload),
                    "{shell}: {payload:?} in\n{text}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > READ_AS_THE_SHELL.len() * 2);
}

/// Breaker (h6): where bash and dash read the text differently (a delimiter `$'EOF'`, a
/// here-document announced in a `$( )` closing on its line, `<<` in bash's own arithmetic),
/// a value after it is refused unless it is a plain word.
#[test]
fn values_after_text_the_shells_read_differently_are_refused() {
    let mut d = Data::new();
    d.inputs
        .insert("v".into(), serde_json::json!("$(touch PWNED)"));
    d.inputs.insert("w".into(), serde_json::json!("plain-word"));
    for (t, place) in [
        (
            "cat <<$'EOF'\nEOF\necho {{.inputs.v}}\n$EOF",
            "after a here-document delimiter written $'…' or $\"…\" (bash reads $'EOF' as EOF, dash as $EOF)",
        ),
        (
            "cat <<$\"EOF\"\n$EOF\necho {{.inputs.v}}\nEOF",
            "after a here-document delimiter written $'…' or $\"…\"",
        ),
        (
            "echo \"$(cat <<EOF)\"\necho {{.inputs.v}}\nEOF",
            "after a here-document announced in a $( ) that closes on its line (bash reads its body from the next lines, dash does not)",
        ),
        (
            "((z=1<<2))\necho {{.inputs.v}}\n2",
            "after << inside (( )), $[ ], a[…]= or a=( ) (a shift to bash, a here-document to dash)",
        ),
        (
            "a[1<<2]=3\necho {{.inputs.v}}\n2",
            "after << inside (( )), $[ ], a[…]= or a=( )",
        ),
    ] {
        let r = GoTemplates::new().render_shell_quoted(t, &d.scope());
        assert!(
            matches!(&r, Err(e) if e.to_string().contains(&format!("shell_quote: the value of {{{{.inputs.v}}}} sits {place}"))
                && e.to_string().contains("write that text so that every shell reads it alike")),
            "{t:?}: {r:?}"
        );
        let w = t.replace(".inputs.v", ".inputs.w");
        let r = GoTemplates::new().render_shell_quoted(&w, &d.scope());
        assert!(
            matches!(&r, Ok(text) if text.contains("echo plain-word")),
            "{w:?}: {r:?}"
        );
    }
}
