//! Unit tests of the shell-context walker (issue 14, "Safe shell interpolation").

use super::*;

fn ctx_of(text: &str) -> Vec<ShellContext> {
    shell_actions(text).into_iter().map(|a| a.context).collect()
}

/// The contexts of the value actions (`{{.…}}`) of `text`, control actions left out.
fn values_of(text: &str) -> Vec<ShellContext> {
    shell_actions(text)
        .into_iter()
        .filter(|a| a.text.starts_with("{{."))
        .map(|a| a.context)
        .collect()
}

const BARE: ShellContext = ShellContext::Unquoted {
    in_substitution: false,
};
const SUBST: ShellContext = ShellContext::Unquoted {
    in_substitution: true,
};

/// [`ShellContext::ShellDependent`] for `cause`.
fn dependent(cause: Dependence) -> ShellContext {
    ShellContext::ShellDependent { cause }
}

fn heredoc(quoted: bool, strip: bool, delim: &str) -> ShellContext {
    ShellContext::Heredoc {
        quoted,
        strip,
        delimiter: delim.to_owned(),
    }
}

#[test]
fn every_context_is_recognised() {
    let cases: Vec<(&str, Vec<ShellContext>)> = vec![
        ("echo {{.x}}", vec![BARE]),
        ("echo '{{.x}}'", vec![ShellContext::SingleQuoted]),
        ("echo \"three {{.x}}\"", vec![ShellContext::DoubleQuoted]),
        ("echo `echo {{.x}}`", vec![ShellContext::Backtick]),
        ("echo $(echo {{.x}})", vec![SUBST]),
        ("echo \"$(echo {{.x}})\"", vec![SUBST]),
        (
            "echo \"$(echo \"{{.x}}\")\"",
            vec![ShellContext::DoubleQuoted],
        ),
        ("echo $( (cd /; echo {{.x}}) ) {{.y}}", vec![SUBST, BARE]),
        (
            "cat <<EOF\n{{.x}}\nEOF\necho {{.y}}",
            vec![heredoc(false, false, "EOF"), BARE],
        ),
        (
            "cat <<'EOF'\n{{.x}}\nEOF",
            vec![heredoc(true, false, "EOF")],
        ),
        (
            "cat <<-\"END\"\n\t{{.x}}\n\tEND",
            vec![heredoc(true, true, "END")],
        ),
        ("echo \\\"{{.x}}", vec![BARE]),
        ("echo \"a\\\"{{.x}}\"", vec![ShellContext::DoubleQuoted]),
        ("# it's\necho {{.x}}", vec![BARE]),
        (
            "echo it\\'s '{{.x}}' \"{{.y}}\"",
            vec![ShellContext::SingleQuoted, ShellContext::DoubleQuoted],
        ),
        ("echo '\"' {{.x}}", vec![BARE]),
        (
            "echo \"'\" {{.x}} \"{{.y}}\"",
            vec![BARE, ShellContext::DoubleQuoted],
        ),
    ];
    for (text, want) in cases {
        assert_eq!(ctx_of(text), want, "{text}");
    }
}

#[test]
fn template_text_inside_an_action_opens_no_shell_quote() {
    assert_eq!(
        ctx_of("echo {{printf \"%s'\" .x}} {{.y}}"),
        vec![BARE, BARE]
    );
}

#[test]
fn the_pieces_concatenate_back_to_the_text() {
    for text in [
        "",
        "plain",
        "echo \"three {{.x}}\" '{{.y}}' {{if .z}}-v{{end}}",
        "cat <<EOF\nété {{.x}}\nEOF\n",
        "{{.x}}{{.y}}",
        "echo {{ unclosed",
    ] {
        let joined: String = shell_pieces(text)
            .into_iter()
            .map(|p| match p {
                ShellPiece::Text(t) => t.to_owned(),
                ShellPiece::Action(a) => {
                    assert_eq!(&text[a.range.clone()], a.text);
                    a.text.to_owned()
                }
            })
            .collect();
        assert_eq!(joined, text);
    }
}

#[test]
fn quoted_span_is_the_enclosing_string_with_its_quotes() {
    let text = "echo \"three {{.x}}\" 'a {{.y}} b' `c {{.z}}` {{.w}}";
    let spans: Vec<Option<&str>> = shell_actions(text)
        .into_iter()
        .map(|a| a.quoted_span.map(|r| &text[r]))
        .collect();
    assert_eq!(
        spans,
        vec![
            Some("\"three {{.x}}\""),
            Some("'a {{.y}} b'"),
            Some("`c {{.z}}`"),
            None
        ]
    );
    // Unclosed: the span runs to the end of the text.
    let text = "echo \"three {{.x}}";
    let a = &shell_actions(text)[0];
    assert_eq!(
        a.quoted_span.clone().map(|r| &text[r]),
        Some(text.get(5..).unwrap_or(""))
    );
}

#[test]
fn inside_double_quotes_sees_through_substitutions_nested_in_them() {
    let flags: Vec<bool> = shell_actions(
        "echo \"{{.a}}\" \"$(echo {{.b}})\" $(echo {{.c}}) \"`echo {{.d}}`\" '{{.e}}' {{.f}}",
    )
    .into_iter()
    .map(|a| a.inside_double_quotes)
    .collect();
    assert_eq!(flags, vec![true, true, false, true, false, false]);
}

#[test]
fn hostile_text_never_panics() {
    const PIECES: &[&str] = &[
        "{{", "}}", "\"", "'", "`", "\\", "$(", ")", "(", "<<", "<<-", "EOF", "\n", "\t", "#", " ",
        "é", "x", "'EOF'",
    ];
    let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
    for _ in 0..3000 {
        let mut text = String::new();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let len = (seed % 30) as usize;
        for k in 0..len {
            let r = seed.rotate_left(k as u32 * 5);
            text.push_str(PIECES[(r % PIECES.len() as u64) as usize]);
        }
        let joined: String = shell_pieces(&text)
            .into_iter()
            .map(|p| match p {
                ShellPiece::Text(t) => t,
                ShellPiece::Action(a) => a.text,
            })
            .collect();
        assert_eq!(joined, text);
    }
}

