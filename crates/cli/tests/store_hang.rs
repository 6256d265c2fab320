//! D15 on a hung store, with the real binary: the TCP proxy of `support::proxy` stops
//! answering for 20 s (connections accepted, nothing comes back: what a SIGSTOPped database
//! or a managed database's failover looks like from the worker). Every request, new or in
//! flight, gets its answer within the documented bound (`docs/operations.md`): a new one
//! its 503, an in-flight one the end of its stream (its client resumes it). Once the store
//! answers again, the in-flight call is carried on from its journal and its client gets its
//! one outcome by resuming.
//!
//! Reads `DATABASE_URL` / `REDIS_URL`; outside CI a missing service skips the test with a
//! printed reason, with `CI=true` it fails.

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
    let server = Server::start(&backend.store_url(Some(proxy.addr)), free_port(), &["--lease-ms", "1500"]);
    let session = initialize(server.addr);
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "steps", "arguments": {"count": 3, "step_ms": 700}}});
    let mut in_flight = post(server.addr, Some(&session), &call);
    assert_eq!(in_flight.status, 200);
    let (last, _) = in_flight.next_event().unwrap();
    let last = last.expect("priming id");
    std::thread::sleep(Duration::from_millis(300));

    proxy.hang();
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
    assert_eq!(status.ok(), Some(503), "{backend:?}: a new session on a hung store");
    assert!(took < BOUND, "{backend:?}: the new session's 503 took {took:?}");
    let (status, took) = new_call.join().unwrap();
    assert_eq!(status, 503, "{backend:?}: a call on a hung store");
    assert!(took < BOUND, "{backend:?}: the call's 503 took {took:?}");
    assert!(in_flight_ended < BOUND, "{backend:?}: the in-flight call's stream ended after {in_flight_ended:?}");
    eprintln!("{backend:?} hung: new session 503 after {took:?}, in-flight stream ended after {in_flight_ended:?}");

    std::thread::sleep(HANG.saturating_sub(hung.elapsed()));
    proxy.restore();
    // The client resumes: the call is finished from its journal, one outcome.
    let deadline = Instant::now() + Duration::from_secs(30);
    let outcome = loop {
        let resumed = try_request(server.addr, "GET", &[("accept", "text/event-stream"), ("mcp-session-id", &session), ("last-event-id", &last)], None);
        if let Ok(resumed) = resumed
            && resumed.status == 200
        {
            let messages: Vec<Value> = resumed.messages().into_iter().map(|(_, m)| m).collect();
            if let Some(outcome) = messages.into_iter().find(|m| m["id"] == 3) {
                break outcome;
            }
        }
        assert!(Instant::now() < deadline, "{backend:?}: the in-flight call finished once the store answered");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(outcome["result"]["structuredContent"]["steps"], json!([1, 2, 3]), "{backend:?}: {outcome}");
}

#[test]
fn d15_a_hung_postgres_answers_every_request_within_the_bound() {
    hung_store_answers_every_request_within_the_bound(Backend::Postgres);
}

#[test]
fn d15_a_hung_redis_answers_every_request_within_the_bound() {
    hung_store_answers_every_request_within_the_bound(Backend::Redis);
}
