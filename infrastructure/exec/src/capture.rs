//! Capturing one output stream: the first bytes kept (up to a cap), every byte handed to the
//! live callback exactly as read.

use std::io;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::task::Context;
use std::task::Poll;

use awf_domain::event::OutputStream;
use awf_domain::ports::exec::OutputCallback;
use tokio::io::AsyncRead;
use tokio::io::ReadBuf;
use tokio::net::unix::pipe::Receiver;
use tokio::process::ChildStderr;
use tokio::process::ChildStdout;

/// One output pipe of a child (its read end), registered with the runtime.
#[derive(Debug)]
pub(crate) enum PipeReader {
    /// The stdout of a child started by std's `Command` (through tokio).
    Stdout(ChildStdout),
    /// The stderr of a child started by std's `Command` (through tokio).
    Stderr(ChildStderr),
    /// A pipe of a child started by `posix_spawn` (`spawn::Prepared::spawn`): created
    /// non-blocking and registered before the spawn.
    Pipe(Receiver),
}

impl PipeReader {
    /// The pipe's descriptor, taken from the runtime (still non-blocking).
    ///
    /// # Errors
    /// Deregistering it from the runtime failed.
    pub(crate) fn into_owned_fd(self) -> io::Result<OwnedFd> {
        match self {
            Self::Stdout(p) => p.into_owned_fd(),
            Self::Stderr(p) => p.into_owned_fd(),
            Self::Pipe(p) => p.into_nonblocking_fd(),
        }
    }
}

impl AsyncRead for PipeReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Stdout(p) => Pin::new(p).poll_read(cx, buf),
            Self::Stderr(p) => Pin::new(p).poll_read(cx, buf),
            Self::Pipe(p) => Pin::new(p).poll_read(cx, buf),
        }
    }
}

/// Size of the buffer one `read` fills once a stream has filled a smaller one.
const READ_CHUNK: usize = 64 * 1024;

/// Size of the buffer of a stream's first reads: most steps print a few lines, and a fresh
/// 64 KiB buffer per stream and step cost an allocation that the allocator gave back to the
/// system and took again (page faults) at every step.
const FIRST_CHUNK: usize = 4 * 1024;

/// What has been read from one pipe: the first `limit` bytes kept, the rest only counted.
///
/// The callback gets every byte read, unchanged and in order (chunks may split a UTF-8
/// character; the callback's owner decodes). The kept bytes become text only at the end
/// ([`Capture::into_string`]).
#[derive(Debug)]
pub(crate) struct Capture {
    stream: OutputStream,
    /// The first bytes of the stream, at most `limit`.
    kept: Vec<u8>,
    limit: usize,
    /// Bytes were dropped because `kept` was full.
    truncated: bool,
    /// The buffer each read fills; emptied after every read.
    scratch: Vec<u8>,
    /// A read filled the buffer: the stream is large, later reads get [`READ_CHUNK`].
    large: bool,
}

impl Capture {
    /// A capture keeping at most `limit` bytes.
    pub(crate) fn new(stream: OutputStream, limit: usize) -> Self {
        Self {
            stream,
            kept: Vec::new(),
            limit,
            truncated: false,
            scratch: Vec::new(),
            large: false,
        }
    }

    /// The (empty) buffer to read into, with room for one chunk ([`FIRST_CHUNK`] until a
    /// read fills it, then [`READ_CHUNK`]).
    pub(crate) fn read_target(&mut self) -> &mut Vec<u8> {
        self.scratch.clear();
        self.scratch
            .reserve(if self.large { READ_CHUNK } else { FIRST_CHUNK });
        &mut self.scratch
    }

    /// Takes the bytes just read into the read target: keeps what fits under the limit and,
    /// with a callback, hands them all on as they are.
    pub(crate) fn accept(&mut self, cb: Option<&OutputCallback>) {
        if self.scratch.len() >= FIRST_CHUNK {
            self.large = true;
        }
        let room = self.limit.saturating_sub(self.kept.len());
        let keep = room.min(self.scratch.len());
        if keep < self.scratch.len() {
            self.truncated = true;
        }
        self.kept.extend_from_slice(&self.scratch[..keep]);
        if let Some(cb) = cb
            && !self.scratch.is_empty()
        {
            cb(self.stream, &self.scratch);
        }
        self.scratch.clear();
    }

    /// Whether bytes were dropped at the limit.
    pub(crate) fn truncated(&self) -> bool {
        self.truncated
    }

    /// The kept bytes as text (UTF-8, lossy); no copy when valid. When the stream was cut,
    /// a character split by the cut is dropped rather than shown as U+FFFD.
    pub(crate) fn into_string(mut self) -> String {
        if self.truncated {
            let cut = incomplete_tail(&self.kept);
            self.kept.truncate(self.kept.len() - cut);
        }
        match String::from_utf8(self.kept) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }
}

