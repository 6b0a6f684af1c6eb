//! Leftovers of the breaker's second round of stop 35, fixed in stop 36, over the real
//! binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use awf_tests::http_serve::add_workflows;

/// `awf run --step S --mock states.X.output=…` of an agent step X with `output_format: json`
/// and an answer that is not JSON is refused before anything runs, saying which mock and why
/// (the step under test failed on "undefined variable states.review.JSON.summary", which did
/// not say the mock was at fault); a failed mock of X needs no JSON, and a full run treats
/// the same answer as the step's real one (the step fails on it).
#[test]
fn a_single_step_refuses_a_json_step_mocked_with_text() {
    let mut sb = Sandbox::new().unwrap();
    let example =
        std::fs::read_to_string(awf_tests::workspace_root().join("workflows/code-review.yaml"))
            .unwrap();
    add_workflows(&mut sb, &[("code-review", example.as_str())]);
    let r = sb
        .run(&[
            "run",
            "code-review",
            "--step",
            "approved",
            "--mock",
            "states.review.output=looks good to me",
        ])
        .unwrap();
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.stdout, "");
    assert!(
        r.stderr.contains(
            "--mock states.review.output: step review answers JSON (output_format: json), and the mocked answer is not: invalid JSON"
        ),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("--mock 'states.review.output={\"ok\": true}'"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("undefined variable"), "{}", r.stderr);
    // Its JSON form says USER.INPUT.VALIDATION_FAILED.
    let j = sb
        .run(&[
            "run",
            "code-review",
            "--step",
            "approved",
            "-f",
            "json",
            "--mock",
            "states.review.output=looks good to me",
        ])
        .unwrap();
    assert_eq!(j.code, 1);
    assert!(
        j.stdout.contains("USER.INPUT.VALIDATION_FAILED"),
        "{}",
        j.stdout
    );
    // A failed mock needs no JSON: the step under test runs.
    let failed = sb
        .run(&[
            "run",
            "code-review",
            "--step",
            "approved",
            "--mock",
            "states.review.output=no",
            "--mock",
            "states.review.status=failed",
        ])
        .unwrap();
    assert!(
        !failed.stderr.contains("--mock states.review.output"),
        "{}",
        failed.stderr
    );
    // The full run: the step fails on the answer as on a real one.
    let full = sb
        .run(&[
            "run",
            "code-review",
            "-o",
            "buffered",
            "--mock",
            "states.review.output=looks good to me",
        ])
        .unwrap();
    assert_ne!(full.code, 0, "{}", full.stderr);
    assert!(full.stderr.contains("invalid JSON"), "{}", full.stderr);
}

/// An integer input given over HTTP as a whole JSON number in float form (`-0`, `1e3`,
/// `2.0`) is taken as that integer (`-0` was refused: "cannot convert \"-0.0\" to
/// integer"); `2.5` and `1e20` are still refused with a 422.
#[test]
fn an_integer_input_takes_a_whole_json_number_over_http() {
    let mut sb = Sandbox::new().unwrap();
    let wf = "name: count
inputs:
  - name: n
    type: integer
    required: true
states:
  initial: a
  a:
    type: step
    command: 'echo n={{.inputs.n}}'
    on_success: done
  done:
    type: terminal
";
    add_workflows(&mut sb, &[("count", wf)]);
    let s = awf_tests::http_serve::start(&sb, &[]);
    for (given, want) in [("-0", "n=0\n"), ("1e3", "n=1000\n"), ("2.0", "n=2\n")] {
        let id = awf_tests::http_serve::start_run(
            &s,
            "count",
            &format!(r#"{{"inputs": {{"n": {given}}}}}"#),
        );
        let done = awf_tests::http_serve::wait_status(&s, &id, "completed");
        assert_eq!(done["states"]["a"]["output"], want, "{given}: {done}");
    }
    for bad in ["2.5", "1e20"] {
        let (code, body, _) = awf_tests::http_serve::post(
            &format!("{}/api/workflows/env/count/run", s.base),
            &format!(r#"{{"inputs": {{"n": {bad}}}}}"#),
        );
        assert_eq!(code, 422, "{bad}: {body}");
        assert!(body.contains("to integer"), "{bad}: {body}");
    }
}

/// `GET /api/history` query mistakes get hints that fit: `status` lists every status the
/// API takes (`waiting` and `queued` were taken but not named), and a time whose `+01:00`
/// offset arrived as a space (unencoded `+` in a query string) says to send `%2B`.
#[test]
fn history_query_hints_name_every_status_and_the_encoded_plus() {
    let sb = Sandbox::new().unwrap();
    let s = awf_tests::http_serve::start(&sb, &[]);
    let (code, body, _) =
        awf_tests::http_serve::curl(&[&format!("{}/api/history?status=bogus", s.base)]);
    assert_eq!(code, 422, "{body}");
    assert!(
        body.contains("use running, completed (or success), failed, cancelled, waiting or queued"),
        "{body}"
    );
    let (code, body, _) = awf_tests::http_serve::curl(&[&format!(
        "{}/api/history?since=2026-01-31T21:00:00+01:00",
        s.base
    )]);
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("send the offset as %2B"), "{body}");
    let (code, body, _) = awf_tests::http_serve::curl(&[&format!(
        "{}/api/history?since=2026-01-31T21:00:00%2B01:00",
        s.base
    )]);
    assert_eq!(code, 200, "{body}");
    let (code, body, _) =
        awf_tests::http_serve::curl(&[&format!("{}/api/history?since=yesterday", s.base)]);
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("use RFC 3339"), "{body}");
}

