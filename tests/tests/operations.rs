//! `type: operation` (the built-in `http.request`) and the `http_request` plugin tool, end to
//! end over the built binary, against a small HTTP/1.1 server on 127.0.0.1 run by the test.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

use awf_tests::SANDBOX_MARK;
use awf_tests::Sandbox;
use awf_tests::http_test::Reply;
use awf_tests::http_test::Seen;
use awf_tests::http_test::Server;
use awf_tests::mcp::config;
use awf_tests::mcp::py_sdk;
use serde_json::Value;
use serde_json::json;

/// The test's HTTP server: `/status/N` answers N; `/big/N` N bytes of `x`; `/slow` nothing
/// for 60 s; `/echo` the request's method, headers and body; anything else 200 `hello`.
fn route(req: &Seen) -> Reply {
    let path = req.path.as_str();
    if let Some(n) = path.strip_prefix("/status/") {
        Reply::text(n.parse::<u16>().unwrap_or(500), format!("status {n}"))
    } else if let Some(n) = path.strip_prefix("/big/") {
        Reply::text(200, "x".repeat(n.parse().unwrap_or(0)))
    } else if path == "/slow" {
        std::thread::sleep(Duration::from_secs(60));
        Reply::text(200, "")
    } else if path == "/echo" {
        let hs: Vec<String> = req
            .headers
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        Reply::text(
            200,
            format!("{} {}\n{}", req.method, hs.join(";"), req.body),
        )
    } else {
        Reply::text(200, "hello")
    }
}

fn fixture(name: &str) -> String {
    awf_tests::shared_dir()
        .join("conformance/fixtures/workflows")
        .join(name)
        .display()
        .to_string()
}

fn proxy_fixture(name: &str) -> String {
    awf_tests::shared_dir()
        .join("conformance/fixtures/mcp_proxy")
        .join(name)
        .display()
        .to_string()
}

fn run_json(sb: &Sandbox, args: &[&str]) -> (i32, Value, String) {
    let mut all = args.to_vec();
    all.extend(["-f", "json"]);
    let run = sb.run(&all).unwrap();
    let v = run
        .json()
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", run.stdout, run.stderr));
    (run.code, v, run.stderr)
}

// ----- `awf run` of AWF (Go)'s http fixtures ---------------------------------------------------

#[test]
fn the_go_http_fixtures_get_post_put_and_delete() {
    let sb = Sandbox::new().unwrap();
    let srv = Server::start(route);
    let url = srv.url("/echo");
    let (code, v, err) = run_json(
        &sb,
        &[
            "run",
            &fixture("http-get-test.yaml"),
            "-i",
            &format!("url={url}"),
        ],
    );
    assert_eq!(code, 0, "{v}\n{err}");
    assert_eq!(v["terminal"], "success", "{v}");
    let out = v["states"]["fetch_data"]["output"].as_str().unwrap();
    assert!(out.starts_with("status_code=200\nbody=GET "), "{out}");
    assert!(out.ends_with("\nbody_truncated=false"), "{out}");
    assert!(
        out.contains("headers={\"Connection\":\"close\",\"Content-Length\""),
        "{out}"
    );
    for (file, method, state) in [
        ("http-post-test.yaml", "post", "create_resource"),
        ("http-put-test.yaml", "PUT", "update_resource"),
    ] {
        let (code, v, err) = run_json(
            &sb,
            &[
                "run",
                &fixture(file),
                "-i",
                &format!("url={url}"),
                "-i",
                &format!("method={method}"),
                "-i",
                "body={\"name\": \"awf\"}",
            ],
        );
        assert_eq!(code, 0, "{v}\n{err}");
        assert_eq!(v["states"][state]["status"], "completed", "{v}");
    }
    let (code, v, err) = run_json(
        &sb,
        &[
            "run",
            &fixture("http-delete-test.yaml"),
            "-i",
            &format!("url={}", srv.url("/items/7")),
            "-i",
            "method=DELETE",
        ],
    );
    assert_eq!(code, 0, "{v}\n{err}");
    let seen = srv.seen();
    let methods: Vec<&str> = seen.iter().map(|s| s.method.as_str()).collect();
    assert_eq!(methods, ["GET", "POST", "PUT", "DELETE"]);
    assert_eq!(seen[1].body, "{\"name\": \"awf\"}");
    assert!(
        seen[1]
            .headers
            .contains(&("content-type".into(), "application/json".into())),
        "{seen:?}"
    );
    assert_eq!(seen[2].body, "{\"name\": \"awf\"}");
    assert_eq!(seen[3].path, "/items/7");
    // No server: the GET fixture's on_failure takes it to its failure terminal (exit 3).
    let (code, v, _) = run_json(
        &sb,
        &[
            "run",
            &fixture("http-get-test.yaml"),
            "-i",
            "url=http://127.0.0.1:1/",
        ],
    );
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["terminal"], "failure", "{v}");
    assert_eq!(v["states"]["fetch_data"]["status"], "failed", "{v}");
}

