//! [`ExprEvaluator`]: the [`ExpressionEvaluator`] port over expr-lang.
//!
//! Source: spec/workflow.md §2.11 and §7.2; decisions.md (both casings, missing state is
//! false), §7.4 items 18 and 19.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;

use awf_domain::ports::template::Evaluation;
use awf_domain::ports::template::ExpressionEvaluator;
use awf_domain::ports::template::StopCheck;
use awf_domain::ports::template::TemplateError;
use awf_domain::run::StepState;
use awf_domain::run::StepStatus;
use awf_domain::scope::LoopFrame;
use awf_domain::scope::Scope;
use expr::Context;
use expr::ContextProvider;
use expr::Environment;
use expr::Program;
use expr::Value;
use indexmap::IndexMap;
use serde_json::Value as JValue;

use crate::budget;
use crate::budget::Exceeded;
use crate::guard;
use crate::scan;
use crate::scan::Namespace;
use crate::timefmt::rfc3339;

/// Compiled programs kept for reuse; the cache is emptied when it reaches this size.
const CACHE_LIMIT: usize = 512;

type Fields = IndexMap<String, Value>;

/// What an unknown identifier reads as.
static NIL: Value = Value::Nil;

/// Evaluates expr-lang expressions for `when:`, `while:`, `break_when:` and arithmetic
/// `max_iterations`.
///
/// Environment (every struct-like map carries PascalCase and snake_case keys):
/// * `inputs` — string values coerced: `true`/`false` in any case → bool, integer text →
///   int, decimal text → float; other values as they are;
/// * `states.<name>` — `Output`, `Stderr`, `ExitCode` (0 when the state had no process),
///   `Status`, `Response` (empty map when absent), `JSON` (nil when absent), `TokensUsed`,
///   `TokensInput`, `TokensOutput`, `TokensEstimated`, `Error`, `Attempt`, `Outputs`;
/// * `env`, `awf` — maps of strings;
/// * `workflow` — `ID`, `Name`, `CurrentState`, `StartedAt` (RFC 3339 text), `Duration` as
///   a **number of seconds** (float), so `workflow.Duration > 60` works;
/// * `context` — `WorkingDir`, `User`, `Hostname`;
/// * `loop` (inside loops) — `Index`, `Index1`, `Item` (the raw item), `Length`, `First`,
///   `Last`, `Parent` (nil at top level);
/// * `error` (in `workflow_error` hooks) — `Message`, `State`, `ExitCode`, `Type`;
/// * functions `has_prefix(s, p)` and `has_suffix(s, p)`, plus expr-lang's built-ins.
///
/// Unknown identifiers are nil.
///
/// Each evaluation is bounded ([`crate::budget`]): 10 s, 256 MiB of values created (the
/// results of functions and predicates, ranges, `split` pieces), ranges of at most
/// [`MAX_RANGE_ITEMS`] items, and it stops at the first check after its run is cancelled
/// ([`ExpressionEvaluator::prepare_bool`]). `uniq`, `fromPairs` and `groupBy` run in linear
/// time ([`crate::guard`]).
///
/// Source: spec/workflow.md §2.11, §7.2.
pub struct ExprEvaluator {
    /// Built at the first evaluation: a run whose workflow has no expression does not pay
    /// for expr-lang's table of built-ins (issue 9: a run's fixed cost).
    env: std::sync::OnceLock<Arc<Environment<'static>>>,
    cache: Mutex<HashMap<String, Arc<Program>>>,
}

impl std::fmt::Debug for ExprEvaluator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExprEvaluator").finish_non_exhaustive()
    }
}

impl Default for ExprEvaluator {
    fn default() -> Self {
        Self::new()
    }
}

/// The two string arguments of `has_prefix`/`has_suffix`; `None` when one is nil (a missing
/// value never has a prefix).
fn two_strings<'c>(name: &str, args: &'c [Value]) -> expr::Result<Option<(&'c str, &'c str)>> {
    match args {
        [Value::String(a), Value::String(b)] => Ok(Some((a.as_str(), b.as_str()))),
        [Value::Nil, _] | [_, Value::Nil] => Ok(None),
        _ => Err(expr::Error::ExprError(format!(
            "{name}() takes two strings"
        ))),
    }
}

/// Go's `strings.SplitN` (`after`: `SplitAfterN`), which expr-lang (Go) calls for `split`
/// and `splitAfter`: at most `n` pieces when `n > 0`, none when `n == 0`, all when `n < 0`;
/// an empty `sep` splits after each character (no empty pieces at the ends, none at all for
/// an empty `s`); `splitAfter` keeps a trailing empty piece when `s` ends with `sep`. The
/// Rust crate split an empty `sep` into `["", "a", "b", "c", ""]` (breaker) and dropped that
/// trailing piece.
fn go_split(s: &str, sep: &str, n: i64, after: bool) -> Vec<String> {
    if n == 0 {
        return Vec::new();
    }
    if sep.is_empty() {
        let count = s.chars().count();
        let want = usize::try_from(n).map_or(count, |n| n.min(count));
        let mut out: Vec<String> = Vec::with_capacity(want);
        let mut rest = s;
        while out.len() + 1 < want {
            let Some(c) = rest.chars().next() else { break };
            out.push(c.to_string());
            rest = &rest[c.len_utf8()..];
        }
        if want > 0 {
            out.push(rest.to_owned());
        }
        return out;
    }
    let limit = usize::try_from(n).ok();
    let mut out = Vec::new();
    let mut rest = s;
    while limit.is_none_or(|l| out.len() + 1 < l) {
        let Some(at) = rest.find(sep) else { break };
        let keep = if after { at + sep.len() } else { at };
        out.push(rest[..keep].to_owned());
        rest = &rest[at + sep.len()..];
    }
    out.push(rest.to_owned());
    out
}

