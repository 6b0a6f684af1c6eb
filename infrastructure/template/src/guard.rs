//! The expression functions under the evaluation's budget ([`crate::budget`]).
//!
//! expr-lang (the Rust crate, pinned) has no budget of its own: no step count, no deadline, no
//! memory bound, and no way to interrupt an evaluation. Every call of a function goes through
//! the [`Environment`]'s table, though, and so does every predicate (`map(xs, {…})`): awf
//! registers its own entry for each name, so that
//! * each call, and each item a predicate function walks, checks the budget (a cancelled run,
//!   the deadline) first;
//! * each result (and each predicate's result) is counted against the size budget, and the
//!   functions that multiply their input (`repeat`, `replace`, `split`, a range) are refused
//!   before they allocate;
//! * `uniq`, `fromPairs` and `groupBy`, which the crate answers by comparing each item with
//!   every earlier one (quadratic: 3.3 s for 20 000 items), run in linear time;
//! * a range (`a..b`, which the evaluator rewrites to a call of [`RANGE_FUNCTION`]) has at most
//!   [`MAX_RANGE_ITEMS`] items, whatever computes its bounds.
//!
//! The predicate functions are written here with the crate's semantics and messages (their
//! source: expr-lang 2.1.0, `functions/array.rs`, `functions/collection.rs`,
//! `functions/misc.rs`, MIT); every other built-in is the crate's own, called through
//! [`builtins`].
//!
//! Source: trial finding h4.

use std::collections::HashMap;
use std::hash::Hash;
use std::hash::Hasher;
use std::sync::LazyLock;

use expr::Context;
use expr::ContextProvider;
use expr::Environment;
use expr::Program;
use expr::Value;

use crate::budget;
use crate::budget::Exceeded;

/// The name the evaluator gives a range `a..b` (`__awf_range(a, b)`): not one a user can
/// call by hand, since `awf validate` refuses names it does not list.
pub(crate) const RANGE_FUNCTION: &str = "__awf_range";

use crate::expression::MAX_RANGE_ITEMS;

/// Built-ins that take a predicate, written here (each item checks the budget).
const PREDICATE_FUNCTIONS: [&str; 15] = [
    "all",
    "any",
    "one",
    "none",
    "map",
    "filter",
    "find",
    "findIndex",
    "findLast",
    "findLastIndex",
    "count",
    "sum",
    "reduce",
    "groupBy",
    "sortBy",
];

/// Built-ins replaced by linear versions.
const LINEAR_FUNCTIONS: [&str; 2] = ["uniq", "fromPairs"];

/// The crate's built-ins, untouched: what a wrapped call runs.
fn builtins() -> &'static Environment<'static> {
    static BUILTINS: LazyLock<Environment<'static>> = LazyLock::new(Environment::new);
    &BUILTINS
}

type Res = expr::Result<Value>;

/// A call of a function, as expr-lang hands it over (its own type is not exported).
struct Call<'a> {
    ident: String,
    args: Vec<Value>,
    predicate: Option<&'a Program>,
    ctx: &'a dyn ContextProvider,
    env: &'a Environment<'a>,
}

/// The [`Call`] of expr-lang's call `$c`.
macro_rules! lift {
    ($c:ident) => {
        Call {
            ident: $c.ident,
            args: $c.args,
            predicate: $c.predicate,
            ctx: $c.ctx,
            env: $c.env,
        }
    };
}

fn fail(message: impl Into<String>) -> expr::Error {
    expr::Error::ExprError(message.into())
}

fn over(e: Exceeded) -> expr::Error {
    fail(e.marker())
}

/// Checks the budget (stop, deadline).
fn check() -> expr::Result<()> {
    budget::check().map_err(over)
}

/// Counts `v` against the size budget; refuses it nested past
/// [`MAX_VALUE_DEPTH`](budget::MAX_VALUE_DEPTH).
fn charge(v: &Value) -> expr::Result<()> {
    let (bytes, depth) = measure(v);
    if depth > budget::MAX_VALUE_DEPTH {
        return Err(over(Exceeded::Depth(budget::MAX_VALUE_DEPTH)));
    }
    budget::charge(bytes).map_err(over)
}

/// Fails unless `bytes` more fit the size budget (asked before allocating).
fn affords(bytes: usize) -> expr::Result<()> {
    budget::affords(bytes).map_err(over)
}

/// Bytes of one value slot.
const SLOT: usize = std::mem::size_of::<Value>();

