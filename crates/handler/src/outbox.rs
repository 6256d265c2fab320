//! Messages a handler sends outside any request: to its session's standalone stream (the
//! legacy GET stream), or as a server-wide change for `subscriptions/listen` streams.
//!
//! A handler that learns of a change when no request of the client runs (a process it
//! forwards to reports one, a file it watches changed) has no request stream to put a
//! notification on. Under durable-mcp every request's extensions hold an [`Outbox`]
//! (`ctx.extensions.get::<Outbox>()`), bound to the request's caller: the handler may keep
//! it and use it later, after the request has ended.
//!
//! # Durability
//! In plain words: what [`Outbox::to_session`] accepted is in the store before any client
//! sees it, and a client that reconnects gets it. Stated more precisely: the notification is
//! committed to the session's standalone stream through the engine's door out before
//! `to_session` returns (D1), and handed to exactly one of the session's GET streams, on any
//! worker, or replayed to a GET that resumes with `Last-Event-ID` after missing it (D3).
//! [`Outbox::announce`] is [`crate::Durable::announce`] outside a request.

use std::sync::Arc;

use serde_json::Value;

use crate::ServerChange;
use crate::context::BoxFuture;

/// Why an outbox operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutboxError {
    /// The outbox belongs to a request without a session (2026-07-28).
    #[error("the request has no session")]
    NoSession,
    /// The session ended (or expired) meanwhile.
    #[error("the session has ended")]
    SessionEnded,
    /// Only notifications go on a standalone stream this way.
    #[error("not a notification: {0}")]
    NotANotification(String),
    /// The store failed.
    #[error("store error: {0}")]
    Store(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),
}

/// The engine's side of an [`Outbox`].
pub trait OutboxBackend: Send + Sync + 'static {
    /// Commit the notification `message` to the session's standalone stream; `Ok(false)`
    /// when the session does not want it (a `notifications/resources/updated` for a URI it
    /// has not subscribed to).
    fn to_session(&self, message: Value) -> BoxFuture<'_, Result<bool, OutboxError>>;
    /// The resource URIs the session subscribes to (`resources/subscribe`), as stored.
    fn session_subscriptions(&self) -> BoxFuture<'_, Result<Vec<String>, OutboxError>>;
    /// Tell every `subscriptions/listen` stream on every worker of `change`.
    fn announce(&self, change: ServerChange) -> BoxFuture<'_, Result<(), OutboxError>>;
}

/// Where a handler sends messages outside a request: see the [module docs](self).
#[derive(Clone)]
pub struct Outbox(Arc<dyn OutboxBackend>);

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox").finish_non_exhaustive()
    }
}

impl Outbox {
    /// An outbox over `backend` (the engine makes one per request).
    pub fn new(backend: Arc<dyn OutboxBackend>) -> Self {
        Self(backend)
    }

    /// Commit a notification (`notifications/tools/list_changed`, ...) to the session's
    /// standalone stream (legacy era); `Ok(false)` for a resource update of a URI the
    /// session has not subscribed to, which is not sent.
    pub async fn to_session(&self, message: Value) -> Result<bool, OutboxError> {
        if message.get("id").is_some() || message.get("method").and_then(Value::as_str).is_none() {
            return Err(OutboxError::NotANotification(message.to_string()));
        }
        self.0.to_session(message).await
    }

    /// The resource URIs the session subscribes to.
    pub async fn session_subscriptions(&self) -> Result<Vec<String>, OutboxError> {
        self.0.session_subscriptions().await
    }

    /// Tell every `subscriptions/listen` stream (2026-07-28) on every worker of `change`,
    /// as [`crate::Durable::announce`] does inside a journaled request.
    pub async fn announce(&self, change: ServerChange) -> Result<(), OutboxError> {
        self.0.announce(change).await
    }
}

/// The server-wide change a list-changed or resource-updated notification tells of.
pub fn change_of(message: &Value) -> Option<ServerChange> {
    match message.get("method").and_then(Value::as_str)? {
        durable_mcp_protocol::methods::NOTIFICATION_TOOLS_LIST_CHANGED => {
            Some(ServerChange::ToolsListChanged)
        }
        durable_mcp_protocol::methods::NOTIFICATION_PROMPTS_LIST_CHANGED => {
            Some(ServerChange::PromptsListChanged)
        }
        durable_mcp_protocol::methods::NOTIFICATION_RESOURCES_LIST_CHANGED => {
            Some(ServerChange::ResourcesListChanged)
        }
        durable_mcp_protocol::methods::NOTIFICATION_RESOURCES_UPDATED => message
            .pointer("/params/uri")
            .and_then(Value::as_str)
            .map(|uri| ServerChange::ResourceUpdated(uri.to_owned())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn list_changes_and_resource_updates_are_server_changes() {
        let note = |method: &str, params: Value| json!({"jsonrpc": "2.0", "method": method, "params": params});
        assert_eq!(
            change_of(&note("notifications/tools/list_changed", json!({}))),
            Some(ServerChange::ToolsListChanged)
        );
        assert_eq!(
            change_of(&note("notifications/prompts/list_changed", json!({}))),
            Some(ServerChange::PromptsListChanged)
        );
        assert_eq!(
            change_of(&note("notifications/resources/list_changed", json!({}))),
            Some(ServerChange::ResourcesListChanged)
        );
        assert_eq!(
            change_of(&note(
                "notifications/resources/updated",
                json!({"uri": "a://b"})
            )),
            Some(ServerChange::ResourceUpdated("a://b".into()))
        );
        assert_eq!(
            change_of(&note("notifications/resources/updated", json!({}))),
            None
        );
        assert_eq!(change_of(&note("notifications/message", json!({}))), None);
    }
}
