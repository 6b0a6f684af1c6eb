//! Transcript lines: `<root>/transcripts/<run_id>.jsonl`, one JSON line per event of the run.
//!
//! Envelope (keys in this order, `?` = only when set):
//! `{"seq", "run_id", "parent_run_id"?, "child_run_id"?, "type", "path", "iteration"?,
//! "timestamp", "payload"}`. `seq` is the event's envelope `seq` (monotonic per run, from 1);
//! the one line the engine does not emit itself (`step.call_workflow.completed`) takes the
//! next number, and later lines of the file are shifted by one so `seq` stays unique and
//! increasing. A resumed run continues after the last `seq` of its file. `timestamp` is
//! RFC 3339 (UTC, milliseconds).
//!
//! | event | `type` | `payload` |
//! |---|---|---|
//! | RunStarted | `run.started` | `{workflow, workflow_name, pid, workflow_path?, inputs, resumed_from?, working_dir?}` (`pid`: an awf addition, the awf process that ran the attempt) |
//! | RunFinished | `run.completed` | `{status, exit_code, terminal, duration_ms, error?}` |
//! | StepStarted | `step.started` | `{name, kind, command?}` (`command`: an awf addition, the command as it will run, masked, for a `command` step) |
//! | StepFinished | `step.completed` | `{name, kind, status, error?, exit_code?, error_code?, approval?, started_at?, completed_at?, output?, output_file?, stderr_file?}` (`error_code`: the failure's code, `approval`: the option chosen at the step's gate, both awf additions; `started_at` / `completed_at`: the state's own times, RFC 3339 with milliseconds, an awf addition; `output`: the stdout of a step that streamed none, a loop's or parallel block's summary; the files holding a stdout / stderr over 64 KiB, relative to the data root) |
//! | ChildRunStarted | `step.call_workflow.started` (+ `child_run_id`) | `{name, workflow}` |
//! | (child's RunFinished, in the parent's file) | `step.call_workflow.completed` (+ `child_run_id`) | `{name, workflow, status, exit_code}` |
//! | AgentMessageChunk | `message.assistant` | `{role: "assistant", blocks: [{type: "text", text}]}` |
//! | AgentThoughtChunk | `message.assistant` | `{role: "assistant", blocks: [{type: "thinking", text}]}` |
//! | ToolCall | `tool.call` | `{name, call_id, input, fidelity}` (`agent_emitted`: from the agent's stream; `router`: run through awf's tool router, `mcp-serve` or in-process) |
//! | ToolCallResult | `tool.result` | `{call_id, output, error?: true, fidelity}` |
//! | OutputChunk (awf addition) | `step.output` | `{name, stream, text}`; once the step's stream passed 64 KiB `{name, stream, bytes}` (the text is kept once, in the file `step.completed` names) |
//! | Log (awf addition) | `log` | `{name?, level, message}` |
//! | StepRetrying (awf addition) | `step.retrying` | `{name, attempt, delay_ms, reason?, output_file?, stderr_file?}` (the files of the failed attempt's stdout / stderr over 64 KiB) |
//! | InteractionRequired, conversation turn (awf addition) | `input.required` | `{name, request_id, prompt}` |
//! | InteractionRequired, missing input (awf addition) | `input.required` | `{name: null, request_id, input, problem?}` (`input` is the input's name) |
//! | InteractionRequired, breakpoint (awf addition) | `breakpoint` | `{name, kind, request_id, previous}` |
//! | InteractionRequired, approval gate (awf addition) | `approval.required` | `{name, request_id, message, options, timeout_ms?}` |
//! | InteractionResolved (awf addition) | `interaction.resolved` | `{request_id, outcome, answer?}` (`outcome`: answered, timed_out, cancelled; `answer` as the front-end gave it, secrets masked) |
//!
//! Text is already masked by the engine.
//!
//! Source: spec/workflow.md §3.15; http-ops.md §3.5.

use std::fs::File;
use std::io::BufRead;
use std::io::BufReader;
use std::path::Path;
use std::time::SystemTime;

