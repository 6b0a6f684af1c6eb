//! Workflow lookup and listing over the three workflow directories, and the config source.
//!
//! Source: spec/workflow.md §1.1 (lookup order, `.yaml` suffix, traversal rejected),
//! §3.13 (paths and environment variables).

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::io;
use std::path::Component;
use std::path::Path;
use std::path::PathBuf;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::WorkflowRepository;
use awf_domain::ports::repository::ConfigSource;
use awf_domain::ports::repository::Diagnostic;
use awf_domain::ports::repository::LoadedWorkflow;
use awf_domain::ports::repository::ProjectConfig;
use awf_domain::ports::repository::Rooted;
use awf_domain::ports::repository::WorkflowEntry;
use awf_domain::workflow::WorkflowSource;

use crate::config::parse_config;
use crate::fields::closest;
use crate::parse_workflow_with;
use crate::templates::DirTemplates;

/// Where workflows, templates and the project config live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoPaths {
    /// Process working directory; relative identifiers resolve against it.
    pub cwd: PathBuf,
    /// The directories of `$AWF_WORKFLOWS_PATH` (source `env`), searched in order: one
    /// directory (AWF (Go)), or a colon-separated list of them as `PATH` is (awf addition).
    pub env_dirs: Vec<PathBuf>,
    /// `<project>/.awf/workflows` (source `local`; the project is [`project_root`]).
    pub local_dir: PathBuf,
    /// `$AWF_CONFIG_HOME`, else `$XDG_CONFIG_HOME/awf`, else `~/.config/awf`, + `/workflows`
    /// (source `global`).
    pub global_dir: PathBuf,
    /// `<project>/.awf/templates`, `<data root>/templates`.
    pub template_dirs: Vec<PathBuf>,
    /// `$AWF_CONFIG_PATH`, else `<project>/.awf/config.yaml`.
    pub config_path: PathBuf,
}

/// The project directory whose `.awf/` awf uses from `cwd`: the nearest of `cwd` and its
/// parents that holds the `.awf.yaml` marker or an `.awf/` directory (`awf init` writes
/// both), as git finds its repository from a subdirectory; `cwd` when none does. (awf
/// addition: AWF (Go) reads `.awf/` of the working directory only.)
pub fn project_root(cwd: &Path) -> PathBuf {
    cwd.ancestors()
        .find(|dir| dir.join(".awf").is_dir() || dir.join(".awf.yaml").is_file())
        .map_or_else(|| cwd.to_path_buf(), Path::to_path_buf)
}

impl RepoPaths {
    /// Computes the paths from an environment map (no process environment is read).
    ///
    /// `data_root` is the data directory (`$XDG_DATA_HOME/awf` or the `--storage` override).
    /// Relative values of the variables resolve against `cwd`; the project's `.awf/` is that
    /// of [`project_root`] (`cwd`, or the parent marked by `.awf.yaml`).
    /// Source: spec/workflow.md §1.1, §1.11, §3.13.
    pub fn from_env(cwd: &Path, env: &BTreeMap<String, String>, data_root: &Path) -> Self {
        let var = |k: &str| {
            env.get(k)
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
                .map(|v| cwd.join(v))
        };
        let home = env
            .get("HOME")
            .filter(|h| !h.is_empty())
            .map_or_else(|| cwd.to_path_buf(), PathBuf::from);
        let config_home = var("AWF_CONFIG_HOME")
            .or_else(|| var("XDG_CONFIG_HOME").map(|x| x.join("awf")))
            .unwrap_or_else(|| home.join(".config").join("awf"));
        let project = project_root(cwd).join(".awf");
        Self {
            cwd: cwd.to_path_buf(),
            env_dirs: env_dirs(cwd, env.get("AWF_WORKFLOWS_PATH").map(String::as_str)),
            local_dir: project.join("workflows"),
            global_dir: config_home.join("workflows"),
            template_dirs: vec![project.join("templates"), data_root.join("templates")],
            config_path: var("AWF_CONFIG_PATH").unwrap_or_else(|| project.join("config.yaml")),
        }
    }

