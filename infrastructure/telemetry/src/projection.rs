//! The span projection: turns the run-event stream into `tracing` spans, which the
//! OpenTelemetry layer installed by [`crate::init_logging`] exports.
//!
//! Span tree (names are static, attributes per the catalogue below):
//!
//! ```text
//! workflow.run                       workflow.name, workflow.identifier, execution_id,
//! │                                  parent_execution_id, user, workflow.status,
//! │                                  workflow.exit_code, workflow.terminal, error.code
//! ├── workflow.step                  step.name, step.type, step.path, step.status,
//! │   │                              step.exit_code, step.attempts, step.error,
//! │   │                              loop.iterations (loops), agent.tokens_used (agents)
//! │   ├── workflow.step              (parallel branches under their parallel step)
//! │   ├── workflow.loop.iteration    loop.name, iteration.index (0-based)
//! │   │   └── workflow.step          (body steps of that iteration)
//! │   ├── tool.call                  tool.name, tool.call_id, tool.is_error
//! │   └── workflow.run               (a call_workflow child run, under its calling step)
//! ```
//!
//! Span events: `step.retry` (`retry.attempt`, `retry.delay_ms`), `log` (`log.level`,
//! `log.message`), `input.required` (a conversation turn), `approval.required` (on the step
//! span, `input.request_id`), `breakpoint` (on the run span, `step.name`),
//! `interaction.resolved` (`input.request_id`, `interaction.outcome`). Failed
//! steps and runs get span status ERROR with the (already masked) error text. Text in events
//! arrives masked by the engine; this module adds
//! no unmasked text.
//!
//! Parents are found from event paths: a step's path is `<prefix><name>` where the prefix is
//! `loop:<i>/` per enclosing loop iteration. A step whose prefix equals that of an open
//! `parallel` step is a branch of the most recently started one; otherwise a `loop:<i>/`
//! prefix puts it in iteration `i` of the most recently started open loop at the outer
//! prefix. Paths do not name loops, so two loops running side by side as parallel branches
//! cannot be told apart (their body steps go under the later one).
//!
//! Source: spec/http-ops.md §2.2 (catalogue; namespaced attribute names as documented, see
//! docs/compatibility.md for the Go code's names), design/decisions.md (events are canonical).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;

use awf_domain::event::EventEnvelope;
use awf_domain::event::EventPublisher;
use awf_domain::event::LogLevel;
use awf_domain::event::RunEvent;
use awf_domain::run::RunId;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use awf_domain::run::StepState;
use awf_domain::run::StepStatus;
use tracing::Level;
use tracing::Span;
use tracing::field::Empty;
use tracing::span::Id;

/// `tracing` target of every span and event of the projection. The log layer drops it; the
/// OpenTelemetry layer exports only it.
pub const TARGET: &str = "awf_telemetry::projection";

/// Creates a projection. Wrap it in an `Arc` and add it to the engine's sinks; it costs one
/// atomic load and an interest check per event when nothing exports spans.
pub fn span_projection() -> SpanProjection {
    let user = ["USER", "LOGNAME"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "unknown".to_owned());
    SpanProjection {
        state: Mutex::new(State::default()),
        open_runs: AtomicUsize::new(0),
        user,
    }
}

/// [`EventPublisher`] that opens a span on each `*Started` event and closes it on the matching
/// `*Finished` event (see the module docs for the tree and attributes).
#[derive(Debug)]
pub struct SpanProjection {
    state: Mutex<State>,
    /// Runs with an open span; lets `emit` skip the lock when nothing is open or wanted.
    open_runs: AtomicUsize,
    /// `user` attribute: `$USER`, `$LOGNAME`, else `unknown`.
    user: String,
}

#[derive(Debug, Default)]
struct State {
    runs: HashMap<RunId, RunSpans>,
    /// Child run id → (calling run, calling step's span), from `ChildRunStarted`.
    child_parents: HashMap<RunId, (RunId, Span)>,
}

#[derive(Debug)]
struct RunSpans {
    span: Span,
    /// Open steps by event path.
    steps: HashMap<String, OpenStep>,
    /// Open tool calls by (step path, call id).
    tools: HashMap<(String, String), Span>,
    /// Start counter, to find the most recently started container.
    started: u64,
}

