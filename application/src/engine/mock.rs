//! `--mock states.<step>.<field>=<value>`: a mocked step is answered by its mock instead of
//! running. Agent steps take their mock in `agent.rs` (after the prompt is prepared, so a
//! session-tracked step keeps the exchange); shell commands (`command`, `script_file`),
//! operations and sub-workflow calls take it here. Parallel blocks, loops and terminals run
//! nothing of their own and cannot be mocked ([`check_mock_kinds`]).
//! Source: spec/workflow.md §3.12 ("Single step"); README "`--mock`".

use std::collections::BTreeMap;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::run::StepState;
use awf_domain::run::StepStatus;
use awf_domain::workflow::State;
use awf_domain::workflow::StateKind;
use awf_domain::workflow::Workflow;

use super::Run;
use super::step::Body;

/// A mock's fields, by name in any case (`output`, `Output`).
pub(crate) type MockFields = BTreeMap<String, String>;

/// The value of `field` in `mock`, its name matched in any case.
pub(crate) fn mock_field<'a>(mock: &'a MockFields, field: &str) -> Option<&'a str> {
    mock.iter()
        .find(|(f, _)| f.eq_ignore_ascii_case(field))
        .map(|(_, v)| v.as_str())
}

/// Whether `mock` answers its step as failed (`status=failed`).
pub(crate) fn mock_failed(mock: &MockFields) -> bool {
    mock_field(mock, "status").is_some_and(|s| s.eq_ignore_ascii_case("failed"))
}

/// Refuses mocks that name a state which is not a step: a terminal (never), and a parallel
/// block or loop (they run nothing of their own: their steps are what to mock). With
/// `--step` (`only_step`), a mocked block stands for a state that would have run before the
/// step, so only the step under test itself must be mockable.
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` naming the mock and what to mock instead.
pub(crate) fn check_mock_kinds(
    wf: &Workflow,
    mocks: &BTreeMap<String, MockFields>,
    only_step: Option<&str>,
) -> Result<(), AwfError> {
    for name in mocks.keys() {
        let Some(state) = wf.state(name) else {
            continue;
        };
        let (what, instead) = match &state.kind {
            StateKind::Terminal(_) => (
                "a terminal state",
                "a terminal runs nothing; mock the step that routes to it".to_owned(),
            ),
            StateKind::Parallel(p) if only_step.is_none_or(|s| s == name) => (
                "a parallel block",
                format!(
                    "mock the steps of its branches instead ({})",
                    p.branches.join(", ")
                ),
            ),
            StateKind::Loop(l) if only_step.is_none_or(|s| s == name) => (
                "a loop",
                format!("mock the steps of its body instead ({})", l.body.join(", ")),
            ),
            StateKind::Parallel(_)
            | StateKind::Loop(_)
            | StateKind::Command(_)
            | StateKind::Agent(_)
            | StateKind::Operation(_)
            | StateKind::CallWorkflow(_) => continue,
        };
        return Err(AwfError::new(
            ErrorCode::UserInputValidationFailed,
            format!(
                "--mock states.{name}: {name} is {what}, and a mock answers a step (command, script_file, agent, operation or call_workflow)"
            ),
        )
        .with_detail("state", name.clone())
        .with_hint(instead));
    }
    Ok(())
}

impl Run {
    /// The mock of a shell command, operation or sub-workflow call, when `--mock` names it
    /// (agent steps take theirs in `agent_once`).
    pub(crate) fn step_mock(&self, state: &State) -> Option<&MockFields> {
        match state.kind {
            StateKind::Command(_) | StateKind::Operation(_) | StateKind::CallWorkflow(_) => {
                self.mocks.get(&state.name)
            }
            StateKind::Agent(_)
            | StateKind::Parallel(_)
            | StateKind::Loop(_)
            | StateKind::Terminal(_) => None,
        }
    }

    /// The answer of a mocked step, which does not run: `output` and `stderr` as the mock
    /// gives them (masked), exit code 0, or 1 with `status=failed` (then a failure of the
    /// step's kind, routed by `on_failure`). A sub-workflow call's `output` that is a JSON
    /// object also gives its `Outputs`.
    pub(crate) fn mocked_step(&self, state: &State, mock: &MockFields) -> Body {
        let name = state.name.as_str();
        let mut st = StepState::running(name, self.svc.clock.now());
        let output = self.mask(mock_field(mock, "output").unwrap_or_default());
        st.stderr = self
            .mask(mock_field(mock, "stderr").unwrap_or_default())
            .into();
        if matches!(state.kind, StateKind::CallWorkflow(_)) {
            st.outputs = call_outputs(&output);
        }
        st.output = output.into();
        st.completed_at = Some(self.svc.clock.now());
        if !mock_failed(mock) {
            st.status = StepStatus::Completed;
            st.exit_code = Some(0);
            return Body {
                state: st,
                failure: None,
                early_exit: None,
            };
        }
        let code = match state.kind {
            StateKind::CallWorkflow(_) => ErrorCode::ExecutionSubworkflowFailed,
            StateKind::Operation(_) => ErrorCode::ExecutionOperationFailed,
            StateKind::Agent(_) => ErrorCode::ExecutionAgentFailed,
            StateKind::Command(_)
            | StateKind::Parallel(_)
            | StateKind::Loop(_)
            | StateKind::Terminal(_) => ErrorCode::ExecutionCommandFailed,
        };
        let msg = format!("step {name}: mocked failure");
        st.status = StepStatus::Failed;
        st.exit_code = Some(1);
        st.error = Some(msg.clone());
        Body {
            state: st,
            failure: Some(
                AwfError::new(code, msg)
                    .with_detail("state", name)
                    .with_detail("exit_code", 1),
            ),
            early_exit: None,
        }
    }
}

/// The `Outputs` a mocked sub-workflow call gives: the members of its `output` when that is
/// a JSON object (strings as they are, other values as JSON text), none otherwise.
pub(crate) fn call_outputs(output: &str) -> std::collections::BTreeMap<String, String> {
    match serde_json::from_str::<serde_json::Value>(output.trim()) {
        Ok(serde_json::Value::Object(map)) => map
            .into_iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => (k, s),
                other => (k, other.to_string()),
            })
            .collect(),
        _ => std::collections::BTreeMap::new(),
    }
}
