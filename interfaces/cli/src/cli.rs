//! Command-line surface (clap derive): what the user typed, checked without I/O.
//!
//! Source: spec/workflow.md §4.1 (global flags) and §4.2 (commands).

use std::path::PathBuf;

use clap::Args;
use clap::Parser;
use clap::Subcommand;
use clap::ValueEnum;

/// `awf`: runs AWF workflow files.
#[derive(Debug, Parser)]
#[command(
    name = "awf",
    version,
    about = "Workflow orchestrator for AI coding agents; runs AWF workflow files",
    propagate_version = true
)]
pub struct Cli {
    /// Debug log lines on stderr: for a run, what awf decided (commands as they run, secrets
    /// masked; transitions and why; retries; timings; where the run is recorded); agent
    /// thoughts and tool calls with `-o streaming`.
    #[arg(long, global = true)]
    pub verbose: bool,
    /// Suppress info and success lines (errors are still shown).
    #[arg(short = 'q', long, global = true)]
    pub quiet: bool,
    /// Disable ANSI colours and the live spinners, as NO_COLOR does (colours are also off
    /// when not on a terminal).
    #[arg(long, global = true)]
    pub no_color: bool,
    /// Disable "Hint:" lines in errors.
    #[arg(long, global = true)]
    pub no_hints: bool,
    /// Output format.
    #[arg(short = 'f', long, global = true, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Storage root (states, history, transcripts, templates); default $AWF_STORAGE_DIR or $XDG_DATA_HOME/awf.
    #[arg(long, global = true, value_name = "DIR")]
    pub storage: Option<PathBuf>,
    /// Shared run store instead of the embedded one: `postgres://USER@HOST:PORT/DB` (default
    /// $AWF_STORE; unset or empty = files and SQLite under the storage root). See README
    /// "Shared store (PostgreSQL)".
    #[arg(long, global = true, value_name = "URL")]
    pub store: Option<String>,
    /// Log level for diagnostics on stderr: error, warn, info, debug, trace, off (default warn;
    /// hook `log:` lines are shown unless a level is given that hides them).
    #[arg(long, global = true, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Log line format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Export OpenTelemetry spans over OTLP to this endpoint (`host:port` = gRPC, or a URL);
    /// the standard OTEL_EXPORTER_OTLP_* variables and `telemetry:` in .awf/config.yaml work too.
    #[arg(long, global = true, value_name = "ENDPOINT")]
    pub otel_exporter: Option<String>,
    /// Service name of exported spans (default `awf`).
    #[arg(long, global = true, value_name = "NAME")]
    pub otel_service_name: Option<String>,
    /// Accepted for compatibility; unused (project config comes from AWF_CONFIG_PATH or .awf/config.yaml).
    #[arg(long, global = true, value_name = "FILE", hide = true)]
    pub config: Option<String>,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The clap command of [`Cli`], with the global options shown only by `awf --help`: each
/// subcommand gets a hidden copy of every global option (so `awf run wf -f json` still
/// parses) and a line pointing at `awf --help`. (The binary parses with [`parse_from`], which
/// prepares only the subcommands its arguments name; the tests compare the two.)
#[cfg(test)]
pub fn command() -> clap::Command {
    with_hidden_globals(|_| true)
}

/// `command` (test-only) with the hidden global options and the `awf --help` line given only to the
/// subcommands for which `wanted(name)` holds (the others are left as clap derives them).
fn with_hidden_globals(wanted: impl Fn(&clap::Command) -> bool) -> clap::Command {
    use clap::CommandFactory;
    let cmd = Cli::command();
    let globals: Vec<clap::Arg> = cmd
        .get_arguments()
        .filter(|a| a.is_global_set())
        .cloned()
        .collect();
    let names: Vec<String> = cmd
        .get_subcommands()
        .filter(|s| wanted(s))
        .map(|s| s.get_name().to_owned())
        .collect();
    let cmd = names.into_iter().fold(cmd, |cmd, name| {
        cmd.mut_subcommand(name, |sc| {
            globals
                .iter()
                .fold(sc, |sc, g| sc.arg(g.clone().hide(true)))
                .after_help(
                    "Global options (output format, quiet/verbose, logging, storage, the shared \
                     store `--store URL`, colour, hints, telemetry) work here too: see `awf --help`.",
                )
        })
    });
    // The subcommands that can be parsed now hold their own (global) copies, which clap
    // carries down to their subcommands and whose values it lifts back to the top. Left
    // global at the top too, every option would also be cloned into each of the other
    // subcommands before parsing: 12 options into 15 commands, a sixth of a one-step run's
    // start-up instructions (issue 9: a run's fixed cost).
    globals.iter().fold(cmd, |cmd, g| {
        cmd.mut_arg(g.get_id().clone(), |a| a.global(false))
    })
}

/// Parses `args` (program name first) with `command`'s options.
///
/// Only the subcommands that some argument names (by name or alias: the one being run, or
/// the one `awf help <name>` describes) get their hidden global options and help line: a
/// command line selects one subcommand, and adding them to all fifteen cost about a fifth of
/// the instructions of `awf list` (issue 9: start-up).
///
/// # Errors
/// clap's error for bad arguments, `--help` and `--version` (which print themselves).
pub fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::FromArgMatches;
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let named = |sc: &clap::Command| {
        args.iter().skip(1).any(|a| {
            a.to_str()
                .is_some_and(|a| sc.get_name() == a || sc.get_all_aliases().any(|n| n == a))
        })
    };
    let mut matches = with_hidden_globals(named).try_get_matches_from(&args)?;
    // Taken from the matches, not from a copy of them (what `from_arg_matches` makes).
    Cli::from_arg_matches_mut(&mut matches)
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `-f/--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Human-readable text.
    Text,
    /// One JSON document on stdout.
    Json,
    /// Bordered table (AWF (Go)'s `table`): `list`, `list prompts`, `status`,
    /// `resume --list`, `config show`, `validate`; other commands (`history` too, as in AWF
    /// (Go)) print text.
    Table,
    /// The bare essentials, one item a line (AWF (Go)'s `quiet`): names, run ids, a status
    /// word; other commands (`history` too, as in AWF (Go); `-f json` gives its ids) print
    /// text.
    Quiet,
}

/// `run -o/--output`: what happens to command output in text mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputMode {
    /// Step lines only.
    Silent,
    /// Command output live, each line prefixed `[OUT] ` (stdout) or `[ERR] ` (stderr).
    Streaming,
    /// Each step's output after it finishes.
    Buffered,
}

/// `diagram --direction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Direction {
    /// Top to bottom.
    #[value(name = "TB")]
    Tb,
    /// Left to right.
    #[value(name = "LR")]
    Lr,
    /// Bottom to top.
    #[value(name = "BT")]
    Bt,
    /// Right to left.
    #[value(name = "RL")]
    Rl,
}

impl Direction {
    /// Graphviz `rankdir` value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Tb => "TB",
            Self::Lr => "LR",
            Self::Bt => "BT",
            Self::Rl => "RL",
        }
    }
}

