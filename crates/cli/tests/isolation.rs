//! D13 and bounded keys end to end with the real binary:
//!
//! - without authentication, a 2025-11-25 task belongs to the session that created it:
//!   another session's `tasks/get`, `tasks/list`, `tasks/result` and `tasks/cancel` find
//!   nothing (the same answer as an unknown id), on one worker and across workers sharing
//!   a PostgreSQL store, while the creating session keeps full use of it;
//! - a request id of any length a body may carry is served on every backend (its journal
//!   key is bounded), and the same id re-sent attaches to the same run (D6).
//!
//! The shared-store tests read `DATABASE_URL` / `REDIS_URL`; outside CI a missing service
//! skips them with a printed reason, with `CI=true` they fail.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use durable_mcp_store::testing::incompressible;

use std::net::SocketAddr;

use serde_json::{Value, json};
use support::backend::Backend;
use support::*;

fn sqlite(name: &str) -> String {
    format!("sqlite:{}", temp_dir(name).join("store.db").display())
}

/// The last JSON-RPC message of a POST in `session`.
fn call(addr: SocketAddr, session: &str, id: Value, method: &str, params: Value) -> Value {
    let response = post(
        addr,
        Some(session),
        &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
    );
    assert_eq!(response.status, 200, "{method}");
    response.messages().pop().unwrap().1
}

fn start_task(addr: SocketAddr, session: &str, id: u64, seconds: f64) -> String {
    let params =
        json!({"name": "slow_compute", "arguments": {"seconds": seconds}, "task": {"ttl": 60_000}});
    let created = call(addr, session, json!(id), "tools/call", params);
    created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned()
}

fn status(addr: SocketAddr, session: &str, task_id: &str) -> Value {
    call(
        addr,
        session,
        json!(900),
        "tasks/get",
        json!({"taskId": task_id}),
    )
}

fn listed(addr: SocketAddr, session: &str) -> Vec<String> {
    let list = call(addr, session, json!(901), "tasks/list", json!({}));
    let tasks = list["result"]["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("a list: {list}"));
    tasks
        .iter()
        .map(|t| t["taskId"].as_str().unwrap().to_owned())
        .collect()
}

/// A task of session A, seen from session B (`b` may be another worker of the same store).
fn tasks_are_bound_to_their_session(a: SocketAddr, b: SocketAddr) {
    let session_a = initialize(a);
    let session_b = initialize(b);
    let finishing = start_task(a, &session_a, 1, 1.0);
    let running = start_task(a, &session_a, 2, 60.0);
    // What an id that never existed gets: the reference answer.
    let unknown = "0123456789abcdef0123456789abcdef";
    let not_found = status(b, &session_b, unknown)["error"].clone();
    assert_eq!(not_found["code"], -32602, "{not_found}");
    for task_id in [&finishing, &running] {
        for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
            let answer = call(b, &session_b, json!(10), method, json!({"taskId": task_id}));
            assert_eq!(
                answer["error"], not_found,
                "{method} of another session's task: {answer}"
            );
            assert!(answer.get("result").is_none(), "{method}: {answer}");
        }
    }
    assert!(
        listed(b, &session_b).is_empty(),
        "another session's tasks are not listed"
    );
    // B's cancel did nothing; A still has both tasks.
    assert_eq!(
        status(a, &session_a, &running)["result"]["status"],
        "working"
    );
    let mine = listed(a, &session_a);
    assert!(
        mine.contains(&finishing) && mine.contains(&running),
        "{mine:?}"
    );
    let result = call(
        a,
        &session_a,
        json!(20),
        "tasks/result",
        json!({"taskId": finishing}),
    );
    assert!(
        result["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("finished")),
        "{result}"
    );
    let cancelled = call(
        a,
        &session_a,
        json!(21),
        "tasks/cancel",
        json!({"taskId": running}),
    );
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    // B's own tasks are B's: A does not see them either.
    let theirs = start_task(b, &session_b, 3, 0.0);
    assert_eq!(listed(b, &session_b), std::slice::from_ref(&theirs));
    assert_eq!(status(a, &session_a, &theirs)["error"], not_found);
}

#[test]
fn d13_legacy_tasks_are_bound_to_their_session() {
    let server = Server::start(&sqlite("isolation-tasks"), free_port(), &[]);
    tasks_are_bound_to_their_session(server.addr, server.addr);
}

#[test]
fn d13_postgres_legacy_tasks_are_bound_to_their_session_across_workers() {
    let Some((a, b)) = two_workers(Backend::Postgres, &[]) else {
        return;
    };
    tasks_are_bound_to_their_session(a.addr, b.addr);
}

/// The stream an SSE event id names.
fn stream_of(event_id: &str) -> &str {
    event_id
        .split_once('_')
        .map_or(event_id, |(stream, _)| stream)
}

/// A `tools/call` with a string id of `len` bytes is answered, with that id; sent again,
/// it attaches to the same run (its events are the same stream's).
fn long_request_id_is_served(addr: SocketAddr, len: usize) {
    let session = initialize(addr);
    let id = json!(incompressible(len));
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "test_simple_text", "arguments": {}}});
    let first = post(addr, Some(&session), &body);
    let status = first.status;
    if status != 200 {
        panic!("a {len}-byte id: {status} {}", first.body());
    }
    let first = first.messages();
    let (event, outcome) = first.last().unwrap().clone();
    assert_eq!(outcome["id"], id, "the outcome carries the id");
    assert!(
        outcome["result"]["content"].is_array(),
        "a {len}-byte id: {outcome}"
    );
    let again = post(addr, Some(&session), &body);
    let status = again.status;
    if status != 200 {
        panic!("re-sent: {status} {}", again.body());
    }
    let again = again.messages();
    let (again_event, again_outcome) = again.last().unwrap().clone();
    assert_eq!(again_outcome, outcome, "one outcome (D6)");
    assert_eq!(
        stream_of(&again_event),
        stream_of(&event),
        "the re-sent id attaches to the same run"
    );
}

