//! OpenTelemetry traces, exported over OTLP/HTTP (protobuf): [`install`] the exporter once
//! per process (inside the Tokio runtime), keep the [`TracesGuard`] it returns, and call
//! [`TracesGuard::shutdown`] at the end to flush the last spans.
//!
//! Configured by the standard `OTEL_*` environment variables: where to send
//! (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else `OTEL_EXPORTER_OTLP_ENDPOINT` plus
//! `/v1/traces`, else `http://localhost:4318/v1/traces`), `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_SERVICE_NAME` (default `durable-mcp`),
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`, the
//! batch processor's `OTEL_BSP_*`; `OTEL_SDK_DISABLED=true` turns traces off whatever
//! asks for them ([`wanted`]). An `https://` collector is verified against the Mozilla
//! roots and the PEM file of `OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE` (else
//! `OTEL_EXPORTER_OTLP_CERTIFICATE`), if set; `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` apply
//! (the project's outbound client).
//!
//! The spans follow the OpenTelemetry MCP semantic conventions; the project's
//! `docs/tracing.md` lists every span, attribute and link. Off unless installed: without
//! [`install`] no span is built and no trace context is read.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use durable_mcp_outbound::Outbound;
use http_body_util::Full;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::WithHttpConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

pub use durable_mcp_engine::traces::{TraceContext, enable, enabled};

/// The largest collector answer read (an OTLP export response is a few bytes).
const MAX_RESPONSE: usize = 64 * 1024;
/// The export deadline without `OTEL_EXPORTER_OTLP_(TRACES_)TIMEOUT` (the spec's default).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The service name without `OTEL_SERVICE_NAME` (nor `service.name` in `OTEL_RESOURCE_ATTRIBUTES`).
pub const DEFAULT_SERVICE_NAME: &str = "durable-mcp";

/// Why traces could not be installed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TracesError {
    /// The OTLP exporter refused its configuration (an invalid endpoint, say).
    #[error("could not build the OTLP exporter: {0}")]
    Exporter(#[source] opentelemetry_otlp::ExporterBuildError),
    /// A setting this build does not serve: a protocol other than `http/protobuf`, or a
    /// collector's CA file that cannot be read.
    #[error("unsupported trace export setting: {0}")]
    Unsupported(String),
    /// Called outside a Tokio runtime (the exporter's HTTP client runs on it).
    #[error("traces must be installed inside a Tokio runtime")]
    NoRuntime,
}

/// The installed exporter: spans are batched and sent in the background until
/// [`shutdown`](Self::shutdown).
#[derive(Debug)]
pub struct TracesGuard {
    provider: SdkTracerProvider,
}

impl TracesGuard {
    /// Flush the spans not sent yet and stop exporting. It blocks until the last export
    /// ends (at most the export timeout): call it from a blocking thread
    /// (`tokio::task::spawn_blocking`) while the runtime still runs.
    pub fn shutdown(self) {
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!(%error, "the trace exporter did not shut down cleanly");
        }
    }
}

/// Whether traces are asked for: by the caller (`flag`, e.g. `serve --otel`) or by an OTLP
/// endpoint in the environment (`OTEL_EXPORTER_OTLP_ENDPOINT`,
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); never with `OTEL_SDK_DISABLED=true` or
/// `OTEL_TRACES_EXPORTER=none`.
pub fn wanted(flag: bool) -> bool {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return false;
    }
    if var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim().eq_ignore_ascii_case("none")) {
        return false;
    }
    flag || var("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
        || var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
}

/// Install the OTLP/HTTP exporter as the process's tracer provider and turn spans on
/// ([`enable`]): engines created from then on trace their requests and store calls.
///
/// # Errors
/// [`TracesError::Unsupported`] for a protocol other than `http/protobuf` or an unusable
/// certificate file, [`TracesError::Exporter`] for another invalid setting,
/// [`TracesError::NoRuntime`] outside a Tokio runtime.
pub fn install() -> Result<TracesGuard, TracesError> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| TracesError::NoRuntime)?;
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    if let Some(protocol) =
        var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        && protocol.trim() != "http/protobuf"
    {
        return Err(TracesError::Unsupported(format!(
            "OTLP protocol {protocol} (this build sends http/protobuf)"
        )));
    }
    let roots = match var("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE")
        .or_else(|| var("OTEL_EXPORTER_OTLP_CERTIFICATE"))
    {
        Some(path) => Some(std::fs::read_to_string(path.trim()).map_err(|e| {
            TracesError::Unsupported(format!("the collector's CA file {path}: {e}"))
        })?),
        None => None,
    };
    let outbound = Outbound::new(roots.as_deref())
        .map_err(|e| TracesError::Unsupported(format!("the collector's CA: {e}")))?;
    let timeout = var("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
        .or_else(|| var("OTEL_EXPORTER_OTLP_TIMEOUT"))
        .and_then(|ms| ms.trim().parse::<u64>().ok())
        .map_or(DEFAULT_TIMEOUT, Duration::from_millis);
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(Client {
            runtime,
            timeout,
            outbound,
        })
        .build()
        .map_err(TracesError::Exporter)?;
    let mut resource = Resource::builder();
    let named = var("OTEL_SERVICE_NAME").is_some()
        || var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| a.contains("service.name="));
    if !named {
        resource = resource.with_service_name(DEFAULT_SERVICE_NAME);
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    enable();
    Ok(TracesGuard { provider })
}

/// The exporter's HTTP client: the project's pooled outbound client (HTTP or HTTPS, proxies
/// from the environment), run on the process's Tokio runtime (the SDK's batch processor
/// exports from a thread of its own), a deadline on the whole exchange, the answer's body
/// capped.
#[derive(Debug)]
struct Client {
    runtime: tokio::runtime::Handle,
    timeout: Duration,
    outbound: Outbound,
}

#[async_trait]
impl HttpClient for Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (timeout, outbound) = (self.timeout, self.outbound.clone());
        let exchange = self.runtime.spawn(async move {
            let (parts, body) = request.into_parts();
            outbound
                .send(
                    Request::from_parts(parts, Full::new(body)),
                    timeout,
                    MAX_RESPONSE,
                )
                .await
                .map_err(HttpError::from)
        });
        exchange
            .await
            .map_err(|e| HttpError::from(format!("the OTLP export was stopped: {e}")))?
    }
}
