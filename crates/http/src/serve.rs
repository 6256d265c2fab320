//! The accept loop: hyper's HTTP/1 server with a connection cap, a header read timeout and
//! an idle keep-alive timeout.
//!
//! Each connection is in one of three phases ([`Phase`]): reading a request head (from the
//! accept, or from the first byte after an idle spell; bounded by
//! [`HttpConfig::header_read_timeout`]), busy (at least one request whose response has not
//! been written to its end; no deadline, so an SSE stream lives as long as it is read), or
//! idle (bounded by [`HttpConfig::idle_timeout`]). A connection whose deadline passes is
//! closed; nothing is in flight on it then.

use std::convert::Infallible;
use std::io;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower_service::Service;

use crate::{HttpConfig, Transport};

/// What a connection over the cap is told before it is closed.
const REFUSED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\nretry-after: 1\r\ncontent-length: 0\r\n\r\n";

/// Serve `transport` on `listener` until `shutdown` resolves, then end its SSE connections
/// and finish the requests in flight (see [`serve_router`]).
pub async fn serve(
    listener: TcpListener,
    transport: Transport,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let config = transport.config.clone();
    let sse = transport.shutdown_token();
    let router = transport.router();
    let shutdown = async move {
        shutdown.await;
        sse.cancel();
    };
    serve_router(listener, router, &config, shutdown).await
}

/// Serve `router` (a transport's router, possibly inside a larger application) on
/// `listener` with the connection limits of `config`, until `shutdown` resolves; then
/// finish the requests in flight. A connection still waiting for a request head then (a
/// client that connected just before the stop) has up to 2 s to send it, and is served.
///
/// Accepted connections get `TCP_NODELAY`: SSE responses are several small writes, and with
/// Nagle's algorithm a keep-alive client waits ~40 ms on each request. At most
/// [`HttpConfig::max_connections`] are served at once; one accepted beyond that is answered
/// 503 and closed without waiting (the accept loop never blocks on a client), and the
/// refusals are logged once per burst. Silent, half-sent and idle connections are closed
/// after [`HttpConfig::header_read_timeout`] and [`HttpConfig::idle_timeout`].
///
/// Open SSE connections end only when the transport's
/// [`shutdown_token`](Transport::shutdown_token) is cancelled: `shutdown` should resolve
/// after that, or the graceful shutdown waits on long-lived GET streams.
pub async fn serve_router(
    listener: TcpListener,
    router: Router,
    config: &HttpConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let limits = Limits::of(config);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let stop = CancellationToken::new();
    let mut shutdown = pin!(shutdown);
    let mut refused: u64 = 0;
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                accept_failed(error).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if refused == 0 {
                tracing::warn!(
                    max_connections = limits.max_connections,
                    "connection limit reached: refusing connections"
                );
            }
            refused += 1;
            refuse(tcp);
            continue;
        };
        if refused > 0 {
            tracing::info!(refused, "connection limit: accepting connections again");
            refused = 0;
        }
        prepare(&tcp);
        tokio::spawn(connection(
            tcp,
            peer,
            router.clone(),
            limits,
            stop.clone(),
            slot,
        ));
    }
    stop.cancel();
    // Every connection holds a slot until it ends: all of them back means all are done.
    // Until then the listener stays open, so that probes see the drain: `/readyz` answers
    // 503 (a closed port would look like a crash) and other requests are told to retry.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let all_closed = slots.acquire_many(all);
    let mut all_closed = pin!(all_closed);
    let draining_slots = Arc::new(Semaphore::new(DRAINING_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            _ = &mut all_closed => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((tcp, _peer)) => match draining_slots.clone().try_acquire_owned() {
                Ok(slot) => {
                    prepare(&tcp);
                    tokio::spawn(draining_connection(tcp, limits, slot));
                }
                Err(_) => refuse(tcp),
            },
            Err(error) => accept_failed(error).await,
        }
    }
    drop(listener);
    Ok(())
}

