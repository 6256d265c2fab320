//! Journal records: one row per (kind, key) with a version counter and an optional expiry.
//!
//! Writes run on the writer thread (so conditional writes are serialized by construction:
//! the first commit wins); reads run on reader connections. A row whose `expires_at` has
//! passed counts as absent everywhere, and `prune` deletes it.

use durable_mcp_store::{Expect, Record, RecordKind, StoreError, prefix_end};
use rusqlite::{Connection, OptionalExtension, params};

use crate::error::from_sqlite;

/// A new record, or one in place of an expired one (`Expect::Absent`): nothing changes, and
/// no row returns, when the key holds an unexpired record.
const INSERT_ABSENT: &str = "INSERT INTO records (kind, key, version, value, expires_at) VALUES (?1, ?2, 1, ?3, ?4)
    ON CONFLICT (kind, key) DO UPDATE SET version = 1, value = excluded.value, expires_at = excluded.expires_at
    WHERE records.expires_at IS NOT NULL AND records.expires_at <= ?5";
/// The next version of an unexpired record at exactly `?3` (`Expect::Version`).
const UPDATE_VERSION: &str = "UPDATE records SET version = version + 1, value = ?4, expires_at = ?5
    WHERE kind = ?1 AND key = ?2 AND version = ?3 AND (expires_at IS NULL OR expires_at > ?6) RETURNING version";
const GET: &str = "SELECT key, version, value, expires_at FROM records
    WHERE kind = ?1 AND key = ?2 AND (expires_at IS NULL OR expires_at > ?3)";
const LIST_RANGE: &str = "SELECT key, version, value, expires_at FROM records
    WHERE kind = ?1 AND key >= ?2 AND key < ?3 AND (expires_at IS NULL OR expires_at > ?4) ORDER BY key LIMIT ?5";
const LIST_FROM: &str = "SELECT key, version, value, expires_at FROM records
    WHERE kind = ?1 AND key >= ?2 AND (expires_at IS NULL OR expires_at > ?3) ORDER BY key LIMIT ?4";
const COUNT_LIVE_RANGE: &str = "SELECT count(*) FROM records
    WHERE kind = ?1 AND key >= ?2 AND key < ?3 AND (expires_at IS NULL OR expires_at > ?4)";
const COUNT_LIVE_FROM: &str = "SELECT count(*) FROM records
    WHERE kind = ?1 AND key >= ?2 AND (expires_at IS NULL OR expires_at > ?3)";
const DELETE_RANGE: &str = "DELETE FROM records WHERE kind = ?1 AND key >= ?2 AND key < ?3";
const DELETE_FROM: &str = "DELETE FROM records WHERE kind = ?1 AND key >= ?2";
const DELETE_VERSION: &str = "DELETE FROM records
    WHERE kind = ?1 AND key = ?2 AND version = ?3 AND (expires_at IS NULL OR expires_at > ?4)";
/// At most `?4` (`?3` for `_FROM`) records of a prefix, for [`delete_some`]: each returns
/// its expiry so that the caller counts the unexpired ones.
const DELETE_SOME_RANGE: &str = "DELETE FROM records WHERE kind = ?1 AND key IN (
        SELECT key FROM records WHERE kind = ?1 AND key >= ?2 AND key < ?3 LIMIT ?4
    ) RETURNING expires_at";
const DELETE_SOME_FROM: &str = "DELETE FROM records WHERE kind = ?1 AND key IN (
        SELECT key FROM records WHERE kind = ?1 AND key >= ?2 LIMIT ?3
    ) RETURNING expires_at";
/// The records a prune deletes: expired at `?1`. One condition for the prune
/// ([`prune_expired`]) and its preview.
macro_rules! expired {
    () => {
        "expires_at IS NOT NULL AND expires_at <= ?1"
    };
}

const DELETE_EXPIRED: &str = concat!(
    "DELETE FROM records WHERE (kind, key) IN (SELECT kind, key FROM records WHERE ",
    expired!(),
    " LIMIT ?2)"
);
const COUNT_EXPIRED: &str = concat!("SELECT count(*) FROM records WHERE ", expired!());

