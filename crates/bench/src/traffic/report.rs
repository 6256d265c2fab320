//! The traffic benchmark's report, as markdown ready for `docs/benchmarks.md`.

use std::fmt::Write as _;
use std::time::Duration;

use super::{Measured, Pair, StoreTraffic, Sustained, TrafficConfig, TrafficPart};
use crate::TOOL;
use crate::report::{count, cpu_model, millis, ratio, seconds, thousands, utc};

/// Issue 28's bound on p99 and max with drops, against the run without drops.
pub const DROPS_TARGET: f64 = 3.0;
/// Issue 28's bound on p99 with retention on, against retention off.
pub const RETENTION_TARGET: f64 = 2.0;
/// Issue 28's bound on the SQLite WAL under sustained load, bytes.
pub const WAL_TARGET_BYTES: u64 = 64 << 20;
/// Issue 28's bound on the server's memory during and after sustained load, KiB.
pub const RSS_TARGET_KIB: u64 = 100 << 10;

/// Everything one traffic run measured.
#[derive(Debug, Clone)]
pub struct TrafficReport {
    /// What was asked for.
    pub config: TrafficConfig,
    /// When the run started (milliseconds since the Unix epoch).
    pub started_ms: u64,
    /// When it ended.
    pub finished_ms: u64,
    /// The commit measured and whether tracked files had uncommitted changes, if known.
    pub commit: Option<(String, bool)>,
    /// How the children were pinned to CPUs (a sentence).
    pub pinning: String,
    /// Per store, in the order measured.
    pub stores: Vec<StoreTraffic>,
    /// Runs that failed (the others went on).
    pub failures: Vec<String>,
    /// Every child process the run started (all gone once it returned).
    pub child_pids: Vec<u32>,
}

