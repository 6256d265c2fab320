//! The `requestState` key ring in the store (D9, D12): created once by whichever worker
//! starts first, read by every worker, rotated by an operator.
//!
//! # Durability
//!
//! In plain words: with no key configured, every worker of one store seals and opens
//! `requestState` with the same keys, also after a restart, so a multi-round-trip retry may
//! reach any worker.
//!
//! Stated more precisely: the ring is one [`RecordKind::Key`] record, written with
//! `Expect::Absent` when it is first needed (the first commit wins; a worker that loses
//! the race reads the winner's ring back) and with `Expect::Version` by
//! [`rotate`] (compare-and-set, retried on conflict). A worker re-reads it at most
//! [`REFRESH`] after its last read, before it serves a request that needs it, so a
//! rotated-in key is known by every serving worker within that time; [`rotate`]'s
//! `activate_in` (default [`DEFAULT_ACTIVATE_IN`]) must exceed it.
//!
//! The ring holds the secrets: whoever can read the store can read them. The engine never
//! logs them. `EngineOptions::state_key` keeps the key out of the store instead.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use durable_mcp_handler::{KeyRing, StateKeyError, StateKeys};
use durable_mcp_store::{Expect, RecordKind, Store, StoreError, now_ms};

use crate::EngineError;

/// The key of the ring's record.
pub const RING: &str = crate::records::key::KEY_RING;

/// How long a worker uses the ring it read before reading it again.
pub const REFRESH: Duration = Duration::from_secs(10);

/// How long after a rotation the new key starts sealing, by default: every worker has read
/// it by then (several [`REFRESH`] intervals, and some clock skew).
pub const DEFAULT_ACTIVATE_IN: Duration = Duration::from_secs(60);

/// How long the previous keys still open states after the new key starts sealing, by
/// default: longer than any state lives (the engine's own live 10 minutes).
pub const DEFAULT_KEEP_OLD: Duration = Duration::from_secs(3_600);

/// The ring in `store`, if there is one.
pub async fn read(store: &dyn Store) -> Result<Option<(KeyRing, u64)>, EngineError> {
    let Some(record) = store.get_record(RecordKind::Key, RING).await? else {
        return Ok(None);
    };
    Ok(Some((KeyRing::decode(&record.value)?, record.version)))
}

/// The ring in `store`, created if there is none yet. Workers racing on an empty store all
/// get the ring whose commit came first.
pub async fn load_or_create(store: &dyn Store) -> Result<KeyRing, EngineError> {
    if let Some((ring, _)) = read(store).await? {
        return Ok(ring);
    }
    create(store).await
}

/// Commit a new ring unless one exists by now (first commit wins); the committed ring.
async fn create(store: &dyn Store) -> Result<KeyRing, EngineError> {
    let ring = KeyRing::generate(now_ms());
    match store
        .put_record(RecordKind::Key, RING, ring.encode()?, None, Expect::Absent)
        .await
    {
        Ok(_) => {
            tracing::info!(key = %ring.keys()[0].id, "created the requestState key ring");
            Ok(ring)
        }
        Err(StoreError::Conflict { .. }) => match read(store).await? {
            Some((ring, _)) => Ok(ring),
            None => Err(EngineError::Store(StoreError::Conflict {
                what: "the requestState key ring vanished as it was created",
            })),
        },
        Err(error) => Err(error.into()),
    }
}

/// Add a new key to the ring in `store` (creating the ring first if there is none): it
/// seals from `activate_in` from now, and the previous keys open until `keep_old` after
/// that, then they are dropped (keys already past their time are dropped now). Returns
/// the ring as committed.
pub async fn rotate(
    store: &dyn Store,
    activate_in: Duration,
    keep_old: Duration,
) -> Result<KeyRing, EngineError> {
    loop {
        let (mut ring, version) = match read(store).await? {
            Some(found) => found,
            None => {
                load_or_create(store).await?;
                continue;
            }
        };
        let id = ring.rotate(now_ms(), activate_in, keep_old).id.clone();
        match store
            .put_record(
                RecordKind::Key,
                RING,
                ring.encode()?,
                None,
                Expect::Version(version),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(key = %id, "rotated the requestState key ring");
                return Ok(ring);
            }
            // Another rotation committed first: rotate its ring.
            Err(StoreError::Conflict { .. }) => continue,
            Err(error) => return Err(error.into()),
        }
    }
}

/// The engine's hold on the keys: a fixed key, or the store's ring as last read.
pub struct Keys {
    store: Arc<dyn Store>,
    fixed: Option<Result<StateKeys, Arc<StateKeyError>>>,
    ring: tokio::sync::OnceCell<StateKeys>,
    read_at_ms: AtomicU64,
    reading: tokio::sync::Mutex<()>,
}

