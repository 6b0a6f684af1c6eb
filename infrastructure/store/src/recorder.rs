//! The writer side: [`Recorder`] is an [`EventPublisher`] that hands every event to one background
//! thread, which projects the stream onto the state files, the history rows, the audit trail
//! and the transcripts.
//!
//! The writer drains whatever is queued as one batch, applies every event of the batch to its
//! in-memory projections, and then writes: transcript lines are appended once per file and
//! batch, and each run whose snapshot changed gets its state file written once, with its
//! newest content (coalescing). History rows and audit lines are written as their events are
//! applied. A write failure is recorded (see [`Recorder::take_errors`],
//! [`Recorder::on_error`]) and never stops the run.
//!
//! The writer never waits for the disk: every `fsync` (state files, their directory,
//! journals, transcripts, the audit trail) is made by a second thread, the syncer, in the
//! order asked. What the writer wrote (`write`, `rename`) survives a kill of the process at
//! once; the syncs guard against a crash of the machine. A writer that waited for its syncs
//! left the events of the other runs (a parent beside its sub-workflows) queued in memory
//! meanwhile, where a kill lost them.
//!
//! Source: spec/workflow.md §3.11, §3.14, §3.15; design/decisions.md ("Storage").

use std::collections::BTreeSet;
use std::collections::HashMap;
use std::fs::File;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::thread::JoinHandle;

use awf_domain::event::EventEnvelope;
use awf_domain::event::EventPublisher;
use awf_domain::event::RunEvent;
use awf_domain::projection;
use awf_domain::projection::RunProjection;
use awf_domain::projection::millis;
use rusqlite::Connection;
use serde_json::json;

use crate::AuditTarget;
use crate::StorePaths;
use crate::audit::AuditFile;
use crate::history;
use crate::inbox::Inbox;
use crate::inbox::Urgency;
use crate::state;
use crate::transcript;

/// Called with the text of a write failure (once per kind of target: state, history, audit,
/// transcript), e.g. to print a warning on stderr.
pub use awf_domain::write_failures::ErrorCallback;

/// Longest time a written journal line waits before it is synced to the disk. A journal
/// line is written (one `write`) with its batch, so a killed awf loses nothing; the sync
/// only guards against a crash of the machine, and syncing once per batch (twice per step)
/// was most of the cost of recording.
const JOURNAL_SYNC_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// How far behind the run the writer may be before [`Recorder::settle`] makes the run wait
/// for it: events emitted this long ago and not yet written (the writer collects events for
/// [`HOLD`](crate::inbox::HOLD), so a writer keeping up is never this far behind).
const LAG_BOUND: std::time::Duration = std::time::Duration::from_millis(5);

enum Msg {
    Event(Box<EventEnvelope>),
    Flush(Ack),
    /// Answer once the events queued before are written (not synced): [`Recorder::settle`].
    Written(tokio::sync::oneshot::Sender<()>),
    /// Answer once the events queued before are written, their history rows included (not
    /// synced): `written`.
    Recorded(tokio::sync::oneshot::Sender<()>),
    /// Test hook: acknowledge, then wait until the release channel is used or dropped.
    #[cfg(test)]
    Hold(mpsc::SyncSender<()>, mpsc::Receiver<()>),
    /// Test hook: the same, for the syncer (the writer goes on).
    #[cfg(test)]
    HoldSyncer(mpsc::SyncSender<()>, mpsc::Receiver<()>),
}

/// How soon the writer must see `event` (see [`Inbox`]): the run's start and end, child
/// runs and questions to the user at once; a step's start at once after a step's end;
/// the rest (steps finishing, output, messages, tool calls) within [`HOLD`](crate::inbox::HOLD).
fn urgency(event: &RunEvent) -> Urgency {
    match event {
        RunEvent::RunStarted { .. }
        | RunEvent::RunFinished { .. }
        | RunEvent::ChildRunStarted { .. }
        | RunEvent::InteractionRequired { .. }
        | RunEvent::InteractionResolved { .. } => Urgency::Now,
        RunEvent::StepStarted { .. } => Urgency::StepStart,
        RunEvent::StepRetrying { .. }
        | RunEvent::StepFinished { .. }
        | RunEvent::OutputChunk { .. }
        | RunEvent::Log { .. }
        | RunEvent::AgentMessageChunk { .. }
        | RunEvent::AgentThoughtChunk { .. }
        | RunEvent::ToolCall { .. }
        | RunEvent::ToolCallResult { .. } => Urgency::Soon,
    }
}

/// Failure bookkeeping shared by the handles and the writer thread.
#[derive(Default)]
struct Shared {
    failures: awf_domain::write_failures::WriteFailures,
    state_writes: AtomicU64,
    journal_syncs: AtomicU64,
    /// Jobs the syncer has completed (files synced, then their follow-ups done).
    synced_jobs: AtomicU64,
    /// Events queued so far, and written so far (applied and their batch written).
    emitted: AtomicU64,
    written: AtomicU64,
    /// Events whose history rows are written too (the rows follow a batch's answers).
    recorded: AtomicU64,
    /// The count of events queued when a run (or sub-workflow run) last started: its record
    /// is written before any of its steps runs.
    starts: AtomicU64,
    /// Event counts at the settles not yet written, with when they were asked, oldest
    /// first: how far behind the writer is.
    marks: Mutex<std::collections::VecDeque<(u64, std::time::Instant)>>,
    /// Test hook: the run ids whose state was written, in the order written.
    #[cfg(test)]
    state_order: Mutex<Vec<String>>,
}

impl Shared {
    fn report(&self, target: &'static str, message: String) {
        self.failures.report(target, message);
    }
}

struct Inner {
    tx: Option<Arc<Inbox<Msg>>>,
    handle: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
    /// Where the writer writes (read back by [`Recorder::end_recorded`]).
    paths: StorePaths,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the inbox lets the writer drain what is queued and stop.
        if let Some(inbox) = self.tx.take() {
            inbox.close();
        }
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The event-stream writer of a [`Store`](crate::Store): an [`EventPublisher`] whose `emit` only
/// queues the event (no I/O on the caller's thread) for one background writer thread.
///
/// Clones share the same writer. The writer stops once every clone (and the store) is
/// dropped, after writing what was queued.
///
/// Projections, per run (events of sub-workflow runs are recognised by their own `run_id`):
/// - state file `<root>/states/<run_id>.json`
///   ([`RunSnapshot`](awf_domain::ports::store::RunSnapshot)): written at `RunStarted`, after
///   top-level `StepStarted` (its step becomes `current_state`; branches of a top-level parallel
///   block do not), after every `StepFinished` (recorded by state name, loop bodies and
///   branches included) and at `RunFinished`; atomically, mode
///   0600; when several updates of one run are queued only the newest is written. A resumed
///   run (`resumed_from` set) keeps the states recorded before.
/// - history row: inserted at `RunStarted` (`running`), updated in place at `RunFinished`.
/// - audit: one `workflow.started` and one `workflow.completed` line.
/// - transcript `<root>/transcripts/<run_id>.jsonl`: one line per event (see the crate docs).
/// - output files `<root>/outputs/<run_id>/…`: a recorded state's `output` / `stderr` over
///   64 KiB, kept once; a stream is written to its file as it arrives (once past 64 KiB,
///   up to 64 MiB), and that file becomes the stored copy when the state's text is its
///   beginning (else the text is written anew). Replaced files are removed after the record
///   that replaces them; at the end of the run, every file no record names.
///
/// Source: spec/workflow.md §3.11, §3.14, §3.15.
#[derive(Clone)]
pub struct Recorder {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("running", &self.inner.tx.is_some())
            .field("state_writes", &self.state_writes())
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// Starts the writer thread for `paths` (directories are expected to exist; see
    /// [`Store::open`](crate::Store::open)).
    pub(crate) fn start(paths: StorePaths) -> Self {
        let shared = Arc::new(Shared::default());
        let tx = Arc::new(Inbox::new());
        let rx = Arc::clone(&tx);
        let writer = Writer::new(paths.clone(), Arc::clone(&shared));
        let spawned = std::thread::Builder::new()
            .name("awf-store-writer".into())
            .spawn(move || writer.run(&rx));
        let (tx, handle) = match spawned {
            Ok(h) => (Some(tx), Some(h)),
            Err(e) => {
                shared.report(
                    "recorder",
                    format!("cannot start the store writer thread: {e}"),
                );
                (None, None)
            }
        };
        Self {
            inner: Arc::new(Inner {
                tx,
                handle,
                shared,
                paths,
            }),
        }
    }

    /// Blocks until every event queued before this call is written: state files renamed and
    /// fsynced, journal lines appended and fsynced, history rows committed, audit and
    /// transcript lines appended and fsynced.
    /// Returns at once when the writer is not running.
    pub fn flush(&self) {
        let Some(tx) = &self.inner.tx else {
            return;
        };
        let (ack_tx, ack_rx) = mpsc::sync_channel(1);
        if tx.push(Msg::Flush(Ack::Thread(ack_tx)), Urgency::Now) {
            let _ = ack_rx.recv();
        }
    }

