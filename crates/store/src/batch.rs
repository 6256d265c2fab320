//! Atomic write batches: several writes committed as one store operation
//! ([`crate::Store::commit`]).
//!
//! A [`WriteBatch`] is a list of [`BatchOp`]s applied in order, all or nothing. The engine's
//! request path is built on two of them: before the handler, "create the response stream,
//! append the priming event, claim the request's alias with [`Expect::Absent`], write the
//! run record"; after it, "append the response, close the stream, delete the run record".
//!
//! ```
//! use durable_mcp_store::{Expect, Principal, RecordKind, StreamId, StreamOwner, WriteBatch};
//! let stream = StreamId::random();
//! let owner = StreamOwner { principal: Principal::anonymous(), session: None };
//! let batch = WriteBatch::new()
//!     .create_stream(stream.clone(), owner)
//!     .append(stream.clone(), String::new())
//!     .put_record(RecordKind::Alias, "session/7", "\"run-1\"", None, Expect::Absent)
//!     .put_record(RecordKind::Run, "run-1", "{}", None, Expect::Absent);
//! assert_eq!(batch.len(), 4);
//! ```

use crate::error::StoreError;
use crate::ids::{EventId, StreamId};
use crate::journal::{Expect, RecordKind};
use crate::record::StreamOwner;

/// One write of a [`WriteBatch`].
///
/// Not `#[non_exhaustive]` on purpose: a new op must be handled by every backend, so
/// adding one fails to compile until each backend applies it atomically.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchOp {
    /// Create an empty stream, as [`crate::Store::create_stream`]. A stream that already
    /// exists is [`StoreError::Conflict`]; a session owner that does not exist is
    /// [`StoreError::NotFound`].
    CreateStream {
        /// The new stream.
        id: StreamId,
        /// Its owner.
        owner: StreamOwner,
    },
    /// Append one event, as [`crate::Store::append`] without closing. An unknown stream is
    /// [`StoreError::NotFound`], a closed one [`StoreError::StreamClosed`].
    Append {
        /// The stream.
        stream: StreamId,
        /// The serialized message (empty for a priming event).
        data: String,
    },
    /// Close a stream after the events appended so far (the batch's included): nothing can
    /// follow. Unknown is [`StoreError::NotFound`], already closed [`StoreError::StreamClosed`].
    Close {
        /// The stream.
        stream: StreamId,
    },
    /// Write a record under a condition, as [`crate::Store::put_record`]; a failed condition
    /// is [`StoreError::Conflict`].
    PutRecord {
        /// Its table.
        kind: RecordKind,
        /// Its key.
        key: String,
        /// The document.
        value: String,
        /// When it stops existing, if ever.
        expires_at_ms: Option<u64>,
        /// The condition.
        expect: Expect,
    },
    /// Delete one record only if it exists, unexpired, at exactly `version` (a run record
    /// deleted by the lease holder that read it); otherwise [`StoreError::Conflict`].
    DeleteRecord {
        /// Its table.
        kind: RecordKind,
        /// Its key.
        key: String,
        /// The version the caller read.
        version: u64,
    },
    /// Delete every record of `kind` whose key starts with `prefix`, as
    /// [`crate::Store::delete_records`]; never fails on its own.
    DeleteRecords {
        /// The table.
        kind: RecordKind,
        /// The key prefix (a full key deletes one record).
        prefix: String,
    },
}

impl BatchOp {
    /// The op's name, for errors and logs (`append`, `put_record`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            BatchOp::CreateStream { .. } => "create_stream",
            BatchOp::Append { .. } => "append",
            BatchOp::Close { .. } => "close",
            BatchOp::PutRecord { .. } => "put_record",
            BatchOp::DeleteRecord { .. } => "delete_record",
            BatchOp::DeleteRecords { .. } => "delete_records",
        }
    }

    /// The stream this op writes to, if it appends to or closes one (its tails are woken
    /// after the commit).
    pub fn woken_stream(&self) -> Option<&StreamId> {
        match self {
            BatchOp::Append { stream, .. } | BatchOp::Close { stream } => Some(stream),
            _ => None,
        }
    }
}

/// Writes committed together by [`crate::Store::commit`]: all of them, in order, or none.
/// Build it with the chained methods; [`WriteBatch::push`] adds a prepared [`BatchOp`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    ops: Vec<BatchOp>,
}

impl WriteBatch {
    /// An empty batch (committing it writes nothing and succeeds).
    pub fn new() -> Self {
        Self::default()
    }

    /// Add `op` at the end.
    pub fn push(&mut self, op: BatchOp) -> &mut Self {
        self.ops.push(op);
        self
    }

    /// Add [`BatchOp::CreateStream`].
    pub fn create_stream(mut self, id: StreamId, owner: StreamOwner) -> Self {
        self.ops.push(BatchOp::CreateStream { id, owner });
        self
    }

    /// Add [`BatchOp::Append`].
    pub fn append(mut self, stream: StreamId, data: impl Into<String>) -> Self {
        self.ops.push(BatchOp::Append {
            stream,
            data: data.into(),
        });
        self
    }

    /// Add [`BatchOp::Close`].
    pub fn close(mut self, stream: StreamId) -> Self {
        self.ops.push(BatchOp::Close { stream });
        self
    }

