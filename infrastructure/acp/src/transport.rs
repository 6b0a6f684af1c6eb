//! The capped line transport: newline-delimited JSON-RPC frames in, frames out through one
//! writer (so frames never interleave and a turn's updates keep their order before its
//! response). Source: shared/spec/acp.md §1.1, §2.10, §7 ("Transport").

use serde_json::Value;
use tokio::io::AsyncBufRead;
use tokio::io::AsyncBufReadExt;
use tokio::io::AsyncWrite;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use awf_domain::mask::Masker;

/// One read from the input.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A complete line (without its `\n`; a trailing `\r` removed).
    Text(String),
    /// A line longer than the cap: it was read to its end and dropped.
    TooLong,
    /// A line that is not UTF-8.
    NotUtf8,
    /// End of input.
    Eof,
}

/// Reads the next line of at most `cap` bytes (blank lines skipped). A longer line is consumed
/// to its newline without being kept, so memory stays bounded.
///
/// # Errors
/// The reader's I/O error.
pub async fn read_line<R: AsyncBufRead + Unpin>(r: &mut R, cap: usize) -> std::io::Result<Line> {
    loop {
        let mut buf: Vec<u8> = Vec::new();
        let mut too_long = false;
        let mut saw_any = false;
        loop {
            let chunk = r.fill_buf().await?;
            if chunk.is_empty() {
                if !saw_any {
                    return Ok(Line::Eof);
                }
                break;
            }
            saw_any = true;
            let (take, done) = match memchr_nl(chunk) {
                Some(i) => (i, true),
                None => (chunk.len(), false),
            };
            if !too_long {
                if buf.len() + take > cap {
                    too_long = true;
                    buf = Vec::new();
                } else {
                    buf.extend_from_slice(&chunk[..take]);
                }
            }
            r.consume(if done { take + 1 } else { take });
            if done {
                break;
            }
        }
        if too_long {
            return Ok(Line::TooLong);
        }
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            if saw_any {
                continue;
            }
            return Ok(Line::Eof);
        }
        return Ok(match String::from_utf8(buf) {
            Ok(s) => Line::Text(s),
            Err(_) => Line::NotUtf8,
        });
    }
}

fn memchr_nl(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == b'\n')
}

/// Where frames go: one channel to the writer task.
#[derive(Clone, Debug)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<Value>,
}

impl Outbox {
    /// Queues a frame (dropped when the writer is gone: the connection is closing).
    pub fn send(&self, frame: Value) {
        if !frame.is_null() {
            let _ = self.tx.send(frame);
        }
    }

    /// Ends the writer after the frames queued so far (later ones are dropped).
    pub fn close(&self) {
        let _ = self.tx.send(Value::Null);
    }
}

