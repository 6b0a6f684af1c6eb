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
    ("tokio-postgres", "awf-postgres"),
    ("deadpool-postgres", "awf-postgres"),
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

/// What application code must not name outside its tests: it reaches files, processes, the
/// environment, the network, the clock and randomness for ids only through domain ports
/// (`Host`, `Clock`, `IdGenerator`, `RunLocks`).
const NO_DIRECT_IO: &[&str] = &[
    "std::fs",
    "std::process",
    "std::env",
    "std::net",
    "tokio::fs",
    "tokio::process",
    "tokio::net",
    "\"/proc",
    "uuid::",
    "SystemTime::now",
    "Instant::now",
    // `Instant::elapsed` and `SystemTime::elapsed` read the clock too.
    ".elapsed()",
];

/// `text` without its comments (line comments, and block comments on one or more lines),
/// string contents kept: a doc comment may name `std::env`, code may not.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let (mut in_str, mut block) = (false, 0usize);
    while let Some(c) = chars.next() {
        if block > 0 {
            if c == '*' && chars.peek() == Some(&'/') {
                chars.next();
                block -= 1;
            } else if c == '\n' {
                out.push('\n');
            }
            continue;
        }
        if in_str {
            out.push(c);
            if c == '\\' {
                if let Some(n) = chars.next() {
                    out.push(n);
                }
            } else if c == '"' {
                in_str = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_str = true;
                out.push(c);
            }
            // A char literal such as '"' must not open a string.
            '\'' if chars.clone().nth(1) == Some('\'') => {
                out.push(c);
                if let Some(n) = chars.next() {
                    out.push(n);
                }
            }
            '/' if chars.peek() == Some(&'/') => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                block += 1;
            }
            _ => out.push(c),
        }
    }
    out
}

/// `text` without its `#[cfg(test)]` items (a module or function with a `{ … }` body is cut
/// to its closing brace; `mod x;` declarations name files that are skipped by name), line
/// breaks kept so that line numbers still match the file.
fn strip_test_items(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        let open = after.find('{');
        let semi = after.find(';');
        match (open, semi) {
            (Some(o), s) if s.is_none_or(|s| o < s) => {
                let mut depth = 0usize;
                let mut end = after.len();
                for (j, c) in after[o..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = o + j + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                out.push_str(&"\n".repeat(after[..end].matches('\n').count()));
                rest = &after[end..];
            }
            (_, Some(s)) => {
                out.push_str(&"\n".repeat(after[..s].matches('\n').count()));
                rest = &after[s + 1..];
            }
            _ => rest = "",
        }
    }
    out.push_str(rest);
    out
}

/// `(line number, pattern)` of each forbidden pattern in the non-test code of one file.
fn direct_io(text: &str) -> Vec<(usize, &'static str)> {
    let code = strip_test_items(&strip_comments(text));
    let mut hits = Vec::new();
    for (n, line) in code.lines().enumerate() {
        for p in NO_DIRECT_IO {
            if line.contains(p) {
                hits.push((n + 1, *p));
            }
        }
    }
    hits
}

fn rust_paths(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).expect("source dir is readable") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            rust_paths(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn application_code_does_no_io_of_its_own() {
    let src = awf_tests::workspace_root().join("application/src");
    let mut files = Vec::new();
    rust_paths(&src, &mut files);
    files.sort();
    assert!(
        files.iter().any(|f| f.ends_with("engine/step.rs")),
        "{files:?}"
    );
    let mut violations = Vec::new();
    // Test modules in files of their own (`#[cfg(test)] mod tests;`) are `tests.rs` or
    // `*_tests.rs`.
    for f in files.iter().filter(|f| {
        let name = f.to_string_lossy();
        !name.ends_with("_tests.rs") && !name.ends_with("/tests.rs")
    }) {
        let text = std::fs::read_to_string(f).expect("source is readable");
        for (line, p) in direct_io(&text) {
            let shown = f.strip_prefix(&src).unwrap_or(f).display().to_string();
            violations.push(format!("application/src/{shown}:{line}: {p}"));
        }
    }
    assert_eq!(
        violations,
        Vec::<String>::new(),
        "application code must go through the domain ports (Host, Clock, IdGenerator, RunLocks)"
    );
}

#[test]
fn the_io_scan_finds_direct_calls_and_skips_tests_and_comments() {
    // Guard against a scan that cannot fail.
    let code = "use std::path::Path;\n\
                /// Reads like `std::fs::read` would.\n\
                fn a() { let _ = std::fs::read(\"x\"); } // std::env\n\
                fn b() -> u32 { std::process::id() }\n\
                fn c() -> bool { Path::new(\"/proc/1\").exists() }\n\
                fn d() { let _ = uuid::Uuid::new_v4(); let q = '\"'; let _ = SystemTime::now(); }\n\
                /* std::net\n   still a comment */\n\
                #[cfg(test)]\n\
                mod tests { fn t() { std::env::temp_dir(); } }\n\
                #[cfg(test)]\n\
                mod more;\n\
                fn e() { tokio::process::Command::new(\"x\"); }\n\
                fn f(t: Instant) -> Duration { t.elapsed() }\n";
    assert_eq!(
        direct_io(code),
        vec![
            (3, "std::fs"),
            (4, "std::process"),
            (5, "\"/proc"),
            (6, "uuid::"),
            (6, "SystemTime::now"),
            (13, "tokio::process"),
            (14, ".elapsed()"),
        ]
    );
}