/// `history.db` moved aside while `awf serve` runs (as the hint of a damaged one says to):
/// the server noticed nothing and wrote its later runs into the moved file, so `awf history`
/// and `/api/history` disagreed for good. Now the server's next run opens what is at the
/// path (a new database, filled from the state files), and both list every run; the moved
/// file keeps what it had.
#[test]
fn a_history_db_moved_aside_under_serve_is_not_written_on() {
    let mut sb = Sandbox::new().unwrap();
    let wf = "name: quick
states:
  initial: a
  a:
    type: step
    command: 'echo hi'
    on_success: done
  done:
    type: terminal
";
    add_workflows(&mut sb, &[("quick", wf)]);
    let s = awf_tests::http_serve::start(&sb, &[]);
    let first = awf_tests::http_serve::start_run(&s, "quick", "{}");
    awf_tests::http_serve::wait_status(&s, &first, "completed");
    let data = awf_tests::data(&sb);
    std::fs::rename(data.join("history.db"), data.join("history.db.old")).unwrap();
    let second = awf_tests::http_serve::start_run(&s, "quick", "{}");
    awf_tests::http_serve::wait_status(&s, &second, "completed");
    let cli = sb.run(&["run", "quick"]).unwrap();
    assert_eq!(cli.code, 0, "{}", cli.stderr);

    let ids = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let listed = sb.run(&["history", "-f", "json"]).unwrap().json().unwrap();
    let listed = ids(&listed);
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert!(
        listed.contains(&first) && listed.contains(&second),
        "{listed:?}"
    );
    let (code, body, _) =
        awf_tests::http_serve::curl(&[&format!("{}/api/history?limit=10", s.base)]);
    assert_eq!(code, 200, "{body}");
    let api = awf_tests::http_serve::json_of(&body);
    let api = ids(&api["body"]["entries"]);
    assert_eq!(api.len(), 3, "{api:?}");
    for id in &listed {
        assert!(api.contains(id), "{id} not in {api:?}");
    }
}

