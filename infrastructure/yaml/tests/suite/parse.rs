use std::collections::BTreeMap;
use std::time::Duration;

use awf_domain::ErrorCode;
use awf_domain::ports::repository::Severity;
use awf_domain::workflow::*;
use awf_yaml::parse_workflow_with;
use indexmap::IndexMap;
use pretty_assertions::assert_eq;
use serde_json::json;

use super::common::*;

#[test]
fn minimal_workflow_and_source_map() {
    let text = "name: hello\nversion: 1.0\nstates:\n  initial: start\n  start:\n    type: step\n    command: echo hi\n    on_success: done\n  done:\n    type: terminal\n";
    let l = load(text).unwrap();
    let w = &l.workflow;
    assert_eq!(w.name, "hello");
    assert_eq!(w.version.as_deref(), Some("1.0"));
    assert_eq!(w.initial, "start");
    assert_eq!(w.states.keys().collect::<Vec<_>>(), vec!["start", "done"]);
    let start = &w.states["start"];
    assert_eq!(
        start.kind,
        StateKind::Command(CommandStep {
            source: CommandSource::Inline("echo hi".into()),
            dir: None
        })
    );
    assert_eq!(start.on_success.as_deref(), Some("done"));
    assert_eq!(
        w.states["done"].kind,
        StateKind::Terminal(TerminalState {
            status: TerminalStatus::Success,
            message: None,
            exit_code: None
        })
    );
    assert_eq!(l.source_map.locate("states.start.on_success"), Some((8, 5)));
    assert_eq!(l.source_map.locate("states.done"), Some((9, 3)));
    assert_eq!(l.source_map.locate("name"), Some((1, 1)));
    assert_eq!(l.diagnostics, Vec::new());
}

#[test]
fn sequence_items_are_positioned() {
    let text = with_states(
        "  a:\n    type: while\n    while: 'true'\n    body:\n      - b\n      - c\n    on_complete: done\n  b:\n    type: step\n    command: x\n  c:\n    type: step\n    command: y\n",
    );
    let l = load(&text).unwrap();
    assert_eq!(l.source_map.locate("states.a.body.0"), Some((8, 9)));
    assert_eq!(l.source_map.locate("states.a.body.1"), Some((9, 9)));
}

#[test]
fn unknown_keys_warn_and_ineffective_keys_note() {
    let text = "name: t\nmonitoring: {x: 1}\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo\n    operation: shell\n    depends_on: [x]\n    capture:\n      stdout: out\n      max_size: 512KB\n    on_sucess: done\n    on_success: done\n  done:\n    type: terminal\n";
    let l = load(text).unwrap();
    let got: Vec<(
        Severity,
        ErrorCode,
        String,
        Option<u32>,
        Option<u32>,
        Option<String>,
    )> = l
        .diagnostics
        .iter()
        .map(|d| {
            (
                d.severity,
                d.code,
                d.path.clone(),
                d.line,
                d.column,
                d.hint.clone(),
            )
        })
        .collect();
    let uf = ErrorCode::WorkflowParseUnknownField;
    assert_eq!(
        got,
        vec![
            (
                Severity::Note,
                uf,
                "states.a.capture.stdout".into(),
                Some(11),
                Some(7),
                None
            ),
            (
                Severity::Note,
                uf,
                "states.a.operation".into(),
                Some(8),
                Some(5),
                None
            ),
            (
                Severity::Note,
                uf,
                "states.a.depends_on".into(),
                Some(9),
                Some(5),
                None
            ),
            (
                Severity::Warning,
                uf,
                "states.a.on_sucess".into(),
                Some(13),
                Some(5),
                Some("did you mean 'on_success'?".into())
            ),
            (
                Severity::Note,
                uf,
                "monitoring".into(),
                Some(2),
                Some(1),
                None
            ),
        ]
    );
    assert_eq!(
        l.diagnostics[3].message,
        "unknown field \"on_sucess\" in a step state"
    );
    assert_eq!(l.workflow.states["a"].capture_max_size, Some(512 * 1024));
}

#[test]
fn type_mismatch_is_a_positioned_yaml_syntax_error() {
    let e = err(
        "name: t\ninputs:\n  x:\n    type: string\nstates:\n  initial: a\n  a: {type: terminal}\n",
    );
    assert_eq!(e.code(), ErrorCode::WorkflowParseYamlSyntax);
    assert_eq!(
        e.message(),
        "wf.yaml: line 3, column 3: inputs: expected a list of inputs (- name: …), found a mapping"
    );
    assert_eq!(e.details()["line"], json!(3));
    assert_eq!(e.details()["column"], json!(3));
    assert_eq!(e.details()["file"], json!("wf.yaml"));
    // The hint is one line a user can paste: YAML, no literal `\n` (a new user saw one).
    let hint = e.hints().join(" ");
    assert!(
        hint.contains("`inputs: [{name: x, type: string}]`"),
        "{hint}"
    );
    assert!(!hint.contains("\\n"), "{hint}");
}

