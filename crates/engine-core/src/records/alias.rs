//! The alias of a legacy session's JSON-RPC request id
//! ([`RecordKind::Alias`](durable_mcp_store::RecordKind::Alias)): the run the id started,
//! and which request started it.

use durable_mcp_protocol::jsonrpc::Request;
use durable_mcp_store::{RecordKind, StreamId};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{RecordError, write_canonical};

/// Which request a session's request id was first used for: a digest of its `method` and
/// `params`, so that a re-send of the same request (idempotent, D6) can be told from
/// another request under a used id (refused).
///
/// What counts: the method, and the params as canonical JSON (object keys sorted, so their
/// order does not count) without `params._meta`. `_meta` is metadata about the request,
/// not the request: a client may give a re-send another `progressToken` or trace context,
/// and it is the same request. Absent or `null` params count as `{}`.
///
/// # Stability
/// The digest is stored, and compared by every worker and by later versions: it is the
/// first 16 bytes of the SHA-256 of a fixed text (see [`RequestFingerprint::of`]), in
/// lowercase hex, never a hash of the process or of the standard library. The tests of
/// this module pin it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RequestFingerprint(String);

impl RequestFingerprint {
    /// The fingerprint of a JSON-RPC request (its `method` and `params`).
    pub fn of(request: &Request) -> Self {
        use sha2::Digest;
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut text = Vec::with_capacity(128);
        text.extend_from_slice(b"durable-mcp/request\n");
        text.extend_from_slice(request.method().as_str().as_bytes());
        text.push(b'\n');
        match request.params_value() {
            None | Some(Value::Null) => text.extend_from_slice(b"{}"),
            Some(params) => write_canonical(params, Some("_meta"), &mut text),
        }
        let digest = sha2::Sha256::digest(&text);
        let mut hex = String::with_capacity(32);
        for byte in digest.iter().take(16) {
            hex.push(char::from(HEX[usize::from(byte >> 4)]));
            hex.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
        Self(hex)
    }
}

/// The value of an alias record.
///
/// Stored as `{"stream": "<stream id>", "request": "<fingerprint>"}`. Workers of earlier
/// versions stored the stream id alone, as a plain string: such a value still decodes, with
/// no fingerprint, and matches any request (the id's first request is not known).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AliasRecord {
    /// The response stream of the run the id started (the run's id).
    pub stream: StreamId,
    /// Which request started it (`None`: written by an earlier version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<RequestFingerprint>,
}

impl AliasRecord {
    /// The value the store keeps.
    pub fn encode(&self) -> Result<String, RecordError> {
        super::encode(RecordKind::Alias, self)
    }

    /// The alias record stored under `key`: today's layout, or an earlier version's plain
    /// stream id.
    pub fn decode(key: &str, value: &str) -> Result<Self, RecordError> {
        match value.parse::<StreamId>() {
            Ok(stream) => Ok(Self {
                stream,
                request: None,
            }),
            Err(_) => super::decode(RecordKind::Alias, key, value),
        }
    }

    /// Whether a request with `fingerprint` is a re-send of the request that started the
    /// run (always, for an alias without a fingerprint).
    pub fn started_by(&self, fingerprint: &RequestFingerprint) -> bool {
        self.request
            .as_ref()
            .is_none_or(|request| request == fingerprint)
    }
}
