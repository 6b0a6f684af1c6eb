//! `awf acp-serve`: an ACP v1 agent for editors (Zed, Neovim, JetBrains) over stdio. Each
//! prompt runs a workflow through the domain [`RunService`](awf_domain::ports::RunService)
//! port; its events are projected as `session/update` frames and its interactions (approval
//! gates, missing inputs, conversation turns) are answered through the editor.
//!
//! The frames follow the ACP v1 JSON schema of `agent-client-protocol-schema` 1.17.0 (the
//! pin of the `agent-client-protocol` 5.2.0 SDK, the only crate here that knows ACP): this
//! crate runs its own capped line transport (10 MiB lines, `-32700` without echo, the
//! connection lives on) because the SDK's `Stdio` has no cap and echoes bad lines
//! (shared/spec/acp.md §7), and checks every frame shape it writes against the schema types
//! in its tests.
//!
//! fs delegation: a session whose client offers `fs.readTextFile` and `fs.writeTextFile` gets a
//! private file channel ([`fs_bridge`]) whose path its run requests carry
//! (`RunRequest::fs_delegate`); the agent steps' MCP proxies send Read, Write and Edit there and
//! this crate relays them as `fs/read_text_file` / `fs/write_text_file` (acp.md §1.2).
//!
//! The client side, [`client`], is the `acp` agent provider: awf drives an ACP agent (a preset:
//! claude-agent-acp, `gemini --acp`, codex-acp; or a command) for agent steps, over the same
//! capped line transport (acp.md §4).
//!
//! Reference: shared/spec/acp.md §1, §2, §3, §4, §8; shared/design/decisions.md ("ACP").

pub mod client;
pub mod frames;
pub mod fs_bridge;
pub mod prompt;
pub mod server;
mod sessions;
pub mod transport;

pub use client::AcpProvider;
pub use server::AcpConfig;
pub use server::serve;

/// Serves ACP on the process's stdin/stdout until stdin ends or `shutdown` fires.
///
/// # Errors
/// As [`serve`].
pub async fn serve_stdio(
    cfg: AcpConfig,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<(), awf_domain::AwfError> {
    let stdin = tokio::io::BufReader::with_capacity(64 * 1024, tokio::io::stdin());
    serve(cfg, stdin, tokio::io::stdout(), shutdown).await
}
