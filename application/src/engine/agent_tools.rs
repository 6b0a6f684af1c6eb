//! The tools of one agent call (or one conversation turn): the step's `mcp_proxy:` and the
//! run's editor MCP servers.
//!
//! - A provider that runs its own tool loop ([`AgentProvider::tools_in_process`],
//!   `openai_compatible`) gets the step's tools in-process ([`ToolProxies::in_process`]),
//!   wrapped in the tool router (the audit seam) whose records become `ToolCall` /
//!   `ToolCallResult` events of the run as each call answers.
//! - A CLI provider gets a stdio proxy ([`ToolProxies::stdio`]: the `awf mcp-serve` its CLI
//!   starts) declared in [`AgentRequest::mcp`] beside the run's editor servers (which reach
//!   agent steps without `mcp_proxy` too); the proxy's tool call events are read while the
//!   call runs (every [`POLL`]) and once more when it ends, and published into the run's
//!   stream. The proxy is dropped (its files removed) when the call ends, cancelled or not.
//! - A provider that cannot hide its own tools gets one `USER.MCP_PROXY.UNSUPPORTED_PROVIDER`
//!   warning per step when the step intercepts built-ins.
//!
//! Source: shared/spec/mcp.md §3.2 (lifecycle per step and per turn), §3.3, §3.5, §3.6, §4.
//!
//! [`AgentRequest::mcp`]: awf_domain::ports::agent::AgentRequest::mcp

use std::sync::Arc;
use std::time::Duration;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::event::LogLevel;
use awf_domain::event::RunEvent;
use awf_domain::event::ToolFidelity;
use awf_domain::mask::Masker;
use awf_domain::ports::AgentProvider;
use awf_domain::ports::ToolAuditSink;
use awf_domain::ports::agent::AgentCallback;
use awf_domain::ports::agent::AgentRequest;
use awf_domain::ports::agent::AgentResponse;
use awf_domain::ports::agent::InProcessTools;
use awf_domain::ports::agent::McpAttachment;
use awf_domain::ports::tools::ProxySpec;
use awf_domain::ports::tools::StdioProxy;
use awf_domain::ports::tools::ToolCallRecord;
use awf_domain::run::ToolCallEntry;
use awf_domain::workflow::AgentStep;
use tokio_util::sync::CancellationToken;

use super::Emitter;
use super::Run;
use super::step::At;

/// How often the proxy's event file is read while the agent runs, so `-o streaming
/// --verbose` shows tool calls as they happen.
pub(crate) const POLL: Duration = Duration::from_millis(100);

/// What one agent call is given besides its prompt. Dropping it drops the stdio proxy, which
/// removes its config and event files.
#[derive(Default)]
pub(crate) struct CallTools {
    /// The stdio proxy of this call, when the step enables `mcp_proxy` for a CLI provider.
    proxy: Option<Arc<dyn StdioProxy>>,
    /// For [`AgentRequest::mcp`].
    mcp: Option<McpAttachment>,
    /// For [`AgentRequest::tools`].
    tools: Option<InProcessTools>,
    /// The router's calls so far, for the step's `tool_calls`.
    calls: Calls,
}

/// The router's calls of one agent call, shared with the in-process audit sink.
type Calls = Arc<std::sync::Mutex<Vec<ToolCallEntry>>>;

/// Notes a router event in `calls`: a call adds an entry, a result marks its call failed.
fn note_call(calls: &Calls, event: &RunEvent) {
    let mut calls = super::lock(calls);
    match event {
        RunEvent::ToolCall {
            id, name, input, ..
        } => calls.push(ToolCallEntry {
            id: id.clone(),
            name: name.clone(),
            input: input.clone(),
            is_error: false,
        }),
        RunEvent::ToolCallResult { id, is_error, .. } => {
            if let Some(c) = calls.iter_mut().rev().find(|c| &c.id == id) {
                c.is_error = *is_error;
            }
        }
        _ => {}
    }
}

impl CallTools {
    /// Puts the MCP servers and in-process tools into `request`.
    pub(crate) fn attach(&self, request: &mut AgentRequest) {
        request.mcp.clone_from(&self.mcp);
        request.tools.clone_from(&self.tools);
    }

    /// The router's calls so far (taken: a second call returns only later ones).
    pub(crate) fn take_calls(&self) -> Vec<ToolCallEntry> {
        std::mem::take(&mut *super::lock(&self.calls))
    }
}

