//! Dry-run planning: what `awf run --dry-run` would do, computed without executing anything.
//!
//! The plan lists the workflow's inputs (with their effective values) and every state reachable
//! from `initial`, in breadth-first order over transitions, `on_success`, `on_failure`, parallel
//! branches, loop bodies and `on_complete`. Commands, script paths, prompts and hooks are
//! interpolated with the inputs, the environment, the workflow name and `{{.awf.*}}` (the awf
//! directories); a template that needs anything else (states, loop variables) is shown raw.
//! `script_file` and `prompt_file` are loaded (1 MiB at most, as at run time) and their
//! content is interpolated the same way. Input rules are checked except `file_exists` (the
//! dry run reads nothing the inputs name). The `__inline_error_<step>` terminal that an inline
//! `on_failure: {message, status}` becomes is not listed: its route carries the message.
//! Front-ends render the [`Plan`] as text or JSON.
//!
//! Source: spec/workflow.md §3.12 ("Dry run").

use std::collections::BTreeMap;
use std::collections::HashSet;
use std::collections::VecDeque;
use std::path::Path;
use std::path::PathBuf;
use std::time::SystemTime;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::mask::Masker;
use awf_domain::ports::repository::LoadedWorkflow;
use awf_domain::scope::RuntimeInfo;
use awf_domain::scope::Scope;
use awf_domain::scope::WorkflowInfo;
use awf_domain::workflow::Backoff;
use awf_domain::workflow::CaptureNames;
use awf_domain::workflow::CommandSource;
use awf_domain::workflow::HookAction;
use awf_domain::workflow::LoopOver;
use awf_domain::workflow::MaxIterations;
use awf_domain::workflow::ParallelStrategy;
use awf_domain::workflow::State;
use awf_domain::workflow::StateKind;
use awf_domain::workflow::TerminalStatus;
use awf_domain::workflow::Workflow;
use serde::Serialize;
use serde_json::Map;
use serde_json::Value;

use crate::Services;

/// A dry-run plan.
///
/// JSON shape: `{"workflow": "name", "identifier": "…", "description": "…"|null,
/// "inputs": [{"name", "value", "default": bool, "config": bool, "missing": true (only when
/// so)}], "hooks": {...}, "states":
/// [PlannedState…]}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// YAML `name`.
    pub workflow: String,
    /// Identifier the plan was made for (name or path).
    pub identifier: String,
    /// YAML `description`.
    pub description: Option<String>,
    /// Declared inputs with their effective values, in declaration order. Undeclared ones
    /// (an `--input` or a project config value the workflow does not declare) are left out:
    /// nothing in the run reads them (`awf run` warns about an undeclared `--input`).
    pub inputs: Vec<PlanInput>,
    /// Workflow-level hooks, rendered.
    pub hooks: PlanWorkflowHooks,
    /// Reachable states, breadth-first from `initial`.
    pub states: Vec<PlannedState>,
}

/// One input of the plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanInput {
    /// Input name.
    pub name: String,
    /// Effective value (secret-named values masked as `***`); `null` when unset and optional.
    pub value: Value,
    /// The value is the declared default (no `--input` or config value).
    pub default: bool,
    /// The value is the project config's (`.awf/config.yaml` `inputs:`), no `--input` given.
    pub config: bool,
    /// A required input that was not given and has no default ([`plan_dry_run`]): `value`
    /// is its placeholder, [`missing_placeholder`]. Serialized only when true.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub missing: bool,
}

/// What [`plan_dry_run`] shows for required input `name` that was not given:
/// `<missing: name>`, in the inputs and wherever a template reads it.
pub fn missing_placeholder(name: &str) -> String {
    format!("<missing: {name}>")
}

/// Workflow-level hooks, each action rendered as `log: text` or `command: text`.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct PlanWorkflowHooks {
    /// `workflow_start` actions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub workflow_start: Vec<String>,
    /// `workflow_end` actions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub workflow_end: Vec<String>,
    /// `workflow_error` actions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub workflow_error: Vec<String>,
    /// `workflow_cancel` actions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub workflow_cancel: Vec<String>,
}

/// A retry policy as shown in the plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanRetry {
    /// Total attempts.
    pub max_attempts: u32,
    /// `constant`, `linear` or `exponential`.
    pub backoff: &'static str,
    /// Base delay in milliseconds.
    pub initial_delay_ms: u64,
    /// Delay cap in milliseconds, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_delay_ms: Option<u64>,
    /// Exponential multiplier.
    pub multiplier: f64,
}

/// An approval gate as shown in the plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanApproval {
    /// The message, interpolated as commands are (raw where it reads what only the run
    /// knows, such as `states`); masked.
    pub message: String,
    /// The choices, in order.
    pub options: Vec<awf_domain::interaction::ApprovalOption>,
    /// How long the gate waits, in milliseconds, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The option taken on timeout, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_timeout: Option<String>,
}

