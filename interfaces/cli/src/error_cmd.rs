//! `awf error [code]`: the error-code catalogue.
//!
//! No argument lists every code with its one-line description. An exact code (any case) shows
//! `Error Code`, `Description`, `Resolution`, `Related Codes`; a prefix (`USER.INPUT`) shows
//! every code under it. JSON: one `{code, description, resolution, related_codes}` object for
//! an exact match, an array otherwise. Unknown → `[USER.INPUT.VALIDATION_FAILED] error code not
//! found: X` with a did-you-mean or list hint, exit 1.
//!
//! Source: spec/workflow.md §4.2, §4.5.

use std::io::Write;

use awf_domain::ErrorCode;
use serde_json::Value;
use serde_json::json;

use crate::cli::ErrorArgs;
use crate::ctx::Ctx;
use crate::errors::CliError;
use crate::errors::Outcome;
use crate::json_out;

/// Codes matching `query`: the exact code, else every code starting with it (case-insensitive,
/// a trailing `.` optional), else every code ending with it (`NO_EXIT` is
/// `WORKFLOW.VALIDATION.NO_EXIT`, the last part a message shows in brackets).
pub fn lookup(query: &str) -> Vec<ErrorCode> {
    if let Some(c) = ErrorCode::parse(query) {
        return vec![c];
    }
    let q = query.trim_end_matches('.').to_ascii_uppercase();
    if q.is_empty() {
        return Vec::new();
    }
    let starting: Vec<ErrorCode> = ErrorCode::ALL
        .iter()
        .copied()
        .filter(|c| {
            let s = c.as_str();
            s.starts_with(&q) && s[q.len()..].starts_with('.')
        })
        .collect();
    if !starting.is_empty() {
        return starting;
    }
    let q = q.trim_start_matches('.');
    ErrorCode::ALL
        .iter()
        .copied()
        .filter(|c| {
            let s = c.as_str();
            s.ends_with(q) && s[..s.len() - q.len()].ends_with('.')
        })
        .collect()
}

/// The error for a query that matches no code: the closest code as a hint when one is near,
/// else a pointer to the full list.
pub fn unknown_code(query: &str) -> awf_domain::AwfError {
    let upper = query.to_ascii_uppercase();
    // No code is longer than 64 characters: a longer query is near none of them (and the
    // edit distance of a 100 KB query to every code took seconds).
    let closest = (upper.len() <= 64)
        .then(|| {
            ErrorCode::ALL
                .iter()
                .map(|c| (strsim::levenshtein(&upper, c.as_str()), c.as_str()))
                .min()
                .filter(|(d, code)| *d <= code.len() / 3)
                .map(|(_, c)| c)
        })
        .flatten();
    if query.is_empty() {
        return awf_domain::AwfError::new(
            ErrorCode::UserInputValidationFailed,
            "no error code given (the argument is empty)",
        )
        .with_hint(
            "run `awf error` to list every code, or give a code or a prefix such as `USER.INPUT`",
        );
    }
    let err = awf_domain::AwfError::new(
        ErrorCode::UserInputValidationFailed,
        format!("error code not found: {query}"),
    )
    .with_detail("code", query.to_owned());
    match closest {
        Some(c) => err.with_hint(format!("did you mean '{c}'?")),
        None => err
            .with_hint("run `awf error` to list every code, or give a prefix such as `USER.INPUT`"),
    }
}

/// The detail block of one code.
pub fn render_one(code: ErrorCode) -> String {
    let related: Vec<&str> = code.related().iter().map(|c| c.as_str()).collect();
    format!(
        "Error Code: {}\nDescription: {}\nResolution: {}\nRelated Codes: {}\n",
        code.as_str(),
        code.description(),
        code.resolution(),
        if related.is_empty() {
            "none".to_owned()
        } else {
            related.join(", ")
        }
    )
}

/// The list of all codes: `CODE  description`, aligned.
pub fn render_list(codes: &[ErrorCode]) -> String {
    let width = codes.iter().map(|c| c.as_str().len()).max().unwrap_or(0);
    codes
        .iter()
        .map(|c| format!("{:width$}  {}\n", c.as_str(), c.description()))
        .collect()
}

