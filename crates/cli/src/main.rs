//! The `durable-mcp` command.

mod config;
mod ops;
mod transfer;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use durable_mcp::limits::{Limits, Rate};
use durable_mcp::{DurableMcp, EngineOptions, HttpConfig};

mod auth_args;

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
    Serve(ServeCommand),
    /// Put durable Streamable HTTP in front of any MCP server that speaks stdio:
    /// `durable-mcp proxy [serve's options] -- COMMAND ARGS...` runs COMMAND as child
    /// processes (one per session, a pool for 2026-07-28 requests); `--upstream URL`
    /// forwards to a Streamable HTTP server instead. docs/proxy.md.
    Proxy(ProxyArgs),
    /// Apply retention once (the background pruner does the same every interval).
    Prune(PruneArgs),
    /// List what a store holds: live sessions, journaled requests not yet finished, or tasks.
    Inspect(InspectArgs),
    /// Print the committed events of a stream after an event id (as a client resuming with
    /// `Last-Event-ID` would receive them).
    Replay(ReplayArgs),
    /// Create or upgrade the store's schema (SQLite, PostgreSQL) and print its version.
    /// Servers also migrate at start-up; this lets a deploy do it first, once.
    Migrate(MigrateArgs),
    /// The key ring in the store that seals multi-round-trip `requestState`: list or rotate.
    Keys(KeysArgs),
    /// Live sessions: list them, show one, or end one (as an HTTP DELETE of it would).
    Sessions(SessionsArgs),
    /// Write every item of a store (sessions, streams with their events, journal records,
    /// tasks, state, keys) to stdout as versioned JSON lines, ids preserved.
    Dump(DumpArgs),
    /// Load a dump (from stdin) into a store; running it again after an interruption
    /// finishes it without duplicating anything.
    Load(LoadArgs),
    /// Copy every item from one store to another (any two backends), ids preserved;
    /// resumable: run it again after an interruption.
    Copy(CopyArgs),
    /// Counts and sizes by kind, the oldest items, per principal, and the store's latency.
    Stats(StatsArgs),
    /// Check a store and the settings `serve` would run with: connectivity, schema, clock
    /// skew, and settings that weaken durability, each with its fix. Takes `serve`'s
    /// flags and configuration file. Exits with status 1 if anything is not ok.
    Doctor(DoctorArgs),
    /// Print the effective configuration of `serve` (flags, environment, configuration
    /// file and defaults) as a TOML configuration file, secrets redacted.
    Config(ConfigArgs),
    /// Benchmark stores, tools/call over HTTP (against stock rmcp and the Python SDK with
    /// mcp-persist) and memory with idle sessions; print markdown.
    Bench(BenchArgs),
    /// A server under test of `bench`, in a process of its own.
    #[command(hide = true)]
    BenchServer(durable_mcp_bench::child::ServerArgs),
    /// A load generator of `bench`, in a process of its own.
    #[command(hide = true)]
    BenchLoad(durable_mcp_bench::child::LoadArgs),
}

/// Which store to use.
#[derive(Parser, Debug)]
struct StoreArgs {
    /// Store URL: `sqlite:PATH` (the embedded default), `postgres://...`, `redis://...` or
    /// `memory:`.
    #[arg(long, env = "DURABLE_MCP_STORE", default_value = durable_mcp::DEFAULT_STORE_URL)]
    store: String,
    /// Encrypt event payloads, journal records and session state at rest with the keys of
    /// this file (AES-256-GCM; create it with `durable-mcp keys encryption rotate`). Every
    /// command that reads the store needs it then. Off by default. docs/security.md.
    #[arg(long, env = "DURABLE_MCP_ENCRYPTION_KEY_FILE")]
    encryption_key_file: Option<std::path::PathBuf>,
    /// The key file's JSON itself, for keys handed over in the environment (set
    /// DURABLE_MCP_ENCRYPTION_KEYS rather than the flag: command lines are visible to
    /// other users).
    #[arg(long, env = "DURABLE_MCP_ENCRYPTION_KEYS", hide_env_values = true, conflicts_with = "encryption_key_file")]
    encryption_keys: Option<String>,
}

impl StoreArgs {
    /// The key ring of `--encryption-key-file` / `DURABLE_MCP_ENCRYPTION_KEYS`, if given.
    fn key_ring(&self) -> anyhow::Result<Option<std::sync::Arc<durable_mcp_store_crypt::KeyRing>>> {
        let file = match (&self.encryption_key_file, &self.encryption_keys) {
            (Some(path), _) => (durable_mcp_store_crypt::KeyFile::read(path)?, path.display().to_string()),
            (None, Some(text)) => (durable_mcp_store_crypt::KeyFile::parse(text, "DURABLE_MCP_ENCRYPTION_KEYS")?, "DURABLE_MCP_ENCRYPTION_KEYS".to_owned()),
            (None, None) => return Ok(None),
        };
        Ok(Some(std::sync::Arc::new(file.0.ring(&file.1)?)))
    }

    /// Open the store, behind encryption when a key file is given.
    async fn open(&self) -> anyhow::Result<std::sync::Arc<dyn durable_mcp::Store>> {
        let ring = self.key_ring()?;
        let store = durable_mcp::open_store(&self.store).await.with_context(|| format!("opening store {}", config::redact_url(&self.store)))?;
        Ok(match ring {
            Some(ring) => {
                tracing::debug!(primary = ring.primary_id(), "encryption at rest is on");
                std::sync::Arc::new(durable_mcp_store_crypt::CryptStore::new(store, ring))
            }
            None => store,
        })
    }
}

/// Retention (D14).
#[derive(Parser, Debug)]
struct RetentionArgs {
    /// End sessions idle for longer than this many seconds (0: never).
    #[arg(long, default_value_t = 86_400)]
    session_ttl_secs: u64,
    /// Delete finished streams older than this many seconds (0: never).
    #[arg(long, default_value_t = 3_600)]
    max_stream_age_secs: u64,
}