use awf_domain::event::EventEnvelope;
use awf_domain::event::RunEvent;
use awf_domain::run::RunStatus;
use awf_domain::timefmt::format_rfc3339;
use serde_json::Map;
use serde_json::Value;
use serde_json::json;

/// Wire text of a run status.
pub(crate) fn status_str(s: RunStatus) -> &'static str {
    match s {
        RunStatus::Success => "success",
        RunStatus::Failure => "failure",
        RunStatus::Cancelled => "cancelled",
    }
}

/// The envelope fields of one line.
pub(crate) struct Head<'a> {
    pub(crate) seq: u64,
    pub(crate) run_id: &'a str,
    pub(crate) parent_run_id: Option<&'a str>,
    pub(crate) child_run_id: Option<&'a str>,
    pub(crate) kind: &'a str,
    pub(crate) path: &'a str,
    pub(crate) iteration: Option<usize>,
    pub(crate) at: SystemTime,
}

/// One line (newline included).
pub(crate) fn line(h: &Head<'_>, payload: Value) -> String {
    let mut s = String::new();
    line_into(&mut s, h, &payload);
    s
}

/// Appends one line (newline included) to `out`: the envelope written field by field, in the
/// order of the module docs, then the payload (compact JSON, the same text as building the
/// whole line as one JSON object, without the map of the envelope).
pub(crate) fn line_into(out: &mut String, h: &Head<'_>, payload: &Value) {
    use std::fmt::Write as _;
    head_into(out, h);
    let _ = write!(out, "{payload}");
    out.push_str("}\n");
}

/// Appends the envelope of a line up to (and with) the `"payload":` key.
fn head_into(out: &mut String, h: &Head<'_>) {
    use std::fmt::Write as _;
    out.push_str("{\"seq\":");
    let _ = write!(out, "{}", h.seq);
    out.push_str(",\"run_id\":");
    push_json_str(out, h.run_id);
    if let Some(p) = h.parent_run_id {
        out.push_str(",\"parent_run_id\":");
        push_json_str(out, p);
    }
    if let Some(c) = h.child_run_id {
        out.push_str(",\"child_run_id\":");
        push_json_str(out, c);
    }
    out.push_str(",\"type\":");
    push_json_str(out, h.kind);
    out.push_str(",\"path\":");
    push_json_str(out, h.path);
    if let Some(i) = h.iteration {
        let _ = write!(out, ",\"iteration\":{i}");
    }
    out.push_str(",\"timestamp\":\"");
    out.push_str(&format_rfc3339(h.at));
    out.push_str("\",\"payload\":");
}

/// Appends `s` as a JSON string (quoted and escaped as serde_json escapes it).
fn push_json_str(out: &mut String, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        // Rare (control characters, quotes, backslashes): let serde_json escape it.
        let _ = std::fmt::Write::write_fmt(out, format_args!("{}", Value::from(s)));
    }
}

