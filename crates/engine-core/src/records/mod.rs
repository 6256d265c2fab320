//! The bottom layer of the engine: the records it keeps in the store, their keys, and the
//! enums their fields hold.
//!
//! Every record key the engine writes is built by a function of [`key`], and nowhere
//! else; every record value is encoded and decoded here, and a value that does not decode
//! is a [`RecordError`] that keeps the decoder's error as its source. Keys and values are
//! persistent (another worker, or a later version of durable-mcp, reads what this one
//! wrote): their layout is pinned by the tests of this module, and changing it is a
//! migration, never a refactoring.
//!
//! Nothing here reads or writes the store, and nothing here imports an engine module above
//! layer 0 (only `traces`' `TraceContext`, kept in run records): the journal,
//! tasks and the request path are built on these types.

mod action;
mod alias;
pub mod key;
mod run;
mod step;
mod subscription;
mod task;

use durable_mcp_store::RecordKind;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use action::{ACTION_TTL_MS, ActionKind, ActionRecord};
pub use alias::{AliasRecord, RequestFingerprint};
pub use durable_mcp_protocol::tasks::TaskStatus;
pub use run::{
    ATTEMPTS_KEPT, Attempt, AttemptEnd, AttemptEnding, ParkReason, Parked, Relay, RunRecord,
    StoredHead,
};
pub use run::{Era, is_credential};
pub use step::{StepMeta, decode_step, encode_step};
pub use subscription::SubscriptionEntry;
pub use task::{Flavor, TaskRecord, iso8601};

/// A record value the engine cannot use.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// A stored value does not decode as the record its kind and key name (written by
    /// another version of durable-mcp, or damaged).
    #[error("{kind} record {key:?} does not decode")]
    Decode {
        /// The record's kind.
        kind: RecordKind,
        /// The record's key.
        key: String,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// A record does not encode (a value in it has no JSON form).
    #[error("{kind} record does not encode")]
    Encode {
        /// The record's kind.
        kind: RecordKind,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// A record that was there is gone (read back after a conflict, say, and expired or
    /// deleted in between).
    #[error("{kind} record {key:?} vanished")]
    Missing {
        /// The record's kind.
        kind: RecordKind,
        /// The record's key.
        key: String,
    },
    /// A committed write batch has no outcome for one of its ops (a store that broke the
    /// batch contract).
    #[error("a committed batch has no version for its {kind} record")]
    MissingVersion {
        /// The record's kind.
        kind: RecordKind,
    },
}

/// The value of a mark record (a step's "already emitted" mark, a cancellation mark):
/// only its existence counts.
pub const MARK: &str = "1";

/// Encode a record of `kind` as the JSON the store keeps.
pub fn encode<T: Serialize>(kind: RecordKind, record: &T) -> Result<String, RecordError> {
    serde_json::to_string(record).map_err(|source| RecordError::Encode { kind, source })
}

/// Decode the stored value of the record `kind`/`key`.
pub fn decode<T: DeserializeOwned>(
    kind: RecordKind,
    key: &str,
    value: &str,
) -> Result<T, RecordError> {
    serde_json::from_str(value).map_err(|source| RecordError::Decode {
        kind,
        key: key.to_owned(),
        source,
    })
}

/// JSON with object keys in sorted order, whatever the map type: the same value always
/// gives the same bytes (sealed-state bindings and re-run comparisons depend on it).
pub fn canonical(value: &serde_json::Value) -> String {
    let mut out = Vec::new();
    write_canonical(value, None, &mut out);
    // Only JSON text was written, which is UTF-8.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// [`canonical`] of `value` appended to `out`, without the top-level object's key `skip`.
pub(crate) fn write_canonical(value: &serde_json::Value, skip: Option<&str>, out: &mut Vec<u8>) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map
                .keys()
                .filter(|key| Some(key.as_str()) != skip)
                .collect();
            keys.sort_unstable();
            out.push(b'{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_scalar(key, out);
                out.push(b':');
                write_canonical(&map[key], None, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, None, out);
            }
            out.push(b']');
        }
        other => write_scalar(other, out),
    }
}

/// A string, number, boolean or null as compact JSON.
fn write_scalar(value: &(impl serde::Serialize + ?Sized), out: &mut Vec<u8>) {
    // Serializing these into a `Vec` cannot fail.
    let _ = serde_json::to_writer(out, value);
}

#[cfg(test)]
mod tests;
