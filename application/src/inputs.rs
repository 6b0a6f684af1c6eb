//! Input resolution and validation at run start.
//!
//! Precedence, lowest first: the input's `default`, project config `inputs:`, `--input k=v`.
//! All problems are collected and reported together as one `USER.INPUT.VALIDATION_FAILED`.
//! Source: spec/workflow.md §1.4; unlike AWF (Go), validation failures exit 1 (decisions.md).

use std::path::Path;

use awf_domain::ports::Host;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::workflow::InputDef;
use awf_domain::workflow::InputType;
use awf_domain::workflow::Workflow;
use serde_json::Map;
use serde_json::Value;

/// The secret inputs that `awf resume` must be given again for a run recorded with `stored`
/// inputs: those stored masked (`***`, a secret name) that `wf` declares without a
/// `default` (one with a default gets its default; an undeclared one reaches no step), in
/// `stored`'s order. Source: README "Runs are recorded: resume".
pub fn secrets_to_give_again(wf: &Workflow, stored: &Map<String, Value>) -> Vec<String> {
    stored
        .iter()
        .filter(|(k, v)| {
            unstored_secret(k, v)
                && wf
                    .inputs
                    .iter()
                    .any(|i| i.name == **k && i.default.is_none())
        })
        .map(|(k, _)| k.clone())
        .collect()
}

/// Whether the recorded input `name: value` is a secret whose value was not stored (a secret
/// name, recorded masked as `***`).
pub fn unstored_secret(name: &str, value: &Value) -> bool {
    value.as_str() == Some(awf_domain::mask::MASK) && awf_domain::mask::is_secret_name(name)
}

/// [`secrets_to_give_again`] for a run of the workflow `identifier` recorded with `stored`
/// inputs, the workflow loaded through `repository`; every unstored secret input when it can
/// no longer be loaded (the resume then says what it needs). Loads nothing when no input is
/// an unstored secret.
pub fn secrets_to_ask_again(
    repository: &dyn awf_domain::ports::WorkflowRepository,
    identifier: &str,
    stored: &Map<String, Value>,
) -> Vec<String> {
    if !stored.iter().any(|(k, v)| unstored_secret(k, v)) {
        return Vec::new();
    }
    match repository.load(identifier, None) {
        Ok(loaded) => secrets_to_give_again(&loaded.workflow, stored),
        Err(_) => stored
            .iter()
            .filter(|(k, v)| unstored_secret(k, v))
            .map(|(k, _)| k.clone())
            .collect(),
    }
}

