//! Streaming, memory-bounded line reading and UTF-8-safe cuts.

use std::io;
use std::io::BufRead;
use std::io::Read;

/// Bytes looked at for binary detection (a NUL among them means binary).
pub(crate) const SNIFF: usize = 8 * 1024;

/// One line as read: at most `cap` bytes of it kept, without its `\n` (nor a `\r` before it).
pub(crate) struct Line<'a> {
    pub(crate) bytes: &'a [u8],
    /// The line was longer than the bytes kept.
    pub(crate) cut: bool,
}

/// Reads lines keeping at most `cap` bytes of each; the rest of a long line is skipped
/// without being stored, so memory stays bounded whatever the input.
pub(crate) struct LineReader<R> {
    r: R,
    cap: usize,
    buf: Vec<u8>,
    /// Bytes consumed from `r` so far.
    pos: u64,
}

impl<R: BufRead> LineReader<R> {
    pub(crate) fn new(r: R, cap: usize) -> Self {
        Self {
            r,
            cap,
            buf: Vec::new(),
            pos: 0,
        }
    }

    /// Bytes consumed from the input so far: where the next line starts.
    pub(crate) fn position(&self) -> u64 {
        self.pos
    }

    /// The next line, `None` at the end of input.
    pub(crate) fn next_line(&mut self) -> io::Result<Option<Line<'_>>> {
        self.buf.clear();
        let mut any = false;
        let mut cut = false;
        loop {
            let avail = match self.r.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if avail.is_empty() {
                if !any {
                    return Ok(None);
                }
                break;
            }
            any = true;
            let (take, done) = match memchr::memchr(b'\n', avail) {
                Some(i) => (i, true),
                None => (avail.len(), false),
            };
            let room = self.cap.saturating_sub(self.buf.len());
            if take > room {
                cut = true;
            }
            self.buf.extend_from_slice(&avail[..take.min(room)]);
            let used = if done { take + 1 } else { take };
            self.r.consume(used);
            self.pos += used as u64;
            if done {
                break;
            }
        }
        if !cut && self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        Ok(Some(Line {
            bytes: &self.buf,
            cut,
        }))
    }
}

impl<R: BufRead> LineReader<R> {
    /// Skips up to `n` lines without keeping any of their bytes (a last line without a line
    /// break counts); returns how many there were.
    pub(crate) fn skip_lines(&mut self, n: u64) -> io::Result<u64> {
        let mut skipped = 0;
        // Bytes of a line begun but not yet ended.
        let mut partial = false;
        while skipped < n {
            let avail = match self.r.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if avail.is_empty() {
                if partial {
                    skipped += 1;
                }
                break;
            }
            let mut used = avail.len();
            partial = true;
            for i in memchr::memchr_iter(b'\n', avail) {
                skipped += 1;
                if skipped == n {
                    used = i + 1;
                    partial = false;
                    break;
                }
            }
            if used == avail.len() && avail.last() == Some(&b'\n') {
                partial = false;
            }
            self.r.consume(used);
            self.pos += used as u64;
        }
        Ok(skipped)
    }
}

/// Appends `bytes` to `out` as [`text`] renders them, without an intermediate copy when the
/// line is valid UTF-8, short enough and holds no secret (the common case). Returns whether
/// it was cut and whether invalid bytes were met.
pub(crate) fn push_text(
    out: &mut String,
    bytes: &[u8],
    max_chars: usize,
    truncated: bool,
    masker: &awf_domain::mask::Masker,
) -> (bool, bool) {
    if !truncated
        && bytes.len() <= max_chars
        && let Ok(s) = std::str::from_utf8(bytes)
        && let std::borrow::Cow::Borrowed(s) = masker.mask(s)
    {
        out.push_str(s);
        return (false, false);
    }
    let (t, cut, bad) = text(bytes, max_chars, truncated, masker);
    out.push_str(&t);
    (cut, bad)
}

/// Appends `n` right-aligned in six columns (wider when it has more digits), as `cat -n`.
pub(crate) fn push_line_no(out: &mut String, n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut v = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let len = digits.len() - i;
    for _ in len..6 {
        out.push(' ');
    }
    for &d in &digits[i..] {
        out.push(char::from(d));
    }
}

/// Reads up to [`SNIFF`] bytes from the start of `r` (fewer only at the end of input).
pub(crate) fn sniff(r: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(SNIFF);
    r.take(SNIFF as u64).read_to_end(&mut head)?;
    Ok(head)
}