impl TrafficReport {
    /// The report as markdown: when, what and how, then one table per part with the
    /// issue's targets beside the figures, then the failures.
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        self.preamble(&mut out);
        if self.config.runs(TrafficPart::Drops) {
            self.drops(&mut out);
        }
        if self.config.runs(TrafficPart::Retention) {
            self.retention(&mut out);
        }
        if self.config.runs(TrafficPart::Sustained) {
            self.sustained(&mut out);
        }
        for failure in &self.failures {
            let _ = writeln!(out, "FAILED: {failure}\n");
        }
        out
    }

    fn preamble(&self, out: &mut String) {
        let c = &self.config;
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let model = cpu_model().map(|m| format!(" ({m})")).unwrap_or_default();
        let build = if cfg!(debug_assertions) {
            "DEBUG build (figures meaningless)"
        } else {
            "release build"
        };
        if let Some(command) = &c.command_line {
            let _ = writeln!(out, "```sh\n{command}\n```\n");
        }
        let commit = match &self.commit {
            Some((commit, false)) => format!("commit `{commit}`"),
            Some((commit, true)) => format!("commit `{commit}` with uncommitted changes"),
            None => "an unknown commit".to_owned(),
        };
        let stores = if c.stores.is_empty() {
            "a temporary SQLite file (synchronous=FULL), a new one for every server".to_owned()
        } else {
            "the store of each row, the same store for all its runs".to_owned()
        };
        let _ = writeln!(
            out,
            "Measured {} to {} at {commit} on {cpus} CPUs{model}, {build}; {}. `tools/call` of `{TOOL}` in the legacy era \
             (2025-11-25), {} connections, each one keep-alive HTTP/1.1 connection and its own session, closed loop, \
             {} untimed calls per connection first; every run on a durable-mcp server started for it, on {stores}.\n",
            utc(self.started_ms),
            utc(self.finished_ms),
            self.pinning,
            c.connections,
            c.warmup_calls,
        );
    }

    fn drops(&self, out: &mut String) {
        let c = &self.config;
        let _ = writeln!(
            out,
            "**Drops and re-sends** ({} each; in the second run {} % of the calls close their connection after writing the request, \
             at once or after a random delay below {}, and re-send the same request (same session, same JSON-RPC id) on a new \
             connection; a re-sent call's latency runs from its first write to the re-sent request's response. Takeovers: \
             `{}` of the server's `/metrics`, before and after the load. Target: p99 and max within {DROPS_TARGET}× of the run \
             without drops, 0 takeovers.)\n",
            seconds(c.drop_duration),
            c.drop_percent,
            seconds(c.drop_max_delay),
            super::TAKEOVERS,
        );
        let _ = writeln!(
            out,
            "| store | run | calls/s | re-sent | p50 ms | p99 ms | max ms | journal takeovers |"
        );
        let _ = writeln!(out, "|---|---|--:|--:|--:|--:|--:|--:|");
        let rows: Vec<(&str, &Pair)> = self
            .stores
            .iter()
            .filter_map(|s| Some((s.store.as_str(), s.drops.as_ref()?)))
            .collect();
        for (store, pair) in &rows {
            measured_row(out, store, "no drops", &pair.base);
            measured_row(
                out,
                store,
                &format!("{} % dropped", c.drop_percent),
                &pair.test,
            );
        }
        let _ = writeln!(
            out,
            "\n| store | p99 with drops / without | max with drops / without | takeovers with drops | target met |"
        );
        let _ = writeln!(out, "|---|--:|--:|--:|---|");
        for (store, pair) in &rows {
            let (Ok(base), Ok(test)) = (&pair.base, &pair.test) else {
                let _ = writeln!(out, "| {store} | – | – | – | failed |");
                continue;
            };
            let (p99, max) = (
                factor(test.load.p99, base.load.p99),
                factor(test.load.max, base.load.max),
            );
            let takeovers = test.takeovers_total();
            let met = p99 <= DROPS_TARGET && max <= DROPS_TARGET && takeovers == 0;
            let _ = writeln!(
                out,
                "| {store} | {} | {} | {} | {} |",
                ratio(secs(test.load.p99), secs(base.load.p99)),
                ratio(secs(test.load.max), secs(base.load.max)),
                takeovers_cell(test),
                yes_no(met)
            );
        }
        out.push('\n');
    }

    fn retention(&self, out: &mut String) {
        let c = &self.config;
        let (age, interval) = (c.max_stream_age_secs.max(1), c.prune_interval_secs.max(1));
        let _ = writeln!(
            out,
            "**Retention** ({} each; first with retention off, then deleting finished streams older than {age} s every {interval} s. \
             Streams removed: `{}{{kind=\"streams\"}}` of the server's `/metrics` during the load, and per prune (the \
             server's prunes during the load: its store's `prune` calls). Target: p99 within {RETENTION_TARGET}× of \
             retention off, with streams removed.)\n",
            seconds(c.retention_duration),
            super::RETENTION_REMOVED,
        );
        let _ = writeln!(
            out,
            "| store | retention | calls/s | p50 ms | p99 ms | max ms | prunes | streams removed | per prune |"
        );
        let _ = writeln!(out, "|---|---|--:|--:|--:|--:|--:|--:|--:|");
        let rows: Vec<(&str, &Pair)> = self
            .stores
            .iter()
            .filter_map(|s| Some((s.store.as_str(), s.retention.as_ref()?)))
            .collect();
        for (store, pair) in &rows {
            retention_row(out, store, "off", &pair.base);
            retention_row(
                out,
                store,
                &format!("{age} s, every {interval} s"),
                &pair.test,
            );
        }
        let _ = writeln!(
            out,
            "\n| store | p99 on / off | max on / off | target met |"
        );
        let _ = writeln!(out, "|---|--:|--:|---|");
        for (store, pair) in &rows {
            let (Ok(off), Ok(on)) = (&pair.base, &pair.test) else {
                let _ = writeln!(out, "| {store} | – | – | failed |");
                continue;
            };
            // Nothing removed: every prune failed, or found nothing to remove; either way
            // the run did not measure what it is for.
            let met =
                factor(on.load.p99, off.load.p99) <= RETENTION_TARGET && on.streams_removed > 0;
            let _ = writeln!(
                out,
                "| {store} | {} | {} | {} |",
                ratio(secs(on.load.p99), secs(off.load.p99)),
                ratio(secs(on.load.max), secs(off.load.max)),
                yes_no(met)
            );
        }
        out.push('\n');
    }

    fn sustained(&self, out: &mut String) {
        let c = &self.config;
        let _ = writeln!(
            out,
            "**Sustained load** ({} at full speed, the server with metrics off, then {} without load; the server's `VmRSS` \
             and the size of the SQLite `-wal` file read every {} (below: about a dozen of the readings; the one at the end \
             of the load is taken once the load generator has ended its sessions with `DELETE`, which deletes their \
             streams). Target: WAL under {} MB, memory under {} MB during and after.)\n",
            seconds(c.sustained_duration),
            seconds(c.after),
            seconds(c.sample_every),
            WAL_TARGET_BYTES >> 20,
            RSS_TARGET_KIB >> 10,
        );
        let after = seconds(c.after);
        let _ = writeln!(
            out,
            "| store | calls/s | p99 ms | max ms | WAL max during load | WAL at the end | RSS before | RSS max during load | RSS {after} after | target met |"
        );
        let _ = writeln!(out, "|---|--:|--:|--:|--:|--:|--:|--:|--:|---|");
        let mut series = Vec::new();
        for store in &self.stores {
            let Some(sustained) = &store.sustained else {
                continue;
            };
            let Ok(s) = sustained else {
                let _ = writeln!(out, "| {} | failed | | | | | | | | |", store.store);
                continue;
            };
            let wal_ok = s.wal_max_loading().is_none_or(|max| max < WAL_TARGET_BYTES)
                && s.wal_at_end().is_none_or(|end| end < WAL_TARGET_BYTES);
            let rss_ok = s.rss_max_loading().is_some_and(|kib| kib < RSS_TARGET_KIB)
                && s.rss_at_end().is_none_or(|kib| kib < RSS_TARGET_KIB);
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                store.store,
                count(s.load.per_second()),
                millis(s.load.p99),
                millis(s.load.max),
                s.wal_max_loading()
                    .map_or_else(|| "–".to_owned(), megabytes),
                s.wal_at_end().map_or_else(|| "–".to_owned(), megabytes),
                megabytes(s.rss_before_kib << 10),
                s.rss_max_loading()
                    .map_or_else(|| "–".to_owned(), |kib| megabytes(kib << 10)),
                s.rss_at_end()
                    .map_or_else(|| "–".to_owned(), |kib| megabytes(kib << 10)),
                yes_no(wal_ok && rss_ok),
            );
            series.push((store.store.as_str(), s));
        }
        for (store, s) in series {
            let _ = writeln!(out, "\n{}", timeline(store, s));
        }
        out.push('\n');
    }
}

