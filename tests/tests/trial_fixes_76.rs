//! Fixes of a security trial of `awf mcp-serve` (trial 76): Grep on lines over 1 MiB, Edit's
//! size check before reading, a misspelt secret argument of a workflow tool in the audit,
//! Bash's (and the other tools') arguments against their schemas, a socket given to Read,
//! the data directories' modes and an `audit_path` that is a symbolic link. Over the real
//! `awf mcp-serve`, driven with raw JSON-RPC lines (as trial_fixes_68.rs does), in a sandbox.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::os::unix::fs::PermissionsExt as _;

use awf_tests::Sandbox;
use awf_tests::mcp::RawServer;
use awf_tests::mcp::config;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

/// `awf mcp-serve` over the built-ins, rooted at `<sandbox>/ws`, auditing to
/// `<sandbox>/audit.jsonl`; initialized.
fn serve(sb: &Sandbox) -> RawServer {
    std::fs::create_dir_all(sb.path().join("ws")).unwrap();
    let cfg = config(
        sb,
        &json!({"intercept_builtins": true, "root_dir": sb.path().join("ws"), "run_id": "r-76",
            "step": "s", "audit_path": sb.path().join("audit.jsonl")}),
    );
    let mut raw = RawServer::awf(sb, &cfg, &[]);
    raw.initialize("2025-06-18");
    raw
}

/// The text of a `tools/call` answer, and whether it is an error.
fn text(out: &Value) -> (String, bool) {
    let r = &out["result"];
    (
        r["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        r["isError"] == true,
    )
}

/// Finding 1: a match more than 1 MiB into a line was missed, silently (a line of 20 MB gave
/// "No matches found"). Every matching line is found, counted and listed now.
#[test]
fn grep_finds_matches_in_lines_longer_than_a_mib() {
    let sb = Sandbox::new().unwrap();
    let mut raw = serve(&sb);
    let ws = sb.path().join("ws");
    std::fs::create_dir_all(ws.join("g")).unwrap();
    let q = vec![b'q'; 1 << 20];
    std::fs::write(ws.join("g/only.txt"), [&q[..], b" NEEDLE\n"].concat()).unwrap();
    std::fs::write(
        ws.join("g/mixed.txt"),
        [b"first NEEDLE\n", &q[..], b"NEEDLE two\nthird NEEDLE\n"].concat(),
    )
    .unwrap();
    std::fs::create_dir_all(ws.join("big")).unwrap();
    std::fs::write(
        ws.join("big/line.txt"),
        [&vec![b'z'; 20_000_000][..], b"NEEDLE\n"].concat(),
    )
    .unwrap();
    let real = |rel: &str| ws.canonicalize().unwrap().join(rel).display().to_string();
    let (mixed, only) = (real("g/mixed.txt"), real("g/only.txt"));

    let out = raw.call(
        1,
        "Grep",
        &json!({"pattern": "NEEDLE", "path": "g", "output_mode": "count"}),
    );
    assert_eq!(text(&out), (format!("{mixed}:3\n{only}:1\n"), false));
    let out = raw.call(2, "Grep", &json!({"pattern": "NEEDLE", "path": "g"}));
    assert_eq!(text(&out), (format!("{mixed}\n{only}\n"), false));
    let out = raw.call(
        3,
        "Grep",
        &json!({"pattern": "NEEDLE", "path": "g", "output_mode": "content"}),
    );
    let (t, err) = text(&out);
    assert!(!err, "{t}");
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 5, "{}", &t[..t.len().min(500)]);
    assert_eq!(lines[0], format!("{mixed}:1:first NEEDLE"));
    assert!(
        lines[1].starts_with(&format!("{mixed}:2:qqq")),
        "{}",
        lines[1]
    );
    assert_eq!(lines[2], format!("{mixed}:3:third NEEDLE"));
    assert!(
        lines[3].starts_with(&format!("{only}:1:qqq")),
        "{}",
        lines[3]
    );
    assert!(lines[3].ends_with("… [line truncated]"), "{}", lines[3]);
    assert_eq!(
        lines[4],
        "[awf: 2 line(s) longer than 1000 characters were cut]"
    );
    let out = raw.call(
        4,
        "Grep",
        &json!({"pattern": "NEEDLE", "path": "big", "output_mode": "count"}),
    );
    assert_eq!(text(&out), (format!("{}:1\n", real("big/line.txt")), false));
    raw.close();
}

