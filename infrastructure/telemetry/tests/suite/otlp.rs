//! End-to-end span export without external services (spec/http-ops.md §2.6): the real
//! exporter, batch processor and runtime setup, sending to receivers inside this process.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::io::BufRead as _;
use std::io::BufReader;
use std::io::Read as _;
use std::io::Write as _;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::SystemTime;

use awf_domain::event::EventEnvelope;
use awf_domain::event::EventPublisher as _;
use awf_domain::event::RunEvent;
use awf_domain::run::RunId;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use awf_domain::run::StepState;
use awf_domain::run::StepStatus;
use awf_telemetry::LogConfig;
use awf_telemetry::OtelConfig;
use awf_telemetry::OtelProtocol;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceService;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceServiceServer;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use pretty_assertions::assert_eq;
use prost::Message as _;

/// Serialises the tests: `tracing` caches callsite interest across all live dispatchers, so
/// subscribers created concurrently by other tests could hide or show the projection's spans.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

const RUN: &str = "33333333-3333-4333-8333-333333333333";

fn envelope(seq: u64, path: &str, event: RunEvent) -> EventEnvelope {
    EventEnvelope {
        seq,
        run_id: RunId(RUN.to_owned()),
        parent_run_id: None,
        at: SystemTime::now(),
        path: path.to_owned(),
        iteration: None,
        event,
    }
}

/// A run with one successful command step `hello`.
fn emit_run() {
    let projection = awf_telemetry::span_projection();
    let mut st = StepState::running("hello", SystemTime::now());
    st.status = StepStatus::Completed;
    st.exit_code = Some(0);
    st.attempts = 1;
    let events = vec![
        envelope(
            1,
            "",
            RunEvent::RunStarted {
                workflow: "hello-wf".to_owned(),
                identifier: "hello-wf".to_owned(),
                workflow_path: None,
                inputs: serde_json::Map::new(),
                resumed_from: None,
                pid: 1,
                mocks: Default::default(),
                working_dir: None,
            },
        ),
        envelope(
            2,
            "hello",
            RunEvent::StepStarted {
                step: "hello".to_owned(),
                kind: "command".to_owned(),
                command: None,
            },
        ),
        envelope(
            3,
            "hello",
            RunEvent::StepFinished {
                step: "hello".to_owned(),
                kind: "command".to_owned(),
                state: Box::new(st),
            },
        ),
        envelope(
            4,
            "",
            RunEvent::RunFinished {
                result: Box::new(RunResult {
                    run_id: Some(RunId(RUN.to_owned())),
                    workflow: "hello-wf".to_owned(),
                    status: RunStatus::Success,
                    exit_code: 0,
                    terminal: Some("done".to_owned()),
                    duration_ms: 1,
                    states: BTreeMap::new(),
                    outputs: BTreeMap::new(),
                    error: None,
                    message: None,
                    spend: None,
                }),
            },
        ),
    ];
    for e in events {
        projection.emit(e);
    }
}

/// What arrived, summarised: service name, `(span name, parent name)` pairs, and the string
/// attributes of the run span.
#[derive(Debug, PartialEq)]
struct Received {
    service: Vec<String>,
    spans: Vec<(String, String)>,
    run_attrs: BTreeMap<String, String>,
}

