//! Installing the subscriber: stderr logs (text or JSON lines) plus, when asked, an
//! OpenTelemetry layer exporting the projection's spans over OTLP (gRPC or HTTP/protobuf).
//!
//! Exports run on a dedicated one-thread Tokio runtime (`awf-otel-io`) owned by the
//! [`TelemetryGuard`]: the SDK's batch processor exports from its own OS thread without a
//! reactor, and a shutdown called from a current-thread runtime must not wait on that same
//! runtime. Source: spec/http-ops.md §2.1, §2.3, §2.5.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::thread::JoinHandle;
use std::time::Duration;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::Protocol;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_otlp::WithHttpConfig as _;
use opentelemetry_otlp::WithTonicConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracer;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tokio::sync::oneshot;
use tracing::Dispatch;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::Registry;
use tracing_subscriber::field::MakeExt as _;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;

use crate::config::LogConfig;
use crate::config::OtelConfig;
use crate::config::OtelProtocol;
use crate::http_client::SpawningReqwestClient;
use crate::projection::TARGET;

/// Time one export request may take.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Time [`TelemetryGuard::shutdown`] waits for the last spans to leave.
pub const SHUTDOWN_BUDGET: Duration = Duration::from_secs(5);

/// Crates whose own logs are capped at `info` whatever the level and directives: below it they
/// log whole requests (rmcp: `received request … CallToolRequestParams …`, tool arguments
/// included), which would put secrets on stderr. Source: README "awf mcp-serve".
const REQUEST_LOGGING_CRATES: &[&str] = &["rmcp"];

/// Crates whose own logs are capped at `warn` (they log per request, and the exporter uses
/// them, so lower levels would be noise or feedback).
const NOISY_CRATES: &[&str] = &[
    "h2",
    "hyper",
    "hyper_util",
    "tonic",
    "tower",
    "reqwest",
    "rustls",
    "opentelemetry",
    "opentelemetry_sdk",
    "opentelemetry_otlp",
    "opentelemetry_http",
];

type BoxedLayer = Box<dyn Layer<Registry> + Send + Sync>;

/// Keeps the exporter alive; flushes and shuts it down on [`shutdown`](Self::shutdown) or,
/// as a backstop, on drop. Without export it holds nothing.
#[derive(Debug, Default)]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
    io: Option<IoRuntime>,
}

impl TelemetryGuard {
    /// Whether spans are being exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports the spans still queued (waiting at most [`SHUTDOWN_BUDGET`]) and stops the
    /// exporter. Blocks the calling thread; safe on a Tokio worker of any runtime flavour.
    /// Export failures are reported on stderr through the log subscriber, never returned.
    pub fn shutdown(mut self) {
        self.finish();
    }

