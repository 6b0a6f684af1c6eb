//! Every AWF fixture in ../shared/conformance/fixtures/workflows: parse, run the structural
//! checks and compare with the spec's catalogue (spec/workflow.md §6).

use std::path::PathBuf;

use awf_domain::ErrorCode;
use awf_domain::ports::repository::Diagnostic;
use awf_domain::ports::repository::Severity;
use awf_domain::validate;
use awf_domain::workflow::WorkflowSource;

fn fixtures_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/conformance/fixtures/workflows");
    if dir.is_dir() {
        Some(dir)
    } else {
        assert!(
            std::env::var_os("CI").is_none(),
            "fixture folder missing in CI: {}",
            dir.display()
        );
        None
    }
}

enum Outcome {
    Clean,
    ParseError(ErrorCode),
    Structural(Vec<Diagnostic>),
}

fn outcome(name: &str) -> Option<Outcome> {
    let dir = fixtures_dir()?;
    let path = dir.join(format!("{name}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap();
    Some(
        match awf_yaml::parse_workflow(&text, Some(&path), WorkflowSource::default()) {
            Err(e) => Outcome::ParseError(e.code()),
            Ok(l) => {
                let errors: Vec<Diagnostic> = validate::structural(&l.workflow)
                    .into_iter()
                    .filter(|d| d.severity == Severity::Error)
                    .collect();
                if errors.is_empty() {
                    Outcome::Clean
                } else {
                    Outcome::Structural(errors)
                }
            }
        },
    )
}

#[test]
fn every_fixture_parses_or_fails_without_panicking() {
    let Some(dir) = fixtures_dir() else { return };
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        if let Ok(l) = awf_yaml::parse_workflow(&text, Some(&path), WorkflowSource::default()) {
            let _ = validate::structural(&l.workflow);
            let _ = validate::references(&l.workflow);
            let _ = validate::while_never_true(&l.workflow);
        }
        count += 1;
    }
    assert!(count >= 100, "only {count} fixtures found");
}

#[test]
fn valid_fixtures_load_cleanly() {
    for name in [
        "valid-simple",
        "valid-full",
        "valid-parallel",
        "example-simple",
        "loop-foreach",
        "loop-nested",
        "loop-while-transitions",
        "subworkflow-nested-a",
        "dry-run-complete",
        "hooks-lifecycle",
    ] {
        match outcome(name) {
            None => return,
            Some(Outcome::Clean) => {}
            Some(Outcome::ParseError(c)) => panic!("{name}: parse error {c}"),
            Some(Outcome::Structural(d)) => panic!("{name}: {d:?}"),
        }
    }
}

#[test]
fn invalid_fixtures_fail_to_parse() {
    for (name, code) in [
        ("invalid-syntax", ErrorCode::WorkflowParseYamlSyntax),
        ("test-colon", ErrorCode::WorkflowParseYamlSyntax),
        // AWF (Go): YAML_SYNTAX; awf names the missing key's own code (same exit code 2).
        ("invalid-missing-name", ErrorCode::WorkflowParseMissingField),
        ("agent-custom-provider", ErrorCode::WorkflowParseYamlSyntax),
        (
            "hints-yaml-syntax-error",
            ErrorCode::WorkflowParseYamlSyntax,
        ),
    ] {
        match outcome(name) {
            None => return,
            Some(Outcome::ParseError(c)) => assert_eq!(c, code, "{name}"),
            Some(_) => panic!("{name} should not parse"),
        }
    }
}

#[test]
fn bad_state_references_give_missing_state() {
    for (name, path, hint) in [
        ("exit-workflow-error", "states.check_mode.on_success", None),
        ("invalid-bad-state-ref", "states.start.on_success", None),
        (
            "hints-invalid-state-ref",
            "states.start.on_success",
            Some("did you mean 'process'?"),
        ),
        (
            "conversation-invalid-continue-from",
            "states.refine.conversation.continue_from",
            None,
        ),
    ] {
        match outcome(name) {
            None => return,
            Some(Outcome::Structural(d)) => {
                assert_eq!(d.len(), 1, "{name}: {d:?}");
                assert_eq!(
                    d[0].code,
                    ErrorCode::WorkflowValidationMissingState,
                    "{name}"
                );
                assert_eq!(d[0].path, path, "{name}");
                if let Some(h) = hint {
                    assert_eq!(d[0].hint.as_deref(), Some(h), "{name}");
                }
            }
            Some(_) => panic!("{name} should give MISSING_STATE"),
        }
    }
}

#[test]
fn reference_analysis_matches_the_catalogue() {
    let Some(dir) = fixtures_dir() else { return };
    let refs = |name: &str| {
        let path = dir.join(format!("{name}.yaml"));
        let text = std::fs::read_to_string(&path).unwrap();
        let l = awf_yaml::parse_workflow(&text, Some(&path), WorkflowSource::default()).unwrap();
        validate::references(&l.workflow)
            .into_iter()
            .filter(|d| d.severity == Severity::Error)
            .map(|d| d.message)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        refs("loop-dynamic-invalid"),
        vec![
            "undefined input \"undefined_var\" referenced in states.bad_loop.max_iterations"
                .to_owned()
        ]
    );
    assert_eq!(refs("hook-lowercase").len(), 1);
    assert!(refs("hook-lowercase")[0].starts_with("forward reference to step \"risky_operation\""));
    assert_eq!(refs("expr-error-namespace").len(), 2);
    // Both casings of field names are accepted (decisions.md).
    for name in [
        "uppercase-valid",
        "lowercase-single",
        "lowercase-multiple",
        "mixed-casing",
        "hooks-variables",
        "valid-full",
    ] {
        assert_eq!(refs(name), Vec::<String>::new(), "{name}");
    }
}

#[test]
fn loop_while_on_its_own_body_warns() {
    let Some(dir) = fixtures_dir() else { return };
    let path = dir.join("loop-while.yaml");
    let l = awf_yaml::parse_workflow(
        &std::fs::read_to_string(&path).unwrap(),
        Some(&path),
        WorkflowSource::default(),
    )
    .unwrap();
    let d = validate::while_never_true(&l.workflow);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].severity, Severity::Warning);
}
