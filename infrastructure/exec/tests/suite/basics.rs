//! Exit codes, environment, working directory, stdin, shell choice.

use awf_domain::ErrorCode;
use awf_domain::ports::exec::CommandOutput;
use awf_domain::ports::exec::CommandSpec;
use awf_domain::ports::exec::Termination;
use pretty_assertions::assert_eq;

use crate::common::canonical;
use crate::common::run;
use crate::common::run_ok;
use crate::common::shell;

fn exited(code: i32, stdout: &str, stderr: &str) -> CommandOutput {
    CommandOutput {
        exit_code: code,
        stdout: stdout.to_owned(),
        stderr: stderr.to_owned(),
        termination: Termination::Exited,
        truncated: false,
        signal: None,
    }
}

#[tokio::test]
async fn echo_output_keeps_trailing_newline() {
    assert_eq!(run_ok(shell("echo hello")).await, exited(0, "hello\n", ""));
}

#[tokio::test]
async fn true_gives_empty_output() {
    assert_eq!(run_ok(shell("true")).await, exited(0, "", ""));
}

#[tokio::test]
async fn exit_code_is_reported() {
    assert_eq!(run_ok(shell("exit 42")).await, exited(42, "", ""));
}

#[tokio::test]
async fn missing_command_exits_127() {
    let out = run_ok(shell("awf_exec_no_such_command_xyz")).await;
    assert_eq!(out.exit_code, 127);
    assert_eq!(out.termination, Termination::Exited);
    assert_eq!(out.stdout, "");
    assert!(
        out.stderr.contains("awf_exec_no_such_command_xyz"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn stderr_is_captured_separately() {
    assert_eq!(
        run_ok(shell("echo out; echo oops >&2; exit 3")).await,
        exited(3, "out\n", "oops\n")
    );
}

#[tokio::test]
async fn killed_by_signal_is_minus_one() {
    assert_eq!(
        run_ok(shell("kill -9 $$")).await,
        CommandOutput {
            signal: Some(9),
            ..exited(-1, "", "")
        }
    );
}

#[tokio::test]
async fn killed_by_signal_names_the_signal() {
    assert_eq!(
        run_ok(shell("echo before; kill -TERM $$; echo after")).await,
        CommandOutput {
            signal: Some(15),
            ..exited(-1, "before\n", "")
        }
    );
    // A shell exiting with 128+n on its own was not killed by a signal.
    assert_eq!(run_ok(shell("exit 137")).await, exited(137, "", ""));
}

#[tokio::test]
async fn env_adds_and_overrides() {
    let spec = CommandSpec {
        env: vec![
            ("AWF_EXEC_TEST_VAR".to_owned(), "a value".to_owned()),
            ("HOME".to_owned(), "/awf/custom/home".to_owned()),
        ],
        ..shell(r#"echo "$AWF_EXEC_TEST_VAR|$HOME""#)
    };
    assert_eq!(
        run_ok(spec).await,
        exited(0, "a value|/awf/custom/home\n", "")
    );
}

#[tokio::test]
async fn inherited_environment_is_kept() {
    let path = std::env::var("PATH").expect("PATH set");
    let out = run_ok(shell(r#"printf %s "$PATH""#)).await;
    assert_eq!(out.stdout, path);
}

#[tokio::test]
async fn shell_comes_from_env_when_absolute_and_executable() {
    let with = |v: &str| CommandSpec {
        env: vec![("SHELL".to_owned(), v.to_owned())],
        ..shell(r#"echo "$0""#)
    };
    assert_eq!(run_ok(with("/bin/bash")).await.stdout, "/bin/bash\n");
    assert_eq!(run_ok(with("bash")).await.stdout, "/bin/sh\n");
    assert_eq!(
        run_ok(with("/nonexistent/awf/shell")).await.stdout,
        "/bin/sh\n"
    );
    // An executable that is not a POSIX-family shell: `/bin/sh` (trial: under
    // `SHELL=/usr/bin/tclsh` the command never ran and the step "succeeded").
    for other in ["/usr/bin/python3", "/usr/bin/perl"] {
        if std::path::Path::new(other).exists() {
            assert_eq!(run_ok(with(other)).await.stdout, "/bin/sh\n", "{other}");
        }
    }
}

#[tokio::test]
async fn dir_is_the_working_directory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let spec = CommandSpec {
        dir: Some(tmp.path().to_path_buf()),
        ..shell("pwd -P")
    };
    let want = format!("{}\n", canonical(tmp.path()).display());
    assert_eq!(run_ok(spec).await, exited(0, &want, ""));
}

#[tokio::test]
async fn missing_dir_is_a_command_failed_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let missing = tmp.path().join("no-such-dir");
    let spec = CommandSpec {
        dir: Some(missing.clone()),
        ..shell("true")
    };
    let err = run(spec).await.expect_err("must fail");
    assert_eq!(err.code(), ErrorCode::ExecutionCommandFailed);
    assert_eq!(
        err.message(),
        format!(
            "working directory {} does not exist or is not a directory",
            missing.display()
        )
    );
    assert_eq!(err.hints().len(), 1);
}

#[tokio::test]
async fn stdin_is_closed() {
    assert_eq!(run_ok(shell("cat")).await, exited(0, "", ""));
    assert_eq!(
        run_ok(shell(r#"read line; echo "rc=$? line=[$line]""#)).await,
        exited(0, "rc=1 line=[]\n", "")
    );
}

#[tokio::test]
async fn each_child_leads_its_own_process_group() {
    // Field 5 of /proc/<pid>/stat is the process group; it must be the shell's own pid.
    let out = run_ok(shell(r#"echo "$$ $(cut -d' ' -f5 /proc/$$/stat)""#)).await;
    let fields: Vec<&str> = out.stdout.split_whitespace().collect();
    assert_eq!(fields.len(), 2, "{}", out.stdout);
    assert_eq!(fields[0], fields[1]);
    let own = nix::unistd::getpgrp().as_raw().to_string();
    assert!(fields[1] != own);
}

/// A command outside a run (no scope) has its background processes stopped when it ends (a
/// run's step keeps them until the run ends: `suite::linger`).
#[tokio::test]
async fn background_child_holding_the_pipe_does_not_hang_and_is_killed() {
    // `sleep` keeps stdout open after the shell exits; the call must return and kill it.
    let out = run_ok(shell("sleep 100 & echo $!")).await;
    assert_eq!(out.exit_code, 0);
    let pid = crate::common::first_pid(&out.stdout);
    assert!(
        crate::common::gone_soon(pid),
        "background sleep {pid} survived"
    );
}

#[tokio::test]
async fn background_child_with_redirected_output_is_killed() {
    let out = run_ok(shell("sleep 100 >/dev/null 2>&1 & echo $!")).await;
    assert_eq!(out.exit_code, 0);
    let pid = crate::common::first_pid(&out.stdout);
    assert!(
        crate::common::gone_soon(pid),
        "background sleep {pid} survived"
    );
}
