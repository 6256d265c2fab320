//! Application state over the store: per session (D4, in the session record) and for the
//! whole server (journal records of kind `State`), the engine's implementations of the
//! handler-facing [`SessionState`] and [`ServerState`].

use std::sync::Arc;

use durable_mcp_handler::context::BoxFuture;
use durable_mcp_handler::{ServerState, SessionState, StateBackend, StateError};
use durable_mcp_store::{
    Expect, Principal, RecordKind, SessionChange, SessionId, Store, StoreError,
};
use serde_json::Value;

struct StoreState {
    store: Arc<dyn Store>,
    principal: Principal,
    session: SessionId,
}

fn classify(error: StoreError) -> StateError {
    match error {
        StoreError::NotFound { .. } => StateError::SessionEnded,
        other => StateError::Store(Box::new(other)),
    }
}

/// A compare-and-set's outcome: written, or lost to a concurrent write (`false`).
fn written<T>(result: Result<T, StoreError>) -> Result<bool, StateError> {
    match result {
        Ok(_) => Ok(true),
        Err(StoreError::Conflict { .. }) => Ok(false),
        Err(error) => Err(classify(error)),
    }
}

impl StateBackend for StoreState {
    fn scope(&self) -> &str {
        self.session.as_str()
    }

    fn load<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Value>, StateError>> {
        Box::pin(async move {
            let record = self
                .store
                .load_session(&self.principal, &self.session)
                .await
                .map_err(classify)?;
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
            let change = SessionChange::CompareAndSetState {
                key: key.to_owned(),
                expected,
                value,
            };
            written(
                self.store
                    .update_session(&self.principal, &self.session, change)
                    .await,
            )
        })
    }
}

/// The state handle of a session.
pub fn session_state(
    store: Arc<dyn Store>,
    principal: Principal,
    session: SessionId,
) -> SessionState {
    SessionState::new(Arc::new(StoreState {
        store,
        principal,
        session,
    }))
}

/// The server's state: one `State` record per key, holding its JSON value (`null` once
/// removed, so that removal is a compare-and-set like any other write). A handler's key
/// may be built from input: the record key is bounded by [`key_part`](durable_mcp_store::key_part).
struct ServerRecords {
    store: Arc<dyn Store>,
}

impl StateBackend for ServerRecords {
    fn scope(&self) -> &str {
        "server"
    }

    fn load<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Value>, StateError>> {
        Box::pin(async move {
            let record = self
                .store
                .get_record(RecordKind::State, &crate::records::key::state(key))
                .await
                .map_err(classify)?;
            Ok(record
                .map(|r| decode(key, &r.value))
                .transpose()?
                .filter(|v| !v.is_null()))
        })
    }

    fn compare_and_set<'a>(
        &'a self,
        key: &'a str,
        expected: Option<Value>,
        value: Option<Value>,
    ) -> BoxFuture<'a, Result<bool, StateError>> {
        Box::pin(async move {
            let record_key = crate::records::key::state(key);
            let record = self
                .store
                .get_record(RecordKind::State, &record_key)
                .await
                .map_err(classify)?;
            let (current, expect) = match &record {
                Some(record) => (
                    Some(decode(key, &record.value)?).filter(|v| !v.is_null()),
                    Expect::Version(record.version),
                ),
                None => (None, Expect::Absent),
            };
            if current != expected {
                return Ok(false);
            }
            let encoded = value.unwrap_or(Value::Null).to_string();
            written(
                self.store
                    .put_record(RecordKind::State, &record_key, encoded, None, expect)
                    .await,
            )
        })
    }
}

fn decode(key: &str, value: &str) -> Result<Value, StateError> {
    serde_json::from_str(value).map_err(|source| StateError::Decode {
        key: key.to_owned(),
        source,
    })
}

/// The server's state handle.
pub fn server_state(store: Arc<dyn Store>) -> ServerState {
    ServerState::new(Arc::new(ServerRecords { store }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use super::*;

    /// Two workers' handles over one store: concurrent updates lose nothing, removal is a
    /// compare-and-set like any write, and a value of another type is a decode error.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn server_state_is_shared_and_loses_no_update() {
        let store: Arc<dyn Store> = Arc::new(durable_mcp_store_memory::MemoryStore::new());
        let workers = [server_state(store.clone()), server_state(store.clone())];
        let mut tasks = Vec::new();
        for i in 0..20 {
            let state = workers[i % 2].clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..5 {
                    state
                        .update("count", |n: Option<u64>| n.unwrap_or(0) + 1)
                        .await
                        .unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(workers[1].get::<u64>("count").await.unwrap(), Some(100));
        workers[0].remove("count").await.unwrap();
        assert_eq!(workers[1].get::<u64>("count").await.unwrap(), None);
        workers[1].remove("count").await.unwrap();
        assert_eq!(
            workers[0]
                .update("count", |n: Option<u64>| n.unwrap_or(41) + 1)
                .await
                .unwrap(),
            42
        );
        workers[0]
            .update("name", |_: Option<String>| "x".to_owned())
            .await
            .unwrap();
        assert!(matches!(
            workers[1].get::<u64>("name").await,
            Err(StateError::Decode { .. })
        ));
    }
}
