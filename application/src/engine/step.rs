//! Executing one state: hooks, the typed body (with retry and timeout), recording, routing.

use std::future::Future;
use std::path::Path;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::event::LogLevel;
use awf_domain::event::OutputStream;
use awf_domain::event::RunEvent;
use awf_domain::mask::StreamMasker;
use awf_domain::ports::exec::CommandSpec;
use awf_domain::ports::exec::OutputCallback;
use awf_domain::ports::exec::Program;
use awf_domain::ports::exec::Termination;
use awf_domain::run::StepState;
use awf_domain::run::StepStatus;
use awf_domain::run::StreamTail;
use awf_domain::scope::LoopFrame;
use awf_domain::workflow::CommandSource;
use awf_domain::workflow::CommandStep;
use awf_domain::workflow::State;
use awf_domain::workflow::StateKind;
use tokio_util::sync::CancellationToken;

use super::Emitter;
use super::Run;
use super::lock;

/// Largest script or prompt file read (1 MiB).
pub(crate) const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Boxed future used for the recursive state execution.
pub(crate) type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Deepest nesting of state executions (a parallel branch, a loop body step, a sub-workflow's
/// state each add one level) before a run fails with `EXECUTION.WORKFLOW.MAX_DEPTH`. Each
/// level costs stack: a debug build overflowed a 2 MiB worker stack at about 28 nested blocks,
/// or 8 sub-workflow calls 3 levels deep each; the `awf` binary gives its workers 16 MiB.
/// Validation keeps one workflow within `validate::MAX_NESTING`; this guard holds across
/// sub-workflows and when validation was bypassed.
pub(crate) const MAX_EXEC_DEPTH: usize = 64;

tokio::task_local! {
    /// Nesting depth of the state execution being polled (0 outside any).
    static EXEC_DEPTH: usize;
}

/// Where the state runs: loop frame and event path prefix (`loop:0/loop:2/`).
#[derive(Clone, Copy)]
pub(crate) struct At<'a> {
    pub(crate) frame: Option<&'a LoopFrame>,
    pub(crate) prefix: &'a str,
}

impl At<'_> {
    pub(crate) fn iteration(&self) -> Option<usize> {
        self.frame.map(|f| f.index)
    }
}

/// What a state's execution decided.
#[derive(Debug)]
pub(crate) struct StepExit {
    /// Routing target; `None` = no route (a failure when `failure` is set).
    pub(crate) next: Option<String>,
    /// The failure to raise when nothing routes it.
    pub(crate) failure: Option<AwfError>,
    /// Whether the recorded state succeeded.
    pub(crate) succeeded: bool,
}

/// What a step's approval gate decided.
pub(crate) struct Gate {
    /// The chosen option's id (recorded in the step's state).
    approval: Option<String>,
    /// Set when the step must not run: its failed body (rejected, timed out) or the cancel.
    stop: Option<Result<Body, AwfError>>,
}

impl Gate {
    fn open(approval: Option<String>) -> Self {
        Self {
            approval,
            stop: None,
        }
    }
}

/// Result of the typed body of a state.
pub(crate) struct Body {
    pub(crate) state: StepState,
    /// The error describing the failure, when the state failed.
    pub(crate) failure: Option<AwfError>,
    /// Loop early-exit target (overrides `on_complete`).
    pub(crate) early_exit: Option<String>,
}

impl Body {
    /// State `st` of `name` ended by the run's cancel at `now`: status `Cancelled`, the
    /// cancel as its failure.
    pub(crate) fn cancelled(mut st: StepState, name: &str, now: std::time::SystemTime) -> Self {
        st.status = StepStatus::Cancelled;
        st.completed_at = Some(now);
        Self {
            state: st,
            failure: Some(cancelled(name)),
            early_exit: None,
        }
    }
}

impl Run {
    /// Records state `name`, started at `started`, as ended by the hard error `e` (cancelled
    /// for a cancel, failed otherwise): a hard error still leaves a record of the state in
    /// the run result, and a `StepFinished` event.
    fn record_hard_error(
        &self,
        name: &str,
        started: std::time::SystemTime,
        e: &AwfError,
        kind: &str,
        path: &str,
        at: At<'_>,
    ) {
        let mut st = StepState::running(name, started);
        st.completed_at = Some(self.svc.clock.now());
        st.status = if e.code() == ErrorCode::ExecutionRunCancelled {
            StepStatus::Cancelled
        } else {
            StepStatus::Failed
        };
        st.error = Some(e.message().to_owned());
        st.error_code = Some(e.code());
        self.record(st, kind, path, at.iteration());
    }

