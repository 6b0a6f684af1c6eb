//! The run facade: loads, validates and launches runs. Front-ends do not call it: they drive
//! runs through the run service ([`crate::service::RunManager`], the `RunService` port), which
//! starts and resumes runs here.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::event::EventEnvelope;
use awf_domain::event::EventPublisher;
use awf_domain::mask::Masker;
use awf_domain::ports::facade::ResumeFrom;
use awf_domain::ports::facade::ResumeRequest;
use awf_domain::ports::facade::RunRequest;
use awf_domain::ports::store::RunSnapshot;
use awf_domain::run::CancelReason;
use awf_domain::run::RunId;
use awf_domain::run::StepState;
use awf_domain::scope::RuntimeInfo;
use tokio::sync::mpsc;

use crate::Services;
use crate::engine::CancelState;
use crate::engine::Run;
use crate::engine::RunSpec;

/// Starts runs on the current tokio runtime.
#[derive(Debug, Clone)]
pub struct Facade {
    services: Arc<Services>,
    /// Record a run that asks for its missing inputs from the moment it asks
    /// ([`Facade::recording_unstarted`]).
    record_unstarted: bool,
}

impl Facade {
    /// New facade over the given adapters.
    pub fn new(services: Services) -> Self {
        Self {
            services: Arc::new(services),
            record_unstarted: false,
        }
    }

    /// With `on`, a run that asks for its missing required inputs before it starts is
    /// recorded from then on (a `running` state record and history row, with the inputs given
    /// so far, secrets masked), and ended `cancelled` or `failed` in its record when it never
    /// gets them; without, nothing of it is recorded until it starts (the default).
    #[must_use]
    pub fn recording_unstarted(mut self, on: bool) -> Self {
        self.record_unstarted = on;
        self
    }

    /// The adapters this facade uses.
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// Loads and validates the workflow, resolves and validates inputs, then spawns the run.
    /// Events (first `RunStarted`, last `RunFinished` of the root run) are read from the
    /// returned handle.
    ///
    /// # Errors
    /// `USER.FACADE.IDENTIFIER_EMPTY`, lookup errors of the repository
    /// (`USER.FACADE.WORKFLOW_NOT_FOUND`, `USER.INPUT.MISSING_FILE`), `WORKFLOW.*` load and
    /// validation errors (positioned), `USER.INPUT.VALIDATION_FAILED` (masked).
    pub async fn start_run(&self, req: RunRequest) -> Result<RunHandle, AwfError> {
        let Checked {
            loaded,
            warnings,
            env,
            inputs,
            mut ask_inputs,
        } = checked(&self.services, &req)?;
        if let Some(ask) = ask_inputs.as_mut() {
            ask.record = self.record_unstarted;
        }
        let workflow = loaded.workflow;
        let run_id = match req.run_id {
            Some(id) => preassigned(&self.services, id)?,
            None => self.services.ids.run_id(),
        };
        let lock = crate::runs::lock_run(&self.services, &run_id.0)?;
        Ok(self.launch(Launch {
            services: Arc::clone(&self.services),
            lock,
            workflow,
            inputs,
            env,
            run_id,
            working_dir: req.working_dir,
            warnings,
            mocks: req.mocks,
            resume: None,
            first_started_at: req.started_at,
            resume_loop: Vec::new(),
            interactive: req.interactive,
            only_step: req.only_step,
            ask_inputs,
            auto_approve: req.auto_approve,
            mcp_servers: req.mcp_servers,
            fs_delegate: req.fs_delegate,
            spend: awf_domain::run::Spend::default(),
            shown_as: req.shown_as,
        }))
    }