/// Connections served at once while the server drains (each answers one request).
const DRAINING_CONNECTIONS: usize = 64;

/// Answer one request of a connection accepted while draining ([`health::draining`]),
/// within the header read timeout, and close it.
async fn draining_connection(tcp: TcpStream, limits: Limits, _slot: OwnedSemaphorePermit) {
    let service = hyper::service::service_fn(|request: Request<Incoming>| async move {
        Ok::<_, Infallible>(crate::health::draining(request.uri().path()))
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(false)
        .serve_connection(TokioIo::new(tcp), service);
    match tokio::time::timeout(limits.header_read.max(Duration::from_secs(1)), conn).await {
        Ok(Err(error)) => tracing::debug!(%error, "draining connection ended with an error"),
        Ok(Ok(())) => {}
        Err(_) => tracing::debug!("draining connection timed out"),
    }
}

/// What renders the Prometheus text exposition of the metrics (the recorder's handle).
pub type MetricsRender = Arc<dyn Fn() -> String + Send + Sync>;

/// The content type of the Prometheus text exposition format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A router answering `GET /metrics` with what `render` renders; anything else is 404 (and
/// another method on `/metrics` 405). Mount it on a listener of its own: it has no Host
/// check and no authentication, like most Prometheus endpoints.
pub fn metrics_router(render: MetricsRender) -> Router {
    let scrape = move || {
        let render = render.clone();
        async move { ([(http::header::CONTENT_TYPE, PROMETHEUS_TEXT)], render()) }
    };
    Router::new().route("/metrics", axum::routing::get(scrape))
}

/// Serve [`metrics_router`] on `listener` (its own address, `serve --metrics-listen`) with
/// the default connection limits of [`HttpConfig`], until `shutdown` resolves.
pub async fn serve_metrics(
    listener: TcpListener,
    render: MetricsRender,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    tracing::info!(addr = %listener.local_addr()?, "metrics at /metrics");
    serve_router(
        listener,
        metrics_router(render),
        &HttpConfig::default(),
        shutdown,
    )
    .await
}

/// Set up an accepted connection before it is served: `TCP_NODELAY` (see [`serve_router`]).
fn prepare(tcp: &TcpStream) {
    if let Err(error) = tcp.set_nodelay(true) {
        tracing::warn!(%error, "could not set TCP_NODELAY");
    }
    #[cfg(test)]
    tests::prepared(tcp);
}

/// The limits of [`HttpConfig`] the accept loop applies.
#[derive(Clone, Copy, Debug)]
struct Limits {
    header_read: Duration,
    idle: Duration,
    max_connections: usize,
}

impl Limits {
    fn of(config: &HttpConfig) -> Self {
        // A semaphore cannot hold more than `Semaphore::MAX_PERMITS`, and a cap of 0 would
        // refuse every client.
        let max_connections = config
            .max_connections
            .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        Self {
            header_read: config.header_read_timeout,
            idle: config.idle_timeout,
            max_connections,
        }
    }
}

/// Tell a connection over the cap to come back later, without waiting on it: the answer
/// fits in the socket's send buffer of a fresh connection, and if it does not, the close
/// alone says the same.
fn refuse(tcp: TcpStream) {
    if let Err(error) = tcp.try_write(REFUSED) {
        tracing::trace!(%error, "could not answer a refused connection");
    }
}

/// Errors of one connection (reset before it was accepted) are skipped; others (out of file
/// descriptors, ...) pause the loop for a second so that it does not spin.
async fn accept_failed(error: io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        error.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        tracing::debug!(%error, "connection failed before it was accepted");
        return;
    }
    tracing::error!(%error, "accept failed; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Serve one connection until it ends, its deadline passes, or the server stops (then
/// finish its requests in flight and close).
async fn connection(
    tcp: TcpStream,
    peer: std::net::SocketAddr,
    router: Router,
    limits: Limits,
    stop: CancellationToken,
    _slot: OwnedSemaphorePermit,
) {
    let activity = Arc::new(Activity::new(limits));
    let io = TokioIo::new(Watched {
        io: tcp,
        activity: activity.clone(),
    });
    let requests = activity.clone();
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        let in_flight = InFlight::start(requests.clone());
        // The peer, as axum's `serve` with connect info gives it (the trusted-proxy mode
        // believes its header only from configured peers).
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
        let mut router = router.clone();
        async move {
            let response: Response<Body> = match router.call(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            Ok::<_, Infallible>(Holding::response(response, in_flight))
        }
    });
    // The header read timeout is ours (hyper's would start at the end of every response,
    // and so also close idle connections after it).
    let conn = hyper::server::conn::http1::Builder::new()
        .header_read_timeout(None)
        .serve_connection(io, service);
    let mut conn = pin!(conn);
    // When the server stops: a connection that is idle or busy shuts down gracefully at
    // once (hyper finishes its requests in flight, then closes). One still waiting for a
    // request head (just accepted, or a head half read) gets until the end of its grace
    // to send it: it is then served, and the connection closes after it. Closing it at
    // once would drop a request the client has already sent, with no response at all.
    let mut grace: Option<Instant> = None;
    let mut shut = false;
    loop {
        if let Some(grace_end) = grace
            && !shut
            && (!activity.awaiting_head() || Instant::now() >= grace_end)
        {
            conn.as_mut().graceful_shutdown();
            shut = true;
        }
        let changed = activity.changed.notified();
        let deadline = match (activity.deadline(), grace.filter(|_| !shut)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended with an error");
                }
                return;
            }
            () = sleep_until(deadline) => if let Some(phase) = activity.expired() {
                tracing::debug!(phase, "closing a connection past its deadline");
                return;
            },
            () = changed => {}
            () = stop.cancelled(), if grace.is_none() => {
                grace = Some(Instant::now() + HEAD_GRACE_ON_STOP);
            }
        }
    }
}

