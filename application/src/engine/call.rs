//! `call_workflow`: runs a child workflow as its own run sharing the call stack.
//! Source: spec/workflow.md §3.7; output mapping per design/decisions.md.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;
use std::time::SystemTime;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::event::LogLevel;
use awf_domain::event::RunEvent;
use awf_domain::ports::facade::ResumeFrom;
use awf_domain::ports::store::RunSnapshot;
use awf_domain::ports::store::StoredStatus;
use awf_domain::run::RunId;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use awf_domain::run::StateResult;
use awf_domain::run::StepState;
use awf_domain::run::StepStatus;
use awf_domain::workflow::CallWorkflowStep;
use awf_domain::workflow::State;
use awf_domain::workflow::Workflow;
use serde_json::Map;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::CancelState;
use super::Run;
use super::RunSpec;
use super::lock;
use super::step::At;
use super::step::Body;

/// Default deadline of a sub-workflow call (spec §1.5.8).
pub(crate) const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(300);
/// Deepest allowed call stack.
pub(crate) const MAX_DEPTH: usize = 10;

/// Identity of a workflow for circular-call detection: its canonical file path, else its
/// identifier.
pub(crate) fn identity(
    wf: &awf_domain::workflow::Workflow,
    host: &dyn awf_domain::ports::Host,
) -> String {
    match &wf.source.path {
        Some(p) => host
            .canonicalize(p)
            .unwrap_or_else(|_| p.clone())
            .display()
            .to_string(),
        None => wf.source.identifier.clone(),
    }
}

