//! The durable-mcp Streamable HTTP transport: both protocol eras on one endpoint.
//!
//! Legacy era (2025-03-26 .. 2025-11-25): `initialize` creates a session, requests get SSE
//! streams whose events are committed to the store before they are written (D1), and a
//! client resumes any stream with `GET` + `Last-Event-ID` on any worker (D3). A session's
//! GET streams share its standalone stream, each message going on exactly one of them, on
//! any worker ([`durable_mcp_engine::Engine::open_get_stream`]); at most
//! [`HttpConfig::max_get_streams_per_session`] per session on one worker.
//! Modern era (2026-07-28): stateless requests validated against their standard headers.

mod auth;
mod config;
pub mod dashboard;
mod get;
mod headers;
pub mod health;
mod limits;
mod post;
mod rejection;
mod serve;
mod sse;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use durable_mcp_engine::Engine;
use http::{Method, Request};

pub use config::{DEFAULT_FIRST_EVENT_WAIT, DEFAULT_MAX_GET_STREAMS_PER_SESSION, HttpConfig};
pub use dashboard::{DashboardAuth, DashboardError, DashboardOptions, serve_dashboard};
pub use rejection::Rejection;
pub use serve::{MetricsRender, metrics_router, serve, serve_metrics, serve_router};

/// The HTTP transport: an engine and its HTTP settings.
#[derive(Clone, Debug)]
pub struct Transport {
    engine: Engine,
    config: std::sync::Arc<HttpConfig>,
    shutdown: tokio_util::sync::CancellationToken,
}

impl Transport {
    /// A transport serving `engine`.
    pub fn new(engine: Engine, config: HttpConfig) -> Self {
        Self {
            engine,
            config: std::sync::Arc::new(config),
            shutdown: tokio_util::sync::CancellationToken::new(),
        }
    }

    /// Cancelling this token ends every open SSE connection (their streams stay resumable),
    /// so that a graceful shutdown does not wait forever on long-lived GET streams.
    pub fn shutdown_token(&self) -> tokio_util::sync::CancellationToken {
        self.shutdown.clone()
    }

    /// An axum router serving the endpoint at the configured path, and the health
    /// endpoints [`health::HEALTHZ`] and [`health::READYZ`] (unless the endpoint's path is
    /// one of them).
    pub fn router(self) -> Router {
        let path = self.config.path.clone();
        let metadata = self.clone();
        let mut router = Router::new().route(&path, any(endpoint));
        for (health, handler) in [
            (health::HEALTHZ, axum::routing::get(health::healthz)),
            (health::READYZ, axum::routing::get(health::readyz)),
        ] {
            if path != health {
                router = router.route(health, handler);
            }
        }
        metadata.metadata_routes(router.with_state(self))
    }
}

async fn endpoint(State(transport): State<Transport>, request: Request<Body>) -> Response {
    let (parts, body) = request.into_parts();
    tracing::debug!(method = %parts.method, headers = ?headers::Loggable(&parts.headers), "request");
    let result: Result<Response, rejection::Refusal> =
        match headers::check_host_and_origin(&parts.headers, &transport.config) {
            Err(rejection) => Err(rejection.into()),
            Ok(()) => match transport.authenticate(&parts).await {
                Err(rejection) => Err(rejection.into()),
                Ok(who) => match transport.check_rate(&who.principal) {
                    Err(rejection) => Err(rejection.into()),
                    Ok(()) => match parts.method {
                        Method::POST => match transport
                            .permit(&who.principal, durable_mcp_engine::limits::Limit::InFlight)
                        {
                            Err(rejection) => Err(rejection.into()),
                            Ok(permit) => transport
                                .post(&parts, body, &who)
                                .await
                                .map(|r| limits::hold(r, permit)),
                        },
                        Method::GET => transport
                            .get(&parts.headers, &who)
                            .await
                            .map_err(Into::into),
                        Method::DELETE => transport
                            .delete(&parts.headers, &who)
                            .await
                            .map_err(Into::into),
                        _ => Err(Rejection::MethodNotAllowed.into()),
                    },
                },
            },
        };
    result.unwrap_or_else(|refusal| {
        tracing::debug!(rejection = %refusal.rejection, "request rejected");
        refusal.into_response()
    })
}

/// What the fuzz targets of the repository's `fuzz/` crate drive: the transport's header
/// parsing and SSE framing, which are private. Not an API (no stability promise).
#[doc(hidden)]
pub mod fuzzing {
    use bytes::Bytes;
    use durable_mcp_store::{EventId, StoredEvent};
    use http::HeaderMap;
    use serde_json::{Map, Value};

    use crate::{HttpConfig, Rejection, headers};

    /// Every header check a request meets before it runs, on `headers`, for a body of
    /// `method` with `params` (the 2026-07-28 standard headers; `tool_schema` is a tool's
    /// input schema, for `x-mcp-header`). The first refusal of each check, in order.
    pub fn check_headers(
        headers: &HeaderMap,
        config: &HttpConfig,
        method: &str,
        params: Option<&Map<String, Value>>,
        tool_schema: Option<&Value>,
    ) -> Vec<Result<(), Rejection>> {
        let session = headers::single(headers, headers::SESSION_ID).map(drop);
        let last_event = headers::single(headers, headers::LAST_EVENT_ID).and_then(|raw| match raw
            .map(|raw| {
                raw.parse::<EventId>()
                    .map_err(|_| Rejection::UnknownEvent(raw))
            }) {
            Some(Err(rejection)) => Err(rejection),
            _ => Ok(()),
        });
        vec![
            headers::check_host_and_origin(headers, config),
            headers::check_post_accept(headers),
            headers::check_get_accept(headers),
            headers::check_content_type(headers),
            session,
            headers::protocol_version(headers).map(drop),
            last_event,
            headers::check_standard_headers(headers, &Value::from(1), method, params, |_| {
                tool_schema.cloned()
            }),
        ]
    }

    /// The SSE frame of a committed event, as the transport writes it.
    pub fn sse_frame(event: &StoredEvent) -> Bytes {
        crate::sse::frame(event)
    }
}
