//! Secret masking. A value is secret when its name (environment variable or workflow input)
//! contains SECRET, API_KEY, PASSWORD, TOKEN, CREDENTIAL or PRIVATE_KEY (any case) and the
//! value has at least 4 characters. Secrets are replaced by `***` wherever text leaves the
//! process. A secret spanning several lines (a PEM key) is also masked line by line: each of
//! its lines with at least 4 characters (surrounding whitespace trimmed) is a secret of its
//! own, so a step printing the lines separately (indented, prefixed, one at a time) shows
//! none of them. Source: design/decisions.md ("Execution and processes").

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::OnceLock;

use aho_corasick::{AhoCorasick, MatchKind};

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

/// Values (and lines of multi-line values) shorter than this many characters are not masked.
pub const MIN_SECRET_CHARS: usize = 4;

/// Replaces every value under a secret name in `map` (at any depth) with `***`, whatever
/// its type: how inputs are shown (dry runs, state files, audit, `config show`).
pub fn redact_named(map: &mut serde_json::Map<String, serde_json::Value>) {
    for (k, v) in map.iter_mut() {
        if is_secret_name(k) {
            if hides_named(k, v) {
                *v = serde_json::Value::String(MASK.to_owned());
            }
        } else if let serde_json::Value::Object(inner) = v {
            redact_named(inner);
        }
    }
}

/// Whether `value`, held under `name`, is shown as `***` (as [`redact_named`] shows it): a
/// secret name and a value that is neither null nor the empty string (nothing to hide
/// there, so the empty value is shown as it is; `GET /api/workflows/{scope}/{name}` gives
/// it as `""`).
pub fn hides_named(name: &str, value: &serde_json::Value) -> bool {
    is_secret_name(name) && !value.is_null() && value.as_str() != Some("")
}

/// Whether a variable or input name marks its value as secret. A `-` counts as `_`, so
/// header-style names (`X-Api-Key`, `X-Auth-Token`) match like variable names do.
pub fn is_secret_name(name: &str) -> bool {
    // Compared byte by byte, without an upper-cased copy, and only where a marker's first
    // letter is: it runs for every variable of the environment at every run's start (issue
    // 9: a run's fixed cost).
    let name = name.as_bytes();
    let folded = |b: u8| {
        if b == b'-' {
            b'_'
        } else {
            b.to_ascii_uppercase()
        }
    };
    let at = |i: usize, marker: &str| {
        name.get(i..i + marker.len()).is_some_and(|w| {
            w.iter()
                .zip(marker.as_bytes())
                .all(|(&b, &m)| folded(b) == m)
        })
    };
    (0..name.len()).any(|i| match folded(name[i]) {
        b'S' => at(i, "SECRET"),
        b'A' => at(i, "API_KEY"),
        b'P' => at(i, "PASSWORD") || at(i, "PRIVATE_KEY"),
        b'T' => at(i, "TOKEN"),
        b'C' => at(i, "CREDENTIAL"),
        _ => false,
    })
}

/// Replaces known secret values by `***`, longest first. Its `Debug` form shows how many
/// secrets it holds, never their values.
#[derive(Clone, Default)]
pub struct Masker {
    /// Secret values and the lines of multi-line ones, longest first.
    secrets: Vec<String>,
    /// An automaton finding every occurrence of every secret in one pass, built on first
    /// use (`None` when it cannot be built: the secrets are then searched one by one);
    /// shared by the clones made before it was built (each step's streams get a clone of the
    /// run's masker: building it per clone cost 190 K instructions a step).
    automaton: Arc<OnceLock<Option<AhoCorasick>>>,
}

impl PartialEq for Masker {
    fn eq(&self, other: &Self) -> bool {
        self.secrets == other.secrets
    }
}

