//! Composition root: resolves directories from flags and environment, builds the adapters and
//! hands them to the application services.
//!
//! Source: spec/workflow.md §3.13 (paths, project layout, environment).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;

use awf_application::Services;
use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::RunService;
use awf_domain::ports::repository::ConfigSource;
use awf_domain::ports::repository::ProjectConfig;
use awf_exec::ProcessExecutor;
use awf_template::ExprEvaluator;
use awf_template::GoTemplates;
use awf_yaml::RepoPaths;
use awf_yaml::YamlRepository;

/// The run service over `services`: what `awf run` and `awf resume` drive runs through (and
/// every later front-end). The one place a front-end constructs the application's run
/// machinery; everything else sees only the [`RunService`] port.
///
/// The terminal shows every event of its one run and subscribes at once, so the log keeps
/// only what it has not read yet (nothing for late subscribers: there are none), as the
/// channel before the service did.
pub fn run_service(services: Services) -> Arc<dyn RunService> {
    Arc::new(awf_application::RunManager::new(
        services,
        awf_application::ServiceConfig {
            log_budget_bytes: 0,
            keep_unread: true,
            record_unstarted: false,
            ..awf_application::ServiceConfig::default()
        },
    ))
}

/// The run service of `awf mcp-serve --workflows`: many runs, each followed by the tool call
/// that started it, and read again by `awf_run_status` after they end (the default log
/// budget and the TTL of finished runs).
pub fn served_run_service(services: Services) -> Arc<dyn RunService> {
    Arc::new(awf_application::RunManager::new(
        services,
        awf_application::ServiceConfig::default(),
    ))
}

/// The run service of `awf serve`: at most `max_live_runs` live runs (`--max-runs`), finished
/// runs kept in memory for `finished_ttl` (`--run-ttl`).
pub fn http_run_service(
    services: Services,
    max_live_runs: usize,
    finished_ttl: std::time::Duration,
) -> Arc<dyn RunService> {
    Arc::new(awf_application::RunManager::new(
        services,
        awf_application::ServiceConfig {
            max_live_runs,
            finished_ttl,
            ..awf_application::ServiceConfig::default()
        },
    ))
}

/// Everything a command needs: services plus the resolved environment.
pub struct Wiring {
    /// Application services.
    pub services: Services,
    /// The repository (also the project configuration source).
    pub repository: Arc<YamlRepository>,
    /// The process environment.
    pub env: BTreeMap<String, String>,
    /// The working directory.
    pub cwd: PathBuf,
    /// Data root (`--storage` > `AWF_STORAGE_DIR` > `$XDG_DATA_HOME/awf` > `~/.local/share/awf`).
    pub data_root: PathBuf,
    /// Global config dir (`$AWF_CONFIG_HOME` > `$XDG_CONFIG_HOME/awf` > `~/.config/awf`).
    pub config_dir: PathBuf,
    /// The run store (state files, history), when it could be opened.
    pub store: Option<Arc<awf_store::Store>>,
    /// Why the store could not be opened.
    pub store_error: Option<AwfError>,
    /// The projection recording runs (None with `AWF_RECORD=off`); flush it before exiting.
    pub recorder: Option<RunRecorder>,
    /// The shared store's URL (`--store` > `AWF_STORE`): runs are recorded and read there
    /// instead of the embedded store.
    pub store_url: Option<String>,
    /// The shared store, once opened (at build for recording commands, else on first use).
    pub pg: Arc<std::sync::OnceLock<awf_postgres::PgStore>>,
    /// The `WARN run record: …` lines of the recorder's write failures, held back while a
    /// terminal's run waits for its start to be recorded ([`Wiring::start_guard`]).
    pub record_warnings: Arc<RecordWarnings>,
}

/// The `WARN run record: …` lines on stderr of a recorder's write failures. While a
/// terminal's run waits for its start to be recorded they are held: a start that could not
/// be written is the run's one error (with its hint), not a warning saying the same first;
/// a start that was written lets them out.
#[derive(Debug, Default)]
pub struct RecordWarnings {
    state: std::sync::Mutex<WarningsState>,
}

#[derive(Debug, Default)]
enum WarningsState {
    /// Printed as they come.
    #[default]
    Open,
    /// Kept until the start is decided.
    Held(Vec<String>),
    /// Dropped: the run's error says its record could not be written.
    Muted,
}

impl RecordWarnings {
    fn state(&self) -> std::sync::MutexGuard<'_, WarningsState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Says `message` (a write failure) on stderr, unless held or muted.
    pub fn warn(&self, message: String) {
        let open = {
            let mut state = self.state();
            if let WarningsState::Held(held) = &mut *state {
                held.push(message.clone());
            }
            matches!(*state, WarningsState::Open)
        };
        if open {
            print_record_warning(&message);
        }
    }

    /// Holds the warnings from now on (until [`Self::release`] or [`Self::mute`]).
    fn hold(&self) {
        let mut state = self.state();
        if matches!(*state, WarningsState::Open) {
            *state = WarningsState::Held(Vec::new());
        }
    }

    /// Says the warnings held, and those to come, on stderr.
    fn release(&self) {
        let held = {
            let mut state = self.state();
            match std::mem::take(&mut *state) {
                WarningsState::Held(held) => held,
                WarningsState::Open => Vec::new(),
                WarningsState::Muted => {
                    *state = WarningsState::Muted;
                    Vec::new()
                }
            }
        };
        for m in held {
            print_record_warning(&m);
        }
    }

