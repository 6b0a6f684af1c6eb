//! The watchdog learns its owner from awf, not from its parent at start-up: an awf killed
//! before the watchdog asked for its parent (a slow start on a loaded machine) left the
//! steps' processes alive, since the parent was by then the subreaper or init (seen as a
//! flaky `sigkilled_mcp_serve_leaves_no_process_of_a_running_bash_call`).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

use awf_tests::awf_bin;

/// An owner pid no process can have (above any `pid_max`), so only the sleep below carries it.
const OWNER: u64 = 4_000_000_000;

#[test]
fn the_watchdog_kills_what_its_named_owner_tagged_not_what_its_parent_did() {
    let mut sleep = Command::new("sleep")
        .arg("300")
        .env("AWF_PROCESS_TAG", format!("{OWNER}-watchdog-owner-test"))
        .spawn()
        .unwrap();
    // The watchdog's parent is this test process; the named owner is someone else.
    let mut dog = Command::new(awf_bin())
        .arg("__watchdog")
        .env("AWF_WATCHDOG_OWNER", OWNER.to_string())
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    // End of file without the `=` line: the owner died.
    drop(dog.stdin.take());
    let t0 = Instant::now();
    while dog.try_wait().unwrap().is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the watchdog did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let t1 = Instant::now();
    let status = loop {
        if let Some(s) = sleep.try_wait().unwrap() {
            break Some(s);
        }
        if t1.elapsed() > Duration::from_secs(10) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if status.is_none() {
        let _ = sleep.kill();
        let _ = sleep.wait();
    }
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.and_then(|s| s.signal()),
        Some(9),
        "the sleep tagged by the named owner was not SIGKILLed"
    );
}
