//! The report of a run, as markdown ready for `docs/benchmarks.md`.

use std::fmt::Write as _;
use std::time::Duration;

use crate::load::LoadResult;
use crate::store::StoreResult;
use crate::{BenchConfig, REPLAY_BATCH, TOOL};

/// The name of the HTTP baseline in reports.
pub(crate) const RMCP_LABEL: &str = "rmcp StreamableHttpService (baseline)";

/// The store figures of one backend.
#[derive(Debug, Clone)]
pub struct StoreRow {
    /// The backend's label (see [`crate::store_label`]).
    pub backend: String,
    /// What was measured.
    pub result: StoreResult,
}

/// One `tools/call` measurement of one server.
#[derive(Debug, Clone)]
pub struct HttpRow {
    /// The server's label.
    pub server: String,
    /// Whether this is the rmcp baseline.
    pub baseline: bool,
    /// What was measured.
    pub result: LoadResult,
}

/// Everything one run measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// What was asked for.
    pub config: BenchConfig,
    /// When the run started (milliseconds since the Unix epoch).
    pub started_ms: u64,
    /// Store figures, the in-memory backend first.
    pub stores: Vec<StoreRow>,
    /// HTTP figures, grouped by client count.
    pub http: Vec<HttpRow>,
}

impl Report {
    pub(crate) fn new(config: BenchConfig, started_ms: u64, stores: Vec<StoreRow>, http: Vec<HttpRow>) -> Self {
        Self { config, started_ms, stores, http }
    }

    /// The report as markdown: a line saying when and how, then three tables (appends,
    /// replays, `tools/call`), each figure with its ratio to the baseline beside it
    /// (the figure divided by the baseline's: above 1 is more events per second, or more
    /// milliseconds).
    pub fn to_markdown(&self) -> String {
        let c = &self.config;
        let mut out = String::new();
        let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
        let build = if cfg!(debug_assertions) { "DEBUG build (figures meaningless)" } else { "release build" };
        let _ = writeln!(
            out,
            "Measured {} on {cpus} CPUs, {build}. Appends: {} events per writer; replays: median of {} \
             reads of the whole stream, `read_after` {REPLAY_BATCH} at a time; `tools/call` of `{TOOL}`: {} \
             round trips per client after {} untimed, each client on its own keep-alive connection and \
             session. Ratios: the figure divided by the baseline's.\n",
            utc(self.started_ms),
            c.events_per_writer,
            c.replay_runs,
            c.requests_per_client,
            c.warmup_per_client,
        );
        let mut truncated = false;
        self.appends(&mut out, &mut truncated);
        self.replays(&mut out);
        self.calls(&mut out, &mut truncated);
        if truncated {
            let _ = writeln!(
                out,
                "\n† stopped at the time limit ({} s per measurement) before the requested count.",
                c.time_limit.as_secs()
            );
        }
        out
    }

    fn appends(&self, out: &mut String, truncated: &mut bool) {
        let Some(base) = self.stores.first() else { return };
        let writers = self.config.writers;
        let _ = writeln!(out, "**Appends** (events committed per second; higher is better)\n");
        let _ = writeln!(
            out,
            "| backend | 1 writer | vs memory | {writers} writers | vs memory | {writers} writers, one-append batches | vs memory |"
        );
        let _ = writeln!(out, "|---|--:|--:|--:|--:|--:|--:|");
        for row in &self.stores {
            let (one, many, batched) = (&row.result.one_writer, &row.result.many_writers, &row.result.many_writers_batched);
            *truncated |= one.truncated || many.truncated || batched.truncated;
            let _ = writeln!(
                out,
                "| {} | {}{} | {} | {}{} | {} | {}{} | {} |",
                row.backend,
                count(one.per_second()),
                mark(one.truncated),
                ratio(one.per_second(), base.result.one_writer.per_second()),
                count(many.per_second()),
                mark(many.truncated),
                ratio(many.per_second(), base.result.many_writers.per_second()),
                count(batched.per_second()),
                mark(batched.truncated),
                ratio(batched.per_second(), base.result.many_writers_batched.per_second()),
            );
        }
    }

