//! The HTTP side of a Streamable HTTP upstream: one POST (or a GET resuming a stream) per
//! exchange, over the project's pooled outbound client (HTTP or HTTPS, proxies from the
//! environment), and its answer read as JSON or incrementally as SSE.

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use durable_mcp_outbound::{Outbound, OutboundError};
use http::{Method, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::Value;

use crate::ProxyError;

/// The session header of Streamable HTTP.
pub(crate) const SESSION_HEADER: &str = "mcp-session-id";
/// The negotiated version, sent on every request after `initialize`.
const VERSION_HEADER: &str = "mcp-protocol-version";
/// The largest JSON body or SSE event read from the upstream.
const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// Why an exchange with the upstream failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpError {
    /// The upstream could not be reached: nothing was sent.
    #[error("{0}")]
    Connect(String),
    /// Sending or reading failed (the upstream went away).
    #[error("{0}")]
    Io(String),
    /// The upstream answered 404 to a request with a session id: the session is gone.
    #[error("the upstream does not know the session")]
    SessionGone,
    /// The upstream answered with another status.
    #[error("the upstream answered HTTP {status}: {body}")]
    Status {
        /// The status.
        status: StatusCode,
        /// The start of its body.
        body: String,
    },
    /// The upstream sent something that is not what Streamable HTTP allows.
    #[error("the upstream broke the protocol: {0}")]
    Protocol(String),
}

impl From<HttpError> for ProxyError {
    fn from(error: HttpError) -> Self {
        ProxyError::Initialize(error.to_string())
    }
}

/// The upstream's endpoint.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    uri: Uri,
    client: Outbound,
}

impl Endpoint {
    /// `url` (`http[s]://host[:port]/path`); an `https://` one is verified against the
    /// Mozilla roots and the PEM certificates of `extra_roots_pem` (a private CA).
    pub(crate) fn parse(url: &str, extra_roots_pem: Option<&str>) -> Result<Self, ProxyError> {
        let unsupported = || {
            ProxyError::Protocol(format!(
                "unsupported upstream URL {url:?}: only http[s]://host[:port]/path"
            ))
        };
        let uri: Uri = url.parse().map_err(|_| unsupported())?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(unsupported());
        }
        let client = Outbound::new(extra_roots_pem)
            .map_err(|e| ProxyError::Protocol(format!("the upstream's CA: {e}")))?;
        Ok(Self { uri, client })
    }

    /// POST one JSON-RPC message, in session `session` (speaking `version`) if given.
    pub(crate) async fn post(
        &self,
        message: &Value,
        session: Option<&str>,
        version: Option<&str>,
        deadline: Duration,
    ) -> Result<Reply, HttpError> {
        let body = Bytes::from(message.to_string());
        self.exchange(Method::POST, body, session, version, None, deadline)
            .await
    }

    /// GET the stream `last_event_id` belongs to, from after that event (a resume).
    pub(crate) async fn resume(
        &self,
        last_event_id: &str,
        session: Option<&str>,
        version: Option<&str>,
        deadline: Duration,
    ) -> Result<Reply, HttpError> {
        self.exchange(
            Method::GET,
            Bytes::new(),
            session,
            version,
            Some(last_event_id),
            deadline,
        )
        .await
    }

    /// DELETE the session (best effort: an error is only logged).
    pub(crate) async fn delete(&self, session: &str, version: Option<&str>) {
        if let Err(error) = self
            .exchange(
                Method::DELETE,
                Bytes::new(),
                Some(session),
                version,
                None,
                Duration::from_secs(5),
            )
            .await
        {
            tracing::debug!(%error, "ending an upstream session failed");
        }
    }

    async fn exchange(
        &self,
        method: Method,
        body: Bytes,
        session: Option<&str>,
        version: Option<&str>,
        last_event_id: Option<&str>,
        deadline: Duration,
    ) -> Result<Reply, HttpError> {
        let io = |e: &dyn std::fmt::Display| HttpError::Io(format!("{} {method}: {e}", self.uri));
        let connect = async {
            let mut request = Request::builder()
                .method(method.clone())
                .uri(self.uri.clone())
                .header(header::ACCEPT, "application/json, text/event-stream");
            if method == Method::POST {
                request = request.header(header::CONTENT_TYPE, "application/json");
            }
            if let Some(session) = session {
                request = request.header(SESSION_HEADER, session);
            }
            if let Some(version) = version {
                request = request.header(VERSION_HEADER, version);
            }
            if let Some(id) = last_event_id {
                request = request.header("last-event-id", id);
            }
            let request = request.body(Full::new(body)).map_err(|e| io(&e))?;
            self.client
                .request(request)
                .await
                .map_err(|error| match error {
                    // Nothing was sent: the request may go again as it is.
                    OutboundError::Connect { .. } => HttpError::Connect(error.to_string()),
                    other => io(&other),
                })
        };
        // The deadline bounds getting the response's head; a stream is read as long as it lasts.
        let response = tokio::time::timeout(deadline, connect)
            .await
            .map_err(|_| {
                HttpError::Io(format!("{} did not answer within {deadline:?}", self.uri))
            })??;
        let status = response.status();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let session_id = header(SESSION_HEADER);
        let content_type = header(header::CONTENT_TYPE.as_str()).unwrap_or_default();
        let body = response.into_body();
        if status == StatusCode::NOT_FOUND && session.is_some() {
            return Err(HttpError::SessionGone);
        }
        if status == StatusCode::ACCEPTED {
            return Ok(Reply {
                session: session_id,
                body: Body::Accepted,
            });
        }
        if !status.is_success() {
            let text = read_all(body)
                .await
                .map(|b| String::from_utf8_lossy(&b[..b.len().min(500)]).into_owned())
                .unwrap_or_default();
            return Err(HttpError::Status { status, body: text });
        }
        let body = if content_type.starts_with("text/event-stream") {
            Body::Stream(Events::new(body))
        } else {
            let bytes = read_all(body).await?;
            if bytes.is_empty() {
                Body::Accepted
            } else {
                Body::Json(serde_json::from_slice(&bytes).map_err(|e| {
                    HttpError::Protocol(format!("a JSON body that does not parse: {e}"))
                })?)
            }
        };
        Ok(Reply {
            session: session_id,
            body,
        })
    }
}