/// Length of an incomplete UTF-8 sequence at the end of `b` (0 when it ends on a boundary).
fn incomplete_tail(b: &[u8]) -> usize {
    for back in 1..=3.min(b.len()) {
        let c = b[b.len() - back];
        if c & 0xC0 == 0x80 {
            continue; // continuation byte: look further back for the lead
        }
        let need = match c {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return 0,
        };
        return if need > back { back } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::Mutex;

    use super::*;

    /// Feeds `bytes` in pieces of `step` bytes; returns (chunks seen, final text).
    fn feed(bytes: &[u8], step: usize) -> (Vec<Vec<u8>>, String) {
        let seen = Arc::new(Mutex::new(Vec::<Vec<u8>>::new()));
        let sink = Arc::clone(&seen);
        let cb: OutputCallback = Arc::new(move |stream, s| {
            assert_eq!(stream, OutputStream::Stdout);
            if let Ok(mut v) = sink.lock() {
                v.push(s.to_owned());
            }
        });
        let mut cap = Capture::new(OutputStream::Stdout, usize::MAX);
        for piece in bytes.chunks(step) {
            cap.read_target().extend_from_slice(piece);
            cap.accept(Some(&cb));
        }
        let chunks = seen.lock().map(|v| v.clone()).unwrap_or_default();
        (chunks, cap.into_string())
    }

    #[test]
    fn callback_gets_the_bytes_exactly() {
        let cases: &[&[u8]] = &[
            "héllo wörld € 𝄞 ✓".as_bytes(),
            b"A\xffB",
            b"ab\xe2\x82",
            b"\xc0\x80\xed\xa0\x80z",
        ];
        for bytes in cases {
            for step in 1..=4 {
                let (chunks, all) = feed(bytes, step);
                assert_eq!(chunks.concat(), *bytes, "step {step}");
                assert_eq!(all, String::from_utf8_lossy(bytes), "step {step}");
            }
        }
    }

    /// Reads start with a small buffer and get the large one once a read filled it.
    #[test]
    fn the_read_buffer_grows_once_a_read_fills_it() {
        let mut cap = Capture::new(OutputStream::Stdout, usize::MAX);
        let small = cap.read_target().capacity();
        assert!((FIRST_CHUNK..READ_CHUNK).contains(&small), "{small}");
        cap.read_target().extend_from_slice(b"a few bytes\n");
        cap.accept(None);
        assert!(cap.read_target().capacity() < READ_CHUNK);
        let full = vec![b'x'; small];
        cap.read_target().extend_from_slice(&full);
        cap.accept(None);
        assert!(cap.read_target().capacity() >= READ_CHUNK);
        assert_eq!(cap.into_string().len(), 12 + small);
    }

    #[test]
    fn empty_stream_gives_no_chunks() {
        let (chunks, all) = feed(b"", 1);
        assert!(chunks.is_empty());
        assert_eq!(all, "");
    }

    #[test]
    fn output_over_the_limit_is_counted_not_kept() {
        let seen = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&seen);
        let cb: OutputCallback = Arc::new(move |_, s| {
            if let Ok(mut v) = sink.lock() {
                v.push_str(&String::from_utf8_lossy(s));
            }
        });
        let mut cap = Capture::new(OutputStream::Stdout, 5);
        for piece in ["abc", "d€f", "ghi"] {
            cap.read_target().extend_from_slice(piece.as_bytes());
            cap.accept(Some(&cb));
        }
        assert!(cap.truncated());
        assert_eq!(
            seen.lock().map(|s| s.clone()).unwrap_or_default(),
            "abcd€fghi"
        );
        // "abcd" plus the first byte of "€": the split character is dropped.
        assert_eq!(cap.into_string(), "abcd");
        let mut cap = Capture::new(OutputStream::Stdout, 3);
        cap.read_target().extend_from_slice(b"abc");
        cap.accept(None);
        assert!(!cap.truncated());
        cap.read_target().extend_from_slice(b"d");
        cap.accept(None);
        assert!(cap.truncated());
        assert_eq!(cap.into_string(), "abc");
    }

    #[test]
    fn incomplete_tail_lengths() {
        assert_eq!(incomplete_tail(b""), 0);
        assert_eq!(incomplete_tail(b"ab"), 0);
        assert_eq!(incomplete_tail("a€".as_bytes()), 0);
        assert_eq!(incomplete_tail(b"a\xe2"), 1);
        assert_eq!(incomplete_tail(b"a\xe2\x82"), 2);
        assert_eq!(incomplete_tail(b"\xf0\x9d\x84"), 3);
        assert_eq!(incomplete_tail("𝄞".as_bytes()), 0);
        assert_eq!(incomplete_tail(b"\x82\x82\x82"), 0);
    }
}
