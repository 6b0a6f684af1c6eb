//! Node tree → domain [`Workflow`]: the lenient raw model of AWF's file format.
//!
//! Source: spec/workflow.md §1.3–§1.11 and §1.15; decisions.md (unknown keys warn, both
//! `call_workflow` layouts, workflow `outputs:`, inline error exit codes).

use std::time::Duration;

use awf_domain::ErrorCode;
use awf_domain::duration::parse_duration;
use awf_domain::workflow::AgentPolicy;
use awf_domain::workflow::AgentStep;
use awf_domain::workflow::Backoff;
use awf_domain::workflow::Budget;
use awf_domain::workflow::CallWorkflowStep;
use awf_domain::workflow::CommandSource;
use awf_domain::workflow::CommandStep;
use awf_domain::workflow::ConversationConfig;
use awf_domain::workflow::DEFAULT_MAX_ITERATIONS;
use awf_domain::workflow::FallbackClass;
use awf_domain::workflow::FallbackProvider;
use awf_domain::workflow::HookAction;
use awf_domain::workflow::InputDef;
use awf_domain::workflow::InputType;
use awf_domain::workflow::InputValidation;
use awf_domain::workflow::LoopOver;
use awf_domain::workflow::LoopStep;
use awf_domain::workflow::MaxIterations;
use awf_domain::workflow::McpPluginTools;
use awf_domain::workflow::McpProxyConfig;
use awf_domain::workflow::OperationStep;
use awf_domain::workflow::OutputDef;
use awf_domain::workflow::ParallelStep;
use awf_domain::workflow::ParallelStrategy;
use awf_domain::workflow::RetryPolicy;
use awf_domain::workflow::State;
use awf_domain::workflow::StateKind;
use awf_domain::workflow::StepHooks;
use awf_domain::workflow::TerminalState;
use awf_domain::workflow::TerminalStatus;
use awf_domain::workflow::Transition;
use awf_domain::workflow::UsageLimitPolicy;
use awf_domain::workflow::Workflow;
use awf_domain::workflow::WorkflowHooks;
use awf_domain::workflow::WorkflowSource;
use indexmap::IndexMap;

use crate::fields::Diags;
use crate::fields::Fields;
use crate::fields::closest;
use crate::node::MapEntry;
use crate::node::Node;
use crate::node::NodeKind;
use crate::node::Scalar;
use crate::templates::TemplateLookup;
use crate::templates::expand_state;

/// The nine `type:` spellings. Source: spec/workflow.md §1.5.
pub const STATE_TYPES: [&str; 9] = [
    "step",
    "command",
    "agent",
    "parallel",
    "for_each",
    "while",
    "operation",
    "call_workflow",
    "terminal",
];

const STEP_NOTES: &[(&str, &str)] = &[
    (
        "depends_on",
        "depends_on has no effect: states run in the order their transitions give",
    ),
    (
        "pre_hook",
        "pre_hook is not supported; use hooks: {pre: [...]}",
    ),
    (
        "post_hook",
        "post_hook is not supported; use hooks: {post: [...]}",
    ),
];

/// Decodes a whole workflow document. Returns `None` when the document is not a mapping
/// or misses a required part; errors are in `d`.
pub fn decode_workflow(
    root: &Node,
    source: WorkflowSource,
    d: &mut Diags,
    templates: &dyn TemplateLookup,
) -> Option<Workflow> {
    if root.entries().is_none() {
        let e = d.syntax(
            "",
            Some(root.pos),
            format!(
                "expected a mapping (a workflow file), found {}",
                root.type_name()
            ),
        );
        e.hint = Some(if root.is_null() {
            "the file is empty or holds only comments: a workflow has `name:` and `states:` at \
             its top level (`awf init` writes an example)"
                .to_owned()
        } else {
            "a workflow file is a mapping: `name: …`, `states: …` at its top level, not a list \
             or a single value"
                .to_owned()
        });
        return None;
    }
    let mut f = Fields::of(root, "", d, "a mapping (a workflow file)")?;
    let name = f.string("name", d);
    if name.is_none() {
        let typo = f.misspelled(&["name"]);
        let e = d.missing("name", Some(root.pos), "name: required field missing");
        e.hint = Some("add a top-level `name:`".to_owned());
        name_typo(e, typo);
    } else if name.as_deref() == Some("") {
        // AWF (Go) refuses an empty name as a missing one (breaker: `name: ""` ran as
        // `Workflow started:  (…)`).
        let pos = f.key_pos("name").unwrap_or(root.pos);
        let e = d.missing("name", Some(pos), "name: required field missing");
        e.hint =
            Some("`name:` is empty: give the workflow a name (`name: my-workflow`)".to_owned());
    }
    let version = f.string("version", d);
    let description = f.string("description", d);
    let author = f.string("author", d);
    let tags = f.string_list("tags", d);
    let inputs = match f.take("inputs") {
        Some(n) => decode_inputs(n, "inputs", d),
        None => Vec::new(),
    };
    let env = match f.take("env") {
        // A mapping is the shape other tools give `env:` (new user: `env: {GREETING: hola}`
        // was refused with no word on what the key is).
        Some(n) if n.entries().is_some() => {
            let path = f.child("env");
            d.wrong_type(&path, n, "a list");
            if let Some(last) = d.list.last_mut() {
                last.hint = Some(
                    "`env:` lists the names of environment variables the workflow expects \
                     (`env: [API_TOKEN]`: a warning when one is not set); it sets none. Set \
                     them where awf runs, or in the command (`GREETING=hola cmd`)"
                        .to_owned(),
                );
            }
            Vec::new()
        }
        Some(n) => d.string_list(n, &f.child("env")),
        None => Vec::new(),
    };
    let hooks = match f.take("hooks") {
        Some(n) => decode_workflow_hooks(n, "hooks", d),
        None => WorkflowHooks::default(),
    };
    let outputs = match f.take("outputs") {
        Some(n) => decode_outputs(n, "outputs", d),
        None => Vec::new(),
    };
    let shell_quote = f.boolean("shell_quote", d).unwrap_or(false);
    let budget = f
        .take("budget")
        .and_then(|n| decode_budget(n, &f.child("budget"), d));
    let mut initial = None;
    let mut states = IndexMap::new();
    // Top-level keys that belong under a missing `states:` (`initial:`, a mapping with a
    // `type:`): new user wrote the states without the `states:` wrapper and got no hint.
    let mut unwrapped: Vec<String> = Vec::new();
    match f.take("states") {
        None => {
            let typo = f.misspelled(&["states"]);
            let e = d.missing("states", Some(root.pos), "states: required field missing");
            if typo.is_none() {
                unwrapped = unwrapped_states(root);
                if !unwrapped.is_empty() {
                    e.hint = Some(states_wrapper_hint(&unwrapped));
                }
            }
            name_typo(e, typo);
        }
        Some(n) => {
            if let Some(sf) = Fields::of(n, "states", d, "a mapping of states") {
                initial = decode_states(n, sf, d, templates, &mut states);
            }
        }
    }
    // `initial:` written at the top level, where `states:` lacks it: one mistake, one
    // message (not an error plus an unknown-field warning), saying where it goes.
    if initial.is_none()
        && let Some(pos) = f.key_pos("initial")
        && let Some(e) =
            d.list.iter_mut().rev().find(|e| {
                e.path == "states.initial" && e.code == ErrorCode::WorkflowParseMissingField
            })
    {
        let _ = f.take("initial");
        e.message =
            "states.initial: required field missing (`initial:` is at the top level)".to_owned();
        e.hint = Some("move `initial:` under `states:` (indent it as a state's name)".to_owned());
        e.line = Some(pos.line);
        e.column = Some(pos.column);
    }
    // `x-` keys hold what anchors reuse (`x-defaults: &d`, then `<<: *d` in states), as in
    // Compose files: accepted silently (AWF (Go) ignores every unknown top-level key).
    f.skip_prefixed("x-");
    f.finish(
        d,
        &[
            ("output", "the workflow-level output: block has no effect"),
            ("loop", "the workflow-level loop: block has no effect"),
            ("monitoring", "the monitoring: block has no effect"),
            (
                "plugins",
                "plugins are not supported; plugins: has no effect",
            ),
        ],
        "the workflow",
    );
    for e in d.list.iter_mut() {
        if e.code == ErrorCode::WorkflowParseUnknownField
            && e.hint.is_none()
            && unwrapped.contains(&e.path)
        {
            e.hint = Some(format!(
                "`{}:` goes under `states:` (indented one level)",
                e.path
            ));
        }
    }
    // Decoding goes on past errors (they are in `d`; `load` refuses the workflow when there
    // are any), so `awf validate` can run its later checks on what was written.
    Some(Workflow {
        name: name.unwrap_or_default(),
        version,
        description,
        author,
        tags,
        inputs,
        env,
        initial: initial.unwrap_or_default(),
        states,
        hooks,
        outputs,
        source,
        shell_quote,
        budget,
    })
}