/// Breaker: `\{{x}}` was not seen as an action at all (the backslash swallowed its first
/// brace) and `${NAME:-{{x}}}` read as a plain double-quoted or bare word.
#[test]
fn parameter_expansions_and_escaped_actions_have_their_own_contexts() {
    let param = ShellContext::ParameterExpansion;
    let escaped = ShellContext::AfterBackslash;
    let cases: Vec<(&str, Vec<ShellContext>)> = vec![
        ("echo \"${X:-{{.x}}}\" {{.y}}", vec![param.clone(), BARE]),
        ("echo ${X:-{{.x}}} {{.y}}", vec![param.clone(), BARE]),
        ("echo \"${X:-\"{{.x}}\"}\"", vec![param.clone()]),
        ("echo ${X:-'{{.x}}'}", vec![param.clone()]),
        ("echo ${X:-${Y:-{{.x}}}} {{.y}}", vec![param.clone(), BARE]),
        (
            "echo ${X:-{a}{{.x}}} '{{.y}}'",
            vec![param, ShellContext::SingleQuoted],
        ),
        ("echo \\{{.x}} {{.y}}", vec![escaped.clone(), BARE]),
        ("echo \"\\{{.x}}\"", vec![escaped.clone()]),
        ("echo \\\\{{.x}}", vec![BARE]),
        ("echo '\\{{.x}}'", vec![ShellContext::SingleQuoted]),
        ("cat <<EOF\n\\{{.x}}\nEOF", vec![escaped]),
        (
            "cat <<'EOF'\n\\{{.x}}\nEOF",
            vec![heredoc(true, false, "EOF")],
        ),
    ];
    for (text, want) in cases {
        assert_eq!(ctx_of(text), want, "{text}");
    }
}

/// Breaker (second round): a `$` right before an action (`${{x}}` even swallowed it), a
/// here-string, arithmetic (whose `<<` read as a here-document), a trim marker after a
/// backslash, a `case` pattern's `)` in `$( )`, and `\"` in backticks within `"…"`.
#[test]
fn glued_arithmetic_and_unescaped_quote_contexts_are_told_apart() {
    let dollar = ShellContext::AfterDollar;
    let arith = ShellContext::Arithmetic;
    let escaped = ShellContext::AfterBackslash;
    let cases: Vec<(&str, Vec<ShellContext>)> = vec![
        ("echo ${{.x}} {{.y}}", vec![dollar.clone(), BARE]),
        ("echo \"${{.x}}\"", vec![dollar.clone()]),
        ("echo $ {{- .x}}", vec![dollar]),
        ("echo \\ {{- .x}}", vec![escaped.clone()]),
        ("echo \\$ {{- .x}}", vec![BARE]),
        ("cat <<< {{.x}}", vec![BARE]),
        ("cat <<<\"{{.x}}\"", vec![ShellContext::DoubleQuoted]),
        ("echo $((1<<2))\necho {{.x}}", vec![BARE]),
        // dash reads `((` as two subshells and `<<2` as a here-document (h6).
        (
            "((y=1<<2)); echo {{.x}}",
            vec![dependent(Dependence::ShiftOrHeredoc)],
        ),
        ("echo $(({{.x}} + 1))", vec![arith.clone()]),
        ("(( {{.x}} > 2 ))", vec![arith.clone()]),
        ("[[ {{.x}} -eq 1 ]] && echo {{.y}}", vec![arith, BARE]),
        ("[[ {{.x}} == a ]]", vec![BARE]),
        (
            "echo \"$(case a in a) echo {{.x}};; esac)\" {{.y}}",
            vec![SUBST, BARE],
        ),
        ("echo \"`echo \\\"{{.x}}\\\"`\"", vec![escaped]),
        ("echo \"`echo {{.x}}`\"", vec![ShellContext::Backtick]),
    ];
    for (text, want) in cases {
        assert_eq!(ctx_of(text), want, "{text}");
    }
}

/// Whatever the text, the walker never panics and its pieces put the text back together
/// (a pseudo-random mix of the constructs it follows, multi-byte characters included).
#[test]
fn any_text_is_cut_into_pieces_that_make_it_again() {
    const PARTS: &[&str] = &[
        "{{.x}}",
        "{{- .y -}}",
        "{{",
        "}}",
        "$",
        "${",
        "}",
        "$(",
        "$((",
        "((",
        ")",
        "))",
        "(",
        "`",
        "\\",
        "\\\"",
        "\"",
        "'",
        "<<",
        "<<-",
        "<<<",
        "EOF",
        "\n",
        "\t",
        " ",
        "[[",
        "]]",
        " -eq ",
        "case ",
        " esac",
        "#",
        "é",
        "→",
        ";",
        "a",
    ];
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..3000 {
        let mut text = String::new();
        for _ in 0..(seed % 24) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            text.push_str(PARTS[(seed % PARTS.len() as u64) as usize]);
        }
        seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let back: String = shell_pieces(&text)
            .into_iter()
            .map(|p| match p {
                ShellPiece::Text(t) => t.to_owned(),
                ShellPiece::Action(a) => a.text.to_owned(),
            })
            .collect();
        assert_eq!(back, text);
    }
}

#[test]
fn quote_arg_leaves_plain_words_and_quotes_the_rest() {
    assert_eq!(quote_arg("build-2.x"), "build-2.x");
    assert_eq!(quote_arg("wf/ci.yaml"), "wf/ci.yaml");
    assert_eq!(quote_arg("my step;touch x"), "'my step;touch x'");
    assert_eq!(quote_arg("it's"), "'it'\\''s'");
    assert_eq!(quote_arg("$(id)"), "'$(id)'");
    assert_eq!(quote_arg(""), "''");
    // Breaker: `--from 's\u{1b}[31mred'` could not be pasted; ANSI-C quotes can.
    assert_eq!(quote_arg("s\u{1b}[31mred"), "$'s\\e[31mred'");
    assert_eq!(
        quote_arg("a'b\\c\u{7}\n\u{1}\u{202e}"),
        "$'a\\'b\\\\c\\a\\n\\x01\\u202e'"
    );
    assert_eq!(input_arg("in\u{1b}put"), "$'in\\eput=<value>'");
}

/// Breaker: a missing input named `in put` was hinted as `--input in put=<value>`.
#[test]
fn input_arg_quotes_the_whole_word_when_the_name_is_not_plain() {
    assert_eq!(input_arg("who"), "who=<value>");
    assert_eq!(input_arg("in put"), "'in put=<value>'");
    assert_eq!(input_arg("it's"), "'it'\\''s=<value>'");
    assert_eq!(
        quoted_list(["a", "it's $(x)", "b-2"]),
        "a, 'it'\\''s $(x)', b-2"
    );
}