#[test]
fn syntax_errors_name_the_line() {
    let e = err(
        "name: invalid\nstates:\n  initial: start\n  start\n    type: step\n    command: echo\n",
    );
    assert_eq!(e.code(), ErrorCode::WorkflowParseYamlSyntax);
    assert!(e.message().contains("line 5"), "{}", e.message());
    assert_eq!(e.details()["line"], json!(5));

    let e = err(
        "name: t\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo \"Error occurred: test\"\n",
    );
    assert_eq!(
        e.message(),
        "wf.yaml: line 6, column 34: mapping values are not allowed in this context"
    );
    assert!(e.hints()[0].contains("must be quoted"), "{:?}", e.hints());
    // The same error from a key indented one space too deep: the hint names indentation.
    let e = err("name: t\nstates:\n  initial: a\n  a:\n    type: step\n     command: echo\n");
    assert!(
        e.message().contains("mapping values are not allowed"),
        "{}",
        e.message()
    );
    assert!(e.hints()[0].contains("indentation"), "{:?}", e.hints());

    let e = err("name: t\nstates:\n\tinitial: a\n");
    assert!(e.message().contains("line 3"), "{}", e.message());
    assert_eq!(e.hints(), ["YAML indentation must use spaces, not tabs"]);
}

#[test]
fn duplicate_keys_are_errors() {
    let e = err("name: t\nstates:\n  initial: a\n  a: {type: terminal}\n  a: {type: terminal}\n");
    assert_eq!(
        e.message(),
        "wf.yaml: line 5, column 3: mapping key \"a\" already defined at line 4"
    );
}

#[test]
fn missing_name_and_initial() {
    let e = err("description: x\nstates:\n  initial: a\n  a: {type: terminal}\n");
    assert_eq!(
        e.message(),
        "wf.yaml: line 1, column 1: name: required field missing"
    );
    let e = err("name: t\nstates:\n  a: {type: terminal}\n");
    assert_eq!(
        e.message(),
        "wf.yaml: line 3, column 3: states.initial: required field missing"
    );
}

#[test]
fn scalars_into_string_fields_and_durations() {
    let text = with_states(
        "  a:\n    type: step\n    command: 42\n    timeout: 30\n    on_success: b\n  b:\n    type: step\n    command: x\n    timeout: 500ms\n    on_success: c\n  c:\n    type: step\n    command: x\n    timeout: \"1m30s\"\n    on_success: done\n",
    );
    let w = wf(&text);
    assert_eq!(
        w.states["a"].kind,
        StateKind::Command(CommandStep {
            source: CommandSource::Inline("42".into()),
            dir: None
        })
    );
    assert_eq!(w.states["a"].timeout, Some(Duration::from_secs(30)));
    assert_eq!(w.states["b"].timeout, Some(Duration::from_millis(500)));
    assert_eq!(w.states["c"].timeout, Some(Duration::from_secs(90)));
    let e = err(&with_states(
        "  a:\n    type: step\n    command: x\n    timeout: 10 parsecs\n    on_success: done\n",
    ));
    assert_eq!(e.code(), ErrorCode::WorkflowParseInvalidValue);
    assert!(
        e.message()
            .starts_with("wf.yaml: line 7, column 14: states.a.timeout: invalid duration"),
        "{}",
        e.message()
    );
}

/// yaml.v3 reads the YAML 1.1 words (`yes`, `on`, `Y`, `off`, …) into a typed bool field
/// (AWF (Go)'s `continue_on_error`, `required`, …), quoted or not, but not a quoted
/// `"true"` (breaker: `continue_on_error: yes` was refused).
#[test]
fn yaml_1_1_boolean_words_in_boolean_fields() {
    let step = |v: &str| {
        with_states(&format!(
            "  a:\n    type: step\n    command: x\n    continue_on_error: {v}\n    on_success: done\n"
        ))
    };
    for (v, want) in [
        ("yes", true),
        ("on", true),
        ("Y", true),
        ("YES", true),
        ("True", true),
        ("'yes'", true),
        ("no", false),
        ("off", false),
        ("N", false),
        ("false", false),
    ] {
        assert_eq!(wf(&step(v)).states["a"].continue_on_error, want, "{v}");
    }
    for bad in ["maybe", "'true'", "1"] {
        let e = err(&step(bad));
        assert!(
            e.message()
                .contains("states.a.continue_on_error: expected a boolean (true or false), found"),
            "{bad}: {}",
            e.message()
        );
    }
}

