//! A small HTTP/1.1 server on 127.0.0.1 for the `http.request` tests: one thread per
//! connection, every request recorded, each answered by the test's own route function
//! (`Connection: close`).

#![allow(clippy::unwrap_used)]

use std::io::BufRead;
use std::io::BufReader;
use std::io::Read;
use std::io::Write;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::Mutex;

/// One request as the server saw it: method, path (with its query), headers (names lower
/// case, in order), body (lossy UTF-8).
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Seen {
    /// The values of header `name` (lower case), in order.
    pub fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// What a route answers: a status, extra header lines (each ending in `\r\n`) and a text body.
pub struct Reply {
    pub status: u16,
    pub headers: String,
    pub body: String,
}

impl Reply {
    /// `status` with `body` and no extra header.
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Self {
            status,
            headers: String::new(),
            body: body.into(),
        }
    }
}

/// The running server (it lives until the test process ends).
pub struct Server {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    /// Starts a server answering every request with `route`.
    pub fn start(route: fn(&Seen) -> Reply) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let log = Arc::clone(&seen);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let log = Arc::clone(&log);
                std::thread::spawn(move || serve(stream, &log, route));
            }
        });
        Self { base, seen }
    }

    /// `base` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Every request so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve(mut stream: std::net::TcpStream, log: &Mutex<Vec<Seen>>, route: fn(&Seen) -> Reply) {
    let mut r = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if r.read_line(&mut line).is_err() {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut headers = Vec::new();
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).is_err() {
            return;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap_or(0);
            }
            headers.push((k.to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let mut body = vec![0; len];
    if r.read_exact(&mut body).is_err() {
        return;
    }
    let seen = Seen {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    log.lock().unwrap().push(seen.clone());
    let reply = route(&seen);
    let _ = write!(
        stream,
        "HTTP/1.1 {} X\r\nContent-Length: {}\r\n{}Content-Type: text/plain\r\nConnection: close\r\n\r\n{}",
        reply.status,
        reply.body.len(),
        reply.headers,
        reply.body
    );
}
