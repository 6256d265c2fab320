//! Benchmarks of durable-mcp (not timed tests): what `durable-mcp-bench` and
//! `cargo bench -p durable-mcp-bench` run.
//!
//! Per store backend, named by URL exactly as [`durable_mcp::open_store`] takes it (so any
//! backend `open_store` knows is measurable), through the [`Store`] contract in this
//! process:
//!
//! - **appends**: events committed per second, one writer on one stream, then
//!   [`BenchConfig::writers`] writers on distinct streams (with `append`, and with
//!   one-append write batches);
//! - **replay**: the time to read a closed stream of 1,000 / 10,000 / 100,000 events whole
//!   with [`Store::read_after`] loops of [`REPLAY_BATCH`], as the engine's tail replays a
//!   stream to a resuming client.
//!
//! Over HTTP, with every server and every load generator in a process of its own (see
//! [`Executables`]: the durable-mcp servers are the `durable-mcp` binary's, stock rmcp and
//! the load generators the `durable-mcp-bench` binary's subcommands of [`child`]; the
//! server pinned to one CPU and the load generator to another where the machine allows):
//! `tools/call` calls per second, p50 and p99, in both protocol eras, with 1, 8, 64 and 256
//! connections, the median of 3 runs of 5 s each, and for durable-mcp the commits and
//! fsyncs a call costs its store, from the store's own counters ([`Counted`]). Baselines:
//! stock rmcp and the official Python SDK with mcp-persist's SQLite store (installed by
//! `scripts/setup-bench.sh`), beside durable-mcp on each store. Then the servers' resident
//! memory with 0, 1,000 and 10,000 idle sessions.
//!
//! [`traffic`] is the other benchmark (`durable-mcp-bench traffic`): what real traffic
//! (dropped connections and re-sent requests, retention, a long load) does to durable-mcp's
//! latency and footprint.
//!
//! [`Report::to_markdown`] prints the tables with a ratio beside every figure, and
//! [`Report::plots`] draws calls per second against connections (SVG). Every child
//! process is stopped before [`run`] returns, and killed if the run ends any other way
//! (its guard's drop, or its stdin closing when this process dies).

mod baseline;
pub mod child;
mod client;
mod counters;
mod growth;
mod load;
mod plot;
mod process;
mod report;
mod servers;
mod store;
pub mod traffic;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use durable_mcp::store::Store;

pub use client::{Era, McpClient, PROTOCOL_VERSION, UnknownEra};
pub use counters::Counted;
pub use growth::GrowthRow;
pub use load::{LoadResult, LoadSpec, run_load};
pub use process::{ChildProcess, Pinning, process_running};
pub use report::{Cpus, HttpRow, Limit, PythonStatus, Report, ServerKind, StoreRow};
pub use servers::{
    DurableSettings, Executables, Launcher, MCP_PATH, PYTHON_MCP_PATH, PYTHON_SERVER,
    RunningServer, ServerSpec,
};
pub use store::{AppendResult, REPLAY_BATCH, ReplayResult, StoreResult, StoreSpec, bench_store};

use crate::child::LoadArgs;

/// The tool every `tools/call` measurement calls: a constant text result, so the figures
/// are the transports' and stores' cost, not the handler's.
pub const TOOL: &str = "test_simple_text";

/// Where `scripts/setup-bench.sh` puts the Python baseline's interpreter, relative to
/// the repository.
pub const PYTHON_VENV_PYTHON: &str = ".tools/bench-python/bin/python";

