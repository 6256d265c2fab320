//! Commits and fsyncs per call, from each store's own counters, read before and after
//! every `tools/call` run of a durable-mcp server and divided by the calls it made:
//!
//! - **PostgreSQL**: `pg_stat_database.xact_commit` of the store's database (commits) and
//!   `pg_stat_wal.wal_sync` (WAL fsyncs, PostgreSQL 14 and later). A backend publishes its
//!   counts at most once a second, and an idle one 10 s after its last transaction, so the
//!   read after a run waits [`PG_STATS_SETTLE`] first. Both are the whole database's and
//!   cluster's: other clients count too (the reads' own transactions are taken off).
//! - **Redis**: `INFO` `total_commands_processed` (commands), the calls of `EVALSHA`,
//!   `EVAL`, `FCALL` and `EXEC` (scripts and transactions: Redis's commits), and
//!   `aof_enabled`: without the append-only file Redis makes no fsync for a write ("no
//!   persistence configured"); with it, Redis counts none, so none is shown.
//! - **SQLite**: the store's own counters, `durable_mcp.store.sqlite.commits` and
//!   `.syncs` (crates/store-sqlite/src/counters.rs), from the server's `/metrics`.
//! - **memory**: nothing to commit or sync.
//!
//! Where `perf` can count system-wide tracepoints (root, or a low
//! `perf_event_paranoid`), every `fsync` and `fdatasync` the kernel saw during the load
//! is counted too, as a cross-check of the stores' figures.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

use crate::traffic::Scrape;
use crate::{BenchError, ENCRYPTED};

/// How long after a run the PostgreSQL statistics are read: PostgreSQL 15 publishes a
/// backend's pending counts at the end of a transaction at most once a second, and an
/// idle backend's 10 s after its last one (`PGSTAT_IDLE_INTERVAL`).
pub(crate) const PG_STATS_SETTLE: Duration = Duration::from_secs(11);

/// The Prometheus exposition names of the SQLite store's counters (`COMMITS` and `SYNCS`
/// of `durable-mcp-store-sqlite`: dots become underscores, counters get `_total`).
pub(crate) const SQLITE_COMMITS: &str = "durable_mcp_store_sqlite_commits_total";
/// See [`SQLITE_COMMITS`]; labelled `by` (`store` or `sqlite`), summed here.
pub(crate) const SQLITE_SYNCS: &str = "durable_mcp_store_sqlite_syncs_total";

/// The Redis commands that commit: scripts and transactions.
const REDIS_COMMITS: [&str; 7] = [
    "evalsha",
    "eval",
    "evalsha_ro",
    "eval_ro",
    "fcall",
    "fcall_ro",
    "exec",
];

/// What a store's counters said over the runs of one server, era and connection count.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Counted {
    /// Calls made while counting (the timed ones and the warm-up).
    pub calls: u64,
    /// Commits (transactions, scripts): `None` where not read.
    pub commits: Option<u64>,
    /// fsyncs the store counted (`Some(0)` where it makes none); `None` where not counted.
    pub syncs: Option<u64>,
    /// Commands the store's server processed (Redis only).
    pub commands: Option<u64>,
    /// fsyncs and fdatasyncs of every process on the machine (`perf`), if counted.
    pub kernel_syncs: Option<u64>,
}

impl Counted {
    /// The runs' counts together: a figure is summed only where every run has it.
    pub fn total(runs: &[Counted]) -> Option<Counted> {
        if runs.is_empty() {
            return None;
        }
        let sum = |pick: fn(&Counted) -> Option<u64>| {
            runs.iter()
                .map(pick)
                .try_fold(0u64, |sum, v| Some(sum + v?))
        };
        Some(Counted {
            calls: runs.iter().map(|r| r.calls).sum(),
            commits: sum(|r| r.commits),
            syncs: sum(|r| r.syncs),
            commands: sum(|r| r.commands),
            kernel_syncs: sum(|r| r.kernel_syncs),
        })
    }

    /// `figure` per call (`None` without the figure or calls).
    pub fn per_call(&self, figure: Option<u64>) -> Option<f64> {
        figure
            .filter(|_| self.calls > 0)
            .map(|f| f as f64 / self.calls as f64)
    }
}

/// One reading of a store's counters.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Reading {
    commits: Option<u64>,
    syncs: Option<u64>,
    commands: Option<u64>,
}

impl Reading {
    /// The counts from `self` to `after`, less `own` (what the reads themselves added:
    /// commits, commands), for `calls` calls.
    fn until(&self, after: &Reading, own: (u64, u64), calls: u64) -> Counted {
        let grew = |a: Option<u64>, b: Option<u64>, less: u64| {
            Some(b?.saturating_sub(a?).saturating_sub(less))
        };
        Counted {
            calls,
            commits: grew(self.commits, after.commits, own.0),
            syncs: grew(self.syncs, after.syncs, 0),
            commands: grew(self.commands, after.commands, own.1),
            kernel_syncs: None,
        }
    }
}

