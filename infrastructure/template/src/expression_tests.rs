use super::*;
use crate::test_support::Data;
use awf_domain::scope::ErrorInfo;
use pretty_assertions::assert_eq;
use serde_json::json;

fn eval(data: &Data, e: &str) -> Result<bool, TemplateError> {
    ExprEvaluator::new().eval_bool(e, &data.scope())
}

fn failure(data: &Data, e: &str) -> String {
    match eval(data, e) {
        Err(TemplateError::Failed(m)) => m,
        other => panic!("{e}: expected Failed, got {other:?}"),
    }
}

#[test]
fn fixture_expressions() {
    let cases = [
        (
            "states.check_tests_passed.Output contains \"TESTS_PASSED\"",
            true,
        ),
        ("states.check_tests_passed.Output contains 'NOPE'", false),
        ("inputs.verbose == true", true),
        ("inputs.num > 5", true),
        ("inputs.ratio > 2", true),
        ("inputs.count == 3", true),
        ("inputs.name == 'world'", true),
        ("states.body.ExitCode == 0", false),
        ("states.body.Output contains 'x'", false),
        ("contains(states.build.Output, \"built\")", true),
        ("contains(states.x.Output, \"y\")", false),
        ("has_prefix(states.build.Output, 'built')", true),
        ("has_suffix(states.build.Output, \"ok\\n\")", true),
        ("has_prefix(states.build.Output, 'nope')", false),
        ("has_prefix(inputs.missing, 'x')", false),
        ("10 == 10.0", true),
        (
            "states.build.ExitCode == 0 and inputs.name == 'world'",
            true,
        ),
        ("states.check_tests_passed.ExitCode != 0 || false", true),
        ("not (states.build.Status == 'failed')", true),
        ("!inputs.flag", true),
        ("states.build.Status == 'completed'", true),
        ("states.build.Output startsWith 'built'", true),
        ("states.build.Output matches '^built'", true),
        ("inputs.missing == 'x'", false),
        ("inputs.missing > 5", false),
        ("env.NOPE == 'x'", false),
        ("env.HOME == '/home/u'", true),
        ("undefined_thing == nil", true),
        ("'a' == 1", false),
    ];
    for (e, want) in cases {
        assert_eq!(eval(&Data::new(), e), Ok(want), "{e}");
    }
}

#[test]
fn every_state_field_in_both_casings() {
    let cases = [
        "states.build.ExitCode == 0",
        "states.build.exit_code == 0",
        "states.build.Output == 'built ok\\n'",
        "states.build.output == states.build.Output",
        "states.build.Stderr == 'warn\\n'",
        "states.build.stderr == 'warn\\n'",
        "states.agent.ExitCode == 0",
        "states.agent.Response.title == 'Hello'",
        "states.agent.response.n == 3",
        "states.agent.JSON[1].a == 2",
        "len(states.agent.json) == 2",
        "states.agent.TokensUsed == 15 && states.agent.tokens_used == 15",
        "states.agent.TokensInput == 10 && states.agent.tokens_input == 10",
        "states.agent.TokensOutput == 5 && states.agent.tokens_output == 5",
        "states.agent.TokensEstimated && states.agent.tokens_estimated",
        "states.check_tests_passed.Error == 'exit status 1'",
        "states.build.Attempt == 1",
        "states.call.Outputs.result == 'x'",
        "states.build.JSON == nil",
    ];
    for e in cases {
        assert_eq!(eval(&Data::new(), e), Ok(true), "{e}");
    }
}

#[test]
fn other_namespaces() {
    let cases = [
        "workflow.Name == 'demo' && workflow.name == 'demo'",
        "workflow.ID == 'run-1' && workflow.CurrentState == 'build'",
        "workflow.current_state == 'build'",
        "workflow.Duration > 1.5 && workflow.duration < 1.6",
        "workflow.StartedAt == '2025-01-02T03:04:05Z'",
        "context.WorkingDir == '/work' && context.working_dir == '/work'",
        "context.User == 'alice' && context.hostname == 'box'",
        "awf.prompts_dir endsWith 'prompts'",
        "loop == nil",
        "error == nil",
    ];
    for e in cases {
        assert_eq!(eval(&Data::new(), e), Ok(true), "{e}");
    }
}