/// `split`/`splitAfter`'s arguments: a string, a separator and an optional count.
fn split_call(name: &str, args: &[Value], after: bool) -> expr::Result<Value> {
    let n = match args.get(2) {
        None => -1,
        Some(Value::Integer(n)) => *n,
        Some(_) => {
            return Err(expr::Error::ExprError(format!(
                "{name}() takes an integer as its third argument"
            )));
        }
    };
    match args {
        [Value::String(s), Value::String(sep)] | [Value::String(s), Value::String(sep), _] => {
            guard::checkpoint()?;
            // Judged before the pieces are made: a 5 MB text split into characters is five
            // million values (breaker: 661 MB).
            let all = if sep.is_empty() {
                s.chars().count()
            } else {
                s.matches(sep.as_str()).count().saturating_add(1)
            };
            let pieces = usize::try_from(n).map_or(all, |n| n.min(all));
            guard::afford_pieces(pieces, s.len())?;
            let list: Value = go_split(s, sep, n, after)
                .into_iter()
                .map(Value::from)
                .collect::<Vec<_>>()
                .into();
            guard::charge_value(&list)?;
            Ok(list)
        }
        _ => Err(expr::Error::ExprError(format!(
            "{name}() takes a string, a separator string and an optional count"
        ))),
    }
}

impl ExprEvaluator {
    /// An evaluator with expr-lang's built-ins plus `has_prefix` and `has_suffix`, with
    /// `split` and `splitAfter` as Go's.
    pub fn new() -> Self {
        Self {
            env: std::sync::OnceLock::new(),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The expr-lang environment: its built-ins plus ours, made on first use.
    fn env(&self) -> &Arc<Environment<'static>> {
        self.env.get_or_init(|| {
            let mut env = Environment::new();
            env.add_function("has_prefix", |c| {
                let pair = two_strings("has_prefix", &c.args)?;
                Ok(Value::Bool(pair.is_some_and(|(s, p)| s.starts_with(p))))
            });
            env.add_function("has_suffix", |c| {
                let pair = two_strings("has_suffix", &c.args)?;
                Ok(Value::Bool(pair.is_some_and(|(s, p)| s.ends_with(p))))
            });
            env.add_function("split", |c| split_call("split", &c.args, false));
            env.add_function("splitAfter", |c| split_call("splitAfter", &c.args, true));
            guard::install(
                &mut env,
                &["has_prefix", "has_suffix", "split", "splitAfter"],
            );
            Arc::new(env)
        })
    }

    /// `code` compiled (from the cache when it was before), its ranges made calls of the
    /// bounded range function ([`crate::ranges`]).
    fn compile(&self, code: &str) -> Result<Arc<Program>, TemplateError> {
        if let Ok(cache) = self.cache.lock()
            && let Some(p) = cache.get(code)
        {
            return Ok(Arc::clone(p));
        }
        let bounded = crate::ranges::rewrite(code).and_then(|r| guarded_compile(&r).ok());
        let program = Arc::new(match bounded {
            Some(p) => p,
            None => guarded_compile(code).map_err(|e| compile_error(code, &e))?,
        });
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
            cache.insert(code.to_owned(), Arc::clone(&program));
        }
        Ok(program)
    }
}

/// `expr::compile`, a panic of the crate's parser caught (expr-lang 2.1.0 reaches an
/// `unreachable!` on some literals, such as an array inside a map literal).
fn guarded_compile(code: &str) -> expr::Result<Program> {
    std::panic::catch_unwind(|| awf_domain::quiet_panics::quietly(|| expr::compile(code)))
        .unwrap_or_else(|_| {
            Err(expr::Error::ExprError(
                "expr-lang cannot compile this expression (its parser failed on it; write the \
                 literal another way)"
                    .to_owned(),
            ))
        })
}

/// Runs `program`, a panic of the crate's evaluator caught.
fn guarded_run(
    env: &Environment<'static>,
    program: &Program,
    vars: &dyn ContextProvider,
) -> expr::Result<Value> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        awf_domain::quiet_panics::quietly(|| env.run(program, vars))
    }))
    .unwrap_or_else(|_| {
        Err(expr::Error::ExprError(
            "expr-lang failed while evaluating it (an internal error of the evaluator)".to_owned(),
        ))
    })
}

