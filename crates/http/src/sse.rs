//! SSE responses: every event written here was read back from the store, so it was
//! committed before its first byte reached the socket (D1).

use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use durable_mcp_engine::Engine;
use durable_mcp_store::{EventId, StoreError, StoredEvent, StreamId};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use http::{HeaderValue, StatusCode, header};
use tokio_util::sync::{CancellationToken, DropGuard};

/// One SSE event carrying a committed message (or nothing, for priming/closing events).
pub fn frame(event: &StoredEvent) -> Bytes {
    use std::fmt::Write as _;
    // Sized once: the data is most of it (`format!` would grow the buffer as it goes).
    let mut frame = String::with_capacity(event.data.len() + 64);
    // Writing into a String cannot fail.
    let _ = write!(frame, "id: {}\ndata: ", event.id);
    frame.push_str(&event.data);
    frame.push_str("\n\n");
    Bytes::from(frame)
}

/// The priming event of 2025-11-25 streams: its id, a `retry` hint, and empty data.
pub fn priming_frame(id: &EventId, retry: Duration) -> Bytes {
    Bytes::from(format!(
        "id: {id}\nretry: {}\ndata: \n\n",
        retry.as_millis()
    ))
}

/// Committed events to write, in order.
pub type Events = BoxStream<'static, Result<StoredEvent, StoreError>>;

/// The events of `stream` after `after` (a request's stream, see [`Engine::tail`]).
pub fn tail_of(engine: &Engine, stream: StreamId, after: u64) -> Events {
    engine.tail(stream, after, None).boxed()
}

/// What an SSE response streams.
pub struct SseSource {
    /// The events.
    pub events: Events,
    /// Which of them is a priming event, written with the `retry` hint.
    pub priming: Option<EventId>,
    /// Frames sent before the tail (priming event, already-read first event).
    pub prefix: Vec<Bytes>,
    /// Cancel this token when the client goes away (modern era: disconnect cancels).
    pub cancel_on_drop: Option<CancellationToken>,
    /// Close the connection after this long (SSE polling); the client resumes.
    pub close_after: Option<Duration>,
    /// Close the connection when this fires (the handler asked for it); the client resumes.
    pub close_on: Option<CancellationToken>,
    /// Keep this session alive on keep-alive ticks (a live GET stream, D14).
    pub keep_session: Option<(durable_mcp_store::Principal, durable_mcp_store::SessionId)>,
}

/// Build the SSE response.
pub fn response(
    engine: &Engine,
    source: SseSource,
    keep_alive: Duration,
    shutdown: &CancellationToken,
) -> Response {
    let events = source.events;
    let priming = source.priming.map(|id| (id, engine.options().sse_retry));
    let guard = source.cancel_on_drop.map(CancellationToken::drop_guard);
    let keep_session = source
        .keep_session
        .map(|(principal, id)| (engine.clone(), principal, id));
    // Shutting down ends the connection like a poll would: the stream stays resumable.
    let mut close_on: Vec<CancellationToken> = vec![shutdown.clone()];
    close_on.extend(source.close_on);
    let body = body_stream(
        events,
        priming,
        source.prefix,
        guard,
        keep_alive,
        source.close_after,
        close_on,
        keep_session,
    );
    // Counted open (metrics on) until hyper drops the body: the end of the connection's stream.
    let open = durable_mcp_engine::metrics::sse_stream_opened();
    let body = body.map(move |frame| {
        let _open = &open;
        frame
    });
    let mut response = Response::new(Body::from_stream(body));
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

#[allow(clippy::too_many_arguments)] // one call site; each is a distinct knob of the response
fn body_stream<S>(
    events: S,
    priming: Option<(EventId, Duration)>,
    prefix: Vec<Bytes>,
    guard: Option<DropGuard>,
    keep_alive: Duration,
    close_after: Option<Duration>,
    close_on: Vec<CancellationToken>,
    keep_session: Option<(
        Engine,
        durable_mcp_store::Principal,
        durable_mcp_store::SessionId,
    )>,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static
where
    S: Stream<Item = Result<StoredEvent, durable_mcp_store::StoreError>> + Send + 'static,
{
    struct State<S> {
        events: std::pin::Pin<Box<S>>,
        guard: Option<DropGuard>,
        deadline: Option<tokio::time::Instant>,
        close_on: Vec<CancellationToken>,
        keep_session: Option<(
            Engine,
            durable_mcp_store::Principal,
            durable_mcp_store::SessionId,
        )>,
        priming: Option<(EventId, Duration)>,
        finished: bool,
    }
    let state = State {
        priming,
        events: Box::pin(events),
        guard,
        deadline: close_after.map(|d| tokio::time::Instant::now() + d),
        close_on,
        keep_session,
        finished: false,
    };
    let prefix = futures::stream::iter(prefix.into_iter().map(Ok));
    let rest = futures::stream::unfold(state, move |mut s| async move {
        if s.finished {
            return None;
        }
        let deadline = s.deadline;
        let close_on = s.close_on.clone();
        let wait = async move {
            let timer = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            // Any of the tokens ends the connection (shutdown, or the handler asked).
            let asked =
                futures::future::select_all(close_on.iter().map(|t| Box::pin(t.cancelled())));
            tokio::select! {
                () = timer => {}
                _ = asked => {}
            }
        };
        tokio::select! {
            next = tokio::time::timeout(keep_alive, s.events.next()) => match next {
                Ok(Some(Ok(event))) => {
                    let bytes = match &s.priming {
                        Some((id, retry)) if *id == event.id => priming_frame(id, *retry),
                        _ => frame(&event),
                    };
                    Some((Ok(bytes), s))
                }
                Ok(Some(Err(error))) => {
                    tracing::warn!(%error, "stream tail failed; closing the connection");
                    s.finished = true;
                    Some((Ok(Bytes::new()), s))
                }
                Ok(None) => {
                    // The stream is finished: its work is done, so dropping the guard
                    // must not cancel anything.
                    if let Some(guard) = s.guard.take() {
                        guard.disarm();
                    }
                    None
                }
                Err(_) => {
                    if let Some((engine, principal, id)) = &s.keep_session
                        && let Err(error) = engine.touch_session(principal, id).await
                    {
                        tracing::debug!(%error, "session gone; closing its stream");
                        return None;
                    }
                    Some((Ok(Bytes::from_static(b": keep-alive\n\n")), s))
                }
            },
            () = wait => {
                // SSE polling: end this connection, not the stream; the client resumes.
                if let Some(guard) = s.guard.take() {
                    guard.disarm();
                }
                None
            }
        }
    });
    prefix.chain(rest)
}
