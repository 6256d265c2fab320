//! Newtype identifiers. Each id's parsing and formatting lives here and nowhere else.

use std::fmt;
use std::str::FromStr;

use rand::RngCore;
use serde::{Deserialize, Serialize};

/// Hex-encode `N` random bytes from the operating system's CSPRNG.
fn random_hex<const N: usize>() -> String {
    let mut bytes = [0u8; N];
    rand::rng().fill_bytes(&mut bytes);
    hex(&bytes)
}

/// Hex-encode `N` bytes: the first six the current time in milliseconds (big-endian), the
/// rest from the operating system's CSPRNG. Ids made later sort later, so the rows keyed by
/// them (a stream, its events, its run record) are inserted at the right edge of each
/// store's B-tree index: a group commit of many requests dirties a few pages instead of
/// one random page per row and index (measured on SQLite in `docs/benchmarks.md`).
fn time_ordered_hex<const N: usize>() -> String {
    let mut bytes = [0u8; N];
    rand::rng().fill_bytes(&mut bytes);
    let time = crate::now_ms().to_be_bytes();
    for (byte, time) in bytes.iter_mut().zip(&time[2..]) {
        *byte = *time;
    }
    hex(&bytes)
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        out.push(char::from(b"0123456789abcdef"[usize::from(b & 0xf)]));
    }
    out
}

/// An id was malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed {kind}: {reason}")]
pub struct IdError {
    /// Which kind of id.
    pub kind: &'static str,
    /// What is wrong with it.
    pub reason: &'static str,
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

macro_rules! random_id {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $bytes:literal, $make:ident, $random_doc:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
        #[serde(try_from = "String")]
        pub struct $name(String);

        // Written as its string, without a copy of it (records are encoded on every call).
        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl $name {
            #[doc = $random_doc]
            pub fn random() -> Self {
                Self($make::<$bytes>())
            }

            /// The id as it goes on the wire and into stores.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl $name {
            fn check(s: &str) -> Result<(), IdError> {
                if s.len() != $bytes * 2 {
                    return Err(IdError { kind: $kind, reason: "wrong length" });
                }
                if !is_lower_hex(s) {
                    return Err(IdError { kind: $kind, reason: "not lowercase hex" });
                }
                Ok(())
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::check(s)?;
                Ok(Self(s.to_owned()))
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(s: String) -> Result<Self, IdError> {
                Self::check(&s)?;
                Ok(Self(s))
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }
    };
}

random_id!(
    /// A legacy-era session (`Mcp-Session-Id`): 32 random bytes, so it cannot be guessed.
    SessionId,
    "session id",
    32,
    random_hex,
    "A fresh id: 32 bytes of CSPRNG randomness, hex-encoded."
);
random_id!(
    /// One SSE stream: the response stream of one request, or a session's standalone GET stream.
    ///
    /// Its id begins with the millisecond it was made in (see [`StreamId::random`]): a prefix
    /// of it is shared with other streams, so use the whole id as a name, never a prefix.
    StreamId,
    "stream id",
    16,
    time_ordered_hex,
    "A fresh id: the current time in milliseconds (6 bytes, so ids sort by creation) and 10 bytes (80 bits) of CSPRNG randomness, hex-encoded."
);

impl StreamId {
    /// The millisecond the id was made in (since the epoch), read from its first six bytes
    /// ([`StreamId::random`]); `None` for an id that does not start with hex digits.
    pub fn created_ms(&self) -> Option<u64> {
        u64::from_str_radix(self.0.get(..12)?, 16).ok()
    }
}

/// Who owns a record (D13). Every lookup is made under a principal; another principal's
/// records behave as if they did not exist.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Principal(String);

impl Principal {
    /// The principal of every request when no authentication is configured.
    pub fn anonymous() -> Self {
        Self("anonymous".to_owned())
    }

    /// Whether this is [`Principal::anonymous`]: no authentication layer named the caller,
    /// so the principal alone does not tell two clients apart.
    pub fn is_anonymous(&self) -> bool {
        self.0 == "anonymous"
    }

    /// A principal named by an authentication layer.
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }

    /// The principal's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The id of one event in one stream's log (D2).
///
/// On the wire it is `<stream id>_<sequence>`: unique across all streams (the stream id has
/// 80 random bits), never reused (sequences only grow), and it names its stream, so a resume can
/// find the stream from the id alone. Sequences start at 1; 0 means "before the first".
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId {
    /// The stream the event belongs to.
    pub stream: StreamId,
    /// Position in the stream, from 1.
    pub seq: u64,
}

impl EventId {
    /// The id of event `seq` on `stream`.
    pub fn new(stream: StreamId, seq: u64) -> Self {
        Self { stream, seq }
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.stream, self.seq)
    }
}

impl FromStr for EventId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        let (stream, seq) = s.split_once('_').ok_or(IdError {
            kind: "event id",
            reason: "missing separator",
        })?;
        let stream = stream.parse().map_err(|_| IdError {
            kind: "event id",
            reason: "bad stream part",
        })?;
        if seq.is_empty() || seq.len() > 20 || !seq.bytes().all(|b| b.is_ascii_digit()) {
            return Err(IdError {
                kind: "event id",
                reason: "bad sequence part",
            });
        }
        let seq = seq.parse().map_err(|_| IdError {
            kind: "event id",
            reason: "sequence out of range",
        })?;
        Ok(Self { stream, seq })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn d2_event_ids_round_trip_and_name_their_stream() {
        let stream = StreamId::random();
        let id = EventId::new(stream.clone(), 42);
        let parsed: EventId = id.to_string().parse().unwrap();
        assert_eq!(parsed, id);
        assert_eq!(parsed.stream, stream);
    }

    #[test]
    fn d2_ids_are_random_and_distinct() {
        assert_ne!(SessionId::random(), SessionId::random());
        assert_ne!(StreamId::random(), StreamId::random());
        assert_eq!(SessionId::random().as_str().len(), 64);
    }

    #[test]
    fn a_stream_id_tells_when_it_was_made() {
        let before = crate::now_ms();
        let id = StreamId::random();
        let made = id.created_ms().unwrap();
        assert!((before..=crate::now_ms()).contains(&made), "{made}");
        let parsed: StreamId = "01a2441e782ea216008f6ee821f14996".parse().unwrap();
        assert_eq!(parsed.created_ms(), Some(0x01a2_441e_782e));
    }

    #[test]
    fn d2_stream_ids_sort_by_creation_and_keep_80_random_bits() {
        let first = StreamId::random();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let later = StreamId::random();
        assert!(first < later, "{first} then {later}");
        assert_eq!(later.as_str().len(), 32);
        // The time prefix is the clock's: the ids of one millisecond differ in their
        // random part (80 bits), never in a counter a client could guess from.
        let now = u64::from_str_radix(&later.as_str()[..12], 16).unwrap();
        assert!(now.abs_diff(crate::now_ms()) < 60_000, "{later}");
        let same: std::collections::HashSet<String> = (0..1_000)
            .map(|_| StreamId::random().as_str()[12..].to_owned())
            .collect();
        assert_eq!(same.len(), 1_000);
    }

    #[test]
    fn malformed_ids_are_rejected() {
        for bad in [
            "",
            "0",
            "_1",
            "abc_1",
            &format!("{}_", StreamId::random()),
            &format!("{}_x", StreamId::random()),
            &format!("{}_-1", StreamId::random()),
            &format!("{}_99999999999999999999999", StreamId::random()),
        ] {
            assert!(bad.parse::<EventId>().is_err(), "{bad:?} parsed");
        }
        assert!("ZZ".repeat(32).parse::<SessionId>().is_err());
    }
}