/// A route out of a state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanRoute {
    /// `on_success`, `on_failure`, `when` (conditional transition), `default` (transition
    /// without `when`) or `on_complete`.
    pub on: &'static str,
    /// The `when` expression of a conditional transition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// Target state; empty (and left out of JSON) for an inline error.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub target: String,
    /// The inline `on_failure: {message, status}` this route ends the run with, instead of a
    /// named state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inline_error: Option<PlanInlineError>,
}

/// An inline failure terminal (`on_failure: {message, status}`), as shown in the plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanInlineError {
    /// Message (interpolated when possible).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Process exit status (`None`: the default, 3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

/// The MCP proxy an agent step would get in a real run (`awf mcp-serve`, served as the
/// CLI's MCP server `awf-proxy`, or in-process for `openai_compatible`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanProxy {
    /// The server name the provider declares (`awf-proxy`).
    pub server: &'static str,
    /// Built-in Read, Write, Edit, Bash, Glob and Grep served (the CLI's own hidden where it can).
    pub intercept_builtins: bool,
    /// Plugin tools served, as `<plugin>_<op>`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub plugin_tools: Vec<String>,
}

/// Per-type details of a planned state (`type` tag in JSON).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PlanDetails {
    /// A shell step.
    Command {
        /// Interpolated command text (raw when it needs run-time data).
        #[serde(skip_serializing_if = "Option::is_none")]
        command: Option<String>,
        /// Interpolated script file path, resolved.
        #[serde(skip_serializing_if = "Option::is_none")]
        script_file: Option<String>,
        /// Content of `script_file`, interpolated (raw where it needs run-time data); `None`
        /// when the path itself needs run-time data.
        #[serde(skip_serializing_if = "Option::is_none")]
        script: Option<String>,
        /// Interpolated working directory.
        #[serde(skip_serializing_if = "Option::is_none")]
        dir: Option<String>,
    },
    /// An agent step.
    Agent {
        /// Provider name.
        provider: String,
        /// Interpolated prompt: the inline `prompt`, or the content of `prompt_file`.
        #[serde(skip_serializing_if = "Option::is_none")]
        prompt: Option<String>,
        /// Prompt file path, resolved.
        #[serde(skip_serializing_if = "Option::is_none")]
        prompt_file: Option<String>,
        /// `single` or `conversation`.
        mode: String,
        /// Provider options: string values rendered and masked, secret-named keys as `***`.
        #[serde(skip_serializing_if = "Map::is_empty")]
        options: Map<String, Value>,
        /// The MCP proxy the step would get (`mcp_proxy: {enable: true}`).
        #[serde(skip_serializing_if = "Option::is_none")]
        mcp_proxy: Option<PlanProxy>,
    },
    /// A parallel block.
    Parallel {
        /// Branch state names.
        branches: Vec<String>,
        /// `all_succeed`, `any_succeed` or `best_effort`.
        strategy: &'static str,
        /// Concurrency cap (0 = unlimited).
        max_concurrent: usize,
    },
    /// A `for_each` loop.
    ForEach {
        /// Items (interpolated when possible).
        items: String,
        /// Body states.
        body: Vec<String>,
        /// Iteration cap (number or template).
        max_iterations: String,
        /// Early-exit condition.
        #[serde(skip_serializing_if = "Option::is_none")]
        break_when: Option<String>,
        /// Next state after the loop.
        #[serde(skip_serializing_if = "Option::is_none")]
        on_complete: Option<String>,
    },
    /// A `while` loop.
    While {
        /// Loop condition.
        condition: String,
        /// Body states.
        body: Vec<String>,
        /// Iteration cap (number or template).
        max_iterations: String,
        /// Early-exit condition.
        #[serde(skip_serializing_if = "Option::is_none")]
        break_when: Option<String>,
        /// Next state after the loop.
        #[serde(skip_serializing_if = "Option::is_none")]
        on_complete: Option<String>,
    },
    /// An operation step.
    Operation {
        /// Operation id.
        operation: String,
        /// Operation inputs as written.
        #[serde(skip_serializing_if = "Map::is_empty")]
        inputs: Map<String, Value>,
    },
    /// A sub-workflow call.
    CallWorkflow {
        /// Child workflow identifier.
        workflow: String,
        /// Child inputs, interpolated when possible.
        #[serde(skip_serializing_if = "BTreeMap::is_empty")]
        inputs: BTreeMap<String, String>,
    },
    /// A terminal state.
    Terminal {
        /// `success` or `failure`.
        status: &'static str,
        /// Message (interpolated when possible).
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        /// Inline exit status of a failure terminal.
        #[serde(skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
    },
}

