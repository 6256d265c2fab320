//! OAuth 2.1 resource server: JWT access tokens verified against the authorization server's
//! JWKS, opaque tokens through RFC 7662 introspection (cached until they expire).

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use durable_mcp_store::Principal;
use http::{HeaderMap, HeaderValue, Method, Uri};
use jsonwebtoken::{Validation, decode, decode_header};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::fetch::{Fetcher, form_encode};
use crate::jwks::{ACCEPTED_ALGORITHMS, KeySet};
use crate::{AuthError, AuthMethod, Authenticated, ConfigError, FetchFailures};

/// How an OAuth 2.1 resource server checks its access tokens.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct OAuthConfig {
    /// The authorization server's issuer identifier: the `iss` every token must carry, and
    /// the first `authorization_servers` entry of the protected resource metadata.
    pub issuer: String,
    /// This resource's canonical URL (for example `https://mcp.example.com/mcp`): the `aud`
    /// every token must carry (RFC 8707) and the `resource` of the metadata.
    pub audience: String,
    /// Where the authorization server publishes its signing keys. `None`: every token is
    /// introspected.
    pub jwks_url: Option<String>,
    /// Scopes every request needs (the endpoint's).
    pub scopes: Vec<String>,
    /// Scopes advertised in the metadata's `scopes_supported` (the endpoint's scopes are
    /// always included).
    pub scopes_supported: Vec<String>,
    /// More authorization servers for the metadata, after `issuer`.
    pub more_authorization_servers: Vec<String>,
    /// RFC 7662 introspection of opaque (non-JWT) tokens.
    pub introspection: Option<IntrospectionConfig>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
    /// A token naming an unknown key fetches the JWKS again at most this often.
    pub jwks_refetch_interval: Duration,
    /// A JWKS older than this is fetched again on the next token (a removed key stops
    /// verifying within this time).
    pub jwks_max_age: Duration,
    /// Deadline of one request to the authorization server.
    pub fetch_timeout: Duration,
    /// More trust anchors (PEM certificates) for https:// endpoints, besides the built-in
    /// Mozilla roots: for an authorization server with a private CA.
    pub tls_roots_pem: Option<String>,
    /// Accept `http://` JWKS and introspection URLs of hosts other than this machine
    /// (default `false`: refused at start, since keys and answers fetched in the clear can
    /// be forged on the path). Loopback `http://` URLs are always accepted.
    pub allow_insecure_http: bool,
    /// Refuse JWT access tokens whose header `typ` is not `at+jwt` (RFC 9068, section 4),
    /// so that an ID token or another JWT the issuer signs cannot pass as an access token.
    /// Default `false`: many authorization servers sign access tokens with `typ: JWT` (or
    /// none); turn it on when yours follows RFC 9068. The `aud` check (this resource) holds
    /// either way.
    pub require_at_jwt: bool,
}

impl OAuthConfig {
    /// A configuration with the given issuer, audience and JWKS URL, and defaults for the
    /// rest (60 s leeway, JWKS refetched at most every 10 s, refreshed every 10 min).
    pub fn new(
        issuer: impl Into<String>,
        audience: impl Into<String>,
        jwks_url: impl Into<String>,
    ) -> Self {
        Self {
            issuer: issuer.into(),
            audience: audience.into(),
            jwks_url: Some(jwks_url.into()),
            scopes: Vec::new(),
            scopes_supported: Vec::new(),
            more_authorization_servers: Vec::new(),
            introspection: None,
            leeway: Duration::from_secs(60),
            jwks_refetch_interval: Duration::from_secs(10),
            jwks_max_age: Duration::from_secs(600),
            fetch_timeout: Duration::from_secs(5),
            tls_roots_pem: None,
            allow_insecure_http: false,
            require_at_jwt: false,
        }
    }
}

/// RFC 7662 token introspection.
#[derive(Clone)]
#[non_exhaustive]
pub struct IntrospectionConfig {
    /// The introspection endpoint.
    pub url: String,
    /// This resource server's client id at the authorization server (HTTP Basic).
    pub client_id: Option<String>,
    /// Its client secret.
    pub client_secret: Option<String>,
}

