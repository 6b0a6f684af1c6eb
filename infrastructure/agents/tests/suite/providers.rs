//! CLI providers end to end over a fake CommandExecutor that replays recorded stdout in
//! small chunks.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use awf_agents::registry;
use awf_domain::error::AwfError;
use awf_domain::error::ErrorCode;
use awf_domain::event::OutputStream;
use awf_domain::ports::AgentRegistry;
use awf_domain::ports::CommandExecutor;
use awf_domain::ports::agent::AgentCallback;
use awf_domain::ports::agent::AgentChunk;
use awf_domain::ports::agent::AgentRequest;
use awf_domain::ports::agent::AgentResponse;
use awf_domain::ports::agent::AgentSession;
use awf_domain::ports::agent::Role;
use awf_domain::ports::agent::Turn;
use awf_domain::ports::exec::CommandOutput;
use awf_domain::ports::exec::CommandSpec;
use awf_domain::ports::exec::OutputCallback;
use awf_domain::ports::exec::Program;
use awf_domain::ports::exec::Termination;
use awf_domain::run::TokenUsage;
use pretty_assertions::assert_eq;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::fixtures::fixture;

/// `text` cut into pieces of about `size` bytes, on char boundaries.
pub fn pieces(text: &str, size: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + size).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        out.push(&text[start..end]);
        start = end;
    }
    out
}

struct Replay {
    stdout: String,
    stderr: String,
    exit: i32,
    termination: Termination,
    calls: Mutex<Vec<CommandSpec>>,
    /// Chunks seen by the agent callback at the moment each stdout piece was sent.
    seen_at_piece: Mutex<Vec<usize>>,
    probe: Mutex<Option<Arc<Mutex<Vec<AgentChunk>>>>>,
}

impl Replay {
    fn new(stdout: String, stderr: &str, exit: i32, termination: Termination) -> Arc<Self> {
        Arc::new(Self {
            stdout,
            stderr: stderr.into(),
            exit,
            termination,
            calls: Mutex::new(Vec::new()),
            seen_at_piece: Mutex::new(Vec::new()),
            probe: Mutex::new(None),
        })
    }
}

#[async_trait::async_trait]
impl CommandExecutor for Replay {
    async fn run(
        &self,
        spec: CommandSpec,
        on_output: Option<OutputCallback>,
        _cancel: CancellationToken,
    ) -> Result<CommandOutput, AwfError> {
        self.calls.lock().unwrap().push(spec);
        if let Some(cb) = on_output {
            for p in pieces(&self.stdout, 37) {
                cb(OutputStream::Stdout, p.as_bytes());
                if let Some(probe) = self.probe.lock().unwrap().as_ref() {
                    self.seen_at_piece
                        .lock()
                        .unwrap()
                        .push(probe.lock().unwrap().len());
                }
            }
            if !self.stderr.is_empty() {
                cb(OutputStream::Stderr, self.stderr.as_bytes());
            }
        }
        Ok(CommandOutput {
            exit_code: self.exit,
            stdout: self.stdout.clone(),
            stderr: self.stderr.clone(),
            termination: self.termination,
            truncated: false,
            signal: None,
        })
    }
}

struct Bed {
    _dir: tempfile::TempDir,
    bin: PathBuf,
    reg: Arc<dyn AgentRegistry>,
    exec: Arc<Replay>,
}