#[test]
fn type_is_case_insensitive_and_unknown_types_are_rejected() {
    let w = wf(&with_states(
        "  a:\n    type: Step\n    command: x\n    on_success: done\n",
    ));
    assert_eq!(w.states["a"].kind.kind_name(), "command");
    let e = err(&with_states(
        "  a:\n    type: paralel\n    on_success: done\n",
    ));
    assert_eq!(e.code(), ErrorCode::WorkflowParseUnknownStepType);
    assert_eq!(
        e.message(),
        "wf.yaml: line 5, column 5: states.a.type: unknown step type: paralel"
    );
    assert_eq!(e.hints(), ["did you mean 'parallel'?"]);
    let e = err(&with_states(
        "  a:\n    type: database.query\n    on_success: done\n",
    ));
    assert_eq!(
        e.message(),
        "wf.yaml: line 5, column 5: states.a.type: unknown step type: database.query"
    );
}

#[test]
fn command_xor_script_file() {
    let w = wf(&with_states(
        "  a:\n    type: command\n    script_file: run.sh\n    dir: /tmp\n    on_success: done\n",
    ));
    assert_eq!(
        w.states["a"].kind,
        StateKind::Command(CommandStep {
            source: CommandSource::ScriptFile("run.sh".into()),
            dir: Some("/tmp".into())
        })
    );
    let e = err(&with_states(
        "  a:\n    type: step\n    command: x\n    script_file: y\n    on_success: done\n",
    ));
    assert_eq!(e.code(), ErrorCode::WorkflowValidationInvalidState);
    assert_eq!(
        e.message(),
        "wf.yaml: line 7, column 5: states.a.script_file: command and script_file are mutually exclusive"
    );
}

#[test]
fn agent_state_keeps_every_field() {
    let text = with_states(
        "  a:\n    type: agent\n    provider: claude\n    prompt: \"Do {{.inputs.x}}\"\n    mode: \" Conversation \"\n    system_prompt: be nice\n    role: reviewer\n    skills:\n      - lint\n      - path: ./skills/x\n    options:\n      model: haiku\n      max_tokens: 100\n      dangerously_skip_permissions: true\n    output_format: JSON\n    conversation:\n      continue_from: a\n    on_success: done\n",
    );
    let w = wf(&text);
    let mut options = IndexMap::new();
    options.insert("model".to_owned(), json!("haiku"));
    options.insert("max_tokens".to_owned(), json!(100));
    options.insert("dangerously_skip_permissions".to_owned(), json!(true));
    assert_eq!(
        w.states["a"].kind,
        StateKind::Agent(AgentStep {
            provider: "claude".into(),
            prompt: Some("Do {{.inputs.x}}".into()),
            prompt_file: None,
            mode: "conversation".into(),
            system_prompt: Some("be nice".into()),
            role: Some("reviewer".into()),
            skills: vec!["lint".into(), "./skills/x".into()],
            options,
            output_format: Some("json".into()),
            conversation: Some(ConversationConfig {
                continue_from: Some("a".into()),
                inject_context: None
            }),
            mcp_proxy: None,
            policy: Default::default(),
        })
    );
    let w = wf(&with_states(
        "  a:\n    type: agent\n    provider: claude\n    prompt: p\n    conversation: {}\n    on_success: done\n",
    ));
    let StateKind::Agent(a) = &w.states["a"].kind else {
        panic!()
    };
    assert_eq!(a.mode, "single");
    assert_eq!(a.conversation, Some(ConversationConfig::default()));
}

#[test]
fn parallel_strategy_and_max_concurrent() {
    let w = wf(&with_states(
        "  a:\n    type: parallel\n    parallel: [x, y]\n    max_concurrent: 2\n    on_success: done\n  x: {type: step, command: x}\n  y: {type: step, command: y}\n",
    ));
    assert_eq!(
        w.states["a"].kind,
        StateKind::Parallel(ParallelStep {
            branches: vec!["x".into(), "y".into()],
            strategy: ParallelStrategy::AllSucceed,
            max_concurrent: 2
        })
    );
    let w = wf(&with_states(
        "  a:\n    type: parallel\n    parallel: [x]\n    strategy: best_effort\n    on_success: done\n  x: {type: step, command: x}\n",
    ));
    let StateKind::Parallel(p) = &w.states["a"].kind else {
        panic!()
    };
    assert_eq!(p.strategy, ParallelStrategy::BestEffort);
    let e = err(&with_states(
        "  a:\n    type: parallel\n    parallel: [x]\n    strategy: fastest\n    on_success: done\n",
    ));
    assert_eq!(e.code(), ErrorCode::WorkflowParseInvalidValue);
    assert_eq!(
        e.message(),
        "wf.yaml: line 7, column 5: states.a.strategy: invalid parallel strategy \"fastest\" (expected all_succeed, any_succeed or best_effort)"
    );
}

