//! The pump of one run: it commits every message the handler sends to the run's stream
//! (the door out), and decides, once the run stops, what becomes of the stream and of
//! the run's journal entry. It is a small state machine:
//!
//! ```text
//!            outcome committed ─────────────▶ Stop::Answered ──┐
//!            input_required committed ──────▶ Stop::Suspended ─┤
//! Running ── outcome after a cancellation ──▶ Stop::Cancelled ─┤
//!    │  ▲    outcome without a valid lease ─▶ Stop::Fenced ────┼──▶ ending(stop, AtEnd) ──▶ Ending ──▶ Ended
//!    └──┘    a commit failed ───────────────▶ Stop::CommitFailed
//!  message   the handler ended, no outcome ─▶ Stop::HandlerGone ┘
//! committed
//! ```
//!
//! The decisions are plain functions ([`on_outcome`], [`ending`]) of what the pump knows;
//! the pump only carries them out.
//!
//! A new journaled run starts `Deferred` ([`Deferred`]): its handler runs before its
//! journal entry is committed. The entry is committed with the handler's first message or
//! effect, or when [`crate::EngineOptions::journal_wait`] is over; a handler that answers
//! before any of these has its outcome committed with its stream in one commit, and no
//! journal entry at all ([`Requests::commit_answered`]).
//!
//! # Durability
//! An outcome is committed only while the lease is surely this worker's (fencing, D7); a
//! journaled run's outcome is committed with the removal of its run record in one batch
//! ([`Held::commit_outcome`]); a run that stops without a committed outcome is either
//! closed (no client waits forever) or handed back to the journal for another attempt.

use std::sync::Arc;

use durable_mcp_handler::{Outbound, Run, StateKeys};
use durable_mcp_protocol::jsonrpc::{Outcome, Request, RequestId, retryable_error};
use durable_mcp_protocol::{CLOSE_SSE_STREAM_METHOD, McpVersion};
use durable_mcp_store::{RecordKind, StreamId, now_ms};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::EngineError;
use crate::caller::Caller;
use crate::durable::DurableRun;
use crate::gate::{Entry, Gate, GateKeeper};
use crate::inbox::Inbox;
use crate::journal::{Held, Unjournaled};
use crate::notify::{ACKNOWLEDGED_METHOD, ListenSubscription};
use crate::opening::{Answered, Journaled, NewStream};
use crate::records::{Era, ParkReason, Parked};
use crate::requests::Requests;
use crate::sync::lock;

/// How long a run that failed without an outcome waits before it is retried.
pub(crate) const RETRY_AFTER_FAILURE_MS: u64 = 1_000;

/// How long a legacy run goes before it watches for the end of its session (D5).
pub(crate) const SESSION_WATCH_AFTER: std::time::Duration = std::time::Duration::from_millis(50);

/// Everything the pump of one run works with.
pub(crate) struct Pump {
    pub run: Run,
    pub caller: Caller,
    pub id: RequestId,
    pub stream: StreamId,
    /// A stream not committed yet: created by the first commit to it (see `accept`).
    pub opening: Option<NewStream>,
    pub close_connection: CancellationToken,
    pub held: Option<Held>,
    pub durable: Option<Arc<DurableRun>>,
    pub detach_requests: tokio::sync::mpsc::Receiver<crate::durable::Detach>,
    /// A `subscriptions/listen` request (2026-07-28): what the engine feeds it (its tasks,
    /// announced changes) once the handler acknowledged it.
    pub subscription: Option<ListenSubscription>,
    /// A journaled run's registration on this worker (see [`Requests::register_journaled`]).
    pub registration: Option<u64>,
    /// The `requestState` keys that seal its `input_required` state.
    pub keys: StateKeys,
    /// The request's timing for `mcp.server.operation.duration` (metrics on, a new request).
    pub operation: Option<crate::metrics::Operation>,
    /// A new journaled run whose journal entry is not committed yet (then `held` is `None`).
    pub deferred: Option<Deferred>,
}

/// A new journaled run whose journal entry waits for the handler's first message or effect,
/// or for its outcome (D6).
pub(crate) struct Deferred {
    /// The entry.
    pub run: Unjournaled,
    /// What cancels the handler (a child of the entry's `cancelled`).
    pub cancel: CancellationToken,
    /// Which request a session's request id is used for (its alias keeps it).
    fingerprint: Option<crate::records::RequestFingerprint>,
    /// What the run's effects wait on.
    pub gate: Gate,
    keeper: GateKeeper,
    /// Where the request's acceptance waits for the first commit.
    reply: tokio::sync::oneshot::Sender<Result<First, EngineError>>,
}

impl Deferred {
    /// A deferred run of `run`, and where its first commit is told.
    pub(crate) fn new(
        run: Unjournaled,
        fingerprint: Option<crate::records::RequestFingerprint>,
    ) -> (
        Self,
        tokio::sync::oneshot::Receiver<Result<First, EngineError>>,
    ) {
        let (gate, keeper) = crate::gate::gate();
        let (reply, first) = tokio::sync::oneshot::channel();
        let cancel = run.cancelled.child_token();
        let deferred = Self {
            run,
            cancel,
            fingerprint,
            gate,
            keeper,
            reply,
        };
        (deferred, first)
    }

    /// The run as a session's request running here.
    pub(crate) fn session_run(&self) -> crate::registry::SessionRun {
        crate::registry::SessionRun {
            cancel: self.cancel.clone(),
            gate: Some(self.gate.clone()),
        }
    }

    /// The entry back, to be journaled before the handler starts.
    pub(crate) fn into_run(self) -> Unjournaled {
        self.run
    }
}

