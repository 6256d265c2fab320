//! Authentication of durable-mcp's HTTP requests.
//!
//! An [`Authenticator`] turns a request's headers (and the peer address) into an
//! [`Authenticated`] caller, whose [`Principal`] every durable record is bound to (D13), or
//! into an [`AuthError`], which the transport answers with 401 or 403 and a
//! `WWW-Authenticate` challenge ([`Authenticator::challenge`]). Modes:
//!
//! - [`Authenticator::None`] (the default): every request is [`Principal::anonymous`].
//! - [`Authenticator::OAuth`]: an OAuth 2.1 resource server as the MCP authorization
//!   specification asks: bearer JWTs verified against the authorization server's JWKS
//!   (RS256/384/512, PS*, ES256/384, EdDSA; never `none` or HMAC), `iss`, `aud` (this
//!   resource, RFC 8707), `exp`/`nbf`; opaque tokens by RFC 7662 introspection; RFC 9728
//!   protected resource metadata ([`Authenticator::metadata`]). Principal:
//!   `oauth:<issuer>#<subject>`.
//! - [`Authenticator::ApiKeys`]: static bearer keys, hashed, compared in constant time.
//!   Principal: `key:<id>`.
//! - [`Authenticator::TrustedProxy`]: a gateway's header, believed only from its addresses.
//!   Principal: `proxy:<name>`.
//!
//! Tokens are read from the `Authorization` header only (never the query string), are not
//! kept (introspection answers are cached under the token's SHA-256) and are not handed on.

mod apikeys;
#[cfg(feature = "oauth")]
mod fetch;
#[cfg(feature = "oauth")]
mod jwks;
#[cfg(feature = "oauth")]
mod oauth;
mod proxy;
mod rules;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

pub use apikeys::{ApiKey, ApiKeys, constant_time_eq};
pub use durable_mcp_store::Principal;
#[cfg(feature = "oauth")]
pub use fetch::FetchError;
#[cfg(feature = "oauth")]
pub use jwks::ACCEPTED_ALGORITHMS;
#[cfg(feature = "oauth")]
pub use oauth::{IntrospectionConfig, OAuth, OAuthConfig, oauth_principal};
pub use proxy::{Cidr, TrustedProxy};
pub use rules::ScopeRules;

use http::{HeaderMap, StatusCode};
use serde_json::{Map, Value};

/// The path prefix of RFC 9728 protected resource metadata.
pub const METADATA_PREFIX: &str = "/.well-known/oauth-protected-resource";

/// Who sent a request, as its credentials say.
#[derive(Clone, Debug, PartialEq)]
pub struct Authenticated {
    /// The principal every durable record of the request is bound to.
    pub principal: Principal,
    /// The scopes the credentials grant.
    pub scopes: BTreeSet<String>,
    /// The token's claims (JWT payload or introspection answer); empty for API keys and
    /// proxies. Never the token itself.
    pub claims: Map<String, Value>,
    /// How the credentials were checked.
    pub method: AuthMethod,
}

impl Authenticated {
    /// The caller of every request when no authentication is configured.
    pub fn anonymous() -> Self {
        Self {
            principal: Principal::anonymous(),
            scopes: BTreeSet::new(),
            claims: Map::new(),
            method: AuthMethod::Anonymous,
        }
    }
}

/// How a caller's credentials were checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthMethod {
    /// None: no authentication is configured.
    Anonymous,
    /// A static API key.
    ApiKey,
    /// A JWT verified against the authorization server's keys.
    Jwt,
    /// An opaque token introspected (RFC 7662), or its cached introspection.
    Introspection,
    /// A trusted proxy's header.
    TrustedProxy,
}

