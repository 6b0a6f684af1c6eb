//! Agent steps: prompt, skills, role and system prompt, interpolated options, sessions,
//! `output_format`, interactive conversations, and `--mock`.
//!
//! Source: spec/workflow.md §1.5.3, §1.13, §1.14, §3.8; decisions.md (system prompt and role
//! reach every provider; string options are interpolated; retry applies to agents).

use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Instant;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::event::LogLevel;
use awf_domain::event::RunEvent;
use awf_domain::mask::StreamMasker;
use awf_domain::ports::agent::AgentCallback;
use awf_domain::ports::agent::AgentChunk;
use awf_domain::ports::agent::AgentRequest;
use awf_domain::ports::agent::AgentSession;
use awf_domain::ports::agent::Role;
use awf_domain::ports::agent::Turn;
use awf_domain::run::StepState;
use awf_domain::run::StepStatus;
use awf_domain::run::TokenUsage;
use awf_domain::scope::LoopFrame;
use awf_domain::workflow::AgentStep;
use awf_domain::workflow::State;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::Run;
use super::lock;
use super::step::At;
use super::step::Body;

/// Deadline of an agent step without `timeout:` (spec/workflow.md §1.5.3: 300 s).
const DEFAULT_AGENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// At most this many waits for a usage limit in one step, over all its retry attempts and
/// fallback providers (README: "at most 3 waits a step"; a server that keeps answering
/// "retry in 1s" cannot hold the step forever, nor `retry:` multiply the waits).
pub(crate) const MAX_USAGE_WAITS: u32 = 3;

/// The deadline of an agent step: its `timeout`, else the documented default for single
/// turns (an interactive conversation waits for the user and has none).
pub(crate) fn agent_deadline(
    step: &AgentStep,
    deadline: Option<Instant>,
    now: Instant,
) -> Option<Instant> {
    if step.mode == "conversation" {
        deadline
    } else {
        deadline.or_else(|| now.checked_add(DEFAULT_AGENT_TIMEOUT))
    }
}

