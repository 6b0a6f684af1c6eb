//! Helpers: a workspace in a temp dir, calling a tool, finding processes by a marker.

use std::path::Path;
use std::path::PathBuf;

use awf_domain::ports::tools::ToolCall;
use awf_domain::ports::tools::ToolOutput;
use awf_domain::ports::tools::ToolProvider;
use awf_tools::BuiltinTools;
use awf_tools::Limits;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// A temp dir holding the workspace root `ws` (and room for siblings beside it).
pub struct Ws {
    pub tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub tools: BuiltinTools,
}

impl Ws {
    pub fn new() -> Self {
        Self::with_limits(Limits::default())
    }

    pub fn with_limits(limits: Limits) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap().join("ws");
        std::fs::create_dir(&root).unwrap();
        let tools = BuiltinTools::with_limits(&root, limits).unwrap();
        Self { tmp, root, tools }
    }

    /// The temp dir around the root (outside it).
    pub fn outside(&self) -> PathBuf {
        self.tmp.path().canonicalize().unwrap()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    pub fn write(&self, rel: &str, data: impl AsRef<[u8]>) -> PathBuf {
        let p = self.path(rel);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(&p, data).unwrap();
        p
    }

    pub async fn call(&self, name: &str, args: Value) -> ToolOutput {
        call_with(&self.tools, name, args, CancellationToken::new()).await
    }
}

pub async fn call_with(
    tools: &BuiltinTools,
    name: &str,
    args: Value,
    cancel: CancellationToken,
) -> ToolOutput {
    let Value::Object(arguments) = args else {
        panic!("arguments must be an object")
    };
    tools
        .call(
            ToolCall {
                name: name.to_owned(),
                arguments,
                call_id: None,
            },
            cancel,
        )
        .await
        .unwrap()
}

/// Asserts a failed call whose text contains `needle`.
#[track_caller]
pub fn assert_err(out: &ToolOutput, needle: &str) {
    assert!(out.is_error, "expected an error, got: {}", out.text);
    assert!(
        out.text.contains(needle),
        "error text {:?} should contain {needle:?}",
        out.text
    );
}

/// Asserts a successful call and returns its text.
#[track_caller]
pub fn ok(out: &ToolOutput) -> &str {
    assert!(!out.is_error, "expected success, got error: {}", out.text);
    &out.text
}

/// Pids of the live (not zombie) processes whose environment holds `entry` (`NAME=value`).
pub fn with_env(entry: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let hit = std::fs::read(e.path().join("environ"))
            .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == entry.as_bytes()));
        let zombie = std::fs::read_to_string(e.path().join("stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next())
                .is_some_and(|st| st == "Z" || st == "X")
        });
        if hit && !zombie {
            out.push(pid);
        }
    }
    out
}

/// A marker unique to this test process and `name`.
pub fn marker(name: &str) -> String {
    format!("AWF_TOOLS_TEST_MARK={}-{name}", std::process::id())
}

/// Peak resident memory of this process (VmHWM), in KiB.
pub fn peak_rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

pub fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}
