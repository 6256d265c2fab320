//! Every 4xx/5xx the transport answers, as one table of named rejections (in the manner of
//! axum's rejection types): each has its HTTP status and JSON-RPC error code, and renders
//! as a JSON-RPC error body.

use axum::response::{IntoResponse, Response};
use durable_mcp_protocol::jsonrpc::{RequestId, code, error_response};
use http::{HeaderValue, StatusCode, header};
use serde_json::Value;

/// A request the transport refuses before (or instead of) running it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// `Origin` not in the allow-list (DNS-rebinding protection).
    #[error("Forbidden: origin not allowed")]
    OriginForbidden,
    /// `Host` not in the allow-list (DNS-rebinding protection).
    #[error("Forbidden: host not allowed")]
    HostForbidden,
    /// An HTTP method this endpoint does not serve (or GET/DELETE for modern traffic).
    #[error("Method Not Allowed")]
    MethodNotAllowed,
    /// `Accept` lacks a media type the method needs.
    #[error("Not Acceptable: {0}")]
    NotAcceptable(&'static str),
    /// `Content-Type` is not `application/json`.
    #[error("Unsupported Media Type: Content-Type must be application/json")]
    UnsupportedMediaType,
    /// The body is over the configured limit.
    #[error("Payload Too Large: body exceeds {0} bytes")]
    PayloadTooLarge(usize),
    /// The body is not JSON (or not UTF-8, or nested too deeply).
    #[error("Parse error: {0}")]
    ParseError(String),
    /// Valid JSON but not an acceptable JSON-RPC message.
    #[error("Invalid Request: {message}")]
    InvalidRequest {
        /// Why.
        message: String,
        /// The request id, if it could be read.
        id: Option<RequestId>,
    },
    /// A legacy request other than `initialize` without `Mcp-Session-Id`.
    #[error("Bad Request: Mcp-Session-Id header is required")]
    SessionRequired,
    /// `Mcp-Session-Id` names no live session of this principal.
    #[error("Session not found")]
    SessionNotFound,
    /// A header value that is not valid (non-visible-ASCII, repeated, ...).
    #[error("Bad Request: {0}")]
    BadHeader(String),
    /// `MCP-Protocol-Version` names a version this server does not serve.
    #[error("Unsupported protocol version: {requested}")]
    UnsupportedVersion {
        /// What the client asked for.
        requested: String,
        /// What this server serves.
        supported: Vec<String>,
        /// The request id, if any.
        id: Option<RequestId>,
    },
    /// `Last-Event-ID` that cannot be resumed (malformed, unknown, another session's).
    #[error("Unknown Last-Event-ID: {0}")]
    UnknownEvent(String),
    /// `Last-Event-ID` whose successors were pruned: resuming would leave a gap.
    #[error("Last-Event-ID can no longer be resumed: {0}")]
    EventPruned(String),
    /// 2026-07-28: a standard header is missing or does not match the body.
    #[error("Header mismatch: {message}")]
    HeaderMismatch {
        /// What does not match.
        message: String,
        /// The request id.
        id: Option<RequestId>,
    },
    /// 2026-07-28: the request `_meta` is missing or malformed.
    #[error("Invalid params: {message}")]
    MalformedMeta {
        /// What is missing.
        message: String,
        /// The request id.
        id: Option<RequestId>,
    },
    /// 2026-07-28: the method is not served (404, -32601).
    #[error("Method not found: {method}")]
    MethodNotFound {
        /// The method.
        method: String,
        /// The request id.
        id: Option<RequestId>,
    },
    /// The store cannot be reached (D15).
    #[error("Service Unavailable: the store cannot be reached")]
    StoreUnavailable,
    /// The store refused a value of this request as given (400, -32600): the store is
    /// healthy, the same request will never succeed. The store's own message is logged,
    /// not sent.
    #[error("Invalid request: the store refused a value of this request")]
    StoreRefused,
    /// Anything else that went wrong on our side.
    #[error("Internal error: {0}")]
    Internal(String),
    /// A limit per principal refused the request (429; with `Retry-After` where retrying
    /// soon can succeed: the rate, requests in flight, SSE streams).
    #[error("Too Many Requests: {0}")]
    Limited(durable_mcp_engine::limits::Refused),
    /// The request's credentials are missing or invalid (401), lack a scope (403), or
    /// could not be checked (503); `challenge` is its `WWW-Authenticate` value.
    #[error("{error}")]
    Auth {
        /// Why.
        error: durable_mcp_auth::AuthError,
        /// The `WWW-Authenticate` value.
        challenge: Option<String>,
    },
}