fn summarise(requests: &[ExportTraceServiceRequest]) -> Received {
    let mut service = Vec::new();
    let mut spans = Vec::new();
    for req in requests {
        for rs in &req.resource_spans {
            if let Some(res) = &rs.resource {
                for kv in &res.attributes {
                    if kv.key == "service.name"
                        && let Some(AnyValue::StringValue(s)) =
                            kv.value.as_ref().and_then(|v| v.value.clone())
                    {
                        service.push(s);
                    }
                }
            }
            for ss in &rs.scope_spans {
                spans.extend(ss.spans.iter().cloned());
            }
        }
    }
    let names: HashMap<Vec<u8>, String> = spans
        .iter()
        .map(|s| (s.span_id.clone(), s.name.clone()))
        .collect();
    let mut pairs: Vec<(String, String)> = spans
        .iter()
        .map(|s| {
            let parent = if s.parent_span_id.is_empty() {
                "<root>".to_owned()
            } else {
                names
                    .get(&s.parent_span_id)
                    .cloned()
                    .unwrap_or_else(|| "<unknown>".to_owned())
            };
            (s.name.clone(), parent)
        })
        .collect();
    pairs.sort();
    let run_attrs = spans
        .iter()
        .filter(|s| s.name == "workflow.run")
        .flat_map(|s| s.attributes.iter())
        .filter_map(|kv| match kv.value.as_ref().and_then(|v| v.value.clone()) {
            Some(AnyValue::StringValue(s)) if kv.key != "user" => Some((kv.key.clone(), s)),
            Some(AnyValue::IntValue(i)) => Some((kv.key.clone(), i.to_string())),
            _ => None,
        })
        .collect();
    service.dedup();
    Received {
        service,
        spans: pairs,
        run_attrs,
    }
}

fn expected(service: &str) -> Received {
    Received {
        service: vec![service.to_owned()],
        spans: vec![
            ("workflow.run".to_owned(), "<root>".to_owned()),
            ("workflow.step".to_owned(), "workflow.run".to_owned()),
        ],
        run_attrs: [
            ("execution_id", RUN),
            ("workflow.exit_code", "0"),
            ("workflow.identifier", "hello-wf"),
            ("workflow.name", "hello-wf"),
            ("workflow.status", "success"),
            ("workflow.terminal", "done"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
    }
}

#[derive(Default, Clone)]
struct GrpcReceiver {
    requests: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
    team_headers: Arc<Mutex<Vec<String>>>,
}

#[tonic::async_trait]
impl TraceService for GrpcReceiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        if let Some(v) = request.metadata().get("x-awf-team") {
            self.team_headers
                .lock()
                .unwrap()
                .push(v.to_str().unwrap_or("?").to_owned());
        }
        self.requests.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// gRPC export through the global subscriber, from a thread with no Tokio runtime at all:
/// the exporter owns its I/O runtime. The receiver runs on its own runtime thread.
#[test]
fn grpc_export_reaches_an_in_process_collector() {
    let _serial = serial();
    let receiver = GrpcReceiver::default();
    let server = receiver.clone();
    let (port_tx, port_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server_thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            port_tx.send(listener.local_addr().unwrap().port()).unwrap();
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(server))
                .serve_with_incoming_shutdown(
                    tonic::transport::server::TcpIncoming::from(listener),
                    async {
                        let _ = stop_rx.await;
                    },
                )
                .await
                .unwrap();
        });
    });
    let port = port_rx.recv().unwrap();

    let env: BTreeMap<String, String> = [(
        "OTEL_EXPORTER_OTLP_HEADERS".to_owned(),
        "x-awf-team=ops".to_owned(),
    )]
    .into();
    let cfg = OtelConfig::from_sources(
        Some(&format!("127.0.0.1:{port}")),
        Some("awf-grpc-test"),
        None,
        &env,
    )
    .unwrap();
    assert_eq!(cfg.protocol, OtelProtocol::Grpc);
    assert_eq!(cfg.endpoint, format!("http://127.0.0.1:{port}"));

    let guard = awf_telemetry::init_logging(&LogConfig::default(), Some(&cfg)).unwrap();
    assert!(guard.exporting());
    emit_run();
    guard.shutdown();

    let _ = stop_tx.send(());
    server_thread.join().unwrap();
    let requests = receiver.requests.lock().unwrap();
    assert_eq!(summarise(&requests), expected("awf-grpc-test"));
    assert_eq!(
        *receiver.team_headers.lock().unwrap(),
        vec!["ops".to_owned()]
    );
}

