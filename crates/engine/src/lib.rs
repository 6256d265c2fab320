//! The durable-mcp engine: the request path of both protocol eras, written against the
//! [store contract](durable_mcp_store::Store) and the [handler adapter](durable_mcp_handler).
//!
//! The request path has one door in and one door out:
//! - [`Engine::accept`] is the only place a request is accepted: a [`Request`], parsed once
//!   by the transport ([`durable_mcp_protocol::jsonrpc::classify`]), is routed by its
//!   [`Method`]; its response stream is committed, then its handler starts.
//! - [`events::Events`] (in the core) is the only way a handler's messages, its outcome
//!   included, become events: each is committed to the store before any transport can send
//!   it (D1), then handed to this worker's tails.
//!
//! Transports (HTTP, stdio) read the events back through [`tail`]; the GET streams of a
//! session's standalone stream through [`Engine::open_get_stream`], which hands each event
//! to exactly one of them.
//!
//! # Layers
//!
//! The engine is built in layers; a module uses the modules of its own layer and of those
//! below it, never one above. Layers 0 to 3 are the crate
//! [`durable_mcp_engine_core`] (records, the journal, tasks, keys, the door out, metrics
//! and traces), which does not depend on this one: the compiler keeps them from calling
//! the request path. This crate is layer 4, the request path, and the composition:
//!
//! | module | what it owns |
//! |---|---|
//! | `run` | the door in: [`Engine::accept`] classifies a request into a route, one function per route |
//! | `opening` | a new request's response stream and its journal entry, committed together |
//! | `pump` | a running handler's messages: each committed, its outcome last |
//! | `registry` | the runs in flight on this worker |
//! | `durable` | the handler's durable context: steps, questions, becoming a task |
//! | `recovery`, `relay` | re-running runs taken over; relaying a task's stream |
//! | `tail`, `getstream` | reading streams back; the GET streams of a session |
//! | `session`, `notify`, `changes`, `subscriptions`, `outbox`, `inbox` | sessions, listen streams, change announcements, resource subscriptions, a handler's notifications and answers |
//! | `inspect` | what an operator reads of the store |
//!
//! [`Engine`] composes the components of the core ([`events::Events`], [`keys::Keys`],
//! [`journal::Journal`], [`tasks::Tasks`]) with this crate's own (the registry, the GET
//! streams, the change announcements); the `layers` test checks the `crate::` paths
//! inside each crate.

mod changes;
mod durable;
mod getstream;
mod inbox;
pub mod inspect;
#[cfg(test)]
mod journal_tests;
#[cfg(test)]
mod layers;
mod notify;
mod opening;
mod outbox;
mod pump;
mod recovery;
mod registry;
mod relay;
mod run;
mod session;
mod subscriptions;
mod tail;

// The core's modules, under the names the request path uses (`crate::journal`, ...).
use durable_mcp_engine_core::{caller, events, hub, journal, records, rerun, state, sync, tasks};
pub use durable_mcp_engine_core::{keys, limits, metrics, traces};

use std::sync::Arc;
use std::time::Duration;

use durable_mcp_handler::{McpHandler, ServerSummary};
use durable_mcp_store::{Retention, Store};

pub use durable_mcp_engine_core::{Caller, EngineError, Era, RecordError, is_credential};
pub use durable_mcp_protocol::jsonrpc::Request;
pub use durable_mcp_protocol::meta::RELATED_TASK;
pub use durable_mcp_protocol::methods::Method;
pub use durable_mcp_protocol::tasks::TASKS_EXTENSION;
pub use getstream::{GetStream, GetStreamSettings};
pub use opening::Accepted;
pub use tail::{Follow, tail};

/// Settings of the engine.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EngineOptions {
    /// The `retry` hint sent with the priming event of 2025-11-25 streams.
    pub sse_retry: Duration,
    /// Retention (D14): session idle TTL and maximum age of finished streams.
    pub retention: Retention,
    /// How often the background pruner applies `retention`.
    pub prune_interval: Duration,
    /// This worker's name in leases. Keep it stable across restarts of the same worker so
    /// that it resumes its own unfinished runs at once (D7); distinct per worker.
    ///
    /// Empty (the default): chosen when the worker starts. A server of the `durable-mcp`
    /// crate takes [`default_worker_id`] of the address it listens on; [`Engine::new`]
    /// alone takes a random one (stable for the process only).
    pub worker_id: String,
    /// How long a run's lease lasts without a heartbeat: after a worker dies, another one
    /// takes its runs over within this time (D7). Heartbeats come every third of it.
    pub lease: Duration,
    /// Runs of one request at most (the first included) before it ends with an error.
    pub max_attempts: u32,
    /// One fixed key sealing every `requestState` of the process (D12): at least 32 bytes,
    /// the same on every worker, kept out of the store. `None` (the default): the key ring
    /// in the store, created on first start and shared by every worker (see [`keys`]).
    pub state_key: Option<Vec<u8>>,
    /// Limits per principal on this worker (see [`limits`]).
    pub limits: limits::Limits,
}

