//! The stored form of an encrypted value: `enc1:<key id>:<base64url(nonce || ciphertext || tag)>`.
//!
//! Values are strings in every backend (SQLite and PostgreSQL `TEXT`, Redis strings), so the
//! envelope is text: a version tag, the id of the key that sealed it (so a ring of several
//! keys knows which one opens it), and the AES-256-GCM output in unpadded URL-safe base64.
//! The nonce is 96 random bits, drawn for every value; the tag is 128 bits.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::aead::{Aad, LessSafeKey, NONCE_LEN, Nonce};
use ring::rand::{SecureRandom, SystemRandom};

/// The prefix of every envelope of this format. A stored value without it was written
/// before encryption was turned on and is read as it is.
pub const PREFIX: &str = "enc1:";

/// The length of the AES-GCM tag.
const TAG_LEN: usize = 16;

/// Why an envelope did not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// It does not have the envelope's shape (`enc1:<id>:<base64>`, long enough for a
    /// nonce and a tag).
    #[error("malformed envelope: {0}")]
    Malformed(&'static str),
    /// It was sealed with a key the ring does not hold (retired, or another key file).
    #[error("sealed with key {0:?}, which is not in the key ring")]
    UnknownKey(String),
    /// The tag did not verify: the value was changed, was moved from another stream,
    /// record or session, or the key under that id is not the one that sealed it.
    #[error(
        "authentication failed with key {0:?}: the value was altered, moved from elsewhere, or the key differs"
    )]
    Forged(String),
}

/// Why a value could not be sealed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// The system's random source failed (no nonce, so no encryption).
    #[error("the system random source failed")]
    Random,
    /// The value is longer than AES-GCM can seal under one nonce (64 GiB).
    #[error("value too long to encrypt")]
    TooLong,
}

/// A fresh 96-bit nonce.
pub(crate) fn random_nonce(random: &SystemRandom) -> Result<[u8; NONCE_LEN], SealError> {
    let mut nonce = [0u8; NONCE_LEN];
    random.fill(&mut nonce).map_err(|_| SealError::Random)?;
    Ok(nonce)
}

/// Seal `plaintext` with `key` (named `id`) for the place `aad` names.
pub(crate) fn seal(
    random: &SystemRandom,
    id: &str,
    key: &LessSafeKey,
    aad: &[u8],
    plaintext: &str,
) -> Result<String, SealError> {
    let nonce = random_nonce(random)?;
    let mut body = Vec::with_capacity(plaintext.len() + TAG_LEN);
    body.extend_from_slice(plaintext.as_bytes());
    key.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(aad),
        &mut body,
    )
    .map_err(|_| SealError::TooLong)?;
    let mut buffer = Vec::with_capacity(NONCE_LEN + body.len());
    buffer.extend_from_slice(&nonce);
    buffer.extend_from_slice(&body);
    let mut out = String::with_capacity(PREFIX.len() + id.len() + 1 + buffer.len().div_ceil(3) * 4);
    out.push_str(PREFIX);
    out.push_str(id);
    out.push(':');
    URL_SAFE_NO_PAD.encode_string(&buffer, &mut out);
    Ok(out)
}

/// Split an envelope into its key id and its decoded bytes (nonce, ciphertext, tag).
pub(crate) fn parse(envelope: &str) -> Result<(&str, Vec<u8>), OpenError> {
    let rest = envelope
        .strip_prefix(PREFIX)
        .ok_or(OpenError::Malformed("no enc1: prefix"))?;
    let (id, body) = rest
        .split_once(':')
        .ok_or(OpenError::Malformed("no key id"))?;
    let bytes = URL_SAFE_NO_PAD
        .decode(body)
        .map_err(|_| OpenError::Malformed("not base64"))?;
    if bytes.len() < NONCE_LEN + TAG_LEN {
        return Err(OpenError::Malformed("shorter than a nonce and a tag"));
    }
    Ok((id, bytes))
}

/// Open the decoded bytes of an envelope sealed with `key` (named `id`) for `aad`.
pub(crate) fn open(
    id: &str,
    key: &LessSafeKey,
    aad: &[u8],
    mut bytes: Vec<u8>,
) -> Result<String, OpenError> {
    let mut nonce = [0u8; NONCE_LEN];
    nonce.copy_from_slice(&bytes[..NONCE_LEN]);
    let plain_len = key
        .open_in_place(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad),
            &mut bytes[NONCE_LEN..],
        )
        .map_err(|_| OpenError::Forged(id.to_owned()))?
        .len();
    bytes.drain(..NONCE_LEN);
    bytes.truncate(plain_len);
    // The tag verified, so these are the bytes that were sealed: a `&str`'s.
    String::from_utf8(bytes).map_err(|_| OpenError::Malformed("plaintext is not UTF-8"))
}

/// The key id an envelope names, if `value` is one (for scans of what each key still holds).
pub fn key_id_of(value: &str) -> Option<&str> {
    value
        .strip_prefix(PREFIX)?
        .split_once(':')
        .map(|(id, _)| id)
}
