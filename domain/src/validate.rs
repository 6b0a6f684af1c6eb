//! Pure workflow checks (no I/O): structural validation (spec/workflow.md §1.16) and the
//! static template-reference analysis (§2.10). Results are [`Diagnostic`]s with dotted
//! paths; callers add positions from the file's source map.
//!
//! Divergences from AWF (Go), per decisions.md: a non-terminal state with no way out is an
//! error; field names are accepted in PascalCase and lower/snake case alike
//! (`Output`/`output`, `ExitCode`/`exit_code`); a `while:` condition that can never be true
//! on its first check is a warning; unset `env:` names are warnings.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::collections::HashMap;
use std::collections::HashSet;
use std::collections::VecDeque;
use std::fmt;

use crate::error::ErrorCode;
use crate::ports::repository::Diagnostic;
use crate::ports::repository::Severity;
use crate::shell::ShellAction;
use crate::shell::ShellContext;
use crate::workflow::CommandSource;
use crate::workflow::HookAction;
use crate::workflow::InputType;
use crate::workflow::LoopOver;
use crate::workflow::LoopStep;
use crate::workflow::MAX_ITERATIONS_LIMIT;
use crate::workflow::MaxIterations;
use crate::workflow::State;
use crate::workflow::StateKind;
use crate::workflow::Workflow;

/// Edit distance between `a` and `b` by characters: insertions, deletions, substitutions and
/// swaps of two neighbours (`tyep` is one edit from `type`), as `strsim::osa_distance`.
pub fn levenshtein(a: &str, b: &str) -> usize {
    strsim::osa_distance(a, b)
}

/// The candidate closest to `word` (`None` when `word` is one of them): at most a third of
/// the word's characters apart, one edit at least and three at most (so `proces` finds
/// `process`, `tyep` finds `type`, and `nope` does not suggest `done`); ties go to the
/// earliest candidate. The one rule for every "did you mean" awf prints.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).clamp(1, 3);
    // Case is not an edit: `DEPLOY` finds `deploy` (breaker).
    let lower = word.to_lowercase();
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        if c == word {
            return None;
        }
        let d = levenshtein(&lower, &c.to_lowercase());
        // A word replaced whole is no typo of it (new user: `on_success: b` in state `a`
        // was told "did you mean 'a'?", a route to itself).
        let whole = d >= lower.chars().count().max(c.chars().count());
        if d <= limit && !whole && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// The candidate keys of which `word` is a whole `_`-separated part (`delay` in
/// `initial_delay` and `max_delay`), in the candidates' order, for a key that is no typo of
/// one ([`closest`] finds none) but a short form of it; none for a word under three
/// characters.
pub fn keys_with_part<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Vec<&'a str> {
    let word = word.to_lowercase();
    if word.chars().count() < 3 {
        return Vec::new();
    }
    let mut out: Vec<&str> = Vec::new();
    for c in candidates {
        let lower = c.to_lowercase();
        if lower != word && lower.split('_').any(|part| part == word) && !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// `did you mean 'a'?`, or `did you mean 'a' or 'b'?` (`'a', 'b' or 'c'`) for several
/// names; `None` for none.
pub fn did_you_mean(names: &[&str]) -> Option<String> {
    let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
    match quoted.split_last() {
        None => None,
        Some((last, [])) => Some(format!("did you mean {last}?")),
        Some((last, rest)) => Some(format!("did you mean {} or {last}?", rest.join(", "))),
    }
}

/// The hint for `name`, a state `wf` does not have: `did you mean 'x'?` ([`closest`]), else
/// the workflow's states (the first eight, internal `__inline_error_*` terminals left out).
pub fn unknown_state_hint(wf: &Workflow, name: &str) -> String {
    if let Some(c) = closest(name, wf.states.keys().map(String::as_str)) {
        return format!("did you mean '{c}'?");
    }
    // No near name: the states there are, a few (breaker: no hint).
    let names: Vec<&str> = wf
        .states
        .keys()
        .map(String::as_str)
        .filter(|n| crate::workflow::inline_error_step(n).is_none())
        .collect();
    let shown = names.iter().take(8).copied().collect::<Vec<_>>().join(", ");
    let more = names.len().saturating_sub(8);
    if more > 0 {
        format!("the workflow's states: {shown} and {more} more")
    } else {
        format!("the workflow's states: {shown}")
    }
}

/// The rule for inputs given as JSON (HTTP bodies, MCP tool arguments): a declared `string`
/// input takes a string, a number or a boolean (as its text), never a JSON object or list,
/// which would reach the step as JSON text that no mask of its value matches once the shell
/// has taken its quotes apart.
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` naming each such input (`inputs.api_token: expected a
/// string, not an object`); the value itself is never shown.
pub fn refuse_structured_text_inputs(
    declared: &[crate::workflow::InputDef],
    given: &serde_json::Map<String, serde_json::Value>,
) -> Result<(), crate::AwfError> {
    let bad: Vec<String> = declared
        .iter()
        .filter(|d| d.ty == crate::workflow::InputType::String)
        .filter_map(|d| {
            let kind = match given.get(&d.name)? {
                serde_json::Value::Object(_) => "an object",
                serde_json::Value::Array(_) => "a list",
                _ => return None,
            };
            Some(format!("inputs.{}: expected a string, not {kind}", d.name))
        })
        .collect();
    if bad.is_empty() {
        return Ok(());
    }
    Err(crate::AwfError::new(
        ErrorCode::UserInputValidationFailed,
        format!("input validation failed: {}", bad.join("; ")),
    )
    .with_hint("send a string input as a JSON string (its text)"))
}

/// How many undeclared input names [`refuse_undeclared_inputs`] names; the others are counted
/// (`… and 49980 more`): a request of 50,000 gave a 489 KB error.
pub const UNDECLARED_SHOWN: usize = 20;

/// The rule every remote front-end (HTTP, ACP, MCP workflows-as-tools, the shared store's
/// queue) applies to the inputs of a run it is asked to start: each name must be one the
/// workflow declares. (`awf run` only warns; either way an undeclared input is never exported
/// to a step's environment.)
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` naming the undeclared inputs (with the closest declared
/// name when one is close), with the declared inputs as hint.
pub fn refuse_undeclared_inputs(
    wf: &Workflow,
    given: &[(String, String)],
) -> Result<(), crate::AwfError> {
    let declared: Vec<&str> = wf.inputs.iter().map(|i| i.name.as_str()).collect();
    let mut bad: Vec<String> = Vec::new();
    // Names seen, so that a request of many thousands stays linear (each was compared with
    // every earlier one), and how many are left unnamed past the first [`UNDECLARED_SHOWN`].
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut more = 0usize;
    for (k, _) in given {
        let k = k.trim();
        if declared.contains(&k) || !seen.insert(k) {
            continue;
        }
        if bad.len() == UNDECLARED_SHOWN {
            more += 1;
            continue;
        }
        // A name is caller-controlled: keep the message short.
        let shown: String = if k.chars().count() > 64 {
            format!("{}…", k.chars().take(64).collect::<String>())
        } else {
            k.to_owned()
        };
        let mut one = format!("'{shown}'");
        if let Some(c) = closest(k, declared.iter().copied()) {
            one.push_str(&format!(" (did you mean '{c}'?)"));
        }
        bad.push(one);
    }
    if bad.is_empty() {
        return Ok(());
    }
    let hint = if declared.is_empty() {
        format!("workflow '{}' declares no inputs; pass none", wf.name)
    } else {
        format!(
            "workflow '{}' declares the inputs: {}",
            wf.name,
            declared.join(", ")
        )
    };
    Err(crate::AwfError::new(
        ErrorCode::UserInputValidationFailed,
        format!(
            "input{} {}{} {} not declared by workflow '{}'",
            if bad.len() == 1 { "" } else { "s" },
            bad.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            },
            if bad.len() + more == 1 { "is" } else { "are" },
            wf.name
        ),
    )
    .with_hint(hint))
}

fn missing_state(
    wf: &Workflow,
    path: String,
    owner: &str,
    field: &str,
    target: &str,
) -> Diagnostic {
    let names = wf
        .states
        .keys()
        .map(String::as_str)
        .filter(|n| crate::workflow::inline_error_step(n).is_none());
    let d = Diagnostic::error(
        ErrorCode::WorkflowValidationMissingState,
        path,
        format!("state \"{owner}\": {field} references unknown state \"{target}\""),
    );
    match closest(target, names) {
        Some(c) => d.with_hint(format!("did you mean '{c}'?")),
        None => d.with_hint(format!(
            "available states: {}",
            wf.states
                .keys()
                .filter(|n| crate::workflow::inline_error_step(n).is_none())
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn invalid_state(path: String, message: impl Into<String>) -> Diagnostic {
    Diagnostic::error(ErrorCode::WorkflowValidationInvalidState, path, message)
}

/// The path of state `name` in a diagnostic, `states.<name>` (`format!("{base}.prompt")`),
/// written out only when a diagnostic is made: most states get none, and a path made for
/// each state was a tenth of `awf list` (issue 9).
#[derive(Clone, Copy, Debug)]
struct StateBase<'a>(&'a str);

impl fmt::Display for StateBase<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "states.{}", self.0)
    }
}

/// Where a state names another, below the state's path: `field` (`on_success`), with an
/// index `field.<i>` (`parallel.0`), and a key after it `field.<i>.<after>`
/// (`transitions.0.goto`). Written out only for a reference to a state that does not exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RouteField {
    field: &'static str,
    index: Option<usize>,
    after: Option<&'static str>,
}

impl RouteField {
    /// `field` itself.
    fn named(field: &'static str) -> Self {
        Self {
            field,
            index: None,
            after: None,
        }
    }

    /// Item `index` of list `field`.
    fn item(field: &'static str, index: usize) -> Self {
        Self {
            field,
            index: Some(index),
            after: None,
        }
    }
}

impl fmt::Display for RouteField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.field)?;
        if let Some(i) = self.index {
            write!(f, ".{i}")?;
        }
        if let Some(after) = self.after {
            write!(f, ".{after}")?;
        }
        Ok(())
    }
}

/// Every state name referenced by `state`, with the field path suffix and field label.
fn targets(state: &State) -> Vec<(RouteField, &'static str, &str)> {
    let mut out: Vec<(RouteField, &'static str, &str)> = Vec::new();
    if let Some(t) = &state.on_success {
        out.push((RouteField::named("on_success"), "on_success", t));
    }
    if let Some(t) = &state.on_failure {
        out.push((RouteField::named("on_failure"), "on_failure", t));
    }
    for (i, t) in state.transitions.iter().enumerate() {
        let goto = RouteField {
            after: Some("goto"),
            ..RouteField::item("transitions", i)
        };
        out.push((goto, "transition goto", &t.goto));
    }
    match &state.kind {
        StateKind::Parallel(p) => {
            for (i, b) in p.branches.iter().enumerate() {
                out.push((RouteField::item("parallel", i), "parallel branch", b));
            }
        }
        StateKind::Loop(l) => {
            for (i, b) in l.body.iter().enumerate() {
                out.push((RouteField::item("body", i), "body", b));
            }
            if let Some(t) = &l.on_complete {
                out.push((RouteField::named("on_complete"), "on_complete", t));
            }
        }
        StateKind::Agent(a) => {
            if let Some(t) = a
                .conversation
                .as_ref()
                .and_then(|c| c.continue_from.as_ref())
            {
                let field = RouteField::named("conversation.continue_from");
                out.push((field, "continue_from", t));
            }
        }
        _ => {}
    }
    out
}

/// Structural checks run on every load: initial state, state references, a terminal exists,
/// per-type rules, that every non-terminal state has a way out, and [`containment`].
///
/// Codes: `WORKFLOW.VALIDATION.MISSING_STATE` (with a `did you mean` hint),
/// `WORKFLOW.VALIDATION.NO_EXIT`, `WORKFLOW.VALIDATION.INVALID_STATE`,
/// `WORKFLOW.VALIDATION.CYCLE_DETECTED`. All are errors. (Every cyclic group of blocks yields
/// at least one named cycle; fixing it reveals any other through the same states.)
/// Source: spec/workflow.md §1.5, §1.8, §1.16; decisions.md.
pub fn structural(wf: &Workflow) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    if !wf.states.contains_key(&wf.initial) {
        // A did-you-mean when a name is close, else the states there are (new user:
        // `initial: start` got no hint).
        let mut d = Diagnostic::error(
            ErrorCode::WorkflowValidationMissingState,
            "states.initial",
            format!("initial state \"{}\" does not exist", wf.initial),
        );
        if !wf.states.is_empty() {
            d = d.with_hint(unknown_state_hint(wf, &wf.initial));
        }
        out.push(d);
    }
    if !wf
        .states
        .values()
        .any(|s| matches!(s.kind, StateKind::Terminal(_)))
    {
        out.push(
            invalid_state("states".to_owned(), "workflow has no terminal state")
                .with_hint("add a state with `type: terminal`"),
        );
    }
    let mut branch_or_body: BTreeSet<&str> = BTreeSet::new();
    for s in wf.states.values() {
        match &s.kind {
            StateKind::Parallel(p) => branch_or_body.extend(p.branches.iter().map(String::as_str)),
            StateKind::Loop(l) => branch_or_body.extend(l.body.iter().map(String::as_str)),
            _ => {}
        }
    }
    for (name, s) in &wf.states {
        let base = StateBase(name);
        for (suffix, label, target) in targets(s) {
            if !wf.states.contains_key(target) {
                out.push(missing_state(
                    wf,
                    format!("{base}.{suffix}"),
                    name,
                    label,
                    target,
                ));
            }
        }
        let has_route =
            s.on_success.is_some() || s.on_failure.is_some() || !s.transitions.is_empty();
        match &s.kind {
            StateKind::Terminal(_) => {}
            StateKind::Loop(l) => {
                if l.on_complete.is_none()
                    && s.on_failure.is_none()
                    && !branch_or_body.contains(name.as_str())
                {
                    out.push(
                        Diagnostic::error(
                            ErrorCode::WorkflowValidationNoExit,
                            base.to_string(),
                            format!("loop \"{name}\" has no on_complete: the run would stop here"),
                        )
                        .with_hint("add `on_complete: <next state>`"),
                    );
                }
            }
            _ => {
                if !has_route && !branch_or_body.contains(name.as_str()) {
                    out.push(
                        Diagnostic::error(
                            ErrorCode::WorkflowValidationNoExit,
                            base.to_string(),
                            format!("state \"{name}\" has no way out (no on_success, on_failure or transitions)"),
                        )
                        .with_hint("add `on_success: <next state>`"),
                    );
                }
            }
        }
        // A route for failure only: the first success (a loop's completion) stops the run (a
        // new user's `on_failure` without `on_success` was "valid", then failed with
        // NO_ROUTE). Conditional transitions may cover every case: not judged.
        if s.on_failure.is_some()
            && s.on_success.is_none()
            && s.transitions.is_empty()
            && !branch_or_body.contains(name.as_str())
        {
            let unrouted = match &s.kind {
                StateKind::Terminal(_) => None,
                StateKind::Loop(l) => l.on_complete.is_none().then_some((
                    "loop",
                    "completes",
                    "add `on_complete: <next state>`",
                )),
                _ => Some((
                    "state",
                    "succeeds",
                    "add `on_success: <next state>` or a default transition (`- goto: <state>`)",
                )),
            };
            if let Some((noun, event, hint)) = unrouted {
                // continue_on_error takes the success route on a failure too, as in AWF
                // (Go): on_failure is never taken.
                let why = if s.continue_on_error && !matches!(s.kind, StateKind::Loop(_)) {
                    ", nor when it fails (continue_on_error takes the success route; its \
                     on_failure is never taken)"
                } else {
                    " (on_failure only)"
                };
                out.push(
                    Diagnostic::warning(
                        ErrorCode::WorkflowValidationNoExit,
                        base.to_string(),
                        format!(
                            "{noun} \"{name}\" has no route when it {event}{why}: \
                             the run would stop there with EXECUTION.WORKFLOW.NO_ROUTE"
                        ),
                    )
                    .with_hint(hint),
                );
            }
        }
        if let StateKind::Parallel(p) = &s.kind {
            branch_warnings(wf, name, &p.branches, &mut out);
        }
        per_type(name, s, base, &mut out);
        approval_checks(name, s, base, &mut out);
    }
    out.extend(nul_in_commands(wf));
    out.extend(containment(wf));
    out
}

/// The hint of a NUL byte in a command as written: how it got there in YAML.
pub const NUL_IN_YAML_HINT: &str = "in a YAML double-quoted string `\\0` is a NUL byte (so \
     `\"\\033\"` is NUL then `33`): write `\\e` or `\\x1b` for ESC, `\\\\033` to pass \
     `\\033` on to the command (printf), or use single quotes or a block scalar (`|`), \
     where a backslash is itself";

/// A text's path handed to a visitor of texts ([`inline_commands`], [`process_texts`]),
/// which makes it (`path()`) only when it reports something: most texts get no finding, and
/// a path made for each one was a tenth of `awf list` (issue 9).
type LazyPath<'a> = &'a dyn Fn() -> String;

/// Calls `f` with each hook command of `actions` and its path (`<path>.<i>`).
fn hook_commands(
    actions: &[HookAction],
    path: LazyPath<'_>,
    f: &mut dyn FnMut(&str, LazyPath<'_>),
) {
    for (i, a) in actions.iter().enumerate() {
        if let HookAction::Command(text) = a {
            f(text, &|| format!("{}.{i}", path()));
        }
    }
}

/// Calls `f` with each hook command of state `name` (its pre hooks, then its post hooks) and
/// its path (`states.<s>.hooks.pre.<i>`).
fn state_hook_commands(name: &str, state: &State, f: &mut dyn FnMut(&str, LazyPath<'_>)) {
    hook_commands(&state.hooks.pre, &|| format!("states.{name}.hooks.pre"), f);
    hook_commands(
        &state.hooks.post,
        &|| format!("states.{name}.hooks.post"),
        f,
    );
}

/// Calls `f` with each of the workflow's own hook commands and its path (`hooks.<hook>.<i>`).
fn workflow_hook_commands(wf: &Workflow, f: &mut dyn FnMut(&str, LazyPath<'_>)) {
    let h = &wf.hooks;
    hook_commands(&h.workflow_start, &|| "hooks.workflow_start".to_owned(), f);
    hook_commands(&h.workflow_end, &|| "hooks.workflow_end".to_owned(), f);
    hook_commands(&h.workflow_error, &|| "hooks.workflow_error".to_owned(), f);
    hook_commands(
        &h.workflow_cancel,
        &|| "hooks.workflow_cancel".to_owned(),
        f,
    );
}

/// Calls `f` with each command text written in `wf` and its path: a step's inline
/// `command:` (`states.<s>.command`), its pre and post hook commands
/// (`states.<s>.hooks.pre.<i>`), and the workflow's hook commands (`hooks.<hook>.<i>`).
fn inline_commands(wf: &Workflow, f: &mut dyn FnMut(&str, LazyPath<'_>)) {
    for (name, state) in &wf.states {
        if let StateKind::Command(c) = &state.kind
            && let CommandSource::Inline(text) = &c.source
        {
            f(text, &|| format!("states.{name}.command"));
        }
        state_hook_commands(name, state, f);
    }
    workflow_hook_commands(wf, f);
}

/// The hint of a NUL byte written in a text other than a command (a prompt, an option, a
/// working directory): how it got there in YAML.
pub const NUL_IN_TEXT_HINT: &str = "in a YAML double-quoted string `\\0` is a NUL byte: write \
     `\\\\0` for a backslash then `0`, or use single quotes or a block scalar (`|`), where a \
     backslash is itself";

/// Agent providers awf does not start a process for with the step's texts: `openai_compatible`
/// (HTTP) and `acp` (JSON-RPC over the agent's stdin), where a NUL byte travels as JSON's
/// `\u0000`. Every other provider is a CLI that gets the prompt, the system prompt and the
/// options on its command line.
const NON_ARGV_PROVIDERS: &[&str] = &["openai_compatible", "acp"];

/// Calls `f` with each text written in `wf` that a run hands to a process it starts, its path
/// and what it is: the command texts of [`inline_commands`] (`"command"`), a command step's
/// `dir:` (`states.<s>.dir`, the process's working directory), and, for an agent step whose
/// provider (as written, without a template) is a CLI awf starts (not one of
/// [`NON_ARGV_PROVIDERS`]), its `prompt`, `system_prompt`, `conversation.inject_context`
/// (sent with the prompt) and each string of its `options` (`states.<s>.options.<key>`, a
/// list's strings `.<i>`), which reach the CLI's argv.
fn process_texts(wf: &Workflow, f: &mut dyn FnMut(&str, LazyPath<'_>, &'static str)) {
    fn option_strings(
        v: &serde_json::Value,
        path: LazyPath<'_>,
        f: &mut dyn FnMut(&str, LazyPath<'_>, &'static str),
    ) {
        match v {
            serde_json::Value::String(s) => f(s, path, "option"),
            serde_json::Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    option_strings(item, &|| format!("{}.{i}", path()), f);
                }
            }
            serde_json::Value::Object(m) => {
                for (k, item) in m {
                    option_strings(item, &|| format!("{}.{k}", path()), f);
                }
            }
            serde_json::Value::Null | serde_json::Value::Bool(_) | serde_json::Value::Number(_) => {
            }
        }
    }
    inline_commands(wf, &mut |text, path| f(text, path, "command"));
    for (name, state) in &wf.states {
        match &state.kind {
            StateKind::Command(c) => {
                if let Some(dir) = &c.dir {
                    f(dir, &|| format!("states.{name}.dir"), "working directory");
                }
            }
            StateKind::Agent(a) => {
                let provider = a.provider.trim();
                if provider.contains("{{") || NON_ARGV_PROVIDERS.contains(&provider) {
                    continue;
                }
                let base = StateBase(name);
                if let Some(p) = &a.prompt {
                    f(p, &|| format!("{base}.prompt"), "prompt");
                }
                if let Some(s) = &a.system_prompt {
                    f(s, &|| format!("{base}.system_prompt"), "system prompt");
                }
                if let Some(c) = a
                    .conversation
                    .as_ref()
                    .and_then(|c| c.inject_context.as_ref())
                {
                    f(
                        c,
                        &|| format!("{base}.conversation.inject_context"),
                        "context",
                    );
                }
                for (k, v) in &a.options {
                    option_strings(v, &|| format!("{base}.options.{k}"), f);
                }
            }
            _ => {}
        }
    }
}

/// Errors (`WORKFLOW.VALIDATION.INVALID_STATE`) for texts that hold a NUL byte as written and
/// that a run passes to a process (`process_texts`): a step's inline `command:`, a step's
/// or the workflow's hook commands, a command step's `dir:`, and a CLI agent's prompt,
/// system prompt, injected context and option strings. No command line (nor working
/// directory) can carry one, so the run would fail at the step every time; it is almost
/// always a YAML double-quoted `\0` (`"printf '\033]0;x\007'"`). Each at the text's path, with
/// [`NUL_IN_YAML_HINT`] for a command, [`NUL_IN_TEXT_HINT`] for the others.
pub fn nul_in_commands(wf: &Workflow) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let mut check = |text: &str, path: LazyPath<'_>, what: &'static str| {
        let Some(at) = text.bytes().position(|b| b == 0) else {
            return;
        };
        let at = at + 1;
        let path = path();
        let d = if what == "command" {
            invalid_state(
                path,
                format!(
                    "the command holds a NUL byte (at byte {at}), which no command line can carry: the run would fail here"
                ),
            )
            .with_hint(NUL_IN_YAML_HINT)
        } else {
            let why = if what == "working directory" {
                "no path can carry"
            } else {
                "no command line can carry (the agent's CLI gets it as an argument)"
            };
            invalid_state(
                path,
                format!(
                    "the {what} holds a NUL byte (at byte {at}), which {why}: the run would fail here"
                ),
            )
            .with_hint(NUL_IN_TEXT_HINT)
        };
        out.push(d);
    };
    process_texts(wf, &mut check);
    out
}

/// Warnings about the branches of parallel `name`: one listed more than once runs that
/// many times at once under one name, its runs sharing one record and one output (breaker:
/// `-o buffered` showed each run's output under the other's `✓` line); a terminal runs
/// nothing, its status never reaching the block (breaker: a `status: failure` branch left an
/// all_succeed block successful, without a word).
fn branch_warnings(wf: &Workflow, name: &str, branches: &[String], out: &mut Vec<Diagnostic>) {
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for b in branches.iter().filter(|b| seen.insert(b.as_str())) {
        let path = format!("states.{name}.parallel");
        let n = branches.iter().filter(|x| *x == b).count();
        if n > 1 {
            out.push(
                Diagnostic::warning(
                    ErrorCode::WorkflowValidationInvalidState,
                    path.clone(),
                    format!(
                        "branch \"{b}\" is listed {n} times in parallel \"{name}\": its runs share one record (the last to end is kept) and one output"
                    ),
                )
                .with_hint("list it once, or copy the state under other names"),
            );
        }
        if wf
            .states
            .get(b)
            .is_some_and(|t| matches!(t.kind, StateKind::Terminal(_)))
        {
            out.push(
                Diagnostic::warning(
                    ErrorCode::WorkflowValidationInvalidState,
                    path,
                    format!(
                        "branch \"{b}\" of parallel \"{name}\" is a terminal: it runs nothing, and its status does not count for the block"
                    ),
                )
                .with_hint(format!(
                    "remove it from the branches; to end the run there, route to it from the block (`on_failure: {b}`)"
                )),
            );
        }
    }
}

/// Deepest nesting of parallel blocks and loops that a workflow may use (a parallel whose
/// branch is a loop whose body is a parallel is depth 3). Deeper nesting is rejected by
/// [`containment`] and by the engine's guard: each level costs stack at run time (a debug
/// build overflowed a 2 MiB worker stack between 24 and 28 levels); 16 leaves room for
/// sub-workflows below, within the engine's run-time limit over the whole call chain.
pub const MAX_NESTING: usize = 16;

/// Children a container runs: parallel branches and loop bodies (empty for other kinds).
fn children(s: &State) -> &[String] {
    match &s.kind {
        StateKind::Parallel(p) => &p.branches,
        StateKind::Loop(l) => &l.body,
        _ => &[],
    }
}

/// Containment checks: a parallel block or loop that contains itself, directly
/// (`p: [slow, p]`) or through other blocks and loops (`p1: [p2]` + `p2: [p1]`, a loop body
/// holding the parallel that holds the loop), and nesting deeper than [`MAX_NESTING`].
///
/// Code `WORKFLOW.VALIDATION.CYCLE_DETECTED` (path `states.<first state of the cycle>`, the
/// message names the cycle `a -> b -> a`) and `WORKFLOW.VALIDATION.INVALID_STATE` for depth;
/// all errors; a loop listing itself in its own body (`a: {body: [a]}`) is the cycle `a -> a`.
/// Every walk here keeps a visited set, so it ends on any graph. The engine runs the same
/// check before a run starts (it would otherwise recurse without end).
/// Source: spec/workflow.md §3.4, §3.5; issue 7.
pub fn containment(wf: &Workflow) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    // Only containers can contain themselves or nest: a state without children has depth 0
    // and is on no cycle, and is left out of both walks (a 200-step chain had each of its
    // steps hashed a dozen times here, issue 9).
    let is_container = |name: &str| wf.states.get(name).is_some_and(|s| !children(s).is_empty());
    let names: Vec<&str> = wf
        .states
        .iter()
        .filter(|(_, s)| !children(s).is_empty())
        .map(|(n, _)| n.as_str())
        .collect();
    // 0 = unvisited, 1 = on the stack, 2 = done.
    let mut color: HashMap<&str, u8> = HashMap::new();
    let mut seen_cycles: BTreeSet<Vec<&str>> = BTreeSet::new();
    for start in &names {
        if color.get(start).copied().unwrap_or(0) != 0 {
            continue;
        }
        // Iterative DFS: (node, index of the next child to visit).
        let mut stack: Vec<(&str, usize)> = vec![(start, 0)];
        color.insert(start, 1);
        while let Some(top) = stack.last_mut() {
            let (node, next) = *top;
            let kids = wf.states.get(node).map_or(&[][..], children);
            if next >= kids.len() {
                color.insert(node, 2);
                stack.pop();
                continue;
            }
            top.1 += 1;
            let child = kids[next].as_str();
            if !is_container(child) {
                continue;
            }
            match color.get(child).copied().unwrap_or(0) {
                0 => {
                    color.insert(child, 1);
                    stack.push((child, 0));
                }
                1 => {
                    let from = stack.iter().position(|(n, _)| *n == child).unwrap_or(0);
                    let cycle: Vec<&str> = stack[from..].iter().map(|(n, _)| *n).collect();
                    let mut key = cycle.clone();
                    key.sort_unstable();
                    if !seen_cycles.insert(key) {
                        continue;
                    }
                    let mut shown = cycle.clone();
                    shown.push(child);
                    let first = cycle[0];
                    out.push(
                        Diagnostic::error(
                            ErrorCode::WorkflowValidationCycleDetected,
                            format!("states.{first}"),
                            format!(
                                "state \"{first}\" contains itself: {} (a parallel block or loop cannot run inside itself)",
                                shown.join(" -> ")
                            ),
                        )
                        .with_hint("remove the state from the branches or body that lead back to it; use a while loop to repeat steps"),
                    );
                }
                _ => {}
            }
        }
    }
    if !out.is_empty() {
        return out;
    }
    // Acyclic: nesting depth of each container, children first (iterative post-order, so a
    // long chain cannot exhaust the validator's own stack).
    // `expanded` guards the walk on its own: each state pushes its children once, so it
    // ends even on a graph with a cycle the check above would have caught.
    let mut depth: HashMap<&str, usize> = HashMap::new();
    let mut expanded_once: BTreeSet<&str> = BTreeSet::new();
    for start in &names {
        let mut stack: Vec<(&str, bool)> = vec![(start, false)];
        while let Some((n, expanded)) = stack.pop() {
            if depth.contains_key(n) {
                continue;
            }
            let kids = wf.states.get(n).map_or(&[][..], children);
            if !expanded && !expanded_once.insert(n) {
                continue;
            }
            if expanded {
                // A child that is a state but no container is one level below.
                let d = kids
                    .iter()
                    .filter(|k| wf.states.contains_key(*k))
                    .map(|k| depth.get(k.as_str()).copied().unwrap_or(0) + 1)
                    .max()
                    .unwrap_or(0);
                depth.insert(n, d);
                continue;
            }
            stack.push((n, true));
            for k in kids {
                if is_container(k) && !depth.contains_key(k.as_str()) {
                    stack.push((k.as_str(), false));
                }
            }
        }
    }
    if let Some((n, d)) = names
        .iter()
        .filter_map(|n| depth.get(n).map(|d| (*n, *d)))
        .find(|(_, d)| *d > MAX_NESTING)
    {
        out.push(invalid_state(
            format!("states.{n}"),
            format!(
                "state \"{n}\" nests parallel blocks and loops {d} levels deep (at most {MAX_NESTING})"
            ),
        ).with_hint("flatten the nesting: run inner blocks one after another"));
    }
    out
}

/// Route edges for reachability: every route of a state, a container's children, and from
/// each child back to its container (a branch or body step returns there when it ends). The
/// routes of a state that only runs as a parallel branch are left out: the block ignores them.
fn route_graph(wf: &Workflow) -> HashMap<&str, Vec<&str>> {
    // A state that runs only as a parallel branch: the block ignores its own routes.
    let mut routed: BTreeSet<&str> = BTreeSet::new();
    let mut branches: BTreeSet<&str> = BTreeSet::new();
    for s in wf.states.values() {
        routed.extend(s.on_success.as_deref());
        routed.extend(s.on_failure.as_deref());
        routed.extend(s.transitions.iter().map(|t| t.goto.as_str()));
        match &s.kind {
            StateKind::Parallel(p) => branches.extend(p.branches.iter().map(String::as_str)),
            StateKind::Loop(l) => {
                routed.extend(l.body.iter().map(String::as_str));
                routed.extend(l.on_complete.as_deref());
            }
            _ => {}
        }
    }
    routed.insert(wf.initial.as_str());
    let mut g: HashMap<&str, Vec<&str>> = HashMap::new();
    for (name, s) in &wf.states {
        let e = g.entry(name.as_str()).or_default();
        if branches.contains(name.as_str()) && !routed.contains(name.as_str()) {
            e.extend(children(s).iter().map(String::as_str));
        } else {
            e.extend(successors(s, true));
        }
        for c in children(s) {
            if wf.states.contains_key(c) {
                g.entry(c.as_str()).or_default().push(name.as_str());
            }
        }
    }
    g
}

/// Reachability over all routes (conditional transitions included): a state reachable from
/// `initial` from which no terminal state can be reached is an error (the run can never end
/// well: `a -> b -> a`); a state that `initial` never reaches is a warning.
///
/// A state with no route at all (already a `NO_EXIT` error) and a route to an unknown state
/// (already a `MISSING_STATE` error) count as ends here, so one mistake is reported once.
/// Codes: `WORKFLOW.VALIDATION.NO_EXIT` (error, path `states.<first trapped state>`, the
/// message lists the trapped states), `WORKFLOW.VALIDATION.INVALID_TRANSITION` (warning,
/// path `states.<name>`). Source: spec/workflow.md §1.16; issue 7.
pub fn reachability(wf: &Workflow) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    if !wf.states.contains_key(&wf.initial) {
        return out;
    }
    let g = route_graph(wf);
    let mut reached: BTreeSet<&str> = BTreeSet::new();
    let mut queue: VecDeque<&str> = VecDeque::from([wf.initial.as_str()]);
    while let Some(n) = queue.pop_front() {
        if !wf.states.contains_key(n) || !reached.insert(n) {
            continue;
        }
        queue.extend(g.get(n).into_iter().flatten().copied());
    }
    // Reverse search from the ends.
    let mut rev: HashMap<&str, Vec<&str>> = HashMap::new();
    for (from, tos) in &g {
        for to in tos {
            rev.entry(*to).or_default().push(*from);
        }
    }
    let mut ends: VecDeque<&str> = VecDeque::new();
    for (name, s) in &wf.states {
        let succ = g.get(name.as_str()).map_or(&[][..], Vec::as_slice);
        if matches!(s.kind, StateKind::Terminal(_))
            || succ.is_empty()
            || succ.iter().any(|t| !wf.states.contains_key(*t))
        {
            ends.push_back(name.as_str());
        }
    }
    let mut ok: BTreeSet<&str> = BTreeSet::new();
    while let Some(n) = ends.pop_front() {
        if !ok.insert(n) {
            continue;
        }
        ends.extend(rev.get(n).into_iter().flatten().copied());
    }
    let trapped: Vec<&str> = wf
        .states
        .keys()
        .map(String::as_str)
        .filter(|n| reached.contains(n) && !ok.contains(n))
        .collect();
    if let Some(first) = trapped.first() {
        out.push(
            Diagnostic::error(
                ErrorCode::WorkflowValidationNoExit,
                format!("states.{first}"),
                format!(
                    "no terminal state can be reached from {}: {} (every route leads back into these states)",
                    if trapped.len() == 1 { "state" } else { "states" },
                    trapped.join(", ")
                ),
            )
            .with_hint("route one of them to a terminal state (on_success, on_failure or a transition)"),
        );
    }
    // A route to an unknown state (its own error) makes the states behind it look
    // unreachable: no warnings then.
    let broken_route = g.values().flatten().any(|t| !wf.states.contains_key(*t));
    for name in wf.states.keys() {
        if broken_route {
            break;
        }
        if !reached.contains(name.as_str()) && crate::workflow::inline_error_step(name).is_none() {
            out.push(
                Diagnostic::warning(
                    ErrorCode::WorkflowValidationInvalidTransition,
                    format!("states.{name}"),
                    format!(
                        "state \"{name}\" is never reached from the initial state \"{}\"",
                        wf.initial
                    ),
                )
                .with_hint("route to it from another state, or remove it"),
            );
        }
    }
    out
}

