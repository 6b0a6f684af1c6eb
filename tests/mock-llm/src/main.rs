//! `awf-mock-llm` binary: runs the scripted mock LLM server until killed.
//!
//! Usage: `awf-mock-llm [--port N] [--script PATH] [--log PATH]` (`--help` describes the
//! script format too)
//! - `--port N`: port on 127.0.0.1 (default 0 = pick a free one).
//! - `--script PATH`: JSON reply script, re-read on every request (default: answer `ok`).
//! - `--log PATH`: append every request as one JSON line.
//!
//! The first stdout line is `listening on http://127.0.0.1:PORT`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use awf_mock_llm::{MockLlm, Options, ScriptSource};

const USAGE: &str = "usage: awf-mock-llm [--port N] [--script PATH] [--log PATH]";

/// `--help`: what the server answers, the script format, the request log.
const HELP: &str = r#"awf-mock-llm: a scripted LLM server on 127.0.0.1 for offline tests of agent CLIs

usage: awf-mock-llm [--port N] [--script PATH] [--log PATH]

  --port N         port on 127.0.0.1 (default 0: a free one)
  --script PATH    JSON reply script, re-read on every request (default: answer "ok")
  --log PATH       append every request as one JSON line
  -h, --help       this text

The first stdout line is `listening on http://127.0.0.1:PORT`; the server runs until killed.
Point the clients at it: ANTHROPIC_BASE_URL=URL (claude), an OpenAI-style base URL URL/v1
(codex, opencode, openai_compatible), GOOGLE_GEMINI_BASE_URL=URL (gemini).

ENDPOINTS (dialect in brackets, as `when_dialect` names it)
  POST */v1/messages                        [anthropic]  SSE when "stream": true, else JSON
  POST */v1/messages/count_tokens           [anthropic_count_tokens]
  POST */responses                          [responses]  SSE unless "stream": false
  POST */models/<m>:streamGenerateContent   [gemini]     SSE with alt=sse, else a JSON array
  POST */models/<m>:generateContent         [gemini]     JSON
  POST */chat/completions                   [chat]       SSE when "stream": true, else JSON
  HEAD *, GET /                             200; anything else 404

SCRIPT (a JSON object; every key optional)
  {
    "rules": [
      {"when_last_user_contains": "ZEBRA", "when_has_tools": true, "times": 1,
       "reply": {"text": "done after tool", "tool": {"name": "Bash", "args": {"command": "echo hi"}}}},
      {"when_last_user_contains": "LIMIT", "reply": {"status": 429, "retry_after": 2}}
    ],
    "default": {"text": "ok"},
    "side": {"text": "Mock title"}
  }

  The first rule whose conditions all hold answers (never the request order); else `default`.
  Rule conditions:
    when_last_user_contains  substring of the last user prompt (tool results skipped)
    when_any_user_contains   substring of any user message
    when_system_contains     substring of the system prompt
    when_request_contains    substring of the raw request body
    when_has_tools           true/false: the request offers tools
    when_has_tool_result     true/false: it carries a tool result
    when_dialect             anthropic | anthropic_count_tokens | responses | chat | gemini
    when_model_contains      substring of the model name
    when_path_contains       substring of the request path
    when_header              {"name": "substring"}
    when_side                true: match side requests (titles, routers, JSON-schema calls)
    times                    N: only the rule's first N matches
  Side requests match only rules with "when_side": true; else they get `side`, or a built-in
  harmless answer (JSON that fits the title and router schemas, else the text "Mock title").

  Reply keys:
    text            the answer (default "ok")
    text_chunks     ["a", "b"]: stream these deltas instead of one
    tool / tools    {"name", "args", "namespace"?, "id"?, "args_raw"?}: a tool call; the i-th
                    of `tools` answers the request with i tool results after the last prompt,
                    then `text`; a name with `*` takes the first offered tool it matches
    tool_text       (chat) text sent before the tool call in the same answer
    status          HTTP status; >= 400 answers with the dialect's error JSON
    error_message   the message inside that error JSON
    error_body      the error body verbatim (a string as is, else JSON)
    retry_after     Retry-After header (default 1 for a 429)
    delay_ms        sleep before answering
    usage           {"input": 11, "output": 7}: token counts reported
    raw_body        a success body sent verbatim, with content_type (default application/json)
    headers         {"name": "value"}: extra response headers
    refusal         a refusal: chat streams `delta.refusal`; anthropic answers the text with
                    stop_reason "refusal"

REQUEST LOG (--log, one JSON object per line)
  seq, ts_ms, method, path, query, headers (lower-case names), body, dialect, side,
  facts {model, stream, has_tools, last_user, tool_results}, matched ("rule:N", "default",
  "side", "side:builtin", "script_error"), answer, status
"#;

/// The options `args` give; `None` for `--help`.
fn parse(args: &[String]) -> Result<Option<Options>, String> {
    let mut opts = Options::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
            _ => (a.as_str(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match flag {
            "--port" => {
                let v = value()?;
                opts.port = v
                    .parse()
                    .map_err(|_| format!("--port: '{v}' is not a port number\n{USAGE}"))?;
            }
            "--script" => opts.script = ScriptSource::File(PathBuf::from(value()?)),
            "--log" => opts.log = Some(PathBuf::from(value()?)),
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument '{other}'\n{USAGE}")),
        }
    }
    Ok(Some(opts))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match parse(&args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            let mut out = std::io::stdout();
            let _ = out.write_all(HELP.as_bytes());
            let _ = out.flush();
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    let mock = match MockLlm::try_start_with(opts) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("awf-mock-llm: cannot listen: {e}");
            return ExitCode::from(1);
        }
    };
    let mut out = std::io::stdout();
    let _ = writeln!(out, "listening on {}", mock.url());
    let _ = out.flush();
    mock.serve_forever();
    ExitCode::SUCCESS
}