impl RetentionArgs {
    fn retention(&self) -> durable_mcp::Retention {
        let ms = |secs: u64| (secs > 0).then(|| secs.saturating_mul(1000));
        durable_mcp::Retention { session_idle_ttl_ms: ms(self.session_ttl_secs), max_stream_age_ms: ms(self.max_stream_age_secs) }
    }
}

#[derive(Parser, Debug)]
struct PruneArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    retention: RetentionArgs,
}

#[derive(Parser, Debug)]
struct InspectArgs {
    /// What to list.
    #[arg(value_enum, default_value_t = Inspected::Sessions)]
    what: Inspected,
    #[command(flatten)]
    store: StoreArgs,
    /// At most this many entries.
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// One JSON object per line instead of text.
    #[arg(long)]
    json: bool,
}

/// What `inspect` lists.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum Inspected {
    /// Live sessions (legacy era).
    Sessions,
    /// Journaled requests not yet finished: running (with their owner and lease) or
    /// waiting for a worker to take them over.
    Runs,
    /// Tasks of both designs, until they expire.
    Tasks,
}

#[derive(Parser, Debug)]
struct MigrateArgs {
    #[command(flatten)]
    store: StoreArgs,
}

/// The `requestState` key ring. Workers create it in the store on first start and share
/// it; whoever can read the store can read it (`serve --state-key` keeps a key outside
/// the store instead, and then the ring is not used).
#[derive(Parser, Debug)]
struct KeysArgs {
    #[command(subcommand)]
    action: KeysAction,
}

#[derive(Subcommand, Debug)]
enum KeysAction {
    /// One line per key: its id, when it was added, from when it seals, until when it
    /// opens (never the secret).
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Add a new key: it seals from `--activate-in-secs` on (every running worker reads
    /// the ring within 10 seconds); the previous keys still open states until
    /// `--keep-old-secs` after that, then they are dropped.
    Rotate {
        #[command(flatten)]
        store: StoreArgs,
        /// Seconds until the new key seals (until then it only opens).
        #[arg(long, default_value_t = durable_mcp::keys::DEFAULT_ACTIVATE_IN.as_secs())]
        activate_in_secs: u64,
        /// Seconds the previous keys still open states once the new key seals: at least
        /// the longest a state lives (10 minutes for durable-mcp's own and the examples').
        /// 0 drops them at once (a leaked key): their states are refused.
        #[arg(long, default_value_t = durable_mcp::keys::DEFAULT_KEEP_OLD.as_secs())]
        keep_old_secs: u64,
    },
    /// The key file of encryption at rest (`--encryption-key-file`): rotate, list, retire.
    /// Unlike the `requestState` ring, it is kept outside the store.
    Encryption {
        #[command(subcommand)]
        action: EncryptionAction,
    },
}

#[derive(Subcommand, Debug)]
enum EncryptionAction {
    /// Add a new random key and make it the primary one (it seals every new value); the
    /// previous keys stay and still open what they sealed. Creates the file if it does
    /// not exist. The file is replaced atomically, readable by its owner only. Workers
    /// read the file at start: restart them (all of them) to seal with the new key.
    Rotate {
        /// The key file.
        #[arg(long)]
        key_file: std::path::PathBuf,
    },
    /// One line per key: its id, when it was created, whether it is primary (never the key).
    /// With `--store`, also how many stored values each key sealed.
    List {
        /// The key file.
        #[arg(long)]
        key_file: std::path::PathBuf,
        /// Count the values of this store by key (a full scan).
        #[arg(long)]
        store: Option<String>,
    },
    /// Remove a key from the file, after a scan of the store shows no value sealed with it
    /// any more (values expire with retention, or are rewritten under the primary key).
    /// Refused while any value uses it, and for the primary key.
    Retire {
        /// The key file.
        #[arg(long)]
        key_file: std::path::PathBuf,
        /// The store whose values are scanned.
        #[arg(long, env = "DURABLE_MCP_STORE", default_value = durable_mcp::DEFAULT_STORE_URL)]
        store: String,
        /// The id of the key to retire.
        id: String,
    },
}

#[derive(Parser, Debug)]
struct SessionsArgs {
    #[command(subcommand)]
    action: SessionsAction,
}

#[derive(Subcommand, Debug)]
enum SessionsAction {
    /// Live sessions, oldest first.
    List {
        #[command(flatten)]
        store: StoreArgs,
        /// Only this principal's.
        #[arg(long)]
        principal: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// One JSON object per line instead of text.
        #[arg(long)]
        json: bool,
    },
    /// One session: its record and its streams.
    Show {
        #[command(flatten)]
        store: StoreArgs,
        /// The session id (`Mcp-Session-Id`).
        id: String,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// End a session everywhere, through the engine's path of an HTTP DELETE: every
    /// worker answers 404 for it from then on and its streams close.
    End {
        #[command(flatten)]
        store: StoreArgs,
        /// The session id (`Mcp-Session-Id`).
        id: String,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Parser, Debug)]
struct DumpArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Write to this file instead of stdout.
    #[arg(long, short)]
    output: Option<std::path::PathBuf>,
}

#[derive(Parser, Debug)]
struct LoadArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Read from this file instead of stdin.
    #[arg(long, short)]
    input: Option<std::path::PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Parser, Debug)]
struct CopyArgs {
    /// The store to copy from.
    #[arg(long)]
    from: String,
    /// The store to copy into.
    #[arg(long)]
    to: String,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Parser, Debug)]
struct StatsArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Parser, Debug)]
struct DoctorArgs {
    #[command(flatten)]
    serve: ServeArgs,
    /// JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Parser, Debug)]
struct ConfigArgs {
    #[command(flatten)]
    serve: ServeArgs,
    /// JSON (each setting with its values and source) instead of TOML.
    #[arg(long)]
    json: bool,
}

/// How `serve` writes its log.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (for log collectors).
    Json,
}

