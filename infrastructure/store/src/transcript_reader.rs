//! Reads a recorded run's event log back from its transcripts (the [`EventLogReader`] of the
//! file store): the envelopes of the root run (`<root>/transcripts/<run_id>.jsonl`) and of
//! its sub-workflow runs (one file each, named by the `child_run_id` of the parent's
//! `step.call_workflow.started` line), merged into the order they were published.
//!
//! # Order and positions
//! Each file is in its run's order. A child's lines join the merge after the parent's
//! `step.call_workflow.started` line; then the next line is the one with the earliest
//! timestamp, a tie going to the most recently started run (a sequential `call_workflow`: the
//! child's events before the parent's next ones, as they were published). Timestamps keep
//! milliseconds, so the events of sub-workflows that ran at the same time (in parallel
//! branches) within one millisecond may come back in another order than live. While a child
//! run has not finished and its file has no further line yet, the merge stops there (a run
//! still being written: nothing later is numbered before the child's next line arrives),
//! unless its parent starts a new attempt (resume) or ends. A resumed parent that continues
//! the same child run (`step.call_workflow.started` naming it again) brings that child's next
//! attempt, further down its file, back into the merge.
//!
//! # What a transcript does not keep, and how it comes back
//! - `seq`: lines are renumbered in the file (the parent's `step.call_workflow.completed`
//!   line, which the engine does not emit, takes a number; a resumed attempt continues the
//!   file's numbers). Read back, each run's envelopes count from 1 again in each attempt (an
//!   attempt starts after a `run.completed`, or at a `run.started` with `resumed_from`), and
//!   the synthesized line is skipped (the child's own `run.completed` is its `RunFinished`).
//! - `RunStarted.pid`: from the line; a line written before it was kept takes the run's
//!   state file's `owner_pid` for its latest attempt while it has not ended, else 0.
//! - `StepFinished.state`: status, error, exit code, error code and the approval gate's
//!   option from the line (a line written before the last two were kept has neither); `output` and `stderr`
//!   are the step's `step.output` texts since it started (or since its last retry), or the
//!   files `step.completed` names for outputs over 64 KiB; `attempts` counts its
//!   `step.retrying` lines; `started_at` / `completed_at` are the line's (the state's own
//!   times; the times of the `step.started` and `step.completed` lines in a transcript
//!   written before they were kept); agent tokens,
//!   `response`, `json`, captured `outputs`, tool-call entries, cost and fallback records are
//!   not kept (they are in the run's state file, which `awf status` reads).
//! - `OutputChunk` past a stream's first 64 KiB (`bytes` only): its text is read from the
//!   step's output file at the chunk's offset; empty when that file is gone.
//! - `AgentMessageChunk` / `AgentThoughtChunk`, `ToolCall`, `ToolCallResult`: the step is the
//!   last segment of the line's path.
//! - `RunFinished.result`: status, exit code, terminal, duration and error from the line;
//!   `states` from the run's `StepFinished` lines (by state name); `outputs` from the run's
//!   state file; the success terminal's `message` and the spend are not kept.
//! - `InteractionRequired`: a missing input comes back as a required string input with only
//!   its name (no description, type or rules); a breakpoint without its preview (routes,
//!   command, timeout).
//! - A line that is not valid JSON, or of a type this reader does not know, is skipped; a
//!   last line without its newline (being written) is not read yet.
//!
//! Source: spec/workflow.md §3.15 (line format), the module docs of `transcript.rs`.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::SystemTime;

use awf_domain::AwfError;
use awf_domain::event::EventEnvelope;
use awf_domain::event::LogLevel;
use awf_domain::event::OutputBytes;
use awf_domain::event::OutputStream;
use awf_domain::event::RunEvent;
use awf_domain::event::StepPreview;
use awf_domain::event::ToolFidelity;
use awf_domain::interaction::InteractionRequest;
use awf_domain::interaction::RequestKind;
use awf_domain::interaction::Resolution;
use awf_domain::ports::store::EventLogReader;
use awf_domain::ports::store::RecordedLog;
use awf_domain::run::RunId;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use awf_domain::run::StateResult;
use awf_domain::run::StepState;
use awf_domain::run::StepStatus;
use awf_domain::timefmt::parse_rfc3339;
use awf_domain::workflow::InputDef;
use awf_domain::workflow::InputType;
use serde_json::Value;

use crate::Store;
use crate::StorePaths;

/// Most nested sub-workflow files followed (a cycle of ids in corrupt files ends there).
const MAX_RUNS: usize = 4096;

/// One parsed transcript line.
struct Line {
    run_id: String,
    parent_run_id: Option<String>,
    child_run_id: Option<String>,
    kind: String,
    path: String,
    iteration: Option<usize>,
    at: SystemTime,
    payload: Value,
}

