//! Capturing one output stream: bytes kept in full, live UTF-8 chunks for the callback.

use awf_domain::event::OutputStream;
use awf_domain::ports::exec::OutputCallback;

/// Smallest free space offered to one `read`; below it the buffer grows (doubling).
const MIN_READ_SPACE: usize = 8 * 1024;

/// All bytes read from one pipe, plus how far they have been handed to the callback.
///
/// Chunks given to the callback never split a UTF-8 character: an incomplete sequence at the
/// end of a read is held back until the next read (or EOF). Invalid bytes become U+FFFD exactly
/// as [`String::from_utf8_lossy`] does, so the concatenated chunks equal the final text.
#[derive(Debug)]
pub(crate) struct Capture {
    stream: OutputStream,
    buf: Vec<u8>,
    /// Bytes `buf[..emitted]` have been passed to the callback.
    emitted: usize,
}

impl Capture {
    pub(crate) fn new(stream: OutputStream) -> Self {
        Self {
            stream,
            buf: Vec::new(),
            emitted: 0,
        }
    }

    /// The buffer to read into, with at least [`MIN_READ_SPACE`] bytes spare.
    pub(crate) fn read_target(&mut self) -> &mut Vec<u8> {
        if self.buf.capacity() - self.buf.len() < MIN_READ_SPACE {
            self.buf.reserve(MIN_READ_SPACE.max(self.buf.len()));
        }
        &mut self.buf
    }

    /// Hands the newly read bytes to `cb`, holding back an incomplete trailing character unless
    /// `eof` (then it becomes U+FFFD).
    pub(crate) fn emit(&mut self, cb: &OutputCallback, eof: bool) {
        loop {
            let rest = &self.buf[self.emitted..];
            if rest.is_empty() {
                return;
            }
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    cb(self.stream, s);
                    self.emitted = self.buf.len();
                    return;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    if let Ok(s) = std::str::from_utf8(&rest[..valid]) {
                        if !s.is_empty() {
                            cb(self.stream, s);
                        }
                    }
                    match e.error_len() {
                        Some(bad) => {
                            cb(self.stream, "\u{FFFD}");
                            self.emitted += valid + bad;
                        }
                        None if eof => {
                            cb(self.stream, "\u{FFFD}");
                            self.emitted = self.buf.len();
                            return;
                        }
                        None => {
                            self.emitted += valid;
                            return;
                        }
                    }
                }
            }
        }
    }

    /// The whole stream as text (UTF-8, lossy); no copy when it is valid UTF-8.
    pub(crate) fn into_string(self) -> String {
        match String::from_utf8(self.buf) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::Mutex;

    use super::*;

    /// Feeds `bytes` in pieces of `step` bytes; returns (chunks seen, final text).
    fn feed(bytes: &[u8], step: usize) -> (Vec<String>, String) {
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = Arc::clone(&seen);
        let cb: OutputCallback = Arc::new(move |stream, s| {
            assert_eq!(stream, OutputStream::Stdout);
            if let Ok(mut v) = sink.lock() {
                v.push(s.to_owned());
            }
        });
        let mut cap = Capture::new(OutputStream::Stdout);
        for piece in bytes.chunks(step) {
            cap.read_target().extend_from_slice(piece);
            cap.emit(&cb, false);
        }
        cap.emit(&cb, true);
        let chunks = seen.lock().map(|v| v.clone()).unwrap_or_default();
        (chunks, cap.into_string())
    }

    #[test]
    fn multibyte_chars_are_never_split() {
        let text = "héllo wörld € 𝄞 ✓";
        for step in 1..=5 {
            let (chunks, all) = feed(text.as_bytes(), step);
            assert_eq!(all, text);
            assert_eq!(chunks.concat(), text, "step {step}");
            assert!(
                chunks.iter().all(|c| !c.contains('\u{FFFD}')),
                "step {step}"
            );
        }
    }

    #[test]
    fn byte_by_byte_gives_whole_characters() {
        let (chunks, _) = feed("a€b".as_bytes(), 1);
        assert_eq!(chunks, vec!["a", "€", "b"]);
    }

    #[test]
    fn invalid_bytes_match_from_utf8_lossy() {
        let cases: &[&[u8]] = &[
            b"\xffabc",
            b"abc\xff",
            b"ab\xe2\x82",              // truncated euro sign at EOF
            b"ab\xe2\x82x\xe2\x82\xac", // truncated then valid
            b"\xf0\x9d\x84",            // truncated 4-byte at EOF
            b"\xc0\x80\xed\xa0\x80z",   // overlong and surrogate
            b"",
        ];
        for bytes in cases {
            let want = String::from_utf8_lossy(bytes).into_owned();
            for step in 1..=4 {
                let (chunks, all) = feed(bytes, step);
                assert_eq!(all, want, "{bytes:?}");
                assert_eq!(chunks.concat(), want, "{bytes:?} step {step}");
            }
        }
    }

    #[test]
    fn empty_stream_gives_no_chunks() {
        let (chunks, all) = feed(b"", 1);
        assert!(chunks.is_empty());
        assert_eq!(all, "");
    }
}
