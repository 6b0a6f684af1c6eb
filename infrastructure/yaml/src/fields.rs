//! Diagnostics collection and typed access to mapping fields (the lenient raw model).
//!
//! Every key a decoder reads is marked as used; whatever is left when the mapping is finished
//! is reported as `WORKFLOW.PARSE.UNKNOWN_FIELD` (a warning) or, for keys AWF documents but
//! that have no effect, as a note. Source: spec/workflow.md §1.2, §1.15; decisions.md.

use std::collections::BTreeMap;
use std::path::PathBuf;

use awf_domain::ErrorCode;
use awf_domain::ports::repository::Diagnostic;
use awf_domain::ports::repository::Severity;
use serde_json::Value;

use crate::node::Node;
use crate::node::NodeKind;
use crate::node::Pos;
use crate::node::Scalar;

/// Collects diagnostics while decoding one file.
#[derive(Debug, Default)]
pub struct Diags {
    /// File the diagnostics are about.
    pub file: Option<PathBuf>,
    /// Everything found so far, in order.
    pub list: Vec<Diagnostic>,
    /// States whose `type:` names no step type: name → the type as written (see
    /// `LoadedWorkflow::unknown_types`).
    pub unknown_types: BTreeMap<String, String>,
}

impl Diags {
    /// New collector for `file`.
    pub fn new(file: Option<PathBuf>) -> Self {
        Self {
            file,
            list: Vec::new(),
            unknown_types: BTreeMap::new(),
        }
    }

    /// Records a diagnostic at `pos` (when known).
    pub fn push(&mut self, mut d: Diagnostic, pos: Option<Pos>) -> &mut Diagnostic {
        if d.file.is_none() {
            d.file.clone_from(&self.file);
        }
        if let Some(p) = pos
            && p.line > 0
        {
            d.line = Some(p.line);
            d.column = Some(p.column);
        }
        self.list.push(d);
        let last = self.list.len() - 1;
        &mut self.list[last]
    }

    /// Records an error.
    pub fn error(
        &mut self,
        code: ErrorCode,
        path: &str,
        pos: Option<Pos>,
        msg: impl Into<String>,
    ) -> &mut Diagnostic {
        self.push(Diagnostic::error(code, path, msg), pos)
    }

    /// Records a type/shape error (`WORKFLOW.PARSE.YAML_SYNTAX`).
    pub fn syntax(
        &mut self,
        path: &str,
        pos: Option<Pos>,
        msg: impl Into<String>,
    ) -> &mut Diagnostic {
        self.error(ErrorCode::WorkflowParseYamlSyntax, path, pos, msg)
    }

    /// Records a required key that is missing (`WORKFLOW.PARSE.MISSING_FIELD`).
    pub fn missing(
        &mut self,
        path: &str,
        pos: Option<Pos>,
        msg: impl Into<String>,
    ) -> &mut Diagnostic {
        self.error(ErrorCode::WorkflowParseMissingField, path, pos, msg)
    }

    /// Records an invalid value (`WORKFLOW.PARSE.INVALID_VALUE`).
    pub fn invalid(
        &mut self,
        path: &str,
        pos: Option<Pos>,
        msg: impl Into<String>,
    ) -> &mut Diagnostic {
        self.error(ErrorCode::WorkflowParseInvalidValue, path, pos, msg)
    }

    /// Records a note (a documented key without effect).
    pub fn note(&mut self, path: &str, pos: Option<Pos>, msg: impl Into<String>) {
        self.push(
            Diagnostic::new(
                Severity::Note,
                ErrorCode::WorkflowParseUnknownField,
                path,
                msg,
            ),
            pos,
        );
    }

    /// A wrong YAML type at `path`.
    pub fn wrong_type(&mut self, path: &str, node: &Node, expected: &str) {
        self.syntax(
            path,
            Some(node.pos),
            format!("expected {expected}, found {}", node.type_name()),
        );
    }

    /// A string field: any scalar is accepted as its text; null = absent.
    pub fn string(&mut self, node: &Node, path: &str) -> Option<String> {
        self.string_at(node, &|| path.to_owned())
    }

    /// An integer field (a quoted integer is accepted too).
    pub fn int(&mut self, node: &Node, path: &str) -> Option<i64> {
        self.int_at(node, &|| path.to_owned())
    }

    /// A number field.
    pub fn float(&mut self, node: &Node, path: &str) -> Option<f64> {
        self.float_at(node, &|| path.to_owned())
    }

    /// A list of strings (every scalar item accepted as text).
    pub fn string_list(&mut self, node: &Node, path: &str) -> Vec<String> {
        self.string_list_at(node, &|| path.to_owned())
    }

    // The readers below make the value's path only when they report it: most fields are
    // well typed, and a path made for each one read was a tenth of `awf list` (issue 9).

