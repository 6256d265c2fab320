//! Contract cases of the operator reads and the import behind `dump`/`load`/`copy`.

use std::sync::Arc;

use crate::{
    EventId, Principal, SessionId, Store, StoreError, StoredEvent, StreamId, StreamOwner, now_ms,
};

fn events(stream: &StreamId, seqs: std::ops::RangeInclusive<u64>) -> Vec<StoredEvent> {
    seqs.map(|seq| StoredEvent {
        id: EventId::new(stream.clone(), seq),
        data: format!("event {seq}"),
    })
    .collect()
}

/// Operators list every stream, in id order and page by page, with its owner, last
/// sequence and whether it is closed; `stream_info` agrees with the listing.
pub async fn ops_list_streams_pages_in_id_order(store: Arc<dyn Store>) {
    let who = Principal::new(format!("ops-{}", StreamId::random()));
    let owner = StreamOwner {
        principal: who.clone(),
        session: None,
    };
    let mut mine = Vec::new();
    for n in 0..3u64 {
        let id = StreamId::random();
        store.create_stream(&id, &owner).await.expect("create");
        for i in 0..n {
            store
                .append(&id, format!("{i}"), i + 1 == n && n == 2)
                .await
                .expect("append");
        }
        mine.push((id, n));
    }
    let mut listed = Vec::new();
    let mut after: Option<StreamId> = None;
    loop {
        let page = store.list_streams(after.as_ref(), 2).await.expect("list");
        assert!(page.len() <= 2, "a page holds at most `limit`");
        let Some(last) = page.last() else { break };
        after = Some(last.id.clone());
        listed.extend(page);
    }
    let ids: Vec<&str> = listed.iter().map(|s| s.id.as_str()).collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(ids, sorted, "id order, no stream twice");
    for (id, n) in &mine {
        let info = listed
            .iter()
            .find(|s| &s.id == id)
            .unwrap_or_else(|| panic!("stream {id} listed"));
        assert_eq!(info.owner, owner);
        assert_eq!(info.last_seq, *n);
        assert_eq!(info.first_seq, 1);
        assert_eq!(info.closed, *n == 2);
        assert_eq!(&store.stream_info(id).await.expect("info"), info);
    }
    assert!(matches!(
        store.stream_info(&StreamId::random()).await,
        Err(StoreError::NotFound { .. })
    ));
}

/// D3 across a move: imported events keep their ids, so a resume after an id seen before
/// the move gets exactly the rest; importing again appends nothing (a resumed copy
/// duplicates nothing), a partial import is completed, and a gap is refused.
pub async fn d3_import_keeps_event_ids_and_resumes_exactly(store: Arc<dyn Store>) {
    let owner = StreamOwner {
        principal: Principal::anonymous(),
        session: None,
    };
    let stream = StreamId::random();
    let all = events(&stream, 1..=6);
    // Interrupted after three events, then run again with all of them.
    assert_eq!(
        store
            .import_events(&stream, &owner, &all[..3], false)
            .await
            .expect("first part"),
        3
    );
    assert_eq!(
        store
            .import_events(&stream, &owner, &all, true)
            .await
            .expect("resumed"),
        3
    );
    assert_eq!(
        store
            .import_events(&stream, &owner, &all, true)
            .await
            .expect("again"),
        0
    );
    let read = store
        .read_after(&stream, 2, usize::MAX)
        .await
        .expect("read");
    let got: Vec<(u64, &str)> = read
        .events
        .iter()
        .map(|e| (e.id.seq, e.data.as_str()))
        .collect();
    let want: Vec<(u64, String)> = (3..=6).map(|seq| (seq, format!("event {seq}"))).collect();
    assert_eq!(
        got,
        want.iter()
            .map(|(s, d)| (*s, d.as_str()))
            .collect::<Vec<_>>()
    );
    assert!(read.finished, "closed with its last event");
    assert_eq!(store.stream_owner(&stream).await.expect("owner"), owner);
    let gap = StreamId::random();
    store
        .import_events(&gap, &owner, &events(&gap, 1..=2), false)
        .await
        .expect("start");
    let err = store
        .import_events(&gap, &owner, &events(&gap, 4..=5), false)
        .await
        .expect_err("a gap");
    assert_eq!(err.kind(), crate::StoreErrorKind::Refused, "{err}");
    assert_eq!(
        store.stream_info(&gap).await.expect("info").last_seq,
        2,
        "nothing of a refused import"
    );
    // A session's standalone stream exists (empty) once the session is loaded: its events
    // go into it.
    let record = super::session(&Principal::anonymous());
    store.create_session(record.clone()).await.expect("session");
    let standalone = record.standalone_stream.clone();
    let owner = StreamOwner {
        principal: record.principal.clone(),
        session: Some(record.id.clone()),
    };
    assert_eq!(
        store
            .import_events(&standalone, &owner, &events(&standalone, 1..=2), false)
            .await
            .expect("standalone"),
        2
    );
    assert_eq!(
        store
            .read_after(&standalone, 1, 10)
            .await
            .expect("read")
            .events
            .len(),
        1
    );
    let _: SessionId = record.id;
}

/// `/readyz` and `doctor`: the store answers its status, its schema (if it has one) is
/// the one this build writes, and its clock (if it has its own) is this host's, give or
/// take a minute.
pub async fn ops_status_reports_current_schema_and_clock(store: Arc<dyn Store>) {
    let status = store.status().await.expect("status");
    if let Some(schema) = status.schema {
        assert!(schema.is_current(), "{schema:?}");
    }
    if let Some(server) = status.server_time_ms {
        assert!(
            server.abs_diff(now_ms()) < 60_000,
            "server clock {server} vs {}",
            now_ms()
        );
    }
    for setting in &status.settings {
        assert!(!setting.name.is_empty());
    }
}

/// D14 across a move: a stream whose oldest events were trimmed at its source keeps its
/// first retained id after an import (a resume from before it is `Pruned`, never a
/// shortened stream), or, on a backend that cannot, the import is refused and appends
/// nothing.
pub async fn d14_import_of_a_trimmed_stream_keeps_its_start_or_is_refused(store: Arc<dyn Store>) {
    let owner = StreamOwner {
        principal: Principal::anonymous(),
        session: None,
    };
    let stream = StreamId::random();
    match store
        .import_events(&stream, &owner, &events(&stream, 5..=7), true)
        .await
    {
        Ok(appended) => {
            assert_eq!(appended, 3);
            let info = store.stream_info(&stream).await.expect("info");
            assert_eq!((info.first_seq, info.last_seq, info.closed), (5, 7, true));
            let read = store
                .read_after(&stream, 4, usize::MAX)
                .await
                .expect("read");
            assert_eq!(
                read.events.iter().map(|e| e.id.seq).collect::<Vec<_>>(),
                [5, 6, 7]
            );
            assert!(read.finished);
            let err = store
                .read_after(&stream, 0, 10)
                .await
                .expect_err("events 1..4 are not there");
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
        }
        Err(err) => {
            assert_eq!(err.kind(), crate::StoreErrorKind::Refused, "{err}");
            let info = store.stream_info(&stream).await;
            assert!(
                info.is_err() || info.is_ok_and(|i| i.last_seq == 0),
                "nothing of a refused import"
            );
        }
    }
}