/// `budget: {tokens, usd}` (awf extension): each limit a positive number; at least one.
fn decode_budget(n: &Node, path: &str, d: &mut Diags) -> Option<Budget> {
    let mut f = Fields::of(n, path, d, "a mapping (budget: {tokens, usd})")?;
    let tokens = f.take("tokens").and_then(|t| {
        let p = format!("{path}.tokens");
        match d.int(t, &p) {
            Some(v) if v > 0 => u64::try_from(v).ok(),
            Some(_) => {
                d.invalid(&p, Some(t.pos), "budget.tokens must be a positive integer");
                None
            }
            None => None,
        }
    });
    let usd = f.take("usd").and_then(|u| {
        let p = format!("{path}.usd");
        match d.float(u, &p) {
            Some(v) if v > 0.0 && v.is_finite() => Some(v),
            Some(_) => {
                d.invalid(&p, Some(u.pos), "budget.usd must be a positive number");
                None
            }
            None => None,
        }
    });
    let pos = f.pos();
    f.finish(d, &[], "budget");
    if tokens.is_none() && usd.is_none() {
        d.invalid(path, Some(pos), "budget: give tokens, usd or both")
            .hint = Some("budget: {tokens: 100000, usd: 2.5}".to_owned());
        return None;
    }
    Some(Budget { tokens, usd })
}

/// `budget:`, `fallback_providers:`, `fallback_on:` and `usage_limit:` of an agent step.
fn decode_agent_policy(f: &mut Fields<'_>, d: &mut Diags) -> AgentPolicy {
    let budget = f
        .take("budget")
        .and_then(|n| decode_budget(n, &f.child("budget"), d));
    let mut fallback_providers = Vec::new();
    if let Some(n) = f.take("fallback_providers") {
        let path = f.child("fallback_providers");
        match n.items() {
            Some(items) => {
                for (i, it) in items.iter().enumerate() {
                    let ip = format!("{path}.{i}");
                    if let Some(name) = it.text().filter(|_| it.entries().is_none()) {
                        if name.trim().is_empty() {
                            d.invalid(&ip, Some(it.pos), "fallback provider name is empty");
                        } else {
                            fallback_providers.push(FallbackProvider {
                                provider: name.trim().to_owned(),
                                options: IndexMap::new(),
                            });
                        }
                        continue;
                    }
                    let Some(mut ef) =
                        Fields::of(it, &ip, d, "a provider name or {provider, options}")
                    else {
                        continue;
                    };
                    let provider = ef.string("provider", d);
                    let options = match ef.take("options") {
                        Some(o) => d.json_map(o, &ef.child("options")),
                        None => IndexMap::new(),
                    };
                    let pos = ef.pos();
                    ef.finish(d, &[], "a fallback provider");
                    match provider {
                        Some(p) if !p.trim().is_empty() => {
                            fallback_providers.push(FallbackProvider {
                                provider: p.trim().to_owned(),
                                options,
                            });
                        }
                        _ => {
                            d.missing(&ip, Some(pos), "fallback provider: `provider:` is required");
                        }
                    }
                }
            }
            None => d.wrong_type(&path, n, "a list of providers"),
        }
    }
    let mut fallback_on = Vec::new();
    if let Some(n) = f.take("fallback_on") {
        let path = f.child("fallback_on");
        for (i, c) in d.string_list(n, &path).into_iter().enumerate() {
            match FallbackClass::parse(&c) {
                Some(class) => fallback_on.push(class),
                None => {
                    let names: Vec<&str> = FallbackClass::ALL.iter().map(|c| c.as_str()).collect();
                    d.invalid(
                        &format!("{path}.{i}"),
                        Some(n.pos),
                        format!("unknown fallback class {c:?}"),
                    )
                    .hint = Some(format!("use {}", names.join(", ")));
                }
            }
        }
    }
    let mut usage_limit = UsageLimitPolicy::default();
    if let Some(n) = f.take("usage_limit") {
        let path = f.child("usage_limit");
        if let Some(mut uf) = Fields::of(n, &path, d, "a mapping (usage_limit: {wait, max_wait})") {
            if let Some(w) = uf.take("wait")
                && let Some(v) = duration(w, &format!("{path}.wait"), d)
            {
                usage_limit.wait = v;
            }
            if let Some(w) = uf.take("max_wait")
                && let Some(v) = duration(w, &format!("{path}.max_wait"), d)
            {
                usage_limit.max_wait = v;
            }
            uf.finish(d, &[], "usage_limit");
        }
    }
    AgentPolicy {
        budget,
        fallback_providers,
        fallback_on,
        usage_limit,
    }
}

