//! The benchmark's own child processes, as command-line subcommands of the
//! `durable-mcp-bench` binary: the stock rmcp server (`bench-server rmcp`, the baseline) and
//! a load generator (`bench-load`). Flags are defined here, once. The durable-mcp servers
//! under test are the `durable-mcp` binary's own hidden `bench-server durable|proxy|stdio`
//! (crates/cli/src/bench_server.rs), so that what is measured is the shipped binary and
//! that binary carries neither rmcp's HTTP server nor the load generator.
//!
//! Both talk to the parent through stdout, one line each: a server prints
//! `LISTENING <addr>` once it accepts connections (and `METRICS <addr>` before it when it
//! serves metrics), a load generator prints its [`LoadResult`] as JSON when it is done.
//! Both end when their stdin ends (the parent closed it, or died), and a server also on
//! Ctrl-C or SIGTERM.

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

/// A server under test, in a process of its own: `bench-server rmcp ...`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerArgs {
    /// Which server.
    #[command(subcommand)]
    pub server: ServedBy,
}

/// Which server a `bench-server` process of `durable-mcp-bench` runs (durable-mcp's are
/// the `durable-mcp` binary's).
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ServedBy {
    /// rmcp's own StreamableHttpService serving the `everything` example (the baseline).
    Rmcp {
        /// Address to listen on (port 0: any free port; the bound one is printed).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
    },
}

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
/// Binding or serving failed.
pub async fn serve(args: ServerArgs) -> Result<(), BenchError> {
    match args.server {
        ServedBy::Rmcp { listen } => {
            let listener = bind(listen).await?;
            crate::baseline::serve_rmcp_baseline(
                durable_mcp_demo::Everything::default(),
                listener,
                stopped(),
            )
            .await?;
            Ok(())
        }
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
    serde_json::to_string(&result)
        .map_err(|e| BenchError::Check(format!("encoding the result: {e}")))
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
        let argv = ["x".to_owned(), "bench-load".to_owned()]
            .into_iter()
            .chain(args.to_args());
        let Cli::BenchLoad(parsed) = Cli::try_parse_from(argv).expect("parse") else {
            panic!("not bench-load")
        };
        assert_eq!(parsed.to_args(), args.to_args());
    }

    #[test]
    fn server_subcommands_parse() {
        let cli = Cli::try_parse_from(["x", "bench-server", "rmcp", "--listen", "127.0.0.1:4000"])
            .expect("parse");
        let Cli::BenchServer(ServerArgs {
            server: ServedBy::Rmcp { listen },
        }) = cli
        else {
            panic!("not bench-server rmcp")
        };
        assert_eq!(listen, "127.0.0.1:4000".parse().expect("address"));
        assert!(
            Cli::try_parse_from(["x", "bench-server", "durable", "--store", "memory:"]).is_err(),
            "durable-mcp's servers are the durable-mcp binary's"
        );
    }
}