    /// [`flush`](Self::flush) as a future, for async callers: no thread blocks meanwhile.
    /// Resolves at once when the writer is not running.
    pub fn flushed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (ack_tx, ack_rx) = tokio::sync::oneshot::channel();
        let pushed = self
            .inner
            .tx
            .as_ref()
            .is_some_and(|tx| tx.push(Msg::Flush(Ack::Task(ack_tx)), Urgency::Now));
        async move {
            if pushed {
                // An error: the writer is gone (its failure is reported); nothing to wait for.
                let _ = ack_rx.await;
            }
        }
    }

    /// Sets the function told about write failures (once per kind of target). Failures that
    /// happened before it was set are only in [`take_errors`](Self::take_errors).
    pub fn on_error(&self, callback: ErrorCallback) {
        self.inner.shared.failures.on_error(callback);
    }

    /// Takes the texts of the write failures so far (at most 100 are kept).
    pub fn take_errors(&self) -> Vec<String> {
        self.inner.shared.failures.take()
    }

    /// Whether a write that `awf resume`, `status` or `history` depend on failed (a state
    /// file, its journal, a history row, a step's output file, whose text the record then
    /// keeps cut, or the writer itself); audit and transcript failures are not counted.
    pub fn run_record_failed(&self) -> bool {
        self.inner
            .shared
            .failures
            .any_of(&["state", "history", "recorder", "output"])
    }

    /// Whether the history database is the only part of the run's record that failed (the
    /// state files were written: `awf status` and `awf resume` know the run; `awf history`
    /// does not list it), as when history.db is damaged.
    pub fn only_history_failed(&self) -> bool {
        let f = &self.inner.shared.failures;
        f.any_of(&["history"]) && !f.any_of(&["state", "recorder", "output"])
    }

    /// Whether step output files are the only part of the run's record that failed: the
    /// run's end was written (`awf status`, `awf history` and `awf resume` agree on it), and
    /// the record keeps those outputs cut to their first 64 KiB.
    pub fn only_outputs_failed(&self) -> bool {
        let f = &self.inner.shared.failures;
        f.any_of(&["output"]) && !f.any_of(&["state", "history", "recorder"])
    }

    /// Whether the state file of run `run_id` holds its end, as written whole (`success`,
    /// `failure` or `cancelled`): then a failed write of its journal (or of a state file
    /// before its last) cost the run nothing once it ended, since the last one holds every
    /// step. Read back from the disk; call after [`flush`](Self::flush).
    pub fn end_recorded(&self, run_id: &str) -> bool {
        state::written_status(&self.inner.paths, run_id).is_some_and(|(s, _)| {
            use awf_domain::ports::store::StoredStatus;
            matches!(
                s,
                StoredStatus::Success | StoredStatus::Failure | StoredStatus::Cancelled
            )
        })
    }

    /// Whether a state file or journal write (or sync) failed.
    pub fn state_failed(&self) -> bool {
        self.inner.shared.failures.any_of(&["state"])
    }

    /// The text of the first failed write of a state file or journal (or of the writer
    /// itself), if one failed: the run's steps can no longer be recorded.
    pub fn state_failure(&self) -> Option<String> {
        self.inner.shared.failures.first_of(&["recorder", "state"])
    }

    /// Whether the history database failed (a row not written).
    pub fn history_failed(&self) -> bool {
        self.inner.shared.failures.any_of(&["history"])
    }

    /// Whether a step's output file failed (the record keeps that output cut).
    pub fn outputs_failed(&self) -> bool {
        self.inner.shared.failures.any_of(&["output"])
    }

    /// Whether the writer itself failed (its thread could not start or panicked).
    pub fn writer_failed(&self) -> bool {
        self.inner.shared.failures.any_of(&["recorder"])
    }

    /// How many state files the writer has written so far (diagnostics; shows coalescing).
    pub fn state_writes(&self) -> u64 {
        self.inner.shared.state_writes.load(Ordering::Relaxed)
    }

    /// How many times the writer has synced journals to the disk (diagnostics).
    pub fn journal_syncs(&self) -> u64 {
        self.inner.shared.journal_syncs.load(Ordering::Relaxed)
    }

    /// Test hook: returns once the writer is parked; it resumes when the result is dropped.
    #[cfg(test)]
    fn hold(&self) -> mpsc::Sender<()> {
        let (release_tx, release_rx) = mpsc::channel();
        let (ack_tx, ack_rx) = mpsc::sync_channel(1);
        if let Some(q) = &self.inner.tx
            && q.push(Msg::Hold(ack_tx, release_rx), Urgency::Now)
        {
            let _ = ack_rx.recv();
        }
        release_tx
    }

    /// Test hook: returns once the syncer is parked (after the syncs asked before); it
    /// resumes when the result is dropped. The writer goes on writing meanwhile.
    #[cfg(test)]
    fn hold_syncer(&self) -> mpsc::Sender<()> {
        let (release_tx, release_rx) = mpsc::channel();
        let (ack_tx, ack_rx) = mpsc::sync_channel(1);
        if let Some(q) = &self.inner.tx
            && q.push(Msg::HoldSyncer(ack_tx, release_rx), Urgency::Now)
        {
            let _ = ack_rx.recv();
        }
        release_tx
    }
}

impl EventPublisher for Recorder {
    fn emit(&self, event: EventEnvelope) {
        let start = matches!(
            event.event,
            RunEvent::RunStarted { .. } | RunEvent::ChildRunStarted { .. }
        );
        let sent = self.inner.tx.as_ref().is_some_and(|tx| {
            let urgency = urgency(&event.event);
            tx.push(Msg::Event(Box::new(event)), urgency)
        });
        if sent {
            let n = self.inner.shared.emitted.fetch_add(1, Ordering::AcqRel) + 1;
            if start {
                self.inner.shared.starts.fetch_max(n, Ordering::AcqRel);
            }
        } else {
            self.inner.shared.report(
                "recorder",
                "the store writer is not running; an event was not recorded".to_owned(),
            );
        }
    }

    fn flush(&self) {
        Self::flush(self);
    }

    fn flushed(&self) -> Option<awf_domain::event::Settle> {
        Some(Box::pin(Self::flushed(self)))
    }

    /// Resolves once everything emitted before is written (a `write`, not a sync), history
    /// rows included; `None` when it is already, or when the writer is gone.
    fn written(&self) -> Option<awf_domain::event::Settle> {
        let shared = &self.inner.shared;
        let tx = self.inner.tx.as_ref()?;
        if shared.recorded.load(Ordering::Acquire) >= shared.emitted.load(Ordering::Acquire) {
            return None;
        }
        let (ack_tx, ack_rx) = tokio::sync::oneshot::channel();
        if !tx.push(Msg::Recorded(ack_tx), Urgency::Now) {
            return None;
        }
        Some(Box::pin(async move {
            // An error: the writer is gone (its failure is reported); nothing to wait for.
            let _ = ack_rx.await;
        }))
    }

    /// The run waits for its record only when the writer is behind: a run's (or a
    /// sub-workflow run's) start not yet written (no step runs before its run is on
    /// record), or events of a step started more than `LAG_BOUND` ago not yet written
    /// (a writer starved of CPU). Then it resolves once everything emitted before is written
    /// (a `write`, not a sync: what a killed process keeps). A writer that keeps up costs
    /// the run nothing: it writes in batches on its own thread.
    fn settle(&self) -> Option<awf_domain::event::Settle> {
        let shared = &self.inner.shared;
        let tx = self.inner.tx.as_ref()?;
        let written = shared.written.load(Ordering::Acquire);
        let emitted = shared.emitted.load(Ordering::Acquire);
        let behind = {
            let mut marks = shared.marks.lock().unwrap_or_else(PoisonError::into_inner);
            while marks.front().is_some_and(|(n, _)| *n <= written) {
                marks.pop_front();
            }
            let behind = written < shared.starts.load(Ordering::Acquire)
                || marks
                    .front()
                    .is_some_and(|(_, at)| at.elapsed() >= LAG_BOUND);
            if behind {
                marks.clear();
            } else if emitted > written {
                marks.push_back((emitted, std::time::Instant::now()));
            }
            behind
        };
        if !behind {
            return None;
        }
        let (ack_tx, ack_rx) = tokio::sync::oneshot::channel();
        if !tx.push(Msg::Written(ack_tx), Urgency::Now) {
            return None;
        }
        Some(Box::pin(async move {
            // An error: the writer is gone (its failure is reported); nothing to wait for.
            let _ = ack_rx.await;
        }))
    }
}

/// The projection of one live run.
struct RunProj {
    /// The snapshot and what follows its loops and parallel blocks (pure, shared with the
    /// other stores).
    proj: RunProjection,
    dirty: bool,
    finished: bool,
    /// Whether this writer has written the state file whole; until then the next write is
    /// whole, afterwards writes go to the journal until the run finishes.
    whole: bool,
    /// States recorded since the last write (they go to the journal).
    changed: BTreeSet<String>,
    /// The files holding long texts of the recorded states, by state name. A file replaced
    /// by a later attempt's or iteration's stays: the transcript names it for its chunks.
    files: state::FileRefs,
    /// The journal, open for appending once the state file was written whole.
    journal: Option<File>,
    /// The run was resumed (`resumed_from`): its state file and journal exist from before.
    resumed: bool,
    /// Journal lines were written since it was last synced to the disk.
    journal_unsynced: bool,
    /// The success terminal's message once the run finished (`RunResult::message`), written
    /// beside the snapshot in the state file (`message`).
    message: Option<String>,
}

