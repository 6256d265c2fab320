//! Session rows: the record as JSON text (kept as sent, key order included), keyed by id
//! and principal. `last_seen_ms` lives in its own column, which is authoritative: a touch
//! updates only the column, and every load puts the column's value into the record.

use durable_mcp_store::{
    Principal, SessionChange, SessionId, SessionRecord, StoreError, StoreResult, StreamId,
    StreamOwner,
};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::error::from_pg;
use crate::pool::Conn;
use crate::{streams, to_i64};

const INSERT: &str = "INSERT INTO sessions (id, principal, record, created_at_ms, last_seen_ms) VALUES ($1, $2, $3, $4, $5)";
const LOAD: &str = "SELECT record, last_seen_ms FROM sessions WHERE id = $1 AND principal = $2";
const LOCK: &str =
    "SELECT record, last_seen_ms FROM sessions WHERE id = $1 AND principal = $2 FOR UPDATE";
const WRITE: &str = "UPDATE sessions SET record = $2, last_seen_ms = GREATEST(last_seen_ms, $3) WHERE id = $1 RETURNING last_seen_ms";
const TOUCH: &str = "UPDATE sessions SET last_seen_ms = GREATEST(last_seen_ms, $3)
    WHERE id = $1 AND principal = $2 RETURNING record, last_seen_ms";
const DELETE_STREAMS: &str = "DELETE FROM streams WHERE id IN (SELECT id FROM streams WHERE session = $1 LIMIT $2) RETURNING id";
const DELETE: &str = "DELETE FROM sessions WHERE id = $1";
const LIST_ALL: &str =
    "SELECT record, last_seen_ms FROM sessions ORDER BY created_at_ms, id LIMIT $1";
const LIST_MINE: &str = "SELECT record, last_seen_ms FROM sessions WHERE principal = $2 ORDER BY created_at_ms, id LIMIT $1";
/// The sessions a prune ends: idle since before the cutoff (the placeholder given). One
/// condition for the prune's selection ([`prune_idle`]) and its preview.
macro_rules! idle_before {
    ($cutoff:literal) => {
        concat!("last_seen_ms < ", $cutoff)
    };
}
pub(crate) use idle_before;

const IDLE: &str = concat!(
    "SELECT id FROM sessions WHERE ",
    idle_before!("$1"),
    " LIMIT $2 FOR UPDATE SKIP LOCKED"
);
const COUNT_IDLE: &str = concat!("SELECT count(*) FROM sessions WHERE ", idle_before!("$1"));
const DELETE_STREAMS_OF: &str = "DELETE FROM streams WHERE id IN (SELECT id FROM streams WHERE session = ANY($1) LIMIT $2) RETURNING id";
const DELETE_EMPTY: &str = "DELETE FROM sessions WHERE id = ANY($1) AND NOT EXISTS (SELECT 1 FROM streams WHERE streams.session = sessions.id)";

/// Decode a `(record, last_seen_ms)` row.
fn decode(row: &Row) -> StoreResult<SessionRecord> {
    let text: &str = row.try_get(0).map_err(from_pg)?;
    let last_seen: i64 = row.try_get(1).map_err(from_pg)?;
    let mut record: SessionRecord = serde_json::from_str(text)
        .map_err(|e| StoreError::Corrupt(format!("session record: {e}")))?;
    record.last_seen_ms = u64::try_from(last_seen).unwrap_or(0);
    Ok(record)
}

fn encode(record: &SessionRecord) -> StoreResult<String> {
    serde_json::to_string(record).map_err(|e| StoreError::Corrupt(format!("session record: {e}")))
}

/// Insert a session and its standalone stream, in one transaction.
pub(crate) async fn create(conn: &mut Conn, record: &SessionRecord) -> StoreResult<()> {
    let text = encode(record)?;
    let Conn {
        client, statements, ..
    } = conn;
    let tx = client.transaction().await.map_err(from_pg)?;
    let insert = statements.get(&tx, INSERT).await?;
    let params: [&(dyn ToSql + Sync); 5] = [
        &record.id.as_str(),
        &record.principal.as_str(),
        &text,
        &to_i64(record.created_at_ms),
        &to_i64(record.last_seen_ms),
    ];
    tx.execute(&insert, &params).await.map_err(from_pg)?;
    let owner = StreamOwner {
        principal: record.principal.clone(),
        session: Some(record.id.clone()),
    };
    streams::insert(&tx, statements, &record.standalone_stream, &owner).await?;
    tx.commit().await.map_err(from_pg)
}

/// Load `principal`'s session `id`.
pub(crate) async fn load(
    conn: &mut Conn,
    principal: &Principal,
    id: &SessionId,
) -> StoreResult<SessionRecord> {
    let statement = conn.statements.get(&conn.client, LOAD).await?;
    let row = conn
        .client
        .query_opt(&statement, &[&id.as_str(), &principal.as_str()])
        .await
        .map_err(from_pg)?;
    decode(&row.ok_or(StoreError::not_found("session"))?)
}