    fn string_at(&mut self, node: &Node, path: &dyn Fn() -> String) -> Option<String> {
        match &node.kind {
            NodeKind::Scalar { text, .. } => {
                if node.is_null() {
                    None
                } else {
                    Some(text.clone())
                }
            }
            _ => {
                self.wrong_type(&path(), node, "a string");
                None
            }
        }
    }

    /// A boolean field: `true`/`false` (YAML 1.2), and the YAML 1.1 words yaml.v3 accepts
    /// in a typed `bool` field (`y`, `yes`, `on` / `n`, `no`, `off`, in its casings), as
    /// AWF (Go) reads them; like yaml.v3, it takes those words quoted too, but not a quoted
    /// `"true"`.
    fn boolean_at(&mut self, node: &Node, path: &dyn Fn() -> String) -> Option<bool> {
        match node.scalar() {
            Some(Scalar::Bool(b)) => Some(b),
            Some(Scalar::Null) => None,
            Some(Scalar::Str(s)) if yaml11_bool(&s).is_some() => yaml11_bool(&s),
            _ => {
                self.wrong_type(&path(), node, "a boolean (true or false)");
                None
            }
        }
    }

    fn int_at(&mut self, node: &Node, path: &dyn Fn() -> String) -> Option<i64> {
        match node.scalar() {
            Some(Scalar::Int(i)) => Some(i),
            Some(Scalar::Str(s)) if s.trim().parse::<i64>().is_ok() => s.trim().parse().ok(),
            Some(Scalar::Null) => None,
            _ => {
                self.wrong_type(&path(), node, "an integer");
                None
            }
        }
    }

    fn float_at(&mut self, node: &Node, path: &dyn Fn() -> String) -> Option<f64> {
        match node.scalar() {
            #[allow(clippy::cast_precision_loss)]
            Some(Scalar::Int(i)) => Some(i as f64),
            Some(Scalar::Float(f)) => Some(f),
            Some(Scalar::Str(s)) if s.trim().parse::<f64>().is_ok() => s.trim().parse().ok(),
            Some(Scalar::Null) => None,
            _ => {
                self.wrong_type(&path(), node, "a number");
                None
            }
        }
    }

    fn string_list_at(&mut self, node: &Node, path: &dyn Fn() -> String) -> Vec<String> {
        match &node.kind {
            NodeKind::Seq(items) => items
                .iter()
                .enumerate()
                .filter_map(|(i, n)| self.string_at(n, &|| format!("{}.{i}", path())))
                .collect(),
            _ if node.is_null() => Vec::new(),
            _ => {
                self.wrong_type(&path(), node, "a list");
                Vec::new()
            }
        }
    }

    /// A mapping converted to JSON values (file order kept).
    pub fn json_map(&mut self, node: &Node, path: &str) -> indexmap::IndexMap<String, Value> {
        match node.entries() {
            Some(entries) => entries
                .iter()
                .map(|e| (e.key.clone(), e.value.to_json()))
                .collect(),
            None if node.is_null() => indexmap::IndexMap::new(),
            None => {
                self.wrong_type(path, node, "a mapping");
                indexmap::IndexMap::new()
            }
        }
    }
}

/// Typed access to the keys of one mapping, tracking which were read.
#[derive(Debug)]
pub struct Fields<'n> {
    node: &'n Node,
    /// Dotted path of the mapping.
    pub path: String,
    used: Vec<bool>,
    asked: Vec<&'static str>,
}

impl<'n> Fields<'n> {
    /// Wraps a mapping node; reports a type error and returns `None` otherwise.
    pub fn of(node: &'n Node, path: &str, diags: &mut Diags, what: &str) -> Option<Self> {
        match node.entries() {
            Some(e) => Some(Self {
                node,
                path: path.to_owned(),
                used: vec![false; e.len()],
                asked: Vec::new(),
            }),
            None => {
                diags.wrong_type(path, node, what);
                None
            }
        }
    }

    /// Position of the mapping itself.
    pub fn pos(&self) -> Pos {
        self.node.pos
    }

