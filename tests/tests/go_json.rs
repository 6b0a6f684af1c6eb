//! What scripts written for AWF (Go) parse: the JSON shapes of `validate`, `resume --list`,
//! `config show`, `status`, `history`, `list` and `list prompts`, the `-f table` / `-f quiet`
//! formats, and `awf history`'s full-width columns (issue 8). Expectations come from AWF
//! (Go)'s CLI code and integration tests (tests/integration/cli/**, commit 9971294).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use serde_json::Value;
use serde_json::json;

const OK: &str = "name: ok-wf\ndescription: passes\nversion: 1.2.0\ninputs:\n  - name: who\n    type: string\n    default: bob\nstates:\n  initial: a\n  a: {type: step, command: echo hi, on_success: b}\n  b: {type: step, command: echo there, on_success: done}\n  done: {type: terminal}\n";
const FAIL: &str = "name: fail-wf\nstates:\n  initial: a\n  a: {type: step, command: echo one, on_success: b}\n  b: {type: step, command: exit 5, on_success: done, on_failure: err}\n  done: {type: terminal}\n  err: {type: terminal, status: failure}\n";

fn sandbox() -> Sandbox {
    let sb = Sandbox::new().expect("sandbox");
    sb.write("wf/ok.yaml", OK).unwrap();
    sb.write("wf/fail.yaml", FAIL).unwrap();
    sb
}

/// Runs a workflow with `-f json` and returns its run id.
fn run_id(sb: &Sandbox, file: &str) -> String {
    let r = sb.run(&["run", file, "-f", "json"]).unwrap();
    r.json().unwrap()["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no run id: {}\n{}", r.stdout, r.stderr))
        .to_owned()
}

fn is_rfc3339(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        s.len() >= 20 && s.as_bytes()[4] == b'-' && s.as_bytes()[10] == b'T' && s.ends_with('Z')
    })
}

// ---- validate ------------------------------------------------------------------------------

#[test]
fn validate_json_echoes_the_identifier_and_lists_error_messages() {
    let sb = sandbox();
    let ok = sb.run(&["validate", "wf/ok.yaml", "-f", "json"]).unwrap();
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    let doc = ok.json().unwrap();
    assert_eq!(doc["valid"], json!(true));
    assert_eq!(doc["workflow"], json!("wf/ok.yaml"), "as typed: {doc}");
    assert!(
        doc.get("errors").is_none(),
        "errors is omitted when empty: {doc}"
    );

    sb.write(
        "wf/bad.yaml",
        "name: bad\nstates:\n  initial: start\n  start: {type: step, command: echo, on_success: proces}\n  process: {type: terminal}\n",
    )
    .unwrap();
    let bad = sb.run(&["validate", "wf/bad.yaml", "-f", "json"]).unwrap();
    assert_eq!(bad.code, 2);
    let doc = bad.json().unwrap();
    assert_eq!(doc["valid"], json!(false));
    assert_eq!(doc["workflow"], json!("wf/bad.yaml"));
    let errors = doc["errors"].as_array().expect("errors array");
    assert!(
        errors
            .iter()
            .any(|e| e.as_str().is_some_and(|s| s.contains("proces"))),
        "{doc}"
    );
}

#[test]
fn validate_json_of_a_missing_workflow_prints_go_s_error_object_on_stderr() {
    let sb = sandbox();
    let r = sb.run(&["validate", "nope", "-f", "json"]).unwrap();
    assert_eq!(r.code, 1);
    let err: Value = serde_json::from_str(&r.stderr).expect("stderr is one JSON object");
    assert_eq!(err["code"], json!(1));
    assert!(
        err["error"].as_str().unwrap().contains("not found"),
        "{err}"
    );
    assert!(
        err["error_code"].as_str().unwrap().starts_with("USER."),
        "{err}"
    );
}

#[test]
fn validate_quiet_and_table() {
    let sb = sandbox();
    let q = sb.run(&["validate", "wf/ok.yaml", "-f", "quiet"]).unwrap();
    assert_eq!((q.code, q.stdout.as_str()), (0, "valid\n"), "{}", q.stderr);
    sb.write(
        "wf/bad.yaml",
        "name: bad\nstates:\n  initial: a\n  a: {type: step, command: echo, on_success: nowhere}\n",
    )
    .unwrap();
    let q = sb.run(&["validate", "wf/bad.yaml", "-f", "quiet"]).unwrap();
    assert_eq!((q.code, q.stdout.as_str()), (2, "invalid\n"));
    let t = sb.run(&["validate", "wf/ok.yaml", "-f", "table"]).unwrap();
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert!(
        t.stdout.contains("| Workflow: ok-wf    Status: valid"),
        "{}",
        t.stdout
    );
    assert!(
        t.stdout
            .contains("| who             | string     | no         | bob                  |"),
        "{}",
        t.stdout
    );
    assert!(
        t.stdout
            .contains("| done            | terminal   | (terminal)           |")
    );
}

