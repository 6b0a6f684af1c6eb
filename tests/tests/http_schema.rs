//! `awf serve` against its own OpenAPI document, by a fuzzer nobody on the team wrote:
//! schemathesis (PyPI, pinned; installed by scripts/install-peers.sh into
//! .cache/py-schemathesis) runs `schemathesis run <url>/openapi.json` against the built binary
//! over a sandbox of fast workflows (an echo, a failing one, one waiting for a missing input,
//! an approval gate, a broken one) with the checks `not_a_server_error`,
//! `status_code_conformance`, `content_type_conformance`, `response_schema_conformance` and
//! `response_headers_conformance`, a bounded number of examples per operation and a fixed
//! seed, stateful links included; SSE responses are validated event by event against the
//! schema the document gives them. The test fails on any schemathesis failure and prints its
//! report.
//!
//! Then every status code the document lists for every operation must have been answered to
//! some request of this test: schemathesis's own requests (read back from its HAR report), and
//! the curl requests below for the codes a fuzzer cannot reach (a wrong token, a body over the
//! size cap, the run cap, a server draining, answers to pending requests, stores that cannot be
//! read); the test prints which codes only curl reached.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::process::Stdio;

use awf_tests::Sandbox;
use awf_tests::http_serve::Server;
use awf_tests::http_serve::sandbox_with;
use awf_tests::http_serve::sigterm;
use awf_tests::http_serve::start;
use awf_tests::wait_for;
use serde_json::Value;
use serde_json::json;

/// schemathesis pinned by scripts/install-peers.sh (keep in sync).
const SCHEMATHESIS: &str = "4.32.5";

const ECHO: &str = "name: echo
description: says hello
inputs:
  - name: who
    type: string
    default: world
states:
  initial: greet
  greet:
    type: step
    command: echo hello {{.inputs.who}}
    on_success: done
  done:
    type: terminal
";

const FAILS: &str = "name: fails
description: exits 3
states:
  initial: boom
  boom:
    type: step
    command: echo failing; exit 3
    on_success: done
    on_failure: bad
  done:
    type: terminal
  bad:
    type: terminal
    status: failure
";

/// Needs an input (a run without it is refused with 422).
const ASK: &str = "name: ask
description: needs a name
inputs:
  - name: who
    type: string
    required: true
states:
  initial: greet
  greet:
    type: step
    command: echo hello {{.inputs.who}}
    on_success: done
  done:
    type: terminal
";

/// An approval gate that waits until it is answered (a pending `approval` request).
const HOLD: &str = "name: hold
description: waits for an approval
states:
  initial: deploy
  deploy:
    type: step
    command: echo deployed
    approval: \"Deploy now?\"
    on_success: done
    on_failure: done
  done:
    type: terminal
";

