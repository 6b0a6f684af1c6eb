//! The last lines of a failed step's output, shown under its `✗` line by `awf run` in the
//! default output mode (`-o silent`, where nothing of the output was shown) and under its
//! line in `awf status`, as make and CI logs show a failed command's output (new user: a
//! failed step's `echo doing` could be seen only with `-f json` or `-o streaming`).
//!
//! The text is the step's as the run events and the run's record carry it: secrets already
//! masked (across chunk boundaries, before anything is cut). Lines are shown without their
//! control characters ([`crate::style::printable_text`]). A line rewritten in place with
//! carriage returns (a progress meter: `10%\r55%\r100%`) is shown as it was last written
//! (`100%`), not as every state it went through.

use std::collections::VecDeque;

/// How many lines are shown at most.
pub const TAIL_LINES: usize = 15;

/// Longest line shown, in characters (`…` marks a cut).
const LINE_MAX: usize = 300;

/// The last [`TAIL_LINES`] lines of a step's output, in the order it was given
/// ([`OutputTail::push`], [`OutputTail::of_streams`]).
///
/// Memory is bounded: at most [`TAIL_LINES`] lines of at most [`LINE_MAX`] characters, and
/// one unfinished line per stream of at most four times that.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OutputTail {
    /// The last complete lines, oldest first.
    lines: VecDeque<String>,
    /// The unfinished last line of stdout (`[0]`) and of stderr (`[1]`), as bytes (a
    /// character may be split between chunks).
    partial: [Vec<u8>; 2],
    /// Complete lines seen, the ones dropped included.
    total: usize,
}

impl OutputTail {
    /// The tail of a step's recorded `stdout` and `stderr`, stdout first (as `-o buffered`
    /// shows them; the two streams are read apart and keep no order between them), stderr,
    /// where a failure is usually said, last.
    #[cfg(test)]
    pub fn of_streams(stdout: &str, stderr: &str) -> Self {
        Self::of_cut_streams((stdout, None), (stderr, None))
    }

    /// [`OutputTail::of_streams`] of streams each given as its kept text and, when it was
    /// cut, its end.
    fn of_cut_streams(
        stdout: (&str, Option<&awf_domain::run::StreamTail>),
        stderr: (&str, Option<&awf_domain::run::StreamTail>),
    ) -> Self {
        let mut t = Self::default();
        t.push_stream(false, stdout.0, stdout.1);
        t.end_line(false);
        t.push_stream(true, stderr.0, stderr.1);
        t
    }

    /// The tail of a step's record: [`OutputTail::of_streams`] of its `output` and `stderr`,
    /// or of the end of a stream cut at `capture.max_size` (`output_tail`, `stderr_tail`),
    /// whose lines are counted as the whole stream's (trial 82: the last lines of what was
    /// kept were shown, not the step's last ones).
    pub fn of_state(st: &awf_domain::run::StepState) -> Self {
        Self::of_cut_streams(
            (&st.output, st.output_tail.as_ref()),
            (&st.stderr, st.stderr_tail.as_ref()),
        )
    }

    /// Adds one whole stream: `kept`, or the end of the stream in `tail` when it was cut.
    fn push_stream(
        &mut self,
        is_stderr: bool,
        kept: &str,
        tail: Option<&awf_domain::run::StreamTail>,
    ) {
        match tail {
            None => self.push(is_stderr, kept.as_bytes()),
            Some(tail) => {
                let before = self.total;
                self.push(is_stderr, tail.text.as_bytes());
                let shown = self.total - before;
                let lines = usize::try_from(tail.lines).unwrap_or(usize::MAX);
                self.total = before.saturating_add(lines.max(shown));
            }
        }
    }

    /// Adds a chunk of stdout (`is_stderr` false) or stderr (invalid UTF-8 is shown as
    /// U+FFFD).
    pub fn push(&mut self, is_stderr: bool, bytes: &[u8]) {
        let which = usize::from(is_stderr);
        let newlines = bytes.iter().filter(|b| **b == b'\n').count();
        // Only the complete lines among the last TAIL_LINES can be shown: the others are
        // counted, not kept.
        let keep_from = newlines.saturating_sub(TAIL_LINES);
        for (i, seg) in bytes.split(|b| *b == b'\n').enumerate() {
            if i == newlines {
                push_capped(&mut self.partial[which], seg);
                break;
            }
            if i == 0 {
                let mut line = std::mem::take(&mut self.partial[which]);
                if i >= keep_from {
                    push_capped(&mut line, seg);
                    self.keep(&line);
                }
            } else if i >= keep_from {
                self.keep(seg);
            }
        }
        self.total += newlines;
    }