fn decode_states(
    node: &Node,
    mut sf: Fields<'_>,
    d: &mut Diags,
    templates: &dyn TemplateLookup,
    states: &mut IndexMap<String, State>,
) -> Option<String> {
    let initial = sf.string("initial", d);
    if initial.is_none() {
        let typo = sf.misspelled(&["initial"]);
        let e = d.missing(
            "states.initial",
            Some(node.pos),
            "states.initial: required field missing",
        );
        e.hint = Some("add `initial: <first state>` under `states:`".to_owned());
        name_typo(e, typo);
    }
    if initial.as_deref().is_some_and(|i| i.trim().is_empty()) {
        let pos = node.get("initial").map(|n| n.pos);
        d.error(
            ErrorCode::WorkflowValidationInvalidState,
            "states.initial",
            pos,
            "states.initial: the initial state name is empty",
        )
        .hint = Some("set `initial:` to the name of the first state".to_owned());
    }
    let mut inline_terminals = Vec::new();
    // States named like the terminal of a step's inline `on_failure` (a clash is refused
    // below: the step's failure would run the user's state instead).
    let mut reserved = Vec::new();
    // Every state key with its position (a state named as users see an inline terminal,
    // `a's on_failure`, is refused below).
    let mut keys = Vec::new();
    for entry in node.entries().unwrap_or_default() {
        if entry.key == "initial" {
            continue;
        }
        keys.push((entry.key.clone(), entry.key_pos));
        if entry
            .key
            .starts_with(awf_domain::workflow::INLINE_ERROR_PREFIX)
        {
            reserved.push((entry.key.clone(), entry.key_pos));
        }
        let path = format!("states.{}", entry.key);
        if entry.key.trim().is_empty() {
            d.error(
                ErrorCode::WorkflowValidationInvalidState,
                "states",
                Some(entry.key_pos),
                format!("state name {:?} is empty", entry.key),
            )
            .hint = Some("give the state a non-empty name".to_owned());
            continue;
        }
        if misindented_state(entry, &path, d) {
            states.insert(entry.key.clone(), placeholder(&entry.key));
            continue;
        }
        let expanded;
        let state_node = if entry.value.get("use_template").is_some() {
            match expand_state(&entry.value, &path, templates, d) {
                Some(n) => {
                    expanded = n;
                    &expanded
                }
                None => {
                    states.insert(entry.key.clone(), placeholder(&entry.key));
                    continue;
                }
            }
        } else {
            &entry.value
        };
        let state = decode_state(&entry.key, state_node, &path, d, &mut inline_terminals)
            .unwrap_or_else(|| placeholder(&entry.key));
        states.insert(entry.key.clone(), state);
    }
    for t in inline_terminals {
        if let Some((name, pos)) = reserved.iter().find(|(n, _)| *n == t.name) {
            let step = awf_domain::workflow::inline_error_step(name).unwrap_or_default();
            d.error(
                ErrorCode::WorkflowValidationInvalidState,
                &format!("states.{name}"),
                Some(*pos),
                format!(
                    "state {name:?} has the name awf gives the terminal of step {step:?}'s \
                     inline on_failure: the step's failure would run this state instead"
                ),
            )
            .hint = Some(format!(
                "rename the state (names starting with `{}` are awf's own)",
                awf_domain::workflow::INLINE_ERROR_PREFIX
            ));
            continue;
        }
        // State names are free text (any non-empty key), so a user state could be named as
        // users see this terminal (`a's on_failure`: the run result, `awf status`, the events,
        // `awf diagram`, the HTTP workflow detail): two states under one name there, and a
        // run ending at one would read as the other. Refused, as the internal name is above
        // (the terminal is still added: the step's route is not reported missing too).
        let shown = awf_domain::workflow::terminal_display_name(&t.name);
        if let Some((name, pos)) = keys.iter().find(|(n, _)| *n == shown) {
            let step = awf_domain::workflow::inline_error_step(&t.name).unwrap_or_default();
            d.error(
                ErrorCode::WorkflowValidationInvalidState,
                &format!("states.{name}"),
                Some(*pos),
                format!(
                    "state {name:?} has the name awf shows for the terminal of step {step:?}'s \
                     inline on_failure (in run results, `awf diagram` and the HTTP API): the two \
                     would read as one"
                ),
            )
            .hint = Some(format!(
                "rename the state (`{step}'s on_failure` is how awf names step {step:?}'s inline \
                 on_failure terminal)"
            ));
        }
        if !states.contains_key(&t.name) {
            states.insert(t.name.clone(), t);
        }
    }
    initial
}

/// Names a mistyped key in the error about the required key it was meant to be:
/// `("comand" is not a key: did you mean 'command'?)`, with a rename hint.
/// The top-level keys of a workflow without `states:` that belong under it: `initial` and
/// each key whose value is a mapping with a `type:` (a state written one level too high).
fn unwrapped_states(root: &Node) -> Vec<String> {
    const KNOWN: [&str; 6] = ["name", "inputs", "hooks", "outputs", "budget", "env"];
    root.entries()
        .unwrap_or_default()
        .iter()
        .filter(|e| {
            !KNOWN.contains(&e.key.as_str())
                && (e.key == "initial" || e.value.get("type").is_some())
        })
        .map(|e| e.key.clone())
        .collect()
}

/// The hint of a missing `states:` whose states were written at the top level (`keys`, from
/// [`unwrapped_states`]).
fn states_wrapper_hint(keys: &[String]) -> String {
    let listed: Vec<String> = keys.iter().take(5).map(|k| format!("`{k}:`")).collect();
    let more = if keys.len() > 5 { ", …" } else { "" };
    format!(
        "`initial:` and the states go under `states:`: add a line `states:` and indent {}{more} under it",
        listed.join(", ")
    )
}

fn name_typo(diag: &mut awf_domain::ports::repository::Diagnostic, typo: Option<(String, &str)>) {
    if let Some((k, c)) = typo {
        diag.message
            .push_str(&format!(" (\"{k}\" is not a key: did you mean '{c}'?)"));
        diag.hint = Some(format!("rename `{k}:` to `{c}:`"));
    }
}

/// Stands in for a state that could not be decoded at all (its error is already recorded):
/// a success terminal, so that references to it and routes through it raise no second error.
fn placeholder(name: &str) -> State {
    State::success_terminal(name)
}

/// Fields every kind of state may have, and the fields of the common kinds: a key of
/// `states:` spelled as one of these is most likely a state's field indented one level too
/// shallow.
const STATE_FIELDS: [&str; 16] = [
    "type",
    "command",
    "on_success",
    "on_failure",
    "on_complete",
    "transitions",
    "timeout",
    "retry",
    "dir",
    "prompt",
    "provider",
    "message",
    "status",
    "body",
    "items",
    "branches",
];

/// Records the error for a state whose fields are not indented under its name: `a:` followed
/// by nothing (a null value, positioned by YAML at the next line's key), or a key of
/// `states:` that is one of [`STATE_FIELDS`] with a value that is not a mapping. Points at the
/// state's own key, with a hint on the indentation. Returns whether it recorded one.
fn misindented_state(entry: &MapEntry, path: &str, d: &mut Diags) -> bool {
    let name = &entry.key;
    if entry.value.is_null() {
        d.syntax(
            path,
            Some(entry.key_pos),
            format!("state {name:?} has no fields: nothing is indented under `{name}:`"),
        )
        .hint = Some(format!(
            "indent the state's fields (`type:`, `command:`, ...) under `{name}:`, deeper than \
             `{name}` itself"
        ));
        return true;
    }
    if STATE_FIELDS.contains(&name.as_str()) && entry.value.entries().is_none() {
        d.syntax(
            path,
            Some(entry.key_pos),
            format!(
                "`{name}: ...` is a state's field, not a state: it is indented at the level of \
                 the state names"
            ),
        )
        .hint = Some(format!(
            "indent `{name}:` under its state's name, as deep as that state's other fields"
        ));
        return true;
    }
    false
}

fn kind_of(raw: &str) -> Option<&'static str> {
    let lower = raw.trim().to_ascii_lowercase();
    STATE_TYPES.iter().copied().find(|t| *t == lower)
}