impl IntrospectionConfig {
    /// Introspection at `url`, authenticated as `client_id` with `client_secret` (HTTP Basic)
    /// when given.
    pub fn new(
        url: impl Into<String>,
        client_id: Option<String>,
        client_secret: Option<String>,
    ) -> Self {
        Self {
            url: url.into(),
            client_id,
            client_secret,
        }
    }
}

impl std::fmt::Debug for IntrospectionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntrospectionConfig")
            .field("url", &self.url)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// The largest number of introspected tokens kept.
const INTROSPECTION_CACHE: usize = 10_000;
/// How long an introspection answer without `exp` is kept.
const INTROSPECTION_DEFAULT_TTL: Duration = Duration::from_secs(60);
/// How long a refusal (inactive, another resource's, expired) is kept: a client retrying a
/// bad token does not make this server ask the authorization server at its pace.
const INTROSPECTION_REFUSAL_TTL: Duration = Duration::from_secs(10);

/// An introspection answer as cached: the caller, or why the token is refused.
type Introspected = Result<Authenticated, AuthError>;

/// A configured OAuth resource server.
pub struct OAuth {
    pub(crate) config: OAuthConfig,
    keys: Option<KeySet>,
    introspection: Option<(Uri, IntrospectionConfig)>,
    fetcher: Fetcher,
    /// Introspected tokens by their SHA-256 (the token itself is never kept).
    cache: Mutex<HashMap<[u8; 32], (Introspected, Instant)>>,
    /// Introspection requests that failed, since last taken ([`OAuth::take_fetch_failures`]).
    introspection_failures: AtomicU64,
}

impl std::fmt::Debug for OAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl OAuth {
    /// Check the configuration: URLs that can be fetched, an audience, a way to verify.
    pub fn new(config: OAuthConfig) -> Result<Self, ConfigError> {
        if config.issuer.is_empty() {
            return Err(ConfigError::Invalid("the OAuth issuer is empty".into()));
        }
        let audience: Uri = config.audience.parse().map_err(|_| {
            ConfigError::Invalid(format!("the audience {} is not a URL", config.audience))
        })?;
        if audience.scheme().is_none() || audience.host().is_none() {
            return Err(ConfigError::Invalid(format!(
                "the audience {} is not an absolute URL",
                config.audience
            )));
        }
        let fetcher = Fetcher::new(config.tls_roots_pem.as_deref())?;
        let keys = match &config.jwks_url {
            Some(url) => Some(KeySet::new(
                fetcher.clone(),
                fetcher.check_url(url, config.allow_insecure_http)?,
                config.jwks_refetch_interval,
                config.jwks_max_age,
                config.fetch_timeout,
            )),
            None => None,
        };
        let introspection = match &config.introspection {
            Some(intro) => Some((
                fetcher.check_url(&intro.url, config.allow_insecure_http)?,
                intro.clone(),
            )),
            None => None,
        };
        if keys.is_none() && introspection.is_none() {
            return Err(ConfigError::Invalid(
                "OAuth needs a JWKS URL or an introspection endpoint".into(),
            ));
        }
        Ok(Self {
            config,
            keys,
            introspection,
            fetcher,
            cache: Mutex::new(HashMap::new()),
            introspection_failures: AtomicU64::new(0),
        })
    }

    /// How many times the JWKS was fetched (for tests and metrics).
    pub fn jwks_fetches(&self) -> u64 {
        self.keys.as_ref().map_or(0, KeySet::fetches)
    }

    /// The requests to the authorization server that failed since the last call (each
    /// failure is returned once: the caller reports them, as metrics do). A JWKS fetch
    /// that fails while cached keys still verify the token refuses nothing, so this is
    /// the only sign of it besides the log.
    pub fn take_fetch_failures(&self) -> FetchFailures {
        let take = |count: &AtomicU64| {
            if count.load(Ordering::Relaxed) == 0 {
                0
            } else {
                count.swap(0, Ordering::Relaxed)
            }
        };
        FetchFailures {
            jwks: self.keys.as_ref().map_or(0, |keys| take(keys.failures())),
            introspection: take(&self.introspection_failures),
        }
    }