    /// Executes state `name` (never a terminal) and routes it.
    ///
    /// `Err` is a hard error that no `on_failure` can route: run cancellation, a state type
    /// this build cannot execute, a circular sub-workflow call, a transition that cannot be
    /// evaluated.
    pub(crate) fn exec_state<'a>(
        &'a self,
        name: &'a str,
        frame: Option<&'a LoopFrame>,
        prefix: &'a str,
        token: &'a CancellationToken,
    ) -> BoxFut<'a, Result<StepExit, AwfError>> {
        let depth = EXEC_DEPTH.try_with(|d| *d).unwrap_or(0) + 1;
        if depth > MAX_EXEC_DEPTH {
            return Box::pin(std::future::ready(Err(AwfError::new(
                ErrorCode::ExecutionMaxDepth,
                format!(
                    "state {name}: parallel blocks, loops and sub-workflows nest more than {MAX_EXEC_DEPTH} levels deep"
                ),
            )
            .with_detail("state", name)
            .with_hint("flatten the nesting; `awf validate` shows containment cycles"))));
        }
        Box::pin(EXEC_DEPTH.scope(depth, async move {
            let at = At { frame, prefix };
            let Some(state) = self.wf.state(name) else {
                return Err(AwfError::new(
                    ErrorCode::WorkflowValidationMissingState,
                    format!("state not found: {name}"),
                ));
            };
            if let StateKind::Terminal(_) = state.kind {
                return Ok(StepExit {
                    next: Some(name.to_owned()),
                    failure: None,
                    succeeded: true,
                });
            }
            let kind = state.kind.kind_name();
            let path = format!("{prefix}{name}");
            self.emitter.emit(
                &path,
                at.iteration(),
                RunEvent::StepStarted {
                    step: name.to_owned(),
                    kind: kind.to_owned(),
                    // A mocked step runs no command.
                    command: if self.step_mock(state).is_some() {
                        None
                    } else {
                        self.started_command(state, at.frame)
                    },
                },
            );
            // Nothing of the step runs before the record names it as the step in progress,
            // with every step before it recorded as finished: a run killed from now on
            // resumes here, never at a step it went past (issue 15: a store whose writes lag
            // behind the run).
            self.emitter.settle(token).await;
            // A run whose record can no longer be written (a full disk) stops here: this
            // step's completion could not be recorded either, and `awf resume` would run it
            // (and every step after it) again.
            if let Some(e) = self.emitter.record_failed() {
                self.record_hard_error(name, self.svc.clock.now(), &e, kind, &path, at);
                return Err(e);
            }
            // The approval gate is asked before anything of the step runs (its wait is not
            // part of the step's timeout).
            let Gate { approval, mut stop } = self.approval_gate(state, at, &path, token).await;
            let gated = stop.is_some();
            let deadline = state
                .timeout
                .filter(|t| !t.is_zero())
                .and_then(|t| self.svc.clock.instant().checked_add(t));
            if !gated
                && !state.hooks.pre.is_empty()
                && let Err(e) = self
                    .run_hooks(&state.hooks.pre, Some(name), frame, None, token)
                    .await
            {
                self.log(
                    Some(name),
                    LogLevel::Warn,
                    &format!("step {name}: pre hook failed: {}", e.message()),
                    &path,
                    at.iteration(),
                );
            }
            if !gated && token.is_cancelled() {
                // Cancelled while the step was being recorded as started (or in its pre
                // hooks): the step is recorded cancelled, as one cancelled while it runs.
                let e = cancelled(name);
                self.record_hard_error(name, self.svc.clock.now(), &e, kind, &path, at);
                return Err(e);
            }
            let started = self.svc.clock.now();
            let body: Result<Body, AwfError> = match &state.kind {
                _ if gated => stop.take().unwrap_or_else(|| Err(cancelled(name))),
                StateKind::Command(_) => self.with_retry(state, at, deadline, token).await,
                StateKind::CallWorkflow(_) => {
                    let deadline = deadline.or_else(|| {
                        self.svc
                            .clock
                            .instant()
                            .checked_add(super::call::DEFAULT_CALL_TIMEOUT)
                    });
                    self.with_retry(state, at, deadline, token).await
                }
                StateKind::Parallel(p) => {
                    let step_token = token.child_token();
                    let fut = self.run_parallel(state, p, at, &step_token);
                    self.with_deadline(state, fut, deadline, &step_token).await
                }
                StateKind::Loop(l) => {
                    let step_token = token.child_token();
                    let fut = self.run_loop(state, l, at, &step_token);
                    self.with_deadline(state, fut, deadline, &step_token).await
                }
                StateKind::Agent(a) => {
                    let deadline =
                        super::agent::agent_deadline(a, deadline, self.svc.clock.instant());
                    self.with_retry(state, at, deadline, token).await
                }
                StateKind::Operation(_) => self.with_retry(state, at, deadline, token).await,
                StateKind::Terminal(_) => {
                    return Ok(StepExit {
                        next: Some(name.to_owned()),
                        failure: None,
                        succeeded: true,
                    });
                }
            };
            let mut body = match body {
                Ok(b) => b,
                Err(e) => {
                    self.record_hard_error(name, started, &e, kind, &path, at);
                    return Err(e);
                }
            };
            if let Some(f) = body.failure.take() {
                body.failure = Some(template_hint(f, &mut body.state));
            }
            // The state keeps its failure's code beside the text (`states.<name>.error_code`).
            if body.state.error.is_some() && body.state.error_code.is_none() {
                body.state.error_code = body.failure.as_ref().map(AwfError::code);
            }
            if approval.is_some() {
                body.state.approval = approval;
            }
            let cancelled_now = body.state.status == StepStatus::Cancelled;
            let succeeded = body.state.status == StepStatus::Completed;
            self.record(body.state, kind, &path, at.iteration());
            if !gated
                && !state.hooks.post.is_empty()
                && let Err(e) = self
                    .run_hooks(&state.hooks.post, Some(name), frame, None, token)
                    .await
            {
                self.log(
                    Some(name),
                    LogLevel::Warn,
                    &format!("step {name}: post hook failed: {}", e.message()),
                    &path,
                    at.iteration(),
                );
            }
            if cancelled_now || self.cancel.token.is_cancelled() {
                return Err(cancelled(name));
            }
            self.route(state, succeeded, body.failure, body.early_exit, frame)
        }))
    }

    /// Asks the step's approval gate (`approval:`), unless `--yes` approves every gate or an
    /// `allow_always` / `reject_always` answer decided it earlier in the run. Source:
    /// shared/design/decisions.md ("Approval gates").
    async fn approval_gate(
        &self,
        state: &State,
        at: At<'_>,
        path: &str,
        token: &CancellationToken,
    ) -> Gate {
        use awf_domain::interaction::Answer;
        use awf_domain::interaction::ApprovalKind;
        use awf_domain::interaction::ApprovalOption;
        use awf_domain::interaction::Resolution;
        let Some(gate) = &state.approval else {
            return Gate::open(None);
        };
        let name = state.name.as_str();
        // Remembered per root run (the `Interaction` is the root run's, shared by its
        // sub-runs) and gate: the workflow's identity and the state, so an `allow_always`
        // holds across every call of a sub-workflow from a loop.
        let identity = self
            .call_stack
            .last()
            .map_or(self.wf.source.identifier.as_str(), String::as_str);
        let key = format!("{identity}/{name}");
        let started = self.svc.clock.now();
        let fail = |code: ErrorCode, msg: String, chosen: Option<String>| {
            let mut st = StepState::running(name, started);
            st.completed_at = Some(self.svc.clock.now());
            st.status = StepStatus::Failed;
            st.error = Some(msg.clone());
            st.approval.clone_from(&chosen);
            Gate {
                approval: chosen,
                stop: Some(Ok(Body {
                    state: st,
                    failure: Some(
                        AwfError::new(code, msg)
                            .with_detail("state", name)
                            .with_hint(if code == ErrorCode::ExecutionApprovalTimedOut {
                                "answer sooner, raise the gate's timeout, or set `on_timeout: approve`"
                            } else if state.on_failure.is_some() {
                                // Already routed (new user: the hint asked for the
                                // on_failure the step has).
                                "approve the gate, or pass --yes to approve every gate"
                            } else {
                                "approve the gate, pass --yes to approve every gate, or route the rejection with on_failure"
                            }),
                    ),
                    early_exit: None,
                })),
            }
        };
        let mut timed_out = false;
        let chosen: ApprovalOption = if self.auto_approve {
            let option = gate
                .options
                .iter()
                .find(|o| o.kind.allows())
                .cloned()
                .unwrap_or_else(|| ApprovalOption {
                    id: "approve".into(),
                    name: "Approve".into(),
                    kind: ApprovalKind::AllowOnce,
                });
            self.log(
                Some(name),
                LogLevel::Info,
                &format!("step {name}: approval granted by --yes"),
                path,
                at.iteration(),
            );
            option
        } else if let Some(o) = self.interaction.remembered(&key) {
            o
        } else {
            let message = self
                .render(&gate.message, at.frame, None)
                .unwrap_or_else(|_| gate.message.clone());
            let kind = awf_domain::interaction::RequestKind::Approval {
                message: self.mask(&message),
                options: gate.options.clone(),
            };
            let at_ask = super::AskAt {
                emitter: &self.emitter,
                path,
                iteration: at.iteration(),
                step: Some(name),
                cancel: token,
            };
            match self
                .interaction
                .ask(&at_ask, kind, gate.timeout, Clone::clone)
                .await
            {
                Resolution::Answered(Answer::Option(id)) => {
                    match gate.options.iter().find(|o| o.id == id) {
                        Some(o) => o.clone(),
                        None => {
                            return fail(
                                ErrorCode::ExecutionApprovalRejected,
                                format!("step {name}: approval rejected (unknown option {id})"),
                                Some(id),
                            );
                        }
                    }
                }
                Resolution::Answered(Answer::Unattended(why)) => {
                    // Nobody to ask: not a human rejection (no option recorded).
                    return fail(
                        ErrorCode::ExecutionApprovalRejected,
                        format!("step {name}: approval not asked: {why}"),
                        None,
                    );
                }
                Resolution::TimedOut => match gate.timeout_option() {
                    // A timeout decides this time only: never remembered as "always".
                    Some(o) => {
                        timed_out = true;
                        o.clone()
                    }
                    None => {
                        return fail(
                            ErrorCode::ExecutionApprovalTimedOut,
                            format!(
                                "step {name}: approval timed out after {}",
                                awf_domain::duration::format_go(gate.timeout.unwrap_or_default())
                            ),
                            None,
                        );
                    }
                },
                Resolution::Cancelled | Resolution::Answered(_) => {
                    return Gate {
                        approval: None,
                        stop: Some(Err(cancelled(name))),
                    };
                }
            }
        };
        if chosen.kind.remembered() && !timed_out {
            self.interaction.remember(&key, chosen.clone());
        }
        if chosen.kind.allows() {
            Gate::open(Some(chosen.id))
        } else {
            fail(
                ErrorCode::ExecutionApprovalRejected,
                format!("step {name}: approval rejected ({})", chosen.id),
                Some(chosen.id),
            )
        }
    }

    /// Races a block against its deadline; on expiry cancels the block's token, waits for it
    /// to wind down, then marks the state failed with a timeout.
    async fn with_deadline(
        &self,
        state: &State,
        fut: impl Future<Output = Result<Body, AwfError>>,
        deadline: Option<Instant>,
        step_token: &CancellationToken,
    ) -> Result<Body, AwfError> {
        let Some(dl) = deadline else {
            return fut.await;
        };
        tokio::pin!(fut);
        tokio::select! {
            r = &mut fut => r,
            () = tokio::time::sleep_until(dl.into()) => {
                step_token.cancel();
                let inner = fut.await;
                if self.cancel.token.is_cancelled() {
                    return inner;
                }
                let mut st = match inner {
                    Ok(b) => b.state,
                    Err(_) => StepState::running(&state.name, self.svc.clock.now()),
                };
                st.status = StepStatus::Failed;
                st.completed_at = Some(self.svc.clock.now());
                let msg = format!(
                    "step {}: timed out after {}",
                    state.name,
                    awf_domain::duration::format_go(state.timeout.unwrap_or_default())
                );
                st.error = Some(msg.clone());
                Ok(Body {
                    state: st,
                    failure: Some(AwfError::new(ErrorCode::ExecutionCommandTimeout, msg).with_detail("state", state.name.clone())),
                    early_exit: None,
                })
            }
        }
    }

    /// Picks the next state. Source: spec/workflow.md §1.7 (routing matrix).
    ///
    /// Logs the decision and its reason at `debug` (target `awf::run`: `--verbose`,
    /// `--log-level debug`), masked.
    pub(crate) fn route(
        &self,
        state: &State,
        succeeded: bool,
        failure: Option<AwfError>,
        early_exit: Option<String>,
        frame: Option<&LoopFrame>,
    ) -> Result<StepExit, AwfError> {
        let exit = |next: Option<String>, failure: Option<AwfError>, why: &str| {
            self.log_route(&state.name, next.as_deref(), why);
            StepExit {
                next,
                failure,
                succeeded,
            }
        };
        if let StateKind::Loop(l) = &state.kind {
            return Ok(if succeeded {
                let (next, why) = match (early_exit, &l.on_complete) {
                    (Some(e), _) => (Some(e), "the loop exited early"),
                    (None, Some(c)) => (Some(c.clone()), "the loop completed: on_complete"),
                    // In another loop's body a loop without on_complete goes on with that
                    // body, as in AWF (Go), which never takes a loop's on_success: awf's
                    // fallback to on_success is for a loop that would otherwise have no
                    // way out, and in a body it left the outer loop after its first item
                    // (breaker: the run ended in the outer loop's first iteration).
                    (None, None) if frame.is_some() => (
                        None,
                        "the loop completed in a loop's body: the body goes on",
                    ),
                    (None, None) => (state.on_success.clone(), "the loop completed: on_success"),
                };
                exit(next, None, why)
            } else {
                exit(
                    state.on_failure.clone(),
                    failure,
                    "the loop failed: on_failure",
                )
            });
        }
        // Command transitions also see failures of the process itself (AWF routes on
        // ExitCode that way); failures before the process ran (template errors, missing
        // script, a process that could not be started) skip them: a catch-all route must not
        // turn a step that never ran into a success (breaker: a missing `dir:` went on to a
        // success terminal, exit 0).
        let process_failed = matches!(state.kind, StateKind::Command(_))
            && failure.as_ref().is_some_and(|f| {
                matches!(
                    f.code(),
                    ErrorCode::ExecutionCommandFailed | ErrorCode::ExecutionCommandTimeout
                ) && !f.details().contains_key(NOT_STARTED)
            });
        if (succeeded || process_failed)
            && let Some((target, why)) = self.transition(state, frame)?
        {
            let outcome = if succeeded { "succeeded" } else { "failed" };
            return Ok(exit(
                Some(target),
                if succeeded { None } else { failure },
                &format!("{outcome}, {why}"),
            ));
        }
        if succeeded {
            return Ok(exit(
                state.on_success.clone(),
                None,
                "succeeded: on_success",
            ));
        }
        // A failure treated as a success takes the success route only, as in AWF (Go):
        // without `on_success` there is no next state (`EXECUTION.WORKFLOW.NO_ROUTE`),
        // `on_failure` is not taken (breaker: awf went to `on_failure`, exit 0).
        if state.continue_on_error {
            return Ok(exit(
                state.on_success.clone(),
                None,
                "failed, continue_on_error: on_success",
            ));
        }
        Ok(exit(
            state.on_failure.clone(),
            failure,
            "failed: on_failure",
        ))
    }

    /// The `debug` line of a routing decision: `step a: → b (succeeded: on_success)`, or
    /// `no next state` when nothing routes (the run ends there, or fails).
    fn log_route(&self, step: &str, next: Option<&str>, why: &str) {
        if !tracing::enabled!(target: "awf::run", tracing::Level::DEBUG) {
            return;
        }
        // An inline `on_failure`'s terminal by the name users see (`a's on_failure`).
        let to = next.map_or_else(
            || "no next state".to_owned(),
            |n| format!("→ {}", awf_domain::workflow::terminal_display_name(n)),
        );
        self.debug_line(&format!("step {step}: {to} ({why})"));
    }

    /// A `debug` diagnostic of what the engine decided (target `awf::run`, on stderr with
    /// `--verbose` or `--log-level debug`), masked; a sub-workflow's lines name its run.
    pub(crate) fn debug_line(&self, text: &str) {
        if !tracing::enabled!(target: "awf::run", tracing::Level::DEBUG) {
            return;
        }
        let line = self.mask(text);
        // A sub-workflow's run (its scope is the root run's): named, as its steps may share
        // names with the caller's.
        if self.scope == self.run_id {
            tracing::debug!(target: "awf::run", "{line}");
        } else {
            tracing::debug!(target: "awf::run", "[run {}] {line}", self.run_id.0);
        }
    }

    /// The first of the state's `transitions` that matches, and why (`transitions[1]:
    /// when `…` is true`, or the default `goto`).
    fn transition(
        &self,
        state: &State,
        frame: Option<&LoopFrame>,
    ) -> Result<Option<(String, String)>, AwfError> {
        for (i, t) in state.transitions.iter().enumerate() {
            match &t.when {
                None => return Ok(Some((t.goto.clone(), format!("transitions[{i}]: goto")))),
                Some(w) if w.trim().is_empty() => {
                    return Ok(Some((t.goto.clone(), format!("transitions[{i}]: goto"))));
                }
                Some(w) => match self.eval_bool(w, frame) {
                    // A cancel while it was evaluated ends the run cancelled, whatever it
                    // answered (trial h4: a run cancelled during a slow `when:` went on to a
                    // success terminal, exit 0).
                    _ if self.cancel.token.is_cancelled() => {
                        return Err(cancelled(&state.name));
                    }
                    Ok(true) => {
                        return Ok(Some((
                            t.goto.clone(),
                            format!("transitions[{i}]: when `{w}` is true"),
                        )));
                    }
                    Ok(false) => {}
                    Err(e) => {
                        let text = e.to_string();
                        // A budget's end carries its own hint.
                        let (why, hint) =
                            match text.split_once(awf_domain::ports::template::HINT_SEPARATOR) {
                                Some((why, hint)) => (why, Some(hint)),
                                None => (text.as_str(), None),
                            };
                        let mut err = AwfError::new(
                            ErrorCode::ExecutionExpressionFailed,
                            self.mask(&format!(
                                "step {}: evaluate transition `{w}`: {}",
                                state.name,
                                // A value's newline (an Output's last one) would cut the line.
                                why.replace('\n', "\\n")
                            )),
                        )
                        .with_detail("state", state.name.clone());
                        if let Some(h) = hint {
                            err = err.with_hint(h);
                        } else if let Some(p) = invalid_matches_pattern(w) {
                            // Breaker: the newline hint came with an invalid regex.
                            err = err.with_hint(format!(
                                "the pattern after `matches` is not a valid regular expression \
                                 ({}): escape a literal `(`, `[`, `{{`, `.`, `*`, `+` or `?` with \
                                 `\\`",
                                self.mask(&p).replace('\n', "\\n")
                            ));
                        } else if w.contains("Output") {
                            // New user: `int(states.s.Output)` after `echo 12` failed on "12\n".
                            err = err.with_hint(
                                "a step's Output keeps the command's last newline: write \
                                 trim(states.<step>.Output) to compare or convert it",
                            );
                        }
                        return Err(err);
                    }
                },
            }
        }
        Ok(None)
    }

    /// Runs a step that can fail (shell command, agent, operation, sub-workflow call) with its
    /// retry policy; one deadline covers every attempt and the waits between them.
    /// Source: spec/workflow.md §1.8; decisions.md (retry applies to every step type).
    pub(crate) async fn with_retry(
        &self,
        state: &State,
        at: At<'_>,
        deadline: Option<Instant>,
        token: &CancellationToken,
    ) -> Result<Body, AwfError> {
        let mut attempt = 0u32;
        // An agent step's usage-limit waits, counted over all its attempts.
        let mut usage_waits = 0u32;
        // The step's time is all its attempts and the waits between them, from the first
        // attempt's start (breaker: `✗ a (4ms)` after 2.4 s of retries).
        let mut first_start: Option<std::time::SystemTime> = None;
        let whole = |mut body: Body, first: Option<std::time::SystemTime>| {
            if first.is_some() {
                body.state.started_at = first;
            }
            body
        };
        loop {
            attempt += 1;
            // A mocked step is answered by its mock, once: it does not run, so another
            // attempt would answer the same.
            if let Some(mock) = self.step_mock(state) {
                return Ok(self.mocked_step(state, mock));
            }
            let mut body = match &state.kind {
                StateKind::Command(cmd) => {
                    self.command_attempt(state, cmd, at, deadline, token).await
                }
                StateKind::CallWorkflow(call) => {
                    self.call_once(state, call, at, deadline, token).await?
                }
                StateKind::Agent(step) => {
                    self.agent_once(state, step, at, deadline, token, &mut usage_waits)
                        .await?
                }
                StateKind::Operation(op) => {
                    self.operation_once(state, op, at, deadline, token).await?
                }
                StateKind::Parallel(_) | StateKind::Loop(_) | StateKind::Terminal(_) => {
                    return Err(AwfError::new(
                        ErrorCode::SystemInternal,
                        format!("step {}: not a retryable step type", state.name),
                    ));
                }
            };
            body.state.attempts = attempt;
            if first_start.is_none() {
                first_start = body.state.started_at;
            }
            if body.state.status != StepStatus::Failed {
                return Ok(whole(body, first_start));
            }
            // Another attempt would fail the same way: a mocked answer, the budget as spent
            // as this one found it, the provider as unknown, its CLI as missing from PATH.
            if self.mocks.contains_key(&state.name) {
                return Ok(whole(body, first_start));
            }
            if body
                .failure
                .as_ref()
                .is_some_and(|f| never_retried(f.code()))
            {
                return Ok(whole(body, first_start));
            }
            // Only processes have exit codes for `retryable_exit_codes`.
            let code = match state.kind {
                StateKind::Command(_) => body.state.exit_code,
                _ => None,
            };
            let reason = retry_reason(code, body.failure.as_ref());
            let Some(wait) = self.retry_wait(state, attempt, code, deadline, at, reason) else {
                return Ok(whole(spanned_timeout(state, attempt, body), first_start));
            };
            if !self.sleep_or_stop(wait, deadline, token).await {
                body = spanned_timeout(state, attempt, body);
                if token.is_cancelled() {
                    // Cancelled while waiting for the next attempt: the step did not fail
                    // on its own, the run's cancel ended it (new-user trial: `✗ a: exit
                    // code 1` and `failed` in `awf status` of a cancelled run).
                    body.state.status = StepStatus::Cancelled;
                    body.state.completed_at = Some(self.svc.clock.now());
                    let failure = cancelled(&state.name);
                    body.state.error = Some(failure.message().to_owned());
                    body.state.error_code = Some(failure.code());
                    body.failure = Some(failure);
                }
                return Ok(whole(body, first_start));
            }
        }
    }

    /// Whether to retry after failed attempt `attempt`, and how long to wait first.
    pub(crate) fn retry_wait(
        &self,
        state: &State,
        attempt: u32,
        exit_code: Option<i32>,
        deadline: Option<Instant>,
        at: At<'_>,
        reason: String,
    ) -> Option<Duration> {
        let policy = state.retry.as_ref()?;
        let code =
            exit_code.map_or_else(|| "no exit code".to_owned(), |c| format!("exit code {c}"));
        if attempt >= policy.max_attempts || !policy.retries_exit_code(exit_code) {
            let why = if attempt >= policy.max_attempts {
                format!("that was the last of max_attempts {}", policy.max_attempts)
            } else {
                "retry does not cover that exit code".to_owned()
            };
            self.debug_line(&format!(
                "step {}: attempt {attempt} failed ({code}): not retried ({why})",
                state.name
            ));
            return None;
        }
        if exit_code == Some(-1) && deadline.is_some_and(|d| self.svc.clock.instant() >= d) {
            return None;
        }
        let base = policy.base_delay(attempt);
        let u: f64 = if policy.jitter > 0.0 {
            rand::random::<f64>() * 2.0 - 1.0
        } else {
            0.0
        };
        let wait = policy.jittered(base, u);
        // The step's timeout covers every attempt: one that would start after it is not
        // announced (a new user saw `retrying (attempt 3) in 100ms` for an attempt that never
        // came), and the log says why the step stops at this attempt.
        if let Some(d) = deadline
            && self
                .svc
                .clock
                .instant()
                .checked_add(wait)
                .is_none_or(|next| next >= d)
        {
            let timeout = awf_domain::duration::format_go(state.timeout.unwrap_or_default());
            self.log(
                Some(&state.name),
                LogLevel::Info,
                &format!(
                    "{}: not retried: attempt {} would start after the step's timeout ({timeout}) of all its attempts",
                    state.name,
                    attempt + 1
                ),
                &format!("{}{}", at.prefix, state.name),
                at.iteration(),
            );
            return None;
        }
        self.debug_line(&format!(
            "step {}: attempt {attempt} failed ({code}): retrying in {} (attempt {} of {})",
            state.name,
            awf_domain::duration::format_go(wait),
            attempt + 1,
            policy.max_attempts
        ));
        self.emitter.emit(
            &format!("{}{}", at.prefix, state.name),
            at.iteration(),
            RunEvent::StepRetrying {
                step: state.name.clone(),
                attempt: attempt + 1,
                delay_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                reason: Some(reason),
            },
        );
        Some(wait)
    }

    /// Whether a step's process that died of `signal` was stopped by the run's cancel: the
    /// signal is one awf itself takes as a cancel (SIGHUP, SIGINT, SIGTERM) and the run is
    /// cancelled, or is within [`CANCEL_SIGNAL_WAIT`] (awf's own copy of a signal sent to
    /// its process group may be handled just after the step's end is seen). Woken at once
    /// by the cancel; waits only for a process that died of one of those signals.
    pub(crate) async fn cancel_follows(&self, signal: Option<i32>) -> bool {
        if !signal.is_some_and(|s| CANCEL_SIGNALS.contains(&s)) {
            return false;
        }
        let token = &self.cancel.token;
        if token.is_cancelled() {
            return true;
        }
        tokio::select! {
            () = token.cancelled() => true,
            () = tokio::time::sleep(CANCEL_SIGNAL_WAIT) => token.is_cancelled(),
        }
    }

    /// Sleeps unless cancelled or past the deadline; returns whether to go on.
    pub(crate) async fn sleep_or_stop(
        &self,
        wait: Duration,
        deadline: Option<Instant>,
        token: &CancellationToken,
    ) -> bool {
        let Some(until) = self.svc.clock.instant().checked_add(wait) else {
            return false;
        };
        if deadline.is_some_and(|d| until >= d) {
            return false;
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => !token.is_cancelled(),
            () = token.cancelled() => false,
        }
    }

    async fn command_attempt(
        &self,
        state: &State,
        cmd: &CommandStep,
        at: At<'_>,
        deadline: Option<Instant>,
        token: &CancellationToken,
    ) -> Body {
        let name = state.name.as_str();
        let mut st = StepState::running(name, self.svc.clock.now());
        let fail = |mut st: StepState, code: ErrorCode, msg: String| {
            st.status = StepStatus::Failed;
            st.completed_at = Some(self.svc.clock.now());
            // The state keeps the error as the run's error shows it (`AwfError::new` takes
            // a template error's hint, after `HINT_SEPARATOR`, as a hint of its own).
            st.error = Some(
                msg.split_once(awf_domain::ports::template::HINT_SEPARATOR)
                    .map_or(msg.as_str(), |(m, _)| m)
                    .to_owned(),
            );
            Body {
                state: st,
                failure: Some(AwfError::new(code, msg).with_detail("state", name)),
                early_exit: None,
            }
        };
        let program = match &cmd.source {
            CommandSource::Inline(text) => match self.render_shell(text, at.frame) {
                Ok(t) => Program::Shell(self.localize_awf_dirs(&t)),
                Err(e) => {
                    return fail(
                        st,
                        ErrorCode::ExecutionTemplateFailed,
                        format!("step {name}: interpolate command: {e}"),
                    );
                }
            },
            CommandSource::ScriptFile(path) => match self.load_script(path, at.frame) {
                Ok(t) => Program::Script(t),
                Err(e) => {
                    // The loader's hint (a missing file, a refused interpreter) is kept.
                    let mut body = fail(st, e.code(), format!("step {name}: {}", e.message()));
                    if let Some(f) = body.failure.take() {
                        body.failure =
                            Some(e.hints().iter().fold(f, |f, h| f.with_hint(h.clone())));
                    }
                    return body;
                }
            },
        };
        // Without a `dir` of its own the step runs in the run's directory (where a resumed
        // run started, not where `awf resume` was called).
        let dir = match &cmd.dir {
            None => self.default_dir(),
            Some(d) => match self.render(d, at.frame, None) {
                Ok(d) if d.trim().is_empty() => self.default_dir(),
                Ok(d) => Some(self.resolve_dir(&self.localize_awf_dirs(&d))),
                Err(e) => {
                    return fail(
                        st,
                        ErrorCode::ExecutionTemplateFailed,
                        format!("step {name}: interpolate dir: {e}"),
                    );
                }
            },
        };
        let remaining = deadline.map(|d| d.saturating_duration_since(self.svc.clock.instant()));
        if remaining.is_some_and(|r| r.is_zero()) {
            return fail(
                st,
                ErrorCode::ExecutionCommandTimeout,
                format!("step {name}: timed out"),
            );
        }
        let env = lock(&self.exported).clone();
        let through_shell = match &program {
            Program::Shell(_) => true,
            Program::Script(text) => !text.starts_with("#!"),
            Program::Exec { .. } => false,
        };
        if through_shell {
            self.check_shell(&env);
        }
        let spec = CommandSpec {
            program,
            dir,
            env,
            timeout: remaining,
            // The engine keeps the masked stream itself (mask first, cut second); the
            // executor's own copy is only a fallback for executors that stream nothing.
            capture_limit: Some(0),
            scope: Some(self.scope.0.clone()),
        };
        let path = format!("{}{name}", at.prefix);
        let callback = live_output(
            Arc::clone(&self.emitter),
            self.masker(),
            name,
            path,
            at.iteration(),
            state.capture_max_size.map_or(DEFAULT_STORED_OUTPUT, |m| {
                usize::try_from(m).unwrap_or(usize::MAX)
            }),
        );
        let out = match self
            .svc
            .executor
            .run(spec, Some(Arc::clone(&callback.callback)), token.clone())
            .await
        {
            Ok(o) => o,
            Err(e) => {
                // The process never started (a missing `dir:`, a NUL byte, too long a
                // command): no exit code, and the executor's hint kept.
                let e = nul_byte_origin(e, &cmd.source);
                let mut b = fail(st, e.code(), format!("step {name}: {}", e.message()));
                if let Some(mut f) = b.failure.take() {
                    for h in e.hints() {
                        f = f.with_hint(h.clone());
                    }
                    b.failure = Some(f.with_detail(NOT_STARTED, true));
                }
                return b;
            }
        };
        let (stdout, stderr, cut) = callback.finish();
        let limit = state
            .capture_max_size
            .unwrap_or_else(|| u64::try_from(DEFAULT_STORED_OUTPUT).unwrap_or(u64::MAX));
        for (stream, tail) in cut {
            match stream {
                OutputStream::Stdout => st.output_tail = Some(tail),
                OutputStream::Stderr => st.stderr_tail = Some(tail),
            }
            // Said, not silent (breaker: a 70 MB output was cut to 64 MiB with no word, and
            // later steps read the cut value).
            let (field, which) = match stream {
                OutputStream::Stdout => ("Output", "stdout"),
                OutputStream::Stderr => ("Stderr", "stderr"),
            };
            let kept = kept_size(limit);
            self.log(
                Some(name),
                LogLevel::Warn,
                &format!(
                    "step {name}: {which} was longer than the {kept} kept: `.states.{name}.{field}` holds at most its first {kept} (raise `capture.max_size` to keep more)"
                ),
                &format!("{}{name}", at.prefix),
                at.iteration(),
            );
        }
        st.completed_at = Some(self.svc.clock.now());
        // What was streamed was masked before it was cut; an executor that streamed nothing
        // (a test double) is taken at its word.
        st.output = stdout.unwrap_or_else(|| self.cap(state, out.stdout)).into();
        st.stderr = stderr.unwrap_or_else(|| self.cap(state, out.stderr)).into();
        st.exit_code = Some(out.exit_code);
        // A process that died of the signal that is cancelling the run (a terminal's Ctrl-C
        // or `timeout`'s SIGTERM reach the whole process group; one sent as the step was
        // spawned reaches it before it leaves awf's group) did not fail on its own: the
        // run's cancel follows (breaker: such a run took its `on_failure` route or ended
        // `failed`, exit 3, instead of `cancelled`).
        let termination = match out.termination {
            Termination::Exited if self.cancel_follows(out.signal).await => Termination::Cancelled,
            t => t,
        };
        match termination {
            Termination::Cancelled => {
                st.status = StepStatus::Cancelled;
                st.error = Some("cancelled".to_owned());
                Body {
                    state: st,
                    failure: Some(cancelled(name)),
                    early_exit: None,
                }
            }
            Termination::TimedOut => {
                let msg = format!(
                    "step {name}: timed out after {}{}",
                    awf_domain::duration::format_go(state.timeout.unwrap_or_default()),
                    killed_after_grace(out.signal)
                );
                fail(st, ErrorCode::ExecutionCommandTimeout, msg)
            }
            Termination::Exited if out.exit_code == 0 => {
                st.status = StepStatus::Completed;
                Body {
                    state: st,
                    failure: None,
                    early_exit: None,
                }
            }
            Termination::Exited => {
                let stderr_text = st.stderr.clone();
                let err_text = st.stderr.trim();
                let msg = if let Some(sig) = out.signal {
                    format!("step {name}: killed by signal {sig}{}", signal_name(sig))
                } else if err_text.is_empty() {
                    format!("step {name}: exit code {}", out.exit_code)
                } else {
                    format!("step {name}: {}", head_and_tail(err_text, ERROR_STDERR_MAX))
                };
                let mut b = fail(st, ErrorCode::ExecutionCommandFailed, msg);
                if let Some(f) = b.failure.take() {
                    let mut f = f.with_detail("exit_code", out.exit_code);
                    if out.exit_code == 127 {
                        match missing_program(&stderr_text) {
                            Some(p) => {
                                f = f.with_detail("command", p.clone()).with_hint(format!(
                                    "exit code 127: `{p}` was not found; check that it is \
                                     installed and on PATH (try: which {p})"
                                ));
                            }
                            None => {
                                f = f.with_hint(
                                    "exit code 127: the command was not found; check its \
                                     spelling and PATH",
                                );
                            }
                        }
                    } else if out.exit_code == 126 {
                        f = f.with_hint(
                            "exit code 126: the command is not executable; check its permissions",
                        );
                    }
                    b.failure = Some(f);
                }
                b
            }
        }
    }

    /// Applies `capture.max_size` to stored output.
    pub(crate) fn cap(&self, state: &State, mut text: String) -> String {
        if let Some(max) = state.capture_max_size {
            let max = usize::try_from(max).unwrap_or(usize::MAX);
            if text.len() > max {
                let mut cut = max;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
            }
        }
        text
    }

    /// The directory of a command without a `dir` of its own: the run's working directory
    /// (`None`, the process's, when the run has none).
    pub(crate) fn default_dir(&self) -> Option<PathBuf> {
        Some(self.working_dir.clone()).filter(|d| !d.as_os_str().is_empty())
    }

    fn resolve_dir(&self, d: &str) -> PathBuf {
        let p = expand_home(d, &self.env);
        if p.is_absolute() {
            p
        } else {
            self.working_dir.join(p)
        }
    }

    /// Loads and interpolates a `script_file` (≤ 1 MiB; relative paths against the workflow
    /// file's directory; `~/` is the home directory). Source: spec/workflow.md §1.12.
    /// The command of a `command` step as it will run, for its `StepStarted` event:
    /// interpolated in `frame` (the raw template when that fails: the attempt reports the
    /// error), the `script_file` content loaded (its path when it cannot be), secrets masked.
    /// `None` for other kinds of state.
    fn started_command(&self, state: &State, frame: Option<&LoopFrame>) -> Option<String> {
        let StateKind::Command(cmd) = &state.kind else {
            return None;
        };
        let text = match &cmd.source {
            CommandSource::Inline(t) => match self.render_shell(t, frame) {
                Ok(r) => self.localize_awf_dirs(&r),
                Err(_) => t.clone(),
            },
            CommandSource::ScriptFile(p) => {
                self.load_script(p, frame).unwrap_or_else(|_| p.clone())
            }
        };
        Some(self.mask(&text))
    }

    pub(crate) fn load_script(
        &self,
        path: &str,
        frame: Option<&LoopFrame>,
    ) -> Result<String, AwfError> {
        let rendered = self.render(path, frame, None).map_err(|e| {
            AwfError::new(
                ErrorCode::ExecutionTemplateFailed,
                format!("interpolate file path: {e}"),
            )
        })?;
        let file = self.resolve_file(&rendered);
        let text =
            read_workflow_file(self.svc.host.as_ref(), &file, "script file").map_err(|e| {
                e.with_hint("script_file paths are relative to the workflow file's directory")
            })?;
        // A script that runs as shell code is rendered as a `command:` is: under
        // `shell_quote: true` its values are quoted (new user: `awf init`'s example script
        // ran an input's `$( … )`), and either way a value in a `#` comment stays on one
        // line; a script for another interpreter is rendered as it is written.
        // An interpreter awf cannot tell counts as shell (breaker: `#!/bin/rbash` and
        // `#!/usr/bin/nice bash` were filled in unquoted); a non-POSIX shell's script (fish)
        // that prints a value is refused under the mode, as no quoting awf has protects it.
        let interpreter = awf_domain::interpreter::script_interpreter(&text);
        if self.wf.shell_quote
            && let Some((why, hint)) = interpreter.shell_quote_refusal(&text)
        {
            return Err(AwfError::new(
                ErrorCode::ExecutionTemplateFailed,
                format!("interpolate script {}: {why}", file.display()),
            )
            .with_hint(hint));
        }
        let rendered = if interpreter.quotes_as_shell() {
            self.render_command(&text, frame, None)
        } else {
            self.render(&text, frame, None)
        };
        rendered.map_err(|e| {
            AwfError::new(
                ErrorCode::ExecutionTemplateFailed,
                format!("interpolate script {}: {e}", file.display()),
            )
        })
    }

    /// Local-before-global for `{{.awf.scripts_dir}}` / `{{.awf.prompts_dir}}` inside an
    /// interpolated `command` or `dir`, as for `script_file` (see [`localize_dirs`]); the
    /// project folder is the parent of the workflow file's directory (`.awf/` for a workflow
    /// in `.awf/workflows/`). Source: spec/workflow.md §1.12 (last paragraph).
    pub(crate) fn localize_awf_dirs(&self, text: &str) -> String {
        localize_awf_dirs_in(
            text,
            &self.svc.awf_dirs,
            &self.wf.source.dir,
            self.svc.host.as_ref(),
        )
    }

    /// Resolves a file path named in the workflow: `~/` → home; local-before-global for the
    /// global scripts/prompts dirs; relative → the workflow file's directory.
    pub(crate) fn resolve_file(&self, p: &str) -> PathBuf {
        for key in ["scripts_dir", "prompts_dir"] {
            if let Some(global) = self.svc.awf_dirs.get(key)
                && !global.is_empty()
                && let Some(rest) = p.strip_prefix(&format!("{global}/"))
                && let Some(parent) = self.wf.source.dir.parent()
            {
                let local = parent
                    .join(if key == "scripts_dir" {
                        "scripts"
                    } else {
                        "prompts"
                    })
                    .join(rest);
                if self.svc.host.exists(&local) {
                    return local;
                }
            }
        }
        let path = expand_home(p, &self.env);
        if path.is_absolute() {
            path
        } else {
            self.wf.source.dir.join(path)
        }
    }
}