impl Eq for Masker {}

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

    /// Adds one secret value (ignored when shorter than 4 characters), with its upper-case,
    /// lower-case and trimmed forms (what the template functions `upper`, `lower` and `trim`
    /// make of it: a breaker printed `{{upper .inputs.api_token}}` in clear). A value with
    /// line breaks also adds each of its lines (trimmed) that has at least 4 characters. A
    /// value read from bytes that were not UTF-8 (invalid sequences shown as U+FFFD) also adds
    /// each run of 4+ characters between them, so the raw bytes are masked in live output too.
    pub fn add(&mut self, value: &str) {
        const BREAKS: [char; 3] = ['\n', '\r', '\u{FFFD}'];
        for form in [value, value.trim()] {
            self.add_one(form);
            self.add_one(&form.to_uppercase());
            self.add_one(&form.to_lowercase());
        }
        if value.contains(BREAKS) {
            for line in value.split(BREAKS) {
                self.add_one(line.trim());
            }
        }
    }

    fn add_one(&mut self, value: &str) {
        if value.chars().count() < MIN_SECRET_CHARS || self.secrets.iter().any(|s| s == value) {
            return;
        }
        self.secrets.push(value.to_owned());
        self.secrets
            .sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        self.automaton = Arc::default();
    }

    /// Merges another masker's secrets.
    pub fn extend(&mut self, other: &Masker) {
        for s in &other.secrets {
            self.add_one(s);
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

    /// Masks `text`. Every byte that belongs to an occurrence of a secret is hidden:
    /// overlapping occurrences (of the same or different secrets) become one `***`.
    pub fn mask<'t>(&self, text: &'t str) -> Cow<'t, str> {
        match self.mask_bytes(text.as_bytes()) {
            Cow::Borrowed(_) => Cow::Borrowed(text),
            // Secrets are whole UTF-8 strings, so the ranges replaced in valid text start and
            // end on character boundaries and the result is valid UTF-8.
            Cow::Owned(b) => Cow::Owned(match String::from_utf8(b) {
                Ok(s) => s,
                Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
            }),
        }
    }

    /// Masks raw bytes (output that need not be UTF-8): every byte range covered by an
    /// occurrence of a secret's UTF-8 bytes becomes `***` (overlapping ranges merged); other
    /// bytes are kept exactly.
    pub fn mask_bytes<'t>(&self, bytes: &'t [u8]) -> Cow<'t, [u8]> {
        if self.is_empty() {
            return Cow::Borrowed(bytes);
        }
        // One left-to-right pass, a window at a time (the same as a stream): linear in the
        // text, whatever the overlaps.
        let mut pass = Pass::default();
        let mut out = Vec::new();
        for window in bytes.chunks(WINDOW) {
            pass.push(self, window, &mut out);
        }
        pass.flush(self, &mut out);
        if pass.found {
            Cow::Owned(out)
        } else {
            Cow::Borrowed(bytes)
        }
    }

    /// Every occurrence `(start, end)` in `b` of every secret that starts before `cut`,
    /// overlapping ones included, sorted.
    fn occurrences(&self, b: &[u8], cut: usize) -> Vec<(usize, usize)> {
        // Nothing to search (a stream that printed nothing): no automaton to build.
        if b.is_empty() || cut == 0 {
            return Vec::new();
        }
        let automaton = self.automaton.get_or_init(|| {
            AhoCorasick::builder()
                .match_kind(MatchKind::Standard)
                .build(&self.secrets)
                .ok()
        });
        let mut found: Vec<(usize, usize)> = match automaton {
            Some(ac) => ac
                .find_overlapping_iter(b)
                .filter(|m| m.start() < cut)
                .map(|m| (m.start(), m.end()))
                .collect(),
            None => {
                let mut found = Vec::new();
                for s in &self.secrets {
                    let s = s.as_bytes();
                    let mut at = 0;
                    while let Some(i) = find(b, s, at) {
                        if i >= cut {
                            break;
                        }
                        found.push((i, i + s.len()));
                        at = i + 1;
                    }
                }
                found
            }
        };
        found.sort_unstable();
        found
    }

    /// Adds every value inside `v` as a secret: strings, numbers and booleans as written
    /// (`987654`), the elements of lists and the leaves of maps (so each item a loop takes
    /// from a secret list is masked), and the whole value's compact JSON text.
    pub fn add_value(&mut self, v: &serde_json::Value) {
        match v {
            serde_json::Value::Null => {}
            serde_json::Value::String(s) => self.add(s),
            serde_json::Value::Number(n) => self.add(&n.to_string()),
            serde_json::Value::Bool(_) => {}
            serde_json::Value::Array(items) => {
                self.add(&v.to_string());
                items.iter().for_each(|x| self.add_value(x));
            }
            serde_json::Value::Object(map) => {
                self.add(&v.to_string());
                map.values().for_each(|x| self.add_value(x));
            }
        }
    }

    /// A masker of every value under a secret name in `values` (see [`is_secret_name`]),
    /// whatever its type (see [`Masker::add_value`]); names inside nested maps count too.
    pub fn from_named_values<'a>(
        values: impl IntoIterator<Item = (&'a String, &'a serde_json::Value)>,
    ) -> Self {
        let mut m = Self::default();
        for (k, v) in values {
            if is_secret_name(k) {
                m.add_value(v);
            } else if let serde_json::Value::Object(inner) = v {
                m.extend(&Self::from_named_values(inner));
            }
        }
        m
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

    /// Length of the longest suffix of `b` that is a proper prefix of some secret (a match
    /// that may complete with the bytes that follow); 0 when none.
    fn partial_tail(&self, b: &[u8]) -> usize {
        let mut best = 0;
        for s in &self.secrets {
            let s = s.as_bytes();
            let max = (s.len() - 1).min(b.len());
            for k in (best + 1..=max).rev() {
                if b[b.len() - k] == s[0] && b.ends_with(&s[..k]) {
                    best = k;
                    break;
                }
            }
        }
        best
    }
}

