//! The door out: every event this worker commits goes through [`Events`], which commits it
//! to the store and then hands it to this worker's tails of its stream ([`Hub`],
//! write-through, see `tail.rs`).

use std::sync::Arc;

use durable_mcp_store::{BatchOutcome, EventId, Store, StoreError, StreamId, WriteBatch};

use crate::hub::{Captured, Hub};

/// The door out: the store and this worker's hub. Cheap to clone (two `Arc`s): each
/// component that commits events holds one.
#[derive(Clone)]
pub struct Events {
    store: Arc<dyn Store>,
    hub: Arc<Hub>,
}

impl Events {
    /// The door out of `store`, with a hub of its own.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            hub: Arc::default(),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// This worker's hub of its tails.
    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// Commit one event of data already serialized (and close `stream` after it).
    pub async fn append(
        &self,
        stream: &StreamId,
        data: String,
        close: bool,
    ) -> Result<EventId, StoreError> {
        let captured = Captured::one(&self.hub, stream, &data, close);
        let id = self.store.append(stream, data, close).await?;
        if !captured.is_empty() {
            captured.published_one(&id);
        }
        Ok(id)
    }

    /// Commit `batch` as one store operation, then hand the events it appended to this
    /// worker's tails of their streams.
    ///
    /// # Durability
    /// As [`Store::commit`]: all or nothing. Nothing of the batch reaches a tail before the
    /// store returned (D1), and then with the ids the store gave it.
    pub async fn commit(&self, batch: WriteBatch) -> Result<BatchOutcome, StoreError> {
        let captured = self.hub.capture(&batch);
        let outcome = self.store.commit(batch).await?;
        if !captured.is_empty() {
            captured.published(&outcome);
        }
        Ok(outcome)
    }
}
