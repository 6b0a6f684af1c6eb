//! `awf acp-serve [--config FILE] [--workflow NAME]`: an ACP v1 agent on stdio for editors
//! (awf-acp), over the run service of [`crate::wiring::served_run_service`].
//!
//! Config file (optional; JSON, or YAML `key: value` lines; unknown keys refused):
//!
//! | key | type | default | meaning |
//! |---|---|---|---|
//! | `workflows_dir` | directory (relative to the working directory) | the discovery of `awf list` | only the workflows there are offered and run |
//! | `default_workflow` | workflow name | none | runs prompts that are not `/workflow` commands, their text as its `prompt` input |
//!
//! `--workflow NAME` overrides `default_workflow`. Errors (exit 1):
//! `USER.ACP.INVALID_CONFIG` (missing, unreadable, unparsable, unknown key, a `workflows_dir`
//! that is not a directory, a default workflow that is not one of the workflows offered). Stdout carries only ACP frames; logs go to stderr.
//!
//! Reference: shared/spec/acp.md §2.1 (Go's flags and config), §8.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::mask::Masker;
use serde_json::Map;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::cli::AcpServeArgs;
use crate::ctx::Ctx;
use crate::errors::CliError;
use crate::errors::Outcome;

/// The parsed config file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AcpFileConfig {
    /// `workflows_dir`.
    pub workflows_dir: Option<String>,
    /// `default_workflow`.
    pub default_workflow: Option<String>,
}

fn invalid(path: &Path, why: impl std::fmt::Display) -> AwfError {
    AwfError::new(
        ErrorCode::UserAcpInvalidConfig,
        format!("acp-serve config file {}: {why}", path.display()),
    )
    .with_detail("file", path.display().to_string())
    .with_hint(ErrorCode::UserAcpInvalidConfig.resolution())
}

/// Parses the config text: a JSON object, or YAML `key: value` lines (`#` comments, quoted
/// or plain scalars).
///
/// # Errors
/// `USER.ACP.INVALID_CONFIG` naming what is wrong.
pub fn parse_config(path: &Path, text: &str) -> Result<AcpFileConfig, AwfError> {
    let map: Map<String, Value> = if text.trim_start().starts_with('{') {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => m,
            Ok(_) => return Err(invalid(path, "not a JSON object")),
            Err(e) => return Err(invalid(path, format!("invalid config: {e}"))),
        }
    } else {
        let mut m = Map::new();
        for (n, line) in text.lines().enumerate() {
            let l = line.split(" #").next().unwrap_or("").trim_end();
            if l.trim().is_empty() || l.trim_start().starts_with('#') || l.trim() == "---" {
                continue;
            }
            if l.starts_with(' ') || l.starts_with('\t') {
                return Err(invalid(
                    path,
                    format!(
                        "invalid config at line {}: only top-level `key: value` lines are read",
                        n + 1
                    ),
                ));
            }
            let Some((k, v)) = l.split_once(':') else {
                return Err(invalid(
                    path,
                    format!("invalid config at line {}: expected `key: value`", n + 1),
                ));
            };
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|x| x.strip_suffix('"'))
                .or_else(|| v.strip_prefix('\'').and_then(|x| x.strip_suffix('\'')))
                .unwrap_or(v);
            let value = if v.is_empty() || v == "~" || v == "null" {
                Value::Null
            } else {
                Value::String(v.to_owned())
            };
            m.insert(k.trim().to_owned(), value);
        }
        m
    };
    let known = ["workflows_dir", "default_workflow"];
    let unknown: Vec<&str> = map
        .keys()
        .map(String::as_str)
        .filter(|k| !known.contains(k))
        .collect();
    if !unknown.is_empty() {
        return Err(invalid(
            path,
            format!(
                "unknown key(s) {} (known: {})",
                unknown.join(", "),
                known.join(", ")
            ),
        ));
    }
    let get = |k: &str| -> Result<Option<String>, AwfError> {
        match map.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
            Some(other) => Err(invalid(
                path,
                format!("`{k}` must be a non-empty string, not {other}"),
            )),
        }
    };
    Ok(AcpFileConfig {
        workflows_dir: get("workflows_dir")?,
        default_workflow: get("default_workflow")?,
    })
}

fn load_config(path: &Path) -> Result<AcpFileConfig, AwfError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| invalid(path, format!("cannot read the config file: {e}")))?;
    parse_config(path, &text)
}

/// Refuses a default workflow (`--workflow NAME`, or the config's `default_workflow`) that
/// is not one of the workflows offered: every free-text prompt would fail.
fn check_default_workflow(
    repository: &dyn awf_domain::ports::WorkflowRepository,
    name: &str,
    from_flag: bool,
) -> Result<(), AwfError> {
    let names: Vec<String> = repository
        .list()
        .map(|l| l.into_iter().map(|e| e.name).collect())
        .unwrap_or_default();
    // Listed, or found by path; a broken one is found too (prompts answer why it is broken).
    let found = names.iter().any(|n| n == name)
        || repository.load(name, None).map_or_else(
            |e| e.code().category() == awf_domain::Category::Workflow,
            |_| true,
        );
    if found {
        return Ok(());
    }
    let source = if from_flag {
        "--workflow"
    } else {
        "default_workflow"
    };
    let mut hint = match awf_domain::validate::closest(name, names.iter().map(String::as_str)) {
        Some(c) => format!("did you mean '{c}'? "),
        None => String::new(),
    };
    if names.is_empty() {
        hint.push_str("no workflow is found here (`awf list` shows none)");
    } else {
        hint.push_str(&format!(
            "`awf list` shows the workflows: {}",
            names.join(", ")
        ));
    }
    Err(AwfError::new(
        ErrorCode::UserAcpInvalidConfig,
        format!("{source} {name:?}: no such workflow (free-text prompts run the default workflow)"),
    )
    .with_detail("workflow", name.to_owned())
    .with_hint(hint))
}