/// What the first commit of a deferred run came to, for the request's acceptance.
pub(crate) enum First {
    /// The stream is committed (with its priming event, if it has one).
    Committed {
        /// The priming event.
        priming: Option<durable_mcp_store::EventId>,
    },
    /// The request id was re-sent: the run it started answers the request.
    Attach(StreamId, Request),
}

/// How a deferred run's first commit went ([`Requests::first_commit`]).
enum Began {
    /// The handler answered first: its outcome is committed, with the stream.
    Answered(Value),
    /// The journal entry is committed; the handler's first message, if one came, is next.
    Journaled(Option<Outbound>),
    /// The run is not this request's (a re-send attached elsewhere, a failed commit): the
    /// handler was cancelled, and nothing of the run was committed.
    Dropped,
}

/// Why a run's pump left `Running`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Stop {
    /// Its outcome was committed (a task settles from it).
    Answered(Value),
    /// Its `input_required` outcome (2026-07-28) was committed, its journal entry removed
    /// before: a stateless retry continues the run.
    Suspended,
    /// The outcome came after the run was cancelled (by the client, by the end of its
    /// session, by a hand-over): the protocol wants no response, none is committed.
    Cancelled,
    /// The outcome came when the lease was no longer surely this worker's: another worker
    /// may own the run, so it is not committed here (fencing).
    Fenced,
    /// A message (the outcome or another) could not be committed.
    CommitFailed,
    /// The handler ended without an outcome (it panicked, say).
    HandlerGone,
    /// The handler's outcome is an error it marked retryable, for a run that can be parked
    /// ([`RunRecord::parkable`](crate::records::RunRecord::parkable)): the run is parked
    /// with it for an operator, and nothing is committed to its stream.
    Parked(String),
}

/// What to do with an outcome the handler sent ([`on_outcome`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnOutcome {
    /// Commit it.
    Commit,
    /// Drop it: the run was cancelled ([`Stop::Cancelled`]).
    Drop,
    /// Drop it: the lease is not surely ours ([`Stop::Fenced`]).
    Fence,
}

/// Whether an outcome is committed: not after a cancellation, and for a journaled run
/// (`lease_valid` is `Some`) only while its lease is surely this worker's.
pub(crate) fn on_outcome(cancelled: bool, lease_valid: Option<bool>) -> OnOutcome {
    match (cancelled, lease_valid) {
        (true, _) => OnOutcome::Drop,
        (false, Some(false)) => OnOutcome::Fence,
        (false, _) => OnOutcome::Commit,
    }
}

/// What the worker knows when a run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AtEnd {
    /// The run is journaled (it holds a run record).
    pub journaled: bool,
    /// The run's cancellation token fired (client, session end, hand-over, failure).
    pub cancelled: bool,
    /// The run's lease is lost (another worker took it over, or a commit failed).
    pub lost: bool,
    /// The worker is shutting down and gives leases back (`drain`).
    pub releasing: bool,
}

/// What ending a run does ([`ending`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Nothing more: the outcome is committed and nothing is journaled.
    Done,
    /// Close the stream without an outcome: no response after a client's cancellation, an
    /// error otherwise, so that no client waits on it forever.
    CloseUnanswered {
        /// Whether the client cancelled (then no response follows).
        cancelled_by_client: bool,
    },
    /// Only the heartbeat stops: a suspended run's journal entry went before its outcome.
    StopHeartbeat,
    /// Settle the run's task (if any) with its outcome, then forget the run.
    Finish,
    /// Park the run for an operator with the handler's retryable error.
    Park,
    /// Close the stream of a cancelled run, mark its task cancelled, forget the run.
    FinishCancelled,
    /// Give the lease back for another attempt: at once (shutdown) or after a pause, and
    /// counted as a failure or not.
    Release {
        /// At once (a hand-over at shutdown) rather than after a pause.
        now: bool,
        /// Counts toward `max_attempts` (the run ended without an outcome).
        failed: bool,
    },
}

/// What ending a run that stopped for `stop` does.
pub(crate) fn ending(stop: &Stop, at: AtEnd) -> Ending {
    if !at.journaled {
        return match stop {
            Stop::Answered(_) | Stop::Suspended => Ending::Done,
            // The pump cancelled the run itself: no client asked for silence.
            Stop::CommitFailed => Ending::CloseUnanswered {
                cancelled_by_client: false,
            },
            Stop::Cancelled | Stop::Fenced | Stop::HandlerGone | Stop::Parked(_) => {
                Ending::CloseUnanswered {
                    cancelled_by_client: at.cancelled,
                }
            }
        };
    }
    match stop {
        Stop::Suspended => Ending::StopHeartbeat,
        Stop::Answered(_) => Ending::Finish,
        Stop::Parked(_) if !at.lost => Ending::Park,
        _ if at.releasing => Ending::Release {
            now: true,
            failed: false,
        },
        // Another worker took the run over, or committing failed: the journal (and whoever
        // holds the lease next) carries the request on.
        _ if at.lost => Ending::Release {
            now: false,
            failed: false,
        },
        _ if at.cancelled => Ending::FinishCancelled,
        // The handler ended without an outcome: run it again later, up to `max_attempts`.
        _ => Ending::Release {
            now: false,
            failed: true,
        },
    }
}

/// What one step of `Running` came to.
enum Step {
    /// Go on with the next message.
    Next,
    /// The run stops.
    Stop(Stop),
}