    /// Verify an access token: a JWT against the JWKS, anything else by introspection.
    pub async fn verify(&self, token: &str) -> Result<Authenticated, AuthError> {
        let looks_like_jwt = token.split('.').count() == 3;
        match (&self.keys, looks_like_jwt) {
            (Some(keys), true) => self.verify_jwt(keys, token).await,
            _ if self.introspection.is_some() => self.introspect(token).await,
            _ => Err(AuthError::InvalidToken("the token is not a JWT".into())),
        }
    }

    async fn verify_jwt(&self, keys: &KeySet, token: &str) -> Result<Authenticated, AuthError> {
        // `alg: none` and unknown algorithms do not parse.
        let header = decode_header(token)
            .map_err(|e| AuthError::InvalidToken(format!("malformed token header: {e}")))?;
        if !ACCEPTED_ALGORITHMS.contains(&header.alg) {
            return Err(AuthError::InvalidToken(format!(
                "algorithm {:?} is not accepted",
                header.alg
            )));
        }
        if self.config.require_at_jwt && !header.typ.as_deref().is_some_and(is_at_jwt) {
            return Err(AuthError::InvalidToken(
                "the token's typ is not at+jwt (RFC 9068)".into(),
            ));
        }
        let key = keys.key_for(header.kid.as_deref(), header.alg).await?;
        let mut validation = Validation::new(header.alg);
        validation.leeway = self.config.leeway.as_secs();
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.validate_aud = true;
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let data = decode::<Map<String, Value>>(token, &key.decoding, &validation)
            .map_err(|e| jwt_error(&e))?;
        let claims = data.claims;
        let sub = claims
            .get("sub")
            .and_then(Value::as_str)
            .ok_or_else(|| AuthError::InvalidToken("sub is not a string".into()))?;
        Ok(Authenticated {
            principal: oauth_principal(&self.config.issuer, sub),
            scopes: scopes_of(&claims),
            claims,
            method: AuthMethod::Jwt,
        })
    }

    async fn introspect(&self, token: &str) -> Result<Authenticated, AuthError> {
        let Some((uri, intro)) = &self.introspection else {
            return Err(AuthError::InvalidToken("the token is not a JWT".into()));
        };
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        {
            let cache = self
                .cache
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some((answer, until)) = cache.get(&digest)
                && Instant::now() < *until
            {
                return answer.clone();
            }
        }
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        headers.insert(
            http::header::ACCEPT,
            HeaderValue::from_static("application/json"),
        );
        if let Some(id) = &intro.client_id {
            let secret = intro.client_secret.as_deref().unwrap_or_default();
            let basic = base64::engine::general_purpose::STANDARD.encode(format!(
                "{}:{}",
                form_encode(id),
                form_encode(secret)
            ));
            let value = HeaderValue::from_str(&format!("Basic {basic}"))
                .map_err(|_| AuthError::Unavailable("bad client credentials".into()))?;
            headers.insert(http::header::AUTHORIZATION, value);
        }
        let body = Bytes::from(format!(
            "token={}&token_type_hint=access_token",
            form_encode(token)
        ));
        let failed = |error: String| {
            self.introspection_failures.fetch_add(1, Ordering::Relaxed);
            AuthError::Unavailable(error)
        };
        let claims = match self
            .fetcher
            .send(Method::POST, uri, headers, body, self.config.fetch_timeout)
            .await
        {
            Ok(answer) => serde_json::from_slice::<Map<String, Value>>(&answer)
                .map_err(|e| failed(format!("introspection answered no JSON object: {e}")))?,
            // Some authorization servers answer a token they do not know the type of (any
            // JWT-shaped string, for oidc-provider) with an error instead of `active:
            // false`: that token is not valid here, and the server is up.
            Err(crate::fetch::FetchError::Status {
                status: http::StatusCode::BAD_REQUEST,
                body,
                ..
            }) if refuses_the_token(&body) => {
                let mut inactive = Map::new();
                inactive.insert("active".into(), Value::Bool(false));
                inactive
            }
            Err(error) => return Err(failed(format!("introspection failed: {error}"))),
        };
        // A refusal is cached briefly; an unreachable server (above) is not cached at all.
        let (answer, ttl) = match self.check_introspected(claims) {
            Ok((auth, ttl)) => (Ok(auth), ttl),
            Err(refused) => (Err(refused), INTROSPECTION_REFUSAL_TTL),
        };
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        if cache.len() >= INTROSPECTION_CACHE {
            cache.retain(|_, (_, until)| *until > now);
            if cache.len() >= INTROSPECTION_CACHE {
                cache.clear();
            }
        }
        cache.insert(digest, (answer.clone(), now + ttl));
        answer
    }

