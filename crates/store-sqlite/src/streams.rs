//! Stream rows and their events.

use durable_mcp_store::{
    EventId, Principal, StoreError, StoredEvent, StreamId, StreamOwner, StreamRead, now_ms,
};
use rusqlite::{Connection, OptionalExtension, params};

use crate::error::from_sqlite;

/// The condition that a `streams` row is live: it has no session, or its session has not
/// ended (an ended session's streams stay until a prune deletes them, see
/// [`drop_ended`], and read as gone meanwhile).
macro_rules! live {
    () => {
        "(session IS NULL OR NOT EXISTS (SELECT 1 FROM ended_sessions WHERE ended_sessions.id = streams.session))"
    };
}

/// The streams a prune deletes by age: finished (closed) with their last event before the
/// cutoff `?1`, whatever their session (the finished streams of an ended session are
/// counted here too, see the writer's prune). One condition for the prune's selection
/// ([`prune_finished`]) and its preview.
macro_rules! finished {
    () => {
        "closed = 1 AND last_event_ms < ?1"
    };
}

const PRUNE_FINISHED: &str = concat!("SELECT id FROM streams WHERE ", finished!(), " LIMIT ?2");
const COUNT_FINISHED: &str = concat!("SELECT count(*) FROM streams WHERE ", finished!());

/// Insert stream row `id`: `Conflict` if one exists (one statement, no read before it).
pub(crate) fn insert(
    conn: &Connection,
    id: &StreamId,
    owner: &StreamOwner,
) -> Result<(), StoreError> {
    let inserted = conn
        .prepare_cached("INSERT INTO streams (id, principal, session, last_event_ms) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (id) DO NOTHING")
        .and_then(|mut stmt| stmt.execute(params![id.as_str(), owner.principal.as_str(), owner.session.as_ref().map(|s| s.as_str()), now_ms() as i64]))
        .map_err(from_sqlite)?;
    if inserted == 1 {
        Ok(())
    } else {
        Err(StoreError::Conflict { what: "stream" })
    }
}

/// Whether a stream row `id` exists.
pub(crate) fn exists(conn: &Connection, id: &StreamId) -> Result<bool, StoreError> {
    conn.prepare_cached(concat!("SELECT 1 FROM streams WHERE id = ?1 AND ", live!()))
        .and_then(|mut stmt| stmt.exists(params![id.as_str()]))
        .map_err(from_sqlite)
}

/// Close an open stream without an event: `NotFound` if unknown, `StreamClosed` if closed.
pub(crate) fn close(conn: &Connection, stream: &StreamId) -> Result<(), StoreError> {
    let changed = conn
        .prepare_cached(concat!(
            "UPDATE streams SET closed = 1, last_event_ms = ?2 WHERE id = ?1 AND closed = 0 AND ",
            live!()
        ))
        .and_then(|mut stmt| stmt.execute(params![stream.as_str(), now_ms() as i64]))
        .map_err(from_sqlite)?;
    match changed {
        0 if exists(conn, stream)? => Err(StoreError::StreamClosed {
            stream: stream.to_string(),
        }),
        0 => Err(StoreError::not_found("stream")),
        _ => Ok(()),
    }
}

