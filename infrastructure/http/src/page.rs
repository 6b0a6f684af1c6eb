//! The web page of `awf serve` (issue 13, "The web page"): plain HTML, CSS and JavaScript
//! modules embedded in the binary, served at `/` and under `/ui/`, talking only to the
//! public API of this crate (`/api/...`).
//!
//! Routes:
//! - `GET /`, `GET /ui`, `GET /ui/`, `GET /ui/runs/{id}` → the page (`index.html`, one
//!   document; the script shows the view the path names);
//! - `GET /ui/static/{file}` → the page's own assets (`app.js`, `api.js`, `graph.js`,
//!   `style.css`, `favicon.svg`), `Cache-Control: no-cache` with a strong `ETag` (a
//!   conditional request with a matching `If-None-Match` gets 304);
//! - `GET /ui/static/vendor/{file}` → vendored libraries (`dagre-<version>.esm.js`, see
//!   `assets/vendor/README.md`), versioned names cached for a year (`immutable`);
//! - anything else under `/ui/` → the API's 404 problem document (the main router's fallback).
//!
//! Every response carries `X-Content-Type-Options: nosniff`; the document also carries a
//! `Content-Security-Policy` that allows scripts, styles and connections from this origin only
//! (no inline script, no CDN).

use axum::Router;
use axum::extract::Path;
use axum::http::HeaderMap;
use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::routing::get;

/// One embedded file: its bytes, content type and cache policy.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    /// The file's content.
    pub bytes: &'static [u8],
    /// `Content-Type` it is served with.
    pub content_type: &'static str,
    /// Whether the name is versioned (vendored): cached for a year instead of revalidated.
    pub immutable: bool,
}

const INDEX: Asset = Asset {
    bytes: include_bytes!("../assets/index.html"),
    content_type: "text/html; charset=utf-8",
    immutable: false,
};

const JS: &str = "text/javascript; charset=utf-8";

/// The files under `/ui/static/`, by path below it.
const ASSETS: &[(&str, Asset)] = &[
    (
        "app.js",
        Asset {
            bytes: include_bytes!("../assets/app.js"),
            content_type: JS,
            immutable: false,
        },
    ),
    (
        "api.js",
        Asset {
            bytes: include_bytes!("../assets/api.js"),
            content_type: JS,
            immutable: false,
        },
    ),
    (
        "graph.js",
        Asset {
            bytes: include_bytes!("../assets/graph.js"),
            content_type: JS,
            immutable: false,
        },
    ),
    (
        "style.css",
        Asset {
            bytes: include_bytes!("../assets/style.css"),
            content_type: "text/css; charset=utf-8",
            immutable: false,
        },
    ),
    (
        "favicon.svg",
        Asset {
            bytes: include_bytes!("../assets/favicon.svg"),
            content_type: "image/svg+xml",
            immutable: false,
        },
    ),
    (
        "vendor/dagre-3.1.3.esm.js",
        Asset {
            bytes: include_bytes!("../assets/vendor/dagre-3.1.3.esm.js"),
            content_type: JS,
            immutable: true,
        },
    ),
];

/// The policy of the document: same-origin scripts, styles, images and connections only.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// The routes of the page, to be merged into the API's router (any state type).
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/ui", get(index))
        .route("/ui/", get(index))
        .route("/ui/runs/{id}", get(index))
        .route("/ui/static/{*path}", get(static_file))
}

/// The embedded asset at `path` below `/ui/static/`, if any.
pub fn asset(path: &str) -> Option<Asset> {
    ASSETS.iter().find(|(p, _)| *p == path).map(|(_, a)| *a)
}

/// A strong entity tag of `bytes`: `"` + 16 hex digits of their 64-bit FNV-1a hash + `"`.
pub fn etag(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("\"{h:016x}\"")
}

async fn index(headers: HeaderMap) -> Response {
    let mut r = serve(INDEX, &headers);
    r.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    r
}

async fn static_file(Path(path): Path<String>, headers: HeaderMap) -> Response {
    match asset(&path) {
        Some(a) => serve(a, &headers),
        None => crate::Problem::with_status(
            StatusCode::NOT_FOUND,
            awf_domain::AwfError::new(
                awf_domain::ErrorCode::UserInputValidationFailed,
                format!("no such file of the web page: /ui/static/{path}"),
            )
            .with_hint("the page lives at / (runs at /ui/runs/<id>)"),
        )
        .into_response(),
    }
}

fn serve(a: Asset, headers: &HeaderMap) -> Response {
    let tag = etag(a.bytes);
    let cache = if a.immutable {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag || t.trim() == "*"));
    let mut r = if matches {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(a.content_type),
            )],
            a.bytes,
        )
            .into_response()
    };
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&tag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_the_page_imports_is_served() {
        let index = std::str::from_utf8(INDEX.bytes).unwrap();
        for (path, a) in ASSETS {
            assert!(!a.bytes.is_empty(), "{path} is empty");
        }
        // Every `/ui/static/...` reference in the document and in the modules resolves.
        let mut texts = vec![index.to_owned()];
        for (p, a) in ASSETS {
            if p.ends_with(".js") && !p.starts_with("vendor/") {
                texts.push(String::from_utf8_lossy(a.bytes).into_owned());
            }
        }
        let mut seen = 0;
        for t in &texts {
            for (i, _) in t.match_indices("/ui/static/") {
                let rest = &t[i + "/ui/static/".len()..];
                let end = rest
                    .find(|c: char| c == '"' || c == '\'' || c == '`' || c.is_whitespace())
                    .unwrap_or(rest.len());
                let path = &rest[..end];
                assert!(asset(path).is_some(), "/ui/static/{path} is not served");
                seen += 1;
            }
        }
        assert!(seen >= 3, "expected the document to reference its assets");
    }

    #[test]
    fn etags_differ_by_content() {
        assert_eq!(etag(b"a"), etag(b"a"));
        assert_ne!(etag(b"a"), etag(b"b"));
        assert_eq!(etag(b"").len(), 18);
    }

    #[test]
    fn vendored_files_are_long_cached_and_own_files_revalidated() {
        assert!(asset("vendor/dagre-3.1.3.esm.js").unwrap().immutable);
        assert!(!asset("app.js").unwrap().immutable);
        assert!(asset("../lib.rs").is_none());
        let r = serve(asset("app.js").unwrap(), &HeaderMap::new());
        assert_eq!(r.status(), StatusCode::OK);
        let tag = r.headers()[header::ETAG].clone();
        let mut h = HeaderMap::new();
        h.insert(header::IF_NONE_MATCH, tag);
        assert_eq!(
            serve(asset("app.js").unwrap(), &h).status(),
            StatusCode::NOT_MODIFIED
        );
    }
}