impl Rejection {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Rejection::Auth { error, .. } => error.status(),
            Rejection::Limited(_) => StatusCode::TOO_MANY_REQUESTS,
            Rejection::OriginForbidden | Rejection::HostForbidden => StatusCode::FORBIDDEN,
            Rejection::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Rejection::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            Rejection::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Rejection::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Rejection::SessionNotFound
            | Rejection::UnknownEvent(_)
            | Rejection::MethodNotFound { .. } => StatusCode::NOT_FOUND,
            Rejection::EventPruned(_) => StatusCode::GONE,
            Rejection::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            Rejection::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Rejection::ParseError(_)
            | Rejection::InvalidRequest { .. }
            | Rejection::SessionRequired
            | Rejection::StoreRefused
            | Rejection::BadHeader(_)
            | Rejection::UnsupportedVersion { .. }
            | Rejection::HeaderMismatch { .. }
            | Rejection::MalformedMeta { .. } => StatusCode::BAD_REQUEST,
        }
    }

    /// The JSON-RPC error code of the body.
    pub fn code(&self) -> i64 {
        match self {
            Rejection::ParseError(_) => code::PARSE_ERROR,
            Rejection::UnsupportedVersion { .. } => code::UNSUPPORTED_PROTOCOL_VERSION,
            Rejection::HeaderMismatch { .. } => code::HEADER_MISMATCH,
            Rejection::MalformedMeta { .. } => code::INVALID_PARAMS,
            Rejection::MethodNotFound { .. } => code::METHOD_NOT_FOUND,
            Rejection::Internal(_) => code::INTERNAL_ERROR,
            Rejection::SessionRequired
            | Rejection::SessionNotFound
            | Rejection::StoreUnavailable
            | Rejection::Limited(_) => code::SERVER_ERROR,
            _ => code::INVALID_REQUEST,
        }
    }

    fn id(&self) -> Option<&RequestId> {
        match self {
            Rejection::InvalidRequest { id, .. }
            | Rejection::UnsupportedVersion { id, .. }
            | Rejection::HeaderMismatch { id, .. }
            | Rejection::MalformedMeta { id, .. }
            | Rejection::MethodNotFound { id, .. } => id.as_ref(),
            _ => None,
        }
    }

    /// The JSON-RPC error body (`"id": null` unless the rejection names the request's id).
    pub fn body(&self) -> Value {
        self.body_for(None)
    }

    /// The JSON-RPC error body answering the request with id `request`: its own id if it
    /// has one, else `request`, else `null`.
    pub fn body_for(&self, request: Option<&RequestId>) -> Value {
        let data = match self {
            Rejection::UnsupportedVersion {
                requested,
                supported,
                ..
            } => Some(serde_json::json!({ "requested": requested, "supported": supported })),
            Rejection::Limited(refused) => Some(serde_json::json!({
                "limit": refused.limit.as_str(),
                "max": refused.max,
                "retryAfterSeconds": refused.retry_after.map(retry_after_secs),
            })),
            _ => None,
        };
        let id = self.id().or(request).cloned().unwrap_or(Value::Null);
        error_response(id, self.code(), &self.to_string(), data)
    }

    fn response_for(&self, request: Option<&RequestId>) -> Response {
        let status = self.status();
        let mut response = (status, axum::Json(self.body_for(request))).into_response();
        if status == StatusCode::METHOD_NOT_ALLOWED {
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
        }
        if let Rejection::Limited(refused) = self
            && let Some(wait) = refused.retry_after
        {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(retry_after_secs(wait)),
            );
        }
        if let Rejection::Auth {
            challenge: Some(challenge),
            ..
        } = self
        {
            match HeaderValue::from_str(challenge) {
                Ok(value) => {
                    response
                        .headers_mut()
                        .insert(header::WWW_AUTHENTICATE, value);
                }
                Err(error) => {
                    tracing::error!(%error, "a WWW-Authenticate challenge is not a header value")
                }
            }
        }
        response
    }
}