/// Estimated bytes `v` takes (every slot, string and key), and how deep it nests (1 for a
/// scalar). Iterative: measuring a deep value does not recurse.
pub(crate) fn measure(v: &Value) -> (usize, usize) {
    let mut total = 0usize;
    let mut deepest = 0usize;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, depth)) = stack.pop() {
        deepest = deepest.max(depth);
        total = total.saturating_add(SLOT);
        match v {
            Value::String(s) => total = total.saturating_add(budget::string_bytes(s.len())),
            Value::Bytes(b) => total = total.saturating_add(b.len()),
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, depth + 1))),
            Value::Map(m) => {
                for (k, v) in m {
                    // The key's text and header, and the map's index and hash.
                    total = total.saturating_add(budget::string_bytes(k.len()) + 24 + 16);
                    stack.push((v, depth + 1));
                }
            }
            Value::KeyedMap(entries) => {
                for (k, v) in entries {
                    stack.push((k, depth + 1));
                    stack.push((v, depth + 1));
                }
            }
            _ => {}
        }
    }
    (total, deepest)
}

/// Registers awf's entry for every built-in of the crate in `env` (which already holds awf's
/// own functions, `split` and `splitAfter` among them, and is left with those), and the range
/// function.
pub(crate) fn install(env: &mut Environment<'static>, own: &[&str]) {
    for name in crate::expression::FUNCTIONS {
        if own.contains(name)
            || PREDICATE_FUNCTIONS.contains(name)
            || LINEAR_FUNCTIONS.contains(name)
        {
            continue;
        }
        env.add_function(name, |c| wrapped(lift!(c)));
    }
    env.add_function("map", |c| map(lift!(c)));
    env.add_function("filter", |c| filter(lift!(c)));
    env.add_function("all", |c| quantifier(lift!(c), "all", Quantifier::All));
    env.add_function("any", |c| quantifier(lift!(c), "any", Quantifier::Any));
    env.add_function("none", |c| quantifier(lift!(c), "none", Quantifier::None));
    env.add_function("one", |c| one(lift!(c)));
    env.add_function("find", |c| find(lift!(c), "find", false, false));
    env.add_function("findIndex", |c| find(lift!(c), "findIndex", false, true));
    env.add_function("findLast", |c| find(lift!(c), "findLast", true, false));
    env.add_function("findLastIndex", |c| {
        find(lift!(c), "findLastIndex", true, true)
    });
    env.add_function("count", |c| count(lift!(c)));
    env.add_function("sum", |c| sum(lift!(c)));
    env.add_function("reduce", |c| reduce(lift!(c)));
    env.add_function("groupBy", |c| group_by(lift!(c)));
    env.add_function("sortBy", |c| sort_by(lift!(c)));
    env.add_function("uniq", |c| uniq(lift!(c)));
    env.add_function("fromPairs", |c| from_pairs(lift!(c)));
    env.add_function(RANGE_FUNCTION, |c| range(lift!(c)));
}

/// A built-in of the crate, called after the budget check (and, for `repeat` and `replace`,
/// after its result's size is judged); its result is counted.
fn wrapped(c: Call<'_>) -> Res {
    check()?;
    match (c.ident.as_str(), c.args.as_slice()) {
        ("repeat", [Value::String(s), Value::Integer(n)]) => {
            let n = usize::try_from(*n).unwrap_or(0);
            affords(s.len().saturating_mul(n))?;
        }
        ("replace", [Value::String(s), Value::String(from), Value::String(to), ..]) => {
            // At most one replacement per character (an empty `from`: between each two).
            let places = if from.is_empty() {
                s.chars().count().saturating_add(1)
            } else {
                s.matches(from.as_str()).count()
            };
            affords(
                s.len()
                    .saturating_add(places.saturating_mul(to.len().saturating_sub(from.len()))),
            )?;
        }
        _ => {}
    }
    let r = builtins().eval_func(c.ctx, &c.ident, c.args, c.predicate)?;
    charge(&r)?;
    Ok(r)
}

/// The context of one predicate call: `#` (and `#index`, `#acc`) over the caller's.
struct Bound<'p> {
    parent: &'p dyn ContextProvider,
    values: Context,
}

impl ContextProvider for Bound<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.values.get(key).or_else(|| self.parent.get(key))
    }

    fn to_context(&self) -> Context {
        let mut c = self.parent.to_context();
        for key in ["#", "#index", "#acc"] {
            if let Some(v) = self.values.get(key) {
                c.insert(key, v.clone());
            }
        }
        c
    }

    fn environment(&self) -> Context {
        self.parent.environment()
    }
}

/// Runs `predicate` with `bindings` over `c`'s context, after the budget check. What it
/// created is released from the size budget when it returns (dropped with the call), its
/// result included: the caller counts what it keeps.
fn call(c: &Call<'_>, predicate: &Program, bindings: Vec<(&str, Value)>) -> Res {
    check()?;
    let mark = budget::used();
    let mut values = Context::default();
    for (k, v) in bindings {
        values.insert(k, v);
    }
    let bound = Bound {
        parent: c.ctx,
        values,
    };
    let r = c.env.run(predicate, &bound);
    budget::release_to(mark);
    r
}

