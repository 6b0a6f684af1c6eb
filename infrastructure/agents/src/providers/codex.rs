use awf_domain::error::AwfError;
use awf_domain::ports::agent::AgentRequest;

use crate::cli::CliAgent;
use crate::cli::prompt_with_system;
use crate::cli::resume_id;
use crate::options::Opts;
use crate::parse::codex::State;

/// OpenAI Codex CLI (`codex`).
///
/// argv: fresh `exec --json <system\n\nprompt> [--model M]
/// [--dangerously-bypass-approvals-and-sandbox]`; resume `exec --json [--model M]
/// [--dangerously-bypass-approvals-and-sandbox] resume <thread id> <prompt>` (exec-level flags
/// go before `resume`, which rejects them after it). Options: `model` (`gpt-…`, `codex-…` or
/// `o<digit>…`), `dangerously_skip_permissions`, `sandbox` → `-s` (`read-only`,
/// `workspace-write`, `danger-full-access`), `profile` → `-p`, `config` (list of `key=value`)
/// → one `-c` each, `add_dirs` → one `--add-dir` each, `output_schema` → `--output-schema`.
///
/// Source: spec/workflow.md §5.2 "codex"; agents-offline.md §2.7.
#[derive(Debug, Default, Clone, Copy)]
pub struct Codex;

fn valid_model(m: &str) -> bool {
    m.starts_with("gpt-")
        || m.starts_with("codex-")
        || (m.starts_with('o') && m[1..].starts_with(|c: char| c.is_ascii_digit()))
}

impl CliAgent for Codex {
    type Parser = State;

    fn name(&self) -> &'static str {
        "codex"
    }

    fn binary(&self) -> &'static str {
        "codex"
    }

    fn install_hint(&self) -> &'static str {
        "Install the Codex CLI: npm install -g @openai/codex"
    }

    fn options(&self) -> &'static [&'static str] {
        &[
            "model",
            "dangerously_skip_permissions",
            "sandbox",
            "profile",
            "config",
            "add_dirs",
            "output_schema",
        ]
    }

    fn argv(&self, request: &AgentRequest) -> Result<Vec<String>, AwfError> {
        let o = Opts::new("codex", &request.options);
        let model = o.model(valid_model, "a name starting with gpt-, codex- or o<digit>")?;
        let skip = o.flag("dangerously_skip_permissions")?;
        let mut flags = Vec::new();
        if let Some(m) = model {
            flags.extend(["--model".to_owned(), m]);
        }
        if skip {
            flags.push("--dangerously-bypass-approvals-and-sandbox".to_owned());
        }
        if let Some(m) = o.one_of(
            "sandbox",
            &["read-only", "workspace-write", "danger-full-access"],
        )? {
            flags.extend(["-s".to_owned(), m]);
        }
        if let Some(p) = o.string("profile")? {
            flags.extend(["-p".to_owned(), p]);
        }
        for kv in o.string_list("config")? {
            if !kv.contains('=') {
                return Err(o.invalid("config", format!("expected key=value, got {kv:?}")));
            }
            flags.extend(["-c".to_owned(), kv]);
        }
        for d in o.string_list("add_dirs")? {
            flags.extend(["--add-dir".to_owned(), d]);
        }
        if let Some(f) = o.string("output_schema")? {
            flags.extend(["--output-schema".to_owned(), f]);
        }
        // Workflows run in any directory, git repository or not.
        let mut args = vec![
            "exec".to_owned(),
            "--json".to_owned(),
            "--skip-git-repo-check".to_owned(),
        ];
        match resume_id(request) {
            Some(id) => {
                args.extend(flags);
                args.extend(["resume".to_owned(), id.to_owned(), request.prompt.clone()]);
            }
            None => {
                args.push(prompt_with_system(request));
                args.extend(flags);
            }
        }
        Ok(args)
    }

    fn parser(&self, _request: &AgentRequest) -> State {
        State::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::test_support::*;
    use awf_domain::error::ErrorCode;
    use serde_json::json;

    #[test]
    fn argv_single_fresh_and_resume() {
        let r = req(
            "say hi",
            json!({"model": "gpt-5", "dangerously_skip_permissions": true}),
        );
        assert_eq!(
            Codex.argv(&r).unwrap(),
            [
                "exec",
                "--json",
                "--skip-git-repo-check",
                "say hi",
                "--model",
                "gpt-5",
                "--dangerously-bypass-approvals-and-sandbox"
            ]
        );
        let r = with_system(req("say hi", json!({})), "SYS");
        assert_eq!(
            Codex.argv(&r).unwrap(),
            ["exec", "--json", "--skip-git-repo-check", "SYS\n\nsay hi"]
        );
        assert_eq!(
            Codex.argv(&fresh_session(r)).unwrap(),
            ["exec", "--json", "--skip-git-repo-check", "SYS\n\nsay hi"]
        );
        let r = resuming(
            with_system(req("again", json!({"model": "o3"})), "SYS"),
            "01a2",
        );
        assert_eq!(
            Codex.argv(&r).unwrap(),
            [
                "exec",
                "--json",
                "--skip-git-repo-check",
                "--model",
                "o3",
                "resume",
                "01a2",
                "again"
            ]
        );
    }

    #[test]
    fn model_is_validated() {
        for ok in ["gpt-4.1", "codex-mini-latest", "o3", "o4-mini"] {
            assert!(Codex.argv(&req("x", json!({"model": ok}))).is_ok(), "{ok}");
        }
        for bad in ["sonnet", "omega", "o"] {
            let e = Codex.argv(&req("x", json!({"model": bad}))).unwrap_err();
            assert_eq!(e.code(), ErrorCode::UserAgentInvalidOption, "{bad}");
        }
    }

    #[test]
    fn every_documented_option_reaches_the_cli() {
        every_option_reaches_argv(
            &Codex,
            &[
                ("model", json!("gpt-5")),
                ("dangerously_skip_permissions", json!(true)),
                ("sandbox", json!("read-only")),
                ("profile", json!("ci")),
                ("config", json!(["model_reasoning_effort=high"])),
                ("add_dirs", json!(["/tmp/x"])),
                ("output_schema", json!("schema.json")),
            ],
        );
        let e = Codex
            .argv(&req("x", json!({"config": ["nokey"]})))
            .unwrap_err();
        assert_eq!(
            e.message(),
            "codex option `config` is invalid: expected key=value, got \"nokey\""
        );
    }
}