/// Branch children of a parallel block that declare routes (`on_success`, `on_failure`,
/// `transitions`, a loop's `on_complete`): the block ignores them (it continues with its own
/// `on_success`/`on_failure` when all branches end).
///
/// Code `WORKFLOW.VALIDATION.INVALID_TRANSITION`, severity Warning, path
/// `states.<branch>.<field>`. Source: spec/workflow.md §3.4; issue 7.
pub fn ignored_branch_routes(wf: &Workflow) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let mut warned: BTreeSet<&str> = BTreeSet::new();
    for (parent, s) in &wf.states {
        let StateKind::Parallel(p) = &s.kind else {
            continue;
        };
        for b in &p.branches {
            let Some(child) = wf.states.get(b) else {
                continue;
            };
            // A block listing itself is a containment cycle, reported by `containment`.
            if b == parent || !warned.insert(b.as_str()) {
                continue;
            }
            let on_complete = matches!(&child.kind, StateKind::Loop(l) if l.on_complete.is_some());
            out.extend(ignored_keys(
                b,
                &[
                    ("on_success", child.on_success.is_some()),
                    ("on_failure", child.on_failure.is_some()),
                    ("transitions", !child.transitions.is_empty()),
                    ("on_complete", on_complete),
                ],
                &format!("is a branch of parallel \"{parent}\""),
                "the block continues with its own on_success/on_failure",
                format!("move the routing to \"{parent}\", or remove it from \"{b}\""),
            ));
        }
    }
    out
}

/// Routes a loop does not take: its own `transitions` (a loop goes on with `on_complete`, or
/// `on_success`, when it completes and `on_failure` when it fails), and the `on_failure` of a
/// step in its body (a failed body step fails the loop; the loop's `on_failure` routes it),
/// but for an `on_failure` that names the loop itself (the loop goes on with its next item).
/// A body step's `on_success`, `transitions` and `continue_on_error` are kept: one that
/// leaves the body ends the loop there, and `continue_on_error` takes the success route on a
/// failure as anywhere else (the body goes on), as in AWF (Go).
///
/// Code `WORKFLOW.VALIDATION.INVALID_TRANSITION`, severity Warning, path
/// `states.<state>.<field>`. Source: a new user's trial (stop 24: the keys were silently
/// ignored).
pub fn ignored_loop_routes(wf: &Workflow) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let mut warned: BTreeSet<&str> = BTreeSet::new();
    for (name, s) in &wf.states {
        let StateKind::Loop(l) = &s.kind else {
            continue;
        };
        if !s.transitions.is_empty() {
            out.push(
                Diagnostic::warning(
                    ErrorCode::WorkflowValidationInvalidTransition,
                    format!("states.{name}.transitions"),
                    format!(
                        "loop \"{name}\" does not evaluate transitions: it goes on with on_complete (or on_success) when it completes, with on_failure when it fails"
                    ),
                )
                .with_hint("route with on_complete / on_failure, and end it early with break_when"),
            );
        }
        for b in &l.body {
            let Some(child) = wf.states.get(b) else {
                continue;
            };
            if b == name || !warned.insert(b.as_str()) {
                continue;
            }
            // Routed back to its own loop, a failure goes on with the next item (the
            // engine's one exception).
            let ignored = child.on_failure.as_deref().is_some_and(|t| t != name);
            // With continue_on_error a failure takes the success route and the body goes on,
            // as in AWF (Go): only the on_failure is left unused (a new user was told the
            // continue_on_error was ignored, and the run honoured it).
            let (why, hint) = if child.continue_on_error {
                (
                    "continue_on_error takes the success route on a failure, and the body goes on",
                    format!(
                        "remove the on_failure, or remove continue_on_error to fail the loop on a failure (the on_failure of \"{name}\" then routes it)"
                    ),
                )
            } else {
                (
                    "a failed body step fails the loop",
                    format!(
                        "route the failure with the on_failure of \"{name}\", set continue_on_error: true to go on with the body, or let the command itself succeed (`cmd || true`)"
                    ),
                )
            };
            out.extend(ignored_keys(
                b,
                &[("on_failure", ignored)],
                &format!("is in the body of loop \"{name}\""),
                why,
                hint,
            ));
        }
    }
    out
}

