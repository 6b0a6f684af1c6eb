use std::collections::BTreeMap;

use indexmap::IndexMap;

use super::*;
use crate::ports::repository::Severity;
use crate::workflow::AgentStep;
use crate::workflow::Backoff;
use crate::workflow::CommandStep;
use crate::workflow::ConversationConfig;
use crate::workflow::InputDef;
use crate::workflow::InputType;
use crate::workflow::InputValidation;
use crate::workflow::LoopStep;
use crate::workflow::ParallelStep;
use crate::workflow::ParallelStrategy;
use crate::workflow::RetryPolicy;
use crate::workflow::TerminalState;
use crate::workflow::TerminalStatus;
use crate::workflow::Transition;
use crate::workflow::WorkflowHooks;
use crate::workflow::WorkflowSource;

fn state(name: &str, kind: StateKind) -> State {
    State::new(name, kind)
}

fn cmd(name: &str, command: &str, next: Option<&str>) -> State {
    let mut s = state(
        name,
        StateKind::Command(CommandStep {
            source: CommandSource::Inline(command.to_owned()),
            dir: None,
        }),
    );
    s.on_success = next.map(str::to_owned);
    s
}

fn terminal(name: &str) -> State {
    state(
        name,
        StateKind::Terminal(TerminalState {
            status: TerminalStatus::Success,
            message: None,
            exit_code: None,
        }),
    )
}

fn wf(initial: &str, states: Vec<State>) -> Workflow {
    Workflow {
        name: "t".to_owned(),
        version: None,
        description: None,
        author: None,
        tags: Vec::new(),
        inputs: Vec::new(),
        env: Vec::new(),
        initial: initial.to_owned(),
        states: states
            .into_iter()
            .map(|s| (s.name.clone(), s))
            .collect::<IndexMap<_, _>>(),
        hooks: WorkflowHooks::default(),
        outputs: Vec::new(),
        shell_quote: false,
        budget: None,
        source: WorkflowSource::default(),
    }
}

fn input(name: &str) -> InputDef {
    InputDef {
        name: name.to_owned(),
        ty: InputType::String,
        description: None,
        required: false,
        default: None,
        validation: InputValidation::default(),
    }
}

fn loop_state(name: &str, over: LoopOver, body: &[&str], on_complete: Option<&str>) -> State {
    state(
        name,
        StateKind::Loop(LoopStep {
            over,
            body: body.iter().map(|s| (*s).to_owned()).collect(),
            max_iterations: MaxIterations::Static(10),
            break_when: None,
            on_complete: on_complete.map(str::to_owned),
        }),
    )
}

fn agent(name: &str) -> AgentStep {
    let _ = name;
    AgentStep {
        provider: "claude".to_owned(),
        prompt: Some("hi".to_owned()),
        prompt_file: None,
        mode: "single".to_owned(),
        system_prompt: None,
        role: None,
        skills: Vec::new(),
        options: IndexMap::new(),
        output_format: None,
        conversation: None,
        mcp_proxy: None,
        policy: Default::default(),
    }
}

fn codes(d: &[Diagnostic]) -> Vec<(ErrorCode, String)> {
    d.iter().map(|d| (d.code, d.path.clone())).collect()
}

#[test]
fn levenshtein_and_closest() {
    assert_eq!(levenshtein("proces", "process"), 1);
    assert_eq!(levenshtein("", "abc"), 3);
    assert_eq!(levenshtein("kitten", "sitting"), 3);
    assert_eq!(
        closest("proces", ["start", "process", "done"]),
        Some("process")
    );
    assert_eq!(closest("zzzzzz", ["start", "process"]), None);
    // New user: unrelated short names were offered `done`.
    assert_eq!(closest("nope", ["done", "build"]), None);
    assert_eq!(closest("tyep", ["type", "name"]), Some("type"));
    assert_eq!(closest("buld", ["build", "done"]), Some("build"));
    assert_eq!(closest("deplyo", ["deploy"]), Some("deploy"));
    assert_eq!(closest("done", ["done", "dome"]), None);
    assert_eq!(closest("DEPLOY", ["deploy", "done"]), Some("deploy"));
    // One letter for another is no typo: nothing is suggested.
    assert_eq!(closest("b", ["a", "done"]), None);
    assert_eq!(closest("b", ["bb", "a"]), Some("bb"));
    assert_eq!(closest("ab", ["ac"]), Some("ac"));
}

/// New user: `retry: {delay: 5s}` got no suggestion; a key that is a whole `_` part of
/// known ones suggests them (in their order), a typo of one is `closest`'s.
#[test]
fn a_short_form_of_a_key_suggests_the_keys_it_is_part_of() {
    let retry = [
        "max_attempts",
        "initial_delay",
        "max_delay",
        "backoff",
        "multiplier",
    ];
    assert_eq!(
        keys_with_part("delay", retry),
        ["initial_delay", "max_delay"]
    );
    assert_eq!(keys_with_part("attempts", retry), ["max_attempts"]);
    assert_eq!(
        keys_with_part("Delay", retry),
        ["initial_delay", "max_delay"]
    );
    // Too short to mean anything, or a whole key: none.
    assert!(keys_with_part("max", ["max"]).is_empty());
    assert!(keys_with_part("ma", retry).is_empty());
    assert!(keys_with_part("lay", retry).is_empty());
    assert_eq!(
        did_you_mean(&["initial_delay", "max_delay"]).as_deref(),
        Some("did you mean 'initial_delay' or 'max_delay'?")
    );
    assert_eq!(
        did_you_mean(&["a", "b", "c"]).as_deref(),
        Some("did you mean 'a', 'b' or 'c'?")
    );
    assert_eq!(did_you_mean(&["a"]).as_deref(), Some("did you mean 'a'?"));
    assert_eq!(did_you_mean(&[]), None);
}

/// New user: a value written twice the same way in one `command:` got two identical
/// warnings; each finding is reported once, at its first place in the value.
#[test]
fn one_unquoted_value_written_twice_is_warned_about_once() {
    let mut w = wf(
        "a",
        vec![
            cmd(
                "a",
                "echo start\necho {{.inputs.x}}\necho {{.inputs.x}}\n",
                Some("done"),
            ),
            terminal("done"),
        ],
    );
    let mut x = input("x");
    x.default = Some(serde_json::json!("a"));
    w.inputs = vec![x];
    let wf = w;
    let found = unquoted_shell_values(&wf);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].in_value, Some((1, 5)));
}

#[test]
fn valid_linear_workflow_has_no_findings() {
    let w = wf("a", vec![cmd("a", "echo", Some("done")), terminal("done")]);
    assert_eq!(structural(&w), Vec::new());
    assert_eq!(references(&w), Vec::new());
}

#[test]
fn missing_state_names_the_target_and_suggests() {
    let mut start = cmd("start", "echo", Some("proces"));
    start.on_failure = Some("done".to_owned());
    let w = wf(
        "start",
        vec![
            start,
            cmd("process", "echo", Some("done")),
            terminal("done"),
        ],
    );
    let d = structural(&w);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].code, ErrorCode::WorkflowValidationMissingState);
    assert_eq!(d[0].path, "states.start.on_success");
    assert_eq!(
        d[0].message,
        "state \"start\": on_success references unknown state \"proces\""
    );
    assert_eq!(d[0].hint.as_deref(), Some("did you mean 'process'?"));
}

#[test]
fn missing_initial_and_no_terminal() {
    let w = wf("nope", vec![cmd("a", "echo", Some("a"))]);
    assert_eq!(
        codes(&structural(&w)),
        vec![
            (
                ErrorCode::WorkflowValidationMissingState,
                "states.initial".to_owned()
            ),
            (
                ErrorCode::WorkflowValidationInvalidState,
                "states".to_owned()
            ),
        ]
    );
}

#[test]
fn every_reference_field_is_checked() {
    let mut a = cmd("a", "echo", Some("done"));
    a.transitions = vec![Transition {
        when: None,
        goto: "t1".to_owned(),
    }];
    a.on_failure = Some("f1".to_owned());
    let p = state(
        "p",
        StateKind::Parallel(ParallelStep {
            branches: vec!["b1".to_owned()],
            strategy: ParallelStrategy::AllSucceed,
            max_concurrent: 0,
        }),
    );
    let mut p = p;
    p.on_success = Some("done".to_owned());
    let l = loop_state("l", LoopOver::Items("[]".to_owned()), &["x1"], Some("c1"));
    let mut ag = agent("g");
    ag.conversation = Some(ConversationConfig {
        continue_from: Some("nonexistent_step".to_owned()),
        inject_context: None,
    });
    let mut g = state("g", StateKind::Agent(ag));
    g.on_success = Some("done".to_owned());
    let w = wf("a", vec![a, p, l, g, terminal("done")]);
    assert_eq!(
        codes(&structural(&w)),
        vec![
            (
                ErrorCode::WorkflowValidationMissingState,
                "states.a.on_failure".to_owned()
            ),
            (
                ErrorCode::WorkflowValidationMissingState,
                "states.a.transitions.0.goto".to_owned()
            ),
            (
                ErrorCode::WorkflowValidationMissingState,
                "states.p.parallel.0".to_owned()
            ),
            (
                ErrorCode::WorkflowValidationMissingState,
                "states.l.body.0".to_owned()
            ),
            (
                ErrorCode::WorkflowValidationMissingState,
                "states.l.on_complete".to_owned()
            ),
            (
                ErrorCode::WorkflowValidationMissingState,
                "states.g.conversation.continue_from".to_owned()
            ),
        ]
    );
}

#[test]
fn no_exit_except_branches_and_bodies() {
    let p = {
        let mut p = state(
            "p",
            StateKind::Parallel(ParallelStep {
                branches: vec!["b".to_owned()],
                strategy: ParallelStrategy::AllSucceed,
                max_concurrent: 0,
            }),
        );
        p.on_success = Some("l".to_owned());
        p
    };
    let l = loop_state("l", LoopOver::While("true".to_owned()), &["body"], None);
    let w = wf(
        "p",
        vec![
            p,
            cmd("b", "echo", None),
            l,
            cmd("body", "echo", None),
            cmd("stuck", "echo", None),
            terminal("done"),
        ],
    );
    assert_eq!(
        codes(&structural(&w)),
        vec![
            (ErrorCode::WorkflowValidationNoExit, "states.l".to_owned()),
            (
                ErrorCode::WorkflowValidationNoExit,
                "states.stuck".to_owned()
            ),
        ]
    );
}

/// A state with a route for failure only stops the run at its first success: a warning
/// (a new user's workflow was "valid", then failed with NO_ROUTE). One with conditional
/// transitions is not judged (they may cover every case); branch states' routes are ignored.
#[test]
fn a_state_routed_on_failure_only_is_warned_about() {
    let mut a = cmd("a", "echo", None);
    a.on_failure = Some("done".to_owned());
    let mut b = cmd("b", "echo", None);
    b.on_failure = Some("done".to_owned());
    b.transitions = vec![Transition {
        when: Some("true".to_owned()),
        goto: "done".to_owned(),
    }];
    let mut start = cmd("start", "echo", Some("a"));
    start.on_failure = Some("b".to_owned());
    let w = wf("start", vec![start, a, b, terminal("done")]);
    let d = structural(&w);
    assert_eq!(
        codes(&d),
        vec![(ErrorCode::WorkflowValidationNoExit, "states.a".to_owned())]
    );
    assert_eq!(d[0].severity, Severity::Warning);
    assert!(d[0].message.contains("NO_ROUTE"), "{}", d[0].message);
    // A loop with on_failure and no on_complete: the same (a breaker's for_each).
    let mut l = loop_state("l", LoopOver::Items("[1]".to_owned()), &["body"], None);
    l.on_failure = Some("done".to_owned());
    let w = wf("l", vec![l, cmd("body", "echo", None), terminal("done")]);
    let d = structural(&w);
    assert_eq!(
        codes(&d),
        vec![(ErrorCode::WorkflowValidationNoExit, "states.l".to_owned())]
    );
    assert_eq!(d[0].severity, Severity::Warning);
}

#[test]
fn body_steps_may_exit_the_loop_but_targets_must_exist() {
    let l = loop_state(
        "l",
        LoopOver::While("true".to_owned()),
        &["b"],
        Some("done"),
    );
    let mut b = cmd("b", "echo", Some("done"));
    b.on_failure = Some("gone".to_owned());
    let w = wf("l", vec![l, b, terminal("done")]);
    assert_eq!(
        codes(&structural(&w)),
        vec![(
            ErrorCode::WorkflowValidationMissingState,
            "states.b.on_failure".to_owned()
        )]
    );
}

#[test]
fn per_type_rules() {
    let empty_par = {
        let mut p = state(
            "p",
            StateKind::Parallel(ParallelStep {
                branches: vec![],
                strategy: ParallelStrategy::BestEffort,
                max_concurrent: 0,
            }),
        );
        p.on_success = Some("done".to_owned());
        p
    };
    let mut dup = loop_state(
        "l",
        LoopOver::Items("[1]".to_owned()),
        &["b", "b"],
        Some("done"),
    );
    if let StateKind::Loop(l) = &mut dup.kind {
        l.max_iterations = MaxIterations::Static(20_000);
    }
    let mut custom = agent("a");
    custom.provider = "custom".to_owned();
    custom.prompt_file = Some("p.md".to_owned());
    let mut a = state("a", StateKind::Agent(custom));
    a.on_success = Some("done".to_owned());
    let mut conv = agent("c");
    conv.mode = "conversation".to_owned();
    conv.prompt = None;
    conv.prompt_file = Some("p.md".to_owned());
    let mut c = state("c", StateKind::Agent(conv));
    c.on_success = Some("done".to_owned());
    let mut r = cmd("r", "echo", Some("done"));
    r.retry = Some(RetryPolicy {
        max_attempts: 0,
        initial_delay: std::time::Duration::ZERO,
        max_delay: None,
        backoff: Backoff::Constant,
        multiplier: -1.0,
        jitter: 1.5,
        retryable_exit_codes: vec![],
    });
    let w = wf(
        "r",
        vec![
            r,
            empty_par,
            dup,
            cmd("b", "echo", None),
            a,
            c,
            terminal("done"),
        ],
    );
    let got: Vec<(ErrorCode, String, String)> = structural(&w)
        .into_iter()
        .map(|d| (d.code, d.path, d.message))
        .collect();
    let inv = ErrorCode::WorkflowValidationInvalidState;
    assert_eq!(
        got,
        vec![
            (
                inv,
                "states.r.retry.max_attempts".into(),
                "max_attempts must be >= 1".into()
            ),
            (
                inv,
                "states.r.retry.jitter".into(),
                "jitter must be between 0.0 and 1.0".into()
            ),
            (
                inv,
                "states.r.retry.multiplier".into(),
                "multiplier must be >= 0".into()
            ),
            (
                inv,
                "states.p.parallel".into(),
                "parallel state \"p\" needs at least one branch (parallel: [state, …])".into()
            ),
            (
                inv,
                "states.l.body.1".into(),
                "loop \"l\" lists body state \"b\" twice".into()
            ),
            (
                inv,
                "states.l.max_iterations".into(),
                "max_iterations must be between 1 and 10000, got 20000".into()
            ),
            (
                inv,
                "states.a.provider".into(),
                "provider 'custom' has been removed; use a built-in provider".into()
            ),
            (
                inv,
                "states.a.prompt_file".into(),
                "agent \"a\": prompt and prompt_file are mutually exclusive".into()
            ),
            (
                inv,
                "states.c.prompt".into(),
                "agent \"c\": mode conversation needs an inline prompt".into()
            ),
        ]
    );
}

