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
use awf_domain::interaction::ApprovalKind;
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
    /// stdin and stderr are terminals (approval gates are asked only then).
    tty: bool,
}

impl Terminal {
    /// The terminal of this process, as the global options set it up.
    pub(crate) fn new(ctx: &Ctx) -> Self {
        Self {
            style: ctx.err_style,
            json: ctx.json(),
            warnings: awf_telemetry::LogConfig::shows(ctx.run_log_level, LogLevel::Warn),
            log_json: ctx.log_json,
            tty: std::io::stdin().is_terminal() && std::io::stderr().is_terminal(),
        }
    }

    /// Asks the user on the terminal (blocking: reads stdin) and gives the typed answer.
    pub(crate) fn answer(&self, request: &InteractionRequest) -> Answer {
        match &request.kind {
            RequestKind::MissingInput { input, problem } => {
                self.missing_input(input, problem.as_deref())
            }
            RequestKind::ConversationTurn { .. } => match next_line() {
                Line::Text(line) => Answer::Value(line),
                Line::Eof => {
                    self.end_of_input();
                    Answer::EndOfInput
                }
                Line::Replaced => Answer::EndOfInput,
            },
            RequestKind::Breakpoint {
                state_kind,
                previous,
                preview,
            } => loop {
                let line = match next_line() {
                    Line::Text(l) => l,
                    Line::Eof => {
                        self.end_of_input();
                        return Answer::Decision(BreakpointDecision::Abort);
                    }
                    Line::Replaced => return Answer::Decision(BreakpointDecision::Abort),
                };
                match parse_breakpoint(&line, previous.is_some()) {
                    Ok(d) => return Answer::Decision(d),
                    Err(warning) => {
                        self.warn(&warning);
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
                            let mut err = std::io::stderr().lock();
                            let _ = err.write_all(text.as_bytes());
                            let _ = err.flush();
                        }
                    }
                }
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
                    let _ = writeln!(err, "  invalid: the value is not valid UTF-8; try again");
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
    /// menu otherwise. Without a terminal the gate is refused (its first rejecting option),
    /// with a line saying to pass `--yes`.
    fn approval(&self, step: &str, message: &str, options: &[ApprovalOption]) -> Answer {
        let reject = options
            .iter()
            .find(|o| !o.kind.allows())
            .or_else(|| options.first())
            .map_or_else(|| "reject".to_owned(), |o| o.id.clone());
        // Workflow text reaches the terminal without control sequences.
        let message = crate::style::printable(message);
        let step = crate::style::printable(step);
        let mut err = std::io::stderr();
        if !self.tty {
            self.warn(&format!(
                "step '{step}' needs approval ({message}) and there is no terminal to ask: rejected; pass --yes to approve every gate"
            ));
            return Answer::Option(reject);
        }
        let simple = options.len() == 2
            && options[0].kind == ApprovalKind::AllowOnce
            && options[1].kind == ApprovalKind::RejectOnce;
        loop {
            if simple {
                let _ = write!(err, "{} {message} ({step}) [y/N] ", self.style.yellow("?"));
            } else {
                let _ = writeln!(err, "{} {message} ({step})", self.style.yellow("?"));
                for (i, o) in options.iter().enumerate() {
                    let _ = writeln!(err, "  {}) {} [{}]", i + 1, o.name, o.kind.as_str());
                }
                let _ = write!(err, "choose a number > ");
            }
            let _ = err.flush();
            let line = match next_line() {
                Line::Text(l) => l,
                Line::Eof => {
                    self.end_of_input();
                    return Answer::Option(reject);
                }
                Line::Replaced => return Answer::Option(reject),
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
                            format!("choose 1-{}", options.len())
                        }
                    );
                }
            }
        }
    }
}

/// Answers a run's requests on the terminal one at a time, in the order they came (two
/// parallel branches may ask at once): feed it every event ([`Answerer::on_event`]) and await
/// [`Answerer::next`] for each answer to `respond` with. A request that ends without an
/// answer (timed out, cancelled) is dropped, also while it is being read.
pub(crate) struct Answerer {
    term: Terminal,
    queue: std::collections::VecDeque<InteractionRequest>,
    current: Option<(String, tokio::task::JoinHandle<Answer>)>,
}

