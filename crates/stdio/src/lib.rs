//! The stdio transport: newline-delimited JSON-RPC on a reader and a writer, served by the
//! same engine (and so the same store and request path) as HTTP. One process is one
//! client: the first `initialize` creates its session, and every later message belongs to
//! it.
//!
//! What HTTP spreads over connections, stdio writes on its one output, each message read
//! back from the store once committed (D1):
//!
//! - the response stream of each request (its progress, logs, questions and outcome);
//! - the session's standalone stream, followed from `initialize` on: list changes,
//!   updates of subscribed resources and 2025-11-25 task status notifications, which HTTP
//!   clients read with `GET`. Following it also keeps the session alive (D14), as an open
//!   `GET` stream does.

use std::time::Duration;

use durable_mcp_engine::{Caller, Engine};
use durable_mcp_protocol::jsonrpc::{self, Inbound, Message, code, error_response};
use durable_mcp_protocol::methods::{self, Method};
use durable_mcp_store::{Principal, SessionId, StoreError, StreamId};
use futures::StreamExt;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// The longest line accepted (a larger message is answered with a parse error).
pub const MAX_LINE: usize = 4 * 1024 * 1024;

/// How long a failed read of a stream waits before it is tried again (store outage, D15).
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Serve `engine` until `input` ends or `shutdown` resolves.
///
/// Then the client is gone, or going: the session's standalone stream is no longer
/// followed, and the requests still in flight get `grace` to finish while their messages
/// are still written; the engine is [drained](Engine::drain) meanwhile, so that those still
/// running after `grace` give their leases back (D7). Returns once everything that
/// finished was written.
pub async fn serve<R, W>(
    engine: Engine,
    input: R,
    mut output: W,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel::<String>(256);
    let writer = tokio::spawn(async move {
        while let Some(line) = rx.recv().await {
            output.write_all(line.as_bytes()).await?;
            output.write_all(b"\n").await?;
            output.flush().await?;
        }
        Ok::<_, std::io::Error>(())
    });
    let mut connection = Connection {
        engine: engine.clone(),
        tx,
        caller: None,
        standalone: JoinSet::new(),
        requests: JoinSet::new(),
    };
    let read = connection.read(input);
    tokio::pin!(shutdown);
    let read_result = tokio::select! {
        result = read => result,
        () = &mut shutdown => Ok(()),
    };
    let Connection {
        tx,
        mut standalone,
        mut requests,
        ..
    } = connection;
    standalone.shutdown().await;
    drop(tx);
    let written = async { while requests.join_next().await.is_some() {} };
    let (_, waited) = tokio::join!(engine.drain(grace), tokio::time::timeout(grace, written));
    if waited.is_err() {
        tracing::info!(
            requests = requests.len(),
            "requests still unfinished after the grace period; their messages are not written"
        );
    }
    requests.shutdown().await;
    writer.await.map_err(std::io::Error::other)??;
    read_result
}

/// One client's state.
struct Connection {
    engine: Engine,
    /// Lines to write.
    tx: mpsc::Sender<String>,
    /// The session, once `initialize` created it.
    caller: Option<Caller>,
    /// The task following the session's standalone stream (a set, so that dropping the
    /// connection stops it).
    standalone: JoinSet<()>,
    /// The tasks writing requests' response streams.
    requests: JoinSet<()>,
}