/// 2025-11-25 `tools/list`: each tool's `execution.taskSupport`, from the support it
/// declares in its `_meta` (absent means forbidden).
fn declare_task_support(outcome: &mut Value) {
    // Every answer of a 2025-11-25 session passes here: plain lookups, not JSON pointers
    // (which allocate each segment they parse).
    let Some(tools) = outcome
        .get_mut("result")
        .and_then(|result| result.get_mut("tools"))
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for tool in tools {
        let support = tool
            .get("_meta")
            .and_then(|meta| meta.get(durable_mcp_handler::tasks::TASK_SUPPORT_META))
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let (Some(support), Some(tool)) = (support, tool.as_object_mut()) {
            tool.insert(
                "execution".into(),
                serde_json::json!({"taskSupport": support}),
            );
        }
    }
}

/// Stop a listen stream's task notifications, waiting for a commit in progress.
async fn stop_feed(feed: &mut Option<(CancellationToken, tokio::task::JoinHandle<()>)>) {
    if let Some((stop, handle)) = feed.take() {
        stop.cancel();
        let _ = handle.await;
    }
}

/// The `input_required` result of a stateless request whose handler waits for the client's
/// answers: the questions, and a state naming the run, sealed with `keys`, so that the
/// retry continues it on any worker (D9, D12).
fn input_required(
    keys: &StateKeys,
    id: &RequestId,
    run_id: &str,
    caller: &Caller,
    request: &Request,
    pending: Vec<(String, Value)>,
) -> Value {
    let requests: Map<String, Value> = pending.into_iter().collect();
    let state = crate::journal::seal_run(keys, run_id, &caller.principal, request);
    serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {
        "resultType": "input_required", "inputRequests": requests, "requestState": state}})
}

/// The pump's state while the handler runs: what its messages built up so far.
struct Running {
    /// Where its messages go (a run that became a task goes on on the task's stream).
    stream: StreamId,
    /// Its stream, while not committed yet.
    opening: Option<NewStream>,
    /// A listen stream's feed of task notifications and announcements.
    feed: Option<(CancellationToken, tokio::task::JoinHandle<()>)>,
    /// Where the client's answers to the handler's own requests come in.
    inbox: Option<Inbox>,
    /// A listen request's subscription, until the handler acknowledged it.
    subscription: Option<ListenSubscription>,
    /// A task's run: its registration by task id and its cancellation watch.
    task_watch: Option<tokio::task::JoinHandle<()>>,
}

/// What does not change while a run is pumped.
struct Fixed<'a> {
    /// The run's cancellation.
    cancel: &'a CancellationToken,
    /// Where the client's answers to the handler's requests go.
    replies: &'a tokio::sync::mpsc::Sender<Value>,
    caller: &'a Caller,
    id: &'a RequestId,
    durable: Option<&'a Arc<DurableRun>>,
    keys: &'a StateKeys,
    close_connection: &'a CancellationToken,
}

impl Requests {
    /// Pump one run: commit its handler's messages until it stops, then end it (see the
    /// module's state machine).
    pub(crate) async fn pump(self, pump: Pump) {
        let Pump {
            mut run,
            caller,
            id,
            stream,
            opening,
            close_connection,
            mut held,
            durable,
            mut detach_requests,
            subscription,
            registration,
            keys,
            operation,
            deferred,
        } = pump;
        // A deferred run's id, for its registration while it has no `held`.
        let dropped_run_id = deferred.as_ref().map(|d| d.run.run_id.clone());
        let mut state = Running {
            stream,
            opening,
            feed: None,
            inbox: None,
            subscription,
            task_watch: None,
        };
        if let Some(key) = held.as_ref().and_then(|h| h.record.task.clone()) {
            state.task_watch = Some(self.watch_task(&key, &run.cancel));
        }
        // A legacy run that lasts watches for the end of its session (D5).
        let standalone = match (&caller.session, caller.era) {
            (Some(session), Era::Legacy) => Some(session.standalone_stream.clone()),
            _ => None,
        };
        let mut watch_after = std::pin::pin!(tokio::time::sleep(SESSION_WATCH_AFTER));
        let mut session_watch: Option<tokio::task::JoinHandle<()>> = None;
        let (mut first, mut early) = (None, None);
        if let Some(deferred) = deferred {
            // Boxed: inline, its commits' futures would make every pump's future larger.
            match Box::pin(self.first_commit(
                deferred,
                &mut run,
                &caller,
                &mut state.opening,
                &mut held,
            ))
            .await
            {
                Began::Answered(outcome) => early = Some(Stop::Answered(outcome)),
                Began::Journaled(message) => first = message,
                // (`first_commit` forgot the session's request id before its gate settled.)
                Began::Dropped => {
                    if let (Some(generation), Some(run_id)) = (registration, &dropped_run_id) {
                        self.unregister_journaled(run_id, generation);
                    }
                    return;
                }
            }
        }
        let stop = if let Some(stop) = early {
            stop
        } else {
            loop {
                let message = if let Some(message) = first.take() {
                    message
                } else {
                    tokio::select! {
                        message = run.next_outbound() => match message {
                            Some(message) => message,
                            None => break Stop::HandlerGone,
                        },
                        () = &mut watch_after, if session_watch.is_none() && standalone.is_some() => {
                            if let Some(standalone) = standalone.clone() {
                                session_watch = Some(self.cancel_when_session_ends(standalone, run.cancel.clone()));
                            }
                            continue;
                        }
                        Some(reply) = detach_requests.recv() => {
                            let Some(held) = held.as_mut() else { continue };
                            let detached = self.detach(&caller, &id, &state.stream, held).await;
                            if let Ok((key, task_stream)) = &detached {
                                state.stream = task_stream.clone();
                                if state.task_watch.is_none() {
                                    state.task_watch = Some(self.watch_task(key, &run.cancel));
                                }
                            }
                            // The durable context's channel carries a message (journal.rs).
                            let _ = reply.send(detached);
                            continue;
                        }
                    }
                };
                let fixed = Fixed {
                    cancel: &run.cancel,
                    replies: &run.replies,
                    caller: &caller,
                    id: &id,
                    durable: durable.as_ref(),
                    keys: &keys,
                    close_connection: &close_connection,
                };
                if let Step::Stop(stop) = self.step(&fixed, &mut state, &mut held, message).await {
                    break stop;
                }
            }
        };
        if let Some(watch) = session_watch {
            watch.abort();
        }
        match (&stop, operation) {
            (Stop::Answered(outcome), operation) => crate::metrics::finish(operation, outcome),
            (Stop::Suspended, Some(operation)) => operation.succeeded(),
            _ => {}
        }
        let Running {
            stream,
            mut opening,
            mut feed,
            inbox,
            task_watch,
            ..
        } = state;
        stop_feed(&mut feed).await;
        if let Some(session) = caller.session_id() {
            self.inner.runs.remove_session_run(session, &id);
        }
        if let Some(watcher) = task_watch {
            watcher.abort();
        }
        if let Some(inbox) = inbox {
            inbox.close(&self).await;
        }
        let at = AtEnd {
            journaled: held.is_some(),
            cancelled: run.cancel.is_cancelled(),
            lost: held.as_ref().is_some_and(|h| h.lost.is_cancelled()),
            releasing: self.inner.runs.releasing(),
        };
        let ending = ending(&stop, at);
        tracing::debug!(%stream, ?stop, ?ending, "run stopped");
        if let Ending::Release { failed: false, .. } = ending
            && caller.protocol_version >= McpVersion::V2025_11_25
        {
            // The lease is lost (the store stopped answering, a commit failed, another
            // worker took over) or handed over: a client that had a priming event resumes
            // with `Last-Event-ID` where the run goes on, rather than wait on this connection
            // for a store that may not answer (D15). An older client, which may have no event
            // id to resume from, keeps its connection.
            close_connection.cancel();
        }
        let Some(held) = held else {
            if let Ending::CloseUnanswered {
                cancelled_by_client,
            } = ending
            {
                let _ = self
                    .close_unanswered_on(&stream, &mut opening, &id, cancelled_by_client)
                    .await;
            }
            // A deferred run answered in its first commit.
            if let (Some(generation), Some(run_id)) = (registration, &dropped_run_id) {
                self.unregister_journaled(run_id, generation);
            }
            return;
        };
        // The run stays registered until its last write is done: `drain` waits on that,
        // so a worker shutting down does not exit before its lease is given back.
        let run_id = held.run_id.clone();
        self.end_journaled(held, ending, stop, &stream, &id).await;
        if let Some(generation) = registration {
            self.unregister_journaled(&run_id, generation);
        }
    }

