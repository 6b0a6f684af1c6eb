//! Scripts: shebang scripts run from a temp file, plain scripts through the shell.

use std::path::PathBuf;
use std::time::Duration;

use awf_domain::ErrorCode;
use awf_domain::ports::exec::CommandSpec;
use awf_domain::ports::exec::Termination;
use pretty_assertions::assert_eq;

use crate::common::run;
use crate::common::run_ok;
use crate::common::script;

#[tokio::test]
async fn sh_shebang_script_runs_from_a_removed_temp_file() {
    let out = run_ok(script("#!/bin/sh\necho \"$0\"\necho done\n")).await;
    assert_eq!(out.exit_code, 0);
    let mut lines = out.stdout.lines();
    let path = PathBuf::from(lines.next().expect("path line"));
    assert_eq!(lines.next(), Some("done"));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    assert!(name.starts_with("awf-script-"), "{name}");
    assert_eq!(path.parent(), Some(std::env::temp_dir().as_path()));
    assert!(!path.exists(), "temp script {} left behind", path.display());
}

#[tokio::test]
async fn env_python_shebang_script_runs() {
    let out = run_ok(script(
        "#!/usr/bin/env python3\nimport sys\nprint('py', sys.version_info[0])\nsys.exit(7)\n",
    ))
    .await;
    assert_eq!((out.exit_code, out.stdout.as_str()), (7, "py 3\n"));
}

#[tokio::test]
async fn script_without_shebang_runs_through_the_shell() {
    let out = run_ok(script("x=plain\necho \"$x\"\n")).await;
    assert_eq!((out.exit_code, out.stdout.as_str()), (0, "plain\n"));
}

#[tokio::test]
async fn temp_script_removed_after_timeout() {
    let spec = CommandSpec {
        timeout: Some(Duration::from_secs(1)),
        ..script("#!/bin/sh\necho \"$0\"\nsleep 30\n")
    };
    let out = run_ok(spec).await;
    assert_eq!(out.termination, Termination::TimedOut);
    let path = PathBuf::from(out.stdout.trim_end());
    assert!(
        path.to_string_lossy().contains("awf-script-"),
        "{}",
        out.stdout
    );
    assert!(!path.exists());
}

#[tokio::test]
async fn missing_interpreter_is_a_command_failed_error() {
    let err = run(script("#!/nonexistent/awf/interpreter\necho hi\n"))
        .await
        .expect_err("must fail");
    assert_eq!(err.code(), ErrorCode::ExecutionCommandFailed);
    let program = err.details()["program"]
        .as_str()
        .expect("program detail")
        .to_owned();
    assert!(program.contains("awf-script-"), "{program}");
    assert!(!PathBuf::from(program).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_shebang_scripts_all_run() {
    let mut set = tokio::task::JoinSet::new();
    for i in 0..24 {
        set.spawn(async move { (i, run(script(&format!("#!/bin/sh\necho {i}\n"))).await) });
    }
    let mut seen = 0;
    while let Some(joined) = set.join_next().await {
        let (i, res) = joined.expect("task");
        let out = res.expect("script starts");
        assert_eq!(out.stdout, format!("{i}\n"));
        seen += 1;
    }
    assert_eq!(seen, 24);
}
