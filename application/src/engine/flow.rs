//! Parallel blocks and loops. Source: spec/workflow.md §3.4 and §3.5.

use std::sync::Arc;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::event::LogLevel;
use awf_domain::run::StepState;
use awf_domain::run::StepStatus;
use awf_domain::scope::LoopFrame;
use awf_domain::workflow::DEFAULT_MAX_ITERATIONS;
use awf_domain::workflow::LoopOver;
use awf_domain::workflow::LoopStep;
use awf_domain::workflow::MAX_ITERATIONS_LIMIT;
use awf_domain::workflow::MaxIterations;
use awf_domain::workflow::ParallelStep;
use awf_domain::workflow::ParallelStrategy;
use awf_domain::workflow::State;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::KeptBranches;
use super::Run;
use super::lock;
use super::step::At;
use super::step::Body;
use super::step::cancelled;

impl Run {
    /// Runs the branches of a parallel block under its strategy.
    pub(crate) async fn run_parallel(
        &self,
        state: &State,
        p: &ParallelStep,
        at: At<'_>,
        token: &CancellationToken,
    ) -> Result<Body, AwfError> {
        let mut st = StepState::running(&state.name, self.svc.clock.now());
        st.attempts = 1;
        let group = token.child_token();
        let branches = p.branches.len().max(1);
        let limit = if p.max_concurrent == 0 {
            branches
        } else {
            p.max_concurrent.min(branches)
        };
        let sem = Arc::new(Semaphore::new(limit));
        let kept = self.kept_branches(&state.name, p, at);
        let mut running = FuturesUnordered::new();
        for branch in p.branches.iter().filter(|b| !kept.contains(b)) {
            let sem = Arc::clone(&sem);
            let group = &group;
            running.push(async move {
                let permit = tokio::select! {
                    p = sem.acquire_owned() => p.ok(),
                    () = group.cancelled() => None,
                };
                let Some(_permit) = permit else {
                    return (branch.as_str(), None);
                };
                if group.is_cancelled() {
                    return (branch.as_str(), None);
                }
                let r = self.exec_state(branch, at.frame, at.prefix, group).await;
                (branch.as_str(), Some(r))
            });
        }
        let mut first_failure: Option<AwfError> = None;
        // The branch of `first_failure` and its own error, for `any_succeed`'s message.
        let mut first_branch: Option<(String, String)> = None;
        let own = |branch: &str, message: &str| {
            message
                .strip_prefix(&format!("step {branch}: "))
                .unwrap_or(message)
                .to_owned()
        };
        let mut any_ok = !kept.is_empty();
        if any_ok && p.strategy == ParallelStrategy::AnySucceed {
            group.cancel();
        }
        let mut failures = 0usize;
        while let Some((branch, outcome)) = running.next().await {
            let ok = match outcome {
                None => {
                    // Never started: the block ended first. Recorded with its
                    // `StepFinished`, as every other state is, so that the state file (and
                    // `awf status`, the HTTP API, `awf resume`) knows it was skipped (new
                    // user: only the live result had it; a resumed `{{.states.B.Status}}`
                    // failed as "has not run").
                    let mut skipped = StepState::running(branch, self.svc.clock.now());
                    skipped.status = StepStatus::Skipped;
                    skipped.completed_at = Some(self.svc.clock.now());
                    let kind = self.wf.state(branch).map_or("step", |s| s.kind.kind_name());
                    self.record(
                        skipped,
                        kind,
                        &format!("{}{branch}", at.prefix),
                        at.iteration(),
                    );
                    continue;
                }
                Some(Ok(exit)) => exit.succeeded,
                Some(Err(e)) => {
                    if e.code() != ErrorCode::ExecutionRunCancelled && first_failure.is_none() {
                        first_branch = Some((branch.to_owned(), own(branch, e.message())));
                        first_failure = Some(e);
                    }
                    false
                }
            };
            if ok {
                any_ok = true;
                if p.strategy == ParallelStrategy::AnySucceed {
                    group.cancel();
                }
                continue;
            }
            failures += 1;
            let cancelled_branch = lock(&self.states)
                .get(branch)
                .is_some_and(|s| s.status == StepStatus::Cancelled);
            if first_failure.is_none() && !cancelled_branch {
                let why = lock(&self.states)
                    .get(branch)
                    .map(|s| {
                        s.error
                            .clone()
                            .unwrap_or_else(|| format!("exit code {}", s.exit_code.unwrap_or(-1)))
                    })
                    .unwrap_or_else(|| "unknown error".to_owned());
                first_branch = Some((branch.to_owned(), own(branch, &why)));
                first_failure = Some(AwfError::new(
                    ErrorCode::ExecutionParallelPartialFailure,
                    format!(
                        "parallel step {}: branch {branch} failed: {why}",
                        state.name
                    ),
                ));
            }
            if p.strategy == ParallelStrategy::AllSucceed {
                group.cancel();
            }
        }
        st.completed_at = Some(self.svc.clock.now());
        if token.is_cancelled() && self.cancel.token.is_cancelled() {
            st.status = StepStatus::Cancelled;
            return Ok(Body {
                state: st,
                failure: Some(cancelled(&state.name)),
                early_exit: None,
            });
        }
        let failed = match p.strategy {
            ParallelStrategy::AllSucceed => failures > 0 || first_failure.is_some(),
            ParallelStrategy::AnySucceed => !any_ok,
            ParallelStrategy::BestEffort => false,
        };
        if !failed {
            st.status = StepStatus::Completed;
            return Ok(Body {
                state: st,
                failure: None,
                early_exit: None,
            });
        }
        let err = match (p.strategy, first_failure) {
            (ParallelStrategy::AnySucceed, _) if p.branches.is_empty() => AwfError::new(
                ErrorCode::ExecutionParallelPartialFailure,
                format!("parallel step {}: no branches", state.name),
            ),
            // Said once: `first: branch b: <its error>` (new user: `first: parallel step p:
            // branch b failed` repeated the block's name and the failure).
            (ParallelStrategy::AnySucceed, Some(e)) => AwfError::new(
                ErrorCode::ExecutionParallelPartialFailure,
                match &first_branch {
                    Some((branch, why)) => format!(
                        "parallel step {}: all branches failed; first: branch {branch}: {why}",
                        state.name
                    ),
                    None => format!(
                        "parallel step {}: all branches failed; first: {}",
                        state.name,
                        e.message()
                    ),
                },
            ),
            (_, Some(e)) => e,
            (_, None) => AwfError::new(
                ErrorCode::ExecutionParallelPartialFailure,
                format!("parallel step {}: all branches failed", state.name),
            ),
        };
        st.status = StepStatus::Failed;
        st.error = Some(err.message().to_owned());
        Ok(Body {
            state: st,
            failure: Some(err),
            early_exit: None,
        })
    }

