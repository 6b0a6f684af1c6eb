//! awf-telemetry: the observability adapter.
//!
//! - [`init_logging`] installs the global `tracing` subscriber: logs on STDERR only (text or
//!   JSON lines) and, when an [`OtelConfig`] is given, an OpenTelemetry layer exporting over
//!   OTLP (gRPC via tonic, or HTTP/protobuf via the workspace's reqwest).
//! - [`OtelConfig::from_sources`] resolves export settings from flags, `.awf/config.yaml`
//!   `telemetry:` and the standard `OTEL_*` variables.
//! - [`span_projection`] is an [`awf_domain::event::EventPublisher`] turning the run-event stream
//!   into `workflow.run` / `workflow.step` / `workflow.loop.iteration` spans.
//! - [`log_projection`] is another, turning it into the `debug` diagnostics of `--verbose`
//!   and `--log-level debug` (target [`RUN_TARGET`]) on stderr.
//!
//! Depends on awf-domain and third-party crates only (tracing, tracing-subscriber,
//! tracing-opentelemetry, opentelemetry, opentelemetry_sdk, opentelemetry-otlp, tonic,
//! reqwest, tokio). OpenTelemetry is used nowhere else in the workspace.
//! Source: spec/http-ops.md §2.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod config;
mod http_client;
mod init;
mod projection;
mod run_log;

pub use config::DEFAULT_SERVICE_NAME;
pub use config::HTTP_TRACES_PATH;
pub use config::LogConfig;
pub use config::OtelConfig;
pub use config::OtelProtocol;
pub use config::parse_headers;
pub use init::EXPORT_TIMEOUT;
pub use init::SHUTDOWN_BUDGET;
pub use init::TelemetryGuard;
pub use init::build_dispatch;
pub use init::init_logging;
pub use projection::SpanProjection;
pub use projection::TARGET;
pub use projection::span_projection;
pub use run_log::LogProjection;
pub use run_log::RUN_TARGET;
pub use run_log::log_projection;
pub use tracing::level_filters::LevelFilter;