/// How long a connection still waiting for a request head when the server stops may take
/// to send it (it is served, then closed); also bounded by the header read timeout.
const HEAD_GRACE_ON_STOP: Duration = Duration::from_secs(2);

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// What a connection is doing, for its deadline.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// Waiting for a request head to be complete (`None`: no deadline).
    Head(Option<Instant>),
    /// This many requests are in flight (their responses not yet written to the end).
    Busy(usize),
    /// Nothing in flight since the last response ended; nothing read since.
    Idle(Option<Instant>),
}

/// One connection's phase, shared by its reader, its requests and its driver.
#[derive(Debug)]
struct Activity {
    phase: Mutex<Phase>,
    changed: Notify,
    limits: Limits,
}

impl Activity {
    fn new(limits: Limits) -> Self {
        let phase = Phase::Head(Instant::now().checked_add(limits.header_read));
        Self {
            phase: Mutex::new(phase),
            changed: Notify::new(),
            limits,
        }
    }

    fn update(&self, change: impl FnOnce(Phase) -> Phase) {
        let mut phase = self.phase.lock().unwrap_or_else(PoisonError::into_inner);
        *phase = change(*phase);
        drop(phase);
        self.changed.notify_one();
    }

    fn deadline(&self) -> Option<Instant> {
        match *self.phase.lock().unwrap_or_else(PoisonError::into_inner) {
            Phase::Head(deadline) | Phase::Idle(deadline) => deadline,
            Phase::Busy(_) => None,
        }
    }

    /// No request in flight and none finished since the last bytes arrived: the
    /// connection is waiting for (the rest of) a request head.
    fn awaiting_head(&self) -> bool {
        matches!(
            *self.phase.lock().unwrap_or_else(PoisonError::into_inner),
            Phase::Head(_)
        )
    }