/// Reads a file a workflow names (`script_file`, `prompt_file`, a role or a skill): it must
/// be a regular file (not a FIFO or a device, which could block or never end) of at most
/// 1 MiB; reading stops after the limit.
///
/// # Errors
/// `USER.INPUT.MISSING_FILE` (missing, a directory or not a regular file),
/// `USER.INPUT.INVALID_FORMAT` (over 1 MiB), `SYSTEM.IO.READ_FAILED`.
pub(crate) fn read_workflow_file(
    host: &dyn awf_domain::ports::Host,
    path: &Path,
    what: &str,
) -> Result<String, AwfError> {
    let shown = path.display();
    let meta = host.metadata(path).map_err(|e| {
        let link = host.is_symlink(path);
        let msg = if link && e.kind() == std::io::ErrorKind::NotFound {
            format!("{what} is a symbolic link whose target does not exist: {shown}")
        } else if link {
            format!("{what} is a symbolic link that cannot be followed ({e}): {shown}")
        } else if e.kind() == std::io::ErrorKind::NotFound {
            format!("{what} not found: {shown}")
        } else {
            format!("{what} cannot be read ({e}): {shown}")
        };
        AwfError::new(ErrorCode::UserInputMissingFile, msg)
    })?;
    if meta.kind == awf_domain::ports::host::FileKind::Dir {
        return Err(AwfError::new(
            ErrorCode::UserInputMissingFile,
            format!("{what} is a directory: {shown}"),
        ));
    }
    if meta.kind != awf_domain::ports::host::FileKind::File {
        return Err(AwfError::new(
            ErrorCode::UserInputMissingFile,
            format!("{what} is not a regular file (a pipe or a device?): {shown}"),
        ));
    }
    let too_big = || {
        AwfError::new(
            ErrorCode::UserInputInvalidFormat,
            format!("{what} exceeds 1MB limit: {shown}"),
        )
    };
    if meta.len > MAX_FILE_BYTES {
        return Err(too_big());
    }
    let read_failed = |e: std::io::Error| {
        AwfError::new(ErrorCode::SystemIoReadFailed, format!("read {shown}: {e}"))
    };
    let bytes = host
        .read_limited(path, MAX_FILE_BYTES + 1)
        .map_err(read_failed)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(too_big());
    }
    String::from_utf8(bytes).map_err(|_| {
        AwfError::new(
            ErrorCode::UserInputInvalidFormat,
            format!("{what} is not valid UTF-8: {shown}"),
        )
    })
}

