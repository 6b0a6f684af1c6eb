//! Terminal projection of the run-event stream (text mode).
//!
//! Conventions: command output goes to **stdout** (live with `-o streaming`, after each step with
//! `-o buffered`, not at all with `-o silent`); everything else — step start/end lines with
//! durations, retries, hook `log` lines, warnings, sub-workflow markers — goes to **stderr**,
//! so that stdout carries only what the workflow's commands printed. With `-o streaming` each
//! stdout line is prefixed `[OUT] ` and each stderr line `[ERR] ` (the latter on stderr); a
//! parallel branch's lines also name their step (`[OUT] [b1] `), since branches interleave,
//! and a branch's partial line is ended before another step's line is printed; a partial line
//! of one stream is ended before a line of the other stream is printed (they meet on a
//! terminal). With `-o buffered` a branch's block has each line prefixed with its label
//! (`[b1] `), the same one.
//!
//! In the default `-o silent` mode a failed step's line is followed by the last lines of its
//! output (see [`TextPrinter::with_failure_tail`]).
//!
//! On a terminal the printer can carry a [`LiveProgress`]: step start lines then become
//! spinners and every stderr line is printed above them (see [`crate::progress`]).
//!
//! Source: spec/workflow.md §4.2 (`awf run` text output) and §4.3 (output modes).

use std::collections::HashMap;
use std::io;
use std::io::Write;
use std::time::Duration;

use awf_domain::ErrorCode;
use awf_domain::duration::format_go;
use awf_domain::event::EventEnvelope;
use awf_domain::event::LogLevel;
use awf_domain::event::OutputStream;
use awf_domain::event::RunEvent;
use awf_domain::interaction::RequestKind;
use awf_domain::run::RunId;
use awf_domain::run::StepState;
use awf_domain::run::StepStatus;

use crate::cli::OutputMode;
use crate::progress::LiveProgress;
use crate::style::Style;

/// Renders run events as human text.
#[derive(Debug)]
pub struct TextPrinter {
    mode: OutputMode,
    quiet: bool,
    style: Style,
    /// First lines of the errors of failed steps already printed (most recent last), so a
    /// block whose error wraps a branch's or body step's error does not repeat it.
    shown_errors: Vec<String>,
    /// The lines after the first of the errors of failed steps already printed (a list of
    /// a sub-workflow's input errors), so a call step wrapping a shown error does not
    /// repeat them.
    shown_error_rests: Vec<String>,
    /// Run log lines (`RunEvent::Log`) more verbose than this are not shown.
    log_level: awf_telemetry::LevelFilter,
    /// Run log lines as JSON objects (`--log-format json`).
    log_json: bool,
    /// Nesting depth of sub-workflow runs (the top-level run is absent = 0).
    depth: HashMap<RunId, usize>,
    /// Child run id → workflow identifier.
    child_names: HashMap<RunId, String>,
    /// Where the next streamed chunk of (run, path, stream) goes on its line.
    mid_line: HashMap<(RunId, String, bool), LineAt>,
    /// `-o streaming`: the unfinished last line of a parallel branch's stream, printed once
    /// its newline comes, at its step's end, or past [`PARTIAL_LINE_MAX`] bytes.
    partial_lines: HashMap<(RunId, String, bool), Vec<u8>>,
    /// Parallel steps of each run that have started and not finished.
    open_parallel: HashMap<RunId, usize>,
    /// Steps started while a parallel step of their run was open (its branches), by (run,
    /// path): the label their streamed lines carry.
    branch_labels: HashMap<(RunId, String), String>,
    /// Child runs started by a labelled branch (`call_workflow`): their steps' lines carry
    /// the branch's label.
    run_labels: HashMap<RunId, String>,
    /// `-o buffered`: the bytes a running step wrote to (run, path, stdout?), printed exactly
    /// when it finishes.
    buffered: HashMap<(RunId, String, bool), Vec<u8>>,
    /// `-o buffered`: the streams whose bytes went past [`BUFFERED_MAX`], with how many
    /// bytes they wrote: their buffer is dropped, and the step's kept text (at most its
    /// capture cap) is shown instead, then how much was not (trial 82: a 1 GiB output was
    /// held whole, 1.1 GB of memory).
    buffered_over: HashMap<(RunId, String, bool), u64>,
    /// `--verbose`: agent thoughts and `[tool: Name(arg)]` markers.
    verbose: bool,
    /// `-o silent`: a failed step's line is followed by the last lines of its output
    /// ([`crate::output_tail`]), not shown otherwise (not with `-q`).
    failure_tail: bool,
    /// Agent text received since the last conversation prompt (shown before asking, in the
    /// modes that do not stream it).
    agent_text: String,
    /// Whether streamed agent text left the cursor mid-line.
    agent_mid_line: bool,
    /// `--verbose`: the tool calls shown as `[tool: …]` markers whose result has not come,
    /// (run, step, call id) → tool name, so a failed one gets its `[tool error: …]` line.
    shown_calls: HashMap<(RunId, String, String), String>,
    /// Spinners on a terminal; `None` prints plain lines.
    live: Option<LiveProgress>,
    /// Set by the first breakpoint request (`--interactive` / `--breakpoint`): from then on
    /// each top-level step gets an `Executing` line and a result block (output, exit code,
    /// duration, status).
    interactive: bool,
    /// Requests whose prompt is open now (asked, not yet answered or resolved), in order.
    open_prompts: Vec<String>,
    /// What other events rendered while a prompt was open (stdout, stderr bytes), written
    /// once no prompt is open, so the prompt's line stays readable.
    held: (Vec<u8>, Vec<u8>),
    /// Something was written over an open prompt (held output over its budget, a signal
    /// notice): the prompt should be shown again.
    overprinted: bool,
    /// A top-level `Workflow started` (or `Workflow resumed`) line was printed: the lines
    /// after it are an attempt of the run (`awf resume` replays the earlier ones first).
    attempt_shown: bool,
    /// The events since the last top-level `RunStarted` are an earlier attempt of the run,
    /// replayed by `awf resume` (its `pid` is not this process's): `quiet` drops its failure
    /// lines too, which belong to a failure already reported.
    replayed: bool,
}

/// Stdout for one printed event: a write that fails is remembered and the event's later
/// stdout writes dropped, but not returned at once, so that the event's stderr lines (a
/// step's `✓`/`✗` line, its `-o buffered` stderr block) are written all the same: what
/// stderr shows does not depend on whether stdout's reader is still there (trial 77: with
/// `-o buffered | head -1` every step line after the first block was lost).
struct DeferredError<W: Write> {
    inner: W,
    error: Option<io::Error>,
}

impl<W: Write> DeferredError<W> {
    fn new(inner: W) -> Self {
        Self { inner, error: None }
    }

    /// `r`'s error first, else the first error of a write to stdout.
    fn result(self, r: io::Result<()>) -> io::Result<()> {
        r?;
        self.error.map_or(Ok(()), Err)
    }
}

impl<W: Write> Write for DeferredError<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.error.is_none() {
            match self.inner.write(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => return Err(e),
                Err(e) => self.error = Some(e),
                ok => return ok,
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.error.is_none()
            && let Err(e) = self.inner.flush()
        {
            self.error = Some(e);
        }
        Ok(())
    }
}

/// How much output is held while a prompt is open before it is written anyway (and the
/// prompt shown again below it).
const HELD_BUDGET: usize = 256 * 1024;

/// When this awf process started (set first thing in `main`): a top-level attempt that
/// started before it is one `awf resume` replays from the run's log, whatever its pid (an
/// attempt's pid is kept in the log as it was live, and a process in a fresh container
/// gets the same pid every time).
pub(crate) static PROCESS_START: std::sync::OnceLock<std::time::SystemTime> =
    std::sync::OnceLock::new();

impl TextPrinter {
    /// A printer for `mode`; `quiet` drops step, log and info lines (warnings and command
    /// output stay); `style` colours the stderr lines.
    pub fn new(mode: OutputMode, quiet: bool, style: Style) -> Self {
        Self {
            mode,
            quiet,
            style,
            log_level: awf_telemetry::LevelFilter::TRACE,
            log_json: false,
            shown_errors: Vec::new(),
            shown_error_rests: Vec::new(),
            depth: HashMap::new(),
            child_names: HashMap::new(),
            mid_line: HashMap::new(),
            partial_lines: HashMap::new(),
            open_parallel: HashMap::new(),
            branch_labels: HashMap::new(),
            run_labels: HashMap::new(),
            buffered: HashMap::new(),
            buffered_over: HashMap::new(),
            verbose: false,
            failure_tail: false,
            agent_text: String::new(),
            agent_mid_line: false,
            shown_calls: HashMap::new(),
            live: None,
            interactive: false,
            open_prompts: Vec::new(),
            held: (Vec::new(), Vec::new()),
            overprinted: false,
            attempt_shown: false,
            replayed: false,
        }
    }

    /// Whether `ev` is about a step of the top-level run itself (not a branch, a loop body
    /// step or a sub-workflow's step), which the interactive display describes.
    fn top_level_step(ev: &EventEnvelope, step: &str) -> bool {
        ev.parent_run_id.is_none() && ev.path == step && ev.iteration.is_none()
    }

    /// Shows running steps as spinners through `live` (`None`: plain lines).
    #[must_use]
    pub fn with_live(mut self, live: Option<LiveProgress>) -> Self {
        self.live = live;
        self
    }

    /// The live progress, when the printer has one.
    #[cfg(test)]
    pub fn live(&self) -> Option<&LiveProgress> {
        self.live.as_ref()
    }

    /// [`Self::handle`] on this process's stdout and stderr. Without live progress both are
    /// locked for the event; with it they are not (the spinner thread writes stderr too).
    ///
    /// # Errors
    /// I/O errors of the streams.
    pub fn handle_stdio(&mut self, ev: &EventEnvelope) -> io::Result<()> {
        if self.live.is_some() {
            let mut out = DeferredError::new(io::stdout());
            let r = self.handle(ev, &mut out, &mut io::stderr());
            out.result(r)
        } else {
            let mut out = io::stdout().lock();
            let mut err = io::stderr().lock();
            self.handle_batched(ev, &mut out, &mut err)
        }
    }

