//! The AWF template functions: `escape`, `json` (alias `toJson`), `split`, `join`, `readFile`,
//! `trimSpace`, Go's `index` (a missing map key gives the zero value), and awf's own: `shell_quote` (alias `shellQuote`), `upper`, `lower`, `trim`
//! (alias of `trimSpace`) and `default`.
//!
//! gtmpl-ng functions are plain `fn` pointers, so what a function needs from the render
//! (the workflow directory for `readFile`, the JSON texts of composite loop items for `json`)
//! sits in a thread-local for the duration of one render; see [`SideData::install`].
//!
//! Source: spec/workflow.md §2.4 and §2.6; decisions.md (`readFile` relative to the workflow
//! file's directory).

use std::cell::RefCell;
use std::path::Path;
use std::path::PathBuf;

use gtmpl_ng::Func;
use gtmpl_ng::FuncError;
use gtmpl_ng::Value;

use crate::gojson;

/// Largest file `readFile` reads, in bytes (1 MiB).
pub const READ_FILE_LIMIT: u64 = 1024 * 1024;

/// The AWF functions, by template name.
pub(crate) const AWF_FUNCS: [(&str, Func); 17] = [
    // Go's `printf`, with widths and precisions above [`MAX_PRINTF_WIDTH`] refused (gtmpl-ng
    // takes up to 10 000 009 as Go's parser does, a 10 MB text per verb).
    ("printf", printf as Func),
    // Go's `index`, which answers a key a map lacks with the zero value (replaces
    // gtmpl-ng's, which fails on the namespaces awf encodes for `missingkey=error`).
    ("index", index as Func),
    ("escape", escape as Func),
    ("json", json as Func),
    // Alias of `json` (the name Go template users reach for).
    ("toJson", json as Func),
    ("split", split as Func),
    ("join", join as Func),
    ("readFile", read_file as Func),
    ("trimSpace", trim_space as Func),
    (crate::shell::SHELL_DQ_FUNC, shell_dq as Func),
    ("shell_quote", shell_quote_fn as Func),
    // Alias in Go's camelCase, like `trimSpace`.
    ("shellQuote", shell_quote_fn as Func),
    (crate::shell::SHELL_Q_FUNC, shell_q as Func),
    // awf additions (not in AWF (Go)): the names users of Go templates (sprig) and of
    // `while:`/`when:` expressions reach for; docs/compatibility.md.
    ("upper", upper as Func),
    ("lower", lower as Func),
    ("trim", trim_space as Func),
    ("default", default as Func),
];

/// Per-render data the functions read.
#[derive(Debug, Default)]
pub(crate) struct SideData {
    /// Directory relative `readFile` paths resolve against.
    pub(crate) workflow_dir: PathBuf,
    /// The run's working directory (`.context.WorkingDir`), which a hint names when a
    /// relative `readFile` path is not found in `workflow_dir`.
    pub(crate) working_dir: PathBuf,
    /// Printed forms of the non-string loop items in scope (innermost first): each is the
    /// item's JSON already, so `json` hands it back as is instead of quoting it.
    pub(crate) json_items: Vec<String>,
    /// `.states` is empty in this render (no state ran yet): `index` answers a key of it
    /// with the zero state, as Go's typed map does (an empty map shows no sibling to take
    /// the shape from).
    pub(crate) states_empty: bool,
}

thread_local! {
    static SIDE: RefCell<Option<SideData>> = const { RefCell::new(None) };
}

/// Restores the previous side data when dropped.
pub(crate) struct Installed {
    previous: Option<SideData>,
}

impl SideData {
    /// Makes `self` visible to the functions on this thread until the guard drops.
    pub(crate) fn install(self) -> Installed {
        let previous = SIDE.with(|s| s.replace(Some(self)));
        Installed { previous }
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        let previous = self.previous.take();
        SIDE.with(|s| {
            *s.borrow_mut() = previous;
        });
    }
}

