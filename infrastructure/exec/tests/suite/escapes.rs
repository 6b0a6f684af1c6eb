//! Descendants that leave the process group (`setsid cmd &`): stopped with their step on
//! cancel and timeout (found by the tag they inherit, once adopted by this subreaper), by
//! `end_scope` at the end of the run they belong to (and no other run's), and by
//! `sweep_adopted` at the end of `awf run`.

use std::time::Duration;

use awf_domain::ports::exec::CommandExecutor;
use awf_domain::ports::exec::CommandSpec;
use awf_domain::ports::exec::Termination;
use pretty_assertions::assert_eq;
use tokio_util::sync::CancellationToken;

use crate::common::alive;
use crate::common::cancel_after_first_line;
use crate::common::first_pid;
use crate::common::gone_soon;
use crate::common::run_ok;
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

#[tokio::test]
async fn a_daemonised_descendant_dies_with_its_cancelled_step() {
    subreaper();
    let dir = tempfile::tempdir().expect("tempdir");
    let ready = dir.path().join("ready");
    // The pid is printed (and the cancel sent) once the daemon has left the group.
    let text = format!(
        "setsid sh -c 'touch {r}; exec sleep 300' >/dev/null 2>&1 & p=$!; \
         while [ ! -f {r} ]; do sleep 0.01; done; echo $p; wait",
        r = ready.display()
    );
    let token = CancellationToken::new();
    let out = crate::common::executor()
        .run(
            shell(&text),
            Some(cancel_after_first_line(token.clone())),
            token,
        )
        .await
        .expect("runs");
    assert_eq!(out.termination, Termination::Cancelled);
    let pid = first_pid(&out.stdout);
    let gone = gone_soon(pid);
    cleanup(pid);
    assert!(gone, "daemonised {pid} survived the cancel");
}

#[tokio::test]
async fn a_daemon_and_its_own_children_die_with_a_timed_out_step() {
    subreaper();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("grandchild");
    // The daemon is a shell with a child of its own: both must go.
    let text = format!(
        "setsid sh -c 'sleep 301 & echo $! > {f}.new; mv {f}.new {f}; wait' >/dev/null 2>&1 & \
         echo $!; while [ ! -f {f} ]; do sleep 0.01; done; sleep 300",
        f = file.display()
    );
    let spec = CommandSpec {
        timeout: Some(Duration::from_secs(2)),
        ..shell(&text)
    };
    let out = run_ok(spec).await;
    assert_eq!(out.termination, Termination::TimedOut);
    let pid = first_pid(&out.stdout);
    let gone = gone_soon(pid);
    cleanup(pid);
    assert!(gone, "daemonised {pid} survived the timeout");
    let inner: i32 = std::fs::read_to_string(&file)
        .expect("the daemon wrote its child's pid")
        .trim()
        .parse()
        .expect("a pid");
    let gone = gone_soon(inner);
    cleanup(inner);
    assert!(gone, "the daemon's child {inner} survived the timeout");
}

#[tokio::test]
async fn sweep_adopted_stops_what_a_finished_step_daemonised() {
    let _alone = crate::common::ADOPTED.write().await;
    subreaper();
    let dir = tempfile::tempdir().expect("tempdir");
    let ready = dir.path().join("ready");
    // The step waits until its daemon has left the group (it runs after `setsid`).
    let text = format!(
        "setsid sh -c 'touch {r}; exec sleep 302' >/dev/null 2>&1 </dev/null & echo $!; \
         while [ ! -f {r} ]; do sleep 0.01; done",
        r = ready.display()
    );
    let out = run_ok(shell(&text)).await;
    assert_eq!((out.exit_code, out.termination), (0, Termination::Exited));
    let pid = first_pid(&out.stdout);
    // The step ended normally: its daemon may serve later steps of the run.
    assert!(
        alive(pid),
        "daemon {pid} should still run until the run ends"
    );
    let stopped = awf_exec::sweep_adopted().await;
    let gone = gone_soon(pid);
    cleanup(pid);
    assert!(gone, "daemonised {pid} survived sweep_adopted");
    assert!(stopped >= 1, "{stopped}");
}

/// A step of scope `scope` (none: a command outside a run) that daemonises `sleep <secs>` and prints the daemon's pid once it
/// has left the group; returns that pid.
async fn daemonise_in(scope: Option<&str>, secs: u32) -> i32 {
    let dir = tempfile::tempdir().expect("tempdir");
    let ready = dir.path().join("ready");
    let text = format!(
        "setsid sh -c 'touch {r}; exec sleep {secs}' >/dev/null 2>&1 </dev/null & echo $!; \
         while [ ! -f {r} ]; do sleep 0.01; done",
        r = ready.display()
    );
    let spec = CommandSpec {
        scope: scope.map(str::to_owned),
        ..shell(&text)
    };
    let out = run_ok(spec).await;
    assert_eq!((out.exit_code, out.termination), (0, Termination::Exited));
    first_pid(&out.stdout)
}

#[tokio::test]
async fn end_scope_stops_what_that_runs_steps_daemonised_and_nothing_of_other_runs() {
    let _kept = crate::common::ADOPTED.read().await;
    subreaper();
    let exec = crate::common::executor();
    let mine = daemonise_in(Some("run-a"), 303).await;
    let other = daemonise_in(Some("run-b"), 304).await;
    let unscoped = daemonise_in(None, 305).await;
    // The run of scope `run-a` ended: its daemon goes, the others stay.
    let stopped = exec.end_scope("run-a").await;
    let gone = gone_soon(mine);
    let (other_alive, unscoped_alive) = (alive(other), alive(unscoped));
    for pid in [mine, other, unscoped] {
        if !gone || !other_alive || !unscoped_alive {
            cleanup(pid);
        }
    }
    assert!(gone, "daemonised {mine} survived end_scope");
    assert_eq!(stopped, 1);
    assert!(other_alive, "another run's daemon {other} was stopped");
    assert!(unscoped_alive, "an unscoped daemon {unscoped} was stopped");
    // A prefix of a scope is another scope.
    assert_eq!(exec.end_scope("run").await, 0);
    assert!(exec.end_scope("run-b").await >= 1);
    let gone = gone_soon(other);
    cleanup(other);
    cleanup(unscoped);
    assert!(gone, "daemonised {other} survived end_scope");
}
