//! A breaker's trial, over the real binary: hooks do not get the workflow's inputs as
//! environment variables (as in AWF (Go)), so `awf validate` warns at a hook command that
//! reads one (`$log`); every failure of `awf resume -f json` before the resumed run starts
//! is the run-result object `awf run -f json` prints for a failure before start; `awf
//! mcp-serve` refuses a tool call whose arguments repeat a key, as the HTTP API does.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use awf_tests::Sandbox;
use awf_tests::mcp::RawServer;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

/// Item 3: a tool call's arguments with a repeated key were read as the last value (`who`
/// = "Bob"), while the HTTP API refuses such a body with a 400. Now the call is a tool error
/// naming the key, and the workflow does not run.
#[test]
fn mcp_tool_call_arguments_that_repeat_a_key_are_a_tool_error_naming_it() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "wf/greet.yaml",
        "name: greet\ninputs:\n  - name: who\n    type: string\n    required: true\nstates:\n  initial: a\n  a: {type: step, command: 'echo \"hi $who\" > greeted', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let mut server = RawServer::spawn(sb.cmd(&["mcp-serve", "--workflows", "wf"]));
    let init = server.initialize("2025-06-18");
    assert!(init.get("result").is_some(), "{init}");
    server.send(
        br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"greet","arguments":{"who":"Ada","who":"Bob"}}}
"#,
    );
    let answer = server.recv();
    assert_eq!(answer["id"], 7, "{answer}");
    let result = &answer["result"];
    assert_eq!(result["isError"], true, "{answer}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with(
            "[USER.INPUT.VALIDATION_FAILED] the tool call's arguments repeat the key \"who\" (at /who)"
        ),
        "{answer}"
    );
    assert!(text.contains("Hint: send each key once"), "{answer}");
    assert!(!sb.path().join("greeted").exists(), "the workflow ran");

    // Nested: the pointer says where.
    server.send(
        br#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"greet","arguments":{"who":"Ada","x":[{"k":1,"k":2}]}}}
"#,
    );
    let answer = server.recv();
    assert_eq!(answer["id"], 8, "{answer}");
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("key \"k\" (at /x/0/k)"), "{answer}");

    // Elsewhere in a request: an invalid request naming the key.
    server.send(
        br#"{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{},"params":{}}
"#,
    );
    let answer = server.recv();
    assert_eq!(answer["id"], 9, "{answer}");
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("repeats the key \"params\" (at /params)"),
        "{answer}"
    );

    // Keys once: the call runs.
    let ok = server.call(10, "greet", &json!({"who": "Ada"}));
    assert_eq!(ok["result"]["isError"], false, "{ok}");
    assert_eq!(
        std::fs::read_to_string(sb.path().join("greeted")).unwrap(),
        "hi Ada\n"
    );
    let _ = server.close();
}

/// The keys of `awf run -f json`'s result for a failure before start (a workflow that does
/// not exist), sorted.
fn run_failure_keys(sb: &Sandbox) -> Vec<String> {
    let r = sb.run(&["run", "no-such-workflow", "-f", "json"]).unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(doc["status"], "failure", "{doc}");
    let mut keys: Vec<String> = doc.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    keys
}

/// `awf resume -f json`'s failure: the run-result object on stdout (nothing of it on
/// stderr), with `awf run -f json`'s keys for a failure before start.
fn resume_failure(sb: &Sandbox, args: &[&str], keys: &[String]) -> Value {
    let r = sb.run(args).unwrap();
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(!r.stderr.contains("\"error_code\""), "{}", r.stderr);
    let doc = r
        .json()
        .unwrap_or_else(|e| panic!("{e}: stdout {} stderr {}", r.stdout, r.stderr));
    let mut got: Vec<String> = doc.as_object().unwrap().keys().cloned().collect();
    got.sort();
    assert_eq!(got, keys, "{doc}");
    assert_eq!(doc["status"], "failure", "{doc}");
    assert_eq!(doc["exit_code"], r.code, "{doc}");
    doc
}

