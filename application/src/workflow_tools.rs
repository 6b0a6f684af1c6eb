//! Workflows as MCP tools (`awf mcp-serve --workflows [DIR]`): a [`ToolProvider`] that offers
//! one tool per workflow the repository lists (the discovery of `awf list`), plus
//! `awf_run_status` and `awf_resume`, and runs each call through the [`RunService`] port.
//!
//! Tools:
//! - one per loadable workflow, named by its identifier (what `awf run` takes, the file name
//!   without `.yaml`/`.yml`) sanitised to MCP tool-name characters ([`sanitise`]: every
//!   character outside `[A-Za-z0-9_-]` becomes `_`, at most 64 characters). Names are given in
//!   the byte order of the identifiers; a name already taken (by an earlier workflow, by
//!   `awf_run_status`/`awf_resume`, or by a reserved name such as a built-in tool) gets the
//!   first free suffix `_2`, `_3`, …. The description is the workflow's `description:` (else
//!   `Run the workflow <identifier>`); the input schema is hand-written from its `inputs:`
//!   ([`input_schema`]). Workflows that do not load are left out and reported by
//!   [`WorkflowTools::skipped`].
//! - `awf_run_status {run_id, wait?}`: a run of this server (live or finished) or a recorded
//!   one (state store), by id or unique prefix; `wait: true` waits for a live run to end.
//! - `awf_resume {run_id, from?, inputs?}`: `awf resume` of a recorded interrupted or failed
//!   run, answered like a workflow call.
//!
//! A workflow call: arguments are checked against the declared inputs (an unknown name is an
//! `isError` result), turned into `--input name=value` pairs (strings as they are, numbers
//! and booleans as JSON text, arrays and objects as JSON), and the run is started through
//! [`RunService::start`] without prompts (a missing required input is the start's
//! `USER.INPUT.VALIDATION_FAILED`, answered as `isError` text naming it). The call subscribes
//! to the run's events: each step start and end is a [`ToolProgress`] report (when the client
//! asked for progress); interaction requests cannot be answered over a tool call, so approval
//! gates and breakpoints get [`Answer::Unattended`] (the gate fails with
//! `EXECUTION.APPROVAL.REJECTED`, as `awf run` without a terminal, unless the server was
//! started with `--yes`: then gates are approved without a request), conversation turns and
//! missing inputs get [`Answer::EndOfInput`]. The answer is the `-f json` run result as
//! structured content with a one-line summary as text; `isError` unless the run succeeded.
//! The call's cancellation (MCP `notifications/cancelled`, stdin EOF, SIGTERM) cancels the run
//! through [`RunService::cancel`] and waits for it to wind down (its processes stopped).
//!
//! No I/O here: everything goes through the ports.
//!
//! Reference: shared/spec/mcp.md §9 (MCP 2025-11-25 `tools/list`, `tools/call`, progress);
//! spec/workflow.md §1.2 (inputs).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::event::RunEvent;
use awf_domain::interaction::Answer;
use awf_domain::interaction::RequestKind;
use awf_domain::ports::RunService;
use awf_domain::ports::StateStore;
use awf_domain::ports::ToolProvider;
use awf_domain::ports::WorkflowRepository;
use awf_domain::ports::facade::ResumeFrom;
use awf_domain::ports::facade::ResumeRequest;
use awf_domain::ports::facade::RunRequest;
use awf_domain::ports::service::RunPhase;
use awf_domain::ports::service::SubscriptionItem;
use awf_domain::ports::store::StoredStatus;
use awf_domain::ports::tools::ProgressSink;
use awf_domain::ports::tools::ToolCall;
use awf_domain::ports::tools::ToolCallError;
use awf_domain::ports::tools::ToolOutput;
use awf_domain::ports::tools::ToolProgress;
use awf_domain::ports::tools::ToolSpec;
use awf_domain::run::CancelReason;
use awf_domain::run::RunId;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use awf_domain::workflow::InputDef;
use awf_domain::workflow::InputType;
use serde_json::Map;
use serde_json::Value;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Name of the run status tool.
pub const RUN_STATUS_TOOL: &str = "awf_run_status";
/// Name of the resume tool.
pub const RESUME_TOOL: &str = "awf_resume";
/// Longest tool name given to a workflow, in characters.
pub const MAX_TOOL_NAME: usize = 64;

