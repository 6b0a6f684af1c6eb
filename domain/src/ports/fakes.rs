//! Scripted, recording fakes of the ports, for application tests that run without processes,
//! disks or template engines. Enabled by the `testing` feature.
//!
//! Each fake answers from a script and records every call so tests can assert on whole values.
//! Every scripted answer is given once, in order (`always` answers repeat on purpose). A call
//! the script does not cover, a call after the answers ran out, and (when the fake is dropped
//! at the end of a test that did not panic) an answer never asked for all panic with the call
//! shown, so an engine change that calls a port once more, or once less, fails the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Mutex;

use tokio_util::sync::CancellationToken;

use crate::error::AwfError;
use crate::error::ErrorCode;
use crate::event::OutputStream;
use crate::ports::exec::CommandExecutor;
use crate::ports::exec::CommandOutput;
use crate::ports::exec::CommandSpec;
use crate::ports::exec::OutputCallback;
use crate::ports::exec::Program;
use crate::ports::exec::Termination;
use crate::ports::repository::LoadedWorkflow;
use crate::ports::repository::SourceMap;
use crate::ports::repository::WorkflowEntry;
use crate::ports::repository::WorkflowRepository;
use crate::ports::template::ExpressionEvaluator;
use crate::ports::template::Interpolator;
use crate::ports::template::TemplateError;
use crate::scope::Scope;
use crate::workflow::Workflow;

/// What a scripted command does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FakeCommand {
    /// Exits with `code`, printing `stdout` / `stderr` (streamed in one chunk each).
    Exit {
        /// Exit code.
        code: i32,
        /// Standard output.
        stdout: String,
        /// Standard error.
        stderr: String,
    },
    /// Runs until cancelled, then reports `Cancelled` (or `TimedOut` when a timeout was set
    /// and elapsed first).
    Hang,
}

impl FakeCommand {
    /// Exit 0 with `stdout`.
    pub fn ok(stdout: &str) -> Self {
        Self::Exit {
            code: 0,
            stdout: stdout.to_owned(),
            stderr: String::new(),
        }
    }

    /// Exit `code` with `stderr`.
    pub fn fail(code: i32, stderr: &str) -> Self {
        Self::Exit {
            code,
            stdout: String::new(),
            stderr: stderr.to_owned(),
        }
    }
}

/// The scripted answers of one key: given once each, in order, then `always` (if set) for
/// every further call.
#[derive(Debug, Clone)]
struct Answers<T> {
    queue: VecDeque<T>,
    always: Option<T>,
}

impl<T> Default for Answers<T> {
    fn default() -> Self {
        Self {
            queue: VecDeque::new(),
            always: None,
        }
    }
}

impl<T: Clone> Answers<T> {
    fn next(&mut self) -> Option<T> {
        self.queue.pop_front().or_else(|| self.always.clone())
    }
}

/// Panics (unless the thread is already panicking) when any key still has answers that were
/// scripted but never asked for.
fn assert_all_used<T: std::fmt::Debug>(fake: &str, script: &BTreeMap<String, Answers<T>>) {
    if std::thread::panicking() {
        return;
    }
    let unused: Vec<String> = script
        .iter()
        .filter(|(_, a)| !a.queue.is_empty())
        .map(|(k, a)| format!("{k:?}: {:?}", a.queue))
        .collect();
    assert!(
        unused.is_empty(),
        "{fake}: scripted answers never asked for: {}",
        unused.join("; ")
    );
}

/// A command executor answering by command text: each scripted answer once, in order.
/// Unscripted commands, calls beyond the script and (on drop) unused answers panic.
#[derive(Debug, Default)]
pub struct FakeExecutor {
    script: Mutex<BTreeMap<String, Answers<FakeCommand>>>,
    calls: Mutex<Vec<CommandSpec>>,
}

impl Drop for FakeExecutor {
    fn drop(&mut self) {
        if let Ok(script) = self.script.lock() {
            assert_all_used("FakeExecutor", &script);
        }
    }
}

impl FakeExecutor {
    /// Empty script.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds answers for a command text, each given once, in order.
    #[must_use]
    pub fn on(self, command: &str, answers: impl IntoIterator<Item = FakeCommand>) -> Self {
        self.script
            .lock()
            .unwrap()
            .entry(command.to_owned())
            .or_default()
            .queue
            .extend(answers);
        self
    }