/// An open transcript.
struct Transcript {
    file: Option<File>,
    /// Added to envelope seqs (resume, synthesized lines).
    shift: u64,
    /// Last seq written (or queued in `buf`).
    last: u64,
    buf: String,
    close: bool,
    unsynced: bool,
    /// Bytes of (stdout, stderr) streamed by the step execution at each event path.
    streamed: HashMap<String, [usize; 2]>,
}

/// Most bytes of one stream written to its spool file (the engine's default capture cap,
/// 64 MiB); a text kept beyond it (a larger `capture.max_size`) is written at the end.
const SPOOL_MAX: u64 = 64 * 1024 * 1024;

/// One output stream of a running step: once it passed [`state::INLINE_MAX`] bytes it is
/// written to a new output file as it arrives, so the text the step keeps is already on disk
/// when the step ends (see [`state::spill`]).
#[derive(Default)]
struct Spool {
    /// The first bytes, until they pass [`state::INLINE_MAX`].
    pending: Vec<u8>,
    /// The file and its path relative to the data root, once they did.
    file: Option<(File, String)>,
    /// Bytes written to the file.
    len: u64,
    /// Bytes whose write-back to disk was started (see [`Spool::start_writeback`]).
    kicked: u64,
    /// A write failed or [`SPOOL_MAX`] was reached: nothing more is written.
    stopped: bool,
}

/// Bytes of a spool written between two starts of their write-back (8 MiB).
const WRITEBACK_EVERY: u64 = 8 * 1024 * 1024;

impl Spool {
    /// Starts writing what was written since the last start to disk, without waiting
    /// (`posix_fadvise(POSIX_FADV_DONTNEED)`, which Linux answers by starting the write-back
    /// of the range's dirty pages): the sync when the step ends then waits for the last few
    /// MiB, not for the whole output (50 MB: 35 ms -> 6 ms on this project's machine).
    /// Best effort: an error only means the sync at the end does it all.
    fn start_writeback(&mut self) {
        let Some((f, _)) = &self.file else {
            return;
        };
        if self.len.saturating_sub(self.kicked) < WRITEBACK_EVERY {
            return;
        }
        let len = std::num::NonZeroU64::new(self.len - self.kicked);
        let _ = rustix::fs::fadvise(f, self.kicked, len, rustix::fs::Advice::DontNeed);
        self.kicked = self.len;
    }
}

/// The history row and audit line of a run that ended, waiting for its state file.
struct EndedRow {
    record: awf_domain::ports::store::HistoryRecord,
    line: String,
}

/// The `running` history row of a run that started, held back while another process held
/// history.db's write lock (see [`Writer::write_started`]).
struct StartedRow {
    run_id: String,
    identifier: String,
    workflow: String,
    started_ms: u64,
    parent: Option<String>,
}

/// A `call_workflow` child run, for the parent's `step.call_workflow.completed` line.
struct ChildCall {
    parent: String,
    parent_parent: Option<String>,
    step: String,
    path: String,
    iteration: Option<usize>,
    workflow: String,
}

struct Writer {
    paths: StorePaths,
    /// The `user` field of audit lines ([`StorePaths::user_name`], looked up at the start
    /// of [`Writer::run`]).
    user: String,
    shared: Arc<Shared>,
    db: Option<Connection>,
    /// The history database could not be opened (reported once; retried only once another
    /// file is at its path).
    db_failed: bool,
    /// The file `db` was opened on, or failed on ([`crate::file_id`]): a database moved
    /// aside (or replaced) under a long-lived writer (`awf serve`) is noticed at the next
    /// write, which opens what is at the path now (a missing one is created and filled from
    /// the state files) instead of writing on into the moved file.
    db_file: Option<crate::FileId>,
    audit: Option<AuditFile>,
    runs: HashMap<String, RunProj>,
    transcripts: HashMap<String, Transcript>,
    calls: HashMap<String, ChildCall>,
    /// Questions a run asked before it started (missing inputs), held until its
    /// `RunStarted`: a run that never starts leaves no transcript.
    pre_start: HashMap<String, Vec<EventEnvelope>>,
    /// The history rows and audit lines of the runs that ended in the batch being written:
    /// written after their state files (see [`Writer::write_ended_rows`]).
    ended_rows: Vec<EndedRow>,
    /// Runs whose end could not be written to their state file: their history row stays
    /// `running` (what `awf status` and `awf resume` see), with no `workflow.completed`
    /// audit line (see [`Writer::write_ended_rows`]).
    unrecorded_ends: std::collections::HashSet<String>,
    /// `running` rows not written yet because history.db was locked when their run started:
    /// tried again, without waiting, with each batch; a run's end row replaces its own.
    deferred_starts: Vec<StartedRow>,
    /// When the journals were last synced to the disk.
    last_sync: std::time::Instant,
    /// (stdout, stderr) spools of the running steps, by (run id, event path).
    spools: HashMap<(String, String), [Spool; 2]>,
    /// The syncer's queue, once started (by the first job: a writer that never syncs starts
    /// no thread).
    syncer: Option<mpsc::Sender<SyncMsg>>,
    syncer_handle: Option<JoinHandle<()>>,
    /// The syncer's thread could not start, or stopped: the writer syncs itself.
    syncer_failed: bool,
    /// Jobs sent to the syncer so far.
    sync_jobs: u64,
    /// Runs whose final state file the syncer has yet to sync, then remove the journal of:
    /// by run id, the number of the job that does it.
    finishing: HashMap<String, u64>,
}

/// Most batches in a row for which the writer puts history rows off because a run waits
/// for its next record (see [`Writer::run`]).
const MAX_PUT_OFF: u32 = 4;

impl Writer {
    fn new(paths: StorePaths, shared: Arc<Shared>) -> Self {
        let audit = match &paths.audit {
            AuditTarget::Off => None,
            AuditTarget::Path(p) => Some(AuditFile::new(p.clone())),
        };
        Self {
            syncer: None,
            syncer_handle: None,
            syncer_failed: false,
            sync_jobs: 0,
            finishing: HashMap::new(),
            paths,
            user: String::new(),
            shared,
            db: None,
            db_failed: false,
            db_file: None,
            audit,
            runs: HashMap::new(),
            transcripts: HashMap::new(),
            calls: HashMap::new(),
            pre_start: HashMap::new(),
            ended_rows: Vec::new(),
            unrecorded_ends: std::collections::HashSet::new(),
            deferred_starts: Vec::new(),
            last_sync: std::time::Instant::now(),
            spools: HashMap::new(),
        }
    }