/// `read_arg` reads back what `quote_arg` and `input_arg` wrote, as the shell would.
#[test]
fn read_arg_is_the_inverse_of_quote_arg() {
    for word in [
        "plain",
        "in put",
        "it's",
        "$(id)",
        "a\"b",
        "x=<value>",
        "s\u{1b}[31mred",
        "a'b\\c\u{7}\n\u{1}\u{202e}\u{85}",
    ] {
        let quoted = quote_arg(word);
        let line = format!("  {quoted} rest of it");
        assert_eq!(
            read_arg(&line),
            Some((word.to_owned(), " rest of it")),
            "{quoted}"
        );
    }
    assert_eq!(
        read_arg(&input_arg("in put")),
        Some(("in put=<value>".to_owned(), ""))
    );
    assert_eq!(
        read_arg(&input_arg("in\u{1b}put")),
        Some(("in\u{1b}put=<value>".to_owned(), ""))
    );
    assert_eq!(read_arg("a\\ b\"c\" d"), Some(("a bc".to_owned(), " d")));
    assert_eq!(read_arg("\"x \\$y\" z"), Some(("x $y".to_owned(), " z")));
    assert_eq!(read_arg("'open"), None);
    assert_eq!(read_arg("   "), None);
}

/// Breaker (shell_quote round 3): a comment runs to the end of its line whatever values are
/// in it (a quote in the prose after a value opened a phantom string); a value in it has a
/// context of its own; `#` inside a word or `${x#pat}` starts none; `\` at a comment's end
/// does not continue it; in backticks a comment ends at their closing backtick.
#[test]
fn comments_run_to_the_end_of_their_line_whatever_values_are_in_them() {
    let comment = ShellContext::Comment;
    let cases: Vec<(&str, Vec<ShellContext>)> = vec![
        ("echo start # note: {{.s}}", vec![comment.clone()]),
        (
            "# greet {{.a}} (don't worry)\necho hello {{.b}}",
            vec![comment.clone(), BARE],
        ),
        (
            "# {{.a}} \"x\n echo {{.b}} '{{.c}}'",
            vec![comment.clone(), BARE, ShellContext::SingleQuoted],
        ),
        ("echo a#b {{.x}}", vec![BARE]),
        ("echo ${x#pat} {{.x}}", vec![BARE]),
        ("echo ${x#'{{.x}}'}", vec![ShellContext::ParameterExpansion]),
        ("echo $# {{.x}}", vec![BARE]),
        ("echo a\\ #b {{.x}}", vec![BARE]),
        ("echo a # b \\\necho {{.x}}", vec![BARE]),
        ("echo a;#{{.x}}\necho {{.y}}", vec![comment.clone(), BARE]),
        ("echo $(#{{.x}}\necho {{.y}})", vec![comment.clone(), SUBST]),
        ("echo a >#{{.x}}", vec![comment.clone()]),
        ("echo \"# {{.x}}\"", vec![ShellContext::DoubleQuoted]),
        ("echo '# {{.x}}'", vec![ShellContext::SingleQuoted]),
        (
            "cat <<EOF\n# {{.x}}\nEOF",
            vec![heredoc(false, false, "EOF")],
        ),
        (
            "cat <<EOF # {{.x}}\n{{.y}}\nEOF\n{{.z}}",
            vec![comment.clone(), heredoc(false, false, "EOF"), BARE],
        ),
        ("echo `echo a # {{.x}}` {{.y}}", vec![comment.clone(), BARE]),
        // An escaped backtick nests backticks: nothing in them is quoted reliably.
        (
            "echo `echo a # b \\` {{.x}}` {{.y}}",
            vec![ShellContext::AfterBackslash, BARE],
        ),
        // Right after an action that prints nothing the shell may get a blank: a comment.
        (
            "echo {{if .a}}x{{end}}# {{.x}}",
            vec![BARE, BARE, comment.clone()],
        ),
        ("echo {{.a}}# {{.x}}", vec![BARE, BARE]),
        // A trim marker glues the next line onto the comment, or the value onto it.
        (
            "# note {{.a -}}\necho {{.b}}",
            vec![comment.clone(), comment.clone()],
        ),
        ("echo a # note\n{{- .x}}", vec![comment]),
        // Should the shell not read a comment here, `\` or `$` would be glued to the value.
        ("# \\{{.x}}", vec![ShellContext::AfterBackslash]),
        ("# ${{.x}}", vec![ShellContext::AfterDollar]),
    ];
    for (text, want) in cases {
        assert_eq!(ctx_of(text), want, "{text}");
    }
}

/// Breaker (shell_quote round 3): in `$'…'` a `\'` is an escaped quote, not the end; a
/// value there has a context of its own (no quoting holds in bash and dash alike).
#[test]
fn ansi_c_strings_end_at_their_unescaped_quote() {
    let ansi = ShellContext::AnsiC;
    let cases: Vec<(&str, Vec<ShellContext>)> = vec![
        ("printf '%s\\n' $'it\\'s {{.s}}'", vec![ansi]),
        (
            "echo $'a\\'b' {{.x}} '{{.y}}'",
            vec![BARE, ShellContext::SingleQuoted],
        ),
        ("echo $'a\\\\' {{.x}}", vec![BARE]),
        ("echo \"$'{{.x}}'\"", vec![ShellContext::DoubleQuoted]),
        ("echo $$'{{.x}}'", vec![ShellContext::SingleQuoted]),
        ("echo $${{.x}}", vec![BARE]),
        ("echo \\$'{{.x}}'", vec![ShellContext::SingleQuoted]),
        ("echo $'\\{{.x}}'", vec![ShellContext::AfterBackslash]),
    ];
    for (text, want) in cases {
        assert_eq!(ctx_of(text), want, "{text}");
    }
}

/// Breaker (shell_quote round 3): a backslash and a line break join two lines, so a
/// here-document's delimiter on the joined line ends nothing and its body starts after the
/// joined line; backticks end at their first unescaped backtick whatever quotes are open
/// in them; a value nested in backticks knows it.
#[test]
fn joined_lines_and_backticks_are_read_as_the_shell_reads_them() {
    let h = heredoc(false, false, "EOF");
    let cases: Vec<(&str, Vec<ShellContext>)> = vec![
        (
            "cat <<EOF\nx \\\nEOF\n{{.x}}\nEOF\n{{.y}}",
            vec![h.clone(), BARE],
        ),
        ("cat <<EOF \\\n| tr a b\n{{.x}}\nEOF", vec![h.clone()]),
        ("echo `echo \"a` {{.x}} `b\"`", vec![BARE]),
        ("echo `echo 'a` {{.x}}", vec![BARE]),
        (
            "echo `echo \\`date\\` {{.x}}`",
            vec![ShellContext::AfterBackslash],
        ),
        (
            "echo `printf {{printf \"%s`\" .a}}` {{.x}}",
            vec![ShellContext::Backtick, BARE],
        ),
        // A trimmed line break before a delimiter glues it to the line before.
        ("cat <<EOF\n{{.x -}}\nEOF\n{{.y}}", vec![h.clone(), h]),
    ];
    for (text, want) in cases {
        assert_eq!(ctx_of(text), want, "{text}");
    }
    let nested: Vec<(bool, ShellContext)> =
        shell_actions("echo `echo \"{{.a}}\" $(echo {{.b}}) # {{.c}}` \"{{.d}}\"")
            .into_iter()
            .map(|a| (a.inside_backticks, a.context))
            .collect();
    assert_eq!(
        nested,
        vec![
            (true, ShellContext::DoubleQuoted),
            (true, SUBST),
            (true, ShellContext::Comment),
            (false, ShellContext::DoubleQuoted),
        ]
    );
}

