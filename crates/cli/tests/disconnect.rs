//! Real traffic: a client that closes its connection right after sending a journaled
//! request, at moments that vary from "before the server read it" to "after the response
//! started", leaves no run behind for lease expiry (D6, D7). Every request's id is then
//! re-sent and must be answered at once from its run's stream: with a 60 s lease, a run
//! orphaned by the disconnect would hold its re-send for a minute. The worker's own metrics
//! must show no takeover of any kind: nothing was orphaned, nothing adopted.
//!
//! On SQLite, and on PostgreSQL, Redis and a Redis Cluster from `DATABASE_URL` /
//! `REDIS_URL` / `REDIS_CLUSTER_URL` (skipped with a reason outside CI when missing).

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::backend::Backend;
use support::scrape::{metrics_addr, scrape, wait_for_listener};
use support::*;

/// Disconnects per backend.
const DISCONNECTS: u64 = 1_000;

fn call(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "test_simple_text", "arguments": {}}})
}

/// Send `call(id)` on a connection of its own and close it at moment `k` of a cycle of
/// twelve: at once (with or without a half-close), after 50..450 µs, or once the first
/// byte of the response arrived.
fn send_and_drop(addr: SocketAddr, session: &str, id: u64, k: u64) {
    let body = call(id).to_string();
    let text = format!(
        "POST /mcp HTTP/1.1\r\nhost: localhost\r\naccept: application/json, text/event-stream\r\ncontent-type: application/json\r\nmcp-session-id: {session}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_nodelay(true).unwrap();
    tcp.write_all(text.as_bytes()).unwrap();
    match k % 12 {
        0 => {}
        1 => {
            let _ = tcp.shutdown(Shutdown::Write);
        }
        2..=10 => std::thread::sleep(Duration::from_micros(50 * (k % 12 - 1))),
        _ => {
            tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let _ = tcp.read(&mut [0u8; 1]);
        }
    }
    drop(tcp);
}

fn no_run_is_orphaned_by_a_disconnect(store: &str) {
    let metrics = metrics_addr();
    let server = Server::start(
        store,
        free_port(),
        &[
            "--lease-ms",
            "60000",
            "--metrics-listen",
            &metrics.to_string(),
        ],
    );
    wait_for_listener(metrics);
    let session = initialize(server.addr);
    for id in 1..=DISCONNECTS {
        send_and_drop(server.addr, &session, id, id);
    }
    // Each re-send gets its run's one outcome (D6), without waiting for a lease.
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    for id in 1..=DISCONNECTS {
        let asked = Instant::now();
        let messages = post(server.addr, Some(&session), &call(id))
            .within(Duration::from_secs(20))
            .messages();
        slowest = slowest.max(asked.elapsed());
        let outcome = messages
            .iter()
            .map(|(_, m)| m)
            .find(|m| m["id"] == id)
            .unwrap_or_else(|| panic!("no outcome for id {id}: {messages:?}"));
        assert_eq!(
            outcome["result"]["content"][0]["text"], "This is a simple text response for testing.",
            "id {id}: {outcome}"
        );
    }
    eprintln!(
        "{DISCONNECTS} re-sends after disconnects: {:?} in all, the slowest {slowest:?}",
        started.elapsed()
    );
    assert!(
        slowest < Duration::from_secs(10),
        "a re-send waited {slowest:?}: its run was orphaned"
    );
    let scrape = scrape(metrics);
    let takeovers: Vec<_> = scrape
        .0
        .iter()
        .filter(|s| s.name == "durable_mcp_journal_takeovers_total" && s.value > 0.0)
        .collect();
    assert!(
        takeovers.is_empty(),
        "a living worker took runs over: {takeovers:?}"
    );
}

#[test]
fn d7_sqlite_no_run_is_orphaned_by_a_disconnect() {
    let dir = temp_dir("disconnect");
    no_run_is_orphaned_by_a_disconnect(&format!("sqlite:{}", dir.join("store.db").display()));
}

#[test]
fn d7_postgres_no_run_is_orphaned_by_a_disconnect() {
    if Backend::Postgres.available() {
        no_run_is_orphaned_by_a_disconnect(&Backend::Postgres.store_url(None));
    }
}

#[test]
fn d7_redis_no_run_is_orphaned_by_a_disconnect() {
    if Backend::Redis.available() {
        no_run_is_orphaned_by_a_disconnect(&Backend::Redis.store_url(None));
    }
}

#[test]
fn d7_redis_cluster_no_run_is_orphaned_by_a_disconnect() {
    if Backend::RedisCluster.available() {
        no_run_is_orphaned_by_a_disconnect(&Backend::RedisCluster.store_url(None));
    }
}
