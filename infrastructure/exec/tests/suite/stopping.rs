//! Timeout and cancellation: SIGTERM, grace, SIGKILL to the whole group.

use std::time::Duration;
use std::time::Instant;

use awf_domain::ports::exec::CommandExecutor;
use awf_domain::ports::exec::CommandSpec;
use awf_domain::ports::exec::Termination;
use awf_exec::KILL_GRACE;
use pretty_assertions::assert_eq;
use tokio_util::sync::CancellationToken;

use crate::common::cancel_after_first_line;
use crate::common::first_pid;
use crate::common::gone_soon;
use crate::common::run_ok;
use crate::common::shell;

/// Hang guard only: far above any expected duration.
const HANG_GUARD: Duration = Duration::from_secs(20);

#[tokio::test]
async fn timeout_kills_the_whole_group() {
    let spec = CommandSpec {
        timeout: Some(Duration::from_secs(1)),
        ..shell("sleep 30 & echo $!; wait")
    };
    let start = Instant::now();
    let out = run_ok(spec).await;
    assert!(start.elapsed() < HANG_GUARD);
    assert_eq!(
        (out.exit_code, out.termination, out.signal),
        (-1, Termination::TimedOut, Some(15))
    );
    let pid = first_pid(&out.stdout);
    assert!(gone_soon(pid), "grandchild {pid} survived the timeout");
}

#[tokio::test]
async fn cancel_kills_the_whole_group() {
    let token = CancellationToken::new();
    let start = Instant::now();
    let out = crate::common::executor()
        .run(
            shell("sleep 30 & echo $!; wait"),
            Some(cancel_after_first_line(token.clone())),
            token,
        )
        .await
        .expect("runs");
    assert!(start.elapsed() < HANG_GUARD);
    assert_eq!(
        (out.exit_code, out.termination),
        (-1, Termination::Cancelled)
    );
    let pid = first_pid(&out.stdout);
    assert!(gone_soon(pid), "grandchild {pid} survived the cancel");
}

#[tokio::test]
async fn term_ignoring_child_is_killed_after_the_grace_period() {
    let token = CancellationToken::new();
    let start = Instant::now();
    let out = crate::common::executor()
        .run(
            shell(r#"trap "" TERM; sleep 30 & echo $!; wait; echo survived"#),
            Some(cancel_after_first_line(token.clone())),
            token,
        )
        .await
        .expect("runs");
    let elapsed = start.elapsed();
    // Lower bound only: SIGKILL comes no earlier than the grace period.
    assert!(elapsed >= KILL_GRACE, "{elapsed:?}");
    assert!(elapsed < HANG_GUARD + KILL_GRACE);
    assert_eq!(
        (out.exit_code, out.termination, out.signal),
        (-1, Termination::Cancelled, Some(9))
    );
    assert!(!out.stdout.contains("survived"), "{}", out.stdout);
    let pid = first_pid(&out.stdout);
    assert!(gone_soon(pid), "TERM-ignoring grandchild {pid} survived");
}

#[tokio::test]
async fn child_handling_term_exits_and_keeps_its_output() {
    let token = CancellationToken::new();
    let start = Instant::now();
    let out = crate::common::executor()
        .run(
            shell(r#"trap 'echo got-term; exit 5' TERM; echo ready; while :; do sleep 0.05; done"#),
            Some(cancel_after_first_line(token.clone())),
            token,
        )
        .await
        .expect("runs");
    assert!(start.elapsed() < HANG_GUARD);
    assert_eq!(
        (out.exit_code, out.termination, out.signal),
        (-1, Termination::Cancelled, None)
    );
    assert_eq!(out.stdout, "ready\ngot-term\n");
}

#[tokio::test]
async fn cancelled_before_start_runs_nothing() {
    let token = CancellationToken::new();
    token.cancel();
    let tmp = tempfile::tempdir().expect("tempdir");
    let marker = tmp.path().join("ran");
    let out = crate::common::executor()
        .run(shell(&format!("touch '{}'", marker.display())), None, token)
        .await
        .expect("no error");
    assert_eq!(
        (out.exit_code, out.termination),
        (-1, Termination::Cancelled)
    );
    assert!(!marker.exists());
}

#[tokio::test]
async fn exit_within_timeout_is_a_normal_exit() {
    let spec = CommandSpec {
        timeout: Some(Duration::from_secs(30)),
        ..shell("echo quick; exit 4")
    };
    let out = run_ok(spec).await;
    assert_eq!(
        (out.exit_code, out.termination, out.stdout.as_str()),
        (4, Termination::Exited, "quick\n")
    );
}

/// A run future dropped half-way (not cancelled through its token) leaves no process of its
/// group running, and the child is reaped by a later spawn (no zombie stays behind).
#[tokio::test]
async fn a_dropped_run_kills_its_child_and_a_later_spawn_reaps_it() {
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let tx = std::sync::Mutex::new(tx);
    let seen = std::sync::Arc::new(move |_: awf_domain::event::OutputStream, text: &[u8]| {
        let _ = tx
            .lock()
            .expect("lock")
            .send(String::from_utf8_lossy(text).into_owned());
    });
    let exec = crate::common::executor();
    let run = exec.run(
        shell("echo $$; sleep 30 & wait"),
        Some(seen),
        CancellationToken::new(),
    );
    let first = tokio::select! {
        _ = run => panic!("the run ended on its own"),
        line = async {
            loop {
                if let Ok(l) = rx.try_recv() {
                    break l;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        } => line,
    };
    let pid = first_pid(&first);
    assert!(gone_soon(pid), "child {pid} survived its dropped run");
    let start = Instant::now();
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        assert!(start.elapsed() < HANG_GUARD, "child {pid} was never reaped");
        assert_eq!(run_ok(shell("true")).await.exit_code, 0);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