#[derive(Parser, Debug)]
struct ReplayArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The event id to replay after (`<stream>_<seq>`; `<stream>_0` for the whole stream).
    event_id: String,
}

/// Benchmarks. Stores are measured in this process; every server (stock rmcp, the Python
/// SDK with mcp-persist if installed, durable-mcp on each store) and every load generator
/// runs in a process of its own, the server pinned to one CPU and the load generator to
/// another where the machine has two and `taskset`. The output is markdown.
#[derive(Parser, Debug)]
struct BenchArgs {
    /// Store URLs to measure (comma-separated or repeated). `memory:` is always measured, as
    /// the baseline. Default: `memory:` plus temporary `sqlite:` files with synchronous=FULL
    /// and synchronous=NORMAL.
    #[arg(long, value_delimiter = ',')]
    stores: Vec<String>,
    /// Also measure `durable-mcp proxy` on these stores (comma-separated or repeated), in
    /// front of the example server over stdio; its cost is the difference to the
    /// `durable-mcp, memory` row (the same server, served directly over HTTP).
    #[arg(long, value_delimiter = ',')]
    proxy_stores: Vec<String>,
    /// Concurrent keep-alive connections: one tools/call measurement per value.
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    connections: Vec<usize>,
    /// Protocol eras: `legacy` (2025-11-25 sessions) and/or `modern` (2026-07-28 stateless).
    #[arg(long, value_delimiter = ',', default_value = "legacy,modern")]
    eras: Vec<durable_mcp_bench::Era>,
    /// Runs per server, era and connection count (the report gives their medians).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Seconds of each run's timed part.
    #[arg(long, default_value_t = 5)]
    secs: u64,
    /// Untimed tools/call round trips per connection before each run.
    #[arg(long, default_value_t = 50)]
    warmup_calls: usize,
    /// Events appended per writer (1 writer, then `--writers` writers on distinct streams).
    #[arg(long, default_value_t = 1000)]
    events: usize,
    /// Concurrent writers of the second append measurement.
    #[arg(long, default_value_t = 32)]
    writers: usize,
    /// Stream lengths whose replay is timed.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
    replay_sizes: Vec<usize>,
    /// Idle session counts at which each server's memory is read (`none`: not measured).
    #[arg(long, value_delimiter = ',', default_value = "0,1000,10000", value_parser = session_count)]
    sessions: Vec<Option<usize>>,
    /// Also measure a stock rmcp server serving the same tool (the HTTP baseline).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    rmcp_baseline: bool,
    /// The Python SDK + mcp-persist baseline's interpreter (a venv with both; default:
    /// `.tools/bench-python/bin/python` above the working directory or this binary, as
    /// `scripts/setup-bench.sh` installs it).
    #[arg(long, conflicts_with = "no_python_baseline")]
    python_baseline: Option<std::path::PathBuf>,
    /// Leave the Python baseline out.
    #[arg(long)]
    no_python_baseline: bool,
    /// Do not pin servers and load generators to CPUs.
    #[arg(long)]
    no_pin: bool,
    /// Stop any single store measurement after this many seconds.
    #[arg(long, default_value_t = 10)]
    time_limit_secs: u64,
}

