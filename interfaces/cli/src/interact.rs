//! Answering a run's interaction requests on the terminal: the terminal's rendering of the
//! typed interactions (missing inputs, conversation turns, breakpoints, approval gates).
//!
//! [`Terminal::answer`] reads what the user types (stdin; secrets without echo) and turns it
//! into a typed [`Answer`]: the breakpoint command language (`c`, `s`, `a`, `r`, `i`,
//! `e NAME=VALUE`), the numbered enum menu, the y/n approval prompt live here, never in the
//! engine. The prompts of breakpoints and conversation turns are printed by the event printer
//! (they are part of the event's rendering); this module prints the others.
//!
//! Source: spec/workflow.md §3.12 (interactive mode); shared/design/decisions.md ("Approval
//! gates").

use std::io::IsTerminal;
use std::io::Write;

use awf_domain::event::LogLevel;
use awf_domain::interaction::Answer;
use awf_domain::interaction::ApprovalOption;
use awf_domain::interaction::BreakpointDecision;
use awf_domain::interaction::InteractionRequest;
use awf_domain::interaction::RequestKind;
use awf_domain::workflow::InputDef;

use crate::ctx::Ctx;
use crate::style::Style;

/// How the terminal answers: its colours, whether it is a terminal at all, how warnings
/// are shown.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Terminal {
    style: Style,
    /// `-f json`: the printer shows nothing but warnings.
    json: bool,
    /// Whether run warnings are shown (`--log-level`).
    warnings: bool,
    /// `--log-format json`.
    log_json: bool,
    /// Whether there is a terminal to ask on: stdin is a terminal and there is one to show
    /// the prompt on (stderr, or `/dev/tty` when stderr is redirected). Approval gates are
    /// asked only then (breakpoint decisions are also read from a pipe).
    tty: bool,
    /// stderr is redirected: gate prompts go to `/dev/tty`.
    prompt_on_dev_tty: bool,
}

/// Why a gate or breakpoint is not asked without a terminal.
const NO_TERMINAL: &str = "no terminal to ask on; pass --yes to approve gates";

impl Terminal {
    /// The terminal of this process, as the global options set it up.
    pub(crate) fn new(ctx: &Ctx) -> Self {
        Self {
            style: ctx.err_style,
            json: ctx.json(),
            warnings: awf_telemetry::LogConfig::shows(ctx.run_log_level, LogLevel::Warn),
            log_json: ctx.log_json,
            tty: std::io::stdin().is_terminal()
                && (std::io::stderr().is_terminal() || dev_tty().is_some()),
            prompt_on_dev_tty: !std::io::stderr().is_terminal(),
        }
    }

    /// Where gate prompts are written: stderr, or the controlling terminal when stderr is
    /// redirected (`awf run wf -f json 2>err.log` typed at a keyboard).
    fn prompt_out(&self) -> Box<dyn Write> {
        if self.prompt_on_dev_tty
            && let Some(f) = dev_tty()
        {
            return Box::new(f);
        }
        Box::new(std::io::stderr())
    }