/// `type`, `child_run_id` and `payload` of the line for one event.
pub(crate) fn describe(event: &RunEvent) -> (&'static str, Option<&str>, Value) {
    match event {
        RunEvent::RunStarted {
            workflow,
            identifier,
            workflow_path,
            inputs,
            resumed_from,
            working_dir,
            pid,
            ..
        } => {
            let mut p = Map::new();
            p.insert("workflow".into(), identifier.as_str().into());
            p.insert("pid".into(), (*pid).into());
            p.insert("workflow_name".into(), workflow.as_str().into());
            if let Some(wp) = workflow_path {
                p.insert("workflow_path".into(), wp.as_str().into());
            }
            p.insert("inputs".into(), Value::Object(inputs.clone()));
            if let Some(r) = resumed_from {
                p.insert("resumed_from".into(), r.as_str().into());
            }
            if let Some(d) = working_dir {
                p.insert("working_dir".into(), d.as_str().into());
            }
            ("run.started", None, Value::Object(p))
        }
        RunEvent::RunFinished { result } => {
            let mut p = Map::new();
            p.insert("status".into(), status_str(result.status).into());
            p.insert("exit_code".into(), result.exit_code.into());
            p.insert("terminal".into(), result.terminal.clone().into());
            p.insert("duration_ms".into(), result.duration_ms.into());
            if let Some(e) = &result.error {
                p.insert(
                    "error".into(),
                    serde_json::to_value(e).unwrap_or(Value::Null),
                );
            }
            ("run.completed", None, Value::Object(p))
        }
        RunEvent::StepStarted {
            step,
            kind,
            command,
        } => {
            let mut p = json!({"name": step, "kind": kind});
            if let (Some(c), Some(o)) = (command, p.as_object_mut()) {
                o.insert("command".into(), c.as_str().into());
            }
            ("step.started", None, p)
        }
        RunEvent::StepFinished { step, kind, state } => {
            let mut p = Map::new();
            p.insert("name".into(), step.as_str().into());
            p.insert("kind".into(), kind.as_str().into());
            p.insert("status".into(), state.status.as_str().into());
            if let Some(e) = &state.error {
                p.insert("error".into(), e.as_str().into());
            }
            if let Some(c) = state.exit_code {
                p.insert("exit_code".into(), c.into());
            }
            if let Some(c) = state.error_code {
                p.insert("error_code".into(), c.as_str().into());
            }
            if let Some(a) = &state.approval {
                p.insert("approval".into(), a.as_str().into());
            }
            // The step's own times (the line's is when it was recorded), so that a replay
            // shows the duration the live run showed.
            for (key, t) in [
                ("started_at", state.started_at),
                ("completed_at", state.completed_at),
            ] {
                if let Some(t) = t {
                    p.insert(key.into(), format_rfc3339(t).into());
                }
            }
            ("step.completed", None, Value::Object(p))
        }
        RunEvent::ChildRunStarted {
            step,
            child_run_id,
            workflow,
        } => (
            "step.call_workflow.started",
            Some(child_run_id.0.as_str()),
            json!({"name": step, "workflow": workflow}),
        ),
        RunEvent::AgentMessageChunk { text, .. } => (
            "message.assistant",
            None,
            json!({"role": "assistant", "blocks": [{"type": "text", "text": text}]}),
        ),
        RunEvent::AgentThoughtChunk { text, .. } => (
            "message.assistant",
            None,
            json!({"role": "assistant", "blocks": [{"type": "thinking", "text": text}]}),
        ),
        RunEvent::ToolCall {
            id,
            name,
            input,
            fidelity,
            ..
        } => (
            "tool.call",
            None,
            json!({"name": name, "call_id": id, "input": input, "fidelity": fidelity.as_str()}),
        ),
        RunEvent::ToolCallResult {
            id,
            output,
            is_error,
            fidelity,
            ..
        } => {
            let mut p = Map::new();
            p.insert("call_id".into(), id.as_str().into());
            p.insert("output".into(), output.as_str().into());
            if *is_error {
                p.insert("error".into(), true.into());
            }
            p.insert("fidelity".into(), fidelity.as_str().into());
            ("tool.result", None, Value::Object(p))
        }
        RunEvent::OutputChunk { step, stream, text } => (
            "step.output",
            None,
            json!({"name": step, "stream": stream, "text": text.to_text()}),
        ),
        RunEvent::Log {
            step,
            level,
            message,
        } => {
            let mut p = Map::new();
            if let Some(s) = step {
                p.insert("name".into(), s.as_str().into());
            }
            p.insert(
                "level".into(),
                serde_json::to_value(level).unwrap_or(Value::Null),
            );
            p.insert("message".into(), message.as_str().into());
            ("log", None, Value::Object(p))
        }
        RunEvent::StepRetrying {
            step,
            attempt,
            delay_ms,
            reason,
        } => {
            let mut p = json!({"name": step, "attempt": attempt, "delay_ms": delay_ms});
            if let (Some(r), Value::Object(m)) = (reason, &mut p) {
                m.insert("reason".into(), r.as_str().into());
            }
            ("step.retrying", None, p)
        }
        RunEvent::InteractionRequired { request } => {
            use awf_domain::interaction::RequestKind;
            let id = &request.request_id;
            let name = &request.step;
            match &request.kind {
                RequestKind::ConversationTurn { prompt } => (
                    "input.required",
                    None,
                    json!({"name": name, "request_id": id, "prompt": prompt}),
                ),
                RequestKind::MissingInput { input, problem } => {
                    let mut p = json!({"name": name, "request_id": id, "input": input.name});
                    if let (Some(pb), Some(o)) = (problem, p.as_object_mut()) {
                        o.insert("problem".into(), pb.as_str().into());
                    }
                    ("input.required", None, p)
                }
                RequestKind::Breakpoint {
                    state_kind,
                    previous,
                    ..
                } => (
                    "breakpoint",
                    None,
                    json!({"name": name, "kind": state_kind, "request_id": id, "previous": previous}),
                ),
                RequestKind::Approval { message, options } => {
                    let mut p = json!({"name": name, "request_id": id, "message": message, "options": options});
                    if let (Some(t), Some(o)) = (request.timeout_ms, p.as_object_mut()) {
                        o.insert("timeout_ms".into(), t.into());
                    }
                    ("approval.required", None, p)
                }
            }
        }
        RunEvent::InteractionResolved {
            request_id,
            resolution,
        } => {
            let mut p = serde_json::to_value(resolution).unwrap_or(Value::Null);
            if let Some(o) = p.as_object_mut() {
                o.insert("request_id".into(), request_id.as_str().into());
            }
            ("interaction.resolved", None, p)
        }
    }
}