    /// Path of a child key.
    pub fn child(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// Reads `key`, marking it used. Null values count as absent.
    pub fn take(&mut self, key: &'static str) -> Option<&'n Node> {
        self.asked.push(key);
        let entries = self.node.entries()?;
        let i = entries.iter().position(|e| e.key == key)?;
        self.used[i] = true;
        let v = &entries[i].value;
        if v.is_null() { None } else { Some(v) }
    }

    /// A key not read so far that looks like a misspelling of one of `wanted`:
    /// `(written key, intended key)`.
    pub fn misspelled(&self, wanted: &[&'static str]) -> Option<(String, &'static str)> {
        let entries = self.node.entries()?;
        entries
            .iter()
            .zip(&self.used)
            .filter(|(_, used)| !**used)
            .find_map(|(e, _)| closest(&e.key, wanted.iter().copied()).map(|c| (e.key.clone(), c)))
    }

    /// Marks every key starting with `prefix` as read, without reading it: blocks kept for
    /// YAML anchors (`x-defaults: &defaults`), which `finish` must not report.
    pub fn skip_prefixed(&mut self, prefix: &str) {
        let Some(entries) = self.node.entries() else {
            return;
        };
        for (e, used) in entries.iter().zip(self.used.iter_mut()) {
            if e.key.starts_with(prefix) {
                *used = true;
            }
        }
    }

    /// Whether `key` is present (without marking it).
    pub fn has(&self, key: &str) -> bool {
        self.node.get(key).is_some()
    }

    /// Position of `key`, when present.
    pub fn key_pos(&self, key: &str) -> Option<Pos> {
        self.node
            .entries()?
            .iter()
            .find(|e| e.key == key)
            .map(|e| e.key_pos)
    }

    /// Reads a string field.
    pub fn string(&mut self, key: &'static str, d: &mut Diags) -> Option<String> {
        let n = self.take(key)?;
        d.string_at(n, &|| self.child(key))
    }

    /// Reads a boolean field.
    pub fn boolean(&mut self, key: &'static str, d: &mut Diags) -> Option<bool> {
        let n = self.take(key)?;
        d.boolean_at(n, &|| self.child(key))
    }

    /// Reads an integer field.
    pub fn int(&mut self, key: &'static str, d: &mut Diags) -> Option<i64> {
        let n = self.take(key)?;
        d.int_at(n, &|| self.child(key))
    }

    /// Reads a number field.
    pub fn float(&mut self, key: &'static str, d: &mut Diags) -> Option<f64> {
        let n = self.take(key)?;
        d.float_at(n, &|| self.child(key))
    }

    /// Reads a list of strings.
    pub fn string_list(&mut self, key: &'static str, d: &mut Diags) -> Vec<String> {
        match self.take(key) {
            Some(n) => d.string_list_at(n, &|| self.child(key)),
            None => Vec::new(),
        }
    }

    /// Reports keys that were never read: `notes` lists documented-but-ineffective keys
    /// (`(key, note text)`); any other key is an unknown-field warning with a did-you-mean hint.
    /// `what` is written only into a warning (`format_args!` makes nothing until then).
    pub fn finish(self, d: &mut Diags, notes: &[(&str, &str)], what: impl std::fmt::Display) {
        let Some(entries) = self.node.entries() else {
            return;
        };
        for (i, e) in entries.iter().enumerate() {
            if self.used[i] || e.key_pos.line == 0 {
                continue;
            }
            let path = self.child(&e.key);
            if let Some((_, text)) = notes.iter().find(|(k, _)| *k == e.key) {
                d.note(&path, Some(e.key_pos), (*text).to_owned());
                continue;
            }
            // A typo of a key, else a short form of one (`delay` for `initial_delay`).
            let hint = closest(&e.key, self.asked.iter().copied())
                .map(|c| format!("did you mean '{c}'?"))
                .or_else(|| misplaced_hook(&e.key, &self.asked))
                .or_else(|| {
                    awf_domain::validate::did_you_mean(&awf_domain::validate::keys_with_part(
                        &e.key,
                        self.asked.iter().copied(),
                    ))
                });
            let diag = d.push(
                Diagnostic::warning(
                    awf_domain::ErrorCode::WorkflowParseUnknownField,
                    &path,
                    format!("unknown field \"{}\" in {what}", e.key),
                ),
                Some(e.key_pos),
            );
            diag.hint = hint;
        }
    }
}

/// The YAML 1.1 boolean words yaml.v3 decodes into a typed `bool` (decode.go: "some
/// compatibility with the 1.1 spec"), `None` for any other text.
fn yaml11_bool(text: &str) -> Option<bool> {
    match text {
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => Some(true),
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => Some(false),
        _ => None,
    }
}

/// The closest candidate to `word`: [`awf_domain::validate::closest`].
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    awf_domain::validate::closest(word, candidates)
}

/// The hint for a hook written beside `hooks:` instead of inside it (a workflow's
/// `workflow_cancel:` at the top level, a state's `pre:`), where the mapping has a `hooks`
/// key: hooks are read only from `hooks:`.
fn misplaced_hook(key: &str, asked: &[&str]) -> Option<String> {
    const WORKFLOW: &[&str] = &[
        "workflow_start",
        "workflow_end",
        "workflow_error",
        "workflow_cancel",
    ];
    const STEP: &[&str] = &["pre", "post"];
    (asked.contains(&"hooks") && (WORKFLOW.contains(&key) || STEP.contains(&key))).then(|| {
        format!("hooks go under `hooks:`: `hooks: {{{key}: [...]}}`; here it is never run")
    })
}
