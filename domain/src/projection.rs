//! The run projection: what the event stream of a run says about its stored state, as pure
//! functions over [`RunSnapshot`] (no I/O). Every store's recorder (the embedded one in
//! awf-store, the PostgreSQL one in awf-postgres) folds events through [`RunProjection`] and
//! writes the result its own way, so both record the same snapshot, history row and audit
//! lines for the same run.
//!
//! What the projection keeps, per run (events of sub-workflow runs are recognised by their
//! own `run_id`):
//! - at `RunStarted`: a new `running` snapshot with the run's working directory; a resumed
//!   run (`resumed_from` set) keeps the states, start time and spend recorded before
//!   ([`RunProjection::start`]'s `earlier`), and its directory when the event names none;
//! - at a top-level `StepStarted`: its step becomes `current_state` (branches of a top-level
//!   parallel block do not); the iteration in progress of the top-level loop (and the loops
//!   nested in it) becomes `loop_position`;
//! - at `StepFinished`: the state is recorded by state name (loop bodies and branches
//!   included), the spend grows, a completed loop loses its position;
//! - at `ChildRunStarted`: the child's run id under the calling step's path (`child_runs`),
//!   so a resumed run continues that child instead of starting it again;
//! - at `RunFinished`: status (`waiting` for a run parked on a usage limit), exit code,
//!   terminal, error, outputs, final spend, completion time, and the [`HistoryRecord`].
//!
//! The audit lines (`workflow.started`, `workflow.completed`) are built here too.
//!
//! Source: spec/workflow.md §3.11, §3.14; design/decisions.md ("Storage").

use std::collections::BTreeMap;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

use serde_json::Map;
use serde_json::Value;

use crate::event::EventEnvelope;
use crate::event::RunEvent;
use crate::ports::store::HistoryRecord;
use crate::ports::store::LoopPosition;
use crate::ports::store::PARK_UNTIL;
use crate::ports::store::RunSnapshot;
use crate::ports::store::STATE_SCHEMA_VERSION;
use crate::ports::store::StoredStatus;
use crate::run::RunResult;
use crate::run::RunStatus;
use crate::run::StepState;
use crate::run::StepStatus;
use crate::run::TokenUsage;
use crate::timefmt::format_rfc3339;

/// Milliseconds since the Unix epoch (0 before it, saturating).
pub fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// When a run that ended on a parkable usage limit may go on (the error's [`PARK_UNTIL`]
/// detail).
pub fn parked_until(result: &RunResult) -> Option<SystemTime> {
    let e = result.error.as_ref()?;
    if result.status != RunStatus::Failure || e.code != crate::ErrorCode::ExecutionAgentUsageLimit {
        return None;
    }
    e.details
        .get(PARK_UNTIL)
        .and_then(Value::as_str)
        .and_then(crate::timefmt::parse_rfc3339)
}

/// The stored status of a finished run's status.
pub const fn stored(s: RunStatus) -> StoredStatus {
    match s {
        RunStatus::Success => StoredStatus::Success,
        RunStatus::Failure => StoredStatus::Failure,
        RunStatus::Cancelled => StoredStatus::Cancelled,
    }
}

/// The wire text of a run status in transcripts and audit lines (`success`, `failure`,
/// `cancelled`).
pub const fn status_str(s: RunStatus) -> &'static str {
    match s {
        RunStatus::Success => "success",
        RunStatus::Failure => "failure",
        RunStatus::Cancelled => "cancelled",
    }
}

/// The projection of one live run: its snapshot and what is needed to follow its loops and
/// parallel blocks.
#[derive(Debug, Clone, PartialEq)]
pub struct RunProjection {
    /// The snapshot so far.
    pub snap: RunSnapshot,
    /// The top-level parallel block being executed.
    parallel_open: Option<String>,
    /// Loops started and not finished, by nesting depth (the number of `loop:N/` segments
    /// in their path): (event path, name). Depth 0 is a top-level loop.
    loops_open: Vec<Vec<(String, String)>>,
    /// Parallel blocks started in a loop body and not finished, in the order they started:
    /// (the path of the body they are in, `loop:1/` for `loop:1/par`; name). Their branches
    /// start at the same body path.
    blocks_open: Vec<(String, String)>,
    /// The entry number ([`StepState::entered`]) each state took when it last started.
    entered: BTreeMap<String, u64>,
    /// The next entry number (after those of the earlier attempts' states).
    next_entered: u64,
}