#[test]
fn loops_items_while_and_max_iterations() {
    let text = with_states(
        "  a:\n    type: for_each\n    items: [a.txt, {n: 1}, 3]\n    body: [b]\n    max_iterations: 0\n    break_when: \"states.b.Output == 'x'\"\n    on_complete: w\n  b: {type: step, command: x}\n  w:\n    type: while\n    while: states.b.ExitCode != 0\n    body: [b]\n    max_iterations: \"{{.inputs.n}}\"\n    on_complete: s\n  s:\n    type: for_each\n    items: \"{{.inputs.list}}\"\n    body: [b]\n    max_iterations: 10\n    on_complete: done\n",
    );
    let w = wf(&text);
    assert_eq!(
        w.states["a"].kind,
        StateKind::Loop(LoopStep {
            over: LoopOver::Items(r#"["a.txt",{"n":1},3]"#.into()),
            body: vec!["b".into()],
            max_iterations: MaxIterations::Static(0),
            break_when: Some("states.b.Output == 'x'".into()),
            on_complete: Some("w".into()),
        })
    );
    assert_eq!(w.states["a"].kind.kind_name(), "for_each");
    assert_eq!(
        w.states["w"].kind,
        StateKind::Loop(LoopStep {
            over: LoopOver::While("states.b.ExitCode != 0".into()),
            body: vec!["b".into()],
            max_iterations: MaxIterations::Dynamic("{{.inputs.n}}".into()),
            break_when: None,
            on_complete: Some("s".into()),
        })
    );
    let StateKind::Loop(s) = &w.states["s"].kind else {
        panic!()
    };
    assert_eq!(s.over, LoopOver::Items("{{.inputs.list}}".into()));
    assert_eq!(s.max_iterations, MaxIterations::Static(10));
}

#[test]
fn operation_and_call_workflow_layouts() {
    let text = with_states(
        "  a:\n    type: operation\n    operation: http.request\n    inputs:\n      url: \"{{.inputs.u}}\"\n      timeout: 5\n    on_success: b\n  b:\n    type: operation\n    operation: notify.send\n    operation_inputs: {message: hi}\n    on_success: c\n  c:\n    type: call_workflow\n    workflow: child\n    inputs: {n: 3, msg: \"{{.inputs.m}}\"}\n    outputs: {process: result}\n    on_success: d\n  d:\n    type: call_workflow\n    call_workflow:\n      workflow: other\n      inputs: {flag: true}\n      outputs: {out: x}\n    on_success: done\n",
    );
    let w = wf(&text);
    let mut inputs = IndexMap::new();
    inputs.insert("url".to_owned(), json!("{{.inputs.u}}"));
    inputs.insert("timeout".to_owned(), json!(5));
    assert_eq!(
        w.states["a"].kind,
        StateKind::Operation(OperationStep {
            operation: "http.request".into(),
            inputs
        })
    );
    let StateKind::Operation(b) = &w.states["b"].kind else {
        panic!()
    };
    assert_eq!(b.inputs["message"], json!("hi"));
    let map = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<IndexMap<_, _>>()
    };
    assert_eq!(
        w.states["c"].kind,
        StateKind::CallWorkflow(CallWorkflowStep {
            workflow: "child".into(),
            inputs: map(&[("n", "3"), ("msg", "{{.inputs.m}}")]),
            outputs: map(&[("process", "result")]),
        })
    );
    assert_eq!(
        w.states["d"].kind,
        StateKind::CallWorkflow(CallWorkflowStep {
            workflow: "other".into(),
            inputs: map(&[("flag", "true")]),
            outputs: map(&[("out", "x")]),
        })
    );
}

#[test]
fn terminals_status_and_message() {
    let w = wf(&with_states(
        "  a:\n    type: terminal\n    status: failure\n    message: boom\n",
    ));
    assert_eq!(
        w.states["a"].kind,
        StateKind::Terminal(TerminalState {
            status: TerminalStatus::Failure,
            message: Some("boom".into()),
            exit_code: None
        })
    );
    let e = err(&with_states(
        "  a:\n    type: terminal\n    status: completed\n",
    ));
    assert_eq!(e.code(), ErrorCode::WorkflowParseInvalidValue);
    assert_eq!(
        e.message(),
        "wf.yaml: line 6, column 5: states.a.status: invalid terminal status \"completed\" (expected success or failure)"
    );
}