/// A row of calls/s, re-sent, p50, p99, max and takeovers (or "failed").
fn measured_row(out: &mut String, store: &str, run: &str, measured: &Result<Measured, String>) {
    match measured {
        Ok(m) => {
            let _ = writeln!(
                out,
                "| {store} | {run} | {} | {} | {} | {} | {} | {} |",
                count(m.load.per_second()),
                thousands(m.load.resent),
                millis(m.load.p50),
                millis(m.load.p99),
                millis(m.load.max),
                takeovers_cell(m)
            );
        }
        Err(_) => {
            let _ = writeln!(out, "| {store} | {run} | failed | | | | | |");
        }
    }
}

fn retention_row(out: &mut String, store: &str, run: &str, measured: &Result<Measured, String>) {
    match measured {
        Ok(m) => {
            let per_prune = if m.prunes == 0 {
                "–".to_owned()
            } else {
                thousands((m.streams_removed as f64 / m.prunes as f64).round() as usize)
            };
            let _ = writeln!(
                out,
                "| {store} | {run} | {} | {} | {} | {} | {} | {} | {per_prune} |",
                count(m.load.per_second()),
                millis(m.load.p50),
                millis(m.load.p99),
                millis(m.load.max),
                m.prunes,
                thousands(usize::try_from(m.streams_removed).unwrap_or(usize::MAX)),
            );
        }
        Err(_) => {
            let _ = writeln!(out, "| {store} | {run} | failed | | | | | | |");
        }
    }
}

