//! The keys that seal 2026-07-28 `requestState` values (D12), shared by every worker.
//!
//! A [`KeyRing`] is a small document kept in the store: every key that may still open a
//! state, each with the time from which it seals and, once a newer key has taken over, the
//! time until which it still opens. The engine creates it on first start (first commit
//! wins, so every worker gets the same one), re-reads it every few seconds, and hands
//! [`StateKeys`] (the ring as this process knows it) to every sealer of the process: its
//! own durable-run states and, through the request's extensions, the handler's.
//!
//! # Rotation
//!
//! [`KeyRing::rotate`] adds a key that seals only from a moment in the future (so that
//! every worker has read it before any worker seals with it), and keeps the previous keys
//! for opening until the states they sealed can have expired; then they are dropped. A
//! state sealed with a dropped key (or one this ring never had) is refused with
//! "request state was sealed with an unknown key".
//!
//! # Secrets
//!
//! The ring holds the secrets themselves: whoever can read the store can read them (and
//! forge states). Operators who want the key outside the store give one key explicitly
//! ([`StateKeys::fixed`], the CLI's `--state-key`); it then seals and opens everything and
//! the ring is not used. No `Debug` output of these types shows a secret.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use rand::RngCore;
use rmcp::model::{RequestStateCodec, RequestStateError};
use serde::{Deserialize, Serialize};

