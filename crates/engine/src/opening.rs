//! The first commit of the door in ([`crate::requests::Requests::accept`]): a request's response stream
//! before it is committed ([`NewStream`]) goes into the request's first commit, together
//! with what that commit holds besides (the response of a request the engine answers
//! itself; the alias and run record of a journaled one, [`crate::requests::Requests::journal_request`]), so
//! that a request pays one commit where it used to pay several.

use durable_mcp_protocol::jsonrpc::{Rejection, Request, RequestId, code, to_text};
use durable_mcp_store::{
    BatchOp, BatchOutcome, EventId, Expect, RecordKind, SessionId, StoreError, StreamId,
    StreamOwner, WriteBatch, now_ms,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::EngineError;
use crate::caller::Caller;
use crate::journal::{Held, MARK_TTL_MS, Unjournaled};
use crate::records::{AliasRecord, Flavor, RecordError, RequestFingerprint, key};
use crate::requests::Requests;
use crate::tail::Follow;

/// A request that was accepted: its response stream exists and its handler runs.
#[derive(Debug, Clone)]
pub struct Accepted {
    /// The response stream.
    pub stream: StreamId,
    /// The priming event, for streams that have one.
    pub priming: Option<EventId>,
    /// Cancels the handler (absent when the request was refused before it ran).
    pub cancel: Option<CancellationToken>,
    /// Fires when the handler asks to close the connection (not the stream) so that the
    /// client resumes with `Last-Event-ID` (legacy era only).
    pub close_connection: Option<CancellationToken>,
    /// The transport's tail of `stream`, registered before its first event was committed:
    /// pass it to [`Engine::tail`](crate::Engine::tail) to get what this worker commits from memory.
    pub follow: Option<Follow>,
}

/// The response stream of a request being accepted: created by the first commit of the
/// request ([`NewStream::batch`], then [`NewStream::committed`]), or on its own when
/// nothing else is to be committed with it ([`NewStream::open`]).
///
/// # Durability
/// Nothing names the stream to a client before it is committed: [`NewStream::accepted`]
/// is only handed to the transport after the commit that created it (D1).
pub(crate) struct NewStream {
    /// The stream's id.
    pub id: StreamId,
    owner: StreamOwner,
    primes: bool,
    /// Once committed: the priming event, for streams that have one.
    opened: Option<Option<EventId>>,
    /// The transport's tail of the stream, registered before anything is committed to it,
    /// so that it gets every event from memory (see `tail.rs`); taken by
    /// [`NewStream::accepted`].
    follow: Option<Follow>,
    /// The request's timing (metrics on): recorded by [`NewStream::answer`] when the engine
    /// answers the request itself, or taken by the request's run.
    pub operation: Option<crate::metrics::Operation>,
}

impl NewStream {
    /// The response stream of a request from `caller` (with a priming event where its
    /// version has one).
    pub fn new(engine: &Requests, caller: &Caller) -> Self {
        let id = StreamId::random();
        let follow = Some(engine.hub().follow(&id));
        Self {
            id,
            owner: caller.stream_owner(),
            primes: caller.primes_streams(),
            opened: None,
            follow,
            operation: None,
        }
    }

    /// The ops that create the stream (and append its priming event), first in the batch;
    /// an empty batch once it is committed. Ops added after them see the stream.
    pub fn batch(&self) -> WriteBatch {
        if self.opened.is_some() {
            return WriteBatch::new();
        }
        let batch = WriteBatch::new().create_stream(self.id.clone(), self.owner.clone());
        if self.primes {
            batch.append(self.id.clone(), String::new())
        } else {
            batch
        }
    }

    /// A batch that began with [`NewStream::batch`] was committed.
    pub fn committed(&mut self, outcome: &BatchOutcome) {
        if self.opened.is_none() {
            // The priming event is op 1, right after the creation.
            self.opened = Some(if self.primes {
                outcome.event(1).cloned()
            } else {
                None
            });
        }
    }

    /// Commit the stream (and its priming event) on its own, if it is not committed yet:
    /// something else (a handler, a task) writes to it next.
    pub async fn open(&mut self, engine: &Requests) -> Result<(), EngineError> {
        if self.opened.is_none() {
            let outcome = engine.commit_batch(self.batch()).await?;
            self.committed(&outcome);
        }
        Ok(())
    }

    /// Commit `response` as the stream's last event: with the stream's creation in one
    /// commit when it is not committed yet.
    pub async fn answer(&mut self, engine: &Requests, response: &Value) -> Result<(), EngineError> {
        self.commit_first(engine, to_text(response), true).await?;
        crate::metrics::finish(self.operation.take(), response);
        Ok(())
    }

    /// Whether the stream is committed.
    pub fn is_open(&self) -> bool {
        self.opened.is_some()
    }

    /// Commit `data` to the stream (closing it if `close`): with the stream's creation
    /// (and priming event) in one commit when it is not committed yet.
    pub async fn commit_first(
        &mut self,
        engine: &Requests,
        data: String,
        close: bool,
    ) -> Result<EventId, StoreError> {
        if self.opened.is_some() {
            return engine.append(&self.id, data, close).await;
        }
        let mut batch = self.batch().append(self.id.clone(), data);
        let index = batch.len() - 1;
        if close {
            batch = batch.close(self.id.clone());
        }
        let outcome = engine.commit_batch(batch).await?;
        self.committed(&outcome);
        outcome
            .event(index)
            .cloned()
            .ok_or_else(|| StoreError::Corrupt("a committed batch without its event's id".into()))
    }

    /// What the transport gets: the stream, its priming event, and its tail's registration
    /// (no handler yet).
    pub fn accepted(&mut self) -> Accepted {
        Accepted {
            stream: self.id.clone(),
            priming: self.opened.clone().flatten(),
            cancel: None,
            close_connection: None,
            follow: self.follow.take(),
        }
    }
}

/// What journaling a request came to ([`Requests::journal_request`]).
pub(crate) enum Journaled {
    /// The run is journaled and held by this worker: start its handler.
    Held(Box<Held>),
    /// The request id was re-sent: the run it started, by its stream, and the request.
    Attach(StreamId, Request),
    /// A continued run (a stateless retry with the same `requestState`) runs already.
    AlreadyRunning,
}

/// What the one commit of a run that ended before its first effect came to
/// ([`Requests::commit_answered`]).
pub(crate) enum Answered {
    /// Its stream, alias and outcome are committed.
    Committed,
    /// The request id was re-sent, and the run it started answers: the outcome is dropped.
    Attach(StreamId, Request),
}

/// The alias of a session's request id, naming the stream of the run it started.
fn alias_op(key: String, value: String) -> BatchOp {
    BatchOp::PutRecord {
        kind: RecordKind::Alias,
        key,
        value,
        expires_at_ms: Some(now_ms() + MARK_TTL_MS),
        expect: Expect::Absent,
    }
}

impl Requests {
    /// Journal a request in the commit that creates its response stream: the stream (and
    /// its priming event), the alias of a session's request id (`Expect::Absent`) and the
    /// run record (`Expect::Absent`), one [`durable_mcp_store::WriteBatch`] (D6).
    ///
    /// A conflict on the alias is a used request id: nothing of the batch was written. A
    /// re-send of the request the id started (`fingerprint`, see [`RequestFingerprint`])
    /// attaches to its run; another request is refused ([`reused_id`]). A conflict on the
    /// run record is a continued run (a stateless retry) that already runs.
    pub(crate) async fn journal_request(
        &self,
        caller: &Caller,
        mut run: Unjournaled,
        opening: &mut NewStream,
        fingerprint: Option<&RequestFingerprint>,
    ) -> Result<Journaled, EngineError> {
        let value = AliasRecord {
            stream: opening.id.clone(),
            request: fingerprint.cloned(),
        }
        .encode()?;
        let record = run.record_now(self.journal()).encode()?;
        let id = run.record.request.id();
        let mut alias = caller.session_id().map(|session| key::alias(session, id));
        loop {
            let mut batch = opening.batch();
            let alias_index = alias.as_ref().map(|key| {
                let index = batch.len();
                batch.push(alias_op(key.clone(), value.clone()));
                index
            });
            let run_index = batch.len();
            batch.push(BatchOp::PutRecord {
                kind: RecordKind::Run,
                key: run.run_id.clone(),
                value: record.clone(),
                expires_at_ms: None,
                expect: Expect::Absent,
            });
            let error = match self.commit_batch(batch).await {
                Ok(outcome) => {
                    opening.committed(&outcome);
                    let version =
                        outcome
                            .version(run_index)
                            .ok_or(RecordError::MissingVersion {
                                kind: RecordKind::Run,
                            })?;
                    return Ok(Journaled::Held(Box::new(
                        run.start(self.journal(), version),
                    )));
                }
                Err(error) => error,
            };
            let conflict_at = match (&error, error.refusal()) {
                (StoreError::BatchOp { index, .. }, StoreError::Conflict { .. }) => *index,
                _ => return Err(error.into()),
            };
            if Some(conflict_at) == alias_index {
                // The same request id, re-sent: the run it started answers it.
                if let Some(session) = caller.session_id()
                    && let Some(existing) = self.taken(session, id, fingerprint).await?
                {
                    return Ok(Journaled::Attach(existing, run.record.request));
                }
                // The alias expired in between: journal the request without one.
                alias = None;
                continue;
            }
            return Ok(Journaled::AlreadyRunning);
        }
    }

    /// The one commit of a new run whose handler answered before its first effect (D6): its
    /// stream (and priming event), the alias of a session's request id and the outcome,
    /// closing the stream. No run record: the run is over before anything of it was
    /// journaled, and a crash before this commit is, to every client, a crash before the
    /// request came (a re-send runs it again).
    ///
    /// A conflict on the alias is handled as [`Requests::journal_request`] does; a re-send
    /// attaches to the run the id started, and this outcome is dropped.
    pub(crate) async fn commit_answered(
        &self,
        caller: &Caller,
        run: Unjournaled,
        opening: &mut NewStream,
        fingerprint: Option<&RequestFingerprint>,
        outcome: &Value,
    ) -> Result<Answered, EngineError> {
        let id = run.record.request.id();
        let mut alias = match caller.session_id() {
            Some(session) => Some((
                key::alias(session, id),
                AliasRecord {
                    stream: opening.id.clone(),
                    request: fingerprint.cloned(),
                }
                .encode()?,
            )),
            None => None,
        };
        let data = to_text(outcome);
        loop {
            let mut batch = opening.batch();
            let alias_index = alias.as_ref().map(|(key, value)| {
                let index = batch.len();
                batch.push(alias_op(key.clone(), value.clone()));
                index
            });
            let batch = batch
                .append(opening.id.clone(), data.clone())
                .close(opening.id.clone());
            let error = match self.commit_batch(batch).await {
                Ok(committed) => {
                    opening.committed(&committed);
                    return Ok(Answered::Committed);
                }
                Err(error) => error,
            };
            match (&error, error.refusal()) {
                (StoreError::BatchOp { index, .. }, StoreError::Conflict { .. })
                    if Some(*index) == alias_index => {}
                _ => return Err(error.into()),
            }
            if let Some(session) = caller.session_id()
                && let Some(existing) = self.taken(session, id, fingerprint).await?
            {
                return Ok(Answered::Attach(existing, run.record.request));
            }
            alias = None;
        }
    }

    /// A `tools/call` that runs as a task (D10): its request stream, then the alias of the
    /// session's request id (with the request's `fingerprint`, as [`Requests::journal_request`]
    /// writes it), then the task and its run ([`Requests::start_task`]).
    #[allow(clippy::too_many_arguments)] // one call site, `Requests::accept`'s task branch
    pub(crate) async fn accept_task(
        &self,
        caller: &Caller,
        request: Request,
        mut opening: NewStream,
        (flavor, ttl): (Flavor, Option<u64>),
        task_permit: Option<crate::limits::Permit>,
        fingerprint: Option<&RequestFingerprint>,
    ) -> Result<Accepted, EngineError> {
        opening.open(self).await?;
        let (id, stream) = (request.id().clone(), opening.id.clone());
        if let Some(session) = caller.session_id() {
            // The alias first: a crash after it leaves an alias without a journal entry,
            // which a re-sent request adopts (see `attach`).
            let expires = now_ms() + MARK_TTL_MS;
            let value = AliasRecord {
                stream: stream.clone(),
                request: fingerprint.cloned(),
            }
            .encode()?;
            match self
                .store()
                .put_record(
                    RecordKind::Alias,
                    &key::alias(session, &id),
                    value,
                    Some(expires),
                    Expect::Absent,
                )
                .await
            {
                Ok(_) => {}
                Err(StoreError::Conflict { .. }) => {
                    // The request id is used (a re-send, maybe concurrent): the request it
                    // started runs, and this stream ends unused, unless the alias expired in
                    // between (then this request goes on).
                    let taken = self.taken(session, &id, fingerprint).await;
                    if !matches!(taken, Ok(None)) {
                        let _ = self.close_unanswered(&stream, &id, true).await;
                    }
                    if let Some(existing) = taken? {
                        return self.attach(caller, request, existing).await;
                    }
                }
                Err(error) => return Err(error.into()),
            }
        }
        self.start_task(caller, request, &stream, (flavor, ttl), task_permit)
            .await?;
        Ok(opening.accepted())
    }

    /// The run a used request id of `session` started, for a request with `fingerprint`:
    /// `None` if the id names no run (any more), its stream if the request is a re-send of
    /// the one that started it (D6), and [`reused_id`] if it is another request.
    async fn taken(
        &self,
        session: &SessionId,
        id: &RequestId,
        fingerprint: Option<&RequestFingerprint>,
    ) -> Result<Option<StreamId>, EngineError> {
        let Some(alias) = self.journal().existing_run(session, id).await? else {
            return Ok(None);
        };
        if fingerprint.is_none_or(|fingerprint| alias.started_by(fingerprint)) {
            return Ok(Some(alias.stream));
        }
        tracing::info!(%id, stream = %alias.stream, "a used request id came with another request: refused");
        Err(reused_id(id))
    }
}

/// The refusal of a request under a request id its session already used for another
/// request: the client's error (-32600), never the other request's answer.
fn reused_id(id: &RequestId) -> EngineError {
    let message = format!("request id {id} was already used in this session by another request");
    EngineError::Rejected(Rejection {
        code: code::INVALID_REQUEST,
        message,
        id: Some(id.clone()),
    })
}