    fn replays(&self, out: &mut String) {
        let Some(base) = self.stores.first() else { return };
        let _ = writeln!(out, "\n**Replay** of a closed stream (milliseconds; lower is better)\n");
        let mut head = String::from("| backend |");
        let mut rule = String::from("|---|");
        for replay in &base.result.replay {
            let _ = write!(head, " {} events | vs memory |", thousands(replay.events));
            rule.push_str("--:|--:|");
        }
        let _ = writeln!(out, "{head}\n{rule}");
        for row in &self.stores {
            let _ = write!(out, "| {} |", row.backend);
            for (replay, base) in row.result.replay.iter().zip(&base.result.replay) {
                let _ = write!(out, " {} | {} |", millis(replay.median), ratio(secs(replay.median), secs(base.median)));
            }
            out.push('\n');
        }
    }

    fn calls(&self, out: &mut String, truncated: &mut bool) {
        if self.http.is_empty() {
            return;
        }
        let _ = writeln!(out, "\n**`tools/call` over HTTP** (round trips per second, higher is better; latency in milliseconds, lower is better)\n");
        let _ = writeln!(out, "| server | clients | calls/s | vs rmcp | p50 | vs rmcp | p99 | vs rmcp |");
        let _ = writeln!(out, "|---|--:|--:|--:|--:|--:|--:|--:|");
        for row in &self.http {
            let r = &row.result;
            *truncated |= r.truncated;
            let base = self.http.iter().find(|b| b.baseline && b.result.clients == r.clients).map(|b| &b.result);
            let vs = |value: f64, pick: fn(&LoadResult) -> f64| base.map_or_else(|| "–".to_owned(), |b| ratio(value, pick(b)));
            let _ = writeln!(
                out,
                "| {} | {} | {}{} | {} | {} | {} | {} | {} |",
                row.server,
                r.clients,
                count(r.per_second()),
                mark(r.truncated),
                vs(r.per_second(), LoadResult::per_second),
                millis(r.p50),
                vs(secs(r.p50), |b| secs(b.p50)),
                millis(r.p99),
                vs(secs(r.p99), |b| secs(b.p99)),
            );
        }
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn mark(truncated: bool) -> &'static str {
    if truncated { " †" } else { "" }
}

/// A rate: whole numbers with thousands separators (one decimal below 100).
fn count(value: f64) -> String {
    if value < 100.0 {
        return format!("{value:.1}");
    }
    group(&format!("{value:.0}"))
}

/// A count with thousands separators.
fn thousands(value: usize) -> String {
    group(&value.to_string())
}

/// Digits grouped by three.
fn group(digits: &str) -> String {
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// Milliseconds with three significant digits or so.
fn millis(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    match ms {
        ms if ms >= 100.0 => format!("{ms:.0}"),
        ms if ms >= 10.0 => format!("{ms:.1}"),
        ms if ms >= 1.0 => format!("{ms:.2}"),
        ms => format!("{ms:.3}"),
    }
}

/// `value / base` with two significant digits (at least two decimals below 10).
fn ratio(value: f64, base: f64) -> String {
    if base.is_nan() || base <= 0.0 || !value.is_finite() {
        return "–".to_owned();
    }
    let r = value / base;
    let decimals = match r {
        r if r >= 100.0 => 0,
        r if r >= 10.0 => 1,
        r if r > 0.0 => (1 - r.log10().floor() as i32).max(2) as usize,
        _ => 2,
    };
    format!("{r:.decimals$}×")
}

/// `YYYY-MM-DD HH:MM UTC` for milliseconds since the Unix epoch.
fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02} UTC", rest / 3600, rest % 3600 / 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_formatted_for_people() {
        assert_eq!(count(23_517.4), "23,517");
        assert_eq!(count(1_234_567.0), "1,234,567");
        assert_eq!(count(190.0), "190");
        assert_eq!(count(7.25), "7.2");
        assert_eq!(thousands(10_000), "10,000");
        assert_eq!(thousands(100), "100");
        assert_eq!(millis(Duration::from_micros(27_410)), "27.4");
        assert_eq!(millis(Duration::from_micros(123)), "0.123");
        assert_eq!(ratio(1.0, 1.0), "1.00×");
        assert_eq!(ratio(21.0, 10_000.0), "0.0021×");
        assert_eq!(ratio(1.5, 0.0), "–");
        assert_eq!(ratio(250.0, 2.0), "125×");
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc(1_709_210_096_000), "2024-02-29 12:34 UTC");
    }
}