#[test]
fn while_condition_on_own_body_warns() {
    let l = loop_state(
        "countdown",
        LoopOver::While("states.decrement.ExitCode == 0".to_owned()),
        &["decrement"],
        Some("done"),
    );
    let w = wf(
        "countdown",
        vec![l, cmd("decrement", "echo", None), terminal("done")],
    );
    let d = while_never_true(&w);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].severity, Severity::Warning);
    assert_eq!(d[0].path, "states.countdown.while");
    // Ran before the loop: no warning.
    let l = loop_state(
        "countdown",
        LoopOver::While("states.decrement.ExitCode == 0".to_owned()),
        &["decrement"],
        Some("done"),
    );
    let w = wf(
        "decrement",
        vec![
            cmd("decrement", "echo", Some("countdown")),
            l,
            terminal("done"),
        ],
    );
    assert_eq!(while_never_true(&w), Vec::new());
}

#[test]
fn missing_env_warns_per_unset_name() {
    let mut w = wf("a", vec![cmd("a", "echo", Some("done")), terminal("done")]);
    w.env = vec!["SET".to_owned(), "UNSET".to_owned()];
    let env = BTreeMap::from([("SET".to_owned(), "1".to_owned())]);
    let d = missing_env(&w, &env);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].path, "env.1");
    assert_eq!(d[0].severity, Severity::Warning);
    assert_eq!(
        d[0].message,
        "environment variable UNSET is not set (the workflow lists it under env:)"
    );
}

/// The errors and warnings of [`references`] (its notes are checked on their own).
fn ref_msgs(w: &Workflow) -> Vec<(String, String)> {
    references(w)
        .into_iter()
        .filter(|d| d.severity != crate::ports::repository::Severity::Note)
        .map(|d| (d.path, d.message))
        .collect()
}

/// The first template reference to an optional input without a default gets a note (it
/// fails a run not given the input); one with a default, a required one, and one read by a
/// bare expression (`nil` there) get none.
#[test]
fn an_optional_input_without_a_default_is_noted_once_where_a_template_reads_it() {
    let mut w = wf(
        "a",
        vec![
            cmd(
                "a",
                "echo {{.inputs.opt}} {{.inputs.dflt}} {{.inputs.req}}",
                Some("b"),
            ),
            cmd(
                "b",
                "echo {{if .inputs.opt}}x{{end}} {{.inputs.bare}}",
                Some("done"),
            ),
            terminal("done"),
        ],
    );
    let mut dflt = input("dflt");
    dflt.default = Some(serde_json::json!(""));
    let mut req = input("req");
    req.required = true;
    w.inputs = vec![input("opt"), dflt, req, input("bare"), input("expronly")];
    if let Some(s) = w.states.get_mut("b") {
        s.transitions = vec![crate::workflow::Transition {
            when: Some("inputs.expronly == nil".to_owned()),
            goto: "done".to_owned(),
        }];
    }
    let notes: Vec<(String, String)> = references(&w)
        .into_iter()
        .filter(|d| d.severity == crate::ports::repository::Severity::Note)
        .map(|d| (d.path, d.message))
        .collect();
    let paths: Vec<&str> = notes.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(paths, ["states.a.command", "states.b.command"], "{notes:?}");
    assert!(
        notes[0].1.contains("optional input \"opt\" has no default"),
        "{notes:?}"
    );
    assert!(notes[1].1.contains("\"bare\""), "{notes:?}");
    assert!(
        !notes.iter().any(|(_, m)| m.contains("expronly")),
        "{notes:?}"
    );
}

#[test]
fn references_inputs_states_and_order() {
    let mut w = wf(
        "a",
        vec![
            cmd(
                "a",
                "echo {{.inputs.name}} {{inputs.nope}} {{states.b.Output}}",
                Some("b"),
            ),
            cmd(
                "b",
                "echo {{ .states.a.output }} {{states.a.ExitCode}} {{states.a.exit_code}} {{states.b.Output}}",
                Some("done"),
            ),
            terminal("done"),
        ],
    );
    w.inputs = vec![input("name")];
    assert_eq!(
        ref_msgs(&w),
        vec![
            (
                "states.a.command".into(),
                "undefined input \"nope\" referenced in states.a.command".into()
            ),
            (
                "states.a.command".into(),
                "forward reference to step \"b\" in states.a.command: it has not run at this point"
                    .into()
            ),
            (
                "states.b.command".into(),
                "forward reference to step \"b\" in states.b.command: it has not run at this point"
                    .into()
            ),
        ]
    );
}

#[test]
fn references_fields_namespaces_and_error_hooks() {
    let mut a = cmd(
        "a",
        "echo {{states.a2.Nope}} {{workflow.name}} {{.context.working_dir}} {{loop.index1}} {{parameters.x}} {{error.Message}} {{ printf \"%s.%s\" .env.HOME }}",
        Some("done"),
    );
    a.hooks.post = vec![HookAction::Log("{{states.a.Output}}".to_owned())];
    let mut w = wf(
        "a2",
        vec![cmd("a2", "echo", Some("a")), a, terminal("done")],
    );
    w.hooks.workflow_error = vec![HookAction::Log(
        "{{error.Message}} {{error.nope}}".to_owned(),
    )];
    w.hooks.workflow_end = vec![HookAction::Log("{{error.Message}}".to_owned())];
    let got = ref_msgs(&w);
    assert_eq!(
        got,
        vec![
            (
                "states.a.command".into(),
                "invalid state property \"Nope\" in \"states.a2.Nope\"".into()
            ),
            (
                "states.a.command".into(),
                "loop reference \"{{.loop.index1}}\" in states.a.command: state \"a\" never runs inside a loop".into()
            ),
            (
                "states.a.command".into(),
                "unknown reference type \"parameters\" in \"parameters.x\"".into()
            ),
            (
                "states.a.command".into(),
                "error reference \"{{error.Message}}\" used outside of error hook context".into()
            ),
            (
                "hooks.workflow_end.0".into(),
                "error reference \"{{error.Message}}\" used outside of error hook context".into()
            ),
            (
                "hooks.workflow_error.0".into(),
                "invalid error property \"nope\" in \"error.nope\"".into()
            ),
        ]
    );
}

#[test]
fn references_in_arithmetic_max_iterations_and_pre_hooks() {
    let mut l = loop_state(
        "l",
        LoopOver::Items("{{.inputs.items}}".to_owned()),
        &["b"],
        Some("done"),
    );
    if let StateKind::Loop(lp) = &mut l.kind {
        lp.max_iterations =
            MaxIterations::Dynamic("inputs.pages * inputs.undefined_var".to_owned());
    }
    let mut b = cmd("b", "echo {{.loop.Item}}", None);
    b.hooks.pre = vec![HookAction::Command("echo {{states.b.Output}}".to_owned())];
    let mut w = wf("l", vec![l, b, terminal("done")]);
    w.inputs = vec![input("items"), input("pages")];
    assert_eq!(
        ref_msgs(&w),
        vec![(
            "states.l.max_iterations".into(),
            "undefined input \"undefined_var\" referenced in states.l.max_iterations".into()
        )]
    );
}

#[test]
fn parallel_siblings_warn() {
    let mut p = state(
        "p",
        StateKind::Parallel(ParallelStep {
            branches: vec!["x".to_owned(), "y".to_owned()],
            strategy: ParallelStrategy::AllSucceed,
            max_concurrent: 0,
        }),
    );
    p.on_success = Some("done".to_owned());
    let w = wf(
        "p",
        vec![
            p,
            cmd("x", "echo", None),
            cmd("y", "echo {{states.x.Output}}", None),
            terminal("done"),
        ],
    );
    let d = references(&w);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].severity, Severity::Warning);
}

/// A parallel block's post hooks run after its branches (and what runs inside them): they
/// read them; its pre hooks run before, and a reference there is a forward one.
#[test]
fn a_parallel_blocks_post_hooks_read_its_branches() {
    let mut p = par("p", &["b1", "inner"], Some("done"));
    p.hooks.post = vec![HookAction::Log(
        "{{.states.b1.Output}} {{.states.b2.Output}}".to_owned(),
    )];
    p.hooks.pre = vec![HookAction::Log("{{.states.b1.Output}}".to_owned())];
    let w = wf(
        "p",
        vec![
            p,
            cmd("b1", "echo hi", None),
            par("inner", &["b2"], None),
            cmd("b2", "echo", None),
            terminal("done"),
        ],
    );
    assert_eq!(
        ref_msgs(&w),
        vec![(
            "states.p.hooks.pre.0".into(),
            "forward reference to step \"b1\" in states.p.hooks.pre.0: it has not run at this point"
                .into()
        )]
    );
}

fn par(name: &str, branches: &[&str], next: Option<&str>) -> State {
    let mut s = state(
        name,
        StateKind::Parallel(ParallelStep {
            branches: branches.iter().map(|b| (*b).to_owned()).collect(),
            strategy: ParallelStrategy::AllSucceed,
            max_concurrent: 0,
        }),
    );
    s.on_success = next.map(str::to_owned);
    s
}

fn cycle_msgs(w: &Workflow) -> Vec<(ErrorCode, String, String)> {
    structural(w)
        .into_iter()
        .filter(|d| d.code == ErrorCode::WorkflowValidationCycleDetected)
        .map(|d| (d.code, d.path, d.message))
        .collect()
}

#[test]
fn a_parallel_that_lists_itself_is_a_cycle() {
    let w = wf(
        "p",
        vec![
            par("p", &["slow", "p"], Some("done")),
            cmd("slow", "sleep 1", None),
            terminal("done"),
        ],
    );
    let got = cycle_msgs(&w);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].1, "states.p");
    assert!(got[0].2.contains("p -> p"), "{}", got[0].2);
    // One finding for one mistake: no "branch routes are ignored" warning on the block.
    assert!(ignored_branch_routes(&w).is_empty());
}

#[test]
fn containment_cycles_through_blocks_and_loops_are_named() {
    // p1 -> p2 -> p1
    let w = wf(
        "p1",
        vec![
            par("p1", &["p2"], Some("done")),
            par("p2", &["p1"], None),
            terminal("done"),
        ],
    );
    let got = cycle_msgs(&w);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].2.contains("p1 -> p2 -> p1"), "{}", got[0].2);
    // A loop whose body holds the parallel that holds the loop.
    let w = wf(
        "l",
        vec![
            loop_state("l", LoopOver::Items("[1]".into()), &["p"], Some("done")),
            par("p", &["x", "l"], None),
            cmd("x", "echo", None),
            terminal("done"),
        ],
    );
    let got = cycle_msgs(&w);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].2.contains("l -> p -> l"), "{}", got[0].2);
    // Three levels deep: a -> b -> c -> a, reported once.
    let w = wf(
        "a",
        vec![
            par("a", &["b"], Some("done")),
            loop_state("b", LoopOver::While("true".into()), &["c"], None),
            par("c", &["a"], None),
            terminal("done"),
        ],
    );
    let got = cycle_msgs(&w);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].2.contains("a -> b -> c -> a"), "{}", got[0].2);
}

#[test]
fn shared_children_without_a_cycle_are_fine_and_deep_nesting_is_capped() {
    // Two blocks sharing a branch is not a cycle.
    let w = wf(
        "p0",
        vec![
            par("p0", &["p1", "p2"], Some("done")),
            par("p1", &["x"], None),
            par("p2", &["x"], None),
            cmd("x", "echo", None),
            terminal("done"),
        ],
    );
    assert_eq!(codes(&structural(&w)), vec![]);
    // A chain of MAX_NESTING blocks is accepted; one more level is not.
    let chain = |n: usize| {
        let mut states = Vec::new();
        for i in 0..n {
            let next = if i + 1 < n {
                format!("p{}", i + 1)
            } else {
                "leaf".to_owned()
            };
            states.push(par(
                &format!("p{i}"),
                &[next.as_str()],
                (i == 0).then_some("done"),
            ));
        }
        states.push(cmd("leaf", "echo", None));
        states.push(terminal("done"));
        wf("p0", states)
    };
    assert_eq!(codes(&structural(&chain(MAX_NESTING))), vec![]);
    assert_eq!(
        codes(&structural(&chain(MAX_NESTING + 1))),
        vec![(
            ErrorCode::WorkflowValidationInvalidState,
            "states.p0".into()
        )]
    );
}

/// Every graph pass of this module over `w`, on a thread with a deadline: a pass that does
/// not end fails the test instead of hanging it.
fn all_passes_within_deadline(w: &Workflow) -> Vec<Diagnostic> {
    let w = w.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut d = structural(&w);
        d.extend(reachability(&w));
        d.extend(references(&w));
        d.extend(while_never_true(&w));
        d.extend(ignored_branch_routes(&w));
        d.extend(unquoted_shell_values(&w));
        d.extend(missing_env(&w, &BTreeMap::new()));
        let _ = tx.send(d);
    });
    rx.recv_timeout(std::time::Duration::from_secs(20))
        .expect("the validation passes did not end within 20 s")
}

/// (path, message) of each CYCLE_DETECTED error, and whether any other error was reported.
/// (path, message) pairs.
type Findings = Vec<(String, String)>;