/// What every run started by a call gets, besides its inputs.
#[derive(Debug, Clone, Default)]
pub struct WorkflowToolsConfig {
    /// Project configuration inputs (lower precedence than the call's arguments).
    pub config_inputs: Map<String, Value>,
    /// Process environment of the runs.
    pub env: Vec<(String, String)>,
    /// Working directory of the runs.
    pub working_dir: PathBuf,
    /// `--yes`: approval gates are approved without asking; otherwise they are refused as
    /// unattended.
    pub auto_approve: bool,
}

/// Why approval gates fail when the server was not started with `--yes`.
pub const UNATTENDED_APPROVAL: &str =
    "an MCP tool call has nobody to ask; start awf mcp-serve with --yes to approve gates";

#[derive(Debug, Clone)]
enum Target {
    Workflow {
        identifier: String,
        inputs: Vec<InputDef>,
    },
    Status,
    Resume,
}

/// The workflows of a repository as tools, run through a [`RunService`].
pub struct WorkflowTools {
    service: Arc<dyn RunService>,
    states: Option<Arc<dyn StateStore>>,
    config: WorkflowToolsConfig,
    tools: Vec<(ToolSpec, Target)>,
    skipped: Vec<(String, String)>,
}

/// `text` as an MCP tool name: each character outside `[A-Za-z0-9_-]` becomes `_`, cut to
/// [`MAX_TOOL_NAME`] characters; empty text gives `workflow`.
pub fn sanitise(text: &str) -> String {
    let s: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_TOOL_NAME)
        .collect();
    if s.is_empty() {
        String::from("workflow")
    } else {
        s
    }
}

/// `base`, or `base_2`, `base_3`, … (cut so the whole stays within [`MAX_TOOL_NAME`]): the
/// first one not in `taken`.
fn free_name(base: &str, taken: &BTreeSet<String>) -> String {
    if !taken.contains(base) {
        return base.to_owned();
    }
    let mut n: usize = 2;
    loop {
        let suffix = format!("_{n}");
        let keep = MAX_TOOL_NAME.saturating_sub(suffix.len());
        let head: String = base.chars().take(keep).collect();
        let name = format!("{head}{suffix}");
        if !taken.contains(&name) {
            return name;
        }
        n += 1;
    }
}

fn json_type(ty: &InputType) -> &'static str {
    match ty {
        InputType::Integer => "integer",
        InputType::Number => "number",
        InputType::Boolean => "boolean",
        InputType::Array => "array",
        InputType::Untyped | InputType::String | InputType::Unknown(_) => "string",
    }
}

/// A YAML value as a value of JSON type `ty`, when it is one (or is text that parses as one).
fn typed_value(ty: &str, v: &Value) -> Option<Value> {
    match (ty, v) {
        ("string", Value::String(_)) => Some(v.clone()),
        ("string", Value::Number(_) | Value::Bool(_)) => Some(Value::String(v.to_string())),
        ("integer", Value::Number(n)) if n.is_i64() || n.is_u64() => Some(v.clone()),
        ("integer", Value::String(s)) => s.trim().parse::<i64>().ok().map(Value::from),
        ("number", Value::Number(_)) => Some(v.clone()),
        ("number", Value::String(s)) => s
            .trim()
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number),
        ("boolean", Value::Bool(_)) => Some(v.clone()),
        ("boolean", Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "1" => Some(Value::Bool(true)),
            "false" | "no" | "0" => Some(Value::Bool(false)),
            _ => None,
        },
        ("array", Value::Array(_)) => Some(v.clone()),
        _ => None,
    }
}