impl Run {
    pub(crate) async fn call_once(
        &self,
        state: &State,
        call: &CallWorkflowStep,
        at: At<'_>,
        deadline: Option<Instant>,
        token: &CancellationToken,
    ) -> Result<Body, AwfError> {
        let name = state.name.as_str();
        let mut st = StepState::running(name, self.svc.clock.now());
        let fail = |mut st: StepState, err: AwfError| {
            st.status = StepStatus::Failed;
            st.completed_at = Some(self.svc.clock.now());
            st.error = Some(err.message().to_owned());
            Ok(Body {
                state: st,
                failure: Some(err),
                early_exit: None,
            })
        };
        if self.call_stack.len() >= MAX_DEPTH {
            return Err(AwfError::new(
                ErrorCode::ExecutionMaxDepth,
                format!("step {name}: maximum sub-workflow nesting depth ({MAX_DEPTH}) exceeded"),
            )
            .with_detail("state", name)
            .with_hint(format!(
                "a chain of call_workflow steps may nest at most {MAX_DEPTH} workflows deep; \
                 shorten the chain (call fewer workflows from workflows); resuming cannot get past it"
            )));
        }
        let loaded = match self
            .svc
            .repository
            .load(&call.workflow, Some(&self.wf.source.dir))
        {
            Ok(l) => l,
            Err(e) => {
                return fail(
                    st,
                    e.map_message(|m| format!("step {name}: sub-workflow {}: {m}", call.workflow)),
                );
            }
        };
        let child_wf = loaded.workflow.clone();
        let child_id = identity(&child_wf, self.svc.host.as_ref());
        if self.call_stack.contains(&child_id) {
            let names: Vec<String> = self
                .call_stack
                .iter()
                .map(|p| {
                    std::path::Path::new(p)
                        .file_stem()
                        .map_or_else(|| p.clone(), |s| s.to_string_lossy().into_owned())
                })
                .collect();
            return Err(AwfError::new(
                ErrorCode::ExecutionCircularCall,
                format!(
                    "circular workflow call detected: workflow \"{}\" is already in call stack [{}]",
                    call.workflow,
                    names.join(" -> ")
                ),
            )
            .with_detail("state", name)
            .with_hint("a workflow cannot call itself, directly or through other workflows"));
        }
        // The child gets the checks `awf run` applies to a workflow it starts.
        if let Err(e) = crate::validation::check_for_run(&self.svc, &loaded) {
            return fail(
                st,
                e.map_message(|m| format!("step {name}: sub-workflow {}: {m}", call.workflow)),
            );
        }
        let mut child_inputs = Vec::new();
        for (k, v) in &call.inputs {
            match self.render(v, at.frame, None) {
                Ok(s) => child_inputs.push((k.clone(), s)),
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
        let inputs = match crate::inputs::resolve_inputs(
            &child_wf,
            &child_inputs,
            &Map::new(),
            &self.working_dir,
            self.svc.host.as_ref(),
        ) {
            Ok(i) => i,
            Err(e) => {
                // The inputs are the call's `inputs:`, not the run's: a hint naming
                // `--input` would send the user to the wrong place.
                let mut err = AwfError::new(
                    e.code(),
                    format!(
                        "step {name}: sub-workflow {}: {}",
                        call.workflow,
                        e.message()
                    ),
                );
                for (k, v) in e.details() {
                    err = err.with_detail(k.clone(), v.clone());
                }
                for h in e.hints() {
                    err = err.with_hint(if h.starts_with("pass the missing inputs") {
                        format!(
                            "give them in the `inputs:` of step {name} (`inputs: {{NAME: <value>}}`); \
                             `awf validate` of this workflow and of {} shows what each declares",
                            call.workflow
                        )
                    } else if h == crate::inputs::INPUTS_HELP_HINT {
                        // The rules are the child's: named, not `<workflow>`.
                        crate::inputs::inputs_help_for(&call.workflow)
                    } else {
                        h.clone()
                    });
                }
                return fail(st, err);
            }
        };
        let path = format!("{}{name}", at.prefix);
        let (child_run_id, resume, resume_loop, first_started_at) =
            match self.earlier_child(name, &path, &child_wf, &call.workflow) {
                Earlier::None => (
                    self.svc.ids.child_run_id(&self.run_id),
                    None,
                    Vec::new(),
                    None,
                ),
                Earlier::Finished(result) => {
                    st.completed_at = Some(self.svc.clock.now());
                    return Ok(self.call_result(st, call, at, &result));
                }
                Earlier::Unfinished(u) => (u.run_id, Some(u.resume), u.resume_loop, u.started_at),
            };
        self.emitter.emit(
            &path,
            at.iteration(),
            RunEvent::ChildRunStarted {
                step: name.to_owned(),
                child_run_id: child_run_id.clone(),
                workflow: call.workflow.clone(),
            },
        );
        let child_token = token.child_token();
        let mut call_stack = self.call_stack.clone();
        call_stack.push(child_id);
        let child = Run::new(RunSpec {
            services: Arc::clone(&self.svc),
            workflow: Arc::new(child_wf),
            run_id: child_run_id,
            parent_run_id: Some(self.run_id.clone()),
            scope: Some(self.scope.clone()),
            inputs,
            env: Arc::clone(&self.env),
            runtime: Arc::clone(&self.runtime),
            working_dir: self.working_dir.clone(),
            sink: Arc::clone(&self.sink),
            cancel: CancelState {
                token: child_token.clone(),
                reason: Arc::default(),
                force: self.cancel.force.clone(),
                at: Arc::clone(&self.cancel.at),
                clock: self.cancel.clock.clone(),
            },
            call_stack,
            inherited_secrets: self.masker(),
            warnings: Vec::new(),
            mocks: Arc::default(),
            interaction: Arc::clone(&self.interaction),
            resume,
            first_started_at,
            interactive: None,
            only_step: None,
            resume_loop,
            ask_inputs: None,
            auto_approve: self.auto_approve,
            mcp_servers: Arc::clone(&self.mcp_servers),
            fs_delegate: self.fs_delegate.clone(),
            spend: Arc::clone(&self.spend),
            outer_budgets: self
                .outer_budgets
                .iter()
                .cloned()
                .chain(self.wf.budget.clone())
                .collect(),
            shown_as: None,
            shell_checked: Arc::clone(&self.shell_checked),
        });
        let run = child.execute();
        tokio::pin!(run);
        let mut timed_out = false;
        let result = match deadline {
            None => run.await,
            Some(dl) => tokio::select! {
                r = &mut run => r,
                () = tokio::time::sleep_until(dl.into()) => {
                    timed_out = true;
                    child_token.cancel();
                    run.await
                }
            },
        };
        st.completed_at = Some(self.svc.clock.now());
        if self.cancel.token.is_cancelled() {
            st.status = StepStatus::Cancelled;
            return Ok(Body {
                state: st,
                failure: Some(super::step::cancelled(name)),
                early_exit: None,
            });
        }
        if timed_out {
            return fail(
                st,
                AwfError::new(
                    ErrorCode::ExecutionCommandTimeout,
                    format!("step {name}: sub-workflow {} timed out", call.workflow),
                ),
            );
        }
        if let Some(err) = &result.error
            && matches!(
                err.code,
                ErrorCode::ExecutionCircularCall | ErrorCode::ExecutionMaxDepth
            )
        {
            let mut e = AwfError::new(err.code, err.message.clone());
            for h in &err.hints {
                e = e.with_hint(h.clone());
            }
            return Err(e);
        }
        Ok(self.call_result(st, call, at, &result))
    }

    /// The call's body from its child's `result`: the child's outputs mapped, completed when
    /// the child succeeded, else failed with the child's error.
    fn call_result(
        &self,
        mut st: StepState,
        call: &CallWorkflowStep,
        at: At<'_>,
        result: &RunResult,
    ) -> Body {
        let name = st.name.clone();
        let name = name.as_str();
        let declared = &result.outputs;
        let child_states = &result.states;
        let text = |v: &Value| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let mut mapped = BTreeMap::new();
        if call.outputs.is_empty() {
            // No mapping: the child's declared outputs under their own names
            // (`.states.<call>.Outputs.<name>`; new user: `Outputs` was `map[]`).
            for (k, v) in declared {
                mapped.insert(k.clone(), text(v));
            }
        }
        for (child_key, parent_key) in &call.outputs {
            let value = match declared.get(child_key) {
                Some(v) => Some(text(v)),
                None => child_states.get(child_key).map(|s| s.output.to_string()),
            };
            match value {
                Some(v) => {
                    mapped.insert(parent_key.clone(), v);
                }
                None => {
                    let mut have: Vec<&str> = declared.keys().map(String::as_str).collect();
                    have.sort_unstable();
                    self.log(
                        Some(name),
                        awf_domain::event::LogLevel::Warn,
                        &format!(
                            "outputs: \"{child_key}\" is no output or state of {} (its outputs: {}); `{parent_key}` is not set (the mapping is <child output>: <name here>)",
                            call.workflow,
                            if have.is_empty() { "none".to_owned() } else { have.join(", ") }
                        ),
                        &format!("{}{name}", at.prefix),
                        at.iteration(),
                    );
                }
            }
        }
        st.outputs = mapped;
        st.output = if declared.is_empty() {
            String::new().into()
        } else {
            let sorted: BTreeMap<&String, &Value> = declared.iter().collect();
            serde_json::to_string(&sorted).unwrap_or_default().into()
        };
        if result.status == RunStatus::Success {
            st.status = StepStatus::Completed;
            st.exit_code = Some(0);
            return Body {
                state: st,
                failure: None,
                early_exit: None,
            };
        }
        let why = result
            .error
            .as_ref()
            .map_or_else(|| "failed".to_owned(), |e| e.message.clone());
        let err = AwfError::new(
            ErrorCode::ExecutionSubworkflowFailed,
            format!("step {name}: sub-workflow {} failed: {why}", call.workflow),
        );
        st.status = StepStatus::Failed;
        st.error = Some(err.message().to_owned());
        Body {
            state: st,
            failure: Some(err),
            early_exit: None,
        }
    }

    /// `awf resume`: what the call at `path` (state `name`, calling `child_wf`, written
    /// `shown` in the workflow) finds of the child run an earlier attempt started there
    /// ([`Run::resume_children`], taken once: a later call at that path starts its own).
    /// A child that ran the same workflow for this run and whose result the run has not
    /// recorded yet (the run stopped while it ran, or right after it ended; or the call
    /// failed) is continued from its record, or, when it had succeeded, stands for the
    /// call. Anything else (no record, another workflow, a result already recorded by the
    /// call) is a new child run; a record that cannot be read or resumed says why in a
    /// warning first.
    fn earlier_child(&self, name: &str, path: &str, child_wf: &Workflow, shown: &str) -> Earlier {
        let Some(child_id) = lock(&self.resume_children).remove(path) else {
            return Earlier::None;
        };
        let Some(store) = self.svc.state_store.as_ref() else {
            return Earlier::None;
        };
        let warn = |why: &str| {
            self.log(
                Some(name),
                LogLevel::Warn,
                &format!(
                    "sub-workflow {shown}: its earlier run {child_id} cannot be continued ({why}); it runs again from its start"
                ),
                path,
                None,
            );
            Earlier::None
        };
        let snap = match store.load(&child_id) {
            Ok(s) => s,
            // Never recorded (the run stopped as the child started): nothing to go on with.
            Err(e) if e.code() == ErrorCode::UserInputValidationFailed => return Earlier::None,
            Err(e) => return warn(e.message()),
        };
        let host = self.svc.host.as_ref();
        let recorded_as = snap.workflow_path.as_ref().map_or_else(
            || snap.workflow.clone(),
            |p| {
                host.canonicalize(p)
                    .unwrap_or_else(|_| p.clone())
                    .display()
                    .to_string()
            },
        );
        if snap.parent_run_id.as_deref() != Some(self.run_id.0.as_str())
            || recorded_as != identity(child_wf, host)
        {
            return Earlier::None;
        }
        // The call recorded a success after this child started: the child's result is in
        // the run already (a later visit of the call starts its own child). Strictly after:
        // records keep milliseconds, and a loop's next child can start in the millisecond
        // its previous visit of the call completed (breaker: a kill then started that
        // child anew on resume).
        let recorded = lock(&self.states).get(name).is_some_and(|st| {
            st.status == StepStatus::Completed
                && st.completed_at.is_some_and(|c| c > snap.started_at)
        });
        if recorded {
            return Earlier::None;
        }
        match snap.status {
            StoredStatus::Success => {
                self.log(
                    Some(name),
                    LogLevel::Info,
                    &format!(
                        "sub-workflow {shown} completed before the resume (run {child_id}); its outputs are used"
                    ),
                    path,
                    None,
                );
                Earlier::Finished(Box::new(finished_result(&snap)))
            }
            StoredStatus::Queued => Earlier::None,
            StoredStatus::Running
            | StoredStatus::Failure
            | StoredStatus::Cancelled
            | StoredStatus::Waiting => {
                // (Stopped before its first state was recorded: `resume_plan` goes on at
                // its start.)
                match crate::facade::resume_plan(&snap, child_wf, &ResumeFrom::Current) {
                    Ok((resume, resume_loop)) => {
                        self.log(
                            Some(name),
                            LogLevel::Info,
                            &format!(
                                "sub-workflow {shown} goes on in its earlier run {child_id} from step {} (the steps it completed are not run again)",
                                resume.at
                            ),
                            path,
                            None,
                        );
                        Earlier::Unfinished(Box::new(Unfinished {
                            run_id: RunId(child_id.clone()),
                            resume,
                            resume_loop,
                            started_at: Some(snap.started_at),
                        }))
                    }
                    Err(e) => warn(e.message()),
                }
            }
        }
    }
}

/// What a resumed call finds of its earlier child run ([`Run::earlier_child`]).
enum Earlier {
    /// Nothing to go on with: a new child run.
    None,
    /// The child had succeeded: its result stands for the call's.
    Finished(Box<RunResult>),
    /// The child did not finish: it goes on from its record.
    Unfinished(Box<Unfinished>),
}

/// A child run to continue: its id, where it goes on, and when it first started.
struct Unfinished {
    run_id: RunId,
    resume: super::Resume,
    resume_loop: Vec<super::ResumeLoop>,
    started_at: Option<SystemTime>,
}

/// The result a child run that succeeded before the resume recorded: its states and
/// declared outputs, as its `RunFinished` gave them.
fn finished_result(snap: &RunSnapshot) -> RunResult {
    RunResult {
        run_id: Some(RunId(snap.run_id.clone())),
        workflow: snap.workflow.clone(),
        status: RunStatus::Success,
        exit_code: 0,
        terminal: snap.terminal.clone(),
        duration_ms: awf_domain::projection::span_ms(
            snap.started_at,
            snap.completed_at.unwrap_or(snap.updated_at),
        ),
        states: snap
            .states
            .iter()
            .map(|(k, v)| (k.clone(), StateResult::from(v)))
            .collect(),
        outputs: snap.outputs.clone(),
        error: None,
        message: None,
        spend: snap.spend,
    }
}

#[cfg(test)]
#[path = "call_tests.rs"]
mod tests;
