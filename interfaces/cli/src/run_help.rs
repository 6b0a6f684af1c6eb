//! `awf run <workflow> --help`: the workflow's description and input parameters, then the
//! usual `run` help, as AWF (Go) shows them.
//!
//! Layout (stdout):
//! ```text
//! Description: <description>        (and a blank line; only when the workflow has one)
//!
//! Input Parameters:
//!   NAME    TYPE     REQUIRED  DEFAULT  DESCRIPTION
//!   branch  string   yes       -        Git branch to deploy
//!   count   integer  no        30       No description
//!
//! <clap's help for `awf run`>
//! ```
//! Columns are padded to their widest cell plus two spaces. `REQUIRED` is `yes`/`no`, `DEFAULT`
//! is `-` when none, `""` for the empty string, `***` for any other value of a secret-named
//! input; a value the project config's `inputs:` gives replaces the default, marked `(from
//! .awf/config.yaml)`, and makes the input not required (`no`), as the run takes it;
//! `DESCRIPTION` is trimmed (`No
//! description` when empty). Without inputs the section is the line `No input parameters`.
//! When an input has `validation` rules, a `RULES` column before `DESCRIPTION` shows each
//! input's (`one of dev|prod`, `matches ^v[0-9]+$`, `1..10`, `>= 1`, `<= 10`, `existing
//! file`, `extension .yaml|.yml`, `, `-separated; `-` for none; a value holding `|`, `,`,
//! white space or nothing in JSON quotes; at most 12 values of an enum, then `… (N more)`);
//! AWF (Go) has no such column. Widths are terminal columns (a CJK character takes two).
//!
//! Unlike AWF (Go) (which prints generic help and exits 0), a workflow that cannot be found
//! or loaded is an error reported as `awf run` reports it, with its usual exit code
//! (docs/compatibility.md).

use std::io::Write;

use awf_domain::workflow::InputDef;
use awf_domain::workflow::InputType;
use awf_domain::workflow::InputValidation;
use awf_domain::workflow::Workflow;

use crate::cli::Cli;
use crate::cli::Command;
use crate::ctx::Ctx;
use crate::errors;
use crate::errors::CliError;
use crate::wiring;

/// When `args` (program name first) ask for `awf run <workflow> --help` (or `-h`), the
/// parsed command line without the help flag; `None` otherwise (then clap's own help stands).
pub fn wanted(args: &[std::ffi::OsString]) -> Option<Cli> {
    let is_help = |a: &std::ffi::OsString| a == "--help" || a == "-h";
    if !args.iter().any(is_help) {
        return None;
    }
    let rest: Vec<std::ffi::OsString> = args.iter().filter(|a| !is_help(a)).cloned().collect();
    let cli = crate::cli::parse_from(&rest).ok()?;
    matches!(cli.command, Command::Run(_)).then_some(cli)
}

/// Prints the help of `awf run <workflow>` for `cli` (see the module doc), `run_help` (clap's
/// rendered help of `awf run`) after the workflow part, and returns the exit code: 0, or the
/// load error's category code (1 user, 2 workflow, …) after reporting the error on stderr
/// (JSON with `-f json`).
pub fn print(cli: &Cli, run_help: &str) -> u8 {
    let Command::Run(args) = &cli.command else {
        return 0;
    };
    let ctx = Ctx::from_cli(cli);
    let loaded = wiring::build(cli.storage.as_deref()).and_then(|w| {
        // The project config's `inputs:` give values as a default does (a config that
        // cannot be read is `awf run`'s to report).
        let config = w.config().map(|c| c.inputs).unwrap_or_default();
        awf_domain::ports::WorkflowRepository::load(w.repository.as_ref(), &args.workflow, None)
            .map(|l| (l, config))
    });
    match loaded {
        Ok((l, config)) => {
            let mut text = render(&l.workflow, &config);
            text.push('\n');
            text.push_str(run_help);
            crate::stdout_check::checked(std::io::stdout().lock().write_all(text.as_bytes()));
            0
        }
        Err(e) => {
            let outcome = errors::report(&CliError::Awf(e), ctx.json(), ctx.hints, ctx.err_style);
            errors::exit_code(&outcome)
        }
    }
}