/// An approval gate that rejects itself after 1 s when nobody answers.
const GATE: &str = "name: gate
description: a gated step
states:
  initial: deploy
  deploy:
    type: step
    command: echo deployed
    approval: {message: \"Deploy now?\", timeout: 1s, on_timeout: reject}
    on_success: done
    on_failure: done
  done:
    type: terminal
";

const SLEEPER: &str = "name: sleeper
states:
  initial: nap
  nap:
    type: step
    command: sleep 2
    on_success: done
  done:
    type: terminal
";

/// Does not validate (a transition to a state that does not exist).
const BROKEN: &str = "name: broken
states:
  initial: a
  a:
    type: step
    command: echo a
    on_success: nowhere
";

/// Not even YAML.
const UNPARSABLE: &str = "name: unparsable\nstates: [\n";

fn sandbox() -> Sandbox {
    sandbox_with(&[
        ("echo", ECHO),
        ("fails", FAILS),
        ("ask", ASK),
        ("hold", HOLD),
        ("gate", GATE),
        ("sleeper", SLEEPER),
        ("broken", BROKEN),
        ("unparsable", UNPARSABLE),
    ])
}

/// A response to a curl request.
#[derive(Debug)]
struct Reply {
    code: u16,
    body: String,
    ctype: String,
    retry_after: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// The status codes answered per operation (`METHOD /template`), by whom.
#[derive(Default)]
struct Reached {
    by_schemathesis: BTreeSet<(String, u16)>,
    by_curl: BTreeSet<(String, u16)>,
}

/// Drives curl requests at one server and notes which operation answered what.
struct Client<'a> {
    base: String,
    templates: &'a [(String, String)],
    reached: &'a mut Reached,
}

impl Client<'_> {
    /// `METHOD path` with an optional JSON (or raw) body and extra curl arguments.
    fn call(&mut self, method: &str, path: &str, body: Option<&str>, extra: &[&str]) -> Reply {
        let url = format!("{}{path}", self.base);
        let mut c = Command::new("curl");
        c.args([
            "-s",
            "--max-time",
            "60",
            "-X",
            method,
            "-w",
            "\n%{http_code} %header{retry-after} %{content_type}",
        ]);
        if let Some(b) = body {
            c.args(["-H", "content-type: application/json", "--data-binary", b]);
        }
        c.args(extra).arg(&url);
        let out = c.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, tail) = text.rsplit_once('\n').unwrap();
        let mut parts = tail.splitn(3, ' ');
        let code: u16 = parts.next().unwrap().parse().unwrap();
        let retry_after = parts.next().unwrap_or("").to_owned();
        let ctype = parts.next().unwrap_or("").to_owned();
        if let Some(op) = operation_of(self.templates, method, path) {
            self.reached.by_curl.insert((op, code));
        }
        let r = Reply {
            code,
            body: body.to_owned(),
            ctype,
            retry_after,
        };
        if code >= 400 {
            assert_eq!(
                r.ctype, "application/problem+json",
                "{method} {path}: an error that is not a problem document: {r:?}"
            );
            let p = r.json();
            assert_eq!(p["status"], code, "{method} {path}: {p}");
            assert!(p["code"].as_str().is_some_and(|c| c.contains('.')), "{p}");
        }
        r
    }

    fn expect(&mut self, want: u16, method: &str, path: &str, body: Option<&str>) -> Reply {
        self.expect_with(want, method, path, body, &[])
    }

    fn expect_with(
        &mut self,
        want: u16,
        method: &str,
        path: &str,
        body: Option<&str>,
        extra: &[&str],
    ) -> Reply {
        let r = self.call(method, path, body, extra);
        assert_eq!(r.code, want, "{method} {path} {body:?}: {r:?}");
        r
    }

    fn start_run(&mut self, name: &str, body: &str) -> String {
        let r = self.expect(
            202,
            "POST",
            &format!("/api/workflows/env/{name}/run"),
            Some(body),
        );
        r.json()["body"]["execution_id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    fn execution(&mut self, id: &str) -> Value {
        self.expect(200, "GET", &format!("/api/executions/{id}"), None)
            .json()["body"]
            .clone()
    }

    fn wait_status(&mut self, id: &str, status: &str) {
        wait_for(&format!("run {id} to be {status}"), || {
            self.execution(id)["status"] == status
        });
    }

    fn wait_pending(&mut self, id: &str) -> Value {
        let mut got = Value::Null;
        wait_for(&format!("run {id} to wait on a request"), || {
            let v = self.execution(id);
            got = v["pending"][0].clone();
            !got.is_null()
        });
        got
    }
}

/// Waits until the run's state file (its journal replayed) is on disk with a final status.
/// A run reported `failed` by GET may not be recorded yet (the recorder writes in batches),
/// and a resume in that moment answers 422 "workflow execution not found": a race of the run
/// service (application/src/service/mod.rs `resume`), not what this test is about.
fn wait_recorded(sb: &Sandbox, id: &str) {
    let path = awf_tests::data(sb)
        .join("states")
        .join(format!("{id}.json"));
    wait_for(&format!("run {id} to be recorded"), || {
        awf_tests::read_state_file(&path)
            .is_some_and(|v| v["status"].as_str().is_some_and(|s| s != "running"))
    });
}

