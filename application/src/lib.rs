//! awf application layer: the engine (state machine, parallel blocks, loops, sub-workflows,
//! retry, hooks) and the use cases front-ends call (run facade, validation, dry-run plan).
//!
//! Sees only domain ports: adapters are handed in through [`Services`] by the composition
//! root. Depends on awf-domain, tokio (sync, time, macros), tokio-util, futures and tracing.
#![deny(clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::sync::Arc;

use awf_domain::ports::AgentProvider;
use awf_domain::ports::AgentRegistry;
use awf_domain::ports::Clock;
use awf_domain::ports::CommandExecutor;
use awf_domain::ports::ExpressionEvaluator;
use awf_domain::ports::Host;
use awf_domain::ports::IdGenerator;
use awf_domain::ports::Interpolator;
use awf_domain::ports::RunLocks;
use awf_domain::ports::StateStore;
use awf_domain::ports::WorkflowRepository;

mod engine;
pub mod facade;
pub mod inputs;
pub mod operation_tools;
pub mod plan;
pub mod run_dir;
pub mod runs;
pub mod service;
pub mod tools;
pub mod validation;
pub mod workflow_tools;

#[cfg(test)]
mod ports_tests;

pub use facade::Canceller;
pub use facade::Facade;
pub use facade::RunHandle;
pub use inputs::resolve_inputs;
pub use operation_tools::OperationTools;
pub use service::RunManager;
pub use service::ServiceConfig;
pub use tools::AuditContext;
pub use tools::ToolRouter;
pub use validation::ValidationReport;
pub use validation::one_line;
pub use validation::validate_loaded;
pub use validation::validate_workflow;
pub use workflow_tools::WorkflowTools;
pub use workflow_tools::WorkflowToolsConfig;

/// The adapters a run needs, built by the composition root.
#[derive(Clone)]
pub struct Services {
    /// Loads workflow files (also used for sub-workflows).
    pub repository: Arc<dyn WorkflowRepository>,
    /// Renders `{{ }}` templates.
    pub interpolator: Arc<dyn Interpolator>,
    /// Evaluates `when`, `while`, `break_when` and `max_iterations` arithmetic.
    pub expressions: Arc<dyn ExpressionEvaluator>,
    /// Runs shell commands and scripts.
    pub executor: Arc<dyn CommandExecutor>,
    /// Agent providers by name.
    pub agents: Arc<dyn AgentRegistry>,
    /// State files of earlier runs (`awf resume`); `None` when persistence is off.
    pub state_store: Option<Arc<dyn StateStore>>,
    /// Projections that record every run (state files, history, audit, transcript, spans).
    pub recorders: Vec<Arc<dyn awf_domain::event::EventPublisher>>,
    /// The `.awf` template namespace: `prompts_dir`, `scripts_dir`, `config_dir`, `data_dir`,
    /// `workflows_dir`, `plugins_dir`, `skills_dir`, `roles_dir`.
    pub awf_dirs: BTreeMap<String, String>,
    /// Wall time (records, events) and monotonic time (deadlines).
    pub clock: Arc<dyn Clock>,
    /// Ids of runs, child runs and interaction requests.
    pub ids: Arc<dyn IdGenerator>,
    /// Read-only files (scripts, prompts, roles, skills, input and validation checks) and host
    /// facts (pid, process liveness, host name, working and temp dirs, home).
    pub host: Arc<dyn Host>,
    /// Exclusive locks on run ids, taken when a run starts or resumes; `None`: no locking
    /// (nothing is recorded to protect).
    pub run_locks: Option<Arc<dyn RunLocks>>,
    /// Builds the tools of agent steps with `mcp_proxy: {enable: true}` (a stdio `awf
    /// mcp-serve` for CLI agents, in-process for `openai_compatible`); `None`: such a step
    /// fails with `USER.MCP_PROXY.INVALID_CONFIG` saying this build serves no tools.
    pub tool_proxies: Option<Arc<dyn awf_domain::ports::ToolProxies>>,
    /// Operations (`type: operation` steps, plugin tools); `None`: none are provided.
    pub operations: Option<Arc<dyn awf_domain::ports::Operations>>,
    /// Model prices (`prices:` of `.awf/config.yaml`) that turn agent tokens into US dollars
    /// for `budget: {usd}` and the run's spend; empty: nothing is priced.
    pub prices: awf_domain::run::Prices,
    /// Reads back the recorded event log of a run this process does not hold (the run
    /// service replays it to subscribers, and follows it while another process runs the
    /// run); `None`: only runs in memory can be subscribed to.
    pub event_log: Option<Arc<dyn awf_domain::ports::EventLogReader>>,
}

#[cfg(test)]
impl Services {
    /// Port fakes for application tests: the given repository and executor, no agents, no
    /// store, no recorders, the fake interpolator and expressions, a still clock, sequential
    /// ids, an empty host, no run locks. Tests override fields with `..Services::fakes(..)`.
    pub(crate) fn fakes(
        repository: awf_domain::ports::fakes::FakeRepository,
        executor: Arc<dyn CommandExecutor>,
    ) -> Self {
        use awf_domain::ports::fakes;
        Self {
            repository: Arc::new(repository),
            interpolator: Arc::new(fakes::FakeInterpolator),
            expressions: Arc::new(fakes::FakeExpressions::new()),
            executor,
            agents: Arc::new(fakes::FakeAgents::default()),
            state_store: None,
            recorders: Vec::new(),
            awf_dirs: BTreeMap::new(),
            clock: Arc::new(fakes::FakeClock::default()),
            ids: Arc::new(fakes::SeqIds::default()),
            host: Arc::new(fakes::FakeHost::default()),
            run_locks: None,
            tool_proxies: None,
            operations: None,
            prices: awf_domain::run::Prices::default(),
            event_log: None,
        }
    }
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services")
            .field("awf_dirs", &self.awf_dirs)
            .finish_non_exhaustive()
    }
}

/// A registry with no providers (tests, and builds that do not wire agents).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoAgents;

#[async_trait::async_trait]
impl AgentRegistry for NoAgents {
    fn get(&self, _name: &str) -> Option<Arc<dyn AgentProvider>> {
        None
    }

    fn names(&self) -> Vec<String> {
        Vec::new()
    }
}
