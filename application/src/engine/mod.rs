//! The engine: drives one run of a workflow through its states and emits the run events.
//!
//! Routing, retry, loop and parallel semantics follow spec/workflow.md §1.7, §1.8, §3.1–3.7
//! with the fixes listed in docs/compatibility.md.

mod agent;
mod agent_tools;
mod call;
mod flow;
mod hooks;
mod interaction;
mod mock;
mod operation;
mod step;

pub(crate) use interaction::AskAt;
pub(crate) use interaction::Interaction;

pub(crate) use call::identity;
pub(crate) use step::localize_awf_dirs_in;
pub(crate) use step::read_workflow_file;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Instant;
use std::time::SystemTime;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::event::EventEnvelope;
use awf_domain::event::EventPublisher;
use awf_domain::event::LogLevel;
use awf_domain::event::PreviewRoute;
use awf_domain::event::RunEvent;
use awf_domain::event::StepPreview;
use awf_domain::mask::Masker;
use awf_domain::ports::template::Evaluation;
use awf_domain::ports::template::RenderMode;
use awf_domain::ports::template::StopCheck;
use awf_domain::ports::template::TemplateError;
use awf_domain::run::CancelReason;
use awf_domain::run::RunId;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use awf_domain::run::StateResult;
use awf_domain::run::StepState;
use awf_domain::scope::ErrorInfo;
use awf_domain::scope::LoopFrame;
use awf_domain::scope::RuntimeInfo;
use awf_domain::scope::Scope;
use awf_domain::scope::WorkflowInfo;
use awf_domain::workflow::CommandSource;
use awf_domain::workflow::InputDef;
use awf_domain::workflow::StateKind;
use awf_domain::workflow::TerminalStatus;
use awf_domain::workflow::Workflow;
use awf_domain::workflow::inline_error_step;
use awf_domain::workflow::terminal_display_name;
pub(crate) use call::MAX_DEPTH as MAX_CALL_DEPTH;
pub(crate) use mock::check_mock_kinds;
use serde_json::Map;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::Services;

/// Locks a mutex, recovering the data if a panicking thread poisoned it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Numbers events of one run and hands them to the sink.
pub(crate) struct Emitter {
    sink: Arc<dyn EventPublisher>,
    seq: AtomicU64,
    run_id: RunId,
    parent: Option<RunId>,
    clock: Arc<dyn awf_domain::ports::Clock>,
}

impl Emitter {
    pub(crate) fn new(
        sink: Arc<dyn EventPublisher>,
        run_id: RunId,
        parent: Option<RunId>,
        clock: Arc<dyn awf_domain::ports::Clock>,
    ) -> Self {
        Self {
            clock,
            sink,
            seq: AtomicU64::new(0),
            run_id,
            parent,
        }
    }

    pub(crate) fn emit(&self, path: &str, iteration: Option<usize>, event: RunEvent) {
        self.emit_at(path, iteration, event, self.clock.now());
    }

    /// [`Emitter::emit`] stamped `at` (the run's start and end: the times its duration is
    /// computed from).
    pub(crate) fn emit_at(
        &self,
        path: &str,
        iteration: Option<usize>,
        event: RunEvent,
        at: SystemTime,
    ) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        self.sink.emit(EventEnvelope {
            seq,
            run_id: self.run_id.clone(),
            parent_run_id: self.parent.clone(),
            at,
            path: path.to_owned(),
            iteration,
            event,
        });
    }

    /// [`Emitter::emit_at`] to `sinks` only (the run's recorders, not its front-end): the
    /// record of a run that asks for its inputs before it starts. The envelope takes the
    /// run's next `seq` all the same.
    pub(crate) fn emit_to(
        &self,
        sinks: &[Arc<dyn EventPublisher>],
        event: RunEvent,
        at: SystemTime,
    ) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let envelope = EventEnvelope {
            seq,
            run_id: self.run_id.clone(),
            parent_run_id: self.parent.clone(),
            at,
            path: String::new(),
            iteration: None,
            event,
        };
        for s in sinks {
            s.emit(envelope.clone());
        }
    }

    /// Waits until the run's start is written where the sink checks it
    /// ([`EventPublisher::start_recorded`]), or `token` is cancelled; the error that kept it
    /// from being written. `Ok` at once with a sink that does not check it.
    pub(crate) async fn start_recorded(&self, token: &CancellationToken) -> Result<(), AwfError> {
        let Some(check) = self.sink.start_recorded() else {
            return Ok(());
        };
        tokio::select! {
            r = check => r,
            () = token.cancelled() => Ok(()),
        }
    }

    /// The error that keeps the run's steps from being recorded
    /// ([`EventPublisher::record_failed`]), if one did.
    pub(crate) fn record_failed(&self) -> Option<AwfError> {
        self.sink.record_failed()
    }

    /// Waits until the events emitted so far are durable in the run's record
    /// ([`EventPublisher::settle`]), or `token` is cancelled. Nothing to wait for with a
    /// sink that needs no barrier (the embedded store).
    pub(crate) async fn settle(&self, token: &CancellationToken) {
        if let Some(settled) = self.sink.settle() {
            tokio::select! {
                () = settled => {}
                () = token.cancelled() => {}
            }
        }
    }
}

/// Cancellation state shared between a run, its sub-runs and its handle.
#[derive(Clone, Default)]
pub(crate) struct CancelState {
    pub(crate) token: CancellationToken,
    pub(crate) reason: Arc<Mutex<Option<CancelReason>>>,
    /// Fired by a second cancel: stops the cleanup hooks (`workflow_cancel`, …) too.
    pub(crate) force: CancellationToken,
    /// When the first cancel came: [`CANCEL_HOOKS_TIMEOUT`] counts from it (breaker: it
    /// counted from the hooks' start, after the steps took up to 6 s to stop). Shared with
    /// sub-runs, whose hooks are bounded by their parent's cancel.
    pub(crate) at: Arc<Mutex<Option<std::time::Instant>>>,
    /// The clock the cancel's time is read from (the run's services' clock; none in a
    /// state made without services: then the hooks get the whole limit).
    pub(crate) clock: Option<Arc<dyn awf_domain::ports::Clock>>,
}

impl CancelState {
    /// First call: cancels the run (hooks still run). Second call: also stops those hooks.
    pub(crate) fn cancel(&self, reason: CancelReason) {
        let mut r = lock(&self.reason);
        if r.is_none() {
            *r = Some(reason);
        }
        drop(r);
        if let Some(clock) = &self.clock {
            lock(&self.at).get_or_insert_with(|| clock.instant());
        }
        if self.token.is_cancelled() {
            self.force.cancel();
        }
        self.token.cancel();
    }

    pub(crate) fn reason(&self) -> Option<CancelReason> {
        *lock(&self.reason)
    }

    /// How long the `workflow_cancel` hooks may still run: what is left of
    /// [`CANCEL_HOOKS_TIMEOUT`] since the cancel, at least [`CANCEL_HOOKS_MIN`] (so a quick
    /// clean-up still runs when the steps took long to stop). The whole limit when the run
    /// was stopped without a recorded cancel (its token cancelled by its caller).
    pub(crate) fn hooks_budget(&self) -> std::time::Duration {
        let spent = match (*lock(&self.at), &self.clock) {
            (Some(at), Some(clock)) => clock.instant().saturating_duration_since(at),
            _ => std::time::Duration::ZERO,
        };
        CANCEL_HOOKS_TIMEOUT
            .saturating_sub(spent)
            .max(CANCEL_HOOKS_MIN)
    }
}

/// Runs `f`, which may take long without awaiting (a large template, a slow expression),
/// without holding up the async runtime: on a multi-thread runtime the current worker hands
/// its other tasks to another thread for the time `f` runs (`block_in_place`); elsewhere (a
/// current-thread runtime, no runtime) `f` runs as is.
pub(crate) fn off_workers<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// Everything needed to start a run (root or sub-workflow).
/// The error of a state that finished with no transition to take.
fn no_route(state: &str) -> AwfError {
    AwfError::new(
        ErrorCode::ExecutionNoRoute,
        format!("state {state} finished but no transition matched and it has no on_success"),
    )
    .with_detail("state", state.to_owned())
    .with_hint("add a default transition (`- goto: <state>`) or on_success")
}

/// The error of a failure terminal without a `message`: that the run reached it, and why:
/// the failure that routed the run there through `on_failure` (`.error`), its step's own
/// `step S: ` left out (new user: `workflow reached failure terminal 'failed'` dropped
/// `branch broken failed`).
fn failure_terminal_text(terminal: &str, error: Option<&ErrorInfo>) -> String {
    let head = format!("workflow reached failure terminal '{terminal}'");
    let Some(e) = error else {
        return head;
    };
    let mut cause = e.message.as_str();
    for prefix in [
        format!("step {}: ", e.state),
        format!("parallel step {}: ", e.state),
    ] {
        cause = cause.strip_prefix(prefix.as_str()).unwrap_or(cause);
    }
    format!("{head} after step {} failed: {cause}", e.state)
}

/// A loop a resumed run goes on in ([`RunSpec::resume_loop`]), from the recorded
/// [`LoopPosition`](awf_domain::ports::store::LoopPosition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResumeLoop {
    /// The loop state.
    pub(crate) state: String,
    /// The iteration to go on in (0-based).
    pub(crate) iteration: usize,
    /// The body step to go on at in that iteration (`None`: its first).
    pub(crate) step: Option<String>,
    /// `step` completed there: go on from its recorded result, by its routes, instead of
    /// running it again.
    pub(crate) step_completed: bool,
    /// `step` is a parallel block that had not completed: its branches that had completed
    /// in that iteration, kept instead of run again.
    pub(crate) branches_completed: Vec<String>,
}

/// Which branches of a parallel block the resumed run stopped in are kept
/// ([`Run::resume_blocks`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeptBranches {
    /// Those recorded as completed that started at or after this time (`None`: any), the
    /// start of the interrupted attempt of the block.
    Since(Option<SystemTime>),
    /// Those named, as the loop position recorded them (a block in a loop body: its branches
    /// of earlier iterations are recorded too, under the same names).
    Named(Vec<String>),
}