    /// Answers every call of a command text (after any [`Self::on`] answers) with `answer`,
    /// however often it comes; for steps a test means to run an open number of times.
    #[must_use]
    pub fn always(self, command: &str, answer: FakeCommand) -> Self {
        self.script
            .lock()
            .unwrap()
            .entry(command.to_owned())
            .or_default()
            .always = Some(answer);
        self
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<CommandSpec> {
        self.calls.lock().unwrap().clone()
    }

    /// Command texts of every call so far, in order.
    pub fn commands(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .map(|c| match c.program {
                Program::Shell(t) | Program::Script(t) => t,
                Program::Exec { program, args } => format!("{program} {}", args.join(" ")),
            })
            .collect()
    }
}

#[async_trait::async_trait]
impl CommandExecutor for FakeExecutor {
    async fn run(
        &self,
        spec: CommandSpec,
        on_output: Option<OutputCallback>,
        cancel: CancellationToken,
    ) -> Result<CommandOutput, AwfError> {
        self.calls.lock().unwrap().push(spec.clone());
        let text = match &spec.program {
            Program::Shell(t) | Program::Script(t) => t.clone(),
            Program::Exec { program, args } => format!("{program} {}", args.join(" ")),
        };
        let answer = {
            let mut script = self.script.lock().unwrap();
            let answers = script
                .get_mut(&text)
                .unwrap_or_else(|| panic!("FakeExecutor: unscripted command {text:?}"));
            answers.next()
        }
        .unwrap_or_else(|| {
            let n = self.calls.lock().map_or(0, |c| c.len());
            panic!("FakeExecutor: {text:?} called more often than scripted (call {n})")
        });
        if cancel.is_cancelled() {
            return Ok(CommandOutput {
                exit_code: -1,
                stdout: String::new(),
                stderr: String::new(),
                termination: Termination::Cancelled,
                truncated: false,
                signal: None,
            });
        }
        match answer {
            FakeCommand::Exit {
                code,
                stdout,
                stderr,
            } => {
                if let Some(cb) = &on_output {
                    if !stdout.is_empty() {
                        cb(OutputStream::Stdout, stdout.as_bytes());
                    }
                    if !stderr.is_empty() {
                        cb(OutputStream::Stderr, stderr.as_bytes());
                    }
                }
                Ok(CommandOutput {
                    exit_code: code,
                    stdout,
                    stderr,
                    termination: Termination::Exited,
                    truncated: false,
                    signal: None,
                })
            }
            FakeCommand::Hang => {
                let termination = match spec.timeout {
                    Some(t) => tokio::select! {
                        () = cancel.cancelled() => Termination::Cancelled,
                        () = tokio::time::sleep(t) => Termination::TimedOut,
                    },
                    None => {
                        cancel.cancelled().await;
                        Termination::Cancelled
                    }
                };
                Ok(CommandOutput {
                    exit_code: -1,
                    stdout: String::new(),
                    stderr: String::new(),
                    termination,
                    truncated: false,
                    signal: None,
                })
            }
        }
    }
}

/// An interpolator that replaces `{{.inputs.NAME}}`, `{{.states.NAME.Output}}`,
/// `{{.loop.Index}}` and `{{.loop.Item}}` (a string item), also of outer loops
/// (`{{.loop.Parent.Index}}`), and leaves other text alone; an unknown input or state is
/// [`TemplateError::Undefined`].
#[derive(Debug, Default, Clone, Copy)]
pub struct FakeInterpolator;

impl Interpolator for FakeInterpolator {
    fn render(&self, template: &str, scope: &Scope<'_>) -> Result<String, TemplateError> {
        let mut out = String::new();
        let mut rest = template;
        while let Some(start) = rest.find("{{") {
            out.push_str(&rest[..start]);
            let Some(end) = rest[start..].find("}}") else {
                return Err(TemplateError::Failed("unclosed action".into()));
            };
            let expr = rest[start + 2..start + end].trim().trim_start_matches('.');
            let value = if let Some(name) = expr.strip_prefix("inputs.") {
                match scope.inputs.get(name) {
                    Some(serde_json::Value::String(s)) => s.clone(),
                    Some(v) => v.to_string(),
                    None => return Err(TemplateError::Undefined(expr.to_owned())),
                }
            } else if let Some(path) = expr.strip_prefix("states.") {
                let name = path.strip_suffix(".Output").unwrap_or(path);
                scope
                    .states
                    .get(name)
                    .map(|s| s.output.to_string())
                    .ok_or_else(|| TemplateError::Undefined(expr.to_owned()))?
            } else if let Some(path) = expr.strip_prefix("loop.") {
                // `Index` or a string `Item`, of the loop or (`Parent.`…) an outer one.
                let mut frame = scope.loop_frame;
                let mut field = path;
                while let Some(rest) = field.strip_prefix("Parent.") {
                    frame = frame.and_then(|f| f.parent.as_deref());
                    field = rest;
                }
                let f = frame.ok_or_else(|| TemplateError::Undefined("loop".into()))?;
                match (field, &f.item) {
                    ("Index", _) => f.index.to_string(),
                    ("Item", serde_json::Value::String(s)) => s.clone(),
                    _ => {
                        return Err(TemplateError::Failed(format!(
                            "FakeInterpolator cannot render {expr}"
                        )));
                    }
                }
            } else {
                return Err(TemplateError::Failed(format!(
                    "FakeInterpolator cannot render {expr}"
                )));
            };
            out.push_str(&value);
            rest = &rest[start + end + 2..];
        }
        out.push_str(rest);
        Ok(out)
    }

