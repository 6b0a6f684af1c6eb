//! Run persistence: the state file of each run (for `awf resume` and `awf status`) and the run
//! history (for `awf history`). Writers are event-stream projections (they implement
//! [`crate::event::EventPublisher`]); these ports are the read side plus the snapshot format.
//!
//! Source: spec/workflow.md §3.11 (persistence and resume) and http-ops.md §3; choices in
//! design/decisions.md ("Storage (embedded default)").

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::SystemTime;

use serde::Deserialize;
use serde::Serialize;
use serde_json::Map;
use serde_json::Value;

use crate::error::AwfError;
use crate::error::ErrorBody;
use crate::run::StepState;

/// Version of the state-file format.
pub const STATE_SCHEMA_VERSION: u32 = 1;

/// Lifecycle status of a run as stored (`running` while live or after a crash).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoredStatus {
    /// Started, not finished (or the process died).
    Running,
    /// Reached a success terminal.
    Success,
    /// Failed.
    Failure,
    /// Cancelled.
    Cancelled,
    /// Parked on an agent's usage limit until its reset time ([`RunSnapshot::waiting_until`]);
    /// `awf resume` continues it (waiting for the reset first).
    Waiting,
    /// Submitted to the shared store's queue, not yet started by a worker (issue 15).
    Queued,
}

impl StoredStatus {
    /// Wire text.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Success => "success",
            Self::Failure => "failure",
            Self::Cancelled => "cancelled",
            Self::Waiting => "waiting",
            Self::Queued => "queued",
        }
    }

    /// The status in AWF (Go)'s words: `running`, `completed`, `failed`, `cancelled`,
    /// `waiting`, and `queued` (a run of the shared store's queue no worker started yet). What every JSON output and text table naming a run status prints (history,
    /// status, resume --list, the HTTP API).
    pub const fn go_name(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Success => "completed",
            Self::Failure => "failed",
            Self::Cancelled => "cancelled",
            Self::Waiting => "waiting",
            Self::Queued => "queued",
        }
    }

    /// Whether `awf resume` may continue a run in this status.
    pub const fn resumable(self) -> bool {
        !matches!(self, Self::Success | Self::Queued)
    }
}

/// The state file of one run (`<data root>/states/<run_id>.json`): everything `awf resume`
/// needs. Secret values are masked (`***`); resuming asks for them again.
///
/// JSON shape: `{"schema_version": 1, "run_id", "parent_run_id", "workflow", "workflow_name",
/// "workflow_path", "status", "current_state", "inputs": {..}, "states": {name: StepState},
/// "started_at", "updated_at", "completed_at", "exit_code", "terminal", "error", "child_runs"?,
/// "working_dir"?}`
/// with times as RFC 3339 strings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSnapshot {
    /// Format version ([`STATE_SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// Run id.
    pub run_id: String,
    /// Parent run of a sub-workflow run.
    pub parent_run_id: Option<String>,
    /// Identifier the run was started with.
    pub workflow: String,
    /// YAML `name`.
    pub workflow_name: String,
    /// Absolute path of the workflow file, when known (resume reloads it from there).
    pub workflow_path: Option<PathBuf>,
    /// Status.
    pub status: StoredStatus,
    /// Top-level state being executed (or last executed).
    pub current_state: String,
    /// Effective inputs, secrets masked.
    pub inputs: Map<String, Value>,
    /// Every state that ran, by name (sessions of agent steps included).
    pub states: BTreeMap<String, StepState>,
    /// Run start.
    #[serde(with = "crate::timefmt::rfc3339")]
    pub started_at: SystemTime,
    /// Last write.
    #[serde(with = "crate::timefmt::rfc3339")]
    pub updated_at: SystemTime,
    /// Run end.
    #[serde(with = "crate::timefmt::rfc3339_opt", default)]
    pub completed_at: Option<SystemTime>,
    /// Process exit code of the run, once finished.
    pub exit_code: Option<u8>,
    /// Terminal reached.
    pub terminal: Option<String>,
    /// Failure.
    pub error: Option<ErrorBody>,
    /// The workflow's declared outputs, once finished.
    #[serde(default)]
    pub outputs: BTreeMap<String, Value>,
    /// Process id of the awf process that ran (or runs) it.
    #[serde(default)]
    pub owner_pid: Option<u32>,
    /// The top-level loop in progress and the index of its iteration in progress, so a
    /// resumed run continues the loop there instead of at its first iteration.
    #[serde(default)]
    pub loop_position: Option<LoopPosition>,
    /// What the run spent on agents so far (budgets; issue 14).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<crate::run::Spend>,
    /// A run parked on a usage limit (status `waiting`): when the limit resets.
    #[serde(
        with = "crate::timefmt::rfc3339_opt",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub waiting_until: Option<SystemTime>,
    /// The sub-workflow runs the run's `call_workflow` steps started, by the calling step's
    /// event path (`call`, `loop:2/call`, a parallel branch's name): the latest one at each
    /// path (`RunEvent::ChildRunStarted`). `awf resume` continues the one a resumed call
    /// finds unfinished instead of starting its child again. Left out of the JSON when none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub child_runs: BTreeMap<String, String>,
    /// The run's mocks (`--mock`): step → field → value, secrets masked. `awf resume` answers
    /// the steps still to run with them, as the run it continues would have. Left out of the
    /// JSON when none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mocks: BTreeMap<String, BTreeMap<String, String>>,
    /// The directory the run's steps run in (absolute; `RunEvent::RunStarted::working_dir`):
    /// `awf resume` runs the rest of the run there, whatever directory it is called from, and
    /// refuses the resume when it no longer exists. `None` for a run recorded before it was
    /// kept (resumed in the resumer's working directory, as then). Left out of the JSON when
    /// `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<PathBuf>,
}

