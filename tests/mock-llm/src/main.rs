//! `awf-mock-llm` binary: runs the scripted mock LLM server until killed.
//!
//! Usage: `awf-mock-llm [--port N] [--script PATH] [--log PATH]`
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

fn parse(args: &[String]) -> Result<Options, String> {
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
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument '{other}'\n{USAGE}")),
        }
    }
    Ok(opts)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match parse(&args) {
        Ok(o) => o,
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
