//! `awf acp-serve` fixes found by trial users, over the built binary and real workflow files:
//! unknown `key=value` inputs named with a did-you-mean, workflows that fail validation left
//! out of the slash commands (and said on stderr), free text without a default workflow
//! listing the commands, and `session/load`'s replay keeping step titles and raw inputs.
//! Source: shared/spec/acp.md §2.4, §2.8.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use awf_tests::acp::Acp;
use awf_tests::acp::said;
use serde_json::Value;
use serde_json::json;

const ECHO: &str = "name: input-echo\ndescription: Echo a message\ninputs:\n  - name: message\n    type: string\n    default: hello\nstates:\n  initial: echo\n  echo:\n    type: step\n    description: Say it\n    command: echo \"{{.inputs.message}}\"\n    on_success: done\n  done:\n    type: terminal\n";
/// Loads, but `on_success` names a state that does not exist: `awf validate` refuses it.
const BROKEN: &str = "name: broken\ndescription: Broken\nstates:\n  initial: go\n  go:\n    type: step\n    command: \"true\"\n    on_success: nowhere\n  done:\n    type: terminal\n";

fn sandbox() -> Sandbox {
    let mut sb = Sandbox::new().unwrap();
    sb.write("wf/input-echo.yaml", ECHO).unwrap();
    sb.write("wf/broken.yaml", BROKEN).unwrap();
    let wf = sb.path().join("wf").display().to_string();
    sb.set_env("AWF_WORKFLOWS_PATH", &wf);
    sb
}

fn updates(frames: &[Value]) -> Vec<&Value> {
    frames
        .iter()
        .filter(|f| f["method"] == "session/update")
        .map(|f| &f["params"]["update"])
        .collect()
}

#[test]
fn an_unknown_input_is_named_with_a_did_you_mean_and_nothing_runs() {
    let sb = sandbox();
    let mut acp = Acp::start(&sb);
    let (_, r) = acp.call(
        "session/new",
        json!({"cwd": sb.path().display().to_string(), "mcpServers": []}),
    );
    let sid = r["result"]["sessionId"].as_str().unwrap().to_owned();
    let (before, r) = acp.prompt(&sid, "/input-echo mesage=typo");
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let t = said(&before);
    assert!(
        t.contains("no input `mesage`") && t.contains("did you mean `message`"),
        "{t}"
    );
    assert!(
        updates(&before)
            .iter()
            .all(|u| u["sessionUpdate"] != "tool_call"),
        "the workflow must not run: {before:?}"
    );
    // The right name runs.
    let (before, _) = acp.prompt(&sid, "/input-echo message=fine");
    assert!(said(&before).contains("fine"), "{before:?}");
}

#[test]
fn invalid_workflows_are_left_out_of_the_commands_and_prompting_one_gives_its_error() {
    let sb = sandbox();
    let mut acp = Acp::start(&sb);
    let (after, r) = {
        let (_, r) = acp.call(
            "session/new",
            json!({"cwd": sb.path().display().to_string(), "mcpServers": []}),
        );
        let cmds = acp.raw.recv();
        (cmds, r)
    };
    let sid = r["result"]["sessionId"].as_str().unwrap().to_owned();
    let names: Vec<&str> = after["params"]["update"]["availableCommands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["input-echo"], "{after}");
    let (before, r) = acp.prompt(&sid, "/broken");
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let t = said(&before);
    assert!(
        t.contains("\"broken\" is not valid") && t.contains("nowhere"),
        "{t}"
    );
    // Free text without a default workflow: the error lists what can be typed.
    let (before, _) = acp.prompt(&sid, "please do something");
    let t = said(&before);
    assert!(t.contains("/input-echo") && !t.contains("/broken"), "{t}");
    let (_, _, stderr) = acp.raw.close();
    assert!(
        stderr.contains("left out of the slash commands") && stderr.contains("broken"),
        "{stderr}"
    );
}

#[test]
fn a_loaded_session_replays_step_titles_and_raw_inputs_as_live() {
    let sb = sandbox();
    let mut acp = Acp::start(&sb);
    let cwd = sb.path().display().to_string();
    let (_, r) = acp.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    let sid = r["result"]["sessionId"].as_str().unwrap().to_owned();
    let (live, _) = acp.prompt(&sid, "/input-echo message=again");
    let card = |frames: &[Value]| -> Value {
        updates(frames)
            .into_iter()
            .find(|u| u["sessionUpdate"] == "tool_call")
            .cloned()
            .expect("a step card")
    };
    let live = card(&live);
    assert_eq!(live["title"], "Step echo: Say it", "{live}");
    acp.call("session/close", json!({"sessionId": sid}));
    let (replay, r) = acp.call(
        "session/load",
        json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}),
    );
    assert!(r["result"].is_object(), "{r}");
    let replayed = card(&replay);
    assert_eq!(replayed["title"], live["title"]);
    assert_eq!(replayed["rawInput"], live["rawInput"]);
    assert!(replayed["rawInput"]["command"].is_string(), "{replayed}");
}