fn decode_state(
    name: &str,
    node: &Node,
    path: &str,
    d: &mut Diags,
    inline_terminals: &mut Vec<State>,
) -> Option<State> {
    let mut f = Fields::of(node, path, d, "a mapping (a state)")?;
    let ty = match f.string("type", d) {
        None => {
            let typo = f.misspelled(&["type"]);
            let e = d.error(
                ErrorCode::WorkflowParseUnknownStepType,
                &f.child("type"),
                Some(node.pos),
                format!("state \"{name}\" has no type"),
            );
            e.hint = Some(format!("add `type:` (one of {})", STATE_TYPES.join(", ")));
            name_typo(e, typo);
            d.unknown_types.insert(name.to_owned(), String::new());
            return None;
        }
        Some(t) => match kind_of(&t) {
            Some(k) => k,
            None => {
                let pos = f.key_pos("type");
                let hint = closest(&t.to_ascii_lowercase(), STATE_TYPES)
                    .map(|c| format!("did you mean '{c}'?"))
                    .unwrap_or_else(|| format!("use one of {}", STATE_TYPES.join(", ")));
                d.error(
                    ErrorCode::WorkflowParseUnknownStepType,
                    &f.child("type"),
                    pos,
                    format!("unknown step type: {t}"),
                )
                .hint = Some(hint);
                d.unknown_types.insert(name.to_owned(), t);
                return None;
            }
        },
    };
    let description = f.string("description", d);
    let mut state = State::success_terminal(name);
    state.description = description;
    if ty == "terminal" {
        state.kind = decode_terminal(&mut f, d);
        f.finish(d, &[], "a terminal state");
        return Some(state);
    }
    state.on_success = f.string("on_success", d);
    if let Some(n) = f.take("on_failure") {
        let fpath = f.child("on_failure");
        if n.entries().is_some() {
            if let Some(t) = decode_inline_error(name, n, &fpath, d) {
                state.on_failure = Some(t.name.clone());
                inline_terminals.push(t);
            }
        } else {
            state.on_failure = d.string(n, &fpath);
        }
    }
    if let Some(n) = f.take("transitions") {
        state.transitions = decode_transitions(n, &f.child("transitions"), d);
    }
    state.continue_on_error = f.boolean("continue_on_error", d).unwrap_or(false);
    if let Some(n) = f.take("timeout") {
        state.timeout = duration(n, &f.child("timeout"), d).filter(|t| !t.is_zero());
    }
    if let Some(n) = f.take("retry") {
        state.retry = decode_retry(n, &f.child("retry"), d);
    }
    if let Some(n) = f.take("hooks") {
        state.hooks = decode_step_hooks(n, &f.child("hooks"), d);
    }
    let approval_pos = f.key_pos("approval");
    if let Some(n) = f.take("approval") {
        state.approval = decode_approval(name, n, &f.child("approval"), d);
    } else if approval_pos.is_some() {
        // A bare `approval:` (null) would silently turn the gate off.
        d.invalid(
            &f.child("approval"),
            approval_pos,
            "approval has no value (a bare `approval:` would turn the gate off)",
        )
        .hint = Some(
            "give a message (`approval: \"Deploy?\"`) or a mapping (`approval: {message: ...}`), or remove the key"
                .to_owned(),
        );
    }
    if let Some(n) = f.take("capture") {
        (state.capture_max_size, state.capture_names) =
            decode_capture(n, &f.child("capture"), d).unwrap_or_default();
    }
    let mut notes: Vec<(&str, &str)> = STEP_NOTES.to_vec();
    let kind = match ty {
        "step" | "command" => {
            notes.push(("operation", "operation has no effect on a command step"));
            decode_command(&mut f, d)
        }
        "agent" => Some(decode_agent(&mut f, d)),
        "parallel" => Some(decode_parallel(&mut f, d)),
        "for_each" | "while" => decode_loop(ty, &mut f, d),
        "operation" => Some(decode_operation(&mut f, d)),
        _ => Some(decode_call(&mut f, d)),
    };
    f.finish(d, &notes, format_args!("a {ty} state"));
    // A kind that failed to decode (its error is recorded) keeps the state and its routes
    // under an empty command, so later checks see the rest of the workflow.
    state.kind = kind.unwrap_or_else(|| {
        StateKind::Command(CommandStep {
            source: CommandSource::Inline(String::new()),
            dir: None,
        })
    });
    Some(state)
}

fn decode_terminal(f: &mut Fields<'_>, d: &mut Diags) -> StateKind {
    let status = match f.string("status", d) {
        None => TerminalStatus::Success,
        Some(s) => match s.trim().to_ascii_lowercase().as_str() {
            "" | "success" => TerminalStatus::Success,
            "failure" => TerminalStatus::Failure,
            other => {
                let path = f.child("status");
                d.invalid(
                    &path,
                    f.key_pos("status"),
                    format!("invalid terminal status \"{other}\" (expected success or failure)"),
                )
                .hint = Some(terminal_status_hint(other));
                TerminalStatus::Failure
            }
        },
    };
    let message = f.string("message", d);
    StateKind::Terminal(TerminalState {
        status,
        message,
        exit_code: None,
    })
}

/// The hint of a terminal `status:` that is neither `success` nor `failure` (`failed`,
/// `ok`): the one it most likely means.
fn terminal_status_hint(written: &str) -> String {
    let meant = match written {
        "fail" | "failed" | "fails" | "failing" | "error" | "errored" | "err" | "ko" => {
            Some("failure")
        }
        "ok" | "done" | "succeeded" | "succeed" | "successful" | "pass" | "passed" | "good" => {
            Some("success")
        }
        other => closest(other, ["success", "failure"]),
    };
    match meant {
        Some(m) => format!("did you mean '{m}'? (`status: {m}`)"),
        None => "write `status: success` or `status: failure`".to_owned(),
    }
}

fn decode_inline_error(step: &str, node: &Node, path: &str, d: &mut Diags) -> Option<State> {
    let mut f = Fields::of(node, path, d, "a state name or {message, status}")?;
    let message = f.string("message", d).filter(|m| !m.trim().is_empty());
    let status = match f.take("status") {
        Some(n) => {
            let v = match n.scalar() {
                #[allow(clippy::cast_possible_truncation)]
                Some(Scalar::Float(x)) => Some(x.trunc() as i64),
                _ => d.int(n, &f.child("status")),
            };
            // A process exit status is 1..=255 (0 would report a failure as success).
            match v {
                Some(code) if !(1..=255).contains(&code) => {
                    d.invalid(
                        &f.child("status"),
                        Some(n.pos),
                        format!("exit status {code} is out of range (expected 1 to 255)"),
                    )
                    .hint = Some("use a process exit code such as 2 or 42".to_owned());
                    None
                }
                other => other,
            }
        }
        None => None,
    };
    let typo = f.misspelled(&["message"]);
    f.finish(d, &[], "an inline on_failure");
    let Some(message) = message else {
        let e = d.missing(
            &format!("{path}.message"),
            Some(node.pos),
            "message: required field missing",
        );
        e.hint = Some("inline on_failure needs a non-empty `message:`".to_owned());
        name_typo(e, typo);
        return None;
    };
    Some(State::new(
        format!("{}{step}", awf_domain::workflow::INLINE_ERROR_PREFIX),
        StateKind::Terminal(TerminalState {
            status: TerminalStatus::Failure,
            message: Some(message),
            exit_code: status.map(|s| i32::try_from(s).unwrap_or(1)),
        }),
    ))
}

fn decode_transitions(node: &Node, path: &str, d: &mut Diags) -> Vec<Transition> {
    let Some(items) = node.items() else {
        d.wrong_type(path, node, "a list of {when, goto}");
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let ipath = format!("{path}.{i}");
        let Some(mut f) = Fields::of(item, &ipath, d, "a mapping {when, goto}") else {
            continue;
        };
        let when = f.string("when", d).filter(|w| !w.trim().is_empty());
        let goto = f.string("goto", d);
        let typo = f.misspelled(&["goto"]);
        f.finish(d, &[], "a transition");
        match goto {
            Some(goto) => out.push(Transition { when, goto }),
            None => {
                let e = d.missing(
                    &format!("{ipath}.goto"),
                    Some(item.pos),
                    "goto: required field missing",
                );
                name_typo(e, typo);
            }
        }
    }
    out
}

