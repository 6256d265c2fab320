//! The journal component on its own, against the memory store: who may take a run over,
//! fencing, cancellation marks and the outcome's one batch (D6, D7, D11).

use std::sync::Arc;
use std::time::Duration;

use durable_mcp_protocol::McpVersion;
use durable_mcp_store::{Expect, Principal, RecordKind, Store, StoreError, StreamId};
use durable_mcp_store_memory::MemoryStore;
use serde_json::json;

use super::{Held, Journal};
use crate::events::Events;
use crate::records::{Era, RunRecord};
use crate::{Caller, EngineError, Request};

const LEASE: Duration = Duration::from_secs(5);

fn caller() -> Caller {
    Caller {
        principal: Principal::new("alice"),
        era: Era::Modern,
        session: None,
        protocol_version: McpVersion::MODERN,
        log_level: None,
        auth: None,
        trace: None,
        http: None,
    }
}

fn journal(store: &Arc<dyn Store>, worker: &str) -> Journal {
    Journal::new(Events::new(store.clone()), worker.to_owned(), LEASE)
}

/// A run journaled by `journal` on a fresh stream, as the request path writes it; its
/// key and the record as stored.
async fn journaled(store: &Arc<dyn Store>, journal: &Journal) -> (String, RunRecord) {
    let stream = StreamId::random();
    store
        .create_stream(&stream, &caller().stream_owner())
        .await
        .unwrap();
    let message = json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "x"}});
    let request = Request::new(json!(1), message.as_object().cloned().unwrap());
    let record = RunRecord::new(journal, &caller(), request, &stream);
    let key = stream.to_string();
    store
        .put_record(
            RecordKind::Run,
            &key,
            record.encode().unwrap(),
            None,
            Expect::Absent,
        )
        .await
        .unwrap();
    (key, record)
}

async fn entry(store: &Arc<dyn Store>, key: &str) -> durable_mcp_store::Record {
    store
        .get_record(RecordKind::Run, key)
        .await
        .unwrap()
        .expect("journaled")
}

/// D7: a live lease of another worker is left alone; once it ran out, one worker takes the
/// run over, as its next attempt.
#[tokio::test]
async fn d7_a_live_lease_is_left_and_an_expired_one_is_taken_over_once() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, b, c) = (
        journal(&store, "a"),
        journal(&store, "b"),
        journal(&store, "c"),
    );
    let (key, mut record) = journaled(&store, &a).await;
    assert!(b.claim(entry(&store, &key).await).await.unwrap().is_none());

    let version = entry(&store, &key).await.version;
    record.lease_until_ms = 0;
    store
        .put_record(
            RecordKind::Run,
            &key,
            record.encode().unwrap(),
            None,
            Expect::Version(version),
        )
        .await
        .unwrap();
    let expired = entry(&store, &key).await;
    let held = b
        .claim(expired.clone())
        .await
        .unwrap()
        .expect("b takes it over");
    assert_eq!((held.record.owner.as_str(), held.record.attempt), ("b", 2));
    assert!(
        c.claim(expired).await.unwrap().is_none(),
        "one worker wins the take-over"
    );
    held.stop_heartbeat();
}

/// D7: a worker restarted under the same id takes its own runs over at once, without
/// waiting for their leases; another worker does not.
#[tokio::test]
async fn d7_a_restarted_worker_takes_its_own_runs_at_once() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let before = journal(&store, "a");
    let (key, _) = journaled(&store, &before).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (restarted, other) = (journal(&store, "a"), journal(&store, "b"));
    assert!(
        other
            .claim(entry(&store, &key).await)
            .await
            .unwrap()
            .is_none()
    );
    let held = restarted
        .claim(entry(&store, &key).await)
        .await
        .unwrap()
        .expect("its own run");
    assert_eq!(held.record.attempt, 2);
    held.stop_heartbeat();
}

