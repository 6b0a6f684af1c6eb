//! Typed interactions: the requests a run is waiting on (missing inputs, conversation turns,
//! breakpoints, approval gates), answered through `respond(request_id, Answer)`.
//!
//! The engine asks with [`Interaction::ask`]: it registers the request, emits
//! `InteractionRequired`, waits for an answer that fits the request's kind, its timeout or a
//! cancel, and emits `InteractionResolved`. It never parses user text: front-ends turn what
//! the user did into an [`Answer`]. Source: shared/design/architecture.md ("The run service").

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::event::RunEvent;
use awf_domain::interaction::Answer;
use awf_domain::interaction::ApprovalOption;
use awf_domain::interaction::InteractionRequest;
use awf_domain::interaction::RequestKind;
use awf_domain::interaction::Resolution;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::Emitter;
use super::lock;

/// Checks an answer before a request takes it: `Err` refuses it (the error is `respond`'s)
/// and the request stays pending, to be answered again.
pub(crate) type AnswerCheck = Box<dyn Fn(&Answer) -> Result<(), AwfError> + Send + Sync>;

/// A request waiting for its answer.
struct Pending {
    kind: RequestKind,
    tx: oneshot::Sender<Answer>,
    check: Option<AnswerCheck>,
}

/// The requests of one root run and its sub-runs, and the approval decisions remembered for
/// the run (`allow_always`, `reject_always`). Shared by the runs and the run's handle.
pub(crate) struct Interaction {
    /// Makes request ids unique in the process and across a run's attempts: the root run's
    /// id, with a tag of the attempt's own in a resumed attempt (`Facade::launch`).
    prefix: String,
    pending: Mutex<HashMap<String, Pending>>,
    next: AtomicU64,
    /// `<run id>/<state>` → the remembered option of that gate.
    remembered: Mutex<HashMap<String, ApprovalOption>>,
}

impl std::fmt::Debug for Interaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interaction")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// Where a request is asked from: the run's emitter and the event's position.
pub(crate) struct AskAt<'a> {
    pub(crate) emitter: &'a Emitter,
    pub(crate) path: &'a str,
    pub(crate) iteration: Option<usize>,
    pub(crate) step: Option<&'a str>,
    pub(crate) cancel: &'a CancellationToken,
}

impl Interaction {
    /// No request pending; ids are `<prefix>:<n>` (`prefix`: the root run id, or in a
    /// resumed attempt the root run id and the attempt's tag, `<run id>:<tag>`).
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
            pending: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
            remembered: Mutex::new(HashMap::new()),
        }
    }

    /// Ids of the requests waiting now, sorted.
    pub(crate) fn pending_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = lock(&self.pending).keys().cloned().collect();
        ids.sort();
        ids
    }

    fn register(
        &self,
        kind: RequestKind,
        check: Option<AnswerCheck>,
    ) -> (String, oneshot::Receiver<Answer>) {
        let n = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let id = format!("{}:{n}", self.prefix);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id.clone(), Pending { kind, tx, check });
        (id, rx)
    }

    /// Answers a pending request. A wrong-kind answer, or one its check refuses, leaves it
    /// pending.
    ///
    /// # Errors
    /// `USER.FACADE.INPUT_REJECTED` when no request with that id is pending, or the answer
    /// does not fit its kind (a value for an approval, an option it does not offer, …); the
    /// request's own check's error when that refuses the answer (a missing input's value
    /// that breaks a rule: `USER.INPUT.VALIDATION_FAILED`).
    pub(crate) fn respond(&self, request_id: &str, answer: Answer) -> Result<(), AwfError> {
        let mut pending = lock(&self.pending);
        let Some(p) = pending.get(request_id) else {
            return Err(AwfError::new(
                ErrorCode::UserFacadeInputRejected,
                format!("no pending request with id {request_id}"),
            )
            .with_hint("the request was answered, timed out or cancelled already"));
        };
        if let Err(why) = p.kind.accepts(&answer) {
            return Err(AwfError::new(
                ErrorCode::UserFacadeInputRejected,
                format!("request {request_id}: {why}"),
            )
            .with_hint("the request is still pending: answer it with the kind it asks for"));
        }
        if let Some(check) = &p.check {
            check(&answer)?;
        }
        let Some(p) = pending.remove(request_id) else {
            return Err(AwfError::new(
                ErrorCode::UserFacadeInputRejected,
                format!("no pending request with id {request_id}"),
            ));
        };
        drop(pending);
        p.tx.send(answer).map_err(|_| {
            AwfError::new(
                ErrorCode::UserFacadeInputRejected,
                format!("request {request_id} is no longer waiting"),
            )
        })
    }

    /// Asks `kind` and waits for its resolution: an answer, `timeout`, or a cancel of
    /// `at.cancel`. Emits `InteractionRequired` first and `InteractionResolved` last;
    /// `shown` masks what the resolved event carries (secret values). Already cancelled:
    /// [`Resolution::Cancelled`] at once, nothing asked (no event).
    pub(crate) async fn ask(
        &self,
        at: &AskAt<'_>,
        kind: RequestKind,
        timeout: Option<Duration>,
        shown: impl FnOnce(&Resolution) -> Resolution,
    ) -> Resolution {
        self.ask_checked(at, kind, timeout, None, shown).await
    }

    /// [`Interaction::ask`] with `check` run on each answer before it is taken: an answer it
    /// refuses is `respond`'s error and the request stays pending (same id, no new event).
    pub(crate) async fn ask_checked(
        &self,
        at: &AskAt<'_>,
        kind: RequestKind,
        timeout: Option<Duration>,
        check: Option<AnswerCheck>,
        shown: impl FnOnce(&Resolution) -> Resolution,
    ) -> Resolution {
        // A run that is being cancelled asks nothing new.
        if at.cancel.is_cancelled() {
            return Resolution::Cancelled;
        }
        let (request_id, rx) = self.register(kind.clone(), check);
        let request = InteractionRequest {
            request_id: request_id.clone(),
            step: at.step.map(str::to_owned),
            kind,
            timeout_ms: timeout.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        };
        at.emitter.emit(
            at.path,
            at.iteration,
            RunEvent::InteractionRequired {
                request: Box::new(request),
            },
        );
        let timer = async {
            match timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        let resolution = tokio::select! {
            r = rx => match r {
                Ok(a) => Resolution::Answered(a),
                // The sender went away without answering (never happens while pending).
                Err(_) => Resolution::Cancelled,
            },
            () = at.cancel.cancelled() => Resolution::Cancelled,
            () = timer => Resolution::TimedOut,
        };
        if !matches!(resolution, Resolution::Answered(_)) {
            lock(&self.pending).remove(&request_id);
        }
        at.emitter.emit(
            at.path,
            at.iteration,
            RunEvent::InteractionResolved {
                request_id,
                resolution: shown(&resolution),
            },
        );
        resolution
    }

    /// The option remembered for gate `key` (`allow_always` / `reject_always` chosen before
    /// in this run).
    pub(crate) fn remembered(&self, key: &str) -> Option<ApprovalOption> {
        lock(&self.remembered).get(key).cloned()
    }

    /// Remembers `option` for gate `key`.
    pub(crate) fn remember(&self, key: &str, option: ApprovalOption) {
        lock(&self.remembered).insert(key.to_owned(), option);
    }
}