    fn check(&self, template: &str) -> Result<(), TemplateError> {
        if template.matches("{{").count() == template.matches("}}").count() {
            Ok(())
        } else {
            Err(TemplateError::Failed("unclosed action".into()))
        }
    }
}

/// An expression evaluator with scripted answers by expression text, each given once;
/// records every call. Unscripted expressions, evaluations beyond the script and (on drop)
/// unused answers panic.
#[derive(Debug, Default)]
pub struct FakeExpressions {
    answers: Mutex<BTreeMap<String, Answers<bool>>>,
    calls: Mutex<Vec<String>>,
}

impl Drop for FakeExpressions {
    fn drop(&mut self) {
        if let Ok(answers) = self.answers.lock() {
            assert_all_used("FakeExpressions", &answers);
        }
    }
}

impl FakeExpressions {
    /// Empty script.
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers for `expr`, each given once, in order.
    #[must_use]
    pub fn on(self, expr: &str, answers: impl IntoIterator<Item = bool>) -> Self {
        self.answers
            .lock()
            .unwrap()
            .entry(expr.to_owned())
            .or_default()
            .queue
            .extend(answers);
        self
    }

    /// Answers every evaluation of `expr` (after any [`Self::on`] answers) with `value`.
    #[must_use]
    pub fn always(self, expr: &str, value: bool) -> Self {
        self.answers
            .lock()
            .unwrap()
            .entry(expr.to_owned())
            .or_default()
            .always = Some(value);
        self
    }

    /// Every expression evaluated so far, in order.
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

impl ExpressionEvaluator for FakeExpressions {
    fn eval_bool(&self, expr: &str, _scope: &Scope<'_>) -> Result<bool, TemplateError> {
        self.calls.lock().unwrap().push(expr.to_owned());
        let mut answers = self.answers.lock().unwrap();
        let scripted = answers
            .get_mut(expr)
            .unwrap_or_else(|| panic!("FakeExpressions: unscripted expression {expr:?}"));
        Ok(scripted.next().unwrap_or_else(|| {
            panic!("FakeExpressions: {expr:?} evaluated more often than scripted")
        }))
    }

    fn eval_int(&self, expr: &str) -> Result<i64, TemplateError> {
        expr.trim()
            .parse()
            .map_err(|_| TemplateError::Failed(format!("FakeExpressions cannot compute {expr}")))
    }

    fn check(&self, _expr: &str) -> Result<(), TemplateError> {
        Ok(())
    }
}

/// A repository serving workflows from memory by identifier.
#[derive(Debug, Default)]
pub struct FakeRepository {
    workflows: Mutex<BTreeMap<String, Workflow>>,
    loads: Mutex<Vec<String>>,
    /// What [`WorkflowRepository::rooted_at`] gives, by directory.
    rooted: BTreeMap<PathBuf, crate::ports::repository::Rooted>,
}

impl FakeRepository {
    /// Empty repository.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a workflow under its `source.identifier`.
    #[must_use]
    pub fn with(self, wf: Workflow) -> Self {
        self.workflows
            .lock()
            .unwrap()
            .insert(wf.source.identifier.clone(), wf);
        self
    }