    /// Check an introspection answer: active, ours (`aud`, fail closed), from our issuer,
    /// not expired. Returns the principal and how long the answer may be cached.
    fn check_introspected(
        &self,
        claims: Map<String, Value>,
    ) -> Result<(Authenticated, Duration), AuthError> {
        if claims.get("active").and_then(Value::as_bool) != Some(true) {
            return Err(AuthError::InvalidToken("the token is not active".into()));
        }
        if let Some(iss) = claims.get("iss")
            && iss.as_str() != Some(self.config.issuer.as_str())
        {
            return Err(AuthError::InvalidToken(
                "the token's issuer is not the configured one".into(),
            ));
        }
        let audience_ok = match claims.get("aud") {
            Some(Value::String(aud)) => *aud == self.config.audience,
            Some(Value::Array(auds)) => auds
                .iter()
                .any(|a| a.as_str() == Some(self.config.audience.as_str())),
            _ => false,
        };
        if !audience_ok {
            return Err(AuthError::InvalidToken(
                "the token is not meant for this resource (aud)".into(),
            ));
        }
        let now = unix_now();
        let leeway = self.config.leeway.as_secs();
        let ttl = match claims.get("exp").and_then(Value::as_u64) {
            Some(exp) if exp + leeway <= now => return Err(AuthError::Expired),
            Some(exp) => Duration::from_secs(exp + leeway - now),
            None => INTROSPECTION_DEFAULT_TTL,
        };
        if let Some(nbf) = claims.get("nbf").and_then(Value::as_u64)
            && nbf > now + leeway
        {
            return Err(AuthError::InvalidToken("the token is not valid yet".into()));
        }
        let subject = match (
            claims.get("sub").and_then(Value::as_str),
            claims.get("client_id").and_then(Value::as_str),
        ) {
            (Some(sub), _) => sub.to_owned(),
            (None, Some(client)) => format!("client:{client}"),
            (None, None) => {
                return Err(AuthError::InvalidToken("the token names no subject".into()));
            }
        };
        let auth = Authenticated {
            principal: oauth_principal(&self.config.issuer, &subject),
            scopes: scopes_of(&claims),
            claims,
            method: AuthMethod::Introspection,
        };
        Ok((auth, ttl))
    }
}

/// Whether a JWT header's `typ` says an access token (RFC 9068: `at+jwt`, or its media
/// type `application/at+jwt`, compared without case).
fn is_at_jwt(typ: &str) -> bool {
    let typ = typ.to_ascii_lowercase();
    typ == "at+jwt" || typ == "application/at+jwt"
}