fn long_request_ids(store: &str) {
    let server = Server::start(store, free_port(), &[]);
    for len in [3_000, 100_000] {
        long_request_id_is_served(server.addr, len);
    }
}

#[test]
fn long_request_ids_on_memory() {
    long_request_ids("memory:");
}

#[test]
fn long_request_ids_on_sqlite() {
    long_request_ids(&sqlite("isolation-ids"));
}

#[test]
fn long_request_ids_on_postgres() {
    if Backend::Postgres.available() {
        long_request_ids(&Backend::Postgres.store_url(None));
    }
}

#[test]
fn long_request_ids_on_redis() {
    if Backend::Redis.available() {
        long_request_ids(&Backend::Redis.store_url(None));
    }
}

/// The rest of the class (D3, D9, D13): what a session reaches by id is its own. Another
/// session's answer to this session's question is dropped (the question stays open for
/// its own session), and another session cannot resume this session's stream.
fn answers_and_resumes_are_bound_to_their_session(a: SocketAddr, b: SocketAddr) {
    let session_a = initialize(a);
    let session_b = initialize(b);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ask", "arguments": {"question": "colour?"}}});
    let mut asked = post(a, Some(&session_a), &body);
    let (event, question) = loop {
        let (event, data) = asked.next_event().expect("the question");
        let Ok(message) = serde_json::from_str::<Value>(&data) else {
            continue;
        };
        if message["method"] == "elicitation/create" {
            break (event.expect("an event id"), message);
        }
    };
    let answer = |text: &str| json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"answer": text}}});
    assert_eq!(
        post(b, Some(&session_b), &answer("from B")).status,
        202,
        "dropped, as the protocol allows"
    );
    assert_eq!(
        resume(b, &session_b, &event).status,
        404,
        "another session's stream is unknown"
    );
    assert_eq!(post(a, Some(&session_a), &answer("from A")).status, 202);
    let outcome = asked
        .messages()
        .into_iter()
        .map(|(_, m)| m)
        .find(|m| m["id"] == 1)
        .expect("the outcome");
    let text = outcome["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        text.contains("from A") && !text.contains("from B"),
        "{outcome}"
    );
}

#[test]
fn d13_answers_and_resumes_are_bound_to_their_session() {
    let server = Server::start(&sqlite("isolation-answers"), free_port(), &[]);
    answers_and_resumes_are_bound_to_their_session(server.addr, server.addr);
}

#[test]
fn d13_postgres_answers_and_resumes_are_bound_to_their_session_across_workers() {
    let Some((a, b)) = two_workers(Backend::Postgres, &[]) else {
        return;
    };
    answers_and_resumes_are_bound_to_their_session(a.addr, b.addr);
}
