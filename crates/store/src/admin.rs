//! What operators read from a store: stream summaries (for `dump`, `copy`, `stats`) and
//! the store's own account of its health and settings (for `/readyz` and `doctor`).

use serde::{Deserialize, Serialize};

use crate::ids::StreamId;
use crate::record::StreamOwner;

/// One stream, without its events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamInfo {
    /// The stream's id.
    pub id: StreamId,
    /// Who owns it (and its session, if any).
    pub owner: StreamOwner,
    /// The oldest retained sequence (1 unless older events were trimmed).
    pub first_seq: u64,
    /// The last appended sequence (0: no event yet).
    pub last_seq: u64,
    /// Whether the final event was appended.
    pub closed: bool,
}

/// What a store says about itself: its schema, its clock and the settings it runs with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreStatus {
    /// The schema version found in the store and the one this build writes (`None` for
    /// backends without a schema: memory, Redis).
    pub schema: Option<SchemaVersion>,
    /// The store server's clock, milliseconds since the Unix epoch, read by this call
    /// (`None` for in-process stores, whose clock is this host's).
    pub server_time_ms: Option<u64>,
    /// Settings that matter for durability, as the store reports them.
    pub settings: Vec<Setting>,
}

/// A schema version, found and expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaVersion {
    /// The version the store holds.
    pub found: i64,
    /// The version this build writes.
    pub expected: i64,
}

impl SchemaVersion {
    /// Whether the store's schema is the one this build writes.
    pub fn is_current(&self) -> bool {
        self.found == self.expected
    }
}

/// One setting of a store, and what is wrong with it if it weakens durability.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setting {
    /// Its name as the store spells it (`synchronous`, `appendonly`, ...).
    pub name: String,
    /// Its value as the store reports it.
    pub value: String,
    /// `Some` when the value weakens durability: what is lost and how to fix it.
    pub weakness: Option<Weakness>,
}

/// A setting that weakens durability.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Weakness {
    /// What can be lost, in plain words.
    pub risk: String,
    /// How to fix it.
    pub fix: String,
}

impl Setting {
    /// A setting that is fine as it is.
    pub fn fine(name: &str, value: impl Into<String>) -> Self {
        Self {
            name: name.to_owned(),
            value: value.into(),
            weakness: None,
        }
    }

    /// A setting that weakens durability.
    pub fn weak(
        name: &str,
        value: impl Into<String>,
        risk: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            name: name.to_owned(),
            value: value.into(),
            weakness: Some(Weakness {
                risk: risk.into(),
                fix: fix.into(),
            }),
        }
    }
}
