//! `durable-mcp serve`'s authentication flags (see `docs/security.md`): one mode at a time,
//! OAuth (`--auth-issuer`), API keys (`--auth-api-keys` or `DURABLE_MCP_API_KEYS`) or a
//! trusted proxy (`--auth-trusted-proxy-header`); none of them: no authentication.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use durable_mcp::auth::{ApiKeys, Authenticator, IntrospectionConfig, OAuthConfig, TrustedProxy};

/// Authentication of HTTP requests.
#[derive(clap::Args, Debug, Default)]
pub struct AuthArgs {
    /// OAuth: the authorization server's issuer (the `iss` of every token). Turns the
    /// server into an OAuth 2.1 resource server.
    #[arg(long, value_name = "URL", env = "DURABLE_MCP_AUTH_ISSUER")]
    pub auth_issuer: Option<String>,
    /// OAuth: where the authorization server publishes its signing keys (JWKS).
    #[arg(
        long,
        value_name = "URL",
        requires = "auth_issuer",
        env = "DURABLE_MCP_AUTH_JWKS_URL"
    )]
    pub auth_jwks_url: Option<String>,
    /// OAuth: this resource's URL as clients reach it (for example
    /// `https://mcp.example.com/mcp`): the `aud` every token must carry, and the `resource`
    /// of the protected resource metadata.
    #[arg(
        long,
        value_name = "URL",
        requires = "auth_issuer",
        env = "DURABLE_MCP_AUTH_AUDIENCE"
    )]
    pub auth_audience: Option<String>,
    /// Scopes every request needs (comma-separated). With OAuth they are also advertised.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "SCOPES",
        env = "DURABLE_MCP_AUTH_SCOPES"
    )]
    pub auth_scopes: Vec<String>,
    /// OAuth: more scopes to advertise in the metadata's `scopes_supported` (for example
    /// those tools declare).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "SCOPES",
        requires = "auth_issuer",
        env = "DURABLE_MCP_AUTH_SCOPES_SUPPORTED"
    )]
    pub auth_scopes_supported: Vec<String>,
    /// OAuth: RFC 7662 introspection endpoint for opaque (non-JWT) tokens.
    #[arg(
        long,
        value_name = "URL",
        requires = "auth_issuer",
        env = "DURABLE_MCP_AUTH_INTROSPECTION_URL"
    )]
    pub auth_introspection_url: Option<String>,
    /// OAuth: this server's client id at the introspection endpoint.
    #[arg(
        long,
        env = "DURABLE_MCP_AUTH_CLIENT_ID",
        requires = "auth_introspection_url"
    )]
    pub auth_client_id: Option<String>,
    /// OAuth: this server's client secret at the introspection endpoint.
    #[arg(
        long,
        env = "DURABLE_MCP_AUTH_CLIENT_SECRET",
        hide_env_values = true,
        requires = "auth_introspection_url"
    )]
    pub auth_client_secret: Option<String>,
    /// OAuth: a PEM file of more trust anchors for https:// JWKS and introspection
    /// endpoints (a private CA), besides the built-in Mozilla roots.
    #[arg(
        long,
        value_name = "FILE",
        requires = "auth_issuer",
        env = "DURABLE_MCP_AUTH_TLS_ROOTS"
    )]
    pub auth_tls_roots: Option<PathBuf>,
    /// OAuth: accept http:// JWKS and introspection URLs of hosts other than this machine
    /// (a trusted network). Without it they are refused at start: what is fetched in the
    /// clear can be forged on the path.
    #[arg(
        long,
        requires = "auth_issuer",
        env = "DURABLE_MCP_AUTH_ALLOW_INSECURE_HTTP"
    )]
    pub auth_allow_insecure_http: bool,
    /// OAuth: refuse JWT access tokens whose `typ` is not `at+jwt` (RFC 9068), for an
    /// authorization server that marks its access tokens so.
    #[arg(
        long,
        requires = "auth_issuer",
        env = "DURABLE_MCP_AUTH_REQUIRE_AT_JWT"
    )]
    pub auth_require_at_jwt: bool,
    /// API keys: a file with one key a line, `<id> <key or sha256:HEX> [scope,...]`.
    #[arg(
        long,
        value_name = "FILE",
        env = "DURABLE_MCP_API_KEYS_FILE",
        conflicts_with = "auth_issuer"
    )]
    pub auth_api_keys: Option<PathBuf>,
    /// API keys in the environment, in the file's format (lines, or entries separated by
    /// `;`).
    #[arg(long = "auth-api-keys-inline", env = "DURABLE_MCP_API_KEYS", hide_env_values = true, hide = true, conflicts_with_all = ["auth_issuer", "auth_api_keys"])]
    pub auth_api_keys_inline: Option<String>,
    /// Trusted proxy: the header in which an authenticating gateway names the caller.
    #[arg(
        long,
        value_name = "NAME",
        env = "DURABLE_MCP_AUTH_TRUSTED_PROXY_HEADER",
        conflicts_with_all = ["auth_issuer", "auth_api_keys", "auth_api_keys_inline"],
        requires = "auth_trusted_proxy_from"
    )]
    pub auth_trusted_proxy_header: Option<String>,
    /// Trusted proxy: the gateway's addresses (comma-separated addresses or CIDR ranges);
    /// the header of a request from anywhere else is ignored and the request refused.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "CIDR",
        requires = "auth_trusted_proxy_header",
        env = "DURABLE_MCP_AUTH_TRUSTED_PROXY_FROM"
    )]
    pub auth_trusted_proxy_from: Vec<String>,
    /// Trusted proxy: a header with the caller's scopes (space-separated).
    #[arg(
        long,
        value_name = "NAME",
        requires = "auth_trusted_proxy_header",
        env = "DURABLE_MCP_AUTH_TRUSTED_PROXY_SCOPES_HEADER"
    )]
    pub auth_trusted_proxy_scopes_header: Option<String>,
}

