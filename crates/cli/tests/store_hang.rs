//! D15 on a hung store, with the real binary: the TCP proxy of `support::proxy` stops
//! answering for 20 s (connections accepted, nothing comes back: what a managed database's
//! failover looks like from the worker), and the private PostgreSQL of
//! `scripts/tls-services.sh` is SIGSTOPped for 20 s (its postmaster and every backend).
//! Every request, new or in flight, gets its answer within the documented bound
//! (`docs/operations.md`): a new one its 503, an in-flight one the end of its stream (its
//! client resumes it). Once the store answers again, the in-flight call is carried on from
//! its journal and its client gets its one outcome by resuming.
//!
//! Reads `DATABASE_URL` / `REDIS_URL` / `DATABASE_TLS_URL`; outside CI a missing service
//! skips the test with a printed reason, with `CI=true` it fails.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::backend::Backend;
use support::*;

/// The longest a request may wait on a hung store: the 2 s store timeout, and the time to
/// write the answer.
const BOUND: Duration = Duration::from_millis(3_500);
const HANG: Duration = Duration::from_secs(20);

fn hung_store_answers_every_request_within_the_bound(backend: Backend) {
    if !backend.available() {
        return;
    }
    let proxy = proxy::Proxy::start(backend.addr());
    let store = backend.store_url(Some(proxy.addr));
    every_request_answered_within_the_bound(
        &format!("{backend:?}"),
        &store,
        &|| proxy.hang(),
        &|| proxy.restore(),
    );
}

/// While `hang` .. `restore` (20 s), a worker on `store` answers a new session and a new
/// call 503 within [`BOUND`] and ends an in-flight call's stream within it; afterwards the
/// call is finished from its journal and its client gets its one outcome by resuming.
fn every_request_answered_within_the_bound(
    backend: &str,
    store: &str,
    hang: &dyn Fn(),
    restore: &dyn Fn(),
) {
    let server = Server::start(store, free_port(), &["--lease-ms", "1500"]);
    let session = initialize(server.addr);
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "steps", "arguments": {"count": 3, "step_ms": 700}}});
    let mut in_flight = post(server.addr, Some(&session), &call);
    assert_eq!(in_flight.status, 200);
    let (last, _) = in_flight.next_event().unwrap();
    let last = last.expect("priming id");
    std::thread::sleep(Duration::from_millis(300));

    hang();
    let hung = Instant::now();
    let addr = server.addr;
    let new_session = std::thread::spawn(move || {
        let started = Instant::now();
        let status = try_request(addr, "POST", &[("accept", "application/json, text/event-stream"), ("content-type", "application/json")], Some(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).to_string(),
        ))
        .map(|r| r.status);
        (status, started.elapsed())
    });
    let session_copy = session.clone();
    let new_call = std::thread::spawn(move || {
        let started = Instant::now();
        let call = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "test_simple_text", "arguments": {}}});
        let status = post(addr, Some(&session_copy), &call).status;
        (status, started.elapsed())
    });
    // The in-flight call: its stream ends (the run goes back to the journal).
    while in_flight.next_event().is_some() {}
    let in_flight_ended = hung.elapsed();
    let (status, took) = new_session.join().unwrap();
    assert_eq!(
        status.ok(),
        Some(503),
        "{backend}: a new session on a hung store"
    );
    assert!(
        took < BOUND,
        "{backend}: the new session's 503 took {took:?}"
    );
    let (status, took) = new_call.join().unwrap();
    assert_eq!(status, 503, "{backend}: a call on a hung store");
    assert!(took < BOUND, "{backend}: the call's 503 took {took:?}");
    assert!(
        in_flight_ended < BOUND,
        "{backend}: the in-flight call's stream ended after {in_flight_ended:?}"
    );
    eprintln!(
        "{backend} hung: new session 503 after {took:?}, in-flight stream ended after {in_flight_ended:?}"
    );

    std::thread::sleep(HANG.saturating_sub(hung.elapsed()));
    restore();
    // The client resumes: the call is finished from its journal, one outcome.
    let deadline = Instant::now() + Duration::from_secs(30);
    let outcome = loop {
        let resumed = try_request(
            server.addr,
            "GET",
            &[
                ("accept", "text/event-stream"),
                ("mcp-session-id", &session),
                ("last-event-id", &last),
            ],
            None,
        );
        if let Ok(resumed) = resumed
            && resumed.status == 200
        {
            let messages: Vec<Value> = resumed.messages().into_iter().map(|(_, m)| m).collect();
            if let Some(outcome) = messages.into_iter().find(|m| m["id"] == 3) {
                break outcome;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{backend}: the in-flight call finished once the store answered"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        outcome["result"]["structuredContent"]["steps"],
        json!([1, 2, 3]),
        "{backend}: {outcome}"
    );
}

#[test]
fn d15_a_hung_postgres_answers_every_request_within_the_bound() {
    hung_store_answers_every_request_within_the_bound(Backend::Postgres);
}

#[test]
fn d15_a_hung_redis_answers_every_request_within_the_bound() {
    hung_store_answers_every_request_within_the_bound(Backend::Redis);
}

/// The processes of the private PostgreSQL of `scripts/tls-services.sh`: its postmaster (the
/// first line of `postmaster.pid`) and its children.
fn private_postgres_processes() -> Vec<String> {
    let pid_file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../.tools/tls/pg/data/postmaster.pid"
    );
    let postmaster = std::fs::read_to_string(pid_file)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .trim()
        .to_owned();
    let mut pids = vec![postmaster.clone()];
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // `pid (comm) state ppid ...`: the fields after the command name.
        if stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.split(' ').nth(1) == Some(postmaster.as_str()))
        {
            pids.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    pids
}

/// Send `signal` to every process of the private PostgreSQL. A child may have exited since
/// it was listed; the postmaster (listed first) must take the signal.
fn signal_private_postgres(signal: &str) {
    for (i, pid) in private_postgres_processes().into_iter().enumerate() {
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(&pid)
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(
            status.success() || i > 0,
            "kill -{signal} {pid} (the postmaster)"
        );
    }
}

/// Sends SIGCONT when dropped: a failing test leaves no stopped server behind.
struct Continue;

impl Drop for Continue {
    fn drop(&mut self) {
        signal_private_postgres("CONT");
    }
}

#[test]
fn d15_a_sigstopped_postgres_answers_every_request_within_the_bound() {
    let Some(url) = std::env::var("DATABASE_TLS_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        assert!(
            !durable_mcp_store::in_ci(),
            "CI is set and DATABASE_TLS_URL is not: run scripts/tls-services.sh start and source .tools/tls/env"
        );
        eprintln!(
            "skipped: DATABASE_TLS_URL is not set (scripts/tls-services.sh start; source .tools/tls/env)"
        );
        return;
    };
    let store = format!("{url}&schema=dmcp_hang_{}", std::process::id());
    let _continue = Continue;
    every_request_answered_within_the_bound(
        "SIGSTOPped PostgreSQL",
        &store,
        &|| signal_private_postgres("STOP"),
        &|| signal_private_postgres("CONT"),
    );
}