/// Every shipped example in `workflows/` validates without a warning (a new user's first
/// `awf validate workflows/hello.yaml` warned `UNQUOTED_SHELL_VALUE` three times, and four
/// examples warned), but for the `usd` budget that needs `prices:`, and `hello` greets a name
/// with a space as one argument.
#[test]
fn the_shipped_examples_validate_without_warnings() {
    let sb = Sandbox::new().unwrap();
    let dir = awf_tests::workspace_root().join("workflows");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let r = sb.run(&["validate", path.to_str().unwrap()]).unwrap();
        assert_eq!(r.code, 0, "{}: {}", path.display(), r.stderr);
        // The one expected warning: the budget example's dollars need `prices:` in the
        // user's .awf/config.yaml, which this sandbox has none of.
        let (stdout, stderr) = if path.ends_with("budget.yaml") {
            let usd = "warning [WORKFLOW.VALIDATION.INVALID_STATE] budget.usd: the workflow's usd budget cannot be enforced: no `prices:` are configured";
            assert_eq!(r.stderr.matches(usd).count(), 1, "{}", r.stderr);
            assert_eq!(r.stderr.matches("warning").count(), 1, "{}", r.stderr);
            (
                r.stdout.replace(" (1 warning)", ""),
                r.stderr.replace(usd, ""),
            )
        } else {
            (r.stdout.clone(), r.stderr.clone())
        };
        assert!(
            !stderr.contains("warning") && !stdout.contains("warning"),
            "{}: {}{}",
            path.display(),
            r.stdout,
            r.stderr
        );
        checked += 1;
    }
    assert!(checked >= 9, "{checked}");
    let hello = dir.join("hello.yaml");
    let r = sb
        .run(&[
            "run",
            hello.to_str().unwrap(),
            "--input",
            "name=Ada Lovelace",
            "-o",
            "buffered",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("Hello, Ada Lovelace!\n"), "{}", r.stdout);
    assert!(
        r.stdout.contains("That is a long name (12 letters).\n"),
        "{}",
        r.stdout
    );
}

/// `index` of a key a map lacks is the zero value, as in Go (a step failed on `index: no
/// entry for key`): an optional environment variable and a state that has not run can be
/// tested, as AWF (Go) workflows do. (Before any state has run, `.states` is empty and
/// `(index .states "x").Output` prints `<no value>`: false in `{{if}}` all the same.)
#[test]
fn index_of_a_missing_key_gives_the_zero_value_in_a_run() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "wf.yaml",
        r#"name: idx
states:
  initial: a
  a:
    type: step
    command: 'echo "[{{index .env "AWF_SURELY_UNSET_VARIABLE"}}] {{if index .env "AWF_SURELY_UNSET_VARIABLE"}}set{{else}}unset{{end}}"'
    on_success: b
    on_failure: skipped
  b:
    type: step
    command: 'echo "[{{(index .states "skipped").Output}}] {{if (index .states "skipped").Output}}ran{{else}}not run{{end}} {{(index .states "a").ExitCode}}"'
    on_success: done
  skipped:
    type: step
    command: 'echo never'
    on_success: done
  done:
    type: terminal
"#,
    )
    .unwrap();
    let r = sb.run(&["run", "wf.yaml", "-o", "buffered"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("[] unset\n"), "{}", r.stdout);
    assert!(r.stdout.contains("[] not run 0\n"), "{}", r.stdout);
}

/// `--input x=1 --input x=2`: the last value is used, as before, and a warning says so once
/// (it was silent).
#[test]
fn an_input_given_twice_is_warned_about() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "wf.yaml",
        "name: twice\ninputs:\n  - name: x\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'echo x={{.inputs.x}}'\n    on_success: done\n  done:\n    type: terminal\n",
    )
    .unwrap();
    let r = sb
        .run(&[
            "run", "wf.yaml", "-o", "buffered", "-i", "x=1", "-i", "x=2", "-i", "x=3",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("x=3\n"), "{}", r.stdout);
    assert_eq!(
        r.stderr
            .matches("--input x is given more than once; the last value is used")
            .count(),
        1,
        "{}",
        r.stderr
    );
    let once = sb.run(&["run", "wf.yaml", "-i", "x=1"]).unwrap();
    assert!(!once.stderr.contains("more than once"), "{}", once.stderr);
}