    /// Ends the unfinished line of one stream (the next chunk starts a line of its own).
    fn end_line(&mut self, is_stderr: bool) {
        let line = std::mem::take(&mut self.partial[usize::from(is_stderr)]);
        if !line.is_empty() {
            self.keep(&line);
            self.total += 1;
        }
    }

    fn keep(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let line = last_rewrite(line);
        let mut line = String::from_utf8_lossy(line).into_owned();
        if line.chars().count() > LINE_MAX {
            line = line.chars().take(LINE_MAX).collect();
            line.push('…');
        }
        self.lines.push_back(line);
        if self.lines.len() > TAIL_LINES {
            self.lines.pop_front();
        }
    }

    /// The lines to show (unfinished ones ended, trailing blank ones left out) and how many
    /// lines came before them.
    pub fn finish(mut self) -> (Vec<String>, usize) {
        self.end_line(false);
        self.end_line(true);
        while self.lines.back().is_some_and(|l| l.trim().is_empty()) {
            self.lines.pop_back();
            self.total -= 1;
        }
        let shown: Vec<String> = self.lines.into_iter().collect();
        let earlier = self.total.saturating_sub(shown.len());
        (shown, earlier)
    }
}

/// Appends `seg` to `line`, keeping at most four times [`LINE_MAX`] bytes: an unfinished
/// line can be long, only its start is shown.
/// A line rewritten in place from its start (a carriage return inside it, or one that ended
/// the bytes before `seg`) starts again: what came before the last such return is dropped,
/// so a long progress meter keeps its last state, not its first.
fn push_capped(line: &mut Vec<u8>, seg: &[u8]) {
    if line.ends_with(b"\r") && !seg.is_empty() {
        line.clear();
    }
    let without_end = seg.strip_suffix(b"\r").unwrap_or(seg);
    let seg = match without_end.iter().rposition(|b| *b == b'\r') {
        Some(cr) => {
            line.clear();
            &seg[cr + 1..]
        }
        None => seg,
    };
    let room = (LINE_MAX * 4).saturating_sub(line.len());
    line.extend_from_slice(&seg[..seg.len().min(room)]);
}

/// What a line shows after its last carriage return (the line as it was last rewritten);
/// the whole line when it has none. A `\r` that ends the line is no rewrite (`\r\n`): the
/// caller strips it first.
fn last_rewrite(line: &[u8]) -> &[u8] {
    match line.iter().rposition(|b| *b == b'\r') {
        Some(cr) => &line[cr + 1..],
        None => line,
    }
}