impl RunProjection {
    /// The projection of a run from its `RunStarted` event (`None` for any other event).
    /// `earlier` is the stored snapshot of a resumed run (`resumed_from` set): its states,
    /// start time and spend are kept.
    pub fn start(env: &EventEnvelope, earlier: Option<RunSnapshot>) -> Option<Self> {
        let RunEvent::RunStarted {
            workflow,
            identifier,
            workflow_path,
            inputs,
            resumed_from,
            pid,
            mocks,
            working_dir,
        } = &env.event
        else {
            return None;
        };
        let mut snap = RunSnapshot {
            schema_version: STATE_SCHEMA_VERSION,
            run_id: env.run_id.0.clone(),
            parent_run_id: env.parent_run_id.as_ref().map(|p| p.0.clone()),
            workflow: identifier.clone(),
            workflow_name: workflow.clone(),
            workflow_path: workflow_path.as_ref().map(Into::into),
            status: StoredStatus::Running,
            current_state: resumed_from.clone().unwrap_or_default(),
            inputs: inputs.clone(),
            states: BTreeMap::new(),
            started_at: env.at,
            updated_at: env.at,
            completed_at: None,
            exit_code: None,
            terminal: None,
            error: None,
            outputs: BTreeMap::new(),
            owner_pid: Some(*pid),
            loop_position: None,
            spend: None,
            waiting_until: None,
            child_runs: BTreeMap::new(),
            mocks: mocks.clone(),
            working_dir: working_dir.as_ref().map(Into::into),
        };
        if resumed_from.is_some()
            && let Some(old) = earlier
        {
            snap.states = old.states;
            snap.started_at = old.started_at;
            snap.spend = old.spend;
            snap.child_runs = old.child_runs;
            // An attempt whose event does not say keeps the directory recorded before.
            if snap.working_dir.is_none() {
                snap.working_dir = old.working_dir;
            }
            // The loop it goes on in keeps its position until a body step starts, and the
            // branches its block had completed there while the block is still in progress
            // (the resume keeps them without running them: killed again, they are kept again).
            snap.loop_position = old
                .loop_position
                .filter(|l| resumed_from.as_deref() == Some(l.state.as_str()));
        }
        // A resumed run's states are numbered on from its earlier attempts'.
        let next_entered = snap
            .states
            .values()
            .filter_map(|s| s.entered)
            .max()
            .unwrap_or(0)
            + 1;
        Some(Self {
            snap,
            parallel_open: None,
            loops_open: Vec::new(),
            blocks_open: Vec::new(),
            entered: BTreeMap::new(),
            next_entered,
        })
    }

    /// Applies a `StepStarted` of `step` (a `kind` step) at `env`'s path; whether the
    /// snapshot changed.
    pub fn step_started(&mut self, env: &EventEnvelope, step: &str, kind: &str) -> bool {
        let mut dirty = false;
        let n = self.take_entry_number();
        self.entered.insert(step.to_owned(), n);
        // A loop starts: remember its name at its depth.
        if kind == "for_each" || kind == "while" {
            let depth = loop_indexes(&env.path).len();
            if self.loops_open.len() <= depth {
                self.loops_open.resize_with(depth + 1, Vec::new);
            }
            self.loops_open[depth].push((env.path.clone(), step.to_owned()));
        }
        // A body step of a top-level loop (and of the loops nested in it): remember the
        // iteration in progress of each. Inside a top-level parallel block, the loop is the
        // block's one loop branch (with several, they cannot be told apart).
        if let Some(i) = env.iteration {
            let top = match (
                &self.parallel_open,
                self.loops_open.first().map(Vec::as_slice),
            ) {
                (None, _) => Some(self.snap.current_state.clone()),
                (Some(_), Some([(_, name)])) => Some(name.clone()),
                (Some(_), _) => None,
            };
            let indexes = loop_indexes(&env.path);
            if indexes.last() == Some(&i)
                && let Some(top) = top
                && let Some(mut pos) = position(&top, &indexes, &self.loops_open, step)
            {
                // A branch of a block in progress (or a step inside one): the body step in
                // progress at that level is still the block.
                in_blocks(&mut pos, &env.path, &self.blocks_open);
                if let Some(old) = &self.snap.loop_position {
                    carry_branches(old, &mut pos);
                }
                if self.snap.loop_position.as_ref() != Some(&pos) {
                    self.snap.loop_position = Some(pos);
                    dirty = true;
                }
            }
        }
        if kind == "parallel" && env.iteration.is_some() {
            let body = body_path(&env.path);
            self.blocks_open.push((body.to_owned(), step.to_owned()));
        }
        // Branches of a top-level parallel block also have bare paths; the block stays the
        // current state until it finishes.
        if env.path == step && self.parallel_open.is_none() {
            step.clone_into(&mut self.snap.current_state);
            self.snap.updated_at = env.at;
            dirty = true;
            if kind == "parallel" {
                self.parallel_open = Some(step.to_owned());
            }
        }
        dirty
    }

    /// Applies a `StepFinished` of `step` with its `state` at `env`'s path: the state is
    /// recorded under the step's name (the snapshot always changes).
    pub fn step_finished(&mut self, env: &EventEnvelope, step: &str, state: &StepState) {
        for open in &mut self.loops_open {
            open.retain(|(path, _)| path != &env.path);
        }
        // A nested loop that completed is no longer in progress; a body step that completed
        // is marked so at its level (resume goes on from it).
        let indexes = loop_indexes(&env.path);
        let depth = indexes.len();
        if depth > 0
            && state.status == StepStatus::Completed
            && let Some(pos) = self.snap.loop_position.as_mut()
        {
            clear_inner(pos, depth, step);
            mark_completed(pos, &indexes, step);
            // A branch of a block in a loop body: the block's completed branches there.
            let body = body_path(&env.path);
            if let Some((_, block)) = self
                .blocks_open
                .iter()
                .find(|(b, name)| b == body && name != step)
            {
                mark_branch(pos, &indexes, block, step);
            }
        }
        if let Some(at) = self
            .blocks_open
            .iter()
            .position(|(body, name)| name == step && env.path == format!("{body}{name}"))
        {
            self.blocks_open.remove(at);
        }
        if env.path == step && self.parallel_open.as_deref() == Some(step) {
            self.parallel_open = None;
        }
        // A loop that completed has no position left; one that was cancelled or failed keeps
        // it, so `awf resume` continues at that iteration.
        if env.path == step
            && state.status == StepStatus::Completed
            && self
                .snap
                .loop_position
                .as_ref()
                .is_some_and(|l| l.state == step)
        {
            self.snap.loop_position = None;
        }
        // The spend so far, live (the run's final count replaces it at the end).
        if state.tokens != TokenUsage::default() || state.cost_usd.is_some() {
            self.snap
                .spend
                .get_or_insert_with(Default::default)
                .add(&state.tokens, state.cost_usd);
        }
        let mut state = state.clone();
        state.entered = Some(match self.entered.remove(step) {
            Some(n) => n,
            // Finished without a start (a state recorded as it is passed over).
            None => self.take_entry_number(),
        });
        self.snap.states.insert(step.to_owned(), state);
        self.snap.updated_at = env.at;
    }