/// Whether an introspection endpoint's 400 answer refuses the token itself (OAuth error
/// `unsupported_token_type` or `invalid_token`) rather than our request.
fn refuses_the_token(body: &[u8]) -> bool {
    let error = serde_json::from_slice::<Map<String, Value>>(body)
        .ok()
        .and_then(|answer| {
            answer
                .get("error")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
    matches!(
        error.as_deref(),
        Some("unsupported_token_type" | "invalid_token")
    )
}

/// The principal of an OAuth subject: issuer and subject (a subject is unique per issuer).
pub fn oauth_principal(issuer: &str, subject: &str) -> Principal {
    Principal::new(format!("oauth:{issuer}#{subject}"))
}

/// The scopes a token grants: `scope` (space-separated, RFC 9068 / RFC 7662) or `scp`.
fn scopes_of(claims: &Map<String, Value>) -> BTreeSet<String> {
    match claims.get("scope").or_else(|| claims.get("scp")) {
        Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => BTreeSet::new(),
    }
}

fn jwt_error(error: &jsonwebtoken::errors::Error) -> AuthError {
    use jsonwebtoken::errors::ErrorKind as K;
    let reason = match error.kind() {
        K::ExpiredSignature => return AuthError::Expired,
        K::ImmatureSignature => "the token is not valid yet".into(),
        K::InvalidIssuer => "the token's issuer is not the configured one".into(),
        K::InvalidAudience => "the token is not meant for this resource (aud)".into(),
        K::InvalidSignature => "the token's signature does not verify".into(),
        K::MissingRequiredClaim(claim) => format!("the token has no {claim} claim"),
        K::InvalidAlgorithm => "the token's algorithm does not match its key".into(),
        other => format!("the token is invalid: {other:?}"),
    };
    AuthError::InvalidToken(reason)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn oauth() -> OAuth {
        let mut config = OAuthConfig::new(
            "https://as.example",
            "https://rs.example/mcp",
            "http://127.0.0.1:9/jwks",
        );
        config.introspection = Some(IntrospectionConfig {
            url: "http://127.0.0.1:9/introspect".into(),
            client_id: None,
            client_secret: None,
        });
        OAuth::new(config).unwrap()
    }

    fn answer(json: Value) -> Map<String, Value> {
        json.as_object().unwrap().clone()
    }

    #[test]
    fn introspection_answers_are_checked_fail_closed() {
        let o = oauth();
        let exp = unix_now() + 300;
        let ok = answer(
            serde_json::json!({"active": true, "sub": "u1", "aud": "https://rs.example/mcp", "iss": "https://as.example", "exp": exp, "scope": "a b"}),
        );
        let (auth, ttl) = o.check_introspected(ok.clone()).unwrap();
        assert_eq!(auth.principal.as_str(), "oauth:https://as.example#u1");
        assert!(auth.scopes.contains("a") && auth.scopes.contains("b"));
        assert!(
            ttl > Duration::from_secs(300) && ttl <= Duration::from_secs(360),
            "cached until exp (+ leeway): {ttl:?}"
        );
        let mut inactive = ok.clone();
        inactive.insert("active".into(), Value::Bool(false));
        assert!(o.check_introspected(inactive).is_err());
        let mut no_aud = ok.clone();
        no_aud.remove("aud");
        assert!(
            o.check_introspected(no_aud).is_err(),
            "no audience: refused (fail closed)"
        );
        let mut other_aud = ok.clone();
        other_aud.insert("aud".into(), serde_json::json!(["https://other.example"]));
        assert!(o.check_introspected(other_aud).is_err());
        let mut expired = ok.clone();
        expired.insert("exp".into(), Value::from(unix_now() - 120));
        assert_eq!(
            o.check_introspected(expired).err(),
            Some(AuthError::Expired)
        );
        let mut other_iss = ok;
        other_iss.insert("iss".into(), Value::from("https://evil.example"));
        assert!(o.check_introspected(other_iss).is_err());
    }

    #[test]
    fn configurations_without_a_way_to_verify_are_refused() {
        let mut config = OAuthConfig::new(
            "https://as.example",
            "https://rs.example/mcp",
            "http://127.0.0.1:9/jwks",
        );
        config.jwks_url = None;
        assert!(OAuth::new(config.clone()).is_err());
        config.jwks_url = Some("http://127.0.0.1:9/jwks".into());
        config.audience = "mcp".into();
        assert!(
            OAuth::new(config).is_err(),
            "the audience must be this resource's URL"
        );
    }
}
