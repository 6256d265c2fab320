//! The traffic benchmark (`durable-mcp-bench traffic`, issue 28): what real traffic does to
//! a server's latency and footprint, with server and load generator in processes of their
//! own as in the rest of the bench.
//!
//! For each store, legacy-era `tools/call` load, closed loop, [`TrafficConfig::connections`]
//! connections (each its own session):
//!
//! - **drops and re-sends**: a run without drops, then one where a share of the calls
//!   drop their connection after writing the request and re-send it on a new one (same
//!   session, same JSON-RPC id; see [`crate::load::Drops`]). Calls per second, p50, p99
//!   and max of both, and the journal takeovers the server made during each (from its
//!   Prometheus `/metrics`): a re-sent request should attach to its run, not take it over.
//! - **retention**: the same load with retention off, then with a short stream age and
//!   prune interval, so that every prune deletes many streams; p99 and max of both, and
//!   how many streams retention removed.
//! - **sustained**: a long load at full speed on a fresh store, the server's resident
//!   memory (`VmRSS`) and the size of a SQLite store's `-wal` file sampled every second
//!   during it and for a while after it.
//!
//! Every run is a server started for it; a failed run is listed and the others go on.

mod report;
mod scrape;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

pub use report::TrafficReport;
pub use scrape::{RETENTION_REMOVED, Scrape, TAKEOVERS};

use crate::child::LoadArgs;
use crate::client::Era;
use crate::load::LoadResult;
use crate::process::Pinning;
use crate::servers::{DurableSettings, Executables, Launcher, MCP_PATH, RunningServer};
use crate::{BenchError, ENCRYPTED, ScratchDir, TOOL, store_labels};

/// One part of the traffic benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TrafficPart {
    /// Drops and re-sends against a run without drops.
    Drops,
    /// Retention on (short stream age) against retention off.
    Retention,
    /// A long load: memory and the SQLite WAL during and after it.
    Sustained,
}

impl TrafficPart {
    /// Every part, in the order run.
    pub const ALL: [TrafficPart; 3] = [
        TrafficPart::Drops,
        TrafficPart::Retention,
        TrafficPart::Sustained,
    ];

    /// Its command-line name.
    pub const fn name(self) -> &'static str {
        match self {
            TrafficPart::Drops => "drops",
            TrafficPart::Retention => "retention",
            TrafficPart::Sustained => "sustained",
        }
    }
}

impl fmt::Display for TrafficPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TrafficPart {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|part| part.name() == s)
            .ok_or_else(|| format!("unknown part {s:?} (drops, retention or sustained)"))
    }
}

/// What one traffic run measures.
#[derive(Debug, Clone)]
pub struct TrafficConfig {
    /// The executables the children run.
    pub executables: Executables,
    /// The command line that started the run, for the report.
    pub command_line: Option<String>,
    /// Store URLs (as [`durable_mcp::open_store`] takes them), one after another; every
    /// run of a store uses the same store. Empty: a temporary SQLite file
    /// (synchronous=FULL), a new one for every server.
    pub stores: Vec<String>,
    /// The parts measured, in [`TrafficPart::ALL`]'s order.
    pub parts: Vec<TrafficPart>,
    /// Concurrent connections, each its own legacy session.
    pub connections: usize,
    /// Untimed calls per connection before each run.
    pub warmup_calls: usize,
    /// How long each of the two runs of [`TrafficPart::Drops`] lasts.
    pub drop_duration: Duration,
    /// Share of the calls dropped and re-sent, in percent.
    pub drop_percent: u32,
    /// A dropped connection is closed at once or after a random delay below this.
    pub drop_max_delay: Duration,
    /// Seed of the drops' draws.
    pub seed: u64,
    /// How long each of the two runs of [`TrafficPart::Retention`] lasts.
    pub retention_duration: Duration,
    /// The stream age of the retention run, in seconds.
    pub max_stream_age_secs: u64,
    /// The prune interval of the retention run, in seconds.
    pub prune_interval_secs: u64,
    /// How long the load of [`TrafficPart::Sustained`] lasts.
    pub sustained_duration: Duration,
    /// How long memory and WAL are watched after that load ends.
    pub after: Duration,
    /// How often they are read.
    pub sample_every: Duration,
    /// Pin servers and load generators to CPUs where the machine allows.
    pub pin: bool,
}