#[test]
fn loop_variables() {
    let data = Data::new().with_loop(json!({"name": "S1", "n": 2}), 2, 4);
    let cases = [
        ("loop.Index >= 2", true),
        (
            "loop.index == 2 && loop.Index1 == 3 && loop.index1 == 3",
            true,
        ),
        (
            "loop.Length == 4 && loop.First == false && !loop.last",
            true,
        ),
        ("loop.Item.name == 'S1' && loop.item.n == 2", true),
        ("loop.Parent == nil", true),
    ];
    for (e, want) in cases {
        assert_eq!(eval(&data, e), Ok(want), "{e}");
    }
    let m = failure(&Data::new(), "loop.Index >= 2");
    assert!(
        m.starts_with("cannot evaluate expression \"loop.Index >= 2\""),
        "{m}"
    );
}

#[test]
fn error_namespace_in_hooks() {
    let mut data = Data::new();
    data.error = Some(ErrorInfo {
        message: "boom".to_owned(),
        state: "build".to_owned(),
        exit_code: 3,
        kind: "execution".to_owned(),
    });
    assert_eq!(
        eval(
            &data,
            "error.Message == 'boom' && error.state == 'build' && error.ExitCode == 3 && error.type == 'execution'"
        ),
        Ok(true)
    );
}

#[test]
fn non_boolean_results_and_syntax_errors_fail() {
    let d = Data::new();
    assert_eq!(
        failure(&d, "1 + 2"),
        "expression \"1 + 2\" must give a boolean, got a number"
    );
    assert_eq!(
        failure(&d, "states.build.Output"),
        "expression \"states.build.Output\" must give a boolean, got a string"
    );
    let m = failure(&d, "states.build.Output ==");
    assert!(
        m.starts_with("invalid expression \"states.build.Output ==\": syntax error at 1:23"),
        "{m}"
    );
    assert_eq!(failure(&d, "  "), "empty expression");
    // A word operator misspelt (new user: only "unexpected text there").
    let m = failure(&d, "states.build.Output contans 'x'");
    assert!(
        m.contains("syntax error at 1:21: unexpected text there")
            && m.ends_with("did you mean 'contains'? (`states.a.Output contains 'x'`)"),
        "{m}"
    );
    let m = failure(&d, "states.build.Output startWith 'x'");
    assert!(m.contains("did you mean 'startsWith'?"), "{m}");
    // Each operator's example is one that compiles (breaker: `x not 'y'`, `x and 'y'`).
    for (typo, want) in [
        (
            "states.build.ExitCode == 0 adn states.build.ExitCode == 1",
            "did you mean 'and'? (`states.a.ExitCode == 0 and states.b.ExitCode == 0`)",
        ),
        (
            "states.build.ExitCode == 0 an states.build.ExitCode == 1",
            "did you mean 'and'?",
        ),
        (
            "nto states.build.ExitCode == 0",
            "did you mean 'not'? (`not (states.a.ExitCode == 0)`)",
        ),
    ] {
        let m = failure(&d, typo);
        assert!(m.contains(want), "{typo}: {m}");
    }
    // A word operator glued to what follows compiles (the parser splits it) but is refused
    // by the check (breaker: `… ortrue` routed TRUE, `andd x` failed when evaluated).
    let t = ExprEvaluator::new();
    for (code, shown) in [
        (
            "inputs.s == 'zzz' ortrue",
            "`ortrue` is no name an expression knows: it reads as `or true`",
        ),
        (
            "inputs.s == 'abc' andnot true",
            "`andnot` is no name an expression knows: it reads as `and not`",
        ),
        (
            "inputs.s == 'abc' andd inputs.s == 'zzz'",
            "it reads as `and d`",
        ),
    ] {
        let Err(TemplateError::Failed(m)) = t.check(code) else {
            panic!("{code}: accepted");
        };
        assert!(m.contains(shown), "{code}: {m}");
    }
    for good in [
        "inputs.order == 'x' or inputs.notes != ''",
        "states.a.Output contains 'x' and not (states.b.ExitCode == 1)",
        "{andx: 1}.andx == 1",
        "len(inputs.list) > 0 && all(inputs.list, {# != ''})",
    ] {
        assert_eq!(t.check(good), Ok(()), "{good}");
    }
    // A syntax error at no near word: no such hint.
    let m = failure(&d, "states.build.Output == 'a' )");
    assert!(!m.contains("did you mean"), "{m}");
    // A single `=` (new user): the grammar's rule names are not listed, and the hint says
    // to compare with `==`; a `=` inside a string or in `!=`/`<=` is no cause.
    let m = failure(&d, "states.build.ExitCode = 0");
    assert!(!m.contains("method_call"), "{m}");
    assert!(
        m.contains("compare with `==` (a single `=` is not an operator)"),
        "{m}"
    );
    assert!(!super::lone_equals(
        "a != 1 && b <= 2 && c >= 3 && d == 'x=y'"
    ));
    assert!(super::lone_equals("a = 1"));
    let m = failure(&d, "{{.states.build.ExitCode}} == 0");
    assert!(m.contains("expressions are not interpolated"), "{m}");
    let m = failure(&d, "'a' < 1");
    assert!(m.starts_with("cannot evaluate expression"), "{m}");
}

