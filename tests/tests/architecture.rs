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
