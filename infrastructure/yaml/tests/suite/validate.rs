//! The domain checks end-to-end from YAML.

use awf_domain::ErrorCode;
use awf_domain::ports::repository::Severity;
use awf_domain::validate;
use pretty_assertions::assert_eq;

use super::common::*;

#[test]
fn missing_state_from_yaml_with_hint_and_position() {
    let l = load("name: t\nstates:\n  initial: start\n  start:\n    type: step\n    command: x\n    on_success: proces\n  process:\n    type: step\n    command: y\n    on_success: done\n  done: {type: terminal}\n").unwrap();
    let mut d = validate::structural(&l.workflow);
    assert_eq!(d.len(), 1);
    d[0].locate(&l.source_map);
    assert_eq!(d[0].code, ErrorCode::WorkflowValidationMissingState);
    assert_eq!((d[0].line, d[0].column), (Some(7), Some(5)));
    assert_eq!(d[0].hint.as_deref(), Some("did you mean 'process'?"));
    let e = awf_yaml::errors_to_error(&d).unwrap();
    assert_eq!(
        e.message(),
        "wf.yaml: line 7, column 5: states.start.on_success: state \"start\": on_success references unknown state \"proces\""
    );
}

#[test]
fn no_exit_and_loop_rules_from_yaml() {
    let w = wf(&with_states(
        "  a:\n    type: step\n    command: x\n  l:\n    type: for_each\n    items: [1]\n    body: [a, a]\n  orphan:\n    type: step\n    command: y\n",
    ));
    let got: Vec<(ErrorCode, String)> = validate::structural(&w)
        .into_iter()
        .map(|d| (d.code, d.path))
        .collect();
    assert_eq!(
        got,
        vec![
            (ErrorCode::WorkflowValidationNoExit, "states.l".into()),
            (
                ErrorCode::WorkflowValidationInvalidState,
                "states.l.body.1".into()
            ),
            (ErrorCode::WorkflowValidationNoExit, "states.orphan".into()),
        ]
    );
}

#[test]
fn agent_rules_from_yaml() {
    let w = wf(&with_states(
        "  a:\n    type: agent\n    provider: custom\n    on_success: done\n",
    ));
    let msgs: Vec<String> = validate::structural(&w)
        .into_iter()
        .map(|d| d.message)
        .collect();
    assert_eq!(
        msgs,
        vec![
            "provider 'custom' has been removed; use a built-in provider".to_owned(),
            "agent \"a\" needs prompt or prompt_file".to_owned(),
        ]
    );
}

#[test]
fn references_from_yaml() {
    let w = wf(
        "name: t\ninputs:\n  - name: n\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo {{.inputs.n}} {{.inputs.m}} {{.states.b.Output}}\n    on_success: b\n  b:\n    type: step\n    command: echo {{states.a.output}} {{states.a.Bogus}}\n    on_success: done\n  done: {type: terminal}\n",
    );
    let got: Vec<(String, String)> = validate::references(&w)
        .into_iter()
        .map(|d| (d.path, d.message))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "states.a.command".into(),
                "optional input \"n\" has no default: states.a.command fails \
                 (EXECUTION.TEMPLATE.FAILED) in a run not given it"
                    .into()
            ),
            (
                "states.a.command".into(),
                "undefined input \"m\" referenced in states.a.command".into()
            ),
            (
                "states.a.command".into(),
                "forward reference to step \"b\" in states.a.command: it has not run at this point"
                    .into()
            ),
            (
                "states.b.command".into(),
                "invalid state property \"Bogus\" in \"states.a.Bogus\"".into()
            ),
        ]
    );
}

#[test]
fn missing_env_from_yaml() {
    let w = wf("name: t\nenv: [HOME_X]\nstates:\n  initial: done\n  done: {type: terminal}\n");
    let d = validate::missing_env(&w, &Default::default());
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].severity, Severity::Warning);
    assert_eq!(d[0].path, "env.0");
}