    /// Identifiers loaded so far, in order.
    pub fn loads(&self) -> Vec<String> {
        self.loads.lock().unwrap().clone()
    }

    /// Serves `repo` with `config` as this repository seen from `dir`
    /// ([`WorkflowRepository::rooted_at`]; `None` for any other directory).
    #[must_use]
    pub fn rooted(
        mut self,
        dir: impl Into<PathBuf>,
        repo: Self,
        config: crate::ports::repository::ProjectConfig,
    ) -> Self {
        self.rooted.insert(
            dir.into(),
            crate::ports::repository::Rooted {
                repository: std::sync::Arc::new(repo),
                config: Ok(config),
            },
        );
        self
    }
}

impl WorkflowRepository for FakeRepository {
    fn load(&self, identifier: &str, _base_dir: Option<&Path>) -> Result<LoadedWorkflow, AwfError> {
        self.loads.lock().unwrap().push(identifier.to_owned());
        let wf = self
            .workflows
            .lock()
            .unwrap()
            .get(identifier)
            .cloned()
            .ok_or_else(|| {
                AwfError::new(
                    ErrorCode::UserFacadeWorkflowNotFound,
                    format!("workflow not found: {identifier}"),
                )
            })?;
        Ok(LoadedWorkflow {
            workflow: wf,
            source_map: SourceMap::default(),
            diagnostics: Vec::new(),
            unknown_types: std::collections::BTreeMap::new(),
        })
    }

    fn list(&self) -> Result<Vec<WorkflowEntry>, AwfError> {
        Ok(Vec::new())
    }

    fn rooted_at(&self, dir: &Path) -> Option<crate::ports::repository::Rooted> {
        self.rooted.get(dir).cloned()
    }
}

/// A scripted agent: each answer once, in order (a call beyond them, and on drop an answer
/// never asked for, panic), streams each answer's
/// output as one `Message` chunk, records every request, and keeps sessions like a CLI with
/// session ids (`fake-session-1`, …) when the request carries one.
#[derive(Debug)]
pub struct FakeAgent {
    name: String,
    /// Stream each answer in pieces of this many characters (0: one chunk).
    chunk_chars: usize,
    answers: Mutex<VecDeque<Result<crate::ports::agent::AgentResponse, AwfError>>>,
    calls: Mutex<Vec<crate::ports::agent::AgentRequest>>,
}

impl FakeAgent {
    /// A provider called `name` with no answers yet.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            chunk_chars: 0,
            answers: Mutex::new(VecDeque::new()),
            calls: Mutex::new(Vec::new()),
        }
    }

    /// Adds an answer with this output text.
    #[must_use]
    pub fn answer(self, output: &str) -> Self {
        self.answers
            .lock()
            .unwrap()
            .push_back(Ok(crate::ports::agent::AgentResponse {
                output: output.to_owned(),
                tokens: crate::run::TokenUsage {
                    input: 10,
                    output: 5,
                    total: 15,
                    estimated: false,
                },
                ..Default::default()
            }));
        self
    }

    /// Streams each answer in `Message` chunks of `n` characters instead of one.
    #[must_use]
    pub fn chunked(mut self, n: usize) -> Self {
        self.chunk_chars = n;
        self
    }

    /// Adds a failing answer.
    #[must_use]
    pub fn fail(self, error: AwfError) -> Self {
        self.answers.lock().unwrap().push_back(Err(error));
        self
    }

