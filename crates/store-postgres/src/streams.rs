//! Stream rows and their events.
//!
//! How appends keep every log gap-free for readers is explained under `# Durability` in
//! the crate's docs (`lib.rs`).

use durable_mcp_store::{
    EventId, Principal, StoreError, StoreResult, StoredEvent, StreamId, StreamOwner, StreamRead,
};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{GenericClient, Row, Statement, Transaction};

use crate::error::{StepError, from_pg, unavailable};
use crate::pool::{Conn, Statements};
use crate::to_i64;

const INSERT: &str =
    "INSERT INTO streams (id, principal, session, last_event_ms) VALUES ($1, $2, $3, $4)";

/// The whole append in one statement (one round trip, atomic): bump the sequence under
/// the row lock, insert the event, trim events beyond `$5` per stream (`NULL`: keep all),
/// and notify the stream's tails on channel `$6` when this commits (`NULL`: nobody can be
/// waiting, the stream is created in the same transaction). One row: the new
/// sequence (`NULL`: nothing appended) and, as the statement found the stream, whether it
/// was closed (`NULL`: no such stream), so a refusal needs no second round trip.
pub(crate) const APPEND: &str = "WITH bumped AS (
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
        DELETE FROM events e USING bumped b WHERE $5::BIGINT IS NOT NULL AND e.stream = b.id AND e.seq < b.first_seq
    ), notified AS (
        SELECT pg_notify($6, id) FROM bumped WHERE $6::TEXT IS NOT NULL
    )
    SELECT (SELECT last_seq FROM bumped), (SELECT closed FROM streams WHERE id = $1), (SELECT count(*) FROM notified)";
/// Many appends in one statement, to any streams, in the order given (`$1` stream ids,
/// `$2` events, `$3` whether each closes its stream): the streams' rows are locked in id
/// order (so two of these never wait for each other in a cycle), each stream's events get
/// the next sequences, an append to a stream that is closed, or that an earlier append of
/// the list closed, is refused, as is one to a stream that does not exist. Events beyond
/// `$5` per stream are trimmed (`NULL`: keep all; only the range between the stream's old
/// and new first sequence is searched, so the plan stays an index lookup), the tails of every stream appended to are
/// notified on `$6` at commit. One row per append, in order: its sequence (`NULL`: refused)
/// and whether its stream exists.
pub(crate) const APPEND_MANY: &str = "WITH input AS (
        SELECT stream, data, close, ord FROM unnest($1::TEXT[], $2::TEXT[], $3::BOOLEAN[]) WITH ORDINALITY AS t(stream, data, close, ord)
    ), locked AS (
        SELECT id, last_seq, first_seq, closed FROM streams WHERE id = ANY($1) ORDER BY id FOR UPDATE
    ), placed AS (
        SELECT i.ord, i.stream, i.data, i.close, l.last_seq AS base, l.first_seq AS first, row_number() OVER w AS n,
            NOT l.closed AND NOT COALESCE(bool_or(i.close) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), FALSE) AS open
        FROM input i JOIN locked l ON l.id = i.stream
        WINDOW w AS (PARTITION BY i.stream ORDER BY i.ord)
    ), accepted AS (
        SELECT ord, stream, data, close, base + n AS seq, first FROM placed WHERE open
    ), totals AS (
        SELECT stream, max(seq) AS last, bool_or(close) AS closes, min(first) AS kept,
            GREATEST(min(first), max(seq) + 1 - $5::BIGINT) AS first
        FROM accepted GROUP BY stream
    ), bumped AS (
        UPDATE streams s SET last_seq = t.last, closed = t.closes, last_event_ms = $4, first_seq = t.first
        FROM totals t WHERE s.id = t.stream
        RETURNING s.id, s.first_seq
    ), inserted AS (
        INSERT INTO events (stream, seq, data)
        SELECT a.stream, a.seq, a.data FROM accepted a JOIN totals t ON t.stream = a.stream WHERE a.seq >= t.first
    ), trimmed AS (
        DELETE FROM events e USING totals t
        WHERE $5::BIGINT IS NOT NULL AND e.stream = t.stream AND e.seq >= t.kept AND e.seq < t.first
    ), notified AS (
        SELECT pg_notify($6, id) FROM bumped
    )
    SELECT a.seq, p.ord IS NOT NULL, (SELECT count(*) FROM notified)
    FROM input i LEFT JOIN accepted a ON a.ord = i.ord LEFT JOIN placed p ON p.ord = i.ord
    ORDER BY i.ord";
