//! The authorization server's signing keys (JWKS): fetched over HTTP, cached, refetched when
//! a token names a key the cache does not hold (at most once per
//! [`OAuthConfig::jwks_refetch_interval`](crate::OAuthConfig::jwks_refetch_interval)), and
//! refreshed when older than [`OAuthConfig::jwks_max_age`](crate::OAuthConfig::jwks_max_age),
//! so a rotation is picked up without a restart.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Uri};
use jsonwebtoken::jwk::{
    AlgorithmParameters, EllipticCurve, Jwk, JwkSet, KeyAlgorithm, PublicKeyUse,
};
use jsonwebtoken::{Algorithm, DecodingKey};
use tokio::time::Instant;

use crate::AuthError;
use crate::fetch::{FetchError, Fetcher};

/// The signature algorithms accepted for access tokens: asymmetric only. An HMAC algorithm
/// would let anyone holding the (public) JWKS forge tokens, and `none` is not an algorithm
/// `jsonwebtoken` parses at all.
pub const ACCEPTED_ALGORITHMS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// A signing key of the set, ready to verify with.
pub(crate) struct Key {
    jwk: Jwk,
    /// The key, decoded once when the set is fetched.
    pub(crate) decoding: DecodingKey,
}

#[derive(Default)]
struct Cached {
    keys: Vec<Arc<Key>>,
    fetched: Option<Instant>,
}

/// A cached JWKS.
pub(crate) struct KeySet {
    fetcher: Fetcher,
    uri: Uri,
    refetch_interval: Duration,
    max_age: Duration,
    timeout: Duration,
    cached: RwLock<Cached>,
    /// Held while fetching (one fetch at a time); the time of the last attempt.
    fetching: tokio::sync::Mutex<Option<Instant>>,
    fetches: AtomicU64,
    /// Fetches that failed, since last taken ([`crate::OAuth::take_fetch_failures`]).
    failures: AtomicU64,
}

impl KeySet {
    pub(crate) fn new(
        fetcher: Fetcher,
        uri: Uri,
        refetch_interval: Duration,
        max_age: Duration,
        timeout: Duration,
    ) -> Self {
        Self {
            fetcher,
            uri,
            refetch_interval,
            max_age,
            timeout,
            cached: RwLock::new(Cached::default()),
            fetching: tokio::sync::Mutex::new(None),
            fetches: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        }
    }

    /// How many times the JWKS was fetched (attempts, successful or not).
    pub(crate) fn fetches(&self) -> u64 {
        self.fetches.load(Ordering::Relaxed)
    }

    /// The count of failed fetches not taken yet.
    pub(crate) fn failures(&self) -> &AtomicU64 {
        &self.failures
    }

    /// The key that verifies a token whose header says `kid` and `alg`: it must be a
    /// signing key of the algorithm's type (and curve), and name the same algorithm if it
    /// names one (no algorithm confusion).
    pub(crate) async fn key_for(
        &self,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Arc<Key>, AuthError> {
        if let Some(jwk) = self.lookup(kid, alg, false)? {
            return Ok(jwk);
        }
        // Unknown kid, or a stale cache: fetch again, unless someone did so very recently.
        {
            let mut last = self.fetching.lock().await;
            // Someone else may have fetched while we waited for the lock.
            if let Some(jwk) = self.lookup(kid, alg, false)? {
                return Ok(jwk);
            }
            let recent = last.is_some_and(|at| at.elapsed() < self.refetch_interval);
            if !recent {
                *last = Some(Instant::now());
                self.fetches.fetch_add(1, Ordering::Relaxed);
                match self.fetch().await {
                    Ok(keys) => {
                        let mut cached = self
                            .cached
                            .write()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        cached.keys = keys;
                        cached.fetched = Some(Instant::now());
                    }
                    Err(error) => {
                        self.failures.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(%error, "could not fetch the authorization server's JWKS");
                    }
                }
            }
        }
        // After a fetch (or within the rate limit), a stale cache still serves: better than
        // refusing every token while the authorization server is briefly unreachable.
        match self.lookup(kid, alg, true)? {
            Some(jwk) => Ok(jwk),
            None if self.is_empty() => Err(AuthError::Unavailable(
                "the authorization server's keys could not be fetched".into(),
            )),
            None => Err(AuthError::InvalidToken(
                "the token's signing key is unknown".into(),
            )),
        }
    }

    fn is_empty(&self) -> bool {
        self.cached
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .fetched
            .is_none()
    }

    /// A cached key for the token; `None` also when the cache is stale (unless `stale_ok`).
    fn lookup(
        &self,
        kid: Option<&str>,
        alg: Algorithm,
        stale_ok: bool,
    ) -> Result<Option<Arc<Key>>, AuthError> {
        let cached = self
            .cached
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let fresh = cached.fetched.is_some_and(|at| at.elapsed() < self.max_age);
        if !fresh && !stale_ok {
            return Ok(None);
        }
        let mut candidates = cached.keys.iter().filter(|key| match kid {
            Some(kid) => key.jwk.common.key_id.as_deref() == Some(kid),
            None => true,
        });
        let Some(jwk) = candidates.next() else {
            return Ok(None);
        };
        if kid.is_none() && candidates.next().is_some() {
            return Err(AuthError::InvalidToken(
                "the token names no key (kid) and the authorization server has several".into(),
            ));
        }
        check_key_fits(&jwk.jwk, alg)?;
        Ok(Some(jwk.clone()))
    }

    async fn fetch(&self) -> Result<Vec<Arc<Key>>, FetchError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::ACCEPT,
            HeaderValue::from_static("application/json"),
        );
        let body = self
            .fetcher
            .send(Method::GET, &self.uri, headers, Bytes::new(), self.timeout)
            .await?;
        let set: JwkSet = serde_json::from_slice(&body).map_err(|e| {
            FetchError::Outbound(durable_mcp_outbound::OutboundError::Io {
                url: self.uri.to_string(),
                reason: format!("the JWKS is not JSON: {e}"),
            })
        })?;
        // Keys for other uses (encryption), of unsupported types or that do not decode are
        // left out.
        let keys: Vec<Arc<Key>> = set
            .keys
            .into_iter()
            .filter(|jwk| !matches!(jwk.common.public_key_use, Some(ref u) if *u != PublicKeyUse::Signature))
            .filter(|jwk| !matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_) | AlgorithmParameters::Other(_)))
            .filter_map(|jwk| match DecodingKey::from_jwk(&jwk) {
                Ok(decoding) => Some(Arc::new(Key { jwk, decoding })),
                Err(error) => {
                    tracing::warn!(%error, kid = ?jwk.common.key_id, "skipping a JWKS key that cannot be used");
                    None
                }
            })
            .collect();
        tracing::debug!(keys = keys.len(), url = %self.uri, "fetched the authorization server's JWKS");
        Ok(keys)
    }
}

