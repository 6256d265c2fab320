//! A minimal MCP client over one keep-alive HTTP/1.1 connection: just enough of HTTP
//! (`Content-Length` and chunked bodies) and SSE to time `tools/call` round trips, with
//! nothing in its own path that a real client library would add. It speaks both protocol
//! eras ([`Era`]).

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::{Duration, Instant};

use durable_mcp_protocol::McpVersion;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::BenchError;

/// The protocol version of the legacy era: the latest with sessions (`Mcp-Session-Id`),
/// on every server this crate measures.
pub const PROTOCOL_VERSION: &str = McpVersion::LATEST_LEGACY.as_str();

/// The `_meta` key of a 2026-07-28 request's protocol version.
const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// The `_meta` key of a 2026-07-28 request's client description.
const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// The `_meta` key of a 2026-07-28 request's client capabilities.
const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// Which protocol era a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Era {
    /// 2025-11-25: `initialize` and `notifications/initialized` first, then every request
    /// with `Mcp-Session-Id` and `Mcp-Protocol-Version`.
    Legacy,
    /// 2026-07-28: stateless requests, no session; each carries its protocol version,
    /// client info and capabilities in `_meta`, and the `Mcp-Protocol-Version`,
    /// `Mcp-Method` and `Mcp-Name` headers.
    Modern,
}

impl Era {
    /// Both eras, legacy first.
    pub const ALL: [Era; 2] = [Era::Legacy, Era::Modern];

    /// The protocol version this era's client sends.
    pub const fn version(self) -> McpVersion {
        match self {
            Era::Legacy => McpVersion::LATEST_LEGACY,
            Era::Modern => McpVersion::MODERN,
        }
    }

    /// `legacy` or `modern` (the command-line and report name).
    pub const fn name(self) -> &'static str {
        match self {
            Era::Legacy => "legacy",
            Era::Modern => "modern",
        }
    }
}

impl fmt::Display for Era {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An era name that is neither `legacy` nor `modern`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown era {0:?} (legacy or modern)")]
pub struct UnknownEra(pub String);

impl FromStr for Era {
    type Err = UnknownEra;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "legacy" => Ok(Era::Legacy),
            "modern" => Ok(Era::Modern),
            other => Err(UnknownEra(other.to_owned())),
        }
    }
}

/// How long one HTTP exchange may take before the client gives up.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest header line or SSE line accepted (a guard against a runaway server).
const MAX_LINE: usize = 1 << 20;

/// One simulated MCP client: one TCP connection (reopened only if the server closes it),
/// and in the legacy era one session at a time.
#[derive(Debug)]
pub struct McpClient {
    addr: SocketAddr,
    path: String,
    era: Era,
    conn: Option<BufReader<TcpStream>>,
    session: Option<String>,
    protocol_version: String,
    next_id: u64,
}

/// What one HTTP exchange returned.
#[derive(Debug)]
struct Exchange {
    status: u16,
    session: Option<String>,
    /// The JSON-RPC response to the request, if the request had an id.
    response: Option<Value>,
    /// When the response was parsed (before the rest of the body was read).
    answered_at: Option<Instant>,
}

impl McpClient {
    /// Open a connection to the MCP endpoint at `path` on `addr` (with `TCP_NODELAY`), for
    /// a client of `era`.
    ///
    /// # Errors
    /// The connection failed.
    pub async fn connect(addr: SocketAddr, path: &str, era: Era) -> Result<Self, BenchError> {
        let mut client = Self {
            addr,
            path: path.to_owned(),
            era,
            conn: None,
            session: None,
            protocol_version: era.version().as_str().to_owned(),
            next_id: 1,
        };
        client.reconnect().await?;
        Ok(client)
    }

    async fn reconnect(&mut self) -> Result<(), BenchError> {
        let stream = TcpStream::connect(self.addr).await?;
        stream.set_nodelay(true)?;
        self.conn = Some(BufReader::with_capacity(64 * 1024, stream));
        Ok(())
    }