    /// The first commit of a deferred run: its outcome with its stream, if the handler
    /// answers before its first message or effect and before `journal_wait` is over (one
    /// commit for the whole request); its journal entry with its stream otherwise. Either
    /// way, the request's acceptance learns how it went.
    async fn first_commit(
        &self,
        deferred: Deferred,
        run: &mut Run,
        caller: &Caller,
        opening: &mut Option<NewStream>,
        held: &mut Option<Held>,
    ) -> Began {
        let Deferred {
            run: entry,
            fingerprint,
            keeper,
            reply,
            ..
        } = deferred;
        // A dropped run forgets its session's request id before its gate settles (when
        // `keeper` goes): a copy of the request waiting on the gate then registers its own.
        let id = entry.record.request.id().clone();
        let forget = || {
            if let Some(session) = caller.session_id() {
                self.inner.runs.remove_session_run(session, &id);
            }
        };
        let Some(stream) = opening.as_mut() else {
            // Started by `start_deferred` with its stream: never without.
            let _ = reply.send(Err(EngineError::RunEnded));
            run.cancel.cancel();
            forget();
            return Began::Dropped;
        };
        let message = tokio::select! {
            message = run.next_outbound() => message,
            () = keeper.wanted() => None,
            () = tokio::time::sleep(self.options().journal_wait) => None,
        };
        // A retryable error parks a run that can be parked: that needs its journal entry.
        let parks = |outcome: &Value| entry.record.parkable() && retryable_error(outcome).is_some();
        match message {
            Some(Outbound::Outcome(mut outcome))
                if !run.cancel.is_cancelled()
                    && !matches!(Outcome::of(&outcome), Some(Outcome::Suspended))
                    && !parks(&outcome) =>
            {
                if caller.primes_streams() {
                    declare_task_support(&mut outcome);
                }
                if caller.era == Era::Modern {
                    self.add_server_info(&mut outcome);
                }
                let answered = self
                    .commit_answered(caller, entry, stream, fingerprint.as_ref(), &outcome)
                    .await;
                match answered {
                    Ok(Answered::Committed) => {
                        // The request's first commit is done: what the handler left behind
                        // (an outbox it kept, say) may commit from now on.
                        keeper.settle(Entry::Committed);
                        let priming = stream.accepted().priming;
                        let _ = reply.send(Ok(First::Committed { priming }));
                        Began::Answered(outcome)
                    }
                    Ok(Answered::Attach(existing, request)) => {
                        let _ = reply.send(Ok(First::Attach(existing, request)));
                        forget();
                        Began::Dropped
                    }
                    Err(error) => {
                        let _ = reply.send(Err(error));
                        forget();
                        Began::Dropped
                    }
                }
            }
            message => {
                match self
                    .journal_request(caller, entry, stream, fingerprint.as_ref())
                    .await
                {
                    Ok(Journaled::Held(entry)) => {
                        keeper.settle(Entry::Committed);
                        *held = Some(*entry);
                        let priming = stream.accepted().priming;
                        let _ = reply.send(Ok(First::Committed { priming }));
                        Began::Journaled(message)
                    }
                    Ok(Journaled::Attach(existing, request)) => {
                        run.cancel.cancel();
                        let _ = reply.send(Ok(First::Attach(existing, request)));
                        forget();
                        Began::Dropped
                    }
                    // A new run's id is its stream's, which no other run has.
                    Ok(Journaled::AlreadyRunning) => {
                        run.cancel.cancel();
                        let _ = reply.send(Err(EngineError::RunEnded));
                        forget();
                        Began::Dropped
                    }
                    Err(error) => {
                        run.cancel.cancel();
                        let _ = reply.send(Err(error));
                        forget();
                        Began::Dropped
                    }
                }
            }
        }
    }