/// Where a resumed run goes on ([`RunSpec::resume`]).
pub(crate) struct Resume {
    /// The states recorded by the earlier attempts (those kept).
    pub(crate) states: BTreeMap<String, StepState>,
    /// The state to start at.
    pub(crate) at: String,
    /// `at` is the state the earlier attempt stopped at (not `--from`, which runs its state
    /// again): when it is recorded there as completed (the run was killed or cancelled after
    /// it finished and before the next state started), the run goes on from that recorded
    /// result, by the state's transitions, instead of running it again.
    pub(crate) route_completed: bool,
    /// The sub-workflow runs the earlier attempts' calls started, by calling path
    /// ([`RunSnapshot::child_runs`](awf_domain::ports::store::RunSnapshot)); empty when the
    /// run does not go on where it stopped (`--from`).
    pub(crate) children: BTreeMap<String, String>,
}

pub(crate) struct RunSpec {
    pub(crate) services: Arc<Services>,
    pub(crate) workflow: Arc<Workflow>,
    pub(crate) run_id: RunId,
    pub(crate) parent_run_id: Option<RunId>,
    /// The root run's id for a sub-workflow run (`None`: this is the root run): the scope
    /// its commands are marked with ([`CommandSpec::scope`](awf_domain::ports::exec::CommandSpec)).
    pub(crate) scope: Option<RunId>,
    pub(crate) inputs: Map<String, Value>,
    pub(crate) env: Arc<BTreeMap<String, String>>,
    pub(crate) runtime: Arc<RuntimeInfo>,
    pub(crate) working_dir: PathBuf,
    pub(crate) sink: Arc<dyn EventPublisher>,
    pub(crate) cancel: CancelState,
    /// Identities (file paths or identifiers) of the workflows in the call stack, root first,
    /// this one last.
    pub(crate) call_stack: Vec<String>,
    /// Secrets inherited from the calling run (sub-workflows mask what their parent masks).
    pub(crate) inherited_secrets: Masker,
    /// Findings to announce as warnings when the run starts (unknown keys, references that
    /// `awf validate` rejects, undeclared inputs).
    pub(crate) warnings: Vec<String>,
    /// `--mock` answers by step name.
    pub(crate) mocks: Arc<BTreeMap<String, BTreeMap<String, String>>>,
    /// Pending user-input requests.
    pub(crate) interaction: Arc<Interaction>,
    /// `awf resume`: what the earlier attempts recorded and where to go on.
    pub(crate) resume: Option<Resume>,
    /// `awf resume`: when the run first started (its recorded `started_at`); its duration
    /// spans every attempt.
    pub(crate) first_started_at: Option<SystemTime>,
    /// `awf resume` of a run stopped inside a top-level loop: the loop and the iteration to
    /// continue at, then the same for each loop nested in that iteration (outermost first).
    pub(crate) resume_loop: Vec<ResumeLoop>,
    /// `--interactive`: where to stop and ask.
    pub(crate) interactive: Option<awf_domain::ports::facade::Interactive>,
    /// `--step`: run only this state.
    pub(crate) only_step: Option<String>,
    /// Missing required inputs to ask for before `RunStarted` (the front-end can answer
    /// them); `inputs` is empty until they are resolved.
    pub(crate) ask_inputs: Option<AskInputs>,
    /// `--yes`: every approval gate is approved without asking.
    pub(crate) auto_approve: bool,
    /// The front-end's MCP servers (ACP `session/new.mcpServers`), declared to every agent
    /// step of the run and of its sub-workflows.
    pub(crate) mcp_servers: Arc<Vec<awf_domain::ports::agent::McpServer>>,
    /// The editor's file channel (ACP fs delegation), given to every agent step's proxy of
    /// the run and of its sub-workflows (`ProxySpec::fs_delegate`).
    pub(crate) fs_delegate: Option<PathBuf>,
    /// What the run (with its parent and sub-workflows: one shared count) spent on agents
    /// so far; a resumed run starts from what its state file recorded.
    pub(crate) spend: Arc<Mutex<awf_domain::run::Spend>>,
    /// Budgets of the calling runs (a sub-workflow's agent steps count against them too).
    pub(crate) outer_budgets: Vec<awf_domain::workflow::Budget>,
    /// The name the run's result shows instead of its identifier (a queued run of the shared
    /// store, started by its file's path); `None`: the identifier.
    pub(crate) shown_as: Option<String>,
    /// Whether the run tree (this run with its parent and sub-workflows: one shared flag)
    /// has checked `$SHELL` at its first shell command (see `Run::check_shell`).
    pub(crate) shell_checked: Arc<std::sync::atomic::AtomicBool>,
}

/// Missing required inputs a run asks for before it starts, and what resolves the inputs
/// afterwards.
pub(crate) struct AskInputs {
    /// The inputs to ask for, in declaration order.
    pub(crate) missing: Vec<awf_domain::workflow::InputDef>,
    /// `--input` values given.
    pub(crate) given: Vec<(String, String)>,
    /// Configuration inputs.
    pub(crate) config: Map<String, Value>,
    /// The inputs given so far, resolved (the missing ones left out): what the run's record
    /// holds while it asks.
    pub(crate) known: Map<String, Value>,
    /// Record the run while it asks ([`crate::Facade::recording_unstarted`]).
    pub(crate) record: bool,
}

/// The inputs exported to commands as environment variables: only the ones `wf` declares
/// (strings as they are, other values as JSON; nulls are not exported). An input the workflow
/// does not declare never reaches a process's environment (nor a template: the workflow's
/// checks refuse a reference to it), so
/// a caller cannot set `BASH_ENV`, `LD_PRELOAD`, `PATH` or an oversized variable through it
/// (a divergence from AWF, docs/compatibility.md).
fn exported_of(wf: &Workflow, inputs: &Map<String, Value>) -> Vec<(String, String)> {
    let mut exported = Vec::new();
    for (k, v) in inputs {
        if !wf.inputs.iter().any(|d| d.name == *k) {
            continue;
        }
        let text = match v {
            Value::String(s) => s.clone(),
            Value::Null => continue,
            other => other.to_string(),
        };
        exported.push((k.clone(), text));
    }
    exported
}

/// One run in progress.
pub(crate) struct Run {
    pub(crate) svc: Arc<Services>,
    pub(crate) wf: Arc<Workflow>,
    pub(crate) run_id: RunId,
    /// The root run's id (this run's own for a root run): every command of the run tree is
    /// marked with it, and what they left behind is stopped when the root run ends.
    pub(crate) scope: RunId,
    pub(crate) inputs: Mutex<Map<String, Value>>,
    pub(crate) env: Arc<BTreeMap<String, String>>,
    pub(crate) runtime: Arc<RuntimeInfo>,
    pub(crate) working_dir: PathBuf,
    pub(crate) started_at: SystemTime,
    /// When the run first started: its `RunStarted`'s time, or a resumed run's recorded
    /// start. Its `duration_ms` is the end's millisecond − this one's (README: completed_at −
    /// started_at, across a resumed run's attempts).
    pub(crate) origin: Mutex<Option<SystemTime>>,
    pub(crate) started: Instant,
    pub(crate) masker: Mutex<Masker>,
    /// String inputs exported to commands as environment variables.
    pub(crate) exported: Mutex<Vec<(String, String)>>,
    pub(crate) states: Mutex<BTreeMap<String, StepState>>,
    pub(crate) current: Mutex<String>,
    pub(crate) emitter: Arc<Emitter>,
    pub(crate) sink: Arc<dyn EventPublisher>,
    pub(crate) cancel: CancelState,
    pub(crate) call_stack: Vec<String>,
    warnings: Vec<String>,
    pub(crate) mocks: Arc<BTreeMap<String, BTreeMap<String, String>>>,
    pub(crate) interaction: Arc<Interaction>,
    /// First state when resuming (else `initial`).
    pub(crate) resume_at: Option<String>,
    /// [`Resume::route_completed`], and `resume_at` is a completed step, sub-workflow call,
    /// operation or parallel block of the earlier attempt (a loop is not: the target of a
    /// `break` it took is not recorded).
    route_resumed: bool,
    interactive: Option<awf_domain::ports::facade::Interactive>,
    only_step: Option<String>,
    /// The states a template read that have not run in this run (each once, in order): a
    /// `--step` run that failed on one hints `--mock 'states.<name>.output=…'`.
    not_run_reads: Mutex<Vec<String>>,
    /// Taken in order: each by the first run of its loop (the nested ones inside the resumed
    /// iteration of the one before).
    pub(crate) resume_loop: Mutex<std::collections::VecDeque<ResumeLoop>>,
    /// `awf resume`: the parallel blocks the earlier attempt stopped inside (the block it
    /// resumes at when not `completed`, every block recorded as `cancelled`, and the block in
    /// progress in the iteration of the loop it goes on in), each with which of its branches
    /// completed in that attempt of it. Each is taken by the first run of its block, which
    /// keeps those branches.
    pub(crate) resume_blocks: Mutex<BTreeMap<String, KeptBranches>>,
    /// `awf resume`: the sub-workflow runs the earlier attempts' calls started, by calling
    /// path ([`Resume::children`]). Each is taken by the first call at its path, which
    /// continues it when it did not finish (see `Run::earlier_child`).
    pub(crate) resume_children: Mutex<BTreeMap<String, String>>,
    /// Missing inputs to ask for before the run starts.
    ask_inputs: Mutex<Option<AskInputs>>,
    /// `--yes`: approval gates are approved without asking.
    pub(crate) auto_approve: bool,
    /// As [`RunSpec::mcp_servers`].
    pub(crate) mcp_servers: Arc<Vec<awf_domain::ports::agent::McpServer>>,
    /// As [`RunSpec::fs_delegate`].
    pub(crate) fs_delegate: Option<PathBuf>,
    /// As [`RunSpec::spend`].
    pub(crate) spend: Arc<Mutex<awf_domain::run::Spend>>,
    /// What each agent step of this run spent so far (all its calls), for step budgets.
    pub(crate) step_spend: Mutex<BTreeMap<String, awf_domain::run::Spend>>,
    /// As [`RunSpec::outer_budgets`].
    pub(crate) outer_budgets: Vec<awf_domain::workflow::Budget>,
    /// As [`RunSpec::shown_as`].
    pub(crate) shown_as: Option<String>,
    /// As [`RunSpec::shell_checked`].
    pub(crate) shell_checked: Arc<std::sync::atomic::AtomicBool>,
}

/// What an interactive run does before a state.
enum Decision {
    Run,
    Skip,
    Abort,
    Retry(String),
    /// The run ends with this error (end of input, nobody to ask).
    Stop(AwfError),
}

