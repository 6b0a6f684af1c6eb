//! `use_template` expansion, done on the node tree before a state is decoded (so a templated
//! step needs neither `type:` nor `command:`).
//!
//! A template file `<dir>/<name>.yaml` holds `name`, `parameters: [{name, required, default}]`
//! and `states:`; the primary state is the one named like the template (else the first).
//! The literal text `{{parameters.NAME}}` is replaced in the primary state's `command` and
//! `dir`. The step takes the template's `type` and `command`, and `dir`, `timeout`, `retry`,
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
}

/// In-memory templates (name → YAML text), for tests and embedders.
impl TemplateLookup for std::collections::BTreeMap<String, String> {
    fn find(&self, name: &str) -> Result<Option<(PathBuf, String)>, String> {
        Ok(self
            .get(name)
            .map(|t| (PathBuf::from(format!("{name}.yaml")), t.clone())))
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
            if let Some(last) = d.list.last_mut() {
                last.hint = Some(format!("create .awf/templates/{name}.yaml"));
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
    if let Some(items) = troot.get("parameters").and_then(Node::items) {
        for p in items {
            let Some(pname) = p.get("name").and_then(Node::text).map(str::to_owned) else {
                continue;
            };
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
    let replace = |s: &str| {
        let mut out = s.to_owned();
        for (k, v) in &params {
            out = out.replace(&format!("{{{{parameters.{k}}}}}"), v);
        }
        out
    };
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
    Some(Node {
        pos: step.pos,
        kind: NodeKind::Map(merged),
    })
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