/// A subcommand's arguments, added to the parser only when that subcommand is built
/// ([`clap::Command::defer`]): when it is the one parsed, or for help and completions. A
/// command line names one subcommand, and building the arguments of all fifteen was most of
/// clap's share of every awf command's start (issue 9: start-up). Reads as the arguments
/// themselves (`Deref`).
#[derive(Debug)]
pub struct Deferred<T>(pub T);

impl<T: clap::FromArgMatches> clap::FromArgMatches for Deferred<T> {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        T::from_arg_matches(matches).map(Self)
    }

    fn from_arg_matches_mut(matches: &mut clap::ArgMatches) -> Result<Self, clap::Error> {
        T::from_arg_matches_mut(matches).map(Self)
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        self.0.update_from_arg_matches(matches)
    }

    fn update_from_arg_matches_mut(
        &mut self,
        matches: &mut clap::ArgMatches,
    ) -> Result<(), clap::Error> {
        self.0.update_from_arg_matches_mut(matches)
    }
}

/// `T`'s arguments added to `cmd` with what the subcommand says of itself kept: its about
/// texts (the variant's doc comment, where `T`'s own doc comment would replace it once
/// built after it, as it is when deferred).
fn with_args_of<T: Args>(cmd: clap::Command, update: bool) -> clap::Command {
    let about = cmd.get_about().cloned();
    let long_about = cmd.get_long_about().cloned();
    let cmd = if update {
        T::augment_args_for_update(cmd)
    } else {
        T::augment_args(cmd)
    };
    let cmd = match about {
        Some(a) => cmd.about(a),
        None => cmd,
    };
    match long_about {
        Some(a) => cmd.long_about(a),
        None => cmd,
    }
}

