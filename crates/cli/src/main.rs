//! The `durable-mcp` command.

mod bench_server;
mod config;
mod generate;
mod healthcheck;
mod keys;
mod ops;
mod runs;
mod serve;
mod tasks;
mod transfer;

use std::ffi::OsString;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};
use durable_mcp::DurableMcp;
use durable_mcp::engine::ActionKind;

use crate::keys::KeysArgs;
use crate::serve::{Example, LogFormat, ProxyArgs, ServeArgs, ServeCommand};

mod auth_args;

/// durable-mcp: MCP servers that never lose a request.
#[derive(Parser, Debug)]
#[command(name = "durable-mcp", version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("DURABLE_MCP_COMMIT"), ")"), about)]
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
    /// Journaled runs, on any store, with workers running or not: list them (with
    /// filters), show one (its steps and the operators' actions), cancel or kill one.
    Runs(RunsArgs),
    /// Tasks of both designs, on any store: list them (with filters), show one (with its
    /// run's timeline), cancel one as a client's `tasks/cancel` would.
    Tasks(TasksArgs),
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
    /// GET `/healthz` of a running `serve` (on its `--listen` address, or `--url`): exit
    /// status 0 on 200, else 1. The container image's health check, which has no curl.
    Healthcheck(healthcheck::HealthcheckArgs),
    /// Shell completions and man pages, from the same definition as `--help`.
    Generate(generate::GenerateArgs),
    /// A durable-mcp server under test of the benchmark (`durable-mcp-bench`, a binary of
    /// its own), in a process of its own.
    #[command(hide = true)]
    BenchServer(bench_server::BenchServerArgs),
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
    #[arg(
        long,
        env = "DURABLE_MCP_ENCRYPTION_KEYS",
        hide_env_values = true,
        conflicts_with = "encryption_key_file"
    )]
    encryption_keys: Option<String>,
}

impl StoreArgs {
    /// The key ring of `--encryption-key-file` / `DURABLE_MCP_ENCRYPTION_KEYS`, if given.
    fn key_ring(&self) -> anyhow::Result<Option<std::sync::Arc<durable_mcp_store_crypt::KeyRing>>> {
        let file = match (&self.encryption_key_file, &self.encryption_keys) {
            (Some(path), _) => (
                durable_mcp_store_crypt::KeyFile::read(path)?,
                path.display().to_string(),
            ),
            (None, Some(text)) => (
                durable_mcp_store_crypt::KeyFile::parse(text, "DURABLE_MCP_ENCRYPTION_KEYS")?,
                "DURABLE_MCP_ENCRYPTION_KEYS".to_owned(),
            ),
            (None, None) => return Ok(None),
        };
        Ok(Some(std::sync::Arc::new(file.0.ring(&file.1)?)))
    }

    /// Open the store, behind encryption when a key file is given.
    async fn open(&self) -> anyhow::Result<std::sync::Arc<dyn durable_mcp::store::Store>> {
        let ring = self.key_ring()?;
        let store = durable_mcp::open_store(&self.store)
            .await
            .with_context(|| format!("opening store {}", config::redact_url(&self.store)))?;
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
    #[arg(long, env = "DURABLE_MCP_SESSION_TTL_SECS", default_value_t = 86_400)]
    session_ttl_secs: u64,
    /// Delete finished streams older than this many seconds (0: never).
    #[arg(long, env = "DURABLE_MCP_MAX_STREAM_AGE_SECS", default_value_t = 3_600)]
    max_stream_age_secs: u64,
}

impl RetentionArgs {
    fn retention(&self) -> durable_mcp::store::Retention {
        let ms = |secs: u64| (secs > 0).then(|| secs.saturating_mul(1000));
        durable_mcp::store::Retention {
            session_idle_ttl_ms: ms(self.session_ttl_secs),
            max_stream_age_ms: ms(self.max_stream_age_secs),
        }
    }
}

#[derive(Parser, Debug)]
struct PruneArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    retention: RetentionArgs,
    /// Report what a prune would remove now (the same counts), and remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// One JSON object instead of text: the three counts and `dry_run`.
    #[arg(long)]
    json: bool,
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

#[derive(Parser, Debug)]
struct RunsArgs {
    #[command(subcommand)]
    action: RunsAction,
}

/// Who acts on a run, and why: kept with the action.
#[derive(Parser, Debug)]
struct ActionArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The run id (`durable-mcp runs list`); for `tasks cancel`, the task id.
    id: String,
    /// Why: kept with the action, and put in the client's error outcome.
    #[arg(long)]
    reason: Option<String>,
    /// Who acts [default: the user running the command].
    #[arg(long)]
    by: Option<String>,
    /// The action committed, as JSON, instead of text.
    #[arg(long)]
    json: bool,
}