/// Why a key or key ring cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateKeyError {
    /// A key that rmcp's codec refuses (shorter than 32 bytes, ...).
    #[error("unusable requestState key: {0}")]
    Key(#[source] RequestStateError),
    /// The stored ring is not a ring document.
    #[error("the stored requestState key ring is malformed: {0}")]
    Malformed(#[source] serde_json::Error),
    /// The stored ring decodes but breaks a rule (no key, a duplicate id, ...).
    #[error("the stored requestState key ring is invalid: {0}")]
    Invalid(&'static str),
    /// The ring does not encode for the store.
    #[error("the requestState key ring does not encode: {0}")]
    Encode(#[source] serde_json::Error),
}

/// One key of a [`KeyRing`].
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingKey {
    /// Its id: carried, readable, in every state it seals (never secret).
    pub id: String,
    /// The secret: 64 hex characters (256 random bits), used as the HMAC key.
    secret: String,
    /// When it was added (milliseconds since the epoch).
    pub created_ms: u64,
    /// From when it seals. Before that it only opens, so that every worker knows it
    /// before any worker seals with it.
    pub seals_from_ms: u64,
    /// Until when it opens, once a newer key has taken over; `None` for the newest key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opens_until_ms: Option<u64>,
}

impl std::fmt::Debug for RingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingKey")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .field("created_ms", &self.created_ms)
            .field("seals_from_ms", &self.seals_from_ms)
            .field("opens_until_ms", &self.opens_until_ms)
            .finish()
    }
}

impl RingKey {
    fn generate(id: String, created_ms: u64, seals_from_ms: u64) -> Self {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        let secret = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Self {
            id,
            secret,
            created_ms,
            seals_from_ms,
            opens_until_ms: None,
        }
    }

    /// Whether it opens states at `now_ms`.
    pub fn opens_at(&self, now_ms: u64) -> bool {
        self.opens_until_ms.is_none_or(|until| now_ms < until)
    }
}

/// The ring of `requestState` keys, as stored (JSON).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRing {
    /// Oldest first; the last one is the newest.
    keys: Vec<RingKey>,
    /// The number in the id of the next key.
    next_id: u64,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRing")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl KeyRing {
    /// A new ring with one fresh random key that seals at once.
    pub fn generate(now_ms: u64) -> Self {
        Self {
            keys: vec![RingKey::generate("k1".into(), now_ms, 0)],
            next_id: 2,
        }
    }

    /// The keys, oldest first.
    pub fn keys(&self) -> &[RingKey] {
        &self.keys
    }

    /// Add a fresh key that seals from `now + activate_in`; every older key opens until
    /// `keep_old` after that at the latest (the longest a state it sealed can live), and
    /// keys past their time are dropped. Returns the new key.
    ///
    /// `activate_in` must be longer than the time every worker takes to re-read the ring
    /// (the engine re-reads it every 10 seconds), or a worker that has not read it yet
    /// refuses the states sealed with the new key until it does.
    pub fn rotate(&mut self, now_ms: u64, activate_in: Duration, keep_old: Duration) -> &RingKey {
        let seals_from = now_ms.saturating_add(millis(activate_in));
        let opens_until = seals_from.saturating_add(millis(keep_old));
        // A rotation may shorten a key's time (`keep_old` zero drops every old key at
        // once, after a leak), never lengthen it.
        for key in &mut self.keys {
            key.opens_until_ms = Some(
                key.opens_until_ms
                    .map_or(opens_until, |until| until.min(opens_until)),
            );
        }
        self.keys.retain(|key| key.opens_at(now_ms));
        let id = format!("k{}", self.next_id);
        self.next_id += 1;
        let index = self.keys.len();
        self.keys.push(RingKey::generate(id, now_ms, seals_from));
        &self.keys[index]
    }

    /// The key that seals at `now_ms`: of the keys that open, the one that took over last;
    /// if none seals yet (this worker's clock is behind the rotating one's), the earliest.
    pub fn sealing_key(&self, now_ms: u64) -> Option<&RingKey> {
        let open = || self.keys.iter().filter(|key| key.opens_at(now_ms));
        open()
            .filter(|key| key.seals_from_ms <= now_ms)
            .max_by_key(|key| key.seals_from_ms)
            .or_else(|| open().min_by_key(|key| key.seals_from_ms))
    }

    /// The ring as stored.
    ///
    /// # Errors
    /// [`StateKeyError::Encode`] if the serializer fails.
    pub fn encode(&self) -> Result<String, StateKeyError> {
        serde_json::to_string(self).map_err(StateKeyError::Encode)
    }

    /// A stored ring, checked: at least one key that opens for ever (the newest), unique
    /// ids, secrets of at least 32 bytes.
    pub fn decode(stored: &str) -> Result<Self, StateKeyError> {
        let ring: Self = serde_json::from_str(stored).map_err(StateKeyError::Malformed)?;
        if !ring.keys.iter().any(|key| key.opens_until_ms.is_none()) {
            return Err(StateKeyError::Invalid("no key without an end"));
        }
        if ring
            .keys
            .iter()
            .any(|key| key.secret.len() < RequestStateCodec::MIN_KEY_LENGTH)
        {
            return Err(StateKeyError::Invalid("a secret shorter than 32 bytes"));
        }
        let mut ids: Vec<&str> = ring.keys.iter().map(|key| key.id.as_str()).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|pair| pair[0] == pair[1]) {
            return Err(StateKeyError::Invalid("two keys with one id"));
        }
        Ok(ring)
    }

    /// The codec at `now_ms` (the sealing key seals, every key that opens opens) and the
    /// time until which it stays right.
    fn codec(&self, now_ms: u64) -> Result<(RequestStateCodec, u64), StateKeyError> {
        let sealing = self
            .sealing_key(now_ms)
            .ok_or(StateKeyError::Invalid("no key opens now"))?;
        let open = self.keys.iter().filter(|key| key.opens_at(now_ms));
        let codec = RequestStateCodec::new_with_keyring(
            sealing.id.clone(),
            open.map(|key| (key.id.clone(), key.secret.as_bytes().to_vec())),
        )
        .map_err(StateKeyError::Key)?;
        let changes = self
            .keys
            .iter()
            .flat_map(|key| [Some(key.seals_from_ms), key.opens_until_ms])
            .flatten();
        let valid_until = changes.filter(|&at| at > now_ms).min().unwrap_or(u64::MAX);
        Ok((codec, valid_until))
    }
}

