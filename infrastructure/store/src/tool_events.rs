//! Tool call events of `awf mcp-serve`: one JSONL line per `tools/call`, appended with one
//! `write` on an `O_APPEND` file (mode 0600) the parent run names in the server's config
//! (`audit_path`). `mcp-serve` runs in the agent CLI's process tree, not in awf's, so it
//! cannot write into the run's transcript itself (its `seq` numbers belong to the run's
//! recorder): the parent reads this file after the step and adds the events to the run
//! ([`tool_events_to_run_events`]: `ToolCall` + `ToolCallResult`, which the transcript writes
//! as `tool.call` and `tool.result` lines).
//!
//! Line shape (keys in this order; `?` = only when set):
//! ```json
//! {"run_id"?:"<run id>","step"?:"review","traceparent"?:"00-…","type":"tool.call","timestamp":"2026-11-30T01:02:03.456Z",
//!  "payload":{"name":"Read","call_id":"3","source":"builtin","input":{"path":"a.txt"},
//!  "output":"…","error"?:true,"duration_ms":2,"fidelity":"router"}}
//! ```
//! `input` and `output` are already masked; `output` is cut at [`MAX_OUTPUT`] bytes (on a
//! character boundary, `output_truncated: true` then follows it).
//!
//! Source: shared/spec/mcp.md §3.5 (the router-fidelity `tool.call` / `tool.result` events,
//! here one line per call).

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::path::PathBuf;

use awf_domain::event::RunEvent;
use awf_domain::event::ToolFidelity;
use awf_domain::ports::ToolAuditSink;
use awf_domain::ports::tools::ToolCallRecord;
use awf_domain::timefmt::format_rfc3339;
use serde_json::Map;
use serde_json::Value;

/// Longest `output` kept in a line, in bytes.
pub const MAX_OUTPUT: usize = 256 * 1024;

/// Appends tool call events to one file.
#[derive(Debug, Clone)]
pub struct ToolEventFile {
    path: PathBuf,
}

impl ToolEventFile {
    /// Events go to `path` (created 0600 on the first event; its directory must exist; a
    /// symbolic link or anything but a regular file there is refused, never followed).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The line of one record (newline included).
pub fn tool_event_line(r: &ToolCallRecord) -> String {
    let mut payload = Map::new();
    payload.insert("name".into(), r.name.clone().into());
    payload.insert("call_id".into(), r.call_id.clone().into());
    payload.insert("source".into(), r.source.clone().into());
    payload.insert("input".into(), r.input.clone());
    let mut output = r.output.as_str();
    let truncated = output.len() > MAX_OUTPUT;
    if truncated {
        let mut cut = MAX_OUTPUT;
        while !output.is_char_boundary(cut) {
            cut -= 1;
        }
        output = &output[..cut];
    }
    payload.insert("output".into(), output.into());
    if truncated {
        payload.insert("output_truncated".into(), true.into());
    }
    if r.is_error {
        payload.insert("error".into(), true.into());
    }
    payload.insert("duration_ms".into(), r.duration_ms.into());
    payload.insert("fidelity".into(), "router".into());
    let mut m = Map::new();
    if let Some(id) = &r.run_id {
        m.insert("run_id".into(), id.clone().into());
    }
    if let Some(step) = &r.step {
        m.insert("step".into(), step.clone().into());
    }
    if let Some(tp) = &r.traceparent {
        m.insert("traceparent".into(), tp.clone().into());
    }
    m.insert("type".into(), "tool.call".into());
    m.insert("timestamp".into(), format_rfc3339(r.started_at).into());
    m.insert("payload".into(), Value::Object(payload));
    let mut line = Value::Object(m).to_string();
    line.push('\n');
    line
}

/// The parent's side: the run events of a tool event file's text, two per line
/// (`ToolCall`, then `ToolCallResult`, both [`ToolFidelity::Router`]), in file order, for the step's run to publish into its
/// event stream (transcript, printer, spans). Lines that are not whole events (the torn last
/// line of a killed server) are left out; a line without `step` takes `step`.
pub fn tool_events_to_run_events(text: &str, step: &str) -> Vec<RunEvent> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let p = &v["payload"];
        let (Some(name), Some(id)) = (p["name"].as_str(), p["call_id"].as_str()) else {
            continue;
        };
        let step = v["step"].as_str().unwrap_or(step).to_owned();
        out.push(RunEvent::ToolCall {
            step: step.clone(),
            id: id.to_owned(),
            name: name.to_owned(),
            input: p["input"].clone(),
            fidelity: ToolFidelity::Router,
        });
        out.push(RunEvent::ToolCallResult {
            step,
            id: id.to_owned(),
            output: p["output"].as_str().unwrap_or_default().to_owned(),
            is_error: p["error"].as_bool().unwrap_or(false),
            fidelity: ToolFidelity::Router,
        });
    }
    out
}

