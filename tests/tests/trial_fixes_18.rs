//! Fixes from stop 34's trial leftovers, second batch.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use awf_tests::data;
use awf_tests::read_state_file;
use serde_json::json;

/// The run id `awf run -f json` printed.
fn run_id_of(r: &awf_tests::Run) -> String {
    r.json().unwrap()["run_id"].as_str().unwrap().to_owned()
}

/// A workflow whose step fails until the file `ok` exists in the working directory, and
/// then unless `api_token` has its default value.
fn gated(inputs: &str) -> String {
    format!(
        "name: gated\ninputs:\n{inputs}states:\n  initial: a\n  a:\n    type: step\n    \
         command: 'test -f ok && test \"{{{{.inputs.api_token}}}}\" = the-default-token'\n    \
         on_success: done\n  done: {{type: terminal}}\n"
    )
}

/// A secret input with a default is not demanded again by `awf resume` (its default applies),
/// neither by the failed run's resume hint nor by `awf resume`'s own error: only a secret
/// input without a default must be given again (README "Runs are recorded: resume"; user: the
/// run's hint asked for `--input api_token=<value>` though `api_token` has a default).
#[test]
fn a_secret_input_with_a_default_is_not_asked_for_again_on_resume() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "two.yaml",
        &gated(
            "  - {name: api_token, type: string, default: the-default-token}\n  \
             - {name: db_password, type: string, required: true}\n",
        ),
    )
    .unwrap();
    let r = sb
        .run(&[
            "run",
            "two.yaml",
            "-i",
            "api_token=given-token-1",
            "-i",
            "db_password=given-pass-1",
        ])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let hint = r
        .stderr
        .lines()
        .find(|l| l.contains("Hint:"))
        .unwrap_or_else(|| panic!("no hint: {}", r.stderr));
    let id = hint
        .split("awf resume ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap()
        .trim_end_matches('`')
        .to_owned();
    assert_eq!(
        hint.trim(),
        format!("Hint: continue it with `awf resume {id} --input db_password=<value>`"),
        "{}",
        r.stderr
    );

    // `awf resume` without the secret: only the one without a default is demanded.
    let again = sb.run(&["resume", &id]).unwrap();
    assert_eq!(again.code, 1, "{}", again.stderr);
    assert!(
        again.stderr.contains(
            "secret inputs were not stored with the run and must be given again: db_password\n"
        ),
        "{}",
        again.stderr
    );
    assert!(
        again.stderr.contains(&format!(
            "Hint: awf resume {id} --input db_password=<value>"
        )),
        "{}",
        again.stderr
    );

    // Given it, the resume runs, the default standing in for the other.
    sb.write("ok", "").unwrap();
    let done = sb
        .run(&["resume", &id, "-i", "db_password=pass-2"])
        .unwrap();
    assert_eq!(done.code, 0, "{}", done.stderr);

    // Every secret input has a default: the hint names no input at all, and a plain
    // `awf resume` runs.
    std::fs::remove_file(sb.path().join("ok")).unwrap();
    sb.write(
        "one.yaml",
        &gated("  - {name: api_token, type: string, default: the-default-token}\n"),
    )
    .unwrap();
    let r = sb
        .run(&["run", "one.yaml", "-i", "api_token=given-token-1"])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(!r.stderr.contains("--input"), "{}", r.stderr);
    let hint = r.stderr.lines().find(|l| l.contains("Hint:")).unwrap();
    let id = hint
        .split("awf resume ")
        .nth(1)
        .unwrap()
        .trim_end_matches('`')
        .to_owned();
    sb.write("ok", "").unwrap();
    let done = sb.run(&["resume", &id]).unwrap();
    assert_eq!(done.code, 0, "{}", done.stderr);
}

