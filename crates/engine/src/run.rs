//! The request path: the door in ([`Requests::accept`]: a [`Route`] per request, one function
//! per route), starting handlers, and the routing of every message a handler sends while it
//! runs to the door out ([`Requests::commit`], through [`crate::events::Events`]).

use std::sync::Arc;

use durable_mcp_handler::Durable;
use durable_mcp_handler::durable::SEALED_STATE_PREFIX;
use durable_mcp_protocol::jsonrpc::{Message, Rejection, Request, RequestId, to_text};
use durable_mcp_protocol::methods::Method;
use durable_mcp_protocol::{McpVersion, methods};
use durable_mcp_store::{
    BatchOp, EventId, Expect, RecordKind, SessionChange, StoreError, StreamId, now_ms,
};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::EngineError;
use crate::caller::Caller;
use crate::durable::{DurableRun, RunView};
use crate::journal::{Held, Unjournaled};
use crate::notify::ListenSubscription;
use crate::opening::{Accepted, Journaled, NewStream};
use crate::pump::{Deferred, First, Pump, RETRY_AFTER_FAILURE_MS};
use crate::records::{Era, Flavor, RecordError, Relay, RequestFingerprint, RunRecord};
use crate::registry::SessionRun;
use crate::requests::Requests;
use crate::rerun::AlreadySent;
use crate::tail::Follow;
use crate::tasks::{declares_extension, missing_extension};
use durable_mcp_handler::TaskSupport;
use durable_mcp_protocol::jsonrpc::{code, error_response};

/// What a run of a new request starts with besides its request ([`Requests::launch_with`]).
struct Extra<'a> {
    /// A `subscriptions/listen` request's subscription.
    subscription: Option<ListenSubscription>,
    /// Its response stream, if not committed yet: taken by the pump, which creates it with
    /// its first commit; left here if the run could not start.
    opening: &'a mut Option<NewStream>,
    /// The request's timing (metrics on): taken by the pump, which records it with the
    /// outcome; left here if the run could not start.
    operation: &'a mut Option<crate::metrics::Operation>,
    /// A new journaled run whose journal entry is not committed yet.
    deferred: Option<Deferred>,
}

/// What [`Requests::launch`] started.
pub(crate) struct Launched {
    pub cancel: CancellationToken,
    pub close_connection: Option<CancellationToken>,
}

const LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

fn level_rank(level: &str) -> Option<usize> {
    LEVELS.iter().position(|l| *l == level)
}

/// Whether a `notifications/message` at `level` passes a threshold.
fn passes(level: Option<&str>, threshold: &str) -> bool {
    match (level.and_then(level_rank), level_rank(threshold)) {
        (Some(l), Some(t)) => l >= t,
        _ => true,
    }
}

/// Where the door sends a request: [`Requests::route`] classifies it, and one function per
/// route accepts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// A legacy session's `logging/setLevel`, when the server logs: durable-mcp owns the
    /// session's log level (it filters messages itself, on every worker), so it answers
    /// once the level is committed.
    SetLevel,
    /// A `tasks/*` method answered from the task records.
    Tasks(Flavor),
    /// A 2026-07-28 `subscriptions/listen`: the handler's, with its subscription.
    Listen,
    /// A request of a journaled method ([`Method::is_journaled`], D6): the handler's, run
    /// from its journal entry (or as a task).
    Journaled,
    /// Any other request: the handler's, not journaled.
    Plain,
}

/// The design of tasks `caller`'s protocol version has, if any.
fn tasks_flavor(caller: &Caller) -> Option<Flavor> {
    match caller.era {
        Era::Modern => Some(Flavor::Extension),
        Era::Legacy if caller.protocol_version >= McpVersion::V2025_11_25 => Some(Flavor::V2025),
        Era::Legacy => None,
    }
}

impl Requests {
    /// The work of [`crate::Engine::accept`].
    pub(crate) async fn accept(
        &self,
        caller: &Caller,
        request: Request,
    ) -> Result<Accepted, EngineError> {
        let span = crate::traces::Request {
            request: &request,
            session: caller.session_id().map(|s| s.as_str()),
            protocol_version: caller.protocol_version.as_str(),
            header: caller.trace.as_ref(),
        };
        let operation = crate::metrics::Operation::start(&span, |tool| {
            self.handler().tool_input_schema(tool).is_some()
        });
        let context = operation
            .as_ref()
            .and_then(crate::metrics::Operation::context);
        if !request.method().is_journaled() {
            return crate::traces::in_context(context, self.accept_in(caller, request, operation))
                .await;
        }
        // A journaled request commits its run record, leased to this worker, and then
        // starts its handler. A transport whose client went away (its connection closed)
        // drops this future: between those two points that would leave a record this
        // worker holds and nothing runs, until its lease ran out and the worker took its
        // own run over, running the handler's code again. So the journaled request path
        // runs to its end in a task of its own, whoever waits for it.
        let (engine, caller) = (self.clone(), caller.clone());
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let accepting = async move {
            let accepted =
                crate::traces::in_context(context, engine.accept_in(&caller, request, operation))
                    .await;
            if let Err(Ok(accepted)) = sender.send(accepted)
                && caller.era == Era::Modern
                && let Some(cancel) = accepted.cancel
            {
                // Nobody reads the response: a modern request ends with its connection.
                cancel.cancel();
            }
        };
        // Boxed before it is spawned: a spawn moves its future more than once.
        tokio::spawn(tracing::Instrument::in_current_span(Box::pin(accepting)));
        // The task ends without sending only if it panicked (or the runtime stops).
        receiver.await.unwrap_or(Err(EngineError::NoOutcome))
    }

    /// Which route `caller`'s `request` takes.
    fn route(&self, caller: &Caller, request: &Request) -> Route {
        let method = request.method();
        match (caller.era, tasks_flavor(caller), method) {
            (Era::Legacy, _, Method::LoggingSetLevel)
                if self.summary().capabilities.get("logging").is_some() =>
            {
                Route::SetLevel
            }
            (
                _,
                Some(flavor @ Flavor::Extension),
                Method::TasksGet | Method::TasksUpdate | Method::TasksCancel,
            )
            | (
                _,
                Some(flavor @ Flavor::V2025),
                Method::TasksGet | Method::TasksList | Method::TasksCancel | Method::TasksResult,
            ) => Route::Tasks(flavor),
            (Era::Modern, _, Method::SubscriptionsListen) => Route::Listen,
            _ if method.is_journaled() => Route::Journaled,
            _ => Route::Plain,
        }
    }