fn item(value: &Value) -> Vec<(&'static str, Value)> {
    vec![("#", value.clone())]
}

/// The array and predicate of a one-argument predicate function.
fn array_and_predicate<'c>(
    c: &'c Call<'_>,
    name: &str,
) -> expr::Result<(&'c [Value], &'c Program)> {
    if c.args.len() != 1 {
        return Err(fail(format!(
            "{name}() takes exactly one argument and a predicate"
        )));
    }
    match (&c.args[0], c.predicate) {
        (Value::Array(a), Some(p)) => Ok((a.as_slice(), p)),
        _ => Err(fail(format!(
            "{name}() takes an array as the first argument"
        ))),
    }
}

fn map(c: Call<'_>) -> Res {
    let (a, p) = array_and_predicate(&c, "map")?;
    let mut out = Vec::with_capacity(a.len());
    for (index, value) in a.iter().enumerate() {
        let r = call(&c, p, vec![("#", value.clone()), ("#index", index.into())])?;
        charge(&r)?;
        out.push(r);
    }
    Ok(Value::Array(out))
}

fn filter(c: Call<'_>) -> Res {
    let (a, p) = array_and_predicate(&c, "filter")?;
    let mut out = Vec::new();
    for value in a {
        if let Value::Bool(true) = call(&c, p, item(value))? {
            charge(value)?;
            out.push(value.clone());
        }
    }
    Ok(Value::Array(out))
}

#[derive(Clone, Copy)]
enum Quantifier {
    All,
    Any,
    None,
}

/// `all`, `any`, `none`: a non-boolean result counts as neither (the crate's rule).
fn quantifier(c: Call<'_>, name: &str, q: Quantifier) -> Res {
    let (a, p) = array_and_predicate(&c, name)?;
    for value in a {
        match (q, call(&c, p, item(value))?) {
            (Quantifier::All, Value::Bool(false)) => return Ok(false.into()),
            (Quantifier::Any, Value::Bool(true)) => return Ok(true.into()),
            (Quantifier::None, Value::Bool(true)) => return Ok(false.into()),
            _ => {}
        }
    }
    Ok(matches!(q, Quantifier::All | Quantifier::None).into())
}

fn one(c: Call<'_>) -> Res {
    let (a, p) = array_and_predicate(&c, "one")?;
    let mut found = false;
    for value in a {
        if let Value::Bool(true) = call(&c, p, item(value))? {
            if found {
                return Ok(false.into());
            }
            found = true;
        }
    }
    Ok(found.into())
}

/// `find`, `findIndex`, `findLast`, `findLastIndex`.
fn find(c: Call<'_>, name: &str, last: bool, index: bool) -> Res {
    let (a, p) = array_and_predicate(&c, name)?;
    let at: Box<dyn Iterator<Item = (usize, &Value)>> = if last {
        Box::new(a.iter().enumerate().rev())
    } else {
        Box::new(a.iter().enumerate())
    };
    for (i, value) in at {
        if let Value::Bool(true) = call(&c, p, item(value))? {
            return Ok(if index { i.into() } else { value.clone() });
        }
    }
    Ok(if index {
        Value::Integer(-1)
    } else {
        Value::Nil
    })
}

fn count(c: Call<'_>) -> Res {
    if c.args.len() != 1 {
        return Err(fail("count() takes exactly one array argument"));
    }
    let Value::Array(values) = &c.args[0] else {
        return Err(fail("count() takes an array as the first argument"));
    };
    let mut n = 0i64;
    for value in values {
        let v = match c.predicate {
            Some(p) => call(&c, p, item(value))?,
            None => value.clone(),
        };
        match v {
            Value::Bool(true) => n += 1,
            Value::Bool(false) => {}
            _ if c.predicate.is_some() => {
                return Err(fail("count() predicate must return a boolean"));
            }
            _ => return Err(fail("count() without a predicate requires booleans")),
        }
    }
    Ok(Value::Integer(n))
}

fn add_sum(total: Value, value: Value) -> Res {
    match (total, value) {
        (Value::Integer(t), Value::Integer(v)) => Ok(Value::Integer(t.wrapping_add(v))),
        (Value::Integer(t), Value::Float(v)) => Ok(Value::Float(t as f64 + v)),
        (Value::Float(t), Value::Integer(v)) => Ok(Value::Float(t + v as f64)),
        (Value::Float(t), Value::Float(v)) => Ok(Value::Float(t + v)),
        _ => Err(fail("sum() values must be numbers")),
    }
}

