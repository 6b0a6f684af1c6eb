use awf_domain::error::AwfError;
use awf_domain::ports::agent::AgentRequest;

use crate::cli::CliAgent;
use crate::cli::prompt_with_system;
use crate::cli::resume_id;
use crate::options::Opts;
use crate::parse::Parsed;
use crate::parse::gemini::State;
use crate::parse::json_object;

/// Gemini CLI (`gemini`).
///
/// argv: `[--approval-mode=yolo] --output-format stream-json [--model M] [--resume <id>]
/// -p <prompt>`; the system prompt is prepended to the prompt unless resuming. Options:
/// `model` (`gemini-…`), `dangerously_skip_permissions` (→ `--approval-mode=yolo`),
/// `approval_mode` (→ `--approval-mode=M`: `default`, `auto_edit`, `yolo`, `plan`; not
/// together with `dangerously_skip_permissions`), `sandbox` (→ `--sandbox`),
/// `include_directories` (→ `--include-directories a,b`), `extensions` (→ `--extensions a,b`),
/// `policy` (→ one `--policy P` each).
/// Response: the whole stdout as a JSON object, only with display format json.
///
/// Source: spec/workflow.md §5.2 "gemini"; agents-offline.md §3.7.
#[derive(Debug, Default, Clone, Copy)]
pub struct Gemini;

impl CliAgent for Gemini {
    type Parser = State;

    fn name(&self) -> &'static str {
        "gemini"
    }

    fn binary(&self) -> &'static str {
        "gemini"
    }

    fn install_hint(&self) -> &'static str {
        "Install the Gemini CLI: npm install -g @google/gemini-cli"
    }

    fn options(&self) -> &'static [&'static str] {
        &[
            "model",
            "dangerously_skip_permissions",
            "approval_mode",
            "sandbox",
            "include_directories",
            "extensions",
            "policy",
        ]
    }

    fn argv(&self, request: &AgentRequest) -> Result<Vec<String>, AwfError> {
        let o = Opts::new("gemini", &request.options);
        let model = o.model(
            |m: &str| m.starts_with("gemini-"),
            "a name starting with gemini-",
        )?;
        let mut args = Vec::new();
        let approval = o.one_of("approval_mode", &["default", "auto_edit", "yolo", "plan"])?;
        let skip = o.flag("dangerously_skip_permissions")?;
        match (approval, skip) {
            (Some(m), true) if m != "yolo" => {
                return Err(o.invalid(
                    "approval_mode",
                    format!("{m:?} conflicts with dangerously_skip_permissions (yolo)"),
                ));
            }
            (Some(m), _) => args.push(format!("--approval-mode={m}")),
            (None, true) => args.push("--approval-mode=yolo".to_owned()),
            (None, false) => {}
        }
        args.extend(["--output-format", "stream-json"].map(String::from));
        if let Some(m) = model {
            args.extend(["--model".to_owned(), m]);
        }
        if o.flag("sandbox")? {
            args.push("--sandbox".to_owned());
        }
        for (key, flag) in [
            ("include_directories", "--include-directories"),
            ("extensions", "--extensions"),
        ] {
            let list = o.string_list(key)?;
            if !list.is_empty() {
                args.extend([flag.to_owned(), list.join(",")]);
            }
        }
        for p in o.string_list("policy")? {
            args.extend(["--policy".to_owned(), p]);
        }
        if let Some(id) = resume_id(request) {
            args.extend(["--resume".to_owned(), id.to_owned()]);
        }
        args.extend(["-p".to_owned(), prompt_with_system(request)]);
        Ok(args)
    }

    fn parser(&self, _request: &AgentRequest) -> State {
        State::default()
    }

    fn adjust(&self, mut parsed: Parsed, request: &AgentRequest, stdout: &str) -> Parsed {
        parsed.response = if super::display_json(request) {
            json_object(stdout)
        } else {
            None
        };
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
    fn argv_single_fresh_and_resume() {
        let r = req(
            "say hi",
            json!({"model": "gemini-2.5-flash", "dangerously_skip_permissions": true}),
        );
        assert_eq!(
            Gemini.argv(&r).unwrap(),
            [
                "--approval-mode=yolo",
                "--output-format",
                "stream-json",
                "--model",
                "gemini-2.5-flash",
                "-p",
                "say hi"
            ]
        );
        let r = with_system(req("say hi", json!({})), "SYS");
        assert_eq!(
            Gemini.argv(&r).unwrap(),
            ["--output-format", "stream-json", "-p", "SYS\n\nsay hi"]
        );
        assert_eq!(
            Gemini.argv(&resuming(r, "babf")).unwrap(),
            [
                "--output-format",
                "stream-json",
                "--resume",
                "babf",
                "-p",
                "say hi"
            ]
        );
    }

    #[test]
    fn model_is_validated() {
        let e = Gemini
            .argv(&req("x", json!({"model": "flash"})))
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserAgentInvalidOption);
        assert_eq!(
            e.message(),
            "gemini option `model` is invalid: expected a name starting with gemini-, got \"flash\""
        );
    }

    #[test]
    fn every_documented_option_reaches_the_cli() {
        every_option_reaches_argv(
            &Gemini,
            &[
                ("model", json!("gemini-2.5-pro")),
                ("dangerously_skip_permissions", json!(true)),
                ("approval_mode", json!("auto_edit")),
                ("sandbox", json!(true)),
                ("include_directories", json!(["../lib", "../docs"])),
                ("extensions", json!("a,b")),
                ("policy", json!(["p.toml"])),
            ],
        );
        let e = Gemini
            .argv(&req(
                "x",
                json!({"approval_mode": "plan", "dangerously_skip_permissions": true}),
            ))
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserAgentInvalidOption);
    }
}
