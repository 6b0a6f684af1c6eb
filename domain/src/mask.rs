//! Secret masking. A value is secret when its name (environment variable or workflow input)
//! contains SECRET, API_KEY, PASSWORD, TOKEN, CREDENTIAL or PRIVATE_KEY (any case) and the
//! value has at least 4 characters. Secrets are replaced by `***` wherever text leaves the
//! process. Source: design/decisions.md ("Execution and processes").

use std::borrow::Cow;

/// Name fragments that mark a secret (compared upper-case).
pub const SECRET_MARKERS: &[&str] = &[
    "SECRET",
    "API_KEY",
    "PASSWORD",
    "TOKEN",
    "CREDENTIAL",
    "PRIVATE_KEY",
];

/// Replacement text.
pub const MASK: &str = "***";

/// Whether a variable or input name marks its value as secret.
pub fn is_secret_name(name: &str) -> bool {
    let up = name.to_ascii_uppercase();
    SECRET_MARKERS.iter().any(|m| up.contains(m))
}

/// Replaces known secret values by `***`, longest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Masker {
    secrets: Vec<String>,
}

impl Masker {
    /// Builds a masker from `(name, value)` pairs; only secret-named values of ≥ 4 chars count.
    pub fn from_named<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut m = Self::default();
        for (name, value) in pairs {
            if is_secret_name(name) {
                m.add(value);
            }
        }
        m
    }

    /// Adds one secret value (ignored when shorter than 4 characters).
    pub fn add(&mut self, value: &str) {
        if value.chars().count() < 4 || self.secrets.iter().any(|s| s == value) {
            return;
        }
        self.secrets.push(value.to_owned());
        self.secrets
            .sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    }

    /// Merges another masker's secrets.
    pub fn extend(&mut self, other: &Masker) {
        for s in &other.secrets {
            self.add(s);
        }
    }

    /// Whether there is nothing to mask.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// Length in bytes of the longest secret (0 when none).
    pub fn longest(&self) -> usize {
        self.secrets.first().map_or(0, String::len)
    }

    /// Masks `text`.
    pub fn mask<'t>(&self, text: &'t str) -> Cow<'t, str> {
        if self.secrets.iter().all(|s| !text.contains(s.as_str())) {
            return Cow::Borrowed(text);
        }
        let mut out = text.to_owned();
        for s in &self.secrets {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), MASK);
            }
        }
        Cow::Owned(out)
    }

    /// Masks every string inside a JSON value.
    pub fn mask_json(&self, v: &mut serde_json::Value) {
        if self.is_empty() {
            return;
        }
        match v {
            serde_json::Value::String(s) => {
                if let Cow::Owned(m) = self.mask(s) {
                    *s = m;
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(|x| self.mask_json(x)),
            serde_json::Value::Object(o) => o.values_mut().for_each(|x| self.mask_json(x)),
            _ => {}
        }
    }
}

/// Masks a stream delivered in arbitrary chunks. Text is released up to the last newline;
/// a partial line is held back only while it is shorter than a cap, and then everything but
/// the last `longest secret − 1` bytes is released, so a secret split across chunks is still
/// caught.
#[derive(Debug, Clone)]
pub struct StreamMasker {
    masker: Masker,
    pending: String,
}

/// A partial line longer than this is released without waiting for its newline.
const MAX_HELD_LINE: usize = 8 * 1024;

impl StreamMasker {
    /// New stream masker.
    pub fn new(masker: Masker) -> Self {
        Self {
            masker,
            pending: String::new(),
        }
    }

    /// Feeds a chunk; returns masked text that is safe to show now (may be empty).
    pub fn push(&mut self, chunk: &str) -> String {
        self.pending.push_str(chunk);
        let cut = match self.pending.rfind('\n') {
            Some(i) => i + 1,
            None if self.pending.len() > MAX_HELD_LINE => {
                let keep = self.masker.longest().saturating_sub(1);
                let mut c = self.pending.len().saturating_sub(keep);
                while !self.pending.is_char_boundary(c) {
                    c -= 1;
                }
                c
            }
            None => return String::new(),
        };
        let ready: String = self.pending.drain(..cut).collect();
        self.masker.mask(&ready).into_owned()
    }

    /// Releases whatever is held (call at end of stream).
    pub fn finish(&mut self) -> String {
        let rest = std::mem::take(&mut self.pending);
        self.masker.mask(&rest).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_short_values() {
        assert!(is_secret_name("SECRET_API_KEY"));
        assert!(is_secret_name("github_token"));
        assert!(is_secret_name("db_Password"));
        assert!(!is_secret_name("USERNAME"));
        let m = Masker::from_named([("API_KEY", "abc"), ("TOKEN", "abcd")]);
        assert_eq!(m.mask("abc abcd"), "abc ***");
    }

    #[test]
    fn longest_first() {
        let m = Masker::from_named([("A_TOKEN", "secret"), ("B_TOKEN", "secret_long")]);
        assert_eq!(m.mask("x secret_long y secret"), "x *** y ***");
    }

    #[test]
    fn stream_masks_across_chunk_boundaries() {
        let m = Masker::from_named([("SECRET_X", "hunter22")]);
        let mut s = StreamMasker::new(m);
        let mut out = String::new();
        for c in ["pass=hun", "ter", "22\nnext hunt", "er22"] {
            out.push_str(&s.push(c));
        }
        out.push_str(&s.finish());
        assert_eq!(out, "pass=***\nnext ***");
    }

    #[test]
    fn long_partial_lines_are_released_but_keep_a_tail() {
        let m = Masker::from_named([("SECRET_X", "hunter22")]);
        let mut s = StreamMasker::new(m);
        let big = "a".repeat(MAX_HELD_LINE + 10);
        let first = s.push(&format!("{big}hunt"));
        let second = s.push("er22");
        let rest = s.finish();
        let all = format!("{first}{second}{rest}");
        assert!(all.ends_with("***"), "{}", &all[all.len() - 10..]);
        assert!(!first.is_empty());
    }
}