    /// Asks the user on the terminal (blocking: reads stdin) and gives the typed answer.
    pub(crate) fn answer(&self, request: &InteractionRequest) -> Answer {
        match &request.kind {
            RequestKind::MissingInput { input, problem } => {
                self.missing_input(input, problem.as_deref())
            }
            RequestKind::ConversationTurn { prompt } => loop {
                match next_line() {
                    Line::Text(line) => return Answer::Value(line),
                    Line::Eof => {
                        self.end_of_input();
                        return Answer::EndOfInput;
                    }
                    Line::Replaced => return Answer::EndOfInput,
                    Line::NotUtf8 => {
                        let mut err = std::io::stderr().lock();
                        let _ = writeln!(err, "{NOT_UTF8}");
                        let _ = write!(err, "{}", crate::style::printable(prompt));
                        let _ = err.flush();
                    }
                }
            },
            RequestKind::Breakpoint {
                state_kind,
                previous,
                preview,
            } => loop {
                // Decisions are read from stdin whatever it is: a terminal, or a pipe of
                // scripted answers (`printf 'c\ns\n' | awf run wf --interactive`, as AWF (Go)
                // takes them); its end ends the run with its own error.
                let problem = match next_line() {
                    Line::Text(line) => match parse_breakpoint(&line, previous.is_some()) {
                        Ok(d) => return Answer::Decision(d),
                        Err(warning) => {
                            self.warn(&warning);
                            None
                        }
                    },
                    Line::Eof => {
                        self.end_of_input();
                        return Answer::EndOfInput;
                    }
                    Line::Replaced => return Answer::Decision(BreakpointDecision::Abort),
                    Line::NotUtf8 => Some(NOT_UTF8),
                };
                let mut err = std::io::stderr().lock();
                if let Some(p) = problem {
                    let _ = writeln!(err, "{p}");
                }
                if !self.json {
                    let step = request.step.as_deref().unwrap_or("");
                    let text = crate::printer::breakpoint_prompt(
                        self.style,
                        "  ",
                        step,
                        state_kind,
                        previous.is_some(),
                        preview,
                    );
                    let _ = err.write_all(text.as_bytes());
                }
                let _ = err.flush();
            },
            RequestKind::Approval { message, options } => {
                self.approval(request.step.as_deref().unwrap_or(""), message, options)
            }
        }
    }

    fn end_of_input(&self) {
        if !self.json {
            let _ = writeln!(std::io::stderr().lock(), "(end of input)");
        }
    }

    /// A warning line, as the printer shows a run's warnings.
    fn warn(&self, message: &str) {
        if !self.warnings {
            return;
        }
        let line = if self.log_json {
            awf_telemetry::LogConfig::run_log_json(
                std::time::SystemTime::now(),
                LogLevel::Warn,
                None,
                message,
            )
        } else if self.json {
            format!("WARN {message}")
        } else {
            format!("  {} {message}", self.style.yellow("WARN"))
        };
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    }

    /// Asks for one input: `Input NAME (type): description`, a numbered menu for an enum, a
    /// hidden read for a secret name; `problem` (why the last value was refused) first.
    fn missing_input(&self, def: &InputDef, problem: Option<&str>) -> Answer {
        let mut err = std::io::stderr();
        if let Some(p) = problem {
            let _ = writeln!(err, "  invalid: {p}; try again");
        }
        loop {
            let ty = match &def.ty {
                awf_domain::workflow::InputType::Untyped => String::new(),
                t => format!(
                    " ({})",
                    serde_json::to_value(t)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default()
                ),
            };
            let _ = writeln!(
                err,
                "Input {}{ty}{}",
                def.name,
                def.description
                    .as_ref()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default()
            );
            let choices = &def.validation.enum_values;
            for (i, c) in choices.iter().enumerate() {
                let _ = writeln!(err, "  {}) {c}", i + 1);
            }
            let _ = write!(
                err,
                "{}> ",
                if choices.is_empty() {
                    ""
                } else {
                    "choose a number or type a value "
                }
            );
            let _ = err.flush();
            let mut line = String::new();
            let read = if awf_domain::mask::is_secret_name(&def.name) {
                read_hidden(&mut line)
            } else {
                read_text_line(&mut std::io::stdin().lock(), &mut line)
            };
            let n = match read {
                Ok(n) => n,
                Err(NotUtf8) => {
                    let _ = writeln!(err, "{NOT_UTF8}");
                    continue;
                }
            };
            if n == 0 {
                return Answer::EndOfInput;
            }
            let value = line.trim_end_matches(['\n', '\r']).to_owned();
            return Answer::Value(menu_choice(&value, choices));
        }
    }