    /// Branches of a resumed parallel block that completed in the interrupted attempt of it:
    /// they are kept, not run again. Empty unless `block` is one the resumed run stopped in
    /// (see `Run::resume_blocks`: at top level, or in the iteration of a loop it goes on in),
    /// and only on the first run of it.
    fn kept_branches<'p>(&self, block: &str, p: &'p ParallelStep, at: At<'_>) -> Vec<&'p String> {
        let Some(which) = lock(&self.resume_blocks).remove(block) else {
            return Vec::new();
        };
        let states = lock(&self.states);
        let kept: Vec<&String> = p
            .branches
            .iter()
            .filter(|b| {
                states.get(b.as_str()).is_some_and(|s| {
                    s.status == StepStatus::Completed
                        && match (&which, s.started_at) {
                            (KeptBranches::Named(names), _) => names.contains(b),
                            (KeptBranches::Since(None), _) => true,
                            (KeptBranches::Since(Some(since)), Some(started)) => started >= *since,
                            (KeptBranches::Since(Some(_)), None) => false,
                        }
                })
            })
            .collect();
        drop(states);
        for b in &kept {
            self.log(
                Some(b.as_str()),
                LogLevel::Info,
                &format!("branch {b} of {block} completed before the resume; kept"),
                &format!("{}{b}", at.prefix),
                at.iteration(),
            );
        }
        kept
    }

