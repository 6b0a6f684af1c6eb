//! Error rendering and the one place where outcomes become process exit codes.
//!
//! Source: spec/workflow.md §4.3 (text errors), §4.4 (exit codes); design/decisions.md ("Exit
//! codes"): the error code's category decides, never the message text.

use std::io::Write;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use serde_json::Value;
use serde_json::json;

use crate::style::Style;

/// How a command ended, once everything was reported to the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Success.
    Success,
    /// A failure that was already printed; the code's category decides the exit code.
    Reported(ErrorCode),
    /// A run ended; the engine computed the exit code (0, 1..4, failure-terminal status,
    /// 130/143 after a signal).
    Run(u8),
}

/// A failure not yet reported to the user (always a structured error with a taxonomy code;
/// clap's own usage errors are printed by clap before any command runs).
#[derive(Debug)]
pub enum CliError {
    /// A structured failure.
    Awf(AwfError),
}

impl From<AwfError> for CliError {
    fn from(e: AwfError) -> Self {
        Self::Awf(e)
    }
}

/// The process exit code of an outcome. The only mapping from outcomes to exit codes.
pub fn exit_code(outcome: &Outcome) -> u8 {
    match outcome {
        Outcome::Success => 0,
        Outcome::Reported(code) => code.exit_code(),
        Outcome::Run(code) => *code,
    }
}

/// The flags of this command that choose its store (`--storage DIR`, `--store URL` with its
/// password masked), as hints repeat them; unset when it was given neither.
static STORE_FLAGS: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The commands that read or change the runs of a store: a hint that names one carries the
/// flags that chose this command's store ([`with_store_flags`]).
const STORE_COMMANDS: [&str; 4] = ["awf resume", "awf status", "awf history", "awf cancel"];

/// Remembers the `--storage DIR` and `--store URL` flags this command was given (not
/// `AWF_STORAGE_DIR` or `AWF_STORE`, which a command the user types next finds again), so
/// that the commands hints name (`awf resume ID`, `awf status ID`, `awf history`, `awf
/// cancel`) carry them: without them they would look in the default store (new user:
/// `RUN_NOT_FOUND`). The directory is shell-quoted; the URL has its password masked.
pub fn remember_store_flags(storage: Option<&std::path::Path>, store: Option<&str>) {
    let mut flags: Vec<String> = Vec::new();
    if let Some(dir) = storage.filter(|d| !d.as_os_str().is_empty()) {
        flags.push(flag_with_value("--storage", &dir.to_string_lossy()));
    }
    if let Some(url) = store.map(str::trim).filter(|u| !u.is_empty()) {
        flags.push(flag_with_value("--store", &awf_postgres::redacted(url)));
    }
    if !flags.is_empty() {
        let _ = STORE_FLAGS.set(flags.join(" "));
    }
}

/// `--flag value` as a shell word pair that pastes back: the value shell-quoted (a URL's `&`
/// or `;` cut the pasted command, breaker), and joined with `=` when it starts with `-`
/// (`--storage -rel` was read as the flags `-r`, `-e`, `-l`).
fn flag_with_value(flag: &str, value: &str) -> String {
    let quoted = awf_domain::shell::quote_arg(value);
    if value.starts_with('-') {
        format!("{flag}={quoted}")
    } else {
        format!("{flag} {quoted}")
    }
}

/// `text` with the store flags this command was given ([`remember_store_flags`]) after each
/// store command it names ([`STORE_COMMANDS`]); else unchanged.
pub fn with_store_flags(text: &str) -> String {
    match STORE_FLAGS.get() {
        Some(flags) => insert_store_flags(text, flags),
        None => text.to_owned(),
    }
}

fn insert_store_flags(text: &str, flags: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2 * flags.len());
    let mut rest = text;
    loop {
        let next = STORE_COMMANDS
            .iter()
            .filter_map(|cmd| rest.find(cmd).map(|at| (at, cmd.len())))
            .min();
        let Some((at, len)) = next else {
            out.push_str(rest);
            return out;
        };
        let end = at + len;
        out.push_str(&rest[..end]);
        // A whole word only (`awf resume`, not `awf resumes`).
        if rest[end..]
            .chars()
            .next()
            .is_none_or(|c| !c.is_alphanumeric() && c != '-' && c != '_')
        {
            out.push(' ');
            out.push_str(flags);
        }
        rest = &rest[end..];
    }
}