/// Which runs `runs list` and `runs purge` pick: every filter given must match.
#[derive(clap::Args, Debug)]
struct RunFilterArgs {
    /// Only requests of this JSON-RPC method (`tools/call`, ...).
    #[arg(long)]
    method: Option<String>,
    /// Only requests naming this tool (or prompt, or resource URI).
    #[arg(long)]
    tool: Option<String>,
    /// Only this principal's.
    #[arg(long)]
    principal: Option<String>,
    /// Only this legacy session's.
    #[arg(long)]
    session: Option<String>,
    /// Only runs whose lease this worker holds (`--worker-id` of `serve`).
    #[arg(long)]
    worker: Option<String>,
    /// Only runs accepted at least this long ago: `90s`, `15m`, `2h`, `7d`.
    #[arg(long, value_parser = runs::parse_age)]
    older_than: Option<std::time::Duration>,
}

impl RunFilterArgs {
    fn filter(self, state: Option<RunStateArg>) -> durable_mcp::engine::inspect::RunFilter {
        use durable_mcp::engine::inspect::RunState;
        let mut filter = durable_mcp::engine::inspect::RunFilter::default();
        filter.method = self.method;
        filter.target = self.tool;
        filter.principal = self.principal;
        filter.session = self.session;
        filter.worker = self.worker;
        filter.state = state.map(|state| match state {
            RunStateArg::Running => RunState::Running,
            RunStateArg::Waiting => RunState::Waiting,
            RunStateArg::Parked => RunState::Parked,
        });
        filter.older_than_ms = self
            .older_than
            .map(|age| u64::try_from(age.as_millis()).unwrap_or(u64::MAX));
        filter
    }
}

impl ActionArgs {
    async fn act(self, kind: ActionKind) -> anyhow::Result<()> {
        runs::act(
            self.store.open().await?,
            &self.id,
            kind,
            self.by,
            self.reason,
            self.json,
        )
        .await
    }
}

#[derive(Parser, Debug)]
struct TasksArgs {
    #[command(subcommand)]
    action: TasksAction,
}

