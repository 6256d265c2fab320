//! The contract test suite: cases written once, run against every backend by
//! [`store_contract_tests!`](crate::store_contract_tests). Each case is named after the
//! guarantee of `docs/guarantees.md` it checks and gets a fresh store from the backend's factory.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

mod batch;
mod ops;

use crate::testing::incompressible;
pub use batch::{
    d1_batch_commits_every_op_and_returns_ids_and_versions,
    d3_batch_is_visible_to_readers_all_at_once, d3_batch_wakes_tails_after_commit,
    d8_first_batch_wins_across_workers, d15_concurrent_batches_stand_or_fall_alone,
    d15_grouped_refusals_of_every_kind_fail_only_their_batch,
    d15_refused_batch_op_leaves_nothing_of_the_batch,
};
pub use ops::{
    d3_import_keeps_event_ids_and_resumes_exactly,
    d14_import_of_a_trimmed_stream_keeps_its_start_or_is_refused,
    ops_list_streams_pages_in_id_order, ops_status_reports_current_schema_and_clock,
};

use crate::{
    EventId, Expect, Principal, RecordKind, Retention, SessionChange, SessionId, SessionRecord,
    Store, StoreError, StoredEvent, StreamId, StreamOwner, WakeUps, WriteBatch, now_ms,
};

/// A new session record for `principal`.
pub fn session(principal: &Principal) -> SessionRecord {
    SessionRecord {
        id: SessionId::random(),
        principal: principal.clone(),
        protocol_version: "2025-11-25".into(),
        client: serde_json::json!({"clientInfo": {"name": "contract", "version": "1"}}),
        log_level: None,
        subscriptions: BTreeSet::new(),
        state: Default::default(),
        standalone_stream: StreamId::random(),
        created_at_ms: now_ms(),
        last_seen_ms: now_ms(),
        delivery: None,
    }
}

async fn stream_with(store: &dyn Store, n: usize) -> StreamId {
    let stream = StreamId::random();
    let owner = StreamOwner {
        principal: Principal::anonymous(),
        session: None,
    };
    store
        .create_stream(&stream, &owner)
        .await
        .expect("create stream");
    for i in 1..=n {
        store
            .append(&stream, format!("e{i}"), false)
            .await
            .expect("append");
    }
    stream
}

/// D1/D2: appends get strictly increasing, distinct ids that name their stream.
pub async fn d2_append_ids_increase_and_name_stream(store: Arc<dyn Store>) {
    let stream = stream_with(&*store, 0).await;
    let mut last = 0;
    for i in 0..50 {
        let id = store
            .append(&stream, format!("{i}"), false)
            .await
            .expect("append");
        assert_eq!(id.stream, stream);
        assert_eq!(id.seq, last + 1, "no gap, no reuse");
        last = id.seq;
    }
}

/// D3: replay after every possible id yields exactly the suffix.
pub async fn d3_replay_after_every_id_is_exact_suffix(store: Arc<dyn Store>) {
    let n = 30;
    let stream = stream_with(&*store, n).await;
    for after in 0..=n as u64 {
        let read = store
            .read_after(&stream, after, usize::MAX)
            .await
            .expect("read");
        let seqs: Vec<u64> = read.events.iter().map(|e| e.id.seq).collect();
        let want: Vec<u64> = (after + 1..=n as u64).collect();
        assert_eq!(seqs, want, "after {after}");
        for e in &read.events {
            assert_eq!(e.data, format!("e{}", e.id.seq));
        }
        assert!(!read.finished);
    }
}

/// D3: a closing append finishes the stream; later appends are refused.
pub async fn d3_closed_stream_finishes_and_refuses_appends(store: Arc<dyn Store>) {
    let stream = stream_with(&*store, 2).await;
    let last = store
        .append(&stream, "final".into(), true)
        .await
        .expect("close");
    assert_eq!(last.seq, 3);
    let read = store.read_after(&stream, 1, 10).await.expect("read");
    assert!(read.finished);
    assert_eq!(read.events.len(), 2);
    let partial = store.read_after(&stream, 1, 1).await.expect("read");
    assert!(
        !partial.finished,
        "finished only when the read reaches the last event"
    );
    let err = store
        .append(&stream, "late".into(), false)
        .await
        .expect_err("append to a closed stream");
    assert!(matches!(err, StoreError::StreamClosed { .. }), "{err}");
}

/// How long a wake-up case waits for the wake-up an append must cause. The paired
/// handles a backend gives [`store_contract_tests!`](crate::store_contract_tests) must
/// re-read on their own (fallback tick, poll interval) far less often than this, so that
/// only the append's wake-up can pass the case.
pub const WAKE_WINDOW: Duration = Duration::from_secs(5);

/// Wait on `wake` until a read of `stream` through `store` after sequence `after` returns
/// events, and return them. Reads only after a wake-up (never before the first one), so a
/// store whose appends wake nothing fails here instead of being rescued by an early read.
///
/// # Panics
/// If the wake-ups end, or no wake-up within `within` is followed by a read with events:
/// this is a test helper and the panic is the test's failure.
pub async fn events_after_wake(
    wake: &mut WakeUps,
    store: &dyn Store,
    stream: &StreamId,
    after: u64,
    within: Duration,
) -> Vec<StoredEvent> {
    let deadline = tokio::time::Instant::now() + within;
    let mut wake_ups = 0;
    loop {
        match tokio::time::timeout_at(deadline, wake.next()).await {
            Err(_) => panic!(
                "no event after {after} on {stream} within {within:?} ({wake_ups} wake-ups without one)"
            ),
            Ok(None) => {
                panic!("the wake-ups of {stream} ended before an event after {after} arrived")
            }
            Ok(Some(())) => wake_ups += 1,
        }
        let read = store
            .read_after(stream, after, usize::MAX)
            .await
            .expect("read after a wake-up");
        if !read.events.is_empty() {
            return read.events;
        }
    }
}

