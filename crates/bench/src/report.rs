//! The report of a run, as markdown ready for `docs/benchmarks.md`.

use std::fmt::{self, Write as _};
use std::time::Duration;

use crate::client::Era;
use crate::counters::Counted;
use crate::growth::GrowthRow;
use crate::load::LoadResult;
use crate::plot::{self, Plot};
use crate::store::StoreResult;
use crate::{BenchConfig, REPLAY_BATCH, TOOL};

/// The name of the HTTP baseline in reports.
pub(crate) const RMCP_LABEL: &str = "stock rmcp (StreamableHttpService)";

/// The name of the Python baseline in reports.
pub(crate) const PYTHON_LABEL: &str = "Python SDK + mcp-persist SQLite";

/// The store figures of one backend.
#[derive(Debug, Clone)]
pub struct StoreRow {
    /// The backend's label (see [`crate::store_label`]).
    pub backend: String,
    /// What was measured.
    pub result: StoreResult,
}

/// What a server measured over HTTP is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    /// Stock rmcp: the baseline of every ratio.
    Rmcp,
    /// The Python SDK with mcp-persist: the second baseline.
    Python,
    /// durable-mcp on one store.
    Durable,
    /// `durable-mcp proxy` on one store, in front of the handler of `durable-mcp, memory`
    /// over stdio (not measured for memory growth: each idle session would be a process).
    Proxy,
}

/// The `tools/call` measurements of one server in one era with one connection count.
#[derive(Debug, Clone)]
pub struct HttpRow {
    /// The server's label.
    pub server: String,
    /// What it is.
    pub kind: ServerKind,
    /// The protocol era of the clients.
    pub era: Era,
    /// Concurrent connections.
    pub connections: usize,
    /// One result per run that succeeded.
    pub runs: Vec<LoadResult>,
    /// The store's counters over each run whose counters were read (durable-mcp only).
    pub counted: Vec<Counted>,
}

impl HttpRow {
    /// The median over the runs of calls per second.
    pub fn per_second(&self) -> f64 {
        median(self.runs.iter().map(LoadResult::per_second).collect())
    }

    /// The median over the runs of the p50 latency.
    pub fn p50(&self) -> Duration {
        Duration::from_secs_f64(median(self.runs.iter().map(|r| secs(r.p50)).collect()))
    }

    /// The median over the runs of the p99 latency.
    pub fn p99(&self) -> Duration {
        Duration::from_secs_f64(median(self.runs.iter().map(|r| secs(r.p99)).collect()))
    }

    /// The median over the runs of the server's CPU time per call, if every run has it.
    pub fn server_cpu_per_call(&self) -> Option<Duration> {
        self.median_of(|r| r.server_cpu_per_call)
    }

    /// The median over the runs of the whole machine's busy CPU time per call, if every run
    /// has it.
    pub fn machine_cpu_per_call(&self) -> Option<Duration> {
        self.median_of(|r| r.machine_cpu_per_call)
    }

    fn median_of(&self, figure: fn(&LoadResult) -> Option<Duration>) -> Option<Duration> {
        let values: Option<Vec<f64>> = self.runs.iter().map(|r| figure(r).map(secs)).collect();
        values
            .filter(|v| !v.is_empty())
            .map(|v| Duration::from_secs_f64(median(v)))
    }
}

/// The median of `values` (the mean of the middle two for an even count; 0 when empty).
fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// Whether the Python baseline was part of the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PythonStatus {
    /// Measured, with this interpreter.
    Measured(String),
    /// Not measured: why, and how to get it.
    Missing(String),
    /// Turned off.
    Off,
}

/// Everything one run measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// What was asked for.
    pub config: BenchConfig,
    /// When the run started (milliseconds since the Unix epoch).
    pub started_ms: u64,
    /// When it ended.
    pub finished_ms: u64,
    /// The commit measured (`git rev-parse`) and whether tracked files had uncommitted
    /// changes, if known.
    pub commit: Option<(String, bool)>,
    /// How the children were pinned to CPUs (a sentence).
    pub pinning: String,
    /// The machine's CPUs (as this process may use them) and whether each server was pinned
    /// to one of them: what the CPU-per-call figures are bounds against.
    pub cpus: Cpus,
    /// Store figures, the in-memory backend first.
    pub stores: Vec<StoreRow>,
    /// `tools/call` figures.
    pub http: Vec<HttpRow>,
    /// Resident memory with idle sessions.
    pub growth: Vec<GrowthRow>,
    /// Whether stock rmcp answered a 2026-07-28 `tools/call` (`Err`: what it answered
    /// instead); `None` when that was not tried.
    pub rmcp_modern: Option<Result<(), String>>,
    /// The Python baseline.
    pub python: PythonStatus,
    /// Measurements that failed (the run went on without them).
    pub failures: Vec<String>,
    /// What each store's counters are, where that needs saying (one line per server).
    pub counter_notes: Vec<String>,
    /// Whether `perf` counted the machine's fsyncs around each load.
    pub kernel_syncs: bool,
    /// Every child process the run started (all gone once it returned).
    pub child_pids: Vec<u32>,
}

/// The CPUs a run's servers had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cpus {
    /// CPUs on the machine (this process's `available_parallelism`).
    pub machine: usize,
    /// Whether every server under test was pinned to one CPU.
    pub server_pinned: bool,
}

impl Cpus {
    /// The CPUs of this machine, servers pinned as `pinning` says.
    pub fn detect(server_pinned: bool) -> Self {
        Self {
            machine: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            server_pinned,
        }
    }

