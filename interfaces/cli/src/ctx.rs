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
    /// `--storage`.
    pub storage: Option<PathBuf>,
    /// Colour for stderr lines.
    pub err_style: Style,
    /// `--verbose`: agent thoughts and tool-call markers in streaming output.
    pub verbose: bool,
}

impl Ctx {
    /// From the parsed command line and the terminal/NO_COLOR state.
    pub fn from_cli(cli: &Cli) -> Self {
        Self {
            format: cli.format,
            quiet: cli.quiet,
            hints: !cli.no_hints,
            storage: cli.storage.clone(),
            err_style: Style::stderr(cli.no_color),
            verbose: cli.verbose,
        }
    }

    /// Whether `-f json` was given.
    pub fn json(&self) -> bool {
        self.format == Format::Json
    }
}
