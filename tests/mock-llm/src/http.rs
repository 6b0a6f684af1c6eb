//! A deliberately small HTTP/1.1 layer over `std::net`: one request per connection
//! (every response says `Connection: close`), `Content-Length` or chunked request bodies,
//! and fixed-length or chunked (SSE) response bodies.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;

/// Largest request head or body the mock accepts, in bytes (64 MiB).
const MAX_BODY: usize = 64 * 1024 * 1024;

/// One parsed HTTP request.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    /// Upper-case method, e.g. `POST`.
    pub(crate) method: String,
    /// Path without the query string, e.g. `/v1/messages`.
    pub(crate) path: String,
    /// Raw query string without `?` (empty when absent).
    pub(crate) query: String,
    /// Headers in arrival order, names lower-cased.
    pub(crate) headers: Vec<(String, String)>,
    /// Decoded body bytes.
    pub(crate) body: Vec<u8>,
}

impl Request {
    /// First header value with this (lower-case) name.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one request from `stream`. `Ok(None)` when the peer closed before sending anything.
///
/// # Errors
/// I/O errors and malformed heads/bodies (`InvalidData`).
pub(crate) fn read_request(stream: &mut TcpStream) -> io::Result<Option<Request>> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    // Skip stray empty lines before the request line (allowed by RFC 9112).
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        if !line.trim().is_empty() {
            break;
        }
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_ascii_uppercase();
    let target = parts.next().unwrap_or_default().to_owned();
    if method.is_empty() || target.is_empty() {
        return Err(bad("malformed request line"));
    }
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_owned(), q.to_owned()),
        None => (target, String::new()),
    };
    let mut headers = Vec::new();
    let mut head_len = 0usize;
    loop {
        line.clear();
        let n = reader.read_line(&mut line)?;
        head_len += n;
        if n == 0 || head_len > MAX_BODY {
            return Err(bad("truncated request head"));
        }
        let l = line.trim_end_matches(['\r', '\n']);
        if l.is_empty() {
            break;
        }
        if let Some((name, value)) = l.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    let mut req = Request {
        method,
        path,
        query,
        headers,
        body: Vec::new(),
    };
    if req
        .header("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
    {
        stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        stream.flush()?;
    }
    let chunked = req
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    if chunked {
        req.body = read_chunked(&mut reader)?;
    } else if let Some(len) = req.header("content-length") {
        let len: usize = len
            .parse()
            .map_err(|_| bad("invalid content-length header"))?;
        if len > MAX_BODY {
            return Err(bad("request body too large"));
        }
        let mut body = vec![0u8; len];
        reader.read_exact(&mut body)?;
        req.body = body;
    }
    Ok(Some(req))
}

fn read_chunked(reader: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Err(bad("truncated chunked body"));
        }
        let size_hex = line.trim().split(';').next().unwrap_or_default();
        let size =
            usize::from_str_radix(size_hex, 16).map_err(|_| bad("invalid chunk size line"))?;
        if size == 0 {
            // Trailers until the empty line.
            loop {
                line.clear();
                if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        if body.len() + size > MAX_BODY {
            return Err(bad("request body too large"));
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        let mut crlf = [0u8; 2];
        reader.read_exact(&mut crlf)?;
    }
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_owned())
}

/// Reason phrase for the status codes the mock emits.
fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Overloaded",
        _ => "Status",
    }
}

/// How a response body is framed on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Body {
    /// `Content-Length` body.
    Full(Vec<u8>),
    /// `Transfer-Encoding: chunked` body, one chunk per element (one per SSE event).
    Chunks(Vec<Vec<u8>>),
}

/// A response ready to be written.
#[derive(Debug, Clone)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Body,
}

impl Response {
    /// A JSON response with `Content-Type: application/json`.
    pub(crate) fn json(status: u16, value: &serde_json::Value) -> Self {
        Self {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: Body::Full(value.to_string().into_bytes()),
        }
    }

    /// A `text/event-stream` response, one chunk per pre-framed event.
    pub(crate) fn sse(events: Vec<String>) -> Self {
        Self {
            status: 200,
            headers: vec![
                ("Content-Type".into(), "text/event-stream".into()),
                ("Cache-Control".into(), "no-cache".into()),
            ],
            body: Body::Chunks(events.into_iter().map(String::into_bytes).collect()),
        }
    }
}

/// Writes `resp` and flushes. `head_only` omits the body (HEAD requests).
///
/// # Errors
/// I/O errors from the socket.
pub(crate) fn write_response(
    stream: &mut TcpStream,
    resp: &Response,
    head_only: bool,
) -> io::Result<()> {
    let mut head = format!("HTTP/1.1 {} {}\r\n", resp.status, reason(resp.status));
    for (n, v) in &resp.headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("Connection: close\r\n");
    match &resp.body {
        Body::Full(b) => head.push_str(&format!("Content-Length: {}\r\n\r\n", b.len())),
        Body::Chunks(_) => head.push_str("Transfer-Encoding: chunked\r\n\r\n"),
    }
    stream.write_all(head.as_bytes())?;
    if !head_only {
        match &resp.body {
            Body::Full(b) => stream.write_all(b)?,
            Body::Chunks(chunks) => {
                for c in chunks.iter().filter(|c| !c.is_empty()) {
                    stream.write_all(format!("{:x}\r\n", c.len()).as_bytes())?;
                    stream.write_all(c)?;
                    stream.write_all(b"\r\n")?;
                    stream.flush()?;
                }
                stream.write_all(b"0\r\n\r\n")?;
            }
        }
    }
    stream.flush()
}
