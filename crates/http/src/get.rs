//! GET (resume a stream, or open the session's standalone stream) and DELETE (end the
//! session). Both are legacy-era only: modern traffic gets 405.

use axum::response::{IntoResponse, Response};
use durable_mcp_auth::Authenticated;
use durable_mcp_engine::{EngineError, GetStream, GetStreamSettings, metrics};
use durable_mcp_protocol::McpVersion;
use durable_mcp_store::{EventId, Principal, SessionId, StoreError};
use futures::StreamExt;
use http::{HeaderMap, StatusCode};

use crate::headers::{self, LAST_EVENT_ID};
use crate::sse::{self, SseSource};
use crate::{Rejection, Transport};

fn modern(headers: &HeaderMap) -> Result<bool, Rejection> {
    Ok(headers::protocol_version(headers)?.is_some_and(McpVersion::is_modern))
}

impl Transport {
    pub(crate) async fn get(
        &self,
        headers: &HeaderMap,
        who: &Authenticated,
    ) -> Result<Response, Rejection> {
        if modern(headers)? {
            return Err(Rejection::MethodNotAllowed);
        }
        headers::check_get_accept(headers)?;
        let principal = who.principal.clone();
        // Before the session is read (and touched): a refused stream writes nothing.
        let permit = self.permit(&principal, durable_mcp_engine::limits::Limit::SseStreams)?;
        let session = self.legacy_session(headers, &principal).await?;
        let store = self.engine.store();
        let settings = GetStreamSettings {
            tick: self.config.keep_alive,
            max_per_session: self.config.max_get_streams_per_session,
        };
        let source = match headers::single(headers, LAST_EVENT_ID)? {
            Some(raw) => {
                // D3: resume exactly after this event, on its own stream, if it is ours.
                let id: EventId = raw
                    .parse()
                    .map_err(|_| Rejection::UnknownEvent(raw.clone()))?;
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
                let read = store
                    .read_after(&id.stream, id.seq, 1)
                    .await
                    .map_err(EngineError::from)?;
                if read.events.is_empty() && !read.finished {
                    let last = store
                        .read_after(&id.stream, id.seq.saturating_sub(1), 1)
                        .await
                        .map_err(EngineError::from)?;
                    if id.seq > 0 && last.events.is_empty() {
                        return Err(Rejection::UnknownEvent(raw));
                    }
                }
                let resumed = if id.stream == session.standalone_stream {
                    // Resuming a GET stream: it takes the delivery over (see below).
                    let get = self
                        .engine
                        .open_get_stream(&session, Some(id.seq), settings)
                        .await?;
                    metrics::replayed("standalone");
                    get_source(get, &principal, &session.id)
                } else {
                    metrics::replayed("request");
                    SseSource {
                        events: sse::tail_of(&self.engine, id.stream, id.seq),
                        priming: None,
                        prefix: Vec::new(),
                        cancel_on_drop: None,
                        close_after: None,
                        close_on: None,
                        keep_session: None,
                    }
                };
                replay_counted(resumed)
            }
            None => {
                // The standalone stream, from where delivery to the session's GET streams
                // stopped; each message goes on exactly one of them. 2025-11-25 sessions get
                // a priming event (committed, so its id can be resumed from).
                let get = self
                    .engine
                    .open_get_stream(&session, None, settings)
                    .await?;
                get_source(get, &principal, &session.id)
            }
        };
        Ok(crate::limits::hold(
            sse::response(&self.engine, source, self.config.keep_alive, &self.shutdown),
            permit,
        ))
    }

    pub(crate) async fn delete(
        &self,
        headers: &HeaderMap,
        who: &Authenticated,
    ) -> Result<Response, Rejection> {
        if modern(headers)? {
            return Err(Rejection::MethodNotAllowed);
        }
        let principal = who.principal.clone();
        let session = self.legacy_session(headers, &principal).await?;
        if self.engine.end_session(&principal, &session.id).await? {
            Ok(StatusCode::OK.into_response())
        } else {
            Err(Rejection::SessionNotFound)
        }
    }
}

/// A resumed stream's source, its events counted in `durable_mcp.sse.replayed_events`
/// (metrics on).
fn replay_counted(mut source: SseSource) -> SseSource {
    if metrics::enabled() {
        source.events = source
            .events
            .inspect(|event| {
                if event.is_ok() {
                    metrics::replayed_event();
                }
            })
            .boxed();
    }
    source
}

/// The SSE source of a GET stream; it keeps its session alive like any live GET (D14).
fn get_source(get: GetStream, principal: &Principal, session: &SessionId) -> SseSource {
    SseSource {
        events: get.events,
        priming: get.priming,
        prefix: Vec::new(),
        cancel_on_drop: None,
        close_after: None,
        close_on: None,
        keep_session: Some((principal.clone(), session.clone())),
    }
}
