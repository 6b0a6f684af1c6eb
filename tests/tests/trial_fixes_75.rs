//! Fixes of an AWF (Go) user's trial (trial 75), over the real binary with a private data
//! dir: a parallel block's post hook reads its branches (validate called it a forward
//! reference); a mocked failure in a parallel branch or a loop's body gives the resume hint
//! with `--no-mocks`; an ambiguous run id prefix says how many more runs match than it names.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use awf_tests::data;
use awf_tests::run_id_in;
use pretty_assertions::assert_eq;

/// Finding 1: a parallel block's post hooks run after its branches, and read them (and
/// what runs inside a branch that is itself a block); `awf validate` and `awf run` refused
/// the workflow with a "forward reference" (exit 2). Its pre hooks still may not.
#[test]
fn a_parallel_blocks_post_hook_reads_its_branches() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "parpost.yaml",
        "name: parpost\nstates:\n  initial: p\n  p:\n    type: parallel\n    parallel: [b1, inner]\n    \
         hooks:\n      post: [{log: \"b1 said {{.states.b1.Output}}\"}, {log: \"b2 said {{.states.b2.Output}}\"}]\n    \
         on_success: done\n  b1: {type: step, command: echo hi}\n  inner: {type: parallel, parallel: [b2]}\n  \
         b2: {type: step, command: echo there}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let v = sb.run(&["validate", "parpost.yaml"]).unwrap();
    assert_eq!(v.code, 0, "{}{}", v.stdout, v.stderr);
    let r = sb.run(&["run", "parpost.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    for line in ["INFO b1 said hi\n", "INFO b2 said there\n"] {
        assert!(r.stderr.contains(line), "{line} not in {}", r.stderr);
    }

    // A pre hook runs before the branches: reading one is a forward reference.
    sb.write(
        "parpre.yaml",
        "name: parpre\nstates:\n  initial: p\n  p:\n    type: parallel\n    parallel: [b1]\n    \
         hooks:\n      pre: [{log: \"{{.states.b1.Output}}\"}]\n    on_success: done\n  \
         b1: {type: step, command: echo hi}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let v = sb.run(&["validate", "parpre.yaml"]).unwrap();
    assert_eq!(v.code, 2, "{}{}", v.stdout, v.stderr);
    let text = format!("{}{}", v.stdout, v.stderr);
    assert!(
        text.contains(
            "states.p.hooks.pre.0: forward reference to step \"b1\" in states.p.hooks.pre.0: it has not run at this point"
        ),
        "{text}"
    );
}

const RELEASE: &str = "name: release\nstates:\n  initial: checks\n  checks:\n    type: parallel\n    \
     parallel: [unit]\n    on_success: done\n    on_failure: failed\n  \
     unit: {type: step, command: touch unit_ran}\n  done: {type: terminal}\n  \
     failed: {type: terminal, status: failure}\n";

/// Finding 2: a mocked failure of a parallel branch: the hint says it was mocked and gives
/// the resume with `--no-mocks` (it gave `--from checks` alone, which failed the same way),
/// in the text summary and in `-f json`'s `error.hints`; that resume runs the branch.
#[test]
fn a_mocked_branch_failure_hints_a_resume_without_the_mock() {
    let sb = Sandbox::new().unwrap();
    sb.write("release.yaml", RELEASE).unwrap();
    let r = sb
        .run(&["run", "release.yaml", "--mock", "states.unit.status=failed"])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let id = run_id_in(&r.stderr).unwrap();
    let hint = format!(
        "the failure of unit was mocked (`--mock states.unit.status=failed`), and a resume applies the run's mocks again: continue it without that mock with `awf resume {id} --from checks --no-mocks`"
    );
    assert!(
        r.stderr.ends_with(&format!("  Hint: {hint}\n")),
        "{}",
        r.stderr
    );

    let j = sb
        .run(&[
            "run",
            "release.yaml",
            "--mock",
            "states.unit.status=failed",
            "-f",
            "json",
        ])
        .unwrap();
    assert_eq!(j.code, 3, "{}", j.stderr);
    let v: serde_json::Value = serde_json::from_str(&j.stdout).unwrap();
    let jid = v["run_id"].as_str().unwrap();
    assert_eq!(
        v["error"]["hints"],
        serde_json::json!([format!(
            "the failure of unit was mocked (`--mock states.unit.status=failed`), and a resume applies the run's mocks again: continue it without that mock with `awf resume {jid} --from checks --no-mocks`"
        )])
    );

    // Following the hint runs the branch for real.
    assert!(!sb.path().join("unit_ran").exists());
    let resumed = sb
        .run(&["resume", &id, "--from", "checks", "--no-mocks"])
        .unwrap();
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert!(sb.path().join("unit_ran").exists());
}

/// Finding 2: a mocked failure of a `for_each` body step: the hint gave `awf resume <id>`
/// alone; it says the failure was mocked and gives `--no-mocks`, which then completes.
#[test]
fn a_mocked_body_step_failure_hints_a_resume_without_the_mock() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "lp.yaml",
        "name: lp\nstates:\n  initial: each\n  each:\n    type: for_each\n    items: '[\"a\", \"b\"]'\n    \
         body: [show]\n    on_complete: done\n  show: {type: step, command: 'touch shown_{{.loop.Item}}'}\n  \
         done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb
        .run(&["run", "lp.yaml", "--mock", "states.show.status=failed"])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let id = run_id_in(&r.stderr).unwrap();
    let hint = format!(
        "  Hint: the failure of show was mocked (`--mock states.show.status=failed`), and a resume applies the run's mocks again: continue it without that mock with `awf resume {id} --no-mocks`\n"
    );
    assert!(r.stderr.ends_with(&hint), "{}", r.stderr);
    let resumed = sb.run(&["resume", &id, "--no-mocks"]).unwrap();
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert!(sb.path().join("shown_a").exists() && sb.path().join("shown_b").exists());
}

