//! Fixes from trial users of `type: operation` / `http.request`, end to end over the built
//! binary against small HTTP/1.1 servers on 127.0.0.1 run by the test: a URL's userinfo
//! (Basic auth that an explicit `Authorization` header overrides, masked in every form and
//! every file the run writes), redirects (credential headers dropped across origins, no
//! `Referer`, `follow_redirects: false`), `awf validate` checking operation inputs, and the
//! hint after a refused input.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;

use awf_tests::Sandbox;
use awf_tests::http_test::Reply;
use awf_tests::http_test::Seen;
use awf_tests::http_test::Server;
use serde_json::Value;

/// `/echo` answers the request's headers; `/redirect/N?<target>` answers N with
/// `Location: <target>`; anything else 200 `hello`.
fn route(req: &Seen) -> Reply {
    if let Some((n, target)) = req
        .path
        .strip_prefix("/redirect/")
        .and_then(|r| r.split_once('?'))
    {
        Reply {
            status: n.parse::<u16>().unwrap_or(302),
            headers: format!("Location: {target}\r\n"),
            body: String::new(),
        }
    } else if req.path == "/echo" {
        let hs: Vec<String> = req
            .headers
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        Reply::text(200, format!("{} {}", req.method, hs.join(";")))
    } else {
        Reply::text(200, "hello")
    }
}

/// A workflow with one `http.request` state `call` whose `inputs:` block is `inputs` (YAML,
/// indented 6 spaces), routing a 3xx to `moved`, success to `done`, failure to `failed`.
fn workflow(inputs: &str) -> String {
    format!(
        "name: http-fixes
inputs:
  - name: url
    type: string
  - name: method
    type: string
    default: GET
states:
  initial: call
  call:
    type: operation
    operation: http.request
    inputs:
{inputs}
    transitions:
      - when: \"states.call.Response.status_code >= 300 && states.call.Response.status_code < 400\"
        goto: moved
    on_success: done
    on_failure: failed
  moved:
    type: terminal
  done:
    type: terminal
  failed:
    type: terminal
    status: failure
"
    )
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

/// Every file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_containing(&p, needle));
        } else if let Ok(bytes) = std::fs::read(&p)
            && bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
        {
            out.push(p.display().to_string());
        }
    }
    out
}

/// The password as the URL writes it; awf sends it percent-decoded ([`PASSWORD`]).
const PASSWORD_IN_URL: &str = "p%40ss-w0rd";
/// The password sent.
const PASSWORD: &str = "p@ss-w0rd";
/// base64("alice:p@ss-w0rd")
const BASIC_B64: &str = "YWxpY2U6cEBzcy13MHJk";

#[test]
fn userinfo_becomes_basic_auth_masked_in_the_result_and_every_file_of_the_run() {
    let sb = Sandbox::new().unwrap();
    let srv = Server::start(route);
    let wf = sb
        .write(
            "userinfo.yaml",
            &workflow(
                "      method: \"{{.inputs.method}}\"
      url: \"{{.inputs.url}}\"",
            ),
        )
        .unwrap();
    let url = srv
        .base
        .replace("http://", &format!("http://alice:{PASSWORD_IN_URL}@"))
        + "/echo";
    let (code, v, err) = run_json(
        &sb,
        &["run", wf.to_str().unwrap(), "-i", &format!("url={url}")],
    );
    assert_eq!(code, 0, "{v}\n{err}");
    assert_eq!(v["terminal"], "done", "{v}");
    let seen = srv.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].header("authorization"),
        [format!("Basic {BASIC_B64}")]
    );
    let body = v["states"]["call"]["output"].as_str().unwrap_or_default();
    assert!(body.contains("authorization=***"), "{body}");
    let text = format!("{v}{err}");
    for leak in [BASIC_B64, PASSWORD, PASSWORD_IN_URL] {
        assert!(!text.contains(leak), "{leak} shown: {text}");
    }
    // The files of the run: the `url` input itself is recorded as given (its name is not a
    // secret's), but neither the decoded password nor the Basic credential is anywhere.
    for leak in [BASIC_B64, PASSWORD] {
        let files = files_containing(&awf_tests::data(&sb), leak);
        assert!(files.is_empty(), "{leak} stored in {files:?}");
    }
}

#[test]
fn an_explicit_authorization_header_wins_over_userinfo() {
    let sb = Sandbox::new().unwrap();
    let srv = Server::start(route);
    let wf = sb
        .write(
            "explicit.yaml",
            &workflow(
                "      method: GET
      url: \"{{.inputs.url}}\"
      headers:
        Authorization: Bearer expl1c1t-t0ken",
            ),
        )
        .unwrap();
    let url = srv.base.replace("http://", "http://alice:s3cret-pw@") + "/echo";
    let (code, v, err) = run_json(
        &sb,
        &["run", wf.to_str().unwrap(), "-i", &format!("url={url}")],
    );
    assert_eq!(code, 0, "{v}\n{err}");
    let seen = srv.seen();
    assert_eq!(
        seen[0].header("authorization"),
        ["Bearer expl1c1t-t0ken"],
        "{seen:?}"
    );
    let text = format!("{v}{err}");
    assert!(
        !text.contains("expl1c1t-t0ken") && !text.contains("s3cret-pw"),
        "{text}"
    );
}

