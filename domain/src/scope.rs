//! What templates and expressions can see: the data behind `{{.inputs.x}}`, `states.s.Output`, …
//!
//! Source: spec/workflow.md §2.2 (template data model) and §2.11 (expression environment).
//! The engine builds a [`Scope`] by borrowing its run state; adapters convert it to their own
//! value model.

use std::collections::BTreeMap;
use std::time::Duration;
use std::time::SystemTime;

use serde_json::Map;
use serde_json::Value;

use crate::run::StepState;

/// `.workflow`: the running workflow.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowInfo {
    /// Run id.
    pub id: String,
    /// YAML `name`.
    pub name: String,
    /// State being executed.
    pub current_state: String,
    /// Run start.
    pub started_at: SystemTime,
    /// Time since start.
    pub duration: Duration,
}

/// `.context`: where awf runs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RuntimeInfo {
    /// Process working directory.
    pub working_dir: String,
    /// `$USER`.
    pub user: String,
    /// Host name.
    pub hostname: String,
}

/// `.loop`: the innermost loop iteration; `parent` is the enclosing loop's frame.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopFrame {
    /// Current item (`null` for while loops). Prints as JSON when composite.
    pub item: Value,
    /// 0-based index.
    pub index: usize,
    /// First iteration.
    pub first: bool,
    /// Last iteration (always false for while loops).
    pub last: bool,
    /// Number of items (−1 for while loops).
    pub length: i64,
    /// Enclosing loop.
    pub parent: Option<Box<LoopFrame>>,
}

/// `.error`: only inside `workflow_error` hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorInfo {
    /// Error text.
    pub message: String,
    /// State where the run failed.
    pub state: String,
    /// Exit code of the run.
    pub exit_code: i64,
    /// `execution`, `workflow`, `user` or `system`.
    pub kind: String,
}

/// Borrowed view of everything a template or expression can read.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    /// `.inputs`: CLI strings, typed defaults and config values.
    pub inputs: &'a Map<String, Value>,
    /// `.states`: states that have run.
    pub states: &'a BTreeMap<String, StepState>,
    /// `.workflow`.
    pub workflow: &'a WorkflowInfo,
    /// `.env`: the process environment.
    pub env: &'a BTreeMap<String, String>,
    /// `.context`.
    pub context: &'a RuntimeInfo,
    /// `.awf`: directories (`prompts_dir`, `scripts_dir`, `config_dir`, `data_dir`, …).
    pub awf: &'a BTreeMap<String, String>,
    /// `.loop`, inside loops only.
    pub loop_frame: Option<&'a LoopFrame>,
    /// `.error`, inside `workflow_error` hooks only.
    pub error: Option<&'a ErrorInfo>,
    /// Directory of the workflow file (`readFile` resolves relative paths against it).
    pub workflow_dir: &'a std::path::Path,
}
