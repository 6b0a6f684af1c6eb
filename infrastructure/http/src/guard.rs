//! Cross-site request forgery and DNS rebinding guards, and the URI length cap: a layer in
//! front of every route (README "awf serve", security).
//!
//! - An HTTP/1.1 request without a `Host` header, or with more than one → 400 (RFC 9112
//!   §3.2: a server MUST answer such a request 400); HTTP/1.0 needs none.
//! - A request target longer than [`URI_LIMIT`] bytes → 414.
//! - Bound to loopback: a `Host` whose name is not `127.0.0.1`, `localhost`, `[::1]`, the
//!   bound address or the host of a `--cors-origin`, or whose port is not the bound one →
//!   403 (a page of another name resolving to 127.0.0.1 cannot reach the API).
//! - `POST`, `PUT`, `PATCH`, `DELETE` with an `Origin` that is neither the server's own
//!   (`http://` + the `Host`) nor a `--cors-origin` → 403.
//! - `POST`, `PUT`, `PATCH` with a body (or any `Content-Type`) must say `application/json`
//!   (or a `+json` type) → 415: the "simple" types a browser sends cross-origin without a
//!   preflight (`text/plain`, forms) are refused.
//! - `POST`, `PUT`, `PATCH` with a `Content-Encoding` other than `identity` (gzip, br, …) →
//!   415: no content coding is decoded, and a compressed body is not read as if plain.

use std::net::SocketAddr;
use std::sync::Arc;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use axum::http::HeaderMap;
use axum::http::HeaderValue;
use axum::http::Method;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;

use crate::problem::Problem;

/// The longest request target (path and query) answered: 8 KiB; longer → 414. (hyper
/// itself answers a bare 414 above about 64 KiB, before any layer sees the request.)
pub const URI_LIMIT: usize = 8 << 10;

/// What the guard checks against: the bound address (`None`: unknown, loopback assumed) and
/// the `--cors-origin` list.
#[derive(Debug, Clone)]
pub(crate) struct Guard {
    pub(crate) local: Option<SocketAddr>,
    pub(crate) cors_origins: Vec<HeaderValue>,
}

fn refuse(status: StatusCode, code: ErrorCode, message: String, hint: &str) -> Response {
    Problem::with_status(status, AwfError::new(code, message).with_hint(hint)).into_response()
}

/// `host[:port]` split into its lower-case name (brackets kept for IPv6) and port.
fn split_host(authority: &str) -> (String, Option<&str>) {
    let a = authority.trim();
    if let Some(end) = a.find(']') {
        let (name, rest) = a.split_at(end + 1);
        return (name.to_ascii_lowercase(), rest.strip_prefix(':'));
    }
    match a.rsplit_once(':') {
        Some((name, port)) => (name.to_ascii_lowercase(), Some(port)),
        None => (a.to_ascii_lowercase(), None),
    }
}

impl Guard {
    /// Whether `authority` (a `Host` value) names this server.
    pub(crate) fn host_ok(&self, authority: &str) -> bool {
        let (name, port) = split_host(authority);
        for o in &self.cors_origins {
            let Ok(o) = o.to_str() else { continue };
            let rest = o
                .strip_prefix("http://")
                .or_else(|| o.strip_prefix("https://"))
                .unwrap_or(o);
            if rest.eq_ignore_ascii_case(authority.trim()) || split_host(rest).0 == name {
                return true;
            }
        }
        let mut names = vec![
            "127.0.0.1".to_owned(),
            "localhost".to_owned(),
            "[::1]".to_owned(),
        ];
        if let Some(l) = self.local {
            names.push(match l.ip() {
                std::net::IpAddr::V4(ip) => ip.to_string(),
                std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            });
        }
        if !names.contains(&name) {
            return false;
        }
        match (port, self.local) {
            (Some(p), Some(l)) => p.parse::<u16>().ok() == Some(l.port()),
            (Some(p), None) => p.parse::<u16>().is_ok(),
            (None, Some(l)) => l.port() == 80,
            (None, None) => true,
        }
    }

    /// Whether the server listens on a loopback address (or an unknown one, taken as such).
    pub(crate) fn loopback(&self) -> bool {
        self.local.is_none_or(|l| l.ip().is_loopback())
    }

    /// Whether `origin` may change state here: this server's own origin (`http://` or,
    /// behind a TLS proxy, `https://` + the request's `host`, a host that names the server
    /// when it listens on loopback) or a `--cors-origin`.
    pub(crate) fn origin_ok(&self, origin: &str, host: Option<&str>) -> bool {
        let o = origin.trim().trim_end_matches('/');
        if self
            .cors_origins
            .iter()
            .any(|c| c.as_bytes().eq_ignore_ascii_case(o.as_bytes()))
        {
            return true;
        }
        let rest = o
            .strip_prefix("http://")
            .or_else(|| o.strip_prefix("https://"));
        match (rest, host) {
            (Some(rest), Some(h)) => {
                rest.eq_ignore_ascii_case(h.trim()) && (!self.loopback() || self.host_ok(rest))
            }
            _ => false,
        }
    }
}

fn is_json(ctype: &HeaderValue) -> bool {
    let Ok(t) = ctype.to_str() else { return false };
    let essence = t
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() != "0")
}