#[derive(Debug)]
struct OpenStep {
    span: Span,
    name: String,
    kind: String,
    /// Path prefix (`""`, `loop:0/`, …).
    prefix: String,
    order: u64,
    /// Open iteration span of a loop step.
    iteration: Option<(usize, Span)>,
    iterations: u64,
}

impl EventPublisher for SpanProjection {
    /// Resolves at once: its spans are made inside `emit`. (Without it the run service flushed it on a
    /// blocking thread, one started at the end of every run: issue 9, per-run cost.)
    fn flushed(&self) -> Option<awf_domain::event::Settle> {
        Some(Box::pin(std::future::ready(())))
    }

    /// Streaming chunks never make spans, and nothing does while no span is open and no
    /// exporter takes them.
    fn interested(&self, env: &EventEnvelope) -> bool {
        !matches!(
            env.event,
            RunEvent::OutputChunk { .. }
                | RunEvent::AgentMessageChunk { .. }
                | RunEvent::AgentThoughtChunk { .. }
        ) && (self.open_runs.load(Ordering::Relaxed) > 0
            || tracing::span_enabled!(target: TARGET, Level::INFO))
    }

    fn emit(&self, env: EventEnvelope) {
        if !self.interested(&env) {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.apply(&mut state, env);
    }
}

impl SpanProjection {
    fn apply(&self, state: &mut State, env: EventEnvelope) {
        let EventEnvelope {
            run_id,
            parent_run_id,
            path,
            event,
            ..
        } = env;
        match event {
            RunEvent::RunStarted {
                workflow,
                identifier,
                ..
            } => {
                let parent: Option<Id> = match state.child_parents.remove(&run_id) {
                    Some((_, step_span)) => step_span.id(),
                    None => parent_run_id
                        .as_ref()
                        .and_then(|p| state.runs.get(p))
                        .and_then(|r| r.span.id()),
                };
                let parent_exec = parent_run_id.as_ref().map(|p| p.0.as_str());
                let span = tracing::span!(
                    target: TARGET,
                    parent: parent,
                    Level::INFO,
                    "workflow.run",
                    workflow.name = %workflow,
                    workflow.identifier = %identifier,
                    execution_id = %run_id,
                    parent_execution_id = parent_exec,
                    user = %self.user,
                    workflow.status = Empty,
                    workflow.exit_code = Empty,
                    workflow.terminal = Empty,
                    error.code = Empty,
                    otel.status_code = Empty,
                    otel.status_description = Empty,
                );
                let fresh = RunSpans {
                    span,
                    steps: HashMap::new(),
                    tools: HashMap::new(),
                    started: 0,
                };
                if state.runs.insert(run_id, fresh).is_none() {
                    self.open_runs.fetch_add(1, Ordering::Relaxed);
                }
            }
            RunEvent::RunFinished { result } => {
                if let Some(run) = state.runs.remove(&run_id) {
                    self.open_runs.fetch_sub(1, Ordering::Relaxed);
                    finish_run(run, &result);
                }
                state
                    .child_parents
                    .retain(|_, (parent, _)| *parent != run_id);
            }
            RunEvent::StepStarted { step, kind, .. } => {
                let Some(run) = state.runs.get_mut(&run_id) else {
                    return;
                };
                start_step(run, path, &step, kind);
            }
            RunEvent::StepFinished { state: st, .. } => {
                let Some(run) = state.runs.get_mut(&run_id) else {
                    return;
                };
                if let Some(open) = run.steps.remove(&path) {
                    run.tools.retain(|(p, _), _| *p != path);
                    finish_step(open, &st);
                }
            }
            RunEvent::StepRetrying {
                attempt, delay_ms, ..
            } => {
                if let Some(span) = step_span(state, &run_id, &path) {
                    tracing::event!(
                        target: TARGET,
                        parent: span,
                        Level::INFO,
                        retry.attempt = i64::from(attempt),
                        retry.delay_ms = int(delay_ms),
                        "step.retry"
                    );
                }
            }
            RunEvent::Log { level, message, .. } => {
                let span = step_span(state, &run_id, &path)
                    .or_else(|| state.runs.get(&run_id).map(|r| &r.span));
                if let Some(span) = span {
                    let level = match level {
                        LogLevel::Info => "info",
                        LogLevel::Warn => "warn",
                    };
                    tracing::event!(
                        target: TARGET,
                        parent: span,
                        Level::INFO,
                        log.level = level,
                        log.message = %message,
                        "log"
                    );
                }
            }
            RunEvent::InteractionRequired { request } => {
                use awf_domain::interaction::RequestKind;
                match &request.kind {
                    RequestKind::Breakpoint { .. } => {
                        // Asked before the step starts: an event on the run span.
                        if let Some(run) = state.runs.get(&run_id) {
                            tracing::event!(
                                target: TARGET,
                                parent: &run.span,
                                Level::INFO,
                                step.name = %request.step.as_deref().unwrap_or(""),
                                "breakpoint"
                            );
                        }
                    }
                    RequestKind::ConversationTurn { .. } => {
                        if let Some(span) = step_span(state, &run_id, &path) {
                            tracing::event!(
                                target: TARGET,
                                parent: span,
                                Level::INFO,
                                input.request_id = %request.request_id,
                                "input.required"
                            );
                        }
                    }
                    RequestKind::Approval { .. } => {
                        if let Some(span) = step_span(state, &run_id, &path) {
                            tracing::event!(
                                target: TARGET,
                                parent: span,
                                Level::INFO,
                                input.request_id = %request.request_id,
                                "approval.required"
                            );
                        }
                    }
                    // Asked before the run starts: there is no span yet.
                    RequestKind::MissingInput { .. } => {}
                }
            }
            RunEvent::InteractionResolved {
                request_id,
                resolution,
            } => {
                let outcome = match resolution {
                    awf_domain::interaction::Resolution::Answered(_) => "answered",
                    awf_domain::interaction::Resolution::TimedOut => "timed_out",
                    awf_domain::interaction::Resolution::Cancelled => "cancelled",
                };
                let span = step_span(state, &run_id, &path)
                    .or_else(|| state.runs.get(&run_id).map(|r| &r.span));
                if let Some(span) = span {
                    tracing::event!(
                        target: TARGET,
                        parent: span,
                        Level::INFO,
                        input.request_id = %request_id,
                        interaction.outcome = outcome,
                        "interaction.resolved"
                    );
                }
            }
            RunEvent::ToolCall { id, name, .. } => {
                let Some(run) = state.runs.get_mut(&run_id) else {
                    return;
                };
                let Some(parent) = run.steps.get(&path).and_then(|s| s.span.id()) else {
                    return;
                };
                let span = tracing::span!(
                    target: TARGET,
                    parent: Some(parent),
                    Level::INFO,
                    "tool.call",
                    tool.name = %name,
                    tool.call_id = %id,
                    tool.is_error = Empty,
                    otel.status_code = Empty,
                );
                run.tools.insert((path, id), span);
            }
            RunEvent::ToolCallResult { id, is_error, .. } => {
                let Some(run) = state.runs.get_mut(&run_id) else {
                    return;
                };
                if let Some(span) = run.tools.remove(&(path, id)) {
                    span.record("tool.is_error", is_error);
                    if is_error {
                        span.record("otel.status_code", "ERROR");
                    }
                }
            }
            RunEvent::ChildRunStarted { child_run_id, .. } => {
                if let Some(span) = step_span(state, &run_id, &path) {
                    let span = span.clone();
                    state.child_parents.insert(child_run_id, (run_id, span));
                }
            }
            RunEvent::OutputChunk { .. }
            | RunEvent::AgentMessageChunk { .. }
            | RunEvent::AgentThoughtChunk { .. } => {}
        }
    }
}

fn step_span<'s>(state: &'s State, run_id: &RunId, path: &str) -> Option<&'s Span> {
    state
        .runs
        .get(run_id)
        .and_then(|r| r.steps.get(path))
        .map(|s| &s.span)
}