/// The worker id of a worker on this host listening on `listen` (`None`: a stdio process):
/// the host name and the address, stable across restarts of the worker and distinct between
/// the workers of a host, which listen on different addresses. Containers have host names
/// of their own (`HOSTNAME`), so two containers listening on the same port still differ;
/// give `worker_id` yourself where they share one. A stdio process, which has no address,
/// gets the host and its process id: never an HTTP worker's id, nor another stdio
/// process's, and not stable across its restarts.
pub fn default_worker_id(listen: Option<std::net::SocketAddr>) -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    match listen {
        Some(listen) => format!("{host}/{listen}"),
        None => format!("{host}/stdio/{}", std::process::id()),
    }
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            sse_retry: Duration::from_millis(500),
            retention: Retention {
                session_idle_ttl_ms: Some(24 * 3_600_000),
                max_stream_age_ms: Some(3_600_000),
            },
            prune_interval: Duration::from_secs(60),
            worker_id: String::new(),
            lease: Duration::from_secs(5),
            max_attempts: 10,
            state_key: None,
            limits: limits::Limits::default(),
        }
    }
}

/// The engine: one per worker, shared by its transports.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    /// The door out: the store, and this worker's hand-off to its own tails.
    events: events::Events,
    /// Run records, their leases and the heartbeat of the runs held here.
    journal: journal::Journal,
    handler: McpHandler,
    summary: ServerSummary,
    options: EngineOptions,
    runs: registry::Registry,
    keys: keys::Keys,
    /// Task records, and their writes on this worker.
    tasks: tasks::Tasks,
    /// Server-wide change announcements, as this worker sees them.
    changes: changes::Changes,
    /// The GET streams open on this worker, per session.
    get_streams: getstream::GetStreams,
    /// The index of resource subscriptions.
    subscriptions: subscriptions::Subscriptions,
    /// What each principal uses of this worker, against [`EngineOptions::limits`].
    limiter: Arc<limits::Limiter>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("store", &self.store().backend())
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// An engine serving `handler` on `store`.
    ///
    /// With metrics on ([`metrics::enable`]), the engine times its store, and with traces
    /// on ([`traces::enable`]) it traces its calls: `store` is wrapped in a
    /// [`metrics::MeteredStore`].
    pub fn new(store: Arc<dyn Store>, handler: McpHandler, mut options: EngineOptions) -> Self {
        if options.worker_id.is_empty() {
            options.worker_id = format!("worker-{}", durable_mcp_store::StreamId::random());
        }
        let (metered, traced) = (crate::metrics::enabled(), crate::traces::enabled());
        let store: Arc<dyn Store> = if metered || traced {
            Arc::new(crate::metrics::MeteredStore::observing(
                store, metered, traced,
            ))
        } else {
            store
        };
        let summary = handler.summary();
        let keys = keys::Keys::new(store.clone(), options.state_key.as_deref());
        let events = events::Events::new(store);
        let journal =
            journal::Journal::new(events.clone(), options.worker_id.clone(), options.lease);
        let tasks = tasks::Tasks::new(events.clone());
        let get_streams = getstream::GetStreams::new(events.clone());
        let subscriptions = subscriptions::Subscriptions::new(events.store().clone());
        let changes = changes::Changes::new(
            events.store().clone(),
            &options.worker_id,
            journal.started_at_ms(),
        );
        let limiter = limits::Limiter::new(options.limits.clone());
        Self {
            inner: Arc::new(Inner {
                events,
                journal,
                handler,
                summary,
                options,
                runs: registry::Registry::default(),
                keys,
                tasks,
                changes,
                get_streams,
                subscriptions,
                limiter,
            }),
        }
    }

    /// The door out for one event ([`events::Events::append`]).
    pub(crate) async fn append(
        &self,
        stream: &durable_mcp_store::StreamId,
        data: String,
        close: bool,
    ) -> Result<durable_mcp_store::EventId, durable_mcp_store::StoreError> {
        self.inner.events.append(stream, data, close).await
    }

    /// The door out for several writes ([`events::Events::commit`]).
    pub(crate) async fn commit_batch(
        &self,
        batch: durable_mcp_store::WriteBatch,
    ) -> Result<durable_mcp_store::BatchOutcome, durable_mcp_store::StoreError> {
        self.inner.events.commit(batch).await
    }

    /// The limits per principal of this worker and what each principal uses: the
    /// transports take their units (rate, requests in flight, GET streams) from it.
    pub fn limiter(&self) -> &Arc<limits::Limiter> {
        &self.inner.limiter
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        self.inner.events.store()
    }

    /// The local hub of this worker's tails (write-through, see `tail.rs`).
    pub(crate) fn hub(&self) -> &Arc<hub::Hub> {
        self.inner.events.hub()
    }

    /// The handler.
    pub fn handler(&self) -> &McpHandler {
        &self.inner.handler
    }

    /// The server's static information, read once at start.
    pub fn summary(&self) -> &ServerSummary {
        &self.inner.summary
    }

    /// The `requestState` keys of this worker ([`keys::Keys::get`]).
    pub async fn state_keys(&self) -> Result<durable_mcp_handler::StateKeys, EngineError> {
        self.inner.keys.get().await
    }

    /// The journal: run records, leases, heartbeats.
    pub(crate) fn journal(&self) -> &journal::Journal {
        &self.inner.journal
    }

    /// The server's durable application state, shared by every worker.
    pub fn server_state(&self) -> durable_mcp_handler::ServerState {
        state::server_state(self.store().clone())
    }

    /// Open a GET stream on `session`'s standalone stream: from where delivery stopped
    /// (`resume_after: None`), or resuming after a `Last-Event-ID` of that stream.
    ///
    /// # Durability
    /// In plain words: every message of the standalone stream reaches exactly one of the
    /// session's GET streams, and one that no GET stream received waits for the next.
    /// Stated more precisely: an event is yielded by at most one GET stream of the session
    /// (on any worker) unless a client resumes, and is yielded only after a compare-and-set
    /// of the session's delivery state recorded it as handed out; a resume after event `n`
    /// replays the events after `n` that were handed to the connection that received `n`,
    /// then continues with those not handed out yet (D3). See the module docs of
    /// `getstream` for the hand-over rules.
    pub async fn open_get_stream(
        &self,
        session: &durable_mcp_store::SessionRecord,
        resume_after: Option<u64>,
        settings: GetStreamSettings,
    ) -> Result<GetStream, EngineError> {
        self.inner
            .get_streams
            .open(session, resume_after, settings)
            .await
    }

    /// How many GET streams are open on this worker.
    pub fn open_get_streams(&self) -> usize {
        self.inner.get_streams.len()
    }

    /// The index of resource subscriptions.
    pub(crate) fn subscriptions(&self) -> &subscriptions::Subscriptions {
        &self.inner.subscriptions
    }

    /// The server-wide change announcements, as this worker sees them.
    pub(crate) fn changes(&self) -> &changes::Changes {
        &self.inner.changes
    }

    /// The tasks.
    pub(crate) fn tasks(&self) -> &tasks::Tasks {
        &self.inner.tasks
    }

    /// The options.
    pub fn options(&self) -> &EngineOptions {
        &self.inner.options
    }

    /// Apply retention once now (the on-demand prune).
    pub async fn prune(&self) -> Result<durable_mcp_store::PruneReport, EngineError> {
        let report = self
            .store()
            .prune(&self.inner.options.retention, durable_mcp_store::now_ms())
            .await?;
        crate::metrics::pruned(&report);
        if report != durable_mcp_store::PruneReport::default() {
            tracing::info!(
                sessions_ended = report.sessions_ended,
                streams_deleted = report.streams_deleted,
                "pruned"
            );
        }
        Ok(report)
    }

    /// Run the pruner every `prune_interval` until the returned handle is aborted. A failed
    /// prune (store unavailable) is logged and retried at the next interval.
    pub fn spawn_pruner(&self) -> tokio::task::JoinHandle<()> {
        let engine = self.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(engine.inner.options.prune_interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                if let Err(error) = engine.prune().await {
                    tracing::warn!(%error, "prune failed; retrying at the next interval");
                }
                // Sessions idle that long have ended (or will with this worker's next
                // prune): their handler instances go; without a TTL, after a day.
                let ttl = engine
                    .inner
                    .options
                    .retention
                    .session_idle_ttl_ms
                    .unwrap_or(24 * 3_600_000);
                engine.inner.handler.forget_idle(Duration::from_millis(ttl));
            }
        })
    }
}

#[cfg(test)]
mod worker_id_tests {
    use std::net::SocketAddr;

    use super::default_worker_id;

    /// The same address gives the same id (a restart resumes its own runs at once), another
    /// address or a stdio process another one (a shared id would make each resume the
    /// other's runs).
    #[test]
    fn d7_default_worker_ids_are_stable_per_address_and_distinct_between_them() {
        let (a, b): (SocketAddr, SocketAddr) = (
            "127.0.0.1:8080".parse().expect("a"),
            "127.0.0.1:8081".parse().expect("b"),
        );
        assert_eq!(default_worker_id(Some(a)), default_worker_id(Some(a)));
        assert!(
            default_worker_id(Some(a)).ends_with("/127.0.0.1:8080"),
            "{}",
            default_worker_id(Some(a))
        );
        assert_ne!(default_worker_id(Some(a)), default_worker_id(Some(b)));
        let stdio = default_worker_id(None);
        assert_ne!(default_worker_id(Some(a)), stdio);
        assert!(
            stdio.ends_with(&format!("/stdio/{}", std::process::id())),
            "{stdio}"
        );
    }
}
