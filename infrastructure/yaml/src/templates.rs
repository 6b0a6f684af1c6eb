//! `use_template` expansion, done on the node tree before a state is decoded (so a templated
//! step needs neither `type:` nor `command:`).
//!
//! A template file `<dir>/<name>.yaml` holds `name`, `parameters: [{name, required, default}]`
//! and `states:`; the primary state is the one named like the template (else the first).
//! `{{parameters.NAME}}` (also `{{.parameters.NAME}}`, spaces and trim markers allowed) is
//! replaced in the primary state's `command` and `dir`; a parameter the template does not
//! declare is a `WORKFLOW.VALIDATION.INVALID_REFERENCE` error. The step takes the template's `type` and `command`, and `dir`, `timeout`, `retry`,
//! `capture` when it lacks them. Source: spec/workflow.md §1.11, §2.9; decisions.md
//! ("expand templates first, then validate").

use std::path::PathBuf;

use awf_domain::ErrorCode;

use crate::fields::Diags;
use crate::node::MapEntry;
use crate::node::Node;
use crate::node::NodeKind;
use crate::node::Pos;
use crate::node::parse_document;

/// Finds template files by name.
pub trait TemplateLookup {
    /// Returns the template's path and text, `Ok(None)` when no directory has it.
    ///
    /// # Errors
    /// A message when the file exists but cannot be read.
    fn find(&self, name: &str) -> Result<Option<(PathBuf, String)>, String>;

    /// The names of the templates there are (for a did-you-mean); none by default.
    fn names(&self) -> Vec<String> {
        Vec::new()
    }
}

/// No templates at all (every `use_template` is a MISSING_TEMPLATE error).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoTemplates;

impl TemplateLookup for NoTemplates {
    fn find(&self, _name: &str) -> Result<Option<(PathBuf, String)>, String> {
        Ok(None)
    }
}

/// Templates in directories, first directory that has `<name>.yaml` wins.
#[derive(Debug, Clone, Default)]
pub struct DirTemplates {
    /// Searched in order.
    pub dirs: Vec<PathBuf>,
}

impl TemplateLookup for DirTemplates {
    fn find(&self, name: &str) -> Result<Option<(PathBuf, String)>, String> {
        if name.is_empty() || name.contains("..") || name.contains('/') || name.contains('\\') {
            return Ok(None);
        }
        for dir in &self.dirs {
            let p = dir.join(format!("{name}.yaml"));
            if p.is_file() {
                return std::fs::read_to_string(&p)
                    .map(|t| Some((p.clone(), t)))
                    .map_err(|e| format!("cannot read template {}: {e}", p.display()));
            }
        }
        Ok(None)
    }

