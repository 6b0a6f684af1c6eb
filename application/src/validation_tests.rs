use std::path::PathBuf;
use std::sync::Arc;

use awf_domain::ports::fakes::FakeExecutor;
use awf_domain::ports::fakes::FakeRepository;
use awf_domain::workflow::CallWorkflowStep;
use awf_domain::workflow::State;
use awf_domain::workflow::TerminalState;
use awf_domain::workflow::TerminalStatus;
use awf_domain::workflow::WorkflowHooks;
use awf_domain::workflow::WorkflowSource;
use indexmap::IndexMap;
use pretty_assertions::assert_eq;

use super::*;

/// Workflow `id` whose initial step calls each of `targets` in turn, then ends.
fn caller(id: &str, targets: &[&str]) -> Workflow {
    let mut states: IndexMap<String, State> = IndexMap::new();
    let names: Vec<String> = (0..targets.len()).map(|i| format!("c{i}")).collect();
    for (i, target) in targets.iter().enumerate() {
        let mut s = State::new(
            &names[i],
            StateKind::CallWorkflow(CallWorkflowStep {
                workflow: (*target).to_owned(),
                inputs: IndexMap::new(),
                outputs: IndexMap::new(),
            }),
        );
        s.on_success = Some(names.get(i + 1).cloned().unwrap_or_else(|| "done".into()));
        states.insert(s.name.clone(), s);
    }
    let done = State::new(
        "done",
        StateKind::Terminal(TerminalState {
            status: TerminalStatus::Success,
            message: None,
            exit_code: None,
        }),
    );
    states.insert("done".into(), done);
    Workflow {
        name: id.into(),
        version: None,
        description: None,
        author: None,
        tags: vec![],
        inputs: vec![],
        env: vec![],
        initial: names.first().cloned().unwrap_or_else(|| "done".into()),
        states,
        hooks: WorkflowHooks::default(),
        outputs: vec![],
        shell_quote: false,
        budget: None,
        source: WorkflowSource {
            identifier: id.into(),
            path: None,
            dir: PathBuf::from("/"),
        },
    }
}

fn services(workflows: &[Workflow]) -> Services {
    let repo = workflows
        .iter()
        .fold(FakeRepository::new(), |r, w| r.with(w.clone()));
    Services::fakes(repo, Arc::new(FakeExecutor::new()))
}

/// (path, message) of every CYCLE_DETECTED error `awf validate` reports, on a thread with a
/// deadline (a walk that does not end fails the test instead of hanging it).
fn cycles(workflows: &[Workflow], root: usize) -> Vec<(String, String)> {
    let workflows = workflows.to_vec();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let services = services(&workflows);
        let loaded = LoadedWorkflow {
            workflow: workflows[root].clone(),
            source_map: Default::default(),
            diagnostics: Vec::new(),
            unknown_types: std::collections::BTreeMap::new(),
        };
        let found: Vec<(String, String)> = validate_loaded(&services, loaded, &BTreeMap::new())
            .diagnostics
            .into_iter()
            .filter(|d| d.code == ErrorCode::WorkflowValidationCycleDetected)
            .map(|d| (d.path, d.message))
            .collect();
        let _ = tx.send(found);
    });
    rx.recv_timeout(std::time::Duration::from_secs(20))
        .expect("the checks did not end within 20 s")
}

const RUN_FAILS: &str = "(the run would fail with EXECUTION.WORKFLOW.CIRCULAR_CALL)";

#[test]
fn regression_a_workflow_calling_itself_is_a_cycle_at_validation() {
    assert_eq!(
        cycles(&[caller("rec", &["rec"])], 0),
        vec![(
            "states.c0.workflow".to_owned(),
            format!("workflow \"rec\" calls itself: rec -> rec {RUN_FAILS}")
        )]
    );
}

#[test]
fn indirect_call_cycles_are_named_from_the_validated_workflow() {
    // a -> b -> a
    let ab = [caller("a", &["b"]), caller("b", &["a"])];
    assert_eq!(
        cycles(&ab, 0),
        vec![(
            "states.c0.workflow".to_owned(),
            format!("sub-workflow calls form a cycle: a -> b -> a {RUN_FAILS}")
        )]
    );
    // a -> b -> c -> b: a's call to b never ends either.
    let abc = [
        caller("a", &["b"]),
        caller("b", &["c"]),
        caller("c", &["b"]),
    ];
    assert_eq!(
        cycles(&abc, 0),
        vec![(
            "states.c0.workflow".to_owned(),
            format!("sub-workflow calls form a cycle: a -> b -> c -> b {RUN_FAILS}")
        )]
    );
    // One finding per calling step: both of a's steps lead into the cycle.
    let twice = [
        caller("a", &["x", "b"]),
        caller("x", &[]),
        caller("b", &["a"]),
    ];
    assert_eq!(
        cycles(&twice, 0),
        vec![(
            "states.c1.workflow".to_owned(),
            format!("sub-workflow calls form a cycle: a -> b -> a {RUN_FAILS}")
        )]
    );
}