/// Breaker, second round: the word `case` anywhere in `"$( … )"` (an argument, a file name)
/// kept the walker inside the `$( )` after it closed. Only `case` in command position opens
/// a `case` statement.
#[test]
fn only_case_in_command_position_opens_a_case_statement() {
    let dq = ShellContext::DoubleQuoted;
    for text in [
        "echo \"$(echo case) {{.x}}\"",
        "echo \"$(cat case.txt) and {{.x}}\"",
        "echo \"$(echo 'case' \"case\") {{.x}}\"",
        "echo \"$(x=case; echo $x) {{.x}}\"",
        "echo \"$(echo a case b) {{.x}}\"",
        "echo \"$(echo esac) {{.x}}\"",
    ] {
        assert_eq!(values_of(text), vec![dq.clone()], "{text}");
    }
    // Real `case` statements still keep their patterns' `)` inside the `$( )`.
    for text in [
        "echo \"$(case a in a) echo {{.x}};; esac) {{.y}}\"",
        "echo \"$(case a in (a) echo {{.x}};; esac) {{.y}}\"",
        "echo \"$(if true; then case a in a|b) echo {{.x}};; esac; fi) {{.y}}\"",
        "echo \"$( (case a in a) echo {{.x}};; esac) ) {{.y}}\"",
    ] {
        assert_eq!(values_of(text), vec![SUBST, dq.clone()], "{text}");
    }
}

/// Breaker, second round: `<<''` / `<<""` (an empty delimiter, the body ends at the first
/// empty line) was not read as a here-document, so a `'` in its body opened a phantom
/// string.
#[test]
fn an_empty_delimiter_opens_a_here_document_ending_at_an_empty_line() {
    assert_eq!(
        values_of("cat <<''\nit's {{.x}}\n\necho \"{{.y}}\""),
        vec![heredoc(true, false, ""), ShellContext::DoubleQuoted]
    );
    assert_eq!(
        values_of("cat <<\"\"\nit's\n\necho \"{{.y}}\""),
        vec![ShellContext::DoubleQuoted]
    );
    assert_eq!(values_of("cat <<-''\n\tit's\n\t\necho {{.y}}"), vec![BARE]);
    // A bare `<<` with no word is no here-document.
    assert_eq!(values_of("cat << ; echo {{.y}}"), vec![BARE]);
    // Fuzzing (h6): inside `$( )` bash ends one at once, dash at the first empty line; in
    // backticks both read it as at the top.
    for text in [
        "x=$(\ncat <<''\necho {{.x}}\n\n)",
        "x=\"$(cat <<\"\"\necho {{.x}}\n\n)\"",
    ] {
        assert_eq!(
            values_of(text),
            vec![dependent(Dependence::EmptyDelimiterInSubstitution)],
            "{text}"
        );
    }
    assert_eq!(
        values_of("x=`cat <<''\necho {{.x}}\n\n`"),
        vec![heredoc(true, false, "")]
    );
}

/// Breaker, second round: `#` right after a backtick (or `$(`, `(`) starts a comment.
#[test]
fn a_comment_may_start_right_after_a_backtick_or_a_parenthesis() {
    for text in [
        "echo `#{{.x}}`",
        "echo $(#{{.x}}\n)",
        "echo \"$(#{{.x}}\n)\"",
        "(#{{.x}}\n)",
        "{{if true}}#{{.x}}{{end}}",
    ] {
        assert_eq!(values_of(text), vec![ShellContext::Comment], "{text}");
    }
}

/// Breaker, second round: `$'…'` inside `"$( … )"` is an ANSI-C string (a fresh context
/// starts in `$( )`); inside `"${ … }"` bash reads no quotes, as before.
#[test]
fn ansi_c_strings_and_quotes_are_read_afresh_inside_a_substitution_in_double_quotes() {
    assert_eq!(
        values_of("echo \"$(echo $'\\'') {{.x}}\""),
        vec![ShellContext::DoubleQuoted]
    );
    assert_eq!(
        values_of("echo \"$(echo $'a {{.x}}')\""),
        vec![ShellContext::AnsiC]
    );
    assert_eq!(
        values_of("echo \"`echo $'\\''` {{.x}}\""),
        vec![ShellContext::DoubleQuoted]
    );
    assert_eq!(
        values_of("echo \"$(echo ${X:-'a b'}) {{.x}}\""),
        vec![ShellContext::DoubleQuoted]
    );
    assert_eq!(
        values_of("echo \"${X:-it's} {{.x}}\""),
        vec![ShellContext::DoubleQuoted]
    );
}

/// Breaker, second round: bash arithmetic (and variable-name) places the walker missed.
#[test]
fn every_arithmetic_place_is_unprotected() {
    let a = ShellContext::Arithmetic;
    for text in [
        "{{if true}}[[ {{.x}} -eq 1 ]]{{end}}",
        "[[ \"]]\" == x || {{.x}} -eq 1 ]]",
        "echo $[{{.x}}]",
        "echo \"$[{{.x}} + 1]\"",
        "let {{.x}}",
        "let n={{.x}}+1",
        "x=1 let \"{{.x}}\"",
        "[[ -v {{.x}} ]]",
        "[ -v {{.x}} ]",
        "test -v '{{.x}}'",
        "a[{{.x}}]=1",
        "a[\"{{.x}}\"]+=1",
        "declare -i n={{.x}}",
        "local -ri n=\"{{.x}}\"",
        "cat <<EOF\n$(( {{.x}} ))\nEOF",
        "cat <<EOF\n$[ {{.x}} ]\nEOF",
        "echo `let {{.x}}`",
        "if true; then let {{.x}}; fi",
    ] {
        assert_eq!(values_of(text), vec![a.clone()], "{text}");
    }
    // `$[1<<EOF]` is arithmetic to bash, a here-document to dash (h6).
    assert_eq!(
        values_of("echo $[1<<EOF]\necho {{.x}}"),
        vec![dependent(Dependence::ShiftOrHeredoc)]
    );
    // Arguments named like the commands are ordinary words; the command ends at `;`.
    for text in [
        "echo let {{.x}}",
        "let n=1; echo {{.x}}",
        "[[ {{.x}} == y ]]",
        "echo [[ -v ]] {{.x}}",
        "declare -r n={{.x}}",
        "export N={{.x}}",
        "echo a[1]={{.x}}",
    ] {
        assert_eq!(values_of(text), vec![BARE], "{text}");
    }
}