impl Keys {
    /// `state_key`, if given, else the ring in `store`.
    pub fn new(store: Arc<dyn Store>, state_key: Option<&[u8]>) -> Self {
        Self {
            store,
            fixed: state_key.map(|key| StateKeys::fixed(key).map_err(Arc::new)),
            ring: tokio::sync::OnceCell::new(),
            read_at_ms: AtomicU64::new(0),
            reading: tokio::sync::Mutex::new(()),
        }
    }

    /// The `requestState` keys of this worker: `state_key` if one is configured, else the
    /// store's ring (created on first use, re-read when older than [`REFRESH`]). Fails
    /// only while the ring cannot be read for the first time, or for a refused
    /// `state_key`; a failed re-read keeps the ring already read.
    pub async fn get(&self) -> Result<StateKeys, EngineError> {
        let keys = self;
        if let Some(fixed) = &keys.fixed {
            return fixed.clone().map_err(EngineError::StateKeys);
        }
        let store = self.store.as_ref();
        let ring = keys
            .ring
            .get_or_try_init(|| async {
                let ring = load_or_create(store).await?;
                keys.read_at_ms.store(now_ms(), Ordering::Relaxed);
                StateKeys::from_ring(ring, now_ms()).map_err(EngineError::from)
            })
            .await?;
        if is_stale(keys) {
            // One re-read at a time; the others go on with the ring they have.
            if let Ok(_reading) = keys.reading.try_lock()
                && is_stale(keys)
            {
                match read(store).await {
                    Ok(Some((fresh, _))) => {
                        if let Err(error) = ring.replace(fresh, now_ms()) {
                            tracing::warn!(%error, "keeping the requestState keys read before");
                        }
                    }
                    Ok(None) => tracing::warn!(
                        "the requestState key ring is gone from the store; keeping the keys read before"
                    ),
                    Err(error) => {
                        tracing::warn!(%error, "cannot re-read the requestState key ring; keeping the keys read before")
                    }
                }
                keys.read_at_ms.store(now_ms(), Ordering::Relaxed);
            }
        }
        Ok(ring.clone())
    }
}

fn is_stale(keys: &Keys) -> bool {
    now_ms().saturating_sub(keys.read_at_ms.load(Ordering::Relaxed))
        >= u64::try_from(REFRESH.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use durable_mcp_handler::StateSealer;
    use durable_mcp_store_memory::MemoryStore;
    use serde_json::json;

    use super::*;

    const TTL: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn d12_workers_racing_to_create_the_ring_get_one_ring() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        // Every worker found no ring and creates one: all but the first commit conflict.
        let create = |store: Arc<dyn Store>| {
            tokio::spawn(async move { create(store.as_ref()).await.unwrap() })
        };
        let loads: Vec<_> = (0..8).map(|_| create(store.clone())).collect();
        let mut rings = Vec::new();
        for load in loads {
            rings.push(load.await.unwrap());
        }
        let (stored, version) = read(store.as_ref()).await.unwrap().unwrap();
        assert_eq!(version, 1, "created once");
        assert!(
            rings.iter().all(|ring| *ring == stored),
            "every worker has the committed ring"
        );
        assert_eq!(
            load_or_create(store.as_ref()).await.unwrap(),
            stored,
            "and so does a later one"
        );
    }

    #[tokio::test]
    async fn d12_a_rotated_ring_opens_old_states_and_a_dropped_key_is_refused_clearly() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let sealer =
            |ring: KeyRing| StateSealer::new(StateKeys::from_ring(ring, now_ms()).unwrap());
        let before = sealer(load_or_create(store.as_ref()).await.unwrap());
        let old = before.seal(&json!({"run": "r"}), b"binding", TTL);
        let after = sealer(
            rotate(store.as_ref(), Duration::ZERO, DEFAULT_KEEP_OLD)
                .await
                .unwrap(),
        );
        assert_eq!(
            after.open(&old, b"binding").unwrap(),
            json!({"run": "r"}),
            "sealed before, opened after"
        );
        let new = after.seal(&json!({"run": "s"}), b"binding", TTL);
        assert!(
            before.open(&new, b"binding").is_err(),
            "sealed with the new key"
        );
        let dropped = sealer(
            rotate(store.as_ref(), Duration::ZERO, Duration::ZERO)
                .await
                .unwrap(),
        );
        assert_eq!(
            dropped.open(&new, b"binding").unwrap_err().to_string(),
            "invalid requestState: request state was sealed with an unknown key"
        );
    }
}