impl Run {
    /// One attempt of agent step `state`; `usage_waits` counts the usage-limit waits of the
    /// step so far, over all its attempts (at most [`MAX_USAGE_WAITS`] a step).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn agent_once(
        &self,
        state: &State,
        step: &AgentStep,
        at: At<'_>,
        deadline: Option<Instant>,
        token: &CancellationToken,
        usage_waits: &mut u32,
    ) -> Result<Body, AwfError> {
        let name = state.name.as_str();
        let st = StepState::running(name, self.svc.clock.now());
        let fail = |mut st: StepState, err: AwfError| {
            st.status = StepStatus::Failed;
            st.completed_at = Some(self.svc.clock.now());
            st.error = Some(err.message().to_owned());
            Ok(Body {
                state: st,
                failure: Some(err),
                early_exit: None,
            })
        };
        // Budgets are checked before the step starts (issue 14).
        if let Err(e) = self.check_budget(name, step) {
            return fail(st, e);
        }
        let prepared = match self.prepare_agent(state, step, at.frame) {
            Ok(p) => p,
            Err(e) => return fail(st, e.map_message(|m| format!("step {name}: {m}"))),
        };
        if let Some(mock) = self.mocks.get(name) {
            return self.mocked(st, step, &prepared, mock);
        }
        let Some(provider) = self.svc.agents.get(&prepared.provider) else {
            let mut e = AwfError::new(
                ErrorCode::UserAgentUnknownProvider,
                format!("step {name}: provider \"{}\" not found", prepared.provider),
            );
            if let Some(c) = awf_domain::workflow::closest_provider(&prepared.provider) {
                e = e.with_hint(format!("did you mean '{c}'?"));
            }
            e = e.with_hint(format!(
                "known providers: {}",
                awf_domain::workflow::AGENT_PROVIDERS.join(", ")
            ));
            return fail(st, e);
        };
        if step.mode == "conversation" {
            return self
                .conversation(state, step, prepared, provider, at, deadline, token)
                .await;
        }
        self.warn_if_fresh(name, at, provider.as_ref(), prepared.session.as_ref());
        self.warn_unhidden_tools(name, step, provider.as_ref(), at);
        let answer = self
            .call_with_policy(
                name,
                step,
                prepared,
                provider,
                at,
                (deadline, token),
                usage_waits,
            )
            .await;
        let (prepared, provider) = (answer.prepared, answer.provider);
        let result = answer.result;
        let mut st = st;
        st.tool_calls = answer.calls;
        if !step.policy.fallback_providers.is_empty() {
            st.fallback = Some(awf_domain::run::FallbackRecord {
                provider: result.is_ok().then(|| provider.name().to_owned()),
                skipped: answer.skipped,
            });
        }
        match result {
            Ok(resp) => {
                st.response = resp.response;
                st.cost_usd = self.cost_of(
                    provider.name(),
                    resp.model
                        .as_deref()
                        .or_else(|| prepared.options.get("model").and_then(Value::as_str)),
                    &resp.tokens,
                );
                st.tokens = resp.tokens;
                st.session = resp.session;
                if st.session.is_none() && step.conversation.is_some() {
                    st.session = Some(AgentSession {
                        session_id: None,
                        turns: vec![
                            Turn {
                                role: Role::User,
                                content: prepared.prompt.clone(),
                            },
                            Turn {
                                role: Role::Assistant,
                                content: resp.output.clone(),
                            },
                        ],
                    });
                }
                st.stderr = resp.stderr.into();
                self.finish_agent(st, prepared.output_format.as_deref(), &resp.output)
            }
            Err(e) => {
                // An agent CLI that died of the signal cancelling the run did not fail.
                if e.code() == ErrorCode::ExecutionRunCancelled
                    || self.cancel.token.is_cancelled()
                    || self.cancel_follows(died_of(&e)).await
                {
                    st.status = StepStatus::Cancelled;
                    st.completed_at = Some(self.svc.clock.now());
                    return Ok(Body {
                        state: st,
                        failure: Some(super::step::cancelled(name)),
                        early_exit: None,
                    });
                }
                // What the agent wrote before it failed (the tool loop guard of
                // `openai_compatible`) stays the step's output, for an on_failure route.
                let mut st = st;
                if let Some(Value::String(partial)) = e.details().get("partial_output") {
                    st.output = partial.clone().into();
                }
                // The hints (which npm package provides a missing CLI) stay hints: a failure
                // terminal an on_failure route leads to gives them too.
                let e = e.map_message(|m| {
                    if m.starts_with("step ") {
                        m
                    } else {
                        format!("step {name}: {m}")
                    }
                });
                fail(st, e)
            }
        }
    }

    /// The single call of an agent step under its policy: a usage limit that lifts within
    /// `usage_limit.wait` is waited out visibly (a `waiting for usage limit, resets in Ns`
    /// log line) and the same call made again; a failure of a class in `fallback_on` moves
    /// to the next of `fallback_providers` with the same prompt; a usage limit that lifts
    /// later is `EXECUTION.AGENT.USAGE_LIMIT` with its reset time. `waits` counts the step's
    /// usage-limit waits, over its retry attempts and fallback providers: at most
    /// [`MAX_USAGE_WAITS`]; once they ran out the limit's own error fails the call.
    #[allow(clippy::too_many_arguments)]
    async fn call_with_policy(
        &self,
        name: &str,
        step: &AgentStep,
        prepared: Prepared,
        provider: Arc<dyn awf_domain::ports::AgentProvider>,
        at: At<'_>,
        (deadline, token): (Option<Instant>, &CancellationToken),
        waits: &mut u32,
    ) -> PolicyAnswer {
        let mut prepared = prepared;
        let mut provider = provider;
        let mut calls = Vec::new();
        let mut skipped = Vec::new();
        let mut next_fallback = 0usize;
        // Where the provider tried now is in the step's order: 0 the step's own, n its nth
        // fallback.
        let mut position = 0usize;
        loop {
            let result = match self.call_tools(name, step, provider.as_ref(), at) {
                Ok(tools) => {
                    let request = self.agent_request(
                        &prepared,
                        prepared.prompt.clone(),
                        prepared.session.clone(),
                        deadline,
                    );
                    let (r, c) = self
                        .call_agent(provider.as_ref(), request, tools, name, at, token)
                        .await;
                    calls.extend(c);
                    r
                }
                Err(e) => Err(e),
            };
            let err = match result {
                Ok(resp) => {
                    return PolicyAnswer {
                        result: Ok(resp),
                        calls,
                        skipped,
                        prepared,
                        provider,
                    };
                }
                Err(e) => e,
            };
            // No fallback for a CLI that died of the signal cancelling the run.
            if self.cancel.token.is_cancelled()
                || err.code() == ErrorCode::ExecutionRunCancelled
                || self.cancel_follows(died_of(&err)).await
            {
                return PolicyAnswer {
                    result: Err(err),
                    calls,
                    skipped,
                    prepared,
                    provider,
                };
            }
            let now = self.svc.clock.now();
            let class = awf_domain::limits::classify(&err, now);
            let reset_in = class
                .and_then(|c| c.reset_at)
                .map(|t| t.duration_since(now).unwrap_or_default());
            if let Some(wait) = reset_in
                && wait <= step.policy.usage_limit.wait
                && *waits < MAX_USAGE_WAITS
            {
                *waits += 1;
                let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                self.log(
                    Some(name),
                    LogLevel::Warn,
                    &format!(
                        "step {name}: waiting for usage limit of {}, resets in {secs}s",
                        provider.name()
                    ),
                    &format!("{}{name}", at.prefix),
                    at.iteration(),
                );
                if self.sleep_or_stop(wait, deadline, token).await {
                    continue;
                }
                if self.cancel.token.is_cancelled() {
                    return PolicyAnswer {
                        result: Err(super::step::cancelled(name)),
                        calls,
                        skipped,
                        prepared,
                        provider,
                    };
                }
            }
            if let Some(c) = class
                && step.policy.falls_back_on(c.class)
                && next_fallback < step.policy.fallback_providers.len()
            {
                skipped.push(awf_domain::run::FallbackSkip {
                    provider: provider.name().to_owned(),
                    class: c.class.as_str().to_owned(),
                    code: err.code().as_str().to_owned(),
                    message: err.message().to_owned(),
                });
                // The next entry whose provider exists; unknown ones are skipped as unavailable.
                let mut chosen = None;
                while next_fallback < step.policy.fallback_providers.len() {
                    let fb = &step.policy.fallback_providers[next_fallback];
                    next_fallback += 1;
                    match self.fallback_prepared(&prepared, fb, at.frame) {
                        Ok(p) => match self.svc.agents.get(&p.provider) {
                            Some(pv) => {
                                chosen = Some((p, pv));
                                break;
                            }
                            None => skipped.push(awf_domain::run::FallbackSkip {
                                provider: p.provider.clone(),
                                class: "unavailable".to_owned(),
                                code: ErrorCode::UserAgentUnknownProvider.as_str().to_owned(),
                                message: format!("provider \"{}\" not found", p.provider),
                            }),
                        },
                        Err(e) => skipped.push(awf_domain::run::FallbackSkip {
                            provider: fb.provider.clone(),
                            class: "unavailable".to_owned(),
                            code: e.code().as_str().to_owned(),
                            message: e.message().to_owned(),
                        }),
                    }
                }
                if let Some((p, pv)) = chosen {
                    self.log(
                        Some(name),
                        LogLevel::Warn,
                        &format!(
                            "step {name}: provider {} failed ({}: {}); trying {}",
                            attempt_label(&prepared, &p, position),
                            c.class.as_str(),
                            first_line(err.message()),
                            attempt_label(&p, &prepared, next_fallback)
                        ),
                        &format!("{}{name}", at.prefix),
                        at.iteration(),
                    );
                    position = next_fallback;
                    prepared = p;
                    provider = pv;
                    continue;
                }
            }
            // The step's waits ran out on a limit it would have waited for.
            let waits_ran_out = *waits >= MAX_USAGE_WAITS
                && class
                    .is_some_and(|c| c.class == awf_domain::workflow::FallbackClass::UsageLimit)
                && reset_in.is_some_and(|w| w <= step.policy.usage_limit.wait);
            // No wait and no fallback left: a usage limit that lifts later than the step
            // waits says when (its own code); after the waits ran out the error stays.
            let err = match (class, reset_in) {
                (Some(c), Some(wait))
                    if c.class == awf_domain::workflow::FallbackClass::UsageLimit
                        && wait > step.policy.usage_limit.wait =>
                {
                    let at_text = c
                        .reset_at
                        .map(awf_domain::timefmt::format_rfc3339)
                        .unwrap_or_default();
                    let mut e = AwfError::new(
                        ErrorCode::ExecutionAgentUsageLimit,
                        format!(
                            "{} (usage limit; resets at {at_text}, in {}s)",
                            err.message(),
                            wait.as_secs()
                        ),
                    )
                    .with_detail("reset_at", at_text.clone())
                    .with_detail("reset_in_secs", wait.as_secs())
                    .with_detail("provider", provider.name());
                    // Within max_wait: a run that ends on it is parked until the reset.
                    if wait <= step.policy.usage_limit.max_wait {
                        // A sub-workflow's run is resumed through its root run.
                        let resume = if self.call_stack.len() <= 1 {
                            format!("`awf resume {}`", self.run_id.0)
                        } else {
                            "`awf resume` of the calling run".to_owned()
                        };
                        e = e
                            .with_detail(awf_domain::ports::store::PARK_UNTIL, at_text.clone())
                            .with_hint(format!(
                                "the run is parked until the reset ({at_text}): {resume} continues it then (`awf serve` resumes it by itself)"
                            ));
                    }
                    for h in err.hints() {
                        e = e.with_hint(h.clone());
                    }
                    e
                }
                // A CLI's generic failure gets the code of what it was.
                (Some(c), _) if err.code() == ErrorCode::ExecutionAgentFailed => {
                    let code = match c.class {
                        awf_domain::workflow::FallbackClass::Refusal => {
                            ErrorCode::ExecutionAgentRefusal
                        }
                        awf_domain::workflow::FallbackClass::Quota => {
                            ErrorCode::ExecutionAgentQuota
                        }
                        awf_domain::workflow::FallbackClass::UsageLimit => {
                            ErrorCode::ExecutionAgentUsageLimit
                        }
                        awf_domain::workflow::FallbackClass::Unavailable => {
                            ErrorCode::ExecutionAgentFailed
                        }
                    };
                    let mut e = AwfError::new(code, err.message().to_owned());
                    for (k, v) in err.details() {
                        e = e.with_detail(k.clone(), v.clone());
                    }
                    for h in err.hints() {
                        e = e.with_hint(h.clone());
                    }
                    e
                }
                _ => err,
            };
            let err = if waits_ran_out {
                err.with_hint(format!(
                    "the step waited for usage limits {MAX_USAGE_WAITS} times, the most one step \
                     waits (its retry attempts and fallback providers included)"
                ))
            } else {
                err
            };
            return PolicyAnswer {
                result: Err(err),
                calls,
                skipped,
                prepared,
                provider,
            };
        }
    }

    /// The call of fallback entry `fb`: the same prompt, system prompt and session turns as
    /// `primary`, with `fb`'s provider and (interpolated) options.
    fn fallback_prepared(
        &self,
        primary: &Prepared,
        fb: &awf_domain::workflow::FallbackProvider,
        frame: Option<&LoopFrame>,
    ) -> Result<Prepared, AwfError> {
        let provider = self
            .render(&fb.provider, frame, None)
            .map_err(|e| {
                AwfError::new(
                    ErrorCode::ExecutionTemplateFailed,
                    format!("resolve fallback provider: {e}"),
                )
            })?
            .trim()
            .to_owned();
        let mut options = serde_json::Map::new();
        for (k, v) in &fb.options {
            if k == "system_prompt" {
                continue;
            }
            options.insert(k.clone(), self.render_json(v, frame)?);
        }
        let secrets = awf_domain::mask::Masker::from_named_values(&options);
        if !secrets.is_empty() {
            lock(&self.masker).extend(&secrets);
        }
        if !options.contains_key("output_format") {
            options.insert(
                "output_format".into(),
                Value::String(
                    primary
                        .output_format
                        .clone()
                        .unwrap_or_else(|| "text".into()),
                ),
            );
        }
        Ok(Prepared {
            provider,
            options,
            // Another provider cannot resume the first one's session id; the turns go along.
            session: primary.session.as_ref().map(|s| AgentSession {
                session_id: None,
                turns: s.turns.clone(),
            }),
            ..primary.clone()
        })
    }

    /// One call (or conversation turn) of `provider` with the call's `tools` attached: the
    /// agent's chunks streamed into the run, the proxy's tool calls published as they come.
    /// Gives the result and the router's calls; the proxy's files go when it returns,
    /// cancelled or not.
    async fn call_agent(
        &self,
        provider: &dyn awf_domain::ports::AgentProvider,
        mut request: AgentRequest,
        tools: super::agent_tools::CallTools,
        name: &str,
        at: At<'_>,
        token: &CancellationToken,
    ) -> (
        Result<awf_domain::ports::agent::AgentResponse, AwfError>,
        Vec<awf_domain::run::ToolCallEntry>,
    ) {
        // A later call of the same step (a conversation turn, a fallback provider, a retry
        // after a usage limit) does not start past the budget either.
        if let Some(step) = self.wf.state(name).and_then(|s| match &s.kind {
            awf_domain::workflow::StateKind::Agent(a) => Some(a),
            _ => None,
        }) && let Err(e) = self.check_budget(name, step)
        {
            return (Err(e), Vec::new());
        }
        let model = request
            .options
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_owned);
        tools.attach(&mut request);
        request.run_id = Some(self.run_id.0.clone());
        request.approver = Some(self.approver(name, at, token));
        let (callback, flush) = self.agent_callback(name, at);
        let result = self
            .execute_agent(provider, request, callback, &flush, &tools, name, at, token)
            .await;
        flush();
        if let Ok(resp) = &result {
            let model = resp.model.as_deref().or(model.as_deref());
            self.record_spend(name, provider.name(), model, &resp.tokens);
        }
        (result, tools.take_calls())
    }

    /// Relays an agent's permission request (`acp` with `permissions: ask`) to the run's
    /// interaction port as an `Approval` request of step `name`; `--yes` picks the first
    /// allowing option without asking. Gives the chosen option's id, `None` when nobody
    /// answered (timeout, cancel, unattended).
    fn approver(
        &self,
        name: &str,
        at: At<'_>,
        token: &CancellationToken,
    ) -> awf_domain::ports::agent::Approver {
        // Weak: a provider may keep the request (and so the approver) past the run; the
        // run's event stream ends when its emitter goes, which a strong handle would stop.
        let interaction = Arc::downgrade(&self.interaction);
        let emitter = Arc::downgrade(&self.emitter);
        let path = format!("{}{name}", at.prefix);
        let iteration = at.iteration();
        let step = name.to_owned();
        let token = token.clone();
        let auto = self.auto_approve;
        let masker = self.masker();
        awf_domain::ports::agent::Approver(Arc::new(move |q, timeout| {
            let interaction = interaction.upgrade();
            let emitter = emitter.upgrade();
            let path = path.clone();
            let step = step.clone();
            let token = token.clone();
            let message = masker.mask(&q.message).into_owned();
            Box::pin(async move {
                if auto {
                    // By kind, never by position: allow_once before allow_always.
                    use awf_domain::interaction::ApprovalKind;
                    return [ApprovalKind::AllowOnce, ApprovalKind::AllowAlways]
                        .iter()
                        .find_map(|k| q.options.iter().find(|o| o.kind == *k))
                        .map(|o| o.id.clone());
                }
                let (Some(interaction), Some(emitter)) = (interaction, emitter) else {
                    return None;
                };
                let at_ask = super::AskAt {
                    emitter: &emitter,
                    path: &path,
                    iteration,
                    step: Some(&step),
                    cancel: &token,
                };
                let kind = awf_domain::interaction::RequestKind::Approval {
                    message,
                    options: q.options.clone(),
                };
                match interaction.ask(&at_ask, kind, timeout, Clone::clone).await {
                    awf_domain::interaction::Resolution::Answered(
                        awf_domain::interaction::Answer::Option(id),
                    ) => Some(id),
                    _ => None,
                }
            })
        }))
    }

    /// The cost in US dollars of `tokens` for a call of `provider` with `model`, when the
    /// project's `prices:` price it (by model, else by provider name).
    pub(crate) fn cost_of(
        &self,
        provider: &str,
        model: Option<&str>,
        tokens: &TokenUsage,
    ) -> Option<f64> {
        let names: Vec<&str> = model.into_iter().chain(std::iter::once(provider)).collect();
        self.svc
            .prices
            .lookup(names.iter().copied())
            .map(|p| p.cost(tokens))
    }

    /// Adds one call's tokens (and cost) to the run's and the step's spend.
    fn record_spend(&self, name: &str, provider: &str, model: Option<&str>, tokens: &TokenUsage) {
        let cost = self.cost_of(provider, model, tokens);
        lock(&self.spend).add(tokens, cost);
        lock(&self.step_spend)
            .entry(name.to_owned())
            .or_default()
            .add(tokens, cost);
    }

    /// `EXECUTION.BUDGET.EXCEEDED` when the spend so far has reached a budget that applies
    /// to step `name`: the workflow's (and the calling workflows') against the run's spend,
    /// the step's own against what this step spent so far (all its calls in this run).
    pub(crate) fn check_budget(&self, name: &str, step: &AgentStep) -> Result<(), AwfError> {
        let run = *lock(&self.spend);
        let own = lock(&self.step_spend)
            .get(name)
            .copied()
            .unwrap_or_default();
        let workflow = self
            .outer_budgets
            .iter()
            .chain(self.wf.budget.as_ref())
            .map(|b| (b, run, "the workflow's budget"));
        let step_budget = step
            .policy
            .budget
            .as_ref()
            .map(|b| (b, own, "the step's budget"));
        for (budget, spent, whose) in workflow.chain(step_budget) {
            let over = if let Some(limit) = budget.tokens
                && spent.tokens >= limit
            {
                Some(format!(
                    "{whose} of {limit} tokens is spent ({} tokens so far: {} in, {} out)",
                    spent.tokens, spent.tokens_input, spent.tokens_output
                ))
            } else if let Some(limit) = budget.usd
                && spent.usd.unwrap_or(0.0) >= limit
            {
                Some(format!(
                    "{whose} of ${limit} is spent (${:.6} so far)",
                    spent.usd.unwrap_or(0.0)
                ))
            } else {
                None
            };
            if let Some(why) = over {
                let mut e = AwfError::new(
                    ErrorCode::ExecutionBudgetExceeded,
                    format!("step {name} not started: {why}"),
                )
                .with_detail("state", name)
                .with_detail("tokens", spent.tokens)
                .with_detail("tokens_input", spent.tokens_input)
                .with_detail("tokens_output", spent.tokens_output)
                .with_hint("raise `budget:` (tokens, usd), or route the failure with on_failure");
                if let Some(u) = spent.usd {
                    e = e.with_detail("usd", u);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Applies `output_format` and completes the state.
    fn finish_agent(
        &self,
        mut st: StepState,
        output_format: Option<&str>,
        output: &str,
    ) -> Result<Body, AwfError> {
        st.completed_at = Some(self.svc.clock.now());
        match output_format.map(str::trim) {
            Some("json") => match parse_json_output(output, &self.masker()) {
                Ok((text, json)) => {
                    st.output = text.into();
                    st.json = Some(json);
                }
                Err(msg) => {
                    st.output = output.to_owned().into();
                    st.status = StepStatus::Failed;
                    let msg = format!("step {}: output format processing: {msg}", st.name);
                    st.error = Some(msg.clone());
                    return Ok(Body {
                        state: st,
                        failure: Some(AwfError::new(ErrorCode::ExecutionAgentInvalidOutput, msg)),
                        early_exit: None,
                    });
                }
            },
            Some("text") => st.output = strip_fences(output).to_owned().into(),
            _ => st.output = output.to_owned().into(),
        }
        st.status = StepStatus::Completed;
        st.exit_code = Some(0);
        Ok(Body {
            state: st,
            failure: None,
            early_exit: None,
        })
    }

    /// `--mock states.<step>.output=…`: answers without the provider; the text goes through
    /// `output_format` like a real answer, and a session-tracked step gets a session holding
    /// the exchange so `continue_from` works.
    fn mocked(
        &self,
        mut st: StepState,
        step: &AgentStep,
        prepared: &Prepared,
        mock: &std::collections::BTreeMap<String, String>,
    ) -> Result<Body, AwfError> {
        let get = |k: &str| {
            mock.iter()
                .find(|(field, _)| field.eq_ignore_ascii_case(k))
                .map(|(_, v)| v.clone())
        };
        let output = get("output").unwrap_or_default();
        st.stderr = get("stderr").unwrap_or_default().into();
        st.tokens = TokenUsage::default();
        if step.conversation.is_some() {
            let mut session = prepared.session.clone().unwrap_or_default();
            session.turns.push(Turn {
                role: Role::User,
                content: prepared.prompt.clone(),
            });
            session.turns.push(Turn {
                role: Role::Assistant,
                content: output.clone(),
            });
            st.session = Some(session);
        }
        if get("status").is_some_and(|s| s.eq_ignore_ascii_case("failed")) {
            st.output = output.into();
            st.status = StepStatus::Failed;
            st.completed_at = Some(self.svc.clock.now());
            let msg = format!("step {}: mocked failure", st.name);
            st.error = Some(msg.clone());
            let e = AwfError::new(ErrorCode::ExecutionAgentFailed, msg);
            return Ok(Body {
                state: st,
                failure: Some(e),
                early_exit: None,
            });
        }
        self.finish_agent(st, prepared.output_format.as_deref(), &output)
    }

    /// One call to the provider: the prepared system prompt and options, `prompt` and
    /// `session`, the step's directory, what is left of its deadline, the exported
    /// environment and the run's secrets.
    fn agent_request(
        &self,
        prepared: &Prepared,
        prompt: String,
        session: Option<AgentSession>,
        deadline: Option<Instant>,
    ) -> AgentRequest {
        AgentRequest {
            prompt,
            system_prompt: prepared.system_prompt.clone(),
            options: prepared.options.clone(),
            session,
            dir: Some(self.working_dir.clone()),
            timeout: deadline.map(|d| d.saturating_duration_since(self.svc.clock.instant())),
            env: lock(&self.exported).clone(),
            secrets: self.masker(),
            mcp: None,
            tools: None,
            run_id: None,
            scope: Some(self.scope.0.clone()),
            approver: None,
        }
    }

    /// Warns when a turn continues a session that has turns but no id, with a provider that
    /// resumes by id: the CLI cannot resume it, so this turn starts a fresh session.
    fn warn_if_fresh(
        &self,
        name: &str,
        at: At<'_>,
        provider: &dyn awf_domain::ports::AgentProvider,
        session: Option<&AgentSession>,
    ) -> bool {
        let Some(s) = session else { return false };
        if s.turns.is_empty()
            || s.session_id.as_deref().is_some_and(|id| !id.is_empty())
            || !provider.resumes_by_session_id()
        {
            return false;
        }
        self.log(
            Some(name),
            LogLevel::Warn,
            &format!(
                "step {name}: provider \"{}\" returned no session id for the earlier turns of this conversation, so this turn starts a fresh session without them",
                provider.name()
            ),
            &format!("{}{name}", at.prefix),
            at.iteration(),
        );
        true
    }

    /// Streams agent chunks into the run's events, masked across chunk boundaries: a piece
    /// of message or thought text that could be the start of a secret is held until the next
    /// chunk decides it. Call the returned flush when the provider call returns (a partial
    /// secret left at the end is released as `***`).
    fn agent_callback(
        &self,
        name: &str,
        at: At<'_>,
    ) -> (AgentCallback, Arc<dyn Fn() + Send + Sync>) {
        let emitter = Arc::clone(&self.emitter);
        let masker = self.masker();
        let streams = Arc::new(Mutex::new((
            StreamMasker::new(masker.clone()),
            StreamMasker::new(masker.clone()),
        )));
        let step = name.to_owned();
        let path = format!("{}{name}", at.prefix);
        let iteration = at.iteration();
        let text = |b: Vec<u8>| match String::from_utf8(b) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        let emit_text = {
            let emitter = Arc::clone(&emitter);
            let step = step.clone();
            let path = path.clone();
            move |thought: bool, t: String| {
                if t.is_empty() {
                    return;
                }
                let event = if thought {
                    RunEvent::AgentThoughtChunk {
                        step: step.clone(),
                        text: t,
                    }
                } else {
                    RunEvent::AgentMessageChunk {
                        step: step.clone(),
                        text: t,
                    }
                };
                emitter.emit(&path, iteration, event);
            }
        };
        let emit_text = Arc::new(emit_text);
        let flush: Arc<dyn Fn() + Send + Sync> = {
            let streams = Arc::clone(&streams);
            let emit_text = Arc::clone(&emit_text);
            Arc::new(move || {
                let (m, t) = {
                    let mut s = lock(&streams);
                    (s.0.finish(), s.1.finish())
                };
                emit_text(false, text(m));
                emit_text(true, text(t));
            })
        };
        let flush_before = Arc::clone(&flush);
        let callback: AgentCallback = Arc::new(move |chunk: AgentChunk| {
            let event = match chunk {
                AgentChunk::Message(t) => {
                    let ready = lock(&streams).0.push(t.as_bytes());
                    emit_text(false, text(ready));
                    return;
                }
                AgentChunk::Thought(t) => {
                    let ready = lock(&streams).1.push(t.as_bytes());
                    emit_text(true, text(ready));
                    return;
                }
                AgentChunk::ToolCall {
                    id,
                    name,
                    mut input,
                } => {
                    masker.mask_json(&mut input);
                    RunEvent::ToolCall {
                        step: step.clone(),
                        id,
                        name,
                        input,
                        fidelity: awf_domain::event::ToolFidelity::Agent,
                    }
                }
                AgentChunk::ToolResult {
                    id,
                    output,
                    is_error,
                } => RunEvent::ToolCallResult {
                    step: step.clone(),
                    id,
                    output: masker.mask(&output).into_owned(),
                    is_error,
                    fidelity: awf_domain::event::ToolFidelity::Agent,
                },
            };
            // Text held back so far comes before the tool event.
            flush_before();
            emitter.emit(&path, iteration, event);
        });
        (callback, flush)
    }

    /// `mode: conversation`: the first turn sends the prompt; each later turn is a line the
    /// user types (a `ConversationTurn` request answered through the run session). An empty line,
    /// EOF, `exit` or `quit` ends it.
    #[allow(clippy::too_many_arguments)]
    async fn conversation(
        &self,
        state: &State,
        step: &AgentStep,
        prepared: Prepared,
        provider: Arc<dyn awf_domain::ports::AgentProvider>,
        at: At<'_>,
        deadline: Option<Instant>,
        token: &CancellationToken,
    ) -> Result<Body, AwfError> {
        let name = state.name.as_str();
        let mut st = StepState::running(name, self.svc.clock.now());
        let mut session = prepared.session.clone().unwrap_or_default();
        let mut message = prepared.prompt.clone();
        let mut tokens = TokenUsage::default();
        let mut warned = false;
        self.warn_unhidden_tools(name, step, provider.as_ref(), at);
        let last = loop {
            if !warned {
                warned = self.warn_if_fresh(name, at, provider.as_ref(), Some(&session));
            }
            let request =
                self.agent_request(&prepared, message.clone(), Some(session.clone()), deadline);
            // Each turn gets its own proxy (shared/spec/mcp.md §3.2), gone when the turn ends.
            let result = match self.call_tools(name, step, provider.as_ref(), at) {
                Ok(tools) => {
                    let (r, calls) = self
                        .call_agent(provider.as_ref(), request, tools, name, at, token)
                        .await;
                    st.tool_calls.extend(calls);
                    r
                }
                Err(e) => Err(e),
            };
            let resp = match result {
                Ok(r) => r,
                Err(e) => {
                    st.status = if self.cancel.token.is_cancelled() {
                        StepStatus::Cancelled
                    } else {
                        StepStatus::Failed
                    };
                    st.completed_at = Some(self.svc.clock.now());
                    st.error = Some(e.message().to_owned());
                    st.session = Some(session);
                    return Ok(Body {
                        state: st,
                        failure: Some(e),
                        early_exit: None,
                    });
                }
            };
            tokens.input = tokens.input.saturating_add(resp.tokens.input);
            tokens.output = tokens.output.saturating_add(resp.tokens.output);
            tokens.total = tokens.total.saturating_add(resp.tokens.total);
            tokens.estimated |= resp.tokens.estimated;
            session = resp.session.unwrap_or_else(|| {
                let mut s = session.clone();
                s.turns.push(Turn {
                    role: Role::User,
                    content: message.clone(),
                });
                s.turns.push(Turn {
                    role: Role::Assistant,
                    content: resp.output.clone(),
                });
                s
            });
            st.response = resp.response;
            let reply = self.ask_turn(name, at, "> ", token).await;
            match reply {
                Some(line) if !matches!(line.trim(), "" | "exit" | "quit") => message = line,
                _ => break resp.output,
            }
        };
        st.tokens = tokens;
        st.session = Some(session);
        self.finish_agent(st, prepared.output_format.as_deref(), &last)
    }

    /// Asks the front-end for the next turn (a `ConversationTurn` request); `None` on end of
    /// input, cancel or timeout.
    async fn ask_turn(
        &self,
        step: &str,
        at: At<'_>,
        prompt: &str,
        token: &CancellationToken,
    ) -> Option<String> {
        let path = format!("{}{step}", at.prefix);
        let ask_at = super::AskAt {
            emitter: &self.emitter,
            path: &path,
            iteration: at.iteration(),
            step: Some(step),
            cancel: token,
        };
        let kind = awf_domain::interaction::RequestKind::ConversationTurn {
            prompt: prompt.to_owned(),
        };
        let masker = self.masker();
        let resolution = self
            .interaction
            .ask(&ask_at, kind, None, |r| match r {
                awf_domain::interaction::Resolution::Answered(
                    awf_domain::interaction::Answer::Value(v),
                ) => awf_domain::interaction::Resolution::Answered(
                    awf_domain::interaction::Answer::Value(masker.mask(v).into_owned()),
                ),
                other => other.clone(),
            })
            .await;
        match resolution {
            awf_domain::interaction::Resolution::Answered(
                awf_domain::interaction::Answer::Value(v),
            ) => Some(v),
            _ => None,
        }
    }

    /// Everything an agent call needs, resolved from the step definition.
    fn prepare_agent(
        &self,
        state: &State,
        step: &AgentStep,
        frame: Option<&LoopFrame>,
    ) -> Result<Prepared, AwfError> {
        let tpl = |what: &str, text: &str| {
            self.render(text, frame, None).map_err(|e| {
                AwfError::new(
                    ErrorCode::ExecutionTemplateFailed,
                    format!("resolve {what}: {e}"),
                )
            })
        };
        let provider = tpl("provider", &step.provider)?.trim().to_owned();
        let mut prompt = match (&step.prompt, &step.prompt_file) {
            (Some(p), _) => tpl("prompt", p)?,
            (None, Some(f)) => {
                let path = self.resolve_file(&tpl("prompt_file", f)?);
                let text =
                    super::step::read_workflow_file(self.svc.host.as_ref(), &path, "prompt file")?;
                tpl("prompt file contents", &text)?
            }
            (None, None) => String::new(),
        };
        if prompt.trim().is_empty() {
            return Err(AwfError::new(
                ErrorCode::WorkflowValidationInvalidState,
                "prompt cannot be empty",
            ));
        }
        if !step.skills.is_empty() {
            let mut blocks = Vec::new();
            for s in &step.skills {
                blocks.push(self.skill_block(s)?);
            }
            prompt = format!("{}\n\n{prompt}", blocks.join("\n\n"));
        }
        let role = match &step.role {
            Some(r) => Some(self.role_text(&tpl("role", r)?)?),
            None => None,
        };
        let system = match (&step.system_prompt, &step.options.get("system_prompt")) {
            (Some(s), _) => Some(tpl("system_prompt", s)?),
            (None, Some(Value::String(s))) => Some(tpl("system_prompt", s)?),
            _ => None,
        };
        let system_prompt = match (role, system) {
            (Some(r), Some(s)) => Some(format!("{r}\n\n{s}")),
            (Some(r), None) => Some(r),
            (None, s) => s,
        };
        let mut options = serde_json::Map::new();
        for (k, v) in &step.options {
            if k == "system_prompt" {
                continue;
            }
            options.insert(k.clone(), self.render_json(v, frame)?);
        }
        // A literal secret in the options (`api_key: sk-…`) is masked like one from the
        // environment: an error that echoes it (a 401 body) must not show it.
        let secrets = awf_domain::mask::Masker::from_named_values(&options);
        if !secrets.is_empty() {
            lock(&self.masker).extend(&secrets);
        }
        let output_format = match &step.output_format {
            Some(f) => Some(tpl("output_format", f)?.trim().to_owned()),
            None => None,
        };
        if !options.contains_key("output_format") {
            options.insert(
                "output_format".into(),
                Value::String(output_format.clone().unwrap_or_else(|| "text".into())),
            );
        }
        let session = match &step.conversation {
            None => None,
            Some(c) => match &c.continue_from {
                None => Some(AgentSession::default()),
                Some(from) => {
                    let states = lock(&self.states);
                    let Some(prev) = states.get(from) else {
                        return Err(AwfError::new(
                            ErrorCode::WorkflowValidationMissingState,
                            format!("continue_from: step \"{from}\" has not run yet"),
                        ));
                    };
                    let Some(sess) = prev.session.clone() else {
                        return Err(AwfError::new(
                            ErrorCode::WorkflowValidationInvalidState,
                            format!(
                                "continue_from: step \"{from}\" has no conversation state (add `conversation: {{}}` to it)"
                            ),
                        ));
                    };
                    Some(sess)
                }
            },
        };
        if let Some(ctx) = step
            .conversation
            .as_ref()
            .and_then(|c| c.inject_context.as_ref())
        {
            let ctx = tpl("inject_context", ctx)?;
            if !ctx.trim().is_empty() {
                prompt = format!("{ctx}\n\n{prompt}");
            }
        }
        let _ = state;
        Ok(Prepared {
            provider,
            prompt,
            system_prompt,
            options,
            session,
            output_format,
        })
    }

    /// Interpolates every string inside an option value.
    fn render_json(&self, v: &Value, frame: Option<&LoopFrame>) -> Result<Value, AwfError> {
        Ok(match v {
            Value::String(s) => Value::String(self.render(s, frame, None).map_err(|e| {
                AwfError::new(
                    ErrorCode::ExecutionTemplateFailed,
                    format!("resolve options: {e}"),
                )
            })?),
            Value::Array(a) => Value::Array(
                a.iter()
                    .map(|x| self.render_json(x, frame))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(o) => {
                let mut m = serde_json::Map::new();
                for (k, x) in o {
                    m.insert(k.clone(), self.render_json(x, frame)?);
                }
                Value::Object(m)
            }
            other => other.clone(),
        })
    }

    fn search_dirs(
        &self,
        env_key: &str,
        local: &[&str],
        global_key: &str,
        home: &[&str],
    ) -> Vec<PathBuf> {
        if let Some(list) = self.env.get(env_key).filter(|v| !v.is_empty()) {
            return split_paths(list);
        }
        let mut dirs: Vec<PathBuf> = local.iter().map(|l| self.working_dir.join(l)).collect();
        if let Some(g) = self.svc.awf_dirs.get(global_key) {
            dirs.push(PathBuf::from(g));
        }
        if let Some(h) = self.env.get("HOME") {
            dirs.extend(home.iter().map(|x| Path::new(h).join(x)));
        }
        dirs
    }

    /// Renders one skill (`<name>/SKILL.md` in the skills search path, or a path). Source:
    /// spec/workflow.md §1.13.
    fn skill_block(&self, skill: &str) -> Result<String, AwfError> {
        let dir = if is_path_ref(skill) {
            let p = self.resolve_file(skill);
            if self.svc.host.is_file(&p) {
                p.parent().map(Path::to_path_buf).unwrap_or(p)
            } else {
                p
            }
        } else {
            let dirs = self.search_dirs(
                "AWF_SKILLS_PATH",
                &[".awf/skills", ".agents/skills", ".claude/skills"],
                "skills_dir",
                &[".agents/skills", ".claude/skills"],
            );
            dirs.iter()
                .map(|d| d.join(skill))
                .find(|d| self.svc.host.is_dir(d))
                .ok_or_else(|| {
                    AwfError::new(
                        ErrorCode::UserInputMissingSkill,
                        format!("skill \"{skill}\" not found"),
                    )
                    .with_hint(format!(
                        "create <skills dir>/{skill}/SKILL.md in one of: {}",
                        join_dirs(&dirs)
                    ))
                })?
        };
        let file = dir.join("SKILL.md");
        let content = strip_front_matter(
            &super::step::read_workflow_file(self.svc.host.as_ref(), &file, "skill").map_err(
                |e| AwfError::new(ErrorCode::UserInputMissingSkill, e.message().to_owned()),
            )?,
        )
        .to_owned();
        let abs = self
            .svc
            .host
            .canonicalize(&dir)
            .unwrap_or_else(|_| dir.clone());
        let mut out = format!(
            "<skill_content name=\"{}\">\n{}\n\nSkill directory: {}\nRelative paths in this skill are relative to the skill directory.",
            abs.file_name()
                .map_or_else(|| skill.to_owned(), |n| n.to_string_lossy().into_owned()),
            content.trim(),
            abs.display()
        );
        let mut files = Vec::new();
        collect_files(self.svc.host.as_ref(), &abs, &abs, 0, &mut files);
        files.sort();
        if !files.is_empty() {
            out.push_str("\n<skill_resources>\n");
            for f in files {
                out.push_str(&format!("<file>{f}</file>\n"));
            }
            out.push_str("</skill_resources>");
        }
        out.push_str("\n</skill_content>");
        Ok(out)
    }

    /// Content of a role (`<name>/AGENTS.md`, or a path to the directory or the file).
    fn role_text(&self, role: &str) -> Result<String, AwfError> {
        if role.split(['/', '\\']).any(|c| c == "..") {
            return Err(AwfError::new(
                ErrorCode::UserInputMissingRole,
                format!("role \"{role}\" must not contain '..'"),
            ));
        }
        let file = if is_path_ref(role) {
            let p = self.resolve_file(role);
            if self.svc.host.is_dir(&p) {
                p.join("AGENTS.md")
            } else {
                p
            }
        } else {
            let dirs = self.search_dirs(
                "AWF_ROLES_PATH",
                &[".awf/roles", ".agents/roles"],
                "roles_dir",
                &[".agents/roles"],
            );
            dirs.iter()
                .map(|d| d.join(role).join("AGENTS.md"))
                .find(|f| self.svc.host.is_file(f))
                .ok_or_else(|| {
                    AwfError::new(
                        ErrorCode::UserInputMissingRole,
                        format!("role \"{role}\" not found"),
                    )
                    .with_hint(format!(
                        "create <roles dir>/{role}/AGENTS.md in one of: {}",
                        join_dirs(&dirs)
                    ))
                })?
        };
        let text = super::step::read_workflow_file(self.svc.host.as_ref(), &file, "role")
            .map_err(|e| AwfError::new(ErrorCode::UserInputMissingRole, e.message().to_owned()))?;
        let body = strip_front_matter(&text).trim().to_owned();
        if body.is_empty() {
            return Err(AwfError::new(
                ErrorCode::UserInputMissingRole,
                format!("role file {} is empty", file.display()),
            ));
        }
        Ok(body)
    }
}

/// What [`Run::call_with_policy`] ended with: the result, every tool call made on the way,
/// the providers left behind, and the call (and provider) that gave the result.
struct PolicyAnswer {
    result: Result<awf_domain::ports::agent::AgentResponse, AwfError>,
    calls: Vec<awf_domain::run::ToolCallEntry>,
    skipped: Vec<awf_domain::run::FallbackSkip>,
    prepared: Prepared,
    provider: Arc<dyn awf_domain::ports::AgentProvider>,
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

/// The options that tell two attempts of one provider apart, in the order a fallback warning
/// names them.
const DISTINGUISHING_OPTIONS: [&str; 3] = ["model", "base_url", "agent"];

/// How a fallback warning names the attempt `this` (at `position`: 0 the step's own provider,
/// n its nth fallback) beside `other`: the provider's name; when both are the same provider,
/// with the first of [`DISTINGUISHING_OPTIONS`] whose values differ (`openai_compatible
/// (model gpt-4o)`, `(default model)` where it is not set), else with its position
/// (`(fallback 2)`, `(the step's own)`).
fn attempt_label(this: &Prepared, other: &Prepared, position: usize) -> String {
    if this.provider != other.provider {
        return this.provider.clone();
    }
    let text = |p: &Prepared, key: &str| {
        p.options
            .get(key)
            .filter(|v| !v.is_null())
            .map(|v| match v {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            })
    };
    for key in DISTINGUISHING_OPTIONS {
        let (mine, theirs) = (text(this, key), text(other, key));
        if mine != theirs {
            return match mine {
                Some(v) => format!("{} ({key} {v})", this.provider),
                None => format!("{} (default {key})", this.provider),
            };
        }
    }
    match position {
        0 => format!("{} (the step's own)", this.provider),
        n => format!("{} (fallback {n})", this.provider),
    }
}

/// A resolved agent call.
#[derive(Debug, Clone)]
struct Prepared {
    provider: String,
    prompt: String,
    system_prompt: Option<String>,
    options: serde_json::Map<String, Value>,
    session: Option<AgentSession>,
    /// `output_format`, interpolated.
    output_format: Option<String>,
}

fn is_path_ref(s: &str) -> bool {
    s.contains('/') || s.contains('\\') || s.starts_with('.') || s.starts_with('~')
}

fn join_dirs(dirs: &[PathBuf]) -> String {
    dirs.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A `:`-separated search path (`$AWF_SKILLS_PATH`, `$AWF_ROLES_PATH`) as directories, as
/// `std::env::split_paths` reads it on Unix (an empty entry stays an empty path).
pub(crate) fn split_paths(list: &str) -> Vec<PathBuf> {
    list.split(':').map(PathBuf::from).collect()
}

/// Drops a leading `---` YAML front matter block.
fn strip_front_matter(text: &str) -> &str {
    let t = text.trim_start_matches('\u{feff}');
    if let Some(rest) = t
        .strip_prefix("---\n")
        .or_else(|| t.strip_prefix("---\r\n"))
        && let Some(end) = rest.find("\n---")
    {
        let after = &rest[end + 4..];
        return after
            .strip_prefix('\n')
            .or_else(|| after.strip_prefix("\r\n"))
            .unwrap_or(after);
    }
    t
}

/// Files of a skill directory (≤ 4 levels, minus SKILL.md, `.git`, `node_modules`), as
/// relative paths.
fn collect_files(
    host: &dyn awf_domain::ports::Host,
    root: &Path,
    dir: &Path,
    depth: usize,
    out: &mut Vec<String>,
) {
    if depth > 4 || out.len() > 500 {
        return;
    }
    let Ok(entries) = host.read_dir(dir) else {
        return;
    };
    for e in entries {
        let p = e.path;
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name == ".git" || name == "node_modules" {
            continue;
        }
        if e.kind == awf_domain::ports::host::FileKind::Dir {
            collect_files(host, root, &p, depth + 1, out);
        } else if !(depth == 0 && name == "SKILL.md")
            && let Ok(rel) = p.strip_prefix(root)
        {
            out.push(rel.display().to_string());
        }
    }
}

/// Strips one outer Markdown code fence (```` ```lang\n…\n``` ````). Source: spec §1.14.
pub(crate) fn strip_fences(text: &str) -> &str {
    let t = text.trim();
    let Some(rest) = t.strip_prefix("```") else {
        return text;
    };
    let Some(body) = rest.strip_suffix("```") else {
        return text;
    };
    match body.find('\n') {
        Some(nl) => body[nl + 1..].trim_end_matches(['\n', '\r']),
        None => body,
    }
}

/// A mocked answer standing for an agent step that `--step` does not run: its text and
/// `.JSON` as a full run's `--mock` of the step gives them (`output_format` `json`: the
/// parsed answer, fences stripped; `text`: fences stripped). An answer that is not the JSON
/// asked for is refused before the run ([`super::check_step_mocks`]); here it would be kept
/// as given, without `.JSON`.
/// `output_format` is taken as written (a template in it is not interpolated here).
pub(crate) fn mocked_answer(
    output_format: Option<&str>,
    output: String,
    masker: &awf_domain::mask::Masker,
) -> (String, Option<Value>) {
    match output_format.map(str::trim) {
        Some("json") => match parse_json_output(&output, masker) {
            Ok((text, json)) => (text, Some(json)),
            Err(_) => (output, None),
        },
        Some("text") => (strip_fences(&output).to_owned(), None),
        _ => (output, None),
    }
}

/// `output_format: json`: strip fences, parse; else the first ```` ```json ```` block. The
/// error quotes the first 200 characters of the text, masked before it is cut.
pub(crate) fn parse_json_output(
    text: &str,
    masker: &awf_domain::mask::Masker,
) -> Result<(String, Value), String> {
    let stripped = strip_fences(text).trim();
    let parsed = match serde_json::from_str::<Value>(stripped) {
        Ok(v) => Ok((stripped.to_owned(), v)),
        Err(first) => {
            let block = text.find("```json").and_then(|start| {
                let after = &text[start + 7..];
                let block = after[..after.find("```")?].trim();
                Some((block.to_owned(), serde_json::from_str::<Value>(block).ok()?))
            });
            block.ok_or(first)
        }
    };
    let preview = || -> String { masker.mask(text).chars().take(200).collect() };
    let (text_kept, v) =
        parsed.map_err(|first| format!("invalid JSON: {first} (content: {})", preview()))?;
    // Kept as text: the run's state file must be read back (serde_json reads 128 levels).
    if let Some(d) = awf_domain::json::too_deep(&v) {
        return Err(format!(
            "the JSON nests arrays or objects {d} levels deep; awf takes at most {} levels \
             (content: {})",
            awf_domain::json::MAX_DEPTH,
            preview()
        ));
    }
    Ok((text_kept, v))
}

/// The signal an agent's process died of, as its provider's error says (`signal` detail).
fn died_of(e: &AwfError) -> Option<i32> {
    e.details()
        .get("signal")
        .and_then(Value::as_i64)
        .and_then(|s| i32::try_from(s).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use awf_domain::mask::Masker;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_invalid_json_preview_is_masked_before_it_is_cut() {
        let secret = "sk-0123456789abcdefghij";
        let m = Masker::from_named([("OPENAI_API_KEY", secret)]);
        for at in 180..200 {
            let text = format!("{}{secret} tail", "x".repeat(at));
            let e = parse_json_output(&text, &m).unwrap_err();
            assert!(!e.contains("sk-0"), "{at}: {e}");
            assert!(e.contains("x*"), "{at}: {e}");
        }
    }

    #[test]
    fn fences_and_json() {
        assert_eq!(strip_fences("```json\n{\"a\":1}\n```"), "{\"a\":1}");
        assert_eq!(strip_fences("plain"), "plain");
        assert_eq!(
            parse_json_output("```\n[1,2]\n```", &Masker::default())
                .unwrap()
                .1,
            serde_json::json!([1, 2])
        );
        assert_eq!(
            parse_json_output(
                "Here you go:\n```json\n{\"ok\":true}\n```\nbye",
                &Masker::default()
            )
            .unwrap()
            .1,
            serde_json::json!({"ok": true})
        );
        let e = parse_json_output("not json", &Masker::default()).unwrap_err();
        assert!(e.starts_with("invalid JSON: "), "{e}");
        assert!(e.ends_with("(content: not json)"), "{e}");
    }

    #[test]
    fn front_matter() {
        assert_eq!(strip_front_matter("---\nname: x\n---\nbody\n"), "body\n");
        assert_eq!(strip_front_matter("no front matter"), "no front matter");
    }

    #[test]
    fn a_fallback_attempt_is_named_by_what_tells_it_apart() {
        let attempt = |provider: &str, options: Value| Prepared {
            provider: provider.into(),
            prompt: String::new(),
            system_prompt: None,
            options: options.as_object().cloned().unwrap_or_default(),
            session: None,
            output_format: None,
        };
        let claude = attempt("claude", serde_json::json!({"model": "x"}));
        let a = attempt("openai_compatible", serde_json::json!({"model": "x"}));
        // Other providers: the name is enough.
        assert_eq!(attempt_label(&claude, &a, 0), "claude");
        assert_eq!(attempt_label(&a, &claude, 1), "openai_compatible");
        // The model first, then the endpoint; one not set is its default.
        let b = attempt(
            "openai_compatible",
            serde_json::json!({"base_url": "http://b/v1"}),
        );
        assert_eq!(attempt_label(&a, &b, 0), "openai_compatible (model x)");
        assert_eq!(
            attempt_label(&b, &a, 1),
            "openai_compatible (default model)"
        );
        let c = attempt(
            "openai_compatible",
            serde_json::json!({"model": "x", "base_url": "http://c/v1"}),
        );
        assert_eq!(
            attempt_label(&c, &a, 2),
            "openai_compatible (base_url http://c/v1)"
        );
        // Nothing that differs: the place in the step's order.
        assert_eq!(
            attempt_label(&a, &a.clone(), 0),
            "openai_compatible (the step's own)"
        );
        assert_eq!(
            attempt_label(&a, &a.clone(), 3),
            "openai_compatible (fallback 3)"
        );
    }
}