    /// The next entry number ([`StepState::entered`]).
    fn take_entry_number(&mut self) -> u64 {
        let n = self.next_entered;
        self.next_entered += 1;
        n
    }

    /// Applies a `ChildRunStarted` of `child_run_id` at `env`'s path (the calling step's):
    /// it becomes the child run of that path; whether the snapshot changed.
    pub fn child_started(&mut self, env: &EventEnvelope, child_run_id: &str) -> bool {
        if self.snap.child_runs.get(&env.path).map(String::as_str) == Some(child_run_id) {
            return false;
        }
        self.snap
            .child_runs
            .insert(env.path.clone(), child_run_id.to_owned());
        self.snap.updated_at = env.at;
        true
    }

    /// Applies the `RunFinished` at `env`: the final fields of the snapshot; returns the
    /// run's history record.
    pub fn finish(&mut self, env: &EventEnvelope, result: &RunResult) -> HistoryRecord {
        let waiting_until = parked_until(result);
        let status = final_status(result);
        let s = &mut self.snap;
        s.status = status;
        s.waiting_until = waiting_until;
        s.exit_code = Some(result.exit_code);
        s.terminal.clone_from(&result.terminal);
        s.error.clone_from(&result.error);
        s.outputs.clone_from(&result.outputs);
        if result.spend.is_some() {
            s.spend = result.spend;
        }
        s.completed_at = Some(env.at);
        s.updated_at = env.at;
        HistoryRecord {
            id: s.run_id.clone(),
            workflow_id: s.workflow.clone(),
            workflow_name: s.workflow_name.clone(),
            status,
            exit_code: Some(result.exit_code),
            started_at_ms: millis(s.started_at),
            completed_at_ms: Some(millis(env.at)),
            // README: completed_at − started_at (a resumed run's spans its attempts), the
            // figure the engine's own `duration_ms` is computed as.
            duration_ms: Some(span_ms(s.started_at, env.at)),
            error_message: result.error.as_ref().map(|e| e.message.clone()),
            parent_run_id: s.parent_run_id.clone(),
            spend: result.spend,
        }
    }
}

/// A run's `duration_ms` from its `started_at` to its `completed_at`: the difference of their
/// milliseconds since the epoch (as stored and shown), so it always equals completed_at −
/// started_at of the record; 0 when the end is earlier.
pub fn span_ms(started_at: SystemTime, completed_at: SystemTime) -> u64 {
    millis(completed_at).saturating_sub(millis(started_at))
}

/// The stored status of a finished run: `waiting` when it ended on a usage limit that resets
/// within the step's `max_wait`, else its own.
pub fn final_status(result: &RunResult) -> StoredStatus {
    if parked_until(result).is_some() {
        StoredStatus::Waiting
    } else {
        stored(result.status)
    }
}

/// The history record of a run that finished without a projection (its `RunStarted` was not
/// seen): what its `RunFinished` alone says.
pub fn finished_record(env: &EventEnvelope, result: &RunResult) -> HistoryRecord {
    HistoryRecord {
        id: env.run_id.0.clone(),
        workflow_id: result.workflow.clone(),
        workflow_name: result.workflow.clone(),
        status: final_status(result),
        exit_code: Some(result.exit_code),
        started_at_ms: millis(env.at).saturating_sub(result.duration_ms),
        completed_at_ms: Some(millis(env.at)),
        duration_ms: Some(result.duration_ms),
        error_message: result.error.as_ref().map(|e| e.message.clone()),
        parent_run_id: env.parent_run_id.as_ref().map(|p| p.0.clone()),
        spend: result.spend,
    }
}

/// The `error` of a run's `workflow.completed` audit line: none on success, else the run's
/// error text (`workflow cancelled` / `workflow failed` without one).
pub fn completion_error(result: &RunResult) -> Option<String> {
    match (
        result.status,
        result.error.as_ref().map(|e| e.message.clone()),
    ) {
        (RunStatus::Success, _) => None,
        (_, Some(e)) => Some(e),
        (RunStatus::Cancelled, None) => Some("workflow cancelled".to_owned()),
        (RunStatus::Failure, None) => Some("workflow failed".to_owned()),
    }
}

/// The `workflow.completed` audit line (newline included) of a run named `workflow_name`
/// that finished with `result` at `at`.
pub fn completed_line_of(
    run_id: &str,
    at: SystemTime,
    user: &str,
    workflow_name: &str,
    result: &RunResult,
) -> String {
    let error = completion_error(result);
    completed_line(
        run_id,
        at,
        user,
        workflow_name,
        &Completion {
            status: status_str(result.status),
            exit_code: result.exit_code,
            duration_ms: result.duration_ms,
            error: error.as_deref(),
        },
    )
}

