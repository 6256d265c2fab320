//! Recovery (D7), the request path's half: the journal hands over the runs it claimed
//! ([`Requests::claim`]: our own from before a restart, or anyone's whose lease ran out), and
//! this decides what each needs: to run again on its stream, to go on relaying a task's
//! result, to be parked for an operator (it failed too often), or only to be cleaned up
//! (its outcome is committed, its session or task ended, it was cancelled).

use std::sync::Arc;
use std::time::Duration;

use durable_mcp_protocol::jsonrpc::RequestId;
use durable_mcp_protocol::tasks::TaskStatus;
use durable_mcp_store::{StoreError, StreamId, now_ms};
use serde_json::json;

use crate::EngineError;
use crate::caller::Caller;
use crate::journal::Held;
use crate::records::{ParkReason, Parked, RunRecord};
use crate::requests::Requests;
use crate::rerun::AlreadySent;

/// What a taken-over run needs.
enum Resume {
    /// Run it again, for this caller, on this stream, which already holds these
    /// notifications.
    Launch(Box<Caller>, RequestId, StreamId, AlreadySent),
    /// Go on relaying a task's result (a journaled `tasks/result`).
    Relay,
    /// Park it for an operator: it failed too often.
    Park(Parked),
    /// Nothing more than cleaning up.
    Done,
}

