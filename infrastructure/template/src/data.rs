//! Builds the template root (the dot) from a [`Scope`].
//!
//! Every map is a gtmpl `Value::Object`, on which a missing key is an error (Go's
//! `missingkey=error`). Struct-like namespaces carry each field twice, in PascalCase and in
//! snake_case (`ExitCode` and `exit_code`), so both spellings work in both forms.
//!
//! Source: spec/workflow.md §2.2, §2.3, §2.6, §7.1; decisions.md.

use std::collections::HashMap;

use awf_domain::duration::format_go;
use awf_domain::run::StepState;
use awf_domain::scope::ErrorInfo;
use awf_domain::scope::LoopFrame;
use awf_domain::scope::RuntimeInfo;
use awf_domain::scope::Scope;
use awf_domain::scope::WorkflowInfo;
use gtmpl_ng::Number;
use gtmpl_ng::Value;
use serde_json::Value as JValue;

use crate::gojson;
use crate::scan::Needs;
use crate::timefmt::rfc3339;

type Fields = HashMap<String, Value>;

/// Inserts `v` under both spellings of a field.
fn both(m: &mut Fields, pascal: &str, snake: &str, v: Value) {
    if pascal != snake {
        m.insert(snake.to_owned(), v.clone());
    }
    m.insert(pascal.to_owned(), v);
}

fn num_i64(n: i64) -> Value {
    Value::Number(Number::from(n))
}

fn num_u64(n: u64) -> Value {
    Value::Number(Number::from(n))
}

/// A JSON value as a template value: objects become `Object`s (strict keys), floats keep
/// Go's printing (integral ones print without a fraction).
pub(crate) fn from_json(v: &JValue) -> Value {
    match v {
        JValue::Null => Value::Nil,
        JValue::Bool(b) => Value::Bool(*b),
        JValue::Number(n) => {
            if let Some(u) = n.as_u64() {
                num_u64(u)
            } else if let Some(i) = n.as_i64() {
                num_i64(i)
            } else {
                Value::Number(Number::from(n.as_f64().unwrap_or(f64::NAN)))
            }
        }
        JValue::String(s) => Value::String(s.clone()),
        JValue::Array(items) => Value::Array(items.iter().map(from_json).collect()),
        JValue::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), from_json(v))).collect())
        }
    }
}

fn string_map<'a>(entries: impl Iterator<Item = (&'a String, &'a String)>) -> Value {
    Value::Object(
        entries
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

/// `.states.<name>`.
pub(crate) fn state_value(s: &StepState) -> Value {
    let mut m = Fields::with_capacity(28);
    for (pascal, snake, v) in s.fields() {
        both(&mut m, pascal, snake, from_json(&v));
    }
    Value::Object(m)
}

fn workflow_value(w: &WorkflowInfo) -> Value {
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
        Value::String(format_go(w.duration)),
    );
    Value::Object(m)
}

fn context_value(c: &RuntimeInfo) -> Value {
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
    Value::Object(m)
}

fn error_value(e: &ErrorInfo) -> Value {
    let mut m = Fields::with_capacity(8);
    both(
        &mut m,
        "Message",
        "message",
        Value::String(e.message.clone()),
    );
    both(&mut m, "State", "state", Value::String(e.state.clone()));
    both(&mut m, "ExitCode", "exit_code", num_i64(e.exit_code));
    both(&mut m, "Type", "type", Value::String(e.kind.clone()));
    Value::Object(m)
}

/// How a loop item prints (§2.6): strings unchanged, numbers and bools plain, `null` for
/// null, compact sorted JSON for composites. Non-string items are also recorded in
/// `json_items` so that `json` returns their JSON rather than a quoted string.
fn item_value(item: &JValue, json_items: &mut Vec<String>) -> Value {
    match item {
        JValue::String(s) => Value::String(s.clone()),
        JValue::Bool(b) => Value::Bool(*b),
        JValue::Number(_) => from_json(item),
        JValue::Null => {
            json_items.push("null".to_owned());
            Value::String("null".to_owned())
        }
        JValue::Array(_) | JValue::Object(_) => {
            let text = gojson::to_json(item);
            json_items.push(text.clone());
            Value::String(text)
        }
    }
}

/// `.loop` (and, recursively, `.loop.Parent`).
pub(crate) fn loop_value(f: &LoopFrame, json_items: &mut Vec<String>) -> Value {
    let mut m = Fields::with_capacity(14);
    both(&mut m, "Item", "item", item_value(&f.item, json_items));
    let index = u64::try_from(f.index).unwrap_or(u64::MAX);
    both(&mut m, "Index", "index", num_u64(index));
    both(&mut m, "Index1", "index1", num_u64(index.saturating_add(1)));
    both(&mut m, "First", "first", Value::Bool(f.first));
    both(&mut m, "Last", "last", Value::Bool(f.last));
    both(&mut m, "Length", "length", num_i64(f.length));
    let parent = match &f.parent {
        Some(p) => loop_value(p, json_items),
        None => Value::Nil,
    };
    both(&mut m, "Parent", "parent", parent);
    Value::Object(m)
}

/// The root object for one render, holding only what `needs` asks for. Appends the JSON
/// texts of non-string loop items to `json_items`.
pub(crate) fn root(scope: &Scope<'_>, needs: &Needs, json_items: &mut Vec<String>) -> Value {
    let mut m = Fields::with_capacity(8);
    if needs.inputs {
        m.insert(
            "inputs".to_owned(),
            Value::Object(
                scope
                    .inputs
                    .iter()
                    .map(|(k, v)| (k.clone(), from_json(v)))
                    .collect(),
            ),
        );
    }
    if needs.states.wants_any() {
        let states: Fields = scope
            .states
            .iter()
            .filter(|(name, _)| needs.states.wants(name))
            .map(|(name, s)| (name.clone(), state_value(s)))
            .collect();
        m.insert("states".to_owned(), Value::Object(states));
    }
    if needs.workflow {
        m.insert("workflow".to_owned(), workflow_value(scope.workflow));
    }
    if needs.env {
        m.insert("env".to_owned(), string_map(scope.env.iter()));
    }
    if needs.context {
        m.insert("context".to_owned(), context_value(scope.context));
    }
    if needs.awf {
        m.insert("awf".to_owned(), string_map(scope.awf.iter()));
    }
    if needs.loop_frame
        && let Some(frame) = scope.loop_frame
    {
        m.insert("loop".to_owned(), loop_value(frame, json_items));
    }
    if needs.error
        && let Some(e) = scope.error
    {
        m.insert("error".to_owned(), error_value(e));
    }
    Value::Object(m)
}