/// Errors of a benchmark run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// A socket or file operation failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The server's HTTP response was not what an MCP client expects.
    #[error("HTTP: {0}")]
    Http(String),
    /// The server answered with a JSON-RPC error (or a tool error result).
    #[error("the server answered with an error: {0}")]
    JsonRpc(serde_json::Value),
    /// Something took longer than its bound.
    #[error("timed out: {0}")]
    Timeout(&'static str),
    /// A store operation failed.
    #[error(transparent)]
    Store(#[from] durable_mcp_store::StoreError),
    /// Opening a store or serving failed.
    #[error(transparent)]
    Server(#[from] durable_mcp::Error),
    /// A child process (server or load generator) failed.
    #[error("{name}: {detail}")]
    Process {
        /// The child's name.
        name: String,
        /// What went wrong, with the end of its log.
        detail: String,
    },
    /// A benchmark task panicked or was cancelled.
    #[error("benchmark task failed: {0}")]
    Task(String),
    /// A measurement's result was wrong (for example a replay missed events).
    #[error("check failed: {0}")]
    Check(String),
    /// The configuration cannot be run.
    #[error("configuration: {0}")]
    Config(String),
}

/// Whether the run includes the Python SDK + mcp-persist baseline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PythonBaseline {
    /// If [`PYTHON_VENV_PYTHON`] is found above the working directory or the executable.
    Auto,
    /// With this interpreter (a venv with `mcp` and `mcp-persist[sqlite]`).
    At(PathBuf),
    /// Not at all.
    Off,
}

/// What one run measures.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// The executables the children run.
    pub executables: Executables,
    /// The command line that started the run, for the report.
    pub command_line: Option<String>,
    /// Store URLs to measure (as [`durable_mcp::open_store`] takes them). `memory:` is
    /// always measured, first, as the baseline. Empty: `memory:` plus two temporary SQLite
    /// files, with `synchronous=FULL` (the default) and `synchronous=NORMAL`.
    pub stores: Vec<String>,
    /// Store URLs of `durable-mcp proxy` runs (none by default): the proxy on that store in
    /// front of the `durable-mcp, memory` server's handler over stdio, so its cost is the
    /// difference to that row.
    pub proxy_stores: Vec<String>,
    /// One `tools/call` measurement per entry, with this many connections.
    pub connections: Vec<usize>,
    /// Write the plots of calls per second against connections here ([`Report::plots`];
    /// `None`: none are written, and the report says how to get them).
    pub plot_dir: Option<PathBuf>,
    /// The protocol eras measured.
    pub eras: Vec<Era>,
    /// Runs per (server, era, connections); the report gives their medians.
    pub runs: usize,
    /// How long each run's timed part lasts.
    pub run_duration: Duration,
    /// Untimed calls per connection before each run.
    pub warmup_calls: usize,
    /// At most this many timed calls per connection and run (for tests; `None`: as many
    /// as fit in [`BenchConfig::run_duration`]).
    pub max_calls: Option<usize>,
    /// Events each writer appends.
    pub events_per_writer: usize,
    /// Concurrent writers (distinct streams) of the second append measurement.
    pub writers: usize,
    /// Stream lengths whose replay is timed.
    pub replay_sizes: Vec<usize>,
    /// Timed replays per length (median reported).
    pub replay_runs: usize,
    /// Idle session counts at which each server's memory is read (empty: not measured).
    pub growth_sessions: Vec<usize>,
    /// Also measure the stock rmcp server.
    pub rmcp_baseline: bool,
    /// The Python SDK + mcp-persist baseline.
    pub python_baseline: PythonBaseline,
    /// Pin servers and load generators to CPUs where the machine allows.
    pub pin: bool,
    /// Bound of any single store measurement; one cut short is marked in the report.
    pub time_limit: Duration,
}

impl BenchConfig {
    /// The full run of `durable-mcp-bench`, with the children run by `executables`.
    pub fn new(executables: Executables) -> Self {
        Self {
            executables,
            command_line: None,
            stores: Vec::new(),
            proxy_stores: Vec::new(),
            connections: vec![1, 8, 64, 256],
            plot_dir: None,
            eras: Era::ALL.to_vec(),
            runs: 3,
            run_duration: Duration::from_secs(5),
            warmup_calls: 50,
            max_calls: None,
            events_per_writer: 1000,
            writers: 32,
            replay_sizes: vec![1_000, 10_000, 100_000],
            replay_runs: 5,
            growth_sessions: vec![0, 1_000, 10_000],
            rmcp_baseline: true,
            python_baseline: PythonBaseline::Auto,
            pin: true,
            time_limit: Duration::from_secs(10),
        }
    }

    /// A short run (what `cargo bench -p durable-mcp-bench` does).
    pub fn quick(executables: Executables) -> Self {
        Self {
            runs: 1,
            run_duration: Duration::from_secs(1),
            warmup_calls: 10,
            events_per_writer: 300,
            replay_sizes: vec![1_000, 10_000],
            replay_runs: 3,
            growth_sessions: vec![0, 500],
            time_limit: Duration::from_secs(5),
            ..Self::new(executables)
        }
    }
}