#[test]
fn retry_block() {
    let w = wf(&with_states(
        "  a:\n    type: step\n    command: x\n    retry:\n      max_attempts: 3\n      initial_delay: 2\n      max_delay: 1m\n      backoff: exponential\n      jitter: 0.5\n      retryable_exit_codes: [1, 75]\n    on_success: done\n",
    ));
    assert_eq!(
        w.states["a"].retry,
        Some(RetryPolicy {
            max_attempts: 3,
            initial_delay: Duration::from_secs(2),
            max_delay: Some(Duration::from_secs(60)),
            backoff: Backoff::Exponential,
            multiplier: 2.0,
            jitter: 0.5,
            retryable_exit_codes: vec![1, 75],
        })
    );
    let e = err(&with_states(
        "  a:\n    type: step\n    command: x\n    retry: {max_attempts: 2, backoff: random}\n    on_success: done\n",
    ));
    assert_eq!(e.code(), ErrorCode::WorkflowParseInvalidValue);
}

#[test]
fn hooks_workflow_and_step() {
    let text = "name: t\nhooks:\n  workflow_start:\n    - log: start\n  workflow_error:\n    - command: echo err\n    - log: l\n      command: c\nstates:\n  initial: a\n  a:\n    type: step\n    command: x\n    hooks:\n      pre: [{log: pre}]\n      post: [{command: post}]\n    on_success: done\n  done: {type: terminal}\n";
    let w = wf(text);
    assert_eq!(
        w.hooks,
        WorkflowHooks {
            workflow_start: vec![HookAction::Log("start".into())],
            workflow_end: vec![],
            workflow_error: vec![
                HookAction::Command("echo err".into()),
                HookAction::Log("l".into())
            ],
            workflow_cancel: vec![],
        }
    );
    assert_eq!(
        w.states["a"].hooks,
        StepHooks {
            pre: vec![HookAction::Log("pre".into())],
            post: vec![HookAction::Command("post".into())]
        }
    );
}

#[test]
fn inline_on_failure_synthesizes_a_terminal() {
    let w = wf(&with_states(
        "  a:\n    type: step\n    command: x\n    on_success: b\n    on_failure: {message: \"bad {{.inputs.x}}\", status: 4}\n  b:\n    type: step\n    command: y\n    on_success: done\n    on_failure:\n      message: plain\n",
    ));
    assert_eq!(
        w.states["a"].on_failure.as_deref(),
        Some("__inline_error_a")
    );
    assert_eq!(
        w.states["__inline_error_a"].kind,
        StateKind::Terminal(TerminalState {
            status: TerminalStatus::Failure,
            message: Some("bad {{.inputs.x}}".into()),
            exit_code: Some(4)
        })
    );
    assert_eq!(
        w.states["__inline_error_b"].kind,
        StateKind::Terminal(TerminalState {
            status: TerminalStatus::Failure,
            message: Some("plain".into()),
            exit_code: None
        })
    );
    let e = err(&with_states(
        "  a:\n    type: step\n    command: x\n    on_success: done\n    on_failure: {status: 3}\n",
    ));
    assert_eq!(
        e.message(),
        "wf.yaml: line 8, column 17: states.a.on_failure.message: message: required field missing"
    );
}

#[test]
fn inputs_outputs_and_env() {
    let text = "name: t\nenv: [API_KEY]\ninputs:\n  - name: file\n    type: string\n    required: true\n    description: a file\n    validation:\n      pattern: '^[a-z]+$'\n      enum: [a, b]\n      file_exists: true\n      file_extension: [.go, .rs]\n  - name: n\n    type: integer\n    default: 10\n    validation: {min: 1, max: 100}\n  - name: tags\n    type: array\n  - name: weird\n    type: map\noutputs:\n  - name: result\n    from: states.a.Output\n    description: the result\nstates:\n  initial: a\n  a: {type: step, command: x, on_success: done}\n  done: {type: terminal}\n";
    let w = wf(text);
    assert_eq!(w.env, vec!["API_KEY".to_owned()]);
    assert_eq!(
        w.inputs[0],
        InputDef {
            name: "file".into(),
            ty: InputType::String,
            description: Some("a file".into()),
            required: true,
            default: None,
            validation: InputValidation {
                pattern: Some("^[a-z]+$".into()),
                enum_values: vec!["a".into(), "b".into()],
                min: None,
                max: None,
                file_exists: true,
                file_extension: vec![".go".into(), ".rs".into()],
            },
        }
    );
    assert_eq!(w.inputs[1].ty, InputType::Integer);
    assert_eq!(w.inputs[1].default, Some(json!(10)));
    assert_eq!(w.inputs[1].validation.min, Some(1.0));
    assert_eq!(w.inputs[1].validation.max, Some(100.0));
    assert_eq!(w.inputs[2].ty, InputType::Array);
    assert_eq!(w.inputs[3].ty, InputType::Unknown("map".into()));
    assert_eq!(
        w.outputs,
        vec![OutputDef {
            name: "result".into(),
            from: "states.a.Output".into(),
            description: Some("the result".into())
        }]
    );
}

