//! `awf`: the binary. Glue only — parses the command line, builds a single-threaded tokio
//! runtime, dispatches to one command module, and exits with the code that
//! [`errors::exit_code`] computes from the outcome (the one place exit codes are decided).
//!
//! Stdout carries results (run output, JSON, plans, tables); stderr carries progress lines,
//! warnings and errors.

mod cli;
mod ctx;
mod diagram;
mod dry_run;
mod error_cmd;
mod errors;
mod init_cmd;
mod json_out;
mod list_cmd;
mod printer;
mod progress;
mod run_cmd;
mod runs_cmd;
mod style;
mod validate_cmd;
mod watchdog;
mod wiring;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::Cli;
use crate::cli::Command;
use crate::ctx::Ctx;
use crate::errors::CliError;
use crate::errors::Outcome;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // --help / --version print to stdout and succeed; usage errors exit 1 (with the
            // run-result object on stdout when `-f json` was asked for).
            if e.use_stderr() && wants_json(std::env::args().skip(1)) {
                let err = awf_domain::AwfError::new(
                    awf_domain::ErrorCode::UserInputInvalidFormat,
                    e.render().to_string().trim().to_owned(),
                )
                .with_hint("run `awf --help` for the accepted flags");
                let _ = json_out::print(&json_out::failure_result("", &err));
                return ExitCode::from(1);
            }
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 1 } else { 0 });
        }
    };
    if matches!(cli.command, Command::Watchdog) {
        watchdog::serve();
        return ExitCode::SUCCESS;
    }
    let ctx = Ctx::from_cli(&cli);
    if matches!(cli.command, Command::Run(_) | Command::Resume(_)) {
        // Descendants of steps whose parent dies (`setsid cmd &`) come back to awf, which
        // stops them on cancel, timeout and at the end of the run. Refused (not Linux, a
        // sandbox): they are not tracked, everything else works.
        let _ = awf_exec::become_subreaper();
        // If awf itself is killed, a watchdog kills the process groups of its steps.
        watchdog::install();
    }
    // Two workers: signal handling and the event printer stay responsive while a worker is
    // busy rendering a large template or evaluating an expression.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build();
    let telemetry = match init_telemetry(&cli) {
        Ok(g) => g,
        Err(e) => {
            let outcome = errors::report(&CliError::Awf(e), ctx.json(), ctx.hints, ctx.err_style);
            return ExitCode::from(errors::exit_code(&outcome));
        }
    };
    let outcome = match runtime {
        Ok(rt) => {
            let outcome = rt.block_on(run(&ctx, cli.command));
            rt.shutdown_background();
            telemetry.shutdown();
            outcome
        }
        Err(e) => errors::report(
            &CliError::Awf(awf_domain::AwfError::new(
                awf_domain::ErrorCode::SystemInternal,
                format!("cannot start the async runtime: {e}"),
            )),
            ctx.json(),
            ctx.hints,
            ctx.err_style,
        ),
    };
    ExitCode::from(errors::exit_code(&outcome))
}

/// Logging to stderr (`--log-level`, `--log-format`, `--verbose`, `-q`, `AWF_LOG`) and, for
/// `run` and `resume`, OpenTelemetry export (`--otel-exporter`, `OTEL_EXPORTER_OTLP_*`,
/// `telemetry:` in the project configuration).
fn init_telemetry(cli: &Cli) -> Result<awf_telemetry::TelemetryGuard, awf_domain::AwfError> {
    let env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    let level = match cli.log_level.as_deref() {
        Some(l) => awf_telemetry::LogConfig::parse_level(l)?,
        None => awf_telemetry::LogConfig::default().level,
    };
    let cfg = awf_telemetry::LogConfig {
        level,
        json: cli.log_format == crate::cli::LogFormat::Json,
        verbose: cli.verbose,
        quiet: cli.quiet,
        directives: env.get("AWF_LOG").filter(|v| !v.is_empty()).cloned(),
    };
    let exports = matches!(cli.command, Command::Run(_) | Command::Resume(_));
    let otel = if exports {
        let telemetry = wiring::project_telemetry(cli.storage.as_deref(), &env);
        awf_telemetry::OtelConfig::from_sources(
            cli.otel_exporter.as_deref(),
            cli.otel_service_name.as_deref(),
            telemetry.as_ref(),
            &env,
        )
    } else {
        None
    };
    awf_telemetry::init_logging(&cfg, otel.as_ref())
}

/// Whether the raw arguments ask for `-f json` (`-f json`, `--format json`, `--format=json`,
/// `-fjson`), looked at when clap could not parse them.
fn wants_json(args: impl Iterator<Item = String>) -> bool {
    let args: Vec<String> = args.collect();
    args.iter().enumerate().any(|(i, a)| {
        matches!(a.as_str(), "-f" | "--format") && args.get(i + 1).is_some_and(|n| n == "json")
            || a == "--format=json"
            || a == "-fjson"
    })
}

/// Dispatches one command; failures not yet shown are reported here.
async fn run(ctx: &Ctx, command: Command) -> Outcome {
    let result: Result<Outcome, CliError> = match &command {
        Command::Run(args) => Ok(run_cmd::run(ctx, args).await),
        Command::Validate(args) => Ok(validate_cmd::run(ctx, args)),
        Command::List => list_cmd::run(ctx),
        Command::Diagram(args) => diagram::run(ctx, args),
        Command::Error(args) => error_cmd::run(ctx, args),
        Command::Init(args) => init_cmd::run(ctx, args),
        Command::Resume(args) => Ok(runs_cmd::resume(ctx, args).await),
        Command::History(args) => runs_cmd::history(ctx, args),
        Command::Status(args) => runs_cmd::status(ctx, args),
        Command::Config(args) => runs_cmd::config(ctx, args),
        Command::Watchdog => Ok(Outcome::Success),
    };
    match result {
        Ok(o) => o,
        Err(e) => errors::report(&e, ctx.json(), ctx.hints, ctx.err_style),
    }
}
