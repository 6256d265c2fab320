//! Benchmarks of durable-mcp (not timed tests): what `durable-mcp bench` and
//! `cargo bench -p durable-mcp-bench` run.
//!
//! Per store backend, named by URL exactly as [`durable_mcp::open_store`] takes it (so any
//! backend `open_store` knows is measurable):
//!
//! - **appends**: events committed per second through [`Store::append`], one writer on one
//!   stream, then [`BenchConfig::writers`] writers on distinct streams;
//! - **replay**: the time to read a closed stream of 100 / 1,000 / 10,000 events whole with
//!   [`Store::read_after`] loops of [`REPLAY_BATCH`], as the engine's tail replays a stream
//!   to a resuming client;
//!
//! and over HTTP, per server: `tools/call` round trips per second, p50 and p99, with 1 and
//! 32 concurrent clients ([`McpClient`]: one keep-alive connection and one session each).
//! The in-memory backend is always measured, and is the baseline of the store figures; a
//! stock rmcp server (feature `rmcp-baseline`) is the baseline of the HTTP figures.
//! [`Report::to_markdown`] prints the tables with a ratio beside every figure.
//!
//! Everything runs in this process, on loopback, bounded in count and time.

mod client;
mod load;
mod report;
mod servers;
mod store;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use durable_mcp::Store;

pub use client::{McpClient, PROTOCOL_VERSION};
pub use load::{LoadResult, LoadSpec, run_load};
pub use report::{HttpRow, Report, StoreRow};
#[cfg(feature = "rmcp-baseline")]
pub use servers::start_rmcp_baseline;
pub use servers::{RunningServer, start_durable};
pub use store::{AppendResult, REPLAY_BATCH, ReplayResult, StoreResult, StoreSpec, bench_store};

/// The tool every `tools/call` measurement calls: a constant text result, so the figures
/// are the transports' and stores' cost, not the handler's.
pub const TOOL: &str = "test_simple_text";

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

/// What one run measures.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Store URLs to measure (as [`durable_mcp::open_store`] takes them). `memory:` is
    /// always measured, first, as the baseline. Empty: `memory:` plus two temporary SQLite
    /// files, with `synchronous=FULL` (the default) and `synchronous=NORMAL`.
    pub stores: Vec<String>,
    /// One `tools/call` measurement per entry, with this many concurrent clients.
    pub clients: Vec<usize>,
    /// Timed `tools/call` round trips per client.
    pub requests_per_client: usize,
    /// Untimed round trips per client first.
    pub warmup_per_client: usize,
    /// Events each writer appends.
    pub events_per_writer: usize,
    /// Concurrent writers (distinct streams) of the second append measurement.
    pub writers: usize,
    /// Stream lengths whose replay is timed.
    pub replay_sizes: Vec<usize>,
    /// Timed replays per length (median reported).
    pub replay_runs: usize,
    /// Also measure the stock rmcp server (needs feature `rmcp-baseline`).
    pub rmcp_baseline: bool,
    /// Bound of any single measurement; one cut short is marked in the report.
    pub time_limit: Duration,
}

impl Default for BenchConfig {
    /// The full run of `durable-mcp bench`.
    fn default() -> Self {
        Self {
            stores: Vec::new(),
            clients: vec![1, 32],
            requests_per_client: 1000,
            warmup_per_client: 20,
            events_per_writer: 2000,
            writers: 32,
            replay_sizes: vec![100, 1_000, 10_000],
            replay_runs: 5,
            rmcp_baseline: cfg!(feature = "rmcp-baseline"),
            time_limit: Duration::from_secs(30),
        }
    }
}

impl BenchConfig {
    /// A short run (what `cargo bench -p durable-mcp-bench` does).
    pub fn quick() -> Self {
        Self {
            requests_per_client: 200,
            warmup_per_client: 10,
            events_per_writer: 500,
            replay_runs: 3,
            time_limit: Duration::from_secs(10),
            ..Self::default()
        }
    }
}

/// A directory for temporary SQLite files, removed when dropped.
#[derive(Debug)]
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new() -> Result<Self, BenchError> {
        let dir = std::env::temp_dir().join(format!("durable-mcp-bench-{}-{}", std::process::id(), durable_mcp::now_ms()));
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
        None => urls.extend(configured.iter().filter(|url| url.as_str() != "memory:").cloned()),
    }
    urls
}