fn cycles_only(d: &[Diagnostic]) -> (Findings, Vec<(ErrorCode, String)>) {
    let cycles = d
        .iter()
        .filter(|d| d.code == ErrorCode::WorkflowValidationCycleDetected)
        .map(|d| (d.path.clone(), d.message.clone()))
        .collect();
    let others = d
        .iter()
        .filter(|d| {
            d.severity == Severity::Error && d.code != ErrorCode::WorkflowValidationCycleDetected
        })
        .map(|d| (d.code, d.path.clone()))
        .collect();
    (cycles, others)
}

const SELF_CYCLE_MESSAGE: &str =
    "state \"a\" contains itself: a -> a (a parallel block or loop cannot run inside itself)";

#[test]
fn regression_a_while_loop_in_its_own_body_is_a_cycle_not_a_hang() {
    // The user's c6: `a: {type: while, while: "true", body: [a], on_complete: done}`.
    let w = wf(
        "a",
        vec![
            loop_state("a", LoopOver::While("true".into()), &["a"], Some("done")),
            terminal("done"),
        ],
    );
    let d = all_passes_within_deadline(&w);
    assert_eq!(
        cycles_only(&d),
        (
            vec![("states.a".to_owned(), SELF_CYCLE_MESSAGE.to_owned())],
            vec![]
        )
    );
    // The engine's guard is the same function: it refuses too.
    assert_eq!(
        codes(&containment(&w)),
        vec![(
            ErrorCode::WorkflowValidationCycleDetected,
            "states.a".into()
        )]
    );
}

#[test]
fn regression_a_for_each_loop_in_its_own_body_is_a_cycle_not_a_hang() {
    let w = wf(
        "a",
        vec![
            loop_state(
                "a",
                LoopOver::Items("[1, 2]".into()),
                &["x", "a"],
                Some("done"),
            ),
            cmd("x", "echo", None),
            terminal("done"),
        ],
    );
    let d = all_passes_within_deadline(&w);
    assert_eq!(
        cycles_only(&d),
        (
            vec![("states.a".to_owned(), SELF_CYCLE_MESSAGE.to_owned())],
            vec![]
        )
    );
}

#[test]
fn every_containment_cycle_shape_ends_with_cycle_detected() {
    // Two loops in each other's bodies.
    let two_loops = wf(
        "l1",
        vec![
            loop_state("l1", LoopOver::While("true".into()), &["l2"], Some("done")),
            loop_state("l2", LoopOver::Items("[1]".into()), &["l1"], None),
            terminal("done"),
        ],
    );
    // A parallel branch that is the block itself, beside a loop in its own body.
    let block_and_loop = wf(
        "p",
        vec![
            par("p", &["p", "l"], Some("done")),
            loop_state("l", LoopOver::While("true".into()), &["l"], None),
            terminal("done"),
        ],
    );
    // A loop in its own body, itself in the body of another loop.
    let nested_self = wf(
        "outer",
        vec![
            loop_state("outer", LoopOver::Items("[1]".into()), &["a"], Some("done")),
            loop_state("a", LoopOver::While("true".into()), &["a"], None),
            terminal("done"),
        ],
    );
    let cases: Vec<(&str, &Workflow, Findings)> = vec![
        (
            "two loops",
            &two_loops,
            vec![(
                "states.l1".to_owned(),
                "state \"l1\" contains itself: l1 -> l2 -> l1 (a parallel block or loop cannot run inside itself)".to_owned(),
            )],
        ),
        (
            "block and loop",
            &block_and_loop,
            vec![
                (
                    "states.p".to_owned(),
                    "state \"p\" contains itself: p -> p (a parallel block or loop cannot run inside itself)".to_owned(),
                ),
                (
                    "states.l".to_owned(),
                    "state \"l\" contains itself: l -> l (a parallel block or loop cannot run inside itself)".to_owned(),
                ),
            ],
        ),
        (
            "nested self",
            &nested_self,
            vec![("states.a".to_owned(), SELF_CYCLE_MESSAGE.to_owned())],
        ),
    ];
    for (what, w, want) in cases {
        let d = all_passes_within_deadline(w);
        assert_eq!(cycles_only(&d), (want, vec![]), "{what}");
    }
}

#[test]
fn deep_nesting_with_and_without_a_cycle_ends() {
    // 5000 loops, each in the body of the one before; the last holds the first.
    let n = 5000;
    let chain = |closed: bool| {
        let mut states: Vec<State> = (0..n)
            .map(|i| {
                let next = if i + 1 < n {
                    format!("l{}", i + 1)
                } else if closed {
                    "l0".to_owned()
                } else {
                    "leaf".to_owned()
                };
                loop_state(
                    &format!("l{i}"),
                    LoopOver::While("true".into()),
                    &[next.as_str()],
                    (i == 0).then_some("done"),
                )
            })
            .collect();
        if !closed {
            states.push(cmd("leaf", "echo", None));
        }
        states.push(terminal("done"));
        wf("l0", states)
    };
    let d = all_passes_within_deadline(&chain(true));
    let (cycles, others) = cycles_only(&d);
    assert_eq!(others, vec![]);
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert_eq!(cycles[0].0, "states.l0");
    assert!(
        cycles[0]
            .1
            .starts_with("state \"l0\" contains itself: l0 -> l1 -> l2 -> ")
            && cycles[0].1.contains(" -> l4999 -> l0 ("),
        "{}",
        &cycles[0].1[..200]
    );
    // Without the cycle: only the nesting limit.
    let d = all_passes_within_deadline(&chain(false));
    let (cycles, others) = cycles_only(&d);
    assert_eq!(cycles, vec![]);
    assert_eq!(
        others,
        vec![(
            ErrorCode::WorkflowValidationInvalidState,
            "states.l0".to_owned()
        )]
    );
}

#[test]
fn no_reachable_terminal_is_an_error_and_unreachable_states_warn() {
    // a -> b -> a, with a conditional route that also leads back: trapped.
    let mut b = cmd("b", "echo", None);
    b.transitions = vec![
        Transition {
            when: Some("states.a.ExitCode == 0".into()),
            goto: "a".into(),
        },
        Transition {
            when: None,
            goto: "a".into(),
        },
    ];
    let w = wf(
        "a",
        vec![cmd("a", "echo", Some("b")), b.clone(), terminal("done")],
    );
    let d = reachability(&w);
    assert_eq!(
        d.iter()
            .map(|d| (d.code, d.severity, d.path.clone()))
            .collect::<Vec<_>>(),
        vec![
            (
                ErrorCode::WorkflowValidationNoExit,
                Severity::Error,
                "states.a".into()
            ),
            (
                ErrorCode::WorkflowValidationInvalidTransition,
                Severity::Warning,
                "states.done".into()
            ),
        ]
    );
    assert!(d[0].message.contains("a, b"), "{}", d[0].message);
    // Any one route out (here on_failure of b) is enough.
    let mut b2 = b;
    b2.on_failure = Some("done".into());
    let w = wf("a", vec![cmd("a", "echo", Some("b")), b2, terminal("done")]);
    assert_eq!(codes(&reachability(&w)), vec![]);
    // Body steps return to their loop, which goes on to on_complete.
    let w = wf(
        "l",
        vec![
            loop_state(
                "l",
                LoopOver::Items("[1]".into()),
                &["x", "y"],
                Some("done"),
            ),
            cmd("x", "echo", Some("y")),
            cmd("y", "echo", None),
            terminal("done"),
        ],
    );
    assert_eq!(codes(&reachability(&w)), vec![]);
    // A dead end is NO_EXIT already (structural); reachability adds nothing.
    let w = wf("a", vec![cmd("a", "echo", None), terminal("done")]);
    assert_eq!(
        codes(&reachability(&w)),
        vec![(
            ErrorCode::WorkflowValidationInvalidTransition,
            "states.done".into()
        )]
    );
}

#[test]
fn branch_routes_of_a_parallel_warn() {
    let mut a = cmd("a", "echo", Some("done"));
    a.on_failure = Some("done".into());
    let mut b = cmd("b", "echo", None);
    b.transitions = vec![Transition {
        when: None,
        goto: "done".into(),
    }];
    let w = wf(
        "p",
        vec![
            par("p", &["a", "b", "c"], Some("done")),
            a,
            b,
            cmd("c", "echo", None),
            terminal("done"),
        ],
    );
    let d = ignored_branch_routes(&w);
    assert_eq!(
        d.iter()
            .map(|d| (d.severity, d.path.clone()))
            .collect::<Vec<_>>(),
        vec![
            (Severity::Warning, "states.a.on_success".into()),
            (Severity::Warning, "states.b.transitions".into()),
        ]
    );
    assert!(
        d[0].message.contains("on_success, on_failure are ignored"),
        "{}",
        d[0].message
    );
}

#[test]
fn expressions_in_when_while_and_break_when_are_checked_with_hints() {
    let mut check = cmd("check", "echo", Some("l"));
    check.transitions = vec![
        Transition {
            when: Some("states.check.ExitCod == 0 && inputs.mdoe == 'x'".into()),
            goto: "l".into(),
        },
        Transition {
            when: Some("states.chekc.Output != ''".into()),
            goto: "l".into(),
        },
    ];
    let mut l = loop_state(
        "l",
        LoopOver::While("states.check.Output != 'done' && inputs.mode != 'y'".into()),
        &["x"],
        Some("done"),
    );
    if let StateKind::Loop(ls) = &mut l.kind {
        ls.break_when = Some("states.x.Outptu contains 'stop'".into());
    }
    let mut l2 = loop_state(
        "l2",
        LoopOver::While("inputs.mdoe == 'z'".into()),
        &["x"],
        Some("done"),
    );
    l2.on_success = None;
    let mut w = wf(
        "check",
        vec![check, l, l2, cmd("x", "echo", None), terminal("done")],
    );
    w.inputs = vec![input("mode")];
    let got: Vec<(String, String, Option<String>)> = references(&w)
        .into_iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| (d.path, d.message, d.hint))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "states.check.transitions.0.when".into(),
                "invalid state property \"ExitCod\" in \"states.check.ExitCod\"".into(),
                Some("did you mean 'ExitCode'?".into())
            ),
            (
                "states.check.transitions.0.when".into(),
                "undefined input \"mdoe\" referenced in states.check.transitions.0.when".into(),
                Some("did you mean 'mode'?".into())
            ),
            (
                "states.check.transitions.1.when".into(),
                "reference to unknown state \"chekc\" in states.check.transitions.1.when".into(),
                Some("did you mean 'check'?".into())
            ),
            (
                "states.l.break_when".into(),
                "invalid state property \"Outptu\" in \"states.x.Outptu\"".into(),
                Some("did you mean 'Output'?".into())
            ),
            (
                "states.l2.while".into(),
                "undefined input \"mdoe\" referenced in states.l2.while".into(),
                Some("did you mean 'mode'?".into())
            ),
        ]
    );
}

#[test]
fn valid_expressions_raise_nothing() {
    let mut a = cmd("a", "echo", Some("done"));
    a.transitions = vec![Transition {
        when: Some(
            "states.a.exit_code == 0 and len(states.a.Outputs[\"k\"]) > 1.5 && inputs.mode in ['a.b', \"c.d\"] && env.HOME != '' && states.a?.Output != 'it\\'s x.y' && (inputs.mode == 'q' ? states.a.Output : 'n.m') != ''"
                .into(),
        ),
        goto: "done".into(),
    }];
    let mut w = wf("a", vec![a, terminal("done")]);
    w.inputs = vec![input("mode")];
    assert_eq!(ref_msgs(&w), vec![]);
}

#[test]
fn routes_of_a_branch_do_not_count_as_a_way_to_a_terminal() {
    // p re-runs itself forever; only its branch (whose routes the block ignores) points at
    // the terminal.
    let mut p = par("p", &["a"], None);
    p.on_success = Some("p".into());
    let w = wf(
        "p",
        vec![p, cmd("a", "echo", Some("done")), terminal("done")],
    );
    let d = reachability(&w);
    assert_eq!(
        codes(&d)[0],
        (ErrorCode::WorkflowValidationNoExit, "states.p".into()),
        "{d:?}"
    );
    // The same branch also routed to from elsewhere keeps its routes.
    let mut p = par("p", &["a"], Some("a"));
    p.on_failure = Some("p".into());
    let w = wf(
        "p",
        vec![p, cmd("a", "echo", Some("done")), terminal("done")],
    );
    assert_eq!(codes(&reachability(&w)), vec![]);
    // A loop branch's on_complete is ignored by the block too, and warned about.
    let mut p = par("p", &["l"], Some("done"));
    p.on_failure = Some("done".into());
    let w = wf(
        "p",
        vec![
            p,
            loop_state("l", LoopOver::Items("[1]".into()), &["x"], Some("done")),
            cmd("x", "echo", None),
            terminal("done"),
        ],
    );
    assert_eq!(
        codes(&ignored_branch_routes(&w)),
        vec![(
            ErrorCode::WorkflowValidationInvalidTransition,
            "states.l.on_complete".into()
        )]
    );
}

#[test]
fn a_state_field_in_a_casing_the_runtime_does_not_accept_is_an_error() {
    let w = wf(
        "a",
        vec![
            cmd("a", "echo hi", Some("b")),
            cmd(
                "b",
                "echo {{states.a.OUTPUT}} {{states.a.exitcode}} {{states.a.tokens_used}} {{states.a.JSON}} {{states.a.json}}",
                Some("done"),
            ),
            terminal("done"),
        ],
    );
    let found = references(&w);
    let msgs: Vec<(&str, Option<&str>)> = found
        .iter()
        .map(|d| (d.message.as_str(), d.hint.as_deref()))
        .collect();
    assert_eq!(
        msgs,
        vec![
            (
                "invalid state property \"OUTPUT\" in \"states.a.OUTPUT\"",
                Some("field names are case-sensitive: write 'Output' (or 'output')")
            ),
            (
                "invalid state property \"exitcode\" in \"states.a.exitcode\"",
                Some("field names are case-sensitive: write 'ExitCode' (or 'exit_code')")
            ),
        ]
    );
}

#[test]
fn snake_case_spellings_match_the_runtime_ones() {
    assert_eq!(snake("ExitCode"), "exit_code");
    assert_eq!(snake("JSON"), "json");
    assert_eq!(snake("ID"), "id");
    assert_eq!(snake("Index1"), "index1");
    assert_eq!(snake("TokensEstimated"), "tokens_estimated");
    assert_eq!(snake("CurrentState"), "current_state");
}

