//! WorkflowRepository: finds and loads workflow files; ConfigSource: project configuration.

use std::collections::BTreeMap;
use std::path::Path;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::Map;
use serde_json::Value;

use crate::error::AwfError;
use crate::error::ErrorCode;
use crate::workflow::Workflow;

/// How serious a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Makes the workflow invalid (exit 2).
    Error,
    /// Reported by `awf validate`; an error under `--strict` when the code is
    /// `WORKFLOW.PARSE.UNKNOWN_FIELD`.
    Warning,
    /// Informational (`capture:` has no effect, …).
    Note,
}

/// One finding about a workflow file.
///
/// `path` is the dotted location inside the file (`states.start.on_success`); `line` and
/// `column` (1-based) are filled from the file's [`SourceMap`] when known.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnostic {
    /// Error, warning or note.
    pub severity: Severity,
    /// Taxonomy code.
    pub code: ErrorCode,
    /// Dotted path in the file.
    pub path: String,
    /// What is wrong.
    pub message: String,
    /// How to fix it (`did you mean 'process'?`).
    pub hint: Option<String>,
    /// Workflow file.
    pub file: Option<PathBuf>,
    /// 1-based line.
    pub line: Option<u32>,
    /// 1-based column.
    pub column: Option<u32>,
    /// Where inside the value at `path` the finding is, as (0-based line of the value's
    /// text, 0-based character in that line), when the check knows it (a template inside a
    /// `command:`): [`Diagnostic::locate`] then points inside a block scalar (`command: |`)
    /// rather than at its key. Not serialized.
    #[serde(skip)]
    pub in_value: Option<(u32, u32)>,
    /// A warning about something that makes the run fail when it gets there (an unknown
    /// `provider:`, a required sub-workflow input the call does not pass): kept a warning,
    /// as AWF (Go) validates such a workflow and a path the run never takes does not fail it,
    /// but `awf validate`'s summary says the run will fail. Serialized as `"run_fails": true`
    /// only when set.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub run_fails: bool,
}