/// Longest audit line, newline included (PIPE_BUF).
pub const MAX_AUDIT_LINE: usize = 4096;

/// Replacement of an input value dropped to fit a line.
const ELLIPSIS: &str = "…";

/// The common head of both lines.
fn head(
    event: &str,
    run_id: &str,
    at: SystemTime,
    user: &str,
    workflow_name: &str,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("event".into(), event.into());
    m.insert("execution_id".into(), run_id.into());
    m.insert("timestamp".into(), format_rfc3339(at).into());
    m.insert("user".into(), user.into());
    m.insert("workflow_name".into(), workflow_name.into());
    m
}

fn encode(m: &Map<String, Value>) -> String {
    let mut s = Value::Object(m.clone()).to_string();
    s.push('\n');
    s
}

/// The `workflow.started` line (newline included). When it is longer than [`MAX_AUDIT_LINE`], the
/// longest input values (ties: the first key in order) are replaced by `"…"` one by one until
/// it fits, and `inputs_truncated: true` is added.
pub fn started_line(
    run_id: &str,
    at: SystemTime,
    user: &str,
    workflow_name: &str,
    inputs: &Map<String, Value>,
) -> String {
    let build = |inputs: &Map<String, Value>, truncated: bool| {
        let mut m = head("workflow.started", run_id, at, user, workflow_name);
        if !inputs.is_empty() {
            m.insert("inputs".into(), Value::Object(inputs.clone()));
        }
        if truncated {
            m.insert("inputs_truncated".into(), true.into());
        }
        m.insert("schema_version".into(), 1.into());
        encode(&m)
    };
    let line = build(inputs, false);
    if line.len() <= MAX_AUDIT_LINE {
        return line;
    }
    // Which values to replace is worked out from their encoded lengths (a member's value is
    // encoded the same whatever the others are), then the line is built once: building it
    // again after each replacement took quadratic time (breaker: 5,000 undeclared inputs,
    // more than 20 s before the run started).
    let ellipsis_len = Value::from(ELLIPSIS).to_string().len();
    let mut order: Vec<(usize, usize)> = inputs
        .iter()
        .enumerate()
        .filter(|(_, (_, v))| v.as_str() != Some(ELLIPSIS))
        .map(|(i, (_, v))| (v.to_string().len(), i))
        .collect();
    // Longest first; ties: the first key in order.
    order.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut len = build(inputs, true).len();
    let mut replaced = std::collections::HashSet::new();
    for (value_len, i) in order {
        replaced.insert(i);
        len = (len + ellipsis_len).saturating_sub(value_len);
        if len <= MAX_AUDIT_LINE {
            break;
        }
    }
    let inputs: Map<String, Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, (k, v))| {
            let v = if replaced.contains(&i) {
                Value::from(ELLIPSIS)
            } else {
                v.clone()
            };
            (k.clone(), v)
        })
        .collect();
    build(&inputs, true)
}

/// What a `workflow.completed` line reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion<'a> {
    /// `success`, `failure` or `cancelled` ([`status_str`]).
    pub status: &'a str,
    /// The process exit code.
    pub exit_code: u8,
    /// Wall time (at least 1 is written).
    pub duration_ms: u64,
    /// The failure text, when the run did not succeed.
    pub error: Option<&'a str>,
}

/// The `workflow.completed` line (newline included); an over-long `error` is cut to fit.
pub fn completed_line(
    run_id: &str,
    at: SystemTime,
    user: &str,
    workflow_name: &str,
    c: &Completion<'_>,
) -> String {
    let build = |error: Option<&str>| {
        let mut m = head("workflow.completed", run_id, at, user, workflow_name);
        m.insert("status".into(), c.status.into());
        m.insert("exit_code".into(), c.exit_code.into());
        m.insert("duration_ms".into(), c.duration_ms.max(1).into());
        if let Some(e) = error {
            m.insert("error".into(), e.into());
        }
        m.insert("schema_version".into(), 1.into());
        encode(&m)
    };
    let mut line = build(c.error);
    let Some(e) = c.error else {
        return line;
    };
    let mut keep = e.len();
    while line.len() > MAX_AUDIT_LINE && keep > 0 {
        let over = line.len() - MAX_AUDIT_LINE + ELLIPSIS.len();
        keep = keep.saturating_sub(over.max(1));
        while !e.is_char_boundary(keep) {
            keep -= 1;
        }
        line = build(Some(&format!("{}{ELLIPSIS}", &e[..keep])));
    }
    line
}

/// The iteration indexes of the `loop:N/` segments of an event path, outermost first
/// (`loop:2/loop:0/work` gives `[2, 0]`).
fn loop_indexes(path: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut rest = path;
    while let Some(after) = rest.strip_prefix("loop:") {
        let Some((n, tail)) = after.split_once('/') else {
            break;
        };
        let Ok(n) = n.parse::<usize>() else {
            break;
        };
        out.push(n);
        rest = tail;
    }
    out
}

