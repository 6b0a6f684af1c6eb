//! `attach:` of `provider: acp`: the files of a step sent with its prompt as ACP content
//! blocks after the text block (shared/spec/acp.md §4, lifecycle step 5), chosen by the
//! agent's `promptCapabilities` from `initialize`:
//!
//! - an image (`.png`, `.jpg`/`.jpeg`, `.gif`, `.webp`): an `image` block (`data` base64,
//!   `mimeType`, `uri`) when `promptCapabilities.image` is true, else a `resource_link`;
//! - any other file: a `resource` block when `promptCapabilities.embeddedContext` is true
//!   (`text` when the file is UTF-8, else `blob` base64, with `uri` and `mimeType`), else a
//!   `resource_link` (`uri` `file://…`, `name` = the file name, `mimeType`, `size` in bytes).
//!
//! Paths are relative to the step's working directory. A missing or unreadable file is
//! `USER.INPUT.MISSING_FILE`; a file over [`MAX_ATTACH_BYTES`] that would be embedded is
//! `USER.AGENT.INVALID_OPTION` (a link is sent for any size).

use std::path::Path;
use std::path::PathBuf;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use serde_json::Value;
use serde_json::json;

/// The largest file embedded in a prompt (`resource` or `image` block): 10 MiB.
pub const MAX_ATTACH_BYTES: u64 = 10 * 1024 * 1024;

/// What the agent said it accepts in a prompt (`promptCapabilities` of `initialize`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PromptCaps {
    /// `image`: `image` blocks.
    pub image: bool,
    /// `embeddedContext`: `resource` blocks.
    pub embedded: bool,
}

impl PromptCaps {
    /// The capabilities in an `initialize` result (absent ones are false).
    pub fn of_init(init: &Value) -> Self {
        let flag = |k: &str| {
            init.pointer(&format!("/agentCapabilities/promptCapabilities/{k}"))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        Self {
            image: flag("image"),
            embedded: flag("embeddedContext"),
        }
    }
}

/// The MIME type of an image file by its extension, `None` for other files.
fn image_mime(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        _ => return None,
    })
}

/// The MIME type of a non-image file: by extension for common text formats, else
/// `text/plain` for UTF-8 content and `application/octet-stream` for the rest.
fn file_mime(path: &Path, utf8: bool) -> &'static str {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("md" | "markdown") => "text/markdown",
        Some("json") => "application/json",
        Some("yaml" | "yml") => "application/yaml",
        Some("html" | "htm") => "text/html",
        Some("csv") => "text/csv",
        Some("pdf") => "application/pdf",
        Some("svg") => "image/svg+xml",
        _ if utf8 => "text/plain",
        _ => "application/octet-stream",
    }
}

/// Standard base64 (RFC 4648 §4, with padding) of `bytes`.
pub fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let sextet = |i: u32| char::from(ABC[((n >> (18 - 6 * i)) & 63) as usize]);
        out.push(sextet(0));
        out.push(sextet(1));
        out.push(if chunk.len() > 1 { sextet(2) } else { '=' });
        out.push(if chunk.len() > 2 { sextet(3) } else { '=' });
    }
    out
}

/// `file://` URI of an absolute path (bytes outside the unreserved set and `/`
/// percent-encoded).
fn file_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file://");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            uri.push(char::from(b));
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri
}

fn missing(path: &str, full: &Path, why: &std::io::Error) -> AwfError {
    AwfError::new(
        ErrorCode::UserInputMissingFile,
        format!(
            "acp option attach: cannot read \"{path}\" ({}): {why}",
            full.display()
        ),
    )
    .with_hint("attach paths are relative to the step's working directory; fix the path or create the file")
    .with_detail("option", "attach")
}

