//! D1 over a real socket: with the store's commits held or failed on demand (the `testing`
//! feature's gated store), no byte of an event reaches the client before its commit, and an
//! event whose commit failed never reaches it.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::sync::Arc;
use std::time::Duration;

use durable_mcp_engine::EngineOptions;
use durable_mcp_http::HttpConfig;
use durable_mcp_store::EventId;
use durable_mcp_store::testing::{GatedStore, Op};
use durable_mcp_store_memory::MemoryStore;
use serde_json::{Value, json};
use support::{Harness, call, harness_on, initialize, parse_sse};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

const DEADLINE: Duration = Duration::from_secs(10);
/// How long a client keeps reading to show that nothing arrives. A server that wrote before
/// committing would have written by the time the commit reaches the gate; this only covers
/// the loopback's delivery.
const QUIET: Duration = Duration::from_millis(300);

/// A server on a free loopback port over a gated memory store, with one legacy session
/// (2025-03-26: no priming events, so a request's first event is its response).
async fn gated_server() -> (Harness, Arc<GatedStore>, std::net::SocketAddr, String) {
    let store = Arc::new(GatedStore::gated(Arc::new(MemoryStore::new())));
    let h = harness_on(
        store.clone(),
        HttpConfig::default(),
        EngineOptions::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(durable_mcp_http::serve(
        listener,
        h.transport.clone(),
        std::future::pending(),
    ));
    let session = initialize(&h.router, "2025-03-26").await;
    (h, store, addr, session)
}

/// Send one POST on a new connection (closed after the response); the bytes received so
/// far are published on the returned channel as they arrive.
async fn post_raw(
    addr: std::net::SocketAddr,
    session: &str,
    body: &Value,
) -> watch::Receiver<(Vec<u8>, bool)> {
    let body = body.to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nhost: localhost\r\naccept: application/json, text/event-stream\r\ncontent-type: application/json\r\nmcp-session-id: {session}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(request.as_bytes()).await.unwrap();
    let (tx, rx) = watch::channel((Vec::new(), false));
    tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => tx.send_modify(|(bytes, _)| bytes.extend_from_slice(&buf[..n])),
            }
        }
        tx.send_modify(|(_, ended)| *ended = true);
    });
    rx
}

/// The whole response once the server closed the connection: status line and SSE events.
async fn response(
    mut rx: watch::Receiver<(Vec<u8>, bool)>,
) -> (String, Vec<(Option<String>, String)>) {
    let (bytes, _) = tokio::time::timeout(DEADLINE, rx.wait_for(|(_, ended)| *ended))
        .await
        .expect("response ends in time")
        .unwrap()
        .clone();
    let text = String::from_utf8(bytes).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete head");
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    (
        head.lines().next().unwrap_or_default().to_owned(),
        parse_sse(&body),
    )
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        body = &rest[n + 2..];
    }
    out
}

