//! Tests against a real Redis at `REDIS_URL` (default `redis://127.0.0.1:6379`). Each test
//! gets a fresh random key prefix and deletes its keys when its store is dropped. Without a
//! reachable Redis the tests print `skipped: ...` and pass, except in CI
//! (`durable_mcp_store::in_ci`), where they fail.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use durable_mcp_store::contract::{WAKE_WINDOW, events_after_wake};
use durable_mcp_store::{
    EventId, Expect, Principal, PruneReport, Record, RecordKind, Retention, SessionChange,
    SessionId, SessionRecord, Store, StoreError, StoreResult, StreamId, StreamOwner, StreamRead,
    WakeUps, WriteBatch,
};
use futures::StreamExt;

use super::*;

mod private_server;
use private_server::PrivateServer;

/// The same contract over TLS, against the private server of `scripts/tls-services.sh`.
mod tls;

/// The same contract on a Redis Cluster, the one of `scripts/redis-cluster.sh`.
mod cluster;

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// The variable `name` (a server of `scripts/tls-services.sh` or `scripts/redis-cluster.sh`),
/// or `None`: the test skips outside CI and fails in CI.
fn service_var(name: &str) -> Option<String> {
    match std::env::var(name) {
        Ok(value) if !value.is_empty() => Some(value),
        _ => {
            assert!(
                !durable_mcp_store::in_ci(),
                "CI is set and {name} is not: run scripts/tls-services.sh and scripts/redis-cluster.sh start, and source their env files"
            );
            eprintln!(
                "skipped: {name} is not set (scripts/tls-services.sh start, scripts/redis-cluster.sh start; source their env files)"
            );
            None
        }
    }
}

fn fresh_prefix() -> String {
    format!("dmcptest-{}", &SessionId::random().as_str()[..12])
}

/// Open a store on `prefix`, or skip (outside CI) when Redis is not reachable.
async fn open_with(prefix: &str, tweak: impl FnOnce(&mut RedisOptions)) -> Option<RedisStore> {
    open_at(&redis_url(), prefix, tweak).await
}

/// [`open_with`] on the server at `url`.
async fn open_at(
    url: &str,
    prefix: &str,
    tweak: impl FnOnce(&mut RedisOptions),
) -> Option<RedisStore> {
    let mut options = RedisOptions::from_url(url).expect("the test's Redis URL parses");
    let url = redact(url);
    options.prefix = prefix.to_owned();
    tweak(&mut options);
    match RedisStore::open(options).await {
        Ok(store) => Some(store),
        Err(error) if durable_mcp_store::in_ci() => {
            panic!("Redis not reachable at {url} (CI is set, so this fails): {error}")
        }
        Err(error) => {
            eprintln!("skipped: Redis not reachable at {url}: {error}");
            None
        }
    }
}

/// A store that deletes every key of its prefix when dropped.
struct Scoped {
    store: RedisStore,
}

impl Drop for Scoped {
    fn drop(&mut self) {
        cleanup_at(&self.store.shared.options);
    }
}

/// Delete the keys of one test prefix on `REDIS_URL` (blocking; test teardown only).
fn cleanup(prefix: &str) {
    let mut options = RedisOptions::from_url(&redis_url()).expect("REDIS_URL parses");
    options.prefix = prefix.to_owned();
    cleanup_at(&options);
}

/// Delete the keys of the prefix of `options` on its server (or cluster).
fn cleanup_at(options: &RedisOptions) {
    let (prefix, options) = (options.prefix.clone(), options.clone());
    let run = move || -> redis::RedisResult<()> {
        let keys_and_delete =
            |conn: &mut dyn redis::ConnectionLike, pattern: String| -> redis::RedisResult<()> {
                let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(conn)?;
                for chunk in keys.chunks(500) {
                    redis::cmd("DEL").arg(chunk).exec(conn)?;
                }
                Ok(())
            };
        match &options.cluster {
            // Every key of a cluster prefix is in the slot of `{prefix}`.
            Some(nodes) => {
                let mut conn =
                    redis::cluster::ClusterClient::new(nodes.clone())?.get_connection()?;
                keys_and_delete(&mut conn, format!("{{{prefix}}}:*"))
            }
            None => {
                let Ok(client) = crate::client(&options) else {
                    return Ok(());
                };
                let mut conn = client.get_connection_with_timeout(Duration::from_secs(2))?;
                keys_and_delete(&mut conn, format!("{prefix}:*"))
            }
        }
    };
    // A plain thread: the blocking client must not run on a runtime worker.
    let _ = std::thread::spawn(run).join();
}

#[async_trait]
impl Store for Scoped {
    fn backend(&self) -> &'static str {
        self.store.backend()
    }
    async fn create_session(&self, record: SessionRecord) -> StoreResult<()> {
        self.store.create_session(record).await
    }
    async fn load_session(&self, p: &Principal, id: &SessionId) -> StoreResult<SessionRecord> {
        self.store.load_session(p, id).await
    }
    async fn update_session(
        &self,
        p: &Principal,
        id: &SessionId,
        change: SessionChange,
    ) -> StoreResult<SessionRecord> {
        self.store.update_session(p, id, change).await
    }
    async fn end_session(&self, p: &Principal, id: &SessionId) -> StoreResult<bool> {
        self.store.end_session(p, id).await
    }
    async fn list_sessions(
        &self,
        p: Option<&Principal>,
        limit: usize,
    ) -> StoreResult<Vec<SessionRecord>> {
        self.store.list_sessions(p, limit).await
    }
    async fn create_stream(&self, id: &StreamId, owner: &StreamOwner) -> StoreResult<()> {
        self.store.create_stream(id, owner).await
    }
    async fn append(&self, stream: &StreamId, data: String, close: bool) -> StoreResult<EventId> {
        self.store.append(stream, data, close).await
    }
    async fn stream_owner(&self, stream: &StreamId) -> StoreResult<StreamOwner> {
        self.store.stream_owner(stream).await
    }
    async fn read_after(
        &self,
        stream: &StreamId,
        after: u64,
        limit: usize,
    ) -> StoreResult<StreamRead> {
        self.store.read_after(stream, after, limit).await
    }
    async fn prune(&self, retention: &Retention, now_ms: u64) -> StoreResult<PruneReport> {
        self.store.prune(retention, now_ms).await
    }
    async fn prune_preview(&self, retention: &Retention, now_ms: u64) -> StoreResult<PruneReport> {
        self.store.prune_preview(retention, now_ms).await
    }
    async fn put_record(
        &self,
        kind: RecordKind,
        key: &str,
        value: String,
        expires_at_ms: Option<u64>,
        expect: Expect,
    ) -> StoreResult<u64> {
        self.store
            .put_record(kind, key, value, expires_at_ms, expect)
            .await
    }
    async fn get_record(&self, kind: RecordKind, key: &str) -> StoreResult<Option<Record>> {
        self.store.get_record(kind, key).await
    }
    async fn list_records(
        &self,
        kind: RecordKind,
        prefix: &str,
        limit: usize,
    ) -> StoreResult<Vec<Record>> {
        self.store.list_records(kind, prefix, limit).await
    }
    async fn delete_records(&self, kind: RecordKind, prefix: &str) -> StoreResult<u64> {
        self.store.delete_records(kind, prefix).await
    }
    async fn commit(
        &self,
        batch: durable_mcp_store::WriteBatch,
    ) -> StoreResult<durable_mcp_store::BatchOutcome> {
        self.store.commit(batch).await
    }
    async fn list_streams(
        &self,
        after: Option<&StreamId>,
        limit: usize,
    ) -> StoreResult<Vec<durable_mcp_store::StreamInfo>> {
        self.store.list_streams(after, limit).await
    }
    async fn stream_info(&self, stream: &StreamId) -> StoreResult<durable_mcp_store::StreamInfo> {
        self.store.stream_info(stream).await
    }
    async fn status(&self) -> StoreResult<durable_mcp_store::StoreStatus> {
        self.store.status().await
    }
    async fn watch(&self, stream: &StreamId) -> StoreResult<WakeUps> {
        self.store.watch(stream).await
    }
}