    /// The workflow directories with their source names, in lookup order.
    pub fn sources(&self) -> Vec<(&Path, &'static str)> {
        let mut v: Vec<(&Path, &'static str)> =
            self.env_dirs.iter().map(|e| (e.as_path(), "env")).collect();
        v.push((&self.local_dir, "local"));
        v.push((&self.global_dir, "global"));
        v
    }
}

impl RepoPaths {
    /// One warning per `$AWF_WORKFLOWS_PATH` directory that is not an existing directory
    /// (it is skipped, which would otherwise go unnoticed: nothing is found there), e.g.
    /// `AWF_WORKFLOWS_PATH: /a/missing does not exist; it is skipped`.
    pub fn env_dir_warnings(&self) -> Vec<String> {
        self.env_dirs
            .iter()
            .filter_map(|d| {
                let why = match std::fs::metadata(d) {
                    Ok(m) if m.is_dir() => return None,
                    Ok(_) => "is not a directory",
                    Err(e) if e.kind() == io::ErrorKind::NotFound => "does not exist",
                    Err(_) => "cannot be read",
                };
                Some(format!(
                    "AWF_WORKFLOWS_PATH: {} {why}; it is skipped",
                    d.display()
                ))
            })
            .collect()
    }
}

/// The directories `$AWF_WORKFLOWS_PATH` names, relative ones resolved against `cwd`: the
/// value itself when it is an existing directory (AWF (Go) reads one directory, whose name may
/// hold a `:`), else its colon-separated entries in order, empty entries left out.
fn env_dirs(cwd: &Path, value: Option<&str>) -> Vec<PathBuf> {
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Vec::new();
    };
    let whole = cwd.join(value);
    if !value.contains(':') || whole.is_dir() {
        return vec![whole];
    }
    value
        .split(':')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| cwd.join(e))
        .collect()
}

/// The YAML workflow repository and config source.
#[derive(Debug, Clone)]
pub struct YamlRepository {
    paths: RepoPaths,
    /// What [`RepoPaths::from_env`] computed `paths` from (the variables it reads and the
    /// data root), for [`WorkflowRepository::rooted_at`]; `None` for paths given as they are.
    origin: Option<(BTreeMap<String, String>, PathBuf)>,
}

/// The variables [`RepoPaths::from_env`] reads.
const PATH_VARS: [&str; 5] = [
    "HOME",
    "AWF_CONFIG_HOME",
    "XDG_CONFIG_HOME",
    "AWF_WORKFLOWS_PATH",
    "AWF_CONFIG_PATH",
];

impl YamlRepository {
    /// New repository over `paths`. Rooted elsewhere ([`WorkflowRepository::rooted_at`]),
    /// only its working directory changes.
    pub fn new(paths: RepoPaths) -> Self {
        Self {
            paths,
            origin: None,
        }
    }

