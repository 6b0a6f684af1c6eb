//! The shared runner of CLI agents: PATH check, argv, streaming NDJSON parse, errors, tokens
//! and sessions. Each CLI plugs in through [`CliAgent`].
//!
//! Source: spec/workflow.md §5.1, §5.3, §3.8; decisions.md ("system_prompt and role reach
//! every provider").

use std::collections::BTreeMap;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::PoisonError;

use awf_domain::error::AwfError;
use awf_domain::error::ErrorCode;
use awf_domain::event::OutputStream;
use awf_domain::ports::AgentProvider;
use awf_domain::ports::CommandExecutor;
use awf_domain::ports::agent::AgentCallback;
use awf_domain::ports::agent::AgentChunk;
use awf_domain::ports::agent::AgentRequest;
use awf_domain::ports::agent::AgentResponse;
use awf_domain::ports::agent::AgentSession;
use awf_domain::ports::agent::Role;
use awf_domain::ports::agent::Turn;
use awf_domain::ports::exec::CommandSpec;
use awf_domain::ports::exec::OutputCallback;
use awf_domain::ports::exec::Program;
use awf_domain::ports::exec::Termination;
use awf_domain::ports::exec::Utf8Chunks;
use awf_domain::run::TokenUsage;
use tokio_util::sync::CancellationToken;

use crate::parse::LineParser;
use crate::parse::LineSplitter;
use crate::parse::Parsed;
use crate::parse::Usage;

/// How much of stderr, and of stdout when the CLI exited non-zero without an error event the
/// parser understood, goes into an `EXECUTION.AGENT.FAILED` message (bytes, the tail of each).
pub const STDERR_TAIL_BYTES: usize = 2048;

/// One agent CLI: its binary, argv and output parser.
pub trait CliAgent: Send + Sync + 'static {
    /// The parser of the CLI's stdout.
    type Parser: LineParser + 'static;

    /// Provider name (`claude`, …).
    fn name(&self) -> &'static str;
    /// Binary looked up on PATH (`claude`, …).
    fn binary(&self) -> &'static str;
    /// How to install the binary (shown as the hint of `EXECUTION.AGENT.BINARY_NOT_FOUND`).
    fn install_hint(&self) -> &'static str;
    /// Every `options:` key [`CliAgent::argv`] reads besides [`COMMON_AGENT_OPTIONS`]
    /// (snake_case), each of which reaches the CLI.
    ///
    /// [`COMMON_AGENT_OPTIONS`]: awf_domain::ports::agent::COMMON_AGENT_OPTIONS
    fn options(&self) -> &'static [&'static str];
    /// Whether a later turn resumes through the session id the CLI printed (`-r <id>`,
    /// `exec resume <id>`, …); `false` for transcript-in-prompt CLIs.
    fn resumes_by_session_id(&self) -> bool {
        true
    }
    /// Validates the options and builds the argv (without the binary).
    ///
    /// # Errors
    /// `USER.AGENT.INVALID_OPTION`.
    fn argv(&self, request: &AgentRequest) -> Result<Vec<String>, AwfError>;
    /// Everything one call runs with: the argv, extra environment variables and the files
    /// to remove when the call ends (the MCP servers of [`AgentRequest::mcp`], declared
    /// through the CLI's own configuration mechanism; shared/spec/mcp.md §3.3). The default
    /// is [`CliAgent::argv`] alone. `env` is the process environment (`PATH`, `HOME`,
    /// `TMPDIR`, …); a variable of [`AgentRequest::env`] overrides it, as it will for the CLI.
    ///
    /// # Errors
    /// As [`CliAgent::argv`]; `SYSTEM.IO.*` when a configuration file cannot be written.
    fn invocation(
        &self,
        request: &AgentRequest,
        env: &BTreeMap<String, String>,
    ) -> Result<Invocation, AwfError> {
        let _ = env;
        Ok(Invocation {
            args: self.argv(request)?,
            ..Invocation::default()
        })
    }
    /// Whether this CLI hides its own tools when a step intercepts built-ins (see
    /// [`AgentProvider::hides_native_tools`]).
    fn hides_native_tools(&self) -> bool {
        false
    }
    /// A fresh parser for this request.
    fn parser(&self, request: &AgentRequest) -> Self::Parser;
    /// Provider-specific adjustment of the parse result (e.g. which Response to keep).
    fn adjust(&self, parsed: Parsed, _request: &AgentRequest, _stdout: &str) -> Parsed {
        parsed
    }
}