/// Milliseconds since the Unix epoch: the store's clock (`durable_mcp_store::now_ms`),
/// which this crate does not depend on.
fn now_ms() -> u64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    millis(since_epoch)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The `requestState` keys of this process: one handle, cheap to clone, shared by every
/// sealer (the engine's and, through the request's extensions, the handler's). It follows
/// the store's [`KeyRing`] as the engine re-reads it, or holds one fixed key.
///
/// A handler that seals its own SEP-2322 `requestState` takes it from its request
/// (`context.extensions.get::<StateKeys>()`) and seals with [`codec`](Self::codec), binding
/// each state to what it is for with associated data; durable-mcp's own states carry the
/// `dmcp.` prefix and are bound to `durable-mcp/...` data, so they never open as the
/// handler's.
#[derive(Clone)]
pub struct StateKeys {
    inner: Arc<RwLock<Current>>,
}

struct Current {
    ring: Option<KeyRing>,
    codec: Arc<RequestStateCodec>,
    valid_until_ms: u64,
}

impl std::fmt::Debug for StateKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let current = self
            .inner
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let ids: Option<Vec<&str>> = current
            .ring
            .as_ref()
            .map(|ring| ring.keys.iter().map(|key| key.id.as_str()).collect());
        f.debug_struct("StateKeys")
            .field("ring", &ids)
            .finish_non_exhaustive()
    }
}

impl StateKeys {
    /// One fixed key (at least 32 bytes of secret, high-entropy material, the same on every
    /// worker) that seals and opens everything, in rmcp's single-key format.
    pub fn fixed(key: &[u8]) -> Result<Self, StateKeyError> {
        let codec = RequestStateCodec::try_new(key.to_vec()).map_err(StateKeyError::Key)?;
        Ok(Self::with(Current {
            ring: None,
            codec: Arc::new(codec),
            valid_until_ms: u64::MAX,
        }))
    }

    /// The keys of `ring`, as of `now_ms`.
    pub fn from_ring(ring: KeyRing, now_ms: u64) -> Result<Self, StateKeyError> {
        let (codec, valid_until_ms) = ring.codec(now_ms)?;
        Ok(Self::with(Current {
            ring: Some(ring),
            codec: Arc::new(codec),
            valid_until_ms,
        }))
    }

    fn with(current: Current) -> Self {
        Self {
            inner: Arc::new(RwLock::new(current)),
        }
    }

    /// Follow `ring` from now on (the engine's re-read). A fixed key stays fixed.
    pub fn replace(&self, ring: KeyRing, now_ms: u64) -> Result<(), StateKeyError> {
        let mut current = self
            .inner
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if current.ring.is_none() || current.ring.as_ref() == Some(&ring) {
            return Ok(());
        }
        let (codec, valid_until_ms) = ring.codec(now_ms)?;
        *current = Current {
            ring: Some(ring),
            codec: Arc::new(codec),
            valid_until_ms,
        };
        Ok(())
    }

    /// The codec to seal and open with now: the current key seals, every key still in use
    /// opens (rmcp's `rs2` format, which names the key; a fixed key: `rs1`).
    pub fn codec(&self) -> Arc<RequestStateCodec> {
        self.codec_at(now_ms())
    }

