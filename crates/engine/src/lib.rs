//! The durable-mcp engine: the request path of both protocol eras, written against the
//! [store contract](durable_mcp_store::Store) and the [handler adapter](durable_mcp_handler).
//!
//! The request path has one door in and one door out:
//! - [`Engine::accept`] is the only place a request is accepted: a [`Request`], parsed once
//!   by the transport ([`durable_mcp_protocol::jsonrpc::classify`]), is routed by its
//!   [`Method`]; its response stream is committed with its first commit, and a journaled
//!   request is journaled before its handler's first effect (D6).
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
//! the request path. This crate is layer 4, the request path, and the composition.
//!
//! [`Engine`] is the composition and the whole public API; every other module is a
//! component with a type and state of its own, or a part of one:
//!
//! | component | modules | what it owns |
//! |---|---|---|
//! | `Requests` | `requests` | the request path (below), holding the core's components |
//! | | `run` | the door in: [`Engine::accept`] classifies a request into a route, one function per route |
//! | | `opening` | a new request's response stream and its journal entry, committed together |
//! | | `pump`, `gate`, `durable`, `inbox`, `outbox` | a running handler: its messages (each committed, its outcome last), its durable context, its answers, its notifications |
//! | | `recovery`, `relay`, `notify` | re-running runs taken over; relaying a task's stream; listen streams |
//! | `Sessions` | `session` | legacy-era sessions: `initialize`, touch, end |
//! | `Registry` | `registry` | the runs in flight on this worker (shared by the two above) |
//! | `GetStreams` | `getstream`, `tail` | the GET streams of a session; reading streams back |
//! | `Changes`, `Subscriptions` | `changes`, `subscriptions` | change announcements; the index of resource subscriptions |
//! | | `inspect` | what an operator reads of the store |
//!
//! The core's components ([`events::Events`], [`keys::Keys`], [`journal::Journal`],
//! [`tasks::Tasks`]) are held by `Requests`. The `layers` test checks the `crate::` paths
//! inside each crate, and that only `lib.rs` implements `Engine`.

mod changes;
mod durable;
mod gate;
mod getstream;
mod inbox;
pub mod inspect;
#[cfg(test)]
mod journal_tests;
#[cfg(test)]
mod layers;
mod notify;
mod opening;
mod operate;
#[cfg(test)]
mod operate_tests;
mod outbox;
mod pump;
mod recovery;
mod registry;
mod relay;
mod requests;
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

pub use durable_mcp_engine_core::records::{ActionKind, ActionRecord};
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
    /// Runs of one request that may end without an outcome (a worker that died holding
    /// it, a handler that panicked) before it is parked for an operator; a run whose client
    /// cannot read a later outcome (a stateless request, a `tasks/result` relay) ends with
    /// an error instead.
    pub max_attempts: u32,
    /// One fixed key sealing every `requestState` of the process (D12): at least 32 bytes,
    /// the same on every worker, kept out of the store. `None` (the default): the key ring
    /// in the store, created on first start and shared by every worker (see [`keys`]).
    pub state_key: Option<Vec<u8>>,
    /// Limits per principal on this worker (see [`limits`]).
    pub limits: limits::Limits,
    /// How long a new journaled request's first commit waits for its handler (D6). A
    /// handler that answers within it, before any step, question or message, has its
    /// request and outcome committed in one commit, with no journal entry; otherwise the
    /// request is journaled at its handler's first effect or when the wait is over,
    /// whichever comes first. Zero journals each request before its handler starts (two
    /// commits for every journaled request). At most a third of `lease`.
    pub journal_wait: Duration,
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
            journal_wait: Duration::from_millis(5),
        }
    }
}