    /// Continues an interrupted or failed run: same run id, the states it recorded, agent
    /// sessions included; restarts at the current state (or `--from`). Secret inputs were
    /// masked in the state file and must be given again (`--input`, config or default).
    ///
    /// The run goes on in the directory it started in (its recorded `working_dir`), not
    /// `req.working_dir`, which only a run recorded without one uses.
    ///
    /// # Errors
    /// `USER.INPUT.VALIDATION_FAILED` for an unknown or finished run, a bad `from`, masked
    /// secrets not given again, or a run whose directory no longer exists; the loading and
    /// validation errors of [`Facade::start_run`].
    pub async fn resume_run(&self, req: ResumeRequest) -> Result<RunHandle, AwfError> {
        let Some(store) = &self.services.state_store else {
            return Err(AwfError::new(
                ErrorCode::UserInputValidationFailed,
                "resume needs run state, and persistence is off",
            ));
        };
        // Held until the run ends (unless the caller took it already).
        let lock = if req.lock_held {
            None
        } else {
            crate::runs::lock_run(&self.services, &req.run_id)?
        };
        let lock_held = req.lock_held || lock.is_some();
        let snap = store.load(&req.run_id)?;
        if let Some(parent) = &snap.parent_run_id {
            return Err(sub_workflow_refused(
                &self.services,
                store.as_ref(),
                &snap.run_id,
                parent,
            ));
        }
        if !lock_held
            && crate::runs::owner_alive_elsewhere(&snap, self.services.host.as_ref())
            && let Some(pid) = snap.owner_pid
        {
            return Err(AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!("run {} is still running (awf process {pid})", snap.run_id),
            )
            .with_hint("wait for it to finish, or stop it (Ctrl-C / kill) before resuming"));
        }
        if snap.status == awf_domain::ports::store::StoredStatus::Queued {
            return Err(AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!(
                    "run {} is queued: no worker has started it yet, so there is nothing to resume",
                    snap.run_id
                ),
            )
            .with_hint("a worker (`awf serve --store`) runs it; `awf cancel` drops it"));
        }
        if !snap.status.resumable() {
            return Err(AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!(
                    "run {} already completed successfully; nothing to resume",
                    snap.run_id
                ),
            )
            .with_hint("`awf resume --list` shows runs that can be resumed"));
        }
        // The rest of the run runs where it started (refused when that directory is gone).
        let working_dir =
            crate::run_dir::resume_dir(self.services.host.as_ref(), &snap, &req.working_dir)?;
        // Workflows (its own, its sub-workflows) and the project configuration are looked up
        // from there too, as in its first attempt, not from the resumer's directory.
        let (services, config_inputs) =
            crate::run_dir::rooted_services(&self.services, &working_dir, &req)?;
        let identifier = recorded_workflow(&services, &snap);
        let mut loaded = services.repository.load(&identifier, None)?;
        loaded.workflow.source.identifier.clone_from(&snap.workflow);
        crate::validation::check_for_run(&services, &loaded)?;
        let workflow = loaded.workflow;
        let (resume, resume_loop) = resume_plan(&snap, &workflow, &req.from)?;
        // The stored mocks apply again, unless dropped (`--no-mocks`) or replaced, a step's
        // at a time (`--mock`): else a mocked failure fails the same way on every resume.
        let mut mocks = if req.no_mocks {
            BTreeMap::new()
        } else {
            snap.mocks.clone()
        };
        for (step, fields) in &req.mocks {
            mocks.insert(step.clone(), fields.clone());
        }
        check_resume_mocks(&workflow, &req.mocks)?;
        // Inputs given again that the workflow does not declare: the remote front-end's
        // refusal, else the warning `awf run` gives (it said nothing).
        let warnings = if req.refuse_undeclared_inputs {
            awf_domain::validate::refuse_undeclared_inputs(&workflow, &req.inputs)?;
            Vec::new()
        } else {
            crate::validation::undeclared_input_warnings(&workflow, &req.inputs)
        };
        let mut env: BTreeMap<String, String> = req.env.iter().cloned().collect();
        // `{{.env.PWD}}` says the directory the steps run in, as in the run's first attempt.
        if working_dir != req.working_dir
            && let Some(pwd) = env.get_mut("PWD")
        {
            *pwd = working_dir.display().to_string();
        }
        // Stored inputs (secrets masked) under config and CLI overrides.
        let given: std::collections::BTreeSet<&str> = req
            .inputs
            .iter()
            .map(|(k, _)| k.as_str())
            .chain(
                config_inputs
                    .iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, _)| k.as_str()),
            )
            .collect();
        // Only a secret the workflow declares without a default is needed again; one with
        // a default gets it, and an undeclared input reaches no step (it is neither exported
        // nor validated), so its masked value is simply dropped.
        let mut masked = crate::inputs::secrets_to_give_again(&workflow, &snap.inputs);
        masked.retain(|k| !given.contains(k.as_str()));
        let mut base: serde_json::Map<String, serde_json::Value> = snap
            .inputs
            .iter()
            .filter(|(k, v)| !crate::inputs::unstored_secret(k, v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !masked.is_empty() {
            // The hint repeats where to resume from, so it can be run as shown.
            let mut flags: Vec<String> = match &req.from {
                awf_domain::ports::facade::ResumeFrom::Current => Vec::new(),
                awf_domain::ports::facade::ResumeFrom::Previous => vec!["--from previous".into()],
                awf_domain::ports::facade::ResumeFrom::Step(s) => {
                    vec![format!("--from {}", awf_domain::shell::quote_arg(s))]
                }
            };
            flags.extend(
                masked
                    .iter()
                    .map(|k| format!("--input {}", awf_domain::shell::input_arg(k))),
            );
            return Err(AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!(
                    "secret inputs were not stored with the run and must be given again: {}",
                    masked.join(", ")
                ),
            )
            .with_hint(format!("awf resume {} {}", snap.run_id, flags.join(" "))));
        }
        for (k, v) in config_inputs.iter().filter(|(_, v)| !v.is_null()) {
            base.insert(k.clone(), v.clone());
        }
        let masker = Masker::from_named(req.inputs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let inputs = crate::inputs::resolve_inputs(
            &workflow,
            &req.inputs,
            &base,
            &working_dir,
            self.services.host.as_ref(),
        )
        .map_err(|e| e.map_message(|m| masker.mask(&m).into_owned()))?;
        Ok(self.launch(Launch {
            services,
            workflow,
            inputs,
            env,
            run_id: RunId(snap.run_id.clone()),
            lock,
            working_dir,
            warnings,
            mocks,
            resume: Some(resume),
            first_started_at: Some(snap.started_at),
            resume_loop,
            interactive: None,
            only_step: None,
            ask_inputs: None,
            auto_approve: req.auto_approve,
            mcp_servers: req.mcp_servers,
            fs_delegate: req.fs_delegate,
            spend: snap.spend.unwrap_or_default(),
            shown_as: req.shown_as,
        }))
    }

    /// Spawns a run on the current runtime.
    fn launch(&self, l: Launch) -> RunHandle {
        let (tx, rx) = mpsc::unbounded_channel();
        let finished = Arc::new(AtomicBool::new(false));
        let cancel = CancelState {
            clock: Some(Arc::clone(&l.services.clock)),
            ..CancelState::default()
        };
        let interaction = Arc::new(crate::engine::Interaction::new(&request_prefix(
            &l.run_id,
            l.resume.is_some(),
            l.services.ids.as_ref(),
        )));
        let start_error: Arc<std::sync::Mutex<Option<AwfError>>> = Arc::default();
        let runtime = RuntimeInfo {
            working_dir: l.working_dir.display().to_string(),
            user: l.env.get("USER").cloned().unwrap_or_default(),
            hostname: hostname(&l.env, l.services.host.as_ref()),
        };
        let call_stack = vec![crate::engine::identity(
            &l.workflow,
            l.services.host.as_ref(),
        )];
        let sink: Arc<dyn EventPublisher> = if l.services.recorders.is_empty() {
            Arc::new(ChannelSink(tx))
        } else {
            let mut sinks: Vec<Arc<dyn EventPublisher>> = l.services.recorders.clone();
            sinks.push(Arc::new(ChannelSink(tx)));
            Arc::new(TeeSink(sinks))
        };
        let run_id = l.run_id;
        let run = Run::new(RunSpec {
            services: Arc::clone(&l.services),
            workflow: Arc::new(l.workflow),
            run_id: run_id.clone(),
            parent_run_id: None,
            scope: None,
            inputs: l.inputs,
            env: Arc::new(l.env),
            runtime: Arc::new(runtime),
            working_dir: l.working_dir,
            sink,
            cancel: cancel.clone(),
            call_stack,
            inherited_secrets: Masker::default(),
            warnings: l.warnings,
            mocks: Arc::new(l.mocks),
            interaction: Arc::clone(&interaction),
            resume: l.resume,
            first_started_at: l.first_started_at,
            resume_loop: l.resume_loop,
            interactive: l.interactive,
            only_step: l.only_step,
            ask_inputs: l.ask_inputs,
            auto_approve: l.auto_approve,
            mcp_servers: Arc::new(l.mcp_servers),
            fs_delegate: l.fs_delegate,
            spend: Arc::new(std::sync::Mutex::new(l.spend)),
            outer_budgets: Vec::new(),
            shown_as: l.shown_as,
            shell_checked: Arc::default(),
        });
        let done = Arc::clone(&finished);
        let failed_to_start = Arc::clone(&start_error);
        tokio::spawn(async move {
            // Missing inputs are asked for first; a run that gets none does not start (no
            // RunStarted, no RunFinished: the handle's `start_error` says why).
            match run.ask_missing_inputs().await {
                Ok(()) => {
                    run.execute().await;
                }
                Err(e) => *crate::engine::lock(&failed_to_start) = Some(e),
            }
            done.store(true, Ordering::SeqCst);
        });
        RunHandle {
            run_id,
            events: rx,
            cancel,
            finished,
            interaction,
            lock: l.lock,
            start_error,
        }
    }
}

