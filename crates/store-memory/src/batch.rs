//! [`Store::commit`](durable_mcp_store::Store::commit) for the memory store: every op is
//! applied under the store's one mutex, and an undo log reverts the ones already applied
//! if a later op is refused, before the mutex is released. Readers take the same mutex, so
//! they see all of a batch or none of it; tails are woken only after every op applied.

use std::collections::VecDeque;

use durable_mcp_store::{
    BatchOp, BatchOutcome, EventId, Expect, OpOutcome, Record, RecordKind, StoreError, StoreResult,
    StreamId, WriteBatch, now_ms, op_failed,
};

use crate::{Inner, insert_stream_owned};

/// How to revert one applied op.
enum Undo {
    /// Remove a created stream (and its entry in its session's list).
    Created(StreamId),
    /// Restore a stream's log and flags as they were before an append or close.
    Stream {
        id: StreamId,
        trimmed: VecDeque<String>,
        appended: bool,
        first_seq: u64,
        closed: bool,
        last_event_ms: u64,
    },
    /// Put back what a key held (`None`: nothing).
    Record((RecordKind, String), Option<Record>),
}

/// Apply `batch` to `inner`, all or nothing. `max` bounds each stream's retained events.
/// The batch's ids, events and values move into the store: nothing of it is copied.
pub(crate) fn commit(
    inner: &mut Inner,
    batch: WriteBatch,
    max: usize,
) -> StoreResult<BatchOutcome> {
    let woken = batch.woken_streams();
    let mut undo = Vec::with_capacity(batch.len());
    let mut outcome = BatchOutcome {
        ops: Vec::with_capacity(batch.len()),
    };
    // One clock reading for the whole batch: it commits at one instant.
    let now = now_ms();
    for (index, op) in batch.into_ops().into_iter().enumerate() {
        match apply(inner, index, op, max, now, &mut undo) {
            Ok(result) => outcome.ops.push(result),
            Err(error) => {
                while let Some(step) = undo.pop() {
                    revert(inner, step);
                }
                return Err(error);
            }
        }
    }
    for stream in woken {
        if let Some(state) = inner.streams.get(&stream) {
            let last = state.last_seq();
            state.notify.send_replace(last);
        }
    }
    Ok(outcome)
}