/// Routes of a loop in another loop's body that do not do there what their author most
/// likely meant. The outer loop routes the inner loop's next state as it routes any body
/// step's (spec/workflow.md §3.5), as AWF (Go) does:
///
/// * an `on_complete` that leaves the outer loop's body (names neither the outer loop nor a
///   state of its body): each time the inner loop completes, the outer loop ends there, its
///   remaining iterations not run, and the run goes on at that state. Not reported when the
///   inner loop has another way to go on with the outer one (its `on_failure` names the outer
///   loop, or a state of its body routes to the outer loop or to another state of its body):
///   leaving is then a choice (`find the first item whose checks all pass`);
/// * an `on_success` without `on_complete`: not taken there (the body goes on with its next
///   step), unless it names the outer loop or that next step.
///
/// Code `WORKFLOW.VALIDATION.INVALID_TRANSITION`, severity Warning, path
/// `states.<inner>.on_complete` / `states.<inner>.on_success`. Source: a breaker's nested
/// loops (the run ended in the outer loop's first iteration, `awf validate` silent).
pub fn nested_loop_routes(wf: &Workflow) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let mut warned: BTreeSet<String> = BTreeSet::new();
    for (outer, o) in &wf.states {
        let StateKind::Loop(ol) = &o.kind else {
            continue;
        };
        for (at, inner) in ol.body.iter().enumerate() {
            // A loop in its own body is a containment cycle, reported by `containment`.
            let Some(i) = wf.states.get(inner).filter(|_| inner != outer) else {
                continue;
            };
            let StateKind::Loop(il) = &i.kind else {
                continue;
            };
            let in_outer_body = |t: &str| t == outer || ol.body.iter().any(|b| b == t);
            match (&il.on_complete, &i.on_success) {
                (Some(t), _) if wf.states.contains_key(t) && !in_outer_body(t) => {
                    // The inner loop's body (or its failure) may go on with the outer loop.
                    let other_way = i.on_failure.as_deref() == Some(outer.as_str())
                        || il.body.iter().filter_map(|b| wf.states.get(b)).any(|s| {
                            s.on_success
                                .iter()
                                .chain(s.transitions.iter().map(|t| &t.goto))
                                .any(|t| t != inner && in_outer_body(t))
                        });
                    let path = format!("states.{inner}.on_complete");
                    if other_way || !warned.insert(path.clone()) {
                        continue;
                    }
                    let already = if ol.on_complete.as_deref() == Some(t.as_str()) {
                        format!(" (\"{outer}\" already goes on to \"{t}\" when it is done)")
                    } else {
                        format!(
                            "; to go to \"{t}\" once \"{outer}\" is done, make it the on_complete of \"{outer}\""
                        )
                    };
                    out.push(
                        Diagnostic::warning(
                            ErrorCode::WorkflowValidationInvalidTransition,
                            path,
                            format!(
                                "loop \"{inner}\" is in the body of loop \"{outer}\" but its on_complete \"{t}\" is not: each time \"{inner}\" completes, \"{outer}\" ends there without its remaining iterations, and the run goes on at \"{t}\""
                            ),
                        )
                        .with_hint(format!(
                            "to go on with \"{outer}\" (its next body step, then its next iteration), set `on_complete: {outer}` or remove on_complete{already}"
                        )),
                    );
                }
                (None, Some(t)) => {
                    let next = ol.body.get(at + 1).map(String::as_str);
                    if t == outer || Some(t.as_str()) == next {
                        continue;
                    }
                    let path = format!("states.{inner}.on_success");
                    if !warned.insert(path) {
                        continue;
                    }
                    out.extend(ignored_keys(
                        inner,
                        &[("on_success", true)],
                        &format!("is a loop in the body of loop \"{outer}\""),
                        "when it completes, the body goes on with its next step, as in AWF (Go)",
                        format!(
                            "to route \"{inner}\" when it completes, use on_complete (`on_complete: {outer}` goes on with \"{outer}\"); otherwise remove on_success"
                        ),
                    ));
                }
                _ => {}
            }
        }
    }
    out
}

/// The warning that the keys of `keys` set on `state` (`(key, set)`) are ignored where it
/// stands (`context`, `why`), at the first one's path; `None` when none is set.
fn ignored_keys(
    state: &str,
    keys: &[(&str, bool)],
    context: &str,
    why: &str,
    hint: String,
) -> Option<Diagnostic> {
    let set: Vec<&str> = keys.iter().filter(|(_, on)| *on).map(|(k, _)| *k).collect();
    let first = set.first()?;
    Some(
        Diagnostic::warning(
            ErrorCode::WorkflowValidationInvalidTransition,
            format!("states.{state}.{first}"),
            format!(
                "\"{state}\" {context}: its {} {} ignored there ({why})",
                set.join(", "),
                if set.len() == 1 { "is" } else { "are" }
            ),
        )
        .with_hint(hint),
    )
}

/// `approval:` gates: option ids unique, at least one option that allows and one that
/// rejects, `on_timeout` naming an option (or approve / reject), and only with a `timeout`.
fn approval_checks(name: &str, s: &State, base: impl fmt::Display, out: &mut Vec<Diagnostic>) {
    let Some(a) = &s.approval else {
        return;
    };
    let path = format!("{base}.approval");
    let mut seen = BTreeSet::new();
    for o in &a.options {
        if !seen.insert(o.id.as_str()) {
            out.push(invalid_state(
                format!("{path}.options"),
                format!(
                    "approval of \"{name}\": option id \"{}\" is used twice",
                    o.id
                ),
            ));
        }
    }
    // An exact id wins over a menu position and over the `on_timeout` keywords: say so where
    // an id reads as something else.
    for (i, o) in a.options.iter().enumerate() {
        let id = o.id.trim();
        if let Ok(n) = id.parse::<usize>()
            && (1..=a.options.len()).contains(&n)
            && n != i + 1
        {
            out.push(
                Diagnostic::warning(
                    ErrorCode::WorkflowValidationInvalidState,
                    format!("{path}.options.{i}.id"),
                    format!(
                        "approval of \"{name}\": option id \"{id}\" is also the menu number of option {n}; typing {id} picks this option (an exact id wins)"
                    ),
                )
                .with_hint("use an id that is not a number"),
            );
        }
        let keyword_allows = match id.to_ascii_lowercase().as_str() {
            "approve" | "allow" => Some(true),
            "reject" | "deny" => Some(false),
            _ => None,
        };
        if keyword_allows.is_some_and(|k| k != o.kind.allows()) {
            out.push(
                Diagnostic::warning(
                    ErrorCode::WorkflowValidationInvalidState,
                    format!("{path}.options.{i}.id"),
                    format!(
                        "approval of \"{name}\": option id \"{id}\" is an on_timeout keyword of the other side ({}); `on_timeout: {id}` names this option (an exact id wins)",
                        o.kind.as_str()
                    ),
                )
                .with_hint("use an id that is not approve, allow, reject or deny"),
            );
        }
    }
    if !a.options.iter().any(|o| o.kind.allows()) {
        out.push(
            invalid_state(
                format!("{path}.options"),
                format!("approval of \"{name}\" has no option that allows the step to run"),
            )
            .with_hint("give one option `kind: allow_once` (or allow_always)"),
        );
    }
    if !a.options.iter().any(|o| !o.kind.allows()) {
        out.push(
            invalid_state(
                format!("{path}.options"),
                format!("approval of \"{name}\" has no option that rejects the step"),
            )
            .with_hint("give one option `kind: reject_once` (or reject_always)"),
        );
    }
    if let Some(t) = &a.on_timeout {
        if a.timeout_option().is_none() {
            let ids: Vec<&str> = a.options.iter().map(|o| o.id.as_str()).collect();
            let mut d = invalid_state(
                format!("{path}.on_timeout"),
                format!(
                    "approval of \"{name}\": on_timeout \"{t}\" names no option (options: {}; or approve / reject)",
                    ids.join(", ")
                ),
            );
            if let Some(c) = closest(t, ids.iter().copied()) {
                d = d.with_hint(format!("did you mean '{c}'?"));
            }
            out.push(d);
        } else if a.timeout.is_none() {
            out.push(Diagnostic::warning(
                ErrorCode::WorkflowValidationInvalidState,
                format!("{path}.on_timeout"),
                format!("approval of \"{name}\": on_timeout has no effect without a timeout"),
            ));
        }
    }
}

/// `WORKFLOW.VALIDATION.UNKNOWN_OPERATION` for operation id `id` of state `name` (not one of
/// [`crate::ports::operations::BUILTIN_OPERATIONS`]), with a did-you-mean.
fn unknown_operation(name: &str, id: &str, path: &str) -> Diagnostic {
    let known = crate::ports::operations::BUILTIN_OPERATIONS;
    let mut d = Diagnostic::error(
        ErrorCode::WorkflowValidationUnknownOperation,
        path.to_owned(),
        format!("operation state \"{name}\": unknown operation \"{id}\""),
    );
    let list = format!("awf provides: {}", known.join(", "));
    d = match closest(id, known.iter().copied()) {
        Some(c) => d.with_hint(format!("did you mean '{c}'? ({list})")),
        None => d.with_hint(list),
    };
    d
}

/// The `inputs:` of operation state `name` running built-in operation `id`: a name the
/// operation does not take ([`crate::ports::operations::builtin_inputs_of`]) is an
/// `INVALID_STATE` error with a did-you-mean (the operation refuses it at run time too), and
/// for `http.request` a literal `method` (no `{{`) outside
/// [`crate::ports::operations::HTTP_REQUEST_METHODS`] (any case) is one as well. Values that
/// are templates are checked when the step runs.
fn operation_input_checks(
    name: &str,
    id: &str,
    o: &crate::workflow::OperationStep,
    base: impl fmt::Display,
    out: &mut Vec<Diagnostic>,
) {
    let Some(known) = crate::ports::operations::builtin_inputs_of(id) else {
        return;
    };
    for k in o.inputs.keys() {
        if known.contains(&k.as_str()) {
            continue;
        }
        let list = format!("inputs of {id}: {}", known.join(", "));
        let d = invalid_state(
            format!("{base}.inputs.{k}"),
            format!("operation state \"{name}\": {id} has no input \"{k}\""),
        );
        out.push(match closest(k, known.iter().copied()) {
            Some(c) => d.with_hint(format!("did you mean '{c}'? ({list})")),
            None => d.with_hint(list),
        });
    }
    if id != "http.request" {
        return;
    }
    let methods = crate::ports::operations::HTTP_REQUEST_METHODS;
    let bad = match o.inputs.get("method") {
        Some(serde_json::Value::String(m)) if m.contains("{{") => None,
        Some(serde_json::Value::String(m))
            if methods.contains(&m.trim().to_ascii_uppercase().as_str()) =>
        {
            None
        }
        Some(serde_json::Value::String(m)) if m.trim().is_empty() => {
            Some("an empty method".to_owned())
        }
        Some(serde_json::Value::String(m)) => Some(format!("method \"{m}\"")),
        None | Some(serde_json::Value::Null) => None,
        Some(other) => Some(format!("method {other}")),
    };
    if let Some(what) = bad {
        out.push(
            invalid_state(
                format!("{base}.inputs.method"),
                format!("operation state \"{name}\": http.request cannot send {what}"),
            )
            .with_hint(format!("use one of {} (any case)", methods.join(", "))),
        );
    }
}

/// `mcp_proxy:` of an agent step (shared/spec/mcp.md §1.3): an enabled proxy with nothing to
/// serve is `EMPTY_PROXY`; a plugin listed twice, or two entries giving one `<plugin>_<op>`
/// name, is `NAME_COLLISION`; a plugin that provides none of
/// [`crate::ports::operations::BUILTIN_OPERATIONS`] is `UNKNOWN_PLUGIN` (its operations are
/// then not checked), an operation the plugin lacks `UNKNOWN_OPERATION` (both with a
/// did-you-mean); a provider that cannot hide its own tools is an `UNSUPPORTED_PROVIDER`
/// warning.
fn mcp_proxy_checks(
    name: &str,
    provider: &str,
    proxy: &crate::workflow::McpProxyConfig,
    base: &str,
    out: &mut Vec<Diagnostic>,
) {
    if !proxy.enable {
        if !proxy.enable_written && (proxy.intercept_builtins || !proxy.plugin_tools.is_empty()) {
            out.push(
                Diagnostic::warning(
                    ErrorCode::UserMcpProxyNotEnabled,
                    base.to_owned(),
                    format!(
                        "agent \"{name}\": mcp_proxy has no effect without enable: true (the proxy is off)"
                    ),
                )
                .with_hint(ErrorCode::UserMcpProxyNotEnabled.resolution()),
            );
        }
        return;
    }
    if !proxy.intercept_builtins && proxy.plugin_tools.is_empty() {
        out.push(
            Diagnostic::error(
                ErrorCode::UserMcpProxyEmptyProxy,
                base.to_owned(),
                format!(
                    "agent \"{name}\": mcp_proxy is enabled with intercept_builtins: false and no plugin_tools, so it serves no tool"
                ),
            )
            .with_hint(ErrorCode::UserMcpProxyEmptyProxy.resolution()),
        );
    }
    let mut plugins = BTreeSet::new();
    let mut tools: BTreeMap<String, String> = BTreeMap::new();
    for (i, p) in proxy.plugin_tools.iter().enumerate() {
        let path = format!("{base}.plugin_tools.{i}");
        if !plugins.insert(p.plugin.as_str()) {
            out.push(
                Diagnostic::error(
                    ErrorCode::UserMcpProxyNameCollision,
                    format!("{path}.plugin"),
                    format!(
                        "agent \"{name}\": plugin \"{}\" is listed twice in mcp_proxy.plugin_tools",
                        p.plugin
                    ),
                )
                .with_hint("list each plugin once, with all its operations under one expose"),
            );
            continue;
        }
        for op in &p.expose {
            let tool = format!("{}_{op}", p.plugin);
            let owner = format!("{}.{op}", p.plugin);
            if let Some(first) = tools.insert(tool.clone(), owner.clone()) {
                out.push(
                    Diagnostic::error(
                        ErrorCode::UserMcpProxyNameCollision,
                        format!("{path}.expose"),
                        format!("agent \"{name}\": {owner} and {first} are both served as tool \"{tool}\""),
                    )
                    .with_hint("rename one of the operations or expose only one of them"),
                );
            }
        }
        if !crate::ports::operations::is_builtin_plugin(&p.plugin) {
            // An unknown plugin's operations are not checked one by one (Go: no noise).
            let plugins = crate::ports::operations::builtin_plugins();
            let mut d = Diagnostic::error(
                ErrorCode::UserMcpProxyUnknownPlugin,
                format!("{path}.plugin"),
                format!(
                    "agent \"{name}\": unknown plugin \"{}\" in mcp_proxy.plugin_tools",
                    p.plugin
                ),
            );
            let list = format!("awf provides the plugins: {}", plugins.join(", "));
            d = match closest(&p.plugin, plugins.iter().copied()) {
                Some(c) => d.with_hint(format!("did you mean '{c}'? ({list})")),
                None => d.with_hint(format!("{list}; remove the entry otherwise")),
            };
            out.push(d);
            continue;
        }
        let ops = crate::ports::operations::builtin_ops_of(&p.plugin);
        for (j, op) in p.expose.iter().enumerate() {
            if ops.contains(&op.as_str()) {
                continue;
            }
            let mut d = Diagnostic::error(
                ErrorCode::UserMcpProxyUnknownOperation,
                format!("{path}.expose.{j}"),
                format!(
                    "agent \"{name}\": plugin \"{}\" has no operation \"{op}\"",
                    p.plugin
                ),
            );
            let list = format!("operations of {}: {}", p.plugin, ops.join(", "));
            d = match closest(op, ops.iter().copied()) {
                Some(c) => d.with_hint(format!("did you mean '{c}'? ({list})")),
                None => d.with_hint(list),
            };
            out.push(d);
        }
    }
    let provider = provider.trim();
    if crate::workflow::MCP_COEXISTENCE_PROVIDERS.contains(&provider) {
        out.push(
            Diagnostic::warning(
                ErrorCode::UserMcpProxyUnsupportedProvider,
                base.to_owned(),
                format!(
                    "agent \"{name}\": provider {provider} cannot hide its own tools: the proxy's tools are offered beside them, not instead"
                ),
            )
            .with_hint(ErrorCode::UserMcpProxyUnsupportedProvider.resolution()),
        );
    }
}

