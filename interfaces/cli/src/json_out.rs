//! `-f json` output: exactly one JSON document on stdout.
//!
//! Source: shared/conformance/README.md ("The run result contract").

use std::collections::BTreeMap;
use std::io::Write;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use serde::Serialize;

/// The run result of a run that never started: `run_id` null, empty `states`, status
/// `failure`, the category's exit code, and `error` set (its hints carrying this command's
/// store flags, as in text: [`crate::errors::with_store_flags`]).
pub fn failure_result(identifier: &str, err: &AwfError) -> RunResult {
    let mut error = err.body();
    for h in &mut error.hints {
        *h = crate::errors::with_store_flags(h);
    }
    RunResult {
        run_id: None,
        workflow: identifier.to_owned(),
        status: RunStatus::Failure,
        exit_code: err.code().exit_code(),
        terminal: None,
        duration_ms: 0,
        states: BTreeMap::new(),
        outputs: BTreeMap::new(),
        error: Some(error),
        message: None,
        spend: None,
    }
}

/// Prints `value` as the one JSON document on stdout and flushes it.
///
/// # Errors
/// `SYSTEM.IO.WRITE_FAILED` when the write or the flush fails: a full disk (`ENOSPC`), any
/// other I/O error. The JSON did not reach its reader, so the command must not exit 0. A
/// reader that went away (`EPIPE`: `awf history -f json | head -c 10`) is not a failure, as
/// in text output and in ripgrep: the command keeps its own exit code (breaker: exit 4 and
/// an error document in JSON, exit 0 in text). (A stdout closed before awf started is
/// reopened on `/dev/null` by the Rust runtime and cannot be told from `> /dev/null`.)
pub fn print<T: Serialize>(value: &T) -> Result<(), AwfError> {
    match write_json(value) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(write_error(&e)),
        Ok(()) => Ok(()),
    }
}

/// [`print`] for the result of a run (`awf run`, `awf resume`): a reader that went away
/// before the result was written whole (`EPIPE`: `awf run wf -f json | true`) is still no
/// failure (the run's exit code stands), but is said on stderr in one line, so the result is
/// not lost without a word (breaker).
///
/// # Errors
/// As [`print`].
pub fn print_result<T: Serialize>(value: &T) -> Result<(), AwfError> {
    match write_json(value) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            let _ = writeln!(
                std::io::stderr().lock(),
                "WARN the run's JSON result was not written in full: its reader closed stdout (broken pipe)"
            );
            Ok(())
        }
        Err(e) => Err(write_error(&e)),
        Ok(()) => Ok(()),
    }
}

/// The error of a write of the JSON output that failed.
fn write_error(e: &std::io::Error) -> AwfError {
    AwfError::new(
        ErrorCode::SystemIoWriteFailed,
        format!("cannot write the JSON output to stdout: {e}"),
    )
    .with_hint("stdout is closed or its disk is full; redirect it to a writable file or pipe")
}

/// Writes `value` pretty-printed and a newline to stdout, and flushes it.
fn write_json<T: Serialize>(value: &T) -> std::io::Result<()> {
    // Streamed through a buffer, not built as one string first: a result holding a large
    // step output costs its bytes once, not twice.
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    serde_json::to_writer_pretty(&mut out, value).map_err(std::io::Error::from)?;
    out.write_all(b"\n")?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use awf_domain::ErrorCode;
    use serde_json::json;

    #[test]
    fn pre_run_failure_has_the_contract_shape() {
        let e = AwfError::new(
            ErrorCode::UserInputValidationFailed,
            "missing required input: file_path",
        )
        .with_hint("pass --input file_path=...");
        let v = serde_json::to_value(failure_result("example-simple", &e)).unwrap();
        assert_eq!(
            v,
            json!({
                "run_id": null,
                "workflow": "example-simple",
                "status": "failure",
                "exit_code": 1,
                "terminal": null,
                "duration_ms": 0,
                "states": {},
                "outputs": {},
                "error": {
                    "code": "USER.INPUT.VALIDATION_FAILED",
                    "message": "missing required input: file_path",
                    "hints": ["pass --input file_path=..."]
                }
            })
        );
    }
}
