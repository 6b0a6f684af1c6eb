//! Global options every command sees, resolved once from the parsed flags.

use std::path::PathBuf;

use crate::cli::Cli;
use crate::cli::Format;
use crate::style::Style;

/// Resolved global options.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// `-f`.
    pub format: Format,
    /// `-q`.
    pub quiet: bool,
    /// Hint lines in errors (not `--no-hints`).
    pub hints: bool,
    /// `--storage`, made absolute against the working directory (so that hints that repeat
    /// it hold wherever they are pasted).
    pub storage: Option<PathBuf>,
    /// `--store URL`, as given (see [`crate::wiring::store_url`] for `AWF_STORE`).
    pub store: Option<String>,
    /// Colour for stderr lines.
    pub err_style: Style,
    /// `--no-color`: no colours, and no live progress (as `NO_COLOR`).
    pub no_color: bool,
    /// `--verbose`: agent thoughts and tool-call markers in streaming output.
    pub verbose: bool,
    /// Most verbose level of the run's own log lines (hook `log:`, engine warnings) that are
    /// shown: the `--log-level` given, else `info` (see `LogConfig::run_log_level`).
    pub run_log_level: awf_telemetry::LevelFilter,
    /// `--log-format json`: those lines are JSON objects.
    pub log_json: bool,
}

impl Ctx {
    /// From the parsed command line and the terminal/NO_COLOR state.
    pub fn from_cli(cli: &Cli) -> Self {
        Self {
            format: cli.format,
            quiet: cli.quiet,
            hints: !cli.no_hints,
            storage: cli.storage.as_deref().map(absolute),
            store: cli.store.clone(),
            err_style: Style::stderr(cli.no_color),
            no_color: cli.no_color,
            verbose: cli.verbose,
            run_log_level: log_config(cli).run_log_level(cli.log_level.is_some()),
            log_json: cli.log_format == crate::cli::LogFormat::Json,
        }
    }

    /// Whether `-f json` was given.
    pub fn json(&self) -> bool {
        self.format == Format::Json
    }
}

/// `path` joined to the working directory ([`crate::wiring::working_dir`]); as given when
/// it is absolute or the working directory cannot be read.
fn absolute(path: &std::path::Path) -> PathBuf {
    if path.is_absolute() || path.as_os_str().is_empty() {
        return path.to_path_buf();
    }
    let pwd = std::env::var("PWD").ok();
    awf_host::working_dir(pwd.as_deref()).map_or_else(|_| path.to_path_buf(), |cwd| cwd.join(path))
}

/// The logging configuration of the flags (an unknown `--log-level` falls back to the
/// default here; `main` reports it as an error before any command runs).
pub fn log_config(cli: &Cli) -> awf_telemetry::LogConfig {
    let level = cli
        .log_level
        .as_deref()
        .and_then(|l| awf_telemetry::LogConfig::parse_level(l).ok())
        .unwrap_or(awf_telemetry::LogConfig::default().level);
    awf_telemetry::LogConfig {
        level,
        json: cli.log_format == crate::cli::LogFormat::Json,
        verbose: cli.verbose,
        quiet: cli.quiet,
        directives: std::env::var("AWF_LOG").ok().filter(|v| !v.is_empty()),
    }
}