    /// The most calls per second the CPUs allow `row`'s server at its measured CPU per
    /// call, and what limits it: one connection makes one call at a time, so all of a
    /// call's work (the server's, the load generator's, a store server's) is on its path:
    /// 1 s ÷ the machine's CPU per call; with more connections, the lower of the server's
    /// CPUs ÷ its own CPU per call and the machine's CPUs ÷ the machine's CPU per call.
    /// `None` without the figures.
    pub fn bound(&self, row: &HttpRow) -> Option<(f64, Limit)> {
        let machine = secs(row.machine_cpu_per_call()?);
        if machine <= 0.0 {
            return None;
        }
        if row.connections <= 1 {
            return Some((1.0 / machine, Limit::OneAtATime));
        }
        let by_machine = self.machine as f64 / machine;
        let server_cpus = if self.server_pinned {
            1.0
        } else {
            self.machine as f64
        };
        match row.server_cpu_per_call().map(secs).filter(|&s| s > 0.0) {
            Some(server) if server_cpus / server < by_machine => {
                Some((server_cpus / server, Limit::ServerCpu))
            }
            _ => Some((by_machine, Limit::Machine)),
        }
    }
}

/// What bounds a server's calls per second ([`Cpus::bound`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// One connection: every call's whole work, one call after another.
    OneAtATime,
    /// The server's own CPU (one, when pinned).
    ServerCpu,
    /// All of the machine's CPUs, shared by the server, the load generator and a store's
    /// server.
    Machine,
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Limit::OneAtATime => "one call at a time",
            Limit::ServerCpu => "the server's CPU",
            Limit::Machine => "the machine's CPUs",
        })
    }
}