// ----- routing, retry, timeouts -------------------------------------------------------------

#[test]
fn a_500_is_an_answer_unless_retryable_then_it_is_retried_and_routed_by_on_failure() {
    let sb = Sandbox::new().unwrap();
    let srv = Server::start(route);
    let wf = sb
        .write(
            "five.yaml",
            r#"name: five
inputs:
  - {name: url, type: string, required: true}
  - {name: retry_on, type: string, default: "[]"}
states:
  initial: call
  call:
    type: operation
    operation: http.request
    inputs:
      method: GET
      url: "{{.inputs.url}}"
      retryable_status_codes: [500]
    retry: {max_attempts: 3, initial_delay: 10ms}
    on_success: show
    on_failure: bad
  show:
    type: step
    command: 'echo "got {{.states.call.Response.status_code}}: {{.states.call.Response.body}}"'
    on_success: done
  done: {type: terminal}
  bad: {type: terminal, status: failure, message: "routed"}
"#,
        )
        .unwrap();
    let wf = wf.to_str().unwrap();
    let (code, v, err) = run_json(
        &sb,
        &["run", wf, "-i", &format!("url={}", srv.url("/status/500"))],
    );
    assert_eq!(code, 3, "{v}\n{err}");
    assert_eq!(v["terminal"], "bad", "{v}");
    assert_eq!(v["states"]["call"]["attempts"], 3, "{v}");
    assert_eq!(v["error"]["message"], "routed", "{v}");
    assert_eq!(
        v["states"]["call"]["error"], "step call: http.request: retryable status code 500",
        "{v}"
    );
    assert_eq!(srv.seen().len(), 3, "one request per attempt");
    // A 503 is not listed: an answer like any other, its status in Response.
    let (code, v, err) = run_json(
        &sb,
        &["run", wf, "-i", &format!("url={}", srv.url("/status/503"))],
    );
    assert_eq!(code, 0, "{v}\n{err}");
    assert_eq!(
        v["states"]["show"]["output"], "got 503: status 503\n",
        "{v}"
    );
    assert_eq!(v["states"]["call"]["attempts"], 1);
}

#[test]
fn transitions_see_the_response_and_continue_on_error_goes_on() {
    let sb = Sandbox::new().unwrap();
    let srv = Server::start(route);
    let wf = sb
        .write(
            "route.yaml",
            r#"name: route
inputs:
  - {name: url, type: string, required: true}
states:
  initial: call
  call:
    type: operation
    operation: http.request
    inputs: {method: GET, url: "{{.inputs.url}}"}
    transitions:
      - when: "states.call.Response.status_code >= 400"
        goto: client_error
    on_success: done
  client_error:
    type: operation
    operation: http.request
    inputs: {method: GET, url: "http://127.0.0.1:1/"}
    continue_on_error: true
    on_success: done
  done: {type: terminal}
"#,
        )
        .unwrap();
    let wf = wf.to_str().unwrap();
    let (code, v, err) = run_json(
        &sb,
        &["run", wf, "-i", &format!("url={}", srv.url("/status/404"))],
    );
    assert_eq!(code, 0, "{v}\n{err}");
    assert_eq!(v["states"]["client_error"]["status"], "failed", "{v}");
    assert_eq!(v["terminal"], "done");
    let (code, v, _) = run_json(&sb, &["run", wf, "-i", &format!("url={}", srv.url("/x"))]);
    assert_eq!(code, 0, "{v}");
    assert!(v["states"].get("client_error").is_none(), "{v}");
}

