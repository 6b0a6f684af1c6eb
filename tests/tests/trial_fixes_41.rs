//! Fixes of what a new user's trial found in `awf run`'s terminal output, hints and
//! messages (a project after `awf init`, shell steps only): a failed step's output could not
//! be seen in the default mode, and its exit code was dropped when it had stderr; `timeout`
//! beside `retry` ran one attempt without a word; `--no-color` kept the spinners; input-rule
//! hints named `<workflow>`; a failing hook did not say which; a failure terminal without
//! `message:` dropped its cause; an unknown config key had no "did you mean"; `awf cancel`
//! of a local run gave no way forward; the resume hint after a failure terminal reached by
//! the routes led to the same end. Over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::BufRead;
use std::io::BufReader;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

use awf_tests::Sandbox;
use awf_tests::mcp::RawServer;
use pretty_assertions::assert_eq;
use serde_json::json;

/// The lines of `text` from the one starting with `start` on, `n` of them.
fn lines_from(text: &str, start: &str, n: usize) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no line starting {start:?} in:\n{text}"));
    lines[at..(at + n).min(lines.len())]
        .iter()
        .map(|l| (*l).to_owned())
        .collect()
}

/// `✗ a (12ms): why` without its duration: `✗ a: why`.
fn without_duration(line: &str) -> String {
    match (line.find(" ("), line.find("): ")) {
        (Some(a), Some(b)) if a < b => format!("{}{}", &line[..a], &line[b + 1..]),
        _ => line.to_owned(),
    }
}

/// The run id of a `Workflow started: <name> (<id>)` line in `stderr`.
fn run_id(stderr: &str) -> String {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("Workflow started: "))
        .unwrap_or_else(|| panic!("no start line in:\n{stderr}"));
    line.rsplit('(')
        .next()
        .unwrap()
        .trim_end_matches(')')
        .to_owned()
}

