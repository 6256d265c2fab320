//! Journal records: one row per (kind, key) with a version counter and an optional expiry.
//!
//! Every write is one statement whose condition is part of the statement, so PostgreSQL
//! decides races on its row locks: of two `Expect::Absent` writers the second finds the
//! first's row under `ON CONFLICT` (after waiting for its commit) and writes nothing; of two
//! `Expect::Version` writers the second re-checks the version on the updated row and
//! writes nothing. "Nothing written" is [`StoreError::Conflict`]. A row whose `expires_at`
//! has passed counts as absent everywhere, and `prune` deletes it.
//!
//! Keys use the `"C"` collation: key order is byte order (as in every other backend), and
//! `key >= prefix AND key < end` selects exactly the keys with the prefix through the
//! primary key's index.

use durable_mcp_store::{Expect, Record, RecordKind, StoreError, StoreResult, prefix_end};
use tokio_postgres::types::ToSql;
use tokio_postgres::{GenericClient, Row, Statement, Transaction};

use crate::error::{StepError, from_pg};
use crate::pool::{Conn, Statements};
use crate::to_i64;

/// First commit wins: insert, or replace a row that has expired.
const PUT_ABSENT: &str = "INSERT INTO records (kind, key, version, value, expires_at) VALUES ($1, $2, 1, $3, $4)
    ON CONFLICT (kind, key) DO UPDATE SET version = 1, value = EXCLUDED.value, expires_at = EXCLUDED.expires_at
    WHERE records.expires_at IS NOT NULL AND records.expires_at <= $5
    RETURNING version";
/// Compare-and-set on the version of an unexpired row.
const PUT_VERSION: &str = "UPDATE records SET version = version + 1, value = $3, expires_at = $4
    WHERE kind = $1 AND key = $2 AND version = $5 AND (expires_at IS NULL OR expires_at > $6)
    RETURNING version";
const GET: &str = "SELECT key, version, value, expires_at FROM records
    WHERE kind = $1 AND key = $2 AND (expires_at IS NULL OR expires_at > $3)";
const LIST_RANGE: &str = "SELECT key, version, value, expires_at FROM records
    WHERE kind = $1 AND key >= $2 AND key < $3 AND (expires_at IS NULL OR expires_at > $4)
    ORDER BY key LIMIT $5";
const LIST_FROM: &str = "SELECT key, version, value, expires_at FROM records
    WHERE kind = $1 AND key >= $2 AND (expires_at IS NULL OR expires_at > $3)
    ORDER BY key LIMIT $4";
/// Delete the range; count the rows that were still unexpired (the others were absent).
const DELETE_RANGE: &str = "WITH deleted AS (
        DELETE FROM records WHERE kind = $1 AND key >= $2 AND key < $3 RETURNING expires_at
    )
    SELECT count(*) FROM deleted WHERE expires_at IS NULL OR expires_at > $4";
const DELETE_FROM: &str = "WITH deleted AS (
        DELETE FROM records WHERE kind = $1 AND key >= $2 RETURNING expires_at
    )
    SELECT count(*) FROM deleted WHERE expires_at IS NULL OR expires_at > $3";
/// At most `$4` (`$3` for `_FROM`) records of a prefix, for [`delete_some`]: how many were
/// deleted, and how many of them were unexpired.
const DELETE_SOME_RANGE: &str = "WITH deleted AS (
        DELETE FROM records WHERE kind = $1 AND key IN (
            SELECT key FROM records WHERE kind = $1 AND key >= $2 AND key < $3 LIMIT $4
        ) RETURNING expires_at
    )
    SELECT count(*), count(*) FILTER (WHERE expires_at IS NULL OR expires_at > $5) FROM deleted";
const DELETE_SOME_FROM: &str = "WITH deleted AS (
        DELETE FROM records WHERE kind = $1 AND key IN (
            SELECT key FROM records WHERE kind = $1 AND key >= $2 LIMIT $3
        ) RETURNING expires_at
    )
    SELECT count(*), count(*) FILTER (WHERE expires_at IS NULL OR expires_at > $4) FROM deleted";
/// One record at one version, unexpired (run by [`delete_version_step`]).
pub(crate) const DELETE_ONE: &str = "DELETE FROM records
    WHERE kind = $1 AND key = $2 AND version = $3 AND (expires_at IS NULL OR expires_at > $4)";
/// The records a prune deletes: expired at the time given (a placeholder). One condition
/// for the prune's selection ([`prune_expired`]) and its preview.
macro_rules! expired_at {
    ($now:literal) => {
        concat!("expires_at <= ", $now)
    };
}