#[test]
fn a_request_past_the_step_timeout_or_its_own_fails_in_time() {
    let sb = Sandbox::new().unwrap();
    let srv = Server::start(route);
    let wf = sb
        .write(
            "slow.yaml",
            r#"name: slow
inputs:
  - {name: url, type: string, required: true}
states:
  initial: step_timeout
  step_timeout:
    type: operation
    operation: http.request
    inputs: {method: GET, url: "{{.inputs.url}}"}
    timeout: 1s
    on_success: done
    on_failure: own_timeout
  own_timeout:
    type: operation
    operation: http.request
    inputs: {method: GET, url: "{{.inputs.url}}", timeout: 1}
    on_success: done
  done: {type: terminal}
"#,
        )
        .unwrap();
    let t0 = Instant::now();
    let (code, v, err) = run_json(
        &sb,
        &[
            "run",
            wf.to_str().unwrap(),
            "-i",
            &format!("url={}", srv.url("/slow")),
        ],
    );
    let took = t0.elapsed();
    assert_eq!(code, 3, "{v}\n{err}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert_eq!(v["states"]["step_timeout"]["status"], "failed", "{v}");
    assert!(
        v["states"]["step_timeout"]["error"]
            .as_str()
            .unwrap()
            .contains("timed out after 1s"),
        "{v}"
    );
    assert_eq!(v["error"]["code"], "EXECUTION.OPERATION.TIMEOUT", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("step own_timeout: http.request: request timed out after 1s"),
        "{v}"
    );
}

// ----- secrets and the body cap --------------------------------------------------------------

/// Every file under `dir` (recursively) whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_containing(&p, needle));
        } else if std::fs::read(&p).is_ok_and(|b| String::from_utf8_lossy(&b).contains(needle)) {
            out.push(p.display().to_string());
        }
    }
    out
}

#[test]
fn a_secret_in_a_header_is_masked_in_the_result_state_and_transcript() {
    let sb = Sandbox::new().unwrap();
    let srv = Server::start(route);
    let wf = sb
        .write(
            "secret.yaml",
            r#"name: secret
inputs:
  - {name: url, type: string, required: true}
  - {name: api_token, type: string, required: true}
states:
  initial: call
  call:
    type: operation
    operation: http.request
    inputs:
      method: POST
      url: "{{.inputs.url}}"
      headers:
        Authorization: "Bearer {{.inputs.api_token}}"
        X-Plain: visible
      body: "token={{.inputs.api_token}}"
    on_success: done
  done: {type: terminal}
"#,
        )
        .unwrap();
    let token = "tok-Zx81-very-secret";
    let (code, v, err) = run_json(
        &sb,
        &[
            "run",
            wf.to_str().unwrap(),
            "-i",
            &format!("url={}", srv.url("/echo")),
            "-i",
            &format!("api_token={token}"),
            "-o",
            "streaming",
            "--verbose",
        ],
    );
    assert_eq!(code, 0, "{v}\n{err}");
    // The server got the real token (and echoed it back).
    let seen = srv.seen();
    assert!(
        seen[0]
            .headers
            .contains(&("authorization".into(), format!("Bearer {token}"))),
        "{seen:?}"
    );
    let out = v["states"]["call"]["output"].as_str().unwrap();
    assert!(out.contains("x-plain=visible"), "{out}");
    assert!(out.contains("authorization=***"), "{out}");
    assert!(!v.to_string().contains(token), "{v}");
    assert!(!err.contains(token), "{err}");
    let data = awf_tests::data(&sb);
    let run_id = v["run_id"].as_str().unwrap();
    let state = data.join("states").join(format!("{run_id}.json"));
    awf_tests::wait_for("the state file", || state.exists());
    let leaks = files_containing(&data, token);
    assert!(leaks.is_empty(), "the token is in {leaks:?}");
    // The response is recorded, masked, in the state file.
    let st: Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    let text = st.to_string();
    assert!(text.contains("authorization=***"), "{text}");
}