/// `("loop:0/", "build")` for `loop:0/build`.
fn split_path(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..=i], &path[i + 1..]),
        None => ("", path),
    }
}

/// OpenTelemetry attributes are signed: `tracing-opentelemetry` records `u64` fields as text.
fn int<T: TryInto<i64>>(v: T) -> i64 {
    v.try_into().unwrap_or(i64::MAX)
}

fn is_loop(kind: &str) -> bool {
    kind == "for_each" || kind == "while"
}

fn start_step(run: &mut RunSpans, path: String, name: &str, kind: String) {
    let (prefix, _) = split_path(&path);
    let prefix = prefix.to_owned();
    let parent = parent_of(run, &path, &prefix).or_else(|| run.span.id());
    let span = tracing::span!(
        target: TARGET,
        parent: parent,
        Level::INFO,
        "workflow.step",
        step.name = %name,
        step.type = %kind,
        step.path = %path,
        step.status = Empty,
        step.exit_code = Empty,
        step.attempts = Empty,
        step.error = Empty,
        loop.iterations = Empty,
        agent.tokens_used = Empty,
        otel.status_code = Empty,
        otel.status_description = Empty,
    );
    run.started += 1;
    let open = OpenStep {
        span,
        name: name.to_owned(),
        kind,
        prefix,
        order: run.started,
        iteration: None,
        iterations: 0,
    };
    run.steps.insert(path, open);
}