impl TrafficConfig {
    /// The full run: 16 connections; drops 2 × 20 s with 10 % dropped within 5 ms;
    /// retention 2 × 40 s with streams older than 5 s pruned every 5 s; sustained 120 s
    /// and 30 s after.
    pub fn new(executables: Executables) -> Self {
        Self {
            executables,
            command_line: None,
            stores: Vec::new(),
            parts: TrafficPart::ALL.to_vec(),
            connections: 16,
            warmup_calls: 50,
            drop_duration: Duration::from_secs(20),
            drop_percent: 10,
            drop_max_delay: Duration::from_millis(5),
            seed: 1,
            retention_duration: Duration::from_secs(40),
            max_stream_age_secs: 5,
            prune_interval_secs: 5,
            sustained_duration: Duration::from_secs(120),
            after: Duration::from_secs(30),
            sample_every: Duration::from_secs(1),
            pin: true,
        }
    }

    /// A run of a few seconds per part (for tests and a first look): drops 2 × 2 s,
    /// retention 2 × 3 s with streams older than 1 s pruned every second, sustained 2 s
    /// and 2 s after.
    pub fn quick(executables: Executables) -> Self {
        Self {
            warmup_calls: 5,
            drop_duration: Duration::from_secs(2),
            retention_duration: Duration::from_secs(3),
            max_stream_age_secs: 1,
            prune_interval_secs: 1,
            sustained_duration: Duration::from_secs(2),
            after: Duration::from_secs(2),
            ..Self::new(executables)
        }
    }

    fn runs(&self, part: TrafficPart) -> bool {
        self.parts.contains(&part)
    }

    /// The load of one run (its address is the server's, set by [`Launcher::load`]).
    fn load_args(&self, duration: Duration, drop_percent: u32) -> LoadArgs {
        LoadArgs {
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            path: MCP_PATH.to_owned(),
            era: Era::Legacy,
            connections: self.connections.max(1),
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            warmup_calls: self.warmup_calls,
            max_calls: None,
            tool: TOOL.to_owned(),
            drop_percent,
            drop_max_delay_us: u64::try_from(self.drop_max_delay.as_micros()).unwrap_or(u64::MAX),
            seed: self.seed,
        }
    }
}

/// One run: its load and what the server's counters say happened during it.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// The load generator's result.
    pub load: LoadResult,
    /// Journal takeovers during the load, by `from` (only those that happened).
    pub takeovers: Vec<(String, u64)>,
    /// Streams retention removed during the load.
    pub streams_removed: u64,
    /// Retention passes (prunes) the server made during the load.
    pub prunes: u64,
}

impl Measured {
    /// All journal takeovers during the load.
    pub fn takeovers_total(&self) -> u64 {
        self.takeovers.iter().map(|(_, n)| n).sum()
    }
}

/// A run and the run it is compared with; `Err` holds why one failed (also listed in
/// [`TrafficReport::failures`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Pair {
    /// Without drops, or with retention off.
    pub base: Result<Measured, String>,
    /// With drops, or with retention on.
    pub test: Result<Measured, String>,
}

/// One reading of [`TrafficPart::Sustained`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Since the load generator started.
    pub at: Duration,
    /// Whether the load was still running.
    pub loading: bool,
    /// The server's resident set size, KiB.
    pub rss_kib: u64,
    /// The size of the SQLite store's `-wal` file (0 when there is none), for SQLite.
    pub wal_bytes: Option<u64>,
}

/// What [`TrafficPart::Sustained`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Sustained {
    /// The load generator's result.
    pub load: LoadResult,
    /// The server's resident set size before the load, KiB.
    pub rss_before_kib: u64,
    /// Readings during the load (the last at its end) and after it.
    pub samples: Vec<Sample>,
}

