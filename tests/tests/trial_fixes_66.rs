//! A breaker's trial, over the real binary: hooks do not get the workflow's inputs as
//! environment variables (as in AWF (Go)), so `awf validate` warns at a hook command that
//! reads one (`$log`); every failure of `awf resume -f json` before the resumed run starts
//! is the run-result object `awf run -f json` prints for a failure before start; `awf
//! mcp-serve` refuses a tool call whose arguments repeat a key, as the HTTP API does.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use awf_tests::Sandbox;
use awf_tests::mcp::RawServer;
use pretty_assertions::assert_eq;
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
