//! The two kinds of child process a run starts, as command-line subcommands: a server
//! under test (`bench-server`) and a load generator (`bench-load`). `durable-mcp` has
//! them as hidden subcommands; this crate's `durable-mcp-bench-child` binary (for its own
//! tests and `cargo bench`) has the same two. Flags are defined here, once.
//!
//! Both talk to the parent through stdout, one line each: a server prints
//! `LISTENING <addr>` once it accepts connections, a load generator prints its
//! [`LoadResult`] as JSON when it is done. Both end when their stdin ends (the parent
//! closed it, or died), and a server also on Ctrl-C or SIGTERM.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use crate::BenchError;
use crate::client::Era;
use crate::load::{Drops, LoadResult, LoadSpec, run_load};

/// The line prefix a server child prints once it listens.
pub const LISTENING: &str = "LISTENING ";

/// The line prefix a server child with metrics prints, before [`LISTENING`], with the
/// address its Prometheus `/metrics` listens on.
pub const METRICS: &str = "METRICS ";

/// A server under test, in a process of its own: `bench-server rmcp|durable ...`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerArgs {
    /// Which server.
    #[command(subcommand)]
    pub server: ServedBy,
}

/// Which server a `bench-server` process runs.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ServedBy {
    /// rmcp's own StreamableHttpService serving the `everything` example (the baseline).
    Rmcp {
        /// Address to listen on (port 0: any free port; the bound one is printed).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
    },
    /// durable-mcp serving the `everything` example with the default HTTP configuration
    /// and engine options.
    Durable {
        /// The store URL (as `durable-mcp serve --store` takes it).
        #[arg(long)]
        store: String,
        /// Address to listen on (port 0: any free port; the bound one is printed).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Serve Prometheus metrics on this address (as `durable-mcp serve --metrics-listen`);
        /// from the environment, so that `DURABLE_MCP_METRICS_LISTEN=127.0.0.1:0 durable-mcp
        /// bench` measures every durable-mcp server with metrics on. The bound address is
        /// printed as `METRICS <addr>` before `LISTENING`.
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

/// The store of the proxy's upstream (`bench-server stdio`): the cheapest, so that what is
/// measured is the proxy.
const UPSTREAM_STORE: &str = "memory:";

/// A closed-loop `tools/call` load generator: `bench-load --addr ... --era ...`.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// The server's address.
    #[arg(long)]
    pub addr: SocketAddr,
    /// The MCP endpoint path.
    #[arg(long, default_value = "/mcp")]
    pub path: String,
    /// Protocol era: `legacy` (2025-11-25 sessions) or `modern` (2026-07-28 stateless).
    #[arg(long, default_value = "legacy")]
    pub era: Era,
    /// Concurrent keep-alive connections, each one client (and in the legacy era its
    /// own session).
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// How long the timed part lasts, in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    pub duration_ms: u64,
    /// Untimed calls per connection first.
    #[arg(long, default_value_t = 50)]
    pub warmup_calls: usize,
    /// Stop a connection after this many timed calls even before the time is up.
    #[arg(long)]
    pub max_calls: Option<usize>,
    /// The tool to call (with no arguments).
    #[arg(long, default_value = crate::TOOL)]
    pub tool: String,
    /// Drop the connection on this share (percent) of the timed calls after writing the
    /// request, and re-send it on a new connection (same session, same id).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub drop_percent: u32,
    /// A dropped call's connection is closed at once or after a random delay below this
    /// many microseconds (half of the drops each).
    #[arg(long, default_value_t = 5_000)]
    pub drop_max_delay_us: u64,
    /// Seed of the drops' draws.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl LoadArgs {
    /// The command-line arguments that parse back to `self` (after `bench-load`).
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec![
            "--addr".to_owned(),
            self.addr.to_string(),
            "--path".to_owned(),
            self.path.clone(),
            "--era".to_owned(),
            self.era.to_string(),
            "--connections".to_owned(),
            self.connections.to_string(),
            "--duration-ms".to_owned(),
            self.duration_ms.to_string(),
            "--warmup-calls".to_owned(),
            self.warmup_calls.to_string(),
            "--tool".to_owned(),
            self.tool.clone(),
            "--drop-percent".to_owned(),
            self.drop_percent.to_string(),
            "--drop-max-delay-us".to_owned(),
            self.drop_max_delay_us.to_string(),
            "--seed".to_owned(),
            self.seed.to_string(),
        ];
        if let Some(max) = self.max_calls {
            args.extend(["--max-calls".to_owned(), max.to_string()]);
        }
        args
    }
}

/// Run the server of `args` until stdin ends, Ctrl-C or SIGTERM: bind, print
/// `LISTENING <addr>` on stdout, serve.
///
/// # Errors
/// Binding, opening the store or serving failed; or the rmcp server was asked for in a
/// build without the `rmcp-baseline` feature.
pub async fn serve(args: ServerArgs) -> Result<(), BenchError> {
    match args.server {
        ServedBy::Rmcp { listen } => serve_rmcp(listen).await,
        ServedBy::Durable { store, listen, metrics_listen, max_stream_age_secs, prune_interval_secs } => {
            let mut options = durable_mcp::EngineOptions::default();
            if let Some(secs) = max_stream_age_secs {
                options.retention.max_stream_age_ms = (secs > 0).then(|| secs.saturating_mul(1000));
            }
            if let Some(secs) = prune_interval_secs {
                options.prune_interval = Duration::from_secs(secs.max(1));
            }
            let server =
                durable_mcp::DurableMcp::new(durable_mcp_examples::Everything::default()).store(crate::open_store(&store).await?).engine_options(options);
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
            durable_mcp::DurableMcp::new(durable_mcp_examples::Everything::default()).store_url(&store).await?.serve_stdio().await?;
            Ok(())
        }
    }
}