/// Where a store's counters are read.
pub(crate) enum Source {
    /// The memory store: nothing to count.
    Memory,
    /// The SQLite store's counters on the server's `/metrics`.
    Sqlite(SocketAddr),
    /// A connection to the store's PostgreSQL database.
    Postgres(tokio_postgres::Client),
    /// A connection to the store's Redis.
    Redis(redis::aio::MultiplexedConnection),
    /// Not counted, and why (for the report).
    None(String),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Source::Memory => "Memory",
            Source::Sqlite(_) => "Sqlite",
            Source::Postgres(_) => "Postgres",
            Source::Redis(_) => "Redis",
            Source::None(_) => "None",
        })
    }
}

impl Source {
    /// The counters of the store at `url`, served by a server whose `/metrics` is at
    /// `metrics` (if on). A store whose counters cannot be reached is [`Source::None`].
    pub(crate) async fn connect(url: &str, metrics: Option<SocketAddr>) -> Self {
        let url = url.strip_prefix(ENCRYPTED).unwrap_or(url);
        let scheme = url.split_once(':').map_or(url, |(scheme, _)| scheme);
        let connected = match scheme {
            "memory" => Ok(Source::Memory),
            "sqlite" => metrics
                .map(Source::Sqlite)
                .ok_or_else(|| "the server serves no /metrics".to_owned()),
            "postgres" | "postgresql" => postgres(url).await.map(Source::Postgres),
            "redis" | "valkey" => redis_connection(url).await.map(Source::Redis),
            other => Err(format!("no counters known for {other}: stores")),
        };
        connected.unwrap_or_else(Source::None)
    }

    /// Read the counters now. PostgreSQL's are read after [`PG_STATS_SETTLE`] when
    /// `settle` (a read after a run).
    pub(crate) async fn read(&mut self, settle: bool) -> Result<Reading, BenchError> {
        match self {
            Source::Memory => Ok(Reading {
                commits: Some(0),
                syncs: Some(0),
                commands: None,
            }),
            Source::Sqlite(metrics) => {
                let scrape = Scrape::read(*metrics).await?;
                let count = |name| scrape.sum(name, None).round() as u64;
                Ok(Reading {
                    commits: Some(count(SQLITE_COMMITS)),
                    syncs: Some(count(SQLITE_SYNCS)),
                    commands: None,
                })
            }
            Source::Postgres(client) => {
                if settle {
                    tokio::time::sleep(PG_STATS_SETTLE).await;
                }
                read_postgres(client).await
            }
            Source::Redis(connection) => {
                let info: String = redis::cmd("INFO")
                    .arg("stats")
                    .arg("commandstats")
                    .arg("persistence")
                    .query_async(connection)
                    .await
                    .map_err(|e| BenchError::Http(format!("redis INFO: {e}")))?;
                Ok(redis_reading(&info))
            }
            Source::None(_) => Ok(Reading::default()),
        }
    }

    /// What the reads themselves add to the counts between two readings: (commits,
    /// commands). A PostgreSQL read is one transaction on the bench's own connection:
    /// the read before a run is published within the run's count (it is at least
    /// [`PG_STATS_SETTLE`] long); a Redis `INFO` counts once it has answered, so the one
    /// before a run is in the count after it.
    pub(crate) fn own(&self) -> (u64, u64) {
        match self {
            Source::Postgres(_) => (1, 0),
            Source::Redis(_) => (0, 1),
            _ => (0, 0),
        }
    }

    /// The counts from `before` to `after` for `calls` calls.
    pub(crate) fn counted(&self, before: &Reading, after: &Reading, calls: u64) -> Counted {
        before.until(after, self.own(), calls)
    }

    /// A sentence on what this store's figures are, for the report's notes.
    pub(crate) async fn describe(&mut self) -> Option<String> {
        match self {
            Source::Redis(connection) => {
                let info: String = redis::cmd("INFO")
                    .arg("persistence")
                    .query_async(connection)
                    .await
                    .ok()?;
                Some(if redis_aof(&info) == Some(false) {
                    "no persistence configured (`aof_enabled:0`): Redis makes no fsync for a write, fsyncs/call is 0".to_owned()
                } else {
                    "append-only file on: Redis counts no fsyncs, so none are shown".to_owned()
                })
            }
            Source::None(why) => Some(format!("not counted: {why}")),
            _ => None,
        }
    }
}