/// Every function an expression may call: expr-lang's built-ins (version pinned in the
/// workspace; those behind features awf leaves off are registered by expr-lang to say which
/// feature they need) and awf's `has_prefix`/`has_suffix`. A call to any other name compiles
/// but fails when evaluated (`Unknown function`), so [`ExprEvaluator::check`] refuses it.
pub const FUNCTIONS: &[&str] = &[
    "abs",
    "all",
    "any",
    "bitand",
    "bitnand",
    "bitnot",
    "bitor",
    "bitshl",
    "bitshr",
    "bitushr",
    "bitxor",
    "ceil",
    "concat",
    "count",
    "date",
    "duration",
    "filter",
    "find",
    "findIndex",
    "findLast",
    "findLastIndex",
    "first",
    "flatten",
    "float",
    "floor",
    "fromBase64",
    "fromJSON",
    "fromPairs",
    "get",
    "groupBy",
    "hasPrefix",
    "hasSuffix",
    "indexOf",
    "int",
    "join",
    "keys",
    "last",
    "lastIndexOf",
    "len",
    "lower",
    "map",
    "max",
    "mean",
    "median",
    "min",
    "none",
    "now",
    "one",
    "reduce",
    "repeat",
    "replace",
    "reverse",
    "round",
    "sort",
    "sortBy",
    "split",
    "splitAfter",
    "string",
    "sum",
    "take",
    "timezone",
    "toBase64",
    "toJSON",
    "toPairs",
    "trim",
    "trimPrefix",
    "trimSuffix",
    "type",
    "uniq",
    "upper",
    "values",
    "has_prefix",
    "has_suffix",
];

/// Built-ins of [`FUNCTIONS`] that expr-lang registers only to fail, since awf builds it
/// without the feature they need (`json`, `base64`, `temporal`: a time-zone database in the
/// executable), with that feature: `awf validate` refuses a call instead of every run failing.
pub const UNAVAILABLE: &[(&str, &str)] = &[
    ("toJSON", "json"),
    ("fromJSON", "json"),
    ("toBase64", "base64"),
    ("fromBase64", "base64"),
    ("now", "temporal"),
    ("duration", "temporal"),
    ("date", "temporal"),
    ("timezone", "temporal"),
];

/// Template functions (Go templates, sprig; Liquid's and Ruby's `upcase`, `downcase`,
/// `strip`) and the expression function doing their job.
const TEMPLATE_NAMES: &[(&str, &str)] = &[
    ("upcase", "upper"),
    ("downcase", "lower"),
    ("strip", "trim"),
    ("trimSpace", "trim"),
    ("toLower", "lower"),
    ("toUpper", "upper"),
    ("toJson", "toJSON"),
    ("fromJson", "fromJSON"),
    ("atoi", "int"),
    ("length", "len"),
];

/// Every word operator of expr-lang: `and`, `or`, `not` first (a two-letter typo such as
/// `an` is the longer word's), then the infix ones of [`OPERATOR_WORDS`].
const WORD_OPERATORS: [&str; 8] = [
    "and",
    "or",
    "not",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "in",
];

/// Names expr-lang has only as infix operators (`a startsWith 'b'`), never as functions.
const OPERATOR_WORDS: &[&str] = &["contains", "startsWith", "endsWith", "matches", "in"];

/// Words that are never a function name, even right before `(` (`not (a or b)`).
const KEYWORDS: &[&str] = &[
    "and", "or", "not", "let", "if", "else", "true", "false", "nil",
];

/// Names that `code` calls as functions (`name(`, outside string literals; not a method call
/// `x.name(` nor a field), in order, each once. An operator word (`startsWith`, `matches`, …)
/// counts as a call only where no operand precedes it (`startsWith(a, 'b')`, not
/// `a startsWith ('b')`).
pub fn called_functions(code: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    each_name(code, |name, n| {
        if n.call && !n.operator && !out.iter().any(|o| o == name) {
            out.push(name.to_owned());
        }
    });
    out
}

/// Where a name stands in an expression (see [`each_name`]).
struct NameAt {
    /// Right before `(`, not after `.`, not a keyword.
    call: bool,
    /// An operator word where an operand precedes it (`a startsWith 'b'`).
    operator: bool,
    /// Right after `.` (a field or method: `x.name`).
    member: bool,
    /// The next character that is not white space (0 at the end).
    next: u8,
}

/// Calls `f` with each name of `code` (outside string literals and comments) and where it
/// stands.
fn each_name(code: &str, mut f: impl FnMut(&str, NameAt)) {
    let b = code.as_bytes();
    // Whether the last token ends an operand (a value, a name, `)`, `]`, `}`).
    let mut after_operand = false;
    // Whether the last significant character was `.` (member access: `x.name`, `x?.name`).
    let mut after_dot = false;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        // Comments (`// …` to the end of the line, `/* … */`) call nothing.
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                i += 1;
            }
            i = (i + 2).min(b.len());
            continue;
        }
        if c == b'"' || c == b'\'' || c == b'`' {
            i += 1;
            while i < b.len() && b[i] != c {
                if b[i] == b'\\' && c != b'`' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            after_operand = true;
            after_dot = false;
            continue;
        }
        if c.is_ascii_digit() {
            while i < b.len() && (scan::is_ident_char(b[i]) || b[i] == b'.') {
                // `1..3`: the range operator, not a decimal point.
                if b[i] == b'.' && b.get(i + 1) == Some(&b'.') {
                    break;
                }
                i += 1;
            }
            after_operand = true;
            after_dot = false;
            continue;
        }
        if scan::is_ident_char(c) || c == b'$' || c == b'#' {
            let start = i;
            i += 1;
            while i < b.len() && scan::is_ident_char(b[i]) {
                i += 1;
            }
            let name = &code[start..i];
            let mut j = i;
            while j < b.len() && b[j].is_ascii_whitespace() {
                j += 1;
            }
            let call = b.get(j) == Some(&b'(') && !after_dot && !KEYWORDS.contains(&name);
            let operator = OPERATOR_WORDS.contains(&name) && after_operand;
            f(
                name,
                NameAt {
                    call,
                    operator,
                    member: after_dot,
                    next: b.get(j).copied().unwrap_or(0),
                },
            );
            after_operand = !KEYWORDS.contains(&name) && !operator;
            after_dot = false;
            continue;
        }
        if !c.is_ascii_whitespace() {
            after_dot = c == b'.';
            after_operand = matches!(c, b')' | b']' | b'}');
        }
        i += 1;
    }
}