#[test]
fn a_body_over_the_cap_is_truncated_and_flagged() {
    let sb = Sandbox::new().unwrap();
    let srv = Server::start(route);
    let wf = sb
        .write(
            "big.yaml",
            r#"name: big
inputs:
  - {name: url, type: string, required: true}
states:
  initial: call
  call:
    type: operation
    operation: http.request
    inputs: {method: GET, url: "{{.inputs.url}}"}
    on_success: show
  show:
    type: step
    command: 'echo "{{.states.call.Response.body_truncated}} {{len .states.call.Response.body}}"'
    on_success: done
  done: {type: terminal}
"#,
        )
        .unwrap();
    let wf = wf.to_str().unwrap();
    let (code, v, err) = run_json(
        &sb,
        &["run", wf, "-i", &format!("url={}", srv.url("/big/3000000"))],
    );
    assert_eq!(code, 0, "{v}\n{err}");
    assert_eq!(v["states"]["show"]["output"], "true 1048576\n", "{v}");
    assert!(
        v["states"]["call"]["output"]
            .as_str()
            .unwrap()
            .ends_with("\nbody_truncated=true")
    );
    let (code, v, _) = run_json(
        &sb,
        &["run", wf, "-i", &format!("url={}", srv.url("/big/1048576"))],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["states"]["show"]["output"], "false 1048576\n", "{v}");
}

// ----- validation ---------------------------------------------------------------------------

