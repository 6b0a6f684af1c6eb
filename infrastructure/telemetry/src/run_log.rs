//! The run log projection: turns the run-event stream into `debug` log lines (target
//! [`RUN_TARGET`]), the diagnostics `--verbose` and `--log-level debug` show on stderr:
//!
//! ```text
//! run 3f2a… started: workflow demo (/p/wf.yaml), inputs {"name":"Ada","api_token":"***"}
//! step build (command) started: `make ADA_TOKEN=***`
//! step build: completed in 1.2s (exit code 0)
//! step test: failed in 3ms (exit code 1, 2 attempts): step test: exit code 1
//! step call: sub-workflow child.yaml started as run 9c1e…
//! [run 9c1e…] step c1: completed in 2ms (exit code 0)
//! run 3f2a… finished: failure, exit code 3, in 1.3s [EXECUTION.COMMAND.FAILED]
//! ```
//!
//! The engine adds its decisions on the same target (`step build: → test (succeeded:
//! on_success)`, retries); the front-end says where the run is recorded. Text in events
//! arrives masked by the engine; this module adds no unmasked text, and shows no tool call
//! arguments or step output. A sub-workflow's lines start with `[run <id>]`.

use awf_domain::event::EventEnvelope;
use awf_domain::event::EventPublisher;
use awf_domain::event::RunEvent;
use awf_domain::run::StepStatus;

/// `tracing` target of the run's diagnostics (the projection's and the engine's lines).
pub const RUN_TARGET: &str = "awf::run";

/// Creates the run log projection; add it to the engine's sinks. When `debug` is not enabled
/// for [`RUN_TARGET`] it costs one interest check per event.
pub fn log_projection() -> LogProjection {
    LogProjection
}

/// [`EventPublisher`] writing one `debug` line per run, step and sub-workflow start and end
/// (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct LogProjection;

impl EventPublisher for LogProjection {
    /// Resolves at once: its line is written inside `emit`. (Without it the run service flushed it on a
    /// blocking thread, one started at the end of every run: issue 9, per-run cost.)
    fn flushed(&self) -> Option<awf_domain::event::Settle> {
        Some(Box::pin(std::future::ready(())))
    }

    fn interested(&self, _event: &EventEnvelope) -> bool {
        tracing::enabled!(target: RUN_TARGET, tracing::Level::DEBUG)
    }

    fn emit(&self, env: EventEnvelope) {
        if !tracing::enabled!(target: RUN_TARGET, tracing::Level::DEBUG) {
            return;
        }
        if let Some(line) = line_of(&env) {
            // A sub-workflow's step lines name its run (its own start and end lines do).
            let named = matches!(
                env.event,
                RunEvent::RunStarted { .. } | RunEvent::RunFinished { .. }
            );
            match &env.parent_run_id {
                Some(_) if !named => {
                    tracing::debug!(target: RUN_TARGET, "[run {}] {line}", env.run_id);
                }
                Some(_) | None => tracing::debug!(target: RUN_TARGET, "{line}"),
            }
        }
    }
}