#[derive(Subcommand, Debug)]
enum TasksAction {
    /// Tasks until they expire, oldest first.
    List {
        #[command(flatten)]
        store: StoreArgs,
        /// Only tasks in this status (`working`, `input_required`, `completed`, `failed`,
        /// `cancelled`).
        #[arg(long)]
        status: Option<String>,
        /// Only this principal's.
        #[arg(long)]
        principal: Option<String>,
        /// Only this legacy session's.
        #[arg(long)]
        session: Option<String>,
        /// Only tasks of this design (`2025-11-25` or `extension`).
        #[arg(long)]
        design: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// One JSON object per line instead of text.
        #[arg(long)]
        json: bool,
    },
    /// One task, and its run's timeline.
    Show {
        #[command(flatten)]
        store: StoreArgs,
        /// The task id.
        id: String,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a task as a client's `tasks/cancel` does: refused if it has ended; else it is
    /// `cancelled` at once (its status message says an operator did it, and why), and its
    /// run, on whichever worker runs it, is cancelled cooperatively.
    Cancel(ActionArgs),
}

#[derive(Subcommand, Debug)]
enum RunsAction {
    /// Journaled runs not yet finished, oldest first: running on a live worker, waiting
    /// for one to take them over, or parked for an operator.
    List {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        filter: RunFilterArgs,
        /// Only runs in this state.
        #[arg(long, value_enum)]
        state: Option<RunStateArg>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// One JSON object per line instead of text.
        #[arg(long)]
        json: bool,
    },
    /// One run: its entry, its committed steps, and the operators' actions on it.
    Show {
        #[command(flatten)]
        store: StoreArgs,
        /// The run id.
        id: String,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a run cooperatively: its handler sees cancellation at its worker's next
    /// heartbeat (a third of the lease), and the client gets an error outcome saying an
    /// operator cancelled it. A run waiting for a worker, or parked, is closed instead of
    /// run.
    Cancel(ActionArgs),
    /// Kill a run now: its error outcome is committed and its journal entry removed, so no
    /// worker runs it again. A worker still running it cancels the handler at its next
    /// heartbeat and keeps no step it committed after the kill.
    Kill(ActionArgs),
    /// Retry a parked run (after a fix): the next recovery pass of any worker runs it
    /// again, its committed steps replayed, not repeated; its client reads the outcome
    /// where it waits.
    Retry(ActionArgs),
    /// End every run the filters pick, as a kill recorded as a purge (its client reads
    /// that its request was purged). Parked runs unless `--state` says otherwise.
    Purge {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        filter: RunFilterArgs,
        /// Only runs in this state.
        #[arg(long, value_enum, default_value = "parked")]
        state: RunStateArg,
        /// List what would be purged, and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Why: kept with each action, and put in each client's error outcome.
        #[arg(long)]
        reason: Option<String>,
        /// Who acts [default: the user running the command].
        #[arg(long)]
        by: Option<String>,
        /// One JSON object per line instead of text: each run (`--dry-run`) or action.
        #[arg(long)]
        json: bool,
    },
}

/// `runs list --state`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum RunStateArg {
    /// Held by a worker whose lease has not run out.
    Running,
    /// Released, or its lease ran out: the next worker to recover takes it.
    Waiting,
    /// Kept for an operator: it failed too often, or its handler asked for a retry after a
    /// fix.
    Parked,
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
        #[arg(required_unless_present = "all_idle", conflicts_with = "all_idle")]
        id: Option<String>,
        /// Instead of one session, every session idle for at least `--older-than` (no
        /// request seen since; a worker refreshes that time at most every tenth of
        /// `--session-idle-ttl`).
        #[arg(long, requires = "older_than")]
        all_idle: bool,
        /// With `--all-idle`: idle for at least this long: `90s`, `15m`, `2h`, `7d`.
        #[arg(long, value_parser = runs::parse_age, requires = "all_idle")]
        older_than: Option<std::time::Duration>,
        /// With `--all-idle`: print the sessions that would end, and end none.
        #[arg(long, requires = "all_idle")]
        dry_run: bool,
        /// JSON instead of text (one object per line with `--all-idle`).
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
    /// How many of the largest streams and sessions (by their events' bytes) to list.
    #[arg(long, default_value_t = 10)]
    top: usize,
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
#[derive(Parser, Debug)]
struct ReplayArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The event id to replay after (`<stream>_<seq>`; `<stream>_0` for the whole stream).
    event_id: String,
}

/// A request makes a few hundred short-lived allocations (JSON values, futures of spawned
/// tasks, store rows): with mimalloc instead of the system allocator a durable `tools/call`
/// costs 15-22 % less server CPU (memory, SQLite and Redis stores, 8 connections; stock rmcp
/// 4 %, measured when it was served by this binary; `durable-mcp-bench`, which serves it
/// now, has mimalloc too), see docs/benchmarks.md. A library user picks their own.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Whether the log filter (`RUST_LOG`, whose widest level is `widest`) lets rmcp log at
/// debug or trace: then it is capped at info. A lower rmcp level is left as it is.
fn rmcp_above_info(
    rust_log: Option<&str>,
    widest: Option<tracing_subscriber::filter::LevelFilter>,
) -> bool {
    use tracing_subscriber::filter::LevelFilter;
    let Some(rust_log) = rust_log else {
        return false;
    };
    // The last directive naming rmcp wins, as in the filter; a target without a level means trace.
    let named = rust_log
        .split(',')
        .map(str::trim)
        .rfind(|d| d.starts_with("rmcp"));
    match named {
        Some(directive) => match directive.rsplit_once('=') {
            Some((_, level)) => level
                .parse::<LevelFilter>()
                .is_ok_and(|level| level > LevelFilter::INFO),
            None => true,
        },
        None => widest.is_some_and(|level| level > LevelFilter::INFO),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let (argv, from_file) = config::with_file(Cli::command(), argv)?;
    let cli = Cli::parse_from(&argv);
    // The benchmark's servers log warnings only: a log line per request would be measured.
    let default_filter = match cli.command {
        Command::BenchServer(_) => "warn",
        _ => "info,rmcp=warn",
    };
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| default_filter.into());
    // rmcp logs whole messages (a tool's arguments, its results) at debug and trace: only
    // with `--log-bodies`, whatever RUST_LOG says.
    let log_bodies = matches!(&cli.command, Command::Serve(ServeCommand { serve: args, .. }) | Command::Proxy(ProxyArgs { serve: args, .. }) if args.log_bodies);
    if !log_bodies
        && rmcp_above_info(
            std::env::var("RUST_LOG").ok().as_deref(),
            filter.max_level_hint(),
        )
    {
        filter = filter.add_directive("rmcp=info".parse()?);
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match &cli.command {
        Command::Serve(ServeCommand { serve: args, .. })
        | Command::Proxy(ProxyArgs { serve: args, .. })
            if args.log_format == LogFormat::Json =>
        {
            builder
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .init();
        }
        _ => builder.init(),
    }
    match cli.command {
        Command::Sessions(args) => match args.action {
            SessionsAction::List {
                store,
                principal,
                limit,
                json,
            } => {
                let store = store.open().await?;
                ops::sessions_list(store.as_ref(), principal.as_deref(), limit, json).await
            }
            SessionsAction::Show { store, id, json } => {
                ops::sessions_show(store.open().await?.as_ref(), &id, json).await
            }
            SessionsAction::End {
                store,
                id,
                all_idle: _,
                older_than,
                dry_run,
                json,
            } => match (id, older_than) {
                (Some(id), _) => ops::sessions_end(store.open().await?, &id, json).await,
                (None, Some(idle)) => {
                    ops::sessions_end_idle(store.open().await?, idle, dry_run, json).await
                }
                (None, None) => anyhow::bail!("give a session id, or --all-idle --older-than AGE"),
            },
        },
        Command::Runs(args) => match args.action {
            RunsAction::List {
                store,
                filter,
                state,
                limit,
                json,
            } => {
                let filter = filter.filter(state);
                runs::list(store.open().await?.as_ref(), &filter, limit, json).await
            }
            RunsAction::Show { store, id, json } => {
                runs::show(store.open().await?, &id, json).await
            }
            RunsAction::Cancel(args) => args.act(ActionKind::Cancel).await,
            RunsAction::Kill(args) => args.act(ActionKind::Kill).await,
            RunsAction::Retry(args) => args.act(ActionKind::Retry).await,
            RunsAction::Purge {
                store,
                filter,
                state,
                dry_run,
                reason,
                by,
                json,
            } => {
                let filter = filter.filter(Some(state));
                runs::purge(store.open().await?, &filter, dry_run, by, reason, json).await
            }
        },
        Command::Tasks(args) => match args.action {
            TasksAction::List {
                store,
                status,
                principal,
                session,
                design,
                limit,
                json,
            } => {
                let filter = tasks::TaskFilter {
                    status,
                    principal,
                    session,
                    design,
                };
                tasks::list(store.open().await?.as_ref(), &filter, limit, json).await
            }
            TasksAction::Show { store, id, json } => {
                tasks::show(store.open().await?, &id, json).await
            }
            TasksAction::Cancel(args) => {
                tasks::cancel(
                    args.store.open().await?,
                    &args.id,
                    args.by,
                    args.reason,
                    args.json,
                )
                .await
            }
        },
        Command::Dump(args) => {
            let store = args.store.open().await?;
            let counts = match args.output {
                Some(path) => {
                    transfer::dump(
                        store.as_ref(),
                        transfer::create_private(&path)
                            .with_context(|| format!("creating {}", path.display()))?,
                    )
                    .await?
                }
                None => transfer::dump(store.as_ref(), std::io::stdout().lock()).await?,
            };
            eprintln!(
                "dumped {} sessions, {} records, {} streams, {} events",
                counts.sessions, counts.records, counts.streams, counts.events
            );
            Ok(())
        }
        Command::Load(args) => {
            let store = args.store.open().await?;
            let done = match args.input {
                Some(path) => {
                    let file = std::fs::File::open(&path)
                        .with_context(|| format!("opening {}", path.display()))?;
                    transfer::load(store.as_ref(), std::io::BufReader::new(file)).await?
                }
                None => transfer::load(store.as_ref(), std::io::stdin().lock()).await?,
            };
            print_imported(&done, args.json)
        }
        Command::Copy(args) => {
            let from = durable_mcp::open_store(&args.from)
                .await
                .with_context(|| format!("opening {}", config::redact_url(&args.from)))?;
            let to = durable_mcp::open_store(&args.to)
                .await
                .with_context(|| format!("opening {}", config::redact_url(&args.to)))?;
            let done = transfer::copy(from.as_ref(), to.as_ref()).await?;
            print_imported(&done, args.json)
        }
        Command::Stats(args) => {
            ops::stats(args.store.open().await?.as_ref(), args.top, args.json).await
        }
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
            let (Some((_, sub)), Some(config_command)) =
                (matches.subcommand(), command.find_subcommand("config"))
            else {
                anyhow::bail!("the config command parsed without its flags");
            };
            let settings = config::effective(config_command, sub, &from_file);
            if args.json {
                println!("{}", serde_json::to_string_pretty(&settings)?);
            } else {
                if let Some(path) = &args.serve.config {
                    println!(
                        "# effective configuration of `durable-mcp serve` (with {})",
                        path.display()
                    );
                } else {
                    println!("# effective configuration of `durable-mcp serve`");
                }
                print!("{}", config::to_toml(&settings));
            }
            Ok(())
        }
        Command::Serve(ServeCommand {
            example,
            serve: args,
        }) => {
            // The example seals with the engine's keys (the ring, or --state-key).
            let server = match example {
                Example::Everything => DurableMcp::new(durable_mcp_demo::Everything::default()),
                Example::Provisioning => DurableMcp::new(durable_mcp_demo::Provisioning::default()),
            };
            serve::serve(args, server).await
        }
        Command::Proxy(args) => serve::proxy(args).await,
        Command::Healthcheck(args) => healthcheck::healthcheck(&args),
        Command::Generate(args) => generate::generate(args, Cli::command()),
        Command::Prune(args) => prune(args).await,
        Command::Inspect(args) => inspect(args).await,
        Command::BenchServer(args) => {
            // Traces as `serve` has them from the environment (an OTLP endpoint variable),
            // so that `durable-mcp-bench` can measure their cost.
            let traces = if args.server.over_http() {
                serve::start_traces(false)?
            } else {
                None
            };
            let served = bench_server::serve(args).await;
            if let Some(traces) = traces {
                serve::stop_traces(traces).await;
            }
            served
        }
        Command::Keys(args) => keys::keys(args).await,
        Command::Migrate(args) => {
            let url = &args.store.store;
            let version = durable_mcp::migrate_store(url)
                .await
                .with_context(|| format!("migrating {}", config::redact_url(url)))?;
            match version {
                Some(version) => println!("schema version {version}"),
                None => println!("{url}: this backend has no schema to migrate"),
            }
            Ok(())
        }
        Command::Replay(args) => {
            let store = args.store.open().await?;
            let id: durable_mcp::store::EventId =
                args.event_id.parse().context("malformed event id")?;
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

/// `prune`: apply retention once, or with `--dry-run` report what it would remove.
async fn prune(args: PruneArgs) -> anyhow::Result<()> {
    let store = args.store.open().await?;
    let (retention, now) = (args.retention.retention(), durable_mcp::store::now_ms());
    let report = if args.dry_run {
        store.prune_preview(&retention, now).await?
    } else {
        store.prune(&retention, now).await?
    };
    let durable_mcp::store::PruneReport {
        sessions_ended,
        streams_deleted,
        records_expired,
    } = report;
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "sessions_ended": sessions_ended,
                "streams_deleted": streams_deleted,
                "records_expired": records_expired,
                "dry_run": args.dry_run,
            })
        );
    } else if args.dry_run {
        println!(
            "would end {sessions_ended} sessions, delete {streams_deleted} streams, expire \
             {records_expired} journal records; nothing changed (--dry-run)"
        );
    } else {
        println!(
            "sessions ended: {sessions_ended}, streams deleted: {streams_deleted}, journal \
             records expired: {records_expired}"
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
            let now = durable_mcp::store::now_ms();
            for run in durable_mcp::engine::inspect::runs(store.as_ref(), args.limit).await? {
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
            for task in durable_mcp::engine::inspect::tasks(store.as_ref(), args.limit).await? {
                if args.json {
                    println!("{}", serde_json::to_string(&task)?);
                } else {
                    println!("{}", tasks::line(&task));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::filter::LevelFilter;

    use clap::CommandFactory;

    use super::{Cli, rmcp_above_info};

    /// Every flag of the server commands can be set from the environment, as
    /// `DURABLE_MCP_` and its long name (a container or a systemd unit configures the
    /// server without a command line); the API key flags keep their earlier names.
    #[test]
    fn every_server_flag_has_an_environment_variable() {
        let cli = Cli::command();
        let mut wrong = Vec::new();
        for name in ["serve", "proxy"] {
            let command = cli.find_subcommand(name).expect("the subcommand");
            for arg in command.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if long == "help" {
                    continue;
                }
                let expected = match long {
                    "auth-api-keys" => "DURABLE_MCP_API_KEYS_FILE".to_owned(),
                    "auth-api-keys-inline" => "DURABLE_MCP_API_KEYS".to_owned(),
                    _ => format!("DURABLE_MCP_{}", long.to_uppercase().replace('-', "_")),
                };
                if arg.get_env().and_then(|e| e.to_str()) != Some(expected.as_str()) {
                    wrong.push(format!(
                        "{name} --{long}: {:?}, not {expected}",
                        arg.get_env()
                    ));
                }
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn rmcp_is_capped_at_info_and_never_raised() {
        assert!(
            !rmcp_above_info(None, Some(LevelFilter::INFO)),
            "the default filter has rmcp=warn"
        );
        assert!(!rmcp_above_info(Some("warn"), Some(LevelFilter::WARN)));
        assert!(rmcp_above_info(Some("debug"), Some(LevelFilter::DEBUG)));
        assert!(rmcp_above_info(
            Some("info,rmcp=trace"),
            Some(LevelFilter::TRACE)
        ));
        assert!(rmcp_above_info(Some("warn,rmcp"), Some(LevelFilter::TRACE)));
        assert!(!rmcp_above_info(
            Some("debug,rmcp=warn"),
            Some(LevelFilter::DEBUG)
        ));
        assert!(!rmcp_above_info(
            Some("rmcp=debug,rmcp=error"),
            Some(LevelFilter::DEBUG)
        ));
    }
}