/// A connection to the PostgreSQL database of a store URL (without TLS: the store's own
/// options are left out, and so are TLS settings).
async fn postgres(url: &str) -> Result<tokio_postgres::Client, String> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let key = pair.split_once('=').map_or(*pair, |(key, _)| key);
            [
                "host",
                "port",
                "user",
                "password",
                "dbname",
                "application_name",
            ]
            .contains(&key)
        })
        .collect();
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    let connect = tokio_postgres::connect(&url, tokio_postgres::NoTls);
    let (client, connection) = tokio::time::timeout(Duration::from_secs(10), connect)
        .await
        .map_err(|_| "PostgreSQL did not answer within 10 s".to_owned())?
        .map_err(|e| format!("PostgreSQL: {e}"))?;
    // Ends when the client is dropped.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

async fn read_postgres(client: &tokio_postgres::Client) -> Result<Reading, BenchError> {
    // One statement, one transaction (see `Source::own`); `pg_stat_wal` is PostgreSQL 14+.
    let row = client
        .query_one(
            "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()), \
             (SELECT wal_sync FROM pg_stat_wal)",
            &[],
        )
        .await;
    let row = match row {
        Ok(row) => row,
        Err(_) => client
            .query_one(
                "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()), NULL::bigint",
                &[],
            )
            .await
            .map_err(|e| BenchError::Http(format!("PostgreSQL statistics: {e}")))?,
    };
    let count = |i: usize| {
        row.try_get::<_, Option<i64>>(i)
            .ok()
            .flatten()
            .and_then(|v| u64::try_from(v).ok())
    };
    Ok(Reading {
        commits: count(0),
        syncs: count(1),
        commands: None,
    })
}

/// A connection to the Redis of a store URL (its server, not a cluster).
async fn redis_connection(url: &str) -> Result<redis::aio::MultiplexedConnection, String> {
    let options = durable_mcp::store::RedisOptions::from_url(url).map_err(|e| e.to_string())?;
    if options.cluster.is_some() {
        return Err("a Redis Cluster (its nodes' counters are not summed)".into());
    }
    let client = redis::Client::open(options.url.as_str()).map_err(|e| format!("Redis: {e}"))?;
    tokio::time::timeout(
        Duration::from_secs(10),
        client.get_multiplexed_async_connection(),
    )
    .await
    .map_err(|_| "Redis did not answer within 10 s".to_owned())?
    .map_err(|e| format!("Redis: {e}"))
}

/// The value of `field` in an `INFO` answer (`field:value` lines).
fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.trim_end()
            .strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
    })
}

/// The `calls` of `cmdstat_<command>` in an `INFO commandstats` answer (0 when absent:
/// a command never called is not listed).
fn command_calls(info: &str, command: &str) -> u64 {
    info_field(info, &format!("cmdstat_{command}"))
        .and_then(|stats| {
            stats
                .split(',')
                .find_map(|pair| pair.strip_prefix("calls="))
        })
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(0)
}

/// Whether Redis writes its append-only file.
fn redis_aof(info: &str) -> Option<bool> {
    info_field(info, "aof_enabled").map(|v| v.trim() == "1")
}

fn redis_reading(info: &str) -> Reading {
    Reading {
        commits: Some(REDIS_COMMITS.iter().map(|c| command_calls(info, c)).sum()),
        syncs: (redis_aof(info) == Some(false)).then_some(0),
        commands: info_field(info, "total_commands_processed").and_then(|v| v.trim().parse().ok()),
    }
}

/// `perf stat` counting every `fsync` and `fdatasync` on the machine until [`Self::stop`].
#[derive(Debug)]
pub(crate) struct KernelSyncs {
    child: Child,
}

/// The tracepoints counted.
const SYNC_EVENTS: &str = "syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync";

