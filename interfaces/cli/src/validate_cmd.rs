//! `awf validate`: loads and fully checks a workflow, prints every finding.
//!
//! Text: one line per diagnostic on stderr, `<file>:<line>:<col>: error|warning|note [CODE]
//! path: message`, then `  Hint: …`; a summary line (`Workflow '<wf>' is valid` on stdout, or
//! `… has no errors, but its run will fail at <path>` after a warning saying so).
//! JSON (stdout): `{"valid": bool, "workflow": "<identifier as typed>", "errors": [msg…],
//! "warnings": [msg…], "diagnostics": [Diagnostic…]}` (`errors`/`warnings`, message strings,
//! are AWF (Go)'s and omitted when empty; `diagnostics` is ours, `workflow_name` the YAML
//! name). A workflow that cannot be found or loaded also gets the JSON error object on stderr
//! (`{"error", "code", "error_code", …}`), as AWF (Go) prints it.
//! `-f quiet`: `valid` / `invalid` on stdout and nothing else (the exit code says it too; a
//! workflow that cannot be found or loaded: `invalid`, its error on stderr, exit by its category;
//! `awf validate` without it lists the findings). `-f table`: a
//! box `Workflow: <name>    Status: valid|invalid`, an INPUT/TYPE/REQUIRED/DEFAULT table, a
//! STEP/TYPE/NEXT table, then `ERROR: …` / `WARNING: …` lines.
//! Exit 0 when valid, 2 (WORKFLOW) when not — `--strict` turns unknown-key warnings into
//! errors; a file that cannot be found or read exits by its error's category.
//!
//! Source: spec/workflow.md §1.16, §4.2; design/decisions.md ("Workflow language").

use std::io::Write;

use awf_domain::AwfError;
use awf_domain::ports::repository::Diagnostic;
use awf_domain::ports::repository::Severity;
use serde_json::json;

use crate::cli::Format;
use crate::cli::ValidateArgs;
use crate::ctx::Ctx;
use crate::errors;
use crate::errors::Outcome;
use crate::json_out;
use crate::style::Style;
use crate::wiring;

pub use awf_application::validation::effective;

/// One diagnostic as text (with a trailing newline, hint lines included when `hints`).
pub fn render_diagnostic(
    d: &Diagnostic,
    identifier: &str,
    strict: bool,
    hints: bool,
    style: Style,
) -> String {
    let mut loc = d
        .file
        .as_ref()
        .map_or_else(|| identifier.to_owned(), |f| f.display().to_string());
    if let Some(l) = d.line {
        loc.push_str(&format!(":{l}"));
        if let Some(c) = d.column {
            loc.push_str(&format!(":{c}"));
        }
    }
    let sev = match effective(d, strict) {
        Severity::Error => style.red_bold("error"),
        Severity::Warning => style.yellow("warning"),
        Severity::Note => style.cyan("note"),
    };
    let path = if d.path.is_empty() {
        String::new()
    } else {
        format!("{}: ", d.path)
    };
    // Names and values from the workflow file reach the terminal escaped (control and
    // bidirectional formatting characters; breaker: a state named with U+202E was shown
    // reversed in findings).
    let p = crate::style::printable_text;
    let mut out = format!(
        "{}: {sev} [{}] {}{}\n",
        p(&loc),
        d.code,
        p(&path),
        p(&d.message)
    );
    if hints && let Some(h) = &d.hint {
        out.push_str(&format!("  {} {}\n", style.cyan("Hint:"), p(h)));
    }
    out
}

