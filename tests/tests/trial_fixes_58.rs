//! A breaker's findings, over the real binary: acp-serve's session files holding secret
//! inputs in plain text, JSON values nested too deeply for a run's state file to be read
//! back, terminal escape sequences reaching the terminal (`--dry-run`, `awf list -f quiet`,
//! `awf diagram`, the telemetry warning, a `--from` hint), `awf init --force` writing through
//! a symlink, `awf serve` taking a guessable token on a public address, many undeclared
//! inputs, and messages and limits (`--mock` twice, a key longer than YAML allows, a NUL byte
//! in a command, an invalid regex, a timeout past Go's longest duration).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::path::PathBuf;

use awf_tests::Sandbox;
use awf_tests::acp::Acp;
use awf_tests::acp::said;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

// ---- 1. acp-serve session files -----------------------------------------------------------

const OK: &str = "name: ok\ninputs:\n  - name: api_token\n    type: string\n    default: none\n  - name: n\n    type: integer\n    default: 1\nstates:\n  initial: s\n  s:\n    type: step\n    command: echo ok {{.inputs.api_token}} {{.inputs.n}}\n    on_success: done\n  done:\n    type: terminal\n";
const ASK: &str = "name: ask\ninputs:\n  - name: tag\n    type: string\n  - name: cnt\n    type: integer\n  - name: api_token\n    type: string\n    required: true\nstates:\n  initial: s\n  s:\n    type: step\n    command: echo {{.inputs.tag}} {{.inputs.cnt}} {{.inputs.api_token}}\n    on_success: done\n  done:\n    type: terminal\n";

fn acp_sandbox() -> Sandbox {
    let mut sb = Sandbox::new().unwrap();
    sb.write("wf/ok.yaml", OK).unwrap();
    sb.write("wf/ask.yaml", ASK).unwrap();
    let wf = sb.path().join("wf").display().to_string();
    sb.set_env("AWF_WORKFLOWS_PATH", &wf);
    sb
}

/// The session files acp-serve wrote (`<data>/awf/acp/sessions/*.json`), as text.
fn session_files(sb: &Sandbox) -> Vec<String> {
    let dir = sb.path().join("data/awf/acp/sessions");
    let mut out: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    out.sort();
    out
}

/// Breaker: `/ok api_token=AcpSecretVal99 n=2` was masked in every frame but written to the
/// session file in plain text (title and prompt), and after a restart `session/list` and
/// `session/load` gave it back raw. Now the file holds it masked, and so does everything
/// read from it after a restart.
#[test]
fn acp_session_files_hold_secret_inputs_masked_across_a_restart() {
    let sb = acp_sandbox();
    let mut acp = Acp::start(&sb);
    let sid = acp.new_session(&sb);
    let (live, r) = acp.prompt(&sid, "/ok api_token=AcpSecretVal99 n=2");
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert!(
        !serde_json::to_string(&live)
            .unwrap()
            .contains("AcpSecretVal99"),
        "{live:?}"
    );
    acp.raw.close();

    let files = session_files(&sb);
    assert_eq!(files.len(), 1);
    assert!(!files[0].contains("AcpSecretVal99"), "{}", files[0]);
    let saved: Value = serde_json::from_str(&files[0]).unwrap();
    assert_eq!(saved["title"], "/ok api_token=*** n=2");
    assert_eq!(saved["runs"][0]["prompt"], "/ok api_token=*** n=2");

    // A new acp-serve reads the file: the list and the replay hold the secret masked.
    let mut acp = Acp::start(&sb);
    let (_, list) = acp.call("session/list", json!({}));
    assert_eq!(
        list["result"]["sessions"][0]["title"], "/ok api_token=*** n=2",
        "{list}"
    );
    let cwd = sb.path().display().to_string();
    let (replay, r) = acp.call(
        "session/load",
        json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}),
    );
    assert!(r["result"].is_object(), "{r}");
    let user: Vec<&Value> = replay
        .iter()
        .filter(|f| f["params"]["update"]["sessionUpdate"] == "user_message_chunk")
        .map(|f| &f["params"]["update"]["content"]["text"])
        .collect();
    assert_eq!(user, [&json!("/ok api_token=*** n=2")]);
    acp.raw.close();
}

