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
    /// Drop the connection on some timed calls and re-send them (`None`: never).
    pub drops: Option<Drops>,
}

/// Dropped connections: on `percent` % of the timed calls (drawn at random), the client
/// writes its `tools/call`, closes the connection (at once, or after a random delay below
/// `max_delay`, half of the drops each), opens a new one and re-sends the same request
/// (same session, same JSON-RPC id). The call's latency runs from the first write to the
/// re-sent request's response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drops {
    /// Share of the timed calls dropped and re-sent, in percent (0 to 100).
    pub percent: u32,
    /// The longest delay between writing a dropped request and closing its connection.
    pub max_delay: Duration,
    /// Seed of the draws (connection `i` draws from `seed + i`), so that a run can be
    /// repeated call for call.
    pub seed: u64,
}

impl Drops {
    /// Whether the next call is dropped, and after which delay: `None` for a call made
    /// normally.
    fn draw(&self, rng: &mut SplitMix) -> Option<Duration> {
        if rng.below(100) >= u64::from(self.percent) {
            return None;
        }
        let max_us = u64::try_from(self.max_delay.as_micros()).unwrap_or(u64::MAX);
        // Half at once (the server may not even have read the request), half a little
        // later (it may be running it, or writing its response).
        Some(if max_us == 0 || rng.below(2) == 0 {
            Duration::ZERO
        } else {
            Duration::from_micros(rng.below(max_us))
        })
    }
}

/// A small deterministic random source (SplitMix64): the draws of [`Drops`] need no
/// more, and a seed repeats a run.
#[derive(Debug, Clone)]
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform enough in `0..n` for a benchmark's draws (`n` > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
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
    /// The longest round trip.
    #[serde(default)]
    pub max: Duration,
    /// Timed calls whose connection was dropped and whose request was re-sent (see
    /// [`Drops`]); they are counted in `calls`, with their latency from the first write.
    #[serde(default)]
    pub resent: usize,
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
pub async fn run_load(
    addr: SocketAddr,
    path: &str,
    spec: &LoadSpec,
) -> Result<LoadResult, BenchError> {
    let connections = spec.connections.max(1);
    let barrier = Arc::new(Barrier::new(connections + 1));
    let mut tasks = Vec::with_capacity(connections);
    for connection in 0..connections {
        let (barrier, spec, path) = (barrier.clone(), spec.clone(), path.to_owned());
        let mut rng = SplitMix(
            spec.drops
                .map_or(0, |drops| drops.seed.wrapping_add(connection as u64)),
        );
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
            let (mut latencies, mut resent) = (Vec::with_capacity(4096), 0);
            while Instant::now() < deadline && spec.max_calls.is_none_or(|max| latencies.len() < max) {
                let latency = match spec.drops.and_then(|drops| drops.draw(&mut rng)) {
                    None => client.call_tool(&spec.tool, &spec.arguments).await?,
                    Some(delay) => {
                        resent += 1;
                        // Only the drop is deliberate: a re-sent request must be answered.
                        client.call_tool_dropped(&spec.tool, &spec.arguments, delay).await.map_err(|error| {
                            BenchError::Check(format!(
                                "a tools/call re-sent after its connection was dropped ({} µs after writing it): {error}",
                                delay.as_micros()
                            ))
                        })?
                    }
                };
                latencies.push(latency);
            }
            let finished = Instant::now();
            client.close().await?;
            Ok::<_, BenchError>((latencies, resent, started, finished))
        }));
    }
    barrier.wait().await;
    let (mut latencies, mut resent) = (Vec::new(), 0);
    let (mut first, mut last) = (None::<Instant>, None::<Instant>);
    let mut failure = None;
    for task in tasks {
        match task
            .await
            .map_err(|e| BenchError::Task(e.to_string()))
            .and_then(|outcome| outcome)
        {
            Ok((mine, mine_resent, started, finished)) => {
                latencies.extend(mine);
                resent += mine_resent;
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
        max: latencies.last().copied().unwrap_or_default(),
        resent,
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
    fn drops_come_at_the_share_asked_for_half_of_them_at_once() {
        let drops = Drops {
            percent: 10,
            max_delay: Duration::from_millis(5),
            seed: 7,
        };
        let mut rng = SplitMix(drops.seed);
        let draws: Vec<Option<Duration>> = (0..100_000).map(|_| drops.draw(&mut rng)).collect();
        let dropped: Vec<Duration> = draws.iter().flatten().copied().collect();
        assert!(
            (9_000..11_000).contains(&dropped.len()),
            "{} of 100,000 dropped",
            dropped.len()
        );
        let at_once = dropped.iter().filter(|d| d.is_zero()).count();
        assert!(
            (4_000..6_000).contains(&at_once),
            "{at_once} of {} at once",
            dropped.len()
        );
        assert!(dropped.iter().all(|d| *d < drops.max_delay));
        let mut again = SplitMix(drops.seed);
        assert!(
            (0..1_000)
                .map(|_| drops.draw(&mut again))
                .eq(draws[..1_000].iter().copied()),
            "a seed repeats the draws"
        );
        let never = Drops {
            percent: 0,
            ..drops
        };
        assert!((0..1_000).all(|_| never.draw(&mut rng).is_none()));
    }

    #[test]
    fn results_survive_the_trip_through_json() {
        let result = LoadResult {
            connections: 8,
            calls: 12_345,
            elapsed: Duration::from_micros(5_000_123),
            p50: Duration::from_micros(321),
            p99: Duration::from_micros(4_567),
            max: Duration::from_micros(9_876),
            resent: 12,
            server_cpu_per_call: None,
            machine_cpu_per_call: Some(Duration::from_micros(250)),
        };
        let line = serde_json::to_string(&result).expect("encode");
        assert_eq!(
            serde_json::from_str::<LoadResult>(&line).expect("decode"),
            result
        );
    }
}
