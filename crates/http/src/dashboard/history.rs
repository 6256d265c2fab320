//! The dashboard's charts: this worker's own metrics sampled every [`INTERVAL`] for the
//! last hour (calls per second, p50 and p99 latency, errors, recoveries), computed from
//! the differences between two Prometheus expositions of the process's recorder.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;

use crate::MetricsRender;

/// How often a point is taken.
pub(super) const INTERVAL: Duration = Duration::from_secs(10);
/// How many points are kept: an hour's.
const POINTS: usize = 360;

/// The request histogram the charts read (`docs/metrics.md`).
const OPERATION: &str = "mcp_server_operation_duration_seconds";
/// The recoveries counter.
const RECOVERIES: &str = "durable_mcp_journal_recoveries_total";

/// One interval of the charts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct Point {
    /// When the interval ended (milliseconds since the epoch).
    pub at_ms: u64,
    /// Requests answered per second.
    pub calls_per_s: f64,
    /// Their median and 99th percentile duration (milliseconds), if any ended.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// Requests that ended in an error.
    pub errors: f64,
    /// Runs this worker recovered.
    pub recoveries: f64,
}

/// The counters one exposition holds, summed over their labels.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Totals {
    calls: f64,
    errors: f64,
    recoveries: f64,
    /// Cumulative request counts by bucket bound (seconds).
    buckets: BTreeMap<OrderedBound, f64>,
}

/// A bucket bound that sorts (`+Inf` last).
#[derive(Debug, Clone, Copy, PartialEq)]
struct OrderedBound(f64);
impl Eq for OrderedBound {}
impl PartialOrd for OrderedBound {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrderedBound {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl Totals {
    /// Read an exposition.
    pub(super) fn read(exposition: &str) -> Totals {
        let mut totals = Totals::default();
        for line in exposition.lines().filter(|line| !line.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            match name.strip_prefix(OPERATION) {
                Some("_count") => {
                    totals.calls += value;
                    if labels.contains("error_type=") {
                        totals.errors += value;
                    }
                }
                Some("_bucket") => {
                    let bound = label(labels, "le").and_then(|le| match le {
                        "+Inf" => Some(f64::INFINITY),
                        le => le.parse().ok(),
                    });
                    if let Some(bound) = bound {
                        *totals.buckets.entry(OrderedBound(bound)).or_insert(0.0) += value;
                    }
                }
                _ if name == RECOVERIES => totals.recoveries += value,
                _ => {}
            }
        }
        totals
    }

    /// The point for the interval from `before` to `self`, `seconds` long, ending `at_ms`.
    fn since(&self, before: &Totals, seconds: f64, at_ms: u64) -> Point {
        let calls = (self.calls - before.calls).max(0.0);
        let deltas: Vec<(f64, f64)> = self
            .buckets
            .iter()
            .map(|(bound, count)| {
                let was = before.buckets.get(bound).copied().unwrap_or(0.0);
                (bound.0, (count - was).max(0.0))
            })
            .collect();
        Point {
            at_ms,
            calls_per_s: calls / seconds.max(f64::EPSILON),
            p50_ms: quantile(&deltas, 0.5),
            p99_ms: quantile(&deltas, 0.99),
            errors: (self.errors - before.errors).max(0.0),
            recoveries: (self.recoveries - before.recoveries).max(0.0),
        }
    }
}

/// The value of label `name` in a Prometheus label set `a="x",le="0.5"}`.
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    labels
        .trim_end_matches('}')
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| key.trim() == name)
        .map(|(_, value)| value.trim_matches('"'))
}

/// The `q` quantile (milliseconds) of cumulative bucket counts `(bound seconds, count)`,
/// interpolated linearly within its bucket; `None` without observations. One beyond the
/// last finite bound is reported as that bound.
fn quantile(cumulative: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = cumulative.last().map(|(_, count)| *count)?;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(bound, count) in cumulative {
        if count >= rank {
            if bound.is_infinite() {
                return Some(lower * 1000.0);
            }
            let within = count - below;
            let fraction = if within > 0.0 {
                (rank - below) / within
            } else {
                1.0
            };
            return Some((lower + (bound - lower) * fraction) * 1000.0);
        }
        if bound.is_finite() {
            lower = bound;
        }
        below = count;
    }
    Some(lower * 1000.0)
}

