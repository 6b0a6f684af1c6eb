//! Workflow validation use case: the checks `awf validate` reports and `awf run` enforces.
//!
//! Source: spec/workflow.md §1.16 and §2.10; decisions.md ("Workflow language").

use std::collections::BTreeMap;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::agent::COMMON_AGENT_OPTIONS;
use awf_domain::ports::repository::Diagnostic;
use awf_domain::ports::repository::LoadedWorkflow;
use awf_domain::ports::repository::Severity;
use awf_domain::ports::repository::SourceMap;
use awf_domain::validate;
use awf_domain::workflow::HookAction;
use awf_domain::workflow::LoopOver;
use awf_domain::workflow::StateKind;
use awf_domain::workflow::Workflow;

use crate::Services;

/// What `awf validate` found.
#[derive(Debug, Clone)]
pub struct ValidationReport {
    /// The workflow, when it loaded.
    pub workflow: Option<Workflow>,
    /// Every finding, positioned, errors first.
    pub diagnostics: Vec<Diagnostic>,
}

impl ValidationReport {
    /// Whether the workflow is invalid. With `strict`, unknown keys count as errors.
    pub fn has_errors(&self, strict: bool) -> bool {
        self.diagnostics.iter().any(|d| {
            d.severity == Severity::Error
                || (strict
                    && d.severity == Severity::Warning
                    && d.code == ErrorCode::WorkflowParseUnknownField)
        })
    }
}

/// The severity a diagnostic counts with under the `--strict` policy: strict makes unknown keys
/// (`WORKFLOW.PARSE.UNKNOWN_FIELD` warnings) errors; every other diagnostic keeps its own.
/// Source: design/decisions.md ("Unknown keys in a workflow file").
pub fn effective(d: &Diagnostic, strict: bool) -> Severity {
    if strict && d.severity == Severity::Warning && d.code == ErrorCode::WorkflowParseUnknownField {
        Severity::Error
    } else {
        d.severity
    }
}

/// Loads and fully validates a workflow: the checks `awf run` enforces ([`checks`]) plus
/// unset `env:` variables. Decoding goes on past errors (the repository's
/// `load_for_validation`), so a parse-stage error does not hide unknown-key warnings or later
/// errors; what cannot be decoded at all (YAML syntax, no `name:`) is the repository's error.
///
/// # Errors
/// Only when the workflow cannot be found or parsed (the repository's error).
pub fn validate_workflow(
    services: &Services,
    identifier: &str,
    env: &BTreeMap<String, String>,
) -> Result<ValidationReport, AwfError> {
    let loaded = services.repository.load_for_validation(identifier, None)?;
    Ok(validate_loaded(services, loaded, env))
}

/// [`validate_workflow`] of a workflow the caller already loaded (`awf list`, which parsed
/// every file to show it): the same checks, with no second read or parse.
pub fn validate_loaded(
    services: &Services,
    loaded: LoadedWorkflow,
    env: &BTreeMap<String, String>,
) -> ValidationReport {
    let mut extra = validate::missing_env(&loaded.workflow, env);
    // Shown by `awf validate` only: a run does not repeat it on every start.
    extra.extend(validate::unquoted_shell_values(&loaded.workflow));
    // Validate only, as the quoting warnings: a hook reading `$input` gets no value.
    extra.extend(validate::hook_input_variables(&loaded.workflow));
    // Validate only: a run keeps AWF's behaviour (the engine's CIRCULAR_CALL at the call, exit 3).
    extra.extend(call_cycles(services, &loaded.workflow));
    // Validate only: a step's failure says it when its timeout cuts its retries short.
    extra.extend(validate::timeout_spans_retries(&loaded.workflow));
    let cwd = services.host.current_dir().unwrap_or_default();
    // (A missing `script_file` is one of [`checks`], which a run applies too.)
    extra.extend(
        file_references(
            &loaded.workflow,
            &services.awf_dirs,
            env,
            &cwd,
            services.host.as_ref(),
            services.interpolator.as_ref(),
        )
        .into_iter()
        .filter(|d| !is_script_file_finding(d)),
    );
    for d in &mut extra {
        d.locate(&loaded.source_map);
    }
    let mut diagnostics = checks(services, &loaded);
    // A text whose template does not parse puts no value anywhere: its shell-quoting
    // warnings (whose hint would build on the very action that fails, an unknown function
    // included) wait until it parses (new user: `{{.inputs.who | upcase | shell_quote}}`).
    let unparsed: std::collections::BTreeSet<String> = diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error && d.message.starts_with(TEMPLATE_DOES_NOT_PARSE))
        .map(|d| d.path.clone())
        .collect();
    extra.retain(|d| {
        !(matches!(
            d.code,
            ErrorCode::WorkflowValidationUnquotedValue
                | ErrorCode::WorkflowValidationIneffectiveQuote
        ) && unparsed.contains(&d.path))
    });
    diagnostics.extend(extra);
    sort(&mut diagnostics);
    ValidationReport {
        workflow: Some(loaded.workflow),
        diagnostics,
    }
}

/// How the error about a template that does not parse starts (`template does not parse:
/// …`, path of the text).
const TEMPLATE_DOES_NOT_PARSE: &str = "template does not parse";

/// Where in `text` the parse error `message` (`… at line L, column C: …`, both counted
/// from one) is: the byte offset of the `{{` of the action holding that place (the place itself
/// when no action starts before it). `None` when the message names no place inside `text`.
fn parse_error_offset(text: &str, message: &str) -> Option<usize> {
    let (_, rest) = message.split_once(" at line ")?;
    let (line, rest) = rest.split_once(", column ")?;
    let line: usize = line.trim().parse().ok()?;
    let column: usize = rest
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    let line_start = if line <= 1 {
        0
    } else {
        text.match_indices('\n').nth(line - 2)?.0 + 1
    };
    let line_text = text.get(line_start..)?.split('\n').next()?;
    let in_line = line_text
        .char_indices()
        .nth(column.saturating_sub(1))
        .map_or(line_text.len(), |(i, _)| i);
    let at = line_start + in_line;
    // The action around it: the last `{{` that starts at or just after the place.
    let upto = text
        .char_indices()
        .map(|(i, _)| i)
        .find(|i| *i >= (at + 2).min(text.len()))
        .unwrap_or(text.len());
    Some(text.get(..upto)?.rfind("{{").unwrap_or(at))
}

/// Whether `d` is [`file_references`]' finding about a step's `script_file`.
fn is_script_file_finding(d: &Diagnostic) -> bool {
    d.path.ends_with(".script_file")
}

/// A step's `script_file` that does not exist or is not a regular file: an error of the
/// workflow (`WORKFLOW.VALIDATION.INVALID_REFERENCE`, exit 2), which `awf validate` reports
/// and `awf run` refuses before starting (the step would fail). `~/` resolves against the
/// host's home directory.
fn missing_script_files(services: &Services, wf: &Workflow) -> Vec<Diagnostic> {
    if !wf.states.values().any(|s| {
        matches!(&s.kind, StateKind::Command(c)
            if matches!(c.source, awf_domain::workflow::CommandSource::ScriptFile(_)))
    }) {
        return Vec::new();
    }
    let mut env = BTreeMap::new();
    if let Some(home) = services.host.home_dir() {
        env.insert("HOME".to_owned(), home.display().to_string());
    }
    file_references(
        wf,
        &services.awf_dirs,
        &env,
        std::path::Path::new("."),
        services.host.as_ref(),
        services.interpolator.as_ref(),
    )
    .into_iter()
    .filter(is_script_file_finding)
    .collect()
}

