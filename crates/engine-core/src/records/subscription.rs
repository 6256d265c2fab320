//! An entry of the resource subscription index
//! ([`RecordKind::Subscription`](durable_mcp_store::RecordKind::Subscription)).

use durable_mcp_store::{RecordKind, SessionId};
use serde::{Deserialize, Serialize};

use super::RecordError;

/// Which session an index entry names (a hint: the session record is the truth).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionEntry {
    /// The session's principal.
    pub principal: String,
    /// The session.
    pub session: SessionId,
}

impl SubscriptionEntry {
    /// The value the store keeps.
    pub fn encode(&self) -> Result<String, RecordError> {
        super::encode(RecordKind::Subscription, self)
    }

    /// The entry stored under `key`.
    pub fn decode(key: &str, value: &str) -> Result<Self, RecordError> {
        super::decode(RecordKind::Subscription, key, value)
    }
}
