//! `durable-mcp bench`: its flags, turned into the bench crate's configuration.

use std::time::Duration;

use anyhow::Context;
use clap::Parser;

/// Benchmarks. Stores are measured in this process; every server (stock rmcp, the Python
/// SDK with mcp-persist if installed, durable-mcp on each store) and every load generator
/// runs in a process of its own, the server pinned to one CPU and the load generator to
/// another where the machine has two and `taskset`. The output is markdown.
/// `durable-mcp bench traffic` measures real traffic instead (see its --help).
#[derive(Parser, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct BenchArgs {
    /// Another benchmark than the default one.
    #[command(subcommand)]
    pub(crate) mode: Option<BenchMode>,
    /// Store URLs to measure (comma-separated or repeated). `memory:` is always measured, as
    /// the baseline. Default: `memory:` plus temporary `sqlite:` files with synchronous=FULL
    /// and synchronous=NORMAL.
    #[arg(long, value_delimiter = ',')]
    pub(crate) stores: Vec<String>,
    /// Also measure `durable-mcp proxy` on these stores (comma-separated or repeated), in
    /// front of the example server over stdio; its cost is the difference to the
    /// `durable-mcp, memory` row (the same server, served directly over HTTP).
    #[arg(long, value_delimiter = ',')]
    pub(crate) proxy_stores: Vec<String>,
    /// Concurrent keep-alive connections: one tools/call measurement per value.
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    pub(crate) connections: Vec<usize>,
    /// Protocol eras: `legacy` (2025-11-25 sessions) and/or `modern` (2026-07-28 stateless).
    #[arg(long, value_delimiter = ',', default_value = "legacy,modern")]
    pub(crate) eras: Vec<durable_mcp_bench::Era>,
    /// Runs per server, era and connection count (the report gives their medians).
    #[arg(long, default_value_t = 3)]
    pub(crate) runs: usize,
    /// Seconds of each run's timed part.
    #[arg(long, default_value_t = 5)]
    pub(crate) secs: u64,
    /// Untimed tools/call round trips per connection before each run.
    #[arg(long, default_value_t = 50)]
    pub(crate) warmup_calls: usize,
    /// Events appended per writer (1 writer, then `--writers` writers on distinct streams).
    #[arg(long, default_value_t = 1000)]
    pub(crate) events: usize,
    /// Concurrent writers of the second append measurement.
    #[arg(long, default_value_t = 32)]
    pub(crate) writers: usize,
    /// Stream lengths whose replay is timed.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
    pub(crate) replay_sizes: Vec<usize>,
    /// Idle session counts at which each server's memory is read (`none`: not measured).
    #[arg(long, value_delimiter = ',', default_value = "0,1000,10000", value_parser = session_count)]
    pub(crate) sessions: Vec<Option<usize>>,
    /// Also measure a stock rmcp server serving the same tool (the HTTP baseline).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub(crate) rmcp_baseline: bool,
    /// The Python SDK + mcp-persist baseline's interpreter (a venv with both; default:
    /// `.tools/bench-python/bin/python` above the working directory or this binary, as
    /// `scripts/setup-bench.sh` installs it).
    #[arg(long, conflicts_with = "no_python_baseline")]
    pub(crate) python_baseline: Option<std::path::PathBuf>,
    /// Leave the Python baseline out.
    #[arg(long)]
    pub(crate) no_python_baseline: bool,
    /// Do not pin servers and load generators to CPUs.
    #[arg(long)]
    pub(crate) no_pin: bool,
    /// Stop any single store measurement after this many seconds.
    #[arg(long, default_value_t = 10)]
    pub(crate) time_limit_secs: u64,
}

/// The benchmarks other than the default one.
#[derive(clap::Subcommand, Debug)]
pub(crate) enum BenchMode {
    /// Real traffic (issue 28), on each store, legacy era, durable-mcp server and load
    /// generator each in a process of its own: dropped connections whose requests are
    /// re-sent (latency and journal takeovers against a run without drops), retention
    /// deleting many streams (latency against retention off), and a long load (the
    /// server's memory and the SQLite WAL during and after it). The output is markdown.
    Traffic(TrafficArgs),
}

