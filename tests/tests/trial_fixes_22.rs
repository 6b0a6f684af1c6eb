//! Fixes from trial 22's breaker, over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use awf_tests::http_serve;

/// A workflow printing `bytes` bytes of `a` lines, then `END`.
fn big_output(bytes: usize) -> String {
    format!(
        "name: big\nstates:\n  initial: big\n  big:\n    type: step\n    \
         command: \"yes aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa | head -c {bytes}; echo END\"\n    \
         on_success: done\n  done: {{type: terminal}}\n"
    )
}

/// Issue 1: a finished run of `awf serve` keeps only the tail of its output in memory, and
/// what the API gives of it does not change: the last 64 KiB, marked `truncated`, and the
/// whole event stream replayed from its start (the events the server no longer holds are
/// read back from the transcript, without a `lagged` gap).
#[test]
fn a_finished_run_of_the_server_still_answers_as_documented() {
    let sb = http_serve::sandbox_with(&[("big", &big_output(3_000_000))]);
    let s = http_serve::start(&sb, &[]);
    let id = http_serve::start_run(&s, "big", "{}");
    let v = http_serve::wait_status(&s, &id, "completed");
    let out = v["states"]["big"]["output"].as_str().unwrap();
    assert_eq!(out.len(), 64 << 10);
    assert!(out.ends_with("aaaa\nEND\n"), "{:?}", &out[out.len() - 20..]);
    assert_eq!(v["states"]["big"]["truncated"], true);
    let frames = http_serve::follow(&s, &id, &[]);
    let names: Vec<&str> = frames.iter().map(|f| f.1.as_str()).collect();
    assert!(!names.contains(&"lagged"), "{names:?}");
    assert_eq!(names.first(), Some(&"run_started"), "{names:?}");
    assert_eq!(names.last(), Some(&"run_finished"), "{names:?}");
    assert!(names.contains(&"step_finished"), "{names:?}");
    let ids: Vec<u64> = frames.iter().map(|f| f.0).collect();
    assert_eq!(ids, (1..=frames.len() as u64).collect::<Vec<_>>());
}

