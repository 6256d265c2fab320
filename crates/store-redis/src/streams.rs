//! Streams: a meta hash and a Redis stream of events per stream, found from the stream id
//! alone (through `P:streamidx:<id>` for session streams).

use durable_mcp_store::{
    EventId, Principal, StoreError, StoreResult, StoredEvent, StreamId, StreamOwner, StreamRead,
    now_ms,
};

use crate::error::{bad_reply, from_redis, int, text};
use crate::options::millis;
use crate::{Shared, scripts};

/// Most events one `read_after` returns, whatever `limit` asks: one script must not hold
/// the server for long. The contract allows a shorter prefix; `finished` is then false.
pub(crate) const MAX_READ: usize = 10_000;
/// Closed streams fetched per round trip by `prune`.
const BATCH: usize = 256;
/// Safety margin for clock skew between workers when sweeping the finished index.
const SKEW_MARGIN_MS: u64 = 60_000;

pub(crate) async fn create(shared: &Shared, id: &StreamId, owner: &StreamOwner) -> StoreResult<()> {
    let mut call = shared.script(&scripts::CREATE_STREAM);
    let now = now_ms();
    call.arg(id.as_str())
        .arg(owner.principal.as_str())
        .arg(owner.session.as_ref().map_or("", |s| s.as_str()))
        .arg(now)
        .arg(millis(shared.options.session_idle_ttl))
        .arg(crate::layout::Layout::inline_arg(shared, now).await);
    let created: i64 = shared.write(&call).await?;
    match created {
        1 => Ok(()),
        -1 => Err(StoreError::not_found("session")),
        _ => Err(StoreError::Corrupt(format!("stream {id} already exists"))),
    }
}

/// The idle TTL, the closed-stream TTL and the finished-index sweep cutoff an append at
/// `now` passes to its script.
pub(crate) fn append_ttls(shared: &Shared, now: u64) -> (u64, u64, u64) {
    let idle = millis(shared.options.session_idle_ttl);
    let closed = millis(shared.options.closed_stream_ttl);
    // Entries older than any TTL a closed stream gets belong to streams Redis has expired.
    (
        idle,
        closed,
        now.saturating_sub(idle.max(closed))
            .saturating_sub(SKEW_MARGIN_MS),
    )
}

pub(crate) async fn append(
    shared: &Shared,
    stream: &StreamId,
    data: String,
    close: bool,
) -> StoreResult<EventId> {
    let options = &shared.options;
    let now = now_ms();
    let (idle, closed, sweep_cutoff) = append_ttls(shared, now);
    let mut call = shared.script(&scripts::APPEND);
    call.arg(stream.as_str())
        .arg(data)
        .arg(if close { "1" } else { "0" })
        .arg(now)
        .arg(idle)
        .arg(closed)
        .arg(options.max_events_per_stream.unwrap_or(0))
        .arg(sweep_cutoff);
    let reply: redis::Value = shared.write(&call).await?;
    let seq = match &reply {
        redis::Value::Array(items) => items.first().and_then(int),
        _ => None,
    };
    match seq {
        Some(-1) => Err(StoreError::not_found("stream")),
        Some(-2) => Err(StoreError::StreamClosed {
            stream: stream.to_string(),
        }),
        Some(seq) if seq > 0 => {
            // Local tails need not wait for the pub/sub round trip.
            shared.watchers.wake(stream);
            Ok(EventId::new(stream.clone(), seq.unsigned_abs()))
        }
        _ => Err(bad_reply("append", &reply)),
    }
}

pub(crate) async fn owner(shared: &Shared, stream: &StreamId) -> StoreResult<StreamOwner> {
    let mut call = shared.script(&scripts::STREAM_OWNER);
    call.arg(stream.as_str());
    let reply: Vec<String> = call
        .invoke_async(&mut shared.conn())
        .await
        .map_err(from_redis)?;
    match reply.as_slice() {
        [] => Err(StoreError::not_found("stream")),
        [principal, session] => {
            let session = match session.as_str() {
                "" => None,
                s => Some(
                    s.parse()
                        .map_err(|e| StoreError::Corrupt(format!("stream session: {e}")))?,
                ),
            };
            Ok(StreamOwner {
                principal: Principal::new(principal.clone()),
                session,
            })
        }
        _ => Err(StoreError::Corrupt(format!(
            "unexpected reply to stream_owner: {reply:?}"
        ))),
    }
}