/// `awf resume <child run id>` (a `call_workflow` child, named in the parent's `child_runs`)
/// is refused with `USER.INPUT.VALIDATION_FAILED` and a hint naming the run to resume (the
/// top-level one), instead of running the child detached from its parent (user: it ran the
/// child on its own, the parent left failed).
#[test]
fn resuming_a_sub_workflow_run_is_refused_with_its_parent_named() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "leaf.yaml",
        "name: leaf\nstates:\n  initial: c\n  c: {type: step, command: 'test -f ok', \
         on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    sb.write(
        "mid.yaml",
        "name: mid\nstates:\n  initial: call\n  call: {type: call_workflow, workflow: \
         leaf.yaml, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    sb.write(
        "top.yaml",
        "name: top\nstates:\n  initial: call\n  call: {type: call_workflow, workflow: \
         mid.yaml, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "top.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let top = run_id_of(&r);
    let state = |id: &str| read_state_file(&data(&sb).join(format!("states/{id}.json"))).unwrap();
    let mid = state(&top)["child_runs"]["call"]
        .as_str()
        .unwrap()
        .to_owned();
    let leaf = state(&mid)["child_runs"]["call"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = state(&leaf);

    for child in [&mid, &leaf] {
        let again = sb.run(&["resume", child]).unwrap();
        assert_eq!(again.code, 1, "{}", again.stderr);
        assert_eq!(
            again.stderr,
            format!(
                "[USER.INPUT.VALIDATION_FAILED] run {child} is a sub-workflow run (a \
                 call_workflow step of run {}): it is resumed with the run that called it\n  \
                 Hint: awf resume {top}\n",
                if *child == mid { &top } else { &mid }
            )
        );
        // Nothing ran.
        assert!(
            !again.stderr.contains("Workflow resumed"),
            "{}",
            again.stderr
        );
    }
    assert_eq!(state(&leaf)["updated_at"], before["updated_at"]);
    assert_eq!(state(&leaf)["status"], json!("failure"));

    // `-f json`: the same error, as the result object.
    let again = sb.run(&["resume", &leaf, "-f", "json"]).unwrap();
    assert_eq!(again.code, 1, "{}", again.stderr);
    let doc = again.json().unwrap();
    assert_eq!(doc["error"]["code"], json!("USER.INPUT.VALIDATION_FAILED"));
    assert_eq!(doc["error"]["hints"], json!([format!("awf resume {top}")]));

    // The parent resumes, and with it the children.
    sb.write("ok", "").unwrap();
    let done = sb.run(&["resume", &top]).unwrap();
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_eq!(state(&leaf)["status"], json!("success"));
}

