//! Leftovers of earlier trials, over the real binary: `awf mcp-serve`'s config read by the
//! shared strict JSON parser (a repeated key named with where it is), the `--step` hint
//! naming every state to `--mock`, optional inputs without a default (as in AWF (Go)), and
//! the terminal display: the times of the spinners in one column, a command's progress line
//! rewritten with `\r` under `-o streaming` and in a failed step's output tail.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use pretty_assertions::assert_eq;
use serde_json::json;

/// `awf mcp-serve --config` read its file with a duplicate-key check of its own, which named
/// a repeated key by line and column only; it now uses the parser `awf serve` and `awf
/// acp-serve` read JSON with, and names where the key is, at any depth.
#[test]
fn mcp_serve_names_a_key_given_twice_with_where_it_is() {
    let sb = Sandbox::new().unwrap();
    let cfg = sb
        .write(
            "proxy.json",
            r#"{"limits": {"max_frame_bytes": 2048, "max_frame_bytes": 4096}}"#,
        )
        .unwrap();
    let r = sb
        .run(&["mcp-serve", "--config", cfg.to_str().unwrap()])
        .unwrap();
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (
            1,
            "",
            format!(
                "[USER.MCP_PROXY.INVALID_CONFIG] mcp-serve config {}: the key \"max_frame_bytes\" \
                 is given twice (at /limits/max_frame_bytes): each key of a JSON object must \
                 appear once\n  Hint: write \"max_frame_bytes\" once, with the value you mean \
                 (JSON readers differ on which one they keep)\n",
                cfg.display()
            )
            .as_str()
        )
    );
    // Bad JSON is still said as such.
    let bad = sb.write("bad.json", r#"{"run_id": "#).unwrap();
    let r = sb
        .run(&["mcp-serve", "--config", bad.to_str().unwrap()])
        .unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.starts_with(&format!(
            "[USER.MCP_PROXY.INVALID_CONFIG] mcp-serve config {}: not valid JSON: EOF while parsing",
            bad.display()
        )),
        "{}",
        r.stderr
    );
}

/// `publish` reads `lint` and `test` in its command and `build` in a pre hook.
const RELEASE: &str = "name: release
states:
  initial: lint
  lint: {type: step, command: echo linted, on_success: test}
  test: {type: step, command: echo tested, on_success: build}
  build: {type: step, command: echo built, on_success: publish}
  publish:
    type: step
    command: 'echo \"{{.states.lint.Output}}|{{.states.test.ExitCode}}|{{.states.lint.Output}}\"'
    hooks:
      pre:
        - log: 'publishing {{.states.build.Output}}'
    on_success: done
  done: {type: terminal}
";

/// Trial: `awf run wf --step publish` hinted the `--mock` of the first state a template
/// failed on only; the command line it gave failed on the next one. The hint now names
/// every state the step's templates read that has no result (its command, its hooks, …),
/// in order, each once, and the command line it gives works.
#[test]
fn a_single_step_hint_names_every_state_to_mock_and_its_command_line_works() {
    let sb = Sandbox::new().unwrap();
    sb.write("release.yaml", RELEASE).unwrap();
    let r = sb
        .run(&["run", "release.yaml", "--step", "publish"])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    // The pre hook fails first, on `build`; the hint names all three.
    let hint = "--step runs this step alone, so states lint, test, build have no result: give \
                each one with --mock 'states.lint.output=…' --mock 'states.test.output=…' \
                --mock 'states.build.output=…'";
    assert!(
        r.stderr.ends_with(&format!("  Hint: {hint}\n")),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("(state \"build\" has not run in this run, so it has no result to read)"),
        "{}",
        r.stderr
    );
    let j = sb
        .run(&["run", "release.yaml", "--step", "publish", "-f", "json"])
        .unwrap();
    assert_eq!(j.json().unwrap()["error"]["hints"], json!([hint]));

    // A state already mocked is left out of the hint.
    let r = sb
        .run(&[
            "run",
            "release.yaml",
            "--step",
            "publish",
            "--mock",
            "states.test.output=ok",
        ])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.ends_with(
            "  Hint: --step runs this step alone, so states lint, build have no result: give \
             each one with --mock 'states.lint.output=…' --mock 'states.build.output=…'\n"
        ),
        "{}",
        r.stderr
    );

    // The hint's command line, as given, runs the step.
    let r = sb
        .run(&[
            "run",
            "release.yaml",
            "--step",
            "publish",
            "--mock",
            "states.lint.output=…",
            "--mock",
            "states.test.output=…",
            "--mock",
            "states.build.output=…",
        ])
        .unwrap();
    assert_eq!((r.code, r.stdout.as_str()), (0, "…|0|…\n"), "{}", r.stderr);
}

