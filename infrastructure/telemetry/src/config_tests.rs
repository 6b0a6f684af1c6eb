use std::collections::BTreeMap;

use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn grpc(endpoint: &str, service: &str) -> OtelConfig {
    OtelConfig {
        endpoint: endpoint.to_owned(),
        protocol: OtelProtocol::Grpc,
        service_name: service.to_owned(),
        headers: Vec::new(),
    }
}

#[test]
fn nothing_configured_means_no_export() {
    assert_eq!(OtelConfig::from_sources(None, None, None, &env(&[])), None);
    // A service name alone does not enable export.
    assert_eq!(
        OtelConfig::from_sources(
            None,
            Some("svc"),
            Some(&json!({"service_name": "x"})),
            &env(&[("OTEL_SERVICE_NAME", "y")])
        ),
        None
    );
    // Empty config exporter = off.
    assert_eq!(
        OtelConfig::from_sources(None, None, Some(&json!({"exporter": ""})), &env(&[])),
        None
    );
}

#[test]
fn flag_host_port_is_plain_grpc_with_default_service_name() {
    assert_eq!(
        OtelConfig::from_sources(Some("localhost:4317"), None, None, &env(&[])),
        Some(grpc("http://localhost:4317", "awf"))
    );
    assert_eq!(
        OtelConfig::from_sources(Some("https://collector:4317"), Some("ci"), None, &env(&[])),
        Some(grpc("https://collector:4317", "ci"))
    );
}

#[test]
fn flag_beats_config_and_empty_flag_disables() {
    let conf = json!({"exporter": "conf:4317", "service_name": "from-config"});
    assert_eq!(
        OtelConfig::from_sources(Some("flag:4317"), None, Some(&conf), &env(&[])),
        Some(grpc("http://flag:4317", "from-config"))
    );
    assert_eq!(
        OtelConfig::from_sources(None, None, Some(&conf), &env(&[])),
        Some(grpc("http://conf:4317", "from-config"))
    );
    assert_eq!(
        OtelConfig::from_sources(
            Some(""),
            None,
            Some(&conf),
            &env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://e:4317")])
        ),
        None
    );
}

#[test]
fn service_name_precedence_is_flag_config_env_default() {
    let e = env(&[("OTEL_SERVICE_NAME", "from-env")]);
    let conf = json!({"exporter": "c:1", "service_name": "from-config"});
    let name = |flag: Option<&str>, conf: Option<&serde_json::Value>| {
        OtelConfig::from_sources(Some("h:1"), flag, conf, &e).map(|c| c.service_name)
    };
    assert_eq!(
        name(Some("from-flag"), Some(&conf)).as_deref(),
        Some("from-flag")
    );
    assert_eq!(name(None, Some(&conf)).as_deref(), Some("from-config"));
    assert_eq!(name(None, None).as_deref(), Some("from-env"));
    assert_eq!(
        OtelConfig::from_sources(Some("h:1"), None, None, &env(&[])).map(|c| c.service_name),
        Some("awf".to_owned())
    );
}

#[test]
fn standard_env_enables_http_protobuf_with_signal_path_and_headers() {
    let e = env(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318/"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "api-key=abc%3D%3D, x-team = ops ,broken",
        ),
        ("OTEL_SERVICE_NAME", "svc"),
    ]);
    assert_eq!(
        OtelConfig::from_sources(None, None, None, &e),
        Some(OtelConfig {
            endpoint: "http://otel:4318/v1/traces".to_owned(),
            protocol: OtelProtocol::HttpProtobuf,
            service_name: "svc".to_owned(),
            headers: vec![
                ("api-key".to_owned(), "abc==".to_owned()),
                ("x-team".to_owned(), "ops".to_owned()),
            ],
        })
    );
}

#[test]
fn signal_endpoint_is_used_as_is_and_beats_base_endpoint() {
    let e = env(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318"),
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://sig:4318/custom",
        ),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
    ]);
    assert_eq!(
        OtelConfig::from_sources(None, None, None, &e).map(|c| c.endpoint),
        Some("http://sig:4318/custom".to_owned())
    );
}

#[test]
fn env_grpc_endpoint_is_kept_and_protocol_defaults_to_grpc() {
    let e = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "otel:4317")]);
    assert_eq!(
        OtelConfig::from_sources(None, None, None, &e),
        Some(grpc("http://otel:4317", "awf"))
    );
    // Unsupported protocol text falls back to gRPC.
    let e = env(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "otel:4317"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
    ]);
    assert_eq!(
        OtelConfig::from_sources(None, None, None, &e).map(|c| c.protocol),
        Some(OtelProtocol::Grpc)
    );
}