/// Apply op `index` at `now`; a refused op changes nothing, and its error names it.
fn apply(
    inner: &mut Inner,
    index: usize,
    op: BatchOp,
    max: usize,
    now: u64,
    undo: &mut Vec<Undo>,
) -> StoreResult<OpOutcome> {
    match op {
        BatchOp::CreateStream { id, owner } => {
            if let Some(session) = &owner.session
                && !inner.sessions.contains_key(session)
            {
                return Err(op_failed(
                    index,
                    &BatchOp::CreateStream { id, owner },
                    StoreError::not_found("session"),
                ));
            }
            if inner.streams.contains_key(&id) {
                return Err(op_failed(
                    index,
                    &BatchOp::CreateStream { id, owner },
                    StoreError::Conflict { what: "stream" },
                ));
            }
            undo.push(Undo::Created(id.clone()));
            insert_stream_owned(inner, id, owner, now);
            Ok(OpOutcome::Created)
        }
        BatchOp::Append { stream, data } => {
            let Some(state) = inner.streams.get_mut(&stream) else {
                return Err(op_failed(
                    index,
                    &BatchOp::Append { stream, data },
                    StoreError::not_found("stream"),
                ));
            };
            if state.closed {
                let closed = StoreError::StreamClosed {
                    stream: stream.to_string(),
                };
                return Err(op_failed(index, &BatchOp::Append { stream, data }, closed));
            }
            let before = (state.first_seq, state.closed, state.last_event_ms);
            state.events.push_back(data);
            let mut trimmed = VecDeque::new();
            while state.events.len() > max {
                trimmed.extend(state.events.pop_front());
                state.first_seq += 1;
            }
            state.last_event_ms = now;
            let seq = state.last_seq();
            undo.push(Undo::Stream {
                id: stream.clone(),
                trimmed,
                appended: true,
                first_seq: before.0,
                closed: before.1,
                last_event_ms: before.2,
            });
            Ok(OpOutcome::Appended(EventId::new(stream, seq)))
        }
        BatchOp::Close { stream } => {
            let Some(state) = inner.streams.get_mut(&stream) else {
                return Err(op_failed(
                    index,
                    &BatchOp::Close { stream },
                    StoreError::not_found("stream"),
                ));
            };
            if state.closed {
                let closed = StoreError::StreamClosed {
                    stream: stream.to_string(),
                };
                return Err(op_failed(index, &BatchOp::Close { stream }, closed));
            }
            let (first_seq, last_event_ms) = (state.first_seq, state.last_event_ms);
            state.closed = true;
            state.last_event_ms = now;
            undo.push(Undo::Stream {
                id: stream,
                trimmed: VecDeque::new(),
                appended: false,
                first_seq,
                closed: false,
                last_event_ms,
            });
            Ok(OpOutcome::Closed)
        }
        BatchOp::PutRecord {
            kind,
            key,
            value,
            expires_at_ms,
            expect,
        } => {
            let slot = (kind, key);
            let current = inner
                .records
                .get(&slot)
                .filter(|r| !r.expired(now))
                .map(|r| r.version);
            let version = match (expect, current) {
                (Expect::Absent, None) => 1,
                (Expect::Version(expected), Some(found)) if expected == found => found + 1,
                _ => {
                    let (kind, key) = slot;
                    return Err(op_failed(
                        index,
                        &BatchOp::PutRecord {
                            kind,
                            key,
                            value,
                            expires_at_ms,
                            expect,
                        },
                        StoreError::Conflict { what: "record" },
                    ));
                }
            };
            let record = Record {
                key: slot.1.clone(),
                version,
                value,
                expires_at_ms,
            };
            let previous = inner.records.insert(slot.clone(), record);
            undo.push(Undo::Record(slot, previous));
            Ok(OpOutcome::Put(version))
        }
        BatchOp::DeleteRecord { kind, key, version } => {
            let slot = (kind, key);
            match inner.records.get(&slot) {
                Some(record) if !record.expired(now) && record.version == version => {}
                _ => {
                    let (kind, key) = slot;
                    return Err(op_failed(
                        index,
                        &BatchOp::DeleteRecord { kind, key, version },
                        StoreError::Conflict { what: "record" },
                    ));
                }
            }
            let previous = inner.records.remove(&slot);
            undo.push(Undo::Record(slot, previous));
            Ok(OpOutcome::Deleted(1))
        }
        BatchOp::DeleteRecords { kind, prefix } => {
            let keys = crate::keys_with_prefix(inner, kind, &prefix);
            let mut deleted = 0;
            for slot in keys {
                let previous = inner.records.remove(&slot);
                if previous.as_ref().is_some_and(|r| !r.expired(now)) {
                    deleted += 1;
                }
                undo.push(Undo::Record(slot, previous));
            }
            Ok(OpOutcome::Deleted(deleted))
        }
    }
}

fn revert(inner: &mut Inner, step: Undo) {
    match step {
        Undo::Created(id) => {
            if let Some(state) = inner.streams.remove(&id)
                && let Some(session) = &state.owner.session
                && let Some(list) = inner.session_streams.get_mut(session)
            {
                list.retain(|s| s != &id);
            }
        }
        Undo::Stream {
            id,
            trimmed,
            appended,
            first_seq,
            closed,
            last_event_ms,
        } => {
            if let Some(state) = inner.streams.get_mut(&id) {
                if appended {
                    state.events.pop_back();
                }
                for data in trimmed.into_iter().rev() {
                    state.events.push_front(data);
                }
                state.first_seq = first_seq;
                state.closed = closed;
                state.last_event_ms = last_event_ms;
            }
        }
        Undo::Record(slot, previous) => match previous {
            Some(record) => {
                inner.records.insert(slot, record);
            }
            None => {
                inner.records.remove(&slot);
            }
        },
    }
}
