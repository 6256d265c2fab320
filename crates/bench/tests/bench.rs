//! End to end: tiny runs against real server processes on loopback (no timing is
//! asserted: counts, rows, and that no child process outlives the run).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use durable_mcp_bench::traffic::{TrafficConfig, TrafficPart, run_traffic};
use durable_mcp_bench::{
    BenchConfig, Era, Executables, Launcher, LoadSpec, Pinning, PythonBaseline, PythonStatus,
    ServerKind, ServerSpec, find_python_baseline, process_running, run, run_load,
};

/// This package's `durable-mcp-bench` (stock rmcp, the load generators) and the
/// `durable-mcp` binary beside it in the same target directory (the durable-mcp servers):
/// `cargo test --workspace` builds both; `cargo test -p durable-mcp-bench` alone needs
/// `-p durable-mcp-cli` too.
fn executables() -> Executables {
    let executables = Executables::beside(PathBuf::from(env!("CARGO_BIN_EXE_durable-mcp-bench")));
    if let Err(error) = executables.check() {
        panic!(
            "{error}\n(for these tests, a debug build: `cargo build -p durable-mcp-cli`, or test with `-p durable-mcp-cli -p durable-mcp-bench`)"
        );
    }
    executables
}

/// A run of a few calls: memory: only, 1 connection, 5 calls per run, both eras.
fn tiny() -> BenchConfig {
    BenchConfig {
        stores: vec!["memory:".into()],
        connections: vec![1],
        runs: 1,
        run_duration: Duration::from_secs(20),
        max_calls: Some(5),
        warmup_calls: 1,
        events_per_writer: 20,
        writers: 3,
        replay_sizes: vec![10, 300],
        replay_runs: 1,
        growth_sessions: vec![0, 20],
        python_baseline: PythonBaseline::Off,
        time_limit: Duration::from_secs(10),
        ..BenchConfig::new(executables())
    }
}