/// First occurrence of `needle` in `hay` at or after `from`.
fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    let first = *needle.first()?;
    let mut i = from;
    while i + needle.len() <= hay.len() {
        let j = i + hay[i..=hay.len() - needle.len()]
            .iter()
            .position(|&c| c == first)?;
        if hay[j..].starts_with(needle) {
            return Some(j);
        }
        i = j + 1;
    }
    None
}

impl std::fmt::Debug for Masker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Masker")
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

/// Bytes a masking pass looks at in one go: a longer chunk is taken a window at a time, so
/// the list of occurrences found at once stays small.
const WINDOW: usize = 64 * 1024;

/// Where one left-to-right masking pass stands between chunks. Each byte is searched once
/// (plus the held tail, shorter than the longest secret, once per chunk), so masking is
/// linear in the text, whatever the overlaps. An occurrence is acted on once every
/// occurrence starting before it is known; a run of overlapping occurrences shows as one
/// `***`, written when the run starts.
#[derive(Clone, Default)]
struct Pass {
    /// Bytes not decided yet: a tail that may be the start of a secret.
    pending: Vec<u8>,
    /// When the last thing written was `***`: where its run of overlapping occurrences
    /// ends, as an offset into `pending` (an occurrence starting before it extends the run;
    /// the bytes before it are hidden).
    run: Option<usize>,
    /// Whether any secret was found.
    found: bool,
}

impl Pass {
    /// Takes `chunk`, writing to `out` what is decided.
    fn push(&mut self, m: &Masker, chunk: &[u8], out: &mut Vec<u8>) {
        for window in chunk.chunks(WINDOW) {
            self.pending.extend_from_slice(window);
            // An occurrence starting before the held tail lies within `pending`: had it
            // started earlier and be cut off, the tail would be longer.
            let cut = self.pending.len() - m.partial_tail(&self.pending);
            self.decide(m, cut, out);
        }
    }

    /// Decides everything held (end of text), writing it to `out`.
    fn flush(&mut self, m: &Masker, out: &mut Vec<u8>) {
        self.decide(m, self.pending.len(), out);
    }

