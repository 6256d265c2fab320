use std::sync::Arc;

use durable_mcp_store::{Principal, Store, StoreError, StreamId, StreamOwner};

use super::*;

fn temp_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "durable-mcp-sqlite-{}-{}",
        std::process::id(),
        StreamId::random()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

async fn fresh() -> Option<Arc<dyn Store>> {
    let options = SqliteOptions {
        synchronous: Synchronous::Normal,
        ..SqliteOptions::new(temp_path("contract.db"))
    };
    Some(Arc::new(SqliteStore::open(options).await.expect("open")))
}

/// The writer wakes the tails of its own handle; other processes' commits are only seen by
/// the poll, set far beyond the wake-up window, so the same handle serves both roles.
async fn pair() -> Option<(Arc<dyn Store>, Arc<dyn Store>)> {
    let options = SqliteOptions {
        synchronous: Synchronous::Normal,
        poll_interval: Duration::from_secs(600),
        ..SqliteOptions::new(temp_path("pair.db"))
    };
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(options).await.expect("open"));
    Some((store.clone(), store))
}

durable_mcp_store::store_contract_tests!(fresh(), pair = pair());

/// The same contract with `synchronous=FULL` (the default), where a store alone on its file
/// overlaps each group's fsync with the next group (`pipeline.rs`): answers, wake-ups and
/// reads wait for the fsync instead of the writer.
mod overlapped {
    use super::*;

    async fn fresh() -> Option<Arc<dyn Store>> {
        Some(Arc::new(
            SqliteStore::open(SqliteOptions::new(temp_path("contract-full.db")))
                .await
                .expect("open"),
        ))
    }

    async fn pair() -> Option<(Arc<dyn Store>, Arc<dyn Store>)> {
        let options = SqliteOptions {
            poll_interval: Duration::from_secs(600),
            ..SqliteOptions::new(temp_path("pair-full.db"))
        };
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(options).await.expect("open"));
        Some((store.clone(), store))
    }

    durable_mcp_store::store_contract_tests!(fresh(), pair = pair());
}

/// A read's answer may come from a commit whose fsync is still running, and so may its
/// error (a stream pruned or a session ended by that commit): both wait for the fsync.
#[tokio::test]
async fn a_read_answers_and_fails_only_once_what_it_saw_is_synced() {
    let store = SqliteStore::open(SqliteOptions::new(temp_path("settle.db")))
        .await
        .unwrap();
    let stream = StreamId::random();
    store
        .create_stream(
            &stream,
            &StreamOwner {
                principal: Principal::anonymous(),
                session: None,
            },
        )
        .await
        .unwrap();
    let synced = Arc::clone(&store.shared.synced);
    let held = synced.hold_back();
    let reads = [stream, StreamId::random()].map(|stream| {
        let store = store.clone();
        tokio::spawn(async move { store.read_after(&stream, 0, 10).await })
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        reads.iter().all(|read| !read.is_finished()),
        "a read returned before the commit it may have seen was synced"
    );
    synced.release(held);
    let [found, missing] = reads;
    let found = tokio::time::timeout(Duration::from_secs(5), found)
        .await
        .unwrap()
        .unwrap();
    assert!(found.unwrap().events.is_empty());
    let missing = tokio::time::timeout(Duration::from_secs(5), missing)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(missing, Err(StoreError::NotFound { .. })),
        "{missing:?}"
    );
}