/// Append one event: the sequence comes from the stream row, so ids are gap-free and the
/// single writer orders them. Two statements: the row moves on and returns its new last
/// sequence (an open stream only), then the event goes in under it.
pub(crate) fn append(
    conn: &Connection,
    stream: &StreamId,
    data: &str,
    close: bool,
    max_events: Option<u64>,
) -> Result<EventId, StoreError> {
    let seq: Option<i64> = conn
        .prepare_cached(concat!(
            "UPDATE streams SET last_seq = last_seq + 1, closed = ?2, last_event_ms = ?3 WHERE id = ?1 AND closed = 0 AND ",
            live!(),
            " RETURNING last_seq"
        ))
        .and_then(|mut stmt| stmt.query_row(params![stream.as_str(), close, now_ms() as i64], |row| row.get(0)).optional())
        .map_err(from_sqlite)?;
    let Some(seq) = seq else {
        // Refused: say why (the stream is unknown, or closed).
        return Err(if exists(conn, stream)? {
            StoreError::StreamClosed {
                stream: stream.to_string(),
            }
        } else {
            StoreError::not_found("stream")
        });
    };
    conn.prepare_cached("INSERT INTO events (stream, seq, data) VALUES (?1, ?2, ?3)")
        .and_then(|mut stmt| stmt.execute(params![stream.as_str(), seq, data]))
        .map_err(from_sqlite)?;
    if let Some(max) = max_events {
        let keep_from = seq - i64::try_from(max).unwrap_or(i64::MAX) + 1;
        if keep_from > 1 {
            conn.prepare_cached("DELETE FROM events WHERE stream = ?1 AND seq < ?2")
                .and_then(|mut stmt| stmt.execute(params![stream.as_str(), keep_from]))
                .map_err(from_sqlite)?;
            conn.prepare_cached(
                "UPDATE streams SET first_seq = ?2 WHERE id = ?1 AND first_seq < ?2",
            )
            .and_then(|mut stmt| stmt.execute(params![stream.as_str(), keep_from]))
            .map_err(from_sqlite)?;
        }
    }
    Ok(EventId::new(
        stream.clone(),
        u64::try_from(seq).unwrap_or(0),
    ))
}

pub(crate) fn owner(conn: &Connection, stream: &StreamId) -> Result<StreamOwner, StoreError> {
    let row: Option<(String, Option<String>)> = conn
        .prepare_cached(concat!(
            "SELECT principal, session FROM streams WHERE id = ?1 AND ",
            live!()
        ))
        .and_then(|mut stmt| {
            stmt.query_row(params![stream.as_str()], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .optional()
        })
        .map_err(from_sqlite)?;
    let (principal, session) = row.ok_or(StoreError::not_found("stream"))?;
    let session = session
        .map(|s| s.parse())
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("stream session: {e}")))?;
    Ok(StreamOwner {
        principal: Principal::new(principal),
        session,
    })
}

pub(crate) fn read_after(
    conn: &mut Connection,
    stream: &StreamId,
    after: u64,
    limit: usize,
) -> Result<StreamRead, StoreError> {
    // One read transaction: the stream row and its events come from the same snapshot.
    let tx = conn.transaction().map_err(from_sqlite)?;
    let row: Option<(i64, i64, bool)> = tx
        .prepare_cached(concat!(
            "SELECT first_seq, last_seq, closed FROM streams WHERE id = ?1 AND ",
            live!()
        ))
        .and_then(|mut stmt| {
            stmt.query_row(params![stream.as_str()], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })
            .optional()
        })
        .map_err(from_sqlite)?;
    let (first, last, closed) = row.ok_or(StoreError::not_found("stream"))?;
    let after_i = i64::try_from(after).unwrap_or(i64::MAX);
    if after_i.saturating_add(1) < first {
        return Err(StoreError::Pruned {
            event: EventId::new(stream.clone(), after).to_string(),
            oldest_retained: u64::try_from(first).unwrap_or(0),
        });
    }
    let limit_i = i64::try_from(limit).unwrap_or(i64::MAX);
    let events: Vec<StoredEvent> = {
        let mut stmt = tx
            .prepare_cached(
                "SELECT seq, data FROM events WHERE stream = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
            )
            .map_err(from_sqlite)?;
        let rows = stmt
            .query_map(params![stream.as_str(), after_i, limit_i], |row| {
                let seq: i64 = row.get(0)?;
                let data: String = row.get(1)?;
                Ok((seq, data))
            })
            .map_err(from_sqlite)?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, data) = row.map_err(from_sqlite)?;
            out.push(StoredEvent {
                id: EventId::new(stream.clone(), u64::try_from(seq).unwrap_or(0)),
                data,
            });
        }
        out
    };
    tx.commit().map_err(from_sqlite)?;
    let reached = events
        .last()
        .map_or(after_i, |e| i64::try_from(e.id.seq).unwrap_or(0));
    Ok(StreamRead {
        finished: closed && reached >= last,
        events,
    })
}