/// Text rendering of a structured error, compact:
/// `[CODE] message`, then `  at FILE:LINE:COLUMN` when the location is not already in the
/// message, then one `  key: value` line per other detail that adds something (a value the
/// message already contains, or an internal name such as `__inline_error_x`, is left out),
/// then `  Hint: …` lines (unless `hints` is false). Ends with a newline. Control characters
/// other than newline and tab (a step's output kept in a message) are escapes
/// ([`printable_text`](crate::style::printable_text)).
pub fn render_text(err: &AwfError, hints: bool, style: Style) -> String {
    render_text_with(err, &format!("[{}]", err.code()), hints, style)
}

/// [`render_text`] with another head before the message (e.g. `Workflow failed: [CODE]`).
pub fn render_text_with(err: &AwfError, head: &str, hints: bool, style: Style) -> String {
    let p = crate::style::printable_text;
    let mut out = format!("{} {}\n", style.red_bold(head), p(err.message()));
    for line in detail_lines(err.message(), err.details()) {
        out.push_str(&format!("  {}\n", p(&line)));
    }
    if hints {
        for h in err.hints() {
            out.push_str(&format!(
                "  {} {}\n",
                style.cyan("Hint:"),
                p(&with_store_flags(h))
            ));
        }
    }
    out
}

/// The detail lines worth showing under `message` (see [`render_text`]): `at <file>:<line>:<col>`
/// when the message does not name the file, then `key: value` for each other detail whose
/// value the message does not hold already, except `terminal` (a failure terminal's name),
/// always shown: a short name such as `failed` is found in many a message (`… step x
/// failed: …`), and every run that ends in a failure terminal says which one.
pub fn detail_lines(
    message: &str,
    details: &std::collections::BTreeMap<String, Value>,
) -> Vec<String> {
    let mut lines = Vec::new();
    let text = |k: &str| details.get(k).map(value_text);
    let mut located = false;
    if let Some(file) = text("file") {
        located = true;
        if !message.contains(&file) {
            let mut at = file;
            if let Some(line) = text("line") {
                at.push_str(&format!(":{line}"));
                if let Some(col) = text("column") {
                    at.push_str(&format!(":{col}"));
                }
            }
            lines.push(format!("at {at}"));
        }
    }
    for (k, v) in details {
        if located && matches!(k.as_str(), "file" | "line" | "column") {
            continue;
        }
        let v = value_text(v);
        if v.is_empty() || v.starts_with("__") || (k != "terminal" && message.contains(&v)) {
            continue;
        }
        lines.push(format!("{k}: {v}"));
    }
    lines
}

/// JSON rendering of an error outside a run (stderr):
/// `{"error": "message", "code": <exit>, "error_code": "CODE", "hints": [..], "details": {..}}`.
pub fn render_json(err: &AwfError) -> Value {
    json!({
        "error": err.message(),
        "code": err.code().exit_code(),
        "error_code": err.code().as_str(),
        "hints": err.hints().iter().map(|h| with_store_flags(h)).collect::<Vec<_>>(),
        "details": err.details(),
    })
}

/// Prints a not-yet-reported failure to stderr in the chosen format and returns its outcome.
pub fn report(err: &CliError, json_mode: bool, hints: bool, style: Style) -> Outcome {
    let mut stderr = std::io::stderr().lock();
    match err {
        CliError::Awf(e) => {
            let text = if json_mode {
                format!("{:#}\n", render_json(e))
            } else {
                render_text(e, hints, style)
            };
            let _ = stderr.write_all(text.as_bytes());
            Outcome::Reported(e.code())
        }
    }
}