/// Whole seconds to wait (rounded up, at least 1), as `Retry-After` counts them.
fn retry_after_secs(wait: std::time::Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        self.response_for(None)
    }
}

/// A rejection of a message whose request id could be read: the error body echoes the id.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Refusal {
    pub rejection: Rejection,
    pub id: Option<RequestId>,
}

impl From<Rejection> for Refusal {
    fn from(rejection: Rejection) -> Self {
        Self {
            rejection,
            id: None,
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        self.rejection.response_for(self.id.as_ref())
    }
}

impl From<durable_mcp_engine::EngineError> for Rejection {
    fn from(error: durable_mcp_engine::EngineError) -> Self {
        use durable_mcp_engine::EngineError as E;
        use durable_mcp_store::StoreErrorKind;
        match error {
            E::SessionNotFound => Rejection::SessionNotFound,
            E::Limited(refused) => Rejection::Limited(refused),
            E::EventPruned(pruned) => Rejection::EventPruned(pruned.to_string()),
            E::Rejected(r) => Rejection::InvalidRequest {
                message: r.message,
                id: r.id,
            },
            E::Store(e) if e.kind() == StoreErrorKind::Unavailable => {
                tracing::warn!(error = %e, "store unavailable; answering 503");
                Rejection::StoreUnavailable
            }
            E::Store(e) if e.kind() == StoreErrorKind::Refused => {
                tracing::warn!(error = %e, "the store refused a value of a request; answering 400");
                Rejection::StoreRefused
            }
            other => {
                tracing::error!(error = %other, "request failed");
                Rejection::Internal(other.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rejection_renders_a_jsonrpc_error() {
        let all = [
            Rejection::OriginForbidden,
            Rejection::SessionNotFound,
            Rejection::PayloadTooLarge(10),
            Rejection::ParseError("x".into()),
            Rejection::HeaderMismatch {
                message: "m".into(),
                id: Some(Value::from(7)),
            },
            Rejection::StoreUnavailable,
            Rejection::StoreRefused,
        ];
        for r in all {
            let body = r.body();
            assert_eq!(body["jsonrpc"], "2.0");
            assert_eq!(body["error"]["code"], r.code());
            assert!(r.status().is_client_error() || r.status().is_server_error());
        }
        assert_eq!(
            Rejection::HeaderMismatch {
                message: "m".into(),
                id: Some(Value::from(7))
            }
            .body()["id"],
            7
        );
        // A rejection without an id of its own answers with the request's.
        assert_eq!(
            Rejection::SessionNotFound.body_for(Some(&Value::from(8)))["id"],
            8
        );
        assert_eq!(Rejection::SessionNotFound.body()["id"], Value::Null);
    }

    /// Issue 9: a value the store refused was answered 503 "the store cannot be reached".
    #[test]
    fn refused_store_values_are_client_errors() {
        let refused =
            durable_mcp_store::StoreError::Refused("index row size exceeds maximum".into());
        let rejection = Rejection::from(durable_mcp_engine::EngineError::Store(refused));
        assert_eq!(rejection.status(), StatusCode::BAD_REQUEST, "{rejection}");
        assert_eq!(rejection.code(), code::INVALID_REQUEST);
        let unavailable = durable_mcp_store::StoreError::Unavailable("connection refused".into());
        assert_eq!(
            Rejection::from(durable_mcp_engine::EngineError::Store(unavailable)).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