/// The operation (`METHOD /template`) a request path belongs to: the template with as many
/// segments whose literal segments all match, the one with the most literal segments when
/// several do (`/api/history/stats` before `/api/history/{x}`).
fn operation_of(templates: &[(String, String)], method: &str, path: &str) -> Option<String> {
    let path = path.split('?').next().unwrap_or(path);
    let segs: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let mut best: Option<(usize, String)> = None;
    for (m, t) in templates {
        if !m.eq_ignore_ascii_case(method) {
            continue;
        }
        let ts: Vec<&str> = t.split('/').collect();
        if ts.len() != segs.len() {
            continue;
        }
        let mut literal = 0;
        let fits = ts.iter().zip(&segs).all(|(t, s)| {
            if t.starts_with('{') && t.ends_with('}') {
                !s.is_empty()
            } else {
                literal += 1;
                t == s
            }
        });
        if fits && best.as_ref().is_none_or(|(n, _)| literal > *n) {
            best = Some((literal, format!("{} {t}", m.to_ascii_uppercase())));
        }
    }
    best.map(|(_, op)| op)
}

/// An operation (`METHOD /template`) and a status code it answers.
type Answer = (String, u16);

/// Every (operation, status code) the document lists, and the operations' templates
/// (`(method, template)`).
fn documented(doc: &Value) -> (BTreeSet<Answer>, Vec<(String, String)>) {
    let mut codes = BTreeSet::new();
    let mut templates = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().unwrap() {
            if !["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                continue;
            }
            templates.push((method.clone(), path.clone()));
            let name = format!("{} {path}", method.to_ascii_uppercase());
            for code in op["responses"].as_object().expect("responses").keys() {
                let c: u16 = code
                    .parse()
                    .unwrap_or_else(|_| panic!("{name}: status {code:?} is not a number"));
                codes.insert((name.clone(), c));
            }
        }
    }
    (codes, templates)
}

fn schemathesis_dir() -> PathBuf {
    awf_tests::workspace_root()
        .join(".cache")
        .join("py-schemathesis")
}

/// `schemathesis <args>` from .cache/py-schemathesis, after checking the pinned version is
/// the one installed.
fn schemathesis(sb: &Sandbox) -> Command {
    let dir = schemathesis_dir();
    let v = Command::new("python3")
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('schemathesis'))",
        ])
        .env("PYTHONPATH", &dir)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&v.stdout).trim(),
        SCHEMATHESIS,
        "schemathesis {SCHEMATHESIS} is not installed in {}: run scripts/install-peers.sh",
        dir.display()
    );
    let mut c = Command::new("python3");
    c.arg(dir.join("bin").join("schemathesis"))
        .env("PYTHONPATH", &dir)
        .env("SCHEMATHESIS_HOOKS", "")
        .env("NO_COLOR", "1")
        .current_dir(sb.path())
        .stdin(Stdio::null());
    c
}

/// The operations whose path parameters name things that exist (so the fuzzer gets past
/// 404 to the routes' own answers), as schemathesis.toml.
fn schemathesis_config(finished: &str, failed: &str) -> String {
    format!(
        r#"[[operations]]
include-name = ["GET /api/workflows/{{scope}}/{{name}}", "POST /api/workflows/{{scope}}/{{name}}/validate", "POST /api/workflows/{{scope}}/{{name}}/run"]
parameters = {{ "path.scope" = "env", "path.name" = "echo" }}

[[operations]]
include-name = ["GET /api/executions/{{id}}", "GET /api/executions/{{id}}/events", "DELETE /api/executions/{{id}}"]
parameters = {{ "path.id" = "{finished}" }}
max-stream-events = 200

[[operations]]
include-name = ["POST /api/executions/{{id}}/resume"]
parameters = {{ "path.id" = "{failed}" }}
"#
    )
}