    fn run(mut self, rx: &Inbox<Msg>) {
        // The history database is opened (and its WAL read) at its first use: after the
        // first batch is answered, while the run's first step runs. Opened here, before the
        // first event, it held that step back (the run's start arrives within a millisecond,
        // the open takes one or two; issue 9: a run's fixed cost).
        // The syncer is started now, while no event is waiting: started by the first batch's
        // sync job, its thread's creation came before that batch's answers (the run's first
        // step waited for it).
        self.start_syncer();
        // Here, not on the thread that starts the run: without `$USER` it reads the
        // password database.
        self.user = self.paths.user_name();
        let mut held = false;
        let mut after_step_end = false;
        // Answers to `written` and the events they cover, held while history rows wait.
        let mut recorded_acks = Vec::new();
        let mut unrecorded = 0;
        // Batches in a row that put the history rows off (bounded: they are not starved).
        let mut put_off = 0;
        loop {
            let until = self
                .runs
                .values()
                .any(|p| p.journal_unsynced)
                .then(|| self.last_sync + JOURNAL_SYNC_EVERY);
            let batch = rx.take(held, after_step_end, until);
            held = !batch.msgs.is_empty();
            if batch.msgs.is_empty() && !batch.closed {
                if until.is_some_and(|u| std::time::Instant::now() >= u) {
                    let mut items = Vec::new();
                    self.sync_journals(&mut items);
                    self.send_to_syncer(SyncMsg::Job {
                        items,
                        after: Vec::new(),
                    });
                }
                continue;
            }
            after_step_end = matches!(
                batch.msgs.last(),
                Some(Msg::Event(e)) if matches!(e.event, RunEvent::StepFinished { .. })
            );
            let mut written = 0;
            let mut acks = Vec::new();
            for msg in batch.msgs {
                match msg {
                    Msg::Event(e) => {
                        self.apply(&e);
                        written += 1;
                    }
                    Msg::Written(ack) => acks.push(ack),
                    Msg::Recorded(ack) => recorded_acks.push(ack),
                    Msg::Flush(ack) => {
                        // Opened by a flush before any history row too: opening sweeps the
                        // temp files killed writers left (`open_history`).
                        let _ = self.db();
                        self.commit_with_rows(true);
                        self.send_to_syncer(SyncMsg::Barrier(ack));
                    }
                    #[cfg(test)]
                    Msg::Hold(ack, release) => {
                        let job = self.stage(false);
                        self.send_job(job);
                        let _ = ack.send(());
                        let _ = release.recv();
                    }
                    #[cfg(test)]
                    Msg::HoldSyncer(ack, release) => {
                        let job = self.stage(false);
                        self.send_job(job);
                        self.send_to_syncer(SyncMsg::Hold(ack, release));
                    }
                }
            }
            if batch.closed {
                break;
            }
            // The batch's syncs are sent once its history rows are written (below), with
            // the audit trail's: one round of syncs where there were two in a row (issue 9:
            // the end of a run waits for them).
            let mut job = self.stage(false);
            self.shared.written.fetch_add(written, Ordering::AcqRel);
            for ack in acks {
                let _ = ack.send(());
            }
            // History rows after the answers: a run waits for what resumes it (its state
            // file and journal), not for its history row. Put off while a run waits for its
            // next record (its `Written` ack came in after this batch was taken: the run's
            // first step would wait for history.db to be opened and written).
            unrecorded += written;
            if put_off < MAX_PUT_OFF && self.history_waiting() && rx.rung() {
                put_off += 1;
                self.send_job(job);
                continue;
            }
            put_off = 0;
            self.write_ended_rows(&mut job);
            self.send_job(job);
            self.shared
                .recorded
                .fetch_add(std::mem::take(&mut unrecorded), Ordering::AcqRel);
            for ack in recorded_acks.drain(..) {
                let _ = ack.send(());
            }
        }
        self.commit_with_rows(true);
        self.shared.recorded.fetch_add(unrecorded, Ordering::AcqRel);
        for ack in recorded_acks {
            let _ = ack.send(());
        }
        // Runs still going when the process stops: their rows wait for the lock as others do.
        self.retry_deferred_starts(true);
        // The syncer drains its queue and stops.
        self.syncer = None;
        if let Some(h) = self.syncer_handle.take()
            && h.join().is_err()
        {
            self.shared
                .report("recorder", "the store sync thread panicked".to_owned());
        }
    }

    /// Hands `msg` to the syncer; does its work on this thread when the syncer is not
    /// running.
    fn send_to_syncer(&mut self, msg: SyncMsg) {
        if let SyncMsg::Job { .. } = msg {
            self.sync_jobs += 1;
        }
        self.start_syncer();
        let msg = match &self.syncer {
            Some(tx) => match tx.send(msg) {
                Ok(()) => return,
                Err(mpsc::SendError(msg)) => {
                    self.syncer = None;
                    self.syncer_failed = true;
                    msg
                }
            },
            None => msg,
        };
        Syncer {
            paths: self.paths.clone(),
            shared: Arc::clone(&self.shared),
            pool: SyncPool::none(),
        }
        .handle(vec![msg]);
    }

    /// Starts the syncer thread unless it runs or could not be started.
    fn start_syncer(&mut self) {
        if self.syncer.is_none() && !self.syncer_failed {
            let (tx, rx) = mpsc::channel();
            let paths = self.paths.clone();
            let shared = Arc::clone(&self.shared);
            match std::thread::Builder::new()
                .name("awf-store-sync".into())
                .spawn(move || {
                    // Its helpers start with it, while the run starts, not at the run's end
                    // (its first job of several items), which waited for them.
                    let pool = SyncPool::start(&shared);
                    Syncer {
                        paths,
                        shared,
                        pool,
                    }
                    .run(&rx);
                }) {
                Ok(h) => {
                    self.syncer = Some(tx);
                    self.syncer_handle = Some(h);
                }
                Err(_) => self.syncer_failed = true,
            }
        }
    }

    /// Waits until the syncer has done every job sent before.
    fn wait_for_syncer(&mut self) {
        let (ack_tx, ack_rx) = mpsc::sync_channel(1);
        self.send_to_syncer(SyncMsg::Barrier(Ack::Thread(ack_tx)));
        let _ = ack_rx.recv();
    }

    /// The history database, opened on the first call; `None` (reported once) when it
    /// cannot be opened: opening retries for seconds, which a run pays once, not per event.
    fn db(&mut self) -> Option<&Connection> {
        let path = self.paths.history_db();
        if self.db.is_some() || self.db_failed {
            let now = crate::file_id(&path);
            if now != self.db_file {
                if let Some(old) = self.db.take() {
                    history::let_go(old, &path);
                }
                self.db_failed = false;
            }
        }
        if self.db.is_none() && !self.db_failed {
            match crate::open_history(&self.paths, false) {
                Ok(c) => self.db = Some(c),
                Err(e) => {
                    self.db_failed = true;
                    self.shared.report("history", e.message().to_owned());
                }
            }
            self.db_file = crate::file_id(&path);
        }
        self.db.as_ref()
    }

    /// Whether history rows wait to be written ([`Writer::write_ended_rows`]).
    fn history_waiting(&self) -> bool {
        !self.ended_rows.is_empty() || !self.deferred_starts.is_empty()
    }

    /// Writes the history rows (finished) and the audit lines (`workflow.completed`) of the
    /// runs that ended since the last call, and adds the audit trail's sync to `job` (the
    /// batch's own: one round of syncs at a run's end, not two in a row).
    ///
    /// Called once the batch's state files are written: a process killed in between leaves
    /// a row still `running` beside a state file that says the run ended, which a history
    /// read settles from the state file; the other order left history and the audit trail
    /// saying "completed" for a run whose state file (and `awf resume`) said it was still at
    /// its last step, which then ran again (breaker).
    fn write_ended_rows(&mut self, job: &mut SyncJob) {
        self.retry_deferred_starts(false);
        if self.ended_rows.is_empty() {
            return;
        }
        for row in std::mem::take(&mut self.ended_rows) {
            if self.unrecorded_ends.remove(&row.record.id) {
                // Its state file does not have its end (a full disk): the history says
                // what `awf status` and `awf resume` see, a run still `running` (with its
                // process gone once this one exits), not an end they do not know.
                let r = &row.record;
                if let Some(c) = self.db()
                    && let Err(e) = history::upsert_started(
                        c,
                        &r.id,
                        &r.workflow_id,
                        &r.workflow_name,
                        r.started_at_ms,
                        r.parent_run_id.as_deref(),
                    )
                {
                    self.history_error(&e);
                }
                continue;
            }
            if let Some(c) = self.db()
                && let Err(e) = history::upsert_finished(c, &row.record)
            {
                self.history_error(&e);
            }
            self.audit_line(&row.line);
        }
        if let Some(a) = self.audit.as_mut() {
            let what = format!("the audit trail {}", a.path().display());
            match a.pending_sync() {
                Ok(Some(dup)) => {
                    // One sync of the audit trail covers the lines the batch wrote before
                    // (a run's end asked one with its state file): the job syncs it once.
                    job.items.retain(|i| i.target != "audit");
                    job.items.push(SyncItem {
                        target: "audit",
                        what,
                        file: Syncable::Data(dup),
                    });
                }
                Ok(None) => {}
                Err(e) => self
                    .shared
                    .report("audit", format!("cannot sync {what}: {e}")),
            }
        }
    }

    /// Queues a run's `running` history row, written with the batch's other history rows
    /// once the batch is answered (see [`Writer::run`]: the run's first step waits for its
    /// start to be written, not for history.db), without waiting for history.db's write
    /// lock: another process holding it (an `awf history` of a big database, a writer
    /// elsewhere) held the first step back for the whole [`history::BUSY_TIMEOUT`] (stop
    /// 38). A locked database defers the row to the next batches, then to the run's end row,
    /// which inserts the row whole.
    fn write_started(&mut self, row: StartedRow) {
        self.deferred_starts.push(row);
    }

    /// Writes the deferred `running` rows that the lock lets through now; with `wait`, each
    /// waits for the lock as every other history write does.
    fn retry_deferred_starts(&mut self, wait: bool) {
        if self.deferred_starts.is_empty() {
            return;
        }
        let rows = std::mem::take(&mut self.deferred_starts);
        for row in rows {
            if !self.try_started(&row, wait) {
                self.deferred_starts.push(row);
            }
        }
    }

    /// Writes `row`; `false` when the database was locked and `wait` was not asked (other
    /// failures are reported, and count as done).
    fn try_started(&mut self, row: &StartedRow, wait: bool) -> bool {
        let Some(c) = self.db() else {
            return true;
        };
        if !wait {
            let _ = c.busy_timeout(std::time::Duration::ZERO);
        }
        let r = history::upsert_started(
            c,
            &row.run_id,
            &row.identifier,
            &row.workflow,
            row.started_ms,
            row.parent.as_deref(),
        );
        if !wait {
            let _ = c.busy_timeout(history::BUSY_TIMEOUT);
        }
        match r {
            Ok(()) => true,
            Err(e)
                if !wait
                    && matches!(
                        e.sqlite_error_code(),
                        Some(
                            rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                        )
                    ) =>
            {
                false
            }
            Err(e) => {
                self.history_error(&e);
                true
            }
        }
    }