/// A sub-workflow's run whose awf process was killed: DELETE's 409 and the stream's closing
/// `process_gone` frame name the top-level run's resume (they named the child's, which is
/// refused: a sub-workflow's run is resumed with the run that called it).
#[test]
fn a_killed_sub_workflow_run_points_to_its_top_level_runs_resume() {
    let mut sb = Sandbox::new().unwrap();
    add_workflows(
        &mut sb,
        &[
            (
                "parent",
                "name: parent\nstates:\n  initial: call\n  call:\n    type: call_workflow\n    workflow: napper\n    on_success: done\n  done:\n    type: terminal\n",
            ),
            (
                "napper",
                "name: napper\nstates:\n  initial: nap\n  nap:\n    type: step\n    command: sleep 2718\n    on_success: done\n  done:\n    type: terminal\n",
            ),
        ],
    );
    let mut child = sb
        .cmd(&["run", "parent"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    awf_tests::wait_for("`sleep 2718` to start", || {
        sb.processes().iter().any(|p| p.cmdline == "sleep 2718")
    });
    let sub = awf_tests::wait_for_state(&sb, "the child run to be recorded at nap", |v| {
        v["parent_run_id"].is_string() && v["current_state"] == "nap" && v["owner_pid"].is_u64()
    });
    let root = awf_tests::wait_for_state(&sb, "the parent run", |v| {
        v["parent_run_id"].is_null() && v["workflow_name"] == "parent"
    });
    child.kill().unwrap();
    child.wait().unwrap();
    sb.kill_processes(Some("sleep 2718"));
    let s = awf_tests::http_serve::start(&sb, &[]);
    let (code, body, _) =
        awf_tests::http_serve::curl(&["-X", "DELETE", &format!("{}/api/executions/{sub}", s.base)]);
    assert_eq!(code, 409, "{body}");
    assert!(
        body.contains(&format!("`awf resume {root}`"))
            && !body.contains(&format!("awf resume {sub}")),
        "{body}"
    );
    let (code, text, _) =
        awf_tests::http_serve::curl(&["-N", &format!("{}/api/executions/{sub}/events", s.base)]);
    assert_eq!(code, 200, "{text}");
    assert!(text.contains("event: process_gone"), "{text}");
    assert!(
        text.contains(&format!(
            "POST /api/executions/{root}/resume (its top-level run)"
        )),
        "{text}"
    );
}

/// A finished run whose transcript stops before its end (cut, or garbage): its event stream
/// replays what is there, then ends with a `no_events` frame saying how the run ended (it
/// just stopped: a client, the page, waited on a run shown `running`).
#[test]
fn a_cut_transcript_ends_its_stream_with_a_frame_saying_so() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "wf.yaml",
        "name: cut\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'echo one'\n    on_success: b\n  b:\n    type: step\n    command: 'echo two'\n    on_success: done\n  done:\n    type: terminal\n",
    )
    .unwrap();
    let r = sb.run(&["run", "wf.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let transcripts = awf_tests::data(&sb).join("transcripts");
    let file = std::fs::read_dir(&transcripts)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .unwrap();
    let id = file.file_stem().unwrap().to_str().unwrap().to_owned();
    let text = std::fs::read_to_string(&file).unwrap();
    let kept: String = text.lines().take(2).map(|l| format!("{l}\n")).collect();
    std::fs::write(&file, kept).unwrap();
    let s = awf_tests::http_serve::start(&sb, &[]);
    let events = |s: &awf_tests::http_serve::Server| {
        let (code, text, _) = awf_tests::http_serve::curl(&[
            "-N",
            "--max-time",
            "20",
            &format!("{}/api/executions/{id}/events", s.base),
        ]);
        assert_eq!(code, 200, "{text}");
        text
    };
    let text = events(&s);
    assert!(text.contains("event: run_started"), "{text}");
    assert!(!text.contains("event: run_finished"), "{text}");
    let last = text
        .split("\n\n")
        .map(str::trim)
        .filter(|f| f.contains("event: "))
        .last()
        .unwrap()
        .to_owned();
    assert!(last.contains("event: no_events"), "{text}");
    let data = awf_tests::http_serve::json_of(
        last.lines().find_map(|l| l.strip_prefix("data: ")).unwrap(),
    );
    assert_eq!(data["status"], "completed", "{data}");
    assert!(
        data["message"]
            .as_str()
            .unwrap()
            .contains("stop before its end"),
        "{data}"
    );
    // Garbage instead: the same closing frame.
    std::fs::write(&file, "garbage\n").unwrap();
    let text = events(&s);
    assert!(text.contains("event: no_events"), "{text}");
}