/// The peak resident memory of `pid`, in kB (`VmHWM`).
fn peak_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Finding 2: Edit read a whole 1 GiB file (1 GB of memory) before refusing it for its
/// size. The size is checked first now, from the opened file: the server's peak memory stays
/// far below the file's size, and the message is the same.
#[test]
fn edit_refuses_a_file_over_its_limit_without_reading_it() {
    let sb = Sandbox::new().unwrap();
    let mut raw = serve(&sb);
    // Sparse: 1 GiB of size, no disk.
    let f = std::fs::File::create(sb.path().join("ws/oneline.txt")).unwrap();
    f.set_len(1 << 30).unwrap();
    drop(f);
    let out = raw.call(
        1,
        "Edit",
        &json!({"path": "oneline.txt", "old": "a", "new": "b"}),
    );
    assert_eq!(
        text(&out),
        (
            "Edit: oneline.txt is 1073741824 bytes, over the 10485760 bytes Edit rewrites; use Bash (sed) or Write"
                .to_owned(),
            true
        )
    );
    // Write over it reads only its head (for its BOM and line endings).
    let out = raw.call(
        2,
        "Write",
        &json!({"path": "oneline.txt", "content": "small\n"}),
    );
    assert_eq!(text(&out).1, false, "{out}");
    let peak = peak_kb(raw.child.id());
    assert!(peak < 300 * 1024, "peak memory {peak} kB");
    assert_eq!(
        std::fs::read_to_string(sb.path().join("ws/oneline.txt")).unwrap(),
        "small\n"
    );
    raw.close();
}

const SEC2: &str = "name: sec2\ninputs:\n  - name: api_token\n    type: string\n    required: true\nstates:\n  initial: s\n  s:\n    type: step\n    command: echo ok\n    on_success: done\n  done:\n    type: terminal\n";

/// Finding 3: a misspelt secret argument (`api_tokn`) of a workflow tool was refused, but its
/// value was recorded in the audit in clear. An argument the tool does not declare is
/// recorded as `***` now; the declared secret still is, and other values are kept.
#[test]
fn a_misspelt_secret_argument_of_a_workflow_tool_is_recorded_masked() {
    let sb = Sandbox::new().unwrap();
    sb.write("wf/sec2.yaml", SEC2).unwrap();
    let audit = sb.path().join("audit.jsonl");
    let cfg = config(
        &sb,
        &json!({"root_dir": sb.path(), "run_id": "r-76", "step": "s", "audit_path": audit}),
    );
    let cfg = cfg.display().to_string();
    let mut raw = RawServer::spawn(sb.cmd(&["mcp-serve", "--config", &cfg, "--workflows", "wf"]));
    raw.initialize("2025-06-18");
    let out = raw.call(1, "sec2", &json!({"api_tokn": "sk-MCPWFSECRET-79"}));
    let (t, err) = text(&out);
    assert!(err, "{out}");
    assert!(
        t.contains("unknown argument `api_tokn` (did you mean 'api_token'?)"),
        "{t}"
    );
    let out = raw.call(2, "sec2", &json!({"api_token": "sk-MCPWFSECRET-80"}));
    assert_eq!(text(&out).1, false, "{out}");
    raw.close();
    let log = std::fs::read_to_string(&audit).unwrap();
    assert!(!log.contains("MCPWFSECRET"), "{log}");
    let inputs: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["payload"]["input"].clone())
        .collect();
    assert_eq!(
        inputs,
        [json!({"api_tokn": "***"}), json!({"api_token": "***"})]
    );
}