    /// Add [`BatchOp::PutRecord`].
    pub fn put_record(
        mut self,
        kind: RecordKind,
        key: impl Into<String>,
        value: impl Into<String>,
        expires_at_ms: Option<u64>,
        expect: Expect,
    ) -> Self {
        self.ops.push(BatchOp::PutRecord {
            kind,
            key: key.into(),
            value: value.into(),
            expires_at_ms,
            expect,
        });
        self
    }

    /// Add [`BatchOp::DeleteRecord`].
    pub fn delete_record(mut self, kind: RecordKind, key: impl Into<String>, version: u64) -> Self {
        self.ops.push(BatchOp::DeleteRecord {
            kind,
            key: key.into(),
            version,
        });
        self
    }

    /// Add [`BatchOp::DeleteRecords`].
    pub fn delete_records(mut self, kind: RecordKind, prefix: impl Into<String>) -> Self {
        self.ops.push(BatchOp::DeleteRecords {
            kind,
            prefix: prefix.into(),
        });
        self
    }

    /// The ops, in order.
    pub fn ops(&self) -> &[BatchOp] {
        &self.ops
    }

    /// The ops, taken out.
    pub fn into_ops(self) -> Vec<BatchOp> {
        self.ops
    }

    /// How many ops.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether there are no ops.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The distinct streams the batch appends to or closes, in first-touch order: a
    /// backend wakes each one once after the commit. A stream the batch creates is not
    /// among them: it did not exist before the commit (creating one that exists refuses the
    /// batch), and reading a stream that does not exist is `NotFound`, so no tail can be
    /// waiting on it (a request's first commit wakes nobody, nor does its `NOTIFY` or
    /// `PUBLISH` cost anything).
    pub fn woken_streams(&self) -> Vec<StreamId> {
        let mut out: Vec<StreamId> = Vec::new();
        let created = |stream: &StreamId| {
            self.ops
                .iter()
                .any(|op| matches!(op, BatchOp::CreateStream { id, .. } if id == stream))
        };
        for stream in self.ops.iter().filter_map(BatchOp::woken_stream) {
            if !out.contains(stream) && !created(stream) {
                out.push(stream.clone());
            }
        }
        out
    }
}

/// What one op of a committed batch produced, at the op's index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpOutcome {
    /// The stream was created.
    Created,
    /// The event was appended with this id.
    Appended(EventId),
    /// The stream was closed.
    Closed,
    /// The record was written at this version.
    Put(u64),
    /// This many (unexpired) records were deleted.
    Deleted(u64),
}

/// What a committed batch produced: one [`OpOutcome`] per op, in the batch's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    /// One outcome per op.
    pub ops: Vec<OpOutcome>,
}

impl BatchOutcome {
    /// The event id op `index` appended, if it was an append.
    pub fn event(&self, index: usize) -> Option<&EventId> {
        match self.ops.get(index) {
            Some(OpOutcome::Appended(id)) => Some(id),
            _ => None,
        }
    }

    /// The record version op `index` wrote, if it was a put.
    pub fn version(&self, index: usize) -> Option<u64> {
        match self.ops.get(index) {
            Some(OpOutcome::Put(version)) => Some(*version),
            _ => None,
        }
    }

    /// Every appended event id, in order.
    pub fn events(&self) -> impl Iterator<Item = &EventId> {
        self.ops.iter().filter_map(|op| match op {
            OpOutcome::Appended(id) => Some(id),
            _ => None,
        })
    }
}

/// The error of a batch whose op `index` was refused: [`StoreError::BatchOp`] naming it.
pub fn op_failed(index: usize, op: &BatchOp, source: StoreError) -> StoreError {
    StoreError::BatchOp {
        index,
        op: op.name(),
        source: Box::new(source),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Principal, StoreErrorKind};

    #[test]
    fn woken_streams_are_distinct_in_first_touch_order_and_exclude_streams_created_with_them() {
        let (a, b) = (StreamId::random(), StreamId::random());
        let owner = StreamOwner {
            principal: Principal::anonymous(),
            session: None,
        };
        let batch = WriteBatch::new()
            .create_stream(b.clone(), owner)
            .append(a.clone(), "1")
            .append(b.clone(), "2")
            .append(a.clone(), "3")
            .close(a.clone())
            .put_record(RecordKind::Run, "k", "v", None, Expect::Absent);
        assert_eq!(
            batch.woken_streams(),
            vec![a.clone()],
            "one wake-up per stream; a stream the batch creates wakes nothing"
        );
        let later = WriteBatch::new().append(b.clone(), "4").close(b.clone());
        assert_eq!(
            later.woken_streams(),
            vec![b],
            "the next batch to write to it wakes its tails"
        );
    }

    #[test]
    fn a_refused_op_names_itself_and_keeps_its_kind() {
        let op = BatchOp::DeleteRecord {
            kind: RecordKind::Run,
            key: "k".into(),
            version: 3,
        };
        let error = op_failed(2, &op, StoreError::Conflict { what: "record" });
        assert_eq!(error.kind(), StoreErrorKind::Conflict);
        assert!(matches!(
            error.refusal(),
            StoreError::Conflict { what: "record" }
        ));
        assert_eq!(
            error.to_string(),
            "batch op 2 (delete_record) refused: conflict: record changed concurrently"
        );
        assert!(
            std::error::Error::source(&error).is_some(),
            "the refusal is the source"
        );
    }
}
