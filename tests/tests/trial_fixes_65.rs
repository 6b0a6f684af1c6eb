//! A new user's trial, over the real binary: a parallel branch that never started is recorded
//! as skipped (state file, `awf status`, HTTP, `awf resume`); the README says what a failed
//! loop body step whose `on_failure` names its loop does (the rest of the item's body runs,
//! as in AWF (Go)); a mistyped sibling key does not take over a real error of the key it
//! resembles; `awf validate` does not warn that a loop body step with unmatched transitions
//! has nowhere to go.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use awf_tests::Sandbox;
use awf_tests::http_serve;
use awf_tests::pg::TestDb;
use awf_tests::run_id_in;
use awf_tests::workspace_root;
use pretty_assertions::assert_eq;
use serde_json::Value;

const SKIP2: &str = r#"name: skip2
states:
  initial: par
  par:
    type: parallel
    parallel: [bad1, slow1]
    strategy: all_succeed
    max_concurrent: 1
    on_success: done
    on_failure: report
  bad1: { type: step, command: "exit 4" }
  slow1: { type: step, command: "echo slow1" }
  report:
    type: step
    command: "echo slow1 status={{.states.slow1.Status}}; test -f go.flag"
    on_success: done
  done: { type: terminal }
"#;

/// Item 1: the branch skipped by `all_succeed` (the first branch failed, one at a time) was
/// only in the live result: the state file did not have it, so `awf status`, `GET
/// /api/executions/{id}` and `awf resume` did not know it (a resumed
/// `{{.states.slow1.Status}}` failed as "has not run").
/// `awf resume <id>`: the resumed `report` step reads `slow1` as the first attempt did.
fn resume_reads_the_skipped_branch(sb: &Sandbox, id: &str) {
    let r = sb.run(&["resume", id, "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    let v = r.json().unwrap();
    assert_eq!(
        v["states"]["report"]["output"].as_str().map(str::trim_end),
        Some("slow1 status=skipped"),
        "{v}"
    );
}

#[test]
fn a_skipped_parallel_branch_is_recorded_for_status_http_and_resume() {
    let sb = http_serve::sandbox_with(&[("skip2", SKIP2)]);
    let ok = sb.path().join("go.flag");
    let r = sb.run(&["run", "skip2"]).unwrap();
    assert_eq!(r.code, 3, "{} {}", r.stdout, r.stderr);
    let id = run_id_in(&format!("{}{}", r.stdout, r.stderr)).unwrap();

    // `awf status`, JSON and text.
    let st = sb.run(&["status", &id, "-f", "json"]).unwrap();
    let v = st.json().unwrap();
    assert_eq!(v["states"]["slow1"]["status"], "skipped", "{v}");
    assert_eq!(v["states"]["slow1"]["exit_code"], Value::Null, "{v}");
    let text = sb.run(&["status", &id]).unwrap().stdout;
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("slow1") && l.contains("skipped")),
        "{text}"
    );

    // HTTP of the finished run.
    {
        let s = http_serve::start(&sb, &[]);
        let e = http_serve::execution(&s, &id);
        assert_eq!(e["states"]["slow1"]["status"], "skipped", "{e}");
    }

    // `awf resume`: the report reads the same status as in the first attempt.
    std::fs::write(&ok, "").unwrap();
    resume_reads_the_skipped_branch(&sb, &id);
}

/// Item 1 with the shared store (PostgreSQL): its recorder applies the same projection, so the
/// skipped branch is in its record too, and the resume reads it.
#[test]
fn a_skipped_parallel_branch_is_recorded_in_the_shared_store() {
    let db = TestDb::new();
    let mut sb = http_serve::sandbox_with(&[("skip2", SKIP2)]);
    sb.set_env("AWF_STORE", &db.url);
    let r = sb.run(&["run", "skip2"]).unwrap();
    assert_eq!(r.code, 3, "{} {}", r.stdout, r.stderr);
    let id = run_id_in(&format!("{}{}", r.stdout, r.stderr)).unwrap();
    let v = sb
        .run(&["status", &id, "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(v["states"]["slow1"]["status"], "skipped", "{v}");
    std::fs::write(sb.path().join("go.flag"), "").unwrap();
    resume_reads_the_skipped_branch(&sb, &id);
}

/// Item 2: the README said a failed body step whose `on_failure` names its loop makes the loop
/// go on with its next item; AWF (Go) (spec §3.5: the loop's own name → the next body step)
/// and awf run the rest of that item's body. The README now says so, and the behaviour is
/// pinned.
#[test]
fn a_body_failure_routed_to_its_loop_runs_the_rest_of_the_item_as_the_readme_says() {
    let sb = Sandbox::new().unwrap();
    let r = sb
        .run_workflow(
            "body2.yaml",
            r#"name: body2
states:
  initial: each
  each:
    type: for_each
    items: [a, b, c]
    body: [risky, after_risky]
    on_complete: done
  risky: { type: step, command: "test {{.loop.Item}} != b", on_failure: each }
  after_risky: { type: step, command: "echo after_risky ran for {{.loop.Item}}" }
  done: { type: terminal }
"#,
            &["-o", "streaming"],
        )
        .unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    let ran: Vec<&str> = r
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("[OUT] after_risky ran for "))
        .collect();
    assert_eq!(ran, ["a", "b", "c"], "{}", r.stdout);
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    let flat = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(
            "unless its `on_failure` names the loop: then the loop goes on with its next body step, as in AWF (Go): the rest of that item's body still runs"
        ),
        "README (Routing) does not say what the loop does"
    );
    assert!(!flat.contains("then the loop goes on with its next item"));
}

