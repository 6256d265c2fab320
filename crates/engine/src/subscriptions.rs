//! The index of legacy-era resource subscriptions: one [`RecordKind::Subscription`] record
//! per (URI, session), keyed `<hex of the URI>/<session id>`, so that a
//! `notifications/resources/updated` reads only the sessions subscribed to its URI (on any
//! worker: the index is in the store) instead of listing every live session.
//!
//! The session record stays the truth (D4): an index entry is a hint, checked against the
//! session before anything is sent. Entries are written before a subscription is committed
//! and deleted after an unsubscription is, so a crash between the two writes leaves at
//! worst an extra hint, never a missed subscriber; hints of sessions that ended (deleted,
//! expired, pruned) are deleted when an update finds them.

use std::sync::Arc;

use durable_mcp_store::{
    Expect, Principal, RecordKind, SessionId, SessionRecord, Store, StoreError,
};

use crate::EngineError;
use crate::records::{SubscriptionEntry, key};

/// The most subscribers one update reaches.
const MAX_SUBSCRIBERS: usize = 100_000;

/// The index of resource subscriptions, in the store. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Subscriptions {
    store: Arc<dyn Store>,
}

impl Subscriptions {
    /// The index in `store`.
    pub(crate) fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// Record that `session` subscribes to `uri` (before the session record says so).
    pub(crate) async fn index(
        &self,
        principal: &Principal,
        session: &SessionId,
        uri: &str,
    ) -> Result<(), EngineError> {
        let value = SubscriptionEntry {
            principal: principal.to_string(),
            session: session.clone(),
        }
        .encode()?;
        match self
            .store
            .put_record(
                RecordKind::Subscription,
                &key::subscription(uri, session),
                value,
                None,
                Expect::Absent,
            )
            .await
        {
            Ok(_) | Err(StoreError::Conflict { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Forget that `session` subscribes to `uri` (after the session record says so).
    pub(crate) async fn unindex(&self, session: &SessionId, uri: &str) -> Result<(), EngineError> {
        self.store
            .delete_records(RecordKind::Subscription, &key::subscription(uri, session))
            .await?;
        Ok(())
    }

    /// The live sessions subscribed to `uri`: only those the index names are read.
    pub(crate) async fn subscribers(&self, uri: &str) -> Result<Vec<SessionRecord>, EngineError> {
        let mut sessions = Vec::new();
        for record in self
            .store
            .list_records(
                RecordKind::Subscription,
                &key::subscriptions(uri),
                MAX_SUBSCRIBERS,
            )
            .await?
        {
            let entry = SubscriptionEntry::decode(&record.key, &record.value)?;
            let (principal, id) = (Principal::new(entry.principal), entry.session);
            match self.store.load_session(&principal, &id).await {
                Ok(session) if session.subscriptions.contains(uri) => sessions.push(session),
                Ok(_) => {}
                Err(StoreError::NotFound { .. }) => {
                    self.store
                        .delete_records(RecordKind::Subscription, &record.key)
                        .await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(sessions)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use durable_mcp_store::contract::session;
    use durable_mcp_store::{Principal, SessionChange, Store};
    use durable_mcp_store_memory::MemoryStore;

    use super::Subscriptions;

    /// D4: the session record is the truth; the index is a hint. A hint whose session does
    /// not subscribe is skipped, one whose session ended is deleted.
    #[tokio::test]
    async fn d4_subscribers_are_the_indexed_sessions_that_still_subscribe() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let index = Subscriptions::new(store.clone());
        let alice = Principal::new("alice");
        let (subscribed, hinted, ended) = (session(&alice), session(&alice), session(&alice));
        for record in [&subscribed, &hinted, &ended] {
            store.create_session(record.clone()).await.unwrap();
            index.index(&alice, &record.id, "file:///a").await.unwrap();
        }
        for record in [&subscribed, &ended] {
            let change = SessionChange::Subscribe("file:///a".into());
            store
                .update_session(&alice, &record.id, change)
                .await
                .unwrap();
        }
        store.end_session(&alice, &ended.id).await.unwrap();
        let found = index.subscribers("file:///a").await.unwrap();
        assert_eq!(
            found.iter().map(|s| &s.id).collect::<Vec<_>>(),
            [&subscribed.id]
        );
        index.unindex(&hinted.id, "file:///a").await.unwrap();
        let hints = store
            .list_records(durable_mcp_store::RecordKind::Subscription, "", 10)
            .await
            .unwrap();
        assert_eq!(
            hints.len(),
            1,
            "the ended session's hint and the unindexed one are gone"
        );
    }
}
