//! The commit budget of a request (issue 10), as a count of store operations, not a timing:
//! a journaled `tools/call` that runs past the journal wait commits once then (stream,
//! priming event, alias, run record: D1, D6) and once after (response, close, run record
//! removed), in each era; one that answers at once, or a request answered without a
//! handler, commits once in all (the engine's `pump` tests count the first).

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use durable_mcp_engine::EngineOptions;
use durable_mcp_http::HttpConfig;
use durable_mcp_store::RecordKind;
use durable_mcp_store::testing::{CountingStore, Op};
use durable_mcp_store_memory::MemoryStore;
use http::StatusCode;
use serde_json::{Value, json};
use support::{
    Harness, POST_HEADERS, call, eventually, harness_on, initialize, messages, post, send,
};

/// How long the `slow` tool sleeps: the window in which the count before the handler's
/// outcome is read (the count is waited for, never slept for).
const HANDLER_MS: u64 = 1_500;

/// A worker on a counting memory store. Its lease is long enough that no heartbeat (a
/// write of its own, every third of the lease) falls within a call.
fn counted() -> (Harness, Arc<CountingStore>) {
    let store = Arc::new(CountingStore::counting(Arc::new(MemoryStore::new())));
    let options = {
        let mut o = EngineOptions::default();
        o.lease = Duration::from_secs(60);
        o
    };
    (
        harness_on(store.clone(), HttpConfig::default(), options),
        store,
    )
}

/// Wait until no request runs on the worker (its last write is done), then take the counts.
async fn settled(h: &Harness, store: &CountingStore) -> std::collections::BTreeMap<Op, u64> {
    eventually("the worker is idle", async || h.engine.in_flight() == 0).await;
    store.hook().take()
}

/// The writes of `counts`, by kind (reads and watches left out).
fn writes(counts: &std::collections::BTreeMap<Op, u64>) -> Vec<(Op, u64)> {
    counts
        .iter()
        .filter(|(op, _)| op.is_write())
        .map(|(op, n)| (*op, *n))
        .collect()
}

/// A modern (2026-07-28) `tools/call`.
async fn modern_call(router: &Router, id: u64, tool: &str, args: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": args, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    let headers = [
        POST_HEADERS[0],
        POST_HEADERS[1],
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", tool),
    ];
    let reply = send(router, "POST", &headers, Some(body.to_string())).await;
    assert_eq!(reply.status, StatusCode::OK);
    reply.json().await
}

/// Whether a run record is in `store` (a call past its journal wait, D6).
async fn journaled(store: &CountingStore) -> bool {
    !store
        .inner()
        .list_records(RecordKind::Run, "", 10)
        .await
        .unwrap()
        .is_empty()
}

/// Both halves of a journaled call's budget: once the run is journaled (its handler runs
/// past `journal_wait`, D6), exactly one commit (and no other write) has been made; once it
/// ended, one more.
async fn assert_journaled_budget(
    h: &Harness,
    store: &Arc<CountingStore>,
    call: impl Future<Output = Value> + Send + 'static,
) {
    let answer = tokio::spawn(call);
    eventually("the run is journaled", async || {
        h.engine.in_flight() == 1 && journaled(store).await
    })
    .await;
    let before = store.hook().take();
    assert_eq!(
        writes(&before),
        vec![(Op::Commit, 1)],
        "one commit while the handler runs: {before:?}"
    );
    // No read of the event log before the handler (the transport follows the stream from
    // memory); the legacy era's one read is its session (D4, D5: any worker's DELETE or
    // idle expiry shows there).
    assert_eq!(before.get(&Op::ReadAfter), None, "{before:?}");
    let journal = store
        .inner()
        .list_records(RecordKind::Run, "", 10)
        .await
        .unwrap();
    assert_eq!(journal.len(), 1, "the run record is in that commit (D6)");
    let outcome = answer.await.unwrap();
    assert_eq!(outcome["result"]["content"][0]["text"], "done", "{outcome}");
    let after = settled(h, store).await;
    assert_eq!(
        writes(&after),
        vec![(Op::Commit, 1)],
        "one commit after the handler: {after:?}"
    );
    assert_eq!(
        after.get(&Op::ReadAfter),
        None,
        "the outcome is streamed from memory: {after:?}"
    );
    assert!(
        store
            .inner()
            .list_records(RecordKind::Run, "", 10)
            .await
            .unwrap()
            .is_empty(),
        "the run record went with the outcome"
    );
}