    /// Drops the warnings held and those to come.
    fn mute(&self) {
        *self.state() = WarningsState::Muted;
    }
}

/// `WARN run record: <message>` on stderr.
fn print_record_warning(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "WARN run record: {message}");
}

impl Wiring {
    /// Writes `WARN AWF_WORKFLOWS_PATH: <dir> does not exist; it is skipped` on stderr for
    /// each `$AWF_WORKFLOWS_PATH` directory that is not an existing directory (`awf list`,
    /// `awf run`: once per command, before anything else is looked up).
    pub fn warn_workflows_path(&self, style: crate::style::Style) {
        let warnings = self.repository.paths().env_dir_warnings();
        if warnings.is_empty() {
            return;
        }
        let mut err = std::io::stderr().lock();
        for w in warnings {
            let _ = writeln!(
                err,
                "{} {}",
                style.yellow("WARN"),
                crate::style::printable(&w)
            );
        }
    }

    /// Names the kind of this process (`awf run`, `awf serve`, …) in the run locks it takes,
    /// so that another process refused a run this one holds can say how to stop it here.
    /// Only the embedded store's lock files carry it (a shared store's locks do not).
    pub fn name_lock_owner(&mut self, kind: &str) {
        if self.store_url.is_none() {
            self.services.run_locks = Some(Arc::new(
                awf_store::RunLockFiles::new(&self.data_root).owned_by(kind),
            ));
        }
    }
}

/// The recorder of the chosen store: the embedded one (files + SQLite) or the shared one
/// (PostgreSQL). Both queue in `emit` and write on their own thread or task.
#[derive(Debug, Clone)]
pub enum RunRecorder {
    /// awf-store's writer.
    Embedded(awf_store::Recorder),
    /// awf-postgres's writer.
    Postgres(awf_postgres::PgRecorder),
}

impl RunRecorder {
    /// Blocks until what was queued is written (the shared store: at most
    /// [`awf_postgres::recorder::FLUSH_BOUND`]).
    pub fn flush(&self) {
        match self {
            Self::Embedded(r) => r.flush(),
            Self::Postgres(r) => r.flush(),
        }
    }

    /// Sets the function told about write failures (once per kind).
    pub fn on_error(&self, callback: Arc<dyn Fn(String) + Send + Sync>) {
        match self {
            Self::Embedded(r) => r.on_error(callback),
            Self::Postgres(r) => r.on_error(callback),
        }
    }

    /// Takes the texts of the write failures so far.
    pub fn take_errors(&self) -> Vec<String> {
        match self {
            Self::Embedded(r) => r.take_errors(),
            Self::Postgres(r) => r.take_errors(),
        }
    }

    /// Whether the run's record (state, history) could not be written.
    pub fn run_record_failed(&self) -> bool {
        match self {
            Self::Embedded(r) => r.run_record_failed(),
            Self::Postgres(r) => r.run_record_failed(),
        }
    }

    /// A publisher for a terminal's run (`awf run`, `awf resume`; one run per process) that
    /// takes no events and answers [`start_recorded`](awf_domain::event::EventPublisher::start_recorded):
    /// the embedded store's run record failed once the run's start was written (its state
    /// file or the writer itself; a history row alone does not stop the run, as the state
    /// file has it). `None` for the shared store, whose writes are retried.
    fn start_guard(
        &self,
        data_root: &Path,
        warnings: &Arc<RecordWarnings>,
    ) -> Option<Arc<dyn awf_domain::event::EventPublisher>> {
        match self {
            Self::Embedded(r) => {
                warnings.hold();
                Some(Arc::new(StartGuard {
                    recorder: r.clone(),
                    data_root: data_root.to_path_buf(),
                    warnings: Arc::clone(warnings),
                }))
            }
            Self::Postgres(_) => None,
        }
    }

    /// The publisher to hand to the engine.
    fn publisher(&self) -> Arc<dyn awf_domain::event::EventPublisher> {
        match self {
            Self::Embedded(r) => Arc::new(r.clone()),
            Self::Postgres(r) => Arc::new(r.clone()),
        }
    }
}

/// See [`RunRecorder::start_guard`].
struct StartGuard {
    recorder: awf_store::Recorder,
    data_root: PathBuf,
    /// Held from the guard's making until the start is decided.
    warnings: Arc<RecordWarnings>,
}

/// Lets the held warnings out when dropped undecided (the run was cancelled before its
/// start was written).
struct ReleaseOnDrop(Option<Arc<RecordWarnings>>);

impl ReleaseOnDrop {
    /// Decided: the warnings are released or muted by the caller, not on drop.
    fn decided(mut self) -> Arc<RecordWarnings> {
        self.0.take().unwrap_or_default()
    }
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        if let Some(w) = self.0.take() {
            w.release();
        }
    }
}

impl awf_domain::event::EventPublisher for StartGuard {
    fn emit(&self, _event: awf_domain::event::EventEnvelope) {}

    fn interested(&self, _event: &awf_domain::event::EventEnvelope) -> bool {
        false
    }

