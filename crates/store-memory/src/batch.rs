//! [`Store::commit`](durable_mcp_store::Store::commit) for the memory store: every op is
//! applied under the store's one mutex, and an undo log reverts the ones already applied
//! if a later op is refused, before the mutex is released. Readers take the same mutex, so
//! they see all of a batch or none of it; tails are woken only after every op applied.

use std::collections::VecDeque;

use durable_mcp_store::{
    BatchOp, BatchOutcome, EventId, Expect, OpOutcome, Record, RecordKind, StoreError, StoreResult, StreamId, WriteBatch, now_ms, op_failed,
};

use crate::{Inner, insert_stream};

/// How to revert one applied op.
enum Undo {
    /// Remove a created stream (and its entry in its session's list).
    Created(StreamId),
    /// Restore a stream's log and flags as they were before an append or close.
    Stream { id: StreamId, trimmed: VecDeque<String>, appended: bool, first_seq: u64, closed: bool, last_event_ms: u64 },
    /// Put back what a key held (`None`: nothing).
    Record((RecordKind, String), Option<Record>),
}

/// Apply `batch` to `inner`, all or nothing. `max` bounds each stream's retained events.
pub(crate) fn commit(inner: &mut Inner, batch: &WriteBatch, max: usize) -> StoreResult<BatchOutcome> {
    let mut undo = Vec::with_capacity(batch.len());
    let mut outcome = BatchOutcome { ops: Vec::with_capacity(batch.len()) };
    for (index, op) in batch.ops().iter().enumerate() {
        match apply(inner, op, max, &mut undo) {
            Ok(result) => outcome.ops.push(result),
            Err(error) => {
                while let Some(step) = undo.pop() {
                    revert(inner, step);
                }
                return Err(op_failed(index, op, error));
            }
        }
    }
    for stream in batch.woken_streams() {
        if let Some(state) = inner.streams.get(&stream) {
            let last = state.last_seq();
            state.notify.send_replace(last);
        }
    }
    Ok(outcome)
}

fn apply(inner: &mut Inner, op: &BatchOp, max: usize, undo: &mut Vec<Undo>) -> StoreResult<OpOutcome> {
    let now = now_ms();
    match op {
        BatchOp::CreateStream { id, owner } => {
            if let Some(session) = &owner.session
                && !inner.sessions.contains_key(session)
            {
                return Err(StoreError::not_found("session"));
            }
            if inner.streams.contains_key(id) {
                return Err(StoreError::Conflict { what: "stream" });
            }
            insert_stream(inner, id, owner);
            undo.push(Undo::Created(id.clone()));
            Ok(OpOutcome::Created)
        }
        BatchOp::Append { stream, data } => {
            let state = inner.streams.get_mut(stream).ok_or(StoreError::not_found("stream"))?;
            if state.closed {
                return Err(StoreError::StreamClosed { stream: stream.to_string() });
            }
            let before = (state.first_seq, state.closed, state.last_event_ms);
            state.events.push_back(data.clone());
            let mut trimmed = VecDeque::new();
            while state.events.len() > max {
                trimmed.extend(state.events.pop_front());
                state.first_seq += 1;
            }
            state.last_event_ms = now;
            let seq = state.last_seq();
            undo.push(Undo::Stream { id: stream.clone(), trimmed, appended: true, first_seq: before.0, closed: before.1, last_event_ms: before.2 });
            Ok(OpOutcome::Appended(EventId::new(stream.clone(), seq)))
        }
        BatchOp::Close { stream } => {
            let state = inner.streams.get_mut(stream).ok_or(StoreError::not_found("stream"))?;
            if state.closed {
                return Err(StoreError::StreamClosed { stream: stream.to_string() });
            }
            undo.push(Undo::Stream {
                id: stream.clone(),
                trimmed: VecDeque::new(),
                appended: false,
                first_seq: state.first_seq,
                closed: false,
                last_event_ms: state.last_event_ms,
            });
            state.closed = true;
            state.last_event_ms = now;
            Ok(OpOutcome::Closed)
        }
        BatchOp::PutRecord { kind, key, value, expires_at_ms, expect } => {
            let slot = (*kind, key.clone());
            let previous = inner.records.get(&slot).cloned();
            let current = previous.as_ref().filter(|r| !r.expired(now)).map(|r| r.version);
            let version = match (expect, current) {
                (Expect::Absent, None) => 1,
                (Expect::Version(expected), Some(found)) if *expected == found => found + 1,
                _ => return Err(StoreError::Conflict { what: "record" }),
            };
            inner.records.insert(slot.clone(), Record { key: key.clone(), version, value: value.clone(), expires_at_ms: *expires_at_ms });
            undo.push(Undo::Record(slot, previous));
            Ok(OpOutcome::Put(version))
        }
        BatchOp::DeleteRecord { kind, key, version } => {
            let slot = (*kind, key.clone());
            match inner.records.get(&slot) {
                Some(record) if !record.expired(now) && record.version == *version => {}
                _ => return Err(StoreError::Conflict { what: "record" }),
            }
            let previous = inner.records.remove(&slot);
            undo.push(Undo::Record(slot, previous));
            Ok(OpOutcome::Deleted(1))
        }
        BatchOp::DeleteRecords { kind, prefix } => {
            let keys = crate::keys_with_prefix(inner, *kind, prefix);
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
        Undo::Stream { id, trimmed, appended, first_seq, closed, last_event_ms } => {
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
