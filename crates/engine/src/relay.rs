//! The relay of a 2025-11-25 `tasks/result` (D10): the task's questions as they come, then
//! its outcome, from the task's own stream (committed events only) to the stream of the
//! request, journaled like a handler's run so that the relay outlives its worker.

use durable_mcp_protocol::jsonrpc::{RequestId, code, error_response};
use durable_mcp_protocol::meta::RELATED_TASK;
use durable_mcp_protocol::tasks::TaskStatus;
use durable_mcp_store::{StoreError, StreamId};
use serde_json::{Value, json};

use crate::EngineError;
use crate::journal::Held;
use crate::records::Relay;
use crate::requests::Requests;

impl Requests {
    /// Relay a 2025-11-25 task's stream (its questions, then its outcome) onto the stream
    /// of a `tasks/result` request, going on after what an earlier attempt relayed.
    /// Returns whether it is done (the response is committed); `false`: stopped (`stop`,
    /// or the lease was lost), to be taken up again by whoever holds the lease next.
    /// Fencing: nothing is committed once the lease may have passed to another worker.
    pub(crate) async fn relay_task_result(
        &self,
        id: &RequestId,
        source: &StreamId,
        target: &StreamId,
        relay: &Relay,
        held: &Held,
        stop: &tokio_util::sync::CancellationToken,
    ) -> Result<bool, EngineError> {
        use futures::StreamExt;
        let related = json!({"taskId": relay.task_id});
        let mut skip = self.relayed_so_far(target).await?;
        let mut events = Box::pin(crate::tail::tail(self.store().clone(), source.clone(), 0));
        loop {
            let event = tokio::select! {
                biased;
                () = stop.cancelled() => return Ok(false),
                () = held.lost.cancelled() => return Ok(false),
                event = events.next() => event,
            };
            let Some(event) = event else { break };
            let event = event?;
            let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(&event.data) else {
                continue;
            };
            if skip > 0 {
                skip -= 1;
                continue;
            }
            if !held.lease_valid() {
                return Ok(false);
            }
            let terminal = message.contains_key("result") || message.contains_key("error");
            if terminal {
                // The task's record has the last word: one cancelled between the outcome's
                // commit and its settling reports cancelled here too (one outcome, D7).
                if let Some((task, _)) = self.tasks().load_task(&relay.task).await?
                    && task.status == TaskStatus::Cancelled
                {
                    break;
                }
                message.insert("id".into(), id.clone());
                if let Some(Value::Object(result)) = message.get_mut("result") {
                    let meta = result.entry("_meta").or_insert_with(|| json!({}));
                    if let Some(meta) = meta.as_object_mut() {
                        meta.insert(RELATED_TASK.into(), related.clone());
                    }
                }
                self.commit(target, &Value::Object(message), true).await?;
                return Ok(true);
            }
            self.commit(target, &Value::Object(message), false).await?;
        }
        // The task's stream ended without an outcome: it was cancelled.
        let status = self
            .tasks()
            .load_task(&relay.task)
            .await?
            .map_or("expired", |(task, _)| task.status.as_str());
        if !held.lease_valid() {
            return Ok(false);
        }
        let response = error_response(
            id.clone(),
            code::INTERNAL_ERROR,
            &format!("the task ended without a result ({status})"),
            None,
        );
        self.commit(target, &response, true).await?;
        Ok(true)
    }

    /// How many messages a `tasks/result` stream already relayed: it holds its priming
    /// event (sequence 1) and then only relayed messages, so the count is its last
    /// sequence number less one, even once retention pruned its start.
    async fn relayed_so_far(&self, target: &StreamId) -> Result<usize, EngineError> {
        let mut after = 0;
        loop {
            let read = match self.store().read_after(target, after, 1024).await {
                Ok(read) => read,
                Err(StoreError::Pruned {
                    oldest_retained, ..
                }) => {
                    after = oldest_retained.saturating_sub(1);
                    continue;
                }
                Err(error) => return Err(error.into()),
            };
            let Some(last) = read.events.last() else {
                return Ok(usize::try_from(after.saturating_sub(1)).unwrap_or(usize::MAX));
            };
            after = last.id.seq;
        }
    }
}