/// `bench-server proxy`: the proxy's upstream is this executable's `bench-server stdio`
/// (its children run on the proxy's CPU: they inherit its pinning).
async fn serve_proxy(store: &str, listen: SocketAddr) -> Result<(), BenchError> {
    let executable = std::env::current_exe()?;
    let args = ["bench-server", "stdio", "--store", UPSTREAM_STORE].map(String::from).to_vec();
    let config = durable_mcp_proxy::ProxyConfig::new(executable.to_string_lossy().into_owned(), args);
    let upstream = durable_mcp_proxy::Proxy::start(config).await?;
    let handler = durable_mcp::Forward::new(std::sync::Arc::new(upstream.clone())).map_err(BenchError::UpstreamInfo)?;
    let server = durable_mcp::DurableMcp::new(handler).store_url(store).await;
    let served = match server {
        Ok(server) => match bind(listen).await {
            Ok(listener) => server.serve_on(listener, stopped()).await.map_err(BenchError::from),
            Err(error) => Err(error),
        },
        Err(error) => Err(error.into()),
    };
    upstream.stop();
    served
}

#[cfg(feature = "rmcp-baseline")]
async fn serve_rmcp(listen: SocketAddr) -> Result<(), BenchError> {
    let listener = bind(listen).await?;
    durable_mcp_protocol::serve_rmcp_baseline(durable_mcp_examples::Everything::default(), listener, stopped()).await?;
    Ok(())
}

#[cfg(not(feature = "rmcp-baseline"))]
async fn serve_rmcp(_listen: SocketAddr) -> Result<(), BenchError> {
    Err(BenchError::Config("built without the rmcp-baseline feature".into()))
}

/// Install the metrics recorder, serve `/metrics` on `addr` (port 0: any free one) and
/// tell the parent where, as `durable-mcp serve --metrics-listen` does (which would not
/// say which port it got). Served until the returned task is dropped.
async fn serve_metrics(addr: SocketAddr) -> Result<AbortOnDrop, BenchError> {
    let handle = durable_mcp::metrics::install()?;
    let listener = TcpListener::bind(addr).await?;
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
async fn bind(listen: SocketAddr) -> Result<TcpListener, BenchError> {
    let listener = TcpListener::bind(listen).await?;
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
    let reader = std::thread::Builder::new().name("stdin-watch".into()).spawn(move || {
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

/// Run the load of `args` and return its result as one line of JSON (what the child
/// prints). Gives up when stdin ends first.
///
/// # Errors
/// A failed connection, session or call (a benchmark that skips errors measures something
/// else), or stdin ended.
pub async fn load(args: &LoadArgs) -> Result<String, BenchError> {
    let spec = LoadSpec {
        connections: args.connections,
        era: args.era,
        duration: Duration::from_millis(args.duration_ms),
        warmup_calls: args.warmup_calls,
        max_calls: args.max_calls,
        tool: args.tool.clone(),
        arguments: serde_json::json!({}),
        drops: (args.drop_percent > 0).then_some(Drops {
            percent: args.drop_percent,
            max_delay: Duration::from_micros(args.drop_max_delay_us),
            seed: args.seed,
        }),
    };
    let result: LoadResult = tokio::select! {
        result = run_load(args.addr, &args.path, &spec) => result?,
        () = stopped() => return Err(BenchError::Task("stopped before the load was done".into())),
    };
    serde_json::to_string(&result).map_err(|e| BenchError::Check(format!("encoding the result: {e}")))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, clap::Parser)]
    enum Cli {
        BenchServer(ServerArgs),
        BenchLoad(LoadArgs),
    }

    #[test]
    fn load_arguments_parse_back_to_themselves() {
        let args = LoadArgs {
            addr: "127.0.0.1:4000".parse().expect("address"),
            path: "/mcp".into(),
            era: Era::Modern,
            connections: 8,
            duration_ms: 1234,
            warmup_calls: 3,
            max_calls: Some(7),
            tool: "test_simple_text".into(),
            drop_percent: 10,
            drop_max_delay_us: 2_500,
            seed: 42,
        };
        let argv = ["x".to_owned(), "bench-load".to_owned()].into_iter().chain(args.to_args());
        let Cli::BenchLoad(parsed) = Cli::try_parse_from(argv).expect("parse") else { panic!("not bench-load") };
        assert_eq!(parsed.to_args(), args.to_args());
    }

    #[test]
    fn server_subcommands_parse() {
        let cli = Cli::try_parse_from(["x", "bench-server", "durable", "--store", "memory:", "--listen", "127.0.0.1:0"]).expect("parse");
        assert!(matches!(cli, Cli::BenchServer(ServerArgs { server: ServedBy::Durable { ref store, .. } }) if store == "memory:"));
        let cli = Cli::try_parse_from(["x", "bench-server", "rmcp"]).expect("parse");
        assert!(matches!(cli, Cli::BenchServer(ServerArgs { server: ServedBy::Rmcp { .. } })));
    }
}