#[test]
fn a_run_leaves_call_cycles_to_the_engine() {
    // `awf run` keeps AWF's EXECUTION.WORKFLOW.CIRCULAR_CALL (exit 3) at the call.
    let w = caller("rec", &["rec"]);
    let services = services(std::slice::from_ref(&w));
    let loaded = LoadedWorkflow {
        workflow: w,
        source_map: Default::default(),
        diagnostics: Vec::new(),
        unknown_types: std::collections::BTreeMap::new(),
    };
    assert_eq!(
        check_for_run(&services, &loaded).map_err(|e| e.code()),
        Ok(())
    );
}

#[test]
fn shared_and_unresolvable_sub_workflows_are_not_cycles() {
    // a calls b twice and c, which calls b too (a diamond), b ends.
    let diamond = [
        caller("a", &["b", "b", "c"]),
        caller("b", &[]),
        caller("c", &["b"]),
    ];
    assert_eq!(cycles(&diamond, 0), vec![]);
    // A templated name is known only at run time; a missing one is another error.
    let templated = [caller("a", &["{{.inputs.next}}", "missing"])];
    assert_eq!(cycles(&templated, 0), vec![]);
}

#[test]
fn deep_call_chains_end_with_or_without_a_cycle() {
    let chain = |n: usize, closed: bool| -> Vec<Workflow> {
        (0..n)
            .map(|i| {
                let id = format!("w{i}");
                if i + 1 < n {
                    caller(&id, &[format!("w{}", i + 1).as_str()])
                } else if closed {
                    caller(&id, &["w0"])
                } else {
                    caller(&id, &[])
                }
            })
            .collect()
    };
    assert_eq!(cycles(&chain(200, false), 0), vec![]);
    let found = cycles(&chain(200, true), 0);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "states.c0.workflow");
    assert!(
        found[0]
            .1
            .starts_with("sub-workflow calls form a cycle: w0 -> w1 -> w2 -> ")
            && found[0]
                .1
                .ends_with(&format!("w198 -> w199 -> w0 {RUN_FAILS}")),
        "{}",
        found[0].1
    );
    // Past MAX_CALLED_WORKFLOWS the check stops (the run's own checks remain).
    assert_eq!(cycles(&chain(MAX_CALLED_WORKFLOWS + 50, true), 0), vec![]);
}

/// Workflow `w` (in `/wf`) with a script step `s` reading `script`, and an agent step `a`
/// reading `prompt`.
fn script_and_prompt(script: &str, prompt: &str) -> Workflow {
    use awf_domain::workflow::AgentStep;
    use awf_domain::workflow::CommandSource;
    use awf_domain::workflow::CommandStep;
    let mut w = caller("w", &[]);
    let mut s = State::new(
        "s",
        StateKind::Command(CommandStep {
            source: CommandSource::ScriptFile(script.into()),
            dir: None,
        }),
    );
    s.on_success = Some("a".into());
    let mut a = State::new(
        "a",
        StateKind::Agent(AgentStep {
            provider: "claude".into(),
            prompt: None,
            prompt_file: Some(prompt.into()),
            mode: "single".into(),
            system_prompt: None,
            role: None,
            skills: vec![],
            options: IndexMap::new(),
            output_format: None,
            conversation: None,
            mcp_proxy: None,
            policy: Default::default(),
        }),
    );
    a.on_success = Some("done".into());
    w.states.insert("s".into(), s);
    w.states.insert("a".into(), a);
    w.initial = "s".into();
    w.source.dir = PathBuf::from("/wf");
    w
}