/// Finding 1: in the default output mode a failed step's output is shown under its line
/// (stdout, then stderr, secrets masked), not with `-q` nor when streamed; `awf status`
/// shows it under the failed state.
#[test]
fn a_failed_steps_last_output_lines_show_under_its_line_and_in_status() {
    let mut sb = Sandbox::new().unwrap();
    sb.set_env("API_TOKEN", "tok-0123456789");
    sb.write(
        "wf/f.yaml",
        "name: f\nstates:\n  initial: a\n  a: {type: step, command: 'echo doing; echo \"key $API_TOKEN\"; echo broke >&2; exit 4', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "wf/f.yaml"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let mut got = lines_from(&r.stderr, "  ✗ a (", 5);
    got[0] = without_duration(&got[0]);
    assert_eq!(
        got,
        [
            "  ✗ a: exit code 4: broke",
            "    │ doing",
            "    │ key ***",
            "    │ broke",
            "Workflow failed: [EXECUTION.COMMAND.FAILED] in step 'a' (above)",
        ]
    );
    assert!(!r.stderr.contains("tok-0123456789"), "{}", r.stderr);
    let id = run_id(&r.stderr);
    let st = sb.run(&["status", &id]).unwrap();
    assert_eq!(st.code, 0, "{}", st.stderr);
    let got = lines_from(&st.stdout, "  a ", 4);
    assert_eq!(got[1..], ["    │ doing", "    │ key ***", "    │ broke"]);
    assert!(got[0].contains("failed    exit 4"), "{got:?}");

    // -q: the failure line only; -o streaming showed the output already.
    let q = sb.run(&["run", "-q", "wf/f.yaml"]).unwrap();
    assert!(!q.stderr.contains('│'), "{}", q.stderr);
    let s = sb.run(&["run", "-o", "streaming", "wf/f.yaml"]).unwrap();
    assert!(!s.stderr.contains('│'), "{}", s.stderr);
    assert!(s.stdout.contains("[OUT] doing"), "{}", s.stdout);
}

/// Finding 1: a long output shows its last 15 lines and says how many came before.
#[test]
fn a_long_failed_output_shows_its_last_lines_and_how_many_came_before() {
    let sb = Sandbox::new().unwrap();
    let r = sb
        .run_workflow(
            "long.yaml",
            "name: long\nstates:\n  initial: a\n  a: {type: step, command: 'seq 1 40; exit 1', on_success: done}\n  done: {type: terminal}\n",
            &[],
        )
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let got = lines_from(&r.stderr, "  ✗ a (", 17);
    let mut want = vec!["    │ … 25 earlier lines".to_owned()];
    want.extend((26..=40).map(|i| format!("    │ {i}")));
    assert_eq!(got[1..], want[..]);
}

/// Finding 2: a step with stderr keeps its exit code on its line.
#[test]
fn a_failed_steps_line_says_its_exit_code_beside_its_stderr() {
    let sb = Sandbox::new().unwrap();
    let r = sb
        .run_workflow(
            "flaky.yaml",
            "name: flaky\nstates:\n  initial: flaky\n  flaky: {type: step, command: 'echo not yet >&2; exit 3', on_success: done}\n  done: {type: terminal}\n",
            &[],
        )
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let got = lines_from(&r.stderr, "  ✗ flaky (", 2);
    assert_eq!(
        [without_duration(&got[0]), got[1].clone()],
        [
            "  ✗ flaky: exit code 3: not yet".to_owned(),
            "Workflow failed: [EXECUTION.COMMAND.FAILED] in step 'flaky' (above)".to_owned()
        ]
    );
}

const SLOW: &str = "name: slow\nstates:\n  initial: slow\n  slow: {type: step, command: 'echo start; sleep 5', timeout: 1s, retry: {max_attempts: 3, initial_delay: 100ms}, on_success: done, on_failure: timed_out}\n  done: {type: terminal}\n  timed_out: {type: terminal, status: failure}\n";

/// Finding 3 (and 7): the timeout spans every attempt (AWF (Go), kept), which the failure
/// says, as does the failure terminal that it routed to. `awf validate` warns only when the
/// waits between attempts use the timeout up (trial 59: it warned whatever the timeout);
/// here they take 200 ms of the 1 s, so it does not (trial_fixes_59 has the warning).
#[test]
fn a_timeout_over_retries_says_it_spans_every_attempt_and_validate_warns() {
    let sb = Sandbox::new().unwrap();
    sb.write("slow.yaml", SLOW).unwrap();
    let r = sb.run(&["run", "slow.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    // The run does not warn on every start: its failure says it.
    assert_eq!(r.stderr, "");
    let doc = r.json().unwrap();
    let why = "timed out after 1s (the step's timeout spans all 3 attempts; 1 ran)";
    assert_eq!(
        doc["states"]["slow"]["error"],
        json!(format!("step slow: {why}"))
    );
    assert_eq!(doc["states"]["slow"]["attempts"], json!(1));
    assert_eq!(
        doc["error"]["message"],
        json!(format!(
            "workflow reached failure terminal 'timed_out' after step slow failed: {why}"
        ))
    );
    let v = sb.run(&["validate", "slow.yaml"]).unwrap();
    assert_eq!((v.code, v.stderr.as_str()), (0, ""), "{}", v.stderr);
    assert_eq!(v.stdout, "Workflow 'slow.yaml' is valid\n");
}

/// Finding 4: on a terminal `--no-color` gives the plain lines NO_COLOR gives: no spinner
/// frames, no escape codes.
#[test]
fn no_color_turns_the_spinners_off_as_no_color_does() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "nap.yaml",
        "name: nap\nstates:\n  initial: a\n  a: {type: step, command: 'sleep 0.5', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let mut cmd = sb.tty_cmd(&["run", "--no-color", "nap.yaml"]);
    cmd.env_remove("NO_COLOR").env("TERM", "xterm");
    let mut p = rexpect::session::spawn_command(cmd, Some(20_000)).unwrap();
    // rexpect hands back each byte as one char.
    let bytes: Vec<u8> = p
        .exp_string("Workflow completed.")
        .unwrap()
        .chars()
        .map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?'))
        .collect();
    p.exp_eof().unwrap();
    let shown = String::from_utf8_lossy(&bytes);
    assert!(!shown.contains('\u{1b}'), "{shown:?}");
    assert!(!shown.contains('⠋'), "{shown:?}");
    assert!(shown.contains("  → a\r\n  ✓ a ("), "{shown:?}");
}

const INP: &str = "name: inp\ninputs:\n  - name: count\n    type: integer\n    required: true\n    validation: {min: 1, max: 5}\nstates:\n  initial: a\n  a: {type: step, command: 'echo {{.inputs.count}}', on_success: done}\n  done: {type: terminal}\n";

/// Finding 5: a refused input's hint names the workflow as it was run, on the command line
/// and over MCP (the tool as called).
#[test]
fn a_refused_inputs_hint_names_the_workflow_that_was_run() {
    let sb = Sandbox::new().unwrap();
    sb.write(".awf/workflows/inp.yaml", INP).unwrap();
    sb.write("my flows/inp.yaml", INP).unwrap();
    let r = sb.run(&["run", "inp", "--input", "count=9"]).unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(
        r.stderr,
        "[USER.INPUT.VALIDATION_FAILED] input validation failed: inputs.count: value 9 exceeds \
         maximum 5\n  Hint: `awf run inp --help` lists each input with its type and rules\n"
    );
    let r = sb
        .run(&[
            "run",
            "my flows/inp.yaml",
            "--input",
            "count=abc",
            "-f",
            "json",
        ])
        .unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(
        r.json().unwrap()["error"]["hints"],
        json!(["`awf run 'my flows/inp.yaml' --help` lists each input with its type and rules"])
    );

    let mut server = RawServer::spawn(sb.cmd(&["mcp-serve", "--workflows"]));
    server.initialize("2025-06-18");
    let answer = server.call(1, "inp", &json!({"count": 9}));
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let (code, _, stderr) = server.close();
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(answer["result"]["isError"], json!(true), "{answer}");
    assert!(
        text.ends_with(
            "Hint: the `inp` tool's inputSchema (tools/list) lists each input of workflow inp \
             with its type and rules"
        ),
        "{answer}"
    );
    assert!(!text.contains("<workflow>"), "{answer}");
}

/// Finding 6: a failing hook names its step (for step hooks), its command (cut) and its
/// stderr's first line.
#[test]
fn a_failing_hook_names_its_step_its_command_and_its_stderr() {
    let sb = Sandbox::new().unwrap();
    let r = sb
        .run_workflow(
            "hk.yaml",
            "name: hk\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'true'\n    hooks:\n      pre:\n        - command: \"echo 'no lint config' >&2; echo more >&2; exit 1\"\n      post:\n        - command: 'exit 2'\n    on_success: done\n  done: {type: terminal}\nhooks:\n  workflow_end:\n    - command: 'echo end broke >&2; false'\n",
            &[],
        )
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let warns: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.trim_start().starts_with("WARN"))
        .collect();
    assert_eq!(
        warns,
        [
            "  WARN step a: pre hook failed: `echo 'no lint config' >&2; echo more >&2…` exited with code 1: no lint config …",
            "  WARN step a: post hook failed: `exit 2` exited with code 2",
            "  WARN workflow_end hook failed: `echo end broke >&2; false` exited with code 1: end broke",
        ]
    );
    let r = sb
        .run_workflow(
            "start.yaml",
            "name: start\nhooks:\n  workflow_start:\n    - command: 'echo missing token >&2; exit 1'\nstates:\n  initial: a\n  a: {type: step, command: 'true', on_success: done}\n  done: {type: terminal}\n",
            &["-f", "json"],
        )
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert_eq!(
        r.json().unwrap()["error"]["message"],
        json!(
            "workflow_start hook failed: `echo missing token >&2; exit 1` exited with code 1: missing token"
        )
    );
}

/// Finding 7: a failure terminal without `message:` says the failure that routed there.
#[test]
fn a_failure_terminal_without_a_message_says_what_routed_there() {
    let sb = Sandbox::new().unwrap();
    let r = sb
        .run_workflow(
            "ft.yaml",
            "name: ft\nstates:\n  initial: par\n  par:\n    type: parallel\n    parallel: [broken]\n    strategy: all_succeed\n    on_success: done\n    on_failure: failed\n  broken: {type: step, command: 'echo bad >&2; exit 2'}\n  done: {type: terminal}\n  failed: {type: terminal, status: failure}\n",
            &[],
        )
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "Workflow failed: [EXECUTION.WORKFLOW.FAILURE_TERMINAL] workflow reached failure \
             terminal 'failed' after step par failed: branch broken failed: step broken: bad\n"
        ),
        "{}",
        r.stderr
    );
}

