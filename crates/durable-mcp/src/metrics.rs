//! Prometheus metrics: [`install`] the recorder once per process, then serve its
//! [`MetricsHandle::render`] at `/metrics`, on a listener of its own
//! ([`DurableMcp::metrics_listen`](crate::DurableMcp::metrics_listen), or
//! `durable-mcp serve --metrics-listen ADDR`), or mount [`MetricsHandle::router`] in your app.
//!
//! The names follow the OpenTelemetry MCP semantic conventions (`mcp.server.operation.duration`,
//! `mcp.server.session.duration`) plus durable-mcp's own (`durable_mcp.*`); in the
//! Prometheus exposition dots become underscores, seconds get `_seconds` and counters
//! `_total`. The project's `docs/metrics.md` lists every series with its type, labels and
//! meaning. Off unless installed: without a recorder nothing is recorded.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use durable_mcp_engine::metrics as names;
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

pub use durable_mcp_engine::metrics::{MeteredStore, enable, enabled};

/// How often the recorder drains recorded samples when nobody scrapes (bounds its memory).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Why the metrics recorder could not be installed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MetricsError {
    /// Another recorder (not durable-mcp's) is installed in this process already, or the
    /// bucket settings were refused.
    #[error("could not install the Prometheus recorder: {0}")]
    Install(#[source] BuildError),
}

/// The process's Prometheus recorder: renders the text exposition of every metric.
#[derive(Clone, Debug)]
pub struct MetricsHandle {
    handle: PrometheusHandle,
}

impl MetricsHandle {
    /// The metrics now, in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        self.handle.render()
    }

    /// A router answering `GET /metrics` (see [`durable_mcp_http::metrics_router`]).
    pub fn router(&self) -> axum::Router {
        durable_mcp_http::metrics_router(self.renderer())
    }

    /// [`render`](Self::render) as the HTTP crate's callback.
    pub(crate) fn renderer(&self) -> durable_mcp_http::MetricsRender {
        let handle = self.handle.clone();
        Arc::new(move || handle.render())
    }
}

static INSTALLED: OnceLock<MetricsHandle> = OnceLock::new();

/// Install durable-mcp's Prometheus recorder for the process (the first call; later calls
/// return the same handle) and turn recording on ([`enable`]): engines created from then on
/// time their store and record every metric. Histograms get the buckets of the semantic
/// conventions (`mcp.server.*`) and of `docs/metrics.md` (store latency, batch sizes).
///
/// # Errors
/// [`MetricsError::Install`] if another recorder was installed in the process.
pub fn install() -> Result<MetricsHandle, MetricsError> {
    if let Some(handle) = INSTALLED.get() {
        return Ok(handle.clone());
    }
    let builder = PrometheusBuilder::new()
        .with_recommended_naming(true)
        .set_buckets_for_metric(
            Matcher::Prefix("mcp.server.".into()),
            names::MCP_DURATION_BUCKETS,
        )
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(names::STORE_OPERATION_DURATION.into()),
                names::STORE_DURATION_BUCKETS,
            )
        })
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(names::STORE_BATCH_OPS.into()),
                names::BATCH_OPS_BUCKETS,
            )
        })
        .map_err(MetricsError::Install)?;
    // Two threads racing here: one installs, the other gets the recorder's refusal.
    let handle = MetricsHandle {
        handle: builder.install_recorder().map_err(MetricsError::Install)?,
    };
    let handle = INSTALLED.get_or_init(|| handle).clone();
    enable();
    let upkeep = handle.handle.clone();
    let spawned = std::thread::Builder::new()
        .name("durable-mcp-metrics".into())
        .spawn(move || {
            loop {
                std::thread::sleep(UPKEEP_EVERY);
                upkeep.run_upkeep();
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "no metrics upkeep thread: samples are drained at each scrape only");
    }
    Ok(handle)
}
