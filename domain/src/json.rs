//! JSON text read strictly: an object that repeats a key is refused (serde_json keeps the last
//! value silently). Used where a repeated key is ambiguous or a way around a check: HTTP
//! request bodies (a proxy that checks the first `inputs` can be bypassed) and JSON-RPC frames
//! (a duplicated `"id"`; ACP, shared/spec/acp.md §1.1).
//!
//! Also the nesting limit of values that enter a run ([`MAX_DEPTH`], [`too_deep`]).

use serde_json::Value;

/// The deepest nesting of arrays and objects a value that enters a run may have (inputs,
/// agent answers parsed as JSON). A run's state file holds such values a few levels down,
/// and serde_json reads at most 128 levels back: a deeper value made the run unreadable
/// (`awf status`, `awf resume`, the HTTP API). 64 leaves room for the file's own nesting.
pub const MAX_DEPTH: usize = 64;

/// How deeply `v` nests arrays and objects: 0 for a scalar, 1 for `[]` or `{"a": 1}`, 2
/// for `[[]]`. Iterative: any depth is measured without recursion.
pub fn depth(v: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, level)) = stack.pop() {
        match v {
            Value::Array(items) => {
                deepest = deepest.max(level);
                stack.extend(items.iter().map(|i| (i, level + 1)));
            }
            Value::Object(m) => {
                deepest = deepest.max(level);
                stack.extend(m.values().map(|i| (i, level + 1)));
            }
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
        }
    }
    deepest
}

/// `Some(depth)` when `v` nests deeper than [`MAX_DEPTH`].
pub fn too_deep(v: &Value) -> Option<usize> {
    Some(depth(v)).filter(|d| *d > MAX_DEPTH)
}

/// How deeply a JSON text nests arrays and objects (strings skipped, escapes included), for
/// a file that serde_json refused: whether it is deeper than serde_json reads (128 levels)
/// rather than damaged. Invalid text is measured as far as it goes.
pub fn text_depth(bytes: &[u8]) -> usize {
    let (mut level, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                (false, _) => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                level += 1;
                deepest = deepest.max(level);
            }
            b']' | b'}' => level = level.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// A key an object repeats, and where: the keys and indexes from the document down to it (gathered innermost first, as the parse unwinds).
#[derive(Debug, PartialEq, Eq)]
pub struct RepeatedKey {
    /// The repeated key, unescaped.
    pub key: String,
    /// Innermost first; the last element is the document's own key.
    pub path: Vec<PathStep>,
}

/// One step of a path into a JSON document.
#[derive(Debug, PartialEq, Eq)]
pub enum PathStep {
    /// A member of an object.
    Key(String),
    /// An element of an array.
    Index(usize),
}

impl RepeatedKey {
    /// Where the repeated member is, as a JSON Pointer (RFC 6901: `~` is `~0`, `/` is `~1`).
    pub fn pointer(&self) -> String {
        let mut out = String::new();
        for step in self.path.iter().rev() {
            out.push('/');
            match step {
                PathStep::Key(k) => out.push_str(&k.replace('~', "~0").replace('/', "~1")),
                PathStep::Index(i) => out.push_str(&i.to_string()),
            }
        }
        out.push('/');
        out.push_str(&self.key.replace('~', "~0").replace('/', "~1"));
        out
    }
}

/// Why [`parse_unique`] refused a text.
#[derive(Debug)]
pub enum NotUnique {
    /// An object repeats a key.
    Repeated(RepeatedKey),
    /// The text is not JSON.
    Json(serde_json::Error),
}

/// JSON text read as `serde_json::from_slice::<Value>` reads it, except that an object that
/// repeats a key (at any depth) is refused.
pub fn parse_unique(bytes: &[u8]) -> Result<Value, NotUnique> {
    let repeated = std::cell::RefCell::new(None);
    let parsed = {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        serde::de::DeserializeSeed::deserialize(UniqueKeys(&repeated), &mut de)
            .and_then(|v| de.end().map(|()| v))
    };
    match (parsed, repeated.into_inner()) {
        (_, Some(r)) => Err(NotUnique::Repeated(r)),
        (Ok(v), None) => Ok(v),
        (Err(e), None) => Err(NotUnique::Json(e)),
    }
}

/// Reads a JSON value as `serde_json::Value` does, refusing an object that repeats a key (at
/// any depth): the repeated key is left in the cell and the parse fails. One pass, no copy;
/// the path is only built on the way out of a refusal.
struct UniqueKeys<'a>(&'a std::cell::RefCell<Option<RepeatedKey>>);

