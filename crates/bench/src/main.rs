//! `durable-mcp-bench`: the benchmark command. Its flags, turned into this crate's
//! configuration; and the benchmark's own child processes (stock rmcp, the load
//! generators) as hidden subcommands. The durable-mcp servers are the `durable-mcp`
//! binary's, which carries no benchmark code beyond them.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use durable_mcp_bench::Executables;

/// The allocator of the `durable-mcp` binary: stock rmcp and the load generators run with
/// it as durable-mcp's servers do.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Benchmarks. Stores are measured in this process; every server (stock rmcp, the Python
/// SDK with mcp-persist if installed, durable-mcp on each store) and every load generator
/// runs in a process of its own, the server pinned to one CPU and the load generator to
/// another where the machine has two and `taskset`. The output is markdown.
/// `durable-mcp-bench traffic` measures real traffic instead (see its --help). The
/// durable-mcp servers are run by the `durable-mcp` binary beside this one (`cargo build
/// --release -p durable-mcp-cli -p durable-mcp-bench`), or `--durable-mcp PATH`.
#[derive(Parser, Debug)]
#[command(
    name = "durable-mcp-bench",
    version,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// Another benchmark than the default one.
    #[command(subcommand)]
    mode: Option<Mode>,
    #[command(flatten)]
    executable: DurableMcpArg,
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
    #[arg(long, value_delimiter = ',', default_value = "1,8,64,256")]
    connections: Vec<usize>,
    /// Write the plots of calls per second against connections (`calls-legacy.svg`,
    /// `calls-modern.svg`) into this directory; the report links them as
    /// `benchmarks/NAME`, where `docs/benchmarks.md` finds them in `docs/benchmarks/`.
    #[arg(long, value_name = "DIR")]
    plot_dir: Option<PathBuf>,
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

/// The benchmarks other than the default one, and the benchmark's own child processes.
#[derive(clap::Subcommand, Debug)]
enum Mode {
    /// Real traffic (issue 28), on each store, legacy era, durable-mcp server and load
    /// generator each in a process of its own: dropped connections whose requests are
    /// re-sent (latency and journal takeovers against a run without drops), retention
    /// deleting many streams (latency against retention off), and a long load (the
    /// server's memory and the SQLite WAL during and after it). The output is markdown.
    Traffic(TrafficArgs),
    /// A server under test (stock rmcp), in a process of its own.
    #[command(hide = true)]
    BenchServer(durable_mcp_bench::child::ServerArgs),
    /// A load generator, in a process of its own.
    #[command(hide = true)]
    BenchLoad(durable_mcp_bench::child::LoadArgs),
}

/// Which `durable-mcp` binary runs the durable-mcp servers.
#[derive(Parser, Debug)]
struct DurableMcpArg {
    /// The `durable-mcp` binary that runs the durable-mcp servers (its hidden `bench-server`
    /// subcommand) [default: `durable-mcp` beside this executable].
    #[arg(long = "durable-mcp", value_name = "PATH")]
    durable_mcp: Option<PathBuf>,
}