    fn history_error(&self, e: &rusqlite::Error) {
        self.shared.report(
            "history",
            format!(
                "cannot write the run history {}: {e}",
                self.paths.history_db().display()
            ),
        );
    }

    fn audit_line(&mut self, line: &str) {
        let Some(a) = self.audit.as_mut() else {
            return;
        };
        if let Err(e) = a.append(line) {
            let msg = format!("cannot write the audit trail {}: {e}", a.path().display());
            self.shared.report("audit", msg);
        }
    }

    /// Applies one event to every projection.
    fn apply(&mut self, env: &EventEnvelope) {
        let run_id = env.run_id.0.as_str();
        let asking = matches!(
            env.event,
            RunEvent::InteractionRequired { .. } | RunEvent::InteractionResolved { .. }
        );
        if asking && env.parent_run_id.is_none() && !self.runs.contains_key(run_id) {
            self.pre_start
                .entry(run_id.to_owned())
                .or_default()
                .push(env.clone());
            return;
        }
        if matches!(env.event, RunEvent::RunStarted { .. })
            && let Some(held) = self.pre_start.remove(run_id)
        {
            for e in &held {
                self.transcript_event(e, &state::OutputFiles::default());
            }
        }
        // A recorded state's long texts go to their own files first: the transcript line
        // and the state record name them.
        match &env.event {
            RunEvent::OutputChunk { stream, text, .. } if self.runs.contains_key(run_id) => {
                self.spool(run_id, &env.path, *stream, text.as_bytes());
            }
            RunEvent::StepStarted { .. } => {
                self.drop_spools(|(r, p)| r == run_id && *p == env.path);
            }
            RunEvent::RunFinished { .. } => self.drop_spools(|(r, _)| r == run_id),
            _ => {}
        }
        // A state whose long texts could not go to their files, cut to what a state file
        // keeps inline.
        let mut cut_state = None;
        let spilled = match &env.event {
            // A failed attempt's long output stays in its spool's file, which the
            // `step.retrying` line names for the attempt's bytes-only chunks.
            RunEvent::StepRetrying { .. } => self.keep_spools(run_id, &env.path),
            RunEvent::StepFinished { state, .. } if self.runs.contains_key(run_id) => {
                let spools = self
                    .spools
                    .remove(&(run_id.to_owned(), env.path.clone()))
                    .map_or([None, None], |pair| {
                        pair.map(|sp| sp.file.map(|(f, rel)| (f, rel, sp.len)))
                    });
                match state::spill(&self.paths, run_id, state, spools) {
                    Ok(f) => f,
                    Err(e) => {
                        // Kept inline instead, cut to what a state file keeps inline: the
                        // whole text there (1.2 MB for `seq 1 200000`) made the state
                        // file's write fail too on the full disk that failed this one.
                        let cut = state::cut_inline(state);
                        let said = if cut.is_empty() {
                            String::new()
                        } else {
                            format!(
                                "; the record keeps the first 64 KiB of step {}'s {}",
                                state.name,
                                cut.join(" and ")
                            )
                        };
                        self.shared
                            .report("output", format!("{}{said}", e.message()));
                        cut_state = Some(state::capped(state));
                        state::OutputFiles::default()
                    }
                }
            }
            _ => state::OutputFiles::default(),
        };
        self.transcript_event(env, &spilled);
        match &env.event {
            RunEvent::RunStarted {
                workflow,
                identifier,
                inputs,
                resumed_from,
                ..
            } => {
                // Resumed in the batch that ended it (a server resuming a run that just
                // ended): its end is written first, so that its new `running` row is not
                // overwritten by the end's row written after the batch.
                if resumed_from.is_some() && self.ended_rows.iter().any(|r| r.record.id == run_id) {
                    self.commit_with_rows(false);
                }
                // The earlier states keep their output files (not read back into memory).
                let earlier = match resumed_from {
                    Some(_) => match self.runs.remove(run_id) {
                        Some(p) => Some((p.proj.snap, p.files)),
                        None => state::read_stored(&self.paths, run_id).unwrap_or_else(|e| {
                            self.shared.report("state", e.message().to_owned());
                            None
                        }),
                    },
                    None => None,
                };
                let (earlier, files) = match earlier {
                    Some((snap, files)) => (Some(snap), files),
                    None => (None, state::FileRefs::new()),
                };
                let Some(proj) = RunProjection::start(env, earlier) else {
                    return;
                };
                let (started_ms, parent) = (
                    millis(proj.snap.started_at),
                    proj.snap.parent_run_id.clone(),
                );
                self.runs.insert(
                    run_id.to_owned(),
                    RunProj {
                        proj,
                        dirty: true,
                        finished: false,
                        whole: false,
                        changed: BTreeSet::new(),
                        files,
                        journal: None,
                        journal_unsynced: false,
                        resumed: resumed_from.is_some(),
                        message: None,
                    },
                );
                self.write_started(StartedRow {
                    run_id: run_id.to_owned(),
                    identifier: identifier.clone(),
                    workflow: workflow.clone(),
                    started_ms,
                    parent,
                });
                let line = projection::started_line(run_id, env.at, &self.user, workflow, inputs);
                self.audit_line(&line);
            }
            RunEvent::StepStarted { step, kind, .. } => {
                if let Some(p) = self.runs.get_mut(run_id)
                    && p.proj.step_started(env, step, kind)
                {
                    p.dirty = true;
                }
            }
            RunEvent::StepFinished { step, state, .. } => {
                if let Some(p) = self.runs.get_mut(run_id) {
                    p.proj
                        .step_finished(env, step, cut_state.as_ref().unwrap_or(state));
                    // A replaced file stays: the transcript names it (breaker: a retried
                    // or looped step's earlier output was removed and read back wrong).
                    if spilled.is_empty() {
                        p.files.remove(step);
                    } else {
                        p.files.insert(step.clone(), spilled);
                    }
                    p.changed.insert(step.clone());
                    p.dirty = true;
                }
            }
            RunEvent::ChildRunStarted {
                step,
                child_run_id,
                workflow,
            } => {
                if let Some(p) = self.runs.get_mut(run_id)
                    && p.proj.child_started(env, &child_run_id.0)
                {
                    p.dirty = true;
                }
                self.calls.insert(
                    child_run_id.0.clone(),
                    ChildCall {
                        parent: run_id.to_owned(),
                        parent_parent: env.parent_run_id.as_ref().map(|p| p.0.clone()),
                        step: step.clone(),
                        path: env.path.clone(),
                        iteration: env.iteration,
                        workflow: workflow.clone(),
                    },
                );
            }
            RunEvent::RunFinished { result } => self.finish(env, result),
            RunEvent::StepRetrying { .. }
            | RunEvent::OutputChunk { .. }
            | RunEvent::Log { .. }
            | RunEvent::AgentMessageChunk { .. }
            | RunEvent::AgentThoughtChunk { .. }
            | RunEvent::ToolCall { .. }
            | RunEvent::ToolCallResult { .. }
            | RunEvent::InteractionRequired { .. }
            | RunEvent::InteractionResolved { .. } => {}
        }
    }

    fn finish(&mut self, env: &EventEnvelope, result: &awf_domain::run::RunResult) {
        let run_id = env.run_id.0.as_str();
        let record = match self.runs.get_mut(run_id) {
            Some(p) => {
                p.message.clone_from(&result.message);
                p.dirty = true;
                p.finished = true;
                p.proj.finish(env, result)
            }
            None => projection::finished_record(env, result),
        };
        let line = projection::completed_line_of(
            run_id,
            env.at,
            &self.user,
            &record.workflow_name,
            result,
        );
        // Its end row inserts the whole row: a `running` row written after it would undo it.
        self.deferred_starts.retain(|r| r.run_id != run_id);
        self.ended_rows.push(EndedRow { record, line });
        if let Some(t) = self.transcripts.get_mut(run_id) {
            t.close = true;
        }
        if let Some(call) = self.calls.remove(run_id) {
            let seq = self.transcript(&call.parent).map(|t| t.last + 1);
            if let Some(seq) = seq {
                let text = transcript::line(
                    &transcript::Head {
                        seq,
                        run_id: &call.parent,
                        parent_run_id: call.parent_parent.as_deref(),
                        child_run_id: Some(run_id),
                        kind: "step.call_workflow.completed",
                        path: &call.path,
                        iteration: call.iteration,
                        at: env.at,
                    },
                    json!({
                        "name": call.step,
                        "workflow": call.workflow,
                        "status": projection::status_str(result.status),
                        "exit_code": result.exit_code,
                    }),
                );
                if let Some(t) = self.transcripts.get_mut(&call.parent) {
                    t.last = seq;
                    t.buf.push_str(&text);
                }
            }
        }
    }

