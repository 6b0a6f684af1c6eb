//! Workflow validation use case: the checks `awf validate` reports and `awf run` enforces.
//!
//! Source: spec/workflow.md §1.16 and §2.10; decisions.md ("Workflow language").

use std::collections::BTreeMap;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::repository::Diagnostic;
use awf_domain::ports::repository::LoadedWorkflow;
use awf_domain::ports::repository::Severity;
use awf_domain::validate;
use awf_domain::workflow::HookAction;
use awf_domain::workflow::LoopOver;
use awf_domain::workflow::StateKind;
use awf_domain::workflow::Workflow;

use crate::Services;

/// What `awf validate` found.
#[derive(Debug, Clone)]
pub struct ValidationReport {
    /// The workflow, when it loaded.
    pub workflow: Option<Workflow>,
    /// Every finding, positioned, errors first.
    pub diagnostics: Vec<Diagnostic>,
}

impl ValidationReport {
    /// Whether the workflow is invalid. With `strict`, unknown keys count as errors.
    pub fn has_errors(&self, strict: bool) -> bool {
        self.diagnostics.iter().any(|d| {
            d.severity == Severity::Error
                || (strict
                    && d.severity == Severity::Warning
                    && d.code == ErrorCode::WorkflowParseUnknownField)
        })
    }
}

/// Loads and fully validates a workflow: structural checks, template references, expression
/// and template syntax, `while` conditions that can never be true, unset `env:` variables.
///
/// # Errors
/// Only when the workflow cannot be found or parsed (the repository's error).
pub fn validate_workflow(
    services: &Services,
    identifier: &str,
    env: &BTreeMap<String, String>,
) -> Result<ValidationReport, AwfError> {
    let loaded = services.repository.load(identifier, None)?;
    let mut diagnostics = loaded.diagnostics.clone();
    diagnostics.extend(run_checks(services, &loaded.workflow));
    diagnostics.extend(validate::references(&loaded.workflow));
    diagnostics.extend(validate::while_never_true(&loaded.workflow));
    diagnostics.extend(validate::missing_env(&loaded.workflow, env));
    for d in &mut diagnostics {
        d.locate(&loaded.source_map);
    }
    diagnostics.sort_by(|a, b| a.severity.cmp(&b.severity).then(a.line.cmp(&b.line)));
    diagnostics.dedup();
    Ok(ValidationReport {
        workflow: Some(loaded.workflow),
        diagnostics,
    })
}

/// Checks `awf run` enforces before starting: structural rules and expression/template syntax.
///
/// # Errors
/// The first error found, positioned, with the number of other errors in its message.
pub(crate) fn check_for_run(services: &Services, loaded: &LoadedWorkflow) -> Result<(), AwfError> {
    let mut errors: Vec<Diagnostic> = run_checks(services, &loaded.workflow)
        .into_iter()
        .filter(|d| d.severity == Severity::Error)
        .collect();
    if errors.is_empty() {
        return Ok(());
    }
    for d in &mut errors {
        d.locate(&loaded.source_map);
    }
    let first = errors[0].to_error();
    if errors.len() == 1 {
        return Err(first);
    }
    let others = errors.len() - 1;
    let mut e = first.map_message(|m| {
        format!("{m} (and {others} more error(s); run `awf validate` to see all)")
    });
    for d in &errors[1..] {
        if let Some(h) = &d.hint {
            e = e.with_hint(h.clone());
        }
    }
    Err(e)
}

/// Structural rules plus expression and template syntax.
fn run_checks(services: &Services, wf: &Workflow) -> Vec<Diagnostic> {
    let mut out = validate::structural(wf);
    let expr = |path: String, text: &str, out: &mut Vec<Diagnostic>| {
        if let Err(e) = services.expressions.check(text) {
            out.push(Diagnostic::error(
                ErrorCode::WorkflowValidationInvalidTransition,
                path,
                format!("expression `{text}` does not compile: {e}"),
            ));
        }
    };
    let tpl = |path: String, text: &str, out: &mut Vec<Diagnostic>| {
        if text.contains("{{")
            && let Err(e) = services.interpolator.check(text)
        {
            out.push(Diagnostic::error(
                ErrorCode::WorkflowValidationInvalidReference,
                path,
                format!("template does not parse: {e}"),
            ));
        }
    };
    let hooks = |base: String, actions: &[HookAction], out: &mut Vec<Diagnostic>| {
        for (i, a) in actions.iter().enumerate() {
            match a {
                HookAction::Log(t) => tpl(format!("{base}.{i}.log"), t, out),
                HookAction::Command(t) => tpl(format!("{base}.{i}.command"), t, out),
            }
        }
    };
    for (name, state) in &wf.states {
        let base = format!("states.{name}");
        for (i, t) in state.transitions.iter().enumerate() {
            if let Some(w) = &t.when
                && !w.trim().is_empty()
            {
                expr(format!("{base}.transitions.{i}.when"), w, &mut out);
            }
        }
        hooks(format!("{base}.hooks.pre"), &state.hooks.pre, &mut out);
        hooks(format!("{base}.hooks.post"), &state.hooks.post, &mut out);
        match &state.kind {
            StateKind::Command(c) => {
                match &c.source {
                    awf_domain::workflow::CommandSource::Inline(t) => {
                        tpl(format!("{base}.command"), t, &mut out)
                    }
                    awf_domain::workflow::CommandSource::ScriptFile(t) => {
                        tpl(format!("{base}.script_file"), t, &mut out);
                    }
                }
                if let Some(d) = &c.dir {
                    tpl(format!("{base}.dir"), d, &mut out);
                }
            }
            StateKind::Loop(l) => {
                match &l.over {
                    LoopOver::Items(t) => tpl(format!("{base}.items"), t, &mut out),
                    LoopOver::While(w) => expr(format!("{base}.while"), w, &mut out),
                }
                if let Some(b) = &l.break_when {
                    expr(format!("{base}.break_when"), b, &mut out);
                }
            }
            StateKind::Terminal(t) => {
                if let Some(m) = &t.message {
                    tpl(format!("{base}.message"), m, &mut out);
                }
            }
            StateKind::CallWorkflow(c) => {
                for (k, v) in &c.inputs {
                    tpl(format!("{base}.inputs.{k}"), v, &mut out);
                }
            }
            StateKind::Agent(_) | StateKind::Operation(_) | StateKind::Parallel(_) => {}
        }
    }
    hooks(
        "hooks.workflow_start".into(),
        &wf.hooks.workflow_start,
        &mut out,
    );
    hooks(
        "hooks.workflow_end".into(),
        &wf.hooks.workflow_end,
        &mut out,
    );
    hooks(
        "hooks.workflow_error".into(),
        &wf.hooks.workflow_error,
        &mut out,
    );
    hooks(
        "hooks.workflow_cancel".into(),
        &wf.hooks.workflow_cancel,
        &mut out,
    );
    out
}
