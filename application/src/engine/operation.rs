//! `type: operation`: one attempt of a built-in operation (`http.request`) through the
//! [`awf_domain::ports::Operations`] port. Source: spec/workflow.md §1.5.7, §3.9.
//!
//! The inputs are interpolated recursively (string values only; maps and lists are walked,
//! keys and other values pass through), the operation runs with what is left of the step's
//! deadline and the run's cancel token, and its outputs become the state's `Response` (an
//! object, keys in the operation's order) and its `Output` (`key=value` lines in that order;
//! text as is, other values as compact JSON), both masked. A failed operation fails the
//! state: `on_failure`, `continue_on_error` and `retry:` apply as for any step.

use std::time::Instant;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::run::StepState;
use awf_domain::run::StepStatus;
use awf_domain::scope::LoopFrame;
use awf_domain::workflow::OperationStep;
use awf_domain::workflow::State;
use serde_json::Map;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::Run;
use super::step::At;
use super::step::Body;
use super::step::cancelled;

/// `outputs` as `Output` text: one `key=value` line per output, in order, no final newline
/// (as AWF (Go)); strings as they are, anything else as compact JSON.
pub(crate) fn output_lines(outputs: &Map<String, Value>) -> String {
    outputs
        .iter()
        .map(|(k, v)| match v {
            Value::String(s) => format!("{k}={s}"),
            other => format!("{k}={other}"),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

impl Run {
    /// Interpolates every string inside `v` (maps and lists walked).
    fn render_value(
        &self,
        v: &Value,
        frame: Option<&LoopFrame>,
    ) -> Result<Value, awf_domain::ports::template::TemplateError> {
        Ok(match v {
            Value::String(s) => Value::String(self.render(s, frame, None)?),
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|i| self.render_value(i, frame))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(m) => {
                let mut out = Map::new();
                for (k, v) in m {
                    out.insert(k.clone(), self.render_value(v, frame)?);
                }
                Value::Object(out)
            }
            other => other.clone(),
        })
    }

    /// One attempt of operation state `state`.
    ///
    /// # Errors
    /// None today (every failure is a failed [`Body`]); `Result` for the retry loop's shape.
    pub(crate) async fn operation_once(
        &self,
        state: &State,
        op: &OperationStep,
        at: At<'_>,
        deadline: Option<Instant>,
        token: &CancellationToken,
    ) -> Result<Body, AwfError> {
        let name = state.name.as_str();
        let id = op.operation.trim();
        let mut st = StepState::running(name, self.svc.clock.now());
        let fail = |mut st: StepState, err: AwfError| {
            st.status = StepStatus::Failed;
            st.completed_at = Some(self.svc.clock.now());
            let err = err
                .map_message(|m| self.mask(&m))
                .with_detail("state", name);
            st.error = Some(err.message().to_owned());
            Ok(Body {
                state: st,
                failure: Some(err),
                early_exit: None,
            })
        };
        let specs = self
            .svc
            .operations
            .as_ref()
            .map(|o| o.list())
            .unwrap_or_default();
        let Some(ops) = self
            .svc
            .operations
            .as_ref()
            .filter(|_| specs.iter().any(|s| s.id() == id))
        else {
            let ids: Vec<String> = specs.iter().map(|s| s.id()).collect();
            let mut e = AwfError::new(
                ErrorCode::ExecutionOperationNotFound,
                format!("step {name}: operation \"{id}\" not found"),
            )
            .with_detail("operation", id);
            e = match awf_domain::validate::closest(id, ids.iter().map(String::as_str)) {
                Some(c) => e.with_hint(format!("did you mean '{c}'?")),
                None if ids.is_empty() => e.with_hint("this build of awf provides no operations"),
                None => e.with_hint(format!("awf provides: {}", ids.join(", "))),
            };
            return fail(st, e);
        };
        let mut inputs = Map::new();
        for (k, v) in &op.inputs {
            match self.render_value(v, at.frame) {
                Ok(v) => {
                    inputs.insert(k.clone(), v);
                }
                Err(e) => {
                    return fail(
                        st,
                        AwfError::new(
                            ErrorCode::ExecutionTemplateFailed,
                            format!("step {name}: resolve input \"{k}\": {e}"),
                        ),
                    );
                }
            }
        }
        let remaining = deadline.map(|d| d.saturating_duration_since(self.svc.clock.instant()));
        if remaining.is_some_and(|r| r.is_zero()) {
            return fail(
                st,
                AwfError::new(
                    ErrorCode::ExecutionOperationTimeout,
                    format!("step {name}: timed out"),
                ),
            );
        }
        let result = ops.execute(id, inputs, remaining, token.clone()).await;
        let masker = self.masker();
        match result {
            Err(e) if e.code() == ErrorCode::ExecutionRunCancelled || token.is_cancelled() => {
                st.status = StepStatus::Cancelled;
                st.completed_at = Some(self.svc.clock.now());
                st.error = Some("cancelled".to_owned());
                Ok(Body {
                    state: st,
                    failure: Some(cancelled(name)),
                    early_exit: None,
                })
            }
            // The step's own deadline cut it: say so with the step's timeout.
            Err(e)
                if e.code() == ErrorCode::ExecutionOperationTimeout
                    && deadline.is_some_and(|d| self.svc.clock.instant() >= d) =>
            {
                let msg = format!(
                    "step {name}: timed out after {}",
                    awf_domain::duration::format_go(state.timeout.unwrap_or_default())
                );
                fail(st, e.map_message(|_| msg))
            }
            Err(e) => fail(st, e.map_message(|m| format!("step {name}: {m}"))),
            Ok(r) => {
                let mut outputs = Value::Object(r.outputs);
                // Kept out of the run: its state file must be read back (serde_json reads
                // 128 levels), so no value nested deeper than `json::MAX_DEPTH` is recorded.
                if let Some(d) = awf_domain::json::too_deep(&outputs) {
                    return fail(
                        st,
                        AwfError::new(
                            ErrorCode::ExecutionOperationFailed,
                            format!(
                                "step {name}: the operation's outputs nest arrays or objects \
                                 {d} levels deep; awf keeps at most {} levels",
                                awf_domain::json::MAX_DEPTH
                            ),
                        )
                        .with_detail("operation", id),
                    );
                }
                masker.mask_json(&mut outputs);
                if let Value::Object(m) = &outputs {
                    st.output = self.cap(state, output_lines(m)).into();
                }
                st.response = Some(outputs);
                if r.success {
                    st.status = StepStatus::Completed;
                    st.completed_at = Some(self.svc.clock.now());
                    return Ok(Body {
                        state: st,
                        failure: None,
                        early_exit: None,
                    });
                }
                let why = r.error.unwrap_or_else(|| "operation failed".to_owned());
                fail(
                    st,
                    AwfError::new(
                        ErrorCode::ExecutionOperationFailed,
                        format!("step {name}: {why}"),
                    )
                    .with_detail("operation", id)
                    .with_hint(ErrorCode::ExecutionOperationFailed.resolution()),
                )
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "operation_tests.rs"]
mod tests;