    /// Resolves at once: it takes no events (the run service flushes a publisher without
    /// this future on a blocking thread, one started at every run's end: issue 9).
    fn flushed(&self) -> Option<awf_domain::event::Settle> {
        Some(Box::pin(std::future::ready(())))
    }

    fn record_failed(&self) -> Option<AwfError> {
        self.steps_unrecorded()
    }

    fn start_recorded(&self) -> Option<awf_domain::event::StartRecorded> {
        // The writer's barrier for a run's start: resolves once it was written (or its
        // write failed, and was reported).
        let written = awf_domain::event::EventPublisher::settle(&self.recorder);
        let recorder = self.recorder.clone();
        let root = self.data_root.clone();
        let pending = ReleaseOnDrop(Some(Arc::clone(&self.warnings)));
        Some(Box::pin(async move {
            if let Some(w) = written {
                w.await;
            }
            let warnings = pending.decided();
            if !recorder.run_record_failed()
                || recorder.only_history_failed()
                || recorder.only_outputs_failed()
            {
                warnings.release();
                return Ok(());
            }
            // The error below says it: no warning first, nor after (the run's end cannot be
            // written either).
            warnings.mute();
            let errors = recorder.take_errors();
            let why = errors
                .first()
                .cloned()
                .unwrap_or_else(|| "the store writer failed".to_owned());
            Err(AwfError::new(
                awf_domain::ErrorCode::SystemIoWriteFailed,
                format!("the run's start could not be recorded, so nothing of it ran: {why}"),
            )
            .with_detail("path", root.display().to_string())
            .with_hint(format!(
                "free disk space or make the data root {} writable, or choose another one \
                 with `--storage DIR` or `AWF_STORAGE_DIR`; `AWF_RECORD=off` runs without \
                 recording (a run that is not recorded cannot be resumed)",
                awf_domain::shell::quote_arg(&root.display().to_string())
            )))
        }))
    }
}

impl StartGuard {
    /// [`EventPublisher::record_failed`](awf_domain::event::EventPublisher::record_failed):
    /// a state file or journal write (or the writer) failed since the run started.
    fn steps_unrecorded(&self) -> Option<AwfError> {
        let why = self.recorder.state_failure()?;
        let shown = self.data_root.display().to_string();
        let root = awf_domain::shell::quote_arg(&shown);
        Some(
            AwfError::new(
                awf_domain::ErrorCode::SystemIoWriteFailed,
                format!(
                    "the run's record could not be written, so it stopped before its next \
                     step: {why}"
                ),
            )
            .with_detail("path", self.data_root.display().to_string())
            .with_hint(format!(
                "free disk space or make the data root {root} writable, then resume the run: \
                 the steps whose end was recorded do not run again"
            )),
        )
    }
}

/// Opens the shared store at `url`.
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` (with a hint) for a URL that is not `postgres://…` or
/// `postgresql://…`; what [`awf_postgres::PgStore::connect`] returns.
pub fn open_shared(url: &str) -> Result<awf_postgres::PgStore, AwfError> {
    if !awf_postgres::is_postgres_url(url) {
        return Err(AwfError::new(
            ErrorCode::UserInputValidationFailed,
            format!(
                "{}{:?} is not a PostgreSQL URL",
                store_source(url, &process_env()),
                awf_postgres::redacted(url)
            ),
        )
        .with_hint(
            "use postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE, or leave --store and \
             AWF_STORE empty for the embedded store",
        ));
    }
    awf_postgres::PgStore::connect(url)
}

impl std::fmt::Debug for Wiring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wiring")
            .field("cwd", &self.cwd)
            .field("data_root", &self.data_root)
            .field("config_dir", &self.config_dir)
            .finish_non_exhaustive()
    }
}

fn non_empty<'a>(env: &'a BTreeMap<String, String>, key: &str) -> Option<&'a str> {
    env.get(key).map(String::as_str).filter(|v| !v.is_empty())
}

/// `$HOME`, else the user's home directory from the password database (read only then: a
/// stripped environment such as `env -i` must not put runs under `/`), else `/`.
fn home(env: &BTreeMap<String, String>) -> PathBuf {
    if let Some(h) = non_empty(env, "HOME") {
        return PathBuf::from(h);
    }
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.dir)
        .filter(|d| d.is_absolute())
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// The working directory of this process as the user's shell spells it
/// ([`awf_host::working_dir`]: `$PWD` when it names the same directory, a path through a
/// symbolic link kept as typed).
///
/// # Errors
/// `SYSTEM.IO.READ_FAILED` when the working directory cannot be read (it was removed).
pub fn working_dir(env: &BTreeMap<String, String>) -> Result<PathBuf, AwfError> {
    awf_host::working_dir(env.get("PWD").map(String::as_str)).map_err(|e| {
        AwfError::new(
            ErrorCode::SystemIoReadFailed,
            format!("cannot read the working directory: {e}"),
        )
    })
}

/// Data root: `--storage` > `AWF_STORAGE_DIR` > `$XDG_DATA_HOME/awf` > `~/.local/share/awf`.
pub fn data_root(storage: Option<&Path>, env: &BTreeMap<String, String>) -> PathBuf {
    if let Some(s) = storage {
        return s.to_path_buf();
    }
    if let Some(s) = non_empty(env, "AWF_STORAGE_DIR") {
        return PathBuf::from(s);
    }
    if let Some(x) = non_empty(env, "XDG_DATA_HOME") {
        return Path::new(x).join("awf");
    }
    home(env).join(".local/share/awf")
}

