//! Session rows: the record as JSON, keyed by id and principal.

use durable_mcp_store::{
    Principal, SessionChange, SessionId, SessionRecord, StoreError, StreamId, now_ms,
};
use rusqlite::{Connection, OptionalExtension, params};

use crate::error::from_sqlite;

/// The sessions a prune ends: idle since before the cutoff `?1`. One condition for the
/// prune's selection (`idle`) and its preview.
macro_rules! idle_before {
    () => {
        "last_seen_ms < ?1"
    };
}

const IDLE: &str = concat!(
    "SELECT principal, id FROM sessions WHERE ",
    idle_before!(),
    " LIMIT ?2"
);

const COUNT_IDLE: &str = concat!("SELECT count(*) FROM sessions WHERE ", idle_before!());

fn decode(text: &str) -> Result<SessionRecord, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("session record: {e}")))
}

pub(crate) fn insert(conn: &Connection, record: &SessionRecord) -> Result<(), StoreError> {
    let text = serde_json::to_string(record).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    conn.prepare_cached(
        "INSERT INTO sessions (id, principal, record, last_seen_ms) VALUES (?1, ?2, ?3, ?4)",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            record.id.as_str(),
            record.principal.as_str(),
            text,
            record.last_seen_ms as i64
        ])
    })
    .map_err(from_sqlite)?;
    Ok(())
}

pub(crate) fn load(
    conn: &Connection,
    principal: &Principal,
    id: &SessionId,
) -> Result<SessionRecord, StoreError> {
    let text: Option<String> = conn
        .prepare_cached("SELECT record FROM sessions WHERE id = ?1 AND principal = ?2")
        .and_then(|mut stmt| {
            stmt.query_row(params![id.as_str(), principal.as_str()], |row| row.get(0))
                .optional()
        })
        .map_err(from_sqlite)?;
    decode(&text.ok_or(StoreError::not_found("session"))?)
}

pub(crate) fn exists(conn: &Connection, id: &SessionId) -> Result<bool, StoreError> {
    conn.prepare_cached("SELECT 1 FROM sessions WHERE id = ?1")
        .and_then(|mut stmt| stmt.query_row(params![id.as_str()], |_| Ok(())).optional())
        .map(|row| row.is_some())
        .map_err(from_sqlite)
}

pub(crate) fn update(
    conn: &Connection,
    principal: &Principal,
    id: &SessionId,
    change: &SessionChange,
) -> Result<SessionRecord, StoreError> {
    let mut record = load(conn, principal, id)?;
    record.apply(change, now_ms())?;
    let text = serde_json::to_string(&record).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    conn.prepare_cached("UPDATE sessions SET record = ?2, last_seen_ms = ?3 WHERE id = ?1")
        .and_then(|mut stmt| stmt.execute(params![id.as_str(), text, record.last_seen_ms as i64]))
        .map_err(from_sqlite)?;
    Ok(record)
}

/// End a session: its row goes, and its streams read as gone from this commit on (a prune
/// deletes them with their events, see `streams::drop_ended`). Returns whether it was live,
/// and its open streams, whose tails are to be woken.
pub(crate) fn end(
    conn: &Connection,
    principal: &Principal,
    id: &SessionId,
) -> Result<(bool, Vec<StreamId>), StoreError> {
    let deleted = conn
        .prepare_cached("DELETE FROM sessions WHERE id = ?1 AND principal = ?2")
        .and_then(|mut stmt| stmt.execute(params![id.as_str(), principal.as_str()]))
        .map_err(from_sqlite)?;
    if deleted == 0 {
        return Ok((false, Vec::new()));
    }
    // The session's streams read as gone from this commit on; prunes delete them.
    conn.prepare_cached("INSERT INTO ended_sessions (id) VALUES (?1) ON CONFLICT (id) DO NOTHING")
        .and_then(|mut stmt| stmt.execute(params![id.as_str()]))
        .map_err(from_sqlite)?;
    // The open ones may have tails waiting: they are woken to read that.
    let mut stmt = conn
        .prepare_cached("SELECT id FROM streams WHERE session = ?1 AND closed = 0")
        .map_err(from_sqlite)?;
    let open: Vec<String> = stmt
        .query_map(params![id.as_str()], |row| row.get(0))
        .map_err(from_sqlite)?
        .collect::<Result<_, _>>()
        .map_err(from_sqlite)?;
    Ok((
        true,
        open.into_iter().filter_map(|s| s.parse().ok()).collect(),
    ))
}

pub(crate) fn list(
    conn: &Connection,
    principal: Option<&Principal>,
    limit: usize,
) -> Result<Vec<SessionRecord>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let texts: Vec<String> = match principal {
        Some(p) => conn
            .prepare_cached(
                "SELECT record FROM sessions WHERE principal = ?1 ORDER BY rowid LIMIT ?2",
            )
            .and_then(|mut stmt| {
                stmt.query_map(params![p.as_str(), limit], |row| row.get(0))?
                    .collect()
            }),
        None => conn
            .prepare_cached("SELECT record FROM sessions ORDER BY rowid LIMIT ?1")
            .and_then(|mut stmt| stmt.query_map(params![limit], |row| row.get(0))?.collect()),
    }
    .map_err(from_sqlite)?;
    texts.iter().map(|t| decode(t)).collect()
}

/// Sessions idle since before `cutoff_ms`, as (principal, id).
pub(crate) fn idle(
    conn: &Connection,
    cutoff_ms: u64,
    limit: usize,
) -> Result<Vec<(Principal, SessionId)>, StoreError> {
    let cutoff = i64::try_from(cutoff_ms).unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows: Vec<(String, String)> = conn
        .prepare_cached(IDLE)
        .and_then(|mut stmt| {
            stmt.query_map(params![cutoff, limit], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect()
        })
        .map_err(from_sqlite)?;
    Ok(rows
        .into_iter()
        .filter_map(|(p, id)| Some((Principal::new(p), id.parse().ok()?)))
        .collect())
}

/// How many sessions are idle since before `cutoff_ms` (what [`idle`] selects, unbounded).
pub(crate) fn count_idle(conn: &Connection, cutoff_ms: u64) -> Result<u64, StoreError> {
    let cutoff = i64::try_from(cutoff_ms).unwrap_or(i64::MAX);
    conn.prepare_cached(COUNT_IDLE)
        .and_then(|mut stmt| stmt.query_row(params![cutoff], |row| row.get::<_, i64>(0)))
        .map(i64::unsigned_abs)
        .map_err(from_sqlite)
}
