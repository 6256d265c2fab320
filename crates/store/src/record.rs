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
    /// Which GET stream delivers the standalone stream, and how far delivery got. `None`
    /// for sessions stored before delivery was tracked: their first GET starts at the end
    /// of the standalone stream.
    #[serde(default)]
    pub delivery: Option<Delivery>,
}

/// How many holding periods a [`Delivery`] remembers.
pub const DELIVERY_EPOCHS: usize = 16;

/// The delivery state of a session's standalone stream: the one GET stream (of any worker)
/// that hands its events to a client, and the position up to which they were handed.
///
/// # Durability
/// Changed only with [`SessionChange::CompareAndSetDelivery`], so two GET streams racing to
/// deliver (on any workers) cannot both win: each event is handed to at most one stream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// The GET stream delivering now (an opaque id per connection); `None` when no GET
    /// stream holds the delivery.
    pub holder: Option<String>,
    /// Until when the holder's claim lasts without renewal (ms since the epoch); after
    /// that, another GET stream of the session may take the delivery over.
    pub lease_until_ms: u64,
    /// Every event of the standalone stream up to this sequence was handed to a GET stream.
    pub delivered: u64,
    /// The latest holding periods, oldest first (at most [`DELIVERY_EPOCHS`]): which GET
    /// stream handed out the events from which sequence on.
    pub epochs: Vec<DeliveryEpoch>,
}

/// One holding period of a [`Delivery`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryEpoch {
    /// The first sequence this holder could hand out.
    pub from: u64,
    /// The holder.
    pub holder: String,
}

impl Delivery {
    /// The GET stream that handed out the event at `seq` (`None`: not handed out yet, or
    /// older than the remembered epochs).
    pub fn delivered_by(&self, seq: u64) -> Option<&str> {
        if seq > self.delivered {
            return None;
        }
        self.epochs
            .iter()
            .rev()
            .find(|e| e.from <= seq)
            .map(|e| e.holder.as_str())
    }

    /// This state with `holder` holding from now until `lease_until_ms`; a new holder
    /// starts a new epoch.
    pub fn held_by(&self, holder: &str, lease_until_ms: u64) -> Self {
        let mut next = self.clone();
        if next.holder.as_deref() != Some(holder) {
            next.epochs.push(DeliveryEpoch {
                from: next.delivered + 1,
                holder: holder.to_owned(),
            });
            let excess = next.epochs.len().saturating_sub(DELIVERY_EPOCHS);
            next.epochs.drain(..excess);
        }
        next.holder = Some(holder.to_owned());
        next.lease_until_ms = lease_until_ms;
        next
    }
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
    /// Set the standalone stream's [`Delivery`] only if it still is `expected`; otherwise
    /// the update fails with [`crate::StoreError::Conflict`] and changes nothing.
    CompareAndSetDelivery {
        /// The state the caller read.
        expected: Option<Delivery>,
        /// The state to store.
        value: Delivery,
    },
}

impl SessionRecord {
    /// Apply `change` to this record (the in-memory half of `update_session`, shared by
    /// backends that read-modify-write). A failed compare-and-set leaves the record as it was.
    pub fn apply(&mut self, change: &SessionChange, now_ms: u64) -> Result<(), crate::StoreError> {
        if let SessionChange::CompareAndSetState { key, expected, .. } = change
            && self.state.get(key) != expected.as_ref()
        {
            return Err(crate::StoreError::Conflict {
                what: "session state",
            });
        }
        if let SessionChange::CompareAndSetDelivery { expected, .. } = change
            && self.delivery != *expected
        {
            return Err(crate::StoreError::Conflict {
                what: "session delivery",
            });
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
            SessionChange::SetState(key, None)
            | SessionChange::CompareAndSetState {
                key, value: None, ..
            } => {
                self.state.remove(key);
            }
            SessionChange::CompareAndSetState {
                key,
                value: Some(value),
                ..
            } => {
                self.state.insert(key.clone(), value.clone());
            }
            SessionChange::CompareAndSetDelivery { value, .. } => {
                self.delivery = Some(value.clone())
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

impl PruneReport {
    /// Count `batch`'s removals too (a prune is a sequence of batches, see [`PRUNE_BATCH`]).
    pub fn add(&mut self, batch: PruneReport) {
        self.sessions_ended += batch.sessions_ended;
        self.streams_deleted += batch.streams_deleted;
        self.records_expired += batch.records_expired;
    }
}

/// The most sessions, streams and records one transaction of a prune removes (of each):
/// a prune is a sequence of such batches, so that the request path's writes go between
/// them instead of waiting behind one transaction that removes everything due at once.
pub const PRUNE_BATCH: usize = 500;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_epochs_name_who_handed_out_each_event() {
        let start = Delivery::default();
        let a = start.held_by("a", 10);
        assert_eq!(
            a.epochs,
            vec![DeliveryEpoch {
                from: 1,
                holder: "a".into()
            }]
        );
        assert_eq!(
            a.held_by("a", 20).epochs.len(),
            1,
            "a renewal is not a new epoch"
        );
        let b = Delivery { delivered: 3, ..a }.held_by("b", 30);
        let done = Delivery { delivered: 5, ..b };
        assert_eq!(done.delivered_by(2), Some("a"));
        assert_eq!(done.delivered_by(4), Some("b"));
        assert_eq!(done.delivered_by(6), None, "not handed out yet");
        let mut many = Delivery::default();
        for n in 0..40u64 {
            many = Delivery {
                delivered: n,
                ..many
            }
            .held_by(&n.to_string(), 0);
        }
        assert_eq!(many.epochs.len(), DELIVERY_EPOCHS);
        assert_eq!(
            many.delivered_by(0),
            None,
            "older than the remembered epochs"
        );
    }

    #[test]
    fn compare_and_set_delivery_fails_on_a_changed_state() {
        let mut record = SessionRecord {
            id: SessionId::random(),
            principal: Principal::anonymous(),
            protocol_version: "2025-11-25".into(),
            client: serde_json::Value::Null,
            log_level: None,
            subscriptions: BTreeSet::new(),
            state: BTreeMap::new(),
            standalone_stream: StreamId::random(),
            created_at_ms: 0,
            last_seen_ms: 0,
            delivery: None,
        };
        let ours = Delivery::default().held_by("a", 10);
        let change = SessionChange::CompareAndSetDelivery {
            expected: None,
            value: ours.clone(),
        };
        record.apply(&change, 1).expect("first claim");
        assert_eq!(record.delivery.as_ref(), Some(&ours));
        let stale = SessionChange::CompareAndSetDelivery {
            expected: None,
            value: Delivery::default().held_by("b", 10),
        };
        assert!(matches!(
            record.apply(&stale, 2),
            Err(crate::StoreError::Conflict { .. })
        ));
        assert_eq!(
            record.delivery.as_ref(),
            Some(&ours),
            "a lost race changes nothing"
        );
        let mut stored = serde_json::to_value(&record).expect("encode");
        stored.as_object_mut().expect("object").remove("delivery");
        let old: SessionRecord =
            serde_json::from_value(stored).expect("a record from before delivery was tracked");
        assert_eq!(old.delivery, None);
    }
}