/// A bare name that glues a word operator to what follows it (`ortrue`, `andnot`, `andd`):
/// expr-lang's parser splits it (`or true`), so it compiles and routes the wrong way or fails
/// when evaluated (breaker). The name and the operator it starts with; `None` when every bare
/// name is one an expression knows (a namespace, a function, a keyword, a variable `$x`/`#`).
fn glued_operator(code: &str) -> Option<(String, &'static str)> {
    const ROOTS: [&str; 8] = [
        "states", "inputs", "env", "loop", "workflow", "context", "error", "len",
    ];
    let mut found = None;
    each_name(code, |name, n| {
        if found.is_some() || n.member || n.call || n.next == b':' {
            return;
        }
        let known = KEYWORDS.contains(&name)
            || OPERATOR_WORDS.contains(&name)
            || ROOTS.contains(&name)
            || FUNCTIONS.contains(&name)
            || name.starts_with(['$', '#']);
        if known {
            return;
        }
        if let Some(op) = WORD_OPERATORS
            .iter()
            .copied()
            .filter(|op| name.len() > op.len() && name.starts_with(op))
            .max_by_key(|op| op.len())
        {
            found = Some((name.to_owned(), op));
        }
    });
    found
}

/// The error for a call to `name`, which the evaluator does not have, with a hint: the
/// operator form for an operator word, else the closest function name.
fn unknown_function(code: &str, name: &str) -> TemplateError {
    let hint = if OPERATOR_WORDS.contains(&name) {
        Some(format!(
            "{name} is an operator, not a function; use the operator: x {name} 'y'"
        ))
    } else {
        // The template functions of the same job (new user: `trimSpace` in a `while:`, as
        // README lists it for templates).
        TEMPLATE_NAMES
            .iter()
            .find(|(t, _)| *t == name)
            .map(|(_, e)| *e)
            .or_else(|| awf_domain::validate::closest(name, FUNCTIONS.iter().copied()))
            .or_else(|| {
                FUNCTIONS
                    .iter()
                    .copied()
                    .find(|f| f.eq_ignore_ascii_case(&name.replace('_', "")))
            })
            .map(|c| format!("did you mean '{c}'?"))
    };
    let mut message = format!(
        "invalid expression \"{code}\": unknown function {name}() (the run would fail with 'Unknown function')"
    );
    if let Some(h) = hint {
        message.push_str(awf_domain::ports::template::HINT_SEPARATOR);
        message.push_str(&h);
    }
    TemplateError::Failed(message)
}

/// Refuses `{{ }}` in expressions (they are not interpolated), empty text, and brackets
/// nested more than 128 (`scan::MAX_EXPRESSION_NESTING`) deep (the parser recurses once per level).
fn precheck(expr: &str) -> Result<&str, TemplateError> {
    let code = expr.trim();
    if code.is_empty() {
        return Err(TemplateError::Failed("empty expression".to_owned()));
    }
    if code.contains("{{") {
        return Err(TemplateError::Failed(format!(
            "expression \"{code}\" contains a template: expressions are not interpolated, \
             so {{{{ }}}} is not allowed; write states.x.Output or inputs.name directly"
        )));
    }
    if scan::expression_depth(code) > scan::MAX_EXPRESSION_NESTING {
        return Err(scan::too_deep(scan::MAX_EXPRESSION_NESTING));
    }
    if let Some((lo, hi)) = huge_range(code) {
        return Err(TemplateError::Failed(format!(
            "expression \"{code}\": the range {lo}..{hi} has more than {MAX_RANGE_ITEMS} items \
             (each becomes a value in memory)"
        )));
    }
    Ok(code)
}

/// Most items a literal range `a..b` in an expression may have: the evaluator builds every
/// item, so `1..999999999999` would need terabytes.
pub const MAX_RANGE_ITEMS: u128 = 1_000_000;