impl Diagnostic {
    /// New diagnostic without a position.
    pub fn new(
        severity: Severity,
        code: ErrorCode,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            severity,
            code,
            path: path.into(),
            message: message.into(),
            hint: None,
            file: None,
            line: None,
            column: None,
            in_value: None,
            run_fails: false,
        }
    }

    /// Marks the finding as one that makes the run fail where it applies
    /// ([`Diagnostic::run_fails`]).
    #[must_use]
    pub fn failing_the_run(mut self) -> Self {
        self.run_fails = true;
        self
    }

    /// Records where inside the value at its path the finding is: at byte `offset` of the
    /// value's `text` (see [`Diagnostic::in_value`]).
    #[must_use]
    pub fn at_offset(mut self, text: &str, offset: usize) -> Self {
        self.point_at(text, offset);
        self
    }

    /// [`Diagnostic::at_offset`] in place.
    pub fn point_at(&mut self, text: &str, offset: usize) {
        let before = text.get(..offset).unwrap_or(text);
        let line = before.matches('\n').count();
        let column = before.rsplit('\n').next().unwrap_or("").chars().count();
        self.in_value = Some((
            u32::try_from(line).unwrap_or(u32::MAX),
            u32::try_from(column).unwrap_or(u32::MAX),
        ));
    }

    /// Shorthand for an error.
    pub fn error(code: ErrorCode, path: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(Severity::Error, code, path, message)
    }

    /// Shorthand for a warning.
    pub fn warning(code: ErrorCode, path: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(Severity::Warning, code, path, message)
    }

    /// Adds a hint.
    #[must_use]
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Fills file, line and column from a source map.
    pub fn locate(&mut self, map: &SourceMap) {
        if self.file.is_none() {
            self.file.clone_from(&map.file);
        }
        if self.line.is_none()
            && let Some((l, c)) = self
                .in_value
                .and_then(|(line, column)| map.locate_in_block(&self.path, line, column))
                .or_else(|| map.locate(&self.path))
        {
            self.line = Some(l);
            self.column = Some(c);
        }
    }

    /// The finding as one line without its file, as a list of workflows shows a broken
    /// one's first error: `[CODE] line L, column C: <path>: <message>` (the position when
    /// it is known, the path when it is not empty).
    pub fn listed(&self) -> String {
        format!("[{}] {}", self.code, self.located_message(true))
    }

    /// `line L, column C: <path>: <message>`, each part when it is known (the position only
    /// when `position`).
    fn located_message(&self, position: bool) -> String {
        let mut msg = String::new();
        if position && let Some(l) = self.line {
            msg.push_str(&format!("line {l}"));
            if let Some(c) = self.column {
                msg.push_str(&format!(", column {c}"));
            }
            msg.push_str(": ");
        }
        if !self.path.is_empty() {
            msg.push_str(&self.path);
            msg.push_str(": ");
        }
        msg.push_str(&self.message);
        msg
    }

    /// Converts to an error carrying `file`, `line`, `column`, `path` details and the hint.
    pub fn to_error(&self) -> AwfError {
        // The position only with the file it is in.
        let msg = match &self.file {
            Some(f) => format!("{}: {}", f.display(), self.located_message(true)),
            None => self.located_message(false),
        };
        let mut e = AwfError::new(self.code, msg);
        if !self.path.is_empty() {
            e = e.with_detail("path", self.path.clone());
        }
        if let Some(f) = &self.file {
            e = e.with_detail("file", f.display().to_string());
        }
        if let Some(l) = self.line {
            e = e.with_detail("line", l);
        }
        if let Some(c) = self.column {
            e = e.with_detail("column", c);
        }
        if let Some(h) = &self.hint {
            e = e.with_hint(h.clone());
        }
        e
    }
}

/// The tail a refusal or a broken workflow's listing gives when `awf validate` found `others`
/// errors besides the one shown: ` (and N more error(s); run `awf validate` to see all)`
/// (empty when there are none).
pub fn more_errors(others: usize) -> String {
    if others == 0 {
        String::new()
    } else {
        format!(" (and {others} more error(s); run `awf validate` to see all)")
    }
}

/// The first error among `diagnostics` (`awf validate`'s, in its order) as an error
/// ([`Diagnostic::to_error`]: positioned, with its own hint only), its message ending with
/// the number of the other errors ([`more_errors`]); `None` when there is no error. What
/// `awf run` refuses a workflow with.
pub fn first_error(diagnostics: &[Diagnostic]) -> Option<AwfError> {
    let mut errors = diagnostics.iter().filter(|d| d.severity == Severity::Error);
    let first = errors.next()?;
    let tail = more_errors(errors.count());
    Some(first.to_error().map_message(|m| format!("{m}{tail}")))
}

/// How every list of workflows shows a broken one (`awf list`, `awf serve`'s workflow list,
/// the workflows `awf mcp-serve --workflows` and `awf acp-serve` leave out): the first error
/// among `diagnostics` (`awf validate`'s, in its order) as [`Diagnostic::listed`] gives it
/// (`[CODE] line L, column C: <path>: <message>`), then the number of the other errors
/// ([`more_errors`]); `None` when there is no error. Given `awf validate`'s findings, every
/// front-end names the same first error and count as `awf validate` and `awf run` do.
pub fn broken_summary(diagnostics: &[Diagnostic]) -> Option<String> {
    let mut errors = diagnostics.iter().filter(|d| d.severity == Severity::Error);
    let first = errors.next()?;
    Some(format!("{}{}", first.listed(), more_errors(errors.count())))
}