fn diagnostics(sb: &Sandbox, file: &str) -> (i32, Vec<(String, String, String)>) {
    let run = sb.run(&["validate", file, "-f", "json"]).unwrap();
    let v = run.json().unwrap();
    let found = v["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["severity"] != "note")
        .map(|d| {
            (
                d["severity"].as_str().unwrap_or_default().to_owned(),
                d["code"].as_str().unwrap_or_default().to_owned(),
                format!("{} {}", d["message"], d["hint"]),
            )
        })
        .collect();
    (run.code, found)
}

#[test]
fn validate_flags_unknown_operations_plugins_and_collisions() {
    let sb = Sandbox::new().unwrap();
    let typo = sb
        .write(
            "typo.yaml",
            "name: typo\nstates:\n  initial: o\n  o: {type: operation, operation: http.reqest, inputs: {method: GET, url: 'http://x/'}, on_success: done}\n  done: {type: terminal}\n",
        )
        .unwrap();
    let (code, found) = diagnostics(&sb, typo.to_str().unwrap());
    assert_eq!(code, 2, "{found:?}");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].1, "WORKFLOW.VALIDATION.UNKNOWN_OPERATION");
    assert!(
        found[0].2.contains("did you mean 'http.request'"),
        "{found:?}"
    );
    // `awf run` refuses it before anything runs.
    let run = sb.run(&["run", typo.to_str().unwrap()]).unwrap();
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("[WORKFLOW.VALIDATION.UNKNOWN_OPERATION]"),
        "{}",
        run.stderr
    );
    // The Go fixtures with plugins awf does not provide.
    for (fixture, want) in [
        (
            "mcp-proxy-unknown-plugin-test.yaml",
            vec!["USER.MCP_PROXY.UNKNOWN_PLUGIN"],
        ),
        (
            "mcp-proxy-unknown-operation-test.yaml",
            vec!["USER.MCP_PROXY.UNKNOWN_PLUGIN"],
        ),
        (
            "mcp-proxy-name-collision-test.yaml",
            vec![
                "USER.MCP_PROXY.UNKNOWN_PLUGIN",
                "USER.MCP_PROXY.NAME_COLLISION",
            ],
        ),
    ] {
        let (code, found) = diagnostics(&sb, &proxy_fixture(fixture));
        let codes: Vec<&str> = found.iter().map(|f| f.1.as_str()).collect();
        assert_eq!((code, codes), (1, want), "{fixture}: {found:?}");
    }
    // The built-in plugin: `request` is known, a typo of it is not, and twice collides.
    let proxy = |expose: &str| {
        format!(
            "name: p\nstates:\n  initial: a\n  a:\n    type: agent\n    provider: claude\n    prompt: hi\n    mcp_proxy: {{enable: true, plugin_tools: [{{plugin: http, expose: {expose}}}]}}\n    on_success: done\n  done: {{type: terminal}}\n"
        )
    };
    let good = sb.write("good.yaml", &proxy("[request]")).unwrap();
    let (code, found) = diagnostics(&sb, good.to_str().unwrap());
    assert!(
        !found
            .iter()
            .any(|f| f.1.starts_with("USER.MCP_PROXY.UNKNOWN")),
        "{found:?}"
    );
    assert_eq!(code, 0, "{found:?}");
    let bad = sb.write("bad.yaml", &proxy("[request, reqest]")).unwrap();
    let (code, found) = diagnostics(&sb, bad.to_str().unwrap());
    assert_eq!(code, 1, "{found:?}");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].1, "USER.MCP_PROXY.UNKNOWN_OPERATION");
    assert!(found[0].2.contains("did you mean 'request'"), "{found:?}");
    let twice = sb
        .write("twice.yaml", &proxy("[request, request]"))
        .unwrap();
    let (code, found) = diagnostics(&sb, twice.to_str().unwrap());
    let codes: Vec<&str> = found.iter().map(|f| f.1.as_str()).collect();
    assert_eq!(
        (code, codes),
        (1, vec!["USER.MCP_PROXY.NAME_COLLISION"]),
        "{found:?}"
    );
}

// ----- the `http_request` tool through `awf mcp-serve` ------------------------------------------

const PY_HTTP: &str = r#"
import json, os, sys
import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    awf, cfg, url = sys.argv[1], sys.argv[2], sys.argv[3]
    params = StdioServerParameters(command=awf, args=["mcp-serve", "--config", cfg], env=dict(os.environ))
    out = {}
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            tools = await s.list_tools()
            out["tools"] = [t.name for t in tools.tools]
            out["schema"] = {t.name: t.input_schema for t in tools.tools}.get("http_request")
            res = await s.call_tool("http_request", {"method": "POST", "url": url + "/echo", "body": "ping",
                                                     "headers": {"X-Api-Key": "k3y-Very-Secret"}})
            out["post"] = [res.is_error, res.content[0].text, res.structured_content]
            res = await s.call_tool("http_request", {"method": "GET", "url": url + "/status/503",
                                                     "retryable_status_codes": [503]})
            out["retryable"] = [res.is_error, res.content[0].text]
            res = await s.call_tool("http_request", {"method": "BREW", "url": url})
            out["bad"] = [res.is_error, res.content[0].text]
    print(json.dumps(out))

anyio.run(main)
"#;