    /// An approval gate: `? message [y/N]` for the default approve/reject pair, a numbered
    /// menu otherwise; end of input (Ctrl-D) takes the first rejecting option. Without a
    /// terminal nothing is asked: [`Answer::Unattended`] (the step fails saying to pass
    /// `--yes`).
    fn approval(&self, step: &str, message: &str, options: &[ApprovalOption]) -> Answer {
        let reject = options
            .iter()
            .find(|o| !o.kind.allows())
            .or_else(|| options.first())
            .map_or_else(|| "reject".to_owned(), |o| o.id.clone());
        // Workflow text reaches the terminal without control sequences.
        // The author's newlines are kept (continuation lines indented).
        let message = crate::style::printable_lines(message, "  ");
        let step = crate::style::printable(step);
        if !self.tty {
            return Answer::Unattended(NO_TERMINAL.to_owned());
        }
        let mut err = self.prompt_out();
        let simple = simple_gate(options);
        loop {
            let _ = write!(err, "{}", self.approval_prompt(&step, &message, options));
            let _ = err.flush();
            let line = match next_line() {
                Line::Text(l) => l,
                Line::Eof => {
                    self.end_of_input();
                    return Answer::Option(reject);
                }
                Line::Replaced => return Answer::Option(reject),
                Line::NotUtf8 => {
                    let _ = writeln!(err, "{NOT_UTF8}");
                    continue;
                }
            };
            match parse_approval(&line, options, simple) {
                Some(id) => return Answer::Option(id),
                None => {
                    let _ = writeln!(
                        err,
                        "  invalid: {}; try again",
                        if simple {
                            "answer y or n".to_owned()
                        } else {
                            format!("choose 1-{} or an option's id", options.len())
                        }
                    );
                }
            }
        }
    }
}

impl Terminal {
    /// The prompt of an approval gate (`message` and `step` already made printable):
    /// `? message (step) [y/N] ` for the default pair, else the numbered menu and
    /// `choose a number > `.
    fn approval_prompt(&self, step: &str, message: &str, options: &[ApprovalOption]) -> String {
        if simple_gate(options) {
            return format!("{} {message} ({step}) [y/N] ", self.style.yellow("?"));
        }
        let mut text = format!("{} {message} ({step})\n", self.style.yellow("?"));
        // Ids are shown: an id written exactly wins over a menu number (breaker: an option
        // with id "2" listed first took the answer `2` meant for the second line).
        for (i, o) in options.iter().enumerate() {
            text.push_str(&format!(
                "  {}) {} [{}] (id: {})\n",
                i + 1,
                crate::style::printable(&o.name),
                o.kind.as_str(),
                crate::style::printable(&o.id)
            ));
        }
        text.push_str("choose a number or an id > ");
        text
    }

    /// The prompt of `request` as shown when it was asked, to show it again after other
    /// output was written over it; `None` for missing inputs (asked before anything runs).
    fn prompt_again(&self, request: &InteractionRequest) -> Option<String> {
        let step = request.step.as_deref().unwrap_or("");
        match &request.kind {
            RequestKind::Approval { message, options } => Some(self.approval_prompt(
                &crate::style::printable(step),
                &crate::style::printable_lines(message, "  "),
                options,
            )),
            RequestKind::Breakpoint {
                state_kind,
                previous,
                preview,
            } => Some(crate::printer::breakpoint_prompt(
                self.style,
                "  ",
                step,
                state_kind,
                previous.is_some(),
                preview,
            )),
            RequestKind::ConversationTurn { prompt } => {
                Some(crate::style::printable(prompt).into_owned())
            }
            RequestKind::MissingInput { .. } => None,
        }
    }
}

/// Whether a gate has the default pair (`approve`, `reject`: allow once, reject once),
/// asked as `[y/N]`. Options the workflow names itself are a menu, even of those kinds, so
/// their names are shown and their ids can be typed (new user: `once`/`skip` were asked as
/// `[y/N]` and `once` was refused).
fn simple_gate(options: &[ApprovalOption]) -> bool {
    options == ApprovalOption::defaults().as_slice()
}

/// Answers a run's requests on the terminal one at a time, in the order they came (two
/// parallel branches may ask at once): feed it every event ([`Answerer::on_event`]) and await
/// [`Answerer::next`] for each answer to `respond` with. A request that ends without an
/// answer (timed out, cancelled) is dropped, also while it is being read.
pub(crate) struct Answerer {
    term: Terminal,
    queue: std::collections::VecDeque<InteractionRequest>,
    current: Option<(InteractionRequest, tokio::task::JoinHandle<Answer>)>,
    /// The request whose answer [`Answerer::next`] gave last (asked again when the run
    /// refuses that answer, [`Answerer::ask_again`]).
    answered: Option<InteractionRequest>,
    /// The run is being cancelled: nothing new is asked (its requests resolve cancelled).
    cancelling: bool,
}