fn per_type(name: &str, s: &State, base: impl fmt::Display, out: &mut Vec<Diagnostic>) {
    match &s.kind {
        StateKind::Parallel(p) => {
            if p.branches.is_empty() {
                out.push(invalid_state(
                    format!("{base}.parallel"),
                    format!(
                        "parallel state \"{name}\" needs at least one branch (parallel: [state, …])"
                    ),
                ));
            }
        }
        StateKind::Loop(l) => {
            if l.body.is_empty() {
                out.push(invalid_state(
                    format!("{base}.body"),
                    format!("loop \"{name}\" has an empty body"),
                ));
            }
            let mut seen = BTreeSet::new();
            for (i, b) in l.body.iter().enumerate() {
                if !seen.insert(b) {
                    out.push(invalid_state(
                        format!("{base}.body.{i}"),
                        format!("loop \"{name}\" lists body state \"{b}\" twice"),
                    ));
                }
                // A loop in its own body is a containment cycle, reported by `containment`.
            }
            if let MaxIterations::Static(n) = l.max_iterations
                && n != 0
                && !(1..=MAX_ITERATIONS_LIMIT).contains(&n)
            {
                out.push(invalid_state(
                    format!("{base}.max_iterations"),
                    format!("max_iterations must be between 1 and {MAX_ITERATIONS_LIMIT}, got {n}"),
                ));
            }
            // Text with no template and no arithmetic can only fail when the loop starts
            // (breaker: `max_iterations: abc` validated, then the run failed).
            // A quoted number (`max_iterations: '0'`) is held as text: the same range.
            if let MaxIterations::Dynamic(m) = &l.max_iterations
                && let Ok(n) = m.trim().parse::<i64>()
                && !(1..=i64::from(MAX_ITERATIONS_LIMIT)).contains(&n)
            {
                out.push(invalid_state(
                    format!("{base}.max_iterations"),
                    format!("max_iterations must be between 1 and {MAX_ITERATIONS_LIMIT}, got {n}"),
                ));
            }
            if let MaxIterations::Dynamic(m) = &l.max_iterations
                && !m.contains("{{")
                && !m.trim().contains(['+', '-', '*', '/', '%'])
                && m.trim().parse::<i64>().is_err()
            {
                out.push(invalid_state(
                    format!("{base}.max_iterations"),
                    format!(
                        "max_iterations \"{}\" is not a whole number: give one from 1 to {MAX_ITERATIONS_LIMIT}, a template (`{{{{.inputs.n}}}}`) or arithmetic",
                        m.trim()
                    ),
                ));
            }
            // Items written in the workflow (no template) can only fail when the loop
            // starts: `items: '["a", b]'` validated, then the run failed.
            if let LoopOver::Items(items) = &l.over
                && !items.contains("{{")
                && let Err(e) = crate::workflow::loop_items(items)
            {
                out.push(
                    invalid_state(
                        format!("{base}.items"),
                        format!(
                            "loop \"{name}\": items start with `[` but are not a JSON array: {e}"
                        ),
                    )
                    .with_hint(crate::workflow::LOOP_ITEMS_HINT),
                );
            }
            if let LoopOver::While(c) = &l.over
                && c.contains("{{")
            {
                out.push(
                    invalid_state(
                        format!("{base}.while"),
                        "while: is an expression, not a template: {{ }} is not allowed",
                    )
                    .with_hint(
                        "write the condition without braces, e.g. states.check.Output != 'done'",
                    ),
                );
            }
        }
        StateKind::Agent(a) => {
            if a.provider.trim().is_empty() {
                out.push(invalid_state(
                    format!("{base}.provider"),
                    format!("agent \"{name}\" needs a provider"),
                ));
            } else if a.provider.trim() == "custom" {
                out.push(
                    invalid_state(
                        format!("{base}.provider"),
                        "provider 'custom' has been removed; use a built-in provider",
                    )
                    .with_hint("use claude, codex, gemini, github_copilot, mistral_vibe, opencode or openai_compatible"),
                );
            }
            match (&a.prompt, &a.prompt_file) {
                (Some(_), Some(_)) => out.push(invalid_state(
                    format!("{base}.prompt_file"),
                    format!("agent \"{name}\": prompt and prompt_file are mutually exclusive"),
                )),
                (None, None) => out.push(invalid_state(
                    format!("{base}.prompt"),
                    format!("agent \"{name}\" needs prompt or prompt_file"),
                )),
                _ => {}
            }
            match a.mode.as_str() {
                "single" => {}
                "conversation" => {
                    if a.prompt.is_none() {
                        out.push(invalid_state(
                            format!("{base}.prompt"),
                            format!("agent \"{name}\": mode conversation needs an inline prompt"),
                        ));
                    }
                }
                other => out.push(invalid_state(
                    format!("{base}.mode"),
                    format!("invalid agent mode \"{other}\" (expected single or conversation)"),
                )),
            }
            if a.role.as_deref().is_some_and(|r| r.contains("..")) {
                out.push(invalid_state(
                    format!("{base}.role"),
                    "role must not contain '..'",
                ));
            }
            if let Some(proxy) = &a.mcp_proxy {
                mcp_proxy_checks(name, &a.provider, proxy, &format!("{base}.mcp_proxy"), out);
            }
        }
        StateKind::Operation(o) => {
            let id = o.operation.trim();
            if id.is_empty() {
                out.push(invalid_state(
                    format!("{base}.operation"),
                    format!("operation state \"{name}\" needs operation:"),
                ));
            } else if !crate::ports::operations::BUILTIN_OPERATIONS.contains(&id) {
                out.push(unknown_operation(name, id, &format!("{base}.operation")));
            } else {
                operation_input_checks(name, id, o, &base, out);
            }
        }
        StateKind::CallWorkflow(c) => {
            if c.workflow.trim().is_empty() {
                out.push(invalid_state(
                    format!("{base}.workflow"),
                    format!("call_workflow state \"{name}\" needs workflow:"),
                ));
            }
        }
        StateKind::Command(_) | StateKind::Terminal(_) => {}
    }
    if let Some(r) = &s.retry {
        let rb = format!("{base}.retry");
        if r.max_attempts < 1 {
            out.push(invalid_state(
                format!("{rb}.max_attempts"),
                "max_attempts must be >= 1",
            ));
        }
        if !(0.0..=1.0).contains(&r.jitter) {
            out.push(invalid_state(
                format!("{rb}.jitter"),
                "jitter must be between 0.0 and 1.0",
            ));
        }
        if r.multiplier.is_nan() || r.multiplier < 0.0 {
            out.push(invalid_state(
                format!("{rb}.multiplier"),
                "multiplier must be >= 0",
            ));
        } else if !r.multiplier.is_finite() || r.multiplier > crate::workflow::MAX_RETRY_MULTIPLIER
        {
            // Breaker: `1e30` validated, then the delays overflowed (AWF (Go) takes any
            // number >= 0; its delays overflow the same way).
            out.push(
                invalid_state(
                    format!("{rb}.multiplier"),
                    format!(
                        "multiplier {} is too large: at most {}",
                        if r.multiplier < 1e6 {
                            r.multiplier.to_string()
                        } else {
                            format!("{:e}", r.multiplier)
                        },
                        crate::workflow::MAX_RETRY_MULTIPLIER
                    ),
                )
                .with_hint(
                    "each delay is the previous one times the multiplier: 2 doubles it; \
                     set `max_delay` to cap the delays (without it they stop growing at 1h)",
                ),
            );
        }
    }
}

/// A warning per step whose `timeout` ends before one of its `retry` attempts can start,
/// whatever the attempts take: the timeout bounds every attempt together and the waits
/// between them (AWF (Go)'s semantics, kept), and the waits before attempt `k` (each at its
/// shortest, jitter taken off) add up to the timeout or more, so attempts `k` and after
/// never run. A timeout that leaves room for every attempt is not warned about (new user:
/// `timeout: 5s` with two attempts of `echo` 10 ms apart was); a step that runs into it is
/// told by its failure (`the step's timeout spans all 3 attempts; 1 ran`).
///
/// Code `WORKFLOW.VALIDATION.INVALID_STATE`, severity Warning, path `states.<name>.timeout`.
/// `awf validate` shows it; a run does not repeat it on every start.
pub fn timeout_spans_retries(wf: &Workflow) -> Vec<Diagnostic> {
    /// Attempts looked at, at most: a policy whose waits fit this many fits them all, or
    /// waits so little that its timeout is no concern of this check.
    const LOOKED_AT: u32 = 10_000;
    let mut out = Vec::new();
    for (name, s) in &wf.states {
        let (Some(r), Some(t)) = (&s.retry, s.timeout.filter(|t| !t.is_zero())) else {
            continue;
        };
        let mut waited = std::time::Duration::ZERO;
        let mut blocked = None;
        for attempt in 2..=r.max_attempts.min(LOOKED_AT) {
            waited = waited.saturating_add(r.jittered(r.base_delay(attempt - 1), -1.0));
            if waited >= t {
                blocked = Some(attempt);
                break;
            }
        }
        let Some(attempt) = blocked else {
            continue;
        };
        let never = if attempt == r.max_attempts {
            format!("attempt {attempt} never runs")
        } else {
            format!("attempts {attempt} to {} never run", r.max_attempts)
        };
        out.push(
            Diagnostic::warning(
                ErrorCode::WorkflowValidationInvalidState,
                format!("states.{name}.timeout"),
                format!(
                    "timeout {} ends before attempt {attempt} of retry can start: the waits \
                     before it take {} (the timeout bounds every attempt and the waits between \
                     them together), so {never}",
                    crate::duration::format_go(t),
                    crate::duration::format_go(waited),
                ),
            )
            .with_hint(
                "raise timeout above the waits plus what the attempts take, or shorten \
                 retry's delays (initial_delay, max_delay)",
            ),
        );
    }
    out
}

/// Successor states of `s` for ordering and reachability. Loop bodies are followed only when
/// `with_bodies` is set.
fn successors(s: &State, with_bodies: bool) -> Vec<&str> {
    let mut v: Vec<&str> = Vec::new();
    if let StateKind::Parallel(p) = &s.kind {
        v.extend(p.branches.iter().map(String::as_str));
    }
    if let StateKind::Loop(l) = &s.kind {
        if with_bodies {
            v.extend(l.body.iter().map(String::as_str));
        }
        if let Some(t) = &l.on_complete {
            v.push(t);
        }
    }
    if let Some(t) = &s.on_success {
        v.push(t);
    }
    if let Some(t) = &s.on_failure {
        v.push(t);
    }
    v.extend(s.transitions.iter().map(|t| t.goto.as_str()));
    v
}

/// Whether some route leads from state `from` to state `to` (loop bodies and branches
/// followed).
fn reaches(wf: &Workflow, from: &str, to: &str) -> bool {
    let mut seen = std::collections::HashSet::new();
    let mut queue = VecDeque::from([from]);
    while let Some(n) = queue.pop_front() {
        let Some(s) = wf.states.get(n) else { continue };
        for t in successors(s, true) {
            if t == to {
                return true;
            }
            if seen.insert(t) {
                queue.push_back(t);
            }
        }
    }
    false
}

/// Whether state `target` runs inside state `container`: one of its parallel branches or
/// loop body steps, or of theirs (at any depth).
fn runs_inside(wf: &Workflow, container: &str, target: &str) -> bool {
    let mut seen = HashSet::new();
    let mut queue = VecDeque::from([container]);
    while let Some(n) = queue.pop_front() {
        let inner: &[String] = match wf.states.get(n).map(|s| &s.kind) {
            Some(StateKind::Parallel(p)) => &p.branches,
            Some(StateKind::Loop(l)) => &l.body,
            _ => continue,
        };
        for t in inner {
            if t == target {
                return true;
            }
            if seen.insert(t.as_str()) {
                queue.push_back(t);
            }
        }
    }
    false
}

/// BFS order from `initial` (loop bodies not followed): name → index.
fn bfs_order(wf: &Workflow) -> HashMap<&str, usize> {
    let mut order = HashMap::new();
    let mut queue = VecDeque::new();
    if wf.states.contains_key(&wf.initial) {
        order.insert(wf.initial.as_str(), 0);
        queue.push_back(wf.initial.as_str());
    }
    while let Some(n) = queue.pop_front() {
        let Some(s) = wf.states.get(n) else { continue };
        for t in successors(s, false) {
            if wf.states.contains_key(t) && !order.contains_key(t) {
                order.insert(t, order.len());
                queue.push_back(t);
            }
        }
    }
    order
}

/// Names of states `states.X` mentioned in an expression or template text.
fn state_names_in(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("states.") {
        let before = rest[..i].chars().last();
        let after = &rest[i + "states.".len()..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '-')
            .collect();
        if before.is_none_or(|c| !(c.is_alphanumeric() || c == '_')) && !name.is_empty() {
            out.push(name);
        }
        rest = after;
    }
    out
}

/// Warns when a `while:` condition reads `states.X` where X is in that loop's own body and
/// cannot have run before the loop (not reachable from `initial` without passing through the
/// loop): AWF evaluates the missing state as false, so the loop runs zero times.
///
/// Code `WORKFLOW.VALIDATION.INVALID_REFERENCE`, severity Warning, path `states.<loop>.while`.
/// Source: spec/workflow.md §0 item 8, §2.11; decisions.md.
pub fn while_never_true(wf: &Workflow) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for (name, s) in &wf.states {
        let StateKind::Loop(l) = &s.kind else {
            continue;
        };
        let LoopOver::While(cond) = &l.over else {
            continue;
        };
        let read: Vec<String> = state_names_in(cond)
            .into_iter()
            .filter(|x| l.body.contains(x))
            .collect();
        if read.is_empty() {
            // Nothing to check: skip the walk (one per loop, so many loops stay linear).
            continue;
        }
        // States that can run before the loop's first check: reachable without entering it.
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        let mut queue: VecDeque<&str> = VecDeque::new();
        if wf.initial != *name {
            queue.push_back(&wf.initial);
        }
        while let Some(n) = queue.pop_front() {
            if n == name || !seen.insert(n) {
                continue;
            }
            if let Some(st) = wf.states.get(n) {
                queue.extend(successors(st, true));
            }
        }
        for x in read {
            if !seen.contains(x.as_str()) {
                out.push(
                    Diagnostic::warning(
                        ErrorCode::WorkflowValidationInvalidReference,
                        format!("states.{name}.while"),
                        format!(
                            "while condition reads states.{x}, which is in this loop's body and has not run \
                             before the first check: the condition is false and the loop runs zero times"
                        ),
                    )
                    .with_hint(format!("run \"{x}\" once before the loop, or use a condition that is true initially")),
                );
            }
        }
    }
    out
}

/// A warning per terminal whose `message` reads `.error` (`{{.error.Message}}`) when no
/// route to it can follow a failure: `.error` at a terminal is the run's most recent failure
/// that was routed on (a state's `on_failure`, or a failed command's `transitions`), kept
/// through the states run since, so it is undefined at a terminal that only routes taken
/// while nothing failed reach, and the message is shown as written.
///
/// Code `WORKFLOW.VALIDATION.INVALID_REFERENCE`, severity Warning, path
/// `states.<terminal>.message`. An awf addition (AWF (Go) has `.error` only in
/// `workflow_error` hooks).
pub fn undefined_error_at_terminals(wf: &Workflow) -> Vec<Diagnostic> {
    let reads_error = |m: &str| {
        actions(m).into_iter().any(|a| {
            reference_tokens(a).iter().any(|t| {
                t.split('.')
                    .next()
                    .is_some_and(|ns| ns.eq_ignore_ascii_case("error"))
            })
        })
    };
    let readers: Vec<&str> = wf
        .states
        .iter()
        .filter_map(|(name, s)| match &s.kind {
            StateKind::Terminal(t) if t.message.as_deref().is_some_and(reads_error) => {
                Some(name.as_str())
            }
            _ => None,
        })
        .collect();
    if readers.is_empty() {
        return Vec::new();
    }
    // The states a failure is routed to, then every state reachable from them.
    let mut after_failure: BTreeSet<&str> = BTreeSet::new();
    let mut queue: VecDeque<&str> = VecDeque::new();
    for s in wf.states.values() {
        queue.extend(s.on_failure.as_deref());
        if matches!(s.kind, StateKind::Command(_)) {
            queue.extend(s.transitions.iter().map(|t| t.goto.as_str()));
        }
    }
    while let Some(n) = queue.pop_front() {
        if !after_failure.insert(n) {
            continue;
        }
        if let Some(st) = wf.states.get(n) {
            queue.extend(successors(st, true));
        }
    }
    readers
        .into_iter()
        .filter(|name| !after_failure.contains(name))
        .map(|name| {
            let shown = crate::workflow::terminal_display_name(name);
            Diagnostic::warning(
                ErrorCode::WorkflowValidationInvalidReference,
                format!("{}.message", crate::workflow::state_path(name)),
                format!(
                    "terminal {shown}: its message reads .error, but no route to it follows a \
                     failure: .error will be undefined there and the message shown as written"
                ),
            )
            .with_hint(
                "`.error` at a terminal is the run's most recent failure routed by on_failure: \
                 route a failure here (`on_failure: <this terminal>`, or to a state that leads \
                 here), or leave .error out of this message",
            )
        })
        .collect()
}

/// A warning per name in the workflow's `env:` list that is not set in `env`.
///
/// Code `WORKFLOW.VALIDATION.INVALID_REFERENCE`, severity Warning, path `env.<index>`.
/// Source: decisions.md ("env: … an unset one is a warning").
pub fn missing_env(wf: &Workflow, env: &BTreeMap<String, String>) -> Vec<Diagnostic> {
    wf.env
        .iter()
        .enumerate()
        .filter(|(_, name)| !env.contains_key(name.as_str()))
        .map(|(i, name)| {
            Diagnostic::warning(
                ErrorCode::WorkflowValidationInvalidReference,
                format!("env.{i}"),
                format!(
                    "environment variable {name} is not set (the workflow lists it under env:)"
                ),
            )
            .with_hint(format!("export {name}=… before running"))
        })
        .collect()
}

/// Warnings (`WORKFLOW.VALIDATION.INVALID_REFERENCE`) for each hook `command:` that reads a
/// declared input as a shell variable (`$log`, `${log}`, `${log:-x}`): a step gets each
/// declared input as an environment variable, a hook does not (spec workflow.md §1.10, "no
/// input env vars", as in AWF (Go)), so there the variable is awf's own environment's, most
/// often empty (unless the command assigns it first: `log=…; echo "$log"`). One warning per
/// input and action, at `states.<s>.hooks.pre.<i>.command`
/// (`post`) or `hooks.<hook>.<i>.command`; the hint assigns the variable from the template
/// at the command's start. `$name` in single quotes, after a backslash, in a `#` comment or
/// inside a `{{ … }}` action (a template variable) is not a read.
pub fn hook_input_variables(wf: &Workflow) -> Vec<Diagnostic> {
    let names: Vec<&str> = wf
        .inputs
        .iter()
        .map(|i| i.name.as_str())
        .filter(|n| shell_variable_name(n))
        .collect();
    let mut out = Vec::new();
    if names.is_empty() {
        return out;
    }
    let mut check = |text: &str, path: LazyPath<'_>| {
        for name in shell_variables_read(text) {
            if !names.contains(&name.as_str()) {
                continue;
            }
            out.push(
                Diagnostic::warning(
                    ErrorCode::WorkflowValidationInvalidReference,
                    format!("{}.command", path()),
                    format!(
                        "the hook command reads ${name}, but hooks do not get the inputs as environment variables (steps do; as in AWF (Go)): ${name} there is awf's own environment's, most often empty"
                    ),
                )
                .with_hint(format!(
                    "set it from the input at the command's start: `{name}={{{{shell_quote .inputs.{name}}}}}; …`"
                )),
            );
        }
    };
    for (name, state) in &wf.states {
        state_hook_commands(name, state, &mut check);
    }
    workflow_hook_commands(wf, &mut check);
    out
}