    /// What a client of its era does before its first call: in the legacy era,
    /// [`McpClient::initialize`]; in the modern era nothing (every request stands alone).
    ///
    /// # Errors
    /// As [`McpClient::initialize`].
    pub async fn start(&mut self) -> Result<(), BenchError> {
        match self.era {
            Era::Legacy => self.initialize().await,
            Era::Modern => Ok(()),
        }
    }

    /// Start a new legacy session (whatever the client's era): `initialize`, then
    /// `notifications/initialized`. A session this client had before is left as it is
    /// (not ended), so calling this repeatedly leaves idle sessions behind.
    ///
    /// # Errors
    /// The server refused, answered with an error, or gave no `Mcp-Session-Id`.
    pub async fn initialize(&mut self) -> Result<(), BenchError> {
        self.session = None;
        self.protocol_version = PROTOCOL_VERSION.to_owned();
        let id = self.take_id();
        let request = json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": { "name": "durable-mcp-bench", "version": env!("CARGO_PKG_VERSION") }
            }
        });
        let exchange = self
            .exchange("POST", Some(&request), Some(id), None)
            .await?;
        let response = success(exchange.status, exchange.response)?;
        self.session = Some(
            exchange
                .session
                .ok_or_else(|| BenchError::Http("initialize gave no Mcp-Session-Id".into()))?,
        );
        if let Some(version) = response
            .pointer("/result/protocolVersion")
            .and_then(Value::as_str)
        {
            self.protocol_version = version.to_owned();
        }
        let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
        let exchange = self
            .exchange("POST", Some(&initialized), None, None)
            .await?;
        if exchange.status != 202 {
            return Err(BenchError::Http(format!(
                "notifications/initialized answered {}",
                exchange.status
            )));
        }
        Ok(())
    }

    /// Call `tool` with `arguments` and return the round-trip time: from the first byte
    /// of the request written to the JSON-RPC response parsed. The rest of the response
    /// body (the end of an SSE stream) is read before this returns, so the connection is
    /// ready for the next call.
    ///
    /// # Errors
    /// A transport failure, a JSON-RPC error, or a tool result with `isError: true`.
    pub async fn call_tool(
        &mut self,
        tool: &str,
        arguments: &Value,
    ) -> Result<Duration, BenchError> {
        let (id, request) = self.tool_call(tool, arguments)?;
        let started = Instant::now();
        let exchange = self.send(&request, Some(id)).await?;
        tool_result(exchange, started)
    }

    /// Call `tool` as [`McpClient::call_tool`] does, but drop the connection after writing
    /// the request: close it `drop_after` later (at once for zero; nothing of the response
    /// is read), open a new one and re-send the very same request (same session, same
    /// JSON-RPC id), as a client does whose connection broke. Returns the time from the
    /// first write to the re-sent request's response.
    ///
    /// # Errors
    /// As [`McpClient::call_tool`], for the first write and for the re-sent request.
    pub async fn call_tool_dropped(
        &mut self,
        tool: &str,
        arguments: &Value,
        drop_after: Duration,
    ) -> Result<Duration, BenchError> {
        let (id, request) = self.tool_call(tool, arguments)?;
        if self.conn.is_none() {
            self.reconnect().await?;
        }
        let conn = self
            .conn
            .as_mut()
            .ok_or(BenchError::Http("no connection".into()))?;
        let started = Instant::now();
        conn.get_mut().write_all(&request).await?;
        if !drop_after.is_zero() {
            tokio::time::sleep(drop_after).await;
        }
        // Dropping the stream closes the socket (a reset if part of the response arrived).
        self.conn = None;
        let exchange = self.send(&request, Some(id)).await?;
        tool_result(exchange, started)
    }

    /// A new `tools/call` request of `tool`: its id and its bytes.
    fn tool_call(&mut self, tool: &str, arguments: &Value) -> Result<(u64, Vec<u8>), BenchError> {
        let id = self.take_id();
        let mut params = json!({ "name": tool, "arguments": arguments });
        let headers = match self.era {
            Era::Legacy => None,
            Era::Modern => {
                params["_meta"] = json!({
                    META_PROTOCOL_VERSION: McpVersion::MODERN.as_str(),
                    META_CLIENT_INFO: { "name": "durable-mcp-bench", "version": env!("CARGO_PKG_VERSION") },
                    META_CLIENT_CAPABILITIES: {}
                });
                Some(("tools/call", tool))
            }
        };
        let request =
            json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params });
        Ok((id, self.encode("POST", Some(&request), headers)?))
    }

    /// End the session (`DELETE`), if there is one, so no server keeps it after the run.
    ///
    /// # Errors
    /// A transport failure; a refusal of the server is not an error.
    pub async fn close(mut self) -> Result<(), BenchError> {
        if self.session.is_some() {
            self.exchange("DELETE", None, None, None).await?;
        }
        Ok(())
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// One request and its whole response, within [`EXCHANGE_TIMEOUT`]. `modern` is the
    /// JSON-RPC method and name a 2026-07-28 request repeats in its headers.
    async fn exchange(
        &mut self,
        method: &str,
        body: Option<&Value>,
        id: Option<u64>,
        modern: Option<(&str, &str)>,
    ) -> Result<Exchange, BenchError> {
        let request = self.encode(method, body, modern)?;
        self.send(&request, id).await
    }

    /// Write the encoded `request` and read its whole response, within [`EXCHANGE_TIMEOUT`].
    async fn send(&mut self, request: &[u8], id: Option<u64>) -> Result<Exchange, BenchError> {
        match tokio::time::timeout(EXCHANGE_TIMEOUT, self.send_inner(request, id)).await {
            Ok(result) => result,
            Err(_) => {
                self.conn = None;
                Err(BenchError::Timeout("HTTP exchange"))
            }
        }
    }

    async fn send_inner(
        &mut self,
        request: &[u8],
        id: Option<u64>,
    ) -> Result<Exchange, BenchError> {
        if self.conn.is_none() {
            self.reconnect().await?;
        }
        let conn = self
            .conn
            .as_mut()
            .ok_or(BenchError::Http("no connection".into()))?;
        conn.get_mut().write_all(request).await?;
        let result = read_response(conn, id).await;
        match &result {
            Ok((_, true)) => {}
            // The server closes the connection after this response, or the exchange
            // failed half-way: either way the connection cannot carry another request.
            Ok((_, false)) | Err(_) => self.conn = None,
        }
        result.map(|(exchange, _)| exchange)
    }

    /// The request bytes: head and body in one buffer, so they leave in one write.
    fn encode(
        &self,
        method: &str,
        body: Option<&Value>,
        modern: Option<(&str, &str)>,
    ) -> Result<Vec<u8>, BenchError> {
        let body = match body {
            Some(body) => serde_json::to_vec(body)
                .map_err(|e| BenchError::Http(format!("encoding a request: {e}")))?,
            None => Vec::new(),
        };
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json, text/event-stream\r\n\
             Content-Type: application/json\r\nContent-Length: {len}\r\n",
            path = self.path,
            addr = self.addr,
            len = body.len()
        );
        if let Some(session) = &self.session {
            head.push_str("Mcp-Session-Id: ");
            head.push_str(session);
            head.push_str("\r\nMcp-Protocol-Version: ");
            head.push_str(&self.protocol_version);
            head.push_str("\r\n");
        }
        if let Some((rpc_method, name)) = modern {
            head.push_str("Mcp-Protocol-Version: ");
            head.push_str(McpVersion::MODERN.as_str());
            head.push_str("\r\nMcp-Method: ");
            head.push_str(rpc_method);
            head.push_str("\r\nMcp-Name: ");
            head.push_str(name);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        let mut request = head.into_bytes();
        request.extend_from_slice(&body);
        Ok(request)
    }
}