fn duration(node: &Node, path: &str, d: &mut Diags) -> Option<Duration> {
    let text = d.string(node, path)?;
    match parse_duration(&text) {
        Ok(v) => Some(v),
        Err(e) => {
            d.invalid(path, Some(node.pos), e).hint =
                Some("use a Go duration (30s, 1m30s, 500ms) or a number of seconds".to_owned());
            None
        }
    }
}

/// `approval: "message"` or `approval: {message?, options?, timeout?, on_timeout?}`; options
/// are `{id, name?, kind}` (`kind`: allow_once, allow_always, reject_once, reject_always, or
/// allow / reject). `on_timeout` is checked by validation.
fn decode_approval(
    step: &str,
    node: &Node,
    path: &str,
    d: &mut Diags,
) -> Option<awf_domain::workflow::Approval> {
    use awf_domain::interaction::ApprovalKind;
    use awf_domain::interaction::ApprovalOption;
    let default_message = format!("Run step '{step}'?");
    if node.entries().is_none() {
        if let Some(got) = not_a_message(node) {
            d.invalid(
                path,
                Some(node.pos),
                format!("approval must be a message (a string) or a mapping, found {got}"),
            )
            .hint = Some(format!(
                "quote it to use it as the message (`approval: \"{}\"`), or use the mapping form",
                node.text().unwrap_or_default()
            ));
            return None;
        }
        let message = d.string(node, path)?;
        return Some(awf_domain::workflow::Approval {
            message: if message.trim().is_empty() {
                default_message
            } else {
                message
            },
            options: ApprovalOption::defaults(),
            timeout: None,
            on_timeout: None,
        });
    }
    let mut f = Fields::of(node, path, d, "a message or a mapping (approval gate)")?;
    let message_pos = f.key_pos("message");
    let message_node = f.take("message");
    if let Some(got) = message_node.and_then(not_a_message) {
        d.invalid(
            &f.child("message"),
            message_pos,
            format!("approval message must be a string, found {got}"),
        )
        .hint = Some("quote the message".to_owned());
    }
    let message = message_node
        .filter(|n| not_a_message(n).is_none())
        .and_then(|n| d.string(n, &format!("{path}.message")))
        .filter(|m| !m.trim().is_empty())
        .unwrap_or(default_message);
    let timeout = f
        .take("timeout")
        .and_then(|n| duration(n, &format!("{path}.timeout"), d))
        .filter(|t| !t.is_zero());
    let on_timeout = f.string("on_timeout", d);
    let mut options = Vec::new();
    if let Some(n) = f.take("options") {
        let opath = f.child("options");
        match n.items() {
            Some(items) => {
                for (i, it) in items.iter().enumerate() {
                    let ipath = format!("{opath}.{i}");
                    let Some(mut of) =
                        Fields::of(it, &ipath, d, "an approval option ({id, name, kind})")
                    else {
                        continue;
                    };
                    let id = of.string("id", d);
                    let label = of.string("name", d);
                    let kind_pos = of.key_pos("kind");
                    let kind_text = of.string("kind", d);
                    let kpath = of.child("kind");
                    let pos = of.pos();
                    of.finish(d, &[], "an approval option");
                    let Some(id) = id.filter(|i| !i.trim().is_empty()) else {
                        d.invalid(&ipath, Some(pos), "an approval option needs an `id`");
                        continue;
                    };
                    let Some(Some(kind)) = kind_text.as_deref().map(ApprovalKind::parse) else {
                        let got = kind_text
                            .as_deref()
                            .map_or_else(|| "nothing".to_owned(), |k| format!("\"{k}\""));
                        d.invalid(
                            &kpath,
                            kind_pos.or(Some(pos)),
                            format!(
                                "approval option {id}: kind must be allow_once, allow_always, reject_once or reject_always (or allow / reject), got {got}"
                            ),
                        );
                        continue;
                    };
                    options.push(ApprovalOption {
                        name: label.unwrap_or_else(|| id.clone()),
                        id,
                        kind,
                    });
                }
            }
            None => d.wrong_type(&opath, n, "a list of approval options ({id, name, kind})"),
        }
    }
    f.finish(d, &[], "approval");
    if options.is_empty() {
        options = ApprovalOption::defaults();
    }
    Some(awf_domain::workflow::Approval {
        message,
        options,
        timeout,
        on_timeout,
    })
}

/// The YAML type of an approval message that is not a string (a plain `42`, `true`, `~`);
/// `None` for a string (quoted or plain text) and for collections (reported elsewhere).
fn not_a_message(node: &Node) -> Option<&'static str> {
    match node.type_name() {
        t @ ("null" | "a boolean" | "an integer" | "a number") => Some(t),
        _ => None,
    }
}

fn decode_retry(node: &Node, path: &str, d: &mut Diags) -> Option<RetryPolicy> {
    let mut f = Fields::of(node, path, d, "a mapping (retry policy)")?;
    let max_attempts = match f.int("max_attempts", d) {
        Some(n) if n < 0 => {
            d.invalid(
                &f.child("max_attempts"),
                f.key_pos("max_attempts"),
                "max_attempts must be >= 1",
            )
            .hint = Some(
                "`max_attempts:` counts every try, the first included (`max_attempts: 3`)"
                    .to_owned(),
            );
            0
        }
        Some(n) => u32::try_from(n).unwrap_or(u32::MAX),
        None => 0,
    };
    let initial_delay = f
        .take("initial_delay")
        .and_then(|n| duration(n, &format!("{path}.initial_delay"), d))
        .unwrap_or(Duration::ZERO);
    let max_delay = f
        .take("max_delay")
        .and_then(|n| duration(n, &format!("{path}.max_delay"), d))
        .filter(|m| !m.is_zero());
    let backoff = match f
        .string("backoff", d)
        .map(|b| b.trim().to_ascii_lowercase())
    {
        None => Backoff::Constant,
        Some(b) => match b.as_str() {
            "" | "constant" => Backoff::Constant,
            "linear" => Backoff::Linear,
            "exponential" => Backoff::Exponential,
            other => {
                d.invalid(
                    &f.child("backoff"),
                    f.key_pos("backoff"),
                    format!(
                        "invalid backoff \"{other}\" (expected constant, linear or exponential)"
                    ),
                )
                .hint = Some(
                    closest(other, ["constant", "linear", "exponential"]).map_or_else(
                        || "write `backoff: constant`, `linear` or `exponential`".to_owned(),
                        |c| format!("did you mean '{c}'?"),
                    ),
                );
                Backoff::Constant
            }
        },
    };
    let multiplier = f.float("multiplier", d).unwrap_or(2.0);
    let jitter = f.float("jitter", d).unwrap_or(0.0);
    let mut retryable_exit_codes = Vec::new();
    if let Some(n) = f.take("retryable_exit_codes") {
        let cpath = f.child("retryable_exit_codes");
        match n.items() {
            Some(items) => {
                for (i, it) in items.iter().enumerate() {
                    if let Some(c) = d.int(it, &format!("{cpath}.{i}")) {
                        retryable_exit_codes.push(i32::try_from(c).unwrap_or(i32::MAX));
                    }
                }
            }
            None => d.wrong_type(&cpath, n, "a list of exit codes"),
        }
    }
    f.finish(d, &[], "retry");
    Some(RetryPolicy {
        max_attempts,
        initial_delay,
        max_delay,
        backoff,
        multiplier,
        jitter,
        retryable_exit_codes,
    })
}