const FAN: &str = "name: fan
states:
  initial: a
  a: {type: step, command: echo A, on_success: b}
  b: {type: step, command: echo B, on_success: fan}
  fan:
    type: parallel
    parallel: [x, y]
    strategy: all_succeed
    on_success: done
  x: {type: step, command: 'echo {{.states.a.Output}}'}
  y: {type: step, command: 'echo {{.states.b.Output}}'}
  done: {type: terminal}
";

/// `--step` of a parallel block: its branches' reads are the block's (the failure is the
/// block's, `EXECUTION.PARALLEL.PARTIAL_FAILURE`, and had no hint at all).
#[test]
fn a_single_step_of_a_block_hints_the_mocks_its_branches_need() {
    let sb = Sandbox::new().unwrap();
    sb.write("fan.yaml", FAN).unwrap();
    let r = sb.run(&["run", "fan.yaml", "--step", "fan"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.ends_with(
            "  Hint: --step runs this step alone, so states a, b have no result: give each \
             one with --mock 'states.a.output=…' --mock 'states.b.output=…'\n"
        ),
        "{}",
        r.stderr
    );
    let r = sb
        .run(&[
            "run",
            "fan.yaml",
            "--step",
            "fan",
            "--mock",
            "states.a.output=…",
            "--mock",
            "states.b.output=…",
            "-f",
            "json",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let states = &r.json().unwrap()["states"];
    assert_eq!(
        (&states["x"]["output"], &states["y"]["output"]),
        (&json!("…\n"), &json!("…\n"))
    );
}

const OPTIONAL: &str = "name: opt
inputs:
  - name: tag
    type: string
states:
  initial: a
  a:
    type: step
    command: 'echo \"[{{if .inputs.tag}}{{.inputs.tag}}{{end}}]\"'
    on_success: done
  done: {type: terminal}
";

/// An optional input without a default that a run is not given is undefined, as in AWF
/// (Go) (its templates run with `missingkey=error`): a template that reads it fails the
/// step, `{{if}}` included. `awf validate` says so before the run; a default makes it
/// testable.
#[test]
fn an_optional_input_without_default_fails_its_template_as_in_awf_and_validate_says_so() {
    let sb = Sandbox::new().unwrap();
    let wf = sb.write("opt.yaml", OPTIONAL).unwrap();
    let v = sb.run(&["validate", "opt.yaml"]).unwrap();
    assert_eq!(v.code, 0, "{}", v.stderr);
    assert!(
        v.stderr.contains(&format!(
            "{}:9:22: note [WORKFLOW.VALIDATION.INVALID_REFERENCE] states.a.command: optional \
             input \"tag\" has no default: states.a.command fails (EXECUTION.TEMPLATE.FAILED) \
             in a run not given it\n  Hint: give it a default (`default: \"\"` to test it with \
             `{{{{if .inputs.tag}}}}`) or make it `required: true`\n",
            wf.display()
        )),
        "{}",
        v.stderr
    );
    let r = sb.run(&["run", "opt.yaml"]).unwrap();
    assert_eq!((r.code, r.stdout.as_str()), (3, ""), "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "): interpolate command: undefined variable: inputs.tag (input \"tag\" was not \
             given and has no default; pass --input tag=<value>)\n"
        ),
        "{}",
        r.stderr
    );
    let given = sb
        .run(&["run", "opt.yaml", "--input", "tag=v1", "-o", "buffered"])
        .unwrap();
    assert_eq!((given.code, given.stdout.as_str()), (0, "[v1]\n"));
    let defaulted = sb
        .write(
            "opt.yaml",
            &OPTIONAL.replace("type: string", "type: string\n    default: \"\""),
        )
        .unwrap();
    let d = sb
        .run(&["run", defaulted.to_str().unwrap(), "-o", "buffered"])
        .unwrap();
    assert_eq!((d.code, d.stdout.as_str()), (0, "[]\n"), "{}", d.stderr);
}

const PROGRESS: &str = "name: progress
states:
  initial: dl
  dl:
    type: step
    command: \"printf 'get 10%%'; printf '\\\\rget 100%%\\\\n'; printf 'a long progress line\\\\rshort\\\\n'\"
    on_success: done
  done: {type: terminal}
";

/// A command's progress line rewritten with `\\r`: under `-o streaming` the carriage
/// return took the cursor back over the `[OUT] ` prefix, and what followed overwrote it
/// (`get 100%] get 10%`-like leftovers on a terminal). The prefix is written again after
/// each such return, so the line shows what the command shows; every byte of the output is
/// kept.
#[test]
fn a_progress_line_rewritten_with_a_carriage_return_keeps_its_prefix() {
    let sb = Sandbox::new().unwrap();
    sb.write("progress.yaml", PROGRESS).unwrap();
    let r = sb
        .run(&["run", "progress.yaml", "-o", "streaming"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stdout,
        "[OUT] get 10%\r[OUT] get 100%\n[OUT] a long progress line\r[OUT] short\n"
    );
    // `-o buffered` passes the bytes as the command wrote them.
    let b = sb.run(&["run", "progress.yaml", "-o", "buffered"]).unwrap();
    assert_eq!(b.stdout, "get 10%\rget 100%\na long progress line\rshort\n");
}

/// The output tail under a failed step's `✗` line showed a rewritten line as every state
/// it went through, joined by `\u{d}` (a long progress meter: only its first states, cut);
/// it shows the line as it was last written.
#[test]
fn a_failed_steps_output_tail_shows_a_rewritten_line_as_last_written() {
    let sb = Sandbox::new().unwrap();
    // 401 states of 5 bytes: longer than the start of an unfinished line the tail keeps.
    let meter: String = (0..=400)
        .map(|i| format!("\\\\r{:>3}%%", i / 4))
        .collect::<String>();
    let wf = format!(
        "name: meter\nstates:\n  initial: dl\n  dl:\n    type: step\n    command: \"printf 'get 10%%\\\\rget 100%%\\\\n{meter}\\\\n'; exit 2\"\n    on_success: done\n  done: {{type: terminal}}\n"
    );
    sb.write("meter.yaml", &wf).unwrap();
    let r = sb.run(&["run", "meter.yaml"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains("  ✗ dl (")
            && r.stderr
                .contains("): exit code 2\n    │ get 100%\n    │ 100%\n"),
        "{}",
        r.stderr
    );
}

/// The spinners shown at once under a terminal had their times wherever each step's name
/// ended; the names are padded to the widest shown, so the times make one column. The
/// branches wait for a file the test writes once it has seen the aligned lines (no timing).
#[test]
fn the_times_of_the_spinners_shown_at_once_line_up_under_a_terminal() {
    const WAIT: &str = "while [ ! -e release ]; do sleep 0.05; done";
    let sb = Sandbox::new().unwrap();
    sb.write(
        "align.yaml",
        &format!(
            "name: align\nstates:\n  initial: fan\n  fan:\n    type: parallel\n    parallel: [x, long_branch_name]\n    strategy: all_succeed\n    on_success: done\n  x:\n    type: step\n    command: '{WAIT}'\n  long_branch_name:\n    type: step\n    command: '{WAIT}'\n  done: {{type: terminal}}\n"
        ),
    )
    .unwrap();
    /// Lets the branches end whatever happens to the test.
    struct Release(std::path::PathBuf);
    impl Drop for Release {
        fn drop(&mut self) {
            let _ = std::fs::write(&self.0, "");
        }
    }
    let release = Release(sb.path().join("release"));

    let mut cmd = sb.tty_cmd(&["run", "align.yaml"]);
    cmd.env_remove("NO_COLOR").env("TERM", "xterm");
    let mut p = rexpect::session::spawn_command(cmd, Some(20_000)).unwrap();
    // `  x` and `  fan` padded to the width of `  long_branch_name` (18 columns), then two
    // spaces and the dimmed time: the times start in one column.
    p.exp_regex("x {17}\u{1b}\\[2m[0-9]+\\.[0-9]s").unwrap();
    p.exp_regex("fan {15}\u{1b}\\[2m[0-9]+\\.[0-9]s").unwrap();
    p.exp_regex("long_branch_name  \u{1b}\\[2m[0-9]+\\.[0-9]s")
        .unwrap();
    drop(release);
    p.exp_string("Workflow completed.").unwrap();
    p.exp_eof().unwrap();
}
