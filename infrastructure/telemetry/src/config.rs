//! What to log and where to export spans: [`LogConfig`] (stderr logs) and [`OtelConfig`]
//! (OTLP export), resolved from flags, `.awf/config.yaml` and the standard `OTEL_*` variables.
//!
//! Source: spec/http-ops.md §2.1 and §2.3; spec/workflow.md §3.13 (`telemetry:` keys).

use std::collections::BTreeMap;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use serde_json::Value;
use tracing::level_filters::LevelFilter;

/// Service name used when no flag, config key or `OTEL_SERVICE_NAME` gives one.
pub const DEFAULT_SERVICE_NAME: &str = "awf";

/// Path appended to an OTLP/HTTP base endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT` semantics).
pub const HTTP_TRACES_PATH: &str = "/v1/traces";

/// How logs are written. Logs always go to STDERR, never stdout.
///
/// The effective level is: `quiet` → `error`; else `verbose` → at least `debug`; else `level`.
/// `directives` (e.g. from `AWF_LOG`) are `tracing-subscriber` `EnvFilter` directives
/// (`awf_exec=trace,info`) applied after the level.
/// Source: spec/http-ops.md §2.3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Base level: `error`, `warn`, `info`, `debug`, `trace` (or `off`).
    pub level: LevelFilter,
    /// JSON lines (`--log-format json`) instead of text lines.
    pub json: bool,
    /// `--verbose`: raise the level to at least `debug`.
    pub verbose: bool,
    /// `--quiet`: only errors.
    pub quiet: bool,
    /// Extra `EnvFilter` directives, e.g. the value of `AWF_LOG`; `None` = none.
    pub directives: Option<String>,
}

impl Default for LogConfig {
    /// `warn`, text, neither verbose nor quiet, no extra directives.
    fn default() -> Self {
        Self {
            level: LevelFilter::WARN,
            json: false,
            verbose: false,
            quiet: false,
            directives: None,
        }
    }
}

impl LogConfig {
    /// Parses a `--log-level` value: `error`, `warn`, `info`, `debug`, `trace` or `off`
    /// (case-insensitive; `warning` is accepted for `warn`).
    ///
    /// # Errors
    /// `USER.INPUT.INVALID_FORMAT` for any other text.
    pub fn parse_level(text: &str) -> Result<LevelFilter, AwfError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "error" => Ok(LevelFilter::ERROR),
            "warn" | "warning" => Ok(LevelFilter::WARN),
            "info" => Ok(LevelFilter::INFO),
            "debug" => Ok(LevelFilter::DEBUG),
            "trace" => Ok(LevelFilter::TRACE),
            "off" => Ok(LevelFilter::OFF),
            _ => Err(AwfError::new(
                ErrorCode::UserInputInvalidFormat,
                format!("unknown log level '{text}'"),
            )
            .with_hint("Use one of error, warn, info, debug, trace.")),
        }
    }

    /// The level applied to the run's own log lines (`RunEvent::Log`: hook `log:` actions and
    /// engine warnings), which the terminal printer writes. `explicit` is whether the user
    /// gave a level (`--log-level`): then it applies as given (`error` and `off` hide hook
    /// `INFO` lines, `off` hides warnings too). Without one, `INFO` lines stay visible (a hook's
    /// `log:` is output the workflow asked for). `verbose` raises to at least `debug`; `quiet`
    /// lowers to at most `warn`.
    pub fn run_log_level(&self, explicit: bool) -> LevelFilter {
        let mut level = if explicit {
            self.level
        } else {
            self.level.max(LevelFilter::INFO)
        };
        if self.verbose {
            level = level.max(LevelFilter::DEBUG);
        }
        if self.quiet {
            level = level.min(LevelFilter::WARN);
        }
        level
    }

    /// Whether a run log line of `level` passes `filter` (from [`LogConfig::run_log_level`]).
    pub fn shows(filter: LevelFilter, level: awf_domain::event::LogLevel) -> bool {
        let l = match level {
            awf_domain::event::LogLevel::Info => LevelFilter::INFO,
            awf_domain::event::LogLevel::Warn => LevelFilter::WARN,
        };
        l <= filter
    }

    /// A run log line in the `--log-format json` shape of every other log line (one object,
    /// no trailing newline): `{"timestamp": RFC 3339 UTC with microseconds, "level": "INFO" |
    /// "WARN", "message", "target": "awf::run", "step"?}`; `step` is omitted when the line
    /// belongs to no state.
    pub fn run_log_json(
        at: std::time::SystemTime,
        level: awf_domain::event::LogLevel,
        step: Option<&str>,
        message: &str,
    ) -> String {
        let mut obj = serde_json::Map::new();
        obj.insert(
            "timestamp".into(),
            Value::String(humantime::format_rfc3339_micros(at).to_string()),
        );
        let level = match level {
            awf_domain::event::LogLevel::Info => "INFO",
            awf_domain::event::LogLevel::Warn => "WARN",
        };
        obj.insert("level".into(), Value::String(level.into()));
        obj.insert("message".into(), Value::String(message.into()));
        obj.insert("target".into(), Value::String("awf::run".into()));
        if let Some(s) = step {
            obj.insert("step".into(), Value::String(s.into()));
        }
        Value::Object(obj).to_string()
    }

    /// The level actually applied, after `quiet` and `verbose`.
    pub fn effective_level(&self) -> LevelFilter {
        if self.quiet {
            LevelFilter::ERROR
        } else if self.verbose {
            self.level.max(LevelFilter::DEBUG)
        } else {
            self.level
        }
    }
}

/// OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtelProtocol {
    /// OTLP over gRPC (port 4317 by convention). AWF's default.
    Grpc,
    /// OTLP over HTTP with protobuf bodies, `POST <endpoint>` (port 4318 by convention).
    HttpProtobuf,
}

impl OtelProtocol {
    /// The `OTEL_EXPORTER_OTLP_PROTOCOL` spelling (`grpc`, `http/protobuf`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Grpc => "grpc",
            Self::HttpProtobuf => "http/protobuf",
        }
    }

    /// Parses the `OTEL_EXPORTER_OTLP_PROTOCOL` spelling; `None` for unsupported values
    /// (`http/json` is not supported).
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "grpc" => Some(Self::Grpc),
            "http/protobuf" | "http/proto" | "http" => Some(Self::HttpProtobuf),
            _ => None,
        }
    }
}

/// Where and how spans are exported.
///
/// `endpoint` is a full URL: for gRPC `http://host:port` (plain) or `https://host:port` (TLS,
/// Web PKI roots); for HTTP/protobuf the URL spans are POSTed to (normally ending in
/// `/v1/traces`). `headers` are sent with every export (gRPC metadata or HTTP headers).
/// Source: spec/http-ops.md §2.1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtelConfig {
    /// Normalised endpoint URL (see above).
    pub endpoint: String,
    /// Transport.
    pub protocol: OtelProtocol,
    /// `service.name` resource attribute (default `awf`).
    pub service_name: String,
    /// Extra headers, in the order given.
    pub headers: Vec<(String, String)>,
}