fn read_har(path: &std::path::Path, templates: &[(String, String)]) -> BTreeSet<(String, u16)> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("schemathesis wrote no HAR at {}: {e}", path.display()));
    let har: Value = serde_json::from_str(&text).unwrap();
    let mut out = BTreeSet::new();
    for e in har["log"]["entries"].as_array().unwrap() {
        let method = e["request"]["method"].as_str().unwrap_or("");
        let url = e["request"]["url"].as_str().unwrap_or("");
        let path = url
            .split_once("://")
            .and_then(|(_, rest)| rest.find('/').map(|i| &rest[i..]))
            .unwrap_or("/");
        let Some(code) = e["response"]["status"].as_u64() else {
            continue;
        };
        if code == 0 {
            continue; // no response (a timeout)
        }
        if let Some(op) = operation_of(templates, method, path) {
            out.insert((op, code as u16));
        }
    }
    out
}

#[test]
fn schemathesis_finds_no_failure_and_every_documented_status_is_reached() {
    let sb = sandbox();
    let s = start(&sb, &["--max-runs", "8"]);
    let mut reached = Reached::default();

    // The document, and what it promises.
    let doc = Command::new("curl")
        .args(["-s", "--max-time", "30"])
        .arg(format!("{}/openapi.json", s.base))
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&doc.stdout).unwrap_or_else(|e| {
        panic!(
            "/openapi.json is not JSON ({e}): {}",
            String::from_utf8_lossy(&doc.stdout)
        )
    });
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1")),
        "{}",
        doc["openapi"]
    );
    let (promised, templates) = documented(&doc);
    assert!(templates.len() >= 12, "{templates:?}");

    // Runs the fuzzer's fixed parameters name: one completed, one failed.
    let (finished, failed) = {
        let mut c = Client {
            base: s.base.clone(),
            templates: &templates,
            reached: &mut reached,
        };
        let finished = c.start_run("echo", r#"{"inputs":{"who":"fuzz"}}"#);
        let failed = c.start_run("fails", "{}");
        c.wait_status(&finished, "completed");
        c.wait_status(&failed, "failed");
        wait_recorded(&sb, &failed);
        (finished, failed)
    };
    let config = sb
        .write(
            "schemathesis.toml",
            &schemathesis_config(&finished, &failed),
        )
        .unwrap();
    let har = sb.path().join("schemathesis.har");
    let out = schemathesis(&sb)
        .arg("--config-file")
        .arg(&config)
        .args(["run", &format!("{}/openapi.json", s.base)])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance",
            "--max-examples",
            "15",
            "--seed",
            "2511",
            "--workers",
            "1",
            "--request-timeout",
            "20",
            "--generation-database",
            "none",
            "--phases",
            "examples,coverage,fuzzing,stateful",
            "--report",
            "har",
            "--report-har-path",
        ])
        .arg(&har)
        .arg("--no-color")
        .output()
        .unwrap();
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "schemathesis failed ({}):\n{report}",
        out.status
    );
    assert!(report.contains("passed"), "{report}");
    reached.by_schemathesis = read_har(&har, &templates);
    let events_op = "GET /api/executions/{id}/events".to_owned();
    assert!(
        reached.by_schemathesis.contains(&(events_op, 200)),
        "schemathesis never read an event stream (so never validated one):\n{report}"
    );

    curl_the_rest(&sb, &s, &templates, &mut reached);

    let all: BTreeSet<(String, u16)> = reached
        .by_schemathesis
        .union(&reached.by_curl)
        .cloned()
        .collect();
    let missing: Vec<&(String, u16)> = promised.difference(&all).collect();
    let only_curl: Vec<String> = promised
        .iter()
        .filter(|p| !reached.by_schemathesis.contains(*p) && reached.by_curl.contains(*p))
        .map(|(op, c)| format!("{op} {c}"))
        .collect();
    eprintln!(
        "documented status codes reached only by the curl requests ({}):\n  {}",
        only_curl.len(),
        only_curl.join("\n  ")
    );
    assert!(
        missing.is_empty(),
        "documented status codes no request of this test got: {missing:?}"
    );
    // The other way round: no answer the document does not list (schemathesis checks its
    // own; these are curl's).
    let undocumented: Vec<&(String, u16)> = reached
        .by_curl
        .iter()
        .filter(|p| !promised.contains(*p))
        .collect();
    assert!(
        undocumented.is_empty(),
        "answers the document does not list: {undocumented:?}"
    );
}

