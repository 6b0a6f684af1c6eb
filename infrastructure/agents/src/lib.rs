//! awf-agents: the agent providers of `type: agent` steps.
//!
//! Implements the domain ports [`AgentProvider`](awf_domain::ports::AgentProvider) and
//! [`AgentRegistry`](awf_domain::ports::AgentRegistry): six CLI agents (`claude`, `codex`,
//! `gemini`, `opencode`, `github_copilot`, `mistral_vibe`) run through the
//! [`CommandExecutor`](awf_domain::ports::CommandExecutor) port handed to [`registry`], and
//! `openai_compatible` over HTTP (reqwest + rustls/ring). CLI stdout is parsed incrementally
//! by the pure parsers of [`parse`] into [`AgentChunk`](awf_domain::ports::agent::AgentChunk)s.
//! Skills, roles and `output_format` post-processing are the engine's, not ours.
//!
//! Depends on `awf-domain` only (plus third-party crates); never on `awf-exec` or
//! `awf-application`.
//!
//! Source: spec/workflow.md §1.5.3, §3.8, §5; design/decisions.md.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod cli;
mod mcp;
mod openai;
mod options;
pub mod parse;
mod providers;
mod registry;

pub use cli::CliAgent;
pub use cli::CliProvider;
pub use cli::Invocation;
pub use cli::STDERR_TAIL_BYTES;
pub use cli::find_program;
pub use mcp::Cleanup;
pub use mcp::TEMP_PREFIXES;
pub use openai::MAX_BODY_BYTES;
pub use openai::OpenAiCompatible;
pub use providers::Claude;
pub use providers::Codex;
pub use providers::Copilot;
pub use providers::Gemini;
pub use providers::MistralVibe;
pub use providers::OpenCode;
pub use registry::Registry;
pub use registry::registry;
pub use registry::registry_with;
