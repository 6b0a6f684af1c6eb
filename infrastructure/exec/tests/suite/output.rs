//! Large output, streaming callbacks, UTF-8 handling.

use awf_domain::event::OutputStream;
use awf_domain::ports::exec::CommandExecutor;
use awf_domain::ports::exec::CommandSpec;
use pretty_assertions::assert_eq;
use tokio_util::sync::CancellationToken;

use crate::common::joined;
use crate::common::joined_bytes;
use crate::common::recorder;
use crate::common::run_ok;
use crate::common::shell;

const TEN_MB: usize = 10 * 1024 * 1024;

#[tokio::test]
async fn ten_megabytes_on_stdout_is_complete() {
    let out = run_ok(shell(&format!("yes abcdefghi | head -c {TEN_MB}"))).await;
    assert_eq!(out.exit_code, 0);
    assert_eq!(out.stdout.len(), TEN_MB);
    assert_eq!(out.stdout.lines().count(), TEN_MB / 10);
    assert!(out.stdout.lines().all(|l| l == "abcdefghi"));
}

#[tokio::test]
async fn ten_megabytes_on_both_streams_does_not_deadlock() {
    let cmd = format!(
        "yes 0123456789abcde | head -c {TEN_MB} >&2 & yes abcdefghi | head -c {TEN_MB}; wait"
    );
    let out = run_ok(shell(&cmd)).await;
    assert_eq!(out.exit_code, 0);
    assert_eq!(out.stdout.len(), TEN_MB);
    assert_eq!(out.stderr.len(), TEN_MB);
    assert!(out.stdout.lines().all(|l| l == "abcdefghi"));
    assert!(out.stderr.lines().all(|l| l == "0123456789abcde"));
}

#[tokio::test]
async fn callback_chunks_concatenate_to_the_captured_output() {
    let (cb, chunks) = recorder();
    let out = crate::common::executor()
        .run(
            shell("for i in 1 2 3; do echo out$i; echo err$i >&2; done; yes xyz | head -c 300000"),
            Some(cb),
            CancellationToken::new(),
        )
        .await
        .expect("runs");
    assert_eq!(out.stderr, "err1\nerr2\nerr3\n");
    assert_eq!(out.stdout.len(), 15 + 300_000);
    assert_eq!(joined(&chunks, OutputStream::Stdout), out.stdout);
    assert_eq!(joined(&chunks, OutputStream::Stderr), out.stderr);
}

#[tokio::test]
async fn multibyte_utf8_survives_chunking() {
    let (cb, chunks) = recorder();
    let line = "héllo wörld € 𝄞 ✓";
    let out = crate::common::executor()
        .run(
            shell(&format!("yes '{line}' | head -n 60000")),
            Some(cb),
            CancellationToken::new(),
        )
        .await
        .expect("runs");
    assert_eq!(out.stdout.lines().count(), 60000);
    assert!(out.stdout.lines().all(|l| l == line));
    assert_eq!(joined(&chunks, OutputStream::Stdout), out.stdout);
}

#[tokio::test]
async fn invalid_utf8_is_streamed_exactly_and_kept_as_replacement_characters() {
    let (cb, chunks) = recorder();
    let out = crate::common::executor()
        .run(
            shell(r"printf 'a\377b\342\202'"),
            Some(cb),
            CancellationToken::new(),
        )
        .await
        .expect("runs");
    assert_eq!(out.stdout, "a\u{FFFD}b\u{FFFD}");
    assert_eq!(
        joined_bytes(&chunks, OutputStream::Stdout),
        b"a\xffb\xe2\x82"
    );
}

#[tokio::test]
async fn capture_limit_keeps_the_first_bytes_and_streams_everything() {
    let (cb, chunks) = recorder();
    let spec = CommandSpec {
        capture_limit: Some(1000),
        scope: None,
        ..shell("yes abcdefghi | head -c 300000; echo err-line >&2")
    };
    let out = crate::common::executor()
        .run(spec, Some(cb), CancellationToken::new())
        .await
        .expect("runs");
    assert_eq!(out.exit_code, 0);
    assert!(out.truncated);
    assert_eq!(out.stdout, "abcdefghi\n".repeat(100));
    assert_eq!(out.stderr, "err-line\n");
    let streamed = joined(&chunks, OutputStream::Stdout);
    assert_eq!(streamed.len(), 300_000);
    assert_eq!(streamed, "abcdefghi\n".repeat(30_000));
}

#[tokio::test]
async fn capture_limit_not_reached_is_not_truncated() {
    let spec = CommandSpec {
        capture_limit: Some(10),
        scope: None,
        ..shell("printf 0123456789")
    };
    let out = run_ok(spec).await;
    assert_eq!((out.stdout.as_str(), out.truncated), ("0123456789", false));
    let spec = CommandSpec {
        capture_limit: Some(0),
        scope: None,
        ..shell("echo x; echo y >&2")
    };
    let out = run_ok(spec).await;
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str(), out.truncated),
        ("", "", true)
    );
}

#[tokio::test]
async fn capture_limit_cut_inside_a_character_drops_it() {
    // "€" is 3 bytes: a 4-byte cap keeps "a" and the first 3 bytes of the first euro sign;
    // a 5-byte cap splits the second one, which is dropped rather than shown as U+FFFD.
    let spec = |n| CommandSpec {
        capture_limit: Some(n),
        scope: None,
        ..shell("printf 'a€€€'")
    };
    assert_eq!(run_ok(spec(4)).await.stdout, "a€");
    assert_eq!(run_ok(spec(5)).await.stdout, "a€");
    assert_eq!(run_ok(spec(7)).await.stdout, "a€€");
}

#[tokio::test]
async fn default_capture_limit_bounds_huge_output() {
    let over = awf_exec::DEFAULT_CAPTURE_LIMIT + 4096;
    let out = run_ok(shell(&format!("head -c {over} /dev/zero"))).await;
    assert_eq!(out.exit_code, 0);
    assert!(out.truncated);
    assert_eq!(out.stdout.len(), awf_exec::DEFAULT_CAPTURE_LIMIT);
}
