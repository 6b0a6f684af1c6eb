//! Secrets through the binary (issue 7): multi-line secrets, masking before truncation and at
//! a timeout, dry-run options, environment values never in errors or panics; and a step's
//! bytes passed through exactly to live output, with documented text conversions elsewhere.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::process::Output;

use awf_tests::Sandbox;
use pretty_assertions::assert_eq;
use serde_json::Value;

/// A PEM-shaped multi-line secret.
const PEM: &str = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSj\nAgEAAoIBAQC7VJTUt9Us8cKjMzEfYyjiWA4R4\nqzb+tWLXhy0yExrdZ3u8Y2hE1SuW4Pc0ZBTr\n-----END PRIVATE KEY-----";

/// Every file under `dir` (recursively), read as bytes.
fn files(dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if let Ok(b) = std::fs::read(&p) {
            out.push((p.display().to_string(), b));
        }
    }
}

fn contains(hay: &[u8], needle: &str) -> bool {
    has(hay, needle.as_bytes())
}

fn has(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Asserts that none of `needles` appears in the run's stdout, stderr or any file of the
/// sandbox's data root (state files, transcripts, audit trail, history).
fn assert_nowhere(sb: &Sandbox, out: &Output, needles: &[&str]) {
    let mut all = vec![
        ("stdout".to_owned(), out.stdout.clone()),
        ("stderr".to_owned(), out.stderr.clone()),
    ];
    files(&sb.path().join("data"), &mut all);
    assert!(all.len() > 2, "the run recorded nothing");
    for (what, bytes) in &all {
        for n in needles {
            assert!(
                !contains(bytes, n),
                "{n:?} in {what}:\n{}",
                String::from_utf8_lossy(bytes)
            );
        }
    }
}

/// The state file of the only run in the sandbox.
fn state_file(sb: &Sandbox) -> Value {
    let dir = sb.path().join("data").join("awf").join("states");
    let mut found = Vec::new();
    files(&dir, &mut found);
    let (_, bytes) = found
        .into_iter()
        .find(|(p, _)| p.ends_with(".json"))
        .expect("a state file");
    serde_json::from_slice(&bytes).unwrap()
}

fn pem_lines() -> Vec<&'static str> {
    PEM.lines().filter(|l| l.len() >= 4).collect()
}

const PRINT_LINES: &str = r#"name: pem
inputs:
  - name: deploy_private_key
    required: false
    default: ""
states:
  initial: whole
  whole:
    type: step
    command: printf '%s\n' "$PRIVATE_KEY"
    on_success: indented
  indented:
    type: step
    command: printf '%s\n' "$PRIVATE_KEY" | sed 's/^/    /'
    on_success: one_by_one
  one_by_one:
    type: step
    command: |
      printf '%s\n' "$PRIVATE_KEY" | while IFS= read -r l; do printf 'key line: %s\n' "$l"; sleep 0.02; done
    on_success: from_input
  from_input:
    type: step
    command: |
      printf '%s\n' '{{.inputs.deploy_private_key}}' | while IFS= read -r l; do printf '>> %s\n' "$l" >&2; done
    on_success: done
  done:
    type: terminal
"#;

#[test]
fn every_line_of_a_multi_line_secret_is_masked_in_streaming_output_state_and_transcript() {
    for args in [
        &["-o", "streaming"][..],
        &["-o", "buffered"],
        &["-f", "json"],
    ] {
        let mut sb = Sandbox::new().unwrap();
        sb.set_env("PRIVATE_KEY", PEM);
        let wf = sb.write("pem.yaml", PRINT_LINES).unwrap();
        let input = format!("deploy_private_key={PEM}");
        let mut a = vec!["run", wf.to_str().unwrap(), "-i", &input];
        a.extend_from_slice(args);
        let out = sb.cmd(&a).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert_nowhere(&sb, &out, &pem_lines());
        // The lines were printed, masked.
        let shown = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        if args[0] == "-o" {
            assert!(shown.contains("key line: ***"), "{shown}");
            assert!(shown.contains("    ***"), "{shown}");
        }
        let st = state_file(&sb);
        assert_eq!(
            st["states"]["one_by_one"]["output"].as_str(),
            Some("key line: ***\n".repeat(5).as_str()),
            "{st}"
        );
    }
}

