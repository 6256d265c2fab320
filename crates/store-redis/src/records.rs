//! Journal records: one hash per record (`version`, `value`, `expires_at`), a sorted set
//! per kind with every key at score 0 (so `ZRANGEBYLEX` lists a prefix in key order), and
//! one per kind scored by expiry (prune's candidates).
//!
//! A write is one script that checks its condition before its first write, so of writers
//! racing on one key exactly one commits. A record with an expiry also gets a Redis expiry
//! (`PEXPIREAT`), so it goes away even if nobody prunes; listings skip index entries whose
//! record is gone and take them out of the index, and `prune` sweeps the expiry index.

use durable_mcp_store::{Expect, Record, RecordKind, StoreError, StoreResult};

use crate::error::{bad_reply, from_redis, int, text};
use crate::{Shared, scripts};

/// Index members handled per script call by `list`, `delete` and `prune`: one script must
/// not hold the server for long.
const BATCH: usize = 256;

/// The `ZRANGEBYLEX` bounds of the keys that start with `prefix`. Redis compares members
/// bytewise and no UTF-8 string contains the byte `0xff`, so `[prefix` to `(prefix\xff`
/// holds exactly the keys with the prefix.
pub(crate) fn lex_range(prefix: &str) -> (Vec<u8>, Vec<u8>) {
    if prefix.is_empty() {
        return (b"-".to_vec(), b"+".to_vec());
    }
    let mut min = b"[".to_vec();
    min.extend_from_slice(prefix.as_bytes());
    let mut max = b"(".to_vec();
    max.extend_from_slice(prefix.as_bytes());
    max.push(0xff);
    (min, max)
}

fn version(key: &str, text: &str) -> StoreResult<u64> {
    text.parse()
        .map_err(|_| StoreError::Corrupt(format!("record {key:?} has version {text:?}")))
}

fn expiry(key: &str, text: &str) -> StoreResult<Option<u64>> {
    if text.is_empty() {
        return Ok(None);
    }
    text.parse()
        .map(Some)
        .map_err(|_| StoreError::Corrupt(format!("record {key:?} has expiry {text:?}")))
}

/// `expires_at_ms` and `expect` as the record scripts take them (`''`: never, absent).
pub(crate) fn script_args(expires_at_ms: Option<u64>, expect: Expect) -> (String, String) {
    // Expiries are stored as Redis takes them (`PEXPIREAT` wants a signed 64-bit time).
    let expires_at = expires_at_ms
        .map(|at| at.min(i64::MAX.unsigned_abs()).to_string())
        .unwrap_or_default();
    let expected = match expect {
        Expect::Absent => String::new(),
        Expect::Version(version) => version.to_string(),
    };
    (expires_at, expected)
}

/// Write `value` under `expect` and return the new version (one script: D7, D8).
pub(crate) async fn put(
    shared: &Shared,
    kind: RecordKind,
    key: &str,
    value: String,
    expires_at_ms: Option<u64>,
    expect: Expect,
    now_ms: u64,
) -> StoreResult<u64> {
    let (expires_at, expected) = script_args(expires_at_ms, expect);
    let mut call = shared.script(&scripts::PUT_RECORD);
    call.arg(kind.as_str())
        .arg(key)
        .arg(value)
        .arg(expires_at)
        .arg(expected)
        .arg(now_ms);
    let reply: redis::Value = shared.write(&call).await?;
    match int(&reply) {
        Some(0) => Err(StoreError::Conflict { what: "record" }),
        Some(version) if version > 0 => Ok(version.unsigned_abs()),
        _ => Err(bad_reply("put_record", &reply)),
    }
}

/// The unexpired record `key` of `kind`, if any (one `HMGET`: never half of a write).
pub(crate) async fn get(
    shared: &Shared,
    kind: RecordKind,
    key: &str,
    now_ms: u64,
) -> StoreResult<Option<Record>> {
    let (stored, value, expires_at): (Option<String>, Option<String>, Option<String>) =
        redis::cmd("HMGET")
            .arg(shared.keys.record(kind, key))
            .arg(&["version", "value", "expires_at"])
            .query_async(&mut shared.conn())
            .await
            .map_err(from_redis)?;
    let Some(stored) = stored else {
        return Ok(None);
    };
    let value = value.ok_or_else(|| StoreError::Corrupt(format!("record {key:?} has no value")))?;
    let record = Record {
        key: key.to_owned(),
        version: version(key, &stored)?,
        value,
        expires_at_ms: expiry(key, expires_at.as_deref().unwrap_or(""))?,
    };
    // Redis may not have dropped it yet (its clock is not ours).
    Ok(Some(record).filter(|r| !r.expired(now_ms)))
}