/// Complete lines of a transcript file; `None` when it does not exist.
fn read_lines(path: &Path) -> Result<Option<Vec<Line>>, AwfError> {
    let text = match File::open(path) {
        Ok(mut f) => {
            let mut bytes = Vec::new();
            f.read_to_end(&mut bytes)
                .map_err(|e| crate::read_failed("the transcript", path, e))?;
            String::from_utf8_lossy(&bytes).into_owned()
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(crate::read_failed("the transcript", path, e)),
    };
    // A last line without its newline is still being written.
    let complete = text.rfind('\n').map_or("", |i| &text[..i]);
    Ok(Some(complete.lines().filter_map(parse_line).collect()))
}

fn parse_line(l: &str) -> Option<Line> {
    let mut v: Value = serde_json::from_str(l).ok()?;
    let o = v.as_object_mut()?;
    o.get("seq").and_then(Value::as_u64)?;
    let s = |k: &str| o.get(k).and_then(Value::as_str).map(str::to_owned);
    Some(Line {
        run_id: s("run_id")?,
        parent_run_id: s("parent_run_id"),
        child_run_id: s("child_run_id"),
        kind: s("type")?,
        path: s("path").unwrap_or_default(),
        iteration: o
            .get("iteration")
            .and_then(Value::as_u64)
            .and_then(|i| usize::try_from(i).ok()),
        at: s("timestamp")
            .and_then(|t| parse_rfc3339(&t))
            .unwrap_or(SystemTime::UNIX_EPOCH),
        payload: o.remove("payload").unwrap_or(Value::Null),
    })
}

/// One run's file in the merge.
struct Stream {
    lines: Vec<Line>,
    next: usize,
    /// Its `run.completed` was read (or its parent moved on without it).
    finished: bool,
    /// Order of activation (ties go to the highest).
    rank: usize,
    /// The run that called it.
    parent: Option<String>,
    conv: Converter,
}

/// Per-run state of the line → event conversion.
#[derive(Default)]
struct Converter {
    /// seq of the next envelope in the current attempt.
    seq: u64,
    /// The last line was `run.completed`: the next line starts a new attempt.
    ended: bool,
    /// Identifier of the current attempt's `run.started`.
    identifier: String,
    /// Per path: the step's start time, attempts, stdout and stderr so far.
    steps: HashMap<String, StepAcc>,
    /// Bytes of each (path, stream) since the step started (offsets in its output file).
    offsets: HashMap<(String, bool), u64>,
    /// `StepFinished` states of the current attempt, by state name.
    states: BTreeMap<String, StateResult>,
    /// The output files of bytes-only chunks, by line index: (file, stream).
    chunk_files: HashMap<usize, String>,
}

#[derive(Default)]
struct StepAcc {
    started: Option<SystemTime>,
    attempts: u32,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

fn step_of(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).to_owned()
}

fn str_of(p: &Value, k: &str) -> Option<String> {
    p.get(k).and_then(Value::as_str).map(str::to_owned)
}

fn fidelity(p: &Value) -> ToolFidelity {
    serde_json::from_value(p.get("fidelity").cloned().unwrap_or(Value::Null)).unwrap_or_default()
}

fn run_status(s: &str) -> RunStatus {
    match s {
        "success" => RunStatus::Success,
        "cancelled" => RunStatus::Cancelled,
        _ => RunStatus::Failure,
    }
}

/// For each bytes-only `step.output` line, the output file the attempt's end names for its
/// stream: the step's later `step.completed`, or the `step.retrying` that ended a failed
/// attempt (each attempt has a file of its own, its chunks' bytes from offset 0).
fn chunk_files(lines: &[Line]) -> HashMap<usize, String> {
    let mut pending: HashMap<(String, bool), String> = HashMap::new();
    let mut out = HashMap::new();
    for (i, l) in lines.iter().enumerate().rev() {
        match l.kind.as_str() {
            "step.completed" | "step.retrying" => {
                for (key, stderr) in [("output_file", false), ("stderr_file", true)] {
                    // An attempt that names no file of a stream had it all inline: the
                    // later attempt's file is not its own.
                    match str_of(&l.payload, key) {
                        Some(f) => pending.insert((l.path.clone(), stderr), f),
                        None => pending.remove(&(l.path.clone(), stderr)),
                    };
                }
            }
            "step.started" => {
                pending.retain(|(p, _), _| p != &l.path);
            }
            "step.output" if l.payload.get("text").is_none() => {
                let stderr = l.payload.get("stream").and_then(Value::as_str) == Some("stderr");
                if let Some(f) = pending.get(&(l.path.clone(), stderr)) {
                    out.insert(i, f.clone());
                }
            }
            _ => {}
        }
    }
    out
}

/// Reads byte ranges of output files, each opened once.
struct Files<'a> {
    root: &'a Path,
    open: HashMap<String, Option<File>>,
}

impl Files<'_> {
    fn range(&mut self, rel: &str, offset: u64, len: u64) -> Vec<u8> {
        let root = self.root;
        let f = self
            .open
            .entry(rel.to_owned())
            .or_insert_with(|| File::open(root.join(rel)).ok());
        let Some(f) = f else {
            return Vec::new();
        };
        let mut buf = vec![0; usize::try_from(len).unwrap_or(0)];
        let mut read = 0;
        while read < buf.len() {
            match f.read_at(&mut buf[read..], offset + read as u64) {
                Ok(0) | Err(_) => break,
                Ok(n) => read += n,
            }
        }
        buf.truncate(read);
        buf
    }

    fn whole(&mut self, rel: &str) -> Option<Vec<u8>> {
        let mut s = Vec::new();
        File::open(self.root.join(rel))
            .ok()?
            .read_to_end(&mut s)
            .ok()?;
        Some(s)
    }
}