/// The message of the `EXECUTION.RUN.CANCELLED` error a cancelled run records.
pub const CANCELLED_MESSAGE: &str = "workflow cancelled";

impl RunSnapshot {
    /// Records the run as ended cancelled at `at` by a cancel that found nobody running it
    /// (parked on a usage limit, or its awf process gone): status `cancelled`, no reset time,
    /// end and update time `at`, exit code 130 (a requested cancel's), the
    /// `EXECUTION.RUN.CANCELLED` error; its states and current state are kept, so `awf resume`
    /// continues it as any cancelled run.
    pub fn end_cancelled(&mut self, at: SystemTime) {
        self.end_cancelled_by(at, crate::run::CancelReason::Requested);
    }

    /// [`Self::end_cancelled`] by the cancel `reason`: its exit code is recorded (130 for
    /// SIGINT or a requested cancel, 143 for SIGTERM, 129 for SIGHUP), as a run cancelled
    /// while running records it (`awf resume` interrupted while it waits for a parked run's
    /// reset).
    pub fn end_cancelled_by(&mut self, at: SystemTime, reason: crate::run::CancelReason) {
        self.status = StoredStatus::Cancelled;
        self.waiting_until = None;
        self.completed_at = Some(at);
        self.updated_at = at;
        self.exit_code = Some(reason.exit_code());
        self.error =
            Some(AwfError::new(crate::ErrorCode::ExecutionRunCancelled, CANCELLED_MESSAGE).body());
    }
}

/// The detail key of an `EXECUTION.AGENT.USAGE_LIMIT` error whose reset lies within the
/// step's `usage_limit.max_wait`: the reset time (RFC 3339). A run that ends with such an
/// error is recorded as [`StoredStatus::Waiting`] until then.
pub const PARK_UNTIL: &str = "park_until";

/// Where a top-level loop was when the run stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoopPosition {
    /// The loop state.
    pub state: String,
    /// 0-based index of the iteration in progress.
    pub iteration: usize,
    /// The body step of this loop in progress in that iteration (the nested loop, when
    /// [`LoopPosition::inner`] is set; the parallel block while its branches run); `None`
    /// when not known (recorded before it was kept, or
    /// several body steps ran at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// `step` finished completed in this iteration and the next body step had not started:
    /// `awf resume` goes on from its recorded result instead of running it again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub step_completed: bool,
    /// When `step` is a parallel block: its branches that completed in this iteration, in
    /// the order they did. `awf resume` keeps them instead of running them again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub branches_completed: Vec<String>,
    /// The loop in progress inside that iteration (a nested loop), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inner: Option<Box<LoopPosition>>,
}

/// Reads state files.
pub trait StateStore: Send + Sync {
    /// Loads the state file of `run_id`.
    ///
    /// # Errors
    /// `USER.INPUT.VALIDATION_FAILED` when no run has that id (hint: `awf resume --list`);
    /// `SYSTEM.IO.READ_FAILED` when the file cannot be read or parsed.
    fn load(&self, run_id: &str) -> Result<RunSnapshot, AwfError>;

    /// Every state file, newest first.
    ///
    /// # Errors
    /// `SYSTEM.IO.READ_FAILED` when the directory cannot be read.
    fn list(&self) -> Result<Vec<RunSnapshot>, AwfError>;

    /// The run ids of the state files [`list`](Self::list) leaves out because they cannot
    /// be read or parsed (damaged, truncated, edited to another run's id, of a newer
    /// format), sorted. A store with no such files (or none that can be damaged) returns
    /// none.
    fn unreadable(&self) -> Vec<String> {
        Vec::new()
    }