/// Files a step names that a run would fail to read, reported by `awf validate` (as
/// AWF (Go) does) instead of at run time: an agent's `prompt_file` (used when there is no
/// `prompt`) that does not exist or is not a regular file (`USER.INPUT.MISSING_FILE`, as in
/// AWF (Go)), a command step's `script_file` likewise (`WORKFLOW.VALIDATION.INVALID_REFERENCE`:
/// AWF (Go) does not check it; awf treats it as the workflow error it is), and each skill
/// that is unnamed, not found on the skills search path or has no `SKILL.md`
/// (`USER.INPUT.MISSING_SKILL`; a warning when its `SKILL.md` has no content, as in AWF (Go)). Paths resolve as at run time: `{{.awf.*}}`
/// directories from `awf_dirs` (a global scripts/prompts file preferring the workflow
/// project's copy, `<workflow dir>/../prompts|scripts/…`), `~/` from `HOME`, relative to the
/// workflow file's directory; skill names search `$AWF_SKILLS_PATH`, else `.awf/skills`,
/// `.agents/skills`, `.claude/skills` under `cwd`, the global skills dir, then
/// `~/.agents/skills`, `~/.claude/skills`. A path with any other template (inputs, states)
/// is known only at run time and is not checked.
///
/// A shell script's text is checked by `templates` as a `command:`'s is: a template that does
/// not parse is a warning marked [`Diagnostic::run_fails`] (the step fails when it renders
/// the script, as in AWF (Go), which does not check it), and its values are not checked for
/// quoting until it parses. A `prompt_file`'s text is checked the same way (a warning marked
/// [`Diagnostic::run_fails`], naming the file).
pub fn file_references(
    wf: &Workflow,
    awf_dirs: &BTreeMap<String, String>,
    env: &BTreeMap<String, String>,
    cwd: &std::path::Path,
    host: &dyn awf_domain::ports::Host,
    templates: &dyn awf_domain::ports::template::Interpolator,
) -> Vec<Diagnostic> {
    use std::path::PathBuf;
    let static_path = |text: &str| -> Option<PathBuf> {
        let mut t = text.trim().to_owned();
        for (k, v) in awf_dirs {
            for form in [
                format!("{{{{.awf.{k}}}}}"),
                format!("{{{{ .awf.{k} }}}}"),
                format!("{{{{awf.{k}}}}}"),
                format!("{{{{ awf.{k} }}}}"),
            ] {
                t = t.replace(&form, v);
            }
        }
        if t.contains("{{") || t.is_empty() {
            return None;
        }
        for (key, sub) in [("scripts_dir", "scripts"), ("prompts_dir", "prompts")] {
            if let Some(global) = awf_dirs.get(key).filter(|g| !g.is_empty())
                && let Some(rest) = t.strip_prefix(&format!("{global}/"))
                && let Some(project) = wf.source.dir.parent()
            {
                let local = project.join(sub).join(rest);
                if host.exists(&local) {
                    return Some(local);
                }
            }
        }
        let p = match (t.strip_prefix("~/"), env.get("HOME")) {
            (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
            _ => PathBuf::from(&t),
        };
        Some(if p.is_absolute() {
            p
        } else {
            wf.source.dir.join(p)
        })
    };
    let skill_dirs = || -> Vec<PathBuf> {
        if let Some(list) = env.get("AWF_SKILLS_PATH").filter(|v| !v.is_empty()) {
            return list.split(':').map(PathBuf::from).collect();
        }
        let mut dirs: Vec<PathBuf> = [".awf/skills", ".agents/skills", ".claude/skills"]
            .iter()
            .map(|d| cwd.join(d))
            .collect();
        if let Some(g) = awf_dirs.get("skills_dir").filter(|g| !g.is_empty()) {
            dirs.push(PathBuf::from(g));
        }
        if let Some(h) = env.get("HOME") {
            dirs.extend(
                [".agents/skills", ".claude/skills"]
                    .iter()
                    .map(|d| std::path::Path::new(h).join(d)),
            );
        }
        dirs
    };
    let mut out = Vec::new();
    // A file a step names (`prompt_file`, `script_file`) that a run could not read.
    let file_problem = |field: &str, name: &str, f: &str| -> Option<Diagnostic> {
        let code = if field == "script_file" {
            ErrorCode::WorkflowValidationInvalidReference
        } else {
            ErrorCode::UserInputMissingFile
        };
        let path = static_path(f)?;
        let problem = match host.metadata(&path).map(|m| m.kind) {
            Err(_) if host.is_symlink(&path) => "is a symbolic link that cannot be followed",
            Err(_) => "not found",
            Ok(awf_domain::ports::host::FileKind::Dir) => "is a directory, not a file",
            Ok(awf_domain::ports::host::FileKind::Other) => "is not a regular file",
            Ok(_) => return None,
        };
        let mut d = Diagnostic::error(
            code,
            format!("states.{name}.{field}"),
            format!("{field} {problem}: {f} ({})", path.display()),
        );
        d.hint = Some(format!(
            "{field} paths are relative to the workflow file's directory"
        ));
        Some(d)
    };
    for (name, state) in &wf.states {
        if let StateKind::Command(c) = &state.kind
            && let awf_domain::workflow::CommandSource::ScriptFile(f) = &c.source
        {
            match file_problem("script_file", name, f) {
                Some(d) => out.push(d),
                // A shell script's values are checked as a `command:`'s are (new user: an
                // input's `$( … )` ran from `awf init`'s example script, unwarned).
                None => {
                    if let Some(text) = static_path(f).and_then(|p| host.read_to_string(&p).ok()) {
                        let at = format!("states.{name}.script_file");
                        if text.contains("{{")
                            && let Err(e) = templates.check(&text)
                        {
                            // New user: the quoting hint was built on an unknown function.
                            let mut d = check_failure(
                                ErrorCode::WorkflowValidationInvalidReference,
                                at,
                                &format!("script {}: {TEMPLATE_DOES_NOT_PARSE}", f.trim()),
                                &e,
                            )
                            .failing_the_run();
                            d.severity = Severity::Warning;
                            d.message.push_str(" (the step fails when it runs)");
                            out.push(d);
                            continue;
                        }
                        out.extend(
                            awf_domain::validate::unquoted_shell_values_in_script(wf, &text, &at)
                                .into_iter()
                                .map(|mut d| {
                                    d.message = format!("script {}: {}", f.trim(), d.message);
                                    d
                                }),
                        );
                    }
                }
            }
        }
        let StateKind::Agent(a) = &state.kind else {
            continue;
        };
        if a.prompt.is_none()
            && let Some(f) = &a.prompt_file
        {
            match file_problem("prompt_file", name, f) {
                Some(d) => out.push(d),
                // Its text is a template the step renders: one that does not parse fails
                // the step every time, as a script's does (trial: it passed validate).
                None => {
                    if let Some(text) = static_path(f).and_then(|p| host.read_to_string(&p).ok())
                        && text.contains("{{")
                        && let Err(e) = templates.check(&text)
                    {
                        let mut d = check_failure(
                            ErrorCode::WorkflowValidationInvalidReference,
                            format!("states.{name}.prompt_file"),
                            &format!("prompt file {}: {TEMPLATE_DOES_NOT_PARSE}", f.trim()),
                            &e,
                        )
                        .failing_the_run();
                        d.severity = Severity::Warning;
                        d.message.push_str(" (the step fails when it runs)");
                        out.push(d);
                    }
                }
            }
        }
        for (i, skill) in a.skills.iter().enumerate() {
            let at = format!("states.{name}.skills.{i}");
            let skill = skill.trim();
            let missing = |message: String, hint: String| {
                let mut d =
                    Diagnostic::error(ErrorCode::UserInputMissingSkill, at.clone(), message);
                d.hint = Some(hint);
                d
            };
            if skill.is_empty() {
                out.push(missing(
                    "skill name is empty".to_owned(),
                    "name a skill directory (holding SKILL.md) or remove the entry".to_owned(),
                ));
                continue;
            }
            if skill.contains("{{") {
                continue;
            }
            let is_path = skill.contains('/') || skill.starts_with('.') || skill.starts_with('~');
            let dir = if is_path {
                match static_path(skill) {
                    Some(p) if host.is_file(&p) => p.parent().map(std::path::Path::to_path_buf),
                    Some(p) => Some(p),
                    None => continue,
                }
            } else {
                skill_dirs()
                    .into_iter()
                    .map(|d| d.join(skill))
                    .find(|d| host.is_dir(d))
            };
            let Some(dir) = dir.filter(|d| host.is_dir(d)) else {
                let dirs: Vec<String> = skill_dirs()
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect();
                out.push(missing(
                    format!("skill \"{skill}\" not found"),
                    if is_path {
                        format!("create the directory {skill} with a SKILL.md")
                    } else {
                        format!(
                            "create <skills dir>/{skill}/SKILL.md in one of: {}",
                            dirs.join(", ")
                        )
                    },
                ));
                continue;
            };
            let file = dir.join("SKILL.md");
            match host.read_to_string(&file) {
                Err(_) => out.push(missing(
                    format!("skill \"{skill}\" has no SKILL.md ({})", file.display()),
                    "a skill is a directory with a SKILL.md describing it".to_owned(),
                )),
                Ok(text) if skill_body_is_empty(&text) => {
                    // AWF (Go): a warning; the run would send an empty skill.
                    let mut d = missing(
                        format!("skill \"{skill}\" has empty content ({})", file.display()),
                        "write the skill's instructions in its SKILL.md".to_owned(),
                    );
                    d.severity = Severity::Warning;
                    out.push(d);
                }
                Ok(_) => {}
            }
        }
    }
    out
}

/// Whether a SKILL.md has nothing but whitespace after its optional `---` front matter.
fn skill_body_is_empty(text: &str) -> bool {
    let t = text.trim_start();
    let body = t
        .strip_prefix("---")
        .and_then(|rest| rest.find("\n---").map(|i| &rest[i + 4..]))
        .unwrap_or(t);
    body.trim().is_empty()
}

/// Orders findings errors first, then by line, and drops repeats: a finding equal to an
/// earlier one, or one inside a value ([`Diagnostic::in_value`]) that says what an earlier
/// one says about the same value (the same reference written twice in one `command: |`
/// block is found at two lines of it), is reported once, at its first position.
fn sort(diagnostics: &mut Vec<Diagnostic>) {
    diagnostics.sort_by(|a, b| a.severity.cmp(&b.severity).then(a.line.cmp(&b.line)));
    let same = |a: &Diagnostic, b: &Diagnostic| {
        if a.in_value.is_none() || b.in_value.is_none() {
            return a == b;
        }
        a.severity == b.severity
            && a.code == b.code
            && a.path == b.path
            && a.message == b.message
            && a.hint == b.hint
            && a.file == b.file
    };
    let mut kept: Vec<Diagnostic> = Vec::with_capacity(diagnostics.len());
    for d in diagnostics.drain(..) {
        if !kept.iter().any(|k| same(k, &d)) {
            kept.push(d);
        }
    }
    *diagnostics = kept;
}

/// Every check both `awf validate` and `awf run` apply, with one severity each: load-time
/// findings, structural rules (containment cycles and reachability included), expression and
/// template syntax, template and expression references, input declarations, `while`
/// conditions that can never be true, routing pitfalls, branch routes a parallel ignores,
/// routes of a loop in a loop's body that end the outer loop early or are not taken,
/// sub-workflows that cannot be loaded, unknown providers. Positioned, errors first.
///
/// A finding at or below a path where loading already reported an error is dropped (one
/// mistake, one message: a missing `states:` is not followed by "initial state \"\" does not
/// exist", a state that could not be decoded raises nothing more).
pub fn checks(services: &Services, loaded: &LoadedWorkflow) -> Vec<Diagnostic> {
    let wf = &loaded.workflow;
    let load_errors: std::collections::BTreeSet<String> = loaded
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| d.path.clone())
        .collect();
    let mut later = run_checks(services, wf);
    later.extend(validate::reachability(wf));
    later.extend(validate::references(wf));
    later.extend(validate::undefined_error_at_terminals(wf));
    later.extend(validate::while_never_true(wf));
    later.extend(routing_warnings(wf));
    later.extend(validate::ignored_branch_routes(wf));
    later.extend(validate::ignored_loop_routes(wf));
    later.extend(validate::nested_loop_routes(wf));
    later.extend(input_declarations(wf, services.host.as_ref()));
    later.extend(missing_children(services, wf));
    later.extend(missing_script_files(services, wf));
    later.extend(unknown_providers(wf));
    later.extend(unknown_options(services, wf));
    later.extend(unpriced_budgets(&services.prices, wf));
    later.retain(|d| {
        let below =
            |p: &String| !p.is_empty() && (d.path == *p || d.path.starts_with(&format!("{p}.")));
        // A state whose routes failed to decode has "no way out" only because of that error.
        let routes_broken = d.code == ErrorCode::WorkflowValidationNoExit
            && load_errors
                .iter()
                .any(|p| p.starts_with(&format!("{}.", d.path)));
        // With the `inputs:` block undecodable, every input reads as undeclared.
        let inputs_broken = d.code == ErrorCode::WorkflowValidationInvalidReference
            && d.message.starts_with("undefined input")
            && load_errors.contains("inputs");
        // With a loop's `body:` undecodable, its steps read as outside every loop.
        let body_broken = d.code == ErrorCode::WorkflowValidationInvalidReference
            && d.message.starts_with("loop reference")
            && load_errors.iter().any(|p| p.ends_with(".body"));
        // A state that failed to decode has no routes: the states after it only look
        // unreachable (new user: "never reached" warnings under a misspelt `type:`).
        let unreached_behind_error = d.severity == Severity::Warning
            && d.code == ErrorCode::WorkflowValidationInvalidTransition
            && d.message.contains("is never reached")
            && load_errors.iter().any(|p| p.starts_with("states."));
        !routes_broken
            && !inputs_broken
            && !body_broken
            && !unreached_behind_error
            && !load_errors.iter().any(below)
    });
    let mut diagnostics = loaded.diagnostics.clone();
    for d in &mut diagnostics {
        // Load-time messages may repeat their path (`name: required field missing`); the
        // report prints the path already.
        if let Some(rest) = d.message.strip_prefix(&format!("{}: ", d.path))
            && !d.path.is_empty()
        {
            d.message = rest.to_owned();
        }
    }
    diagnostics.extend(later);
    name_mistyped_keys(&mut diagnostics, &loaded.source_map);
    for d in &mut diagnostics {
        d.locate(&loaded.source_map);
    }
    sort(&mut diagnostics);
    diagnostics
}