/// Delete at most `limit` finished streams whose last event is older than `cutoff_ms`;
/// returns their ids.
pub(crate) fn prune_finished(
    conn: &Connection,
    cutoff_ms: u64,
    limit: usize,
) -> Result<Vec<StreamId>, StoreError> {
    let cutoff = i64::try_from(cutoff_ms).unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let ids: Vec<String> = conn
        .prepare_cached(PRUNE_FINISHED)
        .and_then(|mut stmt| {
            stmt.query_map(params![cutoff, limit], |row| row.get(0))?
                .collect()
        })
        .map_err(from_sqlite)?;
    for id in &ids {
        conn.prepare_cached("DELETE FROM events WHERE stream = ?1")
            .and_then(|mut stmt| stmt.execute(params![id]))
            .map_err(from_sqlite)?;
        conn.prepare_cached("DELETE FROM streams WHERE id = ?1")
            .and_then(|mut stmt| stmt.execute(params![id]))
            .map_err(from_sqlite)?;
    }
    Ok(ids.into_iter().filter_map(|id| id.parse().ok()).collect())
}

/// How many finished streams have their last event before `cutoff_ms` (what
/// [`prune_finished`] selects, unbounded).
pub(crate) fn count_finished(conn: &Connection, cutoff_ms: u64) -> Result<u64, StoreError> {
    let cutoff = i64::try_from(cutoff_ms).unwrap_or(i64::MAX);
    conn.prepare_cached(COUNT_FINISHED)
        .and_then(|mut stmt| stmt.query_row(params![cutoff], |row| row.get::<_, i64>(0)))
        .map(i64::unsigned_abs)
        .map_err(from_sqlite)
}

/// Delete at most `limit` streams of ended sessions (with their events); returns their
/// ids. Once an ended session has no stream left, its mark goes too.
pub(crate) fn drop_ended(conn: &Connection, limit: usize) -> Result<Vec<StreamId>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let ids: Vec<String> = conn
        .prepare_cached("SELECT streams.id FROM ended_sessions JOIN streams ON streams.session = ended_sessions.id LIMIT ?1")
        .and_then(|mut stmt| stmt.query_map(params![limit], |row| row.get(0))?.collect())
        .map_err(from_sqlite)?;
    for id in &ids {
        conn.prepare_cached("DELETE FROM events WHERE stream = ?1")
            .and_then(|mut stmt| stmt.execute(params![id]))
            .map_err(from_sqlite)?;
        conn.prepare_cached("DELETE FROM streams WHERE id = ?1")
            .and_then(|mut stmt| stmt.execute(params![id]))
            .map_err(from_sqlite)?;
    }
    if (ids.len() as i64) < limit {
        conn.prepare_cached("DELETE FROM ended_sessions WHERE NOT EXISTS (SELECT 1 FROM streams WHERE streams.session = ended_sessions.id)")
            .and_then(|mut stmt| stmt.execute([]))
            .map_err(from_sqlite)?;
    }
    Ok(ids.into_iter().filter_map(|id| id.parse().ok()).collect())
}

const INFO_COLUMNS: &str =
    "SELECT id, principal, session, first_seq, last_seq, closed FROM streams";

fn info_row(
    row: &rusqlite::Row<'_>,
) -> rusqlite::Result<(String, String, Option<String>, i64, i64, bool)> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
    ))
}

fn to_info(
    (id, principal, session, first, last, closed): (String, String, Option<String>, i64, i64, bool),
) -> Result<durable_mcp_store::StreamInfo, StoreError> {
    let corrupt = |e: durable_mcp_store::IdError| StoreError::Corrupt(format!("stream row: {e}"));
    let session = session.map(|s| s.parse()).transpose().map_err(corrupt)?;
    Ok(durable_mcp_store::StreamInfo {
        id: id.parse().map_err(corrupt)?,
        owner: StreamOwner {
            principal: Principal::new(principal),
            session,
        },
        first_seq: u64::try_from(first).unwrap_or(0),
        last_seq: u64::try_from(last).unwrap_or(0),
        closed,
    })
}

