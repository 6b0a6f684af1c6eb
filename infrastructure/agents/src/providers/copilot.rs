use awf_domain::error::AwfError;
use awf_domain::ports::agent::AgentRequest;

use crate::cli::CliAgent;
use crate::cli::prompt_with_system;
use crate::cli::resume_id;
use crate::options::Opts;
use crate::parse::copilot::State;

/// GitHub Copilot CLI (`copilot`).
///
/// argv: `[--resume=<id>] -p <prompt> --output-format=json --silent [--model=M]
/// [--mode=interactive|plan|autopilot] [--effort=low|medium|high] [--allow-tool=T]…
/// [--deny-tool=T]… [--allow-all]`; the system prompt is prepended unless resuming. Options:
/// `model`, `mode`, `effort`, `allowed_tools`, `denied_tools` (lists, or comma-separated
/// strings), `allow_all` / `dangerously_skip_permissions` (→ `--allow-all`).
///
/// Source: spec/workflow.md §5.2 "github_copilot".
#[derive(Debug, Default, Clone, Copy)]
pub struct Copilot;

impl CliAgent for Copilot {
    type Parser = State;

    fn name(&self) -> &'static str {
        "github_copilot"
    }

    fn binary(&self) -> &'static str {
        "copilot"
    }

    fn install_hint(&self) -> &'static str {
        "Install the GitHub Copilot CLI: npm install -g @github/copilot"
    }

    fn options(&self) -> &'static [&'static str] {
        &[
            "model",
            "mode",
            "effort",
            "allowed_tools",
            "denied_tools",
            "allow_all",
            "dangerously_skip_permissions",
        ]
    }

    fn argv(&self, request: &AgentRequest) -> Result<Vec<String>, AwfError> {
        let o = Opts::new("github_copilot", &request.options);
        let model = o.string("model")?;
        let mode = o.one_of("mode", &["interactive", "plan", "autopilot"])?;
        let effort = o.one_of("effort", &["low", "medium", "high"])?;
        let allowed = o.string_list("allowed_tools")?;
        let denied = o.string_list("denied_tools")?;
        let allow_all = o.flag("allow_all")? || o.flag("dangerously_skip_permissions")?;

        let mut args = Vec::new();
        if let Some(id) = resume_id(request) {
            args.push(format!("--resume={id}"));
        }
        args.extend([
            "-p".to_owned(),
            prompt_with_system(request),
            "--output-format=json".to_owned(),
            "--silent".to_owned(),
        ]);
        if let Some(m) = model {
            args.push(format!("--model={m}"));
        }
        if let Some(m) = mode {
            args.push(format!("--mode={m}"));
        }
        if let Some(e) = effort {
            args.push(format!("--effort={e}"));
        }
        args.extend(allowed.iter().map(|t| format!("--allow-tool={t}")));
        args.extend(denied.iter().map(|t| format!("--deny-tool={t}")));
        if allow_all {
            args.push("--allow-all".to_owned());
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
    fn argv_single_and_resume() {
        let r = req(
            "fix it",
            json!({"model": "gpt-5", "mode": "plan", "effort": "high", "allowed_tools": ["shell(git)", "write"], "denied_tools": "shell(rm)", "dangerously_skip_permissions": true}),
        );
        assert_eq!(
            Copilot.argv(&r).unwrap(),
            [
                "-p",
                "fix it",
                "--output-format=json",
                "--silent",
                "--model=gpt-5",
                "--mode=plan",
                "--effort=high",
                "--allow-tool=shell(git)",
                "--allow-tool=write",
                "--deny-tool=shell(rm)",
                "--allow-all"
            ]
        );
        let r = with_system(req("fix it", json!({})), "SYS");
        assert_eq!(
            Copilot.argv(&r).unwrap(),
            ["-p", "SYS\n\nfix it", "--output-format=json", "--silent"]
        );
        assert_eq!(
            Copilot.argv(&resuming(r, "s1")).unwrap(),
            [
                "--resume=s1",
                "-p",
                "fix it",
                "--output-format=json",
                "--silent"
            ]
        );
    }

    #[test]
    fn enums_are_validated() {
        let e = Copilot
            .argv(&req("x", json!({"mode": "yolo"})))
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserAgentInvalidOption);
        assert_eq!(
            e.message(),
            "github_copilot option `mode` is invalid: expected one of interactive, plan, autopilot, got \"yolo\""
        );
        assert!(Copilot.argv(&req("x", json!({"effort": "max"}))).is_err());
    }

    #[test]
    fn every_documented_option_reaches_the_cli() {
        every_option_reaches_argv(
            &Copilot,
            &[
                ("model", json!("gpt-5")),
                ("mode", json!("plan")),
                ("effort", json!("low")),
                ("allowed_tools", json!(["shell"])),
                ("denied_tools", json!("write")),
                ("allow_all", json!(true)),
                ("dangerously_skip_permissions", json!(true)),
            ],
        );
    }
}
