//! Errors of the engine, classified so that transports can map them to statuses.

use durable_mcp_protocol::jsonrpc::Rejection;
use durable_mcp_store::{StoreError, StoreErrorKind, StreamId};

use crate::records::RecordError;

/// Why the engine refused or failed a request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The session id is unknown, ended, expired or another principal's (404).
    #[error("session not found")]
    SessionNotFound,
    /// A `Last-Event-ID` whose successors were pruned by retention (D14): the store's
    /// [`StoreErrorKind::Pruned`] error.
    #[error(transparent)]
    EventPruned(StoreError),
    /// The message was refused before any handler ran (bad params, ...).
    #[error(transparent)]
    Rejected(#[from] Rejection),
    /// The store failed (D15: unavailable maps to 503).
    #[error(transparent)]
    Store(StoreError),
    /// The `requestState` keys cannot be used: a refused `state_key`, or a stored key ring
    /// that does not decode.
    #[error(transparent)]
    StateKeys(#[from] std::sync::Arc<durable_mcp_handler::StateKeyError>),
    /// A stored session names a protocol version this build does not serve (a store
    /// written by another version of durable-mcp).
    #[error("session protocol version: {0}")]
    SessionVersion(#[from] durable_mcp_protocol::UnknownVersion),
    /// The handler ended without answering (for example it was cancelled).
    #[error("the handler ended without a response")]
    NoOutcome,
    /// A stored record does not decode, or a record does not encode.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// A run ended while its durable context still waited on it (to become a task).
    #[error("the run has ended")]
    RunEnded,
    /// A limit per principal refused the request (429), before anything of it was
    /// written.
    #[error(transparent)]
    Limited(#[from] crate::limits::Refused),
    /// A run's stream could not be closed (the store refused it, repeatedly): the run
    /// stays journaled and a later recovery pass closes it.
    #[error("could not close the stream {0} of a run")]
    StreamNotClosed(StreamId),
    /// An operator's action names a run that is not in the journal: it has finished, was
    /// killed, or never existed.
    #[error("run {0} is not in the journal: it has finished, was killed, or never existed")]
    RunNotFound(String),
    /// An operator asked to retry a run that is not parked: a running run is being tried
    /// already, one that ended has answered its client.
    #[error(
        "run {0} is not parked: only a parked run can be retried (see `runs list --state parked`)"
    )]
    RunNotParked(String),
    /// An operator's action names a task that is not in the store: it expired, or never
    /// existed.
    #[error("task {0} is not in the store: it expired, or never existed")]
    TaskNotFound(String),
    /// An operator asked to cancel a task that has ended already (the spec refuses
    /// `tasks/cancel` of a task in a terminal status).
    #[error("task {task_id} is already {status}: a task in a terminal status cannot be cancelled")]
    TaskTerminal {
        /// The task.
        task_id: String,
        /// Its terminal status.
        status: crate::records::TaskStatus,
    },
}

impl From<StoreError> for EngineError {
    fn from(error: StoreError) -> Self {
        match error.kind() {
            StoreErrorKind::Pruned => EngineError::EventPruned(error),
            _ => EngineError::Store(error),
        }
    }
}

impl From<durable_mcp_handler::StateKeyError> for EngineError {
    fn from(error: durable_mcp_handler::StateKeyError) -> Self {
        EngineError::StateKeys(std::sync::Arc::new(error))
    }
}
