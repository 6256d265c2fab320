//! Contract cases for [`Store::commit`]: all or nothing, visible at once, ids and versions
//! returned, tails woken after the commit.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use crate::{
    BatchOp, Expect, OpOutcome, Principal, RecordKind, SessionId, Store, StoreError,
    StoreErrorKind, StreamId, StreamOwner, WriteBatch,
};

fn anonymous() -> StreamOwner {
    StreamOwner {
        principal: Principal::anonymous(),
        session: None,
    }
}

/// D1/D3/D8: a batch creates a stream, appends, closes it and writes records in one commit;
/// it returns each op's event id or version, in order, and everything is readable after.
pub async fn d1_batch_commits_every_op_and_returns_ids_and_versions(store: Arc<dyn Store>) {
    let (stream, run) = (StreamId::random(), format!("run/{}", StreamId::random()));
    store
        .put_record(
            RecordKind::Step,
            &format!("{run}/old"),
            "1".into(),
            None,
            Expect::Absent,
        )
        .await
        .expect("put");
    let batch = WriteBatch::new()
        .create_stream(stream.clone(), anonymous())
        .append(stream.clone(), "")
        .append(stream.clone(), "response")
        .close(stream.clone())
        .put_record(RecordKind::Run, &run, "a", None, Expect::Absent)
        .put_record(RecordKind::Run, &run, "b", None, Expect::Version(1))
        .delete_records(RecordKind::Step, format!("{run}/"))
        .put_record(RecordKind::Alias, &run, "alias", None, Expect::Absent)
        .delete_record(RecordKind::Alias, &run, 1);
    let outcome = store.commit(batch).await.expect("commit");
    assert_eq!(outcome.ops.len(), 9);
    assert_eq!(outcome.ops[0], OpOutcome::Created);
    assert_eq!(
        outcome.event(1).map(|id| (&id.stream, id.seq)),
        Some((&stream, 1))
    );
    assert_eq!(outcome.event(2).map(|id| id.seq), Some(2));
    assert_eq!(outcome.ops[3], OpOutcome::Closed);
    assert_eq!(
        (outcome.version(4), outcome.version(5)),
        (Some(1), Some(2)),
        "a put sees the batch's earlier put"
    );
    assert_eq!(outcome.ops[6], OpOutcome::Deleted(1));
    assert_eq!(outcome.ops[8], OpOutcome::Deleted(1));
    assert_eq!(outcome.events().count(), 2);
    let read = store.read_after(&stream, 0, 10).await.expect("read");
    let data: Vec<&str> = read.events.iter().map(|e| e.data.as_str()).collect();
    assert_eq!(data, ["", "response"]);
    assert!(read.finished, "closed by the batch");
    let record = store
        .get_record(RecordKind::Run, &run)
        .await
        .expect("get")
        .expect("present");
    assert_eq!((record.value.as_str(), record.version), ("b", 2));
    assert_eq!(
        store
            .get_record(RecordKind::Alias, &run)
            .await
            .expect("get"),
        None
    );
    assert_eq!(
        store
            .get_record(RecordKind::Step, &format!("{run}/old"))
            .await
            .expect("get"),
        None
    );
    let err = store
        .append(&stream, "late".into(), false)
        .await
        .expect_err("closed");
    assert!(matches!(err, StoreError::StreamClosed { .. }), "{err}");
    assert!(
        store
            .commit(WriteBatch::new())
            .await
            .expect("empty batch")
            .ops
            .is_empty()
    );
}