/// An error about a required key (`states.a.prompt`: "needs prompt") whose cause is a
/// mistyped sibling key (`states.a.promt`, an unknown-field warning suggesting `prompt`)
/// names that key, so `awf run`, which prints errors only, says what to rename. Not when the
/// key it was meant to be is in the file (`map`) too: the error is then about that key's own
/// value (new user: `comand: x` beside `command: echo {{upcase "x"}}` replaced the template
/// error's `did you mean 'upper'?` hint with `rename comand: to command:`); the typo keeps
/// its own warning.
fn name_mistyped_keys(diagnostics: &mut [Diagnostic], map: &SourceMap) {
    let typos: Vec<(String, String, String)> = diagnostics
        .iter()
        .filter(|d| d.code == ErrorCode::WorkflowParseUnknownField)
        .filter_map(|d| {
            let (parent, key) = d.path.rsplit_once('.')?;
            let wanted = d
                .hint
                .as_deref()?
                .strip_prefix("did you mean '")?
                .strip_suffix("'?")?;
            Some((parent.to_owned(), key.to_owned(), wanted.to_owned()))
        })
        .collect();
    for d in diagnostics
        .iter_mut()
        .filter(|d| d.severity == Severity::Error && !d.message.contains("is not a key"))
    {
        // A state with "no way out" whose route key is misspelt (new user: `on_sucess:` gave
        // only NO_EXIT in `awf run`; the did-you-mean was a warning of `awf validate`).
        if d.code == ErrorCode::WorkflowValidationNoExit
            && let Some((_, typo, wanted)) = typos.iter().find(|(p, _, w)| {
                *p == d.path
                    && matches!(w.as_str(), "on_success" | "on_failure" | "transitions")
                    && !map.contains(&format!("{p}.{w}"))
            })
        {
            d.message.push_str(&format!(
                " (\"{typo}\" is not a key: did you mean '{wanted}'?)"
            ));
            d.hint = Some(format!("rename `{typo}:` to `{wanted}:`"));
            continue;
        }
        let Some((parent, key)) = d.path.rsplit_once('.') else {
            continue;
        };
        if map.contains(&d.path) {
            continue;
        }
        if let Some((_, typo, wanted)) = typos.iter().find(|(p, _, w)| p == parent && w == key) {
            d.message.push_str(&format!(
                " (\"{typo}\" is not a key: did you mean '{wanted}'?)"
            ));
            d.hint = Some(format!("rename `{typo}:` to `{wanted}:`"));
        }
    }
}

/// Input declarations: an unknown `type:`, a `pattern:` that is not a regular expression and
/// a `default:` that breaks the input's own type or rules are errors, reported with the
/// declaration's position.
/// `file_exists` is not applied to defaults here (it depends on the directory of the run).
///
/// Code `WORKFLOW.VALIDATION.INVALID_STATE`, paths `inputs.<i>.type`,
/// `inputs.<i>.validation.pattern`, `inputs.<i>.default`.
/// Source: spec/workflow.md §1.4; issue 7.
fn input_declarations(wf: &Workflow, host: &dyn awf_domain::ports::Host) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for (i, def) in wf.inputs.iter().enumerate() {
        out.extend(input_name_checks(i, &def.name));
        if let awf_domain::workflow::InputType::Unknown(t) = &def.ty {
            let known = ["string", "integer", "number", "boolean", "array"];
            let hint = validate::closest(t, known)
                .map(|c| format!("did you mean '{c}'?"))
                .unwrap_or_else(|| format!("use one of {}", known.join(", ")));
            out.push(
                Diagnostic::error(
                    ErrorCode::WorkflowValidationInvalidState,
                    format!("inputs.{i}.type"),
                    format!("input \"{}\" has unknown type \"{t}\"", def.name),
                )
                .with_hint(hint),
            );
            continue;
        }
        if let Some(p) = &def.validation.pattern
            && let Err(e) = regex::Regex::new(p)
        {
            out.push(
                Diagnostic::error(
                    ErrorCode::WorkflowValidationInvalidState,
                    format!("inputs.{i}.validation.pattern"),
                    format!(
                        "input \"{}\": pattern \"{p}\" is not a valid regular expression: {e}",
                        def.name
                    ),
                )
                .with_hint("fix the pattern (Rust regex syntax, close to Go's RE2)"),
            );
            continue;
        }
        // No value can satisfy both (breaker: accepted, then every value was refused at run
        // time, or the error blamed the default).
        // An allowed value the input's type cannot take could never be given (breaker: `-i
        // i=x` was refused by the type while the hint offered `x`).
        if matches!(
            def.ty,
            awf_domain::workflow::InputType::Integer
                | awf_domain::workflow::InputType::Number
                | awf_domain::workflow::InputType::Boolean
        ) {
            let type_only = awf_domain::workflow::InputDef {
                validation: Default::default(),
                ..def.clone()
            };
            for v in &def.validation.enum_values {
                let value = serde_json::Value::String(v.clone());
                if let Err(p) =
                    crate::inputs::check_value(&type_only, &value, std::path::Path::new("."), host)
                {
                    out.push(
                        Diagnostic::error(
                            ErrorCode::WorkflowValidationInvalidState,
                            format!("inputs.{i}.validation.enum"),
                            format!(
                                "input \"{}\": the allowed value \"{v}\" is not of its type: {p}",
                                def.name
                            ),
                        )
                        .with_hint("list only values of the input's type, or change its type"),
                    );
                }
            }
        }
        if let (Some(min), Some(max)) = (def.validation.min, def.validation.max)
            && min > max
        {
            out.push(
                Diagnostic::error(
                    ErrorCode::WorkflowValidationInvalidState,
                    format!("inputs.{i}.validation"),
                    format!(
                        "input \"{}\": min {min} is greater than max {max}: no value can satisfy both",
                        def.name
                    ),
                )
                .with_hint("swap them, or drop the one that is wrong"),
            );
            continue;
        }
        let Some(default) = def.default.as_ref().filter(|v| !v.is_null()) else {
            continue;
        };
        let mut rules = def.clone();
        rules.validation.file_exists = false;
        if let Err(p) = crate::inputs::check_value(&rules, default, std::path::Path::new("."), host)
        {
            out.push(
                Diagnostic::error(
                    ErrorCode::WorkflowValidationInvalidState,
                    format!("inputs.{i}.default"),
                    format!(
                        "the default of input \"{}\" does not satisfy its own declaration: {p}",
                        def.name
                    ),
                )
                .with_hint("fix the default or the input's type/validation"),
            );
        }
    }
    out
}