/// `durable-mcp-bench traffic`'s flags.
#[derive(Parser, Debug)]
struct TrafficArgs {
    #[command(flatten)]
    executable: DurableMcpArg,
    /// Store URLs (comma-separated or repeated), each measured in turn, every run on the
    /// same store (use a scratch schema or key prefix). Default: a temporary SQLite file,
    /// a new one for every server.
    #[arg(long, value_delimiter = ',')]
    stores: Vec<String>,
    /// The parts to run: `drops`, `retention`, `sustained`.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "drops,retention,sustained"
    )]
    parts: Vec<durable_mcp_bench::traffic::TrafficPart>,
    /// A run of a few seconds per part: the durations below default to 2 s (drops),
    /// 3 s with a stream age and prune interval of 1 s (retention), 2 s and 2 s after
    /// (sustained), and 5 warm-up calls.
    #[arg(long)]
    quick: bool,
    /// Concurrent connections, each its own legacy session.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Untimed calls per connection before each run [default: 50].
    #[arg(long)]
    warmup_calls: Option<usize>,
    /// Seconds of each of the two runs of the drops part [default: 20].
    #[arg(long)]
    drop_secs: Option<u64>,
    /// Percent of the calls whose connection is dropped and whose request is re-sent.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100))]
    drop_percent: u32,
    /// A dropped connection is closed at once or after a random delay below this many
    /// milliseconds (half of the drops each).
    #[arg(long, default_value_t = 5)]
    drop_max_delay_ms: u64,
    /// Seconds of each of the two runs of the retention part [default: 40].
    #[arg(long)]
    retention_secs: Option<u64>,
    /// The retention run deletes finished streams older than this many seconds [default: 5].
    #[arg(long)]
    max_stream_age_secs: Option<u64>,
    /// The retention run prunes every this many seconds [default: 5].
    #[arg(long)]
    prune_interval_secs: Option<u64>,
    /// Seconds of the sustained load [default: 120].
    #[arg(long)]
    sustained_secs: Option<u64>,
    /// Seconds the server's memory and WAL are still read after the sustained load [default: 30].
    #[arg(long)]
    after_secs: Option<u64>,
    /// Seed of the drops' draws (a seed repeats a run's drops).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Do not pin servers and load generators to CPUs.
    #[arg(long)]
    no_pin: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // The children log warnings only: a log line per request would be measured.
    let default_filter = match cli.mode {
        Some(Mode::BenchServer(_) | Mode::BenchLoad(_)) => "warn",
        _ => "info,rmcp=warn",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| default_filter.into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    match cli.mode {
        Some(Mode::Traffic(args)) => traffic(args).await,
        Some(Mode::BenchServer(args)) => Ok(durable_mcp_bench::child::serve(args).await?),
        Some(Mode::BenchLoad(args)) => {
            println!("{}", durable_mcp_bench::child::load(&args).await?);
            Ok(())
        }
        None => bench(cli).await,
    }
}

/// This executable (stock rmcp, the load generators) and the `durable-mcp` binary of
/// `--durable-mcp`, or else the one beside this executable; both checked.
fn executables(arg: DurableMcpArg) -> anyhow::Result<Executables> {
    let bench = std::env::current_exe()
        .context("finding this executable (it runs the rmcp baseline and the load generators)")?;
    let mut executables = Executables::beside(bench);
    if let Some(path) = arg.durable_mcp {
        executables.durable_mcp = path;
    }
    executables.check()?;
    Ok(executables)
}

/// `durable-mcp-bench traffic`.
async fn traffic(args: TrafficArgs) -> anyhow::Result<()> {
    let executables = executables(args.executable)?;
    let base = if args.quick {
        durable_mcp_bench::traffic::TrafficConfig::quick(executables)
    } else {
        durable_mcp_bench::traffic::TrafficConfig::new(executables)
    };
    let secs = |flag: Option<u64>, default: Duration| {
        flag.map_or(default, |secs| Duration::from_secs(secs.max(1)))
    };
    let config = durable_mcp_bench::traffic::TrafficConfig {
        command_line: Some(command_line(std::env::args())),
        stores: args.stores,
        parts: args.parts,
        connections: args.connections.max(1),
        warmup_calls: args.warmup_calls.unwrap_or(base.warmup_calls),
        drop_duration: secs(args.drop_secs, base.drop_duration),
        drop_percent: args.drop_percent,
        drop_max_delay: Duration::from_millis(args.drop_max_delay_ms),
        seed: args.seed,
        retention_duration: secs(args.retention_secs, base.retention_duration),
        max_stream_age_secs: args
            .max_stream_age_secs
            .unwrap_or(base.max_stream_age_secs)
            .max(1),
        prune_interval_secs: args
            .prune_interval_secs
            .unwrap_or(base.prune_interval_secs)
            .max(1),
        sustained_duration: secs(args.sustained_secs, base.sustained_duration),
        after: args.after_secs.map_or(base.after, Duration::from_secs),
        pin: !args.no_pin,
        ..base
    };
    let report =
        durable_mcp_bench::traffic::run_traffic(&config, |step| tracing::info!("bench: {step}"))
            .await
            .context("traffic benchmark")?;
    println!("{}", report.to_markdown());
    if !report.failures.is_empty() {
        anyhow::bail!(
            "{} run(s) failed (listed at the end of the report)",
            report.failures.len()
        );
    }
    Ok(())
}