/// The shared store's URL: `--store` > `$AWF_STORE`; `None` (the embedded store) when neither
/// is set or the value is empty. Not checked here: opening it says what is wrong.
pub fn store_url(flag: Option<&str>, env: &BTreeMap<String, String>) -> Option<String> {
    flag.map(str::trim)
        .or_else(|| env.get("AWF_STORE").map(|s| s.trim()))
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// Where the shared store's URL `url` came from, as a message names it: `AWF_STORE=` when
/// it is that variable's value (no `--store` given, or one with the same value), else
/// `--store ` (the value follows).
pub fn store_source(url: &str, env: &BTreeMap<String, String>) -> &'static str {
    if env.get("AWF_STORE").is_some_and(|v| v.trim() == url) {
        "AWF_STORE="
    } else {
        "--store "
    }
}

/// Global config dir: `$AWF_CONFIG_HOME` > `$XDG_CONFIG_HOME/awf` > `~/.config/awf`.
pub fn config_dir(env: &BTreeMap<String, String>) -> PathBuf {
    if let Some(s) = non_empty(env, "AWF_CONFIG_HOME") {
        return PathBuf::from(s);
    }
    if let Some(x) = non_empty(env, "XDG_CONFIG_HOME") {
        return Path::new(x).join("awf");
    }
    home(env).join(".config/awf")
}

/// The `.awf` template namespace.
pub fn awf_dirs(data_root: &Path, config_dir: &Path) -> BTreeMap<String, String> {
    let s = |p: PathBuf| p.display().to_string();
    BTreeMap::from([
        ("config_dir".to_owned(), s(config_dir.to_path_buf())),
        ("data_dir".to_owned(), s(data_root.to_path_buf())),
        ("plugins_dir".to_owned(), s(data_root.join("plugins"))),
        ("prompts_dir".to_owned(), s(config_dir.join("prompts"))),
        ("roles_dir".to_owned(), s(config_dir.join("roles"))),
        ("scripts_dir".to_owned(), s(config_dir.join("scripts"))),
        ("skills_dir".to_owned(), s(config_dir.join("skills"))),
        ("workflows_dir".to_owned(), s(config_dir.join("workflows"))),
    ])
}

/// The `telemetry:` block of the project configuration, if any (read before the services are
/// built, to set up exporting): the project of `dir` when given (the directory a resumed run
/// started in, [`recorded_run_dir`]), else of this process's working directory.
pub fn project_telemetry(
    storage: Option<&Path>,
    env: &BTreeMap<String, String>,
    dir: Option<&Path>,
) -> Option<serde_json::Value> {
    let cwd = working_dir(env).ok()?;
    let root = cwd.join(data_root(storage, env));
    let at = dir.unwrap_or(&cwd);
    let repo = YamlRepository::new(RepoPaths::from_env(at, env, &root));
    repo.load_config().ok()?.other.get("telemetry").cloned()
}

/// The directory the run `query` (an id or an unambiguous prefix) started in, as its state
/// file of the embedded store records it: where `awf resume` goes on, and whose project
/// configuration it reads. `None` when it is not known here (no such run, a run recorded
/// without one, a shared store, which is read once its services are built).
pub fn recorded_run_dir(
    storage: Option<&Path>,
    store: Option<&str>,
    env: &BTreeMap<String, String>,
    query: &str,
) -> Option<PathBuf> {
    if store_url(store, env).is_some() {
        return None;
    }
    let cwd = working_dir(env).ok()?;
    let root = cwd.join(data_root(storage, env));
    // Read only: nothing of the data root is created for it.
    let states = awf_store::Store::open_read_only(awf_store::StorePaths::from_env(&root, env));
    let id = awf_application::runs::resolve_run_id(&states, None, query).ok()?;
    let snap = awf_domain::ports::StateStore::load(&states, &id).ok()?;
    snap.working_dir.filter(|d| !d.as_os_str().is_empty())
}

/// The process environment as text, read byte-safely (never panics).
///
/// A variable whose name is not UTF-8 is left out. One whose value is not UTF-8 is left out
/// too (templates cannot show it faithfully), except when its name marks a secret: then it is
/// kept with each invalid sequence as U+FFFD, so that it is still masked (see
/// [`awf_domain::mask::Masker::add`]). Child processes inherit every variable unchanged
/// either way, since they inherit this process's environment.
///
/// Read once a process (awf never changes its own environment): later calls get a copy,
/// which costs a third of reading it again (issue 9: a run's fixed cost).
pub fn process_env() -> BTreeMap<String, String> {
    static ENV: std::sync::OnceLock<BTreeMap<String, String>> = std::sync::OnceLock::new();
    ENV.get_or_init(|| {
        let vars: Vec<_> = std::env::vars_os().collect();
        for name in ignored_paths(&vars) {
            eprintln!(
                "WARN {name} is not valid UTF-8 and is ignored; set it to a UTF-8 path (or pass \
                 --storage)"
            );
        }
        env_from(vars)
    })
    .clone()
}

