//! awf-template: interpolation (Go `text/template` via gtmpl-ng) and expressions (expr-lang).
//!
//! Implements two domain ports from `awf_domain::ports::template`:
//! * [`GoTemplates`] — the [`Interpolator`](awf_domain::ports::template::Interpolator):
//!   `{{.inputs.x}}`, `{{states.s.Output}}`, `{{range}}`, `printf`, `escape`, `json`, …
//! * [`ExprEvaluator`] — the
//!   [`ExpressionEvaluator`](awf_domain::ports::template::ExpressionEvaluator): `when:`,
//!   `while:`, `break_when:` conditions and `max_iterations` arithmetic.
//!
//! Depends on `awf-domain` and its own third-party crates only (gtmpl-ng, expr-lang,
//! serde_json). No I/O except the `readFile` template function.
//!
//! Source: spec/workflow.md §2 and §7.1–7.2; decisions in design/decisions.md.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod budget;
mod data;
mod expression;
mod functions;
mod gojson;
mod guard;
mod interpolate;
mod ranges;
mod scan;
mod shell;
mod timefmt;

#[cfg(test)]
mod test_support;

pub use budget::DEADLINE;
pub use budget::MAX_VALUE_BYTES;
pub use expression::ExprEvaluator;
pub use expression::MAX_RANGE_ITEMS;
pub use functions::READ_FILE_LIMIT;
pub use interpolate::GoTemplates;