    /// [`Requests::accept`], in the request's trace context: the session's changes, then the
    /// request's route.
    async fn accept_in(
        &self,
        caller: &Caller,
        request: Request,
        operation: Option<crate::metrics::Operation>,
    ) -> Result<Accepted, EngineError> {
        let mut opening = NewStream::new(self, caller);
        opening.operation = operation;
        if caller.era == Era::Legacy {
            self.apply_session_effects(caller, &request).await?;
        }
        tracing::debug!(stream = %opening.id, method = %request.method(), "request accepted");
        // The routes most requests do not take (tasks, `subscriptions/listen`, a re-sent
        // id) await boxed futures: inline, each would make this request's future, which
        // every request moves and boxes, as large as the largest of them.
        let answer = match self.route(caller, &request) {
            Route::SetLevel => {
                Some(serde_json::json!({"jsonrpc": "2.0", "id": request.id(), "result": {}}))
            }
            Route::Tasks(flavor) => {
                Box::pin(self.tasks_method(caller, flavor, &request, &mut opening)).await?
            }
            Route::Listen => match Box::pin(self.listen_subscription(caller, &request)).await? {
                Ok(subscription) => {
                    return self
                        .start_new(caller, request, opening, None, Some(subscription))
                        .await;
                }
                Err(refusal) => Some(refusal),
            },
            Route::Journaled => return self.accept_journaled(caller, request, opening).await,
            Route::Plain => return self.start_new(caller, request, opening, None, None).await,
        };
        if let Some(response) = answer {
            opening.answer(self, &response).await?;
        }
        Ok(opening.accepted())
    }

    /// A journaled request: a task's; a new run's, journaled with its handler's first effect
    /// (or answered in one commit, [`Requests::start_deferred`]); or one journaled before its
    /// handler starts (a retry that continues a run waiting for input takes that run's id,
    /// and a used request id is checked by its alias). A re-sent id attaches to the run it
    /// started.
    async fn accept_journaled(
        &self,
        caller: &Caller,
        request: Request,
        mut opening: NewStream,
    ) -> Result<Accepted, EngineError> {
        // Which request a session's request id is used for (its alias keeps it): taken
        // before anything of the request is changed (a 2025-11-25 task's `params.task`).
        let fingerprint = caller
            .session_id()
            .is_some()
            .then(|| RequestFingerprint::of(&request));
        let mut request = request;
        let refuse = async |opening: &mut NewStream, refusal: Value| {
            opening.answer(self, &refusal).await?;
            Ok::<_, EngineError>(opening.accepted())
        };
        let task_mode = match tasks_flavor(caller) {
            Some(flavor) if *request.method() == Method::ToolsCall => {
                match self.task_mode(flavor, &mut request) {
                    Ok(mode) => mode,
                    Err(refusal) => return refuse(&mut opening, refusal).await,
                }
            }
            _ => None,
        };
        // A task holds a unit of the principal's task limit while its run lasts here:
        // refused before anything of the request is written.
        let task_permit = match task_mode {
            Some(_) => self
                .limiter()
                .acquire(&caller.principal, crate::limits::Limit::Tasks)?,
            None => None,
        };
        let run_id = match self.continued_run(caller, &mut request).await? {
            Ok(continued) => continued.unwrap_or_else(|| opening.id.to_string()),
            Err(refusal) => return refuse(&mut opening, refusal).await,
        };
        if let Some((flavor, ttl)) = task_mode {
            // A task's request is answered by its create result.
            let operation = opening.operation.take();
            let accepted = Box::pin(self.accept_task(
                caller,
                request,
                opening,
                (flavor, ttl),
                task_permit,
                fingerprint.as_ref(),
            ))
            .await?;
            if let Some(operation) = operation {
                operation.succeeded();
            }
            return Ok(accepted);
        }
        let record = RunRecord::new(self.journal(), caller, request.clone(), &opening.id);
        let mut run = Unjournaled::new(run_id, record);
        if run.run_id == opening.id.as_str() && !self.options().journal_wait.is_zero() {
            // A new run is journaled with its first effect (D6), unless its session used its
            // request id before: a re-send attaches to the run the id started, and another
            // request is refused, both before any handler runs.
            let (deferred, first) = Deferred::new(run, fingerprint.clone());
            // Boxed, as the other routes' large futures are (see `accept_in`).
            if Box::pin(self.claim(caller, &request, &deferred)).await? {
                return Box::pin(self.start_deferred(caller, request, opening, deferred, first))
                    .await;
            }
            run = deferred.into_run();
        }
        match self
            .journal_request(caller, run, &mut opening, fingerprint.as_ref())
            .await?
        {
            Journaled::Held(held) => {
                Box::pin(self.start_new(caller, request, opening, Some(*held), None)).await
            }
            Journaled::Attach(existing, _) => {
                Box::pin(self.attach(caller, request, existing)).await
            }
            Journaled::AlreadyRunning => {
                let refusal = error_response(
                    request.id().clone(),
                    code::INVALID_PARAMS,
                    "this request is already running (a retry with the same requestState)",
                    None,
                );
                refuse(&mut opening, refusal).await
            }
        }
    }