/// Item 2, the README's way to jump over body steps after a failure: `continue_on_error` and a
/// `transitions` `when` on the exit code.
#[test]
fn the_readmes_way_to_jump_over_body_steps_after_a_failure_works() {
    let sb = Sandbox::new().unwrap();
    let r = sb
        .run_workflow(
            "body4.yaml",
            r#"name: body4
states:
  initial: each
  each:
    type: for_each
    items: [a, b, c]
    body: [risky, after_risky, last]
    on_complete: done
  risky:
    type: step
    command: "test {{.loop.Item}} != b"
    continue_on_error: true
    transitions: [{when: "states.risky.ExitCode != 0", goto: last}]
  after_risky: { type: step, command: "echo after {{.loop.Item}}" }
  last: { type: step, command: "echo last {{.loop.Item}}" }
  done: { type: terminal }
"#,
            &["-o", "streaming"],
        )
        .unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    let out: Vec<&str> = r
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("[OUT] "))
        .collect();
    assert_eq!(
        out,
        ["after a", "last a", "last b", "after c", "last c"],
        "{}",
        r.stdout
    );
}

/// `awf validate <file> -f json`'s findings.
fn findings(sb: &Sandbox, file: &str, yaml: &str) -> Vec<Value> {
    let p = sb.write(file, yaml).unwrap();
    let r = sb
        .run(&["validate", p.to_str().unwrap(), "-f", "json"])
        .unwrap();
    let v: Value = serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", r.stdout, r.stderr));
    v["diagnostics"]
        .as_array()
        .or_else(|| v.as_array())
        .unwrap_or_else(|| panic!("no diagnostics in {v}"))
        .clone()
}

/// Item 3: `comand: x` beside a `command:` whose template is wrong replaced the template
/// error's hint (`did you mean 'upper'?`) with `rename comand: to command:` and appended
/// `("comand" is not a key …)` to its message; the typo is its own finding.
#[test]
fn a_mistyped_sibling_key_does_not_take_over_an_error_of_the_key_present() {
    let sb = Sandbox::new().unwrap();
    let yaml = r#"name: bad2
states:
  initial: start
  start:
    type: step
    comand: x
    command: echo {{upcase "x"}}
    on_success: fin
  fin: { type: terminal }
"#;
    let p = sb.write("bad2.yaml", yaml).unwrap();
    let r = sb.run(&["validate", p.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 2, "{} {}", r.stdout, r.stderr);
    let all = format!("{}{}", r.stdout, r.stderr);
    let lines: Vec<&str> = all.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("states.start.command: template does not parse"))
        .unwrap_or_else(|| panic!("{all}"));
    assert!(
        lines[at].ends_with("function upcase not defined"),
        "{}",
        lines[at]
    );
    assert!(lines[at].contains("bad2.yaml:7:19: error"), "{}", lines[at]);
    assert_eq!(lines[at + 1], "  Hint: did you mean 'upper'?", "{all}");
    let typo = lines
        .iter()
        .position(|l| l.contains("states.start.comand: unknown field \"comand\""))
        .unwrap_or_else(|| panic!("{all}"));
    assert!(
        lines[typo].contains("bad2.yaml:6:5: warning"),
        "{}",
        lines[typo]
    );
    assert_eq!(lines[typo + 1], "  Hint: did you mean 'command'?", "{all}");
    assert!(!all.contains("is not a key"), "{all}");
}

/// Item 3, the case the note is for still has it: the key meant is missing.
#[test]
fn a_mistyped_key_still_names_itself_in_the_error_of_the_missing_key() {
    let sb = Sandbox::new().unwrap();
    let p = sb
        .write(
            "agent.yaml",
            "name: agent\nstates:\n  initial: b\n  b:\n    type: agent\n    provider: claude\n    promt: hi\n    on_success: done\n  done:\n    type: terminal\n",
        )
        .unwrap();
    let r = sb.run(&["validate", p.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 2, "{} {}", r.stdout, r.stderr);
    let all = format!("{}{}", r.stdout, r.stderr);
    assert!(
        all.contains("\"promt\" is not a key: did you mean 'prompt'?"),
        "{all}"
    );
}

/// Item 4: a loop body step with conditional transitions and no `on_success` was warned "when
/// no `when` matches, this state has nowhere to go"; in a body, no match goes on with the
/// loop (checked: the next body step runs). A state outside any body is still warned.
#[test]
fn a_loop_body_step_with_unmatched_transitions_is_not_warned_as_having_nowhere_to_go() {
    let sb = Sandbox::new().unwrap();
    let yaml = r#"name: body5
states:
  initial: each
  each:
    type: for_each
    items: [a, b]
    body: [check, after]
    on_complete: lone
  check:
    type: step
    command: "echo {{.loop.Item}}"
    transitions: [{when: "states.check.Output == 'zzz'", goto: each}]
  after: { type: step, command: "echo after {{.loop.Item}}" }
  lone:
    type: step
    command: "echo x"
    transitions: [{when: "states.lone.ExitCode == 0", goto: done}]
  done: { type: terminal }
"#;
    let nowhere: Vec<String> = findings(&sb, "body5.yaml", yaml)
        .iter()
        .filter(|d| {
            d["message"]
                .as_str()
                .is_some_and(|m| m.contains("nowhere to go"))
        })
        .map(|d| d["path"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(nowhere, ["states.lone.transitions"]);
    // What the engine does: no match in the body goes on with the next body step.
    let r = sb.run(&["run", "./body5.yaml", "-o", "streaming"]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    let out: Vec<&str> = r
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("[OUT] "))
        .collect();
    assert_eq!(out, ["a", "after a", "b", "after b", "x"], "{}", r.stdout);
}