/// Largest width or precision `printf` takes (Go's `fmt` refuses a number past 10^6 once it
/// has read it, so it accepts up to 10 000 009; awf stops at 10^6).
pub const MAX_PRINTF_WIDTH: u64 = 1_000_000;

/// Checks the render's budget (a cancelled run, the deadline) before a function runs.
fn budget_check() -> Result<(), FuncError> {
    crate::budget::check().map_err(|e| FuncError::Generic(e.marker()))
}

/// Counts `v`, made by a function, against the render's size budget.
fn charged(v: Value) -> Result<Value, FuncError> {
    crate::budget::charge(weight(&v)).map_err(|e| FuncError::Generic(e.marker()))?;
    Ok(v)
}

/// Fails unless `bytes` more fit the render's size budget (asked before allocating).
fn affords(bytes: usize) -> Result<(), FuncError> {
    crate::budget::affords(bytes).map_err(|e| FuncError::Generic(e.marker()))
}

/// Bytes of one template value slot.
const SLOT: usize = std::mem::size_of::<Value>();

/// Estimated bytes of a template value: every slot, string and key.
pub(crate) fn weight(v: &Value) -> usize {
    let mut total = 0usize;
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        total = total.saturating_add(SLOT);
        match v {
            Value::String(s) => total = total.saturating_add(crate::budget::string_bytes(s.len())),
            Value::Array(items) => stack.extend(items),
            Value::Object(m) | Value::Map(m) => {
                for (k, v) in m {
                    total = total.saturating_add(crate::budget::string_bytes(k.len()) + 24 + 16);
                    stack.push(v);
                }
            }
            _ => {}
        }
    }
    total
}

/// The first width or precision of `format` above [`MAX_PRINTF_WIDTH`], and the verb it
/// belongs to (`%09999999d`).
fn oversized_verb(format: &str) -> Option<(u64, &str)> {
    let b = format.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        if b.get(i) == Some(&b'%') {
            i += 1;
            continue;
        }
        // Flags, an argument index, the width; a `.`, an index, the precision.
        while i < b.len() && matches!(b[i], b'+' | b'-' | b'#' | b' ' | b'0') {
            i += 1;
        }
        let mut numbers = 0;
        loop {
            if b.get(i) == Some(&b'[') {
                while i < b.len() && b[i] != b']' {
                    i += 1;
                }
                i += 1;
            }
            let digits = i;
            let mut n: u64 = 0;
            while i < b.len() && b[i].is_ascii_digit() {
                n = n.saturating_mul(10).saturating_add(u64::from(b[i] - b'0'));
                i += 1;
            }
            if i > digits && n > MAX_PRINTF_WIDTH {
                let mut end = i;
                while end < b.len() && !b[end].is_ascii_alphabetic() && b[end] != b'%' {
                    end += 1;
                }
                let end = (end + 1).min(b.len());
                return Some((n, format.get(start..end).unwrap_or(format)));
            }
            if b.get(i) == Some(&b'*') {
                i += 1;
            }
            numbers += 1;
            if numbers == 2 || b.get(i) != Some(&b'.') {
                break;
            }
            i += 1;
        }
    }
    None
}

/// Go's `printf` (gtmpl-ng's), refusing a width or precision above [`MAX_PRINTF_WIDTH`];
/// its result is counted against the render's size budget.
fn printf(args: &[Value]) -> Result<Value, FuncError> {
    budget_check()?;
    if let Some(Value::String(format)) = args.first()
        && let Some((n, verb)) = oversized_verb(format)
    {
        return Err(FuncError::Generic(format!(
            "printf: the width or precision {n} of {verb:?} is more than {MAX_PRINTF_WIDTH} \
             (each is a character of the result); pad in a shell step if that much is meant"
        )));
    }
    charged(gtmpl_ng::funcs::printf(args)?)
}