impl OtelConfig {
    /// Resolves the export configuration; `None` when nothing asks for export.
    ///
    /// Endpoint, first non-empty wins: `--otel-exporter` (`cli_exporter`; an explicit empty
    /// value disables export whatever else is set), `telemetry.exporter` in `.awf/config.yaml`
    /// (`config_telemetry` is the value of the `telemetry:` key), then
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is) and `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// (a base URL: `/v1/traces` is appended for HTTP). `OTEL_SDK_DISABLED=true` disables
    /// export.
    ///
    /// Protocol: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` or `OTEL_EXPORTER_OTLP_PROTOCOL`
    /// (`grpc` | `http/protobuf`); gRPC when unset or unsupported (AWF's flag and config key
    /// name a gRPC endpoint).
    ///
    /// Endpoint text: `host:port` means plain (`http://host:port`); `http://` plain,
    /// `https://` TLS. For HTTP/protobuf a flag or config value without a path gets
    /// `/v1/traces` appended.
    ///
    /// Service name: `--otel-service-name`, `telemetry.service_name`, `OTEL_SERVICE_NAME`,
    /// then `awf`. Headers: `OTEL_EXPORTER_OTLP_HEADERS` then `..._TRACES_HEADERS`
    /// (`k=v,k2=v2`, values percent-decoded).
    ///
    /// Divergence from AWF (Go), deliberate: the standard variables alone enable export and
    /// `OTEL_SERVICE_NAME` is honoured below the flag and config key.
    /// Source: spec/http-ops.md §2.1; spec/workflow.md §3.13.
    pub fn from_sources(
        cli_exporter: Option<&str>,
        cli_service: Option<&str>,
        config_telemetry: Option<&Value>,
        env: &BTreeMap<String, String>,
    ) -> Option<OtelConfig> {
        let env_get = |k: &str| env.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        if env_get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return None;
        }
        let config_str = |key: &str| {
            config_telemetry
                .and_then(|t| t.get(key))
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
        };

        let explicit = env_get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| env_get("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .and_then(OtelProtocol::parse);
        // Without an explicit protocol, an endpoint URL whose path is `/v1/traces` is the
        // OTLP/HTTP traces endpoint; anything else is gRPC.
        let given = cli_exporter
            .map(str::trim)
            .or_else(|| config_str("exporter"));
        let protocol = explicit.unwrap_or_else(|| match given {
            Some(url) if url.trim_end_matches('/').ends_with(HTTP_TRACES_PATH) => {
                OtelProtocol::HttpProtobuf
            }
            _ => OtelProtocol::Grpc,
        });

        let endpoint = match cli_exporter.map(str::trim) {
            Some("") => return None,
            Some(flag) => normalise_endpoint(flag, protocol, true),
            None => {
                if let Some(conf) = config_str("exporter") {
                    normalise_endpoint(conf, protocol, true)
                } else if let Some(signal) = env_get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
                    normalise_endpoint(signal, protocol, false)
                } else if let Some(base) = env_get("OTEL_EXPORTER_OTLP_ENDPOINT") {
                    let url = normalise_endpoint(base, protocol, false);
                    match protocol {
                        OtelProtocol::Grpc => url,
                        OtelProtocol::HttpProtobuf => {
                            format!("{}{HTTP_TRACES_PATH}", url.trim_end_matches('/'))
                        }
                    }
                } else {
                    return None;
                }
            }
        };

        let service_name = cli_service
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .or_else(|| config_str("service_name"))
            .or_else(|| env_get("OTEL_SERVICE_NAME"))
            .unwrap_or(DEFAULT_SERVICE_NAME)
            .to_owned();

        let mut headers = Vec::new();
        for var in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        ] {
            if let Some(text) = env_get(var) {
                for (k, v) in parse_headers(text) {
                    headers.retain(|(old, _): &(String, String)| !old.eq_ignore_ascii_case(&k));
                    headers.push((k, v));
                }
            }
        }

        Some(OtelConfig {
            endpoint,
            protocol,
            service_name,
            headers,
        })
    }
}

/// Adds a scheme to a bare `host:port` and, for HTTP endpoints given by flag or config
/// (`add_path`), the `/v1/traces` path when the URL has none.
fn normalise_endpoint(text: &str, protocol: OtelProtocol, add_path: bool) -> String {
    let with_scheme = if text.starts_with("http://") || text.starts_with("https://") {
        text.to_owned()
    } else {
        format!("http://{text}")
    };
    match protocol {
        OtelProtocol::Grpc => with_scheme,
        OtelProtocol::HttpProtobuf => {
            let after_scheme = with_scheme.split_once("://").map_or("", |(_, rest)| rest);
            let has_path = after_scheme
                .find('/')
                .is_some_and(|i| after_scheme.len() > i + 1);
            if add_path && !has_path {
                format!("{}{HTTP_TRACES_PATH}", with_scheme.trim_end_matches('/'))
            } else {
                with_scheme
            }
        }
    }
}

/// Parses `OTEL_EXPORTER_OTLP_HEADERS` text: `key=value` pairs separated by commas, keys and
/// values trimmed, values percent-decoded; malformed pairs are skipped.
pub fn parse_headers(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            let k = k.trim();
            if k.is_empty() {
                return None;
            }
            Some((k.to_owned(), percent_decode(v.trim())))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