/// Insert an empty stream unless one has its id: no row means it exists (no error, so a
/// transaction it runs in goes on). A missing session still fails the foreign key.
pub(crate) const CREATE: &str =
    "INSERT INTO streams (id, principal, session, last_event_ms) VALUES ($1, $2, $3, $4)
    ON CONFLICT (id) DO NOTHING RETURNING TRUE";
/// Close the stream if open (notifying on `$3` at commit, unless `NULL`); says whether it did, and
/// whether the row existed at all (`NULL`: no such stream).
pub(crate) const CLOSE: &str = "WITH closed AS (
        UPDATE streams SET closed = TRUE, last_event_ms = $2 WHERE id = $1 AND NOT closed RETURNING id
    ), notified AS (
        SELECT pg_notify($3, id) FROM closed WHERE $3::TEXT IS NOT NULL
    )
    SELECT (SELECT count(*) FROM closed) > 0, (SELECT TRUE FROM streams WHERE id = $1), (SELECT count(*) FROM notified)";
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

/// The streams a prune deletes by age: finished (closed) with their last event before the
/// cutoff (the placeholder given). One condition for the prune's selection
/// ([`prune_finished`]) and its preview.
macro_rules! finished_before {
    ($cutoff:literal) => {
        concat!("closed AND last_event_ms < ", $cutoff)
    };
}

const PRUNE_FINISHED: &str = concat!(
    "DELETE FROM streams WHERE id IN (
        SELECT id FROM streams WHERE ",
    finished_before!("$1"),
    " LIMIT $2 FOR UPDATE SKIP LOCKED
    ) RETURNING id"
);
/// Counted as the prune counts them: a stream of a session the prune ends (one idle since
/// before `$2`; NULL: none ends) goes with its session, uncounted.
const COUNT_FINISHED: &str = concat!(
    "SELECT count(*) FROM streams WHERE ",
    finished_before!("$1"),
    " AND ($2::BIGINT IS NULL OR NOT EXISTS (
        SELECT 1 FROM sessions WHERE sessions.id = streams.session AND ",
    crate::sessions::idle_before!("$2"),
    "))"
);
const NOTIFY: &str = "SELECT pg_notify($1, id) FROM unnest($2::TEXT[]) AS id";
/// Delete the events of streams `$2`, whose rows this transaction deleted, and notify their
/// tails on channel `$1` when it commits.
const REMOVED: &str = "WITH deleted AS (DELETE FROM events WHERE stream = ANY($2))
    SELECT pg_notify($1, id) FROM unnest($2::TEXT[]) AS id";

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
        Err(e) if e.code() == Some(&SqlState::FOREIGN_KEY_VIOLATION) => {
            Err(StoreError::not_found("session"))
        }
        Err(e) => Err(from_pg(e)),
    }
}