#[test]
fn capture_sizes() {
    assert_eq!(awf_yaml::parse_size("10MB"), Some(10 * 1024 * 1024));
    assert_eq!(awf_yaml::parse_size("512KB"), Some(512 * 1024));
    assert_eq!(awf_yaml::parse_size("1024"), Some(1024));
    assert_eq!(awf_yaml::parse_size("1GB"), Some(1 << 30));
    assert_eq!(awf_yaml::parse_size("ten"), None);
    let e = err(&with_states(
        "  a:\n    type: step\n    command: x\n    capture: {max_size: lots}\n    on_success: done\n",
    ));
    assert_eq!(e.code(), ErrorCode::WorkflowParseInvalidValue);
}

fn templates(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn load_t(text: &str, t: &BTreeMap<String, String>) -> Result<Workflow, awf_domain::AwfError> {
    parse_workflow_with(
        text,
        Some(std::path::Path::new("wf.yaml")),
        WorkflowSource::default(),
        t,
    )
    .map(|l| l.workflow)
}

#[test]
fn use_template_expands_before_validation() {
    let t = templates(&[(
        "build",
        "name: build\nparameters:\n  - name: target\n    required: true\n  - name: flags\n    default: -v\nstates:\n  build:\n    type: step\n    command: make {{parameters.target}} {{parameters.flags}}\n    dir: /src/{{parameters.target}}\n    timeout: 1m\n",
    )]);
    let w = load_t(
        &with_states("  a:\n    use_template: build\n    parameters: {target: all}\n    timeout: 5s\n    on_success: done\n"),
        &t,
    )
    .unwrap();
    let a = &w.states["a"];
    assert_eq!(
        a.kind,
        StateKind::Command(CommandStep {
            source: CommandSource::Inline("make all -v".into()),
            dir: Some("/src/all".into())
        })
    );
    assert_eq!(a.timeout, Some(Duration::from_secs(5)));
    assert_eq!(a.on_success.as_deref(), Some("done"));
}

#[test]
fn use_template_errors() {
    let t = templates(&[
        (
            "needs",
            "name: needs\nparameters: [{name: p, required: true}]\nstates:\n  needs: {type: step, command: echo}\n",
        ),
        (
            "loop1",
            "name: loop1\nstates:\n  loop1: {use_template: loop2}\n",
        ),
        (
            "loop2",
            "name: loop2\nstates:\n  loop2: {use_template: loop1}\n",
        ),
    ]);
    let e = load_t(
        &with_states("  a:\n    use_template: nope\n    on_success: done\n"),
        &t,
    )
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::WorkflowValidationMissingTemplate);
    assert_eq!(
        e.message(),
        "wf.yaml: line 5, column 5: states.a.use_template: template \"nope\" not found"
    );
    let e = load_t(
        &with_states("  a:\n    use_template: needs\n    on_success: done\n"),
        &t,
    )
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::WorkflowValidationMissingTemplate);
    assert!(
        e.message()
            .ends_with("template \"needs\" missing required parameter \"p\""),
        "{}",
        e.message()
    );
    let e = load_t(
        &with_states("  a:\n    use_template: loop1\n    on_success: done\n"),
        &t,
    )
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::WorkflowValidationCycleDetected);
    assert!(
        e.message()
            .ends_with("circular template reference detected: loop1 -> loop2 -> loop1"),
        "{}",
        e.message()
    );
}

#[test]
fn errors_of_all_states_are_collected() {
    let e = err(&with_states(
        "  a:\n    type: bogus\n  b:\n    type: step\n    command: x\n    timeout: nope\n    on_success: done\n",
    ));
    assert_eq!(e.code(), ErrorCode::WorkflowParseUnknownStepType);
    // The first, and how many more (`awf validate` lists each with its own hint).
    assert_eq!(
        e.message(),
        "wf.yaml: line 5, column 5: states.a.type: unknown step type: bogus \
         (and 1 more error(s); run `awf validate` to see all)"
    );
}