/// The round-trip time of a `tools/call` exchange begun at `started`, or the error its
/// response carries (a JSON-RPC error, or a tool result with `isError: true`).
fn tool_result(exchange: Exchange, started: Instant) -> Result<Duration, BenchError> {
    let answered = exchange.answered_at.unwrap_or_else(Instant::now);
    let response = success(exchange.status, exchange.response)?;
    if response.pointer("/result/isError").and_then(Value::as_bool) == Some(true) {
        return Err(BenchError::JsonRpc(response));
    }
    Ok(answered.saturating_duration_since(started))
}

/// The JSON-RPC response of a successful exchange, or the error it carries.
fn success(status: u16, response: Option<Value>) -> Result<Value, BenchError> {
    if status != 200 {
        return Err(BenchError::Http(format!("status {status}")));
    }
    let response = response.ok_or_else(|| {
        BenchError::Http("the response body ended without the JSON-RPC response".into())
    })?;
    if response.get("error").is_some() {
        return Err(BenchError::JsonRpc(response));
    }
    Ok(response)
}

/// Read one HTTP response. Returns the exchange and whether the connection stays open.
async fn read_response(
    conn: &mut BufReader<TcpStream>,
    id: Option<u64>,
) -> Result<(Exchange, bool), BenchError> {
    let mut line = String::new();
    read_line(conn, &mut line).await?;
    let status = line
        .split_ascii_whitespace()
        .nth(1)
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| BenchError::Http(format!("bad status line {:?}", line.trim_end())))?;
    let (mut content_length, mut chunked, mut sse, mut keep_alive, mut session) =
        (None, false, false, true, None);
    loop {
        read_line(conn, &mut line).await?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let Some((name, value)) = header.split_once(':') else {
            return Err(BenchError::Http(format!("bad header line {header:?}")));
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => {
                content_length = Some(
                    value
                        .parse::<usize>()
                        .map_err(|_| BenchError::Http(format!("bad Content-Length {value:?}")))?,
                );
            }
            "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
            "content-type" => sse = value.to_ascii_lowercase().starts_with("text/event-stream"),
            "connection" => keep_alive = !value.eq_ignore_ascii_case("close"),
            "mcp-session-id" => session = Some(value.to_owned()),
            _ => {}
        }
    }
    let mut body = Body::new(sse, id);
    if chunked {
        let mut chunk = Vec::new();
        loop {
            read_line(conn, &mut line).await?;
            let size = line.trim_end().split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size, 16)
                .map_err(|_| BenchError::Http(format!("bad chunk size {size:?}")))?;
            if size == 0 {
                // Trailers, then the empty line that ends the body.
                loop {
                    read_line(conn, &mut line).await?;
                    if line.trim_end().is_empty() {
                        break;
                    }
                }
                break;
            }
            chunk.resize(size, 0);
            conn.read_exact(&mut chunk).await?;
            body.feed(&chunk)?;
            let mut crlf = [0u8; 2];
            conn.read_exact(&mut crlf).await?;
        }
    } else if let Some(length) = content_length {
        let mut bytes = vec![0u8; length];
        conn.read_exact(&mut bytes).await?;
        body.feed(&bytes)?;
    } else if !(status == 204 || status == 304 || (100..200).contains(&status)) {
        // Neither length nor chunks: the body runs until the server closes.
        let mut bytes = Vec::new();
        conn.read_to_end(&mut bytes).await?;
        body.feed(&bytes)?;
        keep_alive = false;
    }
    let (response, answered_at) = body.finish()?;
    Ok((
        Exchange {
            status,
            session,
            response,
            answered_at,
        },
        keep_alive,
    ))
}