impl<T: Args> Args for Deferred<T> {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd.defer(|cmd| with_args_of::<T>(cmd, false))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        cmd.defer(|cmd| with_args_of::<T>(cmd, true))
    }

    fn group_id() -> Option<clap::Id> {
        T::group_id()
    }
}

impl<T> std::ops::Deref for Deferred<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> std::ops::DerefMut for Deferred<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a workflow.
    Run(Deferred<RunArgs>),
    /// Validate a workflow file and print every finding.
    Validate(Deferred<ValidateArgs>),
    /// List available workflows (or, with `prompts`, the prompt files).
    #[command(visible_alias = "ls")]
    List(Deferred<ListArgs>),
    /// Print a workflow as a Graphviz DOT graph (a JSON graph with -f json).
    Diagram(Deferred<DiagramArgs>),
    /// Explain error codes (all of them, one, or those under a prefix).
    Error(Deferred<ErrorArgs>),
    /// Create the project layout (.awf.yaml, .awf/) with a working example.
    Init(Deferred<InitArgs>),
    /// Continue an interrupted or failed run (same run id), or list resumable runs.
    Resume(Deferred<ResumeArgs>),
    /// Past runs, newest first, with filters and totals.
    History(Deferred<HistoryArgs>),
    /// One run: status, current state and every state's result.
    Status(Deferred<StatusArgs>),
    /// Cancel a run of the shared store (`--store`): a queued one at once, a running one by
    /// its worker.
    Cancel(Deferred<CancelArgs>),
    /// Project configuration.
    Config(Deferred<ConfigArgs>),
    /// Serve awf's tools (Read, Write, Edit, Bash, Glob, Grep) over MCP on stdio.
    ///
    /// `--config FILE` names the proxy's JSON config: `intercept_builtins`,
    /// `plugin_tools`, `root_dir` (the workspace the tools are confined to), `run_id`, `step`,
    /// `audit_path` (one JSON line per tool call), `traceparent`, `limits`. Stdout carries only
    /// MCP frames; logs go to stderr. Ends at stdin EOF or SIGTERM (exit 0); a bad config
    /// exits 1. `--workflows [DIR]` serves the project's workflows as tools too (or alone):
    /// one per workflow of `awf list` (only those in DIR when given), plus `awf_run_status`
    /// and `awf_resume`. See README "awf mcp-serve".
    #[command(
        name = "mcp-serve",
        override_usage = "awf mcp-serve [--config <FILE>] [--workflows [DIR]] [--yes]"
    )]
    McpServe(Deferred<McpServeArgs>),
    /// Serve workflows to editors over the Agent Client Protocol (ACP v1) on stdio.
    ///
    /// Each prompt `/workflow key=value ...` runs that workflow in the session's cwd and
    /// streams its steps as tool calls; approval gates become permission requests. Free text
    /// goes to `--workflow NAME` (or the config's `default_workflow`) as its `prompt` input.
    /// `--config FILE` (JSON or YAML): `workflows_dir`, `default_workflow`. Stdout carries
    /// only ACP frames; logs go to stderr. Ends at stdin EOF or SIGTERM. See README "Editors".
    #[command(
        name = "acp-serve",
        override_usage = "awf acp-serve [--config <FILE>] [--workflow <NAME>]"
    )]
    AcpServe(Deferred<AcpServeArgs>),
    /// Serve the HTTP API: list, read, validate and run workflows; read, cancel, resume,
    /// answer and follow runs (SSE); history. OpenAPI at /openapi.json, Swagger UI at /docs.
    /// Loopback unless `--token-env` names a token. At SIGTERM/SIGINT, running runs get
    /// `--drain-timeout` to finish, then are cancelled. See README "awf serve".
    #[command(
        name = "serve",
        override_usage = "awf serve [--addr <HOST:PORT>] [--token-env <NAME>] [--max-runs <N>] [--cors-origin <ORIGIN>]... [--run-ttl <DURATION>] [--drain-timeout <DURATION>] [--keep-alive <DURATION>] [--header-timeout <DURATION>] [--store <URL> [--lease <DURATION>]]"
    )]
    Serve(Deferred<ServeArgs>),
    /// Internal: the watchdog that stops a run's processes when awf dies (see watchdog.rs).
    #[command(name = "__watchdog", hide = true)]
    Watchdog,
}