/// The first literal range `a..b` of `code` (outside string literals) with more than
/// [`MAX_RANGE_ITEMS`] items.
fn huge_range(code: &str) -> Option<(u128, u128)> {
    let b = code.as_bytes();
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match quote {
            Some(q) => {
                if c == b'\\' {
                    i += 1;
                } else if c == q {
                    quote = None;
                }
            }
            None if c == b'"' || c == b'\'' || c == b'`' => quote = Some(c),
            None if c == b'.' && b.get(i + 1) == Some(&b'.') => {
                let left = code[..i].trim_end();
                let lo_text: String = left
                    .chars()
                    .rev()
                    .take_while(char::is_ascii_digit)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                let right = code[i + 2..].trim_start();
                let hi_text: String = right.chars().take_while(char::is_ascii_digit).collect();
                let parse = |t: &str| {
                    t.parse::<u128>()
                        .ok()
                        .or((!t.is_empty()).then_some(u128::MAX))
                };
                if let (Some(lo), Some(hi)) = (parse(&lo_text), parse(&hi_text))
                    && hi.saturating_sub(lo) >= MAX_RANGE_ITEMS
                {
                    return Some((lo, hi));
                }
                i += 1;
            }
            None => {}
        }
        i += 1;
    }
    None
}

fn compile_error(code: &str, e: &expr::Error) -> TemplateError {
    let detail = match e {
        expr::Error::PestError(_) => {
            // pest's text is a multi-line drawing; keep its position and its expectation.
            let text = e.to_string();
            let at = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("-->"))
                .map(str::trim);
            let why = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("= "))
                .map(str::trim);
            // A list of the grammar's rule names (`expected EOI, pipe, method_call, …`)
            // tells a user nothing (new user): past a few, say only where it broke.
            let why = why.filter(|w| w.matches(',').count() < 4);
            match (at, why) {
                (Some(at), Some(why)) => format!("syntax error at {at}: {why}"),
                (Some(at), None) => format!("syntax error at {at}: unexpected text there"),
                _ => "syntax error".to_owned(),
            }
        }
        other => other.to_string(),
    };
    let hint = if lone_equals(code) {
        format!(
            "{}compare with `==` (a single `=` is not an operator): `states.build.ExitCode == 0`",
            awf_domain::ports::template::HINT_SEPARATOR
        )
    } else if let Some(op) = misspelt_operator(code, &detail) {
        let example = match op {
            "and" | "or" => format!("states.a.ExitCode == 0 {op} states.b.ExitCode == 0"),
            "not" => "not (states.a.ExitCode == 0)".to_owned(),
            "in" => "inputs.env in ['dev', 'prod']".to_owned(),
            _ => format!("states.a.Output {op} 'x'"),
        };
        format!(
            "{}did you mean '{op}'? (`{example}`)",
            awf_domain::ports::template::HINT_SEPARATOR
        )
    } else {
        String::new()
    };
    TemplateError::Failed(format!("invalid expression \"{code}\": {detail}{hint}"))
}

/// The word operator a syntax error's word is a typo of (`contans` → `contains`, `and`,
/// `not`): the parser only says where it broke (new user: no did-you-mean).
fn misspelt_operator(code: &str, detail: &str) -> Option<&'static str> {
    let at = detail.strip_prefix("syntax error at ")?;
    let (line, col) = at.split(':').next().zip(at.split(':').nth(1))?;
    let line: usize = line.trim().parse().ok()?;
    let col: usize = col
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .ok()?;
    let text: Vec<char> = code.lines().nth(line.checked_sub(1)?)?.chars().collect();
    let at = col.checked_sub(1)?;
    let is_word = |c: &char| c.is_alphanumeric() || *c == '_';
    // The word the parser stopped at, or the one just before it (`nto x`: it stops at `x`).
    let here: String = text.iter().skip(at).take_while(|c| is_word(c)).collect();
    let before: String = {
        let end = text[..at.min(text.len())]
            .iter()
            .rposition(|c| !c.is_whitespace())
            .map_or(0, |i| i + 1);
        let start = text[..end]
            .iter()
            .rposition(|c| !is_word(c))
            .map_or(0, |i| i + 1);
        text[start..end].iter().collect()
    };
    [here, before]
        .iter()
        .filter(|w| !w.is_empty() && !OPERATOR_WORDS.contains(&w.as_str()))
        .find_map(|w| awf_domain::validate::closest(w, WORD_OPERATORS.iter().copied()))
}

/// Whether `code` holds a `=` that is not part of `==`, `!=`, `<=`, `>=` (outside string
/// literals): the assignment a user wrote for a comparison.
fn lone_equals(code: &str) -> bool {
    let b = code.as_bytes();
    let mut quote = None;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match quote {
            Some(q) if c == b'\\' && q != b'`' => i += 1,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if matches!(c, b'"' | b'\'' | b'`') => quote = Some(c),
            None if c == b'=' => {
                let prev = if i > 0 { b[i - 1] } else { 0 };
                if b.get(i + 1) == Some(&b'=') {
                    i += 1;
                } else if !matches!(prev, b'!' | b'<' | b'>' | b'=') {
                    return true;
                }
            }
            None => {}
        }
        i += 1;
    }
    false
}

