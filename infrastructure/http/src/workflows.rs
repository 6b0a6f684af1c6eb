//! `/api/workflows…`: list, detail (a snake_case DTO the web page draws its graph from),
//! validate, run. Source: shared/spec/http-ops.md §1.2, §1.3.

use std::collections::BTreeMap;
use std::sync::Arc;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::facade::RunRequest;
use awf_domain::ports::repository::Severity;
use awf_domain::workflow::InputType;
use awf_domain::workflow::StateKind;
use awf_domain::workflow::TerminalStatus;
use awf_domain::workflow::Workflow;
use axum::Json;
use axum::extract::Path;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::Response;
use serde::Deserialize;
use serde::Serialize;
use serde_json::Map;
use serde_json::Value;
use utoipa::ToSchema;

use crate::Envelope;
use crate::HttpConfig;
use crate::problem::Finding;
use crate::problem::JsonBody;
use crate::problem::Problem;
use crate::problem::ProblemDoc;

/// One workflow of the list (AWF (Go)'s `WorkflowSummary`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WorkflowSummary {
    /// Identifier (file name without `.yaml`).
    pub name: String,
    /// Where it was found: `env` (`$AWF_WORKFLOWS_PATH`), `local` (`.awf/workflows`) or
    /// `global` (the config dir); the `{scope}` of its routes.
    pub scope: String,
    /// The same identifier (AWF (Go) repeats it here).
    pub workflow: String,
    /// `version:`, empty when none.
    pub version: String,
    /// `description:`, empty when none.
    pub description: String,
    /// Why the workflow cannot run (`[CODE] message`, the first error, as `awf list` marks it
    /// BROKEN): the file does not load or does not pass validation; absent when it is valid
    /// (`POST …/validate` lists every problem).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `GET /api/workflows`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WorkflowList {
    /// Every workflow, first source wins per name.
    pub workflows: Vec<WorkflowSummary>,
}

/// One declared input.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct InputInfo {
    /// Input name (`{{.inputs.NAME}}`).
    pub name: String,
    /// `string`, `integer`, `number`, `boolean`, `array`, `any` (no `type:`), or what the
    /// file says for an unknown type.
    #[serde(rename = "type")]
    pub ty: String,
    /// Whether a run needs a value (no default).
    pub required: bool,
    /// The default value, when declared (any JSON value). A secret input's (`secret`)
    /// default is never sent: a non-empty one is given as `"***"` (as `awf run <workflow>
    /// --help` shows it), an empty one as `""`. `***` is not a value to send back: leave the
    /// input out of the run request and the server applies the real default.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub default: Value,
    /// `true` when the input is secret (its name holds `SECRET`, `API_KEY`, `PASSWORD`,
    /// `TOKEN`, `CREDENTIAL` or `PRIVATE_KEY`, any case): its `default` is masked and its
    /// values are `***` in output, events and records. Absent otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub secret: bool,
    /// `description:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `validation.enum`: the allowed values (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enum_values: Vec<String>,
    /// `validation.pattern`: a regular expression a string value must match (unanchored);
    /// absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// `validation.min`: the least value an `integer` or `number` input takes; absent when
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<f64>)]
    pub min: Option<serde_json::Number>,
    /// `validation.max`: the greatest value an `integer` or `number` input takes; absent
    /// when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<f64>)]
    pub max: Option<serde_json::Number>,
    /// `validation.file_exists`: `true` when the value must name an existing file (a
    /// relative path is taken from the server's working directory); absent otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub file_exists: bool,
    /// `validation.file_extension`: the extensions the value must end with (`.go`; empty:
    /// any); absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub file_extension: Vec<String>,
}

/// A bound of `validation.min`/`max` as JSON: an integer when it is whole (`1`, not `1.0`).
fn bound(v: Option<f64>) -> Option<serde_json::Number> {
    let v = v?;
    // Whole and within i64: said as an integer (the cast is exact then).
    #[allow(clippy::cast_possible_truncation)]
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        return Some(serde_json::Number::from(v as i64));
    }
    serde_json::Number::from_f64(v)
}