async fn read_all(body: Incoming) -> Result<Bytes, HttpError> {
    let limited = http_body_util::Limited::new(body, MAX_MESSAGE);
    limited
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| HttpError::Io(format!("reading the upstream's answer: {e}")))
}

/// The upstream's answer to one exchange.
pub(crate) struct Reply {
    /// Its `Mcp-Session-Id` header.
    pub(crate) session: Option<String>,
    pub(crate) body: Body,
}

/// What an answer carries.
pub(crate) enum Body {
    /// Nothing (202, or an empty body).
    Accepted,
    /// One JSON-RPC message (or a batch).
    Json(Value),
    /// An SSE stream of messages.
    Stream(Events),
}

/// An SSE stream read incrementally: its messages, with the id of the last event.
pub(crate) struct Events {
    body: Incoming,
    buffer: BytesMut,
    /// The id of the last event read (to resume with), if the upstream names them.
    pub(crate) last_id: Option<String>,
    done: bool,
}

impl Events {
    fn new(body: Incoming) -> Self {
        Self {
            body,
            buffer: BytesMut::new(),
            last_id: None,
            done: false,
        }
    }

    /// The next JSON-RPC message of the stream; `None` when it ends.
    pub(crate) async fn next(&mut self) -> Result<Option<Value>, HttpError> {
        loop {
            while let Some(event) = self.take_event() {
                let (id, data) = parse_event(&event);
                if let Some(id) = id {
                    self.last_id = Some(id);
                }
                if data.trim().is_empty() {
                    continue; // a priming event, a comment, a retry field
                }
                return serde_json::from_str(&data).map(Some).map_err(|e| {
                    HttpError::Protocol(format!("an SSE event that is not JSON: {e}"))
                });
            }
            if self.done {
                return Ok(None);
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(mut data) = frame.into_data() {
                        self.buffer
                            .extend_from_slice(&data.copy_to_bytes(data.remaining()));
                        if self.buffer.len() > MAX_MESSAGE {
                            return Err(HttpError::Protocol(format!(
                                "an SSE event larger than {MAX_MESSAGE} bytes"
                            )));
                        }
                    }
                }
                Some(Err(error)) => {
                    return Err(HttpError::Io(format!(
                        "reading the upstream's stream: {error}"
                    )));
                }
                None => self.done = true,
            }
        }
    }

    /// The next complete event's text (up to its blank line); the rest at the end of the
    /// stream.
    fn take_event(&mut self) -> Option<String> {
        let text = std::str::from_utf8(&self.buffer).ok()?;
        let normalized_end = ["\r\n\r\n", "\n\n", "\r\r"]
            .iter()
            .filter_map(|sep| text.find(sep).map(|at| (at, sep.len())))
            .min();
        match normalized_end {
            Some((at, len)) => {
                let event = text[..at].to_owned();
                self.buffer.advance(at + len);
                Some(event)
            }
            None if self.done && !text.trim().is_empty() => {
                let event = text.to_owned();
                self.buffer.clear();
                Some(event)
            }
            None => None,
        }
    }
}

/// An event's id (if it has one) and its data lines joined.
fn parse_event(event: &str) -> (Option<String>, String) {
    let mut id = None;
    let mut data = Vec::new();
    for line in event.lines() {
        let (field, value) = line
            .split_once(':')
            .map_or((line, ""), |(f, v)| (f, v.strip_prefix(' ').unwrap_or(v)));
        match field {
            "id" => id = Some(value.to_owned()),
            "data" => data.push(value),
            _ => {}
        }
    }
    (id, data.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_gives_its_id_and_its_data_lines_joined() {
        assert_eq!(
            parse_event("id: 7\ndata: {\"a\":\ndata: 1}"),
            (Some("7".into()), "{\"a\":\n1}".into())
        );
        assert_eq!(
            parse_event(": comment\nretry: 500\nid:p0\ndata:"),
            (Some("p0".into()), String::new())
        );
        assert_eq!(parse_event("event: message\ndata: x"), (None, "x".into()));
    }

    #[test]
    fn only_http_and_https_urls_with_a_host_are_upstreams() {
        let endpoint = Endpoint::parse("http://127.0.0.1:8080/mcp", None).unwrap();
        assert_eq!(endpoint.uri.to_string(), "http://127.0.0.1:8080/mcp");
        assert!(Endpoint::parse("https://example.invalid/mcp", None).is_ok());
        assert!(Endpoint::parse("ftp://example.invalid/mcp", None).is_err());
        assert!(Endpoint::parse("not a url", None).is_err());
        assert!(Endpoint::parse("https://example.invalid/mcp", Some("not a pem")).is_err());
    }
}