/// Append one event with a prepared [`APPEND`]; see the crate's `# Durability`. Refused
/// (nothing written) if the stream is closed or unknown.
pub(crate) async fn append_step<C: GenericClient + Sync>(
    client: &C,
    statement: &Statement,
    stream: &StreamId,
    data: &str,
    close: bool,
    max_events: Option<u64>,
    channel: Option<&str>,
) -> Result<EventId, StepError> {
    let max = max_events.map(to_i64);
    let params: [&(dyn ToSql + Sync); 6] = [
        &stream.as_str(),
        &data,
        &close,
        &to_i64(durable_mcp_store::now_ms()),
        &max,
        &channel,
    ];
    let row = client
        .query_one(statement, &params)
        .await
        .map_err(StepError::statement)?;
    let (seq, closed): (Option<i64>, Option<bool>) = (
        row.try_get(0).map_err(StepError::decoding)?,
        row.try_get(1).map_err(StepError::decoding)?,
    );
    match (seq, closed) {
        (Some(seq), _) => Ok(EventId::new(
            stream.clone(),
            u64::try_from(seq).unwrap_or(0),
        )),
        (None, None) => Err(StepError::Refused(StoreError::not_found("stream"))),
        (None, Some(true)) => Err(StepError::Refused(StoreError::StreamClosed {
            stream: stream.to_string(),
        })),
        // Closed or removed by a transaction that committed while this one waited for the
        // row: nothing was written; retryable rather than a guess.
        (None, Some(false)) => Err(StepError::Refused(unavailable(
            "append found its stream open but did not write; retry",
        ))),
    }
}

/// Run `appends` (stream, event, whether it closes the stream) with a prepared
/// [`APPEND_MANY`]: per append, in order, its id or its refusal (`NotFound`,
/// `StreamClosed`; a refused append wrote nothing). `Err` if the statement failed.
pub(crate) async fn append_many_step<C: GenericClient + Sync>(
    client: &C,
    statement: &Statement,
    appends: &[(&StreamId, &str, bool)],
    max_events: Option<u64>,
    channel: &str,
) -> Result<Vec<StoreResult<EventId>>, StepError> {
    let ids: Vec<&str> = appends.iter().map(|(stream, ..)| stream.as_str()).collect();
    let data: Vec<&str> = appends.iter().map(|(_, data, _)| *data).collect();
    let closes: Vec<bool> = appends.iter().map(|(.., close)| *close).collect();
    let max = max_events.map(to_i64);
    let params: [&(dyn ToSql + Sync); 6] = [
        &ids,
        &data,
        &closes,
        &to_i64(durable_mcp_store::now_ms()),
        &max,
        &channel,
    ];
    let rows = client
        .query(statement, &params)
        .await
        .map_err(StepError::statement)?;
    if rows.len() != appends.len() {
        return Err(StepError::Broken(unavailable(format!(
            "{} appends answered with {} rows",
            appends.len(),
            rows.len()
        ))));
    }
    rows.iter()
        .zip(appends)
        .map(|(row, (stream, ..))| {
            let (seq, found): (Option<i64>, bool) = (
                row.try_get(0).map_err(StepError::decoding)?,
                row.try_get(1).map_err(StepError::decoding)?,
            );
            Ok(match (seq, found) {
                (Some(seq), _) => Ok(EventId::new(
                    (*stream).clone(),
                    u64::try_from(seq).unwrap_or(0),
                )),
                (None, false) => Err(StoreError::not_found("stream")),
                (None, true) => Err(StoreError::StreamClosed {
                    stream: stream.to_string(),
                }),
            })
        })
        .collect()
}

/// Create an empty stream with a prepared [`CREATE`]: refused as a conflict if it exists,
/// and as not found if its session does not (that one fails the statement).
pub(crate) async fn create_step<C: GenericClient + Sync>(
    client: &C,
    statement: &Statement,
    id: &StreamId,
    owner: &StreamOwner,
) -> Result<(), StepError> {
    let params: [&(dyn ToSql + Sync); 4] = [
        &id.as_str(),
        &owner.principal.as_str(),
        &owner.session.as_ref().map(|s| s.as_str()),
        &to_i64(durable_mcp_store::now_ms()),
    ];
    match client.query_opt(statement, &params).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(StepError::Refused(StoreError::Conflict { what: "stream" })),
        Err(e) if e.code() == Some(&SqlState::FOREIGN_KEY_VIOLATION) => {
            Err(StepError::Failed(StoreError::not_found("session")))
        }
        Err(e) => Err(StepError::statement(e)),
    }
}