    /// Writes `pending[..cut]` to `out`, masked, and keeps the rest.
    fn decide(&mut self, m: &Masker, cut: usize, out: &mut Vec<u8>) {
        let b = &self.pending;
        let found = m.occurrences(b, cut);
        self.found |= !found.is_empty();
        let (mut done, mut in_run) = match self.run {
            Some(end) => (end, true),
            None => (0, false),
        };
        for (start, end) in found {
            if in_run && start < done {
                done = done.max(end);
            } else {
                // Not in a run, every byte before `start` is free of secrets.
                out.extend_from_slice(&b[done.min(start)..start]);
                out.extend_from_slice(MASK.as_bytes());
                done = end;
                in_run = true;
            }
        }
        self.run = if in_run && done >= cut {
            Some(done - cut)
        } else {
            out.extend_from_slice(&b[done.min(cut)..cut]);
            None
        };
        self.pending.drain(..cut);
    }
}

/// Masks a stream of bytes delivered in arbitrary chunks. Everything is released at once
/// except a tail that could be the start of a secret (a partial match), which is held until
/// the next chunk decides it; a secret split across chunks is therefore still caught, and
/// bytes that are not UTF-8 pass through unchanged. The result is what [`Masker::mask_bytes`]
/// makes of the whole stream, in time linear in its length. At end of stream
/// ([`StreamMasker::finish`]) a held partial match of at least [`MIN_SECRET_CHARS`]
/// characters (a secret cut short by a timeout or a kill) is released as `***`, never in
/// clear.
#[derive(Clone)]
pub struct StreamMasker {
    masker: Masker,
    pass: Pass,
}

impl std::fmt::Debug for StreamMasker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The held bytes may be the start of a secret: only their count is shown.
        f.debug_struct("StreamMasker")
            .field("masker", &self.masker)
            .field("held", &self.pass.pending.len())
            .finish()
    }
}

impl StreamMasker {
    /// New stream masker.
    pub fn new(masker: Masker) -> Self {
        Self {
            masker,
            pass: Pass::default(),
        }
    }