/// Environment variables a step's process depends on, each with what it is for: an input
/// of the same name (exported to every command step as named) replaces it. Names starting
/// with one of [`SHADOWED_PREFIXES`] count too.
const SHADOWED_VARIABLES: [(&str, &str); 17] = [
    ("PATH", "where programs are found"),
    ("HOME", "the user's home directory"),
    ("SHELL", "the shell that runs commands"),
    ("USER", "the user's name"),
    ("LOGNAME", "the user's name"),
    ("PWD", "the working directory"),
    ("OLDPWD", "the previous working directory"),
    ("IFS", "how the shell splits words"),
    ("TMPDIR", "where temp files go"),
    ("LANG", "the locale"),
    ("TERM", "the terminal type"),
    ("ENV", "a file every POSIX shell runs first"),
    ("BASH_ENV", "a file every bash script runs first"),
    ("CDPATH", "where `cd` looks"),
    ("GLOBIGNORE", "which files globs skip"),
    ("SHELLOPTS", "bash's options"),
    ("PS4", "bash's trace prefix"),
];

/// Prefixes of environment variable names [`SHADOWED_VARIABLES`] counts, with what they set.
const SHADOWED_PREFIXES: [(&str, &str); 3] = [
    ("LD_", "how programs load libraries"),
    ("DYLD_", "how programs load libraries"),
    ("LC_", "the locale"),
];

/// Whether `name` can name an input: an ASCII letter or `_`, then letters, digits, `_` or
/// `-` (`{{.inputs.name}}` reads it; a command step gets it as the environment variable
/// `name`).
fn valid_input_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The findings about input `i`'s name: an error for a name that is not an identifier
/// ([`valid_input_name`]: breaker, an input named `HOME=` validated and a step saw
/// `HOME==/tmp/elsewhere`), a warning for one whose environment variable replaces one a
/// step depends on (`PATH`, `HOME`, `LD_PRELOAD`, …: the caller's value would reach every
/// command step in its place).
fn input_name_checks(i: usize, name: &str) -> Option<Diagnostic> {
    if !valid_input_name(name) {
        return Some(
            Diagnostic::error(
                ErrorCode::WorkflowValidationInvalidState,
                format!("inputs.{i}.name"),
                format!(
                    "input name {name:?} is not a valid name: a command step gets each input as an environment variable of that name"
                ),
            )
            .with_hint(
                "use letters, digits, `_` and `-`, starting with a letter or `_` (e.g. `target_dir`)",
            ),
        );
    }
    let what = SHADOWED_VARIABLES
        .iter()
        .find(|(v, _)| *v == name)
        .or_else(|| SHADOWED_PREFIXES.iter().find(|(p, _)| name.starts_with(p)))
        .map(|(_, what)| *what)?;
    Some(
        Diagnostic::warning(
            ErrorCode::WorkflowValidationInvalidState,
            format!("inputs.{i}.name"),
            format!(
                "input \"{name}\" replaces the environment variable {name} ({what}) in every command step with the value the run is given"
            ),
        )
        .with_hint(format!(
            "rename the input (e.g. `{}_value`) unless replacing {name} is the point",
            name.to_ascii_lowercase()
        )),
    )
}

/// The error finding for a failed template or expression `check`: `what: <error>`, and the
/// text after [`HINT_SEPARATOR`](awf_domain::ports::template::HINT_SEPARATOR), when there is
/// one, as the hint (a did-you-mean).
fn check_failure(
    code: ErrorCode,
    path: String,
    what: &str,
    e: &awf_domain::ports::template::TemplateError,
) -> Diagnostic {
    let e = e.to_string();
    let (why, hint) = match e.split_once(awf_domain::ports::template::HINT_SEPARATOR) {
        Some((why, hint)) => (why, Some(hint)),
        None => (e.as_str(), None),
    };
    let d = Diagnostic::error(code, path, format!("{what}: {why}"));
    match hint {
        Some(h) => d.with_hint(h),
        None => d,
    }
}

/// One-line form of a diagnostic: `file:line:col: [CODE] path: message (hint)`.
pub fn one_line(d: &Diagnostic) -> String {
    let mut s = String::new();
    if let Some(f) = &d.file {
        s.push_str(&f.display().to_string());
        if let (Some(l), Some(c)) = (d.line, d.column) {
            s.push_str(&format!(":{l}:{c}"));
        }
        s.push_str(": ");
    }
    s.push_str(&format!("[{}] ", d.code));
    if !d.path.is_empty() {
        s.push_str(&d.path);
        s.push_str(": ");
    }
    s.push_str(&d.message);
    if let Some(h) = &d.hint {
        s.push_str(&format!(" ({h})"));
    }
    s
}

/// What `awf run` announces as warnings before the first state: the warnings of [`checks`]
/// (the same findings `awf validate` reports as warnings), and `--input` names the workflow
/// does not declare. (Unset `env:` names are logged by the engine itself.)
pub fn run_warnings(
    services: &Services,
    loaded: &LoadedWorkflow,
    cli_inputs: &[(String, String)],
) -> Vec<String> {
    warnings_of(&checks(services, loaded), &loaded.workflow, cli_inputs)
}

/// [`check_for_run`] and [`run_warnings`] from one pass of [`checks`] (a run's start makes
/// both; the checks cost about as much as loading the workflow).
///
/// # Errors
/// As [`check_for_run`].
pub fn check_and_warn_for_run(
    services: &Services,
    loaded: &LoadedWorkflow,
    cli_inputs: &[(String, String)],
) -> Result<Vec<String>, AwfError> {
    let found = checks(services, loaded);
    first_error(&found)?;
    Ok(warnings_of(&found, &loaded.workflow, cli_inputs))
}

/// The warnings among `found` as lines, then the `cli_inputs` names `wf` does not declare.
fn warnings_of(
    found: &[Diagnostic],
    wf: &Workflow,
    cli_inputs: &[(String, String)],
) -> Vec<String> {
    let mut out: Vec<String> = found
        .iter()
        .filter(|d| d.severity == Severity::Warning)
        .map(one_line)
        .collect();
    out.extend(undeclared_input_warnings(wf, cli_inputs));
    out
}

/// The warning `awf run` (and `awf resume`) gives for each name among `cli_inputs` that `wf`
/// does not declare (each name once, in order, with the closest declared name when one is
/// close): `input 'x' is not declared by workflow 'w'; nothing uses it: …`. Such an input is
/// let through (recorded with the run) but reaches nothing: a template that names it is an
/// undefined-input error of the workflow's checks (as in AWF (Go)), and no step's
/// environment gets it.
pub fn undeclared_input_warnings(wf: &Workflow, cli_inputs: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    let declared: Vec<&str> = wf.inputs.iter().map(|i| i.name.as_str()).collect();
    let mut seen = std::collections::BTreeSet::new();
    for (k, _) in cli_inputs {
        let k = k.trim();
        if declared.contains(&k) || !seen.insert(k.to_owned()) {
            continue;
        }
        let mut msg = format!("input '{k}' is not declared by workflow '{}'", wf.name);
        if let Some(c) = validate::closest(k, declared.iter().copied()) {
            msg.push_str(&format!(" (did you mean '{c}'?)"));
        }
        // Unlike AWF, an undeclared input never reaches a step's environment.
        msg.push_str(
            "; nothing uses it: templates may read only declared inputs and commands get only \
             those as environment variables",
        );
        out.push(msg);
    }
    out
}