impl Converter {
    /// The event of line `idx`; `None` for a line that is no event of its own.
    fn convert(
        &mut self,
        l: &Line,
        idx: usize,
        files: &mut Files<'_>,
        paths: &StorePaths,
    ) -> Option<EventEnvelope> {
        let p = &l.payload;
        let name = || str_of(p, "name").unwrap_or_else(|| step_of(&l.path));
        let resumed =
            l.kind == "run.started" && p.get("resumed_from").is_some_and(|r| !r.is_null());
        if self.ended || resumed {
            self.seq = 0;
            self.ended = false;
            self.states.clear();
        }
        let event = match l.kind.as_str() {
            "run.started" => {
                self.identifier = str_of(p, "workflow").unwrap_or_default();
                // Kept on the line since it was recorded; an older transcript's attempt
                // takes the state file's owner (see `clear_ended_pids`).
                let pid = match p
                    .get("pid")
                    .and_then(Value::as_u64)
                    .and_then(|n| u32::try_from(n).ok())
                {
                    Some(n) => n,
                    None => crate::state::load(paths, &l.run_id)
                        .ok()
                        .and_then(|s| s.owner_pid)
                        .unwrap_or(0),
                };
                RunEvent::RunStarted {
                    workflow: str_of(p, "workflow_name").unwrap_or_default(),
                    identifier: self.identifier.clone(),
                    workflow_path: str_of(p, "workflow_path"),
                    inputs: p
                        .get("inputs")
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default(),
                    resumed_from: str_of(p, "resumed_from"),
                    pid,
                    mocks: Default::default(),
                    working_dir: str_of(p, "working_dir"),
                }
            }
            "run.completed" => {
                self.ended = true;
                let outputs = crate::state::load(paths, &l.run_id)
                    .map(|s| s.outputs)
                    .unwrap_or_default();
                RunEvent::RunFinished {
                    result: Box::new(RunResult {
                        run_id: Some(RunId(l.run_id.clone())),
                        workflow: self.identifier.clone(),
                        status: run_status(p.get("status").and_then(Value::as_str).unwrap_or("")),
                        exit_code: p
                            .get("exit_code")
                            .and_then(Value::as_u64)
                            .and_then(|c| u8::try_from(c).ok())
                            .unwrap_or(1),
                        terminal: str_of(p, "terminal"),
                        duration_ms: p.get("duration_ms").and_then(Value::as_u64).unwrap_or(0),
                        states: std::mem::take(&mut self.states),
                        outputs,
                        error: p
                            .get("error")
                            .and_then(|e| serde_json::from_value(e.clone()).ok()),
                        message: None,
                        spend: None,
                    }),
                }
            }
            "step.started" => {
                self.steps.insert(
                    l.path.clone(),
                    StepAcc {
                        started: Some(l.at),
                        attempts: 1,
                        ..StepAcc::default()
                    },
                );
                self.offsets.retain(|(path, _), _| path != &l.path);
                RunEvent::StepStarted {
                    step: name(),
                    kind: str_of(p, "kind").unwrap_or_default(),
                    command: str_of(p, "command"),
                }
            }
            "step.retrying" => {
                let attempt = p
                    .get("attempt")
                    .and_then(Value::as_u64)
                    .and_then(|a| u32::try_from(a).ok())
                    .unwrap_or(2);
                let acc = self.steps.entry(l.path.clone()).or_default();
                acc.attempts = attempt;
                acc.stdout.clear();
                acc.stderr.clear();
                // The next attempt's chunks are read from its own file, from its start.
                self.offsets.retain(|(path, _), _| path != &l.path);
                RunEvent::StepRetrying {
                    step: name(),
                    attempt,
                    delay_ms: p.get("delay_ms").and_then(Value::as_u64).unwrap_or(0),
                    reason: p.get("reason").and_then(Value::as_str).map(str::to_owned),
                }
            }
            "step.output" => {
                let stderr = p.get("stream").and_then(Value::as_str) == Some("stderr");
                let offset = self.offsets.entry((l.path.clone(), stderr)).or_insert(0);
                let (bytes, len) = match p.get("text").and_then(Value::as_str) {
                    Some(t) => (t.as_bytes().to_vec(), t.len() as u64),
                    None => {
                        let len = p.get("bytes").and_then(Value::as_u64).unwrap_or(0);
                        let bytes = self
                            .chunk_files
                            .get(&idx)
                            .map(|f| files.range(f, *offset, len))
                            .unwrap_or_default();
                        (bytes, len)
                    }
                };
                // The file's offsets count every chunk, read or not.
                *offset += len;
                let acc = self.steps.entry(l.path.clone()).or_default();
                if stderr {
                    acc.stderr.extend_from_slice(&bytes);
                } else {
                    acc.stdout.extend_from_slice(&bytes);
                }
                RunEvent::OutputChunk {
                    step: name(),
                    stream: if stderr {
                        OutputStream::Stderr
                    } else {
                        OutputStream::Stdout
                    },
                    text: OutputBytes(bytes),
                }
            }
            "step.completed" => {
                let step = name();
                let acc = self.steps.remove(&l.path).unwrap_or_default();
                let time = |key: &str| {
                    p.get(key)
                        .and_then(Value::as_str)
                        .and_then(awf_domain::timefmt::parse_rfc3339)
                };
                let mut st =
                    StepState::running(&step, time("started_at").or(acc.started).unwrap_or(l.at));
                st.status = serde_json::from_value(p.get("status").cloned().unwrap_or(Value::Null))
                    .unwrap_or(StepStatus::Failed);
                st.error = str_of(p, "error");
                st.exit_code = p
                    .get("exit_code")
                    .and_then(Value::as_i64)
                    .and_then(|c| i32::try_from(c).ok());
                st.error_code = p
                    .get("error_code")
                    .and_then(|c| serde_json::from_value(c.clone()).ok());
                st.approval = str_of(p, "approval");
                st.attempts = acc.attempts.max(1);
                st.completed_at = Some(time("completed_at").unwrap_or(l.at));
                let text = |key: &str, files: &mut Files<'_>, streamed: Vec<u8>| {
                    let bytes = str_of(p, key)
                        .and_then(|f| files.whole(&f))
                        .unwrap_or(streamed);
                    String::from_utf8_lossy(&bytes).into_owned()
                };
                // A step that streamed no stdout has its output on this line.
                st.output = match str_of(p, "output") {
                    Some(o) => o,
                    None => text("output_file", files, acc.stdout),
                }
                .into();
                st.stderr = text("stderr_file", files, acc.stderr).into();
                self.states.insert(step.clone(), StateResult::from(&st));
                RunEvent::StepFinished {
                    step,
                    kind: str_of(p, "kind").unwrap_or_default(),
                    state: Box::new(st),
                }
            }
            "step.call_workflow.started" => RunEvent::ChildRunStarted {
                step: name(),
                child_run_id: RunId(l.child_run_id.clone()?),
                workflow: str_of(p, "workflow").unwrap_or_default(),
            },
            "message.assistant" => {
                let block = p.get("blocks").and_then(|b| b.get(0))?;
                let text = str_of(block, "text").unwrap_or_default();
                if block.get("type").and_then(Value::as_str) == Some("thinking") {
                    RunEvent::AgentThoughtChunk {
                        step: step_of(&l.path),
                        text,
                    }
                } else {
                    RunEvent::AgentMessageChunk {
                        step: step_of(&l.path),
                        text,
                    }
                }
            }
            "tool.call" => RunEvent::ToolCall {
                step: step_of(&l.path),
                id: str_of(p, "call_id").unwrap_or_default(),
                name: str_of(p, "name").unwrap_or_default(),
                input: p.get("input").cloned().unwrap_or(Value::Null),
                fidelity: fidelity(p),
            },
            "tool.result" => RunEvent::ToolCallResult {
                step: step_of(&l.path),
                id: str_of(p, "call_id").unwrap_or_default(),
                output: str_of(p, "output").unwrap_or_default(),
                is_error: p.get("error").and_then(Value::as_bool).unwrap_or(false),
                fidelity: fidelity(p),
            },
            "log" => RunEvent::Log {
                step: str_of(p, "name"),
                level: serde_json::from_value(p.get("level").cloned().unwrap_or(Value::Null))
                    .unwrap_or(LogLevel::Info),
                message: str_of(p, "message").unwrap_or_default(),
            },
            "input.required" | "breakpoint" | "approval.required" => {
                let request_id = str_of(p, "request_id")?;
                let kind = match l.kind.as_str() {
                    "approval.required" => RequestKind::Approval {
                        message: str_of(p, "message").unwrap_or_default(),
                        options: serde_json::from_value(
                            p.get("options").cloned().unwrap_or(Value::Null),
                        )
                        .unwrap_or_default(),
                    },
                    "breakpoint" => RequestKind::Breakpoint {
                        state_kind: str_of(p, "kind").unwrap_or_default(),
                        previous: str_of(p, "previous"),
                        preview: Box::new(StepPreview::default()),
                    },
                    _ => match str_of(p, "input") {
                        Some(input) => RequestKind::MissingInput {
                            input: Box::new(InputDef {
                                name: input,
                                ty: InputType::String,
                                description: None,
                                required: true,
                                default: None,
                                validation: Default::default(),
                            }),
                            problem: str_of(p, "problem"),
                        },
                        None => RequestKind::ConversationTurn {
                            prompt: str_of(p, "prompt").unwrap_or_default(),
                        },
                    },
                };
                RunEvent::InteractionRequired {
                    request: Box::new(InteractionRequest {
                        request_id,
                        step: str_of(p, "name"),
                        kind,
                        timeout_ms: p.get("timeout_ms").and_then(Value::as_u64),
                    }),
                }
            }
            "interaction.resolved" => {
                let mut r = p.clone();
                if let Some(o) = r.as_object_mut() {
                    o.remove("request_id");
                }
                RunEvent::InteractionResolved {
                    request_id: str_of(p, "request_id")?,
                    resolution: serde_json::from_value::<Resolution>(r).ok()?,
                }
            }
            // `step.call_workflow.completed` (the child's own `run.completed` is its
            // `RunFinished`) and unknown types.
            _ => return None,
        };
        self.seq += 1;
        Some(EventEnvelope {
            seq: self.seq,
            run_id: RunId(l.run_id.clone()),
            parent_run_id: l.parent_run_id.clone().map(RunId),
            at: l.at,
            path: l.path.clone(),
            iteration: l.iteration,
            event,
        })
    }
}