/// Close an open stream without an event with a prepared [`CLOSE`], notifying its tails
/// when this commits: refused as `NotFound` if unknown, `StreamClosed` if already closed.
pub(crate) async fn close_step<C: GenericClient + Sync>(
    client: &C,
    statement: &Statement,
    stream: &StreamId,
    channel: Option<&str>,
) -> Result<(), StepError> {
    let params: [&(dyn ToSql + Sync); 3] = [
        &stream.as_str(),
        &to_i64(durable_mcp_store::now_ms()),
        &channel,
    ];
    let row = client
        .query_one(statement, &params)
        .await
        .map_err(StepError::statement)?;
    let (closed, existed): (bool, Option<bool>) = (
        row.try_get(0).map_err(StepError::decoding)?,
        row.try_get(1).map_err(StepError::decoding)?,
    );
    match (closed, existed) {
        (true, _) => Ok(()),
        (false, None) => Err(StepError::Refused(StoreError::not_found("stream"))),
        (false, Some(_)) => Err(StepError::Refused(StoreError::StreamClosed {
            stream: stream.to_string(),
        })),
    }
}

/// Who owns `stream`.
pub(crate) async fn owner(conn: &mut Conn, stream: &StreamId) -> StoreResult<StreamOwner> {
    let statement = conn.statements.get(&conn.client, OWNER).await?;
    let row = conn
        .client
        .query_opt(&statement, &[&stream.as_str()])
        .await
        .map_err(from_pg)?;
    let row = row.ok_or(StoreError::not_found("stream"))?;
    let principal: String = row.try_get(0).map_err(from_pg)?;
    let session: Option<&str> = row.try_get(1).map_err(from_pg)?;
    let session = session
        .map(str::parse)
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("stream session: {e}")))?;
    Ok(StreamOwner {
        principal: Principal::new(principal),
        session,
    })
}

/// Committed events of `stream` after `after`, at most `limit`.
pub(crate) async fn read_after(
    conn: &mut Conn,
    stream: &StreamId,
    after: u64,
    limit: usize,
) -> StoreResult<StreamRead> {
    let statement = conn.statements.get(&conn.client, READ).await?;
    let after_i = to_i64(after);
    let limit_i = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = conn
        .client
        .query(&statement, &[&stream.as_str(), &after_i, &limit_i])
        .await
        .map_err(from_pg)?;
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
            return Err(StoreError::Corrupt(format!(
                "stream {stream} has no event {expected} (found {seq})"
            )));
        }
        expected += 1;
        let data: String = row.try_get(4).map_err(from_pg)?;
        events.push(StoredEvent {
            id: EventId::new(stream.clone(), u64::try_from(seq).unwrap_or(0)),
            data,
        });
    }
    let reached = expected - 1;
    Ok(StreamRead {
        finished: closed && reached >= last,
        events,
    })
}

/// Inside a prune's transaction: delete at most `limit` finished streams whose last event
/// is older than `cutoff_ms`, skipping rows another transaction holds. Returns their ids.
pub(crate) async fn prune_finished(
    tx: &Transaction<'_>,
    statements: &mut Statements,
    cutoff_ms: u64,
    limit: i64,
) -> StoreResult<Vec<StreamId>> {
    let statement = statements.get(tx, PRUNE_FINISHED).await?;
    stream_ids(
        &tx.query(&statement, &[&to_i64(cutoff_ms), &limit])
            .await
            .map_err(from_pg)?,
    )
}

/// Inside a preview's transaction: how many finished streams have their last event before
/// `cutoff_ms` and are not streams of a session idle since before `idle_cutoff_ms` (what
/// [`prune_finished`] deletes after `sessions::prune_idle`, locked rows included).
pub(crate) async fn count_finished(
    tx: &Transaction<'_>,
    statements: &mut Statements,
    cutoff_ms: u64,
    idle_cutoff_ms: Option<u64>,
) -> StoreResult<u64> {
    let statement = statements.get(tx, COUNT_FINISHED).await?;
    let row = tx
        .query_one(
            &statement,
            &[&to_i64(cutoff_ms), &idle_cutoff_ms.map(to_i64)],
        )
        .await
        .map_err(from_pg)?;
    Ok(row.try_get::<_, i64>(0).map_err(from_pg)?.unsigned_abs())
}

