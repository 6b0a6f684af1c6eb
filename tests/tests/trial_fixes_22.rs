//! Fixes from trial 22's breaker, over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use awf_tests::http_serve;

/// A workflow printing `bytes` bytes of `a` lines, then `END`.
fn big_output(bytes: usize) -> String {
    format!(
        "name: big\nstates:\n  initial: big\n  big:\n    type: step\n    \
         command: \"yes aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa | head -c {bytes}; echo END\"\n    \
         on_success: done\n  done: {{type: terminal}}\n"
    )
}

/// Issue 1: a finished run of `awf serve` keeps only the tail of its output in memory, and
/// what the API gives of it does not change: the last 64 KiB, marked `truncated`, and the
/// whole event stream replayed from its start (the events the server no longer holds are
/// read back from the transcript, without a `lagged` gap).
#[test]
fn a_finished_run_of_the_server_still_answers_as_documented() {
    let sb = http_serve::sandbox_with(&[("big", &big_output(3_000_000))]);
    let s = http_serve::start(&sb, &[]);
    let id = http_serve::start_run(&s, "big", "{}");
    let v = http_serve::wait_status(&s, &id, "completed");
    let out = v["states"]["big"]["output"].as_str().unwrap();
    assert_eq!(out.len(), 64 << 10);
    assert!(out.ends_with("aaaa\nEND\n"), "{:?}", &out[out.len() - 20..]);
    assert_eq!(v["states"]["big"]["truncated"], true);
    let frames = http_serve::follow(&s, &id, &[]);
    let names: Vec<&str> = frames.iter().map(|f| f.1.as_str()).collect();
    assert!(!names.contains(&"lagged"), "{names:?}");
    assert_eq!(names.first(), Some(&"run_started"), "{names:?}");
    assert_eq!(names.last(), Some(&"run_finished"), "{names:?}");
    assert!(names.contains(&"step_finished"), "{names:?}");
    let ids: Vec<u64> = frames.iter().map(|f| f.0).collect();
    assert_eq!(ids, (1..=frames.len() as u64).collect::<Vec<_>>());
}

const HELLO: &str = "name: hello\nstates:\n  initial: a\n  a: {type: step, command: 'echo hi', on_success: done}\n  done: {type: terminal}\n";

/// The run id `awf run -f json` printed.
fn run_id(r: &awf_tests::Run) -> String {
    r.json().unwrap()["run_id"].as_str().unwrap().to_owned()
}

/// Issue 2: a history.db that is not a database (random bytes) leaves the run recorded:
/// its state file, transcript and audit lines are written (the history is an index), the
/// history write failing with the hint to move the file aside; once it is moved aside, the
/// new history lists the runs whose state files exist.
#[test]
fn a_corrupt_history_db_does_not_stop_the_run_record() {
    let sb = Sandbox::new().unwrap();
    sb.write("hello.yaml", HELLO).unwrap();
    let data = awf_tests::data(&sb);
    std::fs::create_dir_all(&data).unwrap();
    let garbage: Vec<u8> = (0..5000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(data.join("history.db"), &garbage).unwrap();
    let r = sb.run(&["run", "hello.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 4, "{}{}", r.stdout, r.stderr);
    let id = run_id(&r);
    let hints = r.json().unwrap()["error"]["hints"].to_string();
    assert!(hints.contains("move it aside"), "{hints}");
    assert!(data.join(format!("states/{id}.json")).is_file());
    assert!(data.join(format!("transcripts/{id}.jsonl")).is_file());
    let audit = std::fs::read_to_string(data.join("audit.jsonl")).unwrap();
    assert!(audit.contains(&id), "{audit}");
    let st = sb.run(&["status", &id]).unwrap();
    assert_eq!(st.code, 0, "{}{}", st.stdout, st.stderr);
    let h = sb.run(&["history"]).unwrap();
    assert_eq!(h.code, 4, "{}{}", h.stdout, h.stderr);
    assert!(h.stderr.contains("move it aside"), "{}", h.stderr);
    // Moved aside: the new history is rebuilt from the state files.
    std::fs::rename(data.join("history.db"), data.join("history.db.broken")).unwrap();
    let h = sb.run(&["history", "-f", "json"]).unwrap();
    assert_eq!(h.code, 0, "{}{}", h.stdout, h.stderr);
    let entries = h.json().unwrap();
    let entries = entries
        .as_array()
        .cloned()
        .unwrap_or_else(|| entries["entries"].as_array().cloned().unwrap_or_default());
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["id"], id.as_str());
    assert_eq!(entries[0]["status"], "completed");
}

/// Issue 3: an enum of a typed input is checked on the converted value: `+2` and `02` are
/// the integer 2 of `[1, 2, 3]`, `yes`, `TRUE` and `1` the `true` of `[true]`.
#[test]
fn an_enum_of_a_typed_input_takes_the_converted_value() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "en.yaml",
        "name: en\ninputs:\n  - {name: e, type: integer, validation: {enum: [1, 2, 3]}}\n  \
         - {name: b, type: boolean, validation: {enum: [true]}, default: true}\nstates:\n  \
         initial: a\n  a: {type: step, command: 'echo e={{.inputs.e}} b={{.inputs.b}}', on_success: done}\n  \
         done: {type: terminal}\n",
    )
    .unwrap();
    for (e, b) in [("+2", "yes"), ("02", "TRUE"), ("2", "1")] {
        let r = sb
            .run(&[
                "run",
                "en.yaml",
                "-o",
                "buffered",
                "-i",
                &format!("e={e}"),
                "-i",
                &format!("b={b}"),
            ])
            .unwrap();
        assert_eq!(r.code, 0, "{e} {b}: {}{}", r.stdout, r.stderr);
        assert!(r.stdout.contains("e=2 b=true"), "{}", r.stdout);
    }
    let r = sb.run(&["run", "en.yaml", "-i", "e=4"]).unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("value \"4\" not in allowed values [1 2 3]"),
        "{}",
        r.stderr
    );
}

