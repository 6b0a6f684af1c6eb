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

const KNOWN: [&str; 7] = [
    "inputs",
    "prices",
    "version",
    "log_level",
    "output_format",
    "notify",
    "telemetry",
];

/// `prices: {<model>: {input_per_mtok, output_per_mtok}}`: US dollars per million tokens,
/// each a number >= 0 (a missing one is 0).
fn decode_prices(n: &crate::node::Node, out: &mut awf_domain::run::Prices, d: &mut Diags) {
    if n.is_null() {
        return;
    }
    let Some(models) = n.entries() else {
        d.wrong_type("prices", n, "a mapping of model names to prices");
        return;
    };
    for m in models {
        let path = format!("prices.{}", m.key);
        let Some(fields) = m.value.entries() else {
            d.wrong_type(
                &path,
                &m.value,
                "a mapping {input_per_mtok, output_per_mtok}",
            );
            continue;
        };
        let mut price = awf_domain::run::ModelPrice::default();
        for f in fields {
            let fpath = format!("{path}.{}", f.key);
            let slot = match f.key.as_str() {
                "input_per_mtok" => &mut price.input_per_mtok,
                "output_per_mtok" => &mut price.output_per_mtok,
                _ => {
                    d.invalid(&fpath, Some(f.key_pos), format!("unknown price key \"{}\"", f.key))
                        .hint = Some("a price has input_per_mtok and output_per_mtok (US dollars per million tokens)".to_owned());
                    continue;
                }
            };
            match d.float(&f.value, &fpath) {
                Some(v) if v >= 0.0 && v.is_finite() => *slot = v,
                Some(_) => {
                    d.invalid(&fpath, Some(f.value.pos), "a price must be a number >= 0");
                }
                None => {}
            }
        }
        out.0.insert(m.key.clone(), price);
    }
}

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
                            // A null is "not set": the workflow's default applies (breaker:
                            // `dir: null` replaced the default with no value and skipped
                            // the input's validation).
                            if i.value.is_null() {
                                cfg.inputs.remove(&i.key);
                                if !cfg.unset_inputs.contains(&i.key) {
                                    cfg.unset_inputs.push(i.key.clone());
                                }
                            } else {
                                cfg.unset_inputs.retain(|k| *k != i.key);
                                cfg.inputs.insert(i.key.clone(), i.value.to_json());
                            }
                        }
                    }
                    None => d.wrong_type("inputs", &e.value, "a mapping of input values"),
                }
            }
            "prices" => decode_prices(&e.value, &mut cfg.prices, &mut d),
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

#[cfg(test)]
mod price_tests {
    use super::*;

    #[test]
    fn prices_are_read_per_model_and_bad_ones_are_config_errors() {
        let cfg = parse_config(
            "prices:\n  gpt-4o: {input_per_mtok: 2.5, output_per_mtok: 10}\n  local: {input_per_mtok: 0}\n",
            Path::new("/p/.awf/config.yaml"),
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        let p = cfg.prices.0.get("gpt-4o").copied().unwrap_or_default();
        assert_eq!((p.input_per_mtok, p.output_per_mtok), (2.5, 10.0));
        assert!(cfg.prices.0.contains_key("local"));
        for bad in [
            "prices: 3\n",
            "prices:\n  m: {input_per_mtok: -1}\n",
            "prices:\n  m: {input: 1}\n",
            "prices:\n  m: cheap\n",
        ] {
            let e = parse_config(bad, Path::new("/p/.awf/config.yaml")).expect_err(bad);
            assert_eq!(e.code(), ErrorCode::UserInputInvalidFormat, "{bad}");
        }
    }
}

#[cfg(test)]
mod unset_input_tests {
    use super::*;

    /// Breaker: `inputs: {dir: null, n: ~}` replaced the workflow's defaults with no value.
    /// A null is "not set": left out of `inputs`, listed in `unset_inputs`; a later value
    /// for the same name wins either way.
    #[test]
    fn a_null_config_input_is_not_set() {
        let cfg = parse_config(
            "inputs:\n  dir: null\n  n: ~\n  e:\n  s: 'null'\n  k: 1\n",
            Path::new("/p/.awf/config.yaml"),
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            serde_json::Value::Object(cfg.inputs),
            serde_json::json!({"s": "null", "k": 1})
        );
        assert_eq!(cfg.unset_inputs, ["dir", "n", "e"]);
    }
}