    /// A 2026-07-28 retry of a request that waited for input (a sealed `requestState`): the
    /// run it continues, whose committed steps and answers are replayed, with the state
    /// taken out of the request; `Ok(None)`: not such a retry; `Err`: the refusal of a state
    /// that does not open (D12).
    async fn continued_run(
        &self,
        caller: &Caller,
        request: &mut Request,
    ) -> Result<Result<Option<String>, Value>, EngineError> {
        let sealed = caller.era == Era::Modern
            && request
                .param_str("requestState")
                .is_some_and(|state| state.starts_with(SEALED_STATE_PREFIX));
        let Some(Value::String(state)) = sealed
            .then(|| {
                request
                    .params_mut()
                    .and_then(|params| params.remove("requestState"))
            })
            .flatten()
        else {
            return Ok(Ok(None));
        };
        let keys = self.state_keys().await?;
        match crate::journal::open_run(&keys, &state, &caller.principal, request) {
            Ok(continued) if self.journal().killed(&continued).await? => Ok(Err(error_response(
                request.id().clone(),
                code::ENDED_BY_OPERATOR,
                "the request was killed by an operator: it cannot be continued",
                None,
            ))),
            Ok(continued) => {
                self.journal()
                    .refresh_steps(
                        &continued,
                        Some(now_ms() + 2 * crate::journal::STATE_TTL.as_millis() as u64),
                    )
                    .await?;
                Ok(Ok(Some(continued)))
            }
            Err(message) => Ok(Err(error_response(
                request.id().clone(),
                code::INVALID_PARAMS,
                &message.to_string(),
                None,
            ))),
        }
    }

    /// Start a new request's handler on `opening`'s stream: `held`, its journal entry (the
    /// stream was committed with it); none, and the stream is committed with the handler's
    /// first message (usually its response, closing it): one commit in all. The
    /// transport's tail was registered with the stream's local hub before (see
    /// `Accepted::follow`), so it waits for that commit instead of reading a stream that
    /// does not exist yet.
    async fn start_new(
        &self,
        caller: &Caller,
        request: Request,
        mut opening: NewStream,
        held: Option<Held>,
        subscription: Option<ListenSubscription>,
    ) -> Result<Accepted, EngineError> {
        let mut accepted = opening.accepted();
        let (id, stream) = (request.id().clone(), opening.id.clone());
        let mut operation = opening.operation.take();
        let mut pending = (!opening.is_open()).then_some(opening);
        let extra = Extra {
            subscription,
            opening: &mut pending,
            operation: &mut operation,
            deferred: None,
        };
        match self
            .launch_with(caller.clone(), request, stream.clone(), held, extra)
            .await
        {
            Ok(launched) => {
                accepted.cancel = Some(launched.cancel);
                accepted.close_connection = launched.close_connection;
            }
            Err(mut rejection) => {
                rejection.id = Some(id);
                let response = rejection.to_response();
                match pending.as_mut() {
                    Some(opening) => opening.answer(self, &response).await?,
                    None => self.commit(&stream, &response, true).await.map(drop)?,
                }
                crate::metrics::finish(operation, &response);
            }
        }
        Ok(accepted)
    }

    /// Whether a new run of `request` may start before it is journaled (D6): always without
    /// a session; in a session, if its request id is neither running here nor used before.
    /// The id is then claimed here for `deferred` (a second copy sent at the same time
    /// waits for this one's first commit, then attaches to its run).
    async fn claim(
        &self,
        caller: &Caller,
        request: &Request,
        deferred: &Deferred,
    ) -> Result<bool, EngineError> {
        let Some(session) = caller.session_id() else {
            return Ok(true);
        };
        let id = request.id();
        if let Err(running) = self
            .inner
            .runs
            .claim_session_run(session, id, deferred.session_run())
        {
            if let Some(gate) = running.gate {
                // Its alias is committed once this returns (or never: it was dropped).
                let _ = gate.journaled().await;
            }
            return Ok(false);
        }
        match self.journal().existing_run(session, id).await {
            Ok(None) => Ok(true),
            used => {
                self.inner.runs.remove_session_run(session, id);
                used.map(|_| false)
            }
        }
    }

    /// A deferred run that could not start forgets its session's request id (claimed by
    /// [`Requests::claim`]) before its gate settles, when `deferred` goes.
    fn forget_claim(&self, caller: &Caller, id: &RequestId, deferred: Option<Deferred>) {
        if deferred.is_some()
            && let Some(session) = caller.session_id()
        {
            self.inner.runs.remove_session_run(session, id);
        }
        drop(deferred);
    }

    /// A new journaled request whose journal entry goes with its first effect, or with its
    /// outcome in one commit if the handler ends before any (D6): its handler starts now,
    /// and the request is accepted once that first commit is done.
    async fn start_deferred(
        &self,
        caller: &Caller,
        request: Request,
        mut opening: NewStream,
        deferred: Deferred,
        first: tokio::sync::oneshot::Receiver<Result<First, EngineError>>,
    ) -> Result<Accepted, EngineError> {
        let mut accepted = opening.accepted();
        let (id, stream) = (request.id().clone(), opening.id.clone());
        let mut operation = opening.operation.take();
        let mut pending = Some(opening);
        let extra = Extra {
            subscription: None,
            opening: &mut pending,
            operation: &mut operation,
            deferred: Some(deferred),
        };
        match self
            .launch_with(caller.clone(), request, stream, None, extra)
            .await
        {
            Ok(launched) => {
                accepted.cancel = Some(launched.cancel);
                accepted.close_connection = launched.close_connection;
            }
            Err(mut rejection) => {
                rejection.id = Some(id);
                let response = rejection.to_response();
                if let Some(opening) = pending.as_mut() {
                    opening.answer(self, &response).await?;
                    accepted.priming = opening.accepted().priming;
                }
                crate::metrics::finish(operation, &response);
                return Ok(accepted);
            }
        }
        match first.await {
            Ok(Ok(First::Committed { priming })) => {
                accepted.priming = priming;
                Ok(accepted)
            }
            Ok(Ok(First::Attach(existing, request))) => {
                Box::pin(self.attach(caller, request, existing)).await
            }
            Ok(Err(error)) => Err(error),
            Err(_) => Err(EngineError::RunEnded),
        }
    }