    /// New repository over [`RepoPaths::from_env`] of `cwd`, `env` and `data_root`. Rooted
    /// elsewhere ([`WorkflowRepository::rooted_at`]), every path is computed again from that
    /// directory (its project's `.awf/`, relative `$AWF_WORKFLOWS_PATH` entries).
    pub fn from_env(cwd: &Path, env: &BTreeMap<String, String>, data_root: &Path) -> Self {
        let vars: BTreeMap<String, String> = env
            .iter()
            .filter(|(k, _)| PATH_VARS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Self {
            paths: RepoPaths::from_env(cwd, &vars, data_root),
            origin: Some((vars, data_root.to_path_buf())),
        }
    }

    /// This repository with its paths as a process started in `dir` computes them.
    pub fn at_dir(&self, dir: &Path) -> Self {
        let paths = match &self.origin {
            Some((vars, data_root)) => RepoPaths::from_env(dir, vars, data_root),
            None => RepoPaths {
                cwd: dir.to_path_buf(),
                ..self.paths.clone()
            },
        };
        Self {
            paths,
            origin: self.origin.clone(),
        }
    }

    /// The directory a workflow file's relative references are taken from (its
    /// `call_workflow` children, `script_file`, …): the directory of the real file, a
    /// symlink to it followed (breaker: `sub/v.yaml -> ../viasym.yaml` looked for its
    /// children in `sub/`), as most tools take includes.
    fn source_dir(&self, path: &Path) -> PathBuf {
        let is_link = path.symlink_metadata().is_ok_and(|m| m.is_symlink());
        let real = if is_link {
            std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
        } else {
            path.to_path_buf()
        };
        real.parent()
            .map_or_else(|| self.paths.cwd.clone(), Path::to_path_buf)
    }

    /// The paths in use.
    pub fn paths(&self) -> &RepoPaths {
        &self.paths
    }

    fn load_file(&self, path: &Path, identifier: &str) -> Result<LoadedWorkflow, AwfError> {
        let bytes = std::fs::read(path).map_err(|e| io_error(&e, path))?;
        let text = crate::decode_utf8(bytes, path)?;
        let source = WorkflowSource {
            identifier: identifier.to_owned(),
            path: Some(path.to_path_buf()),
            dir: self.source_dir(path),
        };
        let templates = DirTemplates {
            dirs: self.paths.template_dirs.clone(),
        };
        parse_workflow_with(&text, Some(path), source, &templates)
    }

    /// Every workflow file in `dir` as `(stem, path)`, sorted by stem, empty when the
    /// directory is missing. Any entry but a directory counts (a FIFO or a dangling link is
    /// listed so that `list` can mark it). Both `.yaml` and `.yml` count; when both exist for one stem the
    /// `.yaml` file wins (it is the one `load` finds first).
    fn names_in(dir: &Path) -> Result<Vec<(String, PathBuf)>, AwfError> {
        let rd = match std::fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    || e.kind() == io::ErrorKind::NotADirectory =>
            {
                return Ok(Vec::new());
            }
            Err(e) => return Err(io_error(&e, dir)),
        };
        let mut names: BTreeMap<String, PathBuf> = BTreeMap::new();
        for entry in rd.flatten() {
            let p = entry.path();
            let Some(ext) = p.extension().and_then(|x| x.to_str()) else {
                continue;
            };
            // Everything but directories: a FIFO or a dangling link is listed (and marked).
            if !WORKFLOW_EXTENSIONS.contains(&ext) || p.is_dir() {
                continue;
            }
            // A stem that is not UTF-8 is listed under its lossy spelling, and `list` marks
            // it (breaker: it was left out without a word).
            if let Some(stem) = p.file_stem().map(|s| s.to_string_lossy().into_owned()) {
                let keep_existing = names
                    .get(&stem)
                    .is_some_and(|old| old.extension().is_some_and(|x| x == "yaml"));
                if !keep_existing {
                    names.insert(stem, p.clone());
                }
            }
        }
        Ok(names.into_iter().collect())
    }

    fn search_dirs<'a>(&'a self, base_dir: Option<&'a Path>) -> Vec<&'a Path> {
        let mut dirs: Vec<&Path> = Vec::new();
        if let Some(b) = base_dir {
            dirs.push(b);
        }
        dirs.extend(self.paths.sources().into_iter().map(|(d, _)| d));
        dirs
    }
}

/// Workflow file extensions, in lookup order (`name` → `name.yaml`, then `name.yml`).
const WORKFLOW_EXTENSIONS: [&str; 2] = ["yaml", "yml"];

/// What a path that exists but is neither a regular file nor a directory is, for messages
/// (`None` for a regular file or a directory).
fn special_kind(meta: &std::fs::Metadata) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_file() || t.is_dir() {
        None
    } else if t.is_fifo() {
        Some("a named pipe (FIFO)")
    } else if t.is_socket() {
        Some("a socket")
    } else if t.is_block_device() || t.is_char_device() {
        Some("a device")
    } else {
        Some("not a regular file")
    }
}

