//! `awf-yaml`: the workflow repository adapter.
//!
//! Implements the domain ports [`WorkflowRepository`](awf_domain::ports::WorkflowRepository)
//! and [`ConfigSource`](awf_domain::ports::repository::ConfigSource) over AWF's YAML files:
//! lookup in `$AWF_WORKFLOWS_PATH`, `.awf/workflows` and the global config dir, decoding with
//! positions (a [`SourceMap`] of every key and sequence item), the lenient raw model
//! (unknown keys become warnings), `use_template` expansion and `.awf/config.yaml`.
//!
//! YAML is read with `yaml-rust2`'s marked event parser (YAML 1.2 core schema, like AWF's
//! yaml.v3). Depends on `awf-domain` only. Source: spec/workflow.md §1, §3.13, §7.3.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod config;
mod decode;
mod fields;
mod node;
mod repo;
mod templates;

use std::path::Path;

use awf_domain::AwfError;
use awf_domain::ports::repository::Diagnostic;
use awf_domain::ports::repository::LoadedWorkflow;
use awf_domain::ports::repository::Severity;
use awf_domain::ports::repository::SourceMap;
use awf_domain::workflow::WorkflowSource;

pub use decode::STATE_TYPES;
pub use decode::parse_size;
pub use repo::Listed;
pub use repo::RepoPaths;
pub use repo::YamlRepository;
pub use repo::project_root;
pub use templates::DirTemplates;
pub use templates::NoTemplates;
pub use templates::TemplateLookup;

use crate::fields::Diags;
use crate::node::Node;
use crate::node::NodeKind;

/// Parses workflow text without template directories (a `use_template` step is a
/// `WORKFLOW.VALIDATION.MISSING_TEMPLATE` error). Pure: no I/O.
///
/// `file` is used in positions and messages; `source` is stored in the workflow.
///
/// # Errors
/// `WORKFLOW.PARSE.YAML_SYNTAX` (syntax, wrong types, missing `name`/`states.initial`),
/// `WORKFLOW.PARSE.UNKNOWN_STEP_TYPE`, `WORKFLOW.PARSE.INVALID_VALUE`,
/// `WORKFLOW.VALIDATION.INVALID_STATE` (command XOR script_file, loop without items/while):
/// every error of the file is in the message, one per line, each with `line L, column C`;
/// details `file`, `line`, `column`, `path` are those of the first.
/// Source: spec/workflow.md §1.2.
pub fn parse_workflow(
    text: &str,
    file: Option<&Path>,
    source: WorkflowSource,
) -> Result<LoadedWorkflow, AwfError> {
    parse_workflow_with(text, file, source, &NoTemplates)
}

/// Like [`parse_workflow`], resolving `use_template` through `templates`.
///
/// # Errors
/// As [`parse_workflow`], plus `WORKFLOW.VALIDATION.MISSING_TEMPLATE` and
/// `WORKFLOW.VALIDATION.CYCLE_DETECTED` for templates. Source: spec/workflow.md §1.11.
pub fn parse_workflow_with(
    text: &str,
    file: Option<&Path>,
    source: WorkflowSource,
    templates: &dyn TemplateLookup,
) -> Result<LoadedWorkflow, AwfError> {
    parse(text, file, source, templates, false)
}

/// Like [`parse_workflow_with`], but decoding errors do not stop it: the workflow comes back
/// with every finding in `diagnostics`, errors included (states that could not be decoded
/// are placeholders). For `awf validate`, which goes on to its later checks.
///
/// # Errors
/// `WORKFLOW.PARSE.YAML_SYNTAX` when the text is not YAML or not a mapping.
pub fn parse_workflow_lenient(
    text: &str,
    file: Option<&Path>,
    source: WorkflowSource,
    templates: &dyn TemplateLookup,
) -> Result<LoadedWorkflow, AwfError> {
    parse(text, file, source, templates, true)
}

