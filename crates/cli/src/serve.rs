//! `durable-mcp serve` and `durable-mcp proxy`: the options every server command takes,
//! and how they become a running server.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, ValueEnum};
use durable_mcp::engine::limits::{Limits, Rate};
use durable_mcp::{DurableMcp, engine::EngineOptions, http::HttpConfig};

use crate::{RetentionArgs, StoreArgs, auth_args};

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (for log collectors).
    Json,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub(crate) enum Example {
    /// Every fixture of the official MCP conformance suite, plus the durability fixtures
    /// (`steps`, `ask`, `emit_events`, ...).
    Everything,
    /// A durable provisioning workflow: reserve, confirm, charge, boot, notify.
    Provisioning,
}

/// `serve`: an example server with the shared server options.
#[derive(Parser, Debug)]
pub(crate) struct ServeCommand {
    /// Which example server to run.
    #[arg(
        long,
        value_enum,
        env = "DURABLE_MCP_EXAMPLE",
        default_value = "everything"
    )]
    pub(crate) example: Example,
    #[command(flatten)]
    pub(crate) serve: ServeArgs,
}

/// `proxy`: the shared server options, the upstream's lifecycle, and its command line.
#[derive(Parser, Debug)]
pub(crate) struct ProxyArgs {
    #[command(flatten)]
    pub(crate) serve: ServeArgs,
    /// Stop an upstream process that has served no request for this many seconds (it is
    /// started again on demand, re-initialized with its session's parameters).
    #[arg(long, default_value_t = 300, env = "DURABLE_MCP_IDLE_STOP_SECS")]
    pub(crate) idle_stop_secs: u64,
    /// At most this many upstream processes on this worker (one per session plus the
    /// pool); at the limit the longest idle one is stopped, and if every one is busy the
    /// request is refused at once.
    #[arg(long, default_value_t = 64, env = "DURABLE_MCP_MAX_CHILDREN")]
    pub(crate) max_children: usize,
    /// Upstream processes serving 2026-07-28 (stateless) requests.
    #[arg(long, default_value_t = 2, env = "DURABLE_MCP_POOL_SIZE")]
    pub(crate) pool_size: usize,
    /// Send a call of this tool again to a fresh process after an interruption, although
    /// it is not annotated readOnlyHint or idempotentHint (repeat the flag). Only for
    /// tools that are safe to run twice.
    #[arg(
        long = "retryable-tool",
        env = "DURABLE_MCP_RETRYABLE_TOOL",
        value_delimiter = ','
    )]
    pub(crate) retryable_tools: Vec<String>,
    /// Answer a request with an error if the upstream has not answered it within this
    /// many seconds (0: no limit; a process that exits is noticed at once either way).
    #[arg(long, default_value_t = 0, env = "DURABLE_MCP_REQUEST_TIMEOUT_SECS")]
    pub(crate) request_timeout_secs: u64,
    /// How long an upstream process has to answer `initialize`, in seconds.
    #[arg(long, default_value_t = 30, env = "DURABLE_MCP_INIT_TIMEOUT_SECS")]
    pub(crate) init_timeout_secs: u64,
    /// A Streamable HTTP upstream (`http[s]://host:port/path`) instead of a command: a
    /// server speaking 2025-03-26 .. 2025-11-25, each client session mapped to an upstream
    /// session of its own (ended after --idle-stop-secs idle). `HTTPS_PROXY`, `HTTP_PROXY`
    /// and `NO_PROXY` apply.
    #[arg(long, value_name = "URL", env = "DURABLE_MCP_UPSTREAM", conflicts_with_all = ["command", "max_children", "pool_size"])]
    pub(crate) upstream: Option<String>,
    /// A PEM file of more trust anchors for an `https://` upstream (a private CA), besides
    /// the built-in Mozilla roots.
    #[arg(
        long,
        value_name = "FILE",
        requires = "upstream",
        env = "DURABLE_MCP_UPSTREAM_TLS_ROOTS"
    )]
    pub(crate) upstream_tls_roots: Option<std::path::PathBuf>,
    /// The upstream: a program speaking MCP on stdin/stdout, and its arguments (after `--`).
    #[arg(last = true, required_unless_present = "upstream", num_args = 1.., value_name = "COMMAND")]
    pub(crate) command: Vec<String>,
}