    /// Every request so far.
    pub fn calls(&self) -> Vec<crate::ports::agent::AgentRequest> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl crate::ports::agent::AgentProvider for FakeAgent {
    fn name(&self) -> &str {
        &self.name
    }

    async fn execute(
        &self,
        request: crate::ports::agent::AgentRequest,
        on_chunk: Option<crate::ports::agent::AgentCallback>,
        cancel: CancellationToken,
    ) -> Result<crate::ports::agent::AgentResponse, AwfError> {
        use crate::ports::agent::Role;
        use crate::ports::agent::Turn;
        let n = {
            let mut calls = self.calls.lock().unwrap();
            calls.push(request.clone());
            calls.len()
        };
        if cancel.is_cancelled() {
            return Err(AwfError::new(ErrorCode::ExecutionRunCancelled, "cancelled"));
        }
        let answer = self.answers.lock().unwrap().pop_front().unwrap_or_else(|| {
            panic!(
                "FakeAgent {}: called more often than scripted (call {n})",
                self.name
            )
        });
        let mut resp = answer?;
        if let Some(cb) = &on_chunk {
            if self.chunk_chars == 0 {
                cb(crate::ports::agent::AgentChunk::Message(
                    resp.output.clone(),
                ));
            } else {
                let chars: Vec<char> = resp.output.chars().collect();
                for piece in chars.chunks(self.chunk_chars) {
                    cb(crate::ports::agent::AgentChunk::Message(
                        piece.iter().collect(),
                    ));
                }
            }
        }
        if let Some(mut session) = request.session {
            if session.session_id.is_none() {
                session.session_id = Some(format!("fake-session-{n}"));
            }
            session.turns.push(Turn {
                role: Role::User,
                content: request.prompt.clone(),
            });
            session.turns.push(Turn {
                role: Role::Assistant,
                content: resp.output.clone(),
            });
            resp.session = Some(session);
        }
        Ok(resp)
    }
}

impl Drop for FakeAgent {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        if let Ok(q) = self.answers.lock() {
            assert!(
                q.is_empty(),
                "FakeAgent {}: {} scripted answer(s) never asked for: {:?}",
                self.name,
                q.len(),
                q.iter()
                    .map(|a| a
                        .as_ref()
                        .map(|r| r.output.clone())
                        .map_err(AwfError::message))
                    .collect::<Vec<_>>()
            );
        }
    }
}

/// A registry over fixed providers.
#[derive(Default)]
pub struct FakeAgents(BTreeMap<String, std::sync::Arc<dyn crate::ports::agent::AgentProvider>>);