/// Breaker, second round: a quote in a template branch not taken still counted as open.
/// When the branches leave the shell state uneven, every value after them is unprotected;
/// balanced branches read as before.
#[test]
fn values_after_uneven_template_branches_are_unprotected() {
    let uneven = |b: &str| ShellContext::UnevenBranch {
        branch: b.to_owned(),
    };
    assert_eq!(
        values_of("echo {{if false}}\"{{end}} {{.x}}"),
        vec![uneven("{{if false}}")]
    );
    assert_eq!(
        values_of("echo {{if .a}}'{{else}}x{{end}} {{.x}}\necho {{.y}}"),
        vec![uneven("{{if .a}}"), uneven("{{if .a}}")]
    );
    assert_eq!(
        values_of("{{range .l}}$({{end}}echo {{.x}}"),
        vec![uneven("{{range .l}}")]
    );
    assert_eq!(
        values_of("{{with .a}}cat <<EOF {{end}}\n{{.x}}"),
        vec![uneven("{{with .a}}")]
    );
    // A comment left open in one branch: uneven to the end of its line only.
    assert_eq!(
        values_of("echo {{if .a}}#{{end}} {{.x}}\necho {{.y}}"),
        vec![uneven("{{if .a}}"), BARE]
    );
    // Inside the else branch the state is the one the if started from.
    assert_eq!(
        values_of("echo {{if .a}}\"{{.x}}\"{{else}}{{.y}}{{end}} {{.z}}"),
        vec![ShellContext::DoubleQuoted, BARE, BARE]
    );
    // Balanced branches: as before.
    assert_eq!(
        values_of("echo {{if .a}}\"a\"{{else}}'b'{{end}} {{.x}} \"{{.y}}\""),
        vec![BARE, ShellContext::DoubleQuoted]
    );
    assert_eq!(
        values_of("echo \"{{if .a}}x{{end}} {{.x}}\""),
        vec![ShellContext::DoubleQuoted]
    );
    assert_eq!(
        values_of("{{range .l}}echo \"{{.}}\";{{end}} {{.x}}"),
        vec![ShellContext::DoubleQuoted, BARE]
    );
}

/// Breaker (h4): in an unquoted here-document's body, `$( … )`, backticks and `${ … }` were
/// not seen, so a value in them was read as here-document text (and only its `\ $ ``
/// escaped). They are parsed as anywhere else; the here-documents around such a value are
/// named in `heredocs` (bash ends them at a line of the value equal to the delimiter).
#[test]
fn substitutions_inside_an_unquoted_here_document_are_read_as_shell() {
    let h = heredoc(false, false, "EOF");
    let eof = || vec!["EOF".to_owned()];
    // Each action's context and the here-documents around it.
    type Seen = Vec<(ShellContext, Vec<String>)>;
    let cases: Vec<(&str, Seen)> = vec![
        ("cat <<EOF\n$(echo {{.x}})\nEOF", vec![(SUBST, eof())]),
        ("cat <<EOF\n\"$(echo {{.x}})\"\nEOF", vec![(SUBST, eof())]),
        (
            "cat <<EOF\n$(echo \"{{.x}}\")\nEOF",
            vec![(ShellContext::DoubleQuoted, eof())],
        ),
        (
            "cat <<EOF\n$(echo '{{.x}}')\nEOF",
            vec![(ShellContext::SingleQuoted, eof())],
        ),
        (
            "cat <<EOF\n`echo {{.x}}`\nEOF",
            vec![(ShellContext::Backtick, eof())],
        ),
        (
            "cat <<-EOF\n\t`echo \"{{.x}}\"`\n\tEOF",
            vec![(ShellContext::DoubleQuoted, eof())],
        ),
        (
            "cat <<EOF\n${X:-{{.x}}}\nEOF",
            vec![(ShellContext::ParameterExpansion, eof())],
        ),
        // Quotes in the body itself are text; after a `$( )` the body goes on.
        (
            "cat <<EOF\n$(echo a) {{.x}} \"{{.y}}\" '{{.z}}'\nEOF\necho {{.w}}",
            vec![
                (h.clone(), vec![]),
                (h.clone(), vec![]),
                (h.clone(), vec![]),
                (BARE, vec![]),
            ],
        ),
        // A quoted here-document expands nothing.
        (
            "cat <<'EOF'\n$(echo {{.x}}) `{{.y}}`\nEOF",
            vec![
                (heredoc(true, false, "EOF"), vec![]),
                (heredoc(true, false, "EOF"), vec![]),
            ],
        ),
        // bash keeps `\"` in backticks there, dash unescapes it: unprotected.
        (
            "cat <<EOF\n`echo \\\"{{.x}}\\\"`\nEOF",
            vec![(ShellContext::AfterBackslash, eof())],
        ),
        // A here-document in a `$( )` in a here-document: the inner body's value has the
        // outer document around it.
        (
            "cat <<EOF\n$(cat <<EOT\n{{.x}}\nEOT\n)\n{{.y}}\nEOF\n{{.z}}",
            vec![
                (heredoc(false, false, "EOT"), eof()),
                (h, vec![]),
                (BARE, vec![]),
            ],
        ),
        (
            "cat <<EOF\n$(cat <<EOT\n$(echo {{.x}})\nEOT\n)\nEOF",
            vec![(SUBST, vec!["EOF".to_owned(), "EOT".to_owned()])],
        ),
        // bash reads the outer body's lines first: its delimiter ends it even inside `$(`
        // (dash reads on: the rest is unprotected).
        (
            "cat <<EOF\n$(echo a\nEOF\necho {{.x}}",
            vec![(dependent(Dependence::ClosingLineInSubstitution), vec![])],
        ),
        (
            "case x in\nx) cat <<EOF\n$(echo {{.x}})\nEOF\n;;\nesac\necho {{.y}}",
            vec![(SUBST, eof()), (BARE, vec![])],
        ),
        (
            "f() {\ncat <<EOF\n`echo {{.x}}`\nEOF\n}\nf {{.y}}",
            vec![(ShellContext::Backtick, eof()), (BARE, vec![])],
        ),
        (
            "echo \"$(cat <<EOF\n$(echo {{.x}})\nEOF\n)\" {{.y}}",
            vec![(SUBST, eof()), (BARE, vec![])],
        ),
        // Arithmetic in the body stays unprotected.
        (
            "cat <<EOF\n$(( {{.x}} + 1 ))\nEOF",
            vec![(ShellContext::Arithmetic, eof())],
        ),
    ];
    for (text, want) in cases {
        let got: Seen = shell_actions(text)
            .into_iter()
            .map(|a| (a.context, a.heredocs))
            .collect();
        assert_eq!(got, want, "{text}");
    }
}

