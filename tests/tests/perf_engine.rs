//! End-to-end checks of what the engine performance work changed (issue 9): the records of a
//! run stay complete and readable now that the history's WAL is kept between runs, the final
//! flush syncs its files side by side, and the transcript lines are written field by field.
//! No timing is asserted here: the figures live in `benches/peers.py`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use awf_tests::Sandbox;
use awf_tests::data;
use serde_json::Value;
use serde_json::json;

const CHAIN: &str = "name: chain
states:
  initial: a
  a:
    type: step
    command: 'echo one; echo \"two \\\"quoted\\\"\" >&2'
    on_success: b
  b:
    type: step
    command: 'true;'
    on_success: done
  done:
    type: terminal
";

fn run_id(sb: &Sandbox, file: &str) -> String {
    let r = sb.run(&["run", file, "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.json().unwrap()["run_id"].as_str().unwrap().to_owned()
}

/// Three runs in a row: the WAL stays beside the database (no checkpoint when a run's
/// connections close), every run is in the history with its final status, each run's audit
/// pair and transcript are whole, and the state file of the first run still loads.
#[test]
fn records_stay_whole_and_readable_with_the_wal_kept_between_runs() {
    let sb = Sandbox::new().unwrap();
    sb.write("chain.yaml", CHAIN).unwrap();
    let first = run_id(&sb, "chain.yaml");
    assert!(
        data(&sb).join("history.db-wal").exists(),
        "the WAL is kept after the run"
    );
    let ids = [
        first.clone(),
        run_id(&sb, "chain.yaml"),
        run_id(&sb, "chain.yaml"),
    ];

    let rows = sb.run(&["history", "-f", "json"]).unwrap().json().unwrap();
    for id in &ids {
        let row = rows
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == json!(id))
            .unwrap_or_else(|| panic!("run {id} missing from {rows}"));
        assert_eq!(row["status"], json!("completed"), "{row}");
    }

    let audit = std::fs::read_to_string(data(&sb).join("audit.jsonl")).unwrap();
    let events: Vec<(String, String)> = audit
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["execution_id"].as_str().unwrap_or_default().to_owned(),
                v["event"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    for id in &ids {
        let mine: Vec<&str> = events
            .iter()
            .filter(|(e, _)| e == id)
            .map(|(_, k)| k.as_str())
            .collect();
        assert_eq!(
            mine,
            ["workflow.started", "workflow.completed"],
            "run {id}: {audit}"
        );
    }

    for id in &ids {
        let path = data(&sb).join("transcripts").join(format!("{id}.jsonl"));
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let seqs: Vec<u64> = lines.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "{text}");
        let kinds: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
        assert_eq!(kinds.first(), Some(&"run.started"), "{text}");
        assert_eq!(kinds.last(), Some(&"run.completed"), "{text}");
        for l in &lines {
            assert_eq!(l["run_id"], json!(id), "{l}");
            let keys: Vec<&str> = l.as_object().unwrap().keys().map(String::as_str).collect();
            assert_eq!(
                keys,
                ["seq", "run_id", "type", "path", "timestamp", "payload"],
                "{l}"
            );
        }
        let stderr_line = lines
            .iter()
            .find(|l| {
                l["type"] == json!("step.output") && l["payload"]["stream"] == json!("stderr")
            })
            .unwrap_or_else(|| panic!("no stderr line in {text}"));
        assert_eq!(stderr_line["payload"]["text"], json!("two \"quoted\"\n"));
    }

    let status = sb
        .run(&["status", &first, "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(status["status"], json!("completed"), "{status}");
}