/// Starts the writer: every frame queued on the returned [`Outbox`] is masked (every string
/// in it), serialized on one line and written, in queue order. The task ends when every
/// outbox is dropped or [`Outbox::close`] is called, after writing what was queued.
pub fn writer<W: AsyncWrite + Unpin + Send + 'static>(
    mut w: W,
    masker: std::sync::Arc<std::sync::RwLock<Masker>>,
) -> (Outbox, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
    let task = tokio::spawn(async move {
        while let Some(mut frame) = rx.recv().await {
            if frame.is_null() {
                // The end: everything queued before it is written.
                break;
            }
            if let Ok(m) = masker.read() {
                m.mask_json(&mut frame);
            }
            let mut line = match serde_json::to_vec(&frame) {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!(target: "awf::acp", error = %e, "frame not serializable");
                    continue;
                }
            };
            line.push(b'\n');
            if w.write_all(&line).await.is_err() || w.flush().await.is_err() {
                tracing::debug!(target: "awf::acp", "stdout closed");
                break;
            }
        }
    });
    (Outbox { tx }, task)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_over_the_cap_are_dropped_and_reading_goes_on() {
        let long = "x".repeat(100);
        let input = format!("{{\"a\":1}}\r\n\n  \n{long}\n{{\"b\":2}}");
        let mut r = tokio::io::BufReader::with_capacity(8, input.as_bytes());
        assert_eq!(
            read_line(&mut r, 50).await.unwrap(),
            Line::Text("{\"a\":1}".into())
        );
        assert_eq!(read_line(&mut r, 50).await.unwrap(), Line::TooLong);
        assert_eq!(
            read_line(&mut r, 50).await.unwrap(),
            Line::Text("{\"b\":2}".into())
        );
        assert_eq!(read_line(&mut r, 50).await.unwrap(), Line::Eof);
    }

    #[tokio::test]
    async fn a_line_exactly_at_the_cap_is_kept() {
        let input = format!("{}\n", "y".repeat(50));
        let mut r = tokio::io::BufReader::with_capacity(7, input.as_bytes());
        assert!(matches!(read_line(&mut r, 50).await.unwrap(), Line::Text(s) if s.len() == 50));
    }

    #[tokio::test]
    async fn frames_are_masked_and_written_in_order() {
        let (client, server) = tokio::io::duplex(4096);
        let mut m = Masker::default();
        m.add("s3cr3t-value");
        let (out, task) = writer(server, std::sync::Arc::new(std::sync::RwLock::new(m)));
        out.send(serde_json::json!({"n": 1, "t": "a s3cr3t-value b"}));
        out.send(serde_json::json!({"n": 2}));
        drop(out);
        task.await.unwrap();
        let mut r = tokio::io::BufReader::new(client);
        let mut s = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut r, &mut s)
            .await
            .unwrap();
        assert_eq!(s, "{\"n\":1,\"t\":\"a *** b\"}\n{\"n\":2}\n");
    }

    #[tokio::test]
    async fn close_ends_the_writer_after_what_was_queued_while_outboxes_live() {
        let (client, server) = tokio::io::duplex(4096);
        let (out, task) = writer(server, std::sync::Arc::default());
        let keep = out.clone();
        out.send(serde_json::json!({"n": 1}));
        out.close();
        out.send(serde_json::json!({"n": 2}));
        tokio::time::timeout(std::time::Duration::from_secs(30), task)
            .await
            .expect("the writer ends though an outbox is still alive")
            .unwrap();
        drop(keep);
        let mut s = String::new();
        let mut r = tokio::io::BufReader::new(client);
        tokio::io::AsyncReadExt::read_to_string(&mut r, &mut s)
            .await
            .unwrap();
        assert_eq!(s, "{\"n\":1}\n");
    }
}

/// A frame parsed from one line, refusing a repeated key in any object (serde_json keeps the
/// last one silently; JSON-RPC leaves a duplicated `"id"` ambiguous, so awf answers it with
/// `-32600`). Source: shared/spec/acp.md §1.1.
///
/// # Errors
/// `Err(Strict::Syntax(e))` for text that is not JSON (answer `-32700`),
/// `Err(Strict::Duplicate(key))` for a repeated key (answer `-32600`).
pub fn parse_strict(text: &str) -> Result<serde_json::Value, Strict> {
    awf_domain::json::parse_unique(text.as_bytes()).map_err(|e| match e {
        awf_domain::json::NotUnique::Repeated(r) => Strict::Duplicate(format!("{:?}", r.key)),
        awf_domain::json::NotUnique::Json(e) => Strict::Syntax(e),
    })
}

/// Why [`parse_strict`] refused a line.
#[derive(Debug)]
pub enum Strict {
    /// Not JSON.
    Syntax(serde_json::Error),
    /// An object repeats this key.
    Duplicate(String),
}

#[cfg(test)]
mod strict_tests {
    use super::*;

    #[test]
    fn a_repeated_key_is_refused_at_any_depth() {
        assert!(matches!(
            parse_strict(r#"{"id":1,"id":2}"#),
            Err(Strict::Duplicate(k)) if k == "\"id\""
        ));
        assert!(matches!(
            parse_strict(r#"{"params":{"a":[{"x":1,"x":1}]}}"#),
            Err(Strict::Duplicate(_))
        ));
        assert!(matches!(parse_strict("{\"a\":"), Err(Strict::Syntax(_))));
        let v = parse_strict(r#"{"a":[1,-2,0.5,"s",null,true,{"b":{}}]}"#).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"a":[1,-2,0.5,"s",null,true,{"b":{}}]})
        );
    }
}
