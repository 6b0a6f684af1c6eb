//! The run facade: the driving port front-ends use to start and observe runs.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::event::EventEnvelope;
use awf_domain::event::EventSink;
use awf_domain::mask::Masker;
use awf_domain::ports::RunSession;
use awf_domain::ports::WorkflowFacade;
use awf_domain::ports::facade::RunRequest;
use awf_domain::ports::facade::SessionResponse;
use awf_domain::run::CancelReason;
use awf_domain::run::RunId;
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
}

impl Facade {
    /// New facade over the given adapters.
    pub fn new(services: Services) -> Self {
        Self {
            services: Arc::new(services),
        }
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
        if req.identifier.trim().is_empty() {
            return Err(AwfError::new(
                ErrorCode::UserFacadeIdentifierEmpty,
                "workflow identifier is empty",
            )
            .with_hint("pass a workflow name (see `awf list`) or a path to a workflow file"));
        }
        let loaded = self.services.repository.load(&req.identifier, None)?;
        crate::validation::check_for_run(&self.services, &loaded)?;
        let warnings = crate::validation::run_warnings(&loaded, &req.inputs);
        let workflow = loaded.workflow;
        let env: BTreeMap<String, String> = req.env.iter().cloned().collect();
        let masker = {
            let mut m = Masker::from_named(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            m.extend(&Masker::from_named(
                req.inputs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            ));
            m
        };
        let inputs = crate::inputs::resolve_inputs(
            &workflow,
            &req.inputs,
            &req.config_inputs,
            &req.working_dir,
        )
        .map_err(|e| e.map_message(|m| masker.mask(&m).into_owned()))?;
        let run_id = RunId(uuid::Uuid::new_v4().to_string());
        let (tx, rx) = mpsc::unbounded_channel();
        let finished = Arc::new(AtomicBool::new(false));
        let cancel = CancelState::default();
        let interaction = Arc::new(crate::engine::Interaction::default());
        let runtime = RuntimeInfo {
            working_dir: req.working_dir.display().to_string(),
            user: env.get("USER").cloned().unwrap_or_default(),
            hostname: hostname(&env),
        };
        let call_stack = vec![crate::engine::identity(&workflow)];
        let run = Run::new(RunSpec {
            services: Arc::clone(&self.services),
            workflow: Arc::new(workflow),
            run_id: run_id.clone(),
            parent_run_id: None,
            inputs,
            env: Arc::new(env),
            runtime: Arc::new(runtime),
            working_dir: req.working_dir,
            sink: Arc::new(ChannelSink(tx)),
            cancel: cancel.clone(),
            call_stack,
            inherited_secrets: Masker::default(),
            warnings,
            mocks: Arc::new(req.mocks),
            interaction: Arc::clone(&interaction),
        });
        let done = Arc::clone(&finished);
        tokio::spawn(async move {
            run.execute().await;
            done.store(true, Ordering::SeqCst);
        });
        Ok(RunHandle {
            run_id,
            events: rx,
            cancel,
            finished,
            interaction,
        })
    }
}

fn hostname(env: &BTreeMap<String, String>) -> String {
    if let Some(h) = env.get("HOSTNAME") {
        return h.clone();
    }
    std::fs::read_to_string(Path::new("/proc/sys/kernel/hostname"))
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

#[async_trait::async_trait]
impl WorkflowFacade for Facade {
    async fn start(&self, request: RunRequest) -> Result<Box<dyn RunSession>, AwfError> {
        Ok(Box::new(self.start_run(request).await?))
    }
}

struct ChannelSink(mpsc::UnboundedSender<EventEnvelope>);

impl EventSink for ChannelSink {
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
}

impl std::fmt::Debug for crate::engine::Interaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interaction").finish_non_exhaustive()
    }
}

impl RunHandle {
    /// Answers a pending `InputRequired` request without going through the trait object;
    /// `None` means end of input (EOF).
    ///
    /// # Errors
    /// `USER.FACADE.INPUT_REJECTED` when nothing with that id is pending.
    pub fn answer(&self, request_id: &str, value: Option<String>) -> Result<(), AwfError> {
        self.interaction.respond(request_id, value)
    }

    /// A cloneable way to cancel the run from elsewhere (a signal handler).
    pub fn canceller(&self) -> Canceller {
        Canceller {
            cancel: self.cancel.clone(),
        }
    }
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

#[async_trait::async_trait]
impl RunSession for RunHandle {
    fn run_id(&self) -> &RunId {
        &self.run_id
    }

    async fn next_event(&mut self) -> Option<EventEnvelope> {
        self.events.recv().await
    }

    fn cancel(&self, reason: CancelReason) {
        self.cancel.cancel(reason);
    }

    async fn respond(&self, response: SessionResponse) -> Result<(), AwfError> {
        if self.finished.load(Ordering::SeqCst) {
            return Err(AwfError::new(
                ErrorCode::UserFacadeSessionClosed,
                "the run has already ended",
            ));
        }
        let SessionResponse::Input { request_id, value } = response;
        self.interaction.respond(&request_id, Some(value))
    }
}
