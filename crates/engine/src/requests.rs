//! `Requests`, the request path's component: the door in (`run`), a request's first commit
//! (`opening`), its running handler (`pump`, `durable`, `inbox`, `outbox`), re-runs
//! (`recovery`, `relay`) and listen streams (`notify`) are its methods, each in its own
//! file. It owns the runs in flight here (the [`Registry`]) and holds the core's components
//! it commits through; [`crate::Engine`] composes it with `Sessions` and the GET streams.

use std::sync::Arc;

use durable_mcp_handler::{McpHandler, ServerSummary};
use durable_mcp_store::{BatchOutcome, EventId, Store, StoreError, StreamId, WriteBatch};

use crate::changes::Changes;
use crate::events::Events;
use crate::hub::Hub;
use crate::journal::Journal;
use crate::keys::Keys;
use crate::limits::Limiter;
use crate::registry::Registry;
use crate::subscriptions::Subscriptions;
use crate::tasks::Tasks;
use crate::{EngineError, EngineOptions};

/// The request path of one worker (cheap to clone).
#[derive(Clone)]
pub(crate) struct Requests {
    pub(crate) inner: Arc<Inner>,
}

/// What the request path holds.
pub(crate) struct Inner {
    /// The door out: the store, and this worker's hand-off to its own tails.
    events: Events,
    /// Run records, their leases and the heartbeat of the runs held here.
    journal: Journal,
    handler: McpHandler,
    summary: ServerSummary,
    options: EngineOptions,
    /// The runs in flight on this worker (shared with `Sessions`, which cancels a session's).
    pub(crate) runs: Arc<Registry>,
    keys: Keys,
    /// Task records, and their writes on this worker.
    tasks: Tasks,
    /// Server-wide change announcements, as this worker sees them.
    changes: Changes,
    /// The index of resource subscriptions.
    subscriptions: Subscriptions,
    /// What each principal uses of this worker (the door takes a journaled request's unit).
    limiter: Arc<Limiter>,
}

/// The parts [`Requests::new`] is built from.
pub(crate) struct Parts {
    pub events: Events,
    pub journal: Journal,
    pub handler: McpHandler,
    pub options: EngineOptions,
    pub runs: Arc<Registry>,
    pub keys: Keys,
    pub tasks: Tasks,
    pub changes: Changes,
    pub subscriptions: Subscriptions,
    pub limiter: Arc<Limiter>,
}

impl Requests {
    pub(crate) fn new(parts: Parts) -> Self {
        let summary = parts.handler.summary();
        Self {
            inner: Arc::new(Inner {
                events: parts.events,
                journal: parts.journal,
                handler: parts.handler,
                summary,
                options: parts.options,
                runs: parts.runs,
                keys: parts.keys,
                tasks: parts.tasks,
                changes: parts.changes,
                subscriptions: parts.subscriptions,
                limiter: parts.limiter,
            }),
        }
    }

    /// The door out for one event ([`Events::append`]).
    pub(crate) async fn append(
        &self,
        stream: &StreamId,
        data: String,
        close: bool,
    ) -> Result<EventId, StoreError> {
        self.inner.events.append(stream, data, close).await
    }

    /// The door out for several writes ([`Events::commit`]).
    pub(crate) async fn commit_batch(&self, batch: WriteBatch) -> Result<BatchOutcome, StoreError> {
        self.inner.events.commit(batch).await
    }

    /// The store.
    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        self.inner.events.store()
    }

    /// The local hub of this worker's tails (write-through, see `tail.rs`).
    pub(crate) fn hub(&self) -> &Arc<Hub> {
        self.inner.events.hub()
    }

    /// The handler.
    pub(crate) fn handler(&self) -> &McpHandler {
        &self.inner.handler
    }

    /// The server's static information, read once at start.
    pub(crate) fn summary(&self) -> &ServerSummary {
        &self.inner.summary
    }

    /// The `requestState` keys of this worker ([`Keys::get`]).
    pub(crate) async fn state_keys(&self) -> Result<durable_mcp_handler::StateKeys, EngineError> {
        self.inner.keys.get().await
    }

    /// The journal: run records, leases, heartbeats.
    pub(crate) fn journal(&self) -> &Journal {
        &self.inner.journal
    }

    /// The server's durable application state, shared by every worker.
    pub(crate) fn server_state(&self) -> durable_mcp_handler::ServerState {
        crate::state::server_state(self.store().clone())
    }

    /// The index of resource subscriptions.
    pub(crate) fn subscriptions(&self) -> &Subscriptions {
        &self.inner.subscriptions
    }

    /// The server-wide change announcements, as this worker sees them.
    pub(crate) fn changes(&self) -> &Changes {
        &self.inner.changes
    }

    /// The tasks.
    pub(crate) fn tasks(&self) -> &Tasks {
        &self.inner.tasks
    }

    /// The limits per principal of this worker.
    pub(crate) fn limiter(&self) -> &Arc<Limiter> {
        &self.inner.limiter
    }

    /// The options.
    pub(crate) fn options(&self) -> &EngineOptions {
        &self.inner.options
    }
}