/// How an edge of the state machine is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EdgeKind {
    /// `on_success`.
    Success,
    /// `on_failure`.
    Failure,
    /// A `transitions:` entry (its `when`; none: the default route).
    Transition,
    /// A branch of a `parallel` state.
    Branch,
    /// A state of a loop's body.
    Body,
    /// A loop's `on_complete`.
    Complete,
}

/// One edge leaving a state.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Edge {
    /// Target state, by the name users see (the inline `on_failure` terminal of step `a`:
    /// `a's on_failure`).
    pub to: String,
    /// How it is taken.
    pub kind: EdgeKind,
    /// The condition (`transitions:` only; absent: unconditional).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// `true` when `to` names no state of the workflow (a broken workflow; the detail's
    /// `errors` says so); absent otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub missing: bool,
}

/// One state of the workflow.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct StateInfo {
    /// The state's key under `states:`; the terminal of step `a`'s inline `on_failure`
    /// (`on_failure: {message, status}`) is `a's on_failure`, as the run's events name it.
    pub name: String,
    /// Its kind: `command`, `agent`, `parallel`, `for_each`, `while`, `operation`,
    /// `call_workflow`, `terminal`; in a workflow with errors, a `type:` that names no step
    /// type as written (`stepp`; empty when the state has none), its edges not shown, with
    /// the error in the detail's `errors`.
    #[serde(rename = "type")]
    pub ty: String,
    /// `description:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether the run ends here.
    pub terminal: bool,
    /// For a terminal: `success` or `failure`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminal_status: Option<String>,
    /// Whether an approval gate is asked before it runs.
    pub approval: bool,
    /// Every edge leaving it, in the order the engine considers them: transitions, branches
    /// or loop body, then `on_success`, `on_failure`.
    pub next: Vec<Edge>,
}

/// `GET /api/workflows/{scope}/{name}`: a workflow, snake_case (no absolute paths).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WorkflowDetail {
    /// `name:` of the file.
    pub name: String,
    /// The identifier it is run by.
    pub workflow: String,
    /// `description:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `version:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Declared inputs, in file order.
    pub inputs: Vec<InputInfo>,
    /// The first state.
    pub initial: String,
    /// Every state, in file order.
    pub states: Vec<StateInfo>,
    /// Why it cannot run (`path: message`, every error `POST …/validate` lists); empty for a
    /// valid workflow. `POST …/run` of a workflow with errors is refused (422).
    #[serde(default)]
    pub errors: Vec<String>,
}

/// `POST /api/workflows/{scope}/{name}/validate` of a valid workflow.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ValidationResult {
    /// Always empty here (an invalid workflow is answered 422 with its errors).
    pub errors: Vec<String>,
    /// Warnings (`path: message`), e.g. unknown keys.
    pub warnings: Vec<String>,
    /// The warnings, one per entry of `warnings` (in its order) with where each is in the
    /// workflow file, as `awf validate` says it; absent without warnings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<Finding>,
}

/// `POST …/run` request.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunBody {
    /// Input values: strings as they are, other JSON values as their JSON text.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub inputs: Option<Map<String, Value>>,
    /// Ask for each missing required input as a pending `missing_input` request (answered
    /// with `POST /api/executions/{id}/respond`) instead of refusing the run with 422.
    #[serde(default)]
    pub ask_missing_inputs: bool,
    /// Stop before each state and wait for a decision, as `awf run --interactive`: each
    /// stop is a pending `breakpoint` request (with the state's `preview` and the decisions
    /// in `options`), answered with `POST /api/executions/{id}/respond` and a `decision`.
    #[serde(default)]
    pub interactive: bool,
    /// Stop only before these states (`awf run --breakpoint`); implies `interactive`. A
    /// name the workflow does not have is accepted with a warning (the run never stops
    /// there), as the terminal does.
    #[serde(default)]
    pub breakpoints: Option<Vec<String>>,
}

