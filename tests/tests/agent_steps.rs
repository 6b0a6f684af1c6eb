//! Agent steps over the binary with stand-in agent CLIs: small shell scripts named like the
//! real CLIs, put first on PATH, that print what a CLI would (or fail to). The real CLIs are
//! driven in agents.rs; these cover what the real ones cannot be made to do.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;

use awf_tests::Sandbox;
use serde_json::json;

/// A sandbox whose PATH starts with `bin/`, holding an executable `name` with `script`.
fn with_cli(name: &str, script: &str) -> Sandbox {
    let mut sb = Sandbox::new().unwrap();
    let bin = sb.write(&format!("bin/{name}"), script).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        sb.path().join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    sb.set_env("PATH", &path);
    sb
}

const CONVERSATION: &str = "name: convo\nstates:\n  initial: first\n  first:\n    type: agent\n    provider: claude\n    prompt: remember ZEBRA\n    conversation: {}\n    on_success: second\n  second:\n    type: agent\n    provider: claude\n    prompt: what word?\n    conversation:\n      continue_from: first\n    on_success: done\n  done:\n    type: terminal\n";

/// Issue 7: a conversation step whose provider returned no session id says so, instead of
/// silently starting the next turn fresh.
#[test]
fn continuing_a_session_without_an_id_warns() {
    // A claude that answers but never prints a session id (and records its argv).
    let sb = with_cli(
        "claude",
        "#!/bin/sh\necho \"$*\" >> \"$(dirname \"$0\")/argv.log\"\necho '{\"type\":\"result\",\"result\":\"ok\"}'\n",
    );
    let wf = sb.write("wf.yaml", CONVERSATION).unwrap();
    let r = sb
        .run(&["run", wf.to_str().unwrap(), "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(doc["states"]["second"]["output"], json!("ok"));
    assert!(
        r.stderr.contains(
            "step second: provider \"claude\" returned no session id for the earlier turns of this conversation, so this turn starts a fresh session without them"
        ),
        "{}",
        r.stderr
    );
    // The warning is about the second step only: the first had nothing to resume.
    assert_eq!(r.stderr.matches("returned no session id").count(), 1);
    let argv = std::fs::read_to_string(sb.path().join("bin/argv.log")).unwrap();
    assert!(!argv.contains(" -r "), "{argv}");
}

/// With a session id there is nothing to warn about, and the second turn resumes it.
#[test]
fn continuing_a_session_with_an_id_resumes_it_quietly() {
    let sb = with_cli(
        "claude",
        "#!/bin/sh\necho \"$*\" >> \"$(dirname \"$0\")/argv.log\"\necho '{\"type\":\"result\",\"result\":\"ok\",\"session_id\":\"sess-1\"}'\n",
    );
    let wf = sb.write("wf.yaml", CONVERSATION).unwrap();
    let r = sb.run(&["run", wf.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("session id"), "{}", r.stderr);
    let argv = std::fs::read_to_string(sb.path().join("bin/argv.log")).unwrap();
    assert!(argv.lines().nth(1).unwrap().contains("-r sess-1"), "{argv}");
}

/// Issue 7: an agent that exits non-zero has the tail of its stdout in the step's error as
/// well as stderr, when it printed no error event awf understands.
#[test]
fn failing_cli_error_carries_stdout_and_stderr() {
    let sb = with_cli(
        "codex",
        "#!/bin/sh\necho 'Error: config.toml: unknown field `modle`'\necho 'see --help' >&2\nexit 2\n",
    );
    let wf = sb
        .write(
            "wf.yaml",
            "name: f\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: codex\n    prompt: hi\n    on_success: done\n    on_failure: failed\n  done:\n    type: terminal\n  failed:\n    type: terminal\n    status: failure\n",
        )
        .unwrap();
    let r = sb
        .run(&["run", wf.to_str().unwrap(), "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let doc = r.json().unwrap();
    let err = doc["states"]["ask"]["error"].as_str().unwrap();
    assert!(err.contains("stderr: see --help"), "{err}");
    assert!(
        err.contains("stdout: Error: config.toml: unknown field `modle`"),
        "{err}"
    );
}

/// Issue 7: an option the provider does not know is a warning in `awf validate` and at run
/// start that lists the known ones; an option written as the CLI spells its flag is known.
#[test]
fn unknown_agent_options_are_warned_with_the_known_ones() {
    let sb = with_cli(
        "claude",
        "#!/bin/sh\necho \"$*\" > \"$(dirname \"$0\")/argv.log\"\necho '{\"type\":\"result\",\"result\":\"ok\"}'\n",
    );
    let wf = sb
        .write(
            "wf.yaml",
            "name: o\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: claude\n    prompt: hi\n    options:\n      allowedTools: [Read]\n      max_turn: 3\n    on_success: done\n  done:\n    type: terminal\n",
        )
        .unwrap();
    let v = sb.run(&["validate", wf.to_str().unwrap()]).unwrap();
    assert_eq!(v.code, 0, "{}{}", v.stdout, v.stderr);
    let all = format!("{}{}", v.stdout, v.stderr);
    assert!(
        all.contains("states.ask.options.max_turn: provider \"claude\" has no option \"max_turn\""),
        "{all}"
    );
    assert!(all.contains("did you mean 'max_turns'?"), "{all}");
    assert!(all.contains("known options: model, allowed_tools"), "{all}");
    assert!(!all.contains("options.allowedTools"), "{all}");

    let r = sb.run(&["run", wf.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("has no option \"max_turn\""),
        "{}",
        r.stderr
    );
    let argv = std::fs::read_to_string(sb.path().join("bin/argv.log")).unwrap();
    assert!(argv.contains("--allowedTools Read"), "{argv}");
}

/// Issue 8: a malformed line in an agent's stream is not printed in `-o streaming` output,
/// whether or not the rest of the stream parses.
#[test]
fn malformed_stream_lines_are_not_printed_live() {
    let stream =
        "#!/bin/sh\necho 'plain words'\necho '{\"type\":\"assistant\", broken'\necho '[\"half'\n";
    for (cli, provider, tail) in [
        (
            "claude",
            "claude",
            "echo '{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"the answer\"}]}}'\necho '{\"type\":\"result\",\"result\":\"the answer\"}'\n",
        ),
        ("codex", "codex", ""),
        ("gemini", "gemini", ""),
    ] {
        let sb = with_cli(cli, &format!("{stream}{tail}"));
        let wf = sb
            .write(
                "wf.yaml",
                &format!(
                    "name: m\nstates:\n  initial: a\n  a:\n    type: agent\n    provider: {provider}\n    prompt: hi\n    on_success: d\n  d:\n    type: terminal\n"
                ),
            )
            .unwrap();
        let r = sb
            .run(&["run", wf.to_str().unwrap(), "-o", "streaming"])
            .unwrap();
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert!(!r.stdout.contains("broken"), "{cli}: {}", r.stdout);
        assert!(!r.stdout.contains("half"), "{cli}: {}", r.stdout);
        assert!(!r.stderr.contains("broken"), "{cli}: {}", r.stderr);
        if tail.is_empty() {
            assert_eq!(r.stdout.trim(), "plain words", "{cli}");
        } else {
            assert_eq!(r.stdout.trim(), "the answer", "{cli}");
        }
    }
}