/// The audit sink of the in-process tool router: each record becomes the run's
/// `ToolCall` then `ToolCallResult` event ([`ToolFidelity::Router`]), masked again with the
/// run's secrets.
struct EmitSink {
    /// Weak: tools kept past their call (a provider holding its request) must not keep the
    /// run's event stream open.
    emitter: std::sync::Weak<Emitter>,
    step: String,
    path: String,
    iteration: Option<usize>,
    masker: Masker,
    calls: Calls,
}

impl ToolAuditSink for EmitSink {
    fn record(&self, r: &ToolCallRecord) -> std::io::Result<()> {
        let mut input = r.input.clone();
        self.masker.mask_json(&mut input);
        for event in [
            RunEvent::ToolCall {
                step: self.step.clone(),
                id: r.call_id.clone(),
                name: r.name.clone(),
                input,
                fidelity: ToolFidelity::Router,
            },
            RunEvent::ToolCallResult {
                step: self.step.clone(),
                id: r.call_id.clone(),
                output: self.masker.mask(&r.output).into_owned(),
                is_error: r.is_error,
                fidelity: ToolFidelity::Router,
            },
        ] {
            note_call(&self.calls, &event);
            if let Some(emitter) = self.emitter.upgrade() {
                emitter.emit(&self.path, self.iteration, event);
            }
        }
        Ok(())
    }
}

impl Run {
    /// Warns `USER.MCP_PROXY.UNSUPPORTED_PROVIDER` (a `Log` event) when the step intercepts
    /// built-ins and `provider` cannot hide its own tools. Call once per step.
    pub(crate) fn warn_unhidden_tools(
        &self,
        name: &str,
        step: &AgentStep,
        provider: &dyn AgentProvider,
        at: At<'_>,
    ) {
        let Some(p) = step.mcp_proxy.as_ref().filter(|p| p.enable) else {
            return;
        };
        if !p.intercept_builtins || provider.hides_native_tools() || provider.tools_in_process() {
            return;
        }
        self.log(
            Some(name),
            LogLevel::Warn,
            &format!(
                "[{}] step {name}: provider {} cannot hide its own tools: the proxy's tools are offered beside them, not instead",
                ErrorCode::UserMcpProxyUnsupportedProvider.as_str(),
                provider.name()
            ),
            &format!("{}{name}", at.prefix),
            at.iteration(),
        );
    }

    /// The tools of one call of `provider` for step `name`: nothing when the step has no
    /// enabled `mcp_proxy` and the run no editor servers.
    ///
    /// # Errors
    /// `USER.MCP_PROXY.INVALID_CONFIG` when the step enables `mcp_proxy` and this build
    /// serves no tools ([`crate::Services::tool_proxies`] is `None`); the errors of
    /// [`awf_domain::ports::ToolProxies`] (unknown plugins, an empty proxy, a config file
    /// that cannot be written).
    pub(crate) fn call_tools(
        &self,
        name: &str,
        step: &AgentStep,
        provider: &dyn AgentProvider,
        at: At<'_>,
    ) -> Result<CallTools, AwfError> {
        self.build_call_tools(name, step, provider, at)
            .map_err(|e| {
                e.map_message(|m| {
                    if m.starts_with("step ") {
                        m
                    } else {
                        format!("step {name}: {m}")
                    }
                })
            })
    }

