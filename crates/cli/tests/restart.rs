//! D1/D3/D4 end to end with the real binary: a client reads part of a stream, its
//! connection drops, the server is killed with SIGKILL and started again on the same store,
//! and the client resumes with `GET` + `Last-Event-ID`: it receives exactly the rest of the
//! stream, in order, once.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

const N: u64 = 12;
const K: usize = 4;

/// Start `emit_events(N)` with a progress token, read the priming event and K messages,
/// drop the connection, and wait until the tool has finished (its events are committed
/// even though nobody reads them: a disconnect is not a cancellation in this era).
fn partial_read(addr: std::net::SocketAddr, session: &str) -> (String, Vec<(String, Value)>) {
    let call = json!({"jsonrpc": "2.0", "id": 42, "method": "tools/call", "params": {
        "name": "emit_events", "arguments": {"count": N, "interval_ms": 20}, "_meta": {"progressToken": "p"}}});
    let mut response = post(addr, Some(session), &call);
    assert_eq!(response.status, 200);
    let (priming, data) = response.next_event().expect("priming event");
    assert_eq!(data, "", "first event is the priming event");
    let mut seen = Vec::new();
    let mut last = priming.expect("priming id");
    while seen.len() < K {
        let (id, data) = response.next_event().expect("event");
        last = id.expect("id");
        seen.push((last.clone(), serde_json::from_str(&data).unwrap()));
    }
    drop(response);
    // 2 messages per step (progress + log) plus the result, 20 ms apart.
    std::thread::sleep(Duration::from_millis(20 * N + 1_000));
    (last, seen)
}

fn check_rest(seen: &[(String, Value)], rest: &[(String, Value)]) {
    let total: Vec<&Value> = seen.iter().chain(rest).map(|(_, m)| m).collect();
    let progress: Vec<f64> =
        total.iter().filter(|m| m["method"] == "notifications/progress").map(|m| m["params"]["progress"].as_f64().unwrap()).collect();
    assert_eq!(progress.len() as u64, N, "every progress notification exactly once: {progress:?}");
    assert!(progress.windows(2).all(|w| w[0] < w[1]), "in order: {progress:?}");
    let logs = total.iter().filter(|m| m["method"] == "notifications/message").count() as u64;
    assert_eq!(logs, N, "every log message exactly once");
    let results: Vec<&&Value> = total.iter().filter(|m| m["id"] == 42).collect();
    assert_eq!(results.len(), 1, "exactly one result");
    assert_eq!(total.last().unwrap()["id"], 42, "the result comes last");
    let ids: std::collections::BTreeSet<&String> = seen.iter().chain(rest).map(|(id, _)| id).collect();
    assert_eq!(ids.len(), seen.len() + rest.len(), "no duplicate event ids");
}

#[test]
fn d3_sqlite_resume_after_sigkill_and_restart() {
    let dir = temp_dir("restart");
    let store = format!("sqlite:{}", dir.join("store.db").display());
    let port = free_port();
    let mut server = Server::start(&store, port, &[]);
    let session = initialize(server.addr);
    let (last, seen) = partial_read(server.addr, &session);
    server.kill();

    let server = Server::start(&store, port, &[]);
    let resumed = resume(server.addr, &session, &last);
    assert_eq!(resumed.status, 200, "D4: the session survives the restart");
    let rest = resumed.messages();
    check_rest(&seen, &rest);
    // The session itself still works, without a new initialize.
    let list = post(server.addr, Some(&session), &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}));
    let msgs = list.messages();
    assert!(msgs.last().unwrap().1["result"]["tools"].is_array());
}

#[test]
fn bad_last_event_id_after_restart_is_a_clear_4xx() {
    let dir = temp_dir("badresume");
    let store = format!("sqlite:{}", dir.join("store.db").display());
    let server = Server::start(&store, free_port(), &[]);
    let session = initialize(server.addr);
    for bad in ["nonsense", "00000000000000000000000000000000_3"] {
        let response = resume(server.addr, &session, bad);
        assert!((400..500).contains(&response.status), "{bad}: {}", response.status);
        let body = response.json();
        assert!(body["error"]["code"].is_i64(), "{bad}: {body}");
    }
}
