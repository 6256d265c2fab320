//! The `tools/call` load: C connections in a closed loop, each one client (and in the
//! legacy era its own session), each making round trips back to back for a fixed time.
//! This is what a `bench-load` child process runs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::Barrier;

use crate::BenchError;
use crate::client::{Era, McpClient};

/// One load measurement.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// Concurrent connections (clients; legacy: sessions).
    pub connections: usize,
    /// Which protocol era the clients speak.
    pub era: Era,
    /// How long the timed part lasts.
    pub duration: Duration,
    /// Untimed round trips per connection before the measurement.
    pub warmup_calls: usize,
    /// Stop a connection after this many timed round trips, even before `duration`.
    pub max_calls: Option<usize>,
    /// The tool to call.
    pub tool: String,
    /// Its arguments.
    pub arguments: Value,
}

/// The outcome of one load measurement.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LoadResult {
    /// Concurrent connections.
    pub connections: usize,
    /// Round trips completed in the timed part.
    pub calls: usize,
    /// From the first connection's start to the last connection's last response.
    pub elapsed: Duration,
    /// Median round-trip time.
    pub p50: Duration,
    /// 99th-percentile round-trip time.
    pub p99: Duration,
    /// The server's CPU time per call (user and system, all its threads) over the whole
    /// load, warm-up included, divided by every call made; set by the parent, which sees
    /// the server process (`None` where it could not be read).
    #[serde(default)]
    pub server_cpu_per_call: Option<Duration>,
    /// The whole machine's busy CPU time per call over the same span (every process:
    /// the server, the load generator, a store's server on this machine), divided the
    /// same way; set by the parent. With `n` CPUs, no server can answer more than
    /// `n / machine_cpu_per_call` calls per second on this machine.
    #[serde(default)]
    pub machine_cpu_per_call: Option<Duration>,
}

impl LoadResult {
    /// Round trips per second, all connections together.
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
/// Every connection opens, starts its session (legacy) and warms up on its own task; once
/// all are ready they start together, and each makes round trips back to back until
/// `spec.duration` has passed (or `spec.max_calls`). Legacy sessions are ended (`DELETE`)
/// afterwards, untimed.
///
/// # Errors
/// Any failed connection, session setup or round trip fails the measurement: a benchmark
/// that skips errors measures something else.
pub async fn run_load(addr: SocketAddr, path: &str, spec: &LoadSpec) -> Result<LoadResult, BenchError> {
    let connections = spec.connections.max(1);
    let barrier = Arc::new(Barrier::new(connections + 1));
    let mut tasks = Vec::with_capacity(connections);
    for _ in 0..connections {
        let (barrier, spec, path) = (barrier.clone(), spec.clone(), path.to_owned());
        tasks.push(tokio::spawn(async move {
            let ready = async {
                let mut client = McpClient::connect(addr, &path, spec.era).await?;
                client.start().await?;
                for _ in 0..spec.warmup_calls {
                    client.call_tool(&spec.tool, &spec.arguments).await?;
                }
                Ok::<_, BenchError>(client)
            }
            .await;
            // Wait at the barrier even after a failure, so that the others are not stuck.
            barrier.wait().await;
            let mut client = ready?;
            let started = Instant::now();
            let deadline = started + spec.duration;
            let mut latencies = Vec::with_capacity(4096);
            while Instant::now() < deadline && spec.max_calls.is_none_or(|max| latencies.len() < max) {
                latencies.push(client.call_tool(&spec.tool, &spec.arguments).await?);
            }
            let finished = Instant::now();
            client.close().await?;
            Ok::<_, BenchError>((latencies, started, finished))
        }));
    }
    barrier.wait().await;
    let mut latencies = Vec::new();
    let (mut first, mut last) = (None::<Instant>, None::<Instant>);
    let mut failure = None;
    for task in tasks {
        match task.await.map_err(|e| BenchError::Task(e.to_string())).and_then(|outcome| outcome) {
            Ok((mine, started, finished)) => {
                latencies.extend(mine);
                first = Some(first.map_or(started, |t| t.min(started)));
                last = Some(last.map_or(finished, |t| t.max(finished)));
            }
            Err(error) => {
                failure.get_or_insert(error);
            }
        }
    }
    if let Some(error) = failure {
        return Err(error);
    }
    latencies.sort_unstable();
    let elapsed = match (first, last) {
        (Some(first), Some(last)) => last.saturating_duration_since(first),
        _ => Duration::ZERO,
    };
    Ok(LoadResult {
        connections,
        calls: latencies.len(),
        elapsed,
        p50: quantile(&latencies, 0.50),
        p99: quantile(&latencies, 0.99),
        server_cpu_per_call: None,
        machine_cpu_per_call: None,
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

    #[test]
    fn results_survive_the_trip_through_json() {
        let result = LoadResult {
            connections: 8,
            calls: 12_345,
            elapsed: Duration::from_micros(5_000_123),
            p50: Duration::from_micros(321),
            p99: Duration::from_micros(4_567),
            server_cpu_per_call: None,
            machine_cpu_per_call: Some(Duration::from_micros(250)),
        };
        let line = serde_json::to_string(&result).expect("encode");
        assert_eq!(serde_json::from_str::<LoadResult>(&line).expect("decode"), result);
    }
}