/// The lines of `tail` as shown under a step's line: each `{ind}│ line`, after a `{ind}│ …
/// N earlier lines` line when some were left out; empty when there is nothing to show, or
/// when it is only `reason` (the error the step's line already shows) again.
pub fn render(tail: OutputTail, reason: &str, ind: &str) -> String {
    let (lines, earlier) = tail.finish();
    if lines.is_empty() || (earlier == 0 && lines.len() == 1 && reason.ends_with(lines[0].trim())) {
        return String::new();
    }
    let mut out = String::new();
    if earlier > 0 {
        out.push_str(&format!(
            "{ind}│ … {earlier} earlier line{}\n",
            if earlier == 1 { "" } else { "s" }
        ));
    }
    for l in lines {
        out.push_str(&format!("{ind}│ {}\n", crate::style::printable_text(&l)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(t: OutputTail) -> (Vec<String>, usize) {
        t.finish()
    }

    #[test]
    fn chunks_are_lines_in_the_order_given_across_streams() {
        let mut t = OutputTail::default();
        t.push(false, b"doing\npart");
        t.push(true, b"oops\n");
        t.push(false, b"ial\nmore");
        assert_eq!(
            lines(t),
            (
                vec![
                    "doing".into(),
                    "oops".into(),
                    "partial".into(),
                    "more".into()
                ],
                0
            )
        );
    }

    #[test]
    fn only_the_last_lines_are_kept_and_the_others_counted() {
        let mut t = OutputTail::default();
        for i in 0..40 {
            t.push(false, format!("line {i}\n").as_bytes());
        }
        let many: String = (40..100).map(|i| format!("line {i}\n")).collect();
        t.push(true, many.as_bytes());
        let (shown, earlier) = lines(t);
        let want: Vec<String> = (85..100).map(|i| format!("line {i}")).collect();
        assert_eq!((shown, earlier), (want, 85));
    }

    #[test]
    fn long_lines_are_cut_and_trailing_blank_lines_left_out() {
        let mut t = OutputTail::default();
        t.push(
            false,
            format!("{}\r\n\n\n", "x".repeat(LINE_MAX + 50)).as_bytes(),
        );
        let (shown, earlier) = lines(t);
        assert_eq!(shown, vec![format!("{}…", "x".repeat(LINE_MAX))]);
        assert_eq!(earlier, 0);
    }

    #[test]
    fn a_line_rewritten_with_carriage_returns_shows_its_last_state() {
        let mut t = OutputTail::default();
        t.push(false, b"get 10%\rget 55%\rget 100%\ndone\r\n");
        // Across chunks: a return ending one chunk, the rewrite in the next; a `\r\n` cut
        // between two chunks is a line end.
        t.push(true, b"step 1/3\r");
        t.push(true, b"step 2/3\rstep 3/3");
        t.push(true, b"\r");
        t.push(true, b"\nshort\r");
        assert_eq!(
            lines(t),
            (
                vec![
                    "get 100%".into(),
                    "done".into(),
                    "step 3/3".into(),
                    "short".into()
                ],
                0
            )
        );
        // A meter far longer than the cap on an unfinished line: its last state is shown,
        // not its first.
        let mut t = OutputTail::default();
        for i in 0..2000 {
            t.push(false, format!("\r{i:>4} of 1999").as_bytes());
        }
        assert_eq!(lines(t), (vec!["1999 of 1999".into()], 0));
    }

    #[test]
    fn a_character_split_between_chunks_is_whole() {
        let mut t = OutputTail::default();
        let e = "é".as_bytes();
        t.push(false, &[b'a', e[0]]);
        t.push(false, &[e[1], b'\n']);
        assert_eq!(lines(t), (vec!["aé".into()], 0));
    }

    /// Trial 82: a stream cut at the capture cap shows its real last lines (its kept end),
    /// and the lines before them are counted as the whole stream's.
    #[test]
    fn a_cut_stream_shows_its_end_and_counts_all_its_lines() {
        let tail = awf_domain::run::StreamTail {
            text: "l98\nFINAL\n".into(),
            lines: 100,
        };
        let t = OutputTail::of_cut_streams(("l0\nl1\nl2 cut mid-li", Some(&tail)), ("", None));
        assert_eq!(lines(t), (vec!["l98".into(), "FINAL".into()], 98));
    }

    #[test]
    fn recorded_streams_give_stdout_then_stderr() {
        let t = OutputTail::of_streams("a\nb", "c\n");
        assert_eq!(lines(t), (vec!["a".into(), "b".into(), "c".into()], 0));
    }

    #[test]
    fn rendering_names_the_lines_left_out_and_skips_a_repeat_of_the_reason() {
        let mut t = OutputTail::default();
        for i in 0..17 {
            t.push(false, format!("l{i}\n").as_bytes());
        }
        let text = render(t, "exit code 4", "    ");
        assert!(
            text.starts_with("    │ … 2 earlier lines\n    │ l2\n"),
            "{text}"
        );
        assert!(text.ends_with("    │ l16\n"), "{text}");
        assert_eq!(
            render(
                OutputTail::of_streams("", "not yet\n"),
                "exit code 3: not yet",
                "  "
            ),
            ""
        );
        assert_eq!(
            render(OutputTail::of_streams("doing\n", ""), "exit code 4", "  "),
            "  │ doing\n"
        );
        assert_eq!(render(OutputTail::default(), "x", "  "), "");
        assert_eq!(
            render(OutputTail::of_streams("\u{1b}]0;t\u{7}hi\n", ""), "x", ""),
            "│ \\u{1b}]0;t\\u{7}hi\n"
        );
    }
}