fn parse(
    text: &str,
    file: Option<&Path>,
    source: WorkflowSource,
    templates: &dyn TemplateLookup,
    lenient: bool,
) -> Result<LoadedWorkflow, AwfError> {
    let file_buf = file.map(Path::to_path_buf);
    let mut diags = Diags::new(file_buf.clone());
    let root = match node::parse_document_collecting(text) {
        Ok((n, duplicates)) => {
            // Duplicate keys are errors, but decoding goes on (the first value is kept).
            for e in duplicates {
                let d = diags.syntax("", Some(e.pos), e.message);
                d.hint = e.hint;
            }
            n
        }
        Err(e) => {
            let d = diags.syntax("", Some(e.pos), e.message);
            d.hint = e.hint;
            return Err(errors_to_error(&diags.list).unwrap_or_else(|| {
                AwfError::new(
                    awf_domain::ErrorCode::WorkflowParseYamlSyntax,
                    "invalid YAML",
                )
            }));
        }
    };
    let mut source_map = SourceMap::new(file_buf);
    let lines: Vec<&str> = text.lines().collect();
    record_positions(&root, &mut String::new(), &lines, &mut source_map);
    let wf = decode::decode_workflow(&root, source, &mut diags, templates);
    for d in &mut diags.list {
        d.locate(&source_map);
    }
    if !lenient && let Some(err) = errors_to_error(&diags.list) {
        return Err(err);
    }
    if wf.is_none()
        && let Some(err) = errors_to_error(&diags.list)
    {
        return Err(err);
    }
    match wf {
        Some(workflow) => Ok(LoadedWorkflow {
            workflow,
            source_map,
            diagnostics: diags.list,
            unknown_types: diags.unknown_types,
        }),
        None => Err(AwfError::new(
            awf_domain::ErrorCode::WorkflowParseYamlSyntax,
            "the workflow file could not be decoded",
        )),
    }
}

/// Decodes a file's bytes as UTF-8.
///
/// # Errors
/// `WORKFLOW.PARSE.YAML_SYNTAX` naming the 1-based line and column (in characters) and the
/// 0-based byte offset of the first invalid byte, with details `file`, `line`, `column`.
pub(crate) fn decode_utf8(bytes: Vec<u8>, file: &Path) -> Result<String, AwfError> {
    let err = match String::from_utf8(bytes) {
        Ok(s) => return Ok(s),
        Err(e) => e,
    };
    let bytes = err.as_bytes();
    let offset = err.utf8_error().valid_up_to();
    let valid = std::str::from_utf8(bytes.get(..offset).unwrap_or_default()).unwrap_or_default();
    let line_start = valid.rfind('\n').map_or(0, |i| i.saturating_add(1));
    let line = valid
        .bytes()
        .filter(|b| *b == b'\n')
        .count()
        .saturating_add(1);
    let column = valid
        .get(line_start..)
        .unwrap_or_default()
        .chars()
        .count()
        .saturating_add(1);
    let byte = bytes.get(offset).copied().unwrap_or(0);
    let mut diags = Diags::new(Some(file.to_path_buf()));
    diags
        .syntax(
            "",
            Some(node::Pos {
                line: u32::try_from(line).unwrap_or(u32::MAX),
                column: u32::try_from(column).unwrap_or(u32::MAX),
            }),
            format!("the file is not valid UTF-8: byte 0x{byte:02x} at offset {offset}"),
        )
        .hint = Some("save the file as UTF-8".to_owned());
    Err(errors_to_error(&diags.list).unwrap_or_else(|| {
        AwfError::new(
            awf_domain::ErrorCode::WorkflowParseYamlSyntax,
            "the file is not valid UTF-8",
        )
    }))
}

/// Records the 1-based position of every mapping key and sequence item by dotted path, and
/// where the text of each literal block scalar (`key: |`) starts (`lines`: the file's).
fn record_positions(node: &Node, path: &mut String, lines: &[&str], map: &mut SourceMap) {
    // One buffer for every path (`states.a.body.1`): a key's path is pushed onto its
    // parent's and cut back after (a `format!` per key was most of this walk, issue 9).
    let base = path.len();
    let enter = |path: &mut String, key: &dyn std::fmt::Display| {
        use std::fmt::Write as _;
        path.truncate(base);
        if base > 0 {
            path.push('.');
        }
        let _ = write!(path, "{key}");
    };
    match &node.kind {
        NodeKind::Scalar { .. } => {}
        NodeKind::Seq(items) => {
            for (i, it) in items.iter().enumerate() {
                enter(path, &i);
                map.insert(path.clone(), it.pos.line, it.pos.column);
                record_block(it, path, lines, map);
                record_positions(it, path, lines, map);
            }
        }
        NodeKind::Map(entries) => {
            for e in entries {
                if e.key_pos.line == 0 {
                    continue;
                }
                enter(path, &e.key);
                map.insert(path.clone(), e.key_pos.line, e.key_pos.column);
                record_block(&e.value, path, lines, map);
                record_positions(&e.value, path, lines, map);
            }
        }
    }
    path.truncate(base);
}