/// The JSON schema of a workflow's inputs: `{"type": "object", "properties": {name: {type,
/// description?, enum?, default?, pattern?, minimum?, maximum?, items?}}, "required": [...]}`.
/// Types: `string` (also untyped inputs), `integer`, `number`, `boolean`, `array` (of
/// strings). `required` lists the required inputs without a default. An enum or default
/// that does not fit the type is left out.
pub fn input_schema(inputs: &[InputDef]) -> Value {
    let mut properties = Map::new();
    let mut required: Vec<Value> = Vec::new();
    for def in inputs {
        let ty = json_type(&def.ty);
        let mut p = Map::new();
        p.insert("type".into(), Value::String(ty.into()));
        if let Some(d) = &def.description {
            p.insert("description".into(), Value::String(d.clone()));
        }
        if ty == "array" {
            p.insert("items".into(), json!({"type": "string"}));
        }
        let v = &def.validation;
        if !v.enum_values.is_empty() && ty != "array" && ty != "boolean" {
            let values: Option<Vec<Value>> = v
                .enum_values
                .iter()
                .map(|e| typed_value(ty, &Value::String(e.clone())))
                .collect();
            if let Some(values) = values {
                p.insert("enum".into(), Value::Array(values));
            }
        }
        if let Some(pattern) = &v.pattern
            && ty == "string"
        {
            p.insert("pattern".into(), Value::String(pattern.clone()));
        }
        if ty == "integer" || ty == "number" {
            for (key, bound) in [("minimum", v.min), ("maximum", v.max)] {
                // A whole bound is written as an integer (`1`, not `1.0`: an integer input's
                // schema said `"minimum": 1.0`).
                let n = bound.and_then(|b| {
                    if b.fract() == 0.0 && b.abs() < 9.0e15 {
                        Some(serde_json::Number::from(b as i64))
                    } else {
                        serde_json::Number::from_f64(b)
                    }
                });
                if let Some(n) = n {
                    p.insert(key.into(), Value::Number(n));
                }
            }
        }
        // A secret's default is not shown (secrets are `***` everywhere text leaves awf,
        // and `***` would read as the default value).
        if !awf_domain::mask::is_secret_name(&def.name)
            && let Some(d) = def.default.as_ref().and_then(|d| typed_value(ty, d))
        {
            p.insert("default".into(), d);
        }
        if def.required && def.default.is_none() {
            required.push(Value::String(def.name.clone()));
        }
        properties.insert(def.name.clone(), Value::Object(p));
    }
    let mut schema = Map::new();
    schema.insert("type".into(), Value::String("object".into()));
    schema.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        schema.insert("required".into(), Value::Array(required));
    }
    Value::Object(schema)
}

/// What a JSON value is, for a message: `a string`, `an integer`, ….
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The arguments whose JSON type breaks the `inputSchema` the tool publishes
/// ([`input_schema`]: `"count": "3"` for an integer, `"flags": "x"` for an array of strings),
/// each as `inputs.<name>: expected <type>, not <what it is>`, joined with `; `; `None` when
/// every argument fits (a `null` one is not given).
fn schema_mismatches(inputs: &[InputDef], args: &Map<String, Value>) -> Option<String> {
    let bad: Vec<String> = inputs
        .iter()
        .filter_map(|d| {
            let v = args.get(&d.name).filter(|v| !v.is_null())?;
            let (fits, expected) = match json_type(&d.ty) {
                "integer" => (v.as_f64().is_some_and(|f| f.fract() == 0.0), "an integer"),
                "number" => (v.is_number(), "a number"),
                "boolean" => (v.is_boolean(), "a boolean"),
                "array" => (
                    v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
                    "an array of strings",
                ),
                _ => (v.is_string(), "a string"),
            };
            if fits {
                return None;
            }
            let what = match v.as_array() {
                Some(a) if expected == "an array of strings" => a
                    .iter()
                    .find(|i| !i.is_string())
                    .map_or("an array", |i| match i {
                        Value::Object(_) => "an array holding an object",
                        Value::Array(_) => "an array holding an array",
                        _ => "an array holding a non-string",
                    })
                    .to_owned(),
                _ => match v {
                    Value::String(t) if t.chars().count() <= 40 => format!("the string {v}"),
                    Value::Number(_) | Value::Bool(_) => format!("{} ({v})", json_kind(v)),
                    _ => json_kind(v).to_owned(),
                },
            };
            Some(format!(
                "inputs.{}: expected {expected}, not {what}",
                d.name
            ))
        })
        .collect();
    (!bad.is_empty()).then(|| bad.join("; "))
}

/// An argument value as the text of `--input name=value`.
fn input_text(v: &Value) -> String {
    awf_domain::workflow::json_input_text(v)
}