    /// A re-sent request (same session, same JSON-RPC id): its client gets the stream of
    /// the run that id started, from the beginning, and so its one outcome (D6). If the
    /// worker that accepted the original died before journaling it, this request adopts
    /// the run: it is the same request, so it is journaled and started now.
    pub(crate) async fn attach(
        &self,
        caller: &Caller,
        request: Request,
        stream: StreamId,
    ) -> Result<Accepted, EngineError> {
        let id = request.id().clone();
        let attached = Accepted {
            stream: stream.clone(),
            priming: None,
            cancel: None,
            close_connection: None,
            follow: None,
        };
        let run_id = stream.to_string();
        if let Some(record) = self.store().get_record(RecordKind::Run, &run_id).await? {
            // Journaled: running (here or on another worker), or left by a worker that no
            // longer runs it. A run no live worker runs is adopted at once instead of
            // waiting for recovery (see `Requests::adopt`).
            if !self.is_running_here(&run_id)
                && let Some(held) = self.journal().adopt(record).await?
            {
                tracing::info!(%id, %stream, "re-sent request adopted its journaled run");
                Box::pin(self.resume(held)).await?;
            } else {
                tracing::info!(%id, %stream, "re-sent request attached to its run");
            }
            return Ok(attached);
        }
        if self.journal().stream_closed(&stream).await? {
            tracing::info!(%id, %stream, "re-sent request attached to its run");
            return Ok(attached);
        }
        let record = RunRecord::new(self.journal(), caller, request.clone(), &stream);
        let version = match self
            .store()
            .put_record(
                RecordKind::Run,
                &run_id,
                record.encode()?,
                None,
                Expect::Absent,
            )
            .await
        {
            Ok(version) => version,
            Err(StoreError::Conflict { .. }) => return Ok(attached),
            Err(error) => return Err(error.into()),
        };
        tracing::info!(%id, %stream, "re-sent request adopted a run its first worker never journaled");
        let held = Held::start(self.journal(), run_id, record, version);
        if let Err(mut rejection) = self
            .launch(caller.clone(), request, stream.clone(), Some(held))
            .await
        {
            rejection.id = Some(id);
            self.commit(&stream, &rejection.to_response(), true).await?;
        }
        Ok(attached)
    }

    /// Start a request's handler, with a durable context when it is journaled, and pump
    /// its messages into `stream` in the background. Used for new requests and for runs
    /// taken over by recovery.
    pub(crate) async fn launch(
        &self,
        caller: Caller,
        request: Request,
        stream: StreamId,
        held: Option<Held>,
    ) -> Result<Launched, Rejection> {
        self.launch_with(
            caller,
            request,
            stream,
            held,
            Extra {
                subscription: None,
                opening: &mut None,
                operation: &mut None,
                deferred: None,
            },
        )
        .await
    }

    /// [`Requests::launch`] of a run taken over by recovery: with traces on, its server span
    /// is a new trace's, linked to the span of the context stored with the run.
    pub(crate) async fn launch_rerun(
        &self,
        caller: Caller,
        request: Request,
        stream: StreamId,
        held: Held,
    ) -> Result<Launched, Rejection> {
        let id = request.id().clone();
        let span = crate::traces::Request {
            request: &request,
            session: caller.session_id().map(|s| s.as_str()),
            protocol_version: caller.protocol_version.as_str(),
            header: None,
        };
        let span = crate::traces::ServerSpan::rerun(
            &span,
            held.record.trace.as_ref(),
            held.record.attempt,
        );
        let mut operation = crate::metrics::Operation::rerun(span);
        let context = operation
            .as_ref()
            .and_then(crate::metrics::Operation::context);
        let extra = Extra {
            subscription: None,
            opening: &mut None,
            operation: &mut operation,
            deferred: None,
        };
        let launched = crate::traces::in_context(
            context,
            self.launch_with(caller, request, stream, Some(held), extra),
        )
        .await;
        if let (Err(rejection), Some(operation)) = (&launched, operation) {
            operation.finish(
                &Rejection {
                    id: Some(id),
                    ..rejection.clone()
                }
                .to_response(),
            );
        }
        launched
    }

    /// [`Requests::launch`], for a `subscriptions/listen` request that follows tasks.
    async fn launch_with(
        &self,
        caller: Caller,
        request: Request,
        stream: StreamId,
        held: Option<Held>,
        extra: Extra<'_>,
    ) -> Result<Launched, Rejection> {
        let id = request.id().clone();
        let Extra {
            subscription,
            opening,
            operation,
            deferred,
        } = extra;
        // A run whose lease is lost is cancelled here (without ending its stream).
        let cancel = match (&held, &deferred) {
            (Some(held), _) => held.cancelled.child_token(),
            (None, Some(deferred)) => deferred.cancel.clone(),
            (None, None) => CancellationToken::new(),
        };
        let gate = deferred.as_ref().map(|deferred| deferred.gate.clone());
        // Every sealer of the handler's requests uses the store's keys (D9, D12).
        let keys = match self.state_keys().await {
            Ok(keys) => keys,
            Err(error) => {
                if let Some(held) = held {
                    held.finish(self.journal()).await;
                }
                self.forget_claim(&caller, &id, deferred);
                return Err(Rejection {
                    code: code::INTERNAL_ERROR,
                    message: format!("requestState keys unavailable: {error}"),
                    id: Some(id),
                });
            }
        };
        let mut peer = caller.peer(self.store());
        peer.state_keys = Some(keys.clone());
        peer.outbox = Some(self.outbox(&caller, gate.clone()));
        let (detach, detach_requests) = tokio::sync::mpsc::channel(1);
        let view = match (&held, &deferred) {
            (Some(held), _) => Some(RunView::held(held)),
            (None, Some(deferred)) => Some(RunView::unjournaled(&deferred.run)),
            (None, None) => None,
        };
        let durable = view.map(|view| {
            Arc::new(DurableRun::new(
                self,
                view,
                caller.clone(),
                cancel.clone(),
                detach,
                gate,
            ))
        });
        if let Some(durable) = &durable {
            peer.durable = Some(Durable::new(durable.clone()));
        }
        let run = match self
            .handler()
            .start_with_cancel(request.into_message(), &peer, cancel)
        {
            Ok(run) => run,
            Err(rejection) => {
                if let Some(held) = held {
                    held.finish(self.journal()).await;
                }
                self.forget_claim(&caller, &id, deferred);
                return Err(rejection);
            }
        };
        let close = CancellationToken::new();
        let launched = Launched {
            cancel: run.cancel.clone(),
            close_connection: (caller.era == Era::Legacy).then(|| close.clone()),
        };
        let task = held.as_ref().and_then(|h| h.record.task.clone());
        if let Some(session) = caller.session_id()
            && task.is_none()
        {
            self.inner.runs.add_session_run(
                session,
                &id,
                SessionRun {
                    cancel: run.cancel.clone(),
                    gate: deferred.as_ref().map(|deferred| deferred.gate.clone()),
                },
            );
        }
        let registration = match (&held, &deferred) {
            (Some(held), _) => Some(&held.run_id),
            (None, Some(deferred)) => Some(&deferred.run.run_id),
            (None, None) => None,
        }
        .map(|run_id| self.register_journaled(run_id, run.cancel.clone()));
        let engine = self.clone();
        self.inner.runs.started();
        crate::metrics::in_flight(1.0);
        // This worker writes the stream until the pump ends: its local tails need no store.
        let writer = self.hub().writer(&stream);
        let context = operation
            .as_ref()
            .and_then(crate::metrics::Operation::context);
        let pump = Pump {
            run,
            caller,
            id,
            stream,
            opening: opening.take(),
            close_connection: close,
            held,
            durable,
            detach_requests,
            subscription,
            registration,
            keys,
            operation: operation.take(),
            deferred,
        };
        // Boxed before it is spawned: the pump's future is large, and a spawn moves it.
        tokio::spawn(Box::pin(async move {
            crate::traces::in_context(context, engine.clone().pump(pump)).await;
            drop(writer);
            engine.inner.runs.finished();
            crate::metrics::in_flight(-1.0);
        }));
        Ok(launched)
    }