/// Appends the line of an event, numbered `seq`, to `out`: an `OutputChunk` without its text (`bytes` instead)
/// unless `inline`; a `StepFinished` naming the files that hold its long texts
/// (`output_file`, `stderr_file`, relative to the data root).
pub(crate) fn event_line_into(
    out: &mut String,
    env: &EventEnvelope,
    seq: u64,
    inline: bool,
    summary: bool,
    files: &crate::state::OutputFiles,
) {
    // The two lines of every step, written without building their payload as a map.
    let head = |kind| Head {
        seq,
        run_id: &env.run_id.0,
        parent_run_id: env.parent_run_id.as_ref().map(|p| p.0.as_str()),
        child_run_id: None,
        kind,
        path: &env.path,
        iteration: env.iteration,
        at: env.at,
    };
    match &env.event {
        RunEvent::StepStarted {
            step,
            kind,
            command,
        } => {
            head_into(out, &head("step.started"));
            out.push_str("{\"name\":");
            push_json_str(out, step);
            out.push_str(",\"kind\":");
            push_json_str(out, kind);
            if let Some(c) = command {
                out.push_str(",\"command\":");
                push_json_str(out, c);
            }
            out.push_str("}}\n");
            return;
        }
        // A chunk past the inline limit gives its size alone: its text is not made (a
        // lossy copy of each chunk was 12 % of a 50 MB step's time).
        RunEvent::OutputChunk { step, stream, text } if !inline => {
            use std::fmt::Write as _;
            head_into(out, &head("step.output"));
            out.push_str("{\"name\":");
            push_json_str(out, step);
            out.push_str(",\"stream\":");
            push_json_str(
                out,
                match stream {
                    awf_domain::event::OutputStream::Stdout => "stdout",
                    awf_domain::event::OutputStream::Stderr => "stderr",
                },
            );
            let _ = writeln!(out, ",\"bytes\":{}}}}}", text.as_bytes().len());
            return;
        }
        RunEvent::StepFinished { step, kind, state } => {
            use std::fmt::Write as _;
            head_into(out, &head("step.completed"));
            out.push_str("{\"name\":");
            push_json_str(out, step);
            out.push_str(",\"kind\":");
            push_json_str(out, kind);
            out.push_str(",\"status\":");
            push_json_str(out, state.status.as_str());
            if let Some(e) = &state.error {
                out.push_str(",\"error\":");
                push_json_str(out, e);
            }
            if let Some(c) = state.exit_code {
                let _ = write!(out, ",\"exit_code\":{c}");
            }
            if let Some(c) = state.error_code {
                out.push_str(",\"error_code\":");
                push_json_str(out, c.as_str());
            }
            if let Some(a) = &state.approval {
                out.push_str(",\"approval\":");
                push_json_str(out, a);
            }
            for (key, t) in [
                ("started_at", state.started_at),
                ("completed_at", state.completed_at),
            ] {
                if let Some(t) = t {
                    let _ = write!(out, ",\"{key}\":\"{}\"", format_rfc3339(t));
                }
            }
            if summary {
                out.push_str(",\"output\":");
                push_json_str(out, &state.output);
            }
            if let Some(f) = &files.stdout {
                out.push_str(",\"output_file\":");
                push_json_str(out, f);
            }
            if let Some(f) = &files.stderr {
                out.push_str(",\"stderr_file\":");
                push_json_str(out, f);
            }
            out.push_str("}}\n");
            return;
        }
        _ => {}
    }
    let (kind, child, mut payload) = describe(&env.event);
    if let (RunEvent::OutputChunk { text, .. }, false) = (&env.event, inline)
        && let Value::Object(m) = &mut payload
    {
        m.remove("text");
        m.insert("bytes".into(), text.as_bytes().len().into());
    }
    // `step.completed` names the step's output files, `step.retrying` those of the attempt
    // that failed (each for the bytes-only chunks before it).
    if let (RunEvent::StepFinished { .. } | RunEvent::StepRetrying { .. }, Value::Object(m)) =
        (&env.event, &mut payload)
    {
        if let Some(f) = &files.stdout {
            m.insert("output_file".into(), f.as_str().into());
        }
        if let Some(f) = &files.stderr {
            m.insert("stderr_file".into(), f.as_str().into());
        }
    }
    line_into(
        out,
        &Head {
            seq,
            run_id: &env.run_id.0,
            parent_run_id: env.parent_run_id.as_ref().map(|p| p.0.as_str()),
            child_run_id: child,
            kind,
            path: &env.path,
            iteration: env.iteration,
            at: env.at,
        },
        &payload,
    );
}