/// What one call of a CLI runs with ([`CliAgent::invocation`]).
#[derive(Debug, Default)]
pub struct Invocation {
    /// The argv (without the binary).
    pub args: Vec<String>,
    /// Variables added after the request's own (so they win).
    pub env: Vec<(String, String)>,
    /// Files and directories written for this call, removed when it is dropped: after the
    /// process ended, on an error, a timeout or a cancel, or when the call is abandoned.
    pub cleanup: crate::mcp::Cleanup,
}

/// An [`AgentProvider`] running the CLI `A` through a [`CommandExecutor`].
pub struct CliProvider<A: CliAgent> {
    agent: A,
    executor: Arc<dyn CommandExecutor>,
    env: Arc<BTreeMap<String, String>>,
}

impl<A: CliAgent> CliProvider<A> {
    /// A provider for `agent`; `env` is the process environment (PATH lookup).
    pub fn new(
        agent: A,
        executor: Arc<dyn CommandExecutor>,
        env: Arc<BTreeMap<String, String>>,
    ) -> Self {
        Self {
            agent,
            executor,
            env,
        }
    }

    /// The CLI this provider runs.
    pub fn agent(&self) -> &A {
        &self.agent
    }
}

/// The system prompt to pass: the request's, else `options.system_prompt`; blank = none.
pub(crate) fn system_prompt(request: &AgentRequest) -> Option<String> {
    request
        .system_prompt
        .clone()
        .or_else(|| {
            request
                .options
                .get("system_prompt")
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        })
        .filter(|s| !s.trim().is_empty())
}

/// The session id to resume, when the request continues a session that has one.
pub(crate) fn resume_id(request: &AgentRequest) -> Option<&str> {
    request
        .session
        .as_ref()
        .and_then(|s| s.session_id.as_deref())
        .filter(|s| !s.is_empty())
}

/// The prompt with the system prompt prepended (`<system>\n\n<prompt>`), unless the call
/// resumes a session (the CLI already has it).
pub(crate) fn prompt_with_system(request: &AgentRequest) -> String {
    match (resume_id(request), system_prompt(request)) {
        (None, Some(sys)) => format!("{sys}\n\n{}", request.prompt),
        _ => request.prompt.clone(),
    }
}

/// The turns a session holds before this call: its turns, or (for a fresh session) the
/// system prompt as the first turn.
pub(crate) fn history(request: &AgentRequest) -> Vec<Turn> {
    let Some(session) = &request.session else {
        return Vec::new();
    };
    let mut turns = session.turns.clone();
    if turns.is_empty()
        && let Some(sys) = system_prompt(request)
    {
        turns.push(Turn {
            role: Role::System,
            content: sys,
        });
    }
    turns
}

/// The session after this call (`None` when the request carried none): the previous turns
/// (seeded with the system prompt), the prompt and the answer; the new id, else the old one.
pub(crate) fn next_session(
    request: &AgentRequest,
    output: &str,
    new_id: Option<String>,
) -> Option<AgentSession> {
    let session = request.session.as_ref()?;
    let mut turns = history(request);
    turns.push(Turn {
        role: Role::User,
        content: request.prompt.clone(),
    });
    turns.push(Turn {
        role: Role::Assistant,
        content: output.to_owned(),
    });
    Some(AgentSession {
        session_id: new_id
            .filter(|s| !s.is_empty())
            .or_else(|| session.session_id.clone()),
        turns,
    })
}