async fn fresh() -> Option<Arc<dyn Store>> {
    let store = open_with(&fresh_prefix(), |_| {}).await?;
    Some(Arc::new(Scoped { store }))
}

/// Two workers on one fresh prefix; the watcher's fallback tick is ten minutes, so only the
/// pub/sub message can wake it in time.
async fn pair() -> Option<(Arc<dyn Store>, Arc<dyn Store>)> {
    let (writer, watcher) = two_workers(Duration::from_secs(600)).await?;
    Some((Arc::new(watcher), Arc::new(writer)))
}

durable_mcp_store::store_contract_tests!(fresh(), pair = pair());

/// Two workers on one prefix (each with its own connections and listener); the keys go
/// when the returned guard drops. `tick` is the fallback tick of the *second* worker.
async fn two_workers(tick: Duration) -> Option<(Scoped, RedisStore)> {
    let prefix = fresh_prefix();
    let a = open_with(&prefix, |_| {}).await?;
    let b = open_with(&prefix, |o| o.wake_tick = tick).await?;
    Some((Scoped { store: a }, b))
}

fn anonymous() -> StreamOwner {
    StreamOwner {
        principal: Principal::anonymous(),
        session: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d3_another_worker_is_woken_through_pubsub() {
    // A tick far longer than the deadline: only the pub/sub message can wake in time.
    let Some((a, b)) = two_workers(Duration::from_secs(60)).await else {
        return;
    };
    let stream = StreamId::random();
    a.create_stream(&stream, &anonymous()).await.unwrap();
    let mut wake = b.watch(&stream).await.unwrap();
    a.append(&stream, "hello".into(), false).await.unwrap();
    let events = events_after_wake(&mut wake, &b, &stream, 0, WAKE_WINDOW).await;
    assert_eq!(
        events.iter().map(|e| e.data.as_str()).collect::<Vec<_>>(),
        ["hello"],
        "woken by pub/sub"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d5_session_end_ends_tails_on_another_worker() {
    let Some((a, b)) = two_workers(Duration::from_secs(60)).await else {
        return;
    };
    let who = Principal::new("alice");
    let record = durable_mcp_store::contract::session(&who);
    a.create_session(record.clone()).await.unwrap();
    let mut wake = b.watch(&record.standalone_stream).await.unwrap();
    assert!(a.end_session(&who, &record.id).await.unwrap());
    let next = tokio::time::timeout(Duration::from_secs(2), wake.next())
        .await
        .expect("tail ends in time");
    assert!(next.is_none(), "the deletion message ends the wake-ups");
    assert!(matches!(
        b.read_after(&record.standalone_stream, 0, 1).await,
        Err(StoreError::NotFound { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_concurrent_appenders_on_two_workers_are_gap_free() {
    let Some((a, b)) = two_workers(Duration::from_secs(1)).await else {
        return;
    };
    let a = Arc::new(a);
    let b = Arc::new(b);
    let stream = StreamId::random();
    a.create_stream(&stream, &anonymous()).await.unwrap();
    let mut tasks = Vec::new();
    for w in 0..6 {
        let store: Arc<dyn Store> = if w % 2 == 0 { a.clone() } else { b.clone() };
        let stream = stream.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..40 {
                ids.push(
                    store
                        .append(&stream, format!("w{w}-{i}"), false)
                        .await
                        .unwrap()
                        .seq,
                );
            }
            ids
        }));
    }
    let mut seqs = Vec::new();
    for task in tasks {
        let mine = task.await.unwrap();
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "one writer's ids increase"
        );
        seqs.extend(mine);
    }
    seqs.sort_unstable();
    assert_eq!(
        seqs,
        (1..=240).collect::<Vec<u64>>(),
        "no gap, no duplicate"
    );
    let read = b.read_after(&stream, 0, usize::MAX).await.unwrap();
    assert_eq!(read.events.len(), 240);
    for w in 0..6 {
        let mine: Vec<&str> = read
            .events
            .iter()
            .map(|e| e.data.as_str())
            .filter(|d| d.starts_with(&format!("w{w}-")))
            .collect();
        assert_eq!(
            mine,
            (0..40).map(|i| format!("w{w}-{i}")).collect::<Vec<_>>()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d3_tail_on_another_worker_sees_every_event_once_in_order() {
    let Some((a, b)) = two_workers(Duration::from_millis(200)).await else {
        return;
    };
    let stream = StreamId::random();
    a.create_stream(&stream, &anonymous()).await.unwrap();
    // Subscribe before reading, then read after each wake-up: what the engine's tail does.
    let mut wake = b.watch(&stream).await.unwrap();
    let s = stream.clone();
    let writer = tokio::spawn(async move {
        for i in 1..=200 {
            a.append(&s, i.to_string(), i == 200).await.unwrap();
            if i % 7 == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        a
    });
    let (mut after, mut seen) = (0, Vec::new());
    loop {
        let read = b.read_after(&stream, after, 16).await.unwrap();
        for event in &read.events {
            seen.push(event.data.clone());
            after = event.id.seq;
        }
        if read.finished {
            break;
        }
        if read.events.is_empty() {
            tokio::time::timeout(Duration::from_secs(5), wake.next())
                .await
                .expect("woken")
                .expect("not ended");
        }
    }
    drop(writer.await.unwrap());
    assert_eq!(seen, (1..=200).map(|i| i.to_string()).collect::<Vec<_>>());
}

/// The hash tag of a key, as Redis Cluster computes it.
fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{')
        && let Some(len) = key[open + 1..].find('}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// CRC16/XMODEM modulo 16384: Redis Cluster's key slot.
fn hash_slot(key: &str) -> u16 {
    let mut crc: u16 = 0;
    for byte in hash_tag(key).bytes() {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

async fn keys_of(prefix: &str) -> Vec<String> {
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// The milliseconds key `key` has left to live (`-1`: no expiry, `-2`: no such key).
async fn pttl(key: &str) -> i64 {
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// D14: every key of a stream written by the request path's batches (created with its first
/// event, then answered and closed) expires: a session's stream after the idle TTL, a closed
/// sessionless stream after the closed-stream TTL, whichever batch set it.
#[tokio::test]
async fn d14_every_key_of_a_batch_written_stream_expires() {
    let prefix = fresh_prefix();
    let (idle, closed) = (Duration::from_secs(600), Duration::from_secs(30));
    let Some(store) = open_with(&prefix, |o| {
        o.session_idle_ttl = idle;
        o.closed_stream_ttl = closed;
    })
    .await
    else {
        return;
    };
    let store = Scoped { store };
    let who = Principal::anonymous();
    let record = durable_mcp_store::contract::session(&who);
    store.create_session(record.clone()).await.unwrap();
    let in_session = StreamId::random();
    let sessionless = StreamId::random();
    let owned = StreamOwner {
        principal: who.clone(),
        session: Some(record.id.clone()),
    };
    let opened = |id: &StreamId, owner: StreamOwner| {
        WriteBatch::new()
            .create_stream(id.clone(), owner)
            .append(id.clone(), "priming")
    };
    store.commit(opened(&in_session, owned)).await.unwrap();
    store
        .commit(opened(&sessionless, anonymous()))
        .await
        .unwrap();
    let keys = &store.store.shared.keys;
    let session_tag = Keys::session_tag(&record.id);
    let sessionless_tag = Keys::stream_tag(&sessionless);
    // Layout 2: the events are in the meta hash, so a stream has no events key.
    for key in [
        keys.stream_events(&session_tag, &in_session),
        keys.stream_events(&sessionless_tag, &sessionless),
    ] {
        assert_eq!(pttl(&key).await, -2, "{key} should not exist");
    }
    let mut all = vec![
        keys.stream_meta(&session_tag, &in_session),
        keys.stream_index(&in_session),
        keys.stream_meta(&sessionless_tag, &sessionless),
    ];
    for key in &all {
        let left = pttl(key).await;
        assert!(
            left > idle.as_millis() as i64 - 60_000 && left <= idle.as_millis() as i64,
            "{key} after the first batch: {left} ms"
        );
    }
    for id in [&in_session, &sessionless] {
        store
            .commit(
                WriteBatch::new()
                    .append(id.clone(), "answer")
                    .close(id.clone()),
            )
            .await
            .unwrap();
    }
    for key in &all[..2] {
        let left = pttl(key).await;
        assert!(
            left > idle.as_millis() as i64 - 60_000 && left <= idle.as_millis() as i64,
            "{key} closed in its session: {left} ms"
        );
    }
    for key in &all[2..] {
        let left = pttl(key).await;
        assert!(
            left > 0 && left <= closed.as_millis() as i64,
            "{key} closed without a session: {left} ms"
        );
    }
    // Created and closed in one batch: the closed-stream TTL at once.
    let quick = StreamId::random();
    store
        .commit(opened(&quick, anonymous()).close(quick.clone()))
        .await
        .unwrap();
    let quick_tag = Keys::stream_tag(&quick);
    all = vec![keys.stream_meta(&quick_tag, &quick)];
    for key in &all {
        let left = pttl(key).await;
        assert!(
            left > 0 && left <= closed.as_millis() as i64,
            "{key} created and closed in one batch: {left} ms"
        );
    }
}

#[tokio::test]
async fn keys_of_one_session_share_one_hash_slot() {
    assert_eq!(
        hash_slot("123456789"),
        12739,
        "the CRC16 of the Redis Cluster spec"
    );
    assert_eq!(
        hash_slot("{user1000}.following"),
        hash_slot("{user1000}.followers")
    );
    let prefix = fresh_prefix();
    let Some(store) = open_with(&prefix, |_| {}).await else {
        return;
    };
    let store = Scoped { store };
    let who = Principal::anonymous();
    let record = durable_mcp_store::contract::session(&who);
    store.create_session(record.clone()).await.unwrap();
    let request = StreamId::random();
    store
        .create_stream(
            &request,
            &StreamOwner {
                principal: who.clone(),
                session: Some(record.id.clone()),
            },
        )
        .await
        .unwrap();
    store.append(&request, "a".into(), true).await.unwrap();
    store
        .append(&record.standalone_stream, "b".into(), false)
        .await
        .unwrap();
    let modern = StreamId::random();
    store.create_stream(&modern, &anonymous()).await.unwrap();
    store.append(&modern, "c".into(), false).await.unwrap();

    let keys = keys_of(&prefix).await;
    let session_tag = Keys::session_tag(&record.id);
    let session_keys: Vec<&String> = keys.iter().filter(|k| k.contains(&session_tag)).collect();
    // session, streams, open, and the meta hashes (with their events) of two streams.
    assert_eq!(session_keys.len(), 5, "{session_keys:?}");
    let keys_from_rust = [
        store.store.shared.keys.session(&record.id),
        store.store.shared.keys.stream_meta(&session_tag, &request),
    ];
    for key in &keys_from_rust {
        assert!(
            keys.contains(key),
            "Lua and Rust build the same names: {key} in {keys:?}"
        );
    }
    let slot = hash_slot(session_keys[0]);
    for key in &session_keys {
        assert_eq!(hash_tag(key), session_tag);
        assert_eq!(hash_slot(key), slot, "{key}");
    }
    let modern_keys: Vec<&String> = keys
        .iter()
        .filter(|k| k.contains(&format!("{{{}}}", Keys::stream_tag(&modern))))
        .collect();
    assert_eq!(modern_keys.len(), 1, "{modern_keys:?}");
    assert!(keys.contains(&store.store.shared.keys.stream_index(&request)));
    assert!(
        !keys.contains(&store.store.shared.keys.stream_index(&modern)),
        "sessionless streams need no index"
    );
}

#[tokio::test]
async fn d14_resume_from_a_pruned_event_is_a_named_error() {
    let Some(store) = open_with(&fresh_prefix(), |o| o.max_events_per_stream = Some(3)).await
    else {
        return;
    };
    let store = Scoped { store };
    let stream = StreamId::random();
    store.create_stream(&stream, &anonymous()).await.unwrap();
    for i in 1..=6 {
        store.append(&stream, format!("{i}"), false).await.unwrap();
    }
    let err = store.read_after(&stream, 1, 10).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Pruned {
                oldest_retained: 4,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains(&format!("{stream}_1")), "{err}");
    let read = store.read_after(&stream, 3, 10).await.unwrap();
    assert_eq!(
        read.events
            .iter()
            .map(|e| e.data.as_str())
            .collect::<Vec<_>>(),
        ["4", "5", "6"]
    );
    assert_eq!(read.events[0].id.seq, 4);
}

#[tokio::test]
async fn d15_open_with_a_bad_port_fails_fast_with_unavailable() {
    let started = Instant::now();
    let mut options = RedisOptions::from_url("redis://127.0.0.1:1").unwrap();
    options.connect_timeout = Duration::from_secs(1);
    let err = RedisStore::open(options).await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
}

#[tokio::test]
async fn d13_session_of_another_principal_is_not_found() {
    let Some(store) = open_with(&fresh_prefix(), |_| {}).await else {
        return;
    };
    let store = Scoped { store };
    let (alice, bob) = (Principal::new("alice"), Principal::new("bob"));
    let record = durable_mcp_store::contract::session(&alice);
    store.create_session(record.clone()).await.unwrap();
    let err = store
        .update_session(&bob, &record.id, SessionChange::Touch)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err}");
    assert!(!store.end_session(&bob, &record.id).await.unwrap());
    let foreign = StreamOwner {
        principal: bob.clone(),
        session: Some(record.id.clone()),
    };
    let err = store
        .create_stream(&StreamId::random(), &foreign)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::NotFound { .. }),
        "no stream in another principal's session: {err}"
    );
    assert!(
        store.load_session(&alice, &record.id).await.is_ok(),
        "bob's attempts changed nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_concurrent_updates_of_one_session_lose_nothing() {
    let Some((a, b)) = two_workers(Duration::from_secs(1)).await else {
        return;
    };
    let (a, b) = (Arc::new(a), Arc::new(b));
    let who = Principal::anonymous();
    let record = durable_mcp_store::contract::session(&who);
    a.create_session(record.clone()).await.unwrap();
    let mut tasks = Vec::new();
    for w in 0..4 {
        let store: Arc<dyn Store> = if w % 2 == 0 { a.clone() } else { b.clone() };
        let (who, id) = (who.clone(), record.id.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..10 {
                let change = SessionChange::SetState(
                    format!("w{w}-{i}"),
                    Some(serde_json::json!({"n": 12345678901234567_u64})),
                );
                store.update_session(&who, &id, change).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let loaded = b.load_session(&who, &record.id).await.unwrap();
    assert_eq!(loaded.state.len(), 40, "every update kept");
    assert_eq!(
        loaded.state["w3-9"],
        serde_json::json!({"n": 12345678901234567_u64}),
        "JSON numbers kept exactly"
    );
}

/// Two workers on `server`; the second only wakes through pub/sub (its tick is a minute).
async fn workers_on(server: &PrivateServer) -> (RedisStore, RedisStore) {
    let mut options = RedisOptions::from_url(&server.url()).unwrap();
    let a = RedisStore::open(options.clone()).await.unwrap();
    options.wake_tick = Duration::from_secs(60);
    (a, RedisStore::open(options).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d15_wake_up_subscription_reconnects_by_itself() {
    let Some(server) = PrivateServer::start() else {
        return;
    };
    let (a, b) = workers_on(&server).await;
    let killed: u64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut server.admin().await)
        .await
        .unwrap();
    assert_eq!(killed, 2, "both listeners' connections killed");
    server.wait_for_subscribers(2).await;
    let stream = StreamId::random();
    a.create_stream(&stream, &anonymous()).await.unwrap();
    let mut wake = b.watch(&stream).await.unwrap();
    a.append(&stream, "after reconnect".into(), false)
        .await
        .unwrap();
    let events = events_after_wake(&mut wake, &b, &stream, 0, WAKE_WINDOW).await;
    assert_eq!(
        events.iter().map(|e| e.data.as_str()).collect::<Vec<_>>(),
        ["after reconnect"],
        "woken through the new subscription"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d15_outage_fails_fast_and_recovers_by_itself() {
    let Some(server) = PrivateServer::start() else {
        return;
    };
    let port = server.port;
    let (a, b) = workers_on(&server).await;
    let stream = StreamId::random();
    a.create_stream(&stream, &anonymous()).await.unwrap();
    a.append(&stream, "before".into(), false).await.unwrap();

    drop(server);
    let started = Instant::now();
    let err = a.append(&stream, "during".into(), false).await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    let err = b.read_after(&stream, 0, 10).await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "failed fast: {:?}",
        started.elapsed()
    );

    let server = PrivateServer::start_on(port).expect("restart on the same port");
    let fresh = StreamId::random();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match a.create_stream(&fresh, &anonymous()).await {
            Ok(()) => break,
            Err(StoreError::Unavailable(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(other) => panic!("store did not recover: {other}"),
        }
    }
    // A server without persistence lost everything, as the crate docs say.
    assert!(matches!(
        a.read_after(&stream, 0, 10).await,
        Err(StoreError::NotFound { .. })
    ));
    // b's listener re-subscribed by itself, and is woken through pub/sub again.
    server.wait_for_subscribers(2).await;
    let mut wake = b.watch(&fresh).await.unwrap();
    a.append(&fresh, "after".into(), false).await.unwrap();
    let events = events_after_wake(&mut wake, &b, &fresh, 0, WAKE_WINDOW).await;
    assert_eq!(
        events.iter().map(|e| e.data.as_str()).collect::<Vec<_>>(),
        ["after"],
        "woken after the outage"
    );
}

#[tokio::test]
async fn record_keys_agree_and_prefixes_are_literal_and_bytewise() {
    let prefix = fresh_prefix();
    let Some(store) = open_with(&prefix, |_| {}).await else {
        return;
    };
    let store = Scoped { store };
    for key in ["a_1", "ab1", "a*", "a*x", "a[", "B", "a", "é"] {
        store
            .put_record(
                RecordKind::Alias,
                key,
                format!("\"{key}\""),
                None,
                Expect::Absent,
            )
            .await
            .unwrap();
    }
    store
        .put_record(
            RecordKind::Alias,
            "ttl",
            "1".into(),
            Some(durable_mcp_store::now_ms() + 60_000),
            Expect::Absent,
        )
        .await
        .unwrap();
    let keys = keys_of(&prefix).await;
    let rust = &store.store.shared.keys;
    for key in [
        rust.record(RecordKind::Alias, "a_1"),
        rust.records_index(RecordKind::Alias),
        rust.records_expiring(RecordKind::Alias),
    ] {
        assert!(
            keys.contains(&key),
            "Lua and Rust build the same names: {key} in {keys:?}"
        );
    }
    let listed = |records: Vec<Record>| records.into_iter().map(|r| r.key).collect::<Vec<_>>();
    assert_eq!(
        listed(
            store
                .list_records(RecordKind::Alias, "a_", 10)
                .await
                .unwrap()
        ),
        ["a_1"]
    );
    assert_eq!(
        listed(
            store
                .list_records(RecordKind::Alias, "a*", 10)
                .await
                .unwrap()
        ),
        ["a*", "a*x"]
    );
    assert_eq!(
        listed(store.list_records(RecordKind::Alias, "", 10).await.unwrap()),
        ["B", "a", "a*", "a*x", "a[", "a_1", "ab1", "ttl", "é"]
    );
    assert_eq!(
        store.delete_records(RecordKind::Alias, "a[").await.unwrap(),
        1
    );
    assert_eq!(
        store.delete_records(RecordKind::Alias, "a").await.unwrap(),
        5
    );
    assert_eq!(
        store.delete_records(RecordKind::Alias, "").await.unwrap(),
        3
    );
    assert_eq!(
        keys_of(&prefix).await,
        [format!("{prefix}:layout")],
        "records and both indexes are gone"
    );
}

#[tokio::test]
async fn long_listings_and_deletions_span_batches() {
    let Some(store) = open_with(&fresh_prefix(), |_| {}).await else {
        return;
    };
    let store = Scoped { store };
    let past = durable_mcp_store::now_ms() - 1;
    for i in 0..600 {
        // Every third record has expired already: the listing skips them, across batches.
        let expiry = (i % 3 == 0).then_some(past);
        store
            .put_record(
                RecordKind::Step,
                &format!("run/{i:04}"),
                i.to_string(),
                expiry,
                Expect::Absent,
            )
            .await
            .unwrap();
    }
    let all = store
        .list_records(RecordKind::Step, "run/", usize::MAX)
        .await
        .unwrap();
    let want: Vec<String> = (0..600)
        .filter(|i| i % 3 != 0)
        .map(|i| format!("run/{i:04}"))
        .collect();
    assert_eq!(all.iter().map(|r| r.key.clone()).collect::<Vec<_>>(), want);
    let some = store
        .list_records(RecordKind::Step, "run/", 300)
        .await
        .unwrap();
    assert_eq!(some.len(), 300);
    assert_eq!(some[299].key, want[299]);
    assert_eq!(
        store
            .delete_records(RecordKind::Step, "run/")
            .await
            .unwrap(),
        400
    );
    assert!(
        store
            .list_records(RecordKind::Step, "", 10)
            .await
            .unwrap()
            .is_empty()
    );
    // Redis dropped the expired ones at once and the listing took them out of the listing
    // index; prune finds them in the expiry index and counts each once.
    let report = store
        .prune(&Retention::default(), durable_mcp_store::now_ms())
        .await
        .unwrap();
    assert_eq!(report.records_expired, 200);
    let report = store
        .prune(&Retention::default(), durable_mcp_store::now_ms())
        .await
        .unwrap();
    assert_eq!(report.records_expired, 0);
}

#[tokio::test]
async fn prune_sweeps_records_redis_expired_by_itself() {
    let prefix = fresh_prefix();
    let Some(store) = open_with(&prefix, |_| {}).await else {
        return;
    };
    let store = Scoped { store };
    let soon = durable_mcp_store::now_ms() + 50;
    store
        .put_record(
            RecordKind::Task,
            "t1",
            "{}".into(),
            Some(soon),
            Expect::Absent,
        )
        .await
        .unwrap();
    store
        .put_record(
            RecordKind::Task,
            "t2",
            "{}".into(),
            Some(soon + 3_600_000),
            Expect::Absent,
        )
        .await
        .unwrap();
    // Renewed without an expiry: prune must leave it alone.
    store
        .put_record(
            RecordKind::Task,
            "t3",
            "{}".into(),
            Some(soon),
            Expect::Absent,
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .put_record(
                RecordKind::Task,
                "t3",
                "{}".into(),
                None,
                Expect::Version(1)
            )
            .await
            .unwrap(),
        2
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rust = &store.store.shared.keys;
    assert!(
        !keys_of(&prefix)
            .await
            .contains(&rust.record(RecordKind::Task, "t1")),
        "Redis expired it"
    );
    let report = store
        .prune(&Retention::default(), durable_mcp_store::now_ms())
        .await
        .unwrap();
    assert_eq!(report.records_expired, 1);
    let keys = keys_of(&prefix).await;
    assert!(keys.contains(&rust.record(RecordKind::Task, "t3")));
    let mut conn = store.store.shared.conn();
    let listed: Vec<String> = redis::cmd("ZRANGE")
        .arg(rust.records_index(RecordKind::Task))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(listed, ["t2", "t3"]);
    let expiring: Vec<String> = redis::cmd("ZRANGE")
        .arg(rust.records_expiring(RecordKind::Task))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(expiring, ["t2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d8_first_commit_wins_across_workers() {
    let Some((a, b)) = two_workers(Duration::from_secs(1)).await else {
        return;
    };
    durable_mcp_store::contract::d8_first_commit_wins_across_workers(&a, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d8_first_batch_wins_across_workers() {
    let Some((a, b)) = two_workers(Duration::from_secs(1)).await else {
        return;
    };
    durable_mcp_store::contract::d8_first_batch_wins_across_workers(&a, &b).await;
}

#[test]
fn urls_parse() {
    let o = RedisOptions::from_url("redis://127.0.0.1:6380/2?prefix=app:mcp&idle_ttl=60&closed_ttl=5&max_events=10&protocol=resp3").unwrap();
    assert_eq!(o.url, "redis://127.0.0.1:6380/2?protocol=resp3");
    assert_eq!(o.prefix, "app:mcp");
    assert_eq!(o.session_idle_ttl, Duration::from_secs(60));
    assert_eq!(o.closed_stream_ttl, Duration::from_secs(5));
    assert_eq!(o.max_events_per_stream, Some(10));
    let d = RedisOptions::from_url("redis://localhost").unwrap();
    assert_eq!(
        (d.url.as_str(), d.prefix.as_str()),
        ("redis://localhost", DEFAULT_PREFIX)
    );
    for bad in [
        "sqlite:x.db",
        "redis://h?bogus=1",
        "redis://h?prefix={x}",
        "redis://h?prefix=",
        "redis://h?idle_ttl=0",
        "redis://h?max_events=none",
    ] {
        assert!(RedisOptions::from_url(bad).is_err(), "{bad} parsed");
    }
    let secret = format!(
        "{:?}",
        RedisOptions::from_url("redis://user:hunter2@h:1").unwrap()
    );
    assert!(!secret.contains("hunter2"), "{secret}");
}

/// A batch writes a record from what its check read of the record's hash (no second read):
/// each move between "with an expiry" and "without" leaves the hash, its Redis expiry and
/// both indexes as a write outside a batch would, including for a key the batch writes
/// twice and for a record Redis has not dropped yet after it expired.
#[tokio::test]
async fn batch_record_writes_keep_expiry_and_indexes_exact() {
    let prefix = fresh_prefix();
    let Some(store) = open_with(&prefix, |_| {}).await else {
        return;
    };
    let _guard = Scoped {
        store: store.clone(),
    };
    let keys = &store.shared.keys;
    let mut conn = store.shared.conn();
    let later = durable_mcp_store::now_ms() + 3_600_000;
    let kind = RecordKind::Task;
    // a: expiring, renewed without an expiry; b: plain, given one; c: expiring, deleted;
    // d: written twice in one batch (with, then without an expiry); e: expired but not yet
    // dropped by Redis, replaced as new; f: expired and dropped by Redis, its index entries
    // not swept yet, written again without an expiry.
    store
        .put_record(kind, "a", "1".into(), Some(later), Expect::Absent)
        .await
        .unwrap();
    store
        .put_record(kind, "b", "1".into(), None, Expect::Absent)
        .await
        .unwrap();
    store
        .put_record(kind, "c", "1".into(), Some(later), Expect::Absent)
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(keys.record(kind, "e"))
        .arg("version")
        .arg(7)
        .arg("value")
        .arg("old")
        .arg("expires_at")
        .arg(1)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(keys.records_index(kind))
        .arg(0)
        .arg("e")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(keys.records_expiring(kind))
        .arg(1)
        .arg("e")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(keys.records_index(kind))
        .arg(0)
        .arg("f")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(keys.records_expiring(kind))
        .arg(1)
        .arg("f")
        .query_async(&mut conn)
        .await
        .unwrap();
    let batch = WriteBatch::new()
        .put_record(kind, "a", "2", None, Expect::Version(1))
        .put_record(kind, "b", "2", Some(later), Expect::Version(1))
        .delete_record(kind, "c", 1)
        .put_record(kind, "d", "1", Some(later), Expect::Absent)
        .put_record(kind, "d", "2", None, Expect::Version(1))
        .put_record(kind, "e", "new", None, Expect::Absent)
        .put_record(kind, "f", "new", None, Expect::Absent);
    let outcome = store.commit(batch).await.unwrap();
    let versions: Vec<_> = outcome.ops.iter().map(|op| format!("{op:?}")).collect();
    assert_eq!(
        versions,
        [
            "Put(2)",
            "Put(2)",
            "Deleted(1)",
            "Put(1)",
            "Put(2)",
            "Put(1)",
            "Put(1)"
        ]
    );
    for (key, value, version, expiry) in [
        ("a", "2", 2, None),
        ("b", "2", 2, Some(later)),
        ("d", "2", 2, None),
        ("e", "new", 1, None),
        ("f", "new", 1, None),
    ] {
        let record = store
            .get_record(kind, key)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{key} is there"));
        assert_eq!(
            (record.value.as_str(), record.version, record.expires_at_ms),
            (value, version, expiry),
            "{key}"
        );
        let ttl: i64 = redis::cmd("PTTL")
            .arg(keys.record(kind, key))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(ttl > 0, expiry.is_some(), "{key}: Redis expiry {ttl}");
    }
    assert!(store.get_record(kind, "c").await.unwrap().is_none());
    let listed: Vec<String> = redis::cmd("ZRANGE")
        .arg(keys.records_index(kind))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(listed, ["a", "b", "d", "e", "f"]);
    let expiring: Vec<String> = redis::cmd("ZRANGE")
        .arg(keys.records_expiring(kind))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    // `f`'s stale entry is prune's to sweep (it finds the record without an expiry).
    assert_eq!(expiring, ["f", "b"]);
    let report = store
        .prune(&Retention::default(), durable_mcp_store::now_ms())
        .await
        .unwrap();
    assert_eq!(
        report.records_expired, 0,
        "a renewed record is not counted as expired"
    );
    let expiring: Vec<String> = redis::cmd("ZRANGE")
        .arg(keys.records_expiring(kind))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(expiring, ["b"]);
    assert!(
        store.get_record(kind, "f").await.unwrap().is_some(),
        "prune left the renewed record"
    );
}

/// Run one command on a fresh connection (test set-up and inspection).
async fn raw<T: redis::FromRedisValue>(cmd: &mut redis::Cmd) -> T {
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    cmd.query_async(&mut conn).await.unwrap()
}

/// Whether Redis answers; if not, `open_with` has skipped the test (or failed it, in CI)
/// as every other test here, and the caller returns.
async fn reachable(prefix: &str) -> bool {
    let client = redis::Client::open(redis_url()).unwrap();
    if client.get_multiplexed_async_connection().await.is_ok() {
        return true;
    }
    let _ = open_with(prefix, |_| {}).await;
    false
}

/// Open a store on a prefix whose layout is set to `version` first (as an earlier release's
/// data, or an operator, leaves it).
async fn open_on_layout(
    prefix: &str,
    version: u64,
    tweak: impl FnOnce(&mut RedisOptions),
) -> Option<RedisStore> {
    if !reachable(prefix).await {
        return None;
    }
    let () = raw(redis::cmd("SET")
        .arg(format!("{prefix}:layout"))
        .arg(version))
    .await;
    open_with(prefix, tweak).await
}

/// The store contract, once more, on a prefix of layout 1 (events in Redis streams): what
/// this release keeps writing on a prefix an earlier release wrote, until it is moved on.
mod layout_1 {
    use super::*;

    async fn fresh() -> Option<Arc<dyn Store>> {
        let store = open_on_layout(&fresh_prefix(), 1, |_| {}).await?;
        Some(Arc::new(Scoped { store }))
    }

    async fn pair() -> Option<(Arc<dyn Store>, Arc<dyn Store>)> {
        let prefix = fresh_prefix();
        let writer = open_on_layout(&prefix, 1, |_| {}).await?;
        let watcher = open_with(&prefix, |o| o.wake_tick = Duration::from_secs(600)).await?;
        Some((Arc::new(watcher), Arc::new(Scoped { store: writer })))
    }

    durable_mcp_store::store_contract_tests!(fresh(), pair = pair());
}

#[tokio::test]
async fn a_new_prefix_gets_layout_2_and_a_new_stream_keeps_its_events_in_its_meta_hash() {
    let prefix = fresh_prefix();
    let Some(store) = open_with(&prefix, |_| {}).await else {
        return;
    };
    let store = Scoped { store };
    let layout: String = raw(redis::cmd("GET").arg(format!("{prefix}:layout"))).await;
    assert_eq!(layout, "2");
    let stream = StreamId::random();
    store
        .commit(
            WriteBatch::new()
                .create_stream(stream.clone(), anonymous())
                .append(stream.clone(), ""),
        )
        .await
        .unwrap();
    store
        .commit(
            WriteBatch::new()
                .append(stream.clone(), "answer")
                .close(stream.clone()),
        )
        .await
        .unwrap();
    let keys = &store.store.shared.keys;
    let tag = Keys::stream_tag(&stream);
    assert_eq!(
        pttl(&keys.stream_events(&tag, &stream)).await,
        -2,
        "no events key"
    );
    let fields: Vec<Option<String>> = raw(redis::cmd("HMGET")
        .arg(keys.stream_meta(&tag, &stream))
        .arg(&["1", "2", "inline"]))
    .await;
    assert_eq!(
        fields,
        [
            Some(String::new()),
            Some("answer".to_owned()),
            Some("1".to_owned())
        ]
    );
    let read = store.read_after(&stream, 0, 10).await.unwrap();
    assert_eq!(
        read.events
            .iter()
            .map(|e| e.data.as_str())
            .collect::<Vec<_>>(),
        ["", "answer"]
    );
    assert!(read.finished);
    // A request's retained stream: the listpack a Redis stream is given up front (4 KiB) is gone.
    let bytes: i64 = raw(redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(keys.stream_meta(&tag, &stream)))
    .await;
    assert!(bytes < 2_000, "{bytes} bytes for a closed two-event stream");
}

/// Appends committed together past `max_events`: the fields of events trimmed in the same
/// script are never written, those written before are deleted, reads start at the first kept.
#[tokio::test]
async fn d14_inline_events_trimmed_in_one_batch_leave_exactly_the_last_max() {
    let Some(store) = open_with(&fresh_prefix(), |o| o.max_events_per_stream = Some(2)).await
    else {
        return;
    };
    let store = Scoped { store };
    let stream = StreamId::random();
    store
        .commit(
            WriteBatch::new()
                .create_stream(stream.clone(), anonymous())
                .append(stream.clone(), "1")
                .append(stream.clone(), "2"),
        )
        .await
        .unwrap();
    let mut batch = WriteBatch::new();
    for i in 3..=6 {
        batch = batch.append(stream.clone(), i.to_string());
    }
    store.commit(batch).await.unwrap();
    let err = store.read_after(&stream, 3, 10).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Pruned {
                oldest_retained: 5,
                ..
            }
        ),
        "{err}"
    );
    let read = store.read_after(&stream, 4, 10).await.unwrap();
    assert_eq!(
        read.events
            .iter()
            .map(|e| (e.id.seq, e.data.as_str()))
            .collect::<Vec<_>>(),
        [(5, "5"), (6, "6")]
    );
    let keys = &store.store.shared.keys;
    let meta = keys.stream_meta(&Keys::stream_tag(&stream), &stream);
    let fields: Vec<String> = raw(redis::cmd("HKEYS").arg(&meta)).await;
    let mut events: Vec<&str> = fields
        .iter()
        .map(String::as_str)
        .filter(|f| f.parse::<u64>().is_ok())
        .collect();
    events.sort_unstable();
    assert_eq!(events, ["5", "6"], "{fields:?}");
}

/// A prefix an earlier release wrote gets layout 1: new streams keep the old layout, which
/// its workers can read. After the operator's `SET P:layout 2`, a worker opened then writes
/// new streams inline, and both kinds stay readable and appendable by either worker.
#[tokio::test]
async fn a_prefix_with_earlier_data_stays_on_layout_1_until_moved_on_and_both_layouts_read_and_append()
 {
    let prefix = fresh_prefix();
    let Some(first) = open_with(&prefix, |_| {}).await else {
        return;
    };
    let who = Principal::anonymous();
    let record = durable_mcp_store::contract::session(&who);
    first.create_session(record.clone()).await.unwrap();
    // As an earlier release leaves a prefix: data, no layout key, and no worker of this
    // release subscribed (a running one would make it a wiped prefix of this release).
    drop(first);
    let marker = layout::marker_channel(&format!("{prefix}:wake"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while raw::<(String, u64)>(redis::cmd("PUBSUB").arg("NUMSUB").arg(&marker))
        .await
        .1
        > 0
    {
        assert!(
            Instant::now() < deadline,
            "the first worker's subscription ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let () = raw(redis::cmd("DEL").arg(format!("{prefix}:layout"))).await;
    let old_worker = open_with(&prefix, |_| {}).await.unwrap();
    let _guard = Scoped {
        store: old_worker.clone(),
    };
    let layout: String = raw(redis::cmd("GET").arg(format!("{prefix}:layout"))).await;
    assert_eq!(layout, "1");
    let owner = StreamOwner {
        principal: who.clone(),
        session: Some(record.id.clone()),
    };
    let old = StreamId::random();
    old_worker
        .commit(
            WriteBatch::new()
                .create_stream(old.clone(), owner.clone())
                .append(old.clone(), "o1"),
        )
        .await
        .unwrap();
    let keys = &old_worker.shared.keys;
    let tag = Keys::session_tag(&record.id);
    let entries: i64 = raw(redis::cmd("XLEN").arg(keys.stream_events(&tag, &old))).await;
    assert_eq!(
        entries, 1,
        "layout 1 writes a Redis stream (Lua and Rust agree on its name)"
    );

    let () = raw(redis::cmd("SET").arg(format!("{prefix}:layout")).arg(2)).await;
    let new_worker = open_with(&prefix, |_| {}).await.unwrap();
    let new = StreamId::random();
    new_worker
        .commit(
            WriteBatch::new()
                .create_stream(new.clone(), owner.clone())
                .append(new.clone(), "n1"),
        )
        .await
        .unwrap();
    assert_eq!(
        pttl(&keys.stream_events(&tag, &new)).await,
        -2,
        "layout 2 writes no events key"
    );
    // Each worker appends to the other's stream, in that stream's own layout.
    new_worker
        .commit(
            WriteBatch::new()
                .append(old.clone(), "o2")
                .close(old.clone()),
        )
        .await
        .unwrap();
    old_worker
        .commit(
            WriteBatch::new()
                .append(new.clone(), "n2")
                .close(new.clone()),
        )
        .await
        .unwrap();
    let entries: i64 = raw(redis::cmd("XLEN").arg(keys.stream_events(&tag, &old))).await;
    assert_eq!(entries, 2);
    for worker in [&old_worker, &new_worker] {
        for (stream, want) in [(&old, ["o1", "o2"]), (&new, ["n1", "n2"])] {
            let read = worker.read_after(stream, 0, 10).await.unwrap();
            assert_eq!(
                read.events
                    .iter()
                    .map(|e| e.data.as_str())
                    .collect::<Vec<_>>(),
                want
            );
            assert!(read.finished);
        }
    }
    // Ending the session deletes both kinds of stream.
    assert!(new_worker.end_session(&who, &record.id).await.unwrap());
    for stream in [&old, &new] {
        assert!(matches!(
            old_worker.read_after(stream, 0, 10).await,
            Err(StoreError::NotFound { .. })
        ));
        assert_eq!(pttl(&keys.stream_meta(&tag, stream)).await, -2);
        assert_eq!(pttl(&keys.stream_events(&tag, stream)).await, -2);
    }
}

/// A worker that is already running follows the operator's move of its prefix, on and
/// back, at its next check of the layout key, and not before.
#[tokio::test]
async fn a_running_worker_follows_a_layout_move_both_ways_at_its_next_check() {
    let prefix = fresh_prefix();
    let Some(worker) = open_on_layout(&prefix, 1, |_| {}).await else {
        return;
    };
    let worker = Scoped { store: worker };
    let shared = &worker.store.shared;
    // Whether a new stream of this worker keeps its events inline (layout 2) or in a Redis
    // stream of their own (layout 1).
    let inline = async || {
        let stream = StreamId::random();
        worker
            .commit(
                WriteBatch::new()
                    .create_stream(stream.clone(), anonymous())
                    .append(stream.clone(), "e"),
            )
            .await
            .unwrap();
        let tag = Keys::stream_tag(&stream);
        let fields: i64 = raw(redis::cmd("HEXISTS")
            .arg(shared.keys.stream_meta(&tag, &stream))
            .arg("1"))
        .await;
        let entries: i64 =
            raw(redis::cmd("XLEN").arg(shared.keys.stream_events(&tag, &stream))).await;
        assert_eq!(fields + entries, 1, "event 1 is in exactly one place");
        fields == 1
    };
    assert!(!inline().await, "opened on layout 1");
    let () = raw(redis::cmd("SET").arg(format!("{prefix}:layout")).arg(2)).await;
    assert!(
        !inline().await,
        "the move reaches a running worker at its next check, not at once"
    );
    shared.layout.check_at_next_use();
    assert!(inline().await, "moved on to layout 2");
    let () = raw(redis::cmd("SET").arg(format!("{prefix}:layout")).arg(1)).await;
    shared.layout.check_at_next_use();
    assert!(
        !inline().await,
        "moved back to layout 1 (before a downgrade)"
    );
    // An unknown value keeps what the worker had (and the next check reads it again).
    let () = raw(redis::cmd("SET")
        .arg(format!("{prefix}:layout"))
        .arg("bogus"))
    .await;
    shared.layout.check_at_next_use();
    assert!(!inline().await);
}

#[tokio::test]
async fn a_layout_newer_than_this_release_is_refused_at_open() {
    let prefix = fresh_prefix();
    if !reachable(&prefix).await {
        return;
    }
    let () = raw(redis::cmd("SET").arg(format!("{prefix}:layout")).arg(3)).await;
    let mut options = RedisOptions::from_url(&redis_url()).unwrap();
    options.prefix = prefix.clone();
    let err = RedisStore::open(options).await.unwrap_err();
    cleanup(&prefix);
    assert!(matches!(err, StoreError::Incompatible(_)), "{err}");
    assert!(err.to_string().contains("layout"), "{err}");
}

/// A prefix without data but with a listener on its wake-up channel: a worker of an earlier
/// release is running (this release sets the key before it subscribes), so layout 1.
#[tokio::test]
async fn a_prefix_an_earlier_release_listens_on_gets_layout_1() {
    let prefix = fresh_prefix();
    if !reachable(&prefix).await {
        return;
    }
    let mut earlier = redis::Client::open(redis_url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    earlier.subscribe(format!("{prefix}:wake")).await.unwrap();
    let Some(store) = open_with(&prefix, |_| {}).await else {
        return;
    };
    let _store = Scoped { store };
    let layout: String = raw(redis::cmd("GET").arg(format!("{prefix}:layout"))).await;
    assert_eq!(layout, "1");
}

/// A Redis without persistence restarted (or flushed) under running workers: the prefix is
/// empty, then written again by them. A new worker gets the current layout (the running
/// ones are this release, by the marker channel), with no warning of an earlier release's
/// data; a running worker puts the key back at its next check.
#[tokio::test]
async fn a_wiped_prefix_gets_the_current_layout_back() {
    let prefix = fresh_prefix();
    let Some(running) = open_with(&prefix, |_| {}).await else {
        return;
    };
    let running = Scoped { store: running };
    cleanup(&prefix);
    running
        .create_stream(&StreamId::random(), &anonymous())
        .await
        .unwrap();
    running
        .put_record(RecordKind::Run, "r", "{}".into(), None, Expect::Absent)
        .await
        .unwrap();
    let Some(new) = open_with(&prefix, |_| {}).await else {
        return;
    };
    let layout: String = raw(redis::cmd("GET").arg(format!("{prefix}:layout"))).await;
    assert_eq!(
        layout,
        layout::CURRENT.to_string(),
        "data written since the wipe is this release's"
    );
    assert!(new.shared.layout.inline_now());

    cleanup(&prefix);
    running.store.shared.layout.check_at_next_use();
    running
        .create_stream(&StreamId::random(), &anonymous())
        .await
        .unwrap();
    let layout: Option<String> = raw(redis::cmd("GET").arg(format!("{prefix}:layout"))).await;
    assert_eq!(
        layout.as_deref(),
        Some("2"),
        "the running worker put the key back"
    );
}

/// D3: an inline event missing from the middle of the log (damage outside this crate) is a
/// named corruption, never a gap handed out nor an outage to retry.
#[tokio::test]
async fn d3_a_missing_inline_event_is_corrupt() {
    let Some(store) = open_with(&fresh_prefix(), |_| {}).await else {
        return;
    };
    let store = Scoped { store };
    let stream = StreamId::random();
    store
        .commit(
            WriteBatch::new()
                .create_stream(stream.clone(), anonymous())
                .append(stream.clone(), "a")
                .append(stream.clone(), "b"),
        )
        .await
        .unwrap();
    let meta = store
        .store
        .shared
        .keys
        .stream_meta(&Keys::stream_tag(&stream), &stream);
    let removed: i64 = raw(redis::cmd("HDEL").arg(&meta).arg("1")).await;
    assert_eq!(removed, 1);
    let err = store.read_after(&stream, 0, 10).await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
    assert!(err.to_string().contains("event 1 is missing"), "{err}");
}
