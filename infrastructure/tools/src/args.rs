//! Reading a call's arguments: canonical names first, then their aliases; lenient about
//! numbers and booleans sent as strings; every problem is a sentence for the model.

use serde_json::Map;
use serde_json::Value;

/// A call's arguments, for one tool (named in the messages).
pub(crate) struct Args<'a> {
    pub(crate) tool: &'static str,
    pub(crate) map: &'a Map<String, Value>,
}

impl<'a> Args<'a> {
    pub(crate) fn new(tool: &'static str, map: &'a Map<String, Value>) -> Self {
        Self { tool, map }
    }

    /// The first of `names` present (and not null), with the name it was found under.
    fn find(&self, names: &[&'static str]) -> Option<(&'static str, &'a Value)> {
        names
            .iter()
            .find_map(|n| self.map.get(*n).filter(|v| !v.is_null()).map(|v| (*n, v)))
    }

    /// An optional string.
    pub(crate) fn opt_str(&self, names: &[&'static str]) -> Result<Option<&'a str>, String> {
        match self.find(names) {
            None => Ok(None),
            Some((_, Value::String(s))) => Ok(Some(s)),
            Some((n, v)) => Err(format!(
                "{}: argument `{n}` must be a string, got {}",
                self.tool,
                kind(v)
            )),
        }
    }

    /// A required string.
    pub(crate) fn str(&self, names: &[&'static str]) -> Result<&'a str, String> {
        self.opt_str(names)?
            .ok_or_else(|| self.missing(names, "a string"))
    }

    /// An optional non-negative integer (JSON number, truncated when fractional, or a
    /// decimal string).
    pub(crate) fn opt_uint(&self, names: &[&'static str]) -> Result<Option<u64>, String> {
        let Some((n, v)) = self.find(names) else {
            return Ok(None);
        };
        let bad = || {
            format!(
                "{}: argument `{n}` must be a non-negative integer, got {}",
                self.tool,
                short(v)
            )
        };
        // An integer is taken exactly (a float would round 2^53 + 1 and i64::MAX).
        let exact = match v {
            Value::Number(num) => num.as_u64(),
            Value::String(s) => s.trim().parse::<u64>().ok(),
            _ => None,
        };
        if exact.is_some() {
            return Ok(exact);
        }
        let f = match v {
            Value::Number(num) => num.as_f64().ok_or_else(bad)?,
            Value::String(s) => s.trim().parse::<f64>().map_err(|_| bad())?,
            _ => return Err(bad()),
        };
        if !f.is_finite() || f < 0.0 {
            return Err(bad());
        }
        // Saturating float-to-int conversion; the value is finite and non-negative.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Ok(Some(f.trunc() as u64))
    }

    /// An optional integer of at least `min`, as a schema `{"type": "integer", "minimum":
    /// min}` says: a JSON number without a fraction (`3.0` too), never a string; `meaning`
    /// says what it is, for the message.
    pub(crate) fn opt_int_at_least(
        &self,
        names: &[&'static str],
        min: u64,
        meaning: &str,
    ) -> Result<Option<u64>, String> {
        let Some((n, v)) = self.find(names) else {
            return Ok(None);
        };
        let whole = match v {
            Value::Number(num) => num.as_u64().or_else(|| {
                num.as_f64()
                    .filter(|f| f.fract() == 0.0 && (0.0..9.0e15).contains(f))
                    // Whole and in range: exact.
                    .map(|f| {
                        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                        let u = f as u64;
                        u
                    })
            }),
            _ => None,
        };
        match whole {
            Some(x) if x >= min => Ok(Some(x)),
            _ => {
                let got = match v {
                    Value::String(_) => format!("a string ({})", short(v)),
                    _ => short(v),
                };
                Err(format!(
                    "{}: argument `{n}` must be an integer of at least {min} ({meaning}), got {got}",
                    self.tool
                ))
            }
        }
    }

    /// An optional boolean (JSON boolean or `"true"`/`"false"`).
    pub(crate) fn opt_bool(&self, names: &[&'static str]) -> Result<Option<bool>, String> {
        match self.find(names) {
            None => Ok(None),
            Some((_, Value::Bool(b))) => Ok(Some(*b)),
            Some((_, Value::String(s))) if s.eq_ignore_ascii_case("true") => Ok(Some(true)),
            Some((_, Value::String(s))) if s.eq_ignore_ascii_case("false") => Ok(Some(false)),
            Some((n, v)) => Err(format!(
                "{}: argument `{n}` must be a boolean, got {}",
                self.tool,
                short(v)
            )),
        }
    }

    fn missing(&self, names: &[&'static str], what: &str) -> String {
        let also = if names.len() > 1 {
            format!(" (or {})", names[1..].join(", "))
        } else {
            String::new()
        };
        format!(
            "{}: missing required argument `{}`{also}: {what}",
            self.tool, names[0]
        )
    }
}

/// The JSON type of `v`, for messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `v` shown briefly, for messages.
fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 40 {
        format!("{} ({}…)", kind(v), s.chars().take(40).collect::<String>())
    } else {
        s
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
    fn canonical_wins_over_alias_and_types_are_checked() {
        let m = map(
            json!({"path": "a", "file_path": "b", "limit": 2.7, "n": "12", "b": "true", "x": -1}),
        );
        let a = Args::new("Read", &m);
        assert_eq!(a.str(&["path", "file_path"]), Ok("a"));
        assert_eq!(a.opt_uint(&["limit"]), Ok(Some(2)));
        assert_eq!(a.opt_uint(&["n"]), Ok(Some(12)));
        assert_eq!(a.opt_bool(&["b"]), Ok(Some(true)));
        assert!(
            a.opt_uint(&["x"])
                .is_err_and(|e| e.contains("non-negative integer"))
        );
        assert!(
            a.opt_bool(&["path"])
                .is_err_and(|e| e.contains("`path` must be a boolean"))
        );
        assert!(
            a.str(&["content"])
                .is_err_and(|e| e == "Read: missing required argument `content`: a string")
        );
        let m = map(json!({"file_path": 3}));
        let a = Args::new("Read", &m);
        assert!(
            a.str(&["path", "file_path"])
                .is_err_and(|e| e.contains("`file_path` must be a string, got a number"))
        );
    }

    #[test]
    fn integers_are_taken_exactly_and_floats_truncated() {
        let m = map(json!({
            "a": 9_223_372_036_854_775_807_u64,
            "b": 9_007_199_254_740_993_u64,
            "c": "9007199254740993",
            "d": 2.9999,
            "e": u64::MAX,
        }));
        let a = Args::new("Read", &m);
        assert_eq!(a.opt_uint(&["a"]), Ok(Some(9_223_372_036_854_775_807)));
        assert_eq!(a.opt_uint(&["b"]), Ok(Some(9_007_199_254_740_993)));
        assert_eq!(a.opt_uint(&["c"]), Ok(Some(9_007_199_254_740_993)));
        assert_eq!(a.opt_uint(&["d"]), Ok(Some(2)));
        assert_eq!(a.opt_uint(&["e"]), Ok(Some(u64::MAX)));
    }
}
