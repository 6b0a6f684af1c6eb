//! Live progress for `awf run` on a terminal: one spinner line per running step on stderr
//! (`⠋ build  1.2s`, loop iterations as `body[3]`, sub-workflow steps indented one level per
//! call), parallel branches shown at once, each spinner replaced by the step's final line
//! (`✓ build (1.2s)`, `✗ build (…): why`) when it finishes.
//!
//! Every other stderr line (logs, warnings, retries, sub-workflow markers) is printed above the
//! spinners so it never tears them, and command output on the same terminal is written with
//! the spinners cleared and redrawn after. A line of output is held until it is complete, so a
//! redraw cannot erase a half-written line. Before a conversation or breakpoint prompt the
//! spinners are cleared and stay hidden until the prompt is answered.
//!
//! Off the terminal (or with `NO_COLOR`, `--no-color`, `TERM=dumb`, `-q`, `-f json`) none of this exists and
//! the printer writes exactly the plain lines of [`crate::printer::TextPrinter`].
//!
//! Source: spec/workflow.md §4.2 (`awf run` text output) and §4.3 (output modes).

use std::fmt;
use std::io;
use std::io::IsTerminal;
use std::io::Write;
use std::time::Duration;

use awf_domain::run::RunId;
use indicatif::MultiProgress;
use indicatif::ProgressBar;
use indicatif::ProgressDrawTarget;
use indicatif::ProgressState;
use indicatif::ProgressStyle;

use crate::style::Style;

/// Interval of the spinner tick (each bar ticks on indicatif's own thread).
const TICK: Duration = Duration::from_millis(100);

/// Spinner frames, one per tick.
const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// Whether live progress is shown: stderr is a terminal, `NO_COLOR` is unset or empty and
/// `--no-color` not given (the two mean the same: plain lines, new user), `TERM` is not
/// `dumb`, and neither `-q` nor `-f json` was given.
pub fn wanted(
    stderr_tty: bool,
    (no_color_flag, no_color_env): (bool, Option<&str>),
    term: Option<&str>,
    quiet: bool,
    json: bool,
) -> bool {
    stderr_tty
        && !no_color_flag
        && no_color_env.is_none_or(str::is_empty)
        && term != Some("dumb")
        && !quiet
        && !json
}

/// Elapsed time of a running step as shown next to its spinner: `0.4s`, `12.3s`, `2m05s`,
/// `1h02m` (tenths of a second below one minute, truncated).
pub fn short_elapsed(d: Duration) -> String {
    let secs = d.as_secs();
    if secs < 60 {
        format!("{secs}.{}s", d.subsec_millis() / 100)
    } else if secs < 3600 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{}h{:02}m", secs / 3600, (secs % 3600) / 60)
    }
}

/// Labels are padded to the widest shown (their times in one column) up to this many
/// columns, indent included: a longer one is not padded to, so one very long step name does
/// not push every time off a narrow terminal.
const ALIGN_MAX: usize = 40;

/// One spinner of a running step.
#[derive(Debug)]
struct Running {
    run_id: RunId,
    path: String,
    /// The bar's prefix: the indent of the step's level.
    indent: String,
    /// The step's label as given (the bar's message is it padded, see [`aligned_labels`]).
    label: String,
    bar: ProgressBar,
}

/// Builds the draw target (the terminal's stderr, or a test target).
type TargetFactory = Box<dyn Fn() -> ProgressDrawTarget + Send>;

/// The spinners of the running steps of one `awf run` (and its sub-workflows), drawn on
/// stderr through an indicatif [`MultiProgress`].
///
/// Bars are keyed by (run id, event path), so parallel branches, loop iterations and
/// sub-workflow steps each get their own line, in the order they started.
pub struct LiveProgress {
    multi: MultiProgress,
    make_target: TargetFactory,
    bars: Vec<Running>,
    /// Steady-tick interval; `None` draws only on changes (tests).
    tick: Option<Duration>,
    /// A prompt is waiting for its answer: spinners are cleared and hidden.
    paused: bool,
    /// Cleared for good (the run ended).
    finished: bool,
    /// stdout is the same terminal: output is written with the spinners suspended.
    stdout_shared: bool,
    /// Output held until its line is complete.
    pending_out: Vec<u8>,
    pending_err: Vec<u8>,
    bar_style: ProgressStyle,
    /// The terminal settings of stderr's terminal before echoing of control characters was turned off
    /// (see [`LiveProgress::quiet_control_echo`]); restored by [`LiveProgress::finish`].
    saved_termios: Option<nix::sys::termios::Termios>,
}