/// `awf list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// What to list (default: workflows).
    #[command(subcommand)]
    pub what: Option<ListWhat>,
}

/// `awf list …`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Subcommand)]
pub enum ListWhat {
    /// List prompt files (what `--input k=@prompts/<name>` reads).
    ///
    /// Looks in $AWF_PROMPTS_PATH, .awf/prompts, then the global config dir's prompts/ (the
    /// first one wins for a name).
    #[command(visible_alias = "p")]
    Prompts,
}

/// `awf resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// Run id, or a unique prefix of one (see `awf resume --list`).
    pub run_id: Option<String>,
    /// List runs that can be resumed.
    #[arg(short = 'l', long)]
    pub list: bool,
    /// Where to restart: `current` (default), `previous`, or a state name.
    #[arg(long, value_name = "current|previous|STATE", default_value = "current")]
    pub from: String,
    /// Input override `name=value` (repeatable); secret inputs must be given again.
    #[arg(short = 'i', long = "input", value_name = "NAME=VALUE")]
    pub inputs: Vec<String>,
    /// What to show of command output in text mode.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputMode::Silent)]
    pub output: OutputMode,
    /// Approve every approval gate (`approval:`) without asking.
    #[arg(long)]
    pub yes: bool,
    /// Mock a step's result, as `awf run --mock` (repeatable): replaces the mocks the run
    /// stored for that step; the others still apply.
    #[arg(short = 'm', long = "mock", value_name = "states.STEP.FIELD=VALUE")]
    pub mocks: Vec<String>,
    /// Drop the mocks the run stored (its `--mock` flags): the steps run for real (the
    /// resume's own `--mock` flags still apply).
    #[arg(long)]
    pub no_mocks: bool,
}

/// `awf history`.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Only runs of this workflow (name or identifier).
    #[arg(short = 'w', long)]
    pub workflow: Option<String>,
    /// Only runs with this status: running, waiting, completed, failed, cancelled (also
    /// success, failure), or queued (a run submitted to the shared store no worker started
    /// yet).
    #[arg(short = 's', long)]
    pub status: Option<String>,
    /// Only runs started on or after this day (YYYY-MM-DD, UTC).
    #[arg(long, value_name = "YYYY-MM-DD")]
    pub since: Option<String>,
    /// At most this many runs, newest first (1 or more).
    #[arg(short = 'n', long, default_value_t = 20)]
    pub limit: usize,
    /// Totals instead of rows.
    #[arg(long)]
    pub stats: bool,
}

/// `awf status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Run id, or a unique prefix of one (see `awf history`).
    pub run_id: String,
}

/// `awf cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Run id, or a unique prefix of one (see `awf history`).
    pub run_id: String,
}

/// `awf config`.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: ConfigAction,
}

/// `awf config …`.
#[derive(Debug, clap::Subcommand)]
pub enum ConfigAction {
    /// Show the project configuration (.awf/config.yaml or $AWF_CONFIG_PATH).
    Show,
}

/// `awf run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Workflow name or path to a workflow file.
    pub workflow: String,
    /// Input value `name=value` (repeatable).
    #[arg(short = 'i', long = "input", value_name = "NAME=VALUE")]
    pub inputs: Vec<String>,
    /// What to show of command output in text mode.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputMode::Silent)]
    pub output: OutputMode,
    /// Print the execution plan; execute nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Queue the run in the shared store (`--store URL` or `AWF_STORE`) for a worker
    /// (`awf serve --store`) and print its id, without running it here. Not with `--step`
    /// (a worker runs the whole workflow), `--dry-run` nor `--interactive` (a worker has no
    /// terminal to stop at).
    #[arg(long, conflicts_with_all = ["dry_run", "step", "interactive"])]
    pub submit: bool,
    /// Answer a step without running it: `states.<step>.output=<text>` (also `stderr`,
    /// `status=failed`, or `status=completed`, the default); repeatable. Any step that runs
    /// something (command, script_file, agent, operation, call_workflow) takes its mock
    /// instead; a failed mock exits 1 and takes `on_failure`.
    #[arg(short = 'm', long = "mock", value_name = "states.STEP.FIELD=VALUE")]
    pub mocks: Vec<String>,
    /// Stop before each state (or each breakpoint) and ask: continue, skip, abort, inspect,
    /// edit an input, retry the previous state.
    #[arg(long)]
    pub interactive: bool,
    /// Approve every approval gate (`approval:`) without asking; without it, a gate is asked
    /// on the terminal and refused when there is none.
    #[arg(long)]
    pub yes: bool,
    /// With --interactive: stop only before these states (comma-separated, repeatable).
    #[arg(
        short = 'b',
        long = "breakpoint",
        value_name = "STATE[,STATE]",
        value_delimiter = ','
    )]
    pub breakpoints: Vec<String>,
    /// Run only this step (no routing); earlier states come from --mock.
    #[arg(short = 's', long = "step", value_name = "STATE")]
    pub step: Option<String>,
}