/// A `--sessions` value: a count, or `none`.
fn session_count(value: &str) -> Result<Option<usize>, String> {
    if value == "none" {
        return Ok(None);
    }
    value.parse().map(Some).map_err(|e| format!("{value:?}: {e}"))
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum Example {
    /// Every fixture of the official MCP conformance suite, plus the durability fixtures
    /// (`steps`, `ask`, `emit_events`, ...).
    Everything,
    /// A durable provisioning workflow: reserve, confirm, charge, boot, notify.
    Provisioning,
}

/// `serve`: an example server with the shared server options.
#[derive(Parser, Debug)]
struct ServeCommand {
    /// Which example server to run.
    #[arg(long, value_enum, default_value = "everything")]
    example: Example,
    #[command(flatten)]
    serve: ServeArgs,
}

/// `proxy`: the shared server options, the upstream's lifecycle, and its command line.
#[derive(Parser, Debug)]
struct ProxyArgs {
    #[command(flatten)]
    serve: ServeArgs,
    /// Stop an upstream process that has served no request for this many seconds (it is
    /// started again on demand, re-initialized with its session's parameters).
    #[arg(long, default_value_t = 300)]
    idle_stop_secs: u64,
    /// At most this many upstream processes on this worker (one per session plus the
    /// pool); at the limit the longest idle one is stopped, and if every one is busy the
    /// request is refused at once.
    #[arg(long, default_value_t = 64)]
    max_children: usize,
    /// Upstream processes serving 2026-07-28 (stateless) requests.
    #[arg(long, default_value_t = 2)]
    pool_size: usize,
    /// Send a call of this tool again to a fresh process after an interruption, although
    /// it is not annotated readOnlyHint or idempotentHint (repeat the flag). Only for
    /// tools that are safe to run twice.
    #[arg(long = "retryable-tool")]
    retryable_tools: Vec<String>,
    /// Answer a request with an error if the upstream has not answered it within this
    /// many seconds (0: no limit; a process that exits is noticed at once either way).
    #[arg(long, default_value_t = 0)]
    request_timeout_secs: u64,
    /// How long an upstream process has to answer `initialize`, in seconds.
    #[arg(long, default_value_t = 30)]
    init_timeout_secs: u64,
    /// A Streamable HTTP upstream (`http://host:port/path`) instead of a command: a server
    /// speaking 2025-03-26 .. 2025-11-25, each client session mapped to an upstream session
    /// of its own (ended after --idle-stop-secs idle).
    #[arg(long, value_name = "URL", conflicts_with_all = ["command", "max_children", "pool_size"])]
    upstream: Option<String>,
    /// The upstream: a program speaking MCP on stdin/stdout, and its arguments (after `--`).
    #[arg(last = true, required_unless_present = "upstream", num_args = 1.., value_name = "COMMAND")]
    command: Vec<String>,
}

/// The options every server command takes (`serve`, `proxy`; `doctor` and `config` read them).
#[derive(Parser, Debug)]
struct ServeArgs {
    /// A TOML file with these flags under their long names (`lease-ms = 5000`,
    /// `allow-host = ["a", "b"]`); environment variables override it, flags override both.
    #[arg(long, env = "DURABLE_MCP_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// Log lines as text or as JSON objects.
    #[arg(long, value_enum, env = "DURABLE_MCP_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
    /// Address to listen on.
    #[arg(long, env = "DURABLE_MCP_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Serve Prometheus metrics at http://ADDR/metrics, on this address of its own (off
    /// unless given). docs/metrics.md lists the series.
    #[arg(long, env = "DURABLE_MCP_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Serve the read-only operator dashboard at http://ADDR/, on this address of its own
    /// (off unless given; loopback only unless --dashboard-allow-remote). docs/dashboard.md.
    #[arg(long, env = "DURABLE_MCP_DASHBOARD_LISTEN")]
    dashboard_listen: Option<SocketAddr>,
    /// Let the dashboard listen on a non-loopback address. It has no authentication: put it
    /// behind a proxy that authenticates.
    #[arg(long)]
    dashboard_allow_remote: bool,
    /// Show payloads on the dashboard (request arguments, session state values, the
    /// client's initialize params); redacted by default.
    #[arg(long)]
    dashboard_show_payloads: bool,
    /// Export OpenTelemetry traces over OTLP/HTTP (protobuf), configured by the OTEL_*
    /// environment variables (endpoint default http://localhost:4318). Also on when
    /// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; never with
    /// OTEL_SDK_DISABLED=true. docs/tracing.md lists the spans.
    #[arg(long, env = "DURABLE_MCP_OTEL")]
    otel: bool,
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    retention: RetentionArgs,
    #[command(flatten)]
    auth: Box<auth_args::AuthArgs>,
    #[command(flatten)]
    limits: LimitArgs,
    /// Apply retention every this many seconds.
    #[arg(long, default_value_t = 60)]
    prune_interval_secs: u64,
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
    /// Close a connection that has not sent a complete request head this many milliseconds
    /// after it opened (or after the first byte of a later request).
    #[arg(long, default_value_t = millis(HttpConfig::default().header_read_timeout))]
    header_read_timeout_ms: u64,
    /// Close a keep-alive connection with no request in flight for this many milliseconds
    /// (open SSE streams are never idle).
    #[arg(long, default_value_t = millis(HttpConfig::default().idle_timeout))]
    idle_timeout_ms: u64,
    /// Serve at most this many connections at once; more are answered 503 and closed. Keep
    /// it below the open-file limit (`ulimit -n`).
    #[arg(long, default_value_t = HttpConfig::default().max_connections)]
    max_connections: usize,
    /// SSE `retry` hint in milliseconds.
    #[arg(long, default_value_t = 500)]
    sse_retry_ms: u64,
    /// An idle SSE stream carries a keep-alive comment this often (milliseconds); a GET
    /// stream also checks in with the store at this pace.
    #[arg(long, default_value_t = 15_000)]
    sse_keep_alive_ms: u64,
    /// GET streams of one session kept open on this worker; opening one more closes the
    /// session's oldest (each message goes on exactly one GET stream, so the oldest holds
    /// nothing undelivered; its client may resume it with Last-Event-ID).
    #[arg(long, default_value_t = durable_mcp::DEFAULT_MAX_GET_STREAMS_PER_SESSION)]
    max_get_streams: usize,
    /// One fixed key sealing multi-round-trip `requestState` (at least 32 bytes), the same
    /// on every worker, kept outside the store. Unset: the key ring in the store, shared
    /// by every worker (see `durable-mcp keys`).
    #[arg(long, env = "DURABLE_MCP_STATE_KEY", hide_env_values = true)]
    state_key: Option<String>,
    /// Serve over stdin/stdout instead of HTTP.
    #[arg(long)]
    stdio: bool,
    /// This worker's name in the leases of journaled requests. Keep it stable across
    /// restarts (a restarted worker resumes its own unfinished requests at once) and
    /// distinct per worker. Default: the host name and the listen address; with `--stdio`,
    /// the host name and the process id (a stdio process listens nowhere, and two of them
    /// on one store must not share an id; its unfinished requests are taken over when
    /// their leases expire).
    #[arg(long, env = "DURABLE_MCP_WORKER_ID")]
    worker_id: Option<String>,
    /// Lease of a running request, in milliseconds: after a worker dies, another takes
    /// its requests over within this time.
    #[arg(long, default_value_t = 5_000)]
    lease_ms: u64,
    /// On shutdown, wait this long for requests in flight before handing them over.
    #[arg(long, default_value_t = 10)]
    shutdown_grace_secs: u64,
}

/// Limits per principal on each worker (docs/security.md); 0 turns a limit off. The
/// anonymous principal (no authentication) is exempt unless `--limit-anonymous`.
#[derive(clap::Args, Debug)]
struct LimitArgs {
    /// Live sessions one principal may hold, created on this worker.
    #[arg(long, env = "DURABLE_MCP_LIMIT_SESSIONS", default_value_t = limit_default(Limits::default().sessions))]
    limit_sessions: u32,
    /// GET (SSE) streams one principal may keep open on this worker.
    #[arg(long, env = "DURABLE_MCP_LIMIT_SSE_STREAMS", default_value_t = limit_default(Limits::default().sse_streams))]
    limit_sse_streams: u32,
    /// POST requests of one principal in flight on this worker (until their response ends).
    #[arg(long, env = "DURABLE_MCP_LIMIT_IN_FLIGHT", default_value_t = limit_default(Limits::default().in_flight))]
    limit_in_flight: u32,
    /// Tasks of one principal running on this worker.
    #[arg(long, env = "DURABLE_MCP_LIMIT_TASKS", default_value_t = limit_default(Limits::default().tasks))]
    limit_tasks: u32,
    /// Requests per second one principal may send to this worker (sustained); beyond it,
    /// 429 with Retry-After.
    #[arg(long, env = "DURABLE_MCP_LIMIT_RATE", default_value_t = Limits::default().rate.map_or(0.0, |r| r.per_second))]
    limit_rate: f64,
    /// Requests one principal may send at once after a quiet spell (the rate's burst).
    #[arg(long, env = "DURABLE_MCP_LIMIT_BURST", default_value_t = Limits::default().rate.map_or(1, |r| r.burst))]
    limit_burst: u32,
    /// Apply the limits to the anonymous principal too (every client, without authentication).
    #[arg(long)]
    limit_anonymous: bool,
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
        let rate = (self.limit_rate > 0.0).then_some(Rate { per_second: self.limit_rate, burst: self.limit_burst.max(1) });
        Ok(Limits {
            sessions: count(self.limit_sessions),
            sse_streams: count(self.limit_sse_streams),
            in_flight: count(self.limit_in_flight),
            tasks: count(self.limit_tasks),
            rate,
            anonymous: self.limit_anonymous,
        })
    }
}