/// D15/D8/D3: a batch with one refused op writes nothing, whichever op is refused and
/// wherever it stands, and the error names that op. The stream's sequences are not used up.
pub async fn d15_refused_batch_op_leaves_nothing_of_the_batch(store: Arc<dyn Store>) {
    let existing = StreamId::random();
    store
        .create_stream(&existing, &anonymous())
        .await
        .expect("create");
    store
        .append(&existing, "e1".into(), false)
        .await
        .expect("append");
    let closed = StreamId::random();
    store
        .create_stream(&closed, &anonymous())
        .await
        .expect("create");
    store
        .append(&closed, "done".into(), true)
        .await
        .expect("close");
    let taken = format!("alias/{}", StreamId::random());
    store
        .put_record(
            RecordKind::Alias,
            &taken,
            "first".into(),
            None,
            Expect::Absent,
        )
        .await
        .expect("put");
    let doomed = format!("step/{}", StreamId::random());
    store
        .put_record(
            RecordKind::Step,
            &doomed,
            "kept".into(),
            None,
            Expect::Absent,
        )
        .await
        .expect("put");
    let missing_session = StreamOwner {
        principal: Principal::anonymous(),
        session: Some(SessionId::random()),
    };
    let refusals: Vec<(BatchOp, StoreErrorKind)> = vec![
        (
            BatchOp::PutRecord {
                kind: RecordKind::Alias,
                key: taken.clone(),
                value: "second".into(),
                expires_at_ms: None,
                expect: Expect::Absent,
            },
            StoreErrorKind::Conflict,
        ),
        (
            BatchOp::PutRecord {
                kind: RecordKind::Alias,
                key: taken.clone(),
                value: "second".into(),
                expires_at_ms: None,
                expect: Expect::Version(7),
            },
            StoreErrorKind::Conflict,
        ),
        (
            BatchOp::DeleteRecord {
                kind: RecordKind::Alias,
                key: taken.clone(),
                version: 2,
            },
            StoreErrorKind::Conflict,
        ),
        (
            BatchOp::Append {
                stream: closed.clone(),
                data: "late".into(),
            },
            StoreErrorKind::StreamClosed,
        ),
        (
            BatchOp::Close {
                stream: closed.clone(),
            },
            StoreErrorKind::StreamClosed,
        ),
        (
            BatchOp::Append {
                stream: StreamId::random(),
                data: "x".into(),
            },
            StoreErrorKind::NotFound,
        ),
        (
            BatchOp::CreateStream {
                id: existing.clone(),
                owner: anonymous(),
            },
            StoreErrorKind::Conflict,
        ),
        (
            BatchOp::CreateStream {
                id: StreamId::random(),
                owner: missing_session,
            },
            StoreErrorKind::NotFound,
        ),
    ];
    for (case, (refused, kind)) in refusals.into_iter().enumerate() {
        for position in [0, 3, 5] {
            let (fresh, key) = (StreamId::random(), format!("run/{}", StreamId::random()));
            let mut ops = vec![
                BatchOp::CreateStream {
                    id: fresh.clone(),
                    owner: anonymous(),
                },
                BatchOp::Append {
                    stream: fresh.clone(),
                    data: String::new(),
                },
                BatchOp::Append {
                    stream: existing.clone(),
                    data: "e2".into(),
                },
                BatchOp::PutRecord {
                    kind: RecordKind::Run,
                    key: key.clone(),
                    value: "run".into(),
                    expires_at_ms: None,
                    expect: Expect::Absent,
                },
                BatchOp::DeleteRecords {
                    kind: RecordKind::Step,
                    prefix: doomed.clone(),
                },
            ];
            ops.insert(position, refused.clone());
            let mut batch = WriteBatch::new();
            for op in ops {
                batch.push(op);
            }
            let err = store.commit(batch).await.expect_err("refused");
            let at = format!("case {case} at {position}: {err}");
            assert!(
                matches!(err, StoreError::BatchOp { index, .. } if index == position),
                "{at}"
            );
            assert_eq!(err.kind(), kind, "{at}");
            assert_eq!(err.refusal().kind(), kind, "{at}");
            assert!(
                matches!(
                    store.read_after(&fresh, 0, 10).await,
                    Err(StoreError::NotFound { .. })
                ),
                "{at}: stream created"
            );
            assert_eq!(
                store.get_record(RecordKind::Run, &key).await.expect("get"),
                None,
                "{at}: record written"
            );
            let alias = store
                .get_record(RecordKind::Alias, &taken)
                .await
                .expect("get")
                .expect("alias kept");
            assert_eq!(
                (alias.value.as_str(), alias.version),
                ("first", 1),
                "{at}: alias deleted or changed"
            );
            assert!(
                store
                    .get_record(RecordKind::Step, &doomed)
                    .await
                    .expect("get")
                    .is_some(),
                "{at}: record deleted"
            );
            let log = store.read_after(&existing, 0, 10).await.expect("read");
            assert_eq!(log.events.len(), 1, "{at}: event appended");
            assert!(
                !store
                    .read_after(&closed, 0, 10)
                    .await
                    .expect("read")
                    .events
                    .iter()
                    .any(|e| e.data == "late"),
                "{at}"
            );
        }
    }
    // No sequence was consumed by the refused batches.
    assert_eq!(
        store
            .append(&existing, "e2".into(), false)
            .await
            .expect("append")
            .seq,
        2
    );
}