/// Issue 4: the read-only commands create nothing, so a data root that cannot be created
/// (here under a regular file: ENOTDIR even for root, which chmod does not stop) gives an
/// empty list; a write there says how to choose another data root.
#[test]
fn read_only_commands_create_nothing_and_write_failures_have_a_hint() {
    let mut sb = Sandbox::new().unwrap();
    sb.write("blocker", "a file, not a directory\n").unwrap();
    sb.write("hello.yaml", HELLO).unwrap();
    let root = sb.path().join("blocker/data");
    sb.set_env("XDG_DATA_HOME", &root.display().to_string());
    let h = sb.run(&["history"]).unwrap();
    assert_eq!(h.code, 0, "{}{}", h.stdout, h.stderr);
    let h = sb.run(&["history", "-f", "json"]).unwrap();
    assert_eq!(h.code, 0, "{}{}", h.stdout, h.stderr);
    let l = sb.run(&["resume", "--list"]).unwrap();
    assert_eq!(l.code, 0, "{}{}", l.stdout, l.stderr);
    let s = sb.run(&["history", "--stats"]).unwrap();
    assert_eq!(s.code, 0, "{}{}", s.stdout, s.stderr);
    // A run there is refused before anything of it runs (stop 43: it went on unrecorded,
    // exit 0), and the error says what to do.
    let r = sb.run(&["run", "hello.yaml"]).unwrap();
    assert_eq!(r.code, 4, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("the run's start could not be recorded")
            && r.stderr.contains("Hint: ")
            && r.stderr.contains("--storage DIR"),
        "{}",
        r.stderr
    );
    // A fresh data root is left as it was by the reads.
    let sb2 = Sandbox::new().unwrap();
    for args in [
        &["history"][..],
        &["resume", "--list"],
        &["history", "--stats"],
    ] {
        let r = sb2.run(args).unwrap();
        assert_eq!(r.code, 0, "{args:?}: {}{}", r.stdout, r.stderr);
    }
    assert!(
        !awf_tests::data(&sb2).exists(),
        "the reads created the data root"
    );
    // `awf init` where it cannot write says what to do (`.awf` a regular file: ENOTDIR).
    sb2.write(".awf", "a file\n").unwrap();
    let i = sb2.run(&["init"]).unwrap();
    assert_eq!(i.code, 4, "{}{}", i.stdout, i.stderr);
    assert!(
        i.stderr.contains("[SYSTEM.IO.WRITE_FAILED]")
            && i.stderr
                .contains("Hint: run `awf init` in a directory you can write"),
        "{}",
        i.stderr
    );
}

/// Issue 7: `max_iterations` past what a u32 holds is reported as written, not clamped.
#[test]
fn a_huge_max_iterations_is_reported_as_written() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "mi.yaml",
        "name: mi\nstates:\n  initial: l\n  l:\n    type: while\n    while: 'true'\n    \
         body: [b]\n    max_iterations: 99999999999\n    on_complete: done\n  \
         b: {type: step, command: 'true', on_success: l}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let v = sb.run(&["validate", "mi.yaml"]).unwrap();
    assert_eq!(v.code, 2, "{}{}", v.stdout, v.stderr);
    assert!(
        v.stderr
            .contains("max_iterations must be between 1 and 10000, got 99999999999"),
        "{}",
        v.stderr
    );
    assert!(!v.stderr.contains("4294967295"), "{}", v.stderr);
}