impl AuthMethod {
    /// Its name in metrics and logs: `anonymous`, `api_key`, `jwt`, `introspection`,
    /// `trusted_proxy`.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMethod::Anonymous => "anonymous",
            AuthMethod::ApiKey => "api_key",
            AuthMethod::Jwt => "jwt",
            AuthMethod::Introspection => "introspection",
            AuthMethod::TrustedProxy => "trusted_proxy",
        }
    }
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No credentials (401, a challenge without an error code).
    #[error("Unauthorized: credentials required")]
    Missing,
    /// Credentials that are not valid (401, `error="invalid_token"`). The reason is logged
    /// and sent as `error_description`; it never contains the token.
    #[error("Unauthorized: invalid token: {0}")]
    InvalidToken(String),
    /// A token past its `exp` (and the leeway): 401, `error="invalid_token"`, as
    /// [`AuthError::InvalidToken`], told apart for metrics and logs.
    #[error("Unauthorized: invalid token: {}", EXPIRED)]
    Expired,
    /// The `Authorization` header is malformed (400, `error="invalid_request"`).
    #[error("Bad Request: {0}")]
    InvalidRequest(String),
    /// Valid credentials without every scope the operation needs (403,
    /// `error="insufficient_scope"`): `required` is the complete set it needs.
    #[error("Forbidden: insufficient scope (needs {})", required.join(" "))]
    InsufficientScope {
        /// Every scope the operation needs.
        required: Vec<String>,
    },
    /// The authorization server could not be asked (503): refused, never let through.
    #[error("Service Unavailable: {0}")]
    Unavailable(String),
}

impl AuthError {
    /// The HTTP status of the refusal.
    pub fn status(&self) -> StatusCode {
        match self {
            AuthError::Missing | AuthError::InvalidToken(_) | AuthError::Expired => {
                StatusCode::UNAUTHORIZED
            }
            AuthError::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            AuthError::InsufficientScope { .. } => StatusCode::FORBIDDEN,
            AuthError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// Why, as a label from a small fixed set (metrics): `missing`, `invalid_token`,
    /// `expired`, `malformed` (the `Authorization` header), `insufficient_scope`,
    /// `unavailable` (the authorization server could not be asked).
    pub fn reason(&self) -> &'static str {
        match self {
            AuthError::Missing => "missing",
            AuthError::InvalidToken(_) => "invalid_token",
            AuthError::Expired => "expired",
            AuthError::InvalidRequest(_) => "malformed",
            AuthError::InsufficientScope { .. } => "insufficient_scope",
            AuthError::Unavailable(_) => "unavailable",
        }
    }
}

/// The description of [`AuthError::Expired`].
const EXPIRED: &str = "the token has expired";

/// A configuration that cannot work.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A setting is wrong.
    #[error("invalid authentication setting: {0}")]
    Invalid(String),
    /// A URL cannot be fetched.
    #[cfg(feature = "oauth")]
    #[error(transparent)]
    Url(#[from] FetchError),
    /// A key file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// How requests are authenticated (see the crate docs).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub enum Authenticator {
    /// No authentication: every request is anonymous.
    #[default]
    None,
    /// OAuth 2.1 resource server (the `oauth` feature).
    #[cfg(feature = "oauth")]
    OAuth(Arc<OAuth>),
    /// Static API keys.
    ApiKeys(Arc<ApiKeys>),
    /// An authenticating gateway's header.
    TrustedProxy(Arc<TrustedProxy>),
}

impl Authenticator {
    /// An OAuth resource server.
    #[cfg(feature = "oauth")]
    pub fn oauth(config: OAuthConfig) -> Result<Self, ConfigError> {
        Ok(Self::OAuth(Arc::new(OAuth::new(config)?)))
    }

    /// API keys read from `path` (see [`ApiKeys::parse`] for the format).
    pub fn api_keys_file(path: &std::path::Path, scopes: Vec<String>) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let mut keys = ApiKeys::parse(&text)?;
        keys.scopes = scopes;
        Ok(Self::ApiKeys(Arc::new(keys)))
    }

    /// Whether requests are authenticated at all.
    pub fn is_enabled(&self) -> bool {
        !matches!(self, Authenticator::None)
    }

    /// The scopes every request needs.
    pub fn endpoint_scopes(&self) -> &[String] {
        match self {
            Authenticator::None => &[],
            #[cfg(feature = "oauth")]
            Authenticator::OAuth(o) => &o.config.scopes,
            Authenticator::ApiKeys(k) => &k.scopes,
            Authenticator::TrustedProxy(p) => &p.scopes,
        }
    }