/// Where a value the project config gives is said to come from, in the `DEFAULT` column.
pub const FROM_CONFIG: &str = "(from .awf/config.yaml)";

/// The workflow part of the help: description and the input parameter table. An input the
/// project config's `inputs:` (`config`) gives a value is not required (`REQUIRED` is `no`)
/// and its `DEFAULT` is that value, marked [`FROM_CONFIG`], as the run takes it.
pub fn render(wf: &Workflow, config: &serde_json::Map<String, serde_json::Value>) -> String {
    let mut out = String::new();
    if let Some(d) = wf
        .description
        .as_deref()
        .map(str::trim)
        .filter(|d| !d.is_empty())
    {
        out.push_str(&format!(
            "Description: {}\n\n",
            crate::style::printable_text(d)
        ));
    }
    if wf.inputs.is_empty() {
        out.push_str("No input parameters\n");
        return out;
    }
    out.push_str("Input Parameters:\n");
    // The RULES column only when an input has a rule: otherwise AWF (Go)'s table.
    let with_rules = wf.inputs.iter().any(|d| !rules(&d.validation).is_empty());
    let mut head: Vec<String> = ["NAME", "TYPE", "REQUIRED", "DEFAULT"]
        .map(String::from)
        .to_vec();
    if with_rules {
        head.push("RULES".into());
    }
    head.push("DESCRIPTION".into());
    let mut rows: Vec<Vec<String>> = vec![head];
    rows.extend(wf.inputs.iter().map(|d| {
        let from_config = config.get(&d.name).filter(|v| !v.is_null());
        row(d, from_config, with_rules)
    }));
    // Terminal columns, not characters: a CJK character takes two (trial: the columns after
    // a Japanese description or enum value were shifted).
    let width = |t: &str| unicode_width::UnicodeWidthStr::width(t);
    let mut widths = vec![0usize; rows[0].len()];
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(width(cell));
        }
    }
    for r in &rows {
        let mut line = String::from("  ");
        for (i, cell) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(cell);
            } else {
                let pad = widths[i].saturating_sub(width(cell)) + 2;
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// An input's `validation` rules in a few words, `, `-separated (empty without any):
/// `one of dev|prod`, `matches <pattern>`, `1..10` (or `>= 1`, `<= 10`), `existing file`,
/// `extension .yaml|.yml`.
fn rules(v: &InputValidation) -> String {
    let mut parts = Vec::new();
    if !v.enum_values.is_empty() {
        parts.push(format!("one of {}", choices(&v.enum_values)));
    }
    if let Some(p) = &v.pattern {
        parts.push(format!("matches {p}"));
    }
    match (v.min, v.max) {
        // `{}` writes `10.0` as `10`.
        (Some(lo), Some(hi)) => parts.push(format!("{lo}..{hi}")),
        (Some(lo), None) => parts.push(format!(">= {lo}")),
        (None, Some(hi)) => parts.push(format!("<= {hi}")),
        (None, None) => {}
    }
    if v.file_exists {
        parts.push("existing file".to_owned());
    }
    if !v.file_extension.is_empty() {
        parts.push(format!("extension {}", choices(&v.file_extension)));
    }
    parts.join(", ")
}

/// Most values an enum shows in the table; past it, how many more there are.
const SHOWN_CHOICES: usize = 12;

/// `values` `|`-separated, each that holds a `|`, a `,`, white space or nothing in JSON
/// quotes (`a|"x|y"|""`), and at most [`SHOWN_CHOICES`] of them, then `|… (N more)`: an enum
/// of 200 values made a line of 1,000 columns (trial).
fn choices(values: &[String]) -> String {
    let one = |v: &String| {
        if v.is_empty() || v.contains(['|', ',', '"']) || v.chars().any(char::is_whitespace) {
            serde_json::Value::String(v.clone()).to_string()
        } else {
            v.clone()
        }
    };
    let mut out: Vec<String> = values.iter().take(SHOWN_CHOICES).map(one).collect();
    if values.len() > SHOWN_CHOICES {
        out.push(format!("… ({} more)", values.len() - SHOWN_CHOICES));
    }
    out.join("|")
}

fn row(def: &InputDef, from_config: Option<&serde_json::Value>, with_rules: bool) -> Vec<String> {
    let ty = match &def.ty {
        InputType::Untyped | InputType::String => "string".to_owned(),
        InputType::Integer => "integer".to_owned(),
        InputType::Number => "number".to_owned(),
        InputType::Boolean => "boolean".to_owned(),
        InputType::Array => "array".to_owned(),
        InputType::Unknown(t) => t.clone(),
    };
    let default = match from_config.or(def.default.as_ref()) {
        None | Some(serde_json::Value::Null) => "-".to_owned(),
        Some(v) if awf_domain::mask::hides_named(&def.name, v) => awf_domain::mask::MASK.to_owned(),
        // The empty value as JSON gives it (`GET /api/workflows/{scope}/{name}`), not a
        // blank cell; an empty secret has nothing to hide.
        Some(serde_json::Value::String(s)) if s.is_empty() => "\"\"".to_owned(),
        Some(serde_json::Value::String(s)) => s.replace('\n', "\\n"),
        Some(v) => v.to_string(),
    };
    let default = match from_config {
        Some(_) => format!("{default} {FROM_CONFIG}"),
        None => default,
    };
    let required = def.required && from_config.is_none();
    let description = def
        .description
        .as_deref()
        .map(|d| d.trim().replace('\n', " "))
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "No description".to_owned());
    // Text from the workflow file, escaped for the terminal (control and bidirectional
    // formatting characters; breaker).
    let shown = |t: &str| crate::style::printable(t).into_owned();
    let mut cells = vec![
        shown(&def.name),
        shown(&ty),
        if required { "yes" } else { "no" }.to_owned(),
        shown(&default),
    ];
    if with_rules {
        let r = rules(&def.validation);
        cells.push(if r.is_empty() {
            "-".to_owned()
        } else {
            shown(&r)
        });
    }
    cells.push(shown(&description));
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_told_in_a_few_words() {
        let mut v = InputValidation::default();
        assert_eq!(rules(&v), "");
        v.enum_values = vec!["a".into(), "b".into()];
        v.min = Some(1.0);
        assert_eq!(rules(&v), "one of a|b, >= 1");
        v.enum_values.clear();
        v.min = None;
        v.max = Some(2.5);
        v.pattern = Some("^x".into());
        v.file_exists = true;
        v.file_extension = vec![".go".into()];
        assert_eq!(
            rules(&v),
            "matches ^x, <= 2.5, existing file, extension .go"
        );
    }

    #[test]
    fn a_value_the_project_config_gives_is_the_default_and_not_required() {
        let yaml = "name: pipeline\ninputs:\n  - {name: cc, required: true}\n  - {name: tag, required: true}\n  - {name: api_token, required: true}\nstates:\n  initial: done\n  done: {type: terminal}\n";
        let wf = awf_yaml::parse_workflow(yaml, None, Default::default())
            .unwrap()
            .workflow;
        let config =
            serde_json::json!({"cc": "gcc", "api_token": "s3cr3t-value", "version": "v4.2"});
        let text = render(&wf, config.as_object().unwrap());
        let rows: Vec<Vec<&str>> = text
            .lines()
            .skip(2)
            .map(|l| {
                l.split("  ")
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .collect()
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                vec![
                    "cc",
                    "string",
                    "no",
                    "gcc (from .awf/config.yaml)",
                    "No description"
                ],
                vec!["tag", "string", "yes", "-", "No description"],
                vec![
                    "api_token",
                    "string",
                    "no",
                    "*** (from .awf/config.yaml)",
                    "No description"
                ],
            ],
            "{text}"
        );
        assert!(!text.contains("version"), "{text}");
    }

    #[test]
    fn a_run_help_with_a_workflow_is_recognised_and_others_are_not() {
        let os = |v: &[&str]| v.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        let cli = wanted(&os(&["awf", "run", "deploy", "--help"])).unwrap();
        let Command::Run(r) = cli.command else {
            panic!("not run")
        };
        assert_eq!(r.workflow, "deploy");
        assert!(wanted(&os(&["awf", "run", "-h", "-i", "a=1", "wf"])).is_some());
        assert!(wanted(&os(&["awf", "run", "--help"])).is_none());
        assert!(wanted(&os(&["awf", "validate", "wf", "--help"])).is_none());
        assert!(wanted(&os(&["awf", "run", "wf"])).is_none());
    }
}