/// Tokens: the reported usage, else estimates (`len/4` of the answer, and of the prompt,
/// system prompt and history for the input).
pub(crate) fn tokens(usage: Option<Usage>, request: &AgentRequest, output: &str) -> TokenUsage {
    match usage {
        Some(u) => TokenUsage {
            input: u.input,
            output: u.output,
            total: u.total(),
            estimated: false,
        },
        None => {
            let mut input_len = request.prompt.len();
            if request.session.is_some() {
                input_len += history(request)
                    .iter()
                    .map(|t| t.content.len())
                    .sum::<usize>();
            } else if let Some(sys) = system_prompt(request) {
                input_len += sys.len();
            }
            let input = (input_len / 4) as u64;
            let out = (output.len() / 4) as u64;
            TokenUsage {
                input,
                output: out,
                total: input.saturating_add(out),
                estimated: true,
            }
        }
    }
}

/// The last `max` bytes of `s` (on a char boundary), trimmed.
pub(crate) fn tail(s: &str, max: usize) -> &str {
    let s = s.trim_end();
    if s.len() <= max {
        return s.trim_start();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// What of a raw stdout is shown live when the parser found no answer in it: the plain-text
/// lines, without the JSON lines the parser could not read (a malformed or unknown event is
/// never printed as if the agent had said it). Their number goes to the debug log.
pub(crate) fn without_event_lines(stdout: &str) -> String {
    let mut kept = String::with_capacity(stdout.len());
    let mut dropped = 0usize;
    for line in stdout.split_inclusive('\n') {
        if matches!(line.trim_start().as_bytes().first(), Some(b'{' | b'[')) {
            dropped += 1;
        } else {
            kept.push_str(line);
        }
    }
    if dropped > 0 {
        tracing::debug!(
            lines = dropped,
            "agent output lines that are not events awf reads were left out of the live output"
        );
    }
    kept
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Finds `name` on `PATH` (the request's `PATH` override, else the process's); a name with a
/// `/` is checked as a path.
pub fn find_program(
    name: &str,
    env: &BTreeMap<String, String>,
    overrides: &[(String, String)],
) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return is_executable(&p).then_some(p);
    }
    let path = overrides
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .or_else(|| env.get("PATH").map(String::as_str))?;
    path.split(':')
        .map(|dir| Path::new(if dir.is_empty() { "." } else { dir }).join(name))
        .find(|p| is_executable(p))
}

/// Stream state shared with the output callback.
struct Feed<P> {
    decoder: Utf8Chunks,
    splitter: LineSplitter,
    parser: P,
    fed: usize,
    messages: usize,
    on_chunk: Option<AgentCallback>,
}

impl<P: LineParser> Feed<P> {
    /// Feeds raw stdout bytes (decoded as UTF-8 without splitting characters).
    fn push_bytes(&mut self, bytes: &[u8]) {
        let mut decoder = std::mem::take(&mut self.decoder);
        decoder.push(bytes, |text| self.push(text));
        self.decoder = decoder;
    }

    fn push(&mut self, text: &str) {
        self.fed += text.len();
        let mut chunks = Vec::new();
        let parser = &mut self.parser;
        self.splitter
            .push(text, |line| parser.parse_line_into(line, &mut chunks));
        self.deliver(chunks);
    }

    fn end(&mut self) {
        let mut decoder = std::mem::take(&mut self.decoder);
        decoder.finish(|text| self.push(text));
        let mut chunks = Vec::new();
        let parser = &mut self.parser;
        self.splitter
            .finish(|line| parser.parse_line_into(line, &mut chunks));
        self.deliver(chunks);
    }

    fn deliver(&mut self, chunks: Vec<AgentChunk>) {
        for c in chunks {
            if matches!(c, AgentChunk::Message(_)) {
                self.messages += 1;
            }
            if let Some(cb) = &self.on_chunk {
                cb(c);
            }
        }
    }
}

#[async_trait::async_trait]
impl<A: CliAgent> AgentProvider for CliProvider<A> {
    fn name(&self) -> &str {
        self.agent.name()
    }

    fn options(&self) -> Option<&'static [&'static str]> {
        Some(self.agent.options())
    }

    fn resumes_by_session_id(&self) -> bool {
        self.agent.resumes_by_session_id()
    }

    fn hides_native_tools(&self) -> bool {
        self.agent.hides_native_tools()
    }

    /// Every literal option [`CliAgent::argv`] refuses (a `model` claude does not take, a
    /// `permission_mode` out of its list), each said once: the refused key is taken out and
    /// the rest tried again (new user: `model: gpt-4o-mini` on a claude step validated
    /// clean and the run failed). Options holding `{{` are known only when the step runs.
    fn check_options(
        &self,
        options: &serde_json::Map<String, serde_json::Value>,
    ) -> Vec<awf_domain::ports::repository::Diagnostic> {
        let mut literal: serde_json::Map<String, serde_json::Value> = options
            .iter()
            .filter(|(_, v)| !v.as_str().is_some_and(|s| s.contains("{{")))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut out = Vec::new();
        for _ in 0..=options.len() {
            let request = AgentRequest {
                prompt: "check".to_owned(),
                options: literal.clone(),
                ..AgentRequest::default()
            };
            let Err(e) = self.agent.argv(&request) else {
                break;
            };
            let key = e
                .details()
                .get("option")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned);
            let mut d = awf_domain::ports::repository::Diagnostic::error(
                e.code(),
                key.clone().unwrap_or_default(),
                e.message().to_owned(),
            );
            if let Some(h) = e.hints().first() {
                d = d.with_hint(h.clone());
            }
            out.push(d);
            let Some(key) = key else { break };
            let before = literal.len();
            literal.retain(|name, _| awf_domain::ports::agent::option_key(name) != key.as_str());
            if literal.len() == before {
                break;
            }
        }
        out
    }

    async fn execute(
        &self,
        request: AgentRequest,
        on_chunk: Option<AgentCallback>,
        cancel: CancellationToken,
    ) -> Result<AgentResponse, AwfError> {
        let name = self.agent.name();
        let binary = self.agent.binary();
        if request.prompt.trim().is_empty() {
            return Err(AwfError::new(
                ErrorCode::ExecutionAgentFailed,
                format!("{name}: prompt cannot be empty"),
            ));
        }
        // Held until this function returns or its future is dropped (a cancel): the
        // injected MCP configuration never outlives the call.
        let Invocation {
            args,
            env: extra_env,
            cleanup: _cleanup,
        } = self.agent.invocation(&request, &self.env)?;
        let Some(program) = find_program(binary, &self.env, &request.env) else {
            return Err(AwfError::new(
                ErrorCode::ExecutionAgentBinaryNotFound,
                format!("{name}: the `{binary}` CLI was not found on PATH"),
            )
            .with_detail("provider", name)
            .with_detail("binary", binary)
            .with_hint(self.agent.install_hint()));
        };

        let feed = Arc::new(Mutex::new(Feed {
            decoder: Utf8Chunks::default(),
            splitter: LineSplitter::default(),
            parser: self.agent.parser(&request),
            fed: 0,
            messages: 0,
            on_chunk: on_chunk.clone(),
        }));
        let sink = Arc::clone(&feed);
        let callback: OutputCallback = Arc::new(move |stream, bytes| {
            if stream == OutputStream::Stdout {
                sink.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push_bytes(bytes);
            }
        });
        let spec = CommandSpec {
            program: Program::Exec {
                program: program.to_string_lossy().into_owned(),
                args,
            },
            dir: request.dir.clone(),
            env: request.env.iter().cloned().chain(extra_env).collect(),
            timeout: request.timeout,
            capture_limit: None,
            scope: request.scope.clone(),
        };
        let out = self
            .executor
            .run(spec, Some(callback), cancel)
            .await
            .map_err(|e| {
                AwfError::new(
                    ErrorCode::ExecutionAgentFailed,
                    format!("{name}: could not start `{binary}`: {}", e.message()),
                )
                .with_detail("provider", name)
            })?;
        match out.termination {
            Termination::TimedOut => {
                let after = request
                    .timeout
                    .map(|t| format!(" after {t:?}"))
                    .unwrap_or_default();
                return Err(AwfError::new(
                    ErrorCode::ExecutionAgentTimeout,
                    format!("{name}: agent timed out{after} and was stopped"),
                )
                .with_detail("provider", name));
            }
            Termination::Cancelled => {
                return Err(AwfError::new(
                    ErrorCode::ExecutionRunCancelled,
                    format!("{name}: agent cancelled"),
                ));
            }
            Termination::Exited => {}
        }

        let (parsed, messages) = {
            let mut guard = feed.lock().unwrap_or_else(PoisonError::into_inner);
            if guard.fed == 0 && !out.stdout.is_empty() {
                guard.push(&out.stdout);
            }
            guard.end();
            let messages = guard.messages;
            let parser = std::mem::replace(&mut guard.parser, self.agent.parser(&request));
            (parser.finish(), messages)
        };
        let parsed = self.agent.adjust(parsed, &request, &out.stdout);

        if out.exit_code != 0 || parsed.failed {
            let mut msg = if out.exit_code != 0 {
                format!("{name}: `{binary}` exited with status {}", out.exit_code)
            } else {
                format!("{name}: `{binary}` reported a failure")
            };
            if let Some(e) = parsed.error.as_deref().filter(|e| !e.is_empty()) {
                msg.push_str(": ");
                msg.push_str(e);
            }
            // Masked before it is cut: a secret across the cut leaves no suffix in clear.
            let stderr = request.secrets.mask(&out.stderr);
            let err_tail = tail(&stderr, STDERR_TAIL_BYTES);
            if !err_tail.is_empty() {
                msg.push_str("\nstderr: ");
                msg.push_str(err_tail);
            }
            let stdout = request.secrets.mask(&out.stdout);
            let out_tail = tail(&stdout, STDERR_TAIL_BYTES);
            if out.exit_code != 0 && parsed.error.is_none() && !out_tail.is_empty() {
                msg.push_str("\nstdout: ");
                msg.push_str(out_tail);
            }
            let mut err = AwfError::new(ErrorCode::ExecutionAgentFailed, msg)
                .with_detail("provider", name)
                .with_detail("exit_code", out.exit_code);
            // The engine tells a CLI hit by the signal that cancels the run from a failure.
            if let Some(sig) = out.signal {
                err = err.with_detail("signal", sig);
            }
            return Err(err);
        }

        let extracted = parsed.output.is_some();
        let output = parsed.output.unwrap_or_else(|| out.stdout.clone());
        if messages == 0 && !output.is_empty() {
            let shown = if extracted {
                output.clone()
            } else {
                without_event_lines(&output)
            };
            if let (Some(cb), false) = (&on_chunk, shown.trim().is_empty()) {
                cb(AgentChunk::Message(shown));
            }
        }
        let tokens = tokens(parsed.usage, &request, &output);
        let session = next_session(&request, &output, parsed.session_id);
        Ok(AgentResponse {
            output,
            response: parsed.response,
            tokens,
            session,
            raw: out.stdout,
            stderr: out.stderr,
            model: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_lines_are_not_shown_as_the_answer() {
        assert_eq!(
            without_event_lines("{\"type\": broken\nplain text\n[1,\n  {\"x\":1}\nlast"),
            "plain text\nlast"
        );
    }

    #[test]
    fn tail_keeps_the_end_on_a_char_boundary() {
        assert_eq!(tail("  short \n", 100), "short");
        assert_eq!(tail("abcdéf", 3), "éf");
        assert_eq!(tail("abcdef", 3), "def");
    }

    #[test]
    fn prompt_gets_the_system_prompt_unless_resuming() {
        let mut r = AgentRequest {
            prompt: "P".into(),
            system_prompt: Some("S".into()),
            ..AgentRequest::default()
        };
        assert_eq!(prompt_with_system(&r), "S\n\nP");
        r.session = Some(AgentSession::default());
        assert_eq!(prompt_with_system(&r), "S\n\nP");
        r.session = Some(AgentSession {
            session_id: Some("id".into()),
            turns: vec![],
        });
        assert_eq!(prompt_with_system(&r), "P");
    }

    #[test]
    fn estimates_tokens_without_usage() {
        let r = AgentRequest {
            prompt: "12345678".into(),
            system_prompt: Some("abcd".into()),
            ..AgentRequest::default()
        };
        assert_eq!(
            tokens(None, &r, "0123456789ab"),
            TokenUsage {
                input: 3,
                output: 3,
                total: 6,
                estimated: true
            }
        );
    }
}