    /// Authenticate one request from its headers and the address it came from, and check
    /// the endpoint's scopes.
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        peer: Option<IpAddr>,
    ) -> Result<Authenticated, AuthError> {
        let authenticated = match self {
            Authenticator::None => return Ok(Authenticated::anonymous()),
            #[cfg(feature = "oauth")]
            Authenticator::OAuth(oauth) => {
                oauth
                    .verify(bearer(headers)?.ok_or(AuthError::Missing)?)
                    .await
            }
            Authenticator::ApiKeys(keys) => {
                keys.verify(bearer(headers)?.ok_or(AuthError::Missing)?)
            }
            Authenticator::TrustedProxy(proxy) => proxy.verify(headers, peer),
        };
        let authenticated = authenticated
            .inspect_err(|error| tracing::debug!(%error, "request not authenticated"))?;
        self.check_scopes(&authenticated, &[])?;
        Ok(authenticated)
    }

    /// Check that `who` holds the endpoint's scopes and `needed`; if not, the refusal names
    /// the complete set (endpoint's and `needed`, SEP-2350). Without authentication
    /// nothing is checked.
    pub fn check_scopes(&self, who: &Authenticated, needed: &[String]) -> Result<(), AuthError> {
        if !self.is_enabled() {
            return Ok(());
        }
        let mut required: Vec<String> = self.endpoint_scopes().to_vec();
        for scope in needed {
            if !required.contains(scope) {
                required.push(scope.clone());
            }
        }
        if required.iter().all(|s| who.scopes.contains(s)) {
            Ok(())
        } else {
            Err(AuthError::InsufficientScope { required })
        }
    }

    /// The `WWW-Authenticate` value answering `error` (`None` for refusals that are not
    /// about credentials). Values are quoted strings, escaped.
    pub fn challenge(&self, error: &AuthError) -> Option<String> {
        let mut params: Vec<(&str, String)> = Vec::new();
        match error {
            AuthError::Missing => {}
            AuthError::InvalidToken(reason) => {
                params.push(("error", "invalid_token".into()));
                params.push(("error_description", reason.clone()));
            }
            AuthError::Expired => {
                params.push(("error", "invalid_token".into()));
                params.push(("error_description", EXPIRED.into()));
            }
            AuthError::InvalidRequest(reason) => {
                params.push(("error", "invalid_request".into()));
                params.push(("error_description", reason.clone()));
            }
            AuthError::InsufficientScope { required } => {
                params.push(("error", "insufficient_scope".into()));
                params.push(("scope", required.join(" ")));
            }
            AuthError::Unavailable(_) => return None,
        }
        match self {
            #[cfg(feature = "oauth")]
            Authenticator::OAuth(oauth) => {
                params.push(("resource_metadata", metadata_url(&oauth.config.audience)));
                if !matches!(error, AuthError::InsufficientScope { .. })
                    && !oauth.config.scopes.is_empty()
                {
                    params.push(("scope", oauth.config.scopes.join(" ")));
                }
            }
            _ => params.push(("realm", "mcp".into())),
        }
        let rendered: Vec<String> = params
            .iter()
            .map(|(name, value)| format!("{name}=\"{}\"", quote(value)))
            .collect();
        Some(format!("Bearer {}", rendered.join(", ")))
    }

    /// RFC 9728 protected resource metadata (OAuth mode only): the paths it is served at
    /// (the endpoint's path inserted after the well-known prefix, and the prefix alone) and
    /// the document.
    pub fn metadata(&self) -> Option<(Vec<String>, Value)> {
        match self {
            #[cfg(feature = "oauth")]
            Authenticator::OAuth(oauth) => Some(oauth_metadata(oauth)),
            _ => None,
        }
    }

    /// Requests to the authorization server that failed since the last call (a JWKS fetch
    /// may fail while cached keys still verify), for metrics; zero outside OAuth mode.
    pub fn take_fetch_failures(&self) -> FetchFailures {
        match self {
            #[cfg(feature = "oauth")]
            Authenticator::OAuth(oauth) => oauth.take_fetch_failures(),
            _ => FetchFailures::default(),
        }
    }
}

