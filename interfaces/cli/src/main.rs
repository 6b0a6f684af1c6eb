//! `awf`: the binary. Glue only — parses the command line, builds a single-threaded tokio
//! runtime, dispatches to one command module, and exits with the code that
//! [`errors::exit_code`] computes from the outcome (the one place exit codes are decided).
//!
//! Stdout carries results (run output, JSON, plans, tables); stderr carries progress lines,
//! warnings and errors.

mod acp_cmd;
mod batch_write;
mod cancel_cmd;
mod cli;
mod ctx;
mod diagram;
mod dry_run;
mod error_cmd;
mod errors;
mod headroom;
mod init_cmd;
mod interact;
mod json_out;
mod list_cmd;
mod mcp_cmd;
mod output_tail;
mod printer;
mod progress;
mod proxy;
mod run_cmd;
mod run_help;
mod runs_cmd;
mod serve_cmd;
mod serve_resume;
mod serve_token;
mod stdout_check;
mod style;
mod submit_cmd;
mod table;
mod tmp_sweep;
mod validate_cmd;
mod watchdog;
mod wiring;

use std::io::Write;
use std::process::ExitCode;

use crate::cli::Cli;
use crate::cli::Command;
use crate::ctx::Ctx;
use crate::errors::CliError;
use crate::errors::Outcome;

