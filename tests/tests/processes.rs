//! Processes and resume through the binary (issue 7): signals, parent-death, daemonised
//! descendants, a second Ctrl-C, `-f json` write errors, stale `.tmp` state files, resume of
//! parallel blocks and loops, and array inputs given to `for_each`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use pretty_assertions::assert_eq;

/// The `item=` lines a run printed on stdout.
fn items(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("[OUT] item="))
        .map(str::to_owned)
        .collect()
}

const ARRAY_LOOP: &str = r#"
name: arr
inputs:
  - name: targets
    type: array
    default: [x, y]
states:
  initial: loop
  loop:
    type: for_each
    items: "{{.inputs.targets}}"
    body: [work]
    on_complete: done
  work:
    type: step
    command: "echo item={{.loop.Item}}"
  done: { type: terminal }
"#;

#[test]
fn array_input_to_for_each_runs_one_iteration_per_element() {
    let sb = Sandbox::new().unwrap();
    sb.write("arr.yaml", ARRAY_LOOP).unwrap();
    // The default.
    let r = sb.run(&["run", "arr.yaml", "-o", "streaming"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(items(&r.stdout), vec!["x", "y"]);
    // --input as a comma-separated list and as JSON (an element with a space stays whole).
    let r = sb
        .run(&[
            "run",
            "arr.yaml",
            "-o",
            "streaming",
            "--input",
            "targets=a,b,c",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(items(&r.stdout), vec!["a", "b", "c"]);
    let r = sb
        .run(&[
            "run",
            "arr.yaml",
            "-o",
            "streaming",
            "--input",
            r#"targets=["a b","c"]"#,
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(items(&r.stdout), vec!["a b", "c"]);
    // The lowercase form without the leading dot, with trim markers.
    sb.write(
        "arr2.yaml",
        &ARRAY_LOOP.replace("{{.inputs.targets}}", "{{- inputs.targets -}}"),
    )
    .unwrap();
    let r = sb.run(&["run", "arr2.yaml", "-o", "streaming"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(items(&r.stdout), vec!["x", "y"]);
    // A value from the project configuration.
    sb.write(".awf/config.yaml", "inputs:\n  targets: [p, q, r]\n")
        .unwrap();
    let r = sb.run(&["run", "arr.yaml", "-o", "streaming"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(items(&r.stdout), vec!["p", "q", "r"]);
}