pub(crate) async fn read_after(
    shared: &Shared,
    stream: &StreamId,
    after: u64,
    limit: usize,
) -> StoreResult<StreamRead> {
    let start = after.saturating_add(1);
    let limit = limit.min(MAX_READ);
    if limit == 0 {
        // Still answer NotFound / Pruned / finished as a read would.
        return read(shared, stream, after, start, 1).await.map(|mut read| {
            read.finished = read.finished && read.events.is_empty();
            read.events.clear();
            read
        });
    }
    read(shared, stream, after, start, limit).await
}

async fn read(
    shared: &Shared,
    stream: &StreamId,
    after: u64,
    start: u64,
    limit: usize,
) -> StoreResult<StreamRead> {
    let mut call = shared.script(&scripts::READ_AFTER);
    call.arg(stream.as_str()).arg(start).arg(limit);
    let reply: redis::Value = call
        .invoke_async(&mut shared.conn())
        .await
        .map_err(from_redis)?;
    let redis::Value::Array(items) = &reply else {
        return Err(bad_reply("read_after", &reply));
    };
    match items.first().and_then(int) {
        Some(-1) => return Err(StoreError::not_found("stream")),
        Some(-3) => {
            let seq = items.get(1).and_then(text).unwrap_or_default();
            return Err(StoreError::Corrupt(format!(
                "stream {stream}: event {seq} is missing"
            )));
        }
        Some(0) if items.len() >= 4 && items.len() % 2 == 0 => {}
        _ => return Err(bad_reply("read_after", &reply)),
    }
    let number = |i: usize| {
        items
            .get(i)
            .and_then(int)
            .and_then(|n| u64::try_from(n).ok())
    };
    let (Some(first), Some(last), Some(closed)) = (number(1), number(2), number(3)) else {
        return Err(bad_reply("read_after", &reply));
    };
    if start < first {
        return Err(StoreError::Pruned {
            event: EventId::new(stream.clone(), after).to_string(),
            oldest_retained: first,
        });
    }
    let mut events = Vec::with_capacity((items.len() - 4) / 2);
    for (expected, pair) in (start..).zip(items[4..].chunks(2)) {
        let (Some(id), Some(data)) = (text(&pair[0]), text(&pair[1])) else {
            return Err(bad_reply("read_after", &reply));
        };
        let seq = id
            .split_once('-')
            .and_then(|(seq, _)| seq.parse::<u64>().ok());
        // The log is gap-free by construction; refuse to hand out anything else (D3).
        if seq != Some(expected) {
            return Err(StoreError::Corrupt(format!(
                "stream {stream}: event {id} where {expected} was expected"
            )));
        }
        events.push(StoredEvent {
            id: EventId::new(stream.clone(), expected),
            data,
        });
    }
    let reached = events.last().map_or(after, |e| e.id.seq);
    Ok(StreamRead {
        finished: closed == 1 && reached >= last,
        events,
    })
}

/// Delete closed streams whose final event is before `cutoff`; returns how many.
pub(crate) async fn prune_finished(shared: &Shared, cutoff: u64) -> StoreResult<u64> {
    let mut deleted = 0;
    loop {
        // Each candidate leaves the range: deleted, found gone, or re-scored.
        let batch = crate::older_than(shared, &shared.keys.finished(), cutoff, 0, BATCH).await?;
        if batch.is_empty() {
            return Ok(deleted);
        }
        for id in batch {
            let mut call = shared.script(&scripts::DELETE_FINISHED);
            call.arg(&id).arg(cutoff);
            let removed: i64 = shared.write(&call).await?;
            if removed == 1 {
                deleted += 1;
                if let Ok(stream) = id.parse::<StreamId>() {
                    shared.watchers.forget([&stream]);
                }
            }
        }
    }
}