/// Read one line (with its `\r\n`) into `line`, refusing endless lines and EOF.
async fn read_line(conn: &mut BufReader<TcpStream>, line: &mut String) -> Result<(), BenchError> {
    line.clear();
    let read = (&mut *conn).take(MAX_LINE as u64).read_line(line).await?;
    if read == 0 {
        return Err(BenchError::Http("the server closed the connection".into()));
    }
    Ok(())
}

/// A response body being read: SSE events are parsed as they arrive, so the round trip
/// ends when the response event does, not when the stream does.
struct Body {
    sse: bool,
    id: Option<u64>,
    /// The whole body (JSON) or the current unfinished SSE line.
    pending: Vec<u8>,
    /// The `data` of the current SSE event.
    data: String,
    response: Option<Value>,
    answered_at: Option<Instant>,
}

impl Body {
    fn new(sse: bool, id: Option<u64>) -> Self {
        Self {
            sse,
            id,
            pending: Vec::new(),
            data: String::new(),
            response: None,
            answered_at: None,
        }
    }

    fn feed(&mut self, bytes: &[u8]) -> Result<(), BenchError> {
        if !self.sse {
            self.pending.extend_from_slice(bytes);
            return Ok(());
        }
        let mut rest = bytes;
        while let Some(newline) = rest.iter().position(|&b| b == b'\n') {
            self.pending.extend_from_slice(&rest[..newline]);
            rest = &rest[newline + 1..];
            let mut line = std::mem::take(&mut self.pending);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            self.sse_line(&line)?;
        }
        self.pending.extend_from_slice(rest);
        if self.pending.len() > MAX_LINE {
            return Err(BenchError::Http("SSE line too long".into()));
        }
        Ok(())
    }