#[test]
fn regression_a_missing_script_file_is_a_workflow_error_that_run_refuses() {
    use awf_domain::ports::fakes::FakeHost;
    let w = script_and_prompt("build.sh", "ask.md");
    let with_host = |host: FakeHost| {
        let mut services = services(std::slice::from_ref(&w));
        services.host = Arc::new(host);
        services
    };
    let loaded = || LoadedWorkflow {
        workflow: w.clone(),
        source_map: Default::default(),
        diagnostics: Vec::new(),
        unknown_types: std::collections::BTreeMap::new(),
    };
    let found = |services: &Services| -> Vec<(ErrorCode, String, String)> {
        validate_loaded(services, loaded(), &BTreeMap::new())
            .diagnostics
            .into_iter()
            .filter(|d| d.severity == Severity::Error)
            .map(|d| (d.code, d.path, d.message))
            .collect()
    };
    let missing = with_host(FakeHost::default());
    assert_eq!(
        found(&missing),
        vec![
            (
                ErrorCode::WorkflowValidationInvalidReference,
                "states.s.script_file".to_owned(),
                "script_file not found: build.sh (/wf/build.sh)".to_owned()
            ),
            (
                ErrorCode::UserInputMissingFile,
                "states.a.prompt_file".to_owned(),
                "prompt_file not found: ask.md (/wf/ask.md)".to_owned()
            ),
        ]
    );
    // A run refuses the missing script before starting (WORKFLOW: exit 2).
    let refused =
        check_for_run(&missing, &loaded()).map_err(|e| (e.code(), e.message().to_owned()));
    assert_eq!(
        refused,
        Err((
            ErrorCode::WorkflowValidationInvalidReference,
            "states.s.script_file: script_file not found: build.sh (/wf/build.sh)".to_owned()
        ))
    );
    assert_eq!(ErrorCode::WorkflowValidationInvalidReference.exit_code(), 2);
    // With the script there, only the prompt file is left, which a run does not pre-check.
    let present = with_host(FakeHost::default().file("/wf/build.sh", "echo hi\n"));
    assert_eq!(
        found(&present),
        vec![(
            ErrorCode::UserInputMissingFile,
            "states.a.prompt_file".to_owned(),
            "prompt_file not found: ask.md (/wf/ask.md)".to_owned()
        )]
    );
    assert_eq!(
        check_for_run(&present, &loaded()).map_err(|e| e.code()),
        Ok(())
    );
}

#[test]
fn a_literal_call_chain_past_the_depth_limit_is_a_warning() {
    let chain = |n: usize| -> Vec<Workflow> {
        (0..n)
            .map(|i| {
                let id = format!("w{i}");
                if i + 1 < n {
                    caller(&id, &[format!("w{}", i + 1).as_str()])
                } else {
                    caller(&id, &[])
                }
            })
            .collect()
    };
    let deep = |workflows: Vec<Workflow>| -> Vec<(Severity, String, String)> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let services = services(&workflows);
            let loaded = LoadedWorkflow {
                workflow: workflows[0].clone(),
                source_map: Default::default(),
                diagnostics: Vec::new(),
                unknown_types: BTreeMap::new(),
            };
            let found: Vec<(Severity, String, String)> =
                validate_loaded(&services, loaded, &BTreeMap::new())
                    .diagnostics
                    .into_iter()
                    .filter(|d| d.code == ErrorCode::ExecutionMaxDepth)
                    .map(|d| (d.severity, d.path, d.message))
                    .collect();
            let _ = tx.send(found);
        });
        rx.recv_timeout(std::time::Duration::from_secs(20))
            .expect("the checks did not end within 20 s")
    };
    // Ten workflows nest as deep as the engine allows.
    assert_eq!(deep(chain(10)), vec![]);
    let found = deep(chain(11));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, Severity::Warning);
    assert_eq!(found[0].1, "states.c0.workflow");
    assert!(
        found[0]
            .2
            .contains("w0 -> w1 -> w2 -> w3 -> w4 -> w5 -> w6 -> w7 -> w8 -> w9 -> w10"),
        "{}",
        found[0].2
    );
    // A longer chain: still one warning for the step.
    assert_eq!(deep(chain(40)).len(), 1);
}