/// Milliseconds (or a version) as SQLite's `INTEGER`, saturating.
fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn decode(row: &rusqlite::Row<'_>) -> rusqlite::Result<(String, i64, String, Option<i64>)> {
    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
}

fn record(
    (key, version, value, expires_at): (String, i64, String, Option<i64>),
) -> Result<Record, StoreError> {
    Record::from_columns(key, version, value, expires_at)
}

/// On the writer: write `value` under `expect` and return the new version, or
/// `StoreError::Conflict` if the condition does not hold. `now_ms` judges expiry. One
/// statement either way: the condition is part of the write, not a read before it.
pub(crate) fn put(
    conn: &Connection,
    kind: RecordKind,
    key: &str,
    value: &str,
    expires_at_ms: Option<u64>,
    expect: Expect,
    now_ms: u64,
) -> Result<u64, StoreError> {
    let (now, expires_at) = (to_i64(now_ms), expires_at_ms.map(to_i64));
    match expect {
        Expect::Absent => {
            let written = conn
                .prepare_cached(INSERT_ABSENT)
                .and_then(|mut stmt| {
                    stmt.execute(params![kind.as_str(), key, value, expires_at, now])
                })
                .map_err(from_sqlite)?;
            if written == 0 {
                return Err(StoreError::Conflict { what: "record" });
            }
            Ok(1)
        }
        Expect::Version(expected) => {
            // A version beyond SQLite's integers is never stored: no record is at it.
            let Ok(expected) = i64::try_from(expected) else {
                return Err(StoreError::Conflict { what: "record" });
            };
            if expected == i64::MAX {
                return Err(StoreError::Corrupt(format!(
                    "record {key:?} is at the largest version"
                )));
            }
            let version: Option<i64> = conn
                .prepare_cached(UPDATE_VERSION)
                .and_then(|mut stmt| {
                    stmt.query_row(
                        params![kind.as_str(), key, expected, value, expires_at, now],
                        |row| row.get(0),
                    )
                    .optional()
                })
                .map_err(from_sqlite)?;
            version
                .map(i64::unsigned_abs)
                .ok_or(StoreError::Conflict { what: "record" })
        }
    }
}

/// On the writer: delete record `key` only if it is unexpired at exactly `version`;
/// otherwise `StoreError::Conflict`.
pub(crate) fn delete_version(
    conn: &Connection,
    kind: RecordKind,
    key: &str,
    version: u64,
    now_ms: u64,
) -> Result<(), StoreError> {
    let deleted = conn
        .prepare_cached(DELETE_VERSION)
        .and_then(|mut stmt| {
            stmt.execute(params![kind.as_str(), key, to_i64(version), to_i64(now_ms)])
        })
        .map_err(from_sqlite)?;
    if deleted == 0 {
        return Err(StoreError::Conflict { what: "record" });
    }
    Ok(())
}

/// The unexpired record `key` of `kind`, if any.
pub(crate) fn get(
    conn: &Connection,
    kind: RecordKind,
    key: &str,
    now_ms: u64,
) -> Result<Option<Record>, StoreError> {
    let row = conn
        .prepare_cached(GET)
        .and_then(|mut stmt| {
            stmt.query_row(params![kind.as_str(), key, to_i64(now_ms)], decode)
                .optional()
        })
        .map_err(from_sqlite)?;
    row.map(record).transpose()
}

/// Unexpired records of `kind` whose key starts with `prefix`, in key order, at most `limit`.
pub(crate) fn list(
    conn: &Connection,
    kind: RecordKind,
    prefix: &str,
    limit: usize,
    now_ms: u64,
) -> Result<Vec<Record>, StoreError> {
    let (now, limit) = (to_i64(now_ms), i64::try_from(limit).unwrap_or(i64::MAX));
    let rows: Vec<(String, i64, String, Option<i64>)> = match prefix_end(prefix) {
        Some(end) => conn.prepare_cached(LIST_RANGE).and_then(|mut stmt| {
            stmt.query_map(params![kind.as_str(), prefix, end, now, limit], decode)?
                .collect()
        }),
        None => conn.prepare_cached(LIST_FROM).and_then(|mut stmt| {
            stmt.query_map(params![kind.as_str(), prefix, now, limit], decode)?
                .collect()
        }),
    }
    .map_err(from_sqlite)?;
    rows.into_iter().map(record).collect()
}

