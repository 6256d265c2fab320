//! Sessions: one hash per session (`principal`, `record` as JSON, `version`), its stream
//! sets, and the `P:sessions` index scored by last use.

use std::time::Duration;

use crate::error::{bad_reply, from_redis, int, text};
use crate::options::millis;
use crate::{Shared, scripts};
use durable_mcp_store::{
    Principal, SessionChange, SessionId, SessionRecord, StoreError, StoreResult, StreamId, now_ms,
};

/// Give up an update after this many lost races (each race means another worker's update
/// committed, so the system as a whole progresses).
const MAX_ATTEMPTS: u32 = 64;
/// Safety margin for clock skew between workers when sweeping the index.
const SKEW_MARGIN_MS: u64 = 60_000;
/// Sessions fetched per round trip by `list` and `prune`.
const BATCH: usize = 256;

fn decode(text: &str) -> Result<SessionRecord, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("session record: {e}")))
}

fn encode(record: &SessionRecord) -> Result<String, StoreError> {
    serde_json::to_string(record).map_err(|e| StoreError::Corrupt(format!("session record: {e}")))
}

pub(crate) async fn create(shared: &Shared, record: SessionRecord) -> StoreResult<()> {
    let now = now_ms();
    let ttl = millis(shared.options.session_idle_ttl);
    let sweep_cutoff = now.saturating_sub(ttl).saturating_sub(SKEW_MARGIN_MS);
    let mut call = shared.script(&scripts::CREATE_SESSION);
    call.arg(record.id.as_str())
        .arg(record.principal.as_str())
        .arg(encode(&record)?)
        .arg(record.last_seen_ms)
        .arg(record.standalone_stream.as_str())
        .arg(now)
        .arg(ttl)
        .arg(sweep_cutoff)
        .arg(crate::layout::Layout::inline_arg(shared, now).await);
    let created: i64 = shared.write(&call).await?;
    if created != 1 {
        return Err(StoreError::Corrupt(format!(
            "session {} or its stream already exists",
            record.id
        )));
    }
    tracing::debug!(session = %record.id, "session created");
    Ok(())
}

/// The version and record of a live session of `principal`.
async fn fetch(
    shared: &Shared,
    principal: &Principal,
    id: &SessionId,
) -> StoreResult<(String, SessionRecord)> {
    let (owner, record, version): (Option<String>, Option<String>, Option<String>) =
        redis::cmd("HMGET")
            .arg(shared.keys.session(id))
            .arg(&["principal", "record", "version"])
            .query_async(&mut shared.conn())
            .await
            .map_err(from_redis)?;
    match (owner, record, version) {
        (Some(owner), Some(record), Some(version)) if owner == principal.as_str() => {
            Ok((version, decode(&record)?))
        }
        _ => Err(StoreError::not_found("session")),
    }
}

pub(crate) async fn load(
    shared: &Shared,
    principal: &Principal,
    id: &SessionId,
) -> StoreResult<SessionRecord> {
    fetch(shared, principal, id).await.map(|(_, record)| record)
}

/// Read, apply with [`SessionRecord::apply`], write back if nobody wrote meanwhile; else
/// retry. Compare-and-set rather than a Lua re-implementation of `apply`, so the record's
/// rules live in one place and JSON values are never re-encoded by Lua.
pub(crate) async fn update(
    shared: &Shared,
    principal: &Principal,
    id: &SessionId,
    change: SessionChange,
) -> StoreResult<SessionRecord> {
    let ttl = millis(shared.options.session_idle_ttl);
    for attempt in 0..MAX_ATTEMPTS {
        let (version, mut record) = fetch(shared, principal, id).await?;
        record.apply(&change, now_ms())?;
        let mut call = shared.script(&scripts::UPDATE_SESSION);
        call.key(shared.keys.session(id))
            .arg(id.as_str())
            .arg(principal.as_str())
            .arg(&version)
            .arg(encode(&record)?)
            .arg(record.last_seen_ms)
            .arg(ttl);
        let outcome: i64 = shared.write(&call).await?;
        match outcome {
            1 => return Ok(record),
            -1 => return Err(StoreError::not_found("session")),
            _ => {
                tracing::trace!(session = %id, attempt, "concurrent session update; retrying");
                // Spread the retries of workers racing on one session.
                tokio::time::sleep(Duration::from_millis(u64::from(attempt % 8) + 1)).await;
            }
        }
    }
    Err(StoreError::Unavailable(
        format!("session {id} changed concurrently {MAX_ATTEMPTS} times in a row").into(),
    ))
}

