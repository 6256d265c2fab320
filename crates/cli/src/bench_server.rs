//! `durable-mcp bench-server durable|proxy|stdio` (hidden): the durable-mcp servers under
//! test of the benchmark, which is a binary of its own (`durable-mcp-bench`, crates/bench)
//! and starts these as child processes, so that it measures the shipped binary. Nothing
//! else of the benchmark is in this binary: stock rmcp and the load generators are
//! `durable-mcp-bench`'s own subcommands.
//!
//! The contract with the benchmark is this command line and two stdout lines: `METRICS
//! <addr>` (with `--metrics-listen`), then `LISTENING <addr>` once the server accepts
//! connections. A server ends when its stdin ends (the benchmark closed it, or died), on
//! Ctrl-C or on SIGTERM. The benchmark's tests run these subcommands.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use durable_mcp::DurableMcp;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

/// The line prefix printed once the server listens.
const LISTENING: &str = "LISTENING ";

/// The line prefix of the metrics address, printed before [`LISTENING`].
const METRICS: &str = "METRICS ";

/// The prefix of a store URL served behind encryption at rest (`encrypted+sqlite:...`), as
/// the benchmark names it.
const ENCRYPTED: &str = "encrypted+";

/// The store of the proxy's upstream (`bench-server stdio`): the cheapest, so that what is
/// measured is the proxy.
const UPSTREAM_STORE: &str = "memory:";

/// A server under test of `durable-mcp-bench`, in a process of its own.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchServerArgs {
    /// Which server.
    #[command(subcommand)]
    pub(crate) server: ServedBy,
}

/// Which server a `bench-server` process runs.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ServedBy {
    /// durable-mcp serving the `everything` example with the default HTTP configuration
    /// and engine options.
    Durable {
        /// The store URL (as `durable-mcp serve --store` takes it), or `encrypted+` and one:
        /// behind encryption at rest with a key made for this process.
        #[arg(long)]
        store: String,
        /// Address to listen on (port 0: any free port; the bound one is printed).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Serve Prometheus metrics on this address (as `durable-mcp serve --metrics-listen`);
        /// from the environment, so that `DURABLE_MCP_METRICS_LISTEN=127.0.0.1:0
        /// durable-mcp-bench` measures every durable-mcp server with metrics on. The bound
        /// address is printed as `METRICS <addr>` before `LISTENING`.
        #[arg(long, env = "DURABLE_MCP_METRICS_LISTEN")]
        metrics_listen: Option<SocketAddr>,
        /// Delete finished streams older than this many seconds (0: never; as `durable-mcp
        /// serve --max-stream-age-secs`). Default: the engine's.
        #[arg(long)]
        max_stream_age_secs: Option<u64>,
        /// Apply retention every this many seconds (as `durable-mcp serve
        /// --prune-interval-secs`). Default: the engine's.
        #[arg(long)]
        prune_interval_secs: Option<u64>,
        /// As `durable-mcp serve --journal-wait-ms`; from the environment too, so that
        /// `DURABLE_MCP_JOURNAL_WAIT_MS=0 durable-mcp-bench` measures every durable-mcp server
        /// journaling each call before its handler. Default: the engine's.
        #[arg(long, env = "DURABLE_MCP_JOURNAL_WAIT_MS")]
        journal_wait_ms: Option<u64>,
    },
    /// `durable-mcp proxy` on a store, in front of the `everything` example served by
    /// durable-mcp over stdio on the memory store (`bench-server stdio`, this executable):
    /// the proxy's cost is the difference to `durable --store memory:`, the same upstream
    /// served directly over HTTP.
    Proxy {
        /// The proxy's store URL.
        #[arg(long)]
        store: String,
        /// Address to listen on (port 0: any free port; the bound one is printed).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
    },
    /// The `everything` example served by durable-mcp over stdio (the proxy's upstream).
    Stdio {
        /// The store URL.
        #[arg(long, default_value = "memory:")]
        store: String,
    },
}