/// Refuse a key that does not fit the token's algorithm: its type (and curve) must be the
/// algorithm's, and if the key names an algorithm, it must be this one.
pub(crate) fn check_key_fits(jwk: &Jwk, alg: Algorithm) -> Result<(), AuthError> {
    let fits = match (&jwk.algorithm, alg) {
        (
            AlgorithmParameters::RSA(_),
            Algorithm::RS256
            | Algorithm::RS384
            | Algorithm::RS512
            | Algorithm::PS256
            | Algorithm::PS384
            | Algorithm::PS512,
        ) => true,
        (AlgorithmParameters::EllipticCurve(ec), Algorithm::ES256) => {
            ec.curve == EllipticCurve::P256
        }
        (AlgorithmParameters::EllipticCurve(ec), Algorithm::ES384) => {
            ec.curve == EllipticCurve::P384
        }
        (AlgorithmParameters::OctetKeyPair(okp), Algorithm::EdDSA) => {
            okp.curve == EllipticCurve::Ed25519
        }
        _ => false,
    };
    let named = match jwk.common.key_algorithm {
        None => true,
        Some(named) => key_algorithm(alg) == Some(named),
    };
    if fits && named {
        Ok(())
    } else {
        Err(AuthError::InvalidToken(format!(
            "the token's algorithm {alg:?} does not match its signing key"
        )))
    }
}

fn key_algorithm(alg: Algorithm) -> Option<KeyAlgorithm> {
    Some(match alg {
        Algorithm::RS256 => KeyAlgorithm::RS256,
        Algorithm::RS384 => KeyAlgorithm::RS384,
        Algorithm::RS512 => KeyAlgorithm::RS512,
        Algorithm::PS256 => KeyAlgorithm::PS256,
        Algorithm::PS384 => KeyAlgorithm::PS384,
        Algorithm::PS512 => KeyAlgorithm::PS512,
        Algorithm::ES256 => KeyAlgorithm::ES256,
        Algorithm::ES384 => KeyAlgorithm::ES384,
        Algorithm::EdDSA => KeyAlgorithm::EdDSA,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn jwk(json: serde_json::Value) -> Jwk {
        serde_json::from_value(json).unwrap()
    }

    /// Algorithm confusion: a key is used only with an algorithm of its own type, and of
    /// its own name when it names one.
    #[test]
    fn keys_fit_only_their_own_algorithm() {
        let rsa: Jwk =
            serde_json::from_str(include_str!("../tests/fixtures/rsa1.jwk.json")).unwrap();
        let ec: Jwk = serde_json::from_str(include_str!("../tests/fixtures/ec.jwk.json")).unwrap();
        let ed: Jwk = serde_json::from_str(include_str!("../tests/fixtures/ed.jwk.json")).unwrap();
        assert!(check_key_fits(&rsa, Algorithm::RS256).is_ok());
        assert!(
            check_key_fits(&rsa, Algorithm::PS256).is_err(),
            "the key names RS256"
        );
        assert!(check_key_fits(&rsa, Algorithm::HS256).is_err());
        assert!(check_key_fits(&rsa, Algorithm::ES256).is_err());
        assert!(check_key_fits(&ec, Algorithm::ES256).is_ok());
        assert!(check_key_fits(&ec, Algorithm::ES384).is_err());
        assert!(check_key_fits(&ed, Algorithm::EdDSA).is_ok());
        assert!(check_key_fits(&ed, Algorithm::RS256).is_err());
        let mut unnamed = rsa.clone();
        unnamed.common.key_algorithm = None;
        assert!(check_key_fits(&unnamed, Algorithm::PS256).is_ok());
        let oct = jwk(serde_json::json!({"kty": "oct", "k": "c2VjcmV0"}));
        assert!(
            check_key_fits(&oct, Algorithm::HS256).is_err(),
            "a symmetric key is never used"
        );
    }
}