/// The options every server command takes (`serve`, `proxy`; `doctor` and `config` read them).
#[derive(Parser, Debug)]
pub(crate) struct ServeArgs {
    /// A TOML file with these flags under their long names (`lease-ms = 5000`,
    /// `allow-host = ["a", "b"]`); environment variables override it, flags override both.
    #[arg(long, env = "DURABLE_MCP_CONFIG")]
    pub(crate) config: Option<std::path::PathBuf>,
    /// Log lines as text or as JSON objects.
    #[arg(
        long,
        value_enum,
        env = "DURABLE_MCP_LOG_FORMAT",
        default_value = "text"
    )]
    pub(crate) log_format: LogFormat,
    /// Address to listen on.
    #[arg(long, env = "DURABLE_MCP_LISTEN", default_value = "127.0.0.1:8080")]
    pub(crate) listen: SocketAddr,
    /// Serve Prometheus metrics at http://ADDR/metrics, on this address of its own (off
    /// unless given). docs/metrics.md lists the series.
    #[arg(long, env = "DURABLE_MCP_METRICS_LISTEN")]
    pub(crate) metrics_listen: Option<SocketAddr>,
    /// Serve the operator dashboard at http://ADDR/, on this address of its own (off unless
    /// given; loopback only unless --dashboard-allow-remote). docs/dashboard.md.
    #[arg(long, env = "DURABLE_MCP_DASHBOARD_LISTEN")]
    pub(crate) dashboard_listen: Option<SocketAddr>,
    /// Let the dashboard listen on a non-loopback address (behind TLS: it has none itself).
    #[arg(long, env = "DURABLE_MCP_DASHBOARD_ALLOW_REMOTE")]
    pub(crate) dashboard_allow_remote: bool,
    /// Show payloads on the dashboard (request arguments, session state values, the
    /// client's initialize params); redacted by default.
    #[arg(long, env = "DURABLE_MCP_DASHBOARD_SHOW_PAYLOADS")]
    pub(crate) dashboard_show_payloads: bool,
    /// API keys of the dashboard's viewers (a file in the format of --auth-api-keys; a
    /// key's scopes say what it may do: --dashboard-read-scope, --dashboard-act-scope).
    /// Without it the dashboard authenticates as the endpoint does (--auth-*); without
    /// either, it can be read and nothing can be done from it.
    #[arg(long, value_name = "FILE", env = "DURABLE_MCP_DASHBOARD_API_KEYS")]
    pub(crate) dashboard_api_keys: Option<std::path::PathBuf>,
    /// The scope that lets a dashboard viewer read.
    #[arg(
        long,
        default_value = "dashboard:read",
        env = "DURABLE_MCP_DASHBOARD_READ_SCOPE"
    )]
    pub(crate) dashboard_read_scope: String,
    /// The scope that lets a dashboard viewer act (cancel, kill, retry, purge); it lets
    /// them read too.
    #[arg(
        long,
        default_value = "dashboard:act",
        env = "DURABLE_MCP_DASHBOARD_ACT_SCOPE"
    )]
    pub(crate) dashboard_act_scope: String,
    /// Export OpenTelemetry traces over OTLP/HTTP (protobuf), configured by the OTEL_*
    /// environment variables (endpoint default http://localhost:4318). Also on when
    /// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; never with
    /// OTEL_SDK_DISABLED=true. docs/tracing.md lists the spans.
    #[arg(long, env = "DURABLE_MCP_OTEL")]
    pub(crate) otel: bool,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    #[command(flatten)]
    pub(crate) retention: RetentionArgs,
    #[command(flatten)]
    pub(crate) auth: Box<auth_args::AuthArgs>,
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
    /// Apply retention every this many seconds.
    #[arg(long, default_value_t = 60, env = "DURABLE_MCP_PRUNE_INTERVAL_SECS")]
    pub(crate) prune_interval_secs: u64,
    /// Endpoint path.
    #[arg(long, default_value = "/mcp", env = "DURABLE_MCP_PATH")]
    pub(crate) path: String,
    /// Accepted Host header values (repeat the flag); default: loopback names.
    #[arg(
        long = "allow-host",
        env = "DURABLE_MCP_ALLOW_HOST",
        value_delimiter = ','
    )]
    pub(crate) allow_hosts: Vec<String>,
    /// Disable Host/Origin checks (only behind a proxy that enforces them).
    #[arg(long, env = "DURABLE_MCP_NO_HOST_CHECK")]
    pub(crate) no_host_check: bool,
    /// Close request SSE connections of 2025-11-25 sessions after this many milliseconds,
    /// so clients resume with Last-Event-ID (SSE polling).
    #[arg(long, env = "DURABLE_MCP_POLL_AFTER_MS")]
    pub(crate) poll_after_ms: Option<u64>,
    /// While other requests run on the worker, how long the SSE response of a journaled
    /// 2025-11-25 request waits for its handler's first message before it sends the priming
    /// event, in milliseconds: a quick answer then leaves with it in one write. 0 sends the
    /// priming event at once.
    #[arg(long, default_value_t = millis(HttpConfig::default().first_event_wait), env = "DURABLE_MCP_FIRST_EVENT_WAIT_MS")]
    pub(crate) first_event_wait_ms: u64,
    /// Close a connection that has not sent a complete request head this many milliseconds
    /// after it opened (or after the first byte of a later request).
    #[arg(long, default_value_t = millis(HttpConfig::default().header_read_timeout), env = "DURABLE_MCP_HEADER_READ_TIMEOUT_MS")]
    pub(crate) header_read_timeout_ms: u64,
    /// Close a keep-alive connection with no request in flight for this many milliseconds
    /// (open SSE streams are never idle).
    #[arg(long, default_value_t = millis(HttpConfig::default().idle_timeout), env = "DURABLE_MCP_IDLE_TIMEOUT_MS")]
    pub(crate) idle_timeout_ms: u64,
    /// Serve at most this many connections at once; more are answered 503 and closed. Keep
    /// it below the open-file limit (`ulimit -n`).
    #[arg(long, default_value_t = HttpConfig::default().max_connections, env = "DURABLE_MCP_MAX_CONNECTIONS")]
    pub(crate) max_connections: usize,
    /// Log each request's JSON body at trace level (`RUST_LOG=durable_mcp_http=trace`), and
    /// let rmcp log whole messages at debug and trace. Off by default: bodies may carry
    /// secrets (a tool's arguments); rmcp then logs at info at most. Credentials in headers
    /// are never logged.
    #[arg(long, env = "DURABLE_MCP_LOG_BODIES")]
    pub(crate) log_bodies: bool,
    /// SSE `retry` hint in milliseconds.
    #[arg(long, default_value_t = 500, env = "DURABLE_MCP_SSE_RETRY_MS")]
    pub(crate) sse_retry_ms: u64,
    /// An idle SSE stream carries a keep-alive comment this often (milliseconds); a GET
    /// stream also checks in with the store at this pace.
    #[arg(long, default_value_t = 15_000, env = "DURABLE_MCP_SSE_KEEP_ALIVE_MS")]
    pub(crate) sse_keep_alive_ms: u64,
    /// GET streams of one session kept open on this worker; opening one more closes the
    /// session's oldest (each message goes on exactly one GET stream, so the oldest holds
    /// nothing undelivered; its client may resume it with Last-Event-ID).
    #[arg(long, default_value_t = durable_mcp::http::DEFAULT_MAX_GET_STREAMS_PER_SESSION, env = "DURABLE_MCP_MAX_GET_STREAMS")]
    pub(crate) max_get_streams: usize,
    /// One fixed key sealing multi-round-trip `requestState` (at least 32 bytes), the same
    /// on every worker, kept outside the store. Unset: the key ring in the store, shared
    /// by every worker (see `durable-mcp keys`).
    #[arg(long, env = "DURABLE_MCP_STATE_KEY", hide_env_values = true)]
    pub(crate) state_key: Option<String>,
    /// Serve over stdin/stdout instead of HTTP.
    #[arg(long, env = "DURABLE_MCP_STDIO")]
    pub(crate) stdio: bool,
    /// This worker's name in the leases of journaled requests. Keep it stable across
    /// restarts (a restarted worker resumes its own unfinished requests at once) and
    /// distinct per worker. Default: the host name and the listen address; with `--stdio`,
    /// the host name and the process id (a stdio process listens nowhere, and two of them
    /// on one store must not share an id; its unfinished requests are taken over when
    /// their leases expire).
    #[arg(long, env = "DURABLE_MCP_WORKER_ID")]
    pub(crate) worker_id: Option<String>,
    /// Lease of a running request, in milliseconds: after a worker dies, another takes
    /// its requests over within this time.
    #[arg(long, default_value_t = 5_000, env = "DURABLE_MCP_LEASE_MS")]
    pub(crate) lease_ms: u64,
    /// Runs of a request that may end without an outcome (its worker died, its handler
    /// panicked) before it is parked for an operator (`durable-mcp runs list --state
    /// parked`, then `runs retry` or `runs purge`).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..), env = "DURABLE_MCP_MAX_ATTEMPTS")]
    pub(crate) max_attempts: u32,
    /// How long a new tool call's first commit waits for its handler, in milliseconds: a
    /// handler that answers within it, before any step, question or message, costs one
    /// commit in all. 0: journal every call before its handler starts (D6).
    #[arg(long, default_value_t = 5, env = "DURABLE_MCP_JOURNAL_WAIT_MS")]
    pub(crate) journal_wait_ms: u64,
    /// On shutdown, wait this long for requests in flight before handing them over.
    #[arg(long, default_value_t = 10, env = "DURABLE_MCP_SHUTDOWN_GRACE_SECS")]
    pub(crate) shutdown_grace_secs: u64,
}