/// Runs `awf validate`.
pub fn run(ctx: &Ctx, args: &ValidateArgs) -> Outcome {
    let result = wiring::build(ctx.storage.as_deref())
        .and_then(|w| awf_application::validate_workflow(&w.services, &args.workflow, &w.env));
    let report = match result {
        Ok(r) => r,
        Err(e) => return load_failure(ctx, &args.workflow, &e),
    };
    let mut diags: Vec<Diagnostic> = report.diagnostics.clone();
    for d in &mut diags {
        d.severity = effective(d, args.strict);
    }
    let first_error = diags
        .iter()
        .find(|d| d.severity == Severity::Error)
        .map(|d| d.code);
    let name = report
        .workflow
        .as_ref()
        .map_or_else(|| args.workflow.clone(), |w| w.name.clone());
    let messages = |sev: Severity| -> Vec<String> {
        diags
            .iter()
            .filter(|d| d.severity == sev)
            .map(|d| {
                if d.path.is_empty() {
                    d.message.clone()
                } else {
                    format!("{}: {}", d.path, d.message)
                }
            })
            .collect()
    };
    if ctx.json() {
        let mut doc = json!({
            "valid": first_error.is_none(),
            "workflow": args.workflow,
        });
        if let Some(o) = doc.as_object_mut() {
            let errors = messages(Severity::Error);
            let warnings = messages(Severity::Warning);
            if !errors.is_empty() {
                o.insert("errors".into(), json!(errors));
            }
            if !warnings.is_empty() {
                o.insert("warnings".into(), json!(warnings));
            }
            o.insert("workflow_name".into(), json!(name));
            o.insert("diagnostics".into(), json!(diags));
        }
        if let Err(e) = json_out::print(&doc) {
            return errors::report(&e.into(), true, ctx.hints, ctx.err_style);
        }
    } else if ctx.format == Format::Table {
        crate::stdout_check::checked(
            std::io::stdout().lock().write_all(
                render_table(
                    report.workflow.as_ref(),
                    &name,
                    first_error.is_none(),
                    &messages(Severity::Error),
                    &messages(Severity::Warning),
                )
                .as_bytes(),
            ),
        );
    } else {
        let mut err = std::io::stderr().lock();
        // `-f quiet` is the verdict alone (and the exit code), as in AWF (Go).
        for d in diags.iter().filter(|_| ctx.format != Format::Quiet) {
            let _ = err.write_all(
                render_diagnostic(d, &args.workflow, false, ctx.hints, ctx.err_style).as_bytes(),
            );
        }
        let errors_n = diags
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count();
        if ctx.format == Format::Quiet {
            let word = if errors_n == 0 { "valid" } else { "invalid" };
            crate::stdout_check::checked(writeln!(std::io::stdout().lock(), "{word}"));
        } else if errors_n == 0 {
            let mut out = std::io::stdout().lock();
            crate::stdout_check::checked(writeln!(
                out,
                "{}",
                valid_summary(&args.workflow, &diags)
            ));
        } else {
            let plural = if errors_n == 1 { "" } else { "s" };
            let _ = writeln!(
                err,
                "Workflow '{}' is invalid: {errors_n} error{plural}",
                args.workflow
            );
        }
    }
    match first_error {
        None => Outcome::Success,
        Some(code) => Outcome::Reported(code),
    }
}