    /// The open transcript of `run_id`, opened (append, 0600) on first use; an existing file
    /// (resumed run) continues after its last seq.
    fn transcript(&mut self, run_id: &str) -> Option<&mut Transcript> {
        if !self.transcripts.contains_key(run_id) {
            if run_id.is_empty() || run_id.contains(['/', '\\', '\0']) || run_id.starts_with('.') {
                return None;
            }
            let path = self.paths.transcript_file(run_id);
            // Read too: a torn last line is cut before anything is appended.
            let opened = OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .mode(0o600)
                .open(&path);
            let file = match opened {
                Ok(f) => Some(f),
                Err(e) => {
                    self.shared.report(
                        "transcript",
                        format!("cannot write the transcript {}: {e}", path.display()),
                    );
                    None
                }
            };
            if let Some(f) = &file
                && let Err(e) = transcript::cut_torn_tail(f)
            {
                self.shared.report(
                    "transcript",
                    format!(
                        "cannot cut the torn last line of the transcript {}: {e}",
                        path.display()
                    ),
                );
            }
            let existing = file
                .as_ref()
                .and_then(|f| f.metadata().ok())
                .is_some_and(|m| m.len() > 0);
            let last = if existing {
                transcript::last_seq(&path)
            } else {
                0
            };
            self.transcripts.insert(
                run_id.to_owned(),
                Transcript {
                    file,
                    shift: last,
                    last,
                    buf: String::new(),
                    close: false,
                    unsynced: false,
                    streamed: HashMap::new(),
                },
            );
        }
        self.transcripts.get_mut(run_id)
    }

    /// Adds the journals with lines written since their last sync to `items`.
    fn sync_journals(&mut self, items: &mut Vec<SyncItem>) {
        self.last_sync = std::time::Instant::now();
        for p in self.runs.values_mut().filter(|p| p.journal_unsynced) {
            p.journal_unsynced = false;
            let what = format!(
                "the state journal {}",
                self.paths.journal_file(&p.proj.snap.run_id).display()
            );
            match p.journal.as_ref().map(File::try_clone) {
                Some(Ok(dup)) => items.push(SyncItem {
                    target: "state",
                    what,
                    file: Syncable::Journal(dup),
                }),
                Some(Err(e)) => self
                    .shared
                    .report("state", format!("cannot sync {what}: {e}")),
                None => {}
            }
        }
    }

    /// Adds bytes of one stream of the step at `path` to its spool.
    fn spool(
        &mut self,
        run_id: &str,
        path: &str,
        stream: awf_domain::event::OutputStream,
        bytes: &[u8],
    ) {
        let i = usize::from(stream == awf_domain::event::OutputStream::Stderr);
        let pair = self
            .spools
            .entry((run_id.to_owned(), path.to_owned()))
            .or_default();
        let sp = &mut pair[i];
        if sp.stopped || bytes.is_empty() {
            return;
        }
        if sp.file.is_none() {
            if sp.pending.len() + bytes.len() <= state::INLINE_MAX {
                sp.pending.extend_from_slice(bytes);
                return;
            }
            let name = path.rsplit('/').next().unwrap_or(path);
            let kind = if i == 0 { "stdout" } else { "stderr" };
            match state::create_output(&self.paths, run_id, name, kind) {
                Ok(f) => sp.file = Some(f),
                Err(_) => {
                    // Written whole when the step ends instead.
                    sp.stopped = true;
                    sp.pending = Vec::new();
                    return;
                }
            }
        }
        let pending = std::mem::take(&mut sp.pending);
        let Some((f, rel)) = sp.file.as_mut() else {
            return;
        };
        for part in [pending.as_slice(), bytes] {
            let room = usize::try_from(SPOOL_MAX.saturating_sub(sp.len)).unwrap_or(usize::MAX);
            let part = &part[..part.len().min(room)];
            if part.is_empty() {
                continue;
            }
            if f.write_all(part).is_err() {
                sp.stopped = true;
                let rel = rel.clone();
                sp.file = None;
                state::remove_outputs(&self.paths, std::iter::once(rel.as_str()));
                return;
            }
            sp.len += part.len() as u64;
        }
        if sp.len >= SPOOL_MAX {
            sp.stopped = true;
        }
        sp.start_writeback();
    }

    /// Ends the spools of the step at `path` (a failed attempt) keeping their files: the
    /// files holding what the attempt streamed past [`state::INLINE_MAX`] (its chunks'
    /// bytes, from offset 0).
    fn keep_spools(&mut self, run_id: &str, path: &str) -> state::OutputFiles {
        let mut kept = state::OutputFiles::default();
        if let Some([out, err]) = self.spools.remove(&(run_id.to_owned(), path.to_owned())) {
            kept.stdout = out.file.map(|(_, rel)| rel);
            kept.stderr = err.file.map(|(_, rel)| rel);
        }
        kept
    }

    /// Removes the spools (and their files) whose (run id, path) matches.
    fn drop_spools(&mut self, matches: impl Fn(&(String, String)) -> bool) {
        let keys: Vec<(String, String)> =
            self.spools.keys().filter(|k| matches(k)).cloned().collect();
        for k in keys {
            if let Some(pair) = self.spools.remove(&k) {
                let rels: Vec<String> = pair
                    .into_iter()
                    .filter_map(|sp| sp.file.map(|(_, r)| r))
                    .collect();
                state::remove_outputs(&self.paths, rels.iter().map(String::as_str));
            }
        }
    }

    /// Appends the line of one event; `files` are the output files of a `StepFinished`
    /// state. A step's output is written inline until its stream passed
    /// [`state::INLINE_MAX`] bytes; later chunks only give their size (the kept text is in
    /// the state's output file, named by the `step.completed` line).
    fn transcript_event(&mut self, env: &EventEnvelope, files: &state::OutputFiles) {
        let Some(t) = self.transcript(&env.run_id.0) else {
            return;
        };
        let mut seq = env.seq.saturating_add(t.shift);
        if seq <= t.last {
            t.shift = (t.last + 1).saturating_sub(env.seq);
            seq = t.last + 1;
        }
        t.last = seq;
        let mut summary = false;
        let inline = match &env.event {
            RunEvent::StepStarted { .. } | RunEvent::StepRetrying { .. } => {
                t.streamed.remove(&env.path);
                true
            }
            RunEvent::StepFinished { state, .. } => {
                // A step that streamed no stdout of its own (a loop's or a parallel block's
                // summary, a call, an agent that printed nothing live) has its output
                // written on its `step.completed` line: a replay has no chunks to build it
                // from (breaker: a loop's "completed 3 iterations" read back empty).
                let seen = t.streamed.remove(&env.path).unwrap_or_default();
                summary = seen[0] == 0
                    && files.stdout.is_none()
                    && !state.output.is_empty()
                    && state.output.len() <= state::INLINE_MAX;
                true
            }
            RunEvent::OutputChunk { stream, text, .. } => {
                let seen = t.streamed.entry(env.path.clone()).or_default();
                let i = usize::from(*stream == awf_domain::event::OutputStream::Stderr);
                seen[i] = seen[i].saturating_add(text.as_bytes().len());
                seen[i] <= state::INLINE_MAX
            }
            _ => true,
        };
        transcript::event_line_into(&mut t.buf, env, seq, inline, summary, files);
    }

    /// Writes what the applied events changed ([`stage`](Self::stage)), then the history
    /// rows of the runs that ended ([`write_ended_rows`](Self::write_ended_rows)), and sends
    /// their syncs as one job (the audit trail synced once, not once for each).
    fn commit_with_rows(&mut self, sync: bool) {
        let mut job = self.stage(sync);
        self.write_ended_rows(&mut job);
        self.send_job(job);
    }