/// Cuts the torn last line of a transcript (a write that a crash or a full disk stopped
/// midway): the file then ends at its last `\n`, so the next line written does not join the
/// torn one into one invalid line (chaos trial: a resumed run's `run.started` was appended
/// to the partial line, and its seq was lost). `f` must be open for reading and writing.
/// Returns how many bytes were cut (0 when the file ends with a whole line).
///
/// # Errors
/// Reading or truncating the file failed.
pub(crate) fn cut_torn_tail(f: &File) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let len = f.metadata()?.len();
    if len == 0 {
        return Ok(0);
    }
    let mut last = [0u8; 1];
    f.read_exact_at(&mut last, len - 1)?;
    if last[0] == b'\n' {
        return Ok(0);
    }
    let mut buf = vec![0u8; 64 * 1024];
    let mut end = len;
    let keep = loop {
        if end == 0 {
            break 0;
        }
        let start = end.saturating_sub(buf.len() as u64);
        let n = usize::try_from(end - start)
            .unwrap_or(buf.len())
            .min(buf.len());
        f.read_exact_at(&mut buf[..n], start)?;
        if let Some(i) = buf[..n].iter().rposition(|&b| b == b'\n') {
            break start + i as u64 + 1;
        }
        end = start;
    };
    f.set_len(keep)?;
    Ok(len - keep)
}

