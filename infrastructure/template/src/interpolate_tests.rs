use super::*;
use crate::test_support::Data;
use awf_domain::scope::ErrorInfo;
use awf_domain::scope::LoopFrame;
use pretty_assertions::assert_eq;
use serde_json::json;

fn render_with(data: &Data, t: &str) -> Result<String, TemplateError> {
    GoTemplates::new().render(t, &data.scope())
}

fn ok(t: &str) -> String {
    match render_with(&Data::new(), t) {
        Ok(s) => s,
        Err(e) => panic!("{t}: {e:?}"),
    }
}

fn undefined(t: &str) -> String {
    match render_with(&Data::new(), t) {
        Err(TemplateError::Undefined(path)) => path,
        other => panic!("{t}: expected Undefined, got {other:?}"),
    }
}

fn failed(data: &Data, t: &str) -> String {
    match render_with(data, t) {
        Err(TemplateError::Failed(m)) => m,
        other => panic!("{t}: expected Failed, got {other:?}"),
    }
}

#[test]
fn text_without_actions_is_returned_unchanged() {
    assert_eq!(ok(""), "");
    assert_eq!(ok("echo hello $HOME } {"), "echo hello $HOME } {");
    assert_eq!(GoTemplates::new().check("plain {text}"), Ok(()));
}

#[test]
fn printing_follows_the_go_table() {
    let mut data = Data::new();
    data.states.insert(
        "empty".to_owned(),
        crate::test_support::state("empty", "", Some(0)),
    );
    let cases = [
        ("{{.inputs.count}}", "3"),
        ("{{.inputs.flag}}", "false"),
        ("{{.inputs.fl}}", "2.5"),
        ("{{.inputs.list}}", "[a b]"),
        ("{{.inputs.m}}", "map[k:v]"),
        (
            "{{.states.agent.Response}}",
            "map[arr:[1 a] b:true big:1000000 f:2.5 n:3 nested:map[k:v] title:Hello]",
        ),
        // Divergence (docs/compatibility.md): Go prints 1e+06 for JSON 1000000.
        ("{{.states.agent.Response.big}}", "1000000"),
        ("{{.states.agent.JSON}}", "[map[a:1] map[a:2]]"),
        ("{{(index .states.agent.JSON 1).a}}", "2"),
        ("{{.states.empty.Response}}", "map[]"),
        ("{{.workflow.Duration}}", "1.501s"),
        ("{{.states.build.Output}}", "built ok\n"),
        ("{{escape \"it's a test\"}}", "'it'\\''s a test'"),
        ("{{split \"a, b ,c\" \",\"}}", "[a b c]"),
        ("{{printf \"%05d\" .inputs.count}}", "00003"),
        ("{{.states.agent.JSON | len}}", "2"),
        ("{{print nil}}", "<nil>"),
    ];
    for (t, want) in cases {
        assert_eq!(render_with(&data, t), Ok(want.to_owned()), "{t}");
    }
}

#[test]
fn loop_parent_at_top_level_has_no_value() {
    let data = Data::new().with_loop(json!("a"), 0, 1);
    // Divergence (docs/compatibility.md): Go prints `<nil>` for the dotted form.
    assert_eq!(
        render_with(&data, "{{.loop.Parent}}"),
        Ok("<no value>".to_owned())
    );
    assert_eq!(
        render_with(&data, "{{(loop).parent}}"),
        Ok("<no value>".to_owned())
    );
    assert_eq!(
        render_with(&data, "{{if .loop.Parent}}nested{{else}}top{{end}}"),
        Ok("top".to_owned())
    );
}

#[test]
fn namespaces_work_with_and_without_the_dot_in_both_casings() {
    let cases = [
        ("{{.inputs.name}}", "world"),
        ("{{inputs.name}}", "world"),
        ("{{states.build.Output}}", "built ok\n"),
        ("{{states.build.output}}", "built ok\n"),
        ("{{.states.build.output}}", "built ok\n"),
        (
            "{{.states.build.ExitCode}}/{{states.build.exit_code}}",
            "0/0",
        ),
        (
            "{{.states.build.Stderr}}{{.states.build.stderr}}",
            "warn\nwarn\n",
        ),
        (
            "{{.context.WorkingDir}} {{context.working_dir}}",
            "/work /work",
        ),
        (
            "{{.context.working_dir}} {{context.WorkingDir}}",
            "/work /work",
        ),
        ("{{context.User}}@{{.context.hostname}}", "alice@box"),
        ("{{workflow.Name}} {{.workflow.name}}", "demo demo"),
        ("{{.workflow.ID}} {{workflow.id}}", "run-1 run-1"),
        (
            "{{.workflow.CurrentState}} {{workflow.current_state}}",
            "build build",
        ),
        ("{{.workflow.StartedAt}}", "2025-01-02T03:04:05Z"),
        (
            "{{workflow.started_at}} {{workflow.duration}}",
            "2025-01-02T03:04:05Z 1.501s",
        ),
        (
            "{{.env.HOME}} {{env.HOME}}[{{env.EMPTY}}]",
            "/home/u /home/u[]",
        ),
        (
            "{{.awf.prompts_dir}} {{awf.prompts_dir}}",
            "/p/.awf/prompts /p/.awf/prompts",
        ),
        ("{{ inputs.name | escape }}", "world"),
        ("{{ if eq inputs.name \"world\" }}yes{{ end }}", "yes"),
    ];
    for (t, want) in cases {
        assert_eq!(ok(t), want, "{t}");
    }
}