#[test]
fn approval_ids_that_read_as_a_position_or_the_other_sides_keyword_are_warned() {
    use crate::interaction::ApprovalKind;
    use crate::interaction::ApprovalOption;
    let opt = |id: &str, kind| ApprovalOption {
        id: id.into(),
        name: id.into(),
        kind,
    };
    let mut a = cmd("a", "true", Some("done"));
    a.approval = Some(crate::workflow::Approval {
        message: "go?".into(),
        options: vec![
            opt("2", ApprovalKind::AllowOnce),
            opt("reject", ApprovalKind::AllowAlways),
            opt("3", ApprovalKind::RejectOnce),
        ],
        timeout: None,
        on_timeout: None,
    });
    let d = structural(&wf("a", vec![a, terminal("done")]));
    let warned: Vec<(&str, bool)> = d
        .iter()
        .map(|x| (x.path.as_str(), x.severity == Severity::Warning))
        .collect();
    assert_eq!(
        warned,
        vec![
            ("states.a.approval.options.0.id", true),
            ("states.a.approval.options.1.id", true),
        ],
        "{d:?}"
    );
    assert!(
        d[0].message.contains("also the menu number of option 2"),
        "{}",
        d[0].message
    );
    assert!(
        d[1].message
            .contains("on_timeout keyword of the other side"),
        "{}",
        d[1].message
    );
    // The default pair and an id at its own position are fine.
    let mut a = cmd("a", "true", Some("done"));
    a.approval = Some(crate::workflow::Approval {
        message: "go?".into(),
        options: vec![
            opt("1", ApprovalKind::AllowOnce),
            opt("reject", ApprovalKind::RejectOnce),
        ],
        timeout: None,
        on_timeout: None,
    });
    assert!(structural(&wf("a", vec![a, terminal("done")])).is_empty());
}

#[test]
fn unquoted_inputs_and_outputs_in_commands_are_warned_with_the_fixed_form() {
    let mut w = wf(
        "a",
        vec![
            cmd(
                "a",
                "echo {{.inputs.msg}} '{{ .states.b.Output }}' {{shell_quote .inputs.ok}} {{.inputs.ok | escape}} {{if .inputs.x}}-v{{end}} {{.env.HOME}}",
                Some("b"),
            ),
            cmd("b", "echo {{ printf \"%s\" .inputs.msg }}", Some("done")),
            terminal("done"),
        ],
    );
    w.inputs = vec![input("msg"), input("ok"), input("x")];
    let found: Vec<(String, String, Option<String>)> = unquoted_shell_values(&w)
        .into_iter()
        .map(|d| {
            assert_eq!(d.code, ErrorCode::WorkflowValidationUnquotedValue);
            assert_eq!(d.severity, crate::ports::repository::Severity::Warning);
            (d.path, d.message, d.hint)
        })
        .collect();
    assert_eq!(found.len(), 3, "{found:#?}");
    assert_eq!(found[0].0, "states.a.command");
    assert!(found[0].1.contains("inputs.msg"), "{}", found[0].1);
    assert!(
        found[0].2.as_deref().is_some_and(
            |h| h.contains("{{shell_quote .inputs.msg}}") && h.contains("shell_quote: true")
        ),
        "{:?}",
        found[0].2
    );
    assert!(found[1].1.contains("states.b.Output"), "{}", found[1].1);
    assert_eq!(found[2].0, "states.b.command");
    assert!(
        found[2]
            .2
            .as_deref()
            .is_some_and(|h| h.contains("{{printf \"%s\" .inputs.msg | shell_quote}}")),
        "{:?}",
        found[2].2
    );
    w.shell_quote = true;
    assert!(unquoted_shell_values(&w).is_empty());
}

/// The one judgement of which actions print a value, shared by the unquoted-value warning
/// and the template engine's `shell_quote: true` rewrite.
#[test]
fn prints_value_tells_values_from_control_comments_assignments_and_quoted_pipelines() {
    for body in [
        ".inputs.x",
        "printf \"%s\" .inputs.x",
        "$x",
        "$x == 1",
        "upper .inputs.x",
    ] {
        assert!(prints_value(body), "{body}");
    }
    for body in [
        "",
        "/* note */",
        "if .inputs.x",
        "end",
        "range .inputs.xs",
        "$x := .inputs.x",
        "$x = 2",
        "shell_quote .inputs.x",
        ".inputs.x | escape",
        "printf \"%s\" .inputs.x | shellQuote",
    ] {
        assert!(!prints_value(body), "{body}");
    }
}

/// One shell step `a` running `command`, with the given inputs declared.
fn one_command(command: &str, inputs: Vec<InputDef>) -> Workflow {
    let mut w = wf("a", vec![cmd("a", command, Some("done")), terminal("done")]);
    w.inputs = inputs;
    w
}

/// `(code, message, hint)` of every shell-value warning of `command`.
fn shell_warnings(w: &Workflow) -> Vec<(ErrorCode, String, String)> {
    unquoted_shell_values(w)
        .into_iter()
        .map(|d| {
            assert_eq!(d.severity, Severity::Warning);
            assert_eq!(d.path, "states.a.command");
            (d.code, d.message, d.hint.unwrap_or_default())
        })
        .collect()
}

/// The single warning of `command` (input `target` declared as a plain string).
fn only_warning(command: &str) -> (ErrorCode, String, String) {
    let found = shell_warnings(&one_command(command, vec![input("target")]));
    assert_eq!(found.len(), 1, "{command}: {found:#?}");
    found.into_iter().next().unwrap_or_else(|| unreachable!())
}

#[test]
fn the_unquoted_value_hint_fits_the_shell_context() {
    let unquoted = ErrorCode::WorkflowValidationUnquotedValue;
    // (command, text the hint must hold, text the hint must not hold)
    let cases: &[(&str, &str, Option<&str>)] = &[
        (
            "echo {{.inputs.target}}",
            "write {{shell_quote .inputs.target}}",
            None,
        ),
        (
            "echo $(printf %s {{.inputs.target}})",
            "write {{shell_quote .inputs.target}}",
            None,
        ),
        (
            "echo \"three {{.inputs.target}}\"",
            "close the double quotes around it: \"three \"{{shell_quote .inputs.target}} ",
            Some("write {{shell_quote"),
        ),
        (
            "echo \"{{.inputs.target}} four\"",
            "close the double quotes around it: {{shell_quote .inputs.target}}\" four\"",
            None,
        ),
        (
            "echo \"a {{.inputs.target}} b\"",
            "\"a \"{{shell_quote .inputs.target}}\" b\"",
            None,
        ),
        (
            "echo 'three {{.inputs.target}}'",
            "close the single quotes around it: 'three '{{shell_quote .inputs.target}}",
            None,
        ),
        (
            "echo `printf %s {{.inputs.target}}`",
            "use $( … ) instead of backticks: $(printf %s {{shell_quote .inputs.target}})",
            None,
        ),
        (
            "cat <<EOF\nhello {{.inputs.target}}\nEOF",
            "(v={{shell_quote .inputs.target}}) and write $v",
            None,
        ),
        (
            "cat <<'EOF'\nhello {{.inputs.target}}\nEOF",
            "printf '%s\\n' {{shell_quote .inputs.target}}",
            None,
        ),
    ];
    for (command, want, not) in cases {
        let (code, message, hint) = only_warning(command);
        assert_eq!(code, unquoted, "{command}");
        assert!(message.contains("inputs.target"), "{command}: {message}");
        assert!(hint.contains(want), "{command}: {hint}");
        assert!(hint.contains("shell_quote: true"), "{command}: {hint}");
        if let Some(not) = not {
            assert!(!hint.contains(not), "{command}: {hint}");
        }
    }
    let (_, m, _) = only_warning("echo \"three {{.inputs.target}}\"");
    assert!(m.contains("double-quoted"), "{m}");
    let (_, m, _) = only_warning("cat <<'END'\n{{.inputs.target}}\nEND");
    assert!(m.contains("line END"), "{m}");
}

#[test]
fn shell_quote_where_it_does_not_protect_gets_its_own_warning() {
    let ineffective = ErrorCode::WorkflowValidationIneffectiveQuote;
    let cases: &[(&str, &str, &str)] = &[
        (
            "echo \"three {{shell_quote .inputs.target}}\"",
            "literal",
            "close the double quotes around it: \"three \"{{shell_quote .inputs.target}}",
        ),
        (
            "echo \"three {{.inputs.target | escape}}\"",
            "literal",
            "\"three \"{{.inputs.target | escape}}",
        ),
        (
            "echo 'three {{shell_quote .inputs.target}}'",
            "runs unquoted",
            "'three '{{shell_quote .inputs.target}}",
        ),
        (
            "echo `echo {{shell_quote .inputs.target}}`",
            "backtick",
            "$(echo {{shell_quote .inputs.target}})",
        ),
        (
            "cat <<EOF\n{{shell_quote .inputs.target}}\nEOF",
            "$( )",
            "v={{shell_quote .inputs.target}}",
        ),
        (
            "cat <<'EOF'\n{{shell_quote .inputs.target}}\nEOF",
            "line EOF",
            "printf '%s\\n' {{shell_quote .inputs.target}}",
        ),
    ];
    for (command, why, fix) in cases {
        let (code, message, hint) = only_warning(command);
        assert_eq!(code, ineffective, "{command}");
        assert!(message.contains(why), "{command}: {message}");
        assert!(hint.contains(fix), "{command}: {hint}");
        assert!(
            hint.contains("{{.inputs.target}} and set `shell_quote: true`"),
            "{command}: {hint}"
        );
    }
    // Where single quotes are right: nothing to say.
    for command in [
        "echo {{shell_quote .inputs.target}}",
        "echo \"$(echo {{shell_quote .inputs.target}})\"",
        "echo {{.inputs.target | shellQuote}}",
    ] {
        assert!(
            shell_warnings(&one_command(command, vec![input("target")])).is_empty(),
            "{command}"
        );
    }
}

#[test]
fn under_shell_quote_mode_only_the_literal_quotes_are_warned_about() {
    let mut w = one_command(
        "echo \"three {{shell_quote .inputs.target}}\" {{.inputs.target}} \"{{.inputs.target}}\"",
        vec![input("target")],
    );
    w.shell_quote = true;
    let found = shell_warnings(&w);
    assert_eq!(found.len(), 1, "{found:#?}");
    let (code, message, hint) = &found[0];
    assert_eq!(*code, ErrorCode::WorkflowValidationIneffectiveQuote);
    assert!(
        message.contains("safe") && message.contains("quotes print"),
        "{message}"
    );
    assert!(hint.starts_with("write {{.inputs.target}}"), "{hint}");
}

#[test]
fn inputs_that_cannot_carry_shell_code_are_not_warned_about() {
    let typed = |name: &str, ty: InputType| InputDef { ty, ..input(name) };
    let with_enum = |name: &str, values: &[&str]| {
        let mut d = input(name);
        d.validation.enum_values = values.iter().map(|v| (*v).to_owned()).collect();
        d
    };
    let inputs = vec![
        typed("port", InputType::Integer),
        typed("ratio", InputType::Number),
        typed("verbose", InputType::Boolean),
        with_enum("env", &["dev", "staging", "prod-eu", "v1.2", "a/b"]),
        with_enum("shady", &["dev", "a b"]),
        with_enum("worse", &["dev", "$(id)"]),
        typed("list", InputType::Array),
        input("free"),
    ];
    let command = "echo {{.inputs.port}} \"{{.inputs.ratio}}\" '{{.inputs.verbose}}' {{.inputs.env}} {{printf \"%d\" .inputs.port}} {{.inputs.shady}} {{.inputs.worse}} {{.inputs.list}} {{.inputs.free}} {{.inputs.undeclared}}";
    // `inputs.undeclared` is an undefined-input error already: not warned about as well.
    let found = shell_warnings(&one_command(command, inputs));
    let named: Vec<&str> = found
        .iter()
        .map(|(_, m, _)| {
            m.split_whitespace()
                .find(|w| w.starts_with("inputs."))
                .unwrap_or("")
        })
        .collect();
    assert_eq!(
        named,
        vec!["inputs.shady", "inputs.worse", "inputs.list", "inputs.free",],
        "{found:#?}"
    );
    // A safe input beside an unsafe one in the same action still warns, naming the unsafe.
    let w = one_command(
        "echo {{printf \"%d-%s\" .inputs.port .inputs.free}}",
        vec![typed("port", InputType::Integer), input("free")],
    );
    let found = shell_warnings(&w);
    assert_eq!(found.len(), 1);
    assert!(found[0].1.contains("inputs.free"), "{}", found[0].1);
}

#[test]
fn plain_words_are_letters_digits_and_harmless_punctuation() {
    for w in ["dev", "prod-eu", "v1.2", "a/b", "x_y", "user@host", "50%"] {
        assert!(plain_word(w), "{w}");
    }
    for w in [
        "", "a b", "$(id)", "`id`", "it's", "a;b", "a|b", "*", "~", "a\nb", "é",
    ] {
        assert!(!plain_word(w), "{w:?}");
    }
}