/// `awf validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Workflow name or path to a workflow file.
    pub workflow: String,
    /// Treat unknown keys (`WORKFLOW.PARSE.UNKNOWN_FIELD`) as errors; every other warning
    /// stays a warning (exit 0).
    #[arg(long)]
    pub strict: bool,
}

/// `awf diagram`.
#[derive(Debug, Args)]
pub struct DiagramArgs {
    /// Workflow name or path to a workflow file.
    pub workflow: String,
    /// Write to this file (.dot, or .png/.svg/.pdf through Graphviz `dot`) instead of stdout.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Graph direction.
    #[arg(long, value_enum, default_value_t = Direction::Tb)]
    pub direction: Direction,
    /// State to highlight.
    #[arg(long, value_name = "STATE")]
    pub highlight: Option<String>,
}

/// `awf mcp-serve`.
#[derive(Debug, Args)]
pub struct McpServeArgs {
    /// The proxy's JSON config file (`intercept_builtins`, `plugin_tools`, `root_dir`,
    /// `run_id`, `step`, `audit_path`, `traceparent`, `limits`): the global `--config FILE`
    /// (AWF (Go)'s flag), copied here by main after parsing.
    #[arg(skip)]
    pub config: Option<std::path::PathBuf>,
    /// Serve workflows as tools: those `awf list` finds, or only those in DIR.
    // `Some("")`: the flag without DIR.
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = "")]
    pub workflows: Option<String>,
    /// Approve every approval gate of the workflows run (without it a gate fails: nobody can
    /// be asked over a tool call).
    #[arg(long)]
    pub yes: bool,
}

/// `awf serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (a loopback address; port 0 picks a free port, printed on
    /// stdout as `AWF API server listening on http://HOST:PORT`).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:2511")]
    pub addr: String,
    /// Environment variable holding the bearer token every request must carry
    /// (`Authorization: Bearer <token>`); required to bind a non-loopback address. The
    /// variable is withheld from the runs' steps.
    #[arg(long, value_name = "NAME")]
    pub token_env: Option<String>,
    /// Most runs live at once; a run or resume beyond it is answered 429 with `Retry-After`.
    /// With `--store` (a worker), the runs this worker executes at once: a run beyond it is
    /// queued (202) for any worker with a free slot.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_runs: u32,
    /// An origin allowed to call the API from a browser (`http://host:port`; repeatable).
    /// Without it CORS is off.
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub cors_origins: Vec<String>,
    /// How long a finished run stays in memory (its event stream, pending state); after it,
    /// GET answers from the store and /api/history still lists it (`15m`, `30s`, `500ms`).
    #[arg(long, value_name = "DURATION", default_value = "15m")]
    pub run_ttl: String,
    /// On SIGTERM/SIGINT, how long running runs get to finish before they are cancelled
    /// (new runs are refused with 503 meanwhile).
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub drain_timeout: String,
    /// How long an event stream (`/api/executions/{id}/events`) may stay silent before a
    /// heartbeat comment is sent on it (more than zero).
    #[arg(long, value_name = "DURATION", default_value = "15s")]
    pub keep_alive: String,
    /// How long a connection may take to send its whole request head (request line and
    /// headers), and how long a kept-alive connection may wait idle for its next request,
    /// before it is closed (more than zero; request bodies and event streams are not bounded).
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub header_timeout: String,
    /// With `--store`: how long a claim on a queued run lasts without its heartbeat (renewed
    /// every third of it); another worker resumes a run whose lease expired. Default 15s;
    /// refused without `--store`.
    #[arg(long, value_name = "DURATION")]
    pub lease: Option<String>,
}

