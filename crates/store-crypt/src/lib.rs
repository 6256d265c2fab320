//! Encryption at rest for any durable-mcp store.
//!
//! [`CryptStore`] wraps a [`Store`] (any backend: it knows only the contract) and seals, with
//! AES-256-GCM, what clients and handlers put in the store before it reaches the backend:
//!
//! - event payloads (the JSON-RPC messages of every stream: `append`, batch appends,
//!   `import_events`);
//! - journal record values of every kind (runs with their request, step results, answers,
//!   tasks, aliases, change announcements, application state, the `requestState` sealing
//!   keys, the subscription index): `put_record` and batch puts;
//! - a session's `client` (the client's initialize params) and each value of its
//!   per-session `state`.
//!
//! Every read path opens them again (`read_after`, `get_record`, `list_records`,
//! `load_session`, `update_session`, `list_sessions`), so the layers above, `dump` and
//! `copy` see plaintext. What a backend must read to do its job stays in clear: ids, keys,
//! versions, expiry, sequences, principals, timestamps, a session's protocol version, log
//! level, subscribed URIs and delivery state (see `docs/security.md`).
//!
//! Each value is sealed for where it lives: the additional authenticated data is the
//! stream id (events), the record kind and key (records), the session id and state key
//! (sessions). A value copied to another stream, record or session does not open there.
//! The envelope names the key that sealed it ([`envelope`]); a [`KeyRing`] seals with its
//! primary key and opens with any of its keys, so after a rotation the older values stay
//! readable. A value that does not open is [`StoreError::Corrupt`] naming what and where;
//! nothing panics.
//!
//! A stored value without the envelope's prefix was written before encryption was turned
//! on and is returned as it is, so encryption can be enabled on an existing store. Once
//! enabled, nothing is written in clear.
//!
//! # Durability
//! Every call goes to the wrapped store once (a compare-and-set of session state also reads
//! the session first, see [`CryptStore::update_session`]), with the same ids, keys,
//! conditions and expiries, so every guarantee of the wrapped store (D1..D15) holds as it
//! is: the contract suite runs through this wrapper on every backend.

pub mod envelope;
mod keyring;
mod usage;

use std::sync::Arc;

use async_trait::async_trait;
use durable_mcp_store::{
    BatchOp, BatchOutcome, EventId, Expect, Principal, PruneReport, Record, RecordKind, Retention,
    SessionChange, SessionId, SessionRecord, Setting, Store, StoreError, StoreResult, StoreStatus,
    StoredEvent, StreamId, StreamInfo, StreamOwner, StreamRead, WakeUps, WriteBatch,
};

pub use envelope::{OpenError, SealError};
pub use keyring::{KEY_FILE_VERSION, KeyError, KeyFile, KeyInfo, KeyRing};
pub use usage::{KeyUsage, key_usage};

/// Where a value lives, as the additional authenticated data binds it.
pub(crate) enum Place<'a> {
    Event(&'a StreamId),
    Record(RecordKind, &'a str),
    Client(&'a SessionId),
    State(&'a SessionId, &'a str),
}

impl Place<'_> {
    /// The additional authenticated data: a domain tag and the place's ids, NUL-separated
    /// (ids and record kinds hold no NUL; a record key's last part may, so it comes last).
    fn aad(&self) -> Vec<u8> {
        let parts: [&str; 4] = match self {
            Place::Event(stream) => ["event", stream.as_str(), "", ""],
            Place::Record(kind, key) => ["record", kind.as_str(), key, ""],
            Place::Client(session) => ["session-client", session.as_str(), "", ""],
            Place::State(session, key) => ["session-state", session.as_str(), key, ""],
        };
        parts.join("\0").into_bytes()
    }
}

impl std::fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::Event(stream) => write!(f, "an event of stream {stream}"),
            Place::Record(kind, key) => write!(f, "{kind} record {key:?}"),
            Place::Client(session) => write!(f, "the initialize params of session {session}"),
            Place::State(session, key) => write!(f, "state key {key:?} of session {session}"),
        }
    }
}

/// A [`Store`] that encrypts what it stores in the store it wraps (see the crate docs).
pub struct CryptStore {
    inner: Arc<dyn Store>,
    ring: Arc<KeyRing>,
}

impl std::fmt::Debug for CryptStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CryptStore")
            .field("backend", &self.inner.backend())
            .field("ring", &self.ring)
            .finish()
    }
}

impl CryptStore {
    /// Encrypt what goes into `inner` with `ring`.
    pub fn new(inner: Arc<dyn Store>, ring: Arc<KeyRing>) -> Self {
        Self { inner, ring }
    }

    /// The wrapped store (it holds the envelopes as they are stored).
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    /// The key ring.
    pub fn ring(&self) -> &KeyRing {
        &self.ring
    }

    fn seal(&self, place: Place<'_>, plaintext: &str) -> StoreResult<String> {
        self.ring
            .seal(&place.aad(), plaintext)
            .map_err(|error| match error {
                SealError::TooLong => {
                    StoreError::Refused(format!("encrypting {place}: {error}").into())
                }
                other => StoreError::Unavailable(format!("encrypting {place}: {other}").into()),
            })
    }