/// Whether `name` can be a shell variable's name (`[A-Za-z_][A-Za-z0-9_]*`).
fn shell_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The names of the shell variables `text` (shell command text with `{{ … }}` actions) reads
/// with `$name` or `${…name…}` before it assigns them (`name=…` starting a word), in order,
/// each once. Not a read: a `$` in single quotes (or `$'…'`), after a backslash, in a `#`
/// comment, or inside an action. A light reading: a quoted here-document's body counts as
/// commands, and only `name=…` assigns.
pub fn shell_variables_read(text: &str) -> Vec<String> {
    // The text with each action replaced by a plain word: its quotes and `$` are the
    // template's, and the word keeps the shell's quoting around it as it was.
    let mut masked = String::with_capacity(text.len());
    for piece in crate::shell::shell_pieces(text) {
        match piece {
            crate::shell::ShellPiece::Text(t) => masked.push_str(t),
            crate::shell::ShellPiece::Action(_) => masked.push('x'),
        }
    }
    let b = masked.as_bytes();
    let name_end = |from: usize| {
        let mut j = from;
        if j < b.len() && (b[j].is_ascii_alphabetic() || b[j] == b'_') {
            while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                j += 1;
            }
        }
        j
    };
    let word_start =
        |i: usize| i == 0 || matches!(b[i - 1], b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'(');
    let mut found: Vec<String> = Vec::new();
    let mut assigned: Vec<&str> = Vec::new();
    let (mut single, mut double) = (false, false);
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if single {
            if c == b'\'' {
                single = false;
            }
            i += 1;
            continue;
        }
        match c {
            b'\\' => i += 1,
            b'\'' if !double => single = true,
            b'"' => double = !double,
            b'#' if !double && word_start(i) => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'$' => {
                let mut from = i + 1;
                if b.get(from) == Some(&b'\'') && !double {
                    single = true;
                    i = from;
                } else {
                    if b.get(from) == Some(&b'{') {
                        from += 1;
                        if matches!(b.get(from), Some(b'#' | b'!')) {
                            from += 1;
                        }
                    }
                    let end = name_end(from);
                    if end > from {
                        let name = &masked[from..end];
                        if !found.iter().any(|f| f == name) && !assigned.contains(&name) {
                            found.push(name.to_owned());
                        }
                        i = end - 1;
                    }
                }
            }
            // `name=…` starting a word: the variable is the command's own from here on.
            _ if !double && word_start(i) && name_end(i) > i => {
                let end = name_end(i);
                if b.get(end) == Some(&b'=') {
                    assigned.push(&masked[i..end]);
                }
                i = end - 1;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// Template functions whose output is already quoted for the shell: an action ending in one
/// needs no further quoting (spec workflow.md, `shell_quote`).
pub const SHELL_QUOTING_FUNCS: &[&str] = &["shell_quote", "shellQuote", "escape"];

/// Warnings for the `{{ … }}` actions of shell steps' inline `command:` text that put an
/// input or a step output where the shell can run it, each with the fix that is right for
/// where the action sits (as [`crate::shell::shell_pieces`] reads the text):
///
/// - a value action not passed through `shell_quote`/`escape`
///   (`WORKFLOW.VALIDATION.UNQUOTED_SHELL_VALUE`), unless the workflow sets
///   `shell_quote: true`. The hint: bare, `{{shell_quote .x}}`; inside `"…"` or `'…'`, the
///   quotes closed around it (`"three "{{shell_quote .inputs.target}}`); in backticks, `$( … )`
///   instead; in a here-document, the value through a variable (unquoted delimiter) or
///   printed outside it (quoted delimiter); always also `shell_quote: true`.
/// - a value already passed through `shell_quote`/`escape` that sits inside quotes, backticks
///   or a here-document, where single quotes do not protect it
///   (`WORKFLOW.VALIDATION.INEFFECTIVE_SHELL_QUOTE`): why, and the fix. Under
///   `shell_quote: true` such a value is safe (the mode quotes it again for where it lands)
///   but prints its quotes, which the warning says instead.
///
/// The values checked: inputs (`.inputs.x`), step results (`.states.x.Output`, …), loop
/// items (`.loop.Item`, `.loop.Parent.Item`) and, in hooks, the failure's message
/// (`.error.Message`). References that cannot carry shell code are not warned about: inputs
/// of `type: integer`, `number` or `boolean` (validated and converted at run start), string
/// inputs whose `validation.enum` lists only plain words ([`plain_word`]), a step's
/// `ExitCode`, `Status` and `TokensUsed`, an `http.request` step's `Response.status_code`,
/// the failure's `State`, `ExitCode` and `Type`, loop items when every `for_each` of the
/// workflow lists plain words (or numbers) in its YAML, and any value passed last through a
/// function that returns a number or true/false (`{{len .states.a.Output}}`,
/// `{{eq .inputs.x "y"}}`: [`NUMBER_OR_BOOLEAN_FUNCS`]). Severity Warning, path `states.<name>.command`, `states.<name>.hooks.pre.<i>` (and
/// `post`) or `hooks.<hook>.<i>`. Source: issue 14 ("Safe shell interpolation").
pub fn unquoted_shell_values(wf: &Workflow) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    inline_commands(wf, &mut |text, path| {
        // Without an action there is no value to check (`shell_actions` finds none).
        if text.contains("{{") {
            shell_value_checks(wf, text, &path(), &mut out, true);
        }
    });
    out
}

/// [`unquoted_shell_values`] for the contents of a step's `script_file:` (`script`), when it
/// is quoted as shell code ([`crate::interpreter::ScriptInterpreter::quotes_as_shell`]; a script
/// for another interpreter gets none): its template values land in shell text as a
/// `command:`'s do. A script that prints values also gets a warning
/// (`WORKFLOW.VALIDATION.UNQUOTED_SHELL_VALUE`) when awf cannot tell its interpreter from
/// the `#!` line (its values are then quoted as for a POSIX shell), or when the interpreter
/// is a non-POSIX shell (`fish`), whose values no quoting awf has protects (under
/// `shell_quote: true` the run refuses them). Findings at `path` (the caller's
/// `states.<name>.script_file`).
pub fn unquoted_shell_values_in_script(wf: &Workflow, script: &str, path: &str) -> Vec<Diagnostic> {
    use crate::interpreter::ScriptInterpreter;
    let mut out = Vec::new();
    let interpreter = crate::interpreter::script_interpreter(script);
    let warn = |message: String, hint: String| {
        Diagnostic::warning(ErrorCode::WorkflowValidationUnquotedValue, path, message)
            .with_hint(hint)
    };
    match &interpreter {
        ScriptInterpreter::Unknown(what) if crate::shell::prints_values(script) => {
            out.push(warn(
                format!(
                    "awf cannot tell which interpreter runs the script from its #! line ({what}), so its template values are quoted as for a POSIX shell{}",
                    if wf.shell_quote {
                        ""
                    } else {
                        " by `shell_quote: true` and checked as shell text here"
                    }
                ),
                "name the interpreter in the #! line directly (#!/bin/bash, #!/usr/bin/env python3); wrappers awf looks through: env, nice, nohup, setsid, timeout, stdbuf, ionice, chrt, taskset, time, flock, sudo, doas, unbuffer, nocache, busybox".to_owned(),
            ));
        }
        ScriptInterpreter::OtherShell(shell) => {
            if let Some((why, hint)) = interpreter.shell_quote_refusal(script) {
                let message = if wf.shell_quote {
                    format!("the script runs with {shell}: {why}, so the step fails before it runs")
                } else {
                    format!(
                        "the script runs with {shell}, whose quoting is not a POSIX shell's: awf cannot quote or check its template values, and a value holding {shell} syntax runs as code"
                    )
                };
                out.push(warn(message, hint));
            }
        }
        _ => {}
    }
    if interpreter.quotes_as_shell() {
        // The reference checks do not read a script's text: every value is warned about.
        shell_value_checks(wf, script, path, &mut out, false);
    }
    out
}

/// Whether every `for_each` of `wf` lists its items in the YAML and each is a plain word
/// ([`plain_word`]), a number or a boolean: then no loop item can carry shell code.
fn loop_items_plain(wf: &Workflow) -> bool {
    wf.states.values().all(|s| match &s.kind {
        StateKind::Loop(LoopStep {
            over: LoopOver::Items(items),
            ..
        }) => match serde_json::from_str::<serde_json::Value>(items) {
            Ok(serde_json::Value::Array(values)) => values.iter().all(|v| match v {
                serde_json::Value::String(w) => plain_word(w),
                serde_json::Value::Number(_) | serde_json::Value::Bool(_) => true,
                _ => false,
            }),
            _ => false,
        },
        _ => true,
    })
}

/// Whether a reference token (`inputs.x…`, `states.x…`, `loop.Item…`, `error.Message`) may
/// print text that holds shell code ([`unquoted_shell_values`] lists which do not);
/// `None` for a token that names no such value.
fn may_carry_shell_code(wf: &Workflow, reference: &str) -> Option<bool> {
    let lower = reference.to_ascii_lowercase();
    let field = |i: usize| lower.split('.').nth(i).unwrap_or("").replace('_', "");
    if lower.starts_with("states.") {
        // An `http.request` step's `Response.status_code` is a number (the operation's).
        let status_code = field(2) == "response"
            && field(3) == "statuscode"
            && reference.split('.').nth(1).is_some_and(|s| {
                wf.states.get(s).is_some_and(|st| {
                    matches!(&st.kind, StateKind::Operation(o) if o.operation == "http.request")
                })
            });
        return Some(
            !status_code && !matches!(field(2).as_str(), "exitcode" | "status" | "tokensused"),
        );
    }
    if lower.starts_with("loop.") {
        let item = lower
            .split('.')
            .skip(1)
            .find(|segment| *segment != "parent")
            .is_some_and(|segment| segment == "item");
        return item.then(|| !loop_items_plain(wf));
    }
    if lower.starts_with("error.") {
        return (field(1) == "message").then_some(true);
    }
    if !lower.starts_with("inputs.") {
        return None;
    }
    let Some(rest) = reference.get("inputs.".len()..) else {
        return Some(true);
    };
    let name = rest.split('.').next().unwrap_or(rest);
    let Some(def) = wf.inputs.iter().find(|d| d.name == name) else {
        return Some(true);
    };
    Some(match def.ty {
        InputType::Integer | InputType::Number | InputType::Boolean => false,
        InputType::String | InputType::Untyped => {
            let allowed = &def.validation.enum_values;
            allowed.is_empty() || !allowed.iter().all(|v| plain_word(v))
        }
        InputType::Array | InputType::Unknown(_) => true,
    })
}

/// A word the shell reads as itself wherever it lands (bare, inside quotes, backticks or a
/// here-document): non-empty, only ASCII letters, digits and `_ - . , : / + @ %`. Used for
/// `validation.enum` values ([`unquoted_shell_values`]). Source: issue 14.
pub fn plain_word(value: &str) -> bool {
    !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.,:/+@%".contains(c))
}

/// `{{shell_quote body}}`, or `{{body | shell_quote}}` for a pipeline or a call.
fn quoted_form(body: &str) -> String {
    if body.contains('|') || body.contains(' ') {
        format!("{{{{{body} | shell_quote}}}}")
    } else {
        format!("{{{{shell_quote {body}}}}}")
    }
}

/// The quoted string or backticks around `action` rewritten with `fixed` in place of the
/// action and the quotes closed around it: `"three {{.x}}"` → `"three "{{shell_quote .x}}`;
/// `` `cmd {{.x}}` `` → `$(cmd {{shell_quote .x}})`. `None` when the span is not a closed
/// string or (backticks) holds a backslash, whose meaning `$( )` would change.
fn closed_form(text: &str, action: &ShellAction<'_>, fixed: &str) -> Option<String> {
    let span = action.quoted_span.clone()?;
    let before = text.get(span.start..action.range.start)?;
    let after = text.get(action.range.end..span.end)?;
    let q = before.chars().next()?;
    if !after.ends_with(q) || span.end <= action.range.end {
        return None;
    }
    if q == '`' {
        let inner_before = before.get(1..)?;
        let inner_after = after.get(..after.len() - 1)?;
        if inner_before.contains('\\') || inner_after.contains('\\') {
            return None;
        }
        return Some(format!("$({inner_before}{fixed}{inner_after})"));
    }
    let mut s = String::new();
    if before.len() > 1 {
        s.push_str(before);
        s.push(q);
    }
    s.push_str(fixed);
    if after.len() > 1 {
        s.push(q);
        s.push_str(after);
    }
    Some(s)
}

/// The namespaces a template reference starts with (`.inputs.x`, `.states.s.Output`, …).
const TEMPLATE_ROOTS: [&str; 8] = [
    "inputs", "states", "workflow", "error", "context", "loop", "env", "awf",
];

/// The values of one shell text's earlier actions reachable under other names: template
/// variables assigned from them (`{{$v := .inputs.x}}`) and the dot of the `with`/`range`
/// blocks around (`{{with .inputs.x}}{{.}}{{end}}`), each as the reference it carries.
#[derive(Default)]
struct Aliases {
    vars: HashMap<String, String>,
    /// One entry per open block (`if` keeps the dot of the block around it).
    dots: Vec<Option<String>>,
}

impl Aliases {
    /// The namespace path a token stands for (`inputs.x`, `states.s1.ExitCode`, `error`):
    /// itself without its leading dot, or, through a variable (`$v.Field`) or the dot of a
    /// `with`/`range` (`.`, `.Field`), the path they were bound to plus the rest. `None` for
    /// anything else (functions, literals, unknown variables).
    fn resolve(&self, token: &str) -> Option<String> {
        let join = |base: &str, rest: &str| {
            let rest = rest.trim_start_matches('.');
            if rest.is_empty() {
                base.to_owned()
            } else {
                format!("{base}.{rest}")
            }
        };
        if let Some(var) = token.strip_prefix('$') {
            let (name, rest) = var.split_once('.').unwrap_or((var, ""));
            return self.vars.get(name).map(|base| join(base, rest));
        }
        if token.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        let path = token.trim_start_matches('.');
        let root = path.split('.').next().unwrap_or("").to_ascii_lowercase();
        if TEMPLATE_ROOTS.contains(&root.as_str()) {
            return Some(path.to_owned());
        }
        if token.starts_with('.') {
            return self
                .dots
                .last()
                .cloned()
                .flatten()
                .map(|base| join(&base, path));
        }
        None
    }

    /// The first value of `pipeline` that may carry shell code, as a reference: a direct
    /// one (`inputs.x`, `states.b.Output`, a whole namespace passed to `index`), or one
    /// reached through a variable or the dot of a `with`/`range` ([`Self::resolve`]).
    fn carried(&self, wf: &Workflow, pipeline: &str) -> Option<String> {
        raw_tokens(pipeline).into_iter().find_map(|t| {
            let path = self.resolve(&t)?;
            let whole = matches!(path.to_ascii_lowercase().as_str(), "inputs" | "states");
            (whole || may_carry_shell_code(wf, &path) == Some(true)).then_some(path)
        })
    }

    /// The path `pipeline`'s first namespace token stands for, carrying or not (what a
    /// variable or a `with` binds).
    fn bound(&self, pipeline: &str) -> Option<String> {
        raw_tokens(pipeline)
            .into_iter()
            .find_map(|t| self.resolve(&t))
    }

    /// Takes in a control action or an assignment (`with`, `range`, `if`, `end`,
    /// `$v := …`); whether `body` was one.
    fn follow(&mut self, body: &str) -> bool {
        let first = body
            .split(|c: char| c.is_whitespace() || c == '(')
            .next()
            .unwrap_or("");
        let rest = body[first.len()..].trim();
        match first {
            "with" | "range" => {
                // `range $i, $e := .inputs.xs`: `$e` (and the dot) carry the list's items.
                let (vars, value) = match rest.split_once(":=") {
                    Some((vars, value)) => (Some(vars), value),
                    None => (None, rest),
                };
                let bound = self.bound(value);
                if let (Some(vars), Some(r)) = (vars, &bound)
                    && let Some(name) = vars.rsplit(',').next()
                {
                    let name = name.trim().trim_start_matches('$');
                    self.vars.insert(name.to_owned(), r.clone());
                }
                self.dots.push(bound);
                true
            }
            "if" | "define" | "block" => {
                let dot = self.dots.last().cloned().flatten();
                self.dots.push(if first == "if" { dot } else { None });
                true
            }
            "end" => {
                self.dots.pop();
                true
            }
            "else" | "template" | "break" | "continue" => true,
            _ if first.starts_with('$') => {
                let after = rest.trim_start();
                let value = after
                    .strip_prefix(":=")
                    .or_else(|| after.strip_prefix('=').filter(|v| !v.starts_with('=')));
                let Some(value) = value else {
                    return false;
                };
                let name = first.trim_start_matches('$').to_owned();
                match self.bound(value) {
                    Some(r) => self.vars.insert(name, r),
                    None => self.vars.remove(&name),
                };
                true
            }
            _ => false,
        }
    }
}

/// The checks of [`unquoted_shell_values`] over one shell text.
/// The checks of [`unquoted_shell_values`] for one text at `path`; `checked`: the reference
/// checks read this text too (a `command:`, not a script's), so a reference they refuse is
/// left to their error.
fn shell_value_checks(
    wf: &Workflow,
    text: &str,
    path: &str,
    out: &mut Vec<Diagnostic>,
    checked: bool,
) {
    let mut aliases = Aliases::default();
    // One finding once per value: the same value written twice the same way gets one
    // warning, at its first place (new user: two identical warnings for one `command: |`).
    let mut seen: Vec<String> = Vec::new();
    for action in crate::shell::shell_actions(text) {
        // An unclosed action runs to the end of the text: the template does not parse (an
        // error says so), and no value lands anywhere.
        if !action.text.ends_with("}}") {
            continue;
        }
        let body = action.body();
        if aliases.follow(body) {
            continue;
        }
        let Some(already_quoted) = value_pipeline(body) else {
            continue;
        };
        // `{{len .states.big.Output}}`, `{{eq .inputs.a "x"}}`: a number or true/false,
        // whatever the value it reads (new user: warned as if it printed the output).
        if prints_number_or_boolean(body) {
            continue;
        }
        // Breaker: `{{$v}}` after `{{$v := .inputs.m}}`, `{{.}}` inside `{{with .inputs.m}}`
        // and `{{index .inputs "m"}}` were not warned about.
        let Some(reference) = aliases.carried(wf, body) else {
            continue;
        };
        // A reference the workflow's checks refuse already (an error) gets no warning on
        // top: `{{.error.Message}}` outside a `workflow_error` hook, an undeclared input, a
        // state that does not exist.
        // The same for one written as it is (not through a variable or `with`): an unknown
        // namespace (`{{.States.b.Output}}`) or a state field that does not exist
        // (`{{.states.b.Outptu}}`; new user: the warning's hint repeated the typo).
        let direct = body.contains(&format!(".{reference}"));
        if checked
            && refused_reference(
                wf,
                &reference,
                path.starts_with("hooks.workflow_error."),
                direct,
            )
        {
            continue;
        }
        let d = if action.context == ShellContext::Comment {
            // Safe under either mode (the line breaks of a value in a comment become
            // spaces), but worth knowing: the value shows nowhere but in the command text.
            Some(in_comment(body, &reference))
        } else if let Some(d) = unquotable(&action, body, &reference) {
            // Warned even under `shell_quote: true`: the mode refuses such a value at run
            // time unless it is a plain word.
            Some(d)
        } else if already_quoted {
            ineffective_quote(wf, text, &action, body, &reference)
        } else if wf.shell_quote {
            None
        } else {
            Some(unquoted_value(text, &action, body, &reference))
        };
        let Some(mut d) = d else {
            continue;
        };
        if seen.contains(&d.message) {
            continue;
        }
        seen.push(d.message.clone());
        d.path = path.to_owned();
        out.push(d.at_offset(text, action.range.start));
    }
}

/// Template functions whose result is always a number (`len`) or `true`/`false` (the
/// comparisons, `not`): text no shell reads as code.
const NUMBER_OR_BOOLEAN_FUNCS: &[&str] = &["len", "eq", "ne", "lt", "le", "gt", "ge", "not"];

/// Whether the value action `body` prints what the last command of its pipeline returns and
/// that command is one of [`NUMBER_OR_BOOLEAN_FUNCS`] (`len .x`, `.x | len`, `(len .x)`).
/// `|` inside a string literal or parentheses does not split the pipeline.
fn prints_number_or_boolean(body: &str) -> bool {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut last_start = 0usize;
    for (i, c) in body.char_indices() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' && q != '`' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '`' | '\'' => quote = Some(c),
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            '|' if depth == 0 => last_start = i + 1,
            _ => {}
        }
    }
    let mut last = body.get(last_start..).unwrap_or("").trim();
    // `(len .x)`: the parenthesized command alone.
    while let Some(inner) = last.strip_prefix('(').and_then(|r| r.strip_suffix(')')) {
        last = inner.trim();
    }
    let func = last
        .split(|c: char| c.is_whitespace() || c == '(')
        .next()
        .unwrap_or("");
    NUMBER_OR_BOOLEAN_FUNCS.contains(&func)
}