/// Variables that name awf's own files and folders.
const PATH_VARS: &[&str] = &[
    "HOME",
    "XDG_DATA_HOME",
    "XDG_CONFIG_HOME",
    "AWF_STORAGE_DIR",
    "AWF_CONFIG_HOME",
    "AWF_CONFIG_PATH",
    "AWF_WORKFLOWS_PATH",
    "AWF_PROMPTS_PATH",
    "AWF_AUDIT_LOG",
];

/// Names of the [`PATH_VARS`] in `vars` whose value is not UTF-8 (they are ignored, which
/// changes where awf looks for files: worth a warning).
fn ignored_paths(vars: &[(std::ffi::OsString, std::ffi::OsString)]) -> Vec<&'static str> {
    PATH_VARS
        .iter()
        .copied()
        .filter(|n| vars.iter().any(|(k, v)| k == n && v.to_str().is_none()))
        .collect()
}

/// [`process_env`] over explicit pairs.
pub fn env_from(
    vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for (k, v) in vars {
        let Ok(k) = k.into_string() else { continue };
        match v.into_string() {
            Ok(v) => {
                env.insert(k, v);
            }
            Err(v) if awf_domain::mask::is_secret_name(&k) => {
                let lossy = v.to_string_lossy().into_owned();
                env.insert(k, lossy);
            }
            Err(_) => {}
        }
    }
    env
}

/// Builds the services from the real process environment.
///
/// # Errors
/// `SYSTEM.IO.READ_FAILED` when the working directory cannot be determined.
pub fn build(storage: Option<&Path>) -> Result<Wiring, AwfError> {
    build_as(storage, None, false)
}

/// [`build`] with the `--store` flag (`None`: `AWF_STORE` decides). The shared store is
/// opened on first use ([`Wiring::state_store`], [`Wiring::history_store`]).
///
/// # Errors
/// As [`build`].
pub fn build_stored(storage: Option<&Path>, store: Option<&str>) -> Result<Wiring, AwfError> {
    build_as(storage, store, false)
}

/// [`build_recording`] with the `--store` flag (`None`: `AWF_STORE` decides): with a shared
/// store, it is opened here, and runs are recorded and locked there.
///
/// # Errors
/// As [`build`]; with a shared store, what [`open_shared`] returns.
pub fn build_recording_stored(
    storage: Option<&Path>,
    store: Option<&str>,
) -> Result<Wiring, AwfError> {
    build_as(storage, store, true)
}

/// [`build`] for the commands that run a workflow (`run`, `resume`): runs are recorded (the
/// store is opened) unless `AWF_RECORD=off`. Every other command leaves the store closed
/// until it asks for it ([`Wiring::state_store`], [`Wiring::history_store`]), so `validate`,
/// `list` or `diagram` touch no file of the data root.
///
/// # Errors
/// As [`build`].
pub fn build_recording(storage: Option<&Path>) -> Result<Wiring, AwfError> {
    build_as(storage, None, true)
}

/// The values of `AWF_RECORD` that turn recording off (any case).
const RECORD_OFF: [&str; 4] = ["off", "0", "false", "no"];

/// The values of `AWF_RECORD` that keep it on (any case; the empty value too).
const RECORD_ON: [&str; 4] = ["on", "1", "true", "yes"];

/// Whether runs are recorded given the value of `AWF_RECORD`: `off`, `0`, `false`, `no` (any
/// case, spaces around ignored) turn it off; any other value records (one that is not `on`,
/// `1`, `true`, `yes` nor empty is warned about: [`recording_warning`]).
pub fn recording_on(awf_record: Option<&str>) -> bool {
    awf_record.is_none_or(|v| {
        !RECORD_OFF
            .iter()
            .any(|off| v.trim().eq_ignore_ascii_case(off))
    })
}

/// The warning for an `AWF_RECORD` that is neither a word of [`RECORD_OFF`] nor of
/// [`RECORD_ON`] (breaker: `AWF_RECORD=maybe` recorded without a word).
pub fn recording_warning(awf_record: Option<&str>) -> Option<String> {
    let v = awf_record?.trim();
    let known = v.is_empty()
        || RECORD_OFF
            .iter()
            .chain(RECORD_ON.iter())
            .any(|w| v.eq_ignore_ascii_case(w));
    (!known).then(|| {
        format!(
            "AWF_RECORD={v:?} is not one of off, 0, false, no (no recording) or on, 1, true, \
             yes: runs are recorded"
        )
    })
}

fn build_as(
    storage: Option<&Path>,
    store: Option<&str>,
    recording: bool,
) -> Result<Wiring, AwfError> {
    let env = process_env();
    let cwd = working_dir(&env)?;
    let url = store_url(store, &env);
    let Some(url) = url else {
        return Ok(build_with(storage, env, cwd, recording));
    };
    let record = recording && recording_on(env.get("AWF_RECORD").map(String::as_str));
    let pg = if record {
        Some(open_shared(&url)?)
    } else {
        None
    };
    Ok(build_shared(storage, env, cwd, url, pg))
}

/// The run locks of the shared store at `url` (its advisory locks, [`awf_postgres::PgStore`]'s
/// [`RunLocks`](awf_domain::ports::RunLocks)), the store opened on first use and shared with
/// [`Wiring::pg`].
struct SharedLocks {
    url: String,
    pg: Arc<std::sync::OnceLock<awf_postgres::PgStore>>,
}