impl Answerer {
    /// Nothing asked yet.
    pub(crate) fn new(ctx: &Ctx) -> Self {
        Self {
            term: Terminal::new(ctx),
            queue: std::collections::VecDeque::new(),
            current: None,
            answered: None,
            cancelling: false,
        }
    }

    /// The run refused the answer just given to `request_id` (a missing input's value that
    /// breaks a rule, `why`): the request is still pending, so it is asked again, with
    /// `why` shown first (`invalid: …; try again`).
    pub(crate) fn ask_again(&mut self, request_id: &str, why: &str) {
        let Some(mut request) = self.answered.take().filter(|r| r.request_id == request_id) else {
            return;
        };
        if let RequestKind::MissingInput { problem, .. } = &mut request.kind {
            *problem = Some(why.to_owned());
        }
        self.queue.push_front(request);
        self.start_next();
    }

    /// The run is being cancelled: ask nothing new (what is queued is dropped; the engine
    /// resolves every request of a cancelled run as cancelled).
    pub(crate) fn cancelling(&mut self) {
        self.cancelling = true;
        self.queue.clear();
    }

    /// Shows the prompt being read again (other output was written over it).
    pub(crate) fn reprompt(&self) {
        if self.cancelling {
            return;
        }
        let Some((request, reader)) = self.current.as_ref() else {
            return;
        };
        if reader.is_finished() || !self.term.tty {
            return;
        }
        if let Some(text) = self.term.prompt_again(request) {
            let mut w = if matches!(request.kind, RequestKind::Approval { .. }) {
                self.term.prompt_out()
            } else {
                Box::new(std::io::stderr())
            };
            let _ = write!(w, "{text}");
            let _ = w.flush();
        }
    }

    /// Takes note of a request to answer, or of the end of one.
    pub(crate) fn on_event(&mut self, event: &awf_domain::event::RunEvent) {
        use awf_domain::event::RunEvent;
        match event {
            RunEvent::InteractionRequired { request } => {
                self.queue.push_back(request.as_ref().clone());
            }
            RunEvent::InteractionResolved { request_id, .. } => {
                self.queue.retain(|r| r.request_id != *request_id);
                // Ended while being read (timed out, cancelled): its line is not waited for
                // (the next read takes the line over, see `next_line`).
                if self
                    .current
                    .as_ref()
                    .is_some_and(|(r, _)| r.request_id == *request_id)
                    && self.current.as_ref().is_some_and(|(_, h)| !h.is_finished())
                {
                    self.current = None;
                }
            }
            _ => return,
        }
        self.start_next();
    }

    fn start_next(&mut self) {
        if self.current.is_some() || self.cancelling {
            return;
        }
        if let Some(request) = self.queue.pop_front() {
            let term = self.term;
            let asked = request.clone();
            let reader = tokio::task::spawn_blocking(move || term.answer(&asked));
            self.current = Some((request, reader));
        }
    }

    /// The next answer: (request id, answer). Pends while nothing is asked. Cancel-safe.
    pub(crate) async fn next(&mut self) -> (String, Answer) {
        let answer = match self.current.as_mut() {
            Some((_, h)) => h.await.unwrap_or(Answer::EndOfInput),
            None => std::future::pending().await,
        };
        self.answered = self.current.take().map(|(r, _)| r);
        let id = self
            .answered
            .as_ref()
            .map(|r| r.request_id.clone())
            .unwrap_or_default();
        self.start_next();
        (id, answer)
    }
}

/// A menu number (`2`) stands for that choice of an enum, unless what was typed is itself one
/// of the values (an exact value wins over a position: with `[3, 1, 2]`, `1` is `1`);
/// anything else is the value typed.
fn menu_choice(value: &str, choices: &[String]) -> String {
    if choices.iter().any(|c| c == value || c == value.trim()) {
        return value.trim().to_owned();
    }
    if let Ok(i) = value.trim().parse::<usize>()
        && (1..=choices.len()).contains(&i)
    {
        return choices[i - 1].clone();
    }
    value.to_owned()
}

