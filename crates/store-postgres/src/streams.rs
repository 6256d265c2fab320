//! Stream rows and their events.
//!
//! How appends keep every log gap-free for readers is explained under `# Durability` in
//! the crate's docs (`lib.rs`).

use durable_mcp_store::{EventId, Principal, StoreError, StoreResult, StoredEvent, StreamId, StreamOwner, StreamRead};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{GenericClient, Transaction};

use crate::error::{from_pg, unavailable};
use crate::pool::{Conn, Statements};
use crate::sessions::stream_ids;
use crate::to_i64;

const INSERT: &str = "INSERT INTO streams (id, principal, session, last_event_ms) VALUES ($1, $2, $3, $4)";

/// The whole append in one statement (one round trip, atomic): bump the sequence under
/// the row lock, insert the event, trim events beyond `$5` per stream (`NULL`: keep all),
/// and notify the stream's tails on channel `$6` when this commits.
const APPEND: &str = "WITH bumped AS (
        UPDATE streams
        SET last_seq = last_seq + 1,
            closed = $3,
            last_event_ms = $4,
            first_seq = GREATEST(first_seq, last_seq + 2 - $5::BIGINT)
        WHERE id = $1 AND NOT closed
        RETURNING id, last_seq, first_seq
    ), inserted AS (
        INSERT INTO events (stream, seq, data) SELECT id, last_seq, $2 FROM bumped
    ), trimmed AS (
        DELETE FROM events e USING bumped b WHERE e.stream = b.id AND e.seq < b.first_seq
    )
    SELECT last_seq, pg_notify($6, id) FROM bumped";
/// Close the stream if open (notifying on `$3` at commit); says whether it did, and
/// whether the row existed at all (`NULL`: no such stream).
const CLOSE: &str = "WITH closed AS (
        UPDATE streams SET closed = TRUE, last_event_ms = $2 WHERE id = $1 AND NOT closed RETURNING id
    ), notified AS (
        SELECT pg_notify($3, id) FROM closed
    )
    SELECT (SELECT count(*) FROM notified) > 0, (SELECT TRUE FROM streams WHERE id = $1)";
const IS_CLOSED: &str = "SELECT closed FROM streams WHERE id = $1";
const OWNER: &str = "SELECT principal, session FROM streams WHERE id = $1";

/// The stream row and the events after `$2`, from one snapshot. No events: one row with
/// `NULL` seq; no stream: no row.
const READ: &str = "SELECT s.first_seq, s.last_seq, s.closed, e.seq, e.data
    FROM streams s
    LEFT JOIN LATERAL (
        SELECT seq, data FROM events WHERE stream = s.id AND seq > $2 ORDER BY seq LIMIT $3
    ) e ON TRUE
    WHERE s.id = $1
    ORDER BY e.seq";

const PRUNE_FINISHED: &str = "DELETE FROM streams WHERE id IN (
        SELECT id FROM streams WHERE closed AND last_event_ms < $1 ORDER BY id FOR UPDATE SKIP LOCKED
    ) RETURNING id";
const NOTIFY: &str = "SELECT pg_notify($1, id) FROM unnest($2::TEXT[]) AS id";

/// Insert an empty stream. A stream of a session that does not exist (or ended meanwhile)
/// is `NotFound`.
pub(crate) async fn insert<C: GenericClient + Sync>(
    client: &C,
    statements: &mut Statements,
    id: &StreamId,
    owner: &StreamOwner,
) -> StoreResult<()> {
    let statement = statements.get(client, INSERT).await?;
    let params: [&(dyn ToSql + Sync); 4] = [
        &id.as_str(),
        &owner.principal.as_str(),
        &owner.session.as_ref().map(|s| s.as_str()),
        &to_i64(durable_mcp_store::now_ms()),
    ];
    match client.execute(&statement, &params).await {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Some(&SqlState::FOREIGN_KEY_VIOLATION) => Err(StoreError::not_found("session")),
        Err(e) => Err(from_pg(e)),
    }
}

/// Append one event; see the module's `# Durability`.
pub(crate) async fn append<C: GenericClient + Sync>(
    client: &C,
    statements: &mut Statements,
    stream: &StreamId,
    data: &str,
    close: bool,
    max_events: Option<u64>,
    channel: &str,
) -> StoreResult<EventId> {
    let statement = statements.get(client, APPEND).await?;
    let max = max_events.map(to_i64);
    let params: [&(dyn ToSql + Sync); 6] =
        [&stream.as_str(), &data, &close, &to_i64(durable_mcp_store::now_ms()), &max, &channel];
    if let Some(row) = client.query_opt(&statement, &params).await.map_err(from_pg)? {
        let seq: i64 = row.try_get(0).map_err(from_pg)?;
        return Ok(EventId::new(stream.clone(), u64::try_from(seq).unwrap_or(0)));
    }
    // Nothing was appended: the stream is closed or does not exist.
    let statement = statements.get(client, IS_CLOSED).await?;
    let row = client.query_opt(&statement, &[&stream.as_str()]).await.map_err(from_pg)?;
    match row.map(|row| row.try_get::<_, bool>(0)).transpose().map_err(from_pg)? {
        None => Err(StoreError::not_found("stream")),
        Some(true) => Err(StoreError::StreamClosed { stream: stream.to_string() }),
        // Cannot happen (a stream never reopens); retryable rather than a wrong answer.
        Some(false) => Err(unavailable("append found its stream open but did not write; retry")),
    }
}