/// JSON of one code.
pub fn json_one(code: ErrorCode) -> Value {
    json!({
        "code": code.as_str(),
        "description": code.description(),
        "resolution": code.resolution(),
        "related_codes": code.related().iter().map(|c| c.as_str()).collect::<Vec<_>>(),
    })
}

/// Runs `awf error`.
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` (exit 1) for an unknown code, with a hint naming the closest
/// code or pointing at `awf error`.
pub fn run(ctx: &Ctx, args: &ErrorArgs) -> Result<Outcome, CliError> {
    let (codes, exact) = match &args.code {
        None => (ErrorCode::ALL.to_vec(), false),
        Some(q) => {
            // Blanks and dots around a code copied from a message do not count.
            let q = q.trim().trim_matches('.');
            let found = lookup(q);
            if found.is_empty() {
                return Err(CliError::Awf(unknown_code(q)));
            }
            let exact = ErrorCode::parse(q).is_some();
            (found, exact)
        }
    };
    if ctx.json() {
        if exact {
            json_out::print(&json_one(codes[0]))?;
        } else {
            json_out::print(&codes.iter().map(|c| json_one(*c)).collect::<Vec<_>>())?;
        }
    } else {
        let text = if args.code.is_none() {
            render_list(&codes)
        } else {
            codes
                .iter()
                .map(|c| render_one(*c))
                .collect::<Vec<_>>()
                .join("\n")
        };
        crate::stdout_check::checked(std::io::stdout().lock().write_all(text.as_bytes()));
    }
    Ok(Outcome::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_and_prefix_lookup() {
        assert_eq!(
            lookup("user.input.missing_file"),
            vec![ErrorCode::UserInputMissingFile]
        );
        let p = lookup("SYSTEM.IO");
        assert_eq!(
            p,
            vec![
                ErrorCode::SystemIoReadFailed,
                ErrorCode::SystemIoWriteFailed,
                ErrorCode::SystemIoPermissionDenied
            ]
        );
        assert_eq!(lookup("SYSTEM.IO."), p);
        assert!(lookup("NOPE").is_empty());
        // A prefix must end at a dot boundary.
        assert!(lookup("SYSTEM.I").is_empty());
        // The last parts of a code, as a message shows them (a new user tried `NO_EXIT`).
        assert_eq!(lookup("no_exit"), vec![ErrorCode::WorkflowValidationNoExit]);
        assert_eq!(
            lookup("VALIDATION.NO_EXIT"),
            vec![ErrorCode::WorkflowValidationNoExit]
        );
        // A suffix too must start at a dot boundary.
        assert!(lookup("EXIT").is_empty());
        // An empty or huge query: a clear error, at once.
        assert!(unknown_code("").message().contains("empty"));
        let e = unknown_code(&"A.".repeat(50_000));
        assert!(e.message().starts_with("error code not found"));
        assert!(e.hints()[0].contains("awf error"), "{:?}", e.hints());
        // Why a query past 64 characters is compared with no code.
        assert!(ErrorCode::ALL.iter().all(|c| c.as_str().len() <= 64));
    }

    #[test]
    fn unknown_code_is_a_taxonomy_error_with_a_hint() {
        let e = unknown_code("NOPE");
        assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
        assert_eq!(e.message(), "error code not found: NOPE");
        assert_eq!(
            e.hints(),
            ["run `awf error` to list every code, or give a prefix such as `USER.INPUT`"]
        );
        let near = unknown_code("SYSTEM.IO.READ_FAILD");
        assert_eq!(near.hints(), ["did you mean 'SYSTEM.IO.READ_FAILED'?"]);
    }

    #[test]
    fn one_code_block() {
        let text = render_one(ErrorCode::SystemIoReadFailed);
        assert_eq!(
            text,
            format!(
                "Error Code: SYSTEM.IO.READ_FAILED\nDescription: {}\nResolution: {}\nRelated Codes: SYSTEM.IO.WRITE_FAILED, SYSTEM.IO.PERMISSION_DENIED\n",
                ErrorCode::SystemIoReadFailed.description(),
                ErrorCode::SystemIoReadFailed.resolution()
            )
        );
    }

    #[test]
    fn list_has_every_code() {
        assert_eq!(
            render_list(ErrorCode::ALL).lines().count(),
            ErrorCode::ALL.len()
        );
    }
}
