//! The run service: the one driving port through which every front-end (terminal, ACP, MCP,
//! HTTP, a worker of the shared store) starts, watches, answers and cancels runs.
//!
//! Reference: shared/design/architecture.md ("The run service: the one way in").

use crate::error::AwfError;
use crate::event::EventEnvelope;
use crate::interaction::Answer;
use crate::ports::facade::ResumeRequest;
use crate::ports::facade::RunRequest;
use crate::run::CancelReason;
use crate::run::RunId;
use crate::run::RunResult;

/// What a subscription yields, in order.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // nearly every item is an event; `Lagged` is rare
pub enum SubscriptionItem {
    /// The next event of the run's log.
    Event(EventEnvelope),
    /// The subscriber fell too far behind and events were dropped for it: the log continues
    /// at `resume_seq` (re-read the gap from the transcript, or subscribe again from the
    /// last seq seen).
    Lagged {
        /// First position the subscription will deliver next.
        resume_seq: u64,
    },
}

/// A subscriber's view of one run's event log: first the past events from the requested
/// position, then live ones, with no gap and no duplicate; ends (`None`) after the run's last
/// event (`RunFinished` of the root run) was delivered.
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

/// Starts, watches, answers and cancels runs by id.
#[async_trait::async_trait]
pub trait RunService: Send + Sync {
    /// Loads and validates the workflow and inputs, registers the run and starts it.
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

    /// Subscribes to a run's event log from position `from_seq` (1 = from the start).
    ///
    /// # Errors
    /// `USER.FACADE.RUN_NOT_FOUND` for a run this process does not hold.
    fn subscribe(&self, run_id: &RunId, from_seq: u64) -> Result<Box<dyn Subscription>, AwfError>;

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
    /// `USER.FACADE.RUN_NOT_FOUND` for an unknown run.
    async fn wait(&self, run_id: &RunId) -> Result<RunResult, AwfError>;
}
