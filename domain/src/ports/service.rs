//! The run service: the one driving port through which every front-end (terminal, ACP, MCP,
//! HTTP, a worker of the shared store) starts, watches, answers and cancels runs.
//!
//! Reference: shared/design/architecture.md ("The run service: the one way in").

use crate::error::AwfError;
use crate::event::EventEnvelope;
use crate::interaction::Answer;
use crate::ports::facade::ResumeRequest;
use crate::ports::facade::RunRequest;
use crate::ports::store::StoredStatus;
use crate::run::CancelReason;
use crate::run::RunId;
use crate::run::RunResult;

/// What a subscription yields, in order.
///
/// Positions: a run's log holds every envelope its publisher got, the root run's and those
/// of its sub-workflow runs, in the order they were published, numbered 1, 2, 3, … by the
/// log itself. `position` is that number: the cursor of [`RunService::subscribe`] (what an
/// SSE `Last-Event-ID` or an ACP session reload names). It is not the envelope's `seq`, which
/// stays per run id (a child run counts from 1; a resumed run's transcript shifts it).
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // nearly every item is an event; boxing would not save
pub enum SubscriptionItem {
    /// The next event of the run's log.
    Event {
        /// Position in the run's log (1-based, gap-free, strictly increasing).
        position: u64,
        /// The event.
        envelope: Box<EventEnvelope>,
    },
    /// The subscriber fell too far behind: the events before `resume_seq` left the memory
    /// of the log (it keeps a bounded window, always the newest events) before this
    /// subscriber read them. The subscription goes on at `resume_seq`; the gap can be re-read
    /// from the transcript.
    Lagged {
        /// First position the subscription will deliver next.
        resume_seq: u64,
    },
}

/// A subscriber's view of one run's event log: first the past events from the requested
/// position, then live ones, with no gap and no duplicate (a gap only as an explicit
/// [`SubscriptionItem::Lagged`]); ends (`None`) after the run's last event (`RunFinished` of
/// the root run) was delivered. Reading never blocks the run: the engine appends to the log
/// and goes on whether or not anyone reads.
#[async_trait::async_trait]
pub trait Subscription: Send {
    /// The next item; `None` once the run ended and everything was delivered.
    async fn next(&mut self) -> Option<SubscriptionItem>;
}

/// Where a run is, as the service knows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunPhase {
    /// Driven by this process now.
    Live,
    /// Ended in this process and still in memory (until its TTL passes).
    Finished,
    /// Read from the store only.
    Recorded,
}

/// A run as the service shows it (`get`, `list`): live and finished runs of this process, and
/// runs read from the state store.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RunView {
    /// Run id.
    pub run_id: RunId,
    /// The run that called this one (`call_workflow`), for a recorded sub-workflow run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<RunId>,
    /// Identifier the run was started with (name or path).
    pub workflow: String,
    /// Where the run is.
    pub phase: RunPhase,
    /// Its status (`running` while live, and for a recorded run that never finished).
    pub status: StoredStatus,
    /// The top-level state being executed (or last executed), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_state: Option<String>,
    /// Process exit code, once finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<u8>,
    /// A run parked on a usage limit (status `waiting`): when the limit resets.
    #[serde(
        with = "crate::timefmt::rfc3339_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub waiting_until: Option<std::time::SystemTime>,
}

/// Starts, watches, answers and cancels runs by id.
#[async_trait::async_trait]
pub trait RunService: Send + Sync {
    /// Loads and validates the workflow and inputs, registers the run and starts it. Returns
    /// once the run's start is on record where the service records runs (a history read that
    /// follows lists it), unless the run first asks for a missing input (it is recorded once
    /// it starts).
    ///
    /// # Errors
    /// `USER.FACADE.*` and `WORKFLOW.*` load and validation errors, `USER.INPUT.*`, and
    /// `USER.FACADE.RUN_LIMIT` when the cap on concurrent runs is reached.
    async fn start(&self, request: RunRequest) -> Result<RunId, AwfError>;