    fn codec_at(&self, now_ms: u64) -> Arc<RequestStateCodec> {
        {
            let current = self
                .inner
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if now_ms < current.valid_until_ms {
                return current.codec.clone();
            }
        }
        let mut current = self
            .inner
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if now_ms >= current.valid_until_ms
            && let Some(ring) = &current.ring
        {
            match ring.codec(now_ms) {
                Ok((codec, valid_until_ms)) => {
                    current.codec = Arc::new(codec);
                    current.valid_until_ms = valid_until_ms;
                }
                // Cannot happen with a decoded ring (its newest key opens for ever); keep
                // the codec rather than seal with nothing.
                Err(error) => {
                    tracing::error!(%error, "requestState keys: keeping the previous codec")
                }
            }
        }
        current.codec.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    fn seal(keys: &StateKeys, now_ms: u64) -> String {
        keys.codec_at(now_ms).seal_with(
            b"payload",
            &rmcp::model::SealOptions::new().associated_data(b"scope"),
        )
    }

    fn opens(keys: &StateKeys, now_ms: u64, sealed: &str) -> Result<Vec<u8>, RequestStateError> {
        keys.codec_at(now_ms).open_with(sealed, b"scope")
    }

    #[test]
    fn rotation_seals_with_the_new_key_from_its_time_and_opens_old_states_until_they_expire() {
        let t0 = 1_000_000;
        let mut ring = KeyRing::generate(t0);
        let keys = StateKeys::from_ring(ring.clone(), t0).unwrap();
        let old = seal(&keys, t0);
        let new_id = ring.rotate(t0 + 10, MINUTE, 10 * MINUTE).id.clone();
        keys.replace(ring.clone(), t0 + 20).unwrap();
        assert_eq!(
            ring.sealing_key(t0 + 20).unwrap().id,
            "k1",
            "the new key does not seal before its time"
        );
        assert_eq!(
            opens(&keys, t0 + 20, &seal(&keys, t0 + 20)).unwrap(),
            b"payload"
        );
        let activation = t0 + 10 + 60_000;
        assert_eq!(ring.sealing_key(activation).unwrap().id, new_id);
        let new = seal(&keys, activation);
        assert!(
            new.split('.').nth(1).is_some_and(|kid| kid == "azI"),
            "sealed with k2: {new}"
        );
        assert_eq!(
            opens(&keys, activation, &old).unwrap(),
            b"payload",
            "old states still open"
        );
        let dropped = activation + 600_000;
        assert!(
            matches!(
                opens(&keys, dropped, &old),
                Err(RequestStateError::UnknownKeyId)
            ),
            "then the old key is gone"
        );
        assert_eq!(opens(&keys, dropped, &new).unwrap(), b"payload");
    }

    #[test]
    fn a_rotation_drops_keys_past_their_time_and_a_foreign_ring_opens_nothing() {
        let mut ring = KeyRing::generate(0);
        ring.rotate(10, Duration::ZERO, Duration::ZERO);
        assert_eq!(
            ring.keys()
                .iter()
                .map(|k| k.id.as_str())
                .collect::<Vec<_>>(),
            ["k2"]
        );
        let other = StateKeys::from_ring(KeyRing::generate(0), 20).unwrap();
        let keys = StateKeys::from_ring(ring, 20).unwrap();
        assert!(
            opens(&keys, 20, &seal(&other, 20)).is_err(),
            "same id, another secret"
        );
    }

    #[test]
    fn a_decoded_ring_is_checked_and_debug_never_shows_a_secret() {
        let ring = KeyRing::generate(0);
        assert_eq!(KeyRing::decode(&ring.encode().unwrap()).unwrap(), ring);
        let secret = ring.keys()[0].secret.clone();
        assert!(!format!("{ring:?}").contains(&secret));
        assert!(!format!("{:?}", StateKeys::from_ring(ring.clone(), 0).unwrap()).contains(&secret));
        let mut twice = ring.clone();
        twice.keys.push(ring.keys[0].clone());
        assert!(matches!(
            KeyRing::decode(&twice.encode().unwrap()),
            Err(StateKeyError::Invalid(_))
        ));
        assert!(matches!(
            KeyRing::decode("{}"),
            Err(StateKeyError::Malformed(_))
        ));
        let mut short = ring;
        short.keys[0].secret.truncate(8);
        assert!(matches!(
            KeyRing::decode(&short.encode().unwrap()),
            Err(StateKeyError::Invalid(_))
        ));
    }
}