/// How many streams [`prune_finished`] would delete at `cutoff`, deleting none: its
/// candidates, a page at a time, judged by the condition its script checks, less the
/// streams of sessions a prune with `idle_cutoff` ends first (they go with their session,
/// uncounted).
pub(crate) async fn count_finished(
    shared: &Shared,
    cutoff: u64,
    idle_cutoff: Option<u64>,
) -> StoreResult<u64> {
    let (mut due, mut offset) = (0, 0);
    loop {
        let page =
            crate::older_than(shared, &shared.keys.finished(), cutoff, offset, BATCH).await?;
        offset += page.len();
        if !page.is_empty() {
            let mut call = shared.script(&scripts::COUNT_FINISHED);
            call.arg(cutoff)
                .arg(idle_cutoff.map(|c| c.to_string()).unwrap_or_default())
                .arg(&page);
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

/// One stream's summary.
pub(crate) async fn info(
    shared: &Shared,
    stream: &StreamId,
) -> StoreResult<durable_mcp_store::StreamInfo> {
    let mut call = shared.script(&scripts::STREAM_INFO);
    call.arg(stream.as_str());
    let reply: Vec<String> = call
        .invoke_async(&mut shared.conn())
        .await
        .map_err(from_redis)?;
    let [principal, session, first, last, closed] = reply.as_slice() else {
        return match reply.as_slice() {
            [] => Err(StoreError::not_found("stream")),
            _ => Err(StoreError::Corrupt(format!(
                "unexpected reply to stream_info: {reply:?}"
            ))),
        };
    };
    let corrupt = |what: &str| StoreError::Corrupt(format!("stream {stream}: bad {what}"));
    let session = match session.as_str() {
        "" => None,
        s => Some(s.parse().map_err(|_| corrupt("session"))?),
    };
    Ok(durable_mcp_store::StreamInfo {
        id: stream.clone(),
        owner: StreamOwner {
            principal: Principal::new(principal.clone()),
            session,
        },
        first_seq: first.parse().map_err(|_| corrupt("first_seq"))?,
        last_seq: last.parse().map_err(|_| corrupt("last_seq"))?,
        closed: closed == "1",
    })
}

/// Streams in id order after `after`, at most `limit`. Redis keeps no ordered index of
/// every stream, so this scans the meta keys of the prefix (`SCAN`, in pages) and sorts:
/// O(streams) per call, for operator commands only.
pub(crate) async fn list(
    shared: &Shared,
    after: Option<&StreamId>,
    limit: usize,
) -> StoreResult<Vec<durable_mcp_store::StreamInfo>> {
    let glob: String = shared
        .keys
        .prefix()
        .chars()
        .flat_map(|c| match c {
            '*' | '?' | '[' | ']' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect();
    let pattern = format!("{glob}:{{*}}:stream:*");
    let conn = shared.conn();
    let anchor = shared.keys.layout();
    let mut cursor: u64 = 0;
    let mut ids = std::collections::BTreeSet::new();
    loop {
        let (next, keys): (u64, Vec<String>) = conn
            .on_store_node(
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000),
                &anchor,
            )
            .await
            .map_err(from_redis)?;
        for key in keys {
            if let Some((_, id)) = key.rsplit_once(":stream:")
                && let Ok(id) = id.parse::<StreamId>()
                && after.is_none_or(|after| id.as_str() > after.as_str())
            {
                ids.insert(id);
            }
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let mut out = Vec::new();
    for id in ids.into_iter().take(limit) {
        match info(shared, &id).await {
            Ok(info) => out.push(info),
            // Ended or pruned between the scan and the read.
            Err(StoreError::NotFound { .. }) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(out)
}

/// The server's clock, its persistence settings and, for `doctor`, what they risk.
pub(crate) async fn status(shared: &Shared) -> StoreResult<durable_mcp_store::StoreStatus> {
    let mut conn = shared.conn();
    let anchor = shared.keys.layout();
    let (secs, micros): (u64, u64) = conn
        .on_store_node(&redis::cmd("TIME"), &anchor)
        .await
        .map_err(from_redis)?;
    let server_time_ms = secs.saturating_mul(1000).saturating_add(micros / 1000);
    // CONFIG may be renamed or forbidden (managed services): then the setting is unknown.
    let config = |name: &'static str| {
        let (conn, anchor) = (shared.conn(), anchor.clone());
        async move {
            let reply: Result<Vec<String>, _> = conn
                .on_store_node(redis::cmd("CONFIG").arg("GET").arg(name), &anchor)
                .await;
            match reply.as_deref() {
                Ok([_, value]) => Some(value.clone()),
                _ => None,
            }
        }
    };
    let appendonly = config("appendonly").await;
    let appendfsync = if appendonly.as_deref() == Some("yes") {
        config("appendfsync").await
    } else {
        None
    };
    let mut settings = judge_persistence(appendonly.as_deref(), appendfsync.as_deref());
    let layout: Option<String> = redis::cmd("GET")
        .arg(shared.keys.layout())
        .query_async(&mut conn)
        .await
        .map_err(from_redis)?;
    let layout = match layout.as_deref() {
        Some("1") => format!(
            "1 (new streams' events in Redis streams of their own; `SET {} 2` once no older worker is left)",
            shared.keys.layout()
        ),
        Some("2") => "2 (new streams' events in their meta hash)".to_owned(),
        Some(other) => other.to_owned(),
        None => "none".to_owned(),
    };
    settings.push(durable_mcp_store::Setting::fine("key layout", layout));
    Ok(durable_mcp_store::StoreStatus {
        schema: None,
        server_time_ms: Some(server_time_ms),
        settings,
    })
}

/// Redis's persistence settings, judged: without the append-only file a restart loses
/// everything since the last snapshot; with `appendfsync no` the last seconds. `None`:
/// unknown (`CONFIG GET` refused).
pub(crate) fn judge_persistence(
    appendonly: Option<&str>,
    appendfsync: Option<&str>,
) -> Vec<durable_mcp_store::Setting> {
    use durable_mcp_store::Setting;
    let unknown = "unknown (CONFIG GET refused)";
    match appendonly {
        None => vec![Setting::fine("appendonly", unknown)],
        Some("yes") => vec![
            Setting::fine("appendonly", "yes"),
            match appendfsync {
                Some("no") => Setting::weak(
                    "appendfsync",
                    "no",
                    "the append-only file is flushed when the operating system decides: a crash can lose the last seconds of events",
                    "CONFIG SET appendfsync everysec (or always), and keep it in redis.conf",
                ),
                Some(value) => Setting::fine("appendfsync", value),
                None => Setting::fine("appendfsync", unknown),
            },
        ],
        Some(value) => vec![Setting::weak(
            "appendonly",
            value,
            "without the append-only file, Redis keeps at most its last snapshot: a restart loses every session, event and journaled request since",
            "CONFIG SET appendonly yes, and set `appendonly yes` in redis.conf",
        )],
    }
}

#[cfg(test)]
mod judged {
    use super::judge_persistence;

    fn weak(appendonly: Option<&str>, appendfsync: Option<&str>) -> Vec<String> {
        judge_persistence(appendonly, appendfsync)
            .into_iter()
            .filter(|s| s.weakness.is_some())
            .map(|s| s.name)
            .collect()
    }

    #[test]
    fn no_aof_and_an_aof_the_os_flushes_are_flagged() {
        assert_eq!(weak(Some("no"), None), ["appendonly"]);
        assert_eq!(weak(Some("yes"), Some("no")), ["appendfsync"]);
        assert!(weak(Some("yes"), Some("everysec")).is_empty());
        assert!(weak(Some("yes"), Some("always")).is_empty());
        assert!(weak(None, None).is_empty(), "unknown is not claimed weak");
    }
}