/// Fuzzing (h4): a `#` right after the `)` of `$( … )` / `$(( … ))`, the `}` of `${ … }` or
/// a closing backtick is a character of the same word, not a comment (a backtick after it
/// was read as commented out and the value in it quoted for the wrong place); an escaped or
/// quoted `)` does not end `$(( … ))` (dash reads on past `\)`).
#[test]
fn a_hash_right_after_a_substitution_is_part_of_the_word() {
    let cases: Vec<(&str, Vec<ShellContext>)> = vec![
        ("echo $(echo a)#{{.x}}", vec![BARE]),
        ("echo `echo a`#{{.x}}", vec![BARE]),
        ("echo ${X}#{{.x}}", vec![BARE]),
        ("echo $((1))# {{.x}}", vec![BARE]),
        ("echo a # {{.x}}", vec![ShellContext::Comment]),
        ("(echo a)# {{.x}}", vec![ShellContext::Comment]),
        ("echo $((1+\\))+{{.x}}))", vec![ShellContext::Arithmetic]),
        ("echo $((1+')'+{{.x}}))", vec![ShellContext::Arithmetic]),
    ];
    for (text, want) in cases {
        assert_eq!(ctx_of(text), want, "{text}");
    }
    let a = shell_actions("$((1+;; esac ))# c `case a in a) EOF\n'{{.x}}");
    assert_eq!(
        a.iter()
            .map(|a| (a.context.clone(), a.inside_backticks))
            .collect::<Vec<_>>(),
        vec![(ShellContext::SingleQuoted, true)]
    );
}

/// Fuzzing (h4): bash finds the `))` ending `$(( … ))` through backticks and comments in it,
/// dash reads them as a substitution and a comment: after such a body, every value is
/// unprotected (where it lands depends on the shell). So after a here-document's closing line
/// inside a `$( )` of its body (bash ends the here-document there, dash reads on).
#[test]
fn text_bash_and_dash_read_differently_leaves_the_rest_unprotected() {
    for (text, cause) in [
        (
            "$((1+\\;`\nEOT\n))\\\\`{{.x}}",
            Dependence::ArithmeticBackticks,
        ),
        (
            "echo $((1+`echo 2 #))`+3)) {{.x}}",
            Dependence::ArithmeticBackticks,
        ),
        (
            "echo $(( 1 # ))\n)) {{.x}}",
            Dependence::ArithmeticBackticks,
        ),
        (
            "(( 1 + `echo 1` )); echo {{.x}}",
            Dependence::ArithmeticBackticks,
        ),
        (
            "cat <<EOF\n$(cat <<X\nEOF\nX\n)\n{{.x}}\nEOF",
            Dependence::ClosingLineInSubstitution,
        ),
        (
            "cat <<EOF\n`echo a\nEOF\necho {{.x}}`",
            Dependence::ClosingLineInSubstitution,
        ),
    ] {
        assert_eq!(ctx_of(text), vec![dependent(cause)], "{text}");
    }
    for cause in Dependence::ALL {
        let u = dependent(cause).unprotected();
        assert!(u.is_some_and(|u| u.place == cause.place()), "{cause:?}");
        assert_eq!(Dependence::from_code(cause.code()), Some(cause));
    }
    // A base (`2#101`) is no comment: the text after the expansion reads as before.
    assert_eq!(ctx_of("echo $((2#101)) {{.x}}"), vec![BARE]);
    assert_eq!(ctx_of("echo $((1+2)) {{.x}}"), vec![BARE]);
}

/// Breaker (h6), item 1: `<<` is a shift only in arithmetic; after `let`, `declare -i`,
/// `test -v` and `[ -v … ]` it opens a here-document in bash and dash alike (the next line
/// is its body). In bash's own arithmetic (`(( ))`, `$[ ]`, `a[…]=`, `a=( )`) dash opens
/// one where bash shifts: the rest is read differently by the shells.
#[test]
fn a_double_less_than_outside_arithmetic_opens_a_here_document() {
    let cases: Vec<(&str, Vec<ShellContext>)> = vec![
        (
            "let x=1<<2\necho {{.x}}\n2\necho {{.y}}",
            vec![heredoc(false, false, "2"), BARE],
        ),
        (
            "declare -i y=1<<2\necho {{.x}}\n2",
            vec![heredoc(false, false, "2")],
        ),
        (
            "test -v HOME <<EOF\necho {{.x}}\nEOF",
            vec![heredoc(false, false, "EOF")],
        ),
        (
            "[ -v HOME ] <<EOF\necho {{.x}}\nEOF",
            vec![heredoc(false, false, "EOF")],
        ),
        (
            "[[ -v HOME ]] <<EOF\necho {{.x}}\nEOF",
            vec![heredoc(false, false, "EOF")],
        ),
        ("let \"x=1<<2\"\necho {{.x}}", vec![BARE]),
        ("echo $((1<<2))\necho {{.x}}", vec![BARE]),
        (
            "echo \"$(cat <<EOF\n$((1<<2)) {{.x}}\nEOF\n)\"",
            vec![heredoc(false, false, "EOF")],
        ),
    ];
    for (text, want) in cases {
        assert_eq!(values_of(text), want, "{text}");
    }
    for text in [
        "((z=1<<2))\necho {{.x}}\n2",
        "echo $[1<<2]\necho {{.x}}\n2",
        "a[1<<2]=3\necho {{.x}}\n2",
        "x=([1<<2]=5)\necho {{.x}}\n2",
        "for ((i=1<<2; i<9; i++)); do :; done\necho {{.x}}",
    ] {
        assert_eq!(
            values_of(text),
            vec![dependent(Dependence::ShiftOrHeredoc)],
            "{text}"
        );
    }
}