impl UniqueKeys<'_> {
    /// Adds `step` to the path of a repeated key found below it (no-op for other errors).
    fn below(&self, step: impl FnOnce() -> PathStep) {
        if let Some(r) = self.0.borrow_mut().as_mut() {
            r.path.push(step());
        }
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for UniqueKeys<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for UniqueKeys<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
        let mut v = Vec::new();
        loop {
            match a.next_element_seed(UniqueKeys(self.0)) {
                Ok(Some(x)) => v.push(x),
                Ok(None) => return Ok(Value::Array(v)),
                Err(e) => {
                    let i = v.len();
                    self.below(|| PathStep::Index(i));
                    return Err(e);
                }
            }
        }
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
        let mut m = serde_json::Map::new();
        while let Some(k) = a.next_key::<String>()? {
            let v = match a.next_value_seed(UniqueKeys(self.0)) {
                Ok(v) => v,
                Err(e) => {
                    self.below(|| PathStep::Key(k));
                    return Err(e);
                }
            };
            match m.entry(k) {
                serde_json::map::Entry::Vacant(slot) => {
                    slot.insert(v);
                }
                serde_json::map::Entry::Occupied(slot) => {
                    let key = slot.key().clone();
                    *self.0.borrow_mut() = Some(RepeatedKey {
                        key: key.clone(),
                        path: Vec::new(),
                    });
                    return Err(serde::de::Error::custom(format!("repeated key {key:?}")));
                }
            }
        }
        Ok(Value::Object(m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_nested_arrays_and_objects() {
        let nested = |n: usize| {
            serde_json::from_str::<Value>(&format!("{}{}", "[".repeat(n), "]".repeat(n))).unwrap()
        };
        assert_eq!(depth(&Value::from(3)), 0);
        assert_eq!(depth(&serde_json::json!({"a": [1, {"b": []}], "c": 2})), 4);
        assert_eq!(depth(&nested(64)), 64);
        assert_eq!(too_deep(&nested(64)), None);
        assert_eq!(too_deep(&nested(65)), Some(65));
        assert_eq!(text_depth(br#"{"a": "[[[[", "b": [["\"]]"]]}"#), 3);
        assert_eq!(
            text_depth(format!("{}{}", "[".repeat(130), "]".repeat(130)).as_bytes()),
            130
        );
    }

    #[test]
    fn repeated_keys_are_found_at_any_depth_with_their_pointer() {
        let at = |t: &str| match parse_unique(t.as_bytes()) {
            Err(NotUnique::Repeated(r)) => Some((r.key.clone(), r.pointer())),
            Err(NotUnique::Json(e)) => panic!("{t}: {e}"),
            Ok(_) => None,
        };
        assert_eq!(at(r#"{"a":1,"a":2}"#), Some(("a".into(), "/a".into())));
        assert_eq!(
            at(r#"{"inputs":{"a":1},"inputs":{"b":2}}"#),
            Some(("inputs".into(), "/inputs".into()))
        );
        assert_eq!(
            at(r#"{"x":[0,[{"k":1}],{"m/n":{"~":1,"~":2}}]}"#),
            Some(("~".into(), "/x/2/m~1n/~0".into()))
        );
        assert_eq!(at(r#"{"a":{"a":1},"b":[{"a":1},{"a":2}]}"#), None);
        // The first repetition is the one named, even when the text goes wrong later.
        assert_eq!(at(r#"{"a":1,"a":2,"#), Some(("a".into(), "/a".into())));
        // Equal after unescaping: one key.
        assert_eq!(at(r#"{"a":1,"\u0061":2}"#), Some(("a".into(), "/a".into())));
        assert!(matches!(
            parse_unique(br#"{"a":1} {}"#),
            Err(NotUnique::Json(_))
        ));
        assert!(matches!(
            parse_unique("[".repeat(200).as_bytes()),
            Err(NotUnique::Json(_))
        ));
        let v =
            parse_unique(br#"{"a":[1,-2,0.5,"s",null,true,{"b":{}}],"big":18446744073709551615}"#)
                .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"a":[1,-2,0.5,"s",null,true,{"b":{}}],"big":18446744073709551615_u64})
        );
    }
}