#[test]
fn no_dot_namespaces_keep_reading_the_root_inside_range_and_with() {
    assert_eq!(
        ok("{{range .inputs.list}}{{.}}-{{inputs.name}};{{end}}"),
        "a-world;b-world;"
    );
    assert_eq!(
        ok("{{with .states.build}}{{.ExitCode}} {{states.agent.Output}}{{end}}"),
        "0 Hello"
    );
}

#[test]
fn state_fields_are_all_there() {
    let cases = [
        ("{{.states.agent.ExitCode}}", "0"),
        ("{{.states.check_tests_passed.ExitCode}}", "1"),
        ("{{.states.check_tests_passed.Status}}", "failed"),
        ("{{.states.build.status}}", "completed"),
        ("{{.states.check_tests_passed.Error}}", "exit status 1"),
        ("[{{.states.build.error}}]", "[]"),
        ("{{.states.agent.Response.title}}", "Hello"),
        ("{{.states.agent.response.n}}", "3"),
        ("{{.states.agent.TokensUsed}}", "15"),
        (
            "{{.states.agent.TokensInput}}/{{.states.agent.tokens_output}}",
            "10/5",
        ),
        ("{{.states.agent.TokensEstimated}}", "true"),
        ("{{.states.build.JSON}}", "<no value>"),
        ("{{.states.build.Attempt}}", "1"),
        (
            "{{.states.call.Outputs.result}} {{states.call.outputs.result}}",
            "x x",
        ),
    ];
    for (t, want) in cases {
        assert_eq!(ok(t), want, "{t}");
    }
}

#[test]
fn missing_keys_are_undefined_variables_with_their_path() {
    assert_eq!(undefined("{{.inputs.missing}}"), "inputs.missing");
    assert_eq!(undefined("{{inputs.missing}}"), "inputs.missing");
    assert_eq!(undefined("x {{ .states.build.Nope }}"), "states.build.Nope");
    assert_eq!(undefined("{{states.never_ran.Output}}"), "states.never_ran");
    assert_eq!(undefined("{{.env.UNSET_VARIABLE}}"), "env.UNSET_VARIABLE");
    assert_eq!(undefined("{{.inputs.m.zz.yy}}"), "inputs.m.zz");
    assert_eq!(undefined("{{.loop.Item}}"), "loop");
    assert_eq!(undefined("{{loop.index1}}"), "loop");
    assert_eq!(undefined("{{.error.Message}}"), "error");
    assert_eq!(undefined("{{.awf.cache_dir}}"), "awf.cache_dir");
    // In a pipeline: the chain that holds the missing key, not the key alone.
    assert_eq!(
        undefined("{{.inputs.missing | default \"none\"}}"),
        "inputs.missing"
    );
    assert_eq!(undefined("{{.workflow.Nope}}"), "workflow.Nope");
    assert_eq!(undefined("{{ if .inputs.nope }}a{{ end }}"), "inputs.nope");
    assert_eq!(undefined("{{ printf \"%d\" .inputs.nope }}"), "inputs.nope");
    assert_eq!(undefined("{{.inputs.name.x}}"), "inputs.name.x");
    assert_eq!(
        GoTemplates::new()
            .render("{{.inputs.missing}}", &Data::new().scope())
            .map_err(|e| e.to_string()),
        Err("undefined variable: inputs.missing".to_owned())
    );
}

