//! Fixes from an adversarial trial of `awf serve`, over the built binary with curl as the
//! client: cross-site requests and DNS rebinding refused (403 for a foreign `Origin` or
//! `Host`, 415 for a body that is not `application/json`), event streams whose headers go
//! out at once, a long URI answered 414 as a problem, JSON bodies that are not objects and an
//! empty `from_step` refused (422), the bearer scheme in any case and two `Authorization`
//! headers refused (400).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Command;

use awf_tests::Sandbox;
use awf_tests::http_serve::Server;
use awf_tests::http_serve::curl;
use awf_tests::http_serve::json_of;
use awf_tests::http_serve::sandbox_with;
use awf_tests::http_serve::start;
use awf_tests::wait_for;
use serde_json::Value;

/// Touches `ran-<tag>` in the working directory: whether a request started a run shows.
const MARK: &str = "name: mark
inputs:
  - name: tag
    type: string
    default: none
states:
  initial: touch
  touch:
    type: step
    command: touch ran-{{.inputs.tag}}
    on_success: done
  done:
    type: terminal
";

const SLEEPER: &str = "name: sleeper
states:
  initial: nap
  nap:
    type: step
    command: sleep 300
    on_success: done
  done:
    type: terminal
";

const FAILS: &str = "name: fails
states:
  initial: boom
  boom:
    type: step
    command: exit 3
    on_success: done
    on_failure: failed
  done:
    type: terminal
  failed:
    type: terminal
    status: failure
";

const GATED: &str = "name: gated
states:
  initial: deploy
  deploy:
    type: step
    command: echo deployed
    approval: \"Deploy now?\"
    on_success: done
  done:
    type: terminal
";

fn sandbox() -> Sandbox {
    sandbox_with(&[
        ("mark", MARK),
        ("sleeper", SLEEPER),
        ("fails", FAILS),
        ("gated", GATED),
    ])
}

/// Asserts a problem document with `status` and `code`, with a hint.
fn assert_problem(got: &(u16, String, String), status: u16, code: &str) -> Value {
    let (c, body, ctype) = got;
    assert_eq!(*c, status, "{body}");
    assert_eq!(ctype, "application/problem+json", "{body}");
    let v = json_of(body);
    assert_eq!(v["status"], status, "{body}");
    assert_eq!(v["code"], code, "{body}");
    assert!(
        v["hints"][0].as_str().is_some_and(|h| !h.is_empty()),
        "{body}"
    );
    v
}

const JSON: &str = "Content-Type: application/json";

fn post_json(url: &str, body: &str, extra: &[&str]) -> (u16, String, String) {
    let mut args = vec!["-X", "POST", "-H", JSON, "--data-binary", body];
    args.extend_from_slice(extra);
    args.push(url);
    curl(&args)
}