/// A request makes a few hundred short-lived allocations (JSON values, futures of spawned
/// tasks, store rows): with mimalloc instead of the system allocator a durable `tools/call`
/// costs 15-22 % less server CPU (memory, SQLite and Redis stores, 8 connections; stock rmcp
/// in the same binary 4 %), see docs/benchmarks.md. A library user picks their own.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let (argv, from_file) = config::with_file(Cli::command(), argv)?;
    let cli = Cli::parse_from(&argv);
    // The children of `bench` log warnings only: a log line per request would be measured.
    let default_filter = match cli.command {
        Command::BenchServer(_) | Command::BenchLoad(_) => "warn",
        _ => "info,rmcp=warn",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter.into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match &cli.command {
        Command::Serve(ServeCommand { serve: args, .. }) | Command::Proxy(ProxyArgs { serve: args, .. }) if args.log_format == LogFormat::Json => {
            builder.json().flatten_event(true).with_current_span(false).init();
        }
        _ => builder.init(),
    }
    match cli.command {
        Command::Sessions(args) => match args.action {
            SessionsAction::List { store, principal, limit, json } => {
                let store = store.open().await?;
                ops::sessions_list(store.as_ref(), principal.as_deref(), limit, json).await
            }
            SessionsAction::Show { store, id, json } => ops::sessions_show(store.open().await?.as_ref(), &id, json).await,
            SessionsAction::End { store, id, json } => ops::sessions_end(store.open().await?, &id, json).await,
        },
        Command::Dump(args) => {
            let store = args.store.open().await?;
            let counts = match args.output {
                Some(path) => transfer::dump(store.as_ref(), std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?).await?,
                None => transfer::dump(store.as_ref(), std::io::stdout().lock()).await?,
            };
            eprintln!("dumped {} sessions, {} records, {} streams, {} events", counts.sessions, counts.records, counts.streams, counts.events);
            Ok(())
        }
        Command::Load(args) => {
            let store = args.store.open().await?;
            let done = match args.input {
                Some(path) => {
                    let file = std::fs::File::open(&path).with_context(|| format!("opening {}", path.display()))?;
                    transfer::load(store.as_ref(), std::io::BufReader::new(file)).await?
                }
                None => transfer::load(store.as_ref(), std::io::stdin().lock()).await?,
            };
            print_imported(&done, args.json)
        }
        Command::Copy(args) => {
            let from = durable_mcp::open_store(&args.from).await.with_context(|| format!("opening {}", config::redact_url(&args.from)))?;
            let to = durable_mcp::open_store(&args.to).await.with_context(|| format!("opening {}", config::redact_url(&args.to)))?;
            let done = transfer::copy(from.as_ref(), to.as_ref()).await?;
            print_imported(&done, args.json)
        }
        Command::Stats(args) => ops::stats(args.store.open().await?.as_ref(), args.json).await,
        Command::Doctor(args) => {
            let settings = ops::ServeSettings {
                store_url: args.serve.store.store.clone(),
                lease_ms: args.serve.lease_ms,
                fixed_state_key: args.serve.state_key.is_some(),
            };
            ops::doctor(&settings, args.json).await
        }
        Command::Config(args) => {
            let matches = config::matches_of(&argv)?;
            let command = Cli::command();
            let (Some((_, sub)), Some(config_command)) = (matches.subcommand(), command.find_subcommand("config")) else {
                anyhow::bail!("the config command parsed without its flags");
            };
            let settings = config::effective(config_command, sub, &from_file);
            if args.json {
                println!("{}", serde_json::to_string_pretty(&settings)?);
            } else {
                if let Some(path) = &args.serve.config {
                    println!("# effective configuration of `durable-mcp serve` (with {})", path.display());
                } else {
                    println!("# effective configuration of `durable-mcp serve`");
                }
                print!("{}", config::to_toml(&settings));
            }
            Ok(())
        }
        Command::Serve(ServeCommand { example, serve: args }) => {
            // The example seals with the engine's keys (the ring, or --state-key).
            let server = match example {
                Example::Everything => DurableMcp::new(durable_mcp_examples::Everything::default()),
                Example::Provisioning => DurableMcp::new(durable_mcp_examples::Provisioning::default()),
            };
            serve(args, server).await
        }
        Command::Proxy(args) => proxy(args).await,
        Command::Prune(args) => {
            let store = args.store.open().await?;
            let report = store.prune(&args.retention.retention(), durable_mcp::now_ms()).await?;
            println!(
                "sessions ended: {}, streams deleted: {}, journal records expired: {}",
                report.sessions_ended, report.streams_deleted, report.records_expired
            );
            Ok(())
        }
        Command::Inspect(args) => inspect(args).await,
        Command::Bench(args) => bench(args).await,
        Command::BenchServer(args) => {
            // Traces as `serve` has them from the environment (an OTLP endpoint variable),
            // so that `durable-mcp bench` can measure their cost.
            let traces = match &args.server {
                durable_mcp_bench::child::ServedBy::Durable { .. } | durable_mcp_bench::child::ServedBy::Proxy { .. } => start_traces(false)?,
                durable_mcp_bench::child::ServedBy::Rmcp { .. } | durable_mcp_bench::child::ServedBy::Stdio { .. } => None,
            };
            let served = durable_mcp_bench::child::serve(args).await;
            if let Some(traces) = traces {
                stop_traces(traces).await;
            }
            Ok(served?)
        }
        Command::BenchLoad(args) => {
            println!("{}", durable_mcp_bench::child::load(&args).await?);
            Ok(())
        }
        Command::Keys(args) => keys(args).await,
        Command::Migrate(args) => {
            let url = &args.store.store;
            let version = durable_mcp::migrate_store(url).await.with_context(|| format!("migrating {url}"))?;
            match version {
                Some(version) => println!("schema version {version}"),
                None => println!("{url}: this backend has no schema to migrate"),
            }
            Ok(())
        }
        Command::Replay(args) => {
            let store = args.store.open().await?;
            let id: durable_mcp::EventId = args.event_id.parse().context("malformed event id")?;
            let mut after = id.seq;
            loop {
                let read = store.read_after(&id.stream, after, 1024).await?;
                for event in &read.events {
                    println!("{}\t{}", event.id, event.data);
                    after = event.id.seq;
                }
                if read.events.is_empty() || read.finished {
                    break;
                }
            }
            Ok(())
        }
    }
}