/// How a run ended, before it becomes a [`RunResult`].
struct Ending {
    status: RunStatus,
    terminal: Option<String>,
    exit_code: u8,
    error: Option<AwfError>,
    failed_state: Option<String>,
    /// A success terminal's interpolated `message`.
    message: Option<String>,
}

/// What an `InteractionResolved` event shows of `r`: the answer of a secret input as `***`,
/// secrets in other typed text (conversation turns, edited values) masked.
fn shown_resolution(
    r: &awf_domain::interaction::Resolution,
    secret: bool,
    masker: &Masker,
) -> awf_domain::interaction::Resolution {
    use awf_domain::interaction::Answer;
    use awf_domain::interaction::BreakpointDecision;
    use awf_domain::interaction::Resolution;
    match r {
        Resolution::Answered(Answer::Value(v)) => Resolution::Answered(Answer::Value(if secret {
            awf_domain::mask::MASK.to_owned()
        } else {
            masker.mask(v).into_owned()
        })),
        Resolution::Answered(Answer::Decision(BreakpointDecision::Edit { name, value })) => {
            let value = if awf_domain::mask::is_secret_name(name) {
                awf_domain::mask::MASK.to_owned()
            } else {
                masker.mask(value).into_owned()
            };
            Resolution::Answered(Answer::Decision(BreakpointDecision::Edit {
                name: name.clone(),
                value,
            }))
        }
        other => other.clone(),
    }
}

/// How long `workflow_cancel` hooks may run after a cancel before they are stopped (the run
/// still ends as cancelled).
pub(crate) const CANCEL_HOOKS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The least time `workflow_cancel` hooks get when the cancel's steps took (nearly) all of
/// [`CANCEL_HOOKS_TIMEOUT`] to stop: a quick clean-up still runs.
pub(crate) const CANCEL_HOOKS_MIN: std::time::Duration = std::time::Duration::from_secs(1);

/// The failure of `workflow_cancel` hooks stopped by [`CANCEL_HOOKS_TIMEOUT`].
fn cancel_hooks_timed_out() -> AwfError {
    AwfError::new(
        ErrorCode::ExecutionCommandTimeout,
        format!(
            "workflow_cancel hook stopped: cancel hooks may run for at most {}s after a cancel",
            CANCEL_HOOKS_TIMEOUT.as_secs()
        ),
    )
}

