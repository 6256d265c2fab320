//! A request's response stream before it is committed ([`NewStream`]): the stream and its
//! priming event go into the request's first commit, together with what that commit holds
//! besides (the response of a request the engine answers itself, the alias and run record
//! of a journaled one), so that a request pays one commit where it used to pay several.

use durable_mcp_store::{BatchOutcome, EventId, StreamId, StreamOwner, WriteBatch};
use serde_json::Value;

use crate::{Accepted, Caller, Engine, EngineError};

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
}

impl NewStream {
    /// The response stream of a request from `caller` (with a priming event where its
    /// version has one).
    pub fn new(caller: &Caller) -> Self {
        Self { id: StreamId::random(), owner: caller.stream_owner(), primes: caller.primes_streams(), opened: None }
    }

    /// The ops that create the stream (and append its priming event), first in the batch;
    /// an empty batch once it is committed. Ops added after them see the stream.
    pub fn batch(&self) -> WriteBatch {
        if self.opened.is_some() {
            return WriteBatch::new();
        }
        let batch = WriteBatch::new().create_stream(self.id.clone(), self.owner.clone());
        if self.primes { batch.append(self.id.clone(), String::new()) } else { batch }
    }

    /// A batch that began with [`NewStream::batch`] was committed.
    pub fn committed(&mut self, outcome: &BatchOutcome) {
        if self.opened.is_none() {
            // The priming event is op 1, right after the creation.
            self.opened = Some(if self.primes { outcome.event(1).cloned() } else { None });
        }
    }

    /// Commit the stream (and its priming event) on its own, if it is not committed yet:
    /// something else (a handler, a task) writes to it next.
    pub async fn open(&mut self, engine: &Engine) -> Result<(), EngineError> {
        if self.opened.is_none() {
            let outcome = engine.store().commit(self.batch()).await?;
            self.committed(&outcome);
        }
        Ok(())
    }

    /// Commit `response` as the stream's last event: with the stream's creation in one
    /// commit when it is not committed yet.
    pub async fn answer(&mut self, engine: &Engine, response: &Value) -> Result<(), EngineError> {
        if self.opened.is_some() {
            return engine.commit(&self.id, response, true).await.map(drop);
        }
        let batch = self.batch().append(self.id.clone(), response.to_string()).close(self.id.clone());
        let outcome = engine.store().commit(batch).await?;
        self.committed(&outcome);
        Ok(())
    }

    /// What the transport gets: the stream and its priming event (no handler yet).
    pub fn accepted(&self) -> Accepted {
        Accepted { stream: self.id.clone(), priming: self.opened.clone().flatten(), cancel: None, close_connection: None }
    }
}