fn sum(c: Call<'_>) -> Res {
    if c.args.len() != 1 {
        return Err(fail("sum() takes exactly one array argument"));
    }
    let Value::Array(values) = &c.args[0] else {
        return Err(fail("sum() takes an array as the first argument"));
    };
    let mut total = Value::Integer(0);
    for value in values {
        let v = match c.predicate {
            Some(p) => call(&c, p, item(value))?,
            None => value.clone(),
        };
        total = add_sum(total, v)?;
    }
    Ok(total)
}

fn reduce(c: Call<'_>) -> Res {
    if c.args.is_empty() || c.args.len() > 2 {
        return Err(fail("reduce() takes an array and optional initial value"));
    }
    let Value::Array(values) = &c.args[0] else {
        return Err(fail("reduce() takes an array as the first argument"));
    };
    let Some(p) = c.predicate else {
        return Err(fail("reduce() requires a predicate"));
    };
    let (mut acc, start) = match c.args.get(1) {
        Some(initial) => (initial.clone(), 0),
        None => match values.first() {
            Some(first) => (first.clone(), 1),
            None => {
                return Err(fail("reduce() of an empty array requires an initial value"));
            }
        },
    };
    // One accumulator is alive at a time: each replaces the last in the count.
    let base = budget::used();
    for (index, value) in values.iter().enumerate().skip(start) {
        acc = call(
            &c,
            p,
            vec![
                ("#", value.clone()),
                ("#acc", acc),
                ("#index", index.into()),
            ],
        )?;
        budget::release_to(base);
        charge(&acc)?;
    }
    Ok(acc)
}

/// A comparable map key (nil, a boolean, a number, a string) for hashing: equal keys (the
/// crate's `map_keys_equal`: the same kind and `==`) give equal `Key`s; NaN, equal to
/// nothing, gives none.
#[derive(PartialEq, Eq, Hash)]
enum Key<'a> {
    Nil,
    Bool(bool),
    Int(i64),
    Float(u64),
    Str(&'a str),
}

/// Whether `v` may be a map key (the crate's `is_comparable_map_key`).
fn comparable(v: &Value) -> bool {
    !matches!(
        v,
        Value::Array(_) | Value::Bytes(_) | Value::Map(_) | Value::KeyedMap(_)
    )
}

/// `v`'s [`Key`]; `None` for NaN and for kinds compared by a scan.
fn key_of(v: &Value) -> Option<Key<'_>> {
    Some(match v {
        Value::Nil => Key::Nil,
        Value::Bool(b) => Key::Bool(*b),
        Value::Integer(i) => Key::Int(*i),
        Value::Float(f) if f.is_nan() => return None,
        // 0.0 == -0.0.
        Value::Float(f) => Key::Float(if *f == 0.0 { 0 } else { f.to_bits() }),
        Value::String(s) => Key::Str(s),
        _ => return None,
    })
}

/// The crate's `map_keys_equal`.
fn keys_equal(a: &Value, b: &Value) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b) && a == b
}

/// Entries of a keyed map being built, found by key in constant time.
struct Keyed<'k> {
    entries: Vec<(Value, Value)>,
    index: HashMap<Key<'k>, usize>,
    /// Positions of the keys without a [`Key`] (scanned).
    others: Vec<usize>,
}

impl<'k> Keyed<'k> {
    fn new() -> Self {
        Self {
            entries: Vec::new(),
            index: HashMap::new(),
            others: Vec::new(),
        }
    }

    /// The position of `key`'s entry, if there is one.
    fn find(&self, key: &Value, hashed: Option<&Key<'k>>) -> Option<usize> {
        match hashed {
            Some(k) => self.index.get(k).copied(),
            None => self
                .others
                .iter()
                .copied()
                .find(|&i| keys_equal(&self.entries[i].0, key)),
        }
    }

    fn push(&mut self, key: Value, hashed: Option<Key<'k>>, value: Value) -> usize {
        let at = self.entries.len();
        match hashed {
            Some(k) => {
                self.index.insert(k, at);
            }
            None => self.others.push(at),
        }
        self.entries.push((key, value));
        at
    }
}

fn from_pairs(c: Call<'_>) -> Res {
    check()?;
    if c.args.len() != 1 {
        return Err(fail("fromPairs() takes exactly one argument"));
    }
    let Value::Array(pairs) = &c.args[0] else {
        return Err(fail("fromPairs() takes an array as the argument"));
    };
    let mut keyed = Keyed::new();
    for pair in pairs {
        let Value::Array(pair) = pair else {
            return Err(fail("fromPairs() expects an array of two-element arrays"));
        };
        let [key, value] = pair.as_slice() else {
            return Err(fail("fromPairs() expects an array of two-element arrays"));
        };
        if !comparable(key) {
            return Err(fail("fromPairs() map key is not comparable"));
        }
        let hashed = key_of(key);
        match keyed.find(key, hashed.as_ref()) {
            Some(at) => keyed.entries[at].1 = value.clone(),
            None => {
                keyed.push(key.clone(), hashed, value.clone());
            }
        }
    }
    let r = Value::KeyedMap(keyed.entries);
    charge(&r)?;
    Ok(r)
}