/// Breaker (h6), item 2: a here-document's delimiter is quote-removed as the shells do it
/// (`<<E\\OF` ends at `E\OF`, `<<"E\"OF"` at `E"OF`); a delimiter the shells read
/// differently (`$'EOF'`: bash EOF, dash $EOF) or that awf cannot read for sure leaves the
/// rest unprotected.
#[test]
fn here_document_delimiters_are_read_as_the_shell_reads_them() {
    let cases: Vec<(&str, Vec<ShellContext>)> = vec![
        ("cat <<E\\\\OF\nE\\OF\necho {{.x}}", vec![BARE]),
        (
            "cat <<E\\\\OF\nEOF\n{{.x}}\nE\\OF",
            vec![heredoc(true, false, "E\\OF")],
        ),
        ("cat <<\"E\\\"OF\"\nE\"OF\necho {{.x}}", vec![BARE]),
        (
            "cat <<\"E\\xOF\"\nE\"OF\n{{.x}}\nE\\xOF\necho {{.y}}",
            vec![heredoc(true, false, "E\\xOF"), BARE],
        ),
        (
            "cat <<\"E\\$OF\"\n{{.x}}\nE$OF\necho {{.y}}",
            vec![heredoc(true, false, "E$OF"), BARE],
        ),
        ("cat <<E'\\'OF\nE\\OF\necho {{.x}}", vec![BARE]),
        ("cat <<\\'EOF\n'EOF\necho {{.x}}", vec![BARE]),
        (
            "cat <<$EOF\n{{.x}}\n$EOF\necho {{.y}}",
            vec![heredoc(false, false, "$EOF"), BARE],
        ),
        ("cat <<E\"O\"F\nEOF\necho {{.x}}", vec![BARE]),
        (
            "cat <<'é'\n{{.x}}\né\necho {{.y}}",
            vec![heredoc(true, false, "é"), BARE],
        ),
    ];
    for (text, want) in cases {
        assert_eq!(values_of(text), want, "{text}");
    }
    for text in [
        "cat <<$'EOF'\nEOF\necho {{.x}}\n$EOF",
        "cat <<$\"EOF\"\n$EOF\necho {{.x}}\nEOF",
    ] {
        assert_eq!(
            values_of(text),
            vec![dependent(Dependence::DollarQuotedDelimiter)],
            "{text}"
        );
    }
    for text in [
        "cat <<E$(x)OF\n{{.x}}",
        "cat <<E`x`F\n{{.x}}",
        "cat <<${x}\n{{.x}}",
        "cat <<\"E$(x)\"\n{{.x}}",
        "cat <<E\\\nOF\n{{.x}}",
        "cat <<\"E\n{{.x}}",
        "cat <<{{.y}}\n{{.x}}",
        "cat <<E{{.y}}\n{{.x}}",
    ] {
        assert_eq!(
            values_of(text).last(),
            Some(&dependent(Dependence::UnreadableDelimiter)),
            "{text}"
        );
    }
}

/// Breaker (h6), item 3: a here-document announced inside backticks ends at their closing
/// backtick (both shells), so the next line is a command; one announced in a `$( … )` that
/// closes on its line is read on by bash and ended by dash. A line break inside a `$( … )`
/// opened after the `<<` does not start the body.
#[test]
fn a_here_document_announced_in_a_substitution_ends_with_it() {
    assert_eq!(values_of("echo `cat <<EOF`\necho {{.x}}\nEOF"), vec![BARE]);
    assert_eq!(
        values_of("x=`cat <<'EOF'`; echo {{.x}}\necho {{.y}}"),
        vec![BARE, BARE]
    );
    for text in [
        "echo \"$(cat <<EOF)\"\necho {{.x}}\nEOF",
        "echo $(cat <<EOF) x\necho {{.x}}\nEOF",
        "echo `echo $(cat <<EOF)`\necho {{.x}}\nEOF",
    ] {
        assert_eq!(
            values_of(text),
            vec![dependent(Dependence::HeredocInClosedSubstitution)],
            "{text}"
        );
    }
    assert_eq!(
        values_of("cat <<EOF; echo $(echo a\necho {{.x}})\n{{.y}}\nEOF\necho {{.z}}"),
        vec![SUBST, heredoc(false, false, "EOF"), BARE]
    );
    assert_eq!(
        values_of("cat <<EOF; echo \"a\n{{.x}}\"\n{{.y}}\nEOF"),
        vec![ShellContext::DoubleQuoted, heredoc(false, false, "EOF")]
    );
    assert_eq!(
        values_of("cat <<EOF; echo `echo a\necho {{.x}}`\n{{.y}}\nEOF"),
        vec![ShellContext::Backtick, heredoc(false, false, "EOF")]
    );
}

/// Breaker (h6), item 4: in a `case` pattern no word is a reserved word but a first `esac`
/// (`case)` was read as opening another `case`, so the `$( )` around it never closed).
#[test]
fn words_in_case_patterns_are_not_reserved_words() {
    let arith = ShellContext::Arithmetic;
    let cases: Vec<(&str, Vec<ShellContext>)> = vec![
        (
            "echo \"$(case a in\n  b) echo;;\n  case) echo;;\nesac)\" {{.x}}",
            vec![BARE],
        ),
        (
            "echo $(case a in (esac) echo;; in) echo;; case|esac) echo;; esac) {{.x}}",
            vec![BARE],
        ),
        (
            "case a in (esac) let {{.x}};; {{.y}}|esac) let {{.z}};; esac",
            vec![arith.clone(), BARE, arith.clone()],
        ),
        ("case a in\n  case) let {{.x}};;\nesac", vec![arith.clone()]),
        (
            "case a in (b) echo;; (c) let {{.x}};; esac; echo {{.y}}",
            vec![arith.clone(), BARE],
        ),
        ("echo $(case a in (b) echo;; esac) {{.x}}", vec![BARE]),
        (
            "case {{.x}} in\na) let {{.y}};;\nesac; echo {{.z}}",
            vec![BARE, arith.clone(), BARE],
        ),
        (
            "case \"$1\"\nin\n  let) let {{.x}};;\nesac",
            vec![arith.clone()],
        ),
        (
            "case a in a) case b in b) echo;; esac;; case) let {{.x}};; esac; echo {{.y}}",
            vec![arith, BARE],
        ),
        ("case a in esac; echo {{.x}}", vec![BARE]),
        (
            "echo $(case a in a) echo $(echo b) {{.x}};; esac) {{.y}}",
            vec![SUBST, BARE],
        ),
    ];
    for (text, want) in cases {
        assert_eq!(values_of(text), want, "{text}");
    }
}