    fn sse_line(&mut self, line: &[u8]) -> Result<(), BenchError> {
        if line.is_empty() {
            // End of an event: dispatch its data (priming events have none).
            let data = std::mem::take(&mut self.data);
            if !data.is_empty() {
                self.message(data.as_bytes())?;
            }
        } else if let Some(value) = line.strip_prefix(b"data:") {
            let value = value.strip_prefix(b" ").unwrap_or(value);
            if !self.data.is_empty() {
                self.data.push('\n');
            }
            self.data.push_str(
                std::str::from_utf8(value)
                    .map_err(|_| BenchError::Http("SSE data is not UTF-8".into()))?,
            );
        }
        // `id:`, `event:`, `retry:` and comments do not matter here.
        Ok(())
    }

    /// A JSON-RPC message arrived: keep it if it is the response to our request.
    fn message(&mut self, bytes: &[u8]) -> Result<(), BenchError> {
        let Some(id) = self.id else { return Ok(()) };
        let message: Value = serde_json::from_slice(bytes)
            .map_err(|e| BenchError::Http(format!("bad JSON-RPC message: {e}")))?;
        let is_response = message.get("result").is_some() || message.get("error").is_some();
        if is_response
            && message.get("id").and_then(Value::as_u64) == Some(id)
            && self.response.is_none()
        {
            self.response = Some(message);
            self.answered_at = Some(Instant::now());
        }
        Ok(())
    }

    fn finish(mut self) -> Result<(Option<Value>, Option<Instant>), BenchError> {
        if self.sse {
            // A last event without its blank line still counts.
            if !self.pending.is_empty() {
                let line = std::mem::take(&mut self.pending);
                self.sse_line(&line)?;
            }
            self.sse_line(b"")?;
        } else if !self.pending.iter().all(u8::is_ascii_whitespace) {
            let body = std::mem::take(&mut self.pending);
            self.message(&body)?;
        }
        Ok((self.response, self.answered_at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_response_is_found_across_chunk_boundaries_and_after_a_priming_event() {
        let mut body = Body::new(true, Some(7));
        let stream = b"id: a_0\nretry: 500\ndata: \n\n: keep-alive\n\nid: a_1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\r\n\r\nid: a_2\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"content\":[]}}\n\n";
        for piece in stream.chunks(5) {
            body.feed(piece).expect("feed");
        }
        let (response, answered) = body.finish().expect("finish");
        assert_eq!(response.expect("response")["id"], 7);
        assert!(answered.is_some());
    }

    #[test]
    fn other_ids_and_notifications_are_not_the_response() {
        let mut body = Body::new(true, Some(2));
        body.feed(b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n")
            .expect("feed");
        body.feed(
            b"data: {\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"sampling/createMessage\"}\n\n",
        )
        .expect("feed");
        assert!(body.finish().expect("finish").0.is_none());
    }

    #[test]
    fn json_body_is_parsed_at_the_end() {
        let mut body = Body::new(false, Some(3));
        body.feed(b"{\"jsonrpc\":\"2.0\",\"id\":3,").expect("feed");
        body.feed(b"\"error\":{\"code\":-32601,\"message\":\"x\"}}")
            .expect("feed");
        let (response, _) = body.finish().expect("finish");
        assert!(success(200, response).is_err());
    }
}