    /// Runs a for_each or while loop.
    pub(crate) async fn run_loop(
        &self,
        state: &State,
        l: &LoopStep,
        at: At<'_>,
        token: &CancellationToken,
    ) -> Result<Body, AwfError> {
        let name = state.name.as_str();
        let mut st = StepState::running(name, self.svc.clock.now());
        st.attempts = 1;
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
        let max = match self.max_iterations(&l.max_iterations, &l.over, at.frame) {
            Ok(m) => m,
            Err(e) => return fail(st, e.map_message(|m| format!("step {name}: {m}"))),
        };
        // The items the loop can run (at most `max`), and how many there are.
        let (items, total): (Option<Vec<Value>>, usize) = match &l.over {
            LoopOver::Items(text) => match self.resolve_items(text, at.frame, max as usize) {
                Ok((v, n)) => (Some(v), n),
                Err(e) => return fail(st, e.map_message(|m| format!("step {name}: {m}"))),
            },
            LoopOver::While(_) => (None, 0),
        };
        let length = items.as_ref().map(|v| v.len().min(max as usize));
        if items.is_some() && total > max as usize {
            self.log(
                Some(name),
                LogLevel::Warn,
                &format!(
                    "for_each {name} has {total} items but max_iterations is {max}: the last {} are skipped",
                    total - max as usize
                ),
                &format!("{}{name}", at.prefix),
                at.iteration(),
            );
        }
        // A resumed run continues a top-level loop, and the loops nested in its resumed
        // iteration, at the iteration each stopped in.
        let resumed = {
            let mut r = lock(&self.resume_loop);
            match r.front() {
                Some(l) if l.state == state.name => r.pop_front(),
                _ => None,
            }
        };
        let first = resumed.as_ref().map_or(0, |r| r.iteration);
        // In the resumed iteration: the body step to go on at, and whether it had completed
        // (then it is routed from its record, not run again).
        let mut resume_at_step: Option<(usize, bool)> = resumed.and_then(|r| {
            let step = r.step?;
            let pos = l.body.iter().position(|b| *b == step)?;
            // A parallel block it stopped in keeps the branches that completed there.
            if !r.step_completed && !r.branches_completed.is_empty() {
                lock(&self.resume_blocks).insert(step, KeptBranches::Named(r.branches_completed));
            }
            Some((pos, r.step_completed))
        });
        let mut iterations = first;
        let mut early_exit = None;
        let mut hit_max = false;
        'outer: for index in first.. {
            if token.is_cancelled() {
                return Ok(Body::cancelled(st, name, self.svc.clock.now()));
            }
            if index >= max as usize {
                hit_max = true;
                break;
            }
            let (item, len) = match (&items, length) {
                (Some(v), Some(n)) => {
                    if index >= n {
                        break;
                    }
                    (v[index].clone(), i64::try_from(n).unwrap_or(i64::MAX))
                }
                _ => (Value::Null, -1),
            };
            let frame = LoopFrame {
                item,
                index,
                first: index == 0,
                last: len >= 0 && i64::try_from(index).unwrap_or(i64::MAX) == len - 1,
                length: len,
                parent: at.frame.map(|f| Box::new(f.clone())),
            };
            if let LoopOver::While(cond) = &l.over {
                match self.eval_bool(cond, Some(&frame)) {
                    // Cancelled while it was evaluated: whatever it answered (trial h4).
                    _ if token.is_cancelled() => {
                        return Ok(Body::cancelled(st, name, self.svc.clock.now()));
                    }
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => {
                        return fail(
                            st,
                            AwfError::new(
                                ErrorCode::ExecutionLoopFailed,
                                format!("step {name}: evaluate condition: {e}"),
                            ),
                        );
                    }
                }
            }
            iterations += 1;
            let prefix = format!("{}loop:{index}/", at.prefix);
            let (mut pos, mut route_first) = resume_at_step.take().unwrap_or((0, false));
            let mut iteration_error: Option<AwfError> = None;
            let mut guard = 0usize;
            while pos < l.body.len() {
                guard += 1;
                if guard > l.body.len() * 1000 + 1000 {
                    iteration_error = Some(AwfError::new(
                        ErrorCode::ExecutionLoopFailed,
                        format!(
                            "step {name}: body steps keep jumping between each other; stopping"
                        ),
                    ));
                    break;
                }
                let body_step = l.body[pos].as_str();
                // A terminal in the body ends the loop there, and the run with its status: it
                // has nothing to run (breaker: it was taken for a jump to itself, and the loop
                // failed with "body steps keep jumping between each other").
                if self
                    .wf
                    .states
                    .get(body_step)
                    .is_some_and(|s| matches!(s.kind, awf_domain::workflow::StateKind::Terminal(_)))
                {
                    early_exit = Some(body_step.to_owned());
                    break 'outer;
                }
                let recorded = if std::mem::take(&mut route_first) {
                    self.route_recorded_body(body_step, &frame, &prefix, index)
                } else {
                    None
                };
                let outcome = match recorded {
                    Some(r) => r,
                    None => {
                        self.exec_state(body_step, Some(&frame), &prefix, token)
                            .await
                    }
                };
                let exit = match outcome {
                    Ok(x) => x,
                    Err(e) => {
                        if e.code() == ErrorCode::ExecutionRunCancelled {
                            st.status = StepStatus::Cancelled;
                            st.completed_at = Some(self.svc.clock.now());
                            return Ok(Body {
                                state: st,
                                failure: Some(e),
                                early_exit: None,
                            });
                        }
                        iteration_error = Some(e);
                        break;
                    }
                };
                let next = exit.next.as_deref().unwrap_or("");
                // A step with continue_on_error goes on wherever its routes lead after a
                // failure (its success route, or a transition its failure matched), as in
                // AWF (Go).
                let goes_on = self
                    .wf
                    .states
                    .get(body_step)
                    .is_some_and(|s| s.continue_on_error);
                if let Some(f) = exit.failure
                    && next != name
                    && !goes_on
                {
                    // A failed body step only continues the loop by routing back to the loop
                    // itself; any other route (or none) fails the iteration.
                    // The body step's hints stay with the loop's failure (a template's hint
                    // was shown nowhere).
                    iteration_error = Some(f.hints().iter().fold(
                        AwfError::new(
                            ErrorCode::ExecutionLoopFailed,
                            format!("step {name}: body step {body_step} failed: {}", f.message()),
                        ),
                        |e, h| e.with_hint(h.clone()),
                    ));
                    break;
                }
                if next.is_empty() || next == name {
                    pos += 1;
                } else if let Some(i) = l.body.iter().position(|b| b == next) {
                    pos = i;
                } else if self.wf.states.contains_key(next) {
                    early_exit = Some(next.to_owned());
                    break 'outer;
                } else {
                    self.log(
                        Some(body_step),
                        LogLevel::Warn,
                        &format!("unknown next state {next}; continuing"),
                        &prefix,
                        Some(index),
                    );
                    pos += 1;
                }
            }
            if let Some(bw) = &l.break_when {
                match self.eval_bool(bw, Some(&frame)) {
                    // Cancelled while it was evaluated: whatever it answered (trial h4).
                    _ if token.is_cancelled() => {
                        return Ok(Body::cancelled(st, name, self.svc.clock.now()));
                    }
                    // Checked before the iteration's error, as in AWF (Go): a break_when
                    // that holds after a failed iteration ends the loop normally (breaker:
                    // `break_when: states.b1.ExitCode != 0` failed the loop instead).
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(e) => self.log(
                        Some(name),
                        LogLevel::Warn,
                        &format!("break_when could not be evaluated: {e}"),
                        &format!("{}{name}", at.prefix),
                        Some(index),
                    ),
                }
            }
            if let Some(e) = iteration_error {
                return fail(st, e);
            }
        }
        if hit_max && matches!(l.over, LoopOver::While(_)) {
            self.log(
                Some(name),
                LogLevel::Warn,
                &format!("loop {name} stopped at max_iterations ({max})"),
                &format!("{}{name}", at.prefix),
                None,
            );
        }
        st.status = StepStatus::Completed;
        st.completed_at = Some(self.svc.clock.now());
        st.output = format!("completed {iterations} iterations").into();
        Ok(Body {
            state: st,
            failure: None,
            early_exit,
        })
    }

    /// The exit of body step `name`, completed in the iteration being resumed before the run
    /// stopped: its routes evaluated on its record (announced as a log line). `None` when it
    /// is not recorded as completed (it runs again).
    fn route_recorded_body(
        &self,
        name: &str,
        frame: &LoopFrame,
        prefix: &str,
        index: usize,
    ) -> Option<Result<crate::engine::step::StepExit, AwfError>> {
        let state = self.wf.state(name)?;
        let completed = lock(&self.states)
            .get(name)
            .is_some_and(|s| s.status == StepStatus::Completed);
        if !completed {
            return None;
        }
        let exit = self.route(state, true, None, None, Some(frame));
        if exit.is_ok() {
            self.log(
                Some(name),
                LogLevel::Info,
                &format!(
                    "{name} completed in iteration {index} before the resume; going on from it"
                ),
                &format!("{prefix}{name}"),
                Some(index),
            );
        }
        Some(exit)
    }

    /// Resolves `max_iterations`: static, or a template giving an integer or arithmetic.
    fn max_iterations(
        &self,
        m: &MaxIterations,
        over: &LoopOver,
        frame: Option<&LoopFrame>,
    ) -> Result<u32, AwfError> {
        let value = match m {
            // Not given: a for_each runs all its items (up to the hard limit); a while loop
            // stops after the default.
            MaxIterations::Static(0) => {
                return Ok(match over {
                    LoopOver::Items(_) => MAX_ITERATIONS_LIMIT,
                    LoopOver::While(_) => DEFAULT_MAX_ITERATIONS,
                });
            }
            MaxIterations::Static(n) => i64::from(*n),
            MaxIterations::Dynamic(t) => {
                let text = self.render(t, frame, None).map_err(|e| {
                    AwfError::new(
                        ErrorCode::ExecutionTemplateFailed,
                        format!("resolve max_iterations: {e}"),
                    )
                })?;
                let text = text.trim();
                match text.parse::<i64>() {
                    Ok(n) => n,
                    // Arithmetic only with an operator, as in AWF (Go): `2.7` is no count
                    // (breaker: it ran 2 iterations).
                    Err(_) if !text.contains(['+', '-', '*', '/', '%']) => {
                        return Err(AwfError::new(
                            ErrorCode::ExecutionLoopFailed,
                            format!("resolve max_iterations: \"{text}\" is not an integer"),
                        )
                        .with_hint("max_iterations takes a whole number from 1 to 10000, or arithmetic on such numbers (`{{.inputs.n}} * 2`)"));
                    }
                    Err(_) => super::off_workers(|| self.svc.expressions.eval_int(text)).map_err(|e| {
                        AwfError::new(
                            ErrorCode::ExecutionLoopFailed,
                            format!("resolve max_iterations: \"{text}\" is not an integer or arithmetic: {e}"),
                        )
                    })?,
                }
            }
        };
        if value < 1 || value > i64::from(MAX_ITERATIONS_LIMIT) {
            return Err(AwfError::new(
                ErrorCode::ExecutionLoopFailed,
                format!("max_iterations must be between 1 and {MAX_ITERATIONS_LIMIT}, got {value}"),
            ));
        }
        Ok(u32::try_from(value).unwrap_or(MAX_ITERATIONS_LIMIT))
    }

    /// Resolves for_each items: a single reference to a list value (`{{.inputs.targets}}` for
    /// an input of `type: array`, `{{.loop.Item}}`, `{{.states.x.JSON.list}}`) gives that
    /// list's elements; otherwise interpolate, then a JSON array, else a comma-separated list.
    /// Only the first `max` items are kept (the loop runs no more); the second value is how
    /// many there are.
    ///
    /// # Errors
    /// `EXECUTION.TEMPLATE.FAILED` when the template does not render;
    /// `EXECUTION.LOOP.FAILED` when the text starts with `[` but is no JSON array.
    fn resolve_items(
        &self,
        text: &str,
        frame: Option<&LoopFrame>,
        max: usize,
    ) -> Result<(Vec<Value>, usize), AwfError> {
        if let Some(path) = single_reference(text)
            && let Some(Value::Array(mut list)) = self.lookup_value(&path, frame)
        {
            let total = list.len();
            list.truncate(max);
            return Ok((list, total));
        }
        let rendered = self.render(text, frame, None).map_err(|e| {
            AwfError::new(
                ErrorCode::ExecutionTemplateFailed,
                format!("resolve items: {e}"),
            )
        })?;
        awf_domain::workflow::loop_items_at_most(&rendered, max).map_err(|e| {
            AwfError::new(
                ErrorCode::ExecutionLoopFailed,
                format!(
                    "resolve items: {:?} starts with `[` but is not a JSON array: {e}",
                    excerpt(&self.mask(rendered.trim()))
                ),
            )
            .with_hint(awf_domain::workflow::LOOP_ITEMS_HINT)
        })
    }
}