/// Limits per principal on each worker (docs/security.md); 0 turns a limit off. The
/// anonymous principal (no authentication) is exempt unless `--limit-anonymous`.
#[derive(clap::Args, Debug)]
pub(crate) struct LimitArgs {
    /// Live sessions one principal may hold, created on this worker.
    #[arg(long, env = "DURABLE_MCP_LIMIT_SESSIONS", default_value_t = limit_default(Limits::default().sessions))]
    pub(crate) limit_sessions: u32,
    /// GET (SSE) streams one principal may keep open on this worker.
    #[arg(long, env = "DURABLE_MCP_LIMIT_SSE_STREAMS", default_value_t = limit_default(Limits::default().sse_streams))]
    pub(crate) limit_sse_streams: u32,
    /// POST requests of one principal in flight on this worker (until their response ends).
    #[arg(long, env = "DURABLE_MCP_LIMIT_IN_FLIGHT", default_value_t = limit_default(Limits::default().in_flight))]
    pub(crate) limit_in_flight: u32,
    /// Tasks of one principal running on this worker.
    #[arg(long, env = "DURABLE_MCP_LIMIT_TASKS", default_value_t = limit_default(Limits::default().tasks))]
    pub(crate) limit_tasks: u32,
    /// Requests per second one principal may send to this worker (sustained); beyond it,
    /// 429 with Retry-After.
    #[arg(long, env = "DURABLE_MCP_LIMIT_RATE", default_value_t = Limits::default().rate.map_or(0.0, |r| r.per_second))]
    pub(crate) limit_rate: f64,
    /// Requests one principal may send at once after a quiet spell (the rate's burst).
    #[arg(long, env = "DURABLE_MCP_LIMIT_BURST", default_value_t = Limits::default().rate.map_or(1, |r| r.burst))]
    pub(crate) limit_burst: u32,
    /// Apply the limits to the anonymous principal too (every client, without authentication).
    #[arg(long, env = "DURABLE_MCP_LIMIT_ANONYMOUS")]
    pub(crate) limit_anonymous: bool,
}