/// The last hour's points, and the totals the next one is measured from.
#[derive(Default)]
pub(super) struct History {
    state: Mutex<Sampled>,
}

#[derive(Default)]
struct Sampled {
    /// The last sample's totals, and when it was taken.
    last: Option<(Totals, std::time::Instant)>,
    points: VecDeque<Point>,
}

impl History {
    /// Take a sample of `exposition` now.
    pub(super) fn sample(&self, exposition: &str) {
        let totals = Totals::read(exposition);
        let now = std::time::Instant::now();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((before, then)) = &state.last {
            let point = totals.since(
                before,
                now.duration_since(*then).as_secs_f64(),
                durable_mcp_store::now_ms(),
            );
            if state.points.len() >= POINTS {
                state.points.pop_front();
            }
            state.points.push_back(point);
        }
        state.last = Some((totals, now));
    }

    /// The points, oldest first.
    pub(super) fn points(&self) -> Vec<Point> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.points.iter().cloned().collect()
    }
}

/// Sample `render` into `history` every [`INTERVAL`], for as long as the task lives.
pub(super) async fn sampler(history: std::sync::Arc<History>, render: MetricsRender) {
    let mut ticker = tokio::time::interval(INTERVAL);
    loop {
        ticker.tick().await;
        history.sample(&render());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use super::*;

    fn exposition(fast: u32, slow: u32, failed: u32, recoveries: u32) -> String {
        let total = fast + slow;
        format!(
            "# TYPE {OPERATION} histogram\n\
             {OPERATION}_bucket{{mcp_method_name=\"tools/call\",le=\"0.01\"}} {fast}\n\
             {OPERATION}_bucket{{mcp_method_name=\"tools/call\",le=\"0.1\"}} {fast}\n\
             {OPERATION}_bucket{{mcp_method_name=\"tools/call\",le=\"1\"}} {total}\n\
             {OPERATION}_bucket{{mcp_method_name=\"tools/call\",le=\"+Inf\"}} {total}\n\
             {OPERATION}_count{{mcp_method_name=\"tools/call\"}} {}\n\
             {OPERATION}_count{{mcp_method_name=\"tools/call\",error_type=\"tool_error\"}} {failed}\n\
             {RECOVERIES}{{kind=\"rerun\"}} {recoveries}\n",
            total - failed
        )
    }

    #[test]
    fn a_point_is_the_difference_between_two_samples() {
        let before = Totals::read(&exposition(10, 0, 0, 1));
        let after = Totals::read(&exposition(100, 10, 5, 3));
        let point = after.since(&before, 10.0, 7);
        assert_eq!(point.calls_per_s, 10.0);
        assert_eq!(point.errors, 5.0);
        assert_eq!(point.recoveries, 2.0);
        // 90 of 100 new calls took under 10 ms, 10 between 100 ms and 1 s.
        let p50 = point.p50_ms.unwrap();
        assert!(p50 > 0.0 && p50 <= 10.0, "{p50}");
        let p99 = point.p99_ms.unwrap();
        assert!(p99 > 100.0 && p99 <= 1000.0, "{p99}");
    }

    #[test]
    fn an_interval_without_calls_has_no_latency() {
        let same = Totals::read(&exposition(4, 0, 0, 0));
        let point = same.since(&same, 10.0, 7);
        assert_eq!((point.calls_per_s, point.p50_ms), (0.0, None));
    }

    #[test]
    fn history_keeps_the_last_hour() {
        let history = History::default();
        history.sample(&exposition(0, 0, 0, 0));
        assert!(
            history.points().is_empty(),
            "the first sample is the baseline"
        );
        for n in 1..=POINTS as u32 + 5 {
            history.sample(&exposition(n, 0, 0, 0));
        }
        assert_eq!(history.points().len(), POINTS);
    }

    #[test]
    fn a_quantile_past_the_last_bound_is_that_bound() {
        let buckets = [(0.1, 0.0), (1.0, 0.0), (f64::INFINITY, 5.0)];
        assert_eq!(quantile(&buckets, 0.5), Some(1000.0));
    }
}