/// Another store on the file (as another process would be) must never read a commit before
/// its fsync, so a store overlaps only while it is alone: the second waits for the first to
/// give the file back, then neither overlaps until the second has gone. A store with a
/// weaker `synchronous` (the second here) counts as one too, and so does a store that names
/// the file through a symbolic link (the second here).
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_store_overlaps_its_fsyncs_only_while_it_is_alone_on_the_file() {
    let path = temp_path("alone.db");
    let owner = StreamOwner {
        principal: Principal::anonymous(),
        session: None,
    };
    let stream = StreamId::random();
    let first = SqliteStore::open(SqliteOptions::new(&path)).await.unwrap();
    first.create_stream(&stream, &owner).await.unwrap();
    first.append(&stream, "1".into(), false).await.unwrap();
    assert!(
        first.fsync_overlapped(),
        "alone on the file, a FULL store overlaps"
    );

    let link = path.with_file_name("link.db");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let started = std::time::Instant::now();
    let second = SqliteStore::open(SqliteOptions {
        synchronous: Synchronous::Normal,
        ..SqliteOptions::new(&link)
    })
    .await
    .unwrap();
    assert!(
        started.elapsed() < pipeline::HOLD * 8,
        "the second store waited {:?} for the file",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.append(&stream, "2".into(), false).await.unwrap();
    second.append(&stream, "3".into(), false).await.unwrap();
    assert!(
        !first.fsync_overlapped(),
        "the first store overlaps while another has the file open"
    );
    assert!(!second.fsync_overlapped());
    let seen: Vec<String> = second
        .read_after(&stream, 0, 10)
        .await
        .unwrap()
        .events
        .into_iter()
        .map(|e| e.data)
        .collect();
    assert_eq!(seen, ["1", "2", "3"]);

    drop(second);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut n = 4;
    while !first.fsync_overlapped() {
        assert!(
            std::time::Instant::now() < deadline,
            "the first store did not take the file back after the second closed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        first.append(&stream, n.to_string(), false).await.unwrap();
        n += 1;
    }
    assert_eq!(
        first
            .read_after(&stream, 0, 100)
            .await
            .unwrap()
            .events
            .len(),
        n - 1
    );
}

/// Every group commit is counted, and so is the `fsync` that makes it durable, whoever
/// makes it: the store while it overlaps (alone on the file), SQLite inside `COMMIT` while
/// another store shares the file (FULL), nobody with `synchronous=NORMAL`.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn each_commit_and_its_fsync_are_counted() {
    let path = temp_path("counted.db");
    let owner = StreamOwner {
        principal: Principal::anonymous(),
        session: None,
    };
    let stream = StreamId::random();
    let first = SqliteStore::open(SqliteOptions::new(&path)).await.unwrap();
    first.create_stream(&stream, &owner).await.unwrap();
    let before = first.counted();
    first.append(&stream, "1".into(), false).await.unwrap();
    assert!(first.fsync_overlapped());
    assert_eq!(
        first.counted(),
        (before.0 + 1, before.1 + 1),
        "overlapped: one commit, one fdatasync by the store"
    );

    let second = SqliteStore::open(SqliteOptions {
        synchronous: Synchronous::Normal,
        ..SqliteOptions::new(&path)
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = first.counted();
    first.append(&stream, "2".into(), false).await.unwrap();
    assert!(!first.fsync_overlapped());
    assert_eq!(
        first.counted(),
        (before.0 + 1, before.1 + 1),
        "not overlapped, FULL: one commit, synced by SQLite"
    );
    let before = second.counted();
    second.append(&stream, "3".into(), false).await.unwrap();
    assert_eq!(
        second.counted(),
        (before.0 + 1, before.1),
        "NORMAL: one commit, no fsync"
    );
}

#[tokio::test]
async fn d1_committed_events_survive_reopen() {
    let path = temp_path("reopen.db");
    let stream = StreamId::random();
    {
        let store = SqliteStore::open(SqliteOptions::new(&path)).await.unwrap();
        store
            .create_stream(
                &stream,
                &StreamOwner {
                    principal: Principal::anonymous(),
                    session: None,
                },
            )
            .await
            .unwrap();
        for i in 0..10 {
            store.append(&stream, format!("{i}"), false).await.unwrap();
        }
    }
    let store = SqliteStore::open(SqliteOptions::new(&path)).await.unwrap();
    let read = store.read_after(&stream, 4, 100).await.unwrap();
    assert_eq!(
        read.events
            .iter()
            .map(|e| e.data.as_str())
            .collect::<Vec<_>>(),
        ["4", "5", "6", "7", "8", "9"],
        "seq 5..=10 hold data 4..=9"
    );
}

#[tokio::test]
async fn newer_schema_is_refused_with_a_clear_message() {
    let path = temp_path("newer.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
    }
    let err = SqliteStore::open(SqliteOptions::new(&path))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Incompatible(_)), "{err}");
    assert!(err.to_string().contains("upgrade durable-mcp"), "{err}");
}

#[tokio::test]
async fn d14_max_events_prunes_and_resume_from_pruned_is_named() {
    let options = SqliteOptions {
        max_events_per_stream: Some(3),
        ..SqliteOptions::new(temp_path("prune.db"))
    };
    let store = SqliteStore::open(options).await.unwrap();
    let stream = StreamId::random();
    store
        .create_stream(
            &stream,
            &StreamOwner {
                principal: Principal::anonymous(),
                session: None,
            },
        )
        .await
        .unwrap();
    for i in 1..=6 {
        store.append(&stream, format!("{i}"), false).await.unwrap();
    }
    assert!(matches!(
        store.read_after(&stream, 1, 10).await,
        Err(StoreError::Pruned {
            oldest_retained: 4,
            ..
        })
    ));
    let read = store.read_after(&stream, 3, 10).await.unwrap();
    assert_eq!(read.events.len(), 3);
}

#[test]
fn urls_parse() {
    let o = SqliteOptions::from_url("sqlite:./x.db?synchronous=normal&max_events=10").unwrap();
    assert_eq!(o.path, PathBuf::from("./x.db"));
    assert_eq!(o.synchronous, Synchronous::Normal);
    assert_eq!(o.max_events_per_stream, Some(10));
    assert!(SqliteOptions::from_url("sqlite:").is_err());
    assert!(SqliteOptions::from_url("sqlite:x.db?bogus=1").is_err());
    assert!(SqliteOptions::from_url("sqlite:x.db?synchronous=maybe").is_err());
}

/// Regression: a client-supplied `Last-Event-ID` sequence at or above `i64::MAX` overflowed
/// (a panic in debug builds, a wrong "pruned" answer in release).
#[tokio::test]
async fn regression_huge_resume_position_does_not_overflow() {
    let store = SqliteStore::open(SqliteOptions::new(temp_path("huge.db")))
        .await
        .unwrap();
    let stream = StreamId::random();
    store
        .create_stream(
            &stream,
            &StreamOwner {
                principal: Principal::anonymous(),
                session: None,
            },
        )
        .await
        .unwrap();
    store.append(&stream, "x".into(), false).await.unwrap();
    for after in [i64::MAX as u64, u64::MAX] {
        let read = store.read_after(&stream, after, 10).await.unwrap();
        assert!(read.events.is_empty());
    }
}

#[tokio::test]
async fn d8_committed_records_survive_reopen() {
    use durable_mcp_store::{Expect, RecordKind};
    let path = temp_path("records.db");
    {
        let store = SqliteStore::open(SqliteOptions::new(&path)).await.unwrap();
        assert_eq!(
            store
                .put_record(
                    RecordKind::Step,
                    "run/1",
                    "\"a\"".into(),
                    None,
                    Expect::Absent
                )
                .await
                .unwrap(),
            1
        );
        assert_eq!(
            store
                .put_record(
                    RecordKind::Step,
                    "run/1",
                    "\"b\"".into(),
                    Some(u64::MAX),
                    Expect::Version(1)
                )
                .await
                .unwrap(),
            2
        );
    }
    let store = SqliteStore::open(SqliteOptions::new(&path)).await.unwrap();
    let record = store
        .get_record(RecordKind::Step, "run/1")
        .await
        .unwrap()
        .expect("kept");
    assert_eq!((record.version, record.value.as_str()), (2, "\"b\""));
    assert_eq!(
        record.expires_at_ms,
        Some(i64::MAX as u64),
        "expiries beyond i64 saturate"
    );
    assert!(
        store
            .get_record(RecordKind::Run, "run/1")
            .await
            .unwrap()
            .is_none(),
        "kinds are separate"
    );
}

#[tokio::test]
async fn record_prefixes_are_literal_and_ordered_bytewise() {
    use durable_mcp_store::{Expect, RecordKind};
    let store = SqliteStore::open(SqliteOptions::new(temp_path("prefix.db")))
        .await
        .unwrap();
    for key in ["a_1", "ab1", "a%", "a%x", "a\u{10FFFF}", "B", "a", "é"] {
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
    let keys = |records: Vec<durable_mcp_store::Record>| {
        records.into_iter().map(|r| r.key).collect::<Vec<_>>()
    };
    assert_eq!(
        keys(
            store
                .list_records(RecordKind::Alias, "a_", 10)
                .await
                .unwrap()
        ),
        ["a_1"]
    );
    assert_eq!(
        keys(
            store
                .list_records(RecordKind::Alias, "a%", 10)
                .await
                .unwrap()
        ),
        ["a%", "a%x"]
    );
    assert_eq!(
        keys(
            store
                .list_records(RecordKind::Alias, "a\u{10FFFF}", 10)
                .await
                .unwrap()
        ),
        ["a\u{10FFFF}"]
    );
    assert_eq!(
        keys(store.list_records(RecordKind::Alias, "", 10).await.unwrap()),
        ["B", "a", "a%", "a%x", "a_1", "ab1", "a\u{10FFFF}", "é"]
    );
    assert_eq!(
        store.delete_records(RecordKind::Alias, "a_").await.unwrap(),
        1
    );
    assert_eq!(
        store.delete_records(RecordKind::Alias, "a").await.unwrap(),
        5
    );
    assert_eq!(
        store.delete_records(RecordKind::Alias, "").await.unwrap(),
        2
    );
    assert!(matches!(
        store
            .put_record(
                RecordKind::Alias,
                "B",
                "x".into(),
                None,
                Expect::Version(u64::MAX)
            )
            .await,
        Err(StoreError::Conflict { .. })
    ));
}

/// Regression: every read beyond the pooled connections opened a fresh connection, and
/// SQLite keeps the file handle of a connection closed while others hold locks on the file,
/// so a burst of concurrent reads (many GET streams woken at once) left hundreds of
/// handles open for the process's lifetime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_concurrent_reads_keep_at_most_max_readers_connections() {
    let path = temp_path("readers.db");
    let store = Arc::new(SqliteStore::open(SqliteOptions::new(&path)).await.unwrap());
    let stream = StreamId::random();
    store
        .create_stream(
            &stream,
            &StreamOwner {
                principal: Principal::anonymous(),
                session: None,
            },
        )
        .await
        .unwrap();
    let reads = (0..200).map(|_| {
        let (store, stream) = (store.clone(), stream.clone());
        tokio::spawn(async move { store.read_after(&stream, 0, 10).await.map(drop) })
    });
    for read in futures::future::join_all(reads).await {
        read.unwrap().unwrap();
    }
    // Handles on this test's database file (other tests run in this process too).
    let handles = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter(|target| *target == path)
        .count();
    assert!(
        handles <= MAX_READERS + 1,
        "{handles} handles on the database file: readers and the writer only"
    );
}

/// D14: under writes that never pause and readers that never leave a gap, the WAL stays
/// bounded: the writer empties it past `WAL_CHECKPOINT_AT` (here about 100 MB are written).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d14_the_wal_stays_bounded_while_readers_never_stop() {
    let path = temp_path("wal.db");
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(SqliteOptions::new(path.clone()))
            .await
            .expect("open"),
    );
    let owner = StreamOwner {
        principal: Principal::anonymous(),
        session: None,
    };
    // Two readers whose read transactions overlap, so that one is always open (as under a
    // load of many clients).
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2u64)
        .map(|i| {
            let (path, stop) = (path.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut conn = rusqlite::Connection::open(&path).unwrap();
                std::thread::sleep(Duration::from_millis(10 * i));
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let tx = conn.transaction().unwrap();
                    tx.query_row("SELECT count(*) FROM streams", [], |row| {
                        row.get::<_, i64>(0)
                    })
                    .unwrap();
                    std::thread::sleep(Duration::from_millis(20));
                    tx.commit().unwrap();
                }
            })
        })
        .collect();
    let wal = PathBuf::from(format!("{}-wal", path.display()));
    let mut largest = 0;
    for _ in 0..100 {
        let mut batch = durable_mcp_store::WriteBatch::new();
        for _ in 0..100 {
            let stream = StreamId::random();
            batch = batch
                .create_stream(stream.clone(), owner.clone())
                .append(stream, "y".repeat(10_000));
        }
        store.commit(batch).await.unwrap();
        largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for reader in readers {
        reader.join().unwrap();
    }
    assert!(largest < 64 << 20, "the WAL reached {largest} bytes");
}