/// The engine: one per worker, shared by its transports. It composes the request path
/// (`Requests`), the sessions (`Sessions`) and this worker's GET streams, and is the
/// engine's whole public API.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    /// The request path: the door in, running handlers, re-runs, listen streams.
    requests: requests::Requests,
    /// Legacy-era sessions.
    sessions: session::Sessions,
    /// The GET streams open on this worker, per session.
    get_streams: getstream::GetStreams,
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
        // A handler that waits for its journal entry waits well within its lease.
        options.journal_wait = options.journal_wait.min(options.lease / 3);
        let (metered, traced) = (crate::metrics::enabled(), crate::traces::enabled());
        let store: Arc<dyn Store> = if metered || traced {
            Arc::new(crate::metrics::MeteredStore::observing(
                store, metered, traced,
            ))
        } else {
            store
        };
        let keys = keys::Keys::new(store.clone(), options.state_key.as_deref());
        let events = events::Events::new(store.clone());
        let journal =
            journal::Journal::new(events.clone(), options.worker_id.clone(), options.lease);
        let changes =
            changes::Changes::new(store.clone(), &options.worker_id, journal.started_at_ms());
        let limiter = limits::Limiter::new(options.limits.clone());
        let runs = Arc::new(registry::Registry::default());
        let sessions = session::Sessions::new(
            store.clone(),
            handler.clone(),
            runs.clone(),
            limiter.clone(),
            options.retention.clone(),
        );
        let requests = requests::Requests::new(requests::Parts {
            tasks: tasks::Tasks::new(events.clone()),
            subscriptions: subscriptions::Subscriptions::new(store),
            events: events.clone(),
            journal,
            handler,
            options,
            runs,
            keys,
            changes,
            limiter: limiter.clone(),
        });
        Self {
            inner: Arc::new(Inner {
                requests,
                sessions,
                get_streams: getstream::GetStreams::new(events),
                limiter,
            }),
        }
    }

    /// The request path (the engine's own tests drive it directly).
    #[cfg(test)]
    pub(crate) fn requests(&self) -> &requests::Requests {
        &self.inner.requests
    }

    /// The door in: accept one request. Its response stream is committed (with its
    /// priming event, where the version has one) with the request's first commit, and the
    /// handler's messages are committed to that stream as they come. A request of a
    /// journaled method ([`Method::is_journaled`]) is committed to the journal before its
    /// handler's first effect (D6): the request is accepted once that first commit is done.
    /// A legacy client re-sending a request id of its session is attached to the run that id
    /// started, and gets its one outcome. Another request under a used id (another method,
    /// other params; `params._meta` does not count) is refused: [`EngineError::Rejected`],
    /// -32600 naming the id. Neither runs a handler.
    ///
    /// # Durability
    /// In plain words: each request pays as few commits as its guarantees allow. A new
    /// journaled request whose handler answers before any step, question or message, within
    /// [`EngineOptions::journal_wait`], makes one commit in all: its stream, priming event,
    /// alias and outcome, closing the stream, with no run record. Otherwise it makes one
    /// commit when its handler's first effect comes (or the wait is over): its stream,
    /// priming event, alias and run record; and one for its outcome (the response, the close
    /// and the removal of its run record). A request the engine answers itself makes one;
    /// another request makes one, when its handler sends its first message. Stated more
    /// precisely: the alias is written with `Expect::Absent` in the first commit, and read
    /// before the handler starts, so a re-sent request id leaves nothing of its own visible
    /// and is attached to the existing run (or refused, if it came with another request)
    /// (D1, D6).
    ///
    /// With traces on, the request's server span is current while it is accepted and while
    /// its handler's messages are committed (see [`crate::traces`]).
    pub async fn accept(&self, caller: &Caller, request: Request) -> Result<Accepted, EngineError> {
        self.inner.requests.accept(caller, request).await
    }

    /// Commit a client's response to a server-to-client request into the inbox of the run
    /// that asked, from whichever worker received it. Responses to unknown or finished runs,
    /// or to another session's, are dropped, as the protocol allows.
    ///
    /// # Durability
    /// When this returns `Ok`, the answer is committed: the handler gets it even if it runs
    /// on another worker (D9 builds on this).
    pub async fn reply(
        &self,
        caller: &Caller,
        id: &durable_mcp_protocol::jsonrpc::RequestId,
        message: serde_json::Map<String, serde_json::Value>,
    ) -> Result<(), EngineError> {
        self.inner.requests.reply(caller, id, message).await
    }

    /// `notifications/cancelled`: cancel the named request of the caller's session.
    ///
    /// The handler is cancelled at once if it runs on this worker; otherwise the
    /// cancellation is recorded in the journal and the worker running it stops it at its
    /// next heartbeat (D11).
    pub async fn cancel(
        &self,
        caller: &Caller,
        request_id: &durable_mcp_protocol::jsonrpc::RequestId,
    ) -> Result<(), EngineError> {
        self.inner.requests.cancel(caller, request_id).await
    }

    /// Deliver a client notification to the handler (not `notifications/cancelled`, which
    /// is [`Engine::cancel`]).
    pub fn notify(&self, caller: &Caller, message: serde_json::Map<String, serde_json::Value>) {
        self.inner.requests.notify(caller, message);
    }

    /// The events of `stream` after sequence `after`, as a transport writes them: from
    /// memory what this worker commits while `follow` (see [`Accepted::follow`]) holds, or
    /// while a writer of this worker holds the stream; from the store what it does not
    /// hold (a resume from an earlier position, another worker's events). Every item was
    /// committed before it is yielded (D1).
    pub fn tail(
        &self,
        stream: durable_mcp_store::StreamId,
        after: u64,
        follow: Option<Follow>,
    ) -> impl futures::Stream<
        Item = Result<durable_mcp_store::StoredEvent, durable_mcp_store::StoreError>,
    > + Send
    + 'static {
        self.inner.requests.tail(stream, after, follow)
    }

    /// Reject a request before it runs, with a committed stream holding the error: used
    /// when a transport must answer on a stream.
    pub fn rejection_response(
        id: durable_mcp_protocol::jsonrpc::RequestId,
        rejection: durable_mcp_protocol::jsonrpc::Rejection,
    ) -> serde_json::Value {
        requests::Requests::rejection_response(id, rejection)
    }

    /// How many requests are running on this worker.
    pub fn in_flight(&self) -> usize {
        self.inner.requests.in_flight()
    }

    /// Graceful shutdown of durable execution: wait up to `grace` for the requests running
    /// here to finish; then give the leases of those still running back, so that another
    /// worker resumes them at once (D7), and stop them here.
    pub async fn drain(&self, grace: Duration) {
        self.inner.requests.drain(grace).await;
    }

    /// Take over every run that is ours from before a restart, or whose owner's lease
    /// expired, and run it again. Returns how many runs were resumed.
    pub async fn recover(&self) -> Result<usize, EngineError> {
        self.inner.requests.recover().await
    }

    /// Run [`Engine::recover`] now and then every second (every half lease if that is
    /// shorter), until the handle is aborted: a released lease is picked up within a second.
    pub fn spawn_recovery(&self) -> tokio::task::JoinHandle<()> {
        self.inner.requests.spawn_recovery()
    }

    /// Run `initialize` and, if the handler accepts it, create the session.
    ///
    /// Returns the session (absent when the handler answered with an error) and the
    /// JSON-RPC response to send.
    ///
    /// # Durability
    /// The session is committed before the response is returned (D4).
    ///
    /// A principal at its session limit ([`crate::limits::Limits::sessions`]) is refused
    /// with [`EngineError::Limited`] before the handler runs or anything is written.
    ///
    /// `http` is the HTTP request's head, for the handler's extensions (`None` on stdio).
    pub async fn initialize(
        &self,
        principal: &durable_mcp_store::Principal,
        request: Request,
        http: Option<Arc<http::request::Parts>>,
    ) -> Result<(Option<durable_mcp_store::SessionRecord>, serde_json::Value), EngineError> {
        self.inner
            .sessions
            .initialize(principal, request, http)
            .await
    }

    /// Load the session named by a client's `Mcp-Session-Id`, and record its use.
    ///
    /// A session idle past the TTL is ended here (everywhere, D5) even if the pruner has not
    /// run yet. Use is recorded at most every tenth of the TTL, to keep reads cheap.
    pub async fn session(
        &self,
        principal: &durable_mcp_store::Principal,
        raw_id: &str,
    ) -> Result<durable_mcp_store::SessionRecord, EngineError> {
        self.inner.sessions.session(principal, raw_id).await
    }

    /// Keep a session alive (a live GET stream calls this on its keep-alive ticks).
    pub async fn touch_session(
        &self,
        principal: &durable_mcp_store::Principal,
        id: &durable_mcp_store::SessionId,
    ) -> Result<(), EngineError> {
        self.inner.sessions.touch_session(principal, id).await
    }

    /// End a session everywhere (D5): its runs here are cancelled and its streams close.
    ///
    /// With metrics on, the session is read first, for `mcp.server.session.duration`.
    pub async fn end_session(
        &self,
        principal: &durable_mcp_store::Principal,
        id: &durable_mcp_store::SessionId,
    ) -> Result<bool, EngineError> {
        self.inner.sessions.end_session(principal, id).await
    }

    /// An operator's cooperative cancellation of run `run_id` (`durable-mcp runs cancel`),
    /// by `by`, for `reason`. The action is committed first; then the run's worker, any
    /// worker, cancels the handler at its next heartbeat (a third of the lease) and the
    /// client gets an error outcome saying so ([`code::ENDED_BY_OPERATOR`]); a run waiting
    /// for a worker is closed with it by recovery instead of run. [`EngineError::RunNotFound`]
    /// if the run is not in the journal (it has finished).
    ///
    /// [`code::ENDED_BY_OPERATOR`]: durable_mcp_protocol::jsonrpc::code::ENDED_BY_OPERATOR
    pub async fn cancel_run(
        &self,
        run_id: &str,
        by: String,
        reason: Option<String>,
    ) -> Result<ActionRecord, EngineError> {
        self.inner.requests.cancel_run(run_id, by, reason).await
    }

    /// An operator's kill of run `run_id` (`durable-mcp runs kill`), by `by`, for `reason`:
    /// the action is committed, then, in one commit, the error outcome on the run's stream,
    /// the stream closed and the journal entry removed over the version read. A live
    /// worker hears of it at its next heartbeat: it cancels the handler, commits no more of
    /// its steps, and removes the ones committed in between; a task the run worked for ends
    /// `failed`, and a 2026-07-28 retry that continues the run is refused. [`EngineError::RunNotFound`] if the run is not in
    /// the journal (it has finished).
    pub async fn kill_run(
        &self,
        run_id: &str,
        by: String,
        reason: Option<String>,
    ) -> Result<ActionRecord, EngineError> {
        self.inner
            .requests
            .end_run(ActionKind::Kill, run_id, by, reason)
            .await
    }

    /// An operator's purge of run `run_id` (`durable-mcp runs purge`): a kill recorded as a
    /// purge, whose client reads that its request was purged.
    pub async fn purge_run(
        &self,
        run_id: &str,
        by: String,
        reason: Option<String>,
    ) -> Result<ActionRecord, EngineError> {
        self.inner
            .requests
            .end_run(ActionKind::Purge, run_id, by, reason)
            .await
    }

    /// An operator's retry of parked run `run_id` (`durable-mcp runs retry`): in one commit
    /// with the action, the run is given back to the workers with its failures counted
    /// afresh, and the next recovery pass of any worker runs it again, its committed steps
    /// replayed, not repeated (D8). Its client reads the outcome where it waits (its
    /// stream, its task). [`EngineError::RunNotFound`] if it is not in the journal,
    /// [`EngineError::RunNotParked`] if it is not parked.
    pub async fn retry_run(
        &self,
        run_id: &str,
        by: String,
        reason: Option<String>,
    ) -> Result<ActionRecord, EngineError> {
        self.inner.requests.retry_run(run_id, by, reason).await
    }

    /// An operator's cancellation of task `task_id` (`durable-mcp tasks cancel`), with the
    /// semantics of a client's `tasks/cancel`: a task in a terminal status is refused
    /// ([`EngineError::TaskTerminal`]); any other is `cancelled` when this returns, with a
    /// status message saying an operator cancelled it and why, and its run, on whichever
    /// worker runs it, is cancelled cooperatively. The action is kept against the run.
    pub async fn cancel_task(
        &self,
        task_id: &str,
        by: String,
        reason: Option<String>,
    ) -> Result<ActionRecord, EngineError> {
        self.inner.requests.cancel_task(task_id, by, reason).await
    }

    /// What is known of run `run_id` ([`inspect::RunTimeline`]), reading at most `limit`
    /// steps and stream events; `None` if nothing is.
    pub async fn run_timeline(
        &self,
        run_id: &str,
        limit: usize,
    ) -> Result<Option<inspect::RunTimeline>, EngineError> {
        let actions = self.run_actions(run_id).await?;
        inspect::timeline(self.store().as_ref(), run_id, actions, limit).await
    }

    /// Task `task_id`, whoever owns it, and its run's timeline (`None` if its run is not
    /// known: a task from before tasks kept it). After the run has finished, the timeline
    /// reads the task's stream, where its questions and outcome are. `None` if there is no
    /// such task.
    pub async fn task_timeline(
        &self,
        task_id: &str,
        limit: usize,
    ) -> Result<Option<(inspect::TaskSummary, Option<inspect::RunTimeline>)>, EngineError> {
        let Some((_, task)) = inspect::task(self.store().as_ref(), task_id).await? else {
            return Ok(None);
        };
        let Some(run_id) = &task.run_id else {
            return Ok(Some((task, None)));
        };
        let mut timeline = self.run_timeline(run_id, limit).await?;
        if let Some(timeline) = &mut timeline
            && !timeline.in_journal
        {
            timeline.stream = inspect::stream(self.store().as_ref(), &task.stream, limit).await?;
        }
        Ok(Some((task, timeline)))
    }

    /// The operator actions on run `run_id`, oldest first (kept a week after each).
    pub async fn run_actions(&self, run_id: &str) -> Result<Vec<ActionRecord>, EngineError> {
        self.inner.requests.journal().actions(run_id).await
    }

    /// The limits per principal of this worker and what each principal uses: the
    /// transports take their units (rate, requests in flight, GET streams) from it.
    pub fn limiter(&self) -> &Arc<limits::Limiter> {
        &self.inner.limiter
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        self.inner.requests.store()
    }

    /// The handler.
    pub fn handler(&self) -> &McpHandler {
        self.inner.requests.handler()
    }

    /// The server's static information, read once at start.
    pub fn summary(&self) -> &ServerSummary {
        self.inner.requests.summary()
    }

    /// The `requestState` keys of this worker ([`keys::Keys::get`]).
    pub async fn state_keys(&self) -> Result<durable_mcp_handler::StateKeys, EngineError> {
        self.inner.requests.state_keys().await
    }

    /// The server's durable application state, shared by every worker.
    pub fn server_state(&self) -> durable_mcp_handler::ServerState {
        self.inner.requests.server_state()
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

    /// The options.
    pub fn options(&self) -> &EngineOptions {
        self.inner.requests.options()
    }

    /// Apply retention once now (the on-demand prune).
    pub async fn prune(&self) -> Result<durable_mcp_store::PruneReport, EngineError> {
        let report = self
            .store()
            .prune(&self.options().retention, durable_mcp_store::now_ms())
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
            let mut ticker = tokio::time::interval(engine.options().prune_interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                if let Err(error) = engine.prune().await {
                    tracing::warn!(%error, "prune failed; retrying at the next interval");
                }
                // Sessions idle that long have ended (or will with this worker's next
                // prune): their handler instances go; without a TTL, after a day.
                let ttl = engine
                    .options()
                    .retention
                    .session_idle_ttl_ms
                    .unwrap_or(24 * 3_600_000);
                engine.handler().forget_idle(Duration::from_millis(ttl));
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