fn group_by(c: Call<'_>) -> Res {
    if c.args.len() != 1 {
        return Err(fail("groupBy() takes exactly two arguments"));
    }
    let (Value::Array(a), Some(p)) = (&c.args[0], c.predicate) else {
        return Err(fail(
            "groupBy() takes an array as the first argument and a predicate as the second argument",
        ));
    };
    // The keys first (owned), then the groups, which borrow them for hashing.
    let mut keys = Vec::with_capacity(a.len());
    for value in a {
        let key = call(&c, p, item(value))?;
        if !comparable(&key) {
            return Err(fail("groupBy() predicate returned a non-comparable key"));
        }
        charge(&key)?;
        keys.push(key);
    }
    let mut groups: Vec<(usize, Vec<Value>)> = Vec::new();
    let mut index: HashMap<Key<'_>, usize> = HashMap::new();
    let mut others: Vec<usize> = Vec::new();
    for (i, (key, value)) in keys.iter().zip(a).enumerate() {
        check()?;
        let hashed = key_of(key);
        let found = match &hashed {
            Some(k) => index.get(k).copied(),
            None => others
                .iter()
                .copied()
                .find(|&g| keys_equal(&keys[groups[g].0], key)),
        };
        let g = match found {
            Some(g) => g,
            None => {
                let g = groups.len();
                groups.push((i, Vec::new()));
                match hashed {
                    Some(k) => {
                        index.insert(k, g);
                    }
                    None => others.push(g),
                }
                g
            }
        };
        charge(value)?;
        groups[g].1.push(value.clone());
    }
    Ok(Value::KeyedMap(
        groups
            .into_iter()
            .map(|(k, group)| (keys[k].clone(), Value::Array(group)))
            .collect(),
    ))
}

/// The crate's check of sort keys: all numbers (no NaN) or all strings.
fn sortable<'a>(values: impl Iterator<Item = &'a Value>) -> Result<(), &'static str> {
    let mut kind = None;
    for v in values {
        let k = match v {
            Value::Float(f) if f.is_nan() => return Err("cannot compare NaN values"),
            Value::Integer(_) | Value::Float(_) => 0,
            Value::String(_) => 1,
            _ => return Err("values must all be numbers or all be strings"),
        };
        if kind.is_some_and(|kind| kind != k) {
            return Err("values must all be numbers or all be strings");
        }
        kind = Some(k);
    }
    Ok(())
}

/// The crate's order of sort keys (checked by [`sortable`]).
fn compare(a: &Value, b: &Value) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (a, b) {
        (Value::Integer(a), Value::Integer(b)) => a.cmp(b),
        (Value::Float(a), Value::Float(b)) => a.partial_cmp(b).unwrap_or(Ordering::Equal),
        (Value::Integer(a), Value::Float(b)) => {
            (*a as f64).partial_cmp(b).unwrap_or(Ordering::Equal)
        }
        (Value::Float(a), Value::Integer(b)) => {
            a.partial_cmp(&(*b as f64)).unwrap_or(Ordering::Equal)
        }
        (Value::String(a), Value::String(b)) => a.cmp(b),
        _ => Ordering::Equal,
    }
}

fn sort_by(c: Call<'_>) -> Res {
    if c.args.is_empty() || c.args.len() > 2 {
        return Err(fail("sortBy() takes one or two arguments and a predicate"));
    }
    let Value::Array(a) = &c.args[0] else {
        return Err(fail("sortBy() takes an array as the first argument"));
    };
    let Some(p) = c.predicate else {
        return Err(fail("sortBy() requires a predicate"));
    };
    let desc = match c.args.get(1) {
        None => false,
        Some(Value::String(s)) if s == "desc" => true,
        Some(Value::String(s)) if s == "asc" => false,
        Some(_) => {
            return Err(fail("sortBy() second argument must be \"asc\" or \"desc\""));
        }
    };
    let mut keyed: Vec<(Value, &Value)> = Vec::with_capacity(a.len());
    for value in a {
        let key = call(&c, p, item(value))?;
        charge(&key)?;
        keyed.push((key, value));
    }
    sortable(keyed.iter().map(|(k, _)| k)).map_err(|e| fail(format!("sortBy() {e}")))?;
    check()?;
    keyed.sort_by(|(a, _), (b, _)| {
        let o = compare(a, b);
        if desc { o.reverse() } else { o }
    });
    let out: Vec<Value> = keyed.into_iter().map(|(_, v)| v.clone()).collect();
    let r = Value::Array(out);
    charge(&r)?;
    Ok(r)
}

