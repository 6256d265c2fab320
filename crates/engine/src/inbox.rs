//! A run's inbox: where the client's answers to the handler's own requests (sampling,
//! elicitation, roots, ping) are committed, by whichever worker receives the POST, and from
//! where the run's worker feeds them to the waiting handler.
//!
//! The inbox is an ordinary stream of the store, owned by the request's principal and
//! session, so the contract's guarantees carry over: an answer is committed before the POST
//! that carries it is acknowledged, and it reaches the handler from any worker (the tail
//! follows the store's wake-ups). The id the client sees for a server request is
//! `<inbox stream id>-<n>`, so any worker can find the inbox from the id alone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use durable_mcp_protocol::jsonrpc::RequestId;
use durable_mcp_store::{StoreError, StreamId};
use futures::StreamExt;
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::EngineError;
use crate::caller::Caller;
use crate::records::key;
use crate::requests::Requests;
use crate::sync::lock;

pub(crate) struct Inbox {
    stream: StreamId,
    next: u64,
    originals: Arc<Mutex<HashMap<String, RequestId>>>,
    forwarder: JoinHandle<()>,
}

impl Inbox {
    /// Create the inbox (committed) and start feeding its answers to `replies`.
    pub(crate) async fn open(
        engine: &Requests,
        caller: &Caller,
        replies: mpsc::Sender<Value>,
    ) -> Result<Self, EngineError> {
        let stream = StreamId::random();
        engine
            .store()
            .create_stream(&stream, &caller.stream_owner())
            .await?;
        let originals: Arc<Mutex<HashMap<String, RequestId>>> = Arc::default();
        let map = originals.clone();
        let store = engine.store().clone();
        let inbox = stream.clone();
        let forwarder = tokio::spawn(async move {
            // A store error restarts the tail where it stopped: a transient outage delays
            // answers, never loses them (D15).
            let mut after = 0;
            loop {
                let mut answers = Box::pin(crate::tail::tail(store.clone(), inbox.clone(), after));
                while let Some(next) = answers.next().await {
                    let event = match next {
                        Ok(event) => event,
                        Err(StoreError::NotFound { .. }) => return,
                        Err(error) => {
                            tracing::warn!(%error, %inbox, "inbox tail failed; resuming");
                            break;
                        }
                    };
                    after = event.id.seq;
                    let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(&event.data)
                    else {
                        continue;
                    };
                    let wire_id = message.get("id").and_then(Value::as_str).map(str::to_owned);
                    // The first answer to each question counts; later ones are dropped.
                    let Some(original) = wire_id.and_then(|w| lock(&map).remove(&w)) else {
                        continue;
                    };
                    message.insert("id".into(), original);
                    if replies.send(Value::Object(message)).await.is_err() {
                        return;
                    }
                }
                if replies.is_closed() {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        });
        Ok(Self {
            stream,
            next: 0,
            originals,
            forwarder,
        })
    }

    /// The id under which the client sees the handler's request `original`.
    pub(crate) fn wire_id(&mut self, original: RequestId) -> String {
        self.next += 1;
        let wire = key::inbox_request(&self.stream, self.next);
        lock(&self.originals).insert(wire.clone(), original);
        wire
    }

    /// The run ended: close the inbox (later answers are refused) and stop forwarding.
    pub(crate) async fn close(self, engine: &Requests) {
        self.forwarder.abort();
        if let Err(error) = engine.append(&self.stream, String::new(), true).await {
            tracing::debug!(%error, stream = %self.stream, "could not close an inbox");
        }
    }
}

impl Requests {
    /// The work of [`crate::Engine::reply`].
    pub(crate) async fn reply(
        &self,
        caller: &Caller,
        id: &RequestId,
        message: Map<String, Value>,
    ) -> Result<(), EngineError> {
        let Some(inbox) = id.as_str().and_then(key::inbox_of) else {
            tracing::debug!(%id, "reply with an id durable-mcp never issued dropped");
            return Ok(());
        };
        let owner = match self.store().stream_owner(&inbox).await {
            Ok(owner) => owner,
            Err(StoreError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if owner.principal != caller.principal
            || owner.session.as_ref() != caller.session.as_ref().map(|s| &s.id)
        {
            tracing::debug!(%id, "reply for another session's request dropped");
            return Ok(());
        }
        match self
            .append(&inbox, Value::Object(message).to_string(), false)
            .await
        {
            Ok(_) | Err(StoreError::StreamClosed { .. } | StoreError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