/// The breakpoint command language: `c`/`continue`/empty, `s`/`skip`, `a`/`abort`/`q`/`quit`,
/// `r`/`retry`, `i`/`inspect`, `e NAME=VALUE`/`edit NAME=VALUE` (any case). `Err` is the
/// warning to show before asking again.
pub(crate) fn parse_breakpoint(
    line: &str,
    has_previous: bool,
) -> Result<BreakpointDecision, String> {
    let answer = line.trim();
    let (cmd, rest) = answer.split_once(' ').unwrap_or((answer, ""));
    match cmd.to_ascii_lowercase().as_str() {
        "" | "c" | "continue" => Ok(BreakpointDecision::Continue),
        "s" | "skip" => Ok(BreakpointDecision::Skip),
        "a" | "abort" | "q" | "quit" => Ok(BreakpointDecision::Abort),
        "r" | "retry" => Ok(BreakpointDecision::Retry),
        "i" | "inspect" => Ok(BreakpointDecision::Inspect),
        "e" | "edit" => match rest.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok(BreakpointDecision::Edit {
                name: k.trim().to_owned(),
                value: v.trim().to_owned(),
            }),
            _ => Err("edit needs NAME=VALUE, e.g. `e count=3`".to_owned()),
        },
        other => {
            let r = if has_previous { ", r" } else { "" };
            Err(format!(
                "unknown answer '{other}': use c, s, a{r}, i or e NAME=VALUE"
            ))
        }
    }
}

/// An approval answer: `y`/`yes` and `n`/`no`/empty for the simple prompt; an option id or
/// a menu number for the menu (an exact id wins over a position: an option `id: "2"` is
/// picked by typing `2`). `None`: not an answer.
fn parse_approval(line: &str, options: &[ApprovalOption], simple: bool) -> Option<String> {
    let a = line.trim();
    if let Some(o) = options.iter().find(|o| o.id == a) {
        return Some(o.id.clone());
    }
    if simple {
        return match a.to_ascii_lowercase().as_str() {
            "y" | "yes" => options.first().map(|o| o.id.clone()),
            "" | "n" | "no" => options.get(1).map(|o| o.id.clone()),
            _ => None,
        };
    }
    if let Ok(i) = a.parse::<usize>()
        && (1..=options.len()).contains(&i)
    {
        return Some(options[i - 1].id.clone());
    }
    None
}

/// What [`next_line`] gives.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// A line (without its newline).
    Text(String),
    /// End of input (or a read error).
    Eof,
    /// A later request took over the read (this one timed out or was cancelled): the line
    /// goes to that one.
    Replaced,
    /// A line that is not UTF-8 (dropped, never shown): asked again, not end of input.
    NotUtf8,
}

/// What the user is told before a prompt is asked again after a line that is not UTF-8.
const NOT_UTF8: &str = "  invalid: the value is not valid UTF-8; try again";

/// The one thread that reads visible lines from stdin, on demand, for the latest caller: a
/// request that timed out while its line was being read does not keep the next line typed.
struct LineReader {
    slot: std::sync::Mutex<Slot>,
    wake: std::sync::Condvar,
}

#[derive(Default)]
struct Slot {
    waiter: Option<std::sync::mpsc::Sender<Line>>,
    wanted: bool,
}

fn lock_slot(m: &std::sync::Mutex<Slot>) -> std::sync::MutexGuard<'_, Slot> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The reader thread; `None` when it could not be started (lines are then read on the
/// caller's thread).
static LINES: std::sync::OnceLock<Option<std::sync::Arc<LineReader>>> = std::sync::OnceLock::new();

/// Reads one line of stdin on this thread.
fn read_line_here() -> Line {
    let mut line = String::new();
    match read_text_line(&mut std::io::stdin().lock(), &mut line) {
        Ok(0) => Line::Eof,
        Ok(_) => Line::Text(line.trim_end_matches(['\n', '\r']).to_owned()),
        Err(NotUtf8) => Line::NotUtf8,
    }
}