    /// A `tasks/*` request of [`Route::Tasks`]: answered from the task records. `None`:
    /// answered by a relay onto the stream; `Some(response)`: the response. 2026-07-28
    /// clients must have declared the extension.
    async fn tasks_method(
        &self,
        caller: &Caller,
        flavor: Flavor,
        request: &Request,
        opening: &mut NewStream,
    ) -> Result<Option<Value>, EngineError> {
        let id = request.id();
        if flavor == Flavor::Extension && !declares_extension(request.meta()) {
            return Ok(Some(missing_extension(id.clone())));
        }
        if *request.method() == Method::TasksResult {
            return self.task_result(caller, request, opening).await;
        }
        self.tasks().tasks_request(caller, flavor, request).await
    }

    /// Whether a `tools/call` runs as a task, by the tool's declared support and the
    /// client's request; `Err` is the refusal to commit.
    fn task_mode(
        &self,
        flavor: Flavor,
        request: &mut Request,
    ) -> Result<Option<(Flavor, Option<u64>)>, Value> {
        let id = request.id().clone();
        let name = request.name().unwrap_or_default().to_owned();
        let support = self.handler().tool_task_support(&name);
        match flavor {
            Flavor::Extension => {
                let declared = declares_extension(request.meta());
                match support {
                    TaskSupport::Required if !declared => Err(missing_extension(id.clone())),
                    TaskSupport::Optional | TaskSupport::Required if declared => {
                        Ok(Some((flavor, None)))
                    }
                    _ => Ok(None),
                }
            }
            Flavor::V2025 => {
                let task = request.params_mut().and_then(|p| p.remove("task"));
                let requested = task.as_ref().is_some_and(Value::is_object);
                match support {
                    TaskSupport::Forbidden if requested => Err(error_response(
                        id.clone(),
                        code::METHOD_NOT_FOUND,
                        &format!("tool {name} does not support task-augmented calls"),
                        None,
                    )),
                    TaskSupport::Required if !requested => Err(error_response(
                        id.clone(),
                        code::METHOD_NOT_FOUND,
                        &format!("tool {name} must be called as a task (params.task)"),
                        None,
                    )),
                    _ if requested => Ok(Some((
                        flavor,
                        task.as_ref()
                            .and_then(|t| t.get("ttl"))
                            .and_then(Value::as_u64),
                    ))),
                    _ => Ok(None),
                }
            }
        }
    }

    /// Create a task for a `tools/call` and start its run: the task is committed, then the
    /// create result is committed to the request's stream, then the run starts on the
    /// task's own stream (D10).
    pub(crate) async fn start_task(
        &self,
        caller: &Caller,
        request: Request,
        stream: &StreamId,
        (flavor, ttl): (Flavor, Option<u64>),
        task_permit: Option<crate::limits::Permit>,
    ) -> Result<(), EngineError> {
        let id = request.id().clone();
        let store = self.store();
        let run_stream = StreamId::random();
        store
            .create_stream(&run_stream, &caller.stream_owner())
            .await?;
        // Keyed by the request's own stream, which a re-sent request id attaches to; the
        // create result is sent there again by recovery if it never was.
        let run_id = stream.to_string();
        let (task, key) = self
            .tasks()
            .create_task(caller, flavor, ttl, &run_stream, &run_id)
            .await?;
        let mut record = RunRecord::new(self.journal(), caller, request.clone(), &run_stream);
        record.task = Some(key.clone());
        record.task_flavor = Some(flavor);
        record.reply = Some(stream.clone());
        let version = store
            .put_record(
                RecordKind::Run,
                &run_id,
                record.encode()?,
                None,
                Expect::Absent,
            )
            .await?;
        self.commit(
            stream,
            &serde_json::json!({"jsonrpc": "2.0", "id": id, "result": task.created()}),
            true,
        )
        .await?;
        tracing::debug!(task = %task.task_id, "task created");
        let mut held = Held::start(self.journal(), run_id, record, version);
        held.task_permit = task_permit;
        if let Err(mut rejection) = self
            .launch(caller.clone(), request, run_stream.clone(), Some(held))
            .await
        {
            rejection.id = Some(id);
            let response = rejection.to_response();
            self.commit(&run_stream, &response, true).await?;
            self.tasks().settle_task(&key, &response).await?;
        }
        Ok(())
    }