/// `awf acp-serve`.
#[derive(Debug, Args)]
pub struct AcpServeArgs {
    /// The ACP config file (`workflows_dir`, `default_workflow`): the global `--config FILE`
    /// (AWF (Go)'s flag), copied here by main after parsing.
    #[arg(skip)]
    pub config: Option<std::path::PathBuf>,
    /// Workflow run by prompts that are not `/workflow` commands (their text is its `prompt`
    /// input).
    #[arg(long, value_name = "NAME")]
    pub workflow: Option<String>,
}

/// `awf error`.
#[derive(Debug, Args)]
pub struct ErrorArgs {
    /// An error code or a prefix of one (e.g. `USER.INPUT`).
    pub code: Option<String>,
}

/// `awf init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Overwrite existing files.
    #[arg(long)]
    pub force: bool,
    /// Create the global prompts/ and scripts/ examples in the config dir instead.
    #[arg(long)]
    pub global: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_flags_parse() {
        let cli = Cli::try_parse_from([
            "awf",
            "run",
            "wf",
            "-i",
            "a=1",
            "--input",
            "b=2",
            "-o",
            "streaming",
            "-f",
            "json",
            "--dry-run",
        ])
        .unwrap();
        let Command::Run(r) = cli.command else {
            panic!("not run")
        };
        assert_eq!(r.workflow, "wf");
        assert_eq!(r.inputs, vec!["a=1".to_owned(), "b=2".to_owned()]);
        assert_eq!(r.output, OutputMode::Streaming);
        assert!(r.dry_run);
        assert_eq!(cli.format, Format::Json);
    }

    #[test]
    fn submit_refuses_step_which_a_worker_would_not_honour() {
        // A worker runs the whole workflow: `--submit --step s2` ran s1 as well before.
        let e = Cli::try_parse_from(["awf", "run", "wf", "--submit", "--step", "s2"])
            .err()
            .map(|e| e.kind());
        assert_eq!(e, Some(clap::error::ErrorKind::ArgumentConflict));
        assert!(Cli::try_parse_from(["awf", "run", "wf", "--submit"]).is_ok());
    }

    #[test]
    fn diagram_direction_is_upper_case() {
        let cli = Cli::try_parse_from(["awf", "diagram", "wf", "--direction", "LR"]).unwrap();
        let Command::Diagram(d) = cli.command else {
            panic!("not diagram")
        };
        assert_eq!(d.direction, Direction::Lr);
    }

    #[test]
    fn subcommand_help_leaves_global_options_to_the_top_level_help() {
        let mut cmd = command();
        let top = cmd.render_long_help().to_string();
        assert!(top.contains("--log-format"), "{top}");
        let run = cmd
            .find_subcommand_mut("run")
            .unwrap()
            .render_long_help()
            .to_string();
        assert!(run.contains("--dry-run"), "{run}");
        for global in ["--log-format", "--otel-exporter", "--storage", "--no-hints"] {
            assert!(!run.contains(&format!("{global} ")), "{global} in:\n{run}");
        }
        assert!(run.contains("see `awf --help`"), "{run}");
        // Global options still parse after the subcommand.
        let cli = parse_from(["awf", "run", "wf", "-f", "json", "--log-level", "off"]).unwrap();
        assert_eq!(cli.format, Format::Json);
        assert_eq!(cli.log_level.as_deref(), Some("off"));
        let cli = parse_from(["awf", "config", "show", "--storage", "/x"]).unwrap();
        assert_eq!(cli.storage, Some(PathBuf::from("/x")));
    }

    #[test]
    fn unknown_format_is_rejected() {
        assert!(Cli::try_parse_from(["awf", "-f", "xml", "list"]).is_err());
    }

    #[test]
    fn table_and_quiet_formats_and_list_prompts_parse() {
        let cli = parse_from(["awf", "list", "p", "-f", "table"]).unwrap();
        assert_eq!(cli.format, Format::Table);
        let Command::List(l) = cli.command else {
            panic!("not list")
        };
        assert_eq!(l.what, Some(ListWhat::Prompts));
        let cli = parse_from(["awf", "-f", "quiet", "list"]).unwrap();
        assert_eq!(cli.format, Format::Quiet);
        let Command::List(l) = cli.command else {
            panic!("not list")
        };
        assert_eq!(l.what, None);
    }
}