/// [`localize_dirs`] for the global `scripts_dir` / `prompts_dir` of `awf_dirs` (the `.awf`
/// template namespace) and the project folder of a workflow in `workflow_dir` (its parent:
/// `.awf/` for `.awf/workflows/`).
pub(crate) fn localize_awf_dirs_in(
    text: &str,
    awf_dirs: &std::collections::BTreeMap<String, String>,
    workflow_dir: &Path,
    host: &dyn awf_domain::ports::Host,
) -> String {
    const DIRS: [(&str, &str); 2] = [("scripts_dir", "scripts"), ("prompts_dir", "prompts")];
    let named = |key: &str| awf_dirs.get(key).filter(|g| !g.is_empty());
    // Most texts name neither directory: no copies, no paths built (issue 9: per step).
    let Some(project) = workflow_dir.parent().filter(|_| {
        DIRS.iter()
            .any(|(key, _)| named(key).is_some_and(|g| text.contains(g.as_str())))
    }) else {
        return text.to_owned();
    };
    let pairs: Vec<(String, PathBuf)> = DIRS
        .iter()
        .filter_map(|(key, sub)| named(key).map(|g| (g.clone(), project.join(sub))))
        .collect();
    localize_dirs(text, &pairs, host)
}

/// Rewrites each occurrence of a global directory in `text` to its local counterpart when
/// that exists: `(global, local)` pairs; `<global>/<suffix>` (the suffix ends at whitespace, a
/// quote, `|`, `&`, `;`, `<`, `>`, `(` or `)`) becomes `<local>/<suffix>` when
/// `<local>/<suffix>` exists; `<global>` on its own becomes `<local>` when that directory
/// exists. Anything else is left as it is (the global path is used).
pub(crate) fn localize_dirs(
    text: &str,
    pairs: &[(String, PathBuf)],
    host: &dyn awf_domain::ports::Host,
) -> String {
    let ends = |c: char| c.is_whitespace() || "'\"|&;<>()`".contains(c);
    let mut out = text.to_owned();
    for (global, local) in pairs {
        let mut result = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(i) = rest.find(global.as_str()) {
            let after = &rest[i + global.len()..];
            // Only the whole directory name: `/x/scripts` must not match `/x/scripts2`.
            let boundary = after.chars().next().is_none_or(|c| c == '/' || ends(c));
            result.push_str(&rest[..i]);
            if !boundary {
                result.push_str(global);
                rest = after;
                continue;
            }
            let suffix_len = after.find(|c: char| ends(c)).unwrap_or(after.len());
            let suffix = &after[..suffix_len];
            let candidate = match suffix.strip_prefix('/') {
                Some(s) if !s.is_empty() => local.join(s),
                _ => local.clone(),
            };
            if host.exists(&candidate) {
                result.push_str(&local.display().to_string());
            } else {
                result.push_str(global);
            }
            rest = after;
        }
        result.push_str(rest);
        out = result;
    }
    out
}

