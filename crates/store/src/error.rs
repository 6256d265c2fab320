//! The classified error every backend maps its native failures into.

/// What a store operation failed with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The record does not exist for this principal (it never did, it ended, it expired,
    /// or it belongs to someone else: D13 makes these indistinguishable on purpose).
    #[error("{what} not found")]
    NotFound {
        /// What was looked up.
        what: &'static str,
    },
    /// The event a resume asked for has been pruned by retention (D14). The resume cannot
    /// be served without a gap, so it is refused rather than answered with a partial stream.
    #[error("event {event} was pruned (oldest retained sequence is {oldest_retained})")]
    Pruned {
        /// The event id the caller gave.
        event: String,
        /// The oldest sequence still in the log.
        oldest_retained: u64,
    },
    /// An append to a stream that was already closed.
    #[error("stream {stream} is closed")]
    StreamClosed {
        /// The stream id.
        stream: String,
    },
    /// A compare-and-set found another value than expected: someone else changed it first.
    /// Read again and retry.
    #[error("conflict: {what} changed concurrently")]
    Conflict {
        /// What changed.
        what: &'static str,
    },
    /// Op `index` of a [`crate::WriteBatch`] was refused (`source` says why: a conflict, a
    /// closed or unknown stream, a missing session), so nothing of the batch was written.
    /// Its [`kind`](StoreError::kind) is the source's.
    #[error("batch op {index} ({op}) refused: {source}")]
    BatchOp {
        /// The op's position in the batch, from 0.
        index: usize,
        /// The op's name ([`crate::BatchOp::name`]).
        op: &'static str,
        /// Why it was refused.
        #[source]
        source: Box<StoreError>,
    },
    /// The store could not be reached or failed transiently (D15). Callers answer 503.
    #[error("store unavailable: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The store refused a value as it was given (too long for an index, out of range, not
    /// representable in its types). The store itself is healthy and the same write can
    /// never succeed: callers answer with a client error (4xx), never 503, and log it.
    #[error("store refused the value: {0}")]
    Refused(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The store holds data this version cannot use (for example a newer schema).
    #[error("store is incompatible: {0}")]
    Incompatible(String),
    /// Stored data could not be decoded.
    #[error("corrupt record: {0}")]
    Corrupt(String),
}

/// A portable classification of [`StoreError`], for callers that map errors to statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreErrorKind {
    /// See [`StoreError::NotFound`].
    NotFound,
    /// See [`StoreError::Pruned`].
    Pruned,
    /// See [`StoreError::StreamClosed`].
    StreamClosed,
    /// See [`StoreError::Conflict`].
    Conflict,
    /// See [`StoreError::Unavailable`].
    Unavailable,
    /// See [`StoreError::Refused`].
    Refused,
    /// See [`StoreError::Incompatible`] and [`StoreError::Corrupt`].
    Fatal,
}

impl StoreError {
    /// The portable kind of this error.
    pub fn kind(&self) -> StoreErrorKind {
        match self {
            StoreError::NotFound { .. } => StoreErrorKind::NotFound,
            StoreError::Pruned { .. } => StoreErrorKind::Pruned,
            StoreError::StreamClosed { .. } => StoreErrorKind::StreamClosed,
            StoreError::Conflict { .. } => StoreErrorKind::Conflict,
            StoreError::Unavailable(_) => StoreErrorKind::Unavailable,
            StoreError::Refused(_) => StoreErrorKind::Refused,
            StoreError::Incompatible(_) | StoreError::Corrupt(_) => StoreErrorKind::Fatal,
            StoreError::BatchOp { source, .. } => source.kind(),
        }
    }

    /// The error itself, or for [`StoreError::BatchOp`] the refusal of the op it names.
    pub fn refusal(&self) -> &StoreError {
        match self {
            StoreError::BatchOp { source, .. } => source.refusal(),
            other => other,
        }
    }

    /// Shorthand for [`StoreError::NotFound`].
    pub fn not_found(what: &'static str) -> Self {
        StoreError::NotFound { what }
    }
}

/// The result type of store operations.
pub type StoreResult<T> = Result<T, StoreError>;