/// Whether `head` (the start of a file) looks binary: it holds a NUL byte.
pub(crate) fn is_binary(head: &[u8]) -> bool {
    head.contains(&0)
}

/// `bytes` as text: invalid UTF-8 shown as U+FFFD, at most `max_chars` characters (cut on
/// a character boundary). Returns the text, whether it was cut, and whether invalid bytes
/// were met (an incomplete character at the end of a `truncated` input does not count).
/// The secrets of `masker` are replaced by `***` before the cut, so none shows in part.
pub(crate) fn text(
    bytes: &[u8],
    max_chars: usize,
    truncated: bool,
    masker: &awf_domain::mask::Masker,
) -> (String, bool, bool) {
    let invalid = match std::str::from_utf8(bytes) {
        Ok(_) => false,
        Err(e) => !(truncated && e.error_len().is_none()),
    };
    let lossy = String::from_utf8_lossy(bytes);
    // Masked before the cut: a secret straddling it must not leave its head.
    let s = masker.mask(&lossy);
    match s.char_indices().nth(max_chars) {
        Some((i, _)) => (s[..i].to_owned(), true, invalid),
        None => {
            let mut owned = s.into_owned();
            if truncated && !invalid && owned.ends_with('\u{FFFD}') {
                // A character split by the byte cap, not an invalid byte of the file.
                owned.pop();
            }
            (owned, truncated, invalid)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_cut_and_crlf_stripped() {
        let data = b"ab\r\ncdefgh\nend";
        let mut r = LineReader::new(&data[..], 3);
        let mut got = Vec::new();
        while let Some(l) = r.next_line().ok().flatten() {
            got.push((String::from_utf8_lossy(l.bytes).into_owned(), l.cut));
        }
        assert_eq!(
            got,
            [
                ("ab".to_owned(), false),
                ("cde".to_owned(), true),
                ("end".to_owned(), false)
            ]
        );
    }

    #[test]
    fn skip_lines_counts_like_next_line() {
        for data in [&b"a\nb\nc"[..], b"a\nb\nc\n", b"", b"\n\n", b"x"] {
            let total = {
                let mut r = LineReader::new(data, 8);
                let mut n = 0;
                while r.next_line().ok().flatten().is_some() {
                    n += 1;
                }
                n
            };
            for skip in 0..=total + 1 {
                // A tiny buffer, so that lines straddle refills.
                let mut r = LineReader::new(std::io::BufReader::with_capacity(1, data), 8);
                let got = r.skip_lines(skip).unwrap();
                assert_eq!(got, skip.min(total), "{data:?} skip {skip}");
                let mut rest = 0;
                while r.next_line().ok().flatten().is_some() {
                    rest += 1;
                }
                assert_eq!(got + rest, total, "{data:?} skip {skip}");
            }
        }
    }

    #[test]
    fn line_numbers_are_right_aligned_in_six_columns() {
        let mut s = String::new();
        for n in [0, 7, 123_456, 1_234_567] {
            push_line_no(&mut s, n);
            s.push('|');
        }
        assert_eq!(s, "     0|     7|123456|1234567|");
    }

    #[test]
    fn push_text_matches_text() {
        let m = awf_domain::mask::Masker::from_named([("API_TOKEN", "s3cr3tvalue")]);
        for (bytes, max, trunc) in [
            (&b"plain"[..], 10, false),
            (b"has s3cr3tvalue inside", 100, false),
            (b"a\xffb", 10, false),
            ("aéb".as_bytes(), 2, false),
            (b"long line here", 4, false),
            (b"cut", 10, true),
        ] {
            let mut out = String::from("> ");
            let (cut, bad) = push_text(&mut out, bytes, max, trunc, &m);
            let (t, c, b) = text(bytes, max, trunc, &m);
            assert_eq!((out, cut, bad), (format!("> {t}"), c, b), "{bytes:?}");
        }
    }

    #[test]
    fn text_cuts_on_char_boundaries() {
        // "é" is two bytes; a byte cap in its middle is not an invalid byte.
        let bytes = "aé".as_bytes();
        let m = awf_domain::mask::Masker::default();
        assert_eq!(
            text(&bytes[..2], 10, true, &m),
            ("a".to_owned(), true, false)
        );
        assert_eq!(
            text("aéb".as_bytes(), 2, false, &m),
            ("aé".to_owned(), true, false)
        );
        assert_eq!(
            text(b"a\xffb", 10, false, &m),
            ("a\u{FFFD}b".to_owned(), false, true)
        );
    }
}