/// `call_workflow` targets that cannot be loaded (not found, or invalid).
fn missing_children(services: &Services, wf: &Workflow) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for (name, st) in &wf.states {
        let StateKind::CallWorkflow(c) = &st.kind else {
            continue;
        };
        let templated = c
            .workflow
            .find("{{")
            .is_some_and(|at| c.workflow[at..].contains("}}"));
        if templated
            && services
                .repository
                .load(&c.workflow, Some(&wf.source.dir))
                .is_err()
        {
            // Never interpolated (as in AWF (Go); spec/workflow.md §2.5): the run would look
            // for a workflow named after the template text (breaker: validate said valid).
            out.push(
                Diagnostic::error(
                    ErrorCode::WorkflowValidationInvalidReference,
                    format!("states.{name}.workflow"),
                    format!(
                        "`workflow: {}` is not a template: the name is used as written, and no \
                         workflow has that name",
                        c.workflow
                    ),
                )
                .with_hint(
                    "name the sub-workflow itself; to pick one at run time, route with \
                     `transitions:` to one call_workflow state per workflow",
                ),
            );
            continue;
        }
        let child = services.repository.load(&c.workflow, Some(&wf.source.dir));
        if let Ok(child) = &child {
            out.extend(call_input_warnings(name, c, &child.workflow));
            out.extend(call_value_warnings(
                name,
                c,
                &child.workflow,
                services.host.as_ref(),
            ));
            out.extend(invalid_child(services, name, &c.workflow, child));
        }
        if let Err(e) = child {
            let mut d = Diagnostic::error(
                ErrorCode::WorkflowValidationInvalidReference,
                format!("states.{name}.workflow"),
                format!(
                    "sub-workflow \"{}\" cannot be loaded: {}",
                    c.workflow,
                    e.message()
                ),
            );
            if let Some(h) = e.hints().first() {
                d = d.with_hint(h.clone());
            }
            out.push(d);
        }
    }
    out
}