fn limit_default(limit: Option<u32>) -> u32 {
    limit.unwrap_or(0)
}

impl LimitArgs {
    fn limits(&self) -> anyhow::Result<Limits> {
        let count = |n: u32| (n > 0).then_some(n);
        if !(self.limit_rate >= 0.0 && self.limit_rate.is_finite()) {
            anyhow::bail!("--limit-rate must be a number of requests per second, 0 for no limit");
        }
        let rate = (self.limit_rate > 0.0).then_some(Rate {
            per_second: self.limit_rate,
            burst: self.limit_burst.max(1),
        });
        let mut limits = Limits::default();
        limits.sessions = count(self.limit_sessions);
        limits.sse_streams = count(self.limit_sse_streams);
        limits.in_flight = count(self.limit_in_flight);
        limits.tasks = count(self.limit_tasks);
        limits.rate = rate;
        limits.anonymous = self.limit_anonymous;
        Ok(limits)
    }
}

/// A default duration of the library as a flag's default, in milliseconds.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `proxy`: start the upstream (its first process answers `initialize` before anything
/// listens), then serve it as `serve` serves an example.
pub(crate) async fn proxy(args: ProxyArgs) -> anyhow::Result<()> {
    if let Some(url) = args.upstream {
        let config = durable_mcp_proxy::HttpProxyConfig {
            idle_stop: Duration::from_secs(args.idle_stop_secs.max(1)),
            retryable_tools: args.retryable_tools,
            init_timeout: Duration::from_secs(args.init_timeout_secs.max(1)),
            request_timeout: (args.request_timeout_secs > 0)
                .then(|| Duration::from_secs(args.request_timeout_secs)),
            tls_roots_pem: match &args.upstream_tls_roots {
                Some(path) => Some(
                    std::fs::read_to_string(path)
                        .with_context(|| format!("--upstream-tls-roots {}", path.display()))?,
                ),
                None => None,
            },
            ..durable_mcp_proxy::HttpProxyConfig::new(url.clone())
        };
        let upstream = durable_mcp_proxy::HttpProxy::start(config)
            .await
            .with_context(|| format!("starting the upstream {url}"))?;
        let handler = durable_mcp::proxy::Forward::new(std::sync::Arc::new(upstream))
            .context("reading the upstream's initialize result")?;
        return serve(args.serve, DurableMcp::new(handler)).await;
    }
    let (program, rest) = args
        .command
        .split_first()
        .context("proxy needs the upstream's command after `--`")?;
    let config = durable_mcp_proxy::ProxyConfig {
        idle_stop: Duration::from_secs(args.idle_stop_secs.max(1)),
        max_children: args.max_children.max(1),
        pool_size: args.pool_size.max(1),
        retryable_tools: args.retryable_tools,
        init_timeout: Duration::from_secs(args.init_timeout_secs.max(1)),
        request_timeout: (args.request_timeout_secs > 0)
            .then(|| Duration::from_secs(args.request_timeout_secs)),
        ..durable_mcp_proxy::ProxyConfig::new(program.clone(), rest.to_vec())
    };
    if args.serve.metrics_listen.is_some() {
        // Before the first child starts, so that it is counted (`serve` finds the recorder
        // installed and serves it).
        durable_mcp::metrics::install().context("installing the metrics recorder")?;
        durable_mcp_proxy::metrics::enable();
    }
    let upstream = durable_mcp_proxy::Proxy::start(config)
        .await
        .with_context(|| format!("starting the upstream {program:?}"))?;
    let handler = durable_mcp::proxy::Forward::new(std::sync::Arc::new(upstream.clone()))
        .context("reading the upstream's initialize result")?;
    let outcome = serve(args.serve, DurableMcp::new(handler)).await;
    upstream.stop();
    outcome
}

