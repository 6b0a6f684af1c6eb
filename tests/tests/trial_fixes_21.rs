//! Leftovers of the trials of stop 34, fixed in stop 35, over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

/// A `for_each` whose items are written in the workflow as broken JSON (`'["a", b]'`, a
/// string, not a YAML list) is a validation error: the loop could only fail when it starts
/// (trial: validate said valid, the run failed at the loop). `awf run` refuses the file
/// before any step runs; items that are a template are only known at run time and pass; a
/// list whose first item starts with a bracket (`[draft] fix, other`) is a comma list, valid.
#[test]
fn literal_broken_json_items_are_a_validation_error() {
    let sb = Sandbox::new().unwrap();
    let wf = |items: &str| {
        format!(
            "name: l\nstates:\n  initial: a\n  a: {{type: step, command: 'touch ran', on_success: l}}\n  l:\n    type: for_each\n    items: '{items}'\n    body: [b]\n    on_complete: done\n  b: {{type: step, command: 'true', on_success: l}}\n  done: {{type: terminal}}\n"
        )
    };
    sb.write("bad.yaml", &wf(r#"["a", b]"#)).unwrap();
    let r = sb.run(&["validate", "bad.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("states.l.items: loop \"l\": items start with `[` but are not a JSON array"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("comma-separated list without brackets"),
        "{}",
        r.stderr
    );
    let r = sb.run(&["run", "bad.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(!sb.path().join("ran").exists());

    sb.write("cut.yaml", &wf("[1, 2")).unwrap();
    let r = sb.run(&["validate", "cut.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);

    for ok in ["[draft] fix, other", "{{.inputs.xs}}", "a, b", "[1, 2]"] {
        let text = wf(ok).replace(
            "name: l\n",
            "name: l\ninputs:\n  - {name: xs, default: 'x'}\n",
        );
        sb.write("ok.yaml", &text).unwrap();
        let r = sb.run(&["validate", "ok.yaml"]).unwrap();
        assert_eq!(r.code, 0, "{ok}: {}", r.stderr);
    }
}

/// A terminal message or a hook reading a state the run did not pass through says so: the
/// bare `undefined variable: states.b` read like a typo of the state's name (trial).
#[test]
fn reading_a_state_that_has_not_run_says_so() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "m.yaml",
        "name: m\nstates:\n  initial: a\n  a: {type: step, command: 'exit 1', on_success: b, on_failure: done}\n  b: {type: step, command: 'echo hi', on_success: done}\n  done: {type: terminal, message: 'b said {{.states.b.Output}}'}\nhooks:\n  workflow_end:\n    - log: 'hook {{.states.b.Output}}'\n",
    )
    .unwrap();
    let r = sb.run(&["run", "m.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let note = "undefined variable: states.b (state \"b\" has not run in this run, so it has no result to read)";
    assert!(
        r.stderr.contains(&format!(
            "WARN terminal done: its message is shown as written: {note}"
        )),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains(&format!("WARN workflow_end hook failed: hook log: {note}")),
        "{}",
        r.stderr
    );
}

/// `awf run <workflow> --help`: columns line up after CJK text (two terminal columns a
/// character), an enum value holding `|` is quoted (`日本語|a|b|x` could not be told from
/// four values), and an enum of 200 values shows 12 and how many more (it made a line of
/// 1,000 columns, trial).
#[test]
fn run_help_table_lines_up_quotes_and_caps_enums() {
    let sb = Sandbox::new().unwrap();
    let many: Vec<String> = (1..=200).map(|i| i.to_string()).collect();
    sb.write(
        "h.yaml",
        &format!(
            "name: h\ninputs:\n  - {{name: lang, description: 言語, validation: {{enum: [日本語, 'a|b', x]}}}}\n  - {{name: big, description: many, validation: {{enum: [{}]}}}}\nstates:\n  initial: a\n  a: {{type: step, command: 'true', on_success: done}}\n  done: {{type: terminal}}\n",
            many.join(", ")
        ),
    )
    .unwrap();
    let r = sb.run(&["run", "h.yaml", "--help"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.inputs_table(),
        [
            "  NAME  TYPE    REQUIRED  DEFAULT  RULES                                           DESCRIPTION",
            "  lang  string  no        -        one of 日本語|\"a|b\"|x                           言語",
            "  big   string  no        -        one of 1|2|3|4|5|6|7|8|9|10|11|12|… (188 more)  many",
        ],
        "{}",
        r.stdout
    );
}

/// Errors the breaker found without a hint now have one: an empty workflow file, a list for
/// a workflow, a YAML key that is a list, a reference to a state with no near name (the
/// states are listed), and input values that do not convert (the accepted forms are said).
#[test]
fn errors_the_breaker_found_without_a_hint_have_one() {
    let sb = Sandbox::new().unwrap();
    let cases = [
        (
            "empty.yaml",
            "",
            "Hint: the file is empty or holds only comments",
        ),
        (
            "list.yaml",
            "- a\n- b\n",
            "Hint: a workflow file is a mapping",
        ),
        (
            "ck.yaml",
            "name: c\n? [a, b]\n: x\nstates: {initial: a, a: {type: terminal}}\n",
            "Hint: a key is a name",
        ),
        (
            "ref.yaml",
            "name: r\nstates:\n  initial: a\n  a: {type: step, command: 'echo {{.states.zzzzzz.Output}}', on_success: done}\n  done: {type: terminal}\n",
            "Hint: the workflow's states: a, done",
        ),
    ];
    for (file, text, hint) in cases {
        sb.write(file, text).unwrap();
        let r = sb.run(&["validate", file]).unwrap();
        assert_eq!(r.code, 2, "{file}: {}", r.stderr);
        assert!(r.stderr.contains(hint), "{file}: {}", r.stderr);
    }
    sb.write(
        "typed.yaml",
        "name: t\ninputs:\n  - {name: n, type: integer}\n  - {name: f, type: number}\n  - {name: b, type: boolean}\nstates:\n  initial: a\n  a: {type: step, command: 'true', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    for (arg, want) in [
        (
            "n=0x10",
            "cannot convert \"0x10\" to integer (a whole number in decimal, e.g. 42 or -7)",
        ),
        (
            "f=NaN",
            "cannot convert \"NaN\" to number (a finite decimal number, e.g. 3, -0.5 or 1e3)",
        ),
        (
            "b=maybe",
            "cannot convert \"maybe\" to boolean (true or false; yes/no, on/off, y/n and 1/0 are taken too)",
        ),
    ] {
        let r = sb.run(&["run", "typed.yaml", "-i", arg]).unwrap();
        assert_eq!(r.code, 1, "{arg}: {}", r.stderr);
        assert!(r.stderr.contains(want), "{arg}: {}", r.stderr);
        assert!(
            r.stderr.contains(
                "Hint: `awf run typed.yaml --help` lists each input with its type and rules"
            ),
            "{arg}: {}",
            r.stderr
        );
    }
}

/// `awf resume --list` says which state files it cannot read instead of leaving them out
/// without a word (breaker: a truncated state file vanished from the list); the readable
/// runs are listed as before.
#[test]
fn resume_list_names_the_state_files_it_cannot_read() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "f.yaml",
        "name: f\nstates:\n  initial: a\n  a: {type: step, command: 'exit 3', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    for _ in 0..2 {
        let r = sb.run(&["run", "f.yaml"]).unwrap();
        assert_ne!(r.code, 0, "{}", r.stderr);
    }
    let states = sb.path().join("data/awf/states");
    let mut ids: Vec<String> = std::fs::read_dir(&states)
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            n.strip_suffix(".json").map(str::to_owned)
        })
        .collect();
    ids.sort();
    assert_eq!(ids.len(), 2, "{ids:?}");
    let broken = &ids[0];
    let text = std::fs::read_to_string(states.join(format!("{broken}.json"))).unwrap();
    std::fs::write(
        states.join(format!("{broken}.json")),
        &text[..text.len() / 2],
    )
    .unwrap();
    let r = sb.run(&["resume", "--list"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "WARN the state file of run {broken} cannot be read; it is not listed (`awf status {broken}` says why)"
        )),
        "{}",
        r.stderr
    );
    assert!(r.stdout.contains(&ids[1]), "{}", r.stdout);
    assert!(!r.stdout.contains(broken.as_str()), "{}", r.stdout);
    // `awf status` says why, also with no history row for the run (it said "no run").
    for f in ["history.db", "history.db-wal", "history.db-shm"] {
        let _ = std::fs::remove_file(awf_tests::data(&sb).join(f));
    }
    let r = sb.run(&["status", broken]).unwrap();
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("[SYSTEM.IO.READ_FAILED] cannot read the state file"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("move it aside"), "{}", r.stderr);
}

/// A read that ends inside a UTF-8 character does not cut it in the output events: each
/// chunk carries whole characters (breaker: `A\u{fffd}` and `\u{fffd}B` in the event stream
/// and the transcript, while the step's output said `AéB`).
#[test]
fn an_output_chunk_never_cuts_a_character() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "u.yaml",
        "name: u\nstates:\n  initial: a\n  a: {type: step, command: \"printf 'A\\\\303'; sleep 0.3; printf '\\\\251B\\\\n'; printf '\\\\342\\\\202' >&2; sleep 0.3; printf '\\\\254\\\\n' >&2\", on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "u.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = r.json().unwrap();
    assert_eq!(v["states"]["a"]["output"], "AéB\n", "{v}");
    let id = v["run_id"].as_str().unwrap();
    let transcript =
        std::fs::read_to_string(awf_tests::data(&sb).join(format!("transcripts/{id}.jsonl")))
            .unwrap();
    let chunks: Vec<String> = transcript
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l["type"] == "step.output")
        .map(|l| l.to_string())
        .collect();
    assert!(!chunks.is_empty(), "{transcript}");
    for c in &chunks {
        assert!(!c.contains('\u{fffd}'), "{c}");
    }
    let all = chunks.join("");
    assert!(all.contains('é') && all.contains('€'), "{all}");
}

/// An `enum` value an integer, number or boolean input cannot take is a validation error
/// (breaker: `-i i=x` was refused by the type while the hint offered `x`).
#[test]
fn an_enum_value_the_inputs_type_cannot_take_is_a_validation_error() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "en.yaml",
        "name: e\ninputs:\n  - {name: i, type: integer, validation: {enum: ['1', 2, x]}}\n  - {name: b, type: boolean, validation: {enum: [true, 'no']}}\nstates:\n  initial: a\n  a: {type: step, command: 'true', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["validate", "en.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "inputs.0.validation.enum: input \"i\": the allowed value \"x\" is not of its type: cannot convert \"x\" to integer"
        ),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("is invalid: 1 error"), "{}", r.stderr);
}
