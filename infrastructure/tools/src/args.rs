//! Reading a call's arguments: canonical names first, then their aliases; numbers and
//! booleans as the published schemas say (a string `"2"` or `"true"` is refused, as a
//! fraction or a number under the minimum is); every problem is a sentence for the model.

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
            _ => Err(format!(
                "{}: argument `{n}` must be an integer of at least {min} ({meaning}), got {}",
                self.tool,
                got(v)
            )),
        }
    }

    /// An optional boolean, as a schema `{"type": "boolean"}` says: `true` or `false`, never
    /// a string (`"true"`) or a number.
    pub(crate) fn opt_bool(&self, names: &[&'static str]) -> Result<Option<bool>, String> {
        match self.find(names) {
            None => Ok(None),
            Some((_, Value::Bool(b))) => Ok(Some(*b)),
            Some((n, v)) => Err(format!(
                "{}: argument `{n}` must be a boolean (true or false), got {}",
                self.tool,
                got(v)
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

/// What was given instead, for messages: `"2"` is `a string ("2")`.
fn got(v: &Value) -> String {
    match v {
        Value::String(_) => format!("a string ({})", short(v)),
        _ => short(v),
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
            json!({"path": "a", "file_path": "b", "limit": 3.0, "n": "12", "b": true, "s": "true", "x": -1, "f": 2.7, "z": 0}),
        );
        let a = Args::new("Read", &m);
        assert_eq!(a.str(&["path", "file_path"]), Ok("a"));
        assert_eq!(a.opt_int_at_least(&["limit"], 1, "lines"), Ok(Some(3)));
        assert_eq!(a.opt_int_at_least(&["z"], 0, "lines"), Ok(Some(0)));
        assert_eq!(a.opt_bool(&["b"]), Ok(Some(true)));
        assert_eq!(
            a.opt_int_at_least(&["n"], 1, "lines"),
            Err("Read: argument `n` must be an integer of at least 1 (lines), got a string (\"12\")".to_owned())
        );
        assert_eq!(
            a.opt_int_at_least(&["f"], 1, "lines"),
            Err("Read: argument `f` must be an integer of at least 1 (lines), got 2.7".to_owned())
        );
        assert_eq!(
            a.opt_int_at_least(&["x"], 0, "lines"),
            Err("Read: argument `x` must be an integer of at least 0 (lines), got -1".to_owned())
        );
        assert_eq!(
            a.opt_int_at_least(&["z"], 1, "lines"),
            Err("Read: argument `z` must be an integer of at least 1 (lines), got 0".to_owned())
        );
        assert_eq!(
            a.opt_bool(&["s"]),
            Err(
                "Read: argument `s` must be a boolean (true or false), got a string (\"true\")"
                    .to_owned()
            )
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
    fn integers_are_taken_exactly() {
        let m = map(json!({
            "a": 9_223_372_036_854_775_807_u64,
            "b": 9_007_199_254_740_993_u64,
            "e": u64::MAX,
        }));
        let a = Args::new("Read", &m);
        assert_eq!(
            a.opt_int_at_least(&["a"], 1, "n"),
            Ok(Some(9_223_372_036_854_775_807))
        );
        assert_eq!(
            a.opt_int_at_least(&["b"], 1, "n"),
            Ok(Some(9_007_199_254_740_993))
        );
        assert_eq!(a.opt_int_at_least(&["e"], 1, "n"), Ok(Some(u64::MAX)));
    }
}