/// One HTTP request as the receiver saw it.
#[derive(Debug)]
struct HttpRequest {
    request_line: String,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

/// Accepts connections on `listener`, answering each request 200 with an empty protobuf
/// body, until a request to `/stop` arrives.
fn serve_http(listener: TcpListener, seen: Arc<Mutex<Vec<HttpRequest>>>) {
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let mut reader = BufReader::new(conn.try_clone().unwrap());
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            continue;
        }
        let mut headers = BTreeMap::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
            }
        }
        let len: usize = headers
            .get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; len];
        reader.read_exact(&mut body).unwrap();
        let stop = request_line.starts_with("GET /stop");
        let _ = conn.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        );
        let _ = conn.flush();
        if stop {
            return;
        }
        seen.lock().unwrap().push(HttpRequest {
            request_line: request_line.trim_end().to_owned(),
            headers,
            body,
        });
    }
}

/// HTTP/protobuf export through a scoped subscriber, inside a current-thread Tokio runtime
/// (shutdown blocks this runtime's only thread; the export must still complete).
#[tokio::test]
async fn http_protobuf_export_reaches_an_in_process_collector() {
    let _serial = serial();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let server = {
        let seen = Arc::clone(&seen);
        std::thread::spawn(move || serve_http(listener, seen))
    };

    let env: BTreeMap<String, String> = [
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{port}"),
        ),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".to_owned()),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-awf-team=ops".to_owned()),
        ("OTEL_SERVICE_NAME", "awf-http-test".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let cfg = OtelConfig::from_sources(None, None, None, &env).unwrap();
    assert_eq!(cfg.protocol, OtelProtocol::HttpProtobuf);
    assert_eq!(cfg.endpoint, format!("http://127.0.0.1:{port}/v1/traces"));

    let (dispatch, guard) =
        awf_telemetry::build_dispatch(&LogConfig::default(), Some(&cfg)).unwrap();
    assert!(guard.exporting());
    tracing::dispatcher::with_default(&dispatch, emit_run);
    guard.shutdown();

    // Stop the receiver.
    let mut stop = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stop.write_all(b"GET /stop HTTP/1.1\r\nhost: x\r\n\r\n")
        .unwrap();
    let mut sink = Vec::new();
    let _ = stop.read_to_end(&mut sink);
    server.join().unwrap();

    let seen = seen.lock().unwrap();
    assert!(!seen.is_empty(), "no export request arrived");
    let mut decoded = Vec::new();
    for req in seen.iter() {
        assert_eq!(req.request_line, "POST /v1/traces HTTP/1.1");
        assert_eq!(
            req.headers.get("content-type").map(String::as_str),
            Some("application/x-protobuf")
        );
        assert_eq!(
            req.headers.get("x-awf-team").map(String::as_str),
            Some("ops")
        );
        decoded.push(ExportTraceServiceRequest::decode(req.body.as_slice()).unwrap());
    }
    assert_eq!(summarise(&decoded), expected("awf-http-test"));
}

/// A bad endpoint does not fail start-up: logging is installed and export is off.
#[test]
fn unbuildable_exporter_degrades_to_logging_only() {
    let _serial = serial();
    let cfg = OtelConfig {
        endpoint: "http://[not a host".to_owned(),
        protocol: OtelProtocol::Grpc,
        service_name: "awf".to_owned(),
        headers: Vec::new(),
    };
    let (_dispatch, guard) =
        awf_telemetry::build_dispatch(&LogConfig::default(), Some(&cfg)).unwrap();
    assert!(!guard.exporting());
}

#[test]
fn bad_log_directives_are_a_user_error() {
    let _serial = serial();
    let cfg = LogConfig {
        directives: Some("awf=[[[".to_owned()),
        ..LogConfig::default()
    };
    let err = awf_telemetry::build_dispatch(&cfg, None).err().unwrap();
    assert_eq!(err.code(), awf_domain::ErrorCode::UserInputInvalidFormat);
}