#[test]
fn empty_state_name_is_a_validation_error() {
    let e = load(
        "name: x\nstates:\n  initial: \"\"\n  \"\": {type: step, command: echo hi, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::WorkflowValidationInvalidState);
    // The first error with its own hint only (a new user saw every error's hint stacked
    // under the list, each far from its error).
    assert_eq!(
        e.message(),
        "wf.yaml: line 3, column 12: states.initial: the initial state name is empty \
         (and 1 more error(s); run `awf validate` to see all)"
    );
    assert_eq!(e.hints(), ["set `initial:` to the name of the first state"]);
}

#[test]
fn hostile_yaml_never_panics() {
    const PIECES: &[&str] = &[
        "name: x\n",
        "states:\n",
        "  initial: s\n",
        "  s:\n",
        "    type: step\n",
        "    command: ",
        "&a ",
        "*a",
        "<<: ",
        "[",
        "]",
        "{",
        "}",
        ",",
        ": ",
        "- ",
        "\n",
        "  ",
        "\t",
        "\"",
        "'",
        "é",
        "!!int ",
        "!!float ",
        "9e999",
        "-9223372036854775809",
        "0x",
        "---\n",
        "? ",
        "|\n",
        "timeout: ",
        "max_size: 99999999999G",
        "retry: {max_attempts: -1}",
        "#",
        "~",
        "null",
    ];
    let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..3000 {
        let len = (next() % 40) as usize;
        let text: String = (0..len)
            .map(|_| PIECES[(next() % PIECES.len() as u64) as usize])
            .collect();
        let _ = load(&text);
    }
}

/// A hook written beside `hooks:` (a workflow's `workflow_cancel:`, a step's `pre:`) is never
/// run: the warning's hint says where it goes (a new user put `workflow_cancel` at the top).
#[test]
fn a_hook_outside_hooks_is_an_unknown_field_whose_hint_says_where_hooks_go() {
    let l = load(
        "name: h\nworkflow_cancel:\n  - log: bye\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo hi\n    pre:\n      - log: before\n    on_success: done\n  done:\n    type: terminal\n",
    )
    .unwrap();
    let mut got: Vec<(String, Option<String>)> = l
        .diagnostics
        .iter()
        .filter(|d| d.code == ErrorCode::WorkflowParseUnknownField)
        .map(|d| (d.path.clone(), d.hint.clone()))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (
                "states.a.pre".to_owned(),
                Some("hooks go under `hooks:`: `hooks: {pre: [...]}`; here it is never run".to_owned())
            ),
            (
                "workflow_cancel".to_owned(),
                Some(
                    "hooks go under `hooks:`: `hooks: {workflow_cancel: [...]}`; here it is never run"
                        .to_owned()
                )
            ),
        ]
    );
}

/// `name: ""` is a missing name, as in AWF (Go) (breaker: it ran as `Workflow started:  (…)`).
#[test]
fn an_empty_name_is_a_missing_name() {
    let e = err("name: \"\"\nstates:\n  initial: done\n  done: {type: terminal}\n");
    assert_eq!(e.code(), ErrorCode::WorkflowParseMissingField);
    assert_eq!(
        e.message(),
        "wf.yaml: line 1, column 1: name: required field missing"
    );
    assert!(
        e.hints().iter().any(|h| h.contains("`name:` is empty")),
        "{:?}",
        e.hints()
    );
}

/// Both `call_workflow` layouts at once: each key given flat is read flat (AWF (Go) reads
/// only the flat keys), the nested twin is named in a warning; a nested key with no flat
/// twin still counts (breaker: the nested block silently won).
#[test]
fn flat_call_workflow_keys_win_over_the_nested_block_with_a_warning() {
    let l = load(&with_states(
        "  a:\n    type: call_workflow\n    workflow: flat\n    inputs: {x: flat}\n    call_workflow:\n      workflow: nested\n      inputs: {x: nested}\n      outputs: {o: p}\n    on_success: done\n",
    ))
    .unwrap();
    let StateKind::CallWorkflow(c) = &l.workflow.states["a"].kind else {
        panic!("not a call");
    };
    assert_eq!(c.workflow, "flat");
    assert_eq!(c.inputs.get("x").map(String::as_str), Some("flat"));
    assert_eq!(c.outputs.get("o").map(String::as_str), Some("p"));
    let warned: Vec<&str> = l
        .diagnostics
        .iter()
        .filter(|d| d.message.contains("given both flat and in the nested"))
        .map(|d| d.path.as_str())
        .collect();
    assert_eq!(
        warned,
        [
            "states.a.call_workflow.workflow",
            "states.a.call_workflow.inputs"
        ]
    );
}

/// A state's fields written at the level of the state names (new user: the error pointed at
/// the line after the state, as "expected a mapping (a state), found null", and again at
/// `type` as a state of its own). Each error now points at the key it is about, with a hint.
#[test]
fn fields_not_indented_under_their_state_point_at_the_state_with_a_hint() {
    let e = err("name: x\nstates:\n  initial: a\n  a:\n  type: step\n  command: echo hi\n");
    assert_eq!(e.code(), ErrorCode::WorkflowParseYamlSyntax);
    assert_eq!(
        e.message(),
        "wf.yaml: line 4, column 3: states.a: state \"a\" has no fields: nothing is indented \
         under `a:` (and 2 more error(s); run `awf validate` to see all)"
    );
    assert_eq!(
        e.hints()[0],
        "indent the state's fields (`type:`, `command:`, ...) under `a:`, deeper than `a` itself"
    );
    // `awf validate` lists all three, each at its own key.
    let text = "name: x\nstates:\n  initial: a\n  a:\n  type: step\n  command: echo hi\n";
    let l = awf_yaml::parse_workflow_lenient(
        text,
        Some(std::path::Path::new("wf.yaml")),
        WorkflowSource::default(),
        &awf_yaml::NoTemplates,
    )
    .unwrap();
    let got: Vec<(Option<u32>, String)> = l
        .diagnostics
        .iter()
        .map(|d| (d.line, d.message.clone()))
        .collect();
    assert_eq!(
        got,
        [
            (
                Some(4),
                "state \"a\" has no fields: nothing is indented under `a:`".to_owned()
            ),
            (
                Some(5),
                "`type: ...` is a state's field, not a state: it is indented at the level of \
                 the state names"
                    .to_owned()
            ),
            (
                Some(6),
                "`command: ...` is a state's field, not a state: it is indented at the level of \
                 the state names"
                    .to_owned()
            ),
        ]
    );
}