#[test]
fn capture_max_size_cutting_inside_a_secret_leaves_no_prefix_of_it() {
    let secret = "s3cr3t-QWxyzKLMnoPQRstuvWX";
    for max in [6, 8, 10, 12, 20] {
        let mut sb = Sandbox::new().unwrap();
        sb.set_env("DEPLOY_TOKEN", secret);
        let wf = sb
            .write(
                "cap.yaml",
                &format!(
                    "name: cap\nstates:\n  initial: a\n  a:\n    type: step\n    command: printf 'id=%s\\n' \"$DEPLOY_TOKEN\"; printf 'e=%s' \"$DEPLOY_TOKEN\" >&2\n    capture:\n      max_size: {max}\n    on_success: done\n  done:\n    type: terminal\n"
                ),
            )
            .unwrap();
        let out = sb
            .cmd(&["run", wf.to_str().unwrap(), "-f", "json"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        // Any 5 consecutive characters of the secret would be a leak.
        let pieces: Vec<&str> = (0..=secret.len() - 5).map(|i| &secret[i..i + 5]).collect();
        assert_nowhere(&sb, &out, &pieces);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let stored = v["states"]["a"]["output"].as_str().unwrap().to_owned();
        let want = "id=***\n";
        assert_eq!(stored, want[..max.min(want.len())], "max_size {max}");
    }
}

#[test]
fn a_step_killed_half_way_through_printing_a_secret_shows_no_prefix_of_it() {
    let secret = "tok-ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    for args in [&["-o", "streaming"][..], &["-f", "json"]] {
        let mut sb = Sandbox::new().unwrap();
        sb.set_env("MY_API_TOKEN", secret);
        let wf = sb
            .write(
                "half.yaml",
                "name: half\nstates:\n  initial: a\n  a:\n    type: step\n    command: printf 'key=%s' \"$(printf %s \"$MY_API_TOKEN\" | cut -c1-14)\"; sleep 30\n    timeout: 1s\n    on_success: done\n    on_failure: failed\n  done:\n    type: terminal\n  failed:\n    type: terminal\n    status: failure\n",
            )
            .unwrap();
        let mut a = vec!["run", wf.to_str().unwrap()];
        a.extend_from_slice(args);
        let out = sb.cmd(&a).output().unwrap();
        assert_eq!(out.status.code(), Some(3), "{out:?}");
        assert_nowhere(&sb, &out, &["tok-ABCD", "ABCDEFGH", "EFGHIJ"]);
        let st = state_file(&sb);
        assert_eq!(st["states"]["a"]["output"], "key=***", "{st}");
        if args[0] == "-o" {
            assert!(contains(&out.stdout, "[OUT] key=***"), "{out:?}");
        }
    }
}

const BYTES: &str = r#"name: bytes
states:
  initial: a
  a:
    type: step
    command: printf 'A\377B\n'; printf 'E\376\n' >&2
    on_success: b
  b:
    type: step
    command: printf '%s|' '{{.states.a.Output}}'
    on_success: done
  done:
    type: terminal
"#;

#[test]
fn live_output_passes_a_steps_bytes_exactly() {
    let sb = Sandbox::new().unwrap();
    let wf = sb.write("bytes.yaml", BYTES).unwrap();
    let wf = wf.to_str().unwrap();
    let out = sb.cmd(&["run", wf, "-o", "streaming"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stdout.starts_with(b"[OUT] A\xffB\n"), "{out:?}");
    assert!(has(&out.stderr, b"[ERR] E\xfe\n"), "{out:?}");
    let out = sb.cmd(&["run", wf, "-o", "buffered"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stdout.starts_with(b"A\xffB\n"), "{out:?}");
    assert!(has(&out.stderr, b"E\xfe\n"), "{out:?}");
}

#[test]
fn output_that_is_not_utf8_becomes_replacement_characters_where_it_must_be_text() {
    let sb = Sandbox::new().unwrap();
    let wf = sb.write("bytes.yaml", BYTES).unwrap();
    let out = sb
        .cmd(&["run", wf.to_str().unwrap(), "-f", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // JSON (the result, state files): each invalid sequence is U+FFFD.
    assert_eq!(v["states"]["a"]["output"], "A\u{FFFD}B\n");
    assert_eq!(v["states"]["a"]["stderr"], "E\u{FFFD}\n");
    // Templates see the same text: `.Output` renders U+FFFD (as UTF-8) into the command.
    assert_eq!(v["states"]["b"]["output"], "A\u{FFFD}B\n|");
    assert_eq!(state_file(&sb)["states"]["a"]["output"], "A\u{FFFD}B\n");
    // Transcripts: the streamed chunks as text, the same way.
    let mut found = Vec::new();
    files(
        &sb.path().join("data").join("awf").join("transcripts"),
        &mut found,
    );
    let texts: String = found
        .iter()
        .flat_map(|(_, b)| {
            String::from_utf8_lossy(b)
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter_map(|l| serde_json::from_str::<Value>(&l).ok())
        .filter(|e| e["type"] == "step.output" && e["payload"]["name"] == "a")
        .filter_map(|e| e["payload"]["text"].as_str().map(str::to_owned))
        .collect();
    assert!(texts.contains("A\u{FFFD}B\n"), "{texts:?}");
}

// ---- bytes that are not UTF-8 in the environment and the arguments ---------------------------

const SIMPLE: &str = "name: x\nstates:\n  initial: a\n  a:\n    type: step\n    command: printf '%s\\n' \"$MY_TOKEN\" \"$JUNK\"\n    on_success: d\n  d:\n    type: terminal\n";

/// Runs `awf <args>` in `dir` with a non-UTF-8 `JUNK`, a non-UTF-8 secret and `PWD` = `dir`.
fn run_in(sb: &Sandbox, dir: &Path, args: &[&str]) -> Output {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::ffi::OsStringExt;
    let os = |b: &[u8]| std::ffi::OsString::from_vec(b.to_vec());
    sb.cmd(args)
        .current_dir(dir)
        .env("JUNK", os(b"\xff\xfe junk"))
        .env("MY_TOKEN", os(b"sec\xffret-value-42"))
        .env(
            "PWD",
            std::ffi::OsStr::from_bytes(dir.as_os_str().as_bytes()),
        )
        .output()
        .unwrap()
}

#[test]
fn every_subcommand_survives_a_non_utf8_environment_and_working_directory() {
    use std::os::unix::ffi::OsStrExt;
    let sb = Sandbox::new().unwrap();
    // A Latin-1 directory name ("café"), used as the working directory and PWD.
    let latin1 = sb.path().join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
    std::fs::create_dir_all(&latin1).unwrap();
    std::fs::write(latin1.join("x.yaml"), SIMPLE).unwrap();
    for dir in [sb.path().to_path_buf(), latin1] {
        std::fs::write(dir.join("x.yaml"), SIMPLE).unwrap();
        let first = run_in(&sb, &dir, &["run", "x.yaml", "-f", "json"]);
        assert_eq!(first.status.code(), Some(0), "{first:?}");
        let v: Value = serde_json::from_slice(&first.stdout).unwrap();
        let run_id = v["run_id"].as_str().unwrap().to_owned();
        // The secret is masked, the junk value passes through to the child unchanged.
        assert_eq!(
            v["states"]["a"]["output"],
            "sec\u{FFFD}***\n\u{FFFD}\u{FFFD} junk\n"
        );
        let cases: Vec<(Vec<&str>, &[i32])> = vec![
            (vec!["--help"], &[0]),
            (vec!["run", "x.yaml", "-o", "streaming"], &[0]),
            (vec!["validate", "x.yaml"], &[0]),
            (vec!["list"], &[0]),
            (vec!["diagram", "x.yaml"], &[0]),
            (vec!["error"], &[0]),
            (vec!["error", "USER.INPUT.INVALID_FORMAT"], &[0]),
            (vec!["init"], &[0]),
            (vec!["history"], &[0]),
            (vec!["status", &run_id], &[0]),
            (vec!["resume", &run_id], &[1]),
            (vec!["resume", "--list"], &[0]),
            (vec!["config", "show"], &[0]),
        ];
        for (args, codes) in cases {
            let out = run_in(&sb, &dir, &args);
            let code = out.status.code().unwrap_or(-1);
            let all = [out.stdout.as_slice(), out.stderr.as_slice()].concat();
            assert!(
                codes.contains(&code) && !contains(&all, "panicked"),
                "awf {args:?} in {dir:?}: exit {code}\n{}",
                String::from_utf8_lossy(&all)
            );
            assert!(!contains(&all, "ret-value-42"), "awf {args:?}: {out:?}");
            if args == ["resume", run_id.as_str()] {
                assert!(contains(&all, "already completed successfully"), "{out:?}");
            }
            if args == ["run", "x.yaml", "-o", "streaming"] {
                assert!(
                    has(&out.stdout, b"[OUT] sec\xff***\n[OUT] \xff\xfe junk\n"),
                    "{out:?}"
                );
            }
        }
    }
}

#[test]
fn a_non_utf8_input_value_or_workflow_path_is_a_user_error() {
    use std::os::unix::ffi::OsStrExt;
    let sb = Sandbox::new().unwrap();
    sb.write("x.yaml", SIMPLE).unwrap();
    let arg = |b: &'static [u8]| std::ffi::OsStr::from_bytes(b);
    for (extra, shown) in [
        (
            &[
                &b"run"[..],
                b"x.yaml",
                b"--input",
                b"api_key=\xffhunter2-secret",
            ][..],
            "api_key=…",
        ),
        (
            &[b"run", b"x.yaml", b"--input=api_key=hunter2-secret\xff"],
            "--input=…",
        ),
        (&[b"run", b"caf\xe9.yaml"], "caf\u{FFFD}.yaml"),
        (&[b"validate", b"caf\xe9.yaml"], "caf\u{FFFD}.yaml"),
    ] {
        for json in [false, true] {
            let mut c = sb.cmd(&[]);
            c.args(extra.iter().map(|b| arg(b)));
            if json {
                c.args(["-f", "json"]);
            }
            let out = c.output().unwrap();
            assert_eq!(out.status.code(), Some(1), "{out:?}");
            let text = if json { &out.stdout } else { &out.stderr };
            let text = String::from_utf8_lossy(text);
            assert!(text.contains("USER.INPUT.INVALID_FORMAT"), "{text}");
            assert!(text.contains("not valid UTF-8"), "{text}");
            assert!(text.contains(shown), "{text}");
            assert!(!text.contains("hunter2"), "{text}");
            if json {
                let v: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(v["error"]["code"], "USER.INPUT.INVALID_FORMAT");
            }
        }
    }
}

// ---- dry run ---------------------------------------------------------------------------------

const AGENT: &str = r#"name: ag
inputs:
  - name: model
    default: gpt-x
  - name: secret_token
    default: tok-very-secret-1
states:
  initial: a
  a:
    type: agent
    provider: openai_compatible
    prompt: "hi {{.inputs.model}}"
    options:
      model: "{{.inputs.model}}"
      api_key: sk-live-abcdef123456
      base_url: "{{.env.BASE}}/{{.env.MY_API_TOKEN}}"
      extra:
        header: "Bearer {{.inputs.secret_token}}"
        credentials: { user: admin-user, pass: pw-in-clear-99 }
      tags: ["{{.inputs.model}}", "x"]
    on_success: d
  d:
    type: terminal
"#;

#[test]
fn dry_run_renders_and_masks_agent_options() {
    let mut sb = Sandbox::new().unwrap();
    sb.set_env("BASE", "http://llm.local");
    sb.set_env("MY_API_TOKEN", "env-secret-token-77");
    let wf = sb.write("ag.yaml", AGENT).unwrap();
    let wf = wf.to_str().unwrap();
    let leaks = [
        "sk-live-abcdef123456",
        "tok-very-secret-1",
        "env-secret-token-77",
        "pw-in-clear-99",
        "admin-user",
        "{{",
    ];
    let text = sb.cmd(&["run", wf, "--dry-run"]).output().unwrap();
    assert_eq!(text.status.code(), Some(0), "{text:?}");
    let shown = String::from_utf8_lossy(&text.stdout);
    assert!(
        shown.contains(
            "Options: model=gpt-x, api_key=***, base_url=http://llm.local/***, \
             extra={\"header\":\"Bearer ***\",\"credentials\":{\"user\":\"***\",\"pass\":\"***\"}}, \
             tags=[\"gpt-x\",\"x\"]"
        ),
        "{shown}"
    );
    let json = sb
        .cmd(&["run", wf, "--dry-run", "-f", "json"])
        .output()
        .unwrap();
    assert_eq!(json.status.code(), Some(0), "{json:?}");
    let v: Value = serde_json::from_slice(&json.stdout).unwrap();
    let states = v["states"].to_string();
    assert!(states.contains(r#""model":"gpt-x""#), "{states}");
    for out in [&text, &json] {
        for l in leaks {
            assert!(
                !contains(&out.stdout, l),
                "{l}: {}",
                String::from_utf8_lossy(&out.stdout)
            );
            assert!(!contains(&out.stderr, l), "{l}");
        }
    }
}

#[test]
fn a_non_utf8_home_is_ignored_with_a_warning() {
    use std::os::unix::ffi::OsStringExt;
    let sb = Sandbox::new().unwrap();
    sb.write("x.yaml", SIMPLE).unwrap();
    for args in [
        &["run", "x.yaml"][..],
        &["history"],
        &["list"],
        &["config", "show"],
    ] {
        let out = sb
            .cmd(args)
            .env(
                "HOME",
                std::ffi::OsString::from_vec(b"/nowhere/h\xff".to_vec()),
            )
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            err.matches("WARN HOME is not valid UTF-8 and is ignored")
                .count(),
            1,
            "{args:?}: {err}"
        );
    }
}