fn expand_home(p: &str, env: &std::collections::BTreeMap<String, String>) -> PathBuf {
    if let Some(rest) = p.strip_prefix("~/")
        && let Some(home) = env.get("HOME")
    {
        return Path::new(home).join(rest);
    }
    PathBuf::from(p)
}

/// A template failure whose text carries a hint (after
/// [`HINT_SEPARATOR`](awf_domain::ports::template::HINT_SEPARATOR): readFile's, for a relative
/// path) with the hint moved out of the message, and out of the state's error, into the
/// failure's hints (shown as `Hint:` lines). Other failures are left alone: a command's
/// stderr may hold such a line (git's `hint:`).
fn template_hint(f: AwfError, st: &mut StepState) -> AwfError {
    use awf_domain::ports::template::HINT_SEPARATOR;
    if f.code() != ErrorCode::ExecutionTemplateFailed {
        return f;
    }
    let Some((message, hint)) = f
        .message()
        .split_once(HINT_SEPARATOR)
        .map(|(m, h)| (m.to_owned(), h.to_owned()))
    else {
        return f;
    };
    if let Some(e) = st.error.as_mut()
        && let Some(at) = e.find(HINT_SEPARATOR)
    {
        e.truncate(at);
    }
    f.map_message(|_| message).with_hint(hint)
}