/// A loop's own transitions, and the on_failure of its body steps, are not taken: `awf
/// validate` says so (a new user found them silently ignored). A body step's on_success
/// stays unwarned (leaving the body ends the loop there), and so does its continue_on_error
/// (the body goes on after a failure, as in AWF (Go); a new user was told it was ignored).
#[test]
fn routes_a_loop_does_not_take_warn() {
    let mut l = loop_state(
        "l",
        LoopOver::Items("[1]".to_owned()),
        &["s", "t"],
        Some("done"),
    );
    l.transitions = vec![Transition {
        when: Some("true".into()),
        goto: "done".into(),
    }];
    let mut s = cmd("s", "echo", None);
    s.continue_on_error = true;
    s.on_failure = Some("done".into());
    let t = cmd("t", "echo", Some("done"));
    let w = wf("l", vec![l, s, t, terminal("done")]);
    let d = ignored_loop_routes(&w);
    assert_eq!(
        d.iter()
            .map(|d| (d.severity, d.path.clone()))
            .collect::<Vec<_>>(),
        vec![
            (Severity::Warning, "states.l.transitions".into()),
            (Severity::Warning, "states.s.on_failure".into()),
        ]
    );
    assert_eq!(
        d[1].message,
        "\"s\" is in the body of loop \"l\": its on_failure is ignored there (continue_on_error takes the success route on a failure, and the body goes on)"
    );
    // Without continue_on_error, the failure fails the loop.
    let mut l = loop_state("l", LoopOver::Items("[1]".to_owned()), &["s"], Some("done"));
    l.on_success = None;
    let mut s = cmd("s", "false", None);
    s.on_failure = Some("done".into());
    let w = wf("l", vec![l, s, terminal("done")]);
    let d = ignored_loop_routes(&w);
    assert_eq!(
        d.iter().map(|d| d.message.as_str()).collect::<Vec<_>>(),
        vec![
            "\"s\" is in the body of loop \"l\": its on_failure is ignored there (a failed body step fails the loop)"
        ]
    );
    // continue_on_error alone is no warning.
    let mut l = loop_state("l", LoopOver::Items("[1]".to_owned()), &["s"], Some("done"));
    l.on_success = None;
    let mut s = cmd("s", "false", None);
    s.continue_on_error = true;
    let w = wf("l", vec![l, s, terminal("done")]);
    assert_eq!(ignored_loop_routes(&w), Vec::new());
    // Routed back to its own loop, a failed body step goes on with the next item: no
    // warning (a breaker saw the warning contradict the run).
    let mut l = loop_state("l", LoopOver::Items("[1]".to_owned()), &["s"], Some("done"));
    l.on_success = None;
    let mut s = cmd("s", "false", None);
    s.on_failure = Some("l".into());
    let w = wf("l", vec![l, s, terminal("done")]);
    assert_eq!(ignored_loop_routes(&w), Vec::new());
}

/// `.loop` is set only inside a loop's body: a state that never runs in one is an error (a
/// new user's `{{.loop.Length}}` after the loop passed validate and failed the run); a body
/// state, a branch of a parallel block in a body, a nested loop's fields and body, and the
/// hooks of a body state are not.
#[test]
fn a_loop_reference_outside_any_loop_body_is_an_error() {
    let items = || LoopOver::Items("[1, 2]".to_owned());
    let mut inner = loop_state("inner", items(), &["deep"], Some("outer"));
    if let StateKind::Loop(l) = &mut inner.kind {
        l.max_iterations = MaxIterations::Dynamic("{{.loop.Index}}".to_owned());
    }
    let mut body = cmd("body", "echo {{.loop.Item}}", Some("outer"));
    body.hooks.post = vec![HookAction::Log("{{.loop.Index}}".to_owned())];
    let w = wf(
        "outer",
        vec![
            loop_state("outer", items(), &["body", "p", "inner"], Some("after")),
            body,
            par("p", &["branch"], Some("outer")),
            cmd("branch", "echo {{.loop.Index1}}", None),
            inner,
            cmd("deep", "echo {{.loop.Parent.Item}}", Some("inner")),
            cmd("after", "echo {{.loop.Length}}", Some("done")),
            terminal("done"),
        ],
    );
    let got: Vec<(String, String)> = references(&w)
        .into_iter()
        .filter(|d| d.message.starts_with("loop reference"))
        .map(|d| (d.path, d.message))
        .collect();
    assert_eq!(
        got,
        vec![(
            "states.after.command".to_owned(),
            "loop reference \"{{.loop.Length}}\" in states.after.command: state \"after\" never runs inside a loop".to_owned()
        )]
    );
}

/// A field of `.loop.Item` in a template is an error (the item is text there; a new user's
/// `{{.loop.Item.name}}` passed validate and failed the run), with how to read one, and no
/// unquoted-value warning on top; in an expression `loop.Item.name` is fine.
#[test]
fn a_field_of_the_loop_item_in_a_template_is_an_error() {
    let mut t = cmd("t", "echo {{shell_quote .loop.Item}}", None);
    t.transitions = vec![Transition {
        when: Some("loop.Item.name == 'api'".into()),
        goto: "done".into(),
    }];
    let w = wf(
        "l",
        vec![
            loop_state(
                "l",
                LoopOver::Items("[{\"name\": \"api\"}]".to_owned()),
                &["s", "t"],
                Some("done"),
            ),
            cmd("s", "echo {{.loop.Item.name}} {{.loop.Item}}", None),
            t,
            terminal("done"),
        ],
    );
    let got: Vec<(Severity, String, String, Option<String>)> = references(&w)
        .into_iter()
        .filter(|d| d.message.starts_with("loop reference"))
        .map(|d| (d.severity, d.path, d.message, d.hint))
        .collect();
    assert_eq!(
        got,
        vec![(
            Severity::Error,
            "states.s.command".to_owned(),
            "loop reference \"{{.loop.Item.name}}\" in states.s.command: `.loop.Item` is the item as text in a template (an object item is its JSON text, as in AWF (Go)), so it has no field \"name\"".to_owned(),
            Some(loop_item_field_hint("name")),
        )]
    );
    let unquoted: Vec<String> = unquoted_shell_values(&w)
        .into_iter()
        .map(|d| d.message)
        .collect();
    assert!(
        unquoted.iter().all(|m| !m.contains("loop.Item.name")),
        "{unquoted:?}"
    );
}

/// A parallel block `p` of `branches` among steps `x` and `y` and the terminals `bad` and
/// `done`, and its structural diagnostics.
fn block_diagnostics(branches: &[&str]) -> Vec<Diagnostic> {
    structural(&wf(
        "p",
        vec![
            par("p", branches, Some("done")),
            cmd("x", "echo", Some("done")),
            cmd("y", "echo", Some("done")),
            terminal("bad"),
            terminal("done"),
        ],
    ))
}

/// `d` is one warning on block `p`'s branches, saying `needle`.
fn one_block_warning(d: &[Diagnostic], needle: &str) {
    assert_eq!(
        codes(d),
        vec![(
            ErrorCode::WorkflowValidationInvalidState,
            "states.p.parallel".to_owned()
        )]
    );
    assert_eq!(d[0].severity, Severity::Warning);
    assert!(d[0].message.contains(needle), "{}", d[0].message);
}

/// Breaker: a `status: failure` terminal listed as a parallel branch left an all_succeed
/// block successful without a word: it runs nothing. A warning names it; steps as branches
/// get none.
#[test]
fn a_terminal_as_a_parallel_branch_is_a_warning() {
    one_block_warning(&block_diagnostics(&["bad", "x"]), "\"bad\"");
    assert_eq!(codes(&block_diagnostics(&["x", "y"])), vec![]);
}

/// Breaker: `parallel: [x, x, x]` runs x three times at once under one name (one record,
/// one output: `-o buffered` mixed the runs' output). A warning says so, once per name.
#[test]
fn a_branch_listed_twice_is_a_warning() {
    one_block_warning(
        &block_diagnostics(&["x", "y", "x", "x"]),
        "\"x\" is listed 3 times",
    );
}