/// The summary of a `load` or `copy`.
fn print_imported(done: &transfer::Imported, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(done)?);
    } else {
        println!(
            "sessions: {} created, {} already there, {} differing (kept); records: {} written, {} already there; streams: {}; events: {} appended, {} already there",
            done.sessions_created,
            done.sessions_skipped,
            done.sessions_differing,
            done.records_written,
            done.records_skipped,
            done.streams,
            done.events_appended,
            done.events_skipped
        );
    }
    Ok(())
}

async fn inspect(args: InspectArgs) -> anyhow::Result<()> {
    let store = args.store.open().await?;
    match args.what {
        Inspected::Sessions => {
            for session in store.list_sessions(None, args.limit).await? {
                if args.json {
                    println!("{}", serde_json::to_string(&session)?);
                    continue;
                }
                println!(
                    "{}  principal={}  version={}  last_seen_ms={}  log_level={}  subscriptions={}",
                    session.id,
                    session.principal,
                    session.protocol_version,
                    session.last_seen_ms,
                    session.log_level.as_deref().unwrap_or("-"),
                    session.subscriptions.len()
                );
            }
        }
        Inspected::Runs => {
            let now = durable_mcp::now_ms();
            for run in durable_mcp::inspect::runs(store.as_ref(), args.limit).await? {
                if args.json {
                    println!("{}", serde_json::to_string(&run)?);
                    continue;
                }
                println!(
                    "{}  {} {}  id={}  lease={}  owner={}  attempt={}  failures={}  task={}  principal={}",
                    run.run_id,
                    run.method,
                    run.target.as_deref().unwrap_or("-"),
                    run.request_id,
                    run.lease_state(now),
                    run.owner.as_deref().unwrap_or("-"),
                    run.attempt,
                    run.failures,
                    run.task_id.as_deref().unwrap_or("-"),
                    run.principal
                );
            }
        }
        Inspected::Tasks => {
            for task in durable_mcp::inspect::tasks(store.as_ref(), args.limit).await? {
                if args.json {
                    println!("{}", serde_json::to_string(&task)?);
                    continue;
                }
                println!(
                    "{}  {}  design={}  questions={}  created={}  updated={}  ttl_ms={}  principal={}",
                    task.task_id,
                    task.status,
                    task.design,
                    task.open_questions,
                    task.created_at,
                    task.last_updated_at,
                    task.ttl_ms,
                    task.principal
                );
            }
        }
    }
    Ok(())
}

/// A default duration of the library as a flag's default, in milliseconds.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `proxy`: start the upstream (its first process answers `initialize` before anything
/// listens), then serve it as `serve` serves an example.
async fn proxy(args: ProxyArgs) -> anyhow::Result<()> {
    if let Some(url) = args.upstream {
        let config = durable_mcp_proxy::HttpProxyConfig {
            idle_stop: Duration::from_secs(args.idle_stop_secs.max(1)),
            retryable_tools: args.retryable_tools,
            init_timeout: Duration::from_secs(args.init_timeout_secs.max(1)),
            request_timeout: (args.request_timeout_secs > 0).then(|| Duration::from_secs(args.request_timeout_secs)),
            ..durable_mcp_proxy::HttpProxyConfig::new(url.clone())
        };
        let upstream = durable_mcp_proxy::HttpProxy::start(config).await.with_context(|| format!("starting the upstream {url}"))?;
        let handler = durable_mcp::Forward::new(std::sync::Arc::new(upstream)).context("reading the upstream's initialize result")?;
        return serve(args.serve, DurableMcp::new(handler)).await;
    }
    let (program, rest) = args.command.split_first().context("proxy needs the upstream's command after `--`")?;
    let config = durable_mcp_proxy::ProxyConfig {
        idle_stop: Duration::from_secs(args.idle_stop_secs.max(1)),
        max_children: args.max_children.max(1),
        pool_size: args.pool_size.max(1),
        retryable_tools: args.retryable_tools,
        init_timeout: Duration::from_secs(args.init_timeout_secs.max(1)),
        request_timeout: (args.request_timeout_secs > 0).then(|| Duration::from_secs(args.request_timeout_secs)),
        ..durable_mcp_proxy::ProxyConfig::new(program.clone(), rest.to_vec())
    };
    if args.serve.metrics_listen.is_some() {
        // Before the first child starts, so that it is counted (`serve` finds the recorder
        // installed and serves it).
        durable_mcp::metrics::install().context("installing the metrics recorder")?;
        durable_mcp_proxy::metrics::enable();
    }
    let upstream = durable_mcp_proxy::Proxy::start(config).await.with_context(|| format!("starting the upstream {program:?}"))?;
    let handler = durable_mcp::Forward::new(std::sync::Arc::new(upstream.clone())).context("reading the upstream's initialize result")?;
    let outcome = serve(args.serve, DurableMcp::new(handler)).await;
    upstream.stop();
    outcome
}

