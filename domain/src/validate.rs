//! Pure workflow checks (no I/O): structural validation (spec/workflow.md §1.16) and the
//! static template-reference analysis (§2.10). Results are [`Diagnostic`]s with dotted
//! paths; callers add positions from the file's source map.

use crate::ports::repository::Diagnostic;
use crate::workflow::Workflow;

/// Structural checks run on every load: initial state, state references, a terminal exists,
/// per-type rules, and that every non-terminal state has a way out.
pub fn structural(_wf: &Workflow) -> Vec<Diagnostic> {
    Vec::new()
}

/// Static reference analysis run by `awf validate`: undeclared inputs, unknown or later
/// states, unknown fields, `error` outside error hooks.
pub fn references(_wf: &Workflow) -> Vec<Diagnostic> {
    Vec::new()
}
