use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::SystemTime;

use awf_domain::event::EventEnvelope;
use awf_domain::event::LogLevel;
use awf_domain::event::OutputStream;
use awf_domain::event::RunEvent;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use awf_domain::run::StepState;
use awf_domain::run::StepStatus;
use awf_domain::run::TokenUsage;
use indicatif::TermLike;

use super::*;
use crate::cli::OutputMode;
use crate::printer::TextPrinter;

fn ev(path: &str, event: RunEvent) -> EventEnvelope {
    EventEnvelope {
        seq: 1,
        run_id: RunId("r1".into()),
        parent_run_id: None,
        at: SystemTime::UNIX_EPOCH,
        path: path.into(),
        iteration: None,
        event,
    }
}

fn started(step: &str) -> EventEnvelope {
    ev(
        step,
        RunEvent::StepStarted {
            step: step.into(),
            kind: "command".into(),
            command: None,
        },
    )
}

fn state(name: &str, status: StepStatus, ms: u64) -> StepState {
    StepState {
        name: name.into(),
        status,
        output: String::new().into(),
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

fn finished(step: &str, status: StepStatus, ms: u64) -> EventEnvelope {
    ev(
        step,
        RunEvent::StepFinished {
            step: step.into(),
            kind: "command".into(),
            state: Box::new(state(step, status, ms)),
        },
    )
}

fn result() -> RunResult {
    RunResult {
        run_id: None,
        workflow: "kid".into(),
        status: RunStatus::Cancelled,
        exit_code: 4,
        terminal: None,
        duration_ms: 0,
        states: BTreeMap::new(),
        outputs: BTreeMap::new(),
        error: None,
        message: None,
        spend: None,
    }
}

/// A printer with live progress that draws nowhere and never ticks.
fn hidden_printer(mode: OutputMode) -> TextPrinter {
    let live = LiveProgress::new(
        Box::new(ProgressDrawTarget::hidden),
        None,
        true,
        Style::plain(),
    );
    TextPrinter::new(mode, false, Style::plain()).with_live(Some(live))
}

fn running(p: &TextPrinter) -> Vec<String> {
    p.live().map(LiveProgress::running).unwrap_or_default()
}

/// Feeds events; returns what reached stdout and stderr directly.
fn feed(p: &mut TextPrinter, events: &[EventEnvelope]) -> (String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    for e in events {
        p.handle(e, &mut out, &mut err).unwrap();
    }
    (
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

/// Records what indicatif writes to the terminal.
#[derive(Debug, Clone, Default)]
struct Recorder(Arc<Mutex<Vec<String>>>);

impl Recorder {
    fn writes(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl TermLike for Recorder {
    fn width(&self) -> u16 {
        80
    }
    fn move_cursor_up(&self, _: usize) -> io::Result<()> {
        Ok(())
    }
    fn move_cursor_down(&self, _: usize) -> io::Result<()> {
        Ok(())
    }
    fn move_cursor_right(&self, _: usize) -> io::Result<()> {
        Ok(())
    }
    fn move_cursor_left(&self, _: usize) -> io::Result<()> {
        Ok(())
    }
    fn write_line(&self, s: &str) -> io::Result<()> {
        self.0.lock().unwrap().push(s.to_owned());
        Ok(())
    }
    fn write_str(&self, s: &str) -> io::Result<()> {
        if !s.trim().is_empty() {
            self.0.lock().unwrap().push(s.to_owned());
        }
        Ok(())
    }
    fn clear_line(&self) -> io::Result<()> {
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
}

fn recorded_printer(mode: OutputMode) -> (TextPrinter, Recorder) {
    let rec = Recorder::default();
    let r = rec.clone();
    let live = LiveProgress::new(
        Box::new(move || ProgressDrawTarget::term_like(Box::new(r.clone()))),
        None,
        true,
        Style::plain(),
    );
    (
        TextPrinter::new(mode, false, Style::plain()).with_live(Some(live)),
        rec,
    )
}

#[test]
fn progress_needs_a_terminal_and_no_opt_out() {
    assert!(wanted(
        true,
        (false, None),
        Some("xterm-256color"),
        false,
        false
    ));
    assert!(wanted(true, (false, Some("")), None, false, false));
    assert!(!wanted(false, (false, None), None, false, false));
    assert!(!wanted(true, (false, Some("1")), None, false, false));
    // `--no-color` turns the live display off as NO_COLOR does (new user).
    assert!(!wanted(
        true,
        (true, None),
        Some("xterm-256color"),
        false,
        false
    ));
    assert!(!wanted(true, (false, None), Some("dumb"), false, false));
    assert!(!wanted(true, (false, None), None, true, false));
    assert!(!wanted(true, (false, None), None, false, true));
}

#[test]
fn elapsed_is_short() {
    assert_eq!(short_elapsed(Duration::ZERO), "0.0s");
    assert_eq!(short_elapsed(Duration::from_millis(1_290)), "1.2s");
    assert_eq!(short_elapsed(Duration::from_millis(59_999)), "59.9s");
    assert_eq!(short_elapsed(Duration::from_secs(125)), "2m05s");
    assert_eq!(short_elapsed(Duration::from_secs(3_720)), "1h02m");
}

#[test]
fn complete_lines_are_split_off() {
    let mut buf = b"a\nb\nc".to_vec();
    assert_eq!(take_lines(&mut buf), Some(b"a\nb\n".to_vec()));
    assert_eq!(buf, b"c".to_vec());
    assert_eq!(take_lines(&mut buf), None);
    assert_eq!(buf, b"c".to_vec());
}

#[test]
fn parallel_branches_each_have_a_spinner_until_they_finish() {
    let mut p = hidden_printer(OutputMode::Silent);
    let block = ev(
        "race",
        RunEvent::StepStarted {
            step: "race".into(),
            kind: "parallel".into(),
            command: None,
        },
    );
    let (out, err) = feed(&mut p, &[block, started("a"), started("b")]);
    assert_eq!((out.as_str(), err.as_str()), ("", ""));
    assert_eq!(running(&p), vec!["  race", "  a", "  b"]);
    feed(&mut p, &[finished("b", StepStatus::Completed, 1000)]);
    assert_eq!(running(&p), vec!["  race", "  a"]);
    feed(&mut p, &[finished("a", StepStatus::Failed, 1000)]);
    assert_eq!(running(&p), vec!["  race"]);
    // A second start of a running step keeps its one spinner.
    feed(&mut p, &[started("race")]);
    assert_eq!(running(&p), vec!["  race"]);
    feed(&mut p, &[finished("race", StepStatus::Completed, 1000)]);
    assert_eq!(running(&p), Vec::<String>::new());
}

#[test]
fn iterations_and_sub_workflow_steps_are_labelled_and_indented() {
    let mut p = hidden_printer(OutputMode::Silent);
    let mut body = ev(
        "loop:2/body",
        RunEvent::StepStarted {
            step: "body".into(),
            kind: "command".into(),
            command: None,
        },
    );
    body.iteration = Some(2);
    let call = ev(
        "call",
        RunEvent::StepStarted {
            step: "call".into(),
            kind: "call_workflow".into(),
            command: None,
        },
    );
    let child_started = ev(
        "call",
        RunEvent::ChildRunStarted {
            step: "call".into(),
            child_run_id: RunId("c1".into()),
            workflow: "kid".into(),
        },
    );
    let mut inner = started("inner");
    inner.run_id = RunId("c1".into());
    inner.parent_run_id = Some(RunId("r1".into()));
    feed(&mut p, &[body, call, child_started, inner]);
    assert_eq!(running(&p), vec!["  body[2]", "  call", "    inner"]);
    // The child run ends (its step was cancelled without a final event): its spinners go.
    let mut child_done = ev(
        "call",
        RunEvent::RunFinished {
            result: Box::new(result()),
        },
    );
    child_done.run_id = RunId("c1".into());
    child_done.parent_run_id = Some(RunId("r1".into()));
    feed(&mut p, &[child_done]);
    assert_eq!(running(&p), vec!["  body[2]", "  call"]);
    // The top-level run ends: nothing is left spinning.
    feed(
        &mut p,
        &[ev(
            "",
            RunEvent::RunFinished {
                result: Box::new(result()),
            },
        )],
    );
    assert_eq!(running(&p), Vec::<String>::new());
}

#[test]
fn a_prompt_clears_the_spinners_until_it_is_answered() {
    let (mut p, rec) = recorded_printer(OutputMode::Buffered);
    let chunk = ev(
        "chat",
        RunEvent::AgentMessageChunk {
            step: "chat".into(),
            text: "Hello".into(),
        },
    );
    let ask = ev(
        "chat",
        RunEvent::InteractionRequired {
            request: Box::new(awf_domain::interaction::InteractionRequest {
                request_id: "q1".into(),
                step: Some("chat".into()),
                kind: awf_domain::interaction::RequestKind::ConversationTurn {
                    prompt: "> ".into(),
                },
                timeout_ms: None,
            }),
        },
    );
    let (out, err) = feed(&mut p, &[started("chat"), chunk, ask]);
    assert_eq!((out.as_str(), err.as_str()), ("Hello\n", "> "));
    assert!(p.live().unwrap().is_paused());
    assert_eq!(running(&p), vec!["  chat"]);
    // While the prompt waits, other lines are held so its line stays readable...
    let log = ev(
        "chat",
        RunEvent::Log {
            step: None,
            level: LogLevel::Warn,
            message: "careful".into(),
        },
    );
    let (_, err) = feed(&mut p, &[log]);
    assert_eq!(err, "");
    // ...and written once it is answered.
    let resolved = ev(
        "chat",
        RunEvent::InteractionResolved {
            request_id: "q1".into(),
            resolution: awf_domain::interaction::Resolution::Answered(
                awf_domain::interaction::Answer::Value("hi".into()),
            ),
        },
    );
    let before = rec.writes().len();
    let (_, err) = feed(&mut p, &[resolved]);
    assert_eq!(err, "");
    assert!(
        rec.writes()[before..]
            .iter()
            .any(|w| w.contains("WARN careful")),
        "{:?}",
        rec.writes()
    );
    assert!(!p.live().unwrap().is_paused());
    assert_eq!(running(&p), vec!["  chat"]);
}

#[test]
fn spinners_stay_hidden_until_every_open_prompt_is_answered() {
    let (mut p, rec) = recorded_printer(OutputMode::Silent);
    let gate = |id: &str, step: &str| {
        ev(
            step,
            RunEvent::InteractionRequired {
                request: Box::new(awf_domain::interaction::InteractionRequest {
                    request_id: id.into(),
                    step: Some(step.into()),
                    kind: awf_domain::interaction::RequestKind::Approval {
                        message: "go?".into(),
                        options: awf_domain::interaction::ApprovalOption::defaults(),
                    },
                    timeout_ms: None,
                }),
            },
        )
    };
    let resolved = |id: &str, step: &str| {
        ev(
            step,
            RunEvent::InteractionResolved {
                request_id: id.into(),
                resolution: awf_domain::interaction::Resolution::Answered(
                    awf_domain::interaction::Answer::Option("approve".into()),
                ),
            },
        )
    };
    let log = |step: &str, text: &str| {
        ev(
            step,
            RunEvent::Log {
                step: None,
                level: LogLevel::Warn,
                message: text.into(),
            },
        )
    };
    feed(
        &mut p,
        &[started("a"), started("b"), gate("r1", "a"), gate("r2", "b")],
    );
    assert!(p.live().unwrap().is_paused());
    // The first answer: the second prompt is still open, nothing is drawn over it.
    p.prompt_answered("r1");
    let (_, err) = feed(&mut p, &[resolved("r1", "a"), log("c", "from c")]);
    assert_eq!(err, "");
    assert!(p.live().unwrap().is_paused());
    assert!(!rec.writes().iter().any(|w| w.contains("from c")));
    p.prompt_answered("r2");
    assert!(!p.live().unwrap().is_paused());
    let (_, err) = feed(&mut p, &[resolved("r2", "b"), log("c", "later")]);
    assert_eq!(err, "");
    let lines: Vec<String> = rec
        .writes()
        .into_iter()
        .filter(|w| w.contains("WARN"))
        .collect();
    assert_eq!(
        lines,
        vec!["  WARN from c", "  WARN later"],
        "{:?}",
        rec.writes()
    );
    assert!(!p.take_overprinted());
}

#[test]
fn finished_lines_replace_spinners_and_logs_print_above_them() {
    let (mut p, rec) = recorded_printer(OutputMode::Silent);
    let log = ev(
        "s",
        RunEvent::Log {
            step: None,
            level: LogLevel::Info,
            message: "hello".into(),
        },
    );
    let (out, err) = feed(
        &mut p,
        &[
            started("s"),
            log,
            finished("s", StepStatus::Completed, 1500),
        ],
    );
    assert_eq!((out.as_str(), err.as_str()), ("", ""));
    let writes = rec.writes();
    assert!(writes.contains(&"  INFO hello".to_owned()), "{writes:?}");
    assert!(writes.contains(&"  ✓ s (1.5s)".to_owned()), "{writes:?}");
    assert!(writes.iter().all(|w| !w.contains('→')), "{writes:?}");
    // The spinner line was drawn (frame, label, time) before the final line replaced it.
    let spinner = writes
        .iter()
        .position(|w| FRAMES.iter().any(|f| w.starts_with(&format!("  {f} s  "))))
        .unwrap();
    let done = writes.iter().position(|w| w == "  ✓ s (1.5s)").unwrap();
    assert!(spinner < done, "{writes:?}");
    assert_eq!(running(&p), Vec::<String>::new());
}

#[test]
fn streamed_output_is_written_a_whole_line_at_a_time() {
    let (mut p, _rec) = recorded_printer(OutputMode::Streaming);
    let chunk = |t: &str| {
        ev(
            "s",
            RunEvent::OutputChunk {
                step: "s".into(),
                stream: OutputStream::Stdout,
                text: t.into(),
            },
        )
    };
    let (out, _) = feed(&mut p, &[started("s"), chunk("a\nb")]);
    assert_eq!(out, "[OUT] a\n");
    let (out, _) = feed(&mut p, &[chunk("c\nd")]);
    assert_eq!(out, "[OUT] bc\n");
    // The step's end completes the held line.
    let (out, _) = feed(&mut p, &[finished("s", StepStatus::Completed, 5)]);
    assert_eq!(out, "[OUT] d\n");
}

#[test]
fn finishing_clears_everything_and_writes_held_output() {
    let mut live = LiveProgress::new(
        Box::new(ProgressDrawTarget::hidden),
        None,
        true,
        Style::plain(),
    );
    live.start(&RunId("r1".into()), "s", "  ", "s");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    live.write(b"partial", b"", &mut out, &mut err).unwrap();
    assert_eq!(out, b"");
    live.finish(&mut out, &mut err).unwrap();
    assert_eq!(out, b"partial");
    assert_eq!(live.running(), Vec::<String>::new());
    // After the end, lines go straight through and no spinner comes back.
    live.start(&RunId("r1".into()), "t", "  ", "t");
    live.line("after", &mut err).unwrap();
    assert_eq!(err, b"after\n");
    assert_eq!(live.running(), Vec::<String>::new());
    live.finish(&mut out, &mut err).unwrap();
}

/// Spinners of different name lengths shown together had their times wherever each name
/// ended (`⠙ x  0.1s` under `⠙ long_branch_name  0.1s`): the labels are now padded to the
/// widest shown, indent included, so the times make one column; it shrinks back when the
/// widest spinner goes.
#[test]
fn the_times_of_the_spinners_shown_line_up() {
    let mut p = hidden_printer(OutputMode::Silent);
    let block = ev(
        "fan",
        RunEvent::StepStarted {
            step: "fan".into(),
            kind: "parallel".into(),
            command: None,
        },
    );
    feed(&mut p, &[block, started("x")]);
    let drawn = |p: &TextPrinter| p.live().map(LiveProgress::drawn_labels).unwrap_or_default();
    assert_eq!(drawn(&p), vec!["  fan", "  x  "]);
    feed(&mut p, &[started("long_branch_name")]);
    assert_eq!(
        drawn(&p),
        vec![
            format!("  fan{}", " ".repeat(13)),
            format!("  x{}", " ".repeat(15)),
            "  long_branch_name".to_owned()
        ]
    );
    // The labels themselves are unchanged.
    assert_eq!(running(&p), vec!["  fan", "  x", "  long_branch_name"]);
    feed(
        &mut p,
        &[finished("long_branch_name", StepStatus::Completed, 5)],
    );
    assert_eq!(drawn(&p), vec!["  fan", "  x  "]);
}

#[test]
fn labels_are_padded_in_terminal_columns_up_to_a_cap() {
    assert_eq!(aligned_labels(&[]), Vec::<String>::new());
    assert_eq!(
        aligned_labels(&[("  ", "a"), ("    ", "inner"), ("  ", "构建")]),
        vec!["a      ", "inner", "构建   "]
    );
    // A label past the cap is not padded to: the others align among themselves.
    let long = "l".repeat(ALIGN_MAX);
    assert_eq!(
        aligned_labels(&[("  ", "ab"), ("  ", &long), ("  ", "a")]),
        vec!["ab".to_owned(), long.clone(), "a ".to_owned()]
    );
}
