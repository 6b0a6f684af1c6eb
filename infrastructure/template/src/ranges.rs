//! Rewrites every range `a..b` of an expression to a call `__awf_range(a, b)`
//! ([`crate::guard::RANGE_FUNCTION`]), which bounds the range's size whatever computes its
//! bounds (`1..inputs.n`, `1..1_000_000_000_000`, `-1000000000..0`): expr-lang builds every
//! item of a range, in one allocation no check can come between.
//!
//! The operands of each `..` are found by parsing the text with expr-lang's own grammar
//! (`expr.pest`, a copy of expr-lang 2.1.0's, MIT, pinned with it) and its precedence table,
//! so the call covers exactly what the crate would have made the range's operands.
//!
//! Source: trial finding h4.

use std::cell::Cell;
use std::cell::RefCell;
use std::sync::LazyLock;

use pest::Parser;
use pest::iterators::Pair;
use pest::pratt_parser::Assoc;
use pest::pratt_parser::Op;
use pest::pratt_parser::PrattParser;

use crate::guard::RANGE_FUNCTION;

#[derive(pest_derive::Parser)]
#[grammar = "expr.pest"]
struct Grammar;

/// expr-lang 2.1.0's precedence table (`pratt.rs`), lowest first.
static PRATT: LazyLock<PrattParser<Rule>> = LazyLock::new(|| {
    PrattParser::new()
        .op(Op::postfix(Rule::ternary))
        .op(Op::postfix(Rule::pipe))
        .op(Op::infix(Rule::or_op, Assoc::Left))
        .op(Op::infix(Rule::and_op, Assoc::Left))
        .op(Op::infix(Rule::equal_op, Assoc::Left)
            | Op::infix(Rule::comparison_op, Assoc::Left)
            | Op::infix(Rule::not_in_op, Assoc::Left)
            | Op::infix(Rule::string_op, Assoc::Left))
        .op(Op::infix(Rule::range_op, Assoc::Left))
        .op(Op::infix(Rule::addition_op, Assoc::Left))
        .op(Op::prefix(Rule::negation_op))
        .op(Op::infix(Rule::multiplication_op, Assoc::Left))
        .op(Op::prefix(Rule::sign_op))
        .op(Op::infix(Rule::exponent_op, Assoc::Right))
        .op(Op::postfix(Rule::default_op))
        .op(Op::postfix(Rule::method_call)
            | Op::postfix(Rule::membership_op)
            | Op::postfix(Rule::index_op)
            | Op::postfix(Rule::opt_membership_op)
            | Op::postfix(Rule::opt_index_op)
            | Op::postfix(Rule::range_start_op)
            | Op::postfix(Rule::range_end_op))
});

/// One range of the text: where its left operand starts, where its `..` is, where its
/// right operand ends (byte offsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range {
    start: usize,
    op: (usize, usize),
    end: usize,
}

/// `code` with every range written as a call of [`RANGE_FUNCTION`]; `None` when it has no
/// range, or does not parse (the evaluator's compiler then says why).
pub(crate) fn rewrite(code: &str) -> Option<String> {
    if !code.contains("..") {
        return None;
    }
    let pairs = Grammar::parse(Rule::full, code).ok()?;
    let ranges = RefCell::new(Vec::new());
    let ok = Cell::new(true);
    for p in pairs {
        visit(p, code, &ranges, &ok);
    }
    let ranges = ranges.into_inner();
    if !ok.get() || ranges.is_empty() {
        return None;
    }
    Some(apply(code, &ranges))
}

/// Finds the ranges of every `expr` in `pair` (itself included).
fn visit(pair: Pair<'_, Rule>, code: &str, ranges: &RefCell<Vec<Range>>, ok: &Cell<bool>) {
    if pair.as_rule() == Rule::expr {
        ranges_of(pair.clone(), code, ranges, ok);
    }
    for inner in pair.into_inner() {
        visit(inner, code, ranges, ok);
    }
}

/// The ranges at the top level of one `expr` (those nested in its terms are found by
/// [`visit`]).
fn ranges_of(expr: Pair<'_, Rule>, code: &str, ranges: &RefCell<Vec<Range>>, ok: &Cell<bool>) {
    PRATT
        .map_primary(|p| {
            let span = p.as_span();
            let (s, e) = (span.start(), span.end());
            if p.as_rule() == Rule::expr {
                // `( … )`: the parentheses are no pair of their own.
                match parenthesized(code, s, e) {
                    Some(outer) => outer,
                    None => {
                        ok.set(false);
                        (s, e)
                    }
                }
            } else {
                (s, e)
            }
        })
        .map_prefix(|op, (_, e)| (op.as_span().start(), e))
        .map_postfix(|(s, _), op| (s, op.as_span().end()))
        .map_infix(|(s, left_end), op, (right_start, e)| {
            if op.as_rule() == Rule::range_op {
                let span = op.as_span();
                debug_assert!(left_end <= span.start() && span.end() <= right_start);
                ranges.borrow_mut().push(Range {
                    start: s,
                    op: (span.start(), span.end()),
                    end: e,
                });
            }
            (s, e)
        })
        .parse(expr.into_inner());
}

