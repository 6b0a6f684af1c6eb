//! `awf serve`: the HTTP API (awf-http) over a run service with `--max-runs` and `--run-ttl`;
//! the routes are listed in awf-http's crate docs; loopback addresses unless a bearer token
//! is configured (`--token-env NAME`, withheld from the runs).

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use tokio_util::sync::CancellationToken;

use crate::cli::ServeArgs;
use crate::ctx::Ctx;
use crate::errors::CliError;
use crate::errors::Outcome;

/// Parses `--addr` and refuses a non-loopback address unless requests need a token.
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` for an address that does not parse, or is not loopback
/// while `with_token` is false.
pub fn parse_addr(text: &str, with_token: bool) -> Result<SocketAddr, AwfError> {
    let t = text.trim();
    let addr: SocketAddr = match t.parse() {
        Ok(a) => a,
        // `localhost:PORT` (a name): resolved, the loopback answer first.
        Err(e) => resolve_name(t).map_err(|why| {
            // New user: `nohost:1` was "invalid socket address syntax"; its syntax is fine.
            let why = why.unwrap_or_else(|| e.to_string());
            AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!("--addr {text:?} is not an address: {why}"),
            )
            .with_hint(
                "use HOST:PORT, e.g. --addr 127.0.0.1:2511, --addr localhost:2511 or --addr [::1]:2511",
            )
        })?,
    };
    if !addr.ip().is_loopback() && !with_token {
        return Err(AwfError::new(
            ErrorCode::UserInputValidationFailed,
            format!("--addr {addr} is not a loopback address and no token is required"),
        )
        .with_hint(
            "set a token in a variable and name it: AWF_API_TOKEN=… awf serve --token-env AWF_API_TOKEN",
        ));
    }
    Ok(addr)
}

/// Resolves `NAME:PORT` (e.g. `localhost:0`) to one address, a loopback one when the name
/// has any (IPv4 first).
///
/// # Errors
/// `Err(None)` when the text is not `NAME:PORT`; `Err(Some(why))` when it is but the name
/// does not resolve.
fn resolve_name(text: &str) -> Result<SocketAddr, Option<String>> {
    use std::net::ToSocketAddrs;
    let (host, port) = text.rsplit_once(':').ok_or(None)?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(None);
    }
    let unresolved = |e: String| Some(format!("the host name {host:?} does not resolve ({e})"));
    let all: Vec<SocketAddr> = text
        .to_socket_addrs()
        .map_err(|e| unresolved(e.to_string()))?
        .collect();
    all.iter()
        .find(|a| a.ip().is_loopback() && a.is_ipv4())
        .or_else(|| all.iter().find(|a| a.ip().is_loopback()))
        .or_else(|| all.first())
        .copied()
        .ok_or_else(|| unresolved("no address".to_owned()))
}

/// The error for a listener that could not be bound: `SYSTEM.NET.ADDRESS_IN_USE` when
/// another process listens there, `SYSTEM.IO.PERMISSION_DENIED` when the OS refused (a
/// port under 1024), else `SYSTEM.IO.WRITE_FAILED`; each with a hint.
pub fn bind_error(addr: SocketAddr, e: &std::io::Error) -> AwfError {
    let hint = "pick another port with --addr 127.0.0.1:PORT (0 = any free port)";
    match e.kind() {
        std::io::ErrorKind::AddrInUse => AwfError::new(
            ErrorCode::SystemNetAddressInUse,
            format!("cannot listen on {addr}: another process already listens there"),
        )
        .with_hint(format!("{hint}, or stop the other server")),
        std::io::ErrorKind::PermissionDenied => AwfError::new(
            ErrorCode::SystemIoPermissionDenied,
            format!("cannot listen on {addr}: {e}"),
        )
        .with_hint(format!("{hint}; ports under 1024 need privileges")),
        _ => AwfError::new(
            ErrorCode::SystemIoWriteFailed,
            format!("cannot listen on {addr}: {e}"),
        )
        .with_hint(hint),
    }
}

/// The token `--token-env NAME` names.
///
/// A client sends it as `Authorization: Bearer <token>`, so it must be a word a header can
/// carry whole: visible ASCII (`!` to `~`), no space, tab, line break, control or non-ASCII
/// character (RFC 6750's `b64token` is a subset). A token with one could never match
/// (breaker: a blank token started a server that answered every request 401).
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` when the variable is unset, empty or blank, or holds a
/// character a client cannot send.
pub fn token_of(
    name: &str,
    env: &std::collections::BTreeMap<String, String>,
) -> Result<String, AwfError> {
    let refuse = |why: String| {
        AwfError::new(
            ErrorCode::UserInputValidationFailed,
            format!("--token-env {name}: {why}"),
        )
        .with_hint(format!(
            "set a long random token of letters, digits and -._~+/=: `export {name}=$(openssl rand -hex 32)`"
        ))
    };
    let token = match env.get(name) {
        Some(v) if !v.is_empty() => v,
        _ => return Err(refuse("the variable is not set or empty".to_owned())),
    };
    if token.trim().is_empty() {
        return Err(refuse("the variable holds only white space".to_owned()));
    }
    if let Some((at, c)) = token
        .chars()
        .enumerate()
        .find(|(_, c)| !c.is_ascii_graphic())
    {
        let what = match c {
            ' ' => "a space".to_owned(),
            '\t' => "a tab".to_owned(),
            '\n' | '\r' => "a line break".to_owned(),
            c if c.is_control() => format!("a control character (U+{:04X})", u32::from(c)),
            c => format!("a non-ASCII character (U+{:04X})", u32::from(c)),
        };
        return Err(refuse(format!(
            "the token holds {what} at character {}: a client cannot send it in an `Authorization: Bearer` header",
            at + 1
        )));
    }
    Ok(token.clone())
}

