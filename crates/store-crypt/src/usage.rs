//! Which keys the values of a store were sealed with: what `keys encryption retire` checks
//! before it removes a key (a key is retired only when nothing in the store uses it).

use std::collections::BTreeMap;

use durable_mcp_store::{RecordKind, Store, StoreError, StoreResult, StreamId};

use crate::envelope::{PREFIX, key_id_of};

/// How many stored values each key sealed, and how many are in clear.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyUsage {
    /// Values sealed with each key id.
    pub by_key: BTreeMap<String, u64>,
    /// Values stored in clear (written before encryption was turned on).
    pub plaintext: u64,
}

impl KeyUsage {
    fn count(&mut self, value: &str) {
        match key_id_of(value) {
            Some(id) => *self.by_key.entry(id.to_owned()).or_default() += 1,
            None => self.plaintext += 1,
        }
    }

    fn count_json(&mut self, value: &serde_json::Value) {
        match value {
            serde_json::Value::String(text) if text.starts_with(PREFIX) => self.count(text),
            _ => self.plaintext += 1,
        }
    }

    /// How many values `id` sealed.
    pub fn of(&self, id: &str) -> u64 {
        self.by_key.get(id).copied().unwrap_or(0)
    }
}

/// Values read per page while scanning events.
const PAGE: usize = 1024;

/// Scan every value of `raw` (the store as the backend holds it, *not* a
/// [`crate::CryptStore`]: its values are the envelopes): live sessions' initialize params
/// and state, unexpired records of every kind, and the retained events of every stream.
///
/// # Durability
/// Reads only; a snapshot per page, so values written during the scan may or may not be
/// counted (they are sealed with the primary key, which cannot be retired). A stream
/// pruned during the scan is skipped.
pub async fn key_usage(raw: &dyn Store) -> StoreResult<KeyUsage> {
    let mut usage = KeyUsage::default();
    for session in raw.list_sessions(None, usize::MAX).await? {
        usage.count_json(&session.client);
        session
            .state
            .values()
            .for_each(|value| usage.count_json(value));
    }
    for kind in RecordKind::ALL {
        for record in raw.list_records(kind, "", usize::MAX).await? {
            usage.count(&record.value);
        }
    }
    let mut after: Option<StreamId> = None;
    loop {
        let streams = raw.list_streams(after.as_ref(), PAGE).await?;
        let Some(last) = streams.last() else { break };
        after = Some(last.id.clone());
        for stream in &streams {
            let mut seq = stream.first_seq.saturating_sub(1);
            loop {
                let read = match raw.read_after(&stream.id, seq, PAGE).await {
                    Ok(read) => read,
                    Err(StoreError::NotFound { .. } | StoreError::Pruned { .. }) => break,
                    Err(error) => return Err(error),
                };
                let Some(last) = read.events.last() else {
                    break;
                };
                seq = last.id.seq;
                read.events
                    .iter()
                    .for_each(|event| usage.count(&event.data));
            }
        }
    }
    Ok(usage)
}
