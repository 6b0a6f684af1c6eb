//! Fixes of stop 38: what was left from the trials of stop 37 and what this stop's new-user
//! and breaker trials found, over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

/// `(index .states "x").Output` before any state ran printed `<no value>`; Go's typed map
/// gives the zero state, whose output is empty (as it was once another state had run).
#[test]
fn index_of_a_state_before_any_ran_is_the_zero_state() {
    let sb = Sandbox::new().unwrap();
    let yaml = "name: z\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'echo \"[{{(index .states \"b\").Output}}] {{(index .states \"b\").ExitCode}}\"'\n    on_success: b\n  b:\n    type: step\n    command: 'echo \"[{{(index .states \"a\").Output | trim}}]\"'\n    on_success: done\n  done: {type: terminal}\n";
    let r = sb
        .run_workflow("z.yaml", yaml, &["-o", "buffered"])
        .unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("[] 0"), "{}", r.stdout);
    assert!(!r.stdout.contains("no value"), "{}", r.stdout);
    assert!(r.stdout.contains("[[] 0]"), "{}", r.stdout);
}