impl Report {
    /// The report as markdown: a paragraph saying when, what and how, then the tables
    /// (appends, replays, `tools/call` in summary and in detail, memory with idle
    /// sessions), each figure with its ratio to the baseline of the same run beside it
    /// (the figure divided by the baseline's: above 1 is more events or calls per second,
    /// or more milliseconds), then notes and failures.
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        self.preamble(&mut out);
        let mut truncated = false;
        self.appends(&mut out, &mut truncated);
        self.replays(&mut out);
        self.summary(&mut out);
        self.plot_links(&mut out);
        self.calls(&mut out);
        self.bounds(&mut out);
        self.counters(&mut out);
        self.growth(&mut out);
        self.notes(&mut out, truncated);
        out
    }

    fn preamble(&self, out: &mut String) {
        let c = &self.config;
        let cpus = self.cpus.machine;
        let model = cpu_model().map(|m| format!(" ({m})")).unwrap_or_default();
        let build = if cfg!(debug_assertions) {
            "DEBUG build (figures meaningless)"
        } else {
            "release build"
        };
        if let Some(command) = &c.command_line {
            let _ = writeln!(out, "```sh\n{command}\n```\n");
        }
        let _ = writeln!(
            out,
            "Measured {} to {} at {} on {cpus} CPUs{model}, {build}; {}. \
             Stores (in the bench process, not pinned): appends of {} events per writer; replays: median of up to {} \
             reads of the whole stream, `read_after` {REPLAY_BATCH} at a time. `tools/call` of `{TOOL}`: median of {} \
             runs of {}{} per server, era and connection count, closed loop, each connection one keep-alive HTTP/1.1 \
             connection (and in the legacy era its own session), {} untimed calls per connection first; a server is \
             restarted for each run and runs alone. Ratios: the figure divided by the baseline's of the same run.\n",
            utc(self.started_ms),
            utc(self.finished_ms),
            match &self.commit {
                Some((commit, false)) => format!("commit `{commit}`"),
                Some((commit, true)) => format!("commit `{commit}` with uncommitted changes"),
                None => "an unknown commit".to_owned(),
            },
            self.pinning,
            c.events_per_writer,
            c.replay_runs,
            c.runs,
            seconds(c.run_duration),
            c.max_calls
                .map(|max| format!(" (at most {max} calls per connection)"))
                .unwrap_or_default(),
            c.warmup_calls,
        );
    }
    fn appends(&self, out: &mut String, truncated: &mut bool) {
        let Some(base) = self.stores.first() else {
            return;
        };
        let writers = self.config.writers;
        let _ = writeln!(
            out,
            "**Appends** (events committed per second; higher is better)\n"
        );
        let _ = writeln!(
            out,
            "| backend | 1 writer | vs memory | {writers} writers | vs memory | {writers} writers, one-append batches | vs memory |"
        );
        let _ = writeln!(out, "|---|--:|--:|--:|--:|--:|--:|");
        for row in &self.stores {
            let (one, many, batched) = (
                &row.result.one_writer,
                &row.result.many_writers,
                &row.result.many_writers_batched,
            );
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
                ratio(
                    batched.per_second(),
                    base.result.many_writers_batched.per_second()
                ),
            );
        }
    }

    fn replays(&self, out: &mut String) {
        let Some(base) = self.stores.first() else {
            return;
        };
        let _ = writeln!(
            out,
            "\n**Replay** of a closed stream (milliseconds; lower is better)\n"
        );
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
                let _ = write!(
                    out,
                    " {} | {} |",
                    millis(replay.median),
                    ratio(secs(replay.median), secs(base.median))
                );
            }
            out.push('\n');
        }
    }

    /// The baseline row for `row`: rmcp in the same era and connection count, or for the
    /// modern era, when rmcp did not answer it, rmcp's legacy row (the `bool` says so).
    fn rmcp_for(&self, era: Era, connections: usize) -> Option<(&HttpRow, bool)> {
        let find = |era: Era| {
            self.http.iter().find(|b| {
                b.kind == ServerKind::Rmcp
                    && b.era == era
                    && b.connections == connections
                    && !b.runs.is_empty()
            })
        };
        match find(era) {
            Some(row) => Some((row, false)),
            None if era == Era::Modern => find(Era::Legacy).map(|row| (row, true)),
            None => None,
        }
    }

    fn python_for(&self, era: Era, connections: usize) -> Option<&HttpRow> {
        self.http.iter().find(|b| {
            b.kind == ServerKind::Python
                && b.era == era
                && b.connections == connections
                && !b.runs.is_empty()
        })
    }

    /// The (era, connections) pairs measured, in order.
    fn cells(&self) -> Vec<(Era, usize)> {
        let mut cells: Vec<(Era, usize)> = self
            .http
            .iter()
            .map(|row| (row.era, row.connections))
            .collect();
        cells.sort_unstable();
        cells.dedup();
        cells
    }

    /// The issue's table: one line per era and connection count, rmcp's rate, then every
    /// other server as a ratio to it.
    fn summary(&self, out: &mut String) {
        if self.http.is_empty() {
            return;
        }
        let mut others: Vec<(&str, ServerKind)> = Vec::new();
        for row in &self.http {
            if row.kind != ServerKind::Rmcp && !others.iter().any(|(name, _)| *name == row.server) {
                others.push((&row.server, row.kind));
            }
        }
        // The Python baseline last, as in the issue's table.
        others.sort_by_key(|(_, kind)| *kind == ServerKind::Python);
        let _ = writeln!(
            out,
            "\n**`tools/call` over HTTP, summary** (calls per second of stock rmcp; every other server as a ratio to it, higher is better)\n"
        );
        let mut head = String::from("| era | connections | stock rmcp |");
        let mut rule = String::from("|---|--:|--:|");
        for (name, _) in &others {
            let _ = write!(
                head,
                " {} |",
                name.strip_prefix("durable-mcp, ").unwrap_or(name)
            );
            rule.push_str("--:|");
        }
        let _ = writeln!(out, "{head}\n{rule}");
        for (era, connections) in self.cells() {
            let base = self.rmcp_for(era, connections);
            let rmcp = match base {
                Some((row, false)) => format!("{} calls/s", count(row.per_second())),
                Some((row, true)) => format!("– (legacy: {}) ‡", count(row.per_second())),
                None => "–".to_owned(),
            };
            let _ = write!(out, "| {era} | {connections} | {rmcp} |");
            for (name, _) in &others {
                let cell = self
                    .http
                    .iter()
                    .find(|r| {
                        r.server == *name
                            && r.era == era
                            && r.connections == connections
                            && !r.runs.is_empty()
                    })
                    .map_or_else(
                        || "–".to_owned(),
                        |r| {
                            base.map_or_else(
                                || "–".to_owned(),
                                |(b, _)| ratio(r.per_second(), b.per_second()),
                            )
                        },
                    );
                let _ = write!(out, " {cell} |");
            }
            out.push('\n');
        }
    }

    fn calls(&self, out: &mut String) {
        if self.http.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "\n**`tools/call` over HTTP** (calls per second, higher is better; latency in milliseconds, lower is better; medians of the runs)\n"
        );
        let _ = writeln!(
            out,
            "| server | era | connections | calls/s | vs rmcp | vs Python | p50 | vs rmcp | p99 | vs rmcp | server CPU µs/call | vs rmcp | machine CPU µs/call | vs rmcp |"
        );
        let _ = writeln!(
            out,
            "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
        );
        for (era, connections) in self.cells() {
            let base = self.rmcp_for(era, connections);
            let python = self
                .python_for(Era::Legacy, connections)
                .filter(|_| era == Era::Legacy);
            for row in self
                .http
                .iter()
                .filter(|r| r.era == era && r.connections == connections)
            {
                if row.runs.is_empty() {
                    let _ = writeln!(
                        out,
                        "| {} | {era} | {connections} | failed | – | – | – | – | – | – | – | – | – | – |",
                        row.server
                    );
                    continue;
                }
                let mark = if base.is_some_and(|(_, legacy)| legacy) {
                    " ‡"
                } else {
                    ""
                };
                let vs = |value: f64, pick: fn(&HttpRow) -> f64| {
                    base.map_or_else(
                        || "–".to_owned(),
                        |(b, _)| format!("{}{mark}", ratio(value, pick(b))),
                    )
                };
                let vs_python = python.map_or_else(
                    || "–".to_owned(),
                    |p| ratio(row.per_second(), p.per_second()),
                );
                let runs = if row.runs.len() < self.config.runs {
                    format!(" ({} of {} runs)", row.runs.len(), self.config.runs)
                } else {
                    String::new()
                };
                // CPU per call: how many times the baseline's work a call costs (lower is
                // cheaper), the figure least disturbed by whatever else the machine runs;
                // the server's own, then the whole machine's (a store's server included).
                let cpu = |pick: fn(&HttpRow) -> Option<Duration>| {
                    let cell = pick(row).map_or_else(
                        || "–".to_owned(),
                        |c| format!("{:.0}", c.as_secs_f64() * 1e6),
                    );
                    let vs = match (pick(row), base.and_then(|(b, _)| pick(b))) {
                        (Some(c), Some(b)) => format!("{}{mark}", ratio(secs(c), secs(b))),
                        _ => "–".to_owned(),
                    };
                    format!("{cell} | {vs}")
                };
                let _ = writeln!(
                    out,
                    "| {} | {era} | {connections} | {}{runs} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    row.server,
                    count(row.per_second()),
                    vs(row.per_second(), HttpRow::per_second),
                    vs_python,
                    millis(row.p50()),
                    vs(secs(row.p50()), |b| secs(b.p50())),
                    millis(row.p99()),
                    vs(secs(row.p99()), |b| secs(b.p99())),
                    cpu(HttpRow::server_cpu_per_call),
                    cpu(HttpRow::machine_cpu_per_call),
                );
            }
        }
    }

    /// Each server's calls per second against what its CPU per call allows on this machine
    /// ([`Cpus::bound`]), and that bound as a ratio to stock rmcp's calls per second: the
    /// best ratio the server could reach here without costing less CPU per call.
    fn bounds(&self, out: &mut String) {
        if !self.http.iter().any(|row| self.cpus.bound(row).is_some()) {
            return;
        }
        let n = self.cpus.machine;
        let server = if self.cpus.server_pinned {
            "1 s ÷ the server's CPU per call (pinned to one CPU)".to_owned()
        } else {
            format!("{n} s ÷ the server's CPU per call")
        };
        let _ = writeln!(
            out,
            "\n**What the CPUs allow** (the most calls per second each server's CPU per call allows on these {n} CPUs: at 1 connection, \
             one call at a time, 1 s ÷ the machine CPU per call; with more, the lower of {server} and {n} s ÷ the machine CPU per call. \
             \"used\": the measured rate's share of that; \"at most, vs rmcp\": that bound divided by stock rmcp's measured rate, the best ratio \
             the server could reach on this machine without costing less CPU per call)\n"
        );
        let _ = writeln!(
            out,
            "| server | era | connections | calls/s | at most | limited by | used | at most, vs rmcp |"
        );
        let _ = writeln!(out, "|---|---|--:|--:|--:|---|--:|--:|");
        for (era, connections) in self.cells() {
            let base = self.rmcp_for(era, connections);
            for row in self
                .http
                .iter()
                .filter(|r| r.era == era && r.connections == connections && !r.runs.is_empty())
            {
                let Some((bound, limit)) = self.cpus.bound(row) else {
                    continue;
                };
                let mark = if base.is_some_and(|(_, legacy)| legacy) {
                    " ‡"
                } else {
                    ""
                };
                let vs = base.map_or_else(
                    || "–".to_owned(),
                    |(b, _)| format!("{}{mark}", ratio(bound, b.per_second())),
                );
                let _ = writeln!(
                    out,
                    "| {} | {era} | {connections} | {} | {} | {limit} | {:.0} % | {vs} |",
                    row.server,
                    count(row.per_second()),
                    count(bound),
                    100.0 * row.per_second() / bound,
                );
            }
        }
    }

    /// The plots of calls per second against connections, one per era measured: (file
    /// name, SVG). The run writes them to [`BenchConfig::plot_dir`].
    pub fn plots(&self) -> Vec<(String, String)> {
        Era::ALL
            .into_iter()
            .filter_map(|era| Plot::calls(self, era).map(|p| (plot::file_name(era), p.to_svg())))
            .collect()
    }

    /// Links to the plots, where `docs/benchmarks.md` finds them (`docs/benchmarks/`), or
    /// how to get them.
    fn plot_links(&self, out: &mut String) {
        let plots = self.plots();
        if plots.is_empty() {
            return;
        }
        let names: Vec<String> = plots.iter().map(|(name, _)| format!("`{name}`")).collect();
        let Some(dir) = &self.config.plot_dir else {
            let _ = writeln!(
                out,
                "\nPlots of calls per second against connections ({}): add `--plot-dir docs/benchmarks` to write them, and the report links them.",
                names.join(", ")
            );
            return;
        };
        let _ = writeln!(
            out,
            "\n**Calls per second against connections** (one line per server; log2 x, log y; written to `{}`, linked as in `docs/benchmarks/`)\n",
            dir.display()
        );
        for (name, _) in &plots {
            let era = name.trim_start_matches("calls-").trim_end_matches(".svg");
            let _ = writeln!(
                out,
                "![tools/call per second against connections, {era} era](benchmarks/{name})"
            );
        }
    }

    /// Commits and fsyncs per call of each durable-mcp server's store, from the store's
    /// own counters ([`Counted`]), over all the runs of a server, era and connection count.
    fn counters(&self, out: &mut String) {
        let rows: Vec<(&HttpRow, Counted)> = self
            .http
            .iter()
            .filter_map(|row| Counted::total(&row.counted).map(|total| (row, total)))
            .collect();
        if rows.is_empty() {
            return;
        }
        let commands = rows.iter().any(|(_, c)| c.commands.is_some());
        let kernel = rows.iter().any(|(_, c)| c.kernel_syncs.is_some());
        let _ = writeln!(
            out,
            "\n**Commits and fsyncs per call** (each store's own counters read before and after every run and divided by the calls \
             the run made, warm-up included, over all runs; a legacy session's `initialize` and `DELETE` count too. SQLite: the \
             store's group commits and WAL fsyncs (`durable_mcp_store_sqlite_*` of the server's `/metrics`); PostgreSQL: \
             `pg_stat_database.xact_commit` of its database and `pg_stat_wal.wal_sync`, read {} s after the run (a backend \
             publishes its counts up to 10 s late), other clients of the database included; Redis: scripts and `EXEC`s, and \
             `total_commands_processed`, other clients included{})\n",
            crate::counters::PG_STATS_SETTLE.as_secs(),
            if kernel {
                "; kernel: every `fsync` and `fdatasync` on the machine during the load (`perf stat -a`), whoever made it"
            } else {
                ""
            }
        );
        let mut head =
            String::from("| server | era | connections | calls | commits/call | fsyncs/call |");
        let mut rule = String::from("|---|---|--:|--:|--:|--:|");
        if commands {
            head.push_str(" commands/call |");
            rule.push_str("--:|");
        }
        if kernel {
            head.push_str(" fsyncs/call (kernel) |");
            rule.push_str("--:|");
        }
        let _ = writeln!(out, "{head}\n{rule}");
        for (era, connections) in self.cells() {
            for (row, total) in rows
                .iter()
                .filter(|(r, _)| r.era == era && r.connections == connections)
            {
                let _ = write!(
                    out,
                    "| {} | {era} | {connections} | {} | {} | {} |",
                    row.server,
                    thousands(usize::try_from(total.calls).unwrap_or(usize::MAX)),
                    per_call(total.per_call(total.commits)),
                    per_call(total.per_call(total.syncs)),
                );
                if commands {
                    let _ = write!(out, " {} |", per_call(total.per_call(total.commands)));
                }
                if kernel {
                    let _ = write!(out, " {} |", per_call(total.per_call(total.kernel_syncs)));
                }
                out.push('\n');
            }
        }
    }

    fn growth(&self, out: &mut String) {
        let Some(first) = self.growth.first() else {
            return;
        };
        let _ = writeln!(
            out,
            "\n**Worker memory with idle sessions** (`VmRSS` of the server process in MiB; sessions started with `initialize`, then left alone)\n"
        );
        let mut head = String::from("| server |");
        let mut rule = String::from("|---|");
        for (sessions, _) in &first.rss_kib {
            let _ = write!(head, " {} sessions |", thousands(*sessions));
            rule.push_str("--:|");
        }
        let _ = writeln!(out, "{head} KiB per session |\n{rule}--:|");
        for row in &self.growth {
            let _ = write!(out, "| {} |", row.server);
            for (_, kib) in &row.rss_kib {
                let _ = write!(out, " {:.1} |", *kib as f64 / 1024.0);
            }
            for _ in row.rss_kib.len()..first.rss_kib.len() {
                out.push_str(" – |");
            }
            let per = row
                .kib_per_session()
                .map_or_else(|| "–".to_owned(), |kib| format!("{kib:.2}"));
            let _ = writeln!(out, " {per} |");
        }
    }

    fn notes(&self, out: &mut String, truncated: bool) {
        let mut notes = Vec::new();
        if truncated {
            notes.push(format!("† stopped at the time limit ({} s per store measurement) before the requested count.", self.config.time_limit.as_secs()));
        }
        match &self.rmcp_modern {
            Some(Err(answer)) => notes.push(format!(
                "‡ stock rmcp did not answer a 2026-07-28 `tools/call` ({answer}): modern-era ratios are to its legacy-era figure with the same connections."
            )),
            Some(Ok(())) => notes.push("Stock rmcp answered 2026-07-28 `tools/call`s: modern-era ratios are to its modern-era figure.".to_owned()),
            None => {}
        }
        match &self.python {
            PythonStatus::Measured(python) => notes.push(format!(
                "{PYTHON_LABEL}: `{python}`, legacy era only (its 2026-07-28 path bypasses the event store); \"vs Python\" is to it with the same connections."
            )),
            PythonStatus::Missing(why) => notes.push(format!("{PYTHON_LABEL} not measured: {why}.")),
            PythonStatus::Off => {}
        }
        if self
            .http
            .iter()
            .any(|row| row.machine_cpu_per_call().is_some())
        {
            let cpus = self.cpus.machine;
            notes.push(format!(
                "Machine CPU per call: the busy time of all {cpus} CPUs (`/proc/stat`) while the load ran, divided by the calls made: the server's, \
                 the load generator's and a store server's on this machine (\"What the CPUs allow\" turns it into a bound)."
            ));
        }
        if self
            .growth
            .iter()
            .any(|row| row.server.ends_with(", memory"))
        {
            notes.push("The memory store keeps its sessions in the worker's own memory: its growth is the store's, not the transport's.".to_owned());
        }
        notes.extend(self.counter_notes.iter().cloned());
        for failure in &self.failures {
            notes.push(format!("FAILED: {failure}"));
        }
        if !notes.is_empty() {
            out.push('\n');
            for note in notes {
                let _ = writeln!(out, "{note}\n");
            }
        }
    }
}