    /// One step of `Running`: commit one message of the handler (or act on it).
    async fn step(
        &self,
        fixed: &Fixed<'_>,
        state: &mut Running,
        held: &mut Option<Held>,
        message: Outbound,
    ) -> Step {
        let Fixed {
            cancel,
            replies,
            caller,
            id,
            durable,
            keys,
            close_connection,
        } = *fixed;
        tracing::debug!(stream = %state.stream, kind = message.kind(), "handler message");
        let result = match message {
            Outbound::Outcome(mut outcome) => {
                stop_feed(&mut state.feed).await;
                match on_outcome(cancel.is_cancelled(), held.as_ref().map(Held::lease_valid)) {
                    OnOutcome::Drop => return Step::Stop(Stop::Cancelled),
                    OnOutcome::Fence => {
                        if let Some(held) = held.as_ref() {
                            tracing::warn!(run = %held.run_id, "lease no longer valid; not committing the outcome");
                            held.lost.cancel();
                        }
                        return Step::Stop(Stop::Fenced);
                    }
                    OnOutcome::Commit => {}
                }
                if let (Some(durable), Some(held)) = (durable, held.as_ref())
                    && durable.store_failed()
                {
                    // Its outcome reflects a store outage, not the handler's work: leave the
                    // run to recovery, as a crash would (D1, D15).
                    tracing::warn!(run = %held.run_id, "a durable operation failed on an unavailable store; the run will be retried from its journal");
                    cancel.cancel();
                    held.lost.cancel();
                    return Step::Stop(Stop::CommitFailed);
                }
                if let Some(held) = held.as_ref()
                    && held.record.parkable()
                    && let Some(error) = retryable_error(&outcome)
                {
                    return Step::Stop(Stop::Parked(error.to_owned()));
                }
                if caller.era == Era::Legacy && caller.protocol_version >= McpVersion::V2025_11_25 {
                    declare_task_support(&mut outcome);
                }
                let mut suspended = false;
                if caller.era == Era::Modern {
                    if let (Some(durable), Some(held)) = (durable, held.as_ref())
                        && matches!(Outcome::of(&outcome), Some(Outcome::Suspended))
                    {
                        let pending: Vec<(String, Value)> =
                            std::mem::take(&mut *lock(&durable.pending));
                        if !pending.is_empty() {
                            outcome = input_required(
                                keys,
                                id,
                                &held.run_id,
                                caller,
                                &held.record.request,
                                pending,
                            );
                            suspended = true;
                        }
                    }
                    self.add_server_info(&mut outcome);
                }
                if suspended && let Some(held) = held.as_ref() {
                    // The retry may come at once: it must not find this run still
                    // journaled (its steps stay).
                    held.stop_heartbeat();
                    if let Err(error) = self
                        .store()
                        .delete_records(RecordKind::Run, &held.run_id)
                        .await
                    {
                        tracing::warn!(%error, run = %held.run_id, "could not end a suspended run's journal entry");
                    }
                }
                let committed = match held.as_mut() {
                    // One commit: the outcome, the close and the end of the journal entry.
                    Some(held) if !suspended && held.record.task.is_none() => {
                        held.commit_outcome(self.journal(), &state.stream, &outcome)
                            .await
                    }
                    _ => self
                        .commit_first(&mut state.opening, &state.stream, &outcome, true)
                        .await
                        .map(drop),
                };
                match committed {
                    Ok(()) if suspended => return Step::Stop(Stop::Suspended),
                    Ok(()) => return Step::Stop(Stop::Answered(outcome)),
                    Err(error) => Err(error),
                }
            }
            Outbound::Notification { method, .. } if method == CLOSE_SSE_STREAM_METHOD => {
                close_connection.cancel();
                Ok(())
            }
            Outbound::Notification {
                method,
                mut message,
            } if method == ACKNOWLEDGED_METHOD && state.subscription.is_some() => {
                let Some(tasks) = state.subscription.take() else {
                    return Step::Next;
                };
                let (subscription_id, filter) = Self::acknowledge(&tasks, id, &mut message);
                // Following starts before the client sees the acknowledgement: what is
                // announced after it reaches the stream.
                let announced = if filter.follows_changes() {
                    Some(self.changes().follow(filter.uris()).await)
                } else {
                    None
                };
                let committed = self
                    .commit_first(&mut state.opening, &state.stream, &message, false)
                    .await
                    .map(drop);
                // Nothing to feed (no task, no announcement followed): no feed.
                if committed.is_ok() && (tasks.follows_tasks() || announced.is_some()) {
                    let stop = CancellationToken::new();
                    state.feed = Some((
                        stop.clone(),
                        self.feed_listen(
                            tasks,
                            subscription_id,
                            filter,
                            announced,
                            state.stream.clone(),
                            stop,
                        ),
                    ));
                }
                committed
            }
            Outbound::Notification { method, message } => {
                let already_sent = held.as_ref().and_then(|h| h.already_sent.as_deref());
                self.route_notification_into(
                    caller,
                    &state.stream,
                    &mut state.opening,
                    &method,
                    message,
                    already_sent,
                )
                .await
            }
            Outbound::Request {
                id: original_id,
                mut message,
                ..
            } => {
                async {
                    let inbox = match &mut state.inbox {
                        Some(inbox) => inbox,
                        None => state
                            .inbox
                            .insert(Inbox::open(self, caller, replies.clone()).await?),
                    };
                    let wire_id = inbox.wire_id(original_id);
                    if let Some(obj) = message.as_object_mut() {
                        obj.insert("id".into(), Value::String(wire_id));
                    }
                    self.commit_first(&mut state.opening, &state.stream, &message, false)
                        .await
                        .map(drop)
                }
                .await
            }
        };
        match result {
            Ok(()) => Step::Next,
            Err(error) => {
                tracing::warn!(%error, stream = %state.stream, "could not commit a handler message; stopping the request");
                cancel.cancel();
                if let Some(held) = held.as_ref() {
                    // A journaled run is retried from its journal: no outcome now.
                    held.lost.cancel();
                }
                Step::Stop(Stop::CommitFailed)
            }
        }
    }