impl ServedBy {
    /// Whether it serves HTTP itself (and so may export traces, as `serve` does).
    pub(crate) fn over_http(&self) -> bool {
        matches!(self, ServedBy::Durable { .. } | ServedBy::Proxy { .. })
    }
}

/// Run the server of `args` until stdin ends, Ctrl-C or SIGTERM: bind, print
/// `LISTENING <addr>` on stdout, serve.
pub(crate) async fn serve(args: BenchServerArgs) -> anyhow::Result<()> {
    match args.server {
        ServedBy::Durable {
            store,
            listen,
            metrics_listen,
            max_stream_age_secs,
            prune_interval_secs,
            journal_wait_ms,
        } => {
            let mut options = durable_mcp::engine::EngineOptions::default();
            if let Some(secs) = max_stream_age_secs {
                options.retention.max_stream_age_ms = (secs > 0).then(|| secs.saturating_mul(1000));
            }
            if let Some(secs) = prune_interval_secs {
                options.prune_interval = Duration::from_secs(secs.max(1));
            }
            if let Some(ms) = journal_wait_ms {
                options.journal_wait = Duration::from_millis(ms);
            }
            let server = DurableMcp::new(durable_mcp_demo::Everything::default())
                .store(open_store(&store).await?)
                .engine_options(options);
            // Before the engine is made (it times its store only if metrics are on then).
            let _metrics = match metrics_listen {
                Some(addr) => Some(serve_metrics(addr).await?),
                None => None,
            };
            let listener = bind(listen).await?;
            server.serve_on(listener, stopped()).await?;
            Ok(())
        }
        ServedBy::Proxy { store, listen } => serve_proxy(&store, listen).await,
        ServedBy::Stdio { store } => {
            DurableMcp::new(durable_mcp_demo::Everything::default())
                .store_url(&store)
                .await?
                .serve_stdio()
                .await?;
            Ok(())
        }
    }
}

/// `bench-server proxy`: the proxy's upstream is this executable's `bench-server stdio`
/// (its children run on the proxy's CPU: they inherit its pinning).
async fn serve_proxy(store: &str, listen: SocketAddr) -> anyhow::Result<()> {
    let executable =
        std::env::current_exe().context("finding this executable (the proxy's upstream)")?;
    let args = ["bench-server", "stdio", "--store", UPSTREAM_STORE]
        .map(String::from)
        .to_vec();
    let config =
        durable_mcp_proxy::ProxyConfig::new(executable.to_string_lossy().into_owned(), args);
    let upstream = durable_mcp_proxy::Proxy::start(config)
        .await
        .context("starting the proxy's upstream")?;
    // The upstream is stopped whichever way serving ends.
    let served = async {
        let handler = durable_mcp::proxy::Forward::new(std::sync::Arc::new(upstream.clone()))
            .context("the proxy's upstream's initialize result")?;
        let server = DurableMcp::new(handler).store(open_store(store).await?);
        let listener = bind(listen).await?;
        server.serve_on(listener, stopped()).await?;
        anyhow::Ok(())
    }
    .await;
    upstream.stop();
    served
}

/// Open `url`; one prefixed [`ENCRYPTED`] behind encryption at rest with a key made for
/// this process (the benchmark measures encryption's cost, not key management).
async fn open_store(url: &str) -> anyhow::Result<Arc<dyn durable_mcp::store::Store>> {
    let inner = url.strip_prefix(ENCRYPTED).unwrap_or(url);
    let store = durable_mcp::open_store(inner)
        .await
        .with_context(|| format!("opening {}", crate::config::redact_url(inner)))?;
    if inner.len() == url.len() {
        return Ok(store);
    }
    let mut keys = durable_mcp_store_crypt::KeyFile::default();
    keys.rotate(durable_mcp::store::now_ms())?;
    let ring = keys.ring("the benchmark's key")?;
    Ok(Arc::new(durable_mcp_store_crypt::CryptStore::new(
        store,
        Arc::new(ring),
    )))
}