/// D3: a tail subscribed on one handle is woken by an append through another handle on the
/// same store (for shared backends, another worker), within [`WAKE_WINDOW`], and the read
/// after the wake-up returns the appended event.
pub async fn d3_live_tail_wakes_on_append(watcher: Arc<dyn Store>, writer: Arc<dyn Store>) {
    let stream = stream_with(&*writer, 0).await;
    let mut wake = watcher.watch(&stream).await.expect("watch");
    let appended = writer
        .append(&stream, "x".into(), false)
        .await
        .expect("append");
    let events = events_after_wake(&mut wake, &*watcher, &stream, 0, WAKE_WINDOW).await;
    let got: Vec<(u64, &str)> = events.iter().map(|e| (e.id.seq, e.data.as_str())).collect();
    assert_eq!(
        got,
        [(appended.seq, "x")],
        "the appended event, read after its wake-up"
    );
    // And the next append, now that the tail has read, wakes it again.
    writer
        .append(&stream, "y".into(), true)
        .await
        .expect("second append");
    let events = events_after_wake(&mut wake, &*watcher, &stream, appended.seq, WAKE_WINDOW).await;
    assert_eq!(
        events.iter().map(|e| e.data.as_str()).collect::<Vec<_>>(),
        ["y"]
    );
}

/// Concurrent appenders on many streams: every stream ends up gap-free and duplicate-free.
pub async fn d2_concurrent_appenders_many_streams(store: Arc<dyn Store>) {
    let mut streams = Vec::new();
    for _ in 0..8 {
        streams.push(stream_with(&*store, 0).await);
    }
    let mut tasks = Vec::new();
    for w in 0..4 {
        for s in &streams {
            let store = store.clone();
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                let mut ids = Vec::new();
                for i in 0..25 {
                    ids.push(
                        store
                            .append(&s, format!("w{w}-{i}"), false)
                            .await
                            .expect("append"),
                    );
                }
                ids
            }));
        }
    }
    let mut all: Vec<EventId> = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("join"));
    }
    let unique: BTreeSet<String> = all.iter().map(|id| id.to_string()).collect();
    assert_eq!(unique.len(), all.len(), "no two appends share an id");
    for s in &streams {
        let read = store.read_after(s, 0, usize::MAX).await.expect("read");
        let seqs: Vec<u64> = read.events.iter().map(|e| e.id.seq).collect();
        assert_eq!(seqs, (1..=100).collect::<Vec<_>>());
        // Each writer's own events are in its order.
        for w in 0..4 {
            let mine: Vec<&str> = read
                .events
                .iter()
                .map(|e| e.data.as_str())
                .filter(|d| d.starts_with(&format!("w{w}-")))
                .collect();
            let want: Vec<String> = (0..25).map(|i| format!("w{w}-{i}")).collect();
            assert_eq!(mine, want);
        }
    }
}