/// A duration flag (`15m`, `30s`, `500ms`, bare seconds).
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` naming the flag.
pub fn duration_flag(flag: &str, text: &str) -> Result<Duration, AwfError> {
    awf_domain::duration::parse_duration(text).map_err(|e| {
        AwfError::new(
            ErrorCode::UserInputValidationFailed,
            format!("{flag} {text:?} is not a duration: {e}"),
        )
        .with_hint(format!("e.g. {flag} 15m, {flag} 30s, {flag} 500ms"))
    })
}

/// `--keep-alive`: the heartbeat interval of event streams, a duration over zero.
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` for a text that is not a duration, or zero.
pub fn keep_alive_flag(text: &str) -> Result<Duration, AwfError> {
    positive_duration_flag("--keep-alive", text)
}

/// A duration flag that must be more than zero (`--keep-alive`, `--header-timeout`).
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` naming the flag, for a text that is not a duration, or zero.
pub fn positive_duration_flag(flag: &str, text: &str) -> Result<Duration, AwfError> {
    let d = duration_flag(flag, text)?;
    if d.is_zero() {
        return Err(AwfError::new(
            ErrorCode::UserInputValidationFailed,
            format!("{flag} must be more than zero"),
        )
        .with_hint(format!("e.g. {flag} 15s, {flag} 500ms")));
    }
    Ok(d)
}

/// `--lease`: how long a claim lasts without its heartbeat, from 300 ms to 24 h.
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` for a text that is not a duration, or one under 300 ms
/// or over 24 h.
pub fn lease_flag(text: &str) -> Result<Duration, AwfError> {
    let d = duration_flag("--lease", text)?;
    if d < Duration::from_millis(300) {
        return Err(AwfError::new(
            ErrorCode::UserInputValidationFailed,
            format!("--lease {text:?} is too short (under 300ms)"),
        )
        .with_hint("e.g. --lease 15s (the default), --lease 3s"));
    }
    if d > MAX_LEASE {
        return Err(AwfError::new(
            ErrorCode::UserInputValidationFailed,
            format!("--lease {text:?} is too long (over 24h)"),
        )
        .with_hint(
            "a lease is how long a dead worker's runs wait for another worker: \
             e.g. --lease 15s (the default), --lease 5m",
        ));
    }
    Ok(d)
}

/// The line `awf serve --store` prints under the address: it is a worker of the shared
/// store's queue, with its worker id (as `awf_runs.worker_id` and its log lines name it), the
/// store (its password masked), `--max-runs` and `--lease`.
pub fn worker_line(worker_id: &str, url: &str, max_runs: usize, lease: Duration) -> String {
    format!(
        "Queue worker {worker_id} of the shared store {}: claims queued runs \
         (--max-runs {max_runs}, --lease {})",
        awf_postgres::redacted(url),
        duration_text(lease)
    )
}