    /// Carry out the [`Ending`] of a journaled run.
    async fn end_journaled(
        &self,
        held: Held,
        ending: Ending,
        stop: Stop,
        stream: &StreamId,
        id: &RequestId,
    ) {
        match ending {
            Ending::StopHeartbeat => held.stop_heartbeat(),
            Ending::Finish | Ending::Done | Ending::CloseUnanswered { .. } => {
                if let (Some(task), Stop::Answered(outcome)) = (held.record.task.clone(), &stop)
                    && let Err(error) = self.tasks().settle_task(&task, outcome).await
                {
                    // The outcome is on the task's stream: recovery settles the task from it.
                    tracing::warn!(%error, %task, "could not settle a task; recovery will");
                    held.release(self.journal(), now_ms() + RETRY_AFTER_FAILURE_MS, false)
                        .await;
                    return;
                }
                held.finish(self.journal()).await;
            }
            Ending::FinishCancelled => {
                let task = held.record.task.as_deref();
                if !self.close_cancelled(&held.run_id, stream, id, task).await {
                    // The store is down: keep the journal entry, so that recovery closes the
                    // stream once it is back (the cancellation mark makes it not run again).
                    let _ = self.journal().cancel_elsewhere_by_run(&held.run_id).await;
                    held.release(self.journal(), now_ms() + RETRY_AFTER_FAILURE_MS, false)
                        .await;
                    return;
                }
                held.finish(self.journal()).await;
            }
            Ending::Park => {
                let error = match stop {
                    Stop::Parked(error) => error,
                    _ => String::new(),
                };
                let parked = Parked {
                    reason: ParkReason::RetryableError,
                    error,
                    at_ms: now_ms(),
                };
                // Not parked (the store failed): its lease runs out, and recovery runs it
                // again, which parks it again.
                held.park(self.journal(), parked).await;
            }
            Ending::Release { now, failed } => {
                if failed {
                    tracing::warn!(run = %held.run_id, "a journaled run ended without an outcome; it will be retried");
                }
                let at = if now {
                    0
                } else {
                    now_ms() + RETRY_AFTER_FAILURE_MS
                };
                held.release(self.journal(), at, failed).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use durable_mcp_handler::McpHandler;
    use durable_mcp_handler::rmcp::{self, ServerHandler};
    use durable_mcp_store::Principal;
    use durable_mcp_store::testing::{CountingStore, Op};
    use durable_mcp_store_memory::MemoryStore;

    use super::*;
    use crate::Engine;
    use crate::EngineOptions;

    #[derive(Clone)]
    struct NoTools;

    impl ServerHandler for NoTools {}

    fn modern() -> Caller {
        Caller {
            principal: Principal::anonymous(),
            era: Era::Modern,
            session: None,
            protocol_version: McpVersion::MODERN,
            log_level: None,
            auth: None,
            trace: None,
            http: None,
        }
    }

    async fn idle(engine: &Engine) {
        for _ in 0..500 {
            if engine.in_flight() == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the run never ended");
    }

    /// A handler whose tools each end after one kind of effect, or none: `quick` answers at
    /// once, `step` runs a durable step, `wait` waits for its journal entry
    /// (`Durable::journaled`), `progress` sends a progress notification.
    /// Each answers whether the run's journal entry was in the store when its effect ran.
    #[derive(Clone)]
    struct Effects(Arc<dyn durable_mcp_store::Store>);

    impl Effects {
        async fn journaled(&self) -> bool {
            !self
                .0
                .list_records(RecordKind::Run, "", 10)
                .await
                .unwrap()
                .is_empty()
        }
    }

    impl ServerHandler for Effects {
        async fn call_tool(
            &self,
            request: rmcp::model::CallToolRequestParams,
            context: rmcp::service::RequestContext<rmcp::RoleServer>,
        ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
            let durable = context
                .extensions
                .get::<durable_mcp_handler::Durable>()
                .cloned();
            let journaled = match &*request.name {
                "step" => {
                    let durable = durable.expect("a journaled run has a durable context");
                    durable
                        .step("check", |_| self.journaled())
                        .await
                        .map_err(rmcp::ErrorData::from)?
                }
                "wait" => {
                    let durable = durable.expect("a journaled run has a durable context");
                    durable.journaled().await.map_err(rmcp::ErrorData::from)?;
                    self.journaled().await
                }
                "progress" => {
                    let journaled = self.journaled().await;
                    let token =
                        rmcp::model::ProgressToken(rmcp::model::NumberOrString::String("p".into()));
                    context
                        .peer
                        .notify_progress(rmcp::model::ProgressNotificationParam::new(token, 1.0))
                        .await
                        .expect("sent");
                    journaled
                }
                _ => self.journaled().await,
            };
            Ok(
                rmcp::model::CallToolResult::success(vec![rmcp::model::ContentBlock::text(
                    format!("journaled: {journaled}"),
                )])
                .into(),
            )
        }
    }

    /// A 2025-11-25 session's caller on `engine` (its priming events included).
    async fn legacy(engine: &Engine) -> Caller {
        let Value::Object(request) = serde_json::json!({"jsonrpc": "2.0", "id": 0,
            "method": "initialize", "params": {"protocolVersion": "2025-11-25",
            "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        else {
            unreachable!()
        };
        let principal = Principal::anonymous();
        let (session, _) = engine
            .initialize(&principal, crate::Request::from_message(request), None)
            .await
            .unwrap();
        Caller::legacy(principal, session.unwrap()).unwrap()
    }

    /// Call `tool` as `caller` on an engine over `store` (a counting memory store): the
    /// operations and committed rows it cost, and its stream's events.
    async fn call(
        engine: &Engine,
        store: &CountingStore,
        caller: &Caller,
        id: i64,
        tool: &str,
    ) -> (
        std::collections::BTreeMap<Op, u64>,
        std::collections::BTreeMap<String, u64>,
        durable_mcp_store::StreamRead,
    ) {
        let Value::Object(request) = serde_json::json!({"jsonrpc": "2.0", "id": id,
            "method": "tools/call", "params": {"name": tool, "arguments": {},
            "_meta": {"progressToken": "p"}}})
        else {
            unreachable!()
        };
        store.hook().take();
        store.hook().take_rows();
        let accepted = engine
            .accept(caller, crate::Request::new(Value::from(id), request))
            .await
            .unwrap();
        idle(engine).await;
        let (ops, rows) = (store.hook().take(), store.hook().take_rows());
        let read = store
            .inner()
            .read_after(&accepted.stream, 0, 10)
            .await
            .unwrap();
        (ops, rows, read)
    }

    fn engine_on(store: &Arc<CountingStore>) -> Engine {
        Engine::new(
            store.clone(),
            McpHandler::new(Effects(store.inner().clone())),
            EngineOptions {
                lease: Duration::from_secs(60),
                // Long enough for any handler of these tests to answer first.
                journal_wait: Duration::from_secs(5),
                ..EngineOptions::default()
            },
        )
    }

    fn text(read: &durable_mcp_store::StreamRead) -> String {
        let outcome: Value = serde_json::from_str(&read.events.last().unwrap().data).unwrap();
        outcome
            .pointer("/result/content/0/text")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    }

    /// D6, in the words "journaled before its first effect": a `tools/call` whose handler
    /// answers before any step, question or message costs one commit in all, in both eras:
    /// its stream (with the priming event of a 2025-11-25 session), the alias of its
    /// request id (legacy) and its outcome, closing the stream. No run record is written.
    #[tokio::test]
    async fn d6_a_call_that_ends_before_its_first_effect_commits_once() {
        let store = Arc::new(CountingStore::counting(Arc::new(MemoryStore::new())));
        let engine = engine_on(&store);
        // The first request creates the key ring: not counted.
        engine.state_keys().await.unwrap();
        let legacy = legacy(&engine).await;
        for (caller, events, alias) in [(&modern(), 1, 0), (&legacy, 2, 1)] {
            let (ops, rows, read) = call(&engine, &store, caller, 7, "quick").await;
            assert_eq!(ops.get(&Op::Commit), Some(&1), "{:?}: {ops:?}", caller.era);
            assert_eq!(
                rows,
                [
                    ("append".to_owned(), events),
                    ("close".to_owned(), 1),
                    ("create_stream".to_owned(), 1),
                    ("put_record(Alias)".to_owned(), alias),
                ]
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .collect(),
                "{:?}",
                caller.era
            );
            assert!(
                read.finished && read.events.len() == events as usize,
                "{read:?}"
            );
            assert_eq!(text(&read), "journaled: false");
        }
        assert!(
            store
                .inner()
                .list_records(RecordKind::Run, "", 10)
                .await
                .unwrap()
                .is_empty()
        );
    }

    /// D6: a step, a message to the client, or `Durable::journaled`, before the end brings
    /// the journal entry first: the step runs, the message is committed, and the wait ends,
    /// only once the run is journaled; the outcome then ends the entry.
    #[tokio::test]
    async fn d6_a_step_or_a_message_before_the_end_is_journaled_first() {
        let store = Arc::new(CountingStore::counting(Arc::new(MemoryStore::new())));
        let engine = engine_on(&store);
        engine.state_keys().await.unwrap();
        let legacy = legacy(&engine).await;
        for (id, (caller, tool)) in [
            (&modern(), "step"),
            (&legacy, "step"),
            (&modern(), "progress"),
            (&legacy, "progress"),
            (&modern(), "wait"),
            (&legacy, "wait"),
        ]
        .into_iter()
        .enumerate()
        {
            let (_, rows, read) = call(&engine, &store, caller, id as i64, tool).await;
            assert_eq!(
                rows.get("put_record(Run)"),
                Some(&1),
                "{:?} {tool}: {rows:?}",
                caller.era
            );
            assert_eq!(rows.get("delete_record(Run)"), Some(&1), "{rows:?}");
            assert!(read.finished, "{read:?}");
            if tool == "step" || tool == "wait" {
                assert_eq!(text(&read), "journaled: true", "{:?} {tool}", caller.era);
            } else {
                assert!(
                    read.events
                        .iter()
                        .any(|e| e.data.contains("notifications/progress")),
                    "{read:?}"
                );
            }
            store.hook().take_rows();
        }
        assert!(
            store
                .inner()
                .list_records(RecordKind::Run, "", 10)
                .await
                .unwrap()
                .is_empty()
        );
    }

    /// D6: with no wait, every journaled request is journaled before its handler starts, and
    /// its outcome ends the entry: two commits.
    #[tokio::test]
    async fn without_a_journal_wait_a_quick_call_is_journaled_first() {
        let store = Arc::new(CountingStore::counting(Arc::new(MemoryStore::new())));
        let engine = Engine::new(
            store.clone(),
            McpHandler::new(NoTools),
            EngineOptions {
                lease: Duration::from_secs(60),
                journal_wait: Duration::ZERO,
                ..EngineOptions::default()
            },
        );
        engine.state_keys().await.unwrap();
        let (ops, rows, read) = call(&engine, &store, &modern(), 9, "missing").await;
        assert_eq!(ops.get(&Op::Commit), Some(&2), "{ops:?}");
        assert_eq!(rows.get("put_record(Run)"), Some(&1), "{rows:?}");
        assert!(read.finished, "{read:?}");
    }

    /// Running -> Answered -> Ended for a run that is not journaled: one commit creates the
    /// stream with its outcome and closes it.
    #[tokio::test]
    async fn an_answered_unjournaled_run_commits_once() {
        let store = Arc::new(CountingStore::counting(Arc::new(MemoryStore::new())));
        let engine = Engine::new(
            store.clone(),
            McpHandler::new(NoTools),
            EngineOptions::default(),
        );
        engine.state_keys().await.unwrap();
        store.hook().take();
        let Value::Object(request) =
            serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "ping"})
        else {
            unreachable!()
        };
        let accepted = engine
            .accept(&modern(), crate::Request::new(Value::from(2), request))
            .await
            .unwrap();
        idle(&engine).await;
        assert_eq!(store.hook().writes(), 1);
        let read = store
            .inner()
            .read_after(&accepted.stream, 0, 10)
            .await
            .unwrap();
        assert!(read.finished && read.events.len() == 1, "{read:?}");
    }

    const AT: AtEnd = AtEnd {
        journaled: true,
        cancelled: false,
        lost: false,
        releasing: false,
    };

    #[test]
    fn an_outcome_is_committed_only_uncancelled_and_within_the_lease() {
        assert_eq!(on_outcome(false, None), OnOutcome::Commit);
        assert_eq!(on_outcome(false, Some(true)), OnOutcome::Commit);
        assert_eq!(on_outcome(false, Some(false)), OnOutcome::Fence);
        assert_eq!(
            on_outcome(true, Some(false)),
            OnOutcome::Drop,
            "a cancelled run never answers"
        );
        assert_eq!(on_outcome(true, None), OnOutcome::Drop);
    }

    #[test]
    fn an_unjournaled_run_is_closed_unless_answered() {
        let at = AtEnd {
            journaled: false,
            ..AT
        };
        assert_eq!(ending(&Stop::Answered(Value::Null), at), Ending::Done);
        assert_eq!(
            ending(&Stop::HandlerGone, at),
            Ending::CloseUnanswered {
                cancelled_by_client: false
            }
        );
        let cancelled = AtEnd {
            cancelled: true,
            ..at
        };
        assert_eq!(
            ending(&Stop::Cancelled, cancelled),
            Ending::CloseUnanswered {
                cancelled_by_client: true
            }
        );
        // The pump cancels a run whose commit failed: the client gets an error all the same.
        assert_eq!(
            ending(&Stop::CommitFailed, cancelled),
            Ending::CloseUnanswered {
                cancelled_by_client: false
            }
        );
    }

    #[test]
    fn a_journaled_run_ends_by_its_stop_then_by_what_the_worker_knows() {
        assert_eq!(ending(&Stop::Answered(Value::Null), AT), Ending::Finish);
        assert_eq!(
            ending(
                &Stop::Answered(Value::Null),
                AtEnd {
                    releasing: true,
                    ..AT
                }
            ),
            Ending::Finish,
            "an outcome is final"
        );
        assert_eq!(ending(&Stop::Suspended, AT), Ending::StopHeartbeat);
        let gone = [
            Stop::Cancelled,
            Stop::Fenced,
            Stop::CommitFailed,
            Stop::HandlerGone,
        ];
        for stop in &gone {
            assert_eq!(
                ending(
                    stop,
                    AtEnd {
                        releasing: true,
                        lost: true,
                        cancelled: true,
                        ..AT
                    }
                ),
                Ending::Release {
                    now: true,
                    failed: false
                },
                "{stop:?}"
            );
            assert_eq!(
                ending(
                    stop,
                    AtEnd {
                        lost: true,
                        cancelled: true,
                        ..AT
                    }
                ),
                Ending::Release {
                    now: false,
                    failed: false
                },
                "{stop:?}"
            );
        }
        assert_eq!(
            ending(
                &Stop::Cancelled,
                AtEnd {
                    cancelled: true,
                    ..AT
                }
            ),
            Ending::FinishCancelled
        );
        assert_eq!(
            ending(&Stop::HandlerGone, AT),
            Ending::Release {
                now: false,
                failed: true
            },
            "counted toward max_attempts"
        );
    }
}