/// The next line from stdin, read by the shared reader thread (or on this thread when that
/// thread could not be started: the process limit was reached).
fn next_line() -> Line {
    let reader = LINES.get_or_init(|| {
        let r = std::sync::Arc::new(LineReader {
            slot: std::sync::Mutex::new(Slot::default()),
            wake: std::sync::Condvar::new(),
        });
        let shared = std::sync::Arc::clone(&r);
        let started = std::thread::Builder::new()
            .name("awf-stdin".into())
            .spawn(move || {
                loop {
                    let mut slot = lock_slot(&shared.slot);
                    while !slot.wanted {
                        slot = shared
                            .wake
                            .wait(slot)
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                    }
                    slot.wanted = false;
                    drop(slot);
                    let got = read_line_here();
                    // The line answers whoever waits now (a later caller takes over the read of
                    // one that gave up); it satisfies that caller's want too.
                    let mut slot = lock_slot(&shared.slot);
                    slot.wanted = false;
                    if let Some(w) = slot.waiter.take() {
                        let _ = w.send(got);
                    }
                }
            });
        started.ok().map(|_| r)
    });
    let Some(reader) = reader else {
        return read_line_here();
    };
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let mut slot = lock_slot(&reader.slot);
        slot.waiter = Some(tx);
        slot.wanted = true;
    }
    reader.wake.notify_one();
    rx.recv().unwrap_or(Line::Replaced)
}

/// The controlling terminal, opened for writing prompts; `None` when there is none.
fn dev_tty() -> Option<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/tty")
        .ok()
}

/// A line read from the terminal was not UTF-8 (it is dropped, never shown).
#[derive(Debug, PartialEq, Eq)]
struct NotUtf8;

/// Reads one line into `line` as bytes and checks it is UTF-8. Returns the bytes read (0 at
/// EOF or on a read error); `NotUtf8` for a line that is not text.
fn read_text_line(r: &mut impl std::io::BufRead, line: &mut String) -> Result<usize, NotUtf8> {
    let mut bytes = Vec::new();
    let n = r.read_until(b'\n', &mut bytes).unwrap_or(0);
    match String::from_utf8(bytes) {
        Ok(text) => {
            line.push_str(&text);
            Ok(n)
        }
        Err(_) => Err(NotUtf8),
    }
}

/// Reads a line from the terminal without echoing it (secret inputs); the terminal's mode
/// is restored afterwards, also when the read fails. The line is read a key at a time
/// (no echo, no line editing by the terminal, no signal from Ctrl-C), so Ctrl-C ends it at
/// once: the terminal is restored, then the SIGINT it stands for is raised (awf exits 130).
/// Backspace deletes the last character; Ctrl-D on an empty line is end of input. Not a
/// terminal: a plain line read.
fn read_hidden(line: &mut String) -> Result<usize, NotUtf8> {
    use nix::sys::termios;
    let stdin = std::io::stdin();
    let Ok(saved) = termios::tcgetattr(&stdin) else {
        return read_text_line(&mut stdin.lock(), line);
    };
    let mut quiet = saved.clone();
    quiet.local_flags.remove(termios::LocalFlags::ECHO);
    quiet.local_flags.remove(termios::LocalFlags::ICANON);
    quiet.local_flags.remove(termios::LocalFlags::ISIG);
    quiet.control_chars[termios::SpecialCharacterIndices::VMIN as usize] = 1;
    quiet.control_chars[termios::SpecialCharacterIndices::VTIME as usize] = 0;
    let _ = termios::tcsetattr(&stdin, termios::SetArg::TCSANOW, &quiet);
    let key = hidden_keys(&mut stdin.lock());
    let _ = termios::tcsetattr(&stdin, termios::SetArg::TCSANOW, &saved);
    let _ = writeln!(std::io::stderr());
    match key {
        Hidden::Line(bytes) => {
            let n = bytes.len();
            let text = String::from_utf8(bytes).map_err(|_| NotUtf8)?;
            line.push_str(&text);
            Ok(n)
        }
        Hidden::Eof => Ok(0),
        Hidden::Interrupt => {
            // Ctrl-C at the prompt: deliver it as the signal it stands for, so the run is
            // cancelled like at any other prompt (nothing has started; awf exits 130). The
            // request resolves as cancelled: this read never answers.
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGINT);
            loop {
                std::thread::park();
            }
        }
    }
}

