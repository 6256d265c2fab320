//! GET (resume a stream, or open the session's standalone stream) and DELETE (end the
//! session). Both are legacy-era only: modern traffic gets 405.

use axum::response::{IntoResponse, Response};
use durable_mcp_engine::EngineError;
use durable_mcp_protocol::McpVersion;
use durable_mcp_store::{EventId, Principal, StoreError};
use http::{HeaderMap, StatusCode};

use crate::headers::{self, LAST_EVENT_ID};
use crate::sse::{self, SseSource};
use crate::{Rejection, Transport};

fn modern(headers: &HeaderMap) -> Result<bool, Rejection> {
    Ok(headers::protocol_version(headers)?.is_some_and(McpVersion::is_modern))
}

impl Transport {
    pub(crate) async fn get(&self, headers: &HeaderMap) -> Result<Response, Rejection> {
        if modern(headers)? {
            return Err(Rejection::MethodNotAllowed);
        }
        headers::check_get_accept(headers)?;
        let principal = Principal::anonymous();
        let session = self.legacy_session(headers, &principal).await?;
        let store = self.engine.store();
        let source = match headers::single(headers, LAST_EVENT_ID)? {
            Some(raw) => {
                // D3: resume exactly after this event, on its own stream, if it is ours.
                let id: EventId = raw.parse().map_err(|_| Rejection::UnknownEvent(raw.clone()))?;
                let owner = match store.stream_owner(&id.stream).await {
                    Ok(owner) => owner,
                    Err(StoreError::NotFound { .. }) => return Err(Rejection::UnknownEvent(raw)),
                    Err(e) => return Err(EngineError::from(e).into()),
                };
                if owner.principal != principal || owner.session.as_ref() != Some(&session.id) {
                    return Err(Rejection::UnknownEvent(raw));
                }
                // Check the position exists now, so a pruned resume is a 4xx, not an
                // empty stream that makes clients reconnect in a loop.
                let read = store.read_after(&id.stream, id.seq, 1).await.map_err(EngineError::from)?;
                if read.events.is_empty() && !read.finished {
                    let last = store.read_after(&id.stream, id.seq.saturating_sub(1), 1).await.map_err(EngineError::from)?;
                    if id.seq > 0 && last.events.is_empty() {
                        return Err(Rejection::UnknownEvent(raw));
                    }
                }
                // A resumed standalone stream keeps its session alive like a fresh one (D14).
                let keep_session = (id.stream == session.standalone_stream).then(|| (principal.clone(), session.id.clone()));
                SseSource {
                    stream: id.stream,
                    after: id.seq,
                    prefix: Vec::new(),
                    cancel_on_drop: None,
                    close_after: None,
                    close_on: None,
                    keep_session,
                }
            }
            None => {
                // The standalone stream, from now on. 2025-11-25 sessions get a priming
                // event (committed, so its id can be resumed from).
                let stream = session.standalone_stream.clone();
                let mut prefix = Vec::new();
                let after = if session.protocol_version.parse::<McpVersion>().map_err(EngineError::from)? >= McpVersion::V2025_11_25 {
                    let id = store.append(&stream, String::new(), false).await.map_err(EngineError::from)?;
                    prefix.push(sse::priming_frame(&id, self.engine.options().sse_retry));
                    id.seq
                } else {
                    last_seq(self, &stream).await?
                };
                SseSource {
                    stream,
                    after,
                    prefix,
                    cancel_on_drop: None,
                    close_after: None,
                    close_on: None,
                    keep_session: Some((principal.clone(), session.id.clone())),
                }
            }
        };
        Ok(sse::response(&self.engine, source, self.config.keep_alive, &self.shutdown))
    }

    pub(crate) async fn delete(&self, headers: &HeaderMap) -> Result<Response, Rejection> {
        if modern(headers)? {
            return Err(Rejection::MethodNotAllowed);
        }
        let principal = Principal::anonymous();
        let session = self.legacy_session(headers, &principal).await?;
        if self.engine.end_session(&principal, &session.id).await? {
            Ok(StatusCode::OK.into_response())
        } else {
            Err(Rejection::SessionNotFound)
        }
    }
}

/// The sequence of the last committed event of `stream` (0 when empty).
async fn last_seq(transport: &Transport, stream: &durable_mcp_store::StreamId) -> Result<u64, Rejection> {
    let store = transport.engine.store();
    let mut after = 0;
    loop {
        let read = match store.read_after(stream, after, 1024).await {
            Ok(read) => read,
            // Retention dropped the oldest events: continue from the oldest kept one.
            Err(StoreError::Pruned { oldest_retained, .. }) if oldest_retained > after + 1 => {
                after = oldest_retained - 1;
                continue;
            }
            Err(e) => return Err(EngineError::from(e).into()),
        };
        match read.events.last() {
            Some(last) => after = last.id.seq,
            None => return Ok(after),
        }
    }
}
