//! The `tools/call` load runner: C clients, each on its own connection and session,
//! each making N round trips one after another.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::Barrier;

use crate::BenchError;
use crate::client::McpClient;

/// One load measurement.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// Concurrent clients (connections, sessions).
    pub clients: usize,
    /// Timed round trips per client.
    pub requests_per_client: usize,
    /// Untimed round trips per client before the measurement.
    pub warmup_per_client: usize,
    /// Stop starting new calls after this long (the result says so).
    pub time_limit: Duration,
    /// The tool to call.
    pub tool: String,
    /// Its arguments.
    pub arguments: Value,
}

/// The outcome of one load measurement.
#[derive(Debug, Clone)]
pub struct LoadResult {
    /// Concurrent clients.
    pub clients: usize,
    /// Round trips completed in the timed part.
    pub calls: usize,
    /// From the first client's start to the last client's last response.
    pub elapsed: Duration,
    /// Median round-trip time.
    pub p50: Duration,
    /// 99th-percentile round-trip time.
    pub p99: Duration,
    /// Whether the time limit cut the measurement short.
    pub truncated: bool,
}

impl LoadResult {
    /// Round trips per second, all clients together.
    pub fn per_second(&self) -> f64 {
        rate(self.calls, self.elapsed)
    }
}

/// `count` per `elapsed`, as a rate per second (0 for an empty interval).
pub(crate) fn rate(count: usize, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 { count as f64 / secs } else { 0.0 }
}

/// The `p`-quantile (0..=1) of sorted `values`, nearest rank.
pub(crate) fn quantile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Run `spec` against the MCP endpoint at `path` on `addr`.
///
/// Every client connects, starts its session and warms up first (one after another, not
/// timed); then all start together, and each makes its round trips back to back. Sessions
/// are ended (`DELETE`) afterwards.
///
/// # Errors
/// Any failed session setup or round trip fails the measurement: a benchmark that skips
/// errors measures something else.
pub async fn run_load(addr: SocketAddr, path: &str, spec: &LoadSpec) -> Result<LoadResult, BenchError> {
    let clients = spec.clients.max(1);
    let mut ready = Vec::with_capacity(clients);
    for _ in 0..clients {
        let mut client = McpClient::connect(addr, path).await?;
        client.initialize().await?;
        for _ in 0..spec.warmup_per_client {
            client.call_tool(&spec.tool, &spec.arguments).await?;
        }
        ready.push(client);
    }
    let barrier = Arc::new(Barrier::new(clients + 1));
    let mut tasks = Vec::with_capacity(clients);
    for mut client in ready {
        let barrier = barrier.clone();
        let spec = spec.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let started = Instant::now();
            let deadline = started + spec.time_limit;
            let mut latencies = Vec::with_capacity(spec.requests_per_client);
            let mut truncated = false;
            for _ in 0..spec.requests_per_client {
                if Instant::now() >= deadline {
                    truncated = true;
                    break;
                }
                latencies.push(client.call_tool(&spec.tool, &spec.arguments).await?);
            }
            let finished = Instant::now();
            client.close().await?;
            Ok::<_, BenchError>((latencies, started, finished, truncated))
        }));
    }
    barrier.wait().await;
    let mut latencies = Vec::with_capacity(clients * spec.requests_per_client);
    let (mut first, mut last, mut truncated) = (None::<Instant>, None::<Instant>, false);
    for task in tasks {
        let (mine, started, finished, cut) = task.await.map_err(|e| BenchError::Task(e.to_string()))??;
        latencies.extend(mine);
        first = Some(first.map_or(started, |t| t.min(started)));
        last = Some(last.map_or(finished, |t| t.max(finished)));
        truncated |= cut;
    }
    latencies.sort_unstable();
    let elapsed = match (first, last) {
        (Some(first), Some(last)) => last.saturating_duration_since(first),
        _ => Duration::ZERO,
    };
    Ok(LoadResult {
        clients,
        calls: latencies.len(),
        elapsed,
        p50: quantile(&latencies, 0.50),
        p99: quantile(&latencies, 0.99),
        truncated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let values: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile(&values, 0.5), Duration::from_millis(50));
        assert_eq!(quantile(&values, 0.99), Duration::from_millis(99));
        assert_eq!(quantile(&values[..1], 0.99), Duration::from_millis(1));
        assert_eq!(quantile(&[], 0.5), Duration::ZERO);
    }
}