fn decode_actions(node: &Node, path: &str, d: &mut Diags) -> Vec<HookAction> {
    let Some(items) = node.items() else {
        d.wrong_type(path, node, "a list of hook actions ({log} or {command})");
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let ipath = format!("{path}.{i}");
        let Some(mut f) = Fields::of(item, &ipath, d, "a hook action ({log} or {command})") else {
            continue;
        };
        let log = f.string("log", d);
        let command = f.string("command", d);
        f.finish(d, &[], "a hook action");
        match (log, command) {
            (Some(l), _) => out.push(HookAction::Log(l)),
            (None, Some(c)) => out.push(HookAction::Command(c)),
            (None, None) => {
                d.push(
                    awf_domain::ports::repository::Diagnostic::warning(
                        ErrorCode::WorkflowParseUnknownField,
                        &ipath,
                        "hook action has neither log nor command and does nothing",
                    ),
                    Some(item.pos),
                );
            }
        }
    }
    out
}

fn decode_workflow_hooks(node: &Node, path: &str, d: &mut Diags) -> WorkflowHooks {
    let mut h = WorkflowHooks::default();
    let Some(mut f) = Fields::of(node, path, d, "a mapping of workflow hooks") else {
        return h;
    };
    if let Some(n) = f.take("workflow_start") {
        h.workflow_start = decode_actions(n, &f.child("workflow_start"), d);
    }
    if let Some(n) = f.take("workflow_end") {
        h.workflow_end = decode_actions(n, &f.child("workflow_end"), d);
    }
    if let Some(n) = f.take("workflow_error") {
        h.workflow_error = decode_actions(n, &f.child("workflow_error"), d);
    }
    if let Some(n) = f.take("workflow_cancel") {
        h.workflow_cancel = decode_actions(n, &f.child("workflow_cancel"), d);
    }
    f.finish(d, &[], "workflow hooks");
    h
}

fn decode_step_hooks(node: &Node, path: &str, d: &mut Diags) -> StepHooks {
    let mut h = StepHooks::default();
    let Some(mut f) = Fields::of(node, path, d, "a mapping {pre, post}") else {
        return h;
    };
    if let Some(n) = f.take("pre") {
        h.pre = decode_actions(n, &f.child("pre"), d);
    }
    if let Some(n) = f.take("post") {
        h.post = decode_actions(n, &f.child("post"), d);
    }
    f.finish(d, &[], "step hooks");
    h
}

/// Parses `10MB`, `512KB`, `1GB`, `1024` (bytes; units are powers of 1024).
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim().to_ascii_uppercase();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let n: u64 = t[..digits_end].parse().ok()?;
    let mult: u64 = match t[digits_end..].trim() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// `capture:`: `max_size` (bytes) and the `stdout` / `stderr` variable names (noted as having
/// no run-time effect; the dry run shows them).
fn decode_capture(
    node: &Node,
    path: &str,
    d: &mut Diags,
) -> Option<(Option<u64>, awf_domain::workflow::CaptureNames)> {
    let mut f = Fields::of(node, path, d, "a mapping (capture)")?;
    let mut size = None;
    let names_note = "capture.stdout and capture.stderr only name the output in --dry-run; they have no effect at run time";
    let name = |f: &mut Fields<'_>, key: &'static str, d: &mut Diags| {
        let pos = f.key_pos(key);
        let value = f.take(key).and_then(|n| d.string(n, &f.child(key)));
        if value.is_some() {
            d.note(&f.child(key), pos, names_note);
        }
        value
    };
    let names = awf_domain::workflow::CaptureNames {
        stdout: name(&mut f, "stdout", d),
        stderr: name(&mut f, "stderr", d),
    };
    if let Some(n) = f.take("max_size") {
        let spath = f.child("max_size");
        if let Some(t) = d.string(n, &spath) {
            size = parse_size(&t);
            if size.is_none() {
                d.invalid(
                    &spath,
                    Some(n.pos),
                    format!("invalid size \"{t}\" (e.g. 1024, 512KB, 10MB)"),
                );
            }
        }
    }
    let note = "only capture.max_size has an effect; this key is ignored";
    f.finish(d, &[("encoding", note)], "capture");
    Some((size, names))
}

fn decode_command(f: &mut Fields<'_>, d: &mut Diags) -> Option<StateKind> {
    let command = f.string("command", d);
    let script = f.string("script_file", d);
    let dir = f.string("dir", d);
    let source = match (command, script) {
        (Some(c), None) => CommandSource::Inline(c),
        (None, Some(s)) => CommandSource::ScriptFile(s),
        (Some(_), Some(_)) => {
            d.error(
                ErrorCode::WorkflowValidationInvalidState,
                &f.child("script_file"),
                f.key_pos("script_file"),
                "command and script_file are mutually exclusive",
            )
            .hint = Some(
                "keep one: `command:` for a shell command written in the workflow, \
                 `script_file:` for a script in a file"
                    .to_owned(),
            );
            return None;
        }
        (None, None) => {
            let typo = f.misspelled(&["command", "script_file"]);
            let e = d.error(
                ErrorCode::WorkflowValidationInvalidState,
                &f.child("command"),
                Some(f.pos()),
                "a command step needs command or script_file",
            );
            e.hint = Some(
                "add `command: <shell command>` or `script_file: <path of a script>`".to_owned(),
            );
            name_typo(e, typo);
            return None;
        }
    };
    Some(StateKind::Command(CommandStep { source, dir }))
}

fn decode_agent(f: &mut Fields<'_>, d: &mut Diags) -> StateKind {
    let provider = f.string("provider", d).unwrap_or_default();
    let prompt = f.string("prompt", d);
    let prompt_file = f.string("prompt_file", d);
    let mode = f
        .string("mode", d)
        .map(|m| m.trim().to_ascii_lowercase())
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| "single".to_owned());
    let system_prompt = f.string("system_prompt", d);
    let role = f.string("role", d);
    let mut skills = Vec::new();
    if let Some(n) = f.take("skills") {
        let spath = f.child("skills");
        match n.items() {
            Some(items) => {
                for (i, it) in items.iter().enumerate() {
                    let ipath = format!("{spath}.{i}");
                    if it.entries().is_some() {
                        let Some(mut sf) = Fields::of(it, &ipath, d, "a skill") else {
                            continue;
                        };
                        match sf.string("path", d).filter(|p| !p.trim().is_empty()) {
                            Some(p) => skills.push(p),
                            None => {
                                d.missing(&ipath, Some(it.pos), "a skill mapping needs `path:`");
                            }
                        }
                        sf.finish(d, &[], "a skill");
                    } else if let Some(s) = d.string(it, &ipath) {
                        if s.trim().is_empty() {
                            d.syntax(&ipath, Some(it.pos), "skill name is empty");
                        } else {
                            skills.push(s);
                        }
                    }
                }
            }
            None => d.wrong_type(&spath, n, "a list of skills"),
        }
    }
    let options = match f.take("options") {
        Some(n) => d.json_map(n, &f.child("options")),
        None => IndexMap::new(),
    };
    let output_format = f
        .string("output_format", d)
        .map(|s| s.trim().to_ascii_lowercase());
    let conversation = f.take("conversation").and_then(|n| {
        let cpath = f.child("conversation");
        let mut cf = Fields::of(n, &cpath, d, "a mapping (conversation)")?;
        let continue_from = cf.string("continue_from", d);
        let inject_context = cf.string("inject_context", d);
        let removed = "removed from AWF; this key has no effect";
        cf.finish(
            d,
            &[
                ("max_turns", removed),
                ("max_context_tokens", removed),
                ("strategy", removed),
                ("stop_condition", removed),
            ],
            "conversation",
        );
        Some(ConversationConfig {
            continue_from,
            inject_context,
        })
    });
    // `conversation: {}` is an empty mapping; `take` treats null as absent, so an explicit
    // `conversation:` with no value still opts in.
    let conversation =
        conversation.or_else(|| f.has("conversation").then(ConversationConfig::default));
    let mcp_proxy = f
        .take("mcp_proxy")
        .and_then(|n| decode_mcp_proxy(n, &f.child("mcp_proxy"), d));
    let policy = Box::new(decode_agent_policy(f, d));
    StateKind::Agent(AgentStep {
        provider,
        prompt,
        prompt_file,
        mode,
        system_prompt,
        role,
        skills,
        options,
        output_format,
        conversation,
        mcp_proxy,
        policy,
    })
}

