//! A plain `awf acp-serve` client over raw JSON-RPC lines, for the tests that drive the
//! shipped server without an SDK: requests numbered from 1, answers matched by id, the
//! notifications that came before each answer kept for the test.

use serde_json::Value;
use serde_json::json;

use crate::Sandbox;
use crate::mcp::RawServer;

/// `awf acp-serve` in a sandbox, initialized (ACP protocol version 1).
pub struct Acp {
    /// The server process and its frames.
    pub raw: RawServer,
    next: u64,
}

impl Acp {
    /// Starts `awf acp-serve` in `sb` and sends `initialize`.
    pub fn start(sb: &Sandbox) -> Self {
        Self::start_with(sb, &[])
    }

    /// Starts `awf acp-serve ARGS…` in `sb` and sends `initialize`.
    pub fn start_with(sb: &Sandbox, args: &[&str]) -> Self {
        let mut argv = vec!["acp-serve"];
        argv.extend_from_slice(args);
        let mut a = Self {
            raw: RawServer::spawn(sb.cmd(&argv)),
            next: 0,
        };
        a.call("initialize", json!({"protocolVersion": 1}));
        a
    }

    /// Sends a request; gives (the frames before its answer, the answer).
    pub fn call(&mut self, method: &str, params: Value) -> (Vec<Value>, Value) {
        self.next += 1;
        let id = json!(self.next);
        self.raw
            .send_json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let mut before = Vec::new();
        loop {
            let f = self.raw.recv();
            if f.get("method").is_none() && f.get("id") == Some(&id) {
                return (before, f);
            }
            before.push(f);
        }
    }

    /// `session/new` in the sandbox's directory; gives the session id.
    pub fn new_session(&mut self, sb: &Sandbox) -> String {
        let cwd = sb.path().display().to_string();
        let (_, r) = self.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
        r["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("session/new answered {r}"))
            .to_owned()
    }

    /// `session/prompt` of `text` in session `sid`; gives (the frames before the answer, the
    /// answer).
    pub fn prompt(&mut self, sid: &str, text: &str) -> (Vec<Value>, Value) {
        self.call(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]}),
        )
    }
}

/// The text of the `agent_message_chunk` updates among `frames`, joined.
pub fn said(frames: &[Value]) -> String {
    frames
        .iter()
        .filter(|f| f["method"] == "session/update")
        .map(|f| &f["params"]["update"])
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .map(|u| u["content"]["text"].as_str().unwrap_or("").to_owned())
        .collect()
}