/// Whether `reference` (`error.Message`, `inputs.x`, `states.s.Output`, as
/// [`unquoted_shell_values`] names it) is one the reference checks report as an error in a
/// command: an `error.*` one where the failure is not known (`error_ok`: a `workflow_error`
/// hook's), an input `wf` does not declare, a state it does not have, a field of the loop
/// item; and, for a reference written as it is (`direct`, not through a variable or the dot
/// of a `with`), a namespace spelled otherwise than the checks accept (`States`) or a state
/// field that does not exist (`states.b.Outptu`).
fn refused_reference(wf: &Workflow, reference: &str, error_ok: bool, direct: bool) -> bool {
    let mut parts = reference.split('.');
    let written = parts.next().unwrap_or("");
    if direct && !TEMPLATE_ROOTS.contains(&written) {
        return true;
    }
    let ns = written.to_ascii_lowercase();
    let name = parts.next().unwrap_or("");
    match ns.as_str() {
        "error" => !error_ok,
        "inputs" => !name.is_empty() && !wf.inputs.iter().any(|d| d.name == name),
        "states" => {
            (!name.is_empty() && !wf.states.contains_key(name))
                || (direct
                    && parts
                        .next()
                        .is_some_and(|f| !f.is_empty() && !field_ok(f, &STATE_FIELDS)))
        }
        // A field of the loop item (`loop.Item.name`): the item is text in a template.
        "loop" => {
            let mut rest = std::iter::once(name).chain(parts);
            rest.find(|p| !matches!(*p, "Parent" | "parent"))
                .is_some_and(|p| matches!(p, "Item" | "item"))
                && rest.next().is_some_and(|f| !f.is_empty())
        }
        _ => false,
    }
}

/// The `UNQUOTED_SHELL_VALUE` warning for a value where no quoting protects it: inside
/// `${ … }` or right after an escaping backslash (`None` elsewhere). Path set by the caller.
fn unquotable(action: &ShellAction<'_>, body: &str, reference: &str) -> Option<Diagnostic> {
    let u = action.context.unprotected()?;
    let place = match &action.context {
        ShellContext::UnevenBranch { branch } => format!(
            "after the template branch {branch}, whose text leaves the shell quoting different from the other branch"
        ),
        _ => u.place.to_owned(),
    };
    Some(
        Diagnostic::warning(
            ErrorCode::WorkflowValidationUnquotedValue,
            String::new(),
            format!(
                "{{{{{body}}}}} puts {reference} into a shell command {place}, where no quoting protects it: {}",
                u.why
            ),
        )
        .with_hint(format!(
            "{}; `shell_quote: true` refuses such a value unless it is a plain word",
            u.fix
        )),
    )
}

/// The `UNQUOTED_SHELL_VALUE` note for a value inside a `#` comment (path set by the
/// caller): quotes do nothing there and a line break in the value would end the comment and
/// run the rest, so awf turns its line breaks into spaces (with or without `shell_quote:
/// true`). Breaker: `echo start # {{shell_quote .inputs.s}}` ran the value's second line.
fn in_comment(body: &str, reference: &str) -> Diagnostic {
    Diagnostic::new(
        Severity::Note,
        ErrorCode::WorkflowValidationUnquotedValue,
        String::new(),
        format!(
            "{{{{{body}}}}} puts {reference} into a shell comment: quotes do nothing there, so awf turns the value's line breaks (and carriage returns) into spaces, which keeps the rest of it in the comment"
        ),
    )
    .with_hint("a value in a comment only shows in the command text; to print it, pass it to echo or printf outside the comment")
}

/// `<<EOF` (`<<EOF and <<EOT`) for the here-documents enclosing an action through a
/// `$( … )` or backticks in their bodies ([`ShellAction::heredocs`]).
fn heredoc_names(action: &ShellAction<'_>) -> String {
    action
        .heredocs
        .iter()
        .map(|d| format!("<<{d}"))
        .collect::<Vec<_>>()
        .join(" and ")
}

/// The `UNQUOTED_SHELL_VALUE` warning for one action (path set by the caller).
fn unquoted_value(text: &str, action: &ShellAction<'_>, body: &str, reference: &str) -> Diagnostic {
    let fixed = quoted_form(body);
    let mode = "or set `shell_quote: true` at the top of the workflow";
    if let Some(first) = action.heredocs.first() {
        // Breaker: inside `$( )` or backticks in a here-document's body, the shell reads
        // the value as command text, and bash reads the body's lines before that: a line of
        // the value equal to the delimiter ends the here-document. `shell_quote` alone
        // does not stop the latter.
        let names = heredoc_names(action);
        return Diagnostic::warning(
            ErrorCode::WorkflowValidationUnquotedValue,
            String::new(),
            format!(
                "{{{{{body}}}}} puts {reference} into a shell command inside $( ) or backticks within a here-document ({names}): the shell reads it there as command text, so ;, $( ) or a quote in the value runs, and a line {first} in it ends the here-document and runs the lines after it (bash reads the here-document's lines first)"
            ),
        )
        .with_hint(format!(
            "assign it before the here-document (v={fixed}) and write \"$v\" in its place, {mode} (it quotes the value so that no line of it ends the here-document)"
        ));
    }
    let (why, hint) = match &action.context {
        ShellContext::Unquoted { .. } => (
            "unquoted: a value holding ;, $( ) or a quote runs as shell code".to_owned(),
            format!("write {fixed} (it quotes the value as one shell word), {mode}"),
        ),
        ShellContext::DoubleQuoted => (
            "inside a double-quoted string: a value holding $( ), a backtick or a \" runs as shell code".to_owned(),
            match closed_form(text, action, &fixed) {
                Some(f) => format!(
                    "close the double quotes around it: {f} (inside \"…\" the single quotes of shell_quote would be literal and protect nothing), {mode}"
                ),
                None => format!(
                    "end the double-quoted string before the value and write {fixed} after it (inside \"…\" its single quotes would be literal), {mode}"
                ),
            },
        ),
        ShellContext::SingleQuoted => (
            "inside a single-quoted string: a value holding ' ends the string and the rest runs as shell code".to_owned(),
            match closed_form(text, action, &fixed) {
                Some(f) => format!("close the single quotes around it: {f}, {mode}"),
                None => format!(
                    "end the single-quoted string before the value and write {fixed} after it, {mode}"
                ),
            },
        ),
        ShellContext::Backtick => (
            "inside backticks: the value is read as shell code".to_owned(),
            match closed_form(text, action, &fixed) {
                Some(f) => format!("use $( … ) instead of backticks: {f}, {mode}"),
                None => format!(
                    "use $( … ) instead of backticks and write {fixed} inside it, {mode}"
                ),
            },
        ),
        ShellContext::Heredoc {
            quoted: false,
            delimiter,
            ..
        } => (
            format!(
                "in a here-document (<<{delimiter}): $( ) and backticks in the value run as shell code, and a line {delimiter} in it ends the here-document and runs the lines after it"
            ),
            format!(
                "assign it before the here-document (v={fixed}) and write $v in the body, {mode}"
            ),
        ),
        ShellContext::Heredoc {
            quoted: true,
            delimiter,
            ..
        } => (
            format!(
                "in a here-document: a value holding the line {delimiter} ends it and the lines after it run as shell code"
            ),
            format!(
                "print the value outside the here-document (printf '%s\\n' {fixed}), {mode} (it refuses such a value)"
            ),
        ),
        // Warned by `unquotable` or `in_comment` before this is asked.
        ShellContext::ParameterExpansion
        | ShellContext::AfterBackslash
        | ShellContext::AfterDollar
        | ShellContext::AnsiC
        | ShellContext::Comment
        | ShellContext::Arithmetic
        | ShellContext::UnevenBranch { .. }
        | ShellContext::ShellDependent { .. } => (
            "where no quoting protects it".to_owned(),
            format!("write {fixed} elsewhere, {mode}"),
        ),
    };
    Diagnostic::warning(
        ErrorCode::WorkflowValidationUnquotedValue,
        String::new(),
        format!("{{{{{body}}}}} puts {reference} into a shell command {why}"),
    )
    .with_hint(hint)
}

/// The `INEFFECTIVE_SHELL_QUOTE` warning for an action ending in `shell_quote`/`escape`,
/// `None` where that quoting is right (a bare word). Path set by the caller.
fn ineffective_quote(
    wf: &Workflow,
    text: &str,
    action: &ShellAction<'_>,
    body: &str,
    reference: &str,
) -> Option<Diagnostic> {
    let written = format!("{{{{{body}}}}}");
    let bare = matches!(action.context, ShellContext::Unquoted { .. });
    if bare && (!action.heredocs.is_empty() || action.inside_backticks) {
        // Right as a shell word, but backticks unescape its `\` and `` ` `` (a backtick in
        // the value ends them), and bash ends an enclosing here-document at a line of the
        // value equal to its delimiter. `shell_quote: true` takes care of both.
        if wf.shell_quote {
            return None;
        }
        let (where_, why, hint) = match action.heredocs.first() {
            Some(first) => (
                format!(
                    "inside $( ) or backticks within a here-document ({})",
                    heredoc_names(action)
                ),
                format!(
                    "a line {first} in the value still ends the here-document (bash reads its lines before the $( )) and runs the lines after it"
                ),
                format!(
                    "assign it before the here-document (v={written}) and write \"$v\" in its place"
                ),
            ),
            None => (
                "inside backticks".to_owned(),
                "the backticks unescape its \\ and a backtick in the value ends them early, so the rest runs as shell code".to_owned(),
                format!("use $( … ) instead of the backticks around {written}"),
            ),
        };
        return Some(
            Diagnostic::warning(
                ErrorCode::WorkflowValidationIneffectiveQuote,
                String::new(),
                format!("{written} ({reference}) sits {where_}: {why}"),
            )
            .with_hint(format!(
                "{hint}, or set `shell_quote: true` at the top of the workflow"
            )),
        );
    }
    let (where_, why, hint) = match &action.context {
        ShellContext::Unquoted { .. }
        | ShellContext::ParameterExpansion
        | ShellContext::AfterBackslash
        | ShellContext::AfterDollar
        | ShellContext::AnsiC
        | ShellContext::Comment
        | ShellContext::Arithmetic
        | ShellContext::UnevenBranch { .. }
        | ShellContext::ShellDependent { .. } => return None,
        ShellContext::DoubleQuoted => (
            "inside a double-quoted string",
            "its single quotes are literal characters there, so $( ) or a backtick in the value still runs as shell code".to_owned(),
            closed_form(text, action, &written).map_or_else(
                || format!("end the double-quoted string before {written} and reopen it after"),
                |f| format!("close the double quotes around it: {f}"),
            ),
        ),
        ShellContext::SingleQuoted => (
            "inside a single-quoted string",
            "its quotes close the string and reopen it, so the value runs unquoted".to_owned(),
            closed_form(text, action, &written).map_or_else(
                || format!("end the single-quoted string before {written} and reopen it after"),
                |f| format!("close the single quotes around it: {f}"),
            ),
        ),
        ShellContext::Backtick => (
            "inside backticks",
            "a backtick or backslash in the value ends the quoting early and the rest runs as shell code".to_owned(),
            closed_form(text, action, &written).map_or_else(
                || format!("use $( … ) instead of backticks around {written}"),
                |f| format!("use $( … ) instead of backticks: {f}"),
            ),
        ),
        ShellContext::Heredoc { quoted: false, .. } => (
            "in a here-document",
            "its quotes are printed as text and $( ) or a backtick in the value still runs as shell code".to_owned(),
            format!("assign it before the here-document (v={written}) and write $v in the body"),
        ),
        ShellContext::Heredoc {
            quoted: true,
            delimiter,
            ..
        } => (
            "in a here-document",
            format!(
                "its quotes are printed as text and a line {delimiter} in the value still ends the here-document and runs the lines after it"
            ),
            format!("print the value outside the here-document (printf '%s\\n' {written})"),
        ),
    };
    let plain = format!("{{{{{}}}}}", strip_quoting(body));
    let message = if wf.shell_quote {
        format!(
            "{written} ({reference}) sits {where_}: under `shell_quote: true` the value is safe, but its quotes print as part of it"
        )
    } else {
        format!("{written} ({reference}) sits {where_}: {why}")
    };
    let hint = if wf.shell_quote {
        format!("write {plain}: `shell_quote: true` quotes it for where it lands")
    } else {
        format!("{hint}, or write {plain} and set `shell_quote: true` at the top of the workflow")
    };
    Some(
        Diagnostic::warning(
            ErrorCode::WorkflowValidationIneffectiveQuote,
            String::new(),
            message,
        )
        .with_hint(hint),
    )
}

/// `shell_quote .x` / `.x | escape` → `.x`: the pipeline without its final quoting call.
fn strip_quoting(body: &str) -> String {
    if let Some((head, _)) = body.rsplit_once('|') {
        return head.trim().to_owned();
    }
    let mut words = body.splitn(2, char::is_whitespace);
    let _ = words.next();
    words.next().unwrap_or("").trim().to_owned()
}

/// Whether a template action's body (the trimmed text between `{{` and `}}`, trim markers
/// removed) is a value pipeline, and if so whether it already ends in one of
/// [`SHELL_QUOTING_FUNCS`]: `None` for `if`/`range`/`end`…, a comment or an assignment
/// (`$x := …`); `Some(true)` for `shell_quote .x` or `.x | escape`; `Some(false)` otherwise.
fn value_pipeline(body: &str) -> Option<bool> {
    if body.is_empty() || body.starts_with("/*") {
        return None;
    }
    let first = body
        .split(|c: char| c.is_whitespace() || c == '(')
        .next()
        .unwrap_or("");
    if matches!(
        first,
        "if" | "else"
            | "end"
            | "range"
            | "with"
            | "define"
            | "template"
            | "block"
            | "break"
            | "continue"
    ) {
        return None;
    }
    if first.starts_with('$') {
        let after = body[first.len()..].trim_start();
        if after.starts_with(":=") || (after.starts_with('=') && !after.starts_with("==")) {
            return None;
        }
    }
    let last_cmd = body.rsplit('|').next().unwrap_or(body).trim();
    let last_fn = last_cmd.split_whitespace().next().unwrap_or("");
    Some(
        SHELL_QUOTING_FUNCS.contains(&last_fn)
            || (!body.contains('|') && SHELL_QUOTING_FUNCS.contains(&first)),
    )
}

/// Whether a template action's body (the trimmed text between `{{` and `}}`, trim markers
/// removed) prints a value that shell quoting applies to: not `if`/`range`/`end`…, a
/// comment, an assignment (`$x := …`), or a pipeline already ending in one of
/// [`SHELL_QUOTING_FUNCS`]. Used by the unquoted-value warning here and by the template
/// engine's `shell_quote: true` rewrite, so both judge an action alike.
pub fn prints_value(body: &str) -> bool {
    value_pipeline(body) == Some(false)
}

/// Whether a template action's body (as for [`prints_value`]) is a value pipeline already
/// ending in one of [`SHELL_QUOTING_FUNCS`] (`shell_quote .x`, `.x | escape`). The template
/// engine's `shell_quote: true` rewrite quotes such a value again where its single quotes do
/// not protect it (inside quotes, backticks, here-documents); validate warns there.
/// Source: issue 14.
pub fn ends_in_shell_quoting(body: &str) -> bool {
    value_pipeline(body) == Some(true)
}

/// Where a template sits, which decides what it may reference.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Site<'a> {
    /// A step field (command, dir, loop fields, pre hooks): strictly earlier states.
    Step(&'a str),
    /// A post hook of a step: earlier states, the step itself and the states it contains
    /// (a parallel block's branches, a loop's body).
    PostHook(&'a str),
    /// A workflow hook; `error` is true in `workflow_error`.
    Workflow { error: bool },
    /// An expression (`when`, `while`, `break_when`) of a state: names and fields are
    /// checked, not the order (a condition may read a state of an earlier iteration).
    Expr,
}

const STATE_FIELDS: [&str; 11] = [
    "Output",
    "Stderr",
    "ExitCode",
    "Status",
    "Response",
    "TokensUsed",
    "TokensInput",
    "TokensOutput",
    "TokensEstimated",
    "JSON",
    "Outputs",
];
const WORKFLOW_FIELDS: [&str; 5] = ["ID", "Name", "CurrentState", "StartedAt", "Duration"];
const ERROR_FIELDS: [&str; 4] = ["Message", "State", "ExitCode", "Type"];
const CONTEXT_FIELDS: [&str; 3] = ["WorkingDir", "User", "Hostname"];
/// How to read field `field` of an object loop item: its JSON text through `jq` in a
/// command, or `loop.Item.<field>` in an expression, where the item keeps its shape. Shared
/// by `awf validate` and the run-time error of the template.
pub fn loop_item_field_hint(field: &str) -> String {
    format!(
        "read a field of an object item from its JSON, e.g. in a command `echo {{{{shell_quote \
         .loop.Item}}}} | jq -r .{field}`; in a `when:`/`while:`/`break_when:` expression \
         `loop.Item.{field}` works as written"
    )
}

const LOOP_FIELDS: [&str; 7] = [
    "Item", "Index", "Index1", "First", "Last", "Length", "Parent",
];

fn norm(s: &str) -> String {
    s.chars()
        .filter(|c| *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

/// `ExitCode` → `exit_code`: the snake_case spelling templates and expressions also accept
/// (an underscore before each capital that follows a lower-case letter or digit).
fn snake(pascal: &str) -> String {
    let mut out = String::with_capacity(pascal.len() + 4);
    let mut prev_lower = false;
    for c in pascal.chars() {
        if c.is_uppercase() && prev_lower {
            out.push('_');
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        out.extend(c.to_lowercase());
    }
    out
}

/// Matches a field as the runtime does: exactly its PascalCase name (`ExitCode`) or its
/// snake_case one (`exit_code`); any other casing (`EXITCODE`, `exitcode`) is undefined at run
/// time.
fn field_ok(field: &str, allowed: &[&str]) -> bool {
    allowed.iter().any(|a| *a == field || snake(a) == field)
}

/// The allowed field `field` differs from only by casing or underscores (`OUTPUT` → `Output`).
fn case_twin<'a>(field: &str, allowed: &[&'a str]) -> Option<&'a str> {
    let n = norm(field);
    allowed.iter().copied().find(|a| norm(a) == n)
}

/// `{{ … }}` bodies in a template text.
fn actions(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("{{") {
        let after = &rest[i + 2..];
        match after.find("}}") {
            Some(j) => {
                out.push(&after[..j]);
                rest = &after[j + 2..];
            }
            None => break,
        }
    }
    out
}

/// The tokens of one action: quoted strings and comments removed, split on whitespace,
/// parentheses, pipes, commas and operators (`.inputs.x`, `$v.Field`, `.`, `index`, `3`).
fn raw_tokens(action: &str) -> Vec<String> {
    let body = action
        .trim()
        .trim_start_matches('-')
        .trim_end_matches('-')
        .trim();
    if body.starts_with("/*") {
        return Vec::new();
    }
    // expr-lang's optional chaining (`states.a?.Output`) reads like `states.a.Output`.
    let body = body.replace("?.", ".");
    let mut cleaned = String::new();
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in body.chars() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' && q != '`' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                    cleaned.push(' ');
                }
            }
            None => {
                if c == '"' || c == '`' || c == '\'' {
                    quote = Some(c);
                } else {
                    cleaned.push(c);
                }
            }
        }
    }
    cleaned
        .split(|c: char| {
            c.is_whitespace()
                || matches!(
                    c,
                    '(' | ')'
                        | '|'
                        | ','
                        | '='
                        | '!'
                        | '<'
                        | '>'
                        | '+'
                        | '*'
                        | '/'
                        | '%'
                        | '['
                        | ']'
                        | '&'
                        | '?'
                        | ':'
                        | '{'
                        | '}'
                )
        })
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The namespace references of a template action's body (`inputs.x`, `states.b.Output`,
/// leading dot removed): its [`raw_tokens`] that are not variables or numbers and hold a
/// dot after the first character.
fn reference_tokens(action: &str) -> Vec<String> {
    raw_tokens(action)
        .into_iter()
        .filter(|t| !t.starts_with('$') && !t.starts_with(|c: char| c.is_ascii_digit()))
        .map(|t| t.trim_start_matches('.').to_owned())
        .filter(|t| t.contains('.'))
        .collect()
}

