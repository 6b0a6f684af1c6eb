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
}

impl<R: BufRead> LineReader<R> {
    pub(crate) fn new(r: R, cap: usize) -> Self {
        Self {
            r,
            cap,
            buf: Vec::new(),
        }
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
            self.r.consume(if done { take + 1 } else { take });
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