/// D4/D5/D13: sessions load under their principal only; changes persist; ended is gone.
pub async fn d5_session_lifecycle_and_principal_isolation(store: Arc<dyn Store>) {
    let alice = Principal::new("alice");
    let bob = Principal::new("bob");
    let record = session(&alice);
    store.create_session(record.clone()).await.expect("create");
    let loaded = store.load_session(&alice, &record.id).await.expect("load");
    assert_eq!(loaded.client, record.client);
    assert!(matches!(
        store.load_session(&bob, &record.id).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(
        !store
            .end_session(&bob, &record.id)
            .await
            .expect("end as bob")
    );

    store
        .update_session(
            &alice,
            &record.id,
            SessionChange::SetLogLevel("debug".into()),
        )
        .await
        .expect("level");
    store
        .update_session(
            &alice,
            &record.id,
            SessionChange::Subscribe("test://a".into()),
        )
        .await
        .expect("sub");
    let loaded = store.load_session(&alice, &record.id).await.expect("load");
    assert_eq!(loaded.log_level.as_deref(), Some("debug"));
    assert!(loaded.subscriptions.contains("test://a"));

    let owner = store
        .stream_owner(&record.standalone_stream)
        .await
        .expect("owner");
    assert_eq!(owner.session.as_ref(), Some(&record.id));
    assert!(store.end_session(&alice, &record.id).await.expect("end"));
    assert!(matches!(
        store.load_session(&alice, &record.id).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store
            .update_session(&alice, &record.id, SessionChange::Touch)
            .await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(
        !store
            .end_session(&alice, &record.id)
            .await
            .expect("end twice")
    );
}

/// D5: ending a session ends its streams: reads fail and watchers stop.
pub async fn d5_session_end_closes_its_streams(store: Arc<dyn Store>) {
    let who = Principal::anonymous();
    let record = session(&who);
    store.create_session(record.clone()).await.expect("create");
    let stream = StreamId::random();
    store
        .create_stream(
            &stream,
            &StreamOwner {
                principal: who.clone(),
                session: Some(record.id.clone()),
            },
        )
        .await
        .expect("stream");
    store
        .append(&stream, "a".into(), false)
        .await
        .expect("append");
    let mut wake = store.watch(&stream).await.expect("watch");
    store.end_session(&who, &record.id).await.expect("end");
    // The watcher either ends or wakes; a read then says the stream is gone.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), wake.next()).await;
    assert!(store.read_after(&stream, 0, 10).await.is_err());
    assert!(store.append(&stream, "b".into(), false).await.is_err());
}

/// D5, D14: a session with more streams than one prune batch ends whole: afterwards none of
/// its streams can be read or appended to, and another session's streams are untouched.
pub async fn d5_ending_a_session_with_many_streams_removes_them_all(store: Arc<dyn Store>) {
    let who = Principal::new(format!("end-many-{}", StreamId::random()));
    let (ending, other) = (session(&who), session(&who));
    store.create_session(ending.clone()).await.expect("create");
    store
        .create_session(other.clone())
        .await
        .expect("create other");
    let count = 2 * crate::PRUNE_BATCH + 7;
    let mut streams = Vec::new();
    for chunk in 0..count.div_ceil(100) {
        let mut write = WriteBatch::new();
        for _ in 0..100.min(count - chunk * 100) {
            let stream = StreamId::random();
            let owner = StreamOwner {
                principal: who.clone(),
                session: Some(ending.id.clone()),
            };
            write = write
                .create_stream(stream.clone(), owner)
                .append(stream.clone(), "x");
            streams.push(stream);
        }
        store.commit(write).await.expect("batch");
    }
    let kept = StreamId::random();
    store
        .create_stream(
            &kept,
            &StreamOwner {
                principal: who.clone(),
                session: Some(other.id.clone()),
            },
        )
        .await
        .expect("other's stream");
    assert!(store.end_session(&who, &ending.id).await.expect("end"));
    assert!(
        !store
            .end_session(&who, &ending.id)
            .await
            .expect("end again"),
        "ended once"
    );
    for stream in &streams {
        assert!(
            matches!(
                store.read_after(stream, 0, 10).await,
                Err(StoreError::NotFound { .. })
            ),
            "stream {stream} left"
        );
        assert!(
            store.append(stream, "late".into(), false).await.is_err(),
            "stream {stream} took an append"
        );
    }
    assert!(
        store.read_after(&kept, 0, 10).await.is_ok(),
        "the other session's stream stays"
    );
    assert!(store.load_session(&who, &other.id).await.is_ok());
}

/// Bad ids: unknown streams are NotFound, not empty.
pub async fn d3_unknown_stream_is_not_found(store: Arc<dyn Store>) {
    let err = store
        .read_after(&StreamId::random(), 0, 10)
        .await
        .expect_err("unknown stream");
    assert!(matches!(err, StoreError::NotFound { .. }), "{err}");
    assert!(store.stream_owner(&StreamId::random()).await.is_err());
}

/// D14: prune ends idle sessions and deletes old finished streams, never open ones.
pub async fn d14_prune_respects_open_streams_and_idle_ttl(store: Arc<dyn Store>) {
    let who = Principal::new(format!("prune-{}", StreamId::random()));
    let mut idle = session(&who);
    idle.last_seen_ms = 1_000;
    let live = session(&who);
    store
        .create_session(idle.clone())
        .await
        .expect("create idle");
    store
        .create_session(live.clone())
        .await
        .expect("create live");
    // Touch `live` so its last use is now.
    store
        .update_session(&who, &live.id, SessionChange::Touch)
        .await
        .expect("touch");
    let owner = StreamOwner {
        principal: who.clone(),
        session: None,
    };
    let (finished, open) = (StreamId::random(), StreamId::random());
    for s in [&finished, &open] {
        store.create_stream(s, &owner).await.expect("stream");
        store.append(s, "x".into(), false).await.expect("append");
    }
    store
        .append(&finished, "done".into(), true)
        .await
        .expect("close");
    let now = now_ms();
    // Now: only the session idle since the epoch's first second ends.
    let report = store
        .prune(
            &crate::Retention {
                session_idle_ttl_ms: Some(3_600_000),
                max_stream_age_ms: Some(3_600_000),
            },
            now,
        )
        .await
        .expect("prune");
    assert_eq!(
        report,
        crate::PruneReport {
            sessions_ended: 1,
            streams_deleted: 0,
            records_expired: 0
        }
    );
    assert!(matches!(
        store.load_session(&who, &idle.id).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(store.load_session(&who, &live.id).await.is_ok());
    // Two hours later: the other session ends too, the finished stream goes, the open one
    // stays.
    let later = now + 2 * 3_600_000;
    let report = store
        .prune(
            &crate::Retention {
                session_idle_ttl_ms: Some(3_600_000),
                max_stream_age_ms: Some(3_600_000),
            },
            later,
        )
        .await
        .expect("prune");
    assert!(report.sessions_ended >= 1, "{report:?}");
    assert!(report.streams_deleted >= 1, "{report:?}");
    assert!(matches!(
        store.load_session(&who, &live.id).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(
        store.read_after(&finished, 0, 10).await.is_err(),
        "finished stream pruned"
    );
    assert_eq!(
        store
            .read_after(&open, 0, 10)
            .await
            .expect("open stream kept")
            .events
            .len(),
        1
    );
}

/// D14: a prune removes everything due, however much more than one batch
/// ([`crate::PRUNE_BATCH`]) of each kind that is: idle sessions, finished streams, expired
/// records; and nothing else.
pub async fn d14_prune_removes_more_than_a_batch_of_each(store: Arc<dyn Store>) {
    let who = Principal::new(format!("prune-many-{}", StreamId::random()));
    let owner = StreamOwner {
        principal: who.clone(),
        session: None,
    };
    let (batch, kept) = (crate::PRUNE_BATCH, StreamId::random());
    let now = now_ms();
    let mut sessions = Vec::new();
    for _ in 0..batch + 3 {
        let mut idle = session(&who);
        idle.last_seen_ms = 1_000;
        store
            .create_session(idle.clone())
            .await
            .expect("create idle");
        sessions.push(idle.id);
    }
    let mut streams = Vec::new();
    let prefix = format!("prune-many-{}/", StreamId::random());
    for chunk in 0..(2 * batch + 7).div_ceil(100) {
        let mut write = WriteBatch::new();
        for i in 0..100.min(2 * batch + 7 - chunk * 100) {
            let stream = StreamId::random();
            write = write
                .create_stream(stream.clone(), owner.clone())
                .append(stream.clone(), "done")
                .close(stream.clone());
            write = write.put_record(
                RecordKind::Step,
                format!("{prefix}{chunk}-{i}"),
                "x",
                Some(now + 3_600_000),
                Expect::Absent,
            );
            streams.push(stream);
        }
        store.commit(write).await.expect("batch");
    }
    store
        .create_stream(&kept, &owner)
        .await
        .expect("open stream");
    let later = now + 2 * 3_600_000;
    let report = store
        .prune(
            &crate::Retention {
                session_idle_ttl_ms: Some(3_600_000),
                max_stream_age_ms: Some(3_600_000),
            },
            later,
        )
        .await
        .expect("prune");
    assert!(report.sessions_ended >= (batch + 3) as u64, "{report:?}");
    assert!(
        report.streams_deleted >= (2 * batch + 7) as u64,
        "{report:?}"
    );
    assert!(
        report.records_expired >= (2 * batch + 7) as u64,
        "{report:?}"
    );
    for id in &sessions {
        assert!(
            matches!(
                store.load_session(&who, id).await,
                Err(StoreError::NotFound { .. })
            ),
            "session {id} left"
        );
    }
    for stream in &streams {
        assert!(
            matches!(
                store.read_after(stream, 0, 10).await,
                Err(StoreError::NotFound { .. })
            ),
            "stream {stream} left"
        );
    }
    assert!(
        store
            .list_records(RecordKind::Step, &prefix, 10)
            .await
            .expect("list")
            .is_empty(),
        "expired records left"
    );
    assert!(
        store.read_after(&kept, 0, 10).await.is_ok(),
        "the open stream stays"
    );
}

/// D14: `prune_preview` reports exactly what the next `prune` removes (idle sessions, old
/// finished streams, expired records), and removes nothing: afterwards everything it
/// counted is still there, and a second preview reports the same.
pub async fn d14_prune_preview_reports_what_prune_removes_and_changes_nothing(
    store: Arc<dyn Store>,
) {
    let who = Principal::new(format!("preview-{}", StreamId::random()));
    let start = now_ms();
    let (mut idle, mut idle_too, live) = (session(&who), session(&who), session(&who));
    idle.last_seen_ms = 1_000;
    idle_too.last_seen_ms = 1_000;
    for record in [&idle, &idle_too, &live] {
        store
            .create_session(record.clone())
            .await
            .expect("create session");
    }
    store
        .update_session(&who, &live.id, SessionChange::Touch)
        .await
        .expect("touch");
    // Finished streams: sessionless ones, one of the live session, one of an idle session
    // (which goes with it; each backend counts it as its prune does); and an open one.
    let owned = |session: Option<&SessionRecord>| StreamOwner {
        principal: who.clone(),
        session: session.map(|s| s.id.clone()),
    };
    let finished = [
        (StreamId::random(), owned(None)),
        (StreamId::random(), owned(None)),
        (StreamId::random(), owned(Some(&live))),
        (StreamId::random(), owned(Some(&idle))),
    ];
    for (stream, owner) in &finished {
        store.create_stream(stream, owner).await.expect("stream");
        store
            .append(stream, "done".into(), true)
            .await
            .expect("final event");
    }
    let open = StreamId::random();
    store
        .create_stream(&open, &owned(None))
        .await
        .expect("open");
    store
        .append(&open, "x".into(), false)
        .await
        .expect("append");
    let prefix = format!("preview-{}/", StreamId::random());
    let (expiring, gone, kept) = (
        format!("{prefix}expiring"),
        format!("{prefix}gone"),
        format!("{prefix}kept"),
    );
    for (key, expires_at) in [
        (&expiring, start + 3_600_000),
        (&gone, start.saturating_sub(1)),
        (&kept, start + 24 * 3_600_000),
    ] {
        store
            .put_record(
                RecordKind::Step,
                key,
                "x".into(),
                Some(expires_at),
                Expect::Absent,
            )
            .await
            .expect("put");
    }
    // Two hours on: the idle sessions are past a three-hour TTL, the live one is not; every
    // finished stream is past an hour; two records have expired.
    let retention = Retention {
        session_idle_ttl_ms: Some(3 * 3_600_000),
        max_stream_age_ms: Some(3_600_000),
    };
    let later = now_ms() + 2 * 3_600_000;
    let preview = store
        .prune_preview(&retention, later)
        .await
        .expect("preview");
    assert_eq!(
        (preview.sessions_ended, preview.records_expired),
        (2, 2),
        "{preview:?}"
    );
    assert!(preview.streams_deleted >= 3, "{preview:?}");
    assert_eq!(
        store
            .prune_preview(&retention, later)
            .await
            .expect("preview again"),
        preview,
        "a preview changes nothing a second one would see"
    );
    for id in [&idle.id, &idle_too.id, &live.id] {
        assert!(
            store.load_session(&who, id).await.is_ok(),
            "session {id} still there after the preview"
        );
    }
    for (stream, _) in &finished {
        assert_eq!(
            store
                .read_after(stream, 0, 10)
                .await
                .expect("stream still there after the preview")
                .events
                .len(),
            1
        );
    }
    assert!(
        store
            .get_record(RecordKind::Step, &expiring)
            .await
            .expect("get")
            .is_some(),
        "a record expiring later is still there after the preview"
    );

    let report = store.prune(&retention, later).await.expect("prune");
    assert_eq!(report, preview, "the preview is what prune removed");
    for id in [&idle.id, &idle_too.id] {
        assert!(matches!(
            store.load_session(&who, id).await,
            Err(StoreError::NotFound { .. })
        ));
    }
    for (stream, _) in &finished {
        assert!(
            matches!(
                store.read_after(stream, 0, 10).await,
                Err(StoreError::NotFound { .. })
            ),
            "stream {stream} left"
        );
    }
    assert!(store.load_session(&who, &live.id).await.is_ok());
    assert!(store.read_after(&open, 0, 10).await.is_ok(), "open stream");
    assert!(
        store
            .get_record(RecordKind::Step, &kept)
            .await
            .expect("get")
            .is_some()
    );
    assert!(
        store
            .get_record(RecordKind::Step, &expiring)
            .await
            .expect("get")
            .is_none()
    );
    assert_eq!(
        store
            .prune_preview(&retention, later)
            .await
            .expect("preview after"),
        crate::PruneReport::default(),
        "nothing is due after the prune"
    );
}

/// Sessions can be listed, per principal.
pub async fn d4_list_sessions_by_principal(store: Arc<dyn Store>) {
    let who = Principal::new(format!("list-{}", StreamId::random()));
    let a = session(&who);
    let b = session(&who);
    store.create_session(a.clone()).await.expect("a");
    store.create_session(b.clone()).await.expect("b");
    store
        .create_session(session(&Principal::new("someone-else")))
        .await
        .expect("c");
    let mine = store.list_sessions(Some(&who), 100).await.expect("list");
    let ids: BTreeSet<_> = mine.iter().map(|s| s.id.clone()).collect();
    assert_eq!(ids, BTreeSet::from([a.id, b.id]));
    assert!(store.list_sessions(None, 100).await.expect("all").len() >= 3);
}

/// D4: per-session state with compare-and-set: concurrent read-modify-write loops lose no
/// update.
pub async fn d4_session_state_compare_and_set_loses_no_update(store: Arc<dyn Store>) {
    let who = Principal::anonymous();
    let record = session(&who);
    store.create_session(record.clone()).await.expect("create");
    let stale = SessionChange::CompareAndSetState {
        key: "n".into(),
        expected: Some(serde_json::json!(5)),
        value: Some(serde_json::json!(6)),
    };
    assert!(matches!(
        store.update_session(&who, &record.id, stale).await,
        Err(StoreError::Conflict { .. })
    ));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (store, who, id) = (store.clone(), who.clone(), record.id.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                loop {
                    let current = store
                        .load_session(&who, &id)
                        .await
                        .expect("load")
                        .state
                        .get("n")
                        .cloned();
                    let next = current
                        .as_ref()
                        .and_then(serde_json::Value::as_u64)
                        .unwrap_or(0)
                        + 1;
                    let change = SessionChange::CompareAndSetState {
                        key: "n".into(),
                        expected: current,
                        value: Some(next.into()),
                    };
                    match store.update_session(&who, &id, change).await {
                        Ok(_) => break,
                        Err(StoreError::Conflict { .. }) => continue,
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("join");
    }
    let loaded = store.load_session(&who, &record.id).await.expect("load");
    assert_eq!(
        loaded.state.get("n"),
        Some(&serde_json::json!(80)),
        "80 increments, none lost"
    );
}

/// Streamable HTTP "Multiple Connections": GET streams racing to take a session's delivery
/// over from the same state (on any workers) cannot both win; the winner's state is stored.
pub async fn spec_session_delivery_compare_and_set_has_one_winner(store: Arc<dyn Store>) {
    let who = Principal::anonymous();
    let record = session(&who);
    store.create_session(record.clone()).await.expect("create");
    let mut tasks = Vec::new();
    for n in 0..8 {
        let (store, who, id) = (store.clone(), who.clone(), record.id.clone());
        tasks.push(tokio::spawn(async move {
            let value = crate::Delivery::default().held_by(&format!("get {n}"), 1);
            let change = SessionChange::CompareAndSetDelivery {
                expected: None,
                value,
            };
            match store.update_session(&who, &id, change).await {
                Ok(_) => Some(n),
                Err(StoreError::Conflict { .. }) => None,
                Err(e) => panic!("{e}"),
            }
        }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        winners.extend(t.await.expect("join"));
    }
    assert_eq!(
        winners.len(),
        1,
        "exactly one GET stream takes the delivery: {winners:?}"
    );
    let stored = store
        .load_session(&who, &record.id)
        .await
        .expect("load")
        .delivery
        .expect("stored");
    assert_eq!(stored.holder, Some(format!("get {}", winners[0])));
}

/// D8: `Expect::Absent` lets exactly one of many racing writers commit a key (first commit
/// wins), and everyone reads the winner's value afterwards.
pub async fn d8_first_commit_wins_among_racing_writers(store: Arc<dyn Store>) {
    let key = format!("{}/step-1", StreamId::random());
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (store, key) = (store.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            match store
                .put_record(
                    RecordKind::Step,
                    &key,
                    format!("\"writer {i}\""),
                    None,
                    Expect::Absent,
                )
                .await
            {
                Ok(version) => Some((i, version)),
                Err(StoreError::Conflict { .. }) => None,
                Err(e) => panic!("{e}"),
            }
        }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        if let Some(w) = t.await.expect("join") {
            winners.push(w);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one writer commits: {winners:?}");
    let (winner, version) = winners[0];
    assert_eq!(version, 1);
    let stored = store
        .get_record(RecordKind::Step, &key)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(stored.value, format!("\"writer {winner}\""));
    assert_eq!(stored.version, 1);
    assert_eq!(stored.key, key);
}

/// D8 across workers: two stores opened on the same database (two workers) race on 20
/// keys with `Expect::Absent`; each time exactly one commits, and the other worker reads
/// the winner's value. For the backends that workers share (PostgreSQL, Redis).
pub async fn d8_first_commit_wins_across_workers(a: &dyn Store, b: &dyn Store) {
    for round in 0..20 {
        let key = format!("run/{round}");
        let (ra, rb) = tokio::join!(
            a.put_record(RecordKind::Step, &key, "\"a\"".into(), None, Expect::Absent),
            b.put_record(RecordKind::Step, &key, "\"b\"".into(), None, Expect::Absent),
        );
        let winner = match (ra, rb) {
            (Ok(1), Err(StoreError::Conflict { .. })) => "\"a\"",
            (Err(StoreError::Conflict { .. }), Ok(1)) => "\"b\"",
            other => panic!("round {round}: {other:?}"),
        };
        assert_eq!(
            b.get_record(RecordKind::Step, &key)
                .await
                .expect("get")
                .expect("present")
                .value,
            winner
        );
    }
}

/// D7, D10: `Expect::Version` is a compare-and-set: concurrent read-modify-write loops lose
/// no update; a stale version, or a version on a missing record, is a conflict.
pub async fn d7_compare_and_set_versions(store: Arc<dyn Store>) {
    let key = StreamId::random().to_string();
    assert!(matches!(
        store
            .put_record(RecordKind::Run, &key, "0".into(), None, Expect::Version(1))
            .await,
        Err(StoreError::Conflict { .. })
    ));
    assert_eq!(
        store
            .put_record(RecordKind::Run, &key, "0".into(), None, Expect::Absent)
            .await
            .expect("create"),
        1
    );
    assert!(matches!(
        store
            .put_record(RecordKind::Run, &key, "x".into(), None, Expect::Absent)
            .await,
        Err(StoreError::Conflict { .. })
    ));
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let (store, key) = (store.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                loop {
                    let current = store
                        .get_record(RecordKind::Run, &key)
                        .await
                        .expect("get")
                        .expect("present");
                    let n: u64 = current.value.parse().expect("number");
                    match store
                        .put_record(
                            RecordKind::Run,
                            &key,
                            (n + 1).to_string(),
                            None,
                            Expect::Version(current.version),
                        )
                        .await
                    {
                        Ok(v) => {
                            assert_eq!(v, current.version + 1);
                            break;
                        }
                        Err(StoreError::Conflict { .. }) => continue,
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("join");
    }
    let last = store
        .get_record(RecordKind::Run, &key)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(last.value, "60", "60 increments, none lost");
    assert_eq!(last.version, 61);
    assert!(matches!(
        store
            .put_record(
                RecordKind::Run,
                &key,
                "stale".into(),
                None,
                Expect::Version(3)
            )
            .await,
        Err(StoreError::Conflict { .. })
    ));
}

/// Kinds are separate tables; listing is by prefix and in key order; deleting by prefix
/// removes exactly the matching keys.
pub async fn d8_list_and_delete_by_prefix(store: Arc<dyn Store>) {
    let run = StreamId::random().to_string();
    let other = StreamId::random().to_string();
    for name in ["b", "a", "c"] {
        store
            .put_record(
                RecordKind::Step,
                &format!("{run}/{name}"),
                format!("\"{name}\""),
                None,
                Expect::Absent,
            )
            .await
            .expect("put");
    }
    store
        .put_record(
            RecordKind::Step,
            &format!("{other}/a"),
            "1".into(),
            None,
            Expect::Absent,
        )
        .await
        .expect("put");
    store
        .put_record(
            RecordKind::Task,
            &format!("{run}/a"),
            "task".into(),
            None,
            Expect::Absent,
        )
        .await
        .expect("put");
    let listed = store
        .list_records(RecordKind::Step, &format!("{run}/"), 100)
        .await
        .expect("list");
    let keys: Vec<_> = listed.iter().map(|r| r.key.clone()).collect();
    assert_eq!(
        keys,
        vec![format!("{run}/a"), format!("{run}/b"), format!("{run}/c")]
    );
    assert_eq!(listed[0].value, "\"a\"");
    assert_eq!(
        store
            .list_records(RecordKind::Step, &format!("{run}/"), 2)
            .await
            .expect("list")
            .len(),
        2
    );
    assert_eq!(
        store
            .delete_records(RecordKind::Step, &format!("{run}/"))
            .await
            .expect("delete"),
        3
    );
    assert!(
        store
            .list_records(RecordKind::Step, &format!("{run}/"), 100)
            .await
            .expect("list")
            .is_empty()
    );
    assert!(
        store
            .get_record(RecordKind::Step, &format!("{other}/a"))
            .await
            .expect("get")
            .is_some(),
        "other prefix kept"
    );
    assert!(
        store
            .get_record(RecordKind::Task, &format!("{run}/a"))
            .await
            .expect("get")
            .is_some(),
        "other kind kept"
    );
    assert_eq!(
        store
            .delete_records(RecordKind::Step, &format!("{run}/"))
            .await
            .expect("delete"),
        0
    );
}

/// Deleting a prefix that holds more than [`crate::PRUNE_BATCH`] records (an ended session's
/// aliases, say), some of them expired, removes all of them, counts the unexpired ones only,
/// and leaves the keys just past the prefix.
pub async fn d14_delete_removes_more_than_a_batch(store: Arc<dyn Store>) {
    let prefix = format!("{}/", StreamId::random());
    let (live, expired) = (2 * crate::PRUNE_BATCH + 7, 5);
    let (now, mut written) = (now_ms(), 0);
    while written < live + expired {
        let mut write = WriteBatch::new();
        for i in written..(written + 100).min(live + expired) {
            let expires = if i < expired {
                Some(now - 1)
            } else {
                Some(now + 3_600_000)
            };
            write = write.put_record(
                RecordKind::Alias,
                format!("{prefix}{i:05}"),
                "x",
                expires,
                Expect::Absent,
            );
        }
        store.commit(write).await.expect("batch");
        written = (written + 100).min(live + expired);
    }
    let past = format!("{}0", prefix.trim_end_matches('/'));
    store
        .put_record(
            RecordKind::Alias,
            &past,
            "kept".into(),
            None,
            Expect::Absent,
        )
        .await
        .expect("put");
    assert_eq!(
        store
            .delete_records(RecordKind::Alias, &prefix)
            .await
            .expect("delete"),
        live as u64
    );
    assert!(
        store
            .list_records(RecordKind::Alias, &prefix, 10)
            .await
            .expect("list")
            .is_empty(),
        "records left"
    );
    assert!(
        store
            .get_record(RecordKind::Alias, &past)
            .await
            .expect("get")
            .is_some(),
        "the key past the prefix is kept"
    );
}

/// Keys built with [`crate::key_part`] from input of any length are stored, read and listed
/// by prefix on every backend; a raw key a backend cannot index is refused as a value
/// ([`crate::StoreErrorKind::Refused`]), never reported as an outage.
pub async fn bounded_keys_of_any_input_are_stored(store: Arc<dyn Store>) {
    let run = StreamId::random().to_string();
    for len in [3_000, 100_000] {
        let key = format!("{run}/{}", crate::key_part(&incompressible(len)));
        store
            .put_record(
                RecordKind::Alias,
                &key,
                format!("{len}"),
                None,
                Expect::Absent,
            )
            .await
            .expect("a bounded key is stored");
        let record = store
            .get_record(RecordKind::Alias, &key)
            .await
            .expect("get")
            .expect("present");
        assert_eq!(record.value, format!("{len}"));
    }
    assert_eq!(
        store
            .list_records(RecordKind::Alias, &format!("{run}/"), 10)
            .await
            .expect("list")
            .len(),
        2
    );
    let raw = format!("{run}/{}", incompressible(3_000));
    match store
        .put_record(RecordKind::Alias, &raw, "raw".into(), None, Expect::Absent)
        .await
    {
        Ok(_) => assert!(
            store
                .get_record(RecordKind::Alias, &raw)
                .await
                .expect("get")
                .is_some()
        ),
        Err(error) => assert_eq!(error.kind(), crate::StoreErrorKind::Refused, "{error}"),
    }
}

/// D10, D14: an expired record is absent for reads, lists and `Expect::Absent`, and prune
/// deletes it; unexpired records survive prune.
pub async fn d14_expired_records_are_absent_and_pruned(store: Arc<dyn Store>) {
    let now = now_ms();
    let gone = format!("{}/gone", StreamId::random());
    let kept = format!("{}/kept", StreamId::random());
    store
        .put_record(
            RecordKind::Task,
            &gone,
            "old".into(),
            Some(now.saturating_sub(1)),
            Expect::Absent,
        )
        .await
        .expect("put");
    store
        .put_record(
            RecordKind::Task,
            &kept,
            "new".into(),
            Some(now + 3_600_000),
            Expect::Absent,
        )
        .await
        .expect("put");
    assert_eq!(
        store
            .get_record(RecordKind::Task, &gone)
            .await
            .expect("get"),
        None
    );
    assert!(
        store
            .list_records(RecordKind::Task, &gone, 10)
            .await
            .expect("list")
            .is_empty()
    );
    let kept_record = store
        .get_record(RecordKind::Task, &kept)
        .await
        .expect("get")
        .expect("kept");
    assert_eq!(kept_record.expires_at_ms, Some(now + 3_600_000));
    let report = store
        .prune(&Retention::default(), now)
        .await
        .expect("prune");
    assert!(report.records_expired >= 1, "{report:?}");
    assert!(
        store
            .get_record(RecordKind::Task, &kept)
            .await
            .expect("get")
            .is_some()
    );
    // The key is free again: a new record starts at version 1.
    assert_eq!(
        store
            .put_record(
                RecordKind::Task,
                &gone,
                "again".into(),
                None,
                Expect::Absent
            )
            .await
            .expect("put"),
        1
    );
}

/// Re-exported so that backends need no direct dependency for the property test.
pub use proptest;

/// One step of the event-log property test.
#[derive(Debug, Clone)]
pub enum LogOp {
    /// Append to stream `stream` (index into a few streams), closing it if `close`.
    Append {
        /// Which stream.
        stream: usize,
        /// Close it with this append.
        close: bool,
    },
    /// Read stream `stream` after sequence `after`, at most `limit` events.
    Replay {
        /// Which stream.
        stream: usize,
        /// Position to read after.
        after: u64,
        /// Largest batch.
        limit: usize,
    },
    /// One [`WriteBatch`](crate::WriteBatch): appends (each to stream `.0`, then closing it
    /// if `.1`), then a record put that conflicts if `conflict`. It commits only if no op
    /// is refused (an append to a stream closed before or within the batch, the conflict).
    Batch {
        /// The appends, in order.
        appends: Vec<(usize, bool)>,
        /// End with a put that conflicts.
        conflict: bool,
    },
}

/// How many cases the event-log property test runs: `PROPTEST_CASES` if set, else 256 in
/// CI ([`crate::in_ci`]) and 32 otherwise (a quick local run).
pub fn property_cases() -> u32 {
    if let Some(cases) = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return cases;
    }
    if crate::in_ci() { 256 } else { 32 }
}

/// Streams used by the property test.
pub const PROP_STREAMS: usize = 3;

/// Any interleaving of appends and replays on a few streams.
pub fn log_ops() -> impl proptest::strategy::Strategy<Value = Vec<LogOp>> {
    use proptest::prelude::*;
    let op = prop_oneof![
        4 => (0..PROP_STREAMS, proptest::bool::weighted(0.05)).prop_map(|(stream, close)| LogOp::Append { stream, close }),
        3 => (0..PROP_STREAMS, 0u64..40, 1usize..50).prop_map(|(stream, after, limit)| LogOp::Replay { stream, after, limit }),
        2 => (proptest::collection::vec((0..PROP_STREAMS, proptest::bool::weighted(0.05)), 0..6), proptest::bool::weighted(0.15))
            .prop_map(|(appends, conflict)| LogOp::Batch { appends, conflict }),
    ];
    proptest::collection::vec(op, 1..80)
}

/// Run [`check_event_log_model`] for [`property_cases`] generated interleavings, all on one
/// store (each case on fresh streams), shrinking a failing case to a minimal one.
///
/// # Panics
/// With the minimal failing interleaving, when a case fails.
pub fn check_event_log_property(runtime: &tokio::runtime::Runtime, store: Arc<dyn Store>) {
    use proptest::test_runner::{Config, TestRunner};
    let config = Config {
        cases: property_cases(),
        failure_persistence: None,
        ..Config::default()
    };
    let result = TestRunner::new(config).run(&log_ops(), |ops| {
        runtime.block_on(check_event_log_model(store.clone(), ops));
        Ok(())
    });
    if let Err(failure) = result {
        panic!("event-log property: {failure}");
    }
}

/// D2/D3 property: against a model of the log, every replay from any position is exactly the
/// suffix (bounded by `limit`), appends get the next sequence, closed streams refuse appends,
/// and a batch interleaved with single appends lands whole (the next sequences, in order)
/// or, if any of its ops is refused, not at all.
pub async fn check_event_log_model(store: Arc<dyn Store>, ops: Vec<LogOp>) {
    let owner = StreamOwner {
        principal: Principal::anonymous(),
        session: None,
    };
    let mut streams = Vec::new();
    let mut model: Vec<(Vec<String>, bool)> = Vec::new();
    for _ in 0..PROP_STREAMS {
        let id = StreamId::random();
        store.create_stream(&id, &owner).await.expect("create");
        streams.push(id);
        model.push((Vec::new(), false));
    }
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            LogOp::Append { stream, close } => {
                let (events, closed) = &mut model[stream];
                let data = format!("s{stream}-{step}");
                let result = store.append(&streams[stream], data.clone(), close).await;
                if *closed {
                    assert!(
                        matches!(result, Err(StoreError::StreamClosed { .. })),
                        "step {step}: append to a closed stream"
                    );
                } else {
                    let id = result.expect("append");
                    events.push(data);
                    assert_eq!(id.seq, events.len() as u64, "step {step}: next sequence");
                    *closed = close;
                }
            }
            LogOp::Replay {
                stream,
                after,
                limit,
            } => {
                let (events, closed) = &model[stream];
                let read = store
                    .read_after(&streams[stream], after, limit)
                    .await
                    .expect("read");
                let start = usize::try_from(after)
                    .unwrap_or(usize::MAX)
                    .min(events.len());
                let want: Vec<&String> = events[start..].iter().take(limit).collect();
                let got: Vec<&String> = read.events.iter().map(|e| &e.data).collect();
                assert_eq!(got, want, "step {step}: exact suffix after {after}");
                for (i, e) in read.events.iter().enumerate() {
                    assert_eq!(e.id.seq, after + 1 + i as u64, "step {step}: ids in order");
                }
                let reaches_end = start + want.len() == events.len();
                assert_eq!(
                    read.finished,
                    *closed && reaches_end,
                    "step {step}: finished flag"
                );
            }
            LogOp::Batch { appends, conflict } => {
                let mut batch = crate::WriteBatch::new();
                let mut after = model.clone();
                let mut refused = None;
                for (i, (stream, close)) in appends.iter().enumerate() {
                    let data = format!("s{stream}-{step}-{i}");
                    batch = batch.append(streams[*stream].clone(), data.clone());
                    let (events, closed) = &mut after[*stream];
                    if *closed {
                        refused = refused.or(Some(batch.len() - 1));
                    }
                    events.push(data);
                    if *close {
                        batch = batch.close(streams[*stream].clone());
                        if *closed {
                            refused = refused.or(Some(batch.len() - 1));
                        }
                        *closed = true;
                    }
                }
                if conflict {
                    batch = batch.put_record(
                        RecordKind::Step,
                        format!("{}", streams[0]),
                        "x",
                        None,
                        Expect::Version(u64::MAX),
                    );
                    refused = refused.or(Some(batch.len() - 1));
                }
                let result = store.commit(batch).await;
                match refused {
                    Some(index) => {
                        let err = result.expect_err("a refused op fails the batch");
                        assert!(
                            matches!(err, StoreError::BatchOp { index: i, .. } if i == index),
                            "step {step}: {err}"
                        );
                    }
                    None => {
                        let outcome = result.expect("batch");
                        for (id, (stream, _)) in outcome.events().zip(&appends) {
                            assert_eq!(&id.stream, &streams[*stream], "step {step}: event stream");
                        }
                        let mut next: Vec<u64> = model
                            .iter()
                            .map(|(events, _)| events.len() as u64)
                            .collect();
                        for (id, (stream, _)) in outcome.events().zip(&appends) {
                            next[*stream] += 1;
                            assert_eq!(
                                id.seq, next[*stream],
                                "step {step}: next sequence in the batch"
                            );
                        }
                        assert_eq!(outcome.events().count(), appends.len());
                        model = after;
                    }
                }
            }
        }
    }
}

/// Instantiate the contract suite for a backend.
///
/// `$factory` is an async expression giving `Option<Arc<dyn Store>>`: a fresh, isolated
/// store, or `None` to skip (service missing outside CI; the factory prints why and must
/// panic instead in CI, see [`crate::in_ci`]).
///
/// `pair = $pair` is an async expression giving `Option<(Arc<dyn Store>, Arc<dyn Store>)>`:
/// a watching and a writing handle on one fresh store, each re-reading on its own (poll
/// interval, fallback tick) much less often than [`WAKE_WINDOW`](crate::contract::WAKE_WINDOW),
/// so that only real wake-ups pass the wake-up cases. Shared backends give two handles
/// opened separately on the same database (two workers); single-process backends, whose
/// appends wake only the tails of the handle they went through, give the same handle twice.
#[macro_export]
macro_rules! store_contract_tests {
    ($factory:expr, pair = $pair:expr $(,)?) => {
        $crate::store_contract_tests!(@cases $factory;
            d2_append_ids_increase_and_name_stream,
            d3_replay_after_every_id_is_exact_suffix,
            d3_closed_stream_finishes_and_refuses_appends,
            d2_concurrent_appenders_many_streams,
            d5_session_lifecycle_and_principal_isolation,
            d5_session_end_closes_its_streams,
            d5_ending_a_session_with_many_streams_removes_them_all,
            d3_unknown_stream_is_not_found,
            d14_prune_respects_open_streams_and_idle_ttl,
            d14_prune_removes_more_than_a_batch_of_each,
            d14_prune_preview_reports_what_prune_removes_and_changes_nothing,
            d4_list_sessions_by_principal,
            d4_session_state_compare_and_set_loses_no_update,
            spec_session_delivery_compare_and_set_has_one_winner,
            d8_first_commit_wins_among_racing_writers,
            d7_compare_and_set_versions,
            d8_list_and_delete_by_prefix,
            d14_delete_removes_more_than_a_batch,
            d14_expired_records_are_absent_and_pruned,
            d1_batch_commits_every_op_and_returns_ids_and_versions,
            d15_refused_batch_op_leaves_nothing_of_the_batch,
            d3_batch_is_visible_to_readers_all_at_once,
            d3_batch_wakes_tails_after_commit,
            d15_concurrent_batches_stand_or_fall_alone,
            d15_grouped_refusals_of_every_kind_fail_only_their_batch,
            bounded_keys_of_any_input_are_stored,
            ops_list_streams_pages_in_id_order,
            d3_import_keeps_event_ids_and_resumes_exactly,
            ops_status_reports_current_schema_and_clock,
            d14_import_of_a_trimmed_stream_keeps_its_start_or_is_refused,
        );
        mod contract_wake {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn d3_live_tail_wakes_on_append() {
                if let Some((watcher, writer)) = $pair.await {
                    $crate::contract::d3_live_tail_wakes_on_append(watcher, writer).await;
                }
            }
        }
    };
    (@cases $factory:expr; $($case:ident),* $(,)?) => {
        mod contract {
            #[allow(unused_imports)]
            use super::*;

            #[test]
            fn d3_any_interleaving_replays_exact_suffixes() {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("runtime");
                if let Some(store) = runtime.block_on($factory) {
                    $crate::contract::check_event_log_property(&runtime, store);
                }
            }
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    if let Some(store) = $factory.await {
                        $crate::contract::$case(store).await;
                    }
                }
            )*
        }
    };
}