async fn serve(args: ServeArgs, server: DurableMcp) -> anyhow::Result<()> {
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
fn start_traces(flag: bool) -> anyhow::Result<Option<durable_mcp::traces::TracesGuard>> {
    if !durable_mcp::traces::wanted(flag) {
        return Ok(None);
    }
    let guard = durable_mcp::traces::install().context("starting the trace exporter")?;
    tracing::info!("exporting traces over OTLP/HTTP");
    Ok(Some(guard))
}

/// Flush the spans not sent yet (a blocking call, off the runtime's threads).
#[cfg(feature = "otel")]
async fn stop_traces(traces: durable_mcp::traces::TracesGuard) {
    if tokio::task::spawn_blocking(move || traces.shutdown()).await.is_err() {
        tracing::warn!("the trace exporter's shutdown panicked");
    }
}

/// Without the `otel` feature: asking for traces is an error, not a silent no-op.
#[cfg(not(feature = "otel"))]
fn start_traces(flag: bool) -> anyhow::Result<Option<std::convert::Infallible>> {
    if flag {
        anyhow::bail!("--otel: this durable-mcp was built without the `otel` feature");
    }
    Ok(None)
}

#[cfg(not(feature = "otel"))]
async fn stop_traces(traces: std::convert::Infallible) {
    match traces {}
}

async fn serve_with(args: ServeArgs, server: DurableMcp) -> anyhow::Result<()> {
    if args.state_key.as_ref().is_some_and(|k| k.len() < 32) {
        anyhow::bail!("--state-key must be at least 32 bytes");
    }
    if args.max_get_streams == 0 {
        anyhow::bail!("--max-get-streams must be at least 1");
    }
    let mut http = HttpConfig {
        path: args.path,
        poll_after: args.poll_after_ms.map(Duration::from_millis),
        keep_alive: Duration::from_millis(args.sse_keep_alive_ms.max(10)),
        max_get_streams_per_session: args.max_get_streams,
        header_read_timeout: Duration::from_millis(args.header_read_timeout_ms),
        idle_timeout: Duration::from_millis(args.idle_timeout_ms),
        max_connections: args.max_connections.max(1),
        ..HttpConfig::default()
    };
    http.auth = (*args.auth).authenticator()?;
    if args.stdio && http.auth.is_enabled() {
        anyhow::bail!("--stdio serves the one local client that started it: the --auth-* flags are for HTTP");
    }
    if args.no_host_check {
        http.allowed_hosts = None;
    } else if !args.allow_hosts.is_empty() {
        http.allowed_hosts = Some(args.allow_hosts);
    }
    let server = server
        .store(args.store.open().await?)
        .bind(args.listen)
        .http_config(http)
        .engine_options(EngineOptions {
            sse_retry: Duration::from_millis(args.sse_retry_ms),
            retention: args.retention.retention(),
            prune_interval: Duration::from_secs(args.prune_interval_secs.max(1)),
            worker_id: args.worker_id.unwrap_or_else(|| default_worker_id((!args.stdio).then_some(args.listen))),
            lease: Duration::from_millis(args.lease_ms.max(300)),
            state_key: args.state_key.map(String::into_bytes),
            limits: args.limits.limits()?,
            ..EngineOptions::default()
        })
        .shutdown_grace(Duration::from_secs(args.shutdown_grace_secs));
    let server = match args.metrics_listen {
        Some(addr) => server.metrics_listen(addr),
        None => server,
    };
    let server = match args.dashboard_listen {
        Some(addr) => server.dashboard_listen(
            addr,
            durable_mcp::DashboardOptions::default().allow_remote(args.dashboard_allow_remote).show_payloads(args.dashboard_show_payloads),
        ),
        None => server,
    };
    if args.stdio {
        server.serve_stdio().await?;
    } else {
        server.serve().await.context("serving")?;
    }
    Ok(())
}

/// The host name and the listen address: stable across restarts of one worker, distinct
/// between workers of one host.
/// The worker id when none is given: the host and the HTTP listen address, or for a stdio
/// process (`listen` is `None`) the host and the process id, so that it never shares an id
/// with an HTTP worker on the default port or with another stdio process.
fn default_worker_id(listen: Option<SocketAddr>) -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    match listen {
        Some(listen) => format!("{host}/{listen}"),
        None => format!("{host}/stdio/{}", std::process::id()),
    }
}