/// A template in a literal block scalar (`command: |`, `|-`, a leading blank line) is found
/// at its own line and column; a folded one (`>`), whose lines are joined, and a value
/// without a template are not recorded (findings there point at the key).
#[test]
fn literal_blocks_with_templates_are_located_line_by_line() {
    let text = "name: b\nstates:\n  initial: a\n  a:\n    type: step\n    command: |-   # comment\n\n      echo start\n        echo {{.inputs.x}}\n    on_success: f\n  f:\n    type: step\n    command: >\n      echo {{.inputs.x}}\n      more\n    on_success: g\n  g:\n    type: step\n    command: |\n      echo plain\n    on_success: done\n  done:\n    type: terminal\n";
    let l = lenient(text);
    let m = &l.source_map;
    // Text line 2 (0-based) is file line 9; its `{{` is 7 characters into the text's line,
    // the block being indented 6: column 14.
    assert_eq!(m.locate_in_block("states.a.command", 2, 7), Some((9, 14)));
    assert_eq!(m.locate_in_block("states.a.command", 0, 0), Some((7, 7)));
    assert_eq!(m.locate_in_block("states.f.command", 0, 5), None);
    assert_eq!(m.locate_in_block("states.g.command", 0, 0), None);
}

/// A template in a one-line value is found at its own column (new user: the unquoted-value
/// warning of `command: echo {{.inputs.x}}` pointed at the `command` key): plain, in quotes
/// (the column after the quote), in a flow mapping. A quoted value with an escape in it,
/// whose characters do not map one to one, and a plain value folded over two lines are not
/// recorded (findings there point at the key).
#[test]
fn one_line_values_with_templates_are_located_at_their_column() {
    let text = "name: b\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo {{.inputs.x}}\n    on_success: b\n  b:\n    type: step\n    command: \"echo {{.inputs.x}}\"\n    on_success: c\n  c: {type: step, command: 'echo {{.inputs.x}}', on_success: d}\n  d:\n    type: step\n    command: \"echo \\t{{.inputs.x}}\"\n    on_success: e\n  e:\n    type: step\n    command: echo\n      {{.inputs.x}}\n    on_success: done\n  done:\n    type: terminal\n";
    let l = lenient(text);
    let m = &l.source_map;
    // `    command: echo {{` : the value starts at column 14, its `{{` 5 characters in.
    assert_eq!(m.locate_in_block("states.a.command", 0, 5), Some((6, 19)));
    // The double quote at column 14, the text from column 15.
    assert_eq!(m.locate_in_block("states.b.command", 0, 5), Some((10, 20)));
    // `  c: {type: step, command: '`: the text from column 29.
    assert_eq!(m.locate_in_block("states.c.command", 0, 5), Some((12, 34)));
    assert_eq!(m.locate_in_block("states.d.command", 0, 6), None);
    assert_eq!(m.locate_in_block("states.e.command", 0, 5), None);
}

/// Top-level keys starting with `x-` hold blocks for YAML anchors (`x-defaults: &d`, then
/// `<<: *d`): accepted without a warning, as AWF (Go) accepts any top-level key; any other
/// unknown top-level key is still warned about.
#[test]
fn top_level_x_keys_are_accepted_silently() {
    let text = "name: x\nx-defaults: &d\n  type: step\n  timeout: 5s\nx-other: [1, 2]\nextra: 1\nstates:\n  initial: a\n  a:\n    <<: *d\n    command: echo a\n    on_success: done\n  done:\n    type: terminal\n";
    let l = lenient(text);
    let found: Vec<(&str, &str)> = l
        .diagnostics
        .iter()
        .map(|d| (d.path.as_str(), d.message.as_str()))
        .collect();
    assert_eq!(
        found,
        [("extra", "unknown field \"extra\" in the workflow")]
    );
    assert_eq!(
        l.workflow.states["a"].timeout,
        Some(std::time::Duration::from_secs(5))
    );
}