impl Sustained {
    /// The largest WAL size during the load.
    pub fn wal_max_loading(&self) -> Option<u64> {
        self.samples
            .iter()
            .filter(|s| s.loading)
            .filter_map(|s| s.wal_bytes)
            .max()
    }

    /// The WAL size at the last reading.
    pub fn wal_at_end(&self) -> Option<u64> {
        self.samples.last().and_then(|s| s.wal_bytes)
    }

    /// The largest resident set size during the load, KiB.
    pub fn rss_max_loading(&self) -> Option<u64> {
        self.samples
            .iter()
            .filter(|s| s.loading)
            .map(|s| s.rss_kib)
            .max()
    }

    /// The resident set size at the last reading (after the load), KiB.
    pub fn rss_at_end(&self) -> Option<u64> {
        self.samples
            .last()
            .filter(|s| !s.loading)
            .map(|s| s.rss_kib)
    }
}

/// Everything measured on one store.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreTraffic {
    /// The store's label (see [`crate::store_label`]).
    pub store: String,
    /// Whether it is a SQLite store (the WAL is read).
    pub sqlite: bool,
    /// [`TrafficPart::Drops`], if run.
    pub drops: Option<Pair>,
    /// [`TrafficPart::Retention`], if run.
    pub retention: Option<Pair>,
    /// [`TrafficPart::Sustained`], if run (`Err`: why it failed).
    pub sustained: Option<Result<Sustained, String>>,
}

/// The `-wal` file of a SQLite store URL (`sqlite:PATH[?...]`, also behind
/// [`ENCRYPTED`]); `None` for other backends.
pub fn wal_path(url: &str) -> Option<PathBuf> {
    let url = url.strip_prefix(ENCRYPTED).unwrap_or(url);
    if !url.starts_with("sqlite:") {
        return None;
    }
    let mut path = durable_mcp::store::SqliteOptions::from_url(url)
        .ok()?
        .path
        .into_os_string();
    path.push("-wal");
    Some(path.into())
}

