//! Journal records: the small, versioned documents durable execution keeps beside the event
//! logs (the journal entry and lease of a running request, committed step results, tasks,
//! and aliases such as "this session's request id 7 is run X").
//!
//! The contract is a key-value table per [`RecordKind`] with compare-and-set on a version
//! counter and an optional expiry. The engine builds leases, step memoisation and task
//! state machines on it; backends only have to make each operation atomic.

/// Which table a record lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum RecordKind {
    /// A journaled request: what to re-run, and the lease of the worker running it (D6, D7).
    Run,
    /// A committed step result or question answer of a run (D8, D9).
    Step,
    /// A task (D10).
    Task,
    /// An alias: a name that points at a run (a session's JSON-RPC request id, ...).
    Alias,
    /// A server-wide change announcement (a list changed, a resource was updated): the
    /// latest one per key, which every worker's listen streams watch.
    Change,
    /// A key of the server's application state (`ServerState`), shared by every worker.
    State,
    /// The server's own secrets: the key ring that seals `requestState` (D12). Whoever can
    /// read the store can read them.
    Key,
    /// An entry of the index of resource subscriptions (which sessions subscribed to a
    /// URI), so that an update touches only the subscribed sessions.
    Subscription,
}

impl RecordKind {
    /// Every kind, for backends that keep one index per kind.
    pub const ALL: [RecordKind; 8] = [
        RecordKind::Run,
        RecordKind::Step,
        RecordKind::Task,
        RecordKind::Alias,
        RecordKind::Change,
        RecordKind::State,
        RecordKind::Key,
        RecordKind::Subscription,
    ];

    /// The kind's stable name, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Run => "run",
            RecordKind::Step => "step",
            RecordKind::Task => "task",
            RecordKind::Alias => "alias",
            RecordKind::Change => "change",
            RecordKind::State => "state",
            RecordKind::Key => "key",
            RecordKind::Subscription => "subscription",
        }
    }
}

impl std::fmt::Display for RecordKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One stored record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its key, unique within its kind.
    pub key: String,
    /// Incremented by every write; the first write gives 1.
    pub version: u64,
    /// The document (JSON, by convention).
    pub value: String,
    /// When the record stops existing (milliseconds since the epoch), if ever.
    pub expires_at_ms: Option<u64>,
}

impl Record {
    /// A record from SQL columns (signed integers): a negative version or expiry is
    /// `StoreError::Corrupt`.
    pub fn from_columns(
        key: String,
        version: i64,
        value: String,
        expires_at: Option<i64>,
    ) -> Result<Self, crate::StoreError> {
        let version = u64::try_from(version).map_err(|_| {
            crate::StoreError::Corrupt(format!("record {key:?} has version {version}"))
        })?;
        let expires_at_ms = expires_at.map(u64::try_from).transpose().map_err(|_| {
            crate::StoreError::Corrupt(format!("record {key:?} has a negative expiry"))
        })?;
        Ok(Self {
            key,
            version,
            value,
            expires_at_ms,
        })
    }

    /// Whether the record has expired at `now_ms` (expired records behave as absent).
    pub fn expired(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_some_and(|at| at <= now_ms)
    }
}

/// The condition a write is made under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Only if no (unexpired) record has the key: "first commit wins".
    Absent,
    /// Only if the record exists with exactly this version: compare-and-set.
    Version(u64),
}

/// The longest key part [`key_part`] keeps as it is, in bytes.
pub const MAX_PLAIN_KEY_PART: usize = 128;

/// The marker that starts a digested key part; a plain part never starts with it.
const DIGEST_MARKER: char = '#';

/// A part of a record key that comes from outside the engine (a client's request id, a
/// principal, a step name or state key a handler chose, a resource URI), bounded so that
/// every backend can index the key: a short, plain part is kept as it is, so keys stay
/// readable; any other part becomes `#` and the hex SHA-256 of it (65 bytes).
///
/// Plain means at most [`MAX_PLAIN_KEY_PART`] bytes, no control characters (no NUL, which
/// PostgreSQL text refuses) and not starting with `#`. Stated more precisely: the mapping is
/// injective up to SHA-256 collisions, because plain parts are returned unchanged and never
/// start with `#`, while digested parts always do; two different inputs give the same part
/// only if they have the same SHA-256. Keys built from bounded parts and fixed separators
/// are therefore as distinct as their inputs, and at most a few hundred bytes long
/// (PostgreSQL's btree index refuses entries beyond about 2,700 bytes).
pub fn key_part(part: &str) -> std::borrow::Cow<'_, str> {
    let plain = part.len() <= MAX_PLAIN_KEY_PART
        && !part.starts_with(DIGEST_MARKER)
        && !part.chars().any(char::is_control);
    if plain {
        return std::borrow::Cow::Borrowed(part);
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(part.as_bytes());
    let mut out = String::with_capacity(1 + digest.len() * 2);
    out.push(DIGEST_MARKER);
    for byte in digest {
        out.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
        out.push(char::from(b"0123456789abcdef"[usize::from(byte & 0xf)]));
    }
    std::borrow::Cow::Owned(out)
}

/// For backends that store keys as text compared bytewise (SQLite `BINARY`, PostgreSQL
/// `"C"`): the smallest string above every string that starts with `prefix`, or `None` when
/// `key >= prefix` alone already selects exactly those strings (an empty prefix, or one of
/// only `char::MAX`). UTF-8 keeps code point order, so `prefix <= key < end` holds exactly for
/// the keys with the prefix.
pub fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = (u32::from(last) + 1..=u32::from(char::MAX)).find_map(char::from_u32);
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_part_keeps_short_parts_and_digests_the_rest() {
        assert_eq!(key_part("\"7\""), "\"7\"");
        assert_eq!(key_part(""), "");
        let plain = "a".repeat(MAX_PLAIN_KEY_PART);
        assert_eq!(key_part(&plain), plain.as_str());
        let long = "x".repeat(100_000);
        let digested = key_part(&long);
        assert_eq!(digested.len(), 65, "{digested}");
        assert!(digested.starts_with('#'));
        assert_eq!(key_part(&long), digested, "deterministic");
        assert_ne!(
            key_part(&"x".repeat(100_001)),
            digested,
            "distinct inputs, distinct parts"
        );
        assert_eq!(
            key_part("a\u{0}b").len(),
            65,
            "control characters are never stored as such"
        );
        // A plain part that looks like a digest is digested itself: it cannot collide with
        // the digest of another input.
        assert_ne!(key_part(&digested), digested);
        assert!(key_part(&digested).starts_with('#'));
    }

    #[test]
    fn prefix_end_bounds_exactly_the_keys_with_the_prefix() {
        assert_eq!(prefix_end(""), None);
        assert_eq!(prefix_end("run/"), Some("run0".into()));
        assert_eq!(prefix_end("a\u{10FFFF}"), Some("b".into()));
        assert_eq!(prefix_end("\u{10FFFF}"), None);
        assert_eq!(prefix_end("\u{10FFFF}\u{10FFFF}"), None);
        assert_eq!(
            prefix_end("\u{D7FF}"),
            Some("\u{E000}".into()),
            "surrogates are skipped"
        );
        let end = prefix_end("ab").expect("an end");
        for key in ["ab", "ab/", "abz", "ab\u{10FFFF}"] {
            assert!(key >= "ab" && key < end.as_str(), "{key}");
        }
        for key in ["aa", "ac", "b", "a"] {
            assert!(!(key >= "ab" && key < end.as_str()), "{key}");
        }
    }
}