#[test]
fn flag_with_http_protocol_gets_traces_path_unless_it_has_one() {
    let e = env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")]);
    assert_eq!(
        OtelConfig::from_sources(Some("127.0.0.1:4318"), None, None, &e).map(|c| c.endpoint),
        Some("http://127.0.0.1:4318/v1/traces".to_owned())
    );
    assert_eq!(
        OtelConfig::from_sources(Some("https://h/otlp/v1/traces"), None, None, &e)
            .map(|c| c.endpoint),
        Some("https://h/otlp/v1/traces".to_owned())
    );
}

#[test]
fn sdk_disabled_turns_export_off() {
    let e = env(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "otel:4317"),
        ("OTEL_SDK_DISABLED", "TRUE"),
    ]);
    assert_eq!(OtelConfig::from_sources(Some("h:1"), None, None, &e), None);
}

#[test]
fn traces_headers_override_general_headers_by_name() {
    let e = env(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "otel:4317"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "a=1,b=2"),
        ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "A=3"),
    ]);
    assert_eq!(
        OtelConfig::from_sources(None, None, None, &e).map(|c| c.headers),
        Some(vec![
            ("b".to_owned(), "2".to_owned()),
            ("A".to_owned(), "3".to_owned())
        ])
    );
}

#[test]
fn log_levels_parse_and_combine_with_quiet_and_verbose() {
    assert_eq!(LogConfig::parse_level("INFO").ok(), Some(LevelFilter::INFO));
    assert_eq!(
        LogConfig::parse_level("warning").ok(),
        Some(LevelFilter::WARN)
    );
    assert_eq!(
        LogConfig::parse_level("trace").ok(),
        Some(LevelFilter::TRACE)
    );
    let err = LogConfig::parse_level("loud")
        .err()
        .map(|e| (e.code(), e.message().to_owned()));
    assert_eq!(
        err,
        Some((
            ErrorCode::UserInputInvalidFormat,
            "unknown log level 'loud'".to_owned()
        ))
    );
    let base = LogConfig {
        level: LevelFilter::INFO,
        ..LogConfig::default()
    };
    assert_eq!(base.effective_level(), LevelFilter::INFO);
    let verbose = LogConfig {
        verbose: true,
        ..base.clone()
    };
    assert_eq!(verbose.effective_level(), LevelFilter::DEBUG);
    let verbose_trace = LogConfig {
        level: LevelFilter::TRACE,
        verbose: true,
        ..LogConfig::default()
    };
    assert_eq!(verbose_trace.effective_level(), LevelFilter::TRACE);
    let quiet = LogConfig {
        quiet: true,
        verbose: true,
        ..base
    };
    assert_eq!(quiet.effective_level(), LevelFilter::ERROR);
}

#[test]
fn run_log_lines_follow_an_explicit_level_and_stay_visible_by_default() {
    use awf_domain::event::LogLevel;
    let cfg = |level: LevelFilter, quiet: bool, verbose: bool| LogConfig {
        level,
        quiet,
        verbose,
        ..LogConfig::default()
    };
    let shows =
        |c: &LogConfig, explicit: bool, l: LogLevel| LogConfig::shows(c.run_log_level(explicit), l);
    // Default (no --log-level): hook INFO lines and warnings are shown.
    let d = LogConfig::default();
    assert!(shows(&d, false, LogLevel::Info));
    assert!(shows(&d, false, LogLevel::Warn));
    // --log-level error: neither; off: neither; warn: warnings only; info: both.
    for (level, info, warn) in [
        (LevelFilter::ERROR, false, false),
        (LevelFilter::OFF, false, false),
        (LevelFilter::WARN, false, true),
        (LevelFilter::INFO, true, true),
        (LevelFilter::TRACE, true, true),
    ] {
        let c = cfg(level, false, false);
        assert_eq!(shows(&c, true, LogLevel::Info), info, "{level}");
        assert_eq!(shows(&c, true, LogLevel::Warn), warn, "{level}");
    }
    // -q hides INFO but keeps warnings; --verbose shows INFO even under --log-level error.
    assert!(!shows(
        &cfg(LevelFilter::WARN, true, false),
        false,
        LogLevel::Info
    ));
    assert!(shows(
        &cfg(LevelFilter::WARN, true, false),
        false,
        LogLevel::Warn
    ));
    assert!(shows(
        &cfg(LevelFilter::ERROR, false, true),
        true,
        LogLevel::Info
    ));
}

#[test]
fn run_log_json_has_the_shape_of_other_log_lines() {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_micros(1_700_000_000_123_456);
    let line =
        LogConfig::run_log_json(at, awf_domain::event::LogLevel::Info, Some("s"), "hi \"x\"");
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "timestamp": "2023-11-14T22:13:20.123456Z",
            "level": "INFO",
            "message": "hi \"x\"",
            "target": "awf::run",
            "step": "s",
        })
    );
    let none = LogConfig::run_log_json(at, awf_domain::event::LogLevel::Warn, None, "w");
    assert!(!none.contains("\"step\""), "{none}");
    assert!(!none.contains('\n'));
}