    fn build_call_tools(
        &self,
        name: &str,
        step: &AgentStep,
        provider: &dyn AgentProvider,
        at: At<'_>,
    ) -> Result<CallTools, AwfError> {
        let extra = self.mcp_servers.as_ref();
        let Some(cfg) = step.mcp_proxy.as_ref().filter(|p| p.enable) else {
            if extra.is_empty() || provider.tools_in_process() {
                return Ok(CallTools::default());
            }
            return Ok(CallTools {
                mcp: Some(McpAttachment {
                    extra: extra.clone(),
                    ..McpAttachment::default()
                }),
                ..CallTools::default()
            });
        };
        let Some(proxies) = self.svc.tool_proxies.as_ref() else {
            return Err(AwfError::new(
                ErrorCode::UserMcpProxyInvalidConfig,
                format!("step {name}: mcp_proxy is enabled, but this build of awf serves no tools to agent steps"),
            )
            .with_hint("remove the step's mcp_proxy block, or run it with the awf binary (which serves them)"));
        };
        let root_dir = self
            .svc
            .host
            .canonicalize(&self.working_dir)
            .unwrap_or_else(|_| self.working_dir.clone());
        let spec = ProxySpec {
            run_id: self.run_id.0.clone(),
            step: name.to_owned(),
            root_dir,
            intercept_builtins: cfg.intercept_builtins,
            plugin_tools: cfg.plugin_tools.clone(),
            traceparent: None,
            fs_delegate: self.fs_delegate.clone(),
        };
        let calls = Calls::default();
        if provider.tools_in_process() {
            let masker = self.masker();
            let tools = proxies.in_process(&spec, &masker)?;
            let mut router = crate::tools::ToolRouter::new(crate::tools::AuditContext {
                run_id: Some(spec.run_id.clone()),
                step: Some(spec.step.clone()),
                traceparent: None,
                masker: masker.clone(),
                clock: Arc::clone(&self.svc.clock),
                ids: Arc::clone(&self.svc.ids),
                sink: Some(Arc::new(EmitSink {
                    emitter: Arc::downgrade(&self.emitter),
                    step: name.to_owned(),
                    path: format!("{}{name}", at.prefix),
                    iteration: at.iteration(),
                    masker,
                    calls: Arc::clone(&calls),
                })),
            });
            for (source, provider) in tools {
                router.register(source, provider)?;
            }
            return Ok(CallTools {
                proxy: None,
                mcp: None,
                tools: Some(InProcessTools(Arc::new(router))),
                calls,
            });
        }
        let proxy: Arc<dyn StdioProxy> = Arc::from(proxies.stdio(&spec)?);
        let mcp = McpAttachment {
            proxy: Some(proxy.server()),
            proxy_tools: proxy.tools(),
            intercept_builtins: cfg.intercept_builtins,
            extra: extra.clone(),
        };
        Ok(CallTools {
            proxy: Some(proxy),
            mcp: Some(mcp),
            tools: None,
            calls,
        })
    }

    /// Runs `provider` with `request`, publishing the stdio proxy's tool call events into the
    /// run's stream before each chunk the agent streams (the proxy records a call before the
    /// agent sees its result, so calls and the agent's text stay in order), every [`POLL`]
    /// while it runs, and once more when it returns (`flush` releases the agent text held
    /// back before them).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn execute_agent(
        &self,
        provider: &dyn AgentProvider,
        request: AgentRequest,
        callback: AgentCallback,
        flush: &Arc<dyn Fn() + Send + Sync>,
        tools: &CallTools,
        name: &str,
        at: At<'_>,
        token: &CancellationToken,
    ) -> Result<AgentResponse, AwfError> {
        let Some(proxy) = tools.proxy.as_ref() else {
            return provider
                .execute(request, Some(callback), token.clone())
                .await;
        };
        let drain = ProxyDrain {
            proxy: Arc::clone(proxy),
            emitter: Arc::clone(&self.emitter),
            masker: self.masker(),
            calls: Arc::clone(&tools.calls),
            step: name.to_owned(),
            path: format!("{}{name}", at.prefix),
            iteration: at.iteration(),
            flush: Arc::clone(flush),
        };
        let drain = Arc::new(drain);
        let before_chunk = Arc::clone(&drain);
        let callback: AgentCallback = Arc::new(move |chunk| {
            before_chunk.publish();
            callback(chunk);
        });
        let call = provider.execute(request, Some(callback), token.clone());
        tokio::pin!(call);
        let result = loop {
            tokio::select! {
                r = &mut call => break r,
                () = tokio::time::sleep(POLL) => drain.publish(),
            }
        };
        drain.publish();
        result
    }
}

/// Publishes what a stdio proxy recorded since the last read into the run's stream, masked
/// with the run's secrets (the server knows only its environment's, not the run's secret
/// inputs).
struct ProxyDrain {
    proxy: Arc<dyn StdioProxy>,
    emitter: Arc<Emitter>,
    masker: awf_domain::mask::Masker,
    calls: Calls,
    step: String,
    path: String,
    iteration: Option<usize>,
    flush: Arc<dyn Fn() + Send + Sync>,
}

impl ProxyDrain {
    fn publish(&self) {
        let events = self.proxy.take_events();
        if events.is_empty() {
            return;
        }
        (self.flush)();
        for mut event in events {
            match &mut event {
                RunEvent::ToolCall { step, input, .. } => {
                    self.step.clone_into(step);
                    self.masker.mask_json(input);
                }
                RunEvent::ToolCallResult { step, output, .. } => {
                    self.step.clone_into(step);
                    if let std::borrow::Cow::Owned(m) = self.masker.mask(output) {
                        *output = m;
                    }
                }
                _ => continue,
            }
            note_call(&self.calls, &event);
            self.emitter.emit(&self.path, self.iteration, event);
        }
    }
}