/// Requests to the authorization server that failed (could not connect, timed out, a
/// status other than 2xx, an answer that does not parse): [`Authenticator::take_fetch_failures`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FetchFailures {
    /// Fetches of the JWKS.
    pub jwks: u64,
    /// Introspection requests.
    pub introspection: u64,
}

/// RFC 9728 protected resource metadata of `oauth`: its paths and the document.
#[cfg(feature = "oauth")]
fn oauth_metadata(oauth: &OAuth) -> (Vec<String>, Value) {
    let config = &oauth.config;
    let path = resource_path(&config.audience);
    let mut paths = vec![format!("{METADATA_PREFIX}{path}")];
    if !path.is_empty() {
        paths.push(METADATA_PREFIX.to_owned());
    }
    let mut scopes: Vec<String> = config.scopes.clone();
    for scope in &config.scopes_supported {
        if !scopes.contains(scope) {
            scopes.push(scope.clone());
        }
    }
    let mut servers = vec![config.issuer.clone()];
    servers.extend(config.more_authorization_servers.iter().cloned());
    let document = serde_json::json!({
        "resource": config.audience,
        "authorization_servers": servers,
        "scopes_supported": scopes,
        "bearer_methods_supported": ["header"],
    });
    (paths, document)
}

/// The bearer token of the `Authorization` header, if there is one.
fn bearer(headers: &HeaderMap) -> Result<Option<&str>, AuthError> {
    let mut values = headers.get_all(http::header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(AuthError::InvalidRequest(
            "more than one Authorization header".into(),
        ));
    }
    let value = value.to_str().map_err(|_| {
        AuthError::InvalidRequest("the Authorization header is not visible ASCII".into())
    })?;
    let (scheme, token) = value.split_once(' ').unwrap_or((value, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::Missing);
    }
    let token = token.trim();
    if token.is_empty() || token.contains(' ') {
        return Err(AuthError::InvalidRequest("malformed bearer token".into()));
    }
    Ok(Some(token))
}

/// The path of a resource URL, without a trailing `/` (`""` for the root).
fn resource_path(resource: &str) -> String {
    let path = resource
        .parse::<http::Uri>()
        .map(|u| u.path().to_owned())
        .unwrap_or_default();
    path.trim_end_matches('/').to_owned()
}

/// Where the metadata of `resource` is (RFC 9728 section 3.1: the well-known prefix
/// inserted between the host and the path).
pub fn metadata_url(resource: &str) -> String {
    match resource.parse::<http::Uri>() {
        Ok(uri) => match (uri.scheme_str(), uri.authority()) {
            (Some(scheme), Some(authority)) => format!(
                "{scheme}://{authority}{METADATA_PREFIX}{}",
                resource_path(resource)
            ),
            _ => METADATA_PREFIX.to_owned(),
        },
        Err(_) => METADATA_PREFIX.to_owned(),
    }
}