/// Hardening (h6): the variable names given to `declare` and its kin, `read`, `unset`,
/// `mapfile` and `printf -v`, a compound assignment's subscripts, `declare -n` and the
/// variables `declare -i` makes integers: bash evaluates an array subscript there (`read
/// 'a[$(cmd)]'` runs `cmd`). Their other words (values, prompts, here-strings) are ordinary.
#[test]
fn variable_names_given_to_builtins_are_unprotected() {
    let a = ShellContext::Arithmetic;
    for text in [
        "read {{.x}}",
        "read -r a {{.x}}",
        "read -ra {{.x}}",
        "read -p 'name: ' {{.x}}",
        "unset {{.x}}",
        "unset -v {{.x}}",
        "mapfile -t {{.x}} < f",
        "printf -v {{.x}} %s a",
        "printf -v{{.x}} %s a",
        "declare {{.x}}=1",
        "declare a{{.x}}",
        "local {{.x}}",
        "export {{.x}}=1",
        "local -n r={{.x}}",
        "declare -i n; n={{.x}}",
        "declare -i n; n+={{.x}}",
        "n={{.x}}; declare -i n",
        "typeset -ai n; n[1]={{.x}}",
        // h6 fuzzing: the `declare` spelled with a backslash or quotes.
        "\\declare -i n; n={{.x}}",
        "de\\clare -i n; n={{.x}}",
        "'local' -i n; n+={{.x}}",
        "x=([{{.x}}]=1)",
        "x+=(a ['{{.x}}']=1)",
        // `declare -a` (or `declare` of an array) re-reads a quoted `(…)` value.
        "declare -a x='({{.x}})'",
        "declare -a x={{.x}}",
        "local -A m=\"{{.x}}\"",
        "x=(); declare x={{.x}}",
        "declare -a x; declare x+='('{{.x}}')'",
        ". ./lib.sh; declare x={{.x}}",
        "declare -a x=({{.x}})`true`",
    ] {
        assert_eq!(values_of(text), vec![a.clone()], "{text}");
    }
    for text in [
        "read -p {{.x}} v",
        "read -r v <<< {{.x}}",
        "read v < {{.x}}",
        "printf '%s' {{.x}}",
        "printf -v v %s {{.x}}",
        "declare n={{.x}}",
        "export N={{.x}}",
        "n={{.x}}",
        "x=({{.x}} b)",
        "echo read {{.x}}",
        "mapfile -d {{.x}} arr",
        "declare -a x=({{.x}})",
        "declare -a x=a{{.x}}",
        "export x={{.x}}; y=(1)",
        "declare x={{.x}}",
        "x=(); export x={{.x}}",
    ] {
        assert_eq!(values_of(text), vec![BARE], "{text}");
    }
}

/// Fuzzing (h6): a command after a comment line, a line continuation, a redirection or
/// `command`/`builtin`, or with quotes in its name, is still a command (`# note\nlet {{x}}`
/// was read as an argument, so the value went in quoted and bash ran its subscript).
#[test]
fn commands_are_recognised_after_comments_continuations_and_redirections() {
    let a = ShellContext::Arithmetic;
    for text in [
        "# x\nlet {{.x}}",
        "#\ndeclare {{.x}}=1",
        "\\\nprintf -v {{.x}} %s x",
        "\\read {{.x}}",
        "'printf' -v {{.x}} x",
        "pri\\\nntf -v {{.x}} x",
        ">f read {{.x}}",
        "2>/dev/null read {{.x}}",
        "<<EOF read {{.x}}\nEOF",
        "command read {{.x}}",
        "builtin unset {{.x}}",
        "echo {{.y}} # read {{.z}}\nread {{.x}}",
        // A command name made by an expansion may be empty: the next word may be the
        // command.
        "$(true) command read {{.x}}",
        "$EMPTY read {{.x}}",
        "x=(1)`true` \\\ndeclare {{.x}}=1",
        // A value inside an assignment or as a redirection's target is no command name.
        "m+={{.y}} printf -v {{.x}} %s x",
        ">{{.y}} read {{.x}}",
        "x=({{.y}}) \\\n>f read {{.x}}",
        "x=({{.y}})! read {{.x}}",
        "`true`declare {{.x}}=1",
        "$(:)\"read\" {{.x}}",
        "2>&1 read {{.x}}",
        ">|f read {{.x}}",
        "time -p read {{.x}}",
        "command -p read {{.x}}",
    ] {
        assert_eq!(values_of(text).last(), Some(&a), "{text}");
    }
    // A quoted reserved word is a command's name, not the reserved word; so is one after
    // `command` or an expansion (h6 fuzzing: `$EOF case {{v}} in; { read {{v}}; }`).
    assert_eq!(values_of("'case' a in b) echo {{.x}}"), vec![BARE]);
    assert_eq!(
        values_of("$EOF \\\ncase {{.y}} in; { read {{.x}}; }"),
        vec![BARE, ShellContext::Arithmetic]
    );
    assert_eq!(
        values_of("command case {{.y}} in; { read {{.x}}; }"),
        vec![BARE, ShellContext::Arithmetic]
    );
    assert_eq!(values_of("echo >&2 {{.x}}"), vec![BARE]);
}

/// Fuzzing (h6): of the here-documents announced on a line, the one announced inside a
/// `$( … )` opens at the line break inside it; the one outside after the line that closes it.
#[test]
fn here_documents_open_at_the_line_break_of_their_own_level() {
    assert_eq!(
        values_of("cat <<A; x=\"$(cat <<B\n{{.x}}\nB\n)\"\n{{.y}}\nA\necho {{.z}}"),
        vec![heredoc(false, false, "B"), heredoc(false, false, "A"), BARE]
    );
    assert_eq!(
        values_of("cat <<-A; x=`cat <<B\n{{.x}}\nB\n`; cat <<\\C\n{{.y}}\nA\n{{.z}}\nC"),
        vec![
            heredoc(false, false, "B"),
            heredoc(false, true, "A"),
            heredoc(true, false, "C")
        ]
    );
}

/// Fuzzing-style probe (h6): bash joins an unquoted here-document's `\`-continued lines
/// before comparing them with the delimiter (`EO\` and `F` end it), dash does not: the rest
/// is read differently by the shells. A quoted one's lines are never joined.
#[test]
fn a_delimiter_made_of_continued_lines_is_read_differently() {
    for text in [
        "cat <<EOF\nEO\\\nF\necho {{.x}}\nEOF",
        "cat <<EOF\nEOF\\\n\necho {{.x}}\nEOF",
        "cat <<-EOF\n\tE\\\n\tOF\necho {{.x}}\nEOF",
    ] {
        assert_eq!(
            values_of(text),
            vec![dependent(Dependence::JoinedDelimiter)],
            "{text}"
        );
    }
    assert_eq!(
        values_of("cat <<'EOF'\nEO\\\nF\n{{.x}}\nEOF"),
        vec![heredoc(true, false, "EOF")]
    );
    assert_eq!(
        values_of("cat <<EOF\nx\\\nEOF\n{{.x}}\nEOF"),
        vec![heredoc(false, false, "EOF")]
    );
}