    /// The phase whose deadline has passed, if it has.
    fn expired(&self) -> Option<&'static str> {
        let now = Instant::now();
        match *self.phase.lock().unwrap_or_else(PoisonError::into_inner) {
            Phase::Head(Some(deadline)) if deadline <= now => Some("header read"),
            Phase::Idle(Some(deadline)) if deadline <= now => Some("idle"),
            _ => None,
        }
    }

    /// Bytes arrived: an idle connection starts a request head.
    fn read(&self) {
        let mut phase = self.phase.lock().unwrap_or_else(PoisonError::into_inner);
        if let Phase::Idle(_) = *phase {
            *phase = Phase::Head(Instant::now().checked_add(self.limits.header_read));
            drop(phase);
            self.changed.notify_one();
        }
    }
}

/// A request in flight, from its head until its response body is written to the end (or
/// dropped).
struct InFlight(Arc<Activity>);

impl InFlight {
    fn start(activity: Arc<Activity>) -> Self {
        activity.update(|phase| match phase {
            Phase::Busy(n) => Phase::Busy(n + 1),
            Phase::Head(_) | Phase::Idle(_) => Phase::Busy(1),
        });
        Self(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let idle = self.0.limits.idle;
        self.0.update(|phase| match phase {
            Phase::Busy(n) if n > 1 => Phase::Busy(n - 1),
            _ => Phase::Idle(Instant::now().checked_add(idle)),
        });
    }
}

/// A response body that keeps `guard` (a request's in-flight mark, a limit's unit) until
/// hyper is done with the body: written to the end, or dropped.
pub(crate) struct Holding<G> {
    body: Body,
    _guard: G,
}

impl<G: Send + Unpin + 'static> Holding<G> {
    /// `response`, its body holding `guard`.
    pub(crate) fn response(response: Response<Body>, guard: G) -> Response<Body> {
        response.map(|body| {
            Body::new(Holding {
                body,
                _guard: guard,
            })
        })
    }
}

impl<G: Unpin> http_body::Body for Holding<G> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The socket, telling its connection's [`Activity`] when bytes arrive.
struct Watched {
    io: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use std::net::SocketAddr;

    use super::*;

    /// The server side of every connection the accept loop has prepared: its peer and
    /// whether the socket reports `TCP_NODELAY`, read back from the socket itself.
    static PREPARED: Mutex<Vec<(SocketAddr, bool)>> = Mutex::new(Vec::new());

    pub(super) fn prepared(tcp: &TcpStream) {
        if let (Ok(peer), Ok(nodelay)) = (tcp.peer_addr(), tcp.nodelay()) {
            PREPARED
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((peer, nodelay));
        }
    }