/// Inside the transaction that deleted `streams`' rows, after: delete their events (no
/// foreign key does, see migration 3) and notify their tails on `channel` when it commits.
/// A statement after the rows' delete, so it sees every event committed before the rows
/// were locked; none can come after.
pub(crate) async fn removed(
    tx: &Transaction<'_>,
    statements: &mut Statements,
    channel: &str,
    streams: &[StreamId],
) -> StoreResult<()> {
    per_stream(tx, statements, REMOVED, channel, streams).await
}

/// Inside a transaction: notify the tails of `streams` on `channel` when it commits.
pub(crate) async fn notify(
    tx: &Transaction<'_>,
    statements: &mut Statements,
    channel: &str,
    streams: &[StreamId],
) -> StoreResult<()> {
    per_stream(tx, statements, NOTIFY, channel, streams).await
}

/// Run `sql` (taking `$1` the channel, `$2` the stream ids) for `streams`, if any.
async fn per_stream(
    tx: &Transaction<'_>,
    statements: &mut Statements,
    sql: &'static str,
    channel: &str,
    streams: &[StreamId],
) -> StoreResult<()> {
    if streams.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = streams.iter().map(StreamId::as_str).collect();
    let statement = statements.get(tx, sql).await?;
    tx.execute(&statement, &[&channel, &ids])
        .await
        .map_err(from_pg)?;
    Ok(())
}

fn to_info(row: &tokio_postgres::Row) -> StoreResult<durable_mcp_store::StreamInfo> {
    let corrupt = |e: durable_mcp_store::IdError| StoreError::Corrupt(format!("stream row: {e}"));
    let id: &str = row.try_get(0).map_err(from_pg)?;
    let principal: String = row.try_get(1).map_err(from_pg)?;
    let session: Option<&str> = row.try_get(2).map_err(from_pg)?;
    let first: i64 = row.try_get(3).map_err(from_pg)?;
    let last: i64 = row.try_get(4).map_err(from_pg)?;
    Ok(durable_mcp_store::StreamInfo {
        id: id.parse().map_err(corrupt)?,
        owner: StreamOwner {
            principal: Principal::new(principal),
            session: session.map(str::parse).transpose().map_err(corrupt)?,
        },
        first_seq: u64::try_from(first).unwrap_or(0),
        last_seq: u64::try_from(last).unwrap_or(0),
        closed: row.try_get(5).map_err(from_pg)?,
    })
}

/// Streams in id order after `after`, at most `limit` (ids compare bytewise).
pub(crate) async fn list(
    conn: &mut Conn,
    after: Option<&StreamId>,
    limit: usize,
) -> StoreResult<Vec<durable_mcp_store::StreamInfo>> {
    const LIST: &str = "SELECT id, principal, session, first_seq, last_seq, closed FROM streams
        WHERE id COLLATE \"C\" > $1 ORDER BY id COLLATE \"C\" LIMIT $2";
    let statement = conn.statements.get(&conn.client, LIST).await?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = conn
        .client
        .query(&statement, &[&after.map_or("", |a| a.as_str()), &limit])
        .await
        .map_err(from_pg)?;
    rows.iter().map(to_info).collect()
}

/// One stream's summary.
pub(crate) async fn info(
    conn: &mut Conn,
    stream: &StreamId,
) -> StoreResult<durable_mcp_store::StreamInfo> {
    const ONE: &str =
        "SELECT id, principal, session, first_seq, last_seq, closed FROM streams WHERE id = $1";
    let statement = conn.statements.get(&conn.client, ONE).await?;
    let row = conn
        .client
        .query_opt(&statement, &[&stream.as_str()])
        .await
        .map_err(from_pg)?;
    to_info(&row.ok_or(StoreError::not_found("stream"))?)
}