/// The diagnostic line of `env`, `None` for events that get none (output, agent text, tool
/// calls, interactions, log lines: shown or recorded elsewhere).
pub(crate) fn line_of(env: &EventEnvelope) -> Option<String> {
    let step_label = |step: &str| match env.iteration {
        Some(i) => format!("{step}[{i}]"),
        None => step.to_owned(),
    };
    Some(match &env.event {
        RunEvent::RunStarted {
            workflow,
            identifier,
            workflow_path,
            inputs,
            resumed_from,
            ..
        } => {
            let from = workflow_path.as_deref().unwrap_or(identifier);
            let inputs = serde_json::Value::Object(inputs.clone());
            let resumed = resumed_from
                .as_deref()
                .map(|s| format!(", resumed at step {}", one_line(s)))
                .unwrap_or_default();
            format!(
                "run {} started: workflow {} ({}), inputs {inputs}{resumed}",
                env.run_id,
                one_line(workflow),
                one_line(from)
            )
        }
        RunEvent::StepStarted {
            step,
            kind,
            command,
        } => match command {
            Some(c) => format!(
                "step {} ({kind}) started: `{}`",
                step_label(step),
                one_line(c)
            ),
            None => format!("step {} ({kind}) started", step_label(step)),
        },
        RunEvent::StepFinished { step, state, .. } => {
            let took = match (state.started_at, state.completed_at) {
                (Some(a), Some(b)) => b
                    .duration_since(a)
                    .map(|d| format!(" in {}", awf_domain::duration::format_go(d)))
                    .unwrap_or_default(),
                _ => String::new(),
            };
            let mut facts = Vec::new();
            if let Some(c) = state.exit_code {
                facts.push(format!("exit code {c}"));
            }
            if state.attempts > 1 {
                facts.push(format!("{} attempts", state.attempts));
            }
            let facts = if facts.is_empty() {
                String::new()
            } else {
                format!(" ({})", facts.join(", "))
            };
            let error = match (&state.status, &state.error) {
                (StepStatus::Failed | StepStatus::Cancelled, Some(e)) => {
                    format!(": {}", one_line(e))
                }
                _ => String::new(),
            };
            let status = serde_json::to_value(state.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            format!("step {}: {status}{took}{facts}{error}", step_label(step))
        }
        RunEvent::ChildRunStarted {
            step,
            child_run_id,
            workflow,
        } => format!(
            "step {}: sub-workflow {} started as run {child_run_id}",
            step_label(step),
            one_line(workflow)
        ),
        RunEvent::RunFinished { result } => {
            let status = serde_json::to_value(result.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            let terminal = result
                .terminal
                .as_deref()
                .map(|t| format!(", terminal {}", one_line(t)))
                .unwrap_or_default();
            let code = result
                .error
                .as_ref()
                .map(|e| format!(" [{}]", e.code))
                .unwrap_or_default();
            format!(
                "run {} finished: {status}, exit code {}{terminal}, in {}{code}",
                env.run_id,
                result.exit_code,
                awf_domain::duration::format_go(std::time::Duration::from_millis(
                    result.duration_ms
                ))
            )
        }
        RunEvent::StepRetrying { .. }
        | RunEvent::OutputChunk { .. }
        | RunEvent::Log { .. }
        | RunEvent::AgentMessageChunk { .. }
        | RunEvent::AgentThoughtChunk { .. }
        | RunEvent::ToolCall { .. }
        | RunEvent::ToolCallResult { .. }
        | RunEvent::InteractionRequired { .. }
        | RunEvent::InteractionResolved { .. } => return None,
    })
}

/// `text` on one line: newlines and carriage returns written as `\n` and `\r`.
fn one_line(text: &str) -> String {
    text.replace('\r', "\\r").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;
    use std::time::SystemTime;

    use awf_domain::run::RunId;
    use awf_domain::run::StepState;
    use pretty_assertions::assert_eq;

    use super::*;

    /// The run service awaits `flushed` where it is given (no blocking thread started at
    /// every run's end, issue 9): both publishers of this crate answer at once.
    #[test]
    fn flushed_resolves_at_once_for_both_publishers() {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        for p in [
            Box::new(LogProjection) as Box<dyn EventPublisher>,
            Box::new(crate::span_projection()),
        ] {
            let mut f = p.flushed().expect("a future, not a blocking flush");
            assert!(f.as_mut().poll(&mut cx).is_ready());
        }
    }

    fn env(event: RunEvent) -> EventEnvelope {
        EventEnvelope {
            seq: 1,
            run_id: RunId("r1".into()),
            parent_run_id: None,
            at: SystemTime::UNIX_EPOCH,
            path: "a".into(),
            iteration: None,
            event,
        }
    }

    #[test]
    fn steps_get_their_command_status_timing_and_failure() {
        let started = env(RunEvent::StepStarted {
            step: "a".into(),
            kind: "command".into(),
            command: Some("echo ***\necho two".into()),
        });
        assert_eq!(
            line_of(&started).unwrap(),
            "step a (command) started: `echo ***\\necho two`"
        );
        let state = StepState {
            name: "a".into(),
            status: StepStatus::Failed,
            output: "secret output".into(),
            stderr: String::new().into(),
            exit_code: Some(1),
            attempts: 2,
            error: Some("step a: exit code 1".into()),
            error_code: None,
            started_at: Some(SystemTime::UNIX_EPOCH),
            completed_at: Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1500)),
            response: None,
            json: None,
            tokens: awf_domain::run::TokenUsage::default(),
            outputs: std::collections::BTreeMap::new(),
            session: None,
            approval: None,
            tool_calls: Vec::new(),
            cost_usd: None,
            fallback: None,
            entered: None,
            output_tail: None,
            stderr_tail: None,
        };
        let finished = EventEnvelope {
            iteration: Some(2),
            ..env(RunEvent::StepFinished {
                step: "a".into(),
                kind: "command".into(),
                state: Box::new(state),
            })
        };
        assert_eq!(
            line_of(&finished).unwrap(),
            "step a[2]: failed in 1.5s (exit code 1, 2 attempts): step a: exit code 1"
        );
        let chunk = env(RunEvent::OutputChunk {
            step: "a".into(),
            stream: awf_domain::event::OutputStream::Stdout,
            text: "secret output".into(),
        });
        assert_eq!(line_of(&chunk), None);
    }
}