    fn names(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .dirs
            .iter()
            .filter_map(|d| std::fs::read_dir(d).ok())
            .flatten()
            .filter_map(Result::ok)
            .filter_map(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.strip_suffix(".yaml").map(str::to_owned)
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// In-memory templates (name → YAML text), for tests and embedders.
impl TemplateLookup for std::collections::BTreeMap<String, String> {
    fn find(&self, name: &str) -> Result<Option<(PathBuf, String)>, String> {
        Ok(self
            .get(name)
            .map(|t| (PathBuf::from(format!("{name}.yaml")), t.clone())))
    }

    fn names(&self) -> Vec<String> {
        self.keys().cloned().collect()
    }
}

/// Expands the `use_template` of one state node. `None` after recording an error.
pub fn expand_state(
    step: &Node,
    path: &str,
    lookup: &dyn TemplateLookup,
    d: &mut Diags,
) -> Option<Node> {
    expand(step, path, lookup, d, &mut Vec::new())
}

fn missing(d: &mut Diags, path: &str, pos: Option<Pos>, msg: String) {
    d.error(ErrorCode::WorkflowValidationMissingTemplate, path, pos, msg);
}

fn expand(
    step: &Node,
    path: &str,
    lookup: &dyn TemplateLookup,
    d: &mut Diags,
    stack: &mut Vec<String>,
) -> Option<Node> {
    let entries = step.entries()?;
    let ut_path = format!("{path}.use_template");
    let ut_entry = entries.iter().find(|e| e.key == "use_template")?;
    let ut_pos = Some(ut_entry.key_pos);
    let Some(name) = ut_entry
        .value
        .text()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
    else {
        d.syntax(&ut_path, ut_pos, "use_template must be a template name");
        return None;
    };
    if stack.contains(&name) {
        let mut chain = stack.clone();
        chain.push(name.clone());
        d.error(
            ErrorCode::WorkflowValidationCycleDetected,
            &ut_path,
            ut_pos,
            format!(
                "circular template reference detected: {}",
                chain.join(" -> ")
            ),
        );
        return None;
    }
    let (tpath, text) = match lookup.find(&name) {
        Ok(Some(found)) => found,
        Ok(None) => {
            missing(
                d,
                &ut_path,
                ut_pos,
                format!("template \"{name}\" not found"),
            );
            let names = lookup.names();
            let near = awf_domain::validate::closest(&name, names.iter().map(String::as_str));
            if let Some(last) = d.list.last_mut() {
                last.hint = Some(match near {
                    // New user: a misspelt template name got no did-you-mean.
                    Some(c) => format!("did you mean '{c}'?"),
                    None => format!("create .awf/templates/{name}.yaml"),
                });
            }
            return None;
        }
        Err(e) => {
            missing(d, &ut_path, ut_pos, e);
            return None;
        }
    };
    let troot = match parse_document(&text) {
        Ok(n) => n,
        Err(e) => {
            d.syntax(
                &ut_path,
                ut_pos,
                format!(
                    "template \"{name}\" ({}): line {}, column {}: {}",
                    tpath.display(),
                    e.pos.line,
                    e.pos.column,
                    e.message
                ),
            );
            return None;
        }
    };
    // Parameters: defaults from the template, overridden by the step's `parameters:`.
    let mut params: Vec<(String, String)> = Vec::new();
    let mut required: Vec<String> = Vec::new();
    let mut declared: Vec<String> = Vec::new();
    if let Some(items) = troot.get("parameters").and_then(Node::items) {
        for p in items {
            let Some(pname) = p.get("name").and_then(Node::text).map(str::to_owned) else {
                continue;
            };
            declared.push(pname.clone());
            if params.iter().any(|(n, _)| *n == pname) || required.contains(&pname) {
                missing(
                    d,
                    &ut_path,
                    ut_pos,
                    format!("template \"{name}\" declares parameter \"{pname}\" twice"),
                );
                return None;
            }
            match p.get("default").filter(|n| !n.is_null()) {
                Some(def) => params.push((pname, text_of(def))),
                None => {
                    if p.get("required").and_then(Node::text) == Some("true") {
                        required.push(pname);
                    }
                }
            }
        }
    }
    if let Some(given) = step.get("parameters").and_then(Node::entries) {
        for e in given {
            // A parameter the template does not declare is used nowhere (new user: a
            // misspelt one was taken silently).
            if !declared.contains(&e.key) {
                let mut w = awf_domain::ports::repository::Diagnostic::warning(
                    ErrorCode::WorkflowParseUnknownField,
                    format!("{path}.parameters.{}", e.key),
                    format!(
                        "template \"{name}\" declares no parameter \"{}\": it is not used",
                        e.key
                    ),
                );
                w = match awf_domain::validate::closest(&e.key, declared.iter().map(String::as_str))
                {
                    Some(c) => w.with_hint(format!("did you mean '{c}'?")),
                    None if declared.is_empty() => {
                        w.with_hint(format!("template \"{name}\" takes no parameters"))
                    }
                    None => w.with_hint(format!("its parameters: {}", declared.join(", "))),
                };
                d.push(w, Some(e.key_pos));
            }
            params.retain(|(n, _)| *n != e.key);
            params.push((e.key.clone(), text_of(&e.value)));
        }
    }
    for r in &required {
        if !params.iter().any(|(n, _)| n == r) {
            missing(
                d,
                &ut_path,
                ut_pos,
                format!("template \"{name}\" missing required parameter \"{r}\""),
            );
            if let Some(last) = d.list.last_mut() {
                last.hint = Some(format!("add `parameters: {{{r}: …}}` to the step"));
            }
            return None;
        }
    }
    let Some(states) = troot
        .get("states")
        .and_then(Node::entries)
        .filter(|s| !s.is_empty())
    else {
        missing(
            d,
            &ut_path,
            ut_pos,
            format!("template \"{name}\" has no states"),
        );
        return None;
    };
    let primary = states.iter().find(|e| e.key == name).unwrap_or(&states[0]);
    stack.push(name.clone());
    let primary_node = if primary.value.get("use_template").is_some() {
        expand(&primary.value, path, lookup, d, stack)?
    } else {
        primary.value.clone()
    };
    stack.pop();
    let declared: Vec<String> = troot
        .get("parameters")
        .and_then(Node::items)
        .map(|items| {
            items
                .iter()
                .filter_map(|p| p.get("name").and_then(Node::text).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut unknown: Vec<String> = Vec::new();
    let mut replace = |s: &str| substitute(s, &params, &declared, &mut unknown);
    let mut merged: Vec<MapEntry> = entries
        .iter()
        .filter(|e| e.key != "use_template" && e.key != "parameters")
        .cloned()
        .collect();
    let pos = ut_entry.key_pos;
    let relocate = |n: &Node| relocated(n, pos);
    for (key, always) in [
        ("type", true),
        ("command", true),
        ("dir", false),
        ("timeout", false),
        ("retry", false),
        ("capture", false),
    ] {
        let Some(v) = primary_node.get(key) else {
            continue;
        };
        let present = merged.iter().any(|e| e.key == key);
        if present && !always {
            continue;
        }
        let mut value = relocate(v);
        if (key == "command" || key == "dir")
            && let NodeKind::Scalar { text, .. } = &mut value.kind
        {
            *text = replace(text);
        }
        merged.retain(|e| e.key != key);
        merged.push(MapEntry {
            key: key.to_owned(),
            key_pos: pos,
            value,
        });
    }
    if let Some(u) = unknown.first() {
        let hint = crate::fields::closest(u, declared.iter().map(String::as_str))
            .map(|c| format!("did you mean '{c}'?"))
            .unwrap_or_else(|| {
                if declared.is_empty() {
                    format!("declare it in the template: parameters: [{{name: {u}}}]")
                } else {
                    format!("template parameters: {}", declared.join(", "))
                }
            });
        d.error(
            ErrorCode::WorkflowValidationInvalidReference,
            &ut_path,
            ut_pos,
            format!("template \"{name}\" uses parameter \"{u}\", which it does not declare"),
        )
        .hint = Some(hint);
        return None;
    }
    Some(Node {
        pos: step.pos,
        kind: NodeKind::Map(merged),
    })
}

/// Replaces each `{{parameters.NAME}}` action of `text` by the parameter's value. Both forms
/// are accepted, with or without the leading dot (`{{.parameters.NAME}}`), with spaces inside
/// the braces and Go's trim markers (`{{- … -}}` drop the white space before/after). A name
/// the template does not declare is pushed to `unknown`; a declared one without a value stays
/// as written. Any other action is left for the template engine.
fn substitute(
    text: &str,
    params: &[(String, String)],
    declared: &[String],
    unknown: &mut Vec<String>,
) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut trim_next = false;
    while let Some(i) = rest.find("{{") {
        let (before, after_open) = (&rest[..i], &rest[i + 2..]);
        let Some(j) = after_open.find("}}") else {
            break;
        };
        let body = &after_open[..j];
        let trim_left = body.starts_with('-');
        let trim_right = body.ends_with('-') && body.len() > 1;
        let mut inner = body;
        if trim_left {
            inner = &inner[1..];
        }
        if trim_right {
            inner = inner.strip_suffix('-').unwrap_or(inner);
        }
        let inner = inner.trim();
        let name = inner
            .strip_prefix('.')
            .unwrap_or(inner)
            .strip_prefix("parameters.")
            .filter(|n| {
                !n.is_empty()
                    && n.chars()
                        .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
            });
        let piece = if trim_next {
            before.trim_start()
        } else {
            before
        };
        match name.and_then(|n| params.iter().find(|(k, _)| k == n).map(|(_, v)| (n, v))) {
            Some((_, value)) => {
                out.push_str(if trim_left { piece.trim_end() } else { piece });
                out.push_str(value);
                trim_next = trim_right;
            }
            None => {
                if let Some(n) = name
                    && !declared.iter().any(|d| d == n)
                    && !unknown.iter().any(|u| u == n)
                {
                    unknown.push(n.to_owned());
                }
                out.push_str(piece);
                out.push_str("{{");
                out.push_str(body);
                out.push_str("}}");
                trim_next = false;
            }
        }
        rest = &after_open[j + 2..];
    }
    out.push_str(if trim_next { rest.trim_start() } else { rest });
    out
}

fn text_of(n: &Node) -> String {
    match &n.kind {
        NodeKind::Scalar { text, .. } => text.clone(),
        _ => n.to_json().to_string(),
    }
}

fn relocated(n: &Node, pos: Pos) -> Node {
    let kind = match &n.kind {
        NodeKind::Scalar { .. } => n.kind.clone(),
        NodeKind::Seq(items) => NodeKind::Seq(items.iter().map(|i| relocated(i, pos)).collect()),
        NodeKind::Map(entries) => NodeKind::Map(
            entries
                .iter()
                .map(|e| MapEntry {
                    key: e.key.clone(),
                    key_pos: pos,
                    value: relocated(&e.value, pos),
                })
                .collect(),
        ),
    };
    Node { pos, kind }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use awf_domain::ErrorCode;
    use awf_domain::workflow::CommandSource;
    use awf_domain::workflow::StateKind;
    use awf_domain::workflow::WorkflowSource;

    fn expand(command: &str) -> Result<String, awf_domain::AwfError> {
        let mut t = BTreeMap::new();
        t.insert(
            "greet".to_owned(),
            format!(
                "name: greet\nparameters: [{{name: who, default: world}}, {{name: greeting}}]\nstates:\n  greet: {{type: step, command: '{command}'}}\n"
            ),
        );
        let wf = "name: w\nstates:\n  initial: a\n  a:\n    use_template: greet\n    parameters: {who: Ada}\n    on_success: done\n  done: {type: terminal}\n";
        let loaded = crate::parse_workflow_with(
            wf,
            Some(std::path::Path::new("w.yaml")),
            WorkflowSource::default(),
            &t,
        )?;
        match &loaded.workflow.states["a"].kind {
            StateKind::Command(c) => match &c.source {
                CommandSource::Inline(s) => Ok(s.clone()),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parameters_resolve_with_or_without_the_dot_and_with_spaces_or_trim_markers() {
        let cases = [
            ("echo {{parameters.who}}", "echo Ada"),
            ("echo {{.parameters.who}}", "echo Ada"),
            ("echo {{ .parameters.who }}!", "echo Ada!"),
            ("echo {{ parameters.who }}", "echo Ada"),
            ("echo [ {{- .parameters.who -}} ]", "echo [Ada]"),
            // Other actions are left to the template engine.
            (
                "echo {{.inputs.x}} {{.parameters.who}}",
                "echo {{.inputs.x}} Ada",
            ),
            // Declared without a value: left as written (as before).
            (
                "echo {{.parameters.greeting}}",
                "echo {{.parameters.greeting}}",
            ),
        ];
        for (command, want) in cases {
            assert_eq!(
                expand(command).map_err(|e| e.message().to_owned()),
                Ok(want.to_owned()),
                "{command}"
            );
        }
    }

    fn load(
        wf: &str,
    ) -> Result<awf_domain::ports::repository::LoadedWorkflow, awf_domain::AwfError> {
        let mut t = BTreeMap::new();
        t.insert(
            "greet".to_owned(),
            "name: greet\nparameters: [{name: who, default: world}]\nstates:\n  greet: {type: step, command: 'echo {{.parameters.who}}'}\n".to_owned(),
        );
        crate::parse_workflow_with(
            wf,
            Some(std::path::Path::new("w.yaml")),
            WorkflowSource::default(),
            &t,
        )
    }

    /// A step's parameter the template does not declare is a warning with a did-you-mean
    /// (new user: `bogus: 1` was taken silently).
    #[test]
    fn a_parameter_the_template_does_not_declare_is_warned_about() {
        let loaded = load("name: w\nstates:\n  initial: a\n  a:\n    use_template: greet\n    parameters: {wh: Ada, bogus: 1}\n    on_success: done\n  done: {type: terminal}\n").unwrap();
        let warned: Vec<(String, Option<String>)> = loaded
            .diagnostics
            .iter()
            .filter(|d| d.code == ErrorCode::WorkflowParseUnknownField)
            .map(|d| (d.message.clone(), d.hint.clone()))
            .collect();
        assert_eq!(warned.len(), 2, "{warned:?}");
        assert!(
            warned[0].0.contains("declares no parameter \"wh\""),
            "{warned:?}"
        );
        assert_eq!(warned[0].1.as_deref(), Some("did you mean 'who'?"));
        assert_eq!(warned[1].1.as_deref(), Some("its parameters: who"));
    }

    /// A misspelt template name gets the closest template's name.
    #[test]
    fn a_misspelt_template_name_gets_a_did_you_mean() {
        let e = load("name: w\nstates:\n  initial: a\n  a:\n    use_template: gret\n    on_success: done\n  done: {type: terminal}\n").unwrap_err();
        assert_eq!(e.code(), ErrorCode::WorkflowValidationMissingTemplate);
        assert!(
            e.hints().iter().any(|h| h == "did you mean 'greet'?"),
            "{:?}",
            e.hints()
        );
    }

    #[test]
    fn an_undeclared_parameter_is_an_error_with_a_did_you_mean() {
        let e = match expand("echo {{.parameters.wh}}") {
            Err(e) => e,
            Ok(s) => panic!("expanded to {s}"),
        };
        assert_eq!(e.code(), ErrorCode::WorkflowValidationInvalidReference);
        assert!(e.message().contains("parameter \"wh\""), "{}", e.message());
        assert_eq!(
            e.hints().first().map(String::as_str),
            Some("did you mean 'who'?")
        );
    }
}