impl AuthArgs {
    /// The authenticator these flags describe.
    pub fn authenticator(self) -> anyhow::Result<Authenticator> {
        if let Some(issuer) = self.auth_issuer {
            let audience = self
                .auth_audience
                .context("--auth-issuer needs --auth-audience (this resource's URL)")?;
            let mut config = OAuthConfig::new(issuer, audience, String::new());
            config.jwks_url = self.auth_jwks_url;
            config.scopes = self.auth_scopes;
            config.scopes_supported = self.auth_scopes_supported;
            config.introspection = self.auth_introspection_url.map(|url| {
                IntrospectionConfig::new(url, self.auth_client_id, self.auth_client_secret)
            });
            config.allow_insecure_http = self.auth_allow_insecure_http;
            config.require_at_jwt = self.auth_require_at_jwt;
            if let Some(path) = &self.auth_tls_roots {
                config.tls_roots_pem = Some(
                    std::fs::read_to_string(path)
                        .with_context(|| format!("--auth-tls-roots {}", path.display()))?,
                );
            }
            return Authenticator::oauth(config).context("--auth-issuer");
        }
        if let Some(path) = self.auth_api_keys {
            return Authenticator::api_keys_file(&path, self.auth_scopes)
                .context("--auth-api-keys");
        }
        if let Some(inline) = self.auth_api_keys_inline {
            let mut keys =
                ApiKeys::parse(&inline.replace(';', "\n")).context("DURABLE_MCP_API_KEYS")?;
            keys.scopes = self.auth_scopes;
            return Ok(Authenticator::ApiKeys(Arc::new(keys)));
        }
        if let Some(header) = self.auth_trusted_proxy_header {
            let from: Vec<&str> = self
                .auth_trusted_proxy_from
                .iter()
                .map(String::as_str)
                .collect();
            let mut proxy =
                TrustedProxy::new(&header, &from).context("--auth-trusted-proxy-header")?;
            proxy.scopes = self.auth_scopes;
            if let Some(scopes) = self.auth_trusted_proxy_scopes_header {
                proxy.scopes_header = Some(
                    scopes
                        .parse()
                        .context("--auth-trusted-proxy-scopes-header")?,
                );
            }
            return Ok(Authenticator::TrustedProxy(Arc::new(proxy)));
        }
        if !self.auth_scopes.is_empty() {
            anyhow::bail!(
                "--auth-scopes needs an authentication mode (--auth-issuer, --auth-api-keys or --auth-trusted-proxy-header)"
            );
        }
        Ok(Authenticator::None)
    }
}