impl Answerer {
    /// Nothing asked yet.
    pub(crate) fn new(ctx: &Ctx) -> Self {
        Self {
            term: Terminal::new(ctx),
            queue: std::collections::VecDeque::new(),
            current: None,
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
                    .is_some_and(|(id, _)| id == request_id)
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
        if self.current.is_some() {
            return;
        }
        if let Some(request) = self.queue.pop_front() {
            let term = self.term;
            let id = request.request_id.clone();
            let reader = tokio::task::spawn_blocking(move || term.answer(&request));
            self.current = Some((id, reader));
        }
    }

    /// The next answer: (request id, answer). Pends while nothing is asked. Cancel-safe.
    pub(crate) async fn next(&mut self) -> (String, Answer) {
        let answer = match self.current.as_mut() {
            Some((_, h)) => h.await.unwrap_or(Answer::EndOfInput),
            None => std::future::pending().await,
        };
        let id = self.current.take().map(|(id, _)| id).unwrap_or_default();
        self.start_next();
        (id, answer)
    }
}

/// A menu number (`2`) stands for that choice of an enum; anything else is the value typed.
fn menu_choice(value: &str, choices: &[String]) -> String {
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

/// An approval answer: `y`/`yes` and `n`/`no`/empty for the simple prompt; a menu number or
/// an option id for the menu. `None`: not an answer.
fn parse_approval(line: &str, options: &[ApprovalOption], simple: bool) -> Option<String> {
    let a = line.trim();
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
    options.iter().find(|o| o.id == a).map(|o| o.id.clone())
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
}

/// The one thread that reads visible lines from stdin, on demand, for the latest caller: a
/// request that timed out while its line was being read does not keep the next line typed.
struct LineReader {
    slot: std::sync::Mutex<Slot>,
    wake: std::sync::Condvar,
}

#[derive(Default)]
struct Slot {
    waiter: Option<std::sync::mpsc::Sender<Option<String>>>,
    wanted: bool,
}

fn lock_slot(m: &std::sync::Mutex<Slot>) -> std::sync::MutexGuard<'_, Slot> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

static LINES: std::sync::OnceLock<std::sync::Arc<LineReader>> = std::sync::OnceLock::new();

/// The next line from stdin, read by the shared reader thread.
fn next_line() -> Line {
    let reader = LINES.get_or_init(|| {
        let r = std::sync::Arc::new(LineReader {
            slot: std::sync::Mutex::new(Slot::default()),
            wake: std::sync::Condvar::new(),
        });
        let shared = std::sync::Arc::clone(&r);
        std::thread::spawn(move || {
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
                let mut line = String::new();
                let got = match std::io::stdin().read_line(&mut line) {
                    Ok(0) | Err(_) => None,
                    Ok(_) => Some(line.trim_end_matches(['\n', '\r']).to_owned()),
                };
                // The line answers whoever waits now (a later caller takes over the read of
                // one that gave up); it satisfies that caller's want too.
                let mut slot = lock_slot(&shared.slot);
                slot.wanted = false;
                if let Some(w) = slot.waiter.take() {
                    let _ = w.send(got);
                }
            }
        });
        r
    });
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let mut slot = lock_slot(&reader.slot);
        slot.waiter = Some(tx);
        slot.wanted = true;
    }
    reader.wake.notify_one();
    match rx.recv() {
        Ok(Some(l)) => Line::Text(l),
        Ok(None) => Line::Eof,
        Err(_) => Line::Replaced,
    }
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

/// Reads a line from the terminal without echoing it (secret inputs); echo is restored
/// afterwards, also when the read fails.
fn read_hidden(line: &mut String) -> Result<usize, NotUtf8> {
    use nix::sys::termios;
    let stdin = std::io::stdin();
    let saved = termios::tcgetattr(&stdin).ok();
    if let Some(t) = &saved {
        // No echo, and no signal from Ctrl-C (it arrives as a character instead), so the
        // terminal is always restored before awf ends.
        let mut quiet = t.clone();
        quiet.local_flags.remove(termios::LocalFlags::ECHO);
        quiet.local_flags.remove(termios::LocalFlags::ISIG);
        let _ = termios::tcsetattr(&stdin, termios::SetArg::TCSANOW, &quiet);
    }
    let n = read_text_line(&mut stdin.lock(), line);
    if let Some(t) = &saved {
        let _ = termios::tcsetattr(&stdin, termios::SetArg::TCSANOW, t);
    }
    let _ = writeln!(std::io::stderr());
    if line.contains('\u{3}') {
        // Ctrl-C at the prompt (it arrived as a character): deliver it as the signal it
        // stands for, so the run is cancelled like at any other prompt (nothing has started;
        // awf exits 130). The request resolves as cancelled: this read never answers.
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGINT);
        loop {
            std::thread::park();
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_menu_number_picks_an_enum_value() {
        let choices = vec!["dev".to_owned(), "prod".to_owned()];
        assert_eq!(menu_choice("2", &choices), "prod");
        assert_eq!(menu_choice("3", &choices), "3");
        assert_eq!(menu_choice("qa", &choices), "qa");
    }
}