/// The error for a workflow path that exists but cannot be used as a workflow file: a FIFO,
/// socket or device (reading it could block forever), or a symlink that cannot be followed
/// (a loop, or a dangling target). `None` when the path does not exist at all or is a regular
/// file or directory.
impl YamlRepository {
    /// `awf validate`'s warning for a workflow file in one of the directories `awf list`
    /// reads whose `name:` is not its file's name: `awf list` and `awf run` know it by the
    /// file's name (as AWF (Go) does), while runs and history show its `name:`.
    fn name_mismatch(&self, l: &LoadedWorkflow) -> Option<Diagnostic> {
        let path = l.workflow.source.path.as_deref()?;
        let stem = path.file_stem()?.to_str()?;
        let name = l.workflow.name.as_str();
        if name.is_empty() || name == stem {
            return None;
        }
        let parent = std::fs::canonicalize(path.parent()?).ok()?;
        let listed = self.paths.sources().into_iter().any(|(dir, _)| {
            std::fs::canonicalize(self.paths.cwd.join(dir)).is_ok_and(|d| d == parent)
        });
        if !listed {
            return None;
        }
        let mut d = Diagnostic::warning(
            ErrorCode::WorkflowValidationInvalidReference,
            "name",
            format!(
                "name: {name:?} is not the file's name ({stem}): `awf list` and `awf run` know \
                 the workflow as {stem}, its runs and history show {name}"
            ),
        )
        .with_hint(format!(
            "rename the file to {name}.yaml, or set `name: {stem}`"
        ));
        d.locate(&l.source_map);
        Some(d)
    }
}

/// The top-level `name:` a workflow file declares, read from its text without parsing it
/// (a line `name: X` at the left margin, quotes and a trailing comment left out); `None`
/// when the file cannot be read as a regular file or declares none.
pub(crate) fn declared_name(path: &Path) -> Option<String> {
    if unusable_path_error(path, "").is_some() {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|line| {
        let value = line.strip_prefix("name:")?;
        let value = value.split_once(" #").map_or(value, |(v, _)| v).trim();
        let unquoted = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value);
        (!unquoted.is_empty()).then(|| unquoted.to_owned())
    })
}

fn unusable_path_error(path: &Path, ident: &str) -> Option<AwfError> {
    let link = std::fs::symlink_metadata(path).ok()?;
    match std::fs::metadata(path) {
        Ok(meta) => special_kind(&meta).map(|kind| {
            AwfError::new(
                ErrorCode::UserInputInvalidFormat,
                format!("workflow path is {kind}, not a regular file: {ident}"),
            )
            .with_detail("file", path.display().to_string())
            .with_hint(
                "pass the path of a workflow .yaml file (a FIFO, socket or device is not read)",
            )
        }),
        Err(e) if link.file_type().is_symlink() => {
            let dangling = e.kind() == io::ErrorKind::NotFound;
            let why = if dangling {
                "a symbolic link whose target does not exist".to_owned()
            } else {
                format!("a symbolic link that cannot be followed ({e})")
            };
            Some(
                AwfError::new(
                    ErrorCode::UserInputMissingFile,
                    format!("workflow path is {why}: {ident}"),
                )
                .with_detail("file", path.display().to_string())
                // Only a link that cannot be followed may be a loop (breaker: a dangling
                // link's hint spoke of a loop).
                .with_hint(if dangling {
                    "point the link at an existing file, or remove it (see `ls -l` on it)"
                } else {
                    "fix or remove the link (see `ls -l` on it); a link loop never resolves"
                }),
            )
        }
        Err(e) => Some(io_error(&e, path)),
    }
}

fn io_error(e: &io::Error, path: &Path) -> AwfError {
    let code = match e.kind() {
        io::ErrorKind::NotFound => ErrorCode::UserInputMissingFile,
        io::ErrorKind::PermissionDenied => ErrorCode::SystemIoPermissionDenied,
        _ => ErrorCode::SystemIoReadFailed,
    };
    AwfError::new(code, format!("cannot read {}: {e}", path.display()))
        .with_detail("file", path.display().to_string())
}

/// A plain name: no separators, no `..`, not absolute.
fn is_safe_name(name: &str) -> bool {
    !name.is_empty()
        && Path::new(name)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
        && !name.contains('/')
        && !name.contains('\\')
}