/// One state of the plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedState {
    /// 1-based position among command-like states (command, agent, operation,
    /// call_workflow); `None` for parallel blocks, loops and terminals.
    pub index: Option<usize>,
    /// State name.
    pub name: String,
    /// Description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Type-specific details.
    #[serde(flatten)]
    pub details: PlanDetails,
    /// Pre hooks, rendered (`log: …` / `command: …`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hooks_pre: Vec<String>,
    /// Post hooks, rendered.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hooks_post: Vec<String>,
    /// Timeout in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Retry policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<PlanRetry>,
    /// The step's approval gate (`approval:`), asked before it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<PlanApproval>,
    /// `capture.max_size` in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture_max_size: Option<u64>,
    /// `capture.stdout` / `capture.stderr` variable names (JSON `capture: {stdout, stderr}`).
    #[serde(skip_serializing_if = "CaptureNames::is_empty")]
    pub capture: CaptureNames,
    /// Failures are routed like successes.
    pub continue_on_error: bool,
    /// Routes out of the state, in evaluation order (transitions first).
    pub routes: Vec<PlanRoute>,
}

/// Builds the dry-run plan for `identifier`.
///
/// Loads the workflow (it fails the checks `awf run` applies, like `awf run` does), resolves inputs
/// (defaults < `config_inputs` < `cli_inputs`) and walks the states. Nothing is executed.
///
/// # Errors
/// Load errors of the repository (`USER.FACADE.WORKFLOW_NOT_FOUND`, `WORKFLOW.*`);
/// `WORKFLOW.*` for a workflow `awf validate` rejects; `USER.INPUT.VALIDATION_FAILED` for missing
/// required or invalid inputs (`file_exists` is not checked); `USER.INPUT.MISSING_FILE` when a
/// `script_file` or `prompt_file` does not exist or is not a regular file;
/// `USER.INPUT.INVALID_FORMAT` when one is over 1 MiB or not UTF-8.
///
/// Source: spec/workflow.md §3.12.
pub fn plan(
    services: &Services,
    identifier: &str,
    cli_inputs: &[(String, String)],
    config_inputs: &Map<String, Value>,
) -> Result<Plan, AwfError> {
    plan_with_env(
        services,
        identifier,
        cli_inputs,
        config_inputs,
        &BTreeMap::new(),
    )
}

/// [`plan`] with the process environment: templates reading `env` are rendered with it, and
/// the values of its secret-named variables are masked like secret inputs (as `awf run`
/// masks them).
///
/// # Errors
/// As [`plan`].
pub fn plan_with_env(
    services: &Services,
    identifier: &str,
    cli_inputs: &[(String, String)],
    config_inputs: &Map<String, Value>,
    env: &BTreeMap<String, String>,
) -> Result<Plan, AwfError> {
    let loaded = services.repository.load(identifier, None)?;
    plan_loaded(
        services,
        identifier,
        &loaded,
        cli_inputs,
        config_inputs,
        env,
        None,
    )
}

/// [`plan_with_env`] of a workflow the caller already loaded (`identifier` is what it was
/// loaded by): for a caller that needs the loaded file too (`awf run --submit` queues its
/// path), so it is read once. With `only_step` (`awf run --step S --dry-run`) the plan's
/// states are that state alone, reached from `initial` or not, as the run runs only it
/// (between the workflow's hooks).
///
/// # Errors
/// As [`plan`], but for the load errors.
pub fn plan_loaded(
    services: &Services,
    identifier: &str,
    loaded: &LoadedWorkflow,
    cli_inputs: &[(String, String)],
    config_inputs: &Map<String, Value>,
    env: &BTreeMap<String, String>,
    only_step: Option<&str>,
) -> Result<Plan, AwfError> {
    build(
        services,
        identifier,
        loaded,
        PlanInputs {
            cli: cli_inputs,
            config: config_inputs,
            placeholders: false,
        },
        env,
        only_step,
    )
}

/// [`plan_loaded`] for `awf run --dry-run`: a required input that was not given and has no
/// default does not stop the plan: it is listed with [`missing_placeholder`] as its value
/// (`missing: true`) and templates that read it show the placeholder (a `script_file` or
/// `prompt_file` path holding it is shown, not read). Every other input rule is checked
/// as [`plan_loaded`] checks it. (AWF (Go) refuses the dry run, `missing required input`;
/// docs/compatibility.md.)
///
/// # Errors
/// As [`plan_loaded`], but for missing required inputs.
pub fn plan_dry_run(
    services: &Services,
    identifier: &str,
    loaded: &LoadedWorkflow,
    cli_inputs: &[(String, String)],
    config_inputs: &Map<String, Value>,
    env: &BTreeMap<String, String>,
    only_step: Option<&str>,
) -> Result<Plan, AwfError> {
    build(
        services,
        identifier,
        loaded,
        PlanInputs {
            cli: cli_inputs,
            config: config_inputs,
            placeholders: true,
        },
        env,
        only_step,
    )
}

/// The inputs a plan is made with.
struct PlanInputs<'a> {
    cli: &'a [(String, String)],
    config: &'a Map<String, Value>,
    /// Missing required inputs get placeholders instead of failing the plan.
    placeholders: bool,
}

