//! Typed access to an agent step's `options:` map, with `USER.AGENT.INVALID_OPTION` errors.
//!
//! Option values arrive interpolated, so a boolean or a number may come as a string
//! (`"true"`, `"0.5"`); both forms are accepted.

use awf_domain::error::AwfError;
use awf_domain::error::ErrorCode;
use awf_domain::ports::agent::option_key;
use serde_json::Map;
use serde_json::Value;

/// The options of one request, for one provider.
#[derive(Clone, Copy)]
pub(crate) struct Opts<'a> {
    provider: &'static str,
    map: &'a Map<String, Value>,
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

impl<'a> Opts<'a> {
    pub(crate) fn new(provider: &'static str, map: &'a Map<String, Value>) -> Self {
        Self { provider, map }
    }

    /// `USER.AGENT.INVALID_OPTION` naming the provider and the option.
    pub(crate) fn invalid(&self, key: &str, what: impl std::fmt::Display) -> AwfError {
        AwfError::new(
            ErrorCode::UserAgentInvalidOption,
            format!("{} option `{key}` is invalid: {what}", self.provider),
        )
        .with_detail("provider", self.provider)
        .with_detail("option", key)
    }

    /// The value of `key` (snake_case), also when written as the CLI spells the flag
    /// (`allowedTools`, `max-turns`; see [`option_key`]). `null` counts as absent.
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map
            .get(key)
            .or_else(|| {
                self.map
                    .iter()
                    .find(|(k, _)| k.as_str() != key && option_key(k) == key)
                    .map(|(_, v)| v)
            })
            .filter(|v| !v.is_null())
    }

    /// Whether `key` was given (in any accepted spelling) with a non-null value.
    pub(crate) fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// A string option (numbers and booleans are formatted); empty = absent.
    pub(crate) fn string(&self, key: &str) -> Result<Option<String>, AwfError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(Some(v.to_string())),
            Some(v) => Err(self.invalid(key, format!("expected a string, got {}", type_name(v)))),
        }
    }

    /// A boolean option (`true`/`false`, also as strings).
    pub(crate) fn bool(&self, key: &str) -> Result<Option<bool>, AwfError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
                "true" => Ok(Some(true)),
                "false" | "" => Ok(Some(false)),
                _ => Err(self.invalid(key, format!("expected true or false, got {s:?}"))),
            },
            Some(v) => Err(self.invalid(key, format!("expected a boolean, got {}", type_name(v)))),
        }
    }

    /// A boolean option that defaults to false.
    pub(crate) fn flag(&self, key: &str) -> Result<bool, AwfError> {
        Ok(self.bool(key)?.unwrap_or(false))
    }

    /// A list of strings; a single string is split on commas.
    /// `model`, checked by the provider's naming rule; `expected` says what it accepts.
    ///
    /// # Errors
    /// `USER.AGENT.INVALID_OPTION` for a name `ok` rejects, or a value that is not a string.
    pub(crate) fn model(
        &self,
        ok: impl Fn(&str) -> bool,
        expected: &str,
    ) -> Result<Option<String>, AwfError> {
        let model = self.string("model")?;
        if let Some(m) = &model
            && !ok(m)
        {
            return Err(self.invalid("model", format!("expected {expected}, got {m:?}")));
        }
        Ok(model)
    }

    pub(crate) fn string_list(&self, key: &str) -> Result<Vec<String>, AwfError> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(s
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(self.invalid(
                        key,
                        format!("expected a string at index {i}, got {}", type_name(other)),
                    )),
                })
                .collect(),
            Some(v) => Err(self.invalid(
                key,
                format!("expected a list of strings, got {}", type_name(v)),
            )),
        }
    }

    /// A number (also as a string).
    pub(crate) fn number(&self, key: &str) -> Result<Option<f64>, AwfError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => n
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.invalid(key, "not a finite number")),
            Some(Value::String(s)) => match s.trim().parse::<f64>() {
                Ok(f) if f.is_finite() => Ok(Some(f)),
                _ => Err(self.invalid(key, format!("expected a number, got {s:?}"))),
            },
            Some(v) => Err(self.invalid(key, format!("expected a number, got {}", type_name(v)))),
        }
    }

    /// A number within `[min, max]`.
    pub(crate) fn number_in(&self, key: &str, min: f64, max: f64) -> Result<Option<f64>, AwfError> {
        match self.number(key)? {
            Some(f) if f < min || f > max => Err(self.invalid(
                key,
                format!("expected a number from {min} to {max}, got {f}"),
            )),
            other => Ok(other),
        }
    }

    /// A non-negative integer (also as a string).
    pub(crate) fn uint(&self, key: &str) -> Result<Option<u64>, AwfError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(u) => Ok(Some(u)),
                None => Err(self.invalid(key, format!("expected a non-negative integer, got {n}"))),
            },
            Some(Value::String(s)) => s.trim().parse::<u64>().map(Some).map_err(|_| {
                self.invalid(key, format!("expected a non-negative integer, got {s:?}"))
            }),
            Some(v) => Err(self.invalid(
                key,
                format!("expected a non-negative integer, got {}", type_name(v)),
            )),
        }
    }

    /// A string option restricted to `allowed`.
    pub(crate) fn one_of(&self, key: &str, allowed: &[&str]) -> Result<Option<String>, AwfError> {
        match self.string(key)? {
            Some(s) if !allowed.contains(&s.as_str()) => Err(self.invalid(
                key,
                format!("expected one of {}, got {s:?}", allowed.join(", ")),
            )),
            other => Ok(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn accepts_interpolated_strings() {
        let m = map(json!({"b": "true", "n": "0.5", "u": "12", "l": "a, b"}));
        let o = Opts::new("x", &m);
        assert_eq!(o.bool("b").unwrap(), Some(true));
        assert_eq!(o.number("n").unwrap(), Some(0.5));
        assert_eq!(o.uint("u").unwrap(), Some(12));
        assert_eq!(o.string_list("l").unwrap(), ["a", "b"]);
    }

    #[test]
    fn accepts_the_cli_spelling_of_a_key() {
        let m = map(json!({"allowedTools": ["Read"], "max-turns": 3}));
        let o = Opts::new("claude", &m);
        assert_eq!(o.string_list("allowed_tools").unwrap(), ["Read"]);
        assert_eq!(o.uint("max_turns").unwrap(), Some(3));
        assert!(o.has("allowed_tools"));
        assert!(!o.has("disallowed_tools"));
    }

    #[test]
    fn rejects_wrong_types_with_the_option_name() {
        let m = map(json!({"b": 3, "m": ["x"], "u": -1, "t": 3.5}));
        let o = Opts::new("claude", &m);
        let e = o.bool("b").unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserAgentInvalidOption);
        assert_eq!(
            e.message(),
            "claude option `b` is invalid: expected a boolean, got a number"
        );
        assert_eq!(
            o.string("m").unwrap_err().message(),
            "claude option `m` is invalid: expected a string, got a list"
        );
        assert_eq!(
            o.uint("u").unwrap_err().message(),
            "claude option `u` is invalid: expected a non-negative integer, got -1"
        );
        assert_eq!(
            o.number_in("t", 0.0, 2.0).unwrap_err().message(),
            "claude option `t` is invalid: expected a number from 0 to 2, got 3.5"
        );
    }
}