impl SharedLocks {
    fn store(&self) -> Result<awf_postgres::PgStore, AwfError> {
        if let Some(pg) = self.pg.get() {
            return Ok(pg.clone());
        }
        open_shared(&self.url).map(|pg| self.pg.get_or_init(|| pg).clone())
    }
}

impl awf_domain::ports::RunLocks for SharedLocks {
    fn try_lock(
        &self,
        run_id: &str,
    ) -> Result<Option<awf_domain::ports::locks::RunLockGuard>, AwfError> {
        self.store()?.try_lock(run_id)
    }

    fn holder(&self, run_id: &str) -> Option<String> {
        self.store().ok()?.holder(run_id)
    }

    fn is_held(&self, run_id: &str) -> Option<bool> {
        self.store().ok()?.is_held(run_id)
    }
}

/// [`build_with`] for the shared store at `url`: state, history, audit, events and run
/// locks there (`pg`: the store opened for recording; `None`: opened on first use, nothing
/// recorded).
pub fn build_shared(
    storage: Option<&Path>,
    env: BTreeMap<String, String>,
    cwd: PathBuf,
    url: String,
    pg: Option<awf_postgres::PgStore>,
) -> Wiring {
    // The store URL may hold the database password: no step, agent or tool inherits it
    // (as `awf serve --token-env`'s variable).
    awf_domain::withheld::withhold_env(["AWF_STORE".to_owned()]);
    let mut w = build_with(storage, env, cwd, false);
    // The runs are locked in the shared store, not in the embedded store's lock files (which
    // no run of the shared store holds: `awf status` / `awf history` told a live run's
    // process gone): its advisory locks, the store opened on first use.
    w.services.run_locks = Some(Arc::new(SharedLocks {
        url: url.clone(),
        pg: Arc::clone(&w.pg),
    }));
    w.store_url = Some(url);
    if let Some(pg) = pg {
        // The audit trail goes to the store too (`awf_audit`); AWF_AUDIT_LOG=off still
        // turns it off.
        let paths = awf_store::StorePaths::from_env(&w.data_root, &w.env);
        let recorder = RunRecorder::Postgres(match paths.audit {
            awf_store::AuditTarget::Off => pg.recorder_without_audit(&paths.user_name()),
            awf_store::AuditTarget::Path(_) => pg.recorder(&paths.user_name()),
        });
        w.services.recorders.insert(0, recorder.publisher());
        w.services.state_store = Some(Arc::new(pg.clone()));
        w.services.run_locks = Some(Arc::new(pg.clone()));
        w.recorder = Some(recorder);
        let _ = w.pg.set(pg);
    }
    w
}

/// Builds the services from an explicit environment and working directory.
pub fn build_with(
    storage: Option<&Path>,
    env: BTreeMap<String, String>,
    cwd: PathBuf,
    recording: bool,
) -> Wiring {
    // Absolute, so that every path under it a message or hint names still holds when the
    // user is elsewhere (`--storage rel/dir`, a relative `AWF_STORAGE_DIR`).
    let data_root = cwd.join(data_root(storage, &env));
    let config_dir = config_dir(&env);
    let repository = Arc::new(YamlRepository::from_env(&cwd, &env, &data_root));
    let executor: Arc<dyn awf_domain::ports::CommandExecutor> = Arc::new(ProcessExecutor::new());
    // Run records (state files, history, audit, transcripts) unless AWF_RECORD=off. A store
    // that cannot be opened (read-only disk) leaves runs working, unrecorded, with a warning.
    let record = recording && recording_on(env.get("AWF_RECORD").map(String::as_str));
    // The store is opened only when it is needed: here for recording; `history`, `status`
    // and `resume` open it through `Wiring::state_store`/`history_store`. That keeps commands
    // such as `validate` and `list`, and unrecorded runs, fast.
    let (store, store_error) = if record {
        match awf_store::Store::open(awf_store::StorePaths::from_env(&data_root, &env)) {
            Ok(s) => (Some(Arc::new(s)), None),
            Err(e) => (None, Some(e)),
        }
    } else {
        (None, None)
    };
    let recorder = if record {
        store.as_ref().map(|s| RunRecorder::Embedded(s.recorder()))
    } else {
        None
    };
    let mut recorders: Vec<Arc<dyn awf_domain::event::EventPublisher>> = Vec::new();
    if let Some(r) = &recorder {
        recorders.push(r.publisher());
    }
    // Spans for OpenTelemetry; costs nothing when no exporter is installed.
    recorders.push(Arc::new(awf_telemetry::span_projection()));
    // The `debug` diagnostics of `--verbose` / `--log-level debug`; nothing below that.
    recorders.push(Arc::new(awf_telemetry::log_projection()));
    let operations: Arc<dyn awf_domain::ports::Operations> =
        Arc::new(awf_tools::BuiltinOperations::new());
    let services = Services {
        repository: repository.clone(),
        interpolator: Arc::new(GoTemplates::new()),
        expressions: Arc::new(ExprEvaluator::new()),
        executor: Arc::clone(&executor),
        agents: awf_agents::registry_with(
            executor,
            env.clone(),
            vec![Arc::new(awf_acp::AcpProvider::new(env.clone()))],
        ),
        state_store: store
            .as_ref()
            .map(|s| Arc::clone(s) as Arc<dyn awf_domain::ports::StateStore>),
        recorders,
        awf_dirs: awf_dirs(&data_root, &config_dir),
        clock: Arc::new(awf_host::SystemClock),
        ids: Arc::new(awf_host::UuidIds),
        host: Arc::new(awf_host::OsHost),
        run_locks: Some(Arc::new(awf_store::RunLockFiles::new(&data_root))),
        tool_proxies: Some(Arc::new(crate::proxy::Proxies::of_process(
            &env,
            Some(Arc::clone(&operations)),
        ))),
        operations: Some(operations),
        prices: repository
            .load_config()
            .map(|c| c.prices)
            .unwrap_or_default(),
        event_log: store
            .as_ref()
            .map(|s| Arc::clone(s) as Arc<dyn awf_domain::ports::EventLogReader>),
    };
    Wiring {
        services,
        repository,
        env,
        cwd,
        data_root,
        config_dir,
        store,
        store_error,
        recorder,
        store_url: None,
        pg: Arc::default(),
        record_warnings: Arc::default(),
    }
}

