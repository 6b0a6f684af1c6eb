//! Fixes from a trial of the MCP proxy in agent steps, over the real binary: the temp files a
//! SIGKILLed `awf run` left are swept by the next run (a live awf's are kept), a `mcp_proxy:`
//! block without `enable: true` is warned about, an unknown `mcp_proxy` key is reported like
//! every other finding, `-f json -o streaming` keeps stdout to the one JSON document, and
//! failed tool calls show in `-o streaming --verbose`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::process::Stdio;

use awf_tests::Sandbox;
use awf_tests::wait_for;

/// A sandbox with its own TMPDIR (`<sandbox>/tmp`) and a `bin/` first on PATH.
fn sandbox() -> Sandbox {
    let mut sb = Sandbox::new().unwrap();
    let tmp = sb.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    sb.set_env("TMPDIR", &tmp.display().to_string());
    let bin = sb.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    sb.set_env("PATH", &path);
    sb
}

/// Names in the sandbox's TMPDIR, sorted.
fn tmp_names(sb: &Sandbox) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(sb.path().join("tmp"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A fake `claude` on the sandbox's PATH: touches `marker`, then sleeps (an agent mid-step).
fn fake_claude(sb: &Sandbox, marker: &Path) {
    let script = sb.path().join("bin/claude");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncase \"$1\" in --version) echo '2.0.0 (Claude Code)'; exit 0;; esac\ntouch '{}'\nexec sleep 60\n",
            marker.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
}

const PROXIED: &str = "name: proxied
states:
  initial: ask
  ask:
    type: agent
    provider: claude
    prompt: hello
    mcp_proxy:
      enable: true
    timeout: 2m
    on_success: done
  done:
    type: terminal
";

#[test]
fn the_next_run_sweeps_what_a_sigkilled_run_left_in_tmpdir_and_keeps_a_live_awfs_files() {
    let sb = sandbox();
    let marker = sb.path().join("agent-started");
    fake_claude(&sb, &marker);
    sb.write("proxied.yaml", PROXIED).unwrap();
    sb.write(
        "sleepy.yaml",
        "name: sleepy\nstates:\n  initial: s\n  s:\n    type: step\n    command: touch sleepy-started; sleep 60\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    sb.write(
        "quick.yaml",
        "name: quick\nstates:\n  initial: s\n  s:\n    type: step\n    command: echo hi\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();

    // An `awf run` SIGKILLed while its agent step runs.
    let mut killed = sb
        .cmd(&["run", "proxied.yaml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let killed_pid = killed.id();
    wait_for("the agent step to start", || marker.exists());
    killed.kill().unwrap();
    killed.wait().unwrap();
    let left = tmp_names(&sb);
    for prefix in ["awf-mcp-proxy-", "awf-claude-mcp-"] {
        assert!(
            left.iter()
                .any(|n| n.starts_with(&format!("{prefix}{killed_pid}-"))),
            "{prefix}<pid>-… of the killed awf ({killed_pid}) in {left:?}"
        );
    }
    assert!(
        left.iter().any(|n| n.ends_with(".events.jsonl")),
        "{left:?}"
    );

    // A live awf (mid-step) and its file, and a file of no awf at all.
    let mut live = sb
        .cmd(&["run", "sleepy.yaml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the live run's step to start", || {
        sb.path().join("sleepy-started").exists()
    });
    let live_file = format!("awf-mcp-proxy-{}-keep.json", live.id());
    std::fs::write(sb.path().join("tmp").join(&live_file), "{}").unwrap();
    std::fs::write(sb.path().join("tmp/unrelated-note.json"), "{}").unwrap();

    let run = sb.run(&["run", "quick.yaml"]).unwrap();
    assert_eq!(run.code, 0, "{}", run.stderr);
    // What the killed awf left is gone; the live awf's file, and every other file, stay.
    assert_eq!(
        tmp_names(&sb),
        vec![live_file, "unrelated-note.json".to_owned()]
    );
    live.kill().unwrap();
    live.wait().unwrap();
    // Once that awf is gone too, its file goes with the next run.
    let run = sb.run(&["run", "quick.yaml"]).unwrap();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(tmp_names(&sb), vec!["unrelated-note.json".to_owned()]);
}

/// A one-step claude workflow with `mcp_proxy:<block>`.
fn with_proxy(block: &str) -> String {
    format!(
        "name: p\nstates:\n  initial: a\n  a:\n    type: agent\n    provider: claude\n    prompt: hi\n    mcp_proxy: {block}\n    on_success: done\n  done:\n    type: terminal\n"
    )
}

#[test]
fn a_proxy_block_without_enable_true_is_warned_about() {
    let sb = sandbox();
    for block in [
        "{plugin_tools: [{plugin: http, expose: [request]}]}",
        "{intercept_builtins: true}",
    ] {
        sb.write("p.yaml", &with_proxy(block)).unwrap();
        let r = sb.run(&["validate", "p.yaml"]).unwrap();
        assert_eq!(
            r.code, 0,
            "{block}: a warning only\n{}{}",
            r.stdout, r.stderr
        );
        assert!(
            r.stderr
                .contains("p.yaml:8:5: warning [USER.MCP_PROXY.NOT_ENABLED]")
                && r.stderr.contains("no effect without enable: true")
                && r.stderr.contains("Hint: "),
            "{block}\n{}",
            r.stderr
        );
    }
    for block in [
        "{}",
        "{enable: false}",
        "{enable: false, intercept_builtins: true}",
    ] {
        sb.write("p.yaml", &with_proxy(block)).unwrap();
        let r = sb.run(&["validate", "p.yaml"]).unwrap();
        assert_eq!(r.code, 0, "{block}\n{}", r.stderr);
        assert!(!r.stderr.contains("NOT_ENABLED"), "{block}\n{}", r.stderr);
    }
}

#[test]
fn an_unknown_mcp_proxy_key_is_one_finding_of_the_validation_report() {
    let sb = sandbox();
    sb.write(
        "u.yaml",
        "name: u\nstates:\n  initial: a\n  a:\n    type: agent\n    provider: claude\n    prompt: hi\n    mcp_proxy:\n      enable: true\n      bogus: 1\n    on_success: nowhere\n  done:\n    type: terminal\n",
    )
    .unwrap();
    let r = sb.run(&["validate", "u.yaml"]).unwrap();
    let text = format!("{}{}", r.stdout, r.stderr);
    assert!(
        text.contains("u.yaml:10:7: error [USER.MCP_PROXY.UNKNOWN_KEY] states.a.mcp_proxy: unknown key \"bogus\" in mcp_proxy"),
        "{text}"
    );
    // Reported with the other findings, under the one summary, as a workflow error.
    assert!(
        text.contains("[WORKFLOW.VALIDATION.MISSING_STATE]"),
        "{text}"
    );
    assert!(
        text.contains("Workflow 'u.yaml' is invalid: 2 errors"),
        "{text}"
    );
    assert!(!text.contains("[USER.MCP_PROXY.UNKNOWN_KEY] /"), "{text}");
    // The exit code is the first error's category (USER here: 1), as for every report.
    assert_eq!(r.code, 1, "{text}");
    let r = sb.run(&["validate", "u.yaml", "-f", "json"]).unwrap();
    let doc = r.json().unwrap();
    assert_eq!(doc["valid"], false, "{doc}");
    let codes: Vec<&str> = doc["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["code"].as_str())
        .collect();
    assert!(codes.contains(&"USER.MCP_PROXY.UNKNOWN_KEY"), "{doc}");
}

#[test]
fn json_format_keeps_the_live_stream_off_stdout_and_stderr() {
    let sb = sandbox();
    sb.write(
        "s.yaml",
        "name: s\nstates:\n  initial: s\n  s:\n    type: step\n    command: echo LIVE-OUT; echo LIVE-ERR >&2\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb
        .run(&[
            "run",
            "s.yaml",
            "-f",
            "json",
            "-o",
            "streaming",
            "--verbose",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    // stdout is exactly the one JSON document, which holds the output.
    let doc = r.json().unwrap();
    assert_eq!(doc["states"]["s"]["output"], "LIVE-OUT\n", "{doc}");
    assert!(!r.stderr.contains("LIVE-"), "{}", r.stderr);
    assert!(
        !r.stderr.contains("[OUT]") && !r.stderr.contains("→ s"),
        "{}",
        r.stderr
    );
    // Without -f json the same run streams.
    let r = sb.run(&["run", "s.yaml", "-o", "streaming"]).unwrap();
    assert!(r.stdout.contains("LIVE-OUT"), "{}", r.stdout);
}

#[test]
fn resume_and_acp_serve_sweep_at_start_too() {
    let sb = sandbox();
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    dead.wait().unwrap();
    for args in [&["resume", "no-such-run"][..], &["acp-serve"][..]] {
        let stale = format!("awf-copilot-mcp-{}-0123456789abcdef.json", dead.id());
        let stale_dir = format!("awf-gemini-{}-0123456789abcdef", dead.id());
        std::fs::write(sb.path().join("tmp").join(&stale), "{}").unwrap();
        std::fs::create_dir(sb.path().join("tmp").join(&stale_dir)).unwrap();
        std::fs::write(sb.path().join("tmp").join(&stale_dir).join("s.json"), "{}").unwrap();
        // Whatever the command then does (no such run; end of input for acp-serve).
        let _ = sb.run(args).unwrap();
        assert_eq!(tmp_names(&sb), Vec::<String>::new(), "{args:?}");
    }
}