impl WorkflowRepository for YamlRepository {
    fn load(&self, identifier: &str, base_dir: Option<&Path>) -> Result<LoadedWorkflow, AwfError> {
        let ident = identifier.trim();
        if ident.is_empty() {
            return Err(AwfError::new(
                ErrorCode::UserFacadeIdentifierEmpty,
                "workflow identifier is empty",
            )
            .with_hint("pass a workflow name or a path to a workflow file"));
        }
        // 1. An existing file path wins.
        // `./x.yaml` is shown (and recorded) as `<cwd>/x.yaml`, not `<cwd>/./x.yaml`: joining
        // components drops the `.` ones (new user).
        let as_path: PathBuf = self.paths.cwd.join(ident).components().collect();
        if as_path.is_file() {
            return self.load_file(&as_path, ident);
        }
        let path_like = ident.contains('/') || ident.contains('\\');
        let yaml_suffix = ident.ends_with(".yaml") || ident.ends_with(".yml");
        // 1b. A relative path named by a calling workflow (`workflow: ./child.yaml`,
        // `../shared/x.yaml`): from that workflow's directory too, as its `script_file`
        // and `readFile` paths are, so a parent run from another directory finds its
        // children (the working directory's file, AWF's lookup, still wins).
        let beside = base_dir
            .filter(|_| path_like && Path::new(ident).is_relative())
            .map(|base| base.join(ident).components().collect::<PathBuf>());
        if let Some(p) = beside.as_ref().filter(|p| p.is_file()) {
            return self.load_file(p, ident);
        }
        // 2. A name in the workflow directories (base dir of a calling workflow first):
        // `name.yaml`, then `name.yml`, in each directory.
        if !path_like {
            let file_names: Vec<String> = if yaml_suffix {
                vec![ident.to_owned()]
            } else {
                WORKFLOW_EXTENSIONS
                    .iter()
                    .map(|x| format!("{ident}.{x}"))
                    .collect()
            };
            for dir in self.search_dirs(base_dir) {
                for file_name in file_names.iter().filter(|f| is_safe_name(f)) {
                    let p = dir.join(file_name);
                    if p.is_file() {
                        return self.load_file(&p, ident);
                    }
                    if let Some(err) = unusable_path_error(&p, ident) {
                        return Err(err);
                    }
                }
            }
        }
        // 3. Not found: say what the path is when it exists but is not a usable file.
        if let Some(err) = unusable_path_error(&as_path, ident) {
            return Err(err);
        }
        if as_path.is_dir() {
            let mut err = AwfError::new(
                ErrorCode::UserInputMissingFile,
                format!("workflow path is a directory, not a file: {ident}"),
            )
            .with_detail("file", as_path.display().to_string());
            let mut files: Vec<String> = std::fs::read_dir(&as_path)
                .map(|rd| {
                    rd.flatten()
                        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                        .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml"))
                        .collect()
                })
                .unwrap_or_default();
            files.sort();
            err = match files.first() {
                Some(f) => err.with_hint(format!(
                    "pass a workflow file inside it, e.g. {}",
                    Path::new(ident).join(f).display()
                )),
                None => err.with_hint("pass the path of a workflow .yaml file, or a workflow name"),
            };
            return Err(err);
        }
        if path_like || yaml_suffix {
            let dir = as_path
                .parent()
                .map_or_else(|| self.paths.cwd.clone(), Path::to_path_buf);
            let wanted = as_path
                .file_name()
                .and_then(|f| f.to_str())
                .unwrap_or(ident)
                .to_owned();
            let mut err = AwfError::new(
                ErrorCode::UserInputMissingFile,
                format!("workflow file not found: {ident}"),
            )
            .with_detail("file", as_path.display().to_string());
            // Candidates only from the directories searched: the path's own, the one beside
            // the calling workflow, and for a bare file name the workflow directories
            // (breaker: a file of the working directory was offered for a child of a
            // workflow elsewhere).
            let mut searched: Vec<PathBuf> = vec![dir];
            searched.extend(
                beside
                    .as_ref()
                    .and_then(|b| b.parent())
                    .map(Path::to_path_buf),
            );
            if !path_like {
                searched.extend(
                    self.search_dirs(base_dir)
                        .into_iter()
                        .map(Path::to_path_buf),
                );
            }
            let files: Vec<String> = searched
                .iter()
                .flat_map(|d| {
                    std::fs::read_dir(d)
                        .map(|rd| {
                            rd.flatten()
                                .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                                .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml"))
                                .collect::<Vec<_>>()
                        })
                        .unwrap_or_default()
                })
                .collect();
            err = match (closest(&wanted, files.iter().map(String::as_str)), &beside) {
                (Some(c), _) => err.with_hint(format!("did you mean '{c}'?")),
                (None, Some(b)) => err
                    .with_detail("also_looked_at", b.display().to_string())
                    .with_hint(format!(
                        "a relative path is looked up from the working directory ({}) and \
                         from the calling workflow's directory ({})",
                        self.paths.cwd.display(),
                        base_dir.unwrap_or(&self.paths.cwd).display()
                    )),
                (None, None) => err.with_hint("run `awf list` to see the available workflows"),
            };
            return Err(err);
        }
        let mut known = BTreeMap::new();
        for dir in self.search_dirs(base_dir) {
            for (n, path) in Self::names_in(dir).unwrap_or_default() {
                known.entry(n).or_insert(path);
            }
        }
        let mut err = AwfError::new(
            ErrorCode::UserFacadeWorkflowNotFound,
            format!("workflow not found: {ident}"),
        )
        .with_detail("workflow", ident.to_owned());
        // A workflow is found by its file's name; runs and history show its `name:`, which
        // may differ (new user: `awf run bar` for `foo.yaml` holding `name: bar`).
        let named = known
            .iter()
            .find(|(_, path)| declared_name(path).as_deref() == Some(ident))
            .map(|(n, _)| n);
        match (named, closest(ident, known.keys().map(String::as_str))) {
            (Some(n), _) => {
                err = err.with_hint(format!(
                    "did you mean {n} (its name: is {ident})? A workflow is run by its file's \
                     name: `awf run {n}`"
                ));
            }
            (None, Some(c)) => err = err.with_hint(format!("did you mean '{c}'?")),
            (None, None) => {
                // A name cut short (new user: `awf run bro` for `broken`): the workflows
                // whose names start with it, a few at most.
                let lower = ident.to_lowercase();
                let started: Vec<&str> = if lower.chars().count() >= 2 {
                    known
                        .keys()
                        .filter(|n| n.to_lowercase().starts_with(&lower))
                        .map(String::as_str)
                        .take(3)
                        .collect()
                } else {
                    Vec::new()
                };
                err = match awf_domain::validate::did_you_mean(&started) {
                    Some(d) => err.with_hint(format!("{d} (`awf list` shows every workflow)")),
                    None => err.with_hint("run `awf list` to see the available workflows"),
                };
            }
        }
        Err(err)
    }