#[tokio::test]
async fn budget_journaled_tools_call_commits_once_before_and_once_after_legacy() {
    let (h, store) = counted();
    // 2025-11-25: the response stream starts with a priming event.
    let session = initialize(&h.router, "2025-11-25").await;
    // The first call of a worker creates the `requestState` key ring: not per request.
    let events = post(
        &h.router,
        Some(&session),
        call(1, "echo", json!({"text": "warm"})),
    )
    .await
    .events()
    .await;
    assert_eq!(messages(&events)[0]["result"]["content"][0]["text"], "warm");
    settled(&h, &store).await;
    let router = h.router.clone();
    let session_header = session.clone();
    assert_journaled_budget(&h, &store, async move {
        let events = post(
            &router,
            Some(&session_header),
            call(2, "slow", json!({"ms": HANDLER_MS})),
        )
        .await
        .events()
        .await;
        assert!(
            events[0].1.is_empty(),
            "the priming event comes first: {events:?}"
        );
        messages(&events).pop().unwrap()
    })
    .await;
}

#[tokio::test]
async fn budget_journaled_tools_call_commits_once_before_and_once_after_modern() {
    let (h, store) = counted();
    let warm = modern_call(&h.router, 1, "echo", json!({"text": "warm"})).await;
    assert_eq!(warm["result"]["content"][0]["text"], "warm");
    settled(&h, &store).await;
    let router = h.router.clone();
    assert_journaled_budget(&h, &store, async move {
        modern_call(&router, 2, "slow", json!({"ms": HANDLER_MS})).await
    })
    .await;
}

/// A request durable-mcp answers itself (`logging/setLevel` of a legacy session): the
/// level is session state (its own commit, D4); the response stream, its priming event,
/// the response and the close are one commit.
#[tokio::test]
async fn budget_request_answered_without_a_handler_commits_its_stream_once() {
    let (h, store) = counted();
    let session = initialize(&h.router, "2025-11-25").await;
    settled(&h, &store).await;
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "logging/setLevel", "params": {"level": "error"}});
    let events = post(&h.router, Some(&session), body).await.events().await;
    assert_eq!(messages(&events)[0]["result"], json!({}));
    let counts = settled(&h, &store).await;
    assert_eq!(
        writes(&counts),
        vec![(Op::UpdateSession, 1), (Op::Commit, 1)],
        "{counts:?}"
    );
}

/// A request that is not journaled but runs a handler (`tools/list`, `ping`) commits once
/// in all: its response stream is created with its response (and, in 2025-11-25, its
/// priming event, which still comes first, with its `retry` hint), in one batch with the
/// close. Nothing is journaled, and nothing is read back.
#[tokio::test]
async fn budget_unjournaled_request_commits_once_legacy() {
    let (h, store) = counted();
    let session = initialize(&h.router, "2025-11-25").await;
    let body = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"});
    // The first request of a worker creates the `requestState` key ring: not per request.
    post(&h.router, Some(&session), body.clone())
        .await
        .events()
        .await;
    settled(&h, &store).await;
    let reply = post(&h.router, Some(&session), body).await;
    let text = reply.text().await;
    let events = support::parse_sse(&text);
    assert!(
        events[0].1.is_empty() && text.starts_with("id: ") && text.contains("retry: "),
        "the priming event first: {text}"
    );
    assert!(messages(&events)[0]["result"]["tools"].is_array());
    let counts = settled(&h, &store).await;
    assert_eq!(
        writes(&counts),
        vec![(Op::Commit, 1)],
        "one commit, nothing journaled: {counts:?}"
    );
    assert_eq!(counts.get(&Op::ReadAfter), None, "{counts:?}");
    let ping = post(
        &h.router,
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 5, "method": "ping"}),
    )
    .await
    .events()
    .await;
    assert_eq!(messages(&ping)[0]["result"], json!({}));
    let counts = settled(&h, &store).await;
    assert_eq!(writes(&counts), vec![(Op::Commit, 1)], "ping: {counts:?}");
}

/// The same in the modern era (2026-07-28): `tools/list` is answered as JSON after one commit.
#[tokio::test]
async fn budget_unjournaled_request_commits_once_modern() {
    let (h, store) = counted();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    let headers = [
        POST_HEADERS[0],
        POST_HEADERS[1],
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/list"),
    ];
    let warm = send(&h.router, "POST", &headers, Some(body.to_string())).await;
    assert_eq!(warm.status, StatusCode::OK);
    settled(&h, &store).await;
    let reply = send(&h.router, "POST", &headers, Some(body.to_string())).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.json().await["result"]["tools"].is_array());
    let counts = settled(&h, &store).await;
    assert_eq!(writes(&counts), vec![(Op::Commit, 1)], "{counts:?}");
    assert_eq!(counts.get(&Op::ReadAfter), None, "{counts:?}");
}