fn main() -> ExitCode {
    let _ = printer::PROCESS_START.set(std::time::SystemTime::now());
    // Before any thread starts (they inherit it): a write past `ulimit -f` fails with
    // EFBIG, reported as any other write failure, instead of SIGXFSZ killing awf with the
    // run's end unwritten. Steps start with the signal mask awf was started with.
    awf_exec::hold_file_size_signal();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(code) = version_only(&args) {
        return code;
    }
    // The watchdog every run starts: straight to its loop, without building the
    // command-line parser of every subcommand (about 0.7 M of its 1.15 M instructions per
    // run; issue 9: per-run cost).
    if matches!(args.as_slice(), [_, sub] if sub == watchdog::SUBCOMMAND) {
        watchdog::serve();
        return ExitCode::SUCCESS;
    }
    install_panic_hook();
    let text_args = || {
        args.iter()
            .skip(1)
            .map(|a| a.to_string_lossy().into_owned())
    };
    if let Some(err) = non_utf8_argument(&args) {
        if wants_json(text_args()) {
            let _ = json_out::print(&json_out::failure_result("", &err));
        } else {
            errors::report(
                &CliError::Awf(err),
                false,
                true,
                style::Style::stderr(false),
            );
        }
        return ExitCode::from(1);
    }
    let mut cli = match cli::parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            // `awf run <workflow> --help` describes that workflow (or fails to load it).
            if e.kind() == clap::error::ErrorKind::DisplayHelp
                && let Some(cli) = run_help::wanted(&args)
            {
                return ExitCode::from(run_help::print(&cli, &e.render().to_string()));
            }
            // --help / --version print to stdout and succeed; usage errors exit 1 (with `-f
            // json`: the run-result object on stdout for `run`/`resume`, else the JSON error
            // object on stderr).
            if e.use_stderr() && wants_json(text_args()) {
                let err = awf_domain::AwfError::new(
                    awf_domain::ErrorCode::UserInputInvalidFormat,
                    e.render().to_string().trim().to_owned(),
                )
                .with_hint("run `awf --help` for the accepted flags");
                if matches!(
                    subcommand(text_args()).as_deref(),
                    Some("run" | "resume") | None
                ) {
                    let _ = json_out::print(&json_out::failure_result("", &err));
                } else {
                    // Other commands: the JSON error object on stderr, stdout empty (AWF (Go)).
                    errors::report(&CliError::Awf(err), true, true, style::Style::plain());
                }
                return ExitCode::from(1);
            }
            // Text mode: clap's message and usage lines, with the code and a hint as every
            // other error has them (trial 73: `-f json` had them, text mode not).
            if e.use_stderr()
                && let Some(text) = usage_error_text(
                    &e.render().to_string(),
                    e.kind(),
                    subcommand(text_args()).as_deref(),
                )
            {
                let _ = std::io::stderr().lock().write_all(text.as_bytes());
                return ExitCode::from(1);
            }
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 1 } else { 0 });
        }
    };
    // `awf mcp-serve --config FILE`: the global (hidden) `--config` names its file.
    if let Command::McpServe(a) = &mut cli.command {
        a.config = cli.config.clone().map(std::path::PathBuf::from);
    }
    if let Command::AcpServe(a) = &mut cli.command {
        a.config = cli.config.clone().map(std::path::PathBuf::from);
    }
    if matches!(cli.command, Command::Watchdog) {
        watchdog::serve();
        return ExitCode::SUCCESS;
    }
    // `awf serve --token-env NAME`: the token leaves the process's environment block before
    // any thread or child starts (a step could read it in `/proc/$PPID/environ`).
    if let Command::Serve(a) = &cli.command
        && let Some(name) = &a.token_env
    {
        serve_token::take();
        serve_token::reexec_without(name, &args);
    }
    let ctx = Ctx::from_cli(&cli);
    errors::remember_store_flags(ctx.storage.as_deref(), ctx.store.as_deref());
    // A runtime that cannot start its threads panics or hangs: say so before starting one.
    if !synchronous(&cli.command)
        && let Err(e) = headroom::check()
    {
        let outcome = errors::report(&CliError::Awf(e), ctx.json(), ctx.hints, ctx.err_style);
        return ExitCode::from(errors::exit_code(&outcome));
    }
    let mut watchdog_start = None;
    if matches!(
        cli.command,
        Command::Run(_) | Command::Resume(_) | Command::AcpServe(_) | Command::Serve(_)
    ) {
        // Descendants of steps whose parent dies (`setsid cmd &`) come back to awf, which
        // stops them on cancel, timeout and at the end of the run. Refused (not Linux, a
        // sandbox): they are not tracked, everything else works.
        let _ = awf_exec::become_subreaper();
        // If awf itself is killed, a watchdog kills the process groups of its steps; the
        // per-call MCP files a killed awf left in the temp dir go. Both beside the command's
        // start-up (the first step waits for the watchdog).
        watchdog_start = start_watchdog(ctx.storage.clone());
    } else if matches!(cli.command, Command::McpServe(_)) {
        // The same for what the Bash calls of `mcp-serve` start; started beside the server's
        // start-up rather than before it (spawning it waits for its exec).
        let _ = awf_exec::become_subreaper();
        watchdog_start = std::thread::Builder::new()
            .name("awf-watchdog-start".into())
            .spawn(watchdog::install)
            .ok();
    }
    // Two workers: signal handling and the event printer stay responsive while a worker is
    // busy rendering a large template or evaluating an expression. Commands that never wait
    // (`validate`, `list`, …) get a bare current-thread runtime instead: no threads, no
    // I/O or signal driver to start (issue 9: start-up).
    let runtime = if synchronous(&cli.command) {
        tokio::runtime::Builder::new_current_thread().build()
    } else if matches!(&cli.command, Command::McpServe(a) if a.workflows.is_none()) {
        // The tool proxy: one thread serves the protocol (and awaits Bash commands), the file
        // tools run on a few blocking threads: less memory and fewer wake-ups per call than
        // worker threads (issue 11: RSS under 10 MB). Not fewer than four: when stdin and
        // stdout are not pipes (a Node host's socket pair), tokio's stdin and stdout hold
        // one each. Workflows mode runs the engine: it keeps the two workers.
        tokio::runtime::Builder::new_current_thread()
            .max_blocking_threads(4)
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            // Parallel blocks, loops and sub-workflows run their states recursively; 16 MiB (a
            // reservation, touched only as used) leaves room for the engine's nesting limit.
            .thread_stack_size(16 * 1024 * 1024)
            .enable_all()
            .build()
    };
    let telemetry = match init_telemetry(&cli) {
        Ok(g) => g,
        Err(e) => {
            let outcome = errors::report(&CliError::Awf(e), ctx.json(), ctx.hints, ctx.err_style);
            return ExitCode::from(errors::exit_code(&outcome));
        }
    };
    let outcome = match runtime {
        Ok(rt) => {
            let watched = matches!(
                cli.command,
                Command::Run(_) | Command::Resume(_) | Command::AcpServe(_) | Command::Serve(_)
            );
            let is_mcp_serve = matches!(cli.command, Command::McpServe(_));
            let outcome = if watched {
                // On a worker, not on this thread: the engine, the run service's pump and
                // the printer then hand events to each other on the runtime's own threads
                // (usually one), instead of waking this thread twice per step (issue 9).
                let task_ctx = ctx.clone();
                let task = rt.spawn(async move { run(&task_ctx, cli.command).await });
                match rt.block_on(task) {
                    Ok(outcome) => outcome,
                    // A panic is still a panic (the hook printed it): exit as it would.
                    Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                    Err(e) => errors::report(
                        &CliError::Awf(awf_domain::AwfError::new(
                            awf_domain::ErrorCode::SystemInternal,
                            format!("the command's task stopped: {e}"),
                        )),
                        ctx.json(),
                        ctx.hints,
                        ctx.err_style,
                    ),
                }
            } else {
                rt.block_on(run(&ctx, cli.command))
            };
            rt.shutdown_background();
            // The start-up sweep of the data root ends at its next entry: the exit does not
            // wait for it.
            STARTED_COMMAND_ENDED.store(true, std::sync::atomic::Ordering::Relaxed);
            if let Some(start) = watchdog_start.take() {
                let _ = start.join();
            }
            if watched || is_mcp_serve {
                // The run stopped its processes: the watchdog has nothing left to do.
                watchdog::release();
            }
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
    // What a successful command printed must have reached stdout (full disk).
    let outcome = match outcome {
        Outcome::Success | Outcome::Run(0) if stdout_check::failed() => errors::report(
            &CliError::Awf(
                awf_domain::AwfError::new(
                    awf_domain::ErrorCode::SystemIoWriteFailed,
                    "cannot write the output to stdout",
                )
                .with_hint(
                    "stdout is closed or its disk is full; redirect it to a writable file or pipe",
                ),
            ),
            ctx.json(),
            ctx.hints,
            ctx.err_style,
        ),
        other => other,
    };
    ExitCode::from(errors::exit_code(&outcome))
}

/// Set once the command has ended: the start-up sweep of the data root stops at its next
/// entry ([`awf_store::sweep_leftovers`]).
static STARTED_COMMAND_ENDED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Starts the watchdog process, then sweeps the temp dir and the data root's leftovers of
/// killed runs (lock files no process holds, and the journals of ended runs beside them: see
/// [`awf_store::sweep_leftovers`], bounded), on a thread of their own, announced to the
/// executor first: a step spawned before the watchdog runs waits for it (not for the
/// sweeps). Done inline, without the data root's sweep, when no thread can be started.
fn start_watchdog(storage: Option<std::path::PathBuf>) -> Option<std::thread::JoinHandle<()>> {
    fn start() {
        watchdog::install();
        let _ = tmp_sweep::sweep(&awf_host::OsHost, &std::env::temp_dir());
    }
    awf_domain::watchdog_start::announce();
    match std::thread::Builder::new()
        .name("awf-watchdog-start".into())
        .spawn(move || {
            start();
            if let Some(root) = tmp_sweep::data_root(storage.as_deref()) {
                let _ = awf_store::sweep_leftovers(&root, &|| {
                    STARTED_COMMAND_ENDED.load(std::sync::atomic::Ordering::Relaxed)
                });
            }
        }) {
        Ok(h) => Some(h),
        Err(_) => {
            start();
            None
        }
    }
}

/// `awf --version` / `awf -V` alone: prints what clap prints for them (`awf <version>`, then
/// a newline, on stdout; exit 0 even when stdout is closed, as clap does) without building
/// the command-line parser of every subcommand first (issue 9: `awf --version` within 1.2x
/// `just --version`). Any other argument list: `None`, and clap handles it as before.
fn version_only(args: &[std::ffi::OsString]) -> Option<ExitCode> {
    match args {
        [_, flag] if flag == "--version" || flag == "-V" => {
            let _ = std::io::stdout().write_all(version_line().as_bytes());
            Some(ExitCode::SUCCESS)
        }
        _ => None,
    }
}

/// The line `awf --version` prints: the program name and the package version.
fn version_line() -> String {
    format!("awf {}\n", env!("CARGO_PKG_VERSION"))
}

/// Logging to stderr (`--log-level`, `--log-format`, `--verbose`, `-q`, `AWF_LOG`) and, for
/// `run` and `resume`, OpenTelemetry export (`--otel-exporter`, `OTEL_EXPORTER_OTLP_*`,
/// `telemetry:` in the project configuration).
fn init_telemetry(cli: &Cli) -> Result<awf_telemetry::TelemetryGuard, awf_domain::AwfError> {
    let env = wiring::process_env();
    let level = match cli.log_level.as_deref() {
        Some(l) => awf_telemetry::LogConfig::parse_level(l)?,
        None => awf_telemetry::LogConfig::default().level,
    };
    let mut directives = env.get("AWF_LOG").filter(|v| !v.is_empty()).cloned();
    // A worker of the shared store says which runs it claims, takes over, finishes or
    // fails, and any `awf serve` when it starts draining and when it gives up waiting (info),
    // unless a level is given (`--log-level`, `-q`, `AWF_LOG`).
    if matches!(cli.command, Command::Serve(_))
        && cli.log_level.is_none()
        && !cli.quiet
        && directives.is_none()
    {
        directives = Some("awf_postgres::worker=info,awf::serve=info".to_owned());
    }
    // `-f json` shows nothing of the run while it goes, `--verbose` included (README): the
    // run's diagnostics (`awf::run`) only for an explicit `--log-level debug` (or `AWF_LOG`).
    if cli.format == crate::cli::Format::Json && cli.verbose && cli.log_level.is_none() {
        let quiet_run = format!("{}=info", awf_telemetry::RUN_TARGET);
        directives = Some(match directives {
            Some(d) => format!("{quiet_run},{d}"),
            None => quiet_run,
        });
    }
    let cfg = awf_telemetry::LogConfig {
        level,
        json: cli.log_format == crate::cli::LogFormat::Json,
        verbose: cli.verbose,
        quiet: cli.quiet,
        directives,
    };
    let exports = matches!(cli.command, Command::Run(_) | Command::Resume(_));
    let otel = if exports {
        // A resumed run reads the project configuration of the directory it started in, as
        // the rest of its resume does (trial: the resumer's own was read).
        let run_dir = match &cli.command {
            Command::Resume(r) if !r.list => r.run_id.as_deref().and_then(|q| {
                wiring::recorded_run_dir(cli.storage.as_deref(), cli.store.as_deref(), &env, q)
            }),
            _ => None,
        };
        let telemetry = wiring::project_telemetry(cli.storage.as_deref(), &env, run_dir.as_deref());
        awf_telemetry::OtelConfig::from_sources(
            cli.otel_exporter.as_deref(),
            cli.otel_service_name.as_deref(),
            telemetry.as_ref(),
            &env,
        )
    } else {
        None
    };
    let guard = awf_telemetry::init_logging(&cfg, otel.as_ref())?;
    // Values of `AWF_*` variables awf would otherwise read without a word (trial 73).
    let awf_log = env.get("AWF_LOG").map(String::as_str);
    let awf_record = env.get("AWF_RECORD").map(String::as_str);
    for w in env_warnings(awf_log, awf_record) {
        tracing::warn!("{}", crate::style::printable(&w));
    }
    Ok(guard)
}

/// The warnings about `AWF_LOG` and `AWF_RECORD` values: a bare word of `AWF_LOG` that is
/// no level (`AWF_LOG=garbage` reads as "every level of the target `garbage`", which no awf
/// log has), an `AWF_RECORD` that is neither a yes nor a no word (it records).
fn env_warnings(awf_log: Option<&str>, awf_record: Option<&str>) -> Vec<String> {
    const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
    let mut out = Vec::new();
    for d in awf_log.unwrap_or("").split(',').map(str::trim) {
        let bare = !d.is_empty() && !d.contains(['=', '[', ':']);
        if bare && !LEVELS.iter().any(|l| d.eq_ignore_ascii_case(l)) {
            out.push(format!(
                "AWF_LOG: {d:?} is not a level (trace, debug, info, warn, error, off): it \
                 is read as a log target, which turns on every level of that target alone; \
                 write a level, or TARGET=LEVEL (awf_exec=debug)"
            ));
        }
    }
    if let Some(w) = wiring::recording_warning(awf_record) {
        out.push(w);
    }
    out
}

/// Replaces the default panic message (which prints the panic payload as is) by one that
/// carries no environment value: every value of the process environment with 4+ characters
/// (secret or not, read byte-safely) is masked in the payload. The location stays, so the
/// report is still useful. A panic is a bug; the message says so.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        // Caught by its caller and turned into an error (see the module).
        if awf_domain::quiet_panics::is_quiet() {
            return;
        }
        let payload = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let text = panic_text(&payload, &at, std::env::vars_os().map(|(_, v)| v));
        let _ = std::io::stderr().write_all(text.as_bytes());
    }));
}

