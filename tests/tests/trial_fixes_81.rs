//! Fixes of a trial's finding on secret masking of step output (helper `fixmask`), over the
//! real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

/// What masking makes of `text` made of copies of `unit` under the secret `unit` twice over:
/// every occurrence is hidden and overlapping ones merge into one `***`, so a run of at least
/// one whole secret is one `***` and what is left after it (less than a secret) stays.
fn expected(text: &str, secret: &str) -> String {
    let Some(first) = text.find(secret) else {
        return text.to_owned();
    };
    // The text is periodic: the occurrences overlap from the first to the last.
    let last = text.rfind(secret).unwrap();
    format!("{}***{}", &text[..first], &text[last + secret.len()..])
}

/// Finding (HIGH): masking a step's output was quadratic when overlapping copies of a
/// secret filled it (`MY_SECRET=aaaa` and 524 KB of `a`: 69 s; 100 MB never finished, and
/// SIGTERM waited for it). One pass now: 2 MB of `a` and 600 KB of `ab` under `abab` are
/// masked whole and the run succeeds (the test finishing is the proof: no timing asserted).
#[test]
fn output_full_of_overlapping_copies_of_a_secret_is_masked_whole() {
    for (secret, command, text) in [
        (
            "aaaa",
            "head -c 2000000 /dev/zero | tr '\\0' 'a'",
            "a".repeat(2_000_000),
        ),
        (
            "abab",
            "yes ab | head -n 300000 | tr -d '\\n'",
            "ab".repeat(300_000),
        ),
        (
            "aaaa",
            "head -c 2000000 /dev/zero | tr '\\0' 'a'; printf 'b aaa'",
            "a".repeat(2_000_000) + "b aaa",
        ),
    ] {
        let mut sb = Sandbox::new().unwrap();
        sb.set_env("MY_SECRET", secret);
        let yaml = format!(
            "name: big\nstates:\n  initial: a\n  a:\n    type: step\n    command: \"{}\"\n    on_success: done\n  done:\n    type: terminal\n",
            command.replace('\\', "\\\\")
        );
        let run = sb.run_workflow("wf.yaml", &yaml, &["-f", "json"]).unwrap();
        assert_eq!(run.code, 0, "{}", run.stderr);
        let want = expected(&text, secret);
        assert!(want.len() < 10, "{want}");
        let v = run.json().unwrap();
        assert_eq!(
            v["states"]["a"]["output"],
            want.as_str(),
            "{secret}: {command}"
        );
        assert!(!run.stdout.contains(secret), "{secret}: {command}");
    }
}