/// Maps dotted paths inside a workflow file to 1-based (line, column) positions.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SourceMap {
    /// The file.
    pub file: Option<PathBuf>,
    positions: BTreeMap<String, (u32, u32)>,
    /// Literal block scalars (`key: |`) by path: the line of their text's first line and
    /// the column it is indented to (1-based).
    blocks: BTreeMap<String, (u32, u32)>,
}

impl SourceMap {
    /// Empty map for `file`.
    pub fn new(file: Option<PathBuf>) -> Self {
        Self {
            file,
            positions: BTreeMap::new(),
            blocks: BTreeMap::new(),
        }
    }

    /// Records that the value at `path` is a literal block scalar (`|`, `|-`, `|+`) whose
    /// text's first line is line `first_line` of the file, each line of it starting at
    /// column `column` (1-based): findings inside it can point at their own line.
    pub fn insert_block(&mut self, path: impl Into<String>, first_line: u32, column: u32) {
        self.blocks.insert(path.into(), (first_line, column));
    }

    /// The position of character `column` (0-based) of line `line` (0-based) of the text of
    /// the literal block scalar at `path`; `None` when `path` is no such block.
    pub fn locate_in_block(&self, path: &str, line: u32, column: u32) -> Option<(u32, u32)> {
        let (first, indent) = self.blocks.get(path)?;
        Some((first.saturating_add(line), indent.saturating_add(column)))
    }

    /// Records the position of `path` (a key or a sequence item, e.g. `states.a.body.1`).
    pub fn insert(&mut self, path: impl Into<String>, line: u32, column: u32) {
        self.positions.insert(path.into(), (line, column));
    }

    /// Whether `path` itself (not only a prefix of it) is recorded: the key is in the file.
    pub fn contains(&self, path: &str) -> bool {
        self.positions.contains_key(path)
    }

    /// Position of `path`, or of its longest recorded prefix.
    pub fn locate(&self, path: &str) -> Option<(u32, u32)> {
        let mut p = path;
        loop {
            if let Some(pos) = self.positions.get(p) {
                return Some(*pos);
            }
            match p.rfind('.') {
                Some(i) => p = &p[..i],
                None => return None,
            }
        }
    }
}

/// A loaded workflow with what the loader noticed.
#[derive(Debug, Clone)]
pub struct LoadedWorkflow {
    /// The workflow (templates expanded; not yet semantically validated).
    pub workflow: Workflow,
    /// Positions of every key and sequence item in the file.
    pub source_map: SourceMap,
    /// Load-time warnings and notes (unknown keys, ignored keys), positioned; from
    /// `load_for_validation` also the load-time errors.
    pub diagnostics: Vec<Diagnostic>,
    /// From `load_for_validation` of a file with a state whose `type:` names no step type
    /// (`type: stepp`, a `WORKFLOW.PARSE.UNKNOWN_STEP_TYPE` error in `diagnostics`): state
    /// name → the type as written. The workflow holds a stand-in for each such state (a
    /// success terminal without edges, so that references to it raise no second error);
    /// front-ends that show the workflow as written show these states with this type, never
    /// as a terminal. Empty for a workflow that loads.
    pub unknown_types: BTreeMap<String, String>,
}

/// One entry of `awf list`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkflowEntry {
    /// Identifier (file name without `.yaml` / `.yml`).
    pub name: String,
    /// `env`, `local` or `global`.
    pub source: String,
    /// File path.
    pub path: PathBuf,
    /// `version:` when the file parses.
    pub version: Option<String>,
    /// `description:` when the file parses.
    pub description: Option<String>,
    /// Why the file cannot be loaded (`[CODE] message`), `None` when it loads; `awf list`
    /// marks such entries as broken. Omitted from JSON when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Finds and loads workflow files. Source: spec/workflow.md §1.1, §1.2, §3.13.