impl Requests {
    /// The work of [`crate::Engine::recover`].
    pub(crate) async fn recover(&self) -> Result<usize, EngineError> {
        let mut resumed = 0;
        let mut parked = 0;
        for record in self.journal().entries().await? {
            if self.is_running_here(&record.key) {
                continue;
            }
            // Decoded once here; an entry that does not decode is removed by `claim`.
            let claim = match RunRecord::decode(&record.key, &record.value) {
                Ok(run) if run.parked.is_some() => {
                    parked += 1;
                    match self.client_gone(&record.key, &run).await {
                        Ok(true) => self.journal().claim_decoded(record, run).await,
                        Ok(false) => continue,
                        Err(error) => Err(error),
                    }
                }
                Ok(run) => self.journal().claim_decoded(record, run).await,
                Err(_) => self.journal().claim(record).await,
            };
            let claimed = match claim {
                Ok(Some(held)) => self.resume(held).await,
                Ok(None) => Ok(false),
                Err(error) => Err(error),
            };
            match claimed {
                Ok(true) => resumed += 1,
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(%error, "could not recover a run; retrying at the next pass")
                }
            }
        }
        crate::metrics::parked_now(parked);
        Ok(resumed)
    }

    /// Whether the client of parked run `run_id` is gone: it cancelled the request, or its
    /// task or session ended. Such a run is cleaned up as any cancelled one.
    async fn client_gone(&self, run_id: &str, run: &RunRecord) -> Result<bool, EngineError> {
        if self.journal().cancelled_elsewhere(run_id).await? {
            return Ok(true);
        }
        if let Some(task) = &run.task {
            return Ok(self
                .tasks()
                .load_task(task)
                .await?
                .is_none_or(|(task, _)| task.status.is_terminal()));
        }
        match &run.session {
            Some(session) => match self.store().load_session(&run.principal, session).await {
                Ok(_) => Ok(false),
                Err(StoreError::NotFound { .. }) => Ok(true),
                Err(error) => Err(error.into()),
            },
            None => Ok(false),
        }
    }

    /// Run a taken-over request again on its original stream.
    pub(crate) async fn resume(&self, mut held: Held) -> Result<bool, EngineError> {
        match self.try_resume(&held).await {
            Ok(Resume::Launch(caller, id, stream, already_sent)) => {
                let request = held.record.request.clone();
                held.already_sent = Some(Arc::new(already_sent));
                crate::metrics::recovered("rerun");
                if let Err(mut rejection) = self
                    .launch_rerun(*caller, request, stream.clone(), held)
                    .await
                {
                    rejection.id = Some(id);
                    self.commit(&stream, &rejection.to_response(), true).await?;
                }
                Ok(true)
            }
            Ok(Resume::Relay) => {
                crate::metrics::recovered("relay");
                tokio::spawn(self.clone().run_relay(held));
                Ok(true)
            }
            Ok(Resume::Park(parked)) => {
                held.park(self.journal(), parked).await;
                Ok(false)
            }
            Ok(Resume::Done) => {
                held.finish(self.journal()).await;
                Ok(false)
            }
            Err(error) => {
                // Try again later (here or elsewhere): a store blip must not strand the run.
                held.release(self.journal(), now_ms() + 1_000, false).await;
                Err(error)
            }
        }
    }

    /// Decide what a taken-over run needs: to be run again, to be parked (it failed too
    /// often), or only to be cleaned up (its outcome is committed, its session or task
    /// ended, it was cancelled).
    async fn try_resume(&self, held: &Held) -> Result<Resume, EngineError> {
        let record = &held.record;
        let stream = record.stream.clone();
        let id = record.id();
        // Outcome already committed (the owner died between the commit and the clean-up)?
        if self.journal().stream_closed(&stream).await? {
            if let Some(task) = &record.task
                && let Some(outcome) = self.journal().last_message(&stream).await?
            {
                self.tasks().settle_task(task, &outcome).await?;
            }
            return Ok(Resume::Done);
        }
        if record.relay.is_some() {
            if record.failures >= self.options().max_attempts {
                return self.closed_or_retry(&stream, &id).await;
            }
            return Ok(Resume::Relay);
        }
        // A task whose worker died before its create result was committed: commit it now,
        // so that its client (or a re-send of its request) gets it.
        if let (Some(reply), Some(task)) = (&record.reply, &record.task)
            && !self.journal().stream_closed(reply).await?
            && let Some((task, _)) = self.tasks().load_task(task).await?
        {
            let created = json!({"jsonrpc": "2.0", "id": id, "result": task.created()});
            match self.commit(reply, &created, true).await {
                Ok(_) | Err(EngineError::Store(StoreError::StreamClosed { .. })) => {}
                Err(error) => return Err(error),
            }
        }
        let cancelled = self.journal().cancelled_elsewhere(&held.run_id).await?;
        let task_ended = match &record.task {
            Some(task) => self
                .tasks()
                .load_task(task)
                .await?
                .is_none_or(|(t, _)| t.status.is_terminal()),
            None => false,
        };
        if cancelled || task_ended {
            let task = record.task.as_deref().filter(|_| !task_ended);
            let closed = self.close_cancelled(&held.run_id, &stream, &id, task).await;
            return done_once(closed, &stream);
        }
        let principal = record.principal.clone();
        let session = match &record.session {
            Some(session) => match self.store().load_session(&principal, session).await {
                Ok(session) => Some(session),
                Err(StoreError::NotFound { .. }) => {
                    if let Some(task) = &record.task {
                        self.tasks()
                            .end_task(task, TaskStatus::Cancelled, "The session ended.")
                            .await?;
                    }
                    return Ok(Resume::Done);
                }
                Err(error) => return Err(error.into()),
            },
            None => None,
        };
        if record.stateless() {
            // A stateless request's client is gone with its connection: nobody could
            // read a re-run's outcome, so the request ends with an error (its steps stay:
            // a retry with its sealed state continues them).
            return self.closed_or_retry(&stream, &id).await;
        }
        if let Some(parked) = &record.parked {
            // Claimed to be cleaned up, but its client came back in between: kept.
            return Ok(Resume::Park(parked.clone()));
        }
        if record.failures >= self.options().max_attempts {
            // Kept for an operator, its steps with it: its client waits for the outcome of
            // a retry after a fix (or an operator's purge).
            return Ok(Resume::Park(Parked {
                reason: ParkReason::TooManyFailures,
                error: format!(
                    "the run ended without an outcome {} times (its worker stopped, its handler panicked, or the store failed under it)",
                    record.failures
                ),
                at_ms: now_ms(),
            }));
        }
        // The re-run runs as the principal recorded with it; no token (nor its claims) is
        // recorded, so the handler sees the principal alone.
        let auth = durable_mcp_handler::AuthInfo {
            recovered: true,
            ..durable_mcp_handler::AuthInfo::principal_only(principal.as_str())
        };
        let caller = Caller {
            auth: Some(Arc::new(auth)),
            principal,
            era: record.era,
            session: session.map(std::sync::Arc::new),
            protocol_version: record.protocol_version,
            log_level: record.log_level.clone(),
            trace: None,
            http: record
                .http
                .as_ref()
                .and_then(crate::records::StoredHead::parts)
                .map(std::sync::Arc::new),
        };
        // Read once, here: the re-run's notifications are then checked in memory.
        let already_sent = AlreadySent::read(self.store().as_ref(), &stream).await?;
        Ok(Resume::Launch(Box::new(caller), id, stream, already_sent))
    }

    /// Close a run's stream with the error of a run that failed; if the store does not let
    /// us, the run is released and a later recovery pass tries again (the client is never
    /// left waiting).
    async fn closed_or_retry(
        &self,
        stream: &StreamId,
        id: &RequestId,
    ) -> Result<Resume, EngineError> {
        done_once(self.close_unanswered(stream, id, false).await, stream)
    }

    /// The work of [`crate::Engine::spawn_recovery`].
    pub(crate) fn spawn_recovery(&self) -> tokio::task::JoinHandle<()> {
        let engine = self.clone();
        tokio::spawn(async move {
            let mut ticker =
                tokio::time::interval((engine.options().lease / 2).min(Duration::from_secs(1)));
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                match engine.recover().await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(resumed = n, "recovered runs"),
                    Err(error) => tracing::warn!(%error, "recovery failed; retrying"),
                }
            }
        })
    }
}

/// A run whose stream was closed is done; one whose stream could not be closed is tried
/// again by a later recovery pass.
fn done_once(closed: bool, stream: &StreamId) -> Result<Resume, EngineError> {
    if closed {
        Ok(Resume::Done)
    } else {
        Err(EngineError::StreamNotClosed(stream.clone()))
    }
}