/// A `--sessions` value: a count, or `none`.
fn session_count(value: &str) -> Result<Option<usize>, String> {
    if value == "none" {
        return Ok(None);
    }
    value
        .parse()
        .map(Some)
        .map_err(|e| format!("{value:?}: {e}"))
}

/// The default benchmark.
async fn bench(args: Cli) -> anyhow::Result<()> {
    let executables = executables(args.executable)?;
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
        plot_dir: args.plot_dir,
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
        ..durable_mcp_bench::BenchConfig::new(executables)
    };
    let report = durable_mcp_bench::run(&config, |step| tracing::info!("bench: {step}"))
        .await
        .context("benchmark")?;
    println!("{}", report.to_markdown());
    if !report.failures.is_empty() {
        anyhow::bail!(
            "{} measurement(s) failed (listed at the end of the report)",
            report.failures.len()
        );
    }
    Ok(())
}

/// The command line as a shell would take it back: arguments with characters a shell
/// treats specially are single-quoted.
fn command_line(args: impl IntoIterator<Item = String>) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=,@+%".contains(c);
    args.into_iter()
        .map(|arg| {
            if !arg.is_empty() && arg.chars().all(plain) {
                arg
            } else {
                format!("'{}'", arg.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traffic_is_a_mode_with_flags_of_its_own() {
        let cli = Cli::try_parse_from([
            "durable-mcp-bench",
            "traffic",
            "--quick",
            "--stores",
            "sqlite:/tmp/x.db,memory:",
            "--parts",
            "drops,sustained",
            "--durable-mcp",
            "/opt/durable-mcp",
        ])
        .expect("parses");
        let Some(Mode::Traffic(args)) = cli.mode else {
            panic!("not traffic")
        };
        assert!(args.quick);
        assert_eq!(args.stores, ["sqlite:/tmp/x.db", "memory:"]);
        assert_eq!(
            args.parts,
            [
                durable_mcp_bench::traffic::TrafficPart::Drops,
                durable_mcp_bench::traffic::TrafficPart::Sustained
            ]
        );
        assert_eq!((args.connections, args.drop_percent), (16, 10));
        assert_eq!(
            args.executable.durable_mcp,
            Some(PathBuf::from("/opt/durable-mcp"))
        );
        let cli = Cli::try_parse_from(["durable-mcp-bench", "--runs", "1", "--durable-mcp", "./d"])
            .expect("parses");
        assert!(matches!(
            cli,
            Cli {
                mode: None,
                runs: 1,
                executable: DurableMcpArg {
                    durable_mcp: Some(_)
                },
                ..
            }
        ));
        assert!(
            Cli::try_parse_from(["durable-mcp-bench", "--runs", "1", "traffic"]).is_err(),
            "the default bench's flags are not traffic's"
        );
    }

    #[test]
    fn the_children_are_hidden_subcommands() {
        let cli = Cli::try_parse_from([
            "durable-mcp-bench",
            "bench-server",
            "rmcp",
            "--listen",
            "127.0.0.1:0",
        ])
        .expect("parses");
        assert!(matches!(cli.mode, Some(Mode::BenchServer(_))));
        let cli = Cli::try_parse_from(["durable-mcp-bench", "bench-load", "--addr", "127.0.0.1:1"])
            .expect("parses");
        assert!(matches!(cli.mode, Some(Mode::BenchLoad(_))));
        let command = <Cli as clap::CommandFactory>::command();
        let listed: Vec<&str> = command
            .get_subcommands()
            .filter(|c| !c.is_hide_set())
            .map(clap::Command::get_name)
            .collect();
        assert_eq!(listed, ["traffic"]);
    }

    #[test]
    fn bench_command_lines_quote_what_a_shell_would_not_take_as_is() {
        let args = [
            "./durable-mcp-bench",
            "--stores",
            "memory:,postgres://p@h:5432/t?schema=x&a=b",
            "it's",
        ]
        .map(String::from);
        assert_eq!(
            command_line(args),
            r#"./durable-mcp-bench --stores 'memory:,postgres://p@h:5432/t?schema=x&a=b' 'it'\''s'"#
        );
    }
}
