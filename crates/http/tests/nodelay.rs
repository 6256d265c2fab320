//! Trap: SSE responses are several small writes; without TCP_NODELAY a keep-alive client
//! waits on Nagle's algorithm + delayed ACK (~40 ms a request). This drives the real server
//! over one keep-alive TCP connection and requires the median round trip to stay far below
//! that. It measures a latency, so it is not run by default (`--ignored` runs it).
//! That the option is set is checked structurally, and by default, by the unit test
//! `serve::tests::accepted_connections_have_tcp_nodelay` (it reads the server-side socket).

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::time::{Duration, Instant};

use durable_mcp_http::HttpConfig;
use serde_json::json;
use support::{harness_with, round_trip};
use tokio::io::BufReader;

/// A latency figure, so a measurement, not a test that runs by default: on a shared, loaded
/// machine a median can pass 20 ms for reasons other than Nagle. Run it with
/// `cargo test -p durable-mcp-http --test nodelay -- --ignored` (see docs/benchmarks.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a latency measurement; run with --ignored"]
async fn trap_keep_alive_round_trips_are_not_delayed_by_nagle() {
    let h = harness_with(HttpConfig::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(durable_mcp_http::serve(
        listener,
        h.transport.clone(),
        std::future::pending(),
    ));
    let mut conn = BufReader::new(tokio::net::TcpStream::connect(addr).await.unwrap());
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let (headers, _) = round_trip(&mut conn, &init.to_string(), None).await;
    let session = headers
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("mcp-session-id: ")
                .map(|s| s.trim().to_owned())
        })
        .expect("session id");
    let mut times = Vec::new();
    for i in 1..=60 {
        let call = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}}});
        let start = Instant::now();
        let (_, body) = round_trip(&mut conn, &call.to_string(), Some(&session)).await;
        times.push(start.elapsed());
        assert!(body.contains(&format!("\"id\":{i}")), "{body}");
    }
    times.sort();
    let median = times[times.len() / 2];
    server.abort();
    assert!(
        median < Duration::from_millis(20),
        "median keep-alive round trip {median:?}: TCP_NODELAY missing?"
    );
}