fn build(
    services: &Services,
    identifier: &str,
    loaded: &LoadedWorkflow,
    given: PlanInputs<'_>,
    env: &BTreeMap<String, String>,
    only_step: Option<&str>,
) -> Result<Plan, AwfError> {
    let PlanInputs {
        cli: cli_inputs,
        config: config_inputs,
        placeholders,
    } = given;
    crate::validation::check_for_run(services, loaded)?;
    let wf = &loaded.workflow;
    let missing: Vec<String> = if placeholders {
        crate::inputs::missing_required(wf, cli_inputs, config_inputs)
            .into_iter()
            .map(|d| d.name)
            .collect()
    } else {
        Vec::new()
    };
    // Nothing an input names is read by a dry run, so `file_exists` is not checked (as in
    // AWF (Go)); every other rule is.
    let mut unchecked = wf.clone();
    for def in &mut unchecked.inputs {
        def.validation.file_exists = false;
        if missing.contains(&def.name) {
            def.required = false;
        }
    }
    let mut resolved = crate::inputs::resolve_inputs(
        &unchecked,
        cli_inputs,
        config_inputs,
        std::path::Path::new("."),
        services.host.as_ref(),
    )?;
    let mut masker = Masker::from_named_values(&resolved);
    masker.extend(&Masker::from_named(
        env.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    ));
    // Placeholders after the masker: they are no secret's value.
    for name in &missing {
        resolved.insert(name.clone(), Value::String(missing_placeholder(name)));
    }
    let inputs = plan_inputs(wf, &resolved, cli_inputs, config_inputs, &masker, &missing);

    let planner = Planner {
        services,
        wf,
        inputs: &resolved,
        masker: &masker,
        awf_dirs: &services.awf_dirs,
        env,
        missing: &missing,
    };
    let hooks = PlanWorkflowHooks {
        workflow_start: planner.hooks(&wf.hooks.workflow_start),
        workflow_end: planner.hooks(&wf.hooks.workflow_end),
        workflow_error: planner.hooks(&wf.hooks.workflow_error),
        workflow_cancel: planner.hooks(&wf.hooks.workflow_cancel),
    };
    let mut states = Vec::new();
    let mut counter = 0usize;
    // New user: `--step two --dry-run` printed every state.
    let order = only_step.map_or_else(|| bfs_order(wf), |s| vec![s.to_owned()]);
    for name in order {
        let Some(state) = wf.state(&name) else {
            continue;
        };
        if inline_error(wf, &name).is_some() {
            // Shown on the route that leads to it.
            continue;
        }
        states.push(planner.state(state, &mut counter)?);
    }
    Ok(Plan {
        workflow: wf.name.clone(),
        identifier: identifier.to_owned(),
        description: wf.description.clone(),
        inputs,
        hooks,
        states,
    })
}

fn plan_inputs(
    wf: &Workflow,
    resolved: &Map<String, Value>,
    cli: &[(String, String)],
    config: &Map<String, Value>,
    masker: &Masker,
    missing: &[String],
) -> Vec<PlanInput> {
    let mut out = Vec::new();
    for def in &wf.inputs {
        if missing.contains(&def.name) {
            out.push(PlanInput {
                name: def.name.clone(),
                value: Value::String(missing_placeholder(&def.name)),
                default: false,
                config: false,
                missing: true,
            });
            continue;
        }
        let from_cli = cli.iter().any(|(k, _)| k.trim() == def.name);
        let from_config = !from_cli && config.get(&def.name).is_some_and(|v| !v.is_null());
        let given = from_cli || from_config;
        let mut value = resolved.get(&def.name).cloned().unwrap_or(Value::Null);
        masker.mask_json(&mut value);
        if awf_domain::mask::is_secret_name(&def.name) && !value.is_null() {
            value = Value::String(awf_domain::mask::MASK.to_owned());
        }
        out.push(PlanInput {
            name: def.name.clone(),
            value,
            default: !given && def.default.is_some(),
            config: from_config,
            missing: false,
        });
    }
    out
}

/// State names reachable from `initial` in the order a run meets them: breadth-first over
/// [`successors`], each once, then the terminals (success ones first, then failure ones,
/// each group in the order reached), so the plan reads as the run goes and ends with where
/// it can end.
fn bfs_order(wf: &Workflow) -> Vec<String> {
    let mut order = Vec::new();
    let mut seen = HashSet::new();
    let mut queue = VecDeque::from([wf.initial.clone()]);
    seen.insert(wf.initial.clone());
    while let Some(name) = queue.pop_front() {
        let Some(state) = wf.state(&name) else {
            continue;
        };
        order.push(name);
        for next in successors(state) {
            if seen.insert(next.clone()) {
                queue.push_back(next);
            }
        }
    }
    let terminal = |name: &String, status: TerminalStatus| {
        wf.state(name)
            .is_some_and(|s| matches!(&s.kind, StateKind::Terminal(t) if t.status == status))
    };
    let (success, rest): (Vec<String>, Vec<String>) = order
        .into_iter()
        .partition(|n| terminal(n, TerminalStatus::Success));
    let (failure, mut steps): (Vec<String>, Vec<String>) = rest
        .into_iter()
        .partition(|n| terminal(n, TerminalStatus::Failure));
    steps.extend(success);
    steps.extend(failure);
    steps
}

