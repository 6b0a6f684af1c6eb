//! Bash: both streams and the exit code, timeouts, cancel, output caps, masking, and no
//! process left behind (found by an environment marker this test sets).

use std::time::Duration;
use std::time::Instant;

use awf_domain::mask::Masker;
use awf_tools::Limits;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common::*;

/// Waits (generously) until no live process carries `entry`; returns the survivors.
async fn survivors(entry: &str) -> Vec<i32> {
    let t0 = Instant::now();
    loop {
        let left = with_env(entry);
        if left.is_empty() || t0.elapsed() > Duration::from_secs(1) {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn returns_both_streams_and_the_exit_code() {
    let ws = Ws::new();
    let out = ws
        .call("Bash", json!({"command": "echo out; echo err >&2"}))
        .await;
    assert_eq!(ok(&out), "out\n--- stderr ---\nerr\n[awf: exit code 0]\n");
    let out = ws
        .call(
            "Bash",
            json!({"command": "echo partial; echo broke >&2; exit 3"}),
        )
        .await;
    assert!(out.is_error);
    assert_eq!(
        out.text,
        "partial\n--- stderr ---\nbroke\n[awf: exit code 3]\n"
    );
    let out = ws.call("Bash", json!({"command": "true"})).await;
    assert_eq!(ok(&out), "(no output)\n[awf: exit code 0]\n");
}

#[tokio::test]
async fn runs_in_the_root_or_a_confined_cwd_with_stdin_closed() {
    let ws = Ws::new();
    std::fs::create_dir(ws.path("sub")).unwrap();
    let out = ws.call("Bash", json!({"command": "pwd"})).await;
    assert_eq!(
        ok(&out),
        format!("{}\n[awf: exit code 0]\n", ws.root.display())
    );
    let out = ws
        .call("Bash", json!({"command": "pwd", "cwd": "sub"}))
        .await;
    assert!(ok(&out).starts_with(&format!("{}\n", ws.path("sub").display())));
    // stdin is /dev/null: `cat` ends at once.
    let out = ws
        .call(
            "Bash",
            json!({"command": "cat; echo done", "timeout_seconds": 20}),
        )
        .await;
    assert_eq!(ok(&out), "done\n[awf: exit code 0]\n");
    assert_err(
        &ws.call("Bash", json!({"command": "pwd", "cwd": "nope"}))
            .await,
        "does not exist",
    );
    assert_err(
        &ws.call("Bash", json!({})).await,
        "missing required argument `command`",
    );
    assert_err(
        &ws.call("Bash", json!({"command": "ls", "run_in_background": true}))
            .await,
        "not supported",
    );
}

#[tokio::test]
async fn a_timeout_stops_the_whole_group_even_a_term_ignoring_one() {
    let ws = Ws::new();
    let mark = marker("timeout");
    let t0 = Instant::now();
    let out = ws
        .call(
            "Bash",
            json!({
                "command": format!("export {mark}; trap '' TERM; sleep 300 & sleep 300; echo never"),
                "timeout_seconds": 1
            }),
        )
        .await;
    assert_err(&out, "timed out after 1 s");
    assert!(!out.text.contains("never"));
    assert!(t0.elapsed() < Duration::from_secs(60), "{:?}", t0.elapsed());
    assert_eq!(survivors(&mark).await, Vec::<i32>::new());
    // Claude's `timeout`, in milliseconds.
    let out = ws
        .call(
            "Bash",
            json!({"command": "echo started; sleep 300", "timeout": 300}),
        )
        .await;
    assert_err(&out, "timed out after 300 ms");
    assert!(
        out.text.starts_with("started\n"),
        "partial output kept: {}",
        out.text
    );
}

#[tokio::test]
async fn a_timeout_beyond_the_maximum_is_lowered() {
    let ws = Ws::with_limits(Limits {
        bash_max_timeout: Duration::from_secs(1),
        ..Limits::default()
    });
    let out = ws
        .call(
            "Bash",
            json!({"command": "sleep 300", "timeout_seconds": 100_000}),
        )
        .await;
    assert_err(&out, "timeout lowered to the maximum of 1 s");
    assert!(out.text.contains("timed out after 1 s"));
}

#[tokio::test]
async fn cancel_stops_the_command_promptly() {
    let ws = Ws::new();
    let mark = marker("cancel");
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        c2.cancel();
    });
    let t0 = Instant::now();
    let out = call_with(
        &ws.tools,
        "Bash",
        json!({"command": format!("export {mark}; echo begun; sleep 300")}),
        cancel,
    )
    .await;
    assert_err(&out, "cancelled");
    assert!(out.text.starts_with("begun\n"), "{}", out.text);
    assert!(t0.elapsed() < Duration::from_secs(60));
    assert_eq!(survivors(&mark).await, Vec::<i32>::new());
}

#[tokio::test]
async fn detached_grandchildren_do_not_survive_the_call() {
    let ws = Ws::new();
    let mark = marker("detach");
    // setsid leaves the group and the session; nohup with the pipes still held open; a
    // double fork; all three would outlive a group kill.
    let command = format!(
        "export {mark}; setsid sleep 300 >/dev/null 2>&1 < /dev/null & nohup sleep 301 & (sleep 302 &) ; echo launched"
    );
    let t0 = Instant::now();
    let out = ws
        .call("Bash", json!({"command": command, "timeout_seconds": 60}))
        .await;
    assert!(ok(&out).starts_with("launched\n"), "{}", out.text);
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    assert_eq!(survivors(&mark).await, Vec::<i32>::new());
}

#[tokio::test]
async fn long_output_keeps_head_and_tail() {
    let ws = Ws::with_limits(Limits {
        bash_stream_chars: 100,
        ..Limits::default()
    });
    let out = ws
        .call(
            "Bash",
            json!({"command": "echo HEAD; seq 1 100000; echo TAIL"}),
        )
        .await;
    let text = ok(&out);
    assert!(text.starts_with("HEAD\n1\n2\n"), "{text}");
    assert!(text.contains("[awf: stdout cut: "), "{text}");
    assert!(text.contains("100000\nTAIL\n"), "{text}");
    assert!(text.len() < 400, "{} bytes: {text}", text.len());
}

#[tokio::test]
async fn secret_values_are_masked_even_across_the_cut() {
    let secret = "s3cr3t-Value-42";
    let ws = Ws::with_limits(Limits {
        bash_stream_chars: 100,
        ..Limits::default()
    });
    let tools = ws
        .tools
        .clone()
        .with_masker(&Masker::from_named([("API_TOKEN", secret)]));
    let out = call_with(
        &tools,
        "Bash",
        json!({"command": format!("echo {secret}; echo {secret} >&2; printf 'a%.0s' $(seq 1 45); echo {secret}; seq 1 5000; echo {secret}")}),
        CancellationToken::new(),
    )
    .await;
    let text = ok(&out);
    assert!(text.contains("***"), "{text}");
    for part in [secret, "s3cr3t", "Value-42"] {
        assert!(!text.contains(part), "{part} shown in {text}");
    }
}

#[tokio::test]
async fn secret_named_variables_of_the_environment_are_masked() {
    if std::env::var("AWF_TOOLS_TEST_PASSWORD").is_ok() {
        // The child run (below): its environment holds the secret.
        let ws = Ws::new();
        let out = ws
            .call(
                "Bash",
                json!({"command": "echo \"pw=$AWF_TOOLS_TEST_PASSWORD\""}),
            )
            .await;
        assert_eq!(ok(&out), "pw=***\n[awf: exit code 0]\n");
        return;
    }
    // Run this same test again in a child process whose environment holds the secret (no
    // `unsafe` set_var in a threaded test).
    let me = std::env::current_exe().unwrap();
    let out = std::process::Command::new(me)
        .args([
            "--exact",
            "suite::bash::secret_named_variables_of_the_environment_are_masked",
            "--nocapture",
        ])
        .env("AWF_TOOLS_TEST_PASSWORD", "hunter2-correct-horse")
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{all}");
    assert!(all.contains("1 passed"), "{all}");
}

#[tokio::test]
async fn a_call_dropped_midway_leaves_nothing_behind() {
    let ws = Ws::new();
    let mark = marker("dropped");
    let call = ws.call(
        "Bash",
        json!({"command": format!("export {mark}; setsid sleep 300 >/dev/null 2>&1 & sleep 300")}),
    );
    // The caller gives up without cancelling: the future is dropped.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), call)
            .await
            .is_err()
    );
    assert_eq!(survivors(&mark).await, Vec::<i32>::new());
}

#[tokio::test]
async fn concurrent_calls_do_not_stop_each_others_processes() {
    let ws = Ws::new();
    let mark = marker("concurrent");
    let slow = ws.call(
        "Bash",
        json!({"command": "sleep 2; echo slow-done", "timeout_seconds": 60}),
    );
    let detaching = ws.call(
        "Bash",
        json!({"command": format!("export {mark}; setsid sleep 300 >/dev/null 2>&1 & echo quick")}),
    );
    let (slow, quick) = tokio::join!(slow, detaching);
    assert!(ok(&quick).starts_with("quick\n"));
    assert_eq!(ok(&slow), "slow-done\n[awf: exit code 0]\n");
    assert_eq!(survivors(&mark).await, Vec::<i32>::new());
}

#[tokio::test]
async fn output_that_is_not_utf8_is_shown_lossily() {
    let ws = Ws::new();
    let out = ws
        .call("Bash", json!({"command": "printf 'caf\\351\\n'"}))
        .await;
    assert_eq!(ok(&out), "caf\u{FFFD}\n[awf: exit code 0]\n");
}