/// `--step` with `--mock`: a completed mock of an agent step with `output_format: json` must
/// be JSON, as the step's real answer must (a full run fails the step on it); otherwise the
/// step under test reading `states.<step>.JSON` would meet an undefined variable that does not
/// say why.
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` naming the mock, with the parse error and an example.
pub(crate) fn check_step_mocks(
    wf: &awf_domain::workflow::Workflow,
    mocks: &BTreeMap<String, BTreeMap<String, String>>,
) -> Result<(), AwfError> {
    for (name, fields) in mocks {
        let get = |k: &str| {
            fields
                .iter()
                .find(|(f, _)| f.eq_ignore_ascii_case(k))
                .map(|(_, v)| v.as_str())
        };
        if get("status").is_some_and(|v| v.eq_ignore_ascii_case("failed")) {
            continue;
        }
        let Some(awf_domain::workflow::StateKind::Agent(a)) = wf.state(name).map(|s| &s.kind)
        else {
            continue;
        };
        if a.output_format.as_deref().map(str::trim) != Some("json") {
            continue;
        }
        let output = get("output").unwrap_or_default();
        if let Err(why) = agent::parse_json_output(output, &Masker::default()) {
            return Err(AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!(
                    "--mock states.{name}.output: step {name} answers JSON (output_format: json), and the mocked answer is not: {why}"
                ),
            )
            .with_hint(format!(
                "mock it with a JSON answer, e.g. --mock 'states.{name}.output={{\"ok\": true}}', or as a failed step with --mock states.{name}.status=failed"
            )));
        }
    }
    Ok(())
}

impl Run {
    pub(crate) fn new(spec: RunSpec) -> Self {
        let mut masker = Masker::from_named(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        masker.extend(&spec.inherited_secrets);
        // Values the process masks in every run (`awf serve --token-env`'s token).
        for v in awf_domain::withheld::masked_values() {
            masker.add(&v);
        }
        // Secret inputs of any type: numbers as written, every item of a list, every leaf.
        masker.extend(&Masker::from_named_values(&spec.inputs));
        let exported = exported_of(&spec.workflow, &spec.inputs);
        let (mut restored, resume_at, route_completed, resume_children) = match spec.resume {
            Some(r) => (r.states, Some(r.at), r.route_completed, r.children),
            None => (BTreeMap::new(), None, false, BTreeMap::new()),
        };
        if spec.only_step.is_some() {
            // `--step`: mocked states stand in for the states that would have run before.
            for (name, fields) in spec.mocks.iter() {
                let get = |k: &str| {
                    fields
                        .iter()
                        .find(|(f, _)| f.eq_ignore_ascii_case(k))
                        .map(|(_, v)| v.clone())
                };
                let mut st = StepState::running(name, spec.services.clock.now());
                let output = get("output").unwrap_or_default();
                st.stderr = get("stderr").unwrap_or_default().into();
                st.status = if get("status").is_some_and(|v| v.eq_ignore_ascii_case("failed")) {
                    awf_domain::run::StepStatus::Failed
                } else {
                    awf_domain::run::StepStatus::Completed
                };
                // What a full run derives from a mocked answer (`.JSON` of an agent step with
                // `output_format: json`, fences stripped for `text`), as `agent::mocked` does.
                let (output, json) = match spec.workflow.state(name).map(|s| &s.kind) {
                    Some(awf_domain::workflow::StateKind::Agent(a))
                        if st.status == awf_domain::run::StepStatus::Completed =>
                    {
                        agent::mocked_answer(a.output_format.as_deref(), output, &masker)
                    }
                    Some(awf_domain::workflow::StateKind::CallWorkflow(_)) => {
                        st.outputs = mock::call_outputs(&output);
                        (output, None)
                    }
                    _ => (output, None),
                };
                st.output = output.into();
                st.json = json;
                st.exit_code = Some(i32::from(st.status == awf_domain::run::StepStatus::Failed));
                st.completed_at = Some(spec.services.clock.now());
                restored.insert(name.clone(), st);
            }
        }
        let resume_blocks: BTreeMap<String, KeptBranches> = if resume_at.is_some() {
            restored
                .values()
                .filter(|st| {
                    let parallel = matches!(
                        spec.workflow.state(&st.name).map(|s| &s.kind),
                        Some(awf_domain::workflow::StateKind::Parallel(_))
                    );
                    // A block cancelled or failed in the attempt being resumed (at top level
                    // or inside the loop the run resumes in): its completed branches stay.
                    let interrupted = matches!(
                        st.status,
                        awf_domain::run::StepStatus::Cancelled
                            | awf_domain::run::StepStatus::Failed
                    ) || (resume_at.as_deref() == Some(st.name.as_str())
                        && st.status != awf_domain::run::StepStatus::Completed);
                    parallel && interrupted
                })
                .map(|st| (st.name.clone(), KeptBranches::Since(st.started_at)))
                .collect()
        } else {
            BTreeMap::new()
        };
        let mut resume_blocks = resume_blocks;
        // Killed inside the block it resumes at (SIGKILL: the block itself was never
        // recorded): its branches that completed after every other recorded state belong to
        // the interrupted attempt.
        if let Some(at) = resume_at.as_ref()
            && !restored.contains_key(at)
            && let Some(awf_domain::workflow::StateKind::Parallel(p)) =
                spec.workflow.state(at).map(|s| &s.kind)
        {
            let since = restored
                .values()
                .filter(|st| !p.branches.contains(&st.name))
                .filter_map(|st| st.completed_at)
                .max();
            resume_blocks.insert(at.clone(), KeptBranches::Since(since));
        }
        let route_resumed = route_completed
            && resume_at.as_ref().is_some_and(|at| {
                restored
                    .get(at)
                    .is_some_and(|st| st.status == awf_domain::run::StepStatus::Completed)
                    && spec.workflow.state(at).is_some_and(|s| {
                        !matches!(
                            s.kind,
                            awf_domain::workflow::StateKind::Loop(_)
                                | awf_domain::workflow::StateKind::Terminal(_)
                        )
                    })
            });
        let emitter = Arc::new(Emitter::new(
            Arc::clone(&spec.sink),
            spec.run_id.clone(),
            spec.parent_run_id.clone(),
            Arc::clone(&spec.services.clock),
        ));
        let started_at = spec.services.clock.now();
        Self {
            started_at,
            origin: Mutex::new(spec.first_started_at),
            started: spec.services.clock.instant(),
            svc: spec.services,
            current: Mutex::new(
                resume_at
                    .clone()
                    .unwrap_or_else(|| spec.workflow.initial.clone()),
            ),
            wf: spec.workflow,
            scope: spec.scope.unwrap_or_else(|| spec.run_id.clone()),
            run_id: spec.run_id,
            inputs: Mutex::new(spec.inputs),
            env: spec.env,
            runtime: spec.runtime,
            working_dir: spec.working_dir,
            masker: Mutex::new(masker),
            exported: Mutex::new(exported),
            states: Mutex::new(restored),
            emitter,
            sink: spec.sink,
            cancel: spec.cancel,
            call_stack: spec.call_stack,
            warnings: spec.warnings,
            mocks: spec.mocks,
            interaction: spec.interaction,
            resume_at,
            route_resumed,
            interactive: spec.interactive,
            only_step: spec.only_step,
            not_run_reads: Mutex::new(Vec::new()),
            resume_loop: Mutex::new(spec.resume_loop.into()),
            resume_blocks: Mutex::new(resume_blocks),
            resume_children: Mutex::new(resume_children),
            ask_inputs: Mutex::new(spec.ask_inputs),
            auto_approve: spec.auto_approve,
            mcp_servers: spec.mcp_servers,
            fs_delegate: spec.fs_delegate,
            spend: spec.spend,
            step_spend: Mutex::new(BTreeMap::new()),
            outer_budgets: spec.outer_budgets,
            shown_as: spec.shown_as,
            shell_checked: spec.shell_checked,
        }
    }

    /// Asks for the missing required inputs (one `MissingInput` request each, asked again
    /// with `problem` while the value breaks the input's rules), then resolves the inputs.
    /// Runs before [`Run::execute`], so before `RunStarted`; nothing to do unless the run was
    /// started with inputs to ask for.
    ///
    /// # Errors
    /// `USER.INPUT.VALIDATION_FAILED` when an input is not given (end of input, or its
    /// request timed out) or the inputs do not resolve; `EXECUTION.RUN.CANCELLED` when the
    /// run was cancelled while asking.
    pub(crate) async fn ask_missing_inputs(&self) -> Result<(), AwfError> {
        let Some(ask) = lock(&self.ask_inputs).take() else {
            return Ok(());
        };
        let recorders = if ask.record {
            self.svc.recorders.clone()
        } else {
            Vec::new()
        };
        let asked_at = self.svc.clock.now();
        if !recorders.is_empty() {
            self.record_asking(&recorders, &ask, asked_at);
        }
        let asked = self.ask_inputs(ask).await;
        if let Err(e) = &asked
            && !recorders.is_empty()
        {
            self.record_not_started(&recorders, e, asked_at).await;
        }
        asked
    }

    /// The record of a run that asks for its missing inputs before it starts, written from
    /// then on (breaker: such a run of `awf serve` was listed by `/api/executions` but not
    /// in the history nor its stats, and a cancel or a restart left nothing of it): a
    /// `RunStarted` with the inputs given so far (secret-named ones and secret values
    /// masked, as every record has them) handed to the recorders only (state record and
    /// history row `running`, audit line); the run's own `RunStarted`, once its inputs are
    /// given, records it again whole, and the front-end sees only that one.
    fn record_asking(
        &self,
        recorders: &[Arc<dyn EventPublisher>],
        ask: &AskInputs,
        at: SystemTime,
    ) {
        let mut shown = ask.known.clone();
        awf_domain::mask::redact_named(&mut shown);
        let mut masker = self.masker();
        masker.extend(&Masker::from_named(
            ask.given.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        ));
        for v in shown.values_mut() {
            masker.mask_json(v);
        }
        let event = self.run_started(shown, None, &masker);
        self.emitter.emit_to(recorders, event, at);
    }

    /// The run's `RunStarted` event: `shown` its inputs as records show them (masked), its
    /// mocks' values masked with `masker`.
    fn run_started(
        &self,
        shown: serde_json::Map<String, serde_json::Value>,
        resumed_from: Option<String>,
        masker: &Masker,
    ) -> RunEvent {
        RunEvent::RunStarted {
            workflow: self.wf.name.clone(),
            identifier: self.wf.source.identifier.clone(),
            workflow_path: self
                .wf
                .source
                .path
                .as_ref()
                .map(|p| p.display().to_string()),
            inputs: shown,
            resumed_from,
            pid: self.svc.host.pid(),
            mocks: self
                .mocks
                .iter()
                .map(|(step, fields)| {
                    let fields = fields
                        .iter()
                        .map(|(f, v)| (f.clone(), masker.mask(v).into_owned()))
                        .collect();
                    (step.clone(), fields)
                })
                .collect(),
            working_dir: Some(self.working_dir.display().to_string()).filter(|d| !d.is_empty()),
        }
    }

    /// Ends the record [`Run::record_asking`] began for a run that never got its inputs:
    /// `cancelled` (the cancel's exit code) when it was cancelled while it asked, else
    /// `failed` with `why` (an input not given, the inputs not resolving); no state ran.
    async fn record_not_started(
        &self,
        recorders: &[Arc<dyn EventPublisher>],
        why: &AwfError,
        asked_at: SystemTime,
    ) {
        let cancelled = why.code() == ErrorCode::ExecutionRunCancelled;
        let (status, exit_code) = if cancelled {
            (
                RunStatus::Cancelled,
                self.cancel
                    .reason()
                    .map_or(CancelReason::Requested.exit_code(), CancelReason::exit_code),
            )
        } else {
            (RunStatus::Failure, why.code().exit_code())
        };
        let end = self.svc.clock.now();
        let result = RunResult {
            run_id: Some(self.run_id.clone()),
            workflow: self.wf.source.identifier.clone(),
            status,
            exit_code,
            terminal: None,
            duration_ms: end
                .duration_since(asked_at)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            states: BTreeMap::new(),
            outputs: BTreeMap::new(),
            error: Some(why.body()),
            message: None,
            spend: None,
        };
        self.emitter.emit_to(
            recorders,
            RunEvent::RunFinished {
                result: Box::new(result),
            },
            end,
        );
        // Written before the run's end is shown (the run service shows it once this task
        // ends): whoever sees it ended, or restarts the server then, finds it so on record.
        let mut blocking = Vec::new();
        for r in recorders {
            match r.flushed() {
                Some(done) => done.await,
                None => blocking.push(Arc::clone(r)),
            }
        }
        if !blocking.is_empty() {
            let _ = tokio::task::spawn_blocking(move || {
                for r in &blocking {
                    r.flush();
                }
            })
            .await;
        }
    }

    /// [`Run::ask_missing_inputs`]' questions, then the inputs resolved.
    async fn ask_inputs(&self, ask: AskInputs) -> Result<(), AwfError> {
        let mut given = ask.given;
        for def in &ask.missing {
            let secret = awf_domain::mask::is_secret_name(&def.name);
            let mut problem: Option<String> = None;
            loop {
                let at = AskAt {
                    emitter: &self.emitter,
                    path: "",
                    iteration: None,
                    step: None,
                    cancel: &self.cancel.token,
                };
                let kind = awf_domain::interaction::RequestKind::MissingInput {
                    input: Box::new(def.clone()),
                    problem: problem.take(),
                };
                let resolution = self
                    .interaction
                    .ask_checked(&at, kind, None, Some(self.input_check(def)), |r| {
                        shown_resolution(r, secret, &self.masker())
                    })
                    .await;
                use awf_domain::interaction::Answer;
                use awf_domain::interaction::Resolution;
                match resolution {
                    Resolution::Answered(Answer::Value(v)) => {
                        match crate::inputs::check_one(
                            def,
                            &v,
                            &self.working_dir,
                            self.svc.host.as_ref(),
                        ) {
                            Ok(_) => {
                                given.push((def.name.clone(), v));
                                break;
                            }
                            Err(why) => {
                                problem = Some(if secret {
                                    Masker::from_named([(def.name.as_str(), v.as_str())])
                                        .mask(&why)
                                        .into_owned()
                                } else {
                                    self.mask(&why)
                                });
                            }
                        }
                    }
                    Resolution::Cancelled => {
                        return Err(AwfError::new(
                            ErrorCode::ExecutionRunCancelled,
                            "workflow cancelled",
                        ));
                    }
                    Resolution::Answered(_) | Resolution::TimedOut => {
                        return Err(AwfError::new(
                            ErrorCode::UserInputValidationFailed,
                            format!(
                                "input validation failed: inputs.{}: required but not provided",
                                def.name
                            ),
                        ));
                    }
                }
            }
        }
        let masker = Masker::from_named(given.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let inputs = crate::inputs::resolve_inputs(
            &self.wf,
            &given,
            &ask.config,
            &self.working_dir,
            self.svc.host.as_ref(),
        )
        .map_err(|e| e.map_message(|m| masker.mask(&m).into_owned()))?;
        lock(&self.masker).extend(&Masker::from_named_values(&inputs));
        *lock(&self.exported) = exported_of(&self.wf, &inputs);
        *lock(&self.inputs) = inputs;
        Ok(())
    }

    /// The check of a missing input's answer, run by `respond` before the request takes it:
    /// a value that breaks one of `def`'s rules (type, `enum`, `pattern`, `min`, `max`,
    /// `file_exists`, `file_extension`, required and empty) is refused with
    /// `USER.INPUT.VALIDATION_FAILED` naming the rule (the value masked as the run masks
    /// it, a secret-named input's always), so the request stays pending and the front-end
    /// asks again (HTTP answers 422).
    fn input_check(&self, def: &InputDef) -> interaction::AnswerCheck {
        let def = def.clone();
        let dir = self.working_dir.clone();
        let host = Arc::clone(&self.svc.host);
        let masker = self.masker();
        Box::new(move |answer| {
            let awf_domain::interaction::Answer::Value(v) = answer else {
                return Ok(());
            };
            let Err(why) = crate::inputs::check_one(&def, v, &dir, host.as_ref()) else {
                return Ok(());
            };
            let why = if awf_domain::mask::is_secret_name(&def.name) {
                Masker::from_named([(def.name.as_str(), v.as_str())])
                    .mask(&why)
                    .into_owned()
            } else {
                masker.mask(&why).into_owned()
            };
            let mut e = AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!("input validation failed: inputs.{}: {why}", def.name),
            )
            .with_detail(
                awf_domain::interaction::REFUSED_INPUT_DETAIL,
                def.name.clone(),
            )
            .with_detail(awf_domain::interaction::REFUSED_VALUE_DETAIL, why)
            .with_hint("the request is still pending: answer it again with a value that fits");
            if !def.validation.enum_values.is_empty() {
                e = e.with_hint(format!(
                    "allowed values for {}: {}",
                    def.name,
                    def.validation.enum_values.join(", ")
                ));
            }
            Err(e.with_hint(crate::inputs::INPUTS_HELP_HINT))
        })
    }

    /// Asks a front-end `kind` about `state` and waits for the resolution (see
    /// [`Interaction::ask`]); secrets in typed text are masked in the resolved event.
    pub(crate) async fn ask(
        &self,
        state: &str,
        path: &str,
        iteration: Option<usize>,
        kind: awf_domain::interaction::RequestKind,
        timeout: Option<std::time::Duration>,
    ) -> awf_domain::interaction::Resolution {
        let at = AskAt {
            emitter: &self.emitter,
            path,
            iteration,
            step: Some(state),
            cancel: &self.cancel.token,
        };
        self.interaction
            .ask(&at, kind, timeout, |r| {
                shown_resolution(r, false, &self.masker())
            })
            .await
    }

    /// Calls `f` with a scope over the current run state (inputs and states locked for the
    /// duration of the call).
    fn with_scope<T>(
        &self,
        frame: Option<&LoopFrame>,
        error: Option<&ErrorInfo>,
        f: impl FnOnce(&Scope<'_>) -> T,
    ) -> T {
        let inputs = lock(&self.inputs);
        let states = lock(&self.states);
        let info = self.workflow_info();
        f(&self.scope(&inputs, &states, &info, frame, error))
    }

    /// Runs a prepared evaluation (prepared under the scope's locks, run with none held). One
    /// that is not light runs off the async workers' duty (`block_in_place` on a
    /// multi-thread runtime: the worker's other tasks, the printer, signal handling, the
    /// HTTP server, move to another thread while it runs). It stops at its next check once
    /// the run is cancelled; one started after the cancel (cleanup hooks, the terminal's
    /// message) only once the cancel is forced (a second signal).
    ///
    /// Source: trial finding h4 (a slow `when:` blocked the runtime and outlived SIGINT).
    pub(crate) fn evaluate<T: Send + 'static>(
        &self,
        prepared: Result<Evaluation<T>, TemplateError>,
    ) -> Result<T, TemplateError> {
        let ev = prepared?;
        let token = if self.cancel.token.is_cancelled() {
            self.cancel.force.clone()
        } else {
            self.cancel.token.clone()
        };
        let stop: StopCheck = Arc::new(move || token.is_cancelled());
        if ev.light {
            return ev.run(stop);
        }
        off_workers(|| ev.run(stop))
    }

    /// Renders a template against the current run state.
    pub(crate) fn render(
        &self,
        template: &str,
        frame: Option<&LoopFrame>,
        error: Option<&ErrorInfo>,
    ) -> Result<String, TemplateError> {
        if !template.contains("{{") {
            return Ok(template.to_owned());
        }
        let prepared = self.with_scope(frame, error, |scope| {
            self.svc
                .interpolator
                .prepare(template, scope, RenderMode::Plain)
        });
        self.evaluate(prepared)
            .map_err(|e| self.not_run_yet(e, template))
    }

    /// `e`, told that the state it reads is one of the workflow's that has not run (yet) in
    /// this run, when it is: `undefined variable: states.b` alone read like a typo (trial: a
    /// terminal message reading a state the run did not pass through).
    /// `template` is the text rendered: `{{(index .states "b").ExitCode}}` names the state
    /// only there (the error says `ExitCode`).
    fn not_run_yet(&self, e: TemplateError, template: &str) -> TemplateError {
        let TemplateError::Undefined(path) = &e else {
            return e;
        };
        // A declared input without a default that the run was not given: say so (still an
        // error, as in AWF (Go)), and how to give it (trial: `undefined variable: opt`).
        if let Some(input) = first_key(path, "inputs.")
            && self
                .wf
                .inputs
                .iter()
                .any(|d| d.name == input && d.default.is_none())
            && !lock(&self.inputs).contains_key(input)
        {
            use awf_domain::ports::template::MISSING_INPUT_MARK;
            use awf_domain::ports::template::MISSING_INPUT_TAIL;
            return TemplateError::Failed(format!(
                "{e} {MISSING_INPUT_MARK}{input}{MISSING_INPUT_TAIL}; pass --input {})",
                awf_domain::shell::input_arg(input)
            ));
        }
        if matches!(path.as_str(), "ExitCode" | "exit_code") && template.contains("states") {
            // `(index .states "b").ExitCode`: the state is the skipped one the text names
            // (h6: the error said only `ExitCode`, where `.states.b.ExitCode` explains).
            let states = lock(&self.states);
            let named = states.iter().find(|(name, s)| {
                s.status == awf_domain::run::StepStatus::Skipped
                    && (template.contains(&format!("\"{name}\""))
                        || template.contains(&format!("`{name}`")))
            });
            if let Some((state, _)) = named {
                return TemplateError::Failed(skipped_exit_code(&e, state));
            }
            return e;
        }
        let Some(state) = first_key(path, "states.") else {
            return e;
        };
        let field = path
            .strip_prefix("states.")
            .and_then(|rest| rest.strip_prefix(state))
            .and_then(|rest| rest.strip_prefix('.'))
            .map(|rest| rest.split('.').next().unwrap_or(rest));
        let skipped = lock(&self.states)
            .get(state)
            .is_some_and(|s| s.status == awf_domain::run::StepStatus::Skipped);
        if skipped && matches!(field, Some("ExitCode" | "exit_code")) {
            // A branch that never started has no exit code (its `Status` is "skipped"): a 0
            // there read as success (trial).
            return TemplateError::Failed(skipped_exit_code(&e, state));
        }
        if matches!(field, Some("Outputs" | "outputs"))
            && let Some(hint) = self.mocked_outputs_hint(state, path)
        {
            return TemplateError::Failed(format!(
                "{e}{}{hint}",
                awf_domain::ports::template::HINT_SEPARATOR
            ));
        }
        if !self.wf.states.contains_key(state) || lock(&self.states).contains_key(state) {
            return e;
        }
        {
            let mut reads = lock(&self.not_run_reads);
            if !reads.iter().any(|s| s == state) {
                reads.push(state.to_owned());
            }
        }
        TemplateError::Failed(format!(
            "{e} (state \"{state}\" has not run in this run, so it has no result to read)"
        ))
    }

    /// The hint of an undefined `states.<state>.Outputs.<key>` (`path`) when `state` is a
    /// sub-workflow call mocked with an `output` that is not a JSON object, which gives no
    /// `Outputs` (new user: `--mock states.package.output=x` left `Outputs` empty, no word).
    fn mocked_outputs_hint(&self, state: &str, path: &str) -> Option<String> {
        let mock = self.mocks.get(state)?;
        if !matches!(
            self.wf.state(state).map(|s| &s.kind),
            Some(StateKind::CallWorkflow(_))
        ) {
            return None;
        }
        let output = mock
            .iter()
            .find(|(f, _)| f.eq_ignore_ascii_case("output"))
            .map_or("", |(_, v)| v.as_str());
        if !mock::call_outputs(output).is_empty() {
            return None;
        }
        let key = path.split('.').nth(3).unwrap_or("NAME");
        Some(format!(
            "{state}'s result is mocked with an output that is not a JSON object, so it has no \
             Outputs: give them as one, --mock 'states.{state}.output={{\"{key}\":\"…\"}}'"
        ))
    }

    /// Renders shell command text (composite loop items inside double quotes are escaped;
    /// under the workflow's `shell_quote: true` every interpolated value is quoted).
    pub(crate) fn render_shell(
        &self,
        template: &str,
        frame: Option<&LoopFrame>,
    ) -> Result<String, TemplateError> {
        self.render_command(template, frame, None)
    }

    /// [`Self::render_shell`] with an error in scope (hooks).
    pub(crate) fn render_command(
        &self,
        template: &str,
        frame: Option<&LoopFrame>,
        error: Option<&ErrorInfo>,
    ) -> Result<String, TemplateError> {
        if !template.contains("{{") {
            return Ok(template.to_owned());
        }
        let mode = if self.wf.shell_quote {
            RenderMode::ShellQuoted
        } else {
            RenderMode::Shell
        };
        let prepared = self.with_scope(frame, error, |scope| {
            self.svc.interpolator.prepare(template, scope, mode)
        });
        self.evaluate(prepared)
            .map_err(|e| self.not_run_yet(e, template))
    }

    /// Evaluates a boolean expression against the current run state (see
    /// [`Self::evaluate`]). A caller checks the run's cancellation before acting on the
    /// answer.
    pub(crate) fn eval_bool(
        &self,
        expr: &str,
        frame: Option<&LoopFrame>,
    ) -> Result<bool, TemplateError> {
        let prepared = self.with_scope(frame, None, |scope| {
            self.svc.expressions.prepare_bool(expr, scope)
        });
        self.evaluate(prepared)
    }

    fn workflow_info(&self) -> WorkflowInfo {
        WorkflowInfo {
            id: self.run_id.0.clone(),
            name: self.wf.name.clone(),
            current_state: lock(&self.current).clone(),
            started_at: self.started_at,
            duration: self
                .svc
                .clock
                .instant()
                .saturating_duration_since(self.started),
        }
    }

    fn scope<'a>(
        &'a self,
        inputs: &'a Map<String, Value>,
        states: &'a BTreeMap<String, StepState>,
        info: &'a WorkflowInfo,
        frame: Option<&'a LoopFrame>,
        error: Option<&'a ErrorInfo>,
    ) -> Scope<'a> {
        Scope {
            inputs,
            states,
            workflow: info,
            env: &self.env,
            context: &self.runtime,
            awf: &self.svc.awf_dirs,
            loop_frame: frame,
            error,
            workflow_dir: &self.wf.source.dir,
        }
    }

    /// The current secret set (grows when a secret input is edited at a breakpoint).
    pub(crate) fn masker(&self) -> Masker {
        lock(&self.masker).clone()
    }

    /// Masks text leaving the process.
    pub(crate) fn mask(&self, text: &str) -> String {
        lock(&self.masker).mask(text).into_owned()
    }

    /// At the run tree's first command run through `$SHELL` (a step's `command:`, a
    /// `script_file:` without `#!`, a hook's command): warns once when `$SHELL` (from `env`,
    /// the command's own variables, else the run's environment) is set but is not a
    /// POSIX-family shell ([`is_posix_shell`](awf_domain::interpreter::is_posix_shell)), so
    /// the command runs with `/bin/sh` instead, as the executor does (trial: under
    /// `SHELL=/usr/bin/tclsh` a step ran nothing and "succeeded"). One atomic load per
    /// command after the first.
    pub(crate) fn check_shell(&self, env: &[(String, String)]) {
        use std::sync::atomic::Ordering;
        if self.shell_checked.load(Ordering::Relaxed)
            || self.shell_checked.swap(true, Ordering::Relaxed)
        {
            return;
        }
        let shell = env
            .iter()
            .rev()
            .find(|(k, _)| k == "SHELL")
            .map(|(_, v)| v.as_str())
            .or_else(|| self.env.get("SHELL").map(String::as_str));
        if let Some(shell) = shell.filter(|s| !s.trim().is_empty())
            && !awf_domain::interpreter::is_posix_shell(shell)
        {
            self.log(
                None,
                LogLevel::Warn,
                &format!(
                    "SHELL={shell} is not a POSIX shell (sh, bash, dash, zsh, ksh, …): commands run with /bin/sh instead"
                ),
                "",
                None,
            );
        }
    }

    pub(crate) fn log(
        &self,
        step: Option<&str>,
        level: LogLevel,
        message: &str,
        path: &str,
        iteration: Option<usize>,
    ) {
        self.emitter.emit(
            path,
            iteration,
            RunEvent::Log {
                step: step.map(str::to_owned),
                level,
                message: self.mask(message),
            },
        );
    }

    /// Records a state result (masked) and announces it.
    pub(crate) fn record(
        &self,
        mut st: StepState,
        kind: &str,
        path: &str,
        iteration: Option<usize>,
    ) {
        let masker = self.masker();
        if !masker.is_empty() {
            // Only text that held a secret is copied (the output is often large).
            if let std::borrow::Cow::Owned(m) = masker.mask(&st.output) {
                st.output = m.into();
            }
            if let std::borrow::Cow::Owned(m) = masker.mask(&st.stderr) {
                st.stderr = m.into();
            }
            st.error = st.error.as_deref().map(|e| masker.mask(e).into_owned());
        }
        // The run keeps agent sessions as they are (a later `continue_from` resends them);
        // what leaves the engine (state files, transcripts) has them masked.
        let mut shown = st.clone();
        if let Some(session) = shown.session.as_mut()
            && !masker.is_empty()
        {
            for t in &mut session.turns {
                t.content = masker.mask(&t.content).into_owned();
            }
        }
        lock(&self.states).insert(st.name.clone(), st);
        self.emitter.emit(
            path,
            iteration,
            RunEvent::StepFinished {
                step: shown.name.clone(),
                kind: kind.to_owned(),
                state: Box::new(shown),
            },
        );
    }

    /// Runs the workflow to its end and returns the result. Emits `RunStarted` first and
    /// `RunFinished` last.
    pub(crate) async fn execute(&self) -> RunResult {
        let mut shown = lock(&self.inputs).clone();
        awf_domain::mask::redact_named(&mut shown);
        let masker = self.masker();
        for v in shown.values_mut() {
            masker.mask_json(v);
        }
        let at = self.svc.clock.now();
        lock(&self.origin).get_or_insert(at);
        self.emitter.emit_at(
            "",
            None,
            self.run_started(shown, self.resume_at.clone(), &masker),
            at,
        );
        for w in &self.warnings {
            self.log(None, LogLevel::Warn, w, "", None);
        }
        for name in &self.wf.env {
            if !self.env.contains_key(name) {
                self.log(
                    None,
                    LogLevel::Warn,
                    &format!("environment variable {name} is listed in `env:` but not set"),
                    "",
                    None,
                );
            }
        }

        let ending = self.main_loop().await;
        let ending = self.after_hooks(ending).await;
        // Providers that keep a process for the run (`acp`) close it now.
        self.svc.agents.end_run(&self.run_id.0).await;
        if self.scope == self.run_id {
            // Nothing the run tree started outlives its root run (what steps left running in
            // the background for later steps, `setsid cmd &` included), and the other runs
            // of the same process keep theirs.
            self.svc.executor.end_scope(&self.scope.0).await;
        }
        let end = self.svc.clock.now();
        let result = self.result(ending, end);
        self.emitter.emit_at(
            "",
            None,
            RunEvent::RunFinished {
                result: Box::new(result.clone()),
            },
            end,
        );
        result
    }

    async fn main_loop(&self) -> Ending {
        // Depth guard: parallel blocks and loops run their children recursively, so a block
        // that contains itself (or nesting deeper than MAX_NESTING) would recurse until the
        // stack overflows. Validation rejects both; this holds when it was bypassed.
        if let Some(d) = awf_domain::validate::containment(&self.wf)
            .into_iter()
            .next()
        {
            return self.failure(d.to_error(), None);
        }
        // Nothing runs before the run's start is on record: one that could not be written (a
        // read-only or full data root) ends the run (breaker: a read-only data root ran every
        // step, then exited 4).
        if let Err(e) = self.emitter.start_recorded(&self.cancel.token).await {
            return self.failure(e, None);
        }
        let start_hooks = &self.wf.hooks.workflow_start;
        if !start_hooks.is_empty()
            && let Err(e) = self
                .run_hooks(start_hooks, None, None, None, &self.cancel.token)
                .await
        {
            if let Some(end) = self.cancelled_ending() {
                return end;
            }
            let e = AwfError::new(
                ErrorCode::ExecutionHookFailed,
                format!("workflow_start hook failed: {}", e.message()),
            );
            return self.failure(e, None);
        }
        if let Some(step) = self.only_step.clone() {
            return self.single_step(&step).await;
        }
        let mut previous: Option<String> = None;
        // `[Step n/N]` of --interactive: this step's visit number, and the previous one's.
        let mut position = 0usize;
        let mut previous_position = 0usize;
        let mut current = self
            .resume_at
            .clone()
            .unwrap_or_else(|| self.wf.initial.clone());
        let mut route_resumed = self.route_resumed;
        // The run's most recent failure that was routed on (`on_failure`, or a failed
        // command's transition), which a terminal's message reads as `.error` (inline
        // `on_failure: {message: "… {{.error.message}}"}`, as AWF documents), also after
        // the states a compensation route ran since; `None` while no step failed.
        // A resumed run starts from its earlier attempt's last routed failure (new user:
        // `awf resume --from notify` lost `deploy`'s).
        let mut routed_error: Option<ErrorInfo> = self.recorded_routed_failure(&current);
        // That failure's hints (which npm package provides a missing agent CLI): a failure
        // terminal it routes to gives them too.
        let mut routed_hints: Vec<String> = Vec::new();
        loop {
            if let Some(end) = self.cancelled_ending() {
                return end;
            }
            if std::mem::take(&mut route_resumed) {
                match self.route_recorded(&current) {
                    Ok(Some(next)) => {
                        previous = Some(current.clone());
                        current = next;
                        continue;
                    }
                    Ok(None) => return self.failure(no_route(&current), Some(current)),
                    Err(e) => return self.failure(e, Some(current)),
                }
            }
            let Some(state) = self.wf.state(&current) else {
                return self.failure(
                    AwfError::new(
                        ErrorCode::WorkflowValidationMissingState,
                        format!("state not found: {current}"),
                    ),
                    Some(current),
                );
            };
            *lock(&self.current) = current.clone();
            if let StateKind::Terminal(t) = &state.kind {
                return self.terminal(&current, t, routed_error.as_ref(), &routed_hints);
            }
            position += 1;
            if self.stops_at(&current) {
                match self
                    .breakpoint(&current, previous.as_deref(), position)
                    .await
                {
                    Decision::Run => {}
                    Decision::Skip => {
                        let Some(next) = state.on_success.clone() else {
                            return self.failure(
                                AwfError::new(
                                    ErrorCode::ExecutionNoRoute,
                                    format!("cannot skip {current}: it has no on_success"),
                                ),
                                Some(current),
                            );
                        };
                        // Said, as every other answer is (new user: `s` printed nothing).
                        self.log(
                            Some(&current),
                            LogLevel::Info,
                            &format!("skipped {current} (next: {next})"),
                            &current,
                            None,
                        );
                        previous = Some(current.clone());
                        previous_position = position;
                        current = next;
                        continue;
                    }
                    Decision::Retry(prev) => {
                        current = prev;
                        previous = None;
                        // The step run again keeps its number.
                        position = previous_position.saturating_sub(1);
                        continue;
                    }
                    Decision::Stop(e) => return self.failure(e, Some(current)),
                    Decision::Abort => {
                        self.cancel.cancel(CancelReason::Requested);
                        return self.cancelled_ending().unwrap_or_else(|| {
                            self.failure(
                                AwfError::new(ErrorCode::ExecutionRunCancelled, "aborted"),
                                Some(current),
                            )
                        });
                    }
                }
            }
            match self
                .exec_state(&current, None, "", &self.cancel.token)
                .await
            {
                Ok(exit) => match exit.next {
                    Some(next) => {
                        // Kept through the states that run after it (a compensation step
                        // between the failure and the terminal: new user, `.error` was
                        // undefined at `deploy -> notify -> stopped`); the next routed
                        // failure replaces it.
                        if let Some(e) = &exit.failure {
                            routed_error = Some(self.step_error(&current, e));
                            routed_hints = e.hints().to_vec();
                        }
                        previous = Some(current.clone());
                        previous_position = position;
                        current = next;
                    }
                    None => {
                        if let Some(end) = self.cancelled_ending() {
                            return end;
                        }
                        let err = exit.failure.unwrap_or_else(|| no_route(&current));
                        return self.failure(err, Some(current));
                    }
                },
                Err(e) => {
                    if let Some(end) = self.cancelled_ending() {
                        return end;
                    }
                    return self.failure(e, Some(current));
                }
            }
        }
    }

    /// The next state after `name`, a state the resumed attempt recorded as completed
    /// (see [`Resume::route_completed`]): its transitions evaluated on that record, as they
    /// were when it finished. Announced as a log line.
    ///
    /// # Errors
    /// `EXECUTION.EXPRESSION.FAILED` when a transition's `when` cannot be evaluated.
    fn route_recorded(&self, name: &str) -> Result<Option<String>, AwfError> {
        let Some(state) = self.wf.state(name) else {
            return Ok(None);
        };
        let next = self.route(state, true, None, None, None)?.next;
        if let Some(next) = &next {
            self.log(
                Some(name),
                LogLevel::Info,
                &format!("{name} completed before the resume; going on to {next}"),
                name,
                None,
            );
        }
        Ok(next)
    }

    /// Whether an interactive run stops before `state`.
    fn stops_at(&self, state: &str) -> bool {
        self.interactive
            .as_ref()
            .is_some_and(|i| i.breakpoints.is_empty() || i.breakpoints.iter().any(|b| b == state))
    }

    /// Asks the front-end what to do before `state` (`--interactive`), handling inspect and
    /// edit answers itself. Source: spec/workflow.md §3.12.
    async fn breakpoint(&self, state: &str, previous: Option<&str>, position: usize) -> Decision {
        let kind = self
            .wf
            .state(state)
            .map_or("", |s| s.kind.kind_name())
            .to_owned();
        use awf_domain::interaction::Answer;
        use awf_domain::interaction::BreakpointDecision;
        use awf_domain::interaction::Resolution;
        loop {
            // Built at each ask: an edited input shows in the command.
            let preview = Box::new(self.preview(state, position));
            let request = awf_domain::interaction::RequestKind::Breakpoint {
                state_kind: kind.clone(),
                previous: previous.map(str::to_owned),
                preview,
            };
            // Cancelled, timed out: the run stops (cancelled). End of input and nobody to
            // ask end it with their own error.
            let decision = match self.ask(state, state, None, request, None).await {
                Resolution::Answered(Answer::Decision(d)) => d,
                Resolution::Answered(Answer::EndOfInput) => {
                    return Decision::Stop(
                        AwfError::new(
                            ErrorCode::UserFacadeSessionClosed,
                            format!("input ended at the breakpoint before '{state}': run aborted"),
                        )
                        .with_detail("state", state)
                        .with_hint("answer c to continue or a to abort; Ctrl-C cancels"),
                    );
                }
                Resolution::Answered(Answer::Unattended(why)) => {
                    return Decision::Stop(
                        AwfError::new(
                            ErrorCode::UserFacadeSessionClosed,
                            format!("breakpoint before '{state}' not asked: {why}"),
                        )
                        .with_detail("state", state)
                        .with_hint("run it on a terminal, or drop --interactive / --breakpoint"),
                    );
                }
                _ => return Decision::Abort,
            };
            match decision {
                BreakpointDecision::Continue => return Decision::Run,
                BreakpointDecision::Skip => return Decision::Skip,
                BreakpointDecision::Abort => return Decision::Abort,
                BreakpointDecision::Retry => match previous {
                    Some(p) => return Decision::Retry(p.to_owned()),
                    None => self.log(
                        Some(state),
                        LogLevel::Warn,
                        "nothing ran yet: retry is available after a step",
                        state,
                        None,
                    ),
                },
                BreakpointDecision::Inspect => {
                    let text = self.inspect();
                    self.log(Some(state), LogLevel::Info, &text, state, None);
                }
                BreakpointDecision::Edit { name, value } => {
                    let (k, v) = (name.trim(), value.trim());
                    if k.is_empty() {
                        self.log(
                            Some(state),
                            LogLevel::Warn,
                            "edit needs NAME=VALUE, e.g. `e count=3`",
                            state,
                            None,
                        );
                    } else {
                        self.edit_input(state, k, v);
                    }
                }
            }
        }
    }

    /// What `--interactive` shows before `state`: its number, the command as it will run
    /// (raw when it cannot be resolved yet), its timeout and its routes.
    fn preview(&self, state: &str, position: usize) -> StepPreview {
        let mut preview = StepPreview {
            position,
            // The states that can pause: a terminal only ends the run, and a state that
            // runs only as a parallel branch or in a loop's body never pauses (new user:
            // `[Step 3/6]` for the last of three steps).
            total: self
                .wf
                .states
                .iter()
                .filter(|(n, s)| {
                    !matches!(s.kind, StateKind::Terminal(_)) && self.wf.only_part_of(n).is_none()
                })
                .count(),
            ..StepPreview::default()
        };
        let Some(st) = self.wf.state(state) else {
            return preview;
        };
        preview.command = match &st.kind {
            StateKind::Command(c) => Some(match &c.source {
                CommandSource::Inline(t) => match self.render_shell(t, None) {
                    Ok(r) => self.localize_awf_dirs(&r),
                    Err(_) => t.clone(),
                },
                CommandSource::ScriptFile(p) => {
                    self.load_script(p, None).unwrap_or_else(|_| p.clone())
                }
            }),
            _ => None,
        };
        preview.timeout_ms = st
            .timeout
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let route = |on: &str, when: Option<String>, target: &str| {
            let inline = inline_error_step(target)
                .is_some()
                .then(|| self.wf.state(target))
                .flatten()
                .and_then(|s| match &s.kind {
                    StateKind::Terminal(t) => {
                        Some((t.message.clone().unwrap_or_default(), t.exit_code))
                    }
                    _ => None,
                });
            PreviewRoute {
                on: on.to_owned(),
                when,
                target: if inline.is_some() {
                    String::new()
                } else {
                    target.to_owned()
                },
                exit_code: inline.as_ref().and_then(|(_, c)| *c),
                inline_error: inline.map(|(m, _)| m),
            }
        };
        // Every route, as `--dry-run` lists them: the transitions first (evaluated first),
        // then `on_success` and `on_failure`, which apply when no transition matches.
        for t in &st.transitions {
            let on = if t.when.is_some() { "when" } else { "default" };
            preview.routes.push(route(on, t.when.clone(), &t.goto));
        }
        if let Some(s) = &st.on_success {
            preview.routes.push(route("on_success", None, s));
        }
        if let Some(f) = &st.on_failure {
            preview.routes.push(route("on_failure", None, f));
        }
        if let StateKind::Loop(l) = &st.kind
            && let Some(c) = &l.on_complete
        {
            preview.routes.push(route("on_complete", None, c));
        }
        // Secrets never reach the front-end.
        preview.command = preview.command.map(|c| self.mask(&c));
        for r in &mut preview.routes {
            r.inline_error = r.inline_error.take().map(|m| self.mask(&m));
        }
        preview
    }

    /// `e NAME=VALUE` at a breakpoint: the value must pass the input's rules.
    fn edit_input(&self, state: &str, k: &str, v: &str) {
        let Some(def) = self.wf.inputs.iter().find(|d| d.name == k) else {
            let names: Vec<&str> = self.wf.inputs.iter().map(|d| d.name.as_str()).collect();
            let hint = awf_domain::validate::closest(k, names.iter().copied())
                .map(|c| format!(" (did you mean '{c}'?)"))
                .unwrap_or_default();
            self.log(
                Some(state),
                LogLevel::Warn,
                &format!("{k} is not an input of this workflow{hint}"),
                state,
                None,
            );
            return;
        };
        match crate::inputs::check_one(def, v, &self.working_dir, self.svc.host.as_ref()) {
            Err(why) => self.log(
                Some(state),
                LogLevel::Warn,
                &format!("input {k} not changed: {why}"),
                state,
                None,
            ),
            Ok(typed) => {
                if awf_domain::mask::is_secret_name(k) {
                    lock(&self.masker).add(v);
                }
                lock(&self.inputs).insert(k.to_owned(), typed);
                let mut exported = lock(&self.exported);
                exported.retain(|(name, _)| name != k);
                exported.push((k.to_owned(), v.to_owned()));
                drop(exported);
                self.log(
                    Some(state),
                    LogLevel::Info,
                    &format!("input {k} updated"),
                    state,
                    None,
                );
            }
        }
    }

    /// Context shown by the `inspect` answer: inputs and the states so far (masked).
    fn inspect(&self) -> String {
        let mut out = String::from("inputs:");
        for (k, v) in lock(&self.inputs).iter() {
            let shown = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
            let shown = if awf_domain::mask::is_secret_name(k) {
                awf_domain::mask::MASK.to_owned()
            } else {
                self.mask(&shown)
            };
            out.push_str(&format!("\n    {k} = {shown}"));
        }
        let states = lock(&self.states);
        if states.is_empty() {
            out.push_str("\n  states: none ran yet");
        } else {
            out.push_str("\n  states:");
            for (name, st) in states.iter() {
                let first = st.output.lines().next().unwrap_or("");
                out.push_str(&format!(
                    "\n    {name}: {} {}",
                    st.status.as_str(),
                    self.mask(first)
                ));
            }
        }
        out
    }

    /// `--step`: runs one state with no routing. The run succeeds when the state does.
    async fn single_step(&self, name: &str) -> Ending {
        match self.wf.state(name) {
            None => {
                let names: Vec<&str> = self.wf.states.keys().map(String::as_str).collect();
                let mut e = AwfError::new(
                    ErrorCode::WorkflowValidationMissingState,
                    format!("state not found: {name}"),
                );
                if let Some(c) = awf_domain::validate::closest(name, names.iter().copied()) {
                    e = e.with_hint(format!("did you mean '{c}'?"));
                }
                return self.failure(e, Some(name.to_owned()));
            }
            Some(s) if matches!(s.kind, StateKind::Terminal(_)) => {
                return self.failure(
                    AwfError::new(
                        ErrorCode::UserInputValidationFailed,
                        format!("{name} is a terminal state; --step runs a step"),
                    ),
                    Some(name.to_owned()),
                );
            }
            Some(_) => {}
        }
        *lock(&self.current) = name.to_owned();
        match self.exec_state(name, None, "", &self.cancel.token).await {
            Ok(exit) if exit.succeeded => Ending {
                status: RunStatus::Success,
                terminal: None,
                exit_code: 0,
                error: None,
                failed_state: None,
                message: None,
            },
            Ok(exit) => {
                let e = exit.failure.unwrap_or_else(|| {
                    AwfError::new(
                        ErrorCode::ExecutionCommandFailed,
                        format!("step {name} failed"),
                    )
                });
                self.failure(self.mock_hint(name, e), Some(name.to_owned()))
            }
            Err(e) => self
                .cancelled_ending()
                .unwrap_or_else(|| self.failure(self.mock_hint(name, e), Some(name.to_owned()))),
        }
    }

    /// `e` of the `--step` run of `step`, with a hint naming the `--mock` that gives a result
    /// to each state the step's templates read that has none in this run (`--step` runs one
    /// step: the states before it have no result unless mocked). The first template that
    /// reads one fails, so the others are found by reading the step's templates: the hint
    /// names them all, and the command line it gives works at once.
    fn mock_hint(&self, step: &str, e: AwfError) -> AwfError {
        // A template failed on a state with no result: in the step, or in a branch or body
        // step of a block (then the error is the block's).
        let failed_on = lock(&self.not_run_reads).clone();
        if failed_on.is_empty()
            || !matches!(
                e.code(),
                ErrorCode::ExecutionTemplateFailed
                    | ErrorCode::ExecutionParallelPartialFailure
                    | ErrorCode::ExecutionLoopFailed
            )
        {
            return e;
        }
        let reads: Vec<String> = {
            let states = lock(&self.states);
            awf_domain::validate::states_read_by(&self.wf, step)
                .into_iter()
                .chain(failed_on)
                .filter(|s| !states.contains_key(s))
                .fold(Vec::new(), |mut all, s| {
                    if !all.contains(&s) {
                        all.push(s);
                    }
                    all
                })
        };
        let mocks: Vec<String> = reads
            .iter()
            .map(|s| format!("--mock 'states.{s}.output=…'"))
            .collect();
        let (which, give) = match reads.as_slice() {
            [one] => (format!("state {one} has"), "give it one"),
            _ => (format!("states {} have", reads.join(", ")), "give each one"),
        };
        e.with_hint(format!(
            "--step runs this step alone, so {which} no result: {give} with {}",
            mocks.join(" ")
        ))
    }

    fn cancelled_ending(&self) -> Option<Ending> {
        if !self.cancel.token.is_cancelled() {
            return None;
        }
        let reason = self.cancel.reason().unwrap_or(CancelReason::Requested);
        Some(Ending {
            status: RunStatus::Cancelled,
            terminal: None,
            exit_code: reason.exit_code(),
            error: Some(AwfError::new(
                ErrorCode::ExecutionRunCancelled,
                "workflow cancelled",
            )),
            failed_state: Some(lock(&self.current).clone()),
            message: None,
        })
    }

    fn failure(&self, error: AwfError, state: Option<String>) -> Ending {
        let error = error.map_message(|m| self.mask(&m));
        Ending {
            status: RunStatus::Failure,
            terminal: None,
            exit_code: error.code().exit_code(),
            error: Some(error),
            failed_state: state,
            message: None,
        }
    }

    /// The `.error` a resumed run starts with (none in a first attempt): the earlier attempt's
    /// last failed top-level state that `on_failure` routes on, from its record, unless it
    /// is `resume_at`, which runs again.
    fn recorded_routed_failure(&self, resume_at: &str) -> Option<ErrorInfo> {
        self.resume_at.as_ref()?;
        let states = lock(&self.states);
        let (name, st) = states
            .iter()
            .filter(|(name, st)| {
                st.status == awf_domain::run::StepStatus::Failed
                    && name.as_str() != resume_at
                    && self.wf.only_part_of(name).is_none()
                    && self.wf.state(name).is_some_and(|s| s.on_failure.is_some())
            })
            .max_by_key(|(_, st)| st.completed_at)?;
        let code = st.error_code.unwrap_or(ErrorCode::ExecutionCommandFailed);
        Some(ErrorInfo {
            message: st.error.clone().unwrap_or_default(),
            state: name.clone(),
            exit_code: st
                .exit_code
                .filter(|c| *c != 0)
                .map_or_else(|| i64::from(code.exit_code()), i64::from),
            kind: code.category().as_str().to_ascii_lowercase(),
        })
    }

    /// `.error` of a terminal reached through `on_failure` from state `name`, which failed
    /// with `e`: its message, the state, its exit code (the process's when it ran one, else
    /// the error's category's) and the category.
    fn step_error(&self, name: &str, e: &AwfError) -> ErrorInfo {
        let exit_code = lock(&self.states)
            .get(name)
            .and_then(|s| s.exit_code)
            .filter(|c| *c != 0)
            .map_or_else(|| i64::from(e.code().exit_code()), i64::from);
        ErrorInfo {
            message: e.message().to_owned(),
            state: name.to_owned(),
            exit_code,
            kind: e.code().category().as_str().to_ascii_lowercase(),
        }
    }

    /// The ending at terminal `name` (`t`), reached after the failure `error` (with its
    /// `hints`) when an `on_failure` route led there; a failure terminal's error gives those
    /// hints too.
    fn terminal(
        &self,
        name: &str,
        t: &awf_domain::workflow::TerminalState,
        error: Option<&ErrorInfo>,
        hints: &[String],
    ) -> Ending {
        let (status, message, exit_code) = (t.status, t.message.as_deref(), t.exit_code);
        // A message that cannot be rendered (it reads a state this run never reached) is
        // shown as written, as in AWF (Go), and a warning says why (breaker: the template
        // text came out as the result with no word).
        // Trailing white space is left out (`{{.states.x.Stderr}}` ends with a line break),
        // and a message that renders to nothing is no message.
        let rendered = |m: &str| match self.render(m, None, error) {
            Ok(t) => t.trim_end().to_owned(),
            Err(e) => {
                self.log(
                    Some(name),
                    LogLevel::Warn,
                    &format!("terminal {name}: its message is shown as written: {e}"),
                    name,
                    None,
                );
                m.to_owned()
            }
        };
        match status {
            TerminalStatus::Success => Ending {
                status: RunStatus::Success,
                terminal: Some(terminal_display_name(name)),
                exit_code: 0,
                error: None,
                failed_state: None,
                message: message
                    .map(rendered)
                    .map(|t| self.mask(&t))
                    .filter(|t| !t.trim().is_empty()),
            },
            TerminalStatus::Failure => {
                let text = message
                    .map(rendered)
                    .filter(|t| !t.trim().is_empty())
                    .unwrap_or_else(|| failure_terminal_text(&terminal_display_name(name), error));
                let code = exit_code
                    .and_then(|c| u8::try_from(c).ok())
                    .filter(|c| *c != 0)
                    .unwrap_or(ErrorCode::ExecutionTerminalFailure.exit_code());
                // An inline `on_failure`'s terminal has no name of its own: the run's
                // `terminal` says whose it is, and no detail repeats it.
                let mut error =
                    AwfError::new(ErrorCode::ExecutionTerminalFailure, self.mask(&text));
                if inline_error_step(name).is_none() {
                    error = error.with_detail("terminal", name);
                }
                for h in hints {
                    error = error.with_hint(self.mask(h));
                }
                let failed_state = lock(&self.states)
                    .values()
                    .filter(|s| s.status == awf_domain::run::StepStatus::Failed)
                    .max_by_key(|s| s.completed_at)
                    .map(|s| s.name.clone());
                Ending {
                    status: RunStatus::Failure,
                    terminal: Some(terminal_display_name(name)),
                    exit_code: code,
                    error: Some(error),
                    failed_state,
                    message: None,
                }
            }
        }
    }

    async fn after_hooks(&self, ending: Ending) -> Ending {
        // End hooks run even after a cancel; only a second cancel stops them.
        let fresh = self.cancel.force.clone();
        let (actions, error_info) = match ending.status {
            RunStatus::Success => (&self.wf.hooks.workflow_end, None),
            RunStatus::Cancelled => (&self.wf.hooks.workflow_cancel, None),
            RunStatus::Failure => {
                let info = ending.error.as_ref().map(|e| ErrorInfo {
                    message: e.message().to_owned(),
                    state: ending.failed_state.clone().unwrap_or_default(),
                    exit_code: i64::from(ending.exit_code),
                    kind: e.code().category().as_str().to_ascii_lowercase(),
                });
                (&self.wf.hooks.workflow_error, info)
            }
        };
        // After a cancel the user is waiting: the cancel hooks get a bounded time, then
        // they are stopped like a second Ctrl-C would stop them.
        let cancelled = ending.status == RunStatus::Cancelled;
        // Which hook list failed (new user: `hook failed: …` did not say).
        let kind = match ending.status {
            RunStatus::Success => "workflow_end",
            RunStatus::Cancelled => "workflow_cancel",
            RunStatus::Failure => "workflow_error",
        };
        let bounded = async {
            if cancelled {
                let guard = fresh.clone();
                let fired = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                let fired_by_timer = std::sync::Arc::clone(&fired);
                // Counted from the cancel, not from the hooks' start.
                let budget = self.cancel.hooks_budget();
                let timer = tokio::spawn(async move {
                    tokio::time::sleep(budget).await;
                    fired_by_timer.store(true, std::sync::atomic::Ordering::SeqCst);
                    guard.cancel();
                });
                let r = self
                    .run_hooks(actions, None, None, error_info.as_ref(), &fresh)
                    .await;
                timer.abort();
                // Said as what stopped it: the time limit of cancel hooks (trial 22 #9).
                match r {
                    Err(_) if fired.load(std::sync::atomic::Ordering::SeqCst) => {
                        Err(cancel_hooks_timed_out())
                    }
                    other => {
                        other.map_err(|e| e.map_message(|m| format!("{kind} hook failed: {m}")))
                    }
                }
            } else {
                self.run_hooks(actions, None, None, error_info.as_ref(), &fresh)
                    .await
                    .map_err(|e| e.map_message(|m| format!("{kind} hook failed: {m}")))
            }
        };
        if !actions.is_empty()
            && let Err(e) = bounded.await
        {
            self.log(None, LogLevel::Warn, e.message(), "", None);
        }
        ending
    }

    fn result(&self, ending: Ending, end: SystemTime) -> RunResult {
        // Each output prepared under the locks, rendered with none held.
        let prepared: Vec<_> = {
            let inputs = lock(&self.inputs);
            let states = lock(&self.states);
            let info = self.workflow_info();
            let scope = self.scope(&inputs, &states, &info, None, None);
            self.wf
                .outputs
                .iter()
                .map(|out| {
                    let template = if out.from.contains("{{") {
                        out.from.clone()
                    } else {
                        format!("{{{{.{}}}}}", out.from.trim().trim_start_matches('.'))
                    };
                    (
                        out,
                        self.svc
                            .interpolator
                            .prepare(&template, &scope, RenderMode::Plain),
                    )
                })
                .collect()
        };
        let mut outputs = BTreeMap::new();
        for (out, prepared) in prepared {
            match self.evaluate(prepared) {
                Ok(v) => {
                    outputs.insert(out.name.clone(), Value::String(self.mask(&v)));
                }
                Err(e) => {
                    if ending.status == RunStatus::Success {
                        self.log(
                            None,
                            LogLevel::Warn,
                            &format!("output {}: cannot read {}: {e}", out.name, out.from),
                            "",
                            None,
                        );
                    }
                }
            }
        }
        RunResult {
            run_id: Some(self.run_id.clone()),
            workflow: self
                .shown_as
                .clone()
                .unwrap_or_else(|| self.wf.source.identifier.clone()),
            status: ending.status,
            exit_code: ending.exit_code,
            terminal: ending.terminal,
            duration_ms: awf_domain::projection::span_ms(
                (*lock(&self.origin)).unwrap_or(self.started_at),
                end,
            ),
            states: lock(&self.states)
                .iter()
                .map(|(k, v)| (k.clone(), StateResult::from(v)))
                .collect(),
            outputs,
            error: ending.error.map(|e| e.body()),
            message: ending.message,
            spend: {
                let spend = *lock(&self.spend);
                (!spend.is_zero() || self.wf.budget.is_some()).then_some(spend)
            },
        }
    }
}

/// `e` (an undefined `ExitCode`) told that `state` was skipped, so it has none.
fn skipped_exit_code(e: &TemplateError, state: &str) -> String {
    format!(
        "{e} (state \"{state}\" was skipped: its parallel block ended before it started, so it has no exit code; its Status reads \"skipped\")"
    )
}

/// The key right after `prefix` in a template path (`inputs.opt.x` with `inputs.`: `opt`);
/// `None` when the path does not start with `prefix`.
fn first_key<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    path.strip_prefix(prefix)
        .map(|rest| rest.split('.').next().unwrap_or(rest))
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "guard_tests.rs"]
mod guard_tests;

#[cfg(test)]
#[path = "interaction_tests.rs"]
mod interaction_tests;

#[cfg(test)]
#[path = "agent_tools_tests.rs"]
mod agent_tools_tests;