#[test]
fn the_python_sdk_calls_http_request_through_mcp_serve() {
    let sb = Sandbox::new().unwrap();
    let srv = Server::start(route);
    let py = py_sdk();
    let audit = sb.path().join("tools.jsonl");
    let cfg = config(
        &sb,
        &json!({"intercept_builtins": false,
                "plugin_tools": [{"plugin": "http", "expose": ["request"]}],
                "run_id": "r-9", "step": "fetch", "audit_path": audit}),
    );
    let script = sb.write("client.py", PY_HTTP).unwrap();
    let out = Command::new("python3")
        .arg(script)
        .arg(awf_tests::awf_bin())
        .arg(&cfg)
        .arg(&srv.base)
        .current_dir(sb.path())
        .env("PYTHONPATH", &py)
        .env(SANDBOX_MARK, sb.path())
        .stdin(Stdio::null())
        .output()
        .expect("python3 runs");
    let run = awf_tests::Run::from(out);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let out: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(out["tools"], json!(["http_request"]));
    assert_eq!(out["schema"]["required"], json!(["method", "url"]), "{out}");
    assert_eq!(out["schema"]["properties"]["headers"]["type"], "object");
    assert_eq!(out["post"][0], false, "{out}");
    let answer: Value = serde_json::from_str(out["post"][1].as_str().unwrap()).unwrap();
    assert_eq!(answer["status_code"], 200, "{answer}");
    assert!(
        answer["body"].as_str().unwrap().starts_with("POST "),
        "{answer}"
    );
    assert!(
        answer["body"].as_str().unwrap().ends_with("\nping"),
        "{answer}"
    );
    assert_eq!(
        out["post"][2]["status_code"], 200,
        "structured content: {out}"
    );
    assert!(!out.to_string().contains("k3y-Very-Secret"), "{out}");
    assert_eq!(out["retryable"][0], true, "{out}");
    assert!(
        out["retryable"][1]
            .as_str()
            .unwrap()
            .starts_with("http.request: retryable status code 503"),
        "{out}"
    );
    assert_eq!(out["bad"][0], true, "{out}");
    assert!(
        out["bad"][1]
            .as_str()
            .unwrap()
            .contains("USER.INPUT.VALIDATION_FAILED")
            && out["bad"][1].as_str().unwrap().contains("`method`"),
        "{out}"
    );
    assert_eq!(srv.seen().len(), 2, "the refused call sent nothing");
    // Each call is in the audit file, linked to the run and step, from the plugin source.
    let events = std::fs::read_to_string(&audit).unwrap();
    let calls: Vec<Value> = events
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "tool.call")
        .collect();
    assert_eq!(calls.len(), 3, "{events}");
    assert!(
        calls
            .iter()
            .all(|c| c["run_id"] == "r-9" && c["step"] == "fetch"),
        "{events}"
    );
    assert!(events.contains("plugin:http"), "{events}");
    assert!(!events.contains("k3y-Very-Secret"), "{events}");
    assert!(sb.processes().is_empty(), "{:?}", sb.processes());
}

#[test]
fn dry_run_and_diagram_show_operations_without_sending_anything() {
    let sb = Sandbox::new().unwrap();
    let srv = Server::start(route);
    let run = sb
        .run(&[
            "run",
            &fixture("http-put-test.yaml"),
            "-i",
            &format!("url={}", srv.url("/echo")),
            "-i",
            "method=PUT",
            "--dry-run",
        ])
        .unwrap();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let all = format!("{}{}", run.stdout, run.stderr);
    assert!(all.contains("Operation: http.request"), "{all}");
    assert!(srv.seen().is_empty(), "a dry run sends no request");
    // `noop` is no operation awf provides, but the graph is still drawn.
    let run = sb
        .run(&["diagram", &fixture("diagram-all-types.yaml")])
        .unwrap();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .contains("\"operation_step\" [label=\"operation_step\", shape=box3d]"),
        "{}",
        run.stdout
    );
}

#[test]
fn ctrl_c_stops_a_request_in_flight_and_the_run_is_cancelled() {
    let sb = Sandbox::new().unwrap();
    let srv = Server::start(route);
    let child = sb
        .cmd(&[
            "run",
            &fixture("http-get-test.yaml"),
            "-i",
            &format!("url={}", srv.url("/slow")),
            "-f",
            "json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    awf_tests::wait_for("the request to reach the server", || !srv.seen().is_empty());
    let t0 = Instant::now();
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "cancelled", "{v}");
    assert_eq!(v["states"]["fetch_data"]["status"], "cancelled", "{v}");
}