/// Rewrites `contains(A, B)` to `A contains B` (AWF's rule: the arguments hold no `,` or
/// `)`), leaving `x.contains(…)` and longer names alone.
pub(crate) fn rewrite_contains(code: &str) -> std::borrow::Cow<'_, str> {
    const NAME: &str = "contains(";
    if !code.contains(NAME) {
        return std::borrow::Cow::Borrowed(code);
    }
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find(NAME) {
        let before = &rest[..at];
        let prev = before.bytes().last().unwrap_or(b' ');
        let after = &rest[at + NAME.len()..];
        let standalone = !scan::is_ident_char(prev) && prev != b'.';
        let args = after.find(')').map(|end| (&after[..end], end));
        match args {
            Some((inner, end)) if standalone && inner.matches(',').count() == 1 => {
                let (a, b) = inner.split_once(',').unwrap_or((inner, ""));
                out.push_str(before);
                out.push_str(a.trim());
                out.push_str(" contains ");
                out.push_str(b.trim());
                rest = &after[end + 1..];
            }
            _ => {
                out.push_str(&rest[..at + NAME.len()]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

fn from_json(v: &JValue) -> Value {
    match v {
        JValue::Null => Value::Nil,
        JValue::Bool(b) => Value::Bool(*b),
        JValue::Number(n) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        JValue::String(s) => Value::String(s.clone()),
        JValue::Array(items) => Value::Array(items.iter().map(from_json).collect()),
        JValue::Object(map) => {
            Value::Map(map.iter().map(|(k, v)| (k.clone(), from_json(v))).collect())
        }
    }
}

/// An input as expressions see it: `"true"` → true, `"10"` → 10, `"2.5"` → 2.5.
fn coerce_input(v: &JValue) -> Value {
    let JValue::String(s) = v else {
        return from_json(v);
    };
    if s.eq_ignore_ascii_case("true") {
        return Value::Bool(true);
    }
    if s.eq_ignore_ascii_case("false") {
        return Value::Bool(false);
    }
    if let Ok(i) = s.parse::<i64>() {
        return Value::Integer(i);
    }
    let numeric = s.bytes().any(|c| c.is_ascii_digit())
        && s.bytes()
            .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'-' | b'+' | b'e' | b'E'));
    if numeric
        && let Ok(f) = s.parse::<f64>()
        && f.is_finite()
    {
        return Value::Float(f);
    }
    Value::String(s.clone())
}

fn both(m: &mut Fields, pascal: &str, snake: &str, v: Value) {
    if pascal != snake {
        m.insert(snake.to_owned(), v.clone());
    }
    m.insert(pascal.to_owned(), v);
}

fn strings<'a>(entries: impl Iterator<Item = (&'a String, &'a String)>) -> Value {
    Value::Map(
        entries
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

fn state_value(s: &StepState) -> Value {
    let mut m = Fields::with_capacity(26);
    for (pascal, snake, v) in s.fields() {
        both(&mut m, pascal, snake, from_json(&v));
    }
    Value::Map(m)
}

fn loop_value(f: &LoopFrame) -> Value {
    let mut m = Fields::with_capacity(14);
    let index = i64::try_from(f.index).unwrap_or(i64::MAX);
    both(&mut m, "Index", "index", Value::Integer(index));
    both(
        &mut m,
        "Index1",
        "index1",
        Value::Integer(index.saturating_add(1)),
    );
    both(&mut m, "Item", "item", from_json(&f.item));
    both(&mut m, "Length", "length", Value::Integer(f.length));
    both(&mut m, "First", "first", Value::Bool(f.first));
    both(&mut m, "Last", "last", Value::Bool(f.last));
    both(
        &mut m,
        "Parent",
        "parent",
        f.parent.as_deref().map_or(Value::Nil, loop_value),
    );
    Value::Map(m)
}

/// The variables one expression can reach, built only for the namespaces it mentions.
struct Env {
    vars: Fields,
}

impl ContextProvider for Env {
    fn get(&self, key: &str) -> Option<&Value> {
        Some(self.vars.get(key).unwrap_or(&NIL))
    }

    fn to_context(&self) -> Context {
        self.vars
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

impl Env {
    fn build(code: &str, scope: &Scope<'_>) -> Self {
        let all = code.contains("$env");
        let wants = |name: &str| all || scan::mentions(code, name);
        let mut vars = Fields::with_capacity(8);
        if wants("inputs") {
            let inputs: Fields = scope
                .inputs
                .iter()
                .map(|(k, v)| (k.clone(), coerce_input(v)))
                .collect();
            vars.insert("inputs".to_owned(), Value::Map(inputs));
        }
        if wants("states") {
            let need = scan::states_in_expression(code);
            let states: Fields = scope
                .states
                .iter()
                .filter(|(name, _)| need.wants(name))
                .map(|(name, s)| (name.clone(), state_value(s)))
                .collect();
            vars.insert("states".to_owned(), Value::Map(states));
        }
        if wants("env") {
            vars.insert("env".to_owned(), strings(scope.env.iter()));
        }
        if wants("awf") {
            vars.insert("awf".to_owned(), strings(scope.awf.iter()));
        }
        if wants("workflow") {
            let w = scope.workflow;
            let mut m = Fields::with_capacity(10);
            both(&mut m, "ID", "id", Value::String(w.id.clone()));
            both(&mut m, "Name", "name", Value::String(w.name.clone()));
            both(
                &mut m,
                "CurrentState",
                "current_state",
                Value::String(w.current_state.clone()),
            );
            both(
                &mut m,
                "StartedAt",
                "started_at",
                Value::String(rfc3339(w.started_at)),
            );
            both(
                &mut m,
                "Duration",
                "duration",
                Value::Float(w.duration.as_secs_f64()),
            );
            vars.insert("workflow".to_owned(), Value::Map(m));
        }
        if wants("context") {
            let c = scope.context;
            let mut m = Fields::with_capacity(6);
            both(
                &mut m,
                "WorkingDir",
                "working_dir",
                Value::String(c.working_dir.clone()),
            );
            both(&mut m, "User", "user", Value::String(c.user.clone()));
            both(
                &mut m,
                "Hostname",
                "hostname",
                Value::String(c.hostname.clone()),
            );
            vars.insert("context".to_owned(), Value::Map(m));
        }
        if wants("loop")
            && let Some(f) = scope.loop_frame
        {
            vars.insert("loop".to_owned(), loop_value(f));
        }
        if wants("error")
            && let Some(e) = scope.error
        {
            let mut m = Fields::with_capacity(8);
            both(
                &mut m,
                "Message",
                "message",
                Value::String(e.message.clone()),
            );
            both(&mut m, "State", "state", Value::String(e.state.clone()));
            both(&mut m, "ExitCode", "exit_code", Value::Integer(e.exit_code));
            both(&mut m, "Type", "type", Value::String(e.kind.clone()));
            vars.insert("error".to_owned(), Value::Map(m));
        }
        Self { vars }
    }
}

/// Whether `code` reads `states.X`, `inputs.X` or `env.X` for an `X` that does not exist:
/// the AWF rule turns an evaluation error in such an expression into `false`.
fn reads_missing(code: &str, scope: &Scope<'_>) -> bool {
    scan::rooted_members(code)
        .into_iter()
        .any(|(ns, name)| match ns {
            Namespace::States => !scope.states.contains_key(name),
            Namespace::Inputs => !scope.inputs.contains_key(name),
            Namespace::Env => !scope.env.contains_key(name),
            Namespace::Workflow
            | Namespace::Context
            | Namespace::Loop
            | Namespace::Error
            | Namespace::Awf => false,
        })
}

/// Whether `code` reads the `ExitCode` of a skipped state (a parallel branch that never
/// started): it has none, and the expression is `false`, as one reading a state that has not
/// run is (`states.b.ExitCode != 0` must not hold for a branch that never ran either).
fn reads_skipped_exit_code(code: &str, scope: &Scope<'_>) -> bool {
    scan::rooted_member_fields(code)
        .into_iter()
        .any(|(ns, name, field)| {
            ns == Namespace::States
                && matches!(field, Some("ExitCode" | "exit_code"))
                && scope
                    .states
                    .get(name)
                    .is_some_and(|s| s.status == StepStatus::Skipped)
        })
}

fn kind(v: &Value) -> &'static str {
    if matches!(v, Value::Integer(_) | Value::Float(_)) {
        "a number"
    } else if matches!(v, Value::Bool(_)) {
        "a boolean"
    } else if v.is_nil() {
        "nil"
    } else if matches!(v, Value::String(_)) {
        "a string"
    } else if matches!(v, Value::Array(_)) {
        "an array"
    } else if matches!(v, Value::Map(_) | Value::KeyedMap(_)) {
        "a map"
    } else {
        "a value of another type"
    }
}

/// Functions whose work is bounded by the size of their arguments and whose result is no
/// larger (an expression calling only these, with no range, is light: see
/// [`Evaluation::light`]).
const LIGHT_FUNCTIONS: &[&str] = &[
    "len",
    "trim",
    "trimPrefix",
    "trimSuffix",
    "upper",
    "lower",
    "has_prefix",
    "has_suffix",
    "hasPrefix",
    "hasSuffix",
    "indexOf",
    "lastIndexOf",
    "int",
    "float",
    "abs",
    "ceil",
    "floor",
    "round",
    "first",
    "last",
    "type",
    "get",
];

/// Whether `code` (contains-rewritten) is light: see [`LIGHT_FUNCTIONS`].
fn light(code: &str) -> bool {
    !code.contains("..")
        && called_functions(code)
            .iter()
            .all(|f| LIGHT_FUNCTIONS.contains(&f.as_str()))
}

/// `e`, an evaluation error of `expr`, as awf reports it: a budget's end whole (with its
/// hint), anything else after `cannot evaluate expression "…"`.
fn run_error(expr: &str, e: &expr::Error) -> TemplateError {
    let text = e.to_string();
    match Exceeded::in_text(&text) {
        Some(x) => x.error(&format!("expression \"{}\"", expr.trim())),
        None => TemplateError::Failed(format!(
            "cannot evaluate expression \"{}\": {text}",
            expr.trim()
        )),
    }
}

/// Runs `program` against `vars` under a fresh budget (`stop` polled) and reads its result as
/// a condition.
fn run_bool(
    env: &Environment<'static>,
    program: &Program,
    vars: &Env,
    expr: &str,
    missing: bool,
    stop: Option<StopCheck>,
) -> Result<bool, TemplateError> {
    let _budget = budget::enter(stop);
    match guarded_run(env, program, vars) {
        Ok(Value::Bool(b)) => Ok(b),
        Ok(other) => Err(TemplateError::Failed(format!(
            "expression \"{}\" must give a boolean, got {}",
            expr.trim(),
            kind(&other)
        ))),
        Err(e) if Exceeded::in_text(&e.to_string()).is_some() => Err(run_error(expr, &e)),
        Err(_) if missing => Ok(false),
        Err(e) => Err(run_error(expr, &e)),
    }
}

impl ExprEvaluator {
    /// What [`ExpressionEvaluator::prepare_bool`] prepares: `Ok(Err(answer))` when the answer
    /// is known without evaluating.
    #[allow(clippy::type_complexity)]
    fn prepared(
        &self,
        expr: &str,
        scope: &Scope<'_>,
    ) -> Result<Result<(Arc<Program>, Env, bool, bool), bool>, TemplateError> {
        let code = precheck(expr)?;
        let code = rewrite_contains(code);
        let program = self.compile(&code)?;
        if reads_skipped_exit_code(&code, scope) {
            return Ok(Err(false));
        }
        let env = Env::build(&code, scope);
        Ok(Ok((
            program,
            env,
            reads_missing(&code, scope),
            light(&code),
        )))
    }
}

impl ExpressionEvaluator for ExprEvaluator {
    fn eval_bool(&self, expr: &str, scope: &Scope<'_>) -> Result<bool, TemplateError> {
        match self.prepared(expr, scope)? {
            Err(answer) => Ok(answer),
            Ok((program, vars, missing, _)) => {
                run_bool(self.env(), &program, &vars, expr, missing, None)
            }
        }
    }

    fn prepare_bool(
        &self,
        expr: &str,
        scope: &Scope<'_>,
    ) -> Result<Evaluation<bool>, TemplateError> {
        match self.prepared(expr, scope)? {
            Err(answer) => Ok(Evaluation::ready(Ok(answer))),
            Ok((program, vars, missing, light)) => {
                let env = Arc::clone(self.env());
                let expr = expr.to_owned();
                Ok(Evaluation::new(light, move |stop| {
                    run_bool(&env, &program, &vars, &expr, missing, Some(stop))
                }))
            }
        }
    }

    fn eval_int(&self, expr: &str) -> Result<i64, TemplateError> {
        let code = precheck(expr)?;
        if code.contains("**") || code.contains("++") {
            return Err(TemplateError::Failed(format!(
                "invalid arithmetic expression \"{code}\": `**` and `++` are not allowed"
            )));
        }
        let program = self.compile(code)?;
        let fail =
            |why: String| TemplateError::Failed(format!("arithmetic expression \"{code}\": {why}"));
        let _budget = budget::enter(None);
        match guarded_run(self.env(), &program, &Context::default()) {
            Ok(Value::Integer(i)) => Ok(i),
            Ok(Value::Float(f)) if f.is_finite() => {
                let t = f.trunc();
                if t >= i64::MIN as f64 && t <= i64::MAX as f64 {
                    // In range and integral, so the cast is exact.
                    Ok(t as i64)
                } else {
                    Err(fail("result out of range".to_owned()))
                }
            }
            Ok(Value::Float(_)) => Err(fail("division by zero".to_owned())),
            Ok(other) => Err(fail(format!("must give a number, got {}", kind(&other)))),
            Err(e) => match Exceeded::in_text(&e.to_string()) {
                Some(x) => Err(x.error(&format!("arithmetic expression \"{code}\""))),
                None => Err(fail(e.to_string())),
            },
        }
    }

    fn check(&self, expr: &str) -> Result<(), TemplateError> {
        let code = precheck(expr)?;
        let code = rewrite_contains(code);
        self.compile(&code)?;
        if let Some((name, op)) = glued_operator(&code) {
            let rest = &name[op.len()..];
            return Err(TemplateError::Failed(format!(
                "invalid expression \"{code}\": `{name}` is no name an expression knows: it reads as `{op} {rest}`{}put a space after `{op}` if that is meant, or fix the word",
                awf_domain::ports::template::HINT_SEPARATOR
            )));
        }
        let called = called_functions(&code);
        if let Some(name) = called
            .iter()
            .find(|name| !FUNCTIONS.contains(&name.as_str()))
        {
            return Err(unknown_function(&code, name));
        }
        if let Some((name, feature)) = called
            .iter()
            .find_map(|n| UNAVAILABLE.iter().find(|(u, _)| u == n))
        {
            let hint = if *feature == "temporal" {
                "take the time from a shell step (`date +%s`) and compare numbers"
            } else {
                "decode it in a shell step (`jq`, `base64 -d`) and route on that step's output"
            };
            return Err(TemplateError::Failed(format!(
                "invalid expression \"{code}\": {name}() is not available in this build of awf \
                 (expr-lang without its `{feature}` feature; the run would fail){}{hint}",
                awf_domain::ports::template::HINT_SEPARATOR
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod range_tests {
    use super::huge_range;

    #[test]
    fn literal_ranges_are_bounded() {
        assert_eq!(
            huge_range("len(1..999999999999) > 0"),
            Some((1, 999_999_999_999))
        );
        assert_eq!(
            huge_range("map(1 .. 100000000, # * 2)[0] == 2"),
            Some((1, 100_000_000))
        );
        assert_eq!(huge_range("len(1..10) == 10"), None);
        assert_eq!(huge_range("'1..999999999' == inputs.x"), None);
        assert_eq!(huge_range("1..inputs.n"), None);
    }
}

#[cfg(test)]
#[path = "expression_tests.rs"]
mod tests;