    /// Feeds a chunk; returns masked bytes that are safe to show now (may be empty).
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.masker.is_empty() {
            return chunk.to_vec();
        }
        let mut out = Vec::with_capacity(chunk.len());
        self.pass.push(&self.masker, chunk, &mut out);
        out
    }

    /// Releases whatever is held (call at end of stream): masked, and a trailing partial
    /// match of at least [`MIN_SECRET_CHARS`] characters replaced by `***`.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        self.pass.flush(&self.masker, &mut out);
        self.pass = Pass::default();
        let tail = self.masker.partial_tail(&out);
        if tail > 0
            && String::from_utf8_lossy(&out[out.len() - tail..])
                .chars()
                .count()
                >= MIN_SECRET_CHARS
        {
            out.truncate(out.len() - tail);
            out.extend_from_slice(MASK.as_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEM: &str = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\nab\n-----END PRIVATE KEY-----\n";

    fn stream(m: &Masker, chunks: &[&[u8]]) -> Vec<u8> {
        let mut s = StreamMasker::new(m.clone());
        let mut out = Vec::new();
        for c in chunks {
            out.extend(s.push(c));
        }
        out.extend(s.finish());
        out
    }

    #[test]
    fn debug_output_shows_no_secret() {
        let m = Masker::from_named([("API_KEY", "hunter22-value")]);
        let mut s = StreamMasker::new(m.clone());
        assert!(s.push(b"x hunter22").len() < 10);
        let shown = format!("{m:?} {s:?}");
        assert!(!shown.contains("hunter"), "{shown}");
        assert_eq!(
            shown,
            "Masker { secrets: 2 } StreamMasker { masker: Masker { secrets: 2 }, held: 8 }"
        );
    }

    /// Breaker: `{{upper .inputs.api_token}}` printed the secret upper-cased, in clear.
    #[test]
    fn a_secret_is_masked_in_upper_lower_and_trimmed_case_too() {
        let m = Masker::from_named([("api_token", "Hunter2Secret\t")]);
        assert_eq!(
            m.mask("a HUNTER2SECRET b hunter2secret c Hunter2Secret d"),
            "a *** b *** c *** d"
        );
        assert_eq!(m.mask("hunter2"), "hunter2");
    }

    /// An empty value under a secret name has nothing to hide: shown as it is (`""`), as
    /// the HTTP API gives an empty secret default; any other value is `***`.
    #[test]
    fn only_a_value_with_something_in_it_is_hidden() {
        use serde_json::json;
        assert!(!hides_named("api_token", &json!("")));
        assert!(!hides_named("api_token", &serde_json::Value::Null));
        assert!(hides_named("api_token", &json!("abc")));
        assert!(hides_named("api_token", &json!(0)));
        assert!(!hides_named("user", &json!("hunter22")));
    }

    #[test]
    fn names_and_short_values() {
        assert!(is_secret_name("SECRET_API_KEY"));
        assert!(is_secret_name("github_token"));
        assert!(is_secret_name("db_Password"));
        assert!(!is_secret_name("USERNAME"));
        // Header-style names: `-` counts as `_`.
        assert!(is_secret_name("X-Api-Key"));
        assert!(is_secret_name("x-private-key"));
        assert!(!is_secret_name("X-Request-Id"));
        // A marker at either end, alone, after non-ASCII text; shorter or split names do not match.
        assert!(is_secret_name("token"));
        assert!(is_secret_name("TOKEN_FILE"));
        assert!(is_secret_name("ÄÖ_credential"));
        assert!(is_secret_name("my-api-key"));
        assert!(!is_secret_name("TOKE"));
        assert!(!is_secret_name("APIKEY"));
        assert!(!is_secret_name("TO-KEN"));
        assert!(!is_secret_name(""));
        // Every marker is found (the comparison dispatches on a marker's first letter).
        for m in SECRET_MARKERS {
            assert!(is_secret_name(m), "{m}");
            assert!(is_secret_name(&format!("x_{}_y", m.to_lowercase())), "{m}");
        }
        let m = Masker::from_named([("API_KEY", "abc"), ("TOKEN", "abcd")]);
        assert_eq!(m.mask("abc abcd"), "abc ***");
    }

    #[test]
    fn longest_first() {
        let m = Masker::from_named([("A_TOKEN", "secret"), ("B_TOKEN", "secret_long")]);
        assert_eq!(m.mask("x secret_long y secret"), "x *** y ***");
    }

    #[test]
    fn every_line_of_a_multi_line_secret_is_masked() {
        let m = Masker::from_named([("PRIVATE_KEY", PEM)]);
        // Whole, indented, prefixed, one by one, with CRLF.
        assert_eq!(m.mask(PEM), "***");
        let indented: String = PEM.lines().map(|l| format!("    {l}\n")).collect();
        let shown = m.mask(&indented);
        let prefixed: String = PEM.lines().map(|l| format!("key: {l}\r\n")).collect();
        let shown2 = m.mask(&prefixed);
        for line in PEM.lines().filter(|l| l.len() >= 4) {
            assert!(!shown.contains(line), "{shown}");
            assert!(!shown2.contains(line), "{shown2}");
        }
        // Lines under 4 characters are left alone, as short values are.
        assert!(shown.contains("    ab\n"));
        // A value given with CRLF line ends is split the same way.
        let m = Masker::from_named([("SECRET", "line-one\r\nline-two\r\n")]);
        assert_eq!(m.mask("a line-two b line-one"), "a *** b ***");
    }

    #[test]
    fn a_secret_read_from_invalid_utf8_is_masked_as_text_and_as_bytes() {
        let m = Masker::from_named([("MY_TOKEN", "sec\u{FFFD}ret-value")]);
        assert_eq!(m.mask("x sec\u{FFFD}ret-value y"), "x *** y");
        assert_eq!(
            stream(&m, &[b"x sec\xffret-", b"value y"]),
            b"x sec\xff*** y"
        );
    }

    #[test]
    fn multi_line_secret_lines_are_masked_in_streams_at_any_chunking() {
        let m = Masker::from_named([("PRIVATE_KEY", PEM)]);
        let text: String = PEM.lines().map(|l| format!("> {l}\n")).collect();
        for step in 1..=7 {
            let chunks: Vec<&[u8]> = text.as_bytes().chunks(step).collect();
            let out = String::from_utf8(stream(&m, &chunks)).unwrap_or_default();
            for line in PEM.lines().filter(|l| l.len() >= 4) {
                assert!(!out.contains(line), "step {step}: {out}");
            }
            assert!(out.starts_with("> ***\n"), "{out}");
        }
    }

    #[test]
    fn stream_masks_across_chunk_boundaries() {
        let m = Masker::from_named([("SECRET_X", "hunter22")]);
        let out = stream(&m, &[b"pass=hun", b"ter", b"22\nnext hunt", b"er22"]);
        assert_eq!(out, b"pass=***\nnext ***");
    }

    #[test]
    fn stream_releases_what_cannot_start_a_secret_at_once() {
        let m = Masker::from_named([("SECRET_X", "hunter22")]);
        let mut s = StreamMasker::new(m);
        assert_eq!(s.push(b"prompt> "), b"prompt> ");
        assert_eq!(s.push(b"a hun"), b"a ");
        assert_eq!(s.push(b"gry\n"), b"hungry\n");
        assert_eq!(s.finish(), b"");
    }

    #[test]
    fn a_secret_cut_short_at_end_of_stream_is_masked() {
        let m = Masker::from_named([("SECRET_X", "hunter22-long-value")]);
        // Killed half-way through printing it: the prefix never leaves in clear.
        assert_eq!(stream(&m, &[b"key=hunter2"]), b"key=***");
        assert_eq!(stream(&m, &[b"key=hu", b"nt"]), b"key=***");
        // Under 4 characters it is left alone, as short values are.
        assert_eq!(stream(&m, &[b"key=hun"]), b"key=hun");
    }

    #[test]
    fn bytes_that_are_not_utf8_pass_through() {
        let m = Masker::from_named([("SECRET_X", "hunter22")]);
        assert_eq!(
            stream(&m, &[b"A\xff", b"B hunter", b"22 \xc3"]),
            b"A\xffB *** \xc3"
        );
        assert_eq!(stream(&Masker::default(), &[b"A\xffB"]), b"A\xffB");
        assert_eq!(&*m.mask_bytes(b"\xfehunter22\xfe"), b"\xfe***\xfe");
    }

    #[test]
    fn overlapping_secrets_split_across_chunks_are_both_masked() {
        let m = Masker::from_named([("A_TOKEN", "abcd"), ("B_TOKEN", "cdefgh")]);
        for split in 1..9 {
            let text = b"xabcdefghy";
            let out = stream(&m, &[&text[..split], &text[split..]]);
            let out = String::from_utf8(out).unwrap_or_default();
            assert!(!out.contains("ab") && !out.contains("gh"), "{split}: {out}");
        }
    }

    #[test]
    fn long_lines_without_newline_are_released() {
        let m = Masker::from_named([("SECRET_X", "hunter22")]);
        let mut s = StreamMasker::new(m);
        let big = "a".repeat(100_000);
        let first = s.push(format!("{big}hunt").as_bytes());
        assert_eq!(first.len(), 100_000);
        let second = s.push(b"er22");
        assert_eq!(second, b"***");
    }

    /// The automaton is built once for a masker and the clones made before it was built (a
    /// step's streams each get a clone: building it per clone cost 190 K instructions a
    /// step), and not at all for a stream that printed nothing; adding a secret makes a new
    /// one, which earlier clones (with the old secrets) do not share.
    #[test]
    fn clones_share_one_automaton_and_an_empty_stream_builds_none() {
        let mut m = Masker::from_named([("MY_SECRET", "s3cr3t-value")]);
        let a = m.clone();
        let b = m.clone();
        let mut quiet = StreamMasker::new(a.clone());
        assert!(quiet.finish().is_empty());
        assert!(m.automaton.get().is_none(), "an empty stream built it");
        assert_eq!(a.mask("x s3cr3t-value y"), "x *** y");
        assert!(m.automaton.get().is_some() && b.automaton.get().is_some());
        assert!(Arc::ptr_eq(&a.automaton, &b.automaton));
        m.add("other-secret");
        assert!(m.automaton.get().is_none());
        assert!(!Arc::ptr_eq(&m.automaton, &a.automaton));
        assert_eq!(m.mask("other-secret s3cr3t-value"), "*** ***");
        assert_eq!(b.mask("other-secret"), "other-secret");
    }

    /// Trial (issue 81): output filled with overlapping copies of a secret took quadratic
    /// time (524 KB of `a` under the secret `aaaa`: 69 s; 100 MB never finished). Linear
    /// now: this test finishing is the proof (a quadratic pass would take hours).
    #[test]
    fn overlapping_copies_of_a_secret_mask_in_linear_time() {
        let a = Masker::from_named([("MY_SECRET", "aaaa")]);
        let big = "a".repeat(4 << 20);
        assert_eq!(a.mask(&big), "***");
        assert_eq!(a.mask(&format!("x{big}y{big}")), "x***y***");
        let ab = Masker::from_named([("MY_SECRET", "abab")]);
        let big = "ab".repeat(2 << 20);
        assert_eq!(ab.mask(&big), "***");
        assert_eq!(ab.mask(&format!("{big}a")), "***a");
        assert_eq!(ab.mask(&format!("{big}ABAB")), "******");
        // As a stream, in pipe-sized chunks, in odd-sized ones and at once.
        for size in [4096, 65_537, 3 << 20, big.len()] {
            let chunks: Vec<&[u8]> = big.as_bytes().chunks(size).collect();
            assert_eq!(stream(&ab, &chunks), b"***", "{size}");
            let all_a = "a".repeat(4 << 20);
            let chunks: Vec<&[u8]> = all_a.as_bytes().chunks(size).collect();
            assert_eq!(stream(&a, &chunks), b"***", "{size}");
        }
    }

    /// How text was masked before the one-pass search: every occurrence of every secret,
    /// overlapping ranges merged into one `***`.
    fn reference_mask(m: &Masker, bytes: &[u8]) -> Vec<u8> {
        let mut ranges = Vec::new();
        for s in &m.secrets {
            let s = s.as_bytes();
            for i in 0..bytes.len() {
                if bytes[i..].starts_with(s) {
                    ranges.push((i, i + s.len()));
                }
            }
        }
        ranges.sort_unstable();
        let mut out = Vec::new();
        let (mut done, mut i) = (0, 0);
        while i < ranges.len() {
            let (start, mut end) = ranges[i];
            i += 1;
            while i < ranges.len() && ranges[i].0 < end {
                end = end.max(ranges[i].1);
                i += 1;
            }
            out.extend_from_slice(&bytes[done..start]);
            out.extend_from_slice(MASK.as_bytes());
            done = end;
        }
        out.extend_from_slice(&bytes[done..]);
        out
    }

    /// The one-pass masking gives what the occurrence-by-occurrence one gave, for overlapping
    /// secrets of several lengths, adjacent occurrences, any chunking of a stream.
    #[test]
    fn one_pass_masking_matches_the_reference_at_any_chunking() {
        let m = Masker::from_named([
            ("A_TOKEN", "abab"),
            ("B_TOKEN", "babba"),
            ("C_TOKEN", "bbbb"),
            ("D_TOKEN", "abcabcab"),
            ("E_TOKEN", "cabx"),
        ]);
        let mut seed = 0x2545_f491_u64;
        for round in 0..300 {
            let len = 1 + round % 60;
            let text: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    b"abcx"[(seed % 4) as usize]
                })
                .collect();
            let want = reference_mask(&m, &text);
            assert_eq!(&*m.mask_bytes(&text), &want[..], "{text:?}");
            // A stream ending in the middle of a secret masks that tail: compare without it.
            if m.partial_tail(&text) > 0 {
                continue;
            }
            for step in 1..=9 {
                let chunks: Vec<&[u8]> = text.chunks(step).collect();
                assert_eq!(stream(&m, &chunks), want, "{step} {text:?}");
            }
        }
    }
}
