//! `.awf/config.yaml` (or `$AWF_CONFIG_PATH`): project inputs and settings.
//!
//! Keys: `inputs` (map of typed values, lower precedence than `--input`), the known settings
//! `version`, `log_level`, `output_format`, `notify`, `telemetry` (kept as written), anything
//! else is an unknown-field warning. Source: spec/workflow.md §1.4, §3.13.

use std::path::Path;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::repository::Diagnostic;
use awf_domain::ports::repository::ProjectConfig;

use crate::errors_to_error;
use crate::fields::Diags;
use crate::fields::closest;
use crate::node::parse_document;

const KNOWN: [&str; 6] = [
    "inputs",
    "version",
    "log_level",
    "output_format",
    "notify",
    "telemetry",
];

/// Decodes configuration text read from `path`.
///
/// A broken configuration is the user's to fix, not a workflow's: as in AWF (Go) (where it
/// exits 1), every failure is `USER.INPUT.INVALID_FORMAT` (exit 1), its message prefixed
/// `project configuration: `, keeping the syntax error's `file`, `line`, `column` details and
/// hints.
///
/// # Errors
/// `USER.INPUT.INVALID_FORMAT` with `file`, `line`, `column` when the text is not valid YAML
/// or is not a mapping, or `inputs:` is not a mapping.
pub fn parse_config(text: &str, path: &Path) -> Result<ProjectConfig, AwfError> {
    parse_config_inner(text, path).map_err(as_config_error)
}

/// `err` (a parse error of the configuration) as a `USER.INPUT.INVALID_FORMAT` error with
/// the same details and hints.
pub(crate) fn as_config_error(err: AwfError) -> AwfError {
    let mut out = AwfError::new(
        ErrorCode::UserInputInvalidFormat,
        format!("project configuration: {}", err.message()),
    );
    for (k, v) in err.details() {
        out = out.with_detail(k.clone(), v.clone());
    }
    for h in err.hints() {
        out = out.with_hint(h.clone());
    }
    out
}

fn parse_config_inner(text: &str, path: &Path) -> Result<ProjectConfig, AwfError> {
    let mut d = Diags::new(Some(path.to_path_buf()));
    let root = match parse_document(text) {
        Ok(n) => n,
        Err(e) => {
            d.syntax("", Some(e.pos), e.message).hint = e.hint;
            return Err(errors_to_error(&d.list).unwrap_or_else(|| {
                AwfError::new(ErrorCode::WorkflowParseYamlSyntax, "invalid YAML")
            }));
        }
    };
    let mut cfg = ProjectConfig {
        path: Some(path.to_path_buf()),
        ..ProjectConfig::default()
    };
    if root.is_null() {
        return Ok(cfg);
    }
    let Some(entries) = root.entries() else {
        d.wrong_type("", &root, "a mapping");
        return Err(errors_to_error(&d.list).unwrap_or_else(|| {
            AwfError::new(ErrorCode::WorkflowParseYamlSyntax, "invalid config")
        }));
    };
    for e in entries {
        match e.key.as_str() {
            "inputs" => {
                if e.value.is_null() {
                    continue;
                }
                match e.value.entries() {
                    Some(inputs) => {
                        for i in inputs {
                            cfg.inputs.insert(i.key.clone(), i.value.to_json());
                        }
                    }
                    None => d.wrong_type("inputs", &e.value, "a mapping of input values"),
                }
            }
            k if KNOWN.contains(&k) => {
                cfg.other.insert(e.key.clone(), e.value.to_json());
            }
            _ => {
                let hint = closest(&e.key, KNOWN).map(|c| format!("did you mean '{c}'?"));
                d.push(
                    Diagnostic::warning(
                        ErrorCode::WorkflowParseUnknownField,
                        &e.key,
                        format!("unknown config key \"{}\"", e.key),
                    ),
                    Some(e.key_pos),
                )
                .hint = hint;
            }
        }
    }
    if let Some(err) = errors_to_error(&d.list) {
        return Err(err);
    }
    cfg.diagnostics = d.list;
    Ok(cfg)
}