/// A real failure after a mocked one that was routed on (`on_failure`) is not called
/// mocked: the hint is the plain resume.
#[test]
fn a_real_failure_after_a_handled_mocked_one_is_not_called_mocked() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "rf.yaml",
        "name: rf\nstates:\n  initial: checks\n  checks:\n    type: parallel\n    parallel: [unit]\n    \
         on_success: done\n    on_failure: fix\n  unit: {type: step, command: 'true'}\n  \
         fix: {type: step, command: 'exit 4', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb
        .run(&["run", "rf.yaml", "--mock", "states.unit.status=failed"])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let id = run_id_in(&r.stderr).unwrap();
    assert!(
        r.stderr
            .ends_with(&format!("  Hint: continue it with `awf resume {id}`\n")),
        "{}",
        r.stderr
    );
}

/// Finding 3: an ambiguous run id prefix names five candidates and says how many more
/// match (it said "7 runs match" and named 5, nothing of the other 2).
#[test]
fn an_ambiguous_prefix_says_how_many_more_runs_match() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "one.yaml",
        "name: one\nstates:\n  initial: a\n  a: {type: step, command: 'true', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "one.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let id = run_id_in(&r.stderr).unwrap();
    // Seven runs whose ids share the prefix `0000000` (copies of the real one's state file).
    let states = data(&sb).join("states");
    let text = std::fs::read_to_string(states.join(format!("{id}.json"))).unwrap();
    let ids: Vec<String> = (1..=7)
        .map(|i| format!("0000000{i}-0000-4000-8000-000000000000"))
        .collect();
    for other in &ids {
        std::fs::write(
            states.join(format!("{other}.json")),
            text.replace(&id, other),
        )
        .unwrap();
    }
    let s = sb.run(&["status", "0000000"]).unwrap();
    assert_eq!(s.code, 1, "{}", s.stderr);
    assert_eq!(
        s.stderr,
        format!(
            "[USER.INPUT.VALIDATION_FAILED] run id prefix '0000000' is ambiguous: 7 runs match\n  \
             Hint: give more characters; candidates: {} and 2 more (`awf history` lists them)\n",
            ids[..5].join(", ")
        )
    );
    // Few enough: all of them, nothing more.
    std::fs::remove_file(states.join(format!("{}.json", ids[2]))).unwrap();
    std::fs::remove_file(states.join(format!("{}.json", ids[3]))).unwrap();
    let s = sb.run(&["status", "0000000"]).unwrap();
    assert_eq!(
        s.stderr,
        format!(
            "[USER.INPUT.VALIDATION_FAILED] run id prefix '0000000' is ambiguous: 5 runs match\n  \
             Hint: give more characters; candidates: {}, {}, {}, {}, {}\n",
            ids[0], ids[1], ids[4], ids[5], ids[6]
        )
    );
}

/// Finding 3, on a shared PostgreSQL store: the same message, the hint naming five of the
/// matching ids and how many more (it named up to ten, and no count).
#[test]
fn an_ambiguous_prefix_on_the_shared_store_says_how_many_more_runs_match() {
    let db = awf_tests::pg::TestDb::new();
    let mut sb = Sandbox::new().unwrap();
    sb.set_env("AWF_STORE", &db.url);
    sb.write(
        "one.yaml",
        "name: one\nstates:\n  initial: a\n  a: {type: step, command: 'true', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "one.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Seven more runs whose ids share the prefix `0000000` (copies of the real one's row).
    awf_tests::pg::psql(
        &db.url,
        "INSERT INTO awf_runs SELECT (jsonb_populate_record(r, jsonb_build_object('run_id', \
         '0000000' || g || '-0000-4000-8000-000000000000', 'root_run_id', \
         '0000000' || g || '-0000-4000-8000-000000000000'))).* FROM awf_runs r, \
         generate_series(1, 7) g",
    );
    let ids: Vec<String> = (1..=7)
        .map(|i| format!("0000000{i}-0000-4000-8000-000000000000"))
        .collect();
    let s = sb.run(&["status", "0000000"]).unwrap();
    assert_eq!(s.code, 1, "{}", s.stderr);
    assert_eq!(
        s.stderr,
        format!(
            "[USER.INPUT.VALIDATION_FAILED] run id prefix '0000000' is ambiguous: 7 runs match\n  \
             Hint: give more characters; candidates: {} and 2 more (`awf history` lists them)\n",
            ids[..5].join(", ")
        )
    );
    // The API of a worker of the store (its own prefix lookup among every run of the store).
    let server = awf_tests::http_serve::start(&sb, &[]);
    let (code, body, _) =
        awf_tests::http_serve::curl(&[&format!("{}/api/executions/0000000", server.base)]);
    assert_eq!(code, 422, "{body}");
    let p = awf_tests::http_serve::json_of(&body);
    assert_eq!(
        p["detail"], "run id prefix '0000000' is ambiguous: 7 runs match",
        "{body}"
    );
    assert_eq!(
        p["hints"],
        serde_json::json!([format!(
            "give more characters; candidates: {} and 2 more (`awf history` lists them)",
            ids[..5].join(", ")
        )]),
        "{body}"
    );
}