/// The summary line of a workflow without errors: `Workflow '<wf>' is valid` with the number
/// of warnings (` (2 warnings)`), or, when a warning says the run fails where it applies
/// ([`Diagnostic::run_fails`]: an unknown provider, a required sub-workflow input not
/// passed), `Workflow '<wf>' has no errors, but its run will fail at <path>[, <path>…]
/// (N warning(s))`: such a workflow is valid as AWF (Go) checks it (exit 0), but not one to
/// call "valid" (new user).
pub fn valid_summary(identifier: &str, diags: &[Diagnostic]) -> String {
    let warnings_n = diags
        .iter()
        .filter(|d| d.severity == Severity::Warning)
        .count();
    let suffix = match warnings_n {
        0 => String::new(),
        1 => " (1 warning)".to_owned(),
        n => format!(" ({n} warnings)"),
    };
    let mut failing: Vec<&str> = Vec::new();
    for d in diags
        .iter()
        .filter(|d| d.severity == Severity::Warning && d.run_fails)
    {
        if !failing.contains(&d.path.as_str()) {
            failing.push(&d.path);
        }
    }
    if failing.is_empty() {
        return format!("Workflow '{identifier}' is valid{suffix}");
    }
    const SHOWN: usize = 3;
    let mut at = failing
        .iter()
        .take(SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if failing.len() > SHOWN {
        at.push_str(&format!(" and {} more", failing.len() - SHOWN));
    }
    format!(
        "Workflow '{identifier}' has no errors, but its run will fail at {}{suffix}",
        crate::style::printable_text(&at)
    )
}

/// `-f table` (AWF (Go)'s layout): a status box, then the inputs (INPUT(15) TYPE(10)
/// REQUIRED(10) DEFAULT(20), `yes`/`no`, `-` for no default, `""` for the empty string,
/// `***` for another value of a secret-named input) and the states (STEP(15) TYPE(10)
/// NEXT(20): see [`table_next`]), then a blank line and `ERROR: …` /
/// `WARNING: …` lines. Every cell, the name and each message reach the terminal with their
/// control characters written as escapes ([`crate::style::printable`]; a message keeps its
/// newlines: [`crate::style::printable_text`]), as every other view writes them.
pub fn render_table(
    wf: Option<&awf_domain::workflow::Workflow>,
    name: &str,
    valid: bool,
    errors: &[String],
    warnings: &[String],
) -> String {
    use crate::style::printable;
    use crate::style::printable_text;
    use crate::table::Table;
    let status = if valid { "valid" } else { "invalid" };
    let name = printable(name);
    let mut head = Table::new(&[15, 10, 10, 20]);
    head.full_sep()
        .full_row(&format!("Workflow: {name}    Status: {status}"))
        .full_sep();
    let mut out = head.text().to_owned();
    if let Some(wf) = wf {
        if !wf.inputs.is_empty() {
            let mut t = Table::new(&[15, 10, 10, 20]);
            t.header(&["INPUT", "TYPE", "REQUIRED", "DEFAULT"]);
            for i in &wf.inputs {
                let ty = serde_json::to_value(&i.ty)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .filter(|t| t != "untyped")
                    .unwrap_or_else(|| "-".to_owned());
                let default = match &i.default {
                    None => "-".to_owned(),
                    Some(v) if awf_domain::mask::hides_named(&i.name, v) => {
                        awf_domain::mask::MASK.to_owned()
                    }
                    // As `awf run <workflow> --help` and the HTTP API show it.
                    Some(v) if v.as_str() == Some("") => "\"\"".to_owned(),
                    Some(v) => v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                };
                let req = if i.required { "yes" } else { "no" };
                t.row(&[
                    printable(&i.name).into_owned(),
                    ty,
                    req.to_owned(),
                    printable(&default).into_owned(),
                ]);
            }
            t.sep();
            out.push_str(t.text());
        }
        if !wf.states.is_empty() {
            // NEXT as wide as its longest cell (20 at least, AWF (Go)'s width): every route
            // is listed, none cut.
            let rows: Vec<[String; 3]> = wf
                .states
                .iter()
                .map(|(n, st)| {
                    [
                        printable(&wf.display_name(n)).into_owned(),
                        st.kind.kind_name().to_owned(),
                        printable(&table_next(wf, st)).into_owned(),
                    ]
                })
                .collect();
            let next_w = rows
                .iter()
                .map(|r| r[2].chars().count())
                .max()
                .unwrap_or(0)
                .max(20);
            let mut t = Table::new(&[15, 10, next_w]);
            t.header(&["STEP", "TYPE", "NEXT"]);
            for r in &rows {
                t.row(r);
            }
            t.sep();
            out.push_str(t.text());
        }
    }
    if !errors.is_empty() || !warnings.is_empty() {
        out.push('\n');
        for e in errors {
            out.push_str(&format!("ERROR: {}\n", printable_text(e)));
        }
        for w in warnings {
            out.push_str(&format!("WARNING: {}\n", printable_text(w)));
        }
    }
    out
}

/// The NEXT cell of `-f table`'s state table: every route out of the state, compactly, in
/// the order the engine tries them: `when: t` per conditional transition, `default: t` for
/// one without `when`, then the success route bare (a loop's `on_complete`, its `on_success`
/// when it has none, as the engine falls back; any other state's `on_success`), then
/// `on_failure: t` (an inline `on_failure` is `a's on_failure`, as the run calls it).
/// `(terminal)` for a terminal; `—` for a state with no route (a name no state can have, so
/// it reads apart from a state named `none` or `-`).
fn table_next(wf: &awf_domain::workflow::Workflow, st: &awf_domain::workflow::State) -> String {
    use awf_domain::workflow::StateKind;
    let success = match &st.kind {
        StateKind::Terminal(_) => return "(terminal)".to_owned(),
        StateKind::Loop(l) => l.on_complete.as_ref().or(st.on_success.as_ref()),
        StateKind::Command(_)
        | StateKind::Agent(_)
        | StateKind::Parallel(_)
        | StateKind::Operation(_)
        | StateKind::CallWorkflow(_) => st.on_success.as_ref(),
    };
    let mut routes: Vec<String> = st
        .transitions
        .iter()
        .map(|t| {
            let label = if t.when.is_some() { "when" } else { "default" };
            format!("{label}: {}", wf.display_name(&t.goto))
        })
        .collect();
    routes.extend(success.map(|s| wf.display_name(s)));
    routes.extend(
        st.on_failure
            .as_ref()
            .map(|f| format!("on_failure: {}", wf.display_name(f))),
    );
    if routes.is_empty() {
        "—".to_owned()
    } else {
        routes.join(", ")
    }
}

fn load_failure(ctx: &Ctx, identifier: &str, e: &AwfError) -> Outcome {
    if ctx.json() {
        // AWF (Go)'s JSON error on stderr; the report on stdout stays (ours).
        let _ = std::io::stderr()
            .lock()
            .write_all(format!("{:#}\n", errors::render_json(e)).as_bytes());
        let d = e.details();
        let printed = json_out::print(&json!({
            "valid": false,
            "workflow": identifier,
            "errors": [e.message()],
            "diagnostics": [{
                "severity": "error",
                "code": e.code(),
                "path": d.get("path").cloned().unwrap_or_else(|| json!("")),
                "message": e.message(),
                "hint": e.hints().first(),
                "file": d.get("file"),
                "line": d.get("line"),
                "column": d.get("column"),
            }],
        }));
        if let Err(w) = printed {
            return errors::report(&w.into(), true, ctx.hints, ctx.err_style);
        }
    } else {
        // `-f quiet` gives its verdict here too (trial 77: nothing on stdout), the error
        // saying why on stderr.
        if ctx.format == Format::Quiet {
            crate::stdout_check::checked(writeln!(std::io::stdout().lock(), "invalid"));
        }
        let text = errors::render_text(e, ctx.hints, ctx.err_style);
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }
    Outcome::Reported(e.code())
}

#[cfg(test)]
mod tests {
    use super::*;
    use awf_domain::ErrorCode;
    use std::path::PathBuf;

    #[test]
    fn diagnostic_line_has_position_code_path_and_hint() {
        let mut d = Diagnostic::error(
            ErrorCode::WorkflowValidationMissingState,
            "states.a.on_success",
            "unknown state 'proces'",
        )
        .with_hint("did you mean 'process'?");
        d.file = Some(PathBuf::from("/w/x.yaml"));
        d.line = Some(7);
        d.column = Some(17);
        assert_eq!(
            render_diagnostic(&d, "x", false, true, Style::plain()),
            "/w/x.yaml:7:17: error [WORKFLOW.VALIDATION.MISSING_STATE] states.a.on_success: unknown state 'proces'\n  Hint: did you mean 'process'?\n"
        );
    }

    #[test]
    fn table_next_shows_a_loops_on_complete() {
        use awf_domain::workflow::{
            CommandSource, CommandStep, LoopOver, LoopStep, MaxIterations, State, StateKind,
        };
        let looping = |over: LoopOver, on_complete: Option<&str>| {
            StateKind::Loop(LoopStep {
                over,
                body: vec!["b".to_owned()],
                max_iterations: MaxIterations::Static(0),
                break_when: None,
                on_complete: on_complete.map(str::to_owned),
            })
        };
        let w = awf_domain::workflow::Workflow {
            name: "t".into(),
            version: None,
            description: None,
            author: None,
            tags: Vec::new(),
            inputs: Vec::new(),
            env: Vec::new(),
            initial: "l".into(),
            states: Default::default(),
            hooks: Default::default(),
            outputs: Vec::new(),
            shell_quote: false,
            budget: None,
            source: Default::default(),
        };
        let each = State::new("l", looping(LoopOver::Items("a,b".to_owned()), Some("par")));
        assert_eq!(table_next(&w, &each), "par");
        let mut whiles = State::new("w", looping(LoopOver::While("true".to_owned()), Some("x")));
        whiles.on_success = Some("ignored".to_owned());
        assert_eq!(table_next(&w, &whiles), "x");
        let mut fallback = State::new("w", looping(LoopOver::While("true".to_owned()), None));
        assert_eq!(table_next(&w, &fallback), "—");
        fallback.on_success = Some("after".to_owned());
        assert_eq!(table_next(&w, &fallback), "after");
        let mut cmd = State::new(
            "c",
            StateKind::Command(CommandStep {
                source: CommandSource::Inline("true".to_owned()),
                dir: None,
            }),
        );
        assert_eq!(table_next(&w, &cmd), "—");
        cmd.on_success = Some("done".to_owned());
        assert_eq!(table_next(&w, &cmd), "done");
        assert_eq!(
            table_next(&w, &State::success_terminal("done")),
            "(terminal)"
        );
    }

    /// A warning that the run fails where it applies changes the summary from "valid" (new
    /// user: `provider: claud` validated as valid); other warnings keep it.
    #[test]
    fn the_summary_says_the_run_will_fail_after_such_a_warning() {
        let plain = Diagnostic::warning(ErrorCode::WorkflowValidationInvalidState, "x", "y");
        assert_eq!(valid_summary("wf", &[]), "Workflow 'wf' is valid");
        assert_eq!(
            valid_summary("wf", std::slice::from_ref(&plain)),
            "Workflow 'wf' is valid (1 warning)"
        );
        let failing = |path: &str| {
            Diagnostic::warning(
                ErrorCode::UserAgentUnknownProvider,
                path,
                "unknown provider",
            )
            .failing_the_run()
        };
        assert_eq!(
            valid_summary("wf", &[plain, failing("states.a.provider")]),
            "Workflow 'wf' has no errors, but its run will fail at states.a.provider (2 warnings)"
        );
        let many: Vec<Diagnostic> = [
            "states.a.provider",
            "states.b.provider",
            "states.a.provider",
            "states.c.inputs",
            "states.d.inputs",
        ]
        .iter()
        .map(|p| failing(p))
        .collect();
        assert_eq!(
            valid_summary("wf", &many),
            "Workflow 'wf' has no errors, but its run will fail at states.a.provider, \
             states.b.provider, states.c.inputs and 1 more (5 warnings)"
        );
    }

    /// `-f table` escapes control characters in the name and the messages (breaker: a
    /// warning about an unknown key `x\e]0;pwn\a` retitled the terminal).
    #[test]
    fn the_table_escapes_control_characters() {
        let out = render_table(
            None,
            "n\u{1b}[2J",
            false,
            &["e\u{1b}[31m\nnext".to_owned()],
            &["x\u{1b}]0;pwn\u{7}: unknown field".to_owned()],
        );
        assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out:?}");
        assert!(
            out.contains("Workflow: n\\u{1b}[2J    Status: invalid"),
            "{out}"
        );
        assert!(out.contains("ERROR: e\\u{1b}[31m\nnext\n"), "{out}");
        assert!(
            out.contains("WARNING: x\\u{1b}]0;pwn\\u{7}: unknown field\n"),
            "{out}"
        );
    }

    #[test]
    fn strict_turns_unknown_fields_into_errors() {
        let d = Diagnostic::warning(
            ErrorCode::WorkflowParseUnknownField,
            "states.a.foo",
            "unknown key 'foo'",
        );
        assert_eq!(effective(&d, false), Severity::Warning);
        assert_eq!(effective(&d, true), Severity::Error);
        assert_eq!(
            render_diagnostic(&d, "wf", true, true, Style::plain()),
            "wf: error [WORKFLOW.PARSE.UNKNOWN_FIELD] states.a.foo: unknown key 'foo'\n"
        );
        let other = Diagnostic::warning(ErrorCode::WorkflowValidationInvalidReference, "x", "y");
        assert_eq!(effective(&other, true), Severity::Warning);
    }
}