/// How a hidden line read a key at a time ended.
#[derive(Debug, PartialEq, Eq)]
enum Hidden {
    /// Enter: the bytes typed (with the newline).
    Line(Vec<u8>),
    /// Ctrl-D on an empty line, or the input closed.
    Eof,
    /// Ctrl-C.
    Interrupt,
}

/// Reads keys until Enter, Ctrl-C or Ctrl-D (on an empty line); backspace (DEL or BS)
/// removes the last character typed.
fn hidden_keys(r: &mut impl std::io::Read) -> Hidden {
    let mut bytes = Vec::new();
    let mut key = [0u8; 1];
    loop {
        match r.read(&mut key) {
            Ok(0) | Err(_) => {
                return if bytes.is_empty() {
                    Hidden::Eof
                } else {
                    Hidden::Line(bytes)
                };
            }
            Ok(_) => {}
        }
        match key[0] {
            0x03 => return Hidden::Interrupt,
            b'\n' | b'\r' => {
                bytes.push(b'\n');
                return Hidden::Line(bytes);
            }
            0x04 if bytes.is_empty() => return Hidden::Eof,
            0x04 => {}
            0x7f | 0x08 => {
                // One character, not one byte (a UTF-8 continuation byte is 10xxxxxx).
                while let Some(b) = bytes.pop() {
                    if b & 0xC0 != 0x80 {
                        break;
                    }
                }
            }
            b => bytes.push(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use awf_domain::interaction::ApprovalKind;

    #[test]
    fn typed_lines_must_be_utf8() {
        let mut r = std::io::Cursor::new(b"ok value\n\xffbad\nlast".to_vec());
        let mut line = String::new();
        assert_eq!(read_text_line(&mut r, &mut line), Ok(9));
        assert_eq!(line, "ok value\n");
        let mut line = String::new();
        assert_eq!(read_text_line(&mut r, &mut line), Err(NotUtf8));
        assert_eq!(line, "");
        assert_eq!(read_text_line(&mut r, &mut line), Ok(4));
        assert_eq!(line, "last");
        assert_eq!(read_text_line(&mut r, &mut String::new()), Ok(0));
    }

    #[test]
    fn hidden_keys_end_at_enter_ctrl_c_or_ctrl_d_and_backspace_deletes_a_character() {
        let keys = |b: &[u8]| hidden_keys(&mut std::io::Cursor::new(b.to_vec()));
        assert_eq!(keys(b"s3cr\x7fet\r"), Hidden::Line(b"s3cet\n".to_vec()));
        assert_eq!(keys(b"ab\x03cd\n"), Hidden::Interrupt);
        assert_eq!(keys(b"\x04"), Hidden::Eof);
        assert_eq!(keys(b"x\x04y\n"), Hidden::Line(b"xy\n".to_vec()));
        assert_eq!(
            keys("\u{e9}\x7f!\n".as_bytes()),
            Hidden::Line(b"!\n".to_vec())
        );
        assert_eq!(keys(b""), Hidden::Eof);
    }

    #[test]
    fn the_breakpoint_language_becomes_typed_decisions() {
        use BreakpointDecision as D;
        assert_eq!(parse_breakpoint("", false), Ok(D::Continue));
        assert_eq!(parse_breakpoint(" C ", false), Ok(D::Continue));
        assert_eq!(parse_breakpoint("skip", false), Ok(D::Skip));
        assert_eq!(parse_breakpoint("q", false), Ok(D::Abort));
        assert_eq!(parse_breakpoint("r", true), Ok(D::Retry));
        assert_eq!(parse_breakpoint("I", true), Ok(D::Inspect));
        assert_eq!(
            parse_breakpoint("e count = 3", false),
            Ok(D::Edit {
                name: "count".into(),
                value: "3".into()
            })
        );
        assert_eq!(
            parse_breakpoint("e count", false),
            Err("edit needs NAME=VALUE, e.g. `e count=3`".into())
        );
        assert_eq!(
            parse_breakpoint("Go now", true),
            Err("unknown answer 'go': use c, s, a, r, i or e NAME=VALUE".into())
        );
        assert_eq!(
            parse_breakpoint("x", false),
            Err("unknown answer 'x': use c, s, a, i or e NAME=VALUE".into())
        );
    }

    #[test]
    fn approval_answers_are_y_n_or_a_menu_choice() {
        let two = ApprovalOption::defaults();
        assert_eq!(parse_approval("Y", &two, true), Some("approve".into()));
        assert_eq!(parse_approval("", &two, true), Some("reject".into()));
        assert_eq!(parse_approval("maybe", &two, true), None);
        let menu = vec![
            ApprovalOption {
                id: "once".into(),
                name: "Deploy once".into(),
                kind: ApprovalKind::AllowOnce,
            },
            ApprovalOption {
                id: "always".into(),
                name: "Always".into(),
                kind: ApprovalKind::AllowAlways,
            },
            ApprovalOption {
                id: "no".into(),
                name: "No".into(),
                kind: ApprovalKind::RejectAlways,
            },
        ];
        assert_eq!(parse_approval("2", &menu, false), Some("always".into()));
        assert_eq!(parse_approval("no", &menu, false), Some("no".into()));
        assert_eq!(parse_approval("4", &menu, false), None);
    }

    /// Only the default pair is a `[y/N]` prompt: a pair the workflow names itself (of the
    /// same kinds) is a menu whose names are shown and whose ids can be typed (new user:
    /// `once` was refused with "answer y or n").
    #[test]
    fn a_named_pair_of_the_default_kinds_is_a_menu() {
        let named = vec![
            ApprovalOption {
                id: "once".into(),
                name: "Deploy".into(),
                kind: ApprovalKind::AllowOnce,
            },
            ApprovalOption {
                id: "skip".into(),
                name: "Do not deploy".into(),
                kind: ApprovalKind::RejectOnce,
            },
        ];
        assert!(simple_gate(&ApprovalOption::defaults()));
        assert!(!simple_gate(&named));
        let simple = simple_gate(&named);
        assert_eq!(parse_approval("once", &named, simple), Some("once".into()));
        assert_eq!(parse_approval("2", &named, simple), Some("skip".into()));
        let two = ApprovalOption::defaults();
        assert_eq!(
            parse_approval("approve", &two, true),
            Some("approve".into())
        );
        let term = Terminal {
            style: crate::style::Style::plain(),
            json: false,
            warnings: true,
            log_json: false,
            tty: false,
            prompt_on_dev_tty: false,
        };
        let prompt = term.approval_prompt("deploy", "Deploy now?", &named);
        assert!(
            prompt.contains("1) Deploy [allow_once] (id: once)"),
            "{prompt}"
        );
        assert!(
            prompt.contains("2) Do not deploy [reject_once] (id: skip)"),
            "{prompt}"
        );
        assert!(prompt.ends_with("choose a number or an id > "), "{prompt}");
        assert!(!prompt.contains("[y/N]"), "{prompt}");
    }

    #[test]
    fn an_exact_value_or_id_wins_over_a_position() {
        let choices = vec!["3".to_owned(), "1".to_owned(), "2".to_owned()];
        assert_eq!(menu_choice("1", &choices), "1");
        assert_eq!(menu_choice(" 3 ", &choices), "3");
        let mixed = vec!["10".to_owned(), "dev".to_owned()];
        assert_eq!(menu_choice("2", &mixed), "dev");
        let menu = vec![
            ApprovalOption {
                id: "2".into(),
                name: "Two".into(),
                kind: ApprovalKind::AllowOnce,
            },
            ApprovalOption {
                id: "later".into(),
                name: "Later".into(),
                kind: ApprovalKind::AllowAlways,
            },
            ApprovalOption {
                id: "no".into(),
                name: "No".into(),
                kind: ApprovalKind::RejectOnce,
            },
        ];
        assert_eq!(parse_approval("2", &menu, false), Some("2".into()));
        assert_eq!(parse_approval("3", &menu, false), Some("no".into()));
        assert_eq!(parse_approval("1", &menu, false), Some("2".into()));
    }

    #[test]
    fn a_menu_number_picks_an_enum_value() {
        let choices = vec!["dev".to_owned(), "prod".to_owned()];
        assert_eq!(menu_choice("2", &choices), "prod");
        assert_eq!(menu_choice("3", &choices), "3");
        assert_eq!(menu_choice("qa", &choices), "qa");
    }
}