/// The prefix of the request ids an attempt of `run_id` asks under (ids are
/// `<prefix>:<n>`): the run id in its first attempt, the run id and a tag of its own in a
/// resumed one (`<run id>:<tag>`, `tag` the last 8 letters and digits of a fresh id from
/// `ids`), so an attempt never asks under an id an earlier attempt used (resumed here or in
/// another process, taken over by another worker): an answer meant for an earlier attempt's
/// request cannot reach this one's, and clients tell them apart.
fn request_prefix(
    run_id: &RunId,
    resumed: bool,
    ids: &dyn awf_domain::ports::IdGenerator,
) -> String {
    if !resumed {
        return run_id.0.clone();
    }
    let fresh: Vec<char> = ids
        .request_id()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    let tag: String = fresh[fresh.len().saturating_sub(8)..].iter().collect();
    format!("{}:{tag}", run_id.0)
}

/// What [`Facade::launch`] needs.
struct Launch {
    /// The adapters the run uses (a resumed run's repository is rooted where it started).
    services: Arc<Services>,
    lock: Option<awf_domain::ports::locks::RunLockGuard>,
    workflow: awf_domain::workflow::Workflow,
    inputs: serde_json::Map<String, serde_json::Value>,
    env: BTreeMap<String, String>,
    run_id: RunId,
    working_dir: std::path::PathBuf,
    warnings: Vec<String>,
    mocks: BTreeMap<String, BTreeMap<String, String>>,
    resume: Option<crate::engine::Resume>,
    /// A resumed run's recorded start (its duration spans its attempts).
    first_started_at: Option<std::time::SystemTime>,
    resume_loop: Vec<crate::engine::ResumeLoop>,
    interactive: Option<awf_domain::ports::facade::Interactive>,
    only_step: Option<String>,
    ask_inputs: Option<crate::engine::AskInputs>,
    auto_approve: bool,
    mcp_servers: Vec<awf_domain::ports::agent::McpServer>,
    fs_delegate: Option<std::path::PathBuf>,
    /// Spend so far (a resumed run's recorded spend).
    spend: awf_domain::run::Spend,
    /// As [`RunRequest::shown_as`].
    shown_as: Option<String>,
}