#[test]
fn loop_items_print_as_text_or_compact_json() {
    let cases = [
        (json!("a.go"), "a.go", "\"a.go\""),
        (
            json!({"name": "S1", "a": [1, 2]}),
            r#"{"a":[1,2],"name":"S1"}"#,
            r#"{"a":[1,2],"name":"S1"}"#,
        ),
        (json!([1, "x"]), r#"[1,"x"]"#, r#"[1,"x"]"#),
        (json!(3), "3", "3"),
        (json!(2.5), "2.5", "2.5"),
        (json!(true), "true", "true"),
        (json!(null), "null", "null"),
        (json!("<a&b>"), "<a&b>", r#""\u003ca\u0026b\u003e""#),
    ];
    for (item, printed, as_json) in cases {
        let data = Data::new().with_loop(item.clone(), 0, 1);
        assert_eq!(
            render_with(&data, "{{.loop.Item}}"),
            Ok(printed.to_owned()),
            "{item}"
        );
        assert_eq!(
            render_with(&data, "{{loop.item}}"),
            Ok(printed.to_owned()),
            "{item}"
        );
        assert_eq!(
            render_with(&data, "{{json .loop.Item}}"),
            Ok(as_json.to_owned()),
            "json of {item}"
        );
    }
}

#[test]
fn loop_fields_and_nested_parent() {
    let mut data = Data::new();
    data.loop_frame = Some(LoopFrame {
        item: json!("inner"),
        index: 1,
        first: false,
        last: true,
        length: 2,
        parent: Some(Box::new(LoopFrame {
            item: json!({"dir": "src"}),
            index: 0,
            first: true,
            last: false,
            length: -1,
            parent: None,
        })),
    });
    let cases = [
        ("{{.loop.Index}} {{.loop.Index1}} {{loop.index1}}", "1 2 2"),
        (
            "{{.loop.First}} {{.loop.Last}} {{loop.length}}",
            "false true 2",
        ),
        ("{{.loop.Parent.Item}}", r#"{"dir":"src"}"#),
        ("{{json .loop.Parent.Item}}", r#"{"dir":"src"}"#),
        ("{{loop.parent.index1}} {{.loop.Parent.Length}}", "1 -1"),
        ("{{.loop.Parent.First}}", "true"),
        ("{{.loop.Parent.Parent}}", "<no value>"),
    ];
    for (t, want) in cases {
        assert_eq!(render_with(&data, t), Ok(want.to_owned()), "{t}");
    }
    assert_eq!(
        render_with(&data, "{{.loop.Parent.Parent.Item}}"),
        Err(TemplateError::Undefined(
            "loop.Parent.Parent.Item".to_owned()
        ))
    );
}

#[test]
fn error_namespace_is_only_present_in_error_hooks() {
    let mut data = Data::new();
    data.error = Some(ErrorInfo {
        message: "boom".to_owned(),
        state: "build".to_owned(),
        exit_code: 3,
        kind: "execution".to_owned(),
    });
    assert_eq!(
        render_with(
            &data,
            "{{.error.Message}}|{{error.message}}|{{error.State}}|{{.error.exit_code}}|{{error.Type}}"
        ),
        Ok("boom|boom|build|3|execution".to_owned())
    );
}

#[test]
fn escape_quotes_for_posix_sh() {
    let cases = [
        ("{{escape \"\"}}", "''"),
        ("{{escape \"plain-word_1.txt\"}}", "plain-word_1.txt"),
        ("{{escape \"a b\"}}", "'a b'"),
        ("{{escape \"$HOME\"}}", "'$HOME'"),
        ("{{escape \"x;rm -rf /\"}}", "'x;rm -rf /'"),
        ("{{escape .inputs.msg}}", "'it'\\''s a test'"),
        ("{{escape .inputs.count}}", "3"),
        ("{{escape .inputs.list}}", "'[a b]'"),
    ];
    for (t, want) in cases {
        assert_eq!(ok(t), want, "{t}");
    }
}

#[test]
fn split_join_trim_and_json() {
    let cases = [
        ("{{join (split \"a, b ,c\" \",\") \"-\"}}", "a-b-c"),
        ("{{range split \"x|y\" \"|\"}}<{{.}}>{{end}}", "<x><y>"),
        ("{{len (split \"\" \",\")}}", "1"),
        ("{{join .inputs.list \"+\"}}", "a+b"),
        ("[{{trimSpace \"  a b \\n\"}}]", "[a b]"),
        ("[{{.states.build.Output | trimSpace}}]", "[built ok]"),
        ("{{json .inputs.m}}", r#"{"k":"v"}"#),
        ("{{json .inputs.list}}", r#"["a","b"]"#),
        ("{{json .inputs.name}}", r#""world""#),
        ("{{json .inputs.count}}", "3"),
        ("{{json .states.agent.JSON}}", r#"[{"a":1},{"a":2}]"#),
    ];
    for (t, want) in cases {
        assert_eq!(ok(t), want, "{t}");
    }
    let m = failed(&Data::new(), "{{join \"abc\" \",\"}}");
    assert!(m.contains("join: the first argument must be a list"), "{m}");
}

/// New user: `upper`, `lower` and `default` (the Go-template names from sprig and Helm) were
/// "function not defined"; they are awf additions, and `trim` spells `trimSpace` as the
/// expression language does.
#[test]
fn upper_lower_trim_and_default() {
    let mut data = Data::new();
    data.states.insert(
        "empty".to_owned(),
        crate::test_support::state("empty", "", Some(0)),
    );
    let cases = [
        ("{{upper .inputs.name}}", "WORLD"),
        ("{{.inputs.name | upper}}", "WORLD"),
        ("{{lower \"ÉtÉ Mixed\"}}", "été mixed"),
        ("{{upper .inputs.count}}", "3"),
        ("[{{trim \"  a \\n\"}}]", "[a]"),
        ("{{.inputs.name | default \"none\"}}", "world"),
        ("{{default \"none\" .states.empty.Output}}", "none"),
        ("{{.states.empty.ExitCode | default 7}}", "7"),
        ("{{.inputs.flag | default \"off\"}}", "off"),
        ("{{default \"none\"}}", "none"),
    ];
    for (t, want) in cases {
        assert_eq!(render_with(&data, t).as_deref(), Ok(want), "{t}");
    }
    let m = failed(&data, "{{default}}");
    assert!(m.contains("default takes a fallback and a value"), "{m}");
    assert_eq!(
        GoTemplates::new().check("{{upper .x}} {{lower .y}} {{default 1 .z}}"),
        Ok(())
    );
}

#[test]
fn go_builtins_are_available() {
    let cases = [
        ("{{len .inputs.list}}", "2"),
        ("{{eq .inputs.name \"world\"}}", "true"),
        (
            "{{ne 1 2}} {{lt 1 2}} {{le 2 2}} {{gt 1 2}} {{ge 2 1}}",
            "true true true false true",
        ),
        (
            "{{and true false}} {{or false \"x\"}} {{not true}}",
            "false x false",
        ),
        ("{{index .inputs.list 1}}", "b"),
        ("{{slice \"abcd\" 1 3}}", "bc"),
        (
            "{{print 1 \"a\"}}|{{print 1 2}}|{{println \"x\"}}",
            "1a|1 2|x\n",
        ),
        ("{{html \"<a href='x'>\"}}", "&lt;a href=&#39;x&#39;&gt;"),
        ("{{urlquery \"a b&c\"}}", "a+b%26c"),
        ("{{js \"it's\"}}", "it\\'s"),
        ("{{printf \"%s=%q\" \"k\" \"v\"}}", "k=\"v\""),
    ];
    for (t, want) in cases {
        assert_eq!(ok(t), want, "{t}");
    }
}

#[test]
fn actions_trim_markers_and_comments() {
    let cases = [
        ("{{- if .inputs.flag }}yes{{ else }}no{{ end -}}", "no"),
        ("a  {{- \"b\" -}}  c", "abc"),
        ("{{if .inputs.flag}}1{{else if .inputs.count}}2{{end}}", "2"),
        ("{{with .states.build}}{{.ExitCode}}{{end}}", "0"),
        (
            "{{range $i, $e := .inputs.list}}{{$i}}={{$e}};{{end}}",
            "0=a;1=b;",
        ),
        ("{{$n := .inputs.name}}{{$n}}", "world"),
        ("x{{/* inputs.nothing */}}y", "xy"),
        ("{{\"inputs.x\"}}", "inputs.x"),
        (
            "{{range .inputs.list}}{{if eq . \"b\"}}{{break}}{{end}}{{.}}{{end}}",
            "a",
        ),
    ];
    for (t, want) in cases {
        assert_eq!(ok(t), want, "{t}");
    }
}

#[test]
fn read_file_resolves_against_the_workflow_directory() -> std::io::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("notes.txt"), "hello file\n")?;
    std::fs::write(dir.path().join("big.txt"), vec![b'x'; 1024 * 1024 + 1])?;
    std::fs::create_dir(dir.path().join("sub"))?;
    let mut data = Data::new();
    data.workflow_dir = dir.path().to_path_buf();
    assert_eq!(
        render_with(&data, "{{readFile \"notes.txt\"}}"),
        Ok("hello file\n".to_owned())
    );
    let abs = dir.path().join("notes.txt");
    assert_eq!(
        render_with(
            &data,
            &format!("{{{{readFile \"{}\" | trimSpace}}}}", abs.display())
        ),
        Ok("hello file".to_owned())
    );
    let m = failed(&data, "{{readFile \"big.txt\"}}");
    assert!(
        m.contains("is 1048577 bytes, more than the 1 MiB limit"),
        "{m}"
    );
    let m = failed(&data, "{{readFile \"sub\"}}");
    assert!(m.contains("is a directory"), "{m}");
    let m = failed(&data, "{{readFile \"missing.txt\"}}");
    assert!(m.contains("readFile: ") && m.contains("missing.txt"), "{m}");
    Ok(())
}

#[test]
fn parse_and_function_errors_are_failures() {
    let m = failed(&Data::new(), "{{ bad }}");
    assert_eq!(
        m,
        "template parse error at line 1, column 4: function bad not defined"
    );
    let m = failed(&Data::new(), "{{ if .inputs.flag }}unterminated");
    assert!(m.starts_with("template parse error"), "{m}");
    // A position past a list's end is an error, as in Go.
    let m = failed(&Data::new(), "{{ index .inputs.list 5 }}");
    assert!(m.starts_with("template error at line 1, column 4: "), "{m}");
    let m = failed(&Data::new(), "{{inputs.name}} {{ bad }}");
    assert_eq!(
        m,
        "template parse error at line 1, column 20: function bad not defined"
    );
    let m = failed(&Data::new(), "{{ len 3 }}");
    assert!(m.starts_with("template error at line 1, column 4: "), "{m}");
}

/// New user: `{{.inputs.who | upcase}}` got `function upcase not defined` without a
/// did-you-mean (three edits from `upper`): another template language's name points at
/// awf's, at validation (`check`, the hint after the separator) and at run time (`render`,
/// in the message).
#[test]
fn an_unknown_function_names_the_one_meant_at_check_and_render() {
    let t = GoTemplates::new();
    assert_eq!(
        t.check("echo {{.inputs.who | upcase}}"),
        Err(TemplateError::Failed(
            "template parse error at line 1, column 22: function upcase not defined\nhint: did you mean 'upper'?"
                .to_owned()
        ))
    );
    assert_eq!(
        failed(&Data::new(), "echo {{.inputs.who | upcase}}"),
        "template parse error at line 1, column 22: function upcase not defined (did you mean 'upper'?)"
    );
    for (name, meant) in [
        ("downcase", Some("lower")),
        ("Strip", Some("trim")),
        ("length", Some("len")),
        ("to_json", Some("json")),
        ("shellescape", Some("shell_quote")),
        ("trimspace", Some("trimSpace")),
        ("Shell_Quote", Some("shell_quote")),
        ("uper", Some("upper")),
        ("frobnicate", None),
    ] {
        assert_eq!(crate::interpolate::function_meant(name), meant, "{name}");
    }
}

#[test]
fn check_parses_without_rendering() {
    let t = GoTemplates::new();
    assert_eq!(
        t.check("{{inputs.x}} {{.states.never.Output}} {{loop.Item}}"),
        Ok(())
    );
    assert_eq!(t.check("{{ range .inputs.list }}{{ . }}{{ end }}"), Ok(()));
    assert!(matches!(t.check("{{ if }}"), Err(TemplateError::Failed(_))));
    assert!(matches!(
        t.check("{{ nosuchfunc 1 }}"),
        Err(TemplateError::Failed(_))
    ));
    assert!(matches!(t.check("{{ .x "), Err(TemplateError::Failed(_))));
}

#[test]
fn hostile_templates_are_bounded() {
    let m = failed(&Data::new(), "{{range 20000000}}x{{end}}");
    assert!(m.contains("iterations"), "{m}");
}

#[test]
fn the_whole_root_can_be_printed() {
    let out = ok("{{range $k, $v := .}}{{$k}} {{end}}");
    assert_eq!(out, "awf context env inputs states workflow ");
}

#[test]
fn read_file_refuses_fifos_devices_and_directories() -> std::io::Result<()> {
    let dir = tempfile::tempdir()?;
    let fifo = dir.path().join("fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status()?;
    assert!(made.success());
    std::fs::write(dir.path().join("real.txt"), "via link")?;
    std::os::unix::fs::symlink(dir.path().join("real.txt"), dir.path().join("link.txt"))?;
    std::os::unix::fs::symlink(&fifo, dir.path().join("fifo-link"))?;
    let mut data = Data::new();
    data.workflow_dir = dir.path().to_path_buf();
    let shown = |name: &str| dir.path().join(name).display().to_string();
    assert_eq!(
        failed(&data, "{{readFile \"fifo\"}}"),
        format!(
            "template error at line 1, column 3: readFile: {} is a named pipe (FIFO), not a regular file",
            shown("fifo")
        )
    );
    let m = failed(&data, "{{readFile \"fifo-link\"}}");
    assert!(
        m.ends_with(&format!(
            "readFile: {} is a named pipe (FIFO), not a regular file",
            shown("fifo-link")
        )),
        "{m}"
    );
    let m = failed(&data, "{{readFile \"/dev/zero\"}}");
    assert!(
        m.ends_with("readFile: /dev/zero is a device, not a regular file"),
        "{m}"
    );
    let m = failed(&data, "{{readFile \"/dev/null\"}}");
    assert!(
        m.ends_with("readFile: /dev/null is a device, not a regular file"),
        "{m}"
    );
    let m = failed(&data, "{{readFile \".\"}}");
    assert!(m.ends_with("is a directory, not a regular file"), "{m}");
    assert_eq!(
        render_with(&data, "{{readFile \"link.txt\"}}"),
        Ok("via link".to_owned())
    );
    // /proc files report size 0 but still have content; reading is bounded by `take`.
    let status = render_with(&data, "{{readFile \"/proc/self/status\"}}").unwrap_or_default();
    assert!(status.starts_with("Name:"), "{status}");
    Ok(())
}

/// Runs `f` on a thread with a 2 MiB stack, the size of a tokio worker's.
fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn template_nested_parentheses_are_refused_before_parsing() {
    let deep = |n: usize| format!("{{{{{}1{}}}}}", "(".repeat(n), ")".repeat(n));
    let ifs = |n: usize, inner: &str| {
        format!("{}{inner}{}", "{{if true}}".repeat(n), "{{end}}".repeat(n))
    };
    let want =
        TemplateError::Failed("expression nested too deeply (more than 64 levels)".to_owned());
    let t = GoTemplates::new();
    for n in [65, 129, 600, 2000, 10_000] {
        assert_eq!(
            render_with(&Data::new(), &deep(n)),
            Err(want.clone()),
            "{n}"
        );
        assert_eq!(t.check(&deep(n)), Err(want.clone()), "{n}");
        assert_eq!(
            t.render_shell(&format!("echo \"{}\"", deep(n)), &Data::new().scope()),
            Err(want.clone()),
            "{n}"
        );
    }
    // Blocks and parentheses add up.
    assert_eq!(t.check(&ifs(33, &deep(32))), Err(want.clone()));
    assert_eq!(
        t.check(&format!("{{{{- if true}}}}{}{{{{end}}}}", deep(64))),
        Err(want)
    );
    // At the limit everything still parses and renders on a 2 MiB stack in a debug build.
    assert_eq!(on_small_stack(move || ok(&deep(64))), "1");
    assert_eq!(on_small_stack(move || ok(&ifs(32, &deep(32)))), "1");
    assert_eq!(on_small_stack(move || ok(&ifs(64, "x"))), "x");
    // Sequential blocks do not nest; parentheses in literals and plain text do not count.
    assert_eq!(
        ok(&format!("{}{}", ifs(1, "a").repeat(100), deep(64))),
        format!("{}1", "a".repeat(100))
    );
    let quoted = format!("{}{{{{\"{}\"}}}}", "(".repeat(300), "(".repeat(300));
    assert_eq!(ok(&quoted), "(".repeat(600));
}

/// Deterministic pseudo-random text over an alphabet rich in template syntax.
fn hostile_texts(count: usize) -> Vec<String> {
    const PIECES: &[&str] = &[
        "{{",
        "}}",
        "{{-",
        "-}}",
        "\"",
        "'",
        "`",
        "\\",
        "é",
        "€",
        "𝄞",
        "(",
        ")",
        "[",
        "]",
        ".",
        "$",
        "inputs",
        "states",
        ".x",
        "if",
        "end",
        "range",
        " ",
        "\n",
        "/*",
        "*/",
        "|",
        "printf",
        "1",
        "-9223372036854775808",
        "9e999",
        "readFile",
        "json",
        ",",
        ":=",
    ];
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    (0..count)
        .map(|_| {
            let len = (next() % 24) as usize;
            (0..len)
                .map(|_| PIECES[(next() % PIECES.len() as u64) as usize])
                .collect()
        })
        .collect()
}

#[test]
fn hostile_template_text_never_panics() {
    let t = GoTemplates::new();
    let data = Data::new();
    for text in hostile_texts(3000) {
        let _ = t.check(&text);
        let _ = t.render(&text, &data.scope());
        let _ = t.render_shell(&text, &data.scope());
        let ev = crate::expression::ExprEvaluator::new();
        let _ = awf_domain::ports::template::ExpressionEvaluator::check(&ev, &text);
        let _ = awf_domain::ports::template::ExpressionEvaluator::eval_int(&ev, &text);
        let _ =
            awf_domain::ports::template::ExpressionEvaluator::eval_bool(&ev, &text, &data.scope());
    }
}

#[test]
fn to_json_is_an_alias_of_json() {
    for arg in [".inputs.m", ".inputs.list", ".inputs.name", ".inputs.count"] {
        assert_eq!(
            ok(&format!("{{{{toJson {arg}}}}}")),
            ok(&format!("{{{{json {arg}}}}}")),
            "{arg}"
        );
    }
    assert_eq!(ok("{{.inputs.m | toJson}}"), r#"{"k":"v"}"#);
    assert_eq!(GoTemplates::new().check("{{toJson .inputs.m}}"), Ok(()));
}

/// A text is parsed once per renderer (gtmpl-ng lexes each parse on a thread of its own):
/// the second render of the same text uses the kept parse, the clones of a renderer share
/// it, and what the render gives does not depend on it.
#[test]
fn a_text_is_parsed_once_and_its_parse_is_shared() {
    let t = GoTemplates::new();
    let data = Data::new();
    let text = "a {{.inputs.name}} b";
    let first = t.render(text, &data.scope()).unwrap();
    let kept = |t: &GoTemplates| t.parsed.lock().unwrap().len();
    assert_eq!(kept(&t), 1);
    let clone = t.clone();
    assert_eq!(clone.render(text, &data.scope()).unwrap(), first);
    assert_eq!(kept(&t), 1, "the clone parsed it again");
    assert!(t.check("{{.inputs.name}} and more").is_ok());
    assert_eq!(kept(&t), 2);
    // A text that does not parse is not kept.
    assert!(t.check("{{ if }}").is_err());
    assert_eq!(kept(&t), 2);
}

/// Calls the parser accepts but no render can carry out are refused by `check` (so `awf
/// validate` reports them) and by the render, with what to write instead: a namespace called
/// with arguments, `{{template}}` of a name the text does not define. Namespaces used as
/// arguments, in parentheses or piped into a field chain stay valid.
#[test]
fn namespaces_called_with_arguments_and_undefined_templates_are_refused() {
    let t = GoTemplates::new();
    for bad in [
        "{{env \"HOME\"}}",
        "{{- inputs \"x\" -}}",
        "{{ printf \"%s\" (env \"HOME\") }}",
        "{{ \"x\" | printf \"%s\" | inputs 1 }}",
        "{{ .inputs.x | env }}",
    ] {
        let Err(TemplateError::Failed(m)) = t.check(bad) else {
            panic!("{bad}: accepted");
        };
        assert!(
            m.contains("is a namespace and takes no arguments: write `{{."),
            "{bad}: {m}"
        );
    }
    let Err(TemplateError::Failed(m)) = t.check("a {{template \"nope\"}} b") else {
        panic!("undefined template accepted");
    };
    assert_eq!(
        m,
        "{{template \"nope\"}} names a template this text does not define: add {{define \"nope\"}}...{{end}} or remove the call"
    );
    for good in [
        "{{index env \"HOME\"}}",
        "{{ (env).HOME }} {{ env.HOME }} {{inputs}} {{ inputs -}}",
        "{{with inputs}}{{.x}}{{end}} {{ $e := env }}{{ range $k, $v := inputs }}{{end}}",
        "{{define \"x\"}}y{{end}}{{template \"x\"}} {{block \"b\" .}}z{{end}}{{template \"b\"}}",
        "{{ \"env\" }} {{ printf \"%s\" \"inputs x\" }}",
    ] {
        assert_eq!(t.check(good), Ok(()), "{good}");
    }
    let data = Data::new();
    assert!(failed(&data, "{{env \"HOME\"}}").contains("takes no arguments"));
}

/// `index` answers a key a map lacks with the zero value, as Go's does (`missingkey=error`
/// governs `.field`, not `index`): the way to test an optional variable or a state that may
/// not have run (breaker: `index: no entry for key`).
#[test]
fn index_of_a_missing_key_is_the_zero_value() {
    let mut data = Data::new();
    data.states.insert(
        "build".to_owned(),
        crate::test_support::state("build", "built ok\n", Some(0)),
    );
    let cases = [
        ("[{{index .env \"UNSET_X_VARIABLE\"}}]", "[]"),
        (
            "{{if index .env \"UNSET_X_VARIABLE\"}}set{{else}}unset{{end}}",
            "unset",
        ),
        ("[{{(index .states \"later\").Output}}]", "[]"),
        ("{{(index .states \"later\").ExitCode}}", "0"),
        ("{{(index .states \"build\").Output}}", "built ok\n"),
        // Nothing of another state shows through the zero state (breaker: its `JSON` held
        // the agent step's keys and tested true).
        (
            "{{if (index .states \"later\").JSON}}set{{else}}unset{{end}}",
            "unset",
        ),
        (
            "{{if (index .states \"later\").Response}}set{{else}}unset{{end}}",
            "unset",
        ),
        ("[{{index .inputs.m \"q\"}}]", "[]"),
        ("{{index .inputs.m \"k\"}}", "v"),
        ("{{index .inputs.list 1}}", "b"),
        ("{{index \"abc\" 1}}", "98"),
    ];
    for (t, want) in cases {
        assert_eq!(render_with(&data, t).as_deref(), Ok(want), "{t}");
    }
}

/// Before any state ran, `.states` is an empty map: `index` of it gives the zero state too,
/// as Go's typed map does (it gave `<no value>`: no sibling to take the shape from).
#[test]
fn index_of_states_before_any_ran_is_the_zero_state() {
    let mut data = Data::new();
    data.states.clear();
    data.inputs.insert("none".to_owned(), serde_json::json!({}));
    for (t, want) in [
        ("[{{(index .states \"later\").Output}}]", "[]"),
        ("{{(index .states \"later\").ExitCode}}", "0"),
        ("[{{(index .states \"later\").Status}}]", "[]"),
        (
            "{{if (index .states \"later\").JSON}}set{{else}}unset{{end}}",
            "unset",
        ),
        // Another empty map is still no value.
        ("{{index .inputs.none \"q\"}}", "<no value>"),
    ] {
        assert_eq!(render_with(&data, t).as_deref(), Ok(want), "{t}");
    }
}

/// Breaker: `.loop.Parent.Item` in a loop not inside another failed with "undefined
/// variable: " naming nothing. It names the chain, up to the nil `Parent`.
#[test]
fn a_field_of_the_top_loops_parent_names_the_chain() {
    let data = Data::new().with_loop(json!("a"), 0, 1);
    for shell in [false, true] {
        let t = "echo \"{{.loop.Parent.Item}}\"";
        let got = if shell {
            GoTemplates::new().render_shell(t, &data.scope())
        } else {
            render_with(&data, t)
        };
        match got {
            Err(TemplateError::Undefined(path)) => assert_eq!(path, "loop.Parent.Item"),
            other => panic!("shell {shell}: expected Undefined, got {other:?}"),
        }
    }
}

/// A skipped state (a parallel branch that never started) has no `ExitCode` (trial: it read
/// 0, as success does); its `Status` reads `skipped`. `index` of a state that has not run
/// still gives the zero state, whichever sibling its shape is taken from.
#[test]
fn a_skipped_state_has_no_exit_code() {
    let mut data = Data::new();
    data.states.clear();
    let mut skipped = crate::test_support::state("b", "", None);
    skipped.status = awf_domain::run::StepStatus::Skipped;
    data.states.insert("b".to_owned(), skipped);
    assert_eq!(
        render_with(&data, "{{.states.b.Status}} [{{.states.b.Output}}]").as_deref(),
        Ok("skipped []")
    );
    for t in ["{{.states.b.ExitCode}}", "{{.states.b.exit_code}}"] {
        assert!(
            matches!(render_with(&data, t), Err(TemplateError::Undefined(ref p)) if p.starts_with("states.b.")),
            "{t}: {:?}",
            render_with(&data, t)
        );
    }
    assert_eq!(
        render_with(&data, "{{(index .states \"later\").ExitCode}}").as_deref(),
        Ok("0")
    );
}

/// A field of `.loop.Item` fails (the item is text: an object item is its JSON), with a hint
/// that says how to read one; `index` on it too; other undefined fields stay `Undefined`.
#[test]
fn a_field_of_a_loop_item_fails_with_how_to_read_one() {
    let sep = awf_domain::ports::template::HINT_SEPARATOR;
    let hint = awf_domain::validate::loop_item_field_hint("name");
    let data = Data::new().with_loop(json!({"name": "api", "port": 8080}), 0, 1);
    assert_eq!(
        render_with(&data, "{{.loop.Item}}"),
        Ok("{\"name\":\"api\",\"port\":8080}".to_owned())
    );
    assert_eq!(
        failed(&data, "echo {{.loop.Item.name}}"),
        format!(
            "undefined variable: loop.Item.name (`.loop.Item` is the item as text: an object item is its JSON text){sep}{hint}"
        )
    );
    assert_eq!(
        failed(&data, "{{index .loop.Item \"name\"}}"),
        format!(
            "template error at line 1, column 3: index: no entry for key name (`.loop.Item` is the item as text: an object item is its JSON text){sep}{hint}"
        )
    );
    assert_eq!(
        render_with(&data, "{{.inputs.nothing}}"),
        Err(TemplateError::Undefined("inputs.nothing".to_owned()))
    );
    assert_eq!(loop_item_field("loop.Parent.item.port"), Some("port"));
    assert_eq!(loop_item_field("loop.Item"), None);
    assert_eq!(loop_item_field("loop.Index.x"), None);
    assert_eq!(loop_item_field("inputs.Item.x"), None);
}

/// A relative `readFile` path not found in the workflow's directory gets a hint naming it
/// and the working directory (and that the file is there, when it is); an absolute path or
/// a file that exists but cannot be read gets none.
#[test]
fn a_relative_read_file_that_finds_nothing_has_a_hint() -> std::io::Result<()> {
    let sep = awf_domain::ports::template::HINT_SEPARATOR;
    let wf = tempfile::tempdir()?;
    let cwd = tempfile::tempdir()?;
    std::fs::write(cwd.path().join("in-cwd.txt"), "x")?;
    std::fs::create_dir(wf.path().join("sub"))?;
    let mut data = Data::new();
    data.workflow_dir = wf.path().to_path_buf();
    data.context.working_dir = cwd.path().display().to_string();
    let m = failed(&data, "{{readFile \"in-cwd.txt\"}}");
    let (_, hint) = m.split_once(sep).unwrap_or_else(|| panic!("{m}"));
    assert_eq!(
        hint,
        format!(
            "a relative readFile path is read from the workflow file's directory ({}), not from the working directory (in-cwd.txt is in the working directory, {}); to read it from the working directory, join them: `{{{{readFile (printf \"%s/%s\" .context.WorkingDir .inputs.file)}}}}`, or pass an absolute path",
            wf.path().display(),
            cwd.path().display()
        )
    );
    let m = failed(&data, "{{readFile \"nowhere.txt\"}}");
    assert!(
        m.contains("not from the working directory; to read it"),
        "{m}"
    );
    let m = failed(&data, "{{readFile \"/nonexistent/abs.txt\"}}");
    assert!(!m.contains(sep), "{m}");
    let m = failed(&data, "{{readFile \"sub\"}}");
    assert!(!m.contains(sep), "{m}");
    Ok(())
}

/// Trial h4: `printf` took widths up to 10^7 (a 10 MB text per verb); above 10^6 is refused,
/// naming the verb, and 10^6 itself is Go's.
#[test]
fn printf_widths_and_precisions_stop_at_a_million() {
    let data = Data::new();
    for (t, n, verb) in [
        (r#"{{printf "%09999999d" 1}}"#, 9_999_999, "%09999999d"),
        (r#"{{printf "x%-1000001sy" "a"}}"#, 1_000_001, "%-1000001s"),
        (r#"{{printf "%.2000000f" 1.5}}"#, 2_000_000, "%.2000000f"),
        (r#"{{printf "%5.1000001f" 1.5}}"#, 1_000_001, "%5.1000001f"),
        (r#"{{printf "%[1]2000000d" 1}}"#, 2_000_000, "%[1]2000000d"),
    ] {
        let m = failed(&data, t);
        assert!(
            m.contains(&format!(
                "printf: the width or precision {n} of \"{verb}\" is more than 1000000"
            )),
            "{t}: {m}"
        );
    }
    assert_eq!(ok(r#"{{printf "%01000000d" 7}}"#).len(), 1_000_000);
    assert_eq!(
        ok(r#"{{printf "%%%5d|%-3s|%.2f" 7 "a" 1.5}}"#),
        "%    7|a  |1.50"
    );
}

/// Trial h4: a template `split` into millions of pieces took a gigabyte; refused before the
/// pieces are built, with the budget's hint.
#[test]
fn a_split_past_the_render_budget_is_refused_with_a_hint() {
    let mut data = Data::new();
    data.states.insert(
        "big".into(),
        crate::test_support::state("big", &"a".repeat(5_000_000), Some(0)),
    );
    let m = failed(&data, r#"{{len (split .states.big.Output "")}}"#);
    assert!(
        m.starts_with("template would create more than 256 MiB of values")
            && m.contains("\nhint: split, repeat, map and ranges"),
        "{m}"
    );
    // A line split of the same text is within it.
    assert_eq!(
        render_with(&data, r#"{{len (split .states.big.Output "\n")}}"#),
        Ok("1".to_owned())
    );
}

/// A render stops at the next function call once its run is cancelled.
#[test]
fn a_stopped_render_ends_at_its_next_function() {
    use awf_domain::ports::template::RenderMode;
    let data = Data::new();
    let ev = GoTemplates::new()
        .prepare(
            r#"{{range $i := split "a,b,c" ","}}{{upper $i}}{{end}}"#,
            &data.scope(),
            RenderMode::Plain,
        )
        .unwrap();
    assert!(!ev.light);
    let r = ev.run(std::sync::Arc::new(|| true));
    assert_eq!(
        r,
        Err(TemplateError::Failed(
            "template stopped: the run is being cancelled".to_owned()
        ))
    );
    let ev = GoTemplates::new()
        .prepare(
            "echo {{.inputs.name}} {{upper .inputs.name}}",
            &data.scope(),
            RenderMode::Shell,
        )
        .unwrap();
    assert!(ev.light);
    assert_eq!(
        ev.run(std::sync::Arc::new(|| false)),
        Ok("echo world WORLD".to_owned())
    );
}