/// The position of the top-level loop `top` at `indexes` (one per nesting level), with the
/// loops open at each inner level named from `open`. An inner level where several loops run
/// at once (parallel branches) cannot be told apart: the position stops above it.
///
/// `step` is the body step that started (its path's last segment): each level's `step` is the
/// body step in progress there, the nested loop of the level below, and `step` at the deepest
/// level (none where the levels stop early).
fn position(
    top: &str,
    indexes: &[usize],
    open: &[Vec<(String, String)>],
    step: &str,
) -> Option<LoopPosition> {
    let (&first, inner) = indexes.split_first()?;
    let mut levels = vec![(top.to_owned(), first)];
    for (depth, &i) in inner.iter().enumerate() {
        match open.get(depth + 1).map(Vec::as_slice) {
            Some([(_, name)]) => levels.push((name.clone(), i)),
            _ => break,
        }
    }
    let complete = levels.len() == indexes.len();
    let mut out: Option<LoopPosition> = None;
    let mut below: Option<String> = complete.then(|| step.to_owned());
    for (name, i) in levels.into_iter().rev() {
        let pos = LoopPosition {
            state: name.clone(),
            iteration: i,
            step: below.take(),
            step_completed: false,
            branches_completed: Vec::new(),
            inner: out.take().map(Box::new),
        };
        below = Some(name);
        out = Some(pos);
    }
    out
}

/// The body path an event path's step is in: up to its last `/` (`loop:1/` for
/// `loop:1/par`, empty for a top-level step).
fn body_path(path: &str) -> &str {
    path.rfind('/').map_or("", |i| &path[..=i])
}

/// Sets the body step in progress of each level of `pos` (a position computed for a step
/// starting at `path`) to the parallel block open in that level's body (the first one started
/// there, `blocks`), when there is one: the step that started is one of its branches, or
/// inside one.
fn in_blocks(pos: &mut LoopPosition, path: &str, blocks: &[(String, String)]) {
    let mut body = String::new();
    let mut level = Some(pos);
    for segment in path.split('/') {
        let Some(l) = level else {
            return;
        };
        if !segment.starts_with("loop:") {
            return;
        }
        body.push_str(segment);
        body.push('/');
        if let Some((_, block)) = blocks.iter().find(|(b, _)| *b == body) {
            l.step = Some(block.clone());
        }
        level = l.inner.as_deref_mut();
    }
}

/// Copies the completed branches of `old`'s levels to `new`'s, level by level while both are
/// at the same loop, iteration and body step, not completed (the block still in progress).
fn carry_branches(old: &LoopPosition, new: &mut LoopPosition) {
    let (mut o, mut n) = (Some(old), Some(new));
    while let (Some(a), Some(b)) = (o, n) {
        // (A block that completed and starts again in the same iteration runs afresh.)
        if a.state != b.state || a.iteration != b.iteration || a.step != b.step || a.step_completed
        {
            return;
        }
        if b.branches_completed.is_empty() {
            b.branches_completed.clone_from(&a.branches_completed);
        }
        o = a.inner.as_deref();
        n = b.inner.as_deref_mut();
    }
}

/// The level of `pos` its path's `indexes` name (the last one), when every level on the way
/// is in the iteration the path names.
fn level_at<'a>(pos: &'a mut LoopPosition, indexes: &[usize]) -> Option<&'a mut LoopPosition> {
    let (&last, outer) = indexes.split_last()?;
    let mut level = pos;
    for &i in outer {
        if level.iteration != i {
            return None;
        }
        level = level.inner.as_deref_mut()?;
    }
    (level.iteration == last).then_some(level)
}

/// Adds `branch` to the completed branches of `block` at the level of `pos` its path's
/// `indexes` name (the last one), when `block` is the body step in progress there in that
/// iteration.
fn mark_branch(pos: &mut LoopPosition, indexes: &[usize], block: &str, branch: &str) {
    if let Some(l) = level_at(pos, indexes)
        && l.step.as_deref() == Some(block)
        && !l.branches_completed.iter().any(|b| b == branch)
    {
        l.branches_completed.push(branch.to_owned());
    }
}

/// Marks `step` completed at the level of `pos` its path's `indexes` name (the last one),
/// when it is the step in progress there in that iteration.
fn mark_completed(pos: &mut LoopPosition, indexes: &[usize], step: &str) {
    if let Some(l) = level_at(pos, indexes)
        && l.step.as_deref() == Some(step)
    {
        l.step_completed = true;
    }
}

/// Drops the position of loop `name` at nesting `depth` (>= 1) from `pos`; whether it was there.
fn clear_inner(pos: &mut LoopPosition, depth: usize, name: &str) -> bool {
    if depth <= 1 {
        if pos.inner.as_ref().is_some_and(|l| l.state == name) {
            pos.inner = None;
            return true;
        }
        return false;
    }
    match pos.inner.as_deref_mut() {
        Some(next) => clear_inner(next, depth - 1, name),
        None => false,
    }
}

#[cfg(test)]
mod position_tests {
    use super::*;