// ---- resume --list -------------------------------------------------------------------------

#[test]
fn resume_list_json_has_go_s_fields() {
    let sb = sandbox();
    assert_eq!(
        sb.run(&["resume", "--list", "-f", "json"]).unwrap().stdout,
        "[]\n"
    );
    let id = run_id(&sb, "wf/fail.yaml");
    let r = sb.run(&["resume", "--list", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let rows = r.json().unwrap();
    let row = &rows[0];
    assert_eq!(row["workflow_id"], json!(id), "{row}");
    assert_eq!(row["run_id"], json!(id));
    assert_eq!(row["workflow_name"], json!("fail-wf"));
    assert_eq!(row["status"], json!("failed"));
    assert_eq!(row["current_step"], json!("b"));
    assert_eq!(row["progress"], json!("1/2"));
    assert!(is_rfc3339(&row["updated_at"]), "{row}");

    let q = sb.run(&["resume", "--list", "-f", "quiet"]).unwrap();
    assert_eq!(q.stdout, format!("{id}\n"));
    let t = sb.run(&["resume", "--list", "-f", "table"]).unwrap();
    let lines: Vec<&str> = t.stdout.lines().collect();
    assert_eq!(
        lines[1],
        "| ID                                   | WORKFLOW        | STATUS     | CURRENT STEP    | PROGRESS     | UPDATED              |"
    );
    assert!(
        // Whole run ids (Go cuts them to 17 characters and `...`; see docs/compatibility.md).
        lines[3].starts_with(&format!("| {id} | fail-wf ")),
        "{}",
        t.stdout
    );
}

// ---- config show ---------------------------------------------------------------------------

#[test]
fn config_show_json_says_whether_the_file_exists() {
    let sb = sandbox();
    let none = sb.run(&["config", "show", "-f", "json"]).unwrap();
    assert_eq!(none.code, 0, "{}", none.stderr);
    let doc = none.json().unwrap();
    assert_eq!(doc["exists"], json!(false), "{doc}");
    assert_eq!(doc["path"], json!(".awf/config.yaml"));
    assert!(
        doc.get("inputs").is_none(),
        "no inputs key without a file: {doc}"
    );

    sb.write(".awf/config.yaml", "inputs:\n  project: p\n  count: 42\n")
        .unwrap();
    let doc = sb
        .run(&["config", "show", "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(doc["exists"], json!(true));
    assert_eq!(doc["path"], json!(".awf/config.yaml"));
    assert_eq!(doc["inputs"], json!({"project": "p", "count": 42}));

    let q = sb.run(&["config", "show", "-f", "quiet"]).unwrap();
    assert_eq!(q.stdout, "count\nproject\n");
    let t = sb.run(&["config", "show", "-f", "table"]).unwrap();
    assert!(
        t.stdout.starts_with("Config: .awf/config.yaml\n\n+-"),
        "{}",
        t.stdout
    );
    assert!(
        t.stdout
            .contains("| count                | 42                           |")
    );
}

// ---- status --------------------------------------------------------------------------------

#[test]
fn status_json_has_go_s_fields_and_status_words() {
    let sb = sandbox();
    let id = run_id(&sb, "wf/ok.yaml");
    let r = sb.run(&["status", &id, "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(doc["workflow_id"], json!(id), "{doc}");
    assert_eq!(doc["run_id"], json!(id));
    assert_eq!(doc["workflow_name"], json!("ok-wf"));
    assert_eq!(doc["status"], json!("completed"));
    assert!(is_rfc3339(&doc["started_at"]) && is_rfc3339(&doc["completed_at"]));
    let steps = doc["steps"].as_array().expect("steps");
    let names: Vec<&str> = steps.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a", "b"], "in start order: {doc}");
    assert_eq!(steps[0]["status"], json!("completed"));
    assert_eq!(steps[0]["output"], json!("hi\n"));

    let failed = run_id(&sb, "wf/fail.yaml");
    let doc = sb
        .run(&["status", &failed, "-f", "json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(doc["status"], json!("failed"), "{doc}");

    let q = sb.run(&["status", &id, "-f", "quiet"]).unwrap();
    assert_eq!(q.stdout, "completed\n");
    let t = sb.run(&["status", &id, "-f", "table"]).unwrap();
    assert!(
        // The whole run id (Go cuts it to 12 characters; see docs/compatibility.md).
        t.stdout.contains("| Workflow: ok-wf ") && t.stdout.contains(&format!("| ID: {id} ")),
        "{}",
        t.stdout
    );
    assert!(t.stdout.contains("| Status: completed "), "{}", t.stdout);
    assert!(
        t.stdout
            .contains("| STEP                 | STATUS     | DURATION   | ERROR")
    );
}

// ---- history -------------------------------------------------------------------------------

#[test]
fn history_json_names_the_run_as_workflow_id_with_go_s_times_and_words() {
    let sb = sandbox();
    let ok = run_id(&sb, "wf/ok.yaml");
    let failed = run_id(&sb, "wf/fail.yaml");
    let rows = sb.run(&["history", "-f", "json"]).unwrap().json().unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == json!(ok))
        .unwrap();
    assert_eq!(row["workflow_id"], json!(ok), "{row}");
    assert_eq!(row["run_id"], json!(ok));
    assert_eq!(row["workflow_name"], json!("ok-wf"));
    assert_eq!(row["status"], json!("completed"));
    assert!(
        is_rfc3339(&row["started_at"]) && is_rfc3339(&row["completed_at"]),
        "{row}"
    );

    for word in ["failed", "failure"] {
        let only = sb
            .run(&["history", "-f", "json", "-s", word])
            .unwrap()
            .json()
            .unwrap();
        let ids: Vec<&Value> = only.as_array().unwrap().iter().map(|r| &r["id"]).collect();
        assert_eq!(ids, [&json!(failed)], "--status {word}");
        assert_eq!(only[0]["status"], json!("failed"));
    }
    let done = sb
        .run(&["history", "-f", "json", "--status", "completed"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(done.as_array().map(Vec::len), Some(1));
}

#[test]
fn history_shows_full_ids_and_long_names_in_go_s_columns() {
    let sb = sandbox();
    let long = "deploy-production-multi-region-failover";
    sb.write(
        "wf/long.yaml",
        &format!("name: {long}\nstates:\n  initial: a\n  a: {{type: step, command: 'true', on_success: done}}\n  done: {{type: terminal}}\n"),
    )
    .unwrap();
    let id = run_id(&sb, "wf/long.yaml");
    for format in ["text", "table", "quiet"] {
        let r = sb.run(&["history", "-f", format]).unwrap();
        assert_eq!(r.code, 0, "{}", r.stderr);
        let lines: Vec<&str> = r.stdout.lines().collect();
        let header: Vec<&str> = lines[0].split_whitespace().collect();
        assert_eq!(
            header,
            ["ID", "WORKFLOW", "STATUS", "DURATION", "COMPLETED"],
            "{format}"
        );
        let dashes: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            dashes,
            ["--", "--------", "------", "--------", "---------"]
        );
        assert!(
            lines[2].starts_with(&format!("{id}  {long}  completed")),
            "{}",
            r.stdout
        );
        assert!(
            !r.stdout.contains("...") && !r.stdout.contains('…'),
            "{}",
            r.stdout
        );
    }
    let empty = Sandbox::new().unwrap();
    assert_eq!(
        empty.run(&["history"]).unwrap().stdout,
        "No execution history found\n"
    );
}

#[test]
fn history_stats_text_uses_go_s_labels() {
    let sb = sandbox();
    run_id(&sb, "wf/ok.yaml");
    run_id(&sb, "wf/fail.yaml");
    let r = sb.run(&["history", "--stats"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    for line in [
        "Execution Statistics",
        "====================",
        "Total Executions: 2",
        "Success: 1",
        "Failed: 1",
        "Cancelled: 0",
    ] {
        assert!(
            r.stdout.lines().any(|l| l == line),
            "{line} in:\n{}",
            r.stdout
        );
    }
    assert!(r.stdout.contains("Average Duration: "), "{}", r.stdout);
}

// ---- list, list prompts --------------------------------------------------------------------

#[test]
fn list_quiet_prints_names_and_table_is_bordered() {
    let mut sb = sandbox();
    let dir = sb.path().join("wf").display().to_string();
    sb.set_env("AWF_WORKFLOWS_PATH", &dir);
    let q = sb.run(&["list", "-f", "quiet"]).unwrap();
    assert_eq!(q.stdout, "fail\nok\n", "{}", q.stderr);
    let t = sb.run(&["list", "-f", "table"]).unwrap();
    let lines: Vec<&str> = t.stdout.lines().collect();
    assert_eq!(
        lines[0],
        "+----------------------+------------+------------+------------------------------------------+"
    );
    assert_eq!(
        lines[1],
        "| NAME                 | SOURCE     | VERSION    | DESCRIPTION                              |"
    );
    assert!(lines.contains(
        &"| ok                   | env        | 1.2.0      | passes                                   |"
    ));
    let rows = sb.run(&["list", "-f", "json"]).unwrap().json().unwrap();
    assert_eq!(rows[1]["name"], json!("ok"));
    assert_eq!(rows[1]["source"], json!("env"));
    assert_eq!(rows[1]["version"], json!("1.2.0"));
    assert_eq!(rows[1]["description"], json!("passes"));
}

#[test]
fn list_prompts_shows_the_prompt_search_path() {
    let sb = sandbox();
    sb.write(".awf/prompts/ai/agents/claude.md", "abc").unwrap();
    sb.write(".awf/prompts/review.txt", "review this\n")
        .unwrap();
    sb.write("config/awf/prompts/global.md", "g").unwrap();
    // The local copy wins over a global file of the same name.
    sb.write("config/awf/prompts/review.txt", "global review")
        .unwrap();

    let r = sb.run(&["list", "prompts", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let rows = r.json().unwrap();
    let got: Vec<(&str, &str, u64)> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["source"].as_str().unwrap(),
                p["name"].as_str().unwrap(),
                p["size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("global", "global.md", 1),
            ("local", "ai/agents/claude.md", 3),
            ("local", "review.txt", 12)
        ]
    );
    assert_eq!(rows[1]["path"], json!(".awf/prompts/ai/agents/claude.md"));
    let mod_time = rows[1]["mod_time"].as_str().unwrap();
    assert_eq!((mod_time.len(), &mod_time[10..11]), (19, " "), "{mod_time}");

    let text = sb.run(&["list", "p"]).unwrap();
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["NAME", "SOURCE", "SIZE", "MODIFIED"]
    );
    assert!(
        lines[2].starts_with("ai/agents/claude.md  local   3 B "),
        "{}",
        text.stdout
    );
    let quiet = sb.run(&["list", "p", "-f", "quiet"]).unwrap();
    assert_eq!(quiet.stdout, "global.md\nai/agents/claude.md\nreview.txt\n");
    let table = sb.run(&["list", "prompts", "-f", "table"]).unwrap();
    assert!(
        table
            .stdout
            .contains("| review.txt                     | local    | 12 B       |"),
        "{}",
        table.stdout
    );
}

#[test]
fn list_prompts_with_none_says_where_it_looked() {
    let sb = Sandbox::new().unwrap();
    let r = sb.run(&["list", "prompts"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.starts_with("No prompts found\nSearch paths:\n"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("  - .awf/prompts (local)\n"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("awf init"), "{}", r.stdout);
    assert_eq!(sb.run(&["list", "p", "-f", "json"]).unwrap().stdout, "[]\n");
}

// ---- JSON errors ---------------------------------------------------------------------------

#[test]
fn a_usage_error_of_a_listing_command_is_a_json_error_on_stderr() {
    let sb = sandbox();
    let r = sb.run(&["history", "--bogus", "-f", "json"]).unwrap();
    assert_eq!(r.code, 1);
    assert_eq!(r.stdout, "", "stdout stays empty");
    let err: Value = serde_json::from_str(&r.stderr).expect("stderr is one JSON object");
    assert_eq!(err["code"], json!(1));
    assert!(err["error"].as_str().unwrap().contains("--bogus"), "{err}");
    assert_eq!(err["error_code"], json!("USER.INPUT.INVALID_FORMAT"));
    // Status of an unknown run: the JSON error on stderr, exit 1 (AWF (Go) exits 0: a bug).
    let r = sb.run(&["status", "nope", "-f", "json"]).unwrap();
    assert_eq!((r.code, r.stdout.as_str()), (1, ""));
    let err: Value = serde_json::from_str(&r.stderr).unwrap();
    assert_eq!(err["code"], json!(1));
    assert!(err["error"].as_str().unwrap().contains("nope"), "{err}");
}