/// The crash message for a panic with `payload` at `at`, every environment value in `env`
/// (4+ characters) masked.
fn panic_text(
    payload: &str,
    at: &str,
    env: impl IntoIterator<Item = std::ffi::OsString>,
) -> String {
    let mut masker = awf_domain::mask::Masker::default();
    for v in env {
        masker.add(&v.to_string_lossy());
    }
    // A thread the OS refused (tokio's blocking pool, std's `thread::spawn`): the process
    // limit, not a bug.
    if payload.contains("can't spawn worker thread") || payload.contains("failed to spawn thread") {
        return format!(
            "[SYSTEM.RESOURCE.EXHAUSTED] awf could not start a thread: {}\n  Hint: raise the \
             process limit (`ulimit -u`) or end other processes of this user\n",
            masker.mask(payload)
        );
    }
    format!(
        "[SYSTEM.INTERNAL.UNMAPPED] awf crashed{at}: {}\n  Hint: this is a bug in awf; please \
         report it with the command that triggered it\n",
        masker.mask(payload)
    )
}

/// `USER.INPUT.INVALID_FORMAT` for the first argument that is not UTF-8 (workflow names,
/// paths, `--input` values and every other argument are text). The message shows the
/// argument with invalid bytes as U+FFFD, or only its `NAME=` part when it has one (an
/// `--input` value may be a secret).
fn non_utf8_argument(args: &[std::ffi::OsString]) -> Option<awf_domain::AwfError> {
    let (i, bad) = args
        .iter()
        .enumerate()
        .skip(1)
        .find(|(_, a)| a.to_str().is_none())?;
    let lossy = bad.to_string_lossy();
    let shown = match lossy.split_once('=') {
        Some((name, _)) => format!("{name}=…"),
        None => lossy.into_owned(),
    };
    Some(
        awf_domain::AwfError::new(
            awf_domain::ErrorCode::UserInputInvalidFormat,
            format!("argument {i} is not valid UTF-8: {shown}"),
        )
        .with_detail("argument", i)
        .with_hint(
            "awf reads workflow names, paths and --input values as UTF-8 text: rename the file \
             or pass the value in UTF-8",
        ),
    )
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

/// The subcommand named in the raw arguments: the first one that is not an option or the
/// value of a global option that takes one (looked at when clap could not parse them).
/// A clap usage error (`rendered`, starting `error: `) as text mode shows it: clap's
/// message with the code after `error:` (`error: [USER.INPUT.INVALID_FORMAT] unexpected
/// argument '--bogus' found`), clap's tip and usage lines, then a hint naming the command's
/// `--help` (`awf --help` when the subcommand is the unknown word). `None` for what is no
/// such error (help printed to stderr).
fn usage_error_text(
    rendered: &str,
    kind: clap::error::ErrorKind,
    sub: Option<&str>,
) -> Option<String> {
    let rest = rendered.strip_prefix("error: ")?;
    let command = match sub {
        Some(s) if kind != clap::error::ErrorKind::InvalidSubcommand => format!("awf {s}"),
        _ => "awf".to_owned(),
    };
    let mut out = format!(
        "error: [{}] {}",
        awf_domain::ErrorCode::UserInputInvalidFormat,
        rest
    );
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&format!(
        "  Hint: run `{command} --help` for the accepted flags\n"
    ));
    Some(style::printable_text(&out).into_owned())
}