/// The merged log of root run `run_id`; `None` when it has no transcript.
pub(crate) fn read_log(paths: &StorePaths, run_id: &str) -> Result<Option<RecordedLog>, AwfError> {
    if !crate::state::valid_id(run_id) {
        return Ok(None);
    }
    let Some(lines) = read_lines(&paths.transcript_file(run_id))? else {
        return Ok(None);
    };
    let mut files = Files {
        root: &paths.data_root,
        open: HashMap::new(),
    };
    let mut streams: HashMap<String, Stream> = HashMap::new();
    let mut rank = 0;
    let new_stream = |lines: Vec<Line>, parent: Option<String>, rank: usize| Stream {
        conv: Converter {
            chunk_files: chunk_files(&lines),
            ..Converter::default()
        },
        lines,
        next: 0,
        finished: false,
        rank,
        parent,
    };
    streams.insert(run_id.to_owned(), new_stream(lines, None, rank));
    let mut out = Vec::new();
    // Positions of the `RunStarted`s whose line has no `pid` (written before it was kept).
    let mut unrecorded_pids = std::collections::HashSet::new();
    let mut complete = false;
    loop {
        // An unfinished run whose file has nothing more yet holds the merge.
        if streams
            .values()
            .any(|s| !s.finished && s.next >= s.lines.len() && s.parent.is_some())
        {
            break;
        }
        let pick = streams
            .iter()
            .filter(|(_, s)| !s.finished && s.next < s.lines.len())
            .min_by(|(_, a), (_, b)| {
                a.lines[a.next]
                    .at
                    .cmp(&b.lines[b.next].at)
                    .then(b.rank.cmp(&a.rank))
            })
            .map(|(id, _)| id.clone());
        let Some(id) = pick else { break };
        let Some(s) = streams.get_mut(&id) else { break };
        let idx = s.next;
        s.next += 1;
        let line = &s.lines[idx];
        let starts_attempt = line.kind == "run.started";
        let pid_unrecorded = starts_attempt && line.payload.get("pid").is_none();
        let ends = line.kind == "run.completed";
        let child = (line.kind == "step.call_workflow.started")
            .then(|| line.child_run_id.clone())
            .flatten();
        let env = s.conv.convert(line, idx, &mut files, paths);
        if ends {
            s.finished = id != run_id;
        }
        if starts_attempt || ends {
            // Runs this one called and that never finished are dead now.
            let mut dead = vec![id.clone()];
            while let Some(d) = dead.pop() {
                for (cid, c) in &mut streams {
                    if c.parent.as_deref() == Some(d.as_str()) && !c.finished {
                        c.finished = true;
                        dead.push(cid.clone());
                    }
                }
            }
        }
        if id == run_id {
            complete = ends;
        }
        if let Some(env) = env {
            if pid_unrecorded {
                unrecorded_pids.insert(out.len());
            }
            out.push(env);
        }
        if let Some(c) = child {
            if let Some(known) = streams.get_mut(&c) {
                // A resumed parent continues the same child run (its next attempt, further
                // down its file): it joins the merge again from there.
                if known.finished {
                    rank += 1;
                    known.finished = false;
                    known.rank = rank;
                    known.parent = Some(id);
                }
            } else if streams.len() < MAX_RUNS {
                rank += 1;
                let lines = read_lines(&paths.transcript_file(&c))?.unwrap_or_default();
                streams.insert(c, new_stream(lines, Some(id), rank));
            }
        }
    }
    clear_ended_pids(&mut out, &unrecorded_pids);
    // The root's last line decides, also when an unfinished child holds the merge.
    let last_position = out.len() as u64;
    Ok(Some(RecordedLog {
        envelopes: out,
        last_position,
        complete,
    }))
}