/// The crate's `values_equal`: numbers across kinds, arrays item by item, maps key by key.
fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Integer(a), Value::Float(b)) => *a as f64 == *b,
        (Value::Float(a), Value::Integer(b)) => *a == *b as f64,
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| values_equal(a, b))
        }
        (Value::Map(a), Value::Map(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(k, a)| b.get(k).is_some_and(|b| values_equal(a, b)))
        }
        (Value::KeyedMap(a), Value::KeyedMap(b)) => {
            a.len() == b.len()
                && a.iter().all(|(ak, av)| {
                    b.iter()
                        .any(|(bk, bv)| keys_equal(ak, bk) && values_equal(av, bv))
                })
        }
        _ => a == b,
    }
}

/// A hash that [`values_equal`] values share (numbers by their `f64`, maps whatever their
/// order); below a depth it stops looking (equal values still agree there).
fn equal_hash(v: &Value, depth: usize, h: &mut impl Hasher) {
    if depth > 32 {
        return;
    }
    match v {
        Value::Integer(i) => number_hash(*i as f64, h),
        Value::Float(f) => number_hash(*f, h),
        Value::Nil => 0u8.hash(h),
        Value::Bool(b) => (1u8, b).hash(h),
        Value::String(s) => (2u8, s).hash(h),
        Value::Bytes(b) => (3u8, b).hash(h),
        Value::Array(items) => {
            (4u8, items.len()).hash(h);
            for i in items {
                equal_hash(i, depth + 1, h);
            }
        }
        Value::Map(m) => {
            // The same sum whatever the order of the entries.
            let mut sum = 0u64;
            for (k, v) in m {
                let mut e = std::collections::hash_map::DefaultHasher::new();
                k.hash(&mut e);
                equal_hash(v, depth + 1, &mut e);
                sum = sum.wrapping_add(e.finish());
            }
            (5u8, m.len(), sum).hash(h);
        }
        Value::KeyedMap(entries) => (6u8, entries.len()).hash(h),
        #[allow(unreachable_patterns)]
        _ => 7u8.hash(h),
    }
}

fn number_hash(f: f64, h: &mut impl Hasher) {
    let bits = if f == 0.0 { 0 } else { f.to_bits() };
    (8u8, bits).hash(h);
}

fn uniq(c: Call<'_>) -> Res {
    check()?;
    if c.args.len() != 1 {
        return Err(fail("uniq() takes exactly one argument"));
    }
    let Value::Array(values) = &c.args[0] else {
        return Err(fail("uniq() takes an array as the argument"));
    };
    let mut out: Vec<Value> = Vec::new();
    // The positions in `out` of the kept values, by hash.
    let mut kept: HashMap<u64, Vec<usize>> = HashMap::new();
    for value in values {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        equal_hash(value, 0, &mut h);
        let same = kept.entry(h.finish()).or_default();
        if !same.iter().any(|&i| values_equal(&out[i], value)) {
            same.push(out.len());
            out.push(value.clone());
        }
    }
    let r = Value::Array(out);
    charge(&r)?;
    Ok(r)
}

/// `a..b`: the integers from `a` to `b` (none when `b < a`), at most [`MAX_RANGE_ITEMS`].
fn range(c: Call<'_>) -> Res {
    check()?;
    match c.args.as_slice() {
        [Value::Integer(a), Value::Integer(b)] => {
            let items = if b < a {
                0
            } else {
                (i128::from(*b) - i128::from(*a)).unsigned_abs() + 1
            };
            if items > MAX_RANGE_ITEMS {
                return Err(fail(format!(
                    "the range {a}..{b} has more than {MAX_RANGE_ITEMS} items (each becomes a value in memory)"
                )));
            }
            let n = usize::try_from(items).unwrap_or(usize::MAX);
            affords(n.saturating_mul(SLOT))?;
            let r = Value::Array((*a..=*b).map(Value::Integer).collect());
            charge(&r)?;
            Ok(r)
        }
        [a, b] => Err(fail(format!("invalid range: {a:?}..{b:?}"))),
        _ => Err(fail("invalid range")),
    }
}

/// Counts a string list of `pieces` pieces holding `bytes` bytes of text against the size
/// budget before it is built (`split`).
pub(crate) fn afford_pieces(pieces: usize, bytes: usize) -> expr::Result<()> {
    affords(
        pieces
            .saturating_mul(SLOT + 32)
            .saturating_add(bytes)
            .saturating_add(SLOT),
    )
}

/// Counts a value awf's own function built against the size budget.
pub(crate) fn charge_value(v: &Value) -> expr::Result<()> {
    charge(v)
}