    fn open(levels: &[&[&str]]) -> Vec<Vec<(String, String)>> {
        levels
            .iter()
            .map(|l| {
                l.iter()
                    .map(|n| (format!("p/{n}"), (*n).to_owned()))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn loop_indexes_read_every_loop_segment() {
        assert_eq!(loop_indexes("work"), Vec::<usize>::new());
        assert_eq!(loop_indexes("loop:2/work"), vec![2]);
        assert_eq!(loop_indexes("loop:2/loop:0/work"), vec![2, 0]);
        assert_eq!(loop_indexes("loop:x/work"), Vec::<usize>::new());
    }

    #[test]
    fn nested_positions_stop_where_a_level_is_ambiguous() {
        let one = position("outer", &[1, 3], &open(&[&["outer"], &["inner"]]), "s").unwrap();
        assert_eq!(
            one,
            LoopPosition {
                state: "outer".into(),
                iteration: 1,
                step: Some("inner".into()),
                step_completed: false,
                branches_completed: Vec::new(),
                inner: Some(Box::new(LoopPosition {
                    state: "inner".into(),
                    iteration: 3,
                    step: Some("s".into()),
                    step_completed: false,
                    branches_completed: Vec::new(),
                    inner: None
                }))
            }
        );
        // Two loops running side by side at level 1 (parallel branches): only the top level,
        // whose body step in progress is not known.
        let two = position("outer", &[1, 3], &open(&[&["outer"], &["x", "y"]]), "s").unwrap();
        assert_eq!(two.inner, None);
        assert_eq!(two.step, None);
        assert_eq!(position("outer", &[], &[], "s"), None);
    }

    #[test]
    fn a_body_step_that_completed_is_marked_at_its_level_in_its_iteration() {
        let mut pos = position("outer", &[1, 3], &open(&[&["outer"], &["inner"]]), "s").unwrap();
        mark_completed(&mut pos, &[1, 2], "s");
        assert!(
            !pos.inner.as_ref().unwrap().step_completed,
            "another iteration"
        );
        mark_completed(&mut pos, &[1, 3], "t");
        assert!(!pos.inner.as_ref().unwrap().step_completed, "another step");
        mark_completed(&mut pos, &[1, 3], "s");
        assert!(pos.inner.as_ref().unwrap().step_completed);
        assert!(!pos.step_completed);
        // The nested loop completing: dropped, and marked at the level above.
        assert!(clear_inner(&mut pos, 1, "inner"));
        mark_completed(&mut pos, &[1], "inner");
        assert!(pos.step_completed);
    }

    #[test]
    fn a_completed_nested_loop_is_dropped_from_the_position() {
        let mut pos = position("outer", &[1, 3], &open(&[&["outer"], &["inner"]]), "s").unwrap();
        assert!(!clear_inner(&mut pos, 1, "other"));
        assert!(clear_inner(&mut pos, 1, "inner"));
        assert_eq!(pos.inner, None);
    }
}

#[cfg(test)]
mod projection_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::run::RunId;
    use std::time::Duration;

    fn t(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(1_000_000 + ms)
    }

    fn env(at: u64, path: &str, iteration: Option<usize>, event: RunEvent) -> EventEnvelope {
        EventEnvelope {
            seq: at,
            run_id: RunId("r".into()),
            parent_run_id: None,
            at: t(at),
            path: path.to_owned(),
            iteration,
            event,
        }
    }

    fn started(resumed_from: Option<&str>) -> EventEnvelope {
        env(
            1,
            "",
            None,
            RunEvent::RunStarted {
                workflow: "wf".into(),
                identifier: "wf.yaml".into(),
                workflow_path: None,
                inputs: Map::new(),
                resumed_from: resumed_from.map(str::to_owned),
                pid: 9,
                mocks: Default::default(),
                working_dir: None,
            },
        )
    }

    /// [`started`] in `dir`.
    fn started_in(resumed_from: Option<&str>, dir: Option<&str>) -> EventEnvelope {
        let mut e = started(resumed_from);
        if let RunEvent::RunStarted { working_dir, .. } = &mut e.event {
            *working_dir = dir.map(str::to_owned);
        }
        e
    }

    fn done(step: &str, at: u64) -> StepState {
        let mut s = StepState::running(step, t(at));
        s.status = StepStatus::Completed;
        s
    }

    #[test]
    fn a_run_projects_to_its_snapshot_and_history_record() {
        let mut p = RunProjection::start(&started(None), None).unwrap();
        assert_eq!(p.snap.status, StoredStatus::Running);
        assert!(p.step_started(
            &env(
                2,
                "a",
                None,
                RunEvent::StepStarted {
                    step: "a".into(),
                    kind: "command".into(),
                    command: None
                }
            ),
            "a",
            "command"
        ));
        assert_eq!(p.snap.current_state, "a");
        let at_a = env(
            3,
            "a",
            None,
            RunEvent::StepStarted {
                step: "a".into(),
                kind: "command".into(),
                command: None,
            },
        );
        p.step_finished(&at_a, "a", &done("a", 2));
        assert_eq!(p.snap.states.keys().collect::<Vec<_>>(), ["a"]);
        let result = RunResult {
            run_id: Some(RunId("r".into())),
            workflow: "wf.yaml".into(),
            status: RunStatus::Failure,
            exit_code: 3,
            terminal: None,
            duration_ms: 40,
            states: BTreeMap::new(),
            outputs: BTreeMap::new(),
            error: None,
            message: None,
            spend: None,
        };
        let rec = p.finish(
            &env(
                4,
                "",
                None,
                RunEvent::RunFinished {
                    result: Box::new(result.clone()),
                },
            ),
            &result,
        );
        assert_eq!(
            (
                rec.status,
                rec.exit_code,
                rec.started_at_ms,
                rec.completed_at_ms,
                rec.duration_ms
            ),
            (
                StoredStatus::Failure,
                Some(3),
                millis(t(1)),
                Some(millis(t(4))),
                // completed_at − started_at (README), not the result's own figure.
                Some(3)
            )
        );
        assert_eq!(p.snap.completed_at, Some(t(4)));
        assert_eq!(
            completion_error(&result).as_deref(),
            Some("workflow failed")
        );
    }

    /// The run's directory is recorded at its start; an attempt whose event names none (an
    /// event of before it was kept) keeps the one recorded before, and one that names a
    /// directory records it.
    #[test]
    fn the_working_directory_is_recorded_at_the_start() {
        let first = RunProjection::start(&started_in(None, Some("/a")), None).unwrap();
        assert_eq!(first.snap.working_dir, Some(std::path::PathBuf::from("/a")));
        let json = serde_json::to_value(&first.snap).unwrap();
        assert_eq!(json["working_dir"], "/a");
        let kept = RunProjection::start(&started_in(Some("b"), None), Some(first.snap.clone()));
        assert_eq!(kept.unwrap().snap.working_dir, first.snap.working_dir);
        let moved = RunProjection::start(&started_in(Some("b"), Some("/c")), Some(first.snap));
        assert_eq!(
            moved.unwrap().snap.working_dir,
            Some(std::path::PathBuf::from("/c"))
        );
        let none = RunProjection::start(&started(None), None).unwrap();
        assert_eq!(none.snap.working_dir, None);
        let json = serde_json::to_value(&none.snap).unwrap();
        assert!(json.get("working_dir").is_none(), "{json}");
        // A state file of before the field reads back without it.
        let back: RunSnapshot = serde_json::from_value(json).unwrap();
        assert_eq!(back.working_dir, None);
    }

    /// Starts and finishes `step` at `at` in `p` (its state started and ended at `at`).
    fn run_step(p: &mut RunProjection, step: &str, at: u64) {
        let e = env(
            at,
            step,
            None,
            RunEvent::StepStarted {
                step: step.into(),
                kind: "command".into(),
                command: None,
            },
        );
        p.step_started(&e, step, "command");
        p.step_finished(&e, step, &done(step, at));
    }

    /// Breaker: `awf status` listed states by their start, to the millisecond, so states
    /// entered in the same millisecond (mocked ones, quick ones) came by name, and a resumed
    /// run's states out of the order they ran in. The record numbers them as they are
    /// entered, on from the earlier attempts; one entered again takes a new number.
    #[test]
    fn states_are_numbered_in_the_order_they_are_entered_across_attempts() {
        let mut first = RunProjection::start(&started(None), None).unwrap();
        for step in ["zeta", "yank", "alpha"] {
            run_step(&mut first, step, 2);
        }
        let order = |snap: &RunSnapshot| {
            crate::run::in_entry_order(snap.states.values())
                .into_iter()
                .map(|s| (s.name.clone(), s.entered))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            order(&first.snap),
            [
                ("zeta".to_owned(), Some(1)),
                ("yank".to_owned(), Some(2)),
                ("alpha".to_owned(), Some(3))
            ]
        );
        // The resume enters `alpha` again, then `mid`, in the same millisecond as before.
        let mut second =
            RunProjection::start(&started(Some("alpha")), Some(first.snap.clone())).unwrap();
        run_step(&mut second, "alpha", 2);
        run_step(&mut second, "mid", 2);
        assert_eq!(
            order(&second.snap),
            [
                ("zeta".to_owned(), Some(1)),
                ("yank".to_owned(), Some(2)),
                ("alpha".to_owned(), Some(4)),
                ("mid".to_owned(), Some(5))
            ]
        );
        // In the state file, read back the same.
        let back: RunSnapshot =
            serde_json::from_value(serde_json::to_value(&second.snap).unwrap()).unwrap();
        assert_eq!(order(&back), order(&second.snap));
        // A record of before the numbering: by start; its states before those numbered.
        let mut old = second.snap.clone();
        for (name, at) in [("b", 9), ("a", 8)] {
            let mut st = done(name, at);
            st.entered = None;
            old.states.insert(name.into(), st);
        }
        let names: Vec<&str> = crate::run::in_entry_order(old.states.values())
            .into_iter()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(names, ["a", "b", "zeta", "yank", "alpha", "mid"]);
    }

    #[test]
    fn a_resumed_run_keeps_the_earlier_states_and_start_and_a_fresh_one_does_not() {
        let mut first = RunProjection::start(&started(None), None).unwrap();
        let at_a = env(
            3,
            "a",
            None,
            RunEvent::StepStarted {
                step: "a".into(),
                kind: "command".into(),
                command: None,
            },
        );
        first.step_finished(&at_a, "a", &done("a", 2));
        let earlier = first.snap.clone();
        let resumed = RunProjection::start(&started(Some("b")), Some(earlier.clone())).unwrap();
        assert_eq!(resumed.snap.states, earlier.states);
        assert_eq!(resumed.snap.current_state, "b");
        let fresh = RunProjection::start(&started(None), Some(earlier)).unwrap();
        assert!(fresh.snap.states.is_empty());
        assert!(
            RunProjection::start(
                &env(
                    5,
                    "a",
                    None,
                    RunEvent::StepStarted {
                        step: "a".into(),
                        kind: "command".into(),
                        command: None
                    }
                ),
                None
            )
            .is_none()
        );
    }

    #[test]
    fn each_calling_path_keeps_its_latest_child_run_across_attempts() {
        let mut p = RunProjection::start(&started(None), None).unwrap();
        let child = |at: u64, path: &str, id: &str| {
            env(
                at,
                path,
                None,
                RunEvent::ChildRunStarted {
                    step: "call".into(),
                    child_run_id: RunId(id.into()),
                    workflow: "sub".into(),
                },
            )
        };
        assert!(p.child_started(&child(2, "call", "c1"), "c1"));
        assert!(p.child_started(&child(3, "loop:0/call", "c2"), "c2"));
        // A retry's child replaces the attempt before it; the same child again changes nothing.
        assert!(p.child_started(&child(4, "call", "c3"), "c3"));
        assert!(!p.child_started(&child(5, "call", "c3"), "c3"));
        let want = BTreeMap::from([
            ("call".to_owned(), "c3".to_owned()),
            ("loop:0/call".to_owned(), "c2".to_owned()),
        ]);
        assert_eq!(p.snap.child_runs, want);
        let resumed = RunProjection::start(&started(Some("call")), Some(p.snap.clone())).unwrap();
        assert_eq!(resumed.snap.child_runs, want);
        let fresh = RunProjection::start(&started(None), Some(p.snap)).unwrap();
        assert!(fresh.snap.child_runs.is_empty());
    }

    #[test]
    fn a_parallel_block_stays_the_current_state_while_its_branches_run() {
        let mut p = RunProjection::start(&started(None), None).unwrap();
        let ss = |step: &str, kind: &str| {
            env(
                2,
                step,
                None,
                RunEvent::StepStarted {
                    step: step.into(),
                    kind: kind.into(),
                    command: None,
                },
            )
        };
        p.step_started(&ss("par", "parallel"), "par", "parallel");
        p.step_started(&ss("x", "command"), "x", "command");
        assert_eq!(p.snap.current_state, "par");
        p.step_finished(&ss("par", "parallel"), "par", &done("par", 3));
        p.step_started(&ss("next", "command"), "next", "command");
        assert_eq!(p.snap.current_state, "next");
    }

    /// A parallel block in a loop body stays the body step in progress while its branches
    /// run, and its completed branches of that iteration are listed with it; a resumed run
    /// keeps them until a body step starts elsewhere, and the next iteration starts afresh.
    #[test]
    fn a_block_in_a_loop_body_lists_its_completed_branches_of_the_iteration() {
        let mut p = RunProjection::start(&started(None), None).unwrap();
        let ev = |path: &str, iteration: Option<usize>, step: &str, kind: &str| {
            env(
                2,
                path,
                iteration,
                RunEvent::StepStarted {
                    step: step.into(),
                    kind: kind.into(),
                    command: None,
                },
            )
        };
        p.step_started(&ev("loop", None, "loop", "for_each"), "loop", "for_each");
        let start = |p: &mut RunProjection, i: usize, step: &str, kind: &str| {
            p.step_started(
                &ev(&format!("loop:{i}/{step}"), Some(i), step, kind),
                step,
                kind,
            );
        };
        let finish = |p: &mut RunProjection, i: usize, step: &str| {
            let e = ev(&format!("loop:{i}/{step}"), Some(i), step, "command");
            p.step_finished(&e, step, &done(step, 3));
        };
        let at = |step: &str, completed: bool, branches: &[&str]| LoopPosition {
            state: "loop".into(),
            iteration: 1,
            step: Some(step.into()),
            step_completed: completed,
            branches_completed: branches.iter().map(|b| (*b).to_owned()).collect(),
            inner: None,
        };
        start(&mut p, 0, "par", "parallel");
        start(&mut p, 0, "fast", "command");
        finish(&mut p, 0, "fast");
        start(&mut p, 0, "slow", "command");
        finish(&mut p, 0, "slow");
        finish(&mut p, 0, "par");
        start(&mut p, 1, "par", "parallel");
        assert_eq!(p.snap.loop_position, Some(at("par", false, &[])));
        start(&mut p, 1, "fast", "command");
        start(&mut p, 1, "slow", "command");
        finish(&mut p, 1, "fast");
        assert_eq!(p.snap.loop_position, Some(at("par", false, &["fast"])));
        // Resumed there: the position stays, and so do its branches when the block starts.
        let earlier = p.snap.clone();
        let mut r = RunProjection::start(&started(Some("loop")), Some(earlier.clone())).unwrap();
        assert_eq!(r.snap.loop_position, Some(at("par", false, &["fast"])));
        start(&mut r, 1, "par", "parallel");
        start(&mut r, 1, "slow", "command");
        assert_eq!(r.snap.loop_position, Some(at("par", false, &["fast"])));
        finish(&mut r, 1, "slow");
        assert_eq!(
            r.snap.loop_position,
            Some(at("par", false, &["fast", "slow"]))
        );
        finish(&mut r, 1, "par");
        assert_eq!(
            r.snap.loop_position,
            Some(at("par", true, &["fast", "slow"]))
        );
        start(&mut r, 2, "par", "parallel");
        assert_eq!(
            r.snap
                .loop_position
                .as_ref()
                .map(|l| (l.iteration, l.branches_completed.len())),
            Some((2, 0))
        );
        // Resumed elsewhere (another state): no position is kept.
        let other = RunProjection::start(&started(Some("setup")), Some(earlier)).unwrap();
        assert_eq!(other.snap.loop_position, None);
    }
}