/// Every event id the client saw names a committed event holding exactly what it was sent.
async fn assert_committed(store: &GatedStore, events: &[(Option<String>, String)]) {
    for (id, data) in events {
        let id: EventId = id
            .as_deref()
            .expect("every event has an id")
            .parse()
            .unwrap();
        let read = store
            .inner()
            .read_after(&id.stream, id.seq - 1, 1)
            .await
            .unwrap();
        assert_eq!(
            read.events.first().map(|e| (&e.id, e.data.as_str())),
            Some((&id, data.as_str())),
            "{id} is committed"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_no_byte_of_an_event_is_sent_while_its_commit_is_held() {
    let (_server, store, addr, session) = gated_server().await;
    // A journaled call commits its outcome in one batch (with the close and the end of its
    // journal entry): the gate holds commits once the first one (its stream and journal
    // entry) is done and its handler runs, well before the handler's sleep ends.
    let mut rx = post_raw(addr, &session, &call(1, "slow", json!({"ms": 1_000}))).await;
    support::eventually("the run is journaled", async || {
        !store
            .inner()
            .list_records(durable_mcp_store::RecordKind::Run, "", 10)
            .await
            .unwrap()
            .is_empty()
    })
    .await;
    store.hook().hold(Op::Commit);
    // The handler ran and its response is at the gate: its commit has not happened.
    tokio::time::timeout(DEADLINE, store.hook().until_waiting(Op::Commit, 1))
        .await
        .expect("the response's commit is held");
    // The response head may be out (legacy streams open at once); no event may be.
    let event_bytes = |bytes: &[u8]| {
        let text = String::from_utf8_lossy(bytes);
        text.contains("done") || text.contains("data:") || text.contains("\nid:")
    };
    let early = tokio::time::timeout(
        QUIET,
        rx.wait_for(|(bytes, ended)| *ended || event_bytes(bytes)),
    )
    .await
    .is_ok();
    let (sent, _) = rx.borrow().clone();
    assert!(
        !early && !event_bytes(&sent),
        "an event reached the socket while its commit was held: {:?}",
        String::from_utf8_lossy(&sent)
    );

    store.hook().release(Op::Commit);
    let (status, events) = response(rx).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    let messages: Vec<Value> = events
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(messages[0]["result"]["content"][0]["text"], "done");
    assert_committed(&store, &events).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_an_event_whose_commit_fails_never_reaches_the_client() {
    let (_h, store, addr, session) = gated_server().await;
    // `tools/list` is not journaled: when its response cannot be committed, the engine
    // closes the stream with an error instead (regression: it closed it with the empty
    // event of a client's cancellation, as if the client had asked for no answer).
    // Its response is its stream's first commit (the stream with the response and the close).
    store.hook().fail(Op::Commit, 1);
    let rx = post_raw(
        addr,
        &session,
        &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}),
    )
    .await;
    let (status, events) = response(rx).await;
    assert_eq!(
        store.hook().failed(Op::Commit),
        1,
        "the response's commit was failed"
    );
    assert_eq!(status, "HTTP/1.1 200 OK");
    let messages: Vec<Value> = events
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    assert!(
        messages.iter().all(|m| m.get("result").is_none()),
        "the uncommitted tool list was sent: {messages:?}"
    );
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(messages[0]["id"], 7);
    assert_eq!(
        messages[0]["error"]["message"],
        "the request failed before its result could be committed"
    );
    assert_committed(&store, &events).await;
}

/// D1/D15: a step whose commit fails on an unavailable store (a full disk, a failover) does
/// not end its run with that error: the outcome the handler built on the failure is not
/// committed, the run is retried from its journal once the store answers, and its step
/// body runs again with the same idempotency key. The client gets the real result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d15_a_step_commit_failure_is_retried_not_answered() {
    let (h, store, addr, session) = gated_server().await;
    // The worker's recovery pass, as `serve` runs it in the background.
    let engine = h.engine.clone();
    let recovery = tokio::spawn(async move {
        loop {
            let _ = engine.recover().await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    // A first call creates the requestState key ring (a record of its own).
    let (_, warm_up) =
        response(post_raw(addr, &session, &call(8, "echo", json!({"text": "hi"}))).await).await;
    assert!(
        warm_up.iter().any(|(_, data)| data.contains("hi")),
        "{warm_up:?}"
    );
    store.hook().fail(Op::PutRecord, 1);
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "stepped", "arguments": {"tag": "d15-step"}}});
    let rx = post_raw(addr, &session, &call).await;
    let (status, events) = response(rx).await;
    assert_eq!(
        store.hook().failed(Op::PutRecord),
        1,
        "the step's commit was failed"
    );
    assert_eq!(status, "HTTP/1.1 200 OK");
    let messages: Vec<Value> = events
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    let answers: Vec<&Value> = messages.iter().filter(|m| m["id"] == 9).collect();
    assert_eq!(answers.len(), 1, "{messages:?}");
    let runs = support::step_runs("d15-step");
    assert_eq!(
        runs.len(),
        2,
        "the step body ran again after its commit failed: {runs:?}"
    );
    assert_eq!(runs[0], runs[1], "with the same idempotency key");
    assert_eq!(
        answers[0]["result"]["content"][0]["text"],
        format!("stepped {}", runs[0]),
        "the real result, not the store error: {messages:?}"
    );
    assert_committed(&store, &events).await;
    recovery.abort();
}