/// Checks the budget (stop, deadline), for awf's own functions.
pub(crate) fn checkpoint() -> expr::Result<()> {
    check()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use awf_domain::ports::template::ExpressionEvaluator;
    use expr::Context;
    use expr::Environment;
    use pretty_assertions::assert_eq;

    use crate::expression::ExprEvaluator;

    /// The result (or error text) of `code` in `env`, with a budget entered.
    fn eval(env: &Environment<'_>, code: &str) -> String {
        let _b = crate::budget::enter(None);
        let program = expr::compile(code).unwrap();
        match env.run(&program, &Context::default()) {
            Ok(v) => format!("{v:?}"),
            Err(e) => format!("error: {e}"),
        }
    }

    /// awf's functions answer as the crate's own, errors included.
    #[test]
    fn the_guarded_functions_answer_as_the_crates() {
        let ours = {
            let mut env = Environment::new();
            super::install(&mut env, &[]);
            env
        };
        let theirs = Environment::new();
        for code in [
            "uniq([1, 1.0, 2, '2', [1], [1.0], {a: 1}, {a: 1.0}, nil, nil, true, 1, -0.0, 0])",
            "uniq([[1, [2]], [1, [2.0]], {a: 1, b: 2}, {b: 2, a: 1.0}, 'x', 'x'])",
            "uniq(fromPairs([[1, 'a']]) | toPairs())",
            "uniq([])",
            "uniq(1)",
            "uniq([1], [2])",
            "fromPairs([[1, 'a'], [1.0, 'b'], ['1', 'c'], [1, 'd'], [nil, 1], [true, 2], [nil, 3]])",
            "fromPairs([[0.0, 'a'], [-0.0, 'b']])",
            "fromPairs([[[1], 2]])",
            "fromPairs([[1]])",
            "fromPairs([1])",
            "fromPairs('x')",
            "groupBy(1..10, # % 3)",
            "groupBy(['a', 'bb', 'c', 'dd'], len(#))",
            "groupBy([1, 2], [#])",
            "groupBy(1, #)",
            "sortBy([3, 1, 2], #)",
            "sortBy(['b', 'a', 'c'], #, 'desc')",
            "sortBy([{n: 2, v: 'x'}, {n: 1, v: 'y'}, {n: 2, v: 'z'}], .n)",
            "sortBy([1, 'a'], #)",
            "sortBy([1], #, 'up')",
            "map(1..3, # * 2)",
            "map(1..3, #index)",
            "map('x', #)",
            "filter(1..6, # % 2 == 0)",
            "all(1..3, # > 0)",
            "all(1..3, 1)",
            "any(1..3, # > 2)",
            "none(1..3, # > 2)",
            "one(1..3, # > 2)",
            "one(1..3, # > 1)",
            "find(1..5, # > 2)",
            "find(1..5, # > 9)",
            "findIndex(1..5, # > 2)",
            "findLast(1..5, # < 3)",
            "findLastIndex(1..5, # < 3)",
            "findLastIndex(1..5, # > 9)",
            "count(1..5, # > 2)",
            "count([true, false, true])",
            "count([1])",
            "count(1..3, 1)",
            "sum(1..4)",
            "sum(1..4, # * 1.5)",
            "sum(['a'])",
            "reduce(1..4, #acc + #)",
            "reduce(1..4, #acc + #, 10)",
            "reduce([], #acc + #)",
            "reduce(['a', 'b'], #acc + # + string(#index), '')",
            "repeat('ab', 3)",
            "replace('a-b-c', '-', '+')",
            "len(1..3)",
            "max(1, 5, 3)",
            "let r = 1..3; map(r, {# * 10})",
            "map(1..2, {let y = # + 1; y * 2})",
            "map([[1, 2], [3]], {map(#, {# + 1})})",
            "1..3 | map(# + 1) | filter(# > 2)",
        ] {
            assert_eq!(eval(&ours, code), eval(&theirs, code), "{code}");
        }
    }

    /// What a predicate call makes and drops is released when it returns: temporaries and
    /// replaced accumulators do not add up (a `reduce` building a 90 KB string, an `all` over
    /// a megabyte made per item, three splits of 200 MB each, one after the other).
    #[test]
    fn temporaries_do_not_add_up() {
        let e = ExprEvaluator::new();
        let data = crate::test_support::Data::new();
        for code in [
            "len(reduce(1..20000, #acc + string(#), '')) > 0",
            "all(1..1000, {len(repeat('a', 1000000)) > 0})",
            "count(1..3, {len(split(repeat('ab', 1000000), '')) > 0}) == 3",
        ] {
            assert_eq!(e.eval_bool(code, &data.scope()), Ok(true), "{code}");
        }
    }

    /// A cancelled run's evaluation ends at its next check, whatever it was doing.
    #[test]
    fn a_stop_ends_an_evaluation() {
        let e = ExprEvaluator::new();
        let data = crate::test_support::Data::new();
        let ev = e
            .prepare_bool(
                "let r = 1..100000; all(r, {all(r, {# > 0})})",
                &data.scope(),
            )
            .unwrap();
        assert!(!ev.light);
        let r = ev.run(Arc::new(|| true));
        assert_eq!(
            r,
            Err(awf_domain::ports::template::TemplateError::Failed(
                "expression \"let r = 1..100000; all(r, {all(r, {# > 0})})\" stopped: the run is being cancelled"
                    .to_owned()
            ))
        );
        // Light: no function but `len`, no range.
        let ev = e
            .prepare_bool("len(inputs.name) > 1", &data.scope())
            .unwrap();
        assert!(ev.light);
        assert_eq!(ev.run(Arc::new(|| false)), Ok(true));
    }

    /// The values an evaluation keeps are counted together: `repeat`s in a `map`, a `split`
    /// (judged before it is built), a `replace` (judged before it is built).
    #[test]
    fn the_values_an_evaluation_creates_are_bounded_together() {
        let e = ExprEvaluator::new();
        let data = crate::test_support::Data::new();
        for code in [
            "len(map(1..100000, {repeat('a', 100000)})) > 0",
            "len(split(repeat('a', 1000000) + repeat('b', 1000000) + repeat('c', 1000000), '')) > 1",
            "len(map(1..1000, {let t = repeat('a', 1000000); t})) > 0",
            "len(replace(repeat('a', 1000000), '', repeat('b', 1000))) > 0",
        ] {
            let r = e.eval_bool(code, &data.scope());
            let Err(awf_domain::ports::template::TemplateError::Failed(m)) = &r else {
                panic!("{code}: {r:?}");
            };
            assert!(
                m.contains("would create more than 256 MiB of values")
                    && m.contains("\nhint: split, repeat, map and ranges"),
                "{code}: {m}"
            );
        }
    }

    /// A value nested past 128 levels (cloned, compared and dropped recursively) is refused.
    #[test]
    fn deep_values_are_refused() {
        let e = ExprEvaluator::new();
        let data = crate::test_support::Data::new();
        let r = e.eval_bool("len(reduce(1..300000, {[#acc]}, nil)) > 0", &data.scope());
        let Err(awf_domain::ports::template::TemplateError::Failed(m)) = &r else {
            panic!("{r:?}");
        };
        assert!(
            m.contains("would make a value nested more than 128 levels deep"),
            "{m}"
        );
        assert_eq!(
            e.eval_bool("len(reduce(1..100, {[#acc]}, nil)) == 1", &data.scope()),
            Ok(true)
        );
    }

    /// A range is bounded whatever computes its bounds.
    #[test]
    fn computed_ranges_are_bounded() {
        let e = ExprEvaluator::new();
        let data = crate::test_support::Data::new();
        for (code, range) in [
            ("len(1..inputs.count * 1000000) > 0", "1..3000000"),
            ("len(1..1_000_000_000_000) > 0", "1..1000000000000"),
            ("len(-1000000000..0) > 0", "-1000000000..0"),
            ("len(0..1000*1000) > 0", "0..1000000"),
        ] {
            let r = e.eval_bool(code, &data.scope());
            let Err(awf_domain::ports::template::TemplateError::Failed(m)) = &r else {
                panic!("{code}: {r:?}");
            };
            assert!(
                m.contains(&format!("the range {range} has more than 1000000 items")),
                "{code}: {m}"
            );
        }
        assert_eq!(
            e.eval_bool("len(1..inputs.count) == 3", &data.scope()),
            Ok(true)
        );
        assert_eq!(
            e.eval_bool("len(1..1000000) == 1000000", &data.scope()),
            Ok(true)
        );
    }
}

#[cfg(test)]
mod panic_tests {
    use awf_domain::ports::template::ExpressionEvaluator;

    use crate::expression::ExprEvaluator;

    /// expr-lang 2.1.0 panics (`unreachable!`) compiling an array inside a map literal: an
    /// error, not a crash of `awf validate` or of the run.
    #[test]
    fn a_literal_the_crate_cannot_compile_is_an_error() {
        let e = ExprEvaluator::new();
        let data = crate::test_support::Data::new();
        let Err(err) = e.check("{a: [1]}.a[0] == 1") else {
            panic!("compiled");
        };
        assert!(
            err.to_string()
                .contains("expr-lang cannot compile this expression"),
            "{err}"
        );
        assert!(e.eval_bool("{a: [1]}.a[0] == 1", &data.scope()).is_err());
    }
}