pub trait WorkflowRepository: Send + Sync {
    /// Loads a workflow by identifier: an existing file path, else `<name>.yaml` in
    /// `$AWF_WORKFLOWS_PATH`, `.awf/workflows`, then the global config dir (`.yml` when no `.yaml`). When `base_dir`
    /// is given (sub-workflow calls) it is searched first.
    ///
    /// # Errors
    /// `USER.FACADE.WORKFLOW_NOT_FOUND` / `USER.INPUT.MISSING_FILE` (with a "did you mean"
    /// hint), `WORKFLOW.PARSE.*` with `file`, `line`, `column` details, `SYSTEM.IO.READ_FAILED`.
    fn load(&self, identifier: &str, base_dir: Option<&Path>) -> Result<LoadedWorkflow, AwfError>;

    /// Like [`WorkflowRepository::load`], but decoding goes on past errors for `awf validate`:
    /// the workflow is returned with every finding in `diagnostics`, errors included (a state
    /// that cannot be decoded keeps its routes under a placeholder kind, so later checks still
    /// run). The default is `load`.
    ///
    /// # Errors
    /// Lookup errors as `load`; `WORKFLOW.PARSE.*` only when nothing can be decoded (YAML
    /// syntax, a document that is not a mapping, no `name:` or `states:`).
    fn load_for_validation(
        &self,
        identifier: &str,
        base_dir: Option<&Path>,
    ) -> Result<LoadedWorkflow, AwfError> {
        self.load(identifier, base_dir)
    }

    /// Lists workflows of every source, first source wins per name.
    ///
    /// # Errors
    /// `SYSTEM.IO.READ_FAILED` when a directory cannot be read.
    fn list(&self) -> Result<Vec<WorkflowEntry>, AwfError>;

    /// This repository as a process started in `dir` sees it, with that directory's project
    /// configuration: relative identifiers, the project's `.awf/` (workflows, templates,
    /// `config.yaml`) and relative `$AWF_WORKFLOWS_PATH` entries resolve from `dir` instead
    /// of this process's working directory. A resumed run loads its workflow and its
    /// sub-workflows through it, from the directory it started in, as its first attempt did.
    /// `None` (the default): lookups do not depend on the working directory.
    fn rooted_at(&self, dir: &Path) -> Option<Rooted> {
        let _ = dir;
        None
    }
}

/// A repository and project configuration seen from another directory
/// ([`WorkflowRepository::rooted_at`]).
#[derive(Clone)]
pub struct Rooted {
    /// The workflow repository.
    pub repository: std::sync::Arc<dyn WorkflowRepository>,
    /// The project configuration there (its error when it cannot be read).
    pub config: Result<ProjectConfig, AwfError>,
}

impl std::fmt::Debug for Rooted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rooted")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Project configuration (`.awf/config.yaml`, or `$AWF_CONFIG_PATH`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProjectConfig {
    /// Where it was read from (`None` when there is no file).
    pub path: Option<PathBuf>,
    /// `inputs:` map (typed YAML values), lower precedence than `--input`. An input written
    /// with no value (`dir: null`, `dir: ~`, `dir:`) is not here but in `unset_inputs`: it
    /// is not set, so the workflow's `default` applies and the input is validated as usual.
    pub inputs: Map<String, Value>,
    /// Names written under `inputs:` with no value (null), in the file's order: shown by
    /// `awf config show` as not set, given to no run.
    pub unset_inputs: Vec<String>,
    /// Every other recognised key, as written.
    pub other: Map<String, Value>,
    /// `prices: {<model>: {input_per_mtok, output_per_mtok}}` (budgets; issue 14).
    pub prices: crate::run::Prices,
    /// Unknown keys and other findings.
    pub diagnostics: Vec<Diagnostic>,
}

/// Reads project configuration.
pub trait ConfigSource: Send + Sync {
    /// Loads the configuration; a missing file gives an empty config.
    ///
    /// # Errors
    /// `WORKFLOW.PARSE.YAML_SYNTAX` with position details when the file is not valid YAML.
    fn load_config(&self) -> Result<ProjectConfig, AwfError>;
}