/// D3: a concurrent reader sees a batch all at once: every batch appends three events to
/// one stream and bumps a record, and no read ever sees part of a batch.
pub async fn d3_batch_is_visible_to_readers_all_at_once(store: Arc<dyn Store>) {
    const BATCHES: u64 = 40;
    let (stream, key) = (
        StreamId::random(),
        format!("counter/{}", StreamId::random()),
    );
    store
        .create_stream(&stream, &anonymous())
        .await
        .expect("create");
    let writer = {
        let (store, stream, key) = (store.clone(), stream.clone(), key.clone());
        tokio::spawn(async move {
            for n in 0..BATCHES {
                let expect = if n == 0 {
                    Expect::Absent
                } else {
                    Expect::Version(n)
                };
                let batch = WriteBatch::new()
                    .append(stream.clone(), format!("{n}/a"))
                    .append(stream.clone(), format!("{n}/b"))
                    .append(stream.clone(), format!("{n}/c"))
                    .put_record(RecordKind::State, &key, format!("{n}"), None, expect);
                store.commit(batch).await.expect("commit");
            }
        })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        // Record first, then stream: the stream holds at least the record's batches.
        let version = store
            .get_record(RecordKind::State, &key)
            .await
            .expect("get")
            .map_or(0, |r| r.version);
        let events = store
            .read_after(&stream, 0, usize::MAX)
            .await
            .expect("read")
            .events
            .len() as u64;
        assert_eq!(
            events % 3,
            0,
            "a read saw part of a batch ({events} events)"
        );
        assert!(
            events >= version * 3,
            "record at {version} but only {events} events visible"
        );
        // Stream first, then record.
        let version_after = store
            .get_record(RecordKind::State, &key)
            .await
            .expect("get")
            .map_or(0, |r| r.version);
        assert!(
            version_after * 3 >= events,
            "{events} events visible but record at {version_after}"
        );
        if version_after == BATCHES {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the writer did not finish within 30s"
        );
        tokio::task::yield_now().await;
    }
    writer.await.expect("join");
}

/// D3: a tail subscribed before a batch is woken after the batch commits, and its read
/// then sees every event of the batch.
pub async fn d3_batch_wakes_tails_after_commit(store: Arc<dyn Store>) {
    let stream = StreamId::random();
    store
        .create_stream(&stream, &anonymous())
        .await
        .expect("create");
    let mut wake = store.watch(&stream).await.expect("watch");
    let other = StreamId::random();
    let batch = WriteBatch::new()
        .create_stream(other.clone(), anonymous())
        .append(other, "x")
        .append(stream.clone(), "1")
        .append(stream.clone(), "2")
        .close(stream.clone());
    let writer = store.clone();
    let task = tokio::spawn(async move { writer.commit(batch).await });
    tokio::time::timeout(Duration::from_secs(5), wake.next())
        .await
        .expect("woken within 5s");
    task.await.expect("join").expect("commit");
    let read = store.read_after(&stream, 0, 10).await.expect("read");
    assert_eq!(read.events.len(), 2);
    assert!(read.finished);
}

/// D15: batches committed at the same time (a backend may group them into one
/// transaction) stand or fall alone: the refused ones write nothing, the others commit
/// whole.
pub async fn d15_concurrent_batches_stand_or_fall_alone(store: Arc<dyn Store>) {
    let taken = format!("alias/{}", StreamId::random());
    store
        .put_record(
            RecordKind::Alias,
            &taken,
            "first".into(),
            None,
            Expect::Absent,
        )
        .await
        .expect("put");
    let mut tasks = Vec::new();
    for i in 0..32 {
        let (store, taken) = (store.clone(), taken.clone());
        tasks.push(tokio::spawn(async move {
            let (stream, key) = (StreamId::random(), format!("run/{}", StreamId::random()));
            let mut batch = WriteBatch::new()
                .create_stream(stream.clone(), anonymous())
                .append(stream.clone(), format!("{i}"))
                .put_record(RecordKind::Run, &key, "run", None, Expect::Absent);
            if i % 2 == 1 {
                batch = batch.put_record(RecordKind::Alias, &taken, "mine", None, Expect::Absent);
            }
            (i, stream, key, store.commit(batch).await)
        }));
    }
    for task in tasks {
        let (i, stream, key, result) = task.await.expect("join");
        if i % 2 == 1 {
            let err = result.expect_err("the odd batches conflict");
            assert!(
                matches!(err, StoreError::BatchOp { index: 3, .. }),
                "batch {i}: {err}"
            );
            assert!(
                matches!(
                    store.read_after(&stream, 0, 10).await,
                    Err(StoreError::NotFound { .. })
                ),
                "batch {i}"
            );
            assert_eq!(
                store.get_record(RecordKind::Run, &key).await.expect("get"),
                None,
                "batch {i}"
            );
        } else {
            let outcome = result.unwrap_or_else(|e| panic!("batch {i}: {e}"));
            assert_eq!(outcome.event(1).map(|id| id.seq), Some(1), "batch {i}");
            let read = store.read_after(&stream, 0, 10).await.expect("read");
            assert_eq!(
                read.events
                    .iter()
                    .map(|e| e.data.clone())
                    .collect::<Vec<_>>(),
                [format!("{i}")]
            );
            assert_eq!(
                store
                    .get_record(RecordKind::Run, &key)
                    .await
                    .expect("get")
                    .map(|r| r.version),
                Some(1),
                "batch {i}"
            );
        }
    }
    assert_eq!(
        store
            .get_record(RecordKind::Alias, &taken)
            .await
            .expect("get")
            .map(|r| r.value),
        Some("first".into())
    );
}