/// A directory for temporary SQLite files, removed when dropped.
#[derive(Debug)]
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new() -> Result<Self, BenchError> {
        let dir = std::env::temp_dir().join(format!(
            "durable-mcp-bench-{}-{}",
            std::process::id(),
            durable_mcp::store::now_ms()
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        // Best effort: a leftover temporary directory is harmless.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The stores of a run: `memory:` first, then the configured ones (or the defaults).
fn store_urls(configured: &[String], scratch: Option<&ScratchDir>) -> Vec<String> {
    let mut urls = vec!["memory:".to_owned()];
    match scratch {
        Some(dir) => {
            for (file, query) in [("full.db", ""), ("normal.db", "?synchronous=normal")] {
                urls.push(format!("sqlite:{}{query}", dir.path().join(file).display()));
            }
        }
        None => urls.extend(
            configured
                .iter()
                .filter(|url| url.as_str() != "memory:")
                .cloned(),
        ),
    }
    urls
}

/// The prefix of a store URL measured behind encryption at rest: `encrypted+sqlite:PATH`
/// is `sqlite:PATH` wrapped in a `CryptStore` with a fresh key of its own (one per opened
/// store: a scratch store is made for the run and is never read by another key).
pub const ENCRYPTED: &str = "encrypted+";

/// Open a store URL of the bench: as [`durable_mcp::open_store`], or behind encryption at
/// rest with an [`ENCRYPTED`] prefix.
///
/// # Errors
/// The store did not open, or no key could be made (the system random source failed).
pub async fn open_store(url: &str) -> Result<Arc<dyn Store>, BenchError> {
    let Some(inner) = url.strip_prefix(ENCRYPTED) else {
        return Ok(durable_mcp::open_store(url).await?);
    };
    let mut keys = durable_mcp_store_crypt::KeyFile::default();
    keys.rotate(durable_mcp::store::now_ms())
        .map_err(|e| BenchError::Store(durable_mcp_store::StoreError::Unavailable(Box::new(e))))?;
    let ring = keys
        .ring("the bench's key")
        .map_err(|e| BenchError::Store(durable_mcp_store::StoreError::Unavailable(Box::new(e))))?;
    Ok(Arc::new(durable_mcp_store_crypt::CryptStore::new(
        durable_mcp::open_store(inner).await?,
        Arc::new(ring),
    )))
}

/// A short, credential-free name for a store URL.
pub fn store_label(url: &str) -> String {
    if let Some(inner) = url.strip_prefix(ENCRYPTED) {
        return format!("{} encrypted", store_label(inner));
    }
    let (scheme, rest) = url.split_once(':').unwrap_or((url, ""));
    match scheme {
        "memory" => "memory".to_owned(),
        "sqlite" => {
            let synchronous = rest
                .split_once('?')
                .map(|(_, query)| query)
                .unwrap_or_default()
                .split('&')
                .find_map(|pair| pair.strip_prefix("synchronous="))
                .unwrap_or("full");
            format!("sqlite synchronous={}", synchronous.to_ascii_uppercase())
        }
        _ => {
            // scheme://[user[:password]@]host[:port][/db][?query]: drop credentials and query.
            let rest = rest.trim_start_matches('/');
            let rest = rest.split_once('?').map_or(rest, |(before, _)| before);
            let rest = rest.rsplit_once('@').map_or(rest, |(_, after)| after);
            format!("{scheme}://{rest}")
        }
    }
}

/// The labels of `urls`, in order: [`store_label`], and where two would read alike (the
/// same backend on two prefixes, say), the URL's `prefix` or `schema` setting after it,
/// then a number: each row of the report must name one store.
pub fn store_labels(urls: &[String]) -> Vec<String> {
    let base: Vec<String> = urls.iter().map(|url| store_label(url)).collect();
    let mut labels: Vec<String> = base
        .iter()
        .zip(urls)
        .map(|(label, url)| {
            if base.iter().filter(|other| *other == label).count() < 2 {
                return label.clone();
            }
            let query = url
                .split_once('?')
                .map(|(_, query)| query)
                .unwrap_or_default();
            let named: Vec<&str> = query
                .split('&')
                .filter(|pair| {
                    ["prefix=", "schema="]
                        .iter()
                        .any(|key| pair.starts_with(key))
                })
                .collect();
            if named.is_empty() {
                label.clone()
            } else {
                format!("{label} ({})", named.join(", "))
            }
        })
        .collect();
    for i in 0..labels.len() {
        let same = labels[..i]
            .iter()
            .filter(|earlier| **earlier == labels[i])
            .count();
        if same > 0 {
            labels[i] = format!("{} #{}", labels[i], same + 1);
        }
    }
    labels
}

/// Find the Python baseline's interpreter: [`PYTHON_VENV_PYTHON`] under the working
/// directory, the executable's directory, or one of their parents.
pub fn find_python_baseline(executable: &Path) -> Option<PathBuf> {
    let cwd = std::env::current_dir().ok();
    let roots = cwd.iter().map(PathBuf::as_path).chain(executable.parent());
    roots
        .flat_map(Path::ancestors)
        .map(|dir| dir.join(PYTHON_VENV_PYTHON))
        .find(|python| python.is_file())
}

/// The commit of the repository holding the working directory (or else `executable`, as
/// `target/release/durable-mcp` is in its checkout) and whether tracked files have
/// uncommitted changes; `None` without git or outside a repository.
async fn git_commit(executable: &Path) -> Option<(String, bool)> {
    let git = |dir: PathBuf, args: &'static [&'static str]| async move {
        let out = tokio::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let dirs = std::env::current_dir()
        .ok()
        .into_iter()
        .chain(executable.parent().map(Path::to_path_buf));
    for dir in dirs {
        if let Some(commit) = git(dir.clone(), &["rev-parse", "--short=10", "HEAD"])
            .await
            .filter(|c| !c.is_empty())
        {
            let dirty = git(dir, &["status", "--porcelain", "--untracked-files=no"])
                .await
                .is_some_and(|s| !s.is_empty());
            return Some((commit, dirty));
        }
    }
    None
}

/// Run the benchmarks of `config`, reporting progress through `progress` (one line per
/// measurement), and return the report.
///
/// Store measurements run in this process, on a runtime of its own (its own threads,
/// logging silenced on them), one store after another, before any server starts (a
/// server child may open the same SQLite file). Then, for each of [`BenchConfig::runs`]
/// rounds, every server in turn is started alone, measured in every era and with every
/// connection count (one load generator child per measurement), and stopped; so slow
/// drift of a shared machine hits all servers alike. Last, each Rust server is started
/// once more for the memory it holds with idle sessions.
///
/// A failed HTTP measurement is listed in [`Report::failures`] and the run goes on.
///
/// # Errors
/// The configuration cannot run, a store cannot be opened, or a store measurement
/// failed. Child processes are gone when this returns, whatever it returns.
pub async fn run(
    config: &BenchConfig,
    mut progress: impl FnMut(&str),
) -> Result<Report, BenchError> {
    let (lines, mut progress_lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    let (done, result) = tokio::sync::oneshot::channel();
    let config = config.clone();
    std::thread::Builder::new()
        .name("durable-mcp-bench".into())
        .spawn(move || {
            let _quiet = tracing::dispatcher::set_default(&tracing::Dispatch::none());
            let outcome = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .on_thread_start(|| {
                    // For the whole life of the worker thread.
                    std::mem::forget(tracing::dispatcher::set_default(&tracing::Dispatch::none()));
                })
                .build()
                .map_err(BenchError::from)
                .and_then(|runtime| {
                    runtime.block_on(measure(&config, &mut |line: &str| {
                        let _ = lines.send(line.to_owned());
                    }))
                });
            let _ = done.send(outcome);
        })?;
    while let Some(line) = progress_lines.recv().await {
        progress(&line);
    }
    result
        .await
        .map_err(|_| BenchError::Task("the benchmark thread ended without a result".into()))?
}

async fn measure(
    config: &BenchConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<Report, BenchError> {
    config.executables.check()?;
    let started_ms = durable_mcp::store::now_ms();
    let commit = git_commit(&config.executables.durable_mcp).await;
    let scratch = ScratchDir::new()?;
    let urls = store_urls(&config.stores, config.stores.is_empty().then_some(&scratch));
    let python = match &config.python_baseline {
        PythonBaseline::Off => Err(PythonStatus::Off),
        PythonBaseline::At(python) if python.is_file() => Ok(python.clone()),
        PythonBaseline::At(python) => Err(PythonStatus::Missing(format!("{} does not exist; scripts/setup-bench.sh installs it", python.display()))),
        PythonBaseline::Auto => find_python_baseline(&config.executables.bench).ok_or_else(|| {
            PythonStatus::Missing(format!("no {PYTHON_VENV_PYTHON} here; install it with `scripts/setup-bench.sh`, or pass `--python-baseline PATH`"))
        }),
    };
    if let Err(PythonStatus::Missing(why)) = &python {
        progress(&format!("Python baseline not measured: {why}"));
    }
    let pinning = if config.pin {
        Pinning::detect().await
    } else {
        Pinning::none("turned off")
    };
    progress(&pinning.describe());
    let kernel_syncs = counters::KernelSyncs::available().await;
    if !kernel_syncs {
        progress(
            "fsyncs not counted by the kernel: `perf stat -a -e syscalls:sys_enter_fsync` does not run here (perf missing, or not root)",
        );
    }

    let store_rows = measure_stores(config, &urls, progress).await?;

    let mut servers: Vec<(String, ServerKind, ServerSpec)> = Vec::new();
    if config.rmcp_baseline {
        servers.push((
            report::RMCP_LABEL.to_owned(),
            ServerKind::Rmcp,
            ServerSpec::Rmcp,
        ));
    }
    if let Ok(python) = &python {
        servers.push((
            report::PYTHON_LABEL.to_owned(),
            ServerKind::Python,
            ServerSpec::Python {
                python: python.clone(),
            },
        ));
    }
    for (url, label) in urls.iter().zip(store_labels(&urls)) {
        servers.push((
            format!("durable-mcp, {label}"),
            ServerKind::Durable,
            ServerSpec::Durable { url: url.clone() },
        ));
    }
    for (url, label) in config
        .proxy_stores
        .iter()
        .zip(store_labels(&config.proxy_stores))
    {
        servers.push((
            format!("durable-mcp proxy, {label}"),
            ServerKind::Proxy,
            ServerSpec::Proxy { url: url.clone() },
        ));
    }
    let mut launcher = Launcher::new(config.executables.clone(), pinning.clone(), scratch.path());
    let mut http = Http {
        rows: Vec::new(),
        failures: Vec::new(),
        rmcp_modern: None,
        kernel_syncs,
        counter_notes: Vec::new(),
    };
    for round in 0..config.runs.max(1) {
        for (label, kind, spec) in &servers {
            measure_server(
                config,
                &mut launcher,
                &mut http,
                (label, *kind, spec),
                round,
                progress,
            )
            .await;
        }
    }
    let mut growth = Vec::new();
    if !config.growth_sessions.is_empty() {
        for (label, _, spec) in servers
            .iter()
            .filter(|(_, kind, _)| !matches!(kind, ServerKind::Python | ServerKind::Proxy))
        {
            progress(&format!("memory with idle sessions: {label}"));
            match measure_growth(config, &mut launcher, label, spec).await {
                Ok(row) => growth.push(row),
                Err(error) => http
                    .failures
                    .push(format!("memory with idle sessions, {label}: {error}")),
            }
        }
    }
    drop(scratch);
    let mut report = Report {
        config: config.clone(),
        started_ms,
        finished_ms: durable_mcp::store::now_ms(),
        commit,
        pinning: pinning.describe(),
        cpus: Cpus::detect(pinning.is_pinned()),
        stores: store_rows,
        http: http.rows,
        growth,
        rmcp_modern: http.rmcp_modern,
        python: match python {
            Ok(python) => PythonStatus::Measured(python.display().to_string()),
            Err(status) => status,
        },
        failures: http.failures,
        counter_notes: http.counter_notes,
        kernel_syncs,
        child_pids: launcher.spawned().to_vec(),
    };
    if let Some(dir) = &config.plot_dir {
        let written = std::fs::create_dir_all(dir).and_then(|()| {
            report
                .plots()
                .into_iter()
                .try_for_each(|(name, svg)| std::fs::write(dir.join(name), svg))
        });
        if let Err(error) = written {
            report
                .failures
                .push(format!("writing the plots to {}: {error}", dir.display()));
        }
    }
    Ok(report)
}

/// Open every store first (a wrong URL fails the run before anything is measured), then
/// measure them one after another; every store is closed again when this returns.
async fn measure_stores(
    config: &BenchConfig,
    urls: &[String],
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<StoreRow>, BenchError> {
    let spec = StoreSpec {
        events_per_writer: config.events_per_writer,
        writers: config.writers,
        replay_sizes: config.replay_sizes.clone(),
        replay_runs: config.replay_runs,
        time_limit: config.time_limit,
    };
    let mut stores: Vec<(String, Arc<dyn Store>)> = Vec::with_capacity(urls.len());
    for (url, label) in urls.iter().zip(store_labels(urls)) {
        stores.push((label, open_store(url).await?));
    }
    let mut rows = Vec::with_capacity(urls.len());
    for (label, store) in stores {
        progress(&format!("store {label}: appends and replays"));
        let result = bench_store(store, &spec).await?;
        rows.push(StoreRow {
            backend: label,
            result,
        });
    }
    Ok(rows)
}

/// The HTTP part's results so far.
struct Http {
    rows: Vec<HttpRow>,
    failures: Vec<String>,
    rmcp_modern: Option<Result<(), String>>,
    /// Whether `perf` counts the machine's fsyncs around each load.
    kernel_syncs: bool,
    /// What each store's counters are (one line per server, for the notes).
    counter_notes: Vec<String>,
}

impl Http {
    fn row(&mut self, label: &str, kind: ServerKind, era: Era, connections: usize) -> &mut HttpRow {
        let at = self
            .rows
            .iter()
            .position(|r| r.server == label && r.era == era && r.connections == connections);
        let at = at.unwrap_or_else(|| {
            self.rows.push(HttpRow {
                server: label.to_owned(),
                kind,
                era,
                connections,
                runs: Vec::new(),
                counted: Vec::new(),
            });
            self.rows.len() - 1
        });
        &mut self.rows[at]
    }
}

/// One round of one server: start it, measure every era and connection count, stop it.
/// A durable-mcp server serves its metrics, and its store's counters are read around every
/// load ([`counters`]).
async fn measure_server(
    config: &BenchConfig,
    launcher: &mut Launcher,
    http: &mut Http,
    (label, kind, spec): (&str, ServerKind, &ServerSpec),
    round: usize,
    progress: &mut dyn FnMut(&str),
) {
    let eras: Vec<Era> = config
        .eras
        .iter()
        .copied()
        .filter(|era| spec.eras().contains(era))
        .collect();
    let started = match spec {
        ServerSpec::Durable { url } => {
            let settings = DurableSettings {
                metrics: true,
                ..DurableSettings::default()
            };
            launcher.durable(url, &settings, label).await
        }
        _ => launcher.server(spec, label).await,
    };
    let server = match started {
        Ok(server) => server,
        Err(error) => {
            http.failures
                .push(format!("starting {label} (run {}): {error}", round + 1));
            return;
        }
    };
    let mut store = match spec {
        ServerSpec::Durable { url } => {
            let mut source = counters::Source::connect(url, server.metrics()).await;
            if let Some(note) = source.describe().await {
                let note = format!("{label}: {note}.");
                if !http.counter_notes.contains(&note) {
                    http.counter_notes.push(note);
                }
            }
            Some(source)
        }
        _ => None,
    };
    if kind == ServerKind::Rmcp && eras.contains(&Era::Modern) && http.rmcp_modern.is_none() {
        http.rmcp_modern = Some(probe_modern(&server).await);
    }
    for era in eras {
        if kind == ServerKind::Rmcp
            && era == Era::Modern
            && matches!(http.rmcp_modern, Some(Err(_)))
        {
            continue;
        }
        for &connections in &config.connections {
            progress(&format!(
                "tools/call run {}/{}: {label}, {era}, {connections} connection(s)",
                round + 1,
                config.runs.max(1)
            ));
            let args = LoadArgs {
                addr: server.addr(),
                path: server.path().to_owned(),
                era,
                connections,
                duration_ms: u64::try_from(config.run_duration.as_millis()).unwrap_or(u64::MAX),
                warmup_calls: config.warmup_calls,
                max_calls: config.max_calls,
                tool: TOOL.to_owned(),
                drop_percent: 0,
                drop_max_delay_us: 0,
                seed: 1,
            };
            let name = format!("load {label} {era} {connections}");
            let before = match store.as_mut() {
                Some(store) => Some(store.read(false).await),
                None => None,
            };
            let kernel = if http.kernel_syncs && store.is_some() {
                counters::KernelSyncs::start().ok()
            } else {
                None
            };
            let (cpu_before, machine_before) = (server.cpu_time().ok(), process::machine_busy());
            let mut made = 0;
            let outcome = launcher
                .load(&server, &args, &name)
                .await
                .map(|mut result| {
                    // Every call the server answered: the timed ones and each connection's warm-up.
                    made = result.calls + connections * args.warmup_calls;
                    let made = u32::try_from(made).ok().filter(|&made| made > 0);
                    let per_call = |before: Option<Duration>, after: Option<Duration>| {
                        Some(after?.saturating_sub(before?) / made?)
                    };
                    result.server_cpu_per_call = per_call(cpu_before, server.cpu_time().ok());
                    result.machine_cpu_per_call = per_call(machine_before, process::machine_busy());
                    result
                });
            let kernel_syncs = match kernel {
                Some(kernel) => kernel.stop().await.ok(),
                None => None,
            };
            let counted = match (store.as_mut(), before, &outcome) {
                (Some(store), Some(before), Ok(_)) => {
                    let counted = match (before, store.read(true).await) {
                        (Ok(before), Ok(after)) => Ok(Counted {
                            kernel_syncs,
                            ..store.counted(&before, &after, made as u64)
                        }),
                        (Err(error), _) | (_, Err(error)) => Err(error),
                    };
                    Some(counted)
                }
                _ => None,
            };
            let row = http.row(label, kind, era, connections);
            let mut failed = Vec::new();
            match outcome {
                Ok(result) => row.runs.push(result),
                Err(error) => failed.push(error.to_string()),
            }
            match counted {
                Some(Ok(counted)) => row.counted.push(counted),
                Some(Err(error)) => failed.push(format!("reading the store's counters: {error}")),
                None => {}
            }
            for error in failed {
                http.failures.push(format!(
                    "{label}, {era}, {connections} connection(s), run {}: {error}",
                    round + 1
                ));
            }
        }
    }
    drop(store);
    if let Err(error) = server.stop().await {
        http.failures.push(format!("stopping {label}: {error}"));
    }
}

/// Whether `server` answers one 2026-07-28 `tools/call` (`Err`: what it did instead).
async fn probe_modern(server: &RunningServer) -> Result<(), String> {
    let mut client = McpClient::connect(server.addr(), server.path(), Era::Modern)
        .await
        .map_err(|e| e.to_string())?;
    client
        .call_tool(TOOL, &serde_json::json!({}))
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Start `spec` afresh and read its memory at every idle session count.
async fn measure_growth(
    config: &BenchConfig,
    launcher: &mut Launcher,
    label: &str,
    spec: &ServerSpec,
) -> Result<GrowthRow, BenchError> {
    let server = launcher.server(spec, &format!("{label} (memory)")).await?;
    let measured = async {
        let mut counts = config.growth_sessions.clone();
        counts.sort_unstable();
        counts.dedup();
        let (mut open, mut rss_kib) = (0, Vec::with_capacity(counts.len()));
        for target in counts {
            growth::open_sessions(server.addr(), server.path(), target - open).await?;
            open = target;
            growth::settle().await;
            rss_kib.push((open, server.rss_kib()?));
        }
        Ok::<_, BenchError>(GrowthRow {
            server: label.to_owned(),
            rss_kib,
        })
    }
    .await;
    let stopped = server.stop().await;
    let row = measured?;
    stopped?;
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_name_the_backend_without_credentials() {
        assert_eq!(store_label("memory:"), "memory");
        assert_eq!(store_label("sqlite:/tmp/x.db"), "sqlite synchronous=FULL");
        assert_eq!(
            store_label("sqlite:/tmp/x.db?synchronous=normal"),
            "sqlite synchronous=NORMAL"
        );
        assert_eq!(
            store_label("postgres://bob:secret@db:5432/mcp?sslmode=disable"),
            "postgres://db:5432/mcp"
        );
        assert_eq!(
            store_label("redis://:pw@localhost:6379/0"),
            "redis://localhost:6379/0"
        );
    }

    #[test]
    fn stores_that_would_read_alike_get_labels_of_their_own() {
        let urls: Vec<String> = [
            "memory:",
            "redis://:pw@localhost:6379/0?prefix=a",
            "redis://localhost:6379/0?prefix=b&wake_tick=1",
            "postgres://db/mcp?schema=x",
            "sqlite:/tmp/a.db",
            "sqlite:/tmp/b.db",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            store_labels(&urls),
            [
                "memory",
                "redis://localhost:6379/0 (prefix=a)",
                "redis://localhost:6379/0 (prefix=b)",
                "postgres://db/mcp",
                "sqlite synchronous=FULL",
                "sqlite synchronous=FULL #2",
            ]
        );
    }

    #[test]
    fn memory_is_always_first_and_once() {
        let urls = store_urls(&["sqlite:a.db".into(), "memory:".into()], None);
        assert_eq!(urls, ["memory:", "sqlite:a.db"]);
    }
}