/// Serve `server` with these options (traces on while it runs, if asked for).
pub(crate) async fn serve(args: ServeArgs, server: DurableMcp) -> anyhow::Result<()> {
    // Before the engine is built: it traces its store only if traces are on by then.
    let traces = start_traces(args.otel)?;
    let served = serve_with(args, server).await;
    if let Some(traces) = traces {
        stop_traces(traces).await;
    }
    served
}

/// The OTLP exporter, if traces are asked for (`--otel`, an OTLP endpoint variable).
#[cfg(feature = "otel")]
pub(crate) fn start_traces(flag: bool) -> anyhow::Result<Option<durable_mcp::traces::TracesGuard>> {
    if !durable_mcp::traces::wanted(flag) {
        return Ok(None);
    }
    let guard = durable_mcp::traces::install().context("starting the trace exporter")?;
    tracing::info!("exporting traces over OTLP/HTTP");
    Ok(Some(guard))
}

/// Flush the spans not sent yet (a blocking call, off the runtime's threads).
#[cfg(feature = "otel")]
pub(crate) async fn stop_traces(traces: durable_mcp::traces::TracesGuard) {
    if tokio::task::spawn_blocking(move || traces.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("the trace exporter's shutdown panicked");
    }
}

/// Without the `otel` feature: asking for traces is an error, not a silent no-op.
#[cfg(not(feature = "otel"))]
pub(crate) fn start_traces(flag: bool) -> anyhow::Result<Option<std::convert::Infallible>> {
    if flag {
        anyhow::bail!("--otel: this durable-mcp was built without the `otel` feature");
    }
    Ok(None)
}