#[test]
fn check_compiles_only() {
    let e = ExprEvaluator::new();
    assert_eq!(e.check("states.never.ExitCode == 0"), Ok(()));
    assert_eq!(e.check("contains(states.x.Output, 'y')"), Ok(()));
    assert!(matches!(e.check("a =="), Err(TemplateError::Failed(_))));
    match e.check("{{ .inputs.x }} == 'a'") {
        Err(TemplateError::Failed(m)) => assert!(m.contains("not interpolated"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn regression_check_refuses_unknown_functions_with_a_hint() {
    let e = ExprEvaluator::new();
    let refused = |x: &str| match e.check(x) {
        Err(TemplateError::Failed(m)) => m,
        other => panic!("{x}: expected Failed, got {other:?}"),
    };
    assert_eq!(
        refused("nosuchfn(1) == 2"),
        "invalid expression \"nosuchfn(1) == 2\": unknown function nosuchfn() (the run would fail with 'Unknown function')"
    );
    assert_eq!(
        refused("startsWith(states.x.Output, '/tmp')"),
        "invalid expression \"startsWith(states.x.Output, '/tmp')\": unknown function startsWith() \
         (the run would fail with 'Unknown function')\nhint: startsWith is an operator, not a function; \
         use the operator: x startsWith 'y'"
    );
    assert_eq!(
        refused("a and uper(inputs.x) == 'A'"),
        "invalid expression \"a and uper(inputs.x) == 'A'\": unknown function uper() \
         (the run would fail with 'Unknown function')\nhint: did you mean 'upper'?"
    );
    assert_eq!(
        refused("HasPrefix(inputs.x, 'a')"),
        "invalid expression \"HasPrefix(inputs.x, 'a')\": unknown function HasPrefix() \
         (the run would fail with 'Unknown function')\nhint: did you mean 'hasPrefix'?"
    );
    // A template function's name points at the expression function doing its job (new
    // user: `trimSpace` in a `while:`).
    assert!(
        refused("int(trimSpace(states.inc.Output)) < 5").ends_with("hint: did you mean 'trim'?"),
        "{}",
        refused("int(trimSpace(states.inc.Output)) < 5")
    );
    assert!(refused("toLower(inputs.x) == 'a'").ends_with("hint: did you mean 'lower'?"));
    // Liquid's and Ruby's names, too far from ours for the edit distance (new user).
    assert!(refused("upcase(inputs.x) == 'A'").ends_with("hint: did you mean 'upper'?"));
    assert!(refused("downcase(inputs.x) == 'a'").ends_with("hint: did you mean 'lower'?"));
    // `contains` with other than two arguments is not rewritten to the operator.
    assert!(
        refused("contains(a, b, c)").ends_with("use the operator: x contains 'y'"),
        "{}",
        refused("contains(a, b, c)")
    );
    // A call inside a predicate or a ternary is found too.
    assert!(refused("all(inputs.list, {bogus(#)})").contains("unknown function bogus()"));
    assert!(refused("inputs.a ? nope() : 1").contains("unknown function nope()"));
}

#[test]
fn check_keeps_valid_calls_operators_and_look_alikes() {
    let e = ExprEvaluator::new();
    for ok in [
        "states.x.Output startsWith '/tmp'",
        "states.x.Output startsWith ('/tmp')",
        "(states.x.Output) endsWith ('.log') and inputs.a matches ('^a')",
        "inputs.x in (['a', 'b'])",
        "not (inputs.a or inputs.b)",
        "has_prefix(states.x.Output, 'a') && hasSuffix(inputs.y, 'b')",
        "len(split(trim(inputs.x), ',')) > 1 && upper(inputs.y) == 'A'",
        "all(inputs.list, {# > 1}) and map(1..3, {# * 2})[0] == 2",
        "'nosuchfn(1)' == inputs.x && \"uper(\" != `bogus()`",
        "states.x.Output.nosuch == 1",
        "/* lenx(y) */ true",
        "true // bogus(1)",
        "len('a') == 1 /* and nope() */ && true",
        "1.5e3 > 2 and 1..3 != nil",
        "contains(states.x.Output, 'y')",
    ] {
        assert_eq!(e.check(ok), Ok(()), "{ok}");
    }
}

/// The built-ins expr-lang has only behind features awf builds it without are refused by
/// `awf validate` (a breaker saw `fromJSON` pass it and then fail every run), and each of them
/// really fails when evaluated.
#[test]
fn builtins_this_build_lacks_are_refused_up_front() {
    let e = ExprEvaluator::new();
    let data = Data::new();
    for (name, feature) in UNAVAILABLE {
        let code = format!("{name}('x') == 1");
        match e.check(&code) {
            Err(TemplateError::Failed(m)) => assert!(
                m.contains(&format!(
                    "{name}() is not available in this build of awf (expr-lang without its `{feature}` feature"
                )),
                "{m}"
            ),
            other => panic!("{code}: {other:?}"),
        }
        match e.eval_bool(&code, &data.scope()) {
            Err(TemplateError::Failed(m)) => assert!(m.contains("feature"), "{name}: {m}"),
            other => panic!("{code} evaluated: {other:?}"),
        }
    }
    assert!(
        matches!(e.check("fromJSON(states.x.Output).ok == true"), Err(TemplateError::Failed(m)) if m.contains("hint: decode it in a shell step"))
    );
}

#[test]
fn every_listed_function_exists_and_an_unlisted_one_does_not() {
    let e = ExprEvaluator::new();
    let data = Data::new();
    for name in FUNCTIONS {
        // Called with no arguments: whatever the error, it is not an unknown function.
        let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            e.eval_bool(&format!("{name}() == 1"), &data.scope())
        }));
        if let Ok(Err(TemplateError::Failed(m))) = got {
            assert!(!m.contains("Unknown function"), "{name}: {m}");
        }
    }
    match e.eval_bool("nosuchfn(1) == 2", &data.scope()) {
        Err(TemplateError::Failed(m)) => assert!(m.contains("Unknown function"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        called_functions("a.b(1) + f(g (2), 'h(3)') + x startsWith ('y') + startsWith(z)"),
        vec!["f".to_owned(), "g".to_owned(), "startsWith".to_owned()]
    );
}

#[test]
fn integer_arithmetic() {
    let e = ExprEvaluator::new();
    assert_eq!(e.eval_int("2 * 3"), Ok(6));
    assert_eq!(e.eval_int("2 * 3 + 1"), Ok(7));
    assert_eq!(e.eval_int("10 / 3"), Ok(3));
    assert_eq!(e.eval_int("7 % 4"), Ok(3));
    assert_eq!(e.eval_int(" 5 "), Ok(5));
    assert_eq!(e.eval_int("-7 / 2"), Ok(-3));
    let err = |x: &str| match e.eval_int(x) {
        Err(TemplateError::Failed(m)) => m,
        other => panic!("{x}: {other:?}"),
    };
    assert_eq!(
        err("10 / 0"),
        "arithmetic expression \"10 / 0\": division by zero"
    );
    assert!(err("10 % 0").contains("divide by zero"));
    assert_eq!(
        err("1 < 2"),
        "arithmetic expression \"1 < 2\": must give a number, got a boolean"
    );
    assert!(err("2 ** 3").contains("not allowed"));
    assert!(err("x + 1").contains("unknown variable"));
    assert!(err("1 +").starts_with("invalid expression"));
}

#[test]
fn contains_calls_are_rewritten() {
    assert_eq!(rewrite_contains("contains(a, \"b\")"), "a contains \"b\"");
    assert_eq!(
        rewrite_contains("x && contains(states.s.Output,'y') || z"),
        "x && states.s.Output contains 'y' || z"
    );
    assert_eq!(rewrite_contains("a.contains(b, c)"), "a.contains(b, c)");
    assert_eq!(rewrite_contains("notcontains(b, c)"), "notcontains(b, c)");
    assert_eq!(rewrite_contains("contains(f(a), b)"), "contains(f(a), b)");
    assert_eq!(rewrite_contains("a == b"), "a == b");
}

#[test]
fn expression_nested_too_deeply_is_refused() {
    let want =
        TemplateError::Failed("expression nested too deeply (more than 128 levels)".to_owned());
    let ev = ExprEvaluator::new();
    let data = Data::new();
    for (open, close) in [("(", ")"), ("[", "]"), ("{a: ", "}")] {
        let deep = format!("{}1{} == 1", open.repeat(2000), close.repeat(2000));
        assert_eq!(
            ev.eval_bool(&deep, &data.scope()),
            Err(want.clone()),
            "{open}"
        );
        assert_eq!(ev.check(&deep), Err(want.clone()), "{open}");
        assert_eq!(ev.eval_int(&deep), Err(want.clone()), "{open}");
    }
    let at = |n: usize| format!("{}1{}", "(".repeat(n), ")".repeat(n));
    assert_eq!(ev.eval_int(&at(129)), Err(want));
    assert_eq!(ev.eval_int(&at(128)), Ok(1));
    // 128 levels still compile and run on a 2 MiB stack (a tokio worker's) in a debug build.
    let code = format!("{} == 1", at(128));
    let got = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || ExprEvaluator::new().eval_bool(&code, &Data::new().scope()))
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(got, Ok(true));
    // Brackets inside string literals do not count.
    let quoted = format!("'{}' != \"{}\"", "(".repeat(500), "[".repeat(500));
    assert_eq!(ev.eval_bool(&quoted, &data.scope()), Ok(true));
}

/// `split` and `splitAfter` give Go's `strings.Split(N)`/`SplitAfter(N)` pieces, as
/// expr-lang (Go) and the template's `split` do (breaker: `split('abc', '')` had 5 pieces).
#[test]
fn split_and_split_after_give_gos_pieces() {
    let data = Data::new();
    for e in [
        "split('abc', '') == ['a', 'b', 'c']",
        "split('', '') == []",
        "split('', ',') == ['']",
        "split('a,b,', ',') == ['a', 'b', '']",
        "split('a,b,c', ',', 2) == ['a', 'b,c']",
        "split('a,b,c', ',', 0) == []",
        "split('a,b,c', ',', -1) == ['a', 'b', 'c']",
        "split('héllo', '', 3) == ['h', 'é', 'llo']",
        "splitAfter('abc', '') == ['a', 'b', 'c']",
        "splitAfter('a,b,', ',') == ['a,', 'b,', '']",
        "splitAfter('', ',') == ['']",
        "splitAfter('a,b,c', ',', 2) == ['a,', 'b,c']",
        "len(split('abc', '')) == 3",
    ] {
        assert_eq!(eval(&data, e), Ok(true), "{e}");
    }
    assert!(failure(&data, "split(1, ',') == []").contains("split() takes a string"));
}

/// An expression reading the `ExitCode` of a skipped state (a parallel branch that never
/// started) is false, as one reading a state that has not run is: neither `== 0` (trial: it
/// read 0) nor `!= 0` holds. Its `Status` reads `skipped`.
#[test]
fn a_skipped_state_exit_code_is_false() {
    let mut data = Data::new();
    let mut skipped = crate::test_support::state("b", "", None);
    skipped.status = StepStatus::Skipped;
    data.states.insert("b".to_owned(), skipped);
    for (e, want) in [
        ("states.b.ExitCode == 0", false),
        ("states.b.ExitCode != 0", false),
        ("states.b.exit_code == 0", false),
        ("states.never.ExitCode != 0", false),
        ("states.b.Status == 'skipped'", true),
        ("states.build.ExitCode == 0", true),
    ] {
        assert_eq!(eval(&data, e), Ok(want), "{e}");
    }
}
