//! Authentication at the HTTP edge: every request to the endpoint is authenticated before
//! anything of it touches the store, a `tools/call` is checked against the scopes its tool
//! declares before it runs, and the protected resource metadata (RFC 9728) is served.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use durable_mcp_auth::{AuthError, AuthMethod, Authenticated, Authenticator};
use durable_mcp_engine::metrics;
use durable_mcp_handler::AuthInfo;
use durable_mcp_protocol::jsonrpc::Inbound;
use durable_mcp_protocol::methods::Method;
use http::request::Parts;
use http::{HeaderValue, header};
use serde_json::Value;

use crate::{Rejection, Transport};

impl Transport {
    /// Authenticate a request from its headers and peer address (believed only by the
    /// trusted-proxy mode, from the connection itself).
    pub(crate) async fn authenticate(&self, parts: &Parts) -> Result<Authenticated, Rejection> {
        let auth = &self.config.auth;
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|info| info.0.ip());
        let outcome = auth.authenticate(&parts.headers, peer).await;
        if metrics::enabled() {
            record(auth, outcome.as_ref().ok());
        }
        outcome.map_err(|error| self.refusal(error))
    }

    /// The rejection answering `error`, with its challenge.
    pub(crate) fn refusal(&self, error: AuthError) -> Rejection {
        metrics::auth_refused(error.reason());
        let challenge = self.config.auth.challenge(&error);
        if let AuthError::Unavailable(reason) = &error {
            tracing::warn!(%reason, "could not check a request's credentials");
        }
        Rejection::Auth { error, challenge }
    }

    /// Check that the caller holds the scopes the operation needs: the endpoint's, and for
    /// `tools/call` those the tool declares (`required_scopes`), for `prompts/get` and
    /// `resources/read|subscribe|unsubscribe` those of [`HttpConfig::scope_rules`](crate::HttpConfig::scope_rules).
    /// Called before the request runs, so a refused call journals nothing.
    pub(crate) fn check_operation(
        &self,
        who: &Authenticated,
        inbound: &Inbound,
    ) -> Result<(), Rejection> {
        let auth = &self.config.auth;
        if !auth.is_enabled() {
            return Ok(());
        }
        let Inbound::Request(request) = inbound else {
            return Ok(());
        };
        let rules = &self.config.scope_rules;
        let needed = match (request.method(), request.name(), request.param_str("uri")) {
            (Method::ToolsCall, Some(name), _) => self.engine.handler().tool_required_scopes(name),
            (Method::PromptsGet, Some(name), _) => rules.for_prompt(name),
            (
                Method::ResourcesRead | Method::ResourcesSubscribe | Method::ResourcesUnsubscribe,
                _,
                Some(uri),
            ) => rules.for_resource(uri),
            _ => return Ok(()),
        };
        if needed.is_empty() {
            return Ok(());
        }
        auth.check_scopes(who, &needed)
            .map_err(|error| self.refusal(error))
    }

    /// The router serving the protected resource metadata, if the transport has any.
    pub(crate) fn metadata_routes(&self, mut router: Router) -> Router {
        let Some((mut paths, document)) = self.config.auth.metadata() else {
            return router;
        };
        // Also at the endpoint's own path, if the resource URL's path differs from it (a
        // proxy that rewrites paths).
        let own = format!(
            "{}{}",
            durable_mcp_auth::METADATA_PREFIX,
            self.config.path.trim_end_matches('/')
        );
        if !paths.contains(&own) {
            paths.push(own);
        }
        let document = Arc::new(document);
        for path in paths {
            let document = document.clone();
            router = router.route(
                &path,
                get(move || async move { metadata_response(&document) }),
            );
        }
        router
    }

    /// What the handler sees of the caller (never the token); `None` without
    /// authentication (the engine then gives handlers the principal alone, at no cost on
    /// the request path).
    pub(crate) fn auth_info(&self, who: &Authenticated) -> Option<Arc<AuthInfo>> {
        self.config.auth.is_enabled().then(|| {
            Arc::new(AuthInfo {
                principal: who.principal.as_str().to_owned(),
                scopes: who.scopes.iter().cloned().collect(),
                claims: Arc::new(who.claims.clone()),
                recovered: false,
            })
        })
    }
}

/// Metrics of one authentication: the method of accepted credentials (refusals are counted
/// by [`Transport::refusal`]), and the requests to the authorization server that failed on
/// the way (a JWKS fetch may fail while cached keys still verify).
fn record(auth: &Authenticator, accepted: Option<&Authenticated>) {
    if let Some(who) = accepted
        && who.method != AuthMethod::Anonymous
    {
        metrics::authenticated(who.method.as_str());
    }
    let failed = auth.take_fetch_failures();
    for (endpoint, count) in [
        ("jwks", failed.jwks),
        ("introspection", failed.introspection),
    ] {
        if count > 0 {
            metrics::auth_fetch_failed(endpoint, count);
        }
    }
}

fn metadata_response(document: &Value) -> Response {
    let mut response = axum::Json(document.clone()).into_response();
    // Public, and read by browser-based clients before they hold any token.
    response.headers_mut().insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("max-age=300"),
    );
    response
}