/// `-o buffered` labels the output blocks of a parallel block's branches with the branch's
/// name, each line prefixed `[b1] ` on its stream as `-o streaming` prefixes them (`[OUT] [b1]
/// `), so interleaved branches can be told apart; a step outside a parallel block prints its
/// output as it is (user: two branches' blocks came out unlabelled).
#[test]
fn buffered_output_of_parallel_branches_names_the_branch() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "par.yaml",
        "name: par\nstates:\n  initial: first\n  first: {type: step, command: 'echo top', \
         on_success: both}\n  both:\n    type: parallel\n    parallel: [b1, b2]\n    \
         strategy: all_succeed\n    on_success: done\n  b1: {type: step, command: 'printf \
         \"one\\nline two\"; echo oops >&2'}\n  b2: {type: step, command: 'sleep 0.3; echo \
         two'}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "par.yaml", "-o", "buffered"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "top\n[b1] one\n[b1] line two\n[b2] two\n");
    assert!(r.stderr.contains("\n[b1] oops\n"), "{}", r.stderr);

    // `-f json` is unchanged: the branches' output as they wrote it.
    let r = sb
        .run(&["run", "par.yaml", "-o", "buffered", "-f", "json"])
        .unwrap();
    let doc = r.json().unwrap();
    assert_eq!(doc["states"]["b1"]["output"], json!("one\nline two"));

    // `awf resume -o buffered` does not print the earlier attempt's blocks again (they were
    // printed when it ran), as `-o streaming` does not.
    sb.write(
        "again.yaml",
        "name: again\nstates:\n  initial: a\n  a: {type: step, command: 'echo first', \
         on_success: b}\n  b: {type: step, command: 'echo \"b ran\"; test -f ok', on_success: \
         done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb
        .run(&["run", "again.yaml", "-o", "buffered", "-f", "quiet"])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let id = r.stdout.lines().last().unwrap().to_owned();
    assert_eq!(r.stdout, format!("first\nb ran\n{id}\n"));
    sb.write("ok", "").unwrap();
    let r = sb.run(&["resume", &id, "-o", "buffered"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "b ran\n", "{}", r.stderr);
}

const VERBOSE: &str = "name: v\ninputs:\n  - {name: api_token, type: string}\nstates:\n  \
                       initial: a\n  a:\n    type: step\n    command: 'echo \"t={{.inputs.api_token}}\"'\n    \
                       transitions:\n      - when: 'states.a.ExitCode == 0'\n        goto: r\n      \
                       - goto: done\n  r:\n    type: step\n    command: 'echo r; exit 2'\n    \
                       retry: {max_attempts: 2, initial_delay: 10ms}\n    on_success: done\n    \
                       on_failure: done\n  done: {type: terminal}\n";

/// `--verbose` and `--log-level debug` show on stderr, per state, what awf decided: the
/// command as it runs (secrets masked), how it ended and in how long, the transition taken and
/// why, the retries, and where the run is recorded (user: both flags added nothing to a plain
/// run). Stdout and the `-f json` document stay as they are, and a plain run shows none of it.
#[test]
fn verbose_and_debug_log_what_awf_decided_on_stderr_only() {
    let sb = Sandbox::new().unwrap();
    sb.write("v.yaml", VERBOSE).unwrap();
    let secret = "the-secret-token-value";
    let token = format!("api_token={secret}");
    let plain = sb
        .run(&["run", "v.yaml", "-i", &token, "-o", "buffered"])
        .unwrap();
    assert_eq!(plain.code, 0, "{}", plain.stderr);
    assert!(!plain.stderr.contains("DEBUG"), "{}", plain.stderr);

    for flag in [&["--verbose"][..], &["--log-level", "debug"][..]] {
        let mut args = vec!["run", "v.yaml", "-i", &token, "-o", "buffered"];
        args.extend_from_slice(flag);
        let r = sb.run(&args).unwrap();
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert_eq!(r.stdout, plain.stdout, "{flag:?}");
        let debug: Vec<&str> = r
            .stderr
            .lines()
            .filter_map(|l| l.split_once(" DEBUG awf::run: ").map(|(_, m)| m))
            .collect();
        let id = debug
            .iter()
            .find_map(|l| l.strip_prefix("run ")?.split(' ').next())
            .unwrap_or_else(|| panic!("{flag:?}: {}", r.stderr))
            .to_owned();
        let states = data(&sb).join("states").join(format!("{id}.json"));
        for want in [
            format!("run {id} started: workflow v ("),
            "step a (command) started: `echo \"t=***\"`".to_owned(),
            "step a: completed in ".to_owned(),
            "step a: → r (succeeded, transitions[0]: when `states.a.ExitCode == 0` is true)"
                .to_owned(),
            "step r: attempt 1 failed (exit code 2): retrying in 10ms (attempt 2 of 2)".to_owned(),
            "step r: attempt 2 failed (exit code 2): not retried (that was the last of max_attempts 2)"
                .to_owned(),
            "step r: → done (failed: on_failure)".to_owned(),
            format!("run {id} is recorded in {}", states.display()),
            format!("run {id} finished: success, exit code 0, terminal done, in "),
        ] {
            assert!(
                debug.iter().any(|l| l.starts_with(&want)),
                "{flag:?}: no line starting {want:?} in\n{}",
                r.stderr
            );
        }
        assert!(!r.stderr.contains(secret), "{}", r.stderr);
    }

    // `-f json`: the same single document on stdout; the diagnostics on stderr when asked
    // for by level (`--verbose` alone shows nothing of the run there, as before).
    let r = sb
        .run(&["run", "v.yaml", "-i", &token, "-f", "json", "--verbose"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json().unwrap()["status"], json!("success"));
    assert!(!r.stderr.contains("DEBUG"), "{}", r.stderr);
    let r = sb
        .run(&[
            "run",
            "v.yaml",
            "-i",
            &token,
            "-f",
            "json",
            "--log-level",
            "debug",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(doc["status"], json!("success"));
    assert_eq!(doc["states"]["r"]["attempts"], json!(2));
    assert!(
        r.stderr
            .contains("DEBUG awf::run: step r: → done (failed: on_failure)"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains(secret) && !r.stdout.contains(secret));
    let r = sb
        .run(&["run", "v.yaml", "-i", &token, "-f", "json"])
        .unwrap();
    assert!(!r.stderr.contains("DEBUG"), "{}", r.stderr);
}