/// Finding 4: Bash took `timeout_seconds` 0 (run with the default), `"1"` and 1.5, which its
/// schema (`integer`, `minimum` 1) does not allow. Each is refused as Read refuses its own
/// (`got a string ("2")`); so are the other tools' numbers and booleans off their schemas.
#[test]
fn tool_arguments_off_their_schemas_are_refused() {
    let sb = Sandbox::new().unwrap();
    let mut raw = serve(&sb);
    std::fs::write(sb.path().join("ws/f.txt"), "a\n").unwrap();
    let secs = "Bash: argument `timeout_seconds` must be an integer of at least 1 (the timeout in seconds), got";
    let cases = [
        ("Bash", json!({"command": "echo x", "timeout_seconds": 0}), format!("{secs} 0")),
        ("Bash", json!({"command": "echo x", "timeout_seconds": "1"}), format!("{secs} a string (\"1\")")),
        ("Bash", json!({"command": "echo x", "timeout_seconds": 1.5}), format!("{secs} 1.5")),
        (
            "Bash",
            json!({"command": "echo x", "timeout": 0}),
            "Bash: argument `timeout` must be an integer of at least 1 (the timeout in milliseconds), got 0".to_owned(),
        ),
        (
            "Bash",
            json!({"command": "echo x", "run_in_background": "false"}),
            "Bash: argument `run_in_background` must be a boolean (true or false), got a string (\"false\")".to_owned(),
        ),
        (
            "Grep",
            json!({"pattern": "a", "head_limit": 0}),
            "Grep: argument `head_limit` must be an integer of at least 1 (the most entries to return), got 0".to_owned(),
        ),
        (
            "Grep",
            json!({"pattern": "a", "-C": "2"}),
            "Grep: argument `-C` must be an integer of at least 0 (a number of context lines), got a string (\"2\")".to_owned(),
        ),
        (
            "Grep",
            json!({"pattern": "a", "-A": 1.5}),
            "Grep: argument `-A` must be an integer of at least 0 (a number of context lines), got 1.5".to_owned(),
        ),
        (
            "Grep",
            json!({"pattern": "a", "case_insensitive": "true"}),
            "Grep: argument `case_insensitive` must be a boolean (true or false), got a string (\"true\")".to_owned(),
        ),
        (
            "Edit",
            json!({"path": "f.txt", "old": "a", "new": "b", "replace_all": 1}),
            "Edit: argument `replace_all` must be a boolean (true or false), got 1".to_owned(),
        ),
    ];
    for (i, (tool, args, want)) in cases.into_iter().enumerate() {
        let out = raw.call(i as u64 + 1, tool, &args);
        assert_eq!(text(&out), (want, true), "{tool} {args}");
    }
    // Nothing was edited; the well-typed calls run.
    assert_eq!(
        std::fs::read_to_string(sb.path().join("ws/f.txt")).unwrap(),
        "a\n"
    );
    let out = raw.call(
        100,
        "Bash",
        &json!({"command": "echo fine", "timeout_seconds": 5.0}),
    );
    let (t, err) = text(&out);
    assert!(!err && t.contains("fine"), "{t}");
    let out = raw.call(
        101,
        "Grep",
        &json!({"pattern": "a", "-C": 0, "head_limit": 1}),
    );
    assert_eq!(text(&out).1, false, "{out}");
    raw.close();
}

/// Finding 5a: Read of a unix socket gave the raw `No such device or address (os error 6)`.
/// It is refused as a FIFO or a device is, saying what it is.
#[test]
fn read_and_edit_name_a_socket_as_such() {
    let sb = Sandbox::new().unwrap();
    let mut raw = serve(&sb);
    let _sock = std::os::unix::net::UnixListener::bind(sb.path().join("ws/sock")).unwrap();
    let out = raw.call(1, "Read", &json!({"path": "sock"}));
    assert_eq!(
        text(&out),
        (
            "Read: sock is a socket, not a regular file: refused".to_owned(),
            true
        )
    );
    let out = raw.call(2, "Edit", &json!({"path": "sock", "old": "a", "new": "b"}));
    let (t, err) = text(&out);
    assert!(err, "{t}");
    assert!(
        t.contains("sock is a socket, not a regular file: refused"),
        "{t}"
    );
    raw.close();
}

