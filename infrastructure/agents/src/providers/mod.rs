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
}