/// The content blocks of `paths` (relative to `dir`) for an agent with `caps`, in order.
///
/// # Errors
/// `USER.INPUT.MISSING_FILE` for a file that cannot be read; `USER.AGENT.INVALID_OPTION`
/// for one over [`MAX_ATTACH_BYTES`] that would be embedded.
pub fn blocks(paths: &[String], dir: &Path, caps: PromptCaps) -> Result<Vec<Value>, AwfError> {
    let mut out = Vec::with_capacity(paths.len());
    for p in paths {
        let full: PathBuf = dir.join(p);
        let meta = std::fs::metadata(&full).map_err(|e| missing(p, &full, &e))?;
        if !meta.is_file() {
            return Err(missing(
                p,
                &full,
                &std::io::Error::other("not a regular file"),
            ));
        }
        let full = std::fs::canonicalize(&full).unwrap_or(full);
        let uri = file_uri(&full);
        let name = full
            .file_name()
            .map_or_else(|| p.clone(), |n| n.to_string_lossy().into_owned());
        let image = image_mime(&full);
        let embed = match image {
            Some(_) => caps.image,
            None => caps.embedded,
        };
        if !embed {
            let mime = match image {
                Some(m) => m,
                None => {
                    // A link does not read the file whole: the first 8 KiB tell text from binary.
                    let head = read_head(&full, 8192).map_err(|e| missing(p, &full, &e))?;
                    file_mime(&full, utf8_prefix(&head))
                }
            };
            out.push(json!({"type": "resource_link", "uri": uri, "name": name, "mimeType": mime, "size": meta.len()}));
            continue;
        }
        if meta.len() > MAX_ATTACH_BYTES {
            return Err(AwfError::new(
                ErrorCode::UserAgentInvalidOption,
                format!(
                    "acp option attach: \"{p}\" is {} bytes, over the {MAX_ATTACH_BYTES} bytes a prompt may embed",
                    meta.len()
                ),
            )
            .with_hint("attach a smaller file, or a part of it")
            .with_detail("option", "attach"));
        }
        let bytes = std::fs::read(&full).map_err(|e| missing(p, &full, &e))?;
        out.push(match (image, std::str::from_utf8(&bytes)) {
            (Some(mime), _) => {
                json!({"type": "image", "mimeType": mime, "data": base64(&bytes), "uri": uri})
            }
            (None, Ok(text)) => json!({"type": "resource", "resource": {
                "uri": uri, "mimeType": file_mime(&full, true), "text": text}}),
            (None, Err(_)) => json!({"type": "resource", "resource": {
                "uri": uri, "mimeType": file_mime(&full, false), "blob": base64(&bytes)}}),
        });
    }
    Ok(out)
}

fn read_head(path: &Path, n: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::new();
    std::fs::File::open(path)?.take(n).read_to_end(&mut buf)?;
    Ok(buf)
}

/// Whether `head` (a file's first bytes) is UTF-8, allowing a sequence cut at its end.
fn utf8_prefix(head: &[u8]) -> bool {
    match std::str::from_utf8(head) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        for (raw, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(raw.as_bytes()), want, "{raw}");
        }
        assert_eq!(base64(&[0xff, 0x00, 0xfe]), "/wD+");
    }

    #[test]
    fn blocks_follow_the_agents_capabilities() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.md"), "# hi\n").unwrap();
        std::fs::write(dir.path().join("data.bin"), [0u8, 159, 146, 150]).unwrap();
        std::fs::write(dir.path().join("pic.png"), [137u8, 80, 78, 71]).unwrap();
        let paths: Vec<String> = ["notes.md", "data.bin", "pic.png"]
            .map(str::to_owned)
            .to_vec();
        let all = blocks(
            &paths,
            dir.path(),
            PromptCaps {
                image: true,
                embedded: true,
            },
        )
        .unwrap();
        assert_eq!(all[0]["type"], "resource");
        assert_eq!(all[0]["resource"]["text"], "# hi\n");
        assert_eq!(all[0]["resource"]["mimeType"], "text/markdown");
        assert_eq!(all[1]["resource"]["blob"], base64(&[0, 159, 146, 150]));
        assert_eq!(all[1]["resource"]["mimeType"], "application/octet-stream");
        assert_eq!(all[2]["type"], "image");
        assert_eq!(all[2]["mimeType"], "image/png");
        assert_eq!(all[2]["data"], base64(&[137, 80, 78, 71]));
        let none = blocks(&paths, dir.path(), PromptCaps::default()).unwrap();
        for (b, mime) in none
            .iter()
            .zip(["text/markdown", "application/octet-stream", "image/png"])
        {
            assert_eq!(b["type"], "resource_link", "{b}");
            assert_eq!(b["mimeType"], mime, "{b}");
            assert!(b["uri"].as_str().unwrap().starts_with("file:///"), "{b}");
        }
        assert_eq!(none[0]["name"], "notes.md");
        assert_eq!(none[0]["size"], 5);
        // Embedded context without images: the image is still a link.
        let text_only = blocks(
            &paths,
            dir.path(),
            PromptCaps {
                image: false,
                embedded: true,
            },
        )
        .unwrap();
        assert_eq!(text_only[0]["type"], "resource");
        assert_eq!(text_only[2]["type"], "resource_link");
    }

    #[test]
    fn a_missing_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = blocks(&["nope.txt".to_owned()], dir.path(), PromptCaps::default()).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserInputMissingFile);
        assert!(e.message().contains("nope.txt"), "{}", e.message());
        assert!(!e.hints().is_empty());
        let e = blocks(&[".".to_owned()], dir.path(), PromptCaps::default()).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserInputMissingFile);
    }

    #[test]
    fn file_uris_are_percent_encoded() {
        assert_eq!(file_uri(Path::new("/a b/c%.txt")), "file:///a%20b/c%25.txt");
    }
}