/// Rows being written right now are skipped (and left for the next prune); a locked row
/// is re-checked after its write, so a row renewed meanwhile is not deleted.
const PRUNE_EXPIRED: &str = concat!(
    "DELETE FROM records WHERE (kind, key) IN (
        SELECT kind, key FROM records WHERE ",
    expired_at!("$1"),
    " LIMIT $2 FOR UPDATE SKIP LOCKED
    )"
);
const COUNT_EXPIRED: &str = concat!("SELECT count(*) FROM records WHERE ", expired_at!("$1"));

/// Decode a `(key, version, value, expires_at)` row.
fn decode(row: &Row) -> StoreResult<Record> {
    Record::from_columns(
        row.try_get(0).map_err(from_pg)?,
        row.try_get(1).map_err(from_pg)?,
        row.try_get(2).map_err(from_pg)?,
        row.try_get(3).map_err(from_pg)?,
    )
}

/// The statement [`put_step`] runs for `expect`.
pub(crate) fn put_sql(expect: Expect) -> &'static str {
    match expect {
        Expect::Absent => PUT_ABSENT,
        Expect::Version(_) => PUT_VERSION,
    }
}

/// Write `value` under `expect` with the prepared [`put_sql`] and return the new version;
/// see the module docs. A failed condition is refused as `StoreError::Conflict`.
pub(crate) async fn put_step<C: GenericClient + Sync>(
    client: &C,
    statement: &Statement,
    kind: RecordKind,
    key: &str,
    value: &str,
    expires_at_ms: Option<u64>,
    expect: Expect,
) -> Result<u64, StepError> {
    // Expiry is judged now, at the write.
    let (kind, now, expires_at) = (
        kind.as_str(),
        to_i64(durable_mcp_store::now_ms()),
        expires_at_ms.map(to_i64),
    );
    let row = match expect {
        Expect::Absent => {
            let params: [&(dyn ToSql + Sync); 5] = [&kind, &key, &value, &expires_at, &now];
            client.query_opt(statement, &params).await
        }
        Expect::Version(expected) => {
            // No stored version is above `i64::MAX`: such an expectation can never hold.
            let Ok(expected) = i64::try_from(expected) else {
                return Err(StepError::Refused(StoreError::Conflict { what: "record" }));
            };
            let params: [&(dyn ToSql + Sync); 6] =
                [&kind, &key, &value, &expires_at, &expected, &now];
            client.query_opt(statement, &params).await
        }
    }
    .map_err(StepError::statement)?;
    let row = row.ok_or(StepError::Refused(StoreError::Conflict { what: "record" }))?;
    let version: i64 = row.try_get(0).map_err(StepError::decoding)?;
    u64::try_from(version).map_err(|_| {
        StepError::Broken(StoreError::Corrupt(format!(
            "record {key:?} has version {version}"
        )))
    })
}

/// [`put_step`] on its own (one statement, committed when it returns).
pub(crate) async fn put(
    conn: &mut Conn,
    kind: RecordKind,
    key: &str,
    value: &str,
    expires_at_ms: Option<u64>,
    expect: Expect,
) -> StoreResult<u64> {
    let statement = conn.statements.get(&conn.client, put_sql(expect)).await?;
    put_step(
        &conn.client,
        &statement,
        kind,
        key,
        value,
        expires_at_ms,
        expect,
    )
    .await
    .map_err(StepError::into_error)
}

/// Delete record `key` with the prepared [`DELETE_ONE`] only if it is unexpired at exactly
/// `version`; otherwise refused as `StoreError::Conflict`.
pub(crate) async fn delete_version_step<C: GenericClient + Sync>(
    client: &C,
    statement: &Statement,
    kind: RecordKind,
    key: &str,
    version: u64,
    now_ms: u64,
) -> Result<(), StepError> {
    let Ok(version) = i64::try_from(version) else {
        return Err(StepError::Refused(StoreError::Conflict { what: "record" }));
    };
    let params: [&(dyn ToSql + Sync); 4] = [&kind.as_str(), &key, &version, &to_i64(now_ms)];
    match client
        .execute(statement, &params)
        .await
        .map_err(StepError::statement)?
    {
        0 => Err(StepError::Refused(StoreError::Conflict { what: "record" })),
        _ => Ok(()),
    }
}

/// The unexpired record `key` of `kind`, if any.
pub(crate) async fn get(
    conn: &mut Conn,
    kind: RecordKind,
    key: &str,
    now_ms: u64,
) -> StoreResult<Option<Record>> {
    let statement = conn.statements.get(&conn.client, GET).await?;
    let row = conn
        .client
        .query_opt(&statement, &[&kind.as_str(), &key, &to_i64(now_ms)])
        .await
        .map_err(from_pg)?;
    row.as_ref().map(decode).transpose()
}