impl std::fmt::Debug for FakeAgents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("FakeAgents")
            .field(&self.0.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl FakeAgents {
    /// Registers `provider` under its name.
    #[must_use]
    pub fn with(
        mut self,
        provider: std::sync::Arc<dyn crate::ports::agent::AgentProvider>,
    ) -> Self {
        self.0.insert(provider.name().to_owned(), provider);
        self
    }
}

#[async_trait::async_trait]
impl crate::ports::agent::AgentRegistry for FakeAgents {
    fn get(&self, name: &str) -> Option<std::sync::Arc<dyn crate::ports::agent::AgentProvider>> {
        self.0.get(name).cloned()
    }

    fn names(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
}

/// A clock that stands still until told to move: wall time starts at `wall` (default
/// 2026-01-01T00:00:00Z), monotonic time at the moment the fake was made.
#[derive(Debug)]
pub struct FakeClock {
    wall: std::time::SystemTime,
    base: std::time::Instant,
    offset: Mutex<std::time::Duration>,
}

impl Default for FakeClock {
    fn default() -> Self {
        Self::at(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_767_225_600))
    }
}

impl FakeClock {
    /// A clock whose wall time starts at `wall`.
    pub fn at(wall: std::time::SystemTime) -> Self {
        Self {
            wall,
            base: std::time::Instant::now(),
            offset: Mutex::new(std::time::Duration::ZERO),
        }
    }

    /// Moves both times forward by `by`.
    pub fn advance(&self, by: std::time::Duration) {
        *self.offset.lock().unwrap() += by;
    }

    fn offset(&self) -> std::time::Duration {
        *self.offset.lock().unwrap()
    }
}

impl crate::ports::clock::Clock for FakeClock {
    fn now(&self) -> std::time::SystemTime {
        self.wall + self.offset()
    }

    fn instant(&self) -> std::time::Instant {
        self.base + self.offset()
    }
}

/// Ids in order: runs `run-1`, `run-2`, …; a child of run `p` is `p.1`, `p.2`, … (numbered per
/// generator); requests `request-1`, `request-2`, ….
#[derive(Debug, Default)]
pub struct SeqIds {
    runs: std::sync::atomic::AtomicU64,
    children: std::sync::atomic::AtomicU64,
    requests: std::sync::atomic::AtomicU64,
}

impl SeqIds {
    fn next(n: &std::sync::atomic::AtomicU64) -> u64 {
        n.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
    }
}

impl crate::ports::ids::IdGenerator for SeqIds {
    fn run_id(&self) -> crate::run::RunId {
        crate::run::RunId(format!("run-{}", Self::next(&self.runs)))
    }

    fn child_run_id(&self, parent: &crate::run::RunId) -> crate::run::RunId {
        crate::run::RunId(format!("{}.{}", parent.0, Self::next(&self.children)))
    }

    fn request_id(&self) -> String {
        format!("request-{}", Self::next(&self.requests))
    }
}

/// An in-memory host: files with their text, directories (every ancestor of a file is one
/// too), dangling symbolic links, live process ids, and fixed process facts (pid 4242, host
/// `fake-host`, working directory `/work`, temp `/tmp`, home `/home/user`). No path exists
/// unless added. Paths are taken as given (no `..` resolution); `canonicalize` of an existing
/// path is the path itself.
#[derive(Debug)]
pub struct FakeHost {
    files: Mutex<BTreeMap<std::path::PathBuf, String>>,
    dirs: Mutex<std::collections::BTreeSet<std::path::PathBuf>>,
    dangling: Mutex<std::collections::BTreeSet<std::path::PathBuf>>,
    alive: Mutex<std::collections::BTreeSet<u32>>,
    /// This process's id.
    pub pid: u32,
    /// The host name.
    pub hostname: String,
    /// The working directory.
    pub cwd: std::path::PathBuf,
    /// `$HOME`, if any.
    pub home: Option<std::path::PathBuf>,
}

impl Default for FakeHost {
    fn default() -> Self {
        Self {
            files: Mutex::default(),
            dirs: Mutex::default(),
            dangling: Mutex::default(),
            alive: Mutex::new([4242].into()),
            pid: 4242,
            hostname: "fake-host".to_owned(),
            cwd: "/work".into(),
            home: Some("/home/user".into()),
        }
    }
}

impl FakeHost {
    /// Adds (or replaces) a file.
    pub fn file(self, path: impl Into<std::path::PathBuf>, text: &str) -> Self {
        self.files
            .lock()
            .unwrap()
            .insert(path.into(), text.to_owned());
        self
    }

    /// Adds an empty directory.
    pub fn dir(self, path: impl Into<std::path::PathBuf>) -> Self {
        self.dirs.lock().unwrap().insert(path.into());
        self
    }

    /// Adds a symbolic link whose target does not exist.
    pub fn dangling_link(self, path: impl Into<std::path::PathBuf>) -> Self {
        self.dangling.lock().unwrap().insert(path.into());
        self
    }

    /// Marks a process id as alive (or dead with `false`).
    pub fn process(&self, pid: u32, alive: bool) {
        let mut a = self.alive.lock().unwrap();
        if alive {
            a.insert(pid);
        } else {
            a.remove(&pid);
        }
    }

    fn is_a_dir(&self, path: &Path) -> bool {
        let dirs = self.dirs.lock().unwrap();
        let files = self.files.lock().unwrap();
        dirs.contains(path)
            || files
                .keys()
                .chain(dirs.iter())
                .any(|f| f != path && f.starts_with(path))
    }

    fn not_found() -> std::io::Error {
        std::io::Error::from(std::io::ErrorKind::NotFound)
    }
}

impl crate::ports::host::Host for FakeHost {
    fn metadata(&self, path: &Path) -> std::io::Result<crate::ports::host::FileMeta> {
        use crate::ports::host::FileKind;
        use crate::ports::host::FileMeta;
        if let Some(text) = self.files.lock().unwrap().get(path) {
            return Ok(FileMeta {
                kind: FileKind::File,
                len: text.len() as u64,
            });
        }
        if self.is_a_dir(path) {
            return Ok(FileMeta {
                kind: FileKind::Dir,
                len: 0,
            });
        }
        Err(Self::not_found())
    }

    fn is_symlink(&self, path: &Path) -> bool {
        self.dangling.lock().unwrap().contains(path)
    }

    fn read_limited(&self, path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
        let files = self.files.lock().unwrap();
        let text = files.get(path).ok_or_else(Self::not_found)?;
        let n = usize::try_from(limit).unwrap_or(usize::MAX).min(text.len());
        Ok(text.as_bytes()[..n].to_vec())
    }

    fn read_to_string(&self, path: &Path) -> std::io::Result<String> {
        self.files
            .lock()
            .unwrap()
            .get(path)
            .cloned()
            .ok_or_else(Self::not_found)
    }

    fn canonicalize(&self, path: &Path) -> std::io::Result<std::path::PathBuf> {
        if self.exists(path) {
            Ok(path.to_path_buf())
        } else {
            Err(Self::not_found())
        }
    }

    fn read_dir(&self, dir: &Path) -> std::io::Result<Vec<crate::ports::host::DirEntry>> {
        use crate::ports::host::FileKind;
        if !self.is_a_dir(dir) {
            return Err(Self::not_found());
        }
        let mut names: BTreeMap<std::path::PathBuf, FileKind> = BTreeMap::new();
        let files: Vec<_> = self.files.lock().unwrap().keys().cloned().collect();
        let dirs: Vec<_> = self.dirs.lock().unwrap().iter().cloned().collect();
        for (p, is_file) in files
            .iter()
            .map(|f| (f, true))
            .chain(dirs.iter().map(|d| (d, false)))
        {
            let Ok(rest) = p.strip_prefix(dir) else {
                continue;
            };
            let mut parts = rest.components();
            let Some(first) = parts.next() else { continue };
            let child = dir.join(first);
            let kind = if is_file && parts.next().is_none() {
                FileKind::File
            } else {
                FileKind::Dir
            };
            names.insert(child, kind);
        }
        Ok(names
            .into_iter()
            .map(|(path, kind)| crate::ports::host::DirEntry { path, kind })
            .collect())
    }

    fn current_dir(&self) -> std::io::Result<std::path::PathBuf> {
        Ok(self.cwd.clone())
    }

    fn temp_dir(&self) -> std::path::PathBuf {
        "/tmp".into()
    }

    fn home_dir(&self) -> Option<std::path::PathBuf> {
        self.home.clone()
    }

    fn pid(&self) -> u32 {
        self.pid
    }

    fn process_alive(&self, pid: u32) -> bool {
        self.alive.lock().unwrap().contains(&pid)
    }

    fn hostname(&self) -> String {
        self.hostname.clone()
    }
}

/// State files in memory: `load` finds the first snapshot saved with the id (not found:
/// `USER.INPUT.VALIDATION_FAILED`, as the file store); `save` appends; `list` gives every
/// snapshot saved, in order.
#[derive(Debug, Default)]
pub struct FakeStateStore(pub Mutex<Vec<crate::ports::store::RunSnapshot>>);

impl FakeStateStore {
    /// A store holding `snapshots`.
    pub fn with(snapshots: Vec<crate::ports::store::RunSnapshot>) -> Self {
        Self(Mutex::new(snapshots))
    }
}

impl crate::ports::store::StateStore for FakeStateStore {
    fn load(&self, run_id: &str) -> Result<crate::ports::store::RunSnapshot, AwfError> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .find(|s| s.run_id == run_id)
            .cloned()
            .ok_or_else(|| {
                AwfError::new(
                    ErrorCode::UserInputValidationFailed,
                    format!("workflow execution not found: {run_id}"),
                )
            })
    }

    fn list(&self) -> Result<Vec<crate::ports::store::RunSnapshot>, AwfError> {
        Ok(self.0.lock().unwrap().clone())
    }

    fn save(&self, snapshot: &crate::ports::store::RunSnapshot) -> Result<(), AwfError> {
        self.0.lock().unwrap().push(snapshot.clone());
        Ok(())
    }
}

/// Run locks in memory: a second `try_lock` of a held id fails as the real one does; dropping
/// the guard releases it.
#[derive(Debug, Default, Clone)]
pub struct FakeRunLocks {
    held: std::sync::Arc<Mutex<std::collections::BTreeSet<String>>>,
}

impl FakeRunLocks {
    /// The ids locked now.
    pub fn held(&self) -> Vec<String> {
        self.held.lock().unwrap().iter().cloned().collect()
    }
}

struct FakeLock {
    held: std::sync::Arc<Mutex<std::collections::BTreeSet<String>>>,
    id: String,
}

impl Drop for FakeLock {
    fn drop(&mut self) {
        self.held.lock().unwrap().remove(&self.id);
    }
}

impl crate::ports::locks::RunLocks for FakeRunLocks {
    fn try_lock(
        &self,
        run_id: &str,
    ) -> Result<Option<crate::ports::locks::RunLockGuard>, AwfError> {
        if !self.held.lock().unwrap().insert(run_id.to_owned()) {
            return Err(crate::ports::locks::still_running(run_id));
        }
        Ok(Some(crate::ports::locks::RunLockGuard::new(FakeLock {
            held: std::sync::Arc::clone(&self.held),
            id: run_id.to_owned(),
        })))
    }
}
