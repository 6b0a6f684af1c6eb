//! The provider registry.

use std::collections::BTreeMap;
use std::sync::Arc;

use awf_domain::ports::AgentProvider;
use awf_domain::ports::AgentRegistry;
use awf_domain::ports::CommandExecutor;

use crate::cli::CliProvider;
use crate::openai::OpenAiCompatible;
use crate::providers::Claude;
use crate::providers::Codex;
use crate::providers::Copilot;
use crate::providers::Gemini;
use crate::providers::MistralVibe;
use crate::providers::OpenCode;

/// A fixed set of providers, found by name.
#[derive(Default)]
pub struct Registry {
    providers: BTreeMap<String, Arc<dyn AgentProvider>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a provider under its own name.
    pub fn register(&mut self, provider: Arc<dyn AgentProvider>) {
        self.providers.insert(provider.name().to_owned(), provider);
    }
}

#[async_trait::async_trait]
impl AgentRegistry for Registry {
    fn get(&self, name: &str) -> Option<Arc<dyn AgentProvider>> {
        self.providers.get(name).cloned()
    }

    fn names(&self) -> Vec<String> {
        self.providers.keys().cloned().collect()
    }
}

/// Every built-in provider: `claude`, `codex`, `gemini`, `github_copilot`, `mistral_vibe`,
/// `opencode` (CLIs run through `executor`) and `openai_compatible` (HTTP). `env` is the
/// process environment (PATH lookup of the CLIs, `OPENAI_*` fallbacks).
///
/// Source: spec/workflow.md §5.1.
pub fn registry(
    executor: Arc<dyn CommandExecutor>,
    env: BTreeMap<String, String>,
) -> Arc<dyn AgentRegistry> {
    registry_with(executor, env, Vec::new())
}

/// [`registry`] plus `extra` providers built elsewhere (the `acp` provider of awf-acp, which
/// this crate cannot depend on); an extra provider replaces a built-in of the same name.
pub fn registry_with(
    executor: Arc<dyn CommandExecutor>,
    env: BTreeMap<String, String>,
    extra: Vec<Arc<dyn AgentProvider>>,
) -> Arc<dyn AgentRegistry> {
    let env = Arc::new(env);
    let mut r = Registry::new();
    r.register(Arc::new(CliProvider::new(
        Claude,
        Arc::clone(&executor),
        Arc::clone(&env),
    )));
    r.register(Arc::new(CliProvider::new(
        Codex,
        Arc::clone(&executor),
        Arc::clone(&env),
    )));
    r.register(Arc::new(CliProvider::new(
        Gemini,
        Arc::clone(&executor),
        Arc::clone(&env),
    )));
    r.register(Arc::new(CliProvider::new(
        OpenCode,
        Arc::clone(&executor),
        Arc::clone(&env),
    )));
    r.register(Arc::new(CliProvider::new(
        Copilot,
        Arc::clone(&executor),
        Arc::clone(&env),
    )));
    r.register(Arc::new(CliProvider::new(
        MistralVibe,
        executor,
        Arc::clone(&env),
    )));
    r.register(Arc::new(OpenAiCompatible::new(env)));
    for p in extra {
        r.register(p);
    }
    Arc::new(r)
}