/// Wait (bounded) until `pid` no longer runs.
async fn gone(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while process_running(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_run_reports_every_row_and_leaves_no_child_process_behind() {
    let report = run(&tiny(), |_| {}).await.expect("run");
    let markdown = report.to_markdown();
    assert!(
        report.failures.is_empty(),
        "{:?}\n{markdown}",
        report.failures
    );
    // The rmcp baseline and durable-mcp on memory:, in each era it answers.
    let modern_rmcp = matches!(report.rmcp_modern, Some(Ok(())));
    let expected = 3 + usize::from(modern_rmcp);
    assert_eq!(report.http.len(), expected, "{:?}", report.http);
    for (kind, era) in [
        (ServerKind::Rmcp, Era::Legacy),
        (ServerKind::Durable, Era::Legacy),
        (ServerKind::Durable, Era::Modern),
    ] {
        let row = report
            .http
            .iter()
            .find(|r| r.kind == kind && r.era == era)
            .unwrap_or_else(|| panic!("no {kind:?} {era} row"));
        assert_eq!(row.runs.len(), 1);
        assert_eq!(row.runs[0].calls, 5, "{row:?}");
        assert!(row.p50() <= row.p99());
    }
    for needle in [
        "| memory |",
        "300 events",
        "| stock rmcp (StreamableHttpService) | legacy | 1 |",
        "| durable-mcp, memory | legacy | 1 |",
        "| durable-mcp, memory | modern | 1 |",
        "| legacy | 1 |",
        "| modern | 1 |",
        "20 sessions",
        "stock rmcp",
    ] {
        assert!(
            markdown.contains(needle),
            "{needle:?} missing from\n{markdown}"
        );
    }
    assert_eq!(
        report.growth.len(),
        2,
        "rmcp and memory: {:?}",
        report.growth
    );
    assert!(
        report
            .growth
            .iter()
            .all(|row| row.rss_kib.len() == 2 && row.rss_kib.iter().all(|(_, kib)| *kib > 0))
    );
    // Servers (one per round, and one for the memory table) and one load generator per row.
    assert!(
        report.child_pids.len() >= 2 + 2 + expected,
        "{:?}",
        report.child_pids
    );
    for &pid in &report.child_pids {
        assert!(
            !process_running(pid),
            "child {pid} still runs after the run"
        );
    }
    println!("{markdown}");
}

/// The store's own counters are read around every run of a durable-mcp server (none to
/// read on memory:, the SQLite store's from the server's `/metrics`), and the plots of
/// calls per second against connections are written: one line per server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_run_counts_commits_and_fsyncs_and_draws_its_plots() {
    let dir =
        std::env::temp_dir().join(format!("durable-mcp-bench-counted-{}", std::process::id()));
    let config = BenchConfig {
        stores: vec![
            "memory:".into(),
            format!("sqlite:{}", dir.join("counted.db").display()),
        ],
        connections: vec![1, 2],
        growth_sessions: Vec::new(),
        plot_dir: Some(dir.join("plots")),
        ..tiny()
    };
    std::fs::create_dir_all(&dir).expect("dir");
    let report = run(&config, |_| {}).await.expect("run");
    let markdown = report.to_markdown();
    assert!(
        report.failures.is_empty(),
        "{:?}\n{markdown}",
        report.failures
    );
    for row in report.http.iter().filter(|r| r.kind == ServerKind::Durable) {
        assert_eq!(row.counted.len(), 1, "{row:?}");
        let counted = row.counted[0];
        // Timed and warm-up calls.
        assert_eq!(counted.calls, 6 * row.connections as u64, "{row:?}");
        if row.server.ends_with("memory") {
            assert_eq!((counted.commits, counted.syncs), (Some(0), Some(0)));
        } else {
            // Every call is journaled: one connection at a time, a commit each at least;
            // more share group commits. Each commit is synced (FULL), once at most.
            let commits = counted.commits.expect("commits");
            assert!(commits > 0, "{row:?}");
            if row.connections == 1 {
                assert!(commits >= counted.calls, "{row:?}");
            }
            assert!(
                counted.syncs.is_some_and(|s| s > 0 && s <= commits),
                "{row:?}"
            );
        }
    }
    assert!(
        markdown.contains("**Commits and fsyncs per call**"),
        "{markdown}"
    );
    assert!(
        markdown.contains("](benchmarks/calls-legacy.svg)"),
        "{markdown}"
    );
    for era in ["legacy", "modern"] {
        let svg = std::fs::read_to_string(dir.join("plots").join(format!("calls-{era}.svg")))
            .expect("the plot is written");
        // Stock rmcp (legacy, and modern where it answers) and durable-mcp on both stores.
        assert!(svg.matches("<polyline").count() >= 2, "{svg}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Processes running `durable-mcp` as the proxy's stdio upstream.
fn stdio_upstreams() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            args.first().is_some_and(|a| a.ends_with(b"/durable-mcp"))
                && args
                    .windows(2)
                    .any(|w| w == [&b"bench-server"[..], &b"stdio"[..]])
        })
        .collect()
}

/// `durable-mcp proxy` rows: the proxy on a store in front of the example over stdio, in
/// both eras; neither the proxy nor its upstream processes outlive the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_run_reports_its_rows_and_stops_its_upstreams() {
    // A proxy server child starts its first upstream before it listens; dropped (killed),
    // it takes its upstreams with it (their stdin ends).
    let dir = std::env::temp_dir().join(format!("durable-mcp-bench-proxy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let mut launcher = Launcher::new(executables(), Pinning::none("test"), &dir);
    let server = launcher
        .server(
            &ServerSpec::Proxy {
                url: "memory:".into(),
            },
            "proxy",
        )
        .await
        .expect("start");
    assert!(
        !stdio_upstreams().is_empty(),
        "the proxy listens with an upstream running"
    );
    drop(server);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !stdio_upstreams().is_empty() {
        assert!(
            Instant::now() < deadline,
            "a killed proxy's upstreams still run: {:?}",
            stdio_upstreams()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);

    let config = BenchConfig {
        proxy_stores: vec!["memory:".into()],
        rmcp_baseline: false,
        growth_sessions: Vec::new(),
        ..tiny()
    };
    let report = run(&config, |_| {}).await.expect("run");
    let markdown = report.to_markdown();
    assert!(
        report.failures.is_empty(),
        "{:?}\n{markdown}",
        report.failures
    );
    for era in [Era::Legacy, Era::Modern] {
        let row = report
            .http
            .iter()
            .find(|r| r.kind == ServerKind::Proxy && r.era == era)
            .unwrap_or_else(|| panic!("no proxy {era} row: {markdown}"));
        assert_eq!(row.runs.len(), 1);
        assert_eq!(row.runs[0].calls, 5, "{row:?}");
    }
    assert!(
        markdown.contains("| durable-mcp proxy, memory | legacy | 1 |"),
        "{markdown}"
    );
    assert!(
        report.growth.is_empty(),
        "no growth asked for: {:?}",
        report.growth
    );
    for &pid in &report.child_pids {
        assert!(gone(pid).await, "child {pid} still runs after the run");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !stdio_upstreams().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the proxy's upstreams outlived the run: {:?}",
            stdio_upstreams()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_server_child_is_killed() {
    let dir = std::env::temp_dir().join(format!("durable-mcp-bench-drop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let mut launcher = Launcher::new(executables(), Pinning::none("test"), &dir);
    let server = launcher
        .server(
            &ServerSpec::Durable {
                url: "memory:".into(),
            },
            "dropped",
        )
        .await
        .expect("start");
    let pid = server.pid();
    assert!(process_running(pid));
    drop(server);
    assert!(gone(pid).await, "the dropped server {pid} still runs");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_error_fails_the_measurement() {
    let dir = std::env::temp_dir().join(format!("durable-mcp-bench-error-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let mut launcher = Launcher::new(executables(), Pinning::none("test"), &dir);
    let server = launcher
        .server(
            &ServerSpec::Durable {
                url: "memory:".into(),
            },
            "errors",
        )
        .await
        .expect("start");
    for era in Era::ALL {
        let spec = LoadSpec {
            connections: 1,
            era,
            duration: Duration::from_secs(10),
            warmup_calls: 0,
            max_calls: Some(1),
            tool: "test_error_handling".into(),
            arguments: serde_json::json!({}),
            drops: None,
        };
        assert!(
            run_load(server.addr(), server.path(), &spec).await.is_err(),
            "{era}"
        );
        let spec = LoadSpec {
            tool: "test_simple_text".into(),
            max_calls: Some(3),
            ..spec
        };
        assert_eq!(
            run_load(server.addr(), server.path(), &spec)
                .await
                .expect("load")
                .calls,
            3,
            "{era}"
        );
    }
    server.stop().await.expect("stop");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Python SDK + mcp-persist baseline, when `scripts/setup-bench.sh` installed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_baseline_is_measured_in_the_legacy_era_when_installed() {
    let Some(python) = find_python_baseline(&executables().bench) else {
        println!("skipped: no Python baseline installed (scripts/setup-bench.sh)");
        return;
    };
    let config = BenchConfig {
        rmcp_baseline: false,
        growth_sessions: Vec::new(),
        python_baseline: PythonBaseline::At(python.clone()),
        ..tiny()
    };
    let report = run(&config, |_| {}).await.expect("run");
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(
        report.python,
        PythonStatus::Measured(python.display().to_string())
    );
    let rows: Vec<_> = report
        .http
        .iter()
        .filter(|r| r.kind == ServerKind::Python)
        .collect();
    assert_eq!(rows.len(), 1, "legacy only: {rows:?}");
    assert_eq!((rows[0].era, rows[0].runs[0].calls), (Era::Legacy, 5));
    let markdown = report.to_markdown();
    assert!(
        markdown.contains("| Python SDK + mcp-persist SQLite | legacy | 1 |"),
        "{markdown}"
    );
    for &pid in &report.child_pids {
        assert!(
            !process_running(pid),
            "child {pid} still runs after the run"
        );
    }
}

/// `durable-mcp-bench traffic --quick` on a temporary SQLite store: every part reports
/// its rows, drops were made and re-sent (and answered: the load generator fails on
/// anything else), retention removed streams, the WAL and memory were read; no child
/// process outlives the run. Takeovers are reported, not asserted: they are what the
/// drops part measures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quick_traffic_run_reports_every_part_and_leaves_no_child_process_behind() {
    let config = TrafficConfig {
        connections: 4,
        pin: false,
        ..TrafficConfig::quick(executables())
    };
    assert_eq!(config.parts, TrafficPart::ALL);
    let report = run_traffic(&config, |_| {}).await.expect("run");
    let markdown = report.to_markdown();
    assert!(
        report.failures.is_empty(),
        "{:?}\n{markdown}",
        report.failures
    );
    assert_eq!(report.stores.len(), 1);
    let store = &report.stores[0];
    assert!(store.sqlite);
    let drops = store.drops.as_ref().expect("drops part");
    let (base, dropped) = (
        drops.base.as_ref().expect("no drops"),
        drops.test.as_ref().expect("drops"),
    );
    assert!(base.load.calls > 0 && base.load.resent == 0, "{base:?}");
    assert!(
        dropped.load.resent > 0 && dropped.load.resent < dropped.load.calls,
        "{dropped:?}"
    );
    assert!(
        dropped.load.p50 <= dropped.load.p99 && dropped.load.p99 <= dropped.load.max,
        "{dropped:?}"
    );
    let retention = store.retention.as_ref().expect("retention part");
    assert_eq!(
        retention
            .base
            .as_ref()
            .expect("retention off")
            .streams_removed,
        0
    );
    let on = retention.test.as_ref().expect("retention on");
    assert!(on.prunes > 0 && on.streams_removed > 0, "{retention:?}");
    let sustained = store
        .sustained
        .as_ref()
        .expect("sustained part")
        .as_ref()
        .expect("sustained");
    assert!(sustained.load.calls > 0);
    assert!(
        sustained.wal_max_loading().is_some_and(|bytes| bytes > 0),
        "{sustained:?}"
    );
    assert!(
        sustained.rss_max_loading().is_some_and(|kib| kib > 0) && sustained.rss_at_end().is_some(),
        "{sustained:?}"
    );
    for needle in [
        "**Drops and re-sends**",
        "| 10 % dropped |",
        "**Retention**",
        "| 1 s, every 1 s |",
        "**Sustained load**",
        "RSS 2 s after",
    ] {
        assert!(
            markdown.contains(needle),
            "{needle:?} missing from\n{markdown}"
        );
    }
    // A server and a load generator per run: 2 drops, 2 retention, 1 sustained.
    assert!(report.child_pids.len() >= 10, "{:?}", report.child_pids);
    for &pid in &report.child_pids {
        assert!(gone(pid).await, "child {pid} still runs after the run");
    }
    println!("{markdown}");
}

/// `durable-mcp-bench` with `args`: its exit status, stdout and stderr.
fn bench_binary(
    program: &std::path::Path,
    args: &[&str],
) -> (std::process::ExitStatus, String, String) {
    let out = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run durable-mcp-bench");
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The binary end to end: stock rmcp and the load generators are its own children, the
/// durable-mcp server is the `durable-mcp` binary's (its argv shows which ran what).
#[test]
fn the_binary_runs_rmcp_itself_and_durable_mcp_with_the_binary_beside_it() {
    let executables = executables();
    let args = [
        "--stores",
        "memory:",
        "--connections",
        "1",
        "--eras",
        "legacy",
        "--runs",
        "1",
        "--secs",
        "1",
        "--warmup-calls",
        "1",
        "--events",
        "10",
        "--writers",
        "1",
        "--replay-sizes",
        "10",
        "--sessions",
        "none",
        "--no-python-baseline",
        "--no-pin",
    ];
    let (status, stdout, stderr) = bench_binary(&executables.bench, &args);
    assert!(status.success(), "{status}\n{stdout}\n{stderr}");
    for needle in [
        "| stock rmcp (StreamableHttpService) | legacy | 1 |",
        "| durable-mcp, memory | legacy | 1 |",
        "durable-mcp-bench --stores memory:",
    ] {
        assert!(stdout.contains(needle), "{needle:?} missing from\n{stdout}");
    }
}

/// Without a `durable-mcp` beside it (or at `--durable-mcp`), the binary says where it
/// looked and how to build one, before measuring anything.
#[test]
fn a_missing_durable_mcp_is_a_clear_error() {
    let bench = executables().bench;
    for args in [
        &["--durable-mcp", "/nonexistent/durable-mcp"][..],
        &[
            "traffic",
            "--quick",
            "--durable-mcp",
            "/nonexistent/durable-mcp",
        ],
    ] {
        let (status, stdout, stderr) = bench_binary(&bench, args);
        assert!(!status.success(), "{args:?}: {stdout}");
        assert!(
            stderr.contains("/nonexistent/durable-mcp")
                && stderr.contains("cargo build --release -p durable-mcp-cli"),
            "{args:?}: {stderr}"
        );
    }
    // A copy alone in a directory of its own looks beside itself (a hard link: the
    // executable's path is the link's).
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("alone-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let alone = dir.join("durable-mcp-bench");
    let _ = std::fs::remove_file(&alone);
    if std::fs::hard_link(&bench, &alone).is_err() {
        std::fs::copy(&bench, &alone).expect("copy durable-mcp-bench");
    }
    let (status, _, stderr) = bench_binary(&alone, &["--no-python-baseline"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!status.success());
    let expected = dir.join("durable-mcp");
    assert!(
        stderr.contains(&format!(
            "no durable-mcp executable at {}",
            expected.display()
        )),
        "{stderr}"
    );
}