/// A request that is not journaled and is answered with an error (a method the server does
/// not serve): the error creates its stream, in one commit.
#[tokio::test]
async fn budget_unjournaled_request_answered_with_an_error_commits_once() {
    let (h, store) = counted();
    let session = initialize(&h.router, "2025-11-25").await;
    post(
        &h.router,
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
    )
    .await
    .events()
    .await;
    settled(&h, &store).await;
    let body =
        json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe", "params": {"uri": 5}});
    let events = post(&h.router, Some(&session), body).await.events().await;
    let received = messages(&events);
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(received[0]["error"]["code"], -32601, "{received:?}");
    let counts = settled(&h, &store).await;
    assert_eq!(writes(&counts), vec![(Op::Commit, 1)], "{counts:?}");
}

/// D6: a re-sent request id (legacy) is found by the conflict of its alias inside the
/// first batch: that refused batch is the re-send's only write (no stream of its own, no
/// stream to close again), and it gets the one outcome of the run the id started.
#[tokio::test]
async fn d6_resent_request_id_writes_nothing_of_its_own_and_gets_the_one_outcome() {
    let (h, store) = counted();
    let session = initialize(&h.router, "2025-11-25").await;
    post(
        &h.router,
        Some(&session),
        call(1, "echo", json!({"text": "warm"})),
    )
    .await
    .events()
    .await;
    settled(&h, &store).await;
    let (router, header) = (h.router.clone(), session.clone());
    let first = tokio::spawn(async move {
        post(
            &router,
            Some(&header),
            call(2, "slow", json!({"ms": HANDLER_MS})),
        )
        .await
        .events()
        .await
    });
    eventually("the run is journaled", async || journaled(&store).await).await;
    store.hook().take();
    let again = post(
        &h.router,
        Some(&session),
        call(2, "slow", json!({"ms": HANDLER_MS})),
    )
    .await;
    let counts = store.hook().take();
    assert_eq!(
        writes(&counts),
        vec![(Op::Commit, 1)],
        "the re-send's refused batch only: {counts:?}"
    );
    let (first, again) = (
        messages(&first.await.unwrap()),
        messages(&again.events().await),
    );
    assert_eq!(first, again, "one outcome for both");
    assert_eq!(
        first.last().unwrap()["result"]["content"][0]["text"],
        "done"
    );
    settled(&h, &store).await;
    assert!(
        store
            .inner()
            .list_records(RecordKind::Run, "", 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Write-through tails (issue 10, item 3): the worker that commits a request's events hands
/// them to the request's own response in memory. A journaled `tools/call` (legacy, with its
/// priming event and progress and log messages) is streamed without one read of the
/// store's event log, and so is a modern one; D1 holds all the same (commit_gate.rs).
#[tokio::test]
async fn write_through_a_call_is_streamed_without_reading_the_log() {
    let (h, store) = counted();
    let session = initialize(&h.router, "2025-11-25").await;
    post(
        &h.router,
        Some(&session),
        call(1, "echo", json!({"text": "warm"})),
    )
    .await
    .events()
    .await;
    settled(&h, &store).await;
    let mut body = call(2, "chatty", json!({"count": 3}));
    body["params"]["_meta"] = json!({"progressToken": "p"});
    let events = post(&h.router, Some(&session), body).await.events().await;
    let received = messages(&events);
    assert_eq!(
        received.last().unwrap()["result"]["content"][0]["text"],
        "3",
        "{received:?}"
    );
    assert!(
        received.len() >= 4,
        "the progress and log messages came too: {received:?}"
    );
    let counts = settled(&h, &store).await;
    assert_eq!(
        counts.get(&Op::ReadAfter),
        None,
        "the worker that committed the events read none back: {counts:?}"
    );

    let answer = modern_call(&h.router, 3, "echo", json!({"text": "modern"})).await;
    assert_eq!(answer["result"]["content"][0]["text"], "modern");
    let counts = settled(&h, &store).await;
    assert_eq!(counts.get(&Op::ReadAfter), None, "modern: {counts:?}");
}

/// A resume with `Last-Event-ID` reads the store (D3): what came after that id is replayed
/// from the log, on this worker too.
#[tokio::test]
async fn write_through_a_resume_reads_the_store() {
    let (h, store) = counted();
    let session = initialize(&h.router, "2025-11-25").await;
    let events = post(
        &h.router,
        Some(&session),
        call(1, "echo", json!({"text": "again"})),
    )
    .await
    .events()
    .await;
    let priming = events[0].0.clone().unwrap();
    settled(&h, &store).await;
    let mut resumed = support::open_get(&h.router, &session, Some(&priming)).await;
    resumed.until(|live| !live.messages().is_empty()).await;
    assert_eq!(
        resumed.messages()[0]["result"]["content"][0]["text"],
        "again"
    );
    assert!(
        store.hook().count(Op::ReadAfter) >= 1,
        "the resume read the log"
    );
}