/// The processor's name (`model name` of `/proc/cpuinfo`), if known.
pub(crate) fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines().find_map(|line| {
        line.strip_prefix("model name")?
            .split_once(':')
            .map(|(_, name)| name.trim().to_owned())
    })
}

/// `5 s`, `1.5 s`, `300 ms`.
pub(crate) fn seconds(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn mark(truncated: bool) -> &'static str {
    if truncated { " †" } else { "" }
}

/// A rate: whole numbers with thousands separators (one decimal below 100).
pub(crate) fn count(value: f64) -> String {
    if value < 100.0 {
        return format!("{value:.1}");
    }
    group(&format!("{value:.0}"))
}

/// A figure per call: two decimals, one from 10 on (`–` without it).
pub(crate) fn per_call(value: Option<f64>) -> String {
    match value {
        Some(v) if v >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
        None => "–".to_owned(),
    }
}

/// A count with thousands separators.
pub(crate) fn thousands(value: usize) -> String {
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
pub(crate) fn millis(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    match ms {
        ms if ms >= 100.0 => format!("{ms:.0}"),
        ms if ms >= 10.0 => format!("{ms:.1}"),
        ms if ms >= 1.0 => format!("{ms:.2}"),
        ms => format!("{ms:.3}"),
    }
}

/// `value / base` with two significant digits (at least two decimals below 10).
pub(crate) fn ratio(value: f64, base: f64) -> String {
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
pub(crate) fn utc(ms: u64) -> String {
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
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(connections: usize, calls: usize, p50_us: u64) -> LoadResult {
        LoadResult {
            connections,
            calls,
            elapsed: Duration::from_secs(1),
            p50: Duration::from_micros(p50_us),
            p99: Duration::from_micros(p50_us * 2),
            max: Duration::from_micros(p50_us * 4),
            resent: 0,
            server_cpu_per_call: Some(Duration::from_micros(p50_us / 4)),
            machine_cpu_per_call: Some(Duration::from_micros(p50_us / 2)),
        }
    }

    fn row(
        server: &str,
        kind: ServerKind,
        era: Era,
        connections: usize,
        runs: Vec<LoadResult>,
    ) -> HttpRow {
        HttpRow {
            server: server.into(),
            kind,
            era,
            connections,
            runs,
            counted: Vec::new(),
        }
    }

    fn report(http: Vec<HttpRow>, rmcp_modern: Option<Result<(), String>>) -> Report {
        Report {
            config: BenchConfig {
                runs: 1,
                ..BenchConfig::new(crate::Executables::beside("/bin/true".into()))
            },
            started_ms: 0,
            finished_ms: 0,
            commit: Some(("abc".into(), false)),
            pinning: "not pinned".into(),
            cpus: Cpus {
                machine: 2,
                server_pinned: true,
            },
            stores: Vec::new(),
            http,
            growth: Vec::new(),
            rmcp_modern,
            python: PythonStatus::Measured("python".into()),
            failures: Vec::new(),
            counter_notes: Vec::new(),
            kernel_syncs: false,
            child_pids: Vec::new(),
        }
    }

    /// A server has one colour on both eras' plots, whichever servers each era has.
    #[test]
    fn a_server_keeps_its_colour_on_every_plot() {
        let run = || vec![load(1, 1_000, 100)];
        let r = report(
            vec![
                row("rmcp", ServerKind::Rmcp, Era::Legacy, 1, run()),
                row("python", ServerKind::Python, Era::Legacy, 1, run()),
                row("memory", ServerKind::Durable, Era::Legacy, 1, run()),
                row("rmcp", ServerKind::Rmcp, Era::Modern, 1, run()),
                row("memory", ServerKind::Durable, Era::Modern, 1, run()),
            ],
            None,
        );
        let colour = |era, server: &str| {
            crate::plot::Plot::calls(&r, era)
                .unwrap()
                .series
                .iter()
                .find(|s| s.label == server)
                .map(|s| s.colour)
                .unwrap()
        };
        assert_eq!(colour(Era::Legacy, "memory"), colour(Era::Modern, "memory"));
        assert_eq!(colour(Era::Legacy, "memory"), 2);
        assert_ne!(colour(Era::Modern, "rmcp"), colour(Era::Modern, "memory"));
    }

    #[test]
    fn figures_are_medians_of_the_runs() {
        let r = row(
            "x",
            ServerKind::Durable,
            Era::Legacy,
            1,
            vec![load(1, 300, 30), load(1, 100, 10), load(1, 200, 20)],
        );
        assert_eq!(r.per_second(), 200.0);
        assert_eq!(r.p50(), Duration::from_micros(20));
        assert_eq!(r.p99(), Duration::from_micros(40));
        assert_eq!(r.server_cpu_per_call(), Some(Duration::from_micros(5)));
        let partial = row(
            "x",
            ServerKind::Durable,
            Era::Legacy,
            1,
            vec![
                load(1, 300, 30),
                LoadResult {
                    server_cpu_per_call: None,
                    ..load(1, 100, 10)
                },
            ],
        );
        assert_eq!(
            partial.server_cpu_per_call(),
            None,
            "a run without the figure leaves the median out"
        );
        assert_eq!(r.machine_cpu_per_call(), Some(Duration::from_micros(10)));
        let partial = row(
            "x",
            ServerKind::Durable,
            Era::Legacy,
            1,
            vec![
                load(1, 300, 30),
                LoadResult {
                    machine_cpu_per_call: None,
                    ..load(1, 100, 10)
                },
            ],
        );
        assert_eq!(partial.machine_cpu_per_call(), None);
    }

    #[test]
    fn modern_ratios_fall_back_to_rmcp_legacy_when_rmcp_does_not_answer_modern() {
        let http = vec![
            row(
                RMCP_LABEL,
                ServerKind::Rmcp,
                Era::Legacy,
                8,
                vec![load(8, 1000, 100)],
            ),
            row(
                PYTHON_LABEL,
                ServerKind::Python,
                Era::Legacy,
                8,
                vec![load(8, 100, 1000)],
            ),
            row(
                "durable-mcp, memory",
                ServerKind::Durable,
                Era::Legacy,
                8,
                vec![load(8, 500, 200)],
            ),
            row(
                "durable-mcp, memory",
                ServerKind::Durable,
                Era::Modern,
                8,
                vec![load(8, 2000, 50)],
            ),
        ];
        let markdown = report(http, Some(Err("status 400".into()))).to_markdown();
        assert!(
            markdown.contains("| legacy | 8 | 1,000 calls/s | 0.50× | 0.10× |"),
            "{markdown}"
        );
        assert!(
            markdown.contains("| modern | 8 | – (legacy: 1,000) ‡ | 2.00× | – |"),
            "{markdown}"
        );
        assert!(
            markdown.contains("| durable-mcp, memory | legacy | 8 | 500 | 0.50× | 5.00× |"),
            "{markdown}"
        );
        assert!(
            markdown.contains("| durable-mcp, memory | modern | 8 | 2,000 | 2.00× ‡ | – |"),
            "{markdown}"
        );
        // Server CPU per call (a quarter of p50 in these rows) and its ratio to rmcp's.
        // Then the machine's (half of p50).
        assert!(
            markdown
                .lines()
                .any(|l| l.starts_with("| durable-mcp, memory | legacy | 8 |")
                    && l.ends_with("| 50 | 2.00× | 100 | 2.00× |")),
            "{markdown}"
        );
        assert!(
            markdown
                .lines()
                .any(|l| l.starts_with("| durable-mcp, memory | modern | 8 |")
                    && l.ends_with("| 12 | 0.48× ‡ | 25 | 0.50× ‡ |")),
            "{markdown}"
        );
        assert!(
            markdown.contains("Machine CPU per call: the busy time of all"),
            "{markdown}"
        );
        assert!(
            markdown.contains("‡ stock rmcp did not answer a 2026-07-28 `tools/call` (status 400)"),
            "{markdown}"
        );
    }

    /// A run with the given CPU figures (µs per call) and `calls` in 1 s.
    fn measured(
        connections: usize,
        calls: usize,
        server_us: u64,
        machine_us: Option<u64>,
    ) -> LoadResult {
        LoadResult {
            server_cpu_per_call: Some(Duration::from_micros(server_us)),
            machine_cpu_per_call: machine_us.map(Duration::from_micros),
            ..load(connections, calls, 100)
        }
    }

    #[test]
    fn bounds_come_from_the_cpu_per_call_of_the_server_and_of_the_machine() {
        let pinned = Cpus {
            machine: 2,
            server_pinned: true,
        };
        // Rounded to whole calls per second (the figures are in seconds, as floats).
        let bound = |cpus: &Cpus, connections, server_us, machine_us| {
            cpus.bound(&row(
                "x",
                ServerKind::Durable,
                Era::Legacy,
                connections,
                vec![measured(connections, 1000, server_us, machine_us)],
            ))
            .map(|(calls, limit)| (calls.round(), limit))
        };
        // One connection: one call after another, every process's work on its path.
        assert_eq!(
            bound(&pinned, 1, 50, Some(200)),
            Some((5_000.0, Limit::OneAtATime))
        );
        // More: the server's one CPU (1 / 50 µs) against both CPUs (2 / 80 µs).
        assert_eq!(
            bound(&pinned, 8, 50, Some(80)),
            Some((20_000.0, Limit::ServerCpu))
        );
        assert_eq!(
            bound(&pinned, 8, 50, Some(200)),
            Some((10_000.0, Limit::Machine))
        );
        // Not pinned: the server may use both CPUs (2 / 50 µs), so the machine limits first.
        assert_eq!(
            bound(
                &Cpus {
                    machine: 2,
                    server_pinned: false
                },
                8,
                50,
                Some(80)
            ),
            Some((25_000.0, Limit::Machine))
        );
        assert_eq!(
            bound(&pinned, 8, 50, None),
            None,
            "no machine figure, no bound"
        );
    }

    #[test]
    fn the_bounds_table_shows_the_share_used_and_the_bound_against_rmcp() {
        let http = vec![
            row(
                RMCP_LABEL,
                ServerKind::Rmcp,
                Era::Legacy,
                8,
                vec![measured(8, 20_000, 40, Some(50))],
            ),
            row(
                "durable-mcp, redis",
                ServerKind::Durable,
                Era::Legacy,
                8,
                vec![measured(8, 4_000, 100, Some(400))],
            ),
            row(
                "durable-mcp, no figures",
                ServerKind::Durable,
                Era::Legacy,
                8,
                vec![measured(8, 4_000, 100, None)],
            ),
        ];
        let markdown = report(http, Some(Ok(()))).to_markdown();
        let (_, table) = markdown
            .split_once("**What the CPUs allow**")
            .expect("the table is there");
        let table = table.split("\n\n").nth(1).unwrap_or_default();
        // rmcp: min(1 / 40 µs, 2 / 50 µs) = 25,000 by its CPU, 80 % used.
        assert!(table.contains("| stock rmcp (StreamableHttpService) | legacy | 8 | 20,000 | 25,000 | the server's CPU | 80 % | 1.25× |"), "{table}");
        // Redis: min(1 / 100 µs, 2 / 400 µs) = 5,000 by the machine: 0.25× of rmcp's 20,000.
        assert!(table.contains("| durable-mcp, redis | legacy | 8 | 4,000 | 5,000 | the machine's CPUs | 80 % | 0.25× |"), "{table}");
        assert!(
            !table.contains("no figures"),
            "a row without the machine figure has no bound: {table}"
        );
    }

    fn counted(calls: u64, commits: u64, syncs: Option<u64>, commands: Option<u64>) -> Counted {
        Counted {
            calls,
            commits: Some(commits),
            syncs,
            commands,
            kernel_syncs: None,
        }
    }

    #[test]
    fn the_counters_table_divides_the_runs_counts_by_their_calls() {
        let mut sqlite = row(
            "durable-mcp, sqlite synchronous=FULL",
            ServerKind::Durable,
            Era::Legacy,
            8,
            vec![load(8, 1000, 100), load(8, 1000, 100)],
        );
        // Two runs: 3,000 calls, 6,000 commits and 1,500 fsyncs together.
        sqlite.counted = vec![
            counted(1_000, 2_000, Some(500), None),
            counted(2_000, 4_000, Some(1_000), None),
        ];
        let mut redis = row(
            "durable-mcp, redis://127.0.0.1:6379/0",
            ServerKind::Durable,
            Era::Legacy,
            8,
            vec![load(8, 1000, 100)],
        );
        redis.counted = vec![counted(400, 800, Some(0), Some(4_600))];
        let http = vec![
            row(
                RMCP_LABEL,
                ServerKind::Rmcp,
                Era::Legacy,
                8,
                vec![load(8, 1000, 100)],
            ),
            sqlite,
            redis,
        ];
        let mut report = report(http, Some(Ok(())));
        report.counter_notes.push(
            "durable-mcp, redis://127.0.0.1:6379/0: no persistence configured (`aof_enabled:0`)."
                .into(),
        );
        let markdown = report.to_markdown();
        let (_, table) = markdown
            .split_once("**Commits and fsyncs per call**")
            .expect("the table is there");
        let table = table.split("\n\n").nth(1).unwrap_or_default();
        assert!(
            table.starts_with(
                "| server | era | connections | calls | commits/call | fsyncs/call | commands/call |\n"
            ),
            "{table}"
        );
        assert!(
            table.contains(
                "| durable-mcp, sqlite synchronous=FULL | legacy | 8 | 3,000 | 2.00 | 0.50 | – |"
            ),
            "{table}"
        );
        assert!(
            table.contains(
                "| durable-mcp, redis://127.0.0.1:6379/0 | legacy | 8 | 400 | 2.00 | 0.00 | 11.5 |"
            ),
            "{table}"
        );
        assert!(!table.contains("stock rmcp"), "no store, no row: {table}");
        assert!(!table.contains("(kernel)"), "no perf, no column: {table}");
        assert!(markdown.contains("no persistence configured (`aof_enabled:0`)."));

        // With perf's count, a column of its own.
        report.kernel_syncs = true;
        for row in &mut report.http {
            for c in &mut row.counted {
                c.kernel_syncs = Some(c.calls);
            }
        }
        let markdown = report.to_markdown();
        assert!(
            markdown.contains("| durable-mcp, sqlite synchronous=FULL | legacy | 8 | 3,000 | 2.00 | 0.50 | – | 1.00 |"),
            "{markdown}"
        );
    }

    #[test]
    fn the_report_links_the_plots_or_says_how_to_get_them() {
        let http = vec![
            row(
                RMCP_LABEL,
                ServerKind::Rmcp,
                Era::Legacy,
                1,
                vec![load(1, 1000, 100)],
            ),
            row(
                RMCP_LABEL,
                ServerKind::Rmcp,
                Era::Legacy,
                8,
                vec![load(8, 4000, 100)],
            ),
            row(
                "durable-mcp, memory",
                ServerKind::Durable,
                Era::Modern,
                8,
                vec![load(8, 3000, 100)],
            ),
        ];
        let mut report = report(http, Some(Ok(())));
        let plots = report.plots();
        assert_eq!(
            plots
                .iter()
                .map(|(name, _)| name.as_str())
                .collect::<Vec<_>>(),
            ["calls-legacy.svg", "calls-modern.svg"]
        );
        assert_eq!(plots[0].1.matches("<polyline").count(), 1);
        let markdown = report.to_markdown();
        assert!(
            markdown.contains("add `--plot-dir docs/benchmarks` to write them"),
            "{markdown}"
        );
        assert!(!markdown.contains("]("), "no links to files not written");
        report.config.plot_dir = Some("/tmp/plots".into());
        let markdown = report.to_markdown();
        assert!(
            markdown.contains(
                "![tools/call per second against connections, legacy era](benchmarks/calls-legacy.svg)\n\
                 ![tools/call per second against connections, modern era](benchmarks/calls-modern.svg)"
            ),
            "{markdown}"
        );
    }

    #[test]
    fn a_measurement_without_runs_is_shown_as_failed() {
        let http = vec![
            row(
                RMCP_LABEL,
                ServerKind::Rmcp,
                Era::Legacy,
                1,
                vec![load(1, 1000, 100)],
            ),
            row(
                "durable-mcp, sqlite synchronous=FULL",
                ServerKind::Durable,
                Era::Legacy,
                1,
                Vec::new(),
            ),
        ];
        let mut report = report(http, Some(Ok(())));
        report.failures.push(
            "durable-mcp, sqlite synchronous=FULL, legacy, 1 connection(s), run 1: boom".into(),
        );
        let markdown = report.to_markdown();
        assert!(
            markdown.contains("| durable-mcp, sqlite synchronous=FULL | legacy | 1 | failed |"),
            "{markdown}"
        );
        assert!(
            markdown.contains("| legacy | 1 | 1,000 calls/s | – |"),
            "{markdown}"
        );
        assert!(
            markdown.contains(
                "FAILED: durable-mcp, sqlite synchronous=FULL, legacy, 1 connection(s), run 1: boom"
            ),
            "{markdown}"
        );
    }

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
