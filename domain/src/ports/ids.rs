//! IdGenerator: where run ids and request ids come from, so tests can fix them.
//!
//! Reference: shared/design/architecture.md ("Ports (domain)": IdGenerator).

use crate::run::RunId;

/// Makes the ids of runs and interaction requests. Every id it returns is new (never returned
/// before by this generator); the real one returns random UUIDs (v4, 36 characters).
pub trait IdGenerator: Send + Sync {
    /// The id of a new top-level run.
    fn run_id(&self) -> RunId;

    /// The id of a sub-workflow run started by the run `parent` (its own id: it has its state
    /// file and transcript under that id).
    fn child_run_id(&self, parent: &RunId) -> RunId;

    /// The id of an interaction request (missing input, conversation turn, breakpoint,
    /// approval), unique within the process.
    fn request_id(&self) -> String;
}
