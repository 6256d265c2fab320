//! Unit tests of the GET streams' delivery hand-over (D3) against the memory store, with the
//! interleaving of the take-overs' compare-and-sets controlled by a store hook.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use durable_mcp_handler::McpHandler;
use durable_mcp_handler::rmcp::ServerHandler;
use durable_mcp_store::testing::{Hook, Op, Wrapped};
use durable_mcp_store::{
    Principal, SessionId, SessionRecord, Store, StoreResult, StreamId, now_ms,
};
use durable_mcp_store_memory::MemoryStore;
use futures::StreamExt;
use tokio::sync::Notify;

use super::{GetStream, GetStreamSettings};
use crate::{Engine, EngineOptions};

#[derive(Clone)]
struct Nothing;

impl ServerHandler for Nothing {}

/// Holds the first session update after [`arm`](Self::arm) until [`release`](Self::release):
/// one GET stream's take-over waits before its compare-and-set while others go through.
#[derive(Default)]
struct HoldOneUpdate {
    armed: AtomicBool,
    held: Notify,
    released: Notify,
}

impl HoldOneUpdate {
    fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    fn release(&self) {
        self.released.notify_one();
    }
}

#[async_trait]
impl Hook for HoldOneUpdate {
    async fn before(&self, op: Op) -> StoreResult<()> {
        if op == Op::UpdateSession && self.armed.swap(false, Ordering::SeqCst) {
            self.held.notify_one();
            self.released.notified().await;
        }
        Ok(())
    }
}

/// Far longer than the tests wait: no stream is rescued by its tick.
const SETTINGS: GetStreamSettings = GetStreamSettings {
    tick: Duration::from_secs(60),
    max_per_session: 4,
};

/// Delivery must not wait for a tick: well under one.
const PROMPT: Duration = Duration::from_millis(500);

struct Fixture {
    engine: Engine,
    hook: Arc<Wrapped<HoldOneUpdate>>,
    session: SessionRecord,
}

async fn fixture() -> Fixture {
    let hook = Arc::new(Wrapped::new(
        Arc::new(MemoryStore::new()),
        HoldOneUpdate::default(),
    ));
    let store: Arc<dyn Store> = hook.clone();
    let engine = Engine::new(
        store.clone(),
        McpHandler::new(Nothing),
        EngineOptions::default(),
    );
    let id = SessionId::random();
    let standalone = StreamId::random();
    let principal = Principal::anonymous();
    let session = SessionRecord {
        id,
        principal,
        // Before 2025-11-25: no priming event, so each GET yields only the session's messages.
        protocol_version: "2025-06-18".into(),
        client: serde_json::json!({}),
        log_level: None,
        subscriptions: Default::default(),
        state: Default::default(),
        standalone_stream: standalone,
        created_at_ms: now_ms(),
        last_seen_ms: now_ms(),
        delivery: Some(Default::default()),
    };
    // Creates its standalone stream too.
    store.create_session(session.clone()).await.unwrap();
    Fixture {
        engine,
        hook,
        session,
    }
}

/// The next message on either stream within [`PROMPT`]: `0` for the first, `1` for the second.
async fn next_on_either(a: &mut GetStream, b: &mut GetStream) -> Option<(usize, String)> {
    let next = async {
        tokio::select! {
            Some(Ok(event)) = a.events.next() => Some((0, event.data)),
            Some(Ok(event)) = b.events.next() => Some((1, event.data)),
            else => None,
        }
    };
    tokio::time::timeout(PROMPT, next).await.ok().flatten()
}

/// D3: two GET streams opened a moment apart on one session, the older one's take-over
/// committing after the newer one's. The newer stream delivers at once, the older stays
/// idle: a message reaches exactly one of them without waiting for a tick.
#[tokio::test]
async fn d3_a_get_opened_during_anothers_take_over_delivers_at_once() {
    let f = fixture().await;
    f.hook.hook().arm();
    let older = tokio::spawn({
        let (engine, session) = (f.engine.clone(), f.session.clone());
        async move { engine.open_get_stream(&session, None, SETTINGS).await }
    });
    // The older stream's compare-and-set waits at the hook; the newer one's goes through.
    tokio::time::timeout(Duration::from_secs(5), f.hook.hook().held.notified())
        .await
        .expect("the older take-over reached the store");
    let mut newer = f
        .engine
        .open_get_stream(&f.session, None, SETTINGS)
        .await
        .unwrap();
    f.hook.hook().release();
    let mut older = older.await.unwrap().unwrap();

    for n in 0..3 {
        f.engine
            .requests()
            .append(&f.session.standalone_stream, format!("message {n}"), false)
            .await
            .unwrap();
        let (on, data) = next_on_either(&mut older, &mut newer)
            .await
            .unwrap_or_else(|| panic!("message {n} reached no GET stream within {PROMPT:?}"));
        assert_eq!(
            (on, data),
            (1, format!("message {n}")),
            "the newer GET stream delivers"
        );
    }
    assert!(
        next_on_either(&mut older, &mut newer).await.is_none(),
        "each message on one stream only"
    );
}

/// D3: when the delivering GET stream closes, the other one of the session on this worker
/// takes over at once and receives what is committed next.
#[tokio::test]
async fn d3_closing_the_delivering_get_hands_over_at_once() {
    let f = fixture().await;
    let mut older = f
        .engine
        .open_get_stream(&f.session, None, SETTINGS)
        .await
        .unwrap();
    let newer = f
        .engine
        .open_get_stream(&f.session, None, SETTINGS)
        .await
        .unwrap();
    drop(newer);
    f.engine
        .requests()
        .append(
            &f.session.standalone_stream,
            "after the hand-over".into(),
            false,
        )
        .await
        .unwrap();
    let event = tokio::time::timeout(PROMPT, older.events.next())
        .await
        .expect("delivered within a moment")
        .unwrap()
        .unwrap();
    assert_eq!(event.data, "after the hand-over");
}