/// Unexpired records of `kind` whose key starts with `prefix`, in key order, at most
/// `limit`. Each batch of [`BATCH`] index members is read by one script (one snapshot);
/// a longer listing continues after the last member the previous batch scanned.
pub(crate) async fn list(
    shared: &Shared,
    kind: RecordKind,
    prefix: &str,
    limit: usize,
    now_ms: u64,
) -> StoreResult<Vec<Record>> {
    let (mut min, max) = lex_range(prefix);
    let mut records = Vec::new();
    while records.len() < limit {
        let count = (limit - records.len()).min(BATCH);
        let mut call = shared.script(&scripts::LIST_RECORDS);
        call.arg(kind.as_str())
            .arg(&min)
            .arg(&max)
            .arg(count)
            .arg(now_ms);
        let reply: redis::Value = call
            .invoke_async(&mut shared.conn())
            .await
            .map_err(from_redis)?;
        let redis::Value::Array(items) = &reply else {
            return Err(bad_reply("list_records", &reply));
        };
        let (Some(scanned), Some(last)) = (items.first().and_then(int), items.get(1)) else {
            return Err(bad_reply("list_records", &reply));
        };
        if items.len() % 4 != 2 {
            return Err(bad_reply("list_records", &reply));
        }
        for entry in items[2..].chunks(4) {
            let [key, stored, value, expires_at] = entry else {
                return Err(bad_reply("list_records", &reply));
            };
            let (Some(key), Some(stored), Some(value), Some(expires_at)) =
                (text(key), text(stored), text(value), text(expires_at))
            else {
                return Err(bad_reply("list_records", &reply));
            };
            let record = Record {
                version: version(&key, &stored)?,
                expires_at_ms: expiry(&key, &expires_at)?,
                key,
                value,
            };
            records.push(record);
        }
        if usize::try_from(scanned).unwrap_or(0) < count {
            break;
        }
        let redis::Value::BulkString(last) = last else {
            return Err(bad_reply("list_records", &reply));
        };
        min = b"(".to_vec();
        min.extend_from_slice(last);
    }
    Ok(records)
}

/// Delete every record of `kind` whose key starts with `prefix`, [`BATCH`] per script;
/// returns how many of them were unexpired.
pub(crate) async fn delete(
    shared: &Shared,
    kind: RecordKind,
    prefix: &str,
    now_ms: u64,
) -> StoreResult<u64> {
    let (min, max) = lex_range(prefix);
    let mut deleted = 0;
    loop {
        let mut call = shared.script(&scripts::DELETE_RECORDS);
        call.arg(kind.as_str())
            .arg(&min)
            .arg(&max)
            .arg(BATCH)
            .arg(now_ms);
        let (live, scanned): (u64, usize) = shared.write(&call).await?;
        deleted += live;
        if scanned < BATCH {
            return Ok(deleted);
        }
    }
}

/// Delete the records of every kind whose expiry is at or before `now_ms`, and their
/// index entries; returns how many.
pub(crate) async fn prune_expired(shared: &Shared, now_ms: u64) -> StoreResult<u64> {
    let mut expired = 0;
    for kind in RecordKind::ALL {
        loop {
            // Each due member leaves the due range: deleted, dropped or re-scored.
            let mut call = shared.script(&scripts::PRUNE_RECORDS);
            call.arg(kind.as_str()).arg(now_ms).arg(BATCH);
            let (removed, scanned): (u64, usize) = shared.write(&call).await?;
            expired += removed;
            if scanned < BATCH {
                break;
            }
        }
    }
    Ok(expired)
}

/// How many records [`prune_expired`] would delete at `now_ms`, deleting none: each kind's
/// expiry index, a page at a time, judged as its script judges them.
pub(crate) async fn count_expired(shared: &Shared, now_ms: u64) -> StoreResult<u64> {
    let mut expired = 0;
    for kind in RecordKind::ALL {
        let mut offset = 0;
        loop {
            let mut call = shared.script(&scripts::COUNT_EXPIRED);
            call.arg(kind.as_str()).arg(now_ms).arg(offset).arg(BATCH);
            let (counted, scanned): (u64, usize) = call
                .invoke_async(&mut shared.conn())
                .await
                .map_err(from_redis)?;
            expired += counted;
            offset += scanned;
            if scanned < BATCH {
                break;
            }
        }
    }
    Ok(expired)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lex_range_bounds_exactly_the_keys_with_the_prefix() {
        assert_eq!(lex_range(""), (b"-".to_vec(), b"+".to_vec()));
        let (min, max) = lex_range("run/");
        assert_eq!(min, b"[run/");
        assert_eq!(max, b"(run/\xff");
        let inside = |key: &str| key.as_bytes() >= &min[1..] && key.as_bytes() < &max[1..];
        for key in ["run/", "run/a", "run/\u{10FFFF}"] {
            assert!(inside(key), "{key}");
        }
        for key in ["run", "run0", "rum/", "run."] {
            assert!(!inside(key), "{key}");
        }
    }
}