/// Finding 5b: under the 0700 data root, `transcripts/` was made 0750 and `locks/` 0755.
/// Every data directory is 0700 now.
#[test]
fn the_data_directories_are_private() {
    let sb = Sandbox::new().unwrap();
    let r = sb
        .run_workflow(
            "d.yaml",
            "name: d\nstates:\n  initial: s\n  s: {type: step, command: echo hi, on_success: done}\n  done: {type: terminal}\n",
            &[],
        )
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let data = awf_tests::data(&sb);
    for dir in ["states", "transcripts", "locks"] {
        let mode = std::fs::metadata(data.join(dir))
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "{dir}: {mode:o}");
    }
}

/// Finding 5c: an `audit_path` that is a symbolic link was followed: the records (Write's
/// contents among them) went to its target. Refused at start now, with its code and a hint,
/// and the target is not written.
#[test]
fn an_audit_path_that_is_a_symbolic_link_is_refused() {
    let sb = Sandbox::new().unwrap();
    let target = sb.write("elsewhere.jsonl", "").unwrap();
    let link = sb.path().join("audit.jsonl");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    config(
        &sb,
        &json!({"intercept_builtins": true, "root_dir": sb.path(), "audit_path": link}),
    );
    let r = sb.run(&["mcp-serve", "--config", "mcp.json"]).unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("USER.MCP_PROXY.INVALID_CONFIG"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains(&format!(
            "`audit_path` {} is a symbolic link; the audit file is never written through one",
            link.display()
        )),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains(
            "Hint: give the path of a regular file (or of one to create), not of a symbolic link"
        ),
        "{}",
        r.stderr
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "");
}

/// The same through an MCP client nobody on the team wrote (the pinned Python SDK, as
/// mcp_serve.rs drives it): Grep counts the match past the first MiB of a line, Bash refuses
/// `timeout_seconds: 0`.
const PY_TRIAL: &str = r#"
import json, os, sys
import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:], env=dict(os.environ))
    out = []
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            for name, args in [
                ("Grep", {"pattern": "NEEDLE", "path": "g", "output_mode": "count"}),
                ("Bash", {"command": "echo x", "timeout_seconds": 0}),
            ]:
                res = await s.call_tool(name, args)
                out.append([res.is_error, res.content[0].text])
    print(json.dumps(out))

anyio.run(main)
"#;

#[test]
fn the_python_sdk_sees_the_long_line_match_and_the_strict_timeout() {
    let sb = Sandbox::new().unwrap();
    let ws = sb.path().join("ws");
    std::fs::create_dir_all(ws.join("g")).unwrap();
    std::fs::write(
        ws.join("g/only.txt"),
        [&vec![b'q'; 1 << 20][..], b" NEEDLE\n"].concat(),
    )
    .unwrap();
    let cfg = config(
        &sb,
        &json!({"intercept_builtins": true, "root_dir": ws, "audit_path": sb.path().join("audit.jsonl")}),
    );
    let py = awf_tests::mcp::py_sdk();
    let file = sb.write("trial.py", PY_TRIAL).unwrap();
    let awf = awf_tests::awf_bin();
    let out = std::process::Command::new("python3")
        .arg(file)
        .args([
            awf.to_str().unwrap(),
            "mcp-serve",
            "--config",
            cfg.to_str().unwrap(),
        ])
        .current_dir(sb.path())
        .env("PYTHONPATH", &py)
        .env(awf_tests::SANDBOX_MARK, sb.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let run = awf_tests::Run::from(out);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let only = ws.canonicalize().unwrap().join("g/only.txt");
    assert_eq!(
        serde_json::from_str::<Value>(run.stdout.trim()).unwrap(),
        json!([
            [false, format!("{}:1\n", only.display())],
            [
                true,
                "Bash: argument `timeout_seconds` must be an integer of at least 1 (the timeout in seconds), got 0"
            ]
        ])
    );
}