    /// The run ids of every state file, those [`list`](Self::list) gives and those
    /// [`unreadable`](Self::unreadable) names, in no order: what a run id prefix is
    /// matched against. A store that can name its runs without reading them (a directory
    /// listing) does so; the default reads them.
    ///
    /// # Errors
    /// `SYSTEM.IO.READ_FAILED` when the directory cannot be read.
    fn ids(&self) -> Result<Vec<String>, AwfError> {
        let mut ids: Vec<String> = self.list()?.into_iter().map(|s| s.run_id).collect();
        ids.extend(self.unreadable());
        Ok(ids)
    }

    /// [`list`](Self::list) and [`unreadable`](Self::unreadable) in one pass over the
    /// state files, leaving out unread the runs of `skip` (those the caller knows it does
    /// not want, e.g. runs the history records as ended successfully).
    ///
    /// # Errors
    /// `SYSTEM.IO.READ_FAILED` when the directory cannot be read.
    fn scan(
        &self,
        skip: &std::collections::BTreeSet<String>,
    ) -> Result<(Vec<RunSnapshot>, Vec<String>), AwfError> {
        let mut runs = self.list()?;
        runs.retain(|s| !skip.contains(&s.run_id));
        let mut unreadable = self.unreadable();
        unreadable.retain(|id| !skip.contains(id));
        Ok((runs, unreadable))
    }

    /// Writes a snapshot atomically (temp file, fsync, rename; mode 0600).
    ///
    /// # Errors
    /// `SYSTEM.IO.WRITE_FAILED`.
    fn save(&self, snapshot: &RunSnapshot) -> Result<(), AwfError>;

    /// The interpolated `message` of the success terminal the run of `run_id` last ended on
    /// (secrets masked; `RunResult::message`), as the store recorded it at the run's end;
    /// `None` when it ended without one, has not ended, is unknown, or the store does not
    /// keep messages (the default).
    fn terminal_message(&self, run_id: &str) -> Option<String> {
        let _ = run_id;
        None
    }
}

/// One history row (one per run, updated in place).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryRecord {
    /// Run id.
    pub id: String,
    /// Identifier the run was started with.
    pub workflow_id: String,
    /// YAML `name`.
    pub workflow_name: String,
    /// Status.
    pub status: StoredStatus,
    /// Process exit code, once finished.
    pub exit_code: Option<u8>,
    /// Start time, milliseconds since the Unix epoch.
    pub started_at_ms: u64,
    /// End time, milliseconds since the Unix epoch.
    pub completed_at_ms: Option<u64>,
    /// Wall time.
    pub duration_ms: Option<u64>,
    /// Failure text.
    pub error_message: Option<String>,
    /// Parent run of a sub-workflow run.
    pub parent_run_id: Option<String>,
    /// What the run spent on agents (budgets; issue 14), once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<crate::run::Spend>,
}

/// Filter of `awf history`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HistoryFilter {
    /// Workflow name or identifier.
    pub workflow: Option<String>,
    /// Status.
    pub status: Option<StoredStatus>,
    /// Runs started at or after this time (milliseconds since the epoch).
    pub since_ms: Option<u64>,
    /// At most this many rows, newest first.
    pub limit: Option<usize>,
}

impl HistoryFilter {
    /// Whether the statistics count a run whose parent run is `parent_run_id`: a run that
    /// another one started (a `call_workflow` child) is part of that run, not an execution
    /// of its own (trial: one run calling two sub-workflows counted as 3), except when the
    /// filter names a workflow: then every run of it counts, wherever it was started. (The
    /// history lists every run all the same, as AWF (Go)'s does.)
    pub fn counts(&self, parent_run_id: Option<&str>) -> bool {
        self.counts_sub_runs() || parent_run_id.is_none()
    }

    /// Whether the statistics count the runs that another run started (see
    /// [`HistoryFilter::counts`]): only when the filter names a workflow.
    pub fn counts_sub_runs(&self) -> bool {
        self.workflow.is_some()
    }
}

/// `awf history --stats`.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct HistoryStats {
    /// Runs matching the filter that it counts ([`HistoryFilter::counts`]: not a
    /// sub-workflow's runs, unless the filter names a workflow).
    pub total_executions: u64,
    /// Successful runs.
    pub success_count: u64,
    /// Failed runs.
    pub failed_count: u64,
    /// Cancelled runs.
    pub cancelled_count: u64,
    /// Runs still running (or crashed: see `process_gone_count`).
    pub running_count: u64,
    /// Of the runs recorded as running, those whose awf process is gone (killed, crashed),
    /// as `awf history` marks them; counted here and not in `running_count` once a caller
    /// that can tell (it reads the state files and run locks) has moved them. Left out of the
    /// JSON when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub process_gone_count: u64,
    /// Runs parked on a usage limit until its reset time (`awf resume` continues them);
    /// left out of the JSON when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub waiting_count: u64,
    /// Runs of the shared store's queue no worker started yet (`awf serve --store`); left
    /// out of the JSON when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub queued_count: u64,
    /// Mean duration of finished runs.
    pub avg_duration_ms: Option<u64>,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Reads the run history.
