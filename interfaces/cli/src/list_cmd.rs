//! `awf list`: every workflow the repository can find (env path, project, global).
//!
//! Text: an aligned table `NAME  SOURCE  VERSION  DESCRIPTION` on stdout; JSON: an array of
//! `{"name", "source", "path", "version", "description"}`. A workflow that does not load or
//! does not pass validation is marked: its description reads `BROKEN: [CODE] message` (the
//! first error; `awf validate <name>` shows all of them) and its JSON object carries `"error"`.
//!
//! Source: spec/workflow.md §4.2.

use std::io::Write;

use awf_domain::ports::WorkflowRepository;
use awf_domain::ports::repository::WorkflowEntry;

use crate::ctx::Ctx;
use crate::errors::CliError;
use crate::errors::Outcome;
use crate::json_out;
use crate::wiring;

/// Formats entries as an aligned table (header included), or a one-line notice when empty.
pub fn render_table(entries: &[WorkflowEntry]) -> String {
    if entries.is_empty() {
        return "No workflows found (looked in $AWF_WORKFLOWS_PATH, .awf/workflows and the global config dir).\n"
            .to_owned();
    }
    let rows: Vec<[String; 4]> = entries
        .iter()
        .map(|e| {
            [
                e.name.clone(),
                e.source.clone(),
                e.version.clone().unwrap_or_default(),
                match &e.error {
                    Some(err) => format!("BROKEN: {}", err.lines().next().unwrap_or("")),
                    None => e
                        .description
                        .clone()
                        .unwrap_or_default()
                        .lines()
                        .next()
                        .unwrap_or("")
                        .to_owned(),
                },
            ]
        })
        .collect();
    let header = ["NAME", "SOURCE", "VERSION", "DESCRIPTION"].map(str::to_owned);
    let mut widths = [0usize; 3];
    for r in std::iter::once(&header).chain(rows.iter()) {
        for (i, w) in widths.iter_mut().enumerate() {
            *w = (*w).max(r[i].chars().count());
        }
    }
    let mut out = String::new();
    for r in std::iter::once(&header).chain(rows.iter()) {
        let line = format!(
            "{:w0$}  {:w1$}  {:w2$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Runs `awf list`.
///
/// # Errors
/// `SYSTEM.IO.READ_FAILED` when a workflow directory cannot be read.
pub fn run(ctx: &Ctx) -> Result<Outcome, CliError> {
    let w = wiring::build(ctx.storage.as_deref())?;
    let mut entries = w.repository.list()?;
    for e in entries.iter_mut().filter(|e| e.error.is_none()) {
        let ident = e.path.display().to_string();
        e.error = match awf_application::validate_workflow(&w.services, &ident, &w.env) {
            Ok(report) => report
                .diagnostics
                .iter()
                .find(|d| d.severity == awf_domain::ports::repository::Severity::Error)
                .map(|d| format!("[{}] {}", d.code, d.message)),
            Err(err) => {
                // The entry names the file: the message need not repeat it.
                let prefix = format!("{ident}: ");
                let msg = err.message().strip_prefix(&prefix).unwrap_or(err.message());
                Some(format!("[{}] {msg}", err.code()))
            }
        };
    }
    if ctx.json() {
        json_out::print(&entries)?;
    } else {
        let _ = std::io::stdout()
            .lock()
            .write_all(render_table(&entries).as_bytes());
    }
    Ok(Outcome::Success)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn table_is_aligned() {
        let e = |n: &str, v: Option<&str>, d: Option<&str>| WorkflowEntry {
            name: n.into(),
            source: "local".into(),
            path: PathBuf::from(format!("/w/{n}.yaml")),
            version: v.map(Into::into),
            description: d.map(Into::into),
            error: None,
        };
        assert_eq!(
            render_table(&[
                e("a", Some("1.0.0"), Some("First\nmore")),
                e("longer-name", None, None)
            ]),
            "NAME         SOURCE  VERSION  DESCRIPTION\na            local   1.0.0    First\nlonger-name  local\n"
        );
    }

    #[test]
    fn broken_entries_are_marked() {
        let e = WorkflowEntry {
            name: "bad".into(),
            source: "local".into(),
            path: PathBuf::from("/w/bad.yaml"),
            version: None,
            description: Some("would be shown".into()),
            error: Some("[WORKFLOW.PARSE.YAML_SYNTAX] bad indentation\nmore".into()),
        };
        assert_eq!(
            render_table(&[e]),
            "NAME  SOURCE  VERSION  DESCRIPTION\nbad   local            BROKEN: [WORKFLOW.PARSE.YAML_SYNTAX] bad indentation\n"
        );
    }
}
