use awf_domain::error::AwfError;
use awf_domain::ports::agent::AgentRequest;

use crate::cli::CliAgent;
use crate::cli::resume_id;
use crate::cli::system_prompt;
use crate::options::Opts;
use crate::parse::Parsed;
use crate::parse::claude::State;

/// Claude Code (`claude`).
///
/// argv: `-p <prompt> [--model M] --output-format stream-json --verbose [--allowedTools T]
/// [--dangerously-skip-permissions] [-r <session id>] [--system-prompt S]`. The system prompt
/// is passed in every mode (AWF dropped it in single mode). Options: `model` (`sonnet`,
/// `opus`, `haiku` or `claude-…`), `allowed_tools` (string or list, joined by commas),
/// `dangerously_skip_permissions`. Response = the last `result` event when
/// `options.output_format` is `json`/`stream-json`.
///
/// Source: spec/workflow.md §5.2 "claude".
#[derive(Debug, Default, Clone, Copy)]
pub struct Claude;

impl CliAgent for Claude {
    type Parser = State;

    fn name(&self) -> &'static str {
        "claude"
    }

    fn binary(&self) -> &'static str {
        "claude"
    }

    fn install_hint(&self) -> &'static str {
        "Install Claude Code: npm install -g @anthropic-ai/claude-code"
    }

    fn argv(&self, request: &AgentRequest) -> Result<Vec<String>, AwfError> {
        let o = Opts::new("claude", &request.options);
        let model = o.model(
            |m: &str| matches!(m, "sonnet" | "opus" | "haiku") || m.starts_with("claude-"),
            "sonnet, opus, haiku or a name starting with claude-",
        )?;
        let allowed = o.string_list("allowed_tools")?;
        let skip = o.flag("dangerously_skip_permissions")?;

        let mut args = vec!["-p".to_owned(), request.prompt.clone()];
        if let Some(m) = model {
            args.extend(["--model".to_owned(), m]);
        }
        args.extend(["--output-format", "stream-json", "--verbose"].map(String::from));
        if !allowed.is_empty() {
            args.extend(["--allowedTools".to_owned(), allowed.join(",")]);
        }
        if skip {
            args.push("--dangerously-skip-permissions".to_owned());
        }
        if let Some(id) = resume_id(request) {
            args.extend(["-r".to_owned(), id.to_owned()]);
        }
        if let Some(sys) = system_prompt(request) {
            args.extend(["--system-prompt".to_owned(), sys]);
        }
        Ok(args)
    }

    fn parser(&self, _request: &AgentRequest) -> State {
        State::default()
    }

    fn adjust(&self, mut parsed: Parsed, request: &AgentRequest, _stdout: &str) -> Parsed {
        if !super::display_json(request) {
            parsed.response = None;
        }
        parsed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::test_support::*;
    use awf_domain::error::ErrorCode;
    use serde_json::json;

    #[test]
    fn single_argv() {
        let r = req(
            "say hi",
            json!({"model": "sonnet", "allowed_tools": ["Bash", "Read"], "dangerously_skip_permissions": true}),
        );
        assert_eq!(
            Claude.argv(&r).unwrap(),
            [
                "-p",
                "say hi",
                "--model",
                "sonnet",
                "--output-format",
                "stream-json",
                "--verbose",
                "--allowedTools",
                "Bash,Read",
                "--dangerously-skip-permissions"
            ]
        );
        assert_eq!(
            Claude.argv(&req("x", json!({}))).unwrap(),
            ["-p", "x", "--output-format", "stream-json", "--verbose"]
        );
    }

    #[test]
    fn system_prompt_is_passed_in_single_and_session_modes() {
        let r = with_system(
            req("x", json!({"allowed_tools": "Bash(git:*)"})),
            "be brief",
        );
        assert_eq!(
            Claude.argv(&r).unwrap(),
            [
                "-p",
                "x",
                "--output-format",
                "stream-json",
                "--verbose",
                "--allowedTools",
                "Bash(git:*)",
                "--system-prompt",
                "be brief"
            ]
        );
        assert_eq!(
            Claude.argv(&resuming(r, "abc")).unwrap(),
            [
                "-p",
                "x",
                "--output-format",
                "stream-json",
                "--verbose",
                "--allowedTools",
                "Bash(git:*)",
                "-r",
                "abc",
                "--system-prompt",
                "be brief"
            ]
        );
    }

    #[test]
    fn model_is_validated() {
        for ok in ["opus", "haiku", "claude-sonnet-4-5"] {
            assert!(Claude.argv(&req("x", json!({"model": ok}))).is_ok(), "{ok}");
        }
        let e = Claude
            .argv(&req("x", json!({"model": "gpt-4o"})))
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserAgentInvalidOption);
        assert_eq!(
            e.message(),
            "claude option `model` is invalid: expected sonnet, opus, haiku or a name starting with claude-, got \"gpt-4o\""
        );
        let e = Claude
            .argv(&req("x", json!({"dangerously_skip_permissions": "yes"})))
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserAgentInvalidOption);
    }
}
