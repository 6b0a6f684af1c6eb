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
/// argv: `-p <prompt> [--model M] --output-format stream-json --verbose` followed by one flag
/// per option given: `allowed_tools` → `--allowedTools`, `disallowed_tools` →
/// `--disallowedTools`, `tools` → `--tools` (lists, or comma-separated strings, joined by
/// commas), `max_turns` → `--max-turns N`, `permission_mode` → `--permission-mode`
/// (`acceptEdits`, `auto`, `bypassPermissions`, `default`, `dontAsk`, `plan`), `effort` →
/// `--effort` (`low` … `max`), `fallback_model` → `--fallback-model`, `max_budget_usd` →
/// `--max-budget-usd`, `append_system_prompt` → `--append-system-prompt`, `add_dirs` → one
/// `--add-dir D` each, `settings` → `--settings`, `dangerously_skip_permissions` →
/// `--dangerously-skip-permissions`; then `-r <session id>` when resuming, else
/// `--system-prompt S` (a resumed session already has it). Keys may also be written as the CLI
/// spells them (`allowedTools`, `max-turns`). `model` is `sonnet`, `opus`, `haiku` or
/// `claude-…`. Response = the last `result` event when `options.output_format` is
/// `json`/`stream-json`.
///
/// Source: spec/workflow.md §5.2 "claude"; `claude --help` of the pinned 2.1 CLI.
#[derive(Debug, Default, Clone, Copy)]
pub struct Claude;

/// The options of [`Claude`], in argv order.
const OPTIONS: &[&str] = &[
    "model",
    "allowed_tools",
    "disallowed_tools",
    "tools",
    "max_turns",
    "permission_mode",
    "effort",
    "fallback_model",
    "max_budget_usd",
    "append_system_prompt",
    "add_dirs",
    "settings",
    "dangerously_skip_permissions",
];

const PERMISSION_MODES: &[&str] = &[
    "acceptEdits",
    "auto",
    "bypassPermissions",
    "default",
    "dontAsk",
    "plan",
];

const EFFORTS: &[&str] = &["low", "medium", "high", "xhigh", "max"];

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

    fn options(&self) -> &'static [&'static str] {
        OPTIONS
    }

    fn argv(&self, request: &AgentRequest) -> Result<Vec<String>, AwfError> {
        let o = Opts::new("claude", &request.options);
        let model = o.model(
            |m: &str| matches!(m, "sonnet" | "opus" | "haiku") || m.starts_with("claude-"),
            "sonnet, opus, haiku or a name starting with claude-",
        )?;
        let mut args = vec!["-p".to_owned(), request.prompt.clone()];
        if let Some(m) = model {
            args.extend(["--model".to_owned(), m]);
        }
        args.extend(["--output-format", "stream-json", "--verbose"].map(String::from));
        for (key, flag) in [
            ("allowed_tools", "--allowedTools"),
            ("disallowed_tools", "--disallowedTools"),
            ("tools", "--tools"),
        ] {
            if o.has(key) {
                args.extend([flag.to_owned(), o.string_list(key)?.join(",")]);
            }
        }
        if let Some(n) = o.uint("max_turns")? {
            args.extend(["--max-turns".to_owned(), n.to_string()]);
        }
        if let Some(m) = o.one_of("permission_mode", PERMISSION_MODES)? {
            args.extend(["--permission-mode".to_owned(), m]);
        }
        if let Some(e) = o.one_of("effort", EFFORTS)? {
            args.extend(["--effort".to_owned(), e]);
        }
        if let Some(m) = o.string("fallback_model")? {
            args.extend(["--fallback-model".to_owned(), m]);
        }
        if let Some(usd) = o.number_in("max_budget_usd", 0.0, f64::MAX)? {
            args.extend(["--max-budget-usd".to_owned(), usd.to_string()]);
        }
        if let Some(s) = o.string("append_system_prompt")? {
            args.extend(["--append-system-prompt".to_owned(), s]);
        }
        for d in o.string_list("add_dirs")? {
            args.extend(["--add-dir".to_owned(), d]);
        }
        if let Some(s) = o.string("settings")? {
            args.extend(["--settings".to_owned(), s]);
        }
        if o.flag("dangerously_skip_permissions")? {
            args.push("--dangerously-skip-permissions".to_owned());
        }
        if let Some(id) = resume_id(request) {
            args.extend(["-r".to_owned(), id.to_owned()]);
        } else if let Some(sys) = system_prompt(request) {
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
    fn system_prompt_is_passed_unless_resuming() {
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
            Claude
                .argv(&fresh_session(r.clone()))
                .unwrap()
                .last()
                .unwrap(),
            "be brief"
        );
        // Issue 8: a resumed turn does not send the system prompt again.
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
                "abc"
            ]
        );
    }

    #[test]
    fn every_documented_option_reaches_the_cli() {
        every_option_reaches_argv(
            &Claude,
            &[
                ("model", json!("opus")),
                ("allowed_tools", json!(["Read", "Grep"])),
                ("disallowed_tools", json!("Bash")),
                ("tools", json!(["Read"])),
                ("max_turns", json!(3)),
                ("permission_mode", json!("plan")),
                ("effort", json!("high")),
                ("fallback_model", json!("haiku")),
                ("max_budget_usd", json!("0.5")),
                ("append_system_prompt", json!("be terse")),
                ("add_dirs", json!(["/tmp/a", "/tmp/b"])),
                ("settings", json!("{}")),
                ("dangerously_skip_permissions", json!(true)),
            ],
        );
        let r = req(
            "x",
            json!({"disallowedTools": ["Bash", "Write"], "maxTurns": "2", "permission_mode": "acceptEdits", "add_dirs": "/a, /b"}),
        );
        assert_eq!(
            Claude.argv(&r).unwrap()[5..],
            [
                "--disallowedTools",
                "Bash,Write",
                "--max-turns",
                "2",
                "--permission-mode",
                "acceptEdits",
                "--add-dir",
                "/a",
                "--add-dir",
                "/b"
            ]
        );
        let e = Claude
            .argv(&req("x", json!({"permission_mode": "yolo"})))
            .unwrap_err();
        assert_eq!(
            e.message(),
            "claude option `permission_mode` is invalid: expected one of acceptEdits, auto, bypassPermissions, default, dontAsk, plan, got \"yolo\""
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