/// The loops whose `.loop` the templates of state `name` see, with their names: each loop
/// that lists it in its `body`, or lists a parallel block that runs it as a branch (through
/// any depth of parallel blocks).
fn enclosing_loops<'w>(wf: &'w Workflow, name: &str) -> Vec<(&'w str, &'w LoopStep)> {
    let mut out = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut queue = vec![name.to_owned()];
    while let Some(n) = queue.pop() {
        if !seen.insert(n.clone()) {
            continue;
        }
        for (container, s) in &wf.states {
            match &s.kind {
                StateKind::Loop(l) if l.body.contains(&n) => out.push((container.as_str(), l)),
                StateKind::Parallel(p) if p.branches.contains(&n) => queue.push(container.clone()),
                _ => {}
            }
        }
    }
    out
}

/// Whether loop `l` is a `for_each` whose items are written in the YAML (no template) and
/// are each a string, a number or a boolean (at least one item).
fn scalar_items(l: &LoopStep) -> bool {
    let LoopOver::Items(text) = &l.over else {
        return false;
    };
    if text.contains("{{") {
        return false;
    }
    crate::workflow::loop_items(text).is_ok_and(|items| {
        !items.is_empty()
            && items.iter().all(|v| {
                matches!(
                    v,
                    serde_json::Value::String(_)
                        | serde_json::Value::Number(_)
                        | serde_json::Value::Bool(_)
                )
            })
    })
}

/// The loop items a template action indexes with a quoted key (`index .loop.Item "name"`,
/// also `.loop.Parent.Item`, `$.loop.Item`, a key in backquotes), each as its reference
/// (`loop.Item`, leading `$`/`.` removed) and the key. An index by number (`index .loop.Item
/// 0`, a byte of a string item) is left out.
fn indexed_loop_items(action: &str) -> Vec<(String, String)> {
    let words: Vec<&str> = action
        .split(|c: char| c.is_whitespace() || matches!(c, '(' | ')' | '|'))
        .filter(|w| !w.is_empty())
        .collect();
    let mut out = Vec::new();
    for w in words.windows(3) {
        let [f, item, key] = w else { continue };
        if *f != "index" {
            continue;
        }
        let reference = item.trim_start_matches('$').trim_start_matches('.');
        let mut parts = reference.split('.');
        if parts.next() != Some("loop") {
            continue;
        }
        let is_item = parts
            .find(|p| !matches!(*p, "Parent" | "parent"))
            .is_some_and(|p| matches!(p, "Item" | "item"))
            && parts.next().is_none();
        let quoted = key.len() >= 2
            && (key.starts_with('"') && key.ends_with('"')
                || key.starts_with('`') && key.ends_with('`'));
        if is_item && quoted {
            out.push((reference.to_owned(), key[1..key.len() - 1].to_owned()));
        }
    }
    out
}

struct RefCtx<'a> {
    wf: &'a Workflow,
    order: HashMap<&'a str, usize>,
    siblings: HashMap<&'a str, &'a str>,
    /// The states that run inside a loop's body (listed in one, or in a parallel block or
    /// loop that is): the only ones that see `.loop`.
    in_loop: HashSet<&'a str>,
    /// How many loops the states of [`RefCtx::in_loop`] run inside at most (1: a loop's
    /// body; 2: the body of a loop in another loop's body; ...).
    loop_depth: HashMap<&'a str, usize>,
    /// Loop body states already warned about as also running outside any loop (one warning
    /// each).
    outside_noted: HashSet<String>,
    /// The action being checked binds a value (`with`, `range`, `$v := …`): a whole state
    /// (`.states.s1`) is then a value like any other (breaker: "needs a field" refused it).
    binds: bool,
    /// The token being checked is rendered as a template (not a bare expression, where an
    /// input the run was not given is `nil`).
    rendered: bool,
    /// The `{{ … }}` action being checked, as written (empty for a bare expression).
    action: String,
    /// Optional inputs without a default already noted (one note each).
    noted: HashSet<&'a str>,
    /// Only a field or key of a loop item is checked (`.loop.Item.name`, `index .loop.Item
    /// "name"`): the texts §2.10 leaves unscanned (an agent's prompt, a call's inputs), where
    /// such a reference fails the step all the same.
    items_only: bool,
    out: Vec<Diagnostic>,
}

impl<'a> RefCtx<'a> {
    fn err(&mut self, path: &str, message: String, hint: Option<String>) {
        let mut d = Diagnostic::error(ErrorCode::WorkflowValidationInvalidReference, path, message);
        d.hint = hint;
        self.out.push(d);
    }

    fn field(&mut self, path: &str, ns: &str, field: Option<&str>, allowed: &[&str], token: &str) {
        match field {
            None if self.binds => {}
            None => self.err(
                path,
                format!(
                    "reference \"{token}\" needs a field ({})",
                    allowed.join(", ")
                ),
                None,
            ),
            Some(f) if !field_ok(f, allowed) => {
                let hint = case_twin(f, allowed)
                    .map(|c| {
                        format!(
                            "field names are case-sensitive: write '{c}' (or '{}')",
                            snake(c)
                        )
                    })
                    .or_else(|| {
                        closest(f, allowed.iter().copied()).map(|c| format!("did you mean '{c}'?"))
                    })
                    .or_else(|| Some(format!("{ns} fields: {}", allowed.join(", "))));
                self.err(
                    path,
                    format!("invalid {ns} property \"{f}\" in \"{token}\""),
                    hint,
                );
            }
            Some(_) => {}
        }
    }

    /// The error of field `name` of a loop item read in a template (`written` as the action
    /// holds it, without its braces): `.loop.Item` is the item as text there (a string item
    /// as it is, an object item as its JSON text, as in AWF (Go)), which has no field, so the
    /// step fails at every item, whatever the items are.
    fn item_field(&mut self, path: &str, written: &str, name: &str) {
        self.err(
            path,
            format!(
                "loop reference \"{{{{{written}}}}}\" in {path}: `.loop.Item` is the \
                 item as text in a template (an object item is its JSON text, as in \
                 AWF (Go)), so it has no field \"{name}\""
            ),
            Some(loop_item_field_hint(name)),
        );
    }

    /// The error of `index .loop.Item "key"` in a template of a state whose loops all list
    /// their items in the YAML as strings, numbers or booleans ([`scalar_items`]): such an
    /// item has no key, and the step fails at every item. Items a template gives, object
    /// items and `.loop.Parent.Item` are left to the run.
    fn indexed_scalar_item(&mut self, path: &str, site: Site<'_>, token: &str, key: &str) {
        let (Site::Step(c) | Site::PostHook(c)) = site else {
            return;
        };
        if token.split('.').count() != 2 {
            return;
        }
        let loops = enclosing_loops(self.wf, c);
        if loops.is_empty() || !loops.iter().all(|(_, l)| scalar_items(l)) {
            return;
        }
        let names: Vec<String> = loops.iter().map(|(n, _)| format!("\"{n}\"")).collect();
        self.err(
            path,
            format!(
                "loop reference \"{{{{index .{token} \"{key}\"}}}}\" in {path}: the items of \
                 loop {} are plain values (strings, numbers or booleans), so `.loop.Item` has \
                 no key \"{key}\": the step would fail at every item",
                names.join(", ")
            ),
            Some(format!(
                "`.loop.Item` is the item itself (`{{{{.loop.Item}}}}`); to loop over records, \
                 list objects as items (`items: [{{{key}: a}}]`) and read a field from the \
                 item's JSON, e.g. in a command `echo {{{{shell_quote .loop.Item}}}} | jq -r .{key}`"
            )),
        );
    }

    /// [`RefCtx::check_text`] of a text §2.10 does not scan, for a loop item's field or key
    /// only ([`RefCtx::items_only`]: [`RefCtx::item_field`],
    /// [`RefCtx::indexed_scalar_item`]).
    fn check_item_access(&mut self, text: &str, path: LazyPath<'_>, site: Site<'_>) {
        self.items_only = true;
        self.check_text(text, path, site);
        self.items_only = false;
    }

    /// The `{{ … }}` actions of `text` (at `path`, made when it has one).
    fn check_text(&mut self, text: &str, path: LazyPath<'_>, site: Site<'_>) {
        let found = actions(text);
        if found.is_empty() {
            return;
        }
        let path: &str = &path();
        for action in found {
            // Findings about this action point at it (inside a `command: |` block, its line).
            let before = self.out.len();
            let offset = (action.as_ptr() as usize)
                .saturating_sub(text.as_ptr() as usize)
                .saturating_sub(2);
            let body = action.trim().trim_start_matches('-').trim_start();
            let first = body.split_whitespace().next().unwrap_or("");
            self.binds = matches!(first, "with" | "range")
                || (first.starts_with('$') && body[first.len()..].trim_start().starts_with(":="));
            self.rendered = true;
            self.action = format!("{{{{{action}}}}}");
            for token in reference_tokens(action) {
                self.check_token(&token, path, site);
            }
            for (token, key) in indexed_loop_items(action) {
                self.indexed_scalar_item(path, site, &token, &key);
            }
            for d in self.out.iter_mut().skip(before) {
                if d.in_value.is_none() && d.path == path {
                    d.point_at(text, offset);
                }
            }
            self.rendered = false;
            self.action.clear();
            self.binds = false;
        }
    }

    /// A note at the first template reference to an optional input without a default:
    /// rendered in a run not given it, the reference fails the step (as in AWF (Go)), which
    /// nothing said before the run (new user).
    fn note_optional_input(&mut self, input: &'a crate::workflow::InputDef, path: &str) {
        if input.required || input.default.is_some() || !self.noted.insert(&input.name) {
            return;
        }
        let name = &input.name;
        self.out.push(
            Diagnostic::new(
                crate::ports::repository::Severity::Note,
                ErrorCode::WorkflowValidationInvalidReference,
                path,
                format!(
                    "optional input \"{name}\" has no default: {path} fails \
                     (EXECUTION.TEMPLATE.FAILED) in a run not given it"
                ),
            )
            .with_hint(format!(
                "give it a default (`default: \"\"` to test it with `{{{{if .inputs.{name}}}}}`) or make it `required: true`"
            )),
        );
    }

    /// `max_iterations` without `{{ }}`: identifiers of an arithmetic expression.
    fn check_bare(&mut self, text: &str, path: LazyPath<'_>, site: Site<'_>) {
        let tokens = reference_tokens(text);
        if tokens.is_empty() {
            return;
        }
        let path: &str = &path();
        for token in tokens {
            self.check_token(&token, path, site);
        }
    }

    /// An expression (`when`, `while`, `break_when`): its identifiers, or its `{{ }}` actions
    /// when it is written as a template.
    fn check_expr(&mut self, text: &str, path: LazyPath<'_>) {
        if text.contains("{{") {
            self.check_text(text, path, Site::Expr);
        } else {
            // A whole state is a value in an expression: `states.later == nil` is true
            // before `later` ran (AWF (Go) compiles it; breaker: "needs a field").
            self.binds = true;
            self.check_bare(text, path, Site::Expr);
            self.binds = false;
        }
    }

    fn check_token(&mut self, token: &str, path: &str, site: Site<'_>) {
        let parts: Vec<&str> = token.split('.').collect();
        let ns = parts[0];
        if self.items_only && ns != "loop" {
            return;
        }
        let first = parts.get(1).copied().filter(|p| !p.is_empty());
        match ns {
            "inputs" => {
                let wf = self.wf;
                if let Some(name) = first
                    && let Some(input) = wf.inputs.iter().find(|i| i.name == name)
                {
                    if self.rendered {
                        self.note_optional_input(input, path);
                    }
                } else if let Some(name) = first {
                    let hint = closest(name, self.wf.inputs.iter().map(|i| i.name.as_str()))
                        .map(|c| format!("did you mean '{c}'?"))
                        .or_else(|| Some(format!("declare it under inputs: (- name: {name})")));
                    self.err(
                        path,
                        format!("undefined input \"{name}\" referenced in {path}"),
                        hint,
                    );
                }
            }
            "states" => {
                let Some(target) = first else { return };
                if !self.wf.states.contains_key(target) {
                    let hint = Some(unknown_state_hint(self.wf, target));
                    self.err(
                        path,
                        format!("reference to unknown state \"{target}\" in {path}"),
                        hint,
                    );
                    return;
                }
                self.field(path, "state", parts.get(2).copied(), &STATE_FIELDS, token);
                let (current, allow_self) = match site {
                    Site::Step(c) => (c, false),
                    Site::PostHook(c) => (c, true),
                    Site::Workflow { .. } | Site::Expr => return,
                };
                // A post hook runs after what the state contains (a parallel block's
                // branches, a loop's body, at any depth): those ran (trial: a block's post
                // hook reading its branch was a "forward reference").
                if allow_self && runs_inside(self.wf, current, target) {
                    return;
                }
                if let (Some(a), Some(b)) = (self.siblings.get(current), self.siblings.get(target))
                    && a == b
                    && current != target
                {
                    self.out.push(Diagnostic::warning(
                        ErrorCode::WorkflowValidationInvalidReference,
                        path,
                        format!("parallel branch \"{current}\" reads sibling branch \"{target}\", which may not have run yet"),
                    ));
                    return;
                }
                if let (Some(oc), Some(ot)) = (self.order.get(current), self.order.get(target)) {
                    let forward = if allow_self { ot > oc } else { ot >= oc };
                    if forward && current != target && reaches(self.wf, target, current) {
                        // Some route runs it first (`a -> b -> c` beside `a -> c`).
                        self.out.push(Diagnostic::warning(
                            ErrorCode::WorkflowValidationInvalidReference,
                            path,
                            format!("step \"{target}\" may not have run on every route to {path}"),
                        ));
                    } else if forward {
                        self.err(
                            path,
                            format!("forward reference to step \"{target}\" in {path}: it has not run at this point"),
                            Some("a step can only read states that ran before it".to_owned()),
                        );
                    }
                }
            }
            "workflow" => self.field(path, "workflow", first, &WORKFLOW_FIELDS, token),
            "error" => {
                if site != (Site::Workflow { error: true }) {
                    // As written: `{{.error.Message}}` in a template, `error.Message` in a
                    // bare expression.
                    let written = if self.action.is_empty() {
                        token.to_owned()
                    } else {
                        self.action.clone()
                    };
                    self.err(
                        path,
                        format!("error reference \"{written}\" used outside of error hook context"),
                        Some(
                            "error.* is only available in workflow_error hooks and terminal messages"
                                .to_owned(),
                        ),
                    );
                } else {
                    self.field(path, "error", first, &ERROR_FIELDS, token);
                }
            }
            "context" => self.field(path, "context", first, &CONTEXT_FIELDS, token),
            "loop" => {
                // `.loop.Parent.Parent.Item`: each `Parent` one loop further out.
                let parents = parts[1..]
                    .iter()
                    .take_while(|p| matches!(**p, "Parent" | "parent"))
                    .count();
                // In a template `.loop.Item` is the item as text (an object item prints as its
                // JSON, as in AWF (Go)): a field of it fails every time (a new user's
                // `{{.loop.Item.name}}` passed validate and failed the run). In an expression
                // the item keeps its shape, and `loop.Item.name` works.
                if !self.action.is_empty()
                    && parts
                        .get(1 + parents)
                        .is_some_and(|p| matches!(*p, "Item" | "item"))
                    && let Some(field) = parts.get(2 + parents)
                {
                    self.item_field(path, &format!(".{token}"), field);
                }
                if self.items_only {
                    return;
                }
                self.field(
                    path,
                    "loop",
                    parts
                        .get(1 + parents)
                        .copied()
                        .filter(|p| !p.is_empty())
                        .or(
                            // `.loop.Parent` alone is a value (nil outside a nested loop).
                            if parents > 0 { Some("Parent") } else { None },
                        ),
                    &LOOP_FIELDS,
                    token,
                );
                if let Site::Step(c) | Site::PostHook(c) = site
                    && parents > 0
                    && parts.len() > 1 + parents
                    && self.in_loop.contains(c)
                    && self.loop_depth.get(c).copied().unwrap_or(0) <= parents
                {
                    let depth = self.loop_depth.get(c).copied().unwrap_or(0);
                    self.err(
                        path,
                        format!(
                            "loop reference \"{{{{.{token}}}}}\" in {path}: state \"{c}\" runs in \
                             {} only, so `.loop{}` is nil",
                            if depth == 1 {
                                "one loop".to_owned()
                            } else {
                                format!("{depth} nested loops")
                            },
                            ".Parent".repeat(parents)
                        ),
                        Some(
                            "`.loop.Parent` is the loop around the current loop: use it in the \
                             body of a loop that is itself in another loop's body"
                                .to_owned(),
                        ),
                    );
                }
                if let Site::Step(c) | Site::PostHook(c) = site
                    && !self.in_loop.contains(c)
                {
                    self.err(
                        path,
                        format!(
                            "loop reference \"{{{{.{token}}}}}\" in {path}: state \"{c}\" never runs \
                             inside a loop"
                        ),
                        Some(
                            "`.loop` is set only for the states of a for_each or while loop's \
                             body; list the state under the loop's `body:`, or keep what it \
                             needs in a body step's output"
                                .to_owned(),
                        ),
                    );
                }
                if let Site::Step(c) | Site::PostHook(c) = site
                    && self.in_loop.contains(c)
                    && self.order.contains_key(c)
                    && self.outside_noted.insert(c.to_owned())
                {
                    // Listed in a loop's body, and also reached by the routes outside every
                    // loop (breaker: it passed validate, then failed with "undefined
                    // variable: loop" when the outside route ran it).
                    self.out.push(
                        Diagnostic::warning(
                            ErrorCode::WorkflowValidationInvalidReference,
                            path,
                            format!(
                                "loop reference \"{{{{.{token}}}}}\" in {path}: state \"{c}\" is in a \
                                 loop's body but also runs outside any loop (a route from \
                                 outside the loop leads to it), where `.loop` is undefined and \
                                 the step fails"
                            ),
                        )
                        .with_hint(
                            "route to the loop instead of to its body state, or give the outside \
                             route a state of its own",
                        ),
                    );
                }
            }
            "env" | "awf" => {}
            other => {
                let hint = closest(other, TEMPLATE_ROOTS.iter().copied())
                    .map(|c| format!("did you mean '{c}'?"));
                self.err(
                    path,
                    format!("unknown reference type \"{other}\" in \"{token}\""),
                    hint,
                );
            }
        }
    }

    fn check_actions(&mut self, actions: &[HookAction], path: LazyPath<'_>, site: Site<'_>) {
        for (i, a) in actions.iter().enumerate() {
            let text = match a {
                HookAction::Log(t) | HookAction::Command(t) => t,
            };
            self.check_text(text, &|| format!("{}.{i}", path()), site);
        }
    }
}

/// The states of `wf` that run inside a loop's body: listed in a loop's `body`, or in the
/// branches or body of a parallel block or loop that runs inside one (to any depth).
fn states_in_loops(wf: &Workflow) -> HashSet<&str> {
    let mut inside: HashSet<&str> = HashSet::new();
    loop {
        let before = inside.len();
        for (name, s) in &wf.states {
            let contained: &[String] = match &s.kind {
                StateKind::Loop(l) => &l.body,
                StateKind::Parallel(p) if inside.contains(name.as_str()) => &p.branches,
                _ => continue,
            };
            inside.extend(contained.iter().map(String::as_str));
        }
        if inside.len() == before {
            return inside;
        }
    }
}