/// Issue 8: a run started over HTTP with the same unknown breakpoint many times gets one
/// warning for it (breaker: 100,000 identical warnings).
#[test]
fn duplicate_unknown_breakpoints_are_warned_about_once() {
    let sb = http_serve::sandbox_with(&[("hello", HELLO)]);
    let s = http_serve::start(&sb, &[]);
    let many: Vec<&str> = std::iter::repeat_n("x", 1000).chain(["y", "a"]).collect();
    let body = serde_json::json!({ "breakpoints": many }).to_string();
    let (code, body, _) =
        http_serve::post(&format!("{}/api/workflows/env/hello/run", s.base), &body);
    assert_eq!(code, 202, "{body}");
    let v = http_serve::json_of(&body);
    let warnings = v["body"]["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].as_str().unwrap().starts_with("breakpoint 'x'"),
        "{warnings:?}"
    );
    assert!(
        warnings[1].as_str().unwrap().starts_with("breakpoint 'y'"),
        "{warnings:?}"
    );
}

/// Issue 9: a `workflow_cancel` hook that outlives the time limit of cancel hooks is said
/// to be stopped by that limit, with its value.
#[test]
fn a_cancel_hook_stopped_by_its_time_limit_says_so() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "ch.yaml",
        "name: ch\nhooks:\n  workflow_cancel:\n    - command: 'sleep 30'\nstates:\n  initial: a\n  \
         a: {type: step, command: 'sleep 30', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let child = sb
        .cmd(&["run", "ch.yaml"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(
        std::process::Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains(
            "workflow_cancel hook stopped: cancel hooks may run for at most 10s after a cancel"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("`sleep 30` cancelled"), "{stderr}");
}

/// The state file of the run `id` of `sb`, edited by `edit` (on its JSON).
fn edit_state(sb: &Sandbox, id: &str, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = awf_tests::data(sb).join(format!("states/{id}.json"));
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// Issue 5: a state file whose `run_id` is not its file name's, or whose `schema_version`
/// is newer than awf reads, is refused with a clear error and a hint; nothing is resumed
/// under the other id.
#[test]
fn a_state_file_of_another_run_or_a_newer_format_is_refused() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "f.yaml",
        "name: f\nstates:\n  initial: a\n  a: {type: step, command: 'exit 3', on_success: done}\n  \
         done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "f.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let id = run_id(&r);
    edit_state(&sb, &id, |v| v["run_id"] = "other-id".into());
    let res = sb.run(&["resume", &id]).unwrap();
    assert_eq!(res.code, 4, "{}{}", res.stdout, res.stderr);
    assert!(
        res.stderr.contains(&format!(
            "it records run \"other-id\", not \"{id}\" (its file name)"
        )) && res
            .stderr
            .contains(&format!("Hint: set its \"run_id\" back to \"{id}\"")),
        "{}",
        res.stderr
    );
    let states = awf_tests::data(&sb).join("states");
    assert!(!states.join("other-id.json").exists());
    assert!(
        !awf_tests::data(&sb)
            .join("transcripts/other-id.jsonl")
            .exists()
    );
    edit_state(&sb, &id, |v| {
        v["run_id"] = id.clone().into();
        v["schema_version"] = 99.into();
    });
    let res = sb.run(&["resume", &id]).unwrap();
    assert_eq!(res.code, 4, "{}{}", res.stdout, res.stderr);
    assert!(
        res.stderr
            .contains("its schema_version is 99, newer than the 1 this awf reads")
            && res.stderr.contains("Hint: use the newer awf"),
        "{}",
        res.stderr
    );
}

/// Issue 6 (in part): a state file cut short says what to do with it.
#[test]
fn a_truncated_state_file_has_a_hint() {
    let sb = Sandbox::new().unwrap();
    sb.write("hello.yaml", HELLO).unwrap();
    let r = sb.run(&["run", "hello.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let id = run_id(&r);
    let path = awf_tests::data(&sb).join(format!("states/{id}.json"));
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, &text[..text.len() / 2]).unwrap();
    let st = sb.run(&["status", &id]).unwrap();
    assert_eq!(st.code, 4, "{}{}", st.stdout, st.stderr);
    assert!(
        st.stderr
            .contains("[SYSTEM.IO.READ_FAILED] cannot read the state file")
            && st
                .stderr
                .contains("Hint: the file is damaged (cut short or edited)")
            && st.stderr.contains(".broken"),
        "{}",
        st.stderr
    );
}