    fn finish(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown_with_timeout(SHUTDOWN_BUDGET)
        {
            tracing::warn!("telemetry: flushing spans failed: {e}");
        }
        if let Some(io) = self.io.take() {
            io.stop();
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The exporter's private runtime: one OS thread driving a current-thread Tokio runtime.
#[derive(Debug)]
struct IoRuntime {
    handle: tokio::runtime::Handle,
    stop: oneshot::Sender<()>,
    thread: JoinHandle<()>,
}

impl IoRuntime {
    fn start() -> std::io::Result<Self> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = rt.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("awf-otel-io".to_owned())
            .spawn(move || {
                rt.block_on(async {
                    let _ = stopped.await;
                });
                rt.shutdown_timeout(Duration::from_secs(1));
            })?;
        Ok(Self {
            handle,
            stop,
            thread,
        })
    }

    fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// Installs the global `tracing` subscriber: logs to STDERR (text, or JSON lines when
/// `cfg.json`), and when `otel` is `Some`, the OpenTelemetry layer exporting the spans of
/// [`crate::SpanProjection`] over OTLP. Call once per process, before the first run, and
/// keep the guard until exit; call [`TelemetryGuard::shutdown`] before exiting. Calling it
/// inside the Tokio runtime is fine but not needed (the exporter owns its own I/O thread).
///
/// When the exporter cannot be built (bad endpoint URL), logging is still installed, a
/// warning is logged and spans are not exported (AWF's "warning + no-op tracer").
///
/// # Errors
/// `USER.INPUT.INVALID_FORMAT` when `cfg.directives` is not valid `EnvFilter` syntax;
/// `SYSTEM.INTERNAL.UNMAPPED` when a global subscriber is already installed.
/// Source: spec/http-ops.md §2.1, §2.3, §2.5.
pub fn init_logging(
    cfg: &LogConfig,
    otel: Option<&OtelConfig>,
) -> Result<TelemetryGuard, AwfError> {
    let (dispatch, guard, warning) = build(cfg, otel)?;
    tracing::dispatcher::set_global_default(dispatch).map_err(|e| {
        AwfError::new(
            ErrorCode::SystemInternal,
            format!("install the log subscriber: {e}"),
        )
    })?;
    if let Some(w) = warning {
        tracing::warn!("{w}");
    }
    Ok(guard)
}

/// Like [`init_logging`] but returns the subscriber instead of installing it globally, for
/// scoped use (`tracing::dispatcher::with_default`), e.g. in tests or an embedding server.
/// When the exporter cannot be built, the warning is logged through the returned dispatch
/// right away and the guard does not export.
///
/// # Errors
/// `USER.INPUT.INVALID_FORMAT` when `cfg.directives` is not valid `EnvFilter` syntax.
pub fn build_dispatch(
    cfg: &LogConfig,
    otel: Option<&OtelConfig>,
) -> Result<(Dispatch, TelemetryGuard), AwfError> {
    let (dispatch, guard, warning) = build(cfg, otel)?;
    if let Some(w) = warning {
        tracing::dispatcher::with_default(&dispatch, || tracing::warn!("{w}"));
    }
    Ok((dispatch, guard))
}

fn build(
    cfg: &LogConfig,
    otel: Option<&OtelConfig>,
) -> Result<(Dispatch, TelemetryGuard, Option<String>), AwfError> {
    let log = log_layer(cfg)?;
    let mut guard = TelemetryGuard::default();
    let mut warning = None;
    let mut tracer = None;
    if let Some(otel) = otel {
        match start_exporter(otel) {
            Ok((provider, io)) => {
                tracer = Some(provider.tracer("awf"));
                guard.provider = Some(provider);
                guard.io = Some(io);
            }
            Err(e) => {
                // The endpoint comes from a flag or a configuration file: control
                // characters in it (or in the error quoting it) never reach the terminal.
                let text = format!(
                    "telemetry: spans will not be exported to {}: {e}",
                    otel.endpoint
                );
                warning = Some(awf_domain::printable::printable(&text).into_owned());
            }
        }
    }
    // Not `Option<Layer>`: a `None` layer answers `Interest::always()` and would make every
    // callsite look enabled, defeating the projection's fast path.
    let base = Registry::default().with(log);
    let dispatch = match tracer {
        Some(tracer) => Dispatch::new(base.with(otel_layer(tracer))),
        None => Dispatch::new(base),
    };
    Ok((dispatch, guard, warning))
}

/// The stderr log layer with its level filter. The projection's spans never reach it.
fn log_layer(cfg: &LogConfig) -> Result<BoxedLayer, AwfError> {
    let level = cfg.effective_level();
    let mut directives = level_name(level).to_owned();
    for c in NOISY_CRATES {
        let _ = write!(
            directives,
            ",{c}={}",
            level_name(level.min(LevelFilter::WARN))
        );
    }
    if let Some(extra) = cfg
        .directives
        .as_deref()
        .map(str::trim)
        .filter(|d| !d.is_empty())
    {
        directives.push(',');
        directives.push_str(extra);
    }
    // Last, so no `--log-level` nor directive lifts them: crates that log requests whole
    // (rmcp logs every JSON-RPC request, tool arguments and secrets included, at debug).
    for c in REQUEST_LOGGING_CRATES {
        let _ = write!(
            directives,
            ",{c}={}",
            level_name(level.min(LevelFilter::INFO))
        );
    }
    let _ = write!(directives, ",{TARGET}=off");
    let filter = EnvFilter::builder().parse(&directives).map_err(|e| {
        AwfError::new(
            ErrorCode::UserInputInvalidFormat,
            format!(
                "invalid log filter '{}': {e}",
                cfg.directives.as_deref().unwrap_or("")
            ),
        )
        .with_hint("Use tracing directives such as `info` or `awf_exec=debug,warn`.")
    })?;
    let layer: BoxedLayer = if cfg.json {
        Box::new(
            tracing_subscriber::fmt::layer()
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .with_span_list(false)
                .with_writer(std::io::stderr)
                .with_filter(filter),
        )
    } else {
        Box::new(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(std::io::stderr)
                .fmt_fields(masking_fields())
                .with_filter(filter),
        )
    };
    Ok(layer)
}

/// Text field formatter that prints `***` for fields with secret names (safety net; values
/// reaching the log are normally masked already). Source: spec/http-ops.md §2.4.
fn masking_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + Send + Sync + 'static
{
    tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let name = field.name();
        if name == "message" {
            write!(w, "{value:?}")
        } else if awf_domain::mask::is_secret_name(name) {
            write!(w, "{name}={}", awf_domain::mask::MASK)
        } else {
            write!(w, "{name}={value:?}")
        }
    })
    .delimited(" ")
}

fn level_name(level: LevelFilter) -> &'static str {
    match level {
        LevelFilter::OFF => "off",
        LevelFilter::ERROR => "error",
        LevelFilter::WARN => "warn",
        LevelFilter::INFO => "info",
        LevelFilter::DEBUG => "debug",
        _ => "trace",
    }
}