/// Breaker: an input named `HOME=` validated and a step saw `HOME==/tmp/elsewhere`; an
/// input named `PATH` replaced the real variable without a word. A name that is not an
/// identifier is an error; one that shadows a variable steps depend on, a warning.
#[test]
fn input_names_must_be_identifiers_and_shadowing_is_warned() {
    let mut wf = caller("w", &[]);
    wf.inputs = [
        "HOME=",
        "ok_name",
        "trigger-cycle",
        "_x",
        "PATH",
        "LD_PRELOAD",
        "path",
        "9x",
        "a b",
        "",
    ]
    .iter()
    .map(|n| awf_domain::workflow::InputDef {
        name: (*n).to_owned(),
        ty: awf_domain::workflow::InputType::String,
        description: None,
        required: false,
        default: None,
        validation: Default::default(),
    })
    .collect();
    let host = awf_domain::ports::fakes::FakeHost::default();
    let got: Vec<(Severity, String, String)> = input_declarations(&wf, &host)
        .into_iter()
        .map(|d| (d.severity, d.path, d.message))
        .collect();
    let bad = |i: usize, name: &str| {
        (
            Severity::Error,
            format!("inputs.{i}.name"),
            format!(
                "input name {name:?} is not a valid name: a command step gets each input as an environment variable of that name"
            ),
        )
    };
    assert_eq!(
        got,
        vec![
            bad(0, "HOME="),
            (
                Severity::Warning,
                "inputs.4.name".to_owned(),
                "input \"PATH\" replaces the environment variable PATH (where programs are found) in every command step with the value the run is given".to_owned()
            ),
            (
                Severity::Warning,
                "inputs.5.name".to_owned(),
                "input \"LD_PRELOAD\" replaces the environment variable LD_PRELOAD (how programs load libraries) in every command step with the value the run is given".to_owned()
            ),
            bad(7, "9x"),
            bad(8, "a b"),
            bad(9, ""),
        ]
    );
}

/// Trial fix 63 (2): a `prompt_file`'s text is a template the step renders: one that does not
/// parse is a warning naming the file, marked as failing the run (as a script's), at the
/// step's `prompt_file`; one that parses says nothing; an inline prompt that does not parse
/// is an error at its path, as a command's is (a run refuses it too).
#[test]
fn a_prompt_file_or_prompt_whose_template_does_not_parse_is_reported() {
    use awf_domain::ports::fakes::FakeHost;
    let w = script_and_prompt("build.sh", "prompts/ask.md");
    let loaded = |w: &Workflow| LoadedWorkflow {
        workflow: w.clone(),
        source_map: Default::default(),
        diagnostics: Vec::new(),
        unknown_types: std::collections::BTreeMap::new(),
    };
    let report = |w: &Workflow, prompt: &str| {
        let mut services = services(std::slice::from_ref(w));
        services.host = Arc::new(
            FakeHost::default()
                .file("/wf/build.sh", "echo hi\n")
                .file("/wf/prompts/ask.md", prompt),
        );
        let found: Vec<(Severity, ErrorCode, String, String, bool)> =
            validate_loaded(&services, loaded(w), &BTreeMap::new())
                .diagnostics
                .into_iter()
                .map(|d| (d.severity, d.code, d.path, d.message, d.run_fails))
                .collect();
        (
            found,
            check_for_run(&services, &loaded(w)).map_err(|e| e.code()),
        )
    };
    assert_eq!(
        report(&w, "Review {{.inputs.x}\n"),
        (
            vec![(
                Severity::Warning,
                ErrorCode::WorkflowValidationInvalidReference,
                "states.a.prompt_file".to_owned(),
                "prompt file prompts/ask.md: template does not parse: unclosed action (the step fails when it runs)".to_owned(),
                true
            )],
            Ok(())
        )
    );
    assert_eq!(report(&w, "Review {{.inputs.x}}\n"), (vec![], Ok(())));
    // The same text inline: an error at the prompt, which a run refuses.
    let mut inline = w;
    if let Some(State {
        kind: StateKind::Agent(a),
        ..
    }) = inline.states.get_mut("a")
    {
        a.prompt_file = None;
        a.prompt = Some("Review {{.inputs.x}\n".into());
        a.system_prompt = Some("Be {{brief".into());
    }
    let (found, run) = report(&inline, "");
    assert_eq!(
        found
            .iter()
            .map(|(s, c, p, m, _)| (*s, *c, p.as_str(), m.as_str()))
            .collect::<Vec<_>>(),
        vec![
            (
                Severity::Error,
                ErrorCode::WorkflowValidationInvalidReference,
                "states.a.prompt",
                "template does not parse: unclosed action"
            ),
            (
                Severity::Error,
                ErrorCode::WorkflowValidationInvalidReference,
                "states.a.system_prompt",
                "template does not parse: unclosed action"
            ),
        ]
    );
    assert_eq!(run, Err(ErrorCode::WorkflowValidationInvalidReference));
}