#[cfg(test)]
mod parse_tests {
    use super::*;

    /// What `clap` makes of `args` with the full [`command`]: the parsed command line, or the
    /// rendered error / help / version text and whether it goes to stderr.
    fn full(args: &[&str]) -> Result<String, (String, bool)> {
        use clap::FromArgMatches;
        command()
            .try_get_matches_from(args)
            .and_then(|m| Cli::from_arg_matches(&m))
            .map(|c| format!("{c:?}"))
            .map_err(|e| (e.render().to_string(), e.use_stderr()))
    }

    #[test]
    fn parsing_with_only_the_named_subcommands_prepared_gives_what_the_full_parser_gives() {
        let cases: &[&[&str]] = &[
            &["awf", "run", "wf", "-f", "json", "--log-level", "off"],
            &["awf", "-q", "list"],
            &["awf", "ls", "-f", "table"],
            &["awf", "list", "p", "--storage", "/x"],
            &["awf", "config", "show", "--storage", "/x"],
            &["awf", "validate", "wf.yaml", "--strict", "--no-color"],
            &["awf", "mcp-serve", "--config", "c.json"],
            &["awf", "list", "--bogus"],
            &["awf", "rnu", "wf"],
            &["awf", "run", "--help"],
            &["awf", "help", "run"],
            &["awf", "help", "ls"],
            &["awf", "list", "--version"],
            &["awf", "--help"],
            &["awf", "-q", "--version"],
            &["awf"],
            &["awf", "-f", "xml", "list"],
            // Global options below a nested subcommand, and before the subcommand.
            &["awf", "list", "prompts", "-f", "json", "-q"],
            &["awf", "config", "show", "-f", "json", "--no-color"],
            &["awf", "-f", "json", "run", "wf", "--log-format", "json"],
            &["awf", "-f", "json", "run", "wf", "-f", "quiet"],
            &[
                "awf",
                "history",
                "--store",
                "postgres://h/db",
                "-f",
                "quiet",
            ],
            &["awf", "rnu", "-f", "json"],
            &["awf", "help"],
        ];
        for args in cases {
            let fast = parse_from(args.iter().copied())
                .map(|c| format!("{c:?}"))
                .map_err(|e| (e.render().to_string(), e.use_stderr()));
            assert_eq!(fast, full(args), "{args:?}");
        }
        // The subcommand's help still carries the pointer to the global options.
        let Err((help, _)) = full(&["awf", "help", "run"]) else {
            panic!("help is an error kind")
        };
        assert!(help.contains("see `awf --help`"), "{help}");
    }

    /// A subcommand's arguments are built only when it is ([`Deferred`]); built, it keeps
    /// what it says of itself: `awf <sub> --help` opens with the line `awf --help` gives it
    /// (the arguments' own doc comment, `awf run`, replaced it once).
    #[test]
    fn deferred_subcommands_keep_their_about_and_get_their_arguments() {
        use clap::CommandFactory;
        let unbuilt = Cli::command()
            .find_subcommand("run")
            .map(|sc| sc.get_arguments().count());
        assert_eq!(unbuilt, Some(0), "run's arguments wait until run is built");
        let top = command();
        for sc in top
            .get_subcommands()
            .filter(|sc| !sc.is_hide_set() && sc.get_name() != "help")
        {
            let name = sc.get_name();
            let about = sc.get_about().map(ToString::to_string).unwrap_or_default();
            let Err((help, _)) = full(&["awf", name, "--help"]) else {
                panic!("{name} --help is an error kind")
            };
            // The first paragraph (clap drops its closing full stop in the list).
            let first = help.lines().next().unwrap_or_default();
            assert!(
                !about.is_empty() && first.starts_with(&about),
                "{name}: {first:?} / {about:?}"
            );
        }
        let Err((help, _)) = full(&["awf", "run", "--help"]) else {
            panic!("help is an error kind")
        };
        assert!(help.contains("--dry-run"), "{help}");
    }
}