/// The layer: see the module docs.
pub(crate) async fn check(
    axum::extract::State(guard): axum::extract::State<Arc<Guard>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if request.version() == axum::http::Version::HTTP_11 {
        let hosts = request.headers().get_all(header::HOST).iter().count();
        if hosts != 1 {
            let has = if hosts == 0 {
                "none".to_owned()
            } else {
                hosts.to_string()
            };
            return refuse(
                StatusCode::BAD_REQUEST,
                ErrorCode::UserInputValidationFailed,
                format!("an HTTP/1.1 request must have one Host header, and this one has {has}"),
                "send a `Host` header naming this server, e.g. `Host: 127.0.0.1:PORT` (HTTP/1.1 \
                 clients such as curl send it themselves)",
            );
        }
    }
    let target = request
        .uri()
        .path_and_query()
        .map_or(0, |pq| pq.as_str().len());
    if target > URI_LIMIT {
        return refuse(
            StatusCode::URI_TOO_LONG,
            ErrorCode::UserInputValidationFailed,
            format!("the request target has {target} bytes, more than {URI_LIMIT}"),
            "send long values in a JSON body, not in the URL",
        );
    }
    let headers = request.headers();
    // A `Host` that is not text is checked as what it shows (and so refused on loopback).
    let host = headers
        .get(header::HOST)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()));
    if guard.loopback()
        && let Some(h) = &host
        && !guard.host_ok(h)
    {
        return refuse(
            StatusCode::FORBIDDEN,
            ErrorCode::UserFacadeUnauthorized,
            format!("the Host {h:?} does not name this server"),
            "call it by its loopback address (http://127.0.0.1:PORT or http://localhost:PORT); \
             a page of another origin needs --cors-origin",
        );
    }
    let method = request.method();
    let changes = [Method::POST, Method::PUT, Method::PATCH, Method::DELETE].contains(method);
    if changes
        && let Some(origin) = headers.get(header::ORIGIN)
        && !origin
            .to_str()
            .is_ok_and(|o| guard.origin_ok(o, host.as_deref()))
    {
        let shown = String::from_utf8_lossy(origin.as_bytes()).into_owned();
        return refuse(
            StatusCode::FORBIDDEN,
            ErrorCode::UserFacadeUnauthorized,
            format!("a {method} from the origin {shown:?} is refused (cross-site request)"),
            "only this server's own pages and the origins given to --cors-origin may change state",
        );
    }
    if changes && *method != Method::DELETE {
        // A compressed body read as if plain is garbage (or, worse, taken at its word): no
        // content coding is decoded here (RFC 9110 §8.4.1: 415).
        let encodings: Vec<String> = headers
            .get_all(header::CONTENT_ENCODING)
            .iter()
            .flat_map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .split(',')
                    .map(|c| c.trim().to_owned())
                    .collect::<Vec<_>>()
            })
            .filter(|c| !c.is_empty())
            .collect();
        if encodings
            .iter()
            .any(|c| !c.eq_ignore_ascii_case("identity"))
        {
            return refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ErrorCode::UserInputValidationFailed,
                format!(
                    "the request body is content-encoded ({}): this server reads only plain bodies",
                    encodings.join(", ")
                ),
                "send the JSON body uncompressed, without a Content-Encoding header",
            );
        }
        let ctype = headers.get(header::CONTENT_TYPE);
        let ok = match ctype {
            Some(t) => is_json(t),
            None => !has_body(headers),
        };
        if !ok {
            let shown = ctype.map_or_else(
                || "none".to_owned(),
                |t| String::from_utf8_lossy(t.as_bytes()).into_owned(),
            );
            return refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ErrorCode::UserInputValidationFailed,
                format!("the request body's Content-Type is {shown}, not application/json"),
                "send `Content-Type: application/json` (curl: -H 'Content-Type: application/json')",
            );
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(local: &str, cors: &[&str]) -> Guard {
        Guard {
            local: Some(local.parse().unwrap()),
            cors_origins: cors
                .iter()
                .map(|c| HeaderValue::from_str(c).unwrap())
                .collect(),
        }
    }

    #[test]
    fn hosts_must_name_the_loopback_server() {
        let g = guard("127.0.0.1:3318", &["http://good.example"]);
        for ok in [
            "127.0.0.1:3318",
            "localhost:3318",
            "LOCALHOST:3318",
            "[::1]:3318",
            "good.example",
        ] {
            assert!(g.host_ok(ok), "{ok}");
        }
        for bad in [
            "evil.example:80",
            "evil.example",
            "127.0.0.1:3319",
            "localhost",
            "127.0.0.1.evil:3318",
        ] {
            assert!(!g.host_ok(bad), "{bad}");
        }
    }

    #[test]
    fn origins_are_the_servers_own_or_listed() {
        let g = guard("127.0.0.1:3318", &["http://good.example"]);
        assert!(g.origin_ok("http://127.0.0.1:3318", Some("127.0.0.1:3318")));
        assert!(g.origin_ok("http://good.example", Some("127.0.0.1:3318")));
        assert!(!g.origin_ok("http://evil.example", Some("127.0.0.1:3318")));
        assert!(!g.origin_ok("null", Some("127.0.0.1:3318")));
        assert!(!g.origin_ok("http://localhost:3318", Some("127.0.0.1:3318")));
        // Listening beyond loopback (with a token): the page of whatever name the server
        // is reached by, over http or a TLS proxy; still no other origin.
        let g = guard("0.0.0.0:2511", &[]);
        assert!(g.origin_ok("http://build.lan:2511", Some("build.lan:2511")));
        assert!(g.origin_ok("https://awf.example", Some("awf.example")));
        assert!(!g.origin_ok("http://evil.example", Some("build.lan:2511")));
    }

    #[test]
    fn json_types() {
        for ok in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/merge-patch+json",
        ] {
            assert!(is_json(&HeaderValue::from_static(ok)), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "text/json",
        ] {
            assert!(!is_json(&HeaderValue::from_static(bad)), "{bad}");
        }
    }
}