/// Item 2: "still running in another awf process", "no run with id" and a missing state
/// file were the error object (`{"error","code","error_code","hints"}`) on stderr, while a
/// refused sub-workflow's run was the run-result object on stdout. Every failure of `awf
/// resume -f json` before the resumed run starts is now the run-result object.
#[test]
fn resume_json_failures_before_the_run_starts_are_the_run_result_object() {
    let sb = Sandbox::new().unwrap();
    let keys = run_failure_keys(&sb);

    // No run with that id.
    let doc = resume_failure(&sb, &["resume", "no-such-run", "-f", "json"], &keys);
    assert_eq!(doc["error"]["code"], "USER.FACADE.RUN_NOT_FOUND", "{doc}");
    assert_eq!(doc["run_id"], Value::Null, "{doc}");

    // Still running in another awf process.
    sb.write(
        "long.yaml",
        "name: long\nstates:\n  initial: a\n  a: {type: step, command: 'sleep 3666', on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let mut child = sb
        .cmd(&["run", "long.yaml"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let id = awf_tests::wait_for_state(&sb, "the run to be at a", |v| {
        v["status"] == "running" && v["current_state"] == "a"
    });
    let doc = resume_failure(&sb, &["resume", &id, "-f", "json"], &keys);
    assert_eq!(doc["run_id"], id.as_str(), "{doc}");
    assert_eq!(doc["workflow"], "long.yaml", "{doc}");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("still running in another awf process"),
        "{doc}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    sb.kill_processes(Some("sleep 3666"));

    // A run whose state file is gone (known to the history only).
    let r = sb
        .run_workflow(
            "fail.yaml",
            "name: fail\nstates:\n  initial: a\n  a: {type: step, command: 'exit 3', on_success: done}\n  done: {type: terminal}\n",
            &["-f", "json"],
        )
        .unwrap();
    let failed = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    let states = awf_tests::data(&sb).join("states");
    for e in std::fs::read_dir(&states).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with(&failed) {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    let doc = resume_failure(&sb, &["resume", &failed, "-f", "json"], &keys);
    assert_eq!(doc["run_id"], failed.as_str(), "{doc}");
    assert!(
        doc["error"]["code"].as_str().unwrap().contains('.'),
        "{doc}"
    );
}

/// Item 1: a hook's `command: 'echo "[$log]"'` printed `[]` where a step's printed the
/// input's value (hooks get no input environment variables, as in AWF (Go): spec workflow.md
/// §1.10), and `awf validate` said nothing. It now warns at the hook, with the fix, and the
/// fix works.
#[test]
fn validate_warns_at_a_hook_command_reading_an_input_variable() {
    let sb = Sandbox::new().unwrap();
    let yaml = |hook: &str| {
        format!(
            "name: h\ninputs:\n  - name: log\n    type: string\n    default: val\nhooks:\n  workflow_start:\n    - command: '{hook}'\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'echo \"[$log]\" > step.txt'\n    on_success: done\n  done: {{type: terminal}}\n"
        )
    };
    sb.write("h.yaml", &yaml("echo \"[$log]\" > start.txt"))
        .unwrap();
    let r = sb.run(&["validate", "h.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "a warning only: {}", r.stdout);
    assert!(r.stdout.contains("reads $log"), "{}", r.stdout);
    let text = sb.run(&["validate", "h.yaml"]).unwrap();
    assert!(
        text.stdout.contains("hooks.workflow_start.0.command")
            || text.stderr.contains("hooks.workflow_start.0.command")
            || text.stdout.contains("h.yaml:8")
            || text.stderr.contains("h.yaml:8"),
        "{}{}",
        text.stdout,
        text.stderr
    );
    assert!(
        format!("{}{}", text.stdout, text.stderr).contains("log={{shell_quote .inputs.log}}; …"),
        "{}{}",
        text.stdout,
        text.stderr
    );
    // What it warns about: the hook does not see the input, the step does.
    let run = sb.run(&["run", "h.yaml", "-q"]).unwrap();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        std::fs::read_to_string(sb.path().join("start.txt")).unwrap(),
        "[]\n"
    );
    assert_eq!(
        std::fs::read_to_string(sb.path().join("step.txt")).unwrap(),
        "[val]\n"
    );

    // The hint's fix: no warning, and the hook sees the value.
    sb.write(
        "h.yaml",
        &yaml("log={{shell_quote .inputs.log}}; echo \"[$log]\" > start.txt"),
    )
    .unwrap();
    let r = sb.run(&["validate", "h.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        !format!("{}{}", r.stdout, r.stderr).contains("reads $log"),
        "{}{}",
        r.stdout,
        r.stderr
    );
    let run = sb.run(&["run", "h.yaml", "-q"]).unwrap();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        std::fs::read_to_string(sb.path().join("start.txt")).unwrap(),
        "[val]\n"
    );
}
