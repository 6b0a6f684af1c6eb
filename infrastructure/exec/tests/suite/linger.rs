//! What a step of a run leaves running in its process group (`server &`) when it exits on
//! its own lives on for the run's later steps until the run ends (`end_scope`), then is
//! stopped and reaped; a step stopped by its timeout or a cancel has its whole group stopped
//! at once; members that exit meanwhile are reaped at the end of the next command.

use std::time::Duration;

use awf_domain::ports::exec::CommandExecutor;
use awf_domain::ports::exec::CommandOutput;
use awf_domain::ports::exec::CommandSpec;
use awf_domain::ports::exec::Termination;
use pretty_assertions::assert_eq;
use tokio_util::sync::CancellationToken;

use crate::common::alive;
use crate::common::cancel_after_first_line;
use crate::common::first_pid;
use crate::common::gone_soon;
use crate::common::shell;

fn subreaper() {
    awf_exec::become_subreaper().expect("PR_SET_CHILD_SUBREAPER");
}

/// Kills `pid` if a failing test left it running.
fn cleanup(pid: i32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// Whether `/proc/<pid>` exists: a live process or a zombie not yet reaped.
fn listed(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// A command of the run `scope`.
fn step(text: &str, scope: &str) -> CommandSpec {
    CommandSpec {
        scope: Some(scope.to_owned()),
        ..shell(text)
    }
}

async fn run_in(spec: CommandSpec) -> CommandOutput {
    crate::common::executor()
        .run(spec, None, CancellationToken::new())
        .await
        .expect("runs")
}

/// Waits (hang guard, not a timing assertion) until `pid` is a zombie.
fn wait_zombie(pid: i32) -> bool {
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        if listed(pid) && !alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[tokio::test]
async fn a_run_steps_background_process_serves_later_steps_until_the_run_ends() {
    let _kept = crate::common::ADOPTED.read().await;
    subreaper();
    let exec = crate::common::executor();
    let first = run_in(step("sleep 306 >/dev/null 2>&1 & echo $!", "linger-a")).await;
    assert_eq!(
        (first.exit_code, first.termination),
        (0, Termination::Exited)
    );
    let pid = first_pid(&first.stdout);
    // Another run's, started the same way.
    let other = first_pid(
        &run_in(step("sleep 307 >/dev/null 2>&1 & echo $!", "linger-b"))
            .await
            .stdout,
    );
    // The next step of the run finds it running.
    let next = run_in(step(&format!("kill -0 {pid} && echo alive"), "linger-a")).await;
    let still = alive(pid);
    // The run ends: its group is stopped and reaped (gone from /proc when end_scope
    // returns), the other run's stays.
    let stopped = exec.end_scope("linger-a").await;
    let (gone, other_alive) = (!listed(pid), alive(other));
    for p in [pid, other] {
        if !gone || !other_alive {
            cleanup(p);
        }
    }
    assert_eq!(next.stdout, "alive\n");
    assert!(still, "background sleep {pid} died with its step");
    assert!(
        gone,
        "background sleep {pid} outlived end_scope (or was not reaped)"
    );
    assert_eq!(stopped, 1);
    assert!(
        other_alive,
        "another run's background sleep {other} was stopped"
    );
    assert_eq!(exec.end_scope("linger-b").await, 1);
    let gone = !listed(other);
    cleanup(other);
    assert!(
        gone,
        "background sleep {other} outlived its run's end_scope"
    );
}

/// A member that ignores SIGTERM is SIGKILLed after the grace.
#[tokio::test]
async fn end_scope_kills_a_background_process_that_ignores_sigterm() {
    let _kept = crate::common::ADOPTED.read().await;
    subreaper();
    let out = run_in(step(
        "(trap '' TERM; while :; do sleep 0.05; done) >/dev/null 2>&1 & echo $!",
        "linger-stubborn",
    ))
    .await;
    let pid = first_pid(&out.stdout);
    assert!(alive(pid));
    let stopped = crate::common::executor().end_scope("linger-stubborn").await;
    let gone = !listed(pid);
    cleanup(pid);
    assert!(gone, "{pid} ignoring SIGTERM outlived end_scope");
    assert_eq!(stopped, 1);
}

/// A kept member that exits is reaped at the end of the next command (no zombies pile up
/// over a long run), and its group, now empty, is forgotten.
#[tokio::test]
async fn an_exited_background_process_is_reaped_by_the_next_command() {
    let _kept = crate::common::ADOPTED.read().await;
    subreaper();
    let dir = tempfile::tempdir().expect("tempdir");
    let go = dir.path().join("go");
    let out = run_in(step(
        &format!(
            "(while [ ! -f {} ]; do sleep 0.01; done) >/dev/null 2>&1 & echo $!",
            go.display()
        ),
        "linger-reap",
    ))
    .await;
    let pid = first_pid(&out.stdout);
    std::fs::write(&go, "").expect("go");
    assert!(
        wait_zombie(pid),
        "{pid} did not exit (or was reaped by someone else)"
    );
    // Any command's end reaps it (here one of no run).
    run_in(shell("true")).await;
    assert!(
        !listed(pid),
        "the exited background process {pid} was not reaped"
    );
    assert_eq!(
        crate::common::executor().end_scope("linger-reap").await,
        0,
        "the empty group was not forgotten"
    );
}

/// A step stopped by its timeout has its background processes stopped at once, not at the
/// run's end.
#[tokio::test]
async fn a_timed_out_steps_background_process_goes_with_it() {
    subreaper();
    let spec = CommandSpec {
        timeout: Some(Duration::from_secs(1)),
        ..step(
            "sleep 308 >/dev/null 2>&1 & echo $!; sleep 300",
            "linger-timeout",
        )
    };
    let out = run_in(spec).await;
    assert_eq!(out.termination, Termination::TimedOut);
    let pid = first_pid(&out.stdout);
    let gone = gone_soon(pid);
    cleanup(pid);
    assert!(gone, "background sleep {pid} survived its step's timeout");
}

/// Same for a cancelled step.
#[tokio::test]
async fn a_cancelled_steps_background_process_goes_with_it() {
    subreaper();
    let token = CancellationToken::new();
    let out = crate::common::executor()
        .run(
            step(
                "sleep 309 >/dev/null 2>&1 & echo $!; sleep 300",
                "linger-cancel",
            ),
            Some(cancel_after_first_line(token.clone())),
            token,
        )
        .await
        .expect("runs");
    assert_eq!(out.termination, Termination::Cancelled);
    let pid = first_pid(&out.stdout);
    let gone = gone_soon(pid);
    cleanup(pid);
    assert!(gone, "background sleep {pid} survived its step's cancel");
}