/// D8 across workers, for batches: two stores on the same database (two workers) race 20
/// times with a batch that creates a stream, primes it and claims one alias with
/// `Expect::Absent`. Each time exactly one batch commits; the loser's stream does not
/// exist, and both workers read the winner's alias. For the backends workers share.
pub async fn d8_first_batch_wins_across_workers(a: &dyn Store, b: &dyn Store) {
    let claim = |alias: &str, stream: &StreamId| {
        WriteBatch::new()
            .create_stream(stream.clone(), anonymous())
            .append(stream.clone(), "")
            .put_record(
                RecordKind::Alias,
                alias,
                stream.to_string(),
                None,
                Expect::Absent,
            )
    };
    for round in 0..20 {
        let alias = format!("race/{round}/{}", StreamId::random());
        let (sa, sb) = (StreamId::random(), StreamId::random());
        let (ra, rb) = tokio::join!(a.commit(claim(&alias, &sa)), b.commit(claim(&alias, &sb)));
        let (winner, loser, lost) = match (ra, rb) {
            (Ok(_), Err(lost)) => (sa, sb, lost),
            (Err(lost), Ok(_)) => (sb, sa, lost),
            (ra, rb) => panic!("round {round}: exactly one batch commits: {ra:?} / {rb:?}"),
        };
        assert!(
            matches!(lost, StoreError::BatchOp { index: 2, .. }),
            "round {round}: {lost}"
        );
        assert_eq!(lost.kind(), StoreErrorKind::Conflict, "round {round}");
        for store in [a, b] {
            let alias = store
                .get_record(RecordKind::Alias, &alias)
                .await
                .expect("get")
                .expect("claimed");
            assert_eq!(alias.value, winner.to_string(), "round {round}");
            assert_eq!(
                store
                    .read_after(&winner, 0, 10)
                    .await
                    .expect("winner's stream")
                    .events
                    .len(),
                1,
                "round {round}"
            );
            assert!(
                matches!(
                    store.read_after(&loser, 0, 10).await,
                    Err(StoreError::NotFound { .. })
                ),
                "round {round}"
            );
        }
    }
}