impl KernelSyncs {
    /// Whether `perf` can count the tracepoints here (tried once, for 10 ms).
    pub(crate) async fn available() -> bool {
        let out = Command::new("perf")
            .args([
                "stat",
                "-a",
                "-x",
                ",",
                "-e",
                SYNC_EVENTS,
                "--",
                "sleep",
                "0.01",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .output()
            .await;
        out.is_ok_and(|out| {
            out.status.success() && parse_perf(&String::from_utf8_lossy(&out.stderr)).is_some()
        })
    }

    /// Start counting: `perf stat` runs `cat`, which ends when its stdin is closed.
    pub(crate) fn start() -> Result<Self, BenchError> {
        let child = Command::new("perf")
            .args(["stat", "-a", "-x", ",", "-e", SYNC_EVENTS, "--", "cat"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        Ok(Self { child })
    }

    /// Stop counting: the syncs seen since [`Self::start`].
    pub(crate) async fn stop(mut self) -> Result<u64, BenchError> {
        drop(self.child.stdin.take());
        let mut stderr = self.child.stderr.take();
        let read = async {
            let mut text = String::new();
            if let Some(stderr) = stderr.as_mut() {
                stderr.read_to_string(&mut text).await?;
            }
            self.child.wait().await?;
            Ok::<_, BenchError>(text)
        };
        let text = tokio::time::timeout(Duration::from_secs(10), read)
            .await
            .map_err(|_| BenchError::Timeout("perf stat"))??;
        parse_perf(&text).ok_or_else(|| BenchError::Check(format!("perf stat printed {text:?}")))
    }
}

/// The sum of the counts of `perf stat -x,` output (`count,unit,event,...` lines); `None`
/// when no event was counted.
fn parse_perf(text: &str) -> Option<u64> {
    let counts: Vec<u64> = text
        .lines()
        .filter(|line| line.contains("syscalls:sys_enter_f"))
        .filter_map(|line| line.split(',').next()?.trim().parse().ok())
        .collect();
    (!counts.is_empty()).then(|| counts.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "# Stats\r\n\
total_connections_received:12\r\n\
total_commands_processed:1000\r\n\
instantaneous_ops_per_sec:3\r\n\
\r\n\
# Commandstats\r\n\
cmdstat_evalsha:calls=300,usec=900,usec_per_call=3.00,rejected_calls=0,failed_calls=0\r\n\
cmdstat_exec:calls=20,usec=10,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n\
cmdstat_info:calls=7,usec=70,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n\
cmdstat_evalsha_ro:calls=5,usec=5,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n\
\r\n\
# Persistence\r\n\
loading:0\r\n\
aof_enabled:0\r\n";

    #[test]
    fn redis_info_gives_commands_scripts_and_persistence() {
        assert_eq!(info_field(INFO, "total_commands_processed"), Some("1000"));
        assert_eq!(info_field(INFO, "total_commands"), None, "whole names only");
        assert_eq!(command_calls(INFO, "evalsha"), 300);
        assert_eq!(command_calls(INFO, "eval"), 0, "not cmdstat_evalsha's");
        assert_eq!(command_calls(INFO, "fcall"), 0);
        assert_eq!(redis_aof(INFO), Some(false));
        assert_eq!(
            redis_reading(INFO),
            Reading {
                commits: Some(325),
                syncs: Some(0),
                commands: Some(1000),
            }
        );
        let aof = INFO.replace("aof_enabled:0", "aof_enabled:1");
        assert_eq!(redis_reading(&aof).syncs, None, "Redis counts no fsyncs");
    }

    #[test]
    fn counts_are_differences_less_the_reads_own_divided_by_the_calls() {
        let before = Reading {
            commits: Some(100),
            syncs: Some(40),
            commands: Some(1_000),
        };
        let after = Reading {
            commits: Some(2_101),
            syncs: Some(1_040),
            commands: Some(9_001),
        };
        let counted = before.until(&after, (1, 1), 1_000);
        assert_eq!(
            counted,
            Counted {
                calls: 1_000,
                commits: Some(2_000),
                syncs: Some(1_000),
                commands: Some(8_000),
                kernel_syncs: None,
            }
        );
        assert_eq!(counted.per_call(counted.commits), Some(2.0));
        assert_eq!(counted.per_call(counted.syncs), Some(1.0));
        assert_eq!(counted.per_call(None), None);
        assert_eq!(
            Counted {
                calls: 0,
                ..counted
            }
            .per_call(counted.commits),
            None
        );
        // A figure missing on either side is missing; a counter never goes below zero.
        let missing = Reading {
            syncs: None,
            ..after
        };
        assert_eq!(before.until(&missing, (0, 0), 10).syncs, None);
        assert_eq!(after.until(&before, (0, 0), 10).commits, Some(0));
    }

    #[test]
    fn runs_add_up_where_every_run_has_the_figure() {
        let run = |calls, syncs| Counted {
            calls,
            commits: Some(calls * 2),
            syncs,
            commands: None,
            kernel_syncs: Some(calls),
        };
        let total = Counted::total(&[run(100, Some(50)), run(300, Some(150))]).expect("runs");
        assert_eq!(
            total,
            Counted {
                calls: 400,
                commits: Some(800),
                syncs: Some(200),
                commands: None,
                kernel_syncs: Some(400),
            }
        );
        assert_eq!(
            Counted::total(&[run(100, Some(50)), run(300, None)])
                .expect("runs")
                .syncs,
            None
        );
        assert_eq!(Counted::total(&[]), None);
    }

    #[test]
    fn perf_stat_csv_is_summed_over_both_events() {
        let text = "12,,syscalls:sys_enter_fsync,1000,100.00,,\n\
                    30,,syscalls:sys_enter_fdatasync,1000,100.00,,\n";
        assert_eq!(parse_perf(text), Some(42));
        assert_eq!(
            parse_perf("<not supported>,,syscalls:sys_enter_fsync,0,100.00,,\n"),
            None
        );
        assert_eq!(parse_perf(""), None);
    }
}
