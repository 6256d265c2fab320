//! Settings of the HTTP transport.

use std::time::Duration;

/// How the HTTP transport behaves. The defaults are safe for a server on a developer's
/// machine: loopback host names only, cross-origin browser requests refused.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// The endpoint path (default `/mcp`).
    pub path: String,
    /// Accepted `Host` header values (a name without port matches any port). `None`
    /// disables the check (for example behind a proxy that enforces it).
    pub allowed_hosts: Option<Vec<String>>,
    /// Accepted `Origin` values (exact, or `*`). `None` accepts an origin whose host is
    /// in `allowed_hosts`.
    pub allowed_origins: Option<Vec<String>>,
    /// The largest request body accepted (413 beyond).
    pub max_body_bytes: usize,
    /// Answer requests with one JSON object instead of an SSE stream (legacy era; messages
    /// sent before the response are then not delivered).
    pub json_response: bool,
    /// How often an idle SSE stream carries a keep-alive comment.
    pub keep_alive: Duration,
    /// For 2025-11-25 sessions: close a request's SSE connection after this long, so the
    /// client resumes with `GET` + `Last-Event-ID` (SSE polling). `None` keeps it open.
    pub poll_after: Option<Duration>,
    /// GET streams of one session kept open on this worker (at least 1). Each message of
    /// the session's standalone stream goes on exactly one of them (the newest, unless it
    /// closed); opening one more closes the session's oldest GET stream here, which holds
    /// nothing undelivered and which its client may resume with `Last-Event-ID`.
    pub max_get_streams_per_session: usize,
}

/// The default of [`HttpConfig::max_get_streams_per_session`]: real clients keep one or
/// two GET streams per session; a few more leave room for reconnects that overlap.
pub const DEFAULT_MAX_GET_STREAMS_PER_SESSION: usize = 8;

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            path: "/mcp".to_owned(),
            allowed_hosts: Some(vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()]),
            allowed_origins: None,
            max_body_bytes: 4 * 1024 * 1024,
            json_response: false,
            keep_alive: Duration::from_secs(15),
            poll_after: None,
            max_get_streams_per_session: DEFAULT_MAX_GET_STREAMS_PER_SESSION,
        }
    }
}