/// Apply `change` to `principal`'s session `id`. A touch is one `UPDATE`; any other
/// change reads the row `FOR UPDATE`, applies the change and writes it back in one
/// transaction, so concurrent changes from any worker serialize and none is lost (D4).
pub(crate) async fn update(
    conn: &mut Conn,
    principal: &Principal,
    id: &SessionId,
    change: &SessionChange,
    now_ms: u64,
) -> StoreResult<SessionRecord> {
    let Conn {
        client, statements, ..
    } = conn;
    let now = to_i64(now_ms);
    if matches!(change, SessionChange::Touch) {
        let touch = statements.get(&*client, TOUCH).await?;
        let row = client
            .query_opt(&touch, &[&id.as_str(), &principal.as_str(), &now])
            .await
            .map_err(from_pg)?;
        return decode(&row.ok_or(StoreError::not_found("session"))?);
    }
    let tx = client.transaction().await.map_err(from_pg)?;
    let lock = statements.get(&tx, LOCK).await?;
    let row = tx
        .query_opt(&lock, &[&id.as_str(), &principal.as_str()])
        .await
        .map_err(from_pg)?;
    let mut record = decode(&row.ok_or(StoreError::not_found("session"))?)?;
    record.apply(change, now_ms)?;
    let write = statements.get(&tx, WRITE).await?;
    let row = tx
        .query_one(&write, &[&id.as_str(), &encode(&record)?, &now])
        .await
        .map_err(from_pg)?;
    let last_seen: i64 = row.try_get(0).map_err(from_pg)?;
    record.last_seen_ms = u64::try_from(last_seen).unwrap_or(0);
    tx.commit().await.map_err(from_pg)?;
    Ok(record)
}

/// What one transaction of [`end`] did.
pub(crate) enum Ending {
    /// No such session (for this principal).
    NotFound,
    /// Deleted these streams of the session, and the session with the last of them.
    Ended(Vec<StreamId>),
    /// Deleted these streams; more are left for the next transaction.
    More(Vec<StreamId>),
}

/// One transaction of ending a session: at most `limit` of its streams (with their events)
/// go, and the session row with the last of them. A stream created for the session
/// meanwhile (the row is locked only during each transaction) goes in a later one, or finds
/// no session after its foreign key (or, in a batch, the `FOR KEY SHARE` check of
/// `dmcp_op`).
pub(crate) async fn end(
    conn: &mut Conn,
    principal: &Principal,
    id: &SessionId,
    channel: &str,
    limit: i64,
) -> StoreResult<Ending> {
    let Conn {
        client, statements, ..
    } = conn;
    let tx = client.transaction().await.map_err(from_pg)?;
    let lock = statements.get(&tx, LOCK).await?;
    if tx
        .query_opt(&lock, &[&id.as_str(), &principal.as_str()])
        .await
        .map_err(from_pg)?
        .is_none()
    {
        return Ok(Ending::NotFound);
    }
    let delete_streams = statements.get(&tx, DELETE_STREAMS).await?;
    let gone = streams::stream_ids(
        &tx.query(&delete_streams, &[&id.as_str(), &limit])
            .await
            .map_err(from_pg)?,
    )?;
    streams::removed(&tx, statements, channel, &gone).await?;
    let ending = if (gone.len() as i64) < limit {
        // Its row is locked: no stream was created meanwhile, so the delete cascades to none.
        let delete = statements.get(&tx, DELETE).await?;
        tx.execute(&delete, &[&id.as_str()])
            .await
            .map_err(from_pg)?;
        Ending::Ended(gone)
    } else {
        Ending::More(gone)
    };
    tx.commit().await.map_err(from_pg)?;
    Ok(ending)
}

/// Live sessions, oldest first.
pub(crate) async fn list(
    conn: &mut Conn,
    principal: Option<&Principal>,
    limit: usize,
) -> StoreResult<Vec<SessionRecord>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = match principal {
        Some(principal) => {
            let statement = conn.statements.get(&conn.client, LIST_MINE).await?;
            conn.client
                .query(&statement, &[&limit, &principal.as_str()])
                .await
        }
        None => {
            let statement = conn.statements.get(&conn.client, LIST_ALL).await?;
            conn.client.query(&statement, &[&limit]).await
        }
    }
    .map_err(from_pg)?;
    rows.iter().map(decode).collect()
}

/// Inside a prune's transaction: end at most `limit` sessions idle since before
/// `cutoff_ms`, deleting at most `limit` of their streams; a session goes with its last
/// stream (one with more left is ended by the next batch). Sessions locked by a concurrent
/// change (in use right now) or by a concurrent prune are skipped. Returns how many
/// sessions ended, the streams deleted, and whether more may be due.
pub(crate) async fn prune_idle(
    tx: &tokio_postgres::Transaction<'_>,
    statements: &mut crate::pool::Statements,
    cutoff_ms: u64,
    limit: i64,
) -> StoreResult<(u64, Vec<StreamId>, bool)> {
    let idle = statements.get(tx, IDLE).await?;
    let ids: Vec<String> = tx
        .query(&idle, &[&to_i64(cutoff_ms), &limit])
        .await
        .and_then(|rows| rows.iter().map(|row| row.try_get(0)).collect())
        .map_err(from_pg)?;
    if ids.is_empty() {
        return Ok((0, Vec::new(), false));
    }
    let delete_streams = statements.get(tx, DELETE_STREAMS_OF).await?;
    let gone = streams::stream_ids(
        &tx.query(&delete_streams, &[&ids, &limit])
            .await
            .map_err(from_pg)?,
    )?;
    let delete = statements.get(tx, DELETE_EMPTY).await?;
    let ended = tx.execute(&delete, &[&ids]).await.map_err(from_pg)?;
    let more = ids.len() as i64 == limit || gone.len() as i64 == limit;
    Ok((ended, gone, more))
}

/// Inside a preview's transaction: how many sessions are idle since before `cutoff_ms`
/// (what [`prune_idle`] ends, locked rows included).
pub(crate) async fn count_idle(
    tx: &tokio_postgres::Transaction<'_>,
    statements: &mut crate::pool::Statements,
    cutoff_ms: u64,
) -> StoreResult<u64> {
    let statement = statements.get(tx, COUNT_IDLE).await?;
    let row = tx
        .query_one(&statement, &[&to_i64(cutoff_ms)])
        .await
        .map_err(from_pg)?;
    Ok(row.try_get::<_, i64>(0).map_err(from_pg)?.unsigned_abs())
}
