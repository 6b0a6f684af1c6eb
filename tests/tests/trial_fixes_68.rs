//! A new user's trial of `awf acp-serve` and `awf mcp-serve` with the official SDKs, over the
//! real binary: two acp-serve processes on one session, a question pending across a restart,
//! workflow names with `_` or upper-case letters, free text to a default workflow without a
//! `prompt` input, MCP arguments against the published schemas, and an approval's choice.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use awf_tests::Sandbox;
use awf_tests::acp::Acp;
use awf_tests::acp::said;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

const HELLO: &str = "name: hello\ninputs:\n  - name: name\n    type: string\n    default: world\nstates:\n  initial: s\n  s:\n    type: step\n    command: echo hello {{.inputs.name}}\n    on_success: done\n  done:\n    type: terminal\n";

fn acp_sandbox() -> Sandbox {
    let mut sb = Sandbox::new().unwrap();
    sb.write("wf/hello.yaml", HELLO).unwrap();
    let wf = sb.path().join("wf").display().to_string();
    sb.set_env("AWF_WORKFLOWS_PATH", &wf);
    sb
}

/// The texts of the `user_message_chunk` updates among `frames`.
fn user_messages(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .filter(|f| f["params"]["update"]["sessionUpdate"] == "user_message_chunk")
        .map(|f| {
            f["params"]["update"]["content"]["text"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect()
}

fn load(acp: &mut Acp, sb: &Sandbox, sid: &str) -> (Vec<Value>, Value) {
    let cwd = sb.path().display().to_string();
    acp.call(
        "session/load",
        json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}),
    )
}

// ---- 1. two acp-serve processes on one session ----------------------------------------------

/// User: server A made a session and prompted `/hello name=A1`; server B loaded it; then A
/// and B prompted in turn; a third server's replay held only A1 and B's turns (the whole
/// file was rewritten by the last writer). Now every turn of both processes survives, in the
/// order they were saved.
#[test]
fn acp_two_servers_on_one_session_keep_each_others_turns() {
    let sb = acp_sandbox();
    let mut a = Acp::start(&sb);
    let sid = a.new_session(&sb);
    let (_, r) = a.prompt(&sid, "/hello name=A1");
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let mut b = Acp::start(&sb);
    let (_, r) = load(&mut b, &sb, &sid);
    assert!(r["result"].is_object(), "{r}");
    for (x, y) in [("A2", "B1"), ("A3", "B2"), ("A4", "B3")] {
        let (_, r) = a.prompt(&sid, &format!("/hello name={x}"));
        assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
        let (_, r) = b.prompt(&sid, &format!("/hello name={y}"));
        assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    }
    a.raw.close();
    b.raw.close();
    let mut c = Acp::start(&sb);
    let (replay, r) = load(&mut c, &sb, &sid);
    assert!(r["result"].is_object(), "{r}");
    assert_eq!(
        user_messages(&replay),
        [
            "/hello name=A1",
            "/hello name=A2",
            "/hello name=B1",
            "/hello name=A3",
            "/hello name=B2",
            "/hello name=A4",
            "/hello name=B3"
        ]
    );
    c.raw.close();
}

/// User: a server started before a session was created (by another server) never saw it:
/// `session/list` left it out and `session/load` answered -32002. Both read the store now.
#[test]
fn acp_a_server_sees_sessions_created_after_it_started() {
    let sb = acp_sandbox();
    let mut early = Acp::start(&sb);
    let mut other = Acp::start(&sb);
    let sid = other.new_session(&sb);
    let (_, r) = other.prompt(&sid, "/hello name=late");
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    other.raw.close();

    let (_, list) = early.call("session/list", json!({}));
    let ids: Vec<&str> = list["result"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["sessionId"].as_str())
        .collect();
    assert_eq!(ids, [sid.as_str()], "{list}");
    assert_eq!(list["result"]["sessions"][0]["title"], "/hello name=late");
    let (replay, r) = load(&mut early, &sb, &sid);
    assert!(r["result"].is_object(), "{r}");
    assert_eq!(user_messages(&replay), ["/hello name=late"]);
    assert!(said(&replay).contains("hello late"), "{}", said(&replay));
    early.raw.close();
}

// ---- 2. a pending question across a restart -------------------------------------------------

const TAGGED: &str = "name: tagged\ninputs:\n  - name: tag\n    type: string\n    required: true\n  - name: who\n    type: string\n    default: nobody\nstates:\n  initial: s\n  s:\n    type: step\n    command: echo tagged {{.inputs.tag}} by {{.inputs.who}}\n    on_success: done\n  done:\n    type: terminal\n";

/// User: `/tagged who=me` asked for `tag` ("Send it as your next message."); after a
/// restart and `session/load` (whose replay showed the question) the answer `v3` was refused
/// as "Invalid prompt: prompt must begin with a /<workflow> slash command". The question is
/// saved with the session now: the answer runs the workflow with the inputs given before.
#[test]
fn acp_a_pending_question_is_answered_after_a_restart() {
    let sb = acp_sandbox();
    sb.write("wf/tagged.yaml", TAGGED).unwrap();
    let mut a = Acp::start(&sb);
    let sid = a.new_session(&sb);
    let (asked, r) = a.prompt(&sid, "/tagged who=me");
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert!(
        said(&asked).contains("needs input `tag`. Send it as your next message."),
        "{}",
        said(&asked)
    );
    a.raw.close();

    let mut b = Acp::start(&sb);
    let (replay, r) = load(&mut b, &sb, &sid);
    assert!(r["result"].is_object(), "{r}");
    assert!(
        said(&replay).contains("needs input `tag`"),
        "{}",
        said(&replay)
    );
    let (answered, r) = b.prompt(&sid, "v3");
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let text = said(&answered);
    assert!(!text.contains("Invalid prompt"), "{text}");
    assert!(text.contains("tagged v3 by me"), "{text}");
    // Answered: the next free text is refused again (the question is no longer pending).
    let (again, _) = b.prompt(&sid, "v4");
    assert!(said(&again).contains("Invalid prompt"), "{}", said(&again));
    b.raw.close();
}

// ---- 3. workflow names with `_` or upper-case letters ----------------------------------------

/// User: README says every workflow `awf list` finds is a slash command, but
/// `code_review.yaml` and `Greet.yaml` were not offered and `/code_review name=x` answered
/// "invalid workflow name". Every listed name that can be typed is offered and runs now; a
/// name that cannot (`my.flow v2`) is left out with the precise reason; a name outside
/// AWF's rule that no workflow has is refused, never looked up as a path.
#[test]
fn acp_workflows_named_with_underscores_or_capitals_are_slash_commands() {
    let sb = acp_sandbox();
    sb.write(
        "wf/code_review.yaml",
        &HELLO.replace("name: hello\n", "name: code_review\n"),
    )
    .unwrap();
    sb.write(
        "wf/Greet.yaml",
        &HELLO.replace("name: hello\n", "name: Greet\n"),
    )
    .unwrap();
    sb.write(
        "wf/my.flow v2.yaml",
        &HELLO.replace("name: hello\n", "name: flow\n"),
    )
    .unwrap();
    let mut acp = Acp::start(&sb);
    let cwd = sb.path().display().to_string();
    let (_, r) = acp.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    let sid = r["result"]["sessionId"].as_str().unwrap().to_owned();
    let (frames, _) = acp.call("session/list", json!({}));
    let commands: Vec<String> = frames
        .iter()
        .chain(std::iter::once(&r))
        .filter(|f| f["params"]["update"]["sessionUpdate"] == "available_commands_update")
        .flat_map(|f| {
            f["params"]["update"]["availableCommands"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["name"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(commands, ["Greet", "code_review", "hello"]);
    let (out, r) = acp.prompt(&sid, "/code_review name=x");
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert!(said(&out).contains("hello x"), "{}", said(&out));
    let (out, _) = acp.prompt(&sid, "/Greet name=G");
    assert!(said(&out).contains("hello G"), "{}", said(&out));
    let (out, _) = acp.prompt(&sid, "/Nope_x");
    assert_eq!(
        said(&out),
        "Invalid prompt: no workflow named \"Nope_x\" (the available commands: /Greet, /code_review, /hello)"
    );
    let (out, _) = acp.prompt(&sid, "/../hello");
    assert!(
        said(&out).contains("invalid workflow name \"../hello\": '.' and '..' name directories"),
        "{}",
        said(&out)
    );
    let (_, _, stderr) = acp.raw.close();
    assert!(
        stderr.contains(
            "workflow not offered: its name cannot be typed as a slash command: it holds whitespace (a prompt splits words there)"
        ),
        "{stderr}"
    );
}

// ---- 4. the default workflow -----------------------------------------------------------------

/// User: with `--workflow hello` (no `prompt` input) free text ran hello with its defaults
/// and the text was dropped. It is an error turn now, as `/hello x=1` is, and nothing runs.
#[test]
fn acp_free_text_to_a_default_workflow_without_a_prompt_input_is_refused() {
    let sb = acp_sandbox();
    let mut acp = Acp::start_with(&sb, &["--workflow", "hello"]);
    let sid = acp.new_session(&sb);
    let (out, r) = acp.prompt(&sid, "it's a $(id) test");
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert_eq!(
        said(&out),
        "Invalid prompt: workflow \"hello\" has no input `prompt` (its inputs: name); free text \
         is the `prompt` input of the default workflow: declare one in \"hello\", or type a slash command"
    );
    assert!(
        !out.iter()
            .any(|f| f["params"]["update"]["sessionUpdate"] == "tool_call"),
        "nothing runs: {out:?}"
    );
    acp.raw.close();
}

/// User: `--workflow nosuch` started (exit 0) and every free-text prompt then failed with
/// USER.FACADE.WORKFLOW_NOT_FOUND. It is refused at start now: exit 1,
/// `USER.ACP.INVALID_CONFIG`, with the workflows there are.
#[test]
fn acp_serve_refuses_an_unknown_default_workflow_at_start() {
    let sb = acp_sandbox();
    let r = sb.run(&["acp-serve", "--workflow", "helo"]).unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    assert!(r.stderr.contains("USER.ACP.INVALID_CONFIG"), "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "--workflow \"helo\": no such workflow (free-text prompts run the default workflow)"
        ),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("did you mean 'hello'? `awf list` shows the workflows: hello"),
        "{}",
        r.stderr
    );
}

// ---- 5. MCP workflow tools: arguments against the published schema ----------------------------

const FLAGS: &str = "name: flagged\ninputs:\n  - name: flags\n    type: array\n  - name: count\n    type: integer\n    default: 1\nstates:\n  initial: s\n  s:\n    type: step\n    command: echo {{.inputs.count}}\n    on_success: done\n  done:\n    type: terminal\n";

/// User: `flags: "notarray"` for `{"type":"array","items":{"type":"string"}}` succeeded with
/// flags=[notarray], and `count: "3"` for `{"type":"integer"}` succeeded. Both break the
/// tool's `inputSchema` and are refused now, as a range violation is, and nothing runs.
#[test]
fn mcp_workflow_tool_arguments_that_break_the_schema_are_refused() {
    let sb = Sandbox::new().unwrap();
    sb.write("wf/flagged.yaml", FLAGS).unwrap();
    let mut raw = awf_tests::mcp::RawServer::spawn(sb.cmd(&["mcp-serve", "--workflows", "wf"]));
    raw.initialize("2025-06-18");
    let out = raw.call(1, "flagged", &json!({"flags": "notarray", "count": "3"}));
    let r = &out["result"];
    assert_eq!(r["isError"], true, "{out}");
    assert_eq!(
        r["content"][0]["text"],
        "[USER.INPUT.VALIDATION_FAILED] input validation failed: inputs.flags: expected an \
         array of strings, not the string \"notarray\"; inputs.count: expected an integer, not \
         the string \"3\"\nHint: the `flagged` tool's inputSchema (tools/list) lists each input \
         of workflow flagged with its type and rules"
    );
    let out = raw.call(2, "flagged", &json!({"flags": ["a"], "count": 3}));
    assert_eq!(out["result"]["isError"], false, "{out}");
    raw.close();
    // Nothing ran for the refused call: one run is recorded.
    let h = sb.run(&["history", "-f", "json"]).unwrap();
    let runs: Value = serde_json::from_str(&h.stdout).unwrap();
    assert_eq!(runs.as_array().map(Vec::len), Some(1), "{runs}");
}