impl Wiring {
    /// The publisher of a terminal's run (`awf run`, `awf resume`) that keeps it from going
    /// on when its start could not be recorded ([`RunRecorder::start_guard`]); the record's
    /// warnings are held meanwhile ([`RecordWarnings`]). `None` without one.
    pub fn start_guard(&self) -> Option<Arc<dyn awf_domain::event::EventPublisher>> {
        self.recorder
            .as_ref()
            .and_then(|r| r.start_guard(&self.data_root, &self.record_warnings))
    }

    /// With runs recorded in the shared store, checks that its user may write them
    /// ([`awf_postgres::PgStore::check_writable`]); a command that records runs calls it
    /// before it starts one, so a read-only user is refused at once (exit 4, the permission
    /// hint) rather than having each write retried as if the server were away.
    ///
    /// # Errors
    /// `SYSTEM.STORE.UNAVAILABLE` when the user lacks a privilege or the database fails.
    pub fn check_store_writable(&self) -> Result<(), AwfError> {
        match (&self.recorder, self.pg.get()) {
            (Some(RunRecorder::Postgres(_)), Some(pg)) => pg.check_writable(),
            _ => Ok(()),
        }
    }

    /// With runs recorded in the shared store, checks that its user has every privilege a
    /// worker uses ([`awf_postgres::PgStore::check_worker_writable`]); `awf serve --store`
    /// calls it before its worker registers.
    ///
    /// # Errors
    /// `SYSTEM.STORE.UNAVAILABLE` when the user lacks a privilege or the database fails.
    pub fn check_worker_writable(&self) -> Result<(), AwfError> {
        match (&self.recorder, self.pg.get()) {
            (Some(RunRecorder::Postgres(_)), Some(pg)) => pg.check_worker_writable(),
            _ => Ok(()),
        }
    }

    /// Project configuration (`.awf/config.yaml` or `$AWF_CONFIG_PATH`).
    ///
    /// # Errors
    /// `WORKFLOW.PARSE.YAML_SYNTAX` when the file is not valid YAML.
    pub fn config(&self) -> Result<ProjectConfig, AwfError> {
        self.repository.load_config()
    }

    /// The run store, opened on first use: the recording one, else one opened for reads
    /// ([`awf_store::Store::open_read_only`]).
    ///
    /// # Errors
    /// Why the recording store could not be opened.
    fn open_store(&self) -> Result<Arc<awf_store::Store>, AwfError> {
        if let Some(s) = &self.store {
            return Ok(Arc::clone(s));
        }
        if let Some(e) = &self.store_error {
            return Err(e.clone());
        }
        // Opened for a read (`history`, `status`, `resume --list`, …): nothing is created.
        Ok(Arc::new(awf_store::Store::open_read_only(
            awf_store::StorePaths::from_env(&self.data_root, &self.env),
        )))
    }

    /// The shared store, when one is chosen: opened on first use.
    ///
    /// # Errors
    /// What [`open_shared`] returns.
    fn shared(&self) -> Option<Result<awf_postgres::PgStore, AwfError>> {
        let url = self.store_url.as_deref()?;
        if let Some(pg) = self.pg.get() {
            return Some(Ok(pg.clone()));
        }
        Some(open_shared(url).map(|pg| self.pg.get_or_init(|| pg).clone()))
    }

    /// The state files of recorded runs (the shared store's snapshots with `--store`).
    ///
    /// # Errors
    /// Why the store could not be opened.
    pub fn state_store(&self) -> Result<Arc<dyn awf_domain::ports::StateStore>, AwfError> {
        if let Some(pg) = self.shared() {
            return pg.map(|p| Arc::new(p) as Arc<dyn awf_domain::ports::StateStore>);
        }
        self.open_store()
            .map(|s| s as Arc<dyn awf_domain::ports::StateStore>)
    }