impl fmt::Debug for LiveProgress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveProgress")
            .field("bars", &self.bars)
            .field("paused", &self.paused)
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl LiveProgress {
    /// Live progress on this process's stderr when [`wanted`] says so (reads the terminal
    /// state, `NO_COLOR` and `TERM`; `no_color` is `--no-color`); `None` means plain lines.
    /// `style` colours the spinner.
    pub fn detect(quiet: bool, json: bool, no_color: bool, style: Style) -> Option<Self> {
        let no_color_env = std::env::var("NO_COLOR").ok();
        let term = std::env::var("TERM").ok();
        // A terminal that reports no size (a pty left at 0x0) gets plain lines: the spinners'
        // lines are padded to the terminal's width, and at a guessed 80 columns they ran
        // together on a wider terminal (trial, stop 42).
        let stderr_tty =
            io::stderr().is_terminal() && console::Term::stderr().size_checked().is_some();
        wanted(
            stderr_tty,
            (no_color, no_color_env.as_deref()),
            term.as_deref(),
            quiet,
            json,
        )
        .then(|| {
            Self::new(
                Box::new(ProgressDrawTarget::stderr),
                Some(TICK),
                io::stdout().is_terminal(),
                style,
            )
            .quiet_control_echo()
        })
    }

    /// Live progress drawing to the targets `make_target` builds (called again when drawing
    /// resumes after a prompt), ticking every `tick` (`None`: no tick thread). With
    /// `stdout_shared`, output written to stdout clears and redraws the spinners around it.
    pub fn new(
        make_target: TargetFactory,
        tick: Option<Duration>,
        stdout_shared: bool,
        style: Style,
    ) -> Self {
        let multi = MultiProgress::with_draw_target(make_target());
        Self {
            multi,
            make_target,
            bars: Vec::new(),
            tick,
            paused: false,
            finished: false,
            stdout_shared,
            pending_out: Vec::new(),
            pending_err: Vec::new(),
            bar_style: bar_style(style),
            saved_termios: None,
        }
    }

    /// Stops the terminal the spinners are drawn on (stderr, when it is one) from echoing control characters
    /// (`ECHOCTL`) while spinners are drawn. The spinner line fills the terminal's width, so
    /// the `^C` the terminal echoes for Ctrl-C would wrap to a new line and leave the last
    /// spinner frozen on screen when it is cleared. Ctrl-C still interrupts (`ISIG` is
    /// untouched); the setting is restored by [`Self::finish`] (and on drop).
    #[must_use]
    pub fn quiet_control_echo(mut self) -> Self {
        use nix::sys::termios;
        let tty = io::stderr();
        if !tty.is_terminal() {
            return self;
        }
        if let Ok(saved) = termios::tcgetattr(&tty) {
            let mut quiet = saved.clone();
            quiet.local_flags.remove(termios::LocalFlags::ECHOCTL);
            if termios::tcsetattr(&tty, termios::SetArg::TCSANOW, &quiet).is_ok() {
                self.saved_termios = Some(saved);
            }
        }
        self
    }

    /// Puts back the terminal settings [`Self::quiet_control_echo`] changed.
    fn restore_terminal(&mut self) {
        if let Some(saved) = self.saved_termios.take() {
            let _ = nix::sys::termios::tcsetattr(
                io::stderr(),
                nix::sys::termios::SetArg::TCSANOW,
                &saved,
            );
        }
    }

    /// Labels of the spinners shown now, in screen order, each with its indent (`  build`,
    /// `  body[2]`, `    inner`).
    #[cfg(test)]
    pub fn running(&self) -> Vec<String> {
        self.bars
            .iter()
            .map(|r| format!("{}{}", r.indent, r.label))
            .collect()
    }

    /// The spinner lines as drawn now (without the frame and time), in screen order: indent,
    /// label and its padding (`  build      `, `  lint_and_test`).
    #[cfg(test)]
    pub fn drawn_labels(&self) -> Vec<String> {
        self.bars
            .iter()
            .map(|r| format!("{}{}", r.indent, r.bar.message()))
            .collect()
    }

    /// Whether a prompt holds the spinners hidden.
    #[cfg(test)]
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Adds the spinner of a started step; a step already shown keeps its spinner and time.
    pub fn start(&mut self, run_id: &RunId, path: &str, indent: &str, label: &str) {
        if self.finished
            || self
                .bars
                .iter()
                .any(|r| &r.run_id == run_id && r.path == path)
        {
            return;
        }
        let bar = ProgressBar::hidden()
            .with_style(self.bar_style.clone())
            .with_prefix(indent.to_owned())
            .with_message(label.to_owned());
        let bar = self.multi.add(bar);
        self.bars.push(Running {
            run_id: run_id.clone(),
            path: path.to_owned(),
            indent: indent.to_owned(),
            label: label.to_owned(),
            bar: bar.clone(),
        });
        self.align();
        if !self.paused {
            self.animate(&bar);
        }
    }

    /// Pads each spinner's label so that the times of the spinners shown line up
    /// ([`aligned_labels`]); called whenever a spinner comes or goes.
    fn align(&self) {
        let rows: Vec<(&str, &str)> = self
            .bars
            .iter()
            .map(|r| (r.indent.as_str(), r.label.as_str()))
            .collect();
        for (r, padded) in self.bars.iter().zip(aligned_labels(&rows)) {
            if r.bar.message() != padded {
                r.bar.set_message(padded);
            }
        }
    }

    /// Removes the spinner of a finished step (its final line is printed next, in its place).
    /// Returns whether there was one.
    pub fn stop(&mut self, run_id: &RunId, path: &str) -> bool {
        match self
            .bars
            .iter()
            .position(|r| &r.run_id == run_id && r.path == path)
        {
            Some(i) => {
                let r = self.bars.remove(i);
                self.drop_bar(&r.bar);
                self.align();
                true
            }
            None => false,
        }
    }

    /// Removes the spinners of one run (a sub-workflow that ended, or steps that were
    /// cancelled without a final event).
    pub fn stop_run(&mut self, run_id: &RunId) {
        let (gone, kept): (Vec<Running>, Vec<Running>) = std::mem::take(&mut self.bars)
            .into_iter()
            .partition(|r| &r.run_id == run_id);
        self.bars = kept;
        for r in gone {
            self.drop_bar(&r.bar);
        }
        self.align();
    }

    /// Removes every spinner.
    pub fn stop_all(&mut self) {
        for r in std::mem::take(&mut self.bars) {
            self.drop_bar(&r.bar);
        }
    }

    /// Clears the spinners and keeps them hidden (a prompt is about to be written); lines are
    /// written straight to the terminal until [`Self::resume`].
    pub fn pause(&mut self) {
        if self.paused || self.finished {
            return;
        }
        for r in &self.bars {
            r.bar.disable_steady_tick();
        }
        let _ = self.multi.clear();
        self.multi.set_draw_target(ProgressDrawTarget::hidden());
        self.paused = true;
    }

    /// Shows the spinners again after a prompt was answered.
    pub fn resume(&mut self) {
        if !self.paused || self.finished {
            return;
        }
        self.paused = false;
        self.multi.set_draw_target((self.make_target)());
        for r in &self.bars {
            self.animate(&r.bar);
        }
    }

    /// Writes what the printer rendered for one event: `out` bytes to stdout, `err` bytes to
    /// stderr. While spinners are shown, complete stderr lines are printed above them and
    /// stdout (when it is the same terminal) is written with them suspended; an incomplete
    /// last line waits for its end. Paused or finished: written straight through.
    ///
    /// # Errors
    /// I/O errors of the writers or the terminal.
    pub fn write(
        &mut self,
        out_bytes: &[u8],
        err_bytes: &[u8],
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> io::Result<()> {
        if self.paused || self.finished {
            self.pending_out.extend_from_slice(out_bytes);
            self.pending_err.extend_from_slice(err_bytes);
            return self.flush_pending(out, err);
        }
        if !out_bytes.is_empty() {
            if self.stdout_shared {
                self.pending_out.extend_from_slice(out_bytes);
                if let Some(ready) = take_lines(&mut self.pending_out) {
                    self.multi.suspend(|| {
                        out.write_all(&ready)?;
                        out.flush()
                    })?;
                }
            } else {
                out.write_all(out_bytes)?;
                out.flush()?;
            }
        }
        self.pending_err.extend_from_slice(err_bytes);
        if let Some(ready) = take_lines(&mut self.pending_err) {
            let text = String::from_utf8_lossy(&ready[..ready.len() - 1]).into_owned();
            self.multi.println(text)?;
        }
        Ok(())
    }

    /// Prints one stderr line above the spinners (straight through when paused or finished).
    ///
    /// # Errors
    /// I/O errors of `err` or the terminal.
    pub fn line(&mut self, text: &str, err: &mut dyn Write) -> io::Result<()> {
        let mut bytes = text.as_bytes().to_vec();
        bytes.push(b'\n');
        self.write(&[], &bytes, &mut io::sink(), err)
    }

    /// Removes every spinner, clears them from the terminal and writes any held output; later
    /// writes go straight through. Idempotent.
    ///
    /// # Errors
    /// I/O errors of the writers.
    pub fn finish(&mut self, out: &mut dyn Write, err: &mut dyn Write) -> io::Result<()> {
        if !self.finished {
            for r in &self.bars {
                r.bar.disable_steady_tick();
            }
            let _ = self.multi.clear();
            self.stop_all();
            self.multi.set_draw_target(ProgressDrawTarget::hidden());
            self.finished = true;
        }
        self.restore_terminal();
        self.flush_pending(out, err)
    }

    fn flush_pending(&mut self, out: &mut dyn Write, err: &mut dyn Write) -> io::Result<()> {
        if !self.pending_out.is_empty() {
            out.write_all(&std::mem::take(&mut self.pending_out))?;
            out.flush()?;
        }
        if !self.pending_err.is_empty() {
            err.write_all(&std::mem::take(&mut self.pending_err))?;
            err.flush()?;
        }
        Ok(())
    }

    fn animate(&self, bar: &ProgressBar) {
        match self.tick {
            Some(t) => bar.enable_steady_tick(t),
            None => bar.tick(),
        }
    }

    fn drop_bar(&self, bar: &ProgressBar) {
        bar.disable_steady_tick();
        self.multi.remove(bar);
        bar.finish_and_clear();
    }
}

impl Drop for LiveProgress {
    fn drop(&mut self) {
        let _ = self.finish(&mut io::stdout(), &mut io::stderr());
    }
}

/// The labels of spinner rows `(indent, label)` padded with spaces so that every row's
/// indent and label take the same width, that of the widest row up to [`ALIGN_MAX`]
/// columns (a wider row is left as it is): the elapsed times after them line up.
/// Widths are terminal columns (a CJK character takes two).
fn aligned_labels(rows: &[(&str, &str)]) -> Vec<String> {
    use unicode_width::UnicodeWidthStr;
    let width = |(indent, label): &(&str, &str)| indent.width() + label.width();
    let column = rows
        .iter()
        .map(width)
        .filter(|w| *w <= ALIGN_MAX)
        .max()
        .unwrap_or(0);
    rows.iter()
        .map(|row| {
            let pad = column.saturating_sub(width(row));
            format!("{}{}", row.1, " ".repeat(pad))
        })
        .collect()
}

/// Splits off the complete lines at the front of `buf` (through its last `\n`).
fn take_lines(buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let last = buf.iter().rposition(|b| *b == b'\n')?;
    let rest = buf.split_off(last + 1);
    Some(std::mem::replace(buf, rest))
}

/// `{indent}{frame} {label}  {elapsed}`, frame and time coloured with `style`.
fn bar_style(style: Style) -> ProgressStyle {
    let spin = move |state: &ProgressState, w: &mut dyn fmt::Write| {
        let n = usize::try_from(state.elapsed().as_millis() / TICK.as_millis()).unwrap_or(0);
        let _ = w.write_str(&style.cyan(FRAMES[n % FRAMES.len()]));
    };
    let secs = move |state: &ProgressState, w: &mut dyn fmt::Write| {
        let _ = w.write_str(&style.dim(&short_elapsed(state.elapsed())));
    };
    ProgressStyle::with_template("{prefix}{spin} {msg}  {secs}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
        .with_key("spin", spin)
        .with_key("secs", secs)
}

#[cfg(test)]
#[path = "progress_tests.rs"]
mod tests;
