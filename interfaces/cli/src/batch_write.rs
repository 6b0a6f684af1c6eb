//! Gathers what one printed event writes to stdout and stderr, so that each stream gets one
//! `write` per event instead of one per formatted piece (stderr is unbuffered: a `writeln!`
//! with three arguments is otherwise five system calls). Issue 9: per-step costs.
//!
//! Order is kept: consecutive writes to one stream are joined; a write to the other stream
//! first sends what was gathered. A large write (at least [`DIRECT_BYTES`]) is passed
//! through without being copied. Stdout is flushed after each part written to it (every
//! stdout write of the printer is followed by a flush in the same event).

use std::cell::RefCell;
use std::io;
use std::io::Write;

/// Writes of at least this many bytes go straight to their stream (after what was gathered),
/// never copied into the batch: a step's 50 MB output is not held twice.
pub const DIRECT_BYTES: usize = 64 * 1024;

/// The two streams of one event and what is gathered for them.
pub struct Batch<'a> {
    out: &'a mut dyn Write,
    err: &'a mut dyn Write,
    /// Which stream `pending` is for (`true`: stderr).
    to_err: bool,
    pending: Vec<u8>,
}

impl<'a> Batch<'a> {
    /// A batch over `out` (stdout) and `err` (stderr).
    pub fn new(out: &'a mut dyn Write, err: &'a mut dyn Write) -> Self {
        Self {
            out,
            err,
            to_err: false,
            pending: Vec::new(),
        }
    }

    fn push(&mut self, to_err: bool, data: &[u8]) -> io::Result<()> {
        if to_err != self.to_err {
            self.send()?;
            self.to_err = to_err;
        }
        if data.len() >= DIRECT_BYTES {
            self.send()?;
            let stream: &mut dyn Write = if to_err { self.err } else { self.out };
            stream.write_all(data)?;
            if !to_err {
                self.out.flush()?;
            }
            return Ok(());
        }
        self.pending.extend_from_slice(data);
        Ok(())
    }

    /// Sends what is gathered to its stream (one `write_all`), flushing stdout.
    ///
    /// # Errors
    /// The stream's I/O error.
    pub fn send(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let result = if self.to_err {
            self.err.write_all(&self.pending)
        } else {
            self.out
                .write_all(&self.pending)
                .and_then(|()| self.out.flush())
        };
        self.pending.clear();
        result
    }
}

/// One stream's side of a shared [`Batch`]: a [`Write`] that gathers into it. `flush` is a
/// no-op (the batch flushes when it sends).
pub struct Half<'b, 'a> {
    batch: &'b RefCell<Batch<'a>>,
    to_err: bool,
}

impl<'b, 'a> Half<'b, 'a> {
    /// The stdout side of `batch`.
    pub fn out(batch: &'b RefCell<Batch<'a>>) -> Self {
        Self {
            batch,
            to_err: false,
        }
    }

    /// The stderr side of `batch`.
    pub fn err(batch: &'b RefCell<Batch<'a>>) -> Self {
        Self {
            batch,
            to_err: true,
        }
    }
}