/// Runs `awf acp-serve`.
pub async fn run(ctx: &Ctx, args: &AcpServeArgs) -> Result<Outcome, CliError> {
    let file = match &args.config {
        Some(p) => load_config(p)?,
        None => AcpFileConfig::default(),
    };
    let w = crate::wiring::build_recording(ctx.storage.as_deref())?;
    crate::run_cmd::warn_unrecorded(&w);
    let config = w.config()?;
    let mut services = w.services.clone();
    if let Some(dir) = &file.workflows_dir {
        let abs = w.cwd.join(dir);
        if !abs.is_dir() {
            let p = args.config.clone().unwrap_or_default();
            return Err(CliError::Awf(invalid(
                &p,
                format!("workflows_dir {dir:?} is not a directory"),
            )));
        }
        let mut paths = awf_yaml::RepoPaths::from_env(&w.cwd, &w.env, &w.data_root);
        paths.env_dirs = vec![abs.clone()];
        paths.local_dir.clone_from(&abs);
        paths.global_dir = abs;
        services.repository = Arc::new(awf_yaml::YamlRepository::new(paths));
    }
    let repository = Arc::clone(&services.repository);
    let default_workflow = args.workflow.clone().or(file.default_workflow);
    if let Some(name) = &default_workflow {
        check_default_workflow(repository.as_ref(), name, args.workflow.is_some())?;
    }
    let checks = services.clone();
    let check_env = w.env.clone();
    // As `awf list` and `awf validate` report a broken workflow.
    let validate: awf_acp::server::Validator = Arc::new(move |identifier| {
        awf_application::validation::broken_summary(&checks, identifier, &check_env)
    });
    let service = crate::wiring::served_run_service(services);
    let env: Vec<(String, String)> = w.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let masker = Masker::from_named(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let cfg = awf_acp::AcpConfig {
        service,
        repository,
        default_workflow,
        env,
        config_inputs: config.inputs,
        masker,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        max_line_bytes: 10 * 1024 * 1024,
        cancel_wait: Duration::from_millis(5500),
        shutdown_wait: Duration::from_millis(600),
        validate: Some(validate),
        sessions_dir: Some(w.data_root.join("acp").join("sessions")),
    };
    // Descendants of steps whose parent dies come back to awf (a subreaper since start-up),
    // which stops them when their call ends and at exit; the watchdog (started in main)
    // kills the steps' process groups should acp-serve itself be SIGKILLed.
    let shutdown = CancellationToken::new();
    spawn_signal_watch(shutdown.clone());
    awf_acp::serve_stdio(cfg, shutdown).await?;
    // The runs were cancelled (SIGTERM to their processes) and given `shutdown_wait`: what
    // ignored the SIGTERM is killed now, so awf exits within a second and leaves nothing.
    awf_exec::kill_all_now();
    awf_exec::sweep_adopted().await;
    if let Some(r) = &w.recorder {
        r.flush();
    }
    Ok(Outcome::Success)
}

/// Cancels `shutdown` at the first SIGTERM or SIGINT (also used by `awf serve`).
pub(crate) fn spawn_signal_watch(shutdown: CancellationToken) {
    use tokio::signal::unix::SignalKind;
    use tokio::signal::unix::signal;
    let mut term = signal(SignalKind::terminate()).ok();
    let mut int = signal(SignalKind::interrupt()).ok();
    tokio::spawn(async move {
        let t = async {
            match &mut term {
                Some(s) => {
                    let _ = s.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        let i = async {
            match &mut int {
                Some(s) => {
                    let _ = s.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = t => {}
            () = i => {}
        }
        shutdown.cancel();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_reads_json_and_yaml_lines() {
        let p = Path::new("c.yaml");
        let c = parse_config(
            p,
            "# acp\nworkflows_dir: ./wf  # here\ndefault_workflow: \"chat\"\n",
        )
        .unwrap();
        assert_eq!(c.workflows_dir.as_deref(), Some("./wf"));
        assert_eq!(c.default_workflow.as_deref(), Some("chat"));
        let c = parse_config(p, r#"{"default_workflow": "x"}"#).unwrap();
        assert_eq!(c.default_workflow.as_deref(), Some("x"));
        let e = parse_config(p, "nope: 1\n").unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserAcpInvalidConfig);
        assert!(e.message().contains("unknown key"), "{}", e.message());
        assert!(parse_config(p, "{bad").is_err());
        assert!(parse_config(p, "just words\n").is_err());
        assert!(parse_config(p, "a:\n  b: c\n").is_err());
        assert!(parse_config(p, r#"{"workflows_dir": 3}"#).is_err());
    }
}