/// The `--mock` flags of `awf resume`: as `awf run`'s, each names a state of the workflow
/// that can be mocked.
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` naming the mock.
fn check_resume_mocks(
    wf: &awf_domain::workflow::Workflow,
    mocks: &BTreeMap<String, BTreeMap<String, String>>,
) -> Result<(), AwfError> {
    if mocks.is_empty() {
        return Ok(());
    }
    for step in mocks.keys() {
        if wf.state(step).is_none() {
            return Err(AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!(
                    "--mock names a state that workflow {} does not have: {step}",
                    wf.name
                ),
            )
            .with_hint(awf_domain::validate::unknown_state_hint(wf, step)));
        }
    }
    crate::engine::check_mock_kinds(wf, mocks, None)
}

/// What [`checked`] found: the run as it will start.
struct Checked {
    loaded: awf_domain::ports::repository::LoadedWorkflow,
    warnings: Vec<String>,
    env: BTreeMap<String, String>,
    inputs: serde_json::Map<String, serde_json::Value>,
    ask_inputs: Option<crate::engine::AskInputs>,
}

/// The checks [`Facade::start_run`] makes before it starts a run: the identifier given, the
/// workflow found, loaded and valid, the named states known, undeclared inputs refused when
/// asked, the inputs resolved (or the missing ones to ask for).
fn checked(services: &Services, req: &RunRequest) -> Result<Checked, AwfError> {
    if req.identifier.trim().is_empty() {
        return Err(AwfError::new(
            ErrorCode::UserFacadeIdentifierEmpty,
            "workflow identifier is empty",
        )
        .with_hint("pass a workflow name (see `awf list`) or a path to a workflow file"));
    }
    // Refused as invalid: as `awf validate` would report it (its first error, its count).
    let refused = |e: AwfError| {
        let env: BTreeMap<String, String> = req.env.iter().cloned().collect();
        crate::validation::run_refusal(services, &req.identifier, &env, e)
    };
    let loaded = services
        .repository
        .load(&req.identifier, None)
        .map_err(refused)?;
    let warnings = crate::validation::check_and_warn_for_run(services, &loaded, &req.inputs)
        .map_err(refused)?;
    check_named_states(&loaded.workflow, req)?;
    if req.refuse_undeclared_inputs {
        awf_domain::validate::refuse_undeclared_inputs(&loaded.workflow, &req.inputs)?;
    }
    let env: BTreeMap<String, String> = req.env.iter().cloned().collect();
    let masker = {
        let mut m = Masker::from_named(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        m.extend(&Masker::from_named(
            req.inputs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        ));
        m
    };
    // A front-end that can answer is asked for the missing required inputs, by the run
    // before it starts; otherwise they are the USER error (with examples) right here.
    let missing = if req.prompt_missing_inputs {
        crate::inputs::missing_required(&loaded.workflow, &req.inputs, &req.config_inputs)
    } else {
        Vec::new()
    };
    // The inputs of `wf` resolved from what was given, as the USER error (masked, with the
    // config hint) when one is refused.
    let resolve = |wf: &awf_domain::workflow::Workflow| {
        crate::inputs::resolve_inputs(
            wf,
            &req.inputs,
            &req.config_inputs,
            &req.working_dir,
            services.host.as_ref(),
        )
        .map_err(|e| {
            let e = e.map_message(|m| masker.mask(&m).into_owned());
            config_input_hint(e, &req.inputs, &req.config_inputs)
        })
    };
    let (inputs, ask_inputs) = if missing.is_empty() {
        (resolve(&loaded.workflow)?, None)
    } else {
        // The inputs given are checked now, as without asking (a bad one is the same
        // refusal, before anything is asked): only the missing required ones are asked.
        let mut given_only = loaded.workflow.clone();
        for def in &mut given_only.inputs {
            if missing.iter().any(|m| m.name == def.name) {
                def.required = false;
            }
        }
        let known = resolve(&given_only)?;
        (
            serde_json::Map::new(),
            Some(crate::engine::AskInputs {
                missing,
                given: req.inputs.clone(),
                config: req.config_inputs.clone(),
                known,
                record: false,
            }),
        )
    };
    Ok(Checked {
        loaded,
        warnings,
        env,
        inputs,
        ask_inputs,
    })
}

/// Checks `req` as [`Facade::start_run`] does before it starts a run (the workflow found,
/// loaded and valid, the named states known, the inputs given and valid, or asked for when
/// `prompt_missing_inputs` is set), without starting it: for a front-end that hands the run
/// to someone else (a worker of the shared store). Returns the loaded workflow (its file is
/// what the run should be queued by).
///
/// # Errors
/// Those of [`Facade::start_run`] before the run starts.
pub fn check_start(
    services: &Services,
    req: &RunRequest,
) -> Result<awf_domain::ports::repository::LoadedWorkflow, AwfError> {
    checked(services, req).map(|c| c.loaded)
}

/// The checks of `--mock` and `--step` that [`Facade::start_run`] makes (each names a state
/// of the workflow, a mock names a step that can be mocked), for `awf run --dry-run`, which
/// starts nothing but must refuse what the run would refuse.
///
/// # Errors
/// The workflow's load error; `USER.INPUT.VALIDATION_FAILED` naming the mock or step.
pub fn check_named_states_of(services: &Services, req: &RunRequest) -> Result<(), AwfError> {
    if req.mocks.is_empty() && req.only_step.is_none() {
        return Ok(());
    }
    let loaded = services.repository.load(&req.identifier, None)?;
    check_named_states(&loaded.workflow, req)
}

fn check_named_states(
    wf: &awf_domain::workflow::Workflow,
    req: &RunRequest,
) -> Result<(), AwfError> {
    let unknown = |what: &str, s: &str| {
        AwfError::new(
            ErrorCode::UserInputValidationFailed,
            format!(
                "{what} names a state that workflow {} does not have: {s}",
                wf.name
            ),
        )
        .with_hint(awf_domain::validate::unknown_state_hint(wf, s))
    };
    for step in req.mocks.keys() {
        if wf.state(step).is_none() {
            return Err(unknown("--mock", step));
        }
    }
    crate::engine::check_mock_kinds(wf, &req.mocks, req.only_step.as_deref())?;
    // A breakpoint naming no state is not an error (as in AWF (Go)): it never matches, so the
    // run does not pause there; the terminal front-end warns about it.
    if let Some(s) = &req.only_step {
        if wf.state(s).is_none() {
            return Err(unknown("--step", s));
        }
        // A loop body state reads its loop's `.loop`, which only the loop gives it.
        if let Some((outer, awf_domain::workflow::PartOf::LoopBody)) = wf.only_part_of(s) {
            return Err(AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!(
                    "--step {s}: {s} is a body state of loop {outer}; a loop body state cannot run alone"
                ),
            )
            .with_hint(format!(
                "run its loop with --step {outer}, or the whole workflow without --step"
            )));
        }
        crate::engine::check_step_mocks(wf, &req.mocks)?;
    }
    Ok(())
}

/// What the run `snap` is loaded from again: its recorded workflow file while it exists, else
/// the workflow's identifier (its name, looked up as `awf run` would).
fn recorded_workflow(services: &Services, snap: &awf_domain::ports::store::RunSnapshot) -> String {
    snap.workflow_path
        .as_ref()
        .filter(|p| services.host.is_file(p))
        .map_or_else(|| snap.workflow.clone(), |p| p.display().to_string())
}

/// The refusal of `awf resume` for the sub-workflow run `run_id` (a `call_workflow` child of
/// run `parent`): it is resumed with its parent, whose resume continues it (README "Runs are
/// recorded: resume"); resumed on its own it would run detached from the run that waits for
/// its outputs. The hint names the top-level run (`awf resume <root>`), found by following
/// the recorded parents (a parent that cannot be read ends the walk at the last one known),
/// with `--input NAME=<value>` for each secret input that run needs again (as its own resume
/// would ask: declared without a default; every masked secret-named input when its workflow
/// cannot be loaded). When that top-level run already completed, the refusal says there is
/// nothing to resume (its resume would only say so) instead of naming it.
fn sub_workflow_refused(
    services: &Services,
    store: &dyn awf_domain::ports::StateStore,
    run_id: &str,
    parent: &str,
) -> AwfError {
    let mut root = parent.to_owned();
    let mut root_snap = None;
    // A bound, so a damaged record naming itself as its own ancestor cannot loop forever.
    for _ in 0..64 {
        match store.load(&root) {
            Ok(s) => match s.parent_run_id.clone() {
                Some(up) if up != root => root = up,
                _ => {
                    root_snap = Some(s);
                    break;
                }
            },
            Err(_) => break,
        }
    }
    // Nothing to resume when the run at the top already completed (its resume would only
    // say so): said here, not pointed to.
    if let Some(top) = &root_snap
        && top.status == awf_domain::ports::store::StoredStatus::Success
    {
        let whose = if top.run_id == parent {
            format!("run {parent} that called it")
        } else {
            format!(
                "run {} at the top of the calls (through run {parent})",
                top.run_id
            )
        };
        return AwfError::new(
            ErrorCode::UserInputValidationFailed,
            format!(
                "run {run_id} is a sub-workflow run (a call_workflow step of run {parent}), and \
                 the {whose} already completed successfully; nothing to resume"
            ),
        )
        .with_hint("`awf resume --list` shows runs that can be resumed");
    }
    let secrets: String = root_snap
        .map(|snap| {
            crate::inputs::secrets_to_ask_again(
                services.repository.as_ref(),
                &recorded_workflow(services, &snap),
                &snap.inputs,
            )
        })
        .unwrap_or_default()
        .iter()
        .map(|k| format!(" --input {}", awf_domain::shell::input_arg(k)))
        .collect();
    AwfError::new(
        ErrorCode::UserInputValidationFailed,
        format!(
            "run {run_id} is a sub-workflow run (a call_workflow step of run {parent}): it is \
             resumed with the run that called it"
        ),
    )
    .with_hint(format!("awf resume {root}{secrets}"))
}

/// Where a resumed attempt of the run `snap` records goes on, as `awf resume` continues it
/// (`from`): the states kept, the state to restart at, the loops it stopped in (outermost
/// first) and, when it goes on where it stopped, the sub-workflow runs its calls started
/// (a call that finds its earlier child unfinished continues that child). Also what a
/// resumed `call_workflow` step continues its child run with.
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` for a `from` that names no state, or a terminal, or a
/// part of another state (a parallel state's branch, a loop's body state), or a state the
/// workflow no longer has.
pub(crate) fn resume_plan(
    snap: &RunSnapshot,
    workflow: &awf_domain::workflow::Workflow,
    from: &ResumeFrom,
) -> Result<(crate::engine::Resume, Vec<crate::engine::ResumeLoop>), AwfError> {
    let (states, start) = resume_point(snap, workflow, from)?;
    // The loop it stopped in and the loops nested in it, outermost first.
    let mut resume_loop = Vec::new();
    // (The loop is the state it resumes at, or a branch of that parallel block.)
    let resumes_in = |name: &str| {
        name == start
            || matches!(
                workflow.state(&start).map(|s| &s.kind),
                Some(awf_domain::workflow::StateKind::Parallel(p)) if p.branches.iter().any(|b| b == name)
            )
    };
    let mut level = snap.loop_position.as_ref().filter(|l| resumes_in(&l.state));
    // Where it stopped (not `--from`): at the body step in progress, past it when it had
    // completed; `--from` goes on at the iteration's first body step.
    let at_step = matches!(from, ResumeFrom::Current);
    while let Some(l) = level {
        resume_loop.push(crate::engine::ResumeLoop {
            state: l.state.clone(),
            iteration: l.iteration,
            step: l.step.clone().filter(|_| at_step),
            step_completed: at_step && l.step_completed,
            branches_completed: if at_step {
                l.branches_completed.clone()
            } else {
                Vec::new()
            },
        });
        level = l.inner.as_deref();
    }
    // `--from` runs the states from there again, their sub-workflows included; except
    // `--from` the state the run failed in (what the failure's resume hint names, breaker:
    // following it ran the child's completed steps again): its calls continue their children,
    // as a plain resume would.
    let failed_there = snap
        .states
        .get(&start)
        .is_some_and(|s| s.status == awf_domain::run::StepStatus::Failed);
    let children = if at_step {
        snap.child_runs.clone()
    } else if failed_there {
        let branches: Vec<&str> = match workflow.state(&start).map(|s| &s.kind) {
            Some(awf_domain::workflow::StateKind::Parallel(p)) => {
                p.branches.iter().map(String::as_str).collect()
            }
            _ => Vec::new(),
        };
        snap.child_runs
            .iter()
            .filter(|(path, _)| {
                let top = path.split(['/', ':']).next().unwrap_or("");
                top == start || branches.contains(&top)
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    } else {
        BTreeMap::new()
    };
    let resume = crate::engine::Resume {
        states,
        at: start,
        route_completed: at_step,
        children,
    };
    Ok((resume, resume_loop))
}

/// The states `--from` takes: neither terminals (they run nothing) nor the parts another
/// state runs (a parallel state's branches, a loop's body states), in file order.
fn resumable_states(wf: &awf_domain::workflow::Workflow) -> impl Iterator<Item = &str> {
    wf.states
        .iter()
        .filter(|(n, st)| {
            !matches!(st.kind, awf_domain::workflow::StateKind::Terminal(_))
                && wf.only_part_of(n).is_none()
        })
        .map(|(n, _)| n.as_str())
}

/// The refusal of `--from s` where `s` is a part of the state `outer` (`part`): a parallel
/// branch or a loop body state runs only inside the state that encloses it, which routes on
/// (new user: a branch resumed alone ended with NO_ROUTE, a loop body state with `undefined
/// variable: loop`). The hint names the state to resume from: the outermost enclosing one.
fn part_refused(
    wf: &awf_domain::workflow::Workflow,
    s: &str,
    outer: &str,
    part: awf_domain::workflow::PartOf,
) -> AwfError {
    let what = match part {
        awf_domain::workflow::PartOf::ParallelBranch => {
            format!("a branch of the parallel state {outer}")
        }
        awf_domain::workflow::PartOf::LoopBody => format!("in the body of the loop state {outer}"),
    };
    let top = wf.outermost_enclosing_state(s).unwrap_or(outer);
    let kind = match wf.state(top).map(|st| &st.kind) {
        Some(awf_domain::workflow::StateKind::Loop(_)) => "loop",
        _ => "parallel",
    };
    AwfError::new(
        ErrorCode::UserInputValidationFailed,
        format!("cannot resume from {s}: it is {what}, which runs it and routes on"),
    )
    .with_hint(format!("resume from the {kind} state {top} instead"))
}

/// The states to keep and the state to restart at. Source: spec/workflow.md §3.11.
fn resume_point(
    snap: &RunSnapshot,
    wf: &awf_domain::workflow::Workflow,
    from: &ResumeFrom,
) -> Result<(BTreeMap<String, StepState>, String), AwfError> {
    let bad = |m: String| AwfError::new(ErrorCode::UserInputValidationFailed, m);
    let target = match from {
        // Killed before its first step was recorded (its start was): from the start.
        ResumeFrom::Current if snap.current_state.is_empty() => wf.initial.clone(),
        ResumeFrom::Current => snap.current_state.clone(),
        // The last state that completed and runs on its own: a parallel branch or a loop's
        // body state runs only inside the state that encloses it (breaker: `--from previous`
        // resumed at a branch, which ended the run without its parallel state's routes).
        ResumeFrom::Previous => snap
            .states
            .values()
            .filter(|s| {
                s.name != snap.current_state
                    && s.completed_at.is_some()
                    && wf.only_part_of(&s.name).is_none()
            })
            .max_by_key(|s| s.completed_at)
            .map(|s| s.name.clone())
            .ok_or_else(|| bad("no prior step: no completed step found to resume from".into()))?,
        ResumeFrom::Step(s) => {
            if wf.state(s).is_none() {
                let mut e = bad(format!(
                    "state not found in workflow {}: {s}",
                    snap.workflow
                ));
                // The near name, else the states `--from` takes: only those it takes (not
                // its terminals, a parallel state's branches, a loop's body states).
                e = match awf_domain::validate::closest(s, resumable_states(wf)) {
                    Some(c) => e.with_hint(format!("did you mean '{c}'?")),
                    None => e.with_hint(format!(
                        "--from takes `current`, `previous` or one of its states: {}",
                        awf_domain::shell::quoted_list(resumable_states(wf))
                    )),
                };
                return Err(e);
            }
            // A terminal runs nothing: resuming there would record the run as ended (even
            // as a success) without running what failed or asking its approval gates.
            if matches!(
                wf.state(s).map(|st| &st.kind),
                Some(awf_domain::workflow::StateKind::Terminal(_))
            ) {
                return Err(bad(format!(
                    "cannot resume from {s}: it is a terminal state of workflow {}, which runs nothing",
                    snap.workflow
                ))
                .with_hint(format!(
                    "resume where the run stopped (`awf resume {}`) or from a state that runs (`--from <state>`)",
                    snap.run_id
                )));
            }
            // A branch runs inside its parallel state, a body state inside its loop, which
            // routes on: resumed alone it had nowhere to go, or no `.loop` to read.
            if let Some((outer, part)) = wf.only_part_of(s) {
                return Err(part_refused(wf, s, outer, part));
            }
            s.clone()
        }
    };
    if wf.state(&target).is_none() {
        // Say where it can go on from (breaker: no hint, though `--from` works).
        let done: Vec<&str> = snap
            .states
            .keys()
            .map(String::as_str)
            .filter(|s| wf.state(s).is_some())
            .collect();
        let from = if done.is_empty() {
            String::new()
        } else {
            format!(" (it ran {})", awf_domain::shell::quoted_list(done))
        };
        return Err(bad(format!(
            "state {target} no longer exists in workflow {}",
            snap.workflow
        ))
        .with_hint(format!(
            "the workflow changed since the run stopped: resume from a state it still has{from} \
             with `--from <state>` (or `--from previous`), or start a new run"
        )));
    }
    let mut states = snap.states.clone();
    if target != snap.current_state
        && let Some(cut) = snap.states.get(&target).and_then(|s| s.completed_at)
    {
        states.retain(|_, s| s.completed_at.is_none_or(|c| c <= cut));
    }
    Ok((states, target))
}

/// Adds a hint naming the project config to an input error about a value that came from
/// its `inputs:` (not overridden by `--input`): the message alone sent a user to look for
/// an `--input` they never gave.
fn config_input_hint(
    e: AwfError,
    cli: &[(String, String)],
    config: &serde_json::Map<String, serde_json::Value>,
) -> AwfError {
    let from_config: Vec<&str> = config
        .keys()
        .filter(|k| !cli.iter().any(|(c, _)| c.trim() == k.as_str()))
        .filter(|k| e.message().contains(&format!("inputs.{k}: ")))
        .map(String::as_str)
        .collect();
    if from_config.is_empty() {
        return e;
    }
    let names = from_config
        .iter()
        .map(|k| format!("inputs.{k}"))
        .collect::<Vec<_>>()
        .join(", ");
    e.with_hint(format!(
        "{names} comes from the project config (`inputs:` of .awf/config.yaml): fix it there, or override it with --input"
    ))
}

/// `$HOSTNAME` of the run's environment, else the host's name.
fn hostname(env: &BTreeMap<String, String>, host: &dyn awf_domain::ports::Host) -> String {
    if let Some(h) = env.get("HOSTNAME") {
        return h.clone();
    }
    host.hostname()
}

/// Delivers each event to several sinks, in order.
struct TeeSink(Vec<Arc<dyn EventPublisher>>);

impl EventPublisher for TeeSink {
    /// Hands `event` to each publisher [`interested`](EventPublisher::interested) in it: a
    /// copy to each but the last, which takes it (issue 9: the span and log projections,
    /// off unless an exporter or `--log-level debug` asks for them, cost no copy).
    fn emit(&self, event: EventEnvelope) {
        let mut takers = self.0.iter().filter(|s| s.interested(&event));
        let Some(mut current) = takers.next() else {
            return;
        };
        for next in takers {
            current.emit(event.clone());
            current = next;
        }
        current.emit(event);
    }

    fn interested(&self, event: &EventEnvelope) -> bool {
        self.0.iter().any(|s| s.interested(event))
    }

    fn settle(&self) -> Option<awf_domain::event::Settle> {
        let mut waits: Vec<awf_domain::event::Settle> =
            self.0.iter().filter_map(|s| s.settle()).collect();
        if waits.len() <= 1 {
            return waits.pop();
        }
        Some(Box::pin(async move {
            futures::future::join_all(waits).await;
        }))
    }

    /// The first publisher's error.
    fn record_failed(&self) -> Option<AwfError> {
        self.0.iter().find_map(|s| s.record_failed())
    }

    /// Every publisher's check; the first error.
    fn start_recorded(&self) -> Option<awf_domain::event::StartRecorded> {
        let mut checks: Vec<awf_domain::event::StartRecorded> =
            self.0.iter().filter_map(|s| s.start_recorded()).collect();
        if checks.len() <= 1 {
            return checks.pop();
        }
        Some(Box::pin(async move {
            futures::future::join_all(checks)
                .await
                .into_iter()
                .collect::<Result<Vec<()>, _>>()
                .map(|_| ())
        }))
    }
}

struct ChannelSink(mpsc::UnboundedSender<EventEnvelope>);

impl EventPublisher for ChannelSink {
    fn emit(&self, event: EventEnvelope) {
        // A closed receiver means nobody watches any more; the run goes on regardless.
        let _ = self.0.send(event);
    }
}

/// A running workflow: its events, and a way to cancel it.
#[derive(Debug)]
pub struct RunHandle {
    run_id: RunId,
    events: mpsc::UnboundedReceiver<EventEnvelope>,
    cancel: CancelState,
    finished: Arc<AtomicBool>,
    interaction: Arc<crate::engine::Interaction>,
    /// The run's lock, held as long as the handle (or whoever takes it).
    lock: Option<awf_domain::ports::locks::RunLockGuard>,
    start_error: Arc<std::sync::Mutex<Option<AwfError>>>,
}

impl RunHandle {
    /// Answers a pending interaction request (`RunEvent::InteractionRequired`).
    ///
    /// # Errors
    /// `USER.FACADE.INPUT_REJECTED` when nothing with that id is pending, or the answer does
    /// not fit the request's kind (the request then stays pending);
    /// `USER.FACADE.SESSION_CLOSED` after the run ended.
    pub fn respond(
        &self,
        request_id: &str,
        answer: awf_domain::interaction::Answer,
    ) -> Result<(), AwfError> {
        if self.finished.load(Ordering::SeqCst) {
            return Err(AwfError::new(
                ErrorCode::UserFacadeSessionClosed,
                "the run has already ended",
            ));
        }
        self.interaction.respond(request_id, answer)
    }

    /// Ids of the interaction requests waiting for an answer now (sorted).
    pub fn pending_requests(&self) -> Vec<String> {
        self.interaction.pending_ids()
    }

    /// Why the run never started, once its events ended without `RunStarted`: a missing
    /// input was not given (`USER.INPUT.VALIDATION_FAILED`, as without a front-end to ask)
    /// or the run was cancelled while asking (`EXECUTION.RUN.CANCELLED`).
    pub fn start_error(&self) -> Option<AwfError> {
        crate::engine::lock(&self.start_error).clone()
    }

    /// The run's parts, for the run service (it owns the event stream and the run's lock
    /// from then on).
    pub(crate) fn into_parts(self) -> RunParts {
        RunParts {
            run_id: self.run_id,
            events: self.events,
            cancel: self.cancel,
            interaction: self.interaction,
            lock: self.lock,
            start_error: self.start_error,
        }
    }

    /// A cloneable way to cancel the run from elsewhere (a signal handler).
    pub fn canceller(&self) -> Canceller {
        Canceller {
            cancel: self.cancel.clone(),
        }
    }
}

/// A started run taken apart by the run service.
pub(crate) struct RunParts {
    pub(crate) run_id: RunId,
    pub(crate) events: mpsc::UnboundedReceiver<EventEnvelope>,
    pub(crate) cancel: CancelState,
    pub(crate) interaction: Arc<crate::engine::Interaction>,
    /// The run's exclusive lock, released when its last event was delivered.
    pub(crate) lock: Option<awf_domain::ports::locks::RunLockGuard>,
    /// Why the run never started (see [`RunHandle::start_error`]).
    pub(crate) start_error: Arc<std::sync::Mutex<Option<AwfError>>>,
}

/// Cancels a run; cloneable and idempotent. The first reason given wins.
#[derive(Debug, Clone)]
pub struct Canceller {
    cancel: CancelState,
}

impl Canceller {
    /// Cancels with `reason` (decides exit code 130 or 143).
    pub fn cancel(&self, reason: CancelReason) {
        self.cancel.cancel(reason);
    }
}

impl std::fmt::Debug for CancelState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelState")
            .field("cancelled", &self.token.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl RunHandle {
    /// The run id.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// Next event, in order; `None` once the run has finished and every event was delivered
    /// (the last one is `RunFinished`).
    pub async fn next_event(&mut self) -> Option<EventEnvelope> {
        self.events.recv().await
    }

    /// Asks the run to stop: running processes get SIGTERM (then SIGKILL after 5 s), the run
    /// ends `cancelled` and `workflow_cancel` hooks run. Idempotent.
    pub fn cancel(&self, reason: CancelReason) {
        self.cancel.cancel(reason);
    }
}

/// Checks a preassigned run id ([`RunRequest::run_id`]): a file-name-safe id (ASCII letters,
/// digits, `-`, `_`, `.`; not starting with `.`; 1–128 characters) that no recorded run has.
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` for an id of another shape or one already recorded.
fn preassigned(services: &Services, id: RunId) -> Result<RunId, AwfError> {
    let ok = !id.0.is_empty()
        && id.0.len() <= 128
        && !id.0.starts_with('.')
        && id
            .0
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok {
        return Err(AwfError::new(
            ErrorCode::UserInputValidationFailed,
            format!("run id {:?} is not a valid run id", id.0),
        )
        .with_hint("a run id is 1-128 ASCII letters, digits, '-', '_' or '.'"));
    }
    if let Some(store) = &services.state_store
        && store.load(&id.0).is_ok()
    {
        return Err(AwfError::new(
            ErrorCode::UserInputValidationFailed,
            format!("run {} is recorded already; it was not started again", id.0),
        )
        .with_hint(format!("`awf resume {}` continues it", id.0)));
    }
    Ok(id)
}

#[cfg(test)]
mod request_prefix_tests {
    use super::*;

    /// Gives one request id, always the same.
    struct One(&'static str);

    impl awf_domain::ports::IdGenerator for One {
        fn run_id(&self) -> RunId {
            RunId(String::new())
        }
        fn child_run_id(&self, _: &RunId) -> RunId {
            RunId(String::new())
        }
        fn request_id(&self) -> String {
            self.0.to_owned()
        }
    }

    #[test]
    fn a_resumed_attempt_asks_under_a_prefix_of_its_own() {
        let ids = awf_domain::ports::fakes::SeqIds::default();
        let run = RunId("run-7".into());
        assert_eq!(request_prefix(&run, false, &ids), "run-7");
        assert_eq!(request_prefix(&run, true, &ids), "run-7:request1");
        assert_eq!(request_prefix(&run, true, &ids), "run-7:request2");
        // A real id: its last 8 hex digits.
        let uuid = One("3f2a9c1e-0b1d-4c6e-9a7b-5d4c3b2a1f0e");
        assert_eq!(request_prefix(&run, true, &uuid), "run-7:3b2a1f0e");
    }
}

#[cfg(test)]
mod tee_tests {
    use std::sync::Mutex;

    use super::*;

    /// Records the `seq` of each event it is given; interested only in even ones when picky.
    struct Seen {
        picky: bool,
        seqs: Mutex<Vec<u64>>,
    }

    impl Seen {
        fn new(picky: bool) -> Arc<Self> {
            Arc::new(Self {
                picky,
                seqs: Mutex::new(Vec::new()),
            })
        }
        fn seqs(&self) -> Vec<u64> {
            self.seqs.lock().map(|v| v.clone()).unwrap_or_default()
        }
    }

    impl EventPublisher for Seen {
        fn interested(&self, event: &EventEnvelope) -> bool {
            !self.picky || event.seq.is_multiple_of(2)
        }
        fn emit(&self, event: EventEnvelope) {
            if let Ok(mut v) = self.seqs.lock() {
                v.push(event.seq);
            }
        }
    }

    fn event(seq: u64) -> EventEnvelope {
        EventEnvelope {
            seq,
            run_id: RunId("r".into()),
            parent_run_id: None,
            at: std::time::SystemTime::UNIX_EPOCH,
            path: "s".into(),
            iteration: None,
            event: awf_domain::event::RunEvent::StepStarted {
                step: "s".into(),
                kind: "command".into(),
                command: None,
            },
        }
    }

    /// Each publisher gets every event it is interested in, in order, whatever its place in
    /// the tee (first, middle, last), and none of the others.
    #[test]
    fn the_tee_hands_events_only_to_the_publishers_interested() {
        for order in [
            [true, false, true],
            [false, true, false],
            [true, true, false],
        ] {
            let sinks: Vec<Arc<Seen>> = order.iter().map(|p| Seen::new(*p)).collect();
            let tee = TeeSink(
                sinks
                    .iter()
                    .map(|s| Arc::clone(s) as Arc<dyn EventPublisher>)
                    .collect(),
            );
            assert!(tee.interested(&event(1)) == order.contains(&false));
            for seq in 1..=4 {
                tee.emit(event(seq));
            }
            for (sink, picky) in sinks.iter().zip(order) {
                let want: Vec<u64> = if picky { vec![2, 4] } else { vec![1, 2, 3, 4] };
                assert_eq!(sink.seqs(), want, "{order:?}");
            }
        }
        // No publisher interested: nothing is delivered, and nothing fails.
        let picky = Seen::new(true);
        let tee = TeeSink(vec![Arc::clone(&picky) as Arc<dyn EventPublisher>]);
        tee.emit(event(1));
        assert!(picky.seqs().is_empty());
    }
}
