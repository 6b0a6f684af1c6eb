//! The layering rule of design/architecture.md, checked on `cargo metadata`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::process::Command;

fn workspace_deps() -> BTreeMap<String, BTreeSet<String>> {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(awf_tests::workspace_root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    let mut deps = BTreeMap::new();
    for p in meta["packages"].as_array().expect("packages") {
        let name = p["name"].as_str().expect("name").to_owned();
        let set: BTreeSet<String> = p["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .filter(|d| d["kind"].is_null())
            .map(|d| d["name"].as_str().expect("dep name").to_owned())
            .collect();
        deps.insert(name, set);
    }
    deps
}

/// Which internal crates each layer may depend on (normal dependencies only).
fn allowed(pkg: &str) -> Option<&'static [&'static str]> {
    match pkg {
        "awf-domain" => Some(&[]),
        "awf-application" => Some(&["awf-domain"]),
        "awf" | "awf-tests" => None,
        p if p.starts_with("awf-") => Some(&["awf-domain"]),
        _ => None,
    }
}

/// Third-party crates that must stay inside one adapter.
const CONFINED: &[(&str, &str)] = &[
    ("clap", "awf"),
    ("yaml-rust2", "awf-yaml"),
    ("gtmpl-ng", "awf-template"),
    ("expr-lang", "awf-template"),
    ("rusqlite", "awf-store"),
    ("rmcp", "awf-mcp"),
    ("agent-client-protocol", "awf-acp"),
    ("axum", "awf-http"),
    ("utoipa", "awf-http"),
    ("opentelemetry", "awf-telemetry"),
    ("opentelemetry-otlp", "awf-telemetry"),
    ("tracing-opentelemetry", "awf-telemetry"),
];

#[test]
fn no_crate_depends_on_a_layer_it_must_not() {
    let deps = workspace_deps();
    assert!(
        deps.contains_key("awf-domain") && deps.contains_key("awf-application"),
        "{deps:?}"
    );
    let mut violations = Vec::new();
    for (pkg, ds) in &deps {
        let Some(ok) = allowed(pkg) else { continue };
        for d in ds.iter().filter(|d| d.starts_with("awf")) {
            if !ok.contains(&d.as_str()) {
                violations.push(format!("{pkg} -> {d}"));
            }
        }
    }
    assert_eq!(
        violations,
        Vec::<String>::new(),
        "forbidden dependency edges"
    );
}

#[test]
fn third_party_sdks_stay_in_their_adapter() {
    let deps = workspace_deps();
    let mut violations = Vec::new();
    for (pkg, ds) in &deps {
        for (krate, home) in CONFINED {
            if ds.contains(*krate) && pkg != home {
                violations.push(format!("{pkg} uses {krate} (only {home} may)"));
            }
        }
    }
    assert_eq!(violations, Vec::<String>::new());
}

#[test]
fn the_rule_itself_rejects_a_bad_edge() {
    // Guard against a check that cannot fail: an infrastructure crate using application.
    let ok = allowed("awf-exec").expect("adapters are restricted");
    assert!(!ok.contains(&"awf-application"));
    assert!(
        allowed("awf-domain")
            .expect("domain is restricted")
            .is_empty()
    );
}

/// Names a front-end must not use: the launch path under the run service, the handle it
/// returns, the old session port, and the engine's internals. Front-ends drive runs only
/// through the `RunService` port (start, subscribe, respond, cancel, wait).
const RUN_INTERNALS: &[&str] = &[
    "Facade",
    "WorkflowFacade",
    "RunHandle",
    "RunSession",
    "Canceller",
    "RunManager",
    "start_run",
    "resume_run",
    "next_event",
    "awf_application::engine",
];

/// The one file that may construct the run service (`RunManager`): the composition root.
const SERVICE_CONSTRUCTION: (&str, &str) = ("interfaces/cli/src/wiring.rs", "RunManager");

/// Where `name` occurs in `text` as a whole identifier (or path), outside `//` comments:
/// one `file:line: name` entry per hit.
fn internal_uses(file: &str, text: &str) -> Vec<String> {
    let mut hits = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        for name in RUN_INTERNALS {
            if (file, *name) == SERVICE_CONSTRUCTION {
                continue;
            }
            let mut rest = code;
            let mut offset = 0;
            while let Some(i) = rest.find(name) {
                let at = offset + i;
                let before = code[..at].chars().next_back();
                let after = code[at + name.len()..].chars().next();
                let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
                if !ident(before) && !ident(after) {
                    hits.push(format!("{file}:{}: {name}", n + 1));
                    break;
                }
                offset = at + name.len();
                rest = &code[offset..];
            }
        }
    }
    hits
}

/// Every `.rs` file under `dir` (relative to the workspace root), recursively.
fn rust_files(root: &std::path::Path, dir: &str, out: &mut Vec<(String, String)>) {
    let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
        return;
    };
    for e in entries.flatten() {
        let rel = format!("{dir}/{}", e.file_name().to_string_lossy());
        let path = e.path();
        if path.is_dir() {
            rust_files(root, &rel, out);
        } else if rel.ends_with(".rs") {
            out.push((rel, std::fs::read_to_string(&path).expect("source is text")));
        }
    }
}

#[test]
fn front_ends_drive_runs_only_through_the_run_service() {
    let root = awf_tests::workspace_root();
    let mut files = Vec::new();
    // Every interface crate, and the front-end adapters to come.
    let interfaces = std::fs::read_dir(root.join("interfaces")).expect("interfaces/ exists");
    for e in interfaces.flatten() {
        rust_files(
            &root,
            &format!("interfaces/{}", e.file_name().to_string_lossy()),
            &mut files,
        );
    }
    for adapter in ["acp", "mcp", "http"] {
        rust_files(&root, &format!("infrastructure/{adapter}"), &mut files);
    }
    assert!(
        files.iter().any(|(f, _)| f == SERVICE_CONSTRUCTION.0),
        "the scan sees the CLI's sources: {:?}",
        files.iter().map(|(f, _)| f).collect::<Vec<_>>()
    );
    let hits: Vec<String> = files
        .iter()
        .flat_map(|(f, text)| internal_uses(f, text))
        .collect();
    assert_eq!(
        hits,
        Vec::<String>::new(),
        "front-ends must use the RunService port, not the application's run internals"
    );
}

#[test]
fn the_front_end_scan_flags_internals_and_spares_the_port() {
    let bad = "use awf_application::Facade;\nlet h = f.start_run(req).await?;\nlet c: Canceller;";
    assert_eq!(
        internal_uses("interfaces/x/src/main.rs", bad),
        vec![
            "interfaces/x/src/main.rs:1: Facade",
            "interfaces/x/src/main.rs:2: start_run",
            "interfaces/x/src/main.rs:3: Canceller"
        ]
    );
    let ok = "use awf_domain::ports::RunService; // not Facade\nlet s = service.start(r); let f = FacadeLike;";
    assert_eq!(
        internal_uses("interfaces/x/src/main.rs", ok),
        Vec::<String>::new()
    );
    assert_eq!(
        internal_uses(
            "interfaces/x/src/wiring.rs",
            "awf_application::RunManager::new(s, c)"
        ),
        vec!["interfaces/x/src/wiring.rs:1: RunManager"],
        "only the CLI's composition root may build the service"
    );
}