/// Run the traffic benchmark of `config`, reporting progress through `progress` (one
/// line per run), and return the report.
///
/// # Errors
/// The configuration cannot run (no executable; the scratch directory). A failed run is
/// listed in [`TrafficReport::failures`] instead. Child processes are gone when this
/// returns, whatever it returns.
pub async fn run_traffic(
    config: &TrafficConfig,
    mut progress: impl FnMut(&str),
) -> Result<TrafficReport, BenchError> {
    config.executables.check()?;
    if config.parts.is_empty() {
        return Err(BenchError::Config(
            "no part of the traffic benchmark to run".into(),
        ));
    }
    let started_ms = durable_mcp::store::now_ms();
    let commit = crate::git_commit(&config.executables.durable_mcp).await;
    let scratch = ScratchDir::new()?;
    let pinning = if config.pin {
        Pinning::detect().await
    } else {
        Pinning::none("turned off")
    };
    progress(&pinning.describe());
    let mut launcher = Launcher::new(config.executables.clone(), pinning.clone(), scratch.path());
    let mut failures = Vec::new();
    let mut stores = Vec::new();
    let temporary = config.stores.is_empty();
    let urls = if temporary {
        vec![String::new()]
    } else {
        config.stores.clone()
    };
    let labels = if temporary {
        vec!["sqlite synchronous=FULL (temporary)".to_owned()]
    } else {
        store_labels(&urls)
    };
    let mut files = 0;
    for (url, label) in urls.iter().zip(labels) {
        // A fresh temporary file for every server, or the configured store every time.
        let mut store_for_run = || {
            if temporary {
                files += 1;
                format!(
                    "sqlite:{}",
                    scratch.path().join(format!("traffic-{files}.db")).display()
                )
            } else {
                url.clone()
            }
        };
        let sqlite = temporary || wal_path(url).is_some();
        let mut row = StoreTraffic {
            store: label.clone(),
            sqlite,
            drops: None,
            retention: None,
            sustained: None,
        };
        let mut run = Runs {
            config,
            launcher: &mut launcher,
            failures: &mut failures,
            progress: &mut progress,
            store: &label,
        };
        if config.runs(TrafficPart::Drops) {
            let settings = DurableSettings {
                metrics: true,
                ..DurableSettings::default()
            };
            let base = run
                .measured(
                    "no drops",
                    &store_for_run(),
                    &settings,
                    config.load_args(config.drop_duration, 0),
                )
                .await;
            let dropped = format!("{} % dropped", config.drop_percent);
            let test = run
                .measured(
                    &dropped,
                    &store_for_run(),
                    &settings,
                    config.load_args(config.drop_duration, config.drop_percent),
                )
                .await;
            row.drops = Some(Pair { base, test });
        }
        if config.runs(TrafficPart::Retention) {
            let off = DurableSettings {
                metrics: true,
                max_stream_age_secs: Some(0),
                prune_interval_secs: None,
            };
            let on = DurableSettings {
                metrics: true,
                max_stream_age_secs: Some(config.max_stream_age_secs.max(1)),
                prune_interval_secs: Some(config.prune_interval_secs.max(1)),
            };
            let args = config.load_args(config.retention_duration, 0);
            let base = run
                .measured("retention off", &store_for_run(), &off, args.clone())
                .await;
            let test = run
                .measured("retention on", &store_for_run(), &on, args)
                .await;
            row.retention = Some(Pair { base, test });
        }
        if config.runs(TrafficPart::Sustained) {
            let url = store_for_run();
            row.sustained = Some(run.sustained(&url).await);
        }
        stores.push(row);
    }
    drop(scratch);
    Ok(TrafficReport {
        config: config.clone(),
        started_ms,
        finished_ms: durable_mcp::store::now_ms(),
        commit,
        pinning: pinning.describe(),
        stores,
        failures,
        child_pids: launcher.spawned().to_vec(),
    })
}

/// The runs of one store.
struct Runs<'a, P> {
    config: &'a TrafficConfig,
    launcher: &'a mut Launcher,
    failures: &'a mut Vec<String>,
    progress: &'a mut P,
    store: &'a str,
}

impl<P: FnMut(&str)> Runs<'_, P> {
    /// A server on `url` with `settings`, the load of `args` against it, its counters read
    /// before and after; the failure is listed.
    async fn measured(
        &mut self,
        what: &str,
        url: &str,
        settings: &DurableSettings,
        args: LoadArgs,
    ) -> Result<Measured, String> {
        (self.progress)(&format!("traffic: {}, {what}", self.store));
        let name = format!("{} {what}", self.store);
        let outcome = measured(self.launcher, url, settings, &args, &name).await;
        outcome.map_err(|error| {
            let failure = format!("{}, {what}: {error}", self.store);
            self.failures.push(failure.clone());
            failure
        })
    }

    async fn sustained(&mut self, url: &str) -> Result<Sustained, String> {
        (self.progress)(&format!("traffic: {}, sustained load", self.store));
        let name = format!("{} sustained", self.store);
        let outcome = sustained(self.config, self.launcher, url, &name).await;
        outcome.map_err(|error| {
            let failure = format!("{}, sustained load: {error}", self.store);
            self.failures.push(failure.clone());
            failure
        })
    }
}