thread_local! {
    /// The workflow files whose checks are under way on this thread (a call cycle checks
    /// each file once).
    static CHECKING: std::cell::RefCell<Vec<std::path::PathBuf>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A warning at the call's `workflow:` when the workflow state `step` calls has errors: the
/// child's first one (new user: `awf validate` said the parent was valid, and the run failed
/// at the call). A warning, not an error: the call fails at run time and its failure is
/// routable (`on_failure`), as it always was. Each file is checked once along a chain of
/// calls.
fn invalid_child(
    services: &Services,
    step: &str,
    target: &str,
    child: &LoadedWorkflow,
) -> Option<Diagnostic> {
    let path = child.workflow.source.path.clone()?;
    let shown = path.display().to_string();
    if CHECKING.with(|c| c.borrow().contains(&path)) {
        return None;
    }
    CHECKING.with(|c| c.borrow_mut().push(path));
    let found = checks(services, child);
    CHECKING.with(|c| {
        c.borrow_mut().pop();
    });
    let errors: Vec<&Diagnostic> = found
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .collect();
    let first = errors.first()?;
    let more = match errors.len() {
        1 => String::new(),
        n => format!(" (and {} more)", n - 1),
    };
    let at = if first.path.is_empty() || first.message.contains(first.path.as_str()) {
        String::new()
    } else {
        format!("{}: ", first.path)
    };
    let mut d = Diagnostic::warning(
        first.code,
        format!("states.{step}.workflow"),
        format!(
            "sub-workflow \"{target}\" is invalid, so the call fails when it runs: {at}{}{more}",
            first.message
        ),
    )
    .failing_the_run();
    d.hint = Some(match &first.hint {
        Some(h) => format!("{h} (in {shown}; `awf validate` it for every finding)"),
        None => format!(
            "`awf validate {}` lists every finding",
            awf_domain::shell::quote_arg(&shown)
        ),
    });
    Some(d)
}

/// What a `call_workflow` step `step` passes its child against what the child declares
/// (new user: a misspelt input key validated clean, then the run failed in the child): a
/// required child input without a default the step does not pass (the run would fail with
/// `USER.INPUT.VALIDATION_FAILED`), and a key the child does not declare (with the closest
/// declared name). Code `WORKFLOW.VALIDATION.INVALID_REFERENCE`, warnings (a call on a path
/// the run never takes does not fail it), path `states.<step>.inputs`.
fn call_input_warnings(
    step: &str,
    call: &awf_domain::workflow::CallWorkflowStep,
    child: &Workflow,
) -> Vec<Diagnostic> {
    let path = format!("states.{step}.inputs");
    let declared = || child.inputs.iter().map(|d| d.name.as_str());
    let mut out = Vec::new();
    for key in call.inputs.keys() {
        if child.inputs.iter().any(|d| d.name == *key) {
            continue;
        }
        let mut d = Diagnostic::warning(
            ErrorCode::WorkflowValidationInvalidReference,
            path.clone(),
            format!(
                "sub-workflow \"{}\" declares no input \"{key}\" (it declares: {})",
                call.workflow,
                if child.inputs.is_empty() {
                    "none".to_owned()
                } else {
                    declared().collect::<Vec<_>>().join(", ")
                }
            ),
        );
        // A shortened name (`comp` for `component`) is too far for the edit distance.
        let near = validate::closest(key, declared()).or_else(|| {
            declared()
                .find(|d| key.len() >= 3 && (d.starts_with(key.as_str()) || key.starts_with(d)))
        });
        if let Some(near) = near {
            d = d.with_hint(format!("did you mean \"{near}\"?"));
        }
        out.push(d);
    }
    for input in &child.inputs {
        if input.required && input.default.is_none() && !call.inputs.contains_key(&input.name) {
            out.push(
                Diagnostic::warning(
                    ErrorCode::WorkflowValidationInvalidReference,
                    path.clone(),
                    format!(
                        "sub-workflow \"{}\" requires input \"{}\", which this step does not pass (the run would fail with USER.INPUT.VALIDATION_FAILED)",
                        call.workflow, input.name
                    ),
                )
                .with_hint(format!(
                    "add `{}: <value>` under the step's `inputs:`",
                    input.name
                ))
                .failing_the_run(),
            );
        }
    }
    out
}

/// The literal (template-free) values a `call_workflow` step `step` passes its child that
/// break the child input's declaration: its type, `enum`, `pattern`, `min`, `max` (new
/// user: `compress: zip` for a child input of `enum: [gz, xz, none]` validated clean, then
/// the run failed `value "zip" not in allowed values`), or empty for a required input. The
/// child checks them as it checks `--input` values (trimmed, `file_exists` left to the run,
/// whose directory decides it). Code `WORKFLOW.VALIDATION.INVALID_STATE`, as a default that
/// breaks its own input's rules; a warning that fails the run where it applies, as the other
/// checks of a call's inputs (a call on a path the run never takes does not fail it); path
/// `states.<step>.inputs.<key>`. A secret-named input's value is not quoted.
fn call_value_warnings(
    step: &str,
    call: &awf_domain::workflow::CallWorkflowStep,
    child: &Workflow,
    host: &dyn awf_domain::ports::Host,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for (key, value) in &call.inputs {
        if value.contains("{{") {
            continue;
        }
        let Some(def) = child.inputs.iter().find(|d| d.name == *key) else {
            continue;
        };
        let text = value.trim();
        let problem = if def.required && text.is_empty() {
            Some("required but empty".to_owned())
        } else {
            let mut rules = def.clone();
            rules.validation.file_exists = false;
            crate::inputs::check_value(
                &rules,
                &serde_json::Value::String(text.to_owned()),
                std::path::Path::new("."),
                host,
            )
            .err()
        };
        let Some(mut problem) = problem else {
            continue;
        };
        if awf_domain::mask::is_secret_name(key) && !text.is_empty() {
            problem = problem.replace(&format!("\"{text}\""), "\"***\"");
        }
        out.push(
            Diagnostic::warning(
                ErrorCode::WorkflowValidationInvalidState,
                format!("states.{step}.inputs.{key}"),
                format!(
                    "sub-workflow \"{}\" refuses input \"{key}\": {problem} (the run would fail with USER.INPUT.VALIDATION_FAILED)",
                    call.workflow
                ),
            )
            .with_hint(format!(
                "pass a value it takes: {}",
                crate::inputs::inputs_help_for(&call.workflow)
            ))
            .failing_the_run(),
        );
    }
    out
}

/// Most workflows [`call_cycles`] loads while following `call_workflow` steps; a larger call
/// graph is left to the run's own checks (`EXECUTION.WORKFLOW.CIRCULAR_CALL`, `MAX_DEPTH`).
const MAX_CALLED_WORKFLOWS: usize = 256;

/// `call_workflow` steps whose literal `workflow:` leads back to a workflow already on the
/// call chain: the workflow itself (`c: {type: call_workflow, workflow: rec}` in `rec.yaml`)
/// or through others (A → B → A). Workflows are told apart as the engine does at run time
/// (the canonical path of their file), and each is loaded once, so a deep chain costs one
/// load per workflow; a target that cannot be loaded is [`missing_children`]'s error.
///
/// Code `WORKFLOW.VALIDATION.CYCLE_DETECTED`, error, path `states.<step>.workflow` of the
/// step of `wf` that starts the chain, one per step; the message names the chain by file
/// stem (`rec -> rec`). Reported by `awf validate` (and `awf list`, the HTTP validate) only:
/// `awf run` keeps AWF's behaviour, the engine's `EXECUTION.WORKFLOW.CIRCULAR_CALL` (exit 3)
/// at the call (spec/workflow.md §3.7; conformance C23). Source: the code's catalog text
/// ("a … sub-workflow reference forms a cycle").
///
/// A literal chain of calls deeper than the engine allows (`MAX_CALL_DEPTH` workflows) is a
/// warning with code `EXECUTION.WORKFLOW.MAX_DEPTH` at the step of `wf` that starts it (the
/// run fails there only if it reaches the last call). A workflow already explored by a
/// shorter path is not explored again, so a deeper path to it through a shared child may go
/// unreported.
fn call_cycles(services: &Services, wf: &Workflow) -> Vec<Diagnostic> {
    struct Frame {
        id: String,
        dir: std::path::PathBuf,
        calls: Vec<(String, String)>,
        next: usize,
        /// The step of `wf` this frame was reached through (`None` for `wf` itself).
        root_step: Option<String>,
    }
    let host = services.host.as_ref();
    let calls = |w: &Workflow| -> Vec<(String, String)> {
        w.states
            .iter()
            .filter_map(|(name, st)| match &st.kind {
                StateKind::CallWorkflow(c) if !c.workflow.contains("{{") => {
                    Some((name.clone(), c.workflow.clone()))
                }
                _ => None,
            })
            .collect()
    };
    let label = |id: &str| -> String {
        std::path::Path::new(id)
            .file_stem()
            .map_or_else(|| id.to_owned(), |s| s.to_string_lossy().into_owned())
    };
    let root_calls = calls(wf);
    // No call, no cycle: nothing to resolve (`awf list` validates every workflow it shows,
    // and the root's identity is a `realpath` of its file).
    if root_calls.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut done: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut loads = 0usize;
    // The steps of `wf` whose chain of calls was found too deep (one warning each).
    let mut too_deep: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut stack = vec![Frame {
        id: crate::engine::identity(wf, host),
        dir: wf.source.dir.clone(),
        calls: root_calls,
        next: 0,
        root_step: None,
    }];
    while let Some(top) = stack.last_mut() {
        let Some((step, target)) = top.calls.get(top.next).cloned() else {
            if let Some(f) = stack.pop() {
                done.insert(f.id);
            }
            continue;
        };
        top.next += 1;
        let root_step = top.root_step.clone().unwrap_or_else(|| step.clone());
        let dir = top.dir.clone();
        if loads >= MAX_CALLED_WORKFLOWS {
            break;
        }
        loads += 1;
        let Ok(child) = services.repository.load(&target, Some(&dir)) else {
            continue;
        };
        let child_id = crate::engine::identity(&child.workflow, host);
        if let Some(from) = stack.iter().position(|f| f.id == child_id) {
            // The calls from `wf` down to the repeated workflow, then back to it.
            let mut chain: Vec<String> = stack.iter().map(|f| label(&f.id)).collect();
            chain.push(label(&child_id));
            let message = if from == 0 && stack.len() == 1 {
                format!(
                    "workflow \"{}\" calls itself: {} (the run would fail with EXECUTION.WORKFLOW.CIRCULAR_CALL)",
                    wf.name,
                    chain.join(" -> ")
                )
            } else {
                format!(
                    "sub-workflow calls form a cycle: {} (the run would fail with EXECUTION.WORKFLOW.CIRCULAR_CALL)",
                    chain.join(" -> ")
                )
            };
            out.push(
                Diagnostic::error(
                    ErrorCode::WorkflowValidationCycleDetected,
                    format!("states.{root_step}.workflow"),
                    message,
                )
                .with_hint("a workflow cannot call itself, directly or through other workflows; repeat steps with a while loop"),
            );
            // One finding per step of `wf`: go on with its next step (the frames above were
            // not fully explored, so they are not marked done).
            stack.truncate(1);
            continue;
        }
        if stack.len() >= crate::engine::MAX_CALL_DEPTH && too_deep.insert(root_step.clone()) {
            // The workflow on top is the last the engine lets call another (its call stack
            // is full): this call would fail the run with MAX_DEPTH. Said once per step of
            // `wf`; the walk goes on (a cycle further down is still an error).
            let mut chain: Vec<String> = stack.iter().map(|f| label(&f.id)).collect();
            chain.push(label(&child_id));
            out.push(
                Diagnostic::warning(
                    ErrorCode::ExecutionMaxDepth,
                    format!("states.{root_step}.workflow"),
                    format!(
                        "sub-workflow calls nest deeper than {} workflows: {} (the run would fail with EXECUTION.WORKFLOW.MAX_DEPTH when it reaches the last call)",
                        crate::engine::MAX_CALL_DEPTH,
                        chain.join(" -> ")
                    ),
                )
                .with_hint("shorten the chain of call_workflow steps")
                .failing_the_run(),
            );
        }
        if done.contains(&child_id) {
            continue;
        }
        stack.push(Frame {
            id: child_id,
            dir: child.workflow.source.dir.clone(),
            calls: calls(&child.workflow),
            next: 0,
            root_step: Some(root_step),
        });
    }
    out
}

/// What of an agent step's calls has no price in `prices`: `provider claude`, `model
/// gpt-4o of provider openai_compatible`, for each of its providers (fallbacks included) whose
/// calls surely count no dollars; empty when every call may be priced. Surely: with no
/// prices at all, any; else a provider (not a template) without a price whose `model` option
/// is written out and has none either (with no `model`, or a templated one, the model the
/// provider reports at run time may have a price).
fn unpriced_calls(
    prices: &awf_domain::run::Prices,
    a: &awf_domain::workflow::AgentStep,
) -> Vec<String> {
    let entries = std::iter::once((a.provider.as_str(), &a.options)).chain(
        a.policy
            .fallback_providers
            .iter()
            .map(|f| (f.provider.as_str(), &f.options)),
    );
    let mut out = Vec::new();
    for (provider, options) in entries {
        let provider = provider.trim();
        let model = options
            .get("model")
            .and_then(serde_json::Value::as_str)
            .map(str::trim);
        let what = match model {
            Some(m) if !m.contains("{{") => format!("model {m} of provider {provider}"),
            _ => format!("provider {provider}"),
        };
        let unpriced = if prices.0.is_empty() {
            true
        } else {
            match model {
                _ if provider.contains("{{") => false,
                Some(m) if !m.contains("{{") => prices.lookup([m, provider]).is_none(),
                _ => false,
            }
        };
        if unpriced && !out.contains(&what) {
            out.push(what);
        }
    }
    out
}

/// `budget: {usd}` that cannot be enforced: dollars are counted from the `prices:` of
/// `.awf/config.yaml`, and an agent step whose calls have no price there counts none, so a
/// budget in dollars is never reached by it (a new user's `usd` budget was silently ignored:
/// no `prices:` at all). One warning at the workflow's `budget.usd` naming the unpriced agent
/// steps, one at each agent step's own `budget.usd` whose calls are unpriced; `awf run`
/// shows them once, before the first state. Steps of sub-workflows, which the workflow's
/// budget also covers, are not looked at.
fn unpriced_budgets(prices: &awf_domain::run::Prices, wf: &Workflow) -> Vec<Diagnostic> {
    let hint = if prices.0.is_empty() {
        "add `prices:` to .awf/config.yaml (`<model or provider>: {input_per_mtok: …, \
         output_per_mtok: …}`, US dollars per million tokens; `\"*\"` prices any model), or \
         limit tokens instead (`budget: {tokens: N}`)"
    } else {
        "add their models or providers to `prices:` in .awf/config.yaml (`\"*\"` prices any \
         model), or limit tokens instead (`budget: {tokens: N}`)"
    };
    let why = if prices.0.is_empty() {
        "no `prices:` are configured (.awf/config.yaml)"
    } else {
        "`prices:` (.awf/config.yaml) has no price for"
    };
    let mut out = Vec::new();
    let mut unpriced_steps = Vec::new();
    for (name, st) in &wf.states {
        let StateKind::Agent(a) = &st.kind else {
            continue;
        };
        let calls = unpriced_calls(prices, a);
        if calls.is_empty() {
            continue;
        }
        let calls = calls.join(", ");
        if a.policy.budget.as_ref().is_some_and(|b| b.usd.is_some()) {
            let message = if prices.0.is_empty() {
                format!(
                    "this usd budget cannot be enforced: {why}, so the calls of \"{name}\" count no dollars"
                )
            } else {
                format!(
                    "this usd budget cannot be enforced: {why} {calls}, so the calls of \"{name}\" count no dollars"
                )
            };
            out.push(
                Diagnostic::warning(
                    ErrorCode::WorkflowValidationInvalidState,
                    format!("states.{name}.budget.usd"),
                    message,
                )
                .with_hint(hint),
            );
        }
        unpriced_steps.push(if prices.0.is_empty() {
            format!("\"{name}\"")
        } else {
            format!("\"{name}\" ({calls})")
        });
    }
    if wf.budget.as_ref().is_some_and(|b| b.usd.is_some()) && !unpriced_steps.is_empty() {
        let (steps, count) = if unpriced_steps.len() == 1 {
            ("agent step", "counts")
        } else {
            ("agent steps", "count")
        };
        let list = unpriced_steps.join(", ");
        let message = if prices.0.is_empty() {
            format!(
                "the workflow's usd budget cannot be enforced: {why}, so {steps} {list} {count} no dollars"
            )
        } else {
            format!(
                "the workflow's usd budget cannot be fully enforced: {why} the calls of {steps} {list}, which count no dollars"
            )
        };
        out.push(
            Diagnostic::warning(
                ErrorCode::WorkflowValidationInvalidState,
                "budget.usd",
                message,
            )
            .with_hint(hint),
        );
    }
    out
}

/// What an unknown step provider does at run time ([`unknown_providers`]).
const STEP_FAILS: &str = "the step will fail when it runs";

/// A literal `provider:` awf does not know: a warning, as AWF (Go) validates it (it checks
/// only that a provider is given), marked [`Diagnostic::run_fails`] for the step's own
/// provider (the step fails when it runs), not for a `fallback_providers` entry (skipped).
fn unknown_providers(wf: &Workflow) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for (name, st) in &wf.states {
        let StateKind::Agent(a) = &st.kind else {
            continue;
        };
        // The step's provider, then each `fallback_providers` entry (skipped at run time).
        let fallbacks = a
            .policy
            .fallback_providers
            .iter()
            .enumerate()
            .map(|(i, f)| {
                (
                    f.provider.trim(),
                    format!("states.{name}.fallback_providers.{i}"),
                    "the run skips this fallback",
                )
            });
        for (p, path, effect) in std::iter::once((
            a.provider.trim(),
            format!("states.{name}.provider"),
            STEP_FAILS,
        ))
        .chain(fallbacks)
        {
            // An empty and the removed `custom` provider have their own errors (structural rules).
            if p.is_empty()
                || p.contains("{{")
                || p == "custom"
                || awf_domain::workflow::AGENT_PROVIDERS.contains(&p)
            {
                continue;
            }
            let mut d = Diagnostic::warning(
                ErrorCode::UserAgentUnknownProvider,
                path,
                format!("unknown provider \"{p}\": {effect}"),
            );
            let known = format!(
                "known providers: {}",
                awf_domain::workflow::AGENT_PROVIDERS.join(", ")
            );
            d = match awf_domain::workflow::closest_provider(p) {
                Some(c) => d.with_hint(format!("did you mean '{c}'? {known}")),
                None => d.with_hint(known),
            };
            // The step's own provider fails the step; a fallback's is skipped.
            d.run_fails = effect == STEP_FAILS;
            out.push(d);
        }
    }
    out
}