/// `out` with [`crate::inputs::INPUTS_HELP_HINT`] (worded for the command line, naming no
/// workflow) said as `said`, in its text and in its result's `error.hints`.
fn name_inputs_help(mut out: ToolOutput, said: &str) -> ToolOutput {
    let placeholder = crate::inputs::INPUTS_HELP_HINT;
    if out.text.contains(placeholder) {
        out.text = out.text.replace(placeholder, said);
    }
    if let Some(hints) = out
        .structured
        .as_mut()
        .and_then(|v| v.get_mut("error"))
        .and_then(|e| e.get_mut("hints"))
        .and_then(Value::as_array_mut)
    {
        for h in hints.iter_mut() {
            if h.as_str() == Some(placeholder) {
                *h = Value::String(said.to_owned());
            }
        }
    }
    out
}

/// `[CODE] message` and its hints, one per line.
fn error_text(e: &AwfError) -> String {
    let mut text = format!("[{}] {}", e.code(), e.message());
    for h in e.hints() {
        text.push_str("\nHint: ");
        text.push_str(h);
    }
    text
}

/// The one-line summary of a run result.
fn summary(result: &RunResult) -> String {
    let id = result.run_id.as_ref().map_or("-", |r| r.0.as_str());
    let mut text = match result.status {
        RunStatus::Success => match &result.message {
            Some(m) => format!("Workflow {} completed: {m}", result.workflow),
            None => format!("Workflow {} completed.", result.workflow),
        },
        RunStatus::Failure => format!("Workflow {} failed", result.workflow),
        RunStatus::Cancelled => format!("Workflow {} cancelled", result.workflow),
    };
    if result.status != RunStatus::Success {
        match &result.error {
            Some(e) => text.push_str(&format!(": [{}] {}", e.code, e.message)),
            None => text.push('.'),
        }
    }
    text.push_str(&format!(
        " (run {id}, exit code {}, {} ms)",
        result.exit_code, result.duration_ms
    ));
    text
}

fn result_output(result: &RunResult) -> ToolOutput {
    ToolOutput {
        text: summary(result),
        is_error: result.status != RunStatus::Success,
        structured: serde_json::to_value(result).ok(),
    }
}

fn string_arg(args: &Map<String, Value>, key: &str) -> Result<Option<String>, ToolOutput> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(ToolOutput::error(format!(
            "`{key}` must be a string, not {other}"
        ))),
    }
}

fn unknown_args(args: &Map<String, Value>, known: &[&str]) -> Option<ToolOutput> {
    let unknown: Vec<&str> = args
        .keys()
        .map(String::as_str)
        .filter(|k| !known.contains(k))
        .collect();
    if unknown.is_empty() {
        return None;
    }
    // Each with the argument it is a typo of, as the CLI says of an undeclared input.
    Some(ToolOutput::error(format!(
        "unknown argument{} {}; this tool takes: {}",
        if unknown.len() == 1 { "" } else { "s" },
        unknown
            .iter()
            .map(|k| {
                match awf_domain::validate::closest(k, known.iter().copied())
                    .and_then(|c| awf_domain::validate::did_you_mean(&[c]))
                {
                    Some(hint) => format!("`{k}` ({hint})"),
                    None => format!("`{k}`"),
                }
            })
            .collect::<Vec<_>>()
            .join(", "),
        if known.is_empty() {
            String::from("no arguments")
        } else {
            known.join(", ")
        }
    )))
}

impl WorkflowTools {
    /// The tools of every workflow `repository` lists (those that do not load are skipped),
    /// then `awf_run_status` and `awf_resume`; `reserved` names (the tools served beside
    /// these) are never given to a workflow. `states` reads recorded runs for
    /// `awf_run_status` and resolves run id prefixes (`None`: only this server's runs).
    ///
    /// # Errors
    /// The repository's `SYSTEM.IO.READ_FAILED` when a workflow directory cannot be listed.
    pub fn new(
        service: Arc<dyn RunService>,
        repository: &dyn WorkflowRepository,
        states: Option<Arc<dyn StateStore>>,
        config: WorkflowToolsConfig,
        reserved: &[String],
    ) -> Result<Self, AwfError> {
        Self::new_checked(service, repository, states, config, reserved, &|e| {
            e.error.clone()
        })
    }