fn bed(binary: &str, exec: Arc<Replay>) -> Bed {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join(binary);
    std::fs::write(&bin, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let env = BTreeMap::from([(
        "PATH".to_owned(),
        format!("/nonexistent:{}", dir.path().display()),
    )]);
    let reg = registry(exec.clone(), env);
    Bed {
        _dir: dir,
        bin,
        reg,
        exec,
    }
}

fn recorded(path: &str) -> Arc<Replay> {
    let exit: i32 = fixture(&path.replace(".ndjson", ".exit"))
        .trim()
        .parse()
        .unwrap();
    let stderr = fixture(&path.replace(".ndjson", ".stderr"));
    Replay::new(fixture(path), &stderr, exit, Termination::Exited)
}

async fn run(
    b: &Bed,
    provider: &str,
    req: AgentRequest,
) -> (Result<AgentResponse, AwfError>, Vec<AgentChunk>) {
    let chunks = Arc::new(Mutex::new(Vec::new()));
    *b.exec.probe.lock().unwrap() = Some(chunks.clone());
    let sink = chunks.clone();
    let cb: AgentCallback = Arc::new(move |c| sink.lock().unwrap().push(c));
    let p = b.reg.get(provider).unwrap();
    let r = p.execute(req, Some(cb), CancellationToken::new()).await;
    let got = chunks.lock().unwrap().clone();
    (r, got)
}

fn req(prompt: &str) -> AgentRequest {
    AgentRequest {
        prompt: prompt.into(),
        ..AgentRequest::default()
    }
}

#[test]
fn registry_lists_every_provider() {
    let b = bed(
        "claude",
        Replay::new(String::new(), "", 0, Termination::Exited),
    );
    assert_eq!(
        b.reg.names(),
        [
            "claude",
            "codex",
            "gemini",
            "github_copilot",
            "mistral_vibe",
            "openai_compatible",
            "opencode"
        ]
    );
    assert!(b.reg.get("custom").is_none());
}

#[tokio::test]
async fn claude_text_streams_chunks_and_returns_the_result() {
    let b = bed("claude", recorded("claude/text.ndjson"));
    let mut r = req("say hi");
    r.system_prompt = Some("be brief".into());
    r.dir = Some(PathBuf::from("/work"));
    r.env = vec![("K".into(), "V".into())];
    r.timeout = Some(Duration::from_secs(30));
    r.options.insert("model".into(), json!("sonnet"));
    let (res, chunks) = run(&b, "claude", r).await;
    let res = res.unwrap();
    assert_eq!(chunks, [AgentChunk::Message("hello from mock".into())]);
    assert_eq!(res.output, "hello from mock");
    assert_eq!(
        res.tokens,
        TokenUsage {
            input: 11,
            output: 7,
            total: 18,
            estimated: false
        }
    );
    assert_eq!(res.session, None);
    assert_eq!(res.response, None);
    assert_eq!(res.raw, fixture("claude/text.ndjson"));
    let calls = b.exec.calls.lock().unwrap().clone();
    assert_eq!(
        calls,
        [CommandSpec {
            program: Program::Exec {
                program: b.bin.to_string_lossy().into_owned(),
                args: [
                    "-p",
                    "say hi",
                    "--model",
                    "sonnet",
                    "--output-format",
                    "stream-json",
                    "--verbose",
                    "--system-prompt",
                    "be brief"
                ]
                .map(String::from)
                .to_vec(),
            },
            dir: Some(PathBuf::from("/work")),
            env: vec![("K".into(), "V".into())],
            timeout: Some(Duration::from_secs(30)),
            capture_limit: None,
            scope: None,
        }]
    );
}

#[tokio::test]
async fn chunks_arrive_while_stdout_streams() {
    let b = bed("claude", recorded("claude/tool.ndjson"));
    let (res, chunks) = run(&b, "claude", req("run the marker tool")).await;
    assert_eq!(res.unwrap().output, "done after tool");
    assert_eq!(chunks.len(), 3);
    let seen = b.exec.seen_at_piece.lock().unwrap().clone();
    // Before the last piece was sent, the tool call had already been delivered.
    assert!(seen[seen.len() - 2] >= 1, "{seen:?}");
    assert_eq!(seen[0], 0);
    assert_eq!(*seen.last().unwrap(), 3);
}

#[tokio::test]
async fn claude_session_gets_id_and_turns() {
    let b = bed("claude", recorded("claude/resume-1.ndjson"));
    let mut r = req("remember the word ZEBRA");
    r.system_prompt = Some("SYS".into());
    r.session = Some(AgentSession::default());
    let (res, _) = run(&b, "claude", r).await;
    let res = res.unwrap();
    assert_eq!(
        res.session,
        Some(AgentSession {
            session_id: Some("ddd24755-1f99-4887-b7bf-da1350e37382".into()),
            turns: vec![
                Turn {
                    role: Role::System,
                    content: "SYS".into()
                },
                Turn {
                    role: Role::User,
                    content: "remember the word ZEBRA".into()
                },
                Turn {
                    role: Role::Assistant,
                    content: "first answer ALPHA".into()
                },
            ],
        })
    );

    let b = bed("claude", recorded("claude/resume-2.ndjson"));
    let mut r = req("what word?");
    r.session = res.session.clone();
    let (res2, _) = run(&b, "claude", r).await;
    let res2 = res2.unwrap();
    let Program::Exec { args, .. } = &b.exec.calls.lock().unwrap()[0].program else {
        panic!()
    };
    assert_eq!(
        args[args.len() - 2..],
        [
            "-r".to_owned(),
            "ddd24755-1f99-4887-b7bf-da1350e37382".to_owned()
        ]
    );
    let s = res2.session.unwrap();
    assert_eq!(s.turns.len(), 5);
    assert_eq!(
        s.turns[4],
        Turn {
            role: Role::Assistant,
            content: "the word was ZEBRA".into()
        }
    );
}

#[tokio::test]
async fn claude_error_result_fails_with_its_text() {
    let b = bed("claude", recorded("claude/error.ndjson"));
    let (res, _) = run(&b, "claude", req("trigger the error")).await;
    let e = res.unwrap_err();
    assert_eq!(e.code(), ErrorCode::ExecutionAgentFailed);
    assert_eq!(
        e.message(),
        "claude: `claude` exited with status 1: API Error: 400 mock bad request"
    );
}

#[tokio::test]
async fn gemini_failure_carries_the_stderr_tail() {
    let b = bed("gemini", recorded("gemini/error.ndjson"));
    let (res, _) = run(&b, "gemini", req("trigger the error")).await;
    let e = res.unwrap_err();
    assert_eq!(e.code(), ErrorCode::ExecutionAgentFailed);
    let stderr = fixture("gemini/error.stderr");
    assert!(e.message().starts_with(
        "gemini: `gemini` exited with status 144: [API Error: {\"error\":{\"code\":400,\"message\":\"mock bad request\",\"status\":\"INVALID_ARGUMENT\"}}]\nstderr: "
    ), "{}", e.message());
    assert!(e.message().ends_with(stderr.trim_end()));
}

/// Issue 7: a CLI that exits non-zero without an error event awf understands has the tail of
/// its stdout in the error as well as stderr (stdout is often where the CLI said why).
#[tokio::test]
async fn failure_without_an_error_event_carries_the_stdout_tail() {
    for provider in ["claude", "codex", "gemini", "opencode"] {
        let b = bed(
            provider,
            Replay::new(
                "starting\nfatal: settings file is not valid JSON\n".into(),
                "warning: old node\n",
                2,
                Termination::Exited,
            ),
        );
        let (res, _) = run(&b, provider, req("x")).await;
        let e = res.unwrap_err();
        assert_eq!(e.code(), ErrorCode::ExecutionAgentFailed);
        assert_eq!(
            e.message(),
            format!(
                "{provider}: `{provider}` exited with status 2\nstderr: warning: old node\nstdout: starting\nfatal: settings file is not valid JSON"
            )
        );
    }
}

#[tokio::test]
async fn codex_tool_turn_and_fresh_session_prompt() {
    let b = bed("codex", recorded("codex/tool.ndjson"));
    let mut r = req("run the marker tool");
    r.system_prompt = Some("SYS".into());
    r.session = Some(AgentSession::default());
    let (res, chunks) = run(&b, "codex", r).await;
    let res = res.unwrap();
    assert_eq!(chunks.len(), 3);
    assert_eq!(res.output, "done after tool");
    assert_eq!(
        res.tokens,
        TokenUsage {
            input: 22,
            output: 14,
            total: 36,
            estimated: false
        }
    );
    assert_eq!(
        res.session.unwrap().session_id.as_deref(),
        Some("01a229f7-5434-7cc1-b570-7f3463341024")
    );
    let Program::Exec { args, .. } = &b.exec.calls.lock().unwrap()[0].program else {
        panic!()
    };
    assert_eq!(
        args,
        &[
            "exec",
            "--json",
            "--skip-git-repo-check",
            "SYS\n\nrun the marker tool"
        ]
    );
}

#[tokio::test]
async fn opencode_resume_keeps_the_session() {
    let b = bed("opencode", recorded("opencode/resume-2.ndjson"));
    let mut r = req("what word?");
    r.session = Some(AgentSession {
        session_id: Some("ses_dd6092f39ffertmqw1mtilBxEx".into()),
        turns: vec![
            Turn {
                role: Role::User,
                content: "remember the word ZEBRA".into(),
            },
            Turn {
                role: Role::Assistant,
                content: "first answer ALPHA".into(),
            },
        ],
    });
    let (res, chunks) = run(&b, "opencode", r).await;
    let res = res.unwrap();
    assert_eq!(chunks, [AgentChunk::Message("the word was ZEBRA".into())]);
    assert_eq!(
        res.tokens,
        TokenUsage {
            input: 23,
            output: 5,
            total: 28,
            estimated: false
        }
    );
    let s = res.session.unwrap();
    assert_eq!(
        s.session_id.as_deref(),
        Some("ses_dd6092f39ffertmqw1mtilBxEx")
    );
    assert_eq!(s.turns.len(), 4);
    let Program::Exec { args, .. } = &b.exec.calls.lock().unwrap()[0].program else {
        panic!()
    };
    assert_eq!(
        args,
        &[
            "run",
            "what word?",
            "--format",
            "json",
            "-s",
            "ses_dd6092f39ffertmqw1mtilBxEx"
        ]
    );
}

#[tokio::test]
async fn vibe_text_output_is_estimated() {
    let b = bed(
        "vibe",
        Replay::new("The answer is 42.\n".into(), "", 0, Termination::Exited),
    );
    let (res, chunks) = run(&b, "mistral_vibe", req("question?")).await;
    let res = res.unwrap();
    assert_eq!(chunks, [AgentChunk::Message("The answer is 42.\n".into())]);
    assert_eq!(res.output, "The answer is 42.");
    assert_eq!(
        res.tokens,
        TokenUsage {
            input: 2,
            output: 4,
            total: 6,
            estimated: true
        }
    );
}

#[tokio::test]
async fn missing_binary_names_the_package() {
    let b = bed(
        "claude",
        Replay::new(String::new(), "", 0, Termination::Exited),
    );
    let (res, _) = run(&b, "codex", req("x")).await;
    let e = res.unwrap_err();
    assert_eq!(e.code(), ErrorCode::ExecutionAgentBinaryNotFound);
    assert_eq!(e.message(), "codex: the `codex` CLI was not found on PATH");
    assert_eq!(
        e.hints(),
        ["Install the Codex CLI: npm install -g @openai/codex"]
    );
    assert!(b.exec.calls.lock().unwrap().is_empty());
}

#[tokio::test]
async fn invalid_option_fails_before_running() {
    let b = bed(
        "gemini",
        Replay::new(String::new(), "", 0, Termination::Exited),
    );
    let mut r = req("x");
    r.options.insert("model".into(), json!("gpt-4o"));
    let (res, _) = run(&b, "gemini", r).await;
    assert_eq!(res.unwrap_err().code(), ErrorCode::UserAgentInvalidOption);
    assert!(b.exec.calls.lock().unwrap().is_empty());
}

#[tokio::test]
async fn timeout_and_cancel_map_to_their_codes() {
    let b = bed(
        "claude",
        Replay::new(String::new(), "", -1, Termination::TimedOut),
    );
    let mut r = req("x");
    r.timeout = Some(Duration::from_secs(2));
    let (res, _) = run(&b, "claude", r).await;
    let e = res.unwrap_err();
    assert_eq!(e.code(), ErrorCode::ExecutionAgentTimeout);
    assert_eq!(
        e.message(),
        "claude: agent timed out after 2s and was stopped"
    );
    let b = bed(
        "claude",
        Replay::new(String::new(), "", -1, Termination::Cancelled),
    );
    let (res, _) = run(&b, "claude", req("x")).await;
    assert_eq!(res.unwrap_err().code(), ErrorCode::ExecutionRunCancelled);
}

#[tokio::test]
async fn a_secret_across_the_stderr_or_stdout_tail_cut_leaves_no_suffix_in_clear() {
    let secret = "sk-SECRETSUFFIXabcdefghij";
    // The secret straddles the start of the kept tail (the last STDERR_TAIL_BYTES bytes).
    let tail = awf_agents::STDERR_TAIL_BYTES;
    for before_cut in [4, 10, 20] {
        let stderr = format!(
            "{}{secret}{}",
            "x".repeat(100),
            "y".repeat(tail - (secret.len() - before_cut))
        );
        let b = bed(
            "gemini",
            Replay::new(String::new(), &stderr, 1, Termination::Exited),
        );
        let mut r = req("p");
        r.secrets = awf_domain::mask::Masker::from_named([("GEMINI_API_KEY", secret)]);
        let (res, _) = run(&b, "gemini", r).await;
        let e = res.unwrap_err();
        assert!(!e.message().contains("SUFFIX"), "{}", e.message());
        assert!(!e.message().contains("abcdefghij"), "{}", e.message());
        // The stdout tail (no error event understood) is masked before its cut too.
        let b = bed(
            "gemini",
            Replay::new(stderr.clone(), "", 1, Termination::Exited),
        );
        let mut r = req("p");
        r.secrets = awf_domain::mask::Masker::from_named([("GEMINI_API_KEY", secret)]);
        let (res, _) = run(&b, "gemini", r).await;
        let e = res.unwrap_err();
        assert!(e.message().contains("\nstdout: "), "{}", e.message());
        assert!(!e.message().contains("SUFFIX"), "{}", e.message());
        assert!(!e.message().contains("abcdefghij"), "{}", e.message());
    }
}