/// Routing pitfalls worth a warning: a default transition on a command step that makes its
/// `on_failure` unreachable (AWF evaluates command transitions on failure too), and
/// transitions without a default and without `on_success` (no route when nothing matches;
/// not in a loop's body, where the loop then goes on). A note for a command step with conditional transitions and `on_failure` whose `when`s
/// never read its exit code or status: a failure that matches one takes its `goto`, not
/// `on_failure` (a new user's `states.a.Output contains 'ok'` sent a failed step to its
/// success terminal, exit 0).
fn routing_warnings(wf: &Workflow) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let body_steps: std::collections::BTreeSet<&str> = wf
        .states
        .values()
        .filter_map(|s| match &s.kind {
            StateKind::Loop(l) => Some(l.body.iter().map(String::as_str)),
            _ => None,
        })
        .flatten()
        .collect();
    for (name, st) in &wf.states {
        if st.transitions.is_empty()
            || matches!(st.kind, StateKind::Terminal(_) | StateKind::Loop(_))
        {
            continue;
        }
        let has_default = st
            .transitions
            .iter()
            .any(|t| t.when.as_deref().is_none_or(|w| w.trim().is_empty()));
        if has_default && st.on_failure.is_some() && matches!(st.kind, StateKind::Command(_)) {
            out.push(
                Diagnostic::warning(
                    ErrorCode::WorkflowValidationInvalidTransition,
                    format!("states.{name}.transitions"),
                    "the default transition (a `goto` without `when`) also catches failures of this step, so on_failure is never used",
                )
                .with_hint("add `when: states.<step>.ExitCode == 0` to the default transition, or drop on_failure"),
            );
        }
        // A `when` that reads the step's own outcome was written with failures in mind.
        let reads_outcome = st.transitions.iter().any(|t| {
            t.when.as_deref().is_some_and(|w| {
                ["ExitCode", "exit_code", "Status", "status"]
                    .iter()
                    .any(|f| w.contains(&format!("{name}.{f}")))
            })
        });
        if !has_default
            && !reads_outcome
            && st.on_failure.is_some()
            && matches!(st.kind, StateKind::Command(_))
        {
            out.push(
                Diagnostic::new(
                    Severity::Note,
                    ErrorCode::WorkflowValidationInvalidTransition,
                    format!("states.{name}.transitions"),
                    "transitions are evaluated when this step fails too (as in AWF (Go)): a failure whose `when` holds goes to that `goto`, not to on_failure",
                )
                .with_hint(format!(
                    "to route only successes with a `when`, start it with `states.{name}.ExitCode == 0 and`"
                )),
            );
        }
        // In a loop's body, no route is the loop going on (the next body step, or the next
        // item after the last): not "nowhere to go" (new user: `transitions: [{when: …,
        // goto: each}]` on a body step was warned about).
        if !has_default && st.on_success.is_none() && !body_steps.contains(name.as_str()) {
            out.push(
                Diagnostic::warning(
                    ErrorCode::WorkflowValidationInvalidTransition,
                    format!("states.{name}.transitions"),
                    "when no `when` matches, this state has nowhere to go",
                )
                .with_hint("add a default transition (`- goto: <state>`) or on_success"),
            );
        }
    }
    out
}

/// Checks `awf run` enforces before starting: every error of [`checks`], the same set
/// `awf validate` reports.
///
/// # Errors
/// The first error found, positioned, with its own hint (none when it has none) and the
/// number of other errors in its message.
pub fn check_for_run(services: &Services, loaded: &LoadedWorkflow) -> Result<(), AwfError> {
    first_error(&checks(services, loaded))
}

/// The refusal of a run of `identifier` that failed to load or check with `found` (a
/// `WORKFLOW.*` error): `awf validate`'s first error, in its order, with the number of its
/// other errors (a run counted only the errors of the stage that stopped it: the load's,
/// then the later checks'). Any other error, or a workflow `awf validate` cannot read
/// either, is `found` as it is.
pub fn run_refusal(
    services: &Services,
    identifier: &str,
    env: &BTreeMap<String, String>,
    found: AwfError,
) -> AwfError {
    if found.code().category() != awf_domain::Category::Workflow {
        return found;
    }
    match validate_workflow(services, identifier, env) {
        Ok(report) => first_error(&report.diagnostics).err().unwrap_or(found),
        Err(_) => found,
    }
}

/// The first error among `found` (see [`check_for_run`]); `Ok` when there is none.
fn first_error(found: &[Diagnostic]) -> Result<(), AwfError> {
    // Only the first error is printed: it carries its own hint, never another error's (a
    // hint under an error it does not belong to misleads); `awf validate` shows each error
    // with its own.
    awf_domain::ports::repository::first_error(found).map_or(Ok(()), Err)
}

/// How a list of workflows shows the workflow `identifier` (a name or a file path) when it
/// is broken (`awf list`, `awf mcp-serve --workflows`, `awf acp-serve`): `awf validate`'s
/// first error and the number of its others
/// ([`awf_domain::ports::repository::broken_summary`]); when `awf validate` cannot read it
/// either (YAML syntax, a FIFO, no such workflow), that error as `[CODE] message` (without
/// the file name the list shows anyway). `None` when it is valid.
pub fn broken_summary(
    services: &Services,
    identifier: &str,
    env: &BTreeMap<String, String>,
) -> Option<String> {
    match validate_workflow(services, identifier, env) {
        Ok(report) => awf_domain::ports::repository::broken_summary(&report.diagnostics),
        Err(e) => {
            let file = e.details().get("file").and_then(|f| f.as_str());
            let msg = file
                .and_then(|f| e.message().strip_prefix(&format!("{f}: ")))
                .unwrap_or(e.message());
            Some(format!("[{}] {msg}", e.code()))
        }
    }
}

/// What a condition written as a bare literal other than a boolean is (`5`: "number",
/// `'x'`: "string", `null`), or `None` for anything else (`true`, comparisons, names).
fn non_boolean_literal(text: &str) -> Option<&'static str> {
    let t = text.trim();
    let quoted = |q: char| {
        t.len() >= 2 && t.starts_with(q) && t.ends_with(q) && !t[1..t.len() - 1].contains(q)
    };
    // `inf` and `nan` parse as numbers but are names here.
    let numeric = t
        .trim_start_matches(['-', '+', '.'])
        .starts_with(|c: char| c.is_ascii_digit());
    if numeric && t.parse::<f64>().is_ok() {
        Some("number")
    } else if quoted('"') || quoted('\'') || quoted('`') {
        Some("string")
    } else if t == "null" || t == "nil" {
        Some("null")
    } else {
        None
    }
}