/// The span of `( … )` around the expression at `s..e`, when only white space separates
/// them from the parentheses.
fn parenthesized(code: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    let before = code.get(..s)?.trim_end();
    let after = code.get(e..)?;
    let after_trimmed = after.trim_start();
    if !before.ends_with('(') || !after_trimmed.starts_with(')') {
        return None;
    }
    let open = before.len() - 1;
    let close = e + (after.len() - after_trimmed.len()) + 1;
    Some((open, close))
}

/// Applies the rewrite of `ranges` to `code`.
fn apply(code: &str, ranges: &[Range]) -> String {
    // (position, kind, order, replaced bytes, text): at one position, closing parentheses
    // first (innermost first), then the `..`, then openings (outermost first).
    let mut edits: Vec<(usize, u8, std::cmp::Reverse<usize>, usize, String)> = Vec::new();
    for r in ranges {
        edits.push((r.end, 0, std::cmp::Reverse(r.start), 0, ")".to_owned()));
        edits.push((
            r.op.0,
            1,
            std::cmp::Reverse(0),
            r.op.1 - r.op.0,
            ", ".to_owned(),
        ));
        edits.push((
            r.start,
            2,
            std::cmp::Reverse(r.end),
            0,
            format!("{RANGE_FUNCTION}("),
        ));
    }
    edits.sort_by_key(|a| (a.0, a.1, a.2));
    let mut out = String::with_capacity(code.len() + ranges.len() * 16);
    let mut at = 0;
    for (pos, _, _, replaced, text) in edits {
        if pos > at {
            out.push_str(&code[at..pos]);
            at = pos;
        }
        out.push_str(&text);
        at += replaced;
    }
    out.push_str(&code[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::rewrite;
    use pretty_assertions::assert_eq;

    #[test]
    fn ranges_become_calls_over_their_operands() {
        let cases = [
            ("1..3", "__awf_range(1, 3)"),
            ("len(1..inputs.n) > 0", "len(__awf_range(1, inputs.n)) > 0"),
            ("1 + 2..3 * 4", "__awf_range(1 + 2, 3 * 4)"),
            ("-5..5", "__awf_range(-5, 5)"),
            ("(1)..(2 + x)", "__awf_range((1), (2 + x))"),
            ("( a .. b )", "( __awf_range(a ,  b) )"),
            ("1..2..3", "__awf_range(__awf_range(1, 2), 3)"),
            ("x in 1..10 && y", "x in __awf_range(1, 10) && y"),
            ("1..5 | map(# * 2)", "__awf_range(1, 5) | map(# * 2)"),
            (
                "map(1..3, {1..#})",
                "map(__awf_range(1, 3), {__awf_range(1, #)})",
            ),
            ("a.b..c[0]", "__awf_range(a.b, c[0])"),
            ("c ? 1..n : []", "c ? __awf_range(1, n) : []"),
            ("x ?? 1..2", "x ?? __awf_range(1, 2)"),
            ("1_000..2_000", "__awf_range(1_000, 2_000)"),
            ("[1..2, 3..4]", "[__awf_range(1, 2), __awf_range(3, 4)]"),
            ("let r = 1..3; len(r)", "let r = __awf_range(1, 3); len(r)"),
        ];
        for (code, want) in cases {
            assert_eq!(rewrite(code).as_deref(), Some(want), "{code}");
        }
    }

    #[test]
    fn text_without_a_range_is_left_alone() {
        for code in [
            "states.a.Output == '1..3'",
            "x[1:2] == [2]",
            "1.5 > 1",
            "'a..b' contains '..'",
            "syntax error (",
        ] {
            assert_eq!(rewrite(code), None, "{code}");
        }
    }

    #[test]
    fn every_rewrite_compiles_to_what_the_range_evaluates_to() {
        let env = crate::expression::ExprEvaluator::new();
        let data = crate::test_support::Data::new();
        for code in [
            "len(1..3) == 3",
            "(1..3)[2] == 3",
            "sum(1..4) == 10",
            "map(1..3, {# * 2}) == [2, 4, 6]",
            "len(5..1) == 0",
            "-2..-1 == [-2, -1]",
            "2 in 1..3",
        ] {
            assert_eq!(
                awf_domain::ports::template::ExpressionEvaluator::eval_bool(
                    &env,
                    code,
                    &data.scope()
                ),
                Ok(true),
                "{code}"
            );
        }
    }
}
