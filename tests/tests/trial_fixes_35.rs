//! Fixes of a new user's trial of the release build, over the real binary: `--from` a loop's
//! body state refused as a parallel branch is, `awf resume --list` without the runs live in
//! another awf process, hints that carry `--storage DIR`, and undeclared resume inputs warned
//! about by the CLI and refused over HTTP for every run.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Stdio;

use awf_tests::Sandbox;
use awf_tests::http_serve;
use awf_tests::wait_for_state;

const LOOPFAIL: &str = r#"name: loopfail
states:
  initial: pre
  pre: { type: step, command: "echo pre", on_success: L }
  L: { type: for_each, items: '["a","b","c"]', body: [work], on_complete: done, on_failure: bad }
  work: { type: step, command: 'test "{{.loop.Item}}" != b -o -f ./lfok' }
  done: { type: terminal }
  bad: { type: terminal, status: failure, message: "loop failed" }
"#;

/// A workflow that fails at `b` until the file `ok` exists.
const FAIL: &str = "name: fail\nstates:\n  initial: a\n  a: {type: step, command: 'echo a', on_success: b}\n  b: {type: step, command: 'test -f ok', on_success: done}\n  done: {type: terminal}\n";

/// `awf serve` of `sb` started in its subdirectory `dir` (created).
fn serve_in(sb: &Sandbox, dir: &str) -> http_serve::Server {
    use std::io::BufRead;
    let cwd = sb.path().join(dir);
    std::fs::create_dir_all(&cwd).unwrap();
    let mut child = sb
        .cmd(&["serve", "--addr", "127.0.0.1:0"])
        .current_dir(&cwd)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("AWF API server listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    http_serve::Server { child, base }
}

/// The run id of the `awf run … -f json` result `r`.
fn run_id(r: &awf_tests::Run) -> String {
    r.json().unwrap()["run_id"].as_str().unwrap().to_owned()
}

/// `--from` a loop's body state ran it outside its loop (`undefined variable: loop`, and the
/// printed `awf resume <id>` failed the same way for ever): refused, naming the loop state to
/// resume from, with the code a parallel branch's refusal has; the states `--from` takes
/// leave the body out.
#[test]
fn resuming_from_a_loop_body_state_points_at_its_loop() {
    let sb = Sandbox::new().unwrap();
    sb.write("loopfail.yaml", LOOPFAIL).unwrap();
    let r = sb.run(&["run", "loopfail.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let id = run_id(&r);
    sb.write("lfok", "").unwrap();
    let r = sb.run(&["resume", &id, "--from", "work"]).unwrap();
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        r.stderr,
        "[USER.INPUT.VALIDATION_FAILED] cannot resume from work: it is in the body of the loop \
         state L, which runs it and routes on\n  Hint: resume from the loop state L instead\n"
    );
    assert!(!r.stdout.contains("→ work"), "{}", r.stdout);
    let r = sb.run(&["resume", &id, "--from", "zzzzzzzzzz"]).unwrap();
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("Hint: --from takes `current`, `previous` or one of its states: pre, L\n"),
        "{}",
        r.stderr
    );
    // The run was left as it was: resumed from the loop, it completes.
    let r = sb.run(&["resume", &id, "--from", "L"]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
}

/// A body state of a loop nested in another loop is resumed from the outer loop (the inner
/// one is itself a body state).
#[test]
fn resuming_from_a_nested_loop_body_names_the_outermost_loop() {
    let sb = Sandbox::new().unwrap();
    let yaml = "name: nest\nstates:\n  initial: outer\n  outer: {type: for_each, items: '[1]', body: [inner], on_complete: done}\n  inner: {type: for_each, items: '[1]', body: [work]}\n  work: {type: step, command: 'test -f ok'}\n  done: {type: terminal}\n";
    sb.write("nest.yaml", yaml).unwrap();
    let r = sb.run(&["run", "nest.yaml", "-f", "json"]).unwrap();
    assert_ne!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let id = run_id(&r);
    let r = sb.run(&["resume", &id, "--from", "work"]).unwrap();
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        r.stderr,
        "[USER.INPUT.VALIDATION_FAILED] cannot resume from work: it is in the body of the loop \
         state inner, which runs it and routes on\n  Hint: resume from the loop state outer \
         instead\n"
    );
    let r = sb.run(&["resume", &id, "--from", "inner"]).unwrap();
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("Hint: resume from the loop state outer instead\n"),
        "{}",
        r.stderr
    );
}

/// Over HTTP, `from_step` a loop's body state is the same refusal (422).
#[test]
fn resuming_from_a_loop_body_over_http_is_refused() {
    let sb = http_serve::sandbox_with(&[("loopfail", LOOPFAIL)]);
    let s = http_serve::start(&sb, &[]);
    let id = http_serve::start_run(&s, "loopfail", "{}");
    http_serve::wait_status(&s, &id, "failed");
    let (code, body, _) = http_serve::post(
        &format!("{}/api/executions/{id}/resume", s.base),
        r#"{"from_step":"work"}"#,
    );
    assert_eq!(code, 422, "{body}");
    let v = http_serve::json_of(&body);
    assert_eq!(v["code"], "USER.INPUT.VALIDATION_FAILED", "{v}");
    assert_eq!(
        v["detail"],
        "cannot resume from work: it is in the body of the loop state L, which runs it and \
         routes on",
        "{v}"
    );
}