/// `0`, or the total with its sources: `7 (expired 2, resent 5)`.
fn takeovers_cell(m: &Measured) -> String {
    let total = m.takeovers_total();
    if total == 0 {
        return "0".to_owned();
    }
    let by: Vec<String> = m
        .takeovers
        .iter()
        .map(|(from, n)| format!("{} {n}", if from.is_empty() { "?" } else { from }))
        .collect();
    format!("{total} ({})", by.join(", "))
}

/// About a dozen readings of a sustained load (the end of the load and the last among
/// them), as one line.
fn timeline(store: &str, s: &Sustained) -> String {
    let step = (s.samples.len() / 12).max(1);
    let end_of_load = s.samples.iter().rposition(|p| p.loading);
    let points: Vec<String> = s
        .samples
        .iter()
        .enumerate()
        .filter(|(i, _)| i % step == 0 || Some(*i) == end_of_load || *i + 1 == s.samples.len())
        .map(|(i, p)| {
            let wal = p
                .wal_bytes
                .map(|b| format!(", WAL {}", megabytes(b)))
                .unwrap_or_default();
            let when = if Some(i) == end_of_load {
                " (end of load)"
            } else if p.loading {
                ""
            } else {
                " (idle)"
            };
            format!(
                "{:.0} s{when}: RSS {}{wal}",
                p.at.as_secs_f64(),
                megabytes(p.rss_kib << 10)
            )
        })
        .collect();
    format!("{store}, readings: {}.", points.join("; "))
}