    fn rooted_at(&self, dir: &Path) -> Option<Rooted> {
        let at = self.at_dir(dir);
        let config = at.load_config();
        Some(Rooted {
            repository: std::sync::Arc::new(at),
            config,
        })
    }

    fn load_for_validation(
        &self,
        identifier: &str,
        base_dir: Option<&Path>,
    ) -> Result<LoadedWorkflow, AwfError> {
        let err = match self.load(identifier, base_dir) {
            Ok(mut l) => {
                l.diagnostics.extend(self.name_mismatch(&l));
                return Ok(l);
            }
            Err(e) => e,
        };
        // Only a file that was found but failed to decode is read again, leniently. Decoding
        // raises WORKFLOW.* codes and one USER code (an unknown `mcp_proxy` key), so that one
        // too is reported with the others instead of as a load failure.
        if err.code().category() != awf_domain::error::Category::Workflow
            && err.code() != ErrorCode::UserMcpProxyUnknownKey
        {
            return Err(err);
        }
        let Some(file) = err.details().get("file").and_then(|f| f.as_str()) else {
            return Err(err);
        };
        let path = PathBuf::from(file);
        let Ok(bytes) = std::fs::read(&path) else {
            return Err(err);
        };
        let Ok(text) = crate::decode_utf8(bytes, &path) else {
            return Err(err);
        };
        let source = WorkflowSource {
            identifier: identifier.trim().to_owned(),
            path: Some(path.clone()),
            dir: self.source_dir(&path),
        };
        let templates = DirTemplates {
            dirs: self.paths.template_dirs.clone(),
        };
        crate::parse_workflow_lenient(&text, Some(&path), source, &templates)
            .map(|mut l| {
                l.diagnostics.extend(self.name_mismatch(&l));
                l
            })
            .map_err(|_| err)
    }

    fn list(&self) -> Result<Vec<WorkflowEntry>, AwfError> {
        Ok(self.list_loaded()?.into_iter().map(|(e, _)| e).collect())
    }
}