fn subcommand(args: impl Iterator<Item = String>) -> Option<String> {
    const WITH_VALUE: [&str; 10] = [
        "-f",
        "--format",
        "--storage",
        "--store",
        "--log-level",
        "--log-format",
        "--otel-exporter",
        "--otel-service-name",
        "--config",
        "--",
    ];
    let mut skip = false;
    for a in args {
        if skip {
            skip = false;
            continue;
        }
        if WITH_VALUE.contains(&a.as_str()) {
            skip = true;
        } else if !a.starts_with('-') {
            return Some(a);
        }
    }
    None
}

/// Whether `command` runs to its end without awaiting anything (no process, timer, signal or
/// socket), so that it needs no worker threads or drivers. Anything not named here gets the
/// full runtime.
fn synchronous(command: &Command) -> bool {
    matches!(
        command,
        Command::Validate(_)
            | Command::List(_)
            | Command::Diagram(_)
            | Command::Error(_)
            | Command::Init(_)
            | Command::History(_)
            | Command::Status(_)
            | Command::Cancel(_)
            | Command::Config(_)
    )
}

/// Dispatches one command; failures not yet shown are reported here.
async fn run(ctx: &Ctx, command: Command) -> Outcome {
    let result: Result<Outcome, CliError> = match &command {
        Command::Run(args) => Ok(run_cmd::run(ctx, args).await),
        Command::Validate(args) => Ok(validate_cmd::run(ctx, args)),
        Command::List(args) => list_cmd::run(ctx, args),
        Command::Diagram(args) => diagram::run(ctx, args),
        Command::Error(args) => error_cmd::run(ctx, args),
        Command::Init(args) => init_cmd::run(ctx, args),
        Command::Resume(args) => Ok(runs_cmd::resume(ctx, args).await),
        Command::History(args) => runs_cmd::history(ctx, args),
        Command::Status(args) => runs_cmd::status(ctx, args),
        Command::Cancel(args) => cancel_cmd::run(ctx, args),
        Command::Config(args) => runs_cmd::config(ctx, args),
        Command::McpServe(args) => mcp_cmd::run(ctx, args).await,
        Command::AcpServe(args) => acp_cmd::run(ctx, args).await,
        Command::Serve(args) => serve_cmd::run(ctx, args).await,
        Command::Watchdog => Ok(Outcome::Success),
    };
    match result {
        Ok(o) => o,
        Err(e) => errors::report(&e, ctx.json(), ctx.hints, ctx.err_style),
    }
}