/// `durable-mcp bench traffic`'s flags.
#[derive(Parser, Debug)]
pub(crate) struct TrafficArgs {
    /// Store URLs (comma-separated or repeated), each measured in turn, every run on the
    /// same store (use a scratch schema or key prefix). Default: a temporary SQLite file,
    /// a new one for every server.
    #[arg(long, value_delimiter = ',')]
    pub(crate) stores: Vec<String>,
    /// The parts to run: `drops`, `retention`, `sustained`.
    #[arg(long, value_delimiter = ',', default_value = "drops,retention,sustained")]
    pub(crate) parts: Vec<durable_mcp_bench::traffic::TrafficPart>,
    /// A run of a few seconds per part: the durations below default to 2 s (drops),
    /// 3 s with a stream age and prune interval of 1 s (retention), 2 s and 2 s after
    /// (sustained), and 5 warm-up calls.
    #[arg(long)]
    pub(crate) quick: bool,
    /// Concurrent connections, each its own legacy session.
    #[arg(long, default_value_t = 16)]
    pub(crate) connections: usize,
    /// Untimed calls per connection before each run [default: 50].
    #[arg(long)]
    pub(crate) warmup_calls: Option<usize>,
    /// Seconds of each of the two runs of the drops part [default: 20].
    #[arg(long)]
    pub(crate) drop_secs: Option<u64>,
    /// Percent of the calls whose connection is dropped and whose request is re-sent.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) drop_percent: u32,
    /// A dropped connection is closed at once or after a random delay below this many
    /// milliseconds (half of the drops each).
    #[arg(long, default_value_t = 5)]
    pub(crate) drop_max_delay_ms: u64,
    /// Seconds of each of the two runs of the retention part [default: 40].
    #[arg(long)]
    pub(crate) retention_secs: Option<u64>,
    /// The retention run deletes finished streams older than this many seconds [default: 5].
    #[arg(long)]
    pub(crate) max_stream_age_secs: Option<u64>,
    /// The retention run prunes every this many seconds [default: 5].
    #[arg(long)]
    pub(crate) prune_interval_secs: Option<u64>,
    /// Seconds of the sustained load [default: 120].
    #[arg(long)]
    pub(crate) sustained_secs: Option<u64>,
    /// Seconds the server's memory and WAL are still read after the sustained load [default: 30].
    #[arg(long)]
    pub(crate) after_secs: Option<u64>,
    /// Seed of the drops' draws (a seed repeats a run's drops).
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Do not pin servers and load generators to CPUs.
    #[arg(long)]
    pub(crate) no_pin: bool,
}

/// `durable-mcp bench traffic`.
async fn traffic(args: TrafficArgs) -> anyhow::Result<()> {
    let executable = std::env::current_exe().context("finding this executable (it runs the bench's servers)")?;
    let base =
        if args.quick { durable_mcp_bench::traffic::TrafficConfig::quick(executable) } else { durable_mcp_bench::traffic::TrafficConfig::new(executable) };
    let secs = |flag: Option<u64>, default: Duration| flag.map_or(default, |secs| Duration::from_secs(secs.max(1)));
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
        max_stream_age_secs: args.max_stream_age_secs.unwrap_or(base.max_stream_age_secs).max(1),
        prune_interval_secs: args.prune_interval_secs.unwrap_or(base.prune_interval_secs).max(1),
        sustained_duration: secs(args.sustained_secs, base.sustained_duration),
        after: args.after_secs.map_or(base.after, Duration::from_secs),
        pin: !args.no_pin,
        ..base
    };
    let report = durable_mcp_bench::traffic::run_traffic(&config, |step| tracing::info!("bench: {step}")).await.context("traffic benchmark")?;
    println!("{}", report.to_markdown());
    if !report.failures.is_empty() {
        anyhow::bail!("{} run(s) failed (listed at the end of the report)", report.failures.len());
    }
    Ok(())
}

/// A `--sessions` value: a count, or `none`.
fn session_count(value: &str) -> Result<Option<usize>, String> {
    if value == "none" {
        return Ok(None);
    }
    value.parse().map(Some).map_err(|e| format!("{value:?}: {e}"))
}

pub(crate) async fn bench(args: BenchArgs) -> anyhow::Result<()> {
    if let Some(BenchMode::Traffic(traffic_args)) = args.mode {
        return traffic(traffic_args).await;
    }
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

    #[test]
    fn traffic_is_a_mode_of_bench_with_flags_of_its_own() {
        let cli =
            crate::Cli::try_parse_from(["durable-mcp", "bench", "traffic", "--quick", "--stores", "sqlite:/tmp/x.db,memory:", "--parts", "drops,sustained"])
                .expect("parses");
        let crate::Command::Bench(BenchArgs { mode: Some(BenchMode::Traffic(args)), .. }) = cli.command else { panic!("not bench traffic") };
        assert!(args.quick);
        assert_eq!(args.stores, ["sqlite:/tmp/x.db", "memory:"]);
        assert_eq!(args.parts, [durable_mcp_bench::traffic::TrafficPart::Drops, durable_mcp_bench::traffic::TrafficPart::Sustained]);
        assert_eq!((args.connections, args.drop_percent), (16, 10));
        let cli = crate::Cli::try_parse_from(["durable-mcp", "bench", "--runs", "1"]).expect("parses");
        assert!(matches!(cli.command, crate::Command::Bench(BenchArgs { mode: None, runs: 1, .. })));
        assert!(crate::Cli::try_parse_from(["durable-mcp", "bench", "--runs", "1", "traffic"]).is_err(), "the default bench's flags are not traffic's");
    }

    #[test]
    fn bench_command_lines_quote_what_a_shell_would_not_take_as_is() {
        let args = ["./durable-mcp", "bench", "--stores", "memory:,postgres://p@h:5432/t?schema=x&a=b", "it's"].map(String::from);
        assert_eq!(command_line(args), r#"./durable-mcp bench --stores 'memory:,postgres://p@h:5432/t?schema=x&a=b' 'it'\''s'"#);
    }
}