#[cfg(not(feature = "otel"))]
pub(crate) async fn stop_traces(traces: std::convert::Infallible) {
    match traces {}
}

async fn serve_with(args: ServeArgs, server: DurableMcp) -> anyhow::Result<()> {
    if args.state_key.as_ref().is_some_and(|k| k.len() < 32) {
        anyhow::bail!("--state-key must be at least 32 bytes");
    }
    if args.max_get_streams == 0 {
        anyhow::bail!("--max-get-streams must be at least 1");
    }
    let mut http = HttpConfig::default();
    http.path = args.path;
    http.poll_after = args.poll_after_ms.map(Duration::from_millis);
    http.first_event_wait = Duration::from_millis(args.first_event_wait_ms);
    http.keep_alive = Duration::from_millis(args.sse_keep_alive_ms.max(10));
    http.max_get_streams_per_session = args.max_get_streams;
    http.header_read_timeout = Duration::from_millis(args.header_read_timeout_ms);
    http.idle_timeout = Duration::from_millis(args.idle_timeout_ms);
    http.max_connections = args.max_connections.max(1);
    http.log_bodies = args.log_bodies;
    http.auth = (*args.auth).authenticator()?;
    let endpoint_auth = http.auth.clone();
    if args.stdio && http.auth.is_enabled() {
        anyhow::bail!(
            "--stdio serves the one local client that started it: the --auth-* flags are for HTTP"
        );
    }
    if args.no_host_check {
        http.allowed_hosts = None;
    } else if !args.allow_hosts.is_empty() {
        http.allowed_hosts = Some(args.allow_hosts);
    }
    let mut options = EngineOptions::default();
    options.sse_retry = Duration::from_millis(args.sse_retry_ms);
    options.retention = args.retention.retention();
    options.prune_interval = Duration::from_secs(args.prune_interval_secs.max(1));
    // Empty: the server takes the host and its listen address (see
    // `durable_mcp::engine::default_worker_id`).
    options.worker_id = args.worker_id.unwrap_or_default();
    options.lease = Duration::from_millis(args.lease_ms.max(300));
    options.journal_wait = Duration::from_millis(args.journal_wait_ms);
    options.max_attempts = args.max_attempts;
    options.state_key = args.state_key.map(String::into_bytes);
    options.limits = args.limits.limits()?;
    let server = server
        .store(args.store.open().await?)
        .bind(args.listen)
        .http_config(http)
        .engine_options(options)
        .shutdown_grace(Duration::from_secs(args.shutdown_grace_secs));
    let server = match args.metrics_listen {
        Some(addr) => server.metrics_listen(addr),
        None => server,
    };
    let server = match args.dashboard_listen {
        Some(addr) => {
            let authenticator = match &args.dashboard_api_keys {
                Some(path) => durable_mcp::auth::Authenticator::api_keys_file(path, Vec::new())
                    .with_context(|| format!("--dashboard-api-keys {}", path.display()))?,
                None => endpoint_auth,
            };
            let server = server.dashboard_listen(
                addr,
                durable_mcp::http::DashboardOptions::default()
                    .allow_remote(args.dashboard_allow_remote)
                    .show_payloads(args.dashboard_show_payloads),
            );
            server.dashboard_auth(durable_mcp::http::DashboardAuth::new(authenticator).scopes(
                args.dashboard_read_scope.clone(),
                args.dashboard_act_scope.clone(),
            ))
        }
        None => server,
    };
    if args.stdio {
        server.serve_stdio().await?;
    } else {
        server.serve().await.context("serving")?;
    }
    Ok(())
}