    /// 2025-11-25 `tasks/result`: the task's questions as they come, then its outcome,
    /// relayed from the task's stream (committed events only) to this request's stream.
    async fn task_result(
        &self,
        caller: &Caller,
        request: &Request,
        opening: &mut NewStream,
    ) -> Result<Option<Value>, EngineError> {
        let id = request.id();
        let Some(task_id) = request.param_str("taskId") else {
            return Ok(Some(error_response(
                id.clone(),
                code::INVALID_PARAMS,
                "taskId is required",
                None,
            )));
        };
        let not_found = || crate::tasks::task_not_found(id.clone());
        if task_id.parse::<StreamId>().is_err() {
            return Ok(Some(not_found()));
        }
        let owner = crate::tasks::TaskOwner::of(caller, Flavor::V2025);
        let key = owner.key(task_id);
        let Some((task, _)) = self
            .tasks()
            .load_task(&key)
            .await?
            .filter(|(t, _)| t.flavor == Flavor::V2025 && owner.owns(t))
        else {
            return Ok(Some(not_found()));
        };
        // Journaled like a handler's run, so that the relay outlives this worker: recovery
        // goes on relaying where it stopped (the client resumes with `Last-Event-ID`).
        let mut message = Map::new();
        message.insert("jsonrpc".into(), Value::from("2.0"));
        message.insert("method".into(), Value::from(methods::TASKS_RESULT));
        message.insert("params".into(), serde_json::json!({"taskId": task_id}));
        let relayed = Request::new(id.clone(), message);
        // One commit: the request's stream with its journal entry.
        let mut record = RunRecord::new(self.journal(), caller, relayed, &opening.id);
        record.relay = Some(Relay {
            task: key,
            task_id: task_id.to_owned(),
            source: task.stream.clone(),
        });
        let run_id = opening.id.to_string();
        let mut batch = opening.batch();
        let run_index = batch.len();
        batch.push(BatchOp::PutRecord {
            kind: RecordKind::Run,
            key: run_id.clone(),
            value: record.encode()?,
            expires_at_ms: None,
            expect: Expect::Absent,
        });
        let outcome = self.commit_batch(batch).await?;
        opening.committed(&outcome);
        let version = outcome
            .version(run_index)
            .ok_or(RecordError::MissingVersion {
                kind: RecordKind::Run,
            })?;
        tokio::spawn(
            self.clone()
                .run_relay(Held::start(self.journal(), run_id, record, version)),
        );
        Ok(None)
    }

    /// Run a journaled `tasks/result` relay until the task's outcome is relayed (the run is
    /// finished), or hand it over: at shutdown, when the lease is lost, after a failure.
    pub(crate) async fn run_relay(self, held: Held) {
        let Some(relay) = held.record.relay.clone() else {
            return held.finish(self.journal()).await;
        };
        let (source, target) = (relay.source.clone(), held.record.stream.clone());
        let id = held.record.id();
        // Not counted in flight: a relay waits for its task, which may take long; at
        // shutdown it is handed over at once, at no cost.
        let stop = CancellationToken::new();
        let generation = self.register_journaled(&held.run_id, stop.clone());
        let relayed = self
            .relay_task_result(&id, &source, &target, &relay, &held, &stop)
            .await;
        let run_id = held.run_id.clone();
        match relayed {
            Ok(true) => held.finish(self.journal()).await,
            Ok(false) if self.inner.runs.releasing() => {
                held.release(self.journal(), 0, false).await
            }
            Ok(false) => {
                held.release(self.journal(), now_ms() + RETRY_AFTER_FAILURE_MS, false)
                    .await
            }
            Err(error) => {
                tracing::warn!(%error, task = %relay.task_id, "tasks/result relay failed; it will be retried");
                held.release(self.journal(), now_ms() + RETRY_AFTER_FAILURE_MS, true)
                    .await;
            }
        }
        self.unregister_journaled(&run_id, generation);
    }

    /// Whether this worker is running the journaled run `run_id`.
    pub(crate) fn is_running_here(&self, run_id: &str) -> bool {
        self.inner.runs.is_running(run_id)
    }

    /// Register a journaled run executing here (for recovery, which skips it, and for
    /// `drain`, which stops it with `stop`); returns the registration's generation.
    pub(crate) fn register_journaled(&self, run_id: &str, stop: CancellationToken) -> u64 {
        self.inner.runs.register_journaled(run_id, stop)
    }

    /// Forget a registration, unless the run id was registered again since.
    pub(crate) fn unregister_journaled(&self, run_id: &str, generation: u64) {
        self.inner.runs.unregister_journaled(run_id, generation);
    }