fn start_run(s: &Server, name: &str, body: &str) -> String {
    let got = post_json(
        &format!("{}/api/workflows/env/{name}/run", s.base),
        body,
        &[],
    );
    assert_eq!(got.0, 202, "{}", got.1);
    json_of(&got.1)["body"]["execution_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn status_of(s: &Server, id: &str) -> String {
    let (code, body, _) = curl(&[&format!("{}/api/executions/{id}", s.base)]);
    assert_eq!(code, 200, "{body}");
    json_of(&body)["body"]["status"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

/// The run's pending requests.
fn pending(s: &Server, id: &str) -> usize {
    let (code, body, _) = curl(&[&format!("{}/api/executions/{id}", s.base)]);
    assert_eq!(code, 200, "{body}");
    json_of(&body)["body"]["pending"]
        .as_array()
        .map_or(0, Vec::len)
}

fn wait_pending(s: &Server, id: &str) {
    wait_for(&format!("run {id} to ask"), || pending(s, id) == 1);
}

fn wait_status(s: &Server, id: &str, want: &str) {
    wait_for(&format!("run {id} to be {want}"), || {
        status_of(s, id) == want
    });
}

#[test]
fn cross_site_posts_and_foreign_hosts_start_no_run() {
    let sb = sandbox();
    let s = start(&sb, &["--cors-origin", "http://good.example"]);
    let run = format!("{}/api/workflows/env/mark/run", s.base);
    let body = |tag: &str| format!(r#"{{"inputs":{{"tag":"{tag}"}}}}"#);
    let evil = "Origin: http://evil.example";
    let refused: Vec<(Vec<String>, u16, &str)> = vec![
        // The finding: a "simple" cross-origin POST, text/plain, foreign Origin and Host.
        (
            vec![
                "-H".into(),
                evil.into(),
                "-H".into(),
                "Host: evil.example:80".into(),
                "-H".into(),
                "Content-Type: text/plain".into(),
                "--data-binary".into(),
                body("plain"),
            ],
            403,
            "USER.FACADE.UNAUTHORIZED",
        ),
        // Each check alone: a foreign Origin with a JSON body,
        (
            vec![
                "-H".into(),
                evil.into(),
                "-H".into(),
                JSON.into(),
                "--data-binary".into(),
                body("origin"),
            ],
            403,
            "USER.FACADE.UNAUTHORIZED",
        ),
        // `Origin: null` (a sandboxed frame, a file: page),
        (
            vec![
                "-H".into(),
                "Origin: null".into(),
                "-H".into(),
                JSON.into(),
                "--data-binary".into(),
                body("null"),
            ],
            403,
            "USER.FACADE.UNAUTHORIZED",
        ),
        // a rebound name (same origin to the browser, a foreign Host to us),
        (
            vec![
                "-H".into(),
                "Host: rebound.example:80".into(),
                "-H".into(),
                "Origin: http://rebound.example:80".into(),
                "-H".into(),
                JSON.into(),
                "--data-binary".into(),
                body("host"),
            ],
            403,
            "USER.FACADE.UNAUTHORIZED",
        ),
        // a body in a form, no Origin (curl -d's default type),
        (
            vec!["-d".into(), body("form")],
            415,
            "USER.INPUT.VALIDATION_FAILED",
        ),
        // text/plain, no Origin.
        (
            vec![
                "-H".into(),
                "Content-Type: text/plain".into(),
                "--data-binary".into(),
                body("text"),
            ],
            415,
            "USER.INPUT.VALIDATION_FAILED",
        ),
    ];
    for (extra, status, code) in &refused {
        let mut args: Vec<&str> = vec!["-X", "POST"];
        args.extend(extra.iter().map(String::as_str));
        args.push(&run);
        let v = assert_problem(&curl(&args), *status, code);
        assert!(!v["detail"].as_str().unwrap().is_empty(), "{v}");
    }
    // Accepted: no Origin (curl), this server's own origin (the web page), an allowed
    // origin, and the server called `localhost`.
    let own = format!("Origin: {}", s.base);
    let local_host = format!("Host: {}", s.addr().replace("127.0.0.1", "localhost"));
    let mut ids = Vec::new();
    for (tag, extra) in [
        ("curl", vec![]),
        ("own", vec!["-H", own.as_str()]),
        ("good", vec!["-H", "Origin: http://good.example"]),
        ("localhost", vec!["-H", local_host.as_str()]),
    ] {
        let got = post_json(&run, &body(tag), &extra);
        assert_eq!(got.0, 202, "{tag}: {}", got.1);
        ids.push(
            json_of(&got.1)["body"]["execution_id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    for id in &ids {
        wait_status(&s, id, "completed");
    }
    for tag in ["curl", "own", "good", "localhost"] {
        assert!(sb.path().join(format!("ran-{tag}")).exists(), "{tag}");
    }
    for tag in ["plain", "origin", "null", "host", "form", "text"] {
        assert!(!sb.path().join(format!("ran-{tag}")).exists(), "{tag} ran");
    }
    // A GET with a foreign Host is refused too (rebinding reads); a GET with a foreign
    // Origin is not (CORS keeps the answer from the page).
    let got = curl(&[
        "-H",
        "Host: evil.example",
        &format!("{}/api/workflows", s.base),
    ]);
    assert_problem(&got, 403, "USER.FACADE.UNAUTHORIZED");
    let got = curl(&["-H", evil, &format!("{}/api/workflows", s.base)]);
    assert_eq!(got.0, 200, "{}", got.1);
    // A Host that is not text (a byte over 0x7f) is no way around the check.
    use std::os::unix::ffi::OsStrExt;
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H"])
        .arg(std::ffi::OsStr::from_bytes(b"Host: evil\xff.example"))
        .arg(format!("{}/api/workflows", s.base))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "403");
}

#[test]
fn cross_site_cancels_and_answers_are_refused() {
    let sb = sandbox();
    let s = start(&sb, &[]);
    let id = start_run(&s, "gated", "{}");
    wait_pending(&s, &id);
    let url = format!("{}/api/executions/{id}", s.base);
    let evil = "Origin: http://evil.example";
    assert_problem(
        &curl(&["-X", "DELETE", "-H", evil, &url]),
        403,
        "USER.FACADE.UNAUTHORIZED",
    );
    let respond = format!("{url}/respond");
    assert_problem(
        &post_json(&respond, r#"{"approved":true}"#, &["-H", evil]),
        403,
        "USER.FACADE.UNAUTHORIZED",
    );
    assert_problem(
        &curl(&[
            "-X",
            "POST",
            "-H",
            "Content-Type: text/plain",
            "--data-binary",
            r#"{"approved":true}"#,
            &respond,
        ]),
        415,
        "USER.INPUT.VALIDATION_FAILED",
    );
    assert_eq!(pending(&s, &id), 1);
    // The same requests from this server's own page go through.
    let own = format!("Origin: {}", s.base);
    let got = curl(&["-X", "DELETE", "-H", &own, &url]);
    assert_eq!(got.0, 204, "{}", got.1);
    wait_status(&s, &id, "cancelled");
}

#[test]
fn an_event_stream_sends_its_headers_at_once() {
    let sb = sandbox();
    let s = start(&sb, &[]);
    let id = start_run(&s, "sleeper", "{}");
    wait_status(&s, &id, "running");
    // Nothing to replay after 99999: before the fix nothing came before the 15 s heartbeat.
    let out = Command::new("curl")
        .args(["-sNi", "--max-time", "4"])
        .arg(format!("{}/api/executions/{id}/events?after=99999", s.base))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.starts_with("HTTP/1.1 200"), "{text:?}");
    assert!(
        text.to_ascii_lowercase()
            .contains("content-type: text/event-stream"),
        "{text:?}"
    );
    assert!(text.contains("\r\n\r\n: open\n"), "{text:?}");
    let got = curl(&["-X", "DELETE", &format!("{}/api/executions/{id}", s.base)]);
    assert_eq!(got.0, 204, "{}", got.1);
}

#[test]
fn a_long_uri_is_a_414_problem() {
    let sb = sandbox();
    let s = start(&sb, &[]);
    let long = format!("{}/api/workflows/local/{}", s.base, "x".repeat(20_000));
    assert_problem(&curl(&[&long]), 414, "USER.INPUT.VALIDATION_FAILED");
    // A URI under the cap is answered as before.
    let short = format!("{}/api/workflows/local/{}", s.base, "x".repeat(2_000));
    assert_eq!(curl(&[&short]).0, 404);
}

#[test]
fn json_bodies_that_are_not_objects_and_an_empty_from_step_are_422() {
    let sb = sandbox();
    let s = start(&sb, &[]);
    let run = format!("{}/api/workflows/env/mark/run", s.base);
    for body in ["[]", "[1,2,3]", "\"x\"", "1", "null", "true"] {
        let v = assert_problem(
            &post_json(&run, body, &[]),
            422,
            "USER.INPUT.VALIDATION_FAILED",
        );
        assert!(
            v["detail"].as_str().unwrap().contains("object"),
            "{body}: {v}"
        );
    }
    assert!(!sb.path().join("ran-none").exists());
    let id = start_run(&s, "fails", "{}");
    wait_status(&s, &id, "failed");
    let resume = format!("{}/api/executions/{id}/resume", s.base);
    for body in [
        "[]",
        "\"x\"",
        r#"{"from_step":""}"#,
        r#"{"from_step":"  "}"#,
    ] {
        assert_problem(
            &post_json(&resume, body, &[]),
            422,
            "USER.INPUT.VALIDATION_FAILED",
        );
    }
    assert_eq!(status_of(&s, &id), "failed");
    let gated = start_run(&s, "gated", "{}");
    wait_pending(&s, &gated);
    let respond = format!("{}/api/executions/{gated}/respond", s.base);
    assert_problem(
        &post_json(&respond, "[]", &[]),
        422,
        "USER.INPUT.VALIDATION_FAILED",
    );
    assert_eq!(pending(&s, &gated), 1);
    // An empty body is still `{}`: the resume is accepted.
    let got = post_json(&resume, "", &[]);
    assert_eq!(got.0, 200, "{}", got.1);
}

#[test]
fn the_bearer_scheme_is_case_insensitive_and_two_authorizations_are_400() {
    let mut sb = sandbox();
    sb.set_env("SEC_TOKEN", "tok-sec-41");
    let s = start(&sb, &["--token-env", "SEC_TOKEN"]);
    let url = format!("{}/api/workflows", s.base);
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let h = format!("Authorization: {scheme} tok-sec-41");
        let got = curl(&["-H", &h, &url]);
        assert_eq!(got.0, 200, "{scheme}: {}", got.1);
    }
    let got = curl(&["-H", "Authorization: bearer wrong", &url]);
    assert_problem(&got, 401, "USER.FACADE.UNAUTHORIZED");
    let got = curl(&[
        "-H",
        "Authorization: Bearer tok-sec-41",
        "-H",
        "Authorization: Bearer other",
        &url,
    ]);
    assert_problem(&got, 400, "USER.INPUT.VALIDATION_FAILED");
    let got = curl(&[
        "-H",
        "Authorization: Bearer other",
        "-H",
        "Authorization: Bearer tok-sec-41",
        &url,
    ]);
    assert_problem(&got, 400, "USER.INPUT.VALIDATION_FAILED");
}

/// A string input given a JSON object or list is a 422 naming the input, never the value,
/// and nothing runs: the object reached the step as JSON text with its quotes taken apart by
/// the shell, which no mask of the value matched (a breaker's `{"api_token": {"a": "…"}}`
/// printed the secret in the step's output).
#[test]
fn a_json_object_or_list_for_a_string_input_is_refused_before_anything_runs() {
    let sb = sandbox();
    let s = start(&sb, &[]);
    for (value, kind) in [
        (r#"{"a": "NESTEDsecret99"}"#, "an object"),
        (r#"["LISTsecret1"]"#, "a list"),
    ] {
        let got = post_json(
            &format!("{}/api/workflows/env/mark/run", s.base),
            &format!(r#"{{"inputs": {{"tag": {value}}}}}"#),
            &[],
        );
        let v = assert_problem(&got, 422, "USER.INPUT.VALIDATION_FAILED");
        let detail = v["detail"].as_str().unwrap_or_default().to_owned() + &got.1;
        assert!(
            detail.contains(&format!("inputs.tag: expected a string, not {kind}")),
            "{}",
            got.1
        );
        assert!(!got.1.contains("secret"), "{}", got.1);
    }
    // A number is a string input's text, as on the command line.
    let id = start_run(&s, "mark", r#"{"inputs": {"tag": 7}}"#);
    wait_status(&s, &id, "completed");
    assert!(sb.path().join("ran-7").exists());
    let ran: Vec<_> = std::fs::read_dir(sb.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("ran-"))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(ran, ["ran-7"]);
}

/// A secret input (`api_token`) with a default, an empty secret default (`db_password`) and a
/// plain input (`region`). The step prints the first 12 hex digits of the SHA-256 of the
/// token it was given, never the token.
const KEYED: &str = r#"name: keyed
inputs:
  - name: api_token
    type: string
    default: s3cr3t
    description: the service's token
  - name: db_password
    type: string
    default: ""
  - name: region
    type: string
    default: eu
states:
  initial: use
  use:
    type: step
    command: printf 'token=%s region={{.inputs.region}}\n' "$(printf %s '{{.inputs.api_token}}' | sha256sum | cut -c1-12)"
    on_success: done
  done:
    type: terminal
"#;

/// `sha256("s3cr3t")`, its first 12 hex digits.
const S3CR3T_SHA: &str = "4e738ca5563c";
/// `sha256("***")`, its first 12 hex digits: what a run given the mask would print.
const MASK_SHA: &str = "596f4162a52f";

/// `GET /api/workflows/{scope}/{name}` (and a run's `…/workflow`) never sends a secret
/// input's default: `"***"` and `secret: true` instead (an empty one stays `""`); a run
/// started without the input gets the real default, never the mask.
#[test]
fn a_secret_inputs_default_is_masked_in_the_workflow_detail_and_still_applied() {
    let sb = sandbox_with(&[("keyed", KEYED)]);
    let s = start(&sb, &[]);
    let (code, body, _) = curl(&[&format!("{}/api/workflows/env/keyed", s.base)]);
    assert_eq!(code, 200, "{body}");
    assert!(
        !body.contains("s3cr3t"),
        "the secret default is sent: {body}"
    );
    let inputs = json_of(&body)["body"]["inputs"].clone();
    let by_name = |n: &str| {
        inputs
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"] == n)
            .cloned()
            .unwrap_or_else(|| panic!("no input {n}: {inputs}"))
    };
    let token = by_name("api_token");
    assert_eq!(token["secret"], true, "{token}");
    assert_eq!(token["default"], "***", "{token}");
    assert_eq!(token["required"], false, "{token}");
    assert_eq!(token["description"], "the service's token", "{token}");
    let empty = by_name("db_password");
    assert_eq!(empty["secret"], true, "{empty}");
    assert_eq!(empty["default"], "", "nothing to hide: {empty}");
    let region = by_name("region");
    assert_eq!(region["default"], "eu", "{region}");
    assert!(
        region.get("secret").is_none(),
        "only secrets say so: {region}"
    );

    // Left out, the secret input gets its real default (not `***`).
    let id = start_run(&s, "keyed", r#"{"inputs": {"region": "us"}}"#);
    wait_status(&s, &id, "completed");
    let (code, body, _) = curl(&[&format!("{}/api/executions/{id}", s.base)]);
    assert_eq!(code, 200, "{body}");
    let out = json_of(&body)["body"]["states"]["use"]["output"].clone();
    assert_eq!(out, format!("token={S3CR3T_SHA} region=us\n"), "{body}");
    assert_ne!(S3CR3T_SHA, MASK_SHA);
    assert!(!body.contains("s3cr3t"), "{body}");
    // The run's workflow, as its file is now, masks it the same way.
    let (code, body, _) = curl(&[&format!("{}/api/executions/{id}/workflow", s.base)]);
    assert_eq!(code, 200, "{body}");
    assert!(!body.contains("s3cr3t"), "{body}");
    assert!(body.contains(r#""default":"***""#), "{body}");
    // Given, the value sent is used.
    let id = start_run(&s, "keyed", r#"{"inputs": {"api_token": "typed-t0ken"}}"#);
    wait_status(&s, &id, "completed");
    let (_, body, _) = curl(&[&format!("{}/api/executions/{id}", s.base)]);
    let out = json_of(&body)["body"]["states"]["use"]["output"].clone();
    assert_eq!(out, "token=a336ffd31cd0 region=eu\n", "{body}");
}