/// The parent span id of a step starting at `path` with `prefix`, or `None` for the run span.
fn parent_of(run: &mut RunSpans, path: &str, prefix: &str) -> Option<Id> {
    // A branch of the most recently started open parallel step at the same level.
    let parallel = run
        .steps
        .iter()
        .filter(|(p, s)| s.kind == "parallel" && s.prefix == prefix && p.as_str() != path)
        .max_by_key(|(_, s)| s.order);
    if let Some((_, p)) = parallel {
        return p.span.id();
    }
    // A loop body step: `<outer>loop:<i>/`.
    let inner = prefix.strip_suffix('/')?;
    let (outer, segment) = split_path(inner);
    let index: usize = segment.strip_prefix("loop:")?.parse().ok()?;
    let lp = run
        .steps
        .values_mut()
        .filter(|s| is_loop(&s.kind) && s.prefix == outer)
        .max_by_key(|s| s.order)?;
    if let Some((i, span)) = &lp.iteration
        && *i == index
    {
        return span.id();
    }
    let span = tracing::span!(
        target: TARGET,
        parent: lp.span.id(),
        Level::INFO,
        "workflow.loop.iteration",
        loop.name = %lp.name,
        iteration.index = int(index),
    );
    let id = span.id();
    // Replacing the previous iteration's span closes it.
    lp.iteration = Some((index, span));
    lp.iterations += 1;
    id
}

fn finish_step(mut open: OpenStep, st: &StepState) {
    let span = &open.span;
    span.record("step.status", st.status.as_str());
    if let Some(code) = st.exit_code {
        span.record("step.exit_code", i64::from(code));
    }
    span.record("step.attempts", i64::from(st.attempts));
    if is_loop(&open.kind) {
        span.record("loop.iterations", int(open.iterations));
    }
    if open.kind == "agent" && st.tokens.total > 0 {
        span.record("agent.tokens_used", int(st.tokens.total));
    }
    if matches!(st.status, StepStatus::Failed) {
        let msg = st.error.as_deref().unwrap_or("step failed");
        span.record("step.error", msg);
        span.record("otel.status_code", "ERROR");
        span.record("otel.status_description", msg);
    }
    // Close the last iteration before the step itself.
    open.iteration = None;
}

fn finish_run(mut run: RunSpans, result: &RunResult) {
    let span = &run.span;
    let status = match result.status {
        RunStatus::Success => "success",
        RunStatus::Failure => "failure",
        RunStatus::Cancelled => "cancelled",
    };
    span.record("workflow.status", status);
    span.record("workflow.exit_code", i64::from(result.exit_code));
    if let Some(t) = &result.terminal {
        span.record("workflow.terminal", t.as_str());
    }
    if let Some(err) = &result.error {
        span.record("error.code", err.code.as_str());
    }
    if result.status != RunStatus::Success {
        let msg = result.error.as_ref().map_or(status, |e| e.message.as_str());
        span.record("otel.status_code", "ERROR");
        span.record("otel.status_description", msg);
    }
    // Close whatever is still open, innermost first, then the run span (on drop).
    run.tools.clear();
    let mut left: Vec<(String, OpenStep)> = run.steps.drain().collect();
    left.sort_by_key(|(_, s)| std::cmp::Reverse(s.order));
    for (_, mut s) in left {
        s.iteration = None;
        drop(s);
    }
}

#[cfg(test)]
#[path = "projection_tests.rs"]
mod tests;