/// `mcp_proxy: {enable, intercept_builtins, plugin_tools: [{plugin, expose}]}` (mcp.md §1.1).
/// Any other key is one `USER.MCP_PROXY.UNKNOWN_KEY` error listing them all; nested entries
/// are read leniently, as AWF (Go) does. `intercept_builtins` absent follows `enable`.
fn decode_mcp_proxy(n: &Node, path: &str, d: &mut Diags) -> Option<McpProxyConfig> {
    const KEYS: [&str; 3] = ["enable", "intercept_builtins", "plugin_tools"];
    let mut f = Fields::of(n, path, d, "a mapping (mcp_proxy)")?;
    let unknown: Vec<&crate::node::MapEntry> = n
        .entries()
        .unwrap_or_default()
        .iter()
        .filter(|e| !KEYS.contains(&e.key.as_str()))
        .collect();
    if let Some(first) = unknown.first() {
        let names: Vec<String> = unknown.iter().map(|e| format!("\"{}\"", e.key)).collect();
        let diag = d.error(
            ErrorCode::UserMcpProxyUnknownKey,
            path,
            Some(first.key_pos),
            format!(
                "unknown key{} {} in mcp_proxy",
                if names.len() == 1 { "" } else { "s" },
                names.join(", ")
            ),
        );
        diag.hint = Some("mcp_proxy takes enable, intercept_builtins and plugin_tools".into());
    }
    let enable_written = f.has("enable");
    let enable = f.boolean("enable", d).unwrap_or(false);
    let intercept_builtins = f.boolean("intercept_builtins", d).unwrap_or(enable);
    let mut plugin_tools = Vec::new();
    if let Some(list) = f.take("plugin_tools") {
        let lpath = f.child("plugin_tools");
        match list.items() {
            Some(items) => {
                for (i, it) in items.iter().enumerate() {
                    let ipath = format!("{lpath}.{i}");
                    let Some(mut pf) = Fields::of(it, &ipath, d, "a mapping {plugin, expose}")
                    else {
                        continue;
                    };
                    let plugin = pf.string("plugin", d).unwrap_or_default();
                    let expose = pf.string_list("expose", d);
                    plugin_tools.push(McpPluginTools { plugin, expose });
                }
            }
            None => d.wrong_type(&lpath, list, "a list of {plugin, expose}"),
        }
    }
    Some(McpProxyConfig {
        enable,
        enable_written,
        intercept_builtins,
        plugin_tools,
    })
}

fn decode_parallel(f: &mut Fields<'_>, d: &mut Diags) -> StateKind {
    let branches = f.string_list("parallel", d);
    let strategy = match f
        .string("strategy", d)
        .map(|s| s.trim().to_ascii_lowercase())
    {
        None => ParallelStrategy::AllSucceed,
        Some(s) => match s.as_str() {
            "" | "all_succeed" => ParallelStrategy::AllSucceed,
            "any_succeed" => ParallelStrategy::AnySucceed,
            "best_effort" => ParallelStrategy::BestEffort,
            other => {
                d.invalid(
                    &f.child("strategy"),
                    f.key_pos("strategy"),
                    format!("invalid parallel strategy \"{other}\" (expected all_succeed, any_succeed or best_effort)"),
                )
                .hint = Some(
                    closest(other, ["all_succeed", "any_succeed", "best_effort"]).map_or_else(
                        || "write `strategy: all_succeed`, `any_succeed` or `best_effort`".to_owned(),
                        |c| format!("did you mean '{c}'?"),
                    ),
                );
                ParallelStrategy::AllSucceed
            }
        },
    };
    let max_concurrent = match f.int("max_concurrent", d) {
        Some(n) if n < 0 => {
            d.invalid(
                &f.child("max_concurrent"),
                f.key_pos("max_concurrent"),
                "max_concurrent must be >= 0",
            )
            .hint = Some("`max_concurrent: 0` (or none) runs every branch at once".to_owned());
            0
        }
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        None => 0,
    };
    StateKind::Parallel(ParallelStep {
        branches,
        strategy,
        max_concurrent,
    })
}

fn decode_loop(ty: &str, f: &mut Fields<'_>, d: &mut Diags) -> Option<StateKind> {
    let over = if ty == "for_each" {
        let items = f.take("items").and_then(|n| match &n.kind {
            NodeKind::Seq(_) => Some(n.to_json().to_string()),
            _ => d.string(n, &f.child("items")),
        });
        match items {
            Some(i) => LoopOver::Items(i),
            None => {
                let typo = f.misspelled(&["items"]);
                let e = d.error(
                    ErrorCode::WorkflowValidationInvalidState,
                    &f.child("items"),
                    Some(f.pos()),
                    "a for_each loop needs items",
                );
                e.hint = Some(
                    "add `items:`, a list (`items: [a, b]`) or a template giving a JSON list"
                        .to_owned(),
                );
                name_typo(e, typo);
                LoopOver::Items("[]".to_owned())
            }
        }
    } else {
        match f.string("while", d).filter(|w| !w.trim().is_empty()) {
            Some(w) => LoopOver::While(w),
            None => {
                let typo = f.misspelled(&["while"]);
                let e = d.error(
                    ErrorCode::WorkflowValidationInvalidState,
                    &f.child("while"),
                    Some(f.pos()),
                    "a while loop needs a while: condition",
                );
                e.hint = Some(
                    "add `while: <expression>`, checked before each round (an expression, not a template: `while: 'loop.Index < 5'`)"
                        .to_owned(),
                );
                name_typo(e, typo);
                LoopOver::While("false".to_owned())
            }
        }
    };
    let body = f.string_list("body", d);
    let max_iterations = match f.take("max_iterations") {
        None => MaxIterations::Static(0),
        Some(n) => {
            let mpath = f.child("max_iterations");
            match n.scalar() {
                Some(Scalar::Int(0)) => MaxIterations::Static(0),
                // Out of range as written (a number past u32 is said as it was written,
                // not clamped; trial 22 #7).
                Some(Scalar::Int(i)) if i < 0 || u32::try_from(i).is_err() => {
                    d.invalid(
                        &mpath,
                        Some(n.pos),
                        format!("max_iterations must be between 1 and 10000, got {i}"),
                    );
                    MaxIterations::Static(DEFAULT_MAX_ITERATIONS)
                }
                Some(Scalar::Int(i)) => MaxIterations::Static(u32::try_from(i).unwrap_or(u32::MAX)),
                Some(Scalar::Str(s)) => MaxIterations::Dynamic(s),
                _ => {
                    d.wrong_type(&mpath, n, "an integer or a template string");
                    MaxIterations::Static(DEFAULT_MAX_ITERATIONS)
                }
            }
        }
    };
    let break_when = f.string("break_when", d).filter(|b| !b.trim().is_empty());
    let on_complete = f.string("on_complete", d);
    Some(StateKind::Loop(LoopStep {
        over,
        body,
        max_iterations,
        break_when,
        on_complete,
    }))
}