#[test]
fn a_cross_origin_redirect_carries_no_credential_and_no_referer() {
    let sb = Sandbox::new().unwrap();
    let first = Server::start(route);
    let other = Server::start(route);
    let wf = sb
        .write(
            "redirect.yaml",
            &workflow(
                "      method: GET
      url: \"{{.inputs.url}}\"
      headers:
        Authorization: Bearer t0ken-abc
        X-Api-Key: k3y-value
        Cookie: sid=c00kie-1
        X-Upstream-Token: upstr3am
        Accept: text/plain",
            ),
        )
        .unwrap();
    let url = format!("{}/redirect/302?{}/echo", first.base, other.base);
    let (code, v, err) = run_json(
        &sb,
        &["run", wf.to_str().unwrap(), "-i", &format!("url={url}")],
    );
    assert_eq!(code, 0, "{v}\n{err}");
    assert_eq!(v["terminal"], "done", "{v}");
    assert_eq!(first.seen()[0].header("x-api-key"), ["k3y-value"]);
    let seen = other.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].path, "/echo");
    for gone in [
        "authorization",
        "x-api-key",
        "cookie",
        "x-upstream-token",
        "referer",
    ] {
        assert!(seen[0].header(gone).is_empty(), "{gone}: {seen:?}");
    }
    assert_eq!(seen[0].header("accept"), ["text/plain"]);
}

#[test]
fn follow_redirects_false_answers_with_the_redirect_itself() {
    let sb = Sandbox::new().unwrap();
    let srv = Server::start(route);
    let wf = sb
        .write(
            "noredirect.yaml",
            &workflow(
                "      method: GET
      url: \"{{.inputs.url}}\"
      follow_redirects: false",
            ),
        )
        .unwrap();
    let url = format!("{}/redirect/302?/echo", srv.base);
    let (code, v, err) = run_json(
        &sb,
        &["run", wf.to_str().unwrap(), "-i", &format!("url={url}")],
    );
    assert_eq!(code, 0, "{v}\n{err}");
    assert_eq!(v["terminal"], "moved", "{v}");
    let out = v["states"]["call"]["output"].as_str().unwrap_or_default();
    assert!(out.starts_with("status_code=302\n"), "{out}");
    assert!(out.contains("\"Location\":\"/echo\""), "{out}");
    let seen = srv.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].method, "GET");
}

#[test]
fn validate_refuses_an_unknown_input_and_a_literal_method_awf_cannot_send() {
    let sb = Sandbox::new().unwrap();
    let srv = Server::start(route);
    let wf = sb
        .write(
            "typos.yaml",
            &workflow(&format!(
                "      method: PATCH
      url: {}/echo
      header:
        Accept: text/plain",
                srv.base
            )),
        )
        .unwrap();
    let r = sb.run(&["validate", wf.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 2, "{}\n{}", r.stdout, r.stderr);
    let text = format!("{}{}", r.stdout, r.stderr);
    assert!(text.contains("states.call.inputs.header"), "{text}");
    assert!(text.contains("did you mean 'headers'"), "{text}");
    assert!(text.contains("states.call.inputs.method"), "{text}");
    assert!(text.contains("GET, POST, PUT, DELETE"), "{text}");
    // `awf run` refuses it before anything is sent.
    let r = sb.run(&["run", wf.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 2, "{}\n{}", r.stdout, r.stderr);
    assert!(srv.seen().is_empty());
    // A templated method is checked when the step runs; the error and its hints say what to
    // change before a resume could succeed.
    let wf = sb
        .write(
            "templated.yaml",
            &workflow(
                "      method: \"{{.inputs.method}}\"
      url: \"{{.inputs.url}}\"",
            )
            .replace("    on_failure: failed\n", ""),
        )
        .unwrap();
    let url = format!("{}/echo", srv.base);
    let r = sb
        .run(&[
            "run",
            wf.to_str().unwrap(),
            "-i",
            &format!("url={url}"),
            "-i",
            "method=PATCH",
        ])
        .unwrap();
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("[USER.INPUT.VALIDATION_FAILED]"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("Hint: send one of GET, POST, PUT, DELETE (any case)"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("Hint: fix that input first"),
        "{}",
        r.stderr
    );
    assert!(srv.seen().is_empty());
}