/// Builds the effective inputs of a run and validates them.
///
/// `cli` values are strings (last repeat wins); `config` values keep their YAML types.
/// Inputs not declared by the workflow are kept (recorded with the run; no template may name
/// them and no command gets them). Values are stored as
/// given: a CLI `count=3` stays the string `"3"` (templates print it the same way; expressions
/// coerce it).
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` naming each bad input and the rule it breaks
/// (`inputs.port: value 80 is below minimum 1024`), with an `--input` example as hint when a
/// required input is missing.
pub fn resolve_inputs(
    wf: &Workflow,
    cli: &[(String, String)],
    config: &Map<String, Value>,
    base_dir: &Path,
    host: &dyn Host,
) -> Result<Map<String, Value>, AwfError> {
    let mut values = Map::new();
    for def in &wf.inputs {
        if let Some(d) = &def.default {
            values.insert(def.name.clone(), d.clone());
        }
    }
    // A configuration input without a value is not set (the default applies); the project
    // configuration drops them, a queued run recorded before it did may still hold one.
    for (k, v) in config.iter().filter(|(_, v)| !v.is_null()) {
        values.insert(k.clone(), v.clone());
    }
    for (k, v) in cli {
        values.insert(k.trim().to_owned(), Value::String(v.trim().to_owned()));
    }

    let mut problems = Vec::new();
    let mut missing = Vec::new();
    let mut typed_values = Vec::new();
    for def in &wf.inputs {
        match values.get(&def.name) {
            None | Some(Value::Null) => {
                if def.required {
                    problems.push(format!("inputs.{}: required but not provided", def.name));
                    missing.push(def.name.clone());
                }
            }
            Some(v) => {
                if def.required && matches!(v, Value::String(s) if s.is_empty()) {
                    problems.push(format!("inputs.{}: required but empty", def.name));
                    continue;
                }
                match check_value(def, v, base_dir, host) {
                    Ok(Some(typed)) => typed_values.push((def.name.clone(), typed)),
                    Ok(None) => {}
                    Err(p) => {
                        // A secret-named input's value never shows in the error, on any path
                        // that checks inputs (`awf run --submit` printed it).
                        let text = value_text(v);
                        let p = if awf_domain::mask::is_secret_name(&def.name) && !text.is_empty() {
                            // Quoted wherever it is shown so; anywhere once it is long enough
                            // not to match inside the rule's own words.
                            let p = p.replace(&format!("\"{text}\""), "\"***\"");
                            if text.chars().count() >= 4 {
                                p.replace(&text, awf_domain::mask::MASK)
                            } else {
                                p
                            }
                        } else {
                            p
                        };
                        problems.push(format!("inputs.{}: {p}", def.name));
                    }
                }
            }
        }
    }
    // Undeclared inputs are recorded with the run too: none may nest deeper than a state
    // file reads back (the declared ones are checked with their rules above).
    for (k, v) in &values {
        if !wf.inputs.iter().any(|d| &d.name == k)
            && let Some(d) = awf_domain::json::too_deep(v)
        {
            problems.push(format!("inputs.{k}: {}", too_deep_problem(d)));
        }
    }
    if problems.is_empty() {
        for (k, v) in typed_values {
            values.insert(k, v);
        }
        return Ok(values);
    }
    let message = if problems.len() == 1 {
        format!("input validation failed: {}", problems[0])
    } else {
        let mut m = format!("input validation failed: {} errors:", problems.len());
        for p in &problems {
            m.push_str("\n  - ");
            m.push_str(p);
        }
        m
    };
    let mut err = AwfError::new(ErrorCode::UserInputValidationFailed, message);
    if !missing.is_empty() {
        let example: Vec<String> = missing
            .iter()
            .map(|n| format!("--input {}", awf_domain::shell::input_arg(n)))
            .collect();
        err = err.with_hint(format!("pass the missing inputs: {}", example.join(" ")));
    }
    for def in &wf.inputs {
        if !def.validation.enum_values.is_empty()
            && problems
                .iter()
                .any(|p| p.starts_with(&format!("inputs.{}:", def.name)))
        {
            err = err.with_hint(format!(
                "allowed values for {}: {}",
                def.name,
                def.validation.enum_values.join(", ")
            ));
        }
    }
    if problems.iter().any(|p| p.ends_with(TOO_DEEP_TAIL)) {
        err = err.with_hint(format!(
            "flatten the value (e.g. pass the inner part as a JSON string): a run records its \
             inputs in its state file, which must be read back, so awf takes values nested at \
             most {} levels deep",
            awf_domain::json::MAX_DEPTH
        ));
    }
    if err.hints().is_empty() {
        // Every refusal says where the rules are (breaker: a value over the OS's limit got
        // `"hints": []` over HTTP). Worded for the command line, as every hint here is;
        // awf-http says it as the workflow's route (`GET /api/workflows/{scope}/{name}`).
        err = err.with_hint(INPUTS_HELP_HINT);
    }
    Err(err)
}

/// The end of [`too_deep_problem`]'s text.
const TOO_DEEP_TAIL: &str = "levels deep";

/// The rule a value nested deeper than [`awf_domain::json::MAX_DEPTH`] breaks.
fn too_deep_problem(depth: usize) -> String {
    format!(
        "the value nests arrays or objects {depth} levels deep; awf takes at most {} {TOO_DEEP_TAIL}",
        awf_domain::json::MAX_DEPTH
    )
}

/// The hint of a refused input value that says where each input's type and rules are
/// listed, for the command line (awf-http says it as `GET /api/workflows/{scope}/{name}`).
pub const INPUTS_HELP_HINT: &str =
    "`awf run <workflow> --help` lists each input with its type and rules";

/// [`INPUTS_HELP_HINT`] naming the workflow `identifier` (as `awf run` takes it, quoted for a
/// shell when it must be): `` `awf run deploy --help` lists each input with its type and
/// rules ``.
pub fn inputs_help_for(identifier: &str) -> String {
    INPUTS_HELP_HINT.replacen("<workflow>", &awf_domain::shell::quote_arg(identifier), 1)
}

/// `e` with its [`INPUTS_HELP_HINT`] (if it has it) said as `said`: each front-end names where
/// the inputs' rules are for the workflow that was run (new user: the hint said the literal
/// `awf run <workflow> --help`).
pub fn name_inputs_help(e: AwfError, said: &str) -> AwfError {
    e.map_hints(|h| {
        if h == INPUTS_HELP_HINT {
            said.to_owned()
        } else {
            h
        }
    })
}

/// Checks one value against an input's type and rules (interactive prompting re-asks on
/// error). Returns the value converted to the declared type.
///
/// # Errors
/// The rule it breaks, as text (`value "qa" not in allowed values [dev staging prod]`).
/// `base_dir` is where relative `file_exists` paths resolve; `host` answers whether they exist.
pub fn check_one(
    def: &InputDef,
    value: &str,
    base_dir: &Path,
    host: &dyn Host,
) -> Result<Value, String> {
    let v = Value::String(value.to_owned());
    if def.required && value.trim().is_empty() {
        return Err("a value is required".to_owned());
    }
    Ok(check_value(def, &v, base_dir, host)?.unwrap_or(v))
}

/// Names of required inputs that neither the CLI, the config nor a default provides.
pub fn missing_required(
    wf: &Workflow,
    cli: &[(String, String)],
    config: &Map<String, Value>,
) -> Vec<InputDef> {
    wf.inputs
        .iter()
        .filter(|d| {
            d.required
                && d.default.is_none()
                && config.get(&d.name).is_none_or(Value::is_null)
                && !cli.iter().any(|(k, _)| k.trim() == d.name)
        })
        .cloned()
        .collect()
}

fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Longest `NAME=value` the OS passes in one environment variable (Linux's
/// `MAX_ARG_STRLEN`, 32 pages of 4 KiB, its terminating NUL included).
const ENV_STRING_MAX: usize = 128 * 1024 - 1;

/// Whether a declared input's text can reach the steps: every declared input is given to
/// every command as an environment variable, so one holding a NUL byte or longer than the OS
/// takes in one variable would make every step fail to start (breaker: `awf serve` took
/// such values and the steps failed with a message that named neither the input nor the
/// limit).
fn exportable(name: &str, text: &str) -> Result<(), String> {
    if text.contains('\0') {
        return Err(
            "holds a NUL byte, which no process can be given (inputs reach the steps as \
             environment variables)"
                .to_owned(),
        );
    }
    let len = name.len() + 1 + text.len();
    if len > ENV_STRING_MAX {
        return Err(format!(
            "is {} bytes long: inputs reach the steps as environment variables, and the OS \
             takes at most 128 KiB in one; pass a large value through a file (its path as the \
             input)",
            text.len()
        ));
    }
    Ok(())
}

/// Checks `v` against the input's type and rules; returns the value converted to the
/// declared type (integer, number, boolean, array), `None` when it stays as given.
pub(crate) fn check_value(
    def: &InputDef,
    v: &Value,
    base_dir: &Path,
    host: &dyn Host,
) -> Result<Option<Value>, String> {
    if let Value::String(text) = v {
        exportable(&def.name, text)?;
    }
    let rules = &def.validation;
    let mut typed = None;
    let number: Option<f64> = match &def.ty {
        InputType::Integer => {
            let i = to_integer(v)?;
            typed = Some(Value::from(i));
            Some(i as f64)
        }
        InputType::Number => {
            let n = to_number(v)?;
            typed = Some(if n.fract() == 0.0 && n.abs() < 9.0e15 {
                Value::from(n as i64)
            } else {
                serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number)
            });
            Some(n)
        }
        InputType::Boolean => {
            typed = Some(Value::Bool(to_bool(v)?));
            None
        }
        InputType::Array => {
            typed = Some(Value::Array(to_array(v)?));
            None
        }
        InputType::Unknown(t) => {
            return Err(format!(
                "unknown type \"{t}\" (use string, integer, number, boolean or array)"
            ));
        }
        // A string input takes text (a number or a boolean as written); a JSON object or
        // list given through an API is refused rather than rendered (and left unmasked).
        InputType::String if matches!(v, Value::Object(_) | Value::Array(_)) => {
            let kind = if v.is_object() { "an object" } else { "a list" };
            return Err(format!("expected a string, not {kind}"));
        }
        InputType::String | InputType::Untyped => None,
    };
    if let Some(d) = typed
        .as_ref()
        .or(Some(v))
        .and_then(awf_domain::json::too_deep)
    {
        return Err(too_deep_problem(d));
    }
    if let Some(n) = number {
        if let Some(min) = rules.min
            && n < min
        {
            return Err(format!(
                "value {} is below minimum {}",
                fmt_num(n),
                fmt_num(min)
            ));
        }
        if let Some(max) = rules.max
            && n > max
        {
            return Err(format!(
                "value {} exceeds maximum {}",
                fmt_num(n),
                fmt_num(max)
            ));
        }
    }
    let text = as_text(v);
    if let Some(p) = &rules.pattern {
        let re = regex_lite(p)?;
        if !re.is_match(&text) {
            return Err(format!("value \"{text}\" does not match pattern \"{p}\""));
        }
    }
    if !rules.enum_values.is_empty() && !in_enum(def, &text, typed.as_ref()) {
        return Err(format!(
            "value \"{text}\" not in allowed values [{}]",
            rules.enum_values.join(" ")
        ));
    }
    if rules.file_exists {
        if text.is_empty() {
            return Err("file path is empty".to_owned());
        }
        let p = Path::new(&text);
        let full = if p.is_absolute() {
            p.to_path_buf()
        } else {
            base_dir.join(p)
        };
        if let Err(e) = host.metadata(&full) {
            // A path through a file (`f.yaml/`, `f.yaml/x`): that file is not a directory
            // (breaker: "file does not exist" for `fe.yaml/`, fe.yaml being a file).
            let mut prefix = std::path::PathBuf::new();
            for c in p.components() {
                prefix.push(c);
                let at = if p.is_absolute() {
                    prefix.clone()
                } else {
                    base_dir.join(&prefix)
                };
                if host.is_file(&at) {
                    return Err(format!(
                        "not a file path: {text} ({} is a file, not a directory)",
                        prefix.display()
                    ));
                }
            }
            match e.kind() {
                std::io::ErrorKind::NotFound => {}
                std::io::ErrorKind::PermissionDenied => {
                    return Err(format!(
                        "cannot check {text}: permission denied (a directory on its path cannot be searched)"
                    ));
                }
                _ => return Err(format!("cannot check {text}: {e}")),
            }
            // Say where a relative path was looked for (new user: the file was beside the
            // workflow, and the message did not say the check starts elsewhere).
            return Err(if p.is_absolute() {
                format!("file does not exist: {text}")
            } else {
                format!(
                    "file does not exist: {text} (looked for {}: a relative path is taken from the directory awf runs in)",
                    full.display()
                )
            });
        }
        // `file_exists` asks for a file: a directory is refused (AWF (Go) takes anything
        // that exists; docs/compatibility.md).
        if host.is_dir(&full) {
            return Err(format!(
                "{text} is a directory; the input names a file (file_exists)"
            ));
        }
    }
    if !rules.file_extension.is_empty() {
        let ext = Path::new(&text)
            .extension()
            .map(|e| format!(".{}", e.to_string_lossy()))
            .unwrap_or_default();
        if !rules.file_extension.contains(&ext) {
            return Err(format!(
                "file extension \"{ext}\" not in allowed extensions [{}]",
                rules.file_extension.join(" ")
            ));
        }
    }
    Ok(typed)
}

/// Whether a value is one of the input's `validation.enum`: its text as given (AWF's exact
/// match), or, for a typed input (integer, number, boolean), its converted value equal to an
/// allowed value converted the same way (`+2` and `02` are the integer 2 of `[1, 2, 3]`,
/// `yes` the `true` of `[true]`), as the value the steps see is the converted one.
fn in_enum(def: &InputDef, text: &str, typed: Option<&Value>) -> bool {
    let allowed = &def.validation.enum_values;
    if allowed.iter().any(|a| a == text) {
        return true;
    }
    let Some(typed) = typed else {
        return false;
    };
    let convert = |a: &str| -> Option<Value> {
        let v = Value::String(a.to_owned());
        match &def.ty {
            InputType::Integer => to_integer(&v).ok().map(Value::from),
            InputType::Boolean => to_bool(&v).ok().map(Value::Bool),
            InputType::Number => to_number(&v)
                .ok()
                .and_then(|n| serde_json::Number::from_f64(n).map(Value::Number)),
            InputType::Array | InputType::String | InputType::Untyped | InputType::Unknown(_) => {
                None
            }
        }
    };
    let same = |a: &Value| match (&def.ty, a, typed) {
        (InputType::Number, Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == typed,
    };
    allowed.iter().filter_map(|a| convert(a)).any(|a| same(&a))
}

fn fmt_num(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

fn to_integer(v: &Value) -> Result<i64, String> {
    match v {
        Value::Number(n) => n
            .as_i64()
            // A whole float (`3.0`, `-0`, `1e3`) inside i64's range; `1e20` is refused, not
            // saturated to i64::MAX.
            .or_else(|| {
                n.as_f64()
                    .filter(|f| {
                        f.fract() == 0.0
                            && (-9.223_372_036_854_775e18..9.223_372_036_854_775e18).contains(f)
                    })
                    .map(|f| f as i64)
            })
            .ok_or_else(|| {
                format!(
                    "cannot convert {n} to integer (a whole number from {} to {})",
                    i64::MIN,
                    i64::MAX
                )
            }),
        Value::String(s) => s.trim().parse::<i64>().map_err(|_| {
            format!("cannot convert \"{s}\" to integer (a whole number in decimal, e.g. 42 or -7)")
        }),
        other => Err(format!("cannot convert {other} to integer")),
    }
}

fn to_number(v: &Value) -> Result<f64, String> {
    match v {
        Value::Number(n) => n
            .as_f64()
            .ok_or_else(|| format!("cannot convert {n} to number")),
        Value::String(s) => s
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .ok_or_else(|| {
                format!(
                    "cannot convert \"{s}\" to number (a finite decimal number, e.g. 3, -0.5 or 1e3)"
                )
            }),
        other => Err(format!("cannot convert {other} to number")),
    }
}

fn to_bool(v: &Value) -> Result<bool, String> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            // YAML 1.1's words too, as a boolean field of the workflow takes them (breaker:
            // `default: no` was taken, `default: off` refused).
            "true" | "yes" | "y" | "on" | "1" => Ok(true),
            "false" | "no" | "n" | "off" | "0" => Ok(false),
            _ => Err(format!(
                "cannot convert \"{s}\" to boolean (true or false; yes/no, on/off, y/n and 1/0 are taken too)"
            )),
        },
        Value::Number(n) if n.as_i64() == Some(1) => Ok(true),
        Value::Number(n) if n.as_i64() == Some(0) => Ok(false),
        other => Err(format!("cannot convert {other} to boolean")),
    }
}

fn to_array(v: &Value) -> Result<Vec<Value>, String> {
    match v {
        Value::Array(a) => Ok(a.clone()),
        Value::String(s) => {
            let t = s.trim();
            if t.starts_with('[') {
                // New user: `[a,b,c]` got only the JSON parser's "expected value at line 1
                // column 2".
                serde_json::from_str::<Vec<Value>>(t).map_err(|e| {
                    format!(
                        "cannot convert \"{s}\" to array: a value starting with '[' is read as \
                         a JSON list, and this one is not ({e}); write the items quoted \
                         ([\"a\",\"b\"]) or separated by commas without brackets (a,b)"
                    )
                })
            } else if t.is_empty() {
                Ok(Vec::new())
            } else {
                Ok(t.split(',')
                    .map(|p| Value::String(p.trim().to_owned()))
                    .collect())
            }
        }
        other => Err(format!("cannot convert {other} to array")),
    }
}

/// Compiles an input `pattern` (RE2-compatible syntax via the `regex` crate).
fn regex_lite(p: &str) -> Result<regex::Regex, String> {
    regex::Regex::new(p).map_err(|e| format!("invalid pattern \"{p}\": {e}"))
}

/// The text of an input value as it may appear in a message: a string as is, anything else
/// as JSON.
fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use awf_domain::ports::fakes::FakeHost;
    use awf_domain::workflow::InputValidation;
    use indexmap::IndexMap;
    use pretty_assertions::assert_eq;

    /// The rules hint names the workflow that was run (quoted for a shell when it must be);
    /// other hints stay as they are.
    #[test]
    fn the_inputs_help_hint_names_the_workflow_run() {
        assert_eq!(
            inputs_help_for("deploy"),
            "`awf run deploy --help` lists each input with its type and rules"
        );
        assert_eq!(
            inputs_help_for("my flows/x.yaml"),
            "`awf run 'my flows/x.yaml' --help` lists each input with its type and rules"
        );
        let e = AwfError::new(ErrorCode::UserInputValidationFailed, "bad")
            .with_hint("allowed values for mode: a, b")
            .with_hint(INPUTS_HELP_HINT);
        let e = name_inputs_help(e, "see the tool's input schema");
        assert_eq!(
            e.hints(),
            [
                "allowed values for mode: a, b",
                "see the tool's input schema"
            ]
        );
    }

    fn wf(inputs: Vec<InputDef>) -> Workflow {
        Workflow {
            name: "t".into(),
            version: None,
            description: None,
            author: None,
            tags: vec![],
            inputs,
            env: vec![],
            initial: "a".into(),
            states: IndexMap::new(),
            hooks: Default::default(),
            outputs: vec![],
            shell_quote: false,
            budget: None,
            source: Default::default(),
        }
    }

    fn def(name: &str, ty: InputType, required: bool, default: Option<Value>) -> InputDef {
        InputDef {
            name: name.into(),
            ty,
            description: None,
            required,
            default,
            validation: InputValidation::default(),
        }
    }

    fn cli(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    }

    /// Breaker: a value nested past what a state file reads back (126 levels) was taken
    /// from the command line, an HTTP body or MCP arguments. Declared or not, a value over
    /// 64 levels is refused; 64 are taken.
    #[test]
    fn values_nested_deeper_than_64_levels_are_refused() {
        let nested = |n: usize| {
            serde_json::from_str::<Value>(&format!("{}{}", "[".repeat(n), "]".repeat(n))).unwrap()
        };
        let w = wf(vec![def("arr", InputType::Array, false, None)]);
        let mut api = Map::new();
        api.insert("arr".into(), nested(65));
        api.insert("extra".into(), serde_json::json!({"a": nested(70)}));
        let e = resolve_inputs(&w, &[], &api, Path::new("."), &FakeHost::default()).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
        assert_eq!(
            e.message(),
            "input validation failed: 2 errors:\n  - inputs.arr: the value nests arrays or objects 65 levels deep; awf takes at most 64 levels deep\n  - inputs.extra: the value nests arrays or objects 71 levels deep; awf takes at most 64 levels deep"
        );
        assert!(
            e.hints()[0].starts_with("flatten the value"),
            "{:?}",
            e.hints()
        );
        let mut api = Map::new();
        api.insert("arr".into(), nested(64));
        api.insert("extra".into(), nested(64));
        assert!(resolve_inputs(&w, &[], &api, Path::new("."), &FakeHost::default()).is_ok());
    }

    #[test]
    fn precedence_default_config_cli() {
        let w = wf(vec![def(
            "a",
            InputType::Integer,
            false,
            Some(Value::from(1)),
        )]);
        let mut config = Map::new();
        config.insert("a".into(), Value::from(2));
        let r = resolve_inputs(&w, &[], &config, Path::new("."), &FakeHost::default()).unwrap();
        assert_eq!(r["a"], Value::from(2));
        let r = resolve_inputs(
            &w,
            &cli(&[("a", "3"), ("a", "4")]),
            &config,
            Path::new("."),
            &FakeHost::default(),
        )
        .unwrap();
        assert_eq!(r["a"], Value::from(4));
    }

    /// Breaker: a null among the configuration inputs replaced the input's default with no
    /// value and skipped its validation; it is "not set": the default applies, a required
    /// input without one is missing.
    #[test]
    fn a_null_config_input_is_not_set() {
        let mut n = def("n", InputType::Integer, false, Some(Value::from(3)));
        n.validation.min = Some(1.0);
        let w = wf(vec![n, def("r", InputType::String, true, None)]);
        let mut config = Map::new();
        config.insert("n".into(), Value::Null);
        config.insert("r".into(), Value::Null);
        assert_eq!(
            missing_required(&w, &[], &config)
                .iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>(),
            ["r"]
        );
        config.insert("r".into(), Value::from("x"));
        let r = resolve_inputs(&w, &[], &config, Path::new("."), &FakeHost::default()).unwrap();
        assert_eq!(r.get("n"), Some(&Value::from(3)));
    }

    /// Trial 22, issue 3: `validation.enum` of a typed input is checked on the converted
    /// value (`+2` and `02` are 2; `yes`, `TRUE` and `1` are true), as without an enum.
    #[test]
    fn enum_of_a_typed_input_compares_the_converted_value() {
        let host = FakeHost::default();
        let mut e = def("e", InputType::Integer, false, None);
        e.validation.enum_values = vec!["1".into(), "2".into(), "3".into()];
        for given in ["2", "+2", "02", " 2"] {
            assert_eq!(
                check_one(&e, given, Path::new("."), &host),
                Ok(Value::from(2)),
                "{given}"
            );
        }
        assert_eq!(
            check_one(&e, "4", Path::new("."), &host),
            Err("value \"4\" not in allowed values [1 2 3]".to_owned())
        );
        let mut b = def("b", InputType::Boolean, false, Some(Value::Bool(true)));
        b.validation.enum_values = vec!["true".into()];
        for given in ["true", "yes", "TRUE", "1"] {
            assert_eq!(
                check_one(&b, given, Path::new("."), &host),
                Ok(Value::Bool(true)),
                "{given}"
            );
        }
        assert!(check_one(&b, "no", Path::new("."), &host).is_err());
        let mut n = def("n", InputType::Number, false, None);
        n.validation.enum_values = vec!["0.5".into(), "2".into()];
        assert_eq!(
            check_one(&n, "0.50", Path::new("."), &host),
            Ok(Value::from(0.5))
        );
        assert_eq!(
            check_one(&n, "2.0", Path::new("."), &host),
            Ok(Value::from(2))
        );
        // A string input keeps AWF's exact match.
        let mut s = def("s", InputType::String, false, None);
        s.validation.enum_values = vec!["2".into()];
        assert!(check_one(&s, "02", Path::new("."), &host).is_err());
    }

    #[test]
    fn collects_every_problem() {
        let mut port = def("port", InputType::Integer, false, None);
        port.validation.min = Some(1024.0);
        let mut env = def("environment", InputType::String, false, None);
        env.validation.enum_values = vec!["dev".into(), "staging".into(), "prod".into()];
        let w = wf(vec![port, env, def("name", InputType::String, true, None)]);
        let e = resolve_inputs(
            &w,
            &cli(&[("port", "80"), ("environment", "qa")]),
            &Map::new(),
            Path::new("."),
            &FakeHost::default(),
        )
        .unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
        assert_eq!(
            e.message(),
            "input validation failed: 3 errors:\n  - inputs.port: value 80 is below minimum 1024\n  - inputs.environment: value \"qa\" not in allowed values [dev staging prod]\n  - inputs.name: required but not provided"
        );
        assert_eq!(
            e.hints()[0],
            "pass the missing inputs: --input name=<value>"
        );
    }

    #[test]
    fn type_errors() {
        let w = wf(vec![def("port", InputType::Integer, true, None)]);
        let e = resolve_inputs(
            &w,
            &cli(&[("port", "abc")]),
            &Map::new(),
            Path::new("."),
            &FakeHost::default(),
        )
        .unwrap_err();
        assert_eq!(
            e.message(),
            "input validation failed: inputs.port: cannot convert \"abc\" to integer (a whole number in decimal, e.g. 42 or -7)"
        );
        // A command-line hint, without the HTTP route (awf-http says it its own way).
        assert_eq!(
            e.hints(),
            ["`awf run <workflow> --help` lists each input with its type and rules"]
        );
        let w = wf(vec![def(
            "n",
            InputType::Unknown("map".into()),
            false,
            Some(Value::from("x")),
        )]);
        let e =
            resolve_inputs(&w, &[], &Map::new(), Path::new("."), &FakeHost::default()).unwrap_err();
        assert!(
            e.message().contains("unknown type \"map\""),
            "{}",
            e.message()
        );
        let w = wf(vec![def("b", InputType::Boolean, false, None)]);
        assert!(
            resolve_inputs(
                &w,
                &cli(&[("b", "Yes")]),
                &Map::new(),
                Path::new("."),
                &FakeHost::default()
            )
            .is_ok()
        );
        assert!(
            resolve_inputs(
                &w,
                &cli(&[("b", "maybe")]),
                &Map::new(),
                Path::new("."),
                &FakeHost::default()
            )
            .is_err()
        );
    }

    /// A boolean input takes YAML 1.1's words, as the workflow's boolean fields do (`off`
    /// was refused where `no` was taken).
    #[test]
    fn a_boolean_input_takes_yaml_1_1_words() {
        for (t, want) in [
            ("on", true),
            ("Y", true),
            ("off", false),
            ("n", false),
            ("No", false),
        ] {
            assert_eq!(to_bool(&Value::from(t)), Ok(want), "{t}");
        }
        assert!(to_bool(&Value::from("maybe")).is_err());
    }

    /// A JSON number (the HTTP API's and a config file's inputs) is an integer when it is
    /// whole and fits i64: `-0` and `1e3` are taken; `1e20` is refused (it was saturated to
    /// i64::MAX), as is `2.5`.
    #[test]
    fn a_whole_json_number_is_an_integer_within_i64() {
        let json = |t: &str| serde_json::from_str::<Value>(t).unwrap();
        assert_eq!(to_integer(&json("-0")), Ok(0));
        assert_eq!(to_integer(&json("1e3")), Ok(1000));
        assert_eq!(to_integer(&json("-7.0")), Ok(-7));
        assert_eq!(to_integer(&json("9223372036854775807")), Ok(i64::MAX));
        for bad in ["1e20", "-1e19", "2.5", "18446744073709551615"] {
            let e = to_integer(&json(bad)).unwrap_err();
            assert!(
                e.starts_with("cannot convert ") && e.contains("to integer (a whole number from"),
                "{bad}: {e}"
            );
        }
    }

    /// A bracketed list that is no JSON says how to write one (new user: `[a,b,c]`).
    #[test]
    fn a_bracketed_list_that_is_no_json_says_how_to_write_one() {
        let e = to_array(&Value::String("[a,b,c]".into())).unwrap_err();
        assert!(e.contains("read as a JSON list"), "{e}");
        assert!(
            e.contains("separated by commas without brackets (a,b)"),
            "{e}"
        );
        assert_eq!(
            to_array(&Value::String(r#"["a","b"]"#.into())).unwrap(),
            vec![Value::from("a"), Value::from("b")]
        );
    }

    #[test]
    fn typed_values_are_stored_with_their_type() {
        let w = wf(vec![
            def("i", InputType::Integer, false, None),
            def("n", InputType::Number, false, None),
            def("b", InputType::Boolean, false, None),
            def("a", InputType::Array, false, None),
            def("s", InputType::String, false, None),
        ]);
        let r = resolve_inputs(
            &w,
            &cli(&[
                ("i", "3"),
                ("n", "2.5"),
                ("b", "no"),
                ("a", "p, q"),
                ("s", "7"),
            ]),
            &Map::new(),
            Path::new("."),
            &FakeHost::default(),
        )
        .unwrap();
        assert_eq!(
            Value::Object(r),
            serde_json::json!({"i": 3, "n": 2.5, "b": false, "a": ["p", "q"], "s": "7"})
        );
    }

    /// A host on which every path under `/locked` cannot be examined (permission denied).
    struct Locked(FakeHost);

    impl awf_domain::ports::Host for Locked {
        fn metadata(&self, path: &Path) -> std::io::Result<awf_domain::ports::host::FileMeta> {
            if path.starts_with("/locked") {
                return Err(std::io::ErrorKind::PermissionDenied.into());
            }
            self.0.metadata(path)
        }
        fn is_symlink(&self, path: &Path) -> bool {
            self.0.is_symlink(path)
        }
        fn read_limited(&self, path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
            self.0.read_limited(path, limit)
        }
        fn read_to_string(&self, path: &Path) -> std::io::Result<String> {
            self.0.read_to_string(path)
        }
        fn canonicalize(&self, path: &Path) -> std::io::Result<std::path::PathBuf> {
            self.0.canonicalize(path)
        }
        fn read_dir(&self, dir: &Path) -> std::io::Result<Vec<awf_domain::ports::host::DirEntry>> {
            self.0.read_dir(dir)
        }
        fn current_dir(&self) -> std::io::Result<std::path::PathBuf> {
            self.0.current_dir()
        }
        fn temp_dir(&self) -> std::path::PathBuf {
            self.0.temp_dir()
        }
        fn home_dir(&self) -> Option<std::path::PathBuf> {
            self.0.home_dir()
        }
        fn pid(&self) -> u32 {
            self.0.pid()
        }
        fn process_alive(&self, pid: u32) -> bool {
            self.0.process_alive(pid)
        }
        fn hostname(&self) -> String {
            self.0.hostname()
        }
    }

    /// `file_exists` says what is wrong with a path that cannot be checked, not "does not
    /// exist": a path through a file names that file as not a directory, a path that cannot
    /// be examined says permission denied (breaker: `-i f=fe.yaml/`, fe.yaml a file).
    #[test]
    fn file_exists_names_a_file_on_the_path_and_a_denied_permission() {
        let mut f = def("f", InputType::String, true, None);
        f.validation.file_exists = true;
        let w = wf(vec![f]);
        let host = FakeHost::default().file("/w/fe.yaml", "x");
        // (`fe.yaml/` is the same path as `fe.yaml` to the fake host; the end-to-end test
        // has it.)
        for given in ["fe.yaml/x", "/w/fe.yaml/x"] {
            let e = resolve_inputs(
                &w,
                &cli(&[("f", given)]),
                &Map::new(),
                Path::new("/w"),
                &host,
            )
            .unwrap_err();
            let shown = if given.starts_with('/') {
                "/w/fe.yaml"
            } else {
                "fe.yaml"
            };
            assert!(
                e.message()
                    .contains(&format!("{shown} is a file, not a directory")),
                "{given}: {}",
                e.message()
            );
            assert!(!e.message().contains("does not exist"), "{}", e.message());
        }
        let e = resolve_inputs(
            &w,
            &cli(&[("f", "/locked/a.txt")]),
            &Map::new(),
            Path::new("/w"),
            &Locked(FakeHost::default()),
        )
        .unwrap_err();
        assert!(
            e.message()
                .contains("cannot check /locked/a.txt: permission denied"),
            "{}",
            e.message()
        );
    }

    #[test]
    fn pattern_and_files() {
        let mut email = def("email", InputType::String, true, None);
        email.validation.pattern = Some("^[^@]+@[^@]+$".into());
        let w = wf(vec![email]);
        assert!(
            resolve_inputs(
                &w,
                &cli(&[("email", "a@b.co")]),
                &Map::new(),
                Path::new("."),
                &FakeHost::default()
            )
            .is_ok()
        );
        let e = resolve_inputs(
            &w,
            &cli(&[("email", "nope")]),
            &Map::new(),
            Path::new("."),
            &FakeHost::default(),
        )
        .unwrap_err();
        assert!(e.message().contains("does not match pattern"));
        let mut f = def("f", InputType::String, true, None);
        f.validation.file_exists = true;
        let w = wf(vec![f]);
        let dir = std::path::PathBuf::from("/tmp");
        let e = resolve_inputs(
            &w,
            &cli(&[("f", "/definitely/not/here")]),
            &Map::new(),
            &dir,
            &FakeHost::default(),
        )
        .unwrap_err();
        assert!(
            e.message()
                .contains("file does not exist: /definitely/not/here")
        );
        // Existence is the host's answer, relative paths against the base directory.
        let host = FakeHost::default().file("/tmp/notes/here.txt", "x");
        assert!(
            resolve_inputs(
                &w,
                &cli(&[("f", "notes/here.txt")]),
                &Map::new(),
                &dir,
                &host
            )
            .is_ok()
        );
        // A directory is not a file (breaker: `mkdir d.yaml` passed `file_exists`).
        let e = resolve_inputs(&w, &cli(&[("f", "notes")]), &Map::new(), &dir, &host).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
        assert!(
            e.message().contains("notes is a directory"),
            "{}",
            e.message()
        );
    }
    #[test]
    fn a_secret_inputs_value_never_shows_in_its_error() {
        let mut w = wf(vec![
            def("api_token", InputType::String, false, None),
            def("deploy_password", InputType::String, false, None),
            def("secret_level", InputType::Integer, false, None),
            def("region", InputType::String, false, None),
        ]);
        w.inputs[0].validation.pattern = Some("^tok_[a-z]+$".into());
        w.inputs[1].validation.enum_values = vec!["alpha".into(), "beta".into()];
        w.inputs[3].validation.enum_values = vec!["eu".into()];
        let e = resolve_inputs(
            &w,
            &cli(&[
                ("api_token", "WRONGsecretVALUE"),
                ("deploy_password", "ENUMleak999"),
                ("secret_level", "NOTANUMBER99"),
                ("region", "us"),
            ]),
            &Map::new(),
            Path::new("."),
            &FakeHost::default(),
        )
        .unwrap_err();
        let m = e.message();
        for leak in ["WRONGsecretVALUE", "ENUMleak999", "NOTANUMBER99"] {
            assert!(!m.contains(leak), "{m}");
        }
        assert!(
            m.contains("inputs.api_token: value \"***\" does not match pattern"),
            "{m}"
        );
        assert!(
            m.contains("inputs.deploy_password: value \"***\" not in allowed values [alpha beta]"),
            "{m}"
        );
        // Not a secret name: shown as given.
        assert!(m.contains("value \"us\" not in allowed values [eu]"), "{m}");
    }
    #[test]
    fn a_string_input_refuses_a_json_object_or_list() {
        let w = wf(vec![def("api_token", InputType::String, false, None)]);
        for (given, kind) in [
            (serde_json::json!({"a": "NESTEDsecret99"}), "an object"),
            (serde_json::json!(["LISTsecret1"]), "a list"),
        ] {
            let mut config = Map::new();
            config.insert("api_token".into(), given);
            let e =
                resolve_inputs(&w, &[], &config, Path::new("."), &FakeHost::default()).unwrap_err();
            assert_eq!(e.code(), awf_domain::ErrorCode::UserInputValidationFailed);
            assert!(
                e.message()
                    .contains(&format!("inputs.api_token: expected a string, not {kind}")),
                "{}",
                e.message()
            );
            assert!(!e.message().contains("secret"), "{}", e.message());
        }
        // A number is still taken as its text.
        let mut config = Map::new();
        config.insert("api_token".into(), serde_json::json!(12345678));
        assert!(resolve_inputs(&w, &[], &config, Path::new("."), &FakeHost::default()).is_ok());
    }
}