/// A quoted-string's content (RFC 9110): `"` and `\` escaped, control characters dropped.
fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_ascii_control() || !c.is_ascii() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[cfg(feature = "oauth")]
    fn oauth(scopes: &[&str]) -> Authenticator {
        let mut config = OAuthConfig::new(
            "https://as.example",
            "https://rs.example/mcp",
            "http://127.0.0.1:9/jwks",
        );
        config.scopes = scopes.iter().map(|s| (*s).to_owned()).collect();
        config.scopes_supported = vec!["files:write".into()];
        Authenticator::oauth(config).unwrap()
    }

    #[cfg(feature = "oauth")]
    #[test]
    fn challenges_name_the_metadata_and_the_scopes() {
        let auth = oauth(&["mcp"]);
        assert_eq!(
            auth.challenge(&AuthError::Missing).unwrap(),
            r#"Bearer resource_metadata="https://rs.example/.well-known/oauth-protected-resource/mcp", scope="mcp""#
        );
        let invalid = auth
            .challenge(&AuthError::InvalidToken("bad \"sig\"".into()))
            .unwrap();
        assert!(
            invalid.starts_with(r#"Bearer error="invalid_token", error_description="bad \"sig\"""#),
            "{invalid}"
        );
        let scope = auth
            .challenge(&AuthError::InsufficientScope {
                required: vec!["mcp".into(), "files:write".into()],
            })
            .unwrap();
        assert_eq!(
            scope,
            r#"Bearer error="insufficient_scope", scope="mcp files:write", resource_metadata="https://rs.example/.well-known/oauth-protected-resource/mcp""#
        );
    }

    #[cfg(feature = "oauth")]
    #[test]
    fn the_metadata_names_the_resource_and_its_servers() {
        let (paths, doc) = oauth(&["mcp"]).metadata().unwrap();
        assert_eq!(
            paths,
            [
                "/.well-known/oauth-protected-resource/mcp",
                "/.well-known/oauth-protected-resource"
            ]
        );
        assert_eq!(doc["resource"], "https://rs.example/mcp");
        assert_eq!(
            doc["authorization_servers"],
            serde_json::json!(["https://as.example"])
        );
        assert_eq!(
            doc["scopes_supported"],
            serde_json::json!(["mcp", "files:write"])
        );
        assert_eq!(
            doc["bearer_methods_supported"],
            serde_json::json!(["header"])
        );
        assert!(Authenticator::None.metadata().is_none());
        assert_eq!(
            metadata_url("http://h:1/"),
            "http://h:1/.well-known/oauth-protected-resource"
        );
    }

    #[cfg(feature = "oauth")]
    #[test]
    fn scopes_are_checked_as_a_complete_set() {
        let auth = oauth(&["mcp"]);
        let mut who = Authenticated::anonymous();
        who.scopes.insert("mcp".into());
        assert!(auth.check_scopes(&who, &[]).is_ok());
        assert_eq!(
            auth.check_scopes(&who, &["files:write".into()]),
            Err(AuthError::InsufficientScope {
                required: vec!["mcp".into(), "files:write".into()]
            })
        );
        assert!(
            Authenticator::None
                .check_scopes(&Authenticated::anonymous(), &["x".into()])
                .is_ok()
        );
    }

    #[test]
    fn bearer_tokens_come_from_the_authorization_header_only() {
        let mut headers = HeaderMap::new();
        assert_eq!(bearer(&headers), Ok(None));
        headers.insert(
            http::header::AUTHORIZATION,
            "bearer abc.def".parse().unwrap(),
        );
        assert_eq!(bearer(&headers), Ok(Some("abc.def")));
        headers.insert(
            http::header::AUTHORIZATION,
            "Basic dXNlcg==".parse().unwrap(),
        );
        assert_eq!(bearer(&headers), Err(AuthError::Missing));
        headers.insert(http::header::AUTHORIZATION, "Bearer ".parse().unwrap());
        assert!(matches!(
            bearer(&headers),
            Err(AuthError::InvalidRequest(_))
        ));
        headers.insert(http::header::AUTHORIZATION, "Bearer a".parse().unwrap());
        headers.append(http::header::AUTHORIZATION, "Bearer b".parse().unwrap());
        assert!(matches!(
            bearer(&headers),
            Err(AuthError::InvalidRequest(_))
        ));
    }

    #[tokio::test]
    async fn api_keys_mode_authenticates_bearer_keys() {
        let mut keys = ApiKeys::new(vec![ApiKey::new("ci", "k1", ["mcp".to_owned()])]);
        keys.scopes = vec!["mcp".into()];
        let auth = Authenticator::ApiKeys(Arc::new(keys));
        let mut headers = HeaderMap::new();
        assert_eq!(
            auth.authenticate(&headers, None).await,
            Err(AuthError::Missing)
        );
        headers.insert(http::header::AUTHORIZATION, "Bearer k1".parse().unwrap());
        assert_eq!(
            auth.authenticate(&headers, None)
                .await
                .unwrap()
                .principal
                .as_str(),
            "key:ci"
        );
        headers.insert(http::header::AUTHORIZATION, "Bearer k2".parse().unwrap());
        assert!(matches!(
            auth.authenticate(&headers, None).await,
            Err(AuthError::InvalidToken(_))
        ));
        assert_eq!(
            auth.challenge(&AuthError::Missing).unwrap(),
            r#"Bearer realm="mcp""#
        );
    }
}