    /// Writes what the applied events changed; with `sync`, also asks the syncer to fsync
    /// transcripts, audit trail and journals (a flush waits for it, see
    /// [`SyncMsg::Barrier`]). The syncs are returned, not sent: the caller adds to them and
    /// sends them with [`send_job`](Self::send_job), no other job in between (the job's
    /// number is counted on).
    fn stage(&mut self, sync: bool) -> SyncJob {
        // A run that ended in this batch has its audit line synced with its transcript and
        // state file, side by side, rather than at the flush that follows (four syncs in a
        // row, about a millisecond at the end of every run; issue 9).
        let mut failures = Vec::new();
        let mut to_sync: Vec<SyncItem> = Vec::new();
        for (id, t) in &mut self.transcripts {
            if !t.buf.is_empty() {
                if let Some(f) = t.file.as_mut() {
                    match f.write_all(t.buf.as_bytes()) {
                        Ok(()) => t.unsynced = true,
                        Err(e) => failures.push(format!(
                            "cannot write the transcript {}: {e}",
                            self.paths.transcript_file(id).display()
                        )),
                    }
                }
                t.buf.clear();
            }
            if (sync || t.close)
                && t.unsynced
                && let Some(f) = t.file.as_ref()
            {
                t.unsynced = false;
                let what = format!(
                    "the transcript {}",
                    self.paths.transcript_file(id).display()
                );
                match f.try_clone() {
                    Ok(dup) => to_sync.push(SyncItem {
                        target: "transcript",
                        what,
                        file: Syncable::Data(dup),
                    }),
                    Err(e) => failures.push(format!("cannot sync {what}: {e}")),
                }
            }
        }
        self.transcripts.retain(|_, t| !t.close);
        for msg in failures {
            self.shared.report("transcript", msg);
        }
        if sync && let Some(a) = self.audit.as_mut() {
            let what = format!("the audit trail {}", a.path().display());
            match a.pending_sync() {
                Ok(Some(dup)) => to_sync.push(SyncItem {
                    target: "audit",
                    what,
                    file: Syncable::Data(dup),
                }),
                Ok(None) => {}
                Err(e) => self
                    .shared
                    .report("audit", format!("cannot sync {what}: {e}")),
            }
        }
        // A resumed run's first write removes the journal of before: a removal of it the
        // syncer has yet to make (the run ended in this process moments ago) must not
        // remove the new one.
        let done = self.shared.synced_jobs.load(Ordering::Acquire);
        self.finishing.retain(|_, job| *job > done);
        let resuming_too_soon = self
            .runs
            .iter()
            .any(|(id, p)| p.dirty && !p.whole && p.resumed && self.finishing.contains_key(id));
        if resuming_too_soon {
            self.wait_for_syncer();
            self.finishing.clear();
        }
        let mut after = Vec::new();
        let job = self.sync_jobs + 1;
        // Sub-workflow runs before the runs that called them, the deepest first: a parent's
        // record of a call that ended (its journal line, `child_runs`) never reaches the
        // disk before the called run's end does. The other order, a kill in between, left
        // the called run `running` for ever under a completed parent (breaker: 2 of 60 runs
        // SIGKILLed 1 to 5 ms after a call ended).
        let mut dirty: Vec<(usize, String)> = self
            .runs
            .iter()
            .filter(|(_, p)| p.dirty)
            .map(|(id, _)| (call_depth(&self.runs, id), id.clone()))
            .collect();
        dirty.sort_by_key(|d| std::cmp::Reverse(d.0));
        for (_, id) in dirty {
            let Some(p) = self.runs.get_mut(&id) else {
                continue;
            };
            p.dirty = false;
            match write_state(&self.paths, p, &mut to_sync, &mut after) {
                Ok(()) => {
                    #[cfg(test)]
                    self.shared
                        .state_order
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(id.clone());
                    self.shared.state_writes.fetch_add(1, Ordering::Relaxed);
                    if p.finished {
                        self.finishing.insert(id.clone(), job);
                    }
                }
                Err(e) => {
                    if p.finished {
                        self.unrecorded_ends.insert(id.clone());
                    }
                    self.shared.report("state", e.message().to_owned());
                }
            }
        }
        self.runs.retain(|_, p| !p.finished);
        if sync || self.last_sync.elapsed() >= JOURNAL_SYNC_EVERY {
            self.sync_journals(&mut to_sync);
        }
        SyncJob {
            items: to_sync,
            after,
        }
    }

    /// Sends `job` to the syncer, unless it is empty.
    fn send_job(&mut self, job: SyncJob) {
        if !job.items.is_empty() || !job.after.is_empty() {
            self.send_to_syncer(SyncMsg::Job {
                items: job.items,
                after: job.after,
            });
        }
    }
}

/// How many calls deep run `id` is: 0 for a root run, 1 for a sub-workflow run it called,
/// and so on (through the runs this writer holds; a caller it does not hold ends the count).
fn call_depth(runs: &HashMap<String, RunProj>, id: &str) -> usize {
    let mut depth = 0;
    let mut at = runs.get(id);
    while let Some(parent) = at.and_then(|p| p.proj.snap.parent_run_id.as_deref()) {
        depth += 1;
        // Bounded as a guard against a cycle in damaged input.
        if depth > runs.len() {
            break;
        }
        at = runs.get(parent);
    }
    depth
}

/// What a batch asks the syncer: files to sync, then what to do once they are.
struct SyncJob {
    items: Vec<SyncItem>,
    after: Vec<After>,
}

/// What the syncer is asked.
/// How a flush is answered: on a channel a thread blocks on ([`Recorder::flush`]), or one
/// a task awaits ([`Recorder::flushed`]).
enum Ack {
    Thread(mpsc::SyncSender<()>),
    Task(tokio::sync::oneshot::Sender<()>),
}

impl Ack {
    /// Answers; the asker having gone is no failure.
    fn send(self) {
        match self {
            Self::Thread(tx) => {
                let _ = tx.send(());
            }
            Self::Task(tx) => {
                let _ = tx.send(());
            }
        }
    }
}

enum SyncMsg {
    /// Sync `items`, then do `after`, in order.
    Job {
        items: Vec<SyncItem>,
        after: Vec<After>,
    },
    /// Answer once every job sent before is done (a flush).
    Barrier(Ack),
    /// Test hook: do what was sent before, acknowledge, then wait for the release.
    #[cfg(test)]
    Hold(mpsc::SyncSender<()>, mpsc::Receiver<()>),
}

/// One file the syncer makes durable.
struct SyncItem {
    /// The kind of target a failure is reported as (state, transcript, audit).
    target: &'static str,
    /// What a failure message names ("the transcript <path>").
    what: String,
    file: Syncable,
}

/// How an item is synced.
enum Syncable {
    /// Its data (transcripts, the audit trail).
    Data(File),
    /// Its data, counted as a journal sync ([`Recorder::journal_syncs`]).
    Journal(File),
    /// Data and metadata (a state file written whole).
    All(File),
    /// A directory (the rename of a state file into it).
    Dir(std::path::PathBuf),
}

impl Syncable {
    fn sync(&self, shared: &Shared) -> std::io::Result<()> {
        match self {
            Self::Data(f) => f.sync_data(),
            Self::Journal(f) => {
                f.sync_data()?;
                shared.journal_syncs.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Self::All(f) => f.sync_all(),
            Self::Dir(d) => File::open(d)?.sync_all(),
        }
    }
}

/// Done once the items of its job are synced.
enum After {
    /// A run's final state file is on the disk: its journal goes, and so do the output
    /// files its record does not name.
    Finished {
        run_id: String,
        files: state::FileRefs,
    },
}

/// The syncer: makes durable what the writer wrote, in the order asked (see the module
/// docs).
struct Syncer {
    paths: StorePaths,
    shared: Arc<Shared>,
    /// The threads that sync beside this one ([`sync_items`]).
    pool: SyncPool,
}

impl Syncer {
    /// Serves `rx` until the writer drops its end: what is queued is done as one batch.
    fn run(&self, rx: &mpsc::Receiver<SyncMsg>) {
        while let Ok(first) = rx.recv() {
            let mut msgs = vec![first];
            msgs.extend(rx.try_iter());
            self.handle(msgs);
        }
    }

    /// Does a batch of jobs: every item synced, then every follow-up in order, then the
    /// barriers answered.
    fn handle(&self, msgs: Vec<SyncMsg>) {
        let mut items = Vec::new();
        let mut after = Vec::new();
        let mut acks = Vec::new();
        let mut jobs = 0;
        for msg in msgs {
            match msg {
                SyncMsg::Job { items: i, after: a } => {
                    items.extend(i);
                    after.extend(a);
                    jobs += 1;
                }
                SyncMsg::Barrier(ack) => acks.push(ack),
                #[cfg(test)]
                SyncMsg::Hold(ack, release) => {
                    self.complete(std::mem::take(&mut items), std::mem::take(&mut after), jobs);
                    jobs = 0;
                    let _ = ack.send(());
                    let _ = release.recv();
                }
            }
        }
        self.complete(items, after, jobs);
        for ack in acks {
            ack.send();
        }
    }