/// `keys encryption`: the key file of encryption at rest.
async fn encryption_keys(action: EncryptionAction) -> anyhow::Result<()> {
    use durable_mcp_store_crypt::{KeyFile, key_usage};
    match action {
        EncryptionAction::Rotate { key_file } => {
            let mut file = KeyFile::read_or_new(&key_file)?;
            let new = file.rotate(durable_mcp::now_ms())?;
            file.write(&key_file)?;
            println!(
                "added key {} as primary in {}; {} older key(s) still open their values; restart the workers to seal with it",
                new.id,
                key_file.display(),
                file.keys().len() - 1
            );
            Ok(())
        }
        EncryptionAction::List { key_file, store } => {
            let file = KeyFile::read(&key_file)?;
            let usage = match store {
                Some(url) => Some(key_usage(durable_mcp::open_store(&url).await?.as_ref()).await?),
                None => None,
            };
            for key in file.keys() {
                let values = usage.as_ref().map_or_else(String::new, |u| format!("  values={}", u.of(&key.id)));
                println!("{}  created_ms={}{}{}", key.id, key.created_ms, values, if key.primary { "  (primary)" } else { "" });
            }
            if let Some(usage) = usage {
                let unknown: u64 = usage.by_key.iter().filter(|(id, _)| !file.keys().iter().any(|k| &&k.id == id)).map(|(_, n)| n).sum();
                println!("plaintext values: {}; values of keys not in the file: {unknown}", usage.plaintext);
            }
            Ok(())
        }
        EncryptionAction::Retire { key_file, store, id } => {
            let mut file = KeyFile::read(&key_file)?;
            if !file.keys().iter().any(|k| k.id == id) {
                anyhow::bail!("no key {id:?} in {}", key_file.display());
            }
            let usage = key_usage(durable_mcp::open_store(&store).await?.as_ref()).await?;
            let used = usage.of(&id);
            if used > 0 {
                anyhow::bail!("key {id} still seals {used} stored value(s): retire it once they have expired (retention) or were rewritten");
            }
            file.retire(&id)?;
            file.write(&key_file)?;
            println!("retired key {id}: no value of {} uses it", config::redact_url(&store));
            Ok(())
        }
    }
}

async fn keys(args: KeysArgs) -> anyhow::Result<()> {
    match args.action {
        KeysAction::Encryption { action } => encryption_keys(action).await,
        KeysAction::List { store } => {
            let opened = store.open().await?;
            let Some((ring, _)) = durable_mcp::keys::read(opened.as_ref()).await? else {
                eprintln!("no key ring yet: the first worker (or `keys rotate`) creates it");
                return Ok(());
            };
            let sealing = ring.sealing_key(durable_mcp::now_ms()).map(|key| key.id.clone());
            for key in ring.keys() {
                println!(
                    "{}  created_ms={}  seals_from_ms={}  opens_until_ms={}{}",
                    key.id,
                    key.created_ms,
                    key.seals_from_ms,
                    key.opens_until_ms.map_or_else(|| "-".to_owned(), |until| until.to_string()),
                    if sealing.as_deref() == Some(key.id.as_str()) { "  (current)" } else { "" }
                );
            }
            Ok(())
        }
        KeysAction::Rotate { store, activate_in_secs, keep_old_secs } => {
            let opened = store.open().await?;
            let ring = durable_mcp::keys::rotate(opened.as_ref(), Duration::from_secs(activate_in_secs), Duration::from_secs(keep_old_secs))
                .await
                .context("rotating the requestState key ring")?;
            let new = ring.keys().last().context("a rotated ring has a key")?;
            println!(
                "added key {}: current for sealing from {} ms since the epoch; {} older key(s) still open states",
                new.id,
                new.seals_from_ms,
                ring.keys().len() - 1
            );
            Ok(())
        }
    }
}

async fn bench(args: BenchArgs) -> anyhow::Result<()> {
    let executable = std::env::current_exe().context("finding this executable (it runs the bench's servers)")?;
    let python_baseline = match (args.no_python_baseline, args.python_baseline) {
        (true, _) => durable_mcp_bench::PythonBaseline::Off,
        (false, Some(path)) => durable_mcp_bench::PythonBaseline::At(path),
        (false, None) => durable_mcp_bench::PythonBaseline::Auto,
    };
    let config = durable_mcp_bench::BenchConfig {
        command_line: Some(command_line(std::env::args())),
        stores: args.stores,
        proxy_stores: args.proxy_stores,
        connections: args.connections,
        eras: args.eras,
        runs: args.runs.max(1),
        run_duration: Duration::from_secs(args.secs.max(1)),
        warmup_calls: args.warmup_calls,
        events_per_writer: args.events,
        writers: args.writers.max(1),
        replay_sizes: args.replay_sizes,
        growth_sessions: args.sessions.into_iter().flatten().collect(),
        rmcp_baseline: args.rmcp_baseline,
        python_baseline,
        pin: !args.no_pin,
        time_limit: Duration::from_secs(args.time_limit_secs.max(1)),
        ..durable_mcp_bench::BenchConfig::new(executable)
    };
    let report = durable_mcp_bench::run(&config, |step| tracing::info!("bench: {step}")).await.context("benchmark")?;
    println!("{}", report.to_markdown());
    if !report.failures.is_empty() {
        anyhow::bail!("{} measurement(s) failed (listed at the end of the report)", report.failures.len());
    }
    Ok(())
}

/// The command line as a shell would take it back: arguments with characters a shell
/// treats specially are single-quoted.
fn command_line(args: impl IntoIterator<Item = String>) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=,@+%".contains(c);
    args.into_iter()
        .map(|arg| if !arg.is_empty() && arg.chars().all(plain) { arg } else { format!("'{}'", arg.replace('\'', r"'\''")) })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stdio process and an HTTP worker on the default address of the same host get
    /// different default worker ids (a shared id would make each resume the other's runs).
    #[test]
    fn stdio_and_http_workers_never_share_a_default_worker_id() {
        let default_listen: SocketAddr = "127.0.0.1:8080".parse().expect("address");
        let http = default_worker_id(Some(default_listen));
        let stdio = default_worker_id(None);
        assert!(http.ends_with("/127.0.0.1:8080"), "{http}");
        assert_ne!(http, stdio);
        assert!(stdio.ends_with(&format!("/stdio/{}", std::process::id())), "{stdio}");
    }

    #[test]
    fn bench_command_lines_quote_what_a_shell_would_not_take_as_is() {
        let args = ["./durable-mcp", "bench", "--stores", "memory:,postgres://p@h:5432/t?schema=x&a=b", "it's"].map(String::from);
        assert_eq!(command_line(args), r#"./durable-mcp bench --stores 'memory:,postgres://p@h:5432/t?schema=x&a=b' 'it'\''s'"#);
    }
}