    /// [`Self::handle`] with the event's writes gathered: one `write` per stream and event
    /// (see [`crate::batch_write`]), in the same order.
    ///
    /// # Errors
    /// I/O errors of the writers.
    pub fn handle_batched(
        &mut self,
        ev: &EventEnvelope,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> io::Result<()> {
        let mut out = DeferredError::new(out);
        let r = crate::batch_write::batched(&mut out, err, |o, e| self.handle(ev, o, e));
        out.result(r)
    }

    /// Request `request_id` was answered: once no other prompt is open, the spinners show
    /// again (the output held meanwhile is written with the request's resolved event, which
    /// follows).
    pub fn prompt_answered(&mut self, request_id: &str) {
        self.open_prompts.retain(|id| id != request_id);
        if self.open_prompts.is_empty()
            && let Some(live) = self.live.as_mut()
        {
            live.resume();
        }
    }

    /// Whether something was written over an open prompt since the last call (the prompt
    /// should be shown again).
    pub fn take_overprinted(&mut self) -> bool {
        std::mem::take(&mut self.overprinted)
    }

    /// Writes the output held while prompts were open.
    fn release_held(&mut self, out: &mut dyn Write, err: &mut dyn Write) -> io::Result<()> {
        let (o, e) = std::mem::take(&mut self.held);
        if o.is_empty() && e.is_empty() {
            return Ok(());
        }
        match self.live.as_mut() {
            Some(live) => live.write(&o, &e, out, err),
            None => {
                out.write_all(&o)?;
                out.flush()?;
                err.write_all(&e)?;
                err.flush()
            }
        }
    }

    /// Prints one line on stderr (above the spinners when they are shown). While a prompt
    /// is open the line starts on a line of its own (the prompt is shown again after it).
    pub fn stderr_line(&mut self, text: &str) {
        if !self.open_prompts.is_empty() {
            let _ = writeln!(io::stderr().lock(), "\n{text}");
            self.overprinted = true;
            return;
        }
        match self.live.as_mut() {
            Some(live) => {
                let _ = live.line(text, &mut io::stderr());
            }
            None => {
                let _ = writeln!(io::stderr().lock(), "{text}");
            }
        }
    }

    /// Clears the spinners and writes any held output; call before the run summary.
    /// Safe to call more than once.
    pub fn finish(&mut self) {
        self.open_prompts.clear();
        let _ = self.release_held(&mut DeferredError::new(io::stdout()), &mut io::stderr());
        if let Some(live) = self.live.as_mut() {
            let _ = live.finish(&mut DeferredError::new(io::stdout()), &mut io::stderr());
        }
    }

    /// Run log lines (`RunEvent::Log`): the most verbose level shown and whether they are
    /// JSON objects (`--log-format json`) instead of `INFO …` / `WARN …` lines.
    #[must_use]
    pub fn with_logs(mut self, level: awf_telemetry::LevelFilter, json: bool) -> Self {
        self.log_level = level;
        self.log_json = json;
        self
    }

    /// Shows agent thoughts and tool-call markers (`--verbose`).
    #[must_use]
    pub fn with_verbose(mut self, verbose: bool) -> Self {
        self.verbose = verbose;
        self
    }

    /// Under a failed step's line, the last lines of its output (stdout, then stderr, as
    /// `-o buffered` shows them; secrets masked as the step's record holds them), when `on`
    /// and its output was not shown: `-o silent` (the default), not `-q`, not a step the
    /// interactive display's result block shows.
    #[must_use]
    pub fn with_failure_tail(mut self, on: bool) -> Self {
        self.failure_tail = on && self.mode == OutputMode::Silent && !self.quiet;
        self
    }

    fn indent(&self, ev: &EventEnvelope) -> String {
        let d = self.depth.get(&ev.run_id).copied().unwrap_or(0);
        "  ".repeat(d + 1)
    }

    fn label(step: &str, ev: &EventEnvelope) -> String {
        let step = crate::style::printable(step);
        match ev.iteration {
            Some(i) => format!("{step}[{i}]"),
            None => step.into_owned(),
        }
    }

    /// Writes the projection of one event: command output to `out`, all other lines to `err`.
    ///
    /// The top-level `RunFinished` prints nothing: the caller prints the run summary.
    ///
    /// With live progress, a started step gets a spinner instead of its `→` line, a finished
    /// step's spinner is replaced by its final line, and a prompt clears the spinners until
    /// [`Self::prompt_answered`].
    ///
    /// # Errors
    /// I/O errors of the writers.
    pub fn handle(
        &mut self,
        ev: &EventEnvelope,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> io::Result<()> {
        match &ev.event {
            RunEvent::InteractionRequired { request } => {
                self.open_prompts.push(request.request_id.clone());
                self.handle_now(ev, out, err)
            }
            RunEvent::InteractionResolved { request_id, .. } => {
                self.open_prompts.retain(|id| id != request_id);
                self.handle_now(ev, out, err)?;
                if self.open_prompts.is_empty() {
                    self.release_held(out, err)?;
                }
                Ok(())
            }
            // A prompt is open (or its held output is not written yet): other output waits
            // for its answer (the spinners' bookkeeping goes on, hidden).
            _ if !self.open_prompts.is_empty()
                || !self.held.0.is_empty()
                || !self.held.1.is_empty() =>
            {
                let (mut o, mut e) = (Vec::new(), Vec::new());
                self.handle_now(ev, &mut o, &mut e)?;
                self.held.0.extend_from_slice(&o);
                self.held.1.extend_from_slice(&e);
                if self.held.0.len() + self.held.1.len() > HELD_BUDGET {
                    // Too much to hold: write it below the prompt, then ask again.
                    err.write_all(b"\n")?;
                    let (o, e) = std::mem::take(&mut self.held);
                    match self.live.as_mut() {
                        Some(live) => live.write(&o, &e, out, err)?,
                        None => {
                            out.write_all(&o)?;
                            out.flush()?;
                            err.write_all(&e)?;
                            err.flush()?;
                        }
                    }
                    self.overprinted = true;
                }
                Ok(())
            }
            _ => self.handle_now(ev, out, err),
        }
    }

    /// `-o streaming`: a streamed stderr line left partial is ended before any other line
    /// can follow it on stderr (step, retry and log lines), and a step's partial lines before
    /// its retry (the next attempt's output starts lines of its own, prefixed).
    fn end_partial_lines(
        &mut self,
        ev: &EventEnvelope,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> io::Result<()> {
        if matches!(ev.event, RunEvent::OutputChunk { .. }) {
            return Ok(());
        }
        let retrying = matches!(ev.event, RunEvent::StepRetrying { .. });
        let ended = matches!(ev.event, RunEvent::RunFinished { .. }) && ev.parent_run_id.is_none();
        if retrying || ended {
            self.flush_partial_lines(out, err, |(run, path, _)| {
                ended || (*run == ev.run_id && *path == ev.path)
            })?;
        }
        self.end_lines(out, err, |(run, path, is_out)| {
            !is_out || (retrying && *run == ev.run_id && *path == ev.path)
        })
    }

    /// Ends the partial streamed lines of the (run, path, stdout?) keys `which` selects, one
    /// newline per stream: the rest of each line gets a prefix of its own.
    fn end_lines(
        &mut self,
        out: &mut dyn Write,
        err: &mut dyn Write,
        which: impl Fn(&(RunId, String, bool)) -> bool,
    ) -> io::Result<()> {
        let (mut cut_out, mut cut_err) = (false, false);
        for (key, at) in &mut self.mid_line {
            if *at != LineAt::Start && which(key) {
                *at = LineAt::Start;
                if key.2 {
                    cut_out = true;
                } else {
                    cut_err = true;
                }
            }
        }
        if cut_out {
            out.write_all(b"\n")?;
        }
        if cut_err {
            err.write_all(b"\n")?;
        }
        Ok(())
    }

    /// Writes streamed `bytes` of `key` with `prefix` at each line's start, after ending
    /// another step's partial line on that stream, and any partial line on the other stream
    /// (on a terminal both streams meet: `[OUT] partial[ERR] oops` otherwise). The rest of
    /// an ended line gets a prefix of its own; no byte is dropped.
    fn write_streamed(
        &mut self,
        key: &(RunId, String, bool),
        bytes: &[u8],
        prefix: &str,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> io::Result<()> {
        let is_out = key.2;
        self.end_lines(out, err, |k| k != key)?;
        let at = self.mid_line.get(key).copied().unwrap_or(LineAt::Start);
        let (prefixed, now_at) = prefix_lines(bytes, prefix, at);
        self.mid_line.insert(key.clone(), now_at);
        if is_out {
            out.write_all(&prefixed)?;
            out.flush()?;
        } else {
            err.write_all(&prefixed)?;
        }
        Ok(())
    }

    /// Prints the kept unfinished lines of the (run, path, stdout?) keys `which` selects,
    /// each ended with a newline (its step ended, or retries, or the run ended).
    fn flush_partial_lines(
        &mut self,
        out: &mut dyn Write,
        err: &mut dyn Write,
        which: impl Fn(&(RunId, String, bool)) -> bool,
    ) -> io::Result<()> {
        if self.partial_lines.is_empty() {
            return Ok(());
        }
        let mut keys: Vec<_> = self
            .partial_lines
            .keys()
            .filter(|k| which(k))
            .cloned()
            .collect();
        keys.sort();
        for key in keys {
            let Some(mut line) = self.partial_lines.remove(&key) else {
                continue;
            };
            line.push(b'\n');
            let (prefix, _) = self.stream_prefix(&key);
            self.write_streamed(&key, &line, &prefix, out, err)?;
        }
        Ok(())
    }

    /// The label a branch's streamed lines carry: its own, or that of the branch that
    /// started its run.
    fn branch_label(&self, run: &RunId, path: &str) -> Option<&String> {
        self.branch_labels
            .get(&(run.clone(), path.to_owned()))
            .or_else(|| self.run_labels.get(run))
    }

    /// `-o buffered`: after a stream of `ev`'s step that went past [`BUFFERED_MAX`] (its
    /// kept text, `shown` bytes, was shown), a line on `err` saying how many bytes were not.
    fn buffered_not_shown(
        &mut self,
        ev: &EventEnvelope,
        is_out: bool,
        shown: usize,
        err: &mut dyn Write,
    ) -> io::Result<()> {
        let Some(total) = self
            .buffered_over
            .remove(&(ev.run_id.clone(), ev.path.clone(), is_out))
        else {
            return Ok(());
        };
        let missed = total.saturating_sub(shown as u64);
        if missed > 0 {
            let which = if is_out { "stdout" } else { "stderr" };
            writeln!(
                err,
                "… {missed} bytes of {which} not shown (over the capture cap; `awf status` and the step's output file have what is kept)"
            )?;
        }
        Ok(())
    }

    /// What each streamed line of `key` starts with (`[OUT] `, `[ERR] [b1] `…), and whether
    /// it carries a branch's label.
    fn stream_prefix(&self, key: &(RunId, String, bool)) -> (String, bool) {
        let tag = if key.2 { "[OUT] " } else { "[ERR] " };
        match self.branch_label(&key.0, &key.1) {
            Some(label) => (format!("{tag}[{label}] "), true),
            None => (tag.to_owned(), false),
        }
    }

    /// [`Self::handle`] without holding: renders `ev` and writes it now.
    fn handle_now(
        &mut self,
        ev: &EventEnvelope,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> io::Result<()> {
        if self.live.is_none() {
            self.end_partial_lines(ev, out, err)?;
            return self.render(ev, out, err);
        }
        // With spinners, every byte goes through the live display (it holds partial lines).
        let (mut out_bytes, mut err_bytes) = (Vec::new(), Vec::new());
        self.end_partial_lines(ev, &mut out_bytes, &mut err_bytes)?;
        self.render(ev, &mut out_bytes, &mut err_bytes)?;
        let ind = self.indent(ev);
        let no_prompt_open = self.open_prompts.is_empty();
        let Some(live) = self.live.as_mut() else {
            return Ok(());
        };
        match &ev.event {
            RunEvent::StepStarted { step, .. } => {
                live.start(&ev.run_id, &ev.path, &ind, &Self::label(step, ev));
            }
            RunEvent::StepFinished { .. } => {
                live.stop(&ev.run_id, &ev.path);
            }
            RunEvent::RunFinished { .. } => {
                if ev.parent_run_id.is_none() {
                    live.stop_all();
                } else {
                    live.stop_run(&ev.run_id);
                }
            }
            RunEvent::InteractionRequired { .. } => live.pause(),
            // Another prompt may still be open (parallel branches): spinners stay hidden.
            RunEvent::InteractionResolved { .. } if no_prompt_open => live.resume(),
            RunEvent::InteractionResolved { .. } => {}
            RunEvent::RunStarted { .. }
            | RunEvent::StepRetrying { .. }
            | RunEvent::OutputChunk { .. }
            | RunEvent::Log { .. }
            | RunEvent::AgentMessageChunk { .. }
            | RunEvent::AgentThoughtChunk { .. }
            | RunEvent::ToolCall { .. }
            | RunEvent::ToolCallResult { .. }
            | RunEvent::ChildRunStarted { .. } => {}
        }
        live.write(&out_bytes, &err_bytes, out, err)
    }

    /// The plain projection of one event (see [`Self::handle`]); with live progress the `→`
    /// line of a started step is left out (its spinner stands for it).
    fn render(
        &mut self,
        ev: &EventEnvelope,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> io::Result<()> {
        let ind = self.indent(ev);
        match &ev.event {
            RunEvent::RunStarted {
                workflow,
                resumed_from,
                pid,
                ..
            } => {
                if ev.parent_run_id.is_none() {
                    self.replayed = *pid != std::process::id()
                        || PROCESS_START.get().is_some_and(|t| ev.at < *t);
                }
                if ev.parent_run_id.is_none() && !self.quiet {
                    let name = crate::style::printable(workflow);
                    match resumed_from {
                        // `awf resume`: the earlier attempts' lines (replayed from the run's
                        // log) end here; what follows runs now.
                        Some(at) => writeln!(
                            err,
                            "Workflow resumed: {name} ({}) from step {}{}",
                            ev.run_id,
                            crate::style::printable(at),
                            if self.attempt_shown {
                                " (the steps above ran before)"
                            } else {
                                ""
                            }
                        )?,
                        None => writeln!(err, "Workflow started: {name} ({})", ev.run_id)?,
                    }
                    self.attempt_shown = true;
                }
            }
            RunEvent::StepStarted { step, kind, .. } => {
                if kind == "parallel" {
                    *self.open_parallel.entry(ev.run_id.clone()).or_default() += 1;
                } else if self.open_parallel.get(&ev.run_id).is_some_and(|n| *n > 0) {
                    self.branch_labels
                        .insert((ev.run_id.clone(), ev.path.clone()), Self::label(step, ev));
                }
                let announced = self.interactive && Self::top_level_step(ev, step);
                if announced {
                    writeln!(err, "\n{ind}Executing {step}...\n{ind}{}", "-".repeat(20))?;
                }
                if !self.quiet && self.live.is_none() && !announced {
                    writeln!(
                        err,
                        "{ind}{} {}",
                        self.style.cyan("→"),
                        Self::label(step, ev)
                    )?;
                }
            }
            RunEvent::StepRetrying {
                step,
                attempt,
                delay_ms,
                reason,
            } => {
                // Buffered output shows the last attempt only, as the step's state does.
                for is_out in [true, false] {
                    let key = (ev.run_id.clone(), ev.path.clone(), is_out);
                    self.buffered.remove(&key);
                    self.buffered_over.remove(&key);
                }
                if !self.quiet {
                    // Why the attempt failed, first (new user: the line did not say).
                    let why = reason
                        .as_deref()
                        .map_or_else(String::new, |r| format!("{}, ", crate::style::printable(r)));
                    writeln!(
                        err,
                        "{ind}{} {}: {why}retrying (attempt {attempt}) in {}",
                        self.style.yellow("↻"),
                        Self::label(step, ev),
                        format_go(Duration::from_millis(*delay_ms))
                    )?;
                }
            }
            // An earlier attempt's output, replayed by `awf resume`: it was printed when that
            // attempt ran; printed again, whoever reads stdout got it twice.
            RunEvent::OutputChunk { .. } if self.replayed => {}
            RunEvent::OutputChunk {
                step: _,
                stream,
                text,
            } => {
                let is_out = *stream == OutputStream::Stdout;
                let key = (ev.run_id.clone(), ev.path.clone(), is_out);
                if self.mode == OutputMode::Streaming {
                    let (prefix, labelled) = self.stream_prefix(&key);
                    let mid = self
                        .mid_line
                        .get(&key)
                        .is_some_and(|at| *at != LineAt::Start);
                    // Branches print at the same time: a branch's lines are printed whole,
                    // its unfinished last line kept until the rest comes (another branch's
                    // line printed in between cut them in two). A step outside a block
                    // prints as it comes (a prompt without a newline shows at once).
                    let mut shown = std::borrow::Cow::Borrowed(text.as_bytes());
                    if labelled && !mid {
                        let mut joined = self.partial_lines.remove(&key).unwrap_or_default();
                        joined.extend_from_slice(text.as_bytes());
                        let whole = joined
                            .iter()
                            .rposition(|&b| b == b'\n')
                            .map_or(0, |i| i + 1);
                        if joined.len() - whole <= PARTIAL_LINE_MAX {
                            let rest = joined.split_off(whole);
                            if !rest.is_empty() {
                                self.partial_lines.insert(key.clone(), rest);
                            }
                        }
                        shown = std::borrow::Cow::Owned(joined);
                    }
                    if !shown.is_empty() {
                        self.write_streamed(&key, &shown, &prefix, out, err)?;
                    }
                } else if self.mode == OutputMode::Buffered {
                    let len = text.as_bytes().len() as u64;
                    if let Some(total) = self.buffered_over.get_mut(&key) {
                        *total += len;
                    } else {
                        let held = self.buffered.get(&key).map_or(0, Vec::len);
                        if held + text.as_bytes().len() > BUFFERED_MAX {
                            self.buffered.remove(&key);
                            self.buffered_over.insert(key, held as u64 + len);
                        } else {
                            self.buffered
                                .entry(key)
                                .or_default()
                                .extend_from_slice(text.as_bytes());
                        }
                    }
                }
            }
            RunEvent::Log {
                level,
                message,
                step,
            } => {
                let shown = awf_telemetry::LogConfig::shows(self.log_level, *level);
                if shown && self.log_json {
                    let line = awf_telemetry::LogConfig::run_log_json(
                        std::time::SystemTime::now(),
                        *level,
                        step.as_deref(),
                        message,
                    );
                    writeln!(err, "{line}")?;
                } else if shown {
                    match level {
                        LogLevel::Info => {
                            if !self.quiet {
                                writeln!(
                                    err,
                                    "{ind}{} {}",
                                    self.style.dim("INFO"),
                                    crate::style::printable_text(message)
                                )?;
                            }
                        }
                        LogLevel::Warn => {
                            writeln!(
                                err,
                                "{ind}{} {}",
                                self.style.yellow("WARN"),
                                crate::style::printable_text(message)
                            )?;
                        }
                    }
                }
            }
            RunEvent::AgentMessageChunk { text, .. } => {
                if self.mode == OutputMode::Streaming {
                    out.write_all(text.as_bytes())?;
                    out.flush()?;
                    self.agent_mid_line = !text.ends_with('\n');
                } else {
                    self.agent_text.push_str(text);
                }
            }
            RunEvent::AgentThoughtChunk { text, .. } => {
                if self.verbose && self.mode == OutputMode::Streaming {
                    write!(err, "{}", self.style.dim(text))?;
                }
            }
            RunEvent::ToolCall {
                step,
                id,
                name,
                input,
                fidelity,
            } => {
                // The proxy's own record of the call is shown instead. A call reported by
                // both the agent and awf's router under one id (`openai_compatible` with
                // `mcp_proxy`: the provider's report, then the in-process router's record)
                // is shown once, when it starts.
                let key = (ev.run_id.clone(), step.clone(), id.clone());
                if self.verbose
                    && self.mode == OutputMode::Streaming
                    && !awf_domain::event::is_proxy_call_report(name, *fidelity)
                    && !self.shown_calls.contains_key(&key)
                {
                    if self.agent_mid_line {
                        out.write_all(b"\n")?;
                    }
                    writeln!(out, "[tool: {name}({})]", tool_arg_preview(input))?;
                    out.flush()?;
                    self.agent_mid_line = false;
                    self.shown_calls.insert(key, name.clone());
                }
            }
            RunEvent::ToolCallResult {
                step,
                id,
                output,
                is_error,
                ..
            } => {
                let key = (ev.run_id.clone(), step.clone(), id.clone());
                if let Some(name) = self.shown_calls.remove(&key)
                    && *is_error
                {
                    if self.agent_mid_line {
                        out.write_all(b"\n")?;
                    }
                    writeln!(out, "[tool error: {name}: {}]", tool_error_preview(output))?;
                    out.flush()?;
                    self.agent_mid_line = false;
                }
            }
            RunEvent::InteractionRequired { request } => match &request.kind {
                RequestKind::Breakpoint {
                    state_kind,
                    previous,
                    preview,
                } => {
                    self.interactive = true;
                    out.flush()?;
                    let step = request.step.as_deref().unwrap_or("");
                    write!(
                        err,
                        "{}",
                        breakpoint_prompt(
                            self.style,
                            &ind,
                            step,
                            state_kind,
                            previous.is_some(),
                            preview
                        )
                    )?;
                    err.flush()?;
                }
                RequestKind::ConversationTurn { prompt } => {
                    if self.mode == OutputMode::Streaming {
                        if self.agent_mid_line {
                            out.write_all(b"\n")?;
                            self.agent_mid_line = false;
                        }
                    } else if !self.agent_text.is_empty() {
                        out.write_all(self.agent_text.as_bytes())?;
                        if !self.agent_text.ends_with('\n') {
                            out.write_all(b"\n")?;
                        }
                    }
                    self.agent_text.clear();
                    out.flush()?;
                    write!(err, "{prompt}")?;
                    err.flush()?;
                }
                // The terminal's answering code asks these itself (interact.rs).
                RequestKind::MissingInput { .. } | RequestKind::Approval { .. } => {
                    out.flush()?;
                }
            },
            RunEvent::InteractionResolved { resolution, .. } => {
                // A prompt left unanswered: end its line.
                if *resolution == awf_domain::interaction::Resolution::TimedOut {
                    writeln!(err, "\n{ind}(no answer in time)")?;
                }
            }
            RunEvent::StepFinished { step, kind, state } => {
                if self.mode == OutputMode::Streaming {
                    self.flush_partial_lines(out, err, |(run, path, _)| {
                        *run == ev.run_id && *path == ev.path
                    })?;
                }
                // `-o buffered`: a branch's block names it, as its streamed lines would
                // (taken before its label is dropped).
                let block_prefix = if self.mode == OutputMode::Buffered {
                    self.branch_label(&ev.run_id, &ev.path)
                        .map(|l| format!("[{l}] "))
                } else {
                    None
                };
                if kind == "parallel" {
                    if let Some(n) = self.open_parallel.get_mut(&ev.run_id) {
                        *n = n.saturating_sub(1);
                    }
                } else if !self.branch_labels.is_empty() {
                    self.branch_labels
                        .remove(&(ev.run_id.clone(), ev.path.clone()));
                }
                if kind == "agent" {
                    self.agent_text.clear();
                    if self.agent_mid_line && self.mode == OutputMode::Streaming {
                        out.write_all(b"\n")?;
                        out.flush()?;
                    }
                    self.agent_mid_line = false;
                }
                // End a streamed partial line so the next line starts clean. (The maps are
                // empty in most runs: no key is built for them, issue 9.)
                for is_out in [true, false] {
                    if self.mid_line.is_empty() {
                        break;
                    }
                    let key = (ev.run_id.clone(), ev.path.clone(), is_out);
                    if self
                        .mid_line
                        .remove(&key)
                        .is_some_and(|at| at != LineAt::Start)
                    {
                        if is_out {
                            out.write_all(b"\n")?;
                            out.flush()?;
                        } else {
                            err.write_all(b"\n")?;
                        }
                    }
                }
                // What the step wrote, byte for byte when it was streamed (else its text).
                let (written_out, written_err) = if self.buffered.is_empty() {
                    (None, None)
                } else {
                    (
                        self.buffered
                            .remove(&(ev.run_id.clone(), ev.path.clone(), true)),
                        self.buffered
                            .remove(&(ev.run_id.clone(), ev.path.clone(), false)),
                    )
                };
                // An earlier attempt's block, replayed by `awf resume`, was printed when that
                // attempt ran (as streamed output is not printed twice).
                if self.mode == OutputMode::Buffered
                    && !self.replayed
                    && matches!(kind.as_str(), "command" | "agent" | "operation")
                {
                    let shown_out: std::borrow::Cow<'_, [u8]> =
                        written_out.map_or_else(|| state.output.as_bytes().into(), Into::into);
                    let shown_err: std::borrow::Cow<'_, [u8]> =
                        written_err.map_or_else(|| state.stderr.as_bytes().into(), Into::into);
                    if !shown_out.is_empty() {
                        write_block(out, &shown_out, block_prefix.as_deref())?;
                        out.flush()?;
                    }
                    self.buffered_not_shown(ev, true, shown_out.len(), err)?;
                    if !shown_err.is_empty() {
                        write_block(err, &shown_err, block_prefix.as_deref())?;
                    }
                    self.buffered_not_shown(ev, false, shown_err.len(), err)?;
                }
                if self.interactive && Self::top_level_step(ev, step) {
                    let shows_output = self.mode == OutputMode::Silent;
                    write!(err, "{}", self.result_block(state, shows_output, &ind))?;
                }
                // What the step wrote (`-o silent`): its last lines under its line when it
                // failed.
                let tail_shown = self.failure_tail
                    && state.status == StepStatus::Failed
                    && matches!(kind.as_str(), "command" | "agent" | "operation")
                    // An earlier attempt replayed by `awf resume` shows it as the live run
                    // did (new user: the replay dropped its first line and the `│` gutter;
                    // `-q` shows no replayed failure at all, below).
                    && !(self.interactive && Self::top_level_step(ev, step));
                if !self.quiet || (state.status == StepStatus::Failed && !self.replayed) {
                    let line = self.finished_line(&Self::label(step, ev), state);
                    writeln!(err, "{ind}{line}")?;
                    if tail_shown {
                        // Its two streams keep no order between them (each is read on its
                        // own): stdout, then stderr, where a failure is usually said.
                        let tail = crate::output_tail::OutputTail::of_state(state);
                        let reason = state.error.as_deref().map_or("", first_line);
                        let shown = crate::output_tail::render(tail, reason, &format!("{ind}  "));
                        err.write_all(shown.as_bytes())?;
                        // The error's other lines are the step's stderr, shown above: a
                        // block or call step wrapping the error does not repeat them.
                        if let Some((_, rest)) =
                            state.error.as_deref().and_then(|e| e.split_once('\n'))
                        {
                            self.shown_error_rests.push(rest.to_owned());
                            if self.shown_error_rests.len() > 64 {
                                self.shown_error_rests.remove(0);
                            }
                        }
                    }
                    // The line shows the error's first line; the rest (each error of a
                    // list, a sub-workflow's input errors) follows it, unless it is the
                    // step's stderr that its output block (or the lines above) showed.
                    let stderr_shown = (self.mode != OutputMode::Silent || tail_shown)
                        && matches!(kind.as_str(), "command" | "agent" | "operation");
                    if state.status == StepStatus::Failed
                        && !stderr_shown
                        && let Some((_, rest)) =
                            state.error.as_deref().and_then(|e| e.split_once('\n'))
                        && !rest.trim().is_empty()
                        && !self.shown_error_rests.iter().any(|r| r == rest)
                    {
                        for l in rest.lines() {
                            writeln!(err, "{ind}  {}", crate::style::printable_text(l))?;
                        }
                        self.shown_error_rests.push(rest.to_owned());
                        if self.shown_error_rests.len() > 64 {
                            self.shown_error_rests.remove(0);
                        }
                    }
                }
                if state.status == StepStatus::Failed
                    && let Some(e) = &state.error
                {
                    self.shown_errors.push(first_line(e).to_owned());
                    if self.shown_errors.len() > 64 {
                        self.shown_errors.remove(0);
                    }
                }
            }
            RunEvent::ChildRunStarted {
                child_run_id,
                workflow,
                ..
            } => {
                if let Some(label) = self.branch_label(&ev.run_id, &ev.path).cloned() {
                    self.run_labels.insert(child_run_id.clone(), label);
                }
                let d = self.depth.get(&ev.run_id).copied().unwrap_or(0);
                self.depth.insert(child_run_id.clone(), d + 1);
                self.child_names
                    .insert(child_run_id.clone(), workflow.clone());
                if !self.quiet {
                    writeln!(err, "{ind}{} calling {workflow}", self.style.cyan("↳"))?;
                }
            }
            RunEvent::RunFinished { result } => {
                if ev.parent_run_id.is_some() && !self.quiet {
                    let name = self
                        .child_names
                        .get(&ev.run_id)
                        .cloned()
                        .unwrap_or_else(|| result.workflow.clone());
                    let status = serde_json::to_value(result.status)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default();
                    writeln!(
                        err,
                        "{ind}{} {name} finished: {status}",
                        self.style.cyan("↳")
                    )?;
                }
            }
        }
        Ok(())
    }

    /// The interactive result block of a finished step: `Output: …` and `Stderr: …` (trimmed,
    /// when `with_output` and not empty), then `Exit: N | Duration: D | Status: ✓ completed`.
    fn result_block(&self, state: &StepState, with_output: bool, ind: &str) -> String {
        let mut s = String::new();
        if with_output {
            for (label, text) in [("Output", &state.output), ("Stderr", &state.stderr)] {
                // Shown again (not relayed live): control characters as escapes.
                let text = crate::style::printable_text(text.trim());
                if !text.is_empty() {
                    s.push_str(&indented(&format!("{label}: {text}"), ind));
                }
            }
        }
        let exit = state
            .exit_code
            .map_or_else(|| "-".to_owned(), |c| c.to_string());
        let dur = format_go(Duration::from_millis(state.duration_ms()));
        let status = match state.status {
            StepStatus::Completed => format!("{} completed", self.style.green("✓")),
            other => {
                let word = serde_json::to_value(other)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                format!("{} {word}", self.style.red("✗"))
            }
        };
        s.push_str(&format!(
            "{ind}Exit: {exit} | Duration: {dur} | Status: {status}\n"
        ));
        s
    }

    /// `✓ step (12ms)`, `✗ step (1.5s): <error>`, `⊘ step: cancelled (2s)`, `- step: skipped`.
    pub fn finished_line(&self, label: &str, state: &StepState) -> String {
        let dur = format_go(Duration::from_millis(state.duration_ms()));
        match state.status {
            StepStatus::Completed | StepStatus::Running => {
                format!(
                    "{} {label} {}",
                    self.style.green("✓"),
                    self.style.dim(&format!("({dur})"))
                )
            }
            StepStatus::Failed => {
                let why = match (&state.error, state.exit_code) {
                    // The line already names the step: drop the error's own `step S: ` (or
                    // `parallel step S: `), and a wrapped error a line above already showed.
                    (Some(e), _) => {
                        let mut e = first_line(e);
                        for prefix in [
                            format!("step {}: ", state.name),
                            format!("parallel step {}: ", state.name),
                        ] {
                            e = e.strip_prefix(&prefix).unwrap_or(e);
                        }
                        for shown in self.shown_errors.iter().rev() {
                            if let Some(cut) = e.strip_suffix(shown.as_str())
                                && let Some(cut) = cut.strip_suffix(": ")
                                && !cut.is_empty()
                            {
                                e = cut;
                                break;
                            }
                        }
                        let e = with_exit_code(e, state.error_code, state.exit_code);
                        // A step's stderr in the reason: without its control characters.
                        crate::style::printable_text(&e).into_owned()
                    }
                    (None, Some(c)) => format!("exit code {c}"),
                    (None, None) => "failed".to_owned(),
                };
                format!(
                    "{} {label} {}: {why}",
                    self.style.red("✗"),
                    self.style.dim(&format!("({dur})"))
                )
            }
            StepStatus::Cancelled => {
                format!(
                    "{} {label}: cancelled {}",
                    self.style.yellow("⊘"),
                    self.style.dim(&format!("({dur})"))
                )
            }
            StepStatus::Skipped => format!("- {label}: skipped"),
        }
    }
}

/// A failed command's error `e` (its stderr, without the `step S: ` that names the step)
/// with its exit code said first, `exit code 3: not yet`, as `awf run`'s `✗` line and `awf
/// status`'s `Error:` line give it (new user: `✗ flaky: not yet` dropped `exit code 3`).
/// Other errors, and one that already says its exit code or signal, are left as they are.
pub fn with_exit_code(
    e: &str,
    code: Option<ErrorCode>,
    exit: Option<i32>,
) -> std::borrow::Cow<'_, str> {
    match exit {
        Some(c)
            if c != 0
                && code == Some(ErrorCode::ExecutionCommandFailed)
                && !e.starts_with("exit code ")
                && !e.starts_with("killed by signal ") =>
        {
            std::borrow::Cow::Owned(format!("exit code {c}: {e}"))
        }
        _ => std::borrow::Cow::Borrowed(e),
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// The longest unfinished line of a parallel branch kept back in `-o streaming` (bytes); a
/// longer one is printed as it comes, ended when another step's line follows.
const PARTIAL_LINE_MAX: usize = 64 * 1024;

/// Where a stream's next byte goes on its line, for [`prefix_lines`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineAt {
    /// At the start of a line: the prefix comes first.
    Start,
    /// Inside a line that has its prefix.
    Mid,
    /// Just after a carriage return that is not (yet) known to be the first half of `\r\n`:
    /// a `\n` ends the line; anything else rewrites it from its start, so the prefix comes
    /// again first.
    AfterCr,
}

/// Prefixes every line of `text` that starts at a line start; `at` says where the previous
/// chunk left its line. Returns the text and where it leaves its line.
///
/// A carriage return that does not end the line (a command's progress line rewritten in
/// place: `10%\r100%`) takes the cursor back to the prefix's start, so the prefix is written
/// again after it: the rewritten text never overwrites the prefix (`[OUT] 10%\r[OUT] 100%`,
/// where it showed `100%]…`), and the line shows what the command would show without awf,
/// after its prefix. `\r\n` is a line end, even when a chunk ends between the two bytes.
pub fn prefix_lines(text: &[u8], prefix: &str, at: LineAt) -> (Vec<u8>, LineAt) {
    let mut out = Vec::with_capacity(text.len() + prefix.len());
    let mut at = at;
    for &b in text {
        match at {
            LineAt::Start => out.extend_from_slice(prefix.as_bytes()),
            LineAt::AfterCr if b != b'\n' => out.extend_from_slice(prefix.as_bytes()),
            LineAt::AfterCr | LineAt::Mid => {}
        }
        out.push(b);
        at = match b {
            b'\n' => LineAt::Start,
            b'\r' => LineAt::AfterCr,
            _ => LineAt::Mid,
        };
    }
    (out, at)
}

/// Most bytes of one stream of a step `-o buffered` holds until the step ends (the default
/// capture cap); past it, the step's kept text is shown instead.
const BUFFERED_MAX: usize = 64 * 1024 * 1024;

/// Writes a step's `-o buffered` output block to `w`, ended by a newline: as it is, or with
/// `prefix` (`[b1] `, a parallel branch's label) at each line's start.
fn write_block(w: &mut dyn Write, block: &[u8], prefix: Option<&str>) -> io::Result<()> {
    match prefix {
        Some(p) => w.write_all(&prefix_lines(block, p, LineAt::Start).0)?,
        None => w.write_all(block)?,
    }
    if !block.ends_with(b"\n") {
        w.write_all(b"\n")?;
    }
    Ok(())
}

/// Preview of a tool call's main argument: the first of `file_path`, `command`, `cmd`,
/// `query`, `pattern` (AWF (Go)'s names, spec/workflow.md §5.1), then `url` and `path` (the
/// argument names of awf's own tools: `Read`, `Write`, `Edit`, `Glob`, `WebFetch`), truncated
/// to 40 characters; empty when the call has none of them.
pub fn tool_arg_preview(input: &serde_json::Value) -> String {
    for key in [
        "file_path",
        "command",
        "cmd",
        "query",
        "pattern",
        "url",
        "path",
    ] {
        if let Some(v) = input.get(key).and_then(serde_json::Value::as_str) {
            let mut p: String = v.chars().take(40).collect();
            if v.chars().count() > 40 {
                p.push('…');
            }
            return p;
        }
    }
    String::new()
}

/// Preview of a failed tool call's result for its `[tool error: Name: …]` line: the first
/// non-blank line, trimmed, cut to 80 characters (`…` marks a cut); `failed` when empty.
pub fn tool_error_preview(output: &str) -> String {
    let line = output
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("failed");
    let mut p: String = line.chars().take(80).collect();
    if line.chars().count() > 80 || output.trim().lines().nth(1).is_some() {
        p.push('…');
    }
    p
}

/// `text` with `ind` before its first line and `ind` plus two spaces before the others.
fn indented(text: &str, ind: &str) -> String {
    let mut s = String::new();
    for (i, l) in text.lines().enumerate() {
        s.push_str(ind);
        if i > 0 {
            s.push_str("  ");
        }
        s.push_str(l);
        s.push('\n');
    }
    s
}

/// What `--interactive` shows at a breakpoint: the `⏸ [Step n/N] step` header, `Type:`, the
/// step's preview, then the `[c]ontinue [s]kip [a]bort [i]nspect [e]dit NAME=VALUE` prompt
/// (` [r]etry` when a state ran before). `ind` is the run's indent.
pub(crate) fn breakpoint_prompt(
    style: Style,
    ind: &str,
    step: &str,
    kind: &str,
    has_previous: bool,
    preview: &awf_domain::event::StepPreview,
) -> String {
    let retry = if has_previous { " [r]etry" } else { "" };
    format!(
        "\n{ind}{} [Step {}/{}] {step}\n{ind}Type: {kind}\n{}{ind}[c]ontinue [s]kip [a]bort [i]nspect [e]dit NAME=VALUE{retry} > ",
        style.yellow("⏸"),
        preview.position,
        preview.total,
        preview_text(preview, ind),
        step = crate::style::printable(step)
    )
}

/// What `--interactive` shows before a step, under its `[Step n/N]` header: `Command:`
/// (multi-line commands indented), `Timeout:`, then one `→` line per route
/// as `--dry-run` shows it ([`crate::dry_run::route_text`]), then a blank line.
fn preview_text(p: &awf_domain::event::StepPreview, ind: &str) -> String {
    let mut s = String::new();
    if let Some(c) = &p.command {
        let c = crate::style::printable_text(c.trim_end());
        s.push_str(&indented(&format!("Command: {c}"), ind));
    }
    if let Some(t) = p.timeout_ms {
        s.push_str(&format!(
            "{ind}Timeout: {}\n",
            format_go(Duration::from_millis(t))
        ));
    }
    for r in &p.routes {
        let inline = r
            .inline_error
            .as_deref()
            .map(|m| (Some(m).filter(|m| !m.is_empty()), r.exit_code));
        let text = crate::dry_run::route_text(&r.on, r.when.as_deref(), &r.target, inline);
        s.push_str(&format!("{ind}{}\n", crate::style::printable(&text)));
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use awf_domain::event::ToolFidelity;

    fn envelope(seq: u64, event: RunEvent) -> EventEnvelope {
        EventEnvelope {
            seq,
            run_id: RunId("r".into()),
            parent_run_id: None,
            at: SystemTime::UNIX_EPOCH,
            path: "ask".into(),
            iteration: None,
            event,
        }
    }

    /// What a verbose streaming printer writes to stdout for these events.
    fn streamed(events: Vec<RunEvent>) -> String {
        let mut p =
            TextPrinter::new(OutputMode::Streaming, false, Style::plain()).with_verbose(true);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        for (i, e) in events.into_iter().enumerate() {
            p.handle(&envelope(i as u64, e), &mut out, &mut err)
                .unwrap();
        }
        String::from_utf8(out).unwrap()
    }

    fn call(id: &str, name: &str, input: serde_json::Value) -> RunEvent {
        RunEvent::ToolCall {
            step: "ask".into(),
            id: id.into(),
            name: name.into(),
            input,
            fidelity: ToolFidelity::Router,
        }
    }

    fn result(id: &str, output: &str, is_error: bool) -> RunEvent {
        RunEvent::ToolCallResult {
            step: "ask".into(),
            id: id.into(),
            output: output.into(),
            is_error,
            fidelity: ToolFidelity::Router,
        }
    }

    #[test]
    fn tool_markers_preview_awf_own_argument_names() {
        use serde_json::json;
        assert_eq!(
            tool_arg_preview(&json!({"path": "src/main.rs"})),
            "src/main.rs"
        );
        assert_eq!(
            tool_arg_preview(&json!({"url": "http://x/y"})),
            "http://x/y"
        );
        // Grep keeps showing its pattern, not the directory it searches.
        assert_eq!(
            tool_arg_preview(&json!({"pattern": "fn main", "path": "src"})),
            "fn main"
        );
        assert_eq!(tool_arg_preview(&json!({"command": "ls -la"})), "ls -la");
        assert_eq!(tool_arg_preview(&json!({"other": "x"})), "");
    }

    #[test]
    fn a_failed_tool_call_gets_one_error_line_and_a_good_one_none() {
        use serde_json::json;
        let text = streamed(vec![
            call("1", "Read", json!({"path": "a.txt"})),
            result("1", "contents", false),
            call("2", "Read", json!({"path": "missing.txt"})),
            result("2", "no such file: missing.txt\nmore detail", true),
        ]);
        assert_eq!(
            text,
            "[tool: Read(a.txt)]\n[tool: Read(missing.txt)]\n[tool error: Read: no such file: missing.txt…]\n"
        );
        // The result of a call that was not shown (the agent's report of a proxied call)
        // prints nothing.
        let hidden = streamed(vec![
            RunEvent::ToolCall {
                step: "ask".into(),
                id: "9".into(),
                name: "mcp__awf-proxy__Read".into(),
                input: json!({"path": "x"}),
                fidelity: ToolFidelity::Agent,
            },
            result("9", "boom", true),
        ]);
        assert_eq!(hidden, "");
    }

    /// Trial: an `openai_compatible` step with `mcp_proxy` printed `[tool: Read(src/a.txt)]`
    /// twice: the provider reports the call and awf's in-process router records it, under
    /// one id. One marker, one error line.
    #[test]
    fn a_call_reported_by_the_agent_and_the_router_is_shown_once() {
        use serde_json::json;
        let agent = |e: RunEvent| match e {
            RunEvent::ToolCall {
                step,
                id,
                name,
                input,
                ..
            } => RunEvent::ToolCall {
                step,
                id,
                name,
                input,
                fidelity: ToolFidelity::Agent,
            },
            RunEvent::ToolCallResult {
                step,
                id,
                output,
                is_error,
                ..
            } => RunEvent::ToolCallResult {
                step,
                id,
                output,
                is_error,
                fidelity: ToolFidelity::Agent,
            },
            other => other,
        };
        let text = streamed(vec![
            agent(call("c1", "Read", json!({"path": "src/a.txt"}))),
            call("c1", "Read", json!({"path": "src/a.txt"})),
            result("c1", "contents", false),
            agent(result("c1", "contents", false)),
            agent(call("c2", "Read", json!({"path": "gone.txt"}))),
            call("c2", "Read", json!({"path": "gone.txt"})),
            result("c2", "no such file: gone.txt", true),
            agent(result("c2", "error: no such file: gone.txt", true)),
            // The same id again later (another call): shown again.
            agent(call("c1", "Read", json!({"path": "src/b.txt"}))),
        ]);
        assert_eq!(
            text,
            "[tool: Read(src/a.txt)]\n[tool: Read(gone.txt)]\n[tool error: Read: no such file: gone.txt]\n[tool: Read(src/b.txt)]\n"
        );
    }

    #[test]
    fn a_breakpoint_request_renders_the_header_preview_and_prompt() {
        use awf_domain::event::PreviewRoute;
        use awf_domain::event::StepPreview;
        use awf_domain::interaction::InteractionRequest;
        let preview = StepPreview {
            position: 2,
            total: 4,
            command: Some("make".into()),
            timeout_ms: None,
            routes: vec![PreviewRoute {
                on: "on_success".into(),
                when: None,
                target: "done".into(),
                inline_error: None,
                exit_code: None,
            }],
        };
        let ev = awf_domain::event::EventEnvelope {
            seq: 3,
            run_id: RunId("r".into()),
            parent_run_id: None,
            at: SystemTime::UNIX_EPOCH,
            path: "build".into(),
            iteration: None,
            event: RunEvent::InteractionRequired {
                request: Box::new(InteractionRequest {
                    request_id: "r:1".into(),
                    step: Some("build".into()),
                    kind: RequestKind::Breakpoint {
                        state_kind: "command".into(),
                        previous: Some("lint".into()),
                        preview: Box::new(preview),
                    },
                    timeout_ms: None,
                }),
            },
        };
        let mut p = TextPrinter::new(OutputMode::Silent, false, Style::plain());
        let (mut out, mut err) = (Vec::new(), Vec::new());
        p.handle(&ev, &mut out, &mut err).unwrap();
        // The display `--interactive` always had (header, type, preview, the prompt).
        assert_eq!(
            String::from_utf8(err).unwrap(),
            "\n  ⏸ [Step 2/4] build\n  Type: command\n  Command: make\n  → on_success: done\n\n  [c]ontinue [s]kip [a]bort [i]nspect [e]dit NAME=VALUE [r]etry > "
        );
        assert!(out.is_empty());
    }

    #[test]
    fn interactive_preview_lists_command_timeout_and_routes() {
        use awf_domain::event::PreviewRoute;
        use awf_domain::event::StepPreview;
        let p = StepPreview {
            position: 2,
            total: 5,
            command: Some("echo a\necho b\n".into()),
            timeout_ms: Some(5000),
            routes: vec![
                PreviewRoute {
                    on: "when".into(),
                    when: Some("inputs.x == 1".into()),
                    target: "big".into(),
                    inline_error: None,
                    exit_code: None,
                },
                PreviewRoute {
                    on: "on_failure".into(),
                    when: None,
                    target: String::new(),
                    inline_error: Some("it broke".into()),
                    exit_code: Some(4),
                },
            ],
        };
        assert_eq!(
            super::preview_text(&p, "  "),
            "  Command: echo a\n    echo b\n  Timeout: 5s\n  \u{2192} when \"inputs.x == 1\": big\n  \u{2192} on_failure: fail \"it broke\" (exit 4)\n\n"
        );
    }

    /// Breaker: `--interactive` showed a breakpoint's `Command:` (and a step name) with its
    /// escape sequences as is.
    #[test]
    fn interactive_breakpoints_write_control_characters_as_escapes() {
        use awf_domain::event::StepPreview;
        let p = StepPreview {
            position: 1,
            total: 1,
            command: Some("printf '\u{1b}]0;CMD\u{7}'\necho b".into()),
            timeout_ms: None,
            routes: Vec::new(),
        };
        assert_eq!(
            super::breakpoint_prompt(Style::plain(), "", "s\u{1b}[31m", "command", false, &p),
            "\n⏸ [Step 1/1] s\\u{1b}[31m\nType: command\nCommand: printf '\\u{1b}]0;CMD\\u{7}'\n  echo b\n\n[c]ontinue [s]kip [a]bort [i]nspect [e]dit NAME=VALUE > "
        );
    }

    use super::*;
    use std::collections::BTreeMap;
    use std::time::SystemTime;

    use awf_domain::run::TokenUsage;

    fn env(event: RunEvent) -> EventEnvelope {
        EventEnvelope {
            seq: 1,
            run_id: RunId("r1".into()),
            parent_run_id: None,
            at: SystemTime::UNIX_EPOCH,
            path: "s".into(),
            iteration: None,
            event,
        }
    }

    /// `event` of the step at `path` (a branch's own path).
    fn at(path: &str, event: RunEvent) -> EventEnvelope {
        EventEnvelope {
            path: path.into(),
            ..env(event)
        }
    }

    fn started(step: &str, kind: &str) -> EventEnvelope {
        at(
            step,
            RunEvent::StepStarted {
                step: step.into(),
                kind: kind.into(),
                command: None,
            },
        )
    }

    fn finished(step: &str, kind: &str) -> EventEnvelope {
        at(
            step,
            RunEvent::StepFinished {
                step: step.into(),
                kind: kind.into(),
                state: Box::new(state(StepStatus::Completed, "", 1)),
            },
        )
    }

    fn chunk_of(step: &str, stream: OutputStream, text: &str) -> EventEnvelope {
        at(
            step,
            RunEvent::OutputChunk {
                step: step.into(),
                stream,
                text: text.into(),
            },
        )
    }

    fn state(status: StepStatus, output: &str, ms: u64) -> StepState {
        StepState {
            name: "s".into(),
            status,
            output: output.into(),
            stderr: String::new().into(),
            exit_code: Some(if status == StepStatus::Failed { 2 } else { 0 }),
            attempts: 1,
            error: None,
            error_code: None,
            started_at: Some(SystemTime::UNIX_EPOCH),
            completed_at: Some(SystemTime::UNIX_EPOCH + Duration::from_millis(ms)),
            response: None,
            json: None,
            tokens: TokenUsage::default(),
            outputs: BTreeMap::new(),
            session: None,
            approval: None,
            tool_calls: Vec::new(),
            cost_usd: None,
            fallback: None,
            entered: None,
            output_tail: None,
            stderr_tail: None,
        }
    }

    fn run(p: &mut TextPrinter, events: &[EventEnvelope]) -> (String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        for e in events {
            p.handle(e, &mut out, &mut err).unwrap();
        }
        (
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    #[test]
    fn silent_mode_prints_step_lines_on_stderr_only() {
        let mut p = TextPrinter::new(OutputMode::Silent, false, Style::plain());
        let (out, err) = run(
            &mut p,
            &[
                env(RunEvent::StepStarted {
                    step: "s".into(),
                    kind: "command".into(),
                    command: None,
                }),
                env(RunEvent::OutputChunk {
                    step: "s".into(),
                    stream: OutputStream::Stdout,
                    text: "hi\n".into(),
                }),
                env(RunEvent::StepFinished {
                    step: "s".into(),
                    kind: "command".into(),
                    state: Box::new(state(StepStatus::Completed, "hi\n", 1500)),
                }),
            ],
        );
        assert_eq!(out, "");
        assert_eq!(err, "  → s\n  ✓ s (1.5s)\n");
    }

    /// A failed command step of `state`'s error, exit code, stdout and stderr.
    fn failed(error: &str, code: i32, output: &str, stderr: &str) -> StepState {
        StepState {
            error: Some(error.into()),
            error_code: Some(ErrorCode::ExecutionCommandFailed),
            exit_code: Some(code),
            stderr: stderr.into(),
            ..state(StepStatus::Failed, output, 3)
        }
    }

    /// New user: a failed step's line dropped its exit code when it had stderr, and its
    /// output could not be seen in the default mode; it now says both, and the last lines
    /// of its output follow it (stdout, then stderr), not with `-q` nor when streamed.
    #[test]
    fn a_failed_steps_line_says_its_exit_code_and_its_output_follows_in_silent_mode() {
        let events = |st: StepState| {
            [
                started("s", "command"),
                at(
                    "s",
                    RunEvent::StepFinished {
                        step: "s".into(),
                        kind: "command".into(),
                        state: Box::new(st),
                    },
                ),
            ]
        };
        let flaky = failed("step s: not yet", 3, "", "not yet\n");
        let mut p =
            TextPrinter::new(OutputMode::Silent, false, Style::plain()).with_failure_tail(true);
        let (_, err) = run(&mut p, &events(flaky));
        assert_eq!(err, "  → s\n  ✗ s (3ms): exit code 3: not yet\n");
        let doing = failed("step s: exit code 4", 4, "doing\n", "");
        let mut p =
            TextPrinter::new(OutputMode::Silent, false, Style::plain()).with_failure_tail(true);
        let (_, err) = run(&mut p, &events(doing.clone()));
        assert_eq!(err, "  → s\n  ✗ s (3ms): exit code 4\n    │ doing\n");
        let both = failed("step s: oops\nlast", 1, "doing\nmore\n", "oops\nlast\n");
        let mut p =
            TextPrinter::new(OutputMode::Silent, false, Style::plain()).with_failure_tail(true);
        let (_, err) = run(&mut p, &events(both));
        assert_eq!(
            err,
            "  → s\n  ✗ s (3ms): exit code 1: oops\n    │ doing\n    │ more\n    │ oops\n    │ last\n"
        );
        // -q keeps the failure line only; streamed output is not shown twice.
        let mut p =
            TextPrinter::new(OutputMode::Silent, true, Style::plain()).with_failure_tail(true);
        let (_, err) = run(&mut p, &events(doing.clone()));
        assert_eq!(err, "  ✗ s (3ms): exit code 4\n");
        let mut p =
            TextPrinter::new(OutputMode::Streaming, false, Style::plain()).with_failure_tail(true);
        let (_, err) = run(&mut p, &events(doing));
        assert_eq!(err, "  → s\n  ✗ s (3ms): exit code 4\n");
    }

    #[test]
    fn streaming_prefixes_each_line_across_chunks() {
        let mut p = TextPrinter::new(OutputMode::Streaming, false, Style::plain());
        let chunk = |t: &str| {
            env(RunEvent::OutputChunk {
                step: "s".into(),
                stream: OutputStream::Stdout,
                text: t.into(),
            })
        };
        let (out, _) = run(&mut p, &[chunk("a\nb"), chunk("c\nd\n"), chunk("e\n")]);
        assert_eq!(out, "[OUT] a\n[OUT] bc\n[OUT] d\n[OUT] e\n");
    }

    /// A progress line rewritten with `\r` overwrote the `[OUT] ` prefix on a terminal
    /// (`downloading 100%g 10%` was left of `[OUT] downloading 10%\rdownloading 100%`): the
    /// prefix now comes again after each return that does not end the line, so the line
    /// shows what the command shows, after its prefix. `\r\n` stays a line end, even cut
    /// between two chunks, and no byte is dropped.
    #[test]
    fn streaming_prefixes_a_line_again_after_a_carriage_return() {
        let mut p = TextPrinter::new(OutputMode::Streaming, false, Style::plain());
        let chunk = |t: &str| {
            env(RunEvent::OutputChunk {
                step: "s".into(),
                stream: OutputStream::Stdout,
                text: t.into(),
            })
        };
        let (out, _) = run(
            &mut p,
            &[
                chunk("get 10%"),
                chunk("\rget 100%\nwin\r"),
                chunk("\nx\r\r"),
                chunk("y\n"),
            ],
        );
        assert_eq!(
            out,
            "[OUT] get 10%\r[OUT] get 100%\n[OUT] win\r\n[OUT] x\r[OUT] \r[OUT] y\n"
        );
        assert_eq!(
            prefix_lines(b"a\rb", "> ", LineAt::Mid),
            (b"a\r> b".to_vec(), LineAt::Mid)
        );
        assert_eq!(
            prefix_lines(b"\n", "> ", LineAt::AfterCr),
            (b"\n".to_vec(), LineAt::Start)
        );
        assert_eq!(
            prefix_lines(b"", "> ", LineAt::AfterCr),
            (Vec::new(), LineAt::AfterCr)
        );
    }

    /// Parallel branches interleave: their streamed lines name the branch, a branch's line
    /// is printed whole once it ends (never cut by another branch's line: breaker, lines of
    /// two `seq` branches came out in pieces), and steps outside the block stay `[OUT] `
    /// alone.
    #[test]
    fn streaming_labels_parallel_branches_and_keeps_their_lines_apart() {
        let mut p = TextPrinter::new(OutputMode::Streaming, false, Style::plain());
        let chunk = chunk_of;
        let (out, err) = run(
            &mut p,
            &[
                started("a", "command"),
                chunk("a", OutputStream::Stdout, "before\n"),
                finished("a", "command"),
                started("p", "parallel"),
                started("b1", "command"),
                started("b2", "command"),
                chunk("b1", OutputStream::Stdout, "on"),
                chunk("b2", OutputStream::Stdout, "two\n"),
                chunk("b1", OutputStream::Stdout, "e1\n"),
                chunk("b2", OutputStream::Stderr, "oops\n"),
                at(
                    "b2",
                    RunEvent::ChildRunStarted {
                        step: "b2".into(),
                        child_run_id: RunId("c1".into()),
                        workflow: "sub".into(),
                    },
                ),
                EventEnvelope {
                    run_id: RunId("c1".into()),
                    parent_run_id: Some(RunId("r1".into())),
                    ..chunk("inner", OutputStream::Stdout, "sub\n")
                },
                finished("b1", "command"),
                finished("b2", "command"),
                finished("p", "parallel"),
                started("z", "command"),
                chunk("z", OutputStream::Stdout, "after\n"),
            ],
        );
        assert_eq!(
            out,
            "[OUT] before\n[OUT] [b2] two\n[OUT] [b1] one1\n[OUT] [b2] sub\n[OUT] after\n"
        );
        assert!(err.contains("[ERR] [b2] oops\n"), "{err}");
    }

    /// `-o buffered`: a branch's blocks (stdout and stderr) name it on each line, `[b1] `,
    /// as its streamed lines do; a sub-workflow called by a branch carries the branch's
    /// label; steps outside the block print their output as it is.
    #[test]
    fn buffered_labels_the_blocks_of_parallel_branches() {
        let mut p = TextPrinter::new(OutputMode::Buffered, true, Style::plain());
        let chunk = chunk_of;
        let (out, err) = run(
            &mut p,
            &[
                started("a", "command"),
                chunk("a", OutputStream::Stdout, "before"),
                finished("a", "command"),
                started("p", "parallel"),
                started("b1", "command"),
                started("b2", "call_workflow"),
                chunk("b1", OutputStream::Stdout, "one\ntw"),
                chunk("b1", OutputStream::Stderr, "oops\n"),
                at(
                    "b2",
                    RunEvent::ChildRunStarted {
                        step: "b2".into(),
                        child_run_id: RunId("c1".into()),
                        workflow: "sub".into(),
                    },
                ),
                EventEnvelope {
                    run_id: RunId("c1".into()),
                    parent_run_id: Some(RunId("r1".into())),
                    ..chunk("inner", OutputStream::Stdout, "sub\n")
                },
                EventEnvelope {
                    run_id: RunId("c1".into()),
                    parent_run_id: Some(RunId("r1".into())),
                    ..finished("inner", "command")
                },
                chunk("b1", OutputStream::Stdout, "o\n"),
                finished("b1", "command"),
                finished("b2", "call_workflow"),
                finished("p", "parallel"),
                started("z", "command"),
                chunk("z", OutputStream::Stdout, "after\n"),
                finished("z", "command"),
            ],
        );
        assert_eq!(out, "before\n[b2] sub\n[b1] one\n[b1] two\nafter\n");
        assert_eq!(err, "[b1] oops\n");
    }

    /// A branch's unfinished last line is printed, ended, when its step ends (before its
    /// `✓` line) and when it retries; one longer than [`PARTIAL_LINE_MAX`] is printed as it
    /// comes.
    #[test]
    fn streaming_prints_a_branchs_unfinished_line_at_its_end() {
        let mut p = TextPrinter::new(OutputMode::Streaming, false, Style::plain());
        let chunk = |step: &str, t: &str| chunk_of(step, OutputStream::Stdout, t);
        let long = "x".repeat(PARTIAL_LINE_MAX + 1);
        let (out, err) = run(
            &mut p,
            &[
                started("p", "parallel"),
                started("b1", "command"),
                started("b2", "command"),
                chunk("b1", "a\nno newline"),
                chunk("b2", &long),
                chunk("b2", "y"),
                finished("b1", "command"),
                chunk("b2", "\n"),
            ],
        );
        assert_eq!(
            out,
            // b2's line is printed as it comes (over the limit), ended when b1's follows;
            // its newline then starts a line of its own.
            format!("[OUT] [b1] a\n[OUT] [b2] {long}y\n[OUT] [b1] no newline\n[OUT] [b2] \n")
        );
        assert!(err.contains("✓ b1"), "{err}");
    }

    /// A partial stderr line ends before a step line follows it on stderr, and a failed
    /// attempt's partial lines end before the retry (breaker: `[OUT] try1try2try3`).
    #[test]
    fn streaming_ends_partial_lines_before_other_lines_and_retries() {
        let mut p = TextPrinter::new(OutputMode::Streaming, false, Style::plain());
        let chunk = |stream: OutputStream, t: &str| {
            env(RunEvent::OutputChunk {
                step: "s".into(),
                stream,
                text: t.into(),
            })
        };
        let retry = env(RunEvent::StepRetrying {
            step: "s".into(),
            attempt: 2,
            delay_ms: 0,
            reason: None,
        });
        let (out, err) = run(
            &mut p,
            &[
                chunk(OutputStream::Stdout, "try1"),
                chunk(OutputStream::Stderr, "e1"),
                retry,
                chunk(OutputStream::Stdout, "try2\n"),
                chunk(OutputStream::Stderr, "e2\n"),
            ],
        );
        assert_eq!(out, "[OUT] try1\n[OUT] try2\n");
        assert!(err.starts_with("[ERR] e1\n"), "{err}");
        assert!(err.contains("retrying (attempt 2)"), "{err}");
        assert!(err.ends_with("[ERR] e2\n"), "{err}");
    }

    /// A partial line of one stream is ended before a line of the other is printed (on a
    /// terminal they meet: `[OUT] partial[ERR] oops`), its rest prefixed again.
    #[test]
    fn streaming_ends_a_partial_line_before_the_other_streams_line() {
        let mut p = TextPrinter::new(OutputMode::Streaming, false, Style::plain());
        let chunk = |stream: OutputStream, t: &str| {
            env(RunEvent::OutputChunk {
                step: "s".into(),
                stream,
                text: t.into(),
            })
        };
        let (out, err) = run(
            &mut p,
            &[
                chunk(OutputStream::Stdout, "partial"),
                chunk(OutputStream::Stderr, "oops\n"),
                chunk(OutputStream::Stdout, " rest\n"),
                chunk(OutputStream::Stderr, "e-part"),
                chunk(OutputStream::Stdout, "out\n"),
                chunk(OutputStream::Stderr, " e-rest\n"),
            ],
        );
        assert_eq!(out, "[OUT] partial\n[OUT]  rest\n[OUT] out\n");
        assert_eq!(err, "[ERR] oops\n[ERR] e-part\n[ERR]  e-rest\n");
    }

    #[test]
    fn buffered_and_streaming_pass_the_bytes_a_step_wrote_exactly() {
        let chunk = |stream, bytes: &[u8]| {
            env(RunEvent::OutputChunk {
                step: "s".into(),
                stream,
                text: bytes.to_vec().into(),
            })
        };
        let events = [
            chunk(OutputStream::Stdout, b"A\xff"),
            chunk(OutputStream::Stdout, b"B\n\xc3"),
            chunk(OutputStream::Stderr, b"e\xfe\n"),
            env(RunEvent::StepFinished {
                step: "s".into(),
                kind: "command".into(),
                state: Box::new(state(StepStatus::Completed, "A\u{FFFD}B\n\u{FFFD}", 1)),
            }),
        ];
        let mut p = TextPrinter::new(OutputMode::Buffered, true, Style::plain());
        let (mut out, mut err) = (Vec::new(), Vec::new());
        for e in &events {
            p.handle(e, &mut out, &mut err).unwrap();
        }
        assert_eq!(out, b"A\xffB\n\xc3\n");
        assert_eq!(err, b"e\xfe\n");
        let mut p = TextPrinter::new(OutputMode::Streaming, true, Style::plain());
        let (mut out, mut err) = (Vec::new(), Vec::new());
        for e in &events {
            p.handle(e, &mut out, &mut err).unwrap();
        }
        assert_eq!(out, b"[OUT] A\xffB\n[OUT] \xc3\n");
        assert_eq!(err, b"[ERR] e\xfe\n");
    }

    #[test]
    fn buffered_prints_output_after_the_step_and_failure_reason() {
        let mut p = TextPrinter::new(OutputMode::Buffered, false, Style::plain());
        let mut failed = state(StepStatus::Failed, "partial", 12);
        failed.error = Some("step s: exit code 2\nmore".into());
        let (out, err) = run(
            &mut p,
            &[
                env(RunEvent::StepFinished {
                    step: "s".into(),
                    kind: "command".into(),
                    state: Box::new(failed),
                }),
                env(RunEvent::StepFinished {
                    step: "loop".into(),
                    kind: "for_each".into(),
                    state: Box::new(state(StepStatus::Completed, "completed 3 iterations", 3)),
                }),
            ],
        );
        assert_eq!(out, "partial\n");
        assert_eq!(err, "  ✗ s (12ms): exit code 2\n  ✓ loop (3ms)\n");
    }

    #[test]
    fn a_block_error_does_not_repeat_the_branch_error_shown_above_it() {
        let mut p = TextPrinter::new(OutputMode::Silent, false, Style::plain());
        let mut branch = state(StepStatus::Failed, "", 2);
        branch.name = "l".into();
        branch.error = Some("step l: lefterr".into());
        let mut block = state(StepStatus::Failed, "", 3);
        block.name = "both".into();
        block.error = Some("parallel step both: branch l failed: step l: lefterr".into());
        let (_, err) = run(
            &mut p,
            &[
                env(RunEvent::StepFinished {
                    step: "l".into(),
                    kind: "command".into(),
                    state: Box::new(branch),
                }),
                env(RunEvent::StepFinished {
                    step: "both".into(),
                    kind: "parallel".into(),
                    state: Box::new(block),
                }),
            ],
        );
        assert_eq!(
            err,
            "  ✗ l (2ms): lefterr\n  ✗ both (3ms): branch l failed\n"
        );
        assert_eq!(err.matches("lefterr").count(), 1);
    }

    #[test]
    fn logs_iterations_and_child_runs() {
        let mut p = TextPrinter::new(OutputMode::Silent, false, Style::plain());
        let mut it = env(RunEvent::StepStarted {
            step: "body".into(),
            kind: "command".into(),
            command: None,
        });
        it.iteration = Some(2);
        let mut child = env(RunEvent::StepStarted {
            step: "inner".into(),
            kind: "command".into(),
            command: None,
        });
        child.run_id = RunId("c1".into());
        child.parent_run_id = Some(RunId("r1".into()));
        let (_, err) = run(
            &mut p,
            &[
                env(RunEvent::Log {
                    step: None,
                    level: LogLevel::Info,
                    message: "hello".into(),
                }),
                env(RunEvent::Log {
                    step: None,
                    level: LogLevel::Warn,
                    message: "careful".into(),
                }),
                it,
                env(RunEvent::ChildRunStarted {
                    step: "call".into(),
                    child_run_id: RunId("c1".into()),
                    workflow: "kid".into(),
                }),
                child,
            ],
        );
        assert_eq!(
            err,
            "  INFO hello\n  WARN careful\n  → body[2]\n  ↳ calling kid\n    → inner\n"
        );
    }

    #[test]
    fn quiet_keeps_warnings_and_failures() {
        let mut p = TextPrinter::new(OutputMode::Silent, true, Style::plain());
        let (_, err) = run(
            &mut p,
            &[
                env(RunEvent::StepStarted {
                    step: "s".into(),
                    kind: "command".into(),
                    command: None,
                }),
                env(RunEvent::Log {
                    step: None,
                    level: LogLevel::Info,
                    message: "hello".into(),
                }),
                env(RunEvent::Log {
                    step: None,
                    level: LogLevel::Warn,
                    message: "careful".into(),
                }),
                env(RunEvent::StepFinished {
                    step: "s".into(),
                    kind: "command".into(),
                    state: Box::new(state(StepStatus::Failed, "", 0)),
                }),
            ],
        );
        assert_eq!(err, "  WARN careful\n  ✗ s (0s): exit code 2\n");
    }

    /// The top-level `RunStarted` of an attempt made by process `pid` (`resumed` at a step).
    fn run_started(pid: u32, resumed: Option<&str>) -> EventEnvelope {
        env(RunEvent::RunStarted {
            workflow: "w".into(),
            identifier: "w".into(),
            workflow_path: None,
            inputs: serde_json::Map::new(),
            resumed_from: resumed.map(str::to_owned),
            pid,
            mocks: Default::default(),
            working_dir: None,
        })
    }

    /// `awf resume -q`: the failure lines of the earlier attempt (replayed; another process
    /// ran it) are not shown again, those of this attempt are (a new user saw only the old
    /// failure lines of a resume that succeeded).
    #[test]
    fn quiet_drops_the_failures_of_replayed_attempts() {
        let failed = || {
            env(RunEvent::StepFinished {
                step: "s".into(),
                kind: "command".into(),
                state: Box::new(state(StepStatus::Failed, "", 0)),
            })
        };
        let mut p = TextPrinter::new(OutputMode::Silent, true, Style::plain());
        let other = std::process::id().wrapping_add(1);
        let (_, err) = run(
            &mut p,
            &[
                run_started(other, None),
                failed(),
                run_started(std::process::id(), Some("s")),
                failed(),
            ],
        );
        assert_eq!(err, "  ✗ s (0s): exit code 2\n");
    }

    /// `awf resume`: a replayed failed step shows the same lines as the live run did (its
    /// last lines with the `│` gutter), not its error's other lines without it (new user: the
    /// first stderr line was dropped and the gutter missing).
    #[test]
    fn a_replayed_failure_shows_the_same_tail_as_the_live_run() {
        let failed = || {
            let mut st = state(StepStatus::Failed, "", 2);
            st.stderr = "test fails: no ok file\nmake: *** [Makefile:6: test] Error 1\n".into();
            st.error = Some(
                "exit code 2: test fails: no ok file\nmake: *** [Makefile:6: test] Error 1".into(),
            );
            env(RunEvent::StepFinished {
                step: "s".into(),
                kind: "command".into(),
                state: Box::new(st),
            })
        };
        let live = {
            let mut p =
                TextPrinter::new(OutputMode::Silent, false, Style::plain()).with_failure_tail(true);
            run(&mut p, &[run_started(std::process::id(), None), failed()]).1
        };
        let mut p =
            TextPrinter::new(OutputMode::Silent, false, Style::plain()).with_failure_tail(true);
        let other = std::process::id().wrapping_add(1);
        let (_, replayed) = run(&mut p, &[run_started(other, None), failed()]);
        let tail = "    │ test fails: no ok file\n    │ make: *** [Makefile:6: test] Error 1\n";
        assert!(live.ends_with(tail), "{live}");
        assert_eq!(replayed, live);
    }

    /// `awf resume -o streaming`: the output of the earlier attempt, replayed from the run's
    /// log, is not printed again (a new user found it twice on stdout); this attempt's is.
    #[test]
    fn streaming_does_not_print_a_replayed_attempts_output_again() {
        let chunk = |text: &str| {
            env(RunEvent::OutputChunk {
                step: "s".into(),
                stream: OutputStream::Stdout,
                text: text.into(),
            })
        };
        let mut p = TextPrinter::new(OutputMode::Streaming, false, Style::plain());
        let other = std::process::id().wrapping_add(1);
        let (out, _) = run(
            &mut p,
            &[
                run_started(other, None),
                chunk("one\n"),
                run_started(std::process::id(), Some("s")),
                chunk("two\n"),
            ],
        );
        assert_eq!(out, "[OUT] two\n");
    }
}
