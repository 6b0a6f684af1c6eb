//! Integration tests of awf-telemetry (one binary): OTLP export end to end against
//! in-process receivers on 127.0.0.1 (gRPC via tonic, HTTP/protobuf via a std TcpListener).

// Test helpers outside #[test] fns (receivers) unwrap too: failures there must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