/// D6: a re-sent request adopts a run given back (no owner) at once, which recovery's
/// claim leaves until its retry time.
#[tokio::test]
async fn d6_a_given_back_run_is_adopted_by_a_resend_but_not_claimed_early() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, b) = (journal(&store, "a"), journal(&store, "b"));
    let (key, mut record) = journaled(&store, &a).await;
    let version = entry(&store, &key).await.version;
    record.owner = String::new();
    record.lease_until_ms = durable_mcp_store::now_ms() + 60_000;
    store
        .put_record(
            RecordKind::Run,
            &key,
            record.encode().unwrap(),
            None,
            Expect::Version(version),
        )
        .await
        .unwrap();
    assert!(b.claim(entry(&store, &key).await).await.unwrap().is_none());
    let held = b
        .adopt(entry(&store, &key).await)
        .await
        .unwrap()
        .expect("adopted");
    assert_eq!(held.record.owner, "b");
    held.stop_heartbeat();
}

/// D7: the outcome, the close and the record's removal are one batch, fenced by the
/// version this worker holds: after a take-over, the old holder commits nothing.
#[tokio::test]
async fn d7_an_outcome_commits_with_the_records_removal_and_a_fenced_holder_commits_nothing() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, b) = (journal(&store, "a"), journal(&store, "b"));
    let (key, record) = journaled(&store, &a).await;
    let stream = record.stream.clone();
    let version = entry(&store, &key).await.version;
    let mut stale = Held::start(&a, key.clone(), record.clone(), version);
    // Another worker moves the record on (a take-over).
    let mut moved = record;
    moved.owner = "b".into();
    store
        .put_record(
            RecordKind::Run,
            &key,
            moved.encode().unwrap(),
            None,
            Expect::Version(version),
        )
        .await
        .unwrap();
    let outcome = json!({"jsonrpc": "2.0", "id": 1, "result": {}});
    let refused = stale.commit_outcome(&a, &stream, &outcome).await;
    assert!(
        matches!(refused, Err(EngineError::Store(ref e)) if matches!(e.refusal(), StoreError::Conflict { .. })),
        "{refused:?}"
    );
    assert!(!store.read_after(&stream, 0, 10).await.unwrap().finished);

    let current = entry(&store, &key).await;
    let mut held = Held::start(&b, key.clone(), moved, current.version);
    held.commit_outcome(&b, &stream, &outcome).await.unwrap();
    let read = store.read_after(&stream, 0, 10).await.unwrap();
    assert!(read.finished && read.events.len() == 1);
    assert!(
        store
            .get_record(RecordKind::Run, &key)
            .await
            .unwrap()
            .is_none()
    );
    stale.stop_heartbeat();
}

/// D11: a cancellation recorded on one worker is seen by any other.
#[tokio::test]
async fn d11_a_cancellation_mark_is_seen_by_every_worker() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, b) = (journal(&store, "a"), journal(&store, "b"));
    let (key, _) = journaled(&store, &a).await;
    assert!(!b.cancelled_elsewhere(&key).await.unwrap());
    a.cancel_elsewhere_by_run(&key).await.unwrap();
    a.cancel_elsewhere_by_run(&key).await.unwrap();
    assert!(b.cancelled_elsewhere(&key).await.unwrap());
}

/// D7: every held run is renewed by one shared heartbeat, which stops once none is held.
#[tokio::test(start_paused = true)]
async fn d7_one_heartbeat_renews_every_held_run_and_stops_with_the_last() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let a = journal(&store, "a");
    let mut held = Vec::new();
    for _ in 0..3 {
        let (key, record) = journaled(&store, &a).await;
        let version = entry(&store, &key).await.version;
        held.push((key.clone(), version, Held::start(&a, key, record, version)));
    }
    assert_eq!((a.heartbeats().held(), a.heartbeats().ticking()), (3, true));
    tokio::time::sleep(LEASE / 3 + Duration::from_millis(100)).await;
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    for (key, version, _) in &held {
        assert!(entry(&store, key).await.version > *version, "renewed");
    }
    for (_, _, run) in held {
        run.stop_heartbeat();
    }
    tokio::time::sleep(LEASE / 3 + Duration::from_millis(100)).await;
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    assert!(!a.heartbeats().ticking());
}
