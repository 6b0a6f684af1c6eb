//! The bearer token (`awf serve --token-env NAME`), compared in constant time, and the
//! request header cap.

use std::sync::Arc;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use axum::extract::State;
use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;

use crate::HttpConfig;
use crate::problem::Problem;

/// The most bytes a request's headers may have together (names and values): 16 KiB; more is
/// answered 431. (hyper itself refuses more than 100 headers.)
pub const HEADER_LIMIT: usize = 16 << 10;

/// Whether `a` and `b` are equal, in time that depends only on their lengths (not on where
/// they differ).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().max(b.len());
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..n {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= x ^ y;
    }
    diff == 0
}

/// The credentials of an `Authorization` value of the `Bearer` scheme (the scheme's case
/// does not matter, RFC 9110 §11.1; spaces around the token are dropped); `None` for
/// another scheme.
pub fn bearer_of(value: &str) -> Option<&str> {
    let (scheme, rest) = value.trim_start().split_once([' ', '\t'])?;
    scheme.eq_ignore_ascii_case("bearer").then_some(rest.trim())
}

/// Whether `path` is one of the web page's routes (`/`, `/ui`, `/ui/…`: the page's HTML,
/// scripts, styles and icons, which hold no data): these are served without the token, so a
/// browser can load the page and ask for the token; every `/api` route still needs it.
pub fn is_page_path(path: &str) -> bool {
    path == "/" || path == "/ui" || path.starts_with("/ui/")
}

pub(crate) async fn require_token(
    State(cfg): State<Arc<HttpConfig>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if request
        .headers()
        .get_all(header::AUTHORIZATION)
        .iter()
        .count()
        > 1
    {
        return Problem::with_status(
            StatusCode::BAD_REQUEST,
            AwfError::new(
                ErrorCode::UserInputValidationFailed,
                "the request has several Authorization headers",
            )
            .with_hint("send one `Authorization: Bearer <token>`"),
        )
        .into_response();
    }
    let page_read = is_page_path(request.uri().path())
        && matches!(
            *request.method(),
            axum::http::Method::GET | axum::http::Method::HEAD
        );
    if let Some(token) = cfg.token.as_ref().filter(|_| !page_read) {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_of)
            .unwrap_or("");
        if !constant_time_eq(given.as_bytes(), token.as_bytes()) {
            let mut r = Problem::with_status(
                StatusCode::UNAUTHORIZED,
                AwfError::new(
                    ErrorCode::UserFacadeUnauthorized,
                    "missing or wrong bearer token",
                )
                .with_hint("send `Authorization: Bearer <token>`"),
            )
            .into_response();
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return r;
        }
    }
    next.run(request).await
}

pub(crate) async fn limit_headers(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let size: usize = request
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len())
        .sum();
    if size > HEADER_LIMIT {
        return Problem::with_status(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!("the request's headers have {size} bytes, more than {HEADER_LIMIT}"),
            )
            .with_hint("send fewer or smaller headers (cookies?)"),
        )
        .into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret1"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn only_the_pages_own_routes_are_page_paths() {
        for p in ["/", "/ui", "/ui/", "/ui/runs/abc", "/ui/static/app.js"] {
            assert!(is_page_path(p), "{p}");
        }
        for p in [
            "/api/workflows",
            "/uix",
            "/openapi.json",
            "/docs/",
            "//api",
            "",
        ] {
            assert!(!is_page_path(p), "{p}");
        }
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_of("Bearer abc"), Some("abc"));
        assert_eq!(bearer_of("bearer abc"), Some("abc"));
        assert_eq!(bearer_of("BEARER   abc "), Some("abc"));
        assert_eq!(bearer_of("Basic abc"), None);
        assert_eq!(bearer_of("Bearerabc"), None);
    }
}