/// A detail value as plain text (strings without quotes).
pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_come_from_categories_and_run_results() {
        assert_eq!(exit_code(&Outcome::Success), 0);
        assert_eq!(
            exit_code(&Outcome::Reported(ErrorCode::UserInputValidationFailed)),
            1
        );
        assert_eq!(
            exit_code(&Outcome::Reported(ErrorCode::WorkflowParseYamlSyntax)),
            2
        );
        assert_eq!(
            exit_code(&Outcome::Reported(
                ErrorCode::WorkflowValidationMissingState
            )),
            2
        );
        assert_eq!(
            exit_code(&Outcome::Reported(ErrorCode::ExecutionCommandFailed)),
            3
        );
        assert_eq!(
            exit_code(&Outcome::Reported(ErrorCode::SystemIoReadFailed)),
            4
        );
        assert_eq!(exit_code(&Outcome::Run(42)), 42);
        assert_eq!(exit_code(&Outcome::Run(130)), 130);
    }

    /// Breaker: `--storage -rel` pasted back was read as flags, and a `--store` URL with
    /// `&` cut the pasted command: values are quoted, and joined with `=` after a dash.
    #[test]
    fn store_flags_paste_back() {
        assert_eq!(flag_with_value("--storage", "-rel"), "--storage=-rel");
        assert_eq!(flag_with_value("--storage", "my dir"), "--storage 'my dir'");
        assert_eq!(
            flag_with_value("--store", "postgresql://h/db?a=1&b=2"),
            "--store 'postgresql://h/db?a=1&b=2'"
        );
    }

    #[test]
    fn hints_name_the_store_flags() {
        assert_eq!(
            insert_store_flags(
                "continue it with `awf resume r1 --from b`",
                "--store postgresql://u:***@h/db"
            ),
            "continue it with `awf resume --store postgresql://u:***@h/db r1 --from b`"
        );
        assert_eq!(
            insert_store_flags(
                "`awf status` and `awf resume` will not; awf resumes",
                "--store X"
            ),
            "`awf status --store X` and `awf resume --store X` will not; awf resumes"
        );
        // `--storage DIR` too, and every command that reads or changes the store's runs.
        assert_eq!(
            insert_store_flags(
                "`awf history` lists them; `awf cancel` drops it; `awf run x` starts one",
                "--storage 'my store'"
            ),
            "`awf history --storage 'my store'` lists them; `awf cancel --storage 'my store'` \
             drops it; `awf run x` starts one"
        );
    }

    #[test]
    fn text_error_has_code_location_and_hints() {
        let e = AwfError::new(ErrorCode::WorkflowParseYamlSyntax, "bad yaml")
            .with_detail("line", 3)
            .with_detail("column", 7)
            .with_detail("file", "/w/a.yaml")
            .with_detail("key", "states.a")
            .with_hint("quote the string");
        assert_eq!(
            render_text(&e, true, Style::plain()),
            "[WORKFLOW.PARSE.YAML_SYNTAX] bad yaml\n  at /w/a.yaml:3:7\n  key: states.a\n  Hint: quote the string\n"
        );
        assert_eq!(
            render_text(&e, false, Style::plain()),
            "[WORKFLOW.PARSE.YAML_SYNTAX] bad yaml\n  at /w/a.yaml:3:7\n  key: states.a\n"
        );
    }

    #[test]
    fn text_error_repeats_nothing_the_message_says_and_hides_internal_names() {
        // The location is already in the message: no second copy of file, line or column.
        let e = AwfError::new(
            ErrorCode::WorkflowParseYamlSyntax,
            "/w/a.yaml: line 5, column 1: expected ']'",
        )
        .with_detail("file", "/w/a.yaml")
        .with_detail("line", 5)
        .with_detail("column", 1);
        assert_eq!(
            render_text(&e, true, Style::plain()),
            "[WORKFLOW.PARSE.YAML_SYNTAX] /w/a.yaml: line 5, column 1: expected ']'\n"
        );
        // Internal state names and values the message already holds are left out.
        let e = AwfError::new(ErrorCode::ExecutionTerminalFailure, "verify failed")
            .with_detail("terminal", "__inline_error_verify")
            .with_detail("state", "verify");
        assert_eq!(
            render_text(&e, true, Style::plain()),
            "[EXECUTION.WORKFLOW.FAILURE_TERMINAL] verify failed\n"
        );
        assert!(!render_text(&e, true, Style::plain()).contains("Details"));
    }

    #[test]
    fn json_error_carries_exit_and_code() {
        let e = AwfError::new(ErrorCode::UserInputMissingFile, "nope");
        assert_eq!(
            render_json(&e),
            json!({"error": "nope", "code": 1, "error_code": "USER.INPUT.MISSING_FILE", "hints": [], "details": {}})
        );
    }
}
