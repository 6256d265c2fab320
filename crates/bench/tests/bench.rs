//! End to end: a tiny run against real servers on loopback.

use std::time::Duration;

use durable_mcp_bench::{BenchConfig, LoadSpec, run, run_load, start_durable};

fn tiny() -> BenchConfig {
    BenchConfig {
        clients: vec![1, 3],
        requests_per_client: 5,
        warmup_per_client: 1,
        events_per_writer: 20,
        writers: 3,
        replay_sizes: vec![10, 300],
        replay_runs: 1,
        time_limit: Duration::from_secs(10),
        ..BenchConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_call_round_trips_on_durable_mcp() {
    let server = start_durable(durable_mcp::open_store("memory:").await.unwrap()).await.unwrap();
    let spec = LoadSpec {
        clients: 2,
        requests_per_client: 10,
        warmup_per_client: 1,
        time_limit: Duration::from_secs(10),
        tool: "test_simple_text".into(),
        arguments: serde_json::json!({}),
    };
    let result = run_load(server.addr(), server.path(), &spec).await.unwrap();
    assert_eq!(result.calls, 20);
    assert!(result.p50 <= result.p99);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_error_fails_the_measurement() {
    let server = start_durable(durable_mcp::open_store("memory:").await.unwrap()).await.unwrap();
    let spec = LoadSpec {
        clients: 1,
        requests_per_client: 1,
        warmup_per_client: 0,
        time_limit: Duration::from_secs(10),
        tool: "test_error_handling".into(),
        arguments: serde_json::json!({}),
    };
    assert!(run_load(server.addr(), server.path(), &spec).await.is_err());
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_run_reports_every_backend_and_the_rmcp_baseline() {
    let report = run(&tiny(), |_| {}).await.unwrap();
    let markdown = report.to_markdown();
    for needle in ["| memory |", "sqlite synchronous=FULL", "sqlite synchronous=NORMAL", "rmcp StreamableHttpService", "300 events"] {
        assert!(markdown.contains(needle), "{needle:?} missing from\n{markdown}");
    }
    // memory, two SQLite files, rmcp: 4 servers x 2 client counts.
    assert_eq!(report.http.len(), 8);
    assert!(report.http.iter().all(|row| row.result.calls == row.result.clients * 5));
    println!("{markdown}");
}
