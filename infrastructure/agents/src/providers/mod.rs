//! The six CLI agents: argv (spec §5.2) and option validation per CLI.

mod claude;
mod codex;
mod copilot;
mod gemini;
mod opencode;
mod vibe;

pub use claude::Claude;
pub use codex::Codex;
pub use copilot::Copilot;
pub use gemini::Gemini;
pub use opencode::OpenCode;
pub use vibe::MistralVibe;

/// Whether the display format (`options.output_format`) asks for JSON.
pub(crate) fn display_json(request: &awf_domain::ports::agent::AgentRequest) -> bool {
    matches!(
        request
            .options
            .get("output_format")
            .and_then(|v| v.as_str()),
        Some("json" | "stream-json")
    )
}

#[cfg(test)]
pub(crate) mod test_support {
    use awf_domain::ports::agent::AgentRequest;
    use awf_domain::ports::agent::AgentSession;
    use serde_json::Map;
    use serde_json::Value;

    pub fn req(prompt: &str, options: Value) -> AgentRequest {
        let options: Map<String, Value> = match options {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        AgentRequest {
            prompt: prompt.into(),
            options,
            ..AgentRequest::default()
        }
    }

    pub fn with_system(mut r: AgentRequest, sys: &str) -> AgentRequest {
        r.system_prompt = Some(sys.into());
        r
    }

    pub fn resuming(mut r: AgentRequest, id: &str) -> AgentRequest {
        r.session = Some(AgentSession {
            session_id: Some(id.into()),
            turns: vec![],
        });
        r
    }

    pub fn fresh_session(mut r: AgentRequest) -> AgentRequest {
        r.session = Some(AgentSession::default());
        r
    }

    /// Checks that `samples` gives a value for every option `agent` documents (the common
    /// ones aside) and that each one, alone, changes the argv: no documented option is
    /// dropped on the way to the CLI.
    pub fn every_option_reaches_argv(agent: &dyn DynArgv, samples: &[(&str, Value)]) {
        let documented: Vec<&str> = agent
            .documented()
            .iter()
            .copied()
            .filter(|k| !awf_domain::ports::agent::COMMON_AGENT_OPTIONS.contains(k))
            .collect();
        let mut sampled: Vec<&str> = samples.iter().map(|(k, _)| *k).collect();
        sampled.sort_unstable();
        let mut expected = documented.clone();
        expected.sort_unstable();
        assert_eq!(
            sampled, expected,
            "samples must cover every documented option"
        );
        let base = agent.args(&req("p", Value::Object(Map::new())));
        for (k, v) in samples {
            let mut m = Map::new();
            m.insert((*k).to_owned(), v.clone());
            let args = agent.args(&req("p", Value::Object(m)));
            assert_ne!(args, base, "option `{k}` did not reach the argv");
        }
    }

    /// The parts of [`crate::cli::CliAgent`] the check above needs, object-safe.
    pub trait DynArgv {
        fn documented(&self) -> &'static [&'static str];
        fn args(&self, r: &AgentRequest) -> Vec<String>;
    }

    impl<A: crate::cli::CliAgent> DynArgv for A {
        fn documented(&self) -> &'static [&'static str] {
            self.options()
        }
        fn args(&self, r: &AgentRequest) -> Vec<String> {
            self.argv(r).unwrap()
        }
    }
}