/// D5, D14: ending a session with many streams is one small write: its streams read as gone
/// at once, and the next prune deletes them, a batch at a time, with the session's mark.
#[tokio::test]
async fn d5_an_ended_sessions_streams_are_gone_at_once_and_deleted_by_prunes() {
    let path = temp_path("ended.db");
    let store = SqliteStore::open(SqliteOptions {
        synchronous: Synchronous::Normal,
        ..SqliteOptions::new(path.clone())
    })
    .await
    .expect("open");
    let who = Principal::anonymous();
    let session = durable_mcp_store::contract::session(&who);
    store.create_session(session.clone()).await.unwrap();
    let owner = StreamOwner {
        principal: who.clone(),
        session: Some(session.id.clone()),
    };
    let mut streams = Vec::new();
    for _ in 0..12 {
        let mut batch = durable_mcp_store::WriteBatch::new();
        for _ in 0..100 {
            let stream = StreamId::random();
            batch = batch
                .create_stream(stream.clone(), owner.clone())
                .append(stream.clone(), "done")
                .close(stream.clone());
            streams.push(stream);
        }
        store.commit(batch).await.unwrap();
    }
    assert!(store.end_session(&who, &session.id).await.unwrap());
    for stream in &streams {
        assert!(matches!(
            store.read_after(stream, 0, 10).await,
            Err(StoreError::NotFound { .. })
        ));
        assert!(matches!(
            store.append(stream, "late".into(), false).await,
            Err(StoreError::NotFound { .. })
        ));
    }
    let conn = rusqlite::Connection::open(&path).unwrap();
    let count = |sql: &str| conn.query_row(sql, [], |row| row.get::<_, i64>(0)).unwrap();
    assert_eq!(
        count("SELECT count(*) FROM streams"),
        1_201,
        "deleted by prunes, not by the end (with the standalone stream)"
    );
    store
        .prune(
            &durable_mcp_store::Retention::default(),
            durable_mcp_store::now_ms(),
        )
        .await
        .unwrap();
    assert_eq!(
        (
            count("SELECT count(*) FROM streams"),
            count("SELECT count(*) FROM events")
        ),
        (0, 0)
    );
    assert_eq!(count("SELECT count(*) FROM ended_sessions"), 0);
}