#[cfg(test)]
mod arg_tests {
    #[test]
    fn the_subcommand_is_found_past_global_options_and_their_values() {
        let sub = |a: &[&str]| super::subcommand(a.iter().map(|s| (*s).to_owned()));
        assert_eq!(
            sub(&["-f", "json", "list", "--bogus"]).as_deref(),
            Some("list")
        );
        assert_eq!(
            sub(&["--storage", "/x", "-q", "run", "wf"]).as_deref(),
            Some("run")
        );
        assert_eq!(sub(&["-f", "json"]), None);
    }

    /// `AWF_LOG` bare words that are no level, and unknown `AWF_RECORD` values, are
    /// warned about (breaker: both were ignored without a word); levels, directives and
    /// known words are not.
    #[test]
    fn bad_awf_log_and_awf_record_values_are_warned_about() {
        let w = super::env_warnings;
        assert_eq!(w(None, None), Vec::<String>::new());
        assert_eq!(
            w(Some("DEBUG,awf_exec=trace,[span]=info,off"), Some("0")),
            Vec::<String>::new()
        );
        let got = w(Some("garbage"), Some("maybe"));
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(
            got[0].starts_with("AWF_LOG: \"garbage\" is not a level"),
            "{got:?}"
        );
        assert!(got[1].starts_with("AWF_RECORD=\"maybe\""), "{got:?}");
    }

