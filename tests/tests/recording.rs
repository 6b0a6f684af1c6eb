//! What a run leaves on disk (issue 9): no lock file after it, and a state file that holds the
//! whole run once it ended (the journal written while it ran is folded in and removed).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

const WF: &str = "name: three\nstates:\n  initial: a\n  a: {type: step, command: 'true', on_success: b}\n  b: {type: step, command: 'echo hi', on_success: c}\n  c: {type: step, command: 'true', on_success: done}\n  done: {type: terminal}\n";

fn files(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn a_finished_run_leaves_no_lock_file_and_no_journal() {
    for record in [None, Some("off")] {
        let mut sb = Sandbox::new().unwrap();
        if let Some(r) = record {
            sb.set_env("AWF_RECORD", r);
        }
        let wf = sb.write("wf.yaml", WF).unwrap();
        let r = sb
            .run(&["run", wf.to_str().unwrap(), "-f", "json"])
            .unwrap();
        assert_eq!(r.code, 0, "{}", r.stderr);
        let root = sb.path().join("data/awf");
        let locks = files(&root.join("locks"));
        assert!(locks.is_empty(), "{record:?}: {locks:?}");
        if record.is_none() {
            let id = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
            assert_eq!(files(&root.join("states")), [format!("{id}.json")]);
            let text = std::fs::read_to_string(root.join(format!("states/{id}.json"))).unwrap();
            let snap: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(snap["states"].as_object().unwrap().len(), 3, "{snap}");
            // Resuming it again takes and releases the lock the same way.
            let again = sb.run(&["resume", &id]).unwrap();
            assert!(files(&root.join("locks")).is_empty(), "{}", again.stderr);
        }
    }
}