impl ToolAuditSink for ToolEventFile {
    fn record(&self, record: &ToolCallRecord) -> std::io::Result<()> {
        let line = tool_event_line(record);
        // O_NOFOLLOW: a symbolic link put at `audit_path` (the server refuses one at start)
        // is not followed, so the records (Write's contents among them) never reach its
        // target; O_NONBLOCK: a FIFO there does not block the call; only a regular file is
        // written.
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
            .open(&self.path)?;
        if !f.metadata()?.is_file() {
            return Err(std::io::Error::other(format!(
                "{} is not a regular file",
                self.path.display()
            )));
        }
        f.write_all(line.as_bytes())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use serde_json::json;

    use super::*;

    fn record(output: &str) -> ToolCallRecord {
        ToolCallRecord {
            run_id: Some("r1".into()),
            step: Some("review".into()),
            traceparent: None,
            call_id: "3".into(),
            name: "Read".into(),
            source: "builtin".into(),
            input: json!({"path": "a.txt"}),
            output: output.into(),
            is_error: false,
            started_at: std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_767_225_600),
            duration_ms: 2,
        }
    }

    #[test]
    fn each_record_is_one_line_appended_to_a_private_file() {
        let dir = tempfile::tempdir().unwrap();
        let sink = ToolEventFile::new(dir.path().join("tools.jsonl"));
        sink.record(&record("one")).unwrap();
        let mut failed = record("two");
        failed.is_error = true;
        sink.record(&failed).unwrap();
        let text = std::fs::read_to_string(sink.path()).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[0],
            json!({"run_id": "r1", "step": "review", "type": "tool.call",
                "timestamp": "2026-01-01T00:00:00.000Z",
                "payload": {"name": "Read", "call_id": "3", "source": "builtin",
                    "input": {"path": "a.txt"}, "output": "one", "duration_ms": 2,
                    "fidelity": "router"}})
        );
        assert_eq!(lines[1]["payload"]["error"], true);
        let mode = std::fs::metadata(sink.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn the_parent_reads_the_file_back_as_run_events() {
        let mut failed = record("no such file");
        failed.call_id = "4".into();
        failed.is_error = true;
        failed.step = None;
        let text = format!(
            "{}{}{{\"torn\":",
            tool_event_line(&record("one")),
            tool_event_line(&failed)
        );
        let events = tool_events_to_run_events(&text, "fallback");
        assert_eq!(
            events,
            vec![
                RunEvent::ToolCall {
                    step: "review".into(),
                    id: "3".into(),
                    name: "Read".into(),
                    input: json!({"path": "a.txt"}),
                    fidelity: ToolFidelity::Router,
                },
                RunEvent::ToolCallResult {
                    step: "review".into(),
                    id: "3".into(),
                    output: "one".into(),
                    is_error: false,
                    fidelity: ToolFidelity::Router,
                },
                RunEvent::ToolCall {
                    step: "fallback".into(),
                    id: "4".into(),
                    name: "Read".into(),
                    input: json!({"path": "a.txt"}),
                    fidelity: ToolFidelity::Router,
                },
                RunEvent::ToolCallResult {
                    step: "fallback".into(),
                    id: "4".into(),
                    output: "no such file".into(),
                    is_error: true,
                    fidelity: ToolFidelity::Router,
                },
            ]
        );
    }

    #[test]
    fn a_long_output_is_cut_on_a_char_boundary() {
        let long = "é".repeat(MAX_OUTPUT);
        let line = tool_event_line(&record(&long));
        let v: Value = serde_json::from_str(&line).unwrap();
        let out = v["payload"]["output"].as_str().unwrap();
        assert!(out.len() <= MAX_OUTPUT && out.len() > MAX_OUTPUT - 4);
        assert_eq!(v["payload"]["output_truncated"], true);
    }
}