/// Run the end script: the session goes in the first call, its streams
/// [`durable_mcp_store::PRUNE_BATCH`] at a time in as many calls as they need (the session
/// is gone from the first, so nothing reaches them meanwhile; all are gone when this
/// returns). Returns how many streams went, if the session was ended.
async fn end_script(
    shared: &Shared,
    id: &SessionId,
    principal: Option<&Principal>,
    idle_before: Option<u64>,
) -> StoreResult<Option<usize>> {
    let mut deleted = 0;
    let mut going_on = false;
    loop {
        let mut call = shared.script(&scripts::END_SESSION);
        call.key(shared.keys.session(id))
            .arg(id.as_str())
            .arg(principal.map_or("", |p| p.as_str()))
            .arg(idle_before.map(|c| c.to_string()).unwrap_or_default())
            .arg(durable_mcp_store::PRUNE_BATCH)
            .arg(if going_on { "1" } else { "" });
        let reply: redis::Value = shared.write(&call).await?;
        let redis::Value::Array(items) = &reply else {
            return Err(bad_reply("end_session", &reply));
        };
        match (items.first().and_then(int), items.get(1).and_then(int)) {
            (Some(1), Some(more)) => {
                let gone: Vec<StreamId> = items[2..]
                    .iter()
                    .filter_map(|v| text(v)?.parse().ok())
                    .collect();
                shared.watchers.forget(&gone);
                deleted += gone.len();
                if more == 0 {
                    return Ok(Some(deleted));
                }
                going_on = true;
            }
            (Some(0), _) if !going_on => return Ok(None),
            _ => return Err(bad_reply("end_session", &reply)),
        }
    }
}

pub(crate) async fn end(
    shared: &Shared,
    principal: &Principal,
    id: &SessionId,
) -> StoreResult<bool> {
    let ended = end_script(shared, id, Some(principal), None).await?;
    if let Some(streams) = ended {
        tracing::debug!(session = %id, streams, "session ended");
    }
    Ok(ended.is_some())
}

pub(crate) async fn list(
    shared: &Shared,
    principal: Option<&Principal>,
    limit: usize,
) -> StoreResult<Vec<SessionRecord>> {
    let ids: Vec<String> = redis::cmd("ZRANGE")
        .arg(shared.keys.sessions())
        .arg(0)
        .arg(-1)
        .query_async(&mut shared.conn())
        .await
        .map_err(from_redis)?;
    let mut sessions = Vec::new();
    for chunk in ids.chunks(BATCH) {
        let mut pipe = redis::pipe();
        for id in chunk {
            let Ok(id) = id.parse::<SessionId>() else {
                continue;
            };
            pipe.cmd("HMGET")
                .arg(shared.keys.session(&id))
                .arg(&["principal", "record"]);
        }
        let rows: Vec<(Option<String>, Option<String>)> = pipe
            .query_async(&mut shared.conn())
            .await
            .map_err(from_redis)?;
        for (owner, record) in rows {
            // Entries whose session Redis expired are skipped (and swept later).
            let (Some(owner), Some(record)) = (owner, record) else {
                continue;
            };
            if principal.is_none_or(|p| p.as_str() == owner) {
                sessions.push(decode(&record)?);
            }
        }
    }
    sessions.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
    sessions.truncate(limit);
    Ok(sessions)
}

/// How many sessions [`prune_idle`] would end at `cutoff`, ending none: its candidates, a
/// page at a time, judged by the condition its script checks.
pub(crate) async fn count_idle(shared: &Shared, cutoff: u64) -> StoreResult<u64> {
    let (mut due, mut offset) = (0, 0);
    loop {
        let page =
            crate::older_than(shared, &shared.keys.sessions(), cutoff, offset, BATCH).await?;
        offset += page.len();
        // Entries that are no session id are prune's to drop, never to count.
        let ids: Vec<&String> = page
            .iter()
            .filter(|raw| raw.parse::<SessionId>().is_ok())
            .collect();
        if !ids.is_empty() {
            let mut call = shared.script(&scripts::COUNT_IDLE);
            call.arg(cutoff).arg(ids);
            let counted: u64 = call
                .invoke_async(&mut shared.conn())
                .await
                .map_err(from_redis)?;
            due += counted;
        }
        if page.len() < BATCH {
            return Ok(due);
        }
    }
}

/// End every session whose last use is before `cutoff`; returns how many were live.
pub(crate) async fn prune_idle(shared: &Shared, cutoff: u64) -> StoreResult<u64> {
    let mut ended = 0;
    loop {
        // Each candidate leaves the range: ended, found used meanwhile, or found expired.
        let batch = crate::older_than(shared, &shared.keys.sessions(), cutoff, 0, BATCH).await?;
        if batch.is_empty() {
            return Ok(ended);
        }
        for raw in batch {
            let Ok(id) = raw.parse::<SessionId>() else {
                let _: i64 = redis::cmd("ZREM")
                    .arg(shared.keys.sessions())
                    .arg(&raw)
                    .query_async(&mut shared.conn())
                    .await
                    .map_err(from_redis)?;
                continue;
            };
            if end_script(shared, &id, None, Some(cutoff)).await?.is_some() {
                tracing::debug!(session = %id, "idle session pruned");
                ended += 1;
            }
        }
    }
}