/// What a timed-out command's message adds when the process outlived SIGTERM and the grace
/// after it, so SIGKILL ended it (`signal` 9): the step took that much longer than its
/// `timeout` (a new user saw `(6.003s): timed out after 1s` with no word of the grace).
fn killed_after_grace(signal: Option<i32>) -> String {
    if signal != Some(SIGKILL) {
        return String::new();
    }
    format!(
        " (stopped with SIGKILL {} later: it ignored SIGTERM)",
        awf_domain::duration::format_go(awf_domain::ports::exec::KILL_GRACE)
    )
}

/// SIGKILL's number (9 on every POSIX system).
const SIGKILL: i32 = 9;

/// The signals awf takes as a cancel of the run (SIGHUP, SIGINT, SIGTERM): a step's process
/// that died of one may have been hit by the same signal (see [`Run::cancel_follows`]).
pub(crate) const CANCEL_SIGNALS: [i32; 3] = [1, 2, 15];

/// How long a step whose process died of one of [`CANCEL_SIGNALS`] waits for the run's own
/// cancel before it is taken as the step's failure: long enough for awf's signal handling on
/// a loaded machine, short enough that a process that really killed itself is not held up.
const CANCEL_SIGNAL_WAIT: Duration = Duration::from_millis(500);

/// `body` of attempt `attempt` of `state`, when its step's own `timeout` ended it before the
/// last of its `retry.max_attempts`: the failure says that the timeout spans every attempt
/// and how many ran (AWF (Go)'s semantics, kept; new user: `timed out after 1s` with 3
/// attempts allowed said nothing of the 2 that never came). Any other body as it is.
fn spanned_timeout(state: &State, attempt: u32, mut body: Body) -> Body {
    let max = state.retry.as_ref().map_or(1, |r| r.max_attempts);
    let timed_out = body.failure.as_ref().is_some_and(|f| {
        matches!(
            f.code(),
            ErrorCode::ExecutionCommandTimeout
                | ErrorCode::ExecutionAgentTimeout
                | ErrorCode::ExecutionOperationTimeout
        )
    });
    if !timed_out || attempt >= max || state.timeout.is_none_or(|t| t.is_zero()) {
        return body;
    }
    let more = format!(" (the step's timeout spans all {max} attempts; {attempt} ran)");
    body.failure = body.failure.map(|f| f.map_message(|m| m + &more));
    if let Some(e) = body.state.error.as_mut() {
        e.push_str(&more);
    }
    body
}

/// Failures a step's `retry` does not retry: another attempt cannot succeed (a spent budget,
/// a provider that does not exist, an agent CLI that is not installed).
fn never_retried(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::ExecutionBudgetExceeded
            | ErrorCode::UserAgentUnknownProvider
            | ErrorCode::ExecutionAgentBinaryNotFound
    )
}

/// Why a failed attempt failed, briefly, for its retry line: `exit 1` for a process's exit
/// code, `timed out`, else the first line of its error (its `step S: ` left out, at most 80
/// characters).
fn retry_reason(exit_code: Option<i32>, failure: Option<&AwfError>) -> String {
    if failure.is_some_and(|f| f.code() == ErrorCode::ExecutionCommandTimeout) {
        return "timed out".to_owned();
    }
    if let Some(c) = exit_code.filter(|c| *c >= 0) {
        return format!("exit {c}");
    }
    let Some(f) = failure else {
        return "failed".to_owned();
    };
    let line = f.message().lines().next().unwrap_or("");
    let line = line
        .split_once(": ")
        .filter(|(head, _)| {
            head.strip_prefix("step ")
                .is_some_and(|name| !name.contains(' '))
        })
        .map_or(line, |(_, rest)| rest);
    let short: String = line.chars().take(80).collect();
    if short.chars().count() < line.chars().count() {
        format!("{short}…")
    } else if short.is_empty() {
        "failed".to_owned()
    } else {
        short
    }
}

/// How much of a failed command's stderr its error holds (bytes, about): AWF (Go) puts all of
/// it there (`step X: <stderr>`); a longer one keeps its start and its end.
const ERROR_STDERR_MAX: usize = 2000;

/// `s` when it is at most `max` bytes; else its first line (at most a quarter of `max`), a
/// `… N bytes cut …` line and its last lines (the rest of `max`), so that the error starts
/// as AWF's does (the `✗` line shows stderr's first line) and ends where a failure is
/// usually said (trial 77: the error was the last 2,000 bytes, cut mid-line).
fn head_and_tail(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if s.len() <= max {
        return std::borrow::Cow::Borrowed(s);
    }
    let first = s.split('\n').next().unwrap_or(s);
    let head = &first[..floor_boundary(first, first.len().min(max / 4))];
    let mut start = s.len() - (max - head.len());
    while !s.is_char_boundary(start) {
        start += 1;
    }
    // From the start of a line when one begins in the kept end.
    if let Some(nl) = s[start..].find('\n')
        && start + nl + 1 < s.len()
    {
        start += nl + 1;
    }
    let head_end = head.len();
    let cut = start.saturating_sub(head_end);
    let ellipsis = if head_end < first.len() { "…" } else { "" };
    std::borrow::Cow::Owned(format!(
        "{head}{ellipsis}\n… {cut} bytes cut …\n{}",
        &s[start..]
    ))
}

/// The largest char boundary of `s` at or below `i`.
fn floor_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// `e` (a command that could not start) with where its NUL byte came from, when it holds
/// one ([`NUL_BYTE_DETAIL`](awf_domain::ports::exec::NUL_BYTE_DETAIL)): the step's `command`
/// as written (a YAML double-quoted `\0`: `awf validate` reports it, so only a workflow
/// that was not validated gets here), the script file, or a template's value (breaker: a
/// literal `\033` in double quotes was blamed on a template).
fn nul_byte_origin(e: AwfError, source: &CommandSource) -> AwfError {
    if !e
        .details()
        .contains_key(awf_domain::ports::exec::NUL_BYTE_DETAIL)
    {
        return e;
    }
    let (origin, hint) = match source {
        CommandSource::Inline(text) if text.contains('\0') => (
            "it is in the step's `command` as written",
            awf_domain::validate::NUL_IN_YAML_HINT,
        ),
        CommandSource::ScriptFile(_) => (
            "it is in the script file, or came from a template's value in it",
            "Remove the NUL bytes from the script file; keep binary text out of the script: \
             pass a file's path and read it in the script",
        ),
        CommandSource::Inline(_) => (
            "it came from a template's value (e.g. `readFile` of a binary file)",
            "Keep binary text out of the command: pass the file's path and read it in the \
             command (e.g. `tr '\\0' '\\n' < FILE`), or remove the NUL bytes in the step \
             that makes the value.",
        ),
    };
    e.map_message(|m| format!("{m}; {origin}")).with_hint(hint)
}

