use awf_domain::AwfError;
use awf_domain::ports::repository::LoadedWorkflow;
use awf_domain::workflow::Workflow;
use awf_domain::workflow::WorkflowSource;

pub fn load(text: &str) -> Result<LoadedWorkflow, AwfError> {
    awf_yaml::parse_workflow(
        text,
        Some(std::path::Path::new("wf.yaml")),
        WorkflowSource::default(),
    )
}

/// `text` parsed leniently (every problem a diagnostic), without a file and without
/// template checks.
pub fn lenient(text: &str) -> LoadedWorkflow {
    match awf_yaml::parse_workflow_lenient(
        text,
        None,
        WorkflowSource::default(),
        &awf_yaml::NoTemplates,
    ) {
        Ok(l) => l,
        Err(e) => panic!("unexpected error: {} {}", e.code(), e.message()),
    }
}

pub fn wf(text: &str) -> Workflow {
    match load(text) {
        Ok(l) => l.workflow,
        Err(e) => panic!("unexpected error: {} {}", e.code(), e.message()),
    }
}

pub fn err(text: &str) -> AwfError {
    match load(text) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    }
}

/// Wraps states in a minimal valid workflow.
pub fn with_states(states: &str) -> String {
    format!("name: t\nstates:\n  initial: a\n{states}  done:\n    type: terminal\n")
}