/// D15: every kind of refusal, grouped. Batches and single appends committed at the same
/// instant (a backend may run them in one transaction) mix one-op and longer batches that
/// succeed with ones refused by what they find (a closed stream, a taken key) and ones
/// refused by the write itself (a stream of a session that does not exist, which a
/// database may only find when the row is inserted). Each refused one leaves nothing and
/// names its op; each other commits whole, and sees the effects of none of the refused.
pub async fn d15_grouped_refusals_of_every_kind_fail_only_their_batch(store: Arc<dyn Store>) {
    let closed = StreamId::random();
    store
        .create_stream(&closed, &anonymous())
        .await
        .expect("create");
    store
        .append(&closed, "done".into(), true)
        .await
        .expect("close");
    let taken = format!("alias/{}", StreamId::random());
    store
        .put_record(
            RecordKind::Alias,
            &taken,
            "first".into(),
            None,
            Expect::Absent,
        )
        .await
        .expect("put");
    let missing_session = StreamOwner {
        principal: Principal::anonymous(),
        session: Some(SessionId::random()),
    };
    let open = StreamId::random();
    store
        .create_stream(&open, &anonymous())
        .await
        .expect("create");
    let mut appended = 0;
    for round in 0..6usize {
        // (batch, the refused op's index and kind or `None`: it commits, its stream, its run key)
        type Case = (
            WriteBatch,
            Option<(usize, StoreErrorKind)>,
            StreamId,
            String,
        );
        let mut cases: Vec<Case> = Vec::new();
        for variant in 0..8usize {
            let (stream, key) = (StreamId::random(), format!("run/{}", StreamId::random()));
            let full = WriteBatch::new()
                .create_stream(stream.clone(), anonymous())
                .append(stream.clone(), "")
                .put_record(RecordKind::Run, &key, "run", None, Expect::Absent);
            let (batch, refused) = match variant {
                0 => (full, None),
                1 => (WriteBatch::new().append(open.clone(), "grouped"), None),
                2 => (
                    WriteBatch::new().append(closed.clone(), "late"),
                    Some((0, StoreErrorKind::StreamClosed)),
                ),
                3 => (
                    WriteBatch::new().create_stream(stream.clone(), missing_session.clone()),
                    Some((0, StoreErrorKind::NotFound)),
                ),
                4 => (
                    full.put_record(RecordKind::Alias, &taken, "mine", None, Expect::Absent),
                    Some((3, StoreErrorKind::Conflict)),
                ),
                5 => (
                    WriteBatch::new()
                        .put_record(RecordKind::Run, &key, "run", None, Expect::Absent)
                        .create_stream(stream.clone(), missing_session.clone())
                        .append(stream.clone(), ""),
                    Some((1, StoreErrorKind::NotFound)),
                ),
                6 => (
                    WriteBatch::new().put_record(
                        RecordKind::Alias,
                        &taken,
                        "mine",
                        None,
                        Expect::Absent,
                    ),
                    Some((0, StoreErrorKind::Conflict)),
                ),
                _ => (
                    full.append(closed.clone(), "late"),
                    Some((3, StoreErrorKind::StreamClosed)),
                ),
            };
            if variant == 1 {
                appended += 1;
            }
            cases.push((batch, refused, stream, key));
        }
        // A different order each round, so each kind stands before and after the others.
        cases.rotate_left(round);
        let commits = cases.iter().map(|(batch, ..)| store.commit(batch.clone()));
        let appends = (0..3).map(|i| {
            store.append(
                if i == 1 { &closed } else { &open },
                format!("alone {i}"),
                false,
            )
        });
        let (results, single) = futures::future::join(
            futures::future::join_all(commits),
            futures::future::join_all(appends),
        )
        .await;
        for (i, result) in single.into_iter().enumerate() {
            if i == 1 {
                let err = result.expect_err("an append to a closed stream");
                assert_eq!(
                    err.kind(),
                    StoreErrorKind::StreamClosed,
                    "round {round}: {err}"
                );
            } else {
                result.unwrap_or_else(|e| panic!("round {round}: append {i}: {e}"));
                appended += 1;
            }
        }
        for ((batch, refused, stream, key), result) in cases.iter().zip(results) {
            let at = format!("round {round}, batch {batch:?}");
            match refused {
                Some((index, kind)) => {
                    let err = result.expect_err(&at);
                    assert!(
                        matches!(err, StoreError::BatchOp { index: i, .. } if i == *index),
                        "{at}: {err}"
                    );
                    assert_eq!(err.kind(), *kind, "{at}: {err}");
                    assert!(
                        matches!(
                            store.read_after(stream, 0, 10).await,
                            Err(StoreError::NotFound { .. })
                        ),
                        "{at}: stream created"
                    );
                    assert_eq!(
                        store.get_record(RecordKind::Run, key).await.expect("get"),
                        None,
                        "{at}: record written"
                    );
                }
                None => {
                    let outcome = result.unwrap_or_else(|e| panic!("{at}: {e}"));
                    assert_eq!(outcome.ops.len(), batch.len(), "{at}");
                    if batch.len() > 1 {
                        assert_eq!(
                            store
                                .read_after(stream, 0, 10)
                                .await
                                .expect("read")
                                .events
                                .len(),
                            1,
                            "{at}"
                        );
                        assert_eq!(
                            store
                                .get_record(RecordKind::Run, key)
                                .await
                                .expect("get")
                                .map(|r| r.version),
                            Some(1),
                            "{at}"
                        );
                    }
                }
            }
        }
        let alias = store
            .get_record(RecordKind::Alias, &taken)
            .await
            .expect("get")
            .expect("kept");
        assert_eq!(
            (alias.value.as_str(), alias.version),
            ("first", 1),
            "round {round}"
        );
        assert_eq!(
            store
                .read_after(&closed, 0, 10)
                .await
                .expect("read")
                .events
                .len(),
            1,
            "round {round}: the closed stream"
        );
    }
    let log = store.read_after(&open, 0, 1_000).await.expect("read");
    assert_eq!(
        log.events.len(),
        appended,
        "every grouped append to the open stream, once"
    );
    assert!(
        log.events
            .iter()
            .enumerate()
            .all(|(i, e)| e.id.seq == i as u64 + 1),
        "gap-free"
    );
}