/// What a condition that reads nothing of the run gives when it is not true or false
/// (`1 + 2`: "number", `[1,2]`: "list"), evaluated with an empty scope; `None` when it
/// gives a boolean, reads the run (`states.x…`, `inputs.y`: undefined here), or fails.
fn constant_non_boolean(services: &Services, text: &str) -> Option<&'static str> {
    // Only a constant: no name outside string literals (a name reads the run, which an
    // empty scope cannot stand for: `inputs.flag` is a boolean when the run has it).
    let mut quote = None;
    for c in text.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if matches!(c, '"' | '\'' | '`') => quote = Some(c),
            None if c.is_alphabetic() || c == '_' || c == '$' || c == '#' => return None,
            None => {}
        }
    }
    let empty_map = serde_json::Map::new();
    let no_states = BTreeMap::new();
    let no_strings = BTreeMap::new();
    let info = awf_domain::scope::WorkflowInfo {
        id: String::new(),
        name: String::new(),
        current_state: String::new(),
        started_at: std::time::SystemTime::UNIX_EPOCH,
        duration: std::time::Duration::ZERO,
    };
    let context = awf_domain::scope::RuntimeInfo::default();
    let scope = awf_domain::scope::Scope {
        inputs: &empty_map,
        states: &no_states,
        workflow: &info,
        env: &no_strings,
        context: &context,
        awf: &no_strings,
        loop_frame: None,
        error: None,
        workflow_dir: std::path::Path::new("."),
    };
    let Err(e) = services.expressions.eval_bool(text, &scope) else {
        return None;
    };
    let message = e.to_string();
    let got = message.split("must give a boolean, got ").nth(1)?;
    Some(match got.split_whitespace().next().unwrap_or("") {
        "a" | "an" => match got.split_whitespace().nth(1).unwrap_or("") {
            "number" => "number",
            "string" => "string",
            "list" | "array" => "list",
            "map" | "object" => "map",
            _ => "value that is not true or false",
        },
        "null" | "nil" => "null",
        _ => "value that is not true or false",
    })
}

/// Structural rules plus expression and template syntax.
fn run_checks(services: &Services, wf: &Workflow) -> Vec<Diagnostic> {
    let mut out = validate::structural(wf);
    // A transition's `when` that does not compile is an invalid transition; a loop's
    // `while:` or `break_when:`, an invalid state (it was coded as a transition).
    // Paths are made only for a finding (`path()`): most texts have none, and a path made
    // for each one was a tenth of `awf list` (issue 9).
    let code_at = |path: &str| {
        if path.contains(".transitions.") {
            ErrorCode::WorkflowValidationInvalidTransition
        } else {
            ErrorCode::WorkflowValidationInvalidState
        }
    };
    let expr = |path: &dyn Fn() -> String, text: &str, out: &mut Vec<Diagnostic>| {
        if let Some(kind) =
            non_boolean_literal(text).or_else(|| constant_non_boolean(services, text))
        {
            // Compiles, but can never give true or false (breaker: `when: 5` validated,
            // then the run failed with "must give a boolean, got a number").
            let path = path();
            out.push(
                Diagnostic::error(
                    code_at(&path),
                    path,
                    format!("expression `{text}` is a {kind}, not a condition: it must give true or false"),
                )
                .with_hint("compare it, e.g. `states.build.ExitCode == 0`, or write `true`"),
            );
        } else if let Err(e) = services.expressions.check(text) {
            let path = path();
            out.push(check_failure(
                code_at(&path),
                path,
                &format!("expression `{text}` does not compile"),
                &e,
            ));
        }
    };
    let tpl = |path: &dyn Fn() -> String, text: &str, out: &mut Vec<Diagnostic>| {
        if text.contains("{{")
            && let Err(e) = services.interpolator.check(text)
        {
            let mut d = check_failure(
                ErrorCode::WorkflowValidationInvalidReference,
                path(),
                TEMPLATE_DOES_NOT_PARSE,
                &e,
            );
            // At the template that does not parse, as a reference error in the same text
            // is (new user: it pointed at the `command:` key).
            if let Some(at) = parse_error_offset(text, &d.message) {
                d.point_at(text, at);
            }
            out.push(d);
        }
    };
    let hooks = |base: &dyn Fn() -> String, actions: &[HookAction], out: &mut Vec<Diagnostic>| {
        for (i, a) in actions.iter().enumerate() {
            match a {
                HookAction::Log(t) => tpl(&|| format!("{}.{i}.log", base()), t, out),
                HookAction::Command(t) => tpl(&|| format!("{}.{i}.command", base()), t, out),
            }
        }
    };
    for (name, state) in &wf.states {
        // An inline `on_failure`'s terminal by where it is written (`states.a.on_failure`).
        let base = || awf_domain::workflow::state_path(name);
        for (i, t) in state.transitions.iter().enumerate() {
            if let Some(w) = &t.when
                && !w.trim().is_empty()
            {
                expr(&|| format!("{}.transitions.{i}.when", base()), w, &mut out);
            }
        }
        hooks(
            &|| format!("{}.hooks.pre", base()),
            &state.hooks.pre,
            &mut out,
        );
        hooks(
            &|| format!("{}.hooks.post", base()),
            &state.hooks.post,
            &mut out,
        );
        if let Some(a) = &state.approval {
            tpl(
                &|| format!("{}.approval.message", base()),
                &a.message,
                &mut out,
            );
        }
        match &state.kind {
            StateKind::Command(c) => {
                match &c.source {
                    awf_domain::workflow::CommandSource::Inline(t) => {
                        tpl(&|| format!("{}.command", base()), t, &mut out)
                    }
                    awf_domain::workflow::CommandSource::ScriptFile(t) => {
                        tpl(&|| format!("{}.script_file", base()), t, &mut out);
                    }
                }
                if let Some(d) = &c.dir {
                    tpl(&|| format!("{}.dir", base()), d, &mut out);
                }
            }
            StateKind::Loop(l) => {
                match &l.over {
                    LoopOver::Items(t) => tpl(&|| format!("{}.items", base()), t, &mut out),
                    LoopOver::While(w) => expr(&|| format!("{}.while", base()), w, &mut out),
                }
                if let Some(b) = &l.break_when {
                    expr(&|| format!("{}.break_when", base()), b, &mut out);
                }
                if let awf_domain::workflow::MaxIterations::Dynamic(m) = &l.max_iterations {
                    tpl(&|| format!("{}.max_iterations", base()), m, &mut out);
                }
            }
            StateKind::Terminal(t) => {
                if let Some(m) = &t.message {
                    tpl(&|| format!("{}.message", base()), m, &mut out);
                }
            }
            StateKind::CallWorkflow(c) => {
                for (k, v) in &c.inputs {
                    tpl(&|| format!("{}.inputs.{k}", base()), v, &mut out);
                }
            }
            // What the step renders before it calls the agent (a `prompt_file`'s text is
            // checked by `file_references`, as a script's).
            StateKind::Agent(a) => {
                if let Some(p) = &a.prompt {
                    tpl(&|| format!("{}.prompt", base()), p, &mut out);
                }
                if let Some(f) = &a.prompt_file {
                    tpl(&|| format!("{}.prompt_file", base()), f, &mut out);
                }
                if let Some(s) = &a.system_prompt {
                    tpl(&|| format!("{}.system_prompt", base()), s, &mut out);
                }
                if let Some(c) = a
                    .conversation
                    .as_ref()
                    .and_then(|c| c.inject_context.as_ref())
                {
                    tpl(
                        &|| format!("{}.conversation.inject_context", base()),
                        c,
                        &mut out,
                    );
                }
            }
            StateKind::Operation(_) | StateKind::Parallel(_) => {}
        }
    }
    hooks(
        &|| "hooks.workflow_start".to_owned(),
        &wf.hooks.workflow_start,
        &mut out,
    );
    hooks(
        &|| "hooks.workflow_end".to_owned(),
        &wf.hooks.workflow_end,
        &mut out,
    );
    hooks(
        &|| "hooks.workflow_error".to_owned(),
        &wf.hooks.workflow_error,
        &mut out,
    );
    hooks(
        &|| "hooks.workflow_cancel".to_owned(),
        &wf.hooks.workflow_cancel,
        &mut out,
    );
    out
}

/// `options:` keys the step's (literal) provider does not understand: it would ignore them,
/// so a tool restriction or a turn limit the user wrote would silently not apply. Keys are
/// compared in their canonical spelling (`allowedTools` = `allowed_tools`).
fn unknown_options(services: &Services, wf: &Workflow) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for (name, st) in &wf.states {
        let StateKind::Agent(a) = &st.kind else {
            continue;
        };
        let provider = services.agents.get(a.provider.trim());
        if let Some(p) = &provider {
            let options: serde_json::Map<String, serde_json::Value> = a
                .options
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            for mut d in p.check_options(&options) {
                d.path = format!("states.{name}.options.{}", d.path);
                out.push(d);
            }
        }
        let Some(known) = provider.and_then(|p| p.options()) else {
            continue;
        };
        for key in a.options.keys() {
            let canonical = awf_domain::ports::agent::option_key(key);
            if known
                .iter()
                .chain(COMMON_AGENT_OPTIONS)
                .any(|k| *k == canonical.as_ref())
            {
                continue;
            }
            let mut d = Diagnostic::warning(
                ErrorCode::UserAgentInvalidOption,
                format!("states.{name}.options.{key}"),
                format!(
                    "provider \"{}\" has no option \"{key}\": it is not passed to the agent",
                    a.provider.trim()
                ),
            );
            let all: Vec<&str> = known.iter().chain(COMMON_AGENT_OPTIONS).copied().collect();
            let hint = format!("known options: {}", all.join(", "));
            d = match validate::closest(&canonical, all.iter().copied()) {
                Some(c) => d.with_hint(format!("did you mean '{c}'? {hint}")),
                None => d.with_hint(hint),
            };
            out.push(d);
        }
    }
    out
}

#[cfg(test)]
#[path = "validation_tests.rs"]
mod tests;