/// Breaker/new user: `ExitCode` (an integer) was warned about as if it could carry shell
/// code, while a loop item and a failure's message, which can, were not checked, nor were
/// hook commands.
#[test]
fn shell_value_warnings_know_which_fields_can_carry_shell_code() {
    let warned = |w: &Workflow| -> Vec<(String, String)> {
        unquoted_shell_values(w)
            .into_iter()
            .map(|d| (d.path, d.message))
            .collect()
    };
    let safe = one_command(
        "exit {{.states.a.ExitCode}}; echo {{.states.a.exit_code}} {{.states.a.Status}} {{.states.a.TokensUsed}} {{.loop.Index}}",
        vec![],
    );
    assert_eq!(warned(&safe), vec![]);

    let over = |items: &str| {
        wf(
            "each",
            vec![
                loop_state("each", LoopOver::Items(items.into()), &["a"], Some("done")),
                cmd("a", "echo {{.loop.Item}} {{.loop.Parent.item}}", None),
                terminal("done"),
            ],
        )
    };
    let from_output = warned(&over("{{.states.list.Output}}"));
    assert_eq!(from_output.len(), 2, "{from_output:#?}");
    assert_eq!(from_output[0].0, "states.a.command");
    assert!(
        from_output[0].1.contains("loop.Item"),
        "{}",
        from_output[0].1
    );
    assert!(
        from_output[1].1.contains("loop.Parent.item"),
        "{}",
        from_output[1].1
    );
    assert_eq!(warned(&over(r#"["src/a.rs","b",3,true]"#)), vec![]);
    assert_eq!(warned(&over(r#"["a; rm -rf x"]"#)).len(), 2);

    let mut hooked = one_command("true", vec![]);
    hooked.hooks.workflow_error = vec![
        HookAction::Command("notify {{.error.Message}}".into()),
        HookAction::Command("notify {{.error.State}} {{.error.ExitCode}} {{.error.Type}}".into()),
        HookAction::Log("{{.error.Message}}".into()),
    ];
    if let Some(a) = hooked.states.get_mut("a") {
        a.hooks.post = vec![HookAction::Command("echo {{.states.a.Output}}".into())];
    }
    let found = warned(&hooked);
    let paths: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        ["states.a.hooks.post.0", "hooks.workflow_error.0"],
        "{found:#?}"
    );
    hooked.shell_quote = true;
    assert_eq!(warned(&hooked), vec![]);
}

/// New user: values that can only be a number or true/false were warned about as unquoted
/// shell values: `{{len .states.big.Output}}`, an `http.request` step's
/// `Response.status_code`, comparisons. A pipeline that ends in another function, and the
/// `Response.status_code` of a step that is no `http.request`, still are.
#[test]
fn values_that_are_certainly_numbers_or_booleans_are_not_warned_about() {
    let op = |name: &str, operation: &str| {
        let mut s = state(
            name,
            StateKind::Operation(crate::workflow::OperationStep {
                operation: operation.to_owned(),
                inputs: IndexMap::new(),
            }),
        );
        s.on_success = Some("a".to_owned());
        s
    };
    let warned = |command: &str| -> Vec<String> {
        let w = wf(
            "get",
            vec![
                op("get", "http.request"),
                op("other", "github.get_issue"),
                cmd("a", command, Some("done")),
                terminal("done"),
            ],
        );
        unquoted_shell_values(&w)
            .into_iter()
            .map(|d| d.message)
            .collect()
    };
    for quiet in [
        "echo {{len .states.a.Output}}",
        "echo {{(len .states.a.Output)}}",
        "echo {{.states.a.Output | len}}",
        "echo {{.states.get.Response.status_code}}",
        "test {{eq .states.a.Output \"x|y\"}} = true",
        "echo {{not .states.a.Output}} {{ne (len .states.a.Output) 0}}",
    ] {
        assert_eq!(warned(quiet), Vec::<String>::new(), "{quiet}");
    }
    for loud in [
        "echo {{len .states.a.Output | printf \"%v\" | print .states.a.Output}}",
        "echo {{.states.other.Response.status_code}}",
        "echo {{.states.get.Response.body}}",
        "echo {{printf \"%s|len\" .states.a.Output}}",
    ] {
        assert_eq!(warned(loud).len(), 1, "{loud}: {:?}", warned(loud));
    }
}

/// Breaker: `\{{.inputs.m}}` and `"${X:-{{.inputs.m}}}"` validated clean (with and without
/// `shell_quote: true`) and ran `$( )` from the value; the hint for the second one suggested a
/// form that was still injectable.
#[test]
fn values_where_no_quoting_protects_are_warned_even_under_the_mode() {
    for command in [
        "echo X \\{{.inputs.target}}",
        "echo \"${X:-{{.inputs.target}}}\"",
        "echo \"${X:-\"{{shell_quote .inputs.target}}\"}\"",
    ] {
        let mut w = one_command(command, vec![input("target")]);
        for mode in [false, true] {
            w.shell_quote = mode;
            let found = shell_warnings(&w);
            assert_eq!(found.len(), 1, "{command} (mode {mode}): {found:#?}");
            let (code, message, hint) = &found[0];
            assert_eq!(*code, ErrorCode::WorkflowValidationUnquotedValue);
            assert!(
                message.contains("no quoting protects") || message.contains("backslash"),
                "{message}"
            );
            assert!(hint.contains("refuses such a value"), "{hint}");
            assert!(!hint.contains("close the double quotes"), "{hint}");
        }
    }
    let heredoc = only_warning("cat <<-EOF\n\t{{.inputs.target}}\n\tEOF");
    assert!(
        heredoc
            .1
            .contains("a line EOF in it ends the here-document"),
        "{}",
        heredoc.1
    );
}

/// Breaker: a value reached through a template variable, the dot of a `with`/`range`, or
/// `index` over the whole namespace was not warned about.
#[test]
fn values_reached_through_variables_dots_and_index_are_warned() {
    for (command, reference) in [
        ("{{$v := .inputs.target}}echo {{$v}}", "inputs.target"),
        ("{{with .inputs.target}}echo {{.}}{{end}}", "inputs.target"),
        (
            "{{range $i, $e := .states.a.JSON}}echo {{$e.name}}{{end}}",
            "states.a.JSON.name",
        ),
        (
            "{{range .states.a.JSON}}echo {{.name}}{{end}}",
            "states.a.JSON.name",
        ),
        ("echo {{index .inputs \"target\"}}", "inputs"),
        (
            "{{with .inputs.target}}{{if .}}echo {{.}}{{end}}{{end}}",
            "inputs.target",
        ),
    ] {
        let (code, message, _) = only_warning(command);
        assert_eq!(
            code,
            ErrorCode::WorkflowValidationUnquotedValue,
            "{command}"
        );
        assert!(
            message.contains(&format!("puts {reference} ")),
            "{command}: {message}"
        );
    }
    for command in [
        "{{$v := .states.a.ExitCode}}exit {{$v}}",
        "{{with .inputs.target}}{{end}}echo {{.}}",
        "{{$v := .inputs.target}}{{$v = 3}}echo {{$v}}",
        "{{with .inputs.target}}echo {{shell_quote .}}{{end}}",
    ] {
        let w = one_command(command, vec![input("target")]);
        assert_eq!(shell_warnings(&w), vec![], "{command}");
    }
}

/// Breaker, second round: `.error` and `.loop` reached through `with` or a variable were
/// not warned about; `{{$s := .states.s1}}{{$s.ExitCode}}` was warned about, and refused
/// ("needs a field") though it is valid.
#[test]
fn bound_namespaces_are_followed_to_the_field_printed() {
    let mut w = one_command("true", vec![]);
    w.hooks.workflow_error = vec![
        HookAction::Command("echo {{with .error}}{{.Message}}{{end}}".into()),
        HookAction::Command("echo {{$e := .error}}{{$e.Message}}".into()),
        HookAction::Command("echo {{with .error}}{{.ExitCode}} {{.State}}{{end}}".into()),
    ];
    let paths: Vec<String> = unquoted_shell_values(&w)
        .into_iter()
        .map(|d| d.path)
        .collect();
    assert_eq!(paths, ["hooks.workflow_error.0", "hooks.workflow_error.1"]);
    for command in [
        "echo {{$s := .states.s1}}{{$s.ExitCode}}",
        "echo {{with .states.s1}}{{.ExitCode}}{{end}}",
    ] {
        let w = wf(
            "s1",
            vec![
                cmd("s1", "true", Some("a")),
                cmd("a", command, Some("done")),
                terminal("done"),
            ],
        );
        assert_eq!(shell_warnings(&w), vec![], "{command}");
        let refused: Vec<String> = references(&w).into_iter().map(|d| d.message).collect();
        assert_eq!(refused, Vec::<String>::new(), "{command}");
    }
}

/// Many undeclared inputs: the first [`UNDECLARED_SHOWN`] are named, the rest counted, each
/// name once (50,000 gave a 489 KB error, and each name was compared with every earlier one).
#[test]
fn many_undeclared_inputs_are_named_up_to_a_cap_and_counted() {
    let mut w = wf("a", vec![terminal("a")]);
    w.inputs = vec![input("name")];
    let mut given: Vec<(String, String)> = (0..5000)
        .map(|i| (format!("extra{i}"), "v".to_owned()))
        .collect();
    given.push(("extra0".to_owned(), "again".to_owned()));
    given.push(("name".to_owned(), "ok".to_owned()));
    let e = refuse_undeclared_inputs(&w, &given).unwrap_err();
    let m = e.message();
    assert!(m.starts_with("inputs 'extra0', 'extra1', "), "{m}");
    assert!(
        m.contains("'extra19' and 4980 more are not declared by workflow 't'"),
        "{m}"
    );
    assert!(!m.contains("'extra20'"), "{m}");
    assert!(m.len() < 400, "{}", m.len());
    let one = refuse_undeclared_inputs(&w, &[("nme".to_owned(), "x".to_owned())]).unwrap_err();
    assert_eq!(
        one.message(),
        "input 'nme' (did you mean 'name'?) is not declared by workflow 't'"
    );
}

/// A terminal's message may read `.error` (the failure that routed there), an inline
/// `on_failure: {message}` too, where it is named as written (breaker: refused at
/// `states.__inline_error_a.message`); its fields are still checked; a bare `states.X`
/// in an expression is a value (`states.later == nil`; breaker: "needs a field").
#[test]
fn terminal_messages_read_error_and_expressions_read_whole_states() {
    let mut a = cmd("a", "echo", Some("done"));
    a.on_failure = Some("__inline_error_a".to_owned());
    a.transitions = vec![Transition {
        when: Some("states.later == nil".to_owned()),
        goto: "later".to_owned(),
    }];
    let inline = state(
        "__inline_error_a",
        StateKind::Terminal(TerminalState {
            status: TerminalStatus::Failure,
            message: Some("call failed: {{.error.message}} {{.error.Nope}}".to_owned()),
            exit_code: Some(3),
        }),
    );
    let mut done = terminal("done");
    if let StateKind::Terminal(t) = &mut done.kind {
        t.message = Some("{{.error.Message}} {{.inputs.nope}}".to_owned());
    }
    let w = wf(
        "a",
        vec![a, inline, cmd("later", "echo", Some("done")), done],
    );
    assert_eq!(
        ref_msgs(&w),
        vec![
            (
                "states.a.on_failure.message".to_owned(),
                "invalid error property \"Nope\" in \"error.Nope\"".to_owned()
            ),
            (
                "states.done.message".to_owned(),
                "undefined input \"nope\" referenced in states.done.message".to_owned()
            ),
        ]
    );
}

/// `continue_on_error` takes the success route on a failure too: a state with
/// `on_failure` and no `on_success` stops the run either way, and the warning says so.
#[test]
fn continue_on_error_without_on_success_is_warned_about() {
    let mut a = cmd("a", "echo", None);
    a.on_failure = Some("done".to_owned());
    a.continue_on_error = true;
    let w = wf("a", vec![a, terminal("done")]);
    let d = structural(&w);
    assert_eq!(
        codes(&d),
        vec![(ErrorCode::WorkflowValidationNoExit, "states.a".to_owned())]
    );
    assert!(
        d[0].message
            .contains("nor when it fails (continue_on_error takes the success route"),
        "{}",
        d[0].message
    );
}

/// A loop in another loop's body whose on_complete leaves that body ends the outer loop in
/// its first iteration (as in AWF (Go)): a warning with the route that goes on instead
/// (breaker: the run ended early and `awf validate` said nothing).
/// Each diagnostic as (severity, code, path, message, hint): what a nested-loop test compares.
fn rows(d: &[Diagnostic]) -> Vec<(Severity, ErrorCode, &str, &str, Option<&str>)> {
    d.iter()
        .map(|d| {
            (
                d.severity,
                d.code,
                d.path.as_str(),
                d.message.as_str(),
                d.hint.as_deref(),
            )
        })
        .collect()
}

#[test]
fn a_nested_loops_on_complete_outside_the_outer_body_warns() {
    let items = || LoopOver::Items("[1, 2]".to_owned());
    let w = |on_complete: Option<&str>, outer_done: &str| {
        wf(
            "outer",
            vec![
                loop_state("outer", items(), &["inner", "post"], Some(outer_done)),
                loop_state("inner", items(), &["show"], on_complete),
                cmd("show", "echo", Some("inner")),
                cmd("post", "echo", Some("outer")),
                cmd("fin", "echo", Some("done")),
                terminal("done"),
            ],
        )
    };
    let d = nested_loop_routes(&w(Some("fin"), "done"));
    assert_eq!(
        rows(&d),
        vec![(
            Severity::Warning,
            ErrorCode::WorkflowValidationInvalidTransition,
            "states.inner.on_complete",
            "loop \"inner\" is in the body of loop \"outer\" but its on_complete \"fin\" is not: each time \"inner\" completes, \"outer\" ends there without its remaining iterations, and the run goes on at \"fin\"",
            Some(
                "to go on with \"outer\" (its next body step, then its next iteration), set `on_complete: outer` or remove on_complete; to go to \"fin\" once \"outer\" is done, make it the on_complete of \"outer\""
            ),
        )]
    );
    // The outer loop's own next state copied onto the inner loop (the breaker's shape).
    let d = nested_loop_routes(&w(Some("done"), "done"));
    assert_eq!(
        d.iter().map(|d| d.hint.as_deref()).collect::<Vec<_>>(),
        vec![Some(
            "to go on with \"outer\" (its next body step, then its next iteration), set `on_complete: outer` or remove on_complete (\"outer\" already goes on to \"done\" when it is done)"
        )]
    );
    // Routes that stay with the outer loop: its name, a state of its body, none.
    for ok in [Some("outer"), Some("post"), Some("inner"), None] {
        assert_eq!(nested_loop_routes(&w(ok, "done")), Vec::new(), "{ok:?}");
    }
    // An unknown target is MISSING_STATE's error alone.
    assert_eq!(nested_loop_routes(&w(Some("nope"), "done")), Vec::new());
}

/// Leaving the outer loop on the inner one's completion is a choice when the inner loop
/// has another way to go on with it: its on_failure names the outer loop (retry until it
/// succeeds), or its body routes to the outer loop (find the first item whose checks pass).
#[test]
fn a_nested_loop_that_can_also_go_on_with_the_outer_one_is_not_warned_about() {
    let items = || LoopOver::Items("[1, 2]".to_owned());
    let mut inner = loop_state("inner", items(), &["check"], Some("found"));
    inner.on_failure = Some("outer".into());
    let w = wf(
        "outer",
        vec![
            loop_state("outer", items(), &["inner"], Some("done")),
            inner,
            cmd("check", "test -f x", Some("inner")),
            cmd("found", "echo", Some("done")),
            terminal("done"),
        ],
    );
    assert_eq!(nested_loop_routes(&w), Vec::new());
    let mut check = cmd("check", "test -f x", Some("inner"));
    check.transitions = vec![Transition {
        when: Some("states.check.ExitCode != 0".into()),
        goto: "outer".into(),
    }];
    let w = wf(
        "outer",
        vec![
            loop_state("outer", items(), &["inner"], Some("done")),
            loop_state("inner", items(), &["check"], Some("found")),
            check,
            cmd("found", "echo", Some("done")),
            terminal("done"),
        ],
    );
    assert_eq!(nested_loop_routes(&w), Vec::new());
}

/// A loop in another loop's body is routed by its on_complete only, as in AWF (Go): an
/// on_success there (without on_complete) is not taken, the body goes on; no warning when
/// it names the outer loop or the next body step (the same route).
#[test]
fn a_nested_loops_on_success_without_on_complete_warns_that_it_is_not_taken() {
    let items = || LoopOver::Items("[1, 2]".to_owned());
    let w = |on_success: &str| {
        let mut inner = loop_state("inner", items(), &["show"], None);
        inner.on_success = Some(on_success.to_owned());
        wf(
            "outer",
            vec![
                loop_state("outer", items(), &["inner", "post"], Some("done")),
                inner,
                cmd("show", "echo", Some("inner")),
                cmd("post", "echo", Some("outer")),
                cmd("fin", "echo", Some("done")),
                terminal("done"),
            ],
        )
    };
    let d = nested_loop_routes(&w("fin"));
    assert_eq!(
        rows(&d),
        vec![(
            Severity::Warning,
            ErrorCode::WorkflowValidationInvalidTransition,
            "states.inner.on_success",
            "\"inner\" is a loop in the body of loop \"outer\": its on_success is ignored there (when it completes, the body goes on with its next step, as in AWF (Go))",
            Some(
                "to route \"inner\" when it completes, use on_complete (`on_complete: outer` goes on with \"outer\"); otherwise remove on_success"
            ),
        )]
    );
    for same in ["outer", "post"] {
        assert_eq!(nested_loop_routes(&w(same)), Vec::new(), "{same}");
    }
}

/// Breaker: `.loop.Parent.Item` in a loop that is not inside another passed validate and
/// failed the run ("undefined variable"), as did a typo under `Parent`. The nesting is
/// counted (a parallel block's branches as deep as the block); `.loop.Parent` alone stays a
/// value (nil outside a nested loop, for `{{if .loop.Parent}}`).
#[test]
fn loop_parent_needs_an_enclosing_loop_and_a_known_field() {
    let items = || LoopOver::Items("[1, 2]".to_owned());
    let w = wf(
        "outer",
        vec![
            loop_state("outer", items(), &["flat", "inner", "p"], Some("done")),
            cmd(
                "flat",
                "echo {{.loop.Parent.Item}} {{if .loop.Parent}}x{{end}}",
                Some("outer"),
            ),
            loop_state("inner", items(), &["deep"], Some("outer")),
            cmd(
                "deep",
                "echo {{.loop.Parent.Item}} {{.loop.Parent.Itme}} {{.loop.Parent.Parent.Index}}",
                Some("inner"),
            ),
            par("p", &["branch"], Some("outer")),
            cmd("branch", "echo {{.loop.Parent.Index}}", None),
            terminal("done"),
        ],
    );
    let got: Vec<(String, String, Option<String>)> = references(&w)
        .into_iter()
        .map(|d| (d.path, d.message, d.hint))
        .collect();
    let nil_hint = Some(
        "`.loop.Parent` is the loop around the current loop: use it in the body of a loop that \
         is itself in another loop's body"
            .to_owned(),
    );
    assert_eq!(
        got,
        vec![
            (
                "states.flat.command".to_owned(),
                "loop reference \"{{.loop.Parent.Item}}\" in states.flat.command: state \
                 \"flat\" runs in one loop only, so `.loop.Parent` is nil"
                    .to_owned(),
                nil_hint.clone()
            ),
            (
                "states.deep.command".to_owned(),
                "invalid loop property \"Itme\" in \"loop.Parent.Itme\"".to_owned(),
                Some("did you mean 'Item'?".to_owned())
            ),
            (
                "states.deep.command".to_owned(),
                "loop reference \"{{.loop.Parent.Parent.Index}}\" in states.deep.command: state \
                 \"deep\" runs in 2 nested loops only, so `.loop.Parent.Parent` is nil"
                    .to_owned(),
                nil_hint.clone()
            ),
            (
                "states.branch.command".to_owned(),
                "loop reference \"{{.loop.Parent.Index}}\" in states.branch.command: state \
                 \"branch\" runs in one loop only, so `.loop.Parent` is nil"
                    .to_owned(),
                nil_hint
            ),
        ]
    );
}

/// The timeout bounds every attempt and the waits between them together (AWF (Go)):
/// `awf validate` warns when the waits alone leave an attempt no time to start (jitter taken
/// off, the shortest waits), and not when the timeout leaves room for every attempt (new user:
/// `timeout: 5s` with two attempts 10 ms apart was warned about).
#[test]
fn a_timeout_warns_only_when_the_retry_waits_use_it_up() {
    let retry = |n: u32, delay_ms: u64, jitter: f64| RetryPolicy {
        max_attempts: n,
        initial_delay: std::time::Duration::from_millis(delay_ms),
        max_delay: None,
        backoff: Backoff::Constant,
        multiplier: 2.0,
        jitter,
        retryable_exit_codes: Vec::new(),
    };
    let step = |name: &str, timeout_ms: Option<u64>, r: RetryPolicy| {
        let mut s = cmd(name, "sleep 5", Some("done"));
        s.timeout = timeout_ms.map(std::time::Duration::from_millis);
        s.retry = Some(r);
        s
    };
    let cases = [
        // 400 ms + 400 ms + 400 ms >= 1 s: attempt 4 (of 5) never starts.
        (
            step("tight", Some(1000), retry(5, 400, 0.0)),
            Some(
                "timeout 1s ends before attempt 4 of retry can start: the waits before it take \
                 1.2s (the timeout bounds every attempt and the waits between them together), so \
                 attempts 4 to 5 never run",
            ),
        ),
        // The last attempt alone.
        (
            step("last", Some(1000), retry(2, 1000, 0.0)),
            Some(
                "timeout 1s ends before attempt 2 of retry can start: the waits before it take \
                 1s (the timeout bounds every attempt and the waits between them together), so \
                 attempt 2 never runs",
            ),
        ),
        // Room for every attempt: 5 s over two attempts 10 ms apart (the trial's).
        (step("roomy", Some(5000), retry(2, 10, 0.0)), None),
        // 100 ms + 100 ms < 1 s.
        (step("fits", Some(1000), retry(3, 100, 0.0)), None),
        // Jitter may shorten each wait by half: 2 × 300 ms < 1 s at the shortest.
        (step("jittered", Some(1000), retry(3, 600, 0.5)), None),
        (step("once", Some(1000), retry(1, 5000, 0.0)), None),
        (step("untimed", None, retry(3, 5000, 0.0)), None),
    ];
    for (s, expected) in cases {
        let name = s.name.clone();
        let w = wf(&name, vec![s, terminal("done")]);
        let found = timeout_spans_retries(&w);
        let Some(message) = expected else {
            assert!(found.is_empty(), "{name}: {found:?}");
            continue;
        };
        assert_eq!(found.len(), 1, "{name}: {found:?}");
        let d = &found[0];
        assert_eq!(
            (
                d.severity,
                d.code,
                d.path.as_str(),
                d.message.as_str(),
                d.hint.as_deref()
            ),
            (
                Severity::Warning,
                ErrorCode::WorkflowValidationInvalidState,
                format!("states.{name}.timeout").as_str(),
                message,
                Some(
                    "raise timeout above the waits plus what the attempts take, or shorten \
                     retry's delays (initial_delay, max_delay)"
                ),
            ),
            "{name}"
        );
    }
}

/// A reference the reference checks refuse (an error) is not also warned about as an
/// unquoted shell value: `{{.error.Message}}` in a step's command, an undeclared input, an
/// unknown state; in a `workflow_error` hook `.error.Message` is allowed, and warned.
#[test]
fn a_reference_that_is_an_error_gets_no_unquoted_value_warning() {
    let mut w = wf(
        "a",
        vec![
            cmd(
                "a",
                "echo {{.error.Message}} {{.inputs.nope}} {{.states.ghost.Output}} {{.inputs.msg}}",
                Some("done"),
            ),
            terminal("done"),
        ],
    );
    w.inputs = vec![input("msg")];
    w.hooks.workflow_error = vec![HookAction::Command("notify {{.error.Message}}".into())];
    let found: Vec<(String, String)> = unquoted_shell_values(&w)
        .into_iter()
        .map(|d| (d.path, d.message))
        .collect();
    assert_eq!(found.len(), 2, "{found:#?}");
    assert_eq!(found[0].0, "states.a.command");
    assert!(
        found[0].1.starts_with("{{.inputs.msg}} puts inputs.msg"),
        "{}",
        found[0].1
    );
    assert_eq!(found[1].0, "hooks.workflow_error.0");
    assert!(
        found[1]
            .1
            .starts_with("{{.error.Message}} puts error.Message"),
        "{}",
        found[1].1
    );
    // Every one of the three is an error of the reference checks.
    let errors: Vec<String> = references(&w)
        .into_iter()
        .filter(|d| d.severity == Severity::Error && d.path == "states.a.command")
        .map(|d| d.message)
        .collect();
    assert_eq!(errors.len(), 3, "{errors:#?}");
}

/// A state field that does not exist (`Outptu`) and a namespace spelled `States` are errors
/// of the reference checks: not also warned about as unquoted shell values (new user: the
/// warning's hint repeated the typo). Through a `with`, the field is not checked: warned.
#[test]
fn a_bad_state_field_or_namespace_gets_no_unquoted_value_warning() {
    let w = wf(
        "a",
        vec![
            cmd("a", "echo hi", Some("b")),
            cmd(
                "b",
                "echo \"{{.states.a.Outptu}}\" {{.States.a.Output}} {{.states.a.exit_code}} {{.states.a.Stderr}}",
                Some("done"),
            ),
            terminal("done"),
        ],
    );
    let found: Vec<String> = unquoted_shell_values(&w)
        .into_iter()
        .map(|d| d.message)
        .collect();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].starts_with("{{.states.a.Stderr}} puts states.a.Stderr"),
        "{}",
        found[0]
    );
    let errors: Vec<String> = references(&w)
        .into_iter()
        .filter(|d| d.severity == Severity::Error && d.path == "states.b.command")
        .map(|d| d.message)
        .collect();
    assert_eq!(errors.len(), 2, "{errors:#?}");
}

/// Breaker: a loop body state that a route outside the loop also leads to passed validate
/// and failed there ("undefined variable: loop"). It is warned about, once.
#[test]
fn a_loop_body_state_also_reached_outside_the_loop_is_warned_about() {
    let items = || LoopOver::Items("[1, 2]".to_owned());
    let w = wf(
        "pre",
        vec![
            cmd("pre", "true", Some("body")),
            loop_state("each", items(), &["body"], Some("done")),
            cmd("body", "echo {{.loop.Item}} {{.loop.Index}}", Some("each")),
            terminal("done"),
        ],
    );
    let got: Vec<(Severity, String, String)> = references(&w)
        .into_iter()
        .map(|d| (d.severity, d.path, d.message))
        .collect();
    assert_eq!(
        got,
        vec![(
            Severity::Warning,
            "states.body.command".to_owned(),
            "loop reference \"{{.loop.Item}}\" in states.body.command: state \"body\" is in a \
             loop's body but also runs outside any loop (a route from outside the loop leads to \
             it), where `.loop` is undefined and the step fails"
                .to_owned()
        )]
    );
    // Reached only through its loop: nothing to say.
    let inside = wf(
        "each",
        vec![
            loop_state("each", items(), &["body"], Some("done")),
            cmd("body", "echo {{.loop.Item}}", Some("each")),
            terminal("done"),
        ],
    );
    assert_eq!(references(&inside), vec![]);
}

/// Breaker: `multiplier: 1e30` validated, then the run's delays overflowed. A multiplier
/// over 1000 (or infinite) is an error with a hint; 0 and 1000 are taken (AWF takes >= 0).
#[test]
fn an_absurd_retry_multiplier_is_an_error() {
    let check = |multiplier: f64| -> Vec<(String, String, Option<String>)> {
        let mut r = cmd("r", "echo", Some("done"));
        r.retry = Some(RetryPolicy {
            max_attempts: 3,
            initial_delay: std::time::Duration::from_secs(1),
            max_delay: None,
            backoff: Backoff::Exponential,
            multiplier,
            jitter: 0.0,
            retryable_exit_codes: vec![],
        });
        structural(&wf("r", vec![r, terminal("done")]))
            .into_iter()
            .map(|d| (d.path, d.message, d.hint))
            .collect()
    };
    let hint = Some(
        "each delay is the previous one times the multiplier: 2 doubles it; set `max_delay` to cap the delays (without it they stop growing at 1h)"
            .to_owned(),
    );
    assert_eq!(
        check(1e30),
        vec![(
            "states.r.retry.multiplier".to_owned(),
            "multiplier 1e30 is too large: at most 1000".to_owned(),
            hint.clone()
        )]
    );
    assert_eq!(
        check(f64::INFINITY),
        vec![(
            "states.r.retry.multiplier".to_owned(),
            "multiplier inf is too large: at most 1000".to_owned(),
            hint
        )]
    );
    assert_eq!(check(1000.5).len(), 1);
    assert_eq!(check(1000.0), vec![]);
    assert_eq!(check(0.0), vec![]);
    assert_eq!(check(2.0), vec![]);
}

/// Breaker (h4): inside `$( )` or backticks in an unquoted here-document's body, a value
/// was read as here-document text, so the hint (`shell_quote: true`) did not help. It is
/// command text there, and bash ends the here-document at a line of the value equal to its
/// delimiter: the warning says both and the hint assigns the value before the document.
#[test]
fn a_value_in_a_here_documents_substitution_is_warned_about_as_command_text() {
    let unquoted = ErrorCode::WorkflowValidationUnquotedValue;
    let ineffective = ErrorCode::WorkflowValidationIneffectiveQuote;
    for command in [
        "cat <<EOF\nTitle: $(echo {{.inputs.target}} | tr a-z A-Z)\nEOF",
        "cat <<EOF\n`echo {{.inputs.target}}`\nEOF",
        "cat <<-EOF\n\t$(echo \"{{.inputs.target}}\")\n\tEOF",
        "cat <<EOF\n$(cat <<EOT\n{{.inputs.target}}\nEOT\n)\nEOF",
    ] {
        let (code, message, hint) = only_warning(command);
        assert_eq!(code, unquoted, "{command}");
        assert!(
            message.contains("inside $( ) or backticks within a here-document (<<EOF)")
                && message.contains("a line EOF in it ends the here-document"),
            "{command}: {message}"
        );
        assert!(
            hint.starts_with(
                "assign it before the here-document (v={{shell_quote .inputs.target}}) and write \"$v\" in its place, or set `shell_quote: true`"
            ),
            "{command}: {hint}"
        );
    }
    // `shell_quote` is right for the shell word, not against the document's end.
    let (code, message, hint) =
        only_warning("cat <<EOF\n$(echo {{shell_quote .inputs.target}})\nEOF");
    assert_eq!(code, ineffective);
    assert!(
        message.contains("a line EOF in the value still ends the here-document"),
        "{message}"
    );
    assert!(
        hint.contains("(v={{shell_quote .inputs.target}}) and write \"$v\""),
        "{hint}"
    );
    // Nor against backticks around its `$( )`: a backtick in the value ends them.
    let (code, message, hint) = only_warning("echo `echo $(echo {{shell_quote .inputs.target}})`");
    assert_eq!(code, ineffective);
    assert!(message.contains("inside backticks"), "{message}");
    assert!(
        hint.contains("use $( … ) instead of the backticks"),
        "{hint}"
    );
    // Under the mode all of these are quoted for where they land: nothing to say.
    let mut w = one_command(
        "cat <<EOF\n$(echo {{.inputs.target}}) `echo {{.inputs.target}}` $(echo {{shell_quote .inputs.target}})\nEOF\necho `echo $(echo {{shell_quote .inputs.target}})`",
        vec![input("target")],
    );
    w.shell_quote = true;
    assert_eq!(shell_warnings(&w), vec![]);
}

/// Breaker (h4): a `script_file:` whose `#!` names an interpreter awf does not know was
/// filled in unquoted; it is now quoted as shell, and validate says it cannot tell. A
/// non-POSIX shell's script (fish) is refused under the mode, and validate says so.
#[test]
fn scripts_whose_interpreter_awf_cannot_quote_for_are_warned_about() {
    let script = |shebang: &str| format!("{shebang}\necho \"hello {{{{.inputs.target}}}}\"\n");
    let mut w = one_command("true", vec![input("target")]);
    let at = "states.a.script_file";
    let found = unquoted_shell_values_in_script(&w, &script("#!/usr/bin/frob"), at);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert_eq!(found[0].code, ErrorCode::WorkflowValidationUnquotedValue);
    assert_eq!(found[0].path, at);
    assert!(
        found[0]
            .message
            .starts_with("awf cannot tell which interpreter runs the script from its #! line (the program \"frob\")"),
        "{}",
        found[0].message
    );
    // ... and its value is checked as shell text (the double-quoted one).
    assert!(found[1].message.contains("double-quoted"), "{:?}", found[1]);
    for shebang in [
        "#!/bin/rbash",
        "#!/usr/bin/nice bash",
        "#!/usr/bin/env -S nice bash",
    ] {
        let found = unquoted_shell_values_in_script(&w, &script(shebang), at);
        assert_eq!(found.len(), 1, "{shebang}: {found:#?}");
        assert!(found[0].message.contains("double-quoted"), "{shebang}");
    }
    assert_eq!(
        unquoted_shell_values_in_script(&w, &script("#!/usr/bin/env python3"), at),
        vec![]
    );
    // A script printing no value: nothing to tell.
    assert_eq!(
        unquoted_shell_values_in_script(&w, "#!/usr/bin/frob\necho hi\n", at),
        vec![]
    );
    w.shell_quote = true;
    let found = unquoted_shell_values_in_script(&w, &script("#!/usr/bin/fish"), at);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].message.starts_with(
            "the script runs with fish: shell_quote: true cannot quote template values for fish"
        ) && found[0]
            .message
            .ends_with("so the step fails before it runs"),
        "{}",
        found[0].message
    );
    assert!(
        found[0]
            .hint
            .as_deref()
            .is_some_and(|h| h.contains("$name in fish")),
        "{:?}",
        found[0].hint
    );
}

#[test]
fn states_read_by_a_step_are_every_state_its_templates_name_once_in_order() {
    let mut c = cmd(
        "c",
        "echo {{.states.b.Output}} {{ states.a.ExitCode }} {{.states.b.Stderr}} {{.states.nope.Output}} {{.states.c.Output}}",
        Some("p"),
    );
    c.hooks.pre = vec![HookAction::Log("{{.states.e.Output}}".to_owned())];
    c.hooks.post = vec![HookAction::Command("echo {{.states.f.Output}}".to_owned())];
    // Routing does not run in `--step`: a transition's references are not the step's reads.
    c.transitions = vec![Transition {
        when: Some("{{.states.g.Output}} == x".to_owned()),
        goto: "p".to_owned(),
    }];
    let mut p = state(
        "p",
        StateKind::Parallel(ParallelStep {
            branches: vec!["l".to_owned(), "x".to_owned()],
            strategy: ParallelStrategy::AllSucceed,
            max_concurrent: 0,
        }),
    );
    p.on_success = Some("done".to_owned());
    let w = wf(
        "a",
        vec![
            cmd("a", "true", Some("b")),
            cmd("b", "true", Some("e")),
            cmd("e", "true", Some("f")),
            cmd("f", "true", Some("g")),
            cmd("g", "true", Some("c")),
            c,
            p,
            loop_state(
                "l",
                LoopOver::Items("{{.states.f.Output}}".to_owned()),
                &["y"],
                None,
            ),
            // A state the block contains runs in it: reading it is no read from outside.
            cmd("x", "echo {{.states.y.Output}} {{.states.a.Output}}", None),
            cmd("y", "echo {{.states.x.Output}} {{.states.g.Output}}", None),
            terminal("done"),
        ],
    );
    assert_eq!(states_read_by(&w, "c"), vec!["b", "a", "e", "f"]);
    assert_eq!(states_read_by(&w, "p"), vec!["f", "a", "g"]);
    assert_eq!(states_read_by(&w, "a"), Vec::<String>::new());
    assert_eq!(states_read_by(&w, "absent"), Vec::<String>::new());
}

/// A failure terminal whose message reads `.error`, reached as `deploy -> (on_failure)
/// notify -> stopped` and, separately, as `ok -> quiet` with no failure on the way.
fn error_reader(name: &str) -> State {
    state(
        name,
        StateKind::Terminal(TerminalState {
            status: TerminalStatus::Failure,
            message: Some("not deployed: {{.error.Message}}".into()),
            exit_code: None,
        }),
    )
}

#[test]
fn error_at_a_terminal_no_failure_reaches_is_warned() {
    let mut deploy = cmd("deploy", "exit 3", Some("done"));
    deploy.on_failure = Some("notify".into());
    let w = wf(
        "deploy",
        vec![
            deploy,
            cmd("notify", "echo not deployed", Some("stopped")),
            error_reader("stopped"),
            terminal("done"),
        ],
    );
    // After a compensation step: `.error` is the deploy's failure, nothing to say.
    assert_eq!(undefined_error_at_terminals(&w), Vec::new());
    // Reached only through successes: warned, at the message.
    let w = wf(
        "check",
        vec![cmd("check", "true", Some("quiet")), error_reader("quiet")],
    );
    let d = undefined_error_at_terminals(&w);
    assert_eq!(
        d.iter()
            .map(|d| (d.code, d.severity, d.path.as_str(), d.message.as_str()))
            .collect::<Vec<_>>(),
        vec![(
            ErrorCode::WorkflowValidationInvalidReference,
            Severity::Warning,
            "states.quiet.message",
            "terminal quiet: its message reads .error, but no route to it follows a failure: \
             .error will be undefined there and the message shown as written",
        )]
    );
    // A command's transitions are taken on failures too: no warning.
    let mut check = cmd("check", "false", None);
    check.transitions = vec![Transition {
        when: None,
        goto: "quiet".into(),
    }];
    let w = wf("check", vec![check, error_reader("quiet")]);
    assert_eq!(undefined_error_at_terminals(&w), Vec::new());
}

/// Stop 43: a NUL byte written in a command (YAML `"printf '\033'"`) is an error at the
/// command's path, for steps and hooks; a template that may produce one is not.
#[test]
fn a_nul_byte_written_in_a_command_is_an_error_at_its_path() {
    let mut w = wf(
        "a",
        vec![
            cmd("a", "printf '\u{0}33]0;x'", Some("b")),
            cmd("b", "cat {{.inputs.f}}", Some("done")),
            terminal("done"),
        ],
    );
    w.hooks.workflow_cancel = vec![HookAction::Command("echo \u{0}".into())];
    let found: Vec<_> = nul_in_commands(&w)
        .into_iter()
        .map(|d| (d.code, d.path, d.message))
        .collect();
    assert_eq!(
        found,
        [
            (
                ErrorCode::WorkflowValidationInvalidState,
                "states.a.command".to_owned(),
                "the command holds a NUL byte (at byte 9), which no command line can carry: the run would fail here".to_owned()
            ),
            (
                ErrorCode::WorkflowValidationInvalidState,
                "hooks.workflow_cancel.0".to_owned(),
                "the command holds a NUL byte (at byte 6), which no command line can carry: the run would fail here".to_owned()
            ),
        ]
    );
    assert!(
        structural(&w)
            .iter()
            .any(|d| d.path == "states.a.command" && d.severity == Severity::Error)
    );
}

/// Trial fix 63 (1): a NUL byte written in what a CLI agent gets on its command line (prompt,
/// system prompt, injected context, option strings) or in a command step's `dir:` is an error
/// at its path, with the YAML hint; an agent of a provider that gets its prompt as JSON
/// (`openai_compatible`, `acp`) or of a templated provider is not flagged.
#[test]
fn a_nul_byte_written_in_a_cli_agent_s_texts_or_a_dir_is_an_error_at_its_path() {
    let mut a = agent("a");
    a.prompt = Some("say \u{0}33 please".into());
    a.system_prompt = Some("be\u{0}".into());
    a.conversation = Some(ConversationConfig {
        continue_from: None,
        inject_context: Some("\u{0}ctx".into()),
    });
    a.options
        .insert("model".into(), serde_json::Value::String("m\u{0}".into()));
    a.options.insert(
        "allowed_tools".into(),
        serde_json::json!(["Read", "Bash\u{0}"]),
    );
    let mut http = agent("h");
    http.provider = "openai_compatible".into();
    http.prompt = Some("a\u{0}".into());
    let mut templated = agent("t");
    templated.provider = "{{.inputs.p}}".into();
    templated.prompt = Some("a\u{0}".into());
    let mut c = cmd("c", "true", Some("done"));
    if let StateKind::Command(step) = &mut c.kind {
        step.dir = Some("/tmp/\u{0}x".into());
    }
    let mut sa = state("a", StateKind::Agent(a));
    sa.on_success = Some("h".into());
    let mut sh = state("h", StateKind::Agent(http));
    sh.on_success = Some("t".into());
    let mut st = state("t", StateKind::Agent(templated));
    st.on_success = Some("c".into());
    let w = wf("a", vec![sa, sh, st, c, terminal("done")]);
    let found = nul_in_commands(&w);
    let got: Vec<_> = found
        .iter()
        .map(|d| (d.code, d.path.as_str(), d.message.as_str()))
        .collect();
    let inv = ErrorCode::WorkflowValidationInvalidState;
    let cli = "no command line can carry (the agent's CLI gets it as an argument): the run would fail here";
    assert_eq!(
        got,
        [
            (
                inv,
                "states.a.prompt",
                format!("the prompt holds a NUL byte (at byte 5), which {cli}").as_str()
            ),
            (
                inv,
                "states.a.system_prompt",
                format!("the system prompt holds a NUL byte (at byte 3), which {cli}").as_str()
            ),
            (
                inv,
                "states.a.conversation.inject_context",
                format!("the context holds a NUL byte (at byte 1), which {cli}").as_str()
            ),
            (
                inv,
                "states.a.options.model",
                format!("the option holds a NUL byte (at byte 2), which {cli}").as_str()
            ),
            (
                inv,
                "states.a.options.allowed_tools.1",
                format!("the option holds a NUL byte (at byte 5), which {cli}").as_str()
            ),
            (
                inv,
                "states.c.dir",
                "the working directory holds a NUL byte (at byte 6), which no path can carry: the run would fail here"
            ),
        ]
    );
    assert!(
        found
            .iter()
            .all(|d| d.hint.as_deref() == Some(NUL_IN_TEXT_HINT)),
        "{found:#?}"
    );
    // Part of the structural checks (`awf validate` and `awf run` alike).
    assert!(
        structural(&w)
            .iter()
            .any(|d| d.path == "states.a.prompt" && d.severity == Severity::Error)
    );
}

/// Trial fix 63 (3): `index .loop.Item "name"` in a template of a step whose loop lists plain
/// values (strings, numbers, booleans) in the YAML is an error (the run fails at that step),
/// in a command as in an agent's prompt; items a template gives, object items (their JSON
/// text, left to the run) and an index by number are not flagged. A field of the item in a
/// prompt (`.loop.Item.name`) is the error a command's is.
#[test]
fn an_index_or_field_of_a_plain_loop_item_is_an_error_in_commands_and_prompts() {
    let build = |items: &str| {
        let mut ask = agent("ask");
        ask.prompt = Some("about {{ index .loop.Item \"name\" }} and {{.loop.Item.port}}".into());
        let p = par("p", &["ask", "num"], None);
        wf(
            "l",
            vec![
                loop_state(
                    "l",
                    LoopOver::Items(items.to_owned()),
                    &["s", "p"],
                    Some("done"),
                ),
                cmd(
                    "s",
                    "echo {{index .loop.Item `name`}} {{index .loop.Item 0}}",
                    None,
                ),
                p,
                state("ask", StateKind::Agent(ask)),
                cmd("num", "echo {{.loop.Item}}", None),
                terminal("done"),
            ],
        )
    };
    let loop_msgs = |w: &Workflow| -> Vec<(String, String)> {
        references(w)
            .into_iter()
            .filter(|d| d.message.starts_with("loop reference"))
            .map(|d| (d.path, d.message))
            .collect()
    };
    let plain = build("[\"api\", 8080, true]");
    let field = "loop reference \"{{.loop.Item.port}}\" in states.ask.prompt: `.loop.Item` is the item as text in a template (an object item is its JSON text, as in AWF (Go)), so it has no field \"port\"".to_owned();
    assert_eq!(
        loop_msgs(&plain),
        vec![
            (
                "states.s.command".to_owned(),
                "loop reference \"{{index .loop.Item \"name\"}}\" in states.s.command: the items of loop \"l\" are plain values (strings, numbers or booleans), so `.loop.Item` has no key \"name\": the step would fail at every item".to_owned()
            ),
            (
                "states.ask.prompt".to_owned(),
                "loop reference \"{{index .loop.Item \"name\"}}\" in states.ask.prompt: the items of loop \"l\" are plain values (strings, numbers or booleans), so `.loop.Item` has no key \"name\": the step would fail at every item".to_owned()
            ),
            ("states.ask.prompt".to_owned(), field.clone()),
        ]
    );
    let d = references(&plain);
    assert!(
        d.iter()
            .filter(|d| d.message.contains("has no key"))
            .all(|d| d.severity == Severity::Error
                && d.code == ErrorCode::WorkflowValidationInvalidReference
                && d.hint.as_deref().is_some_and(|h| h.contains("jq -r .name"))),
        "{d:#?}"
    );
    // A comma-separated list is plain values too.
    assert_eq!(loop_msgs(&build("api, web")).len(), 3);
    // Items from a template or objects: only the field read (the item is text, always).
    for items in ["{{.inputs.list}}", "[{\"name\": \"api\"}]"] {
        assert_eq!(
            loop_msgs(&build(items)),
            vec![("states.ask.prompt".to_owned(), field.clone())],
            "{items}"
        );
    }
    // The prompt is scanned for the loop item only: an undeclared input there is left alone.
    let mut w = build("[\"a\"]");
    if let Some(State {
        kind: StateKind::Agent(a),
        ..
    }) = w.states.get_mut("ask")
    {
        a.prompt = Some("{{.inputs.nope}} {{.loop.Item}}".into());
    }
    assert_eq!(loop_msgs(&w).len(), 1, "{:#?}", references(&w));
    assert!(references(&w).iter().all(|d| !d.message.contains("nope")));
}

#[test]
fn shell_variables_read_skips_quotes_escapes_comments_and_actions() {
    assert_eq!(
        shell_variables_read(r#"echo "[$log]" ${b} ${#c} ${d:-x} $e_1x"#),
        ["log", "b", "c", "d", "e_1x"]
    );
    assert!(shell_variables_read(r"echo '$a' \$b $'$c' # $d").is_empty());
    assert!(shell_variables_read("echo {{ $x := .inputs.a }}{{ $x }} $$ $1").is_empty());
    // A `$` inside double quotes is a read even with single quotes around it there.
    assert_eq!(shell_variables_read(r#"echo "'$a'""#), ["a"]);
    assert_eq!(shell_variables_read("echo $a $a"), ["a"]);
}

#[test]
fn a_hook_command_reading_a_declared_input_variable_is_warned_about() {
    let mut w = wf(
        "a",
        vec![cmd("a", r#"echo "[$log]""#, Some("done")), terminal("done")],
    );
    w.inputs.push(input("log"));
    // A step's command gets the input: nothing to say.
    assert!(hook_input_variables(&w).is_empty());
    w.hooks.workflow_start = vec![HookAction::Command(r#"echo "[$log] $HOME""#.into())];
    w.states.get_mut("a").unwrap().hooks.post = vec![
        HookAction::Log("$log".into()),
        HookAction::Command("echo '$log'; echo ${log:-none}".into()),
    ];
    let found: Vec<(String, String)> = hook_input_variables(&w)
        .into_iter()
        .map(|d| {
            assert_eq!(d.severity, Severity::Warning);
            assert_eq!(d.code, ErrorCode::WorkflowValidationInvalidReference);
            assert!(d.message.contains("reads $log"), "{}", d.message);
            (d.path, d.hint.unwrap())
        })
        .collect();
    let hint = "set it from the input at the command's start: `log={{shell_quote .inputs.log}}; …`";
    assert_eq!(
        found,
        [
            ("states.a.hooks.post.1.command".to_owned(), hint.to_owned()),
            ("hooks.workflow_start.0.command".to_owned(), hint.to_owned()),
        ]
    );
}

#[test]
fn shell_variables_read_leaves_out_what_the_command_assigns_first() {
    assert!(shell_variables_read(r#"log={{shell_quote .inputs.log}}; echo "[$log]""#).is_empty());
    assert!(shell_variables_read("export a=1 && echo $a").is_empty());
    // Read before its assignment, or `=` inside quotes: a read.
    assert_eq!(shell_variables_read("echo $a; a=1"), ["a"]);
    assert_eq!(shell_variables_read(r#"echo "a=1" $a"#), ["a"]);
}

#[test]
fn lazy_paths_write_the_paths_the_eager_ones_did() {
    // `StateBase` and `RouteField` replace `format!("states.{name}")` and the suffixes
    // `targets` made (`transitions.{i}.goto`, …): the same text, made only for a finding.
    assert_eq!(StateBase("build").to_string(), "states.build");
    assert_eq!(format!("{}.prompt", StateBase("a b")), "states.a b.prompt");
    let goto = RouteField {
        after: Some("goto"),
        ..RouteField::item("transitions", 2)
    };
    let fields = [
        (RouteField::named("on_success"), "on_success"),
        (
            RouteField::named("conversation.continue_from"),
            "conversation.continue_from",
        ),
        (RouteField::item("parallel", 0), "parallel.0"),
        (RouteField::item("body", 11), "body.11"),
        (goto, "transitions.2.goto"),
    ];
    for (field, text) in fields {
        assert_eq!(field.to_string(), text);
        assert_eq!(
            format!("{}.{field}", StateBase("s")),
            format!("states.s.{text}")
        );
    }
}