/// Breaker: the answer to a question for a secret-named input, sent as the next message
/// (`NextMsgSecret77`), was stored as that session's prompt in plain text.
#[test]
fn acp_an_answer_for_a_secret_input_is_stored_masked() {
    let sb = acp_sandbox();
    let mut acp = Acp::start(&sb);
    let sid = acp.new_session(&sb);
    let (asked, _) = acp.prompt(&sid, "/ask tag=v1 cnt=1");
    assert!(
        said(&asked).contains("needs input `api_token`"),
        "{}",
        said(&asked)
    );
    let (answered, r) = acp.prompt(&sid, "NextMsgSecret77");
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert!(
        !serde_json::to_string(&answered)
            .unwrap()
            .contains("NextMsgSecret77"),
        "{answered:?}"
    );
    acp.raw.close();
    let files = session_files(&sb);
    assert_eq!(files.len(), 1);
    assert!(!files[0].contains("NextMsgSecret77"), "{}", files[0]);
    let saved: Value = serde_json::from_str(&files[0]).unwrap();
    assert_eq!(saved["runs"][1]["prompt"], "***", "{saved}");
}

/// A session file written before awf masked them, holding a secret-named input in plain
/// text: what a new acp-serve shows from it (list, replay) holds the secret masked.
#[test]
fn acp_an_old_session_file_with_a_secret_is_shown_masked() {
    let sb = acp_sandbox();
    let cwd = sb.path().display().to_string();
    let old = json!({
        "schema_version": 1, "id": "sess_0123abcd", "cwd": cwd, "mode": "ask",
        "title": "/ok api_token=OldSecretVal42 n=2", "closed": false,
        "runs": [{"prompt": "/ok api_token=OldSecretVal42 n=2", "seen": 0, "notes": []}]
    });
    sb.write(
        "data/awf/acp/sessions/sess_0123abcd.json",
        &serde_json::to_string(&old).unwrap(),
    )
    .unwrap();
    let mut acp = Acp::start(&sb);
    let (_, list) = acp.call("session/list", json!({}));
    assert_eq!(
        list["result"]["sessions"][0]["title"], "/ok api_token=*** n=2",
        "{list}"
    );
    let (replay, r) = acp.call(
        "session/load",
        json!({"sessionId": "sess_0123abcd", "cwd": cwd, "mcpServers": []}),
    );
    assert!(r["result"].is_object(), "{r}");
    let text = serde_json::to_string(&replay).unwrap();
    assert!(!text.contains("OldSecretVal42"), "{text}");
    assert!(text.contains("/ok api_token=*** n=2"), "{text}");
    acp.raw.close();
    // Saved again by the load: masked on disk too.
    let files = session_files(&sb);
    assert!(!files[0].contains("OldSecretVal42"), "{}", files[0]);
}

// ---- 2. JSON nested too deeply for a state file ---------------------------------------------

fn nested(n: usize) -> String {
    format!("{}{}", "[".repeat(n), "]".repeat(n))
}

/// The state file of run `id` in `sb`.
fn state_file(sb: &Sandbox, id: &str) -> PathBuf {
    sb.path().join(format!("data/awf/states/{id}.json"))
}

