//! Fixes of a trial of awf's output handling (helper `fixbuf`), over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use awf_tests::run_id_in;
use awf_tests::strip_ansi;

/// A workflow whose one step `gen` runs `command` with `capture.max_size: {cap}`.
fn one_step(command: &str, cap: u64) -> String {
    format!(
        "name: t\nstates:\n  initial: gen\n  gen:\n    type: step\n    command: \"{command}\"\n    \
         capture: {{max_size: {cap}}}\n    on_success: done\n  done:\n    type: terminal\n"
    )
}

/// Finding 1: a failed step whose output was over the capture cap showed the last lines of
/// the kept start (`… 65725 earlier lines`, `progress line 65739` cut mid-line), never its
/// real last line. `awf run` and `awf status` show the real last lines and count all of
/// them; the stored output stays the capped start.
#[test]
fn a_failed_step_over_the_capture_cap_shows_its_real_last_lines() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "failbig.yaml",
        &one_step(
            "for i in $(seq 1 3000); do printf 'progress line %d %0100d\\\\n' $i 0; done; \
             echo 'FINAL - build failed because X'; exit 1",
            10_000,
        ),
    )
    .unwrap();
    let r = sb.run(&["run", "failbig.yaml"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let err = strip_ansi(&r.stderr);
    for text in [err.clone(), {
        let id = run_id_in(&err).expect("run id");
        let s = sb.run(&["status", &id]).unwrap();
        strip_ansi(&s.stdout)
    }] {
        assert!(
            text.contains("│ FINAL - build failed because X\n"),
            "{text}"
        );
        assert!(text.contains("│ progress line 3000 "), "{text}");
        // 3001 lines, 15 shown.
        assert!(text.contains("│ … 2986 earlier lines\n"), "{text}");
        assert!(!text.contains("progress line 99 "), "{text}");
    }
    // The stored output is still the capped start.
    let j = sb.run(&["run", "failbig.yaml", "-f", "json"]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&j.stdout).unwrap();
    let out = v["states"]["gen"]["output"].as_str().unwrap();
    assert!(out.len() <= 10_000, "{}", out.len());
    assert!(out.starts_with("progress line 1 "), "{out}");
}

/// Finding 2: `-o buffered` held a step's whole output until it ended (1 GiB of output, 1.1
/// GB of memory). Past 64 MiB a stream is no longer held: the step's kept text (at most its
/// capture cap) is printed, then a line saying how many bytes were not.
#[test]
fn buffered_mode_holds_no_more_than_the_capture_cap() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "big.yaml",
        &one_step("yes a | head -c 70000000; echo done >&2", 1000),
    )
    .unwrap();
    let r = sb.run(&["run", "big.yaml", "-o", "buffered"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "a\n".repeat(500));
    let err = strip_ansi(&r.stderr);
    assert!(
        err.contains("… 69999000 bytes of stdout not shown (over the capture cap;"),
        "{err}"
    );
    // A stream under 64 MiB is shown whole, as before.
    assert!(err.contains("\ndone\n"), "{err}");
    assert!(!err.contains("of stderr not shown"), "{err}");
}