/// Close an open stream without an event, notifying its tails when this commits:
/// `NotFound` if unknown, `StreamClosed` if already closed.
pub(crate) async fn close<C: GenericClient + Sync>(client: &C, statements: &mut Statements, stream: &StreamId, channel: &str) -> StoreResult<()> {
    let statement = statements.get(client, CLOSE).await?;
    let params: [&(dyn ToSql + Sync); 3] = [&stream.as_str(), &to_i64(durable_mcp_store::now_ms()), &channel];
    let row = client.query_one(&statement, &params).await.map_err(from_pg)?;
    let (closed, existed): (bool, Option<bool>) = (row.try_get(0).map_err(from_pg)?, row.try_get(1).map_err(from_pg)?);
    match (closed, existed) {
        (true, _) => Ok(()),
        (false, None) => Err(StoreError::not_found("stream")),
        (false, Some(_)) => Err(StoreError::StreamClosed { stream: stream.to_string() }),
    }
}

/// Whether stream row `id` exists.
pub(crate) async fn exists<C: GenericClient + Sync>(client: &C, statements: &mut Statements, id: &StreamId) -> StoreResult<bool> {
    let statement = statements.get(client, IS_CLOSED).await?;
    Ok(client.query_opt(&statement, &[&id.as_str()]).await.map_err(from_pg)?.is_some())
}

/// Who owns `stream`.
pub(crate) async fn owner(conn: &mut Conn, stream: &StreamId) -> StoreResult<StreamOwner> {
    let statement = conn.statements.get(&conn.client, OWNER).await?;
    let row = conn.client.query_opt(&statement, &[&stream.as_str()]).await.map_err(from_pg)?;
    let row = row.ok_or(StoreError::not_found("stream"))?;
    let principal: String = row.try_get(0).map_err(from_pg)?;
    let session: Option<&str> = row.try_get(1).map_err(from_pg)?;
    let session = session.map(str::parse).transpose().map_err(|e| StoreError::Corrupt(format!("stream session: {e}")))?;
    Ok(StreamOwner { principal: Principal::new(principal), session })
}

/// Committed events of `stream` after `after`, at most `limit`.
pub(crate) async fn read_after(conn: &mut Conn, stream: &StreamId, after: u64, limit: usize) -> StoreResult<StreamRead> {
    let statement = conn.statements.get(&conn.client, READ).await?;
    let after_i = to_i64(after);
    let limit_i = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = conn.client.query(&statement, &[&stream.as_str(), &after_i, &limit_i]).await.map_err(from_pg)?;
    let Some(head) = rows.first() else {
        return Err(StoreError::not_found("stream"));
    };
    let first: i64 = head.try_get(0).map_err(from_pg)?;
    let last: i64 = head.try_get(1).map_err(from_pg)?;
    let closed: bool = head.try_get(2).map_err(from_pg)?;
    if after_i.saturating_add(1) < first {
        return Err(StoreError::Pruned {
            event: EventId::new(stream.clone(), after).to_string(),
            oldest_retained: u64::try_from(first).unwrap_or(0),
        });
    }
    let mut events = Vec::with_capacity(rows.len());
    let mut expected = after_i.saturating_add(1);
    for row in &rows {
        let Some(seq) = row.try_get::<_, Option<i64>>(3).map_err(from_pg)? else {
            continue;
        };
        if seq != expected {
            // The log itself has a hole: say so rather than answer with a gap (D3, D14).
            return Err(StoreError::Corrupt(format!("stream {stream} has no event {expected} (found {seq})")));
        }
        expected += 1;
        let data: String = row.try_get(4).map_err(from_pg)?;
        events.push(StoredEvent { id: EventId::new(stream.clone(), u64::try_from(seq).unwrap_or(0)), data });
    }
    let reached = expected - 1;
    Ok(StreamRead { finished: closed && reached >= last, events })
}

/// Inside a prune's transaction: delete finished streams whose last event is older than
/// `cutoff_ms`, skipping rows another transaction holds. Returns their ids.
pub(crate) async fn prune_finished(tx: &Transaction<'_>, statements: &mut Statements, cutoff_ms: u64) -> StoreResult<Vec<StreamId>> {
    let statement = statements.get(tx, PRUNE_FINISHED).await?;
    stream_ids(&tx.query(&statement, &[&to_i64(cutoff_ms)]).await.map_err(from_pg)?)
}

/// Inside a transaction: notify the tails of `streams` on `channel` when it commits.
pub(crate) async fn notify(tx: &Transaction<'_>, statements: &mut Statements, channel: &str, streams: &[StreamId]) -> StoreResult<()> {
    if streams.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = streams.iter().map(StreamId::as_str).collect();
    let statement = statements.get(tx, NOTIFY).await?;
    tx.execute(&statement, &[&channel, &ids]).await.map_err(from_pg)?;
    Ok(())
}