/// Breaker: an array input nested 126 levels deep was taken, and the run's state file could
/// not be read back (`awf status`: recursion limit exceeded). Such a value is refused
/// before the run, with a hint; 64 levels are taken.
#[test]
fn an_input_nested_deeper_than_64_levels_is_refused_before_the_run() {
    let sb = Sandbox::new().unwrap();
    let wf = "name: arr\ninputs:\n  - name: arr\n    type: array\nstates:\n  initial: s\n  s:\n    type: step\n    command: echo ran\n    on_success: done\n  done:\n    type: terminal\n";
    let arg = format!("arr={}", nested(126));
    let r = sb.run_workflow("arr.yaml", wf, &["-i", &arg]).unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(
        r.stderr.lines().next(),
        Some(
            "[USER.INPUT.VALIDATION_FAILED] input validation failed: inputs.arr: the value nests arrays or objects 126 levels deep; awf takes at most 64 levels deep"
        ),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains(
            "Hint: flatten the value (e.g. pass the inner part as a JSON string): a run records its inputs in its state file, which must be read back, so awf takes values nested at most 64 levels deep"
        ),
        "{}",
        r.stderr
    );
    assert!(!r.stdout.contains("ran"), "{}", r.stdout);
    let arg = format!("arr={}", nested(64));
    let r = sb
        .run(&["run", "arr.yaml", "-i", &arg, "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let id = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    assert_eq!(sb.run(&["status", &id]).unwrap().code, 0);
}

const AGENT: &str = "name: ag\nstates:\n  initial: a\n  a:\n    type: agent\n    provider: claude\n    prompt: give JSON\n    output_format: json\n    on_success: done\n  done:\n    type: terminal\n";

/// Breaker: an agent's JSON answer nested 125 levels deep (`--mock`, or a real provider's)
/// was parsed and recorded; the run could then not be shown or resumed. Now it is a failure
/// of `output_format: json`, the answer kept as text, and the run reads back.
#[test]
fn an_agent_json_answer_nested_too_deeply_fails_output_format_and_the_run_reads_back() {
    let sb = Sandbox::new().unwrap();
    let mock = format!("states.a.output={}", nested(125));
    let r = sb
        .run_workflow("ag.yaml", AGENT, &["--mock", &mock, "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let doc = r.json().unwrap();
    let a = doc["states"]
        .as_array()
        .map(|s| s.iter().find(|s| s["name"] == "a").cloned().unwrap())
        .unwrap_or_else(|| doc["states"]["a"].clone());
    let error = a["error"].as_str().unwrap();
    assert!(
        error.starts_with(
            "step a: output format processing: the JSON nests arrays or objects 125 levels deep; awf takes at most 64 levels (content: [[["
        ),
        "{error}"
    );
    assert_eq!(a["output"], json!(nested(125)));
    let id = doc["run_id"].as_str().unwrap();
    let status = sb.run(&["status", id]).unwrap();
    assert_eq!(status.code, 0, "{}", status.stderr);
}

/// A state file that holds a value nested past what serde_json reads (written by an awf
/// that did not limit nesting) is not damaged: the hint no longer says to move it aside.
#[test]
fn a_state_file_nested_too_deeply_is_not_called_damaged() {
    let sb = Sandbox::new().unwrap();
    let wf = "name: one\nstates:\n  initial: s\n  s:\n    type: step\n    command: echo hi\n    on_success: done\n  done:\n    type: terminal\n";
    let r = sb.run_workflow("one.yaml", wf, &["-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let id = r.json().unwrap()["run_id"].as_str().unwrap().to_owned();
    let path = state_file(&sb, &id);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"inputs\": {}"), "{text}");
    let deep = text.replacen(
        "\"inputs\": {}",
        &format!("\"inputs\": {{\"old\": {}}}", nested(130)),
        1,
    );
    std::fs::write(&path, deep).unwrap();
    let r = sb.run(&["status", &id]).unwrap();
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(
        r.stderr.contains("recursion limit exceeded"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains(
            "Hint: the file is whole, but a value in it (an input or an agent's JSON answer) nests 132 levels deep, and awf reads back fewer than 128: this run cannot be shown or resumed, keep the file if you need what it records; awf now refuses values nested more than 64 levels when a run starts"
        ),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("move it aside"), "{}", r.stderr);
}

// ---- 3. escape sequences ----------------------------------------------------------------------

/// Breaker: `awf run --dry-run` printed an input default, a hook's `log:`, an approval
/// message, a terminal message and a command with their escape sequences as is.
#[test]
fn dry_run_writes_control_characters_as_escapes() {
    let sb = Sandbox::new().unwrap();
    let wf = "name: hk2\ninputs:\n  - name: x\n    type: string\n    default: \"\\e]0;INPUT\\a\"\nstates:\n  initial: s\n  s:\n    type: step\n    command: 'printf \"%s\\n\" {{shell_quote .inputs.x}} \"\\e[31m\"'\n    hooks:\n      pre:\n        - log: \"\\e]0;HOOK\\a\"\n    approval:\n      message: \"\\e]0;APPROVE\\a\"\n    on_success: done\n  done:\n    type: terminal\n    status: failure\n    message: \"\\e]0;TERM\\a\"\n";
    let r = sb.run_workflow("hk2.yaml", wf, &["--dry-run"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stdout.contains('\u{1b}'), "{:?}", r.stdout);
    assert!(!r.stdout.contains('\u{7}'), "{:?}", r.stdout);
    for shown in [
        "  x: \\u{1b}]0;INPUT\\u{7} (default)",
        "Hook (pre): log: \\u{1b}]0;HOOK\\u{7}",
        "Approval: \"\\u{1b}]0;APPROVE\\u{7}\"",
        "Message: \\u{1b}]0;TERM\\u{7}",
        "Command: printf \"%s\\n\" ",
    ] {
        assert!(r.stdout.contains(shown), "{shown}\n{}", r.stdout);
    }
}

/// Breaker: `awf list -f quiet` printed a file name holding ESC as is; `awf diagram` put a
/// state name's escape sequence in the DOT text.
#[test]
fn list_quiet_and_diagram_write_control_characters_as_escapes() {
    let mut sb = Sandbox::new().unwrap();
    let wf = "name: e\u{1b}[31mx\nstates:\n  initial: \"s\\e[31m\"\n  \"s\\e[31m\":\n    type: step\n    command: echo hi\n    on_success: done\n  done:\n    type: terminal\n";
    sb.write("wf/e\u{1b}[31mx.yaml", wf).unwrap();
    let dir = sb.path().join("wf").display().to_string();
    sb.set_env("AWF_WORKFLOWS_PATH", &dir);
    let r = sb.run(&["list", "-f", "quiet"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "e\\u{1b}[31mx\n");
    let path = sb.path().join("wf/e\u{1b}[31mx.yaml");
    let r = sb.run(&["diagram", path.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stdout.contains('\u{1b}'), "{:?}", r.stdout);
    assert!(r.stdout.contains("\"s\\\\u{1b}[31m\""), "{}", r.stdout);
}

/// Breaker: the telemetry warning quoted an exporter value from the command line (or
/// `.awf/config.yaml`) with its escape sequence as is.
#[test]
fn the_telemetry_warning_writes_control_characters_as_escapes() {
    let sb = Sandbox::new().unwrap();
    let wf = "name: one\nstates:\n  initial: s\n  s:\n    type: step\n    command: echo hi\n    on_success: done\n  done:\n    type: terminal\n";
    let r = sb
        .run_workflow(
            "one.yaml",
            wf,
            &["--otel-exporter", "http://\u{1b}]0;OTEL\u{7}:1"],
        )
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let warn: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains("telemetry"))
        .collect();
    assert_eq!(warn.len(), 1, "{}", r.stderr);
    assert!(warn[0].contains("\\u{1b}]0;OTEL\\u{7}"), "{}", warn[0]);
    assert!(!r.stderr.contains('\u{1b}'), "{:?}", r.stderr);
}

/// Breaker: the resume hint of a run that failed in state `s\e[31mred` said
/// `--from 's\u{1b}[31mred'`, which names another state when pasted. It is now in ANSI-C
/// quotes, which a shell reads back as the state's name.
#[test]
fn a_from_hint_for_a_state_name_with_an_escape_can_be_pasted() {
    let sb = Sandbox::new().unwrap();
    let wf = "name: red\nstates:\n  initial: \"s\\e[31mred\"\n  \"s\\e[31mred\":\n    type: step\n    command: exit 1\n    on_success: done\n    on_failure: failed\n  done:\n    type: terminal\n  failed:\n    type: terminal\n    status: failure\n";
    let r = sb.run_workflow("red.yaml", wf, &[]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    let at = r.stderr.find("--from ").expect(&r.stderr) + "--from ".len();
    let word: String = r.stderr[at..]
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != '`')
        .collect();
    assert_eq!(word, "$'s\\e[31mred'", "{}", r.stderr);
    // bash reads it as the state's name.
    let out = std::process::Command::new("bash")
        .args(["-c", &format!("printf %s {word}")])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "s\u{1b}[31mred");
}

// ---- 4. awf init --force and a symlink --------------------------------------------------------

/// Breaker: `awf init --force` wrote the example workflow through a symlink planted at
/// `.awf/workflows/example.yaml`, into a file outside the project. The link is replaced.
#[test]
fn init_force_replaces_a_symlink_instead_of_writing_through_it() {
    let sb = Sandbox::new().unwrap();
    let outside = sb.write("outside.txt", "mine\n").unwrap();
    let project = sb.path().join("proj");
    std::fs::create_dir_all(project.join(".awf/workflows")).unwrap();
    let link = project.join(".awf/workflows/example.yaml");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let r = sb.run_in(&project, &["init", "--force"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "mine\n");
    let meta = std::fs::symlink_metadata(&link).unwrap();
    assert!(meta.file_type().is_file(), "{meta:?}");
    assert!(
        std::fs::read_to_string(&link)
            .unwrap()
            .contains("name: example")
    );
    assert!(no_temp_files(&project.join(".awf/workflows")));
}

fn no_temp_files(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .all(|e| !e.file_name().to_string_lossy().ends_with(".tmp"))
}

// ---- 5. awf serve and a short token -----------------------------------------------------------

/// Breaker: `awf serve --addr 0.0.0.0:0 --token-env X` took a 1-character token. A token
/// under 16 characters is refused on an address other hosts reach.
#[test]
fn serve_refuses_a_short_token_on_a_public_address() {
    let mut sb = Sandbox::new().unwrap();
    sb.set_env("SHORT_TOKEN", "x");
    // Under `timeout`: a server that starts would otherwise serve until killed.
    let r = guarded(
        &sb,
        60,
        &["serve", "--addr", "0.0.0.0:0", "--token-env", "SHORT_TOKEN"],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(
        r.stderr,
        "[USER.INPUT.VALIDATION_FAILED] --token-env SHORT_TOKEN: the token has 1 character, fewer than 16: too easy to guess on 0.0.0.0:0, an address other hosts reach\n  Hint: set a long random token: `export SHORT_TOKEN=$(openssl rand -hex 32)`\n"
    );
}

/// On a loopback address a short token is taken, with a warning.
#[test]
fn serve_warns_about_a_short_token_on_loopback() {
    let mut sb = Sandbox::new().unwrap();
    sb.set_env("SHORT_TOKEN", "abc123");
    let log = sb.path().join("serve.log");
    let server = awf_tests::http_serve::start_with_stderr(
        &sb,
        &["--token-env", "SHORT_TOKEN"],
        std::fs::File::create(&log).unwrap().into(),
    );
    drop(server);
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        text.lines().next(),
        Some(
            "WARN --token-env SHORT_TOKEN: the token has 6 characters, fewer than 16; it is taken on the loopback address 127.0.0.1:0, but could be guessed (set a long random token: `export SHORT_TOKEN=$(openssl rand -hex 32)`)"
        ),
        "{text}"
    );
}

// ---- 6. many undeclared inputs ----------------------------------------------------------------

/// Breaker: undeclared `-i` inputs took quadratic time before the run started (5,000: more
/// than 20 s). 20,000 now run (the timeout only guards against a hang).
#[test]
fn twenty_thousand_undeclared_inputs_run() {
    let sb = Sandbox::new().unwrap();
    let wf = "name: one\nstates:\n  initial: s\n  s:\n    type: step\n    command: echo hi\n    on_success: done\n  done:\n    type: terminal\n";
    let path = sb.write("one.yaml", wf).unwrap();
    let mut args: Vec<String> = vec!["run".into(), path.display().to_string(), "-q".into()];
    for i in 0..20_000 {
        args.push("-i".into());
        args.push(format!("k{i}=v"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = guarded(&sb, 300, &args);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// `awf <args>` in `sb` under `timeout <secs>` (exit 124 when it runs longer): a guard
/// against a hang, never a timing assertion.
fn guarded(sb: &Sandbox, secs: u32, args: &[&str]) -> awf_tests::Run {
    let plain = sb.cmd(&[]);
    let mut cmd = std::process::Command::new("timeout");
    cmd.arg(secs.to_string())
        .arg(awf_tests::awf_bin())
        .args(args)
        .current_dir(sb.path())
        .env_clear()
        .envs(plain.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(std::process::Stdio::null());
    awf_tests::Run::from(cmd.output().unwrap())
}

// ---- 7. limits and messages --------------------------------------------------------------------

/// Breaker: `--mock` given twice for one field kept the last without a word (`--input` warns).
#[test]
fn a_mock_given_twice_for_one_field_is_warned_about() {
    let sb = Sandbox::new().unwrap();
    let r = sb
        .run_workflow(
            "ag.yaml",
            AGENT,
            &[
                "--mock",
                "states.a.output={\"v\": 1}",
                "--mock",
                "states.a.output={\"v\": 2}",
            ],
        )
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "WARN --mock states.a.output is given more than once; the last value is used"
        ),
        "{}",
        r.stderr
    );
}

/// Breaker: a state name longer than 1024 characters was `simple key expect ':'` with a
/// missing-colon hint.
#[test]
fn a_state_name_longer_than_yaml_allows_is_said_so() {
    let sb = Sandbox::new().unwrap();
    let name = "s".repeat(1100);
    let wf = format!(
        "name: long\nstates:\n  initial: {name}\n  {name}:\n    type: step\n    command: echo hi\n    on_success: done\n  done:\n    type: terminal\n"
    );
    let path = sb.write("long.yaml", &wf).unwrap();
    let r = sb.run(&["validate", path.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "a key of 1100 characters is longer than the 1024 characters YAML allows for a key"
        ),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("shorten the key (a state, input or option name) to at most 1024 characters"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("missing its ':'"), "{}", r.stderr);
}

/// Breaker: a command holding a NUL byte (`readFile` of a binary file) failed with
/// "cannot start shell /bin/bash: nul byte found" and a hint about $SHELL.
#[test]
fn a_nul_byte_in_a_command_is_named_as_such() {
    let sb = Sandbox::new().unwrap();
    sb.write("bin.dat", "a\0b").unwrap();
    let wf = "name: nul\nstates:\n  initial: s\n  s:\n    type: step\n    command: 'printf %s {{shell_quote (readFile \"bin.dat\")}}'\n    on_success: done\n  done:\n    type: terminal\n";
    let r = sb.run_workflow("nul.yaml", wf, &[]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("the command contains a NUL byte (at byte "),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("$SHELL"), "{}", r.stderr);
}

/// Breaker: a timeout of `99999999999999h` was taken, and shown as `99999999999999h0m16s`.
#[test]
fn a_timeout_past_gos_longest_duration_is_refused() {
    let sb = Sandbox::new().unwrap();
    let wf = "name: t\nstates:\n  initial: s\n  s:\n    type: step\n    command: echo hi\n    timeout: 99999999999999h\n    on_success: done\n  done:\n    type: terminal\n";
    let path = sb.write("t.yaml", wf).unwrap();
    let r = sb.run(&["validate", path.to_str().unwrap()]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "invalid duration \"99999999999999h\": too large: at most 2562047h (about 292 years)"
        ),
        "{}",
        r.stderr
    );
}

/// Breaker: an invalid regular expression after `matches` came with a hint about the
/// trailing newline of a step's Output, which had nothing to do with it.
#[test]
fn an_invalid_regex_after_matches_gets_a_hint_about_the_pattern() {
    let sb = Sandbox::new().unwrap();
    let wf = "name: rx\nstates:\n  initial: s\n  s:\n    type: step\n    command: echo hi\n    transitions:\n      - when: 'states.s.Output matches \"[(\"'\n        goto: done\n    on_success: done\n  done:\n    type: terminal\n";
    let r = sb.run_workflow("rx.yaml", wf, &[]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "Hint: the pattern after `matches` is not a valid regular expression ([(): escape a literal `(`, `[`, `{`, `.`, `*`, `+` or `?` with `\\`"
        ),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("last newline"), "{}", r.stderr);
}
