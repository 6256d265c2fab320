//! Per-session application state over the store (D4): the engine's implementation of the
//! handler-facing [`SessionState`].

use std::sync::Arc;

use durable_mcp_protocol::context::BoxFuture;
use durable_mcp_protocol::{SessionState, SessionStateBackend, StateError};
use durable_mcp_store::{Principal, SessionChange, SessionId, Store, StoreError};
use serde_json::Value;

struct StoreState {
    store: Arc<dyn Store>,
    principal: Principal,
    session: SessionId,
}

fn classify(error: StoreError) -> StateError {
    match error {
        StoreError::NotFound { .. } => StateError::SessionEnded,
        other => StateError::Store(other.to_string()),
    }
}

impl SessionStateBackend for StoreState {
    fn session_id(&self) -> &str {
        self.session.as_str()
    }

    fn load<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Value>, StateError>> {
        Box::pin(async move {
            let record = self.store.load_session(&self.principal, &self.session).await.map_err(classify)?;
            Ok(record.state.get(key).cloned())
        })
    }

    fn compare_and_set<'a>(
        &'a self,
        key: &'a str,
        expected: Option<Value>,
        value: Option<Value>,
    ) -> BoxFuture<'a, Result<bool, StateError>> {
        Box::pin(async move {
            let change = SessionChange::CompareAndSetState { key: key.to_owned(), expected, value };
            match self.store.update_session(&self.principal, &self.session, change).await {
                Ok(_) => Ok(true),
                Err(StoreError::Conflict { .. }) => Ok(false),
                Err(error) => Err(classify(error)),
            }
        })
    }
}

/// The state handle of a session.
pub(crate) fn session_state(store: Arc<dyn Store>, principal: Principal, session: SessionId) -> SessionState {
    SessionState::new(Arc::new(StoreState { store, principal, session }))
}