/// Streams in id order after `after`, at most `limit`.
pub(crate) fn list(
    conn: &Connection,
    after: Option<&StreamId>,
    limit: usize,
) -> Result<Vec<durable_mcp_store::StreamInfo>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let sql = format!(
        "{INFO_COLUMNS} WHERE id > ?1 AND {} ORDER BY id LIMIT ?2",
        live!()
    );
    let rows = conn
        .prepare_cached(&sql)
        .and_then(|mut stmt| {
            stmt.query_map(params![after.map_or("", |a| a.as_str()), limit], info_row)?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(from_sqlite)?;
    rows.into_iter().map(to_info).collect()
}

/// One stream's summary.
pub(crate) fn info(
    conn: &Connection,
    stream: &StreamId,
) -> Result<durable_mcp_store::StreamInfo, StoreError> {
    let sql = format!("{INFO_COLUMNS} WHERE id = ?1 AND {}", live!());
    let row = conn
        .prepare_cached(&sql)
        .and_then(|mut stmt| {
            stmt.query_row(params![stream.as_str()], info_row)
                .optional()
        })
        .map_err(from_sqlite)?;
    to_info(row.ok_or(StoreError::not_found("stream"))?)
}

/// `Store::import_events` inside the writer's savepoint: events the stream already holds
/// are skipped by sequence; the rest must continue it (an empty stream may start at the
/// first retained event of its source); returns how many were inserted.
pub(crate) fn import(
    conn: &Connection,
    stream: &StreamId,
    events: &[StoredEvent],
    close: bool,
) -> Result<u64, StoreError> {
    let (last, closed): (i64, bool) = conn
        .prepare_cached(concat!(
            "SELECT last_seq, closed FROM streams WHERE id = ?1 AND ",
            live!()
        ))
        .and_then(|mut stmt| {
            stmt.query_row(params![stream.as_str()], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
        })
        .map_err(from_sqlite)?;
    let last = u64::try_from(last).unwrap_or(0);
    let fresh: Vec<&StoredEvent> = events.iter().filter(|e| e.id.seq > last).collect();
    let Some(first) = fresh.first() else {
        return Ok(0);
    };
    if closed {
        return Err(StoreError::StreamClosed {
            stream: stream.to_string(),
        });
    }
    let start = if last == 0 { first.id.seq } else { last + 1 };
    for (i, event) in fresh.iter().enumerate() {
        let expected = start + i as u64;
        if event.id.seq != expected {
            return Err(durable_mcp_store::import_gap(
                stream,
                expected,
                event.id.seq,
            ));
        }
        conn.prepare_cached("INSERT INTO events (stream, seq, data) VALUES (?1, ?2, ?3)")
            .and_then(|mut stmt| {
                stmt.execute(params![stream.as_str(), seq_i64(expected), event.data])
            })
            .map_err(from_sqlite)?;
    }
    let new_last = start + fresh.len() as u64 - 1;
    conn.prepare_cached(
        "UPDATE streams SET last_seq = ?2, closed = ?3, last_event_ms = ?4 WHERE id = ?1",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            stream.as_str(),
            seq_i64(new_last),
            close,
            now_ms() as i64
        ])
    })
    .map_err(from_sqlite)?;
    if last == 0 {
        conn.prepare_cached("UPDATE streams SET first_seq = ?2 WHERE id = ?1")
            .and_then(|mut stmt| stmt.execute(params![stream.as_str(), seq_i64(start)]))
            .map_err(from_sqlite)?;
    }
    Ok(fresh.len() as u64)
}

/// A sequence as SQLite stores it (sequences never come near `i64::MAX`).
fn seq_i64(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}