impl Connection {
    /// Read and handle messages until `input` ends.
    async fn read<R: AsyncRead + Unpin>(&mut self, input: R) -> std::io::Result<()> {
        let mut lines = BufReader::new(input);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let n = (&mut lines)
                .take(MAX_LINE as u64 + 1)
                .read_until(b'\n', &mut buf)
                .await?;
            if n == 0 {
                return Ok(());
            }
            if buf.len() > MAX_LINE && !buf.ends_with(b"\n") {
                // Skip the rest of the oversized line.
                let mut sink = Vec::new();
                lines.read_until(b'\n', &mut sink).await?;
                self.write(error_response(
                    Value::Null,
                    code::PARSE_ERROR,
                    "message too large",
                    None,
                ))
                .await;
                continue;
            }
            let text = String::from_utf8_lossy(&buf);
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            let reply = match serde_json::from_str::<Value>(text) {
                Err(e) => Some(error_response(
                    Value::Null,
                    code::PARSE_ERROR,
                    &format!("Parse error: {e}"),
                    None,
                )),
                Ok(value) => match jsonrpc::classify(value) {
                    Err(rejection) => Some(rejection.to_response()),
                    Ok(inbound) => self.handle(inbound).await,
                },
            };
            if let Some(reply) = reply {
                self.write(reply).await;
            }
        }
    }

    async fn write(&self, message: Value) {
        // The writer is gone only when the output failed; `serve` reports that error.
        let _ = self.tx.send(message.to_string()).await;
    }

    async fn handle(&mut self, inbound: Inbound) -> Option<Value> {
        let principal = Principal::anonymous();
        let engine = &self.engine;
        match inbound {
            Inbound::Request(request) if request.method() == &Method::Initialize => {
                let id = request.id().clone();
                match engine.initialize(&principal, request, None).await {
                    Ok((session, response)) => {
                        if let Some(session) = session {
                            let (id_of, stream) =
                                (session.id.clone(), session.standalone_stream.clone());
                            match Caller::legacy(principal.clone(), session) {
                                Ok(legacy) => self.caller = Some(legacy),
                                Err(e) => return Some(failed(id, &e)),
                            }
                            self.follow_standalone(principal, id_of, stream);
                        }
                        Some(response)
                    }
                    Err(e) => Some(failed(id, &e)),
                }
            }
            Inbound::Request(request) if self.caller.is_none() => Some(error_response(
                request.id().clone(),
                code::INVALID_REQUEST,
                "the first request must be initialize",
                None,
            )),
            Inbound::Request(request) => {
                let caller = self.caller.as_ref()?;
                let id = request.id().clone();
                match engine.accept(caller, request).await {
                    Ok(accepted) => {
                        let after = accepted.priming.map_or(0, |p| p.seq);
                        self.requests.spawn(follow(
                            engine.clone(),
                            accepted.stream,
                            after,
                            accepted.follow,
                            self.tx.clone(),
                        ));
                        None
                    }
                    Err(e) => Some(failed(id, &e)),
                }
            }
            Inbound::Notification { method, message } => {
                let caller = self.caller.as_ref()?;
                if method == methods::NOTIFICATION_CANCELLED {
                    if let Some(request_id) = Message::from_map(&message).param("requestId")
                        && let Err(error) = engine.cancel(caller, request_id).await
                    {
                        tracing::warn!(%error, "could not record a cancellation");
                    }
                } else {
                    engine.notify(caller, message);
                }
                None
            }
            Inbound::Response { id, message } => {
                if let Some(caller) = self.caller.as_ref()
                    && let Err(error) = engine.reply(caller, &id, message).await
                {
                    tracing::warn!(%error, "could not commit a reply");
                }
                None
            }
        }
    }

    /// Follow the standalone stream of a session `initialize` just created (instead of
    /// the previous session's, after a second `initialize`), touching the session while
    /// the client is connected, as an open `GET` stream does (D14).
    fn follow_standalone(&mut self, principal: Principal, session: SessionId, stream: StreamId) {
        self.standalone.abort_all();
        let engine = self.engine.clone();
        let tx = self.tx.clone();
        self.standalone.spawn(async move {
            let touch_every = touch_interval(&engine);
            let keep_alive = async {
                let mut ticker = tokio::time::interval(touch_every);
                ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                ticker.tick().await;
                loop {
                    ticker.tick().await;
                    if let Err(error) = engine.touch_session(&principal, &session).await {
                        tracing::debug!(%error, "could not touch the stdio session");
                    }
                }
            };
            // A new session's standalone stream is empty: everything on it is news.
            tokio::select! {
                () = follow(engine.clone(), stream, 0, None, tx) => {}
                () = keep_alive => {}
            }
        });
    }
}

/// How often a connected client's session is touched: well within its idle TTL.
fn touch_interval(engine: &Engine) -> Duration {
    let ttl = engine
        .options()
        .retention
        .session_idle_ttl_ms
        .map_or(Duration::from_secs(60), Duration::from_millis);
    (ttl / 3).clamp(Duration::from_millis(100), Duration::from_secs(60))
}

/// Write the messages of `stream` after sequence `after` as they are committed, until the
/// stream is finished or gone or the writer is. A failed read (store outage, D15) is
/// retried from the last message written; a position pruned by retention (D14) goes on
/// from the oldest message kept, with a warning naming the loss.
async fn follow(
    engine: Engine,
    stream: StreamId,
    mut after: u64,
    mut registered: Option<durable_mcp_engine::Follow>,
    tx: mpsc::Sender<String>,
) {
    loop {
        let mut events = Box::pin(engine.tail(stream.clone(), after, registered.take()));
        let failed = loop {
            match events.next().await {
                None => return,
                Some(Ok(event)) => {
                    after = event.id.seq;
                    if !event.data.is_empty() && tx.send(event.data).await.is_err() {
                        return;
                    }
                }
                Some(Err(error)) => break error,
            }
        };
        match failed {
            StoreError::NotFound { .. } => return,
            StoreError::Pruned {
                oldest_retained, ..
            } if oldest_retained > after + 1 => {
                tracing::warn!(%stream, lost_from = after + 1, lost_to = oldest_retained - 1, "messages pruned before they were written");
                after = oldest_retained - 1;
            }
            error => {
                tracing::warn!(%error, %stream, "reading a stream failed; retrying");
                tokio::time::sleep(RETRY_AFTER).await;
            }
        }
    }
}

/// The JSON-RPC error for a request the engine failed: a request it refused (a used
/// request id, say) gets that refusal's error, a value the store refused is the request's
/// fault (-32600), anything else an internal error; all are logged.
fn failed(id: Value, error: &durable_mcp_engine::EngineError) -> Value {
    if let durable_mcp_engine::EngineError::Rejected(rejection) = error {
        tracing::info!(%error, "request refused");
        return error_response(id, rejection.code, &rejection.message, None);
    }
    let refused = matches!(error, durable_mcp_engine::EngineError::Store(e) if e.kind() == durable_mcp_store::StoreErrorKind::Refused);
    if refused {
        tracing::warn!(%error, "the store refused a value of a request");
        return error_response(
            id,
            code::INVALID_REQUEST,
            "Invalid request: the store refused a value of this request",
            None,
        );
    }
    tracing::error!(%error, "request failed");
    error_response(id, code::INTERNAL_ERROR, &error.to_string(), None)
}