    fn open(&self, place: Place<'_>, stored: String) -> StoreResult<String> {
        if !stored.starts_with(envelope::PREFIX) {
            return Ok(stored);
        }
        self.ring.open(&place.aad(), &stored).map_err(|error| {
            tracing::error!(%error, place = %place, "a stored value did not decrypt");
            StoreError::Corrupt(format!("{place}: {error}"))
        })
    }

    fn seal_json(
        &self,
        place: Place<'_>,
        value: &serde_json::Value,
    ) -> StoreResult<serde_json::Value> {
        Ok(serde_json::Value::String(
            self.seal(place, &value.to_string())?,
        ))
    }

    fn open_json(
        &self,
        place: Place<'_>,
        value: serde_json::Value,
    ) -> StoreResult<serde_json::Value> {
        match value {
            serde_json::Value::String(text) if text.starts_with(envelope::PREFIX) => {
                let what = place.to_string();
                let plain = self.open(place, text)?;
                serde_json::from_str(&plain).map_err(|e| {
                    StoreError::Corrupt(format!("{what}: decrypted to invalid JSON: {e}"))
                })
            }
            plain => Ok(plain),
        }
    }

    fn seal_session(&self, mut record: SessionRecord) -> StoreResult<SessionRecord> {
        record.client = self.seal_json(Place::Client(&record.id), &record.client)?;
        for (key, value) in record.state.iter_mut() {
            *value = self.seal_json(Place::State(&record.id, key), value)?;
        }
        Ok(record)
    }

    fn open_session(&self, mut record: SessionRecord) -> StoreResult<SessionRecord> {
        record.client = self.open_json(
            Place::Client(&record.id),
            std::mem::take(&mut record.client),
        )?;
        for (key, value) in record.state.iter_mut() {
            *value = self.open_json(Place::State(&record.id, key), std::mem::take(value))?;
        }
        Ok(record)
    }

    fn open_record(&self, kind: RecordKind, mut record: Record) -> StoreResult<Record> {
        record.value = self.open(
            Place::Record(kind, &record.key),
            std::mem::take(&mut record.value),
        )?;
        Ok(record)
    }

    fn seal_op(&self, op: BatchOp) -> StoreResult<BatchOp> {
        Ok(match op {
            BatchOp::Append { stream, data } => {
                let data = self.seal(Place::Event(&stream), &data)?;
                BatchOp::Append { stream, data }
            }
            BatchOp::PutRecord {
                kind,
                key,
                value,
                expires_at_ms,
                expect,
            } => {
                let value = self.seal(Place::Record(kind, &key), &value)?;
                BatchOp::PutRecord {
                    kind,
                    key,
                    value,
                    expires_at_ms,
                    expect,
                }
            }
            other @ (BatchOp::CreateStream { .. }
            | BatchOp::Close { .. }
            | BatchOp::DeleteRecord { .. }
            | BatchOp::DeleteRecords { .. }) => other,
        })
    }
}

#[async_trait]
impl Store for CryptStore {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    async fn create_session(&self, record: SessionRecord) -> StoreResult<()> {
        self.inner.create_session(self.seal_session(record)?).await
    }

    async fn load_session(
        &self,
        principal: &Principal,
        id: &SessionId,
    ) -> StoreResult<SessionRecord> {
        self.open_session(self.inner.load_session(principal, id).await?)
    }

    /// Seals the value of [`SessionChange::SetState`] and [`SessionChange::CompareAndSetState`].
    ///
    /// # Durability
    /// A compare-and-set of a state key cannot compare plaintext in the backend (each seal
    /// of a value differs: random nonces), so this reads the session first, opens the
    /// stored value and compares it with `expected` here (a mismatch is
    /// [`StoreError::Conflict`], as the backend would answer); then it asks the backend to
    /// set the key only if it still holds exactly the stored envelope it read. A change by
    /// anyone in between replaced that envelope, so the backend refuses: no update is lost
    /// (D4).
    async fn update_session(
        &self,
        principal: &Principal,
        id: &SessionId,
        change: SessionChange,
    ) -> StoreResult<SessionRecord> {
        let change = match change {
            SessionChange::SetState(key, Some(value)) => {
                let sealed = self.seal_json(Place::State(id, &key), &value)?;
                SessionChange::SetState(key, Some(sealed))
            }
            SessionChange::CompareAndSetState {
                key,
                expected,
                value,
            } => {
                let stored = self
                    .inner
                    .load_session(principal, id)
                    .await?
                    .state
                    .remove(&key);
                let current = stored
                    .clone()
                    .map(|v| self.open_json(Place::State(id, &key), v))
                    .transpose()?;
                if current != expected {
                    return Err(StoreError::Conflict {
                        what: "session state",
                    });
                }
                let value = value
                    .map(|v| self.seal_json(Place::State(id, &key), &v))
                    .transpose()?;
                SessionChange::CompareAndSetState {
                    key,
                    expected: stored,
                    value,
                }
            }
            // The other changes carry no client data (a log level, a subscribed URI, the
            // delivery state): the backend applies them as they are. A new variant that
            // carries client data must be sealed above.
            other => other,
        };
        self.open_session(self.inner.update_session(principal, id, change).await?)
    }

