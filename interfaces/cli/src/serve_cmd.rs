//! `awf serve`: the HTTP API (awf-http) over the run service of
//! [`crate::wiring::served_run_service`]. First slice: loopback addresses only (no token
//! yet), the routes listed in awf-http's crate docs.

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

/// Parses `--addr` and refuses a non-loopback address (no authentication exists yet).
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` for an address that does not parse or is not loopback.
pub fn parse_addr(text: &str) -> Result<SocketAddr, AwfError> {
    let addr: SocketAddr = text.trim().parse().map_err(|e| {
        AwfError::new(
            ErrorCode::UserInputValidationFailed,
            format!("--addr {text:?} is not an address: {e}"),
        )
        .with_hint("use HOST:PORT, e.g. --addr 127.0.0.1:2511 or --addr [::1]:2511")
    })?;
    if !addr.ip().is_loopback() {
        return Err(AwfError::new(
            ErrorCode::UserInputValidationFailed,
            format!("--addr {addr} is not a loopback address; awf serve has no authentication yet"),
        )
        .with_hint("bind 127.0.0.1 or ::1 and put an authenticating reverse proxy in front"));
    }
    Ok(addr)
}

/// Runs `awf serve`.
pub async fn run(ctx: &Ctx, args: &ServeArgs) -> Result<Outcome, CliError> {
    let addr = parse_addr(&args.addr)?;
    let w = crate::wiring::build_recording(ctx.storage.as_deref())?;
    crate::run_cmd::warn_unrecorded(&w);
    let config = w.config()?;
    let services = w.services.clone();
    let repository = Arc::clone(&services.repository);
    let service = crate::wiring::served_run_service(services);
    let env: Vec<(String, String)> = w.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        AwfError::new(
            ErrorCode::SystemIoPermissionDenied,
            format!("cannot listen on {addr}: {e}"),
        )
        .with_hint("pick another port with --addr 127.0.0.1:PORT (0 = any free port)")
    })?;
    let bound = listener.local_addr().unwrap_or(addr);
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "AWF API server listening on http://{bound}");
        let _ = out.flush();
    }
    let cfg = awf_http::HttpConfig {
        service,
        repository,
        env,
        working_dir: w.cwd.clone(),
        config_inputs: config.inputs,
        drain: Duration::from_millis(5500),
    };
    let shutdown = CancellationToken::new();
    crate::acp_cmd::spawn_signal_watch(shutdown.clone());
    awf_http::serve(cfg, listener, shutdown).await?;
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
        assert!(parse_addr("127.0.0.1:2511").is_ok());
        assert!(parse_addr("[::1]:0").is_ok());
        let e = parse_addr("0.0.0.0:2511").unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
        assert!(parse_addr("localhost").is_err());
    }
}