    /// The accept loop serves every connection with `TCP_NODELAY` set: SSE responses are
    /// several small writes that Nagle's algorithm would hold back (a structural check of
    /// what `nodelay.rs` measures as a latency).
    #[tokio::test]
    async fn accepted_connections_have_tcp_nodelay() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            serve_router(
                listener,
                Router::new(),
                &HttpConfig::default(),
                std::future::pending(),
            )
            .await
        });
        let client = TcpStream::connect(addr).await.unwrap();
        let nodelay = accepted(&client).await;
        server.abort();
        assert!(
            nodelay,
            "the server's socket of an accepted connection has TCP_NODELAY"
        );
    }

    /// Wait until the accept loop has taken `client`'s connection; its `TCP_NODELAY`.
    async fn accepted(client: &TcpStream) -> bool {
        let me = client.local_addr().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let found = PREPARED
                .lock()
                .unwrap()
                .iter()
                .find(|(peer, _)| *peer == me)
                .map(|(_, nodelay)| *nodelay);
            if let Some(nodelay) = found {
                return nodelay;
            }
            assert!(
                Instant::now() < deadline,
                "the accept loop never prepared the connection"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A connection accepted just before the server stops, whose request head arrives just
    /// after, is served (then closed), not dropped without a response; one that never sends
    /// anything is closed after its grace, and the server returns.
    #[tokio::test]
    async fn a_connection_accepted_before_the_stop_gets_its_request_served() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route("/fast", axum::routing::get(|| async { "served" }));
        let shutdown = Arc::new(Notify::new());
        let server = tokio::spawn({
            let shutdown = shutdown.clone();
            async move {
                serve_router(listener, router, &HttpConfig::default(), async move {
                    shutdown.notified().await
                })
                .await
            }
        });
        let mut late = TcpStream::connect(addr).await.unwrap();
        accepted(&late).await;
        let silent = TcpStream::connect(addr).await.unwrap();
        accepted(&silent).await;
        let stopped = Instant::now();
        shutdown.notify_one();
        tokio::time::sleep(Duration::from_millis(300)).await;
        late.write_all(b"GET /fast HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        tokio::time::timeout(Duration::from_secs(10), late.read_to_string(&mut out))
            .await
            .unwrap()
            .unwrap();
        assert!(
            out.starts_with("HTTP/1.1 200") && out.ends_with("served"),
            "{out:?}"
        );
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("the server ends once the silent connection's grace is over")
            .unwrap()
            .unwrap();
        assert!(
            stopped.elapsed() >= HEAD_GRACE_ON_STOP,
            "the silent connection had its grace: {:?}",
            stopped.elapsed()
        );
        drop(silent);
    }

    /// Send `request` on a new connection to `addr` and return the response's status line
    /// and body (the server closes draining connections, so read to the end).
    async fn exchange(addr: SocketAddr, request: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut client = TcpStream::connect(addr).await.unwrap();
        client.write_all(request.as_bytes()).await.unwrap();
        let mut out = String::new();
        tokio::time::timeout(Duration::from_secs(10), client.read_to_string(&mut out))
            .await
            .unwrap()
            .unwrap();
        out
    }

    /// During a graceful shutdown, while a request is still in flight, the listener stays
    /// open: `/readyz` answers 503 (draining), `/healthz` 200, anything else 503 with
    /// `Retry-After`; once the last request ends, the server returns.
    #[tokio::test]
    async fn readyz_is_503_while_draining_and_the_server_ends_after_the_last_request() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let finish = Arc::new(Notify::new());
        let router = Router::new().route(
            "/slow",
            axum::routing::get({
                let finish = finish.clone();
                move || async move {
                    finish.notified().await;
                    "done"
                }
            }),
        );
        let shutdown = Arc::new(Notify::new());
        let server = tokio::spawn({
            let shutdown = shutdown.clone();
            async move {
                serve_router(listener, router, &HttpConfig::default(), async move {
                    shutdown.notified().await
                })
                .await
            }
        });
        let slow = tokio::spawn(exchange(addr, "GET /slow HTTP/1.1\r\nhost: x\r\n\r\n"));
        tokio::time::sleep(Duration::from_millis(200)).await;
        shutdown.notify_one();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let ready = exchange(addr, "GET /readyz HTTP/1.1\r\nhost: x\r\n\r\n").await;
        assert!(ready.starts_with("HTTP/1.1 503"), "{ready}");
        assert!(ready.contains(r#""not_draining":{"ok":false}"#), "{ready}");
        let live = exchange(addr, "GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await;
        assert!(live.starts_with("HTTP/1.1 200"), "{live}");
        let other = exchange(
            addr,
            "POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n",
        )
        .await;
        assert!(
            other.starts_with("HTTP/1.1 503")
                && other.to_ascii_lowercase().contains("retry-after: 1"),
            "{other}"
        );
        assert!(!server.is_finished(), "a request is still in flight");
        finish.notify_one();
        let slow = slow.await.unwrap();
        assert!(
            slow.starts_with("HTTP/1.1 200") && slow.ends_with("done"),
            "{slow}"
        );
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("the server ends after its last request")
            .unwrap()
            .unwrap();
    }
}