/// Start a server, read its counters, run the load, read them again, stop it.
async fn measured(
    launcher: &mut Launcher,
    url: &str,
    settings: &DurableSettings,
    args: &LoadArgs,
    name: &str,
) -> Result<Measured, BenchError> {
    let server = launcher.durable(url, settings, name).await?;
    let outcome = async {
        let metrics = server.metrics().ok_or_else(|| BenchError::Config("the server serves no metrics".into()))?;
        let before = Scrape::read(metrics).await?;
        let load = launcher.load(&server, args, &format!("load {name}")).await?;
        let after = Scrape::read(metrics).await?;
        if !after.has(scrape::OPERATION_DURATION_COUNT) {
            return Err(BenchError::Check(format!(
                "the server's /metrics has no {} after the load: the metric names this bench reads are not the server's",
                scrape::OPERATION_DURATION_COUNT
            )));
        }
        let grew = |read: &dyn Fn(&Scrape) -> f64| (read(&after) - read(&before)).max(0.0).round() as u64;
        Ok(Measured {
            load,
            takeovers: scrape::increase_by_label(&before, &after, TAKEOVERS, "from"),
            streams_removed: grew(&|s| s.sum(RETENTION_REMOVED, Some(("kind", "streams")))),
            prunes: grew(&|s| s.sum(scrape::STORE_OPERATION_COUNT, Some(("operation", "prune")))),
        })
    }
    .await;
    let stopped = server.stop().await;
    let measured = outcome?;
    stopped?;
    Ok(measured)
}

/// Start a server, read its memory, run the long load while reading its memory and WAL
/// every [`TrafficConfig::sample_every`], go on reading for [`TrafficConfig::after`], stop it.
async fn sustained(
    config: &TrafficConfig,
    launcher: &mut Launcher,
    url: &str,
    name: &str,
) -> Result<Sustained, BenchError> {
    let server = launcher
        .durable(url, &DurableSettings::default(), name)
        .await?;
    let wal = wal_path(url);
    let outcome = async {
        let rss_before_kib = server.rss_kib()?;
        let args = config.load_args(config.sustained_duration, 0);
        let every = config.sample_every.max(Duration::from_millis(100));
        let started = Instant::now();
        let mut samples = Vec::new();
        let load_name = format!("load {name}");
        let load = launcher.load(&server, &args, &load_name);
        tokio::pin!(load);
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let load = loop {
            tokio::select! {
                biased;
                load = &mut load => break load?,
                _ = ticker.tick() => samples.push(sample(&server, wal.as_deref(), started, true)?),
            }
        };
        samples.push(sample(&server, wal.as_deref(), started, true)?);
        let ended = tokio::time::Instant::now();
        let mut waited = Duration::ZERO;
        while waited < config.after {
            waited = (waited + every).min(config.after);
            tokio::time::sleep_until(ended + waited).await;
            samples.push(sample(&server, wal.as_deref(), started, false)?);
        }
        Ok::<_, BenchError>(Sustained {
            load,
            rss_before_kib,
            samples,
        })
    }
    .await;
    let stopped = server.stop().await;
    let sustained = outcome?;
    stopped?;
    Ok(sustained)
}

/// The server's memory and the WAL's size now.
fn sample(
    server: &RunningServer,
    wal: Option<&Path>,
    started: Instant,
    loading: bool,
) -> Result<Sample, BenchError> {
    let wal_bytes = match wal {
        None => None,
        Some(path) => match std::fs::metadata(path) {
            Ok(meta) => Some(meta.len()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Some(0),
            Err(error) => return Err(BenchError::Io(error)),
        },
    };
    Ok(Sample {
        at: started.elapsed(),
        loading,
        rss_kib: server.rss_kib()?,
        wal_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wal_is_found_beside_a_sqlite_file() {
        assert_eq!(
            wal_path("sqlite:/tmp/a.db"),
            Some(PathBuf::from("/tmp/a.db-wal"))
        );
        assert_eq!(
            wal_path("sqlite:///tmp/a.db?synchronous=normal"),
            Some(PathBuf::from("/tmp/a.db-wal"))
        );
        assert_eq!(
            wal_path("encrypted+sqlite:rel.db"),
            Some(PathBuf::from("rel.db-wal"))
        );
        assert_eq!(wal_path("postgres://h/db?schema=x"), None);
        assert_eq!(wal_path("memory:"), None);
    }

    #[test]
    fn parts_parse_by_name() {
        for part in TrafficPart::ALL {
            assert_eq!(part.name().parse::<TrafficPart>(), Ok(part));
        }
        assert!("all".parse::<TrafficPart>().is_err());
    }
}