/// `Store::import_events` in one transaction: the stream's row is locked (or created), the
/// events it already holds are skipped by sequence, the rest must continue it (an empty
/// stream may start at the first retained event of its source), and its tails are
/// notified at commit. Returns how many events were inserted.
pub(crate) async fn import(
    conn: &mut Conn,
    channel: &str,
    stream: &StreamId,
    owner: &StreamOwner,
    events: &[StoredEvent],
    close: bool,
) -> StoreResult<u64> {
    const LOCK: &str = "SELECT last_seq, closed FROM streams WHERE id = $1 FOR UPDATE";
    const INSERT_EVENTS: &str = "INSERT INTO events (stream, seq, data) SELECT $1, seq, data FROM unnest($2::BIGINT[], $3::TEXT[]) AS t(seq, data)";
    const UPDATE: &str = "UPDATE streams SET last_seq = $2, closed = $3, last_event_ms = $4,
        first_seq = CASE WHEN $5 THEN $6 ELSE first_seq END WHERE id = $1";
    let Conn {
        client, statements, ..
    } = conn;
    let tx = client.transaction().await.map_err(from_pg)?;
    let lock = statements.get(&tx, LOCK).await?;
    let (last, closed) = match tx
        .query_opt(&lock, &[&stream.as_str()])
        .await
        .map_err(from_pg)?
    {
        Some(row) => (
            row.try_get::<_, i64>(0).map_err(from_pg)?,
            row.try_get::<_, bool>(1).map_err(from_pg)?,
        ),
        None => {
            insert(&tx, statements, stream, owner).await?;
            (0, false)
        }
    };
    let last = u64::try_from(last).unwrap_or(0);
    let fresh: Vec<&StoredEvent> = events.iter().filter(|e| e.id.seq > last).collect();
    let Some(first) = fresh.first() else {
        tx.commit().await.map_err(from_pg)?;
        return Ok(0);
    };
    if closed {
        return Err(StoreError::StreamClosed {
            stream: stream.to_string(),
        });
    }
    let start = if last == 0 { first.id.seq } else { last + 1 };
    for (i, event) in fresh.iter().enumerate() {
        if event.id.seq != start + i as u64 {
            return Err(durable_mcp_store::import_gap(
                stream,
                start + i as u64,
                event.id.seq,
            ));
        }
    }
    let seqs: Vec<i64> = fresh.iter().map(|e| to_i64(e.id.seq)).collect();
    let data: Vec<&str> = fresh.iter().map(|e| e.data.as_str()).collect();
    let statement = statements.get(&tx, INSERT_EVENTS).await?;
    tx.execute(&statement, &[&stream.as_str(), &seqs, &data])
        .await
        .map_err(from_pg)?;
    let new_last = to_i64(start + fresh.len() as u64 - 1);
    let statement = statements.get(&tx, UPDATE).await?;
    let params: [&(dyn ToSql + Sync); 6] = [
        &stream.as_str(),
        &new_last,
        &close,
        &to_i64(durable_mcp_store::now_ms()),
        &(last == 0),
        &to_i64(start),
    ];
    tx.execute(&statement, &params).await.map_err(from_pg)?;
    notify(&tx, statements, channel, std::slice::from_ref(stream)).await?;
    tx.commit().await.map_err(from_pg)?;
    Ok(fresh.len() as u64)
}

/// Stream ids from `RETURNING id` rows.
pub(crate) fn stream_ids(rows: &[Row]) -> StoreResult<Vec<StreamId>> {
    rows.iter()
        .map(|row| {
            let id: &str = row.try_get(0).map_err(from_pg)?;
            id.parse()
                .map_err(|e| StoreError::Corrupt(format!("stream id {id:?}: {e}")))
        })
        .collect()
}