    /// [`WorkflowTools::new`], leaving out (in [`WorkflowTools::skipped`]) every workflow
    /// for which `broken` says why it is broken: `awf validate`'s first error and count, as
    /// every list of workflows shows it ([`crate::validation::broken_summary`]), so a tool is
    /// never listed that could only fail.
    ///
    /// # Errors
    /// As [`WorkflowTools::new`].
    pub fn new_checked(
        service: Arc<dyn RunService>,
        repository: &dyn WorkflowRepository,
        states: Option<Arc<dyn StateStore>>,
        config: WorkflowToolsConfig,
        reserved: &[String],
        broken: &dyn Fn(&awf_domain::ports::repository::WorkflowEntry) -> Option<String>,
    ) -> Result<Self, AwfError> {
        let mut entries = repository.list()?;
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let mut taken: BTreeSet<String> = reserved.iter().cloned().collect();
        taken.insert(RUN_STATUS_TOOL.into());
        taken.insert(RESUME_TOOL.into());
        let mut tools = Vec::new();
        let mut skipped = Vec::new();
        for entry in entries {
            if let Some(why) = broken(&entry).or_else(|| entry.error.clone()) {
                skipped.push((entry.name.clone(), why));
                continue;
            }
            let loaded = match repository.load(&entry.name, None) {
                Ok(l) => l,
                Err(e) => {
                    skipped.push((entry.name.clone(), error_text(&e)));
                    continue;
                }
            };
            let wf = loaded.workflow;
            let name = free_name(&sanitise(&entry.name), &taken);
            taken.insert(name.clone());
            let description = wf
                .description
                .clone()
                .filter(|d| !d.trim().is_empty())
                .unwrap_or_else(|| format!("Run the workflow {}", entry.name));
            tools.push((
                ToolSpec {
                    name,
                    description,
                    input_schema: input_schema(&wf.inputs),
                },
                Target::Workflow {
                    identifier: entry.name.clone(),
                    inputs: wf.inputs,
                },
            ));
        }
        tools.push((
            ToolSpec {
                name: RUN_STATUS_TOOL.into(),
                description: "Status and result of an awf run, by run id (or a unique prefix): a run this server started, or a recorded one. With wait: true, waits for a live run to end.".into(),
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "run_id": {"type": "string", "description": "The run id, or a unique prefix of it"},
                        "wait": {"type": "boolean", "description": "Wait for a live run to end", "default": false}
                    },
                    "required": ["run_id"]
                }),
            },
            Target::Status,
        ));
        tools.push((
            ToolSpec {
                name: RESUME_TOOL.into(),
                description: "Resume an interrupted or failed awf run with the same run id (as `awf resume`), without re-running the states that completed; answers with the run result.".into(),
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "run_id": {"type": "string", "description": "The run id, or a unique prefix of it"},
                        "from": {"type": "string", "description": "Where to restart: current, previous, or a state name", "default": "current"},
                        "inputs": {
                            "type": "object",
                            "description": "Input overrides (secret inputs are not stored and must be given again)",
                            "additionalProperties": {"type": "string"}
                        }
                    },
                    "required": ["run_id"]
                }),
            },
            Target::Resume,
        ));
        Ok(Self {
            service,
            states,
            config,
            tools,
            skipped,
        })
    }

    /// Workflows left out, with why (`[CODE] message`: the `broken` summary given to
    /// [`WorkflowTools::new_checked`]), in identifier order.
    pub fn skipped(&self) -> &[(String, String)] {
        &self.skipped
    }

    /// The last position of `run_id`'s log as it is now (0 when there is none): what a run
    /// that is not live has recorded, read without waiting.
    fn logged_positions(&self, run_id: &RunId) -> u64 {
        use futures::FutureExt;
        let Ok(mut sub) = self.service.subscribe(run_id, 1) else {
            return 0;
        };
        let mut last = 0;
        while let Some(Some(item)) = sub.next().now_or_never() {
            match item {
                SubscriptionItem::Event { position, .. } => last = position,
                SubscriptionItem::Lagged { resume_seq } => last = resume_seq.saturating_sub(1),
            }
        }
        last
    }

    /// Follows run `run_id` to its end: reports progress, answers its requests as unattended,
    /// cancels it when `cancel` fires, and gives its result.
    ///
    /// `from` is the first log position to follow: 1 for a new run, the position after the
    /// earlier attempts for a resumed one (whose log holds them first).
    async fn follow(
        &self,
        run_id: &RunId,
        from: u64,
        cancel: &CancellationToken,
        progress: Option<&ProgressSink>,
    ) -> ToolOutput {
        let mut events = match self.service.subscribe(run_id, from) {
            Ok(s) => s,
            Err(e) => return ToolOutput::error(error_text(&e)),
        };
        let mut count: f64 = 0.0;
        let mut cancelled = false;
        loop {
            let item = tokio::select! {
                item = events.next() => item,
                () = cancel.cancelled(), if !cancelled => {
                    cancelled = true;
                    tracing::debug!(target: "awf::mcp", run_id = %run_id.0, "tool call cancelled: cancelling the run");
                    let _ = self.service.cancel(run_id, CancelReason::Requested);
                    continue;
                }
            };
            let Some(item) = item else { break };
            let SubscriptionItem::Event { envelope, .. } = item else {
                continue;
            };
            let message = match &envelope.event {
                // First: the run id, for `awf_run_status` while the call is still running.
                RunEvent::RunStarted { .. } if envelope.parent_run_id.is_none() => {
                    Some(format!("run {} started", envelope.run_id.0))
                }
                RunEvent::StepStarted { .. } => Some(format!("{} started", envelope.path)),
                RunEvent::StepFinished { state, .. } => Some(format!(
                    "{} {}",
                    envelope.path,
                    serde_json::to_value(state.status)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_else(|| String::from("finished"))
                )),
                RunEvent::InteractionRequired { request } => {
                    let answer = match &request.kind {
                        RequestKind::Approval { .. } | RequestKind::Breakpoint { .. } => {
                            Answer::Unattended(UNATTENDED_APPROVAL.into())
                        }
                        RequestKind::MissingInput { .. } | RequestKind::ConversationTurn { .. } => {
                            Answer::EndOfInput
                        }
                    };
                    if let Err(e) = self.service.respond(&request.request_id, answer) {
                        tracing::debug!(target: "awf::mcp", error = %e, "request not answered");
                    }
                    None
                }
                _ => None,
            };
            if let (Some(p), Some(message)) = (progress, message) {
                count += 1.0;
                p(ToolProgress {
                    progress: count,
                    total: None,
                    message: Some(message),
                });
            }
        }
        match self.service.wait(run_id).await {
            Ok(result) => result_output(&result),
            Err(e) => ToolOutput::error(error_text(&e)),
        }
    }

    async fn call_workflow(
        &self,
        identifier: &str,
        inputs: &[InputDef],
        args: &Map<String, Value>,
        cancel: &CancellationToken,
        progress: Option<&ProgressSink>,
    ) -> ToolOutput {
        let known: Vec<&str> = inputs.iter().map(|d| d.name.as_str()).collect();
        if let Some(out) = unknown_args(args, &known) {
            return out;
        }
        if let Err(e) = awf_domain::validate::refuse_structured_text_inputs(inputs, args) {
            return ToolOutput::error(error_text(&e));
        }
        if let Some(bad) = schema_mismatches(inputs, args) {
            let e = AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!("input validation failed: {bad}"),
            )
            .with_hint(self.inputs_help(identifier));
            return ToolOutput::error(error_text(&e));
        }
        let given: Vec<(String, String)> = args
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (k.clone(), input_text(v)))
            .collect();
        let missing: Vec<&InputDef> = inputs
            .iter()
            .filter(|d| {
                d.required
                    && d.default.is_none()
                    && self
                        .config
                        .config_inputs
                        .get(&d.name)
                        .is_none_or(Value::is_null)
                    && !given.iter().any(|(k, _)| *k == d.name)
            })
            .collect();
        if !missing.is_empty() {
            let names: Vec<&str> = missing.iter().map(|d| d.name.as_str()).collect();
            let e = AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!(
                    "missing required input{}: {}",
                    if names.len() == 1 { "" } else { "s" },
                    names.join(", ")
                ),
            )
            .with_hint(format!(
                "pass {} as argument{} of the tool call ({})",
                if names.len() == 1 { "it" } else { "them" },
                if names.len() == 1 { "" } else { "s" },
                missing
                    .iter()
                    .map(|d| format!("`{}`: {}", d.name, json_type(&d.ty)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            return ToolOutput::error(error_text(&e));
        }
        let request = RunRequest {
            identifier: identifier.to_owned(),
            inputs: given,
            config_inputs: self.config.config_inputs.clone(),
            env: self.config.env.clone(),
            working_dir: self.config.working_dir.clone(),
            prompt_missing_inputs: false,
            auto_approve: self.config.auto_approve,
            refuse_undeclared_inputs: true,
            ..RunRequest::default()
        };
        let run_id = match self.service.start(request).await {
            Ok(id) => id,
            Err(e) => return ToolOutput::error(error_text(&e)),
        };
        self.follow(&run_id, 1, cancel, progress).await
    }

    /// Where the rules of workflow `identifier`'s inputs are, for an MCP client: its tool's
    /// `inputSchema` (new user: the hint named `awf run <workflow> --help`).
    fn inputs_help(&self, identifier: &str) -> String {
        let tool = self.tools.iter().find_map(|(spec, target)| match target {
            Target::Workflow { identifier: id, .. } if id == identifier => Some(&spec.name),
            Target::Workflow { .. } | Target::Status | Target::Resume => None,
        });
        match tool {
            Some(name) => format!(
                "the `{name}` tool's inputSchema (tools/list) lists each input of workflow \
                 {identifier} with its type and rules"
            ),
            None => format!(
                "the inputSchema of workflow {identifier}'s tool (tools/list) lists each input \
                 with its type and rules"
            ),
        }
    }

    /// A run id or a unique prefix of one, among this server's runs and the recorded ones.
    fn resolve(&self, query: &str) -> Result<RunId, AwfError> {
        let mut ids: Vec<String> = self
            .service
            .list()?
            .into_iter()
            .map(|v| v.run_id.0)
            .collect();
        if let Some(states) = &self.states
            && let Ok(snaps) = states.list()
        {
            ids.extend(snaps.into_iter().map(|s| s.run_id));
        }
        crate::runs::match_run_id(query, ids.iter().map(String::as_str)).map(RunId)
    }

    async fn run_status(&self, args: &Map<String, Value>) -> ToolOutput {
        if let Some(out) = unknown_args(args, &["run_id", "wait"]) {
            return out;
        }
        let query = match string_arg(args, "run_id") {
            Ok(Some(q)) => q,
            Ok(None) => return ToolOutput::error("missing required argument `run_id`"),
            Err(out) => return out,
        };
        let wait = match args.get("wait") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return ToolOutput::error(format!("`wait` must be true or false, not {other}"));
            }
        };
        let run_id = match self.resolve(&query) {
            Ok(id) => id,
            Err(e) => return ToolOutput::error(error_text(&e)),
        };
        let view = match self.service.get(&run_id) {
            Ok(v) => v,
            Err(e) => return ToolOutput::error(error_text(&e)),
        };
        let result = match view.phase {
            RunPhase::Live if !wait => None,
            RunPhase::Live | RunPhase::Finished => self.service.wait(&run_id).await.ok(),
            // The terminal's message is kept beside the state file, not in it.
            RunPhase::Recorded => self.states.as_ref().and_then(|s| {
                let snap = s.load(&run_id.0).ok()?;
                let mut result = crate::runs::result_of(&snap);
                if result.status == RunStatus::Success {
                    result.message = s.terminal_message(&run_id.0);
                }
                Some(result)
            }),
        };
        let view = self.service.get(&run_id).unwrap_or(view);
        let status = serde_json::to_value(view.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        // A run still running (here, or recorded by another live process) has no result yet.
        let ended = view.phase != RunPhase::Live && view.status != StoredStatus::Running;
        let text = match &result {
            Some(r) if ended => summary(r),
            _ => format!(
                "Run {} of {}: {status}{}",
                run_id.0,
                view.workflow,
                view.current_state
                    .as_deref()
                    .map(|s| format!(", at state {s}"))
                    .unwrap_or_default()
            ),
        };
        let mut structured = serde_json::to_value(&view).unwrap_or(Value::Null);
        if let Value::Object(m) = &mut structured {
            m.insert(
                "result".into(),
                result
                    .as_ref()
                    .filter(|_| ended)
                    .and_then(|r| serde_json::to_value(r).ok())
                    .unwrap_or(Value::Null),
            );
        }
        ToolOutput {
            text,
            is_error: false,
            structured: Some(structured),
        }
    }

    async fn resume(
        &self,
        args: &Map<String, Value>,
        cancel: &CancellationToken,
        progress: Option<&ProgressSink>,
    ) -> ToolOutput {
        if let Some(out) = unknown_args(args, &["run_id", "from", "inputs"]) {
            return out;
        }
        let query = match string_arg(args, "run_id") {
            Ok(Some(q)) => q,
            Ok(None) => return ToolOutput::error("missing required argument `run_id`"),
            Err(out) => return out,
        };
        let from = match string_arg(args, "from") {
            Ok(None) => ResumeFrom::Current,
            Ok(Some(f)) => match f.trim() {
                "" | "current" => ResumeFrom::Current,
                "previous" => ResumeFrom::Previous,
                s => ResumeFrom::Step(s.to_owned()),
            },
            Err(out) => return out,
        };
        let inputs = match args.get("inputs") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(m)) => m.iter().map(|(k, v)| (k.clone(), input_text(v))).collect(),
            Some(other) => {
                return ToolOutput::error(format!(
                    "`inputs` must be an object of name: value, not {other}"
                ));
            }
        };
        let run_id = match self.resolve(&query) {
            Ok(id) => id,
            Err(e) => return ToolOutput::error(error_text(&e)),
        };
        // The inputs are those of the resumed run's workflow: its tool says their rules.
        let said = self
            .states
            .as_ref()
            .and_then(|s| s.load(&run_id.0).ok())
            .map(|snap| self.inputs_help(&snap.workflow));
        let named = |out: ToolOutput| match &said {
            Some(h) => name_inputs_help(out, h),
            None => out,
        };
        let request = ResumeRequest {
            run_id: run_id.0.clone(),
            from,
            inputs,
            config_inputs: self.config.config_inputs.clone(),
            env: self.config.env.clone(),
            working_dir: self.config.working_dir.clone(),
            lock_held: false,
            auto_approve: self.config.auto_approve,
            mcp_servers: Vec::new(),
            fs_delegate: None,
            shown_as: None,
            // As the run tool refuses them.
            refuse_undeclared_inputs: true,
            ..ResumeRequest::default()
        };
        // The log of a resumed run starts with its earlier attempts: follow only this one.
        let prior = self.logged_positions(&run_id);
        let id = match self.service.resume(request).await {
            Ok(id) => id,
            Err(e) => return named(ToolOutput::error(error_text(&e))),
        };
        named(self.follow(&id, prior + 1, cancel, progress).await)
    }
}