    /// A usage error in text mode carries the code and a hint, clap's lines kept (trial
    /// 73: only `-f json` had them).
    #[test]
    fn a_usage_error_has_the_code_and_a_hint() {
        use clap::error::ErrorKind;
        let clap_text = "error: unexpected argument '--bogus' found\n\nUsage: awf run [OPTIONS] <WORKFLOW>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            super::usage_error_text(clap_text, ErrorKind::UnknownArgument, Some("run")).as_deref(),
            Some(
                "error: [USER.INPUT.INVALID_FORMAT] unexpected argument '--bogus' found\n\nUsage: awf run [OPTIONS] <WORKFLOW>\n\nFor more information, try '--help'.\n  Hint: run `awf run --help` for the accepted flags\n"
            )
        );
        let unknown = super::usage_error_text(
            "error: unrecognized subcommand 'rnu'",
            ErrorKind::InvalidSubcommand,
            Some("rnu"),
        )
        .unwrap();
        assert!(
            unknown.ends_with("'rnu'\n  Hint: run `awf --help` for the accepted flags\n"),
            "{unknown}"
        );
        assert_eq!(
            super::usage_error_text("Usage: awf", ErrorKind::MissingSubcommand, None),
            None
        );
    }

    #[test]
    fn the_version_line_is_what_clap_prints_for_version() {
        assert_eq!(
            super::version_line(),
            crate::cli::command().render_version()
        );
        let argv = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        assert!(super::version_only(&argv(&["awf", "--version"])).is_some());
        assert!(super::version_only(&argv(&["awf", "-V"])).is_some());
        for other in [
            &["awf"][..],
            &["awf", "-q", "--version"],
            &["awf", "list", "-V"],
        ] {
            assert!(super::version_only(&argv(other)).is_none(), "{other:?}");
        }
    }
}

#[cfg(test)]
mod panic_tests {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn a_panic_message_carries_no_environment_value() {
        let env = [
            OsString::from("plain-value-123"),
            OsString::from_vec(b"raw\xffbytes-here".to_vec()),
            OsString::from("ab"),
        ];
        let text = super::panic_text(
            "called `unwrap()` on \"plain-value-123\" and \"raw\u{FFFD}bytes-here\" ab",
            " at x.rs:1",
            env,
        );
        assert_eq!(
            text.lines().next(),
            Some(
                "[SYSTEM.INTERNAL.UNMAPPED] awf crashed at x.rs:1: called `unwrap()` on \"***\" and \"***\" ab"
            )
        );
    }

    #[test]
    fn a_thread_the_os_refused_is_not_called_a_bug() {
        let text = super::panic_text(
            "OS can't spawn worker thread: Resource temporarily unavailable (os error 11)",
            " at pool.rs:325",
            [],
        );
        assert!(
            text.starts_with("[SYSTEM.RESOURCE.EXHAUSTED] awf could not start a thread: OS can't"),
            "{text}"
        );
        assert!(text.contains("ulimit -u"), "{text}");
        assert!(!text.contains("bug"), "{text}");
    }
}