/// `15s`, `1500ms`, `5m`: a duration as the flags take it.
fn duration_text(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(60_000) && ms > 0 {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// The shortest token `awf serve` takes on an address other hosts reach.
pub const MIN_PUBLIC_TOKEN_CHARS: usize = 16;

/// A token shorter than [`MIN_PUBLIC_TOKEN_CHARS`]: refused on an address other hosts reach
/// (it can be guessed), `Ok(Some(warning))` on a loopback one, `Ok(None)` when long enough.
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` for a short token on a non-loopback address.
pub fn short_token(name: &str, token: &str, addr: SocketAddr) -> Result<Option<String>, AwfError> {
    let n = token.chars().count();
    if n >= MIN_PUBLIC_TOKEN_CHARS {
        return Ok(None);
    }
    let what = format!(
        "--token-env {name}: the token has {n} character{}, fewer than {MIN_PUBLIC_TOKEN_CHARS}",
        if n == 1 { "" } else { "s" }
    );
    let hint = format!("set a long random token: `export {name}=$(openssl rand -hex 32)`");
    if addr.ip().is_loopback() {
        return Ok(Some(format!(
            "{what}; it is taken on the loopback address {addr}, but could be guessed ({hint})"
        )));
    }
    Err(AwfError::new(
        ErrorCode::UserInputValidationFailed,
        format!("{what}: too easy to guess on {addr}, an address other hosts reach"),
    )
    .with_hint(hint))
}

/// The longest `--lease`: a day (the lease is added to timestamps and turned into
/// PostgreSQL intervals; a longer one would only keep a dead worker's runs stuck).
const MAX_LEASE: Duration = Duration::from_secs(24 * 3600);

/// Runs `awf serve`.
pub async fn run(ctx: &Ctx, args: &ServeArgs) -> Result<Outcome, CliError> {
    let env_now = crate::wiring::process_env();
    let token = match &args.token_env {
        // Handed over by the image that started this one without the variable.
        Some(name) => Some(match crate::serve_token::handed() {
            Some(t) => token_of(
                name,
                &std::collections::BTreeMap::from([(name.clone(), t.to_owned())]),
            )?,
            None => token_of(name, &env_now)?,
        }),
        None => None,
    };
    let addr = parse_addr(&args.addr, token.is_some())?;
    if let (Some(name), Some(t)) = (&args.token_env, &token)
        && let Some(why) = short_token(name, t, addr)?
        && !ctx.quiet
    {
        let _ = writeln!(
            std::io::stderr().lock(),
            "{} {why}",
            ctx.err_style.yellow("WARN")
        );
    }
    let run_ttl = duration_flag("--run-ttl", &args.run_ttl)?;
    let drain_timeout = duration_flag("--drain-timeout", &args.drain_timeout)?;
    let keep_alive = keep_alive_flag(&args.keep_alive)?;
    let header_timeout = positive_duration_flag("--header-timeout", &args.header_timeout)?;
    let cors_origins = args
        .cors_origins
        .iter()
        .map(|o| awf_http::parse_origin(o))
        .collect::<Result<Vec<_>, _>>()?;
    // The token reaches no step: not in the runs' environment, and no child inherits it.
    if let Some(name) = &args.token_env {
        awf_domain::withheld::withhold_env([name.clone(), crate::serve_token::FD_VAR.to_owned()]);
    }
    // Should a step find it anyway, it is `***` in everything a run records and shows.
    if let Some(t) = &token {
        awf_domain::withheld::mask_value(t.clone());
    }
    let mut w =
        crate::wiring::build_recording_stored(ctx.storage.as_deref(), ctx.store.as_deref())?;
    w.name_lock_owner("awf serve");
    if w.store_url.is_none() && args.lease.is_some() {
        // A lease is a worker's claim on a queued run: without a shared store there is no
        // queue, and accepting it silently would hide a forgotten `--store`.
        return Err(AwfError::new(
            ErrorCode::UserInputValidationFailed,
            "--lease applies to workers of a shared store, and none is named",
        )
        .with_hint(
            "add --store postgresql://USER@HOST:PORT/DB (or export AWF_STORE=…), or drop --lease",
        )
        .into());
    }
    if w.store_url.is_some() {
        // A worker: every privilege it uses, before it registers.
        w.check_worker_writable()?;
    } else {
        w.check_store_writable()?;
    }
    crate::run_cmd::warn_unrecorded(&w);
    let config = w.config()?;
    let services = w.services.clone();
    let repository = Arc::clone(&services.repository);
    let validator: awf_http::Validator = {
        let services = w.services.clone();
        let env = w.env.clone();
        Arc::new(move |id: &str| {
            awf_application::validate_workflow(&services, id, &env).map(|r| r.diagnostics)
        })
    };
    let history = w.history_store().ok();
    let states = w.services.state_store.clone();
    let ids = Arc::clone(&services.ids);
    let max_runs = usize::try_from(args.max_runs).unwrap_or(usize::MAX);
    let lease = lease_flag(args.lease.as_deref().unwrap_or("15s"))?;
    let mut service = crate::wiring::http_run_service(services, max_runs, run_ttl);
    let env: Vec<(String, String)> = w
        .env
        .iter()
        .filter(|(k, _)| args.token_env.as_deref() != Some(k.as_str()))
        .filter(|(k, _)| k.as_str() != crate::serve_token::FD_VAR)
        .filter(|(k, _)| w.store_url.is_none() || k.as_str() != "AWF_STORE")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| bind_error(addr, &e))?;
    let bound = listener.local_addr().unwrap_or(addr);
    // With the shared store: a worker of its queue, and the run service across workers.
    let worker = match w.store_url.clone() {
        Some(url) => {
            let store = match w.pg.get() {
                Some(pg) => pg.clone(),
                None => crate::wiring::open_shared(&url)?,
            };
            let recorder = match &w.recorder {
                Some(crate::wiring::RunRecorder::Postgres(r)) => Some(r.clone()),
                _ => None,
            };
            if let Some(r) = &recorder {
                // Another worker claimed one of its runs: stop it here at once.
                let local = Arc::clone(&service);
                r.on_fenced(Arc::new(move |id: &str| {
                    let _ = local.cancel(
                        &awf_domain::run::RunId(id.to_owned()),
                        awf_domain::run::CancelReason::Terminate,
                    );
                }));
            }
            let notices = awf_postgres::listen::Listener::start(&store, &url)?;
            let worker = awf_postgres::worker::Worker::new(
                store.clone(),
                Arc::clone(&service),
                states.clone(),
                notices.clone(),
                awf_postgres::worker::WorkerConfig {
                    worker_id: awf_postgres::worker::worker_id(),
                    max_runs,
                    lease,
                    poll: (lease / 3).clamp(Duration::from_millis(100), Duration::from_secs(2)),
                    env: env.clone(),
                    addr: Some(bound.to_string()),
                    recorder,
                },
            );
            worker.spawn().await?;
            // A run POSTed here is checked as the embedded server's start checks it (the
            // same errors, so the same HTTP answers) and queued by its file's absolute path,
            // so that a worker with another search path runs the file found here.
            let check: awf_postgres::service::StartCheck = {
                let services = w.services.clone();
                let cwd = w.cwd.clone();
                Arc::new(move |mut request| {
                    // A queued run cannot ask for what it lacks (its worker has no pending
                    // request for it that another worker could answer): a missing required
                    // input is refused here, as without `ask_missing_inputs`, queuing nothing.
                    let asked = std::mem::take(&mut request.prompt_missing_inputs);
                    let loaded = awf_application::facade::check_start(&services, &request)
                        .map_err(|e| {
                            if asked && e.code() == ErrorCode::UserInputValidationFailed {
                                e.with_hint(
                                    "a worker of a shared store (`awf serve --store`) does not \
                                     ask for missing inputs: give them in the body's `inputs`",
                                )
                            } else {
                                e
                            }
                        })?;
                    if let Some(file) = &loaded.source_map.file {
                        request.identifier = cwd.join(file).display().to_string();
                    }
                    Ok((request, Some(loaded.workflow.name)))
                })
            };
            service = Arc::new(
                awf_postgres::service::PgRunService::new(store, Arc::clone(&service), ids, notices)
                    .with_start_check(check),
            );
            Some(worker)
        }
        None => None,
    };
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "AWF API server listening on http://{bound}");
        let _ = writeln!(out, "Swagger UI: http://{bound}/docs/");
        // A worker says so: it also runs what others queue, not only what it is sent.
        if let (Some(worker), Some(url)) = (&worker, &w.store_url) {
            let c = worker.config();
            let _ = writeln!(
                out,
                "{}",
                worker_line(&c.worker_id, url, c.max_runs, c.lease)
            );
        }
        let _ = out.flush();
    }
    let cfg = awf_http::HttpConfig {
        service,
        repository,
        validator,
        history,
        states,
        shared_store: worker.is_some(),
        env,
        working_dir: w.cwd.clone(),
        config_inputs: config.inputs,
        token,
        cors_origins,
        drain_timeout,
        keep_alive,
        header_timeout,
        draining: Arc::default(),
        started: Arc::default(),
        frames: Arc::default(),
        // Runs recorded as running whose awf process is gone, as `awf history` tells them
        // (on a worker of the shared store too: a terminal `awf run --store` killed is no
        // worker's run for the queue to hand on; a live worker holds its runs' locks).
        process_gone: Some({
            let states = w.services.state_store.clone();
            let locks = w.services.run_locks.clone();
            let host = Arc::clone(&w.services.host);
            let gone: awf_http::GoneRuns = Arc::new(move |rows| {
                awf_application::runs::gone_runs(
                    rows,
                    states.as_deref(),
                    locks.as_deref(),
                    host.as_ref(),
                    std::time::SystemTime::now(),
                )
            });
            gone
        }),
        resuming: Arc::default(),
        // The drain's log counts the runs the worker claimed too (one number per worker).
        also_held: worker
            .clone()
            .map(|worker| -> awf_http::HeldRuns { Arc::new(move || worker.held_runs()) }),
    };
    let shutdown = CancellationToken::new();
    crate::acp_cmd::spawn_signal_watch(shutdown.clone());
    // Parked runs go on by themselves at their reset time (crate::serve_resume); with the
    // shared store the queue's workers resume runs instead, so it runs only on the embedded one.
    let resumer = if worker.is_none() {
        crate::serve_resume::spawn(
            Arc::clone(&cfg.service),
            cfg.states.clone(),
            crate::serve_resume::ResumeContext {
                config_inputs: cfg.config_inputs.clone(),
                env: cfg.env.clone(),
                working_dir: cfg.working_dir.clone(),
            },
            shutdown.clone(),
        )
    } else {
        None
    };
    if let Some(worker) = &worker {
        // SIGTERM: claim nothing more; what it holds drains with the server.
        let (worker, stop) = (Arc::clone(worker), shutdown.clone());
        tokio::spawn(async move {
            stop.cancelled().await;
            worker.stop_claiming();
        });
    }
    // The runs this worker claimed (not only those started over its HTTP API): they get the
    // drain deadline, then are cancelled and recorded so; unstarted claims go back. The
    // server keeps answering meanwhile (new runs 503, events and GETs as usual).
    let worker_drain = {
        let worker = worker.clone();
        async move {
            if let Some(worker) = worker {
                worker.drain(drain_timeout, Duration::from_secs(8)).await;
            }
        }
    };
    awf_http::serve(cfg, listener, shutdown, worker_drain).await?;
    if let Some(r) = resumer {
        r.abort();
    }
    awf_exec::kill_all_now();
    awf_exec::sweep_adopted().await;
    if let Some(r) = &w.recorder {
        r.flush();
    }
    Ok(Outcome::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_addresses_are_accepted() {
        assert!(parse_addr("127.0.0.1:2511", false).is_ok());
        assert!(parse_addr("[::1]:0", false).is_ok());
        let e = parse_addr("0.0.0.0:2511", false).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
        assert!(parse_addr("0.0.0.0:2511", true).is_ok());
        assert!(parse_addr("localhost", true).is_err());
        let local = parse_addr("localhost:0", false).unwrap();
        assert!(local.ip().is_loopback(), "{local}");
        assert_eq!(local.port(), 0);
        let e = parse_addr("no-such-host.invalid:80", true).unwrap_err();
        assert!(
            e.message()
                .contains("the host name \"no-such-host.invalid\" does not resolve"),
            "{}",
            e.message()
        );
        let e = parse_addr("127.0.0.1:http", true).unwrap_err();
        assert!(!e.message().contains("resolve"), "{}", e.message());
    }

    #[test]
    fn an_address_in_use_has_its_own_code() {
        let addr: SocketAddr = "127.0.0.1:2511".parse().unwrap();
        let e = bind_error(addr, &std::io::Error::from(std::io::ErrorKind::AddrInUse));
        assert_eq!(e.code(), ErrorCode::SystemNetAddressInUse);
        assert!(!e.hints().is_empty());
    }

    #[test]
    fn durations_parse_or_name_the_flag() {
        assert_eq!(
            duration_flag("--run-ttl", "15m").unwrap(),
            Duration::from_secs(900)
        );
        let e = duration_flag("--run-ttl", "soon").unwrap_err();
        assert!(e.message().contains("--run-ttl"), "{}", e.message());
    }

    #[test]
    fn the_keep_alive_interval_is_a_duration_over_zero() {
        assert_eq!(keep_alive_flag("15s").unwrap(), Duration::from_secs(15));
        assert_eq!(
            keep_alive_flag("300ms").unwrap(),
            Duration::from_millis(300)
        );
        for bad in ["0", "0s", "soon", ""] {
            let e = keep_alive_flag(bad).unwrap_err();
            assert_eq!(e.code(), ErrorCode::UserInputValidationFailed, "{bad}");
            assert!(e.message().contains("--keep-alive"), "{}", e.message());
        }
        let e = positive_duration_flag("--header-timeout", "0ms").unwrap_err();
        assert!(e.message().contains("--header-timeout"), "{}", e.message());
        assert_eq!(
            positive_duration_flag("--header-timeout", "2s").unwrap(),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn a_lease_is_a_duration_of_at_least_300ms() {
        assert_eq!(lease_flag("15s").unwrap(), Duration::from_secs(15));
        assert_eq!(lease_flag("24h").unwrap(), Duration::from_secs(86_400));
        for bad in ["0", "100ms", "soon", "99999999999999s", "25h"] {
            let e = lease_flag(bad).unwrap_err();
            assert!(!e.hints().is_empty(), "{bad}");
            assert_eq!(e.code(), ErrorCode::UserInputValidationFailed, "{bad}");
            assert!(e.message().contains("--lease"), "{}", e.message());
        }
    }

    #[test]
    fn the_worker_line_names_its_id_limits_and_a_masked_store() {
        let line = worker_line(
            "h:42:abcd1234",
            "postgresql://u:s3cret@db:5432/awf",
            4,
            Duration::from_millis(1500),
        );
        assert_eq!(
            line,
            "Queue worker h:42:abcd1234 of the shared store postgresql://u:***@db:5432/awf: \
             claims queued runs (--max-runs 4, --lease 1500ms)"
        );
        assert_eq!(duration_text(Duration::from_secs(15)), "15s");
        assert_eq!(duration_text(Duration::from_secs(300)), "5m");
    }

    #[test]
    fn the_token_variable_must_hold_a_value() {
        let mut env = std::collections::BTreeMap::new();
        assert!(token_of("T", &env).is_err());
        env.insert("T".to_owned(), String::new());
        assert!(token_of("T", &env).is_err());
        env.insert("T".to_owned(), "s3cret".to_owned());
        assert_eq!(token_of("T", &env).unwrap(), "s3cret");
    }

    /// Breaker: a blank token, or one with a line break or a control character, started a
    /// server no client could use (every request 401): refused like an empty one.
    #[test]
    fn a_token_a_client_cannot_send_is_refused() {
        let refused = |token: &str| {
            let env = std::collections::BTreeMap::from([("T".to_owned(), token.to_owned())]);
            let e = token_of("T", &env).unwrap_err();
            assert_eq!(e.code(), ErrorCode::UserInputValidationFailed, "{token:?}");
            e.message().to_owned()
        };
        assert_eq!(
            refused(" "),
            "--token-env T: the variable holds only white space"
        );
        assert_eq!(
            refused("abc\n"),
            "--token-env T: the token holds a line break at character 4: a client cannot send it in an `Authorization: Bearer` header"
        );
        assert_eq!(
            refused(" abc"),
            "--token-env T: the token holds a space at character 1: a client cannot send it in an `Authorization: Bearer` header"
        );
        assert_eq!(
            refused("a\u{1}b"),
            "--token-env T: the token holds a control character (U+0001) at character 2: a client cannot send it in an `Authorization: Bearer` header"
        );
        assert_eq!(
            refused("pässword"),
            "--token-env T: the token holds a non-ASCII character (U+00E4) at character 2: a client cannot send it in an `Authorization: Bearer` header"
        );
        let env = std::collections::BTreeMap::from([(
            "T".to_owned(),
            "a-Z_0.9~+/=!#$%&'*^`|".to_owned(),
        )]);
        assert_eq!(token_of("T", &env).unwrap(), "a-Z_0.9~+/=!#$%&'*^`|");
    }
}