/// The requests that reach what a fuzzer cannot (each asserting its answer).
fn curl_the_rest(sb: &Sandbox, s: &Server, templates: &[(String, String)], reached: &mut Reached) {
    let big = format!(r#"{{"inputs":{{"who":"{}"}}}}"#, "x".repeat(1_100_000));
    let big_file = sb.write("big.json", &big).unwrap();
    let big_arg = format!("@{}", big_file.display());
    {
        let mut c = Client {
            base: s.base.clone(),
            templates,
            reached,
        };
        // Workflows.
        c.expect(200, "GET", "/api/workflows", None);
        c.expect(200, "GET", "/api/workflows/env/echo", None);
        c.expect(404, "GET", "/api/workflows/env/nope", None);
        let r = c.expect(422, "GET", "/api/workflows/env/unparsable", None);
        assert!(
            r.json()["code"].as_str().unwrap().starts_with("WORKFLOW."),
            "{}",
            r.body
        );
        c.expect(200, "POST", "/api/workflows/env/echo/validate", None);
        let r = c.expect(422, "POST", "/api/workflows/env/broken/validate", None);
        assert!(r.body.contains("nowhere"), "{}", r.body);
        c.expect(404, "POST", "/api/workflows/env/nope/validate", None);
        c.expect(404, "POST", "/api/workflows/env/nope/run", Some("{}"));
        c.expect(400, "POST", "/api/workflows/env/echo/run", Some("{nope"));
        c.expect(
            422,
            "POST",
            "/api/workflows/env/echo/run",
            Some(r#"{"inputs":[1]}"#),
        );
        c.expect(422, "POST", "/api/workflows/env/broken/run", Some("{}"));
        c.expect(413, "POST", "/api/workflows/env/echo/run", Some(&big_arg));

        // Executions: unknown ones.
        c.expect(200, "GET", "/api/executions", None);
        for (m, p, b) in [
            ("GET", "/api/executions/nope", None),
            ("DELETE", "/api/executions/nope", None),
            ("POST", "/api/executions/nope/resume", Some("{}")),
            (
                "POST",
                "/api/executions/nope/respond",
                Some(r#"{"value":"x"}"#),
            ),
            ("GET", "/api/executions/nope/events", None),
        ] {
            let r = c.expect(404, m, p, b);
            assert_eq!(r.json()["code"], "USER.FACADE.RUN_NOT_FOUND", "{m} {p}");
        }

        // Cross-site requests (403) and bodies that are not JSON (415).
        for (m, p, json_body) in [
            ("POST", "/api/workflows/local/echo/validate", false),
            ("POST", "/api/workflows/local/echo/run", true),
            ("DELETE", "/api/executions/nope", false),
            ("POST", "/api/executions/nope/resume", true),
            ("POST", "/api/executions/nope/respond", true),
        ] {
            let b = json_body.then_some("{}");
            let r = c.expect_with(403, m, p, b, &["-H", "Origin: http://evil.example"]);
            assert_eq!(r.json()["code"], "USER.FACADE.UNAUTHORIZED", "{m} {p}");
            if m == "POST" {
                c.expect_with(
                    415,
                    m,
                    p,
                    None,
                    &["-H", "content-type: text/plain", "--data-binary", "{}"],
                );
            }
        }

        // A finished run: resume is refused, the stream replays, bad positions are 422.
        let done = c.start_run("echo", "{}");
        c.wait_status(&done, "completed");
        c.expect(
            409,
            "POST",
            &format!("/api/executions/{done}/resume"),
            Some("{}"),
        );
        c.expect(
            400,
            "POST",
            &format!("/api/executions/{done}/resume"),
            Some("{nope"),
        );
        c.expect(
            422,
            "POST",
            &format!("/api/executions/{done}/resume"),
            Some(r#"{"from_step":5}"#),
        );
        c.expect(
            413,
            "POST",
            &format!("/api/executions/{done}/resume"),
            Some(&big_arg),
        );
        let r = c.expect(200, "GET", &format!("/api/executions/{done}/events"), None);
        assert!(r.ctype.starts_with("text/event-stream"), "{r:?}");
        c.expect_with(
            422,
            "GET",
            &format!("/api/executions/{done}/events"),
            None,
            &["-H", "Last-Event-ID: x"],
        );
        c.expect(204, "DELETE", &format!("/api/executions/{done}"), None);

        // A failed run resumes (and fails again).
        let failed = c.start_run("fails", "{}");
        c.wait_status(&failed, "failed");
        wait_recorded(sb, &failed);
        c.expect(
            200,
            "POST",
            &format!("/api/executions/{failed}/resume"),
            Some("{}"),
        );

        // A run missing a required input is refused.
        let r = c.expect(422, "POST", "/api/workflows/env/ask/run", Some("{}"));
        assert!(r.body.contains("who"), "{}", r.body);

        // A pending approval: answered once (204), then 409; a bad answer is 422.
        let hold = c.start_run("hold", "{}");
        let pending = c.wait_pending(&hold);
        assert_eq!(pending["kind"], "approval", "{pending}");
        let rid = pending["request_id"].as_str().unwrap().to_owned();
        let respond = format!("/api/executions/{hold}/respond");
        c.expect(
            409,
            "POST",
            &format!("/api/executions/{hold}/resume"),
            Some("{}"),
        );
        c.expect(400, "POST", &respond, Some("{nope"));
        c.expect(413, "POST", &respond, Some(&big_arg));
        c.expect(
            422,
            "POST",
            &respond,
            Some(&json!({"request_id": rid, "option": "maybe"}).to_string()),
        );
        c.expect(
            404,
            "POST",
            &respond,
            Some(&json!({"request_id": "never-asked", "approved": true}).to_string()),
        );
        c.expect(
            204,
            "POST",
            &respond,
            Some(&json!({"request_id": rid, "approved": true}).to_string()),
        );
        c.expect(
            409,
            "POST",
            &respond,
            Some(&json!({"request_id": rid, "approved": true}).to_string()),
        );
        c.wait_status(&hold, "completed");

        // History.
        c.expect(200, "GET", "/api/history?status=success&limit=5", None);
        c.expect(200, "GET", "/api/history/stats", None);
        c.expect(422, "GET", "/api/history?since=not-a-date", None);
        // A query string that does not decode into the route's fields (a field twice).
        c.expect(400, "GET", "/api/history?limit=1&limit=2", None);
        c.expect(400, "GET", "/api/history/stats?since=1&since=2", None);
        c.expect(
            400,
            "GET",
            &format!("/api/executions/{done}/events?after=1&after=2"),
            None,
        );
        c.expect(422, "GET", "/api/history/stats?since=not-a-date", None);

        // An HTTP/1.1 request without `Host` (curl's `-H 'Host:'` leaves it out): 400 on
        // every operation (RFC 9112 §3.2); a body repeating a key: 400.
        for (m, tpl) in templates {
            let path = tpl
                .replace("{scope}", "env")
                .replace("{name}", "echo")
                .replace("{id}", "nope");
            let m = m.to_ascii_uppercase();
            let body = (m == "POST").then_some("{}");
            let r = c.expect_with(400, &m, &path, body, &["-H", "Host:"]);
            assert_eq!(
                r.json()["code"],
                "USER.INPUT.VALIDATION_FAILED",
                "{m} {path}"
            );
        }
        let r = c.expect(
            400,
            "POST",
            "/api/workflows/env/echo/run",
            Some(r#"{"inputs":{"who":"a","who":"b"}}"#),
        );
        assert!(r.body.contains("/inputs/who"), "{}", r.body);
    }

    // A token guards every operation: 401 for each without it.
    {
        let mut sbt = sandbox();
        sbt.set_env("HTTP_SCHEMA_TOKEN", "t0k3n-schema");
        let t = start(&sbt, &["--token-env", "HTTP_SCHEMA_TOKEN"]);
        let mut c = Client {
            base: t.base.clone(),
            templates,
            reached,
        };
        for (m, tpl) in templates {
            let path = tpl
                .replace("{scope}", "env")
                .replace("{name}", "echo")
                .replace("{id}", "nope");
            let m = m.to_ascii_uppercase();
            let body = (m == "POST").then_some("{}");
            let r = c.expect(401, &m, &path, body);
            assert_eq!(r.json()["code"], "USER.FACADE.UNAUTHORIZED");
        }
    }

    // The run cap: 429 with Retry-After for new runs and resumes.
    {
        let sbm = sandbox();
        let m = start(&sbm, &["--max-runs", "1"]);
        let mut c = Client {
            base: m.base.clone(),
            templates,
            reached,
        };
        let failed = c.start_run("fails", "{}");
        c.wait_status(&failed, "failed");
        let hold = c.start_run("hold", "{}");
        c.wait_pending(&hold);
        let r = c.expect(429, "POST", "/api/workflows/env/echo/run", Some("{}"));
        assert!(!r.retry_after.is_empty(), "429 without Retry-After: {r:?}");
        let r = c.expect(
            429,
            "POST",
            &format!("/api/executions/{failed}/resume"),
            Some("{}"),
        );
        assert!(!r.retry_after.is_empty(), "429 without Retry-After: {r:?}");
        c.expect(204, "DELETE", &format!("/api/executions/{hold}"), None);
    }

    // Draining after SIGTERM: no new runs (503) while a run finishes.
    {
        let sbd = sandbox();
        let d = start(&sbd, &["--drain-timeout", "30s"]);
        let mut c = Client {
            base: d.base.clone(),
            templates,
            reached,
        };
        let failed = c.start_run("fails", "{}");
        c.wait_status(&failed, "failed");
        let nap = c.start_run("sleeper", "{}");
        sigterm(&d);
        let mut got = 0;
        wait_for("POST run to be refused while draining", || {
            got = c
                .call("POST", "/api/workflows/env/echo/run", Some("{}"), &[])
                .code;
            got == 503
        });
        c.expect(
            503,
            "POST",
            &format!("/api/executions/{failed}/resume"),
            Some("{}"),
        );
        let _ = nap;
    }

    // No history store (the data root is a file, so nothing can be recorded): 503.
    {
        let sbs = sandbox();
        std::fs::create_dir_all(sbs.path().join("data")).unwrap();
        std::fs::write(sbs.path().join("data").join("awf"), "not a directory").unwrap();
        let n = start(&sbs, &[]);
        let mut c = Client {
            base: n.base.clone(),
            templates,
            reached,
        };
        c.expect(503, "GET", "/api/history", None);
        c.expect(503, "GET", "/api/history/stats", None);
    }

    // An ambiguous run id prefix: 422 (two runs whose ids share their first character).
    {
        let sbs = sandbox();
        let n = start(&sbs, &[]);
        let mut c = Client {
            base: n.base.clone(),
            templates,
            reached,
        };
        let mut ids: Vec<String> = Vec::new();
        let prefix = loop {
            let id = c.start_run("echo", "{}");
            c.wait_status(&id, "completed");
            if let Some(o) = ids.iter().find(|o| o[..1] == id[..1]) {
                break id
                    .chars()
                    .zip(o.chars())
                    .take_while(|(x, y)| x == y)
                    .map(|p| p.0)
                    .collect::<String>();
            }
            assert!(ids.len() < 40, "no two of {ids:?} share a first character");
            ids.push(id);
        };
        c.expect(422, "GET", &format!("/api/executions/{prefix}"), None);
        // DELETE takes a prefix as GET does: an ambiguous one is the same 422.
        c.expect(422, "DELETE", &format!("/api/executions/{prefix}"), None);
        c.expect(
            422,
            "GET",
            &format!("/api/executions/{prefix}/workflow"),
            None,
        );
        // A run's workflow: 200 by run; 404 for no such run.
        c.expect(
            200,
            "GET",
            &format!("/api/executions/{}/workflow", ids[0]),
            None,
        );
        c.expect(404, "GET", "/api/executions/no-such-run/workflow", None);
    }

    // A run another awf process runs (a terminal `awf run`): DELETE is 409 (it cannot be
    // stopped from here), not a 204 that stopped nothing.
    {
        let sbs = sandbox();
        let n = start(&sbs, &[]);
        let mut c = Client {
            base: n.base.clone(),
            templates,
            reached,
        };
        let mut other = sbs
            .cmd(&["run", "sleeper"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let id = awf_tests::wait_for_state(&sbs, "the terminal run to start", |v| {
            v["status"] == "running"
        });
        let r = c.expect(409, "DELETE", &format!("/api/executions/{id}"), None);
        assert!(r.body.contains("another awf process"), "{}", r.body);
        let _ = other.kill();
        let _ = other.wait();
    }

    // What the server cannot read: 500. A workflow file that fails to read (a link to
    // /proc/self/mem, whose first page is never mapped: EIO), a recorded run whose state file
    // is not JSON (read once the run left memory after --run-ttl), a states directory that
    // became a file, a history table that was dropped.
    {
        let sbs = sandbox();
        std::os::unix::fs::symlink("/proc/self/mem", sbs.path().join("wf").join("eio.yaml"))
            .unwrap();
        let n = start(&sbs, &["--run-ttl", "1s"]);
        let mut c = Client {
            base: n.base.clone(),
            templates,
            reached,
        };
        for (m, p, b) in [
            ("GET", "/api/workflows/env/eio", None),
            ("POST", "/api/workflows/env/eio/validate", None),
            ("POST", "/api/workflows/env/eio/run", Some("{}")),
        ] {
            let r = c.expect(500, m, p, b);
            assert_eq!(r.json()["code"], "SYSTEM.IO.READ_FAILED", "{m} {p}");
        }
        let id = c.start_run("echo", "{}");
        c.wait_status(&id, "completed");
        wait_for("the run to leave memory", || {
            c.execution(&id)["phase"] == "recorded"
        });
        let data = awf_tests::data(&sbs);
        std::fs::write(data.join("states").join(format!("{id}.json")), "{ not json").unwrap();
        c.expect(500, "GET", &format!("/api/executions/{id}"), None);
        c.expect(500, "GET", &format!("/api/executions/{id}/workflow"), None);
        c.expect(500, "DELETE", &format!("/api/executions/{id}"), None);
        c.expect(
            500,
            "POST",
            &format!("/api/executions/{id}/respond"),
            Some(r#"{"approved":true}"#),
        );
        let r = c.call(
            "POST",
            &format!("/api/executions/{id}/resume"),
            Some("{}"),
            &[],
        );
        eprintln!("resume of a run whose state file is not JSON: {r:?}");
        let states = data.join("states");
        std::fs::rename(&states, data.join("states.moved")).unwrap();
        std::fs::write(&states, "not a directory").unwrap();
        c.expect(500, "GET", "/api/executions", None);
        let db = data.join("history.db").display().to_string();
        let dropped = Command::new("python3")
            .args([
                "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('DROP TABLE runs'); c.commit()",
                &db,
            ])
            .status()
            .unwrap();
        assert!(dropped.success());
        c.expect(500, "GET", "/api/history", None);
        c.expect(500, "GET", "/api/history/stats", None);
    }
    {
        // A workflow directory that is a symbolic link loop cannot be listed.
        let mut sbl = sandbox();
        let l1 = sbl.path().join("l1");
        std::os::unix::fs::symlink(sbl.path().join("l2"), &l1).unwrap();
        std::os::unix::fs::symlink(&l1, sbl.path().join("l2")).unwrap();
        sbl.set_env("AWF_WORKFLOWS_PATH", &l1.display().to_string());
        let n = start(&sbl, &[]);
        let mut c = Client {
            base: n.base.clone(),
            templates,
            reached,
        };
        c.expect(500, "GET", "/api/workflows", None);
    }
}
