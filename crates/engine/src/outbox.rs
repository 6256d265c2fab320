//! The engine's [`Outbox`]: what a handler sends outside a request, bound to the caller of
//! the request that handed it out (its principal and, in the legacy era, its session).
//!
//! A notification for the session goes to the session's standalone stream through the
//! door out ([`Requests::commit`]): committed before any GET stream reads it (D1), handed
//! to exactly one GET stream of the session on any worker, and replayed on resume (D3).
//! A `notifications/resources/updated` goes only to a session subscribed to its URI (the
//! session record is the truth, D4). A server-wide change is [`Requests::announce`].

use std::sync::{Arc, Weak};

use durable_mcp_handler::context::BoxFuture;
use durable_mcp_handler::{Outbox, OutboxBackend, OutboxError, ServerChange};
use durable_mcp_protocol::jsonrpc::Message;
use durable_mcp_protocol::methods;
use durable_mcp_store::{Principal, SessionId, StoreError};
use serde_json::Value;

use crate::EngineError;
use crate::caller::Caller;
use crate::gate::Gate;
use crate::requests::{Inner, Requests};

/// One caller's outbox. It holds the engine weakly: a handler keeping it (the proxy's
/// children do) does not keep the engine alive.
struct CallerOutbox {
    engine: Weak<Inner>,
    principal: Principal,
    session: Option<SessionId>,
    /// A new run's journal entry, until committed: a message to the session is an effect
    /// of the run, and waits for it (D6).
    gate: Option<Gate>,
}

fn failed(error: EngineError) -> OutboxError {
    match error {
        EngineError::Store(StoreError::NotFound { .. }) => OutboxError::SessionEnded,
        other => OutboxError::Store(Box::new(other)),
    }
}

impl CallerOutbox {
    fn engine(&self) -> Result<Requests, OutboxError> {
        match self.engine.upgrade() {
            Some(inner) => Ok(Requests { inner }),
            None => Err(OutboxError::Store("the engine has stopped".into())),
        }
    }

    /// Wait for the first commit of the run this outbox was made for, if it is pending. A
    /// run dropped before its first commit does not hold the outbox back: a handler may keep
    /// it for later messages of the caller (the proxy's children do).
    async fn journaled(&self) {
        if let Some(gate) = &self.gate {
            let _ = gate.journaled().await;
        }
    }

    async fn session(&self) -> Result<(Requests, durable_mcp_store::SessionRecord), OutboxError> {
        let engine = self.engine()?;
        let id = self.session.as_ref().ok_or(OutboxError::NoSession)?;
        let session = engine
            .store()
            .load_session(&self.principal, id)
            .await
            .map_err(|e| failed(e.into()))?;
        Ok((engine, session))
    }
}

impl OutboxBackend for CallerOutbox {
    fn to_session(&self, message: Value) -> BoxFuture<'_, Result<bool, OutboxError>> {
        Box::pin(async move {
            self.journaled().await;
            let (engine, session) = self.session().await?;
            let read = Message::of(&message);
            if read.and_then(|m| m.method()) == Some(methods::NOTIFICATION_RESOURCES_UPDATED) {
                let uri = read.and_then(|m| m.param_str("uri")).unwrap_or_default();
                if !session.subscriptions.contains(uri) {
                    return Ok(false);
                }
            }
            engine
                .commit(&session.standalone_stream, &message, false)
                .await
                .map_err(failed)?;
            Ok(true)
        })
    }

    fn session_subscriptions(&self) -> BoxFuture<'_, Result<Vec<String>, OutboxError>> {
        Box::pin(async move { Ok(self.session().await?.1.subscriptions.into_iter().collect()) })
    }

    fn announce(&self, change: ServerChange) -> BoxFuture<'_, Result<(), OutboxError>> {
        Box::pin(async move {
            self.journaled().await;
            self.engine()?
                .changes()
                .announce(&change)
                .await
                .map_err(failed)
        })
    }
}

impl Requests {
    /// The outbox of `caller`, for its handler's extensions; `gate`: the journal entry of
    /// its new run, which its messages wait for.
    pub(crate) fn outbox(&self, caller: &Caller, gate: Option<Gate>) -> Outbox {
        Outbox::new(Arc::new(CallerOutbox {
            engine: Arc::downgrade(&self.inner),
            principal: caller.principal.clone(),
            session: caller.session.as_ref().map(|s| s.id.clone()),
            gate,
        }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use super::*;
    use crate::Engine;
    use serde_json::json;

    fn engine() -> Engine {
        #[derive(Clone)]
        struct Empty;
        impl durable_mcp_handler::rmcp::ServerHandler for Empty {}
        let store: Arc<dyn durable_mcp_store::Store> =
            Arc::new(durable_mcp_store_memory::MemoryStore::new());
        Engine::new(
            store,
            durable_mcp_handler::McpHandler::new(Empty),
            crate::EngineOptions::default(),
        )
    }

    /// D1: a notification handed to a session's outbox outside any request is committed to
    /// the session's standalone stream (where its GET streams read it); a resource update
    /// only when the session subscribed to its URI.
    #[tokio::test]
    async fn d1_an_outbox_commits_to_the_sessions_standalone_stream_and_updates_only_subscribed_uris()
     {
        let engine = engine();
        let principal = Principal::anonymous();
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
        let (session, _) = engine
            .initialize(
                &principal,
                crate::Request::from_message(request.as_object().unwrap().clone()),
                None,
            )
            .await
            .unwrap();
        let session = session.unwrap();
        let caller = Caller::legacy(principal.clone(), session.clone()).unwrap();
        let outbox = engine.requests().outbox(&caller, None);
        let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
        let updated = json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "r://a"}});
        assert!(outbox.to_session(changed.clone()).await.unwrap());
        assert!(
            !outbox.to_session(updated.clone()).await.unwrap(),
            "not subscribed"
        );
        engine
            .store()
            .update_session(
                &principal,
                &session.id,
                durable_mcp_store::SessionChange::Subscribe("r://a".into()),
            )
            .await
            .unwrap();
        assert_eq!(outbox.session_subscriptions().await.unwrap(), ["r://a"]);
        assert!(outbox.to_session(updated.clone()).await.unwrap());
        let read = engine
            .store()
            .read_after(&session.standalone_stream, 0, 10)
            .await
            .unwrap();
        let sent: Vec<Value> = read
            .events
            .iter()
            .filter(|e| !e.data.is_empty())
            .map(|e| serde_json::from_str(&e.data).unwrap())
            .collect();
        assert_eq!(sent, [changed, updated]);
        assert!(matches!(
            outbox
                .to_session(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
                .await,
            Err(OutboxError::NotANotification(_))
        ));
        engine
            .store()
            .end_session(&principal, &session.id)
            .await
            .unwrap();
        assert!(matches!(
            outbox
                .to_session(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}))
                .await,
            Err(OutboxError::SessionEnded)
        ));
    }
}
