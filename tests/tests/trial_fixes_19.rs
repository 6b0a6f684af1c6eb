//! Fixes from stop 34's breaker (the trial of the leftover fixes), over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

/// A state named like the terminal awf makes of a step's inline `on_failure`
/// (`__inline_error_<step>`) is refused: the step's failure ran the user's state instead
/// and the run "completed" (breaker: exit 0 after `✗ a: exit code 2`).
#[test]
fn a_state_named_like_an_inline_failure_terminal_is_refused() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "coll.yaml",
        "name: coll\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'exit 2'\n    \
         on_failure: {message: \"inline a broke\", status: 4}\n    on_success: __inline_error_a\n  \
         __inline_error_a: {type: step, command: 'echo user state ran', on_success: done}\n  \
         done: {type: terminal}\n",
    )
    .unwrap();
    let v = sb.run(&["validate", "coll.yaml"]).unwrap();
    assert_ne!(v.code, 0, "{}{}", v.stdout, v.stderr);
    assert!(
        v.stderr.contains("state \"__inline_error_a\" has the name awf gives the terminal of step \"a\"'s inline on_failure"),
        "{}",
        v.stderr
    );
    assert!(v.stderr.contains("rename the state"), "{}", v.stderr);
    let r = sb.run(&["run", "coll.yaml"]).unwrap();
    assert_ne!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(!r.stdout.contains("user state ran"), "{}", r.stdout);
}

/// `--log-level debug` names an inline `on_failure`'s terminal as every other output does
/// (`a's on_failure`), never by its internal name.
#[test]
fn the_debug_log_names_an_inline_failure_terminal_by_its_step() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "inl.yaml",
        "name: inl\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'exit 2'\n    \
         on_failure: {message: \"a broke\", status: 4}\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb
        .run(&["run", "inl.yaml", "--log-level", "debug"])
        .unwrap();
    assert_eq!(r.code, 4, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("step a: → a's on_failure (failed: on_failure)"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("__inline_error"), "{}", r.stderr);
}

/// `items:` text that starts with a byte-order mark (a file some editors write, read by a
/// step) is read past it: `\u{feff}[1, 2]` is the JSON array, not `\u{feff}[1` and `2]`.
#[test]
fn items_after_a_byte_order_mark_are_read_as_json() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "bom.yaml",
        "name: bom\nstates:\n  initial: gen\n  gen: {type: step, command: \"printf '\\\\357\\\\273\\\\277[1, 2]'\", on_success: each}\n  \
         each:\n    type: for_each\n    items: '{{.states.gen.Output}}'\n    body: [show]\n    \
         on_complete: done\n  show: {type: step, command: \"echo 'item={{.loop.Item}}'\", on_success: each}\n  \
         done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "bom.yaml", "-o", "buffered"]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.ends_with("item=1\nitem=2\n"), "{:?}", r.stdout);
}

/// `-f json` gives a failed run's resume hint in `error.hints`, the secret inputs to give
/// again included, as the text summary does (breaker: `"hints": []`).
#[test]
fn json_output_carries_the_resume_hint() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "h.yaml",
        "name: h\ninputs:\n  - {name: api_token, type: string, required: true}\nstates:\n  initial: a\n  \
         a: {type: step, command: 'exit 3', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb
        .run(&["run", "h.yaml", "-i", "api_token=sekrit123", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let doc = r.json().unwrap();
    let id = doc["run_id"].as_str().unwrap().to_owned();
    let hints: Vec<String> = doc["error"]["hints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap().to_owned())
        .collect();
    let want = format!("continue it with `awf resume {id} --input api_token=<value>`");
    assert!(hints.contains(&want), "{hints:?}");
    assert!(!r.stdout.contains("sekrit123"), "{}", r.stdout);
    // The text summary gives the same hint.
    let t = sb
        .run(&["run", "h.yaml", "-i", "api_token=sekrit123"])
        .unwrap();
    assert!(
        t.stderr.contains("continue it with `awf resume "),
        "{}",
        t.stderr
    );
    assert!(
        t.stderr.contains(" --input api_token=<value>`"),
        "{}",
        t.stderr
    );
}

/// The refusal of `awf resume <sub-workflow run>` gives the whole command to run: the
/// top-level run with the secret inputs it needs again (breaker: following the hint failed
/// on the missing `api_token`); a secret with a default is not asked for.
#[test]
fn the_refusal_to_resume_a_child_run_names_the_secrets_its_root_needs() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "leaf.yaml",
        "name: leaf\nstates:\n  initial: c\n  c: {type: step, command: 'test -f ok', \
         on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    sb.write(
        "top.yaml",
        "name: top\ninputs:\n  - {name: api_token, type: string, required: true}\n  - {name: \
         db_password, type: string, default: dflt-pass}\nstates:\n  initial: call\n  call: \
         {type: call_workflow, workflow: leaf.yaml, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb
        .run(&["run", "top.yaml", "-i", "api_token=sekrit123", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let top = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    let state =
        awf_tests::read_state_file(&awf_tests::data(&sb).join(format!("states/{top}.json")))
            .unwrap();
    let leaf = state["child_runs"]["call"].as_str().unwrap().to_owned();
    let again = sb.run(&["resume", &leaf]).unwrap();
    assert_eq!(again.code, 1, "{}", again.stderr);
    assert!(
        again.stderr.ends_with(&format!(
            "Hint: awf resume {top} --input api_token=<value>\n"
        )),
        "{}",
        again.stderr
    );
    // The hint, run as shown, resumes the run.
    sb.write("ok", "").unwrap();
    let done = sb
        .run(&["resume", &top, "--input", "api_token=sekrit123"])
        .unwrap();
    assert_eq!(done.code, 0, "{}", done.stderr);
}