/// On the writer: delete every record of `kind` whose key starts with `prefix`; returns
/// how many of them were unexpired (expired ones are deleted too, but were already absent).
pub(crate) fn delete(
    conn: &Connection,
    kind: RecordKind,
    prefix: &str,
    now_ms: u64,
) -> Result<u64, StoreError> {
    let now = to_i64(now_ms);
    let live: i64 = match prefix_end(prefix) {
        Some(end) => {
            let live = conn
                .prepare_cached(COUNT_LIVE_RANGE)
                .and_then(|mut stmt| {
                    stmt.query_row(params![kind.as_str(), prefix, end, now], |row| row.get(0))
                })
                .map_err(from_sqlite)?;
            conn.prepare_cached(DELETE_RANGE)
                .and_then(|mut stmt| stmt.execute(params![kind.as_str(), prefix, end]))
                .map_err(from_sqlite)?;
            live
        }
        None => {
            let live = conn
                .prepare_cached(COUNT_LIVE_FROM)
                .and_then(|mut stmt| {
                    stmt.query_row(params![kind.as_str(), prefix, now], |row| row.get(0))
                })
                .map_err(from_sqlite)?;
            conn.prepare_cached(DELETE_FROM)
                .and_then(|mut stmt| stmt.execute(params![kind.as_str(), prefix]))
                .map_err(from_sqlite)?;
            live
        }
    };
    Ok(live.unsigned_abs())
}

/// On the writer: delete at most `limit` records of `kind` whose key starts with `prefix`
/// (one job of a large `delete_records`). Returns how many of them were unexpired, and
/// whether `limit` were deleted (so more may be left).
pub(crate) fn delete_some(
    conn: &Connection,
    kind: RecordKind,
    prefix: &str,
    limit: usize,
    now_ms: u64,
) -> Result<(u64, bool), StoreError> {
    let (now, limit_sql) = (to_i64(now_ms), to_i64(limit as u64));
    let expiries: Vec<Option<i64>> = match prefix_end(prefix) {
        Some(end) => conn.prepare_cached(DELETE_SOME_RANGE).and_then(|mut stmt| {
            stmt.query_map(params![kind.as_str(), prefix, end, limit_sql], |row| {
                row.get(0)
            })?
            .collect()
        }),
        None => conn.prepare_cached(DELETE_SOME_FROM).and_then(|mut stmt| {
            stmt.query_map(params![kind.as_str(), prefix, limit_sql], |row| row.get(0))?
                .collect()
        }),
    }
    .map_err(from_sqlite)?;
    let live = expiries
        .iter()
        .filter(|expires_at| expires_at.is_none_or(|at| at > now))
        .count();
    Ok((live as u64, expiries.len() >= limit))
}

/// How many records have expired at `now_ms` (what [`prune_expired`] deletes, unbounded).
pub(crate) fn count_expired(conn: &Connection, now_ms: u64) -> Result<u64, StoreError> {
    conn.prepare_cached(COUNT_EXPIRED)
        .and_then(|mut stmt| stmt.query_row(params![to_i64(now_ms)], |row| row.get::<_, i64>(0)))
        .map(i64::unsigned_abs)
        .map_err(from_sqlite)
}

/// On the writer: delete the records whose expiry is at or before `now_ms`; returns how many.
pub(crate) fn prune_expired(
    conn: &Connection,
    now_ms: u64,
    limit: usize,
) -> Result<u64, StoreError> {
    let limit = to_i64(limit as u64);
    let deleted = conn
        .prepare_cached(DELETE_EXPIRED)
        .and_then(|mut stmt| stmt.execute(params![to_i64(now_ms), limit]))
        .map_err(from_sqlite)?;
    Ok(deleted as u64)
}
