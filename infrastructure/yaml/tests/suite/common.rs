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