#[async_trait::async_trait]
impl ToolProvider for WorkflowTools {
    fn tools(&self) -> Vec<ToolSpec> {
        self.tools.iter().map(|(s, _)| s.clone()).collect()
    }

    async fn call(
        &self,
        call: ToolCall,
        cancel: CancellationToken,
    ) -> Result<ToolOutput, ToolCallError> {
        self.call_with_progress(call, cancel, None).await
    }

    async fn call_with_progress(
        &self,
        call: ToolCall,
        cancel: CancellationToken,
        progress: Option<ProgressSink>,
    ) -> Result<ToolOutput, ToolCallError> {
        let Some((_, target)) = self.tools.iter().find(|(s, _)| s.name == call.name) else {
            return Err(ToolCallError::UnknownTool(call.name));
        };
        let args = &call.arguments;
        Ok(match target {
            Target::Workflow { identifier, inputs } => {
                let out = self
                    .call_workflow(identifier, inputs, args, &cancel, progress.as_ref())
                    .await;
                name_inputs_help(out, &self.inputs_help(identifier))
            }
            Target::Status => self.run_status(args).await,
            Target::Resume => self.resume(args, &cancel, progress.as_ref()).await,
        })
    }
}

#[cfg(test)]
#[path = "workflow_tools_tests.rs"]
mod tests;