/// `POST …/run` and `POST /api/executions/{id}/resume` answer.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunAccepted {
    /// The run id (`GET /api/executions/{id}`).
    pub execution_id: String,
    /// Always `accepted`.
    pub status: String,
    /// What `awf run` warns about these inputs (`input 'x' is not declared by workflow
    /// 'w'`) and breakpoints (a state the workflow does not have); absent when none. The run
    /// starts all the same.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// One warning per distinct breakpoint naming no state of `wf` (the run never stops there;
/// a name given many times is warned about once), as `awf run --breakpoint` warns, with the
/// closest state name when one is close; an empty (or blank) name is warned about too
/// (breaker: `"breakpoints": [""]` was dropped without a word).
pub fn unknown_breakpoints(wf: &Workflow, breakpoints: &[String]) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for b in breakpoints {
        if wf.states.contains_key(b.as_str()) || !seen.insert(b.trim()) {
            continue;
        }
        if b.trim().is_empty() {
            out.push(format!(
                "breakpoint '': an empty name names no state of workflow '{}'; the run never stops there",
                wf.name
            ));
            continue;
        }
        let mut msg = format!(
            "breakpoint '{b}': workflow '{}' has no such state; the run never stops there",
            wf.name
        );
        if let Some(c) = awf_domain::validate::closest(b, wf.states.keys().map(String::as_str)) {
            msg.push_str(&format!(" (did you mean '{c}'?)"));
        }
        out.push(msg);
    }
    out
}

/// The warnings `awf run` prints for inputs `wf` does not declare (the same text): one per
/// undeclared name, with the closest declared name when one is close; none when the
/// workflow declares no inputs (as the CLI).
pub fn undeclared_inputs(wf: &Workflow, given: &[(String, String)]) -> Vec<String> {
    let declared: Vec<&str> = wf.inputs.iter().map(|i| i.name.as_str()).collect();
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for (k, _) in given {
        let k = k.trim();
        if declared.is_empty() || declared.contains(&k) || !seen.insert(k.to_owned()) {
            continue;
        }
        let mut msg = format!("input '{k}' is not declared by workflow '{}'", wf.name);
        if let Some(c) = awf_domain::validate::closest(k, declared.iter().copied()) {
            msg.push_str(&format!(" (did you mean '{c}'?)"));
        }
        out.push(msg);
    }
    out
}

/// The identifier a `{scope}/{name}` path names (http-ops.md §1.2 scope grammar): the bare
/// name for `local`, `global` and `env`, else `scope/name` (a workflow pack).
pub fn identifier(scope: &str, name: &str) -> String {
    match scope {
        "local" | "global" | "env" => name.to_owned(),
        _ => format!("{scope}/{name}"),
    }
}

/// The identifier a `{scope}/{name}` path names, checked: `scope` is `local`, `global` or
/// `env` (awf has no workflow packs), and `name` is a workflow `GET /api/workflows` lists
/// under that scope (where it was found: `env` = `$AWF_WORKFLOWS_PATH`, `local` =
/// `.awf/workflows`, `global` = the config dir; the first source wins per name, so a
/// workflow hidden by one of the same name in an earlier source is not served). Never a
/// path (`%2Fetc%2Fpasswd`, `wf/x.yaml`), nor a file of the server's directory that happens
/// to have the name (the loader would take it first: then the listed workflow's path is the
/// identifier).
///
/// # Errors
/// A 404 problem (`USER.FACADE.WORKFLOW_NOT_FOUND`) naming what is listed, or the scope the
/// name is listed under.
pub(crate) fn resolve(cfg: &HttpConfig, scope: &str, name: &str) -> Result<String, Problem> {
    let not_found = |what: String, hint: String| {
        Problem::with_status(
            StatusCode::NOT_FOUND,
            AwfError::new(ErrorCode::UserFacadeWorkflowNotFound, what).with_hint(hint),
        )
    };
    if !matches!(scope, "local" | "global" | "env") {
        return Err(not_found(
            format!("no workflow scope {scope:?} (awf has no workflow packs)"),
            "use the `scope` GET /api/workflows gives: local, global or env".to_owned(),
        ));
    }
    let entries = cfg.repository.list()?;
    let Some(entry) = entries.iter().find(|e| e.name == name) else {
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        let hint = match awf_domain::validate::closest(name, names.iter().copied()) {
            Some(c) => format!("did you mean '{c}'? (GET /api/workflows lists them)"),
            None => "GET /api/workflows lists them".to_owned(),
        };
        return Err(not_found(format!("workflow not found: {name}"), hint));
    };
    if entry.source != scope {
        return Err(not_found(
            format!(
                "no workflow {name} in scope {scope}: it is found in scope {}",
                entry.source
            ),
            format!("use /api/workflows/{}/{name}", entry.source),
        ));
    }
    let plain = !name.starts_with('.') && !name.contains(['/', '\\', '\0']);
    if plain && !cfg.working_dir.join(name).exists() {
        // The loader finds the same file by name (same sources, same order).
        return Ok(identifier(scope, name));
    }
    Ok(entry.path.display().to_string())
}

