//! Static API keys (bearer tokens) from a file or the environment, kept as SHA-256 hashes
//! and compared in constant time.
//!
//! One key a line: `<id> <key> [scope,scope,...]`, where `<key>` is the secret itself or
//! `sha256:<64 hex digits>` (its hash, so the file need not hold the secret). Blank lines
//! and lines starting with `#` are skipped. A key's principal is `key:<id>`.

use std::collections::BTreeSet;

use durable_mcp_store::Principal;
use serde_json::Map;
use sha2::{Digest, Sha256};

use crate::{AuthError, AuthMethod, Authenticated, ConfigError};

/// One accepted key.
#[derive(Clone)]
pub struct ApiKey {
    /// The key's id: its principal is `key:<id>`.
    pub id: String,
    hash: [u8; 32],
    /// The scopes the key grants.
    pub scopes: BTreeSet<String>,
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKey")
            .field("id", &self.id)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

impl ApiKey {
    /// A key from its secret (hashed here; the secret is not kept).
    pub fn new(
        id: impl Into<String>,
        secret: &str,
        scopes: impl IntoIterator<Item = String>,
    ) -> Self {
        Self {
            id: id.into(),
            hash: Sha256::digest(secret.as_bytes()).into(),
            scopes: scopes.into_iter().collect(),
        }
    }
}

/// The accepted keys, and the scopes every request needs.
#[derive(Clone, Debug, Default)]
pub struct ApiKeys {
    keys: Vec<ApiKey>,
    /// Scopes every request needs (the endpoint's).
    pub scopes: Vec<String>,
}

impl ApiKeys {
    /// These keys.
    pub fn new(keys: Vec<ApiKey>) -> Self {
        Self {
            keys,
            scopes: Vec::new(),
        }
    }

    /// Keys in the file format (see the module docs).
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let mut keys = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut fields = line.split_whitespace();
            let (Some(id), Some(secret)) = (fields.next(), fields.next()) else {
                return Err(ConfigError::Invalid(format!(
                    "API keys line {}: expected `<id> <key> [scopes]`",
                    n + 1
                )));
            };
            let scopes: BTreeSet<String> = fields
                .next()
                .map(|s| {
                    s.split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            if fields.next().is_some() {
                return Err(ConfigError::Invalid(format!(
                    "API keys line {}: scopes are one comma-separated field",
                    n + 1
                )));
            }
            let hash = match secret.strip_prefix("sha256:") {
                Some(hex) => parse_hex(hex).ok_or_else(|| {
                    ConfigError::Invalid(format!(
                        "API keys line {}: sha256: needs 64 hex digits",
                        n + 1
                    ))
                })?,
                None => Sha256::digest(secret.as_bytes()).into(),
            };
            if keys.iter().any(|k: &ApiKey| k.id == id) {
                return Err(ConfigError::Invalid(format!(
                    "API keys line {}: key id {id} is repeated",
                    n + 1
                )));
            }
            keys.push(ApiKey {
                id: id.to_owned(),
                hash,
                scopes,
            });
        }
        if keys.is_empty() {
            return Err(ConfigError::Invalid("no API keys given".into()));
        }
        Ok(Self {
            keys,
            scopes: Vec::new(),
        })
    }

    /// How many keys are accepted.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is accepted.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The key that `token` is. Every key's hash is compared, each in constant time, so the
    /// time taken tells neither which key matched nor how much of one did.
    pub fn verify(&self, token: &str) -> Result<Authenticated, AuthError> {
        let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found: Option<&ApiKey> = None;
        for key in &self.keys {
            if constant_time_eq(&key.hash, &presented) {
                found = Some(key);
            }
        }
        let key = found.ok_or_else(|| AuthError::InvalidToken("unknown API key".into()))?;
        Ok(Authenticated {
            principal: Principal::new(format!("key:{}", key.id)),
            scopes: key.scopes.clone(),
            claims: Map::new(),
            method: AuthMethod::ApiKey,
        })
    }
}

#[cfg(test)]
thread_local! {
    static COMPARISONS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Whether `a == b`, in time that depends on their length only: every byte is looked at,
/// and the differences are folded without a branch.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    #[cfg(test)]
    COMPARISONS.with(|c| c.set(c.get() + 1));
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= std::hint::black_box(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

fn parse_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const FILE: &str = "# keys\nci s3cret-ci tools:read,files:write\nops sha256:2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b\n";

    #[test]
    fn the_right_key_names_its_principal_and_scopes() {
        let keys = ApiKeys::parse(FILE).unwrap();
        assert_eq!(keys.len(), 2);
        let ci = keys.verify("s3cret-ci").unwrap();
        assert_eq!(ci.principal.as_str(), "key:ci");
        assert!(ci.scopes.contains("files:write") && ci.scopes.contains("tools:read"));
        // sha256("secret") is the hash on the second line: the file holds no secret.
        assert_eq!(keys.verify("secret").unwrap().principal.as_str(), "key:ops");
        assert!(matches!(
            keys.verify("s3cret-cI"),
            Err(AuthError::InvalidToken(_))
        ));
        assert!(keys.verify("").is_err());
    }

    /// Every key is compared, through the constant-time comparison, whether or not an
    /// earlier one matched (no early exit tells which key or how much of it matched).
    #[test]
    fn every_key_is_compared_in_constant_time() {
        let keys = ApiKeys::parse(FILE).unwrap();
        for token in ["s3cret-ci", "secret", "wrong"] {
            COMPARISONS.with(|c| c.set(0));
            let _ = keys.verify(token);
            assert_eq!(
                COMPARISONS.with(std::cell::Cell::get),
                keys.len(),
                "{token}"
            );
        }
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }

    #[test]
    fn malformed_files_are_refused() {
        assert!(ApiKeys::parse("").is_err());
        assert!(ApiKeys::parse("lonely").is_err());
        assert!(ApiKeys::parse("a sha256:abcd").is_err());
        assert!(ApiKeys::parse("a x\na y").is_err(), "repeated id");
        assert!(ApiKeys::parse("a x s1 s2").is_err());
    }
}