pub trait HistoryStore: Send + Sync {
    /// Rows matching `filter`, newest first.
    ///
    /// # Errors
    /// `SYSTEM.IO.READ_FAILED` when the database cannot be read.
    fn list(&self, filter: &HistoryFilter) -> Result<Vec<HistoryRecord>, AwfError>;

    /// Totals over the rows matching `filter` (its `limit` is ignored) that
    /// [`HistoryFilter::counts`] counts: the runs a user started, not a sub-workflow's runs
    /// (part of their parent's), unless the filter names a workflow.
    ///
    /// # Errors
    /// `SYSTEM.IO.READ_FAILED`.
    fn stats(&self, filter: &HistoryFilter) -> Result<HistoryStats, AwfError>;

    /// One row.
    ///
    /// # Errors
    /// `SYSTEM.IO.READ_FAILED`.
    fn get(&self, run_id: &str) -> Result<Option<HistoryRecord>, AwfError>;

    /// The ids of the rows matching `filter` (its `limit` kept), without the rest of
    /// each row. The default reads the rows.
    ///
    /// # Errors
    /// `SYSTEM.IO.READ_FAILED`.
    fn ids(&self, filter: &HistoryFilter) -> Result<Vec<String>, AwfError> {
        Ok(self.list(filter)?.into_iter().map(|r| r.id).collect())
    }

    /// Writes how a run ended into its row: a row an awf killed between its last state file
    /// and its history row left `running` while the state file says the run ended (see
    /// `awf_application::runs::settle_ended_rows`), so that filters and totals agree with
    /// what is shown. A store whose rows are written elsewhere ignores it (the default).
    ///
    /// # Errors
    /// The store's write error.
    fn settle(&self, record: &HistoryRecord) -> Result<(), AwfError> {
        let _ = record;
        Ok(())
    }
}

#[cfg(test)]
mod go_name_tests {
    use super::StoredStatus;

    /// AWF (Go) says `completed`/`failed` where the state file says `success`/`failure`.
    #[test]
    fn go_names_differ_from_the_wire_text_for_success_and_failure() {
        let all = [
            StoredStatus::Running,
            StoredStatus::Success,
            StoredStatus::Failure,
            StoredStatus::Cancelled,
            StoredStatus::Waiting,
        ];
        let got: Vec<(&str, &str)> = all.iter().map(|s| (s.as_str(), s.go_name())).collect();
        assert_eq!(
            got,
            [
                ("running", "running"),
                ("success", "completed"),
                ("failure", "failed"),
                ("cancelled", "cancelled"),
                ("waiting", "waiting"),
            ]
        );
    }
}

/// A recorded run's event log as read back from the store: what a run service replays to a
/// subscriber of a run it does not hold in memory (evicted after its TTL, run by another
/// process, or from before a restart).
///
/// Positions are those of the run service's log (domain/src/ports/service.rs,
/// [`crate::ports::service::SubscriptionItem`]): every envelope of the root run and of its
/// sub-workflow runs, in the order they were published, numbered from 1; a resumed run's
/// attempts follow one another in one log.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecordedLog {
    /// The envelopes from the requested position on, in log order: `envelopes[i]` is at
    /// position `from + i`.
    pub envelopes: Vec<crate::event::EventEnvelope>,
    /// The position of the last envelope recorded so far (0 for an empty log).
    pub last_position: u64,
    /// Whether the log is complete: its last envelope of the root run is the root's
    /// `RunFinished` (a resumed run: of its last attempt). An incomplete log belongs to a run
    /// still running (maybe in another process) or one that was killed.
    pub complete: bool,
}

/// Reads back the recorded event log of a run (the file store: its transcripts).
pub trait EventLogReader: Send + Sync {
    /// The log of root run `run_id` from position `from` (1-based; 0 is taken as 1; past
    /// the end: no envelopes). `Ok(None)` when nothing is recorded for that run.
    ///
    /// # Errors
    /// `SYSTEM.IO.READ_FAILED` when the record exists but cannot be read.
    fn read_log(
        &self,
        run_id: &crate::run::RunId,
        from: u64,
    ) -> Result<Option<RecordedLog>, AwfError>;
}