/// The highest `seq` in an existing transcript (0 when missing or empty).
pub(crate) fn last_seq(path: &Path) -> u64 {
    let Ok(f) = File::open(path) else {
        return 0;
    };
    BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str::<Value>(&l).ok())
        .filter_map(|v| v.get("seq").and_then(Value::as_u64))
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod line_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Duration;
    use std::time::UNIX_EPOCH;

    /// The line as one JSON object (how it was built before it was written field by field).
    fn as_one_object(h: &Head<'_>, payload: Value) -> String {
        let mut m = Map::new();
        m.insert("seq".into(), h.seq.into());
        m.insert("run_id".into(), h.run_id.into());
        if let Some(p) = h.parent_run_id {
            m.insert("parent_run_id".into(), p.into());
        }
        if let Some(c) = h.child_run_id {
            m.insert("child_run_id".into(), c.into());
        }
        m.insert("type".into(), h.kind.into());
        m.insert("path".into(), h.path.into());
        if let Some(i) = h.iteration {
            m.insert("iteration".into(), i.into());
        }
        m.insert("timestamp".into(), format_rfc3339(h.at).into());
        m.insert("payload".into(), payload);
        let mut s = Value::Object(m).to_string();
        s.push('\n');
        s
    }

    /// The line of a step event as the generic path builds it (payload from `describe`).
    fn generic_line(env: &EventEnvelope, seq: u64, files: &crate::state::OutputFiles) -> String {
        let (kind, child, mut payload) = describe(&env.event);
        if let (RunEvent::StepFinished { .. }, Value::Object(m)) = (&env.event, &mut payload) {
            if let Some(f) = &files.stdout {
                m.insert("output_file".into(), f.as_str().into());
            }
            if let Some(f) = &files.stderr {
                m.insert("stderr_file".into(), f.as_str().into());
            }
        }
        let h = Head {
            seq,
            run_id: &env.run_id.0,
            parent_run_id: env.parent_run_id.as_ref().map(|p| p.0.as_str()),
            child_run_id: child,
            kind,
            path: &env.path,
            iteration: env.iteration,
            at: env.at,
        };
        as_one_object(&h, payload)
    }

    #[test]
    fn a_torn_last_line_is_cut_and_whole_lines_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let open = || {
            std::fs::OpenOptions::new()
                .read(true)
                .append(true)
                .open(&path)
                .unwrap()
        };
        // A long torn line (past one read) after two whole ones.
        let whole = "{\"seq\":1}\n{\"seq\":2}\n";
        let torn = format!("{{\"seq\":3,\"payload\":\"{}", "x".repeat(200_000));
        std::fs::write(&path, format!("{whole}{torn}")).unwrap();
        assert_eq!(cut_torn_tail(&open()).unwrap(), torn.len() as u64);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), whole);
        // Whole lines: nothing cut.
        assert_eq!(cut_torn_tail(&open()).unwrap(), 0);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), whole);
        // No line break at all: emptied.
        std::fs::write(&path, "{\"seq\":1").unwrap();
        assert_eq!(cut_torn_tail(&open()).unwrap(), 8);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
        assert_eq!(cut_torn_tail(&open()).unwrap(), 0);
    }

    #[test]
    fn a_chunk_line_without_its_text_is_the_generic_form_with_its_size() {
        use awf_domain::event::OutputStream;
        use awf_domain::run::RunId;
        let at = UNIX_EPOCH + Duration::from_millis(1_764_464_523_456);
        for (step, stream, bytes) in [
            ("s", OutputStream::Stdout, b"hello\n".to_vec()),
            (
                "q\"uote\u{1}é",
                OutputStream::Stderr,
                vec![0xff, b'a', 0xe2, 0x82],
            ),
        ] {
            let env = EventEnvelope {
                seq: 7,
                run_id: RunId("r1".into()),
                parent_run_id: Some(RunId("p".into())),
                at,
                path: "loop:2/s".into(),
                iteration: Some(2),
                event: RunEvent::OutputChunk {
                    step: step.into(),
                    stream,
                    text: bytes.clone().into(),
                },
            };
            let mut out = String::new();
            event_line_into(&mut out, &env, 9, false, false, &Default::default());
            let (kind, child, mut payload) = describe(&env.event);
            if let Value::Object(m) = &mut payload {
                m.remove("text");
                m.insert("bytes".into(), bytes.len().into());
            }
            let h = Head {
                seq: 9,
                run_id: "r1",
                parent_run_id: Some("p"),
                child_run_id: child,
                kind,
                path: &env.path,
                iteration: env.iteration,
                at,
            };
            assert_eq!(out, as_one_object(&h, payload));
            let v: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(v["payload"]["bytes"], bytes.len());
            assert_eq!(v["payload"]["name"], step);
        }
    }

    #[test]
    fn step_lines_equal_the_generic_form_byte_for_byte() {
        use awf_domain::run::RunId;
        use awf_domain::run::StepState;
        use awf_domain::run::StepStatus;
        let at = UNIX_EPOCH + Duration::from_millis(1_764_464_523_456);
        let odd = "q\"uote\\back\nline\u{1}é";
        let mut failed = StepState::running(odd, at);
        failed.status = StepStatus::Failed;
        failed.error = Some(format!("step {odd}: exit code 3"));
        failed.exit_code = Some(-3);
        let mut done = StepState::running("s", at);
        done.status = StepStatus::Completed;
        done.exit_code = Some(0);
        let events = [
            RunEvent::StepStarted {
                step: "s".into(),
                kind: "step".into(),
                command: None,
            },
            RunEvent::StepStarted {
                step: odd.into(),
                kind: "for_each".into(),
                command: None,
            },
            RunEvent::StepStarted {
                step: "c".into(),
                kind: "command".into(),
                command: Some(odd.into()),
            },
            RunEvent::StepFinished {
                step: odd.into(),
                kind: "step".into(),
                state: Box::new(failed),
            },
            RunEvent::StepFinished {
                step: "s".into(),
                kind: "step".into(),
                state: Box::new(done),
            },
            RunEvent::StepFinished {
                step: "r".into(),
                kind: "step".into(),
                state: Box::new(StepState::running("r", at)),
            },
        ];
        let files = [
            crate::state::OutputFiles::default(),
            crate::state::OutputFiles {
                stdout: Some("outputs/r1/s-1.stdout".into()),
                stderr: Some(format!("outputs/r1/{odd}.stderr")),
            },
        ];
        for event in events {
            for (parent, iteration, path) in [(None, None, "s"), (Some("p"), Some(2), "loop:2/s")] {
                let env = EventEnvelope {
                    seq: 7,
                    run_id: RunId("r1".into()),
                    parent_run_id: parent.map(|p: &str| RunId(p.into())),
                    at,
                    path: path.into(),
                    iteration,
                    event: event.clone(),
                };
                for f in &files {
                    let mut out = String::new();
                    event_line_into(&mut out, &env, 9, true, false, f);
                    assert_eq!(out, generic_line(&env, 9, f));
                }
            }
        }
    }

    #[test]
    fn written_lines_equal_the_object_form_byte_for_byte() {
        let at = UNIX_EPOCH + Duration::from_millis(1_764_464_523_456);
        let odd = "q\"uote\\back\nnew\tline\u{1}é€𝄞\u{7f}";
        let payloads = [
            json!({"name": "s1", "kind": "step"}),
            json!({"name": odd, "text": odd, "n": [1, -2, 3.5, null, true]}),
            json!({}),
        ];
        for (i, payload) in payloads.into_iter().enumerate() {
            for (parent, child, iteration, path) in [
                (None, None, None, "s1"),
                (Some("p-1"), Some("c-2"), Some(3usize), "loop:3/work"),
                (Some(odd), Some(odd), Some(0), odd),
            ] {
                let h = Head {
                    seq: 40 + i as u64,
                    run_id: "run-\u{2}id",
                    parent_run_id: parent,
                    child_run_id: child,
                    kind: "step.completed",
                    path,
                    iteration,
                    at,
                };
                let want = as_one_object(&h, payload.clone());
                assert_eq!(line(&h, payload.clone()), want);
                let mut appended = String::from("before\n");
                line_into(&mut appended, &h, &payload);
                assert_eq!(appended, format!("before\n{want}"));
                let back: Value = serde_json::from_str(want.trim_end()).unwrap();
                assert_eq!(back["payload"], payload);
            }
        }
    }
}