    async fn end_session(&self, principal: &Principal, id: &SessionId) -> StoreResult<bool> {
        self.inner.end_session(principal, id).await
    }

    async fn list_sessions(
        &self,
        principal: Option<&Principal>,
        limit: usize,
    ) -> StoreResult<Vec<SessionRecord>> {
        self.inner
            .list_sessions(principal, limit)
            .await?
            .into_iter()
            .map(|record| self.open_session(record))
            .collect()
    }

    async fn create_stream(&self, id: &StreamId, owner: &StreamOwner) -> StoreResult<()> {
        self.inner.create_stream(id, owner).await
    }

    async fn append(&self, stream: &StreamId, data: String, close: bool) -> StoreResult<EventId> {
        let sealed = self.seal(Place::Event(stream), &data)?;
        self.inner.append(stream, sealed, close).await
    }

    async fn stream_owner(&self, stream: &StreamId) -> StoreResult<StreamOwner> {
        self.inner.stream_owner(stream).await
    }

    async fn read_after(
        &self,
        stream: &StreamId,
        after: u64,
        limit: usize,
    ) -> StoreResult<StreamRead> {
        let mut read = self.inner.read_after(stream, after, limit).await?;
        for event in &mut read.events {
            event.data = self.open(
                Place::Event(&event.id.stream),
                std::mem::take(&mut event.data),
            )?;
        }
        Ok(read)
    }

    async fn prune(&self, retention: &Retention, now_ms: u64) -> StoreResult<PruneReport> {
        self.inner.prune(retention, now_ms).await
    }

    async fn prune_preview(&self, retention: &Retention, now_ms: u64) -> StoreResult<PruneReport> {
        self.inner.prune_preview(retention, now_ms).await
    }

    async fn put_record(
        &self,
        kind: RecordKind,
        key: &str,
        value: String,
        expires_at_ms: Option<u64>,
        expect: Expect,
    ) -> StoreResult<u64> {
        let sealed = self.seal(Place::Record(kind, key), &value)?;
        self.inner
            .put_record(kind, key, sealed, expires_at_ms, expect)
            .await
    }

    async fn get_record(&self, kind: RecordKind, key: &str) -> StoreResult<Option<Record>> {
        self.inner
            .get_record(kind, key)
            .await?
            .map(|record| self.open_record(kind, record))
            .transpose()
    }

    async fn list_records(
        &self,
        kind: RecordKind,
        prefix: &str,
        limit: usize,
    ) -> StoreResult<Vec<Record>> {
        self.inner
            .list_records(kind, prefix, limit)
            .await?
            .into_iter()
            .map(|record| self.open_record(kind, record))
            .collect()
    }

    async fn delete_records(&self, kind: RecordKind, prefix: &str) -> StoreResult<u64> {
        self.inner.delete_records(kind, prefix).await
    }

    async fn commit(&self, batch: WriteBatch) -> StoreResult<BatchOutcome> {
        let mut sealed = WriteBatch::new();
        for op in batch.into_ops() {
            sealed.push(self.seal_op(op)?);
        }
        self.inner.commit(sealed).await
    }

    async fn list_streams(
        &self,
        after: Option<&StreamId>,
        limit: usize,
    ) -> StoreResult<Vec<StreamInfo>> {
        self.inner.list_streams(after, limit).await
    }

    async fn stream_info(&self, stream: &StreamId) -> StoreResult<StreamInfo> {
        self.inner.stream_info(stream).await
    }

    /// The wrapped store's status, with one more setting: `encryption`, naming the
    /// primary key and how many keys open values.
    async fn status(&self) -> StoreResult<StoreStatus> {
        let mut status = self.inner.status().await?;
        let keys = self.ring.ids().count();
        status.settings.push(Setting::fine(
            "encryption",
            format!(
                "aes-256-gcm, primary key {}, {keys} key(s) in the ring",
                self.ring.primary_id()
            ),
        ));
        Ok(status)
    }

    /// Forwarded with each event's data sealed, not left to the provided implementation:
    /// the wrapped backend's own (one transaction, any first sequence) must stay the one
    /// that runs.
    async fn import_events(
        &self,
        stream: &StreamId,
        owner: &StreamOwner,
        events: &[StoredEvent],
        close: bool,
    ) -> StoreResult<u64> {
        let sealed = events
            .iter()
            .map(|event| {
                Ok(StoredEvent {
                    id: event.id.clone(),
                    data: self.seal(Place::Event(stream), &event.data)?,
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        self.inner
            .import_events(stream, owner, &sealed, close)
            .await
    }

    async fn watch(&self, stream: &StreamId) -> StoreResult<WakeUps> {
        self.inner.watch(stream).await
    }
}

#[cfg(test)]
mod tests;