/// A workflow file [`YamlRepository::listed`] finds: its name (the file's stem), the source
/// of its directory (`env`, `local`, `global`) and its path. [`YamlRepository::load_listed`]
/// reads it.
#[derive(Debug, Clone)]
pub struct Listed {
    /// The name `awf run` knows it by.
    pub name: String,
    /// Where its directory comes from.
    pub source: &'static str,
    /// The file.
    pub path: PathBuf,
}

impl YamlRepository {
    /// [`WorkflowRepository::list`] with each entry's parsed workflow (`None` for a broken
    /// entry: its `error` says why), parsed exactly as [`WorkflowRepository::load`] parses
    /// the entry's path, so that `awf list` validates what it already read instead of reading
    /// and parsing every file twice (issue 9).
    ///
    /// # Errors
    /// `SYSTEM.IO.READ_FAILED` when a workflow directory cannot be read.
    pub fn list_loaded(&self) -> Result<Vec<(WorkflowEntry, Option<LoadedWorkflow>)>, AwfError> {
        Ok(self
            .listed()?
            .into_iter()
            .map(|l| self.load_listed(l))
            .collect())
    }

    /// The workflow files of every source, in listing order, the first of a name winning;
    /// nothing is read but the directories.
    ///
    /// # Errors
    /// `SYSTEM.IO.READ_FAILED` when a workflow directory cannot be read.
    pub fn listed(&self) -> Result<Vec<Listed>, AwfError> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for (dir, source) in self.paths.sources() {
            for (name, path) in Self::names_in(dir)? {
                if seen.insert(name.clone()) {
                    out.push(Listed { name, source, path });
                }
            }
        }
        Ok(out)
    }

    /// The entry of a listed file and its parse ([`YamlRepository::list_loaded`]'s item).
    pub fn load_listed(&self, listed: Listed) -> (WorkflowEntry, Option<LoadedWorkflow>) {
        let Listed { name, source, path } = listed;
        // Never read a FIFO or device (it could block): mark it instead.
        let loaded = match unusable_path_error(&path, &name) {
            Some(e) => Err(e),
            None if path.file_stem().and_then(|s| s.to_str()).is_none() => Err(AwfError::new(
                ErrorCode::UserInputInvalidFormat,
                "the file name is not valid UTF-8",
            )
            .with_hint(
                "rename the file: a workflow is named by its file name, which must \
                 be UTF-8 to be given on the command line",
            )),
            None => self.load_file(&path, &name),
        };
        let (version, description, error, loaded) = match loaded {
            Ok(l) => (
                l.workflow.version.clone(),
                l.workflow.description.clone(),
                None,
                Some(l),
            ),
            // The entry names the file: the message need not repeat it.
            Err(e) => {
                let prefix = format!("{}: ", path.display());
                let msg = e.message().strip_prefix(&prefix).unwrap_or(e.message());
                (None, None, Some(format!("[{}] {msg}", e.code())), None)
            }
        };
        (
            WorkflowEntry {
                name,
                source: source.to_owned(),
                path,
                version,
                description,
                error,
            },
            loaded,
        )
    }
}

impl ConfigSource for YamlRepository {
    fn load_config(&self) -> Result<ProjectConfig, AwfError> {
        let path = &self.paths.config_path;
        // A FIFO or device would block the read (or never end): say what it is instead.
        if let Ok(meta) = std::fs::metadata(path)
            && let Some(kind) = special_kind(&meta)
        {
            return Err(AwfError::new(
                ErrorCode::UserInputInvalidFormat,
                format!(
                    "project configuration {} is {kind}, not a regular file",
                    path.display()
                ),
            )
            .with_detail("file", path.display().to_string())
            .with_hint("make .awf/config.yaml (or $AWF_CONFIG_PATH) a regular YAML file"));
        }
        if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
            return Err(AwfError::new(
                ErrorCode::UserInputInvalidFormat,
                format!(
                    "project configuration {} is a directory, not a file",
                    path.display()
                ),
            )
            .with_detail("file", path.display().to_string())
            .with_hint("make .awf/config.yaml (or $AWF_CONFIG_PATH) a regular YAML file"));
        }
        match std::fs::read(path) {
            Ok(bytes) => parse_config(
                &crate::decode_utf8(bytes, path).map_err(crate::config::as_config_error)?,
                path,
            ),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(ProjectConfig::default()),
            Err(e) => Err(io_error(&e, path)),
        }
    }
}