/// Finding 8: an unknown key of `.awf/config.yaml` gets the closest known one.
#[test]
fn an_unknown_config_key_is_told_the_closest_known_one() {
    let sb = Sandbox::new().unwrap();
    sb.write(".awf/config.yaml", "input:\n  x: 1\n").unwrap();
    let r = sb
        .run_workflow(
            "ok.yaml",
            "name: ok\nstates:\n  initial: a\n  a: {type: step, command: 'true', on_success: done}\n  done: {type: terminal}\n",
            &[],
        )
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stderr.lines().next(),
        Some("WARN input: unknown config key \"input\" (did you mean 'inputs'?)")
    );
    let c = sb.run(&["config", "show"]).unwrap();
    assert!(
        c.stderr
            .contains("WARN input: unknown config key \"input\" (did you mean 'inputs'?)"),
        "{}",
        c.stderr
    );
}

/// Finding 9: `awf cancel` of a run a local `awf run` runs names that process and its pid;
/// once it ended, says so.
#[test]
fn cancel_without_a_store_names_the_local_process_running_the_run() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "long.yaml",
        "name: long\nstates:\n  initial: a\n  a: {type: step, command: 'sleep 30', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let mut child = sb
        .cmd(&["run", "long.yaml"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    let id = run_id(&first);
    // The run's record names its process once the step is under way.
    let deadline = Instant::now() + Duration::from_secs(20);
    let refused = loop {
        let r = sb.run(&["cancel", &id]).unwrap();
        if r.stderr.contains("kill -INT") || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert_eq!(
        refused.stderr,
        format!(
            "[USER.FACADE.INPUT_REJECTED] run {id} is still running in another awf process (awf \
             process {pid}); it can only be cancelled there\n  Hint: stop it where it runs: \
             Ctrl-C in the terminal of its `awf run` (or `kill -INT {pid}`); the run is \
             recorded `cancelled`\n"
        )
    );
    assert!(
        std::process::Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let r = sb.run(&["cancel", &id[..8]]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stdout,
        format!("run {id} has ended already (cancelled)\n")
    );
}

const GAVE_UP: &str = "name: lp\nstates:\n  initial: poll\n  poll:\n    type: while\n    while: 'true'\n    max_iterations: 2\n    body: [check]\n    on_complete: verify\n  check: {type: step, command: 'echo not ready'}\n  verify:\n    type: step\n    command: 'echo checking'\n    transitions:\n      - when: \"trim(states.check.Output) == 'ready'\"\n        goto: done\n      - goto: gave_up\n  done: {type: terminal}\n  gave_up: {type: terminal, status: failure}\n";

/// Finding 10: a failure terminal the routes reached (no step failed) gets a resume hint
/// that runs something again (the loop), and following it does.
#[test]
fn the_resume_hint_after_a_routed_failure_terminal_runs_the_loop_again() {
    let sb = Sandbox::new().unwrap();
    sb.write("lp.yaml", GAVE_UP).unwrap();
    let r = sb.run(&["run", "lp.yaml"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let id = run_id(&r.stderr);
    let hint = format!(
        "  Hint: no step failed: its routes led to failure terminal 'gave_up', where a resume \
         would end again; run again from the loop `poll` with `awf resume {id} --from poll`"
    );
    assert_eq!(r.stderr.lines().last(), Some(hint.as_str()), "{}", r.stderr);
    let again = sb.run(&["resume", &id, "--from", "poll"]).unwrap();
    assert_eq!(again.code, 3, "{}", again.stderr);
    assert!(
        again
            .stderr
            .contains(&format!("Workflow resumed: lp ({id}) from step poll")),
        "{}",
        again.stderr
    );
    assert_eq!(again.stderr.lines().last(), Some(hint.as_str()));

    // Without a loop: the state whose routes led there.
    let r = sb
        .run_workflow(
            "v.yaml",
            "name: v\nstates:\n  initial: verify\n  verify:\n    type: step\n    command: 'echo down'\n    transitions:\n      - when: \"trim(states.verify.Output) == 'up'\"\n        goto: done\n      - goto: gave_up\n  done: {type: terminal}\n  gave_up: {type: terminal, status: failure}\n",
            &[],
        )
        .unwrap();
    let id = run_id(&r.stderr);
    assert_eq!(
        r.stderr.lines().last(),
        Some(
            format!(
                "  Hint: no step failed: its routes led to failure terminal 'gave_up', where a \
                 resume would end again; run again from state `verify` with `awf resume {id} \
                 --from verify`"
            )
            .as_str()
        ),
        "{}",
        r.stderr
    );
}
