//! The OTLP/HTTP transport: the workspace's `reqwest` 0.12 client (rustls) behind
//! `opentelemetry-http`'s [`HttpClient`] trait.
//!
//! The SDK's batch processor exports from its own OS thread with a plain `block_on`, where no
//! Tokio reactor exists. Each request is therefore spawned onto the exporter's I/O runtime and
//! only the join handle is awaited on the caller's thread.
//! Source: spec/http-ops.md §2.5 (runtime pitfall).

use std::time::Duration;

use opentelemetry_http::Bytes;
use opentelemetry_http::HttpClient;
use opentelemetry_http::HttpError;
use opentelemetry_http::Request;
use opentelemetry_http::Response;
use tokio::runtime::Handle;

/// `reqwest` client whose requests run on a given Tokio runtime.
#[derive(Debug, Clone)]
pub(crate) struct SpawningReqwestClient {
    client: reqwest::Client,
    runtime: Handle,
}

impl SpawningReqwestClient {
    /// A client with a whole-request `timeout`, running requests on `runtime`.
    pub(crate) fn new(runtime: Handle, timeout: Duration) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder().timeout(timeout).build()?;
        Ok(Self { client, runtime })
    }
}

#[async_trait::async_trait]
impl HttpClient for SpawningReqwestClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let client = self.client.clone();
        let task = self.runtime.spawn(async move {
            let response = client.execute(request).await?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, headers, body))
        });
        let (status, headers, body) = task.await??;
        let mut out = Response::builder().status(status).body(body)?;
        *out.headers_mut() = headers;
        Ok(out)
    }
}