/// The OpenTelemetry layer, restricted to the projection's spans (other crates' spans and
/// the exporter's own HTTP/gRPC spans are not exported).
pub(crate) fn otel_layer<S>(tracer: SdkTracer) -> impl Layer<S> + Send + Sync
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a> + Send + Sync,
{
    let filter = Targets::new()
        .with_default(LevelFilter::OFF)
        .with_target(TARGET, LevelFilter::TRACE);
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_tracked_inactivity(false)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_filter(filter)
}

fn start_exporter(cfg: &OtelConfig) -> Result<(SdkTracerProvider, IoRuntime), String> {
    let io = IoRuntime::start().map_err(|e| format!("start the exporter thread: {e}"))?;
    let exporter = match build_exporter(cfg, &io.handle) {
        Ok(x) => x,
        Err(e) => {
            io.stop();
            return Err(e);
        }
    };
    let resource = Resource::builder()
        .with_service_name(cfg.service_name.clone())
        .build();
    let provider = SdkTracerProvider::builder()
        .with_resource(resource)
        .with_batch_exporter(exporter)
        .build();
    Ok((provider, io))
}

fn build_exporter(
    cfg: &OtelConfig,
    io: &tokio::runtime::Handle,
) -> Result<opentelemetry_otlp::SpanExporter, String> {
    match cfg.protocol {
        OtelProtocol::Grpc => {
            // The channel's worker task is spawned on the runtime entered here.
            let _entered = io.enter();
            let mut builder = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(cfg.endpoint.clone())
                .with_timeout(EXPORT_TIMEOUT);
            if cfg.endpoint.starts_with("https://") {
                builder = builder
                    .with_tls_config(tonic::transport::ClientTlsConfig::new().with_webpki_roots());
            }
            if !cfg.headers.is_empty() {
                builder = builder.with_metadata(metadata(&cfg.headers)?);
            }
            builder.build().map_err(|e| e.to_string())
        }
        OtelProtocol::HttpProtobuf => {
            let client = SpawningReqwestClient::new(io.clone(), EXPORT_TIMEOUT)
                .map_err(|e| format!("build the HTTP client: {e}"))?;
            let headers: HashMap<String, String> = cfg.headers.iter().cloned().collect();
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(cfg.endpoint.clone())
                .with_timeout(EXPORT_TIMEOUT)
                .with_http_client(client)
                .with_headers(headers)
                .build()
                .map_err(|e| e.to_string())
        }
    }
}

fn metadata(headers: &[(String, String)]) -> Result<tonic::metadata::MetadataMap, String> {
    let mut map = tonic::metadata::MetadataMap::new();
    for (k, v) in headers {
        let key = tonic::metadata::AsciiMetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
            .map_err(|_| format!("invalid header name '{k}'"))?;
        let value = tonic::metadata::AsciiMetadataValue::try_from(v.as_str())
            .map_err(|_| format!("invalid value for header '{k}'"))?;
        map.insert(key, value);
    }
    Ok(map)
}
