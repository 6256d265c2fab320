//! The `durable-mcp` command.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use durable_mcp::{DurableMcp, EngineOptions, HttpConfig};

/// durable-mcp: MCP servers that never lose a request.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve an example server over Streamable HTTP (or stdio).
    Serve(ServeArgs),
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum Example {
    /// Every fixture of the official MCP conformance suite, plus `emit_events`.
    Everything,
}

#[derive(Parser, Debug)]
struct ServeArgs {
    /// Which example server to run.
    #[arg(long, value_enum, default_value = "everything")]
    example: Example,
    /// Address to listen on.
    #[arg(long, env = "DURABLE_MCP_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Store URL: `sqlite:PATH` (the embedded default) or `memory:`.
    #[arg(long, env = "DURABLE_MCP_STORE", default_value = durable_mcp::DEFAULT_STORE_URL)]
    store: String,
    /// Endpoint path.
    #[arg(long, default_value = "/mcp")]
    path: String,
    /// Accepted Host header values (repeat the flag); default: loopback names.
    #[arg(long = "allow-host")]
    allow_hosts: Vec<String>,
    /// Disable Host/Origin checks (only behind a proxy that enforces them).
    #[arg(long)]
    no_host_check: bool,
    /// Close request SSE connections of 2025-11-25 sessions after this many milliseconds,
    /// so clients resume with Last-Event-ID (SSE polling).
    #[arg(long)]
    poll_after_ms: Option<u64>,
    /// SSE `retry` hint in milliseconds.
    #[arg(long, default_value_t = 500)]
    sse_retry_ms: u64,
    /// Key for sealing multi-round-trip `requestState` (at least 32 bytes); random if unset.
    #[arg(long, env = "DURABLE_MCP_STATE_KEY", hide_env_values = true)]
    state_key: Option<String>,
    /// Serve over stdin/stdout instead of HTTP.
    #[arg(long)]
    stdio: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve(args).await,
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let handler = match args.example {
        Example::Everything => durable_mcp_examples::Everything::new(args.state_key.map(String::into_bytes))
            .context("--state-key must be at least 32 bytes")?,
    };
    let mut http = HttpConfig { path: args.path, poll_after: args.poll_after_ms.map(Duration::from_millis), ..HttpConfig::default() };
    if args.no_host_check {
        http.allowed_hosts = None;
    } else if !args.allow_hosts.is_empty() {
        http.allowed_hosts = Some(args.allow_hosts);
    }
    let server = DurableMcp::new(handler)
        .store_url(&args.store)
        .await
        .with_context(|| format!("opening store {}", args.store))?
        .bind(args.listen)
        .http_config(http)
        .engine_options(EngineOptions { sse_retry: Duration::from_millis(args.sse_retry_ms) });
    if args.stdio {
        server.serve_stdio().await?;
    } else {
        server.serve().await.context("serving")?;
    }
    Ok(())
}