fn decode_operation(f: &mut Fields<'_>, d: &mut Diags) -> StateKind {
    let operation = f.string("operation", d).unwrap_or_default();
    let mut inputs = match f.take("inputs") {
        Some(n) => d.json_map(n, &f.child("inputs")),
        None => IndexMap::new(),
    };
    if let Some(n) = f.take("operation_inputs") {
        inputs.extend(d.json_map(n, &f.child("operation_inputs")));
    }
    StateKind::Operation(OperationStep { operation, inputs })
}

/// Formats a YAML value as text the way Go's `%v` would for scalars; composites as JSON.
fn value_text(node: &Node) -> String {
    match &node.kind {
        NodeKind::Scalar { text, .. } => {
            if node.is_null() {
                String::new()
            } else {
                text.clone()
            }
        }
        _ => node.to_json().to_string(),
    }
}

fn string_map(node: &Node, path: &str, d: &mut Diags) -> IndexMap<String, String> {
    match node.entries() {
        Some(entries) => entries
            .iter()
            .map(|e| (e.key.clone(), value_text(&e.value)))
            .collect(),
        None => {
            d.wrong_type(path, node, "a mapping");
            IndexMap::new()
        }
    }
}

fn decode_call(f: &mut Fields<'_>, d: &mut Diags) -> StateKind {
    let mut workflow = f.string("workflow", d).unwrap_or_default();
    let mut inputs = match f.take("inputs") {
        Some(n) => string_map(n, &f.child("inputs"), d),
        None => IndexMap::new(),
    };
    let mut outputs = match f.take("outputs") {
        Some(n) => string_map(n, &f.child("outputs"), d),
        None => IndexMap::new(),
    };
    // The nested block fills what the flat keys leave out; a key given in both layouts is
    // read from the flat one, as AWF (Go) reads only those, and the nested one is named in
    // a warning (breaker: the nested one silently won).
    let flat = [
        ("workflow", f.has("workflow")),
        ("inputs", f.has("inputs")),
        ("outputs", f.has("outputs")),
    ];
    if let Some(n) = f.take("call_workflow") {
        let cpath = f.child("call_workflow");
        if let Some(mut cf) = Fields::of(n, &cpath, d, "a mapping {workflow, inputs, outputs}") {
            for (key, given) in flat {
                if given && cf.has(key) {
                    let at = cf.key_pos(key);
                    d.push(
                        awf_domain::ports::repository::Diagnostic::warning(
                            ErrorCode::WorkflowParseUnknownField,
                            cf.child(key),
                            format!(
                                "`{key}` is given both flat and in the nested `call_workflow:` \
                                 block: the flat `{key}` is used and `call_workflow.{key}` is \
                                 ignored (as AWF (Go), which reads only the flat keys)"
                            ),
                        )
                        .with_hint(format!(
                            "keep one layout: remove `call_workflow.{key}` or the flat `{key}`"
                        )),
                        at,
                    );
                }
            }
            if let Some(w) = cf.string("workflow", d)
                && !flat[0].1
            {
                workflow = w;
            }
            if let Some(n) = cf.take("inputs") {
                let nested = string_map(n, &cf.child("inputs"), d);
                if !flat[1].1 {
                    inputs = nested;
                }
            }
            if let Some(n) = cf.take("outputs") {
                let nested = string_map(n, &cf.child("outputs"), d);
                if !flat[2].1 {
                    outputs = nested;
                }
            }
            cf.finish(d, &[], "call_workflow");
        }
    }
    StateKind::CallWorkflow(CallWorkflowStep {
        workflow,
        inputs,
        outputs,
    })
}

fn decode_inputs(node: &Node, path: &str, d: &mut Diags) -> Vec<InputDef> {
    let Some(items) = node.items() else {
        d.wrong_type(path, node, "a list of inputs (- name: …)");
        if let Some(e) = d.list.last_mut() {
            e.hint = Some(
                "write inputs as a list, one `- name: …` item per input: \
                 `inputs: [{name: x, type: string}]`"
                    .to_owned(),
            );
        }
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let ipath = format!("{path}.{i}");
        let Some(mut f) = Fields::of(item, &ipath, d, "a mapping (an input)") else {
            continue;
        };
        let name = f.string("name", d);
        let ty = match f.string("type", d).map(|t| t.trim().to_ascii_lowercase()) {
            None => InputType::Untyped,
            Some(t) => match t.as_str() {
                "" => InputType::Untyped,
                "string" => InputType::String,
                "integer" => InputType::Integer,
                "number" => InputType::Number,
                "boolean" => InputType::Boolean,
                "array" => InputType::Array,
                _ => InputType::Unknown(t),
            },
        };
        let description = f.string("description", d);
        let required = f.boolean("required", d).unwrap_or(false);
        let default = f.take("default").map(Node::to_json);
        let mut validation = InputValidation::default();
        if let Some(v) = f.take("validation") {
            let vpath = f.child("validation");
            if let Some(mut vf) = Fields::of(v, &vpath, d, "a mapping (input validation)") {
                validation.pattern = vf.string("pattern", d);
                validation.enum_values = vf.string_list("enum", d);
                validation.min = vf.float("min", d);
                validation.max = vf.float("max", d);
                validation.file_exists = vf.boolean("file_exists", d).unwrap_or(false);
                validation.file_extension = match vf.take("file_extension") {
                    Some(n) if n.items().is_none() => d
                        .string(n, &vf.child("file_extension"))
                        .into_iter()
                        .collect(),
                    Some(n) => d.string_list(n, &vf.child("file_extension")),
                    None => Vec::new(),
                };
                vf.finish(d, &[], "input validation");
            }
        }
        let typo = f.misspelled(&["name"]);
        f.finish(d, &[], "an input");
        match name.filter(|n| !n.trim().is_empty()) {
            Some(name) => out.push(InputDef {
                name,
                ty,
                description,
                required,
                default,
                validation,
            }),
            None => {
                let e = d.missing(
                    &format!("{ipath}.name"),
                    Some(item.pos),
                    "name: required field missing",
                );
                name_typo(e, typo);
            }
        }
    }
    out
}

fn decode_outputs(node: &Node, path: &str, d: &mut Diags) -> Vec<OutputDef> {
    let Some(items) = node.items() else {
        d.wrong_type(path, node, "a list of outputs (- name: …, from: …)");
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let ipath = format!("{path}.{i}");
        let Some(mut f) = Fields::of(item, &ipath, d, "a mapping {name, from, description}") else {
            continue;
        };
        let name = f.string("name", d);
        let from = f.string("from", d);
        let description = f.string("description", d);
        let typo = f.misspelled(&["name", "from"]);
        f.finish(d, &[], "an output");
        match (name, from) {
            (Some(name), Some(from)) => out.push(OutputDef {
                name,
                from,
                description,
            }),
            (None, _) => {
                let e = d.missing(
                    &format!("{ipath}.name"),
                    Some(item.pos),
                    "name: required field missing",
                );
                name_typo(e, typo.filter(|(_, c)| *c == "name"));
            }
            (Some(_), None) => {
                let e = d.missing(
                    &format!("{ipath}.from"),
                    Some(item.pos),
                    "from: required field missing",
                );
                name_typo(e, typo.filter(|(_, c)| *c == "from"));
            }
        }
    }
    out
}