    /// Syncs `items` (side by side), then does every follow-up in order; counts `jobs` done.
    fn complete(&self, items: Vec<SyncItem>, after: Vec<After>, jobs: u64) {
        for (target, msg) in sync_items(items, &self.shared, &self.pool) {
            self.shared.report(target, msg);
        }
        for a in after {
            match a {
                After::Finished { run_id, files } => {
                    if let Err(e) = state::remove_journal(&self.paths, &run_id) {
                        self.shared.report("state", e.message().to_owned());
                    }
                    state::prune_outputs(&self.paths, &run_id, &files);
                }
            }
        }
        self.shared.synced_jobs.fetch_add(jobs, Ordering::Release);
    }
}

/// A sync failure: (kind of target, message).
type SyncFailure = (&'static str, String);

/// The items of one [`sync_items`] call, taken one at a time by whichever thread is free.
#[derive(Default)]
struct SyncBatch {
    state: Mutex<BatchState>,
    /// Signalled when the last item taken is synced.
    idle: std::sync::Condvar,
}

#[derive(Default)]
struct BatchState {
    items: Vec<SyncItem>,
    /// Items taken and not synced yet.
    in_flight: usize,
    failures: Vec<SyncFailure>,
}

impl SyncBatch {
    fn lock(&self) -> std::sync::MutexGuard<'_, BatchState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Syncs items until none is left to take.
    fn work(&self, shared: &Shared) {
        loop {
            let item = {
                let mut st = self.lock();
                let Some(item) = st.items.pop() else {
                    return;
                };
                st.in_flight += 1;
                item
            };
            let result = item.file.sync(shared);
            let mut st = self.lock();
            st.in_flight -= 1;
            if let Err(e) = result {
                st.failures
                    .push((item.target, format!("cannot sync {}: {e}", item.what)));
            }
            if st.in_flight == 0 && st.items.is_empty() {
                self.idle.notify_all();
            }
        }
    }

    /// Waits until every item taken is synced (call once none is left to take); gives the
    /// failures.
    fn finish(&self) -> Vec<SyncFailure> {
        let mut st = self.lock();
        while st.in_flight > 0 {
            st = self.idle.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        std::mem::take(&mut st.failures)
    }
}

/// The threads that sync items beside the syncer's own ([`SYNC_HELPERS`]), started once with
/// the syncer: a run's end syncs its state file, their directory, its transcript and the
/// audit trail together, and starting a thread for each there (about 0.1 ms apiece) was on
/// the run's way out. Each helper waits for a batch to work on; they end when the pool is
/// dropped (joined then).
struct SyncPool {
    jobs: Option<mpsc::Sender<Arc<SyncBatch>>>,
    helpers: Vec<JoinHandle<()>>,
}

/// Helper threads of a [`SyncPool`]: with the syncer's own, the four files of a run's end
/// synced side by side.
const SYNC_HELPERS: usize = 3;

impl SyncPool {
    /// A pool without threads: every item is synced by the calling thread.
    fn none() -> Self {
        Self {
            jobs: None,
            helpers: Vec::new(),
        }
    }

    /// Starts up to [`SYNC_HELPERS`] helpers (as many as can be started; none is a pool
    /// that syncs on the calling thread).
    fn start(shared: &Arc<Shared>) -> Self {
        let (tx, rx) = mpsc::channel::<Arc<SyncBatch>>();
        let rx = Arc::new(Mutex::new(rx));
        let helpers: Vec<JoinHandle<()>> = (0..SYNC_HELPERS)
            .filter_map(|_| {
                let rx = Arc::clone(&rx);
                let shared = Arc::clone(shared);
                std::thread::Builder::new()
                    .name("awf-store-sync".into())
                    .spawn(move || {
                        loop {
                            let next = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                            let Ok(batch) = next else {
                                return;
                            };
                            batch.work(&shared);
                        }
                    })
                    .ok()
            })
            .collect();
        drop(rx);
        Self {
            jobs: (!helpers.is_empty()).then_some(tx),
            helpers,
        }
    }
}

impl Drop for SyncPool {
    fn drop(&mut self) {
        self.jobs = None;
        for h in self.helpers.drain(..) {
            let _ = h.join();
        }
    }
}

/// Syncs `items`, side by side: the calling thread and as many of `pool`'s helpers as there
/// are items but one take them one at a time (a helper that comes late finds none left and
/// is not waited for). On a file system that commits its journal per sync, syncs issued
/// together share commits instead of queueing one after the other, which was most of a
/// run's final flush on a slow disk. Returns once every item is synced, with the failures
/// as (kind of target, message).
fn sync_items(items: Vec<SyncItem>, shared: &Shared, pool: &SyncPool) -> Vec<SyncFailure> {
    let wanted = items.len().saturating_sub(1).min(pool.helpers.len());
    let batch = Arc::new(SyncBatch::default());
    batch.lock().items = items;
    if let Some(jobs) = &pool.jobs {
        for _ in 0..wanted {
            if jobs.send(Arc::clone(&batch)).is_err() {
                break;
            }
        }
    }
    batch.work(shared);
    batch.finish()
}

/// Records one run's changes: the state file whole at its first write and when the run has
/// finished, else one journal line with the header fields and the states recorded since the
/// last write, so the cost of a step does not grow with the steps before it. Written at once
/// (a killed process loses nothing), synced by the syncer: a state file written whole is
/// added to `sync` (with its directory when the run finished); a journal line within
/// [`JOURNAL_SYNC_EVERY`] (or at the next flush). A finished run's journal is removed (the
/// state file holds everything) and its unnamed output files pruned once the syncer synced
/// the state file (`after`). A resumed run's first write is synced before it returns and
/// removes the journal of before at once (its new lines follow).
fn write_state(
    paths: &StorePaths,
    p: &mut RunProj,
    sync: &mut Vec<SyncItem>,
    after: &mut Vec<After>,
) -> Result<(), awf_domain::AwfError> {
    if !p.whole || p.finished {
        let durability = if p.resumed && !p.finished {
            state::Durability::Now { dir: false }
        } else {
            state::Durability::Later
        };
        let written = state::save_with(
            paths,
            &p.proj.snap,
            &p.files,
            p.message.as_deref(),
            durability,
        )?;
        p.whole = true;
        p.changed.clear();
        p.journal = None;
        p.journal_unsynced = false;
        let run_id = &p.proj.snap.run_id;
        let target = paths.state_file(run_id);
        if let Some(f) = written {
            sync.push(SyncItem {
                target: "state",
                what: format!("the state file {}", target.display()),
                file: Syncable::All(f),
            });
        }
        if p.finished {
            if let Some(dir) = target.parent() {
                sync.push(SyncItem {
                    target: "state",
                    what: format!("the directory {}", dir.display()),
                    file: Syncable::Dir(dir.to_path_buf()),
                });
            }
            after.push(After::Finished {
                run_id: run_id.clone(),
                files: std::mem::take(&mut p.files),
            });
        } else {
            state::remove_journal(paths, run_id)?;
        }
    } else {
        let mut output_files = state::FileRefs::new();
        let names = std::mem::take(&mut p.changed);
        let states = names
            .iter()
            .cloned()
            .filter_map(|name| {
                let st = p.proj.snap.states.get(&name)?;
                let shown = match p.files.get(&name) {
                    Some(f) => {
                        output_files.insert(name.clone(), f.clone());
                        std::borrow::Cow::Owned(state::stored_form(st, f))
                    }
                    None => std::borrow::Cow::Borrowed(st),
                };
                Some((name, shown))
            })
            .collect();
        let entry = state::JournalEntry {
            status: p.proj.snap.status,
            current_state: std::borrow::Cow::Borrowed(&p.proj.snap.current_state),
            updated_at: p.proj.snap.updated_at,
            loop_position: p.proj.snap.loop_position.clone(),
            states,
            output_files,
            spend: p.proj.snap.spend,
            child_runs: std::borrow::Cow::Borrowed(&p.proj.snap.child_runs),
        };
        let appended = (|| {
            if p.journal.is_none() {
                p.journal = Some(state::open_journal(paths, &p.proj.snap.run_id)?);
            }
            if let Some(f) = p.journal.as_mut() {
                state::append_journal(paths, &p.proj.snap.run_id, f, &entry)?;
                p.journal_unsynced = true;
            }
            Ok(())
        })();
        drop(entry);
        if appended.is_err() {
            // The states of the line not written go in the next one.
            p.changed.extend(names);
        }
        return appended;
    }
    Ok(())
}

#[cfg(test)]
#[path = "recorder_tests.rs"]
mod tests;

#[cfg(test)]
mod sync_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::fd::OwnedFd;

    /// Every item is synced; one that cannot be (a pipe) is reported with its kind and
    /// name, the others are not; journals are counted.
    #[test]
    fn items_are_synced_side_by_side_and_failures_reported() {
        let d = tempfile::tempdir().unwrap();
        let mut items = Vec::new();
        for i in 0..3 {
            let mut f = File::create(d.path().join(format!("f{i}"))).unwrap();
            f.write_all(b"line\n").unwrap();
            items.push(SyncItem {
                target: "transcript",
                what: format!("file {i}"),
                file: if i == 0 {
                    Syncable::Journal(f)
                } else {
                    Syncable::Data(f)
                },
            });
        }
        items.push(SyncItem {
            target: "state",
            what: "the directory".to_owned(),
            file: Syncable::Dir(d.path().to_path_buf()),
        });
        let (read, _write): (OwnedFd, OwnedFd) = nix::unistd::pipe().unwrap();
        items.insert(
            1,
            SyncItem {
                target: "audit",
                what: "the pipe".to_owned(),
                file: Syncable::All(File::from(read)),
            },
        );
        let shared = Arc::new(Shared::default());
        let pool = SyncPool::start(&shared);
        assert_eq!(pool.helpers.len(), SYNC_HELPERS);
        let failures = sync_items(items, &shared, &pool);
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert_eq!(failures[0].0, "audit");
        assert!(
            failures[0].1.starts_with("cannot sync the pipe: "),
            "{}",
            failures[0].1
        );
        assert_eq!(shared.journal_syncs.load(Ordering::Relaxed), 1);
        assert!(sync_items(Vec::new(), &shared, &pool).is_empty());
        // Without helpers the calling thread syncs them all.
        let f = File::create(d.path().join("alone")).unwrap();
        let alone = vec![SyncItem {
            target: "transcript",
            what: "alone".to_owned(),
            file: Syncable::Journal(f),
        }];
        assert!(sync_items(alone, &shared, &SyncPool::none()).is_empty());
        assert_eq!(shared.journal_syncs.load(Ordering::Relaxed), 2);
    }
}
