//! The stdio transport: newline-delimited JSON-RPC on a reader and a writer, served by the
//! same engine (and so the same store and request path) as HTTP. One process is one
//! client: the first `initialize` creates its session, and every later message belongs to
//! it.

use durable_mcp_engine::{Caller, Engine};
use durable_mcp_protocol::jsonrpc::{self, Inbound, code, error_response};
use durable_mcp_store::Principal;
use futures::StreamExt;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// The longest line accepted (a larger message is answered with a parse error).
pub const MAX_LINE: usize = 4 * 1024 * 1024;

/// Serve `engine` until `input` ends.
pub async fn serve<R, W>(engine: Engine, input: R, mut output: W) -> std::io::Result<()>
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
    let mut lines = BufReader::new(input);
    let mut caller: Option<Caller> = None;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = (&mut lines).take(MAX_LINE as u64 + 1).read_until(b'\n', &mut buf).await?;
        if n == 0 {
            break;
        }
        if buf.len() > MAX_LINE && !buf.ends_with(b"\n") {
            // Skip the rest of the oversized line.
            let mut sink = Vec::new();
            lines.read_until(b'\n', &mut sink).await?;
            let _ = tx.send(error_response(Value::Null, code::PARSE_ERROR, "message too large", None).to_string()).await;
            continue;
        }
        let text = String::from_utf8_lossy(&buf);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let reply = match serde_json::from_str::<Value>(text) {
            Err(e) => Some(error_response(Value::Null, code::PARSE_ERROR, &format!("Parse error: {e}"), None)),
            Ok(value) => match jsonrpc::classify(value) {
                Err(rejection) => Some(rejection.to_response()),
                Ok(inbound) => handle(&engine, &mut caller, inbound, &tx).await,
            },
        };
        if let Some(reply) = reply {
            let _ = tx.send(reply.to_string()).await;
        }
    }
    drop(tx);
    writer.await.map_err(std::io::Error::other)?
}

async fn handle(engine: &Engine, caller: &mut Option<Caller>, inbound: Inbound, tx: &mpsc::Sender<String>) -> Option<Value> {
    let principal = Principal::anonymous();
    match inbound {
        Inbound::Request { id, method, message } if method == "initialize" => match engine.initialize(&principal, message).await {
            Ok((session, response)) => {
                match session.map(|session| Caller::legacy(principal, session)) {
                    Some(Ok(legacy)) => *caller = Some(legacy),
                    Some(Err(e)) => return Some(error_response(id, code::INTERNAL_ERROR, &e.to_string(), None)),
                    None => {}
                }
                Some(response)
            }
            Err(e) => Some(error_response(id, code::INTERNAL_ERROR, &e.to_string(), None)),
        },
        Inbound::Request { id, .. } if caller.is_none() => {
            Some(error_response(id, code::INVALID_REQUEST, "the first request must be initialize", None))
        }
        Inbound::Request { id, message, .. } => {
            let caller = caller.clone()?;
            match engine.accept(&caller, id.clone(), message).await {
                Ok(accepted) => {
                    let after = accepted.priming.map_or(0, |p| p.seq);
                    let events = durable_mcp_engine::tail(engine.store().clone(), accepted.stream, after);
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        let mut events = Box::pin(events);
                        while let Some(Ok(event)) = events.next().await {
                            if !event.data.is_empty() && tx.send(event.data).await.is_err() {
                                break;
                            }
                        }
                    });
                    None
                }
                Err(e) => Some(error_response(id, code::INTERNAL_ERROR, &e.to_string(), None)),
            }
        }
        Inbound::Notification { method, message } => {
            let caller = caller.as_ref()?;
            if method == "notifications/cancelled" {
                if let Some(request_id) = message.get("params").and_then(|p| p.get("requestId"))
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
            if let Some(caller) = caller.as_ref()
                && let Err(error) = engine.reply(caller, &id, message).await
            {
                tracing::warn!(%error, "could not commit a reply");
            }
            None
        }
    }
}