/// Unexpired records of `kind` whose key starts with `prefix`, in key order, at most
/// `limit`: one statement, so one snapshot.
pub(crate) async fn list(
    conn: &mut Conn,
    kind: RecordKind,
    prefix: &str,
    limit: usize,
    now_ms: u64,
) -> StoreResult<Vec<Record>> {
    let (kind, now, limit) = (
        kind.as_str(),
        to_i64(now_ms),
        i64::try_from(limit).unwrap_or(i64::MAX),
    );
    let rows = match prefix_end(prefix) {
        Some(end) => {
            let statement = conn.statements.get(&conn.client, LIST_RANGE).await?;
            let params: [&(dyn ToSql + Sync); 5] = [&kind, &prefix, &end, &now, &limit];
            conn.client.query(&statement, &params).await
        }
        None => {
            let statement = conn.statements.get(&conn.client, LIST_FROM).await?;
            let params: [&(dyn ToSql + Sync); 4] = [&kind, &prefix, &now, &limit];
            conn.client.query(&statement, &params).await
        }
    }
    .map_err(from_pg)?;
    rows.iter().map(decode).collect()
}

/// The statement [`delete_step`] runs for `prefix`.
pub(crate) fn delete_sql(prefix: &str) -> &'static str {
    if prefix_end(prefix).is_some() {
        DELETE_RANGE
    } else {
        DELETE_FROM
    }
}

/// Delete every record of `kind` whose key starts with `prefix` with the prepared
/// [`delete_sql`], in one statement; returns how many of them were unexpired. Never refused.
pub(crate) async fn delete_step<C: GenericClient + Sync>(
    client: &C,
    statement: &Statement,
    kind: RecordKind,
    prefix: &str,
    now_ms: u64,
) -> Result<u64, StepError> {
    let (kind, now) = (kind.as_str(), to_i64(now_ms));
    let row = match prefix_end(prefix) {
        Some(end) => {
            let params: [&(dyn ToSql + Sync); 4] = [&kind, &prefix, &end, &now];
            client.query_one(statement, &params).await
        }
        None => {
            let params: [&(dyn ToSql + Sync); 3] = [&kind, &prefix, &now];
            client.query_one(statement, &params).await
        }
    }
    .map_err(StepError::statement)?;
    let deleted: i64 = row.try_get(0).map_err(StepError::decoding)?;
    Ok(deleted.unsigned_abs())
}

/// Delete at most `limit` records of `kind` whose key starts with `prefix`, in one
/// statement (committed when it returns): one step of a large `delete_records`. Returns how
/// many of them were unexpired, and whether `limit` were deleted (so more may be left).
pub(crate) async fn delete_some(
    conn: &mut Conn,
    kind: RecordKind,
    prefix: &str,
    limit: i64,
    now_ms: u64,
) -> StoreResult<(u64, bool)> {
    let (kind, now) = (kind.as_str(), to_i64(now_ms));
    let row = match prefix_end(prefix) {
        Some(end) => {
            let statement = conn.statements.get(&conn.client, DELETE_SOME_RANGE).await?;
            conn.client
                .query_one(&statement, &[&kind, &prefix, &end, &limit, &now])
                .await
        }
        None => {
            let statement = conn.statements.get(&conn.client, DELETE_SOME_FROM).await?;
            conn.client
                .query_one(&statement, &[&kind, &prefix, &limit, &now])
                .await
        }
    }
    .map_err(from_pg)?;
    let (deleted, live): (i64, i64) = (row.get(0), row.get(1));
    Ok((live.unsigned_abs(), deleted >= limit))
}

/// Inside a preview's transaction: how many records have expired at `now_ms` (what
/// [`prune_expired`] deletes, locked rows included).
pub(crate) async fn count_expired(
    tx: &Transaction<'_>,
    statements: &mut Statements,
    now_ms: u64,
) -> StoreResult<u64> {
    let statement = statements.get(tx, COUNT_EXPIRED).await?;
    let row = tx
        .query_one(&statement, &[&to_i64(now_ms)])
        .await
        .map_err(from_pg)?;
    Ok(row.try_get::<_, i64>(0).map_err(from_pg)?.unsigned_abs())
}

/// Inside a prune's transaction: delete the records whose expiry is at or before
/// `now_ms`, skipping rows another transaction holds. Returns how many were deleted.
pub(crate) async fn prune_expired(
    tx: &Transaction<'_>,
    statements: &mut Statements,
    now_ms: u64,
    limit: i64,
) -> StoreResult<u64> {
    let statement = statements.get(tx, PRUNE_EXPIRED).await?;
    tx.execute(&statement, &[&to_i64(now_ms), &limit])
        .await
        .map_err(from_pg)
}