/// Every state a state can lead to, in the order a run meets them: a parallel block's
/// branches and a loop's body (they run inside it), then its transitions, `on_success`,
/// `on_failure`, and a loop's `on_complete`.
pub fn successors(state: &State) -> Vec<String> {
    let mut out: Vec<String> = match &state.kind {
        StateKind::Parallel(p) => p.branches.clone(),
        StateKind::Loop(l) => l.body.clone(),
        _ => Vec::new(),
    };
    out.extend(state.transitions.iter().map(|t| t.goto.clone()));
    out.extend(state.on_success.iter().cloned());
    out.extend(state.on_failure.iter().cloned());
    if let StateKind::Loop(l) = &state.kind {
        out.extend(l.on_complete.iter().cloned());
    }
    out
}

struct Planner<'a> {
    services: &'a Services,
    wf: &'a Workflow,
    inputs: &'a Map<String, Value>,
    masker: &'a Masker,
    awf_dirs: &'a BTreeMap<String, String>,
    env: &'a BTreeMap<String, String>,
    /// Required inputs not given, shown as [`missing_placeholder`]s.
    missing: &'a [String],
}

impl Planner<'_> {
    /// Interpolates with inputs and the workflow name only; on error (or when the template
    /// reads run-time fields of `workflow` or `context`) returns the raw text.
    fn render(&self, template: &str) -> String {
        self.render_as(template, false)
    }

    /// [`Self::render`]; `command` (shell) text is rendered as the run renders it: values
    /// quoted under `shell_quote: true`, a value in a `#` comment kept on one line.
    fn render_as(&self, template: &str, command: bool) -> String {
        if needs_runtime(template) {
            return self.masker.mask(template).into_owned();
        }
        let states = BTreeMap::new();
        let env = self.env;
        let awf = self.awf_dirs;
        let info = WorkflowInfo {
            id: String::new(),
            name: self.wf.name.clone(),
            current_state: String::new(),
            started_at: SystemTime::UNIX_EPOCH,
            duration: std::time::Duration::ZERO,
        };
        let context = RuntimeInfo::default();
        let scope = Scope {
            inputs: self.inputs,
            states: &states,
            workflow: &info,
            env,
            context: &context,
            awf,
            loop_frame: None,
            error: None,
            workflow_dir: &self.wf.source.dir,
        };
        // Shell text as the run renders it: values quoted under `shell_quote: true`, those
        // in a `#` comment kept on one line either way.
        let rendered = if command && self.wf.shell_quote {
            self.services
                .interpolator
                .render_shell_quoted(template, &scope)
        } else if command {
            self.services.interpolator.render_shell(template, &scope)
        } else {
            self.services.interpolator.render(template, &scope)
        };
        let text = rendered.unwrap_or_else(|_| template.to_owned());
        self.masker.mask(&text).into_owned()
    }

    /// An agent option as the run would use it: string values (nested too) rendered and
    /// masked; every string under a secret-named key (`api_key`, `token`, …) shown as `***`.
    fn option(&self, key: &str, v: &Value, secret: bool) -> Value {
        let secret = secret || awf_domain::mask::is_secret_name(key);
        match v {
            Value::String(s) if secret && !s.is_empty() => {
                Value::String(awf_domain::mask::MASK.to_owned())
            }
            Value::String(s) => Value::String(self.render(s)),
            Value::Array(a) => {
                Value::Array(a.iter().map(|x| self.option(key, x, secret)).collect())
            }
            Value::Object(o) => Value::Object(
                o.iter()
                    .map(|(k, x)| (k.clone(), self.option(k, x, secret)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    fn hooks(&self, actions: &[HookAction]) -> Vec<String> {
        actions
            .iter()
            .map(|a| match a {
                HookAction::Log(t) => format!("log: {}", self.render(t)),
                HookAction::Command(t) => format!("command: {}", self.render_as(t, true)),
            })
            .collect()
    }

    /// Resolves an external file path like the engine does (spec §1.12), as far as the
    /// planning scope allows, and loads it with the run's limits: returns the path shown and the
    /// interpolated content (`None` when the path needs run-time data).
    fn external_file(
        &self,
        raw: &str,
        state: &str,
        kind: &str,
    ) -> Result<(String, Option<String>), AwfError> {
        let rendered = self.render(raw);
        let placeholder = self
            .missing
            .iter()
            .any(|n| rendered.contains(&missing_placeholder(n)));
        if rendered.contains("{{") || placeholder {
            // Needs run-time data (or an input not given); cannot load it now.
            return Ok((rendered, None));
        }
        let path = normalize(&resolve_external(
            &rendered,
            &self.wf.source.dir,
            self.awf_dirs,
            kind,
            self.services.host.as_ref(),
        ));
        let text = crate::engine::read_workflow_file(
            self.services.host.as_ref(),
            &path,
            &format!("{kind} file"),
        )
        .map_err(|e| {
            let hint = if e.code() == ErrorCode::UserInputMissingFile {
                format!(
                    "Relative {kind} paths resolve against the workflow's directory ({}).",
                    self.wf.source.dir.display()
                )
            } else {
                format!(
                    "A {kind} file must be UTF-8 text of at most 1 MiB ({MAX} bytes), as at run time.",
                    MAX = 1024 * 1024
                )
            };
            e.map_message(|m| format!("state '{state}': {m}"))
                .with_detail("state", state.to_owned())
                .with_detail("file", path.display().to_string())
                .with_hint(hint)
        })?;
        // A script that runs as shell code is shown as the run renders it (values quoted
        // under `shell_quote: true`); another interpreter's script as written (breaker: the
        // plan showed a shell script's values unquoted).
        let interpreter = awf_domain::interpreter::script_interpreter(&text);
        let shell = kind == "script" && interpreter.quotes_as_shell();
        // A non-POSIX shell's script the run refuses under `shell_quote: true` (it prints a
        // value no quoting protects there) is shown as written, never filled in.
        let refused = kind == "script"
            && self.wf.shell_quote
            && interpreter.shell_quote_refusal(&text).is_some();
        let shown = if refused {
            self.masker.mask(&text).into_owned()
        } else {
            self.render_as(&text, shell)
        };
        Ok((path.display().to_string(), Some(shown)))
    }

    /// [`Self::render`] for a shell command or directory: `{{.awf.scripts_dir}}` /
    /// `{{.awf.prompts_dir}}` paths are then rewritten to the project's `.awf/` copy when it
    /// exists, as the engine does.
    fn render_shell(&self, template: &str) -> String {
        self.localize(&self.render(template))
    }

    /// [`Self::render_shell`] for a `command:` (values quoted under `shell_quote: true`).
    fn render_command(&self, template: &str) -> String {
        self.localize(&self.render_as(template, true))
    }

    fn localize(&self, text: &str) -> String {
        crate::engine::localize_awf_dirs_in(
            text,
            self.awf_dirs,
            &self.wf.source.dir,
            self.services.host.as_ref(),
        )
    }

    fn state(&self, state: &State, counter: &mut usize) -> Result<PlannedState, AwfError> {
        let command_like = matches!(
            state.kind,
            StateKind::Command(_)
                | StateKind::Agent(_)
                | StateKind::Operation(_)
                | StateKind::CallWorkflow(_)
        );
        let index = if command_like {
            *counter += 1;
            Some(*counter)
        } else {
            None
        };
        let details = match &state.kind {
            StateKind::Command(c) => {
                let (command, script_file, script) = match &c.source {
                    CommandSource::Inline(t) => (Some(self.render_command(t)), None, None),
                    CommandSource::ScriptFile(p) => {
                        let (path, content) = self.external_file(p, &state.name, "script")?;
                        (None, Some(path), content)
                    }
                };
                PlanDetails::Command {
                    command,
                    script_file,
                    script,
                    dir: c.dir.as_deref().map(|d| self.render_shell(d)),
                }
            }
            StateKind::Agent(a) => {
                let (prompt, prompt_file) = match (&a.prompt, &a.prompt_file) {
                    (Some(p), _) => (Some(self.render(p)), None),
                    (None, Some(f)) => {
                        let (path, content) = self.external_file(f, &state.name, "prompt")?;
                        (content, Some(path))
                    }
                    (None, None) => (None, None),
                };
                PlanDetails::Agent {
                    provider: self.render(&a.provider),
                    prompt,
                    prompt_file,
                    mode: a.mode.clone(),
                    options: a
                        .options
                        .iter()
                        .map(|(k, v)| (k.clone(), self.option(k, v, false)))
                        .collect(),
                    mcp_proxy: a
                        .mcp_proxy
                        .as_ref()
                        .filter(|p| p.enable)
                        .map(|p| PlanProxy {
                            server: awf_domain::ports::agent::MCP_PROXY_NAME,
                            intercept_builtins: p.intercept_builtins,
                            plugin_tools: p
                                .plugin_tools
                                .iter()
                                .flat_map(|t| {
                                    t.expose.iter().map(move |op| format!("{}_{op}", t.plugin))
                                })
                                .collect(),
                        }),
                }
            }
            StateKind::Parallel(p) => PlanDetails::Parallel {
                branches: p.branches.clone(),
                strategy: match p.strategy {
                    ParallelStrategy::AllSucceed => "all_succeed",
                    ParallelStrategy::AnySucceed => "any_succeed",
                    ParallelStrategy::BestEffort => "best_effort",
                },
                max_concurrent: p.max_concurrent,
            },
            StateKind::Loop(l) => {
                let max_iterations = match &l.max_iterations {
                    MaxIterations::Static(0) => "default".to_owned(),
                    MaxIterations::Static(n) => n.to_string(),
                    MaxIterations::Dynamic(t) => self.render(t),
                };
                match &l.over {
                    LoopOver::Items(items) => PlanDetails::ForEach {
                        items: self.render(items),
                        body: l.body.clone(),
                        max_iterations,
                        break_when: l.break_when.clone(),
                        on_complete: l.on_complete.clone(),
                    },
                    LoopOver::While(cond) => PlanDetails::While {
                        condition: cond.clone(),
                        body: l.body.clone(),
                        max_iterations,
                        break_when: l.break_when.clone(),
                        on_complete: l.on_complete.clone(),
                    },
                }
            }
            StateKind::Operation(o) => PlanDetails::Operation {
                operation: o.operation.clone(),
                inputs: o
                    .inputs
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            },
            StateKind::CallWorkflow(c) => PlanDetails::CallWorkflow {
                workflow: c.workflow.clone(),
                inputs: c
                    .inputs
                    .iter()
                    .map(|(k, v)| (k.clone(), self.render(v)))
                    .collect(),
            },
            StateKind::Terminal(t) => PlanDetails::Terminal {
                status: match t.status {
                    TerminalStatus::Success => "success",
                    TerminalStatus::Failure => "failure",
                },
                message: t.message.as_deref().map(|m| self.render(m)),
                exit_code: t.exit_code,
            },
        };
        let mut routes: Vec<PlanRoute> = state
            .transitions
            .iter()
            .map(|t| PlanRoute {
                on: if t.when.is_some() { "when" } else { "default" },
                when: t.when.clone(),
                target: t.goto.clone(),
                inline_error: None,
            })
            .collect();
        if let Some(s) = &state.on_success {
            routes.push(PlanRoute {
                on: "on_success",
                when: None,
                target: s.clone(),
                inline_error: None,
            });
        }
        if let Some(f) = &state.on_failure {
            routes.push(match inline_error(self.wf, f) {
                Some(t) => PlanRoute {
                    on: "on_failure",
                    when: None,
                    target: String::new(),
                    inline_error: Some(PlanInlineError {
                        message: t.message.as_deref().map(|m| self.render(m)),
                        exit_code: t.exit_code,
                    }),
                },
                None => PlanRoute {
                    on: "on_failure",
                    when: None,
                    target: f.clone(),
                    inline_error: None,
                },
            });
        }
        Ok(PlannedState {
            index,
            name: state.name.clone(),
            description: state.description.clone(),
            details,
            hooks_pre: self.hooks(&state.hooks.pre),
            hooks_post: self.hooks(&state.hooks.post),
            timeout_ms: state
                .timeout
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            approval: state.approval.as_ref().map(|a| PlanApproval {
                message: self.render(&a.message),
                options: a.options.clone(),
                timeout_ms: a
                    .timeout
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                on_timeout: a.on_timeout.clone(),
            }),
            retry: state.retry.as_ref().map(|r| PlanRetry {
                max_attempts: r.max_attempts,
                backoff: match r.backoff {
                    Backoff::Constant => "constant",
                    Backoff::Linear => "linear",
                    Backoff::Exponential => "exponential",
                },
                initial_delay_ms: u64::try_from(r.initial_delay.as_millis()).unwrap_or(u64::MAX),
                max_delay_ms: r
                    .max_delay
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                multiplier: r.multiplier,
            }),
            capture_max_size: state.capture_max_size,
            capture: state.capture_names.clone(),
            continue_on_error: state.continue_on_error,
            routes,
        })
    }
}

/// The synthesized terminal of an inline `on_failure: {message, status}` (named
/// `__inline_error_<step>` by the loader), when `name` is one.
fn inline_error<'w>(
    wf: &'w Workflow,
    name: &str,
) -> Option<&'w awf_domain::workflow::TerminalState> {
    awf_domain::workflow::inline_error_step(name)?;
    match &wf.state(name)?.kind {
        StateKind::Terminal(t) => Some(t),
        _ => None,
    }
}

/// Removes `.` and `..` components lexically (for display; the file is checked after).
fn normalize(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Whether a template reads `workflow.<field>` other than `Name`, or anything of `context`:
/// values the planning scope cannot know (they would print as empty or zero).
fn needs_runtime(template: &str) -> bool {
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        let after = &rest[open + 2..];
        let close = after.find("}}").unwrap_or(after.len());
        let action = &after[..close];
        for (i, _) in action.match_indices("workflow.") {
            let boundary = action[..i]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            let field: String = action[i + "workflow.".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if boundary && !field.eq_ignore_ascii_case("name") {
                return true;
            }
        }
        for (i, _) in action.match_indices("context.") {
            let boundary = action[..i]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            if boundary {
                return true;
            }
        }
        rest = &after[close..];
    }
    false
}

/// Spec §1.12 path resolution without the pack rules: local-before-global for the global
/// scripts/prompts dirs, `~/` to the home dir, relative paths against the workflow directory.
fn resolve_external(
    path: &str,
    wf_dir: &Path,
    awf_dirs: &BTreeMap<String, String>,
    kind: &str,
    host: &dyn awf_domain::ports::Host,
) -> PathBuf {
    let (dir_key, sub) = if kind == "prompt" {
        ("prompts_dir", "prompts")
    } else {
        ("scripts_dir", "scripts")
    };
    if let Some(global) = awf_dirs.get(dir_key).filter(|g| !g.is_empty())
        && let Some(suffix) = path
            .strip_prefix(global.as_str())
            .and_then(|s| s.strip_prefix('/'))
        && let Some(parent) = wf_dir.parent()
    {
        let local = parent.join(sub).join(suffix);
        if host.is_file(&local) {
            return local;
        }
    }
    if let Some(rest) = path.strip_prefix("~/") {
        if let Some(home) = host.home_dir() {
            let p = home.join(rest);
            if host.is_file(&p) {
                return p;
            }
        }
        return wf_dir.join(rest);
    }
    let p = PathBuf::from(path);
    if p.is_absolute() { p } else { wf_dir.join(p) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use awf_domain::workflow::CommandStep;
    use awf_domain::workflow::TerminalState;
    use awf_domain::workflow::Transition;
    use indexmap::IndexMap;

    fn st(name: &str, kind: StateKind) -> State {
        State::new(name, kind)
    }

    fn cmd(text: &str) -> StateKind {
        StateKind::Command(CommandStep {
            source: CommandSource::Inline(text.into()),
            dir: None,
        })
    }

    fn term() -> StateKind {
        StateKind::Terminal(TerminalState {
            status: TerminalStatus::Success,
            message: None,
            exit_code: None,
        })
    }

    #[test]
    fn bfs_visits_transitions_then_success_then_failure_once_each_terminals_last() {
        let mut a = st("a", cmd("x"));
        a.transitions = vec![Transition {
            when: Some("inputs.x".into()),
            goto: "c".into(),
        }];
        a.on_success = Some("b".into());
        a.on_failure = Some("err".into());
        let mut b = st("b", cmd("y"));
        b.on_success = Some("done".into());
        let mut c = st("c", cmd("z"));
        c.on_success = Some("a".into());
        let mut states = IndexMap::new();
        for s in [
            a,
            b,
            c,
            st("done", term()),
            st(
                "err",
                StateKind::Terminal(TerminalState {
                    status: TerminalStatus::Failure,
                    message: None,
                    exit_code: None,
                }),
            ),
            st("orphan", term()),
        ] {
            states.insert(s.name.clone(), s);
        }
        let wf = Workflow {
            name: "w".into(),
            version: None,
            description: None,
            author: None,
            tags: Vec::new(),
            inputs: Vec::new(),
            env: Vec::new(),
            initial: "a".into(),
            states,
            hooks: Default::default(),
            outputs: Vec::new(),
            shell_quote: false,
            budget: None,
            source: Default::default(),
        };
        // Terminals last: success ones first.
        assert_eq!(bfs_order(&wf), vec!["a", "c", "b", "done", "err"]);
    }

    #[test]
    fn runtime_workflow_and_context_fields_stay_raw() {
        assert!(!needs_runtime(
            "echo {{.workflow.Name}} {{workflow.name}} {{.inputs.x}}"
        ));
        assert!(needs_runtime("took {{workflow.Duration}}s"));
        assert!(needs_runtime("id {{ .workflow.ID }}"));
        assert!(needs_runtime("in {{.context.WorkingDir}}"));
        assert!(!needs_runtime("plain workflow.Duration text"));
        assert!(!needs_runtime("{{.inputs.myworkflow.x}}"));
    }

    #[test]
    fn external_paths_resolve_against_the_workflow_dir() {
        let dirs = BTreeMap::new();
        let host = awf_domain::ports::fakes::FakeHost::default();
        assert_eq!(
            resolve_external("s.sh", Path::new("/w/flows"), &dirs, "script", &host),
            PathBuf::from("/w/flows/s.sh")
        );
        assert_eq!(
            resolve_external("/abs/s.sh", Path::new("/w/flows"), &dirs, "script", &host),
            PathBuf::from("/abs/s.sh")
        );
        // `~/` is the host's home when the file is there, else the workflow's directory.
        assert_eq!(
            resolve_external("~/s.sh", Path::new("/w/flows"), &dirs, "script", &host),
            PathBuf::from("/w/flows/s.sh")
        );
        let host = host.file("/home/user/s.sh", "echo");
        assert_eq!(
            resolve_external("~/s.sh", Path::new("/w/flows"), &dirs, "script", &host),
            PathBuf::from("/home/user/s.sh")
        );
        assert_eq!(
            normalize(Path::new("/w/flows/../scripts/./s.sh")),
            PathBuf::from("/w/scripts/s.sh")
        );
    }
}