/// Turns the request's `inputs` object into `key=value` pairs: strings as they are, other
/// values as their JSON text.
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` when `inputs` is present and not an object.
pub fn inputs_of(body: &Value) -> Result<Vec<(String, String)>, AwfError> {
    match body.get("inputs") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(m)) => Ok(pairs(m)),
        Some(_) => Err(AwfError::new(
            ErrorCode::UserInputValidationFailed,
            "`inputs` must be a JSON object",
        )
        .with_hint(r#"send {"inputs": {"name": "value"}}"#)),
    }
}

/// `key=value` pairs of a JSON object: strings as they are, other values as their JSON text
/// (a whole number as its integer, [`awf_domain::workflow::json_input_text`]), `null` left
/// out (not given).
pub fn pairs(m: &Map<String, Value>) -> Vec<(String, String)> {
    // `null` is an input not given (its default applies, or a required one is missing), never
    // the text "null".
    m.iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), awf_domain::workflow::json_input_text(v)))
        .collect()
}

/// An input's default as the API shows it: `null` when none, `"***"` for a secret input's
/// non-empty one ([`awf_domain::mask::hides_named`], the rule of `awf run <workflow> --help`
/// and `awf validate`), the value itself otherwise.
fn shown_default(name: &str, default: Option<&Value>) -> Value {
    match default {
        None => Value::Null,
        Some(v) if awf_domain::mask::hides_named(name, v) => {
            Value::String(awf_domain::mask::MASK.to_owned())
        }
        Some(v) => v.clone(),
    }
}

fn type_name(t: &InputType) -> String {
    match t {
        InputType::Untyped => "any".to_owned(),
        InputType::String => "string".to_owned(),
        InputType::Integer => "integer".to_owned(),
        InputType::Number => "number".to_owned(),
        InputType::Boolean => "boolean".to_owned(),
        InputType::Array => "array".to_owned(),
        InputType::Unknown(s) => s.clone(),
    }
}

/// The DTO of a loaded workflow. State names (a state's `name`, an edge's `to`, `initial`)
/// are the names users see ([`Workflow::display_name`]): the terminal of step `a`'s inline
/// `on_failure` is `a's on_failure`, the name the run's events and result give it (the page
/// colours its graph's nodes by those), never the internal `__inline_error_a`.
pub fn detail(wf: &Workflow, identifier: &str) -> WorkflowDetail {
    let inputs = wf
        .inputs
        .iter()
        .map(|i| InputInfo {
            name: i.name.clone(),
            ty: type_name(&i.ty),
            required: i.required,
            default: shown_default(&i.name, i.default.as_ref()),
            secret: awf_domain::mask::is_secret_name(&i.name),
            description: i.description.clone(),
            enum_values: i.validation.enum_values.clone(),
            pattern: i.validation.pattern.clone(),
            min: bound(i.validation.min),
            max: bound(i.validation.max),
            file_exists: i.validation.file_exists,
            file_extension: i.validation.file_extension.clone(),
        })
        .collect();
    let states = wf
        .states
        .values()
        .map(|st| {
            let mut next = Vec::new();
            for t in &st.transitions {
                next.push(Edge {
                    to: t.goto.clone(),
                    kind: EdgeKind::Transition,
                    when: t.when.clone(),
                    missing: false,
                });
            }
            let mut edge = |to: &str, kind: EdgeKind| {
                next.push(Edge {
                    to: to.to_owned(),
                    kind,
                    when: None,
                    missing: false,
                });
            };
            match &st.kind {
                StateKind::Parallel(p) => p.branches.iter().for_each(|b| edge(b, EdgeKind::Branch)),
                StateKind::Loop(l) => {
                    l.body.iter().for_each(|b| edge(b, EdgeKind::Body));
                    if let Some(c) = &l.on_complete {
                        edge(c, EdgeKind::Complete);
                    }
                }
                _ => {}
            }
            if let Some(to) = &st.on_success {
                edge(to, EdgeKind::Success);
            }
            if let Some(to) = &st.on_failure {
                edge(to, EdgeKind::Failure);
            }
            let terminal_status = match &st.kind {
                StateKind::Terminal(t) => Some(
                    match t.status {
                        TerminalStatus::Success => "success",
                        TerminalStatus::Failure => "failure",
                    }
                    .to_owned(),
                ),
                _ => None,
            };
            StateInfo {
                name: wf.display_name(&st.name),
                ty: st.kind.kind_name().to_owned(),
                description: st.description.clone(),
                terminal: terminal_status.is_some(),
                terminal_status,
                approval: st.approval.is_some(),
                next: next
                    .into_iter()
                    .map(|mut e| {
                        e.missing = !wf.states.contains_key(&e.to);
                        e.to = wf.display_name(&e.to);
                        e
                    })
                    .collect(),
            }
        })
        .collect();
    WorkflowDetail {
        name: wf.name.clone(),
        workflow: identifier.to_owned(),
        description: wf.description.clone(),
        version: wf.version.clone(),
        inputs,
        initial: wf.display_name(&wf.initial),
        states,
        errors: Vec::new(),
    }
}

/// Shows each state whose `type:` names no step type (`written`: state name → the type as
/// written, [`LoadedWorkflow::unknown_types`]) as written: that type, not a terminal (the
/// loader stands a success terminal in for it; the detail's `errors` says what is wrong).
///
/// [`LoadedWorkflow::unknown_types`]: awf_domain::ports::repository::LoadedWorkflow::unknown_types
fn show_unknown_types(answer: &mut WorkflowDetail, written: &BTreeMap<String, String>) {
    for st in &mut answer.states {
        if let Some(ty) = written.get(&st.name) {
            st.ty.clone_from(ty);
            st.terminal = false;
            st.terminal_status = None;
        }
    }
}

/// `path: message` of a finding (as `POST …/validate` lists it).
fn finding_line(d: &awf_domain::ports::repository::Diagnostic) -> String {
    if d.path.is_empty() {
        d.message.clone()
    } else {
        format!("{}: {}", d.path, d.message)
    }
}

/// Lists the workflows.
#[utoipa::path(
    get,
    path = "/api/workflows",
    operation_id = "list-workflows",
    tag = "workflows",
    responses(
        (status = 200, description = "Every workflow", body = Envelope<WorkflowList>),
        (status = 401, description = "Missing or wrong bearer token", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 500, description = "A workflow directory cannot be read", body = ProblemDoc, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn list_workflows(
    State(cfg): State<Arc<HttpConfig>>,
) -> Result<Json<Envelope<WorkflowList>>, Problem> {
    let entries = cfg.repository.list()?;
    let workflows = entries
        .into_iter()
        .map(|e| {
            // A file that loads is validated too (as `awf list` marks it BROKEN); one that
            // does not shows validate's first error (decoding goes on past the first parse
            // error), the one `awf validate` and `awf run` name.
            let validated = (cfg.validator)(&e.path.display().to_string());
            // `awf validate`'s first error and count, as every list of workflows shows it.
            let error = match (e.error, validated) {
                (load, Ok(diags)) => awf_domain::ports::repository::broken_summary(&diags).or(load),
                (Some(load), Err(_)) => Some(load),
                (None, Err(err)) => Some(format!("[{}] {}", err.code(), err.message())),
            }
            // `… more error(s)` names this workflow's validate route, not `awf validate`.
            .map(|m| {
                let validate = format!("POST /api/workflows/{}/{}/validate", e.source, e.name);
                crate::problem::http_message(&m, &validate)
            });
            WorkflowSummary {
                workflow: e.name.clone(),
                name: e.name,
                scope: e.source,
                version: e.version.unwrap_or_default(),
                description: e.description.unwrap_or_default(),
                error,
            }
        })
        .collect();
    Ok(Envelope::json(WorkflowList { workflows }))
}

/// One workflow: inputs and the state machine.
#[utoipa::path(
    get,
    path = "/api/workflows/{scope}/{name}",
    operation_id = "get-workflow",
    tag = "workflows",
    params(
        ("scope" = String, Path, description = "`local`, `global`, `env`, or a pack name"),
        ("name" = String, Path, description = "Workflow name"),
    ),
    responses(
        (status = 200, description = "The workflow", body = Envelope<WorkflowDetail>),
        (status = 401, description = "Missing or wrong bearer token", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 404, description = "No such workflow", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 422, description = "The workflow does not parse", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 500, description = "The file cannot be read", body = ProblemDoc, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn get_workflow(
    State(cfg): State<Arc<HttpConfig>>,
    Path((scope, name)): Path<(String, String)>,
) -> Result<Json<Envelope<WorkflowDetail>>, Problem> {
    let id = resolve(&cfg, &scope, &name)?;
    let loaded = cfg.repository.load_for_validation(&id, None)?;
    let mut answer = detail(&loaded.workflow, &name);
    show_unknown_types(&mut answer, &loaded.unknown_types);
    answer.errors = (cfg.validator)(&id)?
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(finding_line)
        .collect();
    Ok(Envelope::json(answer))
}

/// The hint of validate's 422, said for HTTP (not `awf validate NAME`, a command the client
/// may have no way to run): where the errors are in the answer, and the line (and column) of
/// the first in the workflow file when known.
fn validate_hint(first: &awf_domain::ports::repository::Diagnostic) -> String {
    let at = match (first.line, first.column) {
        (Some(l), Some(c)) => format!(" (the first at line {l}, column {c} of the file)"),
        (Some(l), None) => format!(" (the first at line {l} of the file)"),
        (None, _) => String::new(),
    };
    format!("`errors` lists each error by its path in the workflow{at}")
}

/// Validates a workflow as `awf validate` does.
#[utoipa::path(
    post,
    path = "/api/workflows/{scope}/{name}/validate",
    operation_id = "validate-workflow",
    tag = "workflows",
    params(
        ("scope" = String, Path, description = "`local`, `global`, `env`, or a pack name"),
        ("name" = String, Path, description = "Workflow name"),
    ),
    responses(
        (status = 200, description = "Valid (warnings listed)", body = Envelope<ValidationResult>),
        (status = 401, description = "Missing or wrong bearer token", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 403, description = "A cross-site request: an `Origin` that is neither this server's nor a `--cors-origin`, or a `Host` that does not name the server", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 415, description = "A body whose `Content-Type` is not `application/json`, or that has a `Content-Encoding` (gzip, br, …)", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 404, description = "No such workflow", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 422, description = "Invalid: `errors` lists every error, `code` is the first's", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 500, description = "The file cannot be read", body = ProblemDoc, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn validate_workflow(
    State(cfg): State<Arc<HttpConfig>>,
    Path((scope, name)): Path<(String, String)>,
) -> Result<Json<Envelope<ValidationResult>>, Problem> {
    let id = resolve(&cfg, &scope, &name)?;
    let diags = (cfg.validator)(&id)?;
    let line = finding_line;
    let errors: Vec<String> = diags
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(line)
        .collect();
    if let Some(first) = diags.iter().find(|d| d.severity == Severity::Error) {
        let e = AwfError::new(first.code, errors.join("; ")).with_hint(validate_hint(first));
        // Each error with its line and column in the file, as `awf validate` says them.
        let found = diags
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .map(Finding::from)
            .collect();
        return Err(Problem::with_status(StatusCode::UNPROCESSABLE_ENTITY, e)
            .with_errors(errors)
            .with_diagnostics(found));
    }
    let warned: Vec<_> = diags
        .iter()
        .filter(|d| d.severity == Severity::Warning)
        .collect();
    Ok(Envelope::json(ValidationResult {
        errors: Vec::new(),
        warnings: warned.iter().map(|d| line(d)).collect(),
        diagnostics: warned.into_iter().map(Finding::from).collect(),
    }))
}

/// Starts a run; it goes on after the answer (202).
#[utoipa::path(
    post,
    path = "/api/workflows/{scope}/{name}/run",
    operation_id = "run-workflow",
    tag = "workflows",
    params(
        ("scope" = String, Path, description = "`local`, `global`, `env`, or a pack name"),
        ("name" = String, Path, description = "Workflow name"),
    ),
    request_body(content = RunBody, description = "Inputs (the body may be empty)", content_type = "application/json"),
    responses(
        (status = 202, description = "Started", body = Envelope<RunAccepted>),
        (status = 400, description = "The body is not JSON, or an object in it repeats a key (`detail` names the key and its JSON Pointer)", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong bearer token", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 403, description = "A cross-site request: an `Origin` that is neither this server's nor a `--cors-origin`, or a `Host` that does not name the server", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 415, description = "A body whose `Content-Type` is not `application/json`, or that has a `Content-Encoding` (gzip, br, …)", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 404, description = "No such workflow", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 413, description = "The body is over 1 MiB", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 422, description = "Invalid workflow or inputs, or a body of the wrong shape", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 429, description = "`--max-runs` runs are live (see `Retry-After`)", body = ProblemDoc, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "Seconds to wait before trying again"))),
        (status = 500, description = "The workflow file cannot be read", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 503, description = "The server is shutting down", body = ProblemDoc, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn run_workflow(
    State(cfg): State<Arc<HttpConfig>>,
    Path((scope, name)): Path<(String, String)>,
    JsonBody(body): JsonBody<RunBody>,
) -> Result<Response, Problem> {
    cfg.refuse_if_draining()?;
    let inputs = body.inputs.as_ref().map(pairs).unwrap_or_default();
    let identifier = resolve(&cfg, &scope, &name)?;
    let given: Vec<String> = body
        .breakpoints
        .iter()
        .flatten()
        .map(|b| b.trim().to_owned())
        .collect();
    let breakpoints: Vec<String> = given.iter().filter(|b| !b.is_empty()).cloned().collect();
    let warnings = match cfg.repository.load(&identifier, None) {
        Ok(loaded) => {
            // Refused here too (not only by the run service), so that a run queued for the
            // shared store's workers is refused at submit time with the same 422.
            awf_domain::validate::refuse_undeclared_inputs(&loaded.workflow, &inputs)?;
            if let Some(given) = &body.inputs {
                awf_domain::validate::refuse_structured_text_inputs(
                    &loaded.workflow.inputs,
                    given,
                )?;
            }
            unknown_breakpoints(&loaded.workflow, &given)
        }
        // The service reports why it does not load.
        Err(_) => Vec::new(),
    };
    let request = RunRequest {
        identifier,
        inputs,
        config_inputs: cfg.config_inputs.clone(),
        env: cfg.env.clone(),
        working_dir: cfg.working_dir.clone(),
        prompt_missing_inputs: body.ask_missing_inputs,
        interactive: (body.interactive || !breakpoints.is_empty())
            .then_some(awf_domain::ports::facade::Interactive { breakpoints }),
        refuse_undeclared_inputs: true,
        ..RunRequest::default()
    };
    // An invalid workflow's message ends naming this route's `validate`, which lists every
    // error (not `awf validate`).
    let id = cfg.service.start(request).await.map_err(|e| {
        let validate = format!("POST /api/workflows/{scope}/{name}/validate");
        Problem::from_error(crate::problem::for_http(e, "inputs", &validate))
    })?;
    cfg.note_started(&id);
    Ok((
        StatusCode::ACCEPTED,
        Envelope::json(RunAccepted {
            execution_id: id.0,
            status: "accepted".to_owned(),
            warnings,
        }),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// validate's 422 hint is said for HTTP, never as the `awf validate` command.
    #[test]
    fn the_validate_hint_is_said_for_http() {
        use awf_domain::ports::repository::Diagnostic;
        let mut d = Diagnostic::error(
            ErrorCode::WorkflowValidationMissingState,
            "states.a.on_success",
            "unknown state 'x'",
        );
        assert_eq!(
            validate_hint(&d),
            "`errors` lists each error by its path in the workflow"
        );
        d.line = Some(7);
        assert_eq!(
            validate_hint(&d),
            "`errors` lists each error by its path in the workflow (the first at line 7 of the file)"
        );
        d.column = Some(17);
        assert_eq!(
            validate_hint(&d),
            "`errors` lists each error by its path in the workflow (the first at line 7, column 17 of the file)"
        );
    }

    #[test]
    fn scope_grammar() {
        assert_eq!(identifier("local", "hello"), "hello");
        assert_eq!(identifier("env", "hello"), "hello");
        assert_eq!(identifier("pack", "hello"), "pack/hello");
    }

    #[test]
    fn inputs_are_strings_or_json_text() {
        // `null` is not given (a breaker's `{"who": null}` ran with who = "null").
        let v = json!({"inputs": {"a": "x", "n": 3, "b": true, "who": null}});
        let got = inputs_of(&v).unwrap();
        assert_eq!(
            got,
            vec![
                ("a".to_owned(), "x".to_owned()),
                ("n".to_owned(), "3".to_owned()),
                ("b".to_owned(), "true".to_owned()),
            ]
        );
        let e = inputs_of(&json!({"inputs": [1]})).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
    }

    #[test]
    fn an_input_default_is_documented_as_any_value() {
        // A string default (`default: world`) answered by GET /api/workflows/{scope}/{name}
        // must fit the schema (schemathesis found `"world"` against `type: [object, null]`).
        let schema = serde_json::to_value(<InputInfo as utoipa::PartialSchema>::schema()).unwrap();
        let default = &schema["properties"]["default"];
        assert!(default.is_object(), "{schema}");
        assert!(default.get("type").is_none(), "{default}");
    }

    #[test]
    fn a_secret_inputs_default_is_masked_and_marked() {
        assert_eq!(
            shown_default("api_token", Some(&json!("s3cr3t"))),
            json!("***")
        );
        assert_eq!(shown_default("DB_PASSWORD", Some(&json!(42))), json!("***"));
        // Nothing to hide in the empty value (shown as `""`, as the CLI shows it).
        assert_eq!(shown_default("api_token", Some(&json!(""))), json!(""));
        assert_eq!(shown_default("api_token", None), Value::Null);
        assert_eq!(shown_default("region", Some(&json!("eu"))), json!("eu"));
        let schema = serde_json::to_value(<InputInfo as utoipa::PartialSchema>::schema()).unwrap();
        let secret = &schema["properties"]["secret"];
        assert_eq!(secret["type"], "boolean", "{schema}");
        assert!(
            secret["description"].as_str().unwrap().contains("masked"),
            "{secret}"
        );
        let required = schema["required"].as_array().unwrap();
        assert!(!required.contains(&json!("secret")), "{schema}");
    }
}