/// For each state that runs inside loops, how many loops it runs inside at most (the deepest
/// nesting among the places it is listed): 1 in a loop's body, one more for each loop around
/// that loop; a parallel block's branches count as deep as the block. Depths stop growing at
/// 16 (a loop listed in its own body is refused elsewhere).
fn loop_depths(wf: &Workflow) -> HashMap<&str, usize> {
    let mut depth: HashMap<&str, usize> = HashMap::new();
    loop {
        let mut changed = false;
        for (name, s) in &wf.states {
            let (contained, d): (&[String], usize) = match &s.kind {
                StateKind::Loop(l) => (&l.body, depth.get(name.as_str()).copied().unwrap_or(0) + 1),
                StateKind::Parallel(p) => match depth.get(name.as_str()) {
                    Some(d) => (&p.branches, *d),
                    None => continue,
                },
                _ => continue,
            };
            let d = d.min(16);
            for b in contained {
                let e = depth.entry(b.as_str()).or_insert(0);
                if *e < d {
                    *e = d;
                    changed = true;
                }
            }
        }
        if !changed {
            return depth;
        }
    }
}

/// Static reference analysis run by `awf validate`: undeclared inputs (also in arithmetic
/// `max_iterations`), unknown states, forward and self references (BFS order from `initial`,
/// loop bodies not followed; a post hook may read its own step and the states it
/// contains), unknown fields per namespace
/// (PascalCase or snake_case, as at run time; another casing such as `OUTPUT` is an error),
/// `error.*` outside `workflow_error` hooks, unknown namespaces.
///
/// Scanned: step `command` and `dir`, loop `items` / `max_iterations`, the expressions
/// `while`, `break_when` and transition `when` (names and fields only, not order), step
/// hooks, workflow hooks. An agent's `prompt`, `system_prompt` and
/// `conversation.inject_context` and a call's `inputs` are scanned for a loop item's field or
/// key only: `.loop.Item.name` in a template fails the step
/// whatever the items are (the item is text there), `index .loop.Item "name"` when the loop
/// lists plain values. Code `WORKFLOW.VALIDATION.INVALID_REFERENCE`, severity Error (a
/// parallel sibling reference is a Warning).
/// Source: spec/workflow.md §2.10; decisions.md (casing).
pub fn references(wf: &Workflow) -> Vec<Diagnostic> {
    let mut siblings = HashMap::new();
    for (name, s) in &wf.states {
        if let StateKind::Parallel(p) = &s.kind {
            for b in &p.branches {
                siblings.insert(b.as_str(), name.as_str());
            }
        }
    }
    let mut ctx = RefCtx {
        wf,
        order: bfs_order(wf),
        siblings,
        in_loop: states_in_loops(wf),
        loop_depth: loop_depths(wf),
        outside_noted: HashSet::new(),
        binds: false,
        rendered: false,
        action: String::new(),
        noted: HashSet::new(),
        items_only: false,
        out: Vec::new(),
    };
    for (name, s) in &wf.states {
        let base = StateBase(name);
        let site = Site::Step(name);
        match &s.kind {
            StateKind::Agent(a) => {
                let texts = [
                    (a.prompt.as_ref(), "prompt"),
                    (a.system_prompt.as_ref(), "system_prompt"),
                    (
                        a.conversation
                            .as_ref()
                            .and_then(|c| c.inject_context.as_ref()),
                        "conversation.inject_context",
                    ),
                ];
                for (text, key) in texts {
                    if let Some(t) = text {
                        ctx.check_item_access(t, &|| format!("{base}.{key}"), site);
                    }
                }
            }
            StateKind::CallWorkflow(c) => {
                for (k, v) in &c.inputs {
                    ctx.check_item_access(v, &|| format!("{base}.inputs.{k}"), site);
                }
            }
            StateKind::Command(c) => {
                if let CommandSource::Inline(cmd) = &c.source {
                    ctx.check_text(cmd, &|| format!("{base}.command"), site);
                }
                if let Some(dir) = &c.dir {
                    ctx.check_text(dir, &|| format!("{base}.dir"), site);
                }
            }
            StateKind::Loop(l) => {
                match &l.over {
                    LoopOver::Items(items) => {
                        ctx.check_text(items, &|| format!("{base}.items"), site);
                    }
                    LoopOver::While(w) => ctx.check_expr(w, &|| format!("{base}.while")),
                }
                if let MaxIterations::Dynamic(m) = &l.max_iterations {
                    let p = || format!("{base}.max_iterations");
                    if m.contains("{{") {
                        ctx.check_text(m, &p, site);
                    } else {
                        ctx.check_bare(m, &p, site);
                    }
                }
                if let Some(b) = &l.break_when {
                    ctx.check_expr(b, &|| format!("{base}.break_when"));
                }
            }
            // A terminal's message is rendered when the run ends: any state may have run,
            // and `.error` is the failure that routed there (`on_failure`); an inline
            // `on_failure: {message}` is named where it is written, never by its internal
            // state (breaker: `{{.error.message}}` there was refused, at
            // `states.__inline_error_a.message`).
            StateKind::Terminal(t) => {
                if let Some(m) = &t.message {
                    let path = || format!("{}.message", crate::workflow::state_path(name));
                    ctx.check_text(m, &path, Site::Workflow { error: true });
                }
            }
            _ => {}
        }
        // Rendered when the gate is asked, before the step runs.
        if let Some(a) = &s.approval {
            ctx.check_text(&a.message, &|| format!("{base}.approval.message"), site);
        }
        for (i, t) in s.transitions.iter().enumerate() {
            if let Some(w) = &t.when {
                ctx.check_expr(w, &|| format!("{base}.transitions.{i}.when"));
            }
        }
        ctx.check_actions(&s.hooks.pre, &|| format!("{base}.hooks.pre"), site);
        ctx.check_actions(
            &s.hooks.post,
            &|| format!("{base}.hooks.post"),
            Site::PostHook(name),
        );
    }
    let h = &wf.hooks;
    ctx.check_actions(
        &h.workflow_start,
        &|| "hooks.workflow_start".to_owned(),
        Site::Workflow { error: false },
    );
    ctx.check_actions(
        &h.workflow_end,
        &|| "hooks.workflow_end".to_owned(),
        Site::Workflow { error: false },
    );
    ctx.check_actions(
        &h.workflow_error,
        &|| "hooks.workflow_error".to_owned(),
        Site::Workflow { error: true },
    );
    ctx.check_actions(
        &h.workflow_cancel,
        &|| "hooks.workflow_cancel".to_owned(),
        Site::Workflow { error: false },
    );
    ctx.out
}

/// The states whose results the templates of state `name` read (`{{.states.a.Output}}`,
/// `{{states.b.ExitCode}}`), each once: in what the step runs (command, prompt, options,
/// inputs, loop items, …), then its approval message, then its hooks (each as written), and
/// likewise in the states it contains (a parallel block's branches, a loop's body, at any
/// depth, after the step). Transitions are left out (they route; they do not run the step), and so are
/// `name` itself, the states it contains and names that are not states of `wf`.
///
/// What `awf run --step` uses to name every state to `--mock`: each of these that has no
/// result in the run is read by a template of the step.
pub fn states_read_by(wf: &Workflow, name: &str) -> Vec<String> {
    // The step and the states it contains, breadth first.
    let mut inside: Vec<&State> = Vec::new();
    let mut queue: VecDeque<&str> = VecDeque::from([name]);
    while let Some(n) = queue.pop_front() {
        let Some(s) = wf.state(n) else { continue };
        if inside.iter().any(|i| i.name == n) {
            continue;
        }
        inside.push(s);
        match &s.kind {
            StateKind::Parallel(p) => queue.extend(p.branches.iter().map(String::as_str)),
            StateKind::Loop(l) => queue.extend(l.body.iter().map(String::as_str)),
            StateKind::Command(_)
            | StateKind::Agent(_)
            | StateKind::Operation(_)
            | StateKind::CallWorkflow(_)
            | StateKind::Terminal(_) => {}
        }
    }
    let mut texts: Vec<String> = Vec::new();
    for s in &inside {
        for v in [
            serde_json::to_value(&s.kind),
            serde_json::to_value(&s.approval),
            serde_json::to_value(&s.hooks),
        ]
        .into_iter()
        .flatten()
        {
            strings_of(&v, &mut texts);
        }
    }
    let mut out: Vec<String> = Vec::new();
    for text in &texts {
        for action in actions(text) {
            for token in reference_tokens(action) {
                let mut parts = token.split('.');
                let (Some("states"), Some(state)) = (parts.next(), parts.next()) else {
                    continue;
                };
                if wf.states.contains_key(state)
                    && !inside.iter().any(|i| i.name == state)
                    && !out.iter().any(|o| o == state)
                {
                    out.push(state.to_owned());
                }
            }
        }
    }
    out
}

/// Every string of `v` that holds a template action (`{{`), in document order.
fn strings_of(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::String(s) if s.contains("{{") => out.push(s.clone()),
        serde_json::Value::Array(items) => items.iter().for_each(|i| strings_of(i, out)),
        serde_json::Value::Object(m) => m.values().for_each(|i| strings_of(i, out)),
        serde_json::Value::String(_)
        | serde_json::Value::Null
        | serde_json::Value::Bool(_)
        | serde_json::Value::Number(_) => {}
    }
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod mcp_proxy_tests {
    use super::*;
    use crate::ports::repository::Severity;
    use crate::workflow::McpPluginTools;
    use crate::workflow::McpProxyConfig;

    fn check(provider: &str, proxy: &McpProxyConfig) -> Vec<(ErrorCode, Severity, String)> {
        let mut out = Vec::new();
        mcp_proxy_checks("s", provider, proxy, "states.s.mcp_proxy", &mut out);
        out.into_iter()
            .map(|d| (d.code, d.severity, d.path))
            .collect()
    }

    fn plugin(name: &str, ops: &[&str]) -> McpPluginTools {
        McpPluginTools {
            plugin: name.into(),
            expose: ops.iter().map(|o| (*o).to_owned()).collect(),
        }
    }

    #[test]
    fn a_disabled_proxy_is_not_checked() {
        let proxy = McpProxyConfig {
            enable: false,
            enable_written: true,
            intercept_builtins: false,
            plugin_tools: vec![plugin("a", &["b"]), plugin("a", &["b"])],
        };
        assert_eq!(check("codex", &proxy), vec![]);
    }

    #[test]
    fn keys_without_enable_warn_that_the_block_has_no_effect() {
        let warned = vec![(
            ErrorCode::UserMcpProxyNotEnabled,
            Severity::Warning,
            "states.s.mcp_proxy".to_owned(),
        )];
        let plugins_only = McpProxyConfig {
            plugin_tools: vec![plugin("http", &["request"])],
            ..McpProxyConfig::default()
        };
        assert_eq!(check("claude", &plugins_only), warned);
        let intercept_only = McpProxyConfig {
            intercept_builtins: true,
            ..McpProxyConfig::default()
        };
        assert_eq!(check("claude", &intercept_only), warned);
        // `{}` and an explicit `enable: false` (with or without other keys) say nothing.
        assert_eq!(check("claude", &McpProxyConfig::default()), vec![]);
        let switched_off = McpProxyConfig {
            enable_written: true,
            intercept_builtins: true,
            ..McpProxyConfig::default()
        };
        assert_eq!(check("claude", &switched_off), vec![]);
    }

    #[test]
    fn builtins_only_on_claude_is_clean() {
        let proxy = McpProxyConfig {
            enable: true,
            enable_written: true,
            intercept_builtins: true,
            plugin_tools: vec![],
        };
        assert_eq!(check("claude", &proxy), vec![]);
    }

    #[test]
    fn nothing_to_serve_is_empty_proxy() {
        let proxy = McpProxyConfig {
            enable: true,
            enable_written: true,
            intercept_builtins: false,
            plugin_tools: vec![],
        };
        assert_eq!(
            check("claude", &proxy),
            vec![(
                ErrorCode::UserMcpProxyEmptyProxy,
                Severity::Error,
                "states.s.mcp_proxy".to_owned()
            )]
        );
    }

    #[test]
    fn a_plugin_twice_and_a_shared_final_name_collide() {
        let twice = McpProxyConfig {
            enable: true,
            enable_written: true,
            intercept_builtins: true,
            plugin_tools: vec![plugin("k", &["a"]), plugin("k", &["b"])],
        };
        let codes: Vec<ErrorCode> = check("claude", &twice).into_iter().map(|c| c.0).collect();
        assert!(
            codes.contains(&ErrorCode::UserMcpProxyNameCollision),
            "{codes:?}"
        );
        // `a_b` + `c` and `a` + `b_c` are both tool `a_b_c`.
        let shared = McpProxyConfig {
            enable: true,
            enable_written: true,
            intercept_builtins: true,
            plugin_tools: vec![plugin("a_b", &["c"]), plugin("a", &["b_c"])],
        };
        let found = check("claude", &shared);
        assert!(
            found
                .iter()
                .any(|(c, _, p)| *c == ErrorCode::UserMcpProxyNameCollision
                    && p == "states.s.mcp_proxy.plugin_tools.1.expose"),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .filter(|(c, ..)| *c == ErrorCode::UserMcpProxyUnknownPlugin)
                .count()
                == 2,
            "{found:?}"
        );
    }

    #[test]
    fn a_known_plugin_op_is_clean_and_an_unknown_op_of_it_is_unknown_operation() {
        let good = McpProxyConfig {
            enable: true,
            enable_written: true,
            intercept_builtins: false,
            plugin_tools: vec![plugin("http", &["request"])],
        };
        assert_eq!(check("claude", &good), vec![]);
        let bad = McpProxyConfig {
            enable: true,
            enable_written: true,
            intercept_builtins: false,
            plugin_tools: vec![plugin("http", &["request", "reqest"])],
        };
        let mut out = Vec::new();
        mcp_proxy_checks("s", "claude", &bad, "states.s.mcp_proxy", &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].code, ErrorCode::UserMcpProxyUnknownOperation);
        assert_eq!(out[0].path, "states.s.mcp_proxy.plugin_tools.0.expose.1");
        assert!(
            out[0]
                .hint
                .as_deref()
                .unwrap_or("")
                .contains("did you mean 'request'"),
            "{:?}",
            out[0].hint
        );
        // A typo in the plugin's name: UNKNOWN_PLUGIN with its did-you-mean, ops unchecked.
        let typo = McpProxyConfig {
            enable: true,
            enable_written: true,
            intercept_builtins: false,
            plugin_tools: vec![plugin("htp", &["nope"])],
        };
        let mut out = Vec::new();
        mcp_proxy_checks("s", "claude", &typo, "states.s.mcp_proxy", &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].code, ErrorCode::UserMcpProxyUnknownPlugin);
        assert!(
            out[0]
                .hint
                .as_deref()
                .unwrap_or("")
                .contains("did you mean 'http'"),
            "{:?}",
            out[0].hint
        );
    }

    #[test]
    fn the_same_op_exposed_twice_collides() {
        let twice = McpProxyConfig {
            enable: true,
            enable_written: true,
            intercept_builtins: false,
            plugin_tools: vec![plugin("http", &["request", "request"])],
        };
        assert_eq!(
            check("claude", &twice),
            vec![(
                ErrorCode::UserMcpProxyNameCollision,
                Severity::Error,
                "states.s.mcp_proxy.plugin_tools.0.expose".to_owned()
            )]
        );
    }

    #[test]
    fn an_operation_state_must_name_a_builtin_operation() {
        use crate::workflow::OperationStep;
        use crate::workflow::State;
        use crate::workflow::StateKind;
        let op = |id: &str| {
            State::new(
                "o",
                StateKind::Operation(OperationStep {
                    operation: id.to_owned(),
                    inputs: indexmap::IndexMap::new(),
                }),
            )
        };
        let mut out = Vec::new();
        per_type("o", &op("http.request"), "states.o", &mut out);
        assert!(out.is_empty(), "{out:?}");
        per_type("o", &op("http.reqest"), "states.o", &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].code, ErrorCode::WorkflowValidationUnknownOperation);
        assert_eq!(out[0].severity, Severity::Error);
        assert_eq!(out[0].path, "states.o.operation");
        assert!(
            out[0]
                .hint
                .as_deref()
                .unwrap_or("")
                .contains("did you mean 'http.request'"),
            "{:?}",
            out[0].hint
        );
        let mut out = Vec::new();
        per_type("o", &op("github.get_issue"), "states.o", &mut out);
        assert_eq!(out[0].code, ErrorCode::WorkflowValidationUnknownOperation);
        assert!(
            out[0]
                .hint
                .as_deref()
                .unwrap_or("")
                .contains("http.request")
        );
    }

    #[test]
    fn operation_inputs_are_checked_against_the_domain_names_and_methods() {
        use crate::workflow::OperationStep;
        use crate::workflow::State;
        use crate::workflow::StateKind;
        let op = |inputs: serde_json::Value| {
            State::new(
                "o",
                StateKind::Operation(OperationStep {
                    operation: "http.request".to_owned(),
                    inputs: inputs
                        .as_object()
                        .unwrap()
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                }),
            )
        };
        let check = |inputs: serde_json::Value| {
            let mut out = Vec::new();
            per_type("o", &op(inputs), "states.o", &mut out);
            out
        };
        // Every documented input, a method in any case, and a templated method: clean.
        let all: serde_json::Map<String, serde_json::Value> =
            crate::ports::operations::HTTP_REQUEST_INPUTS
                .iter()
                .map(|k| ((*k).to_owned(), serde_json::json!("x")))
                .collect();
        let mut all = serde_json::Value::Object(all);
        all["method"] = serde_json::json!("post");
        assert_eq!(check(all), vec![]);
        assert_eq!(
            check(serde_json::json!({"method": "{{.inputs.m}}", "url": "http://x/"})),
            vec![]
        );
        // A typo in an input name: an error with a did-you-mean.
        let out = check(serde_json::json!({"method": "GET", "url": "http://x/", "header": {}}));
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].code, ErrorCode::WorkflowValidationInvalidState);
        assert_eq!(out[0].severity, Severity::Error);
        assert_eq!(out[0].path, "states.o.inputs.header");
        assert!(
            out[0]
                .hint
                .as_deref()
                .unwrap_or("")
                .contains("did you mean 'headers'"),
            "{:?}",
            out[0].hint
        );
        // A literal method outside the set, or not text.
        for m in [serde_json::json!("PATCH"), serde_json::json!(5)] {
            let out = check(serde_json::json!({"method": m, "url": "http://x/"}));
            assert_eq!(out.len(), 1, "{m}: {out:?}");
            assert_eq!(out[0].path, "states.o.inputs.method");
            assert_eq!(out[0].severity, Severity::Error);
            assert!(
                out[0]
                    .hint
                    .as_deref()
                    .unwrap_or("")
                    .contains("GET, POST, PUT, DELETE"),
                "{:?}",
                out[0].hint
            );
        }
        // Every built-in operation has its input names in domain.
        for id in crate::ports::operations::BUILTIN_OPERATIONS {
            assert!(
                crate::ports::operations::builtin_inputs_of(id).is_some(),
                "{id}"
            );
        }
    }

    #[test]
    fn coexistence_providers_get_a_warning_only() {
        let proxy = McpProxyConfig {
            enable: true,
            enable_written: true,
            intercept_builtins: true,
            plugin_tools: vec![],
        };
        // codex and opencode hide their native tools per call, so only copilot warns.
        for p in ["codex", "opencode", "gemini", "claude"] {
            assert_eq!(check(p, &proxy), vec![], "{p}");
        }
        assert_eq!(
            check("github_copilot", &proxy),
            vec![(
                ErrorCode::UserMcpProxyUnsupportedProvider,
                Severity::Warning,
                "states.s.mcp_proxy".to_owned()
            )]
        );
    }
}