/// ` (SIGKILL)` for the common signals, else empty.
/// The program a shell reported missing in `stderr` (exit 127): the name before `: command not
/// found` (bash) or `: not found` (dash/sh) on the last such line, without any directory.
fn missing_program(stderr: &str) -> Option<String> {
    stderr.lines().rev().find_map(|line| {
        let head = line
            .trim_end()
            .strip_suffix(": command not found")
            .or_else(|| line.trim_end().strip_suffix(": not found"))?;
        let name = head.rsplit(": ").next()?.trim();
        (!name.is_empty() && !name.contains(char::is_whitespace)).then(|| name.to_owned())
    })
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => " (SIGHUP)",
        2 => " (SIGINT)",
        3 => " (SIGQUIT)",
        6 => " (SIGABRT)",
        9 => " (SIGKILL)",
        11 => " (SIGSEGV)",
        13 => " (SIGPIPE)",
        15 => " (SIGTERM)",
        _ => "",
    }
}

/// Detail set on the failure of a command step whose process could not be started (its
/// transitions are not evaluated: there is no exit code to route on).
const NOT_STARTED: &str = "not_started";

pub(crate) fn cancelled(step: &str) -> AwfError {
    AwfError::new(
        ErrorCode::ExecutionRunCancelled,
        format!("step {step}: cancelled"),
    )
    .with_detail("state", step)
}

/// `bytes` for a message: whole MiB or KiB when it is one (`64 MiB`), else bytes.
fn kept_size(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    match bytes {
        b if b >= MIB && b % MIB == 0 => format!("{} MiB", b / MIB),
        b if b >= KIB && b % KIB == 0 => format!("{} KiB", b / KIB),
        b => format!("{b} bytes"),
    }
}

/// Most bytes of each stream stored in a step's state when `capture.max_size` is not set
/// (64 MiB, the process executor's own default).
const DEFAULT_STORED_OUTPUT: usize = 64 * 1024 * 1024;

/// The masked bytes of one stream kept for the step's state: mask first, cut second.
#[derive(Default)]
struct Kept {
    bytes: Vec<u8>,
    /// Whether the callback saw any byte of this stream.
    seen: bool,
    truncated: bool,
    /// The last [`TAIL_KEPT`] bytes or more (at most twice that) of the whole stream: a cut
    /// stream's failure shows its real last lines (trial 82: the last lines of the first
    /// 64 MiB were shown, the line saying why the step failed never).
    tail: Vec<u8>,
    /// Newlines of the stream past what `bytes` kept (those of `bytes` are counted when the
    /// stream was cut, [`Kept::cut_tail`]: a stream within its cap pays nothing for it).
    lines: u64,
}

/// The newlines in `bytes`.
fn newlines(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|b| **b == b'\n').count() as u64
}

/// Bytes of a stream's end kept besides its capped start ([`Kept::tail`]).
const TAIL_KEPT: usize = 16 * 1024;

impl Kept {
    fn take(&mut self, masked: &[u8], limit: usize) {
        let room = limit.saturating_sub(self.bytes.len());
        if masked.len() > room {
            self.truncated = true;
        }
        let kept = room.min(masked.len());
        self.bytes.extend_from_slice(&masked[..kept]);
        self.lines += newlines(&masked[kept..]);
        let end = &masked[masked.len().saturating_sub(TAIL_KEPT)..];
        self.tail.extend_from_slice(end);
        if self.tail.len() > 2 * TAIL_KEPT {
            self.tail.drain(..self.tail.len() - TAIL_KEPT);
        }
    }

    /// The stream's end when it was cut: from the first line start in the kept tail (the
    /// whole tail when it has no newline, a cut character dropped), `None` otherwise.
    fn cut_tail(&self) -> Option<StreamTail> {
        if !self.truncated {
            return None;
        }
        let mut t = &self.tail[self.tail.len().saturating_sub(TAIL_KEPT)..];
        if let Some(nl) = t[..t.len().saturating_sub(1)]
            .iter()
            .position(|b| *b == b'\n')
        {
            t = &t[nl + 1..];
        } else {
            // A cut character at the start is dropped (continuation bytes only).
            let skip = t
                .iter()
                .take(3)
                .take_while(|b| (**b & 0xC0) == 0x80)
                .count();
            t = &t[skip..];
        }
        Some(StreamTail {
            text: String::from_utf8_lossy(t).into_owned(),
            lines: newlines(&self.bytes) + self.lines,
        })
    }

    /// The kept bytes as text (invalid UTF-8 as U+FFFD); a character split by the cap is
    /// dropped. `None` when nothing was streamed.
    fn text(self) -> Option<String> {
        if !self.seen {
            return None;
        }
        let mut b = self.bytes;
        if self.truncated {
            let valid = match std::str::from_utf8(&b) {
                Ok(_) => b.len(),
                Err(e) if e.error_len().is_none() => e.valid_up_to(),
                Err(_) => b.len(),
            };
            b.truncate(valid);
        }
        Some(match String::from_utf8(b) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }
}

/// One stream's masker and kept bytes.
struct LiveStream {
    masker: StreamMasker,
    kept: Kept,
    /// The start of a UTF-8 character the last chunk cut (at most 3 bytes), held for the
    /// next one: each chunk's text is whole characters (breaker: a read ending inside `é`
    /// gave `A\u{fffd}` and `\u{fffd}B` in the event stream while the step's output said `AéB`).
    partial: Vec<u8>,
}

/// `bytes` after the `held` start of a character, minus the start of a character cut at
/// its end (kept in `held` for the next chunk). Bytes that can never be part of a valid
/// character are passed on as they are (shown as U+FFFD).
fn whole_chars(held: &mut Vec<u8>, mut bytes: Vec<u8>) -> Vec<u8> {
    if !held.is_empty() {
        let mut joined = std::mem::take(held);
        joined.append(&mut bytes);
        bytes = joined;
    }
    let cut = match std::str::from_utf8(&bytes) {
        Ok(_) => None,
        // `error_len() == None`: the input ends in the middle of a valid character.
        Err(e) if e.error_len().is_none() => Some(e.valid_up_to()),
        Err(e) => {
            // An invalid byte earlier: look at the tail alone.
            let tail_start = bytes.len().saturating_sub(3).max(e.valid_up_to());
            (tail_start..bytes.len()).find(|&i| {
                std::str::from_utf8(&bytes[i..])
                    .is_err_and(|t| t.error_len().is_none() && t.valid_up_to() == 0)
            })
        }
    };
    if let Some(at) = cut {
        *held = bytes.split_off(at);
    }
    bytes
}

/// Live output plumbing: masks each stream across chunk boundaries, emits `OutputChunk`s with
/// the masked bytes exactly, and keeps the first `limit` masked bytes of each stream for the
/// step's state (so a cap never cuts a secret in half: mask first, cut second).
struct LiveOutput {
    callback: OutputCallback,
    streams: Arc<Mutex<[LiveStream; 2]>>,
    emit: Arc<dyn Fn(OutputStream, Vec<u8>) + Send + Sync>,
    limit: usize,
}

impl LiveOutput {
    /// Ends both streams (a held partial secret is released masked) and returns the stored
    /// (stdout, stderr) text, `None` for a stream the executor never streamed, and the
    /// streams whose bytes went past the limit (cut).
    fn finish(
        &self,
    ) -> (
        Option<String>,
        Option<String>,
        Vec<(OutputStream, StreamTail)>,
    ) {
        let mut texts = [None, None];
        let mut cut = Vec::new();
        for (i, stream) in [OutputStream::Stdout, OutputStream::Stderr]
            .into_iter()
            .enumerate()
        {
            let (rest, kept) = {
                let mut s = lock(&self.streams);
                let ls = &mut s[i];
                let rest = ls.masker.finish();
                ls.kept.take(&rest, self.limit);
                // What is held of a cut character goes out with the rest (invalid then).
                let mut out = std::mem::take(&mut ls.partial);
                out.extend_from_slice(&rest);
                (out, std::mem::take(&mut ls.kept))
            };
            (self.emit)(stream, rest);
            if let Some(tail) = kept.cut_tail() {
                cut.push((stream, tail));
            }
            texts[i] = kept.text();
        }
        let [a, b] = texts;
        (a, b, cut)
    }
}

fn live_output(
    emitter: Arc<Emitter>,
    masker: awf_domain::mask::Masker,
    step: &str,
    path: String,
    iteration: Option<usize>,
    limit: usize,
) -> LiveOutput {
    let streams = Arc::new(Mutex::new([
        LiveStream {
            masker: StreamMasker::new(masker.clone()),
            kept: Kept::default(),
            partial: Vec::new(),
        },
        LiveStream {
            masker: StreamMasker::new(masker),
            kept: Kept::default(),
            partial: Vec::new(),
        },
    ]));
    let step = step.to_owned();
    let emit: Arc<dyn Fn(OutputStream, Vec<u8>) + Send + Sync> =
        Arc::new(move |stream: OutputStream, bytes: Vec<u8>| {
            if !bytes.is_empty() {
                emitter.emit(
                    &path,
                    iteration,
                    RunEvent::OutputChunk {
                        step: step.clone(),
                        stream,
                        text: bytes.into(),
                    },
                );
            }
        });
    let cb_streams = Arc::clone(&streams);
    let cb_emit = Arc::clone(&emit);
    let callback: OutputCallback = Arc::new(move |stream: OutputStream, chunk: &[u8]| {
        let ready = {
            let mut s = lock(&cb_streams);
            let ls = match stream {
                OutputStream::Stdout => &mut s[0],
                OutputStream::Stderr => &mut s[1],
            };
            ls.kept.seen |= !chunk.is_empty();
            let ready = ls.masker.push(chunk);
            ls.kept.take(&ready, limit);
            whole_chars(&mut ls.partial, ready)
        };
        cb_emit(stream, ready);
    });
    LiveOutput {
        callback,
        streams,
        emit,
        limit,
    }
}

#[cfg(test)]
mod localize_tests {
    #![allow(clippy::unwrap_used)]
    use super::localize_dirs;
    use awf_domain::ports::fakes::FakeHost;