/// `awf resume --list` listed a run live in another awf process (which `awf resume` refuses);
/// left out while its process holds the run's lock, listed once that process is gone.
#[test]
fn resume_list_leaves_out_a_run_live_in_another_process() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "long.yaml",
        "name: long\nstates:\n  initial: a\n  a: {type: step, command: 'sleep 3535', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let mut child = sb
        .cmd(&["run", "long.yaml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let id = wait_for_state(&sb, "the run to be at a", |v| {
        v["status"] == "running" && v["current_state"] == "a"
    });
    let r = sb.run(&["resume", &id]).unwrap();
    assert!(
        r.stderr.contains("still running in another awf process"),
        "{}",
        r.stderr
    );
    let l = sb.run(&["resume", "--list", "-f", "json"]).unwrap();
    assert_eq!(l.json().unwrap(), serde_json::json!([]), "{}", l.stdout);
    let l = sb.run(&["resume", "--list"]).unwrap();
    assert!(!l.stdout.contains(&id), "{}", l.stdout);
    // Its process killed: it is resumable, and listed as such.
    child.kill().unwrap();
    child.wait().unwrap();
    sb.kill_processes(Some("sleep 3535"));
    let l = sb.run(&["resume", "--list", "-f", "json"]).unwrap();
    let rows = l.json().unwrap();
    assert_eq!(rows[0]["run_id"], id.as_str(), "{rows}");
    assert_eq!(rows[0]["process_gone"], true, "{rows}");
}

/// With `--storage DIR`, the commands hints name carry it (absolute, shell-quoted): pasted
/// without it they looked in the default store (RUN_NOT_FOUND).
#[test]
fn hints_carry_the_storage_flag() {
    let sb = Sandbox::new().unwrap();
    sb.write("fail.yaml", FAIL).unwrap();
    let r = sb
        .run(&["--storage", "my store", "run", "fail.yaml"])
        .unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let id = r
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("Workflow started: fail ("))
        .and_then(|l| l.strip_suffix(')'))
        .unwrap()
        .to_owned();
    // The directory as an absolute path (it holds wherever the hint is pasted).
    let store = format!(
        "'{}'",
        std::fs::canonicalize(sb.path())
            .unwrap()
            .join("my store")
            .display()
    );
    let want = format!("Hint: continue it with `awf resume --storage {store} {id}`\n");
    assert!(r.stderr.contains(&want), "{}", r.stderr);
    // A hint of an error outside a run, in text and JSON.
    let r = sb
        .run(&["--storage", "my store", "resume", &id, "--from", "done"])
        .unwrap();
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains(&format!("(`awf resume --storage {store} {id}`)")),
        "{}",
        r.stderr
    );
    let r = sb
        .run(&[
            "--storage",
            "my store",
            "resume",
            &id,
            "--from",
            "done",
            "-f",
            "json",
        ])
        .unwrap();
    let hints = r.json().unwrap()["error"]["hints"].to_string();
    assert!(
        hints.contains(&format!("(`awf resume --storage {store} {id}`)")),
        "{hints}"
    );
    // Pasted as shown, it finds the run.
    sb.write("ok", "").unwrap();
    let r = sb
        .run(&["resume", "--storage", "my store", &id, "--from", "b"])
        .unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    // Without the flag, hints are as they were.
    std::fs::remove_file(sb.path().join("ok")).unwrap();
    let r = sb.run(&["run", "fail.yaml"]).unwrap();
    assert!(
        r.stderr.contains("Hint: continue it with `awf resume "),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("--storage"), "{}", r.stderr);
}

/// `awf resume -i zz=1` with `zz` undeclared warns as `awf run` does (it said nothing).
#[test]
fn resume_warns_of_an_undeclared_input() {
    let sb = Sandbox::new().unwrap();
    sb.write("fail.yaml", FAIL).unwrap();
    let r = sb.run(&["run", "fail.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let id = run_id(&r);
    sb.write("ok", "").unwrap();
    let r = sb.run(&["resume", &id, "-i", "zz=1"]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let want = "WARN input 'zz' is not declared by workflow 'fail'; nothing uses it: templates \
                may read only declared inputs and commands get only those as environment variables";
    assert!(
        r.stdout.contains(want) || r.stderr.contains(want),
        "{}{}",
        r.stdout,
        r.stderr
    );
}

/// `POST …/resume` with an undeclared name in `input_overrides` is the 422 a run gets, for a
/// run started from a terminal in another directory too (it was accepted: the route looked
/// for the run's relative path from the server's directory, found nothing and let it
/// through).
#[test]
fn http_resume_refuses_an_undeclared_input_of_a_run_started_from_a_terminal() {
    let sb = Sandbox::new().unwrap();
    sb.write("fail.yaml", FAIL).unwrap();
    let r = sb.run(&["run", "fail.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let id = run_id(&r);
    let s = serve_in(&sb, "elsewhere");
    let (code, body, _) = http_serve::post(
        &format!("{}/api/executions/{id}/resume", s.base),
        r#"{"input_overrides":{"zz":"1"}}"#,
    );
    assert_eq!(code, 422, "{body}");
    let v = http_serve::json_of(&body);
    assert_eq!(v["code"], "USER.INPUT.VALIDATION_FAILED", "{v}");
    assert_eq!(
        v["detail"], "input 'zz' is not declared by workflow 'fail'",
        "{v}"
    );
    // Nothing ran: still failed, and resumed without it, it completes (its steps run in
    // the directory the run started in, not the server's: trial_fixes_37).
    sb.write("ok", "").unwrap();
    let (code, body, _) = http_serve::post(&format!("{}/api/executions/{id}/resume", s.base), "{}");
    assert_eq!(code, 200, "{body}");
    http_serve::wait_status(&s, &id, "completed");
}