    /// The work of [`crate::Engine::drain`].
    pub(crate) async fn drain(&self, grace: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + grace;
        while self.in_flight() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let running = self.inner.runs.journaled_stops();
        if running.is_empty() {
            return;
        }
        tracing::info!(
            runs = running.len(),
            "grace period over; releasing the leases of unfinished runs"
        );
        self.inner.runs.start_releasing();
        for token in running {
            token.cancel();
        }
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while !self.inner.runs.no_journaled_runs() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// The door out: commit one message of a request's stream. Nothing reaches a socket
    /// except through the store, so every sent event was committed first (D1).
    ///
    /// # Durability
    /// The event reaches this worker's tails of `stream` (in memory, see `tail.rs`) only
    /// once the store returned its id: after its commit (D1).
    pub(crate) async fn commit(
        &self,
        stream: &StreamId,
        message: &Value,
        close: bool,
    ) -> Result<EventId, EngineError> {
        Ok(self.append(stream, to_text(message), close).await?)
    }

    /// The work of [`crate::Engine::tail`].
    pub(crate) fn tail(
        &self,
        stream: StreamId,
        after: u64,
        follow: Option<Follow>,
    ) -> impl futures::Stream<Item = Result<durable_mcp_store::StoredEvent, StoreError>> + Send + 'static
    {
        use crate::tail::Start;
        let follow = match follow.filter(|f| *f.stream() == stream) {
            Some(registered) => Some((registered, Start::Registered)),
            None => self
                .hub()
                .follow_if_written(&stream)
                .map(|late| (late, Start::CatchUp)),
        };
        crate::tail::follow(self.store().clone(), stream, after, follow)
    }

    /// A task's run: watched for a cancellation (`tasks/cancel` on any worker reaches it
    /// through the task record).
    pub(crate) fn watch_task(
        &self,
        key: &str,
        cancel: &CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        self.tasks()
            .watch_task_cancellation(key.to_owned(), cancel.clone())
    }

    /// The handler asked to go on as a task (2026-07-28): commit the task, point the run's
    /// journal entry at the task's stream, answer the request with the create result.
    pub(crate) async fn detach(
        &self,
        caller: &Caller,
        id: &RequestId,
        stream: &StreamId,
        held: &mut Held,
    ) -> Result<(String, StreamId), EngineError> {
        if let Some(key) = held.record.task.clone() {
            return Ok((key, held.record.stream.clone()));
        }
        let task_stream = StreamId::random();
        self.store()
            .create_stream(&task_stream, &caller.stream_owner())
            .await?;
        let (task, key) = self
            .tasks()
            .create_task(caller, Flavor::Extension, None, &task_stream, &held.run_id)
            .await?;
        // The task's steps (and those of its synchronous rounds) live as long as the task.
        self.journal().refresh_steps(&held.run_id, None).await?;
        let (record_key, record_stream) = (key.clone(), task_stream.clone());
        held.update(self.journal(), move |record| {
            record.task = Some(record_key);
            record.task_flavor = Some(Flavor::Extension);
            record.stream = record_stream;
        })
        .await?;
        let mut response =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "result": task.created()});
        self.add_server_info(&mut response);
        self.commit(stream, &response, true).await?;
        tracing::debug!(task = %task.task_id, "request became a task");
        Ok((key, task_stream))
    }

    /// End the stream of a request that has no committed outcome, so that no client waits
    /// on it forever. After a client's cancellation the protocol wants no response; after a
    /// failure (the store refused the outcome, the handler vanished) the client gets an
    /// error. Retried with backoff while the store is unavailable (D15); returns whether the
    /// stream is closed.
    pub(crate) async fn close_unanswered(
        &self,
        stream: &StreamId,
        id: &RequestId,
        cancelled_by_client: bool,
    ) -> bool {
        self.close_unanswered_on(stream, &mut None, id, cancelled_by_client)
            .await
    }

    /// [`Requests::close_unanswered`] of a stream that may not be committed yet (`opening`):
    /// then it is created with its closing event, in one commit.
    pub(crate) async fn close_unanswered_on(
        &self,
        stream: &StreamId,
        opening: &mut Option<NewStream>,
        id: &RequestId,
        cancelled_by_client: bool,
    ) -> bool {
        let data = if cancelled_by_client {
            String::new()
        } else {
            durable_mcp_protocol::jsonrpc::error_response(
                id.clone(),
                durable_mcp_protocol::jsonrpc::code::INTERNAL_ERROR,
                "the request failed before its result could be committed",
                None,
            )
            .to_string()
        };
        self.close_with(stream, opening, data).await
    }

    /// Close `stream` (created with it if `opening` is not committed yet) with the event
    /// `data` (empty: none), retrying while the store is unavailable; whether it is closed.
    pub(crate) async fn close_with(
        &self,
        stream: &StreamId,
        opening: &mut Option<NewStream>,
        data: String,
    ) -> bool {
        let mut delay = std::time::Duration::from_millis(50);
        for _ in 0..10 {
            let closed = match opening.as_mut().filter(|o| !o.is_open()) {
                Some(opening) => opening
                    .commit_first(self, data.clone(), true)
                    .await
                    .map(drop),
                None => self.append(stream, data.clone(), true).await.map(drop),
            };
            match closed {
                Ok(())
                | Err(
                    durable_mcp_store::StoreError::NotFound { .. }
                    | durable_mcp_store::StoreError::StreamClosed { .. },
                ) => return true,
                Err(error) => {
                    tracing::warn!(%error, %stream, "could not close an unanswered request's stream; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(std::time::Duration::from_secs(5));
                }
            }
        }
        tracing::error!(%stream, "gave up closing an unanswered request's stream");
        false
    }

    /// Route one notification of a handler: to the request's `stream`, unless it goes to
    /// the session's standalone stream (list changes, resource updates) or the log level
    /// filters it out. A re-run (`already_sent`) drops the notifications earlier runs
    /// already committed to `stream` (D7, see [`AlreadySent`]).
    pub(crate) async fn route_notification(
        &self,
        caller: &Caller,
        stream: &StreamId,
        method: &str,
        message: Value,
        already_sent: Option<&AlreadySent>,
    ) -> Result<(), EngineError> {
        self.route_notification_into(caller, stream, &mut None, method, message, already_sent)
            .await
    }

    /// [`Requests::route_notification`] to a request stream that may not be committed yet
    /// (`opening`): a notification that goes on it creates it, in one commit.
    pub(crate) async fn route_notification_into(
        &self,
        caller: &Caller,
        stream: &StreamId,
        opening: &mut Option<NewStream>,
        method: &str,
        message: Value,
        already_sent: Option<&AlreadySent>,
    ) -> Result<(), EngineError> {
        let read = Message::of(&message);
        let param = |key: &str| read.and_then(|m| m.param_str(key));
        match (caller.era, method) {
            (Era::Legacy, methods::NOTIFICATION_MESSAGE) => {
                let level = param("level");
                let threshold = caller.session.as_ref().and_then(|s| s.log_level.clone());
                if threshold.is_some_and(|t| !passes(level, &t)) {
                    return Ok(());
                }
            }
            (Era::Modern, methods::NOTIFICATION_MESSAGE) => {
                let level = param("level");
                match &caller.log_level {
                    Some(threshold) if passes(level, threshold) => {}
                    _ => return Ok(()),
                }
            }
            (Era::Legacy, methods::NOTIFICATION_RESOURCES_UPDATED) => {
                let uri = param("uri").unwrap_or_default().to_owned();
                return self.fan_out_resource_update(&uri, &message).await;
            }
            (
                Era::Legacy,
                methods::NOTIFICATION_TOOLS_LIST_CHANGED
                | methods::NOTIFICATION_PROMPTS_LIST_CHANGED
                | methods::NOTIFICATION_RESOURCES_LIST_CHANGED,
            ) => {
                let Some(session) = &caller.session else {
                    return Ok(());
                };
                return self
                    .commit(&session.standalone_stream, &message, false)
                    .await
                    .map(drop);
            }
            _ => {}
        }
        if already_sent.is_some_and(|already| already.suppress(stream, method, &message)) {
            tracing::debug!(%stream, %method, "re-run: not sending a notification the stream already has");
            return Ok(());
        }
        self.commit_first(opening, stream, &message, false)
            .await
            .map(drop)
    }

    /// Commit `message` to `stream`, creating the stream in the same commit if `opening`
    /// holds it uncommitted.
    pub(crate) async fn commit_first(
        &self,
        opening: &mut Option<NewStream>,
        stream: &StreamId,
        message: &Value,
        close: bool,
    ) -> Result<EventId, EngineError> {
        match opening.as_mut().filter(|o| !o.is_open()) {
            Some(opening) => Ok(opening.commit_first(self, to_text(message), close).await?),
            None => self.commit(stream, message, close).await,
        }
    }

    /// Session state that a request changes is committed before its handler runs, so the
    /// change holds on every worker (D4): the log level, resource subscriptions.
    async fn apply_session_effects(
        &self,
        caller: &Caller,
        request: &Request,
    ) -> Result<(), EngineError> {
        let Some(session) = &caller.session else {
            return Ok(());
        };
        let change = match request.method() {
            Method::LoggingSetLevel => request
                .param_str("level")
                .map(|l| SessionChange::SetLogLevel(l.to_owned())),
            Method::ResourcesSubscribe => request
                .param_str("uri")
                .map(|u| SessionChange::Subscribe(u.to_owned())),
            Method::ResourcesUnsubscribe => request
                .param_str("uri")
                .map(|u| SessionChange::Unsubscribe(u.to_owned())),
            _ => None,
        };
        // The index entry first, the session's subscription after it (and the reverse to
        // unsubscribe): a crash between them leaves an extra hint, never a miss.
        if let Some(SessionChange::Subscribe(uri)) = &change {
            self.subscriptions()
                .index(&caller.principal, &session.id, uri)
                .await?;
        }
        if let Some(change) = &change {
            self.store()
                .update_session(&caller.principal, &session.id, change.clone())
                .await?;
        }
        if let Some(SessionChange::Unsubscribe(uri)) = &change {
            self.subscriptions().unindex(&session.id, uri).await?;
        }
        Ok(())
    }

    /// 2026-07-28 results carry `serverInfo` in their `_meta`.
    pub(crate) fn add_server_info(&self, outcome: &mut Value) {
        let Some(result) = outcome.get_mut("result").and_then(Value::as_object_mut) else {
            return;
        };
        let meta = result
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(meta) = meta.as_object_mut() {
            meta.entry(durable_mcp_protocol::meta::SERVER_INFO)
                .or_insert_with(|| self.summary().server_info.clone());
        }
    }

    /// A resource changed: every live session subscribed to `uri` (made on any worker, the
    /// subscriptions are in the store) gets the notification on its standalone stream, read
    /// by its GET stream on whichever worker holds it.
    ///
    /// The sessions are found through the subscription index (`subscriptions.rs`): the
    /// cost grows with the number of subscribers of `uri`, not with the live sessions.
    async fn fan_out_resource_update(&self, uri: &str, message: &Value) -> Result<(), EngineError> {
        for session in self.subscriptions().subscribers(uri).await? {
            match self
                .append(&session.standalone_stream, to_text(message), false)
                .await
            {
                Ok(_) | Err(durable_mcp_store::StoreError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// The work of [`crate::Engine::notify`].
    pub(crate) fn notify(&self, caller: &Caller, message: Map<String, Value>) {
        self.handler().notify(message, &caller.peer(self.store()));
    }

    /// The work of [`crate::Engine::cancel`].
    pub(crate) async fn cancel(
        &self,
        caller: &Caller,
        request_id: &RequestId,
    ) -> Result<(), EngineError> {
        let Some(session) = caller.session_id() else {
            return Ok(());
        };
        let local = self.inner.runs.session_run(session, request_id);
        match local {
            Some(run) => {
                run.cancel.cancel();
                Ok(())
            }
            None => self.journal().cancel_elsewhere(session, request_id).await,
        }
    }

    /// D5: when the session ends on any worker, its streams are removed from the store, and
    /// a handler still running here for it is cancelled: the task this spawns watches the
    /// session's standalone stream (removed only with the session) and cancels `cancel`
    /// once it is gone. The pump spawns it only for a run that lasts longer than
    /// [`SESSION_WATCH_AFTER`](crate::pump::SESSION_WATCH_AFTER): shorter runs make no watch and no task.
    ///
    /// Its own task, not a future the pump polls beside its messages: a store call it
    /// makes may hold a pooled connection, and a future that is not polled while the pump
    /// awaits a commit would hold that connection from the commit (a deadlock on a small pool).
    pub(crate) fn cancel_when_session_ends(
        &self,
        standalone: StreamId,
        cancel: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let store = self.store().clone();
        tokio::spawn(async move {
            use futures::StreamExt;
            let gone = |result: Result<durable_mcp_store::StreamOwner, StoreError>| {
                matches!(result, Err(StoreError::NotFound { .. }))
            };
            let mut wake = match store.watch(&standalone).await {
                Ok(wake) => wake,
                // Gone before the watch began.
                Err(StoreError::NotFound { .. }) => return cancel.cancel(),
                Err(error) => return tracing::debug!(%error, "cannot watch for the session's end"),
            };
            loop {
                if gone(store.stream_owner(&standalone).await) {
                    tracing::debug!(stream = %standalone, "session ended elsewhere; cancelling its request");
                    return cancel.cancel();
                }
                if wake.next().await.is_none() {
                    // The watch ended: the stream is gone, or the store closed. One last look.
                    if gone(store.stream_owner(&standalone).await) {
                        cancel.cancel();
                    }
                    return;
                }
            }
        })
    }

    /// The work of [`crate::Engine::in_flight`].
    pub(crate) fn in_flight(&self) -> usize {
        self.inner.runs.in_flight()
    }

    /// The work of [`crate::Engine::rejection_response`].
    pub(crate) fn rejection_response(id: RequestId, rejection: Rejection) -> Value {
        Rejection {
            id: Some(id),
            ..rejection
        }
        .to_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_levels_are_ordered() {
        assert!(passes(Some("error"), "warning"));
        assert!(!passes(Some("debug"), "info"));
        assert!(passes(Some("info"), "info"));
    }
}