    #[test]
    fn global_dirs_become_local_ones_where_the_local_file_exists() {
        let root = std::path::PathBuf::from("/p");
        let local = root.join(".awf/scripts");
        let host = FakeHost::default().file(local.join("build.sh"), "echo");
        let global = "/home/u/.config/awf/scripts".to_owned();
        let pairs = vec![(global.clone(), local.clone())];
        let l = local.display();
        // A file that exists locally: local path; one that does not: global path kept.
        assert_eq!(
            localize_dirs(
                &format!("sh {global}/build.sh --x | tee {global}/missing.sh"),
                &pairs,
                &host
            ),
            format!("sh {l}/build.sh --x | tee {global}/missing.sh")
        );
        // Quoted, and the directory on its own (a `dir:` value).
        assert_eq!(
            localize_dirs(&format!("\"{global}/build.sh\""), &pairs, &host),
            format!("\"{l}/build.sh\"")
        );
        assert_eq!(localize_dirs(&global, &pairs, &host), l.to_string());
        // Only the whole directory name matches.
        let other = format!("{global}2/build.sh");
        assert_eq!(localize_dirs(&other, &pairs, &host), other);
        // No local directory at all: unchanged.
        let none = vec![(global.clone(), root.join("nope"))];
        assert_eq!(localize_dirs(&global, &none, &host), global);
    }
}

#[cfg(test)]
mod missing_program_tests {
    use super::missing_program;

    #[test]
    fn the_missing_program_is_read_from_bash_and_dash_messages() {
        assert_eq!(
            missing_program("/bin/bash: line 1: nonexistentcmd42: command not found\n").as_deref(),
            Some("nonexistentcmd42")
        );
        assert_eq!(
            missing_program("sh: 1: frobnicate: not found\n").as_deref(),
            Some("frobnicate")
        );
        assert_eq!(missing_program("boom\n"), None);
        assert_eq!(missing_program(""), None);
    }
}

#[cfg(test)]
mod whole_chars_tests {
    #![allow(clippy::unwrap_used)]
    use super::whole_chars;

    /// A character cut between two chunks goes out whole with the second; bytes that are no
    /// character's start pass as they are; what is held at the end is released by the caller.
    /// Trial 82: a stream cut at its cap keeps its end too, from a line's start, and counts
    /// all its lines.
    #[test]
    fn a_cut_stream_keeps_its_last_lines() {
        let mut k = super::Kept::default();
        for i in 0..5000 {
            k.take(format!("progress line {i} {:0100}\n", 0).as_bytes(), 1000);
        }
        k.take(b"FINAL - failed", 1000);
        let tail = k.cut_tail().unwrap();
        assert_eq!(tail.lines, 5000);
        assert!(tail.text.ends_with("progress line 4999 0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000\nFINAL - failed"), "{}", &tail.text[tail.text.len() - 200..]);
        assert!(
            tail.text.starts_with("progress line "),
            "{}",
            &tail.text[..50]
        );
        assert!(tail.text.len() <= super::TAIL_KEPT);
        assert_eq!(k.bytes.len(), 1000);
        let mut small = super::Kept::default();
        small.take(b"all\nkept\n", 1000);
        assert_eq!(small.cut_tail(), None);
    }

    #[test]
    fn a_character_cut_between_chunks_goes_out_whole() {
        let mut held = Vec::new();
        assert_eq!(whole_chars(&mut held, b"A\xc3".to_vec()), b"A");
        assert_eq!(held, b"\xc3");
        assert_eq!(
            whole_chars(&mut held, b"\xa9B\n".to_vec()),
            "éB\n".as_bytes()
        );
        assert!(held.is_empty());
        // A four-byte character cut after one, then two bytes.
        let euro = "😀".as_bytes();
        assert_eq!(whole_chars(&mut held, euro[..1].to_vec()), b"");
        assert_eq!(whole_chars(&mut held, euro[1..3].to_vec()), b"");
        assert_eq!(whole_chars(&mut held, euro[3..].to_vec()), euro);
        // Invalid bytes are not held; a cut character after them is.
        assert_eq!(whole_chars(&mut held, b"x\xff\xe2\x82".to_vec()), b"x\xff");
        assert_eq!(held, b"\xe2\x82");
        assert_eq!(whole_chars(&mut held, b"\xac".to_vec()), "€".as_bytes());
        // A lone continuation byte is invalid, not held.
        assert_eq!(whole_chars(&mut held, b"\x80".to_vec()), b"\x80");
        assert!(held.is_empty());
    }
}

/// The first string literal after a `matches` operator of `expr` that is not a regular
/// expression (the `regex` crate's syntax, Go's RE2), as the expression gives it.
pub(crate) fn invalid_matches_pattern(expr: &str) -> Option<String> {
    let mut rest = expr;
    while let Some(at) = rest.find("matches") {
        let before = rest[..at].chars().next_back();
        let after_word = &rest[at + "matches".len()..];
        rest = after_word;
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
            || after_word
                .chars()
                .next()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let lit = after_word.trim_start();
        let Some(quote) = lit.chars().next().filter(|c| matches!(c, '"' | '\'' | '`')) else {
            continue;
        };
        let mut pattern = String::new();
        let mut chars = lit[1..].chars();
        let mut closed = false;
        while let Some(c) = chars.next() {
            match c {
                c if c == quote => {
                    closed = true;
                    break;
                }
                '\\' if quote != '`' => match chars.next() {
                    Some('n') => pattern.push('\n'),
                    Some('t') => pattern.push('\t'),
                    Some(c @ ('\\' | '"' | '\'')) => pattern.push(c),
                    Some(c) => {
                        pattern.push('\\');
                        pattern.push(c);
                    }
                    None => break,
                },
                c => pattern.push(c),
            }
        }
        if closed && regex::Regex::new(&pattern).is_err() {
            return Some(pattern);
        }
    }
    None
}

#[cfg(test)]
mod matches_pattern_tests {
    use super::invalid_matches_pattern;

    #[test]
    fn an_invalid_pattern_after_matches_is_found() {
        assert_eq!(
            invalid_matches_pattern(r#"states.a.Output matches "[(""#),
            Some("[(".to_owned())
        );
        assert_eq!(
            invalid_matches_pattern(r#"states.a.Output matches '^a\\d+$' && x matches `(`"#),
            Some("(".to_owned())
        );
        assert_eq!(
            invalid_matches_pattern(r#"states.a.Output matches "^ok\\s*$""#),
            None
        );
        assert_eq!(invalid_matches_pattern(r#"int(states.a.Output) > 2"#), None);
        assert_eq!(invalid_matches_pattern(r#"inputs.rematches == "[(""#), None);
    }
}

#[cfg(test)]
mod retry_reason_tests {
    use super::retry_reason;
    use awf_domain::AwfError;
    use awf_domain::ErrorCode;

    /// A process's exit code, a timeout, else the error's first line without `step S: `.
    #[test]
    fn a_retry_says_why_the_attempt_failed() {
        let failed = AwfError::new(ErrorCode::ExecutionCommandFailed, "step a: exit code 1");
        assert_eq!(retry_reason(Some(1), Some(&failed)), "exit 1");
        let timeout = AwfError::new(ErrorCode::ExecutionCommandTimeout, "step a: timed out");
        assert_eq!(retry_reason(Some(-1), Some(&timeout)), "timed out");
        let agent = AwfError::new(
            ErrorCode::ExecutionAgentFailed,
            "step review: claude exited with code 2\nmore",
        );
        assert_eq!(
            retry_reason(None, Some(&agent)),
            "claude exited with code 2"
        );
        let long = AwfError::new(ErrorCode::ExecutionAgentFailed, "x".repeat(100));
        assert_eq!(
            retry_reason(None, Some(&long)),
            format!("{}…", "x".repeat(80))
        );
        assert_eq!(retry_reason(None, None), "failed");
    }
}

#[cfg(test)]
mod head_and_tail_tests {
    use super::head_and_tail;

    #[test]
    fn a_long_stderr_keeps_its_first_line_and_its_last_whole_lines() {
        assert_eq!(head_and_tail("short\nerr", 20), "short\nerr");
        let s = format!("FIRST\n{}", "0123456789\n".repeat(10));
        // 20 bytes: `FIRST`, then the last whole line in the other 15 bytes.
        assert_eq!(
            head_and_tail(s.trim(), 20),
            "FIRST\n… 100 bytes cut …\n0123456789"
        );
        // A first line longer than a quarter is cut (on a char boundary), and says so.
        let long = format!("{}\nend", "é".repeat(20));
        assert_eq!(head_and_tail(&long, 20), "éé…\n… 37 bytes cut …\nend");
    }
}