/// Sets `RunStarted.pid` to 0 for every attempt that ended (its run's `RunFinished` follows)
/// whose line did not keep its pid (`unrecorded`: a transcript written before the pid was
/// kept, which took the state file's `owner_pid`): that is the owner of the run's latest
/// attempt, which may already be the `awf resume` reading this log (it marks the run as
/// its own before it reads), so an earlier attempt looked like one of this process and
/// `awf resume -q` printed its failures as if they were happening now (seen once in about
/// 20 runs under load). A pid kept on the line is the attempt's own, as it was live.
fn clear_ended_pids(out: &mut [EventEnvelope], unrecorded: &std::collections::HashSet<usize>) {
    let mut open: HashMap<String, usize> = HashMap::new();
    for i in 0..out.len() {
        match &out[i].event {
            RunEvent::RunStarted { .. } => {
                open.insert(out[i].run_id.0.clone(), i);
            }
            RunEvent::RunFinished { .. } => {
                if let Some(start) = open.remove(&out[i].run_id.0)
                    && unrecorded.contains(&start)
                    && let RunEvent::RunStarted { pid, .. } = &mut out[start].event
                {
                    *pid = 0;
                }
            }
            _ => {}
        }
    }
}

impl EventLogReader for Store {
    fn read_log(&self, run_id: &RunId, from: u64) -> Result<Option<RecordedLog>, AwfError> {
        let Some(mut log) = read_log(self.paths(), &run_id.0)? else {
            return Ok(None);
        };
        let skip = usize::try_from(from.max(1) - 1).unwrap_or(usize::MAX);
        log.envelopes = log.envelopes.split_off(skip.min(log.envelopes.len()));
        Ok(Some(log))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;
    use std::time::UNIX_EPOCH;

    use awf_domain::event::EventPublisher;
    use awf_domain::ports::store::StateStore;
    use pretty_assertions::assert_eq;

    use super::*;

    fn open(root: &Path) -> Store {
        let env = BTreeMap::from([
            ("USER".to_owned(), "tester".to_owned()),
            ("AWF_AUDIT_LOG".to_owned(), "off".to_owned()),
        ]);
        Store::open(StorePaths::from_env(root, &env)).unwrap()
    }

    /// Envelopes numbered per run (per attempt), 1 ms apart: what an engine publishes.
    #[derive(Default)]
    struct Script {
        seqs: HashMap<String, u64>,
        clock: u64,
        out: Vec<EventEnvelope>,
    }

    impl Script {
        fn ev(&mut self, run: &str, parent: Option<&str>, path: &str, event: RunEvent) {
            let seq = self.seqs.entry(run.to_owned()).or_insert(0);
            *seq += 1;
            self.clock += 1;
            self.out.push(EventEnvelope {
                seq: *seq,
                run_id: RunId(run.to_owned()),
                parent_run_id: parent.map(|p| RunId(p.to_owned())),
                at: UNIX_EPOCH + Duration::from_millis(1_764_464_523_000 + self.clock),
                path: path.to_owned(),
                iteration: None,
                event,
            });
        }
    }

    fn started(ident: &str, resumed_from: Option<&str>) -> RunEvent {
        RunEvent::RunStarted {
            workflow: ident.to_owned(),
            identifier: ident.to_owned(),
            workflow_path: None,
            inputs: serde_json::Map::new(),
            resumed_from: resumed_from.map(str::to_owned),
            pid: 0,
            mocks: Default::default(),
            working_dir: Some("/w".to_owned()),
        }
    }

    fn step(s: &mut Script, run: &str, parent: Option<&str>, name: &str, out: &str, ok: bool) {
        s.ev(
            run,
            parent,
            name,
            RunEvent::StepStarted {
                step: name.into(),
                kind: "command".into(),
                command: Some(format!("echo {out}")),
            },
        );
        s.ev(
            run,
            parent,
            name,
            RunEvent::OutputChunk {
                step: name.into(),
                stream: OutputStream::Stdout,
                text: out.into(),
            },
        );
        let at = s.out.last().unwrap().at;
        let mut st = StepState::running(name, at);
        st.status = if ok {
            StepStatus::Completed
        } else {
            StepStatus::Failed
        };
        st.output = out.into();
        st.exit_code = Some(if ok { 0 } else { 3 });
        st.attempts = 1;
        st.completed_at = Some(at);
        s.ev(
            run,
            parent,
            name,
            RunEvent::StepFinished {
                step: name.into(),
                kind: "command".into(),
                state: Box::new(st),
            },
        );
    }

    fn finished(run: &str, ident: &str, status: RunStatus) -> RunEvent {
        RunEvent::RunFinished {
            result: Box::new(RunResult {
                run_id: Some(RunId(run.into())),
                workflow: ident.into(),
                status,
                exit_code: u8::from(status != RunStatus::Success),
                terminal: Some("done".into()),
                duration_ms: 7,
                states: BTreeMap::new(),
                outputs: BTreeMap::new(),
                error: None,
                message: None,
                spend: None,
            }),
        }
    }

    fn record(store: &Store, events: &[EventEnvelope]) {
        let rec = store.recorder();
        for e in events {
            rec.emit(e.clone());
        }
        rec.flush();
    }

    /// What must survive the trip: identity, order, kind and the fields a front-end shows.
    fn shape(e: &EventEnvelope) -> (String, u64, Option<String>, String, Value) {
        let v = serde_json::to_value(&e.event).unwrap();
        let key = match &e.event {
            RunEvent::StepStarted { command, .. } => serde_json::json!(command),
            RunEvent::OutputChunk { text, .. } => serde_json::json!(text.to_text()),
            RunEvent::StepFinished { state, .. } => {
                serde_json::json!([state.status, state.output.as_str(), state.exit_code])
            }
            RunEvent::ChildRunStarted { child_run_id, .. } => serde_json::json!(child_run_id.0),
            RunEvent::RunFinished { result } => {
                serde_json::json!([result.status, result.exit_code, result.terminal])
            }
            _ => Value::Null,
        };
        (
            e.run_id.0.clone(),
            e.seq,
            e.parent_run_id.as_ref().map(|p| p.0.clone()),
            v["type"].as_str().unwrap().to_owned(),
            key,
        )
    }

    #[test]
    fn a_run_tree_reads_back_in_the_order_it_was_published() {
        let d = tempfile::tempdir().unwrap();
        let store = open(d.path());
        let mut s = Script::default();
        s.ev("r1", None, "", started("main", None));
        step(&mut s, "r1", None, "a", "one\n", true);
        s.ev(
            "r1",
            None,
            "call",
            RunEvent::StepStarted {
                step: "call".into(),
                kind: "call_workflow".into(),
                command: None,
            },
        );
        s.ev(
            "r1",
            None,
            "call",
            RunEvent::ChildRunStarted {
                step: "call".into(),
                child_run_id: RunId("c1".into()),
                workflow: "sub".into(),
            },
        );
        s.ev("c1", Some("r1"), "", started("sub", None));
        step(&mut s, "c1", Some("r1"), "inner", "two\n", true);
        s.ev(
            "c1",
            Some("r1"),
            "",
            finished("c1", "sub", RunStatus::Success),
        );
        let mut call = StepState::running("call", s.out.last().unwrap().at);
        call.status = StepStatus::Completed;
        call.attempts = 1;
        s.ev(
            "r1",
            None,
            "call",
            RunEvent::StepFinished {
                step: "call".into(),
                kind: "call_workflow".into(),
                state: Box::new(call),
            },
        );
        step(&mut s, "r1", None, "b", "three\n", true);
        s.ev("r1", None, "", finished("r1", "main", RunStatus::Success));
        record(&store, &s.out);

        let log = store.read_log(&RunId("r1".into()), 1).unwrap().unwrap();
        assert!(log.complete);
        assert_eq!(log.last_position, s.out.len() as u64);
        let want: Vec<_> = s.out.iter().map(shape).collect();
        let got: Vec<_> = log.envelopes.iter().map(shape).collect();
        assert_eq!(got, want);
        // Times and paths too.
        for (g, w) in log.envelopes.iter().zip(&s.out) {
            assert_eq!((g.at, &g.path), (w.at, &w.path));
        }
        // The run's directory.
        assert!(
            matches!(&log.envelopes[0].event, RunEvent::RunStarted { working_dir: Some(d), .. } if d == "/w"),
            "{:?}",
            log.envelopes[0]
        );
        // The root's result holds its states, rebuilt from the lines.
        let Some(RunEvent::RunFinished { result }) = log.envelopes.last().map(|e| &e.event) else {
            panic!("no RunFinished");
        };
        assert_eq!(result.states["b"].output.as_str(), "three\n");
        // From a position: the tail, numbered as before.
        let tail = store.read_log(&RunId("r1".into()), 8).unwrap().unwrap();
        assert_eq!(
            tail.envelopes.iter().map(shape).collect::<Vec<_>>(),
            want[7..].to_vec()
        );
        assert!(store.read_log(&RunId("nope".into()), 1).unwrap().is_none());
    }

    /// A step's state reads back with its own start and end (the live duration), not the
    /// times its `step.started` and `step.completed` lines were written.
    #[test]
    fn a_step_reads_back_with_its_own_times() {
        let d = tempfile::tempdir().unwrap();
        let store = open(d.path());
        let mut s = Script::default();
        s.ev("r1", None, "", started("main", None));
        step(&mut s, "r1", None, "a", "one\n", true);
        let base = UNIX_EPOCH + Duration::from_millis(1_764_464_523_000);
        let (from, to) = (
            base + Duration::from_millis(40),
            base + Duration::from_millis(57),
        );
        if let RunEvent::StepFinished { state, .. } = &mut s.out[3].event {
            state.started_at = Some(from);
            state.completed_at = Some(to);
        }
        s.ev("r1", None, "", finished("r1", "main", RunStatus::Success));
        record(&store, &s.out);
        let log = store.read_log(&RunId("r1".into()), 1).unwrap().unwrap();
        let Some(RunEvent::StepFinished { state, .. }) = log.envelopes.get(3).map(|e| &e.event)
        else {
            panic!("no StepFinished: {:?}", log.envelopes);
        };
        assert_eq!(
            (state.started_at, state.completed_at),
            (Some(from), Some(to))
        );
        assert_eq!(state.duration_ms(), 17);
    }

    /// Records run `r1`'s first attempt: step `a` fails, and so does the run.
    fn failed_attempt(store: &Store) -> Script {
        let mut s = Script::default();
        s.ev("r1", None, "", started("main", None));
        step(&mut s, "r1", None, "a", "bad\n", false);
        s.ev("r1", None, "", finished("r1", "main", RunStatus::Failure));
        record(store, &s.out);
        s
    }

    #[test]
    fn a_resumed_run_reads_back_both_attempts_each_counted_from_one() {
        let d = tempfile::tempdir().unwrap();
        let store = open(d.path());
        let mut s = failed_attempt(&store);
        let first = s.out.len();
        s.seqs.clear();
        s.ev("r1", None, "", started("main", Some("a")));
        step(&mut s, "r1", None, "a", "good\n", true);
        s.ev("r1", None, "", finished("r1", "main", RunStatus::Success));
        record(&store, &s.out[first..]);

        let log = store.read_log(&RunId("r1".into()), 1).unwrap().unwrap();
        assert!(log.complete);
        assert_eq!(
            log.envelopes.iter().map(shape).collect::<Vec<_>>(),
            s.out.iter().map(shape).collect::<Vec<_>>()
        );
    }

    /// A resumed parent that continues the same child run (its `ChildRunStarted` names it
    /// again) reads back with the child's second attempt after it, in the order published;
    /// the state file names the child under the calling step's path.
    #[test]
    fn a_child_run_continued_by_a_resumed_parent_reads_back_both_attempts() {
        let d = tempfile::tempdir().unwrap();
        let store = open(d.path());
        let call = |s: &mut Script| {
            s.ev(
                "r1",
                None,
                "call",
                RunEvent::StepStarted {
                    step: "call".into(),
                    kind: "call_workflow".into(),
                    command: None,
                },
            );
            s.ev(
                "r1",
                None,
                "call",
                RunEvent::ChildRunStarted {
                    step: "call".into(),
                    child_run_id: RunId("c1".into()),
                    workflow: "sub".into(),
                },
            );
        };
        let mut s = Script::default();
        s.ev("r1", None, "", started("main", None));
        call(&mut s);
        s.ev("c1", Some("r1"), "", started("sub", None));
        step(&mut s, "c1", Some("r1"), "x", "one\n", true);
        step(&mut s, "c1", Some("r1"), "y", "bad\n", false);
        s.ev(
            "c1",
            Some("r1"),
            "",
            finished("c1", "sub", RunStatus::Failure),
        );
        s.ev("r1", None, "", finished("r1", "main", RunStatus::Failure));
        record(&store, &s.out);
        assert_eq!(
            StateStore::load(&store, "r1").unwrap().child_runs,
            BTreeMap::from([("call".to_owned(), "c1".to_owned())])
        );
        let first = s.out.len();
        s.seqs.clear();
        s.ev("r1", None, "", started("main", Some("call")));
        call(&mut s);
        s.ev("c1", Some("r1"), "", started("sub", Some("y")));
        step(&mut s, "c1", Some("r1"), "y", "good\n", true);
        s.ev(
            "c1",
            Some("r1"),
            "",
            finished("c1", "sub", RunStatus::Success),
        );
        s.ev("r1", None, "", finished("r1", "main", RunStatus::Success));
        record(&store, &s.out[first..]);

        let log = store.read_log(&RunId("r1".into()), 1).unwrap().unwrap();
        assert!(log.complete);
        assert_eq!(
            log.envelopes.iter().map(shape).collect::<Vec<_>>(),
            s.out.iter().map(shape).collect::<Vec<_>>()
        );
        // The child's record keeps its first attempt's states (a resumed run's).
        let child = StateStore::load(&store, "c1").unwrap();
        assert_eq!(child.states["x"].output.as_str(), "one\n");
        assert_eq!(child.states["y"].output.as_str(), "good\n");
        assert_eq!(child.parent_run_id.as_deref(), Some("r1"));
    }

    /// The transcript's lines without their `pid` (as written before it was kept).
    fn strip_pids(store: &Store, run: &str) {
        let path = store.paths().transcript_file(run);
        let text = std::fs::read_to_string(&path).unwrap();
        let mut out = String::new();
        for l in text.lines() {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if let Some(p) = v.get_mut("payload").and_then(Value::as_object_mut) {
                p.remove("pid");
            }
            out.push_str(&v.to_string());
            out.push('\n');
        }
        std::fs::write(&path, out).unwrap();
    }

    /// A `RunStarted` reads back with the pid its line kept, ended or not, whatever the
    /// state file says now; a step's error code and approval option come back too.
    #[test]
    fn an_attempt_reads_back_with_its_own_pid_and_a_step_with_its_code_and_approval() {
        let d = tempfile::tempdir().unwrap();
        let store = open(d.path());
        let mut s = Script::default();
        let mut ev = started("main", None);
        if let RunEvent::RunStarted { pid, .. } = &mut ev {
            *pid = 31337;
        }
        s.ev("r1", None, "", ev);
        let mut st = StepState::running("x", UNIX_EPOCH + Duration::from_millis(5));
        st.status = StepStatus::Failed;
        st.error = Some("step x: exit code 3".into());
        st.error_code = Some(awf_domain::ErrorCode::ExecutionCommandFailed);
        st.approval = Some("approve".into());
        st.exit_code = Some(3);
        st.completed_at = Some(UNIX_EPOCH + Duration::from_millis(9));
        s.ev(
            "r1",
            None,
            "x",
            RunEvent::StepFinished {
                step: "x".into(),
                kind: "command".into(),
                state: Box::new(st),
            },
        );
        s.ev("r1", None, "", finished("r1", "main", RunStatus::Success));
        record(&store, &s.out);
        let mut snap = StateStore::load(&store, "r1").unwrap();
        snap.owner_pid = Some(std::process::id());
        StateStore::save(&store, &snap).unwrap();
        let log = store.read_log(&RunId("r1".into()), 1).unwrap().unwrap();
        let RunEvent::RunStarted { pid, .. } = &log.envelopes[0].event else {
            panic!("{:?}", log.envelopes[0]);
        };
        assert_eq!(*pid, 31337);
        let RunEvent::StepFinished { state, .. } = &log.envelopes[1].event else {
            panic!("{:?}", log.envelopes[1]);
        };
        assert_eq!(
            state.error_code,
            Some(awf_domain::ErrorCode::ExecutionCommandFailed)
        );
        assert_eq!(state.approval.as_deref(), Some("approve"));
        let RunEvent::RunFinished { result } = &log.envelopes[2].event else {
            panic!("{:?}", log.envelopes[2]);
        };
        assert_eq!(
            result.states["x"].error_code,
            Some(awf_domain::ErrorCode::ExecutionCommandFailed)
        );
        assert_eq!(result.states["x"].approval.as_deref(), Some("approve"));
    }

    /// In a transcript written before the pid was kept: an attempt that ended was run by a
    /// process that is gone: its `RunStarted.pid` is 0, even when the state file already
    /// names this process (an `awf resume` that marked the run as its own before reading
    /// the log); an attempt still going has the state file's.
    #[test]
    fn only_an_unfinished_attempt_carries_the_owner_pid() {
        let d = tempfile::tempdir().unwrap();
        let store = open(d.path());
        let mut s = failed_attempt(&store);
        strip_pids(&store, "r1");
        let mut snap = StateStore::load(&store, "r1").unwrap();
        snap.owner_pid = Some(std::process::id());
        StateStore::save(&store, &snap).unwrap();
        let pids = |store: &Store| -> Vec<u32> {
            let log = store.read_log(&RunId("r1".into()), 1).unwrap().unwrap();
            log.envelopes
                .iter()
                .filter_map(|e| match &e.event {
                    RunEvent::RunStarted { pid, .. } => Some(*pid),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(pids(&store), vec![0]);
        let first = s.out.len();
        s.seqs.clear();
        s.ev("r1", None, "", started("main", Some("a")));
        record(&store, &s.out[first..]);
        strip_pids(&store, "r1");
        let mut snap = StateStore::load(&store, "r1").unwrap();
        snap.owner_pid = Some(4242);
        StateStore::save(&store, &snap).unwrap();
        assert_eq!(pids(&store), vec![0, 4242]);
    }

    #[test]
    fn an_unfinished_run_is_incomplete_and_a_torn_last_line_waits() {
        let d = tempfile::tempdir().unwrap();
        let store = open(d.path());
        let mut s = Script::default();
        s.ev("r1", None, "", started("main", None));
        step(&mut s, "r1", None, "a", "x\n", true);
        record(&store, &s.out);
        let path = store.paths().transcript_file("r1");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, b"{\"seq\":5,\"run_id\":\"r1\",\"type\":\"st").unwrap();
        let log = store.read_log(&RunId("r1".into()), 1).unwrap().unwrap();
        assert!(!log.complete);
        assert_eq!(log.envelopes.len(), 4);
        // A child that started but wrote nothing yet holds what follows it.
        let mut g = Script {
            clock: s.clock,
            ..Script::default()
        };
        g.seqs.insert("r1".into(), 4);
        std::fs::write(
            &path,
            std::fs::read_to_string(&path)
                .unwrap()
                .rsplit_once('\n')
                .unwrap()
                .0
                .to_owned()
                + "\n",
        )
        .unwrap();
        g.ev(
            "r1",
            None,
            "call",
            RunEvent::ChildRunStarted {
                step: "call".into(),
                child_run_id: RunId("c9".into()),
                workflow: "sub".into(),
            },
        );
        g.ev("r1", None, "", finished("r1", "main", RunStatus::Success));
        record(&store, &g.out);
        let log = store.read_log(&RunId("r1".into()), 1).unwrap().unwrap();
        assert_eq!(log.envelopes.len(), 5, "up to the child's start");
        assert!(!log.complete);
    }
}