    /// Continues an interrupted or failed recorded run under the same id.
    ///
    /// # Errors
    /// As [`RunService::start`], and `USER.INPUT.VALIDATION_FAILED` for an unknown, finished
    /// or still-running run.
    async fn resume(&self, request: ResumeRequest) -> Result<RunId, AwfError>;

    /// One run: live or finished in this process, else read from the state store.
    ///
    /// # Errors
    /// `USER.FACADE.RUN_NOT_FOUND` when neither holds it; `SYSTEM.IO.READ_FAILED` when its
    /// state file cannot be read.
    fn get(&self, run_id: &RunId) -> Result<RunView, AwfError>;

    /// The run id that `query` names: a run id, or a unique prefix of one (as `awf resume`
    /// and `awf status` take it), among the runs of this process and the recorded ones. The
    /// default takes `query` as the full id.
    ///
    /// # Errors
    /// `USER.FACADE.RUN_NOT_FOUND` when no run matches; `USER.INPUT.VALIDATION_FAILED` when
    /// the prefix is ambiguous (the hint lists candidates); `SYSTEM.IO.READ_FAILED` when the
    /// store cannot be listed.
    fn resolve(&self, query: &str) -> Result<RunId, AwfError> {
        Ok(RunId(query.to_owned()))
    }

    /// Every run, newest first within each group: live ones first, then those finished in
    /// memory, then the recorded ones that are not in memory.
    ///
    /// # Errors
    /// `SYSTEM.IO.READ_FAILED` when the store cannot be listed.
    fn list(&self) -> Result<Vec<RunView>, AwfError>;

    /// Subscribes to a run's event log from position `from_seq` (1 = from the start; 0 is
    /// taken as 1; a position past the end waits for it).
    ///
    /// A run this process does not hold (evicted after its TTL, run by another process, or
    /// from before a restart) is read back from the store when the service has an
    /// [`crate::ports::EventLogReader`], at the same positions as live; while its state says
    /// `running` and its owner process is alive the subscription follows the record as it
    /// grows, until the root's `RunFinished` (or the owner's end). A resumed run's log holds
    /// its earlier attempts first (read back when they are no longer in memory).
    ///
    /// # Errors
    /// `USER.FACADE.RUN_NOT_FOUND` for a run neither this process nor the store knows;
    /// `SYSTEM.IO.READ_FAILED` when its record cannot be read.
    fn subscribe(&self, run_id: &RunId, from_seq: u64) -> Result<Box<dyn Subscription>, AwfError>;

    /// [`RunService::subscribe`] for a snapshot read without waiting (`now_or_never`): what
    /// a live run's log holds in memory is delivered at once, and a range that left memory is
    /// a [`SubscriptionItem::Lagged`] rather than read back from the store (which `subscribe`
    /// does, and which would have to wait). The default is `subscribe`.
    ///
    /// # Errors
    /// As [`RunService::subscribe`].
    fn subscribe_kept(
        &self,
        run_id: &RunId,
        from_seq: u64,
    ) -> Result<Box<dyn Subscription>, AwfError> {
        self.subscribe(run_id, from_seq)
    }

    /// Answers a pending interaction request of any live run.
    ///
    /// # Errors
    /// `USER.FACADE.INPUT_REJECTED` when nothing with that id is pending or the answer does
    /// not fit the request's kind.
    fn respond(&self, request_id: &str, answer: Answer) -> Result<(), AwfError>;

    /// Asks a live run to stop (SIGTERM → 5 s → SIGKILL to its processes; `workflow_cancel`
    /// hooks run; pending requests resolve as cancelled). Idempotent.
    ///
    /// # Errors
    /// `USER.FACADE.RUN_NOT_FOUND` for a run that is not live here.
    fn cancel(&self, run_id: &RunId, reason: CancelReason) -> Result<(), AwfError>;

    /// Waits for a run to end and gives its result.
    ///
    /// # Errors
    /// `USER.FACADE.RUN_NOT_FOUND` for a run this process does not hold (see `get` for
    /// recorded runs).
    async fn wait(&self, run_id: &RunId) -> Result<RunResult, AwfError>;
}