/// Install the metrics recorder, serve `/metrics` on `addr` (port 0: any free one) and
/// tell the parent where (`serve --metrics-listen` would not say which port it got).
/// Served until the returned task is dropped.
async fn serve_metrics(addr: SocketAddr) -> anyhow::Result<AbortOnDrop> {
    let handle = durable_mcp::metrics::install().context("installing the metrics recorder")?;
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the metrics listener on {addr}"))?;
    let line = format!("{METRICS}{}\n", listener.local_addr()?);
    let task = tokio::spawn(async move {
        if let Err(error) = durable_mcp::axum::serve(listener, handle.router()).await {
            tracing::error!(%error, "the metrics listener failed");
        }
    });
    let mut stdout = tokio::io::stdout();
    stdout.write_all(line.as_bytes()).await?;
    stdout.flush().await?;
    Ok(AbortOnDrop(task))
}

/// Aborts its task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Bind `listen` and tell the parent where.
async fn bind(listen: SocketAddr) -> anyhow::Result<TcpListener> {
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let line = format!("{LISTENING}{}\n", listener.local_addr()?);
    let mut stdout = tokio::io::stdout();
    stdout.write_all(line.as_bytes()).await?;
    stdout.flush().await?;
    Ok(listener)
}

/// Resolves when stdin ends (the parent closed it or died), on Ctrl-C or on SIGTERM.
///
/// Stdin is read on a thread of its own, not tokio's blocking pool: a runtime waits for
/// its blocking tasks when it shuts down, and a read of a stdin that never ends would
/// keep a finished child from exiting.
async fn stopped() {
    let (closed, stdin_closed) = tokio::sync::oneshot::channel::<()>();
    let reader = std::thread::Builder::new()
        .name("stdin-watch".into())
        .spawn(move || {
            let mut buf = [0u8; 64];
            let mut stdin = std::io::stdin().lock();
            // Anything the parent writes is ignored; EOF or an error means it is gone.
            while matches!(std::io::Read::read(&mut stdin, &mut buf), Ok(n) if n > 0) {}
            let _ = closed.send(());
        });
    match reader {
        Ok(_) => tokio::select! {
            _ = stdin_closed => {}
            () = durable_mcp::shutdown_signal() => {}
        },
        Err(error) => {
            tracing::warn!(%error, "cannot watch stdin; stopping on a signal only");
            durable_mcp::shutdown_signal().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, clap::Parser)]
    enum Cli {
        BenchServer(BenchServerArgs),
    }

    #[test]
    fn server_subcommands_parse() {
        let cli = Cli::try_parse_from([
            "x",
            "bench-server",
            "durable",
            "--store",
            "memory:",
            "--listen",
            "127.0.0.1:0",
            "--max-stream-age-secs",
            "0",
        ])
        .expect("parse");
        let Cli::BenchServer(BenchServerArgs {
            server:
                ServedBy::Durable {
                    store,
                    max_stream_age_secs,
                    ..
                },
        }) = cli
        else {
            panic!("not durable")
        };
        assert_eq!((store.as_str(), max_stream_age_secs), ("memory:", Some(0)));
        let Cli::BenchServer(args) =
            Cli::try_parse_from(["x", "bench-server", "proxy", "--store", "memory:"])
                .expect("parse");
        assert!(args.server.over_http());
        let Cli::BenchServer(args) =
            Cli::try_parse_from(["x", "bench-server", "stdio"]).expect("parse");
        assert!(
            matches!(&args.server, ServedBy::Stdio { store } if store == UPSTREAM_STORE)
                && !args.server.over_http()
        );
        assert!(
            Cli::try_parse_from(["x", "bench-server", "rmcp"]).is_err(),
            "stock rmcp is durable-mcp-bench's"
        );
    }
}
