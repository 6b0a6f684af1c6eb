//! Leftovers of the trials of stop 34, fixed in stop 35, over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

/// A `for_each` whose items are written in the workflow as broken JSON (`'["a", b]'`, a
/// string, not a YAML list) is a validation error: the loop could only fail when it starts
/// (trial: validate said valid, the run failed at the loop). `awf run` refuses the file
/// before any step runs; items that are a template are only known at run time and pass; a
/// list whose first item starts with a bracket (`[draft] fix, other`) is a comma list, valid.
#[test]
fn literal_broken_json_items_are_a_validation_error() {
    let sb = Sandbox::new().unwrap();
    let wf = |items: &str| {
        format!(
            "name: l\nstates:\n  initial: a\n  a: {{type: step, command: 'touch ran', on_success: l}}\n  l:\n    type: for_each\n    items: '{items}'\n    body: [b]\n    on_complete: done\n  b: {{type: step, command: 'true', on_success: l}}\n  done: {{type: terminal}}\n"
        )
    };
    sb.write("bad.yaml", &wf(r#"["a", b]"#)).unwrap();
    let r = sb.run(&["validate", "bad.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("states.l.items: loop \"l\": items start with `[` but are not a JSON array"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("comma-separated list without brackets"),
        "{}",
        r.stderr
    );
    let r = sb.run(&["run", "bad.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(!sb.path().join("ran").exists());

    sb.write("cut.yaml", &wf("[1, 2")).unwrap();
    let r = sb.run(&["validate", "cut.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);

    for ok in ["[draft] fix, other", "{{.inputs.xs}}", "a, b", "[1, 2]"] {
        let text = wf(ok).replace(
            "name: l\n",
            "name: l\ninputs:\n  - {name: xs, default: 'x'}\n",
        );
        sb.write("ok.yaml", &text).unwrap();
        let r = sb.run(&["validate", "ok.yaml"]).unwrap();
        assert_eq!(r.code, 0, "{ok}: {}", r.stderr);
    }
}