/// A short, credential-free name for a store URL.
pub fn store_label(url: &str) -> String {
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

/// Run the benchmarks of `config`, reporting progress through `progress` (one line per
/// measurement), and return the report.
///
/// The run has a runtime of its own, on its own threads (as many workers as
/// [`tokio`]'s default, one per CPU), with logging silenced on them: servers under
/// measurement write no log lines (rmcp logs every session, and durable-mcp's per-request
/// rmcp service, at INFO), so the figures are the servers', not the terminal's. The
/// caller's runtime only waits.
///
/// Store measurements come first, one store after another. Then every server is started
/// (the rmcp baseline, and durable-mcp once per store) and, for each client count, each
/// server is measured in turn, so slow drift of a shared machine hits all of them alike.
///
/// # Errors
/// The first failed measurement ends the run (servers are stopped first).
pub async fn run(config: &BenchConfig, mut progress: impl FnMut(&str)) -> Result<Report, BenchError> {
    let (lines, mut progress_lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    let (done, result) = tokio::sync::oneshot::channel();
    let config = config.clone();
    std::thread::Builder::new().name("durable-mcp-bench".into()).spawn(move || {
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
    result.await.map_err(|_| BenchError::Task("the benchmark thread ended without a result".into()))?
}

async fn measure(config: &BenchConfig, progress: &mut dyn FnMut(&str)) -> Result<Report, BenchError> {
    if config.rmcp_baseline && !cfg!(feature = "rmcp-baseline") {
        return Err(BenchError::Config("built without the rmcp-baseline feature".into()));
    }
    let started_ms = durable_mcp::now_ms();
    let scratch = if config.stores.is_empty() { Some(ScratchDir::new()?) } else { None };
    let urls = store_urls(&config.stores, scratch.as_ref());
    let store_spec = StoreSpec {
        events_per_writer: config.events_per_writer,
        writers: config.writers,
        replay_sizes: config.replay_sizes.clone(),
        replay_runs: config.replay_runs,
        time_limit: config.time_limit,
    };
    // Open every store first: a wrong URL fails the run before anything is measured.
    let mut stores: Vec<(String, Arc<dyn Store>)> = Vec::with_capacity(urls.len());
    for url in &urls {
        stores.push((store_label(url), durable_mcp::open_store(url).await?));
    }
    let mut store_rows = Vec::with_capacity(urls.len());
    for (label, store) in &stores {
        progress(&format!("store {label}: appends and replays"));
        let result = bench_store(store.clone(), &store_spec).await?;
        store_rows.push(StoreRow { backend: label.clone(), result });
    }

    let mut servers: Vec<(String, bool, RunningServer)> = Vec::new();
    let http = match start_servers(config, &stores, &mut servers).await {
        Ok(()) => measure_http(config, &servers, progress).await,
        Err(error) => Err(error),
    };
    let mut stopped = Ok(());
    for (_, _, server) in servers {
        let result = server.stop().await;
        if stopped.is_ok() {
            stopped = result;
        }
    }
    let http_rows = http?;
    stopped?;
    drop(stores);
    drop(scratch);
    Ok(Report::new(config.clone(), started_ms, store_rows, http_rows))
}

async fn start_servers(
    config: &BenchConfig,
    stores: &[(String, Arc<dyn Store>)],
    servers: &mut Vec<(String, bool, RunningServer)>,
) -> Result<(), BenchError> {
    #[cfg(feature = "rmcp-baseline")]
    if config.rmcp_baseline {
        servers.push((report::RMCP_LABEL.to_owned(), true, start_rmcp_baseline().await?));
    }
    #[cfg(not(feature = "rmcp-baseline"))]
    let _ = config;
    for (label, store) in stores {
        servers.push((format!("durable-mcp, {label}"), false, start_durable(store.clone()).await?));
    }
    Ok(())
}

async fn measure_http(
    config: &BenchConfig,
    servers: &[(String, bool, RunningServer)],
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<HttpRow>, BenchError> {
    let mut rows = Vec::new();
    for &clients in &config.clients {
        let spec = LoadSpec {
            clients,
            requests_per_client: config.requests_per_client,
            warmup_per_client: config.warmup_per_client,
            time_limit: config.time_limit,
            tool: TOOL.to_owned(),
            arguments: serde_json::json!({}),
        };
        for (label, baseline, server) in servers {
            progress(&format!("tools/call: {label}, {clients} client(s)"));
            let result = run_load(server.addr(), server.path(), &spec).await?;
            rows.push(HttpRow { server: label.clone(), baseline: *baseline, result });
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_name_the_backend_without_credentials() {
        assert_eq!(store_label("memory:"), "memory");
        assert_eq!(store_label("sqlite:/tmp/x.db"), "sqlite synchronous=FULL");
        assert_eq!(store_label("sqlite:/tmp/x.db?synchronous=normal"), "sqlite synchronous=NORMAL");
        assert_eq!(store_label("postgres://bob:secret@db:5432/mcp?sslmode=disable"), "postgres://db:5432/mcp");
        assert_eq!(store_label("redis://:pw@localhost:6379/0"), "redis://localhost:6379/0");
    }

    #[test]
    fn memory_is_always_first_and_once() {
        let urls = store_urls(&["sqlite:a.db".into(), "memory:".into()], None);
        assert_eq!(urls, ["memory:", "sqlite:a.db"]);
    }
}
