//! Records the store keeps.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::ids::{EventId, Principal, SessionId, StreamId};

/// A legacy-era session: everything a worker needs to serve it without a new `initialize` (D4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The session's id.
    pub id: SessionId,
    /// Its owner (D13).
    pub principal: Principal,
    /// The negotiated protocol version.
    pub protocol_version: String,
    /// The client's `initialize` params (capabilities, clientInfo), as sent.
    pub client: serde_json::Value,
    /// The level set by `logging/setLevel`, if any.
    pub log_level: Option<String>,
    /// Resource URIs the client subscribed to.
    pub subscriptions: BTreeSet<String>,
    /// Per-session application state, by key.
    pub state: BTreeMap<String, serde_json::Value>,
    /// The session's standalone (GET) stream.
    pub standalone_stream: StreamId,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// Last use, milliseconds since the Unix epoch.
    pub last_seen_ms: u64,
}

/// A change to a session, applied atomically by [`crate::Store::update_session`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum SessionChange {
    /// Record use now (idle TTL counts from here).
    Touch,
    /// `logging/setLevel`.
    SetLogLevel(String),
    /// `resources/subscribe`.
    Subscribe(String),
    /// `resources/unsubscribe`.
    Unsubscribe(String),
    /// Set one key of the per-session application state (`None` removes it).
    SetState(String, Option<serde_json::Value>),
    /// Set one key only if it still holds `expected` (`None`: absent); otherwise the update
    /// fails with [`crate::StoreError::Conflict`] and changes nothing. The basis of
    /// lost-update-free read-modify-write from several workers.
    CompareAndSetState {
        /// The key.
        key: String,
        /// The value the caller read.
        expected: Option<serde_json::Value>,
        /// The value to store (`None` removes the key).
        value: Option<serde_json::Value>,
    },
}

impl SessionRecord {
    /// Apply `change` to this record (the in-memory half of `update_session`, shared by
    /// backends that read-modify-write). A failed compare-and-set leaves the record as it was.
    pub fn apply(&mut self, change: &SessionChange, now_ms: u64) -> Result<(), crate::StoreError> {
        if let SessionChange::CompareAndSetState { key, expected, .. } = change
            && self.state.get(key) != expected.as_ref()
        {
            return Err(crate::StoreError::Conflict { what: "session state" });
        }
        self.last_seen_ms = now_ms;
        match change {
            SessionChange::Touch => {}
            SessionChange::SetLogLevel(level) => self.log_level = Some(level.clone()),
            SessionChange::Subscribe(uri) => {
                self.subscriptions.insert(uri.clone());
            }
            SessionChange::Unsubscribe(uri) => {
                self.subscriptions.remove(uri);
            }
            SessionChange::SetState(key, Some(value)) => {
                self.state.insert(key.clone(), value.clone());
            }
            SessionChange::SetState(key, None) | SessionChange::CompareAndSetState { key, value: None, .. } => {
                self.state.remove(key);
            }
            SessionChange::CompareAndSetState { key, value: Some(value), .. } => {
                self.state.insert(key.clone(), value.clone());
            }
        }
        Ok(())
    }
}

/// Who a stream belongs to; checked on every resume (D3, D13).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamOwner {
    /// The owning principal.
    pub principal: Principal,
    /// The session, for legacy-era streams; `None` for modern (sessionless) streams.
    pub session: Option<SessionId>,
}

/// One committed event of a stream's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    /// Its id (stream and sequence).
    pub id: EventId,
    /// The serialized JSON-RPC message, or empty for a priming event.
    pub data: String,
}

/// The answer to a read of a stream's log.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamRead {
    /// Committed events after the requested position, in order, without gaps.
    pub events: Vec<StoredEvent>,
    /// Whether the stream is closed *and* `events` reaches its last event: nothing will
    /// ever follow.
    pub finished: bool,
}

/// Retention settings applied by [`crate::Store::prune`] (D14).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retention {
    /// End sessions not used for this long (milliseconds).
    pub session_idle_ttl_ms: Option<u64>,
    /// Delete finished streams (closed: their request is answered) whose last event is
    /// older than this (milliseconds). Open streams are never deleted by age.
    pub max_stream_age_ms: Option<u64>,
}

/// What one prune removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Sessions ended because they were idle past the TTL.
    pub sessions_ended: u64,
    /// Finished streams deleted because they were older than the maximum age.
    pub streams_deleted: u64,
    /// Journal records deleted because they expired.
    pub records_expired: u64,
}