/// Records `node` at `path` as a literal block scalar ([`SourceMap::insert_block`]) when it
/// is one holding a template (only findings about templates point inside a value). The
/// parser places a block scalar at its first line that is not blank; the lines before it
/// are the text's leading line breaks, and the line before those holds the indicator (`|`,
/// `|-`, `|+`; a folded `>` or an explicit indentation digit maps lines otherwise).
fn record_block(node: &Node, path: &str, lines: &[&str], map: &mut SourceMap) {
    let NodeKind::Scalar { text, plain, .. } = &node.kind else {
        return;
    };
    if !text.contains("{{") {
        return;
    }
    if let Some(column) = one_line_start(node, text, lines) {
        map.insert_block(path, node.pos.line, column);
        return;
    }
    if *plain {
        return;
    }
    let leading = text.chars().take_while(|c| *c == '\n').count();
    let Some(first) = (node.pos.line as usize).checked_sub(leading) else {
        return;
    };
    let Some(indicator) = first.checked_sub(2).and_then(|i| lines.get(i)) else {
        return;
    };
    let head = indicator
        .split_once(" #")
        .map_or(*indicator, |(h, _)| h)
        .trim_end();
    if !(head.ends_with('|') || head.ends_with("|-") || head.ends_with("|+")) {
        return;
    }
    map.insert_block(
        path,
        u32::try_from(first).unwrap_or(u32::MAX),
        node.pos.column,
    );
}

/// The 1-based column where the text of the one-line scalar `node` starts on its line,
/// when the line holds that text as written: a plain scalar (`command: echo {{.x}}`), or one
/// in quotes without escapes in it (`command: "echo {{.x}}"`, the column after the quote).
/// `None` for a text over several lines or one the file spells otherwise (escapes, folding),
/// whose characters do not map one to one.
fn one_line_start(node: &Node, text: &str, lines: &[&str]) -> Option<u32> {
    if text.contains('\n') {
        return None;
    }
    let line = lines.get((node.pos.line as usize).checked_sub(1)?)?;
    let start = (node.pos.column as usize).checked_sub(1)?;
    let rest: String = line.chars().skip(start).collect();
    if rest.starts_with(text) {
        return Some(node.pos.column);
    }
    let quote = rest.chars().next().filter(|q| *q == '"' || *q == '\'')?;
    let inner = rest.get(1..)?;
    let after = inner.strip_prefix(text)?;
    // The text as written up to its closing quote (no escape changed a character).
    (after.starts_with(quote) && !text.contains(quote) && !(quote == '"' && text.contains('\\')))
        .then(|| node.pos.column.saturating_add(1))
}

/// One diagnostic as a line: `<file>: line L, column C: <path>: <message>`.
pub fn format_diagnostic(d: &Diagnostic) -> String {
    let mut s = String::new();
    if let Some(f) = &d.file {
        s.push_str(&f.display().to_string());
        s.push_str(": ");
    }
    if let Some(l) = d.line {
        s.push_str(&format!("line {l}"));
        if let Some(c) = d.column {
            s.push_str(&format!(", column {c}"));
        }
        s.push_str(": ");
    }
    if !d.path.is_empty() && !d.message.starts_with(&format!("{}:", d.path)) {
        s.push_str(&d.path);
        s.push_str(": ");
    }
    s.push_str(&d.message);
    s
}

/// Turns the `Error`-severity diagnostics into one [`AwfError`] (`None` when there are none).
///
/// Code, details (`file`, `line`, `column`, `path`), message and hint are the first error's
/// (formatted by [`format_diagnostic`], so it names `line L, column C` whenever the position
/// is known); with more errors, the message ends `(and N more error(s); run `awf validate`
/// to see all)`. Only the first error's hint is given: a hint under an error it does not
/// belong to misleads (`awf validate` shows each error with its own).
pub fn errors_to_error(diags: &[Diagnostic]) -> Option<AwfError> {
    let mut errors = diags.iter().filter(|d| d.severity == Severity::Error);
    let first = errors.next()?;
    let others = errors.count();
    let mut message = format_diagnostic(first);
    if others > 0 {
        message.push_str(&format!(
            " (and {others} more error(s); run `awf validate` to see all)"
        ));
    }
    Some(first.to_error().map_message(|_| message))
}