fn exactly(name: &str, args: &[Value], n: usize) -> Result<(), FuncError> {
    if args.len() == n {
        Ok(())
    } else {
        Err(FuncError::ExactlyXArgs(name.to_owned(), n))
    }
}

/// The text of a value: strings as is, anything else with Go `%v`.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// POSIX shell quoting (§2.4): `''` for empty; unchanged when no special character occurs;
/// otherwise single-quoted with `'` written as `'\''`.
pub(crate) fn shell_quote(s: &str) -> String {
    if s.is_empty() {
        return "''".to_owned();
    }
    const SPECIAL: &[char] = &[
        ' ', '\t', '\n', '"', '\'', '\\', '$', '`', '!', '*', '?', '[', ']', '(', ')', '{', '}',
        '<', '>', '|', '&', ';',
    ];
    if !s.contains(SPECIAL) {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// POSIX single-quote quoting, always: `'…'` with every `'` written as `'\''` (`''` for
/// the empty string). The shell reads the result as exactly one word holding `s`.
pub(crate) fn single_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// `shell_quote x`: `x` as one single-quoted shell word (see [`single_quote`]).
fn shell_quote_fn(args: &[Value]) -> Result<Value, FuncError> {
    budget_check()?;
    exactly("shell_quote", args, 1)?;
    charged(Value::String(single_quote(&text_of(&args[0]))))
}

/// `awfShellQ ctx x [what]`: `x` quoted for the shell context `ctx` (`shell_quote: true`
/// mode; in a `#` comment, with or without it); `what`, the pipeline as written, names the
/// value in a refusal.
fn shell_q(args: &[Value]) -> Result<Value, FuncError> {
    if args.len() != 3 {
        exactly(crate::shell::SHELL_Q_FUNC, args, 2)?;
    }
    budget_check()?;
    let tag = text_of(&args[0]);
    let what = args.get(2).map(text_of).unwrap_or_default();
    charged(
        crate::shell::quote_for(&tag, &text_of(&args[1]), &what)
            .map(Value::String)
            .map_err(FuncError::Generic)?,
    )
}

fn escape(args: &[Value]) -> Result<Value, FuncError> {
    budget_check()?;
    exactly("escape", args, 1)?;
    charged(Value::String(shell_quote(&text_of(&args[0]))))
}

/// Go's `index`: `index X k1 k2 …` is `X[k1][k2]…`. A key a map does not have gives the
/// map's zero value, as in Go (whose `missingkey=error` governs `.field` access, not
/// `index`): `""` in a map of strings (`index .env "UNSET"`), the zero state in a map of states
/// (`(index .states "later").Output` is `""`), a value of a sibling's shape with every field
/// zero in another map of objects, and
/// no value otherwise (`<no value>`, Go's nil of an `any` map; a map of inputs that are all
/// strings gives `""` here; an empty map is no value, but `.states` before any state ran,
/// whose zero is the zero state). Arrays, strings and out-of-range positions are gtmpl-ng's
/// `index` (an error, as in Go).
fn index(args: &[Value]) -> Result<Value, FuncError> {
    let Some((first, keys)) = args.split_first() else {
        return gtmpl_ng::funcs::index(args);
    };
    let mut col = first;
    let mut zero;
    for (at, key) in keys.iter().enumerate() {
        let map = match col {
            Value::Object(m) | Value::Map(m) => m,
            // Not a map: what is left is gtmpl-ng's to answer.
            other => {
                let mut rest = Vec::with_capacity(keys.len() - at + 1);
                rest.push(other.clone());
                rest.extend(keys[at..].iter().cloned());
                return gtmpl_ng::funcs::index(&rest);
            }
        };
        let found = match key {
            Value::String(k) => map.get(k),
            Value::Number(n) => map.get(&n.to_string()),
            other => {
                return Err(FuncError::Generic(format!(
                    "cannot index a map with {other}"
                )));
            }
        };
        col = match found {
            Some(v) => v,
            None => {
                zero = zero_of_map(map);
                &zero
            }
        };
    }
    Ok(col.clone())
}

/// The zero value of a map's elements, judged by the elements it has (see [`index`]).
fn zero_of_map(map: &std::collections::HashMap<String, Value>) -> Value {
    let mut values = map.values();
    let Some(sample) = values.next() else {
        // Empty: only `.states` (before any state ran) is known to hold states. Another
        // map that is empty in the same render (`.inputs` of a workflow without inputs) is
        // answered the same way: both are Go maps of values, and no key of either exists.
        let states_empty = SIDE.with(|s| s.borrow().as_ref().is_some_and(|d| d.states_empty));
        return if states_empty {
            zero_state()
        } else {
            Value::NoValue
        };
    };
    let same_kind = |v: &Value| std::mem::discriminant(v) == std::mem::discriminant(sample);
    if !values.all(same_kind) {
        return Value::NoValue;
    }
    match sample {
        Value::String(_) => Value::String(String::new()),
        // A map of states: the zero state, whichever sibling is looked at (a skipped
        // branch's state has no `ExitCode`; the zero state has one).
        Value::Object(fields)
            if fields.contains_key("Attempt") && fields.contains_key("Status") =>
        {
            zero_state()
        }
        // Another struct's zero: its fields by the sibling's, each zero.
        Value::Object(fields) => zero_object(fields),
        _ => Value::NoValue,
    }
}

/// The zero state: a state that has not run, every field its kind's zero.
fn zero_state() -> Value {
    // Only the kinds of its fields matter: each becomes its kind's zero.
    let zero = awf_domain::run::StepState::running("", std::time::UNIX_EPOCH);
    match crate::data::state_value(&zero) {
        Value::Object(fields) => zero_object(&fields),
        _ => Value::NoValue,
    }
}

/// An object of `fields`' keys, each value its kind's zero.
fn zero_object(fields: &std::collections::HashMap<String, Value>) -> Value {
    Value::Object(
        fields
            .iter()
            .map(|(k, v)| (k.clone(), zero_like(v)))
            .collect(),
    )
}

/// A field's zero value: `""`, `0`, `false`, an empty list; a map or object field (a
/// state's `JSON`, `Outputs`) is no value, Go's nil of an `any` or a map: nothing of the
/// sibling it was judged by shows through (breaker: the zero state's `JSON` held the other
/// step's keys and tested true).
fn zero_like(v: &Value) -> Value {
    match v {
        Value::String(_) => Value::String(String::new()),
        Value::Number(_) => Value::from(0u64),
        Value::Bool(_) => Value::Bool(false),
        Value::Array(_) => Value::Array(Vec::new()),
        _ => Value::NoValue,
    }
}

fn json(args: &[Value]) -> Result<Value, FuncError> {
    exactly("json", args, 1)?;
    if let Value::String(s) = &args[0] {
        let is_item = SIDE.with(|side| {
            side.borrow()
                .as_ref()
                .is_some_and(|d| d.json_items.iter().any(|j| j == s))
        });
        if is_item {
            return Ok(Value::String(s.clone()));
        }
    }
    budget_check()?;
    let mut out = String::new();
    gojson::write_template_value(&mut out, &args[0]).map_err(FuncError::Generic)?;
    charged(Value::String(out))
}

fn split(args: &[Value]) -> Result<Value, FuncError> {
    budget_check()?;
    exactly("split", args, 2)?;
    let s = text_of(&args[0]);
    let sep = text_of(&args[1]);
    // Judged before the pieces are made: a text of ten million characters split into them
    // is ten million values (breaker: 1 GB).
    let pieces = if sep.is_empty() {
        s.chars().count()
    } else {
        s.matches(sep.as_str()).count().saturating_add(1)
    };
    affords(
        pieces
            .saturating_mul(SLOT + 32)
            .saturating_add(s.len())
            .saturating_add(SLOT),
    )?;
    let parts: Vec<Value> = if sep.is_empty() {
        s.chars()
            .map(|c| Value::String(c.to_string().trim().to_owned()))
            .collect()
    } else {
        s.split(sep.as_str())
            .map(|p| Value::String(p.trim().to_owned()))
            .collect()
    };
    charged(Value::Array(parts))
}

fn join(args: &[Value]) -> Result<Value, FuncError> {
    exactly("join", args, 2)?;
    let Value::Array(items) = &args[0] else {
        return Err(FuncError::Generic(
            "join: the first argument must be a list (for example the result of split)".to_owned(),
        ));
    };
    budget_check()?;
    let sep = text_of(&args[1]);
    let texts: Vec<String> = items.iter().map(text_of).collect();
    affords(
        texts
            .iter()
            .map(String::len)
            .fold(0usize, usize::saturating_add)
            .saturating_add(sep.len().saturating_mul(texts.len())),
    )?;
    charged(Value::String(texts.join(&sep)))
}

fn trim_space(args: &[Value]) -> Result<Value, FuncError> {
    exactly("trimSpace", args, 1)?;
    match &args[0] {
        Value::String(s) => Ok(Value::String(s.trim().to_owned())),
        other => Ok(Value::String(other.to_string().trim().to_owned())),
    }
}

/// `upper s`: `s` (any value, as printed) in upper case (Unicode).
fn upper(args: &[Value]) -> Result<Value, FuncError> {
    budget_check()?;
    exactly("upper", args, 1)?;
    charged(Value::String(text_of(&args[0]).to_uppercase()))
}

/// `lower s`: `s` (any value, as printed) in lower case (Unicode).
fn lower(args: &[Value]) -> Result<Value, FuncError> {
    budget_check()?;
    exactly("lower", args, 1)?;
    charged(Value::String(text_of(&args[0]).to_lowercase()))
}

/// `default fallback value` (sprig's order, so `{{.inputs.x | default "none"}}` reads
/// well): `value` unless it is empty as `if` reads it (missing, nil, `""`, `false`, `0`, an
/// empty list or map), else `fallback`. With only `fallback` (the value missing), `fallback`.
fn default(args: &[Value]) -> Result<Value, FuncError> {
    let (fallback, value) = match args {
        [fallback] => (fallback, &Value::NoValue),
        [fallback, value] => (fallback, value),
        _ => {
            return Err(FuncError::Generic(format!(
                "default takes a fallback and a value (`{{{{default \"none\" .inputs.x}}}}` or \
                 `{{{{.inputs.x | default \"none\"}}}}`), got {} argument(s)",
                args.len()
            )));
        }
    };
    let empty = match value {
        Value::NoValue | Value::Nil => true,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) | Value::Map(m) => m.is_empty(),
        Value::Number(n) => {
            n.as_i64() == Some(0)
                || n.as_u64() == Some(0)
                || n.as_f64().is_some_and(|f| f.abs() < f64::MIN_POSITIVE)
        }
        Value::Function(_) => false,
    };
    Ok(if empty {
        fallback.clone()
    } else {
        value.clone()
    })
}

/// What a non-regular file is, for messages.
fn file_kind(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a named pipe (FIFO)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

/// Reads a regular file of at most [`READ_FILE_LIMIT`] bytes; `path` relative to `base`.
///
/// Symlinks are followed; anything else than a regular file (directory, FIFO, socket,
/// device) is refused without reading, and the file is opened non-blocking so a file swapped
/// for a FIFO meanwhile cannot block. At most limit + 1 bytes are read, so files whose size
/// is not known in advance (`/proc`) stay bounded.
///
/// # Errors
/// The message (prefixed `readFile:`) for an empty path, a missing or unreadable file, a
/// non-regular file, or a file over the limit.
pub(crate) fn read_limited(base: &Path, path: &str) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;

    if path.is_empty() {
        return Err("readFile: empty path".to_owned());
    }
    let p = Path::new(path);
    let full = if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    };
    let shown = full.display();
    let not_regular = |t: std::fs::FileType| {
        let kind = file_kind(t);
        if kind.starts_with("not") {
            format!("readFile: {shown} is not a regular file")
        } else {
            format!("readFile: {shown} is {kind}, not a regular file")
        }
    };
    let too_big = |len: u64| format!("readFile: {shown} is {len} bytes, more than the 1 MiB limit");
    let meta = std::fs::metadata(&full).map_err(|e| format!("readFile: {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(not_regular(meta.file_type()));
    }
    if meta.len() > READ_FILE_LIMIT {
        return Err(too_big(meta.len()));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&full)
        .map_err(|e| format!("readFile: {shown}: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("readFile: {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(not_regular(meta.file_type()));
    }
    let mut bytes = Vec::new();
    file.take(READ_FILE_LIMIT.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| format!("readFile: {shown}: {e}"))?;
    if bytes.len() as u64 > READ_FILE_LIMIT {
        return Err(format!("readFile: {shown} is more than the 1 MiB limit"));
    }
    Ok(String::from_utf8(bytes)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

fn read_file(args: &[Value]) -> Result<Value, FuncError> {
    budget_check()?;
    exactly("readFile", args, 1)?;
    let path = text_of(&args[0]);
    let (base, working_dir) = SIDE.with(|side| {
        side.borrow()
            .as_ref()
            .map(|d| (d.workflow_dir.clone(), d.working_dir.clone()))
            .unwrap_or_default()
    });
    read_limited(&base, &path).map(Value::String).map_err(|e| {
        match relative_path_hint(&base, &working_dir, &path) {
            Some(hint) => FuncError::Generic(format!(
                "{e}{}{hint}",
                awf_domain::ports::template::HINT_SEPARATOR
            )),
            None => FuncError::Generic(e),
        }
    })
}

/// The hint for a relative `readFile` path that is not in the workflow file's directory
/// `base`: that is where it was looked for, not the working directory (as an input's
/// `file_exists` check and a step's commands read it), and how to read it from there. A new
/// user's input passed `file_exists` and the step then failed with `No such file or
/// directory` and no word of why. `None` for an absolute path or one that exists in `base`
/// (a directory, a file too big: the error says what is wrong).
fn relative_path_hint(base: &Path, working_dir: &Path, path: &str) -> Option<String> {
    let p = Path::new(path);
    if path.is_empty() || p.is_absolute() || std::fs::symlink_metadata(base.join(p)).is_ok() {
        return None;
    }
    let there = if !working_dir.as_os_str().is_empty() && working_dir.join(p).is_file() {
        format!(
            " ({path} is in the working directory, {})",
            working_dir.display()
        )
    } else {
        String::new()
    };
    Some(format!(
        "a relative readFile path is read from the workflow file's directory ({}), not from \
         the working directory{there}; to read it from the working directory, join them: \
         `{{{{readFile (printf \"%s/%s\" .context.WorkingDir .inputs.file)}}}}`, or pass an \
         absolute path",
        base.display()
    ))
}

/// `awfShellDq x`: a composite loop item's JSON escaped for a double-quoted shell string
/// (`\ " $ `` ` get a backslash); any other value is returned as it prints.
fn shell_dq(args: &[Value]) -> Result<Value, FuncError> {
    exactly(crate::shell::SHELL_DQ_FUNC, args, 1)?;
    let text = text_of(&args[0]);
    let composite = SIDE.with(|s| {
        s.borrow()
            .as_ref()
            .is_some_and(|d| d.json_items.iter().any(|j| *j == text && j != "null"))
    });
    if !composite {
        return Ok(Value::String(text));
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if matches!(c, '\\' | '"' | '$' | '`') {
            out.push('\\');
        }
        out.push(c);
    }
    Ok(Value::String(out))
}