/// Bytes as `12.3 MB` (MiB).
fn megabytes(bytes: u64) -> String {
    let mb = bytes as f64 / f64::from(1u32 << 20);
    if mb >= 100.0 {
        format!("{mb:.0} MB")
    } else {
        format!("{mb:.1} MB")
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// `value / base`, infinite for a zero base.
fn factor(value: Duration, base: Duration) -> f64 {
    if base.is_zero() {
        f64::INFINITY
    } else {
        secs(value) / secs(base)
    }
}

fn yes_no(met: bool) -> &'static str {
    if met { "yes" } else { "**no**" }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::traffic::Sample;
    use crate::{LoadResult, traffic::StoreTraffic};

    fn load(calls: usize, p99_ms: u64, max_ms: u64, resent: usize) -> LoadResult {
        LoadResult {
            connections: 16,
            calls,
            elapsed: Duration::from_secs(10),
            p50: Duration::from_millis(2),
            p99: Duration::from_millis(p99_ms),
            max: Duration::from_millis(max_ms),
            resent,
            server_cpu_per_call: None,
            machine_cpu_per_call: None,
        }
    }

    fn measured(load: LoadResult, takeovers: Vec<(&str, u64)>, streams_removed: u64) -> Measured {
        let prunes = streams_removed.min(1) * 8;
        Measured {
            load,
            takeovers: takeovers
                .into_iter()
                .map(|(k, n)| (k.to_owned(), n))
                .collect(),
            streams_removed,
            prunes,
        }
    }

    fn report() -> TrafficReport {
        let config = TrafficConfig::new(crate::Executables::beside(PathBuf::from("/nonexistent")));
        let samples = vec![
            Sample {
                at: Duration::from_secs(1),
                loading: true,
                rss_kib: 30 << 10,
                wal_bytes: Some(10 << 20),
            },
            Sample {
                at: Duration::from_secs(2),
                loading: true,
                rss_kib: 50 << 10,
                wal_bytes: Some(80 << 20),
            },
            Sample {
                at: Duration::from_secs(32),
                loading: false,
                rss_kib: 40 << 10,
                wal_bytes: Some(1 << 20),
            },
        ];
        TrafficReport {
            config,
            started_ms: 0,
            finished_ms: 60_000,
            commit: Some(("abc".into(), false)),
            pinning: "pinned".into(),
            stores: vec![StoreTraffic {
                store: "sqlite".into(),
                sqlite: true,
                drops: Some(Pair {
                    base: Ok(measured(load(30_000, 10, 20, 0), vec![], 0)),
                    test: Ok(measured(
                        load(28_000, 25, 5_000, 2_800),
                        vec![("expired", 2), ("resent", 5)],
                        0,
                    )),
                }),
                retention: Some(Pair {
                    base: Ok(measured(load(60_000, 10, 20, 0), vec![], 0)),
                    test: Err("it broke".into()),
                }),
                sustained: Some(Ok(Sustained {
                    load: load(360_000, 12, 40, 0),
                    rss_before_kib: 20 << 10,
                    samples,
                })),
            }],
            failures: vec!["sqlite, retention on: it broke".into()],
            child_pids: Vec::new(),
        }
    }

    #[test]
    fn the_tables_show_ratios_targets_and_failures() {
        let markdown = report().to_markdown();
        for needle in [
            "| sqlite | no drops | 3,000 | 0 | 2.00 | 10.0 | 20.0 | 0 |",
            "| sqlite | 10 % dropped | 2,800 | 2,800 | 2.00 | 25.0 | 5000 | 7 (expired 2, resent 5) |",
            "| sqlite | 2.50× | 250× | 7 (expired 2, resent 5) | **no** |",
            "| sqlite | off | 6,000 | 2.00 | 10.0 | 20.0 | 0 | 0 | – |",
            "| sqlite | 5 s, every 5 s | failed |",
            "| sqlite | – | – | failed |",
            "| sqlite | 36,000 | 12.0 | 40.0 | 80.0 MB | 1.0 MB | 20.0 MB | 50.0 MB | 40.0 MB | **no** |",
            "RSS 30 s after",
            "32 s (idle): RSS 40.0 MB, WAL 1.0 MB",
            "FAILED: sqlite, retention on: it broke",
        ] {
            assert!(
                markdown.contains(needle),
                "{needle:?} missing from\n{markdown}"
            );
        }
    }

    #[test]
    fn targets_hold_when_every_figure_is_within_its_bound() {
        let mut report = report();
        let store = &mut report.stores[0];
        store.drops = Some(Pair {
            base: Ok(measured(load(1, 10, 20, 0), vec![], 0)),
            test: Ok(measured(load(1, 29, 59, 1), vec![], 0)),
        });
        if let Some(Ok(s)) = &mut store.sustained {
            s.samples[1].wal_bytes = Some(63 << 20);
        }
        store.retention = Some(Pair {
            base: Ok(measured(load(1, 10, 20, 0), vec![], 0)),
            test: Ok(measured(load(1, 19, 90, 0), vec![], 40_000)),
        });
        let markdown = report.to_markdown();
        assert!(
            markdown.contains("| sqlite | 2.90× | 2.95× | 0 | yes |"),
            "{markdown}"
        );
        assert!(
            markdown.contains(
                "| sqlite | 5 s, every 5 s | 0.1 | 2.00 | 19.0 | 90.0 | 8 | 40,000 | 5,000 |"
            ),
            "{markdown}"
        );
        assert!(
            markdown.contains("| sqlite | 1.90× | 4.50× | yes |"),
            "{markdown}"
        );
        assert!(
            markdown.contains("| 63.0 MB | 1.0 MB | 20.0 MB | 50.0 MB | 40.0 MB | yes |"),
            "{markdown}"
        );
    }
}
