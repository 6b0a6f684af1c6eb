//! Small defects found by a breaker round (mocks, printed hints, HTTP bodies, `file_exists`),
//! fixed in stop 38, over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

const TWO_STEPS: &str = "name: m\nstates:\n  initial: a\n  a: {type: step, command: 'echo real', on_success: done, on_failure: bad}\n  bad: {type: terminal, status: failure}\n  done: {type: terminal}\n";

/// A mock's `status` is `failed` or `completed` (any case); any other value is refused with
/// the accepted values in the hint (breaker: `status=fail`, `status=error`, `status=skipped`,
/// `status='failed '`, `status=` answered the step as succeeded).
#[test]
fn a_mock_status_other_than_failed_or_completed_is_refused() {
    let sb = Sandbox::new().unwrap();
    sb.write("wf.yaml", TWO_STEPS).unwrap();
    for bad in ["fail", "error", "skipped", "failed ", "", " completed"] {
        let flag = format!("states.a.status={bad}");
        let r = sb.run(&["run", "wf.yaml", "--mock", &flag]).unwrap();
        assert_eq!(r.code, 1, "{bad:?}: {}{}", r.stdout, r.stderr);
        assert!(
            r.stderr.contains("USER.INPUT.INVALID_FORMAT"),
            "{bad:?}: {}",
            r.stderr
        );
        assert!(
            r.stderr.contains(&format!("not {bad:?}")),
            "{bad:?}: {}",
            r.stderr
        );
        assert!(
            r.stderr.contains("status=failed") && r.stderr.contains("status=completed"),
            "{bad:?}: {}",
            r.stderr
        );
        assert!(!r.stdout.contains('✓'), "{bad:?}: {}", r.stdout);
        // `--dry-run` refuses it too.
        let d = sb
            .run(&["run", "wf.yaml", "--dry-run", "--mock", &flag])
            .unwrap();
        assert_eq!(d.code, 1, "{bad:?}: {}{}", d.stdout, d.stderr);
    }
    // The values that mean something still work, in any case.
    let r = sb
        .run(&["run", "wf.yaml", "--mock", "states.a.status=FAILED"])
        .unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let r = sb
        .run(&[
            "run",
            "wf.yaml",
            "--mock",
            "states.a.status=Completed",
            "--mock",
            "states.a.output=mocked",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
}

/// `awf resume` of a run started with `--mock` answers the steps still to run with the
/// original run's mocks (breaker: they ran for real, the mocks were not kept with the run).
#[test]
fn resume_applies_the_mocks_of_the_run_it_continues() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "wf.yaml",
        "name: rm\nstates:\n  initial: a\n  a: {type: step, command: 'echo A-real', on_success: b}\n  b: {type: step, command: 'test -f go', on_success: c, on_failure: bad}\n  c: {type: step, command: 'touch c-ran; echo C-real', on_success: done}\n  bad: {type: terminal, status: failure}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb
        .run(&[
            "run",
            "wf.yaml",
            "-f",
            "json",
            "--mock",
            "states.a.output=A-mocked",
            "--mock",
            "states.c.output=C-mocked",
        ])
        .unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let doc = r.json().unwrap();
    let id = doc["run_id"].as_str().unwrap().to_owned();
    sb.write("go", "").unwrap();
    let r = sb.run(&["resume", &id, "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        !sb.path().join("c-ran").exists(),
        "the mocked step c ran for real on resume: {}{}",
        r.stdout,
        r.stderr
    );
    let doc = r.json().unwrap();
    let out = doc.to_string();
    assert!(out.contains("C-mocked"), "{doc:#}");
    assert!(!out.contains("C-real"), "{doc:#}");
}

/// Printed command hints quote every name that is not a plain word, as a user would type it:
/// the states `--from` takes are listed with the odd ones quoted (breaker: `it's $(x)` raw).
/// (An input named `in put` was hinted `--input in put=<value>`; such a name is now refused
/// by `awf validate` and the run, trial_fixes_46, and every input name is a plain word.)
#[test]
fn hints_quote_input_and_state_names_that_are_not_plain_words() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "wf.yaml",
        "name: q\ninputs:\n  - {name: \"in-put\", type: string, required: true}\nstates:\n  initial: a\n  a: {type: step, command: 'test -f go', on_success: done, on_failure: bad}\n  \"it's $(x)\": {type: step, command: 'true', on_success: done}\n  bad: {type: terminal, status: failure}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "wf.yaml"]).unwrap();
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("Hint: pass the missing inputs: --input in-put=<value>\n"),
        "{}",
        r.stderr
    );
    let r = sb
        .run(&["run", "wf.yaml", "-i", "in-put=1", "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let id = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    let r = sb.run(&["resume", &id, "--from", "nope"]).unwrap();
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("one of its states: a, 'it'\\''s $(x)'\n"),
        "{}",
        r.stderr
    );
}

/// `awf serve`: a JSON body in UTF-16 or UTF-32 without a byte-order mark is a 400 that names
/// its encoding, found from the NUL bytes around its first characters (RFC 4627 §3), with the
/// hint to send UTF-8 (breaker: "key must be a string at line 1 column 2").
#[test]
fn a_json_body_in_utf16_or_utf32_without_a_mark_is_named() {
    use awf_tests::http_serve::add_workflows;
    use awf_tests::http_serve::curl;
    use awf_tests::http_serve::json_of;
    use awf_tests::http_serve::start;
    let mut sb = Sandbox::new().unwrap();
    add_workflows(&mut sb, &[("two", TWO_STEPS)]);
    let text = "{\"inputs\": {}}";
    let bodies: [(&str, Vec<u8>); 5] = [
        (
            "UTF-16LE",
            text.encode_utf16().flat_map(u16::to_le_bytes).collect(),
        ),
        (
            "UTF-16BE",
            text.encode_utf16().flat_map(u16::to_be_bytes).collect(),
        ),
        (
            "UTF-32LE",
            text.chars()
                .flat_map(|c| u32::from(c).to_le_bytes())
                .collect(),
        ),
        (
            "UTF-32BE",
            text.chars()
                .flat_map(|c| u32::from(c).to_be_bytes())
                .collect(),
        ),
        (
            "UTF-32LE",
            [0xFF, 0xFE, 0, 0]
                .into_iter()
                .chain(text.chars().flat_map(|c| u32::from(c).to_le_bytes()))
                .collect(),
        ),
    ];
    for (i, (_, bytes)) in bodies.iter().enumerate() {
        std::fs::write(sb.path().join(format!("b{i}.json")), bytes).unwrap();
    }
    let s = start(&sb, &[]);
    for (i, (encoding, _)) in bodies.iter().enumerate() {
        let data = format!("@{}", sb.path().join(format!("b{i}.json")).display());
        let (code, body, _) = curl(&[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data-binary",
            &data,
            &format!("{}/api/workflows/env/two/run", s.base),
        ]);
        assert_eq!(code, 400, "{encoding}: {body}");
        let p = json_of(&body);
        let detail = p["detail"].as_str().unwrap();
        assert!(
            detail.contains(&format!("the request body is {encoding} text")),
            "{encoding}: {p}"
        );
        assert!(!detail.contains("key must be a string"), "{encoding}: {p}");
        assert_eq!(
            p["hints"][0], "send the body encoded as UTF-8",
            "{encoding}: {p}"
        );
    }
}

/// A `file_exists` input given a path through a file (`fe.yaml/`, fe.yaml a file) says that
/// file is not a directory (breaker: "file does not exist").
#[test]
fn file_exists_says_a_path_goes_through_a_file() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "wf.yaml",
        "name: fe\ninputs:\n  - {name: f, type: string, required: true, validation: {file_exists: true}}\nstates:\n  initial: a\n  a: {type: step, command: 'echo ok', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    sb.write("fe.yaml", "x: 1\n").unwrap();
    for given in ["fe.yaml/", "fe.yaml/inner.txt"] {
        let flag = format!("f={given}");
        let r = sb.run(&["run", "wf.yaml", "-i", &flag]).unwrap();
        assert_eq!(r.code, 1, "{given}: {}{}", r.stdout, r.stderr);
        assert!(
            r.stderr.contains("fe.yaml is a file, not a directory"),
            "{given}: {}",
            r.stderr
        );
        assert!(
            !r.stderr.contains("does not exist"),
            "{given}: {}",
            r.stderr
        );
    }
    // A missing file is still "does not exist", and the file itself passes.
    let r = sb.run(&["run", "wf.yaml", "-i", "f=nope.yaml"]).unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("file does not exist: nope.yaml"),
        "{}",
        r.stderr
    );
    let r = sb.run(&["run", "wf.yaml", "-i", "f=fe.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
}