/// At most the first 80 characters of `text`, with `…` when it is longer (for a message).
fn excerpt(text: &str) -> String {
    const MAX: usize = 80;
    match text.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// The path of a template that is one bare field reference and nothing else
/// (`{{.inputs.targets}}`, `{{ inputs.targets }}`, `{{- .loop.Item -}}`): its dot-separated
/// segments, without the leading dot. `None` for anything else (text around it, pipes,
/// functions, several actions).
fn single_reference(text: &str) -> Option<Vec<String>> {
    let inner = text.trim().strip_prefix("{{")?.strip_suffix("}}")?;
    let inner = inner.strip_prefix('-').unwrap_or(inner);
    let inner = inner.strip_suffix('-').unwrap_or(inner).trim();
    let path = inner.strip_prefix('.').unwrap_or(inner);
    let segments: Vec<String> = path.split('.').map(str::to_owned).collect();
    let plain = |s: &String| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    (segments.len() >= 2 && segments.iter().all(plain)).then_some(segments)
}

/// Follows `rest` through JSON objects (keys as written, then case-insensitively).
fn descend(mut v: Value, rest: &[String]) -> Option<Value> {
    for key in rest {
        let Value::Object(mut map) = v else {
            return None;
        };
        let found = match map.remove(key.as_str()) {
            Some(x) => x,
            None => {
                let k = map.keys().find(|k| k.eq_ignore_ascii_case(key))?.clone();
                map.remove(&k)?
            }
        };
        v = found;
    }
    Some(v)
}

impl Run {
    /// The value a bare reference names, for the namespaces that can hold lists: `inputs`,
    /// `loop.Item`, `states.<name>.JSON` (each with or without the leading dot, any case).
    fn lookup_value(&self, path: &[String], frame: Option<&LoopFrame>) -> Option<Value> {
        let (ns, rest) = path.split_first()?;
        match ns.to_ascii_lowercase().as_str() {
            "inputs" => {
                let (name, rest) = rest.split_first()?;
                let v = lock(&self.inputs).get(name.as_str()).cloned()?;
                descend(v, rest)
            }
            "loop" => {
                let (field, rest) = rest.split_first()?;
                if !field.eq_ignore_ascii_case("item") {
                    return None;
                }
                descend(frame?.item.clone(), rest)
            }
            "states" => {
                let (name, rest) = rest.split_first()?;
                let (field, rest) = rest.split_first()?;
                if !field.eq_ignore_ascii_case("json") {
                    return None;
                }
                let v = lock(&self.states).get(name.as_str())?.json.clone()?;
                descend(v, rest)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(text: &str) -> Option<Vec<String>> {
        single_reference(text)
    }

    #[test]
    fn a_bare_reference_is_recognised_with_or_without_dot_and_trim_markers() {
        let want = Some(vec!["inputs".to_owned(), "targets".to_owned()]);
        assert_eq!(path("{{.inputs.targets}}"), want);
        assert_eq!(path("  {{ inputs.targets }} "), want);
        assert_eq!(path("{{- .inputs.targets -}}"), want);
        assert_eq!(
            path("{{.states.build.JSON.files}}"),
            Some(vec![
                "states".to_owned(),
                "build".to_owned(),
                "JSON".to_owned(),
                "files".to_owned()
            ])
        );
    }

    #[test]
    fn anything_more_than_a_bare_reference_is_rendered_as_text() {
        for text in [
            "{{.inputs.targets | json}}",
            "x{{.inputs.targets}}",
            "{{.inputs.a}},{{.inputs.b}}",
            "{{join .inputs.targets \",\"}}",
            "{{.inputs}}",
            "{{.}}",
            "[\"a\", \"b\"]",
        ] {
            assert_eq!(path(text), None, "{text}");
        }
    }

    #[test]
    fn descend_follows_object_keys_in_any_case() {
        let v = serde_json::json!({"Files": {"list": [1, 2]}});
        assert_eq!(
            descend(v.clone(), &["files".to_owned(), "LIST".to_owned()]),
            Some(serde_json::json!([1, 2]))
        );
        assert_eq!(descend(v, &["nope".to_owned()]), None);
    }
}