impl Write for Half<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.batch.borrow_mut().push(self.to_err, buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Runs `f` with batching writers over `out` and `err`, then sends what is left. `f`'s
/// error comes first; what it wrote before failing is still sent.
///
/// # Errors
/// `f`'s error, else the streams' I/O error.
pub fn batched<R>(
    out: &mut dyn Write,
    err: &mut dyn Write,
    f: impl FnOnce(&mut dyn Write, &mut dyn Write) -> io::Result<R>,
) -> io::Result<R> {
    let batch = RefCell::new(Batch::new(out, err));
    let result = f(&mut Half::out(&batch), &mut Half::err(&batch));
    let sent = batch.into_inner().send();
    let r = result?;
    sent.map(|()| r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    /// A stream that records each `write` call as one part, and each flush as `|`.
    #[derive(Clone, Default)]
    struct Calls(Rc<RefCell<Vec<Vec<u8>>>>);

    impl Write for Calls {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.borrow_mut().push(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            self.0.borrow_mut().push(b"|".to_vec());
            Ok(())
        }
    }

    /// One log of both streams, each part tagged with its stream.
    type Parts = Rc<RefCell<Vec<(char, Vec<u8>)>>>;

    #[derive(Clone, Default)]
    struct Tagged(Parts, char);

    impl Write for Tagged {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.borrow_mut().push((self.1, buf.to_vec()));
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn formatted_lines_reach_stderr_in_one_write() {
        let err = Calls::default();
        let (mut o, mut e) = (Calls::default(), err.clone());
        batched(&mut o, &mut e, |_, err| {
            let (mark, step, n) = ("✓", "step", 42);
            writeln!(err, "  {mark} {step}: {n}")?;
            writeln!(err, "  {} more", step.len())
        })
        .unwrap();
        assert_eq!(
            *err.0.borrow(),
            vec!["  ✓ step: 42\n  4 more\n".as_bytes().to_vec()]
        );
    }

    #[test]
    fn the_order_across_streams_is_kept_and_stdout_is_flushed() {
        let log = Rc::new(RefCell::new(Vec::new()));
        let (mut o, mut e) = (Tagged(log.clone(), 'o'), Tagged(log.clone(), 'e'));
        batched(&mut o, &mut e, |out, err| {
            write!(err, "a{}", 1)?;
            write!(out, "b{}", 2)?;
            out.flush()?;
            write!(out, "c")?;
            write!(err, "d")
        })
        .unwrap();
        let parts: Vec<(char, String)> = log
            .borrow()
            .iter()
            .map(|(c, b)| (*c, String::from_utf8_lossy(b).into_owned()))
            .collect();
        assert_eq!(
            parts,
            [('e', "a1".into()), ('o', "b2c".into()), ('e', "d".into())]
        );
    }

    #[test]
    fn a_large_write_is_passed_through_after_what_was_gathered() {
        let out = Calls::default();
        let (mut o, mut e) = (out.clone(), Calls::default());
        let big = vec![b'x'; DIRECT_BYTES];
        batched(&mut o, &mut e, |out, _| {
            out.write_all(b"head")?;
            out.write_all(&big)?;
            out.write_all(b"tail")
        })
        .unwrap();
        let parts = out.0.borrow();
        assert_eq!(parts.len(), 6, "head | big | tail |");
        assert_eq!(parts[0], b"head");
        assert_eq!(parts[2].len(), DIRECT_BYTES);
        assert_eq!(parts[4], b"tail");
    }

    fn envelope(event: awf_domain::event::RunEvent) -> awf_domain::event::EventEnvelope {
        awf_domain::event::EventEnvelope {
            seq: 1,
            run_id: awf_domain::run::RunId("r1".into()),
            parent_run_id: None,
            at: std::time::SystemTime::UNIX_EPOCH,
            path: "build".into(),
            iteration: None,
            event,
        }
    }

    #[test]
    fn the_printer_writes_each_event_to_stderr_at_once_with_the_same_bytes() {
        use crate::printer::TextPrinter;
        use awf_domain::event::RunEvent;
        let events = [
            envelope(RunEvent::StepStarted {
                step: "build".into(),
                kind: "command".into(),
                command: None,
            }),
            envelope(RunEvent::StepRetrying {
                step: "build".into(),
                attempt: 2,
                delay_ms: 1500,
                reason: None,
            }),
        ];
        let mode = crate::cli::OutputMode::Buffered;
        let style = crate::style::Style::plain();
        let mut plain = TextPrinter::new(mode, false, style);
        let mut batched_printer = TextPrinter::new(mode, false, style);
        for ev in &events {
            let (mut o, mut e) = (Vec::new(), Vec::new());
            plain.handle(ev, &mut o, &mut e).unwrap();
            let (mut bo, err) = (Calls::default(), Calls::default());
            batched_printer
                .handle_batched(ev, &mut bo, &mut err.clone())
                .unwrap();
            assert_eq!(*err.0.borrow(), vec![e], "one write, the same bytes");
            assert!(bo.0.borrow().is_empty());
        }
    }

    #[test]
    fn what_was_written_before_an_error_is_still_sent() {
        let err = Calls::default();
        let (mut o, mut e) = (Calls::default(), err.clone());
        let r: io::Result<()> = batched(&mut o, &mut e, |_, err| {
            err.write_all(b"before")?;
            Err(io::Error::other("boom"))
        });
        assert_eq!(r.unwrap_err().to_string(), "boom");
        assert_eq!(*err.0.borrow(), vec![b"before".to_vec()]);
    }
}
