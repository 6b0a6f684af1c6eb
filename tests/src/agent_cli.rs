//! Pointing the real agent CLIs (codex, gemini, opencode) at the scripted LLM: the
//! configuration files and environment each one needs to talk to `awf-mock-llm` on loopback
//! (shared/spec/agents-offline.md §2–§4).

#![allow(clippy::expect_used)]

use std::path::Path;
use std::path::PathBuf;

/// An agent CLI that reads an OpenAI- or Gemini-style base URL from its configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentCli {
    /// OpenAI Codex CLI (`~/.codex/config.toml`, the Responses API).
    Codex,
    /// Gemini CLI (`~/.gemini/settings.json`, `GOOGLE_GEMINI_BASE_URL`).
    Gemini,
    /// OpenCode (`OPENCODE_CONFIG`, an OpenAI-compatible provider).
    Opencode,
}

/// Writes `cli`'s configuration for the mock at `url` (under `home`, or `dir` for opencode's
/// file) and gives the environment variables it needs, and the files written (the user's
/// configuration, which a test may check is left unchanged).
///
/// # Panics
/// When a file cannot be written (test support).
pub fn point_at_mock(
    cli: AgentCli,
    url: &str,
    home: &Path,
    dir: &Path,
) -> (Vec<(String, String)>, Vec<PathBuf>) {
    let mut env: Vec<(String, String)> = Vec::new();
    let write = |f: &Path, text: &str| {
        if let Some(parent) = f.parent() {
            std::fs::create_dir_all(parent).expect("config dir");
        }
        std::fs::write(f, text).expect("config file");
    };
    let file = match cli {
        AgentCli::Codex => {
            let f = home.join(".codex/config.toml");
            write(
                &f,
                &format!(
                    "model_provider = \"mock\"\nmodel = \"mock-model\"\n\n[model_providers.mock]\nname = \"Mock\"\nbase_url = \"{url}/v1\"\nenv_key = \"MOCK_API_KEY\"\nwire_api = \"responses\"\n\n[analytics]\nenabled = false\n"
                ),
            );
            env.push(("MOCK_API_KEY".into(), "sk-test".into()));
            f
        }
        AgentCli::Gemini => {
            let f = home.join(".gemini/settings.json");
            write(
                &f,
                "// the user's settings, with a comment\n{\"security\": {\"auth\": {\"selectedType\": \"gemini-api-key\"}}, \"privacy\": {\"usageStatisticsEnabled\": false}}\n",
            );
            env.extend([
                ("GEMINI_API_KEY".into(), "sk-test".into()),
                ("GOOGLE_GEMINI_BASE_URL".into(), url.to_owned()),
                ("GEMINI_CLI_TRUST_WORKSPACE".into(), "true".into()),
            ]);
            f
        }
        AgentCli::Opencode => {
            let f = dir.join("opencode.json");
            write(
                &f,
                &serde_json::json!({
                    "$schema": "https://opencode.ai/config.json",
                    "model": "mock/mock-model",
                    "small_model": "mock/mock-model",
                    "autoupdate": false,
                    "share": "disabled",
                    "provider": {"mock": {
                        "npm": "@ai-sdk/openai-compatible",
                        "name": "Mock",
                        "options": {"baseURL": format!("{url}/v1"), "apiKey": "sk-test"},
                        "models": {"mock-model": {"name": "Mock Model", "tool_call": true, "limit": {"context": 200000, "output": 8192}}}
                    }}
                })
                .to_string(),
            );
            env.extend([
                ("OPENCODE_CONFIG".into(), f.display().to_string()),
                ("OPENCODE_DISABLE_MODELS_FETCH".into(), "1".into()),
                ("OPENCODE_DISABLE_AUTOUPDATE".into(), "1".into()),
            ]);
            f
        }
    };
    (env, vec![file])
}