    /// The run history (the shared store's with `--store`).
    ///
    /// # Errors
    /// Why the store could not be opened.
    pub fn history_store(&self) -> Result<Arc<dyn awf_domain::ports::HistoryStore>, AwfError> {
        if let Some(pg) = self.shared() {
            return pg.map(|p| Arc::new(p) as Arc<dyn awf_domain::ports::HistoryStore>);
        }
        self.open_store()
            .map(|s| s as Arc<dyn awf_domain::ports::HistoryStore>)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_values_that_are_not_utf8_are_skipped_or_kept_masked() {
        use std::ffi::OsString;
        use std::os::unix::ffi::OsStringExt;
        let os = |b: &[u8]| OsString::from_vec(b.to_vec());
        let e = env_from([
            (os(b"JUNK"), os(b"\xff")),
            (os(b"PWD"), os(b"/tmp/caf\xe9")),
            (os(b"N\xffAME"), os(b"x")),
            (os(b"MY_TOKEN"), os(b"sec\xffret-value")),
            (os(b"OK"), os(b"fine")),
        ]);
        let vars = [
            (os(b"HOME"), os(b"/h\xff")),
            (os(b"XDG_DATA_HOME"), os(b"/x")),
        ];
        assert_eq!(ignored_paths(&vars), ["HOME"]);
        assert_eq!(
            e.into_iter().collect::<Vec<_>>(),
            vec![
                ("MY_TOKEN".to_owned(), "sec\u{FFFD}ret-value".to_owned()),
                ("OK".to_owned(), "fine".to_owned()),
            ]
        );
    }

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// `AWF_RECORD`'s common no words turn recording off (breaker: `0`, `false`, `no`
    /// recorded); an unknown value records and is warned about, a known one is not.
    #[test]
    fn awf_record_reads_the_common_yes_and_no_words() {
        for off in ["off", "OFF", "0", "false", "False", "no", " no "] {
            assert!(!recording_on(Some(off)), "{off}");
            assert_eq!(recording_warning(Some(off)), None, "{off}");
        }
        for on in ["on", "1", "true", "YES", ""] {
            assert!(recording_on(Some(on)), "{on}");
            assert_eq!(recording_warning(Some(on)), None, "{on}");
        }
        assert!(recording_on(None));
        assert_eq!(recording_warning(None), None);
        assert!(recording_on(Some("maybe")));
        assert_eq!(
            recording_warning(Some("maybe")).as_deref(),
            Some(
                "AWF_RECORD=\"maybe\" is not one of off, 0, false, no (no recording) or on, 1, \
                 true, yes: runs are recorded"
            )
        );
    }

    /// A bad shared store URL is named by where it came from (breaker: `AWF_STORE=garbage`
    /// said `--store "garbage"`).
    #[test]
    fn a_store_url_is_named_by_its_source() {
        let e = env(&[("AWF_STORE", " garbage ")]);
        assert_eq!(store_source("garbage", &e), "AWF_STORE=");
        assert_eq!(store_source("other", &e), "--store ");
        assert_eq!(store_source("garbage", &env(&[])), "--store ");
    }

    #[test]
    fn data_root_precedence() {
        let e = env(&[
            ("HOME", "/h"),
            ("XDG_DATA_HOME", "/x"),
            ("AWF_STORAGE_DIR", "/s"),
        ]);
        assert_eq!(
            data_root(Some(Path::new("/flag")), &e),
            PathBuf::from("/flag")
        );
        assert_eq!(data_root(None, &e), PathBuf::from("/s"));
        assert_eq!(
            data_root(None, &env(&[("HOME", "/h"), ("XDG_DATA_HOME", "/x")])),
            PathBuf::from("/x/awf")
        );
        assert_eq!(
            data_root(None, &env(&[("HOME", "/h")])),
            PathBuf::from("/h/.local/share/awf")
        );
        // Without HOME: the password database's home, never `/.local/share/awf`.
        let home = nix::unistd::User::from_uid(nix::unistd::getuid())
            .unwrap()
            .unwrap()
            .dir;
        assert_eq!(data_root(None, &env(&[])), home.join(".local/share/awf"));
    }

    #[test]
    fn store_url_precedence() {
        let e = env(&[("AWF_STORE", "postgresql://a@h/db")]);
        assert_eq!(store_url(None, &e).as_deref(), Some("postgresql://a@h/db"));
        assert_eq!(
            store_url(Some("postgres://b@h/x"), &e).as_deref(),
            Some("postgres://b@h/x")
        );
        assert_eq!(
            store_url(Some(""), &e),
            None,
            "an empty flag means embedded"
        );
        assert_eq!(store_url(None, &env(&[("AWF_STORE", " ")])), None);
        assert_eq!(store_url(None, &env(&[])), None);
    }

    #[test]
    fn config_dir_precedence() {
        assert_eq!(
            config_dir(&env(&[
                ("HOME", "/h"),
                ("XDG_CONFIG_HOME", "/x"),
                ("AWF_CONFIG_HOME", "/c")
            ])),
            PathBuf::from("/c")
        );
        assert_eq!(
            config_dir(&env(&[("HOME", "/h"), ("XDG_CONFIG_HOME", "/x")])),
            PathBuf::from("/x/awf")
        );
        assert_eq!(
            config_dir(&env(&[("HOME", "/h"), ("XDG_CONFIG_HOME", "")])),
            PathBuf::from("/h/.config/awf")
        );
    }

    #[test]
    fn awf_namespace_dirs() {
        let d = awf_dirs(Path::new("/d"), Path::new("/c"));
        assert_eq!(d["prompts_dir"], "/c/prompts");
        assert_eq!(d["scripts_dir"], "/c/scripts");
        assert_eq!(d["data_dir"], "/d");
        assert_eq!(d["plugins_dir"], "/d/plugins");
        assert_eq!(d.len(), 8);
    }
}
